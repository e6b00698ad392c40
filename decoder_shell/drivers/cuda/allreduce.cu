// The ring all-reduce in the contract's order (contracts/allreduce.py), its kernel over fixed-address partials, and
// the small kernels a graph needs beside it (the epoch counter, the empty node, copies). Appended to kernels.cu.

// ---- ring all-reduce contract (contracts/allreduce.py) -------------------------------------------
struct Ring {
  int n, ranks, cpr, per, offset, dir, hop, segments, is_bf16;
};

__device__ __forceinline__ int pmod(int a, int m) { int r = a % m; return r < 0 ? r + m : r; }
__device__ __forceinline__ int cdiv(int a, int b) { return (a + b - 1) / b; }

// owner rank of element e (the rank that ends a ring step holding its chunk fully reduced).
// One segment (the common contract) skips the segment's division: its bounds are the whole range.
__device__ __forceinline__ int ring_owner(const Ring& c, int e) {
  int lo = 0, m = c.n;
  if (c.segments > 1) {
    const int seg = cdiv(c.n, c.segments), s = e / seg;
    lo = s * seg;
    m = min(seg, c.n - lo);
  }
  int chunks = c.cpr * c.ranks;
  if (c.per) chunks = max(chunks, cdiv(m, c.per));
  chunks = cdiv(chunks, c.ranks) * c.ranks;
  int size = cdiv(m, chunks);
  return ((e - lo) / size) / (chunks / c.ranks);
}

__device__ __forceinline__ float ld(const void* p, size_t e, int is_bf16) {
  return is_bf16 ? bf2f(((const bf16_t*)p)[e]) : ((const float*)p)[e];
}

// Every rank's value is loaded first (static indices: the pointer table stays in registers, and
// the R independent loads are in flight together), then folded in the contract's order, picking
// each step's rank with a select chain rather than a dynamic (local-memory) index. The loads and the
// fold are separate functions so that a caller can issue the loads early and fold later.
__device__ __forceinline__ void ring_load(const void* const* in, const Ring& c, int e, float (&v)[MAXR]) {
#pragma unroll
  for (int q = 0; q < MAXR; q++) v[q] = q < c.ranks ? ld(in[q], e, c.is_bf16) : 0.0f;
}
// One step of the fold: add the next rank's value; hop accumulation rounds to the data dtype each step.
__device__ __forceinline__ float fold_step(float acc, float x, const Ring& c) {
  acc = ADD(acc, x);
  return c.hop && c.is_bf16 ? round_bf(acc) : acc;
}
// The fold on the R values already in the contract's order (v[t]: the rank added at step t); N is
// the array's size (MAXR, or the ranks where a kernel is built for its cycle's count).
template <int N>
__device__ __forceinline__ float ring_fold_ordered(const float (&v)[N], const Ring& c) {
  float acc = v[0];
#pragma unroll
  for (int t = 1; t < N; t++)
    if (t < c.ranks) acc = fold_step(acc, v[t], c);
  return c.is_bf16 ? round_bf(acc) : acc;
}
__device__ __forceinline__ float ring_fold_loaded(const float (&v)[MAXR], const Ring& c, int e) {
  // step t folds rank (start + t * dir) mod R: dir is +1 or -1, so r walks by one and wraps
  int r = pmod(ring_owner(c, e) + c.offset, c.ranks);
  float acc = 0.0f;
#pragma unroll
  for (int t = 0; t < MAXR; t++) {
    if (t < c.ranks) {
      if (t > 0) {
        r += c.dir;
        r = r == c.ranks ? 0 : r < 0 ? c.ranks - 1 : r;
      }
      float x = v[0];
#pragma unroll
      for (int q = 1; q < MAXR; q++) x = q == r ? v[q] : x;
      acc = t == 0 ? x : fold_step(acc, x, c);
    }
  }
  return c.is_bf16 ? round_bf(acc) : acc;
}
__device__ __forceinline__ float ring_fold(const void* const* in, const Ring& c, int e) {
  float v[MAXR];
  ring_load(in, c, e, v);
  return ring_fold_loaded(v, c, e);
}

__device__ __forceinline__ void st(void* p, size_t e, float v, int is_bf16) {
  if (is_bf16) ((bf16_t*)p)[e] = f2bf(v); else ((float*)p)[e] = v;
}

struct ArArgs {
  const void* in[MAXR];   // every rank's input (partial sums), rank order
  void* out[MAXR];        // every rank's output (peers' outputs for the gather step)
  Ring ring;
  int rank;               // whose output this launch writes
  int lo, hi;             // element range of this launch (a segment, or everything)
  int mode;               // 0: fold everything; 1: fold owned chunks only; 2: gather peers' chunks
  u64* flag_out[MAXR];    // one process per rank: this rank's arrival slot in every rank's memory
  const u64* flag_in;     // ... and the ranks' arrival slots in this rank's memory (null: emulated ranks)
  const u64* epoch;       // this rank's epoch counter: the tag its arrivals carry
};

// Arrival at a collective, one process per rank: block 0 writes the epoch into its slot in every
// rank's memory (pushed, so that waiting polls local memory), then every block waits until each
// rank's slot holds at least this epoch. Slots are 64-bit and only grow: one per (collective, rank),
// tagged with the epoch, so no arrival from another epoch or collective can be mistaken for this one.
__device__ __forceinline__ void arrive_and_wait(const ArArgs& a) {
  if (threadIdx.x == 0) {
    const u64 e = *a.epoch;
    if (blockIdx.x == 0) {
      __threadfence_system();
      for (int q = 0; q < a.ring.ranks; q++) st_release_sys(a.flag_out[q], e);
    }
    for (int q = 0; q < a.ring.ranks; q++)
      while (ld_acquire_sys(a.flag_in + q) < e) {}
  }
  __syncthreads();
}

// One-shot all-reduce: this rank reads every peer's input in the contract's fixed order.
// mode 1/2 split it into a reduce-scatter and an all-gather step (the ring's structure).
extern "C" __global__ void __launch_bounds__(256) allreduce_kernel(const ArArgs a) {
  pdl_wait();
  if (a.flag_in) arrive_and_wait(a);
  pdl_trigger();
  for (int e = a.lo + blockIdx.x * blockDim.x + threadIdx.x; e < a.hi; e += gridDim.x * blockDim.x) {
    if (a.mode == 0) {
      st(a.out[a.rank], e, ring_fold(a.in, a.ring, e), a.ring.is_bf16);
    } else {
      int owner = ring_owner(a.ring, e);
      if (a.mode == 1 && owner == a.rank) {
        st(a.out[a.rank], e, ring_fold(a.in, a.ring, e), a.ring.is_bf16);
      } else if (a.mode == 2 && owner != a.rank) {
        if (a.ring.is_bf16) ((bf16_t*)a.out[a.rank])[e] = ((const bf16_t*)a.out[owner])[e];
        else ((float*)a.out[a.rank])[e] = ((const float*)a.out[owner])[e];
      }
    }
  }
}

// Head of a rank's cycle when ranks are processes: the epoch its arrivals are tagged with.
extern "C" __global__ void epoch_kernel(u64* epoch) { *epoch += 1; }

extern "C" __global__ void empty_kernel() {}

// The `copy` deletion bound: a command replaced by copies of its expected outputs (up to 4 tensors).
struct CopyArgs {
  unsigned char* dst[4];
  const unsigned char* src[4];
  unsigned long long nbytes[4];
  int count;
};
extern "C" __global__ void copy_kernel(const CopyArgs a) {
  for (int c = 0; c < a.count; c++)
    for (unsigned long long i = blockIdx.x * blockDim.x + threadIdx.x; i < a.nbytes[c]; i += gridDim.x * blockDim.x)
      a.dst[c][i] = a.src[c][i];
}
