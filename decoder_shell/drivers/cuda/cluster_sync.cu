// The cluster cycle's meeting points (cluster_cycle.cu has the whole design): its constants and kernel arguments,
// named and cluster barriers, the mbarriers that asynchronous copies and remote stores complete on, the stores into
// another block's shared memory, the watchdog every wait polls, and the stamps of traced launches.

#define CL_SIZE 16
#define CL_LANES (LANES / CL_SIZE)  // lanes of one block: 64, two per thread of a warp
#define CL_DETAIL 16  // stamps a step: 0 start, 1 stream values, 2 dots, 3 cluster barrier, 4 exchange, 5 Sinkhorn,
                      // 6 end; helper thread 0: 7 join passed, 8 its y stored, 9 its fold done,
                      // 10 every helper past the join; 15 thread 0's weight copy issued; CL_WARP_STAMPS builds: 11-13
                      // the last warp to reach the block barriers after C, after A and at the step's end (time rounded
                      // to 32 ns, low 5 bits: the warp), 14 the first warp after C; CL_WAIT_STAMP builds: 11 thread
                      // 0's stream values done, 12 thread 0 past the wait for the step's weights
#define CL_CHAINS 25                // dot-product chains of a row: the sum of squares (0) and 24 outputs (1 + o)

struct CArgs {
  const PStep* steps;
  int nsteps, ranks;
  u64* join;        // [nsteps] arrivals (every block once per step and launch)
  int* err;         // 0, or 1 + the step whose join timed out
  u64 timeout_ns;
  u64* trace;       // null, or [nsteps + 2] stamps (cluster 0, block 0, at each step start; the launch's end; its entry)
  u64* detail;      // null, or [nsteps + 1][blocks][CL_DETAIL] stamps inside each step (every block)
  u64 tag;          // this launch's number: 1, 2, ...
  int rank0, nlocal;  // the ranks this grid computes
  int groups;       // row groups per rank: clusters = nlocal x groups
  int mode;         // 0: the cycle; 1: synchronization only (cluster barriers and joins)
  int skip_step;    // watchdog test: the last cluster never arrives at join `skip_step` (-1: never)
  int pad_;
  const u64* tmaps;                // [nsteps][ranks][16]: each step's weights as a 2-D tensor map (rows o*4Q+u)
  const unsigned char* order;      // the all-reduces' first rank per element (contracts.allreduce.rank_order)
  const long long* order_off;      // [nsteps]: where step s's [rows * D] bytes start in `order`
  u64* ll;                         // null, or [2][ranks][ll_stride] flag-and-data words of the all-reduces (ll_join)
  long long ll_stride;             // words of one rank's region: the most rows of a step x D
  unsigned ll_seq0;                // the sequence number step 0's words carry (s: ll_seq0 + s; never 0)
  int pad3_;
};

__device__ __forceinline__ void bar_named(int id, int n) { asm volatile("bar.sync %0, %1;" :: "r"(id), "r"(n) : "memory"); }

__device__ __forceinline__ unsigned smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void mbar_init(u64* bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem_addr(bar)) : "memory");
}
// The block's mbarriers initialized by thread 0 (released at cluster scope), then a block and a cluster
// barrier: every block's exchange barriers exist before any block of the cluster pushes into them.
__device__ __forceinline__ void init_cluster_mbarriers(u64* const* bars, int n) {
  if (threadIdx.x == 0) {
    for (int i = 0; i < n; i++) mbar_init(bars[i]);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
  cluster_wait();
}
__device__ __forceinline__ void mbar_expect(u64* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(smem_addr(bar)), "r"(bytes) : "memory");
}
// The watchdog of every wait (polled every 16th round): true once another wait set err, or once this one
// outlasted timeout_ns (then it sets err to step + 1); the wait then returns and the launch ends.
__device__ __forceinline__ bool watchdog_stop(int* err, u64 t0, u64 timeout_ns, int step) {
  if (*(volatile int*)err) return true;
  if (globaltimer() - t0 <= timeout_ns) return false;
  atomicCAS(err, 0, step + 1);
  return true;
}
// One test of an mbarrier's phase; AT_CLUSTER: acquire at cluster scope (the exchange's mbarriers, whose
// transactions remote blocks complete: st.async releases at cluster scope), else the default (cta scope).
template <bool AT_CLUSTER>
__device__ __forceinline__ unsigned mbar_try_wait(u64* bar, unsigned parity) {
  unsigned done;
  if (AT_CLUSTER)
    asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n\tselp.u32 %0, 1, 0, p;\n\t}"
                 : "=r"(done) : "r"(smem_addr(bar)), "r"(parity) : "memory");
  else
    asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\tselp.u32 %0, 1, 0, p;\n\t}"
                 : "=r"(done) : "r"(smem_addr(bar)), "r"(parity) : "memory");
  return done;
}
// The exchange's wait (the local arrival publishes nothing, so it is mbar_expect's cta scope: cluster scope
// would be a gpu-scope fence), under the watchdog.
__device__ __forceinline__ void mbar_wait_cluster(u64* bar, unsigned parity, int* err, u64 timeout_ns, int step) {
  const u64 t0 = globaltimer();
  for (unsigned n = 0, done = 0; !done; n++) {
    done = mbar_try_wait<true>(bar, parity);
    if (!done && (n & 15) == 15 && watchdog_stop(err, t0, timeout_ns, step)) return;
  }
}
// Block `rank`'s address of this block's shared-memory location p (distributed shared memory).
__device__ __forceinline__ unsigned dsmem_addr(const void* p, unsigned rank) {
  unsigned ra;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(ra) : "r"(smem_addr(p)), "r"(rank));
  return ra;
}
// One 16-byte store into another block's shared memory (ra, a dsmem_addr), completing 16 bytes of the
// transaction on that block's mbarrier (rb): st.async, no fence and no barrier on either side.
__device__ __forceinline__ void push_dsmem(unsigned ra, float4 v, unsigned rb) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];"
               :: "r"(ra), "r"(__float_as_uint(v.x)), "r"(__float_as_uint(v.y)), "r"(__float_as_uint(v.z)),
                  "r"(__float_as_uint(v.w)), "r"(rb) : "memory");
}
__device__ __forceinline__ void mbar_wait(u64* bar, unsigned parity) {
  while (!mbar_try_wait<false>(bar, parity)) {
  }
}

// Traced launches: a warp's arrival at a block barrier, kept as the latest (atomicMax) or earliest (atomicMin) of
// the block's warps in a shared word: the time to 32 ns (%globaltimer's step on the H200) with the warp in the low
// five bits. The word is read and reset by thread 0 a barrier after its last writer, a barrier before its next.
#ifndef CL_WARP_STAMPS
#define CL_WARP_STAMPS 0  // diagnosis builds (1): traced launches record stamps 11-14 (in the default build, with the
                          // weight copy from another lane, the H200 ran M=2 at 0.563 against 0.542 ms)
#endif
__device__ __forceinline__ void arrival(u64* word, bool on, bool latest, int w) {
  if (!CL_WARP_STAMPS || !on || (threadIdx.x & 31)) return;
  const u64 k = (globaltimer() & ~31ull) | (u64)w;
  if (latest) atomicMax(reinterpret_cast<unsigned long long*>(word), k);
  else atomicMin(reinterpret_cast<unsigned long long*>(word), k);
}
__device__ __forceinline__ void arrival_take(u64* st, int k, u64* word, u64 reset) {
  if (!CL_WARP_STAMPS || !st) return;
  st[k] = *word;
  *word = reset;
}

#ifndef CL_SM_STAMP
#define CL_SM_STAMP 0  // diagnosis builds (1): traced launches record each block's SM (%smid + 1) at each step's start
                       // in stamp 14 (where a late cluster runs: its GPC, its TPC's partner)
#endif
static_assert(!(CL_SM_STAMP && CL_WARP_STAMPS), "stamp 14 holds either the SM or a warp's arrival");

#ifndef CL_WAIT_STAMP
#define CL_WAIT_STAMP 0  // diagnosis builds (1): traced launches record thread 0's own stream values done (stamp 11,
                         // before the block barrier) and thread 0 past the wait for the step's weights (12)
#endif
static_assert(!(CL_WAIT_STAMP && CL_WARP_STAMPS), "stamps 11 and 12 hold either thread 0's waits or warps' arrivals");
__device__ __forceinline__ unsigned smid() {
  unsigned v;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(v));
  return v;
}

__device__ __forceinline__ void dstamp(u64* st, int k) {
  if (st) st[k] = globaltimer();
}
// A stamp right after a barrier: bar.sync is issued as deferred blocking, so a clock read behind it may
// run before the barrier completes; reading a shared word first (and the clock only once that value is
// in a register) puts the stamp after it.
__device__ __forceinline__ void dstamp_after(u64* st, int k, const void* word) {
  if (!st) return;
  const unsigned dep = *(const volatile unsigned*)word;
  u64 v;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(v) : "r"(dep) : "memory");
  st[k] = v;
}

// A stamp once v is in a register (the clock read cannot be scheduled before the work that makes v).
__device__ __forceinline__ void dstamp_dep(u64* st, int k, float v) {
  if (!st) return;
  u64 c;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(c) : "f"(v) : "memory");
  st[k] = c;
}
