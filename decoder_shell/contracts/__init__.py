"""Numpy references: each function here *is* the definition of its op's bits (DESIGN.md 4)."""

from .numerics import BF16, F32, LANES, lane_sum, pexp, psigmoid, to_bf16
from .allreduce import RingContract, allreduce, rank_order
from .mhc import MhcParams, mhc_mixes, mhc_split, mhc_pre, mhc_post, mhc_post_pre, mhc_post_head, mhc_head_collapse
from .rmsnorm import rmsnorm

__all__ = [
    "BF16", "F32", "LANES", "lane_sum", "pexp", "psigmoid", "to_bf16",
    "RingContract", "allreduce", "rank_order",
    "MhcParams", "mhc_mixes", "mhc_split", "mhc_pre", "mhc_post", "mhc_post_pre", "mhc_post_head",
    "mhc_head_collapse", "rmsnorm",
]
