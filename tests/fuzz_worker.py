"""Runs `shell` commands for the fuzz suite, one per stdin line, under a memory and a time limit.

Argument 1: seconds per command; argument 2: the address-space limit in bytes (RLIMIT_AS, set
before anything is imported). Each command's exit code, stderr, time and any escaped exception
(a traceback is a failure of the shell, not of the input) is one JSON line on stdout.
"""

import contextlib
import io
import json
import resource
import signal
import sys
import time
import traceback

LIMIT_S, LIMIT_AS = float(sys.argv[1]), int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_AS, (LIMIT_AS, LIMIT_AS))

from decoder_shell import cli  # noqa: E402  (after the limit, so imports count against it)


class Overtime(BaseException):
    pass


def _alarm(*_):
    raise Overtime()


signal.signal(signal.SIGALRM, _alarm)
out = sys.stdout
for line in sys.stdin:
    argv = json.loads(line)
    err = io.StringIO()
    crash = ""
    t0 = time.monotonic()
    signal.setitimer(signal.ITIMER_REAL, LIMIT_S)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            code = cli.main(argv)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 2
    except Overtime:
        code, crash = -1, "over the time limit"
    except BaseException:  # noqa: BLE001 - reported to the test as a crash
        code, crash = -2, traceback.format_exc()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    out.write(json.dumps({"code": code, "stderr": err.getvalue(), "crash": crash, "s": time.monotonic() - t0,
                          "maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}) + "\n")
    out.flush()
