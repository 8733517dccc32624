/* softmax.c — op family "softmax" (rows of the op table): Softmax, LogSoftmax, Hardmax, and
 * their gradient rules.
 *
 * Before opset 13 the input is coerced to 2-D [prod(dims[:axis]), prod(dims[axis:])] and the op
 * runs over the second dimension; from opset 13 it runs along the one axis. Both are expressed as
 * (outer, n, inner) with the op running over n. Softmax subtracts the maximum and accumulates in
 * double. */
#include "op-impl.h"
#include "../train/grad.h"

#include <math.h>

typedef enum smkind { SM_SOFTMAX, SM_LOGSOFTMAX, SM_HARDMAX } smkind;

static const dl_attr_spec softmax_attrs[] = {
    {"axis", DL_ATTR_INT},
    {NULL, DL_ATTR_UNDEFINED},
};

static int64_t default_axis(int opset) {
    return opset >= 13 ? -1 : 1;
}

/* Normalizes the axis: [-r, r) from opset 13; [-r, r] before (axis == r gives n == 1). */
static bool norm_axis(int64_t axis, int rank, int opset, int *out) {
    int hi = opset >= 13 ? rank - 1 : rank;
    if (axis < -rank || axis > hi) return false;
    *out = (int)(axis < 0 ? axis + rank : axis);
    return true;
}

static dl_status softmax_infer(dl_infer *ic) {
    const dl_type *x = ic->in[0];
    if (!dl_dtype_is_float(x->dtype))
        return dl_infer_fail(ic, DL_ERR_TYPE, "input must be a floating type, got %s",
                             dl_dtype_name(x->dtype));
    if (x->rank >= 0) {
        int64_t a = dl_attr_int(ic->node, "axis", default_axis(ic->opset));
        int axis;
        if (x->rank == 0 && ic->opset >= 13)
            return dl_infer_fail(ic, DL_ERR_SHAPE, "input must have rank >= 1");
        if (!norm_axis(a, x->rank, ic->opset, &axis))
            return dl_infer_fail(ic, DL_ERR_INVALID, "axis %lld out of range for rank %d",
                                 (long long)a, x->rank);
    }
    return dl_infer_same(ic, 0, 0);
}

static dl_status softmax_ref(dl_kernel *kc, smkind k) {
    const dl_tensor *x = kc->in[0];
    dl_tensor *y = kc->out[0];
    int rank = x->rank;
    int64_t a = dl_attr_int(kc->node, "axis", default_axis(kc->opset));
    int axis;
    if ((rank == 0 && kc->opset >= 13) || !norm_axis(a, rank, kc->opset, &axis))
        return dl_kernel_fail(kc, DL_ERR_INVALID, "axis %lld out of range for rank %d",
                              (long long)a, rank);
    if (!y->data) DL_TRY(dl_kernel_alloc_out(kc, 0, x->dtype, rank, x->dims));
    int64_t outer = 1, n = 1, inner = 1;
    for (int d = 0; d < rank; d++) {
        if (d < axis)
            outer *= x->dims[d];
        else if (kc->opset < 13 || d == axis)
            n *= x->dims[d];
        else
            inner *= x->dims[d];
    }
    if (x->numel == 0) return DL_OK;
    for (int64_t o = 0; o < outer; o++) {
        for (int64_t in = 0; in < inner; in++) {
            int64_t base = o * n * inner + in;
            /* maximum (first index of it for Hardmax); NaN propagates */
            double m = -INFINITY;
            int64_t arg = 0;
            bool has_nan = false, seen = false;
            for (int64_t j = 0; j < n; j++) {
                double v = dl_get_f64(x, base + j * inner);
                if (isnan(v)) {
                    has_nan = true;
                } else if (!seen || v > m) {
                    m = v;
                    arg = j;
                    seen = true;
                }
            }
            if (k == SM_HARDMAX) {
                for (int64_t j = 0; j < n; j++) dl_set_f64(y, base + j * inner, j == arg ? 1 : 0);
                continue;
            }
            if (has_nan) {
                for (int64_t j = 0; j < n; j++) dl_set_f64(y, base + j * inner, NAN);
                continue;
            }
            double s = 0;
            if (m == INFINITY) {
                /* +inf entries share the mass; everything else is 0 */
                for (int64_t j = 0; j < n; j++)
                    if (dl_get_f64(x, base + j * inner) == INFINITY) s += 1;
                for (int64_t j = 0; j < n; j++) {
                    double v = dl_get_f64(x, base + j * inner);
                    double p = v == INFINITY ? 1.0 / s : 0.0;
                    dl_set_f64(y, base + j * inner, k == SM_LOGSOFTMAX ? log(p) : p);
                }
                continue;
            }
            if (isinf(m)) m = 0; /* all -inf: exp(-inf) = 0, sum 0 → NaN like the spec math */
            for (int64_t j = 0; j < n; j++) s += exp(dl_get_f64(x, base + j * inner) - m);
            double ls = log(s);
            for (int64_t j = 0; j < n; j++) {
                double v = dl_get_f64(x, base + j * inner) - m;
                dl_set_f64(y, base + j * inner, k == SM_LOGSOFTMAX ? v - ls : exp(v) / s);
            }
        }
    }
    return DL_OK;
}

static dl_status softmax_k(dl_kernel *kc) {
    return softmax_ref(kc, SM_SOFTMAX);
}
static dl_status logsoftmax_k(dl_kernel *kc) {
    return softmax_ref(kc, SM_LOGSOFTMAX);
}
static dl_status hardmax_k(dl_kernel *kc) {
    return softmax_ref(kc, SM_HARDMAX);
}

/* ---- gradient rules (grad.h) ---- */

/* With s = sum over the axis: Softmax dx = y * (dy - s(dy * y)); LogSoftmax dx = dy - exp(y) *
 * s(dy). Before opset 13 dy and y are flattened to 2-D around the axis (the op's own coercion),
 * handled along axis 1 and reshaped back. */
static dl_status softmax_grad_k(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy,
                                dl_value **dx, smkind k) {
    dl_value *x = n->in[0], *g = dy[0], *y = n->out[0];
    int rank = x->type.rank, axis;
    int64_t a = dl_attr_int(n, "axis", default_axis(n->opset));
    if (rank < 0 || !norm_axis(a, rank, n->opset, &axis))
        return dg_refuse(gc, n, "the input rank is unknown");
    if (n->opset < 13) {
        char fa[32];
        snprintf(fa, sizeof fa, "axis=%d", axis);
        g = dg_op1(gc, "Flatten", g, fa);
        y = dg_op1(gc, "Flatten", y, fa);
        axis = 1;
    }
    int64_t ax = axis;
    dl_value *axes = dg_ints(gc, 1, &ax), *r;
    if (k == SM_SOFTMAX) {
        dl_value *gy = dg_op2(gc, "Mul", g, y, NULL);
        dl_value *s = dg_op2(gc, "ReduceSum", gy, axes, "keepdims=1");
        r = dg_op2(gc, "Sub", gy, dg_op2(gc, "Mul", y, s, NULL), NULL);
    } else {
        dl_value *s = dg_op2(gc, "ReduceSum", g, axes, "keepdims=1");
        r = dg_op2(gc, "Sub", g, dg_op2(gc, "Mul", dg_op1(gc, "Exp", y, NULL), s, NULL), NULL);
    }
    dx[0] = dg_reshape_like(gc, r, x);
    return dg_status(gc);
}

static dl_status softmax_grad(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy,
                              dl_value **dx) {
    return softmax_grad_k(gc, n, dy, dx, SM_SOFTMAX);
}
static dl_status logsoftmax_grad(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy,
                                 dl_value **dx) {
    return softmax_grad_k(gc, n, dy, dx, SM_LOGSOFTMAX);
}
/* Hardmax is piecewise constant: zero gradient (nothing set). */
static dl_status hardmax_grad(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy,
                              dl_value **dx) {
    (void)n, (void)dy, (void)dx;
    return dg_status(gc);
}

/* clang-format off */
const dl_op_def dl_ops_softmax[] = {
    {.name = "Softmax", .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1,
     .attrs = softmax_attrs, .infer = softmax_infer, .ref = softmax_k,
     .grad = softmax_grad},
    {.name = "LogSoftmax", .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1,
     .attrs = softmax_attrs, .infer = softmax_infer, .ref = logsoftmax_k,
     .grad = logsoftmax_grad},
    {.name = "Hardmax", .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1,
     .attrs = softmax_attrs, .infer = softmax_infer, .ref = hardmax_k,
     .grad = hardmax_grad},
    {.name = NULL},
};
/* clang-format on */
