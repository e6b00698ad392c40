// The cluster cycle's weight stream: each step's weights copied into the block's shared memory by tensor-map boxes,
// the L2 prefetches of later steps' weights and partial sums, and the box slots and dynamic shared memory a
// build keeps them in (cluster_cycle.py mirrors the sizes for the launch).

#ifndef CL_LOOKAHEAD
#define CL_LOOKAHEAD 3  // steps ahead whose weights the copy engine prefetches into L2 (0: none)
#endif

#ifndef CL_EVICT_FIRST
#define CL_EVICT_FIRST 1  // the weights pass through L2 marked evict-first (0: the default policy)
#endif
// The L2 policy of the weight stream: every weight is read once a cycle, and the cycle's 516 MiB (four
// ranks) would otherwise push out of L2 what is read again soon (partial sums, step and order tables).
__device__ __forceinline__ u64 weight_policy() {
  u64 pol;
#if CL_EVICT_FIRST
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
#else
  asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;" : "=l"(pol));
#endif
  return pol;
}

// Rows of one tensor-map box: at most 192 (a box dimension is at most 256), so a step's 24 x 4Q rows come in
// 2 boxes at Q = 4 (the host encodes the maps with cluster_cycle.py's box_rows, which the build asserts equal).
template <int Q>
__host__ __device__ constexpr int cl_box_rows() { return 96 * Q < 192 ? 96 * Q : 192; }

// Boxes of one step's weights (24 outputs x 4Q rows): 2 at Q = 4, 1 at Q = 1 and 2.
template <int Q>
__host__ __device__ constexpr int cl_wboxes() { return (24 * HC * Q + cl_box_rows<Q>() - 1) / cl_box_rows<Q>(); }

// This block's weights of step s (rank r), boxes [k0, k1) of the step's, into shared memory by the copy engine:
// the step's tensor map views fn [nout][4Q*1024] as rows o*4Q+u of 1024 lanes, and each box is cl_box_rows rows
// of the block's 64 lanes, landing as [o][u][64] in its slot of box slots `wsm` (slot `sl0 + k` modulo NSL,
// cl_wslots; where a step's boxes are contiguous, sl0 + k); completion of those boxes' bytes on the mbarrier `bar` (armed with 0 bytes where the step has
// none of them). One thread issues the boxes (per-lane bulk copies were issued one lane at a time through
// uniform registers, ~500 instructions a warp a step on the critical path; per-thread loads of 96 KiB stalled
// it behind them); the box count by a compile-time box (the host's box in a kernel argument cost an integer
// division and a rolled loop).
template <int Q, int NSL>
__device__ __forceinline__ void fetch_weights(const CArgs& p, int s, int nout, int r, int L0, float* wsm, int sl0,
                                              int k0, int k1, u64* bar) {
  constexpr int BOX = cl_box_rows<Q>();
  const unsigned char* tm = (const unsigned char*)(p.tmaps + ((size_t)s * p.ranks + r) * 16);
  const int rows = nout * HC * Q, boxes = (rows + BOX - 1) / BOX;
  const int lo = k0 > 0 ? min(rows, k0 * BOX) : 0, hi = k1 < cl_wboxes<Q>() ? min(rows, k1 * BOX) : rows;
  // every warp's reads of wsm came first (without the fence, which the PTX memory model asks for here: no faster,
  // H200 TP4 M=1/2 0.472 / 0.522 ms against 0.462 / 0.525, fifteenth session)
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  mbar_expect(bar, (hi - lo) * CL_LANES * 4);
  const u64 pol = weight_policy();
#pragma unroll
  for (int k = 0; k < cl_wboxes<Q>(); k++)
    if (k >= k0 && k < k1 && k < boxes)
      asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.L2::cache_hint"
                   " [%0], [%1, {%2, %3}], [%4], %5;"
                   :: "r"(smem_addr(wsm + (size_t)(NSL % cl_wboxes<Q>() ? (sl0 + k) % NSL : sl0 + k) * BOX * CL_LANES)),
                      "l"(tm), "r"(L0), "r"(k * BOX),
                      "r"(smem_addr(bar)), "l"(pol) : "memory");
}

// This block's 1/16 of rank r's weights (fn, nout outputs) into L2 (one bulk prefetch by the copy engine).
template <int Q>
__device__ __forceinline__ void prefetch_fn(const float* fn, int nout, int b) {
  const unsigned bytes = nout * HC * Q * LANES * 4 / CL_SIZE;
  asm volatile("cp.async.bulk.prefetch.L2.global.L2::cache_hint [%0], %1, %2;"
               :: "l"((const char*)fn + (size_t)b * bytes), "r"(bytes), "l"(weight_policy()) : "memory");
}
template <int Q>
__device__ __forceinline__ void prefetch_l2(const PStep& st, int r, int b) { prefetch_fn<Q>(st.mh[r].fn, st.nout, b); }

// CL_PREFETCH_EARLY (tuning, off): the weights' L2 prefetch CL_LOOKAHEAD steps ahead issued at the start of
// A (its address loaded at the step's start) instead of in B, so that its HBM burst (6 MiB a step at TP4)
// does not coincide with the fold's loads of the partial sums.

#ifndef CL_PART_AHEAD
#define CL_PART_AHEAD 2  // steps ahead whose partial sums the copy engine prefetches into L2 (>= 1)
#endif

// What a step's prefetches need, read from the step table at the start of a step by one thread (into
// registers: the loads' latency overlaps the step) and issued in B: the partial sum of a later all-reduce
// and the weights of a later step. Every field is loaded unconditionally and resolved where it is used:
// `fused ? peers[r] : null` at the load compiled to a load of peers[r] predicated on the loaded `fused`,
// and the register a step's prefetch address needed right away stalled the thread's warp for an L2 round
// trip (at the step's start, ahead of its stream values; in B, between the rank's barrier and the publish).
struct PartFetch {
  const char* peer;  // this cluster's rank's partial of the step (read only where fused)
  int fused, rows, D, bf;
  const float* fn;   // the weights of the step CL_LOOKAHEAD ahead (null: none)
  int nout;
};
__device__ __forceinline__ PartFetch part_fetch(const CArgs& p, int s, int r, int sw) {
  PartFetch f{};
  if (s < p.nsteps) {
    const PStep& st = p.steps[s];
    f.peer = (const char*)st.mh[r].peers[r];
    f.fused = st.fused;
    f.rows = st.rows;
    f.D = st.mh[r].D;
    f.bf = st.mh[r].ring.is_bf16;
  }
  if (CL_LOOKAHEAD > 0 && sw < p.nsteps) {
    f.fn = p.steps[sw].mh[r].fn;
    f.nout = p.steps[sw].nout;
  }
  return f;
}
// The partial sums a later all-reduce folds, for this cluster's rows, into L2 (bulk prefetches by the
// copy engine): a partial reaches its reader from L2, as one a producer has just written would. Every
// rank's cluster fetches its own rank's partial, its 16 blocks a sixteenth each.
__device__ __forceinline__ void prefetch_partials(const PartFetch& f, int groups, int g, int b) {
  int row0, nrows;
  rows_of(f.rows, groups, g, row0, nrows);
  if (!f.fused || nrows <= 0) return;
  const int isz = f.bf ? 2 : 4;
  const unsigned total = (unsigned)(nrows * f.D * isz), part = (total / CL_SIZE) & ~15u;
  const unsigned off = b * part, bytes = b == CL_SIZE - 1 ? (total - off) & ~15u : part;
  if (bytes)
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" :: "l"(f.peer + (size_t)row0 * f.D * isz + off),
                 "r"(bytes) : "memory");
}

// B's prefetches from the addresses loaded at the step's start: the partial sum, and (unless CL_PREFETCH_EARLY
// issued them at the start of A) the weights CL_LOOKAHEAD steps ahead.
#ifndef CL_PF_B_ONLY
#define CL_PF_B_ONLY 0  // diagnosis (exact): B issues only the partial sums' prefetch (1) or only the weights' (2), to time
#endif              // the two apart where they pay (four ranks: only their sum was measured); 0, the default, both
template <int Q>
__device__ __forceinline__ void prefetches_b(const PartFetch& f, int groups, int g, int b) {
#ifdef CL_NO_PF_B  // tuning (exact): no prefetch into L2 in B (the weight copies and the fold read HBM instead)
  return;
#endif
  if (CL_PF_B_ONLY != 2) prefetch_partials(f, groups, g, b);
#ifndef CL_PREFETCH_EARLY
  if (CL_PF_B_ONLY != 1 && f.fn) prefetch_fn<Q>(f.fn, f.nout, b);
#endif
}

#ifndef CL_WBUF2
#define CL_WBUF2 1  // builds of at most CL_WBUF2_RPC rows keep two steps' weights (0: one, the next step's requested
#endif              // after the dot products)
// Why two: one buffer frees only after the dot products, so the next step's copy (96 KiB a block at D = 4096)
// lands during B, where it shares the SM's path to L2 with the fold's loads of the join words: the fold took
// ~2 us after the last rank published against ~0.6 in the same grid without work (tools/cluster_check.py,
// every block's stamps). With two, the next step's copy is requested at the step's start (its buffer's last
// reader was the step before's dot products) and lands during the stream values and the dot products: H200,
// TP4 M=1/2 0.530 / 0.605 -> 0.499 / 0.546 ms in one call, the fold after the last publish 2.05 -> 1.54 us
// (docs/BENCHMARKS.md, twelfth session). Requesting the copy after the fold instead made the dot products wait
// for it (M=2 0.648), and lane 0 polling before its warp's loads made the fold slower (0.719): both removed.
#ifndef CL_WBUF2_RPC
#define CL_WBUF2_RPC 2  // (with more rows the static shared memory leaves no room for a second 96 KiB)
#endif
#if defined(CL_NO_FETCH) || defined(CL_W_LDG)
#define CL_FETCHES 0  // timing ablation: the first step's weights stay, every step reads them, no copy after (inexact);
                      // CL_W_LDG: no copy at all (the dot products read global memory)
#else
#define CL_FETCHES 1
#endif
// Weight buffers of a build: two (CL_WBUF2) or one.
template <int RPC>
__host__ __device__ constexpr int cl_wbufs() { return CL_WBUF2 && RPC <= CL_WBUF2_RPC ? 2 : 1; }
#ifndef CL_WSPARE
#define CL_WSPARE 4  // builds of one weight buffer and at most N rows keep one box slot more (0: none)
// (H100, twenty-third session: TP4 M=4 0.667-0.670 -> 0.629-0.632 ms, TP2 M=8 0.690-0.706 -> 0.640-0.654; at TP4
// M=8, CL_WSPARE=8, 0.919-0.938 against 0.913-0.926: there the dot products are long enough to hide the copy).
// A step's late boxes requested at its own start instead of after the step before's dot products (off B, where
// the dot products then wait for them; twenty-sixth session, H100): TP4 M=4 / 8 0.657-0.685 / 1.010-1.032 ms, with
// CL_WSPARE=8 0.660-0.690 / 0.928-0.955, against 0.627-0.646 / 0.903-0.926; the fold after the last publish at M=8
// still 1.70 us (2.11 with the copy in B): removed
#endif
#ifndef CL_WSPARE_AT
#define CL_WSPARE_AT 0  // where a spare slot's box is requested: 0 at the step's start, 1 after the stream values
#endif
// Why a spare slot: with one buffer the next step's whole copy waits for the dot products and lands during B,
// beside the fold's loads of the join words (the path to L2 they share). The weights are boxes (cl_wboxes, 2 at
// Q = 4) in a ring of box slots, step s's box k in slot (s * boxes + k) % slots: with one slot more than a step's
// boxes, the next step's first box has a free slot at the step's start (its last reader was the step before's
// dot products) and only the rest waits for this step's; at Q = 1 and 2 (one box a step) that is two buffers.
// At Q = 4 three slots of 48 KiB fit beside eight rows' static shared memory where two buffers (192 KiB) do not.
template <int Q, int RPC>
__host__ __device__ constexpr int cl_wslots() {
  return cl_wbufs<RPC>() == 2 ? 2 * cl_wboxes<Q>() : cl_wboxes<Q>() + (RPC <= CL_WSPARE ? 1 : 0);
}
// Step s's first box slot in cluster_cycle (BPS boxes a step, NSL slots): (s * BPS) % NSL, written (s & 1) * BPS for two
// buffers: the same value, and the code of the buffers before the slots (written generally, the one- and two-row builds
// were another schedule, 0.4-0.9% slower on an H100). A macro: as a function or a lambda, ptxas scheduled the four-row
// build differently (424 SASS lines), and that build's schedule is the measured one.
#define CL_FIRST_SLOT(s) (NSL == 2 * BPS ? ((s) & 1) * BPS : (int)((unsigned)(s) * BPS % NSL))
// Bytes of dynamic shared memory the kernel addresses: wsm (cl_wslots boxes of [cl_box_rows][64] floats), then
// recv ([2][16][PS]).
template <int Q, int RPC>
__host__ __device__ constexpr int cl_partials_floats() { return (RPC * CL_CHAINS + 3) / 4 * 4; }
template <int Q, int RPC>
__host__ __device__ constexpr int cl_dyn_smem() {
  return 4 * (cl_wslots<Q, RPC>() * cl_box_rows<Q>() * CL_LANES + 2 * CL_SIZE * cl_partials_floats<Q, RPC>());
}
