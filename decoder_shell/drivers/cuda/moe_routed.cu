// The expert linears with their group sums spread evenly over the block (`moe_up_spread_*`,
// `moe_down_spread_*`; docs/MOE.md "Spread kernels"). Same MoeLin arguments and block columns as
// moe.cu's warp-per-row kernels (block column x: the x-th smallest distinct expert id), ROWS output rows
// per block row (up 16, down 32: block row y has rows ROWS*y ..), same bits: only who computes which
// group sum changes, never the order of a sum.
//
// Why: the warp-per-row kernels look every code up in a shared-memory table (two loads per product)
// and so run at the shared-memory load rate, far from the HBM time of the weights they read. Here
// - each activation row is decoded once per block into shared memory as fp32 (the E4M3 table value;
//   expanded weights: times s_a, as moe.cu does), read back with one 16-byte load per 4 products
//   (each group's eight 16-byte chunks swizzled by g & 7: eight lanes on consecutive groups hit
//   distinct banks);
// - MXFP4 weights are decoded without a table: byte permutes (prmt) build the bf16 patterns of four
//   E2M1 magnitudes at once from two constant words, the sign bytes come from a sign-replicating prmt;
//   FP8 weights by moving the code's bits into an fp32 (the value times 2^-120, E4M3 subnormals on fp32
//   subnormals) and one exact multiply by 2^120;
// - a task is one (output row, 32-group) pair of the block's ROWS rows: the tasks are spread over the
//   block's threads evenly (the block size is chosen from K for that), each task reads its weight
//   bytes from HBM once (16-byte loads, issued two tasks ahead) for all the slots of the pass, and
//   writes each slot's scaled
//   group sum into shared memory; then one warp per (slot, row) does the contract's lane sums (lane l:
//   groups l, l+32, ... from +0.0) and the adjacent-pair tree, and the epilogue.
// Exactness of the fused multiply-add (packed formats only). A product of an E4M3 code value
// (|q| in {0} u [2^-9, 448], 4 significant bits) and an E2M1 value (|w| in {0} u [0.5, 6], 2 bits) has
// at most 6 significant bits and a magnitude in {0} u [2^-10, 2688]; with an E4M3 weight (|w| in
// {0} u [2^-9, 448], 4 bits) 8 bits and {0} u [2^-18, 200704]. Both are normal fp32 numbers, so
// MUL(q, w) is the exact product and __fmaf_rn(q, w, acc) = RN(acc + q*w) = ADD(acc, MUL(q, w)),
// including the sign of a zero result (IEEE gives exact zero sums the same sign for both). The first
// product of a group is MUL(q, w) itself, as in moe.cu (never 0.0f + p: p may be -0.0). Expanded (bf16)
// weights keep MUL then ADD: there the activation is q * s_a and the product's range depends on the
// corpus's scales, so exactness of the product is not provable from the kernel's inputs.

#define SP_SMEM_FLOATS 11008  // at most this many fp32 of dynamic shared memory: decoded rows and group sums
#define SP_MAX_BATCH 4        // slots of one expert per pass (weights read once for all of them)

__device__ __forceinline__ unsigned prmt(unsigned a, unsigned b, unsigned sel) {
  // byte k of the result: byte (sel nibble k & 7) of {b, a}, or its sign replicated when nibble bit 3 is set
  unsigned d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(sel));
  return d;
}

// bf16 patterns of the E2M1 magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6 (index = nibble & 7): high bytes
// 00 3F 3F 3F 40 40 40 40 and low bytes 00 00 80 C0 00 40 80 C0, as two words each (byte 0 = index 0)
#define E2M1_HI0 0x3F3F3F00u
#define E2M1_HI1 0x40404040u
#define E2M1_LO0 0xC0800000u
#define E2M1_LO1 0xC0804000u

__device__ __forceinline__ void e2m1x4(unsigned mags, unsigned signs, float* v) {
  // four values from four 3-bit magnitudes (nibbles of mags, bit 3 clear) and four sign bytes (00 / FF)
  unsigned hi = prmt(E2M1_HI0, E2M1_HI1, mags) | (signs & 0x80808080u);
  unsigned lo = prmt(E2M1_LO0, E2M1_LO1, mags);
  unsigned p01 = prmt(lo, hi, 0x5140u), p23 = prmt(lo, hi, 0x7362u);  // bf16 pairs (v0 | v1 << 16)
  v[0] = __uint_as_float(p01 << 16);
  v[1] = __uint_as_float(p01 & 0xFFFF0000u);
  v[2] = __uint_as_float(p23 << 16);
  v[3] = __uint_as_float(p23 & 0xFFFF0000u);
}

__device__ __forceinline__ void e2m1x8(unsigned w, float* v) {
  // the 8 nibbles of w (low nibble first: the even input), exactly the ml_dtypes E2M1 values
  unsigned m = w & 0x77777777u, w4 = w << 4;
  // sign of nibble k is bit 4k+3: the msb of byte k/2 of w4 (k even) or of w (k odd)
  e2m1x4(m, prmt(w4, w, 0xD9C8u), v);
  e2m1x4(m >> 16, prmt(w4, w, 0xFBEAu), v + 4);
}

__device__ __forceinline__ float e4m3_value(unsigned b) {
  // an E4M3 byte (not 0x7F / 0xFF, which the FP8 weight contract refuses): (b & 0x7F) << 20 as fp32 is
  // the value times 2^-120 (exponent field and 3 mantissa bits in place; code subnormals are fp32
  // subnormals), the sign moved to bit 31; times 2^120 is exact
  return MUL(__uint_as_float(((b & 0x7Fu) << 20) | ((b & 0x80u) << 24)), __uint_as_float(0x7B800000u));
}

template <int FMT>
struct SpreadW {
  // the raw bytes of one weight group (32 inputs) of one matrix
  static constexpr int Q = FMT == FMT_MXFP4 ? 1 : (FMT == FMT_FP8 ? 2 : 4);
  uint4 raw[Q];
  int sexp;  // E8M0 scale byte (packed formats)
};

template <int FMT>
__device__ __forceinline__ void spread_load(SpreadW<FMT>& w, const MoeLin& a, int e, int m, int n, int g, int G) {
  const unsigned char* wrow = a.w + e * a.w_estride + m * a.w_mstride + (long long)n * a.w_rstride;
  const uint4* wp = (const uint4*)(wrow + (size_t)g * (16 * SpreadW<FMT>::Q));
#pragma unroll
  for (int q = 0; q < SpreadW<FMT>::Q; q++) w.raw[q] = __ldg(wp + q);
  w.sexp = FMT == FMT_BF16 ? 0
      : (int)__ldg(a.s + e * a.s_estride + m * a.s_mstride + (long long)(FMT == FMT_MXFP4 ? n : n >> 5) * G + g);
}

template <int FMT>
__device__ __forceinline__ void spread_decode(const SpreadW<FMT>& w, float* v) {
#pragma unroll
  for (int q = 0; q < SpreadW<FMT>::Q; q++) {
    unsigned u[4] = {w.raw[q].x, w.raw[q].y, w.raw[q].z, w.raw[q].w};
#pragma unroll
    for (int j = 0; j < 4; j++) {
      if (FMT == FMT_MXFP4) {
        e2m1x8(u[j], v + 8 * j);
      } else if (FMT == FMT_FP8) {
#pragma unroll
        for (int k = 0; k < 4; k++) v[16 * q + 4 * j + k] = e4m3_value((u[j] >> (8 * k)) & 0xFFu);
      } else {
        v[8 * q + 2 * j] = __uint_as_float(u[j] << 16);
        v[8 * q + 2 * j + 1] = __uint_as_float(u[j] & 0xFFFF0000u);
      }
    }
  }
}

__device__ __forceinline__ int spread_act_row(const MoeLin& a, int sl) {
  // the activation row of slot sl: the slot itself (w2 reads h), or its token row (w1/w3 read x)
  return a.act_per_slot ? sl : (a.ids ? sl / a.topk : sl);
}

template <int FMT>
__device__ __forceinline__ float spread_step(float acc, float x, float w, bool first) {
  // one product of a group sum, left to right from the first product (see the FMA proof above)
  if (FMT == FMT_BF16) {
    float p = MUL(x, w);
    return first ? p : ADD(acc, p);
  }
  return first ? MUL(x, w) : __fmaf_rn(x, w, acc);
}

template <int FMT, int EPI, int ROWS>
__device__ __forceinline__ void moe_spread(const MoeLin& a) {
  constexpr int MATS = EPI == EPI_SWIGLU ? 2 : 1;
  extern __shared__ float4 sp_dynamic[];  // batch x (K + MATS x ROWS x K/32) fp32, sized by the launch
  float* sm = (float*)sp_dynamic;
  __shared__ int sid[MOE_MAX_SLOTS];  // this expert's slots, ascending
  __shared__ unsigned seen[MOE_ID_WORDS];
  __shared__ int picked, nmine;
  pdl_wait();
  pdl_trigger();
  const int e = routed_expert(a, seen, &picked);
  if (e < 0) return;  // fewer distinct experts than block columns
  const int slots = a.ids ? a.rows * a.topk : a.rows;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  // this expert's slots in ascending order
  if (warp == 0) {
    int cnt = 0;
    for (int base = 0; base < slots; base += 32) {
      int sl = base + lane;
      bool hit = sl < slots && (!a.ids || __ldg(a.ids + sl) == e);
      unsigned mask = __ballot_sync(0xffffffffu, hit);
      if (hit) sid[cnt + __popc(mask & ((1u << lane) - 1u))] = sl;
      cnt += __popc(mask);
    }
    if (lane == 0) nmine = cnt;
  }
  __syncthreads();
  const int K = a.K, G = K >> 5, tasks = ROWS * G, words = K >> 2, nm = nmine, row0 = blockIdx.y * ROWS;
  // slots per pass: the decoded rows [batch][K] and the group sums [batch][MATS][ROWS][G] in the dynamic
  // shared memory the launch gives (moe.py spread_shared_bytes: the same formula; at least one slot)
  const int batch = min(SP_MAX_BATCH, SP_SMEM_FLOATS / (K + MATS * tasks));
  float* act = sm;
  float* part = sm + batch * K;
  for (int s0 = 0; s0 < nm; s0 += batch) {
    const int nb = min(batch, nm - s0);
    // the first DEPTH tasks' weights are on their way while the activation rows are decoded (MXFP4: two
    // tasks ahead; the wider FP8 and bf16 groups one, which keeps them in registers)
    constexpr int DEPTH = FMT == FMT_MXFP4 ? 2 : 1;
    SpreadW<FMT> wq[DEPTH][MATS];
#pragma unroll
    for (int d = 0; d < DEPTH; d++) {
      int t = threadIdx.x + d * blockDim.x;
      if (t < tasks) {
        int r = t / G, g = t - r * G;
#pragma unroll
        for (int m = 0; m < MATS; m++) spread_load<FMT>(wq[d][m], a, e, m, row0 + r, g, G);
      }
    }
    for (int i = threadIdx.x; i < nb * words; i += blockDim.x) {
      int b = i / words, wd = i - b * words, g = wd >> 3;
      int row = spread_act_row(a, sid[s0 + b]);
      unsigned c4 = __ldg((const unsigned*)(a.xc + (size_t)row * K) + wd);
      float4 v = make_float4(__ldg(a.tables + (c4 & 0xFFu)), __ldg(a.tables + ((c4 >> 8) & 0xFFu)),
                             __ldg(a.tables + ((c4 >> 16) & 0xFFu)), __ldg(a.tables + (c4 >> 24)));
      if (FMT == FMT_BF16) {  // the bf16 activation q * s_a, as moe.cu's group_sum forms it
        float sa = __uint_as_float((unsigned)__ldg(a.xs + (size_t)row * G + g) << 23);
        v.x = MUL(v.x, sa), v.y = MUL(v.y, sa), v.z = MUL(v.z, sa), v.w = MUL(v.w, sa);
      }
      *(float4*)(act + b * K + g * 32 + (((wd & 7) ^ (g & 7)) << 2)) = v;
    }
    __syncthreads();
    for (int t = threadIdx.x; t < tasks; t += blockDim.x) {
      const int r = t / G, g = t - r * G;
      float wv[MATS][32];
      int sexp[MATS];
#pragma unroll
      for (int m = 0; m < MATS; m++) {
        spread_decode<FMT>(wq[0][m], wv[m]);
        sexp[m] = wq[0][m].sexp;
#pragma unroll
        for (int d = 1; d < DEPTH; d++) wq[d - 1][m] = wq[d][m];
      }
      if (t + DEPTH * (int)blockDim.x < tasks) {  // the task DEPTH rounds ahead
        int t2 = t + DEPTH * blockDim.x, r2 = t2 / G, g2 = t2 - r2 * G;
#pragma unroll
        for (int m = 0; m < MATS; m++) spread_load<FMT>(wq[DEPTH - 1][m], a, e, m, row0 + r2, g2, G);
      }
#pragma unroll
      for (int b = 0; b < SP_MAX_BATCH; b++) {
        if (b >= nb) break;
        const float* ag = act + b * K + g * 32;
        float gs[MATS];
#pragma unroll
        for (int c = 0; c < 8; c++) {
          float4 x = *(const float4*)(ag + ((c ^ (g & 7)) << 2));
#pragma unroll
          for (int m = 0; m < MATS; m++) {
            gs[m] = spread_step<FMT>(gs[m], x.x, wv[m][4 * c], c == 0);
            gs[m] = spread_step<FMT>(gs[m], x.y, wv[m][4 * c + 1], false);
            gs[m] = spread_step<FMT>(gs[m], x.z, wv[m][4 * c + 2], false);
            gs[m] = spread_step<FMT>(gs[m], x.w, wv[m][4 * c + 3], false);
          }
        }
        int sab = FMT == FMT_BF16 ? 0 : (int)__ldg(a.xs + (size_t)spread_act_row(a, sid[s0 + b]) * G + g);
#pragma unroll
        for (int m = 0; m < MATS; m++) {
          // packed: fl(s_a * s_w) = 2^(e_a + e_w), a normal number inside the linear's exact domain
          float p = FMT == FMT_BF16 ? gs[m] : MUL(gs[m], __uint_as_float((unsigned)(sab + sexp[m] - 127) << 23));
          part[((b * MATS + m) * ROWS + r) * G + g] = p;
        }
      }
    }
    __syncthreads();
    // the contract's lane sums (lane l: groups l, l+32, ... from +0.0) and tree, one warp per (slot, row)
    for (int q = warp; q < nb * ROWS; q += warps) {
      const int b = q / ROWS, r = q - b * ROWS, n = row0 + r, sl = sid[s0 + b];
      float y[MATS];
#pragma unroll
      for (int m = 0; m < MATS; m++) {
        const float* pr = part + ((b * MATS + m) * ROWS + r) * G;
        float acc = 0.0f;
        for (int g = lane; g < G; g += 32) acc = ADD(acc, pr[g]);
        y[m] = warp_tree(acc);
      }
      if (lane == 0) {
        if (EPI == EPI_SWIGLU) ((bf16_t*)a.out)[(size_t)sl * a.N + n] = f2bf(swiglu_h(y[0], y[MATS - 1], a.rw, sl));
        else ((float*)a.out)[(size_t)sl * a.N + n] = y[0];
      }
    }
    __syncthreads();  // the next pass overwrites act and part
  }
}

// Output rows per block: up 16 (K = 5120: 2560 tasks, ten rounds of 256 threads), down 32 (K = 1152: 36
// groups a row). A block's fixed cost (expert pick, slot list, activation decode, three barriers) is
// paid once for that many rows; 8 rows left a down block 4.6 KB of weights.
// Minimum blocks per SM: up 2 (128 registers), down 3; ptxas spills at most a few bytes
// (tests/test_cuda_moe_build.py prints the report).
#define SP_UP_ROWS 16
#define SP_DOWN_ROWS 32
#define MOE_SPREAD(name, FMT, EPI, ROWS, MIN_BLOCKS)                                                \
  extern "C" __global__ void __launch_bounds__(256, MIN_BLOCKS) name(const MoeLin a) { moe_spread<FMT, EPI, ROWS>(a); }
MOE_SPREAD(moe_up_spread_mxfp4, FMT_MXFP4, EPI_SWIGLU, SP_UP_ROWS, 2)
MOE_SPREAD(moe_up_spread_fp8, FMT_FP8, EPI_SWIGLU, SP_UP_ROWS, 2)
MOE_SPREAD(moe_up_spread_bf16, FMT_BF16, EPI_SWIGLU, SP_UP_ROWS, 2)
MOE_SPREAD(moe_down_spread_mxfp4, FMT_MXFP4, EPI_F32, SP_DOWN_ROWS, 3)
MOE_SPREAD(moe_down_spread_fp8, FMT_FP8, EPI_F32, SP_DOWN_ROWS, 3)
MOE_SPREAD(moe_down_spread_bf16, FMT_BF16, EPI_F32, SP_DOWN_ROWS, 3)
