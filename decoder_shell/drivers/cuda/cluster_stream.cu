// The cluster cycle's C: the stream values of a block's columns from x, the residual and post/comb, written to
// `streams` and kept in shared memory (fp32 of the bf16) for the dot products.

// C of one step: the stream values of the block's columns of its rows from x (xs), the residual and
// post/comb, written to `streams` and kept in sv (fp32 of the bf16) for the dot products. One loop per
// case (CASE 0: no residual; 1: the residual and post/comb carried in shared memory; 2: from global
// memory), the arguments in registers: with the cases in one loop every element issued the instructions
// of all of them (predicated), and every store through `streams` made the compiler reload the arguments
// from shared memory, which the store might have changed (~350 instructions a warp an element).
enum { SV_PRE = 0, SV_CARRIED = 1, SV_GLOBAL = 2 };
#ifndef CL_SV_PAIRS
#define CL_SV_PAIRS 4  // the fewest rows of a build whose stream values are converted two at a time (f2bf2); fewer
#endif                 // convert one at a time (f2bf, ~15 instructions a pair more). 1: every build, 9: none
                       // (twenty-first session: at 8 rows C 1.34 against 1.54 us, the cycle ~2-3% faster; at 1 and
                       // 2 rows the cycle no faster, C's gain then waiting in A; docs/BENCHMARKS.md)
static_assert(HC == 4, "the stream values' NaN test and pairs are written out for four streams");
// A row's post and comb as the step before made them (pc: post, then the comb), into registers.
__device__ __forceinline__ void post_comb_of(const float (&pc)[HC + HC * HC], float (&pin)[HC], float (&cb)[HC * HC]) {
#pragma unroll
  for (int k = 0; k < HC; k++) pin[k] = pc[k];
#pragma unroll
  for (int e = 0; e < HC * HC; e++) cb[e] = pc[HC + e];
}
// Stream k's values of N lanes (one or two a thread) in the contract's order: the residual mixed by comb's column k,
// stream by stream, then post_k x added, the lanes' operations side by side (every form of C calls it, so their
// bits cannot drift apart; this order of the operations is the one the forms were measured with).
template <int N>
__device__ __forceinline__ void stream_mix(const float (&cb)[HC * HC], const float (&res)[N][HC], const float (&pin)[HC],
                                           const float (&x)[N], int k, float (&v)[N][HC]) {
  float mx[N];
#pragma unroll
  for (int n = 0; n < N; n++) mx[n] = MUL(cb[0 * HC + k], res[n][0]);
#pragma unroll
  for (int j = 1; j < HC; j++)
#pragma unroll
    for (int n = 0; n < N; n++) mx[n] = ADD(mx[n], MUL(cb[j * HC + k], res[n][j]));
#pragma unroll
  for (int n = 0; n < N; n++) v[n][k] = ADD(MUL(pin[k], x[n]), mx[n]);
}
template <int Q, int CASE, bool PAIRS>
__device__ __forceinline__ void stream_values_of(const MhcArgs& A, int row0, int nrows, int L0,
                                                 const float (*xs)[Q][CL_LANES], float (*sv)[HC * Q][CL_LANES],
                                                 const float (*pc)[HC + HC * HC], int it, int nt) {
  bf16_t* const streams = A.streams;
  constexpr int D = Q * LANES;  // (A.D: the build's hidden size)
  const int n = nrows * Q * CL_LANES;
  const bf16_t* const residual = A.residual;
  const float* const post_in = A.post_in;
  const float* const comb_in = A.comb_in;
  for (int i = it; i < n; i += nt) {
    const Slot sl = slot_of<Q>(i, L0);
    const float x = xs[sl.mi][sl.q][sl.l];
    float v[1][HC];
    if (CASE == SV_PRE) {
#pragma unroll
      for (int k = 0; k < HC; k++) v[0][k] = x;
    } else {
      float res[1][HC], pin[HC], cb[HC * HC];
      if (CASE == SV_CARRIED) {
#pragma unroll
        for (int j = 0; j < HC; j++) res[0][j] = sv[sl.mi][j * Q + sl.q][sl.l];
        post_comb_of(pc[sl.mi], pin, cb);
      } else {
        const int m = row0 + sl.mi;
        const bf16_t* rp = residual + (size_t)m * HC * D + sl.col;
#pragma unroll
        for (int j = 0; j < HC; j++) res[0][j] = bf2f(rp[(size_t)j * D]);
#pragma unroll
        for (int k = 0; k < HC; k++) pin[k] = post_in[m * HC + k];
#pragma unroll
        for (int e = 0; e < HC * HC; e++) cb[e] = comb_in[m * HC * HC + e];
      }
#pragma unroll
      for (int k = 0; k < HC; k++) stream_mix<1>(cb, res, pin, {x}, k, v);
    }
    bf16_t* const out = streams + (size_t)(row0 + sl.mi) * HC * D + sl.col;  // streams[m][k][d] at out + k*D
    if (PAIRS) {
      // two values a conversion (f2bf2), each pair's bf16 kept packed in a 32-bit word: its stores and fp32 values are
      // one shift or mask each. A NaN (outside a real cycle, but f2bf's bits all the same) on one branch for the four
      unsigned pk[HC / 2];
#pragma unroll
      for (int k = 0; k < HC; k += 2) pk[k / 2] = f2bf2_nonan(v[0][k], v[0][k + 1]);
      if (__builtin_expect(v[0][0] != v[0][0] || v[0][1] != v[0][1] || v[0][2] != v[0][2] || v[0][3] != v[0][3], 0)) {
#pragma unroll
        for (int k = 0; k < HC; k += 2) pk[k / 2] = f2bf2(v[0][k], v[0][k + 1]);
      }
#pragma unroll
      for (int k = 0; k < HC; k++) {
        const unsigned wd = pk[k / 2];
#ifndef CL_C_NOSTORE  // timing ablation: the stream values not written to global memory (inexact)
        out[(size_t)k * D] = (bf16_t)(k & 1 ? wd >> 16 : wd);
#endif
        sv[sl.mi][k * Q + sl.q][sl.l] = __uint_as_float(k & 1 ? wd & 0xffff0000u : wd << 16);
      }
    } else {
#pragma unroll
      for (int k = 0; k < HC; k++) {
        const bf16_t bv = f2bf(v[0][k]);
#ifndef CL_C_NOSTORE  // timing ablation: the stream values not written to global memory (inexact)
        out[(size_t)k * D] = bv;
#endif
        sv[sl.mi][k * Q + sl.q][sl.l] = bf2f(bv);
      }
    }
  }
}
// The same values two lanes a thread (CL_SV_LANE2, builds of at least that many rows): a thread makes lanes l and
// l + 1 of one row and lane step, so each of its loads and stores is one of twice the width (x, the residual and sv
// 8 bytes, the streams' bf16 pairs 4 bytes: f2bf2 packs the two lanes of a stream, low half lane l) and post/comb
// are loaded once for both; the same additions and roundings a value. ~18% fewer instructions an element where C is
// issue-bound (four and eight rows: 2-4 elements a thread); at one and two rows half the threads would idle while
// the others' chains grow, so those builds keep one lane a thread (thirty-second session, H100: TP4 M=4/8
// 0.611 / 0.877 against 0.621 / 0.895 ms, M=1/2 0.444 / 0.481 against 0.429 / 0.476).
#ifndef CL_SV_LANE2
#define CL_SV_LANE2 4  // the fewest rows of a build whose stream values are made two lanes a thread; 9: none
#endif
// The thread that requests the block's weight copies (fetch_weights): thread 0 by default. Its request (~50
// instructions and the copy's proxy fence) is the first thing of each step, so its warp starts its stream values
// ~0.2 us late; where the stream values are made two lanes a thread at one and two rows, the block's last
// warps have none, and CL_FETCH_LAST=1 gives the request to the block's last thread (thirty-third session, H100, with
// CL_SV_LANE2=1: exact, C 0.67 against 0.77 us at TP4 M=2, the dot products and the exchange as much longer, TP4 M=2
// 0.479-0.480 against 0.476 ms: off).
#ifndef CL_FETCH_LAST
#define CL_FETCH_LAST 0
#endif
template <int Q, int CASE>
__device__ __forceinline__ void stream_values_lane2(const MhcArgs& A, int row0, int nrows, int L0,
                                                    const float (*xs)[Q][CL_LANES], float (*sv)[HC * Q][CL_LANES],
                                                    const float (*pc)[HC + HC * HC], int it, int nt) {
  bf16_t* const streams = A.streams;
  constexpr int D = Q * LANES;  // (A.D: the build's hidden size)
  const int n2 = nrows * Q * CL_LANES / 2;
  const bf16_t* const residual = A.residual;
  const float* const post_in = A.post_in;
  const float* const comb_in = A.comb_in;
  for (int i = it; i < n2; i += nt) {
    const Slot sl = slot_of<Q>(2 * i, L0);  // sl.l even: lanes sl.l and sl.l + 1
    const float2 x = *reinterpret_cast<const float2*>(&xs[sl.mi][sl.q][sl.l]);
    float v[2][HC];
    if (CASE == SV_PRE) {
#pragma unroll
      for (int k = 0; k < HC; k++) v[0][k] = x.x, v[1][k] = x.y;
    } else {
      float res[2][HC], pin[HC], cb[HC * HC];
      if (CASE == SV_CARRIED) {
#pragma unroll
        for (int j = 0; j < HC; j++) {
          const float2 r = *reinterpret_cast<const float2*>(&sv[sl.mi][j * Q + sl.q][sl.l]);
          res[0][j] = r.x, res[1][j] = r.y;
        }
        post_comb_of(pc[sl.mi], pin, cb);
      } else {
        const int m = row0 + sl.mi;
        const bf16_t* rp = residual + (size_t)m * HC * D + sl.col;
#pragma unroll
        for (int j = 0; j < HC; j++) {
          const unsigned wd = *reinterpret_cast<const unsigned*>(rp + (size_t)j * D);
          res[0][j] = __uint_as_float(wd << 16), res[1][j] = __uint_as_float(wd & 0xffff0000u);
        }
#pragma unroll
        for (int k = 0; k < HC; k++) pin[k] = post_in[m * HC + k];
#pragma unroll
        for (int e = 0; e < HC * HC; e++) cb[e] = comb_in[m * HC * HC + e];
      }
#pragma unroll
      for (int k = 0; k < HC; k++) stream_mix<2>(cb, res, pin, {x.x, x.y}, k, v);
    }
    bf16_t* const out = streams + (size_t)(row0 + sl.mi) * HC * D + sl.col;  // streams[m][k][d] at out + k*D
    unsigned pk[HC];
#pragma unroll
    for (int k = 0; k < HC; k++) pk[k] = f2bf2_nonan(v[0][k], v[1][k]);
    bool nan = false;
#pragma unroll
    for (int k = 0; k < HC; k++) nan = nan || v[0][k] != v[0][k] || v[1][k] != v[1][k];
    if (__builtin_expect(nan, 0)) {
#pragma unroll
      for (int k = 0; k < HC; k++) pk[k] = f2bf2(v[0][k], v[1][k]);
    }
#pragma unroll
    for (int k = 0; k < HC; k++) {
#ifndef CL_C_NOSTORE  // timing ablation: the stream values not written to global memory (inexact)
      *reinterpret_cast<unsigned*>(out + (size_t)k * D) = pk[k];
#endif
      *reinterpret_cast<float2*>(&sv[sl.mi][k * Q + sl.q][sl.l]) =
          make_float2(__uint_as_float(pk[k] << 16), __uint_as_float(pk[k] & 0xffff0000u));
    }
  }
}
template <int Q, int CASE, bool PAIRS, bool LANE2>
__device__ __forceinline__ void stream_values_case(const MhcArgs& A, int row0, int nrows, int L0,
                                                   const float (*xs)[Q][CL_LANES], float (*sv)[HC * Q][CL_LANES],
                                                   const float (*pc)[HC + HC * HC], int it, int nt) {
  if constexpr (LANE2) stream_values_lane2<Q, CASE>(A, row0, nrows, L0, xs, sv, pc, it, nt);
  else stream_values_of<Q, CASE, PAIRS>(A, row0, nrows, L0, xs, sv, pc, it, nt);
}
template <int Q, bool PAIRS, bool LANE2>
__device__ __forceinline__ void stream_values(const MhcArgs& A, int op, bool carried, int row0, int nrows, int L0,
                                              const float (*xs)[Q][CL_LANES], float (*sv)[HC * Q][CL_LANES],
                                              const float (*pc)[HC + HC * HC], int it, int nt) {
  if (op == OP_PRE) stream_values_case<Q, SV_PRE, PAIRS, LANE2>(A, row0, nrows, L0, xs, sv, pc, it, nt);
  else if (carried) stream_values_case<Q, SV_CARRIED, PAIRS, LANE2>(A, row0, nrows, L0, xs, sv, pc, it, nt);
  else stream_values_case<Q, SV_GLOBAL, PAIRS, LANE2>(A, row0, nrows, L0, xs, sv, pc, it, nt);
}
