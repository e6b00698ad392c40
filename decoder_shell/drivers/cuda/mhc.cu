// The mHC boundary kernel: a block's stream values and lane dot products, the cross-block mixes, pre, post, the
// comb (sinkhorn.cu) and the collapse y, in the contract's order; and the Sinkhorn node's kernel.

// ---- mHC boundary kernel -------------------------------------------------------------------------
struct MhcArgs {
  const void* x;               // reduced sub-block output [M, D] (reduction dtype); unused when fused
  const void* peers[MAXR];     // fused: every rank's partial input
  void* ar_out;                // fused: this rank's all-reduce output
  Ring ring;                   // fused: the all-reduce contract
  const bf16_t* residual;      // [M, HC, D]
  const float* post_in;        // [M, HC]
  const float* comb_in;        // [M, HC, HC]
  const float* fn;             // [NOUT, HC*D]
  const float* base;           // [NOUT]
  const float* scale;          // [3] or [1]
  bf16_t* streams;             // [M, HC, D]
  bf16_t* y;                   // [M, D]
  float* post_out;             // [M, HC]
  float* comb_out;             // [M, HC, HC]
  float* scratch;              // [M][nbx][NOUT+1] block partials, then [M][NOUT] mixes
  u64* sync;                   // arrivals: 64-bit, monotonic over launches (never reset, never wraps)
  int M, D, x_is_bf16, sinkhorn_iters;
  float hc_eps, norm_eps;
  int split_sinkhorn;          // comb is left to sinkhorn_kernel (its own node, beside the next all-reduce)
  const float* next_fn;        // the rank's next mHC weights, prefetched into L2 by idle blocks (or null)
  u64 next_fn_bytes;
};

enum { OP_PRE = 0, OP_POST_PRE = 1, OP_POST_HEAD = 2 };

// The stream value streams[m, k, d] this boundary produces, as fp32; written to `streams` when
// `write` (one output group writes, the others recompute it).
template <int OP, bool FUSED>
__device__ __forceinline__ float stream_value(const MhcArgs& a, int m, int k, int d, bool write) {
  size_t xd = (size_t)m * a.D + d;
  float x;
  if (FUSED) {
    x = ring_fold(a.peers, a.ring, (int)xd);
    if (write && k == 0) st(a.ar_out, xd, x, a.ring.is_bf16);
  } else {
    x = ld(a.x, xd, a.x_is_bf16);
  }
  float v;
  if (OP == OP_PRE) {
    v = x;
  } else {
    const float* cb = a.comb_in + m * HC * HC;
    const bf16_t* res = a.residual + (size_t)m * HC * a.D + d;
    float mix = MUL(cb[0 * HC + k], bf2f(res[0]));
    mix = ADD(mix, MUL(cb[1 * HC + k], bf2f(res[(size_t)a.D])));
    mix = ADD(mix, MUL(cb[2 * HC + k], bf2f(res[(size_t)2 * a.D])));
    mix = ADD(mix, MUL(cb[3 * HC + k], bf2f(res[(size_t)3 * a.D])));
    v = ADD(MUL(a.post_in[m * HC + k], x), mix);
  }
  bf16_t b = f2bf(v);
  if (write) a.streams[((size_t)m * HC + k) * a.D + d] = b;
  return bf2f(b);
}

// The lane's 4*Q stream values of row m on the fast path (D = Q*LANES), in the lane's element order
// j = k*Q + q: x[m, d] (or its all-reduce, written to ar_out when `write`) and residual[m, :, d] are
// loaded once per d = lane + q*LANES and give all 4 streams k; written to `streams` when `write`.
// Every load is issued before the first store: the compiler cannot prove that the stores to streams
// miss x, residual, post and comb, so loads placed after a store would each wait for the one before.
// lane_inputs issues the x (every rank's partial when FUSED) and residual loads; lane_streams_from
// folds and mixes them: a caller may put other work (the persistent cycle's Sinkhorn) in between.
template <int OP, bool FUSED, int Q>
__device__ __forceinline__ void lane_inputs(const MhcArgs& a, int m, int lane, float (&xr)[Q][MAXR],
                                            float (&res)[Q][HC]) {
#pragma unroll
  for (int q = 0; q < Q; q++) {
    const int d = lane + q * LANES;
    const size_t xd = (size_t)m * a.D + d;
    if (FUSED) ring_load(a.peers, a.ring, (int)xd, xr[q]);
    else xr[q][0] = ld(a.x, xd, a.x_is_bf16);
    if (OP != OP_PRE) {
      const bf16_t* rp = a.residual + (size_t)m * HC * a.D + d;
#pragma unroll
      for (int h = 0; h < HC; h++) res[q][h] = bf2f(rp[(size_t)h * a.D]);
    }
  }
}

template <int OP, bool FUSED, int Q>
__device__ __forceinline__ void lane_streams_from(const MhcArgs& a, int m, int lane, bool write,
                                                  const float (&xr)[Q][MAXR], const float (&res)[Q][HC], float* sv) {
  float xs[Q], pin[HC], cb[HC * HC];
  if (OP != OP_PRE) {
#pragma unroll
    for (int k = 0; k < HC; k++) pin[k] = a.post_in[m * HC + k];
#pragma unroll
    for (int i = 0; i < HC * HC; i++) cb[i] = a.comb_in[m * HC * HC + i];
  }
#pragma unroll
  for (int q = 0; q < Q; q++) xs[q] = FUSED ? ring_fold_loaded(xr[q], a.ring, m * a.D + lane + q * LANES) : xr[q][0];
#pragma unroll
  for (int q = 0; q < Q; q++) {
    const int d = lane + q * LANES;
    const size_t xd = (size_t)m * a.D + d;
    const float x = xs[q];
    if (FUSED && write) st(a.ar_out, xd, x, a.ring.is_bf16);
#pragma unroll
    for (int k = 0; k < HC; k++) {
      float v = x;
      if (OP != OP_PRE) {
        float mix = MUL(cb[0 * HC + k], res[q][0]);
        mix = ADD(mix, MUL(cb[1 * HC + k], res[q][1]));
        mix = ADD(mix, MUL(cb[2 * HC + k], res[q][2]));
        mix = ADD(mix, MUL(cb[3 * HC + k], res[q][3]));
        v = ADD(MUL(pin[k], x), mix);
      }
      const bf16_t b = f2bf(v);
      if (write) a.streams[((size_t)m * HC + k) * a.D + d] = b;
      sv[k * Q + q] = bf2f(b);
    }
  }
}

template <int OP, bool FUSED, int Q>
__device__ __forceinline__ void lane_streams(const MhcArgs& a, int m, int lane, bool write, float* sv) {
  float xr[Q][MAXR], res[Q][HC];
  lane_inputs<OP, FUSED, Q>(a, m, lane, xr, res);
  lane_streams_from<OP, FUSED, Q>(a, m, lane, write, xr, res, sv);
}

// The lane's dot products in the contract's lane order: the sum of squares (acc[r][0]) and the OPG
// outputs o0.. (acc[r][1 + o]) over its 4*Q stream values per row; f holds the first UF lane steps of
// weights (already requested), the rest are loaded UF steps at a time.
template <int RPB, int OPG, int UF, int Q>
__device__ __forceinline__ void lane_dots(const MhcArgs& a, float (&f)[UF][OPG], const float (&sv)[RPB][HC * Q],
                                          float (&acc)[RPB][OPG + 1], int o0, int lane, int N) {
#pragma unroll
  for (int j0 = 0; j0 < HC * Q; j0 += UF) {
    if (j0 > 0) {
#pragma unroll
      for (int u = 0; u < UF; u++)
        if (j0 + u < HC * Q)
#pragma unroll
          for (int o = 0; o < OPG; o++) f[u][o] = __ldg(a.fn + (size_t)(o0 + o) * N + lane + (j0 + u) * LANES);
    }
#pragma unroll
    for (int u = 0; u < UF; u++)
      if (j0 + u < HC * Q)
#pragma unroll
        for (int r = 0; r < RPB; r++) {
          const float sq = sv[r][j0 + u];
          acc[r][0] = ADD(acc[r][0], MUL(sq, sq));
#pragma unroll
          for (int o = 0; o < OPG; o++) acc[r][o + 1] = ADD(acc[r][o + 1], MUL(sq, f[u][o]));
        }
  }
}


// The cross-block end of the lane tree: the 8 lane-group blocks' partials of one dot product and of
// the sum of squares, in adjacent pairs, then mix = dot * (1 / sqrt(sum / N + eps)) as the contract has it.
__device__ __forceinline__ float block_mix(float (&v)[LANES / BLOCK], float (&ss)[LANES / BLOCK], int N, float eps) {
#pragma unroll
  for (int step = 1; step < LANES / BLOCK; step <<= 1)
#pragma unroll
    for (int b = 0; b < LANES / BLOCK; b += 2 * step) {
      v[b] = ADD(v[b], v[b + step]);
      ss[b] = ADD(ss[b], ss[b + step]);
    }
  return MUL(v[0], DIV(1.0f, SQRT(ADD(DIV(ss[0], (float)N), eps))));
}

// Sum of the 4 warps' values in adjacent-pair order ((w0+w1)+(w2+w3)).
__device__ __forceinline__ float tree4(const float* w) { return ADD(ADD(w[0], w[1]), ADD(w[2], w[3])); }

// The comb of the next boundary from the mixes block 0 left in scratch: softmax, + eps, Sinkhorn.
// One block of BLOCK threads: 16 lanes a row, SCALAR_ROWS rows at a time.
template <int NOUT>
__device__ __forceinline__ void comb_rows(const MhcArgs& a, const float* mix_g) {
  const int t = threadIdx.x;
  for (int m0 = 0; m0 < a.M; m0 += SCALAR_ROWS) {
    const int mrows = min(SCALAR_ROWS, a.M - m0);
    const int mr = t >> 4, j = (t >> 2) & 3, k = t & 3;
    const bool on = mr < mrows;
    const float lg = on ? ADD(MUL(mix_g[(m0 + mr) * NOUT + 2 * HC + j * HC + k], a.scale[2]), a.base[2 * HC + j * HC + k])
                        : 0.0f;
    const float c = sinkhorn_lane(lg, j, k, (t & 31) & ~15u, a.hc_eps, a.sinkhorn_iters);
    if (on) a.comb_out[((m0 + mr) * HC + j) * HC + k] = c;
  }
}

// Grid: x = LANES / BLOCK lane groups, y = NOUT / OPG output groups, z = ceil(M / RPB) row groups.
// Every block: its share of the projection weights fn is requested before the kernel waits for the
// preceding kernels (programmatic dependent launch: the weight stream overlaps their tail), then the
// stream values of its lanes (output group 0 writes them), lane partial sums of its OPG outputs
// (group 0 also the sum of squares), the block tree, and one arrival on a 64-bit monotonic counter.
// Blocks of other output groups are then done. Output-group-0 blocks wait for every arrival, finish
// the cross-block tree for pre of their own rows and collapse y from the stream values they hold;
// block 0 also computes every row's mixes, post and the Sinkhorn comb. Waiting blocks are resident
// (they started) and every block arrives without waiting, so the wait cannot deadlock.
// Q > 0 is the fast path for D = Q * LANES: a lane's elements i = lane + j*LANES then have
// d = lane + (j mod Q)*LANES and k = j / Q, so each x[m, d] (or its all-reduce) and residual[m, :, d]
// is loaded once and gives the lane's 4 stream values k = 0..3; they stay in registers for the collapse.
// Blocks of output groups 1.. are idle once they arrive: they pull the rank's next mHC weights into L2
// (no kernel writes them), so the next mHC kernel's weight loads hit L2 instead of memory.
__device__ __forceinline__ void prefetch_next(const MhcArgs& a) {
  if (!a.next_fn) return;
  const u64 lines = (a.next_fn_bytes + 127) / 128;
  const u64 nidle = (u64)gridDim.x * gridDim.z * (gridDim.y - 1);
  const u64 me = (((u64)blockIdx.z * (gridDim.y - 1) + blockIdx.y - 1) * gridDim.x + blockIdx.x) * BLOCK + threadIdx.x;
  for (u64 l = me; l < lines; l += nidle * BLOCK)
    asm volatile("prefetch.global.L2 [%0];" :: "l"((const char*)a.next_fn + l * 128));
}

// collapse: y[m, d] = ((p0*s0 + p1*s1) + p2*s2) + p3*s3 for the block's rows: from the stream values
// the lanes hold (fast path), or from `streams` for the block's slice of d.
template <int RPB, int Q>
__device__ __forceinline__ void collapse(const MhcArgs& a, const float (*pre_s)[HC], const float (*sv)[Q > 0 ? HC * Q : 1],
                                         int row0, int rows, int lane) {
#ifndef ABL_NO_COLLAPSE
  const int t = threadIdx.x, nbx = gridDim.x;
  if constexpr (Q > 0) {
#pragma unroll
    for (int r = 0; r < RPB; r++)
      if (r < rows)
#pragma unroll
        for (int q = 0; q < Q; q++) {
          float v = MUL(pre_s[r][0], sv[r][q]);
          v = ADD(v, MUL(pre_s[r][1], sv[r][Q + q]));
          v = ADD(v, MUL(pre_s[r][2], sv[r][2 * Q + q]));
          v = ADD(v, MUL(pre_s[r][3], sv[r][3 * Q + q]));
          a.y[(size_t)(row0 + r) * a.D + lane + q * LANES] = f2bf(v);
        }
  } else {
    const int per = (a.D + nbx - 1) / nbx, d0 = blockIdx.x * per, d1 = min(a.D, d0 + per);
    for (int q = t; q < rows * per; q += BLOCK) {
      const int r = q / per, d = d0 + q - r * per;
      if (d >= d1) continue;
      const bf16_t* sm = a.streams + (size_t)(row0 + r) * HC * a.D;
      float v = MUL(pre_s[r][0], bf2f(__ldcg(sm + d)));
      v = ADD(v, MUL(pre_s[r][1], bf2f(__ldcg(sm + a.D + d))));
      v = ADD(v, MUL(pre_s[r][2], bf2f(__ldcg(sm + 2 * a.D + d))));
      v = ADD(v, MUL(pre_s[r][3], bf2f(__ldcg(sm + 3 * a.D + d))));
      a.y[(size_t)(row0 + r) * a.D + d] = f2bf(v);
    }
  }
#endif
}

// CL (`cluster-pre`, sm_90+): the 8 lane-group blocks of a (output group, row group) form a cluster.
// Output-group-0 clusters finish the tree for pre through distributed shared memory (no grid-wide
// arrival at all); every block leaves its partials in scratch, and the Sinkhorn node (after this
// kernel) turns them into the mixes, post and comb (split_sinkhorn == 2).
template <int NOUT, int OPG, int RPB, int OP, bool FUSED, int Q, bool CL = false>
__device__ void mhc_boundary(const MhcArgs& a) {
  constexpr int U = RPB <= 2 ? 8 : (RPB <= 4 ? 4 : 2);
  constexpr int NSV = Q > 0 ? HC * Q : 1;
  __shared__ float warp_part[RPB][OPG + 1][BLOCK / 32];
  __shared__ float pre_s[RPB][HC];
  __shared__ u64 target_s;
  __shared__ float par_s[NOUT + 3];               // base, then scale: params, read before the wait
  __shared__ float mix_s[SCALAR_ROWS * NOUT];     // block 0: the mixes, when M <= SCALAR_ROWS
  __shared__ float cpart[RPB][HC + 1];            // CL: this block's sum of squares and pre partials

  const int nbx = gridDim.x;
  const int N = HC * a.D;
  const int t = threadIdx.x;
  const int lane = blockIdx.x * BLOCK + t;
  const int og = blockIdx.y, o0 = og * OPG;
  const bool writer = og == 0;
  const int row0 = blockIdx.z * RPB;
  const int rows = min(RPB, a.M - row0);
  const int nblocks = gridDim.x * gridDim.y * gridDim.z;
  const bool leader = blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0;

  // Every block of the previous launch arrived before this launch began, and this block has not yet
  // arrived, so the count now lies in [n * nblocks, (n + 1) * nblocks) for this launch n.
  if (!CL && t == 0) target_s = (*(volatile u64*)a.sync / nblocks + 1) * nblocks;
  if (t < NOUT) par_s[t] = __ldg(a.base + t);
  if (t < (OP == OP_POST_HEAD ? 1 : 3)) par_s[NOUT + t] = __ldg(a.scale + t);
  float acc[RPB][OPG + 1];
#pragma unroll
  for (int r = 0; r < RPB; r++)
#pragma unroll
    for (int o = 0; o <= OPG; o++) acc[r][o] = 0.0f;
  float sv[RPB][NSV];  // fast path: stream values in the lane's element order j = k*Q + q
#pragma unroll
  for (int r = 0; r < RPB; r++)
#pragma unroll
    for (int j = 0; j < NSV; j++) sv[r][j] = 0.0f;

  if constexpr (Q > 0) {
    constexpr int UF = (16 / RPB) < HC * Q ? (16 / RPB) : HC * Q;  // fn loads in flight: UF lane steps
    float f[UF][OPG];
#pragma unroll
    for (int u = 0; u < UF; u++)
#pragma unroll
      for (int o = 0; o < OPG; o++) f[u][o] = __ldg(a.fn + (size_t)(o0 + o) * N + lane + u * LANES);
    pdl_wait();
    pdl_trigger();
#ifndef ABL_NO_MAIN
#pragma unroll
    for (int r = 0; r < RPB; r++)
      if (r < rows) lane_streams<OP, FUSED, Q>(a, row0 + r, lane, writer, sv[r]);
    lane_dots<RPB, OPG, UF, Q>(a, f, sv, acc, o0, lane, N);
#endif
  } else {
    pdl_wait();
    pdl_trigger();
#ifndef ABL_NO_MAIN
    for (int i0 = lane; i0 < N; i0 += U * LANES) {
      float f[U][OPG];
      float s[U][RPB];
#pragma unroll
      for (int u = 0; u < U; u++) {
        const int i = i0 + u * LANES;
        if (i < N) {
#pragma unroll
          for (int o = 0; o < OPG; o++) f[u][o] = __ldg(a.fn + (size_t)(o0 + o) * N + i);
          const int k = i / a.D, d = i - k * a.D;
#pragma unroll
          for (int r = 0; r < RPB; r++) s[u][r] = r < rows ? stream_value<OP, FUSED>(a, row0 + r, k, d, writer) : 0.0f;
        }
      }
#pragma unroll
      for (int u = 0; u < U; u++) {
        if (i0 + u * LANES < N) {
#pragma unroll
          for (int r = 0; r < RPB; r++) {
            const float v = s[u][r];
            acc[r][0] = ADD(acc[r][0], MUL(v, v));
#pragma unroll
            for (int o = 0; o < OPG; o++) acc[r][o + 1] = ADD(acc[r][o + 1], MUL(v, f[u][o]));
          }
        }
      }
    }
#endif
  }

  // lane tree inside the warp (adjacent pairs), then across the block's 4 warps
#pragma unroll
  for (int r = 0; r < RPB; r++)
#pragma unroll
    for (int o = 0; o <= OPG; o++) {
      float v = acc[r][o];
#pragma unroll
      for (int off = 1; off < 32; off <<= 1) v = ADD(v, __shfl_down_sync(0xffffffffu, v, off));
      if ((t & 31) == 0) warp_part[r][o][t >> 5] = v;
    }
  __syncthreads();
  for (int q = t; q < rows * (OPG + 1); q += BLOCK) {
    const int r = q / (OPG + 1), o = q - r * (OPG + 1);
    if (o == 0 && !writer) continue;  // the sum of squares comes from output group 0
    const int slot = o == 0 ? 0 : o0 + o;
    const float part = tree4(warp_part[r][o]);
    a.scratch[((size_t)(row0 + r) * nbx + blockIdx.x) * (NOUT + 1) + slot] = part;
    if (CL && writer && slot <= HC) cpart[r][slot] = part;
  }
  if constexpr (CL) {
    if (!writer) {  // partials left for the Sinkhorn node
      prefetch_next(a);
      return;
    }
    cluster_arrive();
    cluster_wait();  // every block's cpart is visible cluster-wide
    for (int q = t; q < rows * HC; q += BLOCK) {
      const int r = q / HC, o = q - r * HC;
      float v[LANES / BLOCK], ss[LANES / BLOCK];
#pragma unroll
      for (int b = 0; b < LANES / BLOCK; b++) {
        v[b] = ld_dsmem(&cpart[r][o + 1], b);
        ss[b] = ld_dsmem(&cpart[r][0], b);
      }
      pre_s[r][o] = ADD(psigmoid(ADD(MUL(block_mix(v, ss, N, a.norm_eps), par_s[NOUT]), par_s[o])), a.hc_eps);
    }
    __syncthreads();
    collapse<RPB, Q>(a, pre_s, sv, row0, rows, lane);
    cluster_arrive();
    cluster_wait();  // no block leaves while another may still read its shared memory
    return;
  }
  __syncthreads();
  if (t == 0) {
    __threadfence();  // the block's partials (ordered before by the barrier) are visible before it arrives
    atomicAdd(a.sync, 1ull);  // no return value used: a fire-and-forget reduction
  }
  if (!writer) {
    prefetch_next(a);
    return;
  }
  if (t == 0) {
    while (ld_acquire(a.sync) < target_s) {}
  }
  __syncthreads();

  // cross-block tree and rsqrt: pre for this block's rows; block 0: every row's mixes (for post/comb)
  float* mix_g = a.scratch + (size_t)a.M * nbx * (NOUT + 1);
  const int nq = leader ? a.M * NOUT : rows * HC;
  for (int q = t; q < nq; q += BLOCK) {
    const int m = leader ? q / NOUT : row0 + q / HC;
    const int o = leader ? q - (q / NOUT) * NOUT : q % HC;
    const float* p = a.scratch + (size_t)m * nbx * (NOUT + 1);
    float v[LANES / BLOCK], ss[LANES / BLOCK];
#pragma unroll
    for (int b = 0; b < LANES / BLOCK; b++) {
      v[b] = __ldcg(p + b * (NOUT + 1) + o + 1);
      ss[b] = __ldcg(p + b * (NOUT + 1));
    }
    const float mix = block_mix(v, ss, N, a.norm_eps);
    if (leader) {
      mix_g[q] = mix;
      if (a.M <= SCALAR_ROWS) mix_s[q] = mix;
    }
    if (o < HC && m >= row0 && m < row0 + rows) pre_s[m - row0][o] = ADD(psigmoid(ADD(MUL(mix, par_s[NOUT]), par_s[o])), a.hc_eps);
  }
  __syncthreads();

  collapse<RPB, Q>(a, pre_s, sv, row0, rows, lane);

  // block 0: post and comb for the next boundary (comb in sinkhorn_kernel when split)
  if (leader && OP != OP_POST_HEAD) {
    for (int q = t; q < a.M * HC; q += BLOCK) {
      const int m = q / HC, h = q - m * HC;
      const float mix = a.M <= SCALAR_ROWS ? mix_s[m * NOUT + HC + h] : mix_g[m * NOUT + HC + h];
      a.post_out[q] = MUL(2.0f, psigmoid(ADD(MUL(mix, par_s[NOUT + 1]), par_s[HC + h])));
    }
    if (!a.split_sinkhorn) comb_rows<NOUT>(a, mix_g);
  }
}

// The Sinkhorn stage of an mHC post/pre boundary as its own node: it runs beside the next all-reduce
// (both wait for the boundary kernel), so its serial chain of 39 normalizations leaves the critical path.
// split_sinkhorn == 2 (cluster-pre): the boundary kernel left only block partials; this node also
// finishes their tree into the mixes (same order as the boundary kernel) and writes post.
extern "C" __global__ void __launch_bounds__(BLOCK) sinkhorn_kernel(const MhcArgs a) {
  constexpr int NOUT = 24, NB = LANES / BLOCK;
  pdl_wait();
  pdl_trigger();
  float* mix_g = a.scratch + (size_t)a.M * NB * (NOUT + 1);
  if (a.split_sinkhorn == 2) {
    const int N = HC * a.D;
    for (int q = threadIdx.x; q < a.M * NOUT; q += BLOCK) {
      const int m = q / NOUT, o = q - m * NOUT;
      const float* p = a.scratch + (size_t)m * NB * (NOUT + 1);
      float v[NB], ss[NB];
#pragma unroll
      for (int b = 0; b < NB; b++) {
        v[b] = __ldcg(p + b * (NOUT + 1) + o + 1);
        ss[b] = __ldcg(p + b * (NOUT + 1));
      }
      const float mix = block_mix(v, ss, N, a.norm_eps);
      mix_g[q] = mix;
      if (o >= HC && o < 2 * HC) a.post_out[m * HC + o - HC] = MUL(2.0f, psigmoid(ADD(MUL(mix, a.scale[1]), a.base[o])));
    }
    __syncthreads();
  }
  comb_rows<24>(a, mix_g);
}

// Instantiations are generated by the driver (kernels.py KernelSpec): extern "C" wrappers named
//   mhc_<op>_r<RPB>_o<OPG>[_cp]_q<Q>[_fused] with op in {pre, post_pre, post_head}; OPG outputs per block group;
//   mhc_<op>_cl_q<Q>[_fused] for mhc_cluster (mhc_cluster.cu).
