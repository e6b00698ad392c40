// The cluster cycle's X: a block's partials as the pieces it pushes into all 16 blocks, which warps push them,
// and each receiver's sum of the 16 blocks' partials of a chain, then a row's scale of every mix.

// Piece j (four floats) of the block's partials: the sum of its two lane halves (the tree's sixth level).
template <int PS>
__device__ __forceinline__ float4 dot_piece(const float (*half)[PS], int j) {
  const float4 a = *reinterpret_cast<const float4*>(&half[0][4 * j]), b = *reinterpret_cast<const float4*>(&half[1][4 * j]);
  return make_float4(ADD(a.x, b.x), ADD(a.y, b.y), ADD(a.z, b.z), ADD(a.w, b.w));
}

// Piece j of the block's partials as the exchange pushes it: the two lane halves added (dots_by_lanes), or the
// block's partials as they are (the loops of every warp over the 64 lanes).
template <bool BY_LANES, int PS>
__device__ __forceinline__ float4 exchange_piece(const float (*half)[PS], int j) {
  return BY_LANES ? dot_piece<PS>(half, j) : *reinterpret_cast<const float4*>(&half[0][4 * j]);
}

#ifndef CL_PUSH_ROT
#define CL_PUSH_ROT 0  // diagnosis builds (N): warp w pushes the block's partials to block (w + N) % 16 (0: block w;
#endif                 // H100, TP4 M=2: the block warp 0 pushes to receives first, blocks 4 and 5 last whoever pushes)
// Which warps push the block's partials (X): in the builds whose row count is in the mask CL_PUSH_W0 (1, 2, 4, 8;
// 15 every build, 0 none), warp 0, the first past the barrier after A, pushes every piece to all 16 blocks; in the
// others warp w pushes to block w, and the other warps' pushes land ~0.1 us after warp 0's (the block warp 0 pushes
// to receives first: CL_PUSH_ROT). Thirty-third session, H100, every build (15): the receipt even over the blocks
// (0.58-0.64 against 0.51-0.70 us after the last dot products at TP4 M=2) but warp 0's Sinkhorn later, TP4 M=1/2/4/8
// 0.449 / 0.486-0.487 / 0.599 / 0.887-0.888 against 0.429 / 0.475-0.476 / 0.610-0.611 / 0.877 ms: faster at four
// rows only (0.599 against 0.610-0.611 in four rounds), so 4.
#ifndef CL_PUSH_W0
#define CL_PUSH_W0 4
#endif

// The 16 blocks' partials of one chain (recv[.][block][idx]) in the contract's adjacent-pair tree.
template <int PS>
__device__ __forceinline__ float exchange_sum(const float (*rb)[PS], int idx) {
  float v[CL_SIZE];
#pragma unroll
  for (int j = 0; j < CL_SIZE; j++) v[j] = rb[j][idx];
#pragma unroll
  for (int step = 1; step < CL_SIZE; step <<= 1)
#pragma unroll
    for (int j = 0; j < CL_SIZE; j += 2 * step) v[j] = ADD(v[j], v[j + step]);
  return v[0];
}
// A row's factor of every mix from its sum of squares: 1 / sqrt(ss / N + eps) (mix = dot * it). N = HC * D is
// 4096 Q, a power of two, so ss / N is ss * (1 / N) exactly (both round the same real number once; no flag
// flushes subnormals), and 1 / sqrt is recip_rn (~100 cycles less than two __fdiv_rn on the chain of both
// the Sinkhorn and pre).
template <int Q>
__device__ __forceinline__ float mix_scale(float ss, float eps) { return recip_rn(SQRT(ADD(MUL(ss, 1.0f / (HC * Q * LANES)), eps))); }
