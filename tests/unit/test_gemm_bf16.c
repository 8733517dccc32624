/* test_gemm_bf16.c — dlrt_sgemm_bf16 (src/kernels/rt/gemm-bf16.h) against a reference that
 * rounds both operands to bfloat16 as the conversion instructions do (nearest even, denormals
 * to zero, NaN kept) and sums the exact products in double: the kernel's sums are those
 * products added in float32, so the two agree to float32's rounding of a K-term sum, far below
 * bfloat16's rounding (which a float32 product would miss by 1e-3 of the operands). Shapes cover
 * K blocks, row and column tiles, the narrow (transposed) orientation, all four transpositions,
 * padded leading dimensions, prepacked operands, the workspace's shared packing, epilogues and
 * two threads (bit-identical to one). The kernel sources are included (rt-lib.c) and built with
 * this binary's flags; the Makefile builds it per instruction set and once with AVX512-BF16.
 * Without AVX512-BF16 (dlrt_gemm_has_bf16() == 0) dlrt_sgemm_bf16 must be dlrt_sgemm_ws bit
 * for bit, and that is what is checked. */
#include "../../src/kernels/rt-lib.c"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "test-bf16.h"
#include "test-rng.h"

static float *rand_buf(int64_t n) {
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++) p[i] = frand();
    return p;
}

typedef struct bf_case {
    int64_t M, N, K;
    int ta, tb;
    int pad;  /* leading dimensions padded (NaN in the padding) */
    int pack; /* 0: none, 1: B prepacked, 2: A prepacked, 3: A prepacked for C^T, 4: B prepacked
               * in depth pairs */
    int ws;   /* a full workspace (the operands shared by tiles packed once) */
    int epi;  /* 0: none; 1: alpha 0.5, a bias per column, a residual, ReLU; 2: beta 0.75, a bias
               * per row, Sigmoid (run after the store) */
    int in_place; /* the residual is C itself */
} bf_case;

/* C's rows are 3 floats longer than N (padding that must stay as it was) */
#define LDC(n) ((n) + 3)
#define CANARY 12345.0f

typedef void gemm_fn(int64_t, int64_t, int64_t, const float *, int64_t, int, int, const float *,
                     int64_t, int, int, float *, int64_t, const dlrt_epilogue *, void *, size_t);

/* C = epilogue(op(A) op(B)) for the case, through fn (dlrt_sgemm_bf16 or dlrt_sgemm_ws) on
 * `threads` threads. */
static void run_case(const bf_case *c, gemm_fn *fn, const float *a, int64_t lda, const float *b,
                     int64_t ldb, const float *bias, const float *res, float *C, int threads) {
    const int64_t M = c->M, N = c->N, K = c->K;
    dlrt_set_threads(threads);
    dlrt_epilogue ep = {.alpha = 0.5f,
                        .beta = 1.0f,
                        .bias = bias,
                        .bias_cs = 1,
                        .residual = c->in_place ? C : res,
                        .res_rs = c->in_place ? LDC(N) : N,
                        .res_cs = 1,
                        .act = DLRT_ACT_RELU};
    if (c->epi == 2)
        ep = (dlrt_epilogue){
            .alpha = 1.0f, .beta = 0.75f, .bias = bias, .bias_rs = 1, .act = DLRT_ACT_SIGMOID};
    for (int64_t i = 0; i < M * LDC(N); i++) /* the padding past each row of C stays */
        C[i] = c->in_place && i % LDC(N) < N ? res[i / LDC(N) * N + i % LDC(N)] : CANARY;
    int a_packed = 0, b_packed = 0;
    float *pk = NULL;
    const float *A = a, *B = b;
    if (c->pack == 1) {
        pk = malloc(dlrt_gemm_packed_bytes(1, N, K) + 64);
        dlrt_gemm_pack_operand(1, N, K, b, ldb, c->tb, pk);
        B = pk, b_packed = 1;
    } else if (c->pack == 2) {
        pk = malloc(dlrt_gemm_packed_bytes(0, M, K) + 64);
        dlrt_gemm_pack_operand(0, M, K, a, lda, c->ta, pk);
        A = pk, a_packed = DLRT_A_PACKED;
    } else if (c->pack == 4) { /* in depth pairs */
        pk = malloc(dlrt_gemm_packed_bytes(DLRT_B_PAIRS, N, K) + 64);
        dlrt_gemm_pack_operand(DLRT_B_PAIRS, N, K, b, ldb, c->tb, pk);
        B = pk, b_packed = DLRT_B_PAIRS;
    } else if (c->pack == 3) {
        pk = malloc(dlrt_gemm_packed_bytes(1, M, K) + 64);
        dlrt_gemm_pack_operand(1, M, K, a, lda, !c->ta, pk);
        A = pk, a_packed = DLRT_A_PACKED_T;
    }
    const size_t wsb = c->ws ? dlrt_gemm_workspace(M, N, K, a_packed != 0, b_packed) : 0;
    void *ws = wsb ? malloc(wsb) : NULL;
    fn(M, N, K, A, lda, c->ta, a_packed, B, ldb, c->tb, b_packed, C, LDC(N), c->epi ? &ep : NULL,
       ws, wsb);
    free(ws);
    free(pk);
}

static void bf_check(const bf_case *c) {
    const int64_t M = c->M, N = c->N, K = c->K;
    const int64_t ar = c->ta ? K : M, ac = c->ta ? M : K, br = c->tb ? N : K, bc = c->tb ? K : N;
    const int64_t lda = ac + (c->pad ? 5 : 0), ldb = bc + (c->pad ? 3 : 0);
    float *a = rand_buf(ar * lda), *b = rand_buf(br * ldb), *bias = rand_buf(M + N),
          *res = rand_buf(M * N);
    for (int64_t i = 0; i < ar * lda; i++)
        if (i % lda >= ac) a[i] = NAN;
    for (int64_t i = 0; i < br * ldb; i++)
        if (i % ldb >= bc) b[i] = NAN;
    const size_t cbytes = (size_t)(M * LDC(N)) * sizeof(float);
    float *C = malloc(cbytes), *C2 = malloc(cbytes);
    char what[200];
    snprintf(what, sizeof what,
             "bf16 M=%lld N=%lld K=%lld ta=%d tb=%d pad=%d pack=%d ws=%d epi=%d%s", (long long)M,
             (long long)N, (long long)K, c->ta, c->tb, c->pad, c->pack, c->ws, c->epi,
             c->in_place ? " in-place" : "");
    run_case(c, dlrt_sgemm_bf16, a, lda, b, ldb, bias, res, C, 1);
    if (!dlrt_gemm_has_bf16()) { /* float32: dlrt_sgemm_ws's bits */
        run_case(c, dlrt_sgemm_ws, a, lda, b, ldb, bias, res, C2, 1);
        CHECK(what, !memcmp(C, C2, cbytes));
        goto done;
    }
    int pad_kept = 1;
    for (int64_t i = 0; i < M * LDC(N); i++) pad_kept &= i % LDC(N) < N || C[i] == CANARY;
    CHECK(what, pad_kept);
    double worst = 0, off32 = 0; /* error against the reference; distance from float32 */
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double s = 0, s32 = 0, mag = 0;
            for (int64_t p = 0; p < K; p++) {
                const float x = c->ta ? a[p * lda + i] : a[i * lda + p],
                            y = c->tb ? b[j * ldb + p] : b[p * ldb + j];
                const double t = (double)bf16_round(x) * (double)bf16_round(y);
                s += t, mag += fabs(t), s32 += (double)x * (double)y;
            }
            double want = s, want32 = s32;
            if (c->epi == 1) {
                want = 0.5 * s + bias[j] + res[i * N + j],
                want32 = 0.5 * s32 + bias[j] + res[i * N + j];
                want = want > 0 ? want : 0, want32 = want32 > 0 ? want32 : 0;
                mag = 0.5 * mag + fabs(bias[j]) + fabs(res[i * N + j]);
            } else if (c->epi == 2) { /* (the sigmoid's slope is at most 1/4) */
                want = 1.0 / (1.0 + exp(-(s + 0.75 * bias[i])));
                want32 = 1.0 / (1.0 + exp(-(s32 + 0.75 * bias[i])));
                /* (and the float result's own rounding, near 0.5) */
                mag = 0.25 * (mag + fabs(bias[i])) + 0.5;
            }
            const double got = C[i * LDC(N) + j];
            const double e = fabs(got - want) / (mag + 1e-30);
            if (!(e <= worst)) worst = e; /* (NaN counts) */
            off32 = fmax(off32, fabs(got - want32) / (mag + 1e-30));
        }
    /* float32 sums of K terms: a few K * 2^-24 of the magnitude at worst */
    const double tol = 4e-7 * (1.0 + (double)K / 64.0);
    CHECK(what, worst <= tol);
    if (!(worst <= tol)) printf("  error %.3g of the magnitude (tolerance %.3g)\n", worst, tol);
    /* the operands were rounded (a float32 product of random floats is 1e-3 closer) */
    if (K >= 8) CHECK(what, off32 > 1e-5);
    /* two threads, and the workspace or none: the same bits */
    run_case(c, dlrt_sgemm_bf16, a, lda, b, ldb, bias, res, C2, 2);
    CHECK(what, !memcmp(C, C2, cbytes));
    bf_case other = *c;
    other.ws = !c->ws;
    run_case(&other, dlrt_sgemm_bf16, a, lda, b, ldb, bias, res, C2, 1);
    CHECK(what, !memcmp(C, C2, cbytes));
done:
    free(a), free(b), free(bias), free(res), free(C), free(C2);
}

/* NaN and infinity in the operands reach the products they are in, and only those. */
static void test_special(void) {
    const int64_t M = 20, N = 70, K = 300;
    float *a = rand_buf(M * K), *b = rand_buf(K * N), *C = malloc((size_t)(M * N) * 4);
    a[3 * K + 17] = NAN;      /* row 3 */
    b[40 * N + 9] = INFINITY; /* column 9 (rows other than 3: +-inf, or NaN where the sum meets
                               * both signs) */
    dlrt_set_threads(1);
    dlrt_sgemm_bf16(M, N, K, a, K, 0, 0, b, N, 0, 0, C, N, NULL, NULL, 0);
    int ok = 1;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            const float v = C[i * N + j];
            if (i == 3)
                ok &= isnan(v);
            else if (j == 9)
                ok &= isinf(v) || isnan(v);
            else
                ok &= isfinite(v);
        }
    CHECK("bf16 NaN and infinity reach their row and column only", ok);
    /* a denormal operand counts as zero (the conversion flushes it): 1e30 x 1e-39 is 1e-9 in
     * float32, 0 here */
    float big[2] = {1e30f, 0.0f}, tiny[2] = {1e-39f, 0.0f}, c1 = -1.0f;
    dlrt_sgemm_bf16(1, 1, 2, big, 2, 0, 0, tiny, 1, 0, 0, &c1, 1, NULL, NULL, 0);
    CHECK("bf16 denormal operands count as zero", dlrt_gemm_has_bf16() ? c1 == 0.0f : c1 > 0.0f);
    free(a), free(b), free(C);
}

#ifdef DLRT_GEMM_BF16
/* One unit of a depth-pair panel as the packers must make it: line l's values at depths 2q
 * (low half) and 2q + 1 (high half), rounded, zero past kc. */
static uint32_t pair_unit(const float *X, int64_t ld, int64_t line, int64_t p0, int q, int kc) {
    uint32_t lo, hi = 0;
    const float e = bf16_round(X[(p0 + 2 * q) * ld + line]);
    memcpy(&lo, &e, sizeof lo);
    if (2 * q + 1 < kc) {
        const float o = bf16_round(X[(p0 + 2 * q + 1) * ld + line]);
        memcpy(&hi, &o, sizeof hi);
    }
    return (lo >> 16) | (hi & 0xffff0000u);
}

/* An A operand whose lines are contiguous at each depth (a transposed A: packed through a buffer
 * of 240 lines, dlrt_bf16_pack_cols_a), unit by unit against pair_unit: lines past m zero up to
 * their panel's end, and nothing written past the last panel nor between panels (canaries), for
 * counts of lines around the buffer's 240 and the workspace's 252, odd and even depth counts,
 * panels packed tightly or further apart. The GEMM tests cannot see lines past m: their rows of
 * the product are dropped. */
static void test_pack_cols_a(void) {
    static const int64_t ms[] = {1, 6, 7, 17, 239, 240, 241, 250, 252, 500};
    static const int kcs[] = {1, 2, 31, 33, 256};
    const uint32_t canary = 0xA5A5A5A5u;
    int ok = 1, cases = 0;
    for (size_t a = 0; a < sizeof ms / sizeof *ms; a++)
        for (size_t b = 0; b < sizeof kcs / sizeof *kcs; b++)
            for (int gap = 0; gap < 2; gap++) {
                const int64_t m = ms[a], i0 = 3, p0 = 5, ld = m + 11;
                const int kc = kcs[b], kq = (kc + 1) / 2, panels = (int)((m + 5) / 6);
                const size_t pstride = (size_t)6 * kq + (gap ? 7 : 0);
                float *X = rand_buf((p0 + kc) * ld);
                const size_t units = pstride * (size_t)panels + 64;
                uint32_t *dst = malloc(units * sizeof *dst);
                for (size_t u = 0; u < units; u++) dst[u] = canary;
                dlrt_bf16_pack(X, ld, 0, i0, m, p0, kc, 6, pstride, dst);
                for (int pn = 0; pn < panels; pn++) {
                    const uint32_t *pd = dst + (size_t)pn * pstride;
                    for (int q = 0; q < kq; q++)
                        for (int l = 0; l < 6; l++) {
                            const int64_t line = (int64_t)pn * 6 + l;
                            const uint32_t want =
                                line < m ? pair_unit(X, ld, i0 + line, p0, q, kc) : 0;
                            ok &= pd[q * 6 + l] == want;
                        }
                    for (size_t u = (size_t)6 * kq; u < pstride; u++) ok &= pd[u] == canary;
                }
                for (size_t u = pstride * (size_t)panels; u < units; u++) ok &= dst[u] == canary;
                free(X), free(dst);
                cases++;
            }
    char what[160];
    snprintf(what, sizeof what,
             "a transposed A packed in pairs: every unit as made one by one, zero past m, "
             "nothing else written (%d cases)",
             cases);
    CHECK(what, ok);
}
#endif

int main(void) {
    printf("dlrt_sgemm_bf16 on %s: %s\n", dlrt_gemm_isa(),
           dlrt_gemm_has_bf16() ? "bfloat16 products (AVX512-BF16)" : "float32 (no AVX512-BF16)");
    /* named shapes: K blocks (256) with odd remainders, row tiles (MC 192) and column tiles (NC
     * 256) with partial panels, the narrow orientation (N small: C^T), one-row products */
    static const int64_t shapes[][3] = {
        {1, 1, 1},       {5, 7, 3},     {6, 64, 2},     {13, 70, 33},   {100, 70, 257},
        {130, 200, 513}, {300, 40, 96}, {7, 300, 1000}, {200, 300, 64}, {250, 700, 130},
        {64, 5, 200},    {1, 90, 77},   {97, 3, 67},    {400, 17, 31},  {33, 257, 1},
    };
    const int n_shapes = (int)(sizeof shapes / sizeof shapes[0]);
    for (int s = 0; s < n_shapes; s++)
        for (int t = 0; t < 4; t++) {
            bf_case c = {shapes[s][0],
                         shapes[s][1],
                         shapes[s][2],
                         t & 1,
                         t >> 1,
                         s & 1,
                         0,
                         t != 1,
                         (s + t) % 3,
                         0};
            bf_check(&c);
        }
    /* prepacked operands (float32 panels, converted per tile; B also in pairs), in-place
     * residuals; one row (M = 1) against a prepacked B, which float32 runs by another path */
    for (int pack = 1; pack <= 4; pack++) {
        for (int s = 3; s < n_shapes; s += 3) {
            bf_case c = {
                shapes[s][0],   shapes[s][1], shapes[s][2], s & 1, (s >> 1) & 1, 0, pack, 1,
                1 + (pack & 1), pack == 2};
            bf_check(&c);
        }
        bf_case one = {1, 300, 129, 0, pack & 1, 1, pack, 1, 1 + (pack & 1), 0};
        bf_check(&one);
    }
    /* random shapes */
    for (int r = 0; r < 40; r++) {
        bf_case c = {irand(1, 300),    irand(1, 300),
                     irand(1, 600),    (int)irand(0, 1),
                     (int)irand(0, 1), (int)irand(0, 1),
                     (int)irand(0, 4), (int)irand(0, 1),
                     (int)irand(0, 2), 0};
        c.in_place = c.epi == 1 && irand(0, 3) == 0;
        bf_check(&c);
    }
    test_special();
#ifdef DLRT_GEMM_BF16
    test_pack_cols_a();
#endif
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
