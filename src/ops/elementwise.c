/* elementwise.c — op family "elementwise" (rows of the op table): arithmetic, unary math,
 * variadic Sum/Mean/Min/Max, Clip, BitShift.
 *
 * Floating dtypes compute in double; signed integers in int64 with wrapping arithmetic; unsigned
 * integers in uint64. Integer division or remainder by zero gives 0 (never a trap), and
 * INT64_MIN / -1 wraps. */
#include "op-impl.h"
#include "../kernels/rt/dlrt.h"
#include "../train/grad.h"

#include <math.h>
#include <stdlib.h>

/* ---------------------------------------------------------------- shared local helpers */

enum { K_F, K_S, K_U }; /* float, signed (and bool), unsigned compute paths */

static int kind_of(dl_dtype t) {
    if (dl_dtype_is_float(t)) return K_F;
    if (t == DL_BOOL || dl_dtype_is_signed(t)) return K_S;
    return K_U;
}

static const dl_dtype k_numeric[] = {
    DL_F32, DL_F64, DL_F16, DL_BF16,           DL_I8, DL_U8, DL_I16, DL_U16, DL_I32,
    DL_U32, DL_I64, DL_U64, DL_DTYPE_UNDEFINED};
static const dl_dtype k_signed_num[] = {DL_F32, DL_F64, DL_F16, DL_BF16,           DL_I8,
                                        DL_I16, DL_I32, DL_I64, DL_DTYPE_UNDEFINED};
static const dl_dtype k_unsigned[] = {DL_U8, DL_U16, DL_U32, DL_U64, DL_DTYPE_UNDEFINED};

/* The output tensor o, allocated from the inferred type if the runtime did not preallocate. */

/* Strides of t broadcast to (rank, dims); false when t does not broadcast. */
static bool bc_strides(const dl_tensor *t, int rank, const int64_t *dims, int64_t *st) {
    if (t->rank > rank) return false;
    int64_t s = 1;
    for (int d = rank - 1; d >= 0; d--) {
        int td = d - (rank - t->rank);
        if (td < 0) {
            st[d] = 0;
            continue;
        }
        int64_t n = t->dims[td];
        if (n == dims[d])
            st[d] = n == 1 ? 0 : s;
        else if (n == 1)
            st[d] = 0;
        else
            return false;
        s *= n;
    }
    return true;
}

static int64_t bc_off(const int64_t *idx, int rank, const int64_t *st) {
    int64_t off = 0;
    for (int d = 0; d < rank; d++) off += idx[d] * st[d];
    return off;
}

static dl_status check_bc(dl_kernel *kc, const dl_tensor *t, const dl_tensor *o, int64_t *st) {
    if (!bc_strides(t, o->rank, o->dims, st))
        return dl_kernel_fail(kc, DL_ERR_SHAPE, "input does not broadcast to the output shape");
    return DL_OK;
}

static uint64_t get_u64(const dl_tensor *t, int64_t i) {
    return (uint64_t)dl_get_i64(t, i);
}
static void set_u64(dl_tensor *t, int64_t i, uint64_t v) {
    dl_set_i64(t, i, (int64_t)v);
}

/* A double converted to an integer dtype: truncation toward zero, saturating at the int64 /
 * uint64 range, NaN → 0 (never undefined behaviour). */
static void set_int_from_f64(dl_tensor *t, int64_t i, double v) {
    if (isnan(v)) {
        dl_set_i64(t, i, 0);
    } else if (kind_of(t->dtype) == K_U && v >= 9223372036854775808.0) {
        set_u64(t, i, v >= 18446744073709551616.0 ? UINT64_MAX : (uint64_t)v);
    } else if (v >= 9223372036854775808.0) {
        dl_set_i64(t, i, INT64_MAX);
    } else if (v < -9223372036854775808.0) {
        dl_set_i64(t, i, INT64_MIN);
    } else {
        dl_set_i64(t, i, (int64_t)v);
    }
}

/* Reads element i of t as a double whatever its dtype. */
static double get_any_f64(const dl_tensor *t, int64_t i) {
    switch (kind_of(t->dtype)) {
    case K_F:
        return dl_get_f64(t, i);
    case K_S:
        return (double)dl_get_i64(t, i);
    default:
        return (double)get_u64(t, i);
    }
}

/* ---------------------------------------------------------------- inference */

static dl_status infer_binary_same(dl_infer *ic, const dl_dtype *allowed) {
    static const int idx[2] = {0, 1};
    DL_TRY(dl_infer_require_dtype(ic, 0, allowed));
    DL_TRY(dl_infer_require_dtype(ic, 1, allowed));
    DL_TRY(dl_infer_same_dtype(ic, 2, idx));
    return dl_infer_broadcast(ic, 0, 2, idx);
}

static dl_status infer_arith(dl_infer *ic) {
    return infer_binary_same(ic, k_numeric);
}

static dl_status infer_pow(dl_infer *ic) {
    static const int idx[2] = {0, 1};
    DL_TRY(dl_infer_require_dtype(ic, 0, k_numeric));
    DL_TRY(dl_infer_require_dtype(ic, 1, k_numeric));
    if (ic->opset < 12) DL_TRY(dl_infer_same_dtype(ic, 2, idx));
    return dl_infer_broadcast(ic, 0, 2, idx);
}

static dl_status infer_mod(dl_infer *ic) {
    int64_t f = dl_attr_int(ic->node, "fmod", 0);
    if (f != 0 && f != 1)
        return dl_infer_fail(ic, DL_ERR_INVALID, "attribute fmod must be 0 or 1, got %lld",
                             (long long)f);
    return infer_binary_same(ic, k_numeric);
}

static dl_status infer_bitshift(dl_infer *ic) {
    const char *dir = dl_attr_str(ic->node, "direction", NULL);
    if (!dir || (strcmp(dir, "LEFT") != 0 && strcmp(dir, "RIGHT") != 0))
        return dl_infer_fail(ic, DL_ERR_INVALID,
                             "attribute direction must be \"LEFT\" or \"RIGHT\"");
    return infer_binary_same(ic, k_unsigned);
}

static dl_status infer_unary(dl_infer *ic, const dl_dtype *allowed) {
    DL_TRY(dl_infer_require_dtype(ic, 0, allowed));
    return dl_infer_same(ic, 0, 0);
}
static dl_status infer_unary_float(dl_infer *ic) {
    DL_TRY(dl_infer_require_float(ic, 0));
    return dl_infer_same(ic, 0, 0);
}
static dl_status infer_unary_numeric(dl_infer *ic) {
    return infer_unary(ic, k_numeric);
}
static dl_status infer_unary_signed(dl_infer *ic) {
    return infer_unary(ic, k_signed_num);
}

static dl_status infer_variadic(dl_infer *ic, bool float_only) {
    int n = ic->n_in;
    if (n < 1) return dl_infer_fail(ic, DL_ERR_INVALID, "needs at least one input");
    int *idx = dl_malloc(sizeof(int) * (size_t)n);
    if (!idx) return dl_infer_fail(ic, DL_ERR_NOMEM, "out of memory");
    dl_status s = DL_OK;
    for (int i = 0; i < n && s == DL_OK; i++) {
        idx[i] = i;
        if (!dl_has_in(ic, i))
            s = dl_infer_fail(ic, DL_ERR_INVALID, "input %d is missing", i);
        else if (float_only)
            s = dl_infer_require_float(ic, i);
        else
            s = dl_infer_require_dtype(ic, i, k_numeric);
    }
    if (s == DL_OK) s = dl_infer_same_dtype(ic, n, idx);
    if (s == DL_OK) s = dl_infer_broadcast(ic, 0, n, idx);
    dl_free(idx);
    return s;
}
static dl_status infer_sum(dl_infer *ic) {
    return infer_variadic(ic, false);
}
static dl_status infer_mean(dl_infer *ic) {
    return infer_variadic(ic, true);
}

static dl_status infer_clip(dl_infer *ic) {
    DL_TRY(dl_infer_require_dtype(ic, 0, k_numeric));
    if (ic->opset < 11) {
        DL_TRY(dl_infer_require_float(ic, 0));
        if (ic->n_in > 1)
            return dl_infer_fail(ic, DL_ERR_INVALID,
                                 "Clip before opset 11 takes min/max as attributes");
    } else {
        for (int i = 1; i < ic->n_in && i < 3; i++) {
            if (!dl_has_in(ic, i)) continue;
            if (ic->in[i]->dtype != ic->in[0]->dtype)
                return dl_infer_fail(ic, DL_ERR_TYPE, "%s must have the input's dtype",
                                     i == 1 ? "min" : "max");
            const dl_type *t = ic->in[i];
            if (t->rank > 1)
                return dl_infer_fail(ic, DL_ERR_SHAPE, "%s must be a scalar",
                                     i == 1 ? "min" : "max");
            if (t->rank == 1 && t->dims[0] >= 0 && t->dims[0] != 1)
                return dl_infer_fail(ic, DL_ERR_SHAPE, "%s must be a scalar",
                                     i == 1 ? "min" : "max");
        }
    }
    return dl_infer_same(ic, 0, 0);
}

/* ---------------------------------------------------------------- binary kernels */

typedef double (*f2_fn)(double, double);
typedef int64_t (*s2_fn)(int64_t, int64_t);
typedef uint64_t (*u2_fn)(uint64_t, uint64_t);

static dl_status map_binary(dl_kernel *kc, f2_fn ff, s2_fn fs, u2_fn fu) {
    const dl_tensor *a = kc->in[0], *b = kc->in[1];
    dl_tensor *o;
    DL_TRY(dl_kernel_out(kc, 0, &o));
    int64_t sa[DL_MAX_RANK], sb[DL_MAX_RANK], idx[DL_MAX_RANK] = {0};
    DL_TRY(check_bc(kc, a, o, sa));
    DL_TRY(check_bc(kc, b, o, sb));
    int k = kind_of(o->dtype);
    if (a->dtype != o->dtype || b->dtype != o->dtype || (k == K_F && !ff) || (k == K_S && !fs) ||
        (k == K_U && !fu))
        return dl_kernel_fail(kc, DL_ERR_UNSUPPORTED, "dtype %s not supported",
                              dl_dtype_name(o->dtype));
    for (int64_t i = 0; i < o->numel; i++) {
        int64_t ia = bc_off(idx, o->rank, sa), ib = bc_off(idx, o->rank, sb);
        if (k == K_F)
            dl_set_f64(o, i, ff(dl_get_f64(a, ia), dl_get_f64(b, ib)));
        else if (k == K_S)
            dl_set_i64(o, i, fs(dl_get_i64(a, ia), dl_get_i64(b, ib)));
        else
            set_u64(o, i, fu(get_u64(a, ia), get_u64(b, ib)));
        dl_index_next(o->rank, o->dims, idx);
    }
    return DL_OK;
}

static double add_f(double a, double b) {
    return a + b;
}
static int64_t add_s(int64_t a, int64_t b) {
    return (int64_t)((uint64_t)a + (uint64_t)b);
}
static uint64_t add_u(uint64_t a, uint64_t b) {
    return a + b;
}
static double sub_f(double a, double b) {
    return a - b;
}
static int64_t sub_s(int64_t a, int64_t b) {
    return (int64_t)((uint64_t)a - (uint64_t)b);
}
static uint64_t sub_u(uint64_t a, uint64_t b) {
    return a - b;
}
static double mul_f(double a, double b) {
    return a * b;
}
static int64_t mul_s(int64_t a, int64_t b) {
    return (int64_t)((uint64_t)a * (uint64_t)b);
}
static uint64_t mul_u(uint64_t a, uint64_t b) {
    return a * b;
}
static double div_f(double a, double b) {
    return a / b;
}
static int64_t div_s(int64_t a, int64_t b) {
    if (b == 0) return 0;
    if (b == -1) return (int64_t)(0 - (uint64_t)a); /* INT64_MIN / -1 wraps */
    return a / b;
}
static uint64_t div_u(uint64_t a, uint64_t b) {
    return b == 0 ? 0 : a / b;
}

/* Mod, fmod=1: remainder with the sign of the dividend (C fmod / %). */
static double fmod_f(double a, double b) {
    return fmod(a, b);
}
static int64_t fmod_s(int64_t a, int64_t b) {
    return (b == 0 || b == -1) ? 0 : a % b;
}
static uint64_t mod_u(uint64_t a, uint64_t b) {
    return b == 0 ? 0 : a % b;
}
/* Mod, fmod=0: remainder with the sign of the divisor (Python / numpy mod). */
static double pmod_f(double a, double b) {
    double r = fmod(a, b);
    if (r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
}
static int64_t pmod_s(int64_t a, int64_t b) {
    int64_t r = fmod_s(a, b);
    if (r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
}

static uint64_t shl_u(uint64_t a, uint64_t s) {
    return s >= 64 ? 0 : a << s;
}
static uint64_t shr_u(uint64_t a, uint64_t s) {
    return s >= 64 ? 0 : a >> s;
}

static dl_status ref_add(dl_kernel *kc) {
    return map_binary(kc, add_f, add_s, add_u);
}
static dl_status ref_sub(dl_kernel *kc) {
    return map_binary(kc, sub_f, sub_s, sub_u);
}
static dl_status ref_mul(dl_kernel *kc) {
    return map_binary(kc, mul_f, mul_s, mul_u);
}
static dl_status ref_div(dl_kernel *kc) {
    return map_binary(kc, div_f, div_s, div_u);
}
static dl_status ref_mod(dl_kernel *kc) {
    if (dl_attr_int(kc->node, "fmod", 0)) return map_binary(kc, fmod_f, fmod_s, mod_u);
    return map_binary(kc, pmod_f, pmod_s, mod_u);
}
static dl_status ref_bitshift(dl_kernel *kc) {
    const char *dir = dl_attr_str(kc->node, "direction", "");
    if (strcmp(dir, "LEFT") == 0) return map_binary(kc, NULL, NULL, shl_u);
    if (strcmp(dir, "RIGHT") == 0) return map_binary(kc, NULL, NULL, shr_u);
    return dl_kernel_fail(kc, DL_ERR_INVALID, "bad direction");
}

/* Integer power by squaring with wrapping multiplication (exact modulo 2^64). */
static uint64_t ipow_u(uint64_t base, uint64_t e) {
    uint64_t r = 1;
    while (e) {
        if (e & 1) r *= base;
        e >>= 1;
        if (e) base *= base;
    }
    return r;
}

static dl_status ref_pow(dl_kernel *kc) {
    const dl_tensor *a = kc->in[0], *b = kc->in[1];
    dl_tensor *o;
    DL_TRY(dl_kernel_out(kc, 0, &o));
    int64_t sa[DL_MAX_RANK], sb[DL_MAX_RANK], idx[DL_MAX_RANK] = {0};
    DL_TRY(check_bc(kc, a, o, sa));
    DL_TRY(check_bc(kc, b, o, sb));
    int ka = kind_of(a->dtype), kb = kind_of(b->dtype);
    if (a->dtype != o->dtype)
        return dl_kernel_fail(kc, DL_ERR_TYPE, "output dtype differs from the base's");
    for (int64_t i = 0; i < o->numel; i++) {
        int64_t ia = bc_off(idx, o->rank, sa), ib = bc_off(idx, o->rank, sb);
        if (ka == K_F) {
            dl_set_f64(o, i, pow(dl_get_f64(a, ia), get_any_f64(b, ib)));
        } else if (kb == K_F) {
            set_int_from_f64(o, i, pow(get_any_f64(a, ia), dl_get_f64(b, ib)));
        } else {
            uint64_t base = get_u64(a, ia);
            int64_t e = dl_get_i64(b, ib);
            if (kb == K_U || e >= 0) {
                set_u64(o, i, ipow_u(base, (uint64_t)e));
            } else if (base == 1) {
                dl_set_i64(o, i, 1);
            } else if (ka == K_S && (int64_t)base == -1) {
                dl_set_i64(o, i, (e & 1) ? -1 : 1);
            } else {
                dl_set_i64(o, i, 0); /* |base| > 1 (or 0) to a negative power */
            }
        }
        dl_index_next(o->rank, o->dims, idx);
    }
    return DL_OK;
}

/* ---------------------------------------------------------------- unary kernels */

typedef double (*f1_fn)(double);
typedef int64_t (*s1_fn)(int64_t);
typedef uint64_t (*u1_fn)(uint64_t);

static dl_status map_unary(dl_kernel *kc, f1_fn ff, s1_fn fs, u1_fn fu) {
    const dl_tensor *x = kc->in[0];
    dl_tensor *o;
    DL_TRY(dl_kernel_out(kc, 0, &o));
    int k = kind_of(x->dtype);
    if (x->dtype != o->dtype || x->numel != o->numel || (k == K_F && !ff) || (k == K_S && !fs) ||
        (k == K_U && !fu))
        return dl_kernel_fail(kc, DL_ERR_UNSUPPORTED, "dtype %s not supported",
                              dl_dtype_name(x->dtype));
    for (int64_t i = 0; i < o->numel; i++) {
        if (k == K_F)
            dl_set_f64(o, i, ff(dl_get_f64(x, i)));
        else if (k == K_S)
            dl_set_i64(o, i, fs(dl_get_i64(x, i)));
        else
            set_u64(o, i, fu(get_u64(x, i)));
    }
    return DL_OK;
}

static double neg_f(double x) {
    return -x;
}
static int64_t neg_s(int64_t x) {
    return (int64_t)(0 - (uint64_t)x);
}
static int64_t abs_s(int64_t x) {
    return x < 0 ? neg_s(x) : x;
}
static uint64_t id_u(uint64_t x) {
    return x;
}
static double sign_f(double x) {
    return isnan(x) ? x : (x > 0) - (x < 0);
}
static int64_t sign_s(int64_t x) {
    return (x > 0) - (x < 0);
}
static uint64_t sign_u(uint64_t x) {
    return x > 0;
}
static double recip_f(double x) {
    return 1.0 / x;
}
static double round_f(double x) {
    return nearbyint(x);
} /* half to even (default mode) */

static dl_status ref_neg(dl_kernel *kc) {
    return map_unary(kc, neg_f, neg_s, NULL);
}
static dl_status ref_abs(dl_kernel *kc) {
    return map_unary(kc, fabs, abs_s, id_u);
}
static dl_status ref_sign(dl_kernel *kc) {
    return map_unary(kc, sign_f, sign_s, sign_u);
}

#define UNARY_FLOAT(NAME, FN)                                                                      \
    static dl_status ref_##NAME(dl_kernel *kc) {                                                   \
        return map_unary(kc, FN, NULL, NULL);                                                      \
    }
UNARY_FLOAT(reciprocal, recip_f)
UNARY_FLOAT(sqrt, sqrt)
UNARY_FLOAT(exp, exp)
UNARY_FLOAT(log, log)
UNARY_FLOAT(ceil, ceil)
UNARY_FLOAT(floor, floor)
UNARY_FLOAT(round, round_f)
UNARY_FLOAT(erf, erf)
UNARY_FLOAT(sin, sin)
UNARY_FLOAT(cos, cos)
UNARY_FLOAT(tan, tan)
UNARY_FLOAT(asin, asin)
UNARY_FLOAT(acos, acos)
UNARY_FLOAT(atan, atan)
UNARY_FLOAT(sinh, sinh)
UNARY_FLOAT(cosh, cosh)
UNARY_FLOAT(asinh, asinh)
UNARY_FLOAT(acosh, acosh)
UNARY_FLOAT(atanh, atanh)
#undef UNARY_FLOAT

/* ---------------------------------------------------------------- variadic Sum/Mean/Min/Max */

enum { V_SUM, V_MEAN, V_MIN, V_MAX };

static double vfold_f(int op, double a, double b) {
    switch (op) {
    case V_MIN:
        return (isnan(a) || isnan(b)) ? NAN : (b < a ? b : a);
    case V_MAX:
        return (isnan(a) || isnan(b)) ? NAN : (b > a ? b : a);
    default:
        return a + b;
    }
}

static dl_status ref_variadic(dl_kernel *kc, int op) {
    dl_tensor *o;
    DL_TRY(dl_kernel_out(kc, 0, &o));
    int k = kind_of(o->dtype);
    int64_t st[DL_MAX_RANK];
    for (int j = 0; j < kc->n_in; j++) {
        const dl_tensor *x = kc->in[j];
        if (!x) return dl_kernel_fail(kc, DL_ERR_INVALID, "input %d is missing", j);
        if (x->dtype != o->dtype)
            return dl_kernel_fail(kc, DL_ERR_TYPE, "input %d has a different dtype", j);
        DL_TRY(check_bc(kc, x, o, st));
        int64_t idx[DL_MAX_RANK] = {0};
        for (int64_t i = 0; i < o->numel; i++) {
            int64_t ix = bc_off(idx, o->rank, st);
            if (k == K_F) {
                double v = dl_get_f64(x, ix);
                dl_set_f64(o, i, j == 0 ? v : vfold_f(op, dl_get_f64(o, i), v));
            } else if (k == K_S) {
                int64_t v = dl_get_i64(x, ix), acc = dl_get_i64(o, i);
                if (j == 0)
                    acc = v;
                else if (op == V_MIN)
                    acc = v < acc ? v : acc;
                else if (op == V_MAX)
                    acc = v > acc ? v : acc;
                else
                    acc = add_s(acc, v);
                dl_set_i64(o, i, acc);
            } else {
                uint64_t v = get_u64(x, ix), acc = get_u64(o, i);
                if (j == 0)
                    acc = v;
                else if (op == V_MIN)
                    acc = v < acc ? v : acc;
                else if (op == V_MAX)
                    acc = v > acc ? v : acc;
                else
                    acc += v;
                set_u64(o, i, acc);
            }
            dl_index_next(o->rank, o->dims, idx);
        }
    }
    if (op == V_MEAN) {
        for (int64_t i = 0; i < o->numel; i++) {
            if (k == K_F)
                dl_set_f64(o, i, dl_get_f64(o, i) / kc->n_in);
            else if (k == K_S)
                dl_set_i64(o, i, dl_get_i64(o, i) / kc->n_in);
            else
                set_u64(o, i, get_u64(o, i) / (uint64_t)kc->n_in);
        }
    }
    return DL_OK;
}

static dl_status ref_sum(dl_kernel *kc) {
    return ref_variadic(kc, V_SUM);
}
static dl_status ref_mean(dl_kernel *kc) {
    return ref_variadic(kc, V_MEAN);
}
static dl_status ref_min(dl_kernel *kc) {
    return ref_variadic(kc, V_MIN);
}
static dl_status ref_max(dl_kernel *kc) {
    return ref_variadic(kc, V_MAX);
}

/* ---------------------------------------------------------------- Clip */

/* A bound input of Clip (opset 11 on) as a GEMM epilogue's parameter: def when omitted; false
 * when it is not a constant float scalar. */
static bool clip_epi_bound(const dl_node *n, int i, float def, float *out) {
    const dl_value *v = n->n_in > i ? n->in[i] : NULL;
    *out = def;
    if (!v) return true;
    if (!v->constant || v->constant->numel != 1 || v->constant->dtype != DL_F32) return false;
    *out = ((const float *)v->constant->data)[0];
    return true;
}

/* Clip as a GEMM epilogue: its bounds must be known when the kernel is generated. */
static int epi_clip(const dl_node *n, float *a, float *b) {
    if (n->opset < 11) {
        *a = dl_attr_float(n, "min", -INFINITY);
        *b = dl_attr_float(n, "max", INFINITY);
        return DLRT_ACT_CLIP;
    }
    return clip_epi_bound(n, 1, -INFINITY, a) && clip_epi_bound(n, 2, INFINITY, b) ? DLRT_ACT_CLIP
                                                                                   : DLRT_ACT_NONE;
}

static dl_status ref_clip(dl_kernel *kc) {
    const dl_tensor *x = kc->in[0];
    dl_tensor *o;
    DL_TRY(dl_kernel_out(kc, 0, &o));
    if (x->dtype != o->dtype || x->numel != o->numel)
        return dl_kernel_fail(kc, DL_ERR_INTERNAL, "output does not match the input");
    const dl_tensor *lo = NULL, *hi = NULL;
    if (kc->opset >= 11) {
        lo = kc->n_in > 1 ? kc->in[1] : NULL;
        hi = kc->n_in > 2 ? kc->in[2] : NULL;
        if ((lo && (lo->numel != 1 || lo->dtype != x->dtype)) ||
            (hi && (hi->numel != 1 || hi->dtype != x->dtype)))
            return dl_kernel_fail(kc, DL_ERR_SHAPE,
                                  "min and max must be scalars of the input's "
                                  "dtype");
    }
    int k = kind_of(x->dtype);
    if (k == K_F) {
        double mn = -INFINITY, mx = INFINITY;
        if (kc->opset < 11) {
            mn = dl_attr_float(kc->node, "min", -INFINITY);
            mx = dl_attr_float(kc->node, "max", INFINITY);
        } else {
            if (lo) mn = dl_get_f64(lo, 0);
            if (hi) mx = dl_get_f64(hi, 0);
        }
        for (int64_t i = 0; i < x->numel; i++) {
            double v = dl_get_f64(x, i);
            if (v < mn) v = mn;
            if (v > mx) v = mx;
            dl_set_f64(o, i, v);
        }
    } else if (k == K_S) {
        int64_t mn = lo ? dl_get_i64(lo, 0) : INT64_MIN, mx = hi ? dl_get_i64(hi, 0) : INT64_MAX;
        for (int64_t i = 0; i < x->numel; i++) {
            int64_t v = dl_get_i64(x, i);
            if (v < mn) v = mn;
            if (v > mx) v = mx;
            dl_set_i64(o, i, v);
        }
    } else {
        uint64_t mn = lo ? get_u64(lo, 0) : 0, mx = hi ? get_u64(hi, 0) : UINT64_MAX;
        for (int64_t i = 0; i < x->numel; i++) {
            uint64_t v = get_u64(x, i);
            if (v < mn) v = mn;
            if (v > mx) v = mx;
            set_u64(o, i, v);
        }
    }
    return DL_OK;
}

/* ---------------------------------------------------------------- the rows */

static const dl_attr_spec mod_attrs[] = {{"fmod", DL_ATTR_INT}, {NULL, 0}};
static const dl_attr_spec clip_attrs[] = {
    {"min", DL_ATTR_FLOAT}, {"max", DL_ATTR_FLOAT}, {NULL, 0}};
static const dl_attr_spec bitshift_attrs[] = {{"direction", DL_ATTR_STRING}, {NULL, 0}};

/* ---- gradient rules (grad.h) ---- */

static dl_status grad_add(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy, dl_value **dx) {
    for (int i = 0; i < 2; i++)
        if (dg_needs(gc, n, i)) dx[i] = dg_sum_to(gc, dy[0], n->in[i]);
    return dg_status(gc);
}

static dl_status grad_sub(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy, dl_value **dx) {
    if (dg_needs(gc, n, 0)) dx[0] = dg_sum_to(gc, dy[0], n->in[0]);
    if (dg_needs(gc, n, 1)) dx[1] = dg_sum_to(gc, dg_op1(gc, "Neg", dy[0], NULL), n->in[1]);
    return dg_status(gc);
}

static dl_status grad_mul(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy, dl_value **dx) {
    for (int i = 0; i < 2; i++)
        if (dg_needs(gc, n, i))
            dx[i] = dg_sum_to(gc, dg_op2(gc, "Mul", dy[0], n->in[1 - i], NULL), n->in[i]);
    return dg_status(gc);
}

/* d(a/b)/db = -y/b */
static dl_status grad_div(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy, dl_value **dx) {
    dl_value *g_over_b = dg_op2(gc, "Div", dy[0], n->in[1], NULL);
    if (dg_needs(gc, n, 0)) dx[0] = dg_sum_to(gc, g_over_b, n->in[0]);
    if (dg_needs(gc, n, 1))
        dx[1] = dg_sum_to(gc, dg_op1(gc, "Neg", dg_op2(gc, "Mul", g_over_b, n->out[0], NULL), NULL),
                          n->in[1]);
    return dg_status(gc);
}

/* Rank-0 constant v of x's dtype. */
static dl_value *gk(dl_grad_ctx *gc, double v, const dl_value *x) {
    return x ? dg_scalar(gc, v, x->type.dtype) : NULL;
}
static dl_value *gmul(dl_grad_ctx *gc, dl_value *a, dl_value *b) {
    return dg_op2(gc, "Mul", a, b, NULL);
}
static dl_value *gsq(dl_grad_ctx *gc, dl_value *a) {
    return dg_op2(gc, "Mul", a, a, NULL);
}
/* Cast v to dtype dt (v itself when it already has it). */
static dl_value *gcast(dl_grad_ctx *gc, dl_value *v, dl_dtype dt) {
    if (!v || v->type.dtype == dt) return v;
    char to[32];
    snprintf(to, sizeof to, "to=%d", (int)dl_dtype_to_onnx(dt));
    return dg_op1(gc, "Cast", v, to);
}

/* d(a^b)/da = b a^(b-1) (0 where b == 0, as PyTorch, so 0^0 does not give 0 * inf);
 * d(a^b)/db = y ln a, 0 where a == 0 and b >= 0 (PyTorch's convention for 0^b). An integer
 * exponent gets no gradient. */
static dl_status grad_pow(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy, dl_value **dx) {
    dl_value *a = n->in[0], *b = n->in[1], *y = n->out[0];
    dl_dtype dt = a->type.dtype;
    if (dg_needs(gc, n, 0)) {
        dl_value *bf = gcast(gc, b, dt);
        dl_value *d =
            gmul(gc, bf, dg_op2(gc, "Pow", a, dg_op2(gc, "Sub", bf, gk(gc, 1, a), NULL), NULL));
        bool zero_b = true; /* b may hold a zero (always so unless a constant says otherwise) */
        if (b->constant) {
            zero_b = false;
            for (int64_t i = 0; i < b->constant->numel && !zero_b; i++)
                zero_b = dl_get_f64(b->constant, i) == 0.0;
        }
        if (zero_b)
            d = dg_op3(gc, "Where", dg_op2(gc, "Equal", bf, gk(gc, 0, a), NULL), gk(gc, 0, a), d,
                       NULL);
        dx[0] = dg_sum_to(gc, gmul(gc, dy[0], d), a);
    }
    if (dg_needs(gc, n, 1)) {
        dl_value *at_zero = dg_op2(gc, "And", dg_op2(gc, "Equal", a, gk(gc, 0, a), NULL),
                                   dg_op2(gc, "GreaterOrEqual", b, gk(gc, 0, b), NULL), NULL);
        dl_value *d = dg_op3(gc, "Where", at_zero, gk(gc, 0, a),
                             gmul(gc, y, dg_op1(gc, "Log", a, NULL)), NULL);
        dx[1] = dg_sum_to(gc, gcast(gc, gmul(gc, dy[0], d), b->type.dtype), b);
    }
    return dg_status(gc);
}

static dl_status grad_neg(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy, dl_value **dx) {
    (void)n;
    dx[0] = dg_op1(gc, "Neg", dy[0], NULL);
    return dg_status(gc);
}

/* Sign, Ceil, Floor, Round: piecewise constant, so zero gradient (PyTorch's convention): the
 * input gets no contribution. */
static dl_status grad_step(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy, dl_value **dx) {
    (void)n, (void)dy, (void)dx;
    return dg_status(gc);
}

/* Unary rules dx = dy OP D, D built from x (the input) and y (the output); OP is Mul, or Div
 * where the derivative is a reciprocal. Abs: sign(x), 0 at 0 (PyTorch). */
#define UNARY_GRAD(NAME, OP, D)                                                                    \
    static dl_status grad_##NAME(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy,           \
                                 dl_value **dx) {                                                  \
        dl_value *x = n->in[0], *y = n->out[0];                                                    \
        (void)x, (void)y;                                                                          \
        dx[0] = dg_op2(gc, OP, dy[0], D, NULL);                                                    \
        return dg_status(gc);                                                                      \
    }
#define G1(OP, A)    dg_op1(gc, OP, A, NULL)
#define G2(OP, A, B) dg_op2(gc, OP, A, B, NULL)
UNARY_GRAD(abs, "Mul", G1("Sign", x))
UNARY_GRAD(reciprocal, "Mul", G1("Neg", gsq(gc, y)))
UNARY_GRAD(sqrt, "Div", gmul(gc, y, gk(gc, 2, x)))
UNARY_GRAD(exp, "Mul", y)
UNARY_GRAD(log, "Div", x)
UNARY_GRAD(erf, "Mul", gmul(gc, gk(gc, 1.1283791670955126, x), G1("Exp", G1("Neg", gsq(gc, x)))))
UNARY_GRAD(sin, "Mul", G1("Cos", x))
UNARY_GRAD(cos, "Mul", G1("Neg", G1("Sin", x)))
UNARY_GRAD(tan, "Mul", G2("Add", gk(gc, 1, x), gsq(gc, y)))
UNARY_GRAD(asin, "Div", G1("Sqrt", G2("Sub", gk(gc, 1, x), gsq(gc, x))))
UNARY_GRAD(acos, "Div", G1("Neg", G1("Sqrt", G2("Sub", gk(gc, 1, x), gsq(gc, x)))))
UNARY_GRAD(atan, "Div", G2("Add", gk(gc, 1, x), gsq(gc, x)))
UNARY_GRAD(sinh, "Mul", G1("Cosh", x))
UNARY_GRAD(cosh, "Mul", G1("Sinh", x))
UNARY_GRAD(asinh, "Div", G1("Sqrt", G2("Add", gsq(gc, x), gk(gc, 1, x))))
UNARY_GRAD(acosh, "Div",
           G1("Sqrt", gmul(gc, G2("Sub", x, gk(gc, 1, x)), G2("Add", x, gk(gc, 1, x)))))
UNARY_GRAD(atanh, "Div", G2("Sub", gk(gc, 1, x), gsq(gc, x)))
#undef G1
#undef G2
#undef UNARY_GRAD

/* Sum / Mean: dy (divided by the input count for Mean) summed back to each input's shape. */
static dl_status grad_sum(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy, dl_value **dx) {
    dl_value *g = dy[0];
    if (strcmp(n->op->name, "Mean") == 0) g = gmul(gc, g, gk(gc, 1.0 / n->n_in, n->out[0]));
    for (int i = 0; i < n->n_in; i++)
        if (dg_needs(gc, n, i)) dx[i] = dg_sum_to(gc, g, n->in[i]);
    return dg_status(gc);
}

/* Min / Max: dy goes to the inputs equal to the result; a tie splits it evenly among the tied
 * inputs (PyTorch's maximum/minimum for two inputs, generalised). Where the result is NaN no
 * input equals it and the gradient is NaN. */
static dl_status grad_minmax(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy,
                             dl_value **dx) {
    dl_value *y = n->out[0];
    if (n->n_in == 1) {
        dx[0] = dy[0];
        return dg_status(gc);
    }
    dl_value *mask[64];
    if (n->n_in > 64) return dg_refuse(gc, n, "over 64 inputs");
    for (int i = 0; i < n->n_in; i++)
        mask[i] = gcast(gc, dg_op2(gc, "Equal", n->in[i], y, NULL), y->type.dtype);
    dl_value *share = dg_op2(gc, "Div", dy[0], dg_op(gc, "Sum", n->n_in, mask, NULL), NULL);
    for (int i = 0; i < n->n_in; i++)
        if (dg_needs(gc, n, i)) dx[i] = dg_sum_to(gc, gmul(gc, share, mask[i]), n->in[i]);
    return dg_status(gc);
}

/* A Clip bound: input i (opset 11+) or the attribute (earlier) as a constant; NULL if absent. */
static dl_value *clip_bound(dl_grad_ctx *gc, const dl_node *n, int i) {
    if (n->opset >= 11) return i < n->n_in ? n->in[i] : NULL;
    const char *name = i == 1 ? "min" : "max";
    if (!dl_node_attr(n, name)) return NULL;
    return gk(gc, dl_attr_float(n, name, 0.0f), n->in[0]);
}

/* dy restricted to pred, summed to a bound's shape. */
static dl_value *clip_bound_grad(dl_grad_ctx *gc, dl_value *pred, dl_value *dy, dl_value *bound) {
    dl_value *g = dg_op3(gc, "Where", pred, dy, gk(gc, 0, dy), NULL);
    return dg_reshape_like(gc, dg_op1(gc, "ReduceSum", g, "keepdims=0"), bound);
}

/* As PyTorch's clamp: x gets dy where min <= x <= max; min gets it where x < min (and
 * min < max); max where x > max (or max < min, where the result is max everywhere). */
static dl_status grad_clip(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy, dl_value **dx) {
    dl_value *x = n->in[0], *lo = clip_bound(gc, n, 1), *hi = clip_bound(gc, n, 2);
    if (dg_needs(gc, n, 0)) {
        dl_value *in = NULL;
        if (lo) in = dg_op2(gc, "GreaterOrEqual", x, lo, NULL);
        if (hi) {
            dl_value *below = dg_op2(gc, "LessOrEqual", x, hi, NULL);
            in = in ? dg_op2(gc, "And", in, below, NULL) : below;
        }
        dx[0] =
            in ? dg_reshape_like(gc, dg_op3(gc, "Where", in, dy[0], gk(gc, 0, x), NULL), x) : dy[0];
    }
    if (lo && dg_needs(gc, n, 1)) {
        dl_value *pred = dg_op2(gc, "Less", x, lo, NULL);
        if (hi) pred = dg_op2(gc, "And", pred, dg_op2(gc, "Less", lo, hi, NULL), NULL);
        dx[1] = clip_bound_grad(gc, pred, dy[0], lo);
    }
    if (hi && dg_needs(gc, n, 2)) {
        dl_value *pred = dg_op2(gc, "Greater", x, hi, NULL);
        if (lo) pred = dg_op2(gc, "Or", pred, dg_op2(gc, "Less", hi, lo, NULL), NULL);
        dx[2] = clip_bound_grad(gc, pred, dy[0], hi);
    }
    return dg_status(gc);
}

#define BINARY(NAME, INFER, REF, GRAD)                                                             \
    {                                                                                              \
        .name = NAME, .min_in = 2, .max_in = 2, .min_out = 1, .max_out = 1, .infer = INFER,        \
        .ref = REF, .grad = GRAD                                                                   \
    }
#define UNARY(NAME, INFER, REF, GRAD)                                                              \
    {                                                                                              \
        .name = NAME, .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1, .infer = INFER,        \
        .ref = REF, .grad = GRAD                                                                   \
    }
#define VARIADIC(NAME, INFER, REF, GRAD)                                                           \
    {                                                                                              \
        .name = NAME, .min_in = 1, .max_in = DL_VARIADIC, .min_out = 1, .max_out = 1,              \
        .infer = INFER, .ref = REF, .grad = GRAD                                                   \
    }

const dl_op_def dl_ops_elementwise[] = {
    BINARY("Add", infer_arith, ref_add, grad_add),
    BINARY("Sub", infer_arith, ref_sub, grad_sub),
    BINARY("Mul", infer_arith, ref_mul, grad_mul),
    BINARY("Div", infer_arith, ref_div, grad_div),
    BINARY("Pow", infer_pow, ref_pow, grad_pow),
    {.name = "Mod",
     .min_in = 2,
     .max_in = 2,
     .min_out = 1,
     .max_out = 1,
     .attrs = mod_attrs,
     .infer = infer_mod,
     .ref = ref_mod},
    {.name = "BitShift",
     .min_in = 2,
     .max_in = 2,
     .min_out = 1,
     .max_out = 1,
     .attrs = bitshift_attrs,
     .infer = infer_bitshift,
     .ref = ref_bitshift},
    UNARY("Neg", infer_unary_signed, ref_neg, grad_neg),
    UNARY("Abs", infer_unary_numeric, ref_abs, grad_abs),
    UNARY("Sign", infer_unary_numeric, ref_sign, grad_step),
    UNARY("Reciprocal", infer_unary_float, ref_reciprocal, grad_reciprocal),
    UNARY("Sqrt", infer_unary_float, ref_sqrt, grad_sqrt),
    UNARY("Exp", infer_unary_float, ref_exp, grad_exp),
    UNARY("Log", infer_unary_float, ref_log, grad_log),
    UNARY("Ceil", infer_unary_float, ref_ceil, grad_step),
    UNARY("Floor", infer_unary_float, ref_floor, grad_step),
    UNARY("Round", infer_unary_float, ref_round, grad_step),
    UNARY("Erf", infer_unary_float, ref_erf, grad_erf),
    UNARY("Sin", infer_unary_float, ref_sin, grad_sin),
    UNARY("Cos", infer_unary_float, ref_cos, grad_cos),
    UNARY("Tan", infer_unary_float, ref_tan, grad_tan),
    UNARY("Asin", infer_unary_float, ref_asin, grad_asin),
    UNARY("Acos", infer_unary_float, ref_acos, grad_acos),
    UNARY("Atan", infer_unary_float, ref_atan, grad_atan),
    UNARY("Sinh", infer_unary_float, ref_sinh, grad_sinh),
    UNARY("Cosh", infer_unary_float, ref_cosh, grad_cosh),
    UNARY("Asinh", infer_unary_float, ref_asinh, grad_asinh),
    UNARY("Acosh", infer_unary_float, ref_acosh, grad_acosh),
    UNARY("Atanh", infer_unary_float, ref_atanh, grad_atanh),
    VARIADIC("Sum", infer_sum, ref_sum, grad_sum),
    VARIADIC("Mean", infer_mean, ref_mean, grad_sum),
    VARIADIC("Min", infer_sum, ref_min, grad_minmax),
    VARIADIC("Max", infer_sum, ref_max, grad_minmax),
    {.name = "Clip",
     .min_in = 1,
     .max_in = 3,
     .min_out = 1,
     .max_out = 1,
     .attrs = clip_attrs,
     .infer = infer_clip,
     .ref = ref_clip,
     .grad = grad_clip,
     .epilogue = epi_clip},
    {.name = NULL},
};
