
// ---- fused RMSNorm collapse (rmsnorm.cu) ------------------------------------------------------------
// Geometry fused_norm (vLLM's hc_pre with norm_weight): after the mHC node wrote the bf16 collapse y,
// this node rewrites y in place as contracts/rmsnorm.py defines it:
//   y = bf16((x * r) * w),  r = 1 / sqrt(lane_sum(x*x) / D + eps)
// lane l sums x[d]^2 for d = l, l + LANES, ... in order, then the LANES partials combine in the adjacent-
// pair tree ((l0+l1)+(l2+l3))+...; one block of LANES threads per row. In place is safe: each thread
// rewrites only the elements it read, after the block-wide sum.
struct RmsArgs {
  const bf16_t* x;
  const float* w;
  bf16_t* y;
  int D;
  float eps;
};

extern "C" __global__ void __launch_bounds__(LANES) rmsnorm_kernel(const RmsArgs a) {
  __shared__ float acc[LANES];
  pdl_wait();
  const int lane = threadIdx.x;
  const bf16_t* x = a.x + (size_t)blockIdx.x * a.D;
  bf16_t* y = a.y + (size_t)blockIdx.x * a.D;
  float s = 0.0f;
  for (int d = lane; d < a.D; d += LANES) {
    const float v = bf2f(x[d]);
    s = ADD(s, MUL(v, v));
  }
  acc[lane] = s;
  __syncthreads();
  for (int step = 1; step < LANES; step <<= 1) {
    if ((lane & (2 * step - 1)) == 0) acc[lane] = ADD(acc[lane], acc[lane + step]);
    __syncthreads();
  }
  const float r = DIV(1.0f, SQRT(ADD(DIV(acc[0], (float)a.D), a.eps)));
  for (int d = lane; d < a.D; d += LANES) y[d] = f2bf(MUL(MUL(bf2f(x[d]), r), a.w[d]));
}
