"""One command for the persistent cycle on a GPU: exactness, watchdog, replay, where the time goes, bench.

1. tools/bench_replay.py --persistent --only-main at M=1/2/4/8 in its own process (graph path,
   persistent with grid barriers and with row flags, launch floor, torch CUDA graph, vLLM peers where
   --vllm-src is given; the persistent rows carry their own mismatch counts);
2. random cycles (decoder_shell.replay.selfcheck: random geometries, ring contracts, magnitudes and
   special values) through the persistent kernel in both modes, launched twice each, every element
   of every rank compared bit-for-bit with the contracts; the FMA build of the kernel must be caught;
3. the watchdog: a grid whose last block never arrives at a barrier must end with one line;
4. a dsv4-flash TP4 corpus (verify M=2 + draft M=1) replayed through the persistent kernel,
   --epochs graph epochs and --changed changed epochs, all exact (row flags: 20 + 4), beside the
   graph path's time on the same corpus;
5. tools/persistent_profile.py at M=2 and M=8, both modes (per step, and inside a step, against the
   HBM time of the weights and the cost of one barrier);
6. the gate candidate `shell gate --candidate cycle=persistent` on the shipped corpus, and the shipped
   corpus replayed with one persistent kernel per rank process (`--placement processes`);
7. the bench at --tp 1, M=2.
Each stage's failure is one line in the results and the others still run; no stage starts after
--budget seconds (the bench runs in its own process, so a kernel fault cannot take its numbers).
Everything lands in --out (JSON and logs); a short table is printed last. Exit 0 when every check
is exact, the FMA build is caught and the watchdog fired.

    python tools/persistent_check.py --out $OUT [--vllm-src /path/holding/vllm] [--cases 16]

0. (first) tools/sinkhorn_bench.py: the post/comb chain's pieces timed inside one warp per Sinkhorn
   form (`lanes`, the default; `regs`, `regs-shared`), every output checked bit-for-bit; then the
   other builds (--sinkhorn-forms: a form, +late for a unit's weights requested after post and comb)
   through the persistent kernel (and the forms through the graph path) on random cycles; the bench
   carries a graph-path row per form and a persistent row per build, same run, and the profile one
   more M=2 entry for the newest build.

--quick (under 8 minutes on an H200 from a cold kernel cache): the same stages with fewer cases and
epochs (8 random cases, 4 with row flags, 2 per benched build, 30 + 8 replay epochs), the bench with
the last two of --sinkhorn-forms only (`regs-shared`, `regs-shared+late` by default), the
micro-benchmark without its ptxas report, the profile at M=2 and M=8 in the default build (row flags
and the newest build at M=2), and a 390 s budget.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from decoder_shell.commands.program import build_cycle, reference  # noqa: E402
from decoder_shell.contracts.allreduce import RingContract  # noqa: E402
from decoder_shell.corpus.synth import injected_values  # noqa: E402
from decoder_shell.drivers import get_driver  # noqa: E402
from decoder_shell.errors import MismatchError, ShellError  # noqa: E402
from decoder_shell.geometry import Geometry  # noqa: E402
from decoder_shell.replay.selfcheck import run_case, self_check  # noqa: E402
from bench_replay import FORMS, sinkhorn_form  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def sh(cmd: list[str], log: Path, timeout: float) -> tuple[int, str]:
    """Run a step in its own process (a kernel fault there cannot take this one's context with it)."""
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=max(1.0, timeout), cwd=ROOT)
    except subprocess.TimeoutExpired as e:
        text = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        log.write_text(text + f"\n--- timed out after {timeout:.0f} s")
        return 124, text
    log.write_text(r.stdout + "\n--- stderr\n" + r.stderr)
    return r.returncode, r.stdout


class Stages:
    """Each check runs on; an exception is one line in the results, and no stage starts past the budget."""

    def __init__(self, budget: float):
        self.t0, self.budget, self.res, self.ok = time.time(), budget, {}, True

    def left(self) -> float:
        return self.budget - (time.time() - self.t0)

    def run(self, name: str, fn):
        if self.left() <= 0:
            self.res[name] = {"skipped": f"budget of {self.budget:.0f} s spent"}
            self.ok = False
        else:
            try:
                value, good = fn()
                self.res[name] = value
                self.ok &= bool(good)
            except Exception as e:
                self.res[name] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}
                self.ok = False
        print(f"[{time.time() - self.t0:.0f}s] {name}: {json.dumps(self.res[name], default=str)[:400]}", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--cases", type=int, default=16)
    ap.add_argument("--seed", type=int, default=15)
    ap.add_argument("--epochs", type=int, default=70)
    ap.add_argument("--changed", type=int, default=16)
    ap.add_argument("--bench-epochs", type=int, default=30)
    ap.add_argument("--vllm-src", type=Path, help="folder holding vllm/ (or a .tgz of vLLM's .py files)")
    ap.add_argument("--vllm-paths", nargs="+", default=["triton", "tilelang"], choices=["triton", "tilelang"])
    ap.add_argument("--budget", type=float, default=510.0, help="seconds; no stage starts after this")
    ap.add_argument("--quick", action="store_true", help="fewer cases and epochs, default build only (< 8 min)")
    ap.add_argument("--sinkhorn-forms", nargs="*", default=["regs", "lanes+late", "regs-shared", "regs-shared+late"],
                    choices=FORMS, help="builds besides the default (bench_replay.FORMS): checked on random cycles "
                                        "and benched; the micro-benchmark always times every form")
    args = ap.parse_args()
    if args.quick:
        args.cases, args.epochs, args.changed = min(args.cases, 8), min(args.epochs, 30), min(args.changed, 8)
        args.bench_epochs, args.budget = min(args.bench_epochs, 20), min(args.budget, 390.0)
    bench_forms = args.sinkhorn_forms[-2:] if args.quick else args.sinkhorn_forms  # the M table: two builds when quick
    flag_epochs, flag_changed = (10, 2) if args.quick else (20, 4)
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    st = Stages(args.budget)
    bench_text: list = []
    micro_text: list = []
    try:
        pdrv = get_driver("cuda", placement="emulated", cycle="persistent")
    except ShellError as e:
        print(f"persistent_check: {e}", file=sys.stderr)
        return e.exit_code
    g = Geometry(preset="random", hidden=4096, layers=1, ranks=2, verify_rows=2, draft_rows=0)
    cyc = build_cycle(g, RingContract())

    def random_cases():  # 1. random cycles
        summary = self_check(pdrv, args.cases, args.seed, variants=False)
        summary["failures"] = summary["failures"][:5]
        return summary, summary["mismatching_elements"] == 0 and summary["elements_compared"] > 0

    def random_flags():  # ... and with row flags instead of grid barriers
        fdrv = get_driver("cuda", placement="emulated", cycle="persistent-flags")
        summary = self_check(fdrv, max(4, args.cases // 2), args.seed + 1, variants=False)
        summary["failures"] = summary["failures"][:5]
        return summary, summary["mismatching_elements"] == 0 and summary["elements_compared"] > 0

    def sinkhorn_bench():  # 0. the post/comb chain's pieces per Sinkhorn form, every output checked
        rc, text = sh([sys.executable, "tools/sinkhorn_bench.py", "--json", str(out / "sinkhorn.json"),
                       *(["--no-registers"] if args.quick else [])], out / "sinkhorn.log", min(150.0, st.left()))
        micro_text.append(text)
        v = json.loads((out / "sinkhorn.json").read_text()) if (out / "sinkhorn.json").exists() else {}
        return ({"exit": rc, **{f: {"exact": r["exact"], **r["mismatches"]} for f, r in v.get("forms", {}).items()}},
                rc == 0)

    def random_forms():  # the other builds, random cycles, persistent kernel and (Sinkhorn forms) graph path
        res = {}
        gdrv = get_driver("cuda", placement="emulated")
        for form in bench_forms:
            with sinkhorn_form(form):
                for kind, d in (("persistent", pdrv), ("graph", gdrv)):
                    if kind == "graph" and form.endswith("+late"):
                        continue
                    summary = self_check(d, max(2, args.cases // 4), args.seed + 2, variants=kind == "graph")
                    res[f"{form} {kind}"] = {k: summary[k] for k in ("elements_compared", "mismatching_elements")}
        return res, all(r["mismatching_elements"] == 0 and r["elements_compared"] > 0 for r in res.values())

    def fma():  # ... and the FMA build caught
        values = injected_values(cyc, [args.seed, 99999])
        _, bad = run_case(pdrv, cyc, values, {c.index: "persistent-fma" for c in cyc.commands}, reference(cyc, values))
        return {"mismatching": sum(bad.values()), "by_op": dict(bad)}, sum(bad.values()) > 0

    def watchdog():  # 2. a block that never arrives
        from decoder_shell.drivers.cuda.persistent import PersistentSession
        pdrv.cu.cuCtxSetCurrent(pdrv.ctx)
        w0 = time.time()
        with PersistentSession(pdrv, cyc, watchdog_ms=300, skip_step=2) as s:
            try:
                s.run()
            except MismatchError as e:
                return {"fired": True, "message": str(e), "seconds": round(time.time() - w0, 2)}, "\n" not in str(e)
        return {"fired": False}, False

    def gate():  # 3. the gate candidate on the shipped corpus
        rc, _ = sh([sys.executable, "-m", "decoder_shell.cli", "gate", str(ROOT / "corpus"), "--driver", "cuda",
                    "--placement", "emulated", "--candidate", "cycle=persistent", "--epochs", "20", "--changed", "4",
                    "--reps", "2", "--out", str(out / "gate.json")], out / "gate.log", min(240, st.left()))
        v = json.loads((out / "gate.json").read_text()) if (out / "gate.json").exists() else {}
        return ({"exit": rc, "verdict": v.get("verdict"), "exactness": v.get("exactness_verdict"),
                 "saved_ms": v.get("saved_ms")}, v.get("exactness_verdict") == "exact")

    def processes():  # 3b. one persistent kernel per rank process (the shipped corpus' 2 ranks share this GPU)
        rc, text = sh([sys.executable, "-m", "decoder_shell.cli", "replay", str(ROOT / "corpus"), "--driver", "cuda",
                       "--placement", "processes", "--cycle", "persistent", "--epochs", "8", "--changed", "2"],
                      out / "processes.log", min(240, st.left()))
        good = rc == 0 and "8/8 graph epochs exact" in text and "2/2 changed epochs exact" in text
        return {"exit": rc, "exact": good}, good

    def flash_replay():  # 4. dsv4-flash TP4, graph and changed epochs
        corpus = Path(tempfile.gettempdir()) / "decoder-shell-check-flash4"  # large: kept out of --out
        if not corpus.exists():
            sh([sys.executable, "-m", "decoder_shell.cli", "synth", "--preset", "dsv4-flash", "--tp", "4",
                "--verify-rows", "2", "--draft-rows", "1", "--out", str(corpus)], out / "synth.log", 300)
        from decoder_shell.cli import open_corpus
        from decoder_shell.replay.engine import replay
        r = replay(open_corpus(corpus), pdrv, epochs=args.epochs, changed=args.changed)
        (out / "replay.json").write_text(json.dumps(r.to_json(), indent=1, default=str))
        times = sorted(e.cycle_ms for e in r.epochs if e.kind == "graph")
        f = replay(open_corpus(corpus), get_driver("cuda", placement="emulated", cycle="persistent-flags"),
                   epochs=flag_epochs, changed=flag_changed)
        ft = sorted(e.cycle_ms for e in f.epochs if e.kind == "graph")
        g = replay(open_corpus(corpus), get_driver("cuda", placement="emulated"), epochs=30)  # the graph path, same corpus
        gt = sorted(e.cycle_ms for e in g.epochs if e.kind == "graph")
        return ({"graph_exact": f"{sum(e.exact for e in r.epochs if e.kind == 'graph')}/{args.epochs}",
                 "changed_exact": f"{sum(e.exact for e in r.epochs if e.kind == 'changed')}/{args.changed}",
                 "median_ms": times[len(times) // 2] if times else None,
                 "row_flags": {"graph_exact": f"{sum(e.exact for e in f.epochs if e.kind == 'graph')}/{flag_epochs}",
                               "changed_exact": f"{sum(e.exact for e in f.epochs if e.kind == 'changed')}/{flag_changed}",
                               "median_ms": ft[len(ft) // 2] if ft else None},
                 "graph_path_median_ms": gt[len(gt) // 2] if gt else None, "graph_path_exact": g.exact},
                r.exact and f.exact)

    prof: list = []

    def profile():  # 5. where the time goes
        import persistent_profile
        prof.extend(persistent_profile.profile(m) for m in (2, 8))
        prof.extend(persistent_profile.profile(m, cycle="persistent-flags") for m in ((2,) if args.quick else (2, 8)))
        for form in bench_forms[-1:]:  # the newest build, where its time goes
            with sinkhorn_form(form):
                p = persistent_profile.profile(2)
            p["kernel"] += f", {form}"
            prof.append(p)
        if not args.quick:
            os.environ["DECODER_SHELL_CUDA_PERSIST_OPG"] = "4"  # the other build, for the record
            try:
                prof.append(persistent_profile.profile(2))
            finally:
                del os.environ["DECODER_SHELL_CUDA_PERSIST_OPG"]
        (out / "profile.json").write_text(json.dumps(prof, indent=1))
        for p in prof:
            print(persistent_profile.render(p) + "\n", flush=True)
        return {p["kernel"] + f" M={p['M']}": round(p["cycle_ms"], 4) for p in prof}, True

    def bench():  # 6. the bench, in its own process
        cmd = [sys.executable, "tools/bench_replay.py", "--rows", "1", "2", "4", "8", "--epochs",
               str(args.bench_epochs), "--persistent", "--only-main", "--json", str(out / "bench.json"),
               "--sinkhorn-forms", *bench_forms]
        if args.vllm_src:
            cmd += ["--vllm-src", str(args.vllm_src), "--vllm-paths", *args.vllm_paths]
        rc, text = sh(cmd, out / "bench.log", min(330.0, st.left()))
        bench_text.append(text)
        rows = json.loads((out / "bench.json").read_text())["rows"] if (out / "bench.json").exists() else []
        bad = {n: sum(r[n]["mismatches"] for r in rows if n in r) for n in (rows[0] if rows else {})
               if n.startswith("shell") and isinstance(rows[0][n], dict) and rows[0][n].get("mismatches") is not None}
        return {"exit": rc, "mismatching": bad}, rc == 0 and bool(bad) and not any(bad.values())

    def bench_tp1():  # 7. one rank, M=2
        cmd = [sys.executable, "tools/bench_replay.py", "--tp", "1", "--rows", "2", "--epochs", str(args.bench_epochs),
               "--persistent", "--only-main", "--json", str(out / "bench-tp1.json")]
        if args.vllm_src:
            cmd += ["--vllm-src", str(args.vllm_src), "--vllm-paths", *args.vllm_paths]
        rc, text = sh(cmd, out / "bench-tp1.log", st.left() + 30)
        bench_text.append(text)
        return {"exit": rc}, rc == 0

    # the bench first, in its own process (its persistent rows carry their own mismatch counts), then
    # the exactness checks, then the rest: a stage past the budget is skipped, not cut
    st.run("sinkhorn micro-benchmark", sinkhorn_bench)
    st.run("bench", bench)
    st.run("random cases", random_cases)
    st.run("random cases, other sinkhorn forms", random_forms)
    st.run("random cases, row flags", random_flags)
    st.run("fma build", fma)
    st.run("watchdog", watchdog)
    st.run("dsv4-flash TP4 replay", flash_replay)
    st.run("profile", profile)
    st.run("gate cycle=persistent", gate)
    st.run("processes placement", processes)
    st.run("bench --tp 1", bench_tp1)
    (out / "check.json").write_text(json.dumps(st.res, indent=1, default=str))
    for text in micro_text:
        print(text.strip() or f"(sinkhorn bench: see {out})")
    for text in bench_text:
        print(text[text.find("\ncuda"):] if "\ncuda" in text else f"(bench: see {out})")
    print("| check | result |\n|---|---|")
    for name, v in st.res.items():
        print(f"| {name} | {json.dumps(v, default=str)[:160]} |")
    print(f"| total | {time.time() - st.t0:.0f} s, {'OK' if st.ok else 'FAILED'} |")
    return 0 if st.ok else 1


if __name__ == "__main__":
    sys.exit(main())
