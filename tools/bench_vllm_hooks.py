"""What the vLLM adapter's hooks cost a service while the capture is disarmed.

Disarmed, vLLM's mHC functions are its own (the wrappers of capture/vllm_mhc.py are bound only
inside an armed phase), so what remains is the two step markers of capture/vllm_runner.py: the
draft marker (speculator.propose: reads the plugin, counts the cycle) and the verify marker
(execute_model: one attribute test). This times each wrapped step against the bare call, with no
plugin installed and with an installed, disarmed plugin, and for reference what a wrapped mHC call
would cost if it stayed bound (the 92 calls of one dsv4-flash cycle: verify 1 broadcast pre + 85
fused post/pre + 1 post + 1 head, draft 4).

    python tools/bench_vllm_hooks.py [--calls 200000]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CALLS_PER_CYCLE = 88 + 4  # wrapped mHC calls of one dsv4-flash cycle (verify + MTP draft)


def _fused_post_pre(x, residual, post_layer_mix, comb_res_mix, fn, hc_scale, hc_base, rms_eps, hc_pre_eps,
                    hc_sinkhorn_eps, hc_post_mult_value, sinkhorn_repeat, n_splits=1, tile_n=1,
                    norm_weight=None, norm_eps=1e-6):
    return x


def _per_call_ns(f, args, kwargs, calls: int, reps: int = 7) -> float:
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            f(*args, **kwargs)
        best = min(best, (time.perf_counter_ns() - t0) / calls)
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=200_000)
    a = ap.parse_args()
    from decoder_shell import capture
    from decoder_shell.capture import vllm_mhc, vllm_runner
    args = tuple(object() for _ in range(12))
    kwargs = {"n_splits": 1, "tile_n": 1, "norm_weight": object(), "norm_eps": 1e-6}
    hooked = vllm_mhc.wrap(vllm_mhc.POST_PRE, _fused_post_pre)
    nothing = lambda *a, **k: None  # noqa: E731
    draft, verify = vllm_runner.draft(nothing), vllm_runner.verify(nothing)
    bare = _per_call_ns(_fused_post_pre, args, kwargs, a.calls)
    bare_step = _per_call_ns(nothing, args, kwargs, a.calls)

    def row(name):
        d = _per_call_ns(draft, args, kwargs, a.calls) - bare_step
        v = _per_call_ns(verify, args, kwargs, a.calls) - bare_step
        return name, d, v, (d + v) / 1e3

    rows = [row("no plugin")]
    with tempfile.TemporaryDirectory() as tmp:
        plugin = capture.install(rank=0, world=1, run_dir=os.path.join(tmp, "run"),
                                 token_file=os.path.join(tmp, "token"), control_port=None)
        assert not plugin.armed
        rows.append(row("installed, disarmed"))
        bound = _per_call_ns(hooked, args, kwargs, a.calls) - bare
    print(f"host: {platform.processor() or platform.machine()}, python {platform.python_version()}, "
          f"{os.cpu_count()} cpus; bare step call {bare_step:.0f} ns; best of 7 x {a.calls} calls")
    print(f"{'plugin':<22}{'draft marker +ns':>18}{'verify marker +ns':>19}{'+us per cycle':>15}")
    for name, d, v, us in rows:
        print(f"{name:<22}{d:>18.0f}{v:>19.0f}{us:>15.2f}")
    print(f"disarmed mHC calls: vLLM's own functions (+0 ns); a wrapper left bound would add {bound:.0f} ns "
          f"a call, {CALLS_PER_CYCLE * bound / 1e3:.1f} us a dsv4-flash cycle")
    return 0


if __name__ == "__main__":
    sys.exit(main())
