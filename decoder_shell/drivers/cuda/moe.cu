// MoE draft kernels (docs/CONTRACTS.md section 10, docs/MOE.md): act_qdq, gate, the quantized
// linear with a SwiGLU or fp32 epilogue for routed (MXFP4), shared (FP8 32x32) and expanded (bf16)
// weights, and the ascending-id combine. Every kernel is bit-identical to its numpy contract; the
// build prepends kernels.cu's arithmetic prelude (ADD/MUL/DIV/SQRT, f2bf/bf2f, pexp) and the fp32
// constants of the contracts as exact bit patterns (drivers/cuda/moe.py).
// Each kernel waits for its predecessors (pdl_wait) before it reads what they wrote, then lets its
// successor start (pdl_trigger): in the cycle graph they take programmatic edges like the mHC kernels.
// Routing stays on the device: every kernel reads the expert ids itself; launch dimensions depend on
// the geometry only (block column x of a routed linear serves the x-th smallest distinct expert id;
// min(experts, slots) columns); nothing allocates.

#define MOE_WARPS 8
#define MOE_MAX_SLOTS 512  // routed slots (rows x top-k) of one launch
#define MOE_ID_WORDS 128   // bitmap words of the expert ids present: at most 4096 experts
#define FMT_MXFP4 0
#define FMT_FP8 1
#define FMT_BF16 2
#define EPI_SWIGLU 0
#define EPI_F32 1

// The E4M3 and E2M1 decode tables (256 + 16 fp32 values) come from ml_dtypes on the host.
#define TABLE_FLOATS (256 + 16)

__device__ __forceinline__ unsigned e4m3_rne(float q) {
  // ml_dtypes' float8_e4m3fn RNE of a value already clamped to +-448 (both halves of the pair are q)
  unsigned short out;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %1;" : "=h"(out) : "f"(q));
  return out & 0xFFu;
}

__device__ __forceinline__ float warp_tree(float v) {
  // adjacent-pair tree over the 32 lanes, increasing offsets: lane 0 ends with ((l0+l1)+(l2+l3))+...
  for (int off = 1; off < 32; off <<= 1) v = ADD(v, __shfl_down_sync(0xffffffffu, v, off));
  return v;
}

// ---- act_qdq: one warp per (row, 32-group) -----------------------------------------------------------
extern "C" __global__ void __launch_bounds__(256) moe_qdq(const bf16_t* x, unsigned char* codes,
                                                          unsigned char* scales, int rows, int K) {
  pdl_wait();
  pdl_trigger();
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int groups = K >> 5;
  int g = blockIdx.x * 8 + warp, row = blockIdx.y;
  if (g >= groups || row >= rows) return;
  size_t i = (size_t)row * K + (size_t)g * 32 + lane;
  float v = bf2f(x[i]);
  float amax = fabsf(v);
  for (int off = 16; off; off >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
  amax = fmaxf(amax, AMAX_FLOOR);
  unsigned b = __float_as_uint(MUL(amax, INV_E4M3_MAX));
  unsigned byte = ((b >> 23) & 0xFFu) + ((b & 0x7FFFFFu) != 0u);  // ceil(log2 v) + 127
  float s = __uint_as_float(byte << 23);
  float q = fminf(fmaxf(DIV(v, s), -448.0f), 448.0f);
  codes[i] = (unsigned char)e4m3_rne(q);
  if (lane == 0) scales[(size_t)row * groups + g] = (unsigned char)byte;
}

// ---- gate: one 1024-thread block per row --------------------------------------------------------------
__device__ __forceinline__ float plog1p(float u) {
  float f = DIV(u, ADD(2.0f, u));
  float s = MUL(f, f);
  float p = LOG1P_C0;
  p = ADD(MUL(p, s), LOG1P_C1); p = ADD(MUL(p, s), LOG1P_C2); p = ADD(MUL(p, s), LOG1P_C3);
  p = ADD(MUL(p, s), LOG1P_C4); p = ADD(MUL(p, s), LOG1P_C5); p = ADD(MUL(p, s), LOG1P_C6);
  p = ADD(MUL(p, s), LOG1P_C7); p = ADD(MUL(p, s), LOG1P_C8); p = ADD(MUL(p, s), LOG1P_C9);
  return MUL(MUL(2.0f, f), p);
}
__device__ __forceinline__ float psoftplus(float z) { return ADD(z > 0.0f ? z : 0.0f, plog1p(pexp(-fabsf(z)))); }
__device__ __forceinline__ float psilu(float g) { return DIV(g, ADD(1.0f, pexp(-g))); }

#define GATE_CHUNK 8
// Experts [e0, e0 + N) of row xr in the 1024-lane order: lane l sums d = l, l + 1024, ... left to right,
// warp_tree over each warp, then the 32 warps' values by warp_tree in warp 0; thread 0 writes out[c]
// (c < N, e0 + c < E). Both gate kernels call it, so their scores are the same bits by construction.
template <int N>
__device__ __forceinline__ void gate_dots(const bf16_t* xr, const bf16_t* W, int e0, int D, int E, float (*red)[N],
                                          float* out) {
  int l = threadIdx.x, lane = l & 31, warp = l >> 5;
  float acc[N];
#pragma unroll
  for (int c = 0; c < N; c++) acc[c] = 0.0f;
  for (int d = l; d < D; d += 1024) {
    float xv = bf2f(xr[d]);
#pragma unroll
    for (int c = 0; c < N; c++)
      if (e0 + c < E) acc[c] = ADD(acc[c], MUL(xv, bf2f(W[(size_t)(e0 + c) * D + d])));
  }
#pragma unroll
  for (int c = 0; c < N; c++) {
    float v = warp_tree(acc[c]);
    if (lane == 0) red[warp][c] = v;
  }
  __syncthreads();
  if (warp == 0) {
#pragma unroll
    for (int c = 0; c < N; c++) {
      float v = warp_tree(red[lane][c]);
      if (lane == 0 && e0 + c < E) out[c] = v;
    }
  }
  __syncthreads();
}

// Row t's routing from its E linear sums in shared sc (E <= 1024): sqrt(softplus), the biased top-k on
// thread 0 (strictly larger wins: ties keep the smaller id), the weights normalized in top-k order.
__device__ __forceinline__ void gate_route(float* sc, const float* bias, int* ids, float* wts, int t, int E, int topk,
                                           float route_scale) {
  // The biased scores are formed by every thread at once and the serial top-k reads them from shared
  // memory: the same ADD per expert and the same comparisons in the same order as one thread reading
  // bias[] from global memory (whose dependent loads made this loop most of the gate's time).
  __shared__ float biased[1024];
  __shared__ unsigned char taken[1024];
  int l = threadIdx.x;
  if (l < E) {
    sc[l] = SQRT(psoftplus(sc[l]));
    biased[l] = ADD(sc[l], __ldg(bias + l));
    taken[l] = 0;
  }
  __syncthreads();
  if (l == 0) {
    float sum = 0.0f;
    for (int k = 0; k < topk; k++) {
      int best = -1;
      float bv = 0.0f;
      for (int e = 0; e < E; e++) {
        if (taken[e]) continue;
        float v = biased[e];
        if (best < 0 || v > bv) { best = e; bv = v; }  // strictly larger: ties keep the smaller id
      }
      taken[best] = 1;
      ids[(size_t)t * topk + k] = best;
      float w = sc[best];
      sum = k == 0 ? w : ADD(sum, w);  // w[0] + w[1] + ... left to right, as the contract
    }
    sum = ADD(sum, GATE_EPS);
    for (int k = 0; k < topk; k++)
      wts[(size_t)t * topk + k] = MUL(DIV(sc[ids[(size_t)t * topk + k]], sum), route_scale);
  }
}

// The row gate: one block per row computes all E sums, GATE_CHUNK experts at a time, then routes.
extern "C" __global__ void __launch_bounds__(1024) moe_gate(const bf16_t* x, const bf16_t* W, const float* bias,
                                                            int* ids, float* wts, int rows, int D, int E, int topk,
                                                            float route_scale) {
  __shared__ float red[32][GATE_CHUNK];
  __shared__ float sc[1024];
  pdl_wait();
  pdl_trigger();
  int t = blockIdx.x;
  if (t >= rows) return;
  const bf16_t* xr = x + (size_t)t * D;
  for (int e0 = 0; e0 < E; e0 += GATE_CHUNK) gate_dots<GATE_CHUNK>(xr, W, e0, D, E, red, sc + e0);
  gate_route(sc, bias, ids, wts, t, E, topk, route_scale);
}

// The split gate: block (t, g) computes experts [g * G, (g + 1) * G) of row t (the same gate_dots), writes
// them to scores [rows, E] and arrives on count[t]; the block that brings count[t] to a multiple of
// gridDim.y is the row's last and routes it. count only grows (each launch adds gridDim.y per row), so
// graph replays need no reset; it is 64-bit and never wraps. G experts a block: moe_gate_split_g{2,4,8}.
template <int G>
__device__ __forceinline__ void gate_split(const bf16_t* x, const bf16_t* W, const float* bias, float* scores,
                                           unsigned long long* count, int* ids, float* wts, int rows, int D, int E,
                                           int topk, float route_scale) {
  __shared__ float red[32][G];
  __shared__ float part[G];
  __shared__ float sc[1024];
  __shared__ int last;
  pdl_wait();
  pdl_trigger();
  int t = blockIdx.x, e0 = blockIdx.y * G, l = threadIdx.x;
  if (t >= rows) return;
  float* row = scores + (size_t)t * E;
  gate_dots<G>(x + (size_t)t * D, W, e0, D, E, red, part);
  if (l == 0) {  // thread 0 wrote part in gate_dots
    for (int c = 0; c < G && e0 + c < E; c++) row[e0 + c] = part[c];
    __threadfence();  // the scores are visible before the arrival
    unsigned long long n = atomicAdd(count + t, 1ull) + 1ull;
    last = n % gridDim.y == 0;
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  if (l < E) sc[l] = __ldcg(row + l);  // L2: other blocks' scores
  __syncthreads();
  gate_route(sc, bias, ids, wts, t, E, topk, route_scale);
}

#define GATE_SPLIT_KERNEL(G)                                                                                  \
  extern "C" __global__ void __launch_bounds__(1024) moe_gate_split_g##G(                                      \
      const bf16_t* x, const bf16_t* W, const float* bias, float* scores, unsigned long long* count, int* ids, \
      float* wts, int rows, int D, int E, int topk, float route_scale) {                                      \
    gate_split<G>(x, W, bias, scores, count, ids, wts, rows, D, E, topk, route_scale);                        \
  }
GATE_SPLIT_KERNEL(2)
GATE_SPLIT_KERNEL(4)
GATE_SPLIT_KERNEL(8)

// ---- the quantized linear (qlinear order) with its epilogues ----------------------------------------
struct MoeLin {
  const unsigned char* xc;   // activation E4M3 codes [A, K]
  const unsigned char* xs;   // activation E8M0 scales [A, K/32]
  const int* ids;            // [rows, topk] expert ids, or null: a dense (shared) expert, slot = row
  const float* rw;           // [rows, topk] route weights (SwiGLU epilogue of routed experts), or null
  int rows, topk;
  int act_per_slot;          // activation row: 1 -> the slot (w2 reads h), 0 -> slot / topk (w1/w3 read x)
  const unsigned char* w;    // weights: expert e, matrix m, row n at w + e*w_estride + m*w_mstride + n*w_rstride
  const unsigned char* s;    // scales: MXFP4 [.., N, K/32] (row's own), FP8 [.., N/32, K/32]
  long long w_estride, w_mstride, w_rstride, s_estride, s_mstride;
  int K, N;                  // input width, output rows of each matrix
  void* out;                 // SwiGLU: bf16 h [slots, N]; F32: fp32 [slots, N]
  const float* tables;       // TABLE_FLOATS: E4M3 byte -> fp32, then E2M1 nibble -> fp32 (ml_dtypes)
  int experts;               // experts in the weight stack (valid ids are [0, experts))
};

template <int FMT>
__device__ __forceinline__ float group_sum(const unsigned char* wrow, const unsigned char* xrow, int g, float sa,
                                           const float* e4, const float* e2) {
  // group g's 32 products, left to right from the first: codes x codes (packed), or the bf16 values
  // q*s_a x w (expanded; sa = s_a, the product q*s_a is exact)
  const unsigned char* xg = xrow + (size_t)g * 32;
  uint4 xq0 = *(const uint4*)xg, xq1 = *(const uint4*)(xg + 16);
  unsigned xv[8] = {xq0.x, xq0.y, xq0.z, xq0.w, xq1.x, xq1.y, xq1.z, xq1.w};
  float acc = 0.0f;
  if (FMT == FMT_MXFP4) {
    uint4 wq = *(const uint4*)(wrow + (size_t)g * 16);
    unsigned wv[4] = {wq.x, wq.y, wq.z, wq.w};
#pragma unroll
    for (int i = 0; i < 32; i++) {
      float p = MUL(e4[(xv[i >> 2] >> (8 * (i & 3))) & 0xFFu], e2[(wv[i >> 3] >> (4 * (i & 7))) & 0xFu]);
      acc = i ? ADD(acc, p) : p;
    }
  } else if (FMT == FMT_FP8) {
    const unsigned char* wg = wrow + (size_t)g * 32;
    uint4 w0 = *(const uint4*)wg, w1 = *(const uint4*)(wg + 16);
    unsigned wv[8] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w};
#pragma unroll
    for (int i = 0; i < 32; i++) {
      float p = MUL(e4[(xv[i >> 2] >> (8 * (i & 3))) & 0xFFu], e4[(wv[i >> 2] >> (8 * (i & 3))) & 0xFFu]);
      acc = i ? ADD(acc, p) : p;
    }
  } else {
    const uint4* wg = (const uint4*)(wrow + (size_t)g * 64);
    uint4 w0 = wg[0], w1 = wg[1], w2 = wg[2], w3 = wg[3];
    unsigned wv[16] = {w0.x, w0.y, w0.z, w0.w, w1.x, w1.y, w1.z, w1.w, w2.x, w2.y, w2.z, w2.w, w3.x, w3.y, w3.z, w3.w};
#pragma unroll
    for (int i = 0; i < 32; i++) {
      float av = MUL(e4[(xv[i >> 2] >> (8 * (i & 3))) & 0xFFu], sa);
      float p = MUL(av, __uint_as_float(((wv[i >> 1] >> (16 * (i & 1))) & 0xFFFFu) << 16));
      acc = i ? ADD(acc, p) : p;
    }
  }
  return acc;
}

template <int FMT>
__device__ __forceinline__ float row_dot(const MoeLin& a, int e, int m, int n, int arow, const float* e4,
                                         const float* e2) {
  // y = lane_sum over the K/32 groups with 32 lanes (lane l: groups l, l+32, ...), valid in lane 0
  int lane = threadIdx.x & 31, G = a.K >> 5;
  const unsigned char* wrow = a.w + e * a.w_estride + m * a.w_mstride + (long long)n * a.w_rstride;
  const unsigned char* xrow = a.xc + (size_t)arow * a.K;
  const unsigned char* xs = a.xs + (size_t)arow * G;
  const unsigned char* srow = FMT == FMT_BF16 ? nullptr
      : a.s + e * a.s_estride + m * a.s_mstride + (long long)(FMT == FMT_MXFP4 ? n : n >> 5) * G;
  float acc = 0.0f;
  for (int g = lane; g < G; g += 32) {
    unsigned sab = xs[g];
    float p;
    if (FMT == FMT_BF16) {
      p = group_sum<FMT>(wrow, xrow, g, __uint_as_float(sab << 23), e4, e2);
    } else {
      // fl(s_a * s_w) = 2^(e_a + e_w): a normal number inside the linear's exact domain
      int biased = (int)sab + (int)srow[g] - 127;
      p = MUL(group_sum<FMT>(wrow, xrow, g, 0.0f, e4, e2), __uint_as_float((unsigned)biased << 23));
    }
    acc = ADD(acc, p);
  }
  return warp_tree(acc);
}

__device__ __forceinline__ int routed_expert(const MoeLin& a, unsigned* seen, int* picked) {
  // Block column x serves the x-th smallest distinct expert id of the launch (grid x = min(experts,
  // slots), from the shapes only): experts no row picked cost no block. Ids outside [0, experts)
  // (a deleted gate's poison) are nobody's. Returns -1 where there are fewer distinct experts than
  // block columns; a dense (shared) expert (no ids) is block column x itself. Every thread of the
  // block calls it (it synchronizes; any block size of whole warps); seen is MOE_ID_WORDS words of
  // shared memory (a bitmap of the ids present), picked one int. The bitmap and one warp's prefix
  // count over it keep this O(slots / threads + experts / 1024) per block.
  if (!a.ids) return blockIdx.x;
  const int slots = a.rows * a.topk, words = (a.experts + 31) >> 5;
  for (int w = threadIdx.x; w < words; w += blockDim.x) seen[w] = 0u;
  __syncthreads();
  for (int sl = threadIdx.x; sl < slots; sl += blockDim.x) {
    int id = __ldg(a.ids + sl);
    if (id >= 0 && id < a.experts) atomicOr(seen + (id >> 5), 1u << (id & 31));
  }
  __syncthreads();
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x;
    int want = blockIdx.x, found = -1;
    for (int base = 0; base < words && found < 0; base += 32) {  // warp-uniform
      unsigned w = base + lane < words ? seen[base + lane] : 0u;
      int c = __popc(w), incl = c;
      for (int off = 1; off < 32; off <<= 1) {
        int v = __shfl_up_sync(0xffffffffu, incl, off);
        if (lane >= off) incl += v;
      }
      bool here = want >= incl - c && want < incl;
      int pos = -1;
      if (here) {
        for (int j = incl - c; j < want; j++) w &= w - 1u;  // drop the set bits below the wanted one
        pos = (base + lane) * 32 + __ffs(w) - 1;
      }
      unsigned hit = __ballot_sync(0xffffffffu, here);
      if (hit) found = __shfl_sync(0xffffffffu, pos, __ffs(hit) - 1);
      else want -= __shfl_sync(0xffffffffu, incl, 31);
    }
    if (lane == 0) *picked = found;
  }
  __syncthreads();
  return *picked;
}

__device__ __forceinline__ float swiglu_h(float g, float u, const float* rw, int sl) {
  // the expert's h from the fp32 values of w1 and w3 (rounded to bf16 here): clamps, silu, route weight
  g = fminf(round_bf(g), 10.0f);
  u = fminf(fmaxf(round_bf(u), -10.0f), 10.0f);
  float h = MUL(psilu(g), u);
  return rw ? MUL(__ldg(rw + sl), h) : h;
}

template <int FMT, int EPI>
__device__ __forceinline__ void moe_linear(const MoeLin& a) {
  __shared__ float tab[TABLE_FLOATS];
  __shared__ int picked;
  __shared__ unsigned seen[MOE_ID_WORDS];
  pdl_wait();
  pdl_trigger();
  int slots = a.ids ? a.rows * a.topk : a.rows;
  int e = routed_expert(a, seen, &picked);
  if (e < 0) return;  // fewer distinct experts than block columns
  for (int i = threadIdx.x; i < TABLE_FLOATS; i += blockDim.x) tab[i] = a.tables[i];
  __syncthreads();
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int n = blockIdx.y * MOE_WARPS + warp;
  if (n >= a.N) return;
  for (int sl = 0; sl < slots; sl++) {
    if (a.ids && __ldg(a.ids + sl) != e) continue;
    int arow = a.act_per_slot ? sl : (a.ids ? sl / a.topk : sl);
    if (EPI == EPI_SWIGLU) {
      float g = row_dot<FMT>(a, e, 0, n, arow, tab, tab + 256);
      float u = row_dot<FMT>(a, e, 1, n, arow, tab, tab + 256);
      if (lane == 0) ((bf16_t*)a.out)[(size_t)sl * a.N + n] = f2bf(swiglu_h(g, u, a.rw, sl));
    } else {
      float y = row_dot<FMT>(a, e, 0, n, arow, tab, tab + 256);
      if (lane == 0) ((float*)a.out)[(size_t)sl * a.N + n] = y;
    }
  }
}

#define MOE_LINEAR(name, FMT, EPI) \
  extern "C" __global__ void __launch_bounds__(MOE_WARPS * 32) name(const MoeLin a) { moe_linear<FMT, EPI>(a); }
MOE_LINEAR(moe_up_mxfp4, FMT_MXFP4, EPI_SWIGLU)
MOE_LINEAR(moe_up_fp8, FMT_FP8, EPI_SWIGLU)
MOE_LINEAR(moe_up_bf16, FMT_BF16, EPI_SWIGLU)
MOE_LINEAR(moe_down_mxfp4, FMT_MXFP4, EPI_F32)
MOE_LINEAR(moe_down_fp8, FMT_FP8, EPI_F32)
MOE_LINEAR(moe_down_bf16, FMT_BF16, EPI_F32)

// ---- combine: slots in ascending expert id from +0.0, then the shared partial (COMBINE mode) ----------
// Row t's slots at column d summed from +0.0 in ascending expert id (ids of a row are distinct), each
// rounded to bf16 first when ROUND (the exact-official epilogue); ids not from a gate (a deleted gate's
// poison) end the walk, so nothing outside the slots is read.
template <bool ROUND>
__device__ __forceinline__ float ascending_slots(const float* slots, const int* ids, int t, int topk, int D, int d) {
  const int* id = ids + (size_t)t * topk;
  float acc = 0.0f;
  int prev = -1;
  for (int r = 0; r < topk; r++) {  // the r-th smallest id
    int best = -1;
    for (int j = 0; j < topk; j++)
      if (id[j] > prev && (best < 0 || id[j] < id[best])) best = j;
    if (best < 0) break;
    prev = id[best];
    const float v = slots[((size_t)t * topk + best) * D + d];
    acc = ADD(acc, ROUND ? round_bf(v) : v);
  }
  return acc;
}

extern "C" __global__ void __launch_bounds__(256) moe_combine(const float* slots, const float* shared, const int* ids,
                                                              float* out, int rows, int topk, int D) {
  pdl_wait();
  pdl_trigger();
  int t = blockIdx.y, d = blockIdx.x * 256 + threadIdx.x;
  if (t >= rows || d >= D) return;
  float acc = ascending_slots<false>(slots, ids, t, topk, D, d);
  if (shared) acc = ADD(acc, shared[(size_t)t * D + d]);
  out[(size_t)t * D + d] = acc;
}

// ---- exact-official combine: the epilogue after the per-slot and shared fp32 all-reduces ----------------
// out = bf16(+0.0 + bf16(slot) in ascending expert id + bf16(shared)), every addition fp32 round-to-nearest
// (contracts/moe.official_epilogue). bf16 out [rows, D]: what the mHC boundary reads.
extern "C" __global__ void __launch_bounds__(256) moe_combine_official(const float* slots, const float* shared,
                                                                       const int* ids, bf16_t* out, int rows,
                                                                       int topk, int D) {
  pdl_wait();
  pdl_trigger();
  int t = blockIdx.y, d = blockIdx.x * 256 + threadIdx.x;
  if (t >= rows || d >= D) return;
  float acc = ascending_slots<true>(slots, ids, t, topk, D, d);
  acc = ADD(acc, round_bf(shared[(size_t)t * D + d]));
  out[(size_t)t * D + d] = f2bf(acc);
}

// ---- round to bf16: the last step of the fused combine (gate candidate `combine=fused`) -----------------
extern "C" __global__ void __launch_bounds__(256) moe_round_bf16(const float* x, bf16_t* out, int n) {
  pdl_wait();
  pdl_trigger();
  int i = blockIdx.x * 256 + threadIdx.x;
  if (i < n) out[i] = f2bf(x[i]);
}

// ---- decode once: a packed weight stack to bf16 (the `moe-expanded` candidate, untimed) -------------
// rows x K codes (MXFP4: K/2 bytes a row, low nibble the even input; FP8: K bytes) with E8M0 scales
// [rows / srows, K/32] (srows 1 for MXFP4, 32 for FP8 32x32 blocks): out = bf16(code * 2^(s-127)),
// the product in fp32 (qlinear.expand; exact in bf16 wherever the contract accepts the weight).
extern "C" __global__ void __launch_bounds__(256) moe_expand(const unsigned char* codes, const unsigned char* scales,
                                                             bf16_t* out, long long rows, int K, int fmt, int srows,
                                                             const float* tables) {
  long long n = rows * K;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
    long long r = i / K;
    int c = (int)(i - r * K);
    float v = fmt == FMT_MXFP4 ? tables[256 + ((codes[r * (K >> 1) + (c >> 1)] >> (4 * (c & 1))) & 0xFu)]
                               : tables[codes[i]];
    unsigned s = scales[(r / srows) * (K >> 5) + (c >> 5)];
    float scale = __uint_as_float(s ? s << 23 : 0x00400000u);  // 2^(s-127); byte 0 is the subnormal 2^-127
    out[i] = f2bf(MUL(v, scale));
  }
}

// ---- dense projections (contracts/dense.py): a grouped linear with a bf16 or fp32 epilogue --------------
// The draft attention's wq_a, wkv, wq_b, wo_b, main_proj (one group) and wo_a (its einsum groups). The
// MoeLin carries `experts` = groups, w/s stacks [groups, N, K] (strides of moe.py), no ids; block
// column x is group g, block row y 8 output rows (one warp each). Row t's activation is a row of
// groups*K codes of which group g reads [g*K, (g+1)*K); the output is out[t, g*N + n]. Same qlinear
// order as the expert linears (row_dot), then bf16(y) (the official linear) or y (a rank's partial).
template <int FMT, int OUT_BF16>
__device__ __forceinline__ void dense_linear(const MoeLin& a) {
  __shared__ float tab[TABLE_FLOATS];
  pdl_wait();
  pdl_trigger();
  for (int i = threadIdx.x; i < TABLE_FLOATS; i += blockDim.x) tab[i] = a.tables[i];
  __syncthreads();
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = blockIdx.x, groups = a.experts;
  int n = blockIdx.y * MOE_WARPS + warp;
  if (g >= groups || n >= a.N) return;
  MoeLin b = a;
  b.xc = a.xc + (size_t)g * a.K;         // with activation row t * groups: row t, inputs from g*K
  b.xs = a.xs + (size_t)g * (a.K >> 5);
  for (int t = 0; t < a.rows; t++) {
    float y = row_dot<FMT>(b, g, 0, n, t * groups, tab, tab + 256);
    size_t o = ((size_t)t * groups + g) * a.N + n;
    if (lane == 0) {
      if (OUT_BF16) ((bf16_t*)a.out)[o] = f2bf(y);
      else ((float*)a.out)[o] = y;
    }
  }
}

#define DENSE_LINEAR(name, FMT, OUT_BF16) \
  extern "C" __global__ void __launch_bounds__(MOE_WARPS * 32) name(const MoeLin a) { dense_linear<FMT, OUT_BF16>(a); }
DENSE_LINEAR(dense_fp8_bf16, FMT_FP8, 1)
DENSE_LINEAR(dense_fp8_f32, FMT_FP8, 0)
DENSE_LINEAR(dense_bf16_bf16, FMT_BF16, 1)
DENSE_LINEAR(dense_bf16_f32, FMT_BF16, 0)
