/* test_rtconvgrad.c — the backward kernels of convolution and pooling
 * (src/kernels/rt/conv-grad.c) and their codegen, against the reference kernels of the ai.dlcc
 * ops (src/ops/grad-ops.c, themselves checked against the definition by test_grad_ops):
 *   - dlrt_conv_grad_input / _weight, called directly, against ConvGradInput / ConvGradWeight
 *     on the reference interpreter over listed and random geometries: ranks 1-3, strides,
 *     dilations, asymmetric pads, groups (depthwise with and without a channel multiplier), 1x1
 *     with and without the direct GEMM, kernels reaching past the input; canaries after the
 *     result and the workspace (sized by dlrt_conv_grad_workspace, NULL when 0); an empty batch;
 *   - dlrt_maxpool_grad / dlrt_avgpool_grad against MaxPoolGrad / AveragePoolGrad, bit for bit:
 *     ties (constant input, quantized input), NaNs, -0 in dY, ceil_mode, count_include_pad both
 * ways with windows reaching past the end padding, dilations, global max pooling, ranks 1-3;
 *   - batches split over the images in chunks (LeNet's convolutions at batch 64, batch 7 with a
 *     chunk per image and in uneven chunks, 1x1, groups, 1-D, 3-D) and batches that are not (one
 *     image, little work, large images, the workspace cap): the chunk count and the workspace
 *     size the geometry implies, results against the reference; random batched geometries;
 *   - threaded builds (build/tests-isa/): the same results with 1, 2 and 3 threads, bit for bit;
 *   - end to end: graphs of the four ops with a symbolic batch compiled natively (each becomes a
 *     conv-grad / pool-grad kernel, none falls back) against the interpreter at two batch sizes;
 *     and a small conv net trained for three steps natively and on the interpreter (same losses
 *     and weights), whose step program, and its training graph saved as ONNX and compiled
 *     again (symbols renamed on the way), have no fallback for these ops.
 *
 * The kernel sources are included through rt-lib.c (so the Makefile also builds this test per
 * instruction set). */
#include "../../src/kernels/rt-lib.c"
#include "../../src/runtime/program-impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHECK_FAIL_DETAIL() printf(" [%s]", dl_errmsg(ctx))
static dl_ctx *ctx;
#include "check.h"

/* case tables leave trailing flags to their zero defaults */
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

#define CANARY    12345.0f
#define WS_CANARY 0xA5

#include "test-rng.h"

/* n random floats followed by 16 canaries. */
static float *buf_new(int64_t n) {
    float *p = malloc((size_t)(n + 16) * sizeof(float));
    for (int64_t i = 0; i < n; i++) p[i] = frand();
    for (int i = 0; i < 16; i++) p[n + i] = CANARY;
    return p;
}
static bool canary_ok(const float *p, int64_t n) {
    for (int i = 0; i < 16; i++)
        if (p[n + i] != CANARY) return false;
    return true;
}
/* A workspace of bytes plus 64 canary bytes. */
static unsigned char *ws_new(size_t bytes) {
    unsigned char *w = malloc(bytes + 64);
    memset(w, 0x3C, bytes);
    memset(w + bytes, WS_CANARY, 64);
    return w;
}
static bool ws_ok(const unsigned char *w, size_t bytes) {
    for (int i = 0; i < 64; i++)
        if (w[bytes + (size_t)i] != WS_CANARY) return false;
    return true;
}

static int64_t prod(int n, const int64_t *v) {
    int64_t p = 1;
    for (int i = 0; i < n; i++) p *= v[i];
    return p;
}

/* Worst |got - want| / (1 + |want|) is within tol; prints the first miss. */
static bool close_to(const float *got, const float *want, int64_t n, double tol) {
    for (int64_t i = 0; i < n; i++)
        if (!(fabs((double)got[i] - want[i]) <= tol * (1 + fabs((double)want[i])))) {
            printf("  [%lld] got %.9g want %.9g\n", (long long)i, got[i], want[i]);
            return false;
        }
    return true;
}
static bool same_bits(const float *got, const float *want, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], sizeof(float))) {
            printf("  [%lld] got %.9g want %.9g\n", (long long)i, got[i], want[i]);
            return false;
        }
    return true;
}

/* "name=[a,b,c]" of n values (m more from v2 when v2 != NULL), appended to buf. */
static void put_ints(char *buf, size_t len, const char *name, int n, const int64_t *v,
                     const int64_t *v2) {
    size_t at = strlen(buf);
    at += (size_t)snprintf(buf + at, len - at, "%s%s=[", at ? ";" : "", name);
    for (int i = 0; i < (v2 ? 2 * n : n) && at < len; i++)
        at += (size_t)snprintf(buf + at, len - at, "%s%lld", i ? "," : "",
                               (long long)(i < n ? v[i] : v2[i - n]));
    if (at < len) snprintf(buf + at, len - at, "]");
}

/* ---- the reference: one ai.dlcc node on the interpreter ---- */

static dl_tensor *f32_tensor(int rank, const int64_t *dims, const float *v) {
    dl_tensor *t = NULL;
    if (dl_tensor_new(ctx, DL_F32, rank, dims, &t) != DL_OK) return NULL;
    memcpy(t->data, v, sizeof(float) * (size_t)t->numel);
    return t;
}

static dl_value *i64_const(dl_graph *g, int n, const int64_t *v) {
    int64_t d = n;
    dl_tensor *t = NULL;
    if (dl_tensor_new(ctx, DL_I64, 1, &d, &t) != DL_OK) return NULL;
    memcpy(t->data, v, sizeof(int64_t) * (size_t)n);
    return dl_constant(g, NULL, t);
}

/* Adds node op of domain ai.dlcc with attributes "k=v;k=v"; returns its output or NULL. */
static dl_value *grad_node(dl_graph *g, const char *op, int n_in, dl_value *const *in,
                           const char *attrs) {
    char buf[512];
    const char *list[16];
    int na = 0;
    snprintf(buf, sizeof buf, "%s", attrs);
    for (char *t = strtok(buf, ";"); t && na < 16; t = strtok(NULL, ";")) list[na++] = t;
    dl_value *out = NULL;
    if (dl_add_node_ex(g, "ai.dlcc", op, 1, n_in, in, 1, &out, na, list, 0, NULL) != DL_OK)
        return NULL;
    return out;
}

/* Runs op on constant inputs: float tensors in[i] (not taken), or at index shape_at the int64
 * shape of rank values. Returns the output (float32) or NULL. */
static dl_tensor *ref_run(const char *op, const char *attrs, int n_in, dl_tensor *const *in,
                          int shape_at, int rank, const int64_t *shape) {
    dl_graph *g = dl_graph_new(ctx);
    dl_value *v[4] = {0};
    for (int i = 0; i < n_in; i++)
        v[i] = i == shape_at
                   ? i64_const(g, rank, shape)
                   : dl_constant(g, NULL, f32_tensor(in[i]->rank, in[i]->dims, in[i]->data));
    dl_value *out = grad_node(g, op, n_in, v, attrs);
    dl_tensor *res = NULL;
    if (out) dl_output(g, out, "out");
    if (!out || dl_graph_toposort(g) != DL_OK ||
        dl_run(ctx, g, DL_BACKEND_REF, 0, NULL, NULL, &res) != DL_OK) {
        printf("  %s: %s\n", op, dl_errmsg(ctx));
        res = NULL;
    }
    dl_graph_free(g);
    return res;
}

/* ---- convolution ---- */

typedef struct conv_geo {
    int ns;
    int64_t n, c, m, group;
    int64_t in[3], k[3], s[3], dil[3], pb[3], pe[3];
} conv_geo;

/* Output size in dim d (< 1 when the kernel does not fit). */
static int64_t conv_out(const conv_geo *c, int d) {
    int64_t span = c->in[d] + c->pb[d] + c->pe[d] - ((c->k[d] - 1) * c->dil[d] + 1);
    return span < 0 ? 0 : span / c->s[d] + 1;
}

static void conv_rt(const conv_geo *c, dlrt_conv *p) {
    memset(p, 0, sizeof *p);
    p->nsp = c->ns;
    p->n = c->n, p->c_in = c->c, p->c_out = c->m, p->group = c->group;
    for (int d = 0; d < 3; d++) {
        bool in = d < c->ns;
        p->in[d] = in ? c->in[d] : 1, p->out[d] = in ? conv_out(c, d) : 1;
        p->k[d] = in ? c->k[d] : 1, p->stride[d] = in ? c->s[d] : 1;
        p->dil[d] = in ? c->dil[d] : 1, p->pad_begin[d] = in ? c->pb[d] : 0;
    }
}

/* The node attributes of geometry c (kernel_shape too when `kernel`). */
static void conv_attrs(const conv_geo *c, bool kernel, char *buf, size_t len) {
    snprintf(buf, len, "group=%lld", (long long)c->group);
    put_ints(buf, len, "strides", c->ns, c->s, NULL);
    put_ints(buf, len, "dilations", c->ns, c->dil, NULL);
    put_ints(buf, len, "pads", c->ns, c->pb, c->pe);
    if (kernel) put_ints(buf, len, "kernel_shape", c->ns, c->k, NULL);
}

static void conv_dims(const conv_geo *c, int64_t *xd, int64_t *wd, int64_t *yd) {
    xd[0] = c->n, xd[1] = c->c, wd[0] = c->m, wd[1] = c->c / c->group, yd[0] = c->n, yd[1] = c->m;
    for (int d = 0; d < c->ns; d++)
        xd[d + 2] = c->in[d], wd[d + 2] = c->k[d], yd[d + 2] = conv_out(c, d);
}

/* dlrt result into a fresh buffer of n floats + canaries, or NULL on a canary hit. */
typedef enum { RUN_INPUT, RUN_WEIGHT } conv_which;
static float *conv_rt_run(const dlrt_conv *p, conv_which which, const float *a, const float *b,
                          int64_t n, bool *ok) {
    size_t wsb = dlrt_conv_grad_workspace(p);
    unsigned char *ws = ws_new(wsb);
    float *out = buf_new(n);
    for (int64_t i = 0; i < n; i++) out[i] = NAN; /* every element must be written */
    if (which == RUN_INPUT)
        dlrt_conv_grad_input(p, a, b, out, wsb ? ws : NULL);
    else
        dlrt_conv_grad_weight(p, a, b, out, wsb ? ws : NULL);
    *ok = canary_ok(out, n) && ws_ok(ws, wsb);
    if (!*ok) printf("  write past the result or the workspace\n");
    free(ws);
    return out;
}

static void conv_check(const char *name, const conv_geo *c) {
    const int r = c->ns + 2;
    int64_t xd[5], wd[5], yd[5];
    conv_dims(c, xd, wd, yd);
    const int64_t nx = prod(r, xd), nw = prod(r, wd), ny = prod(r, yd);
    float *x = buf_new(nx), *w = buf_new(nw), *dy = buf_new(ny);
    dl_tensor *tx = f32_tensor(r, xd, x), *tw = f32_tensor(r, wd, w), *tdy = f32_tensor(r, yd, dy);
    char at[400], nm[200];
    conv_attrs(c, false, at, sizeof at);
    dl_tensor *gi_in[3] = {tdy, tw, NULL}, *gw_in[2] = {tx, tdy};
    dl_tensor *want_dx = ref_run("ConvGradInput", at, 3, gi_in, 2, r, xd);
    conv_attrs(c, true, at, sizeof at);
    dl_tensor *want_dw = ref_run("ConvGradWeight", at, 2, gw_in, -1, 0, NULL);
    dlrt_conv p;
    conv_rt(c, &p);
    bool ok_x, ok_w;
    float *dx = conv_rt_run(&p, RUN_INPUT, dy, w, nx, &ok_x);
    float *dw = conv_rt_run(&p, RUN_WEIGHT, x, dy, nw, &ok_w);
    snprintf(nm, sizeof nm, "%s: input gradient", name);
    CHECK(nm, want_dx && ok_x && close_to(dx, want_dx->data, nx, 1e-4));
    snprintf(nm, sizeof nm, "%s: weight gradient", name);
    CHECK(nm, want_dw && ok_w && close_to(dw, want_dw->data, nw, 1e-4));
#ifdef DLRT_THREADS
    /* the sums must not depend on the thread count (DLRT_PAR_MIN=1 builds split every loop;
     * batches of small images are split over the images, in a number of chunks that does not
     * depend on it) */
    int threads = dlrt_threads();
    for (int t = 1; t <= 3; t++) {
        dlrt_set_threads(t);
        float *dxt = conv_rt_run(&p, RUN_INPUT, dy, w, nx, &ok_x);
        float *dwt = conv_rt_run(&p, RUN_WEIGHT, x, dy, nw, &ok_w);
        snprintf(nm, sizeof nm, "%s: same bits with %d thread%s", name, t, t > 1 ? "s" : "");
        CHECK(nm, ok_x && ok_w && same_bits(dxt, dx, nx) && same_bits(dwt, dw, nw));
        free(dxt);
        free(dwt);
    }
    dlrt_set_threads(threads);
#endif
    free(dx), free(dw), free(x), free(w), free(dy);
    dl_tensor_free(tx), dl_tensor_free(tw), dl_tensor_free(tdy);
    dl_tensor_free(want_dx), dl_tensor_free(want_dw);
}

static const struct {
    const char *name;
    conv_geo g;
} conv_cases[] = {
    {"3x3 pad 1", {2, 2, 3, 4, 1, {7, 6}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}}},
    {"3x3 stride 2, asymmetric pads",
     {2, 2, 3, 5, 1, {9, 8}, {3, 3}, {2, 2}, {1, 1}, {1, 0}, {2, 1}}},
    {"dilation 2", {2, 1, 2, 3, 1, {9, 9}, {3, 2}, {1, 2}, {2, 2}, {2, 1}, {2, 1}}},
    {"groups 2", {2, 2, 4, 6, 2, {6, 7}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}}},
    {"depthwise", {2, 2, 4, 4, 4, {8, 8}, {3, 3}, {2, 1}, {1, 1}, {1, 1}, {1, 1}}},
    {"depthwise x2 multiplier", {2, 1, 3, 6, 3, {7, 5}, {3, 3}, {1, 1}, {1, 1}, {0, 1}, {1, 0}}},
    {"1x1 direct GEMM", {2, 3, 5, 7, 1, {4, 6}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, {0, 0}}},
    {"1x1 groups 3", {2, 2, 6, 3, 3, {5, 5}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, {0, 0}}},
    {"1x1 stride 2", {2, 2, 4, 3, 1, {7, 6}, {1, 1}, {2, 2}, {1, 1}, {0, 0}, {0, 0}}},
    {"1x1 padded", {2, 1, 2, 3, 1, {4, 4}, {1, 1}, {1, 1}, {1, 1}, {1, 0}, {0, 1}}},
    {"kernel past the input", {2, 2, 2, 3, 1, {3, 4}, {5, 5}, {1, 2}, {1, 1}, {2, 2}, {2, 3}}},
    {"stride past the kernel", {2, 1, 2, 2, 1, {11, 10}, {2, 2}, {4, 3}, {1, 1}, {0, 0}, {0, 0}}},
    {"1-D", {1, 2, 3, 2, 1, {11}, {3}, {2}, {2}, {1}, {2}}},
    {"1-D groups", {1, 3, 4, 4, 2, {9}, {4}, {1}, {1}, {2}, {1}}},
    {"3-D", {3, 2, 2, 3, 1, {4, 5, 4}, {2, 3, 2}, {1, 2, 1}, {1, 1, 2}, {1, 0, 0}, {0, 1, 1}}},
    {"LeNet conv2", {2, 4, 6, 16, 1, {12, 12}, {5, 5}, {1, 1}, {1, 1}, {0, 0}, {0, 0}}},
    {"wide 1-D", {1, 1, 2, 2, 1, {300}, {40}, {3}, {1}, {5}, {7}}},
};

/* Batches whose images are small enough to be split over threads in chunks (conv-grad.c's
 * dlrt_grad_plan_of, visible here through rt-lib.c), with the chunk count expected from the
 * geometry, and some that are not:
 * each is checked like the cases above (reference, 1-3 threads), and its workspace against
 * the formula chunks * columns + (chunks - 1) * partial dW, both rounded to 16 floats when
 * there are several chunks (no columns for the direct 1x1 GEMM). */
static const struct {
    const char *name;
    conv_geo g;
    int64_t chunks;
} batch_cases[] = {
    {"LeNet conv1 batch 64",
     {2, 64, 1, 6, 1, {28, 28}, {5, 5}, {1, 1}, {1, 1}, {2, 2}, {2, 2}},
     16},
    {"LeNet conv2 batch 64",
     {2, 64, 6, 16, 1, {14, 14}, {5, 5}, {1, 1}, {1, 1}, {0, 0}, {0, 0}},
     16},
    {"LeNet conv1 batch 1", {2, 1, 1, 6, 1, {28, 28}, {5, 5}, {1, 1}, {1, 1}, {2, 2}, {2, 2}}, 1},
    {"batch 7, groups 2, stride 2, asymmetric pads (a chunk per image)",
     {2, 7, 8, 12, 2, {64, 63}, {3, 3}, {2, 2}, {1, 1}, {1, 0}, {0, 1}},
     7},
    {"batch 7 in 4 uneven chunks",
     {2, 7, 4, 8, 1, {25, 25}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}},
     4},
    {"1x1 direct GEMM batch 64",
     {2, 64, 16, 32, 1, {14, 14}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, {0, 0}},
     16},
    {"1x1 stride 2 groups 4 batch 64",
     {2, 64, 16, 16, 4, {28, 28}, {1, 1}, {2, 2}, {1, 1}, {0, 0}, {0, 0}},
     3},
    {"depthwise batch 32", {2, 32, 8, 8, 8, {32, 32}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}}, 9},
    {"dilated 1-D batch 64", {1, 64, 3, 5, 1, {200}, {5}, {1}, {2}, {4}, {4}}, 3},
    {"3-D batch 9",
     {3, 9, 2, 4, 1, {10, 10, 10}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}},
     7},
    {"too little work for two chunks",
     {2, 64, 2, 2, 1, {8, 8}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}},
     1},
    {"one image's GEMM splits itself: images serial",
     {2, 3, 16, 32, 1, {20, 20}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}},
     1},
    {"4 MB of columns per chunk: chunks cut to the workspace cap",
     {2, 8, 1, 1, 1, {200, 200}, {5, 5}, {1, 1}, {1, 1}, {2, 2}, {2, 2}},
     4},
};

static int64_t round16(int64_t n) {
    return (n + 15) / 16 * 16;
}

/* Stride-1 convolutions whose input gradient runs as a forward convolution of dY with the
 * flipped filters (conv-grad.c's dlrt_grad_input_as_conv), and some just outside where it is
 * taken: each checked like the cases above, and whether it takes that path. */
static const struct {
    const char *name;
    conv_geo g;
    bool as_conv;
} as_conv_cases[] = {
    {"32 channels 3x3 pad 1", {2, 2, 32, 5, 1, {6, 7}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}}, 1},
    {"64 channels 3x3 pad 1 batch 3 (Winograd for the forward)",
     {2, 3, 64, 64, 1, {14, 14}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}},
     1},
    {"asymmetric pads, dilation 2",
     {2, 2, 33, 4, 1, {9, 8}, {3, 2}, {1, 1}, {2, 3}, {0, 3}, {4, 0}},
     1},
    {"unpadded 3x3 on 20x20 (in / out = 1.23)",
     {2, 1, 32, 3, 1, {20, 20}, {3, 3}, {1, 1}, {1, 1}, {0, 0}, {0, 0}},
     1},
    {"1-D k 4", {1, 3, 40, 6, 1, {17}, {4}, {1}, {1}, {1}, {2}}, 1},
    {"3-D", {3, 2, 32, 3, 1, {5, 4, 6}, {3, 2, 3}, {1, 1, 1}, {1, 1, 1}, {1, 0, 2}, {1, 1, 0}}, 1},
    {"depthwise 5x5 pad 2", {2, 3, 6, 6, 6, {9, 10}, {5, 5}, {1, 1}, {1, 1}, {2, 2}, {2, 2}}, 1},
    {"depthwise 3x3 pad 1 batch 4",
     {2, 4, 16, 16, 16, {12, 12}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}},
     1},
    {"unpadded 3x3 on 10x10 (in / out = 1.56)",
     {2, 2, 32, 4, 1, {10, 10}, {3, 3}, {1, 1}, {1, 1}, {0, 0}, {0, 0}},
     0},
    {"pad past the kernel's span",
     {2, 2, 32, 4, 1, {6, 6}, {2, 2}, {1, 1}, {1, 1}, {2, 1}, {1, 2}},
     0},
    {"128 channels on 4x4 at batch 8 (as many positions as channels)",
     {2, 8, 128, 16, 1, {4, 4}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}},
     1},
    {"128 channels on 4x4 at batch 7 (fewer positions than channels)",
     {2, 7, 128, 16, 1, {4, 4}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}},
     0},
    {"stride 2", {2, 2, 32, 4, 1, {9, 9}, {3, 3}, {2, 1}, {1, 1}, {1, 1}, {1, 1}}, 0},
    {"31 input channels", {2, 2, 31, 8, 1, {6, 7}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}}, 0},
    {"groups 2", {2, 2, 64, 64, 2, {6, 7}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}}, 0},
    {"depthwise x2 multiplier",
     {2, 2, 8, 16, 8, {7, 7}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}},
     0},
    /* col2im by input row sums up to 32 column rows at a time: 36 taps cover some rows */
    {"36 x 2 kernel, 3 channels",
     {2, 2, 3, 4, 1, {80, 5}, {36, 2}, {1, 1}, {1, 1}, {2, 0}, {1, 1}},
     0},
    {"3-D 4x3x3 kernel, dilated",
     {3, 1, 2, 3, 1, {7, 6, 9}, {4, 3, 3}, {1, 1, 1}, {1, 2, 1}, {2, 1, 0}, {1, 2, 0}},
     0},
};

/* Whether geometry c at batch n has its input gradient run as a forward convolution. */
static bool runs_as_conv(const conv_geo *c, int64_t n) {
    conv_geo b = *c;
    b.n = n;
    dlrt_conv p, t;
    conv_rt(&b, &p);
    return dlrt_grad_input_as_conv(&p, &t) != 0;
}

static void as_conv_check(const char *name, const conv_geo *c, bool want) {
    char nm[200];
    snprintf(nm, sizeof nm, "%s: input gradient %s a forward convolution", name,
             want ? "runs as" : "does not run as");
    CHECK(nm, runs_as_conv(c, c->n) == want);
    conv_check(name, c);
}

static void batch_check(const char *name, const conv_geo *c, int64_t chunks) {
    dlrt_conv p;
    conv_rt(c, &p);
    const int64_t out_sp = prod(3, p.out), kdim = c->c / c->group * prod(3, p.k);
    const bool direct = prod(c->ns, c->k) == 1 && prod(c->ns, c->s) == 1 &&
                        c->pb[0] + c->pb[1] + c->pb[2] + c->pe[0] + c->pe[1] + c->pe[2] == 0;
    const int64_t cols = direct ? 0 : chunks > 1 ? round16(kdim * out_sp) : kdim * out_sp;
    size_t ws = (size_t)(chunks * cols + (chunks - 1) * round16(c->m * kdim)) * sizeof(float);
    dlrt_conv t; /* the input gradient as a forward convolution: its flipped weights, its scratch */
    if (dlrt_grad_input_as_conv(&p, &t)) {
        const size_t as_conv =
            (size_t)round16(c->m * kdim) * sizeof(float) + dlrt_conv_workspace(&t);
        ws = ws > as_conv ? ws : as_conv;
    }
    char nm[200];
    snprintf(nm, sizeof nm, "%s: %lld chunk%s, %zu workspace bytes", name, (long long)chunks,
             chunks > 1 ? "s" : "", ws);
    const dlrt_grad_plan pl = dlrt_grad_plan_of(&p);
    CHECK(nm, pl.chunks == chunks && dlrt_conv_grad_workspace(&p) == ws &&
                  (chunks == 1 || ws <= DLRT_CONV_CHUNK_WS_MAX));
    conv_check(name, c);
}

/* Weight gradients computed directly (conv-grad.c's dlrt_grad_weight_direct: one group, stride
 * and dilation 1, 3 or 5 tap columns, at most 32 GEMM columns, rows at least a vector wide on
 * every build) and some that stay GEMMs, each checked like the cases above. */
static const struct {
    const char *name;
    conv_geo g;
    bool direct;
} dw_direct_cases[] = {
    {"LeNet conv1 unpadded, batch 5 (24-wide rows: a masked overlapping tail on 16 lanes)",
     {2, 5, 1, 6, 1, {28, 28}, {5, 5}, {1, 1}, {1, 1}, {0, 0}, {0, 0}},
     true},
    {"3x3 pad 1, 2 -> 7 channels (uneven blocks, zero-padded rows, skipped rows)",
     {2, 3, 2, 7, 1, {20, 18}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}},
     true},
    {"5x5 padded in H only, 16-wide rows",
     {2, 2, 1, 5, 1, {17, 20}, {5, 5}, {1, 1}, {1, 1}, {2, 0}, {1, 0}},
     true},
    {"1-D, 3 taps, 3 -> 9 channels", {1, 4, 3, 9, 1, {40}, {3}, {1}, {1}, {1}, {2}}, true},
    {"4 input channels 3x3: 36 columns, GEMM",
     {2, 2, 4, 4, 1, {20, 20}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}},
     false},
    {"stride 2: GEMM", {2, 2, 1, 4, 1, {40, 40}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}}, false},
    {"4 tap columns: GEMM",
     {2, 2, 1, 4, 1, {30, 30}, {4, 4}, {1, 1}, {1, 1}, {0, 0}, {0, 0}},
     false},
    {"3-D with one tap in depth: GEMM",
     {3, 2, 1, 3, 1, {3, 6, 20}, {1, 3, 3}, {1, 1, 1}, {1, 1, 1}, {0, 1, 1}, {0, 1, 1}},
     false},
    {"3-wide output rows: GEMM",
     {2, 2, 1, 4, 1, {6, 5}, {3, 3}, {1, 1}, {1, 1}, {1, 0}, {1, 0}},
     false},
};

static void dw_direct_check(const char *name, const conv_geo *c, bool want) {
    dlrt_conv p;
    dlrt_win3 g;
    conv_rt(c, &p);
    dlrt_conv_geom(&p, &g);
    char nm[200];
    snprintf(nm, sizeof nm, "%s: weight gradient %s", name, want ? "direct" : "as GEMMs");
    CHECK(nm, dlrt_grad_weight_direct(&p, &g) == want);
    conv_check(name, c);
}

/* An infinite input read by the lanes that the last vector of a direct weight gradient's row
 * repeats (18 outputs: lanes 2-15 of the second of two 16-lane vectors, 10-15 of the third
 * 8-lane one): dW is +inf where the reference has it, not a NaN from those lanes' 0 * inf. */
static void dw_direct_inf(void) {
    const conv_geo c = {1, 1, 1, 2, 1, {22}, {5}, {1}, {1}, {0}, {0}};
    dlrt_conv p;
    dlrt_win3 g;
    conv_rt(&c, &p);
    dlrt_conv_geom(&p, &g);
    int64_t xd[3], wd[3], yd[3];
    conv_dims(&c, xd, wd, yd);
    float *x = buf_new(22), *dy = buf_new(36);
    for (int i = 0; i < 22; i++) x[i] = fabsf(x[i]) + 0.5f;
    for (int i = 0; i < 36; i++) dy[i] = fabsf(dy[i]) + 0.5f;
    x[12] = INFINITY;
    dl_tensor *tx = f32_tensor(3, xd, x), *tdy = f32_tensor(3, yd, dy);
    dl_tensor *in[2] = {tx, tdy};
    char at[400];
    conv_attrs(&c, true, at, sizeof at);
    dl_tensor *want = ref_run("ConvGradWeight", at, 2, in, -1, 0, NULL);
    bool ok;
    float *dw = conv_rt_run(&p, RUN_WEIGHT, x, dy, 10, &ok);
    int infs = 0;
    for (int i = 0; ok && want && i < 10; i++) {
        const float w = ((const float *)want->data)[i];
        infs += isinf(w);
        ok = isinf(w) ? dw[i] == w : fabsf(dw[i] - w) <= 1e-4f * (1 + fabsf(w));
        if (!ok) printf("  [%d] got %.9g want %.9g\n", i, dw[i], w);
    }
    CHECK("direct weight gradient: an infinite input in the repeated lanes stays infinite",
          dlrt_grad_weight_direct(&p, &g) && want && ok && infs == 10);
    free(x), free(dy), free(dw);
    dl_tensor_free(tx), dl_tensor_free(tdy), dl_tensor_free(want);
}

/* Random geometries: any rank, strides, dilations, pads, groups. `batched`: batches of 2-40
 * larger images, drawn again until the backward splits them in chunks. */
static void random_conv_cases(int count, bool batched) {
    for (int t = 0; t < count; t++) {
        conv_geo c;
        memset(&c, 0, sizeof c);
        c.ns = (int)irand(1, 3);
        c.group = irand(1, 3);
        c.c = c.group * irand(1, batched ? 6 : 3);
        c.m = c.group * irand(1, batched ? 6 : 3);
        c.n = batched ? irand(2, 40) : irand(1, 3);
        bool fits = true;
        for (int d = 0; d < c.ns; d++) {
            const int64_t lo[3] = {100, 16, 6}, hi[3] = {400, 40, 12};
            c.in[d] = batched ? irand(lo[c.ns - 1], hi[c.ns - 1]) : irand(1, c.ns == 3 ? 6 : 11);
            c.k[d] = irand(1, 4);
            c.s[d] = irand(1, 3);
            c.dil[d] = irand(1, 2);
            c.pb[d] = irand(0, 2);
            c.pe[d] = irand(0, 2);
            fits = fits && c.in[d] + c.pb[d] + c.pe[d] >= (c.k[d] - 1) * c.dil[d] + 1;
        }
        dlrt_conv p;
        conv_rt(&c, &p);
        if (!fits || (batched && dlrt_grad_plan_of(&p).chunks < 2)) {
            t--;
            continue;
        }
        char nm[80];
        snprintf(nm, sizeof nm, "random %sconv %d (rank %d, group %lld, batch %lld)",
                 batched ? "batched " : "", t, c.ns, (long long)c.group, (long long)c.n);
        conv_check(nm, &c);
    }
}

/* An empty batch: no input gradient is written, the weight gradient is 0. */
static void conv_empty_batch(void) {
    conv_geo c = {2, 0, 2, 3, 1, {5, 5}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}};
    dlrt_conv p;
    conv_rt(&c, &p);
    float dx[4] = {1, 2, 3, 4}, dw[54];
    for (int i = 0; i < 54; i++) dw[i] = NAN;
    unsigned char *ws = ws_new(dlrt_conv_grad_workspace(&p));
    dlrt_conv_grad_input(&p, dx, dw, dx, ws);
    dlrt_conv_grad_weight(&p, dx, dx, dw, ws);
    bool zero = true;
    for (int i = 0; i < 54; i++) zero = zero && dw[i] == 0.0f;
    CHECK("empty batch: weight gradient 0, input gradient untouched", zero && dx[0] == 1.0f);
    free(ws);
    /* no channels and no groups (not a valid layer): sized as nothing, no division by 0 */
    p.c_in = p.c_out = p.group = 0;
    CHECK("no channels, no groups: no workspace", dlrt_conv_grad_workspace(&p) == 0);
}

/* ---- pooling ---- */

typedef struct pool_geo {
    int ns;
    int64_t n, c;
    int64_t in[3], k[3], s[3], dil[3], pb[3], pe[3];
    int max, ceil_mode, include_pad, global;
    int values; /* 0 random, 1 constant (every window ties), 2 quantized with NaNs */
} pool_geo;

/* Output size in dim d, as ONNX pools it (ceil_mode: the last window starts inside the input
 * or the leading pad). */
static int64_t pool_out(const pool_geo *p, int d) {
    if (p->global) return 1;
    int64_t span = p->in[d] + p->pb[d] + p->pe[d] - ((p->k[d] - 1) * p->dil[d] + 1);
    if (!p->ceil_mode) return span / p->s[d] + 1;
    int64_t o = (span + p->s[d] - 1) / p->s[d] + 1;
    return (o - 1) * p->s[d] >= p->in[d] + p->pb[d] ? o - 1 : o;
}

static void pool_rt(const pool_geo *g, dlrt_pool *p) {
    memset(p, 0, sizeof *p);
    p->nsp = g->ns, p->kind = g->max ? 0 : 1, p->count_include_pad = g->include_pad;
    p->n = g->n, p->c = g->c;
    for (int d = 0; d < 3; d++) {
        bool in = d < g->ns;
        p->in[d] = in ? g->in[d] : 1, p->out[d] = in ? pool_out(g, d) : 1;
        p->k[d] = !in ? 1 : g->global ? g->in[d] : g->k[d];
        p->stride[d] = in && !g->global ? g->s[d] : 1, p->dil[d] = in && !g->global ? g->dil[d] : 1;
        p->pad_begin[d] = in && !g->global ? g->pb[d] : 0;
        p->pad_end[d] = in && !g->global ? g->pe[d] : 0;
    }
}

static void pool_attrs(const pool_geo *p, char *buf, size_t len) {
    if (p->global) {
        snprintf(buf, len, "global=1");
        return;
    }
    snprintf(buf, len, "ceil_mode=%d", p->ceil_mode);
    if (!p->max)
        snprintf(buf + strlen(buf), len - strlen(buf), ";count_include_pad=%d", p->include_pad);
    put_ints(buf, len, "kernel_shape", p->ns, p->k, NULL);
    put_ints(buf, len, "strides", p->ns, p->s, NULL);
    put_ints(buf, len, "dilations", p->ns, p->dil, NULL);
    put_ints(buf, len, "pads", p->ns, p->pb, p->pe);
}

static void pool_check(const char *name, const pool_geo *g) {
    const int r = g->ns + 2;
    int64_t xd[5] = {g->n, g->c}, yd[5] = {g->n, g->c};
    for (int d = 0; d < g->ns; d++) xd[d + 2] = g->in[d], yd[d + 2] = pool_out(g, d);
    const int64_t nx = prod(r, xd), ny = prod(r, yd);
    float *x = buf_new(nx), *dy = buf_new(ny);
    for (int64_t i = 0; i < nx && g->values; i++)
        x[i] = g->values == 1 ? 0.5f : i % 7 == 3 ? NAN : roundf(x[i] * 2) / 2;
    /* negative zeros in dY: a maximum's dX is 0 + dY, +0 */
    for (int64_t i = 0; i < ny && g->values == 2; i++)
        if (i % 5 == 1) dy[i] = -0.0f;
    dl_tensor *tx = f32_tensor(r, xd, x), *tdy = f32_tensor(r, yd, dy);
    char at[400];
    pool_attrs(g, at, sizeof at);
    dl_tensor *mp_in[2] = {tx, tdy}, *ap_in[2] = {tdy, NULL};
    dl_tensor *want = g->max ? ref_run("MaxPoolGrad", at, 2, mp_in, -1, 0, NULL)
                             : ref_run("AveragePoolGrad", at, 2, ap_in, 1, r, xd);
    dlrt_pool p;
    pool_rt(g, &p);
    float *dx = buf_new(nx);
    for (int64_t i = 0; i < nx; i++) dx[i] = NAN;
    if (g->max)
        dlrt_maxpool_grad(&p, x, dy, dx);
    else
        dlrt_avgpool_grad(&p, dy, dx);
    CHECK(name, want && canary_ok(dx, nx) && same_bits(dx, want->data, nx));
#ifdef DLRT_THREADS
    int threads = dlrt_threads();
    dlrt_set_threads(3);
    float *dx3 = buf_new(nx);
    if (g->max)
        dlrt_maxpool_grad(&p, x, dy, dx3);
    else
        dlrt_avgpool_grad(&p, dy, dx3);
    dlrt_set_threads(threads);
    char nm[200];
    snprintf(nm, sizeof nm, "%s: same bits with 3 threads", name);
    CHECK(nm, canary_ok(dx3, nx) && same_bits(dx3, dx, nx));
    free(dx3);
#endif
    free(x), free(dy), free(dx);
    dl_tensor_free(tx), dl_tensor_free(tdy), dl_tensor_free(want);
}

static const struct {
    const char *name;
    pool_geo g;
} pool_cases[] = {
    {"max 2x2 stride 2", {2, 2, 3, {8, 6}, {2, 2}, {2, 2}, {1, 1}, {0, 0}, {0, 0}, 1}},
    {"max 3x3 stride 2 pad 1", {2, 2, 2, {7, 8}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}, 1}},
    /* 2x2 stride 2 (the vectorized rows of windows inside the input): ties, NaNs, odd sizes,
     * pads and a partial last window around them, rows long enough for whole vectors */
    {"max 2x2 stride 2, ties",
     {2, 2, 3, {24, 24}, {2, 2}, {2, 2}, {1, 1}, {0, 0}, {0, 0}, 1, 0, 0, 0, 1}},
    {"max 2x2 stride 2, quantized ties and NaNs, odd sizes",
     {2, 2, 3, {13, 37}, {2, 2}, {2, 2}, {1, 1}, {0, 0}, {0, 0}, 1, 0, 0, 0, 2}},
    /* unpadded (their own path): rows of 4 windows (LeNet's 8x8), 5 (a step of 4 overlapping
     * the one before), 1 to 3 (one at a time); a 3-D pool with one depth tap */
    {"max 2x2 stride 2 on 8x8, NaNs",
     {2, 2, 3, {8, 8}, {2, 2}, {2, 2}, {1, 1}, {0, 0}, {0, 0}, 1, 0, 0, 0, 2}},
    {"max 2x2 stride 2 on 11x10, NaNs",
     {2, 2, 3, {11, 10}, {2, 2}, {2, 2}, {1, 1}, {0, 0}, {0, 0}, 1, 0, 0, 0, 2}},
    {"max 2x2 stride 2 on 6x5, ties",
     {2, 1, 2, {6, 5}, {2, 2}, {2, 2}, {1, 1}, {0, 0}, {0, 0}, 1, 0, 0, 0, 1}},
    {"max 3-D 1x2x2 stride 1x2x2 unpadded",
     {3, 1, 2, {3, 6, 20}, {1, 2, 2}, {1, 2, 2}, {1, 1, 1}, {0, 0, 0}, {0, 0, 0}, 1, 0, 0, 0, 2}},
    {"max 2x2 stride 2 pad 1, ceil_mode",
     {2, 2, 2, {9, 35}, {2, 2}, {2, 2}, {1, 1}, {1, 1}, {1, 0}, 1, 1, 0, 0, 2}},
    {"max 3-D 1x2x2 stride 1x2x2",
     {3, 1, 2, {3, 6, 20}, {1, 2, 2}, {1, 2, 2}, {1, 1, 1}, {0, 1, 0}, {0, 0, 1}, 1, 0, 0, 0, 2}},
    {"max overlapping windows, ties",
     {2, 1, 2, {6, 6}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, 1, 0, 0, 0, 1}},
    {"max quantized ties and NaNs",
     {2, 2, 2, {9, 7}, {3, 2}, {2, 1}, {1, 1}, {1, 0}, {1, 1}, 1, 0, 0, 0, 2}},
    {"max dilated", {2, 1, 3, {9, 9}, {2, 3}, {1, 2}, {2, 2}, {0, 1}, {1, 0}, 1}},
    {"max ceil_mode", {2, 2, 2, {6, 7}, {3, 3}, {2, 2}, {1, 1}, {0, 0}, {0, 0}, 1, 1}},
    {"max 1-D", {1, 2, 3, {11}, {3}, {2}, {1}, {1}, {1}, 1, 0, 0, 0, 2}},
    {"max 3-D", {3, 1, 2, {4, 5, 6}, {2, 2, 3}, {2, 1, 2}, {1, 1, 1}, {0, 1, 1}, {1, 0, 1}, 1}},
    {"global max, ties and NaNs",
     {2, 2, 3, {5, 4}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, {0, 0}, 1, 0, 0, 1, 2}},
    {"global max 3-D", {3, 1, 2, {2, 3, 4}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {0}, {0}, 1, 0, 0, 1}},
    {"avg 2x2 stride 2", {2, 2, 3, {8, 6}, {2, 2}, {2, 2}, {1, 1}, {0, 0}, {0, 0}, 0}},
    {"avg 3x3 pad 1", {2, 2, 2, {7, 6}, {3, 3}, {2, 1}, {1, 1}, {1, 1}, {1, 1}, 0}},
    {"avg 3x3 pad 1 count_include_pad",
     {2, 2, 2, {7, 6}, {3, 3}, {2, 1}, {1, 1}, {1, 1}, {1, 1}, 0, 0, 1}},
    {"avg ceil_mode past the end pad",
     {2, 1, 2, {6, 7}, {3, 3}, {2, 2}, {1, 1}, {1, 0}, {1, 0}, 0, 1, 1}},
    {"avg ceil_mode, pads excluded",
     {2, 1, 2, {6, 7}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {0, 1}, 0, 1, 0}},
    {"avg dilated", {2, 1, 2, {9, 8}, {2, 3}, {2, 1}, {2, 2}, {1, 0}, {0, 1}, 0, 0, 1}},
    {"avg 1-D", {1, 2, 3, {10}, {4}, {3}, {1}, {2}, {1}, 0, 1, 1}},
    {"avg 3-D",
     {3, 1, 2, {4, 5, 4}, {2, 3, 2}, {2, 1, 2}, {1, 1, 1}, {1, 1, 0}, {0, 1, 1}, 0, 0, 1}},
};

/* ---- end to end: the ops compiled natively ---- */

/* Groups of p of kind k, and fallback groups running an ai.dlcc op. */
static int count_kind(const dl_program *p, dl_gkind k) {
    int n = 0;
    for (int gi = 0; gi < p->fusion->n; gi++) n += p->fusion->groups[gi].kind == k;
    return n;
}
static int grad_fallbacks(const dl_program *p) {
    int n = 0;
    for (int gi = 0; gi < p->fusion->n; gi++) {
        const dl_group *gr = &p->fusion->groups[gi];
        const char *dom = gr->nodes[0]->op->domain;
        n += gr->kind == DL_G_FALLBACK && dom && !strcmp(dom, "ai.dlcc");
    }
    return n;
}

/* Runs the compiled program and the interpreter on random inputs of dims[i], the first dim
 * being `batch` for those in the mask `batched`; true when every output agrees. */
static bool native_matches(dl_graph *g, dl_program *p, int n_in, int *ranks, int64_t (*dims)[5],
                           unsigned batched, int64_t batch) {
    dl_tensor *in[4] = {0}, *want[4] = {0}, *got[4] = {0};
    int n_out = dl_graph_num_outputs(g);
    for (int i = 0; i < n_in; i++) {
        if (batched >> i & 1) dims[i][0] = batch;
        int64_t n = prod(ranks[i], dims[i]);
        float *v = buf_new(n);
        in[i] = f32_tensor(ranks[i], dims[i], v);
        free(v);
    }
    bool ok = dl_run(ctx, g, DL_BACKEND_REF, n_in, NULL, in, want) == DL_OK &&
              dl_program_run(ctx, p, n_in, NULL, in, got) == DL_OK;
    for (int o = 0; ok && o < n_out; o++)
        ok = got[o]->numel == want[o]->numel &&
             close_to(got[o]->data, want[o]->data, want[o]->numel, 1e-4);
    for (int i = 0; i < 4; i++)
        dl_tensor_free(in[i]), dl_tensor_free(want[i]), dl_tensor_free(got[i]);
    return ok;
}

/* Compiles g (built when `built`, frees it), whose two outputs must come from two kernels of
 * kind k and no fallback for the ai.dlcc ops; then compiled = interpreter at batch 1 and 3. Its
 * three inputs have rank r and dims[i] (those in the mask `batched` take the batch). */
static void check_compiled(const char *name, dl_graph *g, bool built, dl_gkind k, int r,
                           int64_t (*dims)[5], unsigned batched) {
    dl_program *p = NULL;
    char nm[200];
    snprintf(nm, sizeof nm, "%s: compiles", name);
    CHECK(nm, built && dl_graph_toposort(g) == DL_OK && dl_compile(ctx, g, NULL, &p) == DL_OK);
    if (p) {
        snprintf(nm, sizeof nm, "%s: two %s kernels, no fallback", name, dl_gkind_name(k));
        CHECK(nm, count_kind(p, k) == 2 && grad_fallbacks(p) == 0);
        int ranks[3] = {r, r, r};
        for (int64_t b = 1; b <= 3; b += 2) {
            snprintf(nm, sizeof nm, "%s: native = interpreter at batch %lld", name, (long long)b);
            CHECK(nm, native_matches(g, p, 3, ranks, dims, batched, b));
        }
    }
    dl_program_free(p);
    dl_graph_free(g);
}

/* ConvGradInput(dY, W, Shape(X)) and ConvGradWeight(X, dY) with batch N, compiled. auto_pad
 * (may be NULL) replaces the pads; out[] then gives dY's spatial dims. */
static void native_conv(const char *name, const conv_geo *c, const char *auto_pad,
                        const int64_t *out) {
    const int r = c->ns + 2;
    const char *sym[5] = {"N"};
    int64_t dims[3][5], wd[5];
    conv_dims(c, dims[0], wd, dims[2]);
    memcpy(dims[1], wd, sizeof wd);
    for (int d = 0; out && d < c->ns; d++) dims[2][d + 2] = out[d];
    dims[0][0] = dims[2][0] = -1;
    dl_graph *g = dl_graph_new(ctx);
    dl_value *x = dl_input(g, "x", DL_F32, r, dims[0], sym);
    dl_value *w = dl_input(g, "w", DL_F32, r, dims[1], NULL);
    dl_value *dy = dl_input(g, "dy", DL_F32, r, dims[2], sym);
    char at[400];
    conv_attrs(c, false, at, sizeof at);
    if (auto_pad) {
        snprintf(at, sizeof at, "group=%lld;auto_pad=%s", (long long)c->group, auto_pad);
        put_ints(at, sizeof at, "strides", c->ns, c->s, NULL);
        put_ints(at, sizeof at, "dilations", c->ns, c->dil, NULL);
    }
    dl_value *gi_in[3] = {dy, w, dl_op1(g, "Shape", x, NULL)}, *gw_in[2] = {x, dy};
    dl_value *dx = grad_node(g, "ConvGradInput", 3, gi_in, at);
    put_ints(at, sizeof at, "kernel_shape", c->ns, c->k, NULL);
    dl_value *dw = grad_node(g, "ConvGradWeight", 2, gw_in, at);
    if (dx) dl_output(g, dx, "dx");
    if (dw) dl_output(g, dw, "dw");
    check_compiled(name, g, dx && dw, DL_G_CONV_GRAD, r, dims, 5u);
}

/* MaxPoolGrad(X, dY) and AveragePoolGrad(dY2, Shape(X)) with batch N, compiled. */
static void native_pool(const char *name, const pool_geo *mp, const pool_geo *ap) {
    const int r = mp->ns + 2;
    const char *sym[5] = {"N"};
    int64_t dims[3][5];
    dims[0][1] = dims[1][1] = dims[2][1] = mp->c;
    for (int d = 0; d < mp->ns; d++)
        dims[0][d + 2] = mp->in[d], dims[1][d + 2] = pool_out(mp, d),
                    dims[2][d + 2] = pool_out(ap, d);
    dims[0][0] = dims[1][0] = dims[2][0] = -1;
    dl_graph *g = dl_graph_new(ctx);
    dl_value *x = dl_input(g, "x", DL_F32, r, dims[0], sym);
    dl_value *dy = dl_input(g, "dy", DL_F32, r, dims[1], sym);
    dl_value *dy2 = dl_input(g, "dy2", DL_F32, r, dims[2], sym);
    char at[400];
    pool_attrs(mp, at, sizeof at);
    dl_value *mp_in[2] = {x, dy}, *ap_in[2] = {dy2, dl_op1(g, "Shape", x, NULL)};
    dl_value *dx1 = grad_node(g, "MaxPoolGrad", 2, mp_in, at);
    pool_attrs(ap, at, sizeof at);
    dl_value *dx2 = grad_node(g, "AveragePoolGrad", 2, ap_in, at);
    if (dx1) dl_output(g, dx1, "dx1");
    if (dx2) dl_output(g, dx2, "dx2");
    check_compiled(name, g, dx1 && dx2, DL_G_POOL_GRAD, r, dims, 7u);
}

static void native_cases(void) {
    conv_geo c1 = {2, 0, 4, 6, 2, {9, 8}, {3, 3}, {2, 1}, {1, 2}, {1, 0}, {2, 1}};
    native_conv("native conv, groups, strides, dilations", &c1, NULL, NULL);
    conv_geo c2 = {2, 0, 5, 3, 1, {6, 6}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, {0, 0}};
    native_conv("native conv 1x1", &c2, NULL, NULL);
    conv_geo c3 = {1, 0, 3, 4, 1, {13}, {4}, {3}, {1}, {0}, {0}};
    const int64_t c3_out[1] = {5}; /* SAME_UPPER: ceil(13 / 3) */
    native_conv("native conv 1-D SAME_UPPER", &c3, "SAME_UPPER", c3_out);
    conv_geo c4 = {3, 0, 2, 2, 1, {4, 5, 3}, {2, 3, 2}, {1, 2, 1}, {1, 1, 1}, {1, 0, 0}, {0, 1, 1}};
    native_conv("native conv 3-D", &c4, NULL, NULL);
    /* input gradients run as forward convolutions (their workspace sized by the host) at the
     * batches check_compiled runs, 1 and 3 */
    conv_geo c5 = {2, 0, 32, 8, 1, {7, 6}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}};
    conv_geo c6 = {2, 0, 8, 8, 8, {9, 7}, {5, 3}, {1, 1}, {1, 2}, {2, 2}, {2, 2}};
    CHECK("native conv 32 channels and depthwise: input gradients as forward convolutions",
          runs_as_conv(&c5, 1) && runs_as_conv(&c5, 3) && runs_as_conv(&c6, 1) &&
              runs_as_conv(&c6, 3));
    native_conv("native conv 32 channels 3x3 pad 1", &c5, NULL, NULL);
    native_conv("native conv depthwise, dilated", &c6, NULL, NULL);
    pool_geo m1 = {2, 0, 3, {7, 8}, {3, 3}, {2, 2}, {1, 1}, {1, 0}, {1, 1}, 1, 1};
    pool_geo a1 = {2, 0, 3, {7, 8}, {3, 2}, {2, 2}, {1, 2}, {1, 1}, {0, 1}, 0, 1, 1};
    native_pool("native pools, ceil_mode, count_include_pad", &m1, &a1);
    pool_geo m2 = {1, 0, 2, {9}, {1}, {1}, {1}, {0}, {0}, 1, 0, 0, 1};
    pool_geo a2 = {1, 0, 2, {9}, {3}, {2}, {1}, {1}, {1}, 0};
    native_pool("native pools 1-D, global max", &m2, &a2);
}

/* ---- end to end: training ---- */

static dl_tensor *param(int rank, const int64_t *dims, float scale) {
    float *v = buf_new(prod(rank, dims));
    for (int64_t i = 0; i < prod(rank, dims); i++) v[i] *= scale;
    dl_tensor *t = f32_tensor(rank, dims, v);
    free(v);
    return t;
}

/* x [N,2,9,9] -> Conv 4 (pad 1) -> Relu -> MaxPool 2 (ceil) -> Conv 6 (group 2) -> Relu ->
 * AveragePool 3 (stride 2, pad 1, count_include_pad) -> Flatten -> Gemm 3. */
static dl_graph *conv_net(void) {
    dl_graph *g = dl_graph_new(ctx);
    const char *sym[1] = {"N"};
    int64_t xd[4] = {-1, 2, 9, 9}, w1[4] = {4, 2, 3, 3}, b1[1] = {4}, w2[4] = {6, 2, 3, 3},
            b2[1] = {6}, wf[2] = {3, 54}, bf[1] = {3};
    dl_value *x = dl_input(g, "x", DL_F32, 4, xd, sym);
    dl_value *h = dl_relu(g, dl_conv2d(g, x, dl_parameter(g, "w1", param(4, w1, 0.4f)),
                                       dl_parameter(g, "b1", param(1, b1, 0.1f)), 1, 1));
    h = dl_op1(g, "MaxPool", h, "kernel_shape=[2,2];strides=[2,2];ceil_mode=1");
    dl_value *in2[3] = {h, dl_parameter(g, "w2", param(4, w2, 0.4f)),
                        dl_parameter(g, "b2", param(1, b2, 0.1f))};
    dl_value *c2 = NULL;
    const char *c2_at[2] = {"group=2", "pads=[1,1,1,1]"};
    if (dl_add_node(g, "Conv", 3, in2, 1, &c2, 2, c2_at) != DL_OK) return g;
    h = dl_op1(g, "AveragePool", dl_relu(g, c2),
               "kernel_shape=[3,3];strides=[2,2];pads=[1,1,1,1];count_include_pad=1");
    dl_value *y = dl_gemm(g, dl_flatten(g, h, 1), dl_parameter(g, "wf", param(2, wf, 0.3f)),
                          dl_parameter(g, "bf", param(1, bf, 0.1f)), 1);
    dl_output(g, y, "logits");
    return g;
}

static void train_case(void) {
    dl_graph *g = conv_net();
    CHECK("conv net built", dl_graph_status(g) == DL_OK);
    int64_t xd[4] = {5, 2, 9, 9}, yd[1] = {5};
    dl_tensor *x = param(4, xd, 1.0f), *y = NULL;
    dl_tensor_new(ctx, DL_I64, 1, yd, &y);
    for (int i = 0; i < 5; i++) ((int64_t *)y->data)[i] = i % 3;
    float loss[2][3] = {{0}};
    dl_trainer *t[2] = {0};
    for (int be = 0; be < 2; be++) {
        dl_train_options o;
        dl_train_options_init(&o);
        o.optimizer = DL_OPT_SGD;
        o.momentum = 1;
        o.backend = be ? DL_BACKEND_NATIVE : DL_BACKEND_REF;
        if (dl_trainer_new(ctx, g, &o, &t[be]) != DL_OK) {
            CHECK("conv net trainer", 0);
            continue;
        }
        dl_hparams hp;
        dl_hparams_init(&hp, DL_OPT_SGD);
        hp.lr = 0.1f;
        hp.momentum = 0.9f;
        for (int k = 0; k < 3; k++)
            if (dl_train_step(ctx, t[be], x, y, &hp, &loss[be][k]) != DL_OK) {
                CHECK("conv net step", 0);
                break;
            }
    }
    if (t[0] && t[1]) {
        bool same = true;
        for (int k = 0; k < 3; k++)
            same = same && fabsf(loss[0][k] - loss[1][k]) <= 1e-4f * (1 + fabsf(loss[0][k]));
        CHECK("conv net: native losses = interpreter losses", same);
        for (int i = 0; i < dl_trainer_num_params(t[0]); i++) {
            dl_tensor *a = dl_trainer_param(t[0], i), *b = dl_trainer_param(t[1], i);
            char nm[120];
            snprintf(nm, sizeof nm, "conv net: native %s = interpreter's after 3 steps",
                     dl_trainer_param_name(t[0], i));
            CHECK(nm, a && b && a->numel == b->numel && close_to(b->data, a->data, a->numel, 1e-3));
        }
        CHECK("conv net: the loss went down", loss[1][2] < loss[1][0]);
        dl_program *p = dl_trainer_program(t[1]);
        CHECK("conv net step: conv-grad and pool-grad kernels, no fallback",
              p && count_kind(p, DL_G_CONV_GRAD) == 3 && count_kind(p, DL_G_POOL_GRAD) == 2 &&
                  grad_fallbacks(p) == 0);
        /* saved and loaded, the step graph gets fresh symbols where gradients lost the batch's */
        char path[] = "/tmp/dlcc-rtconvgrad-XXXXXX";
        int fd = mkstemp(path);
        dl_graph *back = NULL;
        dl_program *q = NULL;
        bool ok = fd >= 0 && dl_save_onnx(ctx, dl_trainer_graph(t[1]), path) == DL_OK &&
                  dl_load_onnx(ctx, path, &back) == DL_OK &&
                  dl_compile(ctx, back, NULL, &q) == DL_OK;
        CHECK("saved step graph: compiles with no fallback for the backward ops",
              ok && count_kind(q, DL_G_CONV_GRAD) == 3 && count_kind(q, DL_G_POOL_GRAD) == 2 &&
                  grad_fallbacks(q) == 0);
        if (fd >= 0) {
            close(fd);
            unlink(path);
        }
        dl_program_free(q);
        dl_graph_free(back);
    }
    dl_trainer_free(t[0]);
    dl_trainer_free(t[1]);
    dl_tensor_free(x);
    dl_tensor_free(y);
    dl_graph_free(g);
}

int main(void) {
    ctx = dl_ctx_new();
    for (size_t i = 0; i < sizeof conv_cases / sizeof *conv_cases; i++)
        conv_check(conv_cases[i].name, &conv_cases[i].g);
    for (size_t i = 0; i < sizeof batch_cases / sizeof *batch_cases; i++)
        batch_check(batch_cases[i].name, &batch_cases[i].g, batch_cases[i].chunks);
    for (size_t i = 0; i < sizeof as_conv_cases / sizeof *as_conv_cases; i++)
        as_conv_check(as_conv_cases[i].name, &as_conv_cases[i].g, as_conv_cases[i].as_conv);
    for (size_t i = 0; i < sizeof dw_direct_cases / sizeof *dw_direct_cases; i++)
        dw_direct_check(dw_direct_cases[i].name, &dw_direct_cases[i].g, dw_direct_cases[i].direct);
    dw_direct_inf();
    random_conv_cases(40, false);
    random_conv_cases(12, true);
    conv_empty_batch();
    for (size_t i = 0; i < sizeof pool_cases / sizeof *pool_cases; i++)
        pool_check(pool_cases[i].name, &pool_cases[i].g);
    native_cases();
    train_case();
    dl_ctx_free(ctx);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
