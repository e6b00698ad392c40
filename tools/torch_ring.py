"""The torch baselines' all-reduce: each rank's sum of the R partials in ring order, starting at the next rank
(the order tools/bench_replay.py's torch cycle and tools/vllm_peer.py share)."""


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
