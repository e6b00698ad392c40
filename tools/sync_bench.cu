// The cluster cycle's synchronization primitives timed alone (tools/sync_bench.py): appended to the cluster
// cycle's own source (cluster_cycle.py's CLUSTER_SOURCES and what they build on), so each mode runs the kernel's functions on the
// kernel's grid (clusters of 16 blocks, one a rank). Every mode is a chain of `rounds` rounds; thread 0 of
// each block stamps %globaltimer before the first and after the last.
//   0 bar       a block barrier (__syncthreads)
//   1 cluster   the rank's barrier as the cycle takes it (arrive.relaxed, wait.acquire)
//   2 exchange  the partials' exchange: npieces 16-byte pieces from every block into each of the 16
//               (st.async onto the receiver's mbarrier), the mix threads' wait, then a block barrier
//   3 ll        the all-reduce's flag-and-data join (bf16 words): the helper warps (1..) publish their
//               elements of the rank's partial and fold_ll waits for every rank's words; a block barrier
//   4 rank+ll   the cycle's join: the rank's barrier, then 3
//   5 skeleton  2 then 4: one step of the cycle without its work
//   6 handoff   one word a rank: thread 0 of block 0 publishes it and waits for every rank's (the least a
//               cross-rank join can cost)
//   7 timer     %globaltimer reads back to back (cycles of clock64 a read: the cost of a stamp)
// The exchange in other forms (2's pieces, 2's receivers: threads 0-7 wait, then a block barrier):
//   8 words     flag-and-data: each piece as two 64-bit words (the round's number high, a value's bits low),
//               st.relaxed.cluster 16 bytes at a time, no mbarrier; warp 0 polls its words of every block
//   9 bulk      the block's pieces staged in its own shared memory, then one bulk copy (cp.async.bulk
//               shared::cluster) a receiver, completing on the receiver's mbarrier: 16 transactions a block
//  10 two hops  piece j of every block to block j (16 pieces in), whose warp 1 sums them in the contract's
//               adjacent-pair order and pushes the sum to all 16 (npieces in): 16 + npieces stores a block
//               received where 2 takes 16 x npieces
struct SArgs {
  int mode, rounds, npieces, rows;
  u64* stamps;        // [blocks][2]: thread 0's start and end
  u64* ll;            // [2 parities][ranks][stride] 32-bit words (bf16), zero before the launch
  long long stride;   // words of one rank's region
  int* err;
  u64 timeout_ns;
  long long* cycles;  // mode 7: clock64 cycles of `rounds` reads (block 0)
};

template <int Q, int NT, int R>
__device__ void sync_bench(const SArgs& a) {
  constexpr int NW = NT / 32, NE = (2 * Q * CL_LANES + (NW - 1) * 32 - 1) / ((NW - 1) * 32);
  __shared__ u64 xbar[2];
  __shared__ __align__(16) float recv[2][CL_SIZE][cl_partials_floats<Q, 2>()];  // (two rows' partials)
  __shared__ float xs[2][Q][CL_LANES];
  __shared__ __align__(16) u64 wrecv[2][CL_SIZE][64];        // 8: flag-and-data words (two rows' partials)
  __shared__ __align__(128) float stage[2][64];              // 9: the block's pieces, the bulk copies' source
  __shared__ __align__(16) float hop1[2][CL_SIZE][4], hop2[2][CL_SIZE][4];  // 10: piece b of every block; sums
  __shared__ u64 xbar2[2];
  const int t = threadIdx.x, w = t >> 5, lane = t & 31;
  const int b = (int)cluster_ctarank(), r = blockIdx.x / CL_SIZE, L0 = b * CL_LANES;
  {
    u64* const bars[4] = {&xbar[0], &xbar[1], &xbar2[0], &xbar2[1]};
    init_cluster_mbarriers(bars, 4);
  }
  MhcArgs A;
  A.D = Q * 1024;
  A.ring.dir = 1;
  const int nh = (NW - 1) * 32, ht = t - 32, n = a.rows * Q * CL_LANES;
  unsigned fp[(NE + 7) / 8];
  {
    unsigned first[NE];
#pragma unroll
    for (int j = 0; j < NE; j++) first[j] = (unsigned)((ht + j * nh) % R);
    pack_firsts<NE>(first, fp);
  }
  const int mode = a.mode;
  long long c0 = 0, c1 = 0;
  u64 tm = 0;
  if (t == 0) a.stamps[2 * blockIdx.x] = globaltimer();
  if (mode == 7) {
    if (t == 0 && blockIdx.x == 0) {
      c0 = clock64();
      for (int k = 0; k < a.rounds; k++) {
        u64 v;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(v) :: "memory");
        tm += v;
      }
      c1 = clock64();
      a.cycles[0] = c1 - c0;
      a.cycles[1] = (long long)tm;
    }
  } else if (mode == 6) {
    if (t == 0 && b == 0) {
      for (int k = 0; k < a.rounds && !*(volatile int*)a.err; k++) {
        unsigned* ll = reinterpret_cast<unsigned*>(a.ll) + (size_t)(k & 1) * R * a.stride;
        const unsigned seq = 1u + (unsigned)k;
        st_relaxed(ll + r * a.stride, Word<true>::make(seq, 0u));
        const u64 t0 = globaltimer();
        for (int rr = 0; rr < R; rr++)
          for (unsigned m = 0; !Word<true>::current(ld_relaxed(ll + rr * a.stride), seq); m++)
            if ((m & 15) == 15 && watchdog_stop(a.err, t0, a.timeout_ns, k)) break;
      }
    }
  } else {
    for (int k = 0; k < a.rounds; k++) {
      const int buf = k & 1;
      if (mode == 0) {
        __syncthreads();
        continue;
      }
      if (mode == 1) {
        cluster_arrive_relaxed();
        cluster_wait_any();
        continue;
      }
      if (mode == 2 || mode == 5) {
        if (t == 0) mbar_expect(&xbar[buf], CL_SIZE * a.npieces * 16);
        __syncthreads();  // (the cycle's expect is at the step's start, a block barrier before the pushes)
        for (int d = w; d < CL_SIZE; d += NW) {
          const unsigned rb = dsmem_addr(&xbar[buf], d), ra = dsmem_addr(&recv[buf][b][0], d);
          for (int j = lane; j < a.npieces; j += 32) push_dsmem(ra + 16 * j, make_float4(0.f, 0.f, 0.f, (float)k), rb);
        }
        if (t < 8) mbar_wait_cluster(&xbar[buf], (k >> 1) & 1, a.err, a.timeout_ns, k);
        if (mode == 2) {
          __syncthreads();
          continue;
        }
      }
      if (mode == 8) {
        const unsigned seq = 1u + (unsigned)k, nwords = 4 * a.npieces;
        for (int d = w; d < CL_SIZE; d += NW) {
          const unsigned ra = dsmem_addr(&wrecv[buf][b][0], d);
          for (int j = lane; j < 2 * a.npieces; j += 32)
            asm volatile("st.relaxed.cluster.shared::cluster.v2.b64 [%0], {%1, %2};"
                         :: "r"(ra + 16 * j), "l"((u64)seq << 32 | (2u * j)), "l"((u64)seq << 32 | (2u * j + 1)) : "memory");
        }
        if (w == 0) {  // lane l: words l and l + 32 (mod the words) of every block, as a Sinkhorn lane takes two chains
          const u64 t0 = globaltimer();
          for (int blk = 0; blk < CL_SIZE; blk++)
            for (unsigned i = 0; i < 2; i++) {
              const unsigned idx = (lane + 32 * i) % nwords, sa = smem_addr(&wrecv[buf][blk][idx]);
              for (unsigned m = 0;; m++) {
                u64 v;
                asm volatile("ld.relaxed.cluster.shared::cta.b64 %0, [%1];" : "=l"(v) : "r"(sa) : "memory");
                if ((unsigned)(v >> 32) == seq) break;
                if ((m & 15) == 15 && watchdog_stop(a.err, t0, a.timeout_ns, k)) break;
              }
            }
        }
        __syncthreads();
        continue;
      }
      if (mode == 9) {
        if (t == 0) mbar_expect(&xbar[buf], CL_SIZE * a.npieces * 16);
        __syncthreads();
        if (w == 0) {
          if (lane < a.npieces) reinterpret_cast<float4*>(stage[buf])[lane] = make_float4(0.f, 0.f, 0.f, (float)k);
          asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
          __syncwarp();
          if (lane < CL_SIZE)
            asm volatile("cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                         :: "r"(dsmem_addr(&recv[buf][b][0], lane)), "r"(smem_addr(stage[buf])), "r"(16 * a.npieces),
                            "r"(dsmem_addr(&xbar[buf], lane)) : "memory");
        }
        if (t < 8) mbar_wait_cluster(&xbar[buf], (k >> 1) & 1, a.err, a.timeout_ns, k);
        __syncthreads();
        continue;
      }
      if (mode == 10) {
        if (t == 0) {
          if (b < a.npieces) mbar_expect(&xbar[buf], CL_SIZE * 16);
          mbar_expect(&xbar2[buf], a.npieces * 16);
        }
        __syncthreads();
        if (w == 0 && lane < a.npieces)
          push_dsmem(dsmem_addr(&hop1[buf][b][0], lane), make_float4(1.f, 2.f, 3.f, (float)k), dsmem_addr(&xbar[buf], lane));
        if (w == 1 && b < a.npieces && lane < CL_SIZE) {
          mbar_wait_cluster(&xbar[buf], (k >> 1) & 1, a.err, a.timeout_ns, k);
          float4 v[CL_SIZE];
#pragma unroll
          for (int j = 0; j < CL_SIZE; j++) v[j] = *reinterpret_cast<const float4*>(&hop1[buf][j][0]);
#pragma unroll
          for (int st = 1; st < CL_SIZE; st <<= 1)
#pragma unroll
            for (int j = 0; j < CL_SIZE; j += 2 * st)
              v[j] = make_float4(ADD(v[j].x, v[j + st].x), ADD(v[j].y, v[j + st].y), ADD(v[j].z, v[j + st].z), ADD(v[j].w, v[j + st].w));
          push_dsmem(dsmem_addr(&hop2[buf][b][0], lane), v[0], dsmem_addr(&xbar2[buf], lane));
        }
        if (t < 8) mbar_wait_cluster(&xbar2[buf], (k >> 1) & 1, a.err, a.timeout_ns, k);
        __syncthreads();
        continue;
      }
      // 3, 4, 5: the join as the cycle's helpers take it (warp 0 stands for the Sinkhorn warp)
      if (mode != 3) cluster_arrive_relaxed();
      if (w >= 1) {
        if (mode != 3) cluster_wait_any();
        const unsigned seq = 1u + (unsigned)k;
        unsigned* ll = reinterpret_cast<unsigned*>(a.ll) + (size_t)buf * R * a.stride;
#pragma unroll
        for (int j = 0; j < NE; j++)
          if (ht + j * nh < n) st_relaxed(ll + r * a.stride + elem_of<Q>(ht + j * nh, L0, 0), Word<true>::make(seq, 0u));
        fold_ll<Q, true, R, NE>(A, ll, a.stride, seq, fp, nullptr, 0, n, L0, xs, ht, nh, false, a.err, a.timeout_ns, k);
      } else if (mode != 3) {
        cluster_wait_any();
      }
      __syncthreads();
    }
  }
  if (t == 0) a.stamps[2 * blockIdx.x + 1] = globaltimer();
  // no block leaves while another may still push into its shared memory
  cluster_arrive();
  cluster_wait();
}
