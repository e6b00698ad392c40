"""verify --infer lists every behaviour of the ring family that fits and refuses to pick between
several unless the capture's probes decide."""

import json
import subprocess
import sys
from pathlib import Path

from decoder_shell.contracts.allreduce import RingContract, allreduce
from decoder_shell.contracts.probe import probe_inputs
from decoder_shell.corpus.store import Corpus
from decoder_shell.corpus.synth import synth
from decoder_shell.geometry import Geometry

ROOT = Path(__file__).resolve().parents[1]
GLOO = RingContract(2, 0, -1, -1, "hop")


def _verify(path, *flags):
    r = subprocess.run([sys.executable, "-m", "decoder_shell.cli", "verify", str(path), "--json", "--infer", *flags],
                       capture_output=True, text=True, timeout=120, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    return r.returncode, json.loads(r.stdout)


def test_several_fitting_behaviours_are_listed_and_refused_until_a_probe_decides(tmp_path):
    # 3 ranks, 1 row of 2 elements: too few random values to tell ring orders apart
    g = Geometry(preset="t", hidden=2, layers=1, ranks=3, verify_rows=1, draft_rows=0)
    out = tmp_path / "c"
    synth(g, out, seed=1, contract=GLOO)
    code, rep = _verify(out)
    inf = rep["inference"]
    assert code == 1 and not inf["found"] and len(inf["consistent"]) > 1, inf
    assert "no probe decides" in inf["reason"]
    # the probes a capture runs on the service's group (here: the service folds as GLOO)
    c = Corpus.open(out)
    probes = []
    for n, kind in ((5, "order"), (11, "order"), (5, "rounding")):
        y = allreduce(probe_inputs(3, n, _bf16(), kind), GLOO)
        digest, _ = c.blobs.put(y.tobytes())
        probes.append({"n": n, "dtype": g.reduce_dtype, "kind": kind, "out": digest})
    c.info.collective["probes"] = probes
    c.save()
    code, rep = _verify(out, "--record")
    inf = rep["inference"]
    assert code == 0 and inf["found"] and len(inf["consistent"]) == 1 and inf["probes"] == 3, inf
    got = RingContract.from_json(inf["contract"])
    for n in (5, 11, 4099):  # the identified behaviour is GLOO's on any input
        for kind in ("order", "rounding"):
            xs = probe_inputs(3, n, _bf16(), kind)
            assert allreduce(xs, got).tobytes() == allreduce(xs, GLOO).tobytes()
    assert json.loads((out / "corpus.json").read_text())["collective"]["how"] == "inferred"


def _bf16():
    from decoder_shell.contracts.numerics import BF16
    return BF16
