/* gemm.c — dlrt_sgemm: single-precision GEMM with the fused epilogue of dlrt.h.
 *
 * Goto-style blocking. C is cut into MC x NC tiles, each computed by one thread from stack
 * buffers: an MC x KC block of op(A) and a KC x NC block of op(B) are packed (which also absorbs
 * the transpositions and the strides), and the register-tile microkernel of gemm-micro.h (AVX-512,
 * AVX2 or generic C, by the build's instruction set) walks them. Operands can also come packed
 * once (layer weights at load time, or per call into a workspace when several tiles share them),
 * and on the vector builds full panels whose lines are contiguous at each depth are read where
 * they lie: B's columns, and a transposed product's rows. K is consumed KC at a time
 * (KC_STREAM for prepacked weights as B);
 * partial sums live in a tile-sized stack buffer, so C is written exactly once, by the epilogue,
 * after the residual at the same place was read (an in-place residual works). Rows and columns
 * past the edges are packed as zeros and never stored.
 *
 * When N is narrow (a conv's 7x7 output plane, a matrix-vector product), padding N to the
 * microkernel's NR wastes most of the arithmetic, so the product is computed transposed,
 * C^T = op(B)^T op(A)^T, and stored back transposed: whichever orientation pads less wins.
 * Each element's sum runs over K in the same order whatever the thread count. */
#include "gemm-micro.h"

/* A full panel of w lines that are contiguous at each depth (row p at src + p * ld): w is a
 * constant, so each row is inline vector moves, not a copy loop of unknown length. */
static DLRT_INLINE void dlrt_gemm_pack_full(const float *src, int64_t ld, int kc,
                                            float *restrict dst, const int w) {
    for (int p = 0; p < kc; p++, src += ld, dst += w)
        for (int ii = 0; ii < w; ii++) dst[ii] = src[ii];
}

#if defined(__AVX__) && defined(DLRT_GEMM_VW)
#define DLRT_GEMM_TR8
/* Lines [0, nl) (nl 6 or 8) of an 8x8 block of lines stored by rows (line l at src + l * ld, 8
 * depths each) transposed in registers: dst[p * w + l] for depths p < 8. Packing an operand whose
 * lines are rows (A as usual, B transposed: a convolution's weight gradient, a dense layer's)
 * went element by element otherwise. Six lines are the A panels: lines 6 and 7 repeat line 5,
 * and each depth's six stores as 4 + 2. */
static DLRT_INLINE void dlrt_gemm_tr8(const float *src, int64_t ld, int nl, float *dst, int w) {
    __m256 r[8];
    for (int l = 0; l < 8; l++) r[l] = _mm256_loadu_ps(src + (l < nl ? l : nl - 1) * ld);
    dlrt_gemm_tr8x8(r); /* r[p]: depth p of the 8 lines */
    for (int p = 0; p < 8; p++) {
        if (nl == 8) {
            _mm256_storeu_ps(dst + p * w, r[p]);
        } else {
            _mm_storeu_ps(dst + p * w, _mm256_castps256_ps128(r[p]));
            _mm_storel_pi((__m64 *)(dst + p * w + 4), _mm256_extractf128_ps(r[p], 1));
        }
    }
}
#endif

#if defined(__AVX512F__) && !defined(DLRT_GEMM_GENERIC)
#define DLRT_GEMM_TR6X16
/* Six lines stored by rows (line l at src + l * ld) over 16 depths, transposed into an A panel:
 * dst[p * 6 + l] for p < 16, 96 consecutive floats. Lines are paired in depth order (line 2q's
 * and 2q + 1's floats side by side: 64-bit units), then each output vector takes its units from
 * the three pairs, two shuffles each: 18 shuffles a block where the 8x8 transposes of the AVX2
 * path spent 48 and stored in pieces (packing was 4% of a 512-cube product). */
static DLRT_INLINE void dlrt_gemm_tr6x16(const float *src, int64_t ld, float *dst) {
    const __m512i lo = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    const __m512i hi =
        _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
    __m512d pair[3][2]; /* [line pair][depths 0-7, 8-15]: 8 units in depth order */
    for (int q = 0; q < 3; q++) {
        const __m512 a = _mm512_loadu_ps(src + 2 * q * ld),
                     b = _mm512_loadu_ps(src + (2 * q + 1) * ld);
        pair[q][0] = _mm512_castps_pd(_mm512_permutex2var_ps(a, lo, b));
        pair[q][1] = _mm512_castps_pd(_mm512_permutex2var_ps(a, hi, b));
    }
    /* output unit u (of 48) is depth u / 3 of pair u % 3: per output vector k (and k + 3 for
     * depths 8-15), pairs 0 and 1 through one two-source shuffle, pair 2 merged into its lanes */
    const __m512i from01[3] = {_mm512_set_epi64(10, 2, 0, 9, 1, 0, 8, 0),
                               _mm512_set_epi64(5, 0, 12, 4, 0, 11, 3, 0),
                               _mm512_set_epi64(0, 15, 7, 0, 14, 6, 0, 13)};
    const __m512i from2[3] = {_mm512_set_epi64(0, 0, 1, 0, 0, 0, 0, 0),
                              _mm512_set_epi64(0, 4, 0, 0, 3, 0, 0, 2),
                              _mm512_set_epi64(7, 0, 0, 6, 0, 0, 5, 0)};
    const __mmask8 lanes2[3] = {0x24, 0x49, 0x92};
    for (int h = 0; h < 2; h++)
        for (int k = 0; k < 3; k++) {
            __m512d v = _mm512_permutex2var_pd(pair[0][h], from01[k], pair[1][h]);
            v = _mm512_mask_permutexvar_pd(v, lanes2[k], from2[k], pair[2][h]);
            _mm512_storeu_pd((double *)(dst + (3 * h + k) * 16), v);
        }
}

/* Asks for the six lines' floats 512 bytes past src (the depths the next K piece packs: this
 * packing runs over a panel's pieces in order), computed as integers, since those may lie past
 * the operand, where a prefetch does not fault. A 2048-cube SGEMM packs 16 MB of A from memory
 * (one thread, medians, old and new alternating: ahead in 5 of 6 pairs, mostly by 0.2-1%,
 * 240.1 -> 242.6 GFLOP/s; the machine's noise is of that size). */
static DLRT_INLINE void dlrt_gemm_tr6x16_ahead(const float *src, int64_t ld) {
    for (int l = 0; l < 6; l++)
        __builtin_prefetch((const void *)((uintptr_t)(src + l * ld) + 512), 0, 3);
}
#endif

/* The lines of a panel of w holding n that the microkernels read: all w, except that the narrow
 * kernels read only the vectors of a partial B panel that hold lines (gemm-micro.h), so the
 * zeros end with the last of those vectors. */
static inline int dlrt_gemm_pad_lines(int n, int w) {
#ifdef DLRT_GEMM_NARROW
    if (w == DLRT_GEMM_NR) return dlrt_gemm_vectors(n) * DLRT_GEMM_VW;
#endif
    (void)n;
    return w;
}

/* Zeroes the lines of a panel of w holding n (kc deep) that the kernels read past n. The stores
 * stay plain stores: gcc made the inner loop a memset call per depth (a 6-row A panel holding 2
 * rows: 16 bytes a call, 768 calls for one of BERT's products; 2% of its fused attention). */
#if defined(__GNUC__) && !defined(__clang__)
__attribute__((optimize("no-tree-loop-distribute-patterns")))
#endif
static void dlrt_gemm_pad_panel(float *restrict panel, int n, int w, int kc) {
    const int pad = dlrt_gemm_pad_lines(n, w);
    for (int p = 0; p < kc && n < pad; p++)
        for (int ii = n; ii < pad; ii++) panel[p * w + ii] = 0.0f;
}

/* NR consecutive floats from src to dst, as vector moves where the build has them (a loop of
 * NR was compiled to a memmove call: 256 bytes a call, 5% of a 1024-cube product on 2 threads). */
static DLRT_INLINE void dlrt_gemm_copy_nr(const float *src, float *restrict dst) {
#ifdef DLRT_GEMM_VW
    for (int v = 0; v < DLRT_GEMM_NV; v++)
        DLRT_VSTORE(dst + v * DLRT_GEMM_VW, DLRT_VLOAD(src + v * DLRT_GEMM_VW));
#else
    for (int ii = 0; ii < DLRT_GEMM_NR; ii++) dst[ii] = src[ii];
#endif
}

/* dlrt_gemm_pack's full panels (`full` of w lines, w a constant: NR or MR) of lines contiguous at
 * each depth, X[p * ld + i], depth by depth across all of them; returns the lines packed. */
static inline int dlrt_gemm_pack_across(const float *X, int64_t ld, int64_t i0, int full,
                                        int64_t p0, int kc, size_t pstride, float *restrict dst,
                                        const int w) {
    for (int p = 0; p < kc; p++) {
        const float *src = X + (p0 + p) * ld + i0;
        for (int q = 0; q < full; q++) {
            float *to = dst + (size_t)q * pstride + (size_t)p * (size_t)w;
            if (w == DLRT_GEMM_NR)
                dlrt_gemm_copy_nr(src + q * w, to);
            else
                dlrt_gemm_pack_full(src + q * w, 0, 1, to, w);
        }
    }
    return full * w;
}

/* Packs lines [i0, i0+m) x depths [p0, p0+kc) of an operand into panels of w lines, pstride
 * floats apart (w * kc: one K block; w * K: panels over all of K):
 * dst[panel * pstride + p * w + ii] = line i0 + panel*w + ii at depth p0 + p, where line i at depth
 * p is X[i * ld + p] when by_rows, else X[p * ld + i], or what gx makes when it is not NULL (an
 * operand never stored). Lines past m are zero as far as the kernels read them
 * (dlrt_gemm_pad_lines). A's lines are the rows of op(A) (by_rows = !trans_a, w = MR); B's lines
 * are the columns of op(B) (by_rows = trans_b, w = NR). */
static void dlrt_gemm_pack(const float *X, int64_t ld, int by_rows, const dlrt_gemm_gather *gx,
                           int64_t i0, int m, int64_t p0, int kc, int w, size_t pstride,
                           float *restrict dst) {
    if (gx) { /* all panels at once: the maker's work per depth is shared by all of them */
        gx->lines(gx->ctx, i0, m, p0, kc, w, pstride, dst);
        const int last = (m - 1) / w * w;
        dlrt_gemm_pad_panel(dst + (size_t)(last / w) * pstride, m - last, w, kc);
        return;
    }
    int r = 0;
    /* full panels of lines contiguous at each depth (X's columns: B in place, a transposed A),
     * depth by depth across all of them, so that each depth is one run of memory. Panel by
     * panel, B's read NR floats from each row, a page apart in large matrices, which the
     * prefetchers did not follow (packing was a tenth of a 1024-cube product on 2 threads); a
     * transposed A's read MR floats a depth, ld apart, and at a stride of a multiple of 4 KiB (a
     * weight gradient's activations) those lines all share an L1 set, so each panel read them
     * again from L2 (1024 x 256 x 1024 with A transposed, one thread: 2.49 -> 2.16-2.20 ms,
     * against 2.22 with A as rows; the GPT training step's 12 products of that shape 28.1 ->
     * 27.2 ms). */
    if (!by_rows && w == DLRT_GEMM_NR && m >= DLRT_GEMM_NR)
        r = dlrt_gemm_pack_across(X, ld, i0, m / DLRT_GEMM_NR, p0, kc, pstride, dst, DLRT_GEMM_NR);
    else if (!by_rows && w == DLRT_GEMM_MR && m >= 2 * DLRT_GEMM_MR)
        r = dlrt_gemm_pack_across(X, ld, i0, m / DLRT_GEMM_MR, p0, kc, pstride, dst, DLRT_GEMM_MR);
    dst += (size_t)(r / w) * pstride;
    for (; r < m; r += w, dst += pstride) {
        int n = DLRT_MIN(w, m - r);
        if (by_rows) {
            int ii = 0;
#ifdef DLRT_GEMM_TR8
            /* blocks of 8 lines (B panels) or a whole A panel of 6, 8 depths at a time */
            const int nl = w % 8 == 0 ? 8 : w == 6 ? 6 : 0;
            for (; nl && ii + nl <= n; ii += nl) {
                const float *src = X + (i0 + r + ii) * ld + p0;
                int p = 0;
#ifdef DLRT_GEMM_TR6X16
                if (w == 6) /* a whole A panel (nl 6, ii 0) */
                    for (; p + 16 <= kc; p += 16) {
                        dlrt_gemm_tr6x16_ahead(src + p, ld);
                        dlrt_gemm_tr6x16(src + p, ld, dst + p * w);
                    }
#endif
                for (; p + 8 <= kc; p += 8) dlrt_gemm_tr8(src + p, ld, nl, dst + p * w + ii, w);
                for (; p < kc; p++)
                    for (int l = 0; l < nl; l++) dst[p * w + ii + l] = src[l * ld + p];
            }
#endif
            for (; ii < n; ii++) {
                const float *src = X + (i0 + r + ii) * ld + p0;
                for (int p = 0; p < kc; p++) dst[p * w + ii] = src[p];
            }
        } else if (n == DLRT_GEMM_MR && w == DLRT_GEMM_MR) { /* a full A panel of a transposed A:
                                                              * no memcpy call per 24 bytes */
            dlrt_gemm_pack_full(X + p0 * ld + i0 + r, ld, kc, dst, DLRT_GEMM_MR);
#ifdef DLRT_GEMM_NARROW
        } else if (w == DLRT_GEMM_NR) { /* a partial B panel: whole vectors as inline moves, not
                                         * a copy call per depth (a Winograd product's 16 columns
                                         * made 18000 calls a layer) */
            const int nvec = n / DLRT_GEMM_VW;
            const float *src = X + p0 * ld + i0 + r;
            for (int p = 0; p < kc; p++, src += ld) {
                float *d = dst + p * w;
                for (int v = 0; v < nvec; v++)
                    dlrt_gemm_pack_full(src + v * DLRT_GEMM_VW, 0, 1, d + v * DLRT_GEMM_VW,
                                        DLRT_GEMM_VW);
                for (int ii = nvec * DLRT_GEMM_VW; ii < n; ii++) d[ii] = src[ii];
            }
#endif
        } else {
            for (int p = 0; p < kc; p++) {
                const float *src = X + (p0 + p) * ld + i0 + r;
                for (int ii = 0; ii < n; ii++) dst[p * w + ii] = src[ii];
            }
        }
        dlrt_gemm_pad_panel(dst, n, w, kc);
    }
}

/* dlrt_gemm_pack_operand, in parallel when par (a parallel product packing its shared operand
 * once: the threads would otherwise wait for one). */
static void dlrt_gemm_pack_all(int operand, int64_t lines, int64_t K, const float *X, int64_t ld,
                               int trans, const dlrt_gemm_gather *gx, float *dst, int par);

/* What one call computes: C (or C^T when c_trans: element (i, j) of the product lands at
 * C[j * ldc + i]) = epilogue(op(A) op(B)). The epilogue is in C's orientation. */
typedef struct dlrt_gemm_args {
    const float *A, *B;
    int64_t lda, ldb;
    int trans_a, trans_b, c_trans;
    int a_packed, b_packed; /* A / B already in panels over all of K (dlrt_gemm_pack_operand) */
    /* prepacked B in cache (DLRT_B_PACKED_HOT): not prefetched */
    int b_hot;
    const dlrt_gemm_gather *a_gather, *b_gather; /* else made while packed, when not NULL */
    const dlrt_gemm_index *a_index; /* else op(A) read in place through this (transposed only) */
    int one_pass;                   /* all of K in one block (dlrt_gemm_run) */
    int b_direct; /* B's full panels read in place, rows ldb apart (dlrt_gemm_b_in_place) */
    int a_direct; /* op(A)'s full row panels read in place, depths lda apart (trans_a only) */
    int kc;       /* else the K block: DLRT_GEMM_KC or DLRT_GEMM_KC_STREAM */
    float *C;
    int64_t ldc;
    const dlrt_epilogue *ep;
    float *ws; /* where operands shared by several tiles are packed once (may be NULL) */
    size_t ws_floats;
    int bf16; /* products of bfloat16 operands (gemm-bf16.h; only where DLRT_GEMM_BF16) */
    int a_pairs, b_pairs; /* bf16: A / B packed in depth pairs over all of K (dlrt_gemm_run) */
} dlrt_gemm_args;

/* Stores row i (n values starting at column j0) of the product through the epilogue. */
static void dlrt_gemm_store_row(const dlrt_gemm_args *g, int64_t i, int64_t j0, float *row, int n) {
    if (!g->c_trans) {
        dlrt_epi_apply(g->ep, i, j0, row, n);
        memcpy(g->C + i * g->ldc + j0, row, (size_t)n * sizeof(float));
        return;
    }
    float *dst = g->C + j0 * g->ldc + i; /* one element per row of C (the short paths only) */
    for (int j = 0; j < n; j++) {
        float v = row[j];
        dlrt_epi_apply(g->ep, j0 + j, i, &v, 1);
        dst[j * g->ldc] = v;
    }
}

#ifdef DLRT_GEMM_VW
/* Columns [0, VW) of the first `rows` (<= VW) rows of blk (rows NR floats apart) at (i0, j0) of a
 * transposed product, transposed in registers, the rows past `rows` as zeros: column jj is then
 * one vector, `rows` consecutive elements of row j0 + jj of C, finished there with
 * dlrt_epi_apply's operations (dlrt_gemm_epi_vec, unfused), so the results are those of the
 * scalar path, and stored. A whole block (rows == VW: a constant where it is inlined) reads and
 * stores whole vectors; a partial one copies its bias and residual out of C's row first and
 * stores `rows` floats, so nothing past the row's end is touched. Partial blocks took one scalar
 * epilogue call per column before: a twentieth of a 1x1 convolution on a 7x7 plane (49 = 3 x 16
 * + 1 rows). */
static DLRT_INLINE void dlrt_gemm_store_block(const dlrt_gemm_args *g, int64_t i0, int64_t j0,
                                              const float *blk, const int rows) {
    const dlrt_epilogue *ep = g->ep;
    dlrt_vf r[DLRT_GEMM_VW];
    for (int l = 0; l < DLRT_GEMM_VW; l++)
        r[l] = l < rows ? DLRT_VLOAD(blk + l * DLRT_GEMM_NR) : DLRT_VZERO();
    dlrt_gemm_vtranspose(r);
    for (int jj = 0; jj < DLRT_GEMM_VW; jj++) {
        const int64_t row = j0 + jj;
        float *dst = g->C + row * g->ldc + i0;
        const float *bp = ep && ep->bias ? ep->bias + row * ep->bias_rs + i0 * ep->bias_cs : NULL;
        const float *rp = ep && ep->residual ? ep->residual + row * ep->res_rs + i0 : NULL;
        dlrt_vf v = r[jj];
        if (rows == DLRT_GEMM_VW) {
            if (ep) v = dlrt_gemm_epi_vec(ep, v, bp, rp);
            DLRT_VSTORE(dst, v);
            continue;
        }
        const size_t bytes = (size_t)rows * sizeof(float);
        float bias[DLRT_GEMM_VW] = {0}, res[DLRT_GEMM_VW] = {0}, out[DLRT_GEMM_VW];
        if (bp && ep->bias_cs != 0) memcpy(bias, bp, bytes), bp = bias;
        if (rp) memcpy(res, rp, bytes), rp = res;
        if (ep) v = dlrt_gemm_epi_vec(ep, v, bp, rp);
        DLRT_VSTORE(out, v);
        memcpy(dst, out, bytes);
    }
    if (dlrt_gemm_act_after(ep)) /* after the stores: no call while r is live (it spilled) */
        for (int jj = 0; jj < DLRT_GEMM_VW; jj++)
            dlrt_act_apply(ep->act, ep->act_a, ep->act_b, g->C + (j0 + jj) * g->ldc + i0, rows);
}
#endif

/* Block blk (mr <= MC rows x nr, rows NR floats apart) at (i0, j0) of a transposed product: its
 * column jj is mr consecutive elements of row j0 + jj of C, finished there with the epilogue and
 * stored with one contiguous write. Blocks of VW columns are transposed in registers, VW rows at
 * a time and then the rows left (the scalar gather cost about 1.5 cycles an element: a seventh of
 * a 1x1 convolution on a 7x7 plane); the columns past them, and every column where the epilogue's
 * strides do not allow vectors, go element by element. */
static void dlrt_gemm_store_cols(const dlrt_gemm_args *g, int64_t i0, int64_t j0, const float *blk,
                                 int mr, int nr) {
    int vr = 0, vc = 0; /* rows and columns done by whole blocks */
#ifdef DLRT_GEMM_VW
    if (dlrt_gemm_epi_direct(g->ep)) {
        vr = mr / DLRT_GEMM_VW * DLRT_GEMM_VW, vc = nr / DLRT_GEMM_VW * DLRT_GEMM_VW;
        for (int jj = 0; jj < vc; jj += DLRT_GEMM_VW) {
            for (int ii = 0; ii < vr; ii += DLRT_GEMM_VW)
                dlrt_gemm_store_block(g, i0 + ii, j0 + jj, blk + ii * DLRT_GEMM_NR + jj,
                                      DLRT_GEMM_VW);
            if (vr < mr)
                dlrt_gemm_store_block(g, i0 + vr, j0 + jj, blk + vr * DLRT_GEMM_NR + jj, mr - vr);
        }
        vr = mr; /* the columns of whole blocks are done */
    }
#endif
    for (int jj = 0; jj < nr; jj++) {
        const int from = jj < vc ? vr : 0;
        if (from == mr) continue;
        float v[DLRT_GEMM_MC];
        for (int ii = from; ii < mr; ii++) v[ii - from] = blk[ii * DLRT_GEMM_NR + jj];
        dlrt_epi_apply(g->ep, j0 + jj, i0 + from, v, mr - from);
        memcpy(g->C + (j0 + jj) * g->ldc + i0 + from, v, (size_t)(mr - from) * sizeof(float));
    }
}

#ifdef DLRT_GEMM_DIRECT_STORE
/* The last row tile's 1 .. MR - 1 rows, out of line (one call a column panel, against five more
 * inlined copies of the kernel in dlrt_gemm_tile). They went through the partial-sum buffer and
 * a scalar epilogue per row before: MobileNetV2's 32 -> 16 on 112x112 (rows 12-15) 0.067 ->
 * 0.065 ms. */
static void __attribute__((noinline))
dlrt_gemm_micro_store_short(int rows, int kc, const float *restrict a, int64_t astep,
                            const float *restrict b, int64_t bstep, const float *part, float *C,
                            int64_t ldc, const dlrt_epilogue *ep, int64_t i0, int64_t j0) {
#define DLRT_GEMM_STORE_M(n)                                                                       \
    dlrt_gemm_micro_store_rows(kc, a, astep, b, bstep, part, C, ldc, ep, i0, j0, n)
    DLRT_GEMM_SHORT_ROWS(rows, DLRT_GEMM_STORE_M);
#undef DLRT_GEMM_STORE_M
}
#endif

/* Asks for bytes [from, to) of the `bytes` at p to be brought towards the core (locality 2).
 * Prepacked operands are a layer's weights, read from memory once per call: the first row tile
 * that reads an A micro-panel or a B block would otherwise stall on each line, so dlrt_gemm_tile
 * fetches the next ones while it computes (figures in dlrt_gemm_run, where the K block for such
 * products is chosen). */
static DLRT_INLINE void dlrt_gemm_prefetch(const float *p, size_t bytes, size_t from, size_t to) {
    const char *c = (const char *)p;
    if (to > bytes) to = bytes;
    for (size_t o = from; o < to; o += 64) __builtin_prefetch(c + o, 0, 2);
}

#include "gemm-bf16.h"

/* One MC x NC tile of the product (mc x nc valid) at (i0, j0), all of K. */
static void dlrt_gemm_tile(const dlrt_gemm_args *g, int64_t K, int64_t i0, int mc, int64_t j0,
                           int nc) {
#ifdef DLRT_GEMM_BF16
    if (g->bf16) {
        dlrt_gemm_tile_bf16(g, K, i0, mc, j0, nc);
        return;
    }
#endif
    float apack[DLRT_GEMM_MC * DLRT_GEMM_KC];
    float bpack[DLRT_GEMM_KC * DLRT_GEMM_NC];
    /* partial sums while K > KC, one MR x NR block per register tile */
    float part[DLRT_GEMM_MC * DLRT_GEMM_NC];
#ifdef DLRT_GEMM_DIRECT_STORE
    /* full tiles of a product stored in C's orientation skip the row-by-row store */
    const int direct = !g->c_trans && dlrt_gemm_epi_direct(g->ep);
    /* and a last row tile of fewer than MR rows too, where the direct store's fused bias (one
     * multiply-add) rounds as the row store's product-then-sum does: the one-row paths promise
     * the tiles' bits (dlrt_gemm_row_packed) */
    const dlrt_epilogue *ep = g->ep;
    const int direct_short = direct && (!ep || !ep->bias || ep->bias_cs == 0 || ep->beta == 1.0f);
#endif
    const int64_t kstep = g->one_pass ? K : g->kc;
    for (int64_t p0 = 0; p0 < K; p0 += kstep) {
        int kc = (int)DLRT_MIN(kstep, K - p0);
        int first = p0 == 0, last = p0 + kc == K;
        /* read in place, only a last partial row panel is packed (the kernels of full-width
         * panels read all MR lines) */
        const int a_in_place = g->a_direct ? mc / DLRT_GEMM_MR * DLRT_GEMM_MR : 0;
        if (!g->a_packed && !g->a_index && a_in_place < mc)
            dlrt_gemm_pack(g->A, g->lda, !g->trans_a, g->a_gather, i0 + a_in_place, mc - a_in_place,
                           p0, kc, DLRT_GEMM_MR, (size_t)DLRT_GEMM_MR * kc, apack);
        /* read in place, only a last partial panel is packed (its kernels read whole vectors,
         * past the matrix on its last row) */
        const int in_place = g->b_direct ? nc / DLRT_GEMM_NR * DLRT_GEMM_NR : 0;
        if (!g->b_packed && in_place < nc)
            dlrt_gemm_pack(g->B, g->ldb, g->trans_b, g->b_gather, j0 + in_place, nc - in_place, p0,
                           kc, DLRT_GEMM_NR, (size_t)DLRT_GEMM_NR * kc, bpack);
        for (int c = 0; c < nc; c += DLRT_GEMM_NR) {
            int nr = DLRT_MIN(DLRT_GEMM_NR, nc - c);
            /* a prepacked panel holds all of K: this block starts p0 lines in */
            const float *bp = g->b_packed
                                  ? g->B + (size_t)(j0 + c) * (size_t)K + (size_t)p0 * DLRT_GEMM_NR
                              : c < in_place ? g->B + p0 * g->ldb + j0 + c
                                             : bpack + (size_t)(c - in_place) * kc;
            const int64_t bstep = c < in_place ? g->ldb : DLRT_GEMM_NR;
            /* the prepacked B block used next (the next panel, else the next K block's first),
             * fetched a share (whole cache lines) per row tile */
            const float *bnext = NULL;
            const size_t bbytes = (size_t)kc * DLRT_GEMM_NR * sizeof(float);
            const int row_tiles = (mc + DLRT_GEMM_MR - 1) / DLRT_GEMM_MR;
            const size_t share = (bbytes / (size_t)row_tiles + 63) & ~(size_t)63;
            if (g->b_packed && !g->b_hot && c + DLRT_GEMM_NR < nc)
                bnext = bp + (size_t)DLRT_GEMM_NR * (size_t)K;
            else if (g->b_packed && !g->b_hot && p0 + kc < K)
                bnext = g->B + (size_t)j0 * (size_t)K + (size_t)(p0 + kc) * DLRT_GEMM_NR;
            for (int r = 0; r < mc; r += DLRT_GEMM_MR) {
                float *pt = part + ((size_t)c * DLRT_GEMM_MC + (size_t)r * DLRT_GEMM_NR);
                const int a_here = r < a_in_place; /* this row panel is read in place */
                const float *ap =
                    g->a_packed ? g->A + (size_t)(i0 + r) * (size_t)K + (size_t)p0 * DLRT_GEMM_MR
                    : a_here    ? g->A + p0 * g->lda + i0 + r
                                : apack + (size_t)(r - a_in_place) * kc;
                const int64_t astep = a_here ? g->lda : DLRT_GEMM_MR;
                int mr = DLRT_MIN(DLRT_GEMM_MR, mc - r);
                if (bnext) {
                    const size_t at = (size_t)(r / DLRT_GEMM_MR) * share;
                    dlrt_gemm_prefetch(bnext, bbytes, at, at + share);
                }
                if (g->a_index) { /* rows past the product: not computed, or repeat row i0 + r */
                    const float *ab[DLRT_GEMM_MR];
                    for (int i = 0; i < DLRT_GEMM_MR; i++)
                        ab[i] = g->a_index->rows[i0 + r + (r + i < mc ? i : 0)];
#ifdef DLRT_GEMM_NARROW
                    const int nv = dlrt_gemm_vectors(nr);
#else
                    const int nv = 0;
#endif
                    dlrt_gemm_micro_idx(mr, nv, kc, ab, g->a_index->off + p0, bp, pt, !first);
                    continue;
                }
                if (g->a_packed && c == 0) { /* the first pass over A's block reads memory */
                    const size_t abytes = (size_t)kc * DLRT_GEMM_MR * sizeof(float);
                    if (r + DLRT_GEMM_MR < mc)
                        dlrt_gemm_prefetch(ap + (size_t)DLRT_GEMM_MR * (size_t)K, abytes, 0,
                                           abytes);
                    else if (p0 + kc < K)
                        dlrt_gemm_prefetch(g->A + (size_t)i0 * (size_t)K +
                                               (size_t)(p0 + kc) * DLRT_GEMM_MR,
                                           abytes, 0, abytes);
                }
#ifdef DLRT_GEMM_DIRECT_STORE
                if (last && direct && mr == DLRT_GEMM_MR && nr == DLRT_GEMM_NR) {
                    dlrt_gemm_micro_store_rows(kc, ap, astep, bp, bstep, first ? NULL : pt, g->C,
                                               g->ldc, ep, i0 + r, j0 + c, DLRT_GEMM_MR);
                    continue;
                }
                if (last && direct_short && nr == DLRT_GEMM_NR) {
                    dlrt_gemm_micro_store_short(mr, kc, ap, astep, bp, bstep, first ? NULL : pt,
                                                g->C, g->ldc, ep, i0 + r, j0 + c);
                    continue;
                }
#endif
#ifdef DLRT_GEMM_NARROW
                const int nv = dlrt_gemm_vectors(nr);
                /* (a panel of fewer vectors than NV is a partial one: packed, never in place)
                 * two full row panels of a one- or two-vector panel at once (their partial
                 * sums are adjacent in part, and the A panels follow each other), where the
                 * accumulators fit the registers: two vectors only with 32 of them */
                const int tall =
                    (nv == 1 || (nv == 2 && DLRT_GEMM_NV > 2)) && r + 2 * DLRT_GEMM_MR <= mc;
                const float *ap1 = ap + (g->a_packed ? (size_t)DLRT_GEMM_MR * (size_t)K
                                         : a_here    ? (size_t)DLRT_GEMM_MR
                                                     : (size_t)DLRT_GEMM_MR * kc);
                if (tall && nv == 1)
                    dlrt_gemm_micro_tall_n1(kc, ap, ap1, astep, bp, pt, !first);
                else if (tall)
                    dlrt_gemm_micro_tall_n2(kc, ap, ap1, astep, bp, pt, !first);
                else if (nv == 1)
                    dlrt_gemm_micro_n1(kc, ap, astep, bp, bstep, pt, !first);
                else if (nv == 2 && DLRT_GEMM_NV > 2)
                    dlrt_gemm_micro_n2(kc, ap, astep, bp, bstep, pt, !first);
                else if (nv == 3 && DLRT_GEMM_NV > 3)
                    dlrt_gemm_micro_n3(kc, ap, astep, bp, bstep, pt, !first);
                else if (mr < DLRT_GEMM_MR)
                    dlrt_gemm_micro_short(mr, kc, ap, astep, bp, bstep, pt, !first);
                else
#endif
                    dlrt_gemm_micro(kc, ap, astep, bp, bstep, pt, !first);
#ifdef DLRT_GEMM_NARROW
                if (tall) mr = 2 * DLRT_GEMM_MR; /* the next panel is done: store both */
#endif
                if (last && !g->c_trans)
                    for (int i = 0; i < mr; i++)
                        dlrt_gemm_store_row(g, i0 + r + i, j0 + c, pt + i * DLRT_GEMM_NR, nr);
#ifdef DLRT_GEMM_NARROW
                if (tall) r += DLRT_GEMM_MR;
#endif
            }
            /* a transposed product's panel is stored once all its row tiles are done: each
             * column is then one run of mc elements of a row of C */
            if (last && g->c_trans)
                dlrt_gemm_store_cols(g, i0, j0 + c, part + (size_t)c * DLRT_GEMM_MC, mc, nr);
        }
    }
}

/* The product when K == 0: epilogue(0). */
static void dlrt_gemm_k0(const dlrt_gemm_args *g, int64_t M, int64_t N) {
    float row[64];
    for (int64_t i = 0; i < M; i++)
        for (int64_t j0 = 0; j0 < N; j0 += 64) {
            int n = (int)DLRT_MIN((int64_t)64, N - j0);
            for (int j = 0; j < n; j++) row[j] = 0.0f;
            dlrt_gemm_store_row(g, i, j0, row, n);
        }
}

enum { DLRT_DOT_LANES = 16, DLRT_DOT_ROWS = 4 };

/* out[r] = the dot product of a (stride as) with row r of b (rows ldb apart, K long), for the
 * first `rows` rows (constant, at most DLRT_DOT_ROWS): with a contiguous a, DLRT_DOT_LANES
 * independent partial sums per row, which vectorize without reassociating a single sum; each
 * sum runs in the same order whatever `rows`. */
static DLRT_INLINE void dlrt_gemm_dots(const float *a, int64_t as, const float *b, int64_t ldb,
                                       int64_t K, float *out, const int rows) {
    float part[DLRT_DOT_ROWS][DLRT_DOT_LANES] = {{0}};
    int64_t p = 0;
    if (as == 1)
        for (; p + DLRT_DOT_LANES <= K; p += DLRT_DOT_LANES)
            for (int r = 0; r < rows; r++)
                for (int l = 0; l < DLRT_DOT_LANES; l++)
                    part[r][l] += a[p + l] * b[r * ldb + p + l];
    for (int r = 0; r < rows; r++) {
        float s = 0.0f;
        for (int64_t q = p; q < K; q++) s += a[q * as] * b[r * ldb + q];
        for (int l = 0; l < DLRT_DOT_LANES; l++) s += part[r][l];
        out[r] = s;
    }
}

/* M == 1: a vector times a matrix; packing would cost as much as the arithmetic. Chunks
 * [lo, hi) of DLRT_GEMM_ROW_CH columns. */
enum { DLRT_GEMM_ROW_CH = 64 };
typedef struct dlrt_gemm_row_job {
    const dlrt_gemm_args *g;
    int64_t N, K;
} dlrt_gemm_row_job;

static void dlrt_gemm_row_chunks(void *ctx, int64_t lo, int64_t hi) {
    enum { CH = DLRT_GEMM_ROW_CH };
    const dlrt_gemm_row_job *job = ctx;
    const dlrt_gemm_args *g = job->g;
    const int64_t N = job->N, K = job->K;
    const float *A = g->A, *B = g->B;
    const int64_t as = g->trans_a ? g->lda : 1, ldb = g->ldb;
    for (int64_t ch = lo; ch < hi; ch++) {
        const int64_t j0 = ch * CH;
        const int n = (int)DLRT_MIN((int64_t)CH, N - j0);
        float row[CH];
        if (!g->trans_b) {
            for (int j = 0; j < n; j++) row[j] = 0.0f;
            for (int64_t p = 0; p < K; p++) {
                const float av = A[p * as];
                const float *bp = B + p * ldb + j0;
                for (int j = 0; j < n; j++) row[j] += av * bp[j];
            }
        } else {
            /* four rows of B at a time while they last: independent chains and memory streams */
            int j = 0;
            for (; j + 4 <= n; j += 4)
                dlrt_gemm_dots(A, as, B + (j0 + j) * ldb, ldb, K, row + j, 4);
            for (; j < n; j++) dlrt_gemm_dots(A, as, B + (j0 + j) * ldb, ldb, K, row + j, 1);
        }
        dlrt_gemm_store_row(g, 0, j0, row, n);
    }
}

static void dlrt_gemm_row(const dlrt_gemm_args *g, int64_t N, int64_t K) {
    const int64_t chunks = (N + DLRT_GEMM_ROW_CH - 1) / DLRT_GEMM_ROW_CH;
    dlrt_gemm_row_job job = {g, N, K};
    dlrt_parallel_for(chunks, chunks > 1 && (double)N * (double)K >= DLRT_PAR_MIN,
                      dlrt_gemm_row_chunks, &job);
}

#ifdef DLRT_GEMM_VW
/* M == 1 against a prepacked B (a classifier's dense layer at batch 1): each panel, all of K
 * contiguous, streamed once from start to end, instead of through the tiles, which interleave
 * KC_STREAM-deep pieces of four panels with per-block overhead: ResNet-50's 2048 -> 1000 from
 * memory 0.256 -> 0.17-0.2 ms on one thread, as fast as a plain read of the 8 MB (software
 * prefetches were no faster). The sums run as the tiles run them (a chain per
 * KC_STREAM block, the blocks added in order: dlrt_gemm_tile with dlrt_gemm_run's kc), so the
 * results are the same bits. */
static void dlrt_gemm_row_panels(void *ctx, int64_t lo, int64_t hi) {
    const dlrt_gemm_row_job *job = ctx;
    const dlrt_gemm_args *g = job->g;
    const int64_t N = job->N, K = job->K;
    const float *A = g->A;
    const int64_t as = g->trans_a ? g->lda : 1;
    for (int64_t pn = lo; pn < hi; pn++) {
        const float *b = g->B + (size_t)pn * DLRT_GEMM_NR * (size_t)K;
        const int64_t j0 = pn * DLRT_GEMM_NR;
        dlrt_vf sum[DLRT_GEMM_NV];
        for (int j = 0; j < DLRT_GEMM_NV; j++) sum[j] = DLRT_VZERO(); /* set by block 0 */
        for (int64_t p0 = 0; p0 < K; p0 += DLRT_GEMM_KC_STREAM) {
            const int64_t end = DLRT_MIN(K, p0 + DLRT_GEMM_KC_STREAM);
            dlrt_vf c[DLRT_GEMM_NV];
            for (int j = 0; j < DLRT_GEMM_NV; j++) c[j] = DLRT_VZERO();
            for (int64_t p = p0; p < end; p++) {
                const float *bp = b + (size_t)p * DLRT_GEMM_NR;
                const dlrt_vf av = DLRT_VBCAST(A[p * as]);
                for (int j = 0; j < DLRT_GEMM_NV; j++)
                    c[j] = DLRT_VFMA(av, DLRT_VLOAD(bp + j * DLRT_GEMM_VW), c[j]);
            }
            for (int j = 0; j < DLRT_GEMM_NV; j++) sum[j] = p0 ? DLRT_VADD(sum[j], c[j]) : c[j];
        }
        float row[DLRT_GEMM_NR];
        for (int j = 0; j < DLRT_GEMM_NV; j++) DLRT_VSTORE(row + j * DLRT_GEMM_VW, sum[j]);
        dlrt_gemm_store_row(g, 0, j0, row, (int)DLRT_MIN((int64_t)DLRT_GEMM_NR, N - j0));
    }
}

/* Shared over the threads from 64K weights (256 KiB) on, an eighth of what other products need:
 * the weights stream from memory or L2, and each thread streams only its panels, from its own
 * cache when the product is repeated (an LSTM's recurrent weights at batch 1, 1024 x 256, every
 * step: a 64-step layer 0.58-0.63 -> 0.34-0.36 ms at 2 threads). */
static void dlrt_gemm_row_packed(const dlrt_gemm_args *g, int64_t N, int64_t K) {
    const int64_t panels = (N + DLRT_GEMM_NR - 1) / DLRT_GEMM_NR;
    dlrt_gemm_row_job job = {g, N, K};
    dlrt_parallel_for(panels, panels > 1 && (double)N * (double)K >= DLRT_PAR_MIN / 16,
                      dlrt_gemm_row_panels, &job);
}
#endif

/* Where block b of n starts when len lines are cut into n blocks of whole panels of w lines: the
 * panels are shared out as evenly as they go, the larger shares last, since the last block holds
 * the partial panel. No block is wider than ceil(len / n) rounded up to whole panels. */
static int64_t dlrt_gemm_cut(int64_t len, int64_t w, int64_t n, int64_t b) {
    const int64_t panels = (len + w - 1) / w, q = panels / n, r = panels % n;
    const int64_t start = b * q + DLRT_MAX((int64_t)0, b - (n - r));
    return DLRT_MIN(start * w, len);
}

_Static_assert(DLRT_GEMM_KC_STREAM <= DLRT_GEMM_KC, "a streamed K block fits the tile buffers");
_Static_assert(DLRT_GEMM_MC % DLRT_GEMM_MT == 0 && DLRT_GEMM_MT % DLRT_GEMM_MR == 0,
               "a transposed product's row unit divides the tile height");

/* Block b of a cut (dlrt_gemm_cut): its first line, and its width in *width. */
static int64_t dlrt_gemm_block(int64_t len, int64_t w, int64_t n, int64_t b, int64_t *width) {
    const int64_t lo = dlrt_gemm_cut(len, w, n, b);
    *width = dlrt_gemm_cut(len, w, n, b + 1) - lo;
    return lo;
}

/* Tile t (bi, bj) of a tm x tn cut in the order the threads share the tiles out: row-major, or
 * column-major (cols_first) where B is prepacked weights, so that a thread's run of tiles covers as
 * few of their columns as it can and streams only those: MobileNetV2's 960 -> 320 on 7x7 (49
 * rows, 5 panels: 2 x 5 tiles) gave each of 2 threads 24 or 25 rows of all 5 panels, which then
 * both read all 1.2 MB of weights: 2 threads, layer alone, 0.079-0.091 -> 0.073-0.080 ms. */
static void dlrt_gemm_tile_at(int64_t t, int64_t tm, int64_t tn, int cols_first, int64_t *bi,
                              int64_t *bj) {
    *bi = cols_first ? t % tm : t / tn;
    *bj = cols_first ? t / tm : t % tn;
}

/* The thread (of `team`) that runs tile (bi, bj) of a tm x tn cut of an M x N product: tiles in
 * the order of dlrt_gemm_tile_at are shared out by area, each to the thread whose share holds
 * its middle. */
static int64_t dlrt_gemm_owner(int64_t M, int64_t N, int64_t mu, int64_t tm, int64_t tn, int64_t bi,
                               int64_t bj, int cols_first, int64_t team) {
    int64_t h, w;
    const int64_t i0 = dlrt_gemm_block(M, mu, tm, bi, &h);
    const int64_t j0 = dlrt_gemm_block(N, DLRT_GEMM_NR, tn, bj, &w);
    const double mid = cols_first
                           ? (double)j0 * (double)M + (double)w * ((double)i0 + 0.5 * (double)h)
                           : (double)i0 * (double)N + (double)h * ((double)j0 + 0.5 * (double)w);
    return DLRT_MIN(team - 1, (int64_t)(mid * (double)team / ((double)M * (double)N)));
}

/* The largest area that dlrt_gemm_owner gives one of `team` threads. */
static int64_t dlrt_gemm_max_load(int64_t M, int64_t N, int64_t mu, int64_t tm, int64_t tn,
                                  int cols_first, int64_t team) {
    int64_t best = 0, load = 0, owner = 0;
    for (int64_t t = 0; t < tm * tn; t++) {
        int64_t bi, bj, h, w;
        dlrt_gemm_tile_at(t, tm, tn, cols_first, &bi, &bj);
        const int64_t o = dlrt_gemm_owner(M, N, mu, tm, tn, bi, bj, cols_first, team);
        if (o != owner) best = DLRT_MAX(best, load), load = 0, owner = o;
        dlrt_gemm_block(M, mu, tm, bi, &h);
        dlrt_gemm_block(N, DLRT_GEMM_NR, tn, bj, &w);
        load += h * w;
    }
    return DLRT_MAX(best, load);
}

/* Cuts an M x N product that dlrt_gemm_split's *tm x *tn tiles share out over 1/16 unevenly
 * (load: their largest share) into more tiles, in rows where B is not prepacked and M > MC (B is
 * then packed once for all row tiles where the caller gives a workspace), else in columns (never
 * below two panels where B is not prepacked, the split's own floor): the first count up to twice
 * as many (as fine as the split's next step), and at most EVEN_TRIES more, that gives no thread
 * over 1/64 more than its share; else the cut stays. GPT-2's 128 x 2304 (36 panels in 9 tiles:
 * 16 and 20 on 2 threads) is even in 11; ResNet-50's stride-2 3x3 on 28x28 (784 x 128
 * transposed: 432 and 352 rows) in two columns. Not in rows for few-row products (MobileNetV2's
 * 16 x 12544 in two row tiles: 0.038 -> 0.045 ms), nor for differences under 1/16 (128 x 768 in
 * 4 tiles instead of 6: GPT-2's fc_proj +1.5%). The split runs at every call: the tries are
 * bounded (a 24111 x 1836 product on 128 threads, 252 x 8 tiles, had weighed 25000 more tiles in
 * 8 tries; now 1), and skipped where whole units alone, all in one tile the other way, cannot
 * come within 1/64 (65 * M * N cannot overflow: C holds M * N floats). */
static void dlrt_gemm_even_out(int64_t M, int64_t N, int64_t mu, int64_t threads, int cols_first,
                               int64_t load, int64_t *tm, int64_t *tn) {
    /* at most 8 more tiles, and about 4096 tiles weighed in all (each try weighs every tile) */
    enum { EVEN_TRIES = 8, EVEN_BUDGET = 4096 };
    if (16 * load <= 17 * M * N / threads) return;
    const int by_rows = !cols_first && M > DLRT_GEMM_MC;
    int64_t *cut = by_rows ? tm : tn;
    const int64_t first = *cut, other = by_rows ? *tn : *tm;
    const int64_t len = by_rows ? M : N, unit = by_rows ? mu : DLRT_GEMM_NR;
    const int64_t units = (len + unit - 1) / unit;
    /* with one tile the other way and units all alike, some thread gets ceil(units / threads) */
    if (other == 1 && len % unit == 0 &&
        64 * ((units + threads - 1) / threads) * threads > 65 * units)
        return;
    const int64_t most = by_rows || cols_first ? units : (units + 1) / 2;
    const int64_t tries = DLRT_MIN((int64_t)EVEN_TRIES, EVEN_BUDGET / (2 * *tm * *tn));
    const int64_t last = DLRT_MIN(DLRT_MIN(most, 2 * first), first + tries);
    for (*cut = first + 1; *cut <= last; ++*cut)
        if (64 * dlrt_gemm_max_load(M, N, mu, *tm, *tn, cols_first, threads) <=
            65 * M * N / threads)
            return;
    *cut = first;
}

/* How an M x N product is cut for `threads` threads: into tm x tn tiles of whole panels, as even
 * as panels allow (dlrt_gemm_cut), each thread starting on a run of consecutive tiles holding
 * about its share of the area (dlrt_gemm_owner; the others take over its end if it falls
 * behind: dlrt_gemm_run). While a thread would still get over 1/8 more than
 * its share (BERT's 128 x 768 layers: 3 tiles on 2 threads), the cut goes finer: rows first
 * (that repacks nothing), then columns, never below two panels; but with B prepacked (weights,
 * read from memory) and 2 panels a thread or more, columns first, so that each thread streams
 * only its share of the weights instead of all of them (BERT-base 60.0 -> 56.6 ms and GPT-2
 * 83.9 -> 81.8 on 2 threads; MobileNetV2's 320 -> 1280 on 7x7 0.115 -> 0.093 ms). Even tiles
 * matter: 784 columns cut at 256 were 256+256+256+16, two tiles a thread but 512 columns
 * against 272. A cut within 1/8 but over 1/16 uneven is evened out where a finer one can be
 * (dlrt_gemm_even_out). Each element's sum runs the same whatever the cut, so results do not
 * depend on it. */
static int dlrt_gemm_split(int64_t M, int64_t N, int64_t mu, int64_t threads, int cols_first,
                           int64_t *tm, int64_t *tn) {
    int64_t mcut = DLRT_GEMM_MC, ncut = DLRT_GEMM_NC;
    const int64_t panels = (N + DLRT_GEMM_NR - 1) / DLRT_GEMM_NR;
    for (;;) {
        *tm = (M + mcut - 1) / mcut, *tn = (N + ncut - 1) / ncut;
        if (threads <= 1) return 1;
        const int64_t load = dlrt_gemm_max_load(M, N, mu, *tm, *tn, cols_first, threads);
        if (8 * load <= 9 * M * N / threads) {
            dlrt_gemm_even_out(M, N, mu, threads, cols_first, load, tm, tn);
            return 1;
        }
        if (cols_first && panels >= 2 * threads && ncut > DLRT_GEMM_NR && *tn < panels)
            ncut = DLRT_MAX((int64_t)DLRT_GEMM_NR,
                            (ncut / 2 + DLRT_GEMM_NR - 1) / DLRT_GEMM_NR * DLRT_GEMM_NR);
        else if (mcut > mu && *tm < (M + mu - 1) / mu)
            mcut = (mcut / 2 + mu - 1) / mu * mu;
        else if (ncut >= 4 * DLRT_GEMM_NR)
            ncut /= 2;
        else
            return 0;
    }
}

/* dlrt_gemm_split with rows in units of *mu: a transposed product's in whole vector-square
 * blocks of its store (MT, dlrt_gemm_store_cols), so that only the product's last rows take the
 * partial-block path (then a scalar one; its 132-row tiles had left 4 or 14 rows each there: 3%
 * of conv1's time), unless those units cannot share the product out evenly over the threads (a
 * 7x7 plane's 49 rows: 48 + 1 on 2 threads, MobileNetV2's 960 -> 160 0.043 -> 0.068 ms); else
 * MR. */
static void dlrt_gemm_split_rows(int64_t M, int64_t N, int c_trans, int cols_first, int64_t threads,
                                 int64_t *mu, int64_t *tm, int64_t *tn) {
    *mu = c_trans ? DLRT_GEMM_MT : DLRT_GEMM_MR;
    if (!dlrt_gemm_split(M, N, *mu, threads, cols_first, tm, tn) && *mu != DLRT_GEMM_MR) {
        *mu = DLRT_GEMM_MR;
        dlrt_gemm_split(M, N, *mu, threads, cols_first, tm, tn);
    }
}

/* A product's tm x tn tiles in the order of dlrt_gemm_tile_at: the chunks of a
 * dlrt_parallel_spans job, each owner's run of them (dlrt_gemm_owner) one span. */
typedef struct dlrt_gemm_tiles_job {
    const dlrt_gemm_args *g;
    int64_t M, N, K, mu, tm, tn;
    int cols_first;
} dlrt_gemm_tiles_job;

/* Runs tiles [lo, hi) in order; where the tiles go down columns (cols_first), consecutive tiles of
 * one column run as one tile while their rows fit one (MC). */
static void dlrt_gemm_run_tiles(void *ctx, int64_t lo, int64_t hi, int slot) {
    const dlrt_gemm_tiles_job *j = ctx;
    (void)slot;
    for (int64_t t = lo; t < hi;) {
        int64_t bi, bj, mc, nc;
        dlrt_gemm_tile_at(t, j->tm, j->tn, j->cols_first, &bi, &bj);
        const int64_t i0 = dlrt_gemm_block(j->M, j->mu, j->tm, bi, &mc);
        const int64_t j0 = dlrt_gemm_block(j->N, DLRT_GEMM_NR, j->tn, bj, &nc);
        for (t++; j->cols_first && t < hi && t % j->tm != 0; t++) {
            int64_t h;
            dlrt_gemm_block(j->M, j->mu, j->tm, t % j->tm, &h);
            if (mc + h > DLRT_GEMM_MC) break;
            mc += h;
        }
        dlrt_gemm_tile(j->g, j->K, i0, (int)mc, j0, (int)nc);
    }
}

/* The first tile of each of `team` owners' runs (dlrt_gemm_owner: consecutive tiles, owners in
 * order) into starts[0 .. team). */
static void dlrt_gemm_owner_starts(const dlrt_gemm_tiles_job *j, int64_t team, int64_t *starts) {
    int64_t next = 0;
    for (int64_t t = 0; t < j->tm * j->tn && next < team; t++) {
        int64_t bi, bj;
        dlrt_gemm_tile_at(t, j->tm, j->tn, j->cols_first, &bi, &bj);
        const int64_t o =
            dlrt_gemm_owner(j->M, j->N, j->mu, j->tm, j->tn, bi, bj, j->cols_first, team);
        while (next <= o) starts[next++] = t;
    }
    while (next < team) starts[next++] = j->tm * j->tn;
}

/* The largest A packed once into the workspace for all column tiles (dlrt_gemm_run). */
#define DLRT_GEMM_WS_A_MAX ((size_t)4 << 20)

/* Whether B's full panels (NR columns of rows ldb floats apart) are read in place rather than
 * packed, for a K block of kc rows; the same rule decides for a transposed product's row panels
 * (MR lines, depths lda apart: dlrt_gemm_run's a_direct). Packing copies what the kernels then
 * read, which is the cost that matters when few row tiles read each panel: 1x1 convolutions with
 * few output channels (MobileNetV2's 144 -> 24 on 56x56 0.138 -> 0.114 ms, 32 -> 16 on 112x112
 * 0.123 -> 0.110; ResNet-50's 256 -> 64 on 56x56 0.532 -> 0.506, one thread, best of 4 alternating
 * rounds; Winograd's products and wide layers within 1%). What packing also buys is rows that
 * cannot evict each other: kc rows at a stride sharing a large power of two with the L2's way
 * size (1 MiB, 16 ways: 64 KiB) fall into few of its sets. Rows ldb floats apart start at
 * addresses 64 KiB / g apart mod the way (g = gcd(4 ldb, 64 KiB)), so about kc * g / 64 KiB of
 * them share a set (more when g is under their 320 bytes of lines); in place only while that is
 * at most half the ways. */
int dlrt_gemm_b_in_place(int64_t ldb, int64_t kc) {
#ifndef DLRT_GEMM_VW /* the portable kernel reads packed panels only (gemm-micro.h) */
    (void)ldb, (void)kc;
    return 0;
#else
    enum { L2_WAY = 65536, ROW_BYTES = 5 * 64, MAX_ROWS_PER_SET = 8 };
    int64_t g = L2_WAY, stride = (ldb * (int64_t)sizeof(float)) % L2_WAY;
    while (stride) { /* gcd(stride, L2_WAY) */
        const int64_t t = g % stride;
        g = stride, stride = t;
    }
    return kc * DLRT_MAX(g, (int64_t)ROW_BYTES) <= (int64_t)MAX_ROWS_PER_SET * L2_WAY;
#endif
}

static void dlrt_gemm_run(const dlrt_gemm_args *g, int64_t M, int64_t N, int64_t K) {
    if (K <= 0) {
        dlrt_gemm_k0(g, M, N);
        return;
    }
    /* (bfloat16 products round their operands whatever M: one row goes through the tiles) */
    if (M == 1 && !g->a_packed && !g->b_packed && !g->a_gather && !g->b_gather && !g->a_index &&
        !g->bf16) {
        dlrt_gemm_row(g, N, K);
        return;
    }
#ifdef DLRT_GEMM_VW
    if (M == 1 && g->b_packed && !g->a_packed && !g->a_gather && !g->a_index && !g->c_trans &&
        !g->bf16) {
        dlrt_gemm_row_packed(g, N, K);
        return;
    }
#endif
    /* prepacked A and one panel of B: all of K at once when B's panel fits the buffer, so A
     * (a layer's weights, read once) streams through in order and no partial sums round-trip.
     * Decided for the product, so that no tile sums differently from another. */
    dlrt_gemm_args run = *g;
    run.one_pass = g->a_packed && N <= DLRT_GEMM_NR &&
                   K * DLRT_GEMM_NR <= DLRT_GEMM_KC * DLRT_GEMM_NC && !g->bf16;
    /* prepacked B (weights, from memory) gets short K blocks, so that the next block's prefetch
     * fits in L1 beside the current one: read by few row tiles (a 7x7 plane run transposed: 49
     * rows), cold 512 x 49 x 4608 122 -> 161 GFLOP/s, 1280 x 49 x 320 102 -> 131 (one thread,
     * best of 3). By more, it pays too (weights cold, one thread, medians): BERT's 128 x 3072 x
     * 768 2.67 -> 2.52 ms and 128 x 768 x 3072 2.57 -> 2.51 (2 threads 1.31 -> 1.27, 1.36 ->
     * 1.35), ResNet-50's 1024 -> 256 on 14x14 (196 rows, transposed) 0.411 -> 0.395 ms,
     * MobileNetV2's 576 -> 96 there 0.088 -> 0.087; K blocks of 96 or 128 measured alike. The
     * prefetches alone gave cold 1x1 convolutions (1024 x 196 x 256) 158 -> 174 GFLOP/s and
     * BERT's 128 x 768 x 3072 176 -> 184. Decided for the product: every tile sums alike. */
    run.kc = g->b_packed ? DLRT_GEMM_KC_STREAM : DLRT_GEMM_KC;
    g = &run;
    const int par = (double)M * (double)N * (double)K >= DLRT_PAR_MIN;
    /* a product inside a parallel region (a Winograd frequency, a chunk of images) gets no
     * threads of its own, so it is not cut for them */
    const int64_t threads = par && !dlrt_in_parallel() ? dlrt_threads() : 1;
    int64_t mu, tm, tn;
    const int cols_first = g->b_packed; /* (before B may be packed into the workspace below) */
    dlrt_gemm_split_rows(M, N, g->c_trans, cols_first, threads, &mu, &tm, &tn);
    const int64_t tiles = tm * tn;
    /* B, unless prepacked, is read by every row of tiles and A by every column: packed by each
     * tile, it was packed once per row (column) of tiles. With a workspace it is packed once.
     * Decided by M and N, not the cut; the packed panels hold the same values in the same
     * order, so no sum changes either way. */
    float *ws = g->ws;
    size_t ws_left = g->ws ? g->ws_floats : 0;
#ifdef DLRT_GEMM_BF16
    if (run.bf16) { /* the same, in depth pairs (half the units; gemm-bf16.h) */
        if (!run.b_packed && M > DLRT_GEMM_MC) {
            const size_t need = dlrt_bf16_packed_units(1, N, K);
            if (need <= ws_left) {
                dlrt_bf16_pack_all(1, N, K, run.B, run.ldb, run.trans_b, (uint32_t *)ws,
                                   threads > 1 && tiles > 1);
                run.B = ws, run.b_pairs = 1;
                ws += need, ws_left -= need;
            }
        }
        if (!run.a_packed && N > DLRT_GEMM_NC) {
            const size_t need = dlrt_bf16_packed_units(0, M, K);
            if (need <= ws_left && need * sizeof(float) <= DLRT_GEMM_WS_A_MAX) {
                dlrt_bf16_pack_all(0, M, K, run.A, run.lda, run.trans_a, (uint32_t *)ws,
                                   threads > 1 && tiles > 1);
                run.A = ws, run.a_pairs = 1;
            }
        }
    }
#endif
    if (!run.bf16 && !run.b_packed && M > DLRT_GEMM_MC) {
        const size_t need = dlrt_gemm_packed_bytes(1, N, K) / sizeof(float);
        if (need <= ws_left) {
            dlrt_gemm_pack_all(1, N, K, run.B, run.ldb, run.trans_b, run.b_gather, ws,
                               threads > 1 && tiles > 1);
            run.B = ws, run.b_packed = 1, run.b_gather = NULL;
            ws += need, ws_left -= need;
        }
    }
    /* (the bfloat16 tile converts packed panels only) */
    run.b_direct = !run.b_packed && !run.b_gather && !run.trans_b && !run.bf16 &&
                   dlrt_gemm_b_in_place(run.ldb, run.one_pass ? K : DLRT_MIN(K, run.kc));
    if (!run.bf16 && !run.a_packed && !run.a_index && N > DLRT_GEMM_NC) {
        const size_t need = dlrt_gemm_packed_bytes(0, M, K) / sizeof(float);
        /* a large A packed once is read back from memory by every column tile: packed by each
         * tile, its blocks stay in cache (SGEMM 2048, one thread: 248 GFLOP/s per tile against
         * 238-243 packed once; BERT's 128 x 3072, 1.5 MB packed, gains) */
        if (need <= ws_left && need * sizeof(float) <= DLRT_GEMM_WS_A_MAX) {
            dlrt_gemm_pack_all(0, M, K, run.A, run.lda, run.trans_a, run.a_gather, ws,
                               threads > 1 && tiles > 1);
            run.A = ws, run.a_packed = 1, run.a_gather = NULL;
        }
    }
    /* else a transposed product's row panels, op(B)'s columns (a 1x1 convolution's image), are
     * read in place where they are contiguous at each depth, not packed by every tile: one
     * thread, layer alone, 1024 -> 256 on 14x14 0.432 -> 0.409 ms, 960 -> 160 on 7x7 0.073 ->
     * 0.067. Packed once into the workspace above where several column tiles share them: read
     * in place by each, 512 -> 2048 on 7x7 went 0.446 -> 0.453. */
    run.a_direct = run.c_trans && !run.a_packed && !run.a_index && !run.a_gather && run.trans_a &&
                   !run.bf16 &&
                   dlrt_gemm_b_in_place(run.lda, run.one_pass ? K : DLRT_MIN(K, run.kc));
    /* one span per owner: a thread's tiles stay together as the split planned them, unless
     * another thread finishes its own first and takes over the end of them */
    const int64_t team = threads > 1 && tiles > 1 ? threads : 1; /* (<= DLRT_MAX_THREADS) */
    dlrt_gemm_tiles_job job = {g, M, N, K, mu, tm, tn, cols_first};
    int64_t starts[DLRT_MAX_THREADS];
    if (team > 1) dlrt_gemm_owner_starts(&job, team, starts);
    /* a thread takes its own tiles a column at a time where a column's rows fit one tile, so
     * that they run as one (dlrt_gemm_run_tiles) and stream the column's weights once */
    const int64_t group = cols_first && M <= DLRT_GEMM_MC ? tm : 1;
    dlrt_parallel_spans(tiles, (int)team, starts, group, 0, dlrt_gemm_run_tiles, &job);
}

/* A build's register tile, for planning: mr x nr, vw floats per vector (0: the generic C kernel).
 */
typedef struct dlrt_gemm_tiles {
    int mr, nr, vw;
} dlrt_gemm_tiles;

static dlrt_gemm_tiles dlrt_gemm_tiles_for(int vector_bytes) {
    if (vector_bytes >= 64)
        return (dlrt_gemm_tiles){DLRT_TILE_AVX512_MR, DLRT_TILE_AVX512_NR, DLRT_TILE_AVX512_VW};
    if (vector_bytes >= 32)
        return (dlrt_gemm_tiles){DLRT_TILE_AVX2_MR, DLRT_TILE_AVX2_NR, DLRT_TILE_AVX2_VW};
    return (dlrt_gemm_tiles){DLRT_TILE_GENERIC_MR, DLRT_TILE_GENERIC_NR, 0};
}

/* The vector builds' column tile (DLRT_GEMM_NC of AVX-512 and AVX2 alike): a transposed product
 * with at most this many columns has one column of tiles, which reads its row panels in place
 * (dlrt_gemm_run) where they are contiguous at each depth. */
enum { DLRT_GEMM_VEC_NC = 256 };
#ifdef DLRT_GEMM_VW
_Static_assert(DLRT_GEMM_NC == DLRT_GEMM_VEC_NC, "the orientation model assumes this build's NC");
#endif

/* Estimated cycles of an M x N x K product on tiles t, computed in the orientation given
 * (transposed: the product is N x M, each of its elements stored to C through the column path).
 * Per step of K, a register tile of MR rows and nv vectors costs max(MR * nv, MR + nv)
 * half-cycles (its FMAs or its loads, two of either per cycle), so a narrow last panel costs
 * less than a full one but more per column. A store costs about 0.1 cycle per element in C's
 * orientation (vectors); transposed, 0.25 where whole vector-square blocks are transposed in
 * registers and 1.5 for the rest (a scalar run through the epilogue when this was measured;
 * those rows now go by partial blocks, cheaper, but the figure is kept until re-measured: at 0.5
 * no layer of the bench models would change orientation), which decides small-K products.
 * Transposed, op(B) becomes the operand of the MR-row panels: read in place where its columns are
 * contiguous at each depth (b_lines: B not transposed, as a convolution's image or columns) and one
 * column of tiles reads them, else packed, a few floats per depth at about 0.25 cycle each, where
 * untransposed it is read in place or copied by whole vectors (op(A) is taken as a layer's weights,
 * prepacked either way). Packed, with few columns of tiles to share it, that outweighs the narrow
 * last panel the transposition saves; read in place it does not: MobileNetV2's 384 -> 64 on 14x14,
 * one thread, layer alone, 0.046 ms as is, 0.041 transposed in place. */
static double dlrt_gemm_cycles(const dlrt_gemm_tiles *t, int64_t M, int64_t N, int64_t K,
                               int transposed, int b_lines) {
    const int64_t rows = transposed ? N : M, cols = transposed ? M : N;
    const int64_t vec_rows = t->vw ? N / t->vw * t->vw : 0;
    const int in_place = b_lines && t->vw && M <= DLRT_GEMM_VEC_NC;
    const double store_pack =
        transposed ? (double)M * ((double)vec_rows * 0.25 + (double)(N - vec_rows) * 1.5) +
                         (in_place ? 0.0 : (double)N * (double)K * 0.25)
                   : (double)M * (double)N * 0.1;
    if (rows == 1)
        return (double)cols * (double)K / 16.0 + store_pack; /* the one-row vector paths */
    double per_k;
    if (t->vw) { /* the last panel computes only the vectors it needs, the last row tile of
                  * full-width panels only its rows */
        const int nv = t->nr / t->vw, tail = (int)((cols % t->nr + t->vw - 1) / t->vw);
        const int short_rows = (int)(rows % t->mr);
        const double full_panels = (double)(cols / t->nr);
        const double tail_panel = tail ? DLRT_MAX(t->mr * tail, t->mr + tail) : 0;
        per_k = (double)(rows / t->mr) * (full_panels * t->mr * nv + tail_panel);
        if (short_rows)
            per_k += full_panels * DLRT_MAX(short_rows * nv, short_rows + nv) + tail_panel;
    } else { /* scalar FMAs, four per cycle at best */
        per_k = (double)((rows + t->mr - 1) / t->mr) * (double)((cols + t->nr - 1) / t->nr) *
                t->mr * t->nr / 4.0;
    }
    return per_k * (double)K / 2.0 + store_pack;
}

/* Whether the model expects a gain from the transposed product (it ignores cache effects);
 * b_lines: op(B)'s columns are contiguous at each depth. */
static int dlrt_gemm_transposes_b(int vector_bytes, int64_t M, int64_t N, int64_t K, int b_lines) {
    const dlrt_gemm_tiles t = dlrt_gemm_tiles_for(vector_bytes);
    return M > 0 && N > 0 && K > 0 &&
           dlrt_gemm_cycles(&t, M, N, K, 1, b_lines) <
               0.97 * dlrt_gemm_cycles(&t, M, N, K, 0, b_lines);
}

int dlrt_sgemm_transposes_for(int vector_bytes, int64_t M, int64_t N, int64_t K) {
    return dlrt_gemm_transposes_b(vector_bytes, M, N, K, 1);
}

const char *dlrt_gemm_isa(void) {
    return DLRT_GEMM_ISA;
}

int dlrt_sgemm_transposes(int64_t M, int64_t N, int64_t K) {
    return dlrt_sgemm_transposes_for(DLRT_GEMM_VBYTES, M, N, K);
}

/* Multiples of every build's row and column panels (dlrt_gemm_packed_bytes). */
enum { DLRT_GEMM_ANY_MR = 12, DLRT_GEMM_ANY_NR = 64 };
_Static_assert(DLRT_GEMM_ANY_MR % DLRT_TILE_AVX512_MR == 0 &&
                   DLRT_GEMM_ANY_MR % DLRT_TILE_AVX2_MR == 0 &&
                   DLRT_GEMM_ANY_MR % DLRT_TILE_GENERIC_MR == 0 &&
                   DLRT_GEMM_ANY_NR % DLRT_TILE_AVX512_NR == 0 &&
                   DLRT_GEMM_ANY_NR % DLRT_TILE_AVX2_NR == 0 &&
                   DLRT_GEMM_ANY_NR % DLRT_TILE_GENERIC_NR == 0,
               "packed operands are sized for every tile");

size_t dlrt_gemm_packed_bytes(int operand, int64_t lines, int64_t K) {
    if (lines <= 0 || K <= 0) return 0;
#ifdef DLRT_GEMM_BF16
    if (operand == DLRT_B_PAIRS || operand == DLRT_A_PAIRS)
        return dlrt_bf16_packed_units(operand == DLRT_B_PAIRS, lines, K) * sizeof(uint32_t);
#endif
    if (operand == DLRT_A_PAIRS) operand = 0;
    /* lines rounded to whole panels of every instruction set's tile, not only this build's:
     * the host (libdlcc, built for the baseline) sizes the scratch memory in which a module
     * built for AVX-512 packs per call (an implicit-GEMM or Winograd convolution whose weights
     * are not packed at load: a stride-1 ConvTranspose's flipped filters had overrun it) */
    const int64_t w = operand == 0 ? DLRT_GEMM_ANY_MR : DLRT_GEMM_ANY_NR;
    return (size_t)((lines + w - 1) / w * w) * (size_t)K * sizeof(float);
}

size_t dlrt_gemm_packed_index(int operand, int64_t line, int64_t p, int64_t K) {
    const int64_t w = operand == 0 ? DLRT_GEMM_MR : DLRT_GEMM_NR;
    /* dlrt_gemm_pack's panels, each all of K deep: KC pieces of kc * w follow each other */
    return (size_t)(line / w * w * K + p * w + line % w);
}

void dlrt_gemm_pack_operand(int operand, int64_t lines, int64_t K, const float *X, int64_t ld,
                            int trans, float *dst) {
    /* a layer's weights, packed once: every padding line zero, read or not */
    memset(dst, 0, dlrt_gemm_packed_bytes(operand, lines, K));
#ifdef DLRT_GEMM_BF16
    if (operand == DLRT_B_PAIRS || operand == DLRT_A_PAIRS) {
        dlrt_bf16_pack_all(operand == DLRT_B_PAIRS, lines, K, X, ld, trans, (uint32_t *)dst,
                           (double)lines * (double)K >= DLRT_PAR_MIN);
        return;
    }
#endif
    if (operand == DLRT_B_PAIRS) operand = 1;
    if (operand == DLRT_A_PAIRS) operand = 0;
    dlrt_gemm_pack_all(operand, lines, K, X, ld, trans, NULL, dst,
                       (double)lines * (double)K >= DLRT_PAR_MIN);
}

/* An operand packed whole (dlrt_gemm_pack_all) in units of a group of panels times an int-sized
 * piece of K; a job's range is units. */
typedef struct dlrt_gemm_pack_job {
    const float *X;
    const dlrt_gemm_gather *gx;
    float *dst;
    int64_t lines, K, ld, group, pieces;
    int w, by_rows;
} dlrt_gemm_pack_job;

/* Units [lo, hi): panels all of K deep, each the next w * K floats on. */
static void dlrt_gemm_pack_units(void *ctx, int64_t lo, int64_t hi) {
    const dlrt_gemm_pack_job *j = ctx;
    const int w = j->w;
    for (int64_t u = lo; u < hi; u++) {
        const int64_t i0 = u / j->pieces * j->group * w, m = DLRT_MIN(j->group * w, j->lines - i0);
        const int64_t p0 = u % j->pieces * DLRT_GEMM_KC;
        const int kc = (int)DLRT_MIN((int64_t)DLRT_GEMM_KC, j->K - p0);
        float *d = j->dst + (size_t)i0 * (size_t)j->K + (size_t)p0 * (size_t)w;
        dlrt_gemm_pack(j->X, j->ld, j->by_rows, j->gx, i0, (int)m, p0, kc, w,
                       (size_t)w * (size_t)j->K, d);
    }
}

static void dlrt_gemm_pack_all(int operand, int64_t lines, int64_t K, const float *X, int64_t ld,
                               int trans, const dlrt_gemm_gather *gx, float *dst, int par) {
    const int w = operand == 0 ? DLRT_GEMM_MR : DLRT_GEMM_NR;
    /* A's lines are op(A)'s rows (contiguous in X unless trans); B's are op(B)'s columns
     * (contiguous in X only when trans) */
    const int by_rows = operand == 0 ? !trans : trans;
    const int64_t panels = (lines + w - 1) / w;
    /* a made operand goes NC lines at a time, which its maker's work per depth is shared by,
     * and so does one whose lines are columns (each depth then one run of memory: the panels
     * are packed across, dlrt_gemm_pack); the units of work are those groups of panels times
     * the int-sized pieces of K */
    const int64_t group = gx || (!by_rows && w == DLRT_GEMM_NR) ? DLRT_MAX(DLRT_GEMM_NC / w, 1) : 1;
    const int64_t groups = (panels + group - 1) / group;
    const int64_t pieces = (K + DLRT_GEMM_KC - 1) / DLRT_GEMM_KC;
    dlrt_gemm_pack_job job = {X, gx, dst, lines, K, ld, group, pieces, w, by_rows};
    dlrt_parallel_for(groups * pieces, par, dlrt_gemm_pack_units, &job);
}

/* Workspace bytes for one operand of `lines` lines: its lines padded to whole panels of any
 * instruction set's tile as either operand (NRs divide 64, MR 6 does not: 128 rows pack to
 * 132, and a workspace of 128 lines had left BERT's A packed again by every column tile, 5% of
 * its run), over K, when the other side's extent (other) can make it shared by several tiles on
 * some instruction set and orientation (MC and NC are 96 at least); else none. */
_Static_assert(64 % DLRT_TILE_AVX512_NR == 0 && 64 % DLRT_TILE_AVX2_NR == 0 &&
                   64 % DLRT_TILE_GENERIC_NR == 0 && 64 % DLRT_TILE_GENERIC_MR == 0 &&
                   DLRT_TILE_AVX2_MR == DLRT_TILE_AVX512_MR,
               "a workspace operand's padding covers every tile");
static size_t dlrt_gemm_ws_operand(int64_t lines, int64_t other, int64_t K) {
    if (other <= 96 || lines <= 0 || K <= 0) return 0;
    /* as dlrt_gemm_packed_bytes sizes either operand */
    const int64_t by_nr = (lines + DLRT_GEMM_ANY_NR - 1) / DLRT_GEMM_ANY_NR * DLRT_GEMM_ANY_NR,
                  by_mr = (lines + DLRT_GEMM_ANY_MR - 1) / DLRT_GEMM_ANY_MR * DLRT_GEMM_ANY_MR;
    return (size_t)DLRT_MAX(by_nr, by_mr) * (size_t)K * sizeof(float);
}

size_t dlrt_gemm_workspace(int64_t M, int64_t N, int64_t K, int a_packed, int b_packed) {
    return (a_packed ? 0 : dlrt_gemm_ws_operand(M, N, K)) +
           (b_packed ? 0 : dlrt_gemm_ws_operand(N, M, K));
}

void dlrt_sgemm_ex(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, int trans_a,
                   int a_packed, const float *B, int64_t ldb, int trans_b, int b_packed, float *C,
                   int64_t ldc, const dlrt_epilogue *ep) {
    dlrt_sgemm_ws(M, N, K, A, lda, trans_a, a_packed, B, ldb, trans_b, b_packed, C, ldc, ep, NULL,
                  0);
}

/* dlrt_sgemm_ws with op(B) made by bg while packed when bg is not NULL (B, ldb, trans_b and
 * b_packed then unused). */
static void dlrt_sgemm_any(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                           int trans_a, int a_packed, const float *B, int64_t ldb, int trans_b,
                           int b_packed, const dlrt_gemm_gather *bg, float *C, int64_t ldc,
                           const dlrt_epilogue *ep, void *ws, size_t ws_bytes, int bf16) {
    if (M <= 0 || N <= 0) return;
    if (bg) B = NULL, b_packed = 0, trans_b = 0;
#ifndef DLRT_GEMM_BF16
    bf16 = 0;
#endif
    /* B packed in pairs (dlrt_gemm_pack_operand(DLRT_B_PAIRS, ...)): float32 panels where the
     * build has no bfloat16 products; A in pairs (DLRT_A_PAIRS, or DLRT_A_PAIRS_T: as the
     * transposed product's B) likewise */
    const int b_pairs = b_packed == DLRT_B_PAIRS && bf16, b_hot = b_packed == DLRT_B_PACKED_HOT;
    const int a_pairs = a_packed == DLRT_A_PAIRS && bf16, a_pairs_t = a_packed == DLRT_A_PAIRS_T;
    if (b_packed) b_packed = 1;
    if (a_packed == DLRT_A_PAIRS) a_packed = DLRT_A_PACKED;
    if (a_pairs_t) a_packed = DLRT_A_PACKED_T;
    dlrt_gemm_args g = {.A = A,
                        .lda = lda,
                        .trans_a = trans_a,
                        .a_packed = a_packed,
                        .B = B,
                        .ldb = ldb,
                        .trans_b = trans_b,
                        .b_packed = b_packed,
                        .b_hot = b_hot,
                        .b_gather = bg,
                        .C = C,
                        .ldc = ldc,
                        .ep = ep,
                        .ws = ws,
                        .ws_floats = ws_bytes / sizeof(float),
                        .bf16 = bf16,
                        .a_pairs = a_pairs,
                        .b_pairs = b_pairs};
    /* a packed operand fixes the orientation */
    const int transposed = a_packed == DLRT_A_PACKED_T ||
                           (!a_packed && !b_packed &&
                            dlrt_gemm_transposes_b(DLRT_GEMM_VBYTES, M, N, K, !trans_b && !bg));
    if (!transposed) {
        dlrt_gemm_run(&g, M, N, K);
        return;
    }
    /* C^T = op(B)^T op(A)^T: the product's rows are C's columns */
    dlrt_gemm_args t = {.A = B,
                        .lda = ldb,
                        .trans_a = !trans_b,
                        .a_gather = bg,
                        .B = A,
                        .ldb = lda,
                        .trans_b = !trans_a,
                        .b_packed = a_packed == DLRT_A_PACKED_T,
                        .C = C,
                        .ldc = ldc,
                        .c_trans = 1,
                        .ep = ep,
                        .ws = ws,
                        .ws_floats = ws_bytes / sizeof(float),
                        .bf16 = bf16,
                        .b_pairs = a_pairs_t && bf16};
    dlrt_gemm_run(&t, N, M, K);
}

void dlrt_sgemm_ws(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, int trans_a,
                   int a_packed, const float *B, int64_t ldb, int trans_b, int b_packed, float *C,
                   int64_t ldc, const dlrt_epilogue *ep, void *ws, size_t ws_bytes) {
    dlrt_sgemm_any(M, N, K, A, lda, trans_a, a_packed, B, ldb, trans_b, b_packed, NULL, C, ldc, ep,
                   ws, ws_bytes, 0);
}

void dlrt_sgemm_bf16(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, int trans_a,
                     int a_packed, const float *B, int64_t ldb, int trans_b, int b_packed, float *C,
                     int64_t ldc, const dlrt_epilogue *ep, void *ws, size_t ws_bytes) {
    dlrt_sgemm_any(M, N, K, A, lda, trans_a, a_packed, B, ldb, trans_b, b_packed, NULL, C, ldc, ep,
                   ws, ws_bytes, 1);
}

int dlrt_gemm_has_bf16(void) {
#ifdef DLRT_GEMM_BF16
    return 1;
#else
    return 0;
#endif
}

void dlrt_sgemm_gather(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, int trans_a,
                       int a_packed, const dlrt_gemm_gather *bg, float *C, int64_t ldc,
                       const dlrt_epilogue *ep, void *ws, size_t ws_bytes) {
    dlrt_sgemm_any(M, N, K, A, lda, trans_a, a_packed, NULL, 0, 0, 0, bg, C, ldc, ep, ws, ws_bytes,
                   0);
}

void dlrt_sgemm_indexed(int64_t M, int64_t N, int64_t K, const float *a_packed_t,
                        const dlrt_gemm_index *ax, float *C, int64_t ldc, const dlrt_epilogue *ep) {
    if (M <= 0 || N <= 0) return;
    /* C^T = X A^T: X's lines are the product's rows, A's packed panels its columns */
    const dlrt_gemm_args t = {
        .a_index = ax, .B = a_packed_t, .b_packed = 1, .c_trans = 1, .C = C, .ldc = ldc, .ep = ep};
    dlrt_gemm_run(&t, N, M, K);
}

void dlrt_sgemm(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, int trans_a,
                const float *B, int64_t ldb, int trans_b, float *C, int64_t ldc,
                const dlrt_epilogue *ep) {
    dlrt_sgemm_ex(M, N, K, A, lda, trans_a, 0, B, ldb, trans_b, 0, C, ldc, ep);
}
