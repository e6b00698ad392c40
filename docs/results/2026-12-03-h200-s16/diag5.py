"""Seed-5 diagnosis: run case k of a seed with a chosen subset of its variants, in this process."""
import sys, time, json, faulthandler
faulthandler.dump_traceback_later(float(sys.argv[4]) if len(sys.argv) > 4 else 35, exit=True)
import numpy as np
sys.path.insert(0, ".")
from decoder_shell.replay.selfcheck import random_case, random_variants, perturb, run_case
from decoder_shell.commands.program import build_cycle, reference
from decoder_shell.corpus.synth import injected_values
from decoder_shell.drivers import get_driver

seed, case, keep = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]  # keep: "all", "none", a variant name, or "i:<idx>"
rng = np.random.default_rng(seed)
for k in range(case + 1):
    g, c = random_case(rng); cyc = build_cycle(g, c)
    values = perturb(rng, injected_values(cyc, [seed, k]), cyc)
    v = random_variants(rng, cyc)
if keep == "none": v = {}
elif keep.startswith("i:"): v = {int(keep[2:]): v[int(keep[2:])]}
elif keep != "all": v = {i: x for i, x in v.items() if x == keep}
drv = get_driver("cuda", placement="emulated")
t0 = time.time()
expected = reference(cyc, values)
mode = sys.argv[5] if len(sys.argv) > 5 else "both"
from collections import Counter
from decoder_shell.replay.compare import compare_outputs
n, bad = 0, Counter()
with drv.load(cyc, v) as s:
    for r in range(cyc.ranks):
        for bid, a in values[r].items():
            s.write(r, bid, a)
    print("loaded", round(time.time() - t0, 1), flush=True)
    for graph in {"both": (True, False), "graph": (True,), "eager": (False,)}[mode]:
        s.poison(); s.run(graph=graph)
        print("ran graph" if graph else "ran eager", round(time.time() - t0, 1), flush=True)
        c = compare_outputs(s, cyc, expected); n += c.elements; bad.update(Counter(c.by_op))
print(json.dumps({"seed": seed, "case": case, "keep": keep, "mode": mode, "variants": {str(i): x for i, x in v.items()},
                  "elements": n, "bad": sum(bad.values()), "s": round(time.time() - t0, 1)}), flush=True)
