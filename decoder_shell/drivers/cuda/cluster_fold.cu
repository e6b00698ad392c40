// The cluster cycle's all-reduce fold: where a block's elements lie (its slice of the step's rows), the ranks'
// partials read in each element's ring order and folded as the contracts fold them, and the fold after the grid's
// counter join (cluster_join.cu has the flag-and-data join that replaces the counter where a rank is one cluster).

// The step's rows for cluster group g: [row0, row0 + n).
__device__ __forceinline__ void rows_of(int rows, int groups, int g, int& row0, int& n) {
  if (groups == 1) {  // (the integer division below is ~25 instructions, and this runs several times a step)
    row0 = 0;
    n = rows;
    return;
  }
  const int per = (rows + groups - 1) / groups;
  row0 = g * per;
  n = max(0, min(rows - row0, per));
}

// Element i of a block's [rows][Q][64] slice (the layout of xs and ord_s): its row mi of the cluster's,
// lane step q, lane l, and its column of D (every loop over the block's columns walks i).
struct Slot {
  int mi, q, l, col;
};
// (i >= 0: unsigned, the divisions by powers of two are shifts and masks, no sign fix-ups)
template <int Q>
__device__ __forceinline__ Slot slot_of(int i, int L0) {
  const unsigned u = (unsigned)i, q = (u / CL_LANES) % Q, l = u % CL_LANES;
  return Slot{(int)(u / (Q * CL_LANES)), (int)q, (int)l, L0 + (int)(l + q * LANES)};
}
// Element i of the block's slice of a step whose rows start at row0: its index in a [rows][D] buffer
// (D = Q x 1024: the build's hidden size, check_cycle's).
template <int Q>
__device__ __forceinline__ size_t elem_of(int i, int L0, int row0) {
  const Slot sl = slot_of<Q>(i, L0);
  return (size_t)(row0 + sl.mi) * (Q * LANES) + sl.col;
}
// The same index as 32 bits (rows x D < 2^32): one multiply-add where the 64-bit one takes a wide multiply and a carry.
template <int Q>
__device__ __forceinline__ unsigned elem_of32(int i, int L0, int row0) {
  const Slot sl = slot_of<Q>(i, L0);
  return (unsigned)(row0 + sl.mi) * (unsigned)(Q * LANES) + (unsigned)sl.col;
}
// The rank of the fold's next step: the ring's direction (+1 or -1) with wrap-around over R ranks.
template <int R>
__device__ __forceinline__ int next_rank(int rr, int dir) {
  rr += dir;
  return rr == R ? 0 : rr < 0 ? R - 1 : rr;
}
// Raw bits of element e of a partial (bf16 zero-extended, or fp32), loaded through L2.
template <bool BF>
__device__ __forceinline__ unsigned raw_bits(const void* src, size_t e) {
  return BF ? (unsigned)__ldcg((const unsigned short*)src + e) : __float_as_uint(__ldcg((const float*)src + e));
}
__device__ __forceinline__ unsigned raw_bits(bool bf, const void* src, size_t e) {
  return bf ? raw_bits<true>(src, e) : raw_bits<false>(src, e);
}
// What a fold reads of its step's arguments, copied into registers once, before its first store: the
// arguments live in shared memory, and a store through the output's generic pointer may alias them, so
// read there, the ring's fields were loaded again after every store, and each of the fold's steps waited
// for two shared-memory loads and branched on them (SASS, sm_90: the fold of a thread's elements one after
// the other, each rank's add behind ~90 cycles of loads; H200 TP4 M=2, the fold 1.50 us after the join
// where with no arithmetic it took 0.96; with the fields in registers 1.15, and 2.50 -> 1.89 at M=8; nineteenth
// session).
struct FoldTo {
  Ring ring;
  void* out;  // the all-reduce's output
};
__device__ __forceinline__ FoldTo fold_to(const MhcArgs& a) { return FoldTo{a.ring, a.ar_out}; }
// ring_fold_ordered's additions and roundings (allreduce.cu) for a fold whose dtype is the build's (BF), with its
// branches as selects: a thread's elements then fold side by side instead of one after the other (each of
// ring_fold_ordered's steps branches on the ring's fields). Where the ring has fewer ranks than the build's R,
// the steps past them leave the sum as it is, as there.
template <bool BF, int R>
__device__ __forceinline__ float fold_regs(const float (&v)[R], const Ring& c) {
  const bool hop = BF && c.hop;
  float acc = v[0];
#pragma unroll
  for (int t = 1; t < R; t++) {
    const float sum = ADD(acc, v[t]), rounded = BF ? round_bf(sum) : sum;
    acc = t < c.ranks ? (hop ? rounded : sum) : acc;
  }
  return BF ? round_bf(acc) : acc;
}
// The fold of one element's R values in the contract's order (raw bits), written to the all-reduce's
// output and to xs.
template <int Q, bool BF, int R>
__device__ __forceinline__ void fold_store(const FoldTo& f, const unsigned (&raw)[R], size_t e, int i, int L0,
                                           float (*xs)[Q][CL_LANES]) {
  float v[R];
#pragma unroll
  for (int t = 0; t < R; t++) v[t] = __uint_as_float(BF ? raw[t] << 16 : raw[t]);
#ifdef CL_FOLD_NONE  // timing ablation: no fold, the first rank's value taken as x (inexact)
  const float x = v[0];
#else
  const float x = fold_regs<BF, R>(v, f.ring);
#endif
#ifndef CL_NO_AROUT  // timing ablation: the all-reduce's output not written (inexact)
  st(f.out, e, x, BF);
#endif
  const Slot sl = slot_of<Q>(i, L0);
  xs[sl.mi][sl.q][sl.l] = x;
}

// The first rank of every element this block folds at the next all-reduce, from the host table into
// shared memory (indexed as xs): static metadata, so it is loaded before the join, and the fold after the
// join waits only for the partials. Four bytes a thread in flight at once (one at a time, each load's
// latency was paid in turn: up to four L2 or HBM round trips a thread at M=8).
template <int Q>
__device__ __forceinline__ void load_order(const unsigned char* first, int D, int row0, int nrows, int L0,
                                           unsigned char* ord, int it, int nt) {
  constexpr int B = 4;
  const int n = nrows * Q * CL_LANES;
  for (int i0 = it; i0 < n; i0 += B * nt) {
    unsigned char v[B];
#pragma unroll
    for (int k = 0; k < B; k++) {
      const int i = i0 + k * nt;
      const Slot e = slot_of<Q>(i < n ? i : i0, L0);
      v[k] = i < n ? first[(row0 + e.mi) * D + e.col] : 0;
    }
#pragma unroll
    for (int k = 0; k < B; k++)
      if (i0 + k * nt < n) ord[i0 + k * nt] = v[k];
  }
}

// Element e's partial from every rank of the all-reduce (R: the cycle's ranks, a build parameter), in
// the contract's order starting at rank `first` (the rank of fold step t is walked by the direction with
// wrap-around), as raw bits: every load is issued before any is used. (Through ld(), whose bf16/fp32
// select joined each load with its use, the compiler issued an element's loads one after the other,
// each waiting for the one before: R L2 round trips a fold instead of one.)
template <bool BF, int R>
__device__ __forceinline__ void load_ranks(const MhcArgs& a, int first, size_t e, unsigned (&raw)[R]) {
  int rr = first;
#pragma unroll
  for (int t = 0; t < R; t++, rr = next_rank<R>(rr, a.ring.dir)) raw[t] = raw_bits<BF>(a.peers[rr], e);
}

// x of step s for this block's columns of its rows, threads [t0, t0 + nt): the all-reduce folded (every
// rank's partial read in the contract's order, starting from the rank the host took from
// contracts.allreduce.rank_order (ord), the same additions and roundings: ring_fold_ordered; the output
// written), B elements a thread at once with all their loads in flight together.
template <int Q, bool BF, int R>
__device__ __forceinline__ void fold_ranks(const MhcArgs& a, const unsigned char* ord, int row0, int nrows, int L0,
                                           float (*xs)[Q][CL_LANES], int it, int nt) {
  constexpr int B = 4;
  const int n = nrows * Q * CL_LANES;
  const FoldTo f = fold_to(a);
  for (int i0 = it; i0 < n; i0 += B * nt) {
    unsigned raw[B][R];
    size_t e[B];
#pragma unroll
    for (int k = 0; k < B; k++) {
      const int i = i0 + k * nt;
      e[k] = elem_of<Q>(i < n ? i : i0, L0, row0);  // (past the end: element i0's loads again, unused)
      load_ranks<BF, R>(a, ord[i < n ? i : i0], e[k], raw[k]);
    }
#pragma unroll
    for (int k = 0; k < B; k++) {
      const int i = i0 + k * nt;
      if (i >= n) continue;
#ifdef CL_FOLD_NOLOAD  // timing ablation: the fold without waiting for its loads of the partials (inexact)
      for (int t = 0; t < R; t++) raw[k][t] = __float_as_uint((float)ord[i]) >> (BF ? 16 : 0);
#endif
      fold_store<Q, BF, R>(f, raw[k], e[k], i, L0, xs);
    }
  }
}

// x of step s: folded (fused all-reduce), or read from the buffer (B elements' loads in flight at once).
template <int Q, int R>
__device__ __forceinline__ void fold_x(const MhcArgs& a, int fused, const unsigned char* ord, int row0, int nrows,
                                       int L0, float (*xs)[Q][CL_LANES], int it, int nt) {
  if (fused) {
    if (a.ring.is_bf16) fold_ranks<Q, true, R>(a, ord, row0, nrows, L0, xs, it, nt);
    else fold_ranks<Q, false, R>(a, ord, row0, nrows, L0, xs, it, nt);
    return;
  }
  constexpr int B = 4;
  const int n = nrows * Q * CL_LANES;
  for (int i0 = it; i0 < n; i0 += B * nt) {
    float v[B];
#pragma unroll
    for (int k = 0; k < B; k++) {
      const int i = i0 + k * nt;
      v[k] = ld(a.x, elem_of<Q>(i < n ? i : i0, L0, row0), a.x_is_bf16);
    }
#pragma unroll
    for (int k = 0; k < B; k++) {
      const int i = i0 + k * nt;
      if (i >= n) continue;
      const Slot sl = slot_of<Q>(i, L0);
      xs[sl.mi][sl.q][sl.l] = v[k];
    }
  }
}
