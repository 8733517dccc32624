/* conv.c — op family "conv": Conv and ConvTranspose (1-D, 2-D, 3-D, ... up to DL_MAX_RANK-2
 * spatial dims; groups, dilations, strides, pads and auto_pad).
 *
 * Reference kernels: Conv is im2col + a simple cache-blocked GEMM, typed for float32 (float
 * accumulation) and float64; other float dtypes (float16, bfloat16) are converted to double
 * buffers first. ConvTranspose is a direct scatter loop accumulating in double. */
#include "../train/grad.h"
#include "op-impl.h"
#include "ref-gemm.h"
#include "spatial.h"

#include <stdlib.h>

#define MAX_SPATIAL DL_SP_MAX
#define ATTR_LIMIT  DL_SP_ATTR_LIMIT
#define ELEM_LIMIT  DL_SP_ELEM_LIMIT

static const dl_attr_spec conv_attrs[] = {
    {"auto_pad", DL_ATTR_STRING},   {"dilations", DL_ATTR_INTS}, {"group", DL_ATTR_INT},
    {"kernel_shape", DL_ATTR_INTS}, {"pads", DL_ATTR_INTS},      {"strides", DL_ATTR_INTS},
    {NULL, DL_ATTR_UNDEFINED},
};

static const dl_attr_spec convtr_attrs[] = {
    {"auto_pad", DL_ATTR_STRING},     {"dilations", DL_ATTR_INTS},
    {"group", DL_ATTR_INT},           {"kernel_shape", DL_ATTR_INTS},
    {"output_padding", DL_ATTR_INTS}, {"output_shape", DL_ATTR_INTS},
    {"pads", DL_ATTR_INTS},           {"strides", DL_ATTR_INTS},
    {NULL, DL_ATTR_UNDEFINED},
};

/* ---- geometry shared by inference and kernels ---- */

typedef dl_window conv_geom;

static const char *conv_geometry(const dl_node *n, bool transpose, int ns, const int64_t *in,
                                 const int64_t *wk, conv_geom *g, char *err, size_t errlen);

const char *dl_conv_window(const dl_node *n, int ns, const int64_t *in, const int64_t *wk,
                           dl_window *g, char *err, size_t errlen) {
    return conv_geometry(n, false, ns, in, wk, g, err, errlen);
}

const char *dl_convtr_forward_window(const dl_node *n, int ns, const int64_t *in, const int64_t *wk,
                                     dl_window *fwd, char *err, size_t errlen) {
    conv_geom g;
    int64_t opad[MAX_SPATIAL];
    const char *e = conv_geometry(n, true, ns, in, wk, &g, err, errlen);
    if (e || (e = dl_sp_read_ints(n, "output_padding", ns, 0, 0, opad, err, errlen))) return e;
    *fwd = g;
    for (int d = 0; d < ns; d++) {
        if (opad[d] >= g.stride[d]) {
            snprintf(err, errlen, "output_padding must be < strides");
            return err;
        }
        /* the Conv of Y's positions must land back on X's (not so when output_shape asks for
         * more than the full output: those positions only hold the bias) */
        const int64_t eff = (g.k[d] - 1) * g.dil[d] + 1, span = g.out[d] + g.pb[d] + g.pe[d];
        if (g.in[d] >= 0 && g.out[d] >= 0 &&
            (span < eff || (span - eff) / g.stride[d] + 1 != g.in[d])) {
            snprintf(err, errlen, "output_shape larger than the full transposed output");
            return err;
        }
        fwd->in[d] = g.out[d];
        fwd->out[d] = g.in[d];
    }
    return NULL;
}

/* Fills g from the node attributes. in[] are the input spatial dims (< 0 when symbolic), wk[]
 * the kernel dims taken from the weight (< 0 when symbolic). Returns an error message or NULL;
 * g->out[d] is -1 where it cannot be known yet. */
static const char *conv_geometry(const dl_node *n, bool transpose, int ns, const int64_t *in,
                                 const int64_t *wk, conv_geom *g, char *err, size_t errlen) {
    dl_auto_pad ap;
    const char *e;
    int64_t opad[MAX_SPATIAL]; /* ConvTranspose output_padding */
    if ((e = dl_sp_auto_pad(n, &ap, err, errlen))) return e;
    if ((e = dl_sp_init(g, ns, in, err, errlen))) return e;
    if ((e = dl_sp_read_attrs(n, ap, true, g, err, errlen))) return e;
    if (transpose && (e = dl_sp_read_ints(n, "output_padding", ns, 0, 0, opad, err, errlen)))
        return e;
    if ((e = dl_sp_kernel_from_weight(g, wk, err, errlen))) return e;
    if (!transpose) return dl_sp_forward_out(g, ap, false, err, errlen);
    /* ConvTranspose output_shape: explicit spatial output size. */
    const int64_t *oshape = NULL;
    int n_oshape = dl_attr_ints(n, "output_shape", &oshape);
    if (n_oshape >= 0) {
        if (n_oshape == ns + 2)
            oshape += 2;
        else if (n_oshape != ns) {
            snprintf(err, errlen, "output_shape has %d values, expected %d", n_oshape, ns);
            return err;
        }
        for (int d = 0; d < ns; d++)
            if (oshape[d] < 0 || oshape[d] >= ATTR_LIMIT) {
                snprintf(err, errlen, "output_shape[%d] = %lld is out of range", d,
                         (long long)oshape[d]);
                return err;
            }
    }
    for (int d = 0; d < ns; d++) {
        if (g->in[d] < 0 || g->k[d] < 0) continue;
        int64_t eff_k = (g->k[d] - 1) * g->dil[d] + 1;
        int64_t in_d = g->in[d], s = g->stride[d];
        int64_t full = s * (in_d - 1) + opad[d] + eff_k; /* output before removing pads */
        if (in_d == 0) full = 0;
        if (n_oshape >= 0 || ap == DL_AUTO_PAD_SAME_UPPER || ap == DL_AUTO_PAD_SAME_LOWER) {
            int64_t out = n_oshape >= 0 ? oshape[d] : in_d * s;
            int64_t total = full - out;
            if (total < 0) total = 0; /* extra output positions stay at the bias */
            /* as the ONNX spec: SAME_UPPER trims more at the end, otherwise at the start */
            if (ap == DL_AUTO_PAD_SAME_UPPER) {
                g->pb[d] = total / 2;
                g->pe[d] = total - total / 2;
            } else {
                g->pb[d] = total - total / 2;
                g->pe[d] = total / 2;
            }
            g->out[d] = out;
        } else {
            g->out[d] = full - g->pb[d] - g->pe[d];
            if (g->out[d] < 0) {
                snprintf(err, errlen, "pads exceed the output size in spatial dim %d", d);
                return err;
            }
        }
    }
    return NULL;
}

/* ---- inference ---- */

static dl_status conv_infer_common(dl_infer *ic, bool transpose) {
    DL_TRY(dl_infer_require_float(ic, 0));
    DL_TRY(dl_infer_require_float(ic, 1));
    int idx[3] = {0, 1, 2};
    DL_TRY(dl_infer_same_dtype(ic, ic->n_in < 3 ? ic->n_in : 3, idx));
    const dl_type *x = ic->in[0], *w = ic->in[1];
    const dl_type *b = dl_has_in(ic, 2) ? ic->in[2] : NULL;
    dl_dtype dt = x->dtype;
    int64_t group = dl_attr_int(ic->node, "group", 1);
    if (group < 1 || group >= ATTR_LIMIT)
        return dl_infer_fail(ic, DL_ERR_INVALID, "group must be >= 1, got %lld", (long long)group);
    int rank = x->rank >= 0 ? x->rank : w->rank;
    if (x->rank >= 0 && w->rank >= 0 && x->rank != w->rank)
        return dl_infer_fail(ic, DL_ERR_SHAPE, "X has rank %d but W has rank %d", x->rank, w->rank);
    if (b && b->rank >= 0 && b->rank != 1)
        return dl_infer_fail(ic, DL_ERR_SHAPE, "B must be 1-D, got rank %d", b->rank);
    if (rank < 0) return dl_infer_set(ic, 0, dt, DL_RANK_UNKNOWN, NULL);
    if (rank < 3 || rank > DL_MAX_RANK)
        return dl_infer_fail(ic, DL_ERR_SHAPE, "X and W must have rank 3..%d, got %d", DL_MAX_RANK,
                             rank);
    int ns = rank - 2;
    int64_t in_sp[MAX_SPATIAL], wk[MAX_SPATIAL];
    for (int d = 0; d < ns; d++) {
        in_sp[d] = x->rank >= 0 ? x->dims[d + 2] : -1;
        wk[d] = w->rank >= 0 ? w->dims[d + 2] : -1;
    }
    int64_t C = x->rank >= 0 ? x->dims[1] : -1;
    int64_t w0 = w->rank >= 0 ? w->dims[0] : -1, w1 = w->rank >= 0 ? w->dims[1] : -1;
    if (w0 > ELEM_LIMIT || w1 > ELEM_LIMIT)
        return dl_infer_fail(ic, DL_ERR_LIMIT, "W channel dims are too large");
    int64_t M; /* output channels, -1 if unknown */
    if (!transpose) {
        /* W: [M, C/group, k...] */
        if (C >= 0 && w1 >= 0 && w1 * group != C)
            return dl_infer_fail(ic, DL_ERR_SHAPE,
                                 "X has %lld channels but W expects %lld x group %lld",
                                 (long long)C, (long long)w1, (long long)group);
        if (w0 >= 0 && w0 % group != 0)
            return dl_infer_fail(ic, DL_ERR_SHAPE, "W dim 0 (%lld) is not divisible by group %lld",
                                 (long long)w0, (long long)group);
        M = w0;
    } else {
        /* W: [C, M/group, k...] */
        if (C >= 0 && w0 >= 0 && w0 != C)
            return dl_infer_fail(ic, DL_ERR_SHAPE, "X has %lld channels but W dim 0 is %lld",
                                 (long long)C, (long long)w0);
        if (C >= 0 && C % group != 0)
            return dl_infer_fail(ic, DL_ERR_SHAPE, "channels %lld not divisible by group %lld",
                                 (long long)C, (long long)group);
        if (w0 >= 0 && w0 % group != 0)
            return dl_infer_fail(ic, DL_ERR_SHAPE, "W dim 0 (%lld) is not divisible by group %lld",
                                 (long long)w0, (long long)group);
        M = w1 >= 0 ? w1 * group : -1;
    }
    if (b && b->rank == 1 && b->dims[0] >= 0 && M >= 0 && b->dims[0] != M)
        return dl_infer_fail(ic, DL_ERR_SHAPE, "B has %lld values but there are %lld outputs",
                             (long long)b->dims[0], (long long)M);
    conv_geom g;
    char err[200];
    const char *e = conv_geometry(ic->node, transpose, ns, in_sp, wk, &g, err, sizeof err);
    if (e) return dl_infer_fail(ic, DL_ERR_INVALID, "%s", e);
    int64_t dims[DL_MAX_RANK];
    dims[0] = x->rank >= 0 ? x->dims[0] : dl_infer_fresh_dim(ic); /* batch: known or its symbol */
    dims[1] = M >= 0 ? M : dl_infer_fresh_dim(ic);
    for (int d = 0; d < ns; d++) dims[d + 2] = g.out[d] >= 0 ? g.out[d] : dl_infer_fresh_dim(ic);
    return dl_infer_set(ic, 0, dt, rank, dims);
}

static dl_status conv_infer(dl_infer *ic) {
    return conv_infer_common(ic, false);
}
static dl_status convtr_infer(dl_infer *ic) {
    return conv_infer_common(ic, true);
}

/* ---- kernel helpers ---- */

/* A double copy of a float tensor (float16/bfloat16 path). NULL tensor -> *out NULL. */
static dl_status to_f64(dl_kernel *kc, const dl_tensor *t, double **out) {
    *out = NULL;
    if (!t) return DL_OK;
    size_t n;
    DL_TRY(dl_mul_size(kc->ctx, (size_t)t->numel, sizeof(double), &n, "conv buffer"));
    DL_TRY(dl_alloc_checked(kc->ctx, n ? n : 1, (void **)out, "conv buffer"));
    for (int64_t i = 0; i < t->numel; i++) (*out)[i] = dl_get_f64(t, i);
    return DL_OK;
}

/* Product of sizes; kernel_geometry has checked it stays below ELEM_LIMIT. */
static int64_t prod(int n, const int64_t *v) {
    int64_t p = 1;
    for (int i = 0; i < n; i++) p *= v[i];
    return p;
}

/* Checks the tensors against the geometry the kernel will use (defence in depth: infer has
 * already checked these at run time). */
static dl_status kernel_geometry(dl_kernel *kc, bool transpose, conv_geom *g, int64_t *N,
                                 int64_t *C, int64_t *M, int64_t *group) {
    const dl_tensor *x = kc->in[0], *w = kc->in[1];
    const dl_tensor *b = kc->n_in > 2 ? kc->in[2] : NULL;
    const dl_tensor *y = kc->out[0];
    if (x->rank < 3 || x->rank != w->rank || y->rank != x->rank || !y->data)
        return dl_kernel_fail(kc, DL_ERR_INTERNAL, "unexpected tensor ranks");
    int ns = x->rank - 2;
    char err[200];
    const char *e =
        conv_geometry(kc->node, transpose, ns, x->dims + 2, w->dims + 2, g, err, sizeof err);
    if (e) return dl_kernel_fail(kc, DL_ERR_INVALID, "%s", e);
    *group = dl_attr_int(kc->node, "group", 1);
    if (*group < 1 || *group >= ATTR_LIMIT || w->dims[0] > ELEM_LIMIT || w->dims[1] > ELEM_LIMIT)
        return dl_kernel_fail(kc, DL_ERR_LIMIT, "group or W channel dims out of range");
    *N = x->dims[0];
    *C = x->dims[1];
    *M = transpose ? w->dims[1] * *group : w->dims[0];
    bool ok = *group >= 1 && *C % *group == 0 && *M % *group == 0 && y->dims[0] == *N &&
              y->dims[1] == *M && (!b || (b->rank == 1 && b->dims[0] == *M));
    ok = ok && (transpose ? w->dims[0] == *C : w->dims[1] * *group == *C);
    for (int d = 0; d < ns; d++)
        ok = ok && y->dims[d + 2] == g->out[d] && g->k[d] == w->dims[d + 2];
    if (!ok) return dl_kernel_fail(kc, DL_ERR_SHAPE, "inconsistent shapes for the kernel");
    int64_t K, IN, P; /* only checked here; the kernels recompute them with prod() */
    if (!dl_sp_prod(ns, g->k, &K) || !dl_sp_prod(ns, g->in, &IN) || !dl_sp_prod(ns, g->out, &P))
        return dl_kernel_fail(kc, DL_ERR_LIMIT, "spatial sizes are too large");
    return DL_OK;
}

/* ---- Conv: im2col + GEMM, instantiated for float and double ---- */

/* col[r, p] for rows r = (c, kernel index) over the channels of one group and p = output
 * positions: the input value the kernel tap sees, 0 in the padding. Shared with the backward
 * ops (grad-ops.c, which declares these). */
#define DEFINE_IM2COL(T, SUF)                                                                      \
    void dl_conv_im2col_##SUF(const conv_geom *g, int64_t Cg, const T *x, T *col) {                \
        int ns = g->ns;                                                                            \
        int64_t K = prod(ns, g->k), P = prod(ns, g->out), IN = prod(ns, g->in);                    \
        int64_t OW = g->out[ns - 1], IW = g->in[ns - 1];                                           \
        int64_t sw = g->stride[ns - 1], pw = g->pb[ns - 1], dw = g->dil[ns - 1];                   \
        if (P == 0) return;                                                                        \
        for (int64_t r = 0; r < Cg * K; r++) {                                                     \
            int64_t c = r / K, kk = r % K, kidx[MAX_SPATIAL], opos[MAX_SPATIAL] = {0};             \
            for (int d = ns - 1; d >= 0; d--) {                                                    \
                kidx[d] = kk % g->k[d];                                                            \
                kk /= g->k[d];                                                                     \
            }                                                                                      \
            const T *xc = x + c * IN;                                                              \
            T *dst = col + r * P;                                                                  \
            for (int64_t p = 0; p < P; p += OW) {                                                  \
                bool valid = true;                                                                 \
                int64_t off = 0;                                                                   \
                for (int d = 0; d < ns - 1; d++) {                                                 \
                    int64_t id = opos[d] * g->stride[d] - g->pb[d] + kidx[d] * g->dil[d];          \
                    if (id < 0 || id >= g->in[d]) valid = false;                                   \
                    off = off * g->in[d] + id;                                                     \
                }                                                                                  \
                off *= IW;                                                                         \
                for (int64_t ow = 0; ow < OW; ow++) {                                              \
                    int64_t iw = ow * sw - pw + kidx[ns - 1] * dw;                                 \
                    dst[p + ow] = valid && iw >= 0 && iw < IW ? xc[off + iw] : (T)0;               \
                }                                                                                  \
                dl_index_next(ns - 1, g->out, opos);                                               \
            }                                                                                      \
        }                                                                                          \
    }

/* y[N, M, out...] = conv(x[N, C, in...], w[M, C/group, k...]) + b. col: scratch of
 * (C/group * K) * P elements (unused for pointwise convs). */
#define DEFINE_CONV(T, SUF)                                                                        \
    static void conv_##SUF(const conv_geom *g, int64_t N, int64_t C, int64_t M, int64_t group,     \
                           const T *x, const T *w, const T *b, T *y, T *col) {                     \
        int ns = g->ns;                                                                            \
        int64_t K = prod(ns, g->k), P = prod(ns, g->out), IN = prod(ns, g->in);                    \
        int64_t Cg = C / group, Mg = M / group, R = Cg * K;                                        \
        bool pointwise = true;                                                                     \
        for (int d = 0; d < ns; d++)                                                               \
            pointwise =                                                                            \
                pointwise && g->k[d] == 1 && g->stride[d] == 1 && g->pb[d] == 0 && g->pe[d] == 0;  \
        for (int64_t n = 0; n < N; n++) {                                                          \
            for (int64_t gi = 0; gi < group; gi++) {                                               \
                const T *xg = x + (n * C + gi * Cg) * IN;                                          \
                T *yg = y + (n * M + gi * Mg) * P;                                                 \
                const T *src = xg;                                                                 \
                if (!pointwise) {                                                                  \
                    dl_conv_im2col_##SUF(g, Cg, xg, col);                                          \
                    src = col;                                                                     \
                }                                                                                  \
                for (int64_t m = 0; m < Mg; m++) {                                                 \
                    T bv = b ? b[gi * Mg + m] : (T)0;                                              \
                    for (int64_t p = 0; p < P; p++) yg[m * P + p] = bv;                            \
                }                                                                                  \
                dl_ref_gemm_##SUF(Mg, P, R, w + gi * Mg * R, R, src, P, yg, P);                    \
            }                                                                                      \
        }                                                                                          \
    }

DEFINE_IM2COL(float, f32)
DEFINE_IM2COL(double, f64)
DEFINE_CONV(float, f32)
DEFINE_CONV(double, f64)

static dl_status conv_ref(dl_kernel *kc) {
    conv_geom g;
    int64_t N, C, M, group;
    DL_TRY(kernel_geometry(kc, false, &g, &N, &C, &M, &group));
    const dl_tensor *x = kc->in[0], *w = kc->in[1];
    const dl_tensor *b = kc->n_in > 2 ? kc->in[2] : NULL;
    dl_tensor *y = kc->out[0];
    if (y->numel == 0) return DL_OK;
    size_t elt = x->dtype == DL_F32 ? sizeof(float) : sizeof(double);
    size_t rows, cells, bytes;
    DL_TRY(dl_mul_size(kc->ctx, (size_t)(C / group), (size_t)prod(g.ns, g.k), &rows, "im2col"));
    DL_TRY(dl_mul_size(kc->ctx, rows, (size_t)prod(g.ns, g.out), &cells, "im2col"));
    DL_TRY(dl_mul_size(kc->ctx, cells ? cells : 1, elt, &bytes, "im2col"));
    void *col;
    DL_TRY(dl_alloc_checked(kc->ctx, bytes, &col, "im2col buffer"));
    dl_status s = DL_OK;
    if (x->dtype == DL_F32) {
        conv_f32(&g, N, C, M, group, x->data, w->data, b ? b->data : NULL, y->data, col);
    } else if (x->dtype == DL_F64) {
        conv_f64(&g, N, C, M, group, x->data, w->data, b ? b->data : NULL, y->data, col);
    } else {
        double *xd = NULL, *wd = NULL, *bd = NULL, *yd = NULL;
        if ((s = to_f64(kc, x, &xd)) == DL_OK && (s = to_f64(kc, w, &wd)) == DL_OK &&
            (s = to_f64(kc, b, &bd)) == DL_OK && (s = to_f64(kc, y, &yd)) == DL_OK) {
            conv_f64(&g, N, C, M, group, xd, wd, bd, yd, col);
            for (int64_t i = 0; i < y->numel; i++) dl_set_f64(y, i, yd[i]);
        }
        dl_free(xd);
        dl_free(wd);
        dl_free(bd);
        dl_free(yd);
    }
    dl_free(col);
    return s;
}

/* ---- ConvTranspose: GEMM + col2im in double ---- */

/* Adds col[(m, k), i] (one group, rows m * K + k) into y at i * stride + k * dil - pad. The
 * innermost loop runs over the last input dim within its valid range. ConvTranspose's scatter;
 * with the geometry's in and out swapped it is also the input gradient of Conv (grad-ops.c). */
#define DEFINE_COL2IM(T, SUF)                                                                      \
    void dl_conv_col2im_##SUF(const conv_geom *g, int64_t Mg, const T *col, T *y) {                \
        int ns = g->ns;                                                                            \
        int64_t K = prod(ns, g->k), P = prod(ns, g->out), IN = prod(ns, g->in);                    \
        int64_t IW = g->in[ns - 1], OW = g->out[ns - 1], sw = g->stride[ns - 1];                   \
        if (IW == 0) return;                                                                       \
        for (int64_t m = 0; m < Mg; m++) {                                                         \
            T *yp = y + m * P;                                                                     \
            for (int64_t kk = 0; kk < K; kk++) {                                                   \
                const T *crow = col + (m * K + kk) * IN;                                           \
                int64_t kidx[MAX_SPATIAL], r = kk;                                                 \
                for (int d = ns - 1; d >= 0; d--) {                                                \
                    kidx[d] = r % g->k[d];                                                         \
                    r /= g->k[d];                                                                  \
                }                                                                                  \
                int64_t kw = kidx[ns - 1] * g->dil[ns - 1] - g->pb[ns - 1]; /* ow = iw*sw + kw */ \
                int64_t lo = kw >= 0 ? 0 : (-kw + sw - 1) / sw;                                    \
                int64_t hi = OW - 1 - kw < 0 ? -1 : (OW - 1 - kw) / sw;                            \
                if (hi > IW - 1) hi = IW - 1;                                                      \
                int64_t ipos[MAX_SPATIAL] = {0};                                                   \
                for (int64_t row = 0; row < IN / IW; row++, dl_index_next(ns - 1, g->in, ipos)) {  \
                    int64_t off = 0;                                                               \
                    bool valid = true;                                                             \
                    for (int d = 0; d < ns - 1 && valid; d++) {                                    \
                        int64_t o = ipos[d] * g->stride[d] + kidx[d] * g->dil[d] - g->pb[d];       \
                        valid = o >= 0 && o < g->out[d];                                           \
                        off = off * g->out[d] + o;                                                 \
                    }                                                                              \
                    if (!valid) continue;                                                          \
                    T *yrow = yp + off * OW;                                                       \
                    const T *xrow = crow + row * IW;                                               \
                    for (int64_t iw = lo; iw <= hi; iw++) yrow[iw * sw + kw] += xrow[iw];          \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }

DEFINE_COL2IM(float, f32)
DEFINE_COL2IM(double, f64)

static dl_status convtr_ref(dl_kernel *kc) {
    conv_geom g;
    int64_t N, C, M, group;
    DL_TRY(kernel_geometry(kc, true, &g, &N, &C, &M, &group));
    const dl_tensor *x = kc->in[0], *w = kc->in[1];
    const dl_tensor *b = kc->n_in > 2 ? kc->in[2] : NULL;
    dl_tensor *y = kc->out[0];
    if (y->numel == 0) return DL_OK;
    int ns = g.ns;
    int64_t K = prod(ns, g.k), P = prod(ns, g.out), IN = prod(ns, g.in);
    int64_t Cg = C / group, Mg = M / group, R = Mg * K;
    size_t cells, bytes;
    DL_TRY(dl_mul_size(kc->ctx, (size_t)R, (size_t)IN, &cells, "col2im"));
    DL_TRY(dl_mul_size(kc->ctx, cells ? cells : 1, sizeof(double), &bytes, "col2im"));
    double *xd = NULL, *wd = NULL, *yd = NULL, *wt = NULL, *col = NULL;
    dl_status s = to_f64(kc, x, &xd);
    if (s == DL_OK) s = to_f64(kc, w, &wd);
    if (s == DL_OK) s = to_f64(kc, w, &wt);
    if (s == DL_OK) s = to_f64(kc, y, &yd);
    if (s == DL_OK) s = dl_alloc_checked(kc->ctx, bytes, (void **)&col, "col2im buffer");
    if (s == DL_OK) {
        /* W is [C, Mg, k...]: per group, transpose [Cg, R] -> wt [R, Cg] */
        for (int64_t gi = 0; gi < group; gi++)
            for (int64_t c = 0; c < Cg; c++)
                for (int64_t r = 0; r < R; r++)
                    wt[gi * Cg * R + r * Cg + c] = wd[gi * Cg * R + c * R + r];
        for (int64_t i = 0; i < y->numel; i++) yd[i] = b ? dl_get_f64(b, (i / P) % M) : 0.0;
        for (int64_t n = 0; n < N; n++)
            for (int64_t gi = 0; gi < group; gi++) {
                memset(col, 0, bytes);
                dl_ref_gemm_f64(R, IN, Cg, wt + gi * Cg * R, Cg, xd + (n * C + gi * Cg) * IN, IN,
                                col, IN);
                dl_conv_col2im_f64(&g, Mg, col, yd + (n * M + gi * Mg) * P);
            }
        for (int64_t i = 0; i < y->numel; i++) dl_set_f64(y, i, yd[i]);
    }
    dl_free(xd);
    dl_free(wd);
    dl_free(wt);
    dl_free(yd);
    dl_free(col);
    return s;
}

/* ---- gradient rules (grad.h) ---- */

/* The bias gradient: dy summed over every axis but the channels. */
static dl_value *grad_bias(dl_grad_ctx *gc, dl_value *dy) {
    int64_t axes[DL_MAX_RANK];
    int na = 0;
    for (int d = 0; d < dy->type.rank; d++)
        if (d != 1) axes[na++] = d;
    return dg_op2(gc, "ReduceSum", dy, dg_ints(gc, na, axes), "keepdims=0");
}

/* "name=[v0,v1,...]" appended to buf. */
static void put_ints(char *buf, size_t len, const char *name, int n, const int64_t *v) {
    size_t at = strlen(buf);
    at += (size_t)snprintf(buf + at, len - at, "%s%s=[", at ? ";" : "", name);
    for (int i = 0; i < n && at < len; i++)
        at += (size_t)snprintf(buf + at, len - at, "%s%lld", i ? "," : "", (long long)v[i]);
    if (at < len) snprintf(buf + at, len - at, "]");
}

/* Y = conv(X, W) + B. dX is the transposed convolution of dY (ConvGradInput, which takes X's
 * shape since strides make it ambiguous), dW the correlation of X with dY (ConvGradWeight),
 * dB the sum of dY over batch and space. Both internal ops re-read the node's attributes, so
 * auto_pad is resolved against the actual shapes at run time. */
static dl_status conv_grad(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy,
                           dl_value **dx) {
    dl_value *x = n->in[0], *w = n->in[1];
    int rank = x->type.rank;
    if (rank < 3 || w->type.rank != rank) return dg_refuse(gc, n, "X and W need a known rank");
    if (dg_needs(gc, n, 0)) {
        dl_value *in[3] = {dy[0], w, dg_shape(gc, x)};
        DL_TRY(dg_op_like(gc, DG_DOMAIN, "ConvGradInput", 3, in, n, NULL, 1, &dx[0]));
    }
    if (dg_needs(gc, n, 1)) {
        for (int d = 2; d < rank; d++)
            if (w->type.dims[d] < 0) return dg_refuse(gc, n, "the kernel size of W must be known");
        char at[256] = "";
        put_ints(at, sizeof at, "kernel_shape", rank - 2, w->type.dims + 2);
        dl_value *in[2] = {x, dy[0]};
        DL_TRY(dg_op_like(gc, DG_DOMAIN, "ConvGradWeight", 2, in, n, at, 1, &dx[1]));
    }
    if (dg_needs(gc, n, 2)) dx[2] = grad_bias(gc, dy[0]);
    return dg_status(gc);
}

/* Y = convT(X, W) + B is the input gradient of a Conv mapping Y's shape to X's with the same
 * W, strides, dilations, group and the pads ConvTranspose resolved: so dX = Conv(dY, W) and
 * dW = ConvGradWeight(dY, X) of that Conv. Output padding (< stride) only adds positions that
 * Conv's floor drops. */
static dl_status convtr_grad(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy,
                             dl_value **dx) {
    dl_value *x = n->in[0], *w = n->in[1];
    int rank = x->type.rank, ns = rank - 2;
    if (rank < 3 || w->type.rank != rank) return dg_refuse(gc, n, "X and W need a known rank");
    dl_auto_pad ap;
    char err[200];
    if (dl_sp_auto_pad(n, &ap, err, sizeof err)) return dg_refuse(gc, n, err);
    const int64_t *os;
    bool need_in = ap != DL_AUTO_PAD_NOTSET || dl_attr_ints(n, "output_shape", &os) >= 0;
    for (int d = 0; d < ns; d++) {
        if (w->type.dims[d + 2] < 0) return dg_refuse(gc, n, "the kernel size of W must be known");
        if (need_in && x->type.dims[d + 2] < 0)
            return dg_refuse(gc, n, "auto_pad or output_shape with a symbolic spatial size");
    }
    conv_geom g;
    if (dl_convtr_forward_window(n, ns, x->type.dims + 2, w->type.dims + 2, &g, err, sizeof err))
        return dg_refuse(gc, n, err);
    int64_t pads[2 * MAX_SPATIAL];
    for (int d = 0; d < ns; d++) {
        pads[d] = g.pb[d];
        pads[d + ns] = g.pe[d];
    }
    char at[512] = "auto_pad=NOTSET";
    snprintf(at + strlen(at), sizeof at - strlen(at), ";group=%lld",
             (long long)dl_attr_int(n, "group", 1));
    put_ints(at, sizeof at, "kernel_shape", ns, g.k);
    put_ints(at, sizeof at, "strides", ns, g.stride);
    put_ints(at, sizeof at, "dilations", ns, g.dil);
    put_ints(at, sizeof at, "pads", 2 * ns, pads);
    if (dg_needs(gc, n, 0)) dx[0] = dg_op2(gc, "Conv", dy[0], w, at);
    if (dg_needs(gc, n, 1)) {
        dl_value *in[2] = {dy[0], x};
        DL_TRY(dg_op_like(gc, DG_DOMAIN, "ConvGradWeight", 2, in, NULL, at, 1, &dx[1]));
    }
    if (dg_needs(gc, n, 2)) dx[2] = grad_bias(gc, dy[0]);
    return dg_status(gc);
}

const dl_op_def dl_ops_conv[] = {
    {.name = "Conv",
     .min_in = 2,
     .max_in = 3,
     .min_out = 1,
     .max_out = 1,
     .attrs = conv_attrs,
     .infer = conv_infer,
     .ref = conv_ref,
     .grad = conv_grad},
    {.name = "ConvTranspose",
     .min_in = 2,
     .max_in = 3,
     .min_out = 1,
     .max_out = 1,
     .attrs = convtr_attrs,
     .infer = convtr_infer,
     .ref = convtr_ref,
     .grad = convtr_grad},
    {.name = NULL},
};
