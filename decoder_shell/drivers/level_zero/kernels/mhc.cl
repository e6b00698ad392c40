/* mHC boundaries: contracts/mhc.py. One work-group per row m of one rank; LPI = LANES / group size
 * lanes per work-item.
 *
 * Pass 1 (lanes): each lane walks its strided elements of the row's streams [HC*D], computes the
 * stream value (x copied into the streams, or hc_post), stores it as bf16, and accumulates
 * sum(s*s) and every sum(s*fn[o]) in fp32. The lane tree turns them into mixes.
 * Pass 2 (one work-item): split (sigmoid pre/post, Sinkhorn comb, or the head's pre).
 * Pass 3: collapse y[d] = sum_h pre[h]*s_h[d], left to right over h, rounded to bf16.
 * Buffers hold every rank back to back; `rank` picks this launch's slice.
 */

#define NMIX ((2 + HC) * HC)

/* numpy's max: a NaN anywhere makes the maximum NaN. */
static inline float np_max(float a, float b) { return (isnan(a) || b > a) ? (isnan(a) ? a : b) : a; }

static inline void sinkhorn(const local float *mixes, global const float *base, float s2, float hc_eps,
                     int iters, float c[HC][HC]) {
    float lg[HC][HC];
    for (int j = 0; j < HC; ++j)
        for (int k = 0; k < HC; ++k)
            lg[j][k] = mixes[2 * HC + j * HC + k] * s2 + base[2 * HC + j * HC + k];
    for (int j = 0; j < HC; ++j) {
        float mx = lg[j][0];
        for (int k = 1; k < HC; ++k) mx = np_max(mx, lg[j][k]);
        float e[HC];
        for (int k = 0; k < HC; ++k) e[k] = pexp(lg[j][k] - mx);
        float rs = e[0];
        for (int k = 1; k < HC; ++k) rs = rs + e[k];
        for (int k = 0; k < HC; ++k) c[j][k] = e[k] / rs + hc_eps;
    }
    /* one column scaling, then (iters - 1) x (row, column), as contracts.mhc.sinkhorn */
    for (int it = 0; it < max(iters, 1); ++it) {
        if (it > 0) {
            for (int j = 0; j < HC; ++j) {
                float rs = c[j][0];
                for (int k = 1; k < HC; ++k) rs = rs + c[j][k];
                float den = rs + hc_eps;
                for (int k = 0; k < HC; ++k) c[j][k] = c[j][k] / den;
            }
        }
        for (int k = 0; k < HC; ++k) {
            float cs = c[0][k];
            for (int j = 1; j < HC; ++j) cs = cs + c[j][k];
            float den = cs + hc_eps;
            for (int j = 0; j < HC; ++j) c[j][k] = c[j][k] / den;
        }
    }
}

/* The shared body. MODE 0: mhc_pre, 1: mhc_post_pre, 2: mhc_post_head. XT/XLOAD: x's dtype. */
#define DEFINE_MHC(NAME, MODE, XT, XLOAD)                                                          \
kernel void NAME(global const XT *x, global const ushort *residual, global const float *post,      \
                 global const float *comb, global const float *fn, global const float *base,       \
                 global const float *scale, global ushort *streams, global ushort *y,              \
                 global float *next_post, global float *next_comb, uint rank, uint rows, uint D,   \
                 float hc_eps, float norm_eps, int iters) {                                         \
    const int NO = (MODE == 2) ? HC : NMIX;                                                       \
    const uint lid = get_local_id(0), wg = get_local_size(0), m = get_group_id(0);                 \
    const uint N = HC * D;                                                                         \
    local float lanes[LANES];                                                                      \
    local float mixes[NMIX];                                                                       \
    local float pre[HC];                                                                           \
    x += ((size_t)rank * rows + m) * D;                                                            \
    streams += ((size_t)rank * rows + m) * N;                                                      \
    y += ((size_t)rank * rows + m) * D;                                                            \
    fn += (size_t)rank * NO * N;                                                                   \
    base += (size_t)rank * NO;                                                                     \
    scale += (size_t)rank * ((MODE == 2) ? 1 : 3);                                                 \
    float cw[HC][HC], pw[HC];                                                                      \
    if (MODE != 0) {                                                                               \
        residual += ((size_t)rank * rows + m) * N;                                                 \
        post += ((size_t)rank * rows + m) * HC;                                                    \
        comb += ((size_t)rank * rows + m) * HC * HC;                                               \
        for (int j = 0; j < HC; ++j) {                                                             \
            pw[j] = post[j];                                                                       \
            for (int k = 0; k < HC; ++k) cw[j][k] = comb[j * HC + k];                              \
        }                                                                                          \
    }                                                                                              \
    float ss[LPI], dot[LPI][NMIX];                                                                 \
    for (int q = 0; q < LPI; ++q) {                                                                \
        ss[q] = 0.0f;                                                                              \
        for (int o = 0; o < NO; ++o) dot[q][o] = 0.0f;                                             \
    }                                                                                              \
    for (int q = 0; q < LPI; ++q) {                                                                \
        for (uint i = lid + q * wg; i < N; i += LANES) {                                           \
            uint h = i / D, d = i - h * D;                                                         \
            ushort sb;                                                                             \
            if (MODE == 0) {                                                                       \
                sb = f2bf(XLOAD(x[d]));                                                            \
            } else {                                                                               \
                float mix = cw[0][h] * bf2f(residual[d]);                                          \
                for (int j = 1; j < HC; ++j) mix = mix + cw[j][h] * bf2f(residual[j * D + d]);     \
                sb = f2bf(pw[h] * XLOAD(x[d]) + mix);                                              \
            }                                                                                      \
            streams[i] = sb;                                                                       \
            float s = bf2f(sb);                                                                    \
            ss[q] = ss[q] + s * s;                                                                 \
            for (int o = 0; o < NO; ++o) dot[q][o] = dot[q][o] + s * fn[(size_t)o * N + i];       \
        }                                                                                          \
    }                                                                                              \
    for (int q = 0; q < LPI; ++q) lanes[lid + q * wg] = ss[q];                                     \
    float r = 1.0f / sqrt(lane_tree(lanes) / (float)N + norm_eps);                                 \
    for (int o = 0; o < NO; ++o) {                                                                 \
        for (int q = 0; q < LPI; ++q) lanes[lid + q * wg] = dot[q][o];                             \
        float t = lane_tree(lanes);                                                                \
        if (lid == 0) mixes[o] = t * r;                                                            \
    }                                                                                              \
    if (lid == 0) {                                                                                \
        for (int h = 0; h < HC; ++h) pre[h] = psigmoid(mixes[h] * scale[0] + base[h]) + hc_eps;    \
        if (MODE != 2) {                                                                           \
            next_post += ((size_t)rank * rows + m) * HC;                                           \
            next_comb += ((size_t)rank * rows + m) * HC * HC;                                      \
            for (int h = 0; h < HC; ++h)                                                           \
                next_post[h] = 2.0f * psigmoid(mixes[HC + h] * scale[1] + base[HC + h]);           \
            float c[HC][HC];                                                                       \
            sinkhorn(mixes, base, scale[2], hc_eps, iters, c);                                     \
            for (int j = 0; j < HC; ++j)                                                           \
                for (int k = 0; k < HC; ++k) next_comb[j * HC + k] = c[j][k];                      \
        }                                                                                          \
    }                                                                                              \
    barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE);                                           \
    for (uint d = lid; d < D; d += wg) {                                                           \
        float acc = pre[0] * bf2f(streams[d]);                                                     \
        for (int h = 1; h < HC; ++h) acc = acc + pre[h] * bf2f(streams[h * D + d]);                \
        y[d] = f2bf(acc);                                                                          \
    }                                                                                              \
}

#define LOAD_F32(v) (v)
DEFINE_MHC(mhc_pre_bf16, 0, ushort, bf2f)
DEFINE_MHC(mhc_pre_f32, 0, float, LOAD_F32)
DEFINE_MHC(mhc_post_pre_bf16, 1, ushort, bf2f)
DEFINE_MHC(mhc_post_pre_f32, 1, float, LOAD_F32)
DEFINE_MHC(mhc_post_head_bf16, 2, ushort, bf2f)
DEFINE_MHC(mhc_post_head_f32, 2, float, LOAD_F32)
