/* test_compile.c — the native backend end to end: graphs built with the C API and the bundled
 * ONNX model are compiled (passes, fusion, codegen, JIT through a private cache) and their
 * outputs compared with the reference interpreter; the fusion of epilogues, the symbolic batch
 * (one program, several batch sizes), the memory plan figures, the cache hit on a second
 * compile, data-dependent shapes and dl_check are checked too. */
#include "../../src/runtime/program-impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHECK_PRINT_PASS
#include "check.h"
#include "test-cache.h"
#include "native-ref.h"
#include "test-rng.h"
#include "test-graph.h"

static int count_kind(const dl_program *p, dl_gkind k, int min_nodes) {
    int n = 0;
    for (int gi = 0; gi < p->fusion->n; gi++)
        n += p->fusion->groups[gi].kind == k && p->fusion->groups[gi].n_nodes >= min_nodes;
    return n;
}

static dl_compile_options opts;

/* MatMul + bias + residual + Relu fuse into one GEMM kernel; a Sigmoid*x chain into one loop. */
static void test_mlp_fusion(dl_ctx *ctx) {
    dl_graph *g = dl_graph_new(ctx);
    const int64_t xd[] = {-1, 16}, wd[] = {16, 16}, bd[] = {16};
    const char *syms[] = {"batch", NULL};
    dl_value *x = dl_input(g, "x", DL_F32, 2, xd, syms);
    dl_value *w = dl_constant(g, "w", rand_tensor(ctx, 2, wd));
    dl_value *b = dl_constant(g, "b", rand_tensor(ctx, 1, bd));
    dl_value *h = dl_relu(g, dl_add(g, dl_add(g, dl_matmul(g, x, w), b), x));
    dl_value *y = dl_mul(g, dl_sigmoid(g, h), h);
    dl_output(g, y, "y");
    CHECK("mlp graph builds", dl_graph_status(g) == DL_OK);
    dl_program *p = NULL;
    dl_status s = dl_compile(ctx, g, &opts, &p);
    CHECK("mlp compiles", s == DL_OK);
    if (s != DL_OK) {
        printf("  %s\n", dl_errmsg(ctx));
        dl_graph_free(g);
        return;
    }
    CHECK("matmul+bias+residual+relu is one kernel", count_kind(p, DL_G_MATMUL, 4) == 1);
    CHECK("sigmoid*x is one elementwise kernel", count_kind(p, DL_G_EW, 2) == 1);
    CHECK("two steps in all", p->fusion->n == 2);
    for (int batch = 1; batch <= 7; batch += 3) {
        int64_t dims[] = {batch, 16};
        dl_tensor *in[1] = {rand_tensor(ctx, 2, dims)};
        char name[96];
        double e = native_vs_ref(ctx, g, p, 1, in);
        snprintf(name, sizeof name, "mlp batch %d matches ref (max rel err %.2g)", batch, e);
        CHECK(name, e < 1e-4);
        dl_tensor_free(in[0]);
    }
    dl_program_free(p);
    dl_graph_free(g);
}

/* Attention-style batched MatMul with broadcasting, Softmax and LayerNormalization. */
static void test_attention(dl_ctx *ctx) {
    dl_graph *g = dl_graph_new(ctx);
    const int64_t qd[] = {-1, 4, 5, 8}, kd[] = {1, 4, 8, 5}, sd[] = {8};
    const char *syms[] = {"batch", NULL, NULL, NULL};
    dl_value *q = dl_input(g, "q", DL_F32, 4, qd, syms);
    dl_value *k = dl_constant(g, "k", rand_tensor(ctx, 4, kd));
    dl_value *att = dl_softmax(g, dl_matmul(g, q, k), -1);
    dl_value *sc = dl_constant(g, "scale", rand_tensor(ctx, 1, sd));
    dl_value *ctxv =
        dl_matmul(g, att, dl_constant(g, "v2", rand_tensor(ctx, 2, (int64_t[]){5, 8})));
    dl_value *ln_in[2] = {ctxv, sc}, *ln_out[1];
    const char *attrs[] = {"axis=-1", "epsilon=0.001"};
    dl_add_node(g, "LayerNormalization", 2, ln_in, 1, ln_out, 2, attrs);
    dl_output(g, ln_out[0], "y");
    CHECK("attention graph builds", dl_graph_status(g) == DL_OK);
    if (dl_graph_status(g) != DL_OK) printf("  %s\n", dl_errmsg(ctx));
    dl_program *p = NULL;
    if (dl_graph_status(g) == DL_OK && dl_compile(ctx, g, &opts, &p) == DL_OK) {
        CHECK("attention: two matmul kernels", count_kind(p, DL_G_MATMUL, 1) == 2);
        CHECK("attention: softmax and layernorm kernels",
              count_kind(p, DL_G_SOFTMAX, 1) == 1 && count_kind(p, DL_G_LAYERNORM, 1) == 1);
        int64_t dims[] = {3, 4, 5, 8};
        dl_tensor *in[1] = {rand_tensor(ctx, 4, dims)};
        double e = native_vs_ref(ctx, g, p, 1, in);
        char name[96];
        snprintf(name, sizeof name, "attention matches ref (max rel err %.2g)", e);
        CHECK(name, e < 1e-4);
        dl_tensor_free(in[0]);
    } else {
        CHECK("attention compiles", false);
        printf("  %s\n", dl_errmsg(ctx));
    }
    dl_program_free(p);
    dl_graph_free(g);
}

/* One node op(in...) with string attributes; its single output. */
/* g compiled, or NULL after failing the check `what` with the error and freeing g. */
static dl_program *compiled_or_fail(dl_ctx *ctx, dl_graph *g, const char *what) {
    dl_program *p = NULL;
    if (dl_graph_status(g) == DL_OK && dl_compile(ctx, g, &opts, &p) == DL_OK) return p;
    CHECK(what, false);
    printf("  %s\n", dl_errmsg(ctx));
    dl_graph_free(g);
    return NULL;
}

static dl_value *node1(dl_graph *g, const char *op, int n_in, dl_value **in, int n_attrs,
                       const char **attrs) {
    dl_value *out[1] = {NULL};
    dl_add_node(g, op, n_in, in, 1, out, n_attrs, attrs);
    return out[0];
}

/* Layer norm spelled out in primitive ops (torch.onnx below opset 17) becomes one
 * LayerNormalization kernel; a view of its result (the new node's output has a higher value id
 * than the Reshape reading it) must still plan and match the reference. */
static void test_decomposed_layernorm(dl_ctx *ctx) {
    dl_graph *g = dl_graph_new(ctx);
    const int64_t xd[] = {2, 6, 8}, cd[] = {8};
    dl_value *x = dl_input(g, "x", DL_F32, 3, xd, NULL);
    const char *ax[] = {"axes=[-1]"};
    dl_value *m = node1(g, "ReduceMean", 1, &x, 1, ax);
    dl_value *d = dl_sub(g, x, m);
    dl_value *pin[2] = {d, scalar_const(ctx, g, "two", 2.0f)};
    dl_value *v =
        node1(g, "ReduceMean", 1, (dl_value *[]){node1(g, "Pow", 2, pin, 0, NULL)}, 1, ax);
    dl_value *sd = node1(g, "Sqrt", 1,
                         (dl_value *[]){dl_add(g, v, scalar_const(ctx, g, "eps", 1e-5f))}, 0, NULL);
    dl_value *y = dl_div(g, d, sd);
    y = dl_mul(g, y, dl_constant(g, "gamma", rand_tensor(ctx, 1, cd)));
    y = dl_add(g, y, dl_constant(g, "beta", rand_tensor(ctx, 1, cd)));
    dl_tensor *shape = NULL;
    const int64_t sdims[] = {2};
    if (dl_tensor_new(ctx, DL_I64, 1, sdims, &shape) == DL_OK) {
        ((int64_t *)dl_tensor_data(shape))[0] = 2;
        ((int64_t *)dl_tensor_data(shape))[1] = 48;
    }
    dl_value *r =
        node1(g, "Reshape", 2, (dl_value *[]){y, dl_constant(g, "shape", shape)}, 0, NULL);
    dl_output(g, r, "y");
    CHECK("decomposed layernorm graph builds", dl_graph_status(g) == DL_OK);
    if (dl_graph_status(g) != DL_OK) printf("  %s\n", dl_errmsg(ctx));
    dl_program *p = NULL;
    if (dl_graph_status(g) == DL_OK && dl_compile(ctx, g, &opts, &p) == DL_OK) {
        CHECK("decomposed layernorm is one LayerNormalization kernel",
              count_kind(p, DL_G_LAYERNORM, 1) == 1 && count_kind(p, DL_G_REDUCE, 1) == 0);
        dl_tensor *in[1] = {rand_tensor(ctx, 3, xd)};
        double e = native_vs_ref(ctx, g, p, 1, in);
        char name[96];
        snprintf(name, sizeof name, "decomposed layernorm + view matches ref (max rel err %.2g)",
                 e);
        CHECK(name, e < 1e-4);
        dl_tensor_free(in[0]);
    } else {
        CHECK("decomposed layernorm compiles", false);
        printf("  %s\n", dl_errmsg(ctx));
    }
    dl_program_free(p);
    dl_graph_free(g);
}

/* The bundled CNN: one program serves several batch sizes; memory plan figures; cache hit. */
static void test_default_model(dl_ctx *ctx) {
    dl_graph *g = NULL;
    if (dl_load_onnx(ctx, "models/default.onnx", &g) != DL_OK) {
        CHECK("load models/default.onnx", false);
        return;
    }
    dl_program *p = NULL;
    if (dl_compile(ctx, g, &opts, &p) != DL_OK) {
        CHECK("default model compiles", false);
        printf("  %s\n", dl_errmsg(ctx));
        dl_graph_free(g);
        return;
    }
    CHECK("conv+bias+relu fused", count_kind(p, DL_G_CONV, 2) >= 2);
    CHECK("conv+residual add+relu fused", count_kind(p, DL_G_CONV, 3) >= 1);
    CHECK("no reference fallbacks in the default model", count_kind(p, DL_G_FALLBACK, 1) == 0);
    for (int batch = 1; batch <= 5; batch += 2) {
        int64_t dims[] = {batch, 3, 32, 32};
        dl_tensor *in[1] = {rand_tensor(ctx, 4, dims)};
        double e = native_vs_ref(ctx, g, p, 1, in);
        char name[96];
        snprintf(name, sizeof name, "default model batch %d, same program (max rel err %.2g)",
                 batch, e);
        CHECK(name, e < 1e-4);
        /* the naive peak (live bytes, no fragmentation) is a lower bound only without in-place
         * reuse, so the arena is checked against the no-reuse sum */
        CHECK("memory plan: static, 0 < arena < sum of intermediates, naive peak <= sum",
              !p->plan.dynamic && p->plan.arena_bytes > 0 &&
                  p->plan.arena_bytes < p->plan.sum_bytes &&
                  p->plan.naive_peak <= p->plan.sum_bytes);
        dl_tensor_free(in[0]);
    }
    dl_program *p2 = NULL;
    CHECK("second compile of the same model is a cache hit",
          dl_compile(ctx, g, &opts, &p2) == DL_OK && p2->stats.cache_hit);
    dl_program_free(p2);
    int64_t dims[] = {2, 3, 32, 32};
    dl_tensor *in[1] = {rand_tensor(ctx, 4, dims)};
    FILE *devnull = fopen("/dev/null", "w");
    CHECK("dl_check passes on the default model",
          dl_check(ctx, g, &opts, 1, NULL, in, 1e-4, 1e-5, devnull) == DL_OK);
    if (devnull) fclose(devnull);
    dl_tensor_free(in[0]);
    dl_program_free(p);
    dl_graph_free(g);
}

/* NonZero makes a shape depend on data: the plan is dynamic and results still match. */
static void test_dynamic_shapes(dl_ctx *ctx) {
    dl_graph *g = dl_graph_new(ctx);
    const int64_t xd[] = {6};
    dl_value *x = dl_input(g, "x", DL_F32, 1, xd, NULL);
    dl_value *nz = dl_op1(g, "NonZero", dl_relu(g, x), NULL);
    dl_value *y = dl_op1(g, "Cast", nz, "to=1");
    dl_output(g, dl_relu(g, dl_add(g, y, y)), "y");
    dl_program *p = compiled_or_fail(ctx, g, "dynamic graph compiles");
    if (!p) return;
    dl_tensor *in[1] = {rand_tensor(ctx, 1, xd)};
    double e = native_vs_ref(ctx, g, p, 1, in);
    CHECK("data-dependent shapes: native matches ref", e == 0);
    CHECK("data-dependent shapes: plan is dynamic", p->plan.dynamic);
    dl_tensor_free(in[0]);
    dl_program_free(p);
    dl_graph_free(g);
}

/* Erf in a generated elementwise loop is the runtime's polynomial (dlrt_erf, vecmath.h): within
 * 4e-7 of double erf (its bound is 3.6e-7) on a sweep of [-6, 6] with a length that leaves a
 * scalar tail after the vectors, odd at 0 (-0 stays -0), +-1 at +-inf, NaN kept. */
static void test_erf_loop(dl_ctx *ctx) {
    enum { N = 24001 + 5 };
    dl_graph *g = dl_graph_new(ctx);
    const int64_t xd[] = {N};
    dl_output(g, dl_op1(g, "Erf", dl_input(g, "x", DL_F32, 1, xd, NULL), NULL), "y");
    dl_program *p = compiled_or_fail(ctx, g, "Erf compiles");
    if (!p) return;
    CHECK("Erf is one elementwise kernel", count_kind(p, DL_G_EW, 1) == 1);
    dl_tensor *in = NULL, *out[1] = {NULL};
    if (dl_tensor_new(ctx, DL_F32, 1, xd, &in) != DL_OK) {
        CHECK("Erf input", false);
        dl_program_free(p);
        dl_graph_free(g);
        return;
    }
    float *x = dl_tensor_data(in);
    for (int i = 0; i < N - 5; i++) x[i] = -6.0f + 12.0f * (float)i / (float)(N - 6);
    const float special[5] = {-0.0f, INFINITY, -INFINITY, NAN, 3.92f};
    memcpy(x + N - 5, special, sizeof special);
    double worst = 0;
    bool specials = false;
    if (dl_program_run(ctx, p, 1, NULL, &in, out) == DL_OK) {
        const float *y = dl_tensor_data(out[0]);
        for (int i = 0; i < N - 5; i++) {
            const double e = fabs((double)y[i] - erf((double)x[i]));
            if (!(e <= worst)) worst = e;
        }
        const float *s = y + N - 5;
        specials = s[0] == 0.0f && signbit(s[0]) && s[1] == 1.0f && s[2] == -1.0f && isnan(s[3]) &&
                   fabs((double)s[4] - erf(3.92)) < 4e-7;
    }
    char what[96];
    snprintf(what, sizeof what, "Erf loop within 4e-7 of erf (worst %.3g)", worst);
    CHECK(what, worst < 4e-7);
    CHECK("Erf loop: -0, +-inf, NaN", specials);
    dl_tensor_free(in);
    dl_tensor_free(out[0]);
    dl_program_free(p);
    dl_graph_free(g);
}

/* Transposes compiled natively against the reference, exactly: the permutations that swap two
 * runs of dims after a common prefix run through dlrt_transpose32 (4-byte elements), the others
 * (and other element sizes) as generated loops; with a symbolic batch, at two batch sizes whose
 * planes are not whole vector blocks. */
static void test_transposes(dl_ctx *ctx) {
    static const struct {
        int perm[4];
        dl_dtype dt;
        bool runtime; /* expected to call dlrt_transpose32 */
    } cases[] = {
        {{0, 1, 3, 2}, DL_F32, true},  /* matrices */
        {{0, 2, 3, 1}, DL_F32, true},  /* attention's [b, t, h, d] -> [b, h, d, t] */
        {{0, 3, 1, 2}, DL_I32, true},  /* [.., Y, X] -> [.., X, Y] with X one dim, Y two */
        {{1, 2, 3, 0}, DL_F32, true},  /* no common prefix: the batch is 1 */
        {{0, 2, 1, 3}, DL_F32, false}, /* the last dim stays: contiguous runs */
        {{0, 1, 3, 2}, DL_I64, false}, /* 8-byte elements */
        {{3, 1, 2, 0}, DL_F32, false}, /* not a swap of two runs */
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        dl_graph *g = dl_graph_new(ctx);
        const int64_t xd[] = {-1, 19, 17, 21};
        const char *syms[] = {"batch", NULL, NULL, NULL};
        dl_value *x = dl_input(g, "x", cases[c].dt, 4, xd, syms);
        char attr[64];
        snprintf(attr, sizeof attr, "perm=[%d,%d,%d,%d]", cases[c].perm[0], cases[c].perm[1],
                 cases[c].perm[2], cases[c].perm[3]);
        dl_output(g, dl_op1(g, "Transpose", x, attr), "y");
        char name[128];
        snprintf(name, sizeof name, "transpose %s %s compiles", attr, dl_dtype_name(cases[c].dt));
        dl_program *p = compiled_or_fail(ctx, g, name);
        if (!p) continue;
        CHECK(name, true);
        snprintf(name, sizeof name, "transpose %s %s: %s", attr, dl_dtype_name(cases[c].dt),
                 cases[c].runtime ? "runtime kernel" : "generated loops");
        CHECK(name, p->source.s &&
                        (strstr(p->source.s, "dlrt_transpose32(") != NULL) == cases[c].runtime);
        for (int64_t batch = 2; batch <= 5; batch += 3) {
            const int64_t dims[] = {batch, 19, 17, 21};
            dl_tensor *in[1] = {NULL};
            dl_tensor_new(ctx, cases[c].dt, 4, dims, &in[0]);
            unsigned char *raw = dl_tensor_data(in[0]);
            const size_t bytes = (size_t)dl_tensor_numel(in[0]) * dl_dtype_size(cases[c].dt);
            for (size_t i = 0; i < bytes; i++) raw[i] = (unsigned char)(i * 7 + i / 3);
            /* bit patterns, NaNs among them: moved, never computed on */
            dl_tensor *want[1] = {NULL}, *got[1] = {NULL};
            const bool ran = dl_run(ctx, g, DL_BACKEND_REF, 1, NULL, in, want) == DL_OK &&
                             dl_program_run(ctx, p, 1, NULL, in, got) == DL_OK;
            snprintf(name, sizeof name, "transpose %s %s batch %lld: native equals ref bit for bit",
                     attr, dl_dtype_name(cases[c].dt), (long long)batch);
            CHECK(name, ran && !memcmp(dl_tensor_data(got[0]), dl_tensor_data(want[0]), bytes));
            if (!ran) printf("  %s\n", dl_errmsg(ctx));
            dl_tensor_free(want[0]);
            dl_tensor_free(got[0]);
            dl_tensor_free(in[0]);
        }
        dl_program_free(p);
        dl_graph_free(g);
    }
}

/* Expand as an elementwise kernel (its shape input read by inference only) against the
 * reference: a constant shape adding a leading dim, Expand(x, Shape(like)) with a symbolic batch
 * (the gradients' form), joined after a Relu and followed by a Mul in the same loop nest, int64
 * data, and a shape that is a graph input (a dynamic plan). */
static void test_expand(dl_ctx *ctx) {
    dl_graph *g = dl_graph_new(ctx);
    const int64_t xd[] = {1, 5}, ld[] = {-1, 4, 5}, sd[] = {3};
    const char *syms[] = {"batch", NULL, NULL};
    dl_value *x = dl_input(g, "x", DL_F32, 2, xd, NULL);
    dl_value *like = dl_input(g, "like", DL_F32, 3, ld, syms);
    dl_value *sh = dl_input(g, "shape", DL_I64, 1, sd, NULL);
    dl_value *e1 = dl_op2(g, "Expand", dl_relu(g, x), dl_op1(g, "Shape", like, NULL), NULL);
    dl_output(g, dl_mul(g, e1, like), "y1");
    dl_tensor *three = NULL;
    dl_tensor_new(ctx, DL_I64, 1, sd, &three);
    int64_t *tp = dl_tensor_data(three);
    tp[0] = 2, tp[1] = 3, tp[2] = 5;
    dl_output(g, dl_op2(g, "Expand", x, dl_constant(g, "three", three), NULL), "y2");
    dl_value *xi = dl_op1(g, "Cast", x, "to=7");
    dl_output(g, dl_op2(g, "Expand", xi, sh, NULL), "y3");
    dl_program *p = compiled_or_fail(ctx, g, "expand graph compiles");
    if (!p) return;
    int ew_expand = 0;
    for (int gi = 0; gi < p->fusion->n; gi++)
        for (int k = 0; k < p->fusion->groups[gi].n_nodes; k++)
            ew_expand += p->fusion->groups[gi].kind == DL_G_EW &&
                         dl_node_is(p->fusion->groups[gi].nodes[k], "Expand");
    CHECK("the three Expands run in elementwise kernels", ew_expand == 3);
    CHECK("relu, expand and mul are one kernel", count_kind(p, DL_G_EW, 3) == 1);
    for (int64_t batch = 1; batch <= 4; batch += 3) {
        const int64_t ldims[] = {batch, 4, 5};
        dl_tensor *in[3] = {rand_tensor(ctx, 2, xd), rand_tensor(ctx, 3, ldims), NULL};
        dl_tensor_new(ctx, DL_I64, 1, sd, &in[2]);
        int64_t *s3 = dl_tensor_data(in[2]);
        s3[0] = batch, s3[1] = 6, s3[2] = 1; /* [batch, 6, 5]: a leading dim, a 1 kept as 5 */
        const double e = native_vs_ref(ctx, g, p, 3, in);
        char name[96];
        snprintf(name, sizeof name, "expand at batch %lld matches ref (max rel err %.2g)",
                 (long long)batch, e);
        CHECK(name, e == 0);
        for (int i = 0; i < 3; i++) dl_tensor_free(in[i]);
    }
    dl_program_free(p);
    dl_graph_free(g);
}

/* Weights packed at load time share one block (so that it can be backed by huge pages): each
 * pack 64-byte aligned and clear of the next. The allocation cap applies to each pack, as to
 * any single allocation, not to their sum: three 3x3 64-channel convolutions (Winograd-packed,
 * about 590 KB each) compile under a 1 MiB cap, and fail with a limit error naming the pack
 * under 256 KiB. */
static void test_pack_block(dl_ctx *ctx) {
    bool ok = true, compiled = false, refused = false;
    for (int pass = 0; pass < 2; pass++) {
        dl_graph *g = dl_graph_new(ctx);
        const int64_t xd[] = {1, 64, 28, 28}, wd[] = {64, 64, 3, 3};
        dl_value *y = dl_input(g, "x", DL_F32, 4, xd, NULL);
        for (int l = 0; l < 3; l++) {
            char name[8];
            snprintf(name, sizeof name, "w%d", l);
            y = dl_relu(g,
                        dl_conv2d(g, y, dl_constant(g, name, rand_tensor(ctx, 4, wd)), NULL, 1, 1));
        }
        dl_output(g, y, "y");
        const size_t cap = dl_alloc_limit();
        dl_set_alloc_limit(pass ? 256u << 10 : 1u << 20);
        dl_program *p = NULL;
        dl_status s = dl_graph_status(g) == DL_OK ? dl_compile(ctx, g, &opts, &p) : DL_ERR_INVALID;
        dl_set_alloc_limit(cap);
        if (!pass) {
            int64_t (*bytes)(int) =
                p ? (int64_t(*)(int))dl_jit_sym(p->lib, "dlk_pack_bytes") : NULL;
            compiled = s == DL_OK && p && bytes && p->n_packs == 3;
            for (int k = 0; compiled && k < p->n_packs; k++) {
                const char *at = p->packs[k];
                const char *end = (const char *)p->pack_mem + p->pack_bytes;
                const char *next = k + 1 < p->n_packs ? (const char *)p->packs[k + 1] : end;
                ok = ok && ((uintptr_t)at & 63) == 0 && at >= (const char *)p->pack_mem &&
                     at + bytes(k) <= next && next <= end;
            }
        } else {
            refused = s == DL_ERR_LIMIT && strstr(dl_errmsg(ctx), "packed weight");
        }
        dl_ctx_clear(ctx);
        dl_program_free(p);
        dl_graph_free(g);
    }
    CHECK("packed weights over the cap in sum, not each, compile", compiled);
    CHECK("each pack in the shared block is 64-byte aligned and clear of the next", compiled && ok);
    CHECK("a pack over the cap is a limit error naming it", refused);
}

/* dl_program_run_reuse writes an output into the caller's tensor when dtype and shape fit, and
 * allocates one otherwise; the values are the same either way. */
static void test_output_reuse(dl_ctx *ctx) {
    dl_graph *g = dl_graph_new(ctx);
    int64_t xd[2] = {-1, 8};
    const char *sym[2] = {"N", NULL};
    dl_value *x = dl_input(g, "x", DL_F32, 2, xd, sym);
    dl_output(g, dl_relu(g, dl_add(g, x, x)), "y");
    dl_program *p = compiled_or_fail(ctx, g, "reuse graph compiles");
    if (!p) return;
    int64_t d3[2] = {3, 8}, d4[2] = {4, 8};
    dl_tensor *in = rand_tensor(ctx, 2, d3), *fits = NULL, *other = NULL, *want[1] = {0};
    dl_tensor_new(ctx, DL_F32, 2, d3, &fits);
    dl_tensor_new(ctx, DL_F32, 2, d4, &other);
    dl_tensor *out[1] = {0}, *reuse[1] = {fits};
    bool ok = dl_run(ctx, g, DL_BACKEND_REF, 1, NULL, &in, want) == DL_OK &&
              dl_program_run_reuse(ctx, p, 1, NULL, &in, out, reuse) == DL_OK;
    CHECK("output written into the caller's tensor",
          ok && out[0] == fits && max_rel(fits, want[0]) == 0);
    reuse[0] = other;
    out[0] = NULL;
    ok = dl_program_run_reuse(ctx, p, 1, NULL, &in, out, reuse) == DL_OK;
    CHECK("a tensor of another shape is not used",
          ok && out[0] && out[0] != other && max_rel(out[0], want[0]) == 0);
    if (out[0] != other) dl_tensor_free(out[0]);
    dl_tensor_free(in);
    dl_tensor_free(fits);
    dl_tensor_free(other);
    dl_tensor_free(want[0]);
    dl_program_free(p);
    dl_graph_free(g);
}

/* x [5, 16] and h = x w + b [5, 40] in a new graph, for an activation on h. */
static dl_graph *epi_graph(dl_ctx *ctx, dl_value **h) {
    dl_graph *g = dl_graph_new(ctx);
    const int64_t xd[] = {5, 16}, wd[] = {16, 40}, bd[] = {40};
    dl_value *x = dl_input(g, "x", DL_F32, 2, xd, NULL);
    *h = dl_add(g, dl_matmul(g, x, dl_constant(g, "w", rand_tensor(ctx, 2, wd))),
                dl_constant(g, "b", rand_tensor(ctx, 1, bd)));
    return g;
}

/* Compiles g (output y, an activation of epi_graph's h): one MatMul kernel of at least fused_nodes
 * nodes when fused, else the MatMul and an elementwise kernel; the reference's values on inputs
 * spread to +-1.5 either way. Frees g. */
static void epi_check(dl_ctx *ctx, dl_graph *g, const char *what, int fused_nodes, bool fused) {
    char name[160];
    snprintf(name, sizeof name, "%s compiles", what);
    dl_program *p = compiled_or_fail(ctx, g, name);
    if (!p) return;
    snprintf(name, sizeof name, "%s %s the matmul's epilogue", what, fused ? "is" : "is not");
    CHECK(name, fused ? count_kind(p, DL_G_MATMUL, fused_nodes) == 1 && p->fusion->n == 1
                      : count_kind(p, DL_G_MATMUL, 3) == 0 && p->fusion->n == 2);
    const int64_t xd[] = {5, 16};
    dl_tensor *in[1] = {rand_tensor(ctx, 2, xd)};
    for (int64_t i = 0; i < 5 * 16; i++) ((float *)dl_tensor_data(in[0]))[i] *= 3.0f;
    double err = native_vs_ref(ctx, g, p, 1, in);
    snprintf(name, sizeof name, "%s matches ref (max rel err %.2g)", what, err);
    CHECK(name, err < 1e-5);
    dl_tensor_free(in[0]);
    dl_program_free(p);
    dl_graph_free(g);
}

/* GELU as torch exports it (x * (erf(x / sqrt 2) + 1) * 0.5) after a MatMul + bias becomes the
 * GEMM's activation, with the graph's divisor: one kernel, the reference's values. A chain with
 * another constant (0.25 for 0.5) is left to an elementwise kernel. */
static void gelu_case(dl_ctx *ctx, float div, float half, bool fused) {
    dl_value *h;
    dl_graph *g = epi_graph(ctx, &h);
    dl_value *e =
        node1(g, "Erf", 1, (dl_value *[]){dl_div(g, h, scalar_const(ctx, g, "r2", div))}, 0, NULL);
    dl_value *y = dl_mul(g, dl_mul(g, h, dl_add(g, e, scalar_const(ctx, g, "one", 1.0f))),
                         scalar_const(ctx, g, "half", half));
    dl_output(g, y, "y");
    char what[80];
    snprintf(what, sizeof what, "gelu chain (divisor %g, last factor %g)", div, half);
    epi_check(ctx, g, what, 7, fused);
}

/* GELU's tanh form spelled out (GPT-2's x * (1 + tanh(a * (x + b * x^3))) * 0.5, x^3 as
 * x * (x * x) or Pow(x, 3)) after a MatMul + bias becomes the GEMM's activation with the graph's
 * constants: one kernel, the reference's values. With another factor than 0.5 last, or a fourth
 * reader of x, it is left to an elementwise kernel. */
static void gelu_tanh_case(dl_ctx *ctx, bool pow3, float a, float half, bool extra_reader,
                           bool fused) {
    dl_value *h;
    dl_graph *g = epi_graph(ctx, &h);
    dl_value *cube =
        pow3 ? node1(g, "Pow", 2, (dl_value *[]){h, scalar_const(ctx, g, "three", 3.0f)}, 0, NULL)
             : dl_mul(g, h, dl_mul(g, h, h));
    dl_value *inner = dl_add(g, h, dl_mul(g, scalar_const(ctx, g, "c3", 0.044715f), cube));
    dl_value *t = node1(g, "Tanh", 1,
                        (dl_value *[]){dl_mul(g, scalar_const(ctx, g, "s", a), inner)}, 0, NULL);
    dl_value *y = dl_mul(g, dl_mul(g, h, dl_add(g, scalar_const(ctx, g, "one", 1.0f), t)),
                         scalar_const(ctx, g, "half", half));
    if (extra_reader) y = dl_add(g, y, h);
    dl_output(g, y, "y");
    char what[120];
    snprintf(what, sizeof what, "gelu tanh chain (%s, a %g, last factor %g%s)",
             pow3 ? "Pow" : "x*(x*x)", a, half, extra_reader ? ", x read again" : "");
    epi_check(ctx, g, what, pow3 ? 10 : 11, fused);
}

/* ONNX's Gelu node (opset 20) after a MatMul + bias, either form, is the GEMM's activation. */
static void gelu_node_case(dl_ctx *ctx, const char *approx, bool fused) {
    dl_value *h;
    dl_graph *g = epi_graph(ctx, &h);
    char attr[40], what[80];
    snprintf(attr, sizeof attr, "approximate=%s", approx);
    const char *attrs[] = {attr};
    dl_output(g, node1(g, "Gelu", 1, &h, 1, attrs), "y");
    snprintf(what, sizeof what, "Gelu node (approximate=%s)", approx);
    epi_check(ctx, g, what, 3, fused);
}

/* Each activation whose op row names a runtime activation (dl_op_def.epilogue) is the
 * MatMul's epilogue, with its attributes and constant inputs as parameters (none at their
 * defaults here), and gives the reference's values. */
static void test_epilogue_activations(dl_ctx *ctx) {
    static const struct {
        const char *op, *attrs[2];
        int n_attrs;
        float lo, hi; /* Clip's bound inputs */
    } acts[] = {{"Relu", {0}, 0, 0, 0},
                {"Sigmoid", {0}, 0, 0, 0},
                {"Tanh", {0}, 0, 0, 0},
                {"HardSwish", {0}, 0, 0, 0},
                {"LeakyRelu", {"alpha=0.3"}, 1, 0, 0},
                {"HardSigmoid", {"alpha=0.25", "beta=0.4"}, 2, 0, 0},
                {"Clip", {0}, 0, -0.7f, 1.3f}};
    for (size_t k = 0; k < sizeof acts / sizeof acts[0]; k++) {
        dl_value *h;
        dl_graph *g = epi_graph(ctx, &h);
        dl_value *in[3] = {h, NULL, NULL};
        int n_in = 1;
        if (!strcmp(acts[k].op, "Clip")) {
            in[1] = scalar_const(ctx, g, "lo", acts[k].lo);
            in[2] = scalar_const(ctx, g, "hi", acts[k].hi);
            n_in = 3;
        }
        const char *attrs[2] = {acts[k].attrs[0], acts[k].attrs[1]};
        dl_output(g, node1(g, acts[k].op, n_in, in, acts[k].n_attrs, attrs), "y");
        char what[80];
        snprintf(what, sizeof what, "%s after matmul + bias", acts[k].op);
        epi_check(ctx, g, what, 3, true);
    }
}

static void test_gelu_fusion(dl_ctx *ctx) {
    gelu_node_case(ctx, "none", true);
    gelu_node_case(ctx, "tanh", true);
    gelu_tanh_case(ctx, false, 0.7978846f, 0.5f, false, true);
    gelu_tanh_case(ctx, true, 0.7978846f, 0.5f, false, true);
    gelu_tanh_case(ctx, false, 0.9f, 0.5f, false, true); /* the graph's constant is used */
    gelu_tanh_case(ctx, false, 0.7978846f, 0.25f, false, false);
    gelu_tanh_case(ctx, true, 0.7978846f, 0.5f, true, false);
    gelu_case(ctx, 1.41421356f, 0.5f, true);
    gelu_case(ctx, 2.0f, 0.5f, true); /* the graph's divisor, not a built-in sqrt(2) */
    gelu_case(ctx, 1.41421356f, 0.25f, false);
}

/* A graph output that is a Reshape of an intermediate (GPT-2's logits) has the intermediate
 * computed into its bytes, so the view step copies nothing; other readers of the intermediate
 * (a Relu, a second view output, which cannot share those bytes and is copied) still see its
 * values. */
typedef struct view_seen {
    int step, shared;
} view_seen;

static dl_status note_view(void *user, const dl_program *p, int step, dl_tensor *const *values) {
    view_seen *v = user;
    const dl_group *gr = &p->fusion->groups[step];
    if (step == v->step)
        v->shared = values[gr->nodes[0]->in[0]->id]->data == values[gr->out[0]->id]->data;
    return DL_OK;
}

static dl_value *reshape_to(dl_ctx *ctx, dl_graph *g, dl_value *x, const char *name, int64_t a,
                            int64_t b) {
    dl_tensor *shape = NULL;
    const int64_t sd[] = {2};
    if (dl_tensor_new(ctx, DL_I64, 1, sd, &shape) != DL_OK) return NULL;
    ((int64_t *)dl_tensor_data(shape))[0] = a;
    ((int64_t *)dl_tensor_data(shape))[1] = b;
    return node1(g, "Reshape", 2, (dl_value *[]){x, dl_constant(g, name, shape)}, 0, NULL);
}

static void test_output_view(dl_ctx *ctx) {
    dl_graph *g = dl_graph_new(ctx);
    const int64_t xd[] = {4, 8}, wd[] = {8, 6};
    dl_value *x = dl_input(g, "x", DL_F32, 2, xd, NULL);
    dl_value *t = dl_matmul(g, x, dl_constant(g, "w", rand_tensor(ctx, 2, wd)));
    dl_output(g, reshape_to(ctx, g, t, "s1", 2, 12), "flat");
    dl_output(g, dl_relu(g, t), "relu");
    dl_output(g, reshape_to(ctx, g, t, "s2", 12, 2), "tall");
    dl_program *p = compiled_or_fail(ctx, g, "output-view graph compiles");
    if (!p) return;
    view_seen seen = {-1, -1};
    for (int gi = 0; gi < p->fusion->n && seen.step < 0; gi++)
        if (p->fusion->groups[gi].kind == DL_G_VIEW) seen.step = gi;
    dl_tensor *in[1] = {rand_tensor(ctx, 2, xd)}, *want[3] = {0}, *got[3] = {0};
    bool ok = dl_run(ctx, g, DL_BACKEND_REF, 1, NULL, in, want) == DL_OK;
    for (int round = 0; round < 2 && ok; round++) { /* twice: the outputs' bytes are fresh */
        ok = dl_program_run_hooked(ctx, p, 1, NULL, in, got, note_view, &seen, NULL) == DL_OK;
        double e = 0;
        for (int i = 0; i < 3 && ok; i++) {
            const double ei = max_rel(got[i], want[i]);
            e = ei > e ? ei : e;
        }
        CHECK("output views and the other reader match ref", ok && e < 1e-5);
        for (int i = 0; i < 3; i++) {
            dl_tensor_free(got[i]);
            got[i] = NULL;
        }
    }
    CHECK("the first view output shares its input's bytes (no copy)", ok && seen.shared == 1);
    const dl_value *mid = seen.step >= 0 ? p->fusion->groups[seen.step].nodes[0]->in[0] : NULL;
    CHECK("... which takes no arena slot",
          mid && p->plan.valid && p->plan.offset[mid->id] < 0 && p->plan.out_view[mid->id] >= 0);
    dl_tensor_free(in[0]);
    for (int i = 0; i < 3; i++) dl_tensor_free(want[i]);
    dl_program_free(p);
    dl_graph_free(g);
}

/* The elementwise group holding op `op` (-1 if none). */
static int ew_group_of(const dl_program *p, const char *op) {
    for (int gi = 0; gi < p->fusion->n; gi++) {
        const dl_group *gr = &p->fusion->groups[gi];
        for (int k = 0; gr->kind == DL_G_EW && k < gr->n_nodes; k++)
            if (!strcmp(gr->nodes[k]->op->name, op)) return gi;
    }
    return -1;
}

/* Whether ops a and b run in elementwise kernels, not the same one. */
static bool ew_apart(const dl_program *p, const char *a, const char *b) {
    const int ga = ew_group_of(p, a), gb = ew_group_of(p, b);
    return ga >= 0 && gb >= 0 && ga != gb;
}

/* Compiles g and checks its values against the reference interpreter's, on random inputs of
 * the shapes its inputs declare; returns the program (NULL on failure, g then freed). */
static dl_program *multi_check(dl_ctx *ctx, dl_graph *g, const char *what) {
    char name[160];
    snprintf(name, sizeof name, "%s compiles", what);
    dl_program *p = compiled_or_fail(ctx, g, name);
    if (!p) return NULL;
    dl_tensor *in[8] = {NULL};
    const int n_in = dl_graph_num_inputs(g);
    for (int i = 0; i < n_in && i < 8; i++) {
        const dl_type *t = &dl_graph_input(g, i)->type;
        in[i] = rand_tensor(ctx, t->rank, t->dims);
    }
    double err = n_in <= 8 ? native_vs_ref(ctx, g, p, n_in, in) : INFINITY;
    snprintf(name, sizeof name, "%s matches ref (max rel err %.2g)", what, err);
    CHECK(name, err < 1e-5);
    for (int i = 0; i < n_in && i < 8; i++) dl_tensor_free(in[i]);
    return p;
}

/* Checks what multi_check compiled (ok, worked out from it), then frees it and its graph. */
static void multi_done(dl_program *p, dl_graph *g, const char *name, bool ok) {
    CHECK(name, ok);
    dl_program_free(p);
    dl_graph_free(g);
}

/* Adam's update: the new moments are two chains of their own until the update reads both; it
 * then joins the first one's pass and merges the second's into it (fuse.c: add_ew_node), one
 * loop with the three results. Not when something outside reads the second moment between
 * its pass and the update (a ReduceSum of it): that pass stays its own (merged, it would run
 * after the sum). The reference's values either way. */
static void adam_case(dl_ctx *ctx, bool early_reader) {
    dl_graph *g = dl_graph_new(ctx);
    const int64_t d[] = {8, 40};
    dl_value *p = dl_input(g, "p", DL_F32, 2, d, NULL), *gr = dl_input(g, "g", DL_F32, 2, d, NULL);
    dl_value *m = dl_input(g, "m", DL_F32, 2, d, NULL), *v = dl_input(g, "v", DL_F32, 2, d, NULL);
    dl_value *m1 = dl_add(g, dl_mul(g, scalar_const(ctx, g, "b1", 0.9f), m),
                          dl_mul(g, scalar_const(ctx, g, "c1", 0.1f), gr));
    dl_value *v1 = dl_add(g, dl_mul(g, scalar_const(ctx, g, "b2", 0.999f), v),
                          dl_mul(g, scalar_const(ctx, g, "c2", 0.001f), dl_mul(g, gr, gr)));
    dl_output(g, m1, "m_new");
    dl_output(g, v1, "v_new");
    dl_value *den = dl_add(g, dl_op1(g, "Sqrt", v1, NULL), scalar_const(ctx, g, "eps", 1e-3f));
    /* (after the denominator, which then still joins the second moment's pass, before the
     * update) */
    if (early_reader) dl_output(g, node1(g, "ReduceSum", 1, &v1, 0, NULL), "v_sum");
    dl_value *upd = dl_mul(g, scalar_const(ctx, g, "lr", 0.01f), dl_div(g, m1, den));
    dl_output(g, dl_sub(g, p, upd), "p_new");
    const char *what = early_reader ? "adam update, second moment summed first" : "adam update";
    dl_program *prog = multi_check(ctx, g, what);
    if (!prog) return;
    char name[160];
    const int gm = ew_group_of(prog, "Div"), gv = ew_group_of(prog, "Sqrt");
    if (early_reader)
        snprintf(name, sizeof name, "%s: the second moment's pass is not merged", what);
    else
        snprintf(name, sizeof name, "%s: one pass with the three results", what);
    multi_done(prog, g, name,
               early_reader ? gm >= 0 && gv >= 0 && gm != gv
                            : prog->fusion->n == 1 && gm == 0 && gv == 0 &&
                                  prog->fusion->groups[0].n_out == 3);
}

/* A chain of 40 Clips whose bounds are inputs (81 inputs): a group stops growing before it
 * reads more values than an elementwise kernel takes (DL_EW_GROUP_INPUTS), so the chain runs
 * as generated kernels (it had been one group the code generator refused, left to 40 reference
 * kernels), with the reference's values. */
static void test_many_inputs(dl_ctx *ctx) {
    dl_graph *g = dl_graph_new(ctx);
    const int64_t d[] = {4, 8};
    enum { CLIPS = 40, N = 2 * CLIPS + 1 };
    dl_value *acc = dl_input(g, "x", DL_F32, 2, d, NULL);
    for (int i = 0; i < CLIPS; i++) {
        char lo[16], hi[16];
        snprintf(lo, sizeof lo, "lo%d", i);
        snprintf(hi, sizeof hi, "hi%d", i);
        dl_value *in[3] = {acc, dl_input(g, lo, DL_F32, 0, NULL, NULL),
                           dl_input(g, hi, DL_F32, 0, NULL, NULL)};
        acc = node1(g, "Clip", 3, in, 0, NULL);
    }
    dl_output(g, acc, "y");
    dl_program *p = compiled_or_fail(ctx, g, "40 clips with input bounds compile");
    if (!p) return;
    CHECK("40 clips with input bounds: elementwise kernels, no reference fallback",
          count_kind(p, DL_G_FALLBACK, 1) == 0 && count_kind(p, DL_G_EW, 1) >= 2);
    dl_tensor *in[N];
    in[0] = rand_tensor(ctx, 2, d);
    for (int i = 1; i < N; i++) { /* bounds around 0: lower ones below, upper ones above */
        in[i] = rand_tensor(ctx, 0, NULL);
        float *b = dl_tensor_data(in[i]);
        *b = (i % 2 ? -0.5f : 0.5f) + 0.25f * *b;
    }
    double err = native_vs_ref(ctx, g, p, N, in);
    char name[96];
    snprintf(name, sizeof name, "40 clips with input bounds match ref (max rel err %.2g)", err);
    CHECK(name, err < 1e-6);
    for (int i = 0; i < N; i++) dl_tensor_free(in[i]);
    dl_program_free(p);
    dl_graph_free(g);
}

/* SGD with weight decay after a weight gradient's product: the residual Add of the decay term
 * (wd times the weight) is left to the elementwise pass that computes that term, which then also
 * takes the momentum and the update (fuse.c: residual_joins_pass), whether the term's node comes
 * before the product or after it; the product keeps no residual. Where the sum is a graph
 * output (nothing elementwise after it), the product takes it as its residual as before. */
static void sgd_decay_case(dl_ctx *ctx, bool term_first, bool sum_out) {
    dl_graph *g = dl_graph_new(ctx);
    const int64_t ad[] = {8, 16}, bd[] = {16, 40}, d[] = {8, 40};
    dl_value *a = dl_input(g, "a", DL_F32, 2, ad, NULL), *b = dl_input(g, "b", DL_F32, 2, bd, NULL);
    dl_value *p = dl_input(g, "p", DL_F32, 2, d, NULL), *st = dl_input(g, "st", DL_F32, 2, d, NULL);
    dl_value *wd = scalar_const(ctx, g, "wd", 0.01f), *term = NULL;
    if (term_first) term = dl_mul(g, wd, p);
    dl_value *grad = dl_matmul(g, a, b);
    if (!term_first) term = dl_mul(g, wd, p);
    dl_value *g1 = dl_add(g, grad, term);
    if (sum_out) {
        dl_output(g, g1, "g1");
    } else {
        dl_value *v = dl_add(g, dl_mul(g, scalar_const(ctx, g, "mu", 0.9f), st), g1);
        dl_output(g, v, "st_new");
        dl_output(g, dl_sub(g, p, dl_mul(g, scalar_const(ctx, g, "lr", 0.1f), v)), "p_new");
    }
    char what[120];
    snprintf(what, sizeof what, "sgd with decay (its term %s the product%s)",
             term_first ? "before" : "after", sum_out ? ", the sum an output" : "");
    dl_program *prog = multi_check(ctx, g, what);
    if (!prog) return;
    char name[180];
    snprintf(name, sizeof name, "%s: %s", what,
             sum_out ? "the product takes the term as its residual"
                     : "the product keeps no residual, one elementwise pass after it");
    multi_done(prog, g, name,
               sum_out ? count_kind(prog, DL_G_MATMUL, 2) == 1 && prog->fusion->n == 2
                       : count_kind(prog, DL_G_MATMUL, 1) == 1 &&
                             count_kind(prog, DL_G_MATMUL, 2) == 0 && prog->fusion->n == 2 &&
                             count_kind(prog, DL_G_EW, 6) == 1);
}

/* An Expand whose shape is computed by the elementwise pass that computes its data (the shape
 * also read as data: Cast of it, then maybe Neg): the executor needs the shape before the
 * Expand's kernel runs (a dynamic plan), so the Expand is not fused into that pass, nor the
 * pass merged into the Expand's; the reference's values. (Joining it had made one group and
 * a run that failed: "output shape unknown at run time".) */
static void test_expand_shape_pass(dl_ctx *ctx) {
    for (int neg = 0; neg < 2; neg++) {
        dl_graph *g = dl_graph_new(ctx);
        const int64_t sd[] = {2};
        dl_value *shape = dl_op1(g, "Abs", dl_input(g, "shape", DL_I64, 1, sd, NULL), NULL);
        dl_value *d = dl_op1(g, "Cast", shape, "to=1");
        if (neg) d = dl_op1(g, "Neg", d, NULL);
        dl_output(g, dl_op2(g, "Expand", d, shape, NULL), "y");
        char what[80];
        snprintf(what, sizeof what, "expand of a cast of its own shape%s", neg ? ", negated" : "");
        dl_program *p = compiled_or_fail(ctx, g, what);
        if (!p) continue;
        dl_tensor *in[1] = {NULL};
        if (dl_tensor_new(ctx, DL_I64, 1, sd, &in[0]) == DL_OK) {
            ((int64_t *)dl_tensor_data(in[0]))[0] = 3;
            ((int64_t *)dl_tensor_data(in[0]))[1] = 2;
        }
        const double err = native_vs_ref(ctx, g, p, 1, in);
        char name[140];
        snprintf(name, sizeof name, "%s: the shape's pass apart, the reference's values (err %.2g)",
                 what, err);
        CHECK(name, err == 0 && ew_apart(p, "Abs", "Expand"));
        dl_tensor_free(in[0]);
        dl_program_free(p);
        dl_graph_free(g);
    }
}

/* Multi-output elementwise fusion (fuse.c: joinable_group): an op joins the elementwise group
 * computing its input even where that value is read elsewhere too, which keeps it as a second
 * result of the same pass. SGD with momentum's update (the new velocity is a result and the
 * weight update's input) is one loop with two results. Not when something outside reads a
 * result before the op (a ReduceSum of Exp's result that the Div by it needs: one pass would
 * compute Exp's result after the sum read it), nor when the op's result has another shape
 * (one loop nest writes every result). Two results of a pass whose inputs die there (both
 * may be offered the same input's bytes: memplan.c gives them to one). Values as the reference
 * interpreter's every time. */
static void test_multi_output_fusion(dl_ctx *ctx) {
    {
        dl_graph *g = dl_graph_new(ctx);
        const int64_t d[] = {8, 40};
        dl_value *p = dl_input(g, "p", DL_F32, 2, d, NULL),
                 *gr = dl_input(g, "g", DL_F32, 2, d, NULL);
        dl_value *st = dl_input(g, "st", DL_F32, 2, d, NULL);
        dl_value *v = dl_add(g, dl_mul(g, scalar_const(ctx, g, "mu", 0.9f), st), gr);
        dl_output(g, v, "st_new");
        dl_output(g, dl_sub(g, p, dl_mul(g, scalar_const(ctx, g, "lr", 0.1f), v)), "p_new");
        dl_program *prog = multi_check(ctx, g, "sgd momentum update");
        if (prog)
            multi_done(prog, g, "sgd momentum update: one elementwise pass with both results",
                       prog->fusion->n == 1 && prog->fusion->groups[0].kind == DL_G_EW &&
                           prog->fusion->groups[0].n_nodes == 4 &&
                           prog->fusion->groups[0].n_out == 2);
    }
    {
        dl_graph *g = dl_graph_new(ctx);
        const int64_t d[] = {6, 8};
        dl_value *x = dl_input(g, "x", DL_F32, 2, d, NULL);
        dl_value *a = dl_op1(g, "Exp", x, NULL);
        dl_tensor *axes = NULL;
        const int64_t one[] = {1};
        if (dl_tensor_new(ctx, DL_I64, 1, one, &axes) == DL_OK)
            *(int64_t *)dl_tensor_data(axes) = -1;
        dl_value *sum =
            node1(g, "ReduceSum", 2, (dl_value *[]){a, dl_constant(g, "axes", axes)}, 0, NULL);
        dl_output(g, dl_div(g, a, sum), "y");
        dl_program *prog = multi_check(ctx, g, "exp / its sum");
        if (prog)
            multi_done(prog, g,
                       "exp / its sum: the Div is not in Exp's pass (the sum reads Exp's result "
                       "first)",
                       ew_apart(prog, "Exp", "Div"));
    }
    {
        dl_graph *g = dl_graph_new(ctx);
        const int64_t d[] = {4, 8}, d3[] = {3, 4, 8};
        dl_value *x = dl_input(g, "x", DL_F32, 2, d, NULL),
                 *b = dl_input(g, "b", DL_F32, 3, d3, NULL);
        dl_value *a = dl_op1(g, "Exp", x, NULL);
        dl_output(g, a, "a");
        dl_output(g, dl_add(g, a, b), "y");
        dl_program *prog = multi_check(ctx, g, "exp, and it broadcast");
        if (prog)
            multi_done(prog, g, "exp, and it broadcast: two passes (the results' shapes differ)",
                       ew_apart(prog, "Exp", "Add"));
    }
    {
        dl_graph *g = dl_graph_new(ctx);
        const int64_t d[] = {16, 24};
        dl_value *x1 = dl_op1(g, "Transpose", dl_input(g, "i1", DL_F32, 2, d, NULL), NULL);
        dl_value *x2 = dl_op1(g, "Transpose", dl_input(g, "i2", DL_F32, 2, d, NULL), NULL);
        dl_value *u = dl_add(g, x1, x2), *w = dl_mul(g, u, x1);
        dl_output(g, dl_op1(g, "Transpose", u, NULL), "ut");
        dl_output(g, dl_op1(g, "Transpose", w, NULL), "wt");
        dl_program *prog = multi_check(ctx, g, "two results over two dying inputs");
        const int gi = prog ? ew_group_of(prog, "Add") : -1;
        if (prog)
            multi_done(prog, g, "two results over two dying inputs: one pass",
                       gi >= 0 && gi == ew_group_of(prog, "Mul") &&
                           prog->fusion->groups[gi].n_out == 2);
    }
    adam_case(ctx, false);
    adam_case(ctx, true);
    sgd_decay_case(ctx, true, false);
    sgd_decay_case(ctx, false, false);
    sgd_decay_case(ctx, false, true);
}

/* ScatterElements on float32 with int64 indices takes a fast path in the reference kernel (a
 * gather's gradient); with int32 indices the general one. Both give the same bits, along each
 * axis of a rank-3 tensor, with repeated and negative indices, replacing and adding; an index
 * out of range is an error either way. */
static void test_scatter_fast_path(dl_ctx *ctx) {
    const int64_t xd[] = {3, 5, 4};
    for (int axis = 0; axis < 3; axis++)
        for (int add = 0; add < 2; add++) {
            int64_t id[3] = {2, 4, 3};
            id[axis] = 6; /* more updates than the axis holds: repeats */
            const int64_t n = id[0] * id[1] * id[2];
            dl_tensor *y[2] = {NULL, NULL}, *x = rand_tensor(ctx, 3, xd),
                      *u = rand_tensor(ctx, 3, id);
            bool ran = true, bad_caught = true;
            for (int wide = 0; wide < 2; wide++) {
                for (int bad = 0; bad < 2; bad++) {
                    dl_graph *g = dl_graph_new(ctx);
                    const dl_dtype it = wide ? DL_I32 : DL_I64;
                    dl_value *in[3] = {dl_input(g, "x", DL_F32, 3, xd, NULL),
                                       dl_input(g, "i", it, 3, id, NULL),
                                       dl_input(g, "u", DL_F32, 3, id, NULL)};
                    char a1[16], a2[24];
                    snprintf(a1, sizeof a1, "axis=%d", axis);
                    snprintf(a2, sizeof a2, "reduction=%s", add ? "add" : "none");
                    const char *attrs[] = {a1, a2};
                    dl_output(g, node1(g, "ScatterElements", 3, in, 2, attrs), "y");
                    dl_tensor *ix = NULL;
                    dl_tensor_new(ctx, it, 3, id, &ix);
                    for (int64_t j = 0; ix && j < n; j++) {
                        int64_t v = (j * 7 + 3) % xd[axis] - (j % 3 == 0 ? xd[axis] : 0);
                        if (bad && j == n / 2) v = xd[axis]; /* one past the end */
                        if (wide)
                            ((int32_t *)dl_tensor_data(ix))[j] = (int32_t)v;
                        else
                            ((int64_t *)dl_tensor_data(ix))[j] = v;
                    }
                    dl_tensor *args[3] = {x, ix, u}, *out[1] = {NULL};
                    const bool ok =
                        ix && dl_run(ctx, g, DL_BACKEND_REF, 3, NULL, args, out) == DL_OK;
                    if (bad)
                        bad_caught &= !ok;
                    else
                        ran &= ok, y[wide] = out[0];
                    if (bad) dl_tensor_free(out[0]);
                    dl_tensor_free(ix);
                    dl_graph_free(g);
                }
            }
            char name[120];
            snprintf(name, sizeof name,
                     "ScatterElements axis %d, %s: int64 indices (fast path) as int32 (general), "
                     "a bad index refused by both",
                     axis, add ? "adding" : "replacing");
            CHECK(name, ran && bad_caught && y[0] && y[1] &&
                            !memcmp(dl_tensor_data(y[0]), dl_tensor_data(y[1]),
                                    (size_t)(3 * 5 * 4) * sizeof(float)));
            dl_tensor_free(y[0]), dl_tensor_free(y[1]), dl_tensor_free(x), dl_tensor_free(u);
        }
}

int main(void) {
    char dir[] = "/tmp/dlcc-test-compile-XXXXXX";
    if (!test_cache_open(dir, &opts)) return 1;
    dl_ctx *ctx = dl_ctx_new();
    test_mlp_fusion(ctx);
    dl_ctx_clear(ctx);
    test_attention(ctx);
    dl_ctx_clear(ctx);
    test_decomposed_layernorm(ctx);
    dl_ctx_clear(ctx);
    test_default_model(ctx);
    dl_ctx_clear(ctx);
    test_dynamic_shapes(ctx);
    dl_ctx_clear(ctx);
    test_output_reuse(ctx);
    test_pack_block(ctx);
    dl_ctx_clear(ctx);
    test_output_view(ctx);
    dl_ctx_clear(ctx);
    test_gelu_fusion(ctx);
    test_epilogue_activations(ctx);
    dl_ctx_clear(ctx);
    test_transposes(ctx);
    dl_ctx_clear(ctx);
    test_erf_loop(ctx);
    dl_ctx_clear(ctx);
    test_expand(ctx);
    dl_ctx_clear(ctx);
    test_multi_output_fusion(ctx);
    dl_ctx_clear(ctx);
    test_many_inputs(ctx);
    dl_ctx_clear(ctx);
    test_scatter_fast_path(ctx);
    dl_ctx_clear(ctx);
    test_expand_shape_pass(ctx);
    dl_ctx_free(ctx);
    test_cache_remove(dir);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
