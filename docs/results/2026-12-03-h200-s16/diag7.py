"""Eager launches one at a time, synchronizing after each: which kernel does not finish."""
import sys, time, json, faulthandler, os
hidden, ranks, rows, var, tmo = sys.argv[1:6]
op = sys.argv[6] if len(sys.argv) > 6 else "mhc_post_pre"
faulthandler.dump_traceback_later(float(tmo), exit=True)
sys.path.insert(0, ".")
from decoder_shell.commands.program import build_cycle, reference
from decoder_shell.contracts.allreduce import RingContract
from decoder_shell.corpus.synth import injected_values
from decoder_shell.drivers import get_driver
from decoder_shell.geometry import Geometry
g = Geometry(preset="random", hidden=int(hidden), layers=2, ranks=int(ranks), verify_rows=int(rows), draft_rows=0)
cyc = build_cycle(g, RingContract())
vals = injected_values(cyc, [3, 4])
v = {c.index: var for c in cyc.commands if c.op == op}
drv = get_driver("cuda", placement="emulated")
with drv.load(cyc, v) as s:
    for r in range(cyc.ranks):
        for bid, a in vals[r].items():
            s.write(r, bid, a)
    s.poison()
    names = {int(f): k for k, f in s.modules.funcs.items()} if hasattr(s, "modules") else {}
    for i, ln in enumerate(s.graph.eager):
        print(i, names.get(int(ln.func), "?"), ln.grid, ln.block, end=" ", flush=True)
        s.cu.cuLaunchKernel(ln.func, *ln.grid, *ln.block, ln.shared, s.stream, ln.params_ptr, 0)
        if os.environ.get("KTRACE") and "_cl_" in names.get(int(ln.func), ""):
            import numpy as np
            time.sleep(2)
            for mod in s.modules.modules:
                try:
                    dptr, size = s.cu.cuModuleGetGlobal(mod, b"kdbg")
                except Exception:
                    continue
                buf = np.zeros(1024, np.uint32)
                s.cu.cuMemcpyDtoH(buf.ctypes.data, dptr, 4096)
                print("\ntrace lane 0 (block rows: crank, cols: warp):\n", buf[:64].reshape(8, 8), "\nlane 24:\n", buf[512:576].reshape(8, 8), flush=True)
                break
        s.cu.cuStreamSynchronize(s.stream)
        print("ok", flush=True)
print("all done")
