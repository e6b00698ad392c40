// The cluster cycle's flag-and-data join: each rank's partial of the next all-reduce published as words that carry
// the step's sequence number, and the fold that waits on every rank's words (fold_ll; three bf16 values a word in
// CL_LL_PACK3 builds).

#if defined(CL_COUNTER_JOIN) || defined(CL_NO_JOIN)
#define CL_LL_JOIN 0  // tuning: every all-reduce joins on the grid's counter (CL_NO_JOIN: on nothing)
#else
#define CL_LL_JOIN 1
#endif

// The all-reduce's join as flag-and-data words (the low-latency protocol): after every block of its
// cluster has stored y (one cluster barrier: with one row group a rank, the cluster is the whole rank),
// each block writes its columns of its rank's partial sum of the next all-reduce as 64-bit words, the
// sequence number of the step in the high half and the value's bits in the low half, one store each;
// the fold reads every rank's word for its elements and waits until each carries this step's sequence,
// so data and arrival come in one load (single-copy atomic), with no gpu-scope fence, no counter and no
// second round trip for the data. A partial is written by its own rank only after that whole rank
// stored y: the same order the counter join keeps, per rank instead of for the whole grid. Words live
// in two buffers by step parity: a rank overwrites a buffer two steps later only after it read every
// rank's words of the step between, which each rank wrote after it finished reading this one.
__device__ __forceinline__ void st_relaxed(u64* p, u64 v) {
  asm volatile("st.relaxed.gpu.global.b64 [%0], %1;" :: "l"(p), "l"(v) : "memory");
}
__device__ __forceinline__ void st_relaxed(unsigned* p, unsigned v) {
  asm volatile("st.relaxed.gpu.global.b32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ unsigned ld_relaxed(const unsigned* p) {
  unsigned v;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
// A flag-and-data word of an all-reduce's partial (BF: of a bf16 one): 64 bits, the step's sequence number
// in the high half and the fp32 value's bits in the low; or 32 bits, the number's low 16 bits high and the
// bf16 value's low (half the registers a word, so twice the words in flight, and half the traffic). The
// host keeps every number below 2^16 (it zeroes the words and starts again before they would pass it), so
// the low 16 bits are the number; the two kinds live in their own regions (a 64-bit word read as two 32-bit
// ones could carry a current number beside any bits).
template <bool BF>
struct Word {
  typedef u64 T;
  static __device__ __forceinline__ T make(unsigned seq, unsigned bits) { return (u64)seq << 32 | bits; }
  static __device__ __forceinline__ bool current(T w, unsigned seq) { return (unsigned)(w >> 32) == seq; }
  static __device__ __forceinline__ unsigned bits(T w) { return (unsigned)w; }
};
template <>
struct Word<true> {
  typedef unsigned T;
  static __device__ __forceinline__ T make(unsigned seq, unsigned bits) { return seq << 16 | (bits & 0xffffu); }
  static __device__ __forceinline__ bool current(T w, unsigned seq) { return w >> 16 == (seq & 0xffffu); }
  static __device__ __forceinline__ unsigned bits(T w) { return w & 0xffffu; }
};
__device__ __forceinline__ void cluster_arrive_any() { asm volatile("barrier.cluster.arrive.release;" ::: "memory"); }
__device__ __forceinline__ void cluster_wait_any() { asm volatile("barrier.cluster.wait.acquire;" ::: "memory"); }
__device__ __forceinline__ void cluster_arrive_relaxed() { asm volatile("barrier.cluster.arrive.relaxed;" ::: "memory"); }
#ifndef CL_LL_WORDS
#define CL_LL_WORDS 12  // 64-bit words a thread waits for at once (CL_LL_WORDS / R elements, at most its NE): at four
                        // ranks a thread's three elements at four rows in one round trip, its six at eight rows in
                        // two, where 8 took two and three one after the other (24 spills at 512 threads)
#endif
#ifndef CL_LL_SPLIT
#define CL_LL_SPLIT 1  // where the helpers would fold bf16 words in two round trips, the Sinkhorn warps take the second
#endif
#ifndef CL_LL_WORDS32
#define CL_LL_WORDS32 16  // 32-bit words (bf16 all-reduces) a thread waits for at once (24 spills at eight rows)
#endif
// Elements a thread folds in one round trip: CL_LL_WORDS(32) / R, at most NE, at least one.
template <bool BF, int R, int NE>
__host__ __device__ constexpr int ll_batch() {
  constexpr int b = (BF ? CL_LL_WORDS32 : CL_LL_WORDS) / R, n = b < NE ? b : NE;
  return n > 1 ? n : 1;
}
// One word of this rank's partial into its region (ll32 for a bf16 all-reduce, else ll64; e already offset to
// the rank's words).
__device__ __forceinline__ void publish_word(bool bf, unsigned* ll32, u64* ll64, size_t e, unsigned seq, unsigned bits) {
  if (bf) st_relaxed(ll32 + e, Word<true>::make(seq, bits));
  else st_relaxed(ll64 + e, Word<false>::make(seq, bits));
}
#ifndef CL_PUB_REGS
#define CL_PUB_REGS 0  // 1: a helper's words published by one loop per word kind from its rank's region, 32-bit offsets
#endif
// A helper thread's words of its rank's partial (its elements i = ht + j nh below n1, j < NE; `mine`: its rank's
// words of the step, of the join's kind): the word kind is the loop's, not a select a word, and an element's offset
// is 32-bit (elem_of32), so a word takes its store and the slot's arithmetic (with publish_word a word's 64-bit
// offset, the rank's stride multiplied again, and both kinds' stores predicated).
template <int Q, bool BF, int NE, int NO>
__device__ __forceinline__ void publish_words(typename Word<BF>::T* mine, unsigned seq, const unsigned (&own)[NO], int ht,
                                              int nh, int n1, int L0, int row0) {
  static_assert(NE <= NO, "a value a word");
  asm("" : "+l"(mine));  // (the base made once: else its rank's stride was multiplied again for every word)
#pragma unroll
  for (int j = 0; j < NE; j++) {
    const int i = ht + j * nh;
    if (i >= n1) break;
    st_relaxed(mine + elem_of32<Q>(i, L0, row0), Word<BF>::make(seq, own[j]));
  }
}
// First ranks of a thread's elements packed four bits each (ranks < 8), eight a register.
template <int N>
__device__ __forceinline__ int first_of(const unsigned (&fp)[N], int j) { return (fp[j / 8] >> (4 * (j % 8))) & 15u; }
// The first N of a thread's first ranks (one a register, loaded earlier) packed for first_of, after the loads
// have long landed: fewer registers in the fold.
template <int N, int M>
__device__ __forceinline__ void pack_firsts(const unsigned (&first)[M], unsigned (&fp)[(N + 7) / 8]) {
#pragma unroll
  for (int j = 0; j < (N + 7) / 8; j++) fp[j] = 0u;
#pragma unroll
  for (int j = 0; j < N; j++) fp[j / 8] |= first[j] << (4 * (j % 8));
}
// One element past NE: every rank's word waited for in turn, its first rank read from the table.
template <int Q, bool BF, int R>
__device__ __forceinline__ void fold_ll_one(const MhcArgs& a, const typename Word<BF>::T* ll, long long stride, unsigned seq, int e, int first,
                                            int i, int L0, float (*xs)[Q][CL_LANES], bool work, int* err, u64 timeout_ns,
                                            int step, bool& ok) {
  float v[R];
  int rr = first;
  const FoldTo f = fold_to(a);
  const u64 t0 = globaltimer();
#pragma unroll
  for (int t = 0; t < R; t++, rr = next_rank<R>(rr, f.ring.dir)) {
    typename Word<BF>::T wd = ld_relaxed(ll + rr * stride + e);
    for (unsigned n = 0; ok && !Word<BF>::current(wd, seq); n++) {
      if ((n & 15) == 15 && watchdog_stop(err, t0, timeout_ns, step)) ok = false;
      wd = ld_relaxed(ll + rr * stride + e);
    }
    v[t] = __uint_as_float(BF ? Word<BF>::bits(wd) << 16 : Word<BF>::bits(wd));
  }
  if (!work || !ok) return;
  const float x = ring_fold_ordered(v, f.ring);
  st(f.out, (size_t)e, x, BF);
  const Slot sl = slot_of<Q>(i, L0);
  xs[sl.mi][sl.q][sl.l] = x;
}
// The fold of the next all-reduce over flag-and-data words, for the thread's elements below n: i = it + j*nt,
// j < NE with their first ranks in registers (first_of(fp, j), from the host table), B at a time with every
// rank's word of each loaded at once; elements past NE (none for the built shapes) one at a time with their
// first rank read from the table (ordg).
template <int Q, bool BF, int R, int NE>
__device__ __forceinline__ void fold_ll(const MhcArgs& a, const typename Word<BF>::T* ll, long long stride, unsigned seq,
                                        const unsigned (&fp)[(NE + 7) / 8], const unsigned char* ordg, int row0, int n,
                                        int L0, float (*xs)[Q][CL_LANES], int it, int nt, bool work, int* err,
                                        u64 timeout_ns, int step) {
  constexpr int B = ll_batch<BF, R, NE>();
  const FoldTo f = fold_to(a);
  const int dir = f.ring.dir;
  bool ok = true;
#pragma unroll
  for (int j0 = 0; j0 < NE; j0 += B) {
    if (it + j0 * nt >= n) break;
    typename Word<BF>::T wv[B][R];
    int e[B];
#pragma unroll
    for (int k = 0; k < B; k++) {
      const int j = j0 + k, i = it + j * nt;
      const bool on = j < NE && i < n;  // (otherwise element j0's words again, unused)
      e[k] = (int)elem_of<Q>(on ? i : it + j0 * nt, L0, row0);
      int rr = on ? first_of(fp, j < NE ? j : j0) : first_of(fp, j0);
#pragma unroll
      for (int t = 0; t < R; t++, rr = next_rank<R>(rr, dir)) wv[k][t] = ld_relaxed(ll + rr * stride + e[k]);
    }
    // until every word carries this step's sequence: the words not yet there read again, one round trip a
    // round; after timeout_ns (or once another wait set err) the launch is ended by the watchdog
    const u64 t0 = globaltimer();
    for (unsigned rnd = 0; ok; rnd++) {
#ifdef CL_LL_NOWAIT  // timing ablation: the fold of whatever the first loads found, published or not (inexact)
      break;
#endif
      bool pending = false;
#pragma unroll
      for (int k = 0; k < B; k++) {
        const int j = j0 + k;
        int rr = it + j * nt < n ? first_of(fp, j < NE ? j : j0) : first_of(fp, j0);  // (static indices: no local memory)
#pragma unroll
        for (int t = 0; t < R; t++, rr = next_rank<R>(rr, dir)) {
          if (!Word<BF>::current(wv[k][t], seq)) {
            pending = true;
            wv[k][t] = ld_relaxed(ll + rr * stride + e[k]);
          }
        }
      }
      if (!pending) break;
      if ((rnd & 15) == 15 && watchdog_stop(err, t0, timeout_ns, step)) ok = false;
    }
    if (!work || !ok) continue;
#pragma unroll
    for (int k = 0; k < B; k++) {
      const int j = j0 + k, i = it + j * nt;
      if (j >= NE || i >= n) continue;
      unsigned raw[R];
#pragma unroll
      for (int t = 0; t < R; t++) raw[t] = Word<BF>::bits(wv[k][t]);
      fold_store<Q, BF, R>(f, raw, (size_t)e[k], i, L0, xs);
    }
  }
  for (int i = it + NE * nt; i < n; i += nt) {
    const int e = (int)elem_of<Q>(i, L0, row0);
    fold_ll_one<Q, BF, R>(a, ll, stride, seq, e, ordg[e], i, L0, xs, work, err, timeout_ns, step, ok);
  }
}

// ---- three bf16 values a word (CL_LL_PACK3) -----------------------------------------------------------------
// A bf16 all-reduce's words carry three values of a block's consecutive elements (its slice order i: word k holds
// i = 3k, 3k + 1, 3k + 2) and the step's number's low 16 bits, in one 64-bit word (single-copy atomic as the
// 32-bit word is): a third of the words to publish, poll and load. Where a helper thread folded four elements a
// round trip at eight rows (two round trips, the second on the Sinkhorn warps), its six now come in two words a
// rank, one round trip. A word's values may have different first ranks in the fold: each value's ring order is
// picked from the R words by selects (no register array indexed at run time). Word k of a block of rank rr lives
// at rr * (stride / 2) + slot3(k) of the 32-bit words' region read as 64-bit words (stride: the most rows x D).
// H200 TP4 (docs/BENCHMARKS.md, eighteenth session): a timing ablation with a third of the 32-bit words took M=8
// from 0.975 to 0.850 ms; this form of it is exact (24 M random elements, the draft + verify replay) and slower:
// M=2 / 8 0.63 / 1.19 against 0.50 / 0.99, its blocks' folds ending up to 1.4 us apart (0.35 with the 32-bit
// words), with a block's words contiguous or spread as the 32-bit ones, and without waiting on any word; and still
// with the fold's arithmetic from registers (fold_regs, nineteenth session: M=2 / 8 0.545 / 1.092 against 0.496 /
// 0.926). Off by default.
#ifndef CL_LL_PACK3
#define CL_LL_PACK3 0
#endif
__device__ __forceinline__ u64 word3_make(unsigned seq, unsigned b0, unsigned b1, unsigned b2) {
  return (u64)(seq & 0xffffu) << 48 | (u64)(b2 & 0xffffu) << 32 | (u64)((b1 & 0xffffu) << 16 | (b0 & 0xffffu));
}
__device__ __forceinline__ bool word3_current(u64 w, unsigned seq) { return (unsigned)(w >> 48) == (seq & 0xffffu); }
// Where word k of a block (slice element 3k first) lives in a rank's region of 64-bit words: half the index of its
// first element in the step's [rows][D] (a run of 64 lanes, [row D + q 1024 + 64 b, + 64), has its words in
// [row D / 2 + q 512 + 32 b, + 32): distinct for every word of every block, below the most rows x D / 2), so the
// words lie spread over a rank's region as the 32-bit ones do.
template <int Q>
__device__ __forceinline__ size_t slot3(int k, int L0, int row0) { return elem_of<Q>(3 * k, L0, row0) >> 1; }
// Value m (0..2) of every rank's word, then the one of rank rr among them.
template <int R>
__device__ __forceinline__ unsigned word3_value(const unsigned (&f)[R], int rr) {
  unsigned v = f[0];
#pragma unroll
  for (int q = 1; q < R; q++) v = rr == q ? f[q] : v;
  return v;
}
// The fold of a packed word's (up to) three elements from every rank's word w[R] (rank order 0..R-1): each
// element's values in its ring order from its first rank, folded and stored as fold_ll's.
template <int Q, int R>
__device__ __forceinline__ void fold_word3(const FoldTo& f, const u64 (&w)[R], int k, int n, const int (&first)[3],
                                           int L0, int row0, float (*xs)[Q][CL_LANES]) {
#pragma unroll
  for (int m = 0; m < 3; m++) {
    const int i = 3 * k + m;
    if (i >= n) continue;
    unsigned fq[R];
#pragma unroll
    for (int q = 0; q < R; q++) fq[q] = (unsigned)(w[q] >> (16 * m)) & 0xffffu;
    unsigned raw[R];
    int rr = first[m];
#pragma unroll
    for (int t = 0; t < R; t++, rr = next_rank<R>(rr, f.ring.dir)) raw[t] = word3_value<R>(fq, rr);
    fold_store<Q, true, R>(f, raw, elem_of<Q>(i, L0, row0), i, L0, xs);
  }
}
// The fold of the next bf16 all-reduce over packed words, for the thread's words k = it + j*nt below (n + 2) / 3
// (j < NW, their elements' first ranks in fp, entry 3j + m), B words at a time with every rank's word of each
// loaded at once; words past NW one at a time with their first ranks read from the table (ordg).
template <int Q, int R, int NW>
__device__ __forceinline__ void fold_ll3(const MhcArgs& a, const u64* ll, long long stride, unsigned seq,
                                         const unsigned (&fp)[(3 * NW + 7) / 8], const unsigned char* ordg, int row0,
                                         int n, int L0, float (*xs)[Q][CL_LANES], int it, int nt, bool work, int* err,
                                         u64 timeout_ns, int step) {
  constexpr int B = CL_LL_WORDS / R < NW ? (CL_LL_WORDS / R > 1 ? CL_LL_WORDS / R : 1) : NW;
  const int nw = (n + 2) / 3;
  const FoldTo f = fold_to(a);
  bool ok = true;
#pragma unroll
  for (int j0 = 0; j0 < NW; j0 += B) {
    if (it + j0 * nt >= nw) break;
    u64 wv[B][R];
    size_t sl[B];  // each word's slot (past the thread's words: the batch's first word again, unused)
#pragma unroll
    for (int k = 0; k < B; k++) {
      sl[k] = slot3<Q>(j0 + k < NW && it + (j0 + k) * nt < nw ? it + (j0 + k) * nt : it + j0 * nt, L0, row0);
#pragma unroll
      for (int q = 0; q < R; q++) wv[k][q] = ld_relaxed(ll + q * stride + sl[k]);
    }
    const u64 t0 = globaltimer();
    for (unsigned rnd = 0; ok; rnd++) {
#ifdef CL_LL_NOWAIT
      break;
#endif
      bool pending = false;
#pragma unroll
      for (int k = 0; k < B; k++)
#pragma unroll
        for (int q = 0; q < R; q++)
          if (!word3_current(wv[k][q], seq)) {
            pending = true;
            wv[k][q] = ld_relaxed(ll + q * stride + sl[k]);
          }
      if (!pending) break;
      if ((rnd & 15) == 15 && watchdog_stop(err, t0, timeout_ns, step)) ok = false;
    }
    if (!work || !ok) continue;
#pragma unroll
    for (int k = 0; k < B; k++) {
      const int j = j0 + k, kw = it + j * nt;
      if (j >= NW || kw >= nw) continue;
      const int first[3] = {first_of(fp, 3 * j), first_of(fp, 3 * j + 1), first_of(fp, 3 * j + 2)};
      fold_word3<Q, R>(f, wv[k], kw, n, first, L0, row0, xs);
    }
  }
  for (int kw = it + NW * nt; kw < nw; kw += nt) {  // (more words than NW: none for the built shapes)
    u64 wv[R];
    const u64* const w = ll + slot3<Q>(kw, L0, row0);
    const u64 t0 = globaltimer();
#pragma unroll
    for (int q = 0; q < R; q++) {
      wv[q] = ld_relaxed(w + q * stride);
      for (unsigned rnd = 0; ok && !word3_current(wv[q], seq); rnd++) {
        if ((rnd & 15) == 15 && watchdog_stop(err, t0, timeout_ns, step)) ok = false;
        wv[q] = ld_relaxed(w + q * stride);
      }
    }
    if (!work || !ok) continue;
    int first[3];
#pragma unroll
    for (int m = 0; m < 3; m++) first[m] = 3 * kw + m < n ? ordg[elem_of<Q>(3 * kw + m, L0, row0)] : 0;
    fold_word3<Q, R>(f, wv, kw, n, first, L0, row0, xs);
  }
}
