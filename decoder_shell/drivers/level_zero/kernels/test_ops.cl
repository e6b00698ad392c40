/* Element-wise probes of the building blocks in common.cl, for the kernel-vs-contract tests. */

kernel void probe_pexp(global const float *x, global float *y, uint n) {
    size_t i = get_global_id(0);
    if (i < n) y[i] = pexp(x[i]);
}

kernel void probe_psigmoid(global const float *x, global float *y, uint n) {
    size_t i = get_global_id(0);
    if (i < n) y[i] = psigmoid(x[i]);
}

kernel void probe_to_bf16(global const float *x, global ushort *y, uint n) {
    size_t i = get_global_id(0);
    if (i < n) y[i] = f2bf(x[i]);
}

kernel void probe_div_sqrt(global const float *a, global const float *b, global float *q,
                           global float *s, uint n) {
    size_t i = get_global_id(0);
    if (i < n) { q[i] = a[i] / b[i]; s[i] = sqrt(a[i]); }
}

/* lane_sum of each row of x [rows, n]: one work-group per row. */
kernel void probe_lane_sum(global const float *x, global float *y, uint n) {
    local float lanes[LANES];
    const uint lid = get_local_id(0), wg = get_local_size(0);
    const size_t row = get_group_id(0);
    for (uint l = lid; l < LANES; l += wg) {
        float acc = 0.0f;
        for (uint i = l; i < n; i += LANES) acc = acc + x[row * n + i];
        lanes[l] = acc;
    }
    float total = lane_tree(lanes);
    if (lid == 0) y[row] = total;
}

/* rmsnorm.cl's row on each row of x [rows, n] (eps in a one-element buffer): one work-group per row. */
kernel void probe_rmsnorm(global const ushort *x, global const float *w, global const float *eps,
                          global ushort *y, uint n) {
    local float lanes[LANES];
    const size_t row = get_group_id(0);
    rmsnorm_row(x + row * n, w, y + row * n, n, eps[0], lanes);
}

/* Spins while flag[0] is 0: a kernel that does not end, for the deadline test (tests/test_deadline.py). */
kernel void probe_spin(global volatile const int *flag) {
    while (flag[0] == 0) {}
}
