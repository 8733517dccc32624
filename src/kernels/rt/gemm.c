/* gemm.c — dlrt_sgemm: single-precision GEMM with the fused epilogue of dlrt.h.
 *
 * Goto-style blocking in portable C. C is cut into MC x NC tiles, each computed by one thread
 * from stack buffers: an MC x KC block of op(A) and a KC x NC block of op(B) are packed (which
 * also absorbs the transpositions and the strides), and a register tile of MR x NR accumulators
 * walks them. The register tile is a local array indexed by constants, which gcc/clang at -O3
 * keep in vector registers. K is consumed KC at a time; partial sums live in a tile-sized stack
 * buffer, so C is written exactly once, by the epilogue, after the residual at the same place
 * was read (an in-place residual works). Rows and columns past the edges are packed as zeros
 * and never stored. */
#include "dlrt-impl.h"

/* Block sizes; MC must be a multiple of MR and NC of NR. A tile's stack buffers take
 * MC*KC + KC*NC + MC*NC + MR*NR floats: 217 KiB with these values. */
#ifndef DLRT_GEMM_MR
#define DLRT_GEMM_MR 6
#endif
#ifndef DLRT_GEMM_NR
#define DLRT_GEMM_NR 32
#endif
#ifndef DLRT_GEMM_KC
#define DLRT_GEMM_KC 192
#endif
#ifndef DLRT_GEMM_MC
#define DLRT_GEMM_MC 96
#endif
#ifndef DLRT_GEMM_NC
#define DLRT_GEMM_NC 128
#endif

/* Packs lines [i0, i0+m) x depths [p0, p0+kc) of an operand into panels of w lines:
 * dst[panel * w * kc + p * w + ii] = line i0 + panel*w + ii at depth p0 + p, where line i at depth
 * p is X[i * ld + p] when by_rows, else X[p * ld + i]. Lines past m are zero. A's lines are the
 * rows of op(A) (by_rows = !trans_a, w = MR); B's lines are the columns of op(B) (by_rows =
 * trans_b, w = NR). */
static void dlrt_gemm_pack(const float *X, int64_t ld, int by_rows, int64_t i0, int m, int64_t p0,
                           int kc, int w, float *restrict dst) {
    for (int r = 0; r < m; r += w, dst += (size_t)w * kc) {
        int n = DLRT_MIN(w, m - r);
        if (by_rows) {
            for (int ii = 0; ii < n; ii++) {
                const float *src = X + (i0 + r + ii) * ld + p0;
                for (int p = 0; p < kc; p++) dst[p * w + ii] = src[p];
            }
        } else {
            for (int p = 0; p < kc; p++) {
                const float *src = X + (p0 + p) * ld + i0 + r;
                for (int ii = 0; ii < n; ii++) dst[p * w + ii] = src[ii];
            }
        }
        for (int p = 0; p < kc && n < w; p++)
            for (int ii = n; ii < w; ii++) dst[p * w + ii] = 0.0f;
    }
}

/* acc = sum over p of the outer products of one A panel and one B panel. This exact shape (a 2-D
 * local array, the i loop outside the j loop, ap[i] read inside) is the one that gcc and clang at
 * -O3 both turn into MR x NR/vector-width register accumulators with broadcast FMAs; seemingly
 * equivalent rewrites made one or the other spill the tile to the stack every iteration
 * (30-50x slower). Keep it so, and re-measure (test_rt --bench) after any change here. */
static void dlrt_gemm_micro(int kc, const float *restrict a, const float *restrict b,
                            float *restrict acc) {
    float c[DLRT_GEMM_MR][DLRT_GEMM_NR] = {{0}};
    for (int p = 0; p < kc; p++) {
        const float *bp = b + p * DLRT_GEMM_NR;
        const float *ap = a + p * DLRT_GEMM_MR;
        for (int i = 0; i < DLRT_GEMM_MR; i++)
            for (int j = 0; j < DLRT_GEMM_NR; j++) c[i][j] += ap[i] * bp[j];
    }
    for (int i = 0; i < DLRT_GEMM_MR; i++)
        for (int j = 0; j < DLRT_GEMM_NR; j++) acc[i * DLRT_GEMM_NR + j] = c[i][j];
}

/* Stores a finished mr x nr corner of a register tile to C at (i0, j0) through the epilogue. */
static void dlrt_gemm_store(const float *acc, int mr, int nr, int64_t i0, int64_t j0, float *C,
                            int64_t ldc, const dlrt_epilogue *ep) {
    float row[DLRT_GEMM_NR];
    for (int i = 0; i < mr; i++) {
        for (int j = 0; j < DLRT_GEMM_NR; j++) row[j] = acc[i * DLRT_GEMM_NR + j];
        dlrt_epi_apply(ep, i0 + i, j0, row, nr);
        float *dst = C + (i0 + i) * ldc + j0;
        for (int j = 0; j < nr; j++) dst[j] = row[j];
    }
}

/* One MC x NC tile of C (mc x nc valid) at (i0, j0), all of K. */
static void dlrt_gemm_tile(int64_t K, const float *A, int64_t lda, int trans_a, const float *B,
                           int64_t ldb, int trans_b, float *C, int64_t ldc, const dlrt_epilogue *ep,
                           int64_t i0, int mc, int64_t j0, int nc) {
    float apack[DLRT_GEMM_MC * DLRT_GEMM_KC];
    float bpack[DLRT_GEMM_KC * DLRT_GEMM_NC];
    /* partial sums while K > KC, one MR x NR block per register tile */
    float part[DLRT_GEMM_MC * DLRT_GEMM_NC];
    float acc[DLRT_GEMM_MR * DLRT_GEMM_NR];
    for (int64_t p0 = 0; p0 < K; p0 += DLRT_GEMM_KC) {
        int kc = (int)DLRT_MIN((int64_t)DLRT_GEMM_KC, K - p0);
        int first = p0 == 0, last = p0 + kc == K;
        dlrt_gemm_pack(A, lda, !trans_a, i0, mc, p0, kc, DLRT_GEMM_MR, apack);
        dlrt_gemm_pack(B, ldb, trans_b, j0, nc, p0, kc, DLRT_GEMM_NR, bpack);
        for (int c = 0; c < nc; c += DLRT_GEMM_NR) {
            int nr = DLRT_MIN(DLRT_GEMM_NR, nc - c);
            for (int r = 0; r < mc; r += DLRT_GEMM_MR) {
                int mr = DLRT_MIN(DLRT_GEMM_MR, mc - r);
                dlrt_gemm_micro(kc, apack + (size_t)r * kc, bpack + (size_t)c * kc, acc);
                float *pt = part + ((size_t)c * DLRT_GEMM_MC + (size_t)r * DLRT_GEMM_NR);
                if (!first)
                    for (int t = 0; t < DLRT_GEMM_MR * DLRT_GEMM_NR; t++) acc[t] += pt[t];
                if (last)
                    dlrt_gemm_store(acc, mr, nr, i0 + r, j0 + c, C, ldc, ep);
                else
                    for (int t = 0; t < DLRT_GEMM_MR * DLRT_GEMM_NR; t++) pt[t] = acc[t];
            }
        }
    }
}

/* C = epilogue(0) when K == 0. */
static void dlrt_gemm_k0(int64_t M, int64_t N, float *C, int64_t ldc, const dlrt_epilogue *ep) {
    float row[64];
    for (int64_t i = 0; i < M; i++)
        for (int64_t j0 = 0; j0 < N; j0 += 64) {
            int n = (int)DLRT_MIN((int64_t)64, N - j0);
            for (int j = 0; j < n; j++) row[j] = 0.0f;
            dlrt_epi_apply(ep, i, j0, row, n);
            memcpy(C + i * ldc + j0, row, (size_t)n * sizeof(float));
        }
}

/* M == 1: a vector times a matrix; packing would cost as much as the arithmetic. */
static void dlrt_gemm_row(int64_t N, int64_t K, const float *A, int64_t lda, int trans_a,
                          const float *B, int64_t ldb, int trans_b, float *C,
                          const dlrt_epilogue *ep) {
    enum { CH = 64, LANES = 16 };
    const int64_t as = trans_a ? lda : 1, chunks = (N + CH - 1) / CH;
    const int par = chunks > 1 && (double)N * (double)K >= DLRT_PAR_MIN;
    (void)par;
    DLRT_PRAGMA_OMP(parallel for schedule(static) if(par))
    for (int64_t ch = 0; ch < chunks; ch++) {
        const int64_t j0 = ch * CH;
        const int n = (int)DLRT_MIN((int64_t)CH, N - j0);
        float row[CH];
        if (!trans_b) {
            for (int j = 0; j < n; j++) row[j] = 0.0f;
            for (int64_t p = 0; p < K; p++) {
                const float av = A[p * as];
                const float *bp = B + p * ldb + j0;
                for (int j = 0; j < n; j++) row[j] += av * bp[j];
            }
        } else {
            /* dot products with LANES independent partial sums, which vectorize without
             * reassociating a single sum */
            for (int j = 0; j < n; j++) {
                const float *bp = B + (j0 + j) * ldb;
                float part[LANES] = {0};
                int64_t p = 0;
                if (as == 1)
                    for (; p + LANES <= K; p += LANES)
                        for (int l = 0; l < LANES; l++) part[l] += A[p + l] * bp[p + l];
                float s = 0.0f;
                for (; p < K; p++) s += A[p * as] * bp[p];
                for (int l = 0; l < LANES; l++) s += part[l];
                row[j] = s;
            }
        }
        dlrt_epi_apply(ep, 0, j0, row, n);
        memcpy(C + j0, row, (size_t)n * sizeof(float));
    }
}

void dlrt_sgemm(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, int trans_a,
                const float *B, int64_t ldb, int trans_b, float *C, int64_t ldc,
                const dlrt_epilogue *ep) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {
        dlrt_gemm_k0(M, N, C, ldc, ep);
        return;
    }
    if (M == 1) {
        dlrt_gemm_row(N, K, A, lda, trans_a, B, ldb, trans_b, C, ep);
        return;
    }
    const int64_t tm = (M + DLRT_GEMM_MC - 1) / DLRT_GEMM_MC,
                  tn = (N + DLRT_GEMM_NC - 1) / DLRT_GEMM_NC;
    const int64_t tiles = tm * tn;
    const int par = tiles > 1 && (double)M * (double)N * (double)K >= DLRT_PAR_MIN;
    (void)par;
    DLRT_PRAGMA_OMP(parallel for schedule(static) if(par))
    for (int64_t t = 0; t < tiles; t++) {
        int64_t i0 = (t / tn) * DLRT_GEMM_MC, j0 = (t % tn) * DLRT_GEMM_NC;
        int mc = (int)DLRT_MIN((int64_t)DLRT_GEMM_MC, M - i0);
        int nc = (int)DLRT_MIN((int64_t)DLRT_GEMM_NC, N - j0);
        dlrt_gemm_tile(K, A, lda, trans_a, B, ldb, trans_b, C, ldc, ep, i0, mc, j0, nc);
    }
}
