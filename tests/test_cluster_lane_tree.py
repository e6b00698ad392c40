"""The cluster cycle's dot products by lane halves (cluster_dots.cu dots_by_lanes, lane_tree; cluster_exchange.cu dot_piece), proven
on the CPU: the same data movement transliterated over 32 simulated lanes, in fp32, against the contract.

lane_tree runs the adjacent-pair tree of a warp's 32 lanes for K values a thread at once: round r pairs lane l
with l ^ 2^r, each keeps half of its values (the upper half where bit r of its lane is set) and adds its
partner's copy of that half; after log2 K rounds a thread holds one value, and xor rounds K .. 16 add the groups.
Lane l < K then holds value index `lane_tree`'s return. Here that is checked bit for bit against
numerics.lane_sum's tree (acc[0::2] + acc[1::2] until one is left), for every K the kernel builds, and the whole
of a block's dot products (each lane's chain over u, the two halves' trees, their sum in dot_piece) against
contracts.mhc.mhc_mixes' unscaled dots on the block's 64 lanes. The device check is tools/cluster_check.py.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

f32 = np.float32


def lane_tree(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """v [..., 32 lanes, K] fp32 -> (the value each lane holds at the end [..., 32], its index [32]), as the
    kernel's rounds do (a shuffle is an index into the lane axis)."""
    k = v.shape[-1]
    v = v.copy()
    lane = np.arange(32)
    idx = np.zeros(32, dtype=np.int64)
    n, step = k, 1
    while n > 1:
        up = ((lane & step) != 0)[:, None]
        send = np.where(up, v[..., : n // 2], v[..., n // 2 : n])
        keep = np.where(up, v[..., n // 2 : n], v[..., : n // 2])
        v[..., : n // 2] = keep + send[..., lane ^ step, :]  # ADD(keep, __shfl_xor_sync(send, step))
        idx += np.where(up[:, 0], n // 2, 0)
        n, step = n // 2, step * 2
    x = v[..., 0].copy()
    while step < 32:
        x = x + x[..., lane ^ step]
        step *= 2
    return x, idx


def contract_tree(x: np.ndarray) -> np.ndarray:
    """numerics.lane_sum's tree over the last axis (a power of two): adjacent pairs, left + right."""
    while x.shape[-1] > 1:
        x = x[..., 0::2] + x[..., 1::2]
    return x[..., 0]


values = st.sampled_from([0.0, 1.0, -1.0, 1e-30, 3e38, -3e38, 1.5e-45, 0.1, 7.0])


@settings(max_examples=300, deadline=None)
@given(log2k=st.integers(0, 5), seed=st.integers(0, 2**31 - 1), scale=st.integers(-40, 40),
       special=st.lists(st.tuples(st.integers(0, 31), st.integers(0, 31), values), max_size=6))
def test_lane_tree_is_the_contract_tree_for_every_value(log2k, seed, scale, special):
    k = 1 << log2k
    rng = np.random.default_rng(seed)
    v = (rng.standard_normal((32, k)) * np.exp2(rng.integers(-scale if scale < 0 else 0, abs(scale) + 1, (32, k)))).astype(f32)
    for lane, j, x in special:
        v[lane, j % k] = f32(x)
    with np.errstate(over="ignore", invalid="ignore"):
        got, idx = lane_tree(v[None])
        got = got[0]
        want = contract_tree(v.T)  # [K]: the 32 lanes' tree of each value
    assert sorted(idx[:k].tolist()) == list(range(k))  # the first K lanes hold every value once
    np.testing.assert_array_equal(got[:k].view(np.uint32), want[idx[:k]].view(np.uint32))
    # lanes past K hold copies of a value (they store nothing): the index is the lane's low bits reversed
    for lane in range(32):
        assert idx[lane] == idx[lane % k]


@settings(max_examples=40, deadline=None)
@given(q=st.sampled_from([1, 2, 4]), rows=st.integers(1, 8), seed=st.integers(0, 2**31 - 1))
def test_a_block_s_dot_products_by_lane_halves_are_the_contract_s(q, rows, seed):
    """Every block's 64 lanes of a cluster built for rpc rows (the fewest of 1, 2, 4, 8 that hold `rows`; the rows
    past them hold garbage, as the kernel's do): each lane's chain over u (4Q steps), each lane half's 32-lane tree
    by lane_tree with a chain group's rows x slots as its K values (slots past the group's chains zero, as the
    kernel's accumulators stay, at eight rows two passes of four rows), the halves added (dot_piece), then the 16
    blocks' tree: bit for bit the contract's unscaled dots and sum of squares."""
    from decoder_shell.contracts.numerics import lane_sum

    rng = np.random.default_rng(seed)
    rpc = next(r for r in (1, 2, 4, 8) if r >= rows)
    n = 4 * q * 1024
    x = (rng.standard_normal((rpc, n)) * np.exp2(rng.integers(-20, 21, (rpc, n)))).astype(f32)
    fn = rng.standard_normal((24, n)).astype(f32)
    want = lane_sum(x[:rows, None, :] * fn[None, :, :])  # [rows, 24]
    ss_want = lane_sum(x[:rows] * x[:rows])
    g, nc = 8, 4                           # chain groups (chain c in group c % 8), slots of the largest
    rb = 16 // nc if rpc * nc > 16 else rpc  # rows of one tree pass (kernel: RB)
    xs = x.reshape(rpc, 4 * q, 16, 2, 32)     # [row, u, block, half, lane]
    ws = fn.reshape(24, 4 * q, 16, 2, 32)
    part = np.zeros((2, 16, rows, 25), f32)  # [half, block, row, chain]
    for cg in range(g):
        chains = list(range(cg, 25, g))
        acc = np.zeros((16, 2, 32, rpc, nc), f32)  # [block, half, lane, row, slot]
        for u in range(4 * q):
            s_ = np.moveaxis(xs[:, u], 0, -1)  # [block, half, lane, row]
            for i, c in enumerate(chains):
                m = s_ if c == 0 else ws[c - 1, u][..., None]
                acc[..., i] = acc[..., i] + s_ * m
        for r0 in range(0, rpc, rb):
            vals = acc[..., r0 : r0 + rb, :].reshape(16, 2, 32, rb * nc)
            got, idx = lane_tree(vals)
            for lane in range(rb * nc):
                r, i = r0 + idx[lane] // nc, idx[lane] % nc
                if i < len(chains) and r < rows:
                    part[:, :, r, chains[i]] = np.moveaxis(got[..., lane], 1, 0)
    blocks = part[0] + part[1]  # dot_piece: the block's two halves
    got = contract_tree(np.moveaxis(blocks, 0, -1))  # the 16 blocks' adjacent-pair tree
    np.testing.assert_array_equal(got[:, 1:].view(np.uint32), want.view(np.uint32))
    np.testing.assert_array_equal(got[:, 0].view(np.uint32), ss_want.view(np.uint32))
