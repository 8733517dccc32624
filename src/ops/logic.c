/* logic.c — op family "logic" (rows of the op table): comparisons, boolean logic, IsNaN/IsInf,
 * Where, bitwise ops. Comparisons are exact per dtype (double for floats, int64 for signed,
 * uint64 for unsigned). */
#include "op-impl.h"
#include "../train/grad.h"

#include <math.h>

enum { K_F, K_S, K_U }; /* float, signed (and bool), unsigned compute paths */

static int kind_of(dl_dtype t) {
    if (dl_dtype_is_float(t)) return K_F;
    if (t == DL_BOOL || dl_dtype_is_signed(t)) return K_S;
    return K_U;
}

static const dl_dtype k_numeric[] = {
    DL_F32, DL_F64, DL_F16, DL_BF16,           DL_I8, DL_U8, DL_I16, DL_U16, DL_I32,
    DL_U32, DL_I64, DL_U64, DL_DTYPE_UNDEFINED};
static const dl_dtype k_numeric_bool[] = {
    DL_F32, DL_F64, DL_F16, DL_BF16, DL_I8,  DL_U8,   DL_I16,
    DL_U16, DL_I32, DL_U32, DL_I64,  DL_U64, DL_BOOL, DL_DTYPE_UNDEFINED};
static const dl_dtype k_ints[] = {
    DL_I8, DL_U8, DL_I16, DL_U16, DL_I32, DL_U32, DL_I64, DL_U64, DL_DTYPE_UNDEFINED};
static const dl_dtype k_bool[] = {DL_BOOL, DL_DTYPE_UNDEFINED};


/* Strides of t broadcast to o's shape; error when t does not broadcast. */
static dl_status bc_strides(dl_kernel *kc, const dl_tensor *t, const dl_tensor *o, int64_t *st) {
    int rank = o->rank;
    if (t->rank > rank)
        return dl_kernel_fail(kc, DL_ERR_SHAPE, "input does not broadcast to the output shape");
    int64_t s = 1;
    for (int d = rank - 1; d >= 0; d--) {
        int td = d - (rank - t->rank);
        int64_t n = td < 0 ? 1 : t->dims[td];
        if (n != 1 && n != o->dims[d])
            return dl_kernel_fail(kc, DL_ERR_SHAPE, "input does not broadcast to the output shape");
        st[d] = n == 1 ? 0 : s;
        s *= n;
    }
    return DL_OK;
}

static int64_t bc_off(const int64_t *idx, int rank, const int64_t *st) {
    int64_t off = 0;
    for (int d = 0; d < rank; d++) off += idx[d] * st[d];
    return off;
}

/* ---------------------------------------------------------------- binary ops */

typedef enum bin_op {
    B_EQ,
    B_GT,
    B_LT,
    B_GE,
    B_LE,
    B_AND,
    B_OR,
    B_XOR,
    B_BAND,
    B_BOR,
    B_BXOR,
} bin_op;

static int cmp_result(bin_op op, int c) { /* c: -1, 0, 1 */
    switch (op) {
    case B_EQ:
        return c == 0;
    case B_GT:
        return c > 0;
    case B_LT:
        return c < 0;
    case B_GE:
        return c >= 0;
    case B_LE:
        return c <= 0;
    default:
        return 0;
    }
}

static dl_status binary_run(dl_kernel *kc, bin_op op) {
    const dl_tensor *a = kc->in[0], *b = kc->in[1];
    dl_tensor *o;
    DL_TRY(dl_kernel_out(kc, 0, &o));
    if (a->dtype != b->dtype) return dl_kernel_fail(kc, DL_ERR_TYPE, "inputs must share one dtype");
    int64_t sa[DL_MAX_RANK], sb[DL_MAX_RANK], idx[DL_MAX_RANK] = {0};
    DL_TRY(bc_strides(kc, a, o, sa));
    DL_TRY(bc_strides(kc, b, o, sb));
    int k = kind_of(a->dtype);
    for (int64_t i = 0; i < o->numel; i++) {
        int64_t ia = bc_off(idx, o->rank, sa), ib = bc_off(idx, o->rank, sb);
        if (op <= B_LE) {
            int c;
            if (k == K_F) {
                double x = dl_get_f64(a, ia), y = dl_get_f64(b, ib);
                if (isnan(x) || isnan(y)) {
                    dl_set_i64(o, i, 0); /* every comparison with NaN is false */
                    dl_index_next(o->rank, o->dims, idx);
                    continue;
                }
                c = (x > y) - (x < y);
            } else if (k == K_S) {
                int64_t x = dl_get_i64(a, ia), y = dl_get_i64(b, ib);
                c = (x > y) - (x < y);
            } else {
                uint64_t x = (uint64_t)dl_get_i64(a, ia), y = (uint64_t)dl_get_i64(b, ib);
                c = (x > y) - (x < y);
            }
            dl_set_i64(o, i, cmp_result(op, c));
        } else {
            int64_t x = dl_get_i64(a, ia), y = dl_get_i64(b, ib), r;
            switch (op) {
            case B_AND:
                r = (x != 0) && (y != 0);
                break;
            case B_OR:
                r = (x != 0) || (y != 0);
                break;
            case B_XOR:
                r = (x != 0) != (y != 0);
                break;
            case B_BAND:
                r = x & y;
                break;
            case B_BOR:
                r = x | y;
                break;
            default:
                r = x ^ y;
                break;
            }
            dl_set_i64(o, i, r);
        }
        dl_index_next(o->rank, o->dims, idx);
    }
    return DL_OK;
}

#define BIN_REF(NAME, OP)                                                                          \
    static dl_status ref_##NAME(dl_kernel *kc) {                                                   \
        return binary_run(kc, OP);                                                                 \
    }
BIN_REF(equal, B_EQ)
BIN_REF(greater, B_GT)
BIN_REF(less, B_LT)
BIN_REF(greater_equal, B_GE)
BIN_REF(less_equal, B_LE)
BIN_REF(and, B_AND)
BIN_REF(or, B_OR)
BIN_REF(xor, B_XOR)
BIN_REF(bitwise_and, B_BAND)
BIN_REF(bitwise_or, B_BOR)
BIN_REF(bitwise_xor, B_BXOR)
#undef BIN_REF

static dl_status infer_binary(dl_infer *ic, const dl_dtype *allowed, bool to_bool) {
    static const int idx[2] = {0, 1};
    DL_TRY(dl_infer_require_dtype(ic, 0, allowed));
    DL_TRY(dl_infer_require_dtype(ic, 1, allowed));
    DL_TRY(dl_infer_same_dtype(ic, 2, idx));
    DL_TRY(dl_infer_broadcast(ic, 0, 2, idx));
    if (to_bool) ic->out[0].dtype = DL_BOOL;
    return DL_OK;
}

static dl_status infer_equal(dl_infer *ic) {
    return infer_binary(ic, k_numeric_bool, true);
}
static dl_status infer_compare(dl_infer *ic) {
    return infer_binary(ic, k_numeric, true);
}
static dl_status infer_logical(dl_infer *ic) {
    return infer_binary(ic, k_bool, true);
}
static dl_status infer_bitwise(dl_infer *ic) {
    return infer_binary(ic, k_ints, false);
}

/* ---------------------------------------------------------------- unary ops */

static dl_status infer_not(dl_infer *ic) {
    DL_TRY(dl_infer_require_dtype(ic, 0, k_bool));
    return dl_infer_same(ic, 0, 0);
}

static dl_status infer_bitwise_not(dl_infer *ic) {
    DL_TRY(dl_infer_require_dtype(ic, 0, k_ints));
    return dl_infer_same(ic, 0, 0);
}

static dl_status infer_isx(dl_infer *ic) {
    DL_TRY(dl_infer_require_float(ic, 0));
    DL_TRY(dl_infer_same(ic, 0, 0));
    ic->out[0].dtype = DL_BOOL;
    return DL_OK;
}

static dl_status unary_prep(dl_kernel *kc, dl_tensor **o) {
    DL_TRY(dl_kernel_out(kc, 0, o));
    if ((*o)->numel != kc->in[0]->numel)
        return dl_kernel_fail(kc, DL_ERR_INTERNAL, "output size does not match the input");
    return DL_OK;
}

static dl_status ref_not(dl_kernel *kc) {
    dl_tensor *o;
    DL_TRY(unary_prep(kc, &o));
    for (int64_t i = 0; i < o->numel; i++) dl_set_i64(o, i, dl_get_i64(kc->in[0], i) == 0);
    return DL_OK;
}

static dl_status ref_bitwise_not(dl_kernel *kc) {
    dl_tensor *o;
    DL_TRY(unary_prep(kc, &o));
    for (int64_t i = 0; i < o->numel; i++) dl_set_i64(o, i, ~dl_get_i64(kc->in[0], i));
    return DL_OK;
}

static dl_status ref_isnan(dl_kernel *kc) {
    dl_tensor *o;
    DL_TRY(unary_prep(kc, &o));
    for (int64_t i = 0; i < o->numel; i++) dl_set_i64(o, i, isnan(dl_get_f64(kc->in[0], i)) != 0);
    return DL_OK;
}

static dl_status ref_isinf(dl_kernel *kc) {
    dl_tensor *o;
    DL_TRY(unary_prep(kc, &o));
    bool pos = dl_attr_int(kc->node, "detect_positive", 1) != 0;
    bool neg = dl_attr_int(kc->node, "detect_negative", 1) != 0;
    for (int64_t i = 0; i < o->numel; i++) {
        double v = dl_get_f64(kc->in[0], i);
        dl_set_i64(o, i, isinf(v) && ((v > 0 && pos) || (v < 0 && neg)));
    }
    return DL_OK;
}

/* ---------------------------------------------------------------- Where */

static dl_status infer_where(dl_infer *ic) {
    static const int xy[2] = {1, 2};
    static const int all[3] = {1, 2, 0}; /* dtype from X */
    DL_TRY(dl_infer_require_dtype(ic, 0, k_bool));
    DL_TRY(dl_infer_require_dtype(ic, 1, k_numeric_bool));
    DL_TRY(dl_infer_require_dtype(ic, 2, k_numeric_bool));
    DL_TRY(dl_infer_same_dtype(ic, 2, xy));
    return dl_infer_broadcast(ic, 0, 3, all);
}

static dl_status ref_where(dl_kernel *kc) {
    const dl_tensor *c = kc->in[0], *x = kc->in[1], *y = kc->in[2];
    dl_tensor *o;
    DL_TRY(dl_kernel_out(kc, 0, &o));
    if (x->dtype != o->dtype || y->dtype != o->dtype || c->dtype != DL_BOOL)
        return dl_kernel_fail(kc, DL_ERR_TYPE, "dtypes do not match the inferred ones");
    int64_t sc[DL_MAX_RANK], sx[DL_MAX_RANK], sy[DL_MAX_RANK], idx[DL_MAX_RANK] = {0};
    DL_TRY(bc_strides(kc, c, o, sc));
    DL_TRY(bc_strides(kc, x, o, sx));
    DL_TRY(bc_strides(kc, y, o, sy));
    size_t es = dl_dtype_size(o->dtype);
    char *dst = o->data;
    for (int64_t i = 0; i < o->numel; i++) {
        bool pick_x = dl_get_i64(c, bc_off(idx, o->rank, sc)) != 0;
        const dl_tensor *src = pick_x ? x : y;
        int64_t off = bc_off(idx, o->rank, pick_x ? sx : sy);
        memcpy(dst + (size_t)i * es, (const char *)src->data + (size_t)off * es, es);
        dl_index_next(o->rank, o->dims, idx);
    }
    return DL_OK;
}

/* Where: dy goes to X where the condition holds and to Y elsewhere, summed back over the axes
 * each was broadcast along. The condition (bool) and the comparisons and logic ops (bool
 * results) carry no gradient and have no rule. */
static dl_status grad_where(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy, dl_value **dx) {
    dl_value *zero = dg_scalar(gc, 0, n->out[0]->type.dtype);
    if (dg_needs(gc, n, 1))
        dx[1] = dg_sum_to(gc, dg_op3(gc, "Where", n->in[0], dy[0], zero, NULL), n->in[1]);
    if (dg_needs(gc, n, 2))
        dx[2] = dg_sum_to(gc, dg_op3(gc, "Where", n->in[0], zero, dy[0], NULL), n->in[2]);
    return dg_status(gc);
}

/* ---------------------------------------------------------------- the rows */

static const dl_attr_spec isinf_attrs[] = {
    {"detect_positive", DL_ATTR_INT}, {"detect_negative", DL_ATTR_INT}, {NULL, 0}};

#define OP(NAME, NIN, ATTRS, INFER, REF)                                                           \
    {                                                                                              \
        .name = NAME, .min_in = NIN, .max_in = NIN, .min_out = 1, .max_out = 1, .attrs = ATTRS,    \
        .infer = INFER, .ref = REF                                                                 \
    }
#define OP_GRAD(NAME, NIN, INFER, REF, GRAD)                                                       \
    {                                                                                              \
        .name = NAME, .min_in = NIN, .max_in = NIN, .min_out = 1, .max_out = 1, .infer = INFER,    \
        .ref = REF, .grad = GRAD                                                                   \
    }

const dl_op_def dl_ops_logic[] = {
    OP("Equal", 2, NULL, infer_equal, ref_equal),
    OP("Greater", 2, NULL, infer_compare, ref_greater),
    OP("Less", 2, NULL, infer_compare, ref_less),
    OP("GreaterOrEqual", 2, NULL, infer_compare, ref_greater_equal),
    OP("LessOrEqual", 2, NULL, infer_compare, ref_less_equal),
    OP("And", 2, NULL, infer_logical, ref_and),
    OP("Or", 2, NULL, infer_logical, ref_or),
    OP("Xor", 2, NULL, infer_logical, ref_xor),
    OP("Not", 1, NULL, infer_not, ref_not),
    OP("IsNaN", 1, NULL, infer_isx, ref_isnan),
    OP("IsInf", 1, isinf_attrs, infer_isx, ref_isinf),
    OP_GRAD("Where", 3, infer_where, ref_where, grad_where),
    OP("BitwiseAnd", 2, NULL, infer_bitwise, ref_bitwise_and),
    OP("BitwiseOr", 2, NULL, infer_bitwise, ref_bitwise_or),
    OP("BitwiseXor", 2, NULL, infer_bitwise, ref_bitwise_xor),
    OP("BitwiseNot", 1, NULL, infer_bitwise_not, ref_bitwise_not),
    {.name = NULL},
};
