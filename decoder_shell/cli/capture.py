"""`shell capture` and `shell serve-reference`: registered into the main parser by cli._extensions."""

from __future__ import annotations

DEFAULT_PROMPT = "The decoder shell captures one cycle and replays it bit-exact."


def register(sub) -> None:
    from ..geometry import PRESETS, REDUCE_DTYPES

    s = sub.add_parser("capture", help="capture cycles from a running service into a corpus, then verify it")
    s.add_argument("--from-service", required=True, metavar="URL", help="control endpoint, http://127.0.0.1:PORT")
    s.add_argument("--token-file", help="the service's token file (default: the service's default for PORT)")
    s.add_argument("--cycles", type=int, default=1, help="cycles to capture, one corpus each (default 1)")
    s.add_argument("--out", required=True, help="corpus folder (with several cycles: one cycle-NNN folder each)")
    s.add_argument("--replace", action="store_true",
                   help="replace the corpus in --out: swapped in atomically once complete and verified")
    s.add_argument("--wait", action="store_true", help="wait for live traffic instead of sending a generate request")
    s.add_argument("--prompt", default=DEFAULT_PROMPT, help="prompt of the generate request that drives the cycles")
    s.add_argument("--phase", choices=("cycle", "verify"), default="cycle",
                   help="capture the whole cycle (draft + verify) or the verify phase only")
    s.add_argument("--preset", choices=sorted(PRESETS), help="geometry for services that declare none")
    s.add_argument("--verify-rows", type=int, help="override the verify rows M")
    s.add_argument("--draft-rows", type=int, help="override the draft rows")
    s.add_argument("--reduce-dtype", choices=REDUCE_DTYPES, help="override the all-reduce dtype")
    s.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for every rank (default 300)")
    s.add_argument("--ready-timeout", type=float, default=30.0, metavar="SECONDS",
                   help="seconds to wait for the service to listen and write its token file (default 30)")
    s.add_argument("--json", action="store_true", help="print the verify summary as JSON")
    s.set_defaults(func=_capture)

    s = sub.add_parser("serve-reference", help="serve the small transformers DeepSeek-V4 model over R ranks")
    s.add_argument("--tp", type=int, default=2, help="tensor-parallel ranks (1, 2, 4 or 8; default 2)")
    s.add_argument("--port", type=int, default=8765, help="HTTP port on 127.0.0.1 (0: any free port)")
    s.add_argument("--mhc", choices=("transformers", "shell"), default="transformers",
                   help="stock transformers mHC, or the shell's contracts swapped in")
    s.add_argument("--verify-rows", type=int, default=2, help="rows M of each verify pass (the draft proposes M-1)")
    s.add_argument("--seed", type=int, default=0, help="weight seed")
    s.add_argument("--token-file", default="", help="where to write the control token (mode 0600)")
    s.add_argument("--backend", choices=("auto", "gloo", "nccl"), default="auto",
                   help="torch.distributed backend (auto: nccl when every rank has a GPU, else gloo)")
    s.add_argument("--no-capture", action="store_true", help="do not install the capture plugin")
    s.add_argument("--preset", choices=("reference", "dsv4-flash"), default="reference",
                   help="model size: the small reference (hidden 64, 2 layers) or DeepSeek-V4-Flash's "
                        "(hidden 4096, 43 layers, its attention shapes); default reference")
    s.add_argument("--layers", type=int, help="layers of the target (default: the preset's, 2 or 43)")
    s.add_argument("--routed-experts", type=int, metavar="N",
                   help="routed experts in all, split over the ranks, top-6 or fewer (default: the preset's, 8)")
    s.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="where the ranks run: cuda uses one GPU per rank over NCCL when there are R GPUs, "
                        "else all ranks on one GPU over gloo (default cpu)")
    s.set_defaults(func=_serve)


def _capture(args, console) -> int:
    from .capture_command import cmd_capture
    return cmd_capture(args, console)


def _serve(args, console) -> int:
    from ..capture.errors import UsageError
    from ..capture.reference.launch import serve
    from ..capture.reference.options import ServeOptions
    if not 0 <= args.port <= 65535:
        raise UsageError("--port must be between 0 and 65535")
    for name in ("layers", "routed_experts"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1")
    return serve(ServeOptions(tp=args.tp, port=args.port, mhc=args.mhc, verify_rows=args.verify_rows,
                              seed=args.seed, token_file=args.token_file, capture=not args.no_capture,
                              backend=args.backend, device=args.device, preset=args.preset,
                              layers=args.layers or 0, routed_experts=args.routed_experts or 0))
