/* Ring all-reduce over emulated ranks: contracts/allreduce.py, one work-item per element.
 *
 * x and out hold every rank's tensor back to back ([ranks, n]). Each element's fold order comes
 * from the RingContract (segments, chunking, owner + offset, direction); "hop" rounds to bf16 after
 * every addition, otherwise the fp32 sum is rounded once. Every rank's out gets the same bits.
 * per_chunk: max_chunk_bytes / itemsize (at least 1), or 0 when chunks are unbounded.
 */

static inline int fold_start(uint i, uint n, uint ranks, uint segments, uint chunks_per_rank,
                      uint per_chunk, int offset) {
    uint seg = (n + segments - 1) / segments;
    uint lo = (i / seg) * seg;
    uint m = min(lo + seg, n) - lo;
    uint chunks = max(chunks_per_rank * ranks, 1u);
    if (per_chunk) chunks = max(chunks, (m + per_chunk - 1) / per_chunk);
    chunks = (chunks + ranks - 1) / ranks * ranks;
    uint size = (m + chunks - 1) / chunks;
    uint owner = ((i - lo) / size) / (chunks / ranks);
    return pymod((int)owner + offset, (int)ranks);
}

#define DEFINE_ALLREDUCE(NAME, T, LOAD, STORE)                                                   \
kernel void NAME(global const T *x, global T *out, uint n, uint ranks, uint segments,           \
                 uint chunks_per_rank, uint per_chunk, int offset, int direction, int hop) {    \
    uint i = get_global_id(0);                                                                  \
    if (i >= n) return;                                                                         \
    int start = fold_start(i, n, ranks, segments, chunks_per_rank, per_chunk, offset);          \
    float acc = LOAD(x[(size_t)start * n + i]);                                                 \
    for (int t = 1; t < (int)ranks; ++t) {                                                      \
        int r = pymod(start + t * direction, (int)ranks);                                       \
        acc = acc + LOAD(x[(size_t)r * n + i]);                                                 \
        if (hop) acc = round_bf(acc);                                                           \
    }                                                                                           \
    T v = STORE(acc);                                                                           \
    for (uint r = 0; r < ranks; ++r) out[(size_t)r * n + i] = v;                                \
}

#define IDENT(v) (v)
DEFINE_ALLREDUCE(allreduce_bf16, ushort, bf2f, f2bf)
DEFINE_ALLREDUCE(allreduce_f32, float, IDENT, IDENT)
