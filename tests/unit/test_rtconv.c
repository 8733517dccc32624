/* test_rtconv.c — the convolution algorithms of the runtime kernels (src/kernels/rt/conv.c,
 * depthwise.c, winograd.c, conv-direct.c): each one, forced through dlrt_conv_forward_algo wherever
 * it applies, against a plain loop over outputs and taps written here (sums in double, then the
 * epilogue in double), over random geometries: depthwise with strides, dilations, asymmetric pads,
 * channel multipliers, kernels 1-7, images smaller than the kernel, ranks 1-3 and batch 2; Winograd
 * with odd sizes (partial tiles), small and large channel counts; direct with channel blocks of
 * 1-8, overlapping last vectors, padding in height and at either end of the rows. Every epilogue
 * kind is covered (alpha, bias, residual separate and in place, each activation). A canary after y
 * and after the workspace catches writes past them. Also the depthwise column chunking (small row
 * buffers), Winograd's accuracy at c_in = 512 on N(0, 1) data, and dlrt_conv_choose.
 *
 * The kernel sources are included (all of them, through rt-lib.c) and built with this binary's
 * flags; the Makefile also builds it per instruction set (build/tests-isa/). `test_rtconv
 * --bench` prints GFLOP/s of each applicable algorithm on MobileNetV2's depthwise and ResNet-50's
 * 3x3 layers (batch 1); build/tests-isa/avx512/test_rtconv --bench is built like the JIT's code
 * (-O3, threads). */
#include "../../src/kernels/rt-lib.c"
#include "../../src/kernels/rt/conv-impl.h"
#include "check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CANARY 12345.0f

#include "test-conv-ref.h"
#include "test-rng.h"

static float *buf_new(int64_t n, int gauss) {
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++) p[i] = gauss ? grand() : frand();
    return p;
}

/* ---- reference ---- */

static double ref_act(int act, double v, double a, double b) {
    switch (act) {
    case DLRT_ACT_RELU:
        return v > 0 ? v : 0;
    case DLRT_ACT_CLIP:
        return v < a ? a : v > b ? b : v;
    case DLRT_ACT_LEAKY_RELU:
        return v < 0 ? a * v : v;
    case DLRT_ACT_SIGMOID:
        return 1 / (1 + exp(-v));
    case DLRT_ACT_TANH:
        return tanh(v);
    case DLRT_ACT_GELU:
        return 0.5 * v * (1 + erf(v / a));
    case DLRT_ACT_HARD_SIGMOID:
        return fmax(0, fmin(1, a * v + b));
    case DLRT_ACT_HARD_SWISH:
        return v * fmax(0, fmin(1, v / 6 + 0.5));
    case DLRT_ACT_GELU_TANH:
        return 0.5 * v * (1 + tanh(a * (v + b * v * v * v)));
    default:
        return v;
    }
}

/* Epilogue kinds a case runs with. */
enum { EP_NULL, EP_PLAIN, EP_BIAS, EP_RES, EP_RES_INPLACE, EP_ALL, EP_KINDS };
static const char *ep_names[] = {"no-ep", "alpha", "bias", "res", "res-inplace", "all"};

typedef struct epi_case {
    int kind, act;
    float alpha, beta, act_a, act_b;
} epi_case;

static epi_case epi_pick(int kind) {
    epi_case e = {.kind = kind, .alpha = 1, .beta = 1};
    if (kind == EP_PLAIN) e.alpha = 0.75f;
    if (kind >= EP_BIAS) {
        e.act = (int)irand(DLRT_ACT_NONE, DLRT_ACT_GELU_TANH);
        e.beta = kind == EP_ALL ? 0.5f : 1.0f;
        e.act_a = e.act == DLRT_ACT_CLIP           ? -0.5f
                  : e.act == DLRT_ACT_HARD_SIGMOID ? 0.2f
                  : e.act == DLRT_ACT_GELU         ? 1.41421356f
                  : e.act == DLRT_ACT_GELU_TANH    ? DLRT_GELU_TANH_A
                                                   : 0.1f;
        e.act_b = e.act == DLRT_ACT_CLIP        ? 0.7f
                  : e.act == DLRT_ACT_GELU_TANH ? DLRT_GELU_TANH_B
                                                : 0.5f;
    }
    return e;
}

/* ---- one run ---- */

static double worst_rel; /* largest error / (1 + magnitude) seen, for the report */

/* Runs p through `algo` with epilogue e and compares with the reference; tol is relative to
 * 1 + the magnitude of each output's terms. Returns the largest error relative to that.
 * wg_mode (a Winograd packing mode, DLRT_WG_PACKED..DLRT_WG2_PACKED_T, else 0): Winograd on
 * weights transformed and packed that way beforehand, in the smaller workspace that needs. */
static double conv_check(const dlrt_conv *p, int algo, int wg_mode, const epi_case *e,
                         const float *x, const float *w, const double *acc, const double *mag,
                         double tol, const char *what) {
    const int64_t yn = numel_out(p), sp = yn / (p->n * p->c_out);
    float *bias = buf_new(p->c_out, 0), *res = buf_new(yn, 0);
    float *y = malloc((size_t)(yn + 1) * sizeof(float));
    const int inplace = e->kind == EP_RES_INPLACE;
    for (int64_t i = 0; i <= yn; i++) y[i] = inplace && i < yn ? res[i] : CANARY;
    size_t ws = wg_mode ? dlrt_conv_winograd_workspace(p, dlrt_conv_winograd_tile(wg_mode), 1)
                        : dlrt_conv_algo_workspace(p, algo);
    unsigned char *work = malloc(ws + 64);
    for (size_t i = 0; i < 64; i++) work[ws + i] = 0xA5;
    float *wp = NULL;
    if (wg_mode) {
        wp = malloc(dlrt_conv_winograd_packed_bytes(wg_mode, p->c_out, p->c_in));
        dlrt_conv_winograd_pack(wg_mode, p->c_out, p->c_in, w, wp);
    }
    dlrt_epilogue ep = {
        .alpha = e->alpha, .beta = e->beta, .act = e->act, .act_a = e->act_a, .act_b = e->act_b};
    if (e->kind == EP_BIAS || e->kind == EP_ALL) ep.bias = bias;
    if (e->kind == EP_RES || e->kind == EP_ALL) ep.residual = res;
    if (inplace) ep.residual = y;
    const dlrt_epilogue *epp = e->kind == EP_NULL ? NULL : &ep;
    if (wg_mode)
        dlrt_conv_winograd(p, 0, x, w, wp, wg_mode, y, work, epp);
    else
        dlrt_conv_forward_algo(p, algo, x, w, y, work, epp);
    free(wp);
    int ok = y[yn] == CANARY;
    for (size_t i = 0; i < 64; i++) ok = ok && work[ws + i] == 0xA5;
    double worst = 0;
    for (int64_t i = 0; i < yn; i++) {
        double v = e->alpha * acc[i];
        if (ep.bias) v += (double)e->beta * bias[(i / sp) % p->c_out];
        if (ep.residual) v += res[i];
        v = ref_act(e->act, v, e->act_a, e->act_b);
        double err = fabs((double)y[i] - v) / (1.0 + mag[i]);
        if (!(err <= tol)) {
            if (ok) printf("  %s: y[%lld] = %.8g, want %.8g\n", what, (long long)i, y[i], v);
            ok = 0;
        }
        if (err > worst) worst = err;
    }
    CHECK(what, ok);
    free(bias), free(res), free(y), free(work);
    return worst;
}

/* Every applicable algorithm (and the chosen one through dlrt_conv_forward's workspace size)
 * with epilogues `kinds` (a bit set of EP_*). */
static void conv_case(const dlrt_conv *p, unsigned kinds, const char *tag) {
    float *x = buf_new(numel_in(p), 0), *w = buf_new(numel_w(p), 0);
    const int64_t yn = numel_out(p);
    double *acc = malloc((size_t)yn * sizeof(double)), *mag = malloc((size_t)yn * sizeof(double));
    ref_conv(p, x, w, acc, mag);
    char what[320];
    /* the algorithms, then Winograd on weights packed beforehand, both ways for both tiles */
    for (int run = 0; run < DLRT_CONV_ALGOS + 4; run++) {
        const int wg_mode = run >= DLRT_CONV_ALGOS ? DLRT_WG_PACKED + run - DLRT_CONV_ALGOS : 0;
        const int algo = !wg_mode                                ? run
                         : dlrt_conv_winograd_tile(wg_mode) == 2 ? DLRT_CONV_WINOGRAD_F2
                                                                 : DLRT_CONV_WINOGRAD;
        if (!dlrt_conv_algo_ok(p, algo)) continue;
        for (int k = 0; k < EP_KINDS; k++) {
            if (!(kinds >> k & 1)) continue;
            epi_case e = epi_pick(k);
            snprintf(what, sizeof what,
                     "%s %s%s %dd n=%lld c=%lld->%lld g=%lld in=%lldx%lldx%lld k=%lldx%lldx%lld "
                     "s=%lld,%lld,%lld d=%lld,%lld,%lld pb=%lld,%lld,%lld %s act=%d",
                     tag, dlrt_conv_algo_name(algo),
                     !wg_mode                                                      ? ""
                     : wg_mode == DLRT_WG_PACKED_T || wg_mode == DLRT_WG2_PACKED_T ? " packed-T"
                                                                                   : " packed",
                     p->nsp, (long long)p->n, (long long)p->c_in, (long long)p->c_out,
                     (long long)p->group, (long long)p->in[0], (long long)p->in[1],
                     (long long)p->in[2], (long long)p->k[0], (long long)p->k[1],
                     (long long)p->k[2], (long long)p->stride[0], (long long)p->stride[1],
                     (long long)p->stride[2], (long long)p->dil[0], (long long)p->dil[1],
                     (long long)p->dil[2], (long long)p->pad_begin[0], (long long)p->pad_begin[1],
                     (long long)p->pad_begin[2], ep_names[k], e.act);
            double tol = algo >= DLRT_CONV_WINOGRAD ? 1e-5 : 2e-6;
            double err = conv_check(p, algo, wg_mode, &e, x, w, acc, mag, tol, what);
            if (err > worst_rel) worst_rel = err;
        }
    }
    int algo = dlrt_conv_choose(p);
    CHECK("chosen algorithm applies", dlrt_conv_algo_ok(p, algo));
    /* dlrt_conv_workspace also covers the pick on packed weights (dlrt_conv_forward_packed),
     * which may be Winograd where dlrt_conv_forward's is not, or the reverse */
    const size_t ws = dlrt_conv_workspace(p);
    CHECK("workspace covers the chosen algorithm", ws >= dlrt_conv_algo_workspace(p, algo));
    const int tile = dlrt_conv_winograd_tile(dlrt_conv_packs_weights(p));
    CHECK("packed Winograd only where Winograd applies", !tile || dlrt_conv_algo_ok(p, algo));
    const int packed_algo = dlrt_conv_choose_packed(p, 1);
    const size_t packed_ws =
        tile ? dlrt_conv_winograd_workspace(p, tile, 1) : dlrt_conv_algo_workspace(p, packed_algo);
    CHECK("workspace covers the packed pick", ws >= packed_ws);
    CHECK("workspace is no larger than needed",
          ws == DLRT_MAX(dlrt_conv_algo_workspace(p, algo), packed_ws));
    free(x), free(w), free(acc), free(mag);
}

/* A random window along one dim: kernel from ks, output >= 1. */
static void rand_dim(dlrt_conv *p, int d, const int64_t *ks, int nks, int64_t max_s,
                     int64_t max_dil, int64_t max_in) {
    for (;;) {
        int64_t k = ks[irand(0, nks - 1)], s = irand(1, max_s), dl = irand(1, max_dil);
        int64_t in = irand(1, max_in), pb = irand(0, k), pe = irand(0, k);
        int64_t span = (k - 1) * dl + 1, room = in + pb + pe - span;
        if (room < 0) continue;
        p->in[d] = in, p->k[d] = k, p->stride[d] = s, p->dil[d] = dl, p->pad_begin[d] = pb;
        p->out[d] = room / s + 1;
        return;
    }
}

static void test_depthwise(void) {
    static const int64_t ks[] = {1, 3, 5, 7};
    for (int it = 0; it < 160; it++) {
        dlrt_conv p = {.nsp = it % 8 == 0 ? 1 : it % 8 == 1 ? 3 : 2};
        p.n = irand(1, 2);
        p.group = p.c_in = irand(1, 5);
        p.c_out = p.c_in * irand(1, 2);
        int fixed = it % 3 == 0; /* the unrolled kernels: square, dilation 1, stride 1-2 */
        int64_t k = ks[irand(1, 3)], s = irand(1, 2);
        for (int d = 0; d < p.nsp; d++) {
            if (fixed) {
                const int64_t kk[1] = {k};
                rand_dim(&p, d, kk, 1, 1, 1, 20);
                p.stride[d] = s;
                int64_t room = p.in[d] + 2 * p.pad_begin[d] - k;
                if (room < 0) p.pad_begin[d] = k / 2, room = p.in[d] + 2 * p.pad_begin[d] - k;
                p.out[d] = room / s + 1;
            } else {
                rand_dim(&p, d, ks, 4, 3, d == p.nsp - 1 ? 3 : 2, p.nsp == 3 ? 7 : 20);
            }
        }
        conv_case(&p, 1u << (it % EP_KINDS) | 1u << EP_RES_INPLACE, "depthwise");
    }
}

/* Depthwise layers with 16 channels or more, which AVX-512 builds compute 16 channels at a time
 * (depthwise-cv.c; the channels past a multiple of 16 stay with the plane kernel): random
 * geometries against the reference with every epilogue, the channels it takes checked, and its
 * outputs equal to the plane kernel's wherever that one runs its fused-multiply-add path (an
 * in-place residual of zeros sends the whole layer there). */
static void test_depthwise_blocked(void) {
    static const int64_t ks[] = {1, 3, 5, 7}, chans[] = {16, 19, 32, 37, 48};
    /* planes past 56x56, up to the kernel's 112x112 (MobileNetV2's first layers): 3x3, pad 1,
     * stride 1 and 2, rows of 16-pixel chunks and a ragged one */
    static const int64_t big[][3] = {{64, 64, 1}, {112, 112, 2}, {70, 45, 1}, {113, 99, 2}};
    for (size_t b = 0; b < sizeof big / sizeof big[0]; b++) {
        dlrt_conv p = {.nsp = 2, .n = 1, .group = 16, .c_in = 16, .c_out = 16};
        for (int d = 0; d < 2; d++) {
            p.in[d] = big[b][d], p.k[d] = 3, p.stride[d] = big[b][2], p.dil[d] = 1;
            p.pad_begin[d] = 1, p.out[d] = (p.in[d] + 2 - 3) / p.stride[d] + 1;
        }
        conv_case(&p, 1u << EP_ALL, "depthwise blocked, large plane");
    }
    for (int it = 0; it < 90; it++) {
        dlrt_conv p = {.nsp = it % 6 == 0 ? 1 : 2};
        p.n = irand(1, 2);
        p.group = p.c_in = p.c_out = chans[irand(0, 4)];
        for (int d = 0; d < p.nsp; d++)
            rand_dim(&p, d, ks, 4, 3, it % 3 == 0 ? 2 : 1, p.nsp == 1 ? 40 : 24);
        conv_case(&p, 1u << (it % EP_KINDS) | 1u << EP_ALL, "depthwise blocked");
        dlrt_win3 g;
        dlrt_conv_geom(&p, &g);
        const int64_t cv = dlrt_conv_dw_cv_channels(&p, &g, NULL);
#if defined(__AVX512F__)
        const int64_t want = g.out_sp <= 12544 && g.k_sp <= 49 ? p.c_out / 16 * 16 : 0;
        CHECK("blocked depthwise takes the multiple of 16 channels", cv == want);
#else
        CHECK("no blocked depthwise without AVX-512", cv == 0);
#endif
        dlrt_dw_plan plan;
        if (!cv || !dlrt_conv_dw_plan(&g, DLRT_DW_BUF, &plan)) continue;
        const int64_t xn = numel_in(&p), yn = numel_out(&p);
        float *x = buf_new(xn, 1), *w = buf_new(numel_w(&p), 1);
        float *y = malloc((size_t)yn * sizeof(float)), *y0 = calloc((size_t)yn, sizeof(float));
        const dlrt_epilogue clip = {.alpha = 1.0f, .act = DLRT_ACT_CLIP, .act_a = -1, .act_b = 1};
        dlrt_epilogue res = clip;
        res.residual = y0;
        dlrt_conv_depthwise(&p, x, w, y, &clip);
        dlrt_conv_depthwise(&p, x, w, y0, &res);
        int same = 1;
        for (int64_t i = 0; i < yn; i++) same = same && y[i] == y0[i];
        CHECK("blocked depthwise gives the plane kernel's results", same);
        free(x), free(w), free(y), free(y0);
    }
}

/* The plane kernel (depthwise.c) on every plane of p, which the row kernel must match bit for
 * bit: y = conv(x) through epilogue ep (its residual, if any, read in place from y). */
static void dw_planes(const dlrt_conv *p, const float *x, const float *w, float *y,
                      const dlrt_epilogue *ep) {
    dlrt_win3 g;
    dlrt_conv_geom(p, &g);
    dlrt_dw_plan plan;
    float *buf = malloc(DLRT_DW_BUF * sizeof(float));
    if (!dlrt_conv_dw_plan(&g, DLRT_DW_BUF, &plan)) abort();
    for (int64_t b = 0; b < p->n; b++)
        for (int64_t oc = 0; oc < p->c_out; oc++) {
            dlrt_epilogue e;
            const dlrt_epilogue *eb = dlrt_conv_ep(p, g.out_sp, ep, b, 0, &e);
            dlrt_conv_dw_plane(&g, &plan, x + (b * p->c_in + oc) * g.in_sp, w + oc * g.k_sp,
                               y + (b * p->c_out + oc) * g.out_sp, oc, eb, 0, g.out[1], buf);
        }
    free(buf);
}

/* 3x3 depthwise at pad 1 and stride 1 or 2 on rows of 28 or more outputs (14 at stride 2), read
 * straight from the planes on AVX-512 builds (depthwise-row.c): where the rule takes a layer and
 * where it leaves it (narrower rows, other pads, strides, dilations, kernels, a channel multiplier,
 * 1-D and 3-D); random widths on and off the vector size, odd input widths at stride 2, one- and
 * two-row planes, batches, against the reference with every epilogue and bit for bit against the
 * plane kernel, with a bias and clip, with an in-place residual and ReLU, and with alpha and a
 * sigmoid applied after the store. Stride-1 rows of 28 to 40 with pad 1 all round run flat, a plane
 * split into runs of vectors when planes are few (28x28, 40x40, 17x31, 41x29 here), and
 * 14 x 41 stays with rows, as do the one-, two- and three-row planes 48, 45 and 64 wide. Rows go
 * two at a time: 14 x 41 at stride 1 and 60 x 60 at stride 2 (30 rows in 7 blocks, 6 planes)
 * have row blocks starting at odd rows and ending with one row left. */
static void test_depthwise_rows(void) {
    /* height, width, stride, padding after (both dims): 1, or 0 and 2 (ONNX's explicit pads may
     * differ from the 1 before; the rows are then not as wide as the input) */
    static const int64_t taken[][4] = {
        {28, 28, 1, 1}, {56, 56, 2, 1}, {2, 30, 1, 1},  {1, 33, 1, 1},  {5, 55, 2, 1},
        {9, 57, 2, 1},  {3, 112, 2, 1}, {4, 113, 1, 1}, {30, 30, 1, 0}, {28, 28, 1, 2},
        {7, 60, 2, 0},  {6, 59, 2, 2},  {40, 40, 1, 1}, {3, 37, 1, 1},  {17, 31, 1, 1},
        {41, 29, 1, 1}, {1, 28, 1, 1},  {14, 41, 1, 1}, {1, 48, 1, 1},  {2, 45, 1, 1},
        {3, 64, 1, 1},  {60, 60, 2, 1}, {28, 28, 2, 1}, {27, 27, 2, 1}, {9, 33, 2, 1},
        {4, 53, 2, 1},  {5, 31, 2, 0},  {6, 30, 2, 2}};
    for (size_t c = 0; c < sizeof taken / sizeof taken[0]; c++) {
        dlrt_conv p = {.nsp = 2, .n = 1 + (int64_t)(c % 2)};
        p.group = p.c_in = p.c_out = 3 + (int64_t)c % 3;
        for (int d = 0; d < 2; d++) {
            p.in[d] = taken[c][d], p.k[d] = 3, p.stride[d] = taken[c][2], p.dil[d] = 1;
            p.pad_begin[d] = 1, p.out[d] = (p.in[d] + 1 + taken[c][3] - 3) / p.stride[d] + 1;
        }
        dlrt_win3 g;
        dlrt_conv_geom(&p, &g);
#if defined(__AVX512F__)
        CHECK("row depthwise takes 3x3 pad 1 at rows of 28+ (14+ at stride 2)",
              dlrt_conv_dw_row_applies(&p, &g));
#else
        CHECK("no row depthwise without AVX-512", !dlrt_conv_dw_row_applies(&p, &g));
#endif
        conv_case(&p, 1u << EP_NULL | 1u << EP_PLAIN | 1u << EP_RES_INPLACE | 1u << EP_ALL,
                  "depthwise rows");
        const int64_t xn = numel_in(&p), yn = numel_out(&p);
        float *x = buf_new(xn, 1), *w = buf_new(numel_w(&p), 1), *bias = buf_new(p.c_out, 1);
        float *y = malloc((size_t)yn * sizeof(float)), *y0 = malloc((size_t)yn * sizeof(float));
        float *r = buf_new(yn, 1);
        const dlrt_epilogue eps[3] = {
            {.alpha = 1, .beta = 1, .bias = bias, .act = DLRT_ACT_CLIP, .act_a = 0, .act_b = 0.5f},
            {.alpha = 1, .beta = 1, .residual = y, .act = DLRT_ACT_RELU},
            {.alpha = 0.75f, .beta = 2, .bias = bias, .act = DLRT_ACT_SIGMOID}};
        for (int k = 0; k < 3; k++) {
            dlrt_epilogue e = eps[k], e0 = eps[k];
            if (k == 1) e0.residual = y0;
            memcpy(y, r, (size_t)yn * sizeof(float));
            memcpy(y0, r, (size_t)yn * sizeof(float));
            dlrt_conv_depthwise(&p, x, w, y, &e);
            dw_planes(&p, x, w, y0, &e0);
            char what[120];
            snprintf(what, sizeof what,
                     "depthwise rows %lldx%lld stride %lld pad after %lld, epilogue %d: the plane "
                     "kernel's bits",
                     (long long)p.in[0], (long long)p.in[1], (long long)p.stride[0],
                     (long long)taken[c][3], k);
            CHECK(what, !memcmp(y, y0, (size_t)yn * sizeof(float)));
        }
        free(x), free(w), free(bias), free(y), free(y0), free(r);
    }
    /* left to the other kernels */
    for (int c = 0; c < 10; c++) {
        dlrt_conv p = {.nsp = 2, .n = 1, .group = 4, .c_in = 4, .c_out = 4};
        for (int d = 0; d < 2; d++)
            p.in[d] = 56, p.k[d] = 3, p.stride[d] = 1, p.dil[d] = 1, p.pad_begin[d] = 1;
        if (c == 0) p.in[1] = 27;                  /* 27 outputs a row */
        if (c == 1) p.pad_begin[1] = 0;            /* pad 0 on the left */
        if (c == 2) p.stride[0] = p.stride[1] = 3; /* stride 3 */
        if (c == 3) p.stride[1] = 2;               /* strides differ */
        if (c == 4) p.dil[0] = p.dil[1] = 2;       /* dilated */
        if (c == 5) p.k[0] = p.k[1] = 5, p.pad_begin[0] = p.pad_begin[1] = 1; /* 5x5 */
        if (c == 6) p.c_out = 8;                         /* channel multiplier 2 */
        if (c == 7) p.nsp = 1, p.in[0] = 64, p.k[0] = 3; /* 1-D */
        if (c == 8)
            p.nsp = 3, p.in[2] = 56, p.k[2] = 3, p.stride[2] = 1, p.dil[2] = 1,
            p.pad_begin[2] = 1; /* 3-D */
        /* 13 outputs a row at stride 2 */
        if (c == 9) p.in[1] = 26, p.stride[0] = p.stride[1] = 2;
        for (int d = 0; d < p.nsp; d++)
            p.out[d] =
                (p.in[d] + 2 * p.pad_begin[d] - (p.k[d] - 1) * p.dil[d] - 1) / p.stride[d] + 1;
        dlrt_win3 g;
        dlrt_conv_geom(&p, &g);
        char what[80];
        snprintf(what, sizeof what, "row depthwise leaves case %d to the other kernels", c);
        CHECK(what, !dlrt_conv_dw_row_applies(&p, &g));
    }
}

/* The depthwise planes with row buffers from barely enough to plenty (column chunks of every
 * width), against the reference. */
static void test_dw_chunks(void) {
    dlrt_conv p = {.nsp = 2,
                   .n = 1,
                   .c_in = 2,
                   .c_out = 2,
                   .group = 2,
                   .in = {9, 37},
                   .k = {3, 5},
                   .stride = {2, 3},
                   .dil = {1, 2},
                   .pad_begin = {1, 4}};
    p.out[0] = (9 + 2 - 3) / 2 + 1, p.out[1] = (37 + 8 - 9) / 3 + 1;
    dlrt_win3 g;
    dlrt_conv_geom(&p, &g);
    float *x = buf_new(numel_in(&p), 0), *w = buf_new(numel_w(&p), 0), *bias = buf_new(2, 0);
    double *acc = malloc((size_t)numel_out(&p) * sizeof(double));
    double *mag = malloc((size_t)numel_out(&p) * sizeof(double));
    ref_conv(&p, x, w, acc, mag);
    float *y = malloc((size_t)(g.out_sp + 1) * sizeof(float)), buf[2048];
    dlrt_epilogue ep = {.alpha = 1, .beta = 1, .bias = bias, .act = DLRT_ACT_RELU};
    int fitted = 0, refused = 0;
    for (int64_t cap = 8; cap <= 2048; cap += cap < 256 ? 4 : 97) {
        for (int64_t oc = 0; oc < 2; oc++) {
            for (int64_t i = 0; i <= g.out_sp; i++) y[i] = CANARY;
            dlrt_epilogue e;
            const dlrt_epilogue *eb = dlrt_conv_ep(&p, g.out_sp, &ep, 0, 0, &e);
            int64_t r0 = oc, r1 = g.out[1] - oc; /* a row range too */
            dlrt_dw_plan plan;
            if (!dlrt_conv_dw_plan(&g, cap, &plan)) {
                refused++;
                continue;
            }
            dlrt_conv_dw_plane(&g, &plan, x + oc * g.in_sp, w + oc * g.k_sp, y, oc, eb, r0, r1,
                               buf);
            fitted++;
            int ok = y[g.out_sp] == CANARY;
            for (int64_t i = 0; i < g.out_sp; i++) {
                int64_t r = i / g.out[2];
                if (r < r0 || r >= r1) {
                    ok = ok && y[i] == CANARY;
                    continue;
                }
                double v = ref_act(DLRT_ACT_RELU, acc[oc * g.out_sp + i] + bias[oc], 0, 0);
                ok = ok && fabs(y[i] - v) <= 2e-6 * (1 + mag[oc * g.out_sp + i]);
            }
            char what[64];
            snprintf(what, sizeof what, "depthwise plane cap=%lld oc=%lld", (long long)cap,
                     (long long)oc);
            CHECK(what, ok);
        }
    }
    CHECK("small caps refused, larger ones fit", fitted > 0 && refused > 0);
    free(x), free(w), free(bias), free(acc), free(mag), free(y);
}

static void test_winograd(void) {
    for (int it = 0; it < 40; it++) {
        dlrt_conv p = {.nsp = 2, .group = 1};
        p.n = irand(1, 2);
        int big = it % 10 == 9;
        p.c_in = big ? irand(60, 150) : irand(1, 9);
        p.c_out = big ? irand(60, 130) : irand(1, 9);
        for (int d = 0; d < 2; d++) {
            p.in[d] = irand(1, it % 4 == 0 ? 40 : 13);
            p.k[d] = 3, p.stride[d] = 1, p.dil[d] = 1, p.pad_begin[d] = irand(0, 2);
            int64_t pe = irand(0, 2);
            if (p.in[d] + p.pad_begin[d] + pe < 3) pe = 3 - p.in[d] - p.pad_begin[d];
            p.out[d] = p.in[d] + p.pad_begin[d] + pe - 2;
        }
        conv_case(&p, 1u << (it % EP_KINDS) | 1u << EP_ALL, "winograd");
    }
    /* every output width up to two chunks of 16 tiles and a bit at F(4x4) (so every count of
     * tiles in a chunk's last partial one, and rows of several chunks), pads on all four edges
     * 0 to 2, three images, c_in past 16 now and then */
    for (int ow = 1; ow <= 4 * 16 * 2 + 3; ow++) {
        dlrt_conv p = {.nsp = 2, .group = 1, .n = 3};
        p.c_in = ow % 5 == 0 ? 17 : irand(1, 3), p.c_out = irand(1, 3);
        for (int d = 0; d < 2; d++) {
            p.k[d] = 3, p.stride[d] = 1, p.dil[d] = 1, p.pad_begin[d] = irand(0, 2);
            const int64_t pe = irand(0, 2), want = d ? ow : irand(1, 6);
            p.in[d] = DLRT_MAX(want + 2 - p.pad_begin[d] - pe, (int64_t)1);
            p.out[d] = p.in[d] + p.pad_begin[d] + pe - 2;
        }
        if (p.out[0] < 1 || p.out[1] < 1) continue;
        conv_case(&p, 1u << (ow % EP_KINDS), "winograd");
    }
}

/* The error of F(4x4, 3x3) and F(2x2, 3x3) on N(0, 1) data with many input channels, relative
 * to the largest output (and per output to the magnitude of its terms). */
static void winograd_accuracy(int algo) {
    dlrt_conv p = {.nsp = 2,
                   .n = 1,
                   .c_in = 512,
                   .c_out = 8,
                   .group = 1,
                   .in = {11, 13},
                   .out = {11, 13},
                   .k = {3, 3},
                   .stride = {1, 1},
                   .dil = {1, 1},
                   .pad_begin = {1, 1}};
    float *x = buf_new(numel_in(&p), 1), *w = buf_new(numel_w(&p), 1);
    const int64_t yn = numel_out(&p);
    double *acc = malloc((size_t)yn * sizeof(double)), *mag = malloc((size_t)yn * sizeof(double));
    float *y = malloc((size_t)yn * sizeof(float)), *yd = malloc((size_t)yn * sizeof(float));
    void *work = malloc(dlrt_conv_algo_workspace(&p, algo));
    void *wd = malloc(dlrt_conv_algo_workspace(&p, DLRT_CONV_IM2COL));
    ref_conv(&p, x, w, acc, mag);
    dlrt_conv_forward_algo(&p, algo, x, w, y, work, NULL);
    dlrt_conv_forward_algo(&p, DLRT_CONV_IM2COL, x, w, yd, wd, NULL);
    double top = 0, err = 0, err_d = 0, rel = 0;
    for (int64_t i = 0; i < yn; i++) {
        top = fmax(top, fabs(acc[i]));
        err = fmax(err, fabs(y[i] - acc[i]));
        err_d = fmax(err_d, fabs(yd[i] - acc[i]));
        rel = fmax(rel, fabs(y[i] - acc[i]) / (1 + mag[i]));
    }
    printf("%s c_in=512 N(0,1): max |err| %.3g (im2col %.3g), max |y| %.3g, "
           "relative %.3g, per term magnitude %.3g\n",
           dlrt_conv_algo_name(algo), err, err_d, top, err / top, rel);
    CHECK("winograd error within 1e-4 of the largest output at c_in=512", err <= 1e-4 * top);
    free(x), free(w), free(acc), free(mag), free(y), free(yd), free(work), free(wd);
}

static void test_winograd_accuracy(void) {
    winograd_accuracy(DLRT_CONV_WINOGRAD);
    winograd_accuracy(DLRT_CONV_WINOGRAD_F2);
}

static void test_im2col_and_1x1(void) {
    static const int64_t ks[] = {1, 2, 3};
    for (int it = 0; it < 30; it++) {
        dlrt_conv p = {.nsp = 1 + it % 3, .n = irand(1, 2)};
        p.group = irand(1, 2);
        p.c_in = p.group * irand(1, 3), p.c_out = p.group * irand(1, 3);
        for (int d = 0; d < p.nsp; d++) rand_dim(&p, d, ks, 3, 2, 2, p.nsp == 3 ? 6 : 12);
        if (it % 5 == 0)
            for (int d = 0; d < p.nsp; d++) { /* a plain 1x1 */
                p.k[d] = p.stride[d] = p.dil[d] = 1, p.pad_begin[d] = 0, p.out[d] = p.in[d];
            }
        conv_case(&p, 1u << (it % EP_KINDS), "gemm");
    }
}

/* The direct algorithm (conv-direct.c) against the reference, with every epilogue (an in-place
 * residual included: the last vector of a row overlaps the one before): channel blocks of 1 to 8
 * (6: one block; 17: 6 + 6 + 5), rows of 16 (one vector on AVX-512), 24 (LeNet's: one vector
 * overlapping the first) and 512 (the limit), padding in height and width (rows copied
 * zero-padded), 32 taps, non-square kernels, a batch. */
static void test_direct(void) {
    static const int64_t cases[][9] = {/* n, c_in, c_out, h, w, kh, kw, pad h, pad w */
                                       {3, 1, 6, 28, 28, 5, 5, 0, 0}, {1, 1, 1, 5, 20, 5, 5, 0, 0},
                                       {2, 3, 10, 9, 22, 3, 3, 1, 1}, {1, 2, 17, 7, 33, 3, 5, 2, 1},
                                       {1, 8, 9, 4, 17, 1, 4, 0, 2},  {1, 1, 3, 3, 514, 3, 3, 0, 0},
                                       {2, 2, 8, 6, 19, 4, 4, 3, 0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const int64_t *c = cases[i];
        dlrt_conv p = {.nsp = 2, .n = c[0], .c_in = c[1], .c_out = c[2], .group = 1};
        for (int d = 0; d < 2; d++) {
            p.in[d] = c[3 + d], p.k[d] = c[5 + d], p.stride[d] = p.dil[d] = 1;
            p.pad_begin[d] = c[7 + d];
            p.out[d] = p.in[d] + 2 * p.pad_begin[d] - p.k[d] + 1;
        }
        CHECK("direct applies", dlrt_conv_algo_ok(&p, DLRT_CONV_DIRECT));
        conv_case(&p, (1u << EP_KINDS) - 1, "direct");
    }
    /* padding at the end of the rows only: they are copied, zero-padded, too */
    dlrt_conv e = {.nsp = 2,
                   .n = 1,
                   .c_in = 2,
                   .c_out = 3,
                   .group = 1,
                   .in = {5, 20},
                   .k = {3, 5},
                   .stride = {1, 1},
                   .dil = {1, 1},
                   .pad_begin = {1, 0},
                   .out = {5, 20}};
    CHECK("direct with end padding only", dlrt_conv_algo_ok(&e, DLRT_CONV_DIRECT));
    conv_case(&e, (1u << EP_KINDS) - 1, "direct, end padding");
    /* stride 2 (each input row split into even and odd columns): odd and even widths and
     * kernels, pads from none to past the window's middle, pads wider than the row's end
     * needs, rows of exactly 16 and ragged ones, ResNet's 7x7 and MobileNetV2's 3x3 first layers
     * on small images, batches */
    static const int64_t s2[][9] = {/* n, c_in, c_out, h, w, kh, kw, pad h, pad w */
                                    {1, 3, 64, 20, 40, 7, 7, 3, 3}, {2, 3, 32, 9, 35, 3, 3, 1, 1},
                                    {1, 1, 5, 7, 34, 4, 4, 0, 0},   {1, 8, 3, 5, 33, 2, 2, 0, 1},
                                    {1, 2, 9, 6, 50, 5, 6, 2, 4},   {3, 4, 17, 11, 47, 3, 5, 1, 2}};
    for (size_t i = 0; i < sizeof s2 / sizeof s2[0]; i++) {
        const int64_t *c = s2[i];
        dlrt_conv p = {.nsp = 2, .n = c[0], .c_in = c[1], .c_out = c[2], .group = 1};
        for (int d = 0; d < 2; d++) {
            p.in[d] = c[3 + d], p.k[d] = c[5 + d], p.stride[d] = 2, p.dil[d] = 1;
            p.pad_begin[d] = c[7 + d];
            p.out[d] = (p.in[d] + 2 * p.pad_begin[d] - p.k[d]) / 2 + 1;
        }
        CHECK("direct applies at stride 2", dlrt_conv_algo_ok(&p, DLRT_CONV_DIRECT));
        conv_case(&p, (1u << EP_KINDS) - 1, "direct, stride 2");
    }
    /* rows of 3 to 9 vectors (AVX-512: blocks of up to 6 channels, groups of 4 or 3 vectors,
     * the last group ending at the row's end), exact and ragged widths, at both strides; 64
     * channels (11 blocks of 6 and 5) and 13 (5 + 4 + 4) */
    static const int64_t widths[] = {40, 48, 60, 64, 70, 100, 112, 130};
    for (size_t i = 0; i < sizeof widths / sizeof widths[0]; i++)
        for (int s = 1; s <= 2; s++) {
            const int64_t ow = widths[i], k = s == 1 ? 3 : 7;
            dlrt_conv p = {.nsp = 2, .n = 1, .c_in = s == 1 ? 2 : 3, .group = 1};
            p.c_out = i % 2 ? 13 : 64;
            p.k[0] = p.k[1] = k, p.stride[0] = p.stride[1] = s, p.dil[0] = p.dil[1] = 1;
            p.pad_begin[0] = p.pad_begin[1] = s == 1 ? 0 : 3;
            p.out[0] = 3, p.out[1] = ow;
            p.in[0] = s == 1 ? p.out[0] + k - 1 : 2 * p.out[0];
            p.in[1] = s == 1 ? ow + k - 1 : 2 * ow;
            char what[64];
            snprintf(what, sizeof what, "direct, rows of %lld at stride %d", (long long)ow, s);
            CHECK("direct applies to wide rows", dlrt_conv_algo_ok(&p, DLRT_CONV_DIRECT));
            conv_case(&p, (1u << EP_KINDS) - 1, what);
        }
    /* 16 input rows of 513 floats to copy: more than a unit's room for padded rows */
    dlrt_conv big = e;
    big.c_in = 8, big.k[0] = big.k[1] = 2, big.in[1] = 512, big.out[1] = 512, big.out[0] = 4;
    CHECK("not direct past the padded rows' room", !dlrt_conv_algo_ok(&big, DLRT_CONV_DIRECT));
}

/* A square 2-D convolution, batch 1, pad k / 2 both sides. */
static dlrt_conv conv2d(int64_t c_in, int64_t c_out, int64_t group, int64_t hw, int64_t k,
                        int64_t s) {
    dlrt_conv p = {.nsp = 2, .n = 1, .c_in = c_in, .c_out = c_out, .group = group};
    for (int d = 0; d < 2; d++) {
        p.in[d] = hw, p.k[d] = k, p.stride[d] = s, p.dil[d] = 1, p.pad_begin[d] = k / 2;
        p.out[d] = (hw + 2 * (k / 2) - k) / s + 1;
    }
    return p;
}

/* The im2col matrix by its definition: col[(ci * k_sp + tap) * out_sp + o] is x[ci] at output
 * o's tap, 0 in the padding. */
static void ref_im2col(const dlrt_win3 *g, int64_t cin, const float *x, float *col) {
    int64_t r = 0;
    for (int64_t ci = 0; ci < cin; ci++)
        for (int64_t kd = 0; kd < g->k[0]; kd++)
            for (int64_t kh = 0; kh < g->k[1]; kh++)
                for (int64_t kw = 0; kw < g->k[2]; kw++, r++) {
                    int64_t o = 0;
                    for (int64_t od = 0; od < g->out[0]; od++)
                        for (int64_t oh = 0; oh < g->out[1]; oh++)
                            for (int64_t ow = 0; ow < g->out[2]; ow++, o++) {
                                const int64_t id = od * g->stride[0] - g->pad[0] + kd * g->dil[0];
                                const int64_t ih = oh * g->stride[1] - g->pad[1] + kh * g->dil[1];
                                const int64_t iw = ow * g->stride[2] - g->pad[2] + kw * g->dil[2];
                                const int in = id >= 0 && id < g->in[0] && ih >= 0 &&
                                               ih < g->in[1] && iw >= 0 && iw < g->in[2];
                                col[r * g->out_sp + o] =
                                    in ? x[ci * g->in_sp + (id * g->in[1] + ih) * g->in[2] + iw]
                                       : 0.0f;
                            }
                }
}

/* The im2col matrix, written out (dlrt_conv_im2col) and made where the GEMM packs it
 * (dlrt_conv_gather_cols), against its definition: over random geometries (ranks 1-3, strides,
 * dilations, pads, images smaller than the window) the matrix written out is the definition's,
 * and over random line and depth ranges, panel widths and panel strides, every element gathered
 * is too, and nothing else is written (the gaps between panels and the last panel's lines past
 * m keep their canary). */
static void test_gather_cols(void) {
    static const int64_t ks[] = {1, 2, 3, 5, 7};
    static const int widths[] = {4, 6, 8, 16, 48, 64};
    int bad = 0, cases = 0;
    for (int it = 0; it < 300; it++) {
        dlrt_conv p = {.nsp = 1 + it % 3, .n = 1, .group = 1, .c_in = irand(1, 3)};
        /* every third case has every tap inside the input (no padding reached): the gather's
         * copy-only path */
        const int inside = it % 3 == 0;
        for (int d = 0; d < p.nsp; d++) do
                rand_dim(&p, d, ks, 5, 3, 2, p.nsp == 3 ? 7 : p.nsp == 2 ? 20 : 90);
            while (inside && (p.pad_begin[d] != 0 ||
                              (p.out[d] - 1) * p.stride[d] + (p.k[d] - 1) * p.dil[d] >= p.in[d]));
        dlrt_win3 g;
        dlrt_conv_geom(&p, &g);
        const int64_t K = p.c_in * g.k_sp, N = g.out_sp;
        float *x = buf_new(p.c_in * g.in_sp, 0);
        float *col = malloc((size_t)(K * N) * sizeof(float));
        float *written = malloc((size_t)(K * N) * sizeof(float));
        ref_im2col(&g, p.c_in, x, col);
        dlrt_conv_im2col(&g, p.c_in, x, written);
        bad += memcmp(col, written, (size_t)(K * N) * sizeof(float)) != 0;
        free(written);
        const int w = widths[irand(0, 5)];
        const int64_t i0 = irand(0, (int)N - 1), p0 = irand(0, (int)K - 1);
        const int m = irand(1, (int)DLRT_MIN(N - i0, (int64_t)600));
        const int kc = irand(1, (int)DLRT_MIN(K - p0, (int64_t)200));
        const size_t pstride = (size_t)w * (size_t)kc + (size_t)irand(0, 3) * (size_t)w;
        const int64_t panels = (m + w - 1) / w;
        const size_t n = (size_t)(panels - 1) * pstride + (size_t)w * (size_t)kc;
        float *dst = malloc(n * sizeof(float));
        for (size_t i = 0; i < n; i++) dst[i] = CANARY;
        const dlrt_conv_cols cc = {&g, x};
        dlrt_conv_gather_cols(&cc, i0, m, p0, kc, w, pstride, dst);
        for (size_t i = 0; i < n; i++) {
            const int64_t pnl = (int64_t)(i / pstride), q = (int64_t)(i % pstride);
            const int64_t p = q / w, line = pnl * w + q % w;
            const int inside = p < kc && line < m;
            const float want = inside ? col[(p0 + p) * N + i0 + line] : CANARY;
            if (memcmp(&dst[i], &want, sizeof want)) bad++;
        }
        cases++;
        free(x), free(col), free(dst);
    }
    CHECK("im2col written out and gathered into panels equals its definition, nothing else "
          "written",
          bad == 0 && cases == 300);
}

/* The im2col algorithm, which makes its columns while the GEMM packs them where they are the
 * product's right operand, against the columns written out and multiplied by the same GEMM:
 * bit-identical (the same panels), with prepacked weights or not, on narrow layers (each tile
 * packs its own columns) and wide ones (packed once into the workspace, in parallel). */
static void test_gather_same(void) {
    static const int64_t rows[][5] = {                   /* c_in, c_out, hw, k, stride */
                                      {9, 64, 40, 7, 2}, /* 9 channels: not direct */
                                      {16, 24, 30, 3, 2},
                                      {16, 250, 15, 3, 2},
                                      {4, 40, 33, 3, 1}, /* 36 taps: not direct */
                                      {64, 256, 13, 3, 2},
                                      /* wide and deeper than a K block: panels of the made
                                       * operand over all of K in the workspace, both ways */
                                      {32, 200, 29, 3, 2},
                                      {64, 320, 13, 3, 2}};
    int transposed = 0;
    for (int r = 0; r < 7; r++) {
        dlrt_conv p = conv2d(rows[r][0], rows[r][1], 1, rows[r][2], rows[r][3], rows[r][4]);
        dlrt_win3 g;
        dlrt_conv_geom(&p, &g);
        const int64_t K = p.c_in * g.k_sp, N = g.out_sp, yn = numel_out(&p);
        float *x = buf_new(numel_in(&p), 0), *w = buf_new(numel_w(&p), 0);
        float *y = malloc((size_t)yn * sizeof(float)), *want = malloc((size_t)yn * sizeof(float));
        float *col = malloc((size_t)(K * N) * sizeof(float));
        const size_t ws = dlrt_conv_algo_workspace(&p, DLRT_CONV_IM2COL);
        const size_t gws = dlrt_gemm_workspace(p.c_out, N, K, 1, 0);
        void *work = malloc(ws + 1), *gwork = malloc(gws + 1);
        const int mode = dlrt_conv_packs_weights(&p);
        float *wp =
            malloc(dlrt_gemm_packed_bytes(1, p.c_out, K) + dlrt_gemm_packed_bytes(0, p.c_out, K));
        if (mode == DLRT_A_PACKED_T)
            dlrt_gemm_pack_operand(1, p.c_out, K, w, K, 1, wp);
        else
            dlrt_gemm_pack_operand(0, p.c_out, K, w, K, 0, wp);
        const dlrt_epilogue ep = {.alpha = 1.0f, .act = DLRT_ACT_RELU};
        dlrt_conv_im2col(&g, p.c_in, x, col);
        for (int packed = 0; packed < 2; packed++) {
            dlrt_sgemm_ws(p.c_out, N, K, packed ? wp : w, K, 0, packed ? mode : 0, col, N, 0, 0,
                          want, N, &ep, gwork, gws);
            if (packed)
                dlrt_conv_forward_packed(&p, x, w, wp, mode, y, work, &ep);
            else
                dlrt_conv_forward_algo(&p, DLRT_CONV_IM2COL, x, w, y, work, &ep);
            char what[160];
            snprintf(what, sizeof what,
                     "im2col %s c=%lld->%lld %lldx%lld k=%lld s=%lld: columns made while packed "
                     "give the written-out columns' results bit for bit",
                     packed ? "packed" : "unpacked", (long long)p.c_in, (long long)p.c_out,
                     (long long)p.in[0], (long long)p.in[1], (long long)p.k[0],
                     (long long)p.stride[0]);
            CHECK(what, !memcmp(y, want, (size_t)yn * sizeof(float)));
        }
        /* dlrt_sgemm_gather itself in the orientation the GEMM picks, transposed on the narrow
         * plane (the made operand then the left one, in panels of MR) */
        const dlrt_conv_cols cc = {&g, x};
        const dlrt_gemm_gather bg = {dlrt_conv_gather_cols, &cc};
        dlrt_sgemm_ws(p.c_out, N, K, w, K, 0, 0, col, N, 0, 0, want, N, &ep, gwork, gws);
        memset(gwork, 0xA5, gws);
        dlrt_sgemm_gather(p.c_out, N, K, w, K, 0, 0, &bg, y, N, &ep, gwork, gws);
        if (r >= 5) { /* the wide, deep rows: made panels really packed into the workspace */
            int written = 0;
            for (size_t i = 0; i < gws && !written; i++)
                written = ((unsigned char *)gwork)[i] != 0xA5;
            CHECK("dlrt_sgemm_gather packs the made operand into the workspace", written);
        }
        transposed |= dlrt_sgemm_transposes(p.c_out, N, K);
        CHECK("dlrt_sgemm_gather gives the stored operand's results bit for bit",
              !memcmp(y, want, (size_t)yn * sizeof(float)));
        free(x), free(w), free(y), free(want), free(col), free(work), free(gwork), free(wp);
    }
    CHECK("dlrt_sgemm_gather also ran transposed", transposed);
}

/* Wide layers (more output channels than a GEMM row of tiles holds) pack the image side once
 * into the workspace, after the im2col columns (dlrt_conv_gemm_ws): against the reference
 * with every epilogue and canaries (conv_case), and the packing space really written. Shapes:
 * 1x1 (B shared by the rows of tiles), 3x3 stride 2 through im2col, and a 7x7 plane run
 * transposed (the image side is then the left operand, shared by the columns of tiles). */
static void test_gemm_workspace(void) {
    static const int64_t rows[][5] = {/* c_in, c_out, hw, k, stride */
                                      {20, 200, 9, 1, 1},
                                      {16, 250, 15, 3, 2},
                                      {40, 300, 7, 1, 1},
                                      {24, 520, 7, 3, 1}};
    for (int r = 0; r < 4; r++) {
        dlrt_conv p = conv2d(rows[r][0], rows[r][1], 1, rows[r][2], rows[r][3], rows[r][4]);
        conv_case(&p, (1u << EP_KINDS) - 1, "gemm workspace");
        const int algo = p.k[0] == 1 && p.stride[0] == 1 ? DLRT_CONV_GEMM_1X1 : DLRT_CONV_IM2COL;
        const size_t ws = dlrt_conv_algo_workspace(&p, algo);
        const size_t cols =
            algo == DLRT_CONV_IM2COL ? (size_t)(p.c_in * p.k[0] * p.k[1] * p.out[0] * p.out[1]) : 0;
        unsigned char *work = malloc(ws + 1);
        memset(work, 0xA5, ws + 1);
        float *x = buf_new(numel_in(&p), 0), *w = buf_new(numel_w(&p), 0);
        float *y = malloc((size_t)numel_out(&p) * sizeof(float));
        dlrt_conv_forward_algo(&p, algo, x, w, y, work, NULL);
        int written = 0;
        for (size_t i = (cols + 15) / 16 * 16 * sizeof(float); i < ws; i++)
            written |= work[i] != 0xA5;
        CHECK("wide conv: the GEMM packs the image side into the workspace",
              ws > (cols + 15) / 16 * 16 * sizeof(float) && written);
        free(work), free(x), free(w), free(y);
    }
}

/* Batches of small images split into chunks of images run in parallel (dlrt_conv_chunks_of):
 * against the plain loop with every epilogue (conv_case's canaries also bound the larger
 * workspace), and bit-identical whatever the thread count. */
static void test_batch_chunks(void) {
    /* n, c_in, c_out, group, in (square), kernel, stride, pad */
    static const int64_t rows[][8] = {
        {64, 1, 6, 1, 28, 5, 1, 2},   /* LeNet conv1 */
        {64, 6, 16, 1, 14, 5, 1, 0},  /* LeNet conv2 */
        {7, 8, 12, 1, 12, 3, 1, 1},   /* uneven chunks */
        {32, 16, 24, 1, 9, 1, 1, 0},  /* 1x1: no columns */
        {64, 16, 32, 2, 20, 3, 2, 1}, /* groups, stride 2 */
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const int64_t *r = rows[i];
        const int64_t o = (r[4] + 2 * r[7] - r[5]) / r[6] + 1;
        dlrt_conv p = {.nsp = 2,
                       .n = r[0],
                       .c_in = r[1],
                       .c_out = r[2],
                       .group = r[3],
                       .in = {r[4], r[4]},
                       .out = {o, o},
                       .k = {r[5], r[5]},
                       .stride = {r[6], r[6]},
                       .dil = {1, 1},
                       .pad_begin = {r[7], r[7]}};
        dlrt_win3 g;
        dlrt_conv_geom(&p, &g);
        const int im2col = !dlrt_conv_algo_ok(&p, DLRT_CONV_GEMM_1X1);
        char what[96];
        snprintf(what, sizeof what, "batch case %zu is split into chunks", i);
        CHECK(what, dlrt_conv_chunks_of(&p, &g, im2col).chunks > 1);
        if (i == 1) /* 150 depths per output at stride 1, but the images run in parallel */
            CHECK("LeNet's conv2 at batch 64 stays im2col, not the implicit GEMM",
                  dlrt_conv_choose(&p) == DLRT_CONV_IM2COL);
        conv_case(&p, (1u << EP_KINDS) - 1, "chunks");
#ifdef DLRT_THREADS
        const int algo = im2col ? DLRT_CONV_IM2COL : DLRT_CONV_GEMM_1X1;
        const int64_t yn = numel_out(&p);
        float *x = buf_new(numel_in(&p), 0), *w = buf_new(numel_w(&p), 0);
        float *y1 = malloc((size_t)yn * sizeof(float)), *y3 = malloc((size_t)yn * sizeof(float));
        void *ws = malloc(dlrt_conv_algo_workspace(&p, algo) + 16);
        const int threads = dlrt_threads();
        dlrt_set_threads(1);
        dlrt_conv_forward_algo(&p, algo, x, w, y1, ws, NULL);
        dlrt_set_threads(3);
        dlrt_conv_forward_algo(&p, algo, x, w, y3, ws, NULL);
        dlrt_set_threads(threads);
        snprintf(what, sizeof what, "batch case %zu: 1 and 3 threads give the same bits", i);
        CHECK(what, !memcmp(y1, y3, (size_t)yn * sizeof(float)));
        free(x), free(w), free(y1), free(y3), free(ws);
#endif
    }
    /* a single image, and a layer whose one-image GEMM is parallel inside, stay serial */
    dlrt_conv one = {.nsp = 2,
                     .n = 1,
                     .c_in = 6,
                     .c_out = 16,
                     .group = 1,
                     .in = {14, 14},
                     .out = {10, 10},
                     .k = {5, 5},
                     .stride = {1, 1},
                     .dil = {1, 1}};
    dlrt_conv big = one;
    big.n = 8, big.c_in = 64, big.c_out = 128;
    dlrt_win3 g1, g2;
    dlrt_conv_geom(&one, &g1);
    dlrt_conv_geom(&big, &g2);
    CHECK("one image: one chunk", dlrt_conv_chunks_of(&one, &g1, 1).chunks == 1);
    CHECK("large images: one chunk", dlrt_conv_chunks_of(&big, &g2, 1).chunks == 1);
}

/* Where the packed pick (weights packed once, Winograd charged for reading its transformed
 * weights per batch) is not Winograd but the plain one (transforming them per call) is, the
 * packed weights are the GEMM's and dlrt_conv_forward_packed must run the packed pick: it ran
 * the plain pick's algorithm number through the GEMM path as a 1x1 layer, and a batch of 2,
 * 32 -> 16 channels of 3x3 on 48x48 gave NaNs. Against the reference, in exactly
 * dlrt_conv_workspace bytes (with a canary past them). */
static void test_packed_pick(void) {
    dlrt_conv p = conv2d(32, 16, 1, 48, 3, 1);
    p.n = 2;
    const int packed = dlrt_conv_choose_packed(&p, 1), plain = dlrt_conv_choose_packed(&p, 0);
    CHECK("a layer whose packed pick is not Winograd while its plain pick is",
          packed != DLRT_CONV_WINOGRAD && packed != DLRT_CONV_WINOGRAD_F2 &&
              (plain == DLRT_CONV_WINOGRAD || plain == DLRT_CONV_WINOGRAD_F2));
    dlrt_win3 g;
    dlrt_conv_geom(&p, &g);
    const int64_t K = p.c_in * g.k_sp, yn = numel_out(&p);
    float *x = buf_new(numel_in(&p), 0), *w = buf_new(numel_w(&p), 0);
    double *acc = malloc((size_t)yn * sizeof(double)), *mag = malloc((size_t)yn * sizeof(double));
    ref_conv(&p, x, w, acc, mag);
    const int mode = dlrt_conv_packs_weights(&p);
    float *wp = malloc(dlrt_gemm_packed_bytes(mode == DLRT_A_PACKED_T, p.c_out, K));
    dlrt_gemm_pack_operand(mode == DLRT_A_PACKED_T, p.c_out, K, w, K, mode == DLRT_A_PACKED_T, wp);
    const size_t ws = dlrt_conv_workspace(&p);
    unsigned char *work = malloc(ws + 64);
    memset(work + ws, 0xA5, 64);
    float *y = malloc((size_t)(yn + 1) * sizeof(float));
    y[yn] = CANARY;
    dlrt_conv_forward_packed(&p, x, w, wp, mode, y, work, NULL);
    int ok = y[yn] == CANARY && (mode == DLRT_A_PACKED || mode == DLRT_A_PACKED_T);
    for (size_t i = 0; i < 64; i++) ok = ok && work[ws + i] == 0xA5;
    for (int64_t i = 0; i < yn && ok; i++) ok = fabs((double)y[i] - acc[i]) <= 2e-6 * (1 + mag[i]);
    CHECK("dlrt_conv_forward_packed runs the packed pick on GEMM-packed weights", ok);
    free(x), free(w), free(acc), free(mag), free(wp), free(work), free(y);
}

static void test_choose(void) {
    dlrt_conv dw = conv2d(32, 32, 32, 112, 3, 1), one = conv2d(64, 256, 1, 56, 1, 1);
    dlrt_conv r64 = conv2d(64, 64, 1, 56, 3, 1), tiny = conv2d(3, 4, 1, 9, 3, 1);
    dlrt_conv s2 = conv2d(64, 64, 1, 56, 3, 2);
    CHECK("depthwise chosen", dlrt_conv_choose(&dw) == DLRT_CONV_DEPTHWISE);
    CHECK("1x1 chosen", dlrt_conv_choose(&one) == DLRT_CONV_GEMM_1X1);
    CHECK("winograd for ResNet 64ch 56x56", dlrt_conv_choose(&r64) == DLRT_CONV_WINOGRAD);
    CHECK("no winograd with 3 channels", dlrt_conv_choose(&tiny) != DLRT_CONV_WINOGRAD &&
                                             dlrt_conv_choose(&tiny) != DLRT_CONV_WINOGRAD_F2);
    CHECK("stride 2: the implicit GEMM, not winograd", dlrt_conv_choose(&s2) == DLRT_CONV_IMPLICIT);
    /* the implicit GEMM's rule, each limit on both sides: 64 depths per output (7 and 8
     * channels of 3x3, on rows of 14, too short for the direct kernel), more than one tap, a
     * batch im2col does not cut into chunks; stride 1 too */
    dlrt_conv d63 = conv2d(7, 64, 1, 28, 3, 2), d64 = conv2d(8, 64, 1, 28, 3, 2);
    dlrt_conv s2k1 = conv2d(256, 512, 1, 56, 1, 2), s1 = conv2d(512, 512, 1, 7, 3, 1);
    dlrt_conv rgb = conv2d(3, 32, 1, 224, 3, 2), c1 = conv2d(3, 64, 1, 224, 7, 2);
    CHECK("im2col at 63 depths per output", dlrt_conv_choose(&d63) == DLRT_CONV_IM2COL);
    CHECK("implicit at 64 depths per output", dlrt_conv_choose(&d64) == DLRT_CONV_IMPLICIT);
    CHECK("1x1 at stride 2 stays im2col", dlrt_conv_choose(&s2k1) == DLRT_CONV_IM2COL);
    CHECK("implicit at stride 1 too", dlrt_conv_choose(&s1) == DLRT_CONV_IMPLICIT);
    CHECK("MobileNetV2's first layer (27 depths) is direct",
          dlrt_conv_choose(&rgb) == DLRT_CONV_DIRECT);
    CHECK("ResNet-50's conv1 (147 depths) is direct", dlrt_conv_choose(&c1) == DLRT_CONV_DIRECT);
    /* the direct rule at stride 2, each limit on both sides: 8 input channels, 160 taps, rows
     * of 16 outputs; stride 3 never */
    dlrt_conv c8 = conv2d(8, 16, 1, 56, 3, 2), c9 = conv2d(9, 16, 1, 56, 3, 2);
    dlrt_conv t147 = conv2d(3, 16, 1, 64, 7, 2), t196 = conv2d(4, 16, 1, 64, 7, 2);
    dlrt_conv o16 = conv2d(3, 16, 1, 32, 3, 2), o15 = conv2d(3, 16, 1, 30, 3, 2);
    dlrt_conv s3 = conv2d(3, 16, 1, 64, 3, 3);
    CHECK("stride 2: direct with 8 input channels", dlrt_conv_choose(&c8) == DLRT_CONV_DIRECT);
    CHECK("stride 2: not direct with 9", !dlrt_conv_algo_ok(&c9, DLRT_CONV_DIRECT));
    CHECK("stride 2: direct at 147 taps", dlrt_conv_choose(&t147) == DLRT_CONV_DIRECT);
    CHECK("stride 2: not direct at 196", !dlrt_conv_algo_ok(&t196, DLRT_CONV_DIRECT));
    CHECK("stride 2: direct on rows of 16", dlrt_conv_choose(&o16) == DLRT_CONV_DIRECT);
    CHECK("stride 2: not direct on rows of 15", !dlrt_conv_algo_ok(&o15, DLRT_CONV_DIRECT));
    CHECK("stride 3: not direct", !dlrt_conv_algo_ok(&s3, DLRT_CONV_DIRECT));
    dlrt_conv small = conv2d(16, 32, 1, 16, 3, 2), big = conv2d(16, 32, 1, 64, 3, 2);
    small.n = big.n = 8;
    CHECK("small images in a batch: im2col's chunks", dlrt_conv_choose(&small) == DLRT_CONV_IM2COL);
    CHECK("large images in a batch: implicit", dlrt_conv_choose(&big) == DLRT_CONV_IMPLICIT);
    dlrt_conv grp = conv2d(16, 64, 2, 56, 3, 2);
    CHECK("no implicit GEMM with groups", !dlrt_conv_algo_ok(&grp, DLRT_CONV_IMPLICIT) &&
                                              dlrt_conv_choose(&grp) == DLRT_CONV_IM2COL);
    dlrt_conv grey = conv2d(1, 6, 1, 28, 5, 1);
    CHECK("one channel, one group: direct, not depthwise",
          dlrt_conv_choose(&grey) == DLRT_CONV_DIRECT);
    /* the direct rule's limits, each on both sides */
    dlrt_conv t32 = conv2d(2, 8, 1, 40, 4, 1), t36 = conv2d(4, 8, 1, 40, 3, 1);
    dlrt_conv w16 = conv2d(1, 6, 1, 16, 5, 1), w15 = conv2d(1, 6, 1, 15, 5, 1);
    dlrt_conv k1 = conv2d(16, 8, 1, 40, 1, 1), g2 = conv2d(2, 8, 2, 40, 3, 1);
    CHECK("direct at 32 taps", dlrt_conv_choose(&t32) == DLRT_CONV_DIRECT);
    CHECK("not direct at 36 taps", dlrt_conv_choose(&t36) == DLRT_CONV_IM2COL);
    CHECK("direct on rows of 16", dlrt_conv_choose(&w16) == DLRT_CONV_DIRECT);
    CHECK("not direct on rows of 15", dlrt_conv_choose(&w15) == DLRT_CONV_IM2COL);
    CHECK("1x1 with few channels stays a GEMM", dlrt_conv_choose(&k1) == DLRT_CONV_GEMM_1X1);
    CHECK("not direct with groups", !dlrt_conv_algo_ok(&g2, DLRT_CONV_DIRECT));
    dlrt_conv r128 = conv2d(128, 128, 1, 28, 3, 1), r512 = conv2d(512, 512, 1, 7, 3, 1);
    CHECK("winograd for ResNet 128ch 28x28", dlrt_conv_choose(&r128) == DLRT_CONV_WINOGRAD);
    CHECK("no winograd for ResNet 512ch 7x7 (filter transform): the implicit GEMM",
          dlrt_conv_choose(&r512) == DLRT_CONV_IMPLICIT);
    r512.n = 16;
    CHECK("winograd for 512ch 7x7 at batch 16", dlrt_conv_choose(&r512) == DLRT_CONV_WINOGRAD);
    /* with the filters transformed once, at load time, Winograd also pays on ResNet-50's 256ch
     * 14x14 layers, and still not on 512ch 7x7 at batch 1 (4 tiles per frequency) */
    dlrt_conv r256 = conv2d(256, 256, 1, 14, 3, 1);
    r512.n = 1;
    CHECK("no winograd for 256ch 14x14 transforming filters per call",
          dlrt_conv_choose(&r256) == DLRT_CONV_IMPLICIT);
    const int m256 = dlrt_conv_packs_weights(&r256), m512 = dlrt_conv_packs_weights(&r512);
    CHECK("winograd F(2x2) with packed filters for 256ch 14x14",
          m256 == DLRT_WG2_PACKED || m256 == DLRT_WG2_PACKED_T);
    CHECK("F(4x4) with packed filters for 64ch 56x56 and 128ch 28x28",
          dlrt_conv_winograd_tile(dlrt_conv_packs_weights(&r64)) == 4 &&
              dlrt_conv_winograd_tile(dlrt_conv_packs_weights(&r128)) == 4);
    CHECK("512ch 7x7 at batch 1 packs for im2col",
          m512 == DLRT_A_PACKED || m512 == DLRT_A_PACKED_T);
    CHECK("64ch 56x56 packs winograd filters for generic and AVX-512 targets alike",
          dlrt_conv_packs_weights_for(16, &r64) >= DLRT_WG_PACKED &&
              dlrt_conv_packs_weights_for(64, &r64) >= DLRT_WG_PACKED);
    dlrt_conv huge = conv2d((int64_t)1 << 20, (int64_t)1 << 20, 1, (int64_t)1 << 14, 3, 1);
    huge.n = (int64_t)1 << 20; /* costs saturate (no overflow): im2col */
    CHECK("huge convolution", dlrt_conv_choose(&huge) == DLRT_CONV_IM2COL);
    CHECK("names", !strcmp(dlrt_conv_algo_name(DLRT_CONV_WINOGRAD), "winograd") &&
                       !strcmp(dlrt_conv_algo_name(DLRT_CONV_WINOGRAD_F2), "winograd2x2") &&
                       !strcmp(dlrt_conv_algo_name(DLRT_CONV_DEPTHWISE), "depthwise") &&
                       !strcmp(dlrt_conv_algo_name(DLRT_CONV_IMPLICIT), "implicit") &&
                       !strcmp(dlrt_conv_algo_name(DLRT_CONV_IM2COL), "im2col") &&
                       !strcmp(dlrt_conv_algo_name(DLRT_CONV_GEMM_1X1), "gemm1x1"));
}

/* ---- benchmark ---- */

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static void bench_one(const dlrt_conv *p, const char *label) {
    float *x = buf_new(numel_in(p), 0), *w = buf_new(numel_w(p), 0), *y = buf_new(numel_out(p), 0);
    float *bias = buf_new(p->c_out, 0);
    dlrt_epilogue ep = {.alpha = 1, .beta = 1, .bias = bias, .act = DLRT_ACT_RELU};
    const double flops = 2.0 * (double)numel_out(p) * (double)(numel_w(p) / p->c_out);
    printf("%-24s chosen %-9s", label, dlrt_conv_algo_name(dlrt_conv_choose(p)));
    for (int algo = 0; algo < DLRT_CONV_ALGOS; algo++) {
        if (!dlrt_conv_algo_ok(p, algo) || algo == DLRT_CONV_GEMM_1X1) continue;
        void *work = malloc(dlrt_conv_algo_workspace(p, algo) + 1);
        double best = 1e30;
        int reps = 1;
        for (double t = 0; t < 0.05; reps *= 2) {
            t = now_s();
            for (int r = 0; r < reps; r++) dlrt_conv_forward_algo(p, algo, x, w, y, work, &ep);
            t = now_s() - t;
        }
        for (int round = 0; round < 5; round++) {
            double t = now_s();
            for (int r = 0; r < reps; r++) dlrt_conv_forward_algo(p, algo, x, w, y, work, &ep);
            t = (now_s() - t) / reps;
            best = t < best ? t : best;
        }
        printf("  %s %7.2f GFLOP/s (%.3f ms)", dlrt_conv_algo_name(algo), flops / best * 1e-9,
               best * 1e3);
        free(work);
    }
    printf("\n");
    free(x), free(w), free(y), free(bias);
}

static void bench(void) {
    static const int64_t dw[][3] = {{32, 112, 1}, {96, 112, 2}, {144, 56, 1}, {144, 56, 2},
                                    {192, 28, 1}, {192, 28, 2}, {384, 14, 1}, {576, 14, 1},
                                    {576, 14, 2}, {960, 7, 1}};
    static const int64_t rn[][2] = {{64, 56}, {128, 28}, {256, 14}, {512, 7}};
    char label[64];
    for (size_t i = 0; i < sizeof dw / sizeof dw[0]; i++) {
        dlrt_conv p = conv2d(dw[i][0], dw[i][0], dw[i][0], dw[i][1], 3, dw[i][2]);
        snprintf(label, sizeof label, "dw %lldx%lldx%lld s%lld", (long long)dw[i][1],
                 (long long)dw[i][1], (long long)dw[i][0], (long long)dw[i][2]);
        bench_one(&p, label);
    }
    for (size_t i = 0; i < sizeof rn / sizeof rn[0]; i++) {
        dlrt_conv p = conv2d(rn[i][0], rn[i][0], 1, rn[i][1], 3, 1);
        snprintf(label, sizeof label, "3x3 %lldx%lldx%lld", (long long)rn[i][1],
                 (long long)rn[i][1], (long long)rn[i][0]);
        bench_one(&p, label);
    }
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--bench")) {
        bench();
        return 0;
    }
    test_depthwise();
    test_depthwise_blocked();
    test_depthwise_rows();
    test_dw_chunks();
    test_winograd();
    test_winograd_accuracy();
    test_im2col_and_1x1();
    test_direct();
    test_gather_cols();
    test_gather_same();
    test_batch_chunks();
    test_gemm_workspace();
    test_choose();
    test_packed_pick();
    printf("largest error relative to the terms' magnitude: %.3g\n", worst_rel);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
