/* scalar-ops.c — the table mapping each ONNX elementwise op to its scalar form in the loop IR,
 * and dl_ew_supported. Each entry reproduces the reference kernel's result for the dtypes its
 * check accepts (src/ops/elementwise.c, activation.c, logic.c, cast.c):
 *  - float32 +, -, *, /, sqrt, min/max, comparisons, rounding are exact in float (the reference's
 *    double result rounds to the same float); activations with cancellation (Elu, Selu, Celu,
 *    Gelu, HardSigmoid, HardSwish, Softsign, Shrink), Pow and Mod(fmod=0) compute in double like
 *    the reference; single libm calls use the float function (within an ulp or two), but for
 *    Erf: the runtime's polynomial dlrt_erf (vecmath.h, at most 6 ulp, 3.6e-7 absolute), which
 *    vectorizes without a vector math library and ran a [1024, 1024] GELU 0.495 -> 0.42 ms;
 *  - integers wrap; division and remainder by zero give 0; float → int saturates, NaN → 0;
 *  - float16 / bfloat16 are not supported. */
#include "loop-ir.h"

#include <math.h>

typedef struct sop_args {
    dl_lfunc *f;
    const dl_node *n;
    dl_lexpr *const *a; /* a[i]: node input i (NULL when omitted) */
    int n_args;
    dl_dtype t;              /* the output dtype */
    const char *fn32, *fn64; /* the row's libm names (plain unary float ops) */
} sop_args;

typedef bool (*sop_check)(const dl_node *n);
typedef dl_lexpr *(*sop_build)(const sop_args *s);

typedef struct sop {
    const char *name;
    sop_check check;
    sop_build build;
    const char *fn32, *fn64; /* libm names for plain unary float ops */
    unsigned not_operands;   /* bit i: input i is read by inference only (dl_ew_operand) */
} sop;

/* ---------------------------------------------------------------- dtype checks */

static bool is_f(dl_dtype t) {
    return t == DL_F32 || t == DL_F64;
}
static bool is_sint(dl_dtype t) {
    return t == DL_I8 || t == DL_I16 || t == DL_I32 || t == DL_I64;
}
static bool is_uint(dl_dtype t) {
    return t == DL_U8 || t == DL_U16 || t == DL_U32 || t == DL_U64;
}
static bool is_num(dl_dtype t) {
    return is_f(t) || is_sint(t) || is_uint(t);
}
static bool is_any(dl_dtype t) {
    return is_num(t) || t == DL_BOOL;
}

static dl_dtype in_t(const dl_node *n, int i) {
    return i < n->n_in && n->in[i] ? n->in[i]->type.dtype : DL_DTYPE_UNDEFINED;
}
static dl_dtype out_t(const dl_node *n) {
    return n->n_out >= 1 && n->out[0] ? n->out[0]->type.dtype : DL_DTYPE_UNDEFINED;
}

/* All present inputs and the output have dtype t, with at least `need` inputs present. */
static bool all_same(const dl_node *n, dl_dtype t, int need) {
    if (out_t(n) != t || n->n_in < need || n->n_in > DL_EW_MAX_ARGS) return false;
    for (int i = 0; i < n->n_in; i++) {
        if (i < need && !n->in[i]) return false;
        if (n->in[i] && in_t(n, i) != t) return false;
    }
    return true;
}

static bool chk_float(const dl_node *n) {
    return is_f(out_t(n)) && all_same(n, out_t(n), n->n_in);
}
static bool chk_num(const dl_node *n) {
    return is_num(out_t(n)) && all_same(n, out_t(n), n->n_in);
}
static bool chk_signed(const dl_node *n) {
    return (is_f(out_t(n)) || is_sint(out_t(n))) && all_same(n, out_t(n), n->n_in);
}
static bool chk_int(const dl_node *n) {
    return (is_sint(out_t(n)) || is_uint(out_t(n))) && all_same(n, out_t(n), n->n_in);
}
static bool chk_uint(const dl_node *n) {
    return is_uint(out_t(n)) && all_same(n, out_t(n), n->n_in);
}
static bool chk_bool(const dl_node *n) {
    return all_same(n, DL_BOOL, n->n_in);
}
static bool chk_identity(const dl_node *n) {
    return is_any(out_t(n)) && all_same(n, out_t(n), 1);
}
/* Expand: the data broadcast to the output's shape, which inference took from the shape input
 * (a constant, or Shape() of a value the plan knows); that input is no operand of the scalar
 * form (dl_ew_operand), so a group reads only the data. */
static bool chk_expand(const dl_node *n) {
    return n->n_in == 2 && n->in[0] && n->in[1] && is_any(out_t(n)) && in_t(n, 0) == out_t(n) &&
           n->in[0]->type.rank >= 0 && n->out[0]->type.rank >= n->in[0]->type.rank;
}
static bool chk_mod(const dl_node *n) {
    int64_t m = dl_attr_int(n, "fmod", 0);
    return (m == 0 || m == 1) && chk_num(n);
}
static bool chk_bitshift(const dl_node *n) {
    const char *d = dl_attr_str(n, "direction", "");
    return (strcmp(d, "LEFT") == 0 || strcmp(d, "RIGHT") == 0) && chk_uint(n);
}
static bool chk_pow(const dl_node *n) {
    return n->n_in == 2 && is_num(out_t(n)) && in_t(n, 0) == out_t(n) && is_num(in_t(n, 1));
}
static bool chk_clip(const dl_node *n) {
    if (!is_num(out_t(n)) || in_t(n, 0) != out_t(n) || n->n_in > 3) return false;
    if (n->opset < 11) return is_f(out_t(n)) && n->n_in == 1;
    return all_same(n, out_t(n), 1);
}
static bool chk_gelu(const dl_node *n) {
    const char *ap = dl_attr_str(n, "approximate", "none");
    return (strcmp(ap, "none") == 0 || strcmp(ap, "tanh") == 0) && chk_float(n);
}
static bool chk_celu(const dl_node *n) {
    return dl_attr_float(n, "alpha", 1.0f) != 0.0f && chk_float(n);
}
static bool chk_compare(const dl_node *n) {
    return n->n_in == 2 && out_t(n) == DL_BOOL && is_num(in_t(n, 0)) && in_t(n, 1) == in_t(n, 0);
}
static bool chk_equal(const dl_node *n) {
    return n->n_in == 2 && out_t(n) == DL_BOOL && is_any(in_t(n, 0)) && in_t(n, 1) == in_t(n, 0);
}
static bool chk_isx(const dl_node *n) {
    return n->n_in == 1 && out_t(n) == DL_BOOL && is_f(in_t(n, 0));
}
static bool chk_where(const dl_node *n) {
    return n->n_in == 3 && in_t(n, 0) == DL_BOOL && is_any(out_t(n)) && in_t(n, 1) == out_t(n) &&
           in_t(n, 2) == out_t(n);
}
static bool chk_cast(const dl_node *n) {
    return n->n_in >= 1 && is_any(in_t(n, 0)) && is_any(out_t(n)) &&
           (n->n_in == 1 || (n->n_in == 2 && in_t(n, 1) == out_t(n)));
}

/* ---------------------------------------------------------------- expression shorthands */

static dl_lexpr *cnum(const sop_args *s, dl_dtype t, double v) {
    return is_f(t) ? dl_le_float(s->f, t, v) : dl_le_int(s->f, t, (int64_t)v);
}
static dl_lexpr *bin(const sop_args *s, dl_lop op, dl_lexpr *a, dl_lexpr *b) {
    return dl_le_bin(s->f, op, a, b);
}
static dl_lexpr *sel(const sop_args *s, dl_lexpr *c, dl_lexpr *a, dl_lexpr *b) {
    return dl_le_select(s->f, c, a, b);
}
static dl_lexpr *cast(const sop_args *s, dl_dtype t, dl_lexpr *a) {
    return dl_le_cast(s->f, t, a);
}
static dl_lexpr *f64(const sop_args *s, dl_lexpr *a) {
    return dl_le_cast(s->f, DL_F64, a);
}
static dl_lexpr *call(const sop_args *s, dl_dtype t, const char *fn, int n, dl_lexpr *a,
                      dl_lexpr *b, dl_lexpr *c) {
    dl_lexpr *args[3] = {a, b, c};
    return dl_le_call(s->f, t, fn, n, args);
}
/* A double computation rounded to the output dtype. */
static dl_lexpr *dcall(const sop_args *s, const char *fn, int n, dl_lexpr *b, dl_lexpr *c) {
    return cast(s, s->t, call(s, DL_F64, fn, n, f64(s, s->a[0]), b, c));
}
static dl_lexpr *dattr(const sop_args *s, const char *name, float def) {
    return dl_le_float(s->f, DL_F64, dl_attr_float(s->n, name, def));
}
static dl_lexpr *tattr(const sop_args *s, const char *name, float def) {
    return dl_le_float(s->f, s->t, dl_attr_float(s->n, name, def));
}

/* ---------------------------------------------------------------- arithmetic */

static dl_lexpr *b_arith(const sop_args *s, dl_lop fop, dl_lop iop) {
    return bin(s, is_f(s->t) ? fop : iop, s->a[0], s->a[1]);
}
static dl_lexpr *b_add(const sop_args *s) {
    return b_arith(s, DL_LOP_ADD, DL_LOP_WADD);
}
static dl_lexpr *b_sub(const sop_args *s) {
    return b_arith(s, DL_LOP_SUB, DL_LOP_WSUB);
}
static dl_lexpr *b_mul(const sop_args *s) {
    return b_arith(s, DL_LOP_MUL, DL_LOP_WMUL);
}

/* An int64 / uint64 helper call on both operands, converted back to the output dtype. */
static dl_lexpr *int_helper(const sop_args *s, const char *sfn, const char *ufn) {
    dl_dtype w = is_uint(s->t) ? DL_U64 : DL_I64;
    return cast(
        s, s->t,
        call(s, w, is_uint(s->t) ? ufn : sfn, 2, cast(s, w, s->a[0]), cast(s, w, s->a[1]), NULL));
}

static dl_lexpr *b_div(const sop_args *s) {
    if (is_f(s->t)) return bin(s, DL_LOP_DIV, s->a[0], s->a[1]);
    return int_helper(s, "dlg_divs", "dlg_divu");
}

static dl_lexpr *b_mod(const sop_args *s) {
    bool fm = dl_attr_int(s->n, "fmod", 0) != 0;
    if (is_f(s->t)) {
        if (fm) return call(s, s->t, s->t == DL_F32 ? "fmodf" : "fmod", 2, s->a[0], s->a[1], NULL);
        return cast(s, s->t,
                    call(s, DL_F64, "dlg_pmod", 2, f64(s, s->a[0]), f64(s, s->a[1]), NULL));
    }
    return int_helper(s, fm ? "dlg_fmods" : "dlg_pmods", "dlg_modu");
}

/* A float Pow by the constant 2 or 3 (LayerNorm's variance, tanh-GELU's cube) is a product
 * computed in double: x*x is exact there, so rounding it gives pow's result bit for bit; x*x*x
 * is within a double ulp or two of pow before the rounding to float. A loop of products
 * vectorizes where a pow call does not. */
static int pow_small_exponent(const sop_args *s) {
    const dl_value *e = s->n->n_in > 1 ? s->n->in[1] : NULL;
    if (!e || !e->constant || dl_tensor_numel(e->constant) != 1) return 0;
    double v = dl_get_f64(e->constant, 0);
    return v == 2.0 ? 2 : v == 3.0 ? 3 : 0;
}

static dl_lexpr *b_pow(const sop_args *s) {
    dl_lexpr *a = s->a[0], *b = s->a[1];
    int small = is_f(s->t) ? pow_small_exponent(s) : 0;
    if (small) {
        dl_lexpr *x = f64(s, a), *p = bin(s, DL_LOP_MUL, x, x);
        if (small == 3) p = bin(s, DL_LOP_MUL, p, f64(s, a));
        return cast(s, s->t, p);
    }
    if (is_f(s->t)) return cast(s, s->t, call(s, DL_F64, "pow", 2, f64(s, a), f64(s, b), NULL));
    if (is_f(b->type)) {
        dl_lexpr *p = call(s, DL_F64, "pow", 2, f64(s, a), f64(s, b), NULL);
        return cast(s, s->t,
                    is_uint(s->t) ? call(s, DL_U64, "dlg_f2u", 1, p, NULL, NULL)
                                  : call(s, DL_I64, "dlg_f2i", 1, p, NULL, NULL));
    }
    dl_lexpr *args[4] = {cast(s, DL_U64, a), cast(s, DL_I64, b),
                         dl_le_int(s->f, DL_I32, is_uint(b->type)),
                         dl_le_int(s->f, DL_I32, is_sint(s->t))};
    return cast(s, s->t, dl_le_call(s->f, DL_U64, "dlg_ipow", 4, args));
}

static dl_lexpr *b_bitshift(const sop_args *s) {
    bool left = strcmp(dl_attr_str(s->n, "direction", ""), "LEFT") == 0;
    dl_lexpr *a = cast(s, DL_U64, s->a[0]), *b = cast(s, DL_U64, s->a[1]);
    dl_lexpr *sh = bin(s, left ? DL_LOP_SHL : DL_LOP_SHR, a, b);
    dl_lexpr *big = bin(s, DL_LOP_GE, b, dl_le_int(s->f, DL_U64, 64));
    return cast(s, s->t, sel(s, big, dl_le_int(s->f, DL_U64, 0), sh));
}

static dl_lexpr *b_bitand(const sop_args *s) {
    return bin(s, DL_LOP_BAND, s->a[0], s->a[1]);
}
static dl_lexpr *b_bitor(const sop_args *s) {
    return bin(s, DL_LOP_BOR, s->a[0], s->a[1]);
}
static dl_lexpr *b_bitxor(const sop_args *s) {
    return bin(s, DL_LOP_BXOR, s->a[0], s->a[1]);
}
static dl_lexpr *b_bitnot(const sop_args *s) {
    return dl_le_un(s->f, DL_LOP_BNOT, s->a[0]);
}

/* ---------------------------------------------------------------- unary */

static dl_lexpr *b_neg(const sop_args *s) {
    return dl_le_un(s->f, is_f(s->t) ? DL_LOP_NEG : DL_LOP_WNEG, s->a[0]);
}

static dl_lexpr *b_abs(const sop_args *s) {
    dl_lexpr *x = s->a[0];
    if (is_f(s->t)) return call(s, s->t, s->t == DL_F32 ? "fabsf" : "fabs", 1, x, NULL, NULL);
    if (is_uint(s->t)) return x;
    return sel(s, bin(s, DL_LOP_LT, x, cnum(s, s->t, 0)), dl_le_un(s->f, DL_LOP_WNEG, x), x);
}

static dl_lexpr *b_sign(const sop_args *s) {
    dl_lexpr *x = s->a[0];
    if (is_f(s->t)) return dcall(s, "dlg_sign", 1, NULL, NULL);
    dl_lexpr *zero = cnum(s, s->t, 0), *one = cnum(s, s->t, 1);
    if (is_uint(s->t)) return sel(s, bin(s, DL_LOP_GT, x, zero), one, zero);
    return sel(s, bin(s, DL_LOP_GT, x, zero), one,
               sel(s, bin(s, DL_LOP_LT, x, zero), cnum(s, s->t, -1), zero));
}

static dl_lexpr *b_recip(const sop_args *s) {
    return bin(s, DL_LOP_DIV, cnum(s, s->t, 1), s->a[0]);
}

static dl_lexpr *b_identity(const sop_args *s) {
    return s->a[0];
}

/* ---------------------------------------------------------------- variadic */

static dl_lexpr *fold(const sop_args *s, int kind) { /* 0 sum/mean, 1 min, 2 max */
    dl_lexpr *acc = s->a[0];
    for (int i = 1; i < s->n_args; i++) {
        dl_lexpr *v = s->a[i];
        if (kind == 0)
            acc = bin(s, is_f(s->t) ? DL_LOP_ADD : DL_LOP_WADD, acc, v);
        else if (is_f(s->t))
            acc = call(s, s->t,
                       kind == 1 ? (s->t == DL_F32 ? "dlg_minf" : "dlg_min")
                                 : (s->t == DL_F32 ? "dlg_maxf" : "dlg_max"),
                       2, acc, v, NULL);
        else
            acc = sel(s, bin(s, kind == 1 ? DL_LOP_LT : DL_LOP_GT, v, acc), v, acc);
    }
    return acc;
}
static dl_lexpr *b_sum(const sop_args *s) {
    return fold(s, 0);
}
static dl_lexpr *b_min(const sop_args *s) {
    return fold(s, 1);
}
static dl_lexpr *b_max(const sop_args *s) {
    return fold(s, 2);
}
static dl_lexpr *b_mean(const sop_args *s) {
    dl_lexpr *acc = fold(s, 0);
    if (is_f(s->t)) return bin(s, DL_LOP_DIV, acc, cnum(s, s->t, s->n_args));
    dl_dtype w = is_uint(s->t) ? DL_U64 : DL_I64;
    return cast(s, s->t, bin(s, DL_LOP_DIV, cast(s, w, acc), dl_le_int(s->f, w, s->n_args)));
}

static dl_lexpr *b_clip(const sop_args *s) {
    dl_lexpr *x = s->a[0], *lo = NULL, *hi = NULL;
    if (s->n->opset < 11) {
        if (dl_node_attr(s->n, "min")) lo = tattr(s, "min", 0);
        if (dl_node_attr(s->n, "max")) hi = tattr(s, "max", 0);
    } else {
        lo = s->n_args > 1 ? s->a[1] : NULL;
        hi = s->n_args > 2 ? s->a[2] : NULL;
    }
    if (lo) x = sel(s, bin(s, DL_LOP_LT, x, lo), lo, x);
    if (hi) x = sel(s, bin(s, DL_LOP_GT, x, hi), hi, x);
    return x;
}

/* ---------------------------------------------------------------- activations */

static dl_lexpr *b_relu(const sop_args *s) {
    dl_lexpr *x = s->a[0], *zero = cnum(s, s->t, 0);
    if (is_f(s->t)) return sel(s, bin(s, DL_LOP_LE, x, zero), zero, x); /* NaN passes, -0 → 0 */
    return sel(s, bin(s, DL_LOP_GT, x, zero), x, zero);
}
static dl_lexpr *b_leaky(const sop_args *s) {
    dl_lexpr *x = s->a[0];
    return sel(s, bin(s, DL_LOP_LT, x, cnum(s, s->t, 0)),
               bin(s, DL_LOP_MUL, tattr(s, "alpha", 0.01f), x), x);
}
static dl_lexpr *b_prelu(const sop_args *s) {
    dl_lexpr *x = s->a[0], *sl = s->a[1];
    if (is_uint(s->t)) return x;
    dl_lop mul = is_f(s->t) ? DL_LOP_MUL : DL_LOP_WMUL;
    return sel(s, bin(s, DL_LOP_LT, x, cnum(s, s->t, 0)), bin(s, mul, x, sl), x);
}
static dl_lexpr *b_threshrelu(const sop_args *s) {
    dl_lexpr *x = s->a[0];
    return sel(s, bin(s, DL_LOP_GT, x, tattr(s, "alpha", 1.0f)), x, cnum(s, s->t, 0));
}
static dl_lexpr *b_elu(const sop_args *s) {
    return dcall(s, "dlg_elu", 2, dattr(s, "alpha", 1.0f), NULL);
}
static dl_lexpr *b_celu(const sop_args *s) {
    return dcall(s, "dlg_celu", 2, dattr(s, "alpha", 1.0f), NULL);
}
static dl_lexpr *b_selu(const sop_args *s) {
    return dcall(s, "dlg_selu", 3, dattr(s, "alpha", 1.67326319217681884765625f),
                 dattr(s, "gamma", 1.05070102214813232421875f));
}
static dl_lexpr *b_hardsigmoid(const sop_args *s) {
    return dcall(s, "dlg_hardsigmoid", 3, dattr(s, "alpha", 0.2f), dattr(s, "beta", 0.5f));
}
static dl_lexpr *b_hardswish(const sop_args *s) {
    return dcall(s, "dlg_hardswish", 1, NULL, NULL);
}
static dl_lexpr *b_softsign(const sop_args *s) {
    return dcall(s, "dlg_softsign", 1, NULL, NULL);
}
static dl_lexpr *b_gelu(const sop_args *s) {
    bool t = strcmp(dl_attr_str(s->n, "approximate", "none"), "tanh") == 0;
    return dcall(s, t ? "dlg_gelu_tanh" : "dlg_gelu", 1, NULL, NULL);
}
static dl_lexpr *b_shrink(const sop_args *s) {
    dl_lexpr *r = call(s, DL_F64, "dlg_shrink", 3, f64(s, s->a[0]), dattr(s, "lambd", 0.5f),
                       dattr(s, "bias", 0.0f));
    if (is_sint(s->t)) r = call(s, DL_I64, "dlg_f2i", 1, r, NULL, NULL);
    if (is_uint(s->t)) r = call(s, DL_U64, "dlg_f2u", 1, r, NULL, NULL);
    return cast(s, s->t, r);
}
/* Ops with a float helper for float32 and a double one for float64. */
static dl_lexpr *fcall(const sop_args *s, const char *f32, const char *f64n) {
    return call(s, s->t, s->t == DL_F32 ? f32 : f64n, 1, s->a[0], NULL, NULL);
}
static dl_lexpr *b_sigmoid(const sop_args *s) {
    return fcall(s, "dlg_sigmoidf", "dlg_sigmoid");
}
static dl_lexpr *b_softplus(const sop_args *s) {
    return fcall(s, "dlg_softplusf", "dlg_softplus");
}
static dl_lexpr *b_mish(const sop_args *s) {
    return fcall(s, "dlg_mishf", "dlg_mish");
}

/* ---------------------------------------------------------------- logic */

static dl_lexpr *b_cmp(const sop_args *s, dl_lop op) {
    return bin(s, op, s->a[0], s->a[1]);
}
static dl_lexpr *b_eq(const sop_args *s) {
    return b_cmp(s, DL_LOP_EQ);
}
static dl_lexpr *b_lt(const sop_args *s) {
    return b_cmp(s, DL_LOP_LT);
}
static dl_lexpr *b_le(const sop_args *s) {
    return b_cmp(s, DL_LOP_LE);
}
static dl_lexpr *b_gt(const sop_args *s) {
    return b_cmp(s, DL_LOP_GT);
}
static dl_lexpr *b_ge(const sop_args *s) {
    return b_cmp(s, DL_LOP_GE);
}
static dl_lexpr *b_and(const sop_args *s) {
    return b_cmp(s, DL_LOP_AND);
}
static dl_lexpr *b_or(const sop_args *s) {
    return b_cmp(s, DL_LOP_OR);
}
static dl_lexpr *b_xor(const sop_args *s) {
    return b_cmp(s, DL_LOP_NE);
}
static dl_lexpr *b_not(const sop_args *s) {
    return dl_le_un(s->f, DL_LOP_NOT, s->a[0]);
}
static dl_lexpr *b_isnan(const sop_args *s) {
    return bin(s, DL_LOP_NE, s->a[0], s->a[0]);
}
static dl_lexpr *b_isinf(const sop_args *s) {
    dl_lexpr *x = s->a[0];
    dl_dtype t = x->type;
    bool pos = dl_attr_int(s->n, "detect_positive", 1) != 0;
    bool neg = dl_attr_int(s->n, "detect_negative", 1) != 0;
    if (pos && neg)
        return bin(s, DL_LOP_EQ, call(s, t, t == DL_F32 ? "fabsf" : "fabs", 1, x, NULL, NULL),
                   dl_le_float(s->f, t, INFINITY));
    if (pos || neg) return bin(s, DL_LOP_EQ, x, dl_le_float(s->f, t, pos ? INFINITY : -INFINITY));
    return dl_le_int(s->f, DL_BOOL, 0);
}
static dl_lexpr *b_where(const sop_args *s) {
    return sel(s, s->a[0], s->a[1], s->a[2]);
}

/* ---------------------------------------------------------------- Cast */

static dl_lexpr *b_cast(const sop_args *s) {
    dl_lexpr *x = s->a[0];
    dl_dtype from = x->type, to = s->t;
    if (from == to) return x;
    if (to == DL_BOOL) return bin(s, DL_LOP_NE, x, cnum(s, from, 0)); /* NaN → true */
    if (is_f(to)) return cast(s, to, f64(s, x)); /* int → double → float, as the reference */
    if (!is_f(from)) return cast(s, to, x);      /* int/bool → int wraps */
    dl_lexpr *v = f64(s, x);
    return cast(s, to,
                is_uint(to) ? call(s, DL_U64, "dlg_f2u", 1, v, NULL, NULL)
                            : call(s, DL_I64, "dlg_f2i", 1, v, NULL, NULL));
}

/* ---------------------------------------------------------------- plain unary float ops */

static dl_lexpr *b_libm(const sop_args *s) {
    return fcall(s, s->fn32, s->fn64);
}

static const sop table[] = {
    {"Add", chk_num, b_add, NULL, NULL, 0},
    {"Sub", chk_num, b_sub, NULL, NULL, 0},
    {"Mul", chk_num, b_mul, NULL, NULL, 0},
    {"Div", chk_num, b_div, NULL, NULL, 0},
    {"Mod", chk_mod, b_mod, NULL, NULL, 0},
    {"Pow", chk_pow, b_pow, NULL, NULL, 0},
    {"BitShift", chk_bitshift, b_bitshift, NULL, NULL, 0},
    {"BitwiseAnd", chk_int, b_bitand, NULL, NULL, 0},
    {"BitwiseOr", chk_int, b_bitor, NULL, NULL, 0},
    {"BitwiseXor", chk_int, b_bitxor, NULL, NULL, 0},
    {"BitwiseNot", chk_int, b_bitnot, NULL, NULL, 0},
    {"Neg", chk_signed, b_neg, NULL, NULL, 0},
    {"Abs", chk_num, b_abs, NULL, NULL, 0},
    {"Sign", chk_num, b_sign, NULL, NULL, 0},
    {"Reciprocal", chk_float, b_recip, NULL, NULL, 0},
    {"Sqrt", chk_float, b_libm, "sqrtf", "sqrt", 0},
    {"Exp", chk_float, b_libm, "expf", "exp", 0},
    {"Log", chk_float, b_libm, "logf", "log", 0},
    {"Ceil", chk_float, b_libm, "ceilf", "ceil", 0},
    {"Floor", chk_float, b_libm, "floorf", "floor", 0},
    {"Round", chk_float, b_libm, "nearbyintf", "nearbyint", 0}, /* half to even */
    {"Erf", chk_float, b_libm, "dlrt_erf", "erf", 0},
    {"Sin", chk_float, b_libm, "sinf", "sin", 0},
    {"Cos", chk_float, b_libm, "cosf", "cos", 0},
    {"Tan", chk_float, b_libm, "tanf", "tan", 0},
    {"Asin", chk_float, b_libm, "asinf", "asin", 0},
    {"Acos", chk_float, b_libm, "acosf", "acos", 0},
    {"Atan", chk_float, b_libm, "atanf", "atan", 0},
    {"Sinh", chk_float, b_libm, "sinhf", "sinh", 0},
    {"Cosh", chk_float, b_libm, "coshf", "cosh", 0},
    {"Asinh", chk_float, b_libm, "asinhf", "asinh", 0},
    {"Acosh", chk_float, b_libm, "acoshf", "acosh", 0},
    {"Atanh", chk_float, b_libm, "atanhf", "atanh", 0},
    {"Tanh", chk_float, b_libm, "tanhf", "tanh", 0},
    {"Sum", chk_num, b_sum, NULL, NULL, 0},
    {"Mean", chk_num, b_mean, NULL, NULL, 0},
    {"Min", chk_num, b_min, NULL, NULL, 0},
    {"Max", chk_num, b_max, NULL, NULL, 0},
    {"Clip", chk_clip, b_clip, NULL, NULL, 0},
    {"Relu", chk_signed, b_relu, NULL, NULL, 0},
    {"LeakyRelu", chk_float, b_leaky, NULL, NULL, 0},
    {"PRelu", chk_num, b_prelu, NULL, NULL, 0},
    {"ThresholdedRelu", chk_float, b_threshrelu, NULL, NULL, 0},
    {"Elu", chk_float, b_elu, NULL, NULL, 0},
    {"Selu", chk_float, b_selu, NULL, NULL, 0},
    {"Celu", chk_celu, b_celu, NULL, NULL, 0},
    {"Sigmoid", chk_float, b_sigmoid, NULL, NULL, 0},
    {"HardSigmoid", chk_float, b_hardsigmoid, NULL, NULL, 0},
    {"HardSwish", chk_float, b_hardswish, NULL, NULL, 0},
    {"Softplus", chk_float, b_softplus, NULL, NULL, 0},
    {"Softsign", chk_float, b_softsign, NULL, NULL, 0},
    {"Mish", chk_float, b_mish, NULL, NULL, 0},
    {"Gelu", chk_gelu, b_gelu, NULL, NULL, 0},
    {"Shrink", chk_num, b_shrink, NULL, NULL, 0},
    {"Identity", chk_identity, b_identity, NULL, NULL, 0},
    {"Expand", chk_expand, b_identity, NULL, NULL, 1u << 1},
    {"Equal", chk_equal, b_eq, NULL, NULL, 0},
    {"Less", chk_compare, b_lt, NULL, NULL, 0},
    {"LessOrEqual", chk_compare, b_le, NULL, NULL, 0},
    {"Greater", chk_compare, b_gt, NULL, NULL, 0},
    {"GreaterOrEqual", chk_compare, b_ge, NULL, NULL, 0},
    {"And", chk_bool, b_and, NULL, NULL, 0},
    {"Or", chk_bool, b_or, NULL, NULL, 0},
    {"Xor", chk_bool, b_xor, NULL, NULL, 0},
    {"Not", chk_bool, b_not, NULL, NULL, 0},
    {"IsNaN", chk_isx, b_isnan, NULL, NULL, 0},
    {"IsInf", chk_isx, b_isinf, NULL, NULL, 0},
    {"Where", chk_where, b_where, NULL, NULL, 0},
    {"Cast", chk_cast, b_cast, NULL, NULL, 0},
    {"CastLike", chk_cast, b_cast, NULL, NULL, 0},
};

static const sop *find_sop(const dl_node *n) {
    if (!n || !n->op || (n->op->domain && n->op->domain[0])) return NULL;
    for (size_t i = 0; i < DL_ARRAY_LEN(table); i++)
        if (strcmp(table[i].name, n->op->name) == 0) return &table[i];
    return NULL;
}

bool dl_ew_operand(const dl_node *n, int i) {
    const sop *op = find_sop(n);
    return !op || i < 0 || i >= 32 || !(op->not_operands >> i & 1u);
}

bool dl_ew_supported(const dl_node *n) {
    const sop *op = find_sop(n);
    if (!op || n->n_out < 1 || !n->out[0] || n->n_in > DL_EW_MAX_ARGS) return false;
    for (int i = 1; i < n->n_out; i++)
        if (n->out[i]) return false; /* extra outputs have no scalar form */
    return op->check(n);
}

dl_status dl_scalar_op(dl_ctx *ctx, dl_lfunc *f, const dl_node *n, int n_args,
                       dl_lexpr *const *args, dl_lexpr **out) {
    *out = NULL;
    DL_TRY(dl_lfunc_status(ctx, f)); /* a NULL argument may stand for an allocation failure */
    char d[300];
    if (!dl_ew_supported(n))
        return dl_fail(ctx, DL_ERR_UNSUPPORTED, "%s: no scalar form for these dtypes/attributes",
                       dl_node_desc(n, d, sizeof d));
    if (n_args > n->n_in || n_args > DL_EW_MAX_ARGS)
        return dl_fail(ctx, DL_ERR_INVALID, "%s: %d arguments for %d inputs",
                       dl_node_desc(n, d, sizeof d), n_args, n->n_in);
    dl_lexpr *a[DL_EW_MAX_ARGS] = {NULL};
    for (int i = 0; i < n->n_in; i++) {
        a[i] = i < n_args ? args[i] : NULL;
        if (!dl_ew_operand(n, i)) { /* read by inference only: no argument */
            if (a[i])
                return dl_fail(ctx, DL_ERR_INVALID, "%s: input %d is not an operand",
                               dl_node_desc(n, d, sizeof d), i);
            continue;
        }
        if (!a[i] != !n->in[i] || (a[i] && a[i]->type != n->in[i]->type.dtype))
            return dl_fail(ctx, DL_ERR_TYPE, "%s: argument %d does not match input %d (%s)",
                           dl_node_desc(n, d, sizeof d), i, i,
                           n->in[i] ? dl_dtype_name(n->in[i]->type.dtype) : "omitted");
    }
    const sop *op = find_sop(n);
    sop_args s = {.f = f,
                  .n = n,
                  .a = a,
                  .n_args = n->n_in,
                  .t = out_t(n),
                  .fn32 = op->fn32,
                  .fn64 = op->fn64};
    dl_lexpr *e = op->build(&s);
    DL_TRY(dl_lfunc_status(ctx, f));
    if (!e || e->type != s.t)
        return dl_fail(ctx, DL_ERR_INTERNAL, "%s: scalar form has dtype %s, not %s",
                       dl_node_desc(n, d, sizeof d), e ? dl_dtype_name(e->type) : "none",
                       dl_dtype_name(s.t));
    *out = e;
    return DL_OK;
}
