// The Sinkhorn normalizations of the comb after its softmax, in every form the build can take (SINKHORN_FORM): the
// comb in one thread's registers, or one entry a lane with shuffles, with or without the division's branch; all
// bit-identical to the contract. Appended to kernels.cu (its quotients by a shared denominator).

// The Sinkhorn normalizations after the softmax (col, then (row, col) x (iters - 1)) with the whole
// 4x4 comb in this thread's registers (SINKHORN_FORM 1 and 2): a row or column sum is 4 adds left to
// right with no shuffle, and the 16 quotients of a half-iteration are independent (they pipeline).
// Form 2 divides by each sum through one shared reciprocal (div_by), form 1 with __fdiv_rn per element.
// Same operations in the same order as the lane form: the bits cannot differ.
template <bool COLS, bool SHARED>
__device__ __forceinline__ void sinkhorn_half(float (&c)[HC * HC], float eps) {
  constexpr int ST = COLS ? HC : 1;
  float s[HC];
#pragma unroll
  for (int i = 0; i < HC; i++) {
    const int b0 = COLS ? i : i * HC;
    s[i] = ADD(ADD(ADD(ADD(c[b0], c[b0 + ST]), c[b0 + 2 * ST]), c[b0 + 3 * ST]), eps);
  }
  if (SHARED) {
    Recip d[HC];
#pragma unroll
    for (int i = 0; i < HC; i++) d[i] = recip(s[i]);
#pragma unroll
    for (int e = 0; e < HC * HC; e++) c[e] = div_by(c[e], d[COLS ? e % HC : e / HC]);
  } else {
#pragma unroll
    for (int e = 0; e < HC * HC; e++) c[e] = DIV(c[e], s[COLS ? e % HC : e / HC]);
  }
}
template <bool SHARED>
__device__ __forceinline__ void sinkhorn_regs(float (&c)[HC * HC], float eps, int iters) {
  if (iters <= 0) return;
  sinkhorn_half<true, SHARED>(c, eps);
  for (int it = 1; it < iters; it++) {
    sinkhorn_half<false, SHARED>(c, eps);
    sinkhorn_half<true, SHARED>(c, eps);
  }
}

#ifndef SINKHORN_FORM
#define SINKHORN_FORM 3  // 0: one entry per lane, sums by shuffles; 1, 2: the comb in registers (above); 3: 0 without the division's branch (below)
#endif

// The softmax's front for the comb entry (j, k) this lane owns: exp(c - its row's max) (the return) and the row's
// sum of those (s), four shuffles each, added left to right.
__device__ __forceinline__ float softmax_lane(float c, int j, unsigned rowbase, float& s) {
  float c0 = __shfl_sync(0xffffffffu, c, rowbase + j * 4 + 0), c1 = __shfl_sync(0xffffffffu, c, rowbase + j * 4 + 1);
  float c2 = __shfl_sync(0xffffffffu, c, rowbase + j * 4 + 2), c3 = __shfl_sync(0xffffffffu, c, rowbase + j * 4 + 3);
  const float mx = fmaxf(fmaxf(c0, c1), fmaxf(c2, c3));
  c = pexp(SUB(c, mx));
  c0 = __shfl_sync(0xffffffffu, c, rowbase + j * 4 + 0); c1 = __shfl_sync(0xffffffffu, c, rowbase + j * 4 + 1);
  c2 = __shfl_sync(0xffffffffu, c, rowbase + j * 4 + 2); c3 = __shfl_sync(0xffffffffu, c, rowbase + j * 4 + 3);
  s = ADD(ADD(ADD(c0, c1), c2), c3);
  return c;
}

// Softmax over k, + eps, then the Sinkhorn normalizations (col, then (row, col) x (iters - 1)), for
// the comb entry (j, k) this lane owns; the 16 lanes rowbase .. rowbase+15 of the warp hold one row's
// 4x4 comb, and row/column sums gather their 4 values with shuffles and add them left to right
// (SINKHORN_FORM 0), or every lane gathers the whole comb after the softmax and runs sinkhorn_regs.
// Every lane of the warp must call it.
__device__ __forceinline__ float sinkhorn_shuffled(float c, int j, int k, unsigned rowbase, float eps, int iters) {
  float s;
  c = softmax_lane(c, j, rowbase, s);
  c = ADD(DIV(c, s), eps);
#ifdef ABL_NO_SINKHORN
  iters = 0;
#endif
#if SINKHORN_FORM == 1 || SINKHORN_FORM == 2
  float m[HC * HC];
#pragma unroll
  for (int e = 0; e < HC * HC; e++) m[e] = __shfl_sync(0xffffffffu, c, rowbase + e);
  sinkhorn_regs<SINKHORN_FORM == 2>(m, eps, iters);
  // the lane's own entry by a select chain over values the compiler cannot see as the array's (it would
  // otherwise fold the chain back into a dynamic index, and the comb into local memory)
  c = m[0];
#pragma unroll
  for (int e = 1; e < HC * HC; e++) {
    float v;
    asm("mov.b32 %0, %1;" : "=f"(v) : "f"(m[e]));
    c = e == j * HC + k ? v : c;
  }
#else
  for (int it = 0; it < 2 * iters - 1; it++) {
    const bool cols = (it & 1) == 0;
    const unsigned b0 = cols ? rowbase + k : rowbase + j * 4, st = cols ? 4 : 1;
    const float s0 = __shfl_sync(0xffffffffu, c, b0), s1 = __shfl_sync(0xffffffffu, c, b0 + st);
    const float s2 = __shfl_sync(0xffffffffu, c, b0 + 2 * st), s3 = __shfl_sync(0xffffffffu, c, b0 + 3 * st);
    c = DIV(c, ADD(ADD(ADD(ADD(s0, s1), s2), s3), eps));
  }
#endif
  return c;
}


// ---- the lane form without the division's branch (SINKHORN_FORM 3, the default) -------------------
// The lane form's half-iteration is a shuffle round (4 shuffles + 4 adds, 58 cycles on the H200) and a
// __fdiv_rn (75 cycles: MUFU.RCP and five dependent FMAs, then the FCHK's predicate and the branch to
// its slow path, which the next half waits for), 39 times in a row. Here each quotient is __fdiv_rn's
// fast path alone (rcp_newton, then div_fast: the instructions of recip and div_by, so its bits where
// 2^-60 <= |a|, |b| < 2^60), with no check on the chain: every numerator and denominator goes into
// one unsigned maximum beside it (div_range: out of range are zeros, subnormals, negatives, infinities,
// NaN and extreme values), and where any lane of the warp saw one, the whole comb is made again by the
// lane form (__fdiv_rn, slow path included) from the logit. Same additions in the same order, the
// contract's correctly rounded quotients: the bits cannot differ. In one warp 4,011 cycles against
// 4,952 (tools/sinkhorn_bench.py); 3,905 with div_short (below) as each half's quotient. A comb row a
// lane (4 adds in registers for a row, the whole comb gathered by 16 shuffles for a column: one shuffle
// round a pair of halves) was tried: exact, and 6,198 cycles, the 16 shuffles and 4 reciprocals a
// column half bound by their issue. So was each half's row or column read from shared memory as one 16-byte load
// (every lane storing its quotient where the next half reads it, __syncwarp between): exact, and 4,360 cycles
// against 3,906 on the H100, the store-to-load round trip longer than the shuffles (e556acf, docs/CUDA.md).
__device__ __forceinline__ unsigned div_range(float v) { return __float_as_uint(v) - 0x21800000u; }  // < 0x3c000000u: in range
__device__ __forceinline__ float rcp_approx(float b) {
  float y0;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y0) : "f"(b));
  return y0;
}
__device__ __forceinline__ float rcp_newton(float b) {
  const float y0 = rcp_approx(b);
  return __fmaf_rn(y0, __fmaf_rn(-b, y0, 1.0f), y0);
}
__device__ __forceinline__ float div_fast(float a, float b, float y) {
  const float q0 = __fmul_rn(a, y);
  return __fmaf_rn(y, __fmaf_rn(-b, q0, a), q0);
}
// The same quotient one dependent FMA shorter (SINKHORN_DIV_SHORT): the first estimate a * y0 and the
// error term e = 1 - b * y0 are issued side by side after the MUFU, q0 = a*y0 + (a*y0)*e refines the
// estimate while y1 = y0 + y0*e refines the reciprocal, and q = q0 + (a - b*q0) * y1 as in div_fast:
// MUFU + 4 FMAs on the chain where rcp_newton + div_fast take MUFU + 5. Its bits are __fdiv_rn's
// wherever div_range admits both operands; the proof is the device's, tools/div_check.py: every pair of
// fp32 mantissas (2^46) against __fdiv_rn, and the estimate's scaling over every exponent of the range,
// so every pair of the range (H200: 0 of 70,368,744,177,664 pairs differ, docs/BENCHMARKS.md).
__device__ __forceinline__ float div_short(float a, float b, float y0) {
  const float e = __fmaf_rn(-b, y0, 1.0f), q1 = __fmul_rn(a, y0);
  const float y1 = __fmaf_rn(y0, e, y0), q0 = __fmaf_rn(q1, e, q1);
  return __fmaf_rn(y1, __fmaf_rn(-b, q0, a), q0);
}
#ifndef SINKHORN_DIV_SHORT
#define SINKHORN_DIV_SHORT 1  // 0: rcp_newton + div_fast (4,004 against 3,905 cycles a Sinkhorn in one warp, H200)
#endif
// The lanes-fast form's quotient a / b (a, b admitted by div_range).
__device__ __forceinline__ float div_lane(float a, float b) {
#if SINKHORN_DIV_SHORT
  return div_short(a, b, rcp_approx(b));
#else
  return div_fast(a, b, rcp_newton(b));
#endif
}
// The loop's unrolling (4: 4,011 cycles in one warp; 1: 4,399). A build that would spill with it
// unrolled (the cluster cycle at 8 rows a cluster and more than 4 ranks) sets 1.
#ifndef SINKHORN_UNROLL
#define SINKHORN_UNROLL 4
#endif
#define SK_PRAGMA(x) _Pragma(#x)
#define SK_UNROLL(n) SK_PRAGMA(unroll n)
// one half-iteration of the lanes-fast form: the sum of lanes b0, b0 + st, b0 + 2 st, b0 + 3 st (the
// lane's column or row), + eps, and the quotient by it; the operands' range into `worst`
__device__ __forceinline__ float fast_half(float c, unsigned b0, unsigned st, float eps, unsigned& worst) {
  const float s0 = __shfl_sync(0xffffffffu, c, b0), s1 = __shfl_sync(0xffffffffu, c, b0 + st);
  const float s2 = __shfl_sync(0xffffffffu, c, b0 + 2 * st), s3 = __shfl_sync(0xffffffffu, c, b0 + 3 * st);
  const float s = ADD(ADD(ADD(ADD(s0, s1), s2), s3), eps);
  worst = max(worst, max(div_range(s), div_range(c)));
  return div_lane(c, s);
}
__device__ __forceinline__ float sinkhorn_fast(float c, int j, int k, unsigned rowbase, float eps, int iters) {
  const float logit = c;
  float s;
  c = softmax_lane(c, j, rowbase, s);
  unsigned worst = max(div_range(s), div_range(c));
  c = ADD(div_lane(c, s), eps);
#ifdef ABL_NO_SINKHORN
  iters = 0;
#endif
  // the halves' first source lanes and strides, swapped every half (renamed away where the loop unrolls)
  unsigned b0 = rowbase + k, st0 = 4, b1 = rowbase + j * 4, st1 = 1;
  SK_UNROLL(SINKHORN_UNROLL)
  for (int it = 0; it < 2 * iters - 1; it++) {
    c = fast_half(c, b0, st0, eps, worst);
    const unsigned tb = b0, ts = st0;
    b0 = b1, st0 = st1, b1 = tb, st1 = ts;
  }
  if (__any_sync(0xffffffffu, worst >= 0x3c000000u)) c = sinkhorn_shuffled(logit, j, k, rowbase, eps, iters);
  return c;
}

__device__ __forceinline__ float sinkhorn_lane(float c, int j, int k, unsigned rowbase, float eps, int iters) {
#if SINKHORN_FORM == 3
  return sinkhorn_fast(c, j, k, rowbase, eps, iters);
#else
  return sinkhorn_shuffled(c, j, k, rowbase, eps, iters);
#endif
}
