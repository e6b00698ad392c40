// decoder-shell cluster cycle: the whole cycle as one resident kernel of 16-block thread-block
// clusters, one cluster per (rank, row group). Appended to kernels.cu + persistent.cu (PStep, the
// step table, globaltimer, ld_relaxed); the arithmetic is kernels.cu's (sinkhorn_lane, psigmoid,
// ring_fold, f2bf) in the contracts' order. cluster_cycle.py encodes the table and launches it.
//
// Why clusters: within a phase the only serial chain of the replay is per (rank, row): streams ->
// projection dots -> mixes -> Sinkhorn -> the next streams. A cluster holds one such chain (or a few
// rows of one rank) for the whole cycle: block b owns lanes 64b .. 64b+63 of the contract's 1024, so
// the stream values it makes at one boundary are the residual it reads at the next (kept in shared
// memory, never re-read), its partial dot products reach the other 15 blocks as asynchronous stores
// into their shared memory (st.async, completing on each receiver's mbarrier: no cluster barrier, no
// L2 round trip), and every block then finishes the mixes and the Sinkhorn itself. The next boundary's
// weights are requested (one tensor-map copy into shared memory) as soon as every warp is past its dot
// products, so they land during the exchange and the Sinkhorn.
//
// Per step s (one mHC boundary; its all-reduce folded in), every block:
//   C  stream values of s for its lanes from x (folded during B(s-1)), the residual (its own shared
//      memory) and post/comb (made in B(s-1)); streams written; the loads of the next step's arguments
//      and of this step's base/scale issued into registers (their latency overlaps C and A);
//   A  the lanes' dot products of the 24 (head: 4) outputs and the sum of squares (25 chains; at 16 warps
//      each warp one lane half and a chain group, dots_by_lanes, with the half's 32-lane tree; at 8 warps
//      every warp over all 64 lanes), the partials into shared memory; the next step's arguments stored;
//      block barrier;
//   X  the block's partials pushed into all 16 blocks (st.async; the two lane halves added there), the
//      weights of s+1 requested, the helpers' loads for the next join issued;
//   B  (no block barrier after X: every thread that splits a mix waits on the block's mbarrier for the
//      16 blocks' partials itself and finishes the 16-block tree of the chains it needs) warps 0..:
//      Sinkhorn (two rows a warp, a lane per comb entry) -> comb of s+1; the other warps: pre (a thread per
//      row and stream) and post (the same in the last helper warp), the collapse y of its columns, then the join
//      of s+1's all-reduce and its fold for the block's
//      columns: where a rank is one cluster, a cluster barrier (the whole rank stored y) and the rank's
//      partial published as flag-and-data words that the fold waits on (fold_ll); else an arrival on the
//      step's grid counter, the fold's first ranks (host table) while it waits, then the fold.
// The join keeps the cycle's order: an all-reduce reads the partial sums only after every rank has
// executed the stores of the sub-block input they stand for (y of the boundary before). It orders
// execution, not visibility: nothing in the launch reads y (the host does, after it), the partials are
// the host's and the words carry their own data, so a release there (CL_JOIN_RELEASE: a gpu-scope fence
// in SASS, 1 us a step) would order nothing the launch observes. Counters are 64-bit and only grow (the
// launch's tag x the grid's blocks), words carry numbers that only grow; a wait that outlasts
// timeout_ns sets err and every later wait returns at once, so the launch ends (the host reports one
// line), never a hung GPU.

#define CL_SIZE 16
#define CL_LANES (LANES / CL_SIZE)  // lanes of one block: 64, two per thread of a warp
#define CL_DETAIL 16  // stamps a step: 0 start, 1 stream values, 2 dots, 3 cluster barrier, 4 exchange, 5 Sinkhorn,
                      // 6 end; helper thread 0: 7 join passed, 8 its y stored, 9 its fold done,
                      // 10 every helper past the join; 15 thread 0's weight copy issued; CL_WARP_STAMPS builds: 11-13
                      // the last warp to reach the block barriers after C, after A and at the step's end (time rounded
                      // to 32 ns, low 5 bits: the warp), 14 the first warp after C; CL_WAIT_STAMP builds: 11 thread
                      // 0's stream values done, 12 thread 0 past the wait for the step's weights
#define CL_CHAINS 25                // dot-product chains of a row: the sum of squares (0) and 24 outputs (1 + o)

struct CArgs {
  const PStep* steps;
  int nsteps, ranks;
  u64* join;        // [nsteps] arrivals (every block once per step and launch)
  int* err;         // 0, or 1 + the step whose join timed out
  u64 timeout_ns;
  u64* trace;       // null, or [nsteps + 2] stamps (cluster 0, block 0, at each step start; the launch's end; its entry)
  u64* detail;      // null, or [nsteps + 1][blocks][CL_DETAIL] stamps inside each step (every block)
  u64 tag;          // this launch's number: 1, 2, ...
  int rank0, nlocal;  // the ranks this grid computes
  int groups;       // row groups per rank: clusters = nlocal x groups
  int mode;         // 0: the cycle; 1: synchronization only (cluster barriers and joins)
  int skip_step;    // watchdog test: the last cluster never arrives at join `skip_step` (-1: never)
  int pad_;
  const u64* tmaps;                // [nsteps][ranks][16]: each step's weights as a 2-D tensor map (rows o*4Q+u)
  const unsigned char* order;      // the all-reduces' first rank per element (contracts.allreduce.rank_order)
  const long long* order_off;      // [nsteps]: where step s's [rows * D] bytes start in `order`
  u64* ll;                         // null, or [2][ranks][ll_stride] flag-and-data words of the all-reduces (ll_join)
  long long ll_stride;             // words of one rank's region: the most rows of a step x D
  unsigned ll_seq0;                // the sequence number step 0's words carry (s: ll_seq0 + s; never 0)
  int pad3_;
};

__device__ __forceinline__ void bar_named(int id, int n) { asm volatile("bar.sync %0, %1;" :: "r"(id), "r"(n) : "memory"); }

// Chain i of warp w (of NW): chain 0 sums squares, chain c >= 1 is output c - 1 (when c <= nout). A warp
// covers the block's 64 lanes (two a thread), so more warps a block means fewer chains a warp.
template <int NW>
__device__ __forceinline__ int chain_of(int w, int i) { return w + NW * i; }

#ifndef CL_ISOLATE_SK
#define CL_ISOLATE_SK 2  // the Sinkhorn warps' schedulers left to them (roles_of): 0 never; 1 at one or two Sinkhorn
                         // warps in every build (tuning); 2 at one Sinkhorn warp in the one- and two-row builds of one
                         // or two ranks (H100, twenty-fifth session: TP1 M=2 0.466 -> 0.454 ms, TP2 M=2 0.481 -> 0.470;
                         // slower at TP4 M=2 (0.487 -> 0.491), where the helpers' fold is the other chain as long, and
                         // with two Sinkhorn warps, M=4: TP1 +1%, TP2 +2%, TP4 +8%). Tried (twenty-sixth session): one
                         // of the three helper warps beside it kept (four rounds, every build of one or two rows): TP4
                         // M=1/2 0.445-0.446 / 0.486-0.488 against 0.442-0.443 / 0.488-0.491, TP2 +0.4 to +1%, TP1 even
#endif
#ifndef CL_B_HALF
#define CL_B_HALF 2  // the row counts (a mask: 1, 2) of the 16-warp builds of more than two ranks, where no warp is left
                     // idle beside the Sinkhorn warp (CL_ISOLATE_SK), whose B roles (the Sinkhorn warp, the helpers' y,
                     // join and fold) are on warps 0-7 only, warps 8-15 idle in B; so the block's last thread, which
                     // issues B's L2 prefetches (prefetches_b) as a helper, issues none there, as CL_NO_PF_B. Fewer
                     // warps issue beside the Sinkhorn warp's chain and the fold still ends in time (thirty-fourth
                     // session, H100, five alternating runs: TP4 M=2 0.471-0.474 against 0.478-0.479 ms, the Sinkhorn warp
                     // 2.11 against 2.24 us; which of the two changes gives it is not measured apart; TP4 M=1
                     // 0.434-0.436 against 0.432-0.433 and TP2 M=1/2 0.447-0.448 / 0.466-0.468 against 0.432-0.434 /
                     // 0.463, where the isolation applies instead: two rows at more than two ranks only). 0: none.
#endif
#ifndef CL_B_LOAD
#define CL_B_LOAD 0  // diagnosis (1, in CL_B_HALF's builds): warps 8-15 run one row's dot products during B (twice
                     // dots_by_lanes over the step's weights and the first row's stream values, chain groups 0-3 then
                     // 4-7, into a buffer nothing reads): one row's B beside another row's A, as a step whose two rows
                     // ran half a step apart would have it (thirty-fourth session, H100: TP4 M=2 0.541-0.542 against
                     // 0.471-0.474 ms, the Sinkhorn warp 2.53 against 2.11 us, the mixes 0.45 against 0.16, pre + y 1.12
                     // against 0.64: the shared memory's traffic beside B costs more than the overlap could save)
#endif
// The most Sinkhorn warps at which a build of R ranks and RPC rows keeps their schedulers for them (CL_ISOLATE_SK).
template <int R, int RPC>
__host__ __device__ constexpr int cl_isolate_max() {
  return CL_ISOLATE_SK == 1 ? 2 : CL_ISOLATE_SK == 2 && R <= 2 && RPC <= 2 ? 1 : 0;
}
#ifndef CL_LOOKAHEAD
#define CL_LOOKAHEAD 3  // steps ahead whose weights the copy engine prefetches into L2 (0: none)
#endif

__device__ __forceinline__ unsigned smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void mbar_init(u64* bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem_addr(bar)) : "memory");
}
// The block's mbarriers initialized by thread 0 (released at cluster scope), then a block and a cluster
// barrier: every block's exchange barriers exist before any block of the cluster pushes into them.
__device__ __forceinline__ void init_cluster_mbarriers(u64* const* bars, int n) {
  if (threadIdx.x == 0) {
    for (int i = 0; i < n; i++) mbar_init(bars[i]);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
  cluster_wait();
}
__device__ __forceinline__ void mbar_expect(u64* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(smem_addr(bar)), "r"(bytes) : "memory");
}
// The watchdog of every wait (polled every 16th round): true once another wait set err, or once this one
// outlasted timeout_ns (then it sets err to step + 1); the wait then returns and the launch ends.
__device__ __forceinline__ bool watchdog_stop(int* err, u64 t0, u64 timeout_ns, int step) {
  if (*(volatile int*)err) return true;
  if (globaltimer() - t0 <= timeout_ns) return false;
  atomicCAS(err, 0, step + 1);
  return true;
}
// One test of an mbarrier's phase; AT_CLUSTER: acquire at cluster scope (the exchange's mbarriers, whose
// transactions remote blocks complete: st.async releases at cluster scope), else the default (cta scope).
template <bool AT_CLUSTER>
__device__ __forceinline__ unsigned mbar_try_wait(u64* bar, unsigned parity) {
  unsigned done;
  if (AT_CLUSTER)
    asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n\tselp.u32 %0, 1, 0, p;\n\t}"
                 : "=r"(done) : "r"(smem_addr(bar)), "r"(parity) : "memory");
  else
    asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\tselp.u32 %0, 1, 0, p;\n\t}"
                 : "=r"(done) : "r"(smem_addr(bar)), "r"(parity) : "memory");
  return done;
}
// The exchange's wait (the local arrival publishes nothing, so it is mbar_expect's cta scope: cluster scope
// would be a gpu-scope fence), under the watchdog.
__device__ __forceinline__ void mbar_wait_cluster(u64* bar, unsigned parity, int* err, u64 timeout_ns, int step) {
  const u64 t0 = globaltimer();
  for (unsigned n = 0, done = 0; !done; n++) {
    done = mbar_try_wait<true>(bar, parity);
    if (!done && (n & 15) == 15 && watchdog_stop(err, t0, timeout_ns, step)) return;
  }
}
// Block `rank`'s address of this block's shared-memory location p (distributed shared memory).
__device__ __forceinline__ unsigned dsmem_addr(const void* p, unsigned rank) {
  unsigned ra;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(ra) : "r"(smem_addr(p)), "r"(rank));
  return ra;
}
// One 16-byte store into another block's shared memory (ra, a dsmem_addr), completing 16 bytes of the
// transaction on that block's mbarrier (rb): st.async, no fence and no barrier on either side.
__device__ __forceinline__ void push_dsmem(unsigned ra, float4 v, unsigned rb) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];"
               :: "r"(ra), "r"(__float_as_uint(v.x)), "r"(__float_as_uint(v.y)), "r"(__float_as_uint(v.z)),
                  "r"(__float_as_uint(v.w)), "r"(rb) : "memory");
}
__device__ __forceinline__ void mbar_wait(u64* bar, unsigned parity) {
  while (!mbar_try_wait<false>(bar, parity)) {
  }
}

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
// ring_fold_ordered's additions and roundings (kernels.cu) for a fold whose dtype is the build's (BF), with its
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

#if defined(CL_COUNTER_JOIN) || defined(CL_NO_JOIN)
#define CL_LL_JOIN 0  // tuning: every all-reduce joins on the grid's counter (CL_NO_JOIN: on nothing)
#else
#define CL_LL_JOIN 1
#endif

// The all-reduce's join as flag-and-data words (the low-latency protocol): after every block of its
// cluster has stored y (one cluster barrier: with one row group a rank, the cluster is the whole rank),
// each block writes its columns of its rank's partial sum of the next all-reduce as 64-bit words, the
// sequence number of the step in the high half and the value's bits in the low half, one store each;
// the fold reads every rank's word for its elements and waits until each carries this step's sequence,
// so data and arrival come in one load (single-copy atomic), with no gpu-scope fence, no counter and no
// second round trip for the data. A partial is written by its own rank only after that whole rank
// stored y: the same order the counter join keeps, per rank instead of for the whole grid. Words live
// in two buffers by step parity: a rank overwrites a buffer two steps later only after it read every
// rank's words of the step between, which each rank wrote after it finished reading this one.
__device__ __forceinline__ void st_relaxed(u64* p, u64 v) {
  asm volatile("st.relaxed.gpu.global.b64 [%0], %1;" :: "l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ void st_relaxed(unsigned* p, unsigned v) {
  asm volatile("st.relaxed.gpu.global.b32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ unsigned ld_relaxed(const unsigned* p) {
  unsigned v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
// A flag-and-data word of an all-reduce's partial (BF: of a bf16 one): 64 bits, the step's sequence number
// in the high half and the fp32 value's bits in the low; or 32 bits, the number's low 16 bits high and the
// bf16 value's low (half the registers a word, so twice the words in flight, and half the traffic). The
// host keeps every number below 2^16 (it zeroes the words and starts again before they would pass it), so
// the low 16 bits are the number; the two kinds live in their own regions (a 64-bit word read as two 32-bit
// ones could carry a current number beside any bits).
template <bool BF>
struct Word {
  typedef u64 T;
  static __device__ __forceinline__ T make(unsigned seq, unsigned bits) { return (u64)seq << 32 | bits; }
  static __device__ __forceinline__ bool current(T w, unsigned seq) { return (unsigned)(w >> 32) == seq; }
  static __device__ __forceinline__ unsigned bits(T w) { return (unsigned)w; }
};
template <>
struct Word<true> {
  typedef unsigned T;
  static __device__ __forceinline__ T make(unsigned seq, unsigned bits) { return seq << 16 | (bits & 0xffffu); }
  static __device__ __forceinline__ bool current(T w, unsigned seq) { return w >> 16 == (seq & 0xffffu); }
  static __device__ __forceinline__ unsigned bits(T w) { return w & 0xffffu; }
};
__device__ __forceinline__ void cluster_arrive_any() { asm volatile("barrier.cluster.arrive.release;" ::: "memory"); }
__device__ __forceinline__ void cluster_wait_any() { asm volatile("barrier.cluster.wait.acquire;" ::: "memory"); }
__device__ __forceinline__ void cluster_arrive_relaxed() { asm volatile("barrier.cluster.arrive.relaxed;" ::: "memory"); }
#ifndef CL_LL_WORDS
#define CL_LL_WORDS 12  // 64-bit words a thread waits for at once (CL_LL_WORDS / R elements, at most its NE): at four
                        // ranks a thread's three elements at four rows in one round trip, its six at eight rows in
                        // two, where 8 took two and three one after the other (24 spills at 512 threads)
#endif
#ifndef CL_LL_SPLIT
#define CL_LL_SPLIT 1  // where the helpers would fold bf16 words in two round trips, the Sinkhorn warps take the second
#endif
#ifndef CL_LL_WORDS32
#define CL_LL_WORDS32 16  // 32-bit words (bf16 all-reduces) a thread waits for at once (24 spills at eight rows)
#endif
// Elements a thread folds in one round trip: CL_LL_WORDS(32) / R, at most NE, at least one.
template <bool BF, int R, int NE>
__host__ __device__ constexpr int ll_batch() {
  constexpr int b = (BF ? CL_LL_WORDS32 : CL_LL_WORDS) / R, n = b < NE ? b : NE;
  return n > 1 ? n : 1;
}
// One word of this rank's partial into its region (ll32 for a bf16 all-reduce, else ll64; e already offset to
// the rank's words).
__device__ __forceinline__ void publish_word(bool bf, unsigned* ll32, u64* ll64, size_t e, unsigned seq, unsigned bits) {
  if (bf) st_relaxed(ll32 + e, Word<true>::make(seq, bits));
  else st_relaxed(ll64 + e, Word<false>::make(seq, bits));
}
#ifndef CL_PUB_REGS
#define CL_PUB_REGS 0  // 1: a helper's words published by one loop per word kind from its rank's region, 32-bit offsets
#endif
// A helper thread's words of its rank's partial (its elements i = ht + j nh below n1, j < NE; `mine`: its rank's
// words of the step, of the join's kind): the word kind is the loop's, not a select a word, and an element's offset
// is 32-bit (elem_of32), so a word takes its store and the slot's arithmetic (with publish_word a word's 64-bit
// offset, the rank's stride multiplied again, and both kinds' stores predicated).
template <int Q, bool BF, int NE, int NO>
__device__ __forceinline__ void publish_words(typename Word<BF>::T* mine, unsigned seq, const unsigned (&own)[NO], int ht,
                                              int nh, int n1, int L0, int row0) {
  static_assert(NE <= NO, "a value a word");
  asm("" : "+l"(mine));  // (the base made once: else its rank's stride was multiplied again for every word)
#pragma unroll
  for (int j = 0; j < NE; j++) {
    const int i = ht + j * nh;
    if (i >= n1) break;
    st_relaxed(mine + elem_of32<Q>(i, L0, row0), Word<BF>::make(seq, own[j]));
  }
}
// First ranks of a thread's elements packed four bits each (ranks < 8), eight a register.
template <int N>
__device__ __forceinline__ int first_of(const unsigned (&fp)[N], int j) { return (fp[j / 8] >> (4 * (j % 8))) & 15u; }
// The first N of a thread's first ranks (one a register, loaded earlier) packed for first_of, after the loads
// have long landed: fewer registers in the fold.
template <int N, int M>
__device__ __forceinline__ void pack_firsts(const unsigned (&first)[M], unsigned (&fp)[(N + 7) / 8]) {
#pragma unroll
  for (int j = 0; j < (N + 7) / 8; j++) fp[j] = 0u;
#pragma unroll
  for (int j = 0; j < N; j++) fp[j / 8] |= first[j] << (4 * (j % 8));
}
// One element past NE: every rank's word waited for in turn, its first rank read from the table.
template <int Q, bool BF, int R>
__device__ __forceinline__ void fold_ll_one(const MhcArgs& a, const typename Word<BF>::T* ll, long long stride, unsigned seq, int e, int first,
                                            int i, int L0, float (*xs)[Q][CL_LANES], bool work, int* err, u64 timeout_ns,
                                            int step, bool& ok) {
  float v[R];
  int rr = first;
  const FoldTo f = fold_to(a);
  const u64 t0 = globaltimer();
#pragma unroll
  for (int t = 0; t < R; t++, rr = next_rank<R>(rr, f.ring.dir)) {
    typename Word<BF>::T wd = ld_relaxed(ll + rr * stride + e);
    for (unsigned n = 0; ok && !Word<BF>::current(wd, seq); n++) {
      if ((n & 15) == 15 && watchdog_stop(err, t0, timeout_ns, step)) ok = false;
      wd = ld_relaxed(ll + rr * stride + e);
    }
    v[t] = __uint_as_float(BF ? Word<BF>::bits(wd) << 16 : Word<BF>::bits(wd));
  }
  if (!work || !ok) return;
  const float x = ring_fold_ordered(v, f.ring);
  st(f.out, (size_t)e, x, BF);
  const Slot sl = slot_of<Q>(i, L0);
  xs[sl.mi][sl.q][sl.l] = x;
}
// The fold of the next all-reduce over flag-and-data words, for the thread's elements below n: i = it + j*nt,
// j < NE with their first ranks in registers (first_of(fp, j), from the host table), B at a time with every
// rank's word of each loaded at once; elements past NE (none for the built shapes) one at a time with their
// first rank read from the table (ordg).
template <int Q, bool BF, int R, int NE>
__device__ __forceinline__ void fold_ll(const MhcArgs& a, const typename Word<BF>::T* ll, long long stride, unsigned seq,
                                        const unsigned (&fp)[(NE + 7) / 8], const unsigned char* ordg, int row0, int n,
                                        int L0, float (*xs)[Q][CL_LANES], int it, int nt, bool work, int* err,
                                        u64 timeout_ns, int step) {
  constexpr int B = ll_batch<BF, R, NE>();
  const FoldTo f = fold_to(a);
  const int dir = f.ring.dir;
  bool ok = true;
#pragma unroll
  for (int j0 = 0; j0 < NE; j0 += B) {
    if (it + j0 * nt >= n) break;
    typename Word<BF>::T wv[B][R];
    int e[B];
#pragma unroll
    for (int k = 0; k < B; k++) {
      const int j = j0 + k, i = it + j * nt;
      const bool on = j < NE && i < n;  // (otherwise element j0's words again, unused)
      e[k] = (int)elem_of<Q>(on ? i : it + j0 * nt, L0, row0);
      int rr = on ? first_of(fp, j < NE ? j : j0) : first_of(fp, j0);
#pragma unroll
      for (int t = 0; t < R; t++, rr = next_rank<R>(rr, dir)) wv[k][t] = ld_relaxed(ll + rr * stride + e[k]);
    }
    // until every word carries this step's sequence: the words not yet there read again, one round trip a
    // round; after timeout_ns (or once another wait set err) the launch is ended by the watchdog
    const u64 t0 = globaltimer();
    for (unsigned rnd = 0; ok; rnd++) {
#ifdef CL_LL_NOWAIT  // timing ablation: the fold of whatever the first loads found, published or not (inexact)
      break;
#endif
      bool pending = false;
#pragma unroll
      for (int k = 0; k < B; k++) {
        const int j = j0 + k;
        int rr = it + j * nt < n ? first_of(fp, j < NE ? j : j0) : first_of(fp, j0);  // (static indices: no local memory)
#pragma unroll
        for (int t = 0; t < R; t++, rr = next_rank<R>(rr, dir)) {
          if (!Word<BF>::current(wv[k][t], seq)) {
            pending = true;
            wv[k][t] = ld_relaxed(ll + rr * stride + e[k]);
          }
        }
      }
      if (!pending) break;
      if ((rnd & 15) == 15 && watchdog_stop(err, t0, timeout_ns, step)) ok = false;
    }
    if (!work || !ok) continue;
#pragma unroll
    for (int k = 0; k < B; k++) {
      const int j = j0 + k, i = it + j * nt;
      if (j >= NE || i >= n) continue;
      unsigned raw[R];
#pragma unroll
      for (int t = 0; t < R; t++) raw[t] = Word<BF>::bits(wv[k][t]);
      fold_store<Q, BF, R>(f, raw, (size_t)e[k], i, L0, xs);
    }
  }
  for (int i = it + NE * nt; i < n; i += nt) {
    const int e = (int)elem_of<Q>(i, L0, row0);
    fold_ll_one<Q, BF, R>(a, ll, stride, seq, e, ordg[e], i, L0, xs, work, err, timeout_ns, step, ok);
  }
}

// ---- three bf16 values a word (CL_LL_PACK3) -----------------------------------------------------------------
// A bf16 all-reduce's words carry three values of a block's consecutive elements (its slice order i: word k holds
// i = 3k, 3k + 1, 3k + 2) and the step's number's low 16 bits, in one 64-bit word (single-copy atomic as the
// 32-bit word is): a third of the words to publish, poll and load. Where a helper thread folded four elements a
// round trip at eight rows (two round trips, the second on the Sinkhorn warps), its six now come in two words a
// rank, one round trip. A word's values may have different first ranks in the fold: each value's ring order is
// picked from the R words by selects (no register array indexed at run time). Word k of a block of rank rr lives
// at rr * (stride / 2) + slot3(k) of the 32-bit words' region read as 64-bit words (stride: the most rows x D).
// H200 TP4 (docs/BENCHMARKS.md, eighteenth session): a timing ablation with a third of the 32-bit words took M=8
// from 0.975 to 0.850 ms; this form of it is exact (24 M random elements, the draft + verify replay) and slower:
// M=2 / 8 0.63 / 1.19 against 0.50 / 0.99, its blocks' folds ending up to 1.4 us apart (0.35 with the 32-bit
// words), with a block's words contiguous or spread as the 32-bit ones, and without waiting on any word; and still
// with the fold's arithmetic from registers (fold_regs, nineteenth session: M=2 / 8 0.545 / 1.092 against 0.496 /
// 0.926). Off by default.
#ifndef CL_LL_PACK3
#define CL_LL_PACK3 0
#endif
__device__ __forceinline__ u64 word3_make(unsigned seq, unsigned b0, unsigned b1, unsigned b2) {
  return (u64)(seq & 0xffffu) << 48 | (u64)(b2 & 0xffffu) << 32 | (u64)((b1 & 0xffffu) << 16 | (b0 & 0xffffu));
}
__device__ __forceinline__ bool word3_current(u64 w, unsigned seq) { return (unsigned)(w >> 48) == (seq & 0xffffu); }
// Where word k of a block (slice element 3k first) lives in a rank's region of 64-bit words: half the index of its
// first element in the step's [rows][D] (a run of 64 lanes, [row D + q 1024 + 64 b, + 64), has its words in
// [row D / 2 + q 512 + 32 b, + 32): distinct for every word of every block, below the most rows x D / 2), so the
// words lie spread over a rank's region as the 32-bit ones do.
template <int Q>
__device__ __forceinline__ size_t slot3(int k, int L0, int row0) { return elem_of<Q>(3 * k, L0, row0) >> 1; }
// Value m (0..2) of every rank's word, then the one of rank rr among them.
template <int R>
__device__ __forceinline__ unsigned word3_value(const unsigned (&f)[R], int rr) {
  unsigned v = f[0];
#pragma unroll
  for (int q = 1; q < R; q++) v = rr == q ? f[q] : v;
  return v;
}
// The fold of a packed word's (up to) three elements from every rank's word w[R] (rank order 0..R-1): each
// element's values in its ring order from its first rank, folded and stored as fold_ll's.
template <int Q, int R>
__device__ __forceinline__ void fold_word3(const FoldTo& f, const u64 (&w)[R], int k, int n, const int (&first)[3],
                                           int L0, int row0, float (*xs)[Q][CL_LANES]) {
#pragma unroll
  for (int m = 0; m < 3; m++) {
    const int i = 3 * k + m;
    if (i >= n) continue;
    unsigned fq[R];
#pragma unroll
    for (int q = 0; q < R; q++) fq[q] = (unsigned)(w[q] >> (16 * m)) & 0xffffu;
    unsigned raw[R];
    int rr = first[m];
#pragma unroll
    for (int t = 0; t < R; t++, rr = next_rank<R>(rr, f.ring.dir)) raw[t] = word3_value<R>(fq, rr);
    fold_store<Q, true, R>(f, raw, elem_of<Q>(i, L0, row0), i, L0, xs);
  }
}
// The fold of the next bf16 all-reduce over packed words, for the thread's words k = it + j*nt below (n + 2) / 3
// (j < NW, their elements' first ranks in fp, entry 3j + m), B words at a time with every rank's word of each
// loaded at once; words past NW one at a time with their first ranks read from the table (ordg).
template <int Q, int R, int NW>
__device__ __forceinline__ void fold_ll3(const MhcArgs& a, const u64* ll, long long stride, unsigned seq,
                                         const unsigned (&fp)[(3 * NW + 7) / 8], const unsigned char* ordg, int row0,
                                         int n, int L0, float (*xs)[Q][CL_LANES], int it, int nt, bool work, int* err,
                                         u64 timeout_ns, int step) {
  constexpr int B = CL_LL_WORDS / R < NW ? (CL_LL_WORDS / R > 1 ? CL_LL_WORDS / R : 1) : NW;
  const int nw = (n + 2) / 3;
  const FoldTo f = fold_to(a);
  bool ok = true;
#pragma unroll
  for (int j0 = 0; j0 < NW; j0 += B) {
    if (it + j0 * nt >= nw) break;
    u64 wv[B][R];
    size_t sl[B];  // each word's slot (past the thread's words: the batch's first word again, unused)
#pragma unroll
    for (int k = 0; k < B; k++) {
      sl[k] = slot3<Q>(j0 + k < NW && it + (j0 + k) * nt < nw ? it + (j0 + k) * nt : it + j0 * nt, L0, row0);
#pragma unroll
      for (int q = 0; q < R; q++) wv[k][q] = ld_relaxed(ll + q * stride + sl[k]);
    }
    const u64 t0 = globaltimer();
    for (unsigned rnd = 0; ok; rnd++) {
#ifdef CL_LL_NOWAIT
      break;
#endif
      bool pending = false;
#pragma unroll
      for (int k = 0; k < B; k++)
#pragma unroll
        for (int q = 0; q < R; q++)
          if (!word3_current(wv[k][q], seq)) {
            pending = true;
            wv[k][q] = ld_relaxed(ll + q * stride + sl[k]);
          }
      if (!pending) break;
      if ((rnd & 15) == 15 && watchdog_stop(err, t0, timeout_ns, step)) ok = false;
    }
    if (!work || !ok) continue;
#pragma unroll
    for (int k = 0; k < B; k++) {
      const int j = j0 + k, kw = it + j * nt;
      if (j >= NW || kw >= nw) continue;
      const int first[3] = {first_of(fp, 3 * j), first_of(fp, 3 * j + 1), first_of(fp, 3 * j + 2)};
      fold_word3<Q, R>(f, wv[k], kw, n, first, L0, row0, xs);
    }
  }
  for (int kw = it + NW * nt; kw < nw; kw += nt) {  // (more words than NW: none for the built shapes)
    u64 wv[R];
    const u64* const w = ll + slot3<Q>(kw, L0, row0);
    const u64 t0 = globaltimer();
#pragma unroll
    for (int q = 0; q < R; q++) {
      wv[q] = ld_relaxed(w + q * stride);
      for (unsigned rnd = 0; ok && !word3_current(wv[q], seq); rnd++) {
        if ((rnd & 15) == 15 && watchdog_stop(err, t0, timeout_ns, step)) ok = false;
        wv[q] = ld_relaxed(w + q * stride);
      }
    }
    if (!work || !ok) continue;
    int first[3];
#pragma unroll
    for (int m = 0; m < 3; m++) first[m] = 3 * kw + m < n ? ordg[elem_of<Q>(3 * kw + m, L0, row0)] : 0;
    fold_word3<Q, R>(f, wv, kw, n, first, L0, row0, xs);
  }
}

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
template <int Q>
__device__ __forceinline__ void prefetches_b(const PartFetch& f, int groups, int g, int b) {
#ifdef CL_NO_PF_B  // tuning (exact): no prefetch into L2 in B (the weight copies and the fold read HBM instead)
  return;
#endif
  prefetch_partials(f, groups, g, b);
#ifndef CL_PREFETCH_EARLY
  if (f.fn) prefetch_fn<Q>(f.fn, f.nout, b);
#endif
}

#define CL_STR(x) #x
#define CL_UNROLL(n) _Pragma(CL_STR(unroll n))
#ifndef CL_DOT_UNROLL
#define CL_DOT_UNROLL 4  // the dot products' loop over u unrolled by this much (16, all of it: 128 registers and
                         // spills at 8 rows and 8 ranks)
#endif
#ifndef CL_DOT_SPLIT_ROWS
#define CL_DOT_SPLIT_ROWS 1  // builds of at least this many rows take the split dot-product loops (16 warps)
#endif
#ifndef CL_DOT_LANES
#define CL_DOT_LANES 1  // builds of 16 warps and at least this many rows take dots_by_lanes (9: none, the loops above)
#endif
#ifndef CL_LANES_UNROLL
#define CL_LANES_UNROLL 4  // dots_by_lanes' loop over u unrolled by this much at four and eight rows
#endif
#ifndef CL_LANES_UNROLL2
#define CL_LANES_UNROLL2 16  // ... and at one and two rows (16: all of it; 8, 4, 2 made A 1.25 -> 1.44 us at TP4 M=2)
#endif
#ifndef CL_DOT_TILE
#define CL_DOT_TILE 1  // at eight rows, four rows by four chains a warp (0: every row by two chains)
#endif
// The dot products of one warp: the first NS of its NCH chain slots (wrow: each slot's weights at lane
// 2*lane) over the block's 64 lanes and every row, in the contract's order (lane by lane, u = 0..4Q-1),
// the loop over u unrolled by U. Slot 0's factor (F0): the weights (DOT_W), the stream value itself (DOT_SQ:
// the sum of squares), or either by warp (DOT_EITHER, `sq` for warp 0: one loop for every warp; at most two
// rows a build it is loaded from a pointer that is sv for warp 0 and the weights for the others, one load a
// row instead of two selects a row; with more rows, where shared-memory bandwidth is the bound, a select).
enum { DOT_W = 0, DOT_SQ = 1, DOT_EITHER = 2 };
// FULL: every one of the RPC rows is a row of the step (no test a row: a branch a row and u kept the
// compiler from issuing any load before the branch, so every shared-memory load was waited for by the
// multiply right behind it).
template <int Q, int RPC, int NCH, int NS, int F0, int U, bool FULL>
__device__ __forceinline__ void dot_chains(const float* const (&wrow)[NCH], const float (*sv)[HC * Q][CL_LANES], int nrows,
                                           int lane, bool sq, float (&a0)[RPC][NCH], float (&a1)[RPC][NCH]) {
  constexpr bool SQ_LOAD = F0 == DOT_EITHER && RPC <= 2;
  const float* const f0 = sq ? &sv[0][0][2 * lane] : wrow[0];  // (SQ_LOAD) slot 0's factor at f0 + mi * f0_row + u * 64
  const int f0_row = sq ? HC * Q * CL_LANES : 0;
  CL_UNROLL(U)
  for (int u = 0; u < HC * Q; u++) {
    float2 wv[NS];
#pragma unroll
    for (int i = F0 == DOT_SQ || SQ_LOAD ? 1 : 0; i < NS; i++) wv[i] = *reinterpret_cast<const float2*>(wrow[i] + u * CL_LANES);
#pragma unroll
    for (int mi = 0; mi < RPC; mi++) {
      if (FULL || mi < nrows) {
        const float2 s2 = *reinterpret_cast<const float2*>(&sv[mi][u][2 * lane]);
        if (SQ_LOAD) wv[0] = *reinterpret_cast<const float2*>(f0 + mi * f0_row + u * CL_LANES);
#pragma unroll
        for (int i = 0; i < NS; i++) {
          const bool self = i == 0 && (F0 == DOT_SQ || (F0 == DOT_EITHER && !SQ_LOAD && sq));
          const float mx = self ? s2.x : wv[i].x, my = self ? s2.y : wv[i].y;
          a0[mi][i] = ADD(a0[mi][i], MUL(s2.x, mx));
          a1[mi][i] = ADD(a1[mi][i], MUL(s2.y, my));
        }
      }
    }
  }
}

// dot_chains for the warp's nrows rows: the loop without a test a row where they are all of the build's RPC.
template <int Q, int RPC, int NCH, int NS, int F0, int U>
__device__ __forceinline__ void dot_rows(const float* const (&wrow)[NCH], const float (*sv)[HC * Q][CL_LANES], int nrows,
                                         int lane, bool sq, float (&a0)[RPC][NCH], float (&a1)[RPC][NCH]) {
  if (nrows == RPC) dot_chains<Q, RPC, NCH, NS, F0, U, true>(wrow, sv, nrows, lane, sq, a0, a1);
  else dot_chains<Q, RPC, NCH, NS, F0, U, false>(wrow, sv, nrows, lane, sq, a0, a1);
}

// Where a step's weights are: output o's 4Q rows of the block's lanes at box0 + o 4Q WS, or (SPLIT: the step's two
// boxes in slots apart, cl_wslots' spare slot) those of the second box's outputs (o >= per) at box1.
template <bool SPLIT>
struct WStep {
  const float* box0;
  const float* box1;
  template <int Q, int WS>
  __device__ __forceinline__ const float* of(int o) const {
    constexpr int per = cl_box_rows<Q>() / (HC * Q);  // outputs a box
    if constexpr (SPLIT) return o >= per ? box1 + (size_t)(o - per) * HC * Q * WS : box0 + (size_t)o * HC * Q * WS;
    else return box0 + (size_t)o * HC * Q * WS;
  }
};

// ---- the dot products by lane halves (dots_by_lanes: 16 warps, at least CL_DOT_LANES rows a cluster) ------------
// The loops above have every warp cover the block's 64 lanes (two a thread, 8-byte loads): every warp reads every
// row's stream values (16 times a step at 16 warps), and each (row, chain)'s 64-lane tree takes five shuffles a
// value, which the SM issues one warp at a time. Here a warp covers one lane half, one lane a thread (32-bit loads:
// a weight load of 32 lanes is one wavefront, every byte used), every row of the cluster in each thread, and the
// 8 warps of a lane half split the chains (chain c in group c % 8): each weight is read once, each stream value by
// 8 warps, and the tree of the half's 32 lanes runs for a thread's values at once (lane_tree). The same additions
// in the same order: each lane's chain over u, the contract's adjacent-pair tree over the half's 32 lanes, the two
// halves added where the partials are pushed (dot_piece). H200, TP4 M=2/4/8 (docs/BENCHMARKS.md, eleventh session):
// dot products 1.73 / 2.82 / 4.51 -> 1.28 / 1.98 / 3.68 us a step; with the tree one value at a time 1.95 / 3.23 /
// 6.02, and a lane pair a thread with its two 16-lane row slots sharing each weight load 1.82 / 2.82 / 4.19.

// The contract's adjacent-pair tree over a warp's 32 lanes for K values a thread at once (K a power of two,
// at most 32): round r pairs lanes l and l ^ 2^r, each keeps half of its values (the upper half where bit r of
// its lane is set) and adds its partner's of that half, so after log2 K rounds a thread holds one value,
// summed over its aligned group of K lanes, and the rounds left (xor K .. 16) add the groups: K - 1 + 5 - log2 K
// shuffles where one value at a time takes 5K. Sums of aligned lane groups in pairs are the tree's levels;
// which of the two is added to the other does not matter (IEEE addition commutes). Returns the index of the
// value v[0] now holds in every lane below K (its lane's low log2 K bits reversed); lanes past K hold copies.
template <int K, int N = K, int STEP = 1>
__device__ __forceinline__ int lane_tree(float (&v)[K], int lane) {
  static_assert(K >= 1 && K <= 32 && (K & (K - 1)) == 0, "a power of two, at most 32");
  if constexpr (N > 1) {  // one round: N values held, N / 2 kept
    const bool up = (lane & STEP) != 0;
#pragma unroll
    for (int i = 0; i < N / 2; i++) {
      const float send = up ? v[i] : v[i + N / 2], keep = up ? v[i + N / 2] : v[i];
      v[i] = ADD(keep, __shfl_xor_sync(0xffffffffu, send, STEP));
    }
    return (up ? N / 2 : 0) + lane_tree<K, N / 2, 2 * STEP>(v, lane);
  } else {
#pragma unroll
    for (int step = K; step < 32; step <<= 1) v[0] = ADD(v[0], __shfl_xor_sync(0xffffffffu, v[0], step));
    return 0;
  }
}
template <int Q, int RPC, int NC, int NS, bool SQ, int U, int WS>
__device__ __forceinline__ void dot_lanes_loop(const float* const (&wrow)[NC], const float* svp, float (&a)[RPC][NC]) {
#if defined(ABL_W4) || defined(ABL_SV4)
  // timing ablation (inexact: the right loads' count and width, the wrong elements): the weights (ABL_W4) and / or
  // the stream values (ABL_SV4) by 16-byte loads, four u a load, from a lane's swizzled 16 floats of its chain's
  // (row's) 1024 (conflict-free: the eight lanes of a wavefront hit eight distinct 16-byte chunks). A quarter of
  // the load instructions, the same bytes: A took as long (H200 TP4 M=2 1.25-1.31 us against 1.25; M=8 3.14-3.46
  // against 3.20, docs/BENCHMARKS.md eighteenth session), so a transposed weight layout would not shorten it.
  const int l = (int)(threadIdx.x & 31) + ((threadIdx.x >> 5) & 1) * 32;
#pragma unroll
  for (int q4 = 0; q4 < HC * Q / 4; q4++) {
    const int sw = l * 4 + (q4 ^ ((l >> 1) & 3));
    float s[RPC][4], wv[NS][4];
#pragma unroll
    for (int r = 0; r < RPC; r++) {
#ifdef ABL_SV4
      const float4 v = reinterpret_cast<const float4*>(svp - l + r * HC * Q * CL_LANES)[sw];
      s[r][0] = v.x, s[r][1] = v.y, s[r][2] = v.z, s[r][3] = v.w;
#else
#pragma unroll
      for (int k = 0; k < 4; k++) s[r][k] = svp[r * HC * Q * CL_LANES + (4 * q4 + k) * CL_LANES];
#endif
    }
#pragma unroll
    for (int i = SQ ? 1 : 0; i < NS; i++) {
#ifdef ABL_W4
      const float4 v = reinterpret_cast<const float4*>(wrow[i] - l)[sw];
      wv[i][0] = v.x, wv[i][1] = v.y, wv[i][2] = v.z, wv[i][3] = v.w;
#else
#pragma unroll
      for (int k = 0; k < 4; k++) wv[i][k] = wrow[i][(4 * q4 + k) * CL_LANES];
#endif
    }
#pragma unroll
    for (int k = 0; k < 4; k++)
#pragma unroll
      for (int r = 0; r < RPC; r++)
#pragma unroll
        for (int i = 0; i < NS; i++) a[r][i] = ADD(a[r][i], MUL(s[r][k], SQ && i == 0 ? s[r][k] : wv[i][k]));
  }
  return;
#endif
  CL_UNROLL(U)
  for (int u = 0; u < HC * Q; u++) {
    float s[RPC], wv[NS];
#pragma unroll
    for (int r = 0; r < RPC; r++) s[r] = svp[r * HC * Q * CL_LANES + u * CL_LANES];
#pragma unroll
    for (int i = SQ ? 1 : 0; i < NS; i++) wv[i] = WS == CL_LANES ? wrow[i][u * WS] : __ldg(&wrow[i][u * WS]);
#pragma unroll
    for (int r = 0; r < RPC; r++)
#pragma unroll
      for (int i = 0; i < NS; i++) a[r][i] = ADD(a[r][i], MUL(s[r], SQ && i == 0 ? s[r] : wv[i]));
  }
}
template <int Q, int RPC, int NC, bool SQ, int U, int WS, int NS = NC>
__device__ __forceinline__ void dot_lanes_n(int ns, const float* const (&wrow)[NC], const float* svp, float (&a)[RPC][NC]) {
  if constexpr (NS >= 1) {
    if (ns == NS) dot_lanes_loop<Q, RPC, NC, NS, SQ, U, WS>(wrow, svp, a);
    else dot_lanes_n<Q, RPC, NC, SQ, U, WS, NS - 1>(ns, wrow, svp, a);
  }
}
template <int Q, int RPC, int PS, int WS = CL_LANES, bool SPLIT = false>
__device__ __forceinline__ void dots_by_lanes(const WStep<SPLIT>& ws, const float (*sv)[HC * Q][CL_LANES], int nrows, int nout, int w,
                                              int lane, float (*half)[PS]) {
  constexpr int G = 8, NC = (CL_CHAINS + G - 1) / G;  // chain groups, chains of the largest
  constexpr int U = RPC <= 2 ? CL_LANES_UNROLL2 : CL_LANES_UNROLL;
  const int lh = w & 1, cg = w >> 1, l = lh * 32 + lane;
  const int ns = cg <= nout ? (nout - cg) / G + 1 : 0;
  const float* wrow[NC];
#pragma unroll
  for (int i = 0; i < NC; i++) {
    const int c = cg + G * i;
    wrow[i] = ws.template of<Q, WS>(c >= 1 && c <= nout ? c - 1 : 0) + l;
  }
  float a[RPC][NC];
#pragma unroll
  for (int r = 0; r < RPC; r++)
#pragma unroll
    for (int i = 0; i < NC; i++) a[r][i] = 0.0f;
  const float* svp = &sv[0][0][l];
  if (cg == 0) dot_lanes_n<Q, RPC, NC, true, U, WS>(ns, wrow, svp, a);
  else dot_lanes_n<Q, RPC, NC, false, U, WS>(ns, wrow, svp, a);
  // the 32 lanes' tree of RB rows' values at once (lane_tree; at eight rows twice, four rows each: all 32 values
  // at once spilled)
  constexpr int RB = RPC * NC > 16 ? 16 / NC : RPC, K = RB * NC;
#pragma unroll
  for (int r0 = 0; r0 < RPC; r0 += RB) {
    float v[K];
#pragma unroll
    for (int r = 0; r < RB; r++)
#pragma unroll
      for (int i = 0; i < NC; i++) v[r * NC + i] = a[r0 + r][i];
    const int k = lane_tree<K>(v, lane);
    const int r = r0 + k / NC, i = k % NC;
    if (lane < K && i < ns && r < nrows) half[lh][r * CL_CHAINS + cg + G * i] = v[0];
  }
}
// Piece j (four floats) of the block's partials: the sum of its two lane halves (the tree's sixth level).
template <int PS>
__device__ __forceinline__ float4 dot_piece(const float (*half)[PS], int j) {
  const float4 a = *reinterpret_cast<const float4*>(&half[0][4 * j]), b = *reinterpret_cast<const float4*>(&half[1][4 * j]);
  return make_float4(ADD(a.x, b.x), ADD(a.y, b.y), ADD(a.z, b.z), ADD(a.w, b.w));
}

// Piece j of the block's partials as the exchange pushes it: the two lane halves added (dots_by_lanes), or the
// block's partials as they are (the loops of every warp over the 64 lanes).
template <bool BY_LANES, int PS>
__device__ __forceinline__ float4 exchange_piece(const float (*half)[PS], int j) {
  return BY_LANES ? dot_piece<PS>(half, j) : *reinterpret_cast<const float4*>(&half[0][4 * j]);
}

// C of one step: the stream values of the block's columns of its rows from x (xs), the residual and
// post/comb, written to `streams` and kept in sv (fp32 of the bf16) for the dot products. One loop per
// case (CASE 0: no residual; 1: the residual and post/comb carried in shared memory; 2: from global
// memory), the arguments in registers: with the cases in one loop every element issued the instructions
// of all of them (predicated), and every store through `streams` made the compiler reload the arguments
// from shared memory, which the store might have changed (~350 instructions a warp an element).
enum { SV_PRE = 0, SV_CARRIED = 1, SV_GLOBAL = 2 };
#ifndef CL_SV_PAIRS
#define CL_SV_PAIRS 4  // the fewest rows of a build whose stream values are converted two at a time (f2bf2); fewer
#endif                 // convert one at a time (f2bf, ~15 instructions a pair more). 1: every build, 9: none
                       // (twenty-first session: at 8 rows C 1.34 against 1.54 us, the cycle ~2-3% faster; at 1 and
                       // 2 rows the cycle no faster, C's gain then waiting in A; docs/BENCHMARKS.md)
static_assert(HC == 4, "the stream values' NaN test and pairs are written out for four streams");
// Stream k's values of N lanes (one or two a thread) in the contract's order: the residual mixed by comb's column k,
// stream by stream, then post_k x added, the lanes' operations side by side (every form of C calls it, so their
// bits cannot drift apart; this order of the operations is the one the forms were measured with).
template <int N>
__device__ __forceinline__ void stream_mix(const float (&cb)[HC * HC], const float (&res)[N][HC], const float (&pin)[HC],
                                           const float (&x)[N], int k, float (&v)[N][HC]) {
  float mx[N];
#pragma unroll
  for (int n = 0; n < N; n++) mx[n] = MUL(cb[0 * HC + k], res[n][0]);
#pragma unroll
  for (int j = 1; j < HC; j++)
#pragma unroll
    for (int n = 0; n < N; n++) mx[n] = ADD(mx[n], MUL(cb[j * HC + k], res[n][j]));
#pragma unroll
  for (int n = 0; n < N; n++) v[n][k] = ADD(MUL(pin[k], x[n]), mx[n]);
}
template <int Q, int CASE, bool PAIRS>
__device__ __forceinline__ void stream_values_of(const MhcArgs& A, int row0, int nrows, int L0,
                                                 const float (*xs)[Q][CL_LANES], float (*sv)[HC * Q][CL_LANES],
                                                 const float (*pc)[HC + HC * HC], int it, int nt) {
  bf16_t* const streams = A.streams;
  constexpr int D = Q * LANES;  // (A.D: the build's hidden size)
  const int n = nrows * Q * CL_LANES;
  const bf16_t* const residual = A.residual;
  const float* const post_in = A.post_in;
  const float* const comb_in = A.comb_in;
  for (int i = it; i < n; i += nt) {
    const Slot sl = slot_of<Q>(i, L0);
    const float x = xs[sl.mi][sl.q][sl.l];
    float v[1][HC];
    if (CASE == SV_PRE) {
#pragma unroll
      for (int k = 0; k < HC; k++) v[0][k] = x;
    } else {
      float res[1][HC], pin[HC], cb[HC * HC];
      if (CASE == SV_CARRIED) {
#pragma unroll
        for (int j = 0; j < HC; j++) res[0][j] = sv[sl.mi][j * Q + sl.q][sl.l];
#pragma unroll
        for (int k = 0; k < HC; k++) pin[k] = pc[sl.mi][k];
#pragma unroll
        for (int e = 0; e < HC * HC; e++) cb[e] = pc[sl.mi][HC + e];
      } else {
        const int m = row0 + sl.mi;
        const bf16_t* rp = residual + (size_t)m * HC * D + sl.col;
#pragma unroll
        for (int j = 0; j < HC; j++) res[0][j] = bf2f(rp[(size_t)j * D]);
#pragma unroll
        for (int k = 0; k < HC; k++) pin[k] = post_in[m * HC + k];
#pragma unroll
        for (int e = 0; e < HC * HC; e++) cb[e] = comb_in[m * HC * HC + e];
      }
#pragma unroll
      for (int k = 0; k < HC; k++) stream_mix<1>(cb, res, pin, {x}, k, v);
    }
    bf16_t* const out = streams + (size_t)(row0 + sl.mi) * HC * D + sl.col;  // streams[m][k][d] at out + k*D
    if (PAIRS) {
      // two values a conversion (f2bf2), each pair's bf16 kept packed in a 32-bit word: its stores and fp32 values are
      // one shift or mask each. A NaN (outside a real cycle, but f2bf's bits all the same) on one branch for the four
      unsigned pk[HC / 2];
#pragma unroll
      for (int k = 0; k < HC; k += 2) pk[k / 2] = f2bf2_nonan(v[0][k], v[0][k + 1]);
      if (__builtin_expect(v[0][0] != v[0][0] || v[0][1] != v[0][1] || v[0][2] != v[0][2] || v[0][3] != v[0][3], 0)) {
#pragma unroll
        for (int k = 0; k < HC; k += 2) pk[k / 2] = f2bf2(v[0][k], v[0][k + 1]);
      }
#pragma unroll
      for (int k = 0; k < HC; k++) {
        const unsigned wd = pk[k / 2];
#ifndef CL_C_NOSTORE  // timing ablation: the stream values not written to global memory (inexact)
        out[(size_t)k * D] = (bf16_t)(k & 1 ? wd >> 16 : wd);
#endif
        sv[sl.mi][k * Q + sl.q][sl.l] = __uint_as_float(k & 1 ? wd & 0xffff0000u : wd << 16);
      }
    } else {
#pragma unroll
      for (int k = 0; k < HC; k++) {
        const bf16_t bv = f2bf(v[0][k]);
#ifndef CL_C_NOSTORE  // timing ablation: the stream values not written to global memory (inexact)
        out[(size_t)k * D] = bv;
#endif
        sv[sl.mi][k * Q + sl.q][sl.l] = bf2f(bv);
      }
    }
  }
}
// The same values two lanes a thread (CL_SV_LANE2, builds of at least that many rows): a thread makes lanes l and
// l + 1 of one row and lane step, so each of its loads and stores is one of twice the width (x, the residual and sv
// 8 bytes, the streams' bf16 pairs 4 bytes: f2bf2 packs the two lanes of a stream, low half lane l) and post/comb
// are loaded once for both; the same additions and roundings a value. ~18% fewer instructions an element where C is
// issue-bound (four and eight rows: 2-4 elements a thread); at one and two rows half the threads would idle while
// the others' chains grow, so those builds keep one lane a thread (thirty-second session, H100: TP4 M=4/8
// 0.611 / 0.877 against 0.621 / 0.895 ms, M=1/2 0.444 / 0.481 against 0.429 / 0.476).
#ifndef CL_SV_LANE2
#define CL_SV_LANE2 4  // the fewest rows of a build whose stream values are made two lanes a thread; 9: none
#endif
// The thread that requests the block's weight copies (fetch_weights): thread 0 by default. Its request (~50
// instructions and the copy's proxy fence) is the first thing of each step, so its warp starts its stream values
// ~0.2 us late; where the stream values are made two lanes a thread at one and two rows, the block's last
// warps have none, and CL_FETCH_LAST=1 gives the request to the block's last thread (thirty-third session, H100, with
// CL_SV_LANE2=1: exact, C 0.67 against 0.77 us at TP4 M=2, the dot products and the exchange as much longer, TP4 M=2
// 0.479-0.480 against 0.476 ms: off).
#ifndef CL_FETCH_LAST
#define CL_FETCH_LAST 0
#endif
template <int Q, int CASE>
__device__ __forceinline__ void stream_values_lane2(const MhcArgs& A, int row0, int nrows, int L0,
                                                    const float (*xs)[Q][CL_LANES], float (*sv)[HC * Q][CL_LANES],
                                                    const float (*pc)[HC + HC * HC], int it, int nt) {
  bf16_t* const streams = A.streams;
  constexpr int D = Q * LANES;  // (A.D: the build's hidden size)
  const int n2 = nrows * Q * CL_LANES / 2;
  const bf16_t* const residual = A.residual;
  const float* const post_in = A.post_in;
  const float* const comb_in = A.comb_in;
  for (int i = it; i < n2; i += nt) {
    const Slot sl = slot_of<Q>(2 * i, L0);  // sl.l even: lanes sl.l and sl.l + 1
    const float2 x = *reinterpret_cast<const float2*>(&xs[sl.mi][sl.q][sl.l]);
    float v[2][HC];
    if (CASE == SV_PRE) {
#pragma unroll
      for (int k = 0; k < HC; k++) v[0][k] = x.x, v[1][k] = x.y;
    } else {
      float res[2][HC], pin[HC], cb[HC * HC];
      if (CASE == SV_CARRIED) {
#pragma unroll
        for (int j = 0; j < HC; j++) {
          const float2 r = *reinterpret_cast<const float2*>(&sv[sl.mi][j * Q + sl.q][sl.l]);
          res[0][j] = r.x, res[1][j] = r.y;
        }
#pragma unroll
        for (int k = 0; k < HC; k++) pin[k] = pc[sl.mi][k];
#pragma unroll
        for (int e = 0; e < HC * HC; e++) cb[e] = pc[sl.mi][HC + e];
      } else {
        const int m = row0 + sl.mi;
        const bf16_t* rp = residual + (size_t)m * HC * D + sl.col;
#pragma unroll
        for (int j = 0; j < HC; j++) {
          const unsigned wd = *reinterpret_cast<const unsigned*>(rp + (size_t)j * D);
          res[0][j] = __uint_as_float(wd << 16), res[1][j] = __uint_as_float(wd & 0xffff0000u);
        }
#pragma unroll
        for (int k = 0; k < HC; k++) pin[k] = post_in[m * HC + k];
#pragma unroll
        for (int e = 0; e < HC * HC; e++) cb[e] = comb_in[m * HC * HC + e];
      }
#pragma unroll
      for (int k = 0; k < HC; k++) stream_mix<2>(cb, res, pin, {x.x, x.y}, k, v);
    }
    bf16_t* const out = streams + (size_t)(row0 + sl.mi) * HC * D + sl.col;  // streams[m][k][d] at out + k*D
    unsigned pk[HC];
#pragma unroll
    for (int k = 0; k < HC; k++) pk[k] = f2bf2_nonan(v[0][k], v[1][k]);
    bool nan = false;
#pragma unroll
    for (int k = 0; k < HC; k++) nan = nan || v[0][k] != v[0][k] || v[1][k] != v[1][k];
    if (__builtin_expect(nan, 0)) {
#pragma unroll
      for (int k = 0; k < HC; k++) pk[k] = f2bf2(v[0][k], v[1][k]);
    }
#pragma unroll
    for (int k = 0; k < HC; k++) {
#ifndef CL_C_NOSTORE  // timing ablation: the stream values not written to global memory (inexact)
      *reinterpret_cast<unsigned*>(out + (size_t)k * D) = pk[k];
#endif
      *reinterpret_cast<float2*>(&sv[sl.mi][k * Q + sl.q][sl.l]) =
          make_float2(__uint_as_float(pk[k] << 16), __uint_as_float(pk[k] & 0xffff0000u));
    }
  }
}
template <int Q, int CASE, bool PAIRS, bool LANE2>
__device__ __forceinline__ void stream_values_case(const MhcArgs& A, int row0, int nrows, int L0,
                                                   const float (*xs)[Q][CL_LANES], float (*sv)[HC * Q][CL_LANES],
                                                   const float (*pc)[HC + HC * HC], int it, int nt) {
  if constexpr (LANE2) stream_values_lane2<Q, CASE>(A, row0, nrows, L0, xs, sv, pc, it, nt);
  else stream_values_of<Q, CASE, PAIRS>(A, row0, nrows, L0, xs, sv, pc, it, nt);
}
template <int Q, bool PAIRS, bool LANE2>
__device__ __forceinline__ void stream_values(const MhcArgs& A, int op, bool carried, int row0, int nrows, int L0,
                                              const float (*xs)[Q][CL_LANES], float (*sv)[HC * Q][CL_LANES],
                                              const float (*pc)[HC + HC * HC], int it, int nt) {
  if (op == OP_PRE) stream_values_case<Q, SV_PRE, PAIRS, LANE2>(A, row0, nrows, L0, xs, sv, pc, it, nt);
  else if (carried) stream_values_case<Q, SV_CARRIED, PAIRS, LANE2>(A, row0, nrows, L0, xs, sv, pc, it, nt);
  else stream_values_case<Q, SV_GLOBAL, PAIRS, LANE2>(A, row0, nrows, L0, xs, sv, pc, it, nt);
}

// Traced launches: a warp's arrival at a block barrier, kept as the latest (atomicMax) or earliest (atomicMin) of
// the block's warps in a shared word: the time to 32 ns (%globaltimer's step on the H200) with the warp in the low
// five bits. The word is read and reset by thread 0 a barrier after its last writer, a barrier before its next.
#ifndef CL_WARP_STAMPS
#define CL_WARP_STAMPS 0  // diagnosis builds (1): traced launches record stamps 11-14 (in the default build, with the
                          // weight copy from another lane, the H200 ran M=2 at 0.563 against 0.542 ms)
#endif
__device__ __forceinline__ void arrival(u64* word, bool on, bool latest, int w) {
  if (!CL_WARP_STAMPS || !on || (threadIdx.x & 31)) return;
  const u64 k = (globaltimer() & ~31ull) | (u64)w;
  if (latest) atomicMax(reinterpret_cast<unsigned long long*>(word), k);
  else atomicMin(reinterpret_cast<unsigned long long*>(word), k);
}
__device__ __forceinline__ void arrival_take(u64* st, int k, u64* word, u64 reset) {
  if (!CL_WARP_STAMPS || !st) return;
  st[k] = *word;
  *word = reset;
}

#ifndef CL_SM_STAMP
#define CL_SM_STAMP 0  // diagnosis builds (1): traced launches record each block's SM (%smid + 1) at each step's start
                       // in stamp 14 (where a late cluster runs: its GPC, its TPC's partner)
#endif
static_assert(!(CL_SM_STAMP && CL_WARP_STAMPS), "stamp 14 holds either the SM or a warp's arrival");
#ifndef CL_PUSH_ROT
#define CL_PUSH_ROT 0  // diagnosis builds (N): warp w pushes the block's partials to block (w + N) % 16 (0: block w;
#endif                 // H100, TP4 M=2: the block warp 0 pushes to receives first, blocks 4 and 5 last whoever pushes)
// Which warps push the block's partials (X): in the builds whose row count is in the mask CL_PUSH_W0 (1, 2, 4, 8;
// 15 every build, 0 none), warp 0, the first past the barrier after A, pushes every piece to all 16 blocks; in the
// others warp w pushes to block w, and the other warps' pushes land ~0.1 us after warp 0's (the block warp 0 pushes
// to receives first: CL_PUSH_ROT). Thirty-third session, H100, every build (15): the receipt even over the blocks
// (0.58-0.64 against 0.51-0.70 us after the last dot products at TP4 M=2) but warp 0's Sinkhorn later, TP4 M=1/2/4/8
// 0.449 / 0.486-0.487 / 0.599 / 0.887-0.888 against 0.429 / 0.475-0.476 / 0.610-0.611 / 0.877 ms: faster at four
// rows only (0.599 against 0.610-0.611 in four rounds), so 4.
#ifndef CL_PUSH_W0
#define CL_PUSH_W0 4
#endif
#ifndef CL_WAIT_STAMP
#define CL_WAIT_STAMP 0  // diagnosis builds (1): traced launches record thread 0's own stream values done (stamp 11,
                         // before the block barrier) and thread 0 past the wait for the step's weights (12)
#endif
static_assert(!(CL_WAIT_STAMP && CL_WARP_STAMPS), "stamps 11 and 12 hold either thread 0's waits or warps' arrivals");
__device__ __forceinline__ unsigned smid() {
  unsigned v;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(v));
  return v;
}

__device__ __forceinline__ void dstamp(u64* st, int k) {
  if (st) st[k] = globaltimer();
}
// A stamp right after a barrier: bar.sync is issued as deferred blocking, so a clock read behind it may
// run before the barrier completes; reading a shared word first (and the clock only once that value is
// in a register) puts the stamp after it.
__device__ __forceinline__ void dstamp_after(u64* st, int k, const void* word) {
  if (!st) return;
  const unsigned dep = *(const volatile unsigned*)word;
  u64 v;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(v) : "r"(dep) : "memory");
  st[k] = v;
}

// A stamp once v is in a register (the clock read cannot be scheduled before the work that makes v).
__device__ __forceinline__ void dstamp_dep(u64* st, int k, float v) {
  if (!st) return;
  u64 c;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(c) : "f"(v) : "memory");
  st[k] = c;
}

// The 16 blocks' partials of one chain (recv[.][block][idx]) in the contract's adjacent-pair tree.
template <int PS>
__device__ __forceinline__ float exchange_sum(const float (*rb)[PS], int idx) {
  float v[CL_SIZE];
#pragma unroll
  for (int j = 0; j < CL_SIZE; j++) v[j] = rb[j][idx];
#pragma unroll
  for (int step = 1; step < CL_SIZE; step <<= 1)
#pragma unroll
    for (int j = 0; j < CL_SIZE; j += 2 * step) v[j] = ADD(v[j], v[j + step]);
  return v[0];
}
// A row's factor of every mix from its sum of squares: 1 / sqrt(ss / N + eps) (mix = dot * it). N = HC * D is
// 4096 Q, a power of two, so ss / N is ss * (1 / N) exactly (both round the same real number once; no flag
// flushes subnormals), and 1 / sqrt is recip_rn (~100 cycles less than two __fdiv_rn on the chain of both
// the Sinkhorn and pre).
template <int Q>
__device__ __forceinline__ float mix_scale(float ss, float eps) { return recip_rn(SQRT(ADD(MUL(ss, 1.0f / (HC * Q * LANES)), eps))); }

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

// The roles of B for a step with nrows rows and nsk Sinkhorn warps (two rows each): the other warps are helpers
// (y, the join, the next all-reduce), except (at most ISO Sinkhorn warps, CL_ISOLATE_SK) those that share a Sinkhorn
// warp's scheduler (warp w issues on sub-partition w % 4): where the Sinkhorn is the step's serial chain (one or two
// ranks: the fold waits for few or no other rank's words) helpers beside it lengthen it (TP4 M=2: 2.24 against 2.02
// us, H100); where the helpers' fold is as long (four ranks), fewer helpers lengthen that instead. Helper threads
// [0, nrows*HC) make pre; where a Sinkhorn runs, the last helper warp's first nrows*HC threads make post (off the
// Sinkhorn warp's chain, and off the pre warp's).
struct Roles {
  bool helper, po, mixer;  // a helper warp's thread; one that makes post; one that makes pre or post
  int hw, nh, ht, mv;      // rank among helper warps; helper threads; rank among them; (mixers) row * HC + stream
};
#ifndef CL_ROLES_CARRIED
#define CL_ROLES_CARRIED 1  // the roles kept in registers from step to step, made again where nsk or nrows change
#endif                      // (0: made at every step's start, ~20 instructions a warp on the way to the stream values)
template <int NW, int ISO, bool BH = false>
__device__ __forceinline__ Roles roles_of(int nsk, int nrows, int w, int lane) {
  Roles o;
  const bool iso = nsk >= 1 && nsk <= ISO;
  constexpr int NWB = BH ? NW / 2 : NW;  // (CL_B_HALF: B's roles on the first half of the warps)
  o.helper = w >= nsk && (!BH || w < NWB) && (!iso || w % 4 >= nsk);
  o.hw = iso ? (w / 4) * (4 - nsk) + max(0, w % 4 - nsk) : w - nsk;
  o.nh = (iso ? (NW / 4) * (4 - nsk) : NWB - nsk) * 32;
  o.ht = o.hw * 32 + lane;
  const int ppost = nsk > 0 ? o.ht - (o.nh - 32) : -1;  // this thread's post index, if 0 <= it < nrows*HC
  o.po = o.helper && ppost >= 0 && ppost < nrows * HC;
  o.mixer = o.helper && (o.ht < nrows * HC || o.po);
  o.mv = o.po ? ppost : o.ht;
  return o;
}

// y of one element of the block's slice: its row's pre over the four streams' values, in the contract's order.
template <int Q>
__device__ __forceinline__ float y_value(const float (*pre)[HC], const float (*sv)[HC * Q][CL_LANES], const Slot& sl) {
  float v = MUL(pre[sl.mi][0], sv[sl.mi][0 * Q + sl.q][sl.l]);
  v = ADD(v, MUL(pre[sl.mi][1], sv[sl.mi][1 * Q + sl.q][sl.l]));
  v = ADD(v, MUL(pre[sl.mi][2], sv[sl.mi][2 * Q + sl.q][sl.l]));
  return ADD(v, MUL(pre[sl.mi][3], sv[sl.mi][3 * Q + sl.q][sl.l]));
}
#ifndef CL_Y_REGS
#define CL_Y_REGS 0  // 1: a helper's y elements (i = ht + j nh, j < NE) made in registers, every load before any store
#endif
// The helper thread's y elements i = ht + j nh below ny, NE of them at most: every element's shared-memory loads
// and arithmetic first (out-of-range slots read element ht's, unused), then the stores through y, read into a
// register once. One element at a time, each store through the generic pointer (it may alias shared memory) kept
// the next element's loads behind it, and each element waited for its own loads.
template <int Q, int NE>
__device__ __forceinline__ void y_regs(const float (*pre)[HC], const float (*sv)[HC * Q][CL_LANES], bf16_t* y, int row0,
                                       int ny, int L0, int ht, int nh) {
  float v[NE];
#pragma unroll
  for (int j = 0; j < NE; j++) {
    const int i = ht + j * nh;
    v[j] = y_value<Q>(pre, sv, slot_of<Q>(i < ny ? i : ht, L0));
  }
#pragma unroll
  for (int j = 0; j < NE; j++) {
    const int i = ht + j * nh;
    if (i >= ny) break;
    y[elem_of32<Q>(i, L0, row0)] = f2bf(v[j]);
  }
}

#ifndef CL_ENTRY_STAMP
#define CL_ENTRY_STAMP 0  // diagnosis builds (1): traced launches stamp block 0's entry in trace[nsteps + 1] (the prologue's length)
#endif
// (CL_ENTRY_STAMP) block 0's prologue, piece by piece: trace[nsteps + 1 + k], k = 1 the cluster's barriers made,
// 2 step 0's arguments in shared memory, 3 its first ranks, 4 its x folded; each read after the barrier that ends
// the piece, behind a shared word written before it (dstamp_after)
#define CL_PRO_STAMP(k, word)                                                                                  \
  do {                                                                                                         \
    if (CL_ENTRY_STAMP && p.trace && blockIdx.x == 0)                                                          \
      dstamp_after(threadIdx.x == 0 ? p.trace + p.nsteps + 1 + (k) : nullptr, 0, word);                       \
  } while (0)
#define CL_PRO_SLOTS 5  // trace slots past the end: the entry and the four pieces
template <int Q, int RPC, int NT, int R>
__device__ void cluster_cycle(const CArgs& p) {
  if (CL_ENTRY_STAMP && p.trace && blockIdx.x == 0 && threadIdx.x == 0) p.trace[p.nsteps + 1] = globaltimer();
  constexpr int NW = NT / 32, NCH = (CL_CHAINS + NW - 1) / NW;  // warps; chains a warp
  // the dot products' tiling: RW rows by NC chain slots a warp, chain c in group c % CW (TILE: at eight rows
  // and 16 warps, two row blocks of four by eight groups of up to four chains; else every row, NCH slots)
  constexpr bool BY_LANES = RPC >= CL_DOT_LANES && NW == 16;  // the dot products by lane halves (dots_by_lanes)
#ifdef CL_W_LDG
  static_assert(BY_LANES, "CL_W_LDG reads the weights from global memory in dots_by_lanes only (16 warps)");
#endif
  constexpr bool TILE = CL_DOT_TILE && RPC == 8 && NW == 16;
  constexpr int RW = TILE ? 4 : RPC, CW = TILE ? 8 : NW, NC = TILE ? 4 : NCH;
  constexpr int AW = sizeof(MhcArgs) / 8;                        // 8-byte words of one step's arguments
  static_assert(AW + 11 <= NT, "a thread per word of the next step's arguments, header and order offset");
  // elements a helper thread publishes at the flag-and-data join, for the fewest helpers a step leaves
  // (NW - nsk, or (NW / 4) * (4 - nsk) where the Sinkhorn warps' schedulers are left to them, over nsk <= NSK)
  constexpr int ISO = cl_isolate_max<R, RPC>();  // the most Sinkhorn warps whose schedulers are left to them
  constexpr int NSK = (RPC + 1) / 2, ISN = ISO < NSK ? ISO : NSK;
  constexpr bool BH = (CL_B_HALF & RPC) != 0 && RPC <= 2 && R > 2 && ISO == 0 && NW == 16 && BY_LANES;  // (CL_B_HALF)
  constexpr int NH_MIN = BH ? 32 * (NW / 2 - NSK)
                            : 32 * (ISN > 0 && (NW / 4) * (4 - ISN) < NW - NSK ? (NW / 4) * (4 - ISN) : NW - NSK);
  constexpr int NE = (RPC * Q * CL_LANES + NH_MIN - 1) / NH_MIN;
  // packed words (three bf16 values each) a helper thread publishes and folds; registers of its own values and
  // first ranks: NE (one a value), or three a packed word
  constexpr int NW3 = ((RPC * Q * CL_LANES + 2) / 3 + NH_MIN - 1) / NH_MIN;
  constexpr int NO = CL_LL_PACK3 && 3 * NW3 > NE ? 3 * NW3 : NE;
  __shared__ __align__(16) float sv[RPC][HC * Q][CL_LANES];   // this block's stream values (fp32 of the bf16), element order u
  __shared__ float xs[RPC][Q][CL_LANES];        // x of the next step (folded)
  __shared__ u64 xbar[2];                       // the exchange of step s is complete: xbar[s & 1]
  constexpr int PS = cl_partials_floats<Q, RPC>();  // floats of one block's partials of a step (rows x 25, padded)
  // this block's partials: [row * 25 + chain] (0: sum of squares, 1 + o); BY_LANES: of its two lane halves
  __shared__ __align__(16) float halves[BY_LANES ? 2 : 1][PS];
#if CL_B_LOAD
  __shared__ float bdummy[2][PS];  // (CL_B_LOAD) where B's extra dot products land, read by nothing
#endif
  float* const part = halves[0];
  __shared__ float pc[RPC][HC + HC * HC];       // post, comb for the next step
  __shared__ float pre_s[RPC][HC];
  __shared__ MhcArgs args_s[2];                 // step s's arguments for this rank at [s & 1]
  __shared__ int hdr_s[2][10];                  // step s's header (PStep's first ten ints) at [s & 1]
  __shared__ long long ordoff_s[2];             // where step s's first ranks start in the order table, at [s & 1]
  // step s's early / late boxes have landed: wbar[0 / 1][s & 1]; builds whose boxes are all early (two buffers)
  // declare no late ones, so their shared memory lies as before the slots (with four barriers ord_s lay 16 bytes
  // further, and with the slot arithmetic below written generally the one- and two-row builds were another schedule,
  // measured 0.4-0.9% slower at M=1/2 on an H100; as written they are the buffers' SASS again)
  constexpr int BOX = cl_box_rows<Q>(), BPS = cl_wboxes<Q>(), NSL = cl_wslots<Q, RPC>(), EARLY = NSL - BPS < BPS ? NSL - BPS : BPS;
  __shared__ u64 wbar[EARLY < BPS ? 2 : 1][2];
  __shared__ u64 arr_s[4];                      // traced launches: the last warp after C, after A, at the end; the first after C
  __shared__ unsigned char ord_s[RPC * Q * CL_LANES];  // first ranks of the next fold (load_order)
  extern __shared__ __align__(128) float wsm[];  // [24][HC * Q][64]: this block's weights of the step, then recv
  // every block's partials of step s at [s & 1][block][row * 25 + chain], pushed by each block into all 16
  // (st.async), complete on xbar[s & 1]
  // the weights' box slots (cl_wslots): step s's box k in slot (s * BPS + k) % NSL; the next step's first EARLY
  // boxes are requested at the step's start, the rest after the dot products (two buffers: all early; one: none)
  constexpr bool SPLIT = NSL % BPS != 0;  // a step's boxes may lie in slots apart
  constexpr int EARLY_AT = cl_wbufs<RPC>() == 1 && EARLY > 0 ? CL_WSPARE_AT : 0;  // 1: after the stream values
  static_assert(!SPLIT || BPS == 2, "WStep holds two boxes");
  float (*const recv)[CL_SIZE][PS] = reinterpret_cast<float (*)[CL_SIZE][PS]>(wsm + NSL * BOX * CL_LANES);
  const int t = threadIdx.x, w = t >> 5, lane = t & 31;
  const int b = (int)cluster_ctarank(), cid = blockIdx.x / CL_SIZE;
  const int r = p.rank0 + cid / p.groups, g = cid % p.groups;
  const int L0 = b * CL_LANES;
  const bool work = p.mode == 0;
  const bool stamper = cid == 0 && b == 0 && t == 0;
  // the thread that requests the block's weights (CL_FETCH_LAST; the name kept: ptxas schedules the kernel
  // differently with `t == 0` written out, and this schedule is the measured one)
  const bool fetcher = t == (CL_FETCH_LAST ? NT - 1 : 0);
  const bool skipper = cid == (int)gridDim.x / CL_SIZE - 1;
  const u64 target = p.tag * (u64)gridDim.x;
  unsigned wphase = 0;  // bit 2g + k: the parity of wbar[g][k]'s next wait
  bool wpending = false;
  int nout_next = 0;    // (EARLY, thread 0) outputs of the step whose weights the next step's start requests
  {
    if constexpr (EARLY < BPS) {
      u64* const bars[6] = {&wbar[0][0], &wbar[0][1], &wbar[EARLY < BPS][0], &wbar[EARLY < BPS][1], &xbar[0], &xbar[1]};
      init_cluster_mbarriers(bars, 6);
    } else {
      u64* const bars[4] = {&wbar[0][0], &wbar[0][1], &xbar[0], &xbar[1]};
      init_cluster_mbarriers(bars, 4);
    }
    if (CL_WARP_STAMPS && t < 4) arr_s[t] = t == 3 ? ~0ull : 0ull;
  }
  CL_PRO_STAMP(1, &xbar[0]);

  // prologue: step 0's arguments, x and weights
  {
    const PStep& st = p.steps[0];
    copy_args_range(&args_s[0], st.mh[r], 0, NT);
    if (t < 10) hdr_s[0][t] = (&st.kind)[t];
    if (t == 10) ordoff_s[0] = p.order_off[0];
    if (work && t == NT - 1)
      for (int k = 1; k < CL_PART_AHEAD; k++) prefetch_partials(part_fetch(p, k, r, p.nsteps), p.groups, g, b);
    __syncthreads();
    CL_PRO_STAMP(2, &args_s[0]);
    int row0, nrows;
    rows_of(st.rows, p.groups, g, row0, nrows);
    if (work) {
#ifndef CL_W_LDG
      if (fetcher && EARLY > 0) fetch_weights<Q, NSL>(p, 0, st.nout, r, L0, wsm, 0, 0, EARLY, &wbar[0][0]);
      if (fetcher && EARLY < BPS) fetch_weights<Q, NSL>(p, 0, st.nout, r, L0, wsm, 0, EARLY, BPS, &wbar[EARLY < BPS][0]);
      if (EARLY > 0 && fetcher && p.nsteps > 1) nout_next = p.steps[1].nout;
      wpending = true;
#endif
      if (t == 0)
        for (int k = 1; k < CL_LOOKAHEAD && k < p.nsteps; k++) prefetch_l2<Q>(p.steps[k], r, b);
      if (st.fused) load_order<Q>(p.order + p.order_off[0], args_s[0].D, row0, nrows, L0, ord_s, t, NT);
      __syncthreads();
      CL_PRO_STAMP(3, &ord_s[0]);
      fold_x<Q, R>(args_s[0], st.fused, ord_s, row0, nrows, L0, xs, t, NT);
    }
    __syncthreads();
    CL_PRO_STAMP(4, &xs[0][0][0]);
  }
#if CL_ROLES_CARRIED
  Roles ro{};
  int role_key = -1;  // (nsk << 8) | nrows of the step ro was made for
#endif
  for (int s = 0; s < p.nsteps; s++) {
    // the header from shared memory (copied during the step before): no global load at the step's start
    const int* hd = hdr_s[s & 1];
    const MhcArgs& A = args_s[s & 1];
    const int op = hd[1], nout = hd[3], buf = s & 1;
    const bool carried = hd[6] == s - 1 && s > 0;
    if (stamper && p.trace) p.trace[s] = globaltimer();
    // every block's stamps (its thread 0, and its helper thread 0): [step][block][CL_DETAIL]
    u64* dh = p.detail ? p.detail + ((size_t)s * gridDim.x + blockIdx.x) * CL_DETAIL : nullptr;  // (helper thread 0)
    u64* ds = t == 0 ? dh : nullptr;
    dstamp(ds, 0);
    if (CL_SM_STAMP && ds) ds[14] = smid() + 1;
    // the next step's early boxes (all of them with two buffers) requested now into their free slots (their last reader, the dot
    // products of step s - 1, finished before that step's block barrier after A); nout_next came from the step
    // table a step ago, and the one after it is loaded now. First thing in the step, ahead of the step's global
    // loads (the copy's proxy fence is a MEMBAR.ALL.CTA in SASS, which might wait for loads in flight; measured
    // neutral on the H200: stream values + to next step 1.15 -> 1.18 us at M=2, thirteenth session). Requested
    // in B instead (step s + 2's into step s's buffer), by thread 0 after its Sinkhorn M=1/2 ran 0.473 / 0.545 ms,
    // by a helper beside B's prefetches 0.532 / 0.616 (the copy slowed the fold, 1.6 -> 2.7 us), against 0.462 /
    // 0.525 here (fifteenth session): both removed. After thread 0's stream values, C took 0.93 against 0.83 us and
    // TP4 M=2 0.518 against 0.494 ms (nineteenth session; with no copy at all C is 0.77): removed
    if (EARLY > 0 && EARLY_AT == 0 && CL_FETCHES && work && fetcher && s + 1 < p.nsteps) {
      fetch_weights<Q, NSL>(p, s + 1, nout_next, r, L0, wsm, CL_FIRST_SLOT(s + 1), 0, EARLY, &wbar[0][(s + 1) & 1]);
      nout_next = s + 2 < p.nsteps ? p.steps[s + 2].nout : 0;
      dstamp(ds, 15);
    }
    int row0, nrows;
    rows_of(hd[5], p.groups, g, row0, nrows);
    // the roles of B (Roles: Sinkhorn warps, helpers, mixers), made again only where the step's rows or its
    // Sinkhorn warps differ from the step before's (CL_ROLES_CARRIED)
    const int nsk = work && op != OP_POST_HEAD ? (nrows + 1) / 2 : 0;
#if CL_ROLES_CARRIED
    if (((nsk << 8) | nrows) != role_key) {
      ro = roles_of<NW, ISO, BH>(nsk, nrows, w, lane);
      role_key = (nsk << 8) | nrows;
    }
#else
    const Roles ro = roles_of<NW, ISO, BH>(nsk, nrows, w, lane);
#endif
    const bool helper = ro.helper, po = ro.po, mixer = ro.mixer;
    const int hw = ro.hw, nh = ro.nh, ht = ro.ht, mv = ro.mv;
    const int hf = lane >> 4, t16 = lane & 15;  // (Sinkhorn warps) the lane's row of the warp's two, its comb entry
    // the threads that split mixes after the exchange (a Sinkhorn lane: its comb entry; a mixer: its pre or post)
    // load the step's base and scale now (params in global memory: the weight stream may have pushed them out of
    // L2; the latency overlaps C and A)
    float scale0 = 0.0f, base0 = 0.0f;
    if (work && w < nsk) {
      scale0 = A.scale[2];
      base0 = A.base[2 * HC + t16];
    } else if (work && mixer) {
      scale0 = A.scale[po ? 1 : 0];
      base0 = A.base[(po ? HC : 0) + mv % HC];
    }
    // the prefetches of B (a later step's partial sum and weights): their addresses loaded now, by a helper
    const PartFetch pf = work && t == NT - 1 ? part_fetch(p, s + CL_PART_AHEAD, r, s + CL_LOOKAHEAD) : PartFetch{};
    // the next step's arguments and header: loaded into registers now, stored into shared memory after A
    // (the L2 round trip overlaps C and A instead of lengthening the exchange)
    u64 nx_w = 0;
    if (s + 1 < p.nsteps && t <= AW + 10) {  // (the warps past AW + 10 on one branch, not one a case)
      const PStep& nx = p.steps[s + 1];
      if (t < AW) nx_w = reinterpret_cast<const u64*>(&nx.mh[r])[t];
      else if (t < AW + 10) nx_w = (unsigned)(&nx.kind)[t - AW];
      else if (t == AW + 10) nx_w = (u64)p.order_off[s + 1];
    }
    // this step's exchange: every block pushes its nrows * 25 partials (16-byte pieces) into each of the 16
    const int npieces = (nrows * CL_CHAINS + 3) / 4;
    if (t == 0) mbar_expect(&xbar[buf], CL_SIZE * npieces * 16);
    // C: stream values of this step for the block's columns
#ifndef CL_C_SKIP  // timing ablation: no stream values at all (inexact)
#ifdef CL_C_TWICE  // timing ablation: the stream values made twice by the same code (the second pass with its
                   // instructions cached; inexact where a step's residual is the step before's values)
#pragma unroll 1
    for (int rep = 0; rep < 2; rep++)
#endif
    if (work) stream_values<Q, (RPC >= CL_SV_PAIRS), (RPC >= CL_SV_LANE2)>(A, op, carried, row0, nrows, L0, xs, sv, pc, t, NT);
#endif
    if (CL_WAIT_STAMP) dstamp(ds, 11);
    arrival(&arr_s[0], dh, true, w);
    arrival(&arr_s[3], dh, false, w);
    __syncthreads();
    dstamp_after(ds, 1, &sv[0][0][CL_LANES - 1]);
    if (EARLY_AT == 1 && CL_FETCHES && work && fetcher && s + 1 < p.nsteps) {  // (CL_WSPARE_AT: the spare box after C)
      fetch_weights<Q, NSL>(p, s + 1, nout_next, r, L0, wsm, CL_FIRST_SLOT(s + 1), 0, EARLY, &wbar[0][(s + 1) & 1]);
      nout_next = s + 2 < p.nsteps ? p.steps[s + 2].nout : 0;
    }
    if (s > 0) arrival_take(ds ? ds - (size_t)gridDim.x * CL_DETAIL : nullptr, 13, &arr_s[2], 0ull);  // (step s - 1's end)
    // A: dot products of the block's 64 lanes. BY_LANES: by lane halves (dots_by_lanes: each warp one lane half and
    // a chain group, the partials of each half into halves[0] / [1]); else each warp over the 64 lanes (two a
    // thread), warp w's chains over its rows (every row, or at eight rows (TILE) half of them: warps w and w + 8
    // share chain group w % 8), then the 64-lane tree into part (synchronization-only launches: zeros)
    // (either form: the early L2 prefetch where it is built, then the wait for this step's weights)
    if (work) {
#ifdef CL_PREFETCH_EARLY
      if (pf.fn) prefetch_fn<Q>(pf.fn, pf.nout, b);
#endif
      if (wpending) {
        const int k = s & 1;
        if (EARLY > 0) mbar_wait(&wbar[0][k], (wphase >> k) & 1);
        if (EARLY < BPS) mbar_wait(&wbar[EARLY < BPS][k], (wphase >> (2 + k)) & 1);
        wphase ^= (EARLY > 0 ? 1u << k : 0u) | (EARLY < BPS ? 4u << k : 0u);
      }
      if (CL_WAIT_STAMP) dstamp(ds, 12);
    }
    const int sl0 = CL_FETCHES ? CL_FIRST_SLOT(s) : 0;  // this step's weights: box k in slot (sl0 + k) % NSL
    const WStep<SPLIT> wcur{wsm + (size_t)sl0 * BOX * CL_LANES, wsm + (size_t)((sl0 + 1) % NSL) * BOX * CL_LANES};
    if constexpr (BY_LANES) {
#ifdef CL_W_LDG  // tuning (exact): the weights read from global memory (L2, prefetched CL_LOOKAHEAD steps ahead)
                 // into registers, no copy through shared memory: A 1.25 -> 2.88 us at TP4 M=2 (H200)
      if (work) dots_by_lanes<Q, RPC, PS, LANES>(WStep<false>{A.fn + L0, nullptr}, sv, nrows, nout, w, lane, halves);
#else
#ifdef CL_A_TWICE  // timing ablation: the dot products made twice by the same code (the second pass with its
                   // instructions cached)
#pragma unroll 1
      for (int rep = 0; rep < 2; rep++)
#endif
      if (work) dots_by_lanes<Q, RPC, PS>(wcur, sv, nrows, nout, w, lane, halves);
#endif
    } else {
      const int wr = TILE ? w / CW : 0, wc = TILE ? w % CW : w;  // the warp's row block and chain group
      const int mrow0 = wr * RW, nrw = min(RW, nrows - mrow0);    // its rows: [mrow0, mrow0 + nrw)
      float a0[RW][NC], a1[RW][NC];
#pragma unroll
      for (int mi = 0; mi < RW; mi++)
#pragma unroll
        for (int i = 0; i < NC; i++) a0[mi][i] = a1[mi][i] = 0.0f;
      if (work) {
        const bool sq = wc == 0;
        const float* wrow[NC];
#pragma unroll
        for (int i = 0; i < NC; i++) {
          const int c = wc + CW * i;
          wrow[i] = wcur.template of<Q, CL_LANES>(c >= 1 && c <= nout ? c - 1 : 0) + 2 * lane;
        }
        const float (*svw)[HC * Q][CL_LANES] = sv + mrow0;
        constexpr int U = CL_DOT_UNROLL;
        if (TILE) {
          // eight rows: four rows by four chain slots a warp (8 of shared memory's float2 loads per u where
          // eight rows by two slots took 10); loops for the slot counts of 24 and 4 outputs, else all slots
          const int ns = wc <= nout ? (nout - wc) / CW + 1 : 0;  // slots c = wc + 8i <= nout
          if (sq && ns == 4) dot_rows<Q, RW, NC, 4, DOT_SQ, U>(wrow, svw, nrw, lane, sq, a0, a1);
          else if (sq && ns == 1) dot_rows<Q, RW, NC, 1, DOT_SQ, U>(wrow, svw, nrw, lane, sq, a0, a1);
          else if (!sq && ns == 3) dot_rows<Q, RW, NC, 3, DOT_W, U>(wrow, svw, nrw, lane, sq, a0, a1);
          else if (!sq && ns == 1) dot_rows<Q, RW, NC, 1, DOT_W, U>(wrow, svw, nrw, lane, sq, a0, a1);
          else if (ns > 0) dot_rows<Q, RW, NC, NC, DOT_EITHER, U>(wrow, svw, nrw, lane, sq, a0, a1);
        } else if (NCH == 2 && RPC >= CL_DOT_SPLIT_ROWS) {
          // 16 warps: every warp's loop computes only the chains it stores (shared memory's bandwidth is the
          // bound: a slot past nout would load output 0's weights for nothing), unrolled fully at two rows
          constexpr int US = RPC <= 2 ? HC * Q : U;
          if (sq) dot_rows<Q, RW, NC, 2, DOT_SQ, US>(wrow, svw, nrw, lane, sq, a0, a1);
          else if (chain_of<NW>(w, 1) <= nout) dot_rows<Q, RW, NC, 2, DOT_W, US>(wrow, svw, nrw, lane, sq, a0, a1);
          else if (chain_of<NW>(w, 0) <= nout) dot_rows<Q, RW, NC, 1, DOT_W, US>(wrow, svw, nrw, lane, sq, a0, a1);
        } else {
          // branch-free: every chain of the warp accumulates (a chain past nout reads output 0's weights and
          // is never stored)
          dot_rows<Q, RW, NC, NC, DOT_EITHER, HC * Q>(wrow, svw, nrw, lane, sq, a0, a1);
        }
      }
#pragma unroll
      for (int mi = 0; mi < RW; mi++) {
        if (mi < nrw) {
#pragma unroll
          for (int i = 0; i < NC; i++) {
            const int c = wc + CW * i;
            if (c <= nout) {
              float v = ADD(a0[mi][i], a1[mi][i]);  // lanes 2*lane, 2*lane+1: the tree's first level
#pragma unroll
              for (int off = 1; off < 32; off <<= 1) v = ADD(v, __shfl_down_sync(0xffffffffu, v, off));
              if (lane == 0) part[(mrow0 + mi) * CL_CHAINS + c] = v;
            }
          }
        }
      }
    }
    // the next step's arguments and header (loaded at the step's start; its slot was step s - 1's): read by
    // the weight copy below, the helpers in B and every thread in the next step
    if (s + 1 < p.nsteps) {
      if (t < AW) reinterpret_cast<u64*>(&args_s[(s + 1) & 1])[t] = nx_w;
      else if (t < AW + 10) hdr_s[(s + 1) & 1][t - AW] = (int)nx_w;
      else if (t == AW + 10) ordoff_s[(s + 1) & 1] = (long long)nx_w;
    }
    arrival(&arr_s[1], dh, true, w);
    __syncthreads();
    dstamp_after(ds, 2, &part[0]);
    arrival_take(ds, 11, &arr_s[0], 0ull);
    arrival_take(ds, 14, &arr_s[3], ~0ull);
    // the flag-and-data join (one row group a rank, a fused all-reduce next; CL_COUNTER_JOIN: the counter)
    const bool ll = CL_LL_JOIN && p.ll && p.groups == 1 && s + 1 < p.nsteps && hdr_s[(s + 1) & 1][2];
    const int* nh_ = hdr_s[(s + 1) & 1];  // the next step's header and arguments (stored above)
    const MhcArgs& A1 = args_s[(s + 1) & 1];
    int nrow0 = 0, nn = 0;
    if (s + 1 < p.nsteps) rows_of(nh_[5], p.groups, g, nrow0, nn);
#ifdef CL_LL_THIRD  // timing ablation: the join's words of a third of the elements published and folded (inexact)
    const int n1 = (nn * Q * CL_LANES + 2) / 3;
#else
    const int n1 = nn * Q * CL_LANES;
#endif
    const unsigned char* ordg = s + 1 < p.nsteps ? p.order + ordoff_s[(s + 1) & 1] : nullptr;
    // flag-and-data join: this rank's partial of the next all-reduce for the elements a helper thread
    // publishes (i = ht + j*nh; a producer holds what it publishes) and their first ranks in the fold (the
    // host table), loaded here, before the exchange and the weight copy, and used after the rank's barrier
    // in B (loaded at the start of B they came back behind the weight copy, after y: the publish waited)
    // (nothing uses them before the barrier: a use, even a shift into a packed word, would stall the warp
    // until the load returns)
    // Where the helpers would need a second round trip for bf16 words (eight rows), they fold the elements of
    // one, [0, nsplit), and the Sinkhorn warps, done with the Sinkhorn before the helpers' first round trip
    // returns, the rest: i = nsplit + st + j * nsk * 32 for their thread st, j < NES (their first ranks in
    // firstb, loaded here as the helpers' are; at most four ranks: at eight this second fold's registers spilled).
    constexpr int NES = ll_batch<true, R, NE>();
    const int nsplit = nh * NES, st_ = w * 32 + lane;
    const bool split = CL_LL_SPLIT && !CL_LL_PACK3 && R <= 4 && ll && A1.ring.is_bf16 && nsk > 0 && n1 > nsplit &&
                       n1 - nsplit <= nsk * 32 * NES;
    const bool pack3 = CL_LL_PACK3 && ll && A1.ring.is_bf16;  // (the words of a bf16 all-reduce: three values each)
    const int nw = (n1 + 2) / 3;  // (pack3) words of this block's elements
    unsigned own[NO], firstb[NO];
    if (ll && helper && pack3) {
#pragma unroll
      for (int j = 0; j < NW3; j++)
#pragma unroll
        for (int m = 0; m < 3; m++) {
          const int i = 3 * (ht + j * nh) + m;
          const bool on = i < n1;
          const size_t e = elem_of<Q>(on ? i : 0, L0, nrow0);
          own[3 * j + m] = on ? raw_bits<true>(A1.peers[r], e) : 0u;
          firstb[3 * j + m] = on ? ordg[e] : 0u;
        }
    } else if (ll && helper) {
      const bool bf = A1.ring.is_bf16;
#pragma unroll
      for (int j = 0; j < NE; j++) {
        const bool on = ht + j * nh < n1;
        const size_t e = elem_of<Q>(on ? ht + j * nh : 0, L0, nrow0);
        own[j] = on ? raw_bits(bf, A1.peers[r], e) : 0u;
        firstb[j] = on ? ordg[e] : 0u;
      }
    } else if (split && w < nsk) {
#pragma unroll
      for (int j = 0; j < NES; j++) {
        const int i = nsplit + st_ + j * nsk * 32;
        firstb[j] = i < n1 ? ordg[elem_of<Q>(i, L0, nrow0)] : 0u;
      }
    }
    // the words of this step's join: [2 parities][R ranks][stride] 64-bit words, then as many 32-bit ones (bf16)
    const unsigned seq = p.ll_seq0 + (unsigned)s;
    u64* const ll64 = ll ? p.ll + (size_t)(s & 1) * R * p.ll_stride : nullptr;
    unsigned* const ll32 =
        ll ? reinterpret_cast<unsigned*>(p.ll + (size_t)2 * R * p.ll_stride) + (size_t)(s & 1) * R * p.ll_stride : nullptr;
    // X: the block's partials pushed into every block of the cluster, a 16-byte piece a lane (warp 0 to all 16 in
    // the builds of CL_PUSH_W0's row counts, else warp w to blocks w, w + NW, ...)
    if constexpr ((CL_PUSH_W0 & RPC) != 0) {
      // (CL_PUSH_W0) warp 0 pushes every piece to every block: lane j makes piece j once and stores it into the 16
      if (w == 0)
        for (int j = lane; j < npieces; j += 32) {
          const float4 v = exchange_piece<BY_LANES, PS>(halves, j);
#pragma unroll 4
          for (int d = 0; d < CL_SIZE; d++)
            push_dsmem(dsmem_addr(&recv[buf][b][0], d) + 16 * j, v, dsmem_addr(&xbar[buf], d));
        }
    } else {
      static_assert(CL_PUSH_ROT == 0 || NW == CL_SIZE, "CL_PUSH_ROT: one destination a warp (16 warps)");
      for (int d = w; d < CL_SIZE; d += NW) {
        const int to = CL_PUSH_ROT ? (d + CL_PUSH_ROT) % CL_SIZE : d;  // (CL_PUSH_ROT: a diagnosis)
        const unsigned rb = dsmem_addr(&xbar[buf], to), ra = dsmem_addr(&recv[buf][b][0], to);
        for (int j = lane; j < npieces; j += 32)
          push_dsmem(ra + 16 * j, exchange_piece<BY_LANES, PS>(halves, j), rb);
      }
    }
    // every warp of this block is past its dot products: the next step's weights may land in wsm (the copy
    // issued by thread 0, which waits for no gpu-scope fence before it lands: a helper's rank barrier
    // would wait for the whole copy)
    wpending = CL_FETCHES && work && s + 1 < p.nsteps;  // (its first EARLY boxes were requested at the step's start)
    if (EARLY < BPS && wpending && fetcher)
      fetch_weights<Q, NSL>(p, s + 1, hdr_s[(s + 1) & 1][3], r, L0, wsm, CL_FIRST_SLOT(s + 1), EARLY, BPS, &wbar[EARLY < BPS][(s + 1) & 1]);
    // B: Sinkhorn warps (two rows each) and helper warps (y, join, the next all-reduce); each thread that
    // splits a mix first waits until every block's partials are in (its own test of the block's mbarrier:
    // no cluster barrier, whose release was a gpu-scope fence behind every store of C, and no block
    // barrier: the Sinkhorn starts as soon as its own rows' mixes are made)
    if (ll && !helper) cluster_arrive_relaxed();  // warps that make no y arrive at the rank's barrier at once
                                                  // (relaxed: they publish nothing through it)
    if (w < nsk) {
      const int mi = 2 * w + hf, mic = min(mi, nrows - 1);
      mbar_wait_cluster(&xbar[buf], (s >> 1) & 1, p.err, p.timeout_ns, s);
      dstamp(ds, 3);
      // both trees' loads before mix_scale's branches (behind them, the compiler issued the second tree's loads
      // only after the root and the reciprocal)
      const float ssum = exchange_sum<PS>(recv[buf], mic * CL_CHAINS);
      const float dsum = exchange_sum<PS>(recv[buf], mic * CL_CHAINS + 1 + 2 * HC + t16);
      const float rs = mix_scale<Q>(ssum, A.norm_eps);
      const float lg = ADD(MUL(MUL(dsum, rs), scale0), base0);
      dstamp_dep(ds, 4, lg);
      const float c = sinkhorn_lane(lg, t16 >> 2, t16 & 3, hf * 16, A.hc_eps, A.sinkhorn_iters);
      if (mi < nrows) {
        pc[mi][HC + t16] = c;
        if (b == 0) A.comb_out[(row0 + mi) * HC * HC + t16] = c;
      }
      dstamp(ds, 5);
      if (split) {
        unsigned firstv[(NES + 7) / 8];
        pack_firsts<NES>(firstb, firstv);
        fold_ll<Q, true, R, NES>(A1, ll32, p.ll_stride, seq, firstv, ordg, nrow0, n1, L0, xs, nsplit + st_, nsk * 32, work,
                                 p.err, p.timeout_ns, s);
      }
    } else if (helper) {
      if (mixer) {  // (in synchronization-only launches too: the exchange's waiters)
        mbar_wait_cluster(&xbar[buf], (s >> 1) & 1, p.err, p.timeout_ns, s);
        if (nsk == 0) dstamp(ds, 3);
        if (work) {
          const int mi = mv / HC, h = mv % HC;
          const float ssum = exchange_sum<PS>(recv[buf], mi * CL_CHAINS);
          const float dsum = exchange_sum<PS>(recv[buf], mi * CL_CHAINS + 1 + (po ? HC : 0) + h);
          const float mx = MUL(dsum, mix_scale<Q>(ssum, A.norm_eps));
          const float sg = psigmoid_rn(ADD(MUL(mx, scale0), base0));
          if (po) {
            const float ps = MUL(2.0f, sg);
            pc[mi][h] = ps;
            if (b == 0) A.post_out[(row0 + mi) * HC + h] = ps;
          } else {
            pre_s[mi][h] = ADD(sg, A.hc_eps);
          }
          if (nsk == 0) dstamp_dep(ds, 4, sg);
        }
      }
      if (work && nrows > 0) {
        bar_named(1, nh);
        const int ny = nrows * Q * CL_LANES;
#if CL_Y_REGS
        y_regs<Q, NE>(pre_s, sv, A.y, row0, ny, L0, ht, nh);
        for (int i = ht + NE * nh; i < ny; i += nh) {  // (more elements than NE: none for the built shapes)
#else
        for (int i = ht; i < ny; i += nh) {
#endif
          const Slot sl = slot_of<Q>(i, L0);
          A.y[(size_t)(row0 + sl.mi) * (Q * LANES) + sl.col] = f2bf(y_value<Q>(pre_s, sv, sl));
        }
        if (ht == 0) dstamp(dh, 8);
      }
      if (ll) {
        // the rank's barrier: every block of this cluster (the whole rank) has stored y
#ifdef CL_JOIN_RELEASE  // tuning: the rank's barrier with release semantics (a gpu-scope fence in SASS: 1 us)
        cluster_arrive_any();
#else
        cluster_arrive_relaxed();
#endif
        if (t == NT - 1) prefetches_b<Q>(pf, p.groups, g, b);
        cluster_wait_any();
        if (ht == 0) dstamp(dh, 7);
        const bool bfw = A1.ring.is_bf16;
        u64* const ll3 = reinterpret_cast<u64*>(ll32);  // (pack3) this step's packed words, rank 0's
        if (pack3 && !(skipper && s == p.skip_step)) {
          u64* const mine = ll3 + (size_t)r * (p.ll_stride / 2);
#pragma unroll
          for (int j = 0; j < NW3; j++)
            if (ht + j * nh < nw)
              st_relaxed(mine + slot3<Q>(ht + j * nh, L0, nrow0),
                         word3_make(seq, own[3 * j], own[3 * j + 1], own[3 * j + 2]));
          for (int k = ht + NW3 * nh; k < nw; k += nh) {  // (more words than NW3: none for the built shapes)
            unsigned v[3];
#pragma unroll
            for (int m = 0; m < 3; m++)
              v[m] = 3 * k + m < n1 ? raw_bits<true>(A1.peers[r], elem_of<Q>(3 * k + m, L0, nrow0)) : 0u;
            st_relaxed(mine + slot3<Q>(k, L0, nrow0), word3_make(seq, v[0], v[1], v[2]));
          }
        } else if (!(skipper && s == p.skip_step)) {  // (the watchdog test: the last cluster never publishes)
#if CL_PUB_REGS
          if (bfw) publish_words<Q, true, NE>(ll32 + (size_t)r * p.ll_stride, seq, own, ht, nh, n1, L0, nrow0);
          else publish_words<Q, false, NE>(ll64 + (size_t)r * p.ll_stride, seq, own, ht, nh, n1, L0, nrow0);
#else
#pragma unroll
          for (int j = 0; j < NE; j++) {
            if (ht + j * nh >= n1) continue;
            publish_word(bfw, ll32, ll64, elem_of<Q>(ht + j * nh, L0, nrow0) + (size_t)r * p.ll_stride, seq, own[j]);
          }
#endif
          for (int i = ht + NE * nh; i < n1; i += nh) {  // (more elements than NE: none for the built shapes)
            const size_t e = elem_of<Q>(i, L0, nrow0);
            publish_word(bfw, ll32, ll64, e + (size_t)r * p.ll_stride, seq, raw_bits(bfw, A1.peers[r], e));
          }
        }
        if (ht == 0) dstamp(dh, 10);
        if (pack3) {
          unsigned firstv[(3 * NW3 + 7) / 8];
          pack_firsts<3 * NW3>(firstb, firstv);
          fold_ll3<Q, R, NW3>(A1, ll3, p.ll_stride / 2, seq, firstv, ordg, nrow0, n1, L0, xs, ht, nh, work,
                              p.err, p.timeout_ns, s);
        } else {
          unsigned firstv[(NE + 7) / 8];
          pack_firsts<NE>(firstb, firstv);
          if (bfw)
            fold_ll<Q, true, R, NE>(A1, ll32, p.ll_stride, seq, firstv, ordg, nrow0, split ? nsplit : n1, L0, xs, ht, nh,
                                    work, p.err, p.timeout_ns, s);
          else
            fold_ll<Q, false, R, NE>(A1, ll64, p.ll_stride, seq, firstv, ordg, nrow0, n1, L0, xs, ht, nh, work, p.err,
                                     p.timeout_ns, s);
        }
        if (ht == 0) dstamp(dh, 9);
      } else {
        bar_named(1, nh);  // every y of this block is stored before its arrival
#ifdef CL_NO_JOIN  // timing ablation: clusters never wait for each other (the all-reduces lose their join)
        if (false)
#else
        if (ht == 0 && !(skipper && s == p.skip_step))
#endif
#ifdef CL_JOIN_RELEASE
          asm volatile("red.release.gpu.global.add.u64 [%0], %1;" :: "l"(p.join + s), "l"(1ull) : "memory");
#else
          asm volatile("red.relaxed.gpu.global.add.u64 [%0], %1;" :: "l"(p.join + s), "l"(1ull) : "memory");
#endif
        if (s + 1 < p.nsteps) {
          if (t == NT - 1) prefetches_b<Q>(pf, p.groups, g, b);  // (a helper: nsk <= 4 of 8 or 16 warps)
          // the fold's first ranks while the join waits (the poller, helper thread 0, takes no part)
          if (work && nh_[2] && ht > 0)
            load_order<Q>(ordg, A1.D, nrow0, nn, L0, ord_s, ht - 1, nh - 1);
          if (ht == 0) {
#ifndef CL_NO_JOIN
            poll_at_least(p.join + s, target, p.err, p.timeout_ns, s);  // every block of every rank arrived
#endif
            dstamp(dh, 7);  // join passed
          }
          bar_named(1, nh);
          if (ht == 0) dstamp_after(dh, 10, &ord_s[0]);
          if (work) {
            fold_x<Q, R>(A1, nh_[2], ord_s, nrow0, nn, L0, xs, ht, nh);
            if (ht == 0) dstamp(dh, 9);
          }
        }
      }
    }
#if CL_B_LOAD
    if (BH && work && w >= NW / 2) {  // (diagnosis) one row's dot products beside B, into a buffer nothing reads
      dots_by_lanes<Q, 1, PS>(wcur, sv, 1, nout, w - NW / 2, lane, bdummy);
      dots_by_lanes<Q, 1, PS>(wcur, sv, 1, nout, w, lane, bdummy);
      // (a read of the results the compiler cannot drop: an OR of nothing into err where a sum's bits are all ones)
      if (lane == 0 && __float_as_uint(bdummy[w & 1][w]) == 0xffffffffu) atomicOr(reinterpret_cast<unsigned*>(p.err), 0u);
    }
#endif
    if (ll && !helper) cluster_wait_any();
    arrival(&arr_s[2], dh, true, w);
    __syncthreads();
    dstamp_after(ds, 6, &xs[0][0][CL_LANES - 1]);
    arrival_take(ds, 12, &arr_s[1], 0ull);
  }
  if (CL_WARP_STAMPS && p.detail && t == 0 && p.nsteps > 0)  // (the last step's end)
    p.detail[((size_t)(p.nsteps - 1) * gridDim.x + blockIdx.x) * CL_DETAIL + 13] = arr_s[2];
  if (stamper && p.trace) p.trace[p.nsteps] = globaltimer();
  // no block leaves while another may still store into its shared memory (the last exchange)
  cluster_arrive();
  cluster_wait();
}

// Instantiations are generated by the driver: cluster_q<Q>_r<RPC>_t<NT>_n<R>.
