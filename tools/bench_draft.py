"""The whole draft phase of a DeepSeek-V4.1 DSpark draft (TP2) on the cuda driver, per stage and per
command kind, at several row counts T; the memory per rank; torch baselines of the same MoE. One command
on one GPU:

    python tools/bench_draft.py [--rows 5 10 20 32] [--json out.json]

1. Corpora: one `dsv41-draft` TP2 corpus per T (draft kind dspark: three stages, packed MXFP4 routed
   and FP8 shared experts as recipes), synthesized in parallel by `shell synth` (host work: about 65 s
   and 9 GB of host memory each on a 2-core host), or taken with --corpus.
2. Per corpus and expert form (packed; bf16 expanded through the `experts=moe-expanded` variant decoded
   on the device from the same corpus): one emulated-TP2 cuda session whose verify commands are
   deleted (variant `delete`), so its graph is the draft phase alone. Warm-up epochs, then timed graph
   epochs (device events; the whole phase's median), then profiled epochs (an event after every
   kernel; per-node medians), every epoch's draft outputs of every rank checked bit for bit against
   the corpus. Per-node medians are grouped per stage and per command op (replay/breakdown.stage_table:
   whatever ops the draft holds, grouped without a list here). Profiled nodes run one after another,
   both emulated ranks' kernels included, so their sum exceeds the graph's whole-phase time.
3. Memory: the table of replay/memory.py (weights per part from the manifests, arenas as the driver
   lays them out) and the device memory measured by cuMemGetInfo around each session.
4. Torch baselines (tools/cuda_check_moe.torch_times: eager per-expert loop as the official model, and
   a gathered batched matmul as a CUDA graph) of stage 0's routed MoE (act_qdq + routed experts) on
   rank 0's bf16 expert weights (read back from the session's expanded arena), next to the shell's own
   act_qdq + routed nodes of stage 0 (both ranks' nodes / ranks: the ranks run the same shapes on the
   same experts).

Exit 0 when every checked element is exact, 1 on a mismatch, 2 for bad arguments or a corpus that is
not a MoE draft, 3 without a CUDA driver or device, 4 when a kernel fails to build or run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from decoder_shell.errors import ShellError, UsageError  # noqa: E402
from decoder_shell.geometry import MAX_ROWS  # noqa: E402

MIB = 1 << 20
FORMS = ("packed", "moe-expanded")


class Parser(argparse.ArgumentParser):
    def error(self, message):  # one line and exit 2, as the shell's own commands
        print(f"bench_draft: {message}", file=sys.stderr)
        sys.exit(2)


def parse(argv=None):
    ap = Parser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[5, 10, 20, 32], help="draft rows T (one corpus each)")
    ap.add_argument("--corpus", type=Path, nargs="+", help="take these dsv41-draft corpora instead of synthesizing")
    ap.add_argument("--work", type=Path, help="folder for the synthesized corpora (kept); default a temporary one")
    ap.add_argument("--draft-kind", default="dspark", choices=("dspark", "mtp1"))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=4, help="synths run in parallel (each holds ~9 GB of host memory)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--epochs", type=int, default=30, help="timed graph epochs per session")
    ap.add_argument("--profiles", type=int, default=5, help="profiled epochs per session (per-node medians)")
    ap.add_argument("--reps", type=int, default=30, help="torch baseline repetitions")
    ap.add_argument("--forms", nargs="+", default=list(FORMS), choices=FORMS)
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--json", type=Path, help="write every raw number here")
    a = ap.parse_args(argv)
    if a.corpus is None and not all(1 <= t <= MAX_ROWS for t in a.rows):
        ap.error(f"--rows must be between 1 and {MAX_ROWS}")
    for n in ("jobs", "epochs", "profiles", "reps"):
        if getattr(a, n) < 1:
            ap.error(f"--{n} must be at least 1")
    if a.warmup < 0:
        ap.error("--warmup must be at least 0")
    for c in a.corpus or []:
        if not (c / "corpus.json").is_file():
            ap.error(f"{c}: not a corpus (no corpus.json)")
    return a


def synth_all(rows, kind, seed, work: Path, jobs: int) -> list[Path]:
    """One dsv41-draft TP2 corpus per T through `shell synth`, `jobs` at a time; a failure is exit 2."""
    def one(t):
        out = work / f"dsv41-{kind}-T{t}"
        if (out / "corpus.json").is_file():
            return out, 0.0
        t0 = time.time()
        r = subprocess.run([sys.executable, "-m", "decoder_shell.cli", "synth", "--preset", "dsv41-draft", "--tp", "2",
                            "--verify-rows", "1", "--draft-rows", str(t), "--draft-kind", kind, "--seed", str(seed),
                            "--out", str(out), "-q"], capture_output=True, text=True, cwd=ROOT)
        if r.returncode:
            last = (r.stderr.strip().splitlines() or ["no message"])[-1]
            raise UsageError(f"synth of {out} failed (exit {r.returncode}): {last}")
        return out, time.time() - t0
    with ThreadPoolExecutor(jobs) as pool:
        done = list(pool.map(one, rows))
    for (out, s), t in zip(done, rows):
        print(f"synth T={t}: {out} in {s:.0f} s", flush=True)
    return [d[0] for d in done]


def draft_variants(cycle, form: str) -> dict:
    """The verify phase deleted (the graph is the draft phase alone); experts decoded to bf16 on the
    device for `moe-expanded`."""
    from decoder_shell.replay.memory import EXPANDABLE
    v = {c.index: "delete" for c in cycle.commands if c.boundary.phase != "draft"}
    if form == "moe-expanded":
        v.update({c.index: "moe-expanded" for c in cycle.commands if c.op in EXPANDABLE})
    return v


def mem_info(drv) -> tuple[int, int]:
    """(free, total) device bytes (cuMemGetInfo); (0, 0) for a driver without device memory (cpu)."""
    if not hasattr(drv, "cu"):
        return 0, 0
    free, total = drv.cu.cuMemGetInfo()
    return int(free), int(total)


def bench_session(drv, cycle, bound, expected, form, args) -> dict:
    """Timed and profiled draft-phase epochs of one session; mismatches counted on every epoch."""
    from decoder_shell.replay.breakdown import median_nodes, stage_table
    from decoder_shell.replay.compare import compare_outputs
    from decoder_shell.replay.engine import load_inputs
    skip = frozenset(b.id for b in cycle.outputs() if b.boundary.phase != "draft")
    res = {"form": form, "mismatching": 0, "elements": 0}
    free0, total = mem_info(drv)
    with drv.load(cycle, draft_variants(cycle, form)) as s:
        free1, _ = mem_info(drv)
        res["device_memory"] = {"total": total, "free_before": free0, "free_after_load": free1,
                                "session_bytes": free0 - free1,
                                "arenas_per_rank": dict(zip(("outputs", "state", "work", "staging", "expanded"),
                                                            getattr(getattr(s, "mem", None), "_sizes", ())))}
        load_inputs(s, bound.injected)

        def check():
            c = compare_outputs(s, cycle, expected, skip)
            res["mismatching"] += sum(c.per_rank)
            res["elements"] += c.elements
            if c.first and "first_mismatch" not in res:
                res["first_mismatch"] = c.first

        for _ in range(args.warmup):
            s.poison()
            s.run(graph=True)
        times = []
        for _ in range(args.epochs):
            s.poison()
            times.append(max(s.run(graph=True)))
            check()
        runs = []
        for _ in range(args.profiles):
            s.poison()
            runs.append(s.profile())
            check()
        nodes = median_nodes(runs)
        res["phase_ms"] = {"median": statistics.median(times), "min": min(times), "max": max(times)}
        res["stages"] = stage_table(cycle, nodes, "draft")
        res["nodes"] = [{"command": c, "node": n, "ms": ms} for c, n, ms in nodes]
        if form == "moe-expanded" and not args.no_torch:
            res["_stacks"] = expanded_stage0(s, cycle)
    return res


def expanded_stage0(session, cycle):
    """Rank 0's bf16 w13 [E, 2, I/R, D] and w2 [E, D, I/R] of stage 0's routed experts, read back from
    the session's expanded arena."""
    cmd = next(c for c in cycle.commands if c.op == "moe_routed" and c.boundary.phase == "draft")
    g = cycle.geometry
    e, w, d = g.moe.experts, g.moe.width // g.ranks, g.hidden
    out = []
    for name, shape in (("w13", (e, 2, w, d)), ("w2", (e, d, w))):
        a = np.empty(shape, np.uint16)
        session.cu.cuMemcpyDtoH(a.ctypes.data, session.mem.expanded_addr(0, cmd.index, name), a.nbytes)
        out.append(a.view(_bf16()))
    return out


def _bf16():
    from decoder_shell.contracts.numerics import BF16
    return BF16


def torch_baseline(cycle, expected, stacks, reps) -> dict:
    """Stage 0's routed MoE in torch (eager and CUDA graph) on the corpus's own rank-0 values."""
    from cuda_check_moe import torch_times
    g = cycle.geometry
    cmds = {c.op: c for c in cycle.commands if c.boundary.phase == "draft" and c.boundary.layer == 0}
    x = expected[0][cmds["moe_qdq"].inputs["x"]]
    ids = expected[0][cmds["moe_gate"].outputs["ids"]]
    rw = expected[0][cmds["moe_gate"].outputs["weights"]]
    t = x.shape[0]
    try:
        eager, graph = torch_times(t, g.hidden, g.moe.experts, g.moe.width // g.ranks, g.moe.top_k, x,
                                   stacks[0], stacks[1], ids, rw, reps)
    except ImportError as e:
        return {"skipped": f"no torch ({e})"}
    return {"eager_ms": eager, "graph_ms": graph}


def bind_corpus(path: Path):
    """(corpus, cycle, bound values, expected outputs, seconds) of a MoE draft corpus; UsageError else."""
    from decoder_shell.corpus.store import Corpus
    from decoder_shell.replay.engine import expected_outputs, prepare
    t0 = time.time()
    corpus = Corpus.open(path)
    g = corpus.geometry
    if g.moe is None or not g.draft_rows:
        raise UsageError(f"{path}: not a MoE draft corpus (preset {g.preset})")
    cycle, bound = prepare(corpus)
    expected = expected_outputs(cycle, bound.injected, bound.captured, corpus.info.rebased)
    return corpus, cycle, bound, expected, time.time() - t0


def shell_routed_ms(cycle, res) -> float:
    """The shell's act_qdq + routed nodes of stage 0, per rank."""
    st = res["stages"]["stages"].get(0, {"kinds": {}})["kinds"]
    return sum(st.get(k, {"ms": 0.0})["ms"] for k in ("moe_qdq", "moe_routed")) / cycle.ranks


def run(args) -> int:
    from rich.console import Console
    from decoder_shell.drivers import get_driver
    from decoder_shell.replay.memory import corpus_memory
    from decoder_shell.cli.render_memory import render_memory
    console = Console(highlight=False, soft_wrap=True)
    drv = get_driver("cuda", placement="emulated")  # no driver or device: exit 3 before any host work
    t0 = time.time()
    if args.corpus:
        corpora = args.corpus
    else:
        work = args.work or Path(tempfile.mkdtemp(prefix="bench-draft-"))
        work.mkdir(parents=True, exist_ok=True)
        corpora = synth_all(args.rows, args.draft_kind, args.seed, work, args.jobs)
    out = {"gpu": drv.gpu, "arch": drv.arch, "forms": args.forms, "cases": []}
    bad = 0
    # the next corpus's host work (regenerating and digest-checking its recipes) beside this one's device
    # work; at most two corpora's values in host memory
    with ThreadPoolExecutor(1) as pool:
        nxt = pool.submit(bind_corpus, corpora[0])
        for i in range(len(corpora)):
            corpus, cycle, bound, expected, bind_s = nxt.result()
            nxt = pool.submit(bind_corpus, corpora[i + 1]) if i + 1 < len(corpora) else None
            g = corpus.geometry
            case = {"corpus": str(corpus.root), "T": g.draft_rows, "draft_kind": g.draft_kind, "bind_s": bind_s,
                    "memory": corpus_memory(corpus), "forms": {}}
            for form in [f for f in args.forms if f == "packed" or g.moe.weights == "packed"]:
                res = bench_session(drv, cycle, bound, expected, form, args)
                stacks = res.pop("_stacks", None)
                bad += res["mismatching"]
                res["shell_qdq_routed_stage0_ms_per_rank"] = shell_routed_ms(cycle, res)
                case["forms"][form] = res
                print(f"T={g.draft_rows} {form}: draft phase {res['phase_ms']['median']:.4f} ms (graph median), "
                      f"profiled nodes {res['stages']['total_ms']:.4f} ms, {res['mismatching']} mismatching of "
                      f"{res['elements']} elements", flush=True)
                if stacks is not None:
                    case["torch"] = torch_baseline(cycle, expected, stacks, args.reps)
                    del stacks
            out["cases"].append(case)
            del bound, expected
    out["seconds"] = time.time() - t0
    out["mismatching_elements"] = bad
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, default=_json_default))
    report(out, console, render_memory)
    return 0 if bad == 0 else 1


def _json_default(o):
    if isinstance(o, (np.integer, np.floating)):
        return o.item()
    return str(o)


def report(out: dict, console, render_memory) -> None:
    """The memory table of the first corpus, per-stage tables per case and form, and the short table last."""
    if out["cases"]:
        render_memory(out["cases"][0]["memory"], console)
        for form, res in out["cases"][0]["forms"].items():
            m = res["device_memory"]
            console.print(f"measured ({form}, T={out['cases'][0]['T']}): session took {m['session_bytes'] / MIB:,.1f} MiB "
                          f"of device memory (cuMemGetInfo), {m['free_after_load'] / MIB:,.0f} of "
                          f"{m['total'] / MIB:,.0f} MiB free after load; arenas per rank "
                          + ", ".join(f"{k} {v / MIB:,.1f}" for k, v in m["arenas_per_rank"].items()) + " MiB")
    for case in out["cases"]:
        for form, res in case["forms"].items():
            st = res["stages"]
            lines = [f"\nT={case['T']} {form}: per stage and command kind, ms (median of profiled epochs, "
                     f"both emulated ranks' nodes)",
                     "| kind | " + " | ".join(f"stage {s}" for s in st["stages"]) + " | all |",
                     "|---|" + "---|" * (len(st["stages"]) + 1)]
            for k in st["kinds"]:
                vals = [s["kinds"].get(k, {"ms": 0.0})["ms"] for s in st["stages"].values()]
                lines.append(f"| {k} | " + " | ".join(f"{v:.4f}" for v in vals) + f" | {sum(vals):.4f} |")
            lines.append("| sum of nodes | " + " | ".join(f"{s['total_ms']:.4f}" for s in st["stages"].values())
                         + f" | {st['total_ms']:.4f} |")
            lines.append(f"whole draft phase (graph, no per-node events): median {res['phase_ms']['median']:.4f} ms; "
                         f"sum of profiled nodes / phase = {st['total_ms'] / res['phase_ms']['median']:.2f}")
            print("\n".join(lines))
    print(f"\nsummary ({out['gpu']}, {out['arch']}, {out['seconds']:.0f} s; ms, medians; exact = every draft output "
          "of every rank, every epoch)")
    print("| T | form | draft phase (graph) | sum of nodes | per stage (nodes) | shell qdq+routed s0 / rank "
          "| torch eager | torch graph | mismatching |")
    print("|---|---|---|---|---|---|---|---|---|")
    for case in out["cases"]:
        tor = case.get("torch", {})
        for form, res in case["forms"].items():
            st = res["stages"]
            te = tor.get("eager_ms") if form == "moe-expanded" else None
            tg = tor.get("graph_ms") if form == "moe-expanded" else None
            print(f"| {case['T']} | {form} | {res['phase_ms']['median']:.4f} | {st['total_ms']:.4f} | "
                  + " / ".join(f"{s['total_ms']:.3f}" for s in st["stages"].values())
                  + f" | {res['shell_qdq_routed_stage0_ms_per_rank']:.4f} | "
                  + ("-" if te is None else f"{te:.4f}") + " | " + ("-" if tg is None else f"{tg:.4f}")
                  + f" | {res['mismatching']} |")


def main(argv=None) -> int:
    args = parse(argv)
    try:
        return run(args)
    except ShellError as e:  # bad input, missing device, kernel error: one line and its exit code
        print(f"bench_draft: {e}", file=sys.stderr)
        return e.exit_code


if __name__ == "__main__":
    sys.exit(main())
