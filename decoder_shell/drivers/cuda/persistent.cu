// decoder-shell persistent cycle: one resident cooperative grid walks the whole cycle's step list
// from device memory (drivers/cuda/persistent.py encodes it). Appended to the driver's sources
// (kernels.py SOURCE: kernels.cu, allreduce.cu, sinkhorn.cu, mhc.cu, ...), whose device functions
// define the contract's bits: lane_streams / stream_value (hc_post and the stream values),
// lane_dots (the lane order of the projection), the warp/tree4/block_mix tree, psigmoid, sinkhorn_lane
// and ring_fold (the all-reduce family). Nothing here does arithmetic of its own beyond calling them
// in the same order as the graph kernels.
//
// One step per mHC boundary (its all-reduce folded in when the boundary reads it) or per lone
// all-reduce; steps are separated by a grid barrier on a 64-bit counter that only grows (the
// launch's base is read at start, so the epoch is the count / grid size and never wraps). In step s:
//   - units (rank, row, lane group, output group): lane partial sums of the projection, block tree,
//     partials in scratch; output group 0 writes the streams (and the all-reduce output);
//     a boundary that follows another first finishes the producer's post and comb (mixes from the
//     producer's partials, Sinkhorn) in warp 0 and writes them where its lanes read them;
//   - finish items of step s-1's boundary (rank, row, lane group): pre and the collapse y;
//   - every thread prefetches a slice of step s+1's weights into L2.
// A barrier that does not complete within `timeout_ns` (%globaltimer) sets `err` to the step and
// every block leaves: the host reports one line instead of hanging the GPU.

#ifndef PERSIST_LATE_WEIGHTS
#define PERSIST_LATE_WEIGHTS 0  // 1: a unit issues its weight loads after post and comb (persistent.py)
#endif

__device__ __forceinline__ u64 globaltimer() {
  u64 t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

struct PStep {
  int kind;       // 0: all-reduce alone, 1: mHC boundary
  int op;         // OP_PRE / OP_POST_PRE / OP_POST_HEAD
  int fused;      // the preceding all-reduce is folded into this boundary
  int nout;       // projection outputs (24, or 4 for the head)
  int groups;     // output groups: nout / outputs per unit
  int rows;       // M
  int prev;       // step whose partials give this boundary's post and comb (-1: read the buffers)
  int finish_pc;  // finish items write next_post / next_comb (no later boundary does)
  int nunits;     // units of this step over every rank (all-reduce: blocks of elements)
  int pad;
  ArArgs ar;      // kind 0
  MhcArgs mh[MAXR];  // kind 1, per rank
  u64* flag_out[MAXR];  // one process per rank: this rank's arrival slot in every rank's memory
  const u64* flag_in;   // ... and the ranks' slots in this rank's memory (null: emulated ranks)
  u64* rows_done;       // row-flag mode: [rank][row] arrivals of this boundary's units (64-bit, only grow)
};

struct PArgs {
  const PStep* steps;
  int nsteps, ranks;
  u64* bar;           // the barrier counter (64-bit, monotonic over launches)
  int* err;           // 0, or 1 + the step whose barrier timed out
  u64 timeout_ns;
  u64* trace;         // null, or [nsteps + 1] %globaltimer stamps taken by block 0 at each step start
  int mode;           // 0: the cycle; 1: barriers only (the cost of one barrier)
  int skip_step;      // watchdog test: the last block leaves before barrier `skip_step` (-1: never)
  int rank0, nlocal;  // the ranks this grid computes (emulated: 0, R; one process per rank: r, 1)
  u64* detail;        // null, or [nsteps + 1][8] %globaltimer stamps of block 0 inside each step (profile)
  int sync;           // 0: a grid barrier between steps; 1: row flags (a unit waits for its row's producers)
  int pad_;
  u64 tag;            // row-flag mode: this launch's number (1, 2, ...): a row is done at tag x its units
};

// Stamp k of step s (block 0, thread 0, when the profile asks): 0 step start (after the barrier; the
// first item's arguments were copied before it), 1 first unit starts, 2 loads issued and post and comb
// ready, 3 folded and stream values stored, 4 dot products, 5 partials stored, 6 items done.
__device__ __forceinline__ void stamp(u64* st, int k) {
  if (st && threadIdx.x == 0) st[k] = globaltimer();
}

__device__ __forceinline__ u64 ld_relaxed(const u64* p) {
  u64 v;
  asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ u64 ld_relaxed_sys(const u64* p) {
  u64 v;
  asm volatile("ld.relaxed.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

// Poll `c` (relaxed loads) until it reaches `target`; false when err is set or `timeout_ns` passes (err
// then set to step + 1). Ends with one fence: the fence-based acquire of the PTX memory model (an
// acquire load per poll would also drop this SM's L1 for the blocks still working beside this one).
// One thread calls it.
__device__ __forceinline__ bool poll_at_least(const u64* c, u64 target, int* err, u64 timeout_ns, int step) {
  const u64 t0 = globaltimer();
  bool ok = true;
  for (unsigned n = 0; ld_relaxed(c) < target; n++) {
    if ((n & 7) != 7) continue;
    if (*(volatile int*)err) { ok = false; break; }
    if (globaltimer() - t0 > timeout_ns) { atomicCAS(err, 0, step + 1); ok = false; break; }
  }
  asm volatile("fence.acq_rel.gpu;" ::: "memory");
  return ok;
}

// Grid barrier: every block arrives once on the counter; waiting ends when the count reaches
// `target` (the launch's base + step * blocks), or after timeout_ns (err set, false returned).
__device__ __forceinline__ bool grid_barrier(const PArgs& p, u64 target, int step, int* ok_s) {
  __syncthreads();
  if (threadIdx.x == 0) {
    // arrival: one release reduction (cumulative: it orders the block's writes, which the barrier
    // above ordered before this thread, ahead of the count), no separate fence, no returned value
    asm volatile("red.release.gpu.global.add.u64 [%0], %1;" :: "l"(p.bar), "l"(1ull) : "memory");
    *ok_s = poll_at_least(p.bar, target, p.err, p.timeout_ns, step);
  }
  __syncthreads();
  return *(volatile int*)ok_s != 0;
}

// One process per rank, at a step that reads peers (its all-reduce): block 0 writes the launch's
// tag into this rank's slot in every rank's memory, then every block waits until each rank's slot
// in its own memory holds at least that tag (64-bit, only grows: the launch count). Watchdog as above.
__device__ __forceinline__ bool arrive_and_wait(const PArgs& p, const PStep& st, u64 tag, int step, int* ok_s) {
  if (threadIdx.x == 0) {
    if (blockIdx.x == 0) {
      __threadfence_system();
      for (int q = 0; q < p.ranks; q++) st_release_sys(st.flag_out[q], tag);
    }
    const u64 t0 = globaltimer();
    int ok = 1;
    for (int q = 0; q < p.ranks && ok; q++)
      for (unsigned n = 0; ld_relaxed_sys(st.flag_in + q) < tag; n++) {
        if ((n & 7) != 7) continue;
        if (*(volatile int*)p.err) { ok = 0; break; }
        if (globaltimer() - t0 > p.timeout_ns) { atomicCAS(p.err, 0, step + 1); ok = 0; break; }
      }
    __threadfence_system();
    *ok_s = ok;
  }
  __syncthreads();
  return *(volatile int*)ok_s != 0;
}

// Row-flag mode: every unit of a boundary arrives on its (rank, row) counter once its streams and
// partials are stored (release reduction after the block's barrier); a unit or finish item that reads
// them waits until the counter reaches tag x (units per row) (relaxed polls, one acq_rel fence). No
// buffer is written twice in a cycle, so read-after-write on the row is the only order needed; blocks
// walk the steps in order and all are resident, so every wait ends. Watchdog as the barrier's.
__device__ __forceinline__ void row_arrive(const PStep& st, int r, int m) {
  __syncthreads();
  if (threadIdx.x == 0)
    asm volatile("red.release.gpu.global.add.u64 [%0], %1;" :: "l"(st.rows_done + r * st.rows + m), "l"(1ull) : "memory");
}
__device__ __forceinline__ void row_wait(const PArgs& p, const PStep& prod, int r, int m, int step) {
  if (threadIdx.x == 0) {
    const u64 target = p.tag * (u64)(prod.groups * (LANES / BLOCK));
    poll_at_least(prod.rows_done + r * prod.rows + m, target, p.err, p.timeout_ns, step);
  }
  __syncthreads();
}

// Row m's 8 lane-group partials of output o and of the sum of squares, as a boundary left them in
// scratch (loads only: a caller may issue them first and mix later).
template <int NOUT>
__device__ __forceinline__ void row_partials(const float* scratch, int m, int o, float (&v)[LANES / BLOCK],
                                             float (&ss)[LANES / BLOCK]) {
  const float* p = scratch + (size_t)m * (LANES / BLOCK) * (NOUT + 1);
#pragma unroll
  for (int b = 0; b < LANES / BLOCK; b++) {
    v[b] = __ldcg(p + b * (NOUT + 1) + o + 1);
    ss[b] = __ldcg(p + b * (NOUT + 1));
  }
}

// Mixes of row m from the 8 lane-group partials a boundary left in scratch (as the Sinkhorn node).
template <int NOUT>
__device__ __forceinline__ float row_mix(const float* scratch, int m, int o, int N, float eps) {
  float v[LANES / BLOCK], ss[LANES / BLOCK];
  row_partials<NOUT>(scratch, m, o, v, ss);
  return block_mix(v, ss, N, eps);
}

// post and comb of row m of boundary `a` (24 outputs) into post[4], comb[16] from its partials (v, ss
// as row_partials<24> loads them for output t < 24 ? t : 0); all 32 lanes of one warp.
__device__ __forceinline__ void post_comb_from(const MhcArgs& a, int m, float (&v)[LANES / BLOCK],
                                               float (&ss)[LANES / BLOCK], float* post, float* comb) {
  const int t = threadIdx.x & 31;
  const float mix = block_mix(v, ss, HC * a.D, a.norm_eps);
  if (t >= HC && t < 2 * HC) post[t - HC] = MUL(2.0f, psigmoid(ADD(MUL(mix, a.scale[1]), a.base[t])));
  const float cm = __shfl_sync(0xffffffffu, mix, 2 * HC + (t & 15));
  const int j = (t >> 2) & 3, k = t & 3;
  const float lg = ADD(MUL(cm, a.scale[2]), a.base[2 * HC + (t & 15)]);
  const float c = sinkhorn_lane(lg, j, k, t & ~15u, a.hc_eps, a.sinkhorn_iters);
  if (t < 16) comb[t] = c;
}

// post and comb of row m of boundary `a` (24 outputs) into post[4], comb[16]; all 32 lanes of one warp.
__device__ __forceinline__ void post_comb(const MhcArgs& a, int m, float* post, float* comb) {
  const int t = threadIdx.x & 31;
  float v[LANES / BLOCK], ss[LANES / BLOCK];
  row_partials<24>(a.scratch, m, t < 24 ? t : 0, v, ss);
  post_comb_from(a, m, v, ss, post, comb);
}

// Row m's post and comb from the producer's partials for a unit of boundary `a` (its args in shared
// memory): made in warp 0 into shared memory (PC_OFF of sh, kept across the block's units of the row:
// `key` names the step, rank and row whose values it holds), stored once to the outputs, and the
// unit's post_in / comb_in pointed at the shared copy, so lane_streams_from reads them without a round
// trip to memory. `fresh`: pc_key did not hold `key` (warp 0 then loaded the partials into pv, pss).
// All threads call it.
#define PC_OFF 64
__device__ __forceinline__ void unit_post_comb(const MhcArgs& a, const MhcArgs& prod, int m, int key, int* pc_key,
                                               float* sh, bool fresh, float (&pv)[LANES / BLOCK],
                                               float (&pss)[LANES / BLOCK]) {
  const int t = threadIdx.x;
  float* pc = sh + PC_OFF;  // [0, HC): post, [HC, HC + HC*HC): comb
  if (fresh) {
    if (t < 32) post_comb_from(prod, m, pv, pss, pc, pc + HC);
    __syncthreads();
    if (t < HC) const_cast<float*>(a.post_in)[m * HC + t] = pc[t];
    else if (t < HC + HC * HC) const_cast<float*>(a.comb_in)[m * HC * HC + t - HC] = pc[t];
  }
  __syncthreads();  // every thread has read pc_key and the stores above are issued
  if (t == 0) {
    *pc_key = key;  // read again only after the unit's closing barrier
    MhcArgs& w = const_cast<MhcArgs&>(a);
    w.post_in = pc - m * HC;
    w.comb_in = pc + HC - m * HC * HC;
  }
  __syncthreads();
}

// One unit of a boundary: rank's lanes b*128.. of row m, outputs og*G .. og*G+G-1.
template <int OP, bool FUSED, int OPG, int Q>
__device__ void mhc_unit(const PArgs& p, int s, int r, const PStep& st, const MhcArgs& a, const MhcArgs& prod, int m,
                         int b, int og, float* sh, int key, int* pc_key, u64* stp) {
  constexpr int NOUT = OP == OP_POST_HEAD ? HC : 24;
  constexpr int G = OPG < NOUT ? OPG : NOUT;
  float(*warp_part)[BLOCK / 32] = reinterpret_cast<float(*)[BLOCK / 32]>(sh);
  const int t = threadIdx.x, lane = b * BLOCK + t, N = HC * a.D, o0 = og * G;
  const bool writer = og == 0;
  float acc[1][G + 1];
#pragma unroll
  for (int o = 0; o <= G; o++) acc[0][o] = 0.0f;
  if constexpr (Q > 0) {
    // Loads first, in the order they are needed, then the serial work: warp 0's producer partials
    // (the Sinkhorn's inputs), every lane's x (all ranks' partials when the all-reduce is folded) and
    // residual, then the weights; warp 0 runs post and comb while all of them are in flight (the
    // other warps wait at its barrier with their loads landing), and the fold and mix follow. The
    // same operations in the same order as lane_streams: only the time the loads are issued moved.
    constexpr int UF = 16 < HC * Q ? 16 : HC * Q;
    const bool pc_needed = OP != OP_PRE && st.prev >= 0;
    const bool fresh = pc_needed && *(volatile int*)pc_key != key;
    if (fresh && p.sync) row_wait(p, p.steps[st.prev], r, m, s);  // (uniform: pc_key is the block's)
    float pv[LANES / BLOCK], pss[LANES / BLOCK];
    if (fresh && t < 32) row_partials<24>(prod.scratch, m, t < 24 ? t : 0, pv, pss);
    float xr[Q][MAXR], res[Q][HC];
    lane_inputs<OP, FUSED, Q>(a, m, lane, xr, res);
    float f[UF][G];
#if PERSIST_LATE_WEIGHTS
    // the weights are requested after post and comb, so that the Sinkhorn's shuffles do not queue
    // behind a unit's 128 loads a warp (they then land during the fold instead: L2 hits, prefetched)
    if (pc_needed) unit_post_comb(a, prod, m, key, pc_key, sh, fresh, pv, pss);
#endif
#pragma unroll
    for (int u = 0; u < UF; u++)
#pragma unroll
      for (int o = 0; o < G; o++) f[u][o] = __ldg(a.fn + (size_t)(o0 + o) * N + lane + u * LANES);
#if !PERSIST_LATE_WEIGHTS
    if (pc_needed) unit_post_comb(a, prod, m, key, pc_key, sh, fresh, pv, pss);
#endif
    stamp(stp, 2);
    float sv[1][HC * Q];
    lane_streams_from<OP, FUSED, Q>(a, m, lane, writer, xr, res, sv[0]);
    stamp(stp, 3);
    lane_dots<1, G, UF, Q>(a, f, sv, acc, o0, lane, N);
    stamp(stp, 4);
  } else {
    if (OP != OP_PRE && st.prev >= 0) {
      const bool fresh = *(volatile int*)pc_key != key;
      if (p.sync && fresh) row_wait(p, p.steps[st.prev], r, m, s);
      float pv[LANES / BLOCK], pss[LANES / BLOCK];
      if (fresh && t < 32) row_partials<24>(prod.scratch, m, t < 24 ? t : 0, pv, pss);
      unit_post_comb(a, prod, m, key, pc_key, sh, fresh, pv, pss);
    }
    stamp(stp, 2);
    for (int i = lane; i < N; i += LANES) {
      float fv[G];
#pragma unroll
      for (int o = 0; o < G; o++) fv[o] = __ldg(a.fn + (size_t)(o0 + o) * N + i);
      const int k = i / a.D, d = i - k * a.D;
      const float v = stream_value<OP, FUSED>(a, m, k, d, writer);
      acc[0][0] = ADD(acc[0][0], MUL(v, v));
#pragma unroll
      for (int o = 0; o < G; o++) acc[0][o + 1] = ADD(acc[0][o + 1], MUL(v, fv[o]));
    }
  }
  // lane tree inside the warp (adjacent pairs), then the block's 4 warps: the boundary kernel's order
#pragma unroll
  for (int o = 0; o <= G; o++) {
    float v = acc[0][o];
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) v = ADD(v, __shfl_down_sync(0xffffffffu, v, off));
    if ((t & 31) == 0) warp_part[o][t >> 5] = v;
  }
  __syncthreads();
  if (t <= G && (t > 0 || writer)) {
    const int slot = t == 0 ? 0 : o0 + t;
    a.scratch[((size_t)m * (LANES / BLOCK) + b) * (NOUT + 1) + slot] = tree4(warp_part[t]);
  }
  if (p.sync) row_arrive(st, r, m);
  stamp(stp, 5);
}

// A finish item of a boundary whose partials are complete: pre of row m and its collapse over the
// columns d = b*128 + t (+ k*1024); the lane group 0 item also writes post and comb when asked.
// On the fast path (Q > 0: D = Q*1024) the item's stream values are loaded before warp 0 makes pre,
// so their round trip overlaps it; the arithmetic is the same either way.
template <int NOUT, int Q>
__device__ void finish_item(const PStep& st, const MhcArgs& a, int m, int b, float* sh) {
  const int t = threadIdx.x;
  float* pre_s = sh;
  const bf16_t* sm = a.streams + (size_t)m * HC * a.D;
  constexpr int QL = Q > 0 ? Q : 1;
  bf16_t sv[QL][HC];
  if constexpr (Q > 0) {
#pragma unroll
    for (int q = 0; q < Q; q++)
#pragma unroll
      for (int h = 0; h < HC; h++) sv[q][h] = __ldcg(sm + (size_t)h * a.D + b * BLOCK + t + q * LANES);
  }
  if (t < 32) {
    const float mix = row_mix<NOUT>(a.scratch, m, t < HC ? t : 0, HC * a.D, a.norm_eps);
    if (t < HC) pre_s[t] = ADD(psigmoid(ADD(MUL(mix, a.scale[0]), a.base[t])), a.hc_eps);
  } else if (NOUT == 24 && t < 64 && st.finish_pc && b == 0) {
    post_comb(a, m, a.post_out + m * HC, a.comb_out + m * HC * HC);
  }
  __syncthreads();
  if constexpr (Q > 0) {
#pragma unroll
    for (int q = 0; q < Q; q++) {
      float v = MUL(pre_s[0], bf2f(sv[q][0]));
      v = ADD(v, MUL(pre_s[1], bf2f(sv[q][1])));
      v = ADD(v, MUL(pre_s[2], bf2f(sv[q][2])));
      v = ADD(v, MUL(pre_s[3], bf2f(sv[q][3])));
      a.y[(size_t)m * a.D + b * BLOCK + t + q * LANES] = f2bf(v);
    }
  } else {
    for (int d = b * BLOCK + t; d < a.D; d += LANES) {
      float v = MUL(pre_s[0], bf2f(__ldcg(sm + d)));
      v = ADD(v, MUL(pre_s[1], bf2f(__ldcg(sm + a.D + d))));
      v = ADD(v, MUL(pre_s[2], bf2f(__ldcg(sm + 2 * a.D + d))));
      v = ADD(v, MUL(pre_s[3], bf2f(__ldcg(sm + 3 * a.D + d))));
      a.y[(size_t)m * a.D + d] = f2bf(v);
    }
  }
}

// Every thread of the grid requests a slice of step s's projection weights (every rank) into L2, and,
// for a boundary with its all-reduce folded in and every rank on this device, the ranks' partials it
// folds (cycle inputs: a unit's first loads, otherwise cold HBM reads on the step's critical path).
// A prefetch into L2 is a hint (L2 is where the device's writes meet), so it cannot change a value.
// (blocks idx of count, or every block after its items when none is spare)
__device__ __forceinline__ void prefetch_step(const PStep& st, int rank0, int nlocal, int idx, int count) {
  if (st.kind != 1) return;
  const MhcArgs& a0 = st.mh[rank0];
  const int lines = (st.nout * HC * a0.D * 4 + 127) / 128;
  for (int r = 0; r < nlocal; r++) {
    const char* fn = (const char*)st.mh[rank0 + r].fn;
    for (int l = idx * BLOCK + threadIdx.x; l < lines; l += count * BLOCK)
      asm volatile("prefetch.global.L2 [%0];" :: "l"(fn + (size_t)l * 128));
  }
  if (!st.fused || st.flag_in) return;  // peers in other processes' memory: left to the loads
  const int xlines = (st.rows * a0.D * (a0.ring.is_bf16 ? 2 : 4) + 127) / 128;
  for (int q = 0; q < a0.ring.ranks; q++) {
    const char* x = (const char*)a0.peers[q];
    for (int l = idx * BLOCK + threadIdx.x; l < xlines; l += count * BLOCK)
      asm volatile("prefetch.global.L2 [%0];" :: "l"(x + (size_t)l * 128));
  }
}

template <int OPG, int Q>
__device__ void mhc_dispatch(const PArgs& p, int s, int r, const PStep& st, const MhcArgs& a, const MhcArgs& prod,
                             int m, int b, int og, float* sh, int key, int* pc_key, u64* stp) {
  switch (st.op * 2 + st.fused) {
    case OP_PRE * 2: mhc_unit<OP_PRE, false, OPG, Q>(p, s, r, st, a, prod, m, b, og, sh, key, pc_key, stp); break;
    case OP_PRE * 2 + 1: mhc_unit<OP_PRE, true, OPG, Q>(p, s, r, st, a, prod, m, b, og, sh, key, pc_key, stp); break;
    case OP_POST_PRE * 2: mhc_unit<OP_POST_PRE, false, OPG, Q>(p, s, r, st, a, prod, m, b, og, sh, key, pc_key, stp); break;
    case OP_POST_PRE * 2 + 1: mhc_unit<OP_POST_PRE, true, OPG, Q>(p, s, r, st, a, prod, m, b, og, sh, key, pc_key, stp); break;
    case OP_POST_HEAD * 2: mhc_unit<OP_POST_HEAD, false, OPG, Q>(p, s, r, st, a, prod, m, b, og, sh, key, pc_key, stp); break;
    default: mhc_unit<OP_POST_HEAD, true, OPG, Q>(p, s, r, st, a, prod, m, b, og, sh, key, pc_key, stp); break;
  }
}

// A by-value copy of one MhcArgs into shared memory by threads [t0, t0 + nt) (one round trip, then the
// unit's argument reads are shared-memory loads instead of chains of global ones).
__device__ __forceinline__ void copy_args_range(MhcArgs* dst, const MhcArgs& src, int t0, int nt) {
  constexpr int W = sizeof(MhcArgs) / 8;
  static_assert(sizeof(MhcArgs) % 8 == 0, "MhcArgs is copied in 8-byte words");
  for (int i = threadIdx.x - t0; i < W; i += nt) reinterpret_cast<u64*>(dst)[i] = reinterpret_cast<const u64*>(&src)[i];
}
__device__ __forceinline__ void copy_args(MhcArgs* dst, const MhcArgs& src) { copy_args_range(dst, src, 0, BLOCK); }

template <int OPG, int Q>
__device__ void persistent_cycle(const PArgs& p) {
  __shared__ float sh[(24 + 1) * (BLOCK / 32)];
  __shared__ int ok_s, ok2_s;  // barrier, arrival: separate words (a thread may read one while thread 0 sets the other)
  __shared__ u64 base_s;
  __shared__ int pc_key;  // (step, rank, row) whose post and comb this block last wrote
  __shared__ MhcArgs args_s[2];  // the unit's boundary and the producer of its post and comb
  const u64 G = gridDim.x;
  const int t = threadIdx.x;
  // No block of this launch passes barrier 1 before this block arrives, and the previous launch's
  // blocks all arrived at every barrier: the count lies in [n * G, (n + 1) * G) for this launch n.
  if (t == 0) {
    base_s = (*(volatile u64*)p.bar / G) * G;
    pc_key = -1;
  }
  __syncthreads();
  const u64 base = base_s;
  for (int s = 0; s <= p.nsteps; s++) {
    // This step's items and its first item's arguments are read before the barrier (the table is
    // constant over the launch): the chain of dependent loads from the step header to the argument
    // copy overlaps the wait instead of following it.
    const bool work = p.mode != 1 && (s < p.nsteps || s > 0 && p.steps[s - 1].kind == 1);
    const PStep* st = work && s < p.nsteps ? p.steps + s : nullptr;
    const PStep* pend = work && s > 0 && p.steps[s - 1].kind == 1 ? p.steps + s - 1 : nullptr;
    const int U = !st ? 0 : st->kind == 0 ? st->nunits : p.nlocal * st->rows * (LANES / BLOCK) * st->groups;
    const int F = pend ? p.nlocal * pend->rows * (LANES / BLOCK) : 0;
    // contiguous items per block: consecutive units share (rank, row), so post and comb are made once
    const int per = (U + F + (int)G - 1) / (int)G;
    const int u0 = (int)blockIdx.x * per, u1 = min(U + F, u0 + per);
    const bool pre = u0 < u1 && (u0 >= U || st->kind == 1);  // the first item's arguments are copied now
    if (pre && u0 < U) {
      const int r = p.rank0 + u0 / (LANES / BLOCK) / st->groups / st->rows;
      copy_args(&args_s[0], st->mh[r]);
      if (st->prev >= 0) copy_args(&args_s[1], p.steps[st->prev].mh[r]);
    } else if (pre) {
      copy_args(&args_s[0], pend->mh[p.rank0 + (u0 - U) / (LANES / BLOCK) / pend->rows]);
    }
    if (s > 0 && !p.sync) {
      if (s == p.skip_step && blockIdx.x == G - 1) return;
      if (!grid_barrier(p, base + (u64)s * G, s, &ok_s)) return;
    }
    __syncthreads();  // the copies above are visible (the barrier's own, where there is one)
    if (p.trace && blockIdx.x == 0 && t == 0) p.trace[s] = globaltimer();
    u64* stp = p.detail && blockIdx.x == 0 ? p.detail + (size_t)s * 8 : nullptr;
    stamp(stp, 0);
    if (!work) continue;
    // the next step's weights into L2: by the blocks with no unit (finish items or nothing), off the
    // critical path; when every block has units, by every block after its items
    const int first_spare = per > 0 ? (U + per - 1) / per : (int)G;
    const bool spare_exist = first_spare < (int)G;
    if (s + 1 < p.nsteps && spare_exist && (int)blockIdx.x >= first_spare)
      prefetch_step(p.steps[s + 1], p.rank0, p.nlocal, blockIdx.x - first_spare, (int)G - first_spare);
    if (st && st->flag_in && (st->kind == 0 || st->fused) && !arrive_and_wait(p, *st, base / G + 1, s, &ok2_s))
      return;
    for (int u = u0; u < u1; u++) {
      if (u < U && st->kind == 0) {
        const ArArgs& a = st->ar;
        const int e = u * BLOCK + t;
        if (e < a.ring.n) {
          const float v = ring_fold(a.in, a.ring, e);
          for (int q = p.rank0; q < p.rank0 + p.nlocal; q++) ::st(a.out[q], e, v, a.ring.is_bf16);
        }
      } else if (u < U) {
        int rest = u / (LANES / BLOCK);
        const int b = u - rest * (LANES / BLOCK);
        const int og = rest % st->groups;
        rest /= st->groups;
        const int m = rest % st->rows, r = p.rank0 + rest / st->rows;
        const int key = (s * MAXR + r) * 4096 + m;
        if (u == u0 ? !pre : b == 0) {  // a new rank or row: its arguments into shared memory
          copy_args(&args_s[0], st->mh[r]);
          if (st->prev >= 0) copy_args(&args_s[1], p.steps[st->prev].mh[r]);
          __syncthreads();
        }
        stamp(u == u0 ? stp : nullptr, 1);
        mhc_dispatch<OPG, Q>(p, s, r, *st, args_s[0], args_s[1], m, b, og, sh, key, &pc_key, u == u0 ? stp : nullptr);
      } else {
        const int v = u - U;
        const int b = v % (LANES / BLOCK), m = (v / (LANES / BLOCK)) % pend->rows;
        const int r = p.rank0 + v / (LANES / BLOCK) / pend->rows;
        if (u != u0 || !pre) copy_args(&args_s[0], pend->mh[r]);
        if (p.sync) row_wait(p, *pend, r, m, s);  // (ends with the block's barrier)
        __syncthreads();
        if (pend->op == OP_POST_HEAD) finish_item<HC, Q>(*pend, args_s[0], m, b, sh);
        else finish_item<24, Q>(*pend, args_s[0], m, b, sh);
      }
      __syncthreads();  // shared memory is reused by the block's next unit
    }
    if (s + 1 < p.nsteps && !spare_exist) prefetch_step(p.steps[s + 1], p.rank0, p.nlocal, blockIdx.x, (int)G);
    stamp(stp, 6);
  }
}

// Instantiations are generated by the driver: persistent_o<OPG>_q<Q>.
