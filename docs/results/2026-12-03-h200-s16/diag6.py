"""One mHC variant on every mhc_post_pre command of a made-up cycle: does it finish, is it exact."""
import sys, time, json, faulthandler
hidden, ranks, rows, var, mode, tmo = sys.argv[1:7]
faulthandler.dump_traceback_later(float(tmo), exit=True)
sys.path.insert(0, ".")
from decoder_shell.commands.program import build_cycle, reference
from decoder_shell.contracts.allreduce import RingContract
from decoder_shell.corpus.synth import injected_values
from decoder_shell.drivers import get_driver
from decoder_shell.geometry import Geometry
from decoder_shell.replay.compare import compare_outputs
g = Geometry(preset="random", hidden=int(hidden), layers=2, ranks=int(ranks), verify_rows=int(rows), draft_rows=0)
cyc = build_cycle(g, RingContract())
vals = injected_values(cyc, [3, 4])
exp = reference(cyc, vals)
op = sys.argv[7] if len(sys.argv) > 7 else "mhc_post_pre"
v = {c.index: var for c in cyc.commands if c.op == op}
drv = get_driver("cuda", placement="emulated") if not __import__("os").environ.get("CPU") else get_driver("cpu")
t0 = time.time()
with drv.load(cyc, v) as s:
    for r in range(cyc.ranks):
        for bid, a in vals[r].items():
            s.write(r, bid, a)
    s.poison(); s.run(graph=mode == "graph")
    c = compare_outputs(s, cyc, exp)
print(json.dumps({"hidden": hidden, "ranks": ranks, "rows": rows, "var": var, "op": op, "mode": mode,
                  "cmds": sorted(v), "elements": c.elements, "bad": sum(dict(c.by_op).values()), "s": round(time.time() - t0, 1)}))
