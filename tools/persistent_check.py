"""One command for the persistent cycle on a GPU: exactness, watchdog, replay, where the time goes, bench.

1. random cycles (decoder_shell.replay.selfcheck: random geometries, ring contracts, magnitudes and
   special values) through the persistent kernel, launched twice each, every element of every rank
   compared bit-for-bit with the contracts; the FMA build of the kernel must be caught;
2. the watchdog: a grid whose last block never arrives at a barrier must end with one line;
3. the gate candidate: `shell gate --candidate cycle=persistent` on the shipped corpus;
4. a dsv4-flash TP4 corpus (verify M=2 + draft M=1) replayed through the persistent kernel,
   --epochs graph epochs and --changed changed epochs, all exact;
5. tools/persistent_profile.py at M=2 and M=8 (per-step time vs HBM time of the weights and barrier cost);
6. tools/bench_replay.py --persistent --only-main at M=1/2/4/8 (graph path, persistent, launch floor,
   torch CUDA graph, vLLM peers where --vllm-src is given).
Everything lands in --out (JSON and logs); a short table is printed last. Exit 0 when every check
is exact, the FMA build is caught and the watchdog fired.

    python tools/persistent_check.py --out $OUT [--vllm-src /path/holding/vllm] [--cases 24]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from decoder_shell.commands.program import build_cycle, reference  # noqa: E402
from decoder_shell.contracts.allreduce import RingContract  # noqa: E402
from decoder_shell.corpus.synth import injected_values  # noqa: E402
from decoder_shell.drivers import get_driver  # noqa: E402
from decoder_shell.errors import MismatchError  # noqa: E402
from decoder_shell.geometry import Geometry  # noqa: E402
from decoder_shell.replay.selfcheck import run_case, self_check  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def sh(cmd: list[str], log: Path, timeout: float) -> tuple[int, str]:
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    log.write_text(r.stdout + "\n--- stderr\n" + r.stderr)
    return r.returncode, r.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--cases", type=int, default=24)
    ap.add_argument("--seed", type=int, default=15)
    ap.add_argument("--epochs", type=int, default=70)
    ap.add_argument("--changed", type=int, default=16)
    ap.add_argument("--bench-epochs", type=int, default=30)
    ap.add_argument("--vllm-src", type=Path)
    args = ap.parse_args()
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    res: dict = {}
    ok = True
    pdrv = get_driver("cuda", placement="emulated", cycle="persistent")

    # 1. random cycles, and the FMA build caught
    summary = self_check(pdrv, args.cases, args.seed, variants=False)
    summary["failures"] = summary["failures"][:5]
    res["random"] = summary
    ok &= summary["mismatching_elements"] == 0
    g = Geometry(preset="random", hidden=4096, layers=1, ranks=2, verify_rows=2, draft_rows=0)
    cyc = build_cycle(g, RingContract())
    values = injected_values(cyc, [args.seed, 99999])
    _, fma_bad = run_case(pdrv, cyc, values, {c.index: "persistent-fma" for c in cyc.commands}, reference(cyc, values))
    res["fma_mismatches"] = dict(fma_bad)
    ok &= sum(fma_bad.values()) > 0
    print(f"[{time.time() - t0:.0f}s] random cases: {summary['mismatching_elements']} mismatching of "
          f"{summary['elements_compared']}; fma build: {sum(fma_bad.values())} mismatching", flush=True)

    # 2. the watchdog
    from decoder_shell.drivers.cuda.persistent import PersistentSession
    pdrv.cu.cuCtxSetCurrent(pdrv.ctx)
    w0 = time.time()
    s = PersistentSession(pdrv, cyc, watchdog_ms=300, skip_step=2)
    try:
        s.run()
        res["watchdog"] = {"fired": False}
    except MismatchError as e:
        res["watchdog"] = {"fired": True, "message": str(e), "seconds": round(time.time() - w0, 2)}
    finally:
        s.close()
    ok &= res["watchdog"]["fired"] and "\n" not in res["watchdog"].get("message", "")
    print(f"[{time.time() - t0:.0f}s] watchdog: {res['watchdog']}", flush=True)

    # 3. the gate candidate on the shipped corpus
    rc, _ = sh([sys.executable, "-m", "decoder_shell.cli", "gate", str(ROOT / "corpus"), "--driver", "cuda",
                "--placement", "emulated", "--candidate", "cycle=persistent", "--epochs", "20", "--changed", "4",
                "--reps", "2", "--out", str(out / "gate.json")], out / "gate.log", 300)
    gate = json.loads((out / "gate.json").read_text()) if (out / "gate.json").exists() else {}
    res["gate"] = {"exit": rc, "verdict": gate.get("verdict"), "exactness": gate.get("exactness_verdict")}
    print(f"[{time.time() - t0:.0f}s] gate cycle=persistent: exit {rc}", flush=True)

    # 4. dsv4-flash TP4 replay, graph and changed epochs
    corpus = out / "flash4"
    if not corpus.exists():
        sh([sys.executable, "-m", "decoder_shell.cli", "synth", "--preset", "dsv4-flash", "--tp", "4",
            "--verify-rows", "2", "--draft-rows", "1", "--out", str(corpus)], out / "synth.log", 300)
    from decoder_shell.cli import open_corpus
    from decoder_shell.replay.engine import replay
    r = replay(open_corpus(corpus), pdrv, epochs=args.epochs, changed=args.changed)
    rj = r.to_json()
    (out / "replay.json").write_text(json.dumps(rj, indent=1))
    graph_ok = sum(1 for e in r.epochs if e.kind == "graph" and e.exact)
    changed_ok = sum(1 for e in r.epochs if e.kind == "changed" and e.exact)
    times = sorted(e.cycle_ms for e in r.epochs if e.kind == "graph")
    res["replay"] = {"graph_exact": f"{graph_ok}/{args.epochs}", "changed_exact": f"{changed_ok}/{args.changed}",
                     "exact": r.exact, "median_ms": times[len(times) // 2] if times else None}
    ok &= r.exact
    print(f"[{time.time() - t0:.0f}s] replay: {res['replay']}", flush=True)

    # 5. where the time goes
    import persistent_profile
    prof = [persistent_profile.profile(m) for m in (2, 8)]
    os.environ["DECODER_SHELL_CUDA_PERSIST_OPG"] = "4"  # the other build, for the record
    prof.append(persistent_profile.profile(2))
    del os.environ["DECODER_SHELL_CUDA_PERSIST_OPG"]
    (out / "profile.json").write_text(json.dumps(prof, indent=1))
    for p in prof:
        print(persistent_profile.render(p) + "\n", flush=True)

    # 6. the bench
    cmd = [sys.executable, "tools/bench_replay.py", "--rows", "1", "2", "4", "8", "--epochs", str(args.bench_epochs),
           "--persistent", "--only-main", "--json", str(out / "bench.json")]
    if args.vllm_src:
        cmd += ["--vllm-src", str(args.vllm_src)]
    rc, text = sh(cmd, out / "bench.log", 420)
    res["bench_exit"] = rc
    (out / "check.json").write_text(json.dumps(res, indent=1, default=str))
    print(text[text.find("\ncuda"):] if "\ncuda" in text else f"bench exit {rc}: see {out / 'bench.log'}")
    print("| check | result |\n|---|---|")
    print(f"| random cycles ({args.cases}) | {summary['mismatching_elements']} mismatching of {summary['elements_compared']} |")
    print(f"| FMA build caught | {sum(fma_bad.values())} mismatching |")
    print(f"| watchdog | {'fired: ' + res['watchdog'].get('message', '')[:90] if res['watchdog']['fired'] else 'DID NOT FIRE'} |")
    print(f"| gate cycle=persistent (shipped corpus) | exit {res['gate']['exit']}, {res['gate']['verdict']}, "
          f"{res['gate']['exactness']} |")
    print(f"| dsv4-flash TP4 replay | {res['replay']['graph_exact']} graph, {res['replay']['changed_exact']} changed, "
          f"median {res['replay']['median_ms']} ms |")
    print(f"| total | {time.time() - t0:.0f} s, {'OK' if ok else 'FAILED'} |")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
