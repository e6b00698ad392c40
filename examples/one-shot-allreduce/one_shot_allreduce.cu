// One-shot all-reduce of bf16 partial sums: every rank reads every peer's input and folds them itself
// (no ring hops), in the order of the shell's default ring contract, so its bits equal the ring's:
//   chunk c = i / ceil(n / R) is owned by rank c; its elements fold starting at rank c, stepping +1,
//   rounding the running sum to bf16 after every addition ("hop" accumulation).
// No fused multiply-add is involved; additions use __fadd_rn.
#include <cuda_bf16.h>

extern "C" __global__ void one_shot_allreduce_bf16(const __nv_bfloat16* const* peers, __nv_bfloat16* out,
                                                   int rows, int hidden, int ranks) {
    const long long n = (long long)rows * hidden;
    const long long chunk = (n + ranks - 1) / ranks;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const int first = (int)(i / chunk);
        float acc = __bfloat162float(peers[first][i]);
        for (int t = 1; t < ranks; ++t) {
            const int r = (first + t) % ranks;
            acc = __bfloat162float(__float2bfloat16_rn(__fadd_rn(acc, __bfloat162float(peers[r][i]))));
        }
        out[i] = __float2bfloat16_rn(acc);
    }
}
