"""One process per rank: each rank's CudaSession in its own process and CUDA context.

The parent spawns one worker per rank, hands each the cycle, collects every rank's IPC handles and
gives each worker its peers' handles; workers map them and build their graphs. After that the
parent's Session calls become messages: writes, reads and poisoning go to the rank that owns the
buffer; `run` releases every worker through one barrier so the ranks launch together, and each
reports its own device time (its events around its own chain). The all-reduce kernels meet through
epoch-tagged arrival slots in device memory, so a rank that launched early waits on the device.
On a host with fewer GPUs than ranks, several ranks share a device (a test of the protocol: their
contexts time-share the GPU, so the times are not cycle times).
"""

from __future__ import annotations

import multiprocessing as mp
import traceback

from ...errors import ShellError
from ..base import Session
from .api import CudaError

#: Seconds a rank may take to answer before the replay is declared stuck (a peer died, a wait never ended).
TIMEOUT_S = 600.0


def _worker(rank: int, device: int, cycle, variants, pdl: bool, barrier, conn):
    from . import CudaDriver
    from .session import CudaSession
    session = None
    try:
        drv = CudaDriver(device)
        from . import persistent_form
        form = persistent_form(cycle, variants, "graph")
        if form:  # the whole cycle as one persistent kernel of this rank
            from .persistent import PersistentSession
            session = PersistentSession(drv, cycle, rank=rank, fma=form == "persistent-fma",
                                        flags=form == "persistent-flags")
        else:
            session = CudaSession(drv, cycle, variants, rank=rank, pdl=pdl, build=False)
        conn.send(("ok", session.export_handles()))
        session.attach_peers(conn.recv())
        session.build()
        conn.send(("ok", f"{drv.gpu} (device {device})"))
        while True:
            op, *args = conn.recv()
            if op == "close":
                break
            if op == "run":
                barrier.wait(timeout=TIMEOUT_S)
                out = session.run(args[0])[rank]
            elif op == "write":
                out = session.write(rank, *args)
            elif op == "read":
                out = session.read(rank, *args)
            elif op == "read_many":
                out = session.read_many(rank, *args)
            elif op == "expect":
                out = session.set_expected(rank, *args)
            elif op == "poison":
                out = session.poison()
            else:
                raise ValueError(f"unknown request {op!r}")
            conn.send(("ok", out))
    except ShellError as e:
        conn.send(("error", f"rank {rank}: {e}", getattr(e, "exit_code", 1)))
    except Exception as e:  # a worker must answer, never leave the parent waiting
        conn.send(("error", f"rank {rank}: {type(e).__name__}: {e} ({traceback.format_exc().splitlines()[-2].strip()})", 1))
    finally:
        if session is not None:
            try:
                session.close()
            except Exception:
                pass
        conn.close()


class ProcessSession(Session):
    """Session whose ranks are worker processes, rank r on device devices[r]."""

    timing_meaningful = True

    def __init__(self, devices: list[int], cycle, variants: dict | None, pdl: bool = True):
        self.cycle = cycle
        R = cycle.ranks
        self.devices = devices
        self.shared = len(set(devices)) < R
        self.timing_meaningful = not self.shared
        self.timing_note = "ranks time-share one GPU: a test of the protocol, not cycle times"
        ctx = mp.get_context("spawn")
        barrier = ctx.Barrier(R)
        self.conns, self.procs = [], []
        try:
            for r in range(R):
                parent, child = ctx.Pipe()
                p = ctx.Process(target=_worker, args=(r, devices[r], cycle, variants, pdl, barrier, child),
                                daemon=True, name=f"decoder-shell-rank{r}")
                p.start()
                child.close()
                self.conns.append(parent)
                self.procs.append(p)
            handles = {r: h for r, h in enumerate(self._gather())}
            for c in self.conns:
                c.send(handles)
            self.gpus = self._gather()
        except BaseException:
            self._kill()
            raise

    # --- messaging -------------------------------------------------------------------------
    def _answer(self, r: int):
        c = self.conns[r]
        if not c.poll(TIMEOUT_S):
            self._kill()
            raise CudaError(f"rank {r} did not answer within {TIMEOUT_S:.0f} s (a peer died or a wait never ended)")
        try:
            msg = c.recv()
        except EOFError:
            self._kill()
            raise CudaError(f"rank {r}'s process exited (exit code {self.procs[r].exitcode})") from None
        if msg[0] == "error":
            self._kill()
            err = ShellError(msg[1])
            err.exit_code = msg[2]
            raise err
        return msg[1]

    def _gather(self) -> list:
        return [self._answer(r) for r in range(len(self.conns))]

    def _ask(self, r: int, *msg):
        self.conns[r].send(msg)
        return self._answer(r)

    def _kill(self):
        for p in self.procs:
            if p.is_alive():
                p.kill()
        for p in self.procs:
            p.join(timeout=10)
        self.procs = []

    # --- Session interface -------------------------------------------------------------------
    def write(self, rank, buffer_id, value):
        self._ask(rank, "write", buffer_id, value)

    def read(self, rank, buffer_id):
        return self._ask(rank, "read", buffer_id)

    def read_many(self, rank, buffer_ids):
        return self._ask(rank, "read_many", list(buffer_ids))

    def set_expected(self, rank, buffer_id, value):
        self._ask(rank, "expect", buffer_id, value)

    def poison(self):
        for c in self.conns:
            c.send(("poison",))
        self._gather()

    def run(self, graph=True):
        for c in self.conns:
            c.send(("run", graph))
        return [float(t) for t in self._gather()]

    def close(self):
        if not self.procs:
            return
        for c in self.conns:
            try:
                c.send(("close",))
            except (BrokenPipeError, OSError):
                pass
        for p in self.procs:
            p.join(timeout=30)
        self._kill()
