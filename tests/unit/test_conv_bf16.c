/* test_conv_bf16.c — convolutions with bfloat16 products (dlrt_conv.bf16, --math bf16): the 1x1
 * and im2col algorithms, on plain weights and on weights prepacked in depth pairs (DLRT_A_PAIRS,
 * DLRT_A_PAIRS_T), against the reference loop (test-conv-ref.h) run on inputs and weights rounded
 * to bfloat16 as the conversion instructions round them (test-bf16.h). The kernel adds those
 * exact products in float32, so the two agree to float32's rounding of the sums, far below
 * bfloat16's rounding, which a float32 layer would miss (checked too). Geometries cover both
 * orientations of the GEMM (wide and narrow output planes), groups, strides, padding, 1-D and
 * 3-D layers, a batch split into chunks of images and K across several blocks, each with an
 * epilogue (alpha, bias, residual, ReLU). Also: two threads give one thread's bits, and what
 * dlrt_conv_choose and dlrt_conv_packs_weights decide for bf16 layers.
 *
 * The kernel sources are included (rt-lib.c) and built with this binary's flags; the Makefile
 * builds it per instruction set and once with AVX512-BF16. Without AVX512-BF16
 * (dlrt_gemm_has_bf16() == 0) a bf16 layer must compute float32 products. */
#include "../../src/kernels/rt-lib.c"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "test-bf16.h"
#include "test-conv-ref.h"
#include "test-rng.h"

#define CANARY 12345.0f

static float *rand_buf(int64_t n) {
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++) p[i] = frand();
    return p;
}

static float *rounded(const float *v, int64_t n) {
    float *r = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++) r[i] = bf16_round(v[i]);
    return r;
}

/* A layer of rank nsp: every spatial dim of size hw, kernel k, stride s, padding pad before
 * and after. */
static dlrt_conv layer(int nsp, int64_t n, int64_t c_in, int64_t c_out, int64_t group, int64_t hw,
                       int64_t k, int64_t s, int64_t pad) {
    dlrt_conv p = {.nsp = nsp, .n = n, .c_in = c_in, .c_out = c_out, .group = group, .bf16 = 1};
    for (int d = 0; d < 3; d++) {
        const int in = d < nsp;
        p.in[d] = in ? hw : 1, p.k[d] = in ? k : 1, p.stride[d] = in ? s : 1, p.dil[d] = 1;
        p.pad_begin[d] = in ? pad : 0;
        p.out[d] = in ? (hw + 2 * pad - k) / s + 1 : 1;
    }
    return p;
}

/* y = the layer through algorithm algo (packed: on the weights prepacked as
 * dlrt_conv_packs_weights says, through dlrt_conv_forward_packed) on `threads` threads, with
 * alpha 0.5, a bias, a residual and ReLU. Returns 0 when something was written past y or the
 * workspace. */
static int run(const dlrt_conv *p, int algo, int packed, const float *x, const float *w,
               const float *bias, const float *res, float *y, int64_t yn, int threads) {
    dlrt_set_threads(threads);
    const dlrt_epilogue ep = {
        .alpha = 0.5f, .beta = 1.0f, .bias = bias, .residual = res, .act = DLRT_ACT_RELU};
    const size_t wsb = packed ? dlrt_conv_workspace(p) : dlrt_conv_algo_workspace(p, algo);
    unsigned char *ws = malloc(wsb + 64);
    memset(ws + wsb, 0xA5, 64);
    y[yn] = CANARY;
    const int mode = dlrt_conv_packs_weights(p);
    if (packed && mode) {
        int operand, trans;
        dlrt_conv_gemm_pack_args(mode, &operand, &trans);
        int64_t K = p->c_in / p->group;
        for (int d = 0; d < p->nsp; d++) K *= p->k[d];
        float *wp = malloc(dlrt_gemm_packed_bytes(operand, p->c_out, K));
        dlrt_gemm_pack_operand(operand, p->c_out, K, w, K, trans, wp);
        dlrt_conv_forward_packed(p, x, w, wp, mode, y, ws, &ep);
        free(wp);
    } else {
        dlrt_conv_forward_algo(p, algo, x, w, y, ws, &ep);
    }
    int ok = y[yn] == CANARY;
    for (size_t i = 0; i < 64; i++) ok = ok && ws[wsb + i] == 0xA5;
    free(ws);
    dlrt_set_threads(1);
    return ok;
}

/* The worst error of y against the reference sums acc (magnitudes mag) through the epilogue,
 * relative to 1 + the sum of the magnitudes of the terms. */
static double worst_err(const dlrt_conv *p, const float *y, const double *acc, const double *mag,
                        const float *bias, const float *res, int64_t yn) {
    const int64_t sp = yn / (p->n * p->c_out);
    double worst = 0;
    for (int64_t i = 0; i < yn; i++) {
        double v = 0.5 * acc[i] + bias[(i / sp) % p->c_out] + res[i];
        v = v > 0 ? v : 0;
        const double err = fabs((double)y[i] - v) / (1.0 + mag[i]);
        if (!(err <= worst)) worst = err; /* (NaN counts as the worst) */
    }
    return worst;
}

/* A listed layer. */
typedef struct named_conv {
    const char *name;
    dlrt_conv p;
} named_conv;

static void conv_case(const char *name, const dlrt_conv *p) {
    const int64_t xn = numel_in(p), wn = numel_w(p), yn = numel_out(p);
    float *x = rand_buf(xn), *w = rand_buf(wn), *bias = rand_buf(p->c_out), *res = rand_buf(yn);
    float *xr = rounded(x, xn), *wr = rounded(w, wn);
    double *acc = malloc((size_t)yn * sizeof(double)), *mag = malloc((size_t)yn * sizeof(double));
    double *acc32 = malloc((size_t)yn * sizeof(double));
    ref_conv(p, x, w, acc32, mag); /* float32 operands: what a float32 layer computes */
    ref_conv(p, xr, wr, acc, mag);
    float *y = malloc((size_t)(yn + 1) * sizeof(float)),
          *y2 = malloc((size_t)(yn + 1) * sizeof(float));
    const size_t ybytes = (size_t)yn * sizeof(float);
    const int bf16 = dlrt_gemm_has_bf16();
    char what[300];
    for (int algo = 0; algo < DLRT_CONV_ALGOS; algo++) {
        if (algo != DLRT_CONV_GEMM_1X1 && algo != DLRT_CONV_IM2COL) continue;
        if (!dlrt_conv_algo_ok(p, algo)) continue;
        for (int packed = 0; packed < 2; packed++) {
            /* packed weights run dlrt_conv_forward_packed's pick, so once per layer */
            if (packed && algo != dlrt_conv_choose_packed(p, 1)) continue;
            const char *how = packed ? " packed" : "";
            snprintf(what, sizeof what, "bf16 %s %s%s: no write past y or the workspace", name,
                     dlrt_conv_algo_name(algo), how);
            CHECK(what, run(p, algo, packed, x, w, bias, res, y, yn, 1));
            if (!bf16) { /* float32 products (the float32 layer's, up to the K blocking) */
                const double err = worst_err(p, y, acc32, mag, bias, res, yn);
                snprintf(what, sizeof what, "bf16 %s %s%s without AVX512-BF16 is float32 (%.2g)",
                         name, dlrt_conv_algo_name(algo), how, err);
                CHECK(what, err <= 2e-6);
                continue;
            }
            const double err = worst_err(p, y, acc, mag, bias, res, yn);
            snprintf(what, sizeof what, "bf16 %s %s%s: bfloat16 products (worst %.2g)", name,
                     dlrt_conv_algo_name(algo), how, err);
            CHECK(what, err <= 2e-6);
            /* and not float32's: the rounding happened (K >= 8 terms of random operands) */
            const double off32 = worst_err(p, y, acc32, mag, bias, res, yn);
            snprintf(what, sizeof what, "bf16 %s %s%s: not float32 products (%.2g)", name,
                     dlrt_conv_algo_name(algo), how, off32);
            CHECK(what, off32 > 1e-5);
            run(p, algo, packed, x, w, bias, res, y2, yn, 2);
            snprintf(what, sizeof what, "bf16 %s %s%s: two threads give one thread's bits", name,
                     dlrt_conv_algo_name(algo), how);
            CHECK(what, !memcmp(y, y2, ybytes));
        }
    }
    free(x), free(w), free(bias), free(res), free(xr), free(wr), free(acc), free(mag), free(acc32);
    free(y), free(y2);
}

/* ---- the backward (conv-grad.c) ---- */

/* The gradients' references in double: dX[xi] sums dY[yi] * w[wi] and dW[wi] sums
 * dY[yi] * x[xi] over the forward's terms, with the magnitudes of those terms. */
typedef struct ref_grads {
    const float *x, *w, *dy;
    double *dx, *mx, *dw, *mw;
} ref_grads;

static void ref_grad_add(void *ctx, int64_t yi, int64_t xi, int64_t wi) {
    ref_grads *r = ctx;
    const double gx = (double)r->dy[yi] * r->w[wi], gw = (double)r->dy[yi] * r->x[xi];
    r->dx[xi] += gx, r->mx[xi] += fabs(gx), r->dw[wi] += gw, r->mw[wi] += fabs(gw);
}

/* The worst error of got against want over 1 + the magnitudes. */
static double grad_err(const float *got, const double *want, const double *mag, int64_t n) {
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        const double e = fabs((double)got[i] - want[i]) / (1.0 + mag[i]);
        if (!(e <= worst)) worst = e;
    }
    return worst;
}

/* Both gradients of a bf16 layer against references on operands rounded to bfloat16 (bf) and
 * not (fp): bfloat16 products where the path has them (the GEMMs, and the input gradient run as
 * a forward convolution through a GEMM algorithm), float32 where it does not (the direct weight
 * gradient, a Winograd input gradient). *paths gets bit 0 for a bfloat16 input gradient, bit 1
 * for a bfloat16 weight gradient, bit 2 for an input gradient run as a convolution. */
static void grad_case(const char *name, const dlrt_conv *p, unsigned *paths) {
    const int64_t xn = numel_in(p), wn = numel_w(p), yn = numel_out(p);
    float *x = rand_buf(xn), *w = rand_buf(wn), *dy = rand_buf(yn);
    float *xr = rounded(x, xn), *wr = rounded(w, wn), *dyr = rounded(dy, yn);
    double *ref[2][4]; /* [rounded][dx, mx, dw, mw] */
    for (int r = 0; r < 2; r++) {
        for (int k = 0; k < 4; k++) ref[r][k] = calloc((size_t)(k < 2 ? xn : wn), sizeof(double));
        ref_grads g = {r ? xr : x, r ? wr : w, r ? dyr : dy, ref[r][0],
                       ref[r][1],  ref[r][2],  ref[r][3]};
        ref_conv_taps(p, ref_grad_add, &g);
    }
    dlrt_win3 g;
    dlrt_conv_geom(p, &g);
    dlrt_conv t;
    const int as_conv = dlrt_grad_input_as_conv(p, &t);
    const int t_algo = as_conv ? dlrt_conv_choose(&t) : -1;
    const int in_bf16 = !as_conv || t_algo == DLRT_CONV_GEMM_1X1 || t_algo == DLRT_CONV_IM2COL;
    const int w_bf16 = !dlrt_grad_weight_direct(p, &g);
    *paths = (unsigned)in_bf16 | (unsigned)w_bf16 << 1 | (unsigned)as_conv << 2;
    const size_t wsb = dlrt_conv_grad_workspace(p);
    unsigned char *ws = malloc(wsb + 64);
    float *dx = malloc((size_t)(xn + 1) * sizeof(float)),
          *dw = malloc((size_t)(wn + 1) * sizeof(float));
    dx[xn] = dw[wn] = CANARY;
    memset(ws + wsb, 0xA5, 64);
    dlrt_conv_grad_input(p, dy, w, dx, ws);
    dlrt_conv_grad_weight(p, x, dy, dw, ws);
    int ok = dx[xn] == CANARY && dw[wn] == CANARY;
    for (size_t i = 0; i < 64; i++) ok = ok && ws[wsb + i] == 0xA5;
    char what[300];
    snprintf(what, sizeof what, "bf16 grad %s: no write past the results or the workspace", name);
    CHECK(what, ok);
    const int built = dlrt_gemm_has_bf16();
    const struct {
        const char *which;
        const float *got;
        int64_t n, k;
        int bf16;
    } outs[2] = {{"input", dx, xn, 0, in_bf16 && built}, {"weight", dw, wn, 2, w_bf16 && built}};
    for (int o = 0; o < 2; o++) {
        const int k = (int)outs[o].k;
        const double e16 = grad_err(outs[o].got, ref[1][k], ref[1][k + 1], outs[o].n);
        const double e32 = grad_err(outs[o].got, ref[0][k], ref[0][k + 1], outs[o].n);
        if (outs[o].bf16) {
            snprintf(what, sizeof what,
                     "bf16 grad %s: %s gradient of bfloat16 products (err %.2g), not float32's "
                     "(%.2g)",
                     name, outs[o].which, e16, e32);
            CHECK(what, e16 <= 2e-6 && e32 > 1e-5);
        } else { /* Winograd's transforms round more than a GEMM */
            snprintf(what, sizeof what, "bf16 grad %s: %s gradient in float32 (err %.2g)", name,
                     outs[o].which, e32);
            CHECK(what, e32 <= 1e-5);
        }
    }
    for (int r = 0; r < 2; r++)
        for (int k = 0; k < 4; k++) free(ref[r][k]);
    free(x), free(w), free(dy), free(xr), free(wr), free(dyr), free(ws), free(dx), free(dw);
}

static void test_grads(void) {
    const named_conv cases[] = {
        {"3x3 stride 2", layer(2, 2, 16, 24, 1, 9, 3, 2, 1)},
        {"1x1", layer(2, 3, 40, 24, 1, 6, 1, 1, 0)},
        {"3x3 as a convolution", layer(2, 4, 48, 40, 1, 6, 3, 1, 1)},
        {"5x5 one input channel", layer(2, 2, 1, 8, 1, 24, 5, 1, 0)},
        {"groups 2", layer(2, 2, 8, 12, 2, 7, 3, 1, 1)},
        {"batch 16 in chunks", layer(2, 16, 6, 16, 1, 12, 5, 1, 0)},
    };
    unsigned seen = 0, all = 7;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        unsigned paths;
        grad_case(cases[i].name, &cases[i].p, &paths);
        seen |= paths, all &= paths;
    }
    /* the cases reach every path: an input gradient in bfloat16 run as a convolution, and a
     * float32 (direct) weight gradient */
    CHECK("bf16 grad: some input gradient runs as a convolution", seen >> 2 & 1);
    CHECK("bf16 grad: some weight gradient is the direct float32 one", !(all >> 1 & 1));
}

/* What the choice does for bf16 layers: the implicit GEMM (float32 products) gives way to
 * im2col, weights of layers run as GEMMs are packed in pairs, and Winograd (float32) keeps its
 * picks (the cost model does not price bfloat16 products lower). */
static void test_choice(void) {
    /* ResNet-50's stride-2 3x3 (the implicit GEMM in float32) and its 1x1 on 7x7 (a GEMM of 49
     * columns, run transposed) */
    dlrt_conv s2 = layer(2, 1, 128, 128, 1, 56, 3, 2, 1),
              p7 = layer(2, 1, 512, 2048, 1, 7, 1, 1, 0);
    dlrt_conv s2f = s2, p7f = p7;
    s2f.bf16 = p7f.bf16 = 0;
    CHECK("float32: the stride-2 3x3 runs the implicit GEMM (the premise)",
          dlrt_conv_choose(&s2f) == DLRT_CONV_IMPLICIT &&
              dlrt_conv_packs_weights(&s2f) == DLRT_A_PACKED_T);
    CHECK("bf16: a stride-2 3x3 runs im2col",
          dlrt_conv_choose(&s2) == DLRT_CONV_IM2COL &&
              dlrt_conv_choose_packed(&s2, 1) == DLRT_CONV_IM2COL);
    CHECK("bf16: im2col weights packed in pairs",
          dlrt_conv_packs_weights(&s2) == DLRT_A_PAIRS ||
              dlrt_conv_packs_weights(&s2) == DLRT_A_PAIRS_T);
    CHECK("the 1x1 on 7x7 packs for the transposed product, in float32 or in pairs",
          dlrt_conv_choose(&p7) == DLRT_CONV_GEMM_1X1 &&
              dlrt_conv_packs_weights(&p7f) == DLRT_A_PACKED_T &&
              dlrt_conv_packs_weights(&p7) == DLRT_A_PAIRS_T);
    /* 3x3 stride-1 layers where Winograd pays (ResNet-50's 64 channels on 56x56, 128 on 28x28):
     * a bf16 layer makes float32's pick */
    const dlrt_conv wl[2] = {layer(2, 1, 64, 64, 1, 56, 3, 1, 1),
                             layer(2, 1, 128, 128, 1, 28, 3, 1, 1)};
    for (int i = 0; i < 2; i++) {
        dlrt_conv f = wl[i];
        f.bf16 = 0;
        const int a = dlrt_conv_choose_packed(&f, 1);
        CHECK("bf16: Winograd kept where float32 picks it",
              dlrt_conv_algo_tile(a) && dlrt_conv_choose_packed(&wl[i], 1) == a &&
                  dlrt_conv_packs_weights(&wl[i]) == dlrt_conv_packs_weights(&f));
    }
    CHECK("bf16: the workspace covers the pick",
          dlrt_conv_workspace(&s2) >= dlrt_conv_algo_workspace(&s2, dlrt_conv_choose(&s2)));
}

int main(void) {
    printf("AVX512-BF16 products: %s\n", dlrt_gemm_has_bf16() ? "yes" : "no (float32 expected)");
    const named_conv cases[] = {
        {"1x1 wide plane", layer(2, 1, 64, 96, 1, 14, 1, 1, 0)},
        {"1x1 narrow plane (transposed)", layer(2, 1, 96, 80, 1, 5, 1, 1, 0)},
        {"1x1 K over blocks", layer(2, 1, 600, 40, 1, 9, 1, 1, 0)},
        {"1x1 stride 2 (im2col)", layer(2, 1, 48, 70, 1, 15, 1, 2, 0)},
        {"3x3 pad 1", layer(2, 1, 16, 24, 1, 13, 3, 1, 1)},
        {"3x3 stride 2", layer(2, 1, 32, 40, 1, 17, 3, 2, 1)},
        {"3x3 narrow plane", layer(2, 1, 64, 64, 1, 4, 3, 1, 1)},
        {"5x5 groups 2", layer(2, 1, 8, 12, 2, 11, 5, 1, 2)},
        {"1-D k 7", layer(1, 1, 12, 20, 1, 40, 7, 1, 3)},
        {"3-D 3x3x3", layer(3, 1, 6, 10, 1, 6, 3, 1, 1)},
        {"batch 8 in chunks", layer(2, 8, 6, 16, 1, 12, 5, 1, 0)},
        {"batch 3 1x1", layer(2, 3, 40, 24, 1, 10, 1, 1, 0)},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        conv_case(cases[i].name, &cases[i].p);
    test_choice();
    test_grads();
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
