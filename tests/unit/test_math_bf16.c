/* test_math_bf16.c — dl_compile_options.math = DL_MATH_BF16 end to end: MatMul and Gemm groups
 * (weights prepacked or not, transposes absorbed, batched, bias and activation fused) compiled
 * with bfloat16 products and compared with a reference that rounds their operands to bfloat16
 * and sums in double; so are convolutions run as GEMMs (a 1x1 layer and a stride-2 3x3 layer,
 * im2col) and a training step's convolution weight gradient (ConvGradWeight); a training step
 * compiled the same way, against the float32 one. Where the
 * generated kernels lack AVX512-BF16 (the compile says so: dl_compile_stats.bf16_built), the
 * products must instead be float32's, bit for bit. An unknown math mode is refused. */
#include "../../src/runtime/profile.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../src/kernels/rt/dlrt.h"
#include "check.h"
#include "test-bf16.h"
#include "test-cache.h"
#include "test-conv-ref.h"
#include "test-rng.h"

static char cache_dir[] = "/tmp/dlcc-test-bf16-XXXXXX";
static dl_compile_options opts;

static dl_tensor *rand_t(dl_ctx *ctx, int rank, const int64_t *dims) {
    dl_tensor *t = NULL;
    if (dl_tensor_new(ctx, DL_F32, rank, dims, &t) != DL_OK) return NULL;
    for (int64_t i = 0; i < t->numel; i++) ((float *)t->data)[i] = frand();
    return t;
}

static const float *f32(const dl_tensor *t) {
    return (const float *)t->data;
}

/* Compiles g with the math mode and runs it on the inputs; NULL on failure (said so). */
static dl_tensor **compile_run(dl_ctx *ctx, dl_graph *g, int math, int n_in, dl_tensor **in,
                               int *bf16_built) {
    dl_compile_options o = opts;
    o.math = math;
    dl_program *p = NULL;
    if (dl_compile(ctx, g, &o, &p) != DL_OK) {
        printf("  compile: %s\n", dl_errmsg(ctx));
        return NULL;
    }
    if (bf16_built) *bf16_built = p->stats.bf16_built;
    const int n_out = dl_graph_num_outputs(g);
    dl_tensor **out = calloc((size_t)n_out, sizeof *out);
    if (dl_program_run(ctx, p, n_in, NULL, in, out) != DL_OK) {
        printf("  run: %s\n", dl_errmsg(ctx));
        free(out);
        out = NULL;
    }
    dl_program_free(p);
    return out;
}

static void free_outs(dl_tensor **o, int n) {
    for (int i = 0; o && i < n; i++) dl_tensor_free(o[i]);
    free(o);
}

/* y[i][j] = act(sum_p bf(a[i][p]) * bf(w[p][j]) + bias[j]), in double; a is [M, K] (or [K, M]
 * when ta), w [K, N] (or [N, K] when tb). Returns the largest error of got against it over the
 * magnitude of the terms, and in *off32 the same against float32 products. */
static double err_vs_ref(const float *got, const float *a, const float *w, const float *bias,
                         int64_t M, int64_t N, int64_t K, int ta, int tb, int relu, double *off32) {
    double worst = 0;
    *off32 = 0;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double s = bias ? bias[j] : 0, s32 = s, mag = fabs(s);
            for (int64_t p = 0; p < K; p++) {
                const float x = ta ? a[p * M + i] : a[i * K + p];
                const float y = tb ? w[j * K + p] : w[p * N + j];
                s += (double)bf16_round(x) * bf16_round(y);
                s32 += (double)x * y;
                mag += fabs((double)x * y);
            }
            if (relu) s = s > 0 ? s : 0, s32 = s32 > 0 ? s32 : 0;
            const double g = got[i * N + j];
            const double e = fabs(g - s) / (mag + 1e-30);
            if (!(e <= worst)) worst = e;
            *off32 = fmax(*off32, fabs(g - s32) / (mag + 1e-30));
        }
    return worst;
}

/* Three products: a dense layer (Gemm, weights [N, K] transposed, bias, Relu: prepacked
 * weights), a MatMul on a weight [K, N], and a batched MatMul of two inputs, the left one read
 * through an absorbed Transpose. */
static void test_products(dl_ctx *ctx) {
    const int64_t M = 70, K = 300, N = 90, NB = 3, M2 = 40, K2 = 33, N2 = 50;
    dl_graph *g = dl_graph_new(ctx);
    int64_t xd[2] = {M, K}, wd[2] = {N, K}, bd[1] = {N}, w2d[2] = {K, N}, ad[3] = {NB, K2, M2},
            b2d[3] = {NB, K2, N2};
    dl_tensor *w = rand_t(ctx, 2, wd), *bias = rand_t(ctx, 1, bd), *w2 = rand_t(ctx, 2, w2d);
    dl_value *x = dl_input(g, "x", DL_F32, 2, xd, NULL);
    dl_value *a3 = dl_input(g, "a3", DL_F32, 3, ad, NULL);
    dl_value *b3 = dl_input(g, "b3", DL_F32, 3, b2d, NULL);
    dl_output(g, dl_relu(g, dl_gemm(g, x, dl_parameter(g, "w", w), dl_parameter(g, "b", bias), 1)),
              "dense");
    dl_output(g, dl_matmul(g, x, dl_parameter(g, "w2", w2)), "mm");
    dl_output(g, dl_matmul(g, dl_op1(g, "Transpose", a3, "perm=[0,2,1]"), b3), "bmm");
    dl_tensor *in[3] = {rand_t(ctx, 2, xd), rand_t(ctx, 3, ad), rand_t(ctx, 3, b2d)};
    int built = -1;
    dl_tensor **o16 = compile_run(ctx, g, DL_MATH_BF16, 3, in, &built);
    dl_tensor **o32 = compile_run(ctx, g, DL_MATH_FP32, 3, in, NULL);
    CHECK("bf16 and fp32 programs compile and run", o16 && o32);
    if (o16 && o32 && !built) {
        printf("  (the kernels lack AVX512-BF16: checking float32 products)\n");
        int same = 1;
        for (int i = 0; i < 3; i++)
            same &= !memcmp(o16[i]->data, o32[i]->data, (size_t)o16[i]->numel * sizeof(float));
        CHECK("without AVX512-BF16, math bf16 gives float32's bits", same);
    } else if (o16 && o32) {
        double off[3], e[3];
        e[0] = err_vs_ref(f32(o16[0]), f32(in[0]), f32(w), f32(bias), M, N, K, 0, 1, 1, &off[0]);
        e[1] = err_vs_ref(f32(o16[1]), f32(in[0]), f32(w2), NULL, M, N, K, 0, 0, 0, &off[1]);
        e[2] = off[2] = 0; /* batch by batch: the right operand differs per batch */
        for (int64_t bi = 0; bi < NB; bi++) {
            double o2;
            e[2] =
                fmax(e[2], err_vs_ref(f32(o16[2]) + bi * M2 * N2, f32(in[1]) + bi * K2 * M2,
                                      f32(in[2]) + bi * K2 * N2, NULL, M2, N2, K2, 1, 0, 0, &o2));
            off[2] = fmax(off[2], o2);
        }
        static const char *names[3] = {"Gemm+Relu (prepacked weights, B^T)", "MatMul on a weight",
                                       "batched MatMul, A^T absorbed"};
        for (int i = 0; i < 3; i++) {
            char what[160];
            snprintf(what, sizeof what, "math bf16: %s matches bfloat16 products (err %.2g)",
                     names[i], e[i]);
            CHECK(what, e[i] <= 2e-6);
            snprintf(what, sizeof what, "math bf16: %s is not float32's (off %.2g)", names[i],
                     off[i]);
            CHECK(what, off[i] > 1e-5);
        }
    }
    free_outs(o16, 3);
    free_outs(o32, 3);
    for (int i = 0; i < 3; i++) dl_tensor_free(in[i]);
    dl_graph_free(g);
    /* an unknown mode is refused */
    dl_graph *g2 = dl_graph_new(ctx);
    dl_output(g2, dl_relu(g2, dl_input(g2, "x", DL_F32, 2, xd, NULL)), "y");
    dl_compile_options o = opts;
    o.math = 7;
    dl_program *p = NULL;
    const dl_status s = dl_compile(ctx, g2, &o, &p);
    CHECK("an unknown math mode is refused, by name",
          s == DL_ERR_INVALID && !p && strstr(dl_errmsg(ctx), "math mode 7"));
    dl_ctx_clear(ctx);
    dl_graph_free(g2);
}

/* y = the reference convolution of x and w (test-conv-ref.h) with operands rounded to bfloat16;
 * the largest error of got against it over the magnitude of the terms (+1), and in *off32 the
 * same against float32 operands. */
static double conv_err(const dlrt_conv *p, const float *got, const float *x, const float *w,
                       double *off32) {
    const int64_t xn = numel_in(p), wn = numel_w(p), yn = numel_out(p);
    float *xr = malloc((size_t)xn * sizeof(float)), *wr = malloc((size_t)wn * sizeof(float));
    for (int64_t i = 0; i < xn; i++) xr[i] = bf16_round(x[i]);
    for (int64_t i = 0; i < wn; i++) wr[i] = bf16_round(w[i]);
    double *acc = malloc((size_t)yn * sizeof(double)), *acc32 = malloc((size_t)yn * sizeof(double));
    double *mag = malloc((size_t)yn * sizeof(double));
    ref_conv(p, x, w, acc32, mag);
    ref_conv(p, xr, wr, acc, mag);
    double worst = 0;
    *off32 = 0;
    for (int64_t i = 0; i < yn; i++) {
        const double e = fabs(got[i] - acc[i]) / (1.0 + mag[i]);
        if (!(e <= worst)) worst = e;
        *off32 = fmax(*off32, fabs(got[i] - acc32[i]) / (1.0 + mag[i]));
    }
    free(xr), free(wr), free(acc), free(acc32), free(mag);
    return worst;
}

/* Two convolutions the compiler runs as GEMMs: 1x1 (gemm1x1) and a stride-2 3x3 (im2col, which
 * bfloat16 takes where float32 runs the implicit GEMM), weights prepacked in depth pairs. */
static void test_convs(dl_ctx *ctx) {
    const int64_t C = 48, CO = 40, HW = 12;
    dl_graph *g = dl_graph_new(ctx);
    int64_t xd[4] = {1, C, HW, HW}, w1d[4] = {CO, C, 1, 1}, w3d[4] = {CO, C, 3, 3};
    dl_tensor *w1 = rand_t(ctx, 4, w1d), *w3 = rand_t(ctx, 4, w3d);
    dl_value *x = dl_input(g, "x", DL_F32, 4, xd, NULL);
    dl_output(g, dl_conv2d(g, x, dl_parameter(g, "w1", w1), NULL, 1, 0), "c1");
    dl_output(g, dl_conv2d(g, x, dl_parameter(g, "w3", w3), NULL, 2, 1), "c3");
    dl_tensor *in[1] = {rand_t(ctx, 4, xd)};
    int built = -1;
    dl_tensor **o16 = compile_run(ctx, g, DL_MATH_BF16, 1, in, &built);
    dl_tensor **o32 = compile_run(ctx, g, DL_MATH_FP32, 1, in, NULL);
    CHECK("bf16 and fp32 convolutions compile and run", o16 && o32);
    dlrt_conv p1 = {.nsp = 2, .n = 1, .c_in = C, .c_out = CO, .group = 1};
    for (int d = 0; d < 3; d++) {
        p1.in[d] = p1.out[d] = d < 2 ? HW : 1;
        p1.k[d] = p1.stride[d] = p1.dil[d] = 1;
    }
    dlrt_conv p3 = p1; /* 3x3, stride 2, pad 1 */
    for (int d = 0; d < 2; d++)
        p3.out[d] = HW / 2, p3.k[d] = 3, p3.stride[d] = 2, p3.pad_begin[d] = 1;
    for (int i = 0; o16 && o32 && i < 2; i++) {
        const dlrt_conv *p = i ? &p3 : &p1;
        double off32, e = conv_err(p, f32(o16[i]), f32(in[0]), f32(i ? w3 : w1), &off32);
        char what[160];
        if (!built) { /* float32 products, as the float32 program's up to the algorithm */
            snprintf(what, sizeof what, "math bf16 without AVX512-BF16: conv %s is float32 (%.2g)",
                     i ? "3x3 stride 2" : "1x1", off32);
            CHECK(what, off32 <= 2e-6);
            continue;
        }
        snprintf(what, sizeof what, "math bf16: conv %s matches bfloat16 products (err %.2g)",
                 i ? "3x3 stride 2" : "1x1", e);
        CHECK(what, e <= 2e-6);
        snprintf(what, sizeof what, "math bf16: conv %s is not float32's (off %.2g)",
                 i ? "3x3 stride 2" : "1x1", off32);
        CHECK(what, off32 > 1e-5);
    }
    free_outs(o16, 2);
    free_outs(o32, 2);
    dl_tensor_free(in[0]);
    dl_graph_free(g);
}

typedef struct wgrad_sums {
    const float *x, *dy;
    double *dw, *mag;
} wgrad_sums;

static void wgrad_add(void *ctx, int64_t yi, int64_t xi, int64_t wi) {
    wgrad_sums *r = ctx;
    const double v = (double)r->dy[yi] * r->x[xi];
    r->dw[wi] += v, r->mag[wi] += fabs(v);
}

/* A training step's weight gradient (ai.dlcc ConvGradWeight, a conv-grad group: its GEMM
 * dY im2col(X)^T) compiled under bf16 against double references on rounded and on float32
 * operands: the step's backward convolutions are marked bf16 too. */
static void test_conv_grad(dl_ctx *ctx) {
    const int64_t N = 2, C = 8, CO = 12, HW = 9, OHW = 5; /* 3x3, stride 2, pad 1 */
    dl_graph *g = dl_graph_new(ctx);
    int64_t xd[4] = {N, C, HW, HW}, yd[4] = {N, CO, OHW, OHW};
    dl_value *in[2] = {dl_input(g, "x", DL_F32, 4, xd, NULL),
                       dl_input(g, "dy", DL_F32, 4, yd, NULL)};
    const char *attrs[4] = {"kernel_shape=[3,3]", "strides=[2,2]", "pads=[1,1,1,1]", "group=1"};
    dl_value *dw = NULL;
    const int added = dl_add_node_ex(g, "ai.dlcc", "ConvGradWeight", 1, 2, in, 1, &dw, 4, attrs, 0,
                                     NULL) == DL_OK;
    if (added) dl_output(g, dw, "dw");
    dl_tensor *t[2] = {rand_t(ctx, 4, xd), rand_t(ctx, 4, yd)};
    int built = -1;
    dl_tensor **o16 = added ? compile_run(ctx, g, DL_MATH_BF16, 2, t, &built) : NULL;
    CHECK("bf16 ConvGradWeight compiles and runs", o16 != NULL);
    dlrt_conv p = {.nsp = 2, .n = N, .c_in = C, .c_out = CO, .group = 1};
    for (int d = 0; d < 3; d++) {
        p.in[d] = d < 2 ? HW : 1, p.out[d] = d < 2 ? OHW : 1, p.k[d] = d < 2 ? 3 : 1;
        p.stride[d] = d < 2 ? 2 : 1, p.dil[d] = 1, p.pad_begin[d] = d < 2;
    }
    const int64_t xn = numel_in(&p), yn = numel_out(&p), wn = numel_w(&p);
    float *r[2] = {malloc((size_t)xn * sizeof(float)), malloc((size_t)yn * sizeof(float))};
    for (int64_t i = 0; i < xn; i++) r[0][i] = bf16_round(f32(t[0])[i]);
    for (int64_t i = 0; i < yn; i++) r[1][i] = bf16_round(f32(t[1])[i]);
    double err[2] = {0, 0}; /* against bfloat16 operands, float32 ones */
    for (int k = 0; o16 && k < 2; k++) {
        double *ref = calloc((size_t)wn, sizeof(double)), *mag = calloc((size_t)wn, sizeof(double));
        wgrad_sums ws = {k ? f32(t[0]) : r[0], k ? f32(t[1]) : r[1], ref, mag};
        ref_conv_taps(&p, wgrad_add, &ws);
        for (int64_t i = 0; i < wn; i++)
            err[k] = fmax(err[k], fabs(f32(o16[0])[i] - ref[i]) / (1.0 + mag[i]));
        free(ref), free(mag);
    }
    char what[160];
    if (o16 && !built) {
        snprintf(what, sizeof what,
                 "math bf16 without AVX512-BF16: conv weight gradient is float32 (%.2g)", err[1]);
        CHECK(what, err[1] <= 2e-6);
    } else if (o16) {
        snprintf(
            what, sizeof what,
            "math bf16: conv weight gradient of bfloat16 products (err %.2g), not float32's (%.2g)",
            err[0], err[1]);
        CHECK(what, err[0] <= 2e-6 && err[1] > 1e-5);
    }
    free_outs(o16, 1);
    free(r[0]), free(r[1]);
    dl_tensor_free(t[0]), dl_tensor_free(t[1]);
    dl_graph_free(g);
}

/* An MLP trained 12 steps in bf16 and in fp32 from the same weights: the losses follow each
 * other to bfloat16's precision, fall, and (with AVX512-BF16) are not float32's. */
static void test_training(dl_ctx *ctx) {
    enum { N = 64, IN = 96, HID = 128, OUT = 10, STEPS = 12 };
    int64_t xd[2] = {-1, IN}, w1[2] = {HID, IN}, b1[1] = {HID}, w2[2] = {OUT, HID}, b2[1] = {OUT};
    const char *sym[2] = {"N", NULL};
    dl_graph *g = dl_graph_new(ctx);
    dl_value *x = dl_input(g, "x", DL_F32, 2, xd, sym);
    dl_value *h = dl_relu(g, dl_gemm(g, x, dl_parameter(g, "w1", rand_t(ctx, 2, w1)),
                                     dl_parameter(g, "b1", rand_t(ctx, 1, b1)), 1));
    dl_output(g,
              dl_gemm(g, h, dl_parameter(g, "w2", rand_t(ctx, 2, w2)),
                      dl_parameter(g, "b2", rand_t(ctx, 1, b2)), 1),
              "logits");
    int64_t bx[2] = {N, IN}, by[1] = {N};
    dl_tensor *xt = rand_t(ctx, 2, bx), *yt = NULL;
    dl_tensor_new(ctx, DL_I64, 1, by, &yt);
    for (int i = 0; i < N; i++) ((int64_t *)yt->data)[i] = i % OUT;
    float loss[2][STEPS];
    int ok[2] = {0, 0};
    for (int m = 0; m < 2; m++) {
        dl_compile_options co = opts;
        co.math = m ? DL_MATH_BF16 : DL_MATH_FP32;
        dl_train_options o;
        dl_train_options_init(&o);
        o.optimizer = DL_OPT_ADAMW;
        o.compile = &co;
        dl_trainer *t = NULL;
        if (dl_trainer_new(ctx, g, &o, &t) != DL_OK) {
            printf("  trainer: %s\n", dl_errmsg(ctx));
            continue;
        }
        dl_hparams hp;
        dl_hparams_init(&hp, DL_OPT_ADAMW);
        hp.lr = 3e-3f;
        int k = 0;
        while (k < STEPS && dl_train_step(ctx, t, xt, yt, &hp, &loss[m][k]) == DL_OK) k++;
        ok[m] = k == STEPS;
        dl_trainer_free(t);
    }
    CHECK("12 steps in fp32 and in bf16", ok[0] && ok[1]);
    { /* the reference backend computes in float32: bf16 is refused, not ignored */
        dl_compile_options co = opts;
        co.math = DL_MATH_BF16;
        dl_train_options o;
        dl_train_options_init(&o);
        o.backend = DL_BACKEND_REF;
        o.compile = &co;
        dl_trainer *t = NULL;
        dl_ctx_clear(ctx); /* (the first error stays until cleared) */
        const dl_status s = dl_trainer_new(ctx, g, &o, &t);
        CHECK("the reference trainer refuses math bf16",
              s == DL_ERR_INVALID && !t && strstr(dl_errmsg(ctx), "reference backend"));
        dl_trainer_free(t);
    }
    /* whether the step's products were bfloat16: a forward compiled the same way says */
    int built = 0;
    dl_tensor *in[1] = {xt};
    free_outs(compile_run(ctx, g, DL_MATH_BF16, 1, in, &built), 1);
    if (ok[0] && ok[1]) {
        double worst = 0;
        int differ = 0;
        for (int k = 0; k < STEPS; k++) {
            worst = fmax(worst, fabs(loss[1][k] - loss[0][k]) / fabs(loss[0][k]));
            differ |= loss[1][k] != loss[0][k];
        }
        char what[160];
        snprintf(what, sizeof what, "bf16 losses follow fp32's (worst rel diff %.2g)", worst);
        CHECK(what, worst < 1e-2);
        CHECK("bf16 training lowers the loss", loss[1][STEPS - 1] < 0.8f * loss[1][0]);
        CHECK(built ? "bf16 losses are not fp32's" : "bf16 losses are fp32's (no AVX512-BF16)",
              built ? differ : !differ);
    }
    dl_tensor_free(xt);
    dl_tensor_free(yt);
    dl_graph_free(g);
}

int main(void) {
    if (!test_cache_open(cache_dir, &opts)) return 1;
    dl_ctx *ctx = dl_ctx_new();
    test_products(ctx);
    test_convs(ctx);
    test_conv_grad(ctx);
    test_training(ctx);
    dl_ctx_free(ctx);
    test_cache_remove(cache_dir);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
