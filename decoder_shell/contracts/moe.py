"""The draft MoE: routed experts per slot, the shared expert, and their combine, single device or TP.

Single device (official `MoE.forward`): y = +0.0 (fp32); for the row's experts in ascending id:
y = fl(y + bf16(expert_e)); then y = fl(y + bf16(shared)); out = bf16(y).

TP split (seed section 3): rank r of R holds routed and shared w1/w3 output rows [I/R*r, I/R*(r+1))
and w2 inputs [I/R*r, I/R*(r+1)) (whole 32-groups, so h's QDQ groups never straddle the cut); every
rank computes fp32 partials over its slice. Two combine modes:
- "official" (exact-official): all-reduce the per-slot partials [T, k, D] and the shared partial
  [T, D] in fp32, then the single-device epilogue above (bf16 per expert, ascending id);
- "fused": each rank sums its slots in ascending id from +0.0 in fp32, then adds its shared partial;
  one fp32 all-reduce; one bf16 rounding. Fewer roundings: a different contract from "official".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .act_qdq import QAct, act_qdq
from .allreduce import RingContract, allreduce
from .expert import expert
from .moe_gate import TOP_K, moe_gate
from .numerics import F32, to_bf16
from .qlinear import QWeight
from .quant import QuantInputError, check_grid

COMBINE_MODES = ("official", "fused")


@dataclass(frozen=True)
class ExpertWeights:
    """w1, w3 [I, D] and w2 [D, I]: QWeight (packed) or bf16 arrays (expanded)."""

    w1: object
    w3: object
    w2: object

    @property
    def width(self) -> int:
        return _shape(self.w1)[0]

    def shard(self, rank: int, ranks: int) -> "ExpertWeights":
        """Rank `rank`'s slice of the expert width (w1/w3 rows, w2 inputs), on the 32-grid."""
        i = self.width
        if i % ranks:
            raise QuantInputError(f"expert width {i} does not split over {ranks} ranks")
        lo, hi = i // ranks * rank, i // ranks * (rank + 1)
        check_grid(lo, "expert shard cut")
        check_grid(hi, "expert shard cut")
        return ExpertWeights(_rows(self.w1, lo, hi), _rows(self.w3, lo, hi), _cols(self.w2, lo, hi))


def _shape(w) -> tuple:
    return w.shape if isinstance(w, QWeight) else np.asarray(w).shape


def _rows(w, lo, hi):
    return w.rows(lo, hi) if isinstance(w, QWeight) else np.asarray(w)[lo:hi]


def _cols(w, lo, hi):
    return w.cols(lo, hi) if isinstance(w, QWeight) else np.asarray(w)[:, lo:hi]


def check_ids(ids: np.ndarray, experts: int) -> np.ndarray:
    """ids int32 [T, k]: every id in [0, experts) and distinct within its row."""
    ids = np.asarray(ids)
    if ids.ndim != 2 or ids.dtype.kind not in "iu":
        raise QuantInputError(f"expert ids must be a 2-D integer array, got {ids.dtype} {ids.shape}")
    if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= experts):
        raise QuantInputError(f"expert id out of range: ids span [{int(ids.min())}, {int(ids.max())}], "
                              f"there are {experts} experts")
    s = np.sort(ids, axis=1)
    if ids.shape[1] > 1 and bool((s[:, 1:] == s[:, :-1]).any()):
        raise QuantInputError("an expert id repeats within a row")
    return ids


def routed_slots(xq: QAct, ids: np.ndarray, route_weights: np.ndarray, experts, out: str = "float32") -> np.ndarray:
    """[T, k, D]: slot (t, i) holds expert ids[t, i]'s output for row t, weighted by route_weights[t, i]."""
    ids = check_ids(ids, len(experts))
    rw = np.asarray(route_weights, dtype=F32)
    if rw.shape != ids.shape:
        raise QuantInputError(f"route weights {rw.shape} do not match ids {ids.shape}")
    t, k = ids.shape
    d = _shape(experts[0].w2)[0] if experts else 0
    res = np.zeros((t, k, d), F32 if out == "float32" else to_bf16(np.zeros(0)).dtype)
    for e in np.unique(ids):
        rows, slots = np.nonzero(ids == e)
        sub = QAct(xq.codes[rows], xq.scales[rows])
        ew = experts[int(e)]
        res[rows, slots] = expert(sub, ew.w1, ew.w3, ew.w2, rw[rows, slots], out)
    return res


def combine_slots(slots: np.ndarray, ids: np.ndarray, add=None) -> np.ndarray:
    """fp32 [T, D]: from +0.0, the slots added in ascending expert id, then `add` (fp32) if given."""
    order = np.argsort(ids, axis=1, kind="stable")
    s = np.take_along_axis(np.asarray(slots, dtype=F32), order[:, :, None], axis=1)
    acc = np.zeros((s.shape[0], s.shape[2]), F32)
    for i in range(s.shape[1]):
        acc = acc + s[:, i]
    if add is not None:
        acc = acc + np.asarray(add, dtype=F32)
    return acc


def official_epilogue(slot_sums: np.ndarray, shared_sum: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """bf16 [T, D]: y = +0; y += bf16(slot) in ascending id; y += bf16(shared); bf16(y)."""
    slots = to_bf16(slot_sums).astype(F32)
    return to_bf16(combine_slots(slots, ids, to_bf16(shared_sum).astype(F32)))


def fused_combine(slot_partials, shared_partials, ids: np.ndarray,
                  contract: RingContract = RingContract(accumulation="fp32")) -> np.ndarray:
    """bf16 [T, D], the fused mode: per rank the slots in ascending id from +0.0 in fp32, plus the
    rank's shared partial; one fp32 all-reduce of those sums; one bf16 rounding."""
    fused = [combine_slots(s, ids, sh) for s, sh in zip(slot_partials, shared_partials)]
    return to_bf16(allreduce(fused, contract))


def moe_single(x, gate_weight, gate_bias, experts, shared: ExpertWeights) -> np.ndarray:
    """The single-device official MoE on x bf16 [T, D] (the FFN input after its norm)."""
    xq = act_qdq(x)
    ids, rw = moe_gate(x, gate_weight, gate_bias)
    slots = routed_slots(xq, ids, rw, experts, "bfloat16")
    sh = expert(xq, shared.w1, shared.w3, shared.w2, None, "bfloat16")
    return official_epilogue(slots, sh, ids)


def rank_partials(xq: QAct, ids, rw, experts, shared: ExpertWeights, rank: int, ranks: int):
    """One rank's fp32 (slot partials [T, k, D], shared partial [T, D]) over its expert slice."""
    ex = [e.shard(rank, ranks) for e in experts]
    sh = shared.shard(rank, ranks)
    return routed_slots(xq, ids, rw, ex), expert(xq, sh.w1, sh.w3, sh.w2, None, "float32")


def moe_tp(x, gate_weight, gate_bias, experts, shared: ExpertWeights, ranks: int, mode: str,
           contract: RingContract = RingContract(accumulation="fp32"), top_k: int = TOP_K) -> dict:
    """The TP MoE: every rank's partials and the combined bf16 output (identical on every rank)."""
    if mode not in COMBINE_MODES:
        raise QuantInputError(f"combine mode must be one of {COMBINE_MODES}, not {mode!r}")
    xq = act_qdq(x)
    ids, rw = moe_gate(x, gate_weight, gate_bias, top_k)
    parts = [rank_partials(xq, ids, rw, experts, shared, r, ranks) for r in range(ranks)]
    if mode == "official":
        slot_sum = allreduce([p[0] for p in parts], contract)
        shared_sum = allreduce([p[1] for p in parts], contract)
        out = official_epilogue(slot_sum, shared_sum, ids)
    else:
        out = fused_combine([p[0] for p in parts], [p[1] for p in parts], ids, contract)
    return {"ids": ids, "route_weights": rw, "partials": parts, "out": out}
