// decoder-shell cluster cycle: the whole cycle as one resident kernel of 16-block thread-block
// clusters, one cluster per (rank, row group). Appended to the driver's sources + persistent.cu (PStep, the
// step table, globaltimer, ld_relaxed) and to its pieces, one job a file (cluster_cycle.py's
// CLUSTER_SOURCES: cluster_sync.cu, _fold, _join, _weights, _dots, _exchange, _stream); this file holds
// the roles of B and the kernel. The arithmetic is theirs (sinkhorn_lane, psigmoid, ring_fold,
// f2bf) in the contracts' order. cluster_cycle.py encodes the table and launches it.
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
                     // 2.11 against 2.24 us; both changes pay: CL_PF_B_BH; TP4 M=1
                     // 0.434-0.436 against 0.432-0.433 and TP2 M=1/2 0.447-0.448 / 0.466-0.468 against 0.432-0.434 /
                     // 0.463, where the isolation applies instead: two rows at more than two ranks only). 0: none.
#endif
#ifndef CL_PF_B_BH
#define CL_PF_B_BH 0  // tuning (in CL_B_HALF's builds): who issues B's L2 prefetches (prefetches_b). 0: the block's last
                      // thread, idle in B there, so none (the measured default); 1: the last helper's last thread, where
                      // the other builds' helper issues them (after y, at the rank's barrier); 2: the block's last
                      // thread at B's start, as it arrives. Both slower (thirty-fifth session, H100, three alternating
                      // rounds: TP4 M=2 0.471-0.472 / 0.473-0.474 against 0.468-0.470 ms; CL_B_HALF=0 0.478): both
                      // halves of CL_B_HALF's change pay
#endif
#ifndef CL_PF_B_MIN_R
#define CL_PF_B_MIN_R 3  // the fewest ranks at which a build issues B's L2 prefetches (prefetches_b: the partial sum two
                         // steps ahead, the weights three ahead); with fewer they cost more than they save (thirty-fifth
                         // session, H100, against every build issuing them; with none the cubins are CL_NO_PF_B's: TP1
                         // M=1/2/4/8 0.408 / 0.429 / 0.456-0.458 / 0.508-0.512 against 0.417 / 0.445 / 0.492-0.493 /
                         // 0.584-0.595 ms, TP2 0.403 / 0.436-0.438 / 0.521 / 0.602 against 0.420 / 0.461 / 0.567-0.576 /
                         // 0.621-0.622); at four ranks none is slower (M=1/4/8 0.433-0.434 / 0.639-0.644 / 0.898-0.899
                         // against 0.430-0.431 / 0.600 / 0.880). 1: every build.
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
  constexpr int PF_T = BH && CL_PF_B_BH == 1 ? 32 * (NW / 2) - 1 : NT - 1;  // the thread of B's prefetches (CL_PF_B_BH)
  constexpr bool PFB = R >= CL_PF_B_MIN_R;  // B's prefetches issued at all (CL_PF_B_MIN_R)
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
    const int nh = ro.nh, ht = ro.ht, mv = ro.mv;
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
    const PartFetch pf = PFB && work && t == PF_T ? part_fetch(p, s + CL_PART_AHEAD, r, s + CL_LOOKAHEAD) : PartFetch{};
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
    if (BH && CL_PF_B_BH == 2 && t == NT - 1 && s + 1 < p.nsteps) prefetches_b<Q>(pf, p.groups, g, b);
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
        if (PFB && t == PF_T) prefetches_b<Q>(pf, p.groups, g, b);
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
          if (PFB && t == PF_T) prefetches_b<Q>(pf, p.groups, g, b);  // (a helper: nsk <= 4 of 8 or 16 warps)
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
