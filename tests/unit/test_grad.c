/* test_grad.c — every gradient rule against central finite differences.
 *
 * Each case builds one node, a loss sum_o <out_o, R_o> with fixed random R_o, and the autodiff
 * graph for the differentiated inputs; the reference interpreter computes the analytic gradient
 * and the loss at x ± h for sampled elements. Cases run in float64 unless the op only takes
 * float32. With DLCC_GRAD_NATIVE=1 the gradient graph is instead compiled (native backend) and
 * must agree with the interpreter (the finite differences and the coverage check below are the
 * plain run's, not counted twice). Every op row with a gradient rule must have a case.
 *
 * Input specs: "x:2,3" differentiated, normal values; "p:2,3" differentiated, in [0.5, 2];
 * "u:2,3" differentiated, in [0.1, 0.9]; "g:2,3" differentiated, in [1.5, 3]; "f:2,3" float
 * constant (not differentiated); "i:2=0,1" int64 constant with these values; "b:2,3" bool constant,
 * random; "-" omitted; "x:" a scalar. */
#include "../../src/train/grad.h"

#include <math.h>
#include <stdlib.h>

#include "check.h"

/* case tables leave trailing fields to their zero defaults */
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

typedef struct grad_case {
    const char *op;
    const char *attrs; /* "k=v;k=v" */
    const char *in[8]; /* specs, NULL after the last */
    int n_out;         /* outputs in the loss (0 = 1) */
    dl_dtype dtype;    /* of the float inputs (0 = float64) */
    const char *domain;
    double tol; /* 0 = default for the dtype */
} grad_case;

#include "grad-cases-core.inc"
#include "grad-cases-math.inc"
#include "grad-cases-shape.inc"
#include "grad-cases-nn.inc"

static const grad_case *const case_lists[] = {cases_core, cases_math, cases_shape, cases_nn};

#include "test-rng.h"

typedef struct spec {
    char kind;
    int rank;
    int64_t dims[DL_MAX_RANK];
    int n_vals;
    int64_t vals[64];
} spec;

static bool parse_spec(const char *s, spec *sp) {
    memset(sp, 0, sizeof *sp);
    if (strcmp(s, "-") == 0) {
        sp->kind = '-';
        return true;
    }
    if (!s[0] || s[1] != ':') return false;
    sp->kind = s[0];
    const char *p = s + 2;
    while (*p && *p != '=') {
        char *end;
        long long d = strtoll(p, &end, 10);
        if (end == p || sp->rank >= DL_MAX_RANK) return false;
        sp->dims[sp->rank++] = d;
        p = end;
        if (*p == ',') p++;
    }
    if (*p == '=') {
        p++;
        while (*p) {
            char *end;
            long long v = strtoll(p, &end, 10);
            if (end == p || sp->n_vals >= 64) return false;
            sp->vals[sp->n_vals++] = v;
            p = end;
            if (*p == ',') p++;
        }
    }
    return true;
}

static bool differentiated(char k) {
    return k == 'x' || k == 'p' || k == 'u' || k == 'g';
}

static dl_tensor *make_input(dl_ctx *ctx, const spec *sp, dl_dtype ft) {
    dl_dtype dt = sp->kind == 'i' ? DL_I64 : sp->kind == 'b' ? DL_BOOL : ft;
    dl_tensor *t = NULL;
    if (dl_tensor_new(ctx, dt, sp->rank, sp->dims, &t) != DL_OK) return NULL;
    for (int64_t i = 0; i < t->numel; i++) {
        double v;
        switch (sp->kind) {
        case 'p':
            v = 0.5 + 1.5 * urand();
            break;
        case 'u':
            v = 0.1 + 0.8 * urand();
            break;
        case 'g':
            v = 1.5 + 1.5 * urand();
            break;
        case 'i':
            v = i < sp->n_vals ? (double)sp->vals[i] : 0;
            break;
        case 'b':
            v = urand() < 0.5;
            break;
        default:
            v = grand();
        }
        dl_set_f64(t, i, v);
    }
    return t;
}

typedef struct built {
    dl_graph *g;
    int n_x;         /* differentiated inputs (graph inputs, in order) */
    dl_tensor *x[8]; /* their values */
    dl_value *grads[8];
} built;

static const char *case_name(const grad_case *c, char *buf, size_t n) {
    snprintf(buf, n, "%s%s%s [%s]", c->domain ? c->domain : "", c->domain ? "." : "", c->op,
             c->attrs ? c->attrs : "");
    return buf;
}

/* Builds node + loss + gradients. */
static dl_status build(dl_ctx *ctx, const grad_case *c, built *b) {
    memset(b, 0, sizeof *b);
    dl_dtype ft = c->dtype ? c->dtype : DL_F64;
    dl_graph *g = dl_graph_new(ctx);
    if (!g) return DL_ERR_NOMEM;
    b->g = g;
    g->opset = DG_OPSET;
    dl_value *in[8] = {0}, *xs[8] = {0};
    int n_in = 0;
    for (; n_in < 8 && c->in[n_in]; n_in++) {
        spec sp;
        if (!parse_spec(c->in[n_in], &sp))
            return dl_fail(ctx, DL_ERR_INVALID, "bad spec '%s'", c->in[n_in]);
        if (sp.kind == '-') continue;
        dl_tensor *t = make_input(ctx, &sp, ft);
        if (!t) return DL_ERR_NOMEM;
        if (differentiated(sp.kind)) {
            char nm[16];
            snprintf(nm, sizeof nm, "x%d", b->n_x);
            in[n_in] = dl_input(g, nm, t->dtype, t->rank, t->dims, NULL);
            xs[b->n_x] = in[n_in];
            b->x[b->n_x++] = t;
        } else {
            in[n_in] = dl_constant(g, NULL, t);
        }
    }
    char abuf[512];
    const char *alist[16];
    int n_attr = 0;
    if (c->attrs && c->attrs[0]) {
        snprintf(abuf, sizeof abuf, "%s", c->attrs);
        char *save = NULL;
        for (char *t = strtok_r(abuf, ";", &save); t && n_attr < 16; t = strtok_r(NULL, ";", &save))
            alist[n_attr++] = t;
    }
    int n_out = c->n_out ? c->n_out : 1;
    dl_value *out[8] = {0};
    DL_TRY(dl_add_node_ex(g, c->domain, c->op, c->domain ? 1 : DG_OPSET, n_in, in, n_out, out,
                          n_attr, alist, 0, NULL));
    dl_value *loss = NULL;
    for (int o = 0; o < n_out; o++) {
        if (!out[o] || !dl_type_known(&out[o]->type))
            return dl_fail(ctx, DL_ERR_INVALID, "output %d shape unknown", o);
        if (out[o]->type.dtype != ft) continue;
        dl_tensor *r = NULL;
        DL_TRY(dl_tensor_new(ctx, ft, out[o]->type.rank, out[o]->type.dims, &r));
        for (int64_t i = 0; i < r->numel; i++) dl_set_f64(r, i, grand());
        dl_value *term =
            dl_op1(g, "ReduceSum", dl_mul(g, out[o], dl_constant(g, NULL, r)), "keepdims=0");
        loss = loss ? dl_add(g, loss, term) : term;
    }
    if (!loss) return dl_fail(ctx, DL_ERR_INVALID, "no float output");
    dl_output(g, loss, "loss");
    DL_TRY(dl_graph_status(g));
    DL_TRY(dl_graph_toposort(g));
    DL_TRY(dl_autodiff(g, loss, b->n_x, xs, b->grads));
    for (int i = 0; i < b->n_x; i++) dl_output(g, b->grads[i], NULL);
    return dl_graph_status(g);
}

static dl_status run_ref(dl_ctx *ctx, built *b, dl_tensor **outs) {
    return dl_run(ctx, b->g, DL_BACKEND_REF, b->n_x, NULL, b->x, outs);
}

static void free_outs(dl_tensor **o, int n) {
    for (int i = 0; i < n; i++) dl_tensor_free(o[i]);
}

static void run_case(dl_ctx *ctx, const grad_case *c, bool native) {
    dl_ctx_clear(ctx);
    char name[300];
    case_name(c, name, sizeof name);
    built b;
    dl_status s = build(ctx, c, &b);
    if (s != DL_OK) {
        printf("FAIL %s: build: %s\n", name, dl_errmsg(ctx));
        failed++;
        goto out;
    }
    dl_tensor *an[9] = {0};
    int n_o = 1 + b.n_x;
    if (run_ref(ctx, &b, an) != DL_OK) {
        printf("FAIL %s: run: %s\n", name, dl_errmsg(ctx));
        failed++;
        goto out;
    }
    bool f64 = (c->dtype ? c->dtype : DL_F64) == DL_F64;
    double tol = c->tol ? c->tol : (f64 ? 1e-6 : 2e-2);
    double worst = 0;
    int checked = 0;
    /* the native pass compares with the reference gradients only: the finite differences are
     * the plain run's checks (counted once) */
    for (int k = 0; k < b.n_x && !native; k++) {
        dl_tensor *x = b.x[k];
        int64_t step = x->numel > 24 ? x->numel / 24 : 1;
        for (int64_t e = 0; e < x->numel; e += step) {
            double x0 = dl_get_f64(x, e), h = (f64 ? 1e-5 : 1e-2) * fmax(1.0, fabs(x0));
            double l[2];
            for (int side = 0; side < 2; side++) {
                dl_set_f64(x, e, side ? x0 - h : x0 + h);
                dl_tensor *o[9] = {0};
                if (run_ref(ctx, &b, o) != DL_OK) {
                    printf("FAIL %s: fd run: %s\n", name, dl_errmsg(ctx));
                    failed++;
                    dl_set_f64(x, e, x0);
                    free_outs(an, n_o);
                    goto out;
                }
                l[side] = dl_get_f64(o[0], 0);
                free_outs(o, n_o);
            }
            dl_set_f64(x, e, x0);
            double fd = (l[0] - l[1]) / (2 * h), a = dl_get_f64(an[1 + k], e);
            double err = fabs(fd - a) / (fmax(1.0, fabs(fd)));
            if (!(err <= worst)) worst = err;
            checked++;
        }
    }
    if (!native) {
        if (!(worst <= tol))
            printf("  %s: worst error %.3g over %d elements (tol %.1g)\n", name, worst, checked,
                   tol);
        CHECK(name, worst <= tol && checked > 0);
    }
    if (native) {
        dl_tensor *nat[9] = {0};
        double nworst = INFINITY;
        if (dl_run(ctx, b.g, DL_BACKEND_NATIVE, b.n_x, NULL, b.x, nat) == DL_OK) {
            nworst = 0;
            for (int o = 0; o < n_o; o++)
                for (int64_t i = 0; i < an[o]->numel; i++) {
                    double d = fabs(dl_get_f64(an[o], i) - dl_get_f64(nat[o], i)) /
                               (1e-3 + fabs(dl_get_f64(an[o], i)));
                    if (!(d <= nworst)) nworst = d;
                }
            free_outs(nat, n_o);
        } else {
            printf("  native: %s\n", dl_errmsg(ctx));
        }
        char nn[340];
        snprintf(nn, sizeof nn, "%s native", name);
        CHECK(nn, nworst <= (f64 ? 1e-9 : 1e-4));
    }
    free_outs(an, n_o);
out:
    for (int i = 0; i < b.n_x; i++) dl_tensor_free(b.x[i]);
    dl_graph_free(b.g);
}

static bool has_case(const dl_op_def *op) {
    for (size_t l = 0; l < sizeof case_lists / sizeof *case_lists; l++)
        for (const grad_case *c = case_lists[l]; c->op; c++) {
            bool dom = (!c->domain && (!op->domain || !op->domain[0])) ||
                       (c->domain && op->domain && strcmp(c->domain, op->domain) == 0);
            if (dom && strcmp(c->op, op->name) == 0) return true;
        }
    return false;
}

/* Errors the pass must give rather than a wrong graph. */
static void check_errors(dl_ctx *ctx) {
    dl_ctx_clear(ctx);
    dl_graph *g = dl_graph_new(ctx);
    g->opset = DG_OPSET;
    int64_t d[1] = {3};
    dl_value *x = dl_input(g, "x", DL_F32, 1, d, NULL);
    dl_value *y = dl_op1(g, "ReduceSum", dl_op2(g, "Mod", x, x, "fmod=1"), "keepdims=0");
    dl_graph_toposort(g);
    dl_value *gr = NULL;
    dl_status s = dl_autodiff(g, y, 1, &x, &gr);
    CHECK("no rule -> clear error", s == DL_ERR_UNSUPPORTED && strstr(dl_errmsg(ctx), "Mod") &&
                                        strstr(dl_errmsg(ctx), "no gradient rule"));
    dl_graph_free(g);
    g = dl_graph_new(ctx);
    g->opset = DG_OPSET;
    x = dl_input(g, "x", DL_F32, 1, d, NULL);
    y = dl_relu(g, x);
    dl_graph_toposort(g);
    dl_ctx_clear(ctx);
    s = dl_autodiff(g, y, 1, &x, &gr);
    if (!strstr(dl_errmsg(ctx), "3 elements")) printf("  got: %s\n", dl_errmsg(ctx));
    CHECK("non-scalar loss -> error", s == DL_ERR_INVALID && strstr(dl_errmsg(ctx), "3 elements"));
    dl_graph_free(g);
    /* a parameter the loss does not use gets a zero gradient */
    g = dl_graph_new(ctx);
    g->opset = DG_OPSET;
    x = dl_input(g, "x", DL_F32, 1, d, NULL);
    dl_value *w = dl_input(g, "w", DL_F32, 1, d, NULL);
    y = dl_op1(g, "ReduceSum", dl_mul(g, x, x), "keepdims=0");
    dl_value *ws[2] = {x, w}, *gs[2] = {0};
    dl_graph_toposort(g);
    s = dl_autodiff(g, y, 2, ws, gs);
    CHECK("unused parameter gets zeros", s == DL_OK && gs[1] && gs[1]->constant &&
                                             gs[1]->constant->numel == 3 &&
                                             dl_get_f64(gs[1]->constant, 0) == 0.0);
    dl_graph_free(g);
}

int main(int argc, char **argv) {
    dl_ctx *ctx = dl_ctx_new();
    const char *only = argc > 1 ? argv[1] : NULL;
    const char *nat = getenv("DLCC_GRAD_NATIVE");
    bool native = nat && nat[0] == '1';
    for (size_t l = 0; l < sizeof case_lists / sizeof *case_lists; l++)
        for (const grad_case *c = case_lists[l]; c->op; c++)
            if (!only || strcmp(only, c->op) == 0) run_case(ctx, c, native);
    if (!only && !native) {
        int rules = 0;
        for (int i = 0; i < dl_op_count(); i++) {
            const dl_op_def *op = dl_op_at(i);
            if (!op->grad) continue;
            rules++;
            char nm[200];
            snprintf(nm, sizeof nm, "op %s%s%s has a gradient test", op->domain ? op->domain : "",
                     op->domain ? "." : "", op->name);
            CHECK(nm, has_case(op));
        }
        printf("%d ops have gradient rules\n", rules);
        check_errors(ctx);
    }
    dl_ctx_free(ctx);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
