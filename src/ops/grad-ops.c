/* grad-ops.c — op family "grad": the backward kernels ONNX has no op for, in the internal
 * domain "ai.dlcc" (DG_DOMAIN in src/train/grad.h), built by the gradient rules of conv.c and
 * pool.c:
 *   ConvGradInput(dY, W, x_shape) -> dX   the input gradient of Conv (a transposed conv); X's
 *                                         shape is an int64 input since strides make it ambiguous
 *   ConvGradWeight(X, dY) -> dW           the weight gradient of Conv (kernel_shape required)
 *   MaxPoolGrad(X, dY) -> dX              each dY added at its window's first maximum
 *   AveragePoolGrad(dY, x_shape) -> dX    each dY spread over the taps its average counted
 * Each carries its forward op's attributes (auto_pad, strides, pads, dilations, group or
 * ceil_mode, count_include_pad; MaxPoolGrad's global=1 is GlobalMaxPool) and re-derives the
 * forward window with the shared geometry (spatial.h), so inference checks that dY has exactly
 * the shape the forward op gives.
 *
 * Kernels are typed for float32 and float64 (float16 and bfloat16 run on float64 copies). The
 * conv ones are im2col / col2im (conv.c) around the reference GEMM, per group and image. */
#include "op-impl.h"
#include "ref-gemm.h"
#include "spatial.h"
#include "../kernels/rt/dlrt.h"

/* conv.c: one group's im2col of x, and its adjoint (col scattered back, used here with the
 * window's in and out swapped). */
void dl_conv_im2col_f32(const dl_window *g, int64_t Cg, const float *x, float *col);
void dl_conv_im2col_f64(const dl_window *g, int64_t Cg, const double *x, double *col);
void dl_conv_col2im_f32(const dl_window *g, int64_t Mg, const float *col, float *y);
void dl_conv_col2im_f64(const dl_window *g, int64_t Mg, const double *col, double *y);

static const dl_attr_spec conv_grad_attrs[] = {
    {"auto_pad", DL_ATTR_STRING},   {"dilations", DL_ATTR_INTS}, {"group", DL_ATTR_INT},
    {"kernel_shape", DL_ATTR_INTS}, {"pads", DL_ATTR_INTS},      {"strides", DL_ATTR_INTS},
    {NULL, DL_ATTR_UNDEFINED},
};

static const dl_attr_spec maxpool_grad_attrs[] = {
    {"auto_pad", DL_ATTR_STRING},   {"ceil_mode", DL_ATTR_INT},     {"dilations", DL_ATTR_INTS},
    {"global", DL_ATTR_INT},        {"kernel_shape", DL_ATTR_INTS}, {"pads", DL_ATTR_INTS},
    {"storage_order", DL_ATTR_INT}, {"strides", DL_ATTR_INTS},      {NULL, DL_ATTR_UNDEFINED},
};

static const dl_attr_spec avgpool_grad_attrs[] = {
    {"auto_pad", DL_ATTR_STRING},       {"ceil_mode", DL_ATTR_INT},
    {"count_include_pad", DL_ATTR_INT}, {"dilations", DL_ATTR_INTS},
    {"kernel_shape", DL_ATTR_INTS},     {"pads", DL_ATTR_INTS},
    {"strides", DL_ATTR_INTS},          {NULL, DL_ATTR_UNDEFINED},
};

/* ---- inference ---- */

static bool differ(int64_t a, int64_t b) {
    return a >= 0 && b >= 0 && a != b;
}

static void dims_of(const dl_type *t, int rank, int64_t *dims) {
    for (int d = 0; d < rank; d++) dims[d] = t && t->rank == rank ? t->dims[d] : -1;
}

/* Inputs a and b: floating, one dtype. */
static dl_status float_pair(dl_infer *ic, int a, int b) {
    DL_TRY(dl_infer_require_float(ic, a));
    DL_TRY(dl_infer_require_float(ic, b));
    int idx[2] = {a, b};
    return dl_infer_same_dtype(ic, 2, idx);
}

/* Input i: a 1-D int64 shape of rank values. dims[] gets them when known; otherwise, when the
 * shape is Shape(v) of a value v of this rank, v's dims (symbols included); else -1s. */
static dl_status shape_input(dl_infer *ic, int i, int rank, int64_t *dims) {
    static const dl_dtype i64[] = {DL_I64, DL_DTYPE_UNDEFINED};
    DL_TRY(dl_infer_require_dtype(ic, i, i64));
    const dl_type *t = ic->in[i];
    if (t->rank >= 0 && t->rank != 1)
        return dl_infer_fail(ic, DL_ERR_SHAPE, "the shape input must be 1-D, got rank %d", t->rank);
    if (t->rank == 1 && differ(t->dims[0], rank))
        return dl_infer_fail(ic, DL_ERR_SHAPE, "the shape input has %lld values for rank %d",
                             (long long)t->dims[0], rank);
    int n;
    bool known;
    DL_TRY(dl_infer_const_ints(ic, i, dims, DL_MAX_RANK, &n, &known));
    if (known) {
        if (n != rank)
            return dl_infer_fail(ic, DL_ERR_SHAPE, "the shape input has %d values for rank %d", n,
                                 rank);
        for (int d = 0; d < rank; d++)
            if (dims[d] < 0 || dims[d] >= DL_SP_ATTR_LIMIT)
                return dl_infer_fail(ic, DL_ERR_INVALID, "shape value %lld is out of range",
                                     (long long)dims[d]);
        return DL_OK;
    }
    const dl_value *v = ic->node && i < ic->node->n_in ? ic->node->in[i] : NULL;
    const dl_node *p = v ? v->producer : NULL;
    bool plain_shape = p && !strcmp(p->op->name, "Shape") && (!p->op->domain || !*p->op->domain) &&
                       !dl_node_attr(p, "start") && !dl_node_attr(p, "end") && p->in[0];
    dims_of(plain_shape ? &p->in[0]->type : NULL, rank, dims);
    return DL_OK;
}

/* The rank the conv/pool tensors share (DL_RANK_UNKNOWN when none is known); error when two
 * known ranks differ or it is below min_rank. */
static dl_status common_rank(dl_infer *ic, int n, const int *idx, int min_rank, int *rank) {
    *rank = DL_RANK_UNKNOWN;
    for (int k = 0; k < n; k++) {
        int r = ic->in[idx[k]]->rank;
        if (r < 0) continue;
        if (*rank >= 0 && r != *rank)
            return dl_infer_fail(ic, DL_ERR_SHAPE, "inputs %d and %d have ranks %d and %d", idx[0],
                                 idx[k], *rank, r);
        *rank = r;
    }
    if (*rank >= 0 && (*rank < min_rank || *rank > DL_MAX_RANK))
        return dl_infer_fail(ic, DL_ERR_SHAPE, "tensors must have rank %d..%d, got %d", min_rank,
                             DL_MAX_RANK, *rank);
    return DL_OK;
}

/* The Conv between X [N, C, in...], W [M, C/group, k...] and dY [N, M, out...] (dims < 0 where
 * unknown): fills the window g and group, checking every relation the shapes must satisfy. */
static const char *conv_relation(const dl_node *n, int rank, const int64_t *x, const int64_t *w,
                                 const int64_t *dy, dl_window *g, int64_t *group, char *err,
                                 size_t errlen) {
    *group = dl_attr_int(n, "group", 1);
    if (*group < 1 || *group >= DL_SP_ATTR_LIMIT) {
        snprintf(err, errlen, "group must be >= 1, got %lld", (long long)*group);
        return err;
    }
    const char *e = dl_conv_window(n, rank - 2, x + 2, w + 2, g, err, errlen);
    if (e) return e;
    int64_t C = x[1], M = w[0] >= 0 ? w[0] : dy[1];
    if (C > DL_SP_ELEM_LIMIT || M > DL_SP_ELEM_LIMIT || w[1] > DL_SP_ELEM_LIMIT)
        snprintf(err, errlen, "channel counts are too large");
    else if (differ(x[0], dy[0]))
        snprintf(err, errlen, "X has batch %lld but dY has %lld", (long long)x[0],
                 (long long)dy[0]);
    else if (differ(w[0], dy[1]))
        snprintf(err, errlen, "W has %lld filters but dY has %lld channels", (long long)w[0],
                 (long long)dy[1]);
    else if ((C >= 0 && C % *group) || (M >= 0 && M % *group))
        snprintf(err, errlen, "channels %lld and %lld are not divisible by group %lld",
                 (long long)C, (long long)M, (long long)*group);
    else if (w[1] >= 0 && C >= 0 && C / *group != w[1])
        snprintf(err, errlen, "X has %lld channels but W takes %lld x group %lld", (long long)C,
                 (long long)w[1], (long long)*group);
    else
        err[0] = 0;
    if (err[0]) return err;
    for (int d = 0; d < rank - 2; d++)
        if (differ(g->out[d], dy[d + 2])) {
            snprintf(err, errlen, "dY spatial dim %d is %lld but the conv gives %lld", d,
                     (long long)dy[d + 2], (long long)g->out[d]);
            return err;
        }
    return NULL;
}

static dl_status conv_gi_infer(dl_infer *ic) {
    DL_TRY(float_pair(ic, 0, 1));
    int rank, idx[2] = {0, 1};
    DL_TRY(common_rank(ic, 2, idx, 3, &rank));
    if (rank < 0 && ic->in[2]->rank == 1 && ic->in[2]->dims[0] >= 0)
        rank = (int)ic->in[2]->dims[0];
    if (rank < 0) return dl_infer_set(ic, 0, ic->in[0]->dtype, DL_RANK_UNKNOWN, NULL);
    if (rank < 3 || rank > DL_MAX_RANK)
        return dl_infer_fail(ic, DL_ERR_SHAPE, "rank %d: expected 3..%d", rank, DL_MAX_RANK);
    int64_t x[DL_MAX_RANK], w[DL_MAX_RANK], dy[DL_MAX_RANK];
    dims_of(ic->in[0], rank, dy);
    dims_of(ic->in[1], rank, w);
    DL_TRY(shape_input(ic, 2, rank, x));
    dl_window g;
    int64_t group;
    char err[200];
    const char *e = conv_relation(ic->node, rank, x, w, dy, &g, &group, err, sizeof err);
    if (e) return dl_infer_fail(ic, DL_ERR_SHAPE, "%s", e);
    if (x[0] < 0) x[0] = dy[0];
    if (x[1] < 0 && w[1] >= 0 && w[1] <= DL_SP_ELEM_LIMIT / group) x[1] = w[1] * group;
    for (int d = 0; d < rank; d++)
        if (x[d] < 0) x[d] = dl_infer_fresh_dim(ic);
    return dl_infer_set(ic, 0, ic->in[0]->dtype, rank, x);
}

static dl_status conv_gw_infer(dl_infer *ic) {
    DL_TRY(float_pair(ic, 0, 1));
    int rank, idx[2] = {0, 1};
    DL_TRY(common_rank(ic, 2, idx, 3, &rank));
    if (rank < 0) return dl_infer_set(ic, 0, ic->in[0]->dtype, DL_RANK_UNKNOWN, NULL);
    int64_t x[DL_MAX_RANK], w[DL_MAX_RANK], dy[DL_MAX_RANK];
    dims_of(ic->in[0], rank, x);
    dims_of(ic->in[1], rank, dy);
    dims_of(NULL, rank, w);
    dl_window g;
    int64_t group;
    char err[200];
    const char *e = conv_relation(ic->node, rank, x, w, dy, &g, &group, err, sizeof err);
    if (e) return dl_infer_fail(ic, DL_ERR_SHAPE, "%s", e);
    w[0] = dy[1] >= 0 ? dy[1] : dl_infer_fresh_dim(ic);
    w[1] = x[1] >= 0 ? x[1] / group : dl_infer_fresh_dim(ic);
    for (int d = 0; d < rank - 2; d++) {
        if (g.k[d] < 0)
            return dl_infer_fail(ic, DL_ERR_INVALID, "attribute kernel_shape is required");
        w[d + 2] = g.k[d];
    }
    return dl_infer_set(ic, 0, ic->in[0]->dtype, rank, w);
}

/* The pooling window from X's dims; dY must have the pooled shape. */
static dl_status pool_relation(dl_infer *ic, int rank, const int64_t *x, const int64_t *dy,
                               dl_window *g) {
    bool global = dl_attr_int(ic->node, "global", 0) != 0;
    char err[200];
    const char *e = dl_pool_window(ic->node, global, rank - 2, x + 2, g, err, sizeof err);
    if (e) return dl_infer_fail(ic, DL_ERR_INVALID, "%s", e);
    for (int d = 0; d < rank; d++) {
        int64_t want = d < 2 ? x[d] : g->out[d - 2];
        if (differ(want, dy[d]))
            return dl_infer_fail(ic, DL_ERR_SHAPE, "dY dim %d is %lld but the pooling gives %lld",
                                 d, (long long)dy[d], (long long)want);
    }
    return DL_OK;
}

static dl_status maxpool_grad_infer(dl_infer *ic) {
    DL_TRY(float_pair(ic, 0, 1));
    int rank, idx[2] = {0, 1};
    DL_TRY(common_rank(ic, 2, idx, 3, &rank));
    if (rank < 0) return dl_infer_set(ic, 0, ic->in[0]->dtype, DL_RANK_UNKNOWN, NULL);
    int64_t x[DL_MAX_RANK], dy[DL_MAX_RANK];
    dims_of(ic->in[0], rank, x);
    dims_of(ic->in[1], rank, dy);
    dl_window g;
    DL_TRY(pool_relation(ic, rank, x, dy, &g));
    return dl_infer_same(ic, 0, 0);
}

static dl_status avgpool_grad_infer(dl_infer *ic) {
    DL_TRY(dl_infer_require_float(ic, 0));
    int rank = ic->in[0]->rank;
    if (rank < 0 && ic->in[1] && ic->in[1]->rank == 1 && ic->in[1]->dims[0] >= 0)
        rank = (int)ic->in[1]->dims[0];
    if (rank < 0) return dl_infer_set(ic, 0, ic->in[0]->dtype, DL_RANK_UNKNOWN, NULL);
    if (rank < 3 || rank > DL_MAX_RANK)
        return dl_infer_fail(ic, DL_ERR_SHAPE, "rank %d: expected 3..%d", rank, DL_MAX_RANK);
    int64_t x[DL_MAX_RANK], dy[DL_MAX_RANK];
    dims_of(ic->in[0], rank, dy);
    DL_TRY(shape_input(ic, 1, rank, x));
    dl_window g;
    DL_TRY(pool_relation(ic, rank, x, dy, &g));
    for (int d = 0; d < rank; d++)
        if (x[d] < 0) x[d] = d < 2 && dy[d] >= 0 ? dy[d] : dl_infer_fresh_dim(ic);
    return dl_infer_set(ic, 0, ic->in[0]->dtype, rank, x);
}

/* ---- kernels ---- */

/* A kernel body on float32 or float64 tensors: in[] as the kernel's inputs, out its output. */
typedef dl_status (*typed_body)(dl_kernel *kc, const dl_tensor *const *in, dl_tensor *out);

static dl_status widen(dl_kernel *kc, const dl_tensor *t, dl_tensor **out) {
    DL_TRY(dl_tensor_new(kc->ctx, DL_F64, t->rank, t->dims, out));
    double *d = (*out)->data;
    for (int64_t i = 0; i < t->numel; i++) d[i] = dl_get_f64(t, i);
    return DL_OK;
}

/* Runs body directly for float32/float64, else on float64 copies of the float inputs and the
 * output, rounding the result back. */
static dl_status run_typed(dl_kernel *kc, typed_body body) {
    dl_tensor *out = kc->out[0];
    if (!out->data) return dl_kernel_fail(kc, DL_ERR_INTERNAL, "output not allocated");
    if (out->dtype == DL_F32 || out->dtype == DL_F64) return body(kc, kc->in, out);
    enum { MAX_IN = 4 };
    const dl_tensor *in[MAX_IN] = {0};
    dl_tensor *tmp[MAX_IN + 1] = {0};
    dl_status s = DL_OK;
    for (int i = 0; i < kc->n_in && i < MAX_IN && s == DL_OK; i++) {
        in[i] = kc->in[i];
        if (in[i] && dl_dtype_is_float(in[i]->dtype) && (s = widen(kc, in[i], &tmp[i])) == DL_OK)
            in[i] = tmp[i];
    }
    if (s == DL_OK) s = widen(kc, out, &tmp[MAX_IN]);
    if (s == DL_OK) s = body(kc, in, tmp[MAX_IN]);
    for (int64_t i = 0; s == DL_OK && i < out->numel; i++)
        dl_set_f64(out, i, ((const double *)tmp[MAX_IN]->data)[i]);
    for (int i = 0; i <= MAX_IN; i++) dl_tensor_free(tmp[i]);
    return s;
}

/* Zeroed scratch of rows x cols elements of elt bytes. */
static dl_status scratch(dl_kernel *kc, int64_t rows, int64_t cols, size_t elt, void **out) {
    size_t cells, bytes;
    DL_TRY(dl_mul_size(kc->ctx, (size_t)(rows > 0 ? rows : 1), (size_t)(cols > 0 ? cols : 1),
                       &cells, "scratch"));
    DL_TRY(dl_mul_size(kc->ctx, cells, elt, &bytes, "scratch"));
    DL_TRY(dl_alloc_checked(kc->ctx, bytes, out, "backward scratch"));
    memset(*out, 0, bytes);
    return DL_OK;
}

typedef struct conv_sizes {
    dl_window g;
    int64_t N, C, M, group, K, P, IN;
    bool pointwise; /* 1x1, stride 1, no padding: the image itself is the im2col matrix */
} conv_sizes;

/* The geometry of concrete X, W, dY dims, rechecked (inference has checked it already). */
static dl_status conv_sizes_of(dl_kernel *kc, int rank, const int64_t *x, const int64_t *w,
                               const int64_t *dy, conv_sizes *cs) {
    char err[200];
    const char *e = conv_relation(kc->node, rank, x, w, dy, &cs->g, &cs->group, err, sizeof err);
    if (e) return dl_kernel_fail(kc, DL_ERR_SHAPE, "%s", e);
    int ns = rank - 2;
    cs->N = x[0];
    cs->C = x[1];
    cs->M = dy[1];
    bool ok = dl_sp_prod(ns, cs->g.k, &cs->K) && dl_sp_prod(ns, cs->g.out, &cs->P) &&
              dl_sp_prod(ns, cs->g.in, &cs->IN) && cs->C <= DL_SP_ELEM_LIMIT &&
              cs->M <= DL_SP_ELEM_LIMIT &&
              cs->K <= DL_SP_ELEM_LIMIT / (cs->C / cs->group > 0 ? cs->C / cs->group : 1);
    if (!ok) return dl_kernel_fail(kc, DL_ERR_LIMIT, "sizes are too large");
    cs->pointwise = true;
    for (int d = 0; d < ns; d++)
        cs->pointwise = cs->pointwise && cs->g.k[d] == 1 && cs->g.stride[d] == 1 &&
                        cs->g.pb[d] == 0 && cs->g.pe[d] == 0;
    return DL_OK;
}

/* dX[n, group gi] = col2im(W_giᵀ · dY[n, gi]); wt holds each group's W transposed [R, Mg]. */
/* c += a·b. The native backend runs these ops through its own kernels (conv-grad.c) for float32
 * with static spatial dims and through these otherwise, so float32 here uses the runtime SGEMM
 * too (an in-place residual add); float64 keeps the reference GEMM. test_grad_ops checks both
 * against plain loops. */
static void grad_gemm_f32(int64_t M, int64_t N, int64_t K, const float *a, int64_t lda,
                          const float *b, int64_t ldb, float *c, int64_t ldc) {
    dlrt_epilogue ep = {.alpha = 1.0f, .residual = c, .res_rs = ldc, .res_cs = 1};
    dlrt_sgemm(M, N, K, a, lda, 0, b, ldb, 0, c, ldc, &ep);
}
#define grad_gemm_f64 dl_ref_gemm_f64

#define DEFINE_CONV_GRAD_INPUT(T, SUF)                                                             \
    static void conv_grad_input_##SUF(const conv_sizes *cs, const T *dy, const T *w, T *dx,       \
                                      T *wt, T *col) {                                             \
        int64_t Cg = cs->C / cs->group, Mg = cs->M / cs->group, R = Cg * cs->K, P = cs->P;         \
        for (int64_t gi = 0; gi < cs->group; gi++)                                                 \
            for (int64_t m = 0; m < Mg; m++)                                                       \
                for (int64_t r = 0; r < R; r++)                                                    \
                    wt[(gi * R + r) * Mg + m] = w[(gi * Mg + m) * R + r];                          \
        dl_window sw = cs->g; /* col2im scatters from dY's positions into X's */                   \
        memcpy(sw.in, cs->g.out, sizeof sw.in);                                                    \
        memcpy(sw.out, cs->g.in, sizeof sw.out);                                                   \
        for (int64_t n = 0; n < cs->N; n++)                                                        \
            for (int64_t gi = 0; gi < cs->group; gi++) {                                           \
                const T *dyg = dy + (n * cs->M + gi * Mg) * P;                                     \
                T *dxg = dx + (n * cs->C + gi * Cg) * cs->IN;                                      \
                if (cs->pointwise) {                                                               \
                    grad_gemm_##SUF(Cg, P, Mg, wt + gi * R * Mg, Mg, dyg, P, dxg, P);            \
                    continue;                                                                      \
                }                                                                                  \
                memset(col, 0, sizeof(T) * (size_t)(R * P));                                       \
                grad_gemm_##SUF(R, P, Mg, wt + gi * R * Mg, Mg, dyg, P, col, P);                 \
                dl_conv_col2im_##SUF(&sw, Cg, col, dxg);                                           \
            }                                                                                      \
    }

/* dWᵀ[group gi] = Σ_n im2col(X[n, gi]) · dY[n, gi]ᵀ accumulated in acc [R, Mg] per group, then
 * transposed into dW. */
#define DEFINE_CONV_GRAD_WEIGHT(T, SUF)                                                            \
    static void conv_grad_weight_##SUF(const conv_sizes *cs, const T *x, const T *dy, T *dw,      \
                                       T *acc, T *dyt, T *col) {                                   \
        int64_t Cg = cs->C / cs->group, Mg = cs->M / cs->group, R = Cg * cs->K, P = cs->P;         \
        for (int64_t n = 0; n < cs->N; n++)                                                        \
            for (int64_t gi = 0; gi < cs->group; gi++) {                                           \
                const T *xg = x + (n * cs->C + gi * Cg) * cs->IN, *src = xg;                       \
                const T *dyg = dy + (n * cs->M + gi * Mg) * P;                                     \
                if (!cs->pointwise) {                                                              \
                    dl_conv_im2col_##SUF(&cs->g, Cg, xg, col);                                     \
                    src = col;                                                                     \
                }                                                                                  \
                for (int64_t m = 0; m < Mg; m++)                                                   \
                    for (int64_t p = 0; p < P; p++) dyt[p * Mg + m] = dyg[m * P + p];              \
                grad_gemm_##SUF(R, Mg, P, src, P, dyt, Mg, acc + gi * R * Mg, Mg);               \
            }                                                                                      \
        for (int64_t gi = 0; gi < cs->group; gi++)                                                 \
            for (int64_t m = 0; m < Mg; m++)                                                       \
                for (int64_t r = 0; r < R; r++)                                                    \
                    dw[(gi * Mg + m) * R + r] = acc[(gi * R + r) * Mg + m];                        \
    }

DEFINE_CONV_GRAD_INPUT(float, f32)
DEFINE_CONV_GRAD_INPUT(double, f64)
DEFINE_CONV_GRAD_WEIGHT(float, f32)
DEFINE_CONV_GRAD_WEIGHT(double, f64)

static dl_status conv_gi_body(dl_kernel *kc, const dl_tensor *const *in, dl_tensor *out) {
    const dl_tensor *dy = in[0], *w = in[1];
    int rank = out->rank;
    if (rank < 3 || dy->rank != rank || w->rank != rank)
        return dl_kernel_fail(kc, DL_ERR_SHAPE, "unexpected ranks");
    conv_sizes cs;
    DL_TRY(conv_sizes_of(kc, rank, out->dims, w->dims, dy->dims, &cs));
    if (out->numel == 0 || dy->numel == 0) return DL_OK;
    size_t elt = dl_dtype_size(out->dtype);
    void *wt = NULL, *col = NULL;
    dl_status s = scratch(kc, w->numel, 1, elt, &wt);
    if (s == DL_OK && !cs.pointwise) s = scratch(kc, cs.C / cs.group * cs.K, cs.P, elt, &col);
    if (s == DL_OK) {
        if (out->dtype == DL_F32)
            conv_grad_input_f32(&cs, dy->data, w->data, out->data, wt, col);
        else
            conv_grad_input_f64(&cs, dy->data, w->data, out->data, wt, col);
    }
    dl_free(wt);
    dl_free(col);
    return s;
}

static dl_status conv_gw_body(dl_kernel *kc, const dl_tensor *const *in, dl_tensor *out) {
    const dl_tensor *x = in[0], *dy = in[1];
    int rank = out->rank;
    if (rank < 3 || x->rank != rank || dy->rank != rank)
        return dl_kernel_fail(kc, DL_ERR_SHAPE, "unexpected ranks");
    conv_sizes cs;
    DL_TRY(conv_sizes_of(kc, rank, x->dims, out->dims, dy->dims, &cs));
    if (out->numel == 0) return DL_OK;
    size_t elt = dl_dtype_size(out->dtype);
    void *acc = NULL, *dyt = NULL, *col = NULL;
    dl_status s = scratch(kc, out->numel, 1, elt, &acc);
    if (s == DL_OK) s = scratch(kc, cs.M / cs.group, cs.P, elt, &dyt);
    if (s == DL_OK && !cs.pointwise) s = scratch(kc, cs.C / cs.group * cs.K, cs.P, elt, &col);
    if (s == DL_OK) {
        if (out->dtype == DL_F32)
            conv_grad_weight_f32(&cs, x->data, dy->data, out->data, acc, dyt, col);
        else
            conv_grad_weight_f64(&cs, x->data, dy->data, out->data, acc, dyt, col);
    }
    dl_free(acc);
    dl_free(dyt);
    dl_free(col);
    return s;
}

static dl_status conv_gi_ref(dl_kernel *kc) {
    return run_typed(kc, conv_gi_body);
}
static dl_status conv_gw_ref(dl_kernel *kc) {
    return run_typed(kc, conv_gw_body);
}

/* ---- pooling backward ---- */

typedef struct pool_sizes {
    dl_window g;
    int64_t planes, IN, P;
    int64_t KO; /* taps over all but the last spatial dim */
} pool_sizes;

static dl_status pool_sizes_of(dl_kernel *kc, const int64_t *x, const int64_t *dy, int rank,
                               pool_sizes *ps) {
    bool global = dl_attr_int(kc->node, "global", 0) != 0;
    char err[200];
    const char *e = dl_pool_window(kc->node, global, rank - 2, x + 2, &ps->g, err, sizeof err);
    if (e) return dl_kernel_fail(kc, DL_ERR_INVALID, "%s", e);
    bool ok = dl_sp_prod(rank - 2, ps->g.in, &ps->IN) && dl_sp_prod(rank - 2, ps->g.out, &ps->P) &&
              dl_sp_prod(rank - 3, ps->g.k, &ps->KO) && dl_sp_prod(2, x, &ps->planes);
    for (int d = 0; ok && d < rank; d++) ok = dy[d] == (d < 2 ? x[d] : ps->g.out[d - 2]);
    if (!ok) return dl_kernel_fail(kc, DL_ERR_SHAPE, "dY does not have the pooled shape");
    return DL_OK;
}

/* Visits the taps of output position opos inside the input in the forward kernel's order
 * (row-major over the kernel), as offsets into one plane: BODY sees `int64_t at`. */
#define FOR_EACH_TAP(g, ko_count, opos, BODY)                                                      \
    do {                                                                                           \
        int ns_ = (g)->ns;                                                                         \
        int64_t kidx_[DL_SP_MAX] = {0}, IW_ = (g)->in[ns_ - 1];                                    \
        int64_t w0_ = (opos)[ns_ - 1] * (g)->stride[ns_ - 1] - (g)->pb[ns_ - 1];                   \
        for (int64_t ko_ = 0; ko_ < (ko_count); ko_++, dl_index_next(ns_ - 1, (g)->k, kidx_)) {    \
            int64_t off_ = 0;                                                                      \
            bool valid_ = true;                                                                    \
            for (int d_ = 0; d_ < ns_ - 1 && valid_; d_++) {                                       \
                int64_t id_ = (opos)[d_] * (g)->stride[d_] - (g)->pb[d_] + kidx_[d_] * (g)->dil[d_]; \
                valid_ = id_ >= 0 && id_ < (g)->in[d_];                                            \
                off_ = off_ * (g)->in[d_] + id_;                                                   \
            }                                                                                      \
            if (!valid_) continue;                                                                 \
            for (int64_t j_ = 0; j_ < (g)->k[ns_ - 1]; j_++) {                                     \
                int64_t iw_ = w0_ + j_ * (g)->dil[ns_ - 1];                                        \
                if (iw_ < 0 || iw_ >= IW_) continue;                                               \
                int64_t at = off_ * IW_ + iw_;                                                     \
                BODY;                                                                              \
            }                                                                                      \
        }                                                                                          \
    } while (0)

/* dX gets each dY at the first maximum of its window (the forward's comparison, so ties and
 * NaNs pick the same element). */
#define DEFINE_MAXPOOL_GRAD(T, SUF)                                                                \
    static void maxpool_grad_##SUF(const pool_sizes *ps, const T *x, const T *dy, T *dx) {        \
        int ns = ps->g.ns;                                                                         \
        for (int64_t pl = 0; pl < ps->planes; pl++) {                                              \
            const T *xp = x + pl * ps->IN, *dyp = dy + pl * ps->P;                                 \
            T *dxp = dx + pl * ps->IN;                                                             \
            int64_t opos[DL_SP_MAX] = {0};                                                         \
            for (int64_t op = 0; op < ps->P; op++, dl_index_next(ns, ps->g.out, opos)) {           \
                int64_t best = -1;                                                                 \
                T bv = 0;                                                                          \
                FOR_EACH_TAP(&ps->g, ps->KO, opos, {                                               \
                    if (best < 0 || xp[at] > bv) {                                                 \
                        best = at;                                                                 \
                        bv = xp[at];                                                               \
                    }                                                                              \
                });                                                                                \
                if (best >= 0) dxp[best] += dyp[op];                                               \
            }                                                                                      \
        }                                                                                          \
    }

/* cnt[d][o]: the taps of output o in dim d that the average counts (inside the input, or with
 * count_include_pad inside the padded input); the window's count is their product. */
#define DEFINE_AVGPOOL_GRAD(T, SUF)                                                                \
    static void avgpool_grad_##SUF(const pool_sizes *ps, const int64_t *const *cnt, const T *dy,  \
                                   T *dx) {                                                        \
        int ns = ps->g.ns;                                                                         \
        for (int64_t pl = 0; pl < ps->planes; pl++) {                                              \
            const T *dyp = dy + pl * ps->P;                                                        \
            T *dxp = dx + pl * ps->IN;                                                             \
            int64_t opos[DL_SP_MAX] = {0};                                                         \
            for (int64_t op = 0; op < ps->P; op++, dl_index_next(ns, ps->g.out, opos)) {           \
                int64_t c = 1;                                                                     \
                for (int d = 0; d < ns; d++) c *= cnt[d][opos[d]];                                 \
                if (c == 0) continue;                                                              \
                T v = dyp[op] / (T)c;                                                              \
                FOR_EACH_TAP(&ps->g, ps->KO, opos, dxp[at] += v);                                  \
            }                                                                                      \
        }                                                                                          \
    }

DEFINE_MAXPOOL_GRAD(float, f32)
DEFINE_MAXPOOL_GRAD(double, f64)
DEFINE_AVGPOOL_GRAD(float, f32)
DEFINE_AVGPOOL_GRAD(double, f64)

static dl_status maxpool_grad_body(dl_kernel *kc, const dl_tensor *const *in, dl_tensor *out) {
    const dl_tensor *x = in[0], *dy = in[1];
    if (x->rank < 3 || dy->rank != x->rank || out->numel != x->numel)
        return dl_kernel_fail(kc, DL_ERR_SHAPE, "unexpected shapes");
    pool_sizes ps;
    DL_TRY(pool_sizes_of(kc, x->dims, dy->dims, x->rank, &ps));
    if (out->dtype == DL_F32)
        maxpool_grad_f32(&ps, x->data, dy->data, out->data);
    else
        maxpool_grad_f64(&ps, x->data, dy->data, out->data);
    return DL_OK;
}

static dl_status avgpool_grad_body(dl_kernel *kc, const dl_tensor *const *in, dl_tensor *out) {
    const dl_tensor *dy = in[0];
    if (out->rank < 3 || dy->rank != out->rank)
        return dl_kernel_fail(kc, DL_ERR_SHAPE, "unexpected shapes");
    pool_sizes ps;
    DL_TRY(pool_sizes_of(kc, out->dims, dy->dims, out->rank, &ps));
    const dl_window *g = &ps.g;
    int64_t total = 0;
    for (int d = 0; d < g->ns; d++) total += g->out[d];
    void *mem;
    DL_TRY(scratch(kc, total, 1, sizeof(int64_t), &mem));
    int64_t *buf = mem;
    const int64_t *cnt[DL_SP_MAX];
    bool include_pad = dl_attr_int(kc->node, "count_include_pad", 0) != 0;
    int64_t *at = buf;
    for (int d = 0; d < g->ns; d++) {
        int64_t lo = include_pad ? -g->pb[d] : 0, hi = g->in[d] + (include_pad ? g->pe[d] : 0);
        for (int64_t o = 0; o < g->out[d]; o++) {
            int64_t c = 0, id = o * g->stride[d] - g->pb[d];
            for (int64_t j = 0; j < g->k[d]; j++, id += g->dil[d]) c += id >= lo && id < hi;
            at[o] = c;
        }
        cnt[d] = at;
        at += g->out[d];
    }
    if (out->dtype == DL_F32)
        avgpool_grad_f32(&ps, cnt, dy->data, out->data);
    else
        avgpool_grad_f64(&ps, cnt, dy->data, out->data);
    dl_free(buf);
    return DL_OK;
}

static dl_status maxpool_grad_ref(dl_kernel *kc) {
    return run_typed(kc, maxpool_grad_body);
}
static dl_status avgpool_grad_ref(dl_kernel *kc) {
    return run_typed(kc, avgpool_grad_body);
}

const dl_op_def dl_ops_grad[] = {
    {.name = "ConvGradInput",
     .domain = "ai.dlcc",
     .min_in = 3,
     .max_in = 3,
     .min_out = 1,
     .max_out = 1,
     .attrs = conv_grad_attrs,
     .infer = conv_gi_infer,
     .ref = conv_gi_ref},
    {.name = "ConvGradWeight",
     .domain = "ai.dlcc",
     .min_in = 2,
     .max_in = 2,
     .min_out = 1,
     .max_out = 1,
     .attrs = conv_grad_attrs,
     .infer = conv_gw_infer,
     .ref = conv_gw_ref},
    {.name = "MaxPoolGrad",
     .domain = "ai.dlcc",
     .min_in = 2,
     .max_in = 2,
     .min_out = 1,
     .max_out = 1,
     .attrs = maxpool_grad_attrs,
     .infer = maxpool_grad_infer,
     .ref = maxpool_grad_ref},
    {.name = "AveragePoolGrad",
     .domain = "ai.dlcc",
     .min_in = 2,
     .max_in = 2,
     .min_out = 1,
     .max_out = 1,
     .attrs = avgpool_grad_attrs,
     .infer = avgpool_grad_infer,
     .ref = avgpool_grad_ref},
    {.name = NULL},
};
