/* test_matmul_trans.c — a MatMul group reads an operand through the Transpose that feeds it
 * (fuse.c): when that Transpose swaps the last two axes, has no other consumer and is no graph
 * output, the GEMM reads its input with the trans flag and the Transpose never runs. Graphs are
 * built with the C API, compiled, and compared with the reference interpreter; the fusion says
 * which Transposes were absorbed (and how many transpose kernels are left), and cases that must
 * not absorb (two consumers, an output, another perm, float64) keep their Transpose. */
#include "../../src/codegen/emit-params.h"
#include "../../src/runtime/profile.h"

#include <math.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "test-cache.h"
#include "native-ref.h"

#include "test-rng.h"

static dl_tensor *rand_tensor(dl_ctx *ctx, dl_dtype dt, int rank, const int64_t *dims) {
    dl_tensor *t = NULL;
    if (dl_tensor_new(ctx, dt, rank, dims, &t) != DL_OK) return NULL;
    for (int64_t i = 0; i < t->numel; i++) dl_set_f64(t, i, frand());
    return t;
}

static dl_compile_options opts;
static char cache_dir[] = "/tmp/dlcc-test-mmtrans-XXXXXX";

/* Steps that run a Transpose on its own (a kernel or its reference kernel). */
static int count_transpose_steps(const dl_program *p) {
    int n = 0;
    for (int gi = 0; gi < p->fusion->n; gi++) {
        const dl_group *gr = &p->fusion->groups[gi];
        n += gr->n_nodes == 1 && dl_node_is(gr->nodes[0], "Transpose");
    }
    return n;
}

static int count_kind(const dl_program *p, dl_gkind k) {
    int n = 0;
    for (int gi = 0; gi < p->fusion->n; gi++) n += p->fusion->groups[gi].kind == k;
    return n;
}

/* Transposes absorbed by MatMul groups (each A and each B counts one). */
static int count_absorbed(const dl_program *p) {
    int n = 0;
    for (int gi = 0; gi < p->fusion->n; gi++) {
        const dl_group *gr = &p->fusion->groups[gi];
        if (gr->kind != DL_G_MATMUL) continue;
        n += (gr->mm.a_tr != NULL) + (gr->mm.b_tr != NULL);
    }
    return n;
}

/* The MatMul group with an absorbed Transpose, or NULL. */
static const dl_group *absorbing_group(const dl_program *p) {
    for (int gi = 0; gi < p->fusion->n; gi++) {
        const dl_group *gr = &p->fusion->groups[gi];
        if (gr->kind == DL_G_MATMUL && (gr->mm.a_tr || gr->mm.b_tr)) return gr;
    }
    return NULL;
}

typedef struct shape {
    int rank;
    int64_t dims[6];
} shape;

#define MAX_IN   3
#define MAX_RUNS 2

/* One graph: the concrete shapes of its inputs per run (symbolic dims take several sizes). */
typedef struct mcase {
    const char *name;
    dl_dtype dtype;
    int n_in, n_runs;
    shape in[MAX_RUNS][MAX_IN];
    int want_a, want_b;  /* Transposes absorbed as A / as B */
    int want_transposes; /* Transposes left as steps of their own */
    double tol;          /* 0: 1e-5 */
} mcase;

/* Compiles g, checks the absorption counts and compares with the reference for every run. Returns
 * the program (the caller frees it) or NULL. */
static dl_program *run_case(dl_ctx *ctx, dl_graph *g, const mcase *c) {
    char name[200];
    snprintf(name, sizeof name, "%s: graph builds", c->name);
    CHECK(name, dl_graph_status(g) == DL_OK);
    if (dl_graph_status(g) != DL_OK) {
        printf("  %s\n", dl_errmsg(ctx));
        return NULL;
    }
    dl_program *p = NULL;
    snprintf(name, sizeof name, "%s: compiles", c->name);
    dl_status s = dl_compile(ctx, g, &opts, &p);
    CHECK(name, s == DL_OK);
    if (s != DL_OK) {
        printf("  %s\n", dl_errmsg(ctx));
        return NULL;
    }
    int ta = 0, tb = 0;
    for (int gi = 0; gi < p->fusion->n; gi++) {
        const dl_group *gr = &p->fusion->groups[gi];
        if (gr->kind != DL_G_MATMUL) continue;
        ta += gr->mm.a_tr != NULL;
        tb += gr->mm.b_tr != NULL;
    }
    snprintf(name, sizeof name, "%s: %d transposed A and %d transposed B absorbed (got %d, %d)",
             c->name, c->want_a, c->want_b, ta, tb);
    CHECK(name, ta == c->want_a && tb == c->want_b);
    int nt = count_transpose_steps(p);
    snprintf(name, sizeof name, "%s: %d transpose steps left (got %d)", c->name, c->want_transposes,
             nt);
    CHECK(name, nt == c->want_transposes);
    for (int r = 0; r < c->n_runs; r++) {
        dl_tensor *in[MAX_IN] = {0};
        for (int i = 0; i < c->n_in; i++)
            in[i] = rand_tensor(ctx, c->dtype, c->in[r][i].rank, c->in[r][i].dims);
        double e = native_vs_ref(ctx, g, p, c->n_in, in);
        snprintf(name, sizeof name, "%s: run %d matches the reference (max rel err %.2g)", c->name,
                 r + 1, e);
        CHECK(name, e <= (c->tol > 0 ? c->tol : 1e-5));
        for (int i = 0; i < c->n_in; i++) dl_tensor_free(in[i]);
    }
    return p;
}

static void finish(dl_program *p, dl_graph *g) {
    dl_program_free(p);
    dl_graph_free(g);
}

static dl_value *input(dl_graph *g, const char *name, const shape *s, const char *const *syms) {
    int64_t d[6];
    for (int i = 0; i < s->rank; i++) d[i] = syms && syms[i] ? -1 : s->dims[i];
    return dl_input(g, name, DL_F32, s->rank, d, syms);
}

/* Transpose(x) with attributes perm ("" for none: dims reversed). */
static dl_value *tr(dl_graph *g, dl_value *x, const char *perm) {
    return dl_op1(g, "Transpose", x, *perm ? perm : NULL);
}

/* MatMul(op(x), op(w)) with op a last-two swap where asked, at the given shapes (of x and w as
 * stored). */
static void plain_case_tol(dl_ctx *ctx, const char *what, shape xs, shape ws, const char *perm_a,
                           const char *perm_b, double tol) {
    dl_graph *g = dl_graph_new(ctx);
    dl_value *x = input(g, "x", &xs, NULL), *w = input(g, "w", &ws, NULL);
    dl_value *a = perm_a ? tr(g, x, perm_a) : x, *b = perm_b ? tr(g, w, perm_b) : w;
    dl_output(g, dl_matmul(g, a, b), "y");
    mcase c = {.name = what,
               .dtype = DL_F32,
               .n_in = 2,
               .n_runs = 1,
               .in = {{xs, ws}},
               .want_a = perm_a != NULL,
               .want_b = perm_b != NULL,
               .tol = tol};
    finish(run_case(ctx, g, &c), g);
}

static void plain_case(dl_ctx *ctx, const char *what, shape xs, shape ws, const char *perm_a,
                       const char *perm_b) {
    plain_case_tol(ctx, what, xs, ws, perm_a, perm_b, 0);
}

static void test_plain(dl_ctx *ctx) {
    /* 2-D: perm given and perm absent (reversed dims = the swap) */
    plain_case(ctx, "2-D A^T", (shape){2, {13, 9}}, (shape){2, {13, 11}}, "perm=[1,0]", NULL);
    plain_case(ctx, "2-D B^T", (shape){2, {9, 13}}, (shape){2, {11, 13}}, NULL, "perm=[1,0]");
    plain_case(ctx, "2-D B^T (no perm)", (shape){2, {9, 13}}, (shape){2, {11, 13}}, NULL, "");
    plain_case(ctx, "2-D A^T B^T", (shape){2, {13, 9}}, (shape){2, {11, 13}}, "", "perm=[1,0]");
    /* batched, same batch */
    plain_case(ctx, "3-D A^T", (shape){3, {2, 13, 9}}, (shape){3, {2, 13, 11}}, "perm=[0,2,1]",
               NULL);
    plain_case(ctx, "3-D B^T", (shape){3, {2, 9, 13}}, (shape){3, {2, 11, 13}}, NULL,
               "perm=[0,2,1]");
    plain_case(ctx, "4-D A^T B^T", (shape){4, {2, 3, 13, 9}}, (shape){4, {2, 3, 11, 13}},
               "perm=[0,1,3,2]", "perm=[0,1,3,2]");
    plain_case(ctx, "5-D B^T", (shape){5, {2, 1, 3, 5, 7}}, (shape){5, {2, 2, 3, 6, 7}}, NULL,
               "perm=[0,1,2,4,3]");
    /* broadcasting: a batched operand against a plain matrix, and batch dims of size 1 */
    plain_case(ctx, "A^T [2,3,K,M] with B [K,N]", (shape){4, {2, 3, 13, 9}}, (shape){2, {13, 11}},
               "perm=[0,1,3,2]", NULL);
    plain_case(ctx, "A [M,K] with B^T [4,N,K]", (shape){2, {9, 13}}, (shape){3, {4, 11, 13}}, NULL,
               "perm=[0,2,1]");
    plain_case(ctx, "A^T [2,1,K,M] with B^T [3,N,K]", (shape){4, {2, 1, 13, 9}},
               (shape){3, {3, 11, 13}}, "perm=[0,1,3,2]", "perm=[0,2,1]");
    plain_case(ctx, "A^T [K,M] with B [2,K,N]", (shape){2, {13, 9}}, (shape){3, {2, 13, 11}},
               "perm=[1,0]", NULL);
    /* vectors on the other side */
    plain_case(ctx, "A^T with B a vector", (shape){2, {13, 9}}, (shape){1, {13}}, "perm=[1,0]",
               NULL);
    plain_case(ctx, "batched A^T with B a vector", (shape){3, {3, 13, 9}}, (shape){1, {13}},
               "perm=[0,2,1]", NULL);
    plain_case(ctx, "A a vector with B^T", (shape){1, {13}}, (shape){2, {11, 13}}, NULL,
               "perm=[1,0]");
    plain_case(ctx, "A a vector with batched B^T", (shape){1, {13}}, (shape){3, {3, 11, 13}}, NULL,
               "perm=[0,2,1]");
    /* sizes past the GEMM's register tiles and cache blocks (several panels, K blocks); sums
     * of 300 products in another order than the reference's differ by up to ~4e-5 relative,
     * untransposed operands as much */
    plain_case_tol(ctx, "large A^T B^T", (shape){3, {2, 300, 70}}, (shape){3, {2, 50, 300}},
                   "perm=[0,2,1]", "perm=[0,2,1]", 1e-4);
    plain_case_tol(ctx, "large B^T", (shape){2, {70, 300}}, (shape){2, {50, 300}}, NULL,
                   "perm=[1,0]", 1e-4);
}

/* A constant B (packed once) against a batched transposed A; a constant transposed B is folded
 * by the passes before fusion, so only the value matters there. */
static void test_constant_b(dl_ctx *ctx) {
    dl_graph *g = dl_graph_new(ctx);
    shape xs = {4, {2, 3, 13, 9}};
    dl_value *x = input(g, "x", &xs, NULL);
    dl_value *w = dl_constant(g, "w", rand_tensor(ctx, DL_F32, 2, (int64_t[]){13, 11}));
    dl_output(g, dl_matmul(g, tr(g, x, "perm=[0,1,3,2]"), w), "y");
    mcase c = {.name = "A^T batched with a constant B",
               .dtype = DL_F32,
               .n_in = 1,
               .n_runs = 1,
               .in = {{xs}},
               .want_a = 1};
    finish(run_case(ctx, g, &c), g);
}

/* The scratch a MatMul group asks the planner for (dl_group_workspace): A packed once, and B too
 * unless it is a weight packed at load (a training step's products of two activations, whose B
 * was otherwise packed again by every row of tiles). Shapes big enough that several tiles share
 * each operand on every instruction set; both programs still match the reference. */
static void test_workspace(dl_ctx *ctx) {
    enum { M = 300, N = 400, K = 200 };
    for (int weight = 0; weight < 2; weight++) {
        dl_graph *g = dl_graph_new(ctx);
        shape xs = {2, {M, K}}, ws = {2, {K, N}};
        dl_value *x = input(g, "x", &xs, NULL);
        dl_value *w = weight ? dl_constant(g, "w", rand_tensor(ctx, DL_F32, 2, ws.dims))
                             : input(g, "w", &ws, NULL);
        dl_output(g, dl_matmul(g, x, w), "y");
        mcase c = {.name = weight ? "workspace: constant B" : "workspace: B an input",
                   .dtype = DL_F32,
                   .n_in = weight ? 1 : 2,
                   .n_runs = 1,
                   .in = {{xs, ws}},
                   .tol = 1e-4};
        dl_program *p = run_case(ctx, g, &c);
        size_t got = 0;
        for (int gi = 0; p && gi < p->fusion->n; gi++)
            if (p->fusion->groups[gi].kind == DL_G_MATMUL)
                got = dl_group_workspace(&p->fusion->groups[gi], NULL);
        const size_t want = dlrt_gemm_workspace(M, N, K, 0, weight);
        char name[160];
        snprintf(name, sizeof name, "%s: %zu workspace bytes (got %zu; A alone %zu)", c.name, want,
                 got, dlrt_gemm_workspace(M, N, K, 0, 1));
        CHECK(name, p && want > 0 && got == want);
        finish(p, g);
    }
}

/* Symbolic sizes: a batch symbol, and a symbolic M that becomes A's leading dim once
 * transposed. One program runs two sizes. */
static void test_symbolic(dl_ctx *ctx) {
    {
        dl_graph *g = dl_graph_new(ctx);
        const char *syms[] = {"batch", NULL, NULL, NULL};
        shape xs = {4, {0, 3, 13, 9}}, ws = {4, {1, 3, 11, 13}};
        dl_value *x = input(g, "x", &xs, syms), *w = input(g, "w", &ws, NULL);
        dl_output(g, dl_matmul(g, tr(g, x, "perm=[0,1,3,2]"), tr(g, w, "perm=[0,1,3,2]")), "y");
        mcase c = {.name = "symbolic batch A^T B^T",
                   .dtype = DL_F32,
                   .n_in = 2,
                   .n_runs = 2,
                   .in = {{{4, {1, 3, 13, 9}}, ws}, {{4, {4, 3, 13, 9}}, ws}},
                   .want_a = 1,
                   .want_b = 1};
        finish(run_case(ctx, g, &c), g);
    }
    {
        dl_graph *g = dl_graph_new(ctx);
        const char *syms[] = {NULL, "m"};
        shape xs = {2, {13, 0}}, ws = {2, {13, 11}};
        dl_value *x = input(g, "x", &xs, syms), *w = input(g, "w", &ws, NULL);
        dl_output(g, dl_matmul(g, tr(g, x, "perm=[1,0]"), w), "y");
        mcase c = {.name = "symbolic M of a transposed A",
                   .dtype = DL_F32,
                   .n_in = 2,
                   .n_runs = 2,
                   .in = {{{2, {13, 5}}, ws}, {{2, {13, 70}}, ws}},
                   .want_a = 1};
        finish(run_case(ctx, g, &c), g);
    }
}

/* The epilogue still fuses after an absorbed Transpose: bias, residual, Relu in one kernel. */
static void epilogue_case(dl_ctx *ctx, const char *what, shape xs, shape ws, const char *perm_a,
                          const char *perm_b, const char *const *syms, shape run_x) {
    dl_graph *g = dl_graph_new(ctx);
    int yr = xs.rank > ws.rank ? xs.rank : ws.rank;
    shape rs = {yr, {0}};
    for (int d = 0; d < yr - 2; d++) rs.dims[d] = xs.rank >= ws.rank ? xs.dims[d] : ws.dims[d];
    rs.dims[yr - 2] = perm_a ? xs.dims[xs.rank - 1] : xs.dims[xs.rank - 2];
    rs.dims[yr - 1] = perm_b ? ws.dims[ws.rank - 2] : ws.dims[ws.rank - 1];
    dl_value *x = input(g, "x", &xs, syms), *w = input(g, "w", &ws, NULL);
    dl_value *res = input(g, "res", &rs, syms);
    dl_value *bias = dl_constant(g, "bias", rand_tensor(ctx, DL_F32, 1, &rs.dims[yr - 1]));
    dl_value *a = perm_a ? tr(g, x, perm_a) : x, *b = perm_b ? tr(g, w, perm_b) : w;
    dl_value *y = dl_relu(g, dl_add(g, res, dl_add(g, dl_matmul(g, a, b), bias)));
    dl_output(g, y, "y");
    shape run_r = rs;
    if (syms) run_r.dims[0] = run_x.dims[0];
    mcase c = {.name = what,
               .dtype = DL_F32,
               .n_in = 3,
               .n_runs = 1,
               .in = {{run_x, ws, run_r}},
               .want_a = perm_a != NULL,
               .want_b = perm_b != NULL};
    dl_program *p = run_case(ctx, g, &c);
    if (p) {
        const dl_group *gr = absorbing_group(p);
        char name[200];
        snprintf(name, sizeof name, "%s: one kernel with bias, residual and Relu", what);
        CHECK(name, gr && gr->epi.bias && gr->epi.residual && gr->epi.act &&
                        gr->n_nodes == 4 + (perm_a != NULL) + (perm_b != NULL) &&
                        p->fusion->n == 1);
        snprintf(name, sizeof name, "%s: the group is named after its MatMul", what);
        CHECK(name, gr && dl_group_anchor(gr) == gr->mm.mm && dl_node_is(gr->mm.mm, "MatMul"));
    }
    finish(p, g);
}

static void test_epilogue(dl_ctx *ctx) {
    epilogue_case(ctx, "epilogue 2-D A^T", (shape){2, {13, 9}}, (shape){2, {13, 11}}, "perm=[1,0]",
                  NULL, NULL, (shape){2, {13, 9}});
    epilogue_case(ctx, "epilogue 3-D B^T", (shape){3, {2, 9, 13}}, (shape){3, {2, 11, 13}}, NULL,
                  "perm=[0,2,1]", NULL, (shape){3, {2, 9, 13}});
    epilogue_case(ctx, "epilogue A^T [2,3,K,M] with B [K,N]", (shape){4, {2, 3, 13, 9}},
                  (shape){2, {13, 11}}, "perm=[0,1,3,2]", NULL, NULL, (shape){4, {2, 3, 13, 9}});
    const char *syms[] = {"batch", NULL, NULL};
    epilogue_case(ctx, "epilogue symbolic batch A^T B^T", (shape){3, {0, 13, 9}},
                  (shape){2, {11, 13}}, "perm=[0,2,1]", "perm=[1,0]", syms, (shape){3, {3, 13, 9}});
}

/* Transposes that must stay kernels of their own, and still give the right values. */
static void test_not_absorbed(dl_ctx *ctx) {
    shape xs = {3, {2, 13, 9}}, ws = {3, {2, 13, 11}};
    { /* two consumers: the MatMul and a Relu */
        dl_graph *g = dl_graph_new(ctx);
        dl_value *x = input(g, "x", &xs, NULL), *w = input(g, "w", &ws, NULL);
        dl_value *t = tr(g, x, "perm=[0,2,1]");
        dl_output(g, dl_matmul(g, t, w), "y");
        dl_output(g, dl_relu(g, t), "z");
        mcase c = {.name = "transpose with two consumers",
                   .dtype = DL_F32,
                   .n_in = 2,
                   .n_runs = 1,
                   .in = {{xs, ws}},
                   .want_transposes = 1};
        finish(run_case(ctx, g, &c), g);
    }
    { /* the same Transpose as both operands */
        dl_graph *g = dl_graph_new(ctx);
        shape ss = {3, {2, 9, 9}};
        dl_value *x = input(g, "x", &ss, NULL);
        dl_value *t = tr(g, x, "perm=[0,2,1]");
        dl_output(g, dl_matmul(g, t, t), "y");
        mcase c = {.name = "one transpose as A and B",
                   .dtype = DL_F32,
                   .n_in = 1,
                   .n_runs = 1,
                   .in = {{ss}},
                   .want_transposes = 1};
        finish(run_case(ctx, g, &c), g);
    }
    { /* the Transpose's result is a graph output */
        dl_graph *g = dl_graph_new(ctx);
        dl_value *x = input(g, "x", &xs, NULL), *w = input(g, "w", &ws, NULL);
        dl_value *t = tr(g, x, "perm=[0,2,1]");
        dl_output(g, dl_matmul(g, t, w), "y");
        dl_output(g, t, "t");
        mcase c = {.name = "transpose that is an output",
                   .dtype = DL_F32,
                   .n_in = 2,
                   .n_runs = 1,
                   .in = {{xs, ws}},
                   .want_transposes = 1};
        finish(run_case(ctx, g, &c), g);
    }
    { /* perms that move a batch axis: [1,0,2], and reversed dims of a rank-3 value */
        dl_graph *g = dl_graph_new(ctx);
        shape x1 = {3, {9, 2, 13}}, x2 = {3, {11, 13, 2}};
        dl_value *x = input(g, "x", &x1, NULL), *w = input(g, "w", &x2, NULL);
        dl_output(g, dl_matmul(g, tr(g, x, "perm=[1,0,2]"), tr(g, w, "")), "y");
        mcase c = {.name = "perms that are not a last-two swap",
                   .dtype = DL_F32,
                   .n_in = 2,
                   .n_runs = 1,
                   .in = {{x1, x2}},
                   .want_transposes = 2};
        finish(run_case(ctx, g, &c), g);
    }
    { /* float64: the runtime GEMM is float32 only (Transpose and MatMul stay reference
       * kernels) */
        dl_graph *g = dl_graph_new(ctx);
        const int64_t xd[] = {2, 13, 9}, wd[] = {2, 13, 11};
        dl_value *x = dl_input(g, "x", DL_F64, 3, xd, NULL);
        dl_value *w = dl_input(g, "w", DL_F64, 3, wd, NULL);
        dl_output(g, dl_matmul(g, tr(g, x, "perm=[0,2,1]"), w), "y");
        mcase c = {.name = "float64",
                   .dtype = DL_F64,
                   .n_in = 2,
                   .n_runs = 1,
                   .in = {{xs, ws}},
                   .want_transposes = 1};
        finish(run_case(ctx, g, &c), g);
    }
}

/* Chains: an absorbed Transpose of a MatMul's result, and a Transpose between two MatMuls
 * feeding the second as A while the first keeps its own epilogue. */
static void test_chain(dl_ctx *ctx) {
    dl_graph *g = dl_graph_new(ctx);
    shape qs = {4, {2, 3, 7, 16}}, ks = {4, {2, 3, 7, 16}}, vs = {4, {2, 3, 7, 16}};
    dl_value *q = input(g, "q", &qs, NULL), *k = input(g, "k", &ks, NULL);
    dl_value *v = input(g, "v", &vs, NULL);
    /* attention backward-like: s = q k^T; ds = s^T v; out = relu(ds) ... */
    dl_value *s = dl_matmul(g, q, tr(g, k, "perm=[0,1,3,2]"));
    dl_value *d = dl_matmul(g, tr(g, s, "perm=[0,1,3,2]"), v);
    dl_output(g, dl_relu(g, d), "y");
    mcase c = {.name = "chain of transposed products",
               .dtype = DL_F32,
               .n_in = 3,
               .n_runs = 1,
               .in = {{qs, ks, vs}},
               .want_a = 1,
               .want_b = 1};
    dl_program *p = run_case(ctx, g, &c);
    if (p)
        CHECK("chain: two MatMul kernels, no transposes",
              count_kind(p, DL_G_MATMUL) == 2 && count_absorbed(p) == 2);
    finish(p, g);
}

/* The profile counts the MatMul's FLOPs (2 M N K per matrix) for the group and the bytes of
 * what it reads (the untransposed inputs) and writes. */
static void test_profile(dl_ctx *ctx) {
    dl_graph *g = dl_graph_new(ctx);
    const char *syms[] = {"batch", NULL, NULL};
    shape xs = {3, {0, 13, 9}}, ws = {2, {11, 13}};
    dl_value *x = input(g, "x", &xs, syms), *w = input(g, "w", &ws, NULL);
    dl_output(g, dl_matmul(g, tr(g, x, "perm=[0,2,1]"), tr(g, w, "perm=[1,0]")), "y");
    dl_program *p = NULL;
    dl_profile pr;
    memset(&pr, 0, sizeof pr);
    dl_tensor *in[2] = {rand_tensor(ctx, DL_F32, 3, (int64_t[]){5, 13, 9}),
                        rand_tensor(ctx, DL_F32, ws.rank, ws.dims)};
    bool ok = dl_graph_status(g) == DL_OK && dl_compile(ctx, g, &opts, &p) == DL_OK &&
              count_absorbed(p) == 2 && dl_profile_program(ctx, p, 2, NULL, in, 0, 2, &pr) == DL_OK;
    CHECK("profile: runs", ok && pr.n_steps == 1);
    if (!ok) printf("  %s\n", dl_errmsg(ctx));
    double flops = 2.0 * 5 * 9 * 11 * 13, bytes = 4.0 * (5 * 13 * 9 + 11 * 13 + 5 * 9 * 11);
    char name[160];
    snprintf(name, sizeof name,
             "profile: matmul step counts %.0f FLOPs and %.0f bytes (got %.0f, %.0f)", flops, bytes,
             ok ? pr.steps[0].flops : -1, ok ? pr.steps[0].bytes : -1);
    CHECK(name, ok && pr.steps[0].kind == DL_G_MATMUL && pr.steps[0].flops == flops &&
                    pr.steps[0].bytes == bytes);
    dl_profile_free(&pr);
    dl_tensor_free(in[0]);
    dl_tensor_free(in[1]);
    finish(p, g);
}

/* A plan whose shapes depend on data (NonZero elsewhere in the graph) allocates step by step and
 * infers each group's nodes in order: the absorbed Transpose's type comes before the MatMul's. */
static void test_dynamic_plan(dl_ctx *ctx) {
    dl_graph *g = dl_graph_new(ctx);
    const char *syms[] = {"batch", NULL, NULL};
    shape xs = {3, {0, 13, 9}}, ws = {3, {1, 11, 13}}, vs = {1, {6}};
    dl_value *x = input(g, "x", &xs, syms), *w = input(g, "w", &ws, NULL);
    dl_value *v = input(g, "v", &vs, NULL);
    dl_value *y = dl_relu(g, dl_matmul(g, tr(g, x, "perm=[0,2,1]"), tr(g, w, "perm=[0,2,1]")));
    dl_output(g, y, "y");
    dl_output(g, dl_op1(g, "NonZero", dl_relu(g, v), NULL), "nz");
    mcase c = {.name = "dynamic plan",
               .dtype = DL_F32,
               .n_in = 3,
               .n_runs = 2,
               .in = {{{3, {2, 13, 9}}, ws, vs}, {{3, {5, 13, 9}}, ws, vs}},
               .want_a = 1,
               .want_b = 1};
    dl_program *p = run_case(ctx, g, &c);
    CHECK("dynamic plan: the plan is dynamic", p && p->plan.dynamic);
    finish(p, g);
}

/* `dlcc compile --report` counts no transpose kernel once absorbed. */
static void test_report(dl_ctx *ctx) {
    dl_graph *g = dl_graph_new(ctx);
    shape xs = {3, {2, 13, 9}}, ws = {3, {2, 11, 13}};
    dl_value *x = input(g, "x", &xs, NULL), *w = input(g, "w", &ws, NULL);
    dl_output(g, dl_matmul(g, tr(g, x, "perm=[0,2,1]"), tr(g, w, "perm=[0,2,1]")), "y");
    dl_program *p = NULL;
    char text[4096] = "";
    if (dl_graph_status(g) == DL_OK && dl_compile(ctx, g, &opts, &p) == DL_OK) {
        dl_tensor *in[2] = {rand_tensor(ctx, DL_F32, xs.rank, xs.dims),
                            rand_tensor(ctx, DL_F32, ws.rank, ws.dims)};
        FILE *f = tmpfile();
        if (f && dl_program_report(ctx, p, 2, in, f) == DL_OK) {
            rewind(f);
            size_t n = fread(text, 1, sizeof text - 1, f);
            text[n] = 0;
        }
        if (f) fclose(f);
        dl_tensor_free(in[0]);
        dl_tensor_free(in[1]);
    }
    CHECK("report: one matmul kernel and no transpose",
          strstr(text, "kernels: 1 steps, 1 generated (matmul 1)") && !strstr(text, "transpose"));
    if (!strstr(text, "matmul 1")) printf("  report:\n%s\n", text);
    /* the memory plan holds no buffer for the transposed values: only y (an output) and the
     * inputs exist, so the arena is empty */
    CHECK("report: nothing in the arena", p && p->plan.valid && p->plan.arena_bytes == 0);
    finish(p, g);
}

/* The AOT bundle of a program with absorbed Transposes builds and computes the same values. */
static void test_aot(dl_ctx *ctx) {
    dl_graph *g = dl_graph_new(ctx);
    shape xs = {3, {2, 13, 9}}, ws = {2, {11, 13}};
    dl_value *x = input(g, "x", &xs, NULL), *w = input(g, "w", &ws, NULL);
    dl_value *bias = dl_constant(g, "bias", rand_tensor(ctx, DL_F32, 1, (int64_t[]){11}));
    dl_value *h = dl_add(g, dl_matmul(g, tr(g, x, "perm=[0,2,1]"), tr(g, w, "perm=[1,0]")), bias);
    dl_output(g, dl_relu(g, h), "y");
    dl_tensor *in[2] = {rand_tensor(ctx, DL_F32, xs.rank, xs.dims),
                        rand_tensor(ctx, DL_F32, ws.rank, ws.dims)};
    dl_program *p = NULL;
    dl_tensor *want[1] = {NULL};
    char dir[300], cmd[1200];
    snprintf(dir, sizeof dir, "%s/aot", cache_dir);
    bool ok = dl_graph_status(g) == DL_OK && dl_compile(ctx, g, &opts, &p) == DL_OK &&
              count_absorbed(p) == 2 && dl_emit_bundle(ctx, p, 2, in, dir) == DL_OK;
    CHECK("aot: bundle written", ok);
    if (!ok) printf("  %s\n", dl_errmsg(ctx));
    if (ok) {
        char path[400];
        for (int i = 0; i < 2 && ok; i++) {
            snprintf(path, sizeof path, "%s/in%d.bin", dir, i);
            FILE *f = fopen(path, "wb");
            ok = f && fwrite(in[i]->data, 1, in[i]->nbytes, f) == in[i]->nbytes;
            if (f) fclose(f);
        }
        snprintf(cmd, sizeof cmd,
                 "make -s -C %s CC=cc CFLAGS='-std=c11 -O2' >%s/make.log 2>&1 && "
                 "%s/model %s/in0.bin %s/in1.bin %s/out.bin",
                 dir, dir, dir, dir, dir, dir);
        ok = ok && system(cmd) == 0;
        CHECK("aot: bundle builds and runs", ok);
        ok = ok && dl_run(ctx, g, DL_BACKEND_REF, 2, NULL, in, want) == DL_OK;
        double worst = INFINITY;
        if (ok) {
            snprintf(path, sizeof path, "%s/out.bin", dir);
            FILE *f = fopen(path, "rb");
            float *got = dl_malloc(want[0]->nbytes + 1);
            if (f && got && fread(got, 1, want[0]->nbytes, f) == want[0]->nbytes) {
                worst = 0;
                for (int64_t i = 0; i < want[0]->numel; i++) {
                    double y = dl_get_f64(want[0], i), e = fabs(got[i] - y) / (0.1 + fabs(y));
                    if (!(e <= worst)) worst = e;
                }
            }
            if (f) fclose(f);
            dl_free(got);
        }
        CHECK("aot: bundle output matches the reference", worst <= 1e-5);
    }
    dl_tensor_free(want[0]);
    dl_tensor_free(in[0]);
    dl_tensor_free(in[1]);
    finish(p, g);
}

int main(void) {
    if (!test_cache_open(cache_dir, &opts)) return 1;
    dl_ctx *ctx = dl_ctx_new();
    void (*tests[])(dl_ctx *) = {test_plain,    test_constant_b,   test_symbolic,
                                 test_epilogue, test_not_absorbed, test_chain,
                                 test_profile,  test_dynamic_plan, test_report,
                                 test_aot,      test_workspace};
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
        tests[i](ctx);
        dl_ctx_clear(ctx);
    }
    dl_ctx_free(ctx);
    test_cache_remove(cache_dir);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
