/* test_passes.c — the graph passes: each test builds a small graph with the builder API, runs
 * one pass (or the pipeline) on a clone, checks that the rewrite happened (op counts, types,
 * names) and that the reference interpreter gives the same outputs on the original and on the
 * optimized clone (exactly, or within 1e-5 relative where BatchNorm folding re-rounds). */
#include "../../src/ir/rewrite.h"
#include "../../src/passes/passes-impl.h"

#include <math.h>
#include <stdlib.h>

#define CHECK_FAIL_DETAIL() printf(" %s", dl_errmsg(ctx))
#include "check.h"
static dl_ctx *ctx;

/* ---- building ---- */

static float rnd(unsigned *s) {
    *s = *s * 1103515245u + 12345u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

static dl_tensor *tf32(int rank, const int64_t *dims, unsigned seed, float lo) {
    dl_tensor *t;
    if (dl_tensor_new(ctx, DL_F32, rank, dims, &t) != DL_OK) return NULL;
    float *p = t->data;
    for (int64_t i = 0; i < t->numel; i++) p[i] = lo > 0 ? lo + fabsf(rnd(&seed)) : rnd(&seed);
    return t;
}

static dl_value *cf32(dl_graph *g, int rank, const int64_t *dims, unsigned seed) {
    return dl_constant(g, NULL, tf32(rank, dims, seed, 0));
}

/* A float32 constant filled with one value. */
static dl_value *cfill(dl_graph *g, int rank, const int64_t *dims, float v) {
    dl_tensor *t = tf32(rank, dims, 1, 0);
    for (int64_t i = 0; t && i < t->numel; i++) ((float *)t->data)[i] = v;
    return dl_constant(g, NULL, t);
}

/* int64 constant: 1-D with n values, or a scalar when n < 0 (one value). */
static dl_value *ci64(dl_graph *g, int n, const int64_t *v) {
    dl_tensor *t;
    int64_t d = n;
    if (dl_tensor_new(ctx, DL_I64, n < 0 ? 0 : 1, &d, &t) != DL_OK) return NULL;
    memcpy(t->data, v, sizeof(int64_t) * (size_t)(n < 0 ? 1 : n));
    return dl_constant(g, NULL, t);
}

/* One-output node with up to 4 attributes separated by ';'. */
static dl_value *op(dl_graph *g, const char *name, int n, dl_value *const *in, const char *attrs) {
    char buf[256];
    const char *list[4];
    int na = 0;
    if (attrs) {
        snprintf(buf, sizeof buf, "%s", attrs);
        for (char *t = strtok(buf, ";"); t && na < 4; t = strtok(NULL, ";")) list[na++] = t;
    }
    dl_value *out = NULL;
    dl_add_node(g, name, n, in, 1, &out, na, list);
    return out;
}

static dl_value *op1(dl_graph *g, const char *name, dl_value *a, const char *attrs) {
    return op(g, name, 1, &a, attrs);
}

static dl_value *op2(dl_graph *g, const char *name, dl_value *a, dl_value *b, const char *attrs) {
    dl_value *in[2] = {a, b};
    return op(g, name, 2, in, attrs);
}

static int count_op(const dl_graph *g, const char *name) {
    int c = 0;
    for (int k = 0; k < g->nodes.len; k++)
        c += strcmp(((const dl_node *)g->nodes.items[k])->op->name, name) == 0;
    return c;
}

/* ---- running ---- */

static const dl_pass P_FOLD[] = {{"fold_constants", dl_pass_fold_constants}, {"dce", dl_pass_dce}, {0}};
static const dl_pass P_SIMPLIFY[] = {{"simplify", dl_pass_simplify}, {"dce", dl_pass_dce}, {0}};
static const dl_pass P_BN[] = {{"fold_batchnorm", dl_pass_fold_batchnorm}, {"dce", dl_pass_dce}, {0}};
static const dl_pass P_CSE[] = {{"cse", dl_pass_cse}, {"dce", dl_pass_dce}, {0}};
static const dl_pass P_DCE[] = {{"dce", dl_pass_dce}, {0}};
static dl_pass p_all[32]; /* the inference pipeline without fuse (tested by its owner) */

/* A clone of g after the passes (NULL on failure, reported). */
static dl_graph *optimized(dl_graph *g, const dl_pass *list) {
    dl_graph *c = NULL;
    if (dl_graph_status(g) != DL_OK || dl_graph_clone(g, false, &c) != DL_OK) {
        printf("FAIL building or cloning: %s\n", dl_errmsg(ctx));
        return NULL;
    }
    dl_pass_ctx pc = {.ctx = ctx, .g = c};
    if (dl_run_passes(&pc, list) != DL_OK) {
        printf("FAIL passes: %s\n", dl_errmsg(ctx));
        dl_graph_free(c);
        return NULL;
    }
    return c;
}

/* a and b give the same outputs on inputs in (rtol 0: equal values; else |d| <= rtol * max|a|
 * over that output). */
static bool same_results(dl_graph *a, dl_graph *b, int nin, dl_tensor *const *in, double rtol) {
    if (!a || !b) return false;
    dl_tensor *ra[8] = {0}, *rb[8] = {0};
    int no = dl_graph_num_outputs(a);
    bool ok = no == dl_graph_num_outputs(b) && no <= 8 &&
              dl_run(ctx, a, DL_BACKEND_REF, nin, NULL, in, ra) == DL_OK &&
              dl_run(ctx, b, DL_BACKEND_REF, nin, NULL, in, rb) == DL_OK;
    for (int o = 0; ok && o < no; o++) {
        ok = ra[o]->dtype == rb[o]->dtype && ra[o]->rank == rb[o]->rank &&
             memcmp(ra[o]->dims, rb[o]->dims, sizeof(int64_t) * (size_t)ra[o]->rank) == 0;
        double scale = 0;
        for (int64_t i = 0; ok && i < ra[o]->numel; i++) scale = fmax(scale, fabs(dl_get_f64(ra[o], i)));
        for (int64_t i = 0; ok && i < ra[o]->numel; i++) {
            double x = dl_get_f64(ra[o], i), y = dl_get_f64(rb[o], i);
            ok = rtol == 0 ? (x == y || (isnan(x) && isnan(y))) : fabs(x - y) <= rtol * scale;
        }
    }
    for (int o = 0; o < 8; o++) {
        dl_tensor_free(ra[o]);
        dl_tensor_free(rb[o]);
    }
    return ok;
}

/* Checks that g and its optimized clone o agree on one seeded input of the given shape (see
 * same_results), then frees both graphs. */
static void check_same_and_free(const char *name, dl_graph *g, dl_graph *o, int rank,
                                const int64_t *dims, double rtol) {
    dl_tensor *in = tf32(rank, dims, 7, 0);
    CHECK(name, same_results(g, o, 1, &in, rtol));
    dl_tensor_free(in);
    dl_graph_free(o);
    dl_graph_free(g);
}

/* ---- constant folding ---- */

static void test_fold(void) {
    dl_graph *g = dl_graph_new(ctx);
    const int64_t xd[] = {2, 3}, cd[] = {3}, wd[] = {4, 3};
    dl_value *x = dl_input(g, "x", DL_F32, 2, xd, NULL);
    dl_value *m = dl_mul(g, cf32(g, 1, cd, 1), cf32(g, 1, cd, 2));
    dl_value *wt = op1(g, "Transpose", cf32(g, 2, wd, 3), NULL);
    dl_output(g, dl_matmul(g, dl_add(g, x, m), wt), "y");
    dl_graph *o = optimized(g, P_FOLD);
    CHECK("fold: Mul and Transpose of constants are gone", o && count_op(o, "Mul") == 0 &&
                                                                count_op(o, "Transpose") == 0 &&
                                                                o->nodes.len == 2);
    check_same_and_free("fold: same outputs", g, o, 2, xd, 0);

    /* Shape and Size of a fully known tensor are constants */
    g = dl_graph_new(ctx);
    x = dl_input(g, "x", DL_F32, 2, xd, NULL);
    dl_value *sz = op1(g, "Cast", op1(g, "Size", x, NULL), "to=1");
    dl_value *sh = op1(g, "Cast", op1(g, "Shape", x, NULL), "to=1");
    dl_output(g, dl_add(g, dl_mul(g, x, sz), op1(g, "ReduceSum", sh, NULL)), "y");
    o = optimized(g, P_FOLD);
    CHECK("fold: Shape and Size of known dims fold", o && count_op(o, "Shape") == 0 &&
                                                         count_op(o, "Size") == 0 &&
                                                         count_op(o, "Cast") == 0);
    check_same_and_free("fold: Shape/Size same outputs", g, o, 2, xd, 0);

    /* a kernel that fails on constants (random Dropout) stays, without an error */
    g = dl_graph_new(ctx);
    x = dl_input(g, "x", DL_F32, 1, cd, NULL);
    dl_tensor *tr;
    dl_tensor_new(ctx, DL_BOOL, 0, NULL, &tr);
    *(bool *)tr->data = true;
    dl_value *din[3] = {cf32(g, 1, cd, 4), dl_constant(g, NULL, dl_tensor_scalar_f32(ctx, 0.5f)),
                        dl_constant(g, NULL, tr)};
    dl_output(g, dl_add(g, x, op(g, "Dropout", 3, din, NULL)), "y");
    o = optimized(g, P_FOLD);
    CHECK("fold: failing kernel left alone, no error recorded",
          o && count_op(o, "Dropout") == 1 && dl_errmsg(ctx)[0] == 0);
    dl_graph_free(o);
    dl_graph_free(g);
}

/* ---- symbolic shape chains ---- */

/* Concat(Unsqueeze(Gather(Shape(v), i)) for i in idx[0..n), then the constants rest). */
static dl_value *dims_of(dl_graph *g, dl_value *v, int n, const int64_t *idx, int nrest,
                         const int64_t *rest) {
    dl_value *parts[8];
    const int64_t zero = 0;
    dl_value *shape = op1(g, "Shape", v, NULL);
    for (int i = 0; i < n; i++)
        parts[i] = op2(g, "Unsqueeze", op2(g, "Gather", shape, ci64(g, -1, &idx[i]), "axis=0"),
                       ci64(g, 1, &zero), NULL);
    if (nrest) parts[n++] = ci64(g, nrest, rest);
    return op(g, "Concat", n, parts, "axis=0");
}

static void test_symbolic_shapes(void) {
    dl_graph *g = dl_graph_new(ctx);
    const int64_t xd[] = {-1, 4, 6}, i0 = 0, i1 = 1, r1[] = {2, 12}, r2[] = {12};
    const char *syms[] = {"batch", NULL, NULL};
    dl_value *x = dl_input(g, "x", DL_F32, 3, xd, syms);
    /* y1 = reshape(x, [batch, 2, 12]) */
    dl_value *y1 = op2(g, "Reshape", x, dims_of(g, x, 1, &i0, 2, r1), NULL);
    /* y2 = reshape(y1, [batch * 2, 12]) */
    dl_value *s1 = op1(g, "Shape", y1, NULL);
    dl_value *prod = dl_mul(g, op2(g, "Gather", s1, ci64(g, -1, &i0), "axis=0"),
                            op2(g, "Gather", s1, ci64(g, -1, &i1), "axis=0"));
    dl_value *t2 = op2(g, "Concat", op2(g, "Unsqueeze", prod, ci64(g, 1, &i0), NULL),
                       ci64(g, 1, r2), "axis=0");
    dl_value *y2 = op2(g, "Reshape", y1, t2, NULL);
    /* y3 = reshape(y2, shape(x)); y4 = expand(z [batch, 1], [batch, 3]) */
    dl_value *y3 = op2(g, "Reshape", dl_relu(g, y2), op1(g, "Shape", x, NULL), NULL);
    const int64_t three = 3, sl[] = {0}, el[] = {1};
    dl_value *z = op(g, "Slice", 4, (dl_value *[]){x, ci64(g, 1, sl), ci64(g, 1, el), ci64(g, 1, &i1)}, NULL);
    z = op2(g, "ReduceSum", z, ci64(g, 1, (const int64_t[]){2}), "keepdims=0"); /* [batch, 1] */
    dl_value *y4 = op2(g, "Expand", z, dims_of(g, z, 1, &i0, 1, &three), NULL);
    dl_output(g, y1, "y1");
    dl_output(g, y3, "y3");
    dl_output(g, y4, "y4");
    CHECK("symbolic: builder loses batch before the passes (computed shape)",
          dl_graph_status(g) == DL_OK && strcmp(dl_value_dim_name(y4, 0), "batch") != 0);
    CHECK("symbolic: inference keeps batch through Reshape(t, Shape(x)) itself",
          dl_graph_status(g) == DL_OK && strcmp(dl_value_dim_name(y3, 0), "batch") == 0);
    dl_graph *o = optimized(g, p_all);
    CHECK("symbolic: shape chains are gone",
          o && count_op(o, "Shape") == 0 && count_op(o, "Gather") == 0 &&
              count_op(o, "Concat") == 0 && count_op(o, "Unsqueeze") == 0);
    bool batch_kept = o != NULL;
    for (int i = 0; o && i < 3; i++) {
        const char *nm = dl_value_dim_name(dl_graph_output(o, i), 0);
        batch_kept = batch_kept && nm && strcmp(nm, "batch") == 0;
    }
    CHECK("symbolic: every output keeps the batch symbol", batch_kept);
    CHECK("symbolic: known dims stay known", o && dl_value_dim(dl_graph_output(o, 0), 1) == 2 &&
                                                 dl_value_dim(dl_graph_output(o, 2), 1) == 3);
    const dl_node *r = o ? dl_graph_output(o, 0)->producer : NULL;
    const dl_tensor *t = r && r->n_in > 1 ? r->in[1]->constant : NULL;
    CHECK("symbolic: first Reshape target is [0,2,12]",
          t && t->numel == 3 && dl_get_i64(t, 0) == 0 && dl_get_i64(t, 1) == 2 &&
              dl_get_i64(t, 2) == 12);
    for (int64_t b = 1; b <= 3; b += 2) {
        const int64_t d[] = {b, 4, 6};
        dl_tensor *in = tf32(3, d, (unsigned)b, 0);
        CHECK("symbolic: same outputs at two batch sizes", same_results(g, o, 1, &in, 0));
        dl_tensor_free(in);
    }
    dl_graph_free(o);
    dl_graph_free(g);
}

/* ---- simplification ---- */

typedef dl_value *(*build_fn)(dl_graph *g, dl_value *r);

static dl_value *b_identity(dl_graph *g, dl_value *r) { return op1(g, "Identity", r, NULL); }
static dl_value *b_mul1(dl_graph *g, dl_value *r) { return dl_mul(g, r, cfill(g, 1, (int64_t[]){3}, 1)); }
static dl_value *b_1mul(dl_graph *g, dl_value *r) { return dl_mul(g, cfill(g, 0, NULL, 1), r); }
static dl_value *b_mul1_wide(dl_graph *g, dl_value *r) {
    return dl_mul(g, r, cfill(g, 3, (int64_t[]){4, 2, 3}, 1));
}
static dl_value *b_mul_not1(dl_graph *g, dl_value *r) {
    dl_value *c = cfill(g, 1, (int64_t[]){3}, 1);
    ((float *)c->constant->data)[2] = 2;
    return dl_mul(g, r, c);
}
static dl_value *b_add0(dl_graph *g, dl_value *r) { return dl_add(g, r, cfill(g, 2, (int64_t[]){2, 3}, 0)); }
static dl_value *b_0add(dl_graph *g, dl_value *r) { return dl_add(g, cfill(g, 1, (int64_t[]){1}, 0), r); }
static dl_value *b_sub0(dl_graph *g, dl_value *r) { return dl_sub(g, r, cfill(g, 1, (int64_t[]){1}, 0)); }
static dl_value *b_0sub(dl_graph *g, dl_value *r) { return dl_sub(g, cfill(g, 1, (int64_t[]){1}, 0), r); }
static dl_value *b_div1(dl_graph *g, dl_value *r) { return dl_div(g, r, cfill(g, 0, NULL, 1)); }
static dl_value *b_tt_id(dl_graph *g, dl_value *r) {
    return op1(g, "Transpose", op1(g, "Transpose", r, "perm=[1,0]"), "perm=[1,0]");
}
static dl_value *b_t_id(dl_graph *g, dl_value *r) { return op1(g, "Transpose", r, "perm=[0,1]"); }
static dl_value *b_rr(dl_graph *g, dl_value *r) {
    dl_value *a = op2(g, "Reshape", r, ci64(g, 2, (int64_t[]){3, 2}), NULL);
    return op2(g, "Reshape", a, ci64(g, 1, (int64_t[]){6}), NULL);
}
static dl_value *b_r_same(dl_graph *g, dl_value *r) { return op2(g, "Reshape", r, ci64(g, 2, (int64_t[]){0, -1}), NULL); }
static dl_value *b_flatten(dl_graph *g, dl_value *r) { return op1(g, "Flatten", r, "axis=1"); }
static dl_value *b_squeeze(dl_graph *g, dl_value *r) { return op1(g, "Squeeze", r, NULL); }
static dl_value *b_cast(dl_graph *g, dl_value *r) { return op1(g, "Cast", r, "to=1"); }
static dl_value *b_dropout(dl_graph *g, dl_value *r) { return op1(g, "Dropout", r, NULL); }
static dl_value *b_pad0(dl_graph *g, dl_value *r) { return op2(g, "Pad", r, ci64(g, 4, (int64_t[]){0, 0, 0, 0}), NULL); }
static dl_value *b_slice_all(dl_graph *g, dl_value *r) {
    dl_value *in[4] = {r, ci64(g, 1, (int64_t[]){0}), ci64(g, 1, (int64_t[]){1000}), ci64(g, 1, (int64_t[]){1})};
    return op(g, "Slice", 4, in, NULL);
}
static dl_value *b_slice_part(dl_graph *g, dl_value *r) {
    dl_value *in[4] = {r, ci64(g, 1, (int64_t[]){0}), ci64(g, 1, (int64_t[]){2}), ci64(g, 1, (int64_t[]){1})};
    return op(g, "Slice", 4, in, NULL);
}
static dl_value *b_concat1(dl_graph *g, dl_value *r) { return op1(g, "Concat", r, "axis=0"); }
static dl_value *b_expand(dl_graph *g, dl_value *r) { return op2(g, "Expand", r, ci64(g, 2, (int64_t[]){1, 3}), NULL); }

static void simplify_case(const char *name, build_fn f, const char *opname, int left, bool on_input) {
    dl_graph *g = dl_graph_new(ctx);
    const int64_t xd[] = {2, 3};
    dl_value *x = dl_input(g, "x", DL_F32, 2, xd, NULL);
    dl_value *y = f(g, on_input ? x : dl_relu(g, x));
    dl_output(g, y, "y");
    const char *yname = y ? dl_value_name(y) : "";
    dl_graph *o = optimized(g, P_SIMPLIFY);
    char msg[160];
    snprintf(msg, sizeof msg, "simplify %s: %d %s left", name, left, opname);
    CHECK(msg, o && count_op(o, opname) == left);
    snprintf(msg, sizeof msg, "simplify %s: output keeps its name and results", name);
    dl_tensor *in = tf32(2, xd, 3, 0);
    CHECK(msg, o && strcmp(dl_value_name(dl_graph_output(o, 0)), yname) == 0 &&
                   same_results(g, o, 1, &in, 0));
    dl_tensor_free(in);
    dl_graph_free(o);
    dl_graph_free(g);
}

static void test_simplify(void) {
    simplify_case("Identity", b_identity, "Identity", 0, false);
    simplify_case("Identity of a graph input", b_identity, "Identity", 1, true);
    simplify_case("x*1", b_mul1, "Mul", 0, false);
    simplify_case("1*x", b_1mul, "Mul", 0, false);
    simplify_case("x*1 that broadcasts wider", b_mul1_wide, "Mul", 1, false);
    simplify_case("x*c, c not all ones", b_mul_not1, "Mul", 1, false);
    simplify_case("x+0", b_add0, "Add", 0, false);
    simplify_case("0+x", b_0add, "Add", 0, false);
    simplify_case("x-0", b_sub0, "Sub", 0, false);
    simplify_case("0-x", b_0sub, "Sub", 1, false);
    simplify_case("x/1", b_div1, "Div", 0, false);
    simplify_case("Transpose of Transpose", b_tt_id, "Transpose", 0, false);
    simplify_case("identity Transpose", b_t_id, "Transpose", 0, false);
    simplify_case("Reshape of Reshape", b_rr, "Reshape", 1, false);
    simplify_case("Reshape to the same shape", b_r_same, "Reshape", 0, false);
    simplify_case("Flatten to the same shape", b_flatten, "Flatten", 0, false);
    simplify_case("Squeeze without 1s", b_squeeze, "Squeeze", 0, false);
    simplify_case("Cast to the same dtype", b_cast, "Cast", 0, false);
    simplify_case("Dropout in inference", b_dropout, "Dropout", 0, false);
    simplify_case("Pad with zero pads", b_pad0, "Pad", 0, false);
    simplify_case("Slice of everything", b_slice_all, "Slice", 0, false);
    simplify_case("Slice of a part", b_slice_part, "Slice", 1, false);
    simplify_case("Concat of one input", b_concat1, "Concat", 0, false);
    simplify_case("Expand to the same shape", b_expand, "Expand", 0, false);

    /* non-identity composition: perm [1,2,0] twice is [2,0,1] */
    dl_graph *g = dl_graph_new(ctx);
    const int64_t xd[] = {2, 3, 4};
    dl_value *x = dl_input(g, "x", DL_F32, 3, xd, NULL);
    dl_value *y = op1(g, "Transpose", op1(g, "Transpose", dl_relu(g, x), "perm=[1,2,0]"), "perm=[1,2,0]");
    dl_output(g, dl_tanh(g, y), "y");
    dl_graph *o = optimized(g, P_SIMPLIFY);
    const int64_t *perm = NULL;
    const dl_node *t = o ? dl_graph_output(o, 0)->producer->in[0]->producer : NULL;
    CHECK("simplify: Transposes compose into one with perm [2,0,1]",
          o && count_op(o, "Transpose") == 1 && t && dl_attr_ints(t, "perm", &perm) == 3 &&
              perm[0] == 2 && perm[1] == 0 && perm[2] == 1);
    check_same_and_free("simplify: composed Transpose same outputs", g, o, 3, xd, 0);
}

/* ---- BatchNormalization folding ---- */

/* BN(v) with random parameters for C channels (positive variance). */
static dl_value *bn(dl_graph *g, dl_value *v, int64_t C, unsigned seed) {
    dl_value *in[5] = {v, dl_constant(g, NULL, tf32(1, &C, seed, 0.5f)), cf32(g, 1, &C, seed + 1),
                       cf32(g, 1, &C, seed + 2), dl_constant(g, NULL, tf32(1, &C, seed + 3, 0.5f))};
    return op(g, "BatchNormalization", 5, in, "epsilon=0.001");
}

static void bn_case(const char *name, dl_graph *g, const char *producer, int nin, dl_tensor **in) {
    dl_graph *o = optimized(g, P_BN);
    char msg[160];
    snprintf(msg, sizeof msg, "bn %s: BN gone, one %s", name, producer);
    CHECK(msg, o && count_op(o, "BatchNormalization") == 0 && count_op(o, producer) == 1);
    snprintf(msg, sizeof msg, "bn %s: outputs within 1e-5", name);
    CHECK(msg, same_results(g, o, nin, in, 1e-5));
    for (int i = 0; i < nin; i++) dl_tensor_free(in[i]);
    dl_graph_free(o);
    dl_graph_free(g);
}

static void test_batchnorm(void) {
    for (int with_bias = 0; with_bias < 2; with_bias++) {
        dl_graph *g = dl_graph_new(ctx);
        const int64_t xd[] = {-1, 3, 6, 6}, wd[] = {4, 3, 3, 3}, bd[] = {4}, rd[] = {2, 3, 6, 6};
        const char *syms[] = {"N", NULL, NULL, NULL};
        dl_value *x = dl_input(g, "x", DL_F32, 4, xd, syms);
        dl_value *c = dl_conv2d(g, x, cf32(g, 4, wd, 11), with_bias ? cf32(g, 1, bd, 12) : NULL, 1, 1);
        dl_output(g, dl_relu(g, bn(g, c, 4, 20)), "y");
        dl_tensor *in = tf32(4, rd, 9, 0);
        bn_case(with_bias ? "into Conv with bias" : "into Conv without bias", g, "Conv", 1, &in);
    }
    /* BN alone: Mul + Add */
    dl_graph *g = dl_graph_new(ctx);
    const int64_t xd[] = {2, 3, 4, 4};
    dl_output(g, bn(g, dl_input(g, "x", DL_F32, 4, xd, NULL), 3, 30), "y");
    dl_tensor *in = tf32(4, xd, 4, 0);
    bn_case("alone becomes Mul+Add", g, "Mul", 1, &in);
    /* Gemm transB=1 with a bias and beta, Gemm transB=0 without */
    for (int tb = 0; tb < 2; tb++) {
        g = dl_graph_new(ctx);
        const int64_t ad[] = {2, 5}, bt[] = {4, 5}, bn_d[] = {5, 4}, cd[] = {4};
        dl_value *a = dl_input(g, "a", DL_F32, 2, ad, NULL);
        dl_value *gin[3] = {a, cf32(g, 2, tb ? bt : bn_d, 40), cf32(g, 1, cd, 41)};
        dl_value *y = op(g, "Gemm", tb ? 3 : 2, gin, tb ? "transB=1;beta=0.5;alpha=2" : NULL);
        dl_output(g, bn(g, y, 4, 50), "y");
        in = tf32(2, ad, 6, 0);
        bn_case(tb ? "into Gemm transB=1 with bias" : "into Gemm transB=0", g, "Gemm", 1, &in);
    }
    /* MatMul + Add, and MatMul alone (an Add is created) */
    for (int add = 0; add < 2; add++) {
        g = dl_graph_new(ctx);
        const int64_t ad[] = {3, 5}, wd[] = {5, 4}, cd[] = {4};
        dl_value *y = dl_matmul(g, dl_input(g, "a", DL_F32, 2, ad, NULL), cf32(g, 2, wd, 60));
        if (add) y = dl_add(g, cf32(g, 1, cd, 61), y);
        dl_output(g, bn(g, y, 4, 70), "y");
        in = tf32(2, ad, 7, 0);
        bn_case(add ? "into MatMul+Add" : "into MatMul", g, "MatMul", 1, &in);
    }
    /* a BN whose scale is a graph input stays */
    g = dl_graph_new(ctx);
    const int64_t cd[] = {3};
    dl_value *bin[5] = {dl_input(g, "x", DL_F32, 4, xd, NULL), dl_input(g, "s", DL_F32, 1, cd, NULL),
                        cf32(g, 1, cd, 1), cf32(g, 1, cd, 2), dl_constant(g, NULL, tf32(1, cd, 3, 0.5f))};
    dl_output(g, op(g, "BatchNormalization", 5, bin, NULL), "y");
    dl_graph *o = optimized(g, P_BN);
    CHECK("bn: non-constant scale is left alone", o && count_op(o, "BatchNormalization") == 1);
    dl_graph_free(o);
    dl_graph_free(g);
}

/* ---- CSE and DCE ---- */

static void test_cse_dce(void) {
    dl_graph *g = dl_graph_new(ctx);
    const int64_t xd[] = {2, 3}, cd[] = {3};
    dl_value *x = dl_input(g, "x", DL_F32, 2, xd, NULL);
    dl_value *a = dl_add(g, dl_relu(g, x), dl_relu(g, x));
    dl_value *m = dl_add(g, dl_mul(g, x, cf32(g, 1, cd, 5)), dl_mul(g, x, cf32(g, 1, cd, 5)));
    dl_value *s = dl_add(g, dl_softmax(g, x, 0), dl_softmax(g, x, 1));
    dl_output(g, dl_add(g, dl_add(g, a, m), s), "y");
    dl_graph *o = optimized(g, P_CSE);
    CHECK("cse: identical Relu nodes merge", o && count_op(o, "Relu") == 1);
    CHECK("cse: identical constants merge, then their Muls", o && count_op(o, "Mul") == 1);
    CHECK("cse: different attributes do not merge", o && count_op(o, "Softmax") == 2);
    dl_tensor *in = tf32(2, xd, 2, 0);
    CHECK("cse: same outputs", same_results(g, o, 1, &in, 0));
    dl_graph_free(o);
    dl_graph_free(g);

    g = dl_graph_new(ctx);
    x = dl_input(g, "x", DL_F32, 2, xd, NULL);
    dl_value *unused = dl_mul(g, dl_relu(g, x), cf32(g, 1, cd, 9));
    dl_output(g, dl_tanh(g, x), "y");
    const char *unused_const = dl_value_name(unused->producer->in[1]);
    o = optimized(g, P_DCE);
    CHECK("dce: unused branch and its constant are gone",
          o && o->nodes.len == 1 && count_op(o, "Tanh") == 1 &&
              !dl_graph_find_value(o, unused_const) && o->values.len == 2);
    CHECK("dce: names still resolve after dropping values",
          o && dl_graph_find_value(o, "x") == dl_graph_input(o, 0) &&
              dl_graph_find_value(o, dl_value_name(dl_graph_output(g, 0))) == dl_graph_output(o, 0));
    CHECK("dce: same outputs", same_results(g, o, 1, &in, 0));
    dl_tensor_free(in);
    dl_graph_free(o);
    dl_graph_free(g);
}

/* ---- pipeline: dumps, errors, clones ---- */

static void test_pipeline(void) {
    dl_graph *g = dl_graph_new(ctx);
    const int64_t xd[] = {2, 3};
    dl_value *x = dl_input(g, "x", DL_F32, 2, xd, NULL);
    dl_output(g, op1(g, "Identity", dl_relu(g, x), NULL), "y");
    int before = g->nodes.len;
    dl_graph *c;
    CHECK("pipeline: clone", dl_graph_clone(g, false, &c) == DL_OK);
    FILE *f = tmpfile();
    dl_pass_ctx pc = {.ctx = ctx, .g = c, .dump_ir = "simplify", .dump_to = f};
    CHECK("pipeline: runs with --dump-ir simplify", dl_run_passes(&pc, p_all) == DL_OK);
    char text[8192] = "";
    rewind(f);
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = 0;
    fclose(f);
    CHECK("pipeline: dump has a header per simplify run and the nodes",
          strstr(text, "=== after simplify (1 changes)") && strstr(text, "nodes:") &&
              strstr(text, "Relu") && !strstr(text, "=== after dce"));
    CHECK("pipeline: the source graph is untouched", g->nodes.len == before && c->nodes.len == 1 &&
                                                         count_op(g, "Identity") == 1);
    dl_graph_free(c);

    dl_graph_clone(g, false, &c);
    pc = (dl_pass_ctx){.ctx = ctx, .g = c, .dump_ir = "no_such_pass"};
    CHECK("pipeline: unknown --dump-ir pass is an error naming the valid ones",
          dl_run_passes(&pc, dl_inference_passes) == DL_ERR_INVALID &&
              strstr(dl_errmsg(ctx), "no_such_pass") && strstr(dl_errmsg(ctx), "fold_constants") &&
              strstr(dl_errmsg(ctx), "all"));
    dl_ctx_clear(ctx);
    dl_graph_free(c);

    /* a deep clone outlives its source */
    const int64_t cd[] = {3};
    dl_graph *h = dl_graph_new(ctx);
    x = dl_input(h, "x", DL_F32, 2, xd, NULL);
    dl_output(h, dl_add(h, x, cf32(h, 1, cd, 3)), "y");
    dl_tensor *in = tf32(2, xd, 1, 0), *r1 = NULL, *r2 = NULL;
    dl_run(ctx, h, DL_BACKEND_REF, 1, NULL, &in, &r1);
    CHECK("pipeline: deep clone", dl_graph_clone(h, true, &c) == DL_OK);
    dl_graph_free(h);
    CHECK("pipeline: deep clone runs after its source is freed",
          dl_run(ctx, c, DL_BACKEND_REF, 1, NULL, &in, &r2) == DL_OK && r1 &&
              memcmp(r1->data, r2->data, r1->nbytes) == 0);
    dl_tensor_free(in);
    dl_tensor_free(r1);
    dl_tensor_free(r2);
    dl_graph_free(c);
    dl_graph_free(g);
}

/* A small CNN with a symbolic batch through the whole pipeline. */
static dl_graph *small_cnn(void) {
    dl_graph *g = dl_graph_new(ctx);
    const int64_t xd[] = {-1, 3, 8, 8}, wd[] = {4, 3, 3, 3}, fd[] = {10, 4}, bd[] = {10};
    const char *syms[] = {"N", NULL, NULL, NULL};
    dl_value *x = dl_input(g, "x", DL_F32, 4, xd, syms);
    dl_value *h = dl_relu(g, bn(g, dl_conv2d(g, x, cf32(g, 4, wd, 1), NULL, 1, 1), 4, 2));
    h = dl_flatten(g, dl_global_avgpool(g, dl_maxpool2d(g, h, 2, 2)), 1);
    dl_output(g, dl_softmax(g, dl_gemm(g, h, cf32(g, 2, fd, 3), cf32(g, 1, bd, 4), 1), 1), "p");
    return g;
}

static void test_whole_pipeline(void) {
    dl_graph *g = small_cnn();
    dl_graph *o = optimized(g, p_all);
    CHECK("whole pipeline: BN folded, batch symbol kept",
          o && count_op(o, "BatchNormalization") == 0 &&
              strcmp(dl_value_dim_name(dl_graph_output(o, 0), 0), "N") == 0);
    for (int64_t b = 1; b <= 3; b += 2) {
        const int64_t d[] = {b, 3, 8, 8};
        dl_tensor *in = tf32(4, d, 17, 0);
        CHECK("whole pipeline: outputs within 1e-5", same_results(g, o, 1, &in, 1e-5));
        dl_tensor_free(in);
    }
    dl_graph_free(o);
    dl_graph_free(g);
}

/* Every allocation of the pipeline failing in turn: an error, never a crash or a leak. */
static void test_alloc_failures(void) {
    dl_graph *g = small_cnn();
    int fails = 0, ok_at = -1;
    for (long n = 0; n < 5000 && ok_at < 0; n++) {
        dl_graph *c = NULL;
        dl_alloc_fail_after(n);
        dl_status s = dl_graph_clone(g, false, &c);
        dl_pass_ctx pc = {.ctx = ctx, .g = c};
        if (s == DL_OK) s = dl_run_passes(&pc, p_all);
        dl_alloc_fail_after(-1);
        if (s == DL_OK) ok_at = (int)n;
        else if (s != DL_ERR_NOMEM) fails++;
        dl_graph_free(c);
        dl_ctx_clear(ctx);
    }
    if (getenv("VERBOSE")) printf("alloc failures: pipeline succeeds from allocation %d on\n", ok_at);
    CHECK("alloc failures: each one reported as out of memory", fails == 0 && ok_at > 0);
    dl_graph_free(g);
}

/* Gemm reads a matrix Transpose through its flags; Transpose(Gemm without C) swaps operands. */
static void test_gemm_transposes(void) {
    for (int variant = 0; variant < 4; variant++) {
        dl_graph *g = dl_graph_new(ctx);
        int64_t xd[2] = {-1, 5}, wd[2] = {5, 4}, w2d[2] = {3, 5};
        const char *sym[2] = {"N", NULL};
        dl_value *x = dl_input(g, "x", DL_F32, 2, xd, sym), *y;
        const char *name;
        if (variant == 0) { /* Gemm(x, Transpose(W)) */
            y = op2(g, "Gemm", x, op1(g, "Transpose", cf32(g, 2, (int64_t[]){4, 5}, 3), "perm=[1,0]"), "alpha=0.5");
            name = "simplify: Gemm(x, Transpose(W)) reads W with transB";
        } else if (variant == 1) { /* Gemm(Transpose(Transpose(x)), W, transA=0) and transB=1 */
            dl_value *xt = op1(g, "Transpose", x, "perm=[1,0]");
            y = op2(g, "Gemm", op1(g, "Transpose", xt, NULL), cf32(g, 2, w2d, 4), "transB=1");
            name = "simplify: Gemm of a Transpose chain";
        } else if (variant == 2) { /* Transpose(Gemm(x, W)) -> Gemm(W, x, 1, 1) */
            y = op1(g, "Transpose", op2(g, "Gemm", x, cf32(g, 2, wd, 5), "transA=0;alpha=2.0"), "perm=[1,0]");
            name = "simplify: Transpose(Gemm) becomes one Gemm";
        } else { /* Transpose(Gemm) with C stays */
            dl_value *in3[3] = {x, cf32(g, 2, wd, 6), cf32(g, 1, (int64_t[]){4}, 7)};
            y = op1(g, "Transpose", op(g, "Gemm", 3, in3, NULL), "perm=[1,0]");
            name = "simplify: Transpose(Gemm with C) is kept";
        }
        dl_output(g, y, "y");
        dl_graph *o = optimized(g, P_SIMPLIFY);
        int want = variant == 3 ? 1 : 0;
        char nm[160];
        snprintf(nm, sizeof nm, "%s (transposes left: %d)", name, o ? count_op(o, "Transpose") : -1);
        CHECK(nm, o && count_op(o, "Transpose") == want && count_op(o, "Gemm") == 1);
        int64_t dims[2] = {3, 5};
        check_same_and_free(name, g, o, 2, dims, 1e-6);
    }
}

/* Conv(Pad(x)) -> Conv(x) with the pads added to its own, only where the Pad adds zeros around
 * the spatial dims and nothing else reads the padded tensor. */
static void test_conv_pads(void) {
    static const struct {
        const char *name;
        int64_t pads[8];    /* the Pad's: begins then ends of [N, C, H, W] */
        const char *mode;   /* NULL: constant */
        float value;        /* the constant (an input) */
        const char *conv;   /* the Conv's attributes */
        bool padded_output; /* the padded tensor is a graph output too */
        bool absorbed;
    } cases[] = {
        {"asymmetric pads into a Conv with its own",
         {0, 0, 1, 2, 0, 0, 2, 1},
         NULL,
         0,
         "kernel_shape=[3,3];pads=[1,0,0,1]",
         false,
         true},
        {"pads into a strided, dilated Conv without pads",
         {0, 0, 0, 1, 0, 0, 3, 0},
         NULL,
         0,
         "kernel_shape=[2,3];strides=[2,1];dilations=[1,2]",
         false,
         true},
        {"pads of 0.5: kept",
         {0, 0, 1, 1, 0, 0, 1, 1},
         NULL,
         0.5f,
         "kernel_shape=[3,3]",
         false,
         false},
        {"pads of -0: kept",
         {0, 0, 1, 1, 0, 0, 1, 1},
         NULL,
         -0.0f,
         "kernel_shape=[3,3]",
         false,
         false},
        {"channel pads: kept",
         {0, 1, 1, 1, 0, 0, 1, 1},
         NULL,
         0,
         "kernel_shape=[3,3]",
         false,
         false},
        {"cropping pads: kept",
         {0, 0, -1, 1, 0, 0, 1, 1},
         NULL,
         0,
         "kernel_shape=[3,3]",
         false,
         false},
        {"reflect mode: kept",
         {0, 0, 1, 1, 0, 0, 1, 1},
         "reflect",
         0,
         "kernel_shape=[3,3]",
         false,
         false},
        {"a Conv with auto_pad: kept",
         {0, 0, 1, 1, 0, 0, 1, 1},
         NULL,
         0,
         "kernel_shape=[3,3];auto_pad=SAME_UPPER",
         false,
         false},
        {"a padded tensor also read as an output: kept",
         {0, 0, 1, 1, 0, 0, 1, 1},
         NULL,
         0,
         "kernel_shape=[3,3]",
         true,
         false},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        dl_graph *g = dl_graph_new(ctx);
        const int64_t cin = 3 + cases[c].pads[1] + cases[c].pads[5];
        const int64_t xd[] = {2, 3, 9, 8}, wd[] = {4, cin, 2, 3}, wd3[] = {4, cin, 3, 3};
        dl_value *x = dl_input(g, "x", DL_F32, 4, xd, NULL);
        float v = cases[c].value;
        dl_tensor *vt = NULL;
        if (dl_tensor_new(ctx, DL_F32, 0, NULL, &vt) == DL_OK) *(float *)vt->data = v;
        dl_value *pin[3] = {dl_relu(g, x), ci64(g, 8, cases[c].pads), dl_constant(g, NULL, vt)};
        char mode[32];
        snprintf(mode, sizeof mode, "mode=%s", cases[c].mode ? cases[c].mode : "constant");
        dl_value *padded = op(g, "Pad", 3, pin, mode);
        const bool k23 = strstr(cases[c].conv, "[2,3]") != NULL;
        dl_value *w = cf32(g, 4, k23 ? wd : wd3, 11);
        dl_output(g, op2(g, "Conv", padded, w, cases[c].conv), "y");
        if (cases[c].padded_output) dl_output(g, padded, "p");
        dl_graph *o = optimized(g, P_SIMPLIFY);
        char nm[200];
        snprintf(nm, sizeof nm, "simplify: %s (Pads left: %d)", cases[c].name,
                 o ? count_op(o, "Pad") : -1);
        CHECK(nm,
              o && count_op(o, "Pad") == (cases[c].absorbed ? 0 : 1) && count_op(o, "Conv") == 1);
        snprintf(nm, sizeof nm, "simplify: %s: same outputs", cases[c].name);
        check_same_and_free(nm, g, o, 4, xd, 0);
    }
}

int main(void) {
    ctx = dl_ctx_new();
    int k = 0;
    for (const dl_pass *p = dl_inference_passes; p->name && k < 31; p++)
        if (strcmp(p->name, "fuse") != 0) p_all[k++] = *p;
    test_fold();
    test_symbolic_shapes();
    test_simplify();
    test_gemm_transposes();
    test_conv_pads();
    test_batchnorm();
    test_cse_dce();
    test_pipeline();
    test_whole_pipeline();
    test_alloc_failures();
    dl_ctx_free(ctx);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
