/* gemm-bf16.h — the tile of dlrt_sgemm_bf16 (included by gemm.c, whose threading, orientation
 * and epilogue it shares): products whose operands are rounded to bfloat16 and whose sums stay
 * in float32, on CPUs with AVX512-BF16 (vdpbf16ps: 16 sums x 2 depths an instruction, twice the
 * multiply-adds of an FMA; measured 491 against 266 GFLOP/s on one Zen 5 core).
 *
 * Operands are packed straight from float32 into panels of depth pairs: unit [q][l] of a panel
 * of w lines is 32 bits holding line l's values at depths 2q (low half) and 2q + 1 (high half),
 * rounded to nearest even by the conversion instructions (which also take denormals as zero); a
 * depth past K, and a line past the operand, is zero. The products of two bfloat16 are exact in
 * float32 and vdpbf16ps adds them to the sum depth by depth, so each element is
 * sum(bf16(a) * bf16(b)) in float32, in the same order whatever the tiling or the thread count.
 *
 * Without AVX512-BF16 in the build, DLRT_GEMM_BF16 is not defined and dlrt_sgemm_bf16 is
 * dlrt_sgemm_ws: products in float32, which rounds nothing. */
#ifndef DLRT_GEMM_BF16_H
#define DLRT_GEMM_BF16_H

#if defined(__AVX512BF16__) && defined(__AVX512BW__) && defined(__AVX512VL__) &&                   \
    defined(DLRT_GEMM_TR6X16) && defined(DLRT_GEMM_DIRECT_STORE) && DLRT_GEMM_MR == 6 &&           \
    DLRT_GEMM_NR == 64
#define DLRT_GEMM_BF16 1
/* The K block: a B panel of 256 depths is 32 KB of pairs, the L1 share of fp32's 128 */
#define DLRT_BF16_KC 256

/* The first n (0 .. 16) lanes set. */
static inline __mmask16 dlrt_bf16_lanes(int n) {
    return n <= 0 ? 0 : n >= 16 ? 0xffff : (__mmask16)((1u << n) - 1);
}

/* 16 units: depths d .. d + 31 of a line whose depths are contiguous (n of them present, the
 * rest zero), as pairs in depth order. */
static DLRT_INLINE __m512i dlrt_bf16_row32(const float *src, int n) {
    const __m512 lo = _mm512_maskz_loadu_ps(dlrt_bf16_lanes(n), src),
                 hi = _mm512_maskz_loadu_ps(dlrt_bf16_lanes(n - 16), src + 16);
    return (__m512i)_mm512_cvtne2ps_pbh(hi, lo); /* words 0-15 lo, 16-31 hi */
}

/* 16 units: lines l .. l + 15 (n present) at two depths (even, odd: rows of an operand whose
 * lines are contiguous at each depth; odd NULL past K). */
static DLRT_INLINE __m512i dlrt_bf16_pair16(const float *even, const float *odd, int n) {
    /* word 2i: line i at the even depth, 2i + 1 at the odd one */
    const __m512i order =
        _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                         21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    const __mmask16 m = dlrt_bf16_lanes(n);
    const __m512 lo = _mm512_maskz_loadu_ps(m, even),
                 hi = odd ? _mm512_maskz_loadu_ps(m, odd) : _mm512_setzero_ps();
    return _mm512_permutexvar_epi16(order, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
}

/* One panel of w (MR or NR) lines stored as rows (line i at depth p is src[i * ld + p]), n
 * present, depths [0, kc): 32 depths of each line converted, then the units transposed. dst:
 * (kc + 1) / 2 pairs of w units. (Lines contiguous at each depth go by dlrt_bf16_pack.) */
static void dlrt_bf16_panel_rows(const float *src, int64_t ld, int n, int kc, int w,
                                 uint32_t *restrict dst) {
    const int kq = (kc + 1) / 2;
    uint32_t rows[16 * 16];
    for (int d = 0; d < kc; d += 32) {
        const int nq = DLRT_MIN(16, kq - d / 2);
        for (int g = 0; g < w; g += 16) {
            const int lines = DLRT_MIN(16, w - g);
            for (int l = 0; l < lines; l++)
                _mm512_storeu_si512(rows + 16 * l,
                                    g + l < n ? dlrt_bf16_row32(src + (g + l) * ld + d, kc - d)
                                              : _mm512_setzero_si512());
            if (lines == 6 && nq == 16) { /* an A panel: units [q][l], 6 a pair */
                dlrt_gemm_tr6x16((const float *)rows, 16, (float *)(dst + (d / 2) * 6));
                continue;
            }
            __m512 r[16];
            for (int l = 0; l < 16; l++)
                r[l] =
                    l < lines ? _mm512_loadu_ps((const float *)rows + 16 * l) : _mm512_setzero_ps();
            dlrt_gemm_vtranspose(r); /* r[q]: pair q of the 16 lines */
            for (int q = 0; q < nq; q++)
                _mm512_mask_storeu_ps((float *)(dst + (d / 2 + q) * w + g), dlrt_bf16_lanes(lines),
                                      r[q]);
        }
    }
}

/* Lines [i0, i0 + m) x depths [p0, p0 + kc) of an operand whose lines are contiguous at each
 * depth (a transposed A: a weight gradient's activations, X^T dY) in panels of MR lines,
 * pstride units apart: 16 depth pairs at a time, each pair's lines converted 16 at a time into a
 * buffer (whole rows of memory, as B's lines are), then each panel's 16 runs of MR units copied
 * out, one run of 16 MR units. Converted MR lines at a time, each pair writing a few units to
 * every panel in turn, 256 x 1024 had taken 0.166 ms against 0.024 with A's lines as rows (one
 * thread), which made the GPT benchmark's 256 x 1024 x 1024 weight gradients 16% slower. */
static void dlrt_bf16_pack_cols_a(const float *X, int64_t ld, int64_t i0, int64_t m, int64_t p0,
                                  int kc, size_t pstride, uint32_t *restrict dst) {
    enum { PAIRS = 16, LINES = 240 }; /* whole panels, whole vectors */
    _Static_assert(LINES % DLRT_GEMM_MR == 0 && LINES % 16 == 0, "LINES: panels and vectors");
    uint32_t buf[PAIRS][LINES];
    const int kq = (kc + 1) / 2;
    for (int64_t r0 = 0; r0 < m; r0 += LINES) {
        const int n = (int)DLRT_MIN((int64_t)LINES, m - r0);
        const int panels = (n + DLRT_GEMM_MR - 1) / DLRT_GEMM_MR;
        const int width = panels * DLRT_GEMM_MR; /* lines past m, to the panel's end: zero */
        for (int q0 = 0; q0 < kq; q0 += PAIRS) {
            const int nq = DLRT_MIN(PAIRS, kq - q0);
            for (int q = 0; q < nq; q++) {
                const int d = 2 * (q0 + q);
                const float *even = X + (p0 + d) * ld + i0 + r0;
                const float *odd = d + 1 < kc ? even + ld : NULL;
                if (d + 5 < kc) /* the pair after next's lines (cold: a product's operand fresh
                                 * from memory converted at a third the speed) */
                    for (int r = 0; r < n; r += 16) {
                        __builtin_prefetch(even + 4 * ld + r);
                        __builtin_prefetch(even + 5 * ld + r);
                    }
                for (int r = 0; r < width; r += 16)
                    _mm512_storeu_si512(buf[q] + r,
                                        dlrt_bf16_pair16(even + r, odd ? odd + r : NULL,
                                                         DLRT_MAX(0, DLRT_MIN(16, n - r))));
            }
            for (int p = 0; p < panels; p++) {
                uint32_t *out =
                    dst + (size_t)(r0 / DLRT_GEMM_MR + p) * pstride + (size_t)q0 * DLRT_GEMM_MR;
                for (int q = 0; q < nq; q++)
                    memcpy(out + q * DLRT_GEMM_MR, buf[q] + p * DLRT_GEMM_MR,
                           DLRT_GEMM_MR * sizeof(uint32_t));
            }
        }
    }
}

/* Lines [i0, i0 + m) x depths [p0, p0 + kc) of an operand (as dlrt_gemm_pack: by_rows, ld) in
 * panels of w lines, pstride units apart. */
static void dlrt_bf16_pack(const float *X, int64_t ld, int by_rows, int64_t i0, int64_t m,
                           int64_t p0, int kc, int w, size_t pstride, uint32_t *restrict dst) {
    if (!by_rows && w == DLRT_GEMM_MR) {
        dlrt_bf16_pack_cols_a(X, ld, i0, m, p0, kc, pstride, dst);
        return;
    }
    if (!by_rows) { /* lines contiguous at each depth (B): depth by depth across the panels, each
                     * depth one run of memory (as dlrt_gemm_pack: depths 4 KiB apart share an L1
                     * set; panel by panel, a transposed A of 1024 x 256 x 1024 had run at 342
                     * GFLOP/s against 452 not transposed) */
        for (int q = 0; q < (kc + 1) / 2; q++) {
            const float *even = X + (p0 + 2 * q) * ld + i0;
            const float *odd = 2 * q + 1 < kc ? even + ld : NULL;
            for (int64_t r = 0; r < m; r += 16)
                _mm512_storeu_si512(
                    dst + (size_t)(r / w) * pstride + (size_t)q * w + r % w,
                    dlrt_bf16_pair16(even + r, odd ? odd + r : NULL, (int)DLRT_MIN(m - r, 16)));
            /* (a partial last panel's vectors past m: zero) */
            for (int64_t r = (m + 15) / 16 * 16; r % w; r += 16)
                _mm512_storeu_si512(dst + (size_t)(r / w) * pstride + (size_t)q * w + r % w,
                                    _mm512_setzero_si512());
        }
        return;
    }
    for (int64_t r = 0; r < m; r += w, dst += pstride)
        dlrt_bf16_panel_rows(X + (i0 + r) * ld + p0, ld, (int)DLRT_MIN((int64_t)w, m - r), kc, w,
                             dst);
}

/* An operand packed whole into pairs for a product's tiles to share (dlrt_gemm_run): panels of
 * w lines over all of K (kp = (K + 1) / 2 pairs each), in units of a group of panels (NC lines:
 * packed across, dlrt_bf16_pack) times a K block. */
typedef struct dlrt_bf16_pack_job {
    const float *X;
    int64_t ld, lines, K, pieces, group;
    int by_rows, w;
    uint32_t *dst;
} dlrt_bf16_pack_job;

static void dlrt_bf16_pack_units(void *ctx, int64_t lo, int64_t hi) {
    const dlrt_bf16_pack_job *j = ctx;
    const int64_t kp = (j->K + 1) / 2;
    for (int64_t u = lo; u < hi; u++) {
        const int64_t i0 = u / j->pieces * j->group * j->w, p0 = u % j->pieces * DLRT_BF16_KC;
        const int kc = (int)DLRT_MIN((int64_t)DLRT_BF16_KC, j->K - p0);
        dlrt_bf16_pack(j->X, j->ld, j->by_rows, i0, DLRT_MIN(j->group * j->w, j->lines - i0), p0,
                       kc, j->w, (size_t)j->w * (size_t)kp,
                       j->dst + (size_t)i0 * (size_t)kp + (size_t)(p0 / 2) * j->w);
    }
}

/* Units (float-sized) of an operand packed whole in pairs: half its float32 panels. */
static size_t dlrt_bf16_packed_units(int operand, int64_t lines, int64_t K) {
    const int64_t w = operand == 0 ? DLRT_GEMM_MR : DLRT_GEMM_NR;
    return (size_t)((lines + w - 1) / w * w) * (size_t)((K + 1) / 2);
}

static void dlrt_bf16_pack_all(int operand, int64_t lines, int64_t K, const float *X, int64_t ld,
                               int trans, uint32_t *dst, int par) {
    const int w = operand == 0 ? DLRT_GEMM_MR : DLRT_GEMM_NR;
    const int64_t pieces = (K + DLRT_BF16_KC - 1) / DLRT_BF16_KC, group = DLRT_GEMM_NC / w;
    const int64_t groups = ((lines + w - 1) / w + group - 1) / group;
    dlrt_bf16_pack_job job = {X, ld, lines, K, pieces, group, operand == 0 ? !trans : trans,
                              w, dst};
    dlrt_parallel_for(groups * pieces, par, dlrt_bf16_pack_units, &job);
}

/* c[6][4] (zeroed, or loaded from acc: 6 x 64, rows NR floats apart) += the sum over kq depth
 * pairs of A's panel a (6 units a pair) times B's panel b (64 units a pair). A macro, so that
 * the accumulators stay in registers. */
#define DLRT_BF16_MAC(kq, a, b, acc, c)                                                            \
    do {                                                                                           \
        for (int i_ = 0; i_ < 6; i_++)                                                             \
            for (int v_ = 0; v_ < 4; v_++)                                                         \
                c[i_][v_] =                                                                        \
                    (acc) ? _mm512_loadu_ps((acc) + i_ * 64 + 16 * v_) : _mm512_setzero_ps();      \
        const uint32_t *a_ = (a), *b_ = (b);                                                       \
        for (int q_ = 0; q_ < (kq); q_++, a_ += 6, b_ += 64) {                                     \
            __m512bh bv_[4];                                                                       \
            for (int v_ = 0; v_ < 4; v_++) bv_[v_] = (__m512bh)_mm512_loadu_si512(b_ + 16 * v_);   \
            for (int i_ = 0; i_ < 6; i_++) {                                                       \
                const __m512bh av_ = (__m512bh)_mm512_set1_epi32((int)a_[i_]);                     \
                for (int v_ = 0; v_ < 4; v_++)                                                     \
                    c[i_][v_] = _mm512_dpbf16_ps(c[i_][v_], av_, bv_[v_]);                         \
            }                                                                                      \
        }                                                                                          \
    } while (0)

/* acc[6 x 64] (rows NR floats apart) = or += (add) the block of panels a and b. */
static DLRT_INLINE void dlrt_bf16_micro(int kq, const uint32_t *restrict a,
                                        const uint32_t *restrict b, float *restrict acc, int add) {
    __m512 c[6][4];
    DLRT_BF16_MAC(kq, a, b, add ? acc : NULL, c);
    for (int i = 0; i < 6; i++)
        for (int v = 0; v < 4; v++) _mm512_storeu_ps(acc + i * 64 + 16 * v, c[i][v]);
}

/* The last K block of a full 6 x 64 register tile at (i0, j0) of the product: part (the
 * earlier blocks' sums, or NULL) + the block, finished with the epilogue in registers
 * (dlrt_gemm_micro_store_rows' steps; ep passes dlrt_gemm_epi_direct) and stored into C. The
 * row store through the partial sums cost 8% of a 1024 x 1024 x 256 product. */
static DLRT_INLINE void dlrt_bf16_micro_store(int kq, const uint32_t *restrict a,
                                              const uint32_t *restrict b, const float *part,
                                              float *C, int64_t ldc, const dlrt_epilogue *ep,
                                              int64_t i0, int64_t j0) {
    __m512 c[6][4];
    DLRT_BF16_MAC(kq, a, b, part, c);
    if (ep)
        DLRT_EPI_BLOCK(ep, c, 6, 4, i0 + i_, ep->bias + (i0 + i_) * ep->bias_rs + j0 + j_ * 16,
                       ep->residual + (i0 + i_) * ep->res_rs + j0 + j_ * 16);
    for (int i = 0; i < 6; i++)
        for (int v = 0; v < 4; v++) _mm512_storeu_ps(C + (i0 + i) * ldc + j0 + 16 * v, c[i][v]);
    if (dlrt_gemm_act_after(ep))
        for (int i = 0; i < 6; i++)
            dlrt_act_apply(ep->act, ep->act_a, ep->act_b, C + (i0 + i) * ldc + j0, 64);
}

/* dlrt_gemm_tile in bfloat16: one MC x NC tile (mc x nc valid) at (i0, j0), all of K. An
 * operand comes packed in pairs over all of K (g->a_pairs, g->b_pairs: dlrt_gemm_run), as
 * float32 panels over all of K (a_packed, b_packed: read as lines contiguous at each depth), or
 * as it is stored, and is packed in pairs here. Gathered and indexed operands do not come here
 * (dlrt_sgemm_bf16 takes neither). */
static void dlrt_gemm_tile_bf16(const dlrt_gemm_args *g, int64_t K, int64_t i0, int mc, int64_t j0,
                                int nc) {
    enum { MR = DLRT_GEMM_MR, NR = DLRT_GEMM_NR, MC = DLRT_GEMM_MC, KQ = DLRT_BF16_KC / 2 };
    uint32_t apairs[MC * KQ], bpairs[KQ * NR];
    float part[MC * DLRT_GEMM_NC]; /* partial sums, one MR x NR block per register tile */
    const int64_t kp = (K + 1) / 2;
    /* full register tiles of a product stored in C's orientation skip the partial sums */
    const int direct = !g->c_trans && dlrt_gemm_epi_direct(g->ep);
    for (int64_t p0 = 0; p0 < K; p0 += DLRT_BF16_KC) {
        const int kc = (int)DLRT_MIN((int64_t)DLRT_BF16_KC, K - p0), kq = (kc + 1) / 2;
        const int first = p0 == 0, last = p0 + kc == K;
        const uint32_t *ablk = apairs; /* row panel r at ablk + r * astride */
        size_t astride = (size_t)kq;
        if (g->a_pairs) {
            ablk = (const uint32_t *)g->A + (size_t)i0 * (size_t)kp + (size_t)(p0 / 2) * MR;
            astride = (size_t)kp;
        } else if (g->a_packed) { /* each panel: MR lines contiguous at each depth, over all K */
            for (int r = 0; r < mc; r += MR)
                dlrt_bf16_pack(g->A + (size_t)(i0 + r) * (size_t)K, MR, 0, 0, DLRT_MIN(MR, mc - r),
                               p0, kc, MR, 0, apairs + (size_t)r * kq);
        } else {
            dlrt_bf16_pack(g->A, g->lda, !g->trans_a, i0, mc, p0, kc, MR, (size_t)MR * kq, apairs);
        }
        for (int c = 0; c < nc; c += NR) {
            const int nr = DLRT_MIN(NR, nc - c);
            const uint32_t *bp = bpairs;
            if (g->b_pairs)
                bp = (const uint32_t *)g->B + (size_t)(j0 + c) * (size_t)kp + (size_t)(p0 / 2) * NR;
            else if (g->b_packed) /* NR lines contiguous at each depth, over all K */
                dlrt_bf16_pack(g->B + (size_t)(j0 + c) * (size_t)K, NR, 0, 0, nr, p0, kc, NR, 0,
                               bpairs);
            else
                dlrt_bf16_pack(g->B, g->ldb, g->trans_b, j0 + c, nr, p0, kc, NR, 0, bpairs);
            float *blk = part + (size_t)c * MC;
            for (int r = 0; r < mc; r += MR) {
                float *pt = blk + (size_t)r * NR;
                if (last && direct && nr == NR && r + MR <= mc) {
                    dlrt_bf16_micro_store(kq, ablk + (size_t)r * astride, bp, first ? NULL : pt,
                                          g->C, g->ldc, g->ep, i0 + r, j0 + c);
                    continue;
                }
                dlrt_bf16_micro(kq, ablk + (size_t)r * astride, bp, pt, !first);
                if (last && !g->c_trans)
                    for (int i = 0; i < DLRT_MIN(MR, mc - r); i++)
                        dlrt_gemm_store_row(g, i0 + r + i, j0 + c, pt + i * NR, nr);
            }
            if (last && g->c_trans) dlrt_gemm_store_cols(g, i0, j0 + c, blk, mc, nr);
        }
    }
}
#endif

#endif
