/* test_loopir.c — the loop IR, its schedules and the C renderer, end to end: groups built with
 * the builder API are lowered, scheduled several ways, rendered, compiled with the system C
 * compiler into a shared object, loaded with dlopen and run on random data; every result must
 * match the reference interpreter (exact for integers and bools, ~1e-6 relative for floats).
 * Illegal schedule requests must fail and leave the function intact. */
#include "../../src/codegen/loop-ir.h"
#include "dlcc.h"

#include <dlfcn.h>
#include <math.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "test-rng.h"

typedef void (*kfn)(void *const *b, const int64_t *s);

/* ---------------------------------------------------------------- random data */

/* Random values with a sprinkle of special ones (NaN, infinities, signed zeros, halves, huge
 * values, integer extremes) when specials is set. */
static void fill(dl_tensor *t, bool specials) {
    static const double fspec[] = {NAN,  INFINITY, -INFINITY, 0.0,  -0.0, 0.5, -0.5, 2.5,
                                   -1.5, 300.7,    3e9,       -3e9, 1e20, 1.0, -1.0};
    static const int64_t ispec[] = {0,         -1,  1,    INT64_MIN, INT64_MAX, INT32_MIN,
                                    INT32_MAX, 255, -128, 64,        63,        2};
    for (int64_t i = 0; i < t->numel; i++) {
        bool sp = specials && rnext() % 8 == 0;
        if (dl_dtype_is_float(t->dtype)) {
            dl_set_f64(t, i, sp ? fspec[rnext() % DL_ARRAY_LEN(fspec)] : 6 * urand() - 3);
        } else if (t->dtype == DL_BOOL) {
            dl_set_i64(t, i, (int64_t)(rnext() & 1));
        } else {
            int64_t v = sp ? ispec[rnext() % DL_ARRAY_LEN(ispec)] : (int64_t)(rnext() % 101) - 50;
            if (!dl_dtype_is_signed(t->dtype) && !sp) v += 50;
            dl_set_i64(t, i, v); /* wraps into narrow dtypes */
        }
    }
}

/* ---------------------------------------------------------------- compiling generated code */

static char cc_log[8192];

/* Builds C source into a shared object and loads it; NULL on failure (log in cc_log). */
static void *build_so(const char *src) {
    char dir[] = "/tmp/dlcc-loopir-XXXXXX";
    if (!mkdtemp(dir)) return NULL;
    char c_path[64], so_path[64], err_path[64], cmd[2048];
    snprintf(c_path, sizeof c_path, "%s/k.c", dir);
    snprintf(so_path, sizeof so_path, "%s/k.so", dir);
    snprintf(err_path, sizeof err_path, "%s/err.txt", dir);
    FILE *fp = fopen(c_path, "w");
    void *h = NULL;
    if (fp) {
        fputs(src, fp);
        fclose(fp);
        /* DLCC_TEST_CC / DLCC_TEST_CFLAGS try other compilers and flags (clang, -march=native).
         * Parallel loops call the runtime's pool: its source is built in (tests run from the
         * repository's root). */
        const char *cc = getenv("DLCC_TEST_CC"), *extra = getenv("DLCC_TEST_CFLAGS");
        char cwd[512];
        if (!getcwd(cwd, sizeof cwd)) cwd[0] = 0;
        snprintf(cmd, sizeof cmd,
                 "%s -O2 -std=c11 -fPIC -shared -pthread -DDLRT_THREADS -fopenmp-simd -Wall "
                 "-Wextra -Werror -I%s/src/kernels/rt %s -o %s %s %s/src/kernels/rt/threads.c -lm "
                 "2>%s",
                 cc ? cc : "cc", cwd, extra ? extra : "", so_path, c_path, cwd, err_path);
        int rc = system(cmd);
        cc_log[0] = 0;
        FILE *e = fopen(err_path, "r");
        if (e) {
            size_t n = fread(cc_log, 1, sizeof cc_log - 1, e);
            cc_log[n] = 0;
            fclose(e);
        }
        if (rc == 0) h = dlopen(so_path, RTLD_NOW | RTLD_LOCAL);
        if (rc == 0 && !h) snprintf(cc_log, sizeof cc_log, "dlopen: %s", dlerror());
    }
    unlink(c_path);
    unlink(so_path);
    unlink(err_path);
    rmdir(dir);
    return h;
}

/* A batch of kernels rendered into one source: each kernel NAME gets an exported NAME_entry. */
typedef struct batch {
    dl_sbuf src;
    int n;
    char names[512][48];
    void *so;
} batch;

static void batch_init(batch *b) {
    memset(b, 0, sizeof *b);
    dl_render_prelude(&b->src);
    /* as a module (module.c): the runtime's math (Erf is dlrt_erf) */
    dl_sb_put(&b->src, "#include \"vecmath.h\"\n");
}

static const char *batch_add(batch *b, const char *name) {
    snprintf(b->names[b->n], sizeof b->names[0], "%s", name);
    dl_sb_printf(&b->src, "void %s_entry(void *const *b, const int64_t *s) { %s(b, s); }\n", name,
                 name);
    return b->names[b->n++];
}

static bool batch_build(batch *b, const char *what) {
    if (getenv("DLCC_TEST_DUMP")) printf("==== %s\n%s", what, dl_sb_str(&b->src));
    b->so = build_so(dl_sb_str(&b->src));
    if (!b->so) {
        printf("FAIL compiling %s:\n%s\n---- source ----\n%s\n", what, cc_log, dl_sb_str(&b->src));
        failed++;
        return false;
    }
    passed++;
    return true;
}

static kfn batch_fn(batch *b, const char *name) {
    char sym[64];
    snprintf(sym, sizeof sym, "%s_entry", name);
    void *p = b->so ? dlsym(b->so, sym) : NULL;
    kfn f;
    memcpy(&f, &p, sizeof f);
    return f;
}

static void batch_free(batch *b) {
    if (b->so) dlclose(b->so);
    dl_sb_free(&b->src);
}

/* ---------------------------------------------------------------- graphs as kernel inputs */

static void kbuf_of(const dl_value *v, int slot, dl_kbuf *kb) {
    kb->slot = slot;
    kb->dtype = v->type.dtype;
    kb->rank = v->type.rank;
    for (int d = 0; d < v->type.rank; d++) {
        int64_t x = v->type.dims[d];
        kb->dims[d] =
            x >= 0 ? (dl_kdim){.c = x, .sym = -1} : (dl_kdim){.c = 0, .sym = (int)(-x - 1)};
    }
}

/* A graph built with the builder, its random inputs and the reference interpreter's outputs. */
typedef struct gcase {
    dl_ctx *ctx;
    dl_graph *g;
    int n_in, n_out;
    dl_tensor *in[16], *ref[8];
    int64_t s[32]; /* symbol values at run time */
    dl_kbuf kin[16], kout[8];
} gcase;

static void sym_values(const dl_value *v, const dl_tensor *t, int64_t *s) {
    for (int d = 0; d < v->type.rank && d < t->rank; d++)
        if (v->type.dims[d] < 0 && -v->type.dims[d] - 1 < 32) s[-v->type.dims[d] - 1] = t->dims[d];
}

/* Fills inputs (with the given runtime shapes where an input is symbolic) and runs the reference.
 */
static bool gcase_run(gcase *c, const char *label, int64_t (*rt_dims)[DL_MAX_RANK], bool specials) {
    dl_graph *g = c->g;
    if (dl_graph_status(g) != DL_OK) {
        printf("FAIL %s: building the graph: %s\n", label, dl_errmsg(c->ctx));
        failed++;
        return false;
    }
    c->n_in = dl_graph_num_inputs(g);
    c->n_out = dl_graph_num_outputs(g);
    for (int k = 0; k < c->n_in; k++) {
        dl_value *v = dl_graph_input(g, k);
        int64_t dims[DL_MAX_RANK];
        for (int d = 0; d < v->type.rank; d++)
            dims[d] = v->type.dims[d] >= 0 ? v->type.dims[d] : rt_dims[k][d];
        dl_tensor_new(c->ctx, v->type.dtype, v->type.rank, dims, &c->in[k]);
        fill(c->in[k], specials);
        kbuf_of(v, k, &c->kin[k]);
        sym_values(v, c->in[k], c->s);
    }
    dl_status st = dl_run(c->ctx, g, DL_BACKEND_REF, c->n_in, NULL, c->in, c->ref);
    if (st != DL_OK) {
        printf("FAIL %s: reference run: %s\n", label, dl_errmsg(c->ctx));
        failed++;
        return false;
    }
    for (int k = 0; k < c->n_out; k++) {
        kbuf_of(dl_graph_output(g, k), c->n_in + k, &c->kout[k]);
        sym_values(dl_graph_output(g, k), c->ref[k], c->s);
    }
    return true;
}

static void gcase_free(gcase *c) {
    for (int k = 0; k < c->n_in; k++) dl_tensor_free(c->in[k]);
    for (int k = 0; k < c->n_out; k++) dl_tensor_free(c->ref[k]);
    dl_graph_free(c->g);
    dl_ctx_free(c->ctx);
}

static int node_index(const dl_graph *g, const dl_node *n) {
    for (int j = 0; j < g->nodes.len; j++)
        if (g->nodes.items[j] == n) return j;
    return -1;
}

/* The whole graph as one elementwise group (every node an op, graph inputs as group inputs). */
typedef struct ewdesc {
    dl_ew_op ops[32];
    int out_op[8];
    dl_ew_group grp;
} ewdesc;

static void ew_of_graph(const gcase *c, ewdesc *e) {
    const dl_graph *g = c->g;
    for (int j = 0; j < g->nodes.len; j++) {
        const dl_node *n = g->nodes.items[j];
        dl_ew_op *op = &e->ops[j];
        op->node = n;
        op->n_args = n->n_in;
        for (int i = 0; i < n->n_in; i++) {
            const dl_value *v = n->in[i];
            int a = DL_EW_ABSENT;
            for (int k = 0; v && k < c->n_in; k++)
                if (dl_graph_input(g, k) == v) a = k;
            if (v && v->producer) a = -node_index(g, v->producer) - 1;
            op->args[i] = a;
        }
    }
    for (int k = 0; k < c->n_out; k++)
        e->out_op[k] = node_index(g, dl_graph_output(g, k)->producer);
    e->grp = (dl_ew_group){.n_in = c->n_in,
                           .in = c->kin,
                           .n_out = c->n_out,
                           .out = c->kout,
                           .out_op = e->out_op,
                           .n_ops = g->nodes.len,
                           .ops = e->ops};
}

/* Runs a kernel on the case's inputs and compares each output with the reference. */
static bool run_compare(const gcase *c, kfn fn, const char *label, double rtol) {
    void *bufs[32];
    unsigned char *outs[8];
    for (int k = 0; k < c->n_in; k++) bufs[k] = c->in[k]->data;
    for (int k = 0; k < c->n_out; k++) {
        outs[k] = malloc(c->ref[k]->nbytes + 1);
        memset(outs[k], 0xA5, c->ref[k]->nbytes + 1);
        bufs[c->n_in + k] = outs[k];
    }
    fn(bufs, c->s);
    bool ok = true;
    for (int k = 0; k < c->n_out && ok; k++) {
        const dl_tensor *r = c->ref[k];
        dl_tensor got = *r;
        got.data = outs[k];
        for (int64_t i = 0; i < r->numel && ok; i++) {
            if (dl_dtype_is_float(r->dtype)) {
                double a = dl_get_f64(&got, i), w = dl_get_f64(r, i);
                ok = (isnan(a) && isnan(w)) || a == w || fabs(a - w) <= 1e-7 + rtol * fabs(w);
                if (!ok)
                    printf("FAIL %s: output %d[%lld] = %.9g, reference %.9g\n", label, k,
                           (long long)i, a, w);
            } else {
                size_t es = dl_dtype_size(r->dtype);
                ok = memcmp((char *)got.data + i * (int64_t)es, (char *)r->data + i * (int64_t)es,
                            es) == 0;
                if (!ok)
                    printf("FAIL %s: output %d[%lld] = %lld, reference %lld\n", label, k,
                           (long long)i, (long long)dl_get_i64(&got, i),
                           (long long)dl_get_i64(r, i));
            }
        }
        if (ok && outs[k][r->nbytes] != 0xA5) {
            printf("FAIL %s: output %d written past its end\n", label, k);
            ok = false;
        }
    }
    for (int k = 0; k < c->n_out; k++) free(outs[k]);
    if (ok)
        passed++;
    else
        failed++;
    return ok;
}

/* ---------------------------------------------------------------- schedules under test */

typedef dl_status (*sched_fn)(dl_ctx *ctx, dl_lfunc *f);

static int loops_of(dl_lfunc *f, int *v) {
    return dl_lf_loops(f, v, 16);
}

static dl_status s_none(dl_ctx *ctx, dl_lfunc *f) {
    DL_UNUSED(ctx);
    DL_UNUSED(f);
    return DL_OK;
}
static dl_status s_default(dl_ctx *ctx, dl_lfunc *f) {
    dl_target t = {.vector_bytes = 32, .threads = 4};
    return dl_sched_default(ctx, f, &t);
}
/* the innermost loop split by 7 (a tail), its inner part vectorized */
static dl_status s_split7_vec(dl_ctx *ctx, dl_lfunc *f) {
    int v[16], n = loops_of(f, v), o, i;
    DL_TRY(dl_sched_split(ctx, f, v[n - 1], 7, DL_TAIL_MIN, &o, &i));
    return dl_sched_vectorize(ctx, f, i);
}
static dl_status s_split7_guard(dl_ctx *ctx, dl_lfunc *f) {
    int v[16], n = loops_of(f, v), o, i;
    DL_TRY(dl_sched_split(ctx, f, v[n - 1], 7, DL_TAIL_GUARD, &o, &i));
    return dl_sched_unroll(ctx, f, i, 3);
}
static dl_status s_reorder(dl_ctx *ctx, dl_lfunc *f) {
    int v[16];
    loops_of(f, v);
    int order[2] = {v[1], v[0]};
    return dl_sched_reorder(ctx, f, 2, order);
}
static dl_status s_par_unroll(dl_ctx *ctx, dl_lfunc *f) {
    int v[16], n = loops_of(f, v);
    if (n == 1) { /* one loop: parallel over blocks of 16, unrolled inside */
        DL_TRY(dl_sched_split(ctx, f, v[0], 16, DL_TAIL_MIN, &v[0], &v[1]));
        n = 2;
    }
    DL_TRY(dl_sched_parallel(ctx, f, v[0], NULL));
    return dl_sched_unroll(ctx, f, v[n - 1], 4);
}
/* outer loop split by 3 and the second loop moved between its halves */
static dl_status s_split_reorder(dl_ctx *ctx, dl_lfunc *f) {
    int v[16], o, i;
    loops_of(f, v);
    DL_TRY(dl_sched_split(ctx, f, v[0], 3, DL_TAIL_MIN, &o, &i));
    int order[3] = {o, v[1], i};
    return dl_sched_reorder(ctx, f, 3, order);
}
static dl_status s_tile(dl_ctx *ctx, dl_lfunc *f) {
    int v[16], n = loops_of(f, v);
    DL_TRY(dl_sched_tile2(ctx, f, v[0], v[n - 1], 3));
    return dl_sched_parallel(ctx, f, dl_lf_find_var(f, "i0_o"), NULL);
}

static const struct {
    const char *name;
    sched_fn fn;
} scheds[] = {
    {"none", s_none},
    {"default", s_default},
    {"split7vec", s_split7_vec},
    {"split7guard", s_split7_guard},
    {"reorder", s_reorder},
    {"parunroll", s_par_unroll},
    {"splitreorder", s_split_reorder},
    {"tile", s_tile},
};
enum {
    S_NONE = 1,
    S_DEFAULT = 2,
    S_SPLIT7 = 4,
    S_GUARD = 8,
    S_REORDER = 16,
    S_PARUNROLL = 32,
    S_SPLITREORDER = 64,
    S_TILE = 128,
    S_ALL = 255
};

typedef dl_status (*lower_fn)(dl_ctx *ctx, const void *desc, const char *name, dl_lfunc **out);
static dl_status lower_ew(dl_ctx *ctx, const void *d, const char *name, dl_lfunc **out) {
    return dl_lower_elementwise(ctx, d, name, out);
}
static dl_status lower_red(dl_ctx *ctx, const void *d, const char *name, dl_lfunc **out) {
    return dl_lower_reduce(ctx, d, name, out);
}
static dl_status lower_tr(dl_ctx *ctx, const void *d, const char *name, dl_lfunc **out) {
    return dl_lower_transpose(ctx, d, name, out);
}

/* Lowers desc under every schedule in mask, compiles them together and compares each run. */
static void run_schedules(gcase *c, const char *label, lower_fn lower, const void *desc,
                          unsigned mask, double rtol) {
    batch b;
    batch_init(&b);
    const char *names[16];
    int which[16], n = 0;
    for (int k = 0; k < (int)DL_ARRAY_LEN(scheds); k++) {
        if (!(mask & (1u << k))) continue;
        char nm[48], what[96];
        snprintf(nm, sizeof nm, "k_%s", scheds[k].name);
        snprintf(what, sizeof what, "%s / %s", label, scheds[k].name);
        dl_lfunc *f = NULL;
        dl_status st = lower(c->ctx, desc, nm, &f);
        if (st == DL_OK) st = scheds[k].fn(c->ctx, f);
        if (st == DL_OK) st = dl_render_c(c->ctx, f, &b.src);
        if (st != DL_OK) printf("     %s: %s\n", what, dl_errmsg(c->ctx));
        CHECK(what, st == DL_OK);
        dl_ctx_clear(c->ctx);
        dl_lfunc_free(f);
        if (st != DL_OK) continue;
        which[n] = k;
        names[n++] = batch_add(&b, nm);
    }
    if (batch_build(&b, label)) {
        for (int i = 0; i < n; i++) {
            char what[96];
            snprintf(what, sizeof what, "%s / %s", label, scheds[which[i]].name);
            run_compare(c, batch_fn(&b, names[i]), what, rtol);
        }
    }
    batch_free(&b);
}

/* ---------------------------------------------------------------- elementwise groups */

static gcase new_case(void) {
    gcase c;
    memset(&c, 0, sizeof c);
    c.ctx = dl_ctx_new();
    c.g = dl_graph_new(c.ctx);
    return c;
}

static void ew_case(gcase *c, const char *label, int64_t (*rt)[DL_MAX_RANK], unsigned mask,
                    bool specials) {
    if (gcase_run(c, label, rt, specials)) {
        ewdesc e;
        ew_of_graph(c, &e);
        run_schedules(c, label, lower_ew, &e.grp, mask, 1e-6);
    }
    gcase_free(c);
}

static void test_chain_broadcast(void) {
    gcase c = new_case();
    int64_t da[] = {2, 3, 4, 19}, db[] = {3, 1, 1}, dc[] = {19};
    dl_value *a = dl_input(c.g, "a", DL_F32, 4, da, NULL);
    dl_value *b = dl_input(c.g, "b", DL_F32, 3, db, NULL);
    dl_value *w = dl_input(c.g, "c", DL_F32, 1, dc, NULL);
    dl_output(c.g, dl_mul(c.g, dl_relu(c.g, dl_add(c.g, a, b)), w), "y");
    ew_case(&c, "Add-Relu-Mul [N,C,H,W]+[C,1,1]", NULL, S_ALL, false);
}

static void test_symbolic(void) {
    gcase c = new_case();
    int64_t da[] = {-1, 16}, db[] = {16};
    const char *sn[] = {"N", NULL};
    dl_value *a = dl_input(c.g, "a", DL_F32, 2, da, sn);
    dl_value *b = dl_input(c.g, "b", DL_F32, 1, db, NULL);
    dl_output(c.g, dl_tanh(c.g, dl_sub(c.g, a, b)), "y");
    int64_t rt[2][DL_MAX_RANK] = {{37, 16}, {16}};
    ew_case(&c, "symbolic [N,16]-[16] -> Tanh", rt, S_ALL & ~S_TILE, false);

    /* two different symbols: the strides are decided at run time (M is 1 here) */
    c = new_case();
    int64_t dx[] = {-1, 8}, dy[] = {-1, 8};
    const char *nx[] = {"N", NULL}, *ny[] = {"M", NULL};
    dl_value *x = dl_input(c.g, "x", DL_F32, 2, dx, nx);
    dl_value *y = dl_input(c.g, "y", DL_F32, 2, dy, ny);
    dl_output(c.g, dl_mul(c.g, x, y), "z");
    int64_t rt2[2][DL_MAX_RANK] = {{5, 8}, {1, 8}};
    ew_case(&c, "symbolic broadcast [N,8]*[M,8] with M=1", rt2, S_NONE | S_DEFAULT | S_SPLIT7,
            false);
}

static void test_where(void) {
    gcase c = new_case();
    int64_t dc[] = {4, 1, 6}, dx[] = {4, 5, 6}, dy[] = {6};
    dl_value *cond = dl_input(c.g, "c", DL_BOOL, 3, dc, NULL);
    dl_value *x = dl_input(c.g, "x", DL_F32, 3, dx, NULL);
    dl_value *y = dl_input(c.g, "y", DL_F32, 1, dy, NULL);
    dl_value *in[3] = {cond, x, y}, *out;
    dl_add_node(c.g, "Where", 3, in, 1, &out, 0, NULL);
    dl_output(c.g, out, "w");
    dl_output(c.g, dl_op2(c.g, "Xor", cond, dl_op2(c.g, "Less", x, y, NULL), NULL), "xl");
    ew_case(&c, "Where with a bool condition", NULL, S_ALL, true);
}

static void test_int_div_mod(void) {
    gcase c = new_case();
    int64_t da[] = {3, 50}, db[] = {50};
    dl_value *a = dl_input(c.g, "a", DL_I64, 2, da, NULL);
    dl_value *b = dl_input(c.g, "b", DL_I64, 1, db, NULL);
    dl_output(c.g, dl_div(c.g, a, b), "q");
    dl_output(c.g, dl_op2(c.g, "Mod", a, b, "fmod=0"), "m");
    dl_output(c.g, dl_op2(c.g, "Mod", a, b, "fmod=1"), "r");
    dl_output(c.g, dl_mul(c.g, dl_add(c.g, a, b), b), "w");
    ew_case(&c, "int64 Div/Mod/wrapping arithmetic", NULL, S_ALL, true);
}

static void test_cast(void) {
    gcase c = new_case();
    int64_t d[] = {7, 13};
    dl_value *x = dl_input(c.g, "x", DL_F32, 2, d, NULL);
    dl_output(c.g, dl_op1(c.g, "Cast", x, "to=6"), "i32");
    dl_output(c.g, dl_op1(c.g, "Cast", x, "to=2"), "u8");
    dl_output(c.g, dl_op1(c.g, "Cast", x, "to=9"), "b");
    dl_value *i64 = dl_op1(c.g, "Cast", x, "to=7");
    dl_output(c.g, dl_op1(c.g, "Cast", i64, "to=1"), "back");
    ew_case(&c, "Cast float32 -> int32/uint8/bool/int64 -> float32", NULL,
            S_NONE | S_DEFAULT | S_SPLIT7 | S_GUARD | S_PARUNROLL, true);
}

static void test_scalar_and_empty(void) {
    gcase c = new_case();
    dl_value *a = dl_input(c.g, "a", DL_F32, 0, NULL, NULL);
    dl_value *b = dl_input(c.g, "b", DL_F32, 0, NULL, NULL);
    dl_output(c.g, dl_op2(c.g, "Pow", a, b, NULL), "p");
    ew_case(&c, "rank-0 Pow", NULL, S_NONE | S_DEFAULT, true);

    c = new_case();
    int64_t da[] = {0, 5}, db[] = {5};
    a = dl_input(c.g, "a", DL_F32, 2, da, NULL);
    b = dl_input(c.g, "b", DL_F32, 1, db, NULL);
    dl_output(c.g, dl_add(c.g, a, b), "s");
    ew_case(&c, "empty [0,5]+[5]", NULL, S_ALL, false);
}

/* Clip with omitted bounds (inputs left out) and in its opset-10 attribute form. */
static void test_clip_forms(void) {
    int64_t d[] = {4, 33};
    for (int form = 0; form < 4; form++) {
        gcase c = new_case();
        if (form == 3) c.g->opset = 10;
        dl_value *x = dl_input(c.g, "x", form == 2 ? DL_I32 : DL_F32, 2, d, NULL);
        dl_value *lo =
            form == 1 || form == 3 ? NULL : dl_input(c.g, "lo", x->type.dtype, 0, NULL, NULL);
        dl_value *hi =
            form == 0 || form == 3 ? NULL : dl_input(c.g, "hi", x->type.dtype, 0, NULL, NULL);
        dl_value *in[3] = {x, lo, hi}, *y;
        const char *attrs[2] = {"min=-0.5", "max=0.75"};
        dl_add_node(c.g, "Clip",
                    form == 0   ? 2
                    : form == 3 ? 1
                                : 3,
                    in, 1, &y, form == 3 ? 2 : 0, attrs);
        dl_output(c.g, y, "y");
        static const char *labels[] = {"Clip(x, min)", "Clip(x, -, max)",
                                       "Clip int32 (x, min, max)", "Clip opset 10 attributes"};
        ew_case(&c, labels[form], NULL, S_NONE | S_DEFAULT, true);
    }
}

static void test_silu(void) {
    gcase c = new_case();
    int64_t d[] = {3, 100};
    dl_value *x = dl_input(c.g, "x", DL_F32, 2, d, NULL);
    dl_value *sg = dl_sigmoid(c.g, x);
    dl_output(c.g, sg, "sig");
    dl_output(c.g, dl_mul(c.g, x, sg), "silu");
    ew_case(&c, "Sigmoid*x with two outputs", NULL,
            S_NONE | S_DEFAULT | S_SPLIT7 | S_GUARD | S_PARUNROLL, false);
}

/* ---------------------------------------------------------------- reductions, transposes */

static const char *red_names[DL_RED_COUNT] = {
    "ReduceSum",       "ReduceMean", "ReduceMax", "ReduceMin",    "ReduceProd",
    "ReduceSumSquare", "ReduceL1",   "ReduceL2",  "ReduceLogSum", "ReduceLogSumExp"};

static const char *const sym_names[DL_MAX_RANK] = {"S0", "S1", "S2", "S3", "S4", "S5", "S6", "S7"};

/* rt: the run-time dims when dims has symbols (-1), else NULL. */
static void reduce_case_rt(const char *label, dl_reduce_kind kind, dl_dtype dt, int rank,
                           const int64_t *dims, const int64_t *rt, const char *axes, bool specials,
                           unsigned mask) {
    gcase c = new_case();
    c.g->opset = 12; /* axes as an attribute for every Reduce* */
    dl_value *x = dl_input(c.g, "x", dt, rank, dims, sym_names);
    char attrs[64];
    snprintf(attrs, sizeof attrs, "axes=%s;keepdims=1", axes);
    dl_output(c.g, dl_op1(c.g, red_names[kind], x, attrs), "y");
    int64_t rtd[1][DL_MAX_RANK];
    for (int k = 0; rt && k < rank; k++) rtd[0][k] = rt[k];
    if (gcase_run(&c, label, rt ? rtd : NULL, specials)) {
        dl_reduce_desc d = {.in = c.kin[0], .out = c.kout[0], .kind = kind};
        for (const char *p = axes; *p; p++)
            if (*p >= '0' && *p <= '9') d.axes[*p - '0'] = true;
        run_schedules(&c, label, lower_red, &d, mask, 1e-6);
    }
    gcase_free(&c);
}

static void reduce_case(const char *label, dl_reduce_kind kind, dl_dtype dt, int rank,
                        const int64_t *dims, const char *axes, bool specials, unsigned mask) {
    reduce_case_rt(label, kind, dt, rank, dims, NULL, axes, specials, mask);
}

static void test_reductions(void) {
    int64_t d4[] = {2, 3, 5, 7}, d4b[] = {2, 6, 4, 3}, d3[] = {3, 4, 9};
    /* mean over the contiguous inner axes: sum accumulators vectorize with reduction(+) */
    reduce_case("ReduceMean axes {2,3}", DL_RED_MEAN, DL_F32, 4, d4, "[2,3]", false,
                S_NONE | S_DEFAULT | S_SPLIT7 | S_GUARD | S_PARUNROLL);
    /* max over a strided axis with NaNs: not vectorizable, kept loops reorder */
    reduce_case("ReduceMax axis 1 (NaN)", DL_RED_MAX, DL_F32, 4, d4b, "[1]", true,
                S_NONE | S_DEFAULT | S_GUARD | S_REORDER | S_PARUNROLL | S_SPLITREORDER);
    for (int k = 0; k < DL_RED_COUNT; k++) {
        char label[64];
        snprintf(label, sizeof label, "%s f32 axes {0,2}", red_names[k]);
        reduce_case(label, (dl_reduce_kind)k, DL_F32, 3, d3, "[0,2]", false, S_NONE | S_DEFAULT);
        snprintf(label, sizeof label, "%s f64 axis 1", red_names[k]);
        reduce_case(label, (dl_reduce_kind)k, DL_F64, 3, d3, "[1]", true, S_DEFAULT);
    }
    int64_t ds[] = {-1, 7, -1}, rs[] = {4, 7, 10};
    reduce_case_rt("ReduceSum symbolic [N,7,M] axis 2", DL_RED_SUM, DL_F32, 3, ds, rs, "[2]", false,
                   S_NONE | S_DEFAULT | S_SPLIT7 | S_PARUNROLL);
    reduce_case_rt("ReduceLogSumExp symbolic [N,7,M] axes {0,1}", DL_RED_LOG_SUM_EXP, DL_F32, 3, ds,
                   rs, "[0,1]", true, S_NONE | S_DEFAULT | S_GUARD);
    int64_t d0[] = {3, 0};
    reduce_case("ReduceMax over an empty axis", DL_RED_MAX, DL_F32, 2, d0, "[1]", false,
                S_NONE | S_DEFAULT);
    reduce_case("ReduceMean over an empty axis", DL_RED_MEAN, DL_F32, 2, d0, "[1]", false,
                S_NONE | S_DEFAULT);
    reduce_case("ReduceSum int32 over an empty axis", DL_RED_SUM, DL_I32, 2, d0, "[1]", false,
                S_DEFAULT);
    reduce_case("ReduceMax int32 over an empty axis", DL_RED_MAX, DL_I32, 2, d0, "[1]", false,
                S_DEFAULT);
    const dl_reduce_kind ik[] = {DL_RED_SUM,  DL_RED_MEAN, DL_RED_MAX,       DL_RED_MIN,
                                 DL_RED_PROD, DL_RED_L1,   DL_RED_SUM_SQUARE};
    const dl_dtype idt[] = {DL_I32, DL_I64, DL_U8};
    for (size_t k = 0; k < DL_ARRAY_LEN(ik); k++)
        for (size_t t = 0; t < DL_ARRAY_LEN(idt); t++) {
            char label[64];
            snprintf(label, sizeof label, "%s %s axis 2", red_names[ik[k]], dl_dtype_name(idt[t]));
            reduce_case(label, ik[k], idt[t], 3, d3, "[2]", true, S_DEFAULT);
        }
}

static void transpose_case_rt(const char *label, dl_dtype dt, int rank, const int64_t *dims,
                              const int64_t *rt, const char *perm, const int *p, unsigned mask) {
    gcase c = new_case();
    dl_value *x = dl_input(c.g, "x", dt, rank, dims, sym_names);
    char attrs[64];
    snprintf(attrs, sizeof attrs, "perm=%s", perm);
    dl_output(c.g, dl_op1(c.g, "Transpose", x, attrs), "y");
    int64_t rtd[1][DL_MAX_RANK];
    for (int k = 0; rt && k < rank; k++) rtd[0][k] = rt[k];
    if (gcase_run(&c, label, rt ? rtd : NULL, true)) {
        dl_transpose_desc d = {.in = c.kin[0], .out = c.kout[0]};
        for (int k = 0; k < rank; k++) d.perm[k] = p[k];
        run_schedules(&c, label, lower_tr, &d, mask, 0);
        /* the public entry point with its own (tiled) schedule */
        batch b;
        batch_init(&b);
        dl_target t = {.vector_bytes = 32, .threads = 4};
        dl_status st = dl_emit_transpose(c.ctx, &d, &t, "k_emit", &b.src);
        CHECK(label, st == DL_OK);
        const char *nm = batch_add(&b, "k_emit");
        if (st == DL_OK && batch_build(&b, label)) run_compare(&c, batch_fn(&b, nm), label, 0);
        batch_free(&b);
    }
    gcase_free(&c);
}

static void transpose_case(const char *label, dl_dtype dt, int rank, const int64_t *dims,
                           const char *perm, const int *p, unsigned mask) {
    transpose_case_rt(label, dt, rank, dims, NULL, perm, p, mask);
}

static void test_transposes(void) {
    int64_t d3[] = {3, 4, 5}, d2[] = {2, 40, 33}, d4[] = {2, 3, 1, 5};
    const int p120[] = {1, 2, 0}, p021[] = {0, 2, 1}, p201[] = {2, 0, 1}, p3102[] = {3, 1, 0, 2};
    transpose_case("Transpose [3,4,5] perm 1,2,0", DL_F32, 3, d3, "[1,2,0]", p120, S_ALL);
    transpose_case("Transpose [2,40,33] perm 0,2,1 (tiled)", DL_F32, 3, d2, "[0,2,1]", p021,
                   S_NONE | S_DEFAULT | S_SPLIT7 | S_REORDER | S_TILE);
    transpose_case("Transpose int64 perm 2,0,1", DL_I64, 3, d3, "[2,0,1]", p201,
                   S_DEFAULT | S_TILE);
    transpose_case("Transpose bool with a size-1 dim", DL_BOOL, 4, d4, "[3,1,0,2]", p3102,
                   S_DEFAULT | S_NONE);
    transpose_case("Transpose float16 perm 0,2,1", DL_F16, 3, d2, "[0,2,1]", p021, S_DEFAULT);
    int64_t ds[] = {-1, 4, -1}, rs[] = {3, 4, 37};
    transpose_case_rt("Transpose symbolic [N,4,M] perm 2,0,1", DL_F32, 3, ds, rs, "[2,0,1]", p201,
                      S_NONE | S_DEFAULT | S_SPLIT7 | S_TILE);
}

/* ---------------------------------------------------------------- op sweep */

typedef struct sweep_op {
    const char *op, *attrs;
    int n_in;
    dl_dtype in[3];
} sweep_op;

static void sweep(void) {
    static const char *f_unary[] = {
        "Neg",   "Abs",   "Sign",  "Reciprocal", "Sqrt",      "Exp",      "Log",
        "Ceil",  "Floor", "Round", "Erf",        "Sin",       "Cos",      "Tan",
        "Asin",  "Acos",  "Atan",  "Sinh",       "Cosh",      "Asinh",    "Acosh",
        "Atanh", "Tanh",  "Relu",  "Sigmoid",    "HardSwish", "Softplus", "Softsign",
        "Selu",  "Mish",  "Gelu",  "Identity",   "IsNaN",     "IsInf"};
    static const struct {
        const char *op, *attrs;
    } f_attr[] = {{"LeakyRelu", "alpha=0.3"},
                  {"HardSigmoid", "alpha=0.3;beta=0.4"},
                  {"Elu", "alpha=0.7"},
                  {"Celu", "alpha=1.3"},
                  {"ThresholdedRelu", "alpha=0.5"},
                  {"Gelu", "approximate=tanh"},
                  {"Shrink", "lambd=0.6;bias=0.2"},
                  {"IsInf", "detect_negative=0"},
                  {"IsInf", "detect_positive=0"},
                  {"Selu", "alpha=1.5;gamma=0.9"}};
    static const char *f_binary[] = {"Add",   "Sub",  "Mul",         "Div",     "Pow",
                                     "Min",   "Max",  "Sum",         "Mean",    "PRelu",
                                     "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"};
    static const char *i_binary[] = {"Add",
                                     "Sub",
                                     "Mul",
                                     "Div",
                                     "Min",
                                     "Max",
                                     "Sum",
                                     "Equal",
                                     "Less",
                                     "Greater",
                                     "GreaterOrEqual",
                                     "BitwiseAnd",
                                     "BitwiseOr",
                                     "BitwiseXor",
                                     "PRelu"};
    static const dl_dtype ftypes[] = {DL_F32, DL_F64};
    static const dl_dtype itypes[] = {DL_I8, DL_U8, DL_I16, DL_U16, DL_I32, DL_U32, DL_I64, DL_U64};
    static const dl_dtype ctypes[] = {DL_F32, DL_F64, DL_I8,  DL_U8,  DL_I32,
                                      DL_U32, DL_I64, DL_U64, DL_BOOL};
    static sweep_op ops[600];
    int n = 0;
    for (size_t t = 0; t < 2; t++) {
        dl_dtype d = ftypes[t];
        for (size_t i = 0; i < DL_ARRAY_LEN(f_unary); i++)
            ops[n++] = (sweep_op){f_unary[i], NULL, 1, {d}};
        for (size_t i = 0; i < DL_ARRAY_LEN(f_attr); i++)
            ops[n++] = (sweep_op){f_attr[i].op, f_attr[i].attrs, 1, {d}};
        for (size_t i = 0; i < DL_ARRAY_LEN(f_binary); i++)
            ops[n++] = (sweep_op){f_binary[i], NULL, 2, {d, d}};
        ops[n++] = (sweep_op){"Mod", "fmod=1", 2, {d, d}};
        ops[n++] = (sweep_op){"Mod", "fmod=0", 2, {d, d}};
        ops[n++] = (sweep_op){"Sum", NULL, 3, {d, d, d}};
        ops[n++] = (sweep_op){"Mean", NULL, 3, {d, d, d}};
        ops[n++] = (sweep_op){"Min", NULL, 3, {d, d, d}};
        ops[n++] = (sweep_op){"Max", NULL, 3, {d, d, d}};
        ops[n++] = (sweep_op){"Clip", NULL, 3, {d, d, d}};
        ops[n++] = (sweep_op){"Pow", NULL, 2, {d, DL_I64}};
        ops[n++] = (sweep_op){"Pow", NULL, 2, {d, DL_I32}};
    }
    for (size_t t = 0; t < DL_ARRAY_LEN(itypes); t++) {
        dl_dtype d = itypes[t];
        bool sg = dl_dtype_is_signed(d);
        for (size_t i = 0; i < DL_ARRAY_LEN(i_binary); i++)
            ops[n++] = (sweep_op){i_binary[i], NULL, 2, {d, d}};
        ops[n++] = (sweep_op){"Mod", "fmod=0", 2, {d, d}};
        ops[n++] = (sweep_op){"Mod", "fmod=1", 2, {d, d}};
        ops[n++] = (sweep_op){"Abs", NULL, 1, {d}};
        ops[n++] = (sweep_op){"Sign", NULL, 1, {d}};
        ops[n++] = (sweep_op){"BitwiseNot", NULL, 1, {d}};
        ops[n++] = (sweep_op){"Clip", NULL, 3, {d, d, d}};
        ops[n++] = (sweep_op){"Pow", NULL, 2, {d, d}};
        ops[n++] = (sweep_op){"Pow", NULL, 2, {d, DL_F32}};
        ops[n++] = (sweep_op){"Shrink", "lambd=2;bias=1", 1, {d}};
        if (sg) ops[n++] = (sweep_op){"Neg", NULL, 1, {d}};
        if (sg) ops[n++] = (sweep_op){"Relu", NULL, 1, {d}};
        if (!sg) ops[n++] = (sweep_op){"BitShift", "direction=LEFT", 2, {d, d}};
        if (!sg) ops[n++] = (sweep_op){"BitShift", "direction=RIGHT", 2, {d, d}};
    }
    ops[n++] = (sweep_op){"And", NULL, 2, {DL_BOOL, DL_BOOL}};
    ops[n++] = (sweep_op){"Or", NULL, 2, {DL_BOOL, DL_BOOL}};
    ops[n++] = (sweep_op){"Xor", NULL, 2, {DL_BOOL, DL_BOOL}};
    ops[n++] = (sweep_op){"Equal", NULL, 2, {DL_BOOL, DL_BOOL}};
    ops[n++] = (sweep_op){"Where", NULL, 3, {DL_BOOL, DL_I64, DL_I64}};
    ops[n++] = (sweep_op){"Where", NULL, 3, {DL_BOOL, DL_BOOL, DL_BOOL}};
    ops[n++] = (sweep_op){"Identity", NULL, 1, {DL_BOOL}};
    for (size_t a = 0; a < DL_ARRAY_LEN(ctypes); a++)
        for (size_t b = 0; b < DL_ARRAY_LEN(ctypes); b++) {
            static char attr[DL_ARRAY_LEN(ctypes)][16];
            static const int onnx[] = {1, 11, 3, 2, 6, 12, 7, 13, 9};
            snprintf(attr[b], sizeof attr[b], "to=%d", onnx[b]);
            if (a != b) ops[n++] = (sweep_op){"Cast", attr[b], 1, {ctypes[a]}};
        }

    static gcase cs[600];
    batch bt;
    batch_init(&bt);
    dl_target tg = {.vector_bytes = 32, .threads = 1};
    int ok_cases = 0;
    for (int k = 0; k < n; k++) {
        char label[96];
        snprintf(label, sizeof label, "sweep %s(%s) %s %s", ops[k].op,
                 ops[k].attrs ? ops[k].attrs : "", dl_dtype_name(ops[k].in[0]),
                 ops[k].n_in > 1 ? dl_dtype_name(ops[k].in[1]) : "");
        gcase *c = &cs[k];
        *c = new_case();
        int64_t d1[] = {2, 61}, d2[] = {61};
        dl_value *in[3];
        for (int i = 0; i < ops[k].n_in; i++) {
            char nm[8];
            snprintf(nm, sizeof nm, "x%d", i);
            bool scalar_bound = strcmp(ops[k].op, "Clip") == 0 && i > 0;
            in[i] =
                dl_input(c->g, nm, ops[k].in[i], scalar_bound ? 0 : (i ? 1 : 2), i ? d2 : d1, NULL);
        }
        dl_value *y;
        const char *attrs[4];
        int na = 0;
        static char abuf[4][64];
        if (ops[k].attrs) {
            char tmp[128];
            snprintf(tmp, sizeof tmp, "%s", ops[k].attrs);
            for (char *tok = strtok(tmp, ";"); tok && na < 4; tok = strtok(NULL, ";")) {
                snprintf(abuf[na], sizeof abuf[na], "%s", tok);
                attrs[na] = abuf[na];
                na++;
            }
        }
        dl_add_node(c->g, ops[k].op, ops[k].n_in, in, 1, &y, na, attrs);
        dl_output(c->g, y, "y");
        if (!gcase_run(c, label, NULL, true)) continue;
        ewdesc e;
        ew_of_graph(c, &e);
        bool sup = dl_ew_supported(c->g->nodes.items[0]);
        if (!sup) printf("     %s: not supported\n", label);
        CHECK(label, sup);
        char nm[32];
        snprintf(nm, sizeof nm, "sw%d", k);
        dl_status st = dl_emit_elementwise(c->ctx, &e.grp, &tg, nm, &bt.src);
        if (st != DL_OK) printf("     %s: %s\n", label, dl_errmsg(c->ctx));
        CHECK(label, st == DL_OK);
        if (st == DL_OK) batch_add(&bt, nm);
        ok_cases++;
    }
    if (batch_build(&bt, "op sweep")) {
        for (int k = 0; k < n; k++) {
            char nm[32], label[96];
            snprintf(nm, sizeof nm, "sw%d", k);
            snprintf(label, sizeof label, "sweep %s(%s) %s -> %s", ops[k].op,
                     ops[k].attrs ? ops[k].attrs : "", dl_dtype_name(ops[k].in[0]),
                     cs[k].n_out ? dl_dtype_name(cs[k].ref[0]->dtype) : "?");
            kfn fn = batch_fn(&bt, nm);
            if (fn) run_compare(&cs[k], fn, label, 2e-6);
        }
    }
    printf("op sweep: %d kernels\n", ok_cases);
    batch_free(&bt);
    for (int k = 0; k < n; k++) gcase_free(&cs[k]);
}

/* ---------------------------------------------------------------- schedule legality, text */

static bool has(const char *text, const char *what) {
    return strstr(text, what) != NULL;
}

static void test_illegal_and_text(void) {
    gcase c = new_case();
    c.g->opset = 12;
    int64_t d[] = {64, 32, 48};
    dl_value *x = dl_input(c.g, "x", DL_F32, 3, d, NULL);
    dl_output(c.g, dl_op1(c.g, "ReduceSum", x, "axes=[1];keepdims=1"), "y");
    if (!gcase_run(&c, "legality", NULL, false)) {
        gcase_free(&c);
        return;
    }
    dl_reduce_desc rd = {
        .in = c.kin[0], .out = c.kout[0], .kind = DL_RED_SUM, .axes = {false, true}};
    dl_lfunc *f;
    dl_status st = dl_lower_reduce(c.ctx, &rd, "k_legal", &f);
    CHECK("lower ReduceSum axis 1", st == DL_OK);
    if (st != DL_OK) {
        gcase_free(&c);
        return;
    }
    int i0 = dl_lf_find_var(f, "i0"), i1 = dl_lf_find_var(f, "i1"), r0 = dl_lf_find_var(f, "r0");
    CHECK("loops i0 i1 r0", i0 >= 0 && i1 >= 0 && r0 >= 0);
    dl_ctx *ctx = c.ctx;
#define ILLEGAL(what, call)                                                                        \
    do {                                                                                           \
        dl_ctx_clear(ctx);                                                                         \
        dl_status s_ = (call);                                                                     \
        CHECK("illegal: " what, s_ == DL_ERR_INVALID && dl_errmsg(ctx)[0]);                        \
    } while (0)
    ILLEGAL("parallel over a reduction loop", dl_sched_parallel(ctx, f, r0, NULL));
    ILLEGAL("vectorize a non-innermost loop", dl_sched_vectorize(ctx, f, i0));
    ILLEGAL("split by 0", dl_sched_split(ctx, f, i0, 0, DL_TAIL_MIN, NULL, NULL));
    ILLEGAL("split an unknown variable", dl_sched_split(ctx, f, 999, 4, DL_TAIL_MIN, NULL, NULL));
    int order[2] = {r0, i1};
    ILLEGAL("reorder across the accumulator", dl_sched_reorder(ctx, f, 2, order));
    int twice[2] = {i0, i0};
    ILLEGAL("reorder naming a loop twice", dl_sched_reorder(ctx, f, 2, twice));
    ILLEGAL("unroll by 1", dl_sched_unroll(ctx, f, i1, 1));
    dl_ctx_clear(ctx);
    CHECK("parallel i0", dl_sched_parallel(ctx, f, i0, NULL) == DL_OK);
    ILLEGAL("parallel inside a parallel loop", dl_sched_parallel(ctx, f, i1, NULL));
    ILLEGAL("split an annotated loop", dl_sched_split(ctx, f, i0, 4, DL_TAIL_MIN, NULL, NULL));
    ILLEGAL("collapse a serial loop", dl_sched_collapse(ctx, f, i1, 2));
    ILLEGAL("collapse across the accumulator", dl_sched_collapse(ctx, f, i0, 3));
    ILLEGAL("unroll a parallel loop", dl_sched_unroll(ctx, f, i0, 4));
    int o, in;
    dl_ctx_clear(ctx);
    CHECK("split r0 by 5 (tail)", dl_sched_split(ctx, f, r0, 5, DL_TAIL_MIN, &o, &in) == DL_OK);
    int bad[2] = {in, o};
    ILLEGAL("reorder a min() tail loop outside its outer loop", dl_sched_reorder(ctx, f, 2, bad));
    dl_ctx_clear(ctx);
    CHECK("vectorize the sum's inner loop", dl_sched_vectorize(ctx, f, in) == DL_OK);
    CHECK("unroll r0_o", dl_sched_unroll(ctx, f, o, 2) == DL_OK);
    dl_sbuf text = {0};
    st = dl_render_c(ctx, f, &text);
    const char *t = dl_sb_str(&text);
    CHECK("render after illegal requests", st == DL_OK);
    if (getenv("DLCC_TEST_VERBOSE")) printf("%s", t);
    CHECK("text: parallel loop outlined",
          has(t, "static void k_legal_p0(void *dlg_ctx, int64_t dlg_lo, int64_t dlg_hi) {\n") &&
              has(t, "    for (int64_t i0 = dlg_lo; i0 < dlg_hi; i0++) {\n") &&
              has(t, "dlrt_parallel((int64_t)(64), 0, 1, 0, k_legal_p0, &dlg_c);\n"));
    CHECK("text: simd reduction", has(t, "#pragma omp simd reduction(+:acc)"));
    CHECK("text: unroll", has(t, "#pragma GCC unroll 2"));
    CHECK("text: tail min", has(t, "r0_i < (5 < 32 - r0_o * 5 ? 5 : 32 - r0_o * 5)"));
    CHECK("text: let of the split variable", has(t, "const int64_t r0 = r0_o * 5 + r0_i;"));
    CHECK("text: no restrict", !has(t, "restrict"));
    CHECK("text: typed buffers",
          has(t, "const float *b0 = (const float *)b[0];") && has(t, "float *b1 = (float *)b[1];"));
    batch b;
    batch_init(&b);
    dl_sb_put(&b.src, t);
    const char *nm = batch_add(&b, "k_legal");
    if (batch_build(&b, "legality kernel"))
        run_compare(&c, batch_fn(&b, nm), "after illegal requests", 1e-6);
    batch_free(&b);
    dl_sb_free(&text);
    dl_lfunc_free(f);

    /* a parallel loop inside a serial one: the outer loop's variable is captured into the
     * outlined function's struct */
    st = dl_lower_reduce(ctx, &rd, "k_inner", &f);
    CHECK("lower ReduceSum again", st == DL_OK);
    if (st == DL_OK) {
        i1 = dl_lf_find_var(f, "i1");
        CHECK("parallel i1 inside i0", dl_sched_parallel(ctx, f, i1, NULL) == DL_OK);
        dl_sbuf it = {0};
        CHECK("render the inner parallel loop", dl_render_c(ctx, f, &it) == DL_OK);
        const char *ti = dl_sb_str(&it);
        CHECK("text: the outer variable captured",
              has(ti, "    int64_t i0;\n} k_inner_p0_ctx;") &&
                  has(ti, "    const int64_t i0 = dlg_c->i0;\n") &&
                  has(ti, "k_inner_p0_ctx dlg_c = {.b = b, .s = s, .i0 = i0};"));
        batch bi;
        batch_init(&bi);
        dl_sb_put(&bi.src, ti);
        const char *ni = batch_add(&bi, "k_inner");
        if (batch_build(&bi, "inner parallel kernel"))
            run_compare(&c, batch_fn(&bi, ni), "inner parallel loop", 1e-6);
        batch_free(&bi);
        dl_sb_free(&it);
        dl_lfunc_free(f);
    }

    /* ReduceMax: its accumulation cannot be vectorized */
    rd.kind = DL_RED_MAX;
    st = dl_lower_reduce(ctx, &rd, "k_max", &f);
    CHECK("lower ReduceMax", st == DL_OK);
    if (st == DL_OK) {
        ILLEGAL("vectorize a max accumulation",
                dl_sched_vectorize(ctx, f, dl_lf_find_var(f, "r0")));
        dl_lfunc_free(f);
    }

    /* the default schedule on a large elementwise group, static and symbolic */
    gcase e = new_case();
    int64_t de[] = {-1, 256, 200};
    const char *sn[] = {"B", NULL, NULL};
    dl_value *a = dl_input(e.g, "a", DL_F32, 3, de, sn);
    dl_output(e.g, dl_relu(e.g, a), "y");
    int64_t rt[1][DL_MAX_RANK] = {{2, 256, 200}};
    if (gcase_run(&e, "default text", rt, false)) {
        ewdesc ed;
        ew_of_graph(&e, &ed);
        dl_sbuf sb = {0};
        dl_target tg = {.vector_bytes = 64, .threads = 8};
        st = dl_emit_elementwise(e.ctx, &ed.grp, &tg, "k_relu", &sb);
        t = dl_sb_str(&sb);
        CHECK("emit symbolic Relu", st == DL_OK);
        if (getenv("DLCC_TEST_VERBOSE")) printf("%s", t);
        CHECK("text: symbolic parallel if(), pieces on 64-element boundaries",
              has(t, "dlrt_parallel((int64_t)(n0), (n0 > 32768) ? 0 : 1, 64, 0, k_relu_p0, "
                     "&dlg_c);") &&
                  has(t, "    #pragma omp simd\n    for (int64_t i0 = dlg_lo; i0 < dlg_hi; "));
        CHECK("text: merged extent let", has(t, "const int64_t n0 = s[0] * 51200;"));
        dl_sb_free(&sb);
        ed.grp.out = ed.grp.in; /* a mismatched request: output dims of another rank */
        dl_kbuf bad_out = e.kout[0];
        bad_out.rank = 2;
        ed.grp.out = &bad_out;
        dl_ctx_clear(e.ctx);
        CHECK("mismatched output shape is refused",
              dl_emit_elementwise(e.ctx, &ed.grp, &tg, "k_bad", &sb) != DL_OK &&
                  dl_errmsg(e.ctx)[0]);
        dl_sb_free(&sb);
    }
    gcase_free(&e);

    /* few outer iterations: the default schedule collapses loops into the parallel one */
    e = new_case();
    int64_t dx[] = {2, 3, 128, 128}, dy[] = {3, 1, 1};
    dl_value *ex = dl_input(e.g, "x", DL_F32, 4, dx, NULL);
    dl_value *ey = dl_input(e.g, "y", DL_F32, 3, dy, NULL);
    dl_output(e.g, dl_add(e.g, ex, ey), "z");
    if (gcase_run(&e, "collapse", NULL, false)) {
        ewdesc ed;
        ew_of_graph(&e, &ed);
        batch bb;
        batch_init(&bb);
        dl_target tg = {.vector_bytes = 32, .threads = 8};
        st = dl_emit_elementwise(e.ctx, &ed.grp, &tg, "k_collapse", &bb.src);
        CHECK("emit collapse case", st == DL_OK);
        const char *tc = dl_sb_str(&bb.src);
        CHECK("text: collapse(2), one range over both loops",
              has(tc, "dlrt_parallel((int64_t)(2) * (int64_t)(3), 0, 1, 0, k_collapse_p0, "
                      "&dlg_c);") &&
                  has(tc, "        const int64_t i0 = dlg_f / dlg_e1;\n") &&
                  has(tc, "        const int64_t i1 = dlg_f % dlg_e1;\n"));
        const char *kn = batch_add(&bb, "k_collapse");
        if (st == DL_OK && batch_build(&bb, "collapse"))
            run_compare(&e, batch_fn(&bb, kn), "collapse", 0);
        batch_free(&bb);
    }
    gcase_free(&e);
    gcase_free(&c);
#undef ILLEGAL
}

/* ---------------------------------------------------------------- support and robustness */

static void test_supported(void) {
    dl_ctx *ctx = dl_ctx_new();
    dl_graph *g = dl_graph_new(ctx);
    int64_t d[] = {4, 4};
    dl_value *h = dl_input(g, "h", DL_F16, 2, d, NULL);
    dl_value *x = dl_input(g, "x", DL_F32, 2, d, NULL);
    dl_add(g, h, h);
    dl_matmul(g, x, x);
    dl_add(g, x, x);
    dl_op1(g, "Cast", x, "to=10");
    dl_op1(g, "Softmax", x, NULL);
    CHECK("builder", dl_graph_status(g) == DL_OK);
    if (dl_graph_status(g) == DL_OK) {
        CHECK("float16 Add is not supported", !dl_ew_supported(g->nodes.items[0]));
        CHECK("MatMul is not elementwise", !dl_ew_supported(g->nodes.items[1]));
        CHECK("float32 Add is supported", dl_ew_supported(g->nodes.items[2]));
        CHECK("Cast to float16 is not supported", !dl_ew_supported(g->nodes.items[3]));
        CHECK("Softmax is not elementwise", !dl_ew_supported(g->nodes.items[4]));
    }
    char buf[16];
    CHECK("dl_kdim_c constant",
          strcmp(dl_kdim_c((dl_kdim){.c = 12, .sym = -1}, buf, sizeof buf), "12") == 0);
    CHECK("dl_kdim_c symbol",
          strcmp(dl_kdim_c((dl_kdim){.c = 0, .sym = 3}, buf, sizeof buf), "s[3]") == 0);
    dl_graph_free(g);
    dl_ctx_free(ctx);
}

/* Every allocation failure during lowering, scheduling and rendering is a clean error. */
static void test_alloc_failures(void) {
    gcase c = new_case();
    int64_t da[] = {-1, 3, 8}, db[] = {3, 1};
    const char *sn[] = {"N", NULL, NULL};
    dl_value *a = dl_input(c.g, "a", DL_F32, 3, da, sn);
    dl_value *b = dl_input(c.g, "b", DL_F32, 2, db, NULL);
    dl_output(c.g, dl_sigmoid(c.g, dl_add(c.g, a, b)), "y");
    int64_t rt[2][DL_MAX_RANK] = {{2, 3, 8}, {3, 1}};
    if (gcase_run(&c, "alloc failures", rt, false)) {
        ewdesc e;
        ew_of_graph(&c, &e);
        dl_target t = {.vector_bytes = 32, .threads = 4};
        int nomem = 0, ok_at = -1;
        for (long n = 0; n < 200 && ok_at < 0; n++) {
            dl_sbuf sb = {0};
            dl_ctx_clear(c.ctx);
            dl_alloc_fail_after(n);
            dl_status st = dl_emit_elementwise(c.ctx, &e.grp, &t, "k", &sb);
            dl_alloc_fail_after(-1);
            if (st == DL_ERR_NOMEM) nomem++;
            if (st == DL_OK) ok_at = (int)n;
            if (st != DL_OK && st != DL_ERR_NOMEM) printf("     at %ld: %s\n", n, dl_errmsg(c.ctx));
            dl_sb_free(&sb);
        }
        CHECK("allocation failures end in DL_ERR_NOMEM, then success", nomem > 0 && ok_at == nomem);
    }
    gcase_free(&c);
}

int main(void) {
    test_supported();
    test_chain_broadcast();
    test_symbolic();
    test_where();
    test_int_div_mod();
    test_cast();
    test_silu();
    test_scalar_and_empty();
    test_clip_forms();
    test_reductions();
    test_transposes();
    test_illegal_and_text();
    test_alloc_failures();
    sweep();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
