// The cluster cycle's A: each block's dot products of its 64 lanes for the step's 24 outputs and the sum of
// squares, in the contract's order (over all 64 lanes a warp, or by lane halves with a 32-lane tree at 16 warps).

#define CL_STR(x) #x
#define CL_UNROLL(n) _Pragma(CL_STR(unroll n))
#ifndef CL_DOT_UNROLL
#define CL_DOT_UNROLL 4  // the dot products' loop over u unrolled by this much (16, all of it: 128 registers and
                         // spills at 8 rows and 8 ranks)
#endif
#ifndef CL_DOT_SPLIT_ROWS
#define CL_DOT_SPLIT_ROWS 1  // builds of at least this many rows take the split dot-product loops (16 warps)
#endif
#ifndef CL_DOT_LANES
#define CL_DOT_LANES 1  // builds of 16 warps and at least this many rows take dots_by_lanes (9: none, the loops above)
#endif
#ifndef CL_LANES_UNROLL
#define CL_LANES_UNROLL 4  // dots_by_lanes' loop over u unrolled by this much at four and eight rows
#endif
#ifndef CL_LANES_UNROLL2
#define CL_LANES_UNROLL2 16  // ... and at one and two rows (16: all of it; 8, 4, 2 made A 1.25 -> 1.44 us at TP4 M=2)
#endif
#ifndef CL_DOT_TILE
#define CL_DOT_TILE 1  // at eight rows, four rows by four chains a warp (0: every row by two chains)
#endif
// The dot products of one warp: the first NS of its NCH chain slots (wrow: each slot's weights at lane
// 2*lane) over the block's 64 lanes and every row, in the contract's order (lane by lane, u = 0..4Q-1),
// the loop over u unrolled by U. Slot 0's factor (F0): the weights (DOT_W), the stream value itself (DOT_SQ:
// the sum of squares), or either by warp (DOT_EITHER, `sq` for warp 0: one loop for every warp; at most two
// rows a build it is loaded from a pointer that is sv for warp 0 and the weights for the others, one load a
// row instead of two selects a row; with more rows, where shared-memory bandwidth is the bound, a select).
enum { DOT_W = 0, DOT_SQ = 1, DOT_EITHER = 2 };
// FULL: every one of the RPC rows is a row of the step (no test a row: a branch a row and u kept the
// compiler from issuing any load before the branch, so every shared-memory load was waited for by the
// multiply right behind it).
template <int Q, int RPC, int NCH, int NS, int F0, int U, bool FULL>
__device__ __forceinline__ void dot_chains(const float* const (&wrow)[NCH], const float (*sv)[HC * Q][CL_LANES], int nrows,
                                           int lane, bool sq, float (&a0)[RPC][NCH], float (&a1)[RPC][NCH]) {
  constexpr bool SQ_LOAD = F0 == DOT_EITHER && RPC <= 2;
  const float* const f0 = sq ? &sv[0][0][2 * lane] : wrow[0];  // (SQ_LOAD) slot 0's factor at f0 + mi * f0_row + u * 64
  const int f0_row = sq ? HC * Q * CL_LANES : 0;
  CL_UNROLL(U)
  for (int u = 0; u < HC * Q; u++) {
    float2 wv[NS];
#pragma unroll
    for (int i = F0 == DOT_SQ || SQ_LOAD ? 1 : 0; i < NS; i++) wv[i] = *reinterpret_cast<const float2*>(wrow[i] + u * CL_LANES);
#pragma unroll
    for (int mi = 0; mi < RPC; mi++) {
      if (FULL || mi < nrows) {
        const float2 s2 = *reinterpret_cast<const float2*>(&sv[mi][u][2 * lane]);
        if (SQ_LOAD) wv[0] = *reinterpret_cast<const float2*>(f0 + mi * f0_row + u * CL_LANES);
#pragma unroll
        for (int i = 0; i < NS; i++) {
          const bool self = i == 0 && (F0 == DOT_SQ || (F0 == DOT_EITHER && !SQ_LOAD && sq));
          const float mx = self ? s2.x : wv[i].x, my = self ? s2.y : wv[i].y;
          a0[mi][i] = ADD(a0[mi][i], MUL(s2.x, mx));
          a1[mi][i] = ADD(a1[mi][i], MUL(s2.y, my));
        }
      }
    }
  }
}

// dot_chains for the warp's nrows rows: the loop without a test a row where they are all of the build's RPC.
template <int Q, int RPC, int NCH, int NS, int F0, int U>
__device__ __forceinline__ void dot_rows(const float* const (&wrow)[NCH], const float (*sv)[HC * Q][CL_LANES], int nrows,
                                         int lane, bool sq, float (&a0)[RPC][NCH], float (&a1)[RPC][NCH]) {
  if (nrows == RPC) dot_chains<Q, RPC, NCH, NS, F0, U, true>(wrow, sv, nrows, lane, sq, a0, a1);
  else dot_chains<Q, RPC, NCH, NS, F0, U, false>(wrow, sv, nrows, lane, sq, a0, a1);
}

// Where a step's weights are: output o's 4Q rows of the block's lanes at box0 + o 4Q WS, or (SPLIT: the step's two
// boxes in slots apart, cl_wslots' spare slot) those of the second box's outputs (o >= per) at box1.
template <bool SPLIT>
struct WStep {
  const float* box0;
  const float* box1;
  template <int Q, int WS>
  __device__ __forceinline__ const float* of(int o) const {
    constexpr int per = cl_box_rows<Q>() / (HC * Q);  // outputs a box
    if constexpr (SPLIT) return o >= per ? box1 + (size_t)(o - per) * HC * Q * WS : box0 + (size_t)o * HC * Q * WS;
    else return box0 + (size_t)o * HC * Q * WS;
  }
};

// ---- the dot products by lane halves (dots_by_lanes: 16 warps, at least CL_DOT_LANES rows a cluster) ------------
// The loops above have every warp cover the block's 64 lanes (two a thread, 8-byte loads): every warp reads every
// row's stream values (16 times a step at 16 warps), and each (row, chain)'s 64-lane tree takes five shuffles a
// value, which the SM issues one warp at a time. Here a warp covers one lane half, one lane a thread (32-bit loads:
// a weight load of 32 lanes is one wavefront, every byte used), every row of the cluster in each thread, and the
// 8 warps of a lane half split the chains (chain c in group c % 8): each weight is read once, each stream value by
// 8 warps, and the tree of the half's 32 lanes runs for a thread's values at once (lane_tree). The same additions
// in the same order: each lane's chain over u, the contract's adjacent-pair tree over the half's 32 lanes, the two
// halves added where the partials are pushed (dot_piece). H200, TP4 M=2/4/8 (docs/BENCHMARKS.md, eleventh session):
// dot products 1.73 / 2.82 / 4.51 -> 1.28 / 1.98 / 3.68 us a step; with the tree one value at a time 1.95 / 3.23 /
// 6.02, and a lane pair a thread with its two 16-lane row slots sharing each weight load 1.82 / 2.82 / 4.19.

// The contract's adjacent-pair tree over a warp's 32 lanes for K values a thread at once (K a power of two,
// at most 32): round r pairs lanes l and l ^ 2^r, each keeps half of its values (the upper half where bit r of
// its lane is set) and adds its partner's of that half, so after log2 K rounds a thread holds one value,
// summed over its aligned group of K lanes, and the rounds left (xor K .. 16) add the groups: K - 1 + 5 - log2 K
// shuffles where one value at a time takes 5K. Sums of aligned lane groups in pairs are the tree's levels;
// which of the two is added to the other does not matter (IEEE addition commutes). Returns the index of the
// value v[0] now holds in every lane below K (its lane's low log2 K bits reversed); lanes past K hold copies.
template <int K, int N = K, int STEP = 1>
__device__ __forceinline__ int lane_tree(float (&v)[K], int lane) {
  static_assert(K >= 1 && K <= 32 && (K & (K - 1)) == 0, "a power of two, at most 32");
  if constexpr (N > 1) {  // one round: N values held, N / 2 kept
    const bool up = (lane & STEP) != 0;
#pragma unroll
    for (int i = 0; i < N / 2; i++) {
      const float send = up ? v[i] : v[i + N / 2], keep = up ? v[i + N / 2] : v[i];
      v[i] = ADD(keep, __shfl_xor_sync(0xffffffffu, send, STEP));
    }
    return (up ? N / 2 : 0) + lane_tree<K, N / 2, 2 * STEP>(v, lane);
  } else {
#pragma unroll
    for (int step = K; step < 32; step <<= 1) v[0] = ADD(v[0], __shfl_xor_sync(0xffffffffu, v[0], step));
    return 0;
  }
}
template <int Q, int RPC, int NC, int NS, bool SQ, int U, int WS>
__device__ __forceinline__ void dot_lanes_loop(const float* const (&wrow)[NC], const float* svp, float (&a)[RPC][NC]) {
#if defined(ABL_W4) || defined(ABL_SV4)
  // timing ablation (inexact: the right loads' count and width, the wrong elements): the weights (ABL_W4) and / or
  // the stream values (ABL_SV4) by 16-byte loads, four u a load, from a lane's swizzled 16 floats of its chain's
  // (row's) 1024 (conflict-free: the eight lanes of a wavefront hit eight distinct 16-byte chunks). A quarter of
  // the load instructions, the same bytes: A took as long (H200 TP4 M=2 1.25-1.31 us against 1.25; M=8 3.14-3.46
  // against 3.20, docs/BENCHMARKS.md eighteenth session), so a transposed weight layout would not shorten it.
  const int l = (int)(threadIdx.x & 31) + ((threadIdx.x >> 5) & 1) * 32;
#pragma unroll
  for (int q4 = 0; q4 < HC * Q / 4; q4++) {
    const int sw = l * 4 + (q4 ^ ((l >> 1) & 3));
    float s[RPC][4], wv[NS][4];
#pragma unroll
    for (int r = 0; r < RPC; r++) {
#ifdef ABL_SV4
      const float4 v = reinterpret_cast<const float4*>(svp - l + r * HC * Q * CL_LANES)[sw];
      s[r][0] = v.x, s[r][1] = v.y, s[r][2] = v.z, s[r][3] = v.w;
#else
#pragma unroll
      for (int k = 0; k < 4; k++) s[r][k] = svp[r * HC * Q * CL_LANES + (4 * q4 + k) * CL_LANES];
#endif
    }
#pragma unroll
    for (int i = SQ ? 1 : 0; i < NS; i++) {
#ifdef ABL_W4
      const float4 v = reinterpret_cast<const float4*>(wrow[i] - l)[sw];
      wv[i][0] = v.x, wv[i][1] = v.y, wv[i][2] = v.z, wv[i][3] = v.w;
#else
#pragma unroll
      for (int k = 0; k < 4; k++) wv[i][k] = wrow[i][(4 * q4 + k) * CL_LANES];
#endif
    }
#pragma unroll
    for (int k = 0; k < 4; k++)
#pragma unroll
      for (int r = 0; r < RPC; r++)
#pragma unroll
        for (int i = 0; i < NS; i++) a[r][i] = ADD(a[r][i], MUL(s[r][k], SQ && i == 0 ? s[r][k] : wv[i][k]));
  }
  return;
#endif
  CL_UNROLL(U)
  for (int u = 0; u < HC * Q; u++) {
    float s[RPC], wv[NS];
#pragma unroll
    for (int r = 0; r < RPC; r++) s[r] = svp[r * HC * Q * CL_LANES + u * CL_LANES];
#pragma unroll
    for (int i = SQ ? 1 : 0; i < NS; i++) wv[i] = WS == CL_LANES ? wrow[i][u * WS] : __ldg(&wrow[i][u * WS]);
#pragma unroll
    for (int r = 0; r < RPC; r++)
#pragma unroll
      for (int i = 0; i < NS; i++) a[r][i] = ADD(a[r][i], MUL(s[r], SQ && i == 0 ? s[r] : wv[i]));
  }
}
template <int Q, int RPC, int NC, bool SQ, int U, int WS, int NS = NC>
__device__ __forceinline__ void dot_lanes_n(int ns, const float* const (&wrow)[NC], const float* svp, float (&a)[RPC][NC]) {
  if constexpr (NS >= 1) {
    if (ns == NS) dot_lanes_loop<Q, RPC, NC, NS, SQ, U, WS>(wrow, svp, a);
    else dot_lanes_n<Q, RPC, NC, SQ, U, WS, NS - 1>(ns, wrow, svp, a);
  }
}
template <int Q, int RPC, int PS, int WS = CL_LANES, bool SPLIT = false>
__device__ __forceinline__ void dots_by_lanes(const WStep<SPLIT>& ws, const float (*sv)[HC * Q][CL_LANES], int nrows, int nout, int w,
                                              int lane, float (*half)[PS]) {
  constexpr int G = 8, NC = (CL_CHAINS + G - 1) / G;  // chain groups, chains of the largest
  constexpr int U = RPC <= 2 ? CL_LANES_UNROLL2 : CL_LANES_UNROLL;
  const int lh = w & 1, cg = w >> 1, l = lh * 32 + lane;
  const int ns = cg <= nout ? (nout - cg) / G + 1 : 0;
  const float* wrow[NC];
#pragma unroll
  for (int i = 0; i < NC; i++) {
    const int c = cg + G * i;
    wrow[i] = ws.template of<Q, WS>(c >= 1 && c <= nout ? c - 1 : 0) + l;
  }
  float a[RPC][NC];
#pragma unroll
  for (int r = 0; r < RPC; r++)
#pragma unroll
    for (int i = 0; i < NC; i++) a[r][i] = 0.0f;
  const float* svp = &sv[0][0][l];
  if (cg == 0) dot_lanes_n<Q, RPC, NC, true, U, WS>(ns, wrow, svp, a);
  else dot_lanes_n<Q, RPC, NC, false, U, WS>(ns, wrow, svp, a);
  // the 32 lanes' tree of RB rows' values at once (lane_tree; at eight rows twice, four rows each: all 32 values
  // at once spilled)
  constexpr int RB = RPC * NC > 16 ? 16 / NC : RPC, K = RB * NC;
#pragma unroll
  for (int r0 = 0; r0 < RPC; r0 += RB) {
    float v[K];
#pragma unroll
    for (int r = 0; r < RB; r++)
#pragma unroll
      for (int i = 0; i < NC; i++) v[r * NC + i] = a[r0 + r][i];
    const int k = lane_tree<K>(v, lane);
    const int r = r0 + k / NC, i = k % NC;
    if (lane < K && i < ns && r < nrows) half[lh][r * CL_CHAINS + cg + G * i] = v[0];
  }
}
