// Micro-benchmark of the persistent cycle's post/comb chain (tools/sinkhorn_bench.py), appended to
// the driver's sources (kernels.py SOURCE) + persistent.cu and built once per SINKHORN_FORM. One warp per block, two rows per warp
// (16 lanes a row, as post_comb_from and comb_rows run them). Lane 0 reads clock64 around each piece;
// each piece ends in a volatile add that reads its result, so the stamp after it waits for the result.
// The outputs (comb from logits, post and comb from partials, quotients) are checked bit-for-bit on
// the host against the numpy contracts.

struct BenchArgs {
  const float* logits;    // [rows][16] Sinkhorn logits
  float* comb;            // [rows][16] sinkhorn_lane of the logits
  const float* partials;  // [rows][8][25] lane-group partials, as a boundary leaves them in scratch
  const float* base;      // [24]
  const float* scale;     // [3]
  float* post;            // [rows][4] post_comb_from of the partials
  float* comb2;           // [rows][16]
  const float* da;        // [ndiv] numerators
  const float* db;        // [ndiv] denominators
  float* q_rn;            // [ndiv] __fdiv_rn
  float* q_shared;        // [ndiv] div_by(a, recip(b))
  long long* cycles;      // [blocks][16] clock64 per piece (lane 0)
  const float* w;         // [blocks][4 warps][128][32] weights for sinkhorn_contended (64 KB a block)
  int rows, iters, D, ndiv;
  float eps, norm_eps;
};

__device__ __forceinline__ long long clk() {
  long long c;
  asm volatile("mov.u64 %0, %%clock64;" : "=l"(c));
  return c;
}
__device__ __forceinline__ void use(float& sink, float v) { asm volatile("add.f32 %0, %0, %1;" : "+f"(sink) : "f"(v)); }

// Pieces (cycles[block][piece], lane 0): see PIECES in sinkhorn_bench.py. post_comb_from runs one row
// per warp, so post and comb2 hold the warp's first row (row 2 * block) only.
extern "C" __global__ void __launch_bounds__(32) sinkhorn_bench(const BenchArgs a) {
  const int t = threadIdx.x, m = blockIdx.x * 2 + (t >> 4), j = (t >> 2) & 3, k = t & 3;
  const bool on = m < a.rows;
  const int mm = on ? m : 0;
  const unsigned rowbase = t & ~15u;
  float sink = 0.0f;
  long long c[16];
  // quotients (grid-stride, every lane)
  for (int i = blockIdx.x * 32 + t; i < a.ndiv; i += gridDim.x * 32) {
    a.q_rn[i] = DIV(a.da[i], a.db[i]);
    a.q_shared[i] = div_by(a.da[i], recip(a.db[i]));
  }
  __syncwarp();
  // 0..3: the pieces of post_comb_from, for the lane's own output (t < 24 ? t : 0)
  float v[LANES / BLOCK], ss[LANES / BLOCK], v2[LANES / BLOCK], ss2[LANES / BLOCK];
  c[0] = clk();
  row_partials<24>(a.partials, mm, t < 24 ? t : 0, v, ss);
  use(sink, v[LANES / BLOCK - 1]);
  use(sink, ss[LANES / BLOCK - 1]);
  c[1] = clk();
  row_partials<24>(a.partials, blockIdx.x * 2 < a.rows ? blockIdx.x * 2 : 0, t < 24 ? t : 0, v2, ss2);  // one row a warp
  const float mix = block_mix(v, ss, HC * a.D, a.norm_eps);
  use(sink, mix);
  c[2] = clk();
  const float sg = MUL(2.0f, psigmoid(ADD(MUL(mix, a.scale[1]), a.base[t < 24 ? t : 0])));
  use(sink, sg);
  c[3] = clk();
  // 3, 4: softmax + first division, then the loop, on the logits (the form's own code)
  float lg = on ? a.logits[mm * 16 + (t & 15)] : 0.0f;
  use(sink, lg);
  c[4] = clk();
  {
    float c0 = __shfl_sync(0xffffffffu, lg, rowbase + j * 4 + 0), c1 = __shfl_sync(0xffffffffu, lg, rowbase + j * 4 + 1);
    float c2 = __shfl_sync(0xffffffffu, lg, rowbase + j * 4 + 2), c3 = __shfl_sync(0xffffffffu, lg, rowbase + j * 4 + 3);
    const float mx = fmaxf(fmaxf(c0, c1), fmaxf(c2, c3));
    float e = pexp(SUB(lg, mx));
    c0 = __shfl_sync(0xffffffffu, e, rowbase + j * 4 + 0); c1 = __shfl_sync(0xffffffffu, e, rowbase + j * 4 + 1);
    c2 = __shfl_sync(0xffffffffu, e, rowbase + j * 4 + 2); c3 = __shfl_sync(0xffffffffu, e, rowbase + j * 4 + 3);
    use(sink, ADD(DIV(e, ADD(ADD(ADD(c0, c1), c2), c3)), a.eps));
  }
  c[5] = clk();
  const float comb = sinkhorn_lane(lg, j, k, rowbase, a.eps, a.iters);
  use(sink, comb);
  c[6] = clk();
  if (on && t < 32) a.comb[mm * 16 + (t & 15)] = comb;
  // 5: post_comb_from whole, from partials already in registers
  __shared__ float pc[1][HC + HC * HC];
  MhcArgs ma;
  ma.D = a.D;
  ma.norm_eps = a.norm_eps;
  ma.hc_eps = a.eps;
  ma.sinkhorn_iters = a.iters;
  ma.scale = a.scale;
  ma.base = a.base;
  float* post_s = pc[0];
  __syncwarp();
  c[7] = clk();
  post_comb_from(ma, mm, v2, ss2, post_s, post_s + HC);
  __syncwarp();
  use(sink, post_s[HC + 15]);
  c[8] = clk();
  const int m0 = blockIdx.x * 2;
  if (m0 < a.rows && t < HC) a.post[m0 * HC + t] = post_s[t];
  if (m0 < a.rows && t < 16) a.comb2[m0 * 16 + t] = post_s[HC + t];
  // micro pieces: dependent chains
  float q = 1.5f + (float)(t & 3) * 0.125f;
  c[9] = clk();
#pragma unroll 1
  for (int i = 0; i < 32; i++) q = DIV(2.25f, q);
  use(sink, q);
  c[10] = clk();
#pragma unroll 1
  for (int i = 0; i < 32; i++) q = div_by(2.25f, recip(q));
  use(sink, q);
  c[11] = clk();
  const Recip d = recip(1.0009765625f);
#pragma unroll 1
  for (int i = 0; i < 32; i++) q = div_by(q, d);
  use(sink, q);
  c[12] = clk();
  float s = q;
#pragma unroll 1
  for (int i = 0; i < 32; i++) {
    const float s0 = __shfl_sync(0xffffffffu, s, rowbase + k), s1 = __shfl_sync(0xffffffffu, s, rowbase + k + 4);
    const float s2 = __shfl_sync(0xffffffffu, s, rowbase + k + 8), s3 = __shfl_sync(0xffffffffu, s, rowbase + k + 12);
    s = MUL(ADD(ADD(ADD(s0, s1), s2), s3), 0.25f);
  }
  use(sink, s);
  c[13] = clk();
  float x = -0.5f;
#pragma unroll 1
  for (int i = 0; i < 16; i++) x = SUB(pexp(x), 1.5f);
  use(sink, x);
  c[14] = clk();
  // the fold of the all-reduce folded into a boundary: 4 elements of 4 ranks (Q = 4 at D = 4096), the
  // dsv4-flash contract (one chunk per rank, start at the owner - 1, direction -1, bf16 hop rounding)
  Ring ring;
  ring.n = 2 * a.D, ring.ranks = 4, ring.cpr = 1, ring.per = 0, ring.offset = -1, ring.dir = -1, ring.hop = 1;
  ring.segments = 1, ring.is_bf16 = 1;
  float xr[4][MAXR];
#pragma unroll
  for (int q = 0; q < 4; q++)
#pragma unroll
    for (int r = 0; r < MAXR; r++) xr[q][r] = round_bf(ADD(x, (float)(q * MAXR + r)));
  float xs[4];
  c[15] = clk();
#pragma unroll
  for (int q = 0; q < 4; q++) xs[q] = ring_fold_loaded(xr[q], ring, t + q * LANES);
  use(sink, xs[0]);
  use(sink, xs[1]);
  use(sink, xs[2]);
  use(sink, xs[3]);
  const long long c_fold = clk() - c[15];
  if (t == 0) {
    long long* o = a.cycles + (size_t)blockIdx.x * 16;
    o[11] = c_fold;        // fold of 4 elements, 4 ranks
    o[0] = c[1] - c[0];    // partial loads
    o[1] = c[2] - c[1];    // block_mix
    o[2] = c[3] - c[2];    // sigmoid (post)
    o[3] = c[5] - c[4];    // softmax + first division
    o[4] = c[6] - c[5];    // whole sinkhorn_lane (softmax included)
    o[5] = c[8] - c[7];    // post_comb_from whole
    o[6] = c[10] - c[9];   // 32 x __fdiv_rn
    o[7] = c[11] - c[10];  // 32 x recip + div_by
    o[8] = c[12] - c[11];  // 32 x div_by, one reciprocal
    o[9] = c[13] - c[12];  // 32 x (4 shuffles + 4 adds)
    o[10] = c[14] - c[13]; // 16 x pexp
    o[15] = __float_as_int(sink);  // keeps the chains alive
  }
}

// The chain as the persistent kernel runs it: every warp of a 128-thread block has just issued its 128
// weight loads (f[16][8] of a unit, 64 KB a block) when warp 0 starts post_comb_from; warps 1-3 wait
// at the block barrier. Shuffles go through the same memory pipeline queue as those loads, so this
// times the chain behind them (piece 12) and the same block without the loads (piece 13).
template <bool LOADS>
__device__ __forceinline__ void contended(const BenchArgs& a, long long* o) {
  const int t = threadIdx.x, w = t >> 5, l = t & 31;
  const int m0 = blockIdx.x * 2 < a.rows ? blockIdx.x * 2 : 0;
  __shared__ float pc[HC + HC * HC];
  float sink = 0.0f;
  float f[128];
  if (LOADS) {
    const float* src = a.w + ((size_t)blockIdx.x * 4 + w) * 128 * 32 + l;
#pragma unroll
    for (int i = 0; i < 128; i++) f[i] = __ldg(src + i * 32);
  }
  float v[LANES / BLOCK], ss[LANES / BLOCK];
  if (w == 0) row_partials<24>(a.partials, m0, l < 24 ? l : 0, v, ss);
  MhcArgs ma;
  ma.D = a.D, ma.norm_eps = a.norm_eps, ma.hc_eps = a.eps, ma.sinkhorn_iters = a.iters, ma.scale = a.scale, ma.base = a.base;
  const long long c0 = clk();
  if (w == 0) post_comb_from(ma, m0, v, ss, pc, pc + HC);
  __syncthreads();
  use(sink, pc[HC + 15]);
  const long long c1 = clk();
  if (LOADS) {
    float acc = 0.0f;
#pragma unroll
    for (int i = 0; i < 128; i++) acc = ADD(acc, f[i]);
    use(sink, acc);
  }
  if (t == 0) o[LOADS ? 12 : 13] = c1 - c0;
  if (t == 0) o[14] = __float_as_int(sink);
}
extern "C" __global__ void __launch_bounds__(128) sinkhorn_contended(const BenchArgs a) {
  long long* o = a.cycles + (size_t)blockIdx.x * 16;
  contended<true>(a, o);
  __syncthreads();
  contended<false>(a, o);
}
