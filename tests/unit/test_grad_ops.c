/* test_grad_ops.c — the internal backward ops of src/ops/grad-ops.c (domain ai.dlcc), on their
 * own: ConvGradInput / ConvGradWeight / MaxPoolGrad / AveragePoolGrad run by the reference
 * interpreter against straightforward loops over the forward op's definition (every output
 * position, every tap), in float64, float32 and float16; ties in MaxPoolGrad go to the first
 * maximum; inference rejects inconsistent shapes with a clear error; and the gradient rules
 * fail clearly where they must (BatchNormalization in training mode) and handle a symbolic
 * batch (X's shape taken at run time). */
#include "../../src/train/grad.h"

#include <math.h>
#include <stdlib.h>

#define CHECK_FAIL_DETAIL() printf(" [%s]", dl_errmsg(ctx))
#include "check.h"

/* case tables leave geo.out (computed) to its zero default */
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

static dl_ctx *ctx;
static unsigned seed = 12345;

static double rnd(void) {
    seed = seed * 1103515245u + 12345u;
    return (double)((seed >> 8) & 0xffff) / 32768.0 - 1.0;
}

/* ---- geometry of a case (explicit; the naive loops read it) ---- */

typedef struct geo {
    int ns;
    int64_t in[3], k[3], s[3], pb[3], pe[3], dil[3], out[3];
} geo;

static int64_t prod(int n, const int64_t *v) {
    int64_t p = 1;
    for (int i = 0; i < n; i++) p *= v[i];
    return p;
}

/* Forward output sizes (floor, or ceil with the last window starting inside). */
static void geo_out(geo *g, bool ceil_mode) {
    for (int d = 0; d < g->ns; d++) {
        int64_t span = g->in[d] + g->pb[d] + g->pe[d] - ((g->k[d] - 1) * g->dil[d] + 1);
        g->out[d] = (ceil_mode ? (span + g->s[d] - 1) / g->s[d] : span / g->s[d]) + 1;
        if (ceil_mode && (g->out[d] - 1) * g->s[d] >= g->in[d] + g->pb[d]) g->out[d]--;
    }
}

/* "strides=[..];dilations=[..];pads=[..];more" for the geometry (pads left to auto_pad when
 * more sets it). */
static void geo_attrs(const geo *g, const char *more, char *buf, size_t n) {
    const char *names[3] = {"strides", "dilations", "pads"};
    const int64_t *vals[3] = {g->s, g->dil, g->pb};
    buf[0] = 0;
    for (int a = 0; a < (strstr(more, "auto_pad") ? 2 : 3); a++) {
        snprintf(buf + strlen(buf), n - strlen(buf), "%s%s=[", a ? ";" : "", names[a]);
        int cnt = a == 2 ? 2 * g->ns : g->ns;
        for (int i = 0; i < cnt; i++)
            snprintf(buf + strlen(buf), n - strlen(buf), "%s%lld", i ? "," : "",
                     (long long)(i < g->ns ? vals[a][i] : g->pe[i - g->ns]));
        snprintf(buf + strlen(buf), n - strlen(buf), "]");
    }
    snprintf(buf + strlen(buf), n - strlen(buf), ";%s", more);
}

/* "kernel_shape=[k0,k1,...]" */
static void kernel_attr(const geo *g, char *buf, size_t n) {
    snprintf(buf, n, "kernel_shape=[");
    for (int d = 0; d < g->ns; d++)
        snprintf(buf + strlen(buf), n - strlen(buf), "%s%lld", d ? "," : "", (long long)g->k[d]);
    snprintf(buf + strlen(buf), n - strlen(buf), "]");
}

/* Input position of tap kp at output position op, or false outside the input. */
static bool tap_pos(const geo *g, const int64_t *op, const int64_t *kp, int64_t *off) {
    *off = 0;
    for (int d = 0; d < g->ns; d++) {
        int64_t id = op[d] * g->s[d] - g->pb[d] + kp[d] * g->dil[d];
        if (id < 0 || id >= g->in[d]) return false;
        *off = *off * g->in[d] + id;
    }
    return true;
}

/* ---- running one internal node ---- */

static dl_tensor *tensor(dl_dtype dt, int rank, const int64_t *dims, const double *v) {
    dl_tensor *t = NULL;
    if (dl_tensor_new(ctx, dt, rank, dims, &t) != DL_OK) return NULL;
    for (int64_t i = 0; i < t->numel; i++) dl_set_f64(t, i, v ? v[i] : 0);
    return t;
}

static dl_value *ints(dl_graph *g, int n, const int64_t *v) {
    int64_t d = n;
    dl_tensor *t = NULL;
    if (dl_tensor_new(ctx, DL_I64, 1, &d, &t) != DL_OK) return NULL;
    memcpy(t->data, v, sizeof(int64_t) * (size_t)n);
    return dl_constant(g, NULL, t);
}

/* Adds an ai.dlcc node; attrs "k=v;k=v". Returns its output or NULL (error on the context). */
static dl_value *internal(dl_graph *g, const char *op, int n_in, dl_value *const *in,
                          const char *attrs) {
    char buf[512];
    const char *list[16];
    int na = 0;
    snprintf(buf, sizeof buf, "%s", attrs ? attrs : "");
    for (char *t = strtok(buf, ";"); t && na < 16; t = strtok(NULL, ";")) list[na++] = t;
    dl_value *out = NULL;
    if (dl_add_node_ex(g, DG_DOMAIN, op, 1, n_in, in, 1, &out, na, list, 0, NULL) != DL_OK)
        return NULL;
    return out;
}

/* Runs the graph (no runtime inputs), returning its one output as doubles in got[]. */
static bool run1(dl_graph *g, dl_value *out, double *got, int64_t n) {
    if (!out) return false;
    dl_output(g, out, NULL);
    dl_tensor *res = NULL;
    if (dl_graph_toposort(g) != DL_OK ||
        dl_run(ctx, g, DL_BACKEND_REF, 0, NULL, NULL, &res) != DL_OK)
        return false;
    bool ok = res->numel == n;
    for (int64_t i = 0; ok && i < n; i++) got[i] = dl_get_f64(res, i);
    dl_tensor_free(res);
    return ok;
}

static bool close_to(const double *a, const double *b, int64_t n, double tol) {
    for (int64_t i = 0; i < n; i++)
        if (!(fabs(a[i] - b[i]) <= tol * (1 + fabs(b[i])))) {
            printf("  [%lld] got %.9g want %.9g\n", (long long)i, a[i], b[i]);
            return false;
        }
    return true;
}

static double tol_of(dl_dtype dt) {
    return dt == DL_F64 ? 1e-12 : dt == DL_F32 ? 1e-5 : 2e-2;
}

/* ---- Conv backward against the definition ---- */

typedef struct conv_case {
    const char *name;
    geo g;
    int64_t N, C, M, group;
    const char *auto_pad; /* instead of pads: pb/pe are what it resolves to */
} conv_case;

static void conv_check(const conv_case *cc, dl_dtype dt) {
    geo g = cc->g;
    int ns = g.ns;
    geo_out(&g, false);
    int64_t Cg = cc->C / cc->group, Mg = cc->M / cc->group, K = prod(ns, g.k);
    int64_t IN = prod(ns, g.in), P = prod(ns, g.out);
    int64_t xd[5] = {cc->N, cc->C}, wd[5] = {cc->M, Cg}, yd[5] = {cc->N, cc->M};
    for (int d = 0; d < ns; d++) {
        xd[d + 2] = g.in[d];
        wd[d + 2] = g.k[d];
        yd[d + 2] = g.out[d];
    }
    int64_t nx = cc->N * cc->C * IN, nw = cc->M * Cg * K, ny = cc->N * cc->M * P;
    double *x = calloc((size_t)(nx + nw + ny) * 3, sizeof(double));
    double *w = x + nx, *dy = w + nw, *dx = dy + ny, *dw = dx + nx, *got = dw + nw;
    for (int64_t i = 0; i < nx + nw + ny; i++) x[i] = rnd();
    if (dt == DL_F16) /* exact in float16 so the reference sees the same values */
        for (int64_t i = 0; i < nx + nw + ny; i++) x[i] = round(x[i] * 64) / 64;
    for (int64_t n = 0; n < cc->N; n++)
        for (int64_t m = 0; m < cc->M; m++) {
            int64_t op[3] = {0};
            for (int64_t p = 0; p < P; p++, dl_index_next(ns, g.out, op))
                for (int64_t c = 0; c < Cg; c++) {
                    int64_t kp[3] = {0}, ci = m / Mg * Cg + c;
                    for (int64_t k = 0; k < K; k++, dl_index_next(ns, g.k, kp)) {
                        int64_t off;
                        if (!tap_pos(&g, op, kp, &off)) continue;
                        double gy = dy[(n * cc->M + m) * P + p];
                        dx[(n * cc->C + ci) * IN + off] += gy * w[(m * Cg + c) * K + k];
                        dw[(m * Cg + c) * K + k] += gy * x[(n * cc->C + ci) * IN + off];
                    }
                }
        }
    char at[400], more[160], name[200];
    snprintf(more, sizeof more, "group=%lld%s%s", (long long)cc->group,
             cc->auto_pad ? ";auto_pad=" : "", cc->auto_pad ? cc->auto_pad : "");
    geo_attrs(&g, more, at, sizeof at);
    snprintf(name, sizeof name, "ConvGradInput %s %s", cc->name, dl_dtype_name(dt));
    dl_graph *gr = dl_graph_new(ctx);
    dl_value *in[3] = {dl_constant(gr, NULL, tensor(dt, ns + 2, yd, dy)),
                       dl_constant(gr, NULL, tensor(dt, ns + 2, wd, w)), ints(gr, ns + 2, xd)};
    CHECK(name, run1(gr, internal(gr, "ConvGradInput", 3, in, at), got, nx) &&
                    close_to(got, dx, nx, tol_of(dt)));
    dl_graph_free(gr);
    snprintf(name, sizeof name, "ConvGradWeight %s %s", cc->name, dl_dtype_name(dt));
    char ks[64];
    kernel_attr(&g, ks, sizeof ks);
    snprintf(at + strlen(at), sizeof at - strlen(at), ";%s", ks);
    gr = dl_graph_new(ctx);
    dl_value *in2[2] = {dl_constant(gr, NULL, tensor(dt, ns + 2, xd, x)),
                        dl_constant(gr, NULL, tensor(dt, ns + 2, yd, dy))};
    CHECK(name, run1(gr, internal(gr, "ConvGradWeight", 2, in2, at), got, nw) &&
                    close_to(got, dw, nw, tol_of(dt) * (dt == DL_F16 ? 4 : 1)));
    dl_graph_free(gr);
    free(x);
}

/* ---- pooling backward against the definition ---- */

typedef struct pool_case {
    const char *name;
    geo g;
    int64_t N, C;
    bool max, ceil_mode, include_pad;
    const char *values; /* "tie": constant X (every window ties) */
} pool_case;

static void pool_check(const pool_case *pc, dl_dtype dt) {
    geo g = pc->g;
    int ns = g.ns;
    geo_out(&g, pc->ceil_mode);
    int64_t K = prod(ns, g.k), IN = prod(ns, g.in), P = prod(ns, g.out), planes = pc->N * pc->C;
    int64_t xd[5] = {pc->N, pc->C}, yd[5] = {pc->N, pc->C};
    for (int d = 0; d < ns; d++) {
        xd[d + 2] = g.in[d];
        yd[d + 2] = g.out[d];
    }
    int64_t nx = planes * IN, ny = planes * P;
    double *x = calloc((size_t)(3 * nx + ny), sizeof(double));
    double *dy = x + nx, *dx = dy + ny, *got = dx + nx;
    for (int64_t i = 0; i < nx; i++) x[i] = pc->values ? 0.5 : round(rnd() * 64) / 64;
    for (int64_t i = 0; i < ny; i++) dy[i] = round(rnd() * 64) / 64;
    for (int64_t pl = 0; pl < planes; pl++) {
        int64_t op[3] = {0};
        for (int64_t p = 0; p < P; p++, dl_index_next(ns, g.out, op)) {
            int64_t kp[3] = {0}, best = -1, cnt = 0, off;
            for (int64_t k = 0; k < K; k++, dl_index_next(ns, g.k, kp)) {
                bool padded = true;
                for (int d = 0; d < ns; d++) {
                    int64_t id = op[d] * g.s[d] - g.pb[d] + kp[d] * g.dil[d];
                    padded = padded && id >= -g.pb[d] && id < g.in[d] + g.pe[d];
                }
                bool inside = tap_pos(&g, op, kp, &off);
                cnt += inside || (pc->include_pad && padded);
                if (inside && (best < 0 || x[pl * IN + off] > x[pl * IN + best])) best = off;
            }
            if (pc->max) {
                if (best >= 0) dx[pl * IN + best] += dy[pl * P + p];
                continue;
            }
            memset(kp, 0, sizeof kp);
            for (int64_t k = 0; k < K && cnt; k++, dl_index_next(ns, g.k, kp))
                if (tap_pos(&g, op, kp, &off)) dx[pl * IN + off] += dy[pl * P + p] / (double)cnt;
        }
    }
    char at[400], more[160], ks[64], name[200];
    kernel_attr(&g, ks, sizeof ks);
    if (pc->max)
        snprintf(more, sizeof more, "ceil_mode=%d;%s", pc->ceil_mode, ks);
    else
        snprintf(more, sizeof more, "ceil_mode=%d;count_include_pad=%d;%s", pc->ceil_mode,
                 pc->include_pad, ks);
    geo_attrs(&g, more, at, sizeof at);
    snprintf(name, sizeof name, "%s %s %s", pc->max ? "MaxPoolGrad" : "AveragePoolGrad", pc->name,
             dl_dtype_name(dt));
    dl_graph *gr = dl_graph_new(ctx);
    dl_value *dyv = dl_constant(gr, NULL, tensor(dt, ns + 2, yd, dy)), *out;
    if (pc->max) {
        dl_value *in[2] = {dl_constant(gr, NULL, tensor(dt, ns + 2, xd, x)), dyv};
        out = internal(gr, "MaxPoolGrad", 2, in, at);
    } else {
        dl_value *in[2] = {dyv, ints(gr, ns + 2, xd)};
        out = internal(gr, "AveragePoolGrad", 2, in, at);
    }
    CHECK(name, run1(gr, out, got, nx) && close_to(got, dx, nx, tol_of(dt)));
    dl_graph_free(gr);
    free(x);
}

/* The first maximum takes the whole gradient (PyTorch's rule), also for GlobalMaxPool. */
static void tie_checks(void) {
    int64_t xd[4] = {1, 1, 2, 3}, yd[4] = {1, 1, 1, 1};
    double x[6] = {1, 3, 3, 0, 3, 2}, dy[1] = {5}, got[6];
    dl_graph *g = dl_graph_new(ctx);
    dl_value *in[2] = {dl_constant(g, NULL, tensor(DL_F32, 4, xd, x)),
                       dl_constant(g, NULL, tensor(DL_F32, 4, yd, dy))};
    bool ok = run1(g, internal(g, "MaxPoolGrad", 2, in, "global=1"), got, 6);
    CHECK("GlobalMaxPool tie: first maximum only",
          ok && got[1] == 5 && got[0] == 0 && got[2] == 0 && got[4] == 0);
    dl_graph_free(g);
}

/* ---- inference errors: a clear message, never a crash ---- */

static dl_value *fin(dl_graph *g, dl_dtype dt, int rank, const int64_t *dims) {
    char nm[16];
    snprintf(nm, sizeof nm, "in%d", g->values.len);
    return dl_input(g, nm, dt, rank, dims, NULL);
}

static void expect_error(const char *name, const char *op, int n_in, dl_value *const *in,
                         const char *attrs, dl_graph *g, const char *want) {
    dl_ctx_clear(ctx);
    dl_value *out = internal(g, op, n_in, in, attrs);
    bool ok = !out && dl_graph_status(g) != DL_OK && strstr(dl_errmsg(ctx), want) &&
              strstr(dl_errmsg(ctx), op);
    if (!ok) printf("  %s: %s\n", name, dl_errmsg(ctx));
    CHECK(name, ok);
}

/* The inputs (__VA_ARGS__) are built in the case's graph g. */
#define ERR_CASE(NAME, OP, ATTRS, WANT, ...)                                                       \
    do {                                                                                           \
        dl_graph *g = dl_graph_new(ctx);                                                           \
        dl_value *in_[] = {__VA_ARGS__};                                                           \
        expect_error(NAME, OP, (int)(sizeof in_ / sizeof *in_), in_, ATTRS, g, WANT);              \
        dl_graph_free(g);                                                                          \
    } while (0)

static void infer_errors(void) {
    int64_t x4[4] = {2, 4, 5, 5}, w4[4] = {6, 2, 3, 3}, y4[4] = {2, 6, 3, 3}, y4b[4] = {2, 6, 4, 3};
    int64_t xs[4] = {2, 4, 5, 5}, xs3[3] = {2, 4, 5}, xsbad[4] = {2, 3, 5, 5},
            xneg[4] = {2, 4, -5, 5};
    int64_t w4c[4] = {5, 2, 3, 3}, d3[3] = {2, 4, 5};
    ERR_CASE("ConvGradInput: x_shape length", "ConvGradInput", "group=2", "values for rank",
             fin(g, DL_F32, 4, y4), fin(g, DL_F32, 4, w4), ints(g, 3, xs3));
    ERR_CASE("ConvGradInput: channels vs group", "ConvGradInput", "group=2", "channels",
             fin(g, DL_F32, 4, y4), fin(g, DL_F32, 4, w4), ints(g, 4, xsbad));
    ERR_CASE("ConvGradInput: dY channels vs W", "ConvGradInput", "group=2", "filters",
             fin(g, DL_F32, 4, y4), fin(g, DL_F32, 4, w4c), ints(g, 4, xs));
    ERR_CASE("ConvGradInput: dY spatial", "ConvGradInput", "group=2", "spatial dim 0",
             fin(g, DL_F32, 4, y4b), fin(g, DL_F32, 4, w4), ints(g, 4, xs));
    ERR_CASE("ConvGradInput: dtypes differ", "ConvGradInput", "group=2", "differ in dtype",
             fin(g, DL_F32, 4, y4), fin(g, DL_F64, 4, w4), ints(g, 4, xs));
    ERR_CASE("ConvGradInput: float x_shape", "ConvGradInput", "group=2", "dtype float32",
             fin(g, DL_F32, 4, y4), fin(g, DL_F32, 4, w4), fin(g, DL_F32, 1, (int64_t[]){4}));
    ERR_CASE("ConvGradInput: negative x_shape", "ConvGradInput", "group=2", "out of range",
             fin(g, DL_F32, 4, y4), fin(g, DL_F32, 4, w4), ints(g, 4, xneg));
    ERR_CASE("ConvGradInput: rank 2", "ConvGradInput", NULL, "rank", fin(g, DL_F32, 2, y4),
             fin(g, DL_F32, 2, w4), ints(g, 2, xs));
    ERR_CASE("ConvGradInput: bad strides", "ConvGradInput", "group=2;strides=[1]", "strides",
             fin(g, DL_F32, 4, y4), fin(g, DL_F32, 4, w4), ints(g, 4, xs));
    ERR_CASE("ConvGradWeight: kernel_shape required", "ConvGradWeight", "group=2", "kernel_shape",
             fin(g, DL_F32, 4, x4), fin(g, DL_F32, 4, y4));
    ERR_CASE("ConvGradWeight: dY spatial", "ConvGradWeight", "group=2;kernel_shape=[3,3]",
             "spatial dim 0", fin(g, DL_F32, 4, x4), fin(g, DL_F32, 4, y4b));
    ERR_CASE("ConvGradWeight: group", "ConvGradWeight", "group=3;kernel_shape=[3,3]", "divisible",
             fin(g, DL_F32, 4, x4), fin(g, DL_F32, 4, y4));
    ERR_CASE("ConvGradWeight: ranks", "ConvGradWeight", "kernel_shape=[3,3]", "ranks",
             fin(g, DL_F32, 4, x4), fin(g, DL_F32, 3, y4));
    int64_t p4[4] = {2, 4, 2, 2}, p4b[4] = {2, 4, 3, 2};
    ERR_CASE("MaxPoolGrad: dY shape", "MaxPoolGrad", "kernel_shape=[2,2];strides=[2,2]", "dY dim 2",
             fin(g, DL_F32, 4, x4), fin(g, DL_F32, 4, p4b));
    ERR_CASE("MaxPoolGrad: kernel_shape required", "MaxPoolGrad", "strides=[2,2]", "kernel_shape",
             fin(g, DL_F32, 4, x4), fin(g, DL_F32, 4, p4));
    ERR_CASE("MaxPoolGrad: integer X", "MaxPoolGrad", "kernel_shape=[2,2];strides=[2,2]",
             "unsupported dtype int64", fin(g, DL_I64, 4, x4), fin(g, DL_F32, 4, p4));
    ERR_CASE("MaxPoolGrad: rank 2", "MaxPoolGrad", "global=1", "rank", fin(g, DL_F32, 2, x4),
             fin(g, DL_F32, 2, p4));
    ERR_CASE("AveragePoolGrad: dY shape", "AveragePoolGrad", "kernel_shape=[2,2];strides=[2,2]",
             "dY dim 3", fin(g, DL_F32, 4, (int64_t[]){2, 4, 2, 3}), ints(g, 4, x4));
    ERR_CASE("AveragePoolGrad: channels", "AveragePoolGrad", "kernel_shape=[2,2];strides=[2,2]",
             "dY dim 1", fin(g, DL_F32, 4, (int64_t[]){2, 3, 2, 2}), ints(g, 4, x4));
    ERR_CASE("AveragePoolGrad: x_shape length", "AveragePoolGrad", "kernel_shape=[2,2]",
             "values for rank", fin(g, DL_F32, 4, p4), ints(g, 3, d3));
    /* a shape known only at run time: the kernel side rejects it (no crash) */
    dl_ctx_clear(ctx);
    dl_graph *g = dl_graph_new(ctx);
    dl_value *shape = fin(g, DL_I64, 1, (int64_t[]){4});
    dl_value *in[3] = {dl_constant(g, NULL, tensor(DL_F32, 4, y4, NULL)),
                       dl_constant(g, NULL, tensor(DL_F32, 4, w4, NULL)), shape};
    dl_value *out = internal(g, "ConvGradInput", 3, in, "group=2");
    dl_tensor *bad = NULL, *res = NULL;
    dl_tensor_new(ctx, DL_I64, 1, (int64_t[]){4}, &bad);
    memcpy(bad->data, xsbad, sizeof xsbad);
    dl_output(g, out, NULL);
    dl_status s = out ? dl_run(ctx, g, DL_BACKEND_REF, 1, NULL, &bad, &res) : DL_ERR_INTERNAL;
    CHECK("ConvGradInput: bad runtime x_shape -> error",
          s == DL_ERR_SHAPE && strstr(dl_errmsg(ctx), "channels"));
    memcpy(bad->data, xs, sizeof xs);
    dl_ctx_clear(ctx);
    s = out ? dl_run(ctx, g, DL_BACKEND_REF, 1, NULL, &bad, &res) : DL_ERR_INTERNAL;
    CHECK("ConvGradInput: runtime x_shape",
          s == DL_OK && res && res->numel == 200 && res->dims[2] == 5);
    dl_tensor_free(res);
    dl_tensor_free(bad);
    dl_graph_free(g);
}

/* ---- gradient rules: clear failures, symbolic batch ---- */

static void rule_checks(void) {
    dl_ctx_clear(ctx);
    dl_graph *g = dl_graph_new(ctx);
    g->opset = DG_OPSET;
    int64_t xd[4] = {2, 3, 4, 4}, c[1] = {3};
    dl_value *x = dl_input(g, "x", DL_F32, 4, xd, NULL);
    dl_value *in[5] = {x};
    for (int i = 1; i < 5; i++) in[i] = dl_constant(g, NULL, tensor(DL_F32, 1, c, NULL));
    dl_value *out[1];
    const char *at[1] = {"training_mode=1"};
    dl_add_node_ex(g, NULL, "BatchNormalization", 15, 5, in, 1, out, 1, at, 0, NULL);
    dl_value *loss = dl_op1(g, "ReduceSum", out[0], "keepdims=0"), *gr = NULL;
    dl_graph_toposort(g);
    dl_status s = dl_autodiff(g, loss, 1, &x, &gr);
    CHECK("BatchNormalization training_mode=1 -> clear error",
          s == DL_ERR_UNSUPPORTED && strstr(dl_errmsg(ctx), "training mode"));
    dl_graph_free(g);

    /* Conv + AveragePool with a symbolic batch: X's shape flows in through Shape at run time,
     * and the gradient equals the one of the same graph with the batch fixed */
    double want[2][150];
    for (int sym = 0; sym < 2; sym++) {
        dl_ctx_clear(ctx);
        seed = 99;
        g = dl_graph_new(ctx);
        g->opset = DG_OPSET;
        int64_t xdims[4] = {sym ? -1 : 2, 3, 5, 5}, wd[4] = {2, 3, 3, 3};
        const char *names[4] = {"N"};
        dl_value *xv = dl_input(g, "x", DL_F64, 4, xdims, names);
        double wv[54];
        for (int i = 0; i < 54; i++) wv[i] = rnd();
        dl_value *w = dl_constant(g, NULL, tensor(DL_F64, 4, wd, wv));
        dl_value *y = dl_op2(g, "Conv", xv, w, "pads=[1,1,1,1];strides=[2,1]");
        y = dl_op1(g, "AveragePool", y, "kernel_shape=[2,2];pads=[0,0,1,1]");
        dl_value *l = dl_op1(g, "ReduceSum", dl_mul(g, y, y), "keepdims=0"), *gx = NULL;
        dl_graph_toposort(g);
        s = dl_graph_status(g) == DL_OK ? dl_autodiff(g, l, 1, &xv, &gx) : dl_graph_status(g);
        dl_output(g, gx, NULL);
        double xvals[150];
        for (int i = 0; i < 150; i++) xvals[i] = rnd();
        int64_t xr[4] = {2, 3, 5, 5};
        dl_tensor *xt = tensor(DL_F64, 4, xr, xvals), *res = NULL;
        if (s == DL_OK) s = dl_run(ctx, g, DL_BACKEND_REF, 1, NULL, &xt, &res);
        bool ok = s == DL_OK && res->numel == 150;
        for (int i = 0; ok && i < 150; i++) want[sym][i] = dl_get_f64(res, i);
        CHECK(sym ? "symbolic batch: gradient runs" : "fixed batch: gradient runs", ok);
        dl_tensor_free(xt);
        dl_tensor_free(res);
        dl_graph_free(g);
    }
    CHECK("symbolic batch gradient = fixed batch gradient", close_to(want[1], want[0], 150, 1e-12));
}

int main(void) {
    ctx = dl_ctx_new();
    static const conv_case convs[] = {
        {"2-D", {2, {5, 5}, {3, 3}, {1, 1}, {0, 0}, {0, 0}, {1, 1}}, 2, 3, 4, 1, NULL},
        {"strides pads", {2, {6, 5}, {3, 2}, {2, 2}, {1, 0}, {1, 2}, {1, 1}}, 1, 2, 3, 1, NULL},
        {"dilations groups", {2, {7, 6}, {2, 2}, {2, 1}, {1, 0}, {0, 1}, {2, 2}}, 2, 4, 6, 2, NULL},
        {"depthwise", {2, {6, 6}, {3, 3}, {1, 2}, {1, 1}, {1, 1}, {1, 1}}, 1, 3, 3, 3, NULL},
        {"pointwise", {2, {3, 4}, {1, 1}, {1, 1}, {0, 0}, {0, 0}, {1, 1}}, 2, 4, 5, 1, NULL},
        {"1-D", {1, {9}, {3}, {2}, {1}, {2}, {2}}, 2, 3, 2, 1, NULL},
        {"3-D",
         {3, {4, 3, 5}, {2, 2, 3}, {1, 2, 1}, {1, 0, 1}, {0, 1, 1}, {1, 1, 2}},
         1,
         2,
         4,
         2,
         NULL},
        /* SAME_UPPER on 5 with k 3 stride 2: 3 outputs, total pad 2 -> 1 / 1; on 6 with k 2
         * stride 2: 3 outputs, no pad */
        {"SAME_UPPER",
         {2, {5, 6}, {3, 2}, {2, 2}, {1, 0}, {1, 0}, {1, 1}},
         1,
         2,
         2,
         1,
         "SAME_UPPER"},
        /* SAME_LOWER on 6 with k 3 stride 2: 3 outputs, total pad 1 -> begin 1, end 0 */
        {"SAME_LOWER",
         {2, {6, 6}, {3, 3}, {2, 2}, {1, 1}, {0, 0}, {1, 1}},
         1,
         2,
         2,
         1,
         "SAME_LOWER"},
    };
    static const pool_case pools[] = {
        {"2x2/2",
         {2, {4, 4}, {2, 2}, {2, 2}, {0, 0}, {0, 0}, {1, 1}},
         2,
         3,
         true,
         false,
         false,
         NULL},
        {"3x3/2 pads",
         {2, {5, 6}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}},
         1,
         2,
         true,
         false,
         false,
         NULL},
        {"overlapping ties",
         {2, {4, 5}, {2, 3}, {1, 1}, {0, 1}, {0, 1}, {1, 1}},
         1,
         2,
         true,
         false,
         false,
         "tie"},
        {"ceil dilated",
         {2, {6, 7}, {2, 3}, {2, 2}, {0, 1}, {1, 0}, {2, 1}},
         1,
         2,
         true,
         true,
         false,
         NULL},
        {"1-D", {1, {9}, {3}, {2}, {1}, {1}, {1}}, 2, 2, true, false, false, NULL},
        {"3-D",
         {3, {4, 3, 4}, {2, 2, 2}, {2, 1, 2}, {0, 0, 1}, {0, 1, 1}, {1, 1, 1}},
         1,
         2,
         true,
         false,
         false,
         NULL},
        {"avg 2x2/2",
         {2, {4, 4}, {2, 2}, {2, 2}, {0, 0}, {0, 0}, {1, 1}},
         2,
         3,
         false,
         false,
         false,
         NULL},
        {"avg pads exclude",
         {2, {5, 6}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}},
         1,
         2,
         false,
         false,
         false,
         NULL},
        {"avg pads include",
         {2, {5, 6}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}},
         1,
         2,
         false,
         false,
         true,
         NULL},
        {"avg ceil include",
         {2, {6, 6}, {3, 3}, {2, 2}, {1, 0}, {0, 1}, {1, 1}},
         1,
         2,
         false,
         true,
         true,
         NULL},
        {"avg ceil exclude",
         {2, {6, 7}, {3, 2}, {2, 2}, {0, 1}, {0, 0}, {1, 2}},
         1,
         2,
         false,
         true,
         false,
         NULL},
        {"avg 1-D", {1, {9}, {3}, {2}, {1}, {1}, {1}}, 2, 2, false, false, true, NULL},
        {"avg 3-D",
         {3, {4, 3, 4}, {2, 2, 2}, {2, 1, 2}, {0, 0, 1}, {0, 1, 1}, {1, 1, 1}},
         1,
         2,
         false,
         false,
         false,
         NULL},
    };
    const dl_dtype dts[3] = {DL_F64, DL_F32, DL_F16};
    for (size_t i = 0; i < sizeof convs / sizeof *convs; i++)
        for (int t = 0; t < 3; t++) conv_check(&convs[i], dts[t]);
    for (size_t i = 0; i < sizeof pools / sizeof *pools; i++)
        for (int t = 0; t < 3; t++) pool_check(&pools[i], dts[t]);
    tie_checks();
    infer_errors();
    rule_checks();
    dl_ctx_free(ctx);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
