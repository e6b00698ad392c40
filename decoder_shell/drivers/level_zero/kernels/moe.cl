/* MoE draft kernels: the OpenCL C twin of drivers/cuda/moe.cu (docs/CONTRACTS.md section 10), one
 * work-item per output row, written for exactness first (no device figures are claimed for them).
 * E4M3 and E2M1 values come from ml_dtypes tables (buffer `tables`: 256 E4M3 values, then 16 E2M1);
 * encoding to E4M3 is round-to-nearest-even by searching those values (every difference below is
 * exact: neighbouring E4M3 values are within a factor of two, and the subnormal step is exact). */

#define FMT_MXFP4 0
#define FMT_FP8 1
#define FMT_BF16 2
#define GROUP_LANES 32

/* E4M3 byte of q, |q| <= 448, RNE with ties to the even code (the code's last bit is the mantissa's). */
static inline uchar e4m3_rne(float q, global const float *tables) {
    float a = fabs(q);
    uint lo = 0, hi = 126; /* positive finite codes 0x00..0x7E, increasing */
    while (lo < hi) {       /* largest code c with value <= a */
        uint mid = (lo + hi + 1) >> 1;
        if (tables[mid] <= a) lo = mid; else hi = mid - 1;
    }
    uint c = lo;
    if (c < 126 && tables[c] != a) {
        float dl = a - tables[c], dh = tables[c + 1] - a;
        if (dh < dl || (dh == dl && (c & 1u))) c = c + 1;
    }
    return (uchar)(c | (signbit(q) ? 0x80u : 0u));
}

kernel void moe_qdq(global const ushort *x, global uchar *codes, global uchar *scales,
                    global const float *tables, uint rows, uint K) {
    size_t id = get_global_id(0);
    uint G = K / 32;
    if (id >= (size_t)rows * G) return;
    size_t row = id / G, g = id % G, base = row * K + g * 32;
    float amax = 0.0f;
    for (uint i = 0; i < 32; i++) amax = fmax(amax, fabs(bf2f(x[base + i])));
    amax = fmax(amax, AMAX_FLOOR);
    uint b = as_uint(amax * INV_E4M3_MAX);
    uint byte = ((b >> 23) & 0xFFu) + ((b & 0x7FFFFFu) != 0u);
    float s = as_float(byte << 23);
    for (uint i = 0; i < 32; i++)
        codes[base + i] = e4m3_rne(fmin(fmax(bf2f(x[base + i]) / s, -448.0f), 448.0f), tables);
    scales[row * G + g] = (uchar)byte;
}

static inline float plog1p(float u) {
    float f = u / (2.0f + u);
    float s = f * f;
    float p = LOG1P_C0;
    p = p * s + LOG1P_C1; p = p * s + LOG1P_C2; p = p * s + LOG1P_C3; p = p * s + LOG1P_C4;
    p = p * s + LOG1P_C5; p = p * s + LOG1P_C6; p = p * s + LOG1P_C7; p = p * s + LOG1P_C8;
    p = p * s + LOG1P_C9;
    return (2.0f * f) * p;
}
static inline float psoftplus(float z) { return (z > 0.0f ? z : 0.0f) + plog1p(pexp(-fabs(z))); }
static inline float psilu(float g) { return g / (1.0f + pexp(-g)); }

/* adjacent-pair tree over n (a power of two) private values */
static inline float tree(float *v, uint n) {
    for (uint s = 1; s < n; s <<= 1)
        for (uint k = 0; k + s < n; k += 2 * s) v[k] = v[k] + v[k + s];
    return v[0];
}

kernel void moe_gate(global const ushort *x, global const ushort *W, global const float *bias,
                     global int *ids, global float *wts, uint rows, uint D, uint E, uint topk, float route_scale) {
    size_t t = get_global_id(0);
    if (t >= rows) return;
    float lanes[LANES], sc[1024];
    for (uint e = 0; e < E; e++) {
        for (uint l = 0; l < LANES; l++) {
            float acc = 0.0f;
            for (uint d = l; d < D; d += LANES) acc = acc + bf2f(x[t * D + d]) * bf2f(W[(size_t)e * D + d]);
            lanes[l] = acc;
        }
        sc[e] = sqrt(psoftplus(tree(lanes, LANES)));
    }
    int chosen[16];
    float w[16];
    for (uint k = 0; k < topk; k++) {
        int best = -1;
        float bv = 0.0f;
        for (uint e = 0; e < E; e++) {
            bool used = false;
            for (uint q = 0; q < k; q++) used |= chosen[q] == (int)e;
            if (used) continue;
            float v = sc[e] + bias[e];
            if (best < 0 || v > bv) { best = (int)e; bv = v; }
        }
        chosen[k] = best;
        w[k] = sc[best];
    }
    float sum = w[0];
    for (uint k = 1; k < topk; k++) sum = sum + w[k];
    sum = sum + GATE_EPS;
    for (uint k = 0; k < topk; k++) {
        ids[t * topk + k] = chosen[k];
        wts[t * topk + k] = (w[k] / sum) * route_scale;
    }
}

static inline float row_dot(uint fmt, global const uchar *wrow, global const uchar *srow, uint n,
                            global const uchar *xrow, global const uchar *xs, uint K, global const float *tables) {
    uint G = K / 32;
    float lanes[GROUP_LANES];
    for (uint l = 0; l < GROUP_LANES; l++) lanes[l] = 0.0f;
    for (uint g = 0; g < G; g++) {
        float acc = 0.0f, sa = as_float(((uint)xs[g]) << 23);
        for (uint i = 0; i < 32; i++) {
            uint k = g * 32 + i;
            float av = tables[xrow[k]], wv;
            if (fmt == FMT_MXFP4) wv = tables[256 + ((wrow[k >> 1] >> (4 * (k & 1))) & 0xFu)];
            else if (fmt == FMT_FP8) wv = tables[wrow[k]];
            else { av = av * sa; wv = bf2f(((global const ushort *)wrow)[k]); }
            float p = av * wv;
            acc = i ? acc + p : p;
        }
        if (fmt != FMT_BF16) {
            uint sw = fmt == FMT_MXFP4 ? srow[g] : srow[(n >> 5) * G + g];
            acc = acc * as_float(((uint)xs[g] + sw - 127u) << 23);
        }
        lanes[g % GROUP_LANES] = lanes[g % GROUP_LANES] + acc;
    }
    return tree(lanes, GROUP_LANES);
}

/* One work-item per (expert e, output row n); it serves every slot whose id is e. */
kernel void moe_linear(global const uchar *xc, global const uchar *xs, global const int *ids,
                       global const float *rw, uint rows, uint topk, uint act_per_slot, uint has_ids, uint has_rw,
                       global const uchar *w, global const uchar *s, ulong w_estride, ulong w_mstride,
                       ulong w_rstride, ulong s_estride, ulong s_mstride, uint K, uint N, uint E, uint fmt,
                       uint swiglu, global uchar *out, global const float *tables) {
    size_t id = get_global_id(0);
    if (id >= (size_t)E * N) return;
    uint e = id / N, n = id % N, G = K / 32;
    uint slots = has_ids ? rows * topk : rows;
    for (uint sl = 0; sl < slots; sl++) {
        if (has_ids && ids[sl] != (int)e) continue;
        uint arow = act_per_slot ? sl : (has_ids ? sl / topk : sl);
        global const uchar *xrow = xc + (size_t)arow * K, *xsr = xs + (size_t)arow * G;
        global const uchar *w0 = w + e * w_estride + (ulong)n * w_rstride;
        global const uchar *s0 = s + e * s_estride + (fmt == FMT_MXFP4 ? (ulong)n * G : 0);
        float y = row_dot(fmt, w0, s0, n, xrow, xsr, K, tables);
        if (swiglu) {
            float u = row_dot(fmt, w0 + w_mstride, s0 + s_mstride, n, xrow, xsr, K, tables);
            float g = fmin(round_bf(y), 10.0f);
            u = fmin(fmax(round_bf(u), -10.0f), 10.0f);
            float h = psilu(g) * u;
            if (has_rw) h = rw[sl] * h;
            ((global ushort *)out)[(size_t)sl * N + n] = f2bf(h);
        } else {
            ((global float *)out)[(size_t)sl * N + n] = y;
        }
    }
}

/* Row t's slots at column d summed from +0.0 in fp32 in ascending expert id (ids of a row are distinct),
 * each rounded to bf16 first when bf16_first (the exact-official epilogue). */
float ascending_slots(global const float *slots, global const int *ids, size_t t, uint topk, size_t D, size_t d,
                      int bf16_first) {
    global const int *row = ids + t * topk;
    float acc = 0.0f;
    int prev = -1;
    for (uint r = 0; r < topk; r++) {
        int best = -1;
        for (uint j = 0; j < topk; j++)
            if (row[j] > prev && (best < 0 || row[j] < row[best])) best = (int)j;
        prev = row[best];
        float v = slots[(t * topk + best) * D + d];
        acc = acc + (bf16_first ? round_bf(v) : v);
    }
    return acc;
}

kernel void moe_combine(global const float *slots, global const float *shared, global const int *ids,
                        global float *out, uint rows, uint topk, uint D, uint has_shared) {
    size_t id = get_global_id(0);
    if (id >= (size_t)rows * D) return;
    size_t t = id / D, d = id % D;
    float acc = ascending_slots(slots, ids, t, topk, D, d, 0);
    if (has_shared) acc = acc + shared[t * D + d];
    out[id] = acc;
}

/* The draft's dense projections (contracts/dense.py): a grouped linear over an act_qdq'd activation,
 * one work-item per (row t, group g, output n). Group g reads inputs [g*K, (g+1)*K) of the row and
 * weight w[g] ([N, K]: FP8 codes with 32x32 scales s[g] [N/32, K/32], or bf16); the output is bf16
 * (out_bf16) or the fp32 partial, at [t, g*N + n]. */
kernel void dense_linear(global const uchar *xc, global const uchar *xs, global const uchar *w,
                         global const uchar *s, uint rows, uint groups, uint N, uint K, uint fmt,
                         uint out_bf16, global uchar *out, global const float *tables) {
    size_t id = get_global_id(0);
    if (id >= (size_t)rows * groups * N) return;
    size_t t = id / ((size_t)groups * N), gn = id % ((size_t)groups * N);
    uint g = gn / N, n = gn % N, kt = groups * K;
    global const uchar *xrow = xc + t * kt + (size_t)g * K;
    global const uchar *xsr = xs + t * (kt / 32) + (size_t)g * (K / 32);
    size_t esize = fmt == FMT_BF16 ? 2 : 1;
    global const uchar *wrow = w + ((size_t)g * N + n) * K * esize;
    global const uchar *sg = s + (size_t)g * (N / 32) * (K / 32);
    float y = row_dot(fmt, wrow, sg, n, xrow, xsr, K, tables);
    if (out_bf16) ((global ushort *)out)[id] = f2bf(y);
    else ((global float *)out)[id] = y;
}

/* moe_combine_official: the exact-official epilogue (contracts/moe.official_epilogue) on the all-reduced
 * partials: from +0.0, bf16(slot) added in fp32 in ascending expert id, then bf16(shared), rounded to bf16. */
kernel void moe_combine_official(global const float *slots, global const float *shared, global const int *ids,
                                 global ushort *out, uint rows, uint topk, uint D) {
    size_t id = get_global_id(0);
    if (id >= (size_t)rows * D) return;
    size_t t = id / D, d = id % D;
    float acc = ascending_slots(slots, ids, t, topk, D, d, 1);
    acc = acc + round_bf(shared[t * D + d]);
    out[id] = f2bf(acc);
}
