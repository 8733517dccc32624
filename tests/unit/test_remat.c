/* test_remat.c — rematerialization (src/passes/remat.c): a cheap elementwise value that one
 * fused group computes and a later elementwise group reads is recomputed by the reader, so its
 * group no longer writes it; the values stay the reference interpreter's. Graphs shaped like a
 * GELU's forward and backward: the forward group computes t = x + b, d = t / c, f = erf(d) + 1
 * and y = t f / 2; a MatMul stands between it and the backward group, which reads t, d and f.
 * t and d are recomputed there (the backward then reads x, which it did not, instead of t and
 * d); f is not (erf costs more than its traffic). The cases where nothing may be recomputed:
 * another reader that is no elementwise group, a cone that would make the reader read two
 * more values of full size, a small value, a graph output. Then a training step (an MLP with
 * a GELU spelled out) on both backends: same losses, and the forward's pass writes only f and
 * the activation. */
#include "../../src/runtime/program-impl.h"
#include "../../src/train/train.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define CHECK_PRINT_PASS
#include "check.h"
#include "native-ref.h"
#include "test-cache.h"
#include "test-rng.h"
#include "test-graph.h"

static dl_compile_options opts;

/* The group holding op `op` of kind `kind` (-1 if none), from group `from` on. */
static int group_with(const dl_program *p, dl_gkind kind, const char *op, int from) {
    for (int gi = from; gi < p->fusion->n; gi++) {
        const dl_group *gr = &p->fusion->groups[gi];
        for (int k = 0; gr->kind == kind && k < gr->n_nodes; k++)
            if (!strcmp(gr->nodes[k]->op->name, op)) return gi;
    }
    return -1;
}

/* Whether group gr writes (a value named as) v. */
static bool writes(const dl_group *gr, const dl_value *v) {
    for (int o = 0; o < gr->n_out; o++)
        if (!strcmp(gr->out[o]->name, v->name)) return true;
    return false;
}

/* Whether group gi reads value name (as an input, not one it computes). */
static bool reads(const dl_program *p, int gi, const char *name) {
    const dl_group *gr = &p->fusion->groups[gi];
    for (int i = 0; i < gr->n_in; i++)
        if (gr->in[i]->name && !strcmp(gr->in[i]->name, name)) return true;
    return false;
}

enum variant {
    PLAIN,       /* t and d recomputed by the backward group */
    SYMBOLIC,    /* the same with x [N, 128]: b still counts as small (is_small) */
    LEAKY,       /* t = LeakyRelu(x + b, alpha 0.25), read by two nodes of the backward */
    TWO_READERS, /* a second backward group reads t and d too: copies of its own */
    GEMM_READER, /* a MatMul reads t too: t stays a result (d is still recomputed) */
    TWO_LEAVES,  /* t = x + x2, both full-size: recomputing it reads one more value */
    SMALL,       /* 16 x 16 values: not worth it */
    T_OUTPUT,    /* t is a graph output */
};

static const char *const variant_names[] = {"plain",
                                            "symbolic rows",
                                            "LeakyRelu read twice",
                                            "two reading groups",
                                            "a GEMM reads t too",
                                            "t from two full-size inputs",
                                            "small values",
                                            "t a graph output"};

/* The values of a compiled g against the reference's on random inputs of dims dims[i] (rank
 * ranks[i]); a check named after what. */
static void check_values(dl_ctx *ctx, dl_graph *g, dl_program *p, int n_in, const int *ranks,
                         const int64_t (*dims)[2], const char *what) {
    dl_tensor *in[4] = {NULL};
    for (int i = 0; i < n_in && i < 4; i++) in[i] = rand_tensor(ctx, ranks[i], dims[i]);
    const double err = native_vs_ref(ctx, g, p, n_in, in);
    char name[200];
    snprintf(name, sizeof name, "%s: the reference's values (max rel err %.2g)", what, err);
    CHECK(name, err < 1e-4); /* float sums of 128 products against double */
    for (int i = 0; i < n_in && i < 4; i++) dl_tensor_free(in[i]);
}

static dl_program *compile_or_fail(dl_ctx *ctx, dl_graph *g, const char *what) {
    char name[200];
    snprintf(name, sizeof name, "%s compiles", what);
    dl_program *p = NULL;
    if (dl_graph_status(g) != DL_OK || dl_compile(ctx, g, &opts, &p) != DL_OK) {
        printf("  %s\n", dl_errmsg(ctx));
        p = NULL;
    }
    CHECK(name, p != NULL);
    return p;
}

static void remat_case(dl_ctx *ctx, enum variant v) {
    dl_graph *g = dl_graph_new(ctx);
    const int64_t rows = v == SMALL ? 16 : 64, cols = v == SMALL ? 16 : 128;
    const int64_t xd[] = {rows, cols}, bd[] = {cols}, wd[] = {cols, cols};
    const int64_t xsym[] = {-1, cols};
    const char *sym[] = {"N", NULL};
    dl_value *x = v == SYMBOLIC ? dl_input(g, "x", DL_F32, 2, xsym, sym)
                                : dl_input(g, "x", DL_F32, 2, xd, NULL);
    dl_value *b = v == TWO_LEAVES ? dl_input(g, "x2", DL_F32, 2, xd, NULL)
                                  : dl_input(g, "b", DL_F32, 1, bd, NULL);
    dl_value *w = dl_input(g, "w", DL_F32, 2, wd, NULL);
    dl_value *t = dl_add(g, x, b);
    if (v == LEAKY) t = dl_op1(g, "LeakyRelu", t, "alpha=0.25");
    dl_value *d = dl_div(g, t, scalar_const(ctx, g, "c", 1.41421356f));
    dl_value *f = dl_add(g, dl_op1(g, "Erf", d, NULL), scalar_const(ctx, g, "one", 1.0f));
    dl_value *y = dl_mul(g, dl_mul(g, t, f), scalar_const(ctx, g, "half", 0.5f));
    dl_value *z = dl_matmul(g, y, w); /* the "backward" starts here */
    dl_value *e = dl_op1(g, "Exp", dl_op1(g, "Neg", dl_mul(g, d, d), NULL), NULL);
    dl_value *gx = dl_add(g, dl_mul(g, z, f), dl_mul(g, dl_mul(g, z, t), e));
    if (v == LEAKY) gx = dl_add(g, gx, t); /* (x centred on 0: both slopes count) */
    dl_output(g, gx, "gx");
    if (v == TWO_READERS) { /* after another product: a group with a Sub, reading t and d */
        dl_value *z2 = dl_matmul(g, gx, w);
        dl_output(g, dl_sub(g, dl_mul(g, z2, t), d), "gx2");
    }
    if (v == GEMM_READER) dl_output(g, dl_matmul(g, t, w), "tw");
    if (v == T_OUTPUT) dl_output(g, t, "t");
    char what[160];
    snprintf(what, sizeof what, "remat (%s)", variant_names[v]);
    dl_program *p = compile_or_fail(ctx, g, what);
    if (!p) {
        dl_graph_free(g);
        return;
    }
    const int ranks[] = {2, v == TWO_LEAVES ? 2 : 1, 2};
    const int64_t dims[][2] = {{rows, cols}, {v == TWO_LEAVES ? rows : cols, cols}, {cols, cols}};
    check_values(ctx, g, p, 3, ranks, dims, what);
    /* the forward group: the one with the Erf; the backward: the one with the Exp */
    const int fwd = group_with(p, DL_G_EW, "Erf", 0), bwd = group_with(p, DL_G_EW, "Exp", 0);
    const dl_group *gf = fwd >= 0 ? &p->fusion->groups[fwd] : NULL;
    /* (the program works on its own copy of the graph: values are matched by name) */
    const bool t_kept = gf && writes(gf, t), d_kept = gf && writes(gf, d),
               f_kept = gf && writes(gf, f);
    bool ok = gf && bwd >= 0 && bwd != fwd && f_kept;
    switch (v) {
    case PLAIN:
    case SYMBOLIC:
    case LEAKY:
    case TWO_READERS: /* forward writes f and y; each backward reads x and b, not t nor d, and
                       * holds its 7 nodes (8 with LeakyRelu's term; 2 in the second) and one
                       * copy of the cone's 2 (3 with the LeakyRelu) */
        ok = ok && gf->n_out == 2 && !t_kept && !d_kept && reads(p, bwd, "x") &&
             reads(p, bwd, "b") && p->fusion->groups[bwd].n_out == 1 &&
             p->fusion->groups[bwd].n_nodes == (v == LEAKY ? 11 : 9);
        if (v == TWO_READERS) {
            const int g2 = group_with(p, DL_G_EW, "Sub", 0);
            ok = ok && g2 >= 0 && g2 != bwd && g2 != fwd && reads(p, g2, "x") &&
                 reads(p, g2, "b") && p->fusion->groups[g2].n_out == 1 &&
                 p->fusion->groups[g2].n_nodes == 4;
        }
        snprintf(what, sizeof what, "remat (%s): t and d recomputed, f kept", variant_names[v]);
        break;
    case GEMM_READER: /* (the backward reads t as it is) */
        ok = ok && t_kept && !d_kept && reads(p, bwd, t->name);
        snprintf(what, sizeof what, "remat (%s): t kept, d recomputed", variant_names[v]);
        break;
    case TWO_LEAVES:
    case SMALL:
        ok = ok && t_kept && d_kept && gf->n_out == 4;
        snprintf(what, sizeof what, "remat (%s): nothing recomputed", variant_names[v]);
        break;
    case T_OUTPUT:
        ok = ok && t_kept && !d_kept && reads(p, bwd, t->name);
        snprintf(what, sizeof what, "remat (%s): t kept, d recomputed", variant_names[v]);
        break;
    }
    CHECK(what, ok);
    dl_program_free(p);
    dl_graph_free(g);
}

/* A Where node (three inputs: the builder has one- and two-input helpers). */
static dl_value *where(dl_graph *g, dl_value *c, dl_value *a, dl_value *b) {
    dl_value *in[3] = {c, a, b}, *out[1] = {NULL};
    dl_add_node(g, "Where", 3, in, 1, out, 0, NULL);
    return out[0];
}

/* Two more rules. A mask of bools (t > 0, read by the backward's Where) is not recomputed from
 * the floats it came from, which are four times its bytes. And a recomputed value that was its
 * group's last node is not written either (dead-code elimination drops the original, which
 * would otherwise stay the group's last result). */
static void remat_rules(dl_ctx *ctx, bool mask) {
    dl_graph *g = dl_graph_new(ctx);
    const int64_t xd[] = {64, 128}, bd[] = {128}, wd[] = {128, 128};
    dl_value *x = dl_input(g, "x", DL_F32, 2, xd, NULL), *b = dl_input(g, "b", DL_F32, 1, bd, NULL);
    dl_value *w = dl_input(g, "w", DL_F32, 2, wd, NULL), *zero = scalar_const(ctx, g, "zero", 0.0f);
    dl_value *t = dl_add(g, x, b), *v = NULL, *y = NULL;
    if (mask) {
        v = dl_op2(g, "Greater", t, zero, NULL);
        y = where(g, v, t, zero);
    } else { /* y, then v: the group's last node */
        y = dl_mul(g, t, scalar_const(ctx, g, "half", 0.5f));
        v = dl_mul(g, t, t);
    }
    dl_value *z = dl_matmul(g, y, w);
    /* (a Mul: an Add would be the product's residual, no elementwise group) */
    dl_output(g, mask ? where(g, v, z, zero) : dl_mul(g, z, v), "gx");
    const char *what = mask ? "remat (a mask of bools)" : "remat (the group's last node)";
    dl_program *p = compile_or_fail(ctx, g, what);
    if (!p) {
        dl_graph_free(g);
        return;
    }
    const int ranks[] = {2, 1, 2};
    const int64_t dims[][2] = {{64, 128}, {128, 0}, {128, 128}};
    check_values(ctx, g, p, 3, ranks, dims, what);
    /* the forward: the group with the Add of x and b first; the backward: the last group */
    const int fwd = group_with(p, DL_G_EW, "Add", 0), bwd = p->fusion->n - 1;
    const dl_group *gf = fwd >= 0 ? &p->fusion->groups[fwd] : NULL;
    char name[200];
    if (mask) {
        snprintf(name, sizeof name, "%s: kept, read back", what);
        CHECK(name,
              gf && bwd != fwd && writes(gf, v) && reads(p, bwd, v->name) && !reads(p, bwd, "x"));
    } else {
        snprintf(name, sizeof name, "%s: recomputed, the forward writes only y", what);
        CHECK(name, gf && bwd != fwd && gf->n_out == 1 && writes(gf, y) && reads(p, bwd, "x") &&
                        reads(p, bwd, "b"));
    }
    dl_program_free(p);
    dl_graph_free(g);
}

enum { IN = 8, HID = 64, OUT = 3, BATCH = 64 };

/* x [N, IN] -> Gemm HID -> GELU in nodes (x (erf(x / sqrt 2) + 1) / 2) -> Gemm OUT. */
static dl_graph *gelu_mlp(dl_ctx *ctx) {
    dl_graph *g = dl_graph_new(ctx);
    const int64_t xd[2] = {-1, IN}, w1[2] = {HID, IN}, b1[1] = {HID}, w2[2] = {OUT, HID},
                  b2[1] = {OUT};
    const char *sym[2] = {"N", NULL};
    dl_value *x = dl_input(g, "x", DL_F32, 2, xd, sym);
    dl_value *h = dl_gemm(g, x, dl_parameter(g, "w1", rand_tensor(ctx, 2, w1)),
                          dl_parameter(g, "b1", rand_tensor(ctx, 1, b1)), 1);
    dl_value *erf = dl_op1(g, "Erf", dl_div(g, h, scalar_const(ctx, g, "r2", 1.41421356f)), NULL);
    dl_value *a = dl_mul(g, dl_mul(g, h, dl_add(g, erf, scalar_const(ctx, g, "one", 1.0f))),
                         scalar_const(ctx, g, "half", 0.5f));
    dl_value *y = dl_gemm(g, a, dl_parameter(g, "w2", rand_tensor(ctx, 2, w2)),
                          dl_parameter(g, "b2", rand_tensor(ctx, 1, b2)), 1);
    dl_output(g, y, "logits");
    return g;
}

static void check_training(dl_ctx *ctx) {
    dl_graph *g = gelu_mlp(ctx);
    const int64_t xd[2] = {BATCH, IN}, yd[1] = {BATCH};
    dl_tensor *x = rand_tensor(ctx, 2, xd), *y = NULL;
    dl_tensor_new(ctx, DL_I64, 1, yd, &y);
    for (int i = 0; y && i < BATCH; i++) ((int64_t *)y->data)[i] = i % OUT;
    float loss[2][20];
    for (int k = 0; k < 20; k++) loss[0][k] = loss[1][k] = NAN; /* a failed step fails */
    for (int be = 0; be < 2; be++) {
        dl_train_options o;
        dl_train_options_init(&o);
        o.optimizer = DL_OPT_ADAMW;
        o.backend = be ? DL_BACKEND_NATIVE : DL_BACKEND_REF;
        o.compile = &opts;
        dl_trainer *t = NULL;
        if (dl_trainer_new(ctx, g, &o, &t) != DL_OK) {
            printf("  %s\n", dl_errmsg(ctx));
            CHECK("gelu mlp trainer built", false);
            continue;
        }
        dl_hparams hp;
        dl_hparams_init(&hp, DL_OPT_ADAMW);
        hp.lr = 0.01f;
        for (int k = 0; k < 20; k++)
            if (dl_train_step(ctx, t, x, y, &hp, &loss[be][k]) != DL_OK) {
                printf("  %s\n", dl_errmsg(ctx));
                break;
            }
        if (be) { /* the step's forward pass computes the Erf: it writes f and the activation */
            const dl_program *p = dl_trainer_program(t);
            const int fwd = p ? group_with(p, DL_G_EW, "Erf", 0) : -1;
            const int other = p && fwd >= 0 ? group_with(p, DL_G_EW, "Erf", fwd + 1) : -1;
            if (fwd >= 0) printf("  forward pass: %d results\n", p->fusion->groups[fwd].n_out);
            CHECK(
                "training step: the forward's pass writes f and the activation (3 results without "
                "recomputation), in one pass",
                fwd >= 0 && other < 0 && p->fusion->groups[fwd].n_out == 2);
        }
        dl_trainer_free(t);
    }
    double worst = 0;
    for (int k = 0; k < 20; k++)
        worst = fmax(worst, fabs(loss[0][k] - loss[1][k]) / fabs(loss[0][k]));
    if (!(worst <= 1e-4)) worst = INFINITY;
    printf("  ref vs native: worst relative loss difference %.2g over 20 steps\n", worst);
    CHECK("training step with recomputed values: native and ref losses agree", worst < 1e-4);
    CHECK("training step: the loss falls", loss[1][19] < loss[1][0]);
    dl_tensor_free(x);
    dl_tensor_free(y);
    dl_graph_free(g);
}

int main(void) {
    char dir[] = "/tmp/dlcc-test-remat-XXXXXX";
    if (!test_cache_open(dir, &opts)) return 1;
    dl_ctx *ctx = dl_ctx_new();
    for (int v = PLAIN; v <= T_OUTPUT; v++) {
        remat_case(ctx, (enum variant)v);
        dl_ctx_clear(ctx);
    }
    remat_rules(ctx, true);
    remat_rules(ctx, false);
    dl_ctx_clear(ctx);
    check_training(ctx);
    dl_ctx_free(ctx);
    test_cache_remove(dir);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
