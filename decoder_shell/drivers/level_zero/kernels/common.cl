/* Portable fp32 building blocks: the OpenCL C twin of contracts/numerics.py.
 *
 * Constants (LANES, EXP_*, LOG2E, ROUND_MAGIC, LN2_*) arrive as -D definitions generated from
 * numerics.py, so the numpy module stays the one place they are written down. Every +, -, *, / is
 * rounded on its own (FP_CONTRACT OFF); division and sqrt are built correctly rounded.
 */
#pragma OPENCL FP_CONTRACT OFF

#define HC 4

/* bf16 -> fp32 is exact: the bf16 bits are the top half of the fp32 bits. */
static inline float bf2f(ushort h) { return as_float(((uint)h) << 16); }

/* fp32 -> bf16, round to nearest even on the bits (as ml_dtypes does); NaN becomes the quiet NaN
 * 0x7fc0 with its sign kept, overflow rounds to infinity. */
static inline ushort f2bf(float f) {
    uint u = as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (ushort)(((u >> 16) & 0x8000u) | 0x7fc0u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (ushort)(u >> 16);
}

static inline float round_bf(float f) { return bf2f(f2bf(f)); }

/* numerics.pexp: clamp, magic-number rounding, Cody-Waite reduction, Horner, 2^n from its bits. */
static inline float pexp(float x) {
    x = fmax(fmin(x, EXP_HI), EXP_LO);
    float n = (x * LOG2E + ROUND_MAGIC) - ROUND_MAGIC;
    float r = (x - n * LN2_HI) - n * LN2_LO;
    float p = EXP_C0;
    p = p * r + EXP_C1;
    p = p * r + EXP_C2;
    p = p * r + EXP_C3;
    p = p * r + EXP_C4;
    p = p * r + EXP_C5;
    p = p * r + EXP_C6;
    p = p * r + EXP_C7;
    return p * as_float((convert_int(n) + 127) << 23);
}

static inline float psigmoid(float z) { return 1.0f / (1.0f + pexp(-z)); }

/* Python's a % b for b > 0 (never negative). */
static inline int pymod(int a, int b) { int m = a % b; return m < 0 ? m + b : m; }

/* numerics.lane_sum's tree: `lanes` holds LANES partial sums; adjacent pairs are added level by
 * level, ((l0+l1)+(l2+l3))+...; every work-item of the group calls it and gets lanes[0] back. */
static inline float lane_tree(local float *lanes) {
    const uint lid = get_local_id(0), wg = get_local_size(0);
    barrier(CLK_LOCAL_MEM_FENCE);
    for (uint s = 1; s < LANES; s <<= 1) {
        for (uint k = lid; k * 2 * s < LANES; k += wg)
            lanes[k * 2 * s] = lanes[k * 2 * s] + lanes[k * 2 * s + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    float total = lanes[0];
    barrier(CLK_LOCAL_MEM_FENCE);
    return total;
}
