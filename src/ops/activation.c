/* activation.c — op family "activation" (rows of the op table): pointwise activations.
 *
 * Floating dtypes compute in double. Relu and PRelu also take signed integers (opset 14 / 9+),
 * computed exactly in int64; Shrink takes any numeric dtype. */
#include "op-impl.h"
#include "../kernels/rt/dlrt.h"
#include "../train/grad.h"

#include <math.h>

enum { K_F, K_S, K_U }; /* float, signed, unsigned compute paths */

static int kind_of(dl_dtype t) {
    if (dl_dtype_is_float(t)) return K_F;
    if (t == DL_BOOL || dl_dtype_is_signed(t)) return K_S;
    return K_U;
}

static const dl_dtype k_float_signed[] = {DL_F32, DL_F64, DL_F16, DL_BF16,           DL_I8,
                                          DL_I16, DL_I32, DL_I64, DL_DTYPE_UNDEFINED};
static const dl_dtype k_numeric[] = {
    DL_F32, DL_F64, DL_F16, DL_BF16,           DL_I8, DL_U8, DL_I16, DL_U16, DL_I32,
    DL_U32, DL_I64, DL_U64, DL_DTYPE_UNDEFINED};

/* A double stored into an integer tensor: truncation toward zero, saturating, NaN → 0. */
static void set_int_from_f64(dl_tensor *t, int64_t i, double v) {
    if (isnan(v))
        dl_set_i64(t, i, 0);
    else if (kind_of(t->dtype) == K_U && v >= 9223372036854775808.0)
        dl_set_i64(t, i, (int64_t)(v >= 18446744073709551616.0 ? UINT64_MAX : (uint64_t)v));
    else if (v >= 9223372036854775808.0)
        dl_set_i64(t, i, INT64_MAX);
    else if (v < -9223372036854775808.0)
        dl_set_i64(t, i, INT64_MIN);
    else
        dl_set_i64(t, i, (int64_t)v);
}

static double get_any_f64(const dl_tensor *t, int64_t i) {
    switch (kind_of(t->dtype)) {
    case K_F:
        return dl_get_f64(t, i);
    case K_S:
        return (double)dl_get_i64(t, i);
    default:
        return (double)(uint64_t)dl_get_i64(t, i);
    }
}

/* ---------------------------------------------------------------- the activations */

typedef enum act_op {
    A_RELU,
    A_LEAKY,
    A_ELU,
    A_SELU,
    A_CELU,
    A_SIGMOID,
    A_HARDSIGMOID,
    A_HARDSWISH,
    A_TANH,
    A_SOFTPLUS,
    A_SOFTSIGN,
    A_THRESHRELU,
    A_SHRINK,
    A_MISH,
    A_GELU,
    A_GELU_TANH,
} act_op;

typedef struct act_params {
    double alpha, beta, gamma;
} act_params;

static double softplus(double x) {
    return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x));
}

static double act_f(act_op op, const act_params *p, double x) {
    switch (op) {
    case A_RELU:
        return x > 0 ? x : (x == 0 || x < 0 ? 0.0 : x); /* NaN passes through */
    case A_LEAKY:
        return x < 0 ? p->alpha * x : x;
    case A_ELU:
        return x < 0 ? p->alpha * (exp(x) - 1.0) : x;
    case A_SELU:
        return x > 0 ? p->gamma * x : p->gamma * (p->alpha * exp(x) - p->alpha);
    case A_CELU:
        return fmax(0.0, x) + fmin(0.0, p->alpha * (exp(x / p->alpha) - 1.0));
    case A_SIGMOID:
        return x >= 0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x));
    case A_HARDSIGMOID:
        return fmax(0.0, fmin(1.0, p->alpha * x + p->beta));
    case A_HARDSWISH:
        return x * fmax(0.0, fmin(1.0, x / 6.0 + 0.5));
    case A_TANH:
        return tanh(x);
    case A_SOFTPLUS:
        return softplus(x);
    case A_SOFTSIGN:
        return x / (1.0 + fabs(x));
    case A_THRESHRELU:
        return x > p->alpha ? x : 0.0;
    case A_SHRINK:
        return x < -p->alpha ? x + p->beta : (x > p->alpha ? x - p->beta : 0.0);
    case A_MISH:
        return x * tanh(softplus(x));
    case A_GELU:
        return 0.5 * x * (1.0 + erf(x / sqrt(2.0)));
    case A_GELU_TANH: {
        double c = sqrt(2.0 / 3.14159265358979323846);
        return 0.5 * x * (1.0 + tanh(c * (x + 0.044715 * x * x * x)));
    }
    }
    return x;
}

static act_params act_read_params(act_op op, const dl_node *n) {
    act_params p = {0, 0, 0};
    switch (op) {
    case A_LEAKY:
        p.alpha = dl_attr_float(n, "alpha", 0.01f);
        break;
    case A_ELU:
    case A_CELU:
        p.alpha = dl_attr_float(n, "alpha", 1.0f);
        break;
    case A_SELU:
        p.alpha = dl_attr_float(n, "alpha", 1.67326319217681884765625f);
        p.gamma = dl_attr_float(n, "gamma", 1.05070102214813232421875f);
        break;
    case A_HARDSIGMOID:
        p.alpha = dl_attr_float(n, "alpha", 0.2f);
        p.beta = dl_attr_float(n, "beta", 0.5f);
        break;
    case A_THRESHRELU:
        p.alpha = dl_attr_float(n, "alpha", 1.0f);
        break;
    case A_SHRINK:
        p.alpha = dl_attr_float(n, "lambd", 0.5f);
        p.beta = dl_attr_float(n, "bias", 0.0f);
        break;
    default:
        break;
    }
    return p;
}

static dl_status act_run(dl_kernel *kc, act_op op) {
    const dl_tensor *x = kc->in[0];
    dl_tensor *o;
    DL_TRY(dl_kernel_out(kc, 0, &o));
    if (x->dtype != o->dtype || x->numel != o->numel)
        return dl_kernel_fail(kc, DL_ERR_INTERNAL, "output does not match the input");
    act_params p = act_read_params(op, kc->node);
    int k = kind_of(x->dtype);
    for (int64_t i = 0; i < x->numel; i++) {
        if (k == K_F) {
            dl_set_f64(o, i, act_f(op, &p, dl_get_f64(x, i)));
        } else if (op == A_RELU && k == K_S) {
            int64_t v = dl_get_i64(x, i);
            dl_set_i64(o, i, v > 0 ? v : 0);
        } else if (op == A_SHRINK) {
            set_int_from_f64(o, i, act_f(op, &p, get_any_f64(x, i)));
        } else {
            return dl_kernel_fail(kc, DL_ERR_UNSUPPORTED, "dtype %s not supported",
                                  dl_dtype_name(x->dtype));
        }
    }
    return DL_OK;
}

#define ACT_REF(NAME, OP)                                                                          \
    static dl_status ref_##NAME(dl_kernel *kc) {                                                   \
        return act_run(kc, OP);                                                                    \
    }
ACT_REF(relu, A_RELU)
ACT_REF(leaky, A_LEAKY)
ACT_REF(elu, A_ELU)
ACT_REF(selu, A_SELU)
ACT_REF(celu, A_CELU)
ACT_REF(sigmoid, A_SIGMOID)
ACT_REF(hardsigmoid, A_HARDSIGMOID)
ACT_REF(hardswish, A_HARDSWISH)
ACT_REF(tanh, A_TANH)
ACT_REF(softplus, A_SOFTPLUS)
ACT_REF(softsign, A_SOFTSIGN)
ACT_REF(threshrelu, A_THRESHRELU)
ACT_REF(shrink, A_SHRINK)
ACT_REF(mish, A_MISH)
#undef ACT_REF

static dl_status ref_gelu(dl_kernel *kc) {
    const char *ap = dl_attr_str(kc->node, "approximate", "none");
    return act_run(kc, strcmp(ap, "tanh") == 0 ? A_GELU_TANH : A_GELU);
}

/* ---------------------------------------------------------------- inference */

static dl_status infer_float(dl_infer *ic) {
    DL_TRY(dl_infer_require_float(ic, 0));
    return dl_infer_same(ic, 0, 0);
}

static dl_status infer_relu(dl_infer *ic) {
    DL_TRY(dl_infer_require_dtype(ic, 0, k_float_signed));
    return dl_infer_same(ic, 0, 0);
}

static dl_status infer_shrink(dl_infer *ic) {
    DL_TRY(dl_infer_require_dtype(ic, 0, k_numeric));
    return dl_infer_same(ic, 0, 0);
}

static dl_status infer_celu(dl_infer *ic) {
    if (dl_attr_float(ic->node, "alpha", 1.0f) == 0.0f)
        return dl_infer_fail(ic, DL_ERR_INVALID, "attribute alpha must not be 0");
    return infer_float(ic);
}

static dl_status infer_gelu(dl_infer *ic) {
    const char *ap = dl_attr_str(ic->node, "approximate", "none");
    if (strcmp(ap, "none") != 0 && strcmp(ap, "tanh") != 0)
        return dl_infer_fail(ic, DL_ERR_INVALID,
                             "attribute approximate must be \"none\" or \"tanh\", got \"%s\"", ap);
    return infer_float(ic);
}

/* PRelu: y = x < 0 ? slope * x : x, slope broadcast (unidirectionally) to x. */
static dl_status infer_prelu(dl_infer *ic) {
    static const int idx[2] = {0, 1};
    static const dl_dtype allowed[] = {
        DL_F32, DL_F64, DL_F16, DL_BF16,           DL_I8, DL_I16, DL_I32, DL_I64, DL_U8,
        DL_U16, DL_U32, DL_U64, DL_DTYPE_UNDEFINED};
    DL_TRY(dl_infer_require_dtype(ic, 0, allowed));
    DL_TRY(dl_infer_require_dtype(ic, 1, allowed));
    DL_TRY(dl_infer_same_dtype(ic, 2, idx));
    const dl_type *x = ic->in[0], *s = ic->in[1];
    if (x->rank >= 0 && s->rank >= 0) {
        if (s->rank > x->rank)
            return dl_infer_fail(ic, DL_ERR_SHAPE, "slope has a higher rank than X");
        for (int d = 0; d < s->rank; d++) {
            int64_t sd = s->dims[d], xd = x->dims[x->rank - s->rank + d];
            if (sd >= 0 && xd >= 0 && sd != 1 && sd != xd)
                return dl_infer_fail(ic, DL_ERR_SHAPE, "slope does not broadcast to X");
        }
    }
    return dl_infer_broadcast(ic, 0, 2, idx);
}

static dl_status ref_prelu(dl_kernel *kc) {
    const dl_tensor *x = kc->in[0], *s = kc->in[1];
    dl_tensor *o;
    DL_TRY(dl_kernel_out(kc, 0, &o));
    if (x->dtype != o->dtype || s->dtype != o->dtype)
        return dl_kernel_fail(kc, DL_ERR_TYPE, "X and slope must share the output dtype");
    int r = o->rank;
    int64_t sx[DL_MAX_RANK], ss[DL_MAX_RANK], idx[DL_MAX_RANK] = {0};
    const dl_tensor *ts[2] = {x, s};
    int64_t *st[2] = {sx, ss};
    for (int j = 0; j < 2; j++) {
        const dl_tensor *t = ts[j];
        if (t->rank > r) return dl_kernel_fail(kc, DL_ERR_SHAPE, "input rank exceeds output");
        int64_t m = 1;
        for (int d = r - 1; d >= 0; d--) {
            int td = d - (r - t->rank);
            int64_t n = td < 0 ? 1 : t->dims[td];
            if (n != 1 && n != o->dims[d])
                return dl_kernel_fail(kc, DL_ERR_SHAPE, "input does not broadcast to output");
            st[j][d] = n == 1 ? 0 : m;
            m *= n;
        }
    }
    int k = kind_of(o->dtype);
    for (int64_t i = 0; i < o->numel; i++) {
        int64_t ix = 0, is = 0;
        for (int d = 0; d < r; d++) {
            ix += idx[d] * sx[d];
            is += idx[d] * ss[d];
        }
        if (k == K_F) {
            double v = dl_get_f64(x, ix);
            dl_set_f64(o, i, v < 0 ? v * dl_get_f64(s, is) : v);
        } else if (k == K_S) {
            int64_t v = dl_get_i64(x, ix);
            dl_set_i64(o, i, v < 0 ? (int64_t)((uint64_t)v * (uint64_t)dl_get_i64(s, is)) : v);
        } else {
            dl_set_i64(o, i, dl_get_i64(x, ix)); /* unsigned: never negative */
        }
        dl_index_next(r, o->dims, idx);
    }
    return DL_OK;
}

/* ---------------------------------------------------------------- the rows */

static const dl_attr_spec alpha_attrs[] = {{"alpha", DL_ATTR_FLOAT}, {NULL, 0}};
static const dl_attr_spec selu_attrs[] = {
    {"alpha", DL_ATTR_FLOAT}, {"gamma", DL_ATTR_FLOAT}, {NULL, 0}};
static const dl_attr_spec hardsigmoid_attrs[] = {
    {"alpha", DL_ATTR_FLOAT}, {"beta", DL_ATTR_FLOAT}, {NULL, 0}};
static const dl_attr_spec shrink_attrs[] = {
    {"lambd", DL_ATTR_FLOAT}, {"bias", DL_ATTR_FLOAT}, {NULL, 0}};
static const dl_attr_spec gelu_attrs[] = {{"approximate", DL_ATTR_STRING}, {NULL, 0}};

/* ---- gradient rules (grad.h) ---- */

static dl_status grad_relu(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy, dl_value **dx) {
    dl_value *y = n->out[0];
    dl_value *pos = dg_op2(gc, "Greater", y, dg_scalar(gc, 0, y->type.dtype), NULL);
    dx[0] = dg_op3(gc, "Where", pos, dy[0], dg_scalar(gc, 0, y->type.dtype), NULL);
    return dg_status(gc);
}

/* Rule shorthands: scalar v of x's dtype, and one-line node builders. */
static dl_value *ak(dl_grad_ctx *gc, double v, const dl_value *x) {
    return dg_scalar(gc, v, x->type.dtype);
}
static dl_value *a1(dl_grad_ctx *gc, const char *op, dl_value *a) {
    return dg_op1(gc, op, a, NULL);
}
static dl_value *a2(dl_grad_ctx *gc, const char *op, dl_value *a, dl_value *b) {
    return dg_op2(gc, op, a, b, NULL);
}
/* Where(x > 0, pos, neg): the split most of these rules make (x == 0 takes the negative side,
 * as PyTorch's kernels do). */
static dl_value *where_pos(dl_grad_ctx *gc, dl_value *x, dl_value *pos, dl_value *neg) {
    return dg_op3(gc, "Where", a2(gc, "Greater", x, ak(gc, 0, x)), pos, neg, NULL);
}

static dl_status grad_leaky(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy, dl_value **dx) {
    dl_value *x = n->in[0];
    act_params p = act_read_params(A_LEAKY, n);
    dx[0] = where_pos(gc, x, dy[0], a2(gc, "Mul", dy[0], ak(gc, p.alpha, x)));
    return dg_status(gc);
}

/* PRelu: slope broadcasts to X; its gradient is summed back over the broadcast axes. */
static dl_status grad_prelu(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy, dl_value **dx) {
    dl_value *x = n->in[0], *slope = n->in[1], *zero = ak(gc, 0, x);
    if (dg_needs(gc, n, 0))
        dx[0] = dg_sum_to(gc, where_pos(gc, x, dy[0], a2(gc, "Mul", dy[0], slope)), x);
    if (dg_needs(gc, n, 1))
        dx[1] = dg_sum_to(gc, where_pos(gc, x, zero, a2(gc, "Mul", dy[0], x)), slope);
    return dg_status(gc);
}

/* Elu / Selu below zero: d/dx gamma*alpha*(e^x - 1) = y + gamma*alpha (gamma = 1 for Elu). */
static dl_status grad_elu(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy, dl_value **dx) {
    dl_value *x = n->in[0], *y = n->out[0];
    bool selu = strcmp(n->op->name, "Selu") == 0;
    act_params p = act_read_params(selu ? A_SELU : A_ELU, n);
    double gamma = selu ? p.gamma : 1.0;
    dl_value *pos = selu ? a2(gc, "Mul", dy[0], ak(gc, gamma, x)) : dy[0];
    dx[0] =
        where_pos(gc, x, pos, a2(gc, "Mul", dy[0], a2(gc, "Add", y, ak(gc, gamma * p.alpha, x))));
    return dg_status(gc);
}

/* Celu below zero: e^(x/alpha), whatever alpha's sign. */
static dl_status grad_celu(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy, dl_value **dx) {
    dl_value *x = n->in[0];
    act_params p = act_read_params(A_CELU, n);
    dl_value *e = a1(gc, "Exp", a2(gc, "Div", x, ak(gc, p.alpha, x)));
    dx[0] = where_pos(gc, x, dy[0], a2(gc, "Mul", dy[0], e));
    return dg_status(gc);
}

static dl_status grad_sigmoid(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy,
                              dl_value **dx) {
    dl_value *y = n->out[0];
    dl_value *d = a2(gc, "Mul", y, a2(gc, "Sub", ak(gc, 1, y), y));
    dx[0] = a2(gc, "Mul", dy[0], d);
    return dg_status(gc);
}

/* HardSigmoid: alpha where 0 < alpha*x + beta < 1, i.e. where 0 < y < 1 (PyTorch: open). */
static dl_status grad_hardsigmoid(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy,
                                  dl_value **dx) {
    dl_value *y = n->out[0];
    act_params p = act_read_params(A_HARDSIGMOID, n);
    dl_value *inside =
        a2(gc, "And", a2(gc, "Greater", y, ak(gc, 0, y)), a2(gc, "Less", y, ak(gc, 1, y)));
    dx[0] =
        dg_op3(gc, "Where", inside, a2(gc, "Mul", dy[0], ak(gc, p.alpha, y)), ak(gc, 0, y), NULL);
    return dg_status(gc);
}

/* HardSwish: 0 below -3, 1 above 3, x/3 + 1/2 between (PyTorch's split of the ends). */
static dl_status grad_hardswish(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy,
                                dl_value **dx) {
    dl_value *x = n->in[0];
    dl_value *mid = a2(gc, "Add", a2(gc, "Div", x, ak(gc, 3, x)), ak(gc, 0.5, x));
    dl_value *d = dg_op3(gc, "Where", a2(gc, "Greater", x, ak(gc, 3, x)), ak(gc, 1, x), mid, NULL);
    d = dg_op3(gc, "Where", a2(gc, "Less", x, ak(gc, -3, x)), ak(gc, 0, x), d, NULL);
    dx[0] = a2(gc, "Mul", dy[0], d);
    return dg_status(gc);
}

static dl_status grad_tanh(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy, dl_value **dx) {
    dl_value *y = n->out[0];
    dx[0] = a2(gc, "Mul", dy[0], a2(gc, "Sub", ak(gc, 1, y), a2(gc, "Mul", y, y)));
    return dg_status(gc);
}

static dl_status grad_softplus(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy,
                               dl_value **dx) {
    dx[0] = a2(gc, "Mul", dy[0], a1(gc, "Sigmoid", n->in[0]));
    return dg_status(gc);
}

/* Softsign: 1 / (1 + |x|)^2. */
static dl_status grad_softsign(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy,
                               dl_value **dx) {
    dl_value *x = n->in[0], *s = a2(gc, "Add", ak(gc, 1, x), a1(gc, "Abs", x));
    dx[0] = a2(gc, "Div", dy[0], a2(gc, "Mul", s, s));
    return dg_status(gc);
}

/* ThresholdedRelu passes dy where x > alpha; Shrink where |x| > lambd (both strict, where the
 * output is not the constant piece). */
static dl_status grad_threshrelu(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy,
                                 dl_value **dx) {
    dl_value *x = n->in[0];
    bool shrink = strcmp(n->op->name, "Shrink") == 0;
    act_params p = act_read_params(shrink ? A_SHRINK : A_THRESHRELU, n);
    dl_value *pass = a2(gc, "Greater", shrink ? a1(gc, "Abs", x) : x, ak(gc, p.alpha, x));
    dx[0] = dg_op3(gc, "Where", pass, dy[0], ak(gc, 0, x), NULL);
    return dg_status(gc);
}

/* Mish: with t = tanh(softplus(x)), t + x * sigmoid(x) * (1 - t^2). */
static dl_status grad_mish(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy, dl_value **dx) {
    dl_value *x = n->in[0], *t = a1(gc, "Tanh", a1(gc, "Softplus", x));
    dl_value *sech2 = a2(gc, "Sub", ak(gc, 1, x), a2(gc, "Mul", t, t));
    dl_value *d = a2(gc, "Add", t, a2(gc, "Mul", a2(gc, "Mul", x, a1(gc, "Sigmoid", x)), sech2));
    dx[0] = a2(gc, "Mul", dy[0], d);
    return dg_status(gc);
}

/* Gelu: Phi(x) + x phi(x) exactly; with approximate="tanh" (u = c (x + k x^3), t = tanh u)
 * (1 + t) / 2 + x (1 - t^2) c (1 + 3 k x^2) / 2. */
static dl_status grad_gelu(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy, dl_value **dx) {
    dl_value *x = n->in[0], *x2 = a2(gc, "Mul", x, x), *d;
    if (strcmp(dl_attr_str(n, "approximate", "none"), "tanh") == 0) {
        const double c = sqrt(2.0 / 3.14159265358979323846), k = 0.044715;
        dl_value *u =
            a2(gc, "Mul", a2(gc, "Add", x, a2(gc, "Mul", ak(gc, k, x), a2(gc, "Mul", x2, x))),
               ak(gc, c, x));
        dl_value *t = a1(gc, "Tanh", u);
        dl_value *half_1pt = a2(gc, "Mul", ak(gc, 0.5, x), a2(gc, "Add", ak(gc, 1, x), t));
        dl_value *du = a2(gc, "Add", ak(gc, 0.5 * c, x), a2(gc, "Mul", ak(gc, 1.5 * c * k, x), x2));
        dl_value *sech2 = a2(gc, "Sub", ak(gc, 1, x), a2(gc, "Mul", t, t));
        d = a2(gc, "Add", half_1pt, a2(gc, "Mul", a2(gc, "Mul", x, sech2), du));
    } else {
        dl_value *cdf = a2(gc, "Mul", ak(gc, 0.5, x),
                           a2(gc, "Add", ak(gc, 1, x),
                              a1(gc, "Erf", a2(gc, "Mul", x, ak(gc, 0.70710678118654752440, x)))));
        dl_value *pdf = a2(gc, "Mul", ak(gc, 0.39894228040143267794, x),
                           a1(gc, "Exp", a2(gc, "Mul", x2, ak(gc, -0.5, x))));
        d = a2(gc, "Add", cdf, a2(gc, "Mul", x, pdf));
    }
    dx[0] = a2(gc, "Mul", dy[0], d);
    return dg_status(gc);
}

#define ACT(NAME, ATTRS, INFER, REF, GRAD)                                                         \
    {                                                                                              \
        .name = NAME, .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1, .attrs = ATTRS,        \
        .infer = INFER, .ref = REF, .grad = GRAD                                                   \
    }

/* ---------------------------------------------------------------- as GEMM epilogues */

/* an activation without parameters */
#define EPI_PLAIN(FN, ACT)                                                                         \
    static int FN(const dl_node *n, float *a, float *b) {                                          \
        DL_UNUSED(n), DL_UNUSED(a), DL_UNUSED(b);                                                  \
        return ACT;                                                                                \
    }
EPI_PLAIN(epi_relu, DLRT_ACT_RELU)
EPI_PLAIN(epi_sigmoid, DLRT_ACT_SIGMOID)
EPI_PLAIN(epi_tanh, DLRT_ACT_TANH)
EPI_PLAIN(epi_hardswish, DLRT_ACT_HARD_SWISH)
#undef EPI_PLAIN
static int epi_leaky(const dl_node *n, float *a, float *b) {
    DL_UNUSED(b);
    *a = dl_attr_float(n, "alpha", 0.01f);
    return DLRT_ACT_LEAKY_RELU;
}
static int epi_hardsigmoid(const dl_node *n, float *a, float *b) {
    *a = dl_attr_float(n, "alpha", 0.2f);
    *b = dl_attr_float(n, "beta", 0.5f);
    return DLRT_ACT_HARD_SIGMOID;
}
/* the exact form (opset 20's default) and the tanh form */
static int epi_gelu(const dl_node *n, float *a, float *b) {
    const char *form = dl_attr_str(n, "approximate", "none");
    if (!strcmp(form, "tanh")) {
        *a = DLRT_GELU_TANH_A, *b = DLRT_GELU_TANH_B;
        return DLRT_ACT_GELU_TANH;
    }
    if (strcmp(form, "none") != 0) return DLRT_ACT_NONE;
    *a = 1.41421356f; /* the divisor: x (erf(x / a) + 1) / 2 */
    return DLRT_ACT_GELU;
}

#define ACT_EPI(NAME, ATTRS, INFER, REF, GRAD, EPI)                                                \
    {                                                                                              \
        .name = NAME, .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1, .attrs = ATTRS,        \
        .infer = INFER, .ref = REF, .grad = GRAD, .epilogue = EPI                                  \
    }

const dl_op_def dl_ops_activation[] = {
    ACT_EPI("Relu", NULL, infer_relu, ref_relu, grad_relu, epi_relu),
    ACT_EPI("LeakyRelu", alpha_attrs, infer_float, ref_leaky, grad_leaky, epi_leaky),
    {.name = "PRelu",
     .min_in = 2,
     .max_in = 2,
     .min_out = 1,
     .max_out = 1,
     .infer = infer_prelu,
     .ref = ref_prelu,
     .grad = grad_prelu},
    ACT("Elu", alpha_attrs, infer_float, ref_elu, grad_elu),
    ACT("Selu", selu_attrs, infer_float, ref_selu, grad_elu),
    ACT("Celu", alpha_attrs, infer_celu, ref_celu, grad_celu),
    ACT_EPI("Sigmoid", NULL, infer_float, ref_sigmoid, grad_sigmoid, epi_sigmoid),
    ACT_EPI("HardSigmoid", hardsigmoid_attrs, infer_float, ref_hardsigmoid, grad_hardsigmoid,
            epi_hardsigmoid),
    ACT_EPI("HardSwish", NULL, infer_float, ref_hardswish, grad_hardswish, epi_hardswish),
    ACT_EPI("Tanh", NULL, infer_float, ref_tanh, grad_tanh, epi_tanh),
    ACT("Softplus", NULL, infer_float, ref_softplus, grad_softplus),
    ACT("Softsign", NULL, infer_float, ref_softsign, grad_softsign),
    ACT("ThresholdedRelu", alpha_attrs, infer_float, ref_threshrelu, grad_threshrelu),
    ACT("Shrink", shrink_attrs, infer_shrink, ref_shrink, grad_threshrelu),
    ACT("Mish", NULL, infer_float, ref_mish, grad_mish),
    ACT_EPI("Gelu", gelu_attrs, infer_gelu, ref_gelu, grad_gelu, epi_gelu),
    {.name = NULL},
};
