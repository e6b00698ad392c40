// decoder-shell CUDA kernels: every command, bit-identical to the numpy contracts
// (decoder_shell/contracts, docs/CONTRACTS.md). Compiled by NVRTC with -fmad=false,
// --prec-div=true, --prec-sqrt=true, --ftz=false; on top of that every fp32 operation goes through
// ADD/MUL/DIV/SQRT (round-to-nearest intrinsics that are never contracted into an FMA).
// ABL_* macros are timing ablations (each removes one stage; never exact), for tools/ablate_cuda.py.
// The FMA_VARIANT macro builds a deliberately inexact variant (plain operators, -fmad=true) that the
// gate uses to show an inexact candidate failing.

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

// ---- ring all-reduce contract (contracts/allreduce.py) -------------------------------------------
struct Ring {
  int n, ranks, cpr, per, offset, dir, hop, segments, is_bf16;
};

__device__ __forceinline__ int pmod(int a, int m) { int r = a % m; return r < 0 ? r + m : r; }
__device__ __forceinline__ int cdiv(int a, int b) { return (a + b - 1) / b; }

// owner rank of element e (the rank that ends a ring step holding its chunk fully reduced).
// One segment (the common contract) skips the segment's division: its bounds are the whole range.
__device__ __forceinline__ int ring_owner(const Ring& c, int e) {
  int lo = 0, m = c.n;
  if (c.segments > 1) {
    const int seg = cdiv(c.n, c.segments), s = e / seg;
    lo = s * seg;
    m = min(seg, c.n - lo);
  }
  int chunks = c.cpr * c.ranks;
  if (c.per) chunks = max(chunks, cdiv(m, c.per));
  chunks = cdiv(chunks, c.ranks) * c.ranks;
  int size = cdiv(m, chunks);
  return ((e - lo) / size) / (chunks / c.ranks);
}

__device__ __forceinline__ float ld(const void* p, size_t e, int is_bf16) {
  return is_bf16 ? bf2f(((const bf16_t*)p)[e]) : ((const float*)p)[e];
}

// Every rank's value is loaded first (static indices: the pointer table stays in registers, and
// the R independent loads are in flight together), then folded in the contract's order, picking
// each step's rank with a select chain rather than a dynamic (local-memory) index. The loads and the
// fold are separate functions so that a caller can issue the loads early and fold later.
__device__ __forceinline__ void ring_load(const void* const* in, const Ring& c, int e, float (&v)[MAXR]) {
#pragma unroll
  for (int q = 0; q < MAXR; q++) v[q] = q < c.ranks ? ld(in[q], e, c.is_bf16) : 0.0f;
}
// One step of the fold: add the next rank's value; hop accumulation rounds to the data dtype each step.
__device__ __forceinline__ float fold_step(float acc, float x, const Ring& c) {
  acc = ADD(acc, x);
  return c.hop && c.is_bf16 ? round_bf(acc) : acc;
}
// The fold on the R values already in the contract's order (v[t]: the rank added at step t); N is
// the array's size (MAXR, or the ranks where a kernel is built for its cycle's count).
template <int N>
__device__ __forceinline__ float ring_fold_ordered(const float (&v)[N], const Ring& c) {
  float acc = v[0];
#pragma unroll
  for (int t = 1; t < N; t++)
    if (t < c.ranks) acc = fold_step(acc, v[t], c);
  return c.is_bf16 ? round_bf(acc) : acc;
}
__device__ __forceinline__ float ring_fold_loaded(const float (&v)[MAXR], const Ring& c, int e) {
  // step t folds rank (start + t * dir) mod R: dir is +1 or -1, so r walks by one and wraps
  int r = pmod(ring_owner(c, e) + c.offset, c.ranks);
  float acc = 0.0f;
#pragma unroll
  for (int t = 0; t < MAXR; t++) {
    if (t < c.ranks) {
      if (t > 0) {
        r += c.dir;
        r = r == c.ranks ? 0 : r < 0 ? c.ranks - 1 : r;
      }
      float x = v[0];
#pragma unroll
      for (int q = 1; q < MAXR; q++) x = q == r ? v[q] : x;
      acc = t == 0 ? x : fold_step(acc, x, c);
    }
  }
  return c.is_bf16 ? round_bf(acc) : acc;
}
__device__ __forceinline__ float ring_fold(const void* const* in, const Ring& c, int e) {
  float v[MAXR];
  ring_load(in, c, e, v);
  return ring_fold_loaded(v, c, e);
}

__device__ __forceinline__ void st(void* p, size_t e, float v, int is_bf16) {
  if (is_bf16) ((bf16_t*)p)[e] = f2bf(v); else ((float*)p)[e] = v;
}

struct ArArgs {
  const void* in[MAXR];   // every rank's input (partial sums), rank order
  void* out[MAXR];        // every rank's output (peers' outputs for the gather step)
  Ring ring;
  int rank;               // whose output this launch writes
  int lo, hi;             // element range of this launch (a segment, or everything)
  int mode;               // 0: fold everything; 1: fold owned chunks only; 2: gather peers' chunks
  u64* flag_out[MAXR];    // one process per rank: this rank's arrival slot in every rank's memory
  const u64* flag_in;     // ... and the ranks' arrival slots in this rank's memory (null: emulated ranks)
  const u64* epoch;       // this rank's epoch counter: the tag its arrivals carry
};

// Arrival at a collective, one process per rank: block 0 writes the epoch into its slot in every
// rank's memory (pushed, so that waiting polls local memory), then every block waits until each
// rank's slot holds at least this epoch. Slots are 64-bit and only grow: one per (collective, rank),
// tagged with the epoch, so no arrival from another epoch or collective can be mistaken for this one.
__device__ __forceinline__ void arrive_and_wait(const ArArgs& a) {
  if (threadIdx.x == 0) {
    const u64 e = *a.epoch;
    if (blockIdx.x == 0) {
      __threadfence_system();
      for (int q = 0; q < a.ring.ranks; q++) st_release_sys(a.flag_out[q], e);
    }
    for (int q = 0; q < a.ring.ranks; q++)
      while (ld_acquire_sys(a.flag_in + q) < e) {}
  }
  __syncthreads();
}

// One-shot all-reduce: this rank reads every peer's input in the contract's fixed order.
// mode 1/2 split it into a reduce-scatter and an all-gather step (the ring's structure).
extern "C" __global__ void __launch_bounds__(256) allreduce_kernel(const ArArgs a) {
  pdl_wait();
  if (a.flag_in) arrive_and_wait(a);
  pdl_trigger();
  for (int e = a.lo + blockIdx.x * blockDim.x + threadIdx.x; e < a.hi; e += gridDim.x * blockDim.x) {
    if (a.mode == 0) {
      st(a.out[a.rank], e, ring_fold(a.in, a.ring, e), a.ring.is_bf16);
    } else {
      int owner = ring_owner(a.ring, e);
      if (a.mode == 1 && owner == a.rank) {
        st(a.out[a.rank], e, ring_fold(a.in, a.ring, e), a.ring.is_bf16);
      } else if (a.mode == 2 && owner != a.rank) {
        if (a.ring.is_bf16) ((bf16_t*)a.out[a.rank])[e] = ((const bf16_t*)a.out[owner])[e];
        else ((float*)a.out[a.rank])[e] = ((const float*)a.out[owner])[e];
      }
    }
  }
}

// Head of a rank's cycle when ranks are processes: the epoch its arrivals are tagged with.
extern "C" __global__ void epoch_kernel(u64* epoch) { *epoch += 1; }

extern "C" __global__ void empty_kernel() {}

// The `copy` deletion bound: a command replaced by copies of its expected outputs (up to 4 tensors).
struct CopyArgs {
  unsigned char* dst[4];
  const unsigned char* src[4];
  unsigned long long nbytes[4];
  int count;
};
extern "C" __global__ void copy_kernel(const CopyArgs a) {
  for (int c = 0; c < a.count; c++)
    for (unsigned long long i = blockIdx.x * blockDim.x + threadIdx.x; i < a.nbytes[c]; i += gridDim.x * blockDim.x)
      a.dst[c][i] = a.src[c][i];
}

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

// Softmax over k, + eps, then the Sinkhorn normalizations (col, then (row, col) x (iters - 1)), for
// the comb entry (j, k) this lane owns; the 16 lanes rowbase .. rowbase+15 of the warp hold one row's
// 4x4 comb, and row/column sums gather their 4 values with shuffles and add them left to right
// (SINKHORN_FORM 0), or every lane gathers the whole comb after the softmax and runs sinkhorn_regs.
// Every lane of the warp must call it.
__device__ __forceinline__ float sinkhorn_shuffled(float c, int j, int k, unsigned rowbase, float eps, int iters) {
  float c0 = __shfl_sync(0xffffffffu, c, rowbase + j * 4 + 0), c1 = __shfl_sync(0xffffffffu, c, rowbase + j * 4 + 1);
  float c2 = __shfl_sync(0xffffffffu, c, rowbase + j * 4 + 2), c3 = __shfl_sync(0xffffffffu, c, rowbase + j * 4 + 3);
  const float mx = fmaxf(fmaxf(c0, c1), fmaxf(c2, c3));
  c = pexp(SUB(c, mx));
  c0 = __shfl_sync(0xffffffffu, c, rowbase + j * 4 + 0); c1 = __shfl_sync(0xffffffffu, c, rowbase + j * 4 + 1);
  c2 = __shfl_sync(0xffffffffu, c, rowbase + j * 4 + 2); c3 = __shfl_sync(0xffffffffu, c, rowbase + j * 4 + 3);
  c = ADD(DIV(c, ADD(ADD(ADD(c0, c1), c2), c3)), eps);
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
  float c0 = __shfl_sync(0xffffffffu, c, rowbase + j * 4 + 0), c1 = __shfl_sync(0xffffffffu, c, rowbase + j * 4 + 1);
  float c2 = __shfl_sync(0xffffffffu, c, rowbase + j * 4 + 2), c3 = __shfl_sync(0xffffffffu, c, rowbase + j * 4 + 3);
  const float mx = fmaxf(fmaxf(c0, c1), fmaxf(c2, c3));
  c = pexp(SUB(c, mx));
  c0 = __shfl_sync(0xffffffffu, c, rowbase + j * 4 + 0); c1 = __shfl_sync(0xffffffffu, c, rowbase + j * 4 + 1);
  c2 = __shfl_sync(0xffffffffu, c, rowbase + j * 4 + 2); c3 = __shfl_sync(0xffffffffu, c, rowbase + j * 4 + 3);
  float s = ADD(ADD(ADD(c0, c1), c2), c3);
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

// Instantiations are generated by the driver: extern "C" wrappers named
//   mhc_<op>_r<RPB>[_fused]  with op in {pre, post_pre, post_head}; OPG outputs per block group.
