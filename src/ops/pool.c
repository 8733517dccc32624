/* pool.c — op family "pool": MaxPool, AveragePool, LpPool, their Global forms, and MaxUnpool.
 *
 * Reference kernels walk every output position and every kernel tap, reading through the
 * dtype-generic accessors (values go through double: exact for the int8/uint8 MaxPool case). */
#include "../train/grad.h"
#include "op-impl.h"
#include "spatial.h"

#include <math.h>

#define MAX_SPATIAL DL_SP_MAX

static const dl_attr_spec maxpool_attrs[] = {
    {"auto_pad", DL_ATTR_STRING},   {"ceil_mode", DL_ATTR_INT}, {"dilations", DL_ATTR_INTS},
    {"kernel_shape", DL_ATTR_INTS}, {"pads", DL_ATTR_INTS},     {"storage_order", DL_ATTR_INT},
    {"strides", DL_ATTR_INTS},      {NULL, DL_ATTR_UNDEFINED},
};

static const dl_attr_spec avgpool_attrs[] = {
    {"auto_pad", DL_ATTR_STRING},       {"ceil_mode", DL_ATTR_INT},
    {"count_include_pad", DL_ATTR_INT}, {"dilations", DL_ATTR_INTS},
    {"kernel_shape", DL_ATTR_INTS},     {"pads", DL_ATTR_INTS},
    {"strides", DL_ATTR_INTS},          {NULL, DL_ATTR_UNDEFINED},
};

static const dl_attr_spec lppool_attrs[] = {
    {"auto_pad", DL_ATTR_STRING},   {"ceil_mode", DL_ATTR_INT}, {"dilations", DL_ATTR_INTS},
    {"kernel_shape", DL_ATTR_INTS}, {"p", DL_ATTR_INT},         {"pads", DL_ATTR_INTS},
    {"strides", DL_ATTR_INTS},      {NULL, DL_ATTR_UNDEFINED},
};

static const dl_attr_spec globallp_attrs[] = {
    {"p", DL_ATTR_INT},
    {NULL, DL_ATTR_UNDEFINED},
};

static const dl_attr_spec unpool_attrs[] = {
    {"kernel_shape", DL_ATTR_INTS},
    {"pads", DL_ATTR_INTS},
    {"strides", DL_ATTR_INTS},
    {NULL, DL_ATTR_UNDEFINED},
};

static const dl_dtype maxpool_types[] = {
    DL_F32, DL_F64, DL_F16, DL_BF16, DL_I8, DL_U8, DL_DTYPE_UNDEFINED};

/* ---- geometry ---- */

typedef dl_window pool_geom;

typedef enum { GEOM_POOL, GEOM_GLOBAL, GEOM_UNPOOL } geom_kind;

/* Fills g for input spatial dims in[] (< 0 when symbolic). Returns an error message or NULL. */
static const char *pool_geometry(const dl_node *n, geom_kind kind, int ns, const int64_t *in,
                                 pool_geom *g, char *err, size_t errlen) {
    const char *e;
    if ((e = dl_sp_init(g, ns, in, err, errlen))) return e;
    if (kind == GEOM_GLOBAL) {
        for (int d = 0; d < ns; d++) {
            g->k[d] = in[d];
            g->stride[d] = g->dil[d] = 1;
            g->out[d] = 1;
        }
        return NULL;
    }
    const int64_t *ks;
    if (dl_attr_ints(n, "kernel_shape", &ks) < 0) {
        snprintf(err, errlen, "attribute kernel_shape is required");
        return err;
    }
    dl_auto_pad ap = DL_AUTO_PAD_NOTSET; /* MaxUnpool has no auto_pad */
    if (kind != GEOM_UNPOOL && (e = dl_sp_auto_pad(n, &ap, err, errlen))) return e;
    if ((e = dl_sp_read_attrs(n, ap, kind != GEOM_UNPOOL, g, err, errlen))) return e;
    if (kind == GEOM_POOL)
        return dl_sp_forward_out(g, ap, dl_attr_int(n, "ceil_mode", 0), err, errlen);
    for (int d = 0; d < ns; d++) {
        int64_t in_d = in[d];
        if (in_d < 0) continue;
        g->out[d] = in_d == 0 ? 0 : (in_d - 1) * g->stride[d] + g->k[d] - g->pb[d] - g->pe[d];
        if (g->out[d] < 0) {
            snprintf(err, errlen, "pads exceed the output size in spatial dim %d", d);
            return err;
        }
    }
    return NULL;
}

const char *dl_pool_window(const dl_node *n, bool global, int ns, const int64_t *in, dl_window *g,
                           char *err, size_t errlen) {
    return pool_geometry(n, global ? GEOM_GLOBAL : GEOM_POOL, ns, in, g, err, errlen);
}

static dl_status pool_infer_common(dl_infer *ic, geom_kind kind, const dl_dtype *types) {
    if (types)
        DL_TRY(dl_infer_require_dtype(ic, 0, types));
    else
        DL_TRY(dl_infer_require_float(ic, 0));
    const dl_type *x = ic->in[0];
    if (x->rank < 0) return dl_infer_set(ic, 0, x->dtype, DL_RANK_UNKNOWN, NULL);
    int min_rank = kind == GEOM_GLOBAL ? 2 : 3;
    if (x->rank < min_rank || x->rank > DL_MAX_RANK)
        return dl_infer_fail(ic, DL_ERR_SHAPE, "input must have rank %d..%d, got %d", min_rank,
                             DL_MAX_RANK, x->rank);
    int ns = x->rank - 2;
    pool_geom g;
    char err[200];
    const char *e = pool_geometry(ic->node, kind, ns, x->dims + 2, &g, err, sizeof err);
    if (e) return dl_infer_fail(ic, DL_ERR_INVALID, "%s", e);
    int64_t dims[DL_MAX_RANK];
    dims[0] = x->dims[0];
    dims[1] = x->dims[1];
    for (int d = 0; d < ns; d++) dims[d + 2] = g.out[d] >= 0 ? g.out[d] : dl_infer_fresh_dim(ic);
    return dl_infer_set(ic, 0, x->dtype, x->rank, dims);
}

static dl_status maxpool_infer(dl_infer *ic) {
    DL_TRY(pool_infer_common(ic, GEOM_POOL, maxpool_types));
    int64_t so = dl_attr_int(ic->node, "storage_order", 0);
    if (so != 0 && so != 1)
        return dl_infer_fail(ic, DL_ERR_INVALID, "storage_order must be 0 or 1");
    if (ic->n_out > 1) {
        if (ic->out[0].rank < 0) return dl_infer_set(ic, 1, DL_I64, DL_RANK_UNKNOWN, NULL);
        DL_TRY(dl_infer_set(ic, 1, DL_I64, ic->out[0].rank, ic->out[0].dims));
    }
    return DL_OK;
}

static dl_status avgpool_infer(dl_infer *ic) {
    return pool_infer_common(ic, GEOM_POOL, NULL);
}

static dl_status lppool_infer(dl_infer *ic) {
    int64_t p = dl_attr_int(ic->node, "p", 2);
    if (p < 1 || p > 1000)
        return dl_infer_fail(ic, DL_ERR_INVALID, "p must be in 1..1000, got %lld", (long long)p);
    return pool_infer_common(ic, GEOM_POOL, NULL);
}

static dl_status global_infer(dl_infer *ic) {
    return pool_infer_common(ic, GEOM_GLOBAL, NULL);
}

static dl_status globalmax_infer(dl_infer *ic) {
    return pool_infer_common(ic, GEOM_GLOBAL, maxpool_types);
}

static dl_status globallp_infer(dl_infer *ic) {
    int64_t p = dl_attr_int(ic->node, "p", 2);
    if (p < 1 || p > 1000)
        return dl_infer_fail(ic, DL_ERR_INVALID, "p must be in 1..1000, got %lld", (long long)p);
    return pool_infer_common(ic, GEOM_GLOBAL, NULL);
}

/* ---- pooling kernel ---- */

typedef enum { POOL_MAX, POOL_AVG, POOL_LP } pool_kind;

static dl_status pool_ref(dl_kernel *kc, geom_kind gk, pool_kind kind) {
    const dl_tensor *x = kc->in[0];
    dl_tensor *y = kc->out[0];
    dl_tensor *ind = kc->n_out > 1 && kc->node->out[1] ? kc->out[1] : NULL;
    if (x->rank < 2 || y->rank != x->rank || !y->data || (ind && !ind->data))
        return dl_kernel_fail(kc, DL_ERR_INTERNAL, "unexpected tensor shapes");
    int ns = x->rank - 2;
    pool_geom g;
    char err[200];
    const char *e = pool_geometry(kc->node, gk, ns, x->dims + 2, &g, err, sizeof err);
    if (e) return dl_kernel_fail(kc, DL_ERR_INVALID, "%s", e);
    int64_t IN, P, K;
    if (!dl_sp_prod(ns, g.in, &IN) || !dl_sp_prod(ns, g.out, &P) || !dl_sp_prod(ns, g.k, &K))
        return dl_kernel_fail(kc, DL_ERR_LIMIT, "spatial sizes are too large");
    bool ok = y->dims[0] == x->dims[0] && y->dims[1] == x->dims[1];
    for (int d = 0; d < ns; d++) ok = ok && y->dims[d + 2] == g.out[d];
    if (ind) ok = ok && ind->numel == y->numel;
    if (!ok) return dl_kernel_fail(kc, DL_ERR_SHAPE, "output shape does not match the pooling");
    if (y->numel == 0) return DL_OK;

    bool include_pad = dl_attr_int(kc->node, "count_include_pad", 0) != 0;
    double p = (double)dl_attr_int(kc->node, "p", 2);
    bool col_major = dl_attr_int(kc->node, "storage_order", 0) == 1;
    int64_t cm_stride[MAX_SPATIAL]; /* column-major spatial strides for Indices */
    for (int d = 0; d < ns; d++) cm_stride[d] = d == 0 ? 1 : cm_stride[d - 1] * g.in[d - 1];
    int64_t row_stride[MAX_SPATIAL];
    dl_strides(ns, g.in, row_stride);
    if (col_major)
        for (int d = 0; d < ns; d++) row_stride[d] = cm_stride[d];

    int64_t *taps = dl_malloc((size_t)(K ? K : 1) * MAX_SPATIAL * sizeof(int64_t));
    if (!taps) return dl_kernel_fail(kc, DL_ERR_NOMEM, "out of memory");
    for (int64_t kk = 0; kk < K; kk++) {
        int64_t r = kk;
        for (int d = ns - 1; d >= 0; d--) {
            taps[kk * MAX_SPATIAL + d] = r % g.k[d];
            r /= g.k[d];
        }
    }
    int64_t planes = x->dims[0] * x->dims[1];
    int64_t yi = 0;
    for (int64_t pl = 0; pl < planes; pl++) {
        int64_t opos[MAX_SPATIAL] = {0};
        for (int64_t op = 0; op < P; op++, yi++, dl_index_next(ns, g.out, opos)) {
            double acc = 0;
            int64_t cnt = 0, best = -1;
            for (int64_t kk = 0; kk < K; kk++) {
                const int64_t *t = taps + kk * MAX_SPATIAL;
                bool inside = true, in_pad = true;
                int64_t off = 0, ioff = 0;
                for (int d = 0; d < ns; d++) {
                    int64_t id = opos[d] * g.stride[d] - g.pb[d] + t[d] * g.dil[d];
                    if (id < 0 || id >= g.in[d]) inside = false;
                    if (id < -g.pb[d] || id >= g.in[d] + g.pe[d]) in_pad = false;
                    off = off * g.in[d] + id;
                    ioff += id * row_stride[d];
                }
                if (!inside) {
                    if (include_pad && in_pad) cnt++;
                    continue;
                }
                double v = dl_get_f64(x, pl * IN + off);
                cnt++;
                if (kind == POOL_MAX) {
                    if (best < 0 || v > acc) {
                        acc = v;
                        best = pl * IN + ioff;
                    }
                } else if (kind == POOL_AVG) {
                    acc += v;
                } else {
                    acc += pow(fabs(v), p);
                }
            }
            double out;
            if (kind == POOL_MAX)
                out = best < 0 ? 0.0 : acc;
            else if (kind == POOL_AVG)
                out = cnt ? acc / (double)cnt : 0.0;
            else
                out = pow(acc, 1.0 / p);
            dl_set_f64(y, yi, out);
            if (ind) dl_set_i64(ind, yi, best < 0 ? 0 : best);
        }
    }
    dl_free(taps);
    return DL_OK;
}

static dl_status maxpool_ref(dl_kernel *kc) {
    return pool_ref(kc, GEOM_POOL, POOL_MAX);
}
static dl_status avgpool_ref(dl_kernel *kc) {
    return pool_ref(kc, GEOM_POOL, POOL_AVG);
}
static dl_status lppool_ref(dl_kernel *kc) {
    return pool_ref(kc, GEOM_POOL, POOL_LP);
}
static dl_status gavg_ref(dl_kernel *kc) {
    return pool_ref(kc, GEOM_GLOBAL, POOL_AVG);
}
static dl_status gmax_ref(dl_kernel *kc) {
    return pool_ref(kc, GEOM_GLOBAL, POOL_MAX);
}
static dl_status glp_ref(dl_kernel *kc) {
    return pool_ref(kc, GEOM_GLOBAL, POOL_LP);
}

/* ---- MaxUnpool ---- */

static dl_status unpool_infer(dl_infer *ic) {
    DL_TRY(dl_infer_require_float(ic, 0));
    static const dl_dtype i64[] = {DL_I64, DL_DTYPE_UNDEFINED};
    DL_TRY(dl_infer_require_dtype(ic, 1, i64));
    const dl_type *x = ic->in[0], *ix = ic->in[1];
    if (x->rank >= 0 && ix->rank >= 0) {
        bool same = x->rank == ix->rank;
        for (int d = 0; same && d < x->rank; d++)
            if (x->dims[d] >= 0 && ix->dims[d] >= 0 && x->dims[d] != ix->dims[d]) same = false;
        if (!same) return dl_infer_fail(ic, DL_ERR_SHAPE, "X and I must have the same shape");
    }
    if (dl_has_in(ic, 2)) {
        DL_TRY(dl_infer_require_dtype(ic, 2, i64));
        int64_t shape[DL_MAX_RANK];
        int n;
        bool known;
        DL_TRY(dl_infer_const_ints(ic, 2, shape, DL_MAX_RANK, &n, &known));
        if (!known) {
            int rank = x->rank;
            if (ic->in[2]->rank == 1 && ic->in[2]->dims[0] >= 0) rank = (int)ic->in[2]->dims[0];
            if (rank > DL_MAX_RANK)
                return dl_infer_fail(ic, DL_ERR_UNSUPPORTED, "output rank %d is too large", rank);
            return dl_infer_set(ic, 0, x->dtype, rank, NULL);
        }
        if (x->rank >= 0 && n != x->rank)
            return dl_infer_fail(ic, DL_ERR_SHAPE, "output_shape has %d values for rank %d", n,
                                 x->rank);
        for (int d = 0; d < n; d++)
            if (shape[d] < 0)
                return dl_infer_fail(ic, DL_ERR_INVALID, "output_shape[%d] is negative", d);
        return dl_infer_set(ic, 0, x->dtype, n, shape);
    }
    return pool_infer_common(ic, GEOM_UNPOOL, NULL);
}

/* Indices address the default output shape [N, C, (in - 1) * stride + k - pads]; with an
 * explicit output_shape each index is moved to the same coordinates in the larger output. */
static dl_status unpool_ref(dl_kernel *kc) {
    const dl_tensor *x = kc->in[0], *ix = kc->in[1];
    dl_tensor *y = kc->out[0];
    if (!y->data || ix->numel != x->numel || x->rank < 3 || y->rank != x->rank)
        return dl_kernel_fail(kc, DL_ERR_SHAPE, "X and I must have the same shape");
    int r = x->rank;
    pool_geom g;
    char err[200];
    const char *e = pool_geometry(kc->node, GEOM_UNPOOL, r - 2, x->dims + 2, &g, err, sizeof err);
    if (e) return dl_kernel_fail(kc, DL_ERR_INVALID, "%s", e);
    int64_t ddims[DL_MAX_RANK], dnumel;
    ddims[0] = x->dims[0];
    ddims[1] = x->dims[1];
    for (int d = 2; d < r; d++) ddims[d] = g.out[d - 2];
    if (!dl_sp_prod(r, ddims, &dnumel))
        return dl_kernel_fail(kc, DL_ERR_LIMIT, "default output shape is too large");
    int64_t ys[DL_MAX_RANK];
    dl_strides(r, y->dims, ys);
    for (int64_t i = 0; i < x->numel; i++) {
        int64_t j = dl_get_i64(ix, i), rem = j, off = 0;
        if (j < 0 || j >= dnumel)
            return dl_kernel_fail(kc, DL_ERR_INVALID, "index %lld is out of range [0, %lld)",
                                  (long long)j, (long long)dnumel);
        for (int d = r - 1; d >= 0; d--) {
            int64_t c = rem % ddims[d];
            rem /= ddims[d];
            if (c >= y->dims[d])
                return dl_kernel_fail(kc, DL_ERR_INVALID, "index %lld falls outside output_shape",
                                      (long long)j);
            off += c * ys[d];
        }
        dl_set_f64(y, off, dl_get_f64(x, i));
    }
    return DL_OK;
}

/* ---- gradient rules (grad.h) ---- */

/* The windows are re-derived from the node's attributes by the internal backward ops
 * (grad-ops.c), so auto_pad and ceil_mode resolve against the actual shapes at run time. */

/* dX gets each dY at its window's first maximum (PyTorch's tie rule). The Indices output is
 * integer and has no gradient. */
static dl_status maxpool_grad(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy,
                              dl_value **dx) {
    if (!dy[0]) return dg_status(gc);
    dl_value *in[2] = {n->in[0], dy[0]};
    return dg_op_like(gc, DG_DOMAIN, "MaxPoolGrad", 2, in, n, NULL, 1, &dx[0]);
}

static dl_status gmax_grad(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy, dl_value **dx) {
    if (n->in[0]->type.rank == 2) { /* no spatial dims: the identity */
        dx[0] = dy[0];
        return dg_status(gc);
    }
    dl_value *in[2] = {n->in[0], dy[0]};
    return dg_op_like(gc, DG_DOMAIN, "MaxPoolGrad", 2, in, NULL, "global=1", 1, &dx[0]);
}

/* Each dY spread evenly over the taps its average counted. */
static dl_status avgpool_grad(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy,
                              dl_value **dx) {
    dl_value *in[2] = {dy[0], dg_shape(gc, n->in[0])};
    return dg_op_like(gc, DG_DOMAIN, "AveragePoolGrad", 2, in, n, NULL, 1, &dx[0]);
}

/* dX = dY / (spatial size), broadcast over space: elementwise ops the compiler fuses. */
static dl_status gavg_grad(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy, dl_value **dx) {
    dl_value *x = n->in[0];
    dl_dtype dt = x->type.dtype;
    int64_t count = 1;
    bool known = x->type.rank >= 2;
    for (int d = 2; known && d < x->type.rank; d++) {
        if (x->type.dims[d] < 0) known = false;
        count *= known ? x->type.dims[d] : 1;
    }
    dl_value *scale;
    if (known) {
        scale = dg_scalar(gc, 1.0 / (double)(count ? count : 1), dt);
    } else { /* Size(Y) / Size(X) at run time */
        char to[32];
        snprintf(to, sizeof to, "to=%d", (int)dl_dtype_to_onnx(dt));
        scale = dg_op2(gc, "Div", dg_op1(gc, "Cast", dg_op1(gc, "Size", n->out[0], NULL), to),
                       dg_op1(gc, "Cast", dg_op1(gc, "Size", x, NULL), to), NULL);
    }
    dx[0] = dg_expand_like(gc, dg_op2(gc, "Mul", dy[0], scale, NULL), x);
    return dg_status(gc);
}

const dl_op_def dl_ops_pool[] = {
    {.name = "MaxPool",
     .min_in = 1,
     .max_in = 1,
     .min_out = 1,
     .max_out = 2,
     .attrs = maxpool_attrs,
     .infer = maxpool_infer,
     .ref = maxpool_ref,
     .grad = maxpool_grad},
    {.name = "AveragePool",
     .min_in = 1,
     .max_in = 1,
     .min_out = 1,
     .max_out = 1,
     .attrs = avgpool_attrs,
     .infer = avgpool_infer,
     .ref = avgpool_ref,
     .grad = avgpool_grad},
    {.name = "LpPool",
     .min_in = 1,
     .max_in = 1,
     .min_out = 1,
     .max_out = 1,
     .attrs = lppool_attrs,
     .infer = lppool_infer,
     .ref = lppool_ref},
    {.name = "GlobalAveragePool",
     .min_in = 1,
     .max_in = 1,
     .min_out = 1,
     .max_out = 1,
     .infer = global_infer,
     .ref = gavg_ref,
     .grad = gavg_grad},
    {.name = "GlobalMaxPool",
     .min_in = 1,
     .max_in = 1,
     .min_out = 1,
     .max_out = 1,
     .infer = globalmax_infer,
     .ref = gmax_ref,
     .grad = gmax_grad},
    {.name = "GlobalLpPool",
     .min_in = 1,
     .max_in = 1,
     .min_out = 1,
     .max_out = 1,
     .attrs = globallp_attrs,
     .infer = globallp_infer,
     .ref = glp_ref},
    {.name = "MaxUnpool",
     .min_in = 2,
     .max_in = 3,
     .min_out = 1,
     .max_out = 1,
     .attrs = unpool_attrs,
     .infer = unpool_infer,
     .ref = unpool_ref},
    {.name = NULL},
};
