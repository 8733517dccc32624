/* test_convtranspose.c — ConvTranspose as a native kernel (a CONV_TRANSPOSE group:
 * dlrt_conv_transpose, the input gradient of the Conv it transposes plus its bias; select.c,
 * emit-params.c, src/ops/conv.c's dl_convtr_forward_window) against the reference interpreter's
 * own ConvTranspose (a direct scatter loop summing in double, written apart from it):
 *   - listed layers: upsampling by 2 (2x2 and 4x4 kernels, U-Net's and DCGAN's), 3x3 stride 2
 *     with output_padding, stride 1 (run as a convolution with flipped filters), 1x1, groups
 *     and depthwise, dilations, strides 3, asymmetric pads, auto_pad SAME_UPPER / SAME_LOWER,
 *     output_shape, 1-D and 3-D, odd widths (the stride-2 tap pairs' edges), with and without
 *     a bias, a symbolic batch at two sizes;
 *   - random geometries;
 *   - the same bits with 1 and 2 threads;
 *   - weights packed once at load, in both of the GEMM's orientations (a wide input plane: W
 *     read transposed as the left operand; a 1x1 one: the transposed product's right one),
 *     and none for groups;
 *   - layers that stay with the reference kernel (an output_shape past the full output, an
 *     output_padding not below the stride) still giving its results;
 *   - the profiler's FLOP count of the layer. */
#include "../../src/codegen/emit-params.h"
#include "../../src/codegen/isa.h"
#include "../../src/runtime/profile.h"

#include <stdlib.h>
#include <string.h>

#define CHECK_PRINT_PASS
#include "check.h"
#include "test-cache.h"
#include "native-ref.h"
#include "kernel-case.h"
#include "test-rng.h"
/* test-graph.h's scalar constant is not needed here */
#pragma GCC diagnostic ignored "-Wunused-function"
#include "test-graph.h"

static dl_compile_options opts;
static char dir[] = "/tmp/dlcc-test-convtr-XXXXXX";

/* One ConvTranspose layer: x [N (symbolic), c_in, in...], W [c_in, c_out / group, k...]. attrs
 * are the node's "k=v" attributes. */
typedef struct layer {
    const char *name;
    int ns;
    int64_t c_in, c_out, group;
    int64_t in[3], k[3];
    bool bias;
    const char *attrs[6];
} layer;

static dl_graph *layer_graph(dl_ctx *ctx, const layer *l) {
    dl_graph *g = dl_graph_new(ctx);
    const char *sym[1] = {"N"};
    int64_t xd[5] = {-1, l->c_in}, wd[5] = {l->c_in, l->c_out / l->group}, bd[1] = {l->c_out};
    for (int d = 0; d < l->ns; d++) xd[d + 2] = l->in[d], wd[d + 2] = l->k[d];
    dl_value *in[3] = {dl_input(g, "x", DL_F32, l->ns + 2, xd, sym),
                       dl_constant(g, "W", rand_tensor(ctx, l->ns + 2, wd)),
                       l->bias ? dl_constant(g, "B", rand_tensor(ctx, 1, bd)) : NULL};
    int na = 0;
    while (na < 6 && l->attrs[na]) na++;
    dl_value *y = NULL;
    if (dl_add_node(g, "ConvTranspose", l->bias ? 3 : 2, in, 1, &y, na, l->attrs) == DL_OK)
        dl_output(g, y, "y");
    return g;
}

static dl_tensor *input_for(dl_ctx *ctx, const layer *l, int64_t batch) {
    int64_t xd[5] = {batch, l->c_in};
    for (int d = 0; d < l->ns; d++) xd[d + 2] = l->in[d];
    return rand_tensor(ctx, l->ns + 2, xd);
}

/* The layer compiled: `native` CONV_TRANSPOSE groups (else a fallback), then against the
 * reference at batches 1 and 3, and with 2 threads against 1, bit for bit. */
static void check_layer(dl_ctx *ctx, const layer *l, bool native) {
    char nm[256];
    dl_graph *g = layer_graph(ctx, l);
    dl_program *p = NULL, *p2 = NULL;
    if (!compile_case(ctx, g, &opts, l->name, DL_G_CONV_TRANSPOSE, "a conv-transpose kernel",
                      native, &p, &p2))
        return;
    for (int64_t batch = 1; batch <= 3; batch += 2) {
        dl_tensor *x = input_for(ctx, l, batch);
        snprintf(nm, sizeof nm, "%s, batch %lld", l->name, (long long)batch);
        check_run(ctx, g, p, p2, 1, &x, 1e-4, nm);
        dl_tensor_free(x);
    }
    dl_program_free(p);
    dl_program_free(p2);
    dl_graph_free(g);
}

static void test_layers(dl_ctx *ctx) {
    /* one layer a line */
    /* clang-format off */
    static const layer native[] = {
        {"U-Net up 2x2 s2", 2, 32, 16, 1, {14, 14}, {2, 2}, true, {"strides=[2,2]"}},
        {"DCGAN 4x4 s2 p1", 2, 24, 12, 1, {8, 8}, {4, 4}, false, {"strides=[2,2]", "pads=[1,1,1,1]"}},
        {"3x3 s2 p1 output_padding 1", 2, 8, 6, 1, {7, 9}, {3, 3}, true,
         {"strides=[2,2]", "pads=[1,1,1,1]", "output_padding=[1,1]"}},
        {"odd width 5x3 s2 pads 2,0", 2, 5, 7, 1, {6, 13}, {3, 5}, true, {"strides=[2,2]", "pads=[1,2,0,3]"}},
        {"stride 1 3x3 pad 1, 40 channels (flipped-filter convolution)", 2, 16, 40, 1, {9, 9}, {3, 3}, true,
         {"pads=[1,1,1,1]"}},
        /* its flipped-filter convolution runs as the implicit GEMM, packing per call in scratch
         * the host sized (for its own tiles, a quarter short of AVX-512's, until it sized for
         * every build's) */
        {"stride 1 3x3 pad 1, 48 -> 40 channels on 10x10", 2, 48, 40, 1, {10, 10}, {3, 3}, true, {"pads=[1,1,1,1]"}},
        {"stride 1 3x3 no pad, few channels (GEMM and col2im)", 2, 6, 5, 1, {7, 6}, {3, 3}, false, {NULL}},
        {"1x1", 2, 16, 8, 1, {5, 6}, {1, 1}, true, {NULL}},
        {"groups 2, stride 2", 2, 8, 12, 2, {6, 5}, {3, 3}, true, {"group=2", "strides=[2,2]", "pads=[1,1,1,1]"}},
        {"depthwise 4x4 s2", 2, 6, 6, 6, {7, 7}, {4, 4}, true, {"group=6", "strides=[2,2]", "pads=[1,1,1,1]"}},
        {"dilation 2 stride 2", 2, 4, 5, 1, {6, 7}, {3, 3}, true,
         {"strides=[2,2]", "dilations=[2,2]", "pads=[1,1,1,1]"}},
        {"stride 3 with output_padding 2", 2, 4, 3, 1, {5, 4}, {3, 2}, true, {"strides=[3,3]", "output_padding=[2,1]"}},
        {"auto_pad SAME_UPPER s2", 2, 6, 4, 1, {5, 6}, {3, 3}, true, {"strides=[2,2]", "auto_pad=SAME_UPPER"}},
        {"auto_pad SAME_LOWER s2", 2, 6, 4, 1, {5, 6}, {4, 3}, false, {"strides=[2,2]", "auto_pad=SAME_LOWER"}},
        {"output_shape 10x12", 2, 4, 4, 1, {5, 6}, {3, 3}, true, {"strides=[2,2]", "output_shape=[10,12]"}},
        /* one past the full output of 11, still within the stride: the Conv of 12 positions
         * has 5 again, the 12th in no window (only the bias there) */
        {"output_shape one past the full output", 2, 4, 4, 1, {5, 5}, {3, 3}, true,
         {"strides=[2,2]", "output_shape=[12,12]"}},
        {"1-D k4 s2", 1, 8, 4, 1, {17}, {4}, true, {"strides=[2]", "pads=[1,1]"}},
        {"3-D 2x2x2 s2", 3, 6, 4, 1, {3, 4, 5}, {2, 2, 2}, true, {"strides=[2,2,2]"}},
        {"wide row 40 pairs", 2, 3, 2, 1, {2, 40}, {1, 4}, false, {"strides=[1,2]", "pads=[0,1,0,2]"}},
    };
    /* clang-format on */
    for (size_t i = 0; i < sizeof native / sizeof *native; i++) check_layer(ctx, &native[i], true);
    /* clang-format off */
    static const layer kept[] = {
        /* 13, two past the full output of 11: the Conv of 13 positions would have 6 */
        {"output_shape two past the full output", 2, 4, 4, 1, {5, 5}, {3, 3}, true,
         {"strides=[2,2]", "output_shape=[13,13]"}},
        /* allowed by ONNX below the dilation: positions no tap reaches */
        {"output_padding 1 at stride 1, dilation 2", 2, 4, 3, 1, {5, 5}, {3, 3}, true,
         {"dilations=[2,2]", "output_padding=[1,1]"}},
    };
    /* clang-format on */
    for (size_t i = 0; i < sizeof kept / sizeof *kept; i++) check_layer(ctx, &kept[i], false);
}

/* Random geometries: 1-3 spatial dims, strides 1-3, kernels 1-5, dilations 1-2, pads below the
 * kernel's extent, output_padding below the stride, groups 1, 2 or depthwise. */
static void test_random(dl_ctx *ctx) {
    for (int c = 0; c < 40; c++) {
        layer l;
        memset(&l, 0, sizeof l);
        char name[64], st[64], dl[64], pd[96], op[64], gr[32];
        snprintf(name, sizeof name, "random layer %d", c);
        l.name = name;
        l.ns = (int)irand(1, 3);
        const int64_t cpg = irand(1, 4);
        l.group = irand(0, 2) == 0 ? 2 : 1;
        l.c_in = cpg * l.group;
        l.c_out = irand(1, 3) * l.group;
        l.bias = irand(0, 1);
        int64_t s[3], dil[3], pb[3], pe[3], o[3];
        for (int d = 0; d < l.ns; d++) {
            l.in[d] = irand(1, l.ns == 3 ? 5 : 9);
            l.k[d] = irand(1, l.ns == 3 ? 3 : 5);
            s[d] = irand(1, 3);
            dil[d] = irand(1, 2);
            const int64_t ext = (l.k[d] - 1) * dil[d] + 1;
            pb[d] = irand(0, ext - 1);
            pe[d] = irand(0, ext - 1);
            o[d] = irand(0, s[d] - 1);
            /* keep an output: the full size s * (in - 1) + o + ext less the pads */
            while (s[d] * (l.in[d] - 1) + o[d] + ext - pb[d] - pe[d] < 1)
                pe[d] > 0 ? pe[d]-- : pb[d]--;
        }
        char *outs[5] = {st, dl, pd, op, gr};
        const char *names[4] = {"strides", "dilations", "pads", "output_padding"};
        const int64_t *vals[4] = {s, dil, pb, o};
        for (int a = 0; a < 4; a++) {
            size_t at = (size_t)snprintf(outs[a], 96, "%s=[", names[a]);
            const int n = a == 2 ? 2 * l.ns : l.ns;
            for (int i = 0; i < n; i++)
                at +=
                    (size_t)snprintf(outs[a] + at, 96 - at, "%s%lld", i ? "," : "",
                                     (long long)(a == 2 && i >= l.ns ? pe[i - l.ns] : vals[a][i]));
            snprintf(outs[a] + at, 96 - at, "]");
        }
        snprintf(gr, sizeof gr, "group=%lld", (long long)l.group);
        for (int a = 0; a < 5; a++) l.attrs[a] = outs[a];
        check_layer(ctx, &l, true);
    }
}

/* The packing mode the program's conv-transpose group runs with and how many weights the program
 * packed at load; -1 when the layer does not compile to one such group. */
static int packed_mode(dl_ctx *ctx, const layer *l, int *n_packs) {
    dl_graph *g = layer_graph(ctx, l);
    dl_program *p = NULL;
    int mode = -1;
    *n_packs = -1;
    if (dl_compile(ctx, g, &opts, &p) == DL_OK && p->fusion->n == 1 &&
        p->fusion->groups[0].kind == DL_G_CONV_TRANSPOSE) {
        dl_conv_grad_params cg;
        if (dl_conv_grad_params_of(ctx, &p->fusion->groups[0], &cg) == DL_OK) {
            dl_isa isa; /* the vectors of the instruction set the kernels are built for */
            cg.p.n = 1;
            if (dl_isa_resolve(ctx, p->stats.isa, &isa) == DL_OK)
                mode = dlrt_conv_transpose_packs_weights_for(isa.vector_bytes, &cg.p);
        }
        *n_packs = p->n_packs;
    }
    dl_ctx_clear(ctx);
    dl_program_free(p);
    dl_graph_free(g);
    return mode;
}

static void test_packed(dl_ctx *ctx) {
    /* clang-format off */
    static const layer wide = {"wide plane", 2, 32, 16, 1, {14, 14}, {2, 2}, true, {"strides=[2,2]"}};
    static const layer narrow = {"1x1 plane (DCGAN's first layer)", 2, 64, 32, 1, {1, 1}, {4, 4},
                                 true, {NULL}};
    static const layer grouped = {"groups", 2, 8, 12, 2, {6, 5}, {3, 3}, true,
                                  {"group=2", "strides=[2,2]", "pads=[1,1,1,1]"}};
    /* clang-format on */
    int nw, nn, ng;
    const int mw = packed_mode(ctx, &wide, &nw), mn = packed_mode(ctx, &narrow, &nn);
    const int mg = packed_mode(ctx, &grouped, &ng);
    CHECK("a wide plane's weights are packed once as the left operand",
          mw == DLRT_A_PACKED && nw == 1);
    CHECK("a 1x1 plane's weights are packed once as the transposed product's right operand",
          mn == DLRT_A_PACKED_T && nn == 1);
    CHECK("grouped weights are packed per call", mg == 0 && ng == 0);
    check_layer(ctx, &narrow, true);
}

/* The profiler counts a ConvTranspose's multiply-adds: 2 * numel(X) * (c_out / group) * k. */
static void test_flops(dl_ctx *ctx) {
    const layer l = {"flops", 2, 8, 6, 2, {5, 4}, {3, 2}, true, {"group=2", "strides=[2,2]"}};
    dl_graph *g = layer_graph(ctx, &l);
    dl_program *p = NULL;
    dl_tensor *x = input_for(ctx, &l, 2);
    dl_profile pr;
    memset(&pr, 0, sizeof pr);
    bool ok = dl_compile(ctx, g, &opts, &p) == DL_OK &&
              dl_profile_program(ctx, p, 1, NULL, &x, 1, 3, &pr) == DL_OK;
    double flops = -1;
    for (int i = 0; ok && i < pr.n_steps; i++)
        if (pr.steps[i].kind == DL_G_CONV_TRANSPOSE) flops = pr.steps[i].flops;
    CHECK("profile: a conv-transpose step's FLOPs are 2 * numel(X) * (c_out / group) * k",
          flops == 2.0 * (2 * 8 * 5 * 4) * 3 * (3 * 2));
    if (!ok) printf("  %s\n", dl_errmsg(ctx));
    dl_profile_free(&pr);
    dl_tensor_free(x);
    dl_program_free(p);
    dl_graph_free(g);
}

int main(void) {
    if (!test_cache_open(dir, &opts)) return 1;
    opts.threads = 1;
    dl_ctx *ctx = dl_ctx_new();
    test_layers(ctx);
    test_random(ctx);
    test_packed(ctx);
    test_flops(ctx);
    dl_ctx_free(ctx);
    test_cache_remove(dir);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
