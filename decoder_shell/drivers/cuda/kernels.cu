// decoder-shell CUDA kernels: every command, bit-identical to the numpy contracts
// (decoder_shell/contracts, docs/CONTRACTS.md). Compiled by NVRTC with -fmad=false,
// --prec-div=true, --prec-sqrt=true, --ftz=false; on top of that every fp32 operation goes through
// ADD/MUL/DIV/SQRT (round-to-nearest intrinsics that are never contracted into an FMA).
// ABL_* macros are timing ablations (each removes one stage; never exact), for tools/ablate_cuda.py.
// The FMA_VARIANT macro builds a deliberately inexact variant (plain operators, -fmad=true) that the
// gate uses to show an inexact candidate failing.
// This file is the prelude every kernel builds on (the macros above, bf16, ordering, pexp, the quotients by a shared
// denominator); the kernels follow in kernels.py's SOURCES order (allreduce.cu, sinkhorn.cu, mhc.cu, mhc_cluster.cu,
// rmsnorm.cu), then persistent.cu and the cluster cycle's files where those are built.

#ifdef FMA_VARIANT
#define ADD(a, b) ((a) + (b))
#define MUL(a, b) ((a) * (b))
#else
#define ADD(a, b) __fadd_rn((a), (b))
#define MUL(a, b) __fmul_rn((a), (b))
#endif
#define SUB(a, b) __fsub_rn((a), (b))
#define DIV(a, b) __fdiv_rn((a), (b))
#define SQRT(a) __fsqrt_rn(a)

#define LANES 1024
#define BLOCK 128
#define HC 4
#define MAXR 8
#define SCALAR_ROWS 8  // rows handled at once by the scalar (split / Sinkhorn) stage: 16 threads a row

typedef unsigned short bf16_t;
typedef unsigned long long u64;

// ---- bf16 (round to nearest even; NaN -> quiet NaN with its sign, as ml_dtypes) -------------------
// A NaN's bf16: the quiet NaN with its sign (ml_dtypes'), whatever its payload.
__device__ __forceinline__ bf16_t bf16_nan(float f) { return (bf16_t)(((__float_as_uint(f) >> 16) & 0x8000u) | 0x7fc0u); }
// The integer form: add half an ulp (and the kept lsb: ties to even), drop the low half; NaN apart.
__device__ __forceinline__ bf16_t f2bf_int(float f) {
  unsigned u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16_nan(f);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (bf16_t)(u >> 16);
}
#ifndef F2BF_CVT
#define F2BF_CVT 1  // 0: f2bf is f2bf_int
#endif
// The same bits from the hardware's conversion (cvt.rn.bf16.f32: round to nearest even, subnormals kept,
// one instruction), whose NaN is canonical (0x7fff): a NaN takes the integer form's by a select. 4
// instructions a value where f2bf_int takes 7 (the stream values convert 4 an element); every one of
// the 2^32 inputs checked against f2bf_int on the GPU (tools/bf16_check.py).
__device__ __forceinline__ bf16_t f2bf(float f) {
#if F2BF_CVT
  unsigned short h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
  return f != f ? bf16_nan(f) : (bf16_t)h;
#else
  return f2bf_int(f);
#endif
}
// Two values' bf16 in one word (lo in the low half) from one paired conversion (cvt.rn.bf16x2.f32: f2bf's rounding),
// NaN left canonical: callers that may see one test for it (one test for several pairs) and take f2bf2 instead.
// The word's halves are a store and a fp32 value each by one shift or mask: ~4 instructions a pair where two
// f2bf and their fp32 values take ~15 (the stream values, 4 an element).
__device__ __forceinline__ unsigned f2bf2_nonan(float lo, float hi) {
  unsigned w;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(w) : "f"(hi), "f"(lo));
  return w;
}
// f2bf of both, packed (every 2^32 input of either half checked against f2bf on the GPU: tools/bf16_check.py).
__device__ __forceinline__ unsigned f2bf2(float lo, float hi) {
  return lo != lo || hi != hi ? (unsigned)f2bf(lo) | ((unsigned)f2bf(hi) << 16) : f2bf2_nonan(lo, hi);
}
__device__ __forceinline__ float bf2f(bf16_t b) { return __uint_as_float(((unsigned)b) << 16); }
__device__ __forceinline__ float round_bf(float f) { return bf2f(f2bf(f)); }

// ---- ordering ------------------------------------------------------------------------------------
// Programmatic dependent launch (sm_90+): a kernel may start while its predecessor finishes;
// pdl_wait() returns once the predecessors completed and their writes are visible (a no-op on
// ordinary graph edges), pdl_trigger() lets the successor start its own prologue.
__device__ __forceinline__ void pdl_wait() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_trigger() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ u64 ld_acquire(const u64* p) {
  u64 v;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ u64 ld_acquire_sys(const u64* p) {
  u64 v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_release_sys(u64* p, u64 v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" :: "l"(p), "l"(v) : "memory");
}

// Thread-block clusters (sm_90+): rank in the cluster, cluster-wide barrier, distributed shared memory.
__device__ __forceinline__ unsigned cluster_ctarank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }
__device__ __forceinline__ float ld_dsmem(const float* p, unsigned rank) {
  unsigned sa = (unsigned)__cvta_generic_to_shared(p), ra;
  float v;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(ra) : "r"(sa), "r"(rank));
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(ra) : "memory");
  return v;
}

// ---- portable exp (numerics.pexp) ----------------------------------------------------------------
__device__ __forceinline__ float pexp(float x) {
  x = fmaxf(fminf(x, 88.0f), -87.0f);
  const float magic = 12582912.0f;
  float n = SUB(ADD(MUL(x, 1.44269502162933349609375f), magic), magic);
  float r = SUB(SUB(x, MUL(n, 0.693359375f)), MUL(n, -2.12194440e-4f));
  float p = 1.0f / 5040.0f;
  p = ADD(MUL(p, r), 1.0f / 720.0f);
  p = ADD(MUL(p, r), 1.0f / 120.0f);
  p = ADD(MUL(p, r), 1.0f / 24.0f);
  p = ADD(MUL(p, r), 1.0f / 6.0f);
  p = ADD(MUL(p, r), 0.5f);
  p = ADD(MUL(p, r), 1.0f);
  p = ADD(MUL(p, r), 1.0f);
  return MUL(p, __int_as_float(((int)n + 127) << 23));
}
__device__ __forceinline__ float psigmoid(float z) { return DIV(1.0f, ADD(1.0f, pexp(-z))); }

// ---- quotients by a shared denominator --------------------------------------------------------
// __fdiv_rn's fast path on sm_90 is y0 = MUFU.RCP(b), y = y0 + y0*(1 - b*y0), q0 = a*y,
// q = q0 + y*(a - b*q0) (five FMAs) behind an FCHK (an operand range check) that sends the others to
// a slow path. The part that depends on b alone (the reciprocal and its Newton step) is the same for
// every quotient by b, so Recip makes it once and div_by runs the three per-quotient operations: the
// same instructions on the same values as __fdiv_rn, hence its bits (the contract's one correctly
// rounded division per element). Operands outside 2^-60 <= |a|, |b| < 2^60 (zeros, subnormals,
// infinities, NaN, extreme ratios) take __fdiv_rn itself, slow path included.
// tests/test_sinkhorn_forms.py checks the SASS (the fast path is __fdiv_rn's instruction for
// instruction) and the sequence's rounding with an exact FMA; tools/sinkhorn_bench.py compares both
// with numpy's division on the device over every binade.
__device__ __forceinline__ bool div_safe(float v) {
  return (__float_as_uint(v) & 0x7fffffffu) - 0x21800000u < 0x3c000000u;  // 2^-60 <= |v| < 2^60
}
struct Recip {
  float b, y;
  bool safe;
};
__device__ __forceinline__ Recip recip(float b) {
  float y0;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y0) : "f"(b));
  return {b, __fmaf_rn(y0, __fmaf_rn(-b, y0, 1.0f), y0), div_safe(b)};
}
__device__ __forceinline__ float div_by(float a, const Recip& d) {
  if (!(d.safe && div_safe(a))) return DIV(a, d.b);
  const float q0 = __fmul_rn(a, d.y);
  return __fmaf_rn(d.y, __fmaf_rn(-d.b, q0, a), q0);
}
// 1 / d with __fdiv_rn's bits: its fast path decided by the integer range test beside the reciprocal instead of
// the FCHK behind it (1 is in range), __fdiv_rn elsewhere; and psigmoid's bits with it.
__device__ __forceinline__ float recip_rn(float d) { return div_by(1.0f, recip(d)); }
__device__ __forceinline__ float psigmoid_rn(float z) { return recip_rn(ADD(1.0f, pexp(-z))); }
