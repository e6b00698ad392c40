// decoder-shell cluster cycle: the whole cycle as one resident kernel of 16-block thread-block
// clusters, one cluster per (rank, row group). Appended to kernels.cu + persistent.cu (PStep, the
// step table, globaltimer, ld_relaxed); the arithmetic is kernels.cu's (sinkhorn_lane, psigmoid,
// ring_fold, f2bf) in the contracts' order. cluster_cycle.py encodes the table and launches it.
//
// Why clusters: within a phase the only serial chain of the replay is per (rank, row): streams ->
// projection dots -> mixes -> Sinkhorn -> the next streams. A cluster holds one such chain (or a few
// rows of one rank) for the whole cycle: block b owns lanes 64b .. 64b+63 of the contract's 1024, so
// the stream values it makes at one boundary are the residual it reads at the next (kept in shared
// memory, never re-read), its partial dot products meet the other 15 blocks' through distributed
// shared memory behind one cluster barrier (no grid-wide barrier, no L2 round trip), and every block
// then finishes the mixes and the Sinkhorn itself. The next boundary's weights are requested (one
// tensor-map copy into shared memory) as soon as every warp is past its dot products, so they land
// during the exchange and the Sinkhorn.
//
// Per step s (one mHC boundary; its all-reduce folded in), every block:
//   C  stream values of s for its lanes from x (folded during B(s-1)), the residual (its own shared
//      memory) and post/comb (made in B(s-1)); streams written;
//   A  the lanes' dot products of the 24 (head: 4) outputs and the sum of squares, the 64-lane tree
//      in each warp, the block's partials into shared memory;
//   X  cluster barrier, the weights of s+1 requested; every block reads all 16 blocks' partials
//      (distributed shared memory) and finishes the 16-block tree: the mixes of its rows;
//   B  warps 0..: Sinkhorn (two rows a warp) -> post/comb of s+1; the other warps: pre and the
//      collapse y of its columns, an arrival on the step's join counter, then (after every block of
//      every rank arrived: the all-reduce's join) the fold of s+1's all-reduce for its columns.
// The join keeps the cycle's order: an all-reduce reads the partial sums only after every rank has
// produced the sub-block input they stand for (y of the boundary before). Counters are 64-bit and
// only grow (the launch's tag x the grid's blocks); a wait that outlasts timeout_ns sets err and
// every later wait returns at once, so the launch ends (the host reports one line), never a hung GPU.

#define CL_SIZE 16
#define CL_LANES (LANES / CL_SIZE)  // lanes of one block: 64, two per thread of a warp
#define CL_THREADS 256
#define CL_WARPS (CL_THREADS / 32)

struct CArgs {
  const PStep* steps;
  int nsteps, ranks;
  u64* join;        // [nsteps] arrivals (every block once per step and launch)
  int* err;         // 0, or 1 + the step whose join timed out
  u64 timeout_ns;
  u64* trace;       // null, or [nsteps + 1] stamps (cluster 0, block 0, at each step start)
  u64* detail;      // null, or [nsteps + 1][8] stamps inside each step (same block)
  u64 tag;          // this launch's number: 1, 2, ...
  int rank0, nlocal;  // the ranks this grid computes
  int groups;       // row groups per rank: clusters = nlocal x groups
  int mode;         // 0: the cycle; 1: synchronization only (cluster barriers and joins)
  int skip_step;    // watchdog test: the last cluster never arrives at join `skip_step` (-1: never)
  int pad_;
  const u64* tmaps;                // [nsteps][ranks][16]: each step's weights as a 2-D tensor map (rows o*4Q+u)
  const unsigned char* order;      // the all-reduces' first rank per element (contracts.allreduce.rank_order)
  const long long* order_off;      // [nsteps]: where step s's [rows * D] bytes start in `order`
  int box_rows;                    // rows of one tensor-map box (the weights come in nout*4Q / box_rows boxes)
  int pad2_;
};

__device__ __forceinline__ void bar_named(int id, int n) { asm volatile("bar.sync %0, %1;" :: "r"(id), "r"(n) : "memory"); }

// Warp w's chains: i = 0..2 are outputs chain_of(w, i) - 1 (when <= nout), and warp 0 also sums squares.
__device__ __forceinline__ int chain_of(int w, int i) { return w == 0 ? 8 * (i + 1) : w + 8 * i; }

#ifndef CL_LOOKAHEAD
#define CL_LOOKAHEAD 3  // steps ahead whose weights the copy engine prefetches into L2 (0: none)
#endif

__device__ __forceinline__ unsigned smem_addr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void mbar_init(u64* bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem_addr(bar)) : "memory");
}
__device__ __forceinline__ void mbar_expect(u64* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(smem_addr(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_wait(u64* bar, unsigned parity) {
  unsigned done = 0;
  while (!done)
    asm volatile("{\n\t.reg .pred p;\n\tmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\tselp.u32 %0, 1, 0, p;\n\t}"
                 : "=r"(done) : "r"(smem_addr(bar)), "r"(parity) : "memory");
}

// This block's weights of step s (rank r) into shared memory by the copy engine: the step's tensor map
// views fn [nout][4Q*1024] as rows o*4Q+u of 1024 lanes, and each box is box_rows rows of the block's 64
// lanes, landing as wsm[o][u][64]; completion on the block's mbarrier. One thread issues nout*4Q/box_rows
// copies (per-lane bulk copies were issued one lane at a time through uniform registers, ~500
// instructions a warp a step on the critical path; per-thread loads of 96 KiB stalled it behind them).
template <int Q>
__device__ __forceinline__ void fetch_weights(const CArgs& p, int s, int nout, int r, int L0, float* wsm, u64* bar) {
  const unsigned char* tm = (const unsigned char*)(p.tmaps + ((size_t)s * p.ranks + r) * 16);
  const int rows = nout * HC * Q, boxes = (rows + p.box_rows - 1) / p.box_rows;
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // every warp's reads of wsm came first
  mbar_expect(bar, rows * CL_LANES * 4);
  for (int k = 0; k < boxes; k++)
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
                 :: "r"(smem_addr(wsm + (size_t)k * p.box_rows * CL_LANES)), "l"(tm), "r"(L0), "r"(k * p.box_rows),
                    "r"(smem_addr(bar)) : "memory");
}

// This block's 1/16 of rank r's weights of step `st` into L2 (one bulk prefetch by the copy engine).
template <int Q>
__device__ __forceinline__ void prefetch_l2(const PStep& st, int r, int b) {
  const unsigned bytes = st.nout * HC * Q * LANES * 4 / CL_SIZE;
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" :: "l"((const char*)st.mh[r].fn + (size_t)b * bytes), "r"(bytes) : "memory");
}

// The step's rows for cluster group g: [row0, row0 + n).
__device__ __forceinline__ void rows_of(int rows, int groups, int g, int& row0, int& n) {
  const int per = (rows + groups - 1) / groups;
  row0 = g * per;
  n = max(0, min(rows - row0, per));
}

// x of step s for this block's columns of its rows: the all-reduce folded (every rank's partial read
// in the contract's order, starting from the rank the host took from contracts.allreduce.rank_order, the
// same additions and roundings: ring_fold_ordered; the output written) or read from the buffer; threads
// [t0, t0 + nt).
template <int Q>
__device__ __forceinline__ void fold_x(const MhcArgs& a, int fused, const unsigned char* first, int row0, int nrows,
                                       int L0, float (*xs)[Q][CL_LANES], int t0, int nt) {
  constexpr int B = 4;  // elements a thread folds at once: their loads are all in flight together
  const Ring& c = a.ring;
  const int n = nrows * Q * CL_LANES;
  for (int i0 = threadIdx.x - t0; i0 < n; i0 += B * nt) {
    int e[B];
    float v[B][MAXR];
#pragma unroll
    for (int k = 0; k < B; k++) {
      const int i = i0 + k * nt;
      const int mi = i / (Q * CL_LANES), q = (i / CL_LANES) % Q, l = i % CL_LANES;
      e[k] = i < n ? (row0 + mi) * a.D + L0 + l + q * LANES : -1;
      if (e[k] < 0) continue;
      if (fused) {
        int rr = first[e[k]];
#pragma unroll
        for (int t = 0; t < MAXR; t++) {
          if (t < c.ranks) {
            v[k][t] = ld(a.peers[rr], e[k], c.is_bf16);
            rr += c.dir;
            rr = rr == c.ranks ? 0 : rr < 0 ? c.ranks - 1 : rr;
          }
        }
      } else {
        v[k][0] = ld(a.x, e[k], a.x_is_bf16);
      }
    }
#pragma unroll
    for (int k = 0; k < B; k++) {
      if (e[k] < 0) continue;
      float x = v[k][0];
      if (fused) {
        x = ring_fold_ordered(v[k], c);
        st(a.ar_out, e[k], x, c.is_bf16);
      }
      const int i = i0 + k * nt;
      xs[i / (Q * CL_LANES)][(i / CL_LANES) % Q][i % CL_LANES] = x;
    }
  }
}

// The partial sums the next step's all-reduce folds, for this cluster's rows, into L2 (bulk prefetches
// by the copy engine): a partial reaches its reader from L2, as one a producer has just written would.
__device__ __forceinline__ void prefetch_partials(const MhcArgs& a, int fused, int row0, int nrows) {
  if (!fused || nrows <= 0) return;
  const int isz = a.ring.is_bf16 ? 2 : 4;
  const unsigned bytes = (unsigned)(nrows * a.D * isz) & ~15u;
  for (int q = 0; q < a.ring.ranks && bytes; q++)
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" :: "l"((const char*)a.peers[q] + (size_t)row0 * a.D * isz),
                 "r"(bytes) : "memory");
}

__device__ __forceinline__ void dstamp(u64* st, int k) {
  if (st) st[k] = globaltimer();
}

template <int Q, int RPC>
__device__ void cluster_cycle(const CArgs& p) {
  __shared__ __align__(16) float sv[RPC][HC * Q][CL_LANES];   // this block's stream values (fp32 of the bf16), element order u
  __shared__ float xs[RPC][Q][CL_LANES];        // x of the next step (folded)
  __shared__ float part[2][RPC][25];            // the block's partials: [0] sum of squares, [1 + o] output o
  __shared__ float mix[RPC][24];
  __shared__ float pc[RPC][HC + HC * HC];       // post, comb for the next step
  __shared__ float pre_s[RPC][HC];
  __shared__ MhcArgs args_s[2];                 // step s's arguments for this rank at [s & 1]
  __shared__ int hdr_s[2][10];                  // step s's header (PStep's first ten ints) at [s & 1]
  __shared__ u64 wbar;                          // the block's weights of the step have landed
  extern __shared__ __align__(128) float wsm[];  // [24][HC * Q][64]: this block's weights of the step
  const int t = threadIdx.x, w = t >> 5, lane = t & 31;
  const int b = (int)cluster_ctarank(), cid = blockIdx.x / CL_SIZE;
  const int r = p.rank0 + cid / p.groups, g = cid % p.groups;
  const int L0 = b * CL_LANES;
  const bool work = p.mode == 0;
  const bool stamper = cid == 0 && b == 0 && t == 0;
  const bool skipper = cid == (int)gridDim.x / CL_SIZE - 1;
  const u64 target = p.tag * (u64)gridDim.x;
  unsigned wphase = 0;
  bool wpending = false;
  if (t == 0) mbar_init(&wbar);
  __syncthreads();

  // prologue: step 0's arguments, x and weights
  {
    const PStep& st = p.steps[0];
    copy_args_range(&args_s[0], st.mh[r], 0, CL_THREADS);
    if (t < 10) hdr_s[0][t] = (&st.kind)[t];
    __syncthreads();
    int row0, nrows;
    rows_of(st.rows, p.groups, g, row0, nrows);
    if (work) {
      if (t == 0) fetch_weights<Q>(p, 0, st.nout, r, L0, wsm, &wbar);
      wpending = true;
      if (t == 0)
        for (int k = 1; k < CL_LOOKAHEAD && k < p.nsteps; k++) prefetch_l2<Q>(p.steps[k], r, b);
      fold_x<Q>(args_s[0], st.fused, p.order + p.order_off[0], row0, nrows, L0, xs, 0, CL_THREADS);
    }
    __syncthreads();
  }
  for (int s = 0; s < p.nsteps; s++) {
    // the header from shared memory (copied during the step before): no global load at the step's start
    const int* hd = hdr_s[s & 1];
    const MhcArgs& A = args_s[s & 1];
    const int op = hd[1], nout = hd[3], buf = s & 1;
    const bool carried = hd[6] == s - 1 && s > 0;
    const int nxt_nout = s + 1 < p.nsteps && t == 0 ? p.steps[s + 1].nout : 0;  // (thread 0 issues the fetch)
    int row0, nrows;
    rows_of(hd[5], p.groups, g, row0, nrows);
    if (stamper && p.trace) p.trace[s] = globaltimer();
    u64* ds = stamper && p.detail ? p.detail + (size_t)s * 8 : nullptr;
    dstamp(ds, 0);
    // C: stream values of this step for the block's columns
    if (work) {
      for (int i = t; i < nrows * Q * CL_LANES; i += CL_THREADS) {
        const int mi = i / (Q * CL_LANES), q = (i / CL_LANES) % Q, l = i % CL_LANES;
        const int m = row0 + mi, d = L0 + l + q * LANES;
        const float x = xs[mi][q][l];
        float res[HC], pin[HC], cb[HC * HC];
        if (op != OP_PRE) {
#pragma unroll
          for (int j = 0; j < HC; j++) res[j] = carried ? sv[mi][j * Q + q][l] : bf2f(A.residual[((size_t)m * HC + j) * A.D + d]);
#pragma unroll
          for (int k = 0; k < HC; k++) pin[k] = carried ? pc[mi][k] : A.post_in[m * HC + k];
#pragma unroll
          for (int e = 0; e < HC * HC; e++) cb[e] = carried ? pc[mi][HC + e] : A.comb_in[m * HC * HC + e];
        }
#pragma unroll
        for (int k = 0; k < HC; k++) {
          float v = x;
          if (op != OP_PRE) {
            float mx = MUL(cb[0 * HC + k], res[0]);
            mx = ADD(mx, MUL(cb[1 * HC + k], res[1]));
            mx = ADD(mx, MUL(cb[2 * HC + k], res[2]));
            mx = ADD(mx, MUL(cb[3 * HC + k], res[3]));
            v = ADD(MUL(pin[k], x), mx);
          }
          const bf16_t bv = f2bf(v);
          A.streams[((size_t)m * HC + k) * A.D + d] = bv;
          sv[mi][k * Q + q][l] = bf2f(bv);
        }
      }
    }
    __syncthreads();
    dstamp(ds, 1);
    // A: dot products of the block's 64 lanes (two a thread), warp w's chains over every row, then
    // the 64-lane tree; the next step's weights are requested as soon as the warp's reads are done
    if (work) {
      if (wpending) {
        mbar_wait(&wbar, wphase);
        wphase ^= 1;
      }
      float a0[RPC][4], a1[RPC][4];
#pragma unroll
      for (int mi = 0; mi < RPC; mi++)
#pragma unroll
        for (int i = 0; i < 4; i++) a0[mi][i] = a1[mi][i] = 0.0f;
#pragma unroll
      for (int u = 0; u < HC * Q; u++) {
        float2 wv[3];
#pragma unroll
        for (int i = 0; i < 3; i++)
          if (chain_of(w, i) <= nout)
            wv[i] = *reinterpret_cast<const float2*>(&wsm[((size_t)(chain_of(w, i) - 1) * HC * Q + u) * CL_LANES + 2 * lane]);
#pragma unroll
        for (int mi = 0; mi < RPC; mi++) {
          if (mi < nrows) {
            const float2 s2 = *reinterpret_cast<const float2*>(&sv[mi][u][2 * lane]);
#pragma unroll
            for (int i = 0; i < 3; i++)
              if (chain_of(w, i) <= nout) {
                a0[mi][i] = ADD(a0[mi][i], MUL(s2.x, wv[i].x));
                a1[mi][i] = ADD(a1[mi][i], MUL(s2.y, wv[i].y));
              }
            if (w == 0) {
              a0[mi][3] = ADD(a0[mi][3], MUL(s2.x, s2.x));
              a1[mi][3] = ADD(a1[mi][3], MUL(s2.y, s2.y));
            }
          }
        }
      }

#pragma unroll
      for (int mi = 0; mi < RPC; mi++) {
        if (mi < nrows) {
#pragma unroll
          for (int i = 0; i < 4; i++) {
            const int c = i < 3 ? chain_of(w, i) : 0;
            if (i < 3 ? c <= nout : w == 0) {
              float v = ADD(a0[mi][i], a1[mi][i]);  // lanes 2*lane, 2*lane+1: the tree's first level
#pragma unroll
              for (int off = 1; off < 32; off <<= 1) v = ADD(v, __shfl_down_sync(0xffffffffu, v, off));
              if (lane == 0) part[buf][mi][c] = v;
            }
          }
        }
      }
    }
    dstamp(ds, 2);
    // X: every block's partials through distributed shared memory, the 16-block tree, the mixes
#ifdef CL_RELAXED_ARRIVE  // timing ablation: no release at the cluster barrier (the exchange may then read stale partials)
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
#else
    cluster_arrive();
#endif
    cluster_wait();
    dstamp(ds, 3);
    // every warp of this block is past its dot products: the next step's weights may land in wsm
#ifndef CL_NO_FETCH  // timing ablation: the first step's weights stay (inexact)
    wpending = work && s + 1 < p.nsteps;
    if (wpending && t == 0) fetch_weights<Q>(p, s + 1, nxt_nout, r, L0, wsm, &wbar);
#else
    wpending = false;
#endif
    if (work) {
      // a thread per (row, output): the 16 blocks' partials of the output and of the sum of squares
      // loaded at once (distributed shared memory), the 16-block adjacent-pair tree in registers
      const int npairs = nrows * (nout + 1);
      const float N = (float)(HC * A.D);
      if (t < npairs) {
        const int mi = t / (nout + 1), c = t % (nout + 1);
        float v[CL_SIZE], q[CL_SIZE];
#pragma unroll
        for (int j = 0; j < CL_SIZE; j++) {
          v[j] = ld_dsmem(&part[buf][mi][c], j);
          q[j] = ld_dsmem(&part[buf][mi][0], j);
        }
#pragma unroll
        for (int step = 1; step < CL_SIZE; step <<= 1)
#pragma unroll
          for (int j = 0; j < CL_SIZE; j += 2 * step) {
            v[j] = ADD(v[j], v[j + step]);
            q[j] = ADD(q[j], q[j + step]);
          }
        if (c > 0) mix[mi][c - 1] = MUL(v[0], DIV(1.0f, SQRT(ADD(DIV(q[0], N), A.norm_eps))));
      }
    }
    // the next step's arguments and header (helpers read them in B; every thread in C)
    if (s + 1 < p.nsteps) {
      const PStep& nx = p.steps[s + 1];
      copy_args_range(&args_s[(s + 1) & 1], nx.mh[r], 0, CL_THREADS);
      if (t < 10) hdr_s[(s + 1) & 1][t] = (&nx.kind)[t];
    }
    __syncthreads();
    dstamp(ds, 4);
    // B: Sinkhorn warps (two rows each) and helper warps (y, join, the next all-reduce)
    const int nsk = work && op != OP_POST_HEAD ? (nrows + 1) / 2 : 0;
    const int nh = (CL_WARPS - nsk) * 32, h0 = nsk * 32;
    if (w < nsk) {
      const int hf = lane >> 4, t16 = lane & 15, mi = 2 * w + hf, mic = min(mi, nrows - 1);
      const float lg = ADD(MUL(mix[mic][2 * HC + t16], A.scale[2]), A.base[2 * HC + t16]);
      const float c = sinkhorn_lane(lg, t16 >> 2, t16 & 3, hf * 16, A.hc_eps, A.sinkhorn_iters);
      const float ps = t16 < HC ? MUL(2.0f, psigmoid(ADD(MUL(mix[mic][HC + t16], A.scale[1]), A.base[HC + t16]))) : 0.0f;
      if (mi < nrows) {
        pc[mi][HC + t16] = c;
        if (t16 < HC) pc[mi][t16] = ps;
        if (b == 0) {
          const int m = row0 + mi;
          A.comb_out[m * HC * HC + t16] = c;
          if (t16 < HC) A.post_out[m * HC + t16] = ps;
        }
      }
      dstamp(ds, 5);
    } else {
      const int ht = t - h0;
      if (work && nrows > 0) {
        if (ht < nrows * HC) {
          const int mi = ht / HC, h = ht % HC;
          pre_s[mi][h] = ADD(psigmoid(ADD(MUL(mix[mi][h], A.scale[0]), A.base[h])), A.hc_eps);
        }
        bar_named(1, nh);
        for (int i = ht; i < nrows * Q * CL_LANES; i += nh) {
          const int mi = i / (Q * CL_LANES), q = (i / CL_LANES) % Q, l = i % CL_LANES;
          float v = MUL(pre_s[mi][0], sv[mi][0 * Q + q][l]);
          v = ADD(v, MUL(pre_s[mi][1], sv[mi][1 * Q + q][l]));
          v = ADD(v, MUL(pre_s[mi][2], sv[mi][2 * Q + q][l]));
          v = ADD(v, MUL(pre_s[mi][3], sv[mi][3 * Q + q][l]));
          A.y[(size_t)(row0 + mi) * A.D + L0 + l + q * LANES] = f2bf(v);
        }
      }
      bar_named(1, nh);  // every y of this block is stored before its arrival
#ifdef CL_NO_JOIN  // timing ablation: clusters never wait for each other (the all-reduces lose their join)
      if (false)
#else
      if (ht == 0 && !(skipper && s == p.skip_step))
#endif
        asm volatile("red.release.gpu.global.add.u64 [%0], %1;" :: "l"(p.join + s), "l"(1ull) : "memory");
      if (s + 1 < p.nsteps) {
        const int* nh_ = hdr_s[(s + 1) & 1];  // the next step's header (copied in X)
        int nrow0, nn;
        rows_of(nh_[5], p.groups, g, nrow0, nn);
        if (work && ht == 33 && b == 0) prefetch_partials(args_s[(s + 1) & 1], nh_[2], nrow0, nn);
        if (CL_LOOKAHEAD > 0 && ht == 32 && s + CL_LOOKAHEAD < p.nsteps) prefetch_l2<Q>(p.steps[s + CL_LOOKAHEAD], r, b);
        if (ht == 0) {
#ifndef CL_NO_JOIN
          poll_at_least(p.join + s, target, p.err, p.timeout_ns, s);  // every block of every rank arrived
#endif
          if (p.detail && cid == 0 && b == 0) p.detail[(size_t)s * 8 + 7] = globaltimer();  // join passed
        }
        bar_named(1, nh);
        if (work) {
          fold_x<Q>(args_s[(s + 1) & 1], nh_[2], p.order + p.order_off[s + 1], nrow0, nn, L0, xs, h0, nh);
        }
      }
    }
    __syncthreads();
    dstamp(ds, 6);
  }
  if (stamper && p.trace) p.trace[p.nsteps] = globaltimer();
  // no block leaves while another may still read its shared memory (the last exchange)
  cluster_arrive();
  cluster_wait();
}

// Instantiations are generated by the driver: cluster_q<Q>_r<RPC>.
