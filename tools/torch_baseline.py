"""What the torch baselines of tools/bench_replay.py and tools/vllm_peer.py share: the cycle's values as
device tensors, the walk over its commands with the all-reduce as a torch sum in ring order, and CUDA-event
timing. Only the mHC boundary differs between them."""

import numpy as np


def ring_sums(xs: list) -> list:
    """[sum for rank r]: xs[r+1] + xs[r+2] + ... + xs[r+R] (indices mod R), left to right."""
    R = len(xs)
    sums = []
    for r in range(R):
        acc = xs[(r + 1) % R]
        for q in range(2, R + 1):
            acc = acc + xs[(r + q) % R]
        sums.append(acc)
    return sums


def device_values(values, device) -> list:
    """Per rank {buffer id: tensor}: fp32 as fp32, bf16 (numpy ml_dtypes) as torch bf16, same bits."""
    import torch

    def t(a):
        if a.dtype == np.float32:
            return torch.from_numpy(np.ascontiguousarray(a)).to(device)
        return torch.from_numpy(np.ascontiguousarray(a).view(np.int16)).view(torch.bfloat16).to(device)

    return [{bid: t(a) for bid, a in rank.items()} for rank in values]


def cycle_runner(cyc, bufs, boundary):
    """(run, state): run() walks the cycle; all-reduces are ring_sums of the ranks' partials, every other
    command is boundary(cmd, state[r], bufs[r]) per rank; state[r] maps output buffer ids to tensors."""
    R = cyc.ranks
    state = [dict() for _ in range(R)]

    def run():
        for cmd in cyc.commands:
            if cmd.op == "allreduce":
                sums = ring_sums([bufs[r][cmd.inputs["x"]] for r in range(R)])
                for r in range(R):
                    state[r][cmd.outputs["out"]] = sums[r]
                continue
            for r in range(R):
                boundary(cmd, state[r], bufs[r])

    return run, state


#: Clock cycles the stream is held before the start event (~0.25 ms at 2 GHz): see event_ms.
HOLD_CYCLES = 500_000


def event_ms(fn) -> float:
    """Milliseconds of fn() on the current CUDA stream between two events. The stream is held first by a
    spin of HOLD_CYCLES (torch.cuda._sleep), so that fn's launches are submitted while it runs and the
    events time the device's work, not the host's submitting it: as the shell's own times, whose events
    are nodes of the graphs they time (a graph replay's host call on an idle stream is ~10 us)."""
    import torch
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(HOLD_CYCLES)
    start.record()
    fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end)


def graph_of(fn):
    """fn() captured as one torch CUDA graph, after one warm-up run on a side stream (as torch asks)."""
    import torch
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph
