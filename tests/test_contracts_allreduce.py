"""The ring all-reduce contract family: per-element fold orders from the documented rules, hop versus
fp32 accumulation, segments, and the properties every member of the family must have."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from decoder_shell.contracts.allreduce import RingContract, allreduce, rank_order
from decoder_shell.contracts.numerics import BF16, F32

SET = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FEW = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Partial sums of a TP matmul: mixed magnitudes, so the fold order changes the rounded result.
values = st.one_of(st.floats(-4.0, 4.0, width=32), st.floats(-3e4, 3e4, width=32),
                   st.sampled_from([0.0, -0.0, 1.0, -1.0, 2.0 ** -20, 1024.0]))
dtypes = st.sampled_from([BF16, F32])


@st.composite
def contracts(draw, itemsize_multiple=4):
    """Any member of the family (max_chunk_bytes drawn as a multiple of 4 bytes; the non-multiple
    case has its own test below)."""
    return RingContract(
        chunks_per_rank=draw(st.integers(1, 4)),
        max_chunk_bytes=draw(st.sampled_from([0, 0]) | st.integers(1, 16).map(lambda k: k * itemsize_multiple)),
        offset=draw(st.integers(-9, 9)),
        direction=draw(st.sampled_from([1, -1])),
        accumulation=draw(st.sampled_from(["hop", "fp32"])),
        segments=draw(st.integers(1, 5)),
    )


@st.composite
def reductions(draw, max_n=70):
    ranks = draw(st.integers(1, 8))
    dtype = draw(dtypes)
    shape = draw(st.sampled_from([(draw(st.integers(0, max_n)),),
                                  (draw(st.integers(1, 3)), draw(st.integers(1, 24)))]))
    xs = [draw(hnp.arrays(np.float32, shape, elements=values)).astype(dtype) for _ in range(ranks)]
    return xs, dtype


def bits(a):
    a = np.ascontiguousarray(a)
    return a.view(np.uint16 if a.dtype.itemsize == 2 else np.uint32)


def naive_kwargs(c: RingContract) -> dict:
    return dict(chunks_per_rank=c.chunks_per_rank, max_chunk_bytes=c.max_chunk_bytes, offset=c.offset,
                direction=c.direction, segments=c.segments)


# --- exactness against the naive per-element fold -----------------------------------------------
@SET
@given(red=reductions(), c=contracts())
def test_allreduce_matches_naive_fold(naive, red, c):
    xs, dtype = red
    got = allreduce(xs, c)
    assert got.dtype == dtype and got.shape == xs[0].shape
    flat = [list(x.reshape(-1).astype(np.float32)) for x in xs]
    want = naive.allreduce(flat, dtype, accumulation=c.accumulation, **naive_kwargs(c))
    assert list(bits(got).reshape(-1)) == want


@SET
@given(n=st.integers(0, 200), ranks=st.integers(1, 8), itemsize=st.sampled_from([2, 4]), c=contracts())
def test_rank_order_matches_documented_rules(naive, n, ranks, itemsize, c):
    order = rank_order(c, n, ranks, itemsize)
    assert order.shape == (ranks, n)
    want = naive.fold_orders(n, ranks, itemsize, **naive_kwargs(c))
    assert order.T.tolist() == want


def test_max_chunk_bytes_rule_agrees_with_its_documentation(naive):
    """The chunk bound counts whole elements (max_chunk_bytes // itemsize, at least 1), as the module
    documents and as gloo rounds its maximum segment size: 6 fp32 elements, 2 ranks, max_chunk_bytes=6
    -> a bound of 1 element -> 6 chunks of 1 (owners 0,0,0,1,1,1)."""
    c = RingContract(max_chunk_bytes=6)
    assert rank_order(c, 6, 2, 4).T.tolist() == naive.fold_orders(6, 2, 4, max_chunk_bytes=6)


# --- properties of every member of the family ---------------------------------------------------
@SET
@given(n=st.integers(0, 300), ranks=st.integers(1, 8), itemsize=st.sampled_from([2, 4]), c=contracts())
def test_every_element_folds_every_rank_once_around_the_ring(n, ranks, itemsize, c):
    order = rank_order(c, n, ranks, itemsize)
    assert (np.sort(order, axis=0) == np.arange(ranks)[:, None]).all()
    if ranks > 1:
        step = (order[1:] - order[:-1]) % ranks
        assert (step == c.direction % ranks).all()


@SET
@given(n=st.integers(1, 300), ranks=st.integers(1, 8), itemsize=st.sampled_from([2, 4]), c=contracts())
def test_chunks_are_contiguous_and_owners_balanced(n, ranks, itemsize, c):
    """Within a segment the start rank is a non-decreasing function of position (contiguous chunks
    in owner order), shifted by the offset."""
    order = rank_order(c, n, ranks, itemsize)
    owner = (order[0] - c.offset) % ranks
    seg = -(-n // c.segments)
    for lo in range(0, n, seg):
        o = owner[lo:lo + seg]
        assert (np.diff(o) >= 0).all()
        assert o[0] == 0


@SET
@given(red=reductions(), c=contracts())
def test_segments_are_independent_collectives(red, c):
    """A wide collective run as S segments equals S narrower collectives over the pieces."""
    xs, _ = red
    flat = [x.reshape(-1) for x in xs]
    n = flat[0].size
    whole = bits(allreduce(xs, c)).reshape(-1)
    one = RingContract(c.chunks_per_rank, c.max_chunk_bytes, c.offset, c.direction, c.accumulation, 1)
    size = -(-n // c.segments) if n else 0
    parts = [bits(allreduce([f[lo:lo + size] for f in flat], one)) for lo in range(0, n, size or 1)]
    assert (whole == (np.concatenate(parts) if parts else whole)).all()


@SET
@given(data=st.data(), dtype=dtypes, shape=st.sampled_from([(0,), (1,), (7,), (2, 5), (3, 33)]))
def test_one_rank_is_the_identity(data, dtype, shape):
    x = data.draw(hnp.arrays(np.float32, shape, elements=st.floats(width=32, allow_nan=False))).astype(dtype)
    for c in [RingContract(), RingContract(2, 4, -1, -1, "fp32", 3)]:
        got = allreduce([x], c)
        assert (bits(got) == bits(x)).all()


@SET
@given(red=reductions(), c1=contracts(), c2=contracts())
def test_two_ranks_every_order_agrees(red, c1, c2):
    """With R <= 2 one addition is the whole sum and IEEE addition commutes: every contract agrees."""
    xs, _ = red
    xs = xs[:2]
    assert (bits(allreduce(xs, c1)) == bits(allreduce(xs, c2))).all()


@SET
@given(red=reductions(), c=contracts())
def test_fp32_data_hop_equals_fp32_accumulation(red, c):
    xs, _ = red
    xs = [x.astype(np.float32) for x in xs]
    hop = RingContract(c.chunks_per_rank, c.max_chunk_bytes, c.offset, c.direction, "hop", c.segments)
    acc = RingContract(c.chunks_per_rank, c.max_chunk_bytes, c.offset, c.direction, "fp32", c.segments)
    assert (bits(allreduce(xs, hop)) == bits(allreduce(xs, acc))).all()


@FEW
@given(red=reductions(), c=contracts())
def test_inputs_are_not_modified(red, c):
    xs, _ = red
    before = [bits(x).copy() for x in xs]
    allreduce(xs, c)
    assert all((bits(x) == b).all() for x, b in zip(xs, before))


def test_hop_and_fp32_accumulation_differ_on_bf16():
    """The accumulation parameter matters: 256 + 1 + 1 in bf16 hops stays 256 (each +1 is a tie to
    even), accumulated in fp32 it is 258."""
    xs = [np.array([v], dtype=np.float32).astype(BF16) for v in (256.0, 1.0, 1.0)]
    hop = allreduce(xs, RingContract(accumulation="hop")).astype(np.float32)
    f32 = allreduce(xs, RingContract(accumulation="fp32")).astype(np.float32)
    assert hop[0] == 256.0 and f32[0] == 258.0


def test_fold_order_matters_with_three_ranks():
    """Direction and offset change bits (so inferring them from captures is meaningful)."""
    xs = [np.array([v], dtype=np.float32) for v in (1e8, -1e8, 1.0)]
    fwd = allreduce(xs, RingContract(direction=1))  # (1e8 + -1e8) + 1 = 1
    back = allreduce(xs, RingContract(direction=-1))  # (1e8 + 1) + -1e8 = 0
    assert fwd[0] == 1.0 and back[0] == 0.0


@pytest.mark.parametrize("bad", [dict(chunks_per_rank=0), dict(segments=0), dict(max_chunk_bytes=-1),
                                 dict(direction=0), dict(direction=2), dict(accumulation="fp16")])
def test_invalid_contracts_are_rejected(bad):
    with pytest.raises(ValueError):
        RingContract(**bad)


def test_invalid_inputs_are_rejected():
    with pytest.raises(ValueError):
        allreduce([], RingContract())
    with pytest.raises(ValueError):
        allreduce([np.zeros(3, np.float32), np.zeros(4, np.float32)], RingContract())
    with pytest.raises(ValueError):
        allreduce([np.zeros(3, np.float32), np.zeros(3, BF16)], RingContract())
    with pytest.raises(ValueError):
        allreduce([np.zeros(3, np.float16)] * 2, RingContract())


@SET
@given(c=contracts())
def test_contract_json_round_trip(c):
    assert RingContract.from_json(c.to_json()) == c
    assert RingContract.from_json({**c.to_json(), "future_field": 1}) == c
