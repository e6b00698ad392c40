// ---- mHC boundary on a thread-block cluster (sm_90+) ----------------------------------------------
// One cluster of 8 blocks per row: block b of the cluster holds lanes b*128 .. b*128+127 of the
// contract's 1024, with 256 threads (two halves splitting the outputs, 12 each; the head's 4 fit in
// one half). The cross-block part of the lane tree goes through distributed shared memory behind
// cluster barriers instead of global memory and atomics. Block 0 computes rsqrt and pre, releases
// the others to collapse y, and computes post meanwhile; the comb is always the Sinkhorn node's
// (split_sinkhorn 1, from the mixes left in scratch). Needs D = Q*1024.
// The Sinkhorn is not compiled in here: with the lanes-fast form inlined in block 0 (never run, the
// split being set), the H200 hung in this kernel at every D (2026-12-03): block 0's warp 0 split at
// the block barrier after the mix (lanes 24-31, outside t < NOUT, went through it, the cluster
// barrier and post; lanes 0-23 came to the barrier after it had completed and waited for ever).
#define CLUSTER 8
template <int NOUT, int OP, bool FUSED, int Q>
__device__ void mhc_cluster(const MhcArgs& a) {
  constexpr int HALVES = NOUT > 8 ? 2 : 1;
  constexpr int OPT = NOUT / HALVES;  // outputs per thread
  constexpr int UF = HC * Q < 8 ? HC * Q : 8;
  __shared__ float warp_part[HALVES][OPT + 1][BLOCK / 32];
  __shared__ float part[NOUT + 1];  // this block's lane-tree results: [0] sum of squares, [1 + o] dots
  __shared__ float pre_s[HC];
  const int t = threadIdx.x, half = t / BLOCK, tl = t - half * BLOCK;
  const unsigned crank = cluster_ctarank();
  const int lane = crank * BLOCK + tl;
  const int m = blockIdx.y;
  const int o0 = half * OPT;
  const int N = HC * a.D;

  float f[UF][OPT];
#pragma unroll
  for (int u = 0; u < UF; u++)
#pragma unroll
    for (int o = 0; o < OPT; o++) f[u][o] = __ldg(a.fn + (size_t)(o0 + o) * N + lane + u * LANES);

  pdl_wait();
  pdl_trigger();
  float sv[1][HC * Q];
  lane_streams<OP, FUSED, Q>(a, m, lane, half == 0, sv[0]);

  float acc[1][OPT + 1];
#pragma unroll
  for (int o = 0; o <= OPT; o++) acc[0][o] = 0.0f;
  lane_dots<1, OPT, UF, Q>(a, f, sv, acc, o0, lane, N);
#pragma unroll
  for (int o = 0; o <= OPT; o++) {
    float v = acc[0][o];
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) v = ADD(v, __shfl_down_sync(0xffffffffu, v, off));
    if ((tl & 31) == 0) warp_part[half][o][tl >> 5] = v;
  }
  __syncthreads();
  if (t <= NOUT) {
    const int h = t == 0 ? 0 : (t - 1) / OPT, o = t == 0 ? 0 : (t - 1) - h * OPT + 1;
    part[t] = tree4(warp_part[h][o]);
  }
  cluster_arrive();
  cluster_wait();  // 1: every block's part[] is visible cluster-wide

  if (crank == 0) {
    __shared__ float mix_s[NOUT];
    if (t < NOUT) {
      float v[CLUSTER], ss[CLUSTER];
#pragma unroll
      for (int b = 0; b < CLUSTER; b++) {
        v[b] = ld_dsmem(&part[t + 1], b);
        ss[b] = ld_dsmem(&part[0], b);
      }
      const float mix = block_mix(v, ss, N, a.norm_eps);
      mix_s[t] = mix;
      if (a.split_sinkhorn) a.scratch[(size_t)a.M * (LANES / BLOCK) * (NOUT + 1) + m * NOUT + t] = mix;
      if (t < HC) pre_s[t] = ADD(psigmoid(ADD(MUL(mix, a.scale[0]), a.base[t])), a.hc_eps);
    }
    __syncthreads();
    cluster_arrive();  // 2: pre is ready; the others collapse while this block finishes post
    if (OP != OP_POST_HEAD && t < HC)
      a.post_out[m * HC + t] = MUL(2.0f, psigmoid(ADD(MUL(mix_s[HC + t], a.scale[1]), a.base[HC + t])));
    cluster_wait();
  } else {
    cluster_arrive();
    cluster_wait();  // 2
  }

  // collapse: this block's slice of row m's D columns, pre read from block 0's shared memory
  const float p0 = ld_dsmem(&pre_s[0], 0), p1 = ld_dsmem(&pre_s[1], 0);
  const float p2 = ld_dsmem(&pre_s[2], 0), p3 = ld_dsmem(&pre_s[3], 0);
  const int per = a.D / CLUSTER, d0 = crank * per;
  const bf16_t* sm = a.streams + (size_t)m * HC * a.D;
  for (int d = d0 + t; d < d0 + per; d += HALVES * BLOCK) {
    float v = MUL(p0, bf2f(__ldcg(sm + d)));
    v = ADD(v, MUL(p1, bf2f(__ldcg(sm + a.D + d))));
    v = ADD(v, MUL(p2, bf2f(__ldcg(sm + 2 * a.D + d))));
    v = ADD(v, MUL(p3, bf2f(__ldcg(sm + 3 * a.D + d))));
    a.y[(size_t)m * a.D + d] = f2bf(v);
  }
  cluster_arrive();
  cluster_wait();  // 3: block 0's shared memory stays alive until every block has read pre
}
