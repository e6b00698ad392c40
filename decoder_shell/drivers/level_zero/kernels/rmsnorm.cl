/* The fused RMSNorm collapse (geometry fused_norm, vLLM's hc_pre with norm_weight), the OpenCL C twin
 * of contracts/rmsnorm.py: y = bf16((x * r) * w), r = 1 / sqrt(lane_sum(x*x) / D + eps), over the
 * bf16 collapse x. One work-group per row; y may be x (each item rewrites only what it read). */

static inline void rmsnorm_row(global const ushort *x, global const float *w, global ushort *y, uint D,
                               float eps, local float *lanes) {
    const uint lid = get_local_id(0), wg = get_local_size(0);
    for (uint l = lid; l < LANES; l += wg) {
        float acc = 0.0f;
        for (uint d = l; d < D; d += LANES) { const float v = bf2f(x[d]); acc = acc + v * v; }
        lanes[l] = acc;
    }
    const float r = 1.0f / sqrt(lane_tree(lanes) / (float)D + eps);
    for (uint d = lid; d < D; d += wg) y[d] = f2bf((bf2f(x[d]) * r) * w[d]);
}

kernel void rmsnorm_bf16(global const ushort *x, global const float *w, global ushort *y, uint D, float eps) {
    local float lanes[LANES];
    const size_t row = get_group_id(0);
    rmsnorm_row(x + row * D, w, y + row * D, D, eps, lanes);
}
