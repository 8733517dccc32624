/* reduce.c — op family "reduce" (rows of the op table): ReduceSum/Mean/Max/Min/Prod/L1/L2/
 * LogSum/LogSumExp/SumSquare, ArgMax/ArgMin, CumSum, and the gradient rules of all but the
 * arg-reductions.
 *
 * Reductions accumulate in double for floating types (log-sum-exp subtracts the maximum) and in
 * wrapping 64-bit integers for integer types. */
#include "op-impl.h"
#include "../train/grad.h"

#include <math.h>

/* ---------------------------------------------------------------------------------------------
 * shared helpers
 * ------------------------------------------------------------------------------------------- */

static bool is_unsigned_int(dl_dtype t) {
    return dl_dtype_is_int(t) && !dl_dtype_is_signed(t);
}

/* Numeric (float or integer) dtype; bool only when allow_bool. */
static bool is_numeric(dl_dtype t, bool allow_bool) {
    return dl_dtype_is_float(t) || dl_dtype_is_int(t) || (allow_bool && t == DL_BOOL);
}

/* ---------------------------------------------------------------------------------------------
 * Reduce*
 * ------------------------------------------------------------------------------------------- */

typedef enum rkind {
    R_SUM,
    R_MEAN,
    R_MAX,
    R_MIN,
    R_PROD,
    R_L1,
    R_L2,
    R_LOGSUM,
    R_LOGSUMEXP,
    R_SUMSQ
} rkind;

/* ReduceSum takes axes as an input from opset 13, the others from opset 18. */
static bool axes_from_input(rkind k, int opset) {
    return k == R_SUM ? opset >= 13 : opset >= 18;
}

static const dl_attr_spec reduce_attrs[] = {
    {"axes", DL_ATTR_INTS},
    {"keepdims", DL_ATTR_INT},
    {"noop_with_empty_axes", DL_ATTR_INT},
    {NULL, DL_ATTR_UNDEFINED},
};

/* Fills reduced[0..rank) from the axes list; n == 0 means all axes unless noop. */
static dl_status reduce_mask_infer(dl_infer *ic, int rank, const int64_t *axes, int n, bool noop,
                                   bool *reduced) {
    for (int d = 0; d < rank; d++) reduced[d] = (n == 0 && !noop);
    for (int i = 0; i < n; i++) {
        int a;
        DL_TRY(dl_infer_axis(ic, axes[i], rank, &a));
        if (reduced[a]) return dl_infer_fail(ic, DL_ERR_INVALID, "axis %d repeated in axes", a);
        reduced[a] = true;
    }
    return DL_OK;
}

static dl_status reduce_infer(dl_infer *ic, rkind k) {
    const dl_type *x = ic->in[0];
    bool allow_bool = (k == R_MAX || k == R_MIN);
    if (!is_numeric(x->dtype, allow_bool))
        return dl_infer_fail(ic, DL_ERR_TYPE, "unsupported input dtype %s",
                             dl_dtype_name(x->dtype));
    bool from_input = axes_from_input(k, ic->opset);
    int64_t axes[DL_MAX_RANK];
    int nax = 0;
    bool known = true;
    if (!from_input) {
        if (ic->n_in > 1)
            return dl_infer_fail(ic, DL_ERR_INVALID,
                                 "takes 1 input at opset %d (axes is an attribute)", ic->opset);
        const int64_t *a = NULL;
        int n = dl_attr_ints(ic->node, "axes", &a);
        if (n > DL_MAX_RANK) return dl_infer_fail(ic, DL_ERR_INVALID, "too many axes (%d)", n);
        for (int i = 0; i < n; i++) axes[i] = a[i];
        nax = n < 0 ? 0 : n;
    } else {
        if (dl_node_attr(ic->node, "axes"))
            return dl_infer_fail(ic, DL_ERR_INVALID,
                                 "axes is an input at opset %d, not an attribute", ic->opset);
        if (dl_has_in(ic, 1)) {
            const dl_type *at = ic->in[1];
            if (at->dtype != DL_I64 && at->dtype != DL_I32)
                return dl_infer_fail(ic, DL_ERR_TYPE, "axes must be int64, got %s",
                                     dl_dtype_name(at->dtype));
            if (at->rank > 1)
                return dl_infer_fail(ic, DL_ERR_SHAPE, "axes must be 1-D, got rank %d", at->rank);
            DL_TRY(dl_infer_const_ints(ic, 1, axes, DL_MAX_RANK, &nax, &known));
        }
    }
    bool noop = from_input && dl_attr_int(ic->node, "noop_with_empty_axes", 0) != 0;
    bool keep = dl_attr_int(ic->node, "keepdims", 1) != 0;
    ic->out[0].dtype = x->dtype;
    if (x->rank < 0) return DL_OK;
    int64_t dims[DL_MAX_RANK];
    if (!known) {
        if (!keep) return DL_OK; /* rank depends on the axes value */
        for (int d = 0; d < x->rank; d++) dims[d] = x->dims[d] == 1 ? 1 : dl_infer_fresh_dim(ic);
        return dl_infer_set(ic, 0, x->dtype, x->rank, dims);
    }
    bool reduced[DL_MAX_RANK];
    DL_TRY(reduce_mask_infer(ic, x->rank, axes, nax, noop, reduced));
    int r = 0;
    for (int d = 0; d < x->rank; d++) {
        if (!reduced[d])
            dims[r++] = x->dims[d];
        else if (keep)
            dims[r++] = 1;
    }
    return dl_infer_set(ic, 0, x->dtype, r, dims);
}

static int64_t wrap_add(int64_t a, int64_t b) {
    return (int64_t)((uint64_t)a + (uint64_t)b);
}
static int64_t wrap_mul(int64_t a, int64_t b) {
    return (int64_t)((uint64_t)a * (uint64_t)b);
}
static int64_t iabs64(int64_t a) {
    return a < 0 ? (int64_t)(0 - (uint64_t)a) : a;
}

static dl_status reduce_ref(dl_kernel *kc, rkind k) {
    const dl_tensor *x = kc->in[0];
    int rank = x->rank;
    int64_t axes[DL_MAX_RANK];
    int nax = 0;
    bool noop = false;
    if (!axes_from_input(k, kc->opset)) {
        const int64_t *a = NULL;
        int n = dl_attr_ints(kc->node, "axes", &a);
        if (n > DL_MAX_RANK) return dl_kernel_fail(kc, DL_ERR_INVALID, "too many axes");
        for (int i = 0; i < n; i++) axes[i] = a[i];
        nax = n < 0 ? 0 : n;
    } else {
        noop = dl_attr_int(kc->node, "noop_with_empty_axes", 0) != 0;
        const dl_tensor *at = kc->n_in > 1 ? kc->in[1] : NULL;
        if (at) {
            if (at->numel > DL_MAX_RANK)
                return dl_kernel_fail(kc, DL_ERR_INVALID, "too many axes (%lld)",
                                      (long long)at->numel);
            nax = (int)at->numel;
            for (int i = 0; i < nax; i++) axes[i] = dl_get_i64(at, i);
        }
    }
    bool keep = dl_attr_int(kc->node, "keepdims", 1) != 0;
    bool reduced[DL_MAX_RANK];
    for (int d = 0; d < rank; d++) reduced[d] = (nax == 0 && !noop);
    for (int i = 0; i < nax; i++) {
        int64_t a = axes[i];
        if (a < -rank || a >= rank)
            return dl_kernel_fail(kc, DL_ERR_INVALID, "axis %lld out of range for rank %d",
                                  (long long)a, rank);
        if (a < 0) a += rank;
        if (reduced[a])
            return dl_kernel_fail(kc, DL_ERR_INVALID, "axis %lld repeated", (long long)a);
        reduced[a] = true;
    }
    int64_t odims[DL_MAX_RANK], kdims[DL_MAX_RANK], kstr[DL_MAX_RANK], ostr[DL_MAX_RANK];
    int orank = 0;
    int64_t count = 1; /* elements per output */
    for (int d = 0; d < rank; d++) {
        kdims[d] = reduced[d] ? 1 : x->dims[d];
        if (reduced[d]) count *= x->dims[d];
        if (!reduced[d])
            odims[orank++] = x->dims[d];
        else if (keep)
            odims[orank++] = 1;
    }
    DL_TRY(dl_kernel_out_as(kc, 0, x->dtype, orank, odims));
    dl_tensor *y = kc->out[0];
    int64_t ny = y->numel;
    if (ny == 0) return DL_OK;
    dl_strides(rank, kdims, kstr);
    for (int d = 0; d < rank; d++) ostr[d] = reduced[d] ? 0 : kstr[d];

    bool int_path =
        !dl_dtype_is_float(x->dtype) && (k == R_SUM || k == R_MEAN || k == R_MAX || k == R_MIN ||
                                         k == R_PROD || k == R_L1 || k == R_SUMSQ);
    bool uns = is_unsigned_int(x->dtype);
    size_t nbytes;
    DL_TRY(dl_mul_size(kc->ctx, (size_t)ny, sizeof(double) + sizeof(int64_t), &nbytes,
                       "reduce accumulators"));
    double *acc = dl_malloc((size_t)ny * sizeof(double));
    int64_t *iacc = dl_malloc((size_t)ny * sizeof(int64_t));
    if (!acc || !iacc) {
        dl_free(acc);
        dl_free(iacc);
        return dl_kernel_fail(kc, DL_ERR_NOMEM, "out of memory");
    }
    /* initial values */
    for (int64_t o = 0; o < ny; o++) {
        iacc[o] = 0;
        acc[o] = 0;
        switch (k) {
        case R_PROD:
            iacc[o] = 1;
            acc[o] = 1;
            break;
        case R_MAX:
        case R_LOGSUMEXP:
            acc[o] = -INFINITY;
            iacc[o] = uns ? 0 : INT64_MIN;
            break;
        case R_MIN:
            acc[o] = INFINITY;
            iacc[o] = uns ? (int64_t)UINT64_MAX : INT64_MAX;
            break;
        default:
            break;
        }
    }
    int64_t idx[DL_MAX_RANK] = {0};
    /* pass 1 (and only pass, except log-sum-exp which first finds the maximum) */
    if (x->numel > 0) {
        int64_t i = 0;
        do {
            int64_t o = 0;
            for (int d = 0; d < rank; d++) o += idx[d] * ostr[d];
            if (int_path) {
                int64_t v = dl_get_i64(x, i);
                switch (k) {
                case R_SUM:
                case R_MEAN:
                    iacc[o] = wrap_add(iacc[o], v);
                    break;
                case R_PROD:
                    iacc[o] = wrap_mul(iacc[o], v);
                    break;
                case R_L1:
                    iacc[o] = wrap_add(iacc[o], iabs64(v));
                    break;
                case R_SUMSQ:
                    iacc[o] = wrap_add(iacc[o], wrap_mul(v, v));
                    break;
                case R_MAX:
                    if (uns ? (uint64_t)v > (uint64_t)iacc[o] : v > iacc[o]) iacc[o] = v;
                    break;
                case R_MIN:
                    if (uns ? (uint64_t)v < (uint64_t)iacc[o] : v < iacc[o]) iacc[o] = v;
                    break;
                default:
                    break;
                }
            } else {
                double v = dl_get_f64(x, i);
                switch (k) {
                case R_SUM:
                case R_MEAN:
                case R_LOGSUM:
                    acc[o] += v;
                    break;
                case R_PROD:
                    acc[o] *= v;
                    break;
                case R_L1:
                    acc[o] += fabs(v);
                    break;
                case R_L2:
                case R_SUMSQ:
                    acc[o] += v * v;
                    break;
                case R_MAX:
                case R_LOGSUMEXP:
                    if (isnan(v) || v > acc[o]) acc[o] = isnan(acc[o]) ? acc[o] : v;
                    break;
                case R_MIN:
                    if (isnan(v) || v < acc[o]) acc[o] = isnan(acc[o]) ? acc[o] : v;
                    break;
                }
            }
            i++;
        } while (dl_index_next(rank, x->dims, idx));
    }
    if (k == R_LOGSUMEXP) {
        /* acc holds the max; iacc is reused as a flag-free second accumulator via sums[] */
        double *sums = dl_calloc((size_t)ny, sizeof(double));
        if (!sums) {
            dl_free(acc);
            dl_free(iacc);
            return dl_kernel_fail(kc, DL_ERR_NOMEM, "out of memory");
        }
        if (x->numel > 0) {
            for (int d = 0; d < rank; d++) idx[d] = 0;
            int64_t i = 0;
            do {
                int64_t o = 0;
                for (int d = 0; d < rank; d++) o += idx[d] * ostr[d];
                if (isfinite(acc[o])) sums[o] += exp(dl_get_f64(x, i) - acc[o]);
                i++;
            } while (dl_index_next(rank, x->dims, idx));
        }
        for (int64_t o = 0; o < ny; o++)
            if (isfinite(acc[o])) acc[o] = acc[o] + log(sums[o]);
        dl_free(sums);
    }
    for (int64_t o = 0; o < ny; o++) {
        if (int_path) {
            int64_t v = iacc[o];
            if (k == R_MEAN) {
                if (count == 0)
                    v = 0;
                else if (uns)
                    v = (int64_t)((uint64_t)v / (uint64_t)count);
                else
                    v = v / count;
            }
            dl_set_i64(y, o, v);
            continue;
        }
        double v = acc[o];
        switch (k) {
        case R_MEAN:
            v = v / (double)count;
            break;
        case R_L2:
            v = sqrt(v);
            break;
        case R_LOGSUM:
            v = log(v);
            break;
        default:
            break;
        }
        dl_set_f64(y, o, v);
    }
    dl_free(acc);
    dl_free(iacc);
    return DL_OK;
}

#define REDUCE_FNS(fn, kind)                                                                       \
    static dl_status fn##_infer(dl_infer *ic) {                                                    \
        return reduce_infer(ic, kind);                                                             \
    }                                                                                              \
    static dl_status fn##_ref(dl_kernel *kc) {                                                     \
        return reduce_ref(kc, kind);                                                               \
    }

REDUCE_FNS(rsum, R_SUM)
REDUCE_FNS(rmean, R_MEAN)
REDUCE_FNS(rmax, R_MAX)
REDUCE_FNS(rmin, R_MIN)
REDUCE_FNS(rprod, R_PROD)
REDUCE_FNS(rl1, R_L1)
REDUCE_FNS(rl2, R_L2)
REDUCE_FNS(rlogsum, R_LOGSUM)
REDUCE_FNS(rlogsumexp, R_LOGSUMEXP)
REDUCE_FNS(rsumsq, R_SUMSQ)

/* ---------------------------------------------------------------------------------------------
 * ArgMax / ArgMin
 * ------------------------------------------------------------------------------------------- */

static const dl_attr_spec arg_attrs[] = {
    {"axis", DL_ATTR_INT},
    {"keepdims", DL_ATTR_INT},
    {"select_last_index", DL_ATTR_INT},
    {NULL, DL_ATTR_UNDEFINED},
};

static dl_status arg_infer(dl_infer *ic) {
    const dl_type *x = ic->in[0];
    if (!is_numeric(x->dtype, true))
        return dl_infer_fail(ic, DL_ERR_TYPE, "unsupported input dtype %s",
                             dl_dtype_name(x->dtype));
    ic->out[0].dtype = DL_I64;
    if (x->rank < 0) return DL_OK;
    int axis;
    DL_TRY(dl_infer_axis(ic, dl_attr_int(ic->node, "axis", 0), x->rank, &axis));
    if (x->dims[axis] == 0)
        return dl_infer_fail(ic, DL_ERR_SHAPE, "cannot take %s over an empty axis %d",
                             ic->node->op->name, axis);
    bool keep = dl_attr_int(ic->node, "keepdims", 1) != 0;
    int64_t dims[DL_MAX_RANK];
    int r = 0;
    for (int d = 0; d < x->rank; d++) {
        if (d != axis)
            dims[r++] = x->dims[d];
        else if (keep)
            dims[r++] = 1;
    }
    return dl_infer_set(ic, 0, DL_I64, r, dims);
}

static dl_status arg_ref(dl_kernel *kc, bool is_max) {
    const dl_tensor *x = kc->in[0];
    int rank = x->rank;
    int64_t a = dl_attr_int(kc->node, "axis", 0);
    if (a < -rank || a >= rank)
        return dl_kernel_fail(kc, DL_ERR_INVALID, "axis %lld out of range", (long long)a);
    int axis = (int)(a < 0 ? a + rank : a);
    bool keep = dl_attr_int(kc->node, "keepdims", 1) != 0;
    bool last = dl_attr_int(kc->node, "select_last_index", 0) != 0;
    int64_t n = x->dims[axis];
    if (n == 0) return dl_kernel_fail(kc, DL_ERR_SHAPE, "empty axis %d", axis);
    int64_t dims[DL_MAX_RANK];
    int r = 0;
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < rank; d++) {
        if (d < axis) outer *= x->dims[d];
        if (d > axis) inner *= x->dims[d];
        if (d != axis)
            dims[r++] = x->dims[d];
        else if (keep)
            dims[r++] = 1;
    }
    DL_TRY(dl_kernel_out_as(kc, 0, DL_I64, r, dims));
    dl_tensor *y = kc->out[0];
    for (int64_t o = 0; o < outer; o++) {
        for (int64_t in = 0; in < inner; in++) {
            int64_t base = o * n * inner + in;
            int64_t best = 0;
            for (int64_t j = 1; j < n; j++) {
                int c = dl_cmp_elems(x, base + j * inner, x, base + best * inner);
                if (!is_max) c = -c;
                if (c > 0 || (c == 0 && last)) best = j;
            }
            dl_set_i64(y, o * inner + in, best);
        }
    }
    return DL_OK;
}

static dl_status argmax_ref(dl_kernel *kc) {
    return arg_ref(kc, true);
}
static dl_status argmin_ref(dl_kernel *kc) {
    return arg_ref(kc, false);
}

/* ---------------------------------------------------------------------------------------------
 * CumSum
 * ------------------------------------------------------------------------------------------- */

static const dl_attr_spec cumsum_attrs[] = {
    {"exclusive", DL_ATTR_INT},
    {"reverse", DL_ATTR_INT},
    {NULL, DL_ATTR_UNDEFINED},
};

static dl_status cumsum_infer(dl_infer *ic) {
    const dl_type *x = ic->in[0], *at = ic->in[1];
    if (!is_numeric(x->dtype, false))
        return dl_infer_fail(ic, DL_ERR_TYPE, "unsupported input dtype %s",
                             dl_dtype_name(x->dtype));
    if (at->dtype != DL_I32 && at->dtype != DL_I64)
        return dl_infer_fail(ic, DL_ERR_TYPE, "axis must be int32 or int64, got %s",
                             dl_dtype_name(at->dtype));
    if (at->rank > 1)
        return dl_infer_fail(ic, DL_ERR_SHAPE, "axis must be a scalar, got rank %d", at->rank);
    if (at->rank == 1 && at->dims[0] >= 0 && at->dims[0] != 1)
        return dl_infer_fail(ic, DL_ERR_SHAPE, "axis must hold one value");
    int64_t v[1];
    int n = 0;
    bool known = false;
    DL_TRY(dl_infer_const_ints(ic, 1, v, 1, &n, &known));
    if (known && x->rank >= 0) {
        if (n != 1) return dl_infer_fail(ic, DL_ERR_SHAPE, "axis must hold one value");
        if (x->rank == 0) return dl_infer_fail(ic, DL_ERR_SHAPE, "input must have rank >= 1");
        int axis;
        DL_TRY(dl_infer_axis(ic, v[0], x->rank, &axis));
    }
    return dl_infer_same(ic, 0, 0);
}

static dl_status cumsum_ref(dl_kernel *kc) {
    const dl_tensor *x = kc->in[0], *at = kc->in[1];
    int rank = x->rank;
    if (at->numel != 1) return dl_kernel_fail(kc, DL_ERR_SHAPE, "axis must hold one value");
    int64_t a = dl_get_i64(at, 0);
    if (rank == 0 || a < -rank || a >= rank)
        return dl_kernel_fail(kc, DL_ERR_INVALID, "axis %lld out of range for rank %d",
                              (long long)a, rank);
    int axis = (int)(a < 0 ? a + rank : a);
    bool excl = dl_attr_int(kc->node, "exclusive", 0) != 0;
    bool rev = dl_attr_int(kc->node, "reverse", 0) != 0;
    DL_TRY(dl_kernel_out_as(kc, 0, x->dtype, rank, x->dims));
    dl_tensor *y = kc->out[0];
    int64_t outer = 1, inner = 1, n = x->dims[axis];
    for (int d = 0; d < axis; d++) outer *= x->dims[d];
    for (int d = axis + 1; d < rank; d++) inner *= x->dims[d];
    bool fl = dl_dtype_is_float(x->dtype);
    for (int64_t o = 0; o < outer; o++) {
        for (int64_t in = 0; in < inner; in++) {
            double s = 0;
            int64_t si = 0;
            for (int64_t t = 0; t < n; t++) {
                int64_t j = rev ? n - 1 - t : t;
                int64_t off = (o * n + j) * inner + in;
                if (fl) {
                    double v = dl_get_f64(x, off);
                    if (!excl) s += v;
                    dl_set_f64(y, off, s);
                    if (excl) s += v;
                } else {
                    int64_t v = dl_get_i64(x, off);
                    if (!excl) si = wrap_add(si, v);
                    dl_set_i64(y, off, si);
                    if (excl) si = wrap_add(si, v);
                }
            }
        }
    }
    return DL_OK;
}

/* clang-format off */
/* ---- gradient rules (grad.h) ---- */

/* Which axes node n reduces (from its attribute or its constant axes input). */
static bool grad_reduced_axes(dl_grad_ctx *gc, const dl_node *n, rkind k, bool *reduced) {
    int rank = n->in[0]->type.rank;
    int64_t axes[DL_MAX_RANK];
    int nax = 0;
    bool noop = false;
    if (!axes_from_input(k, n->opset)) {
        const int64_t *a = NULL;
        int c = dl_attr_ints(n, "axes", &a);
        for (int i = 0; i < c && i < DL_MAX_RANK; i++) axes[nax++] = a[i];
    } else {
        noop = dl_attr_int(n, "noop_with_empty_axes", 0) != 0;
        if (n->n_in > 1 && n->in[1]) {
            const dl_tensor *t = n->in[1]->constant;
            if (!t || t->numel > DL_MAX_RANK) {
                dg_refuse(gc, n, "axes must be a constant");
                return false;
            }
            for (int64_t i = 0; i < t->numel; i++) axes[nax++] = (int64_t)dl_get_f64(t, i);
        }
    }
    for (int d = 0; d < rank; d++) reduced[d] = nax == 0 && !noop;
    for (int i = 0; i < nax; i++) reduced[axes[i] < 0 ? axes[i] + rank : axes[i]] = true;
    return true;
}

/* The reduced axes as an int64 list value. */
static dl_value *grad_axes_list(dl_grad_ctx *gc, int rank, const bool *reduced) {
    int64_t ax[DL_MAX_RANK];
    int c = 0;
    for (int d = 0; d < rank; d++)
        if (reduced[d]) ax[c++] = d;
    return dg_ints(gc, c, ax);
}

/* v (shaped like the node's output) with the reduced axes kept as size 1 (keepdims=0 undone), so
 * it broadcasts against the input. */
static dl_value *grad_keep(dl_grad_ctx *gc, const dl_node *n, dl_value *v, const bool *reduced) {
    int rank = n->in[0]->type.rank;
    bool any = false;
    for (int d = 0; d < rank; d++) any = any || reduced[d];
    if (dl_attr_int(n, "keepdims", 1) || !any) return v;
    return dg_op2(gc, "Unsqueeze", v, grad_axes_list(gc, rank, reduced), NULL);
}

/* dy brought back to the input's shape: the reduced axes restored (keepdims=0) and expanded. */
static dl_value *grad_reduce_expand(dl_grad_ctx *gc, const dl_node *n, dl_value *dy,
                                    const bool *reduced) {
    return dg_expand_like(gc, grad_keep(gc, n, dy, reduced), n->in[0]);
}

static dl_status rsum_grad(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy, dl_value **dx) {
    bool reduced[DL_MAX_RANK];
    if (grad_reduced_axes(gc, n, R_SUM, reduced))
        dx[0] = grad_reduce_expand(gc, n, dy[0], reduced);
    return dg_status(gc);
}

/* The mean's gradient is the sum's divided by the reduced count (static when the reduced dims
 * are known, else Size(y)/Size(x) at run time). */
static dl_status rmean_grad(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy, dl_value **dx) {
    bool reduced[DL_MAX_RANK];
    if (!grad_reduced_axes(gc, n, R_MEAN, reduced)) return dg_status(gc);
    dl_value *x = n->in[0];
    dl_dtype dt = x->type.dtype;
    int64_t count = 1;
    bool known = true;
    for (int d = 0; d < x->type.rank; d++)
        if (reduced[d]) {
            if (x->type.dims[d] < 0) known = false;
            else count *= x->type.dims[d];
        }
    dl_value *scale;
    if (known) {
        scale = dg_scalar(gc, 1.0 / (double)(count ? count : 1), dt);
    } else {
        char to[32];
        snprintf(to, sizeof to, "to=%d", (int)dl_dtype_to_onnx(dt));
        scale = dg_op2(gc, "Div", dg_op1(gc, "Cast", dg_op1(gc, "Size", n->out[0], NULL), to),
                       dg_op1(gc, "Cast", dg_op1(gc, "Size", x, NULL), to), NULL);
    }
    dx[0] = grad_reduce_expand(gc, n, dg_op2(gc, "Mul", dy[0], scale, NULL), reduced);
    return dg_status(gc);
}

/* The other reductions: dx = dy' * f(x, y') with dy' and y' (the output) kept at size 1 on the
 * reduced axes so they broadcast against x:
 *   Max/Min      dy' * [x == y'] / count(x == y'): ties share the gradient evenly (PyTorch's
 *                amax/amin; its max(dim) gives it all to one index instead)
 *   Prod         dy' * y' / x (inputs without zeros: a zero input gives inf/NaN)
 *   L1           dy' * sign(x)             L2         dy' * x / y' (0 where y' = 0, like PyTorch)
 *   LogSum       dy' / exp(y')             LogSumExp  dy' * exp(x - y')
 *   SumSquare    dy' * 2x */
static dl_status rother_grad(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy,
                             dl_value **dx, rkind k) {
    bool reduced[DL_MAX_RANK];
    if (n->in[0]->type.rank < 0) return dg_refuse(gc, n, "the input rank is unknown");
    if (!grad_reduced_axes(gc, n, k, reduced)) return dg_status(gc);
    dl_value *x = n->in[0], *g = grad_keep(gc, n, dy[0], reduced);
    dl_value *y = grad_keep(gc, n, n->out[0], reduced), *f = NULL;
    dl_dtype dt = x->type.dtype;
    char to[32];
    snprintf(to, sizeof to, "to=%d", (int)dl_dtype_to_onnx(dt));
    switch (k) {
    case R_MAX:
    case R_MIN: {
        dl_value *hit = dg_op1(gc, "Cast", dg_op2(gc, "Equal", x, y, NULL), to);
        dl_value *count = dg_op2(gc, "ReduceSum", hit,
                                 grad_axes_list(gc, x->type.rank, reduced), "keepdims=1");
        dx[0] = dg_op2(gc, "Mul", hit, dg_op2(gc, "Div", g, count, NULL), NULL);
        return dg_status(gc);
    }
    case R_PROD:
        f = dg_op2(gc, "Div", y, x, NULL);
        break;
    case R_L1:
        f = dg_op1(gc, "Sign", x, NULL);
        break;
    case R_L2: {
        dl_value *zero = dg_scalar(gc, 0, dt);
        f = dg_op3(gc, "Where", dg_op2(gc, "Equal", y, zero, NULL), zero,
                   dg_op2(gc, "Div", x, y, NULL), NULL);
        break;
    }
    case R_LOGSUM: {
        dl_value *sum = dg_op1(gc, "Exp", n->out[0], NULL);
        dx[0] = grad_reduce_expand(gc, n, dg_op2(gc, "Div", dy[0], sum, NULL), reduced);
        return dg_status(gc);
    }
    case R_LOGSUMEXP:
        f = dg_op1(gc, "Exp", dg_op2(gc, "Sub", x, y, NULL), NULL);
        break;
    case R_SUMSQ:
        f = dg_op2(gc, "Mul", x, dg_scalar(gc, 2, dt), NULL);
        break;
    default:
        return dg_status(gc);
    }
    dx[0] = dg_op2(gc, "Mul", g, f, NULL);
    return dg_status(gc);
}

#define ROTHER_GRAD(fn, kind)                                                                      \
    static dl_status fn##_grad(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy,             \
                               dl_value **dx) {                                                    \
        return rother_grad(gc, n, dy, dx, kind);                                                   \
    }

ROTHER_GRAD(rmax, R_MAX)
ROTHER_GRAD(rmin, R_MIN)
ROTHER_GRAD(rprod, R_PROD)
ROTHER_GRAD(rl1, R_L1)
ROTHER_GRAD(rl2, R_L2)
ROTHER_GRAD(rlogsum, R_LOGSUM)
ROTHER_GRAD(rlogsumexp, R_LOGSUMEXP)
ROTHER_GRAD(rsumsq, R_SUMSQ)

/* CumSum's adjoint is the cumulative sum running the other way (same exclusive flag). */
static dl_status cumsum_grad(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy,
                             dl_value **dx) {
    char a[32];
    snprintf(a, sizeof a, "reverse=%d", dl_attr_int(n, "reverse", 0) == 0);
    dl_value *in[2] = {dy[0], n->in[1]};
    dg_op_like(gc, NULL, "CumSum", 2, in, n, a, 1, &dx[0]);
    return dg_status(gc);
}

const dl_op_def dl_ops_reduce[] = {
    {.name = "ReduceSum", .min_in = 1, .max_in = 2, .min_out = 1, .max_out = 1,
     .attrs = reduce_attrs, .infer = rsum_infer, .ref = rsum_ref, .grad = rsum_grad},
    {.name = "ReduceMean", .min_in = 1, .max_in = 2, .min_out = 1, .max_out = 1,
     .attrs = reduce_attrs, .infer = rmean_infer, .ref = rmean_ref, .grad = rmean_grad},
    {.name = "ReduceMax", .min_in = 1, .max_in = 2, .min_out = 1, .max_out = 1,
     .attrs = reduce_attrs, .infer = rmax_infer, .ref = rmax_ref,
     .grad = rmax_grad},
    {.name = "ReduceMin", .min_in = 1, .max_in = 2, .min_out = 1, .max_out = 1,
     .attrs = reduce_attrs, .infer = rmin_infer, .ref = rmin_ref,
     .grad = rmin_grad},
    {.name = "ReduceProd", .min_in = 1, .max_in = 2, .min_out = 1, .max_out = 1,
     .attrs = reduce_attrs, .infer = rprod_infer, .ref = rprod_ref,
     .grad = rprod_grad},
    {.name = "ReduceL1", .min_in = 1, .max_in = 2, .min_out = 1, .max_out = 1,
     .attrs = reduce_attrs, .infer = rl1_infer, .ref = rl1_ref,
     .grad = rl1_grad},
    {.name = "ReduceL2", .min_in = 1, .max_in = 2, .min_out = 1, .max_out = 1,
     .attrs = reduce_attrs, .infer = rl2_infer, .ref = rl2_ref,
     .grad = rl2_grad},
    {.name = "ReduceLogSum", .min_in = 1, .max_in = 2, .min_out = 1, .max_out = 1,
     .attrs = reduce_attrs, .infer = rlogsum_infer, .ref = rlogsum_ref,
     .grad = rlogsum_grad},
    {.name = "ReduceLogSumExp", .min_in = 1, .max_in = 2, .min_out = 1, .max_out = 1,
     .attrs = reduce_attrs, .infer = rlogsumexp_infer, .ref = rlogsumexp_ref,
     .grad = rlogsumexp_grad},
    {.name = "ReduceSumSquare", .min_in = 1, .max_in = 2, .min_out = 1, .max_out = 1,
     .attrs = reduce_attrs, .infer = rsumsq_infer, .ref = rsumsq_ref,
     .grad = rsumsq_grad},
    {.name = "ArgMax", .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1,
     .attrs = arg_attrs, .infer = arg_infer, .ref = argmax_ref},
    {.name = "ArgMin", .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1,
     .attrs = arg_attrs, .infer = arg_infer, .ref = argmin_ref},
    {.name = "CumSum", .min_in = 2, .max_in = 2, .min_out = 1, .max_out = 1,
     .attrs = cumsum_attrs, .infer = cumsum_infer, .ref = cumsum_ref,
     .grad = cumsum_grad},
    {.name = NULL},
};
/* clang-format on */
