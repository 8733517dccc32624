/* cast.c — op family "cast" (rows of the op table): Cast and CastLike.
 *
 * Conversions: float→float rounds to nearest; int→float exact where representable; float→int
 * truncates toward zero (NaN → 0, values outside int64/uint64 saturate there, then narrower
 * integer types wrap, as numpy's astype does on common platforms — ONNX leaves out-of-range
 * float→int undefined); int→int wraps; anything→bool is "!= 0" (NaN → true); bool→x is 0/1.
 * The saturate attribute (opset 19) only concerns float8 targets, which dlcc does not support.
 * String, complex, float8 and 4-bit types are unsupported with a clear error. */
#include "op-impl.h"
#include "../train/grad.h"

#include <math.h>

enum { K_F, K_S, K_U }; /* float, signed (and bool), unsigned */

static int kind_of(dl_dtype t) {
    if (dl_dtype_is_float(t)) return K_F;
    if (t == DL_BOOL || dl_dtype_is_signed(t)) return K_S;
    return K_U;
}

static const dl_dtype k_castable[] = {
    DL_F32, DL_F64, DL_F16, DL_BF16, DL_I8,  DL_U8,   DL_I16,
    DL_U16, DL_I32, DL_U32, DL_I64,  DL_U64, DL_BOOL, DL_DTYPE_UNDEFINED};

static dl_status infer_target(dl_infer *ic, dl_dtype to) {
    DL_TRY(dl_infer_require_dtype(ic, 0, k_castable));
    DL_TRY(dl_infer_same(ic, 0, 0));
    ic->out[0].dtype = to;
    return DL_OK;
}

static dl_status infer_cast(dl_infer *ic) {
    const dl_attr *a = dl_node_attr(ic->node, "to");
    if (!a) return dl_infer_fail(ic, DL_ERR_INVALID, "attribute 'to' is required");
    dl_dtype to = dl_dtype_from_onnx(a->i);
    if (to == DL_DTYPE_UNDEFINED) {
        if (strcmp(dl_onnx_type_name(a->i), "unknown") != 0)
            return dl_infer_fail(ic, DL_ERR_UNSUPPORTED, "Cast to %s is not supported by dlcc",
                                 dl_onnx_type_name(a->i));
        return dl_infer_fail(ic, DL_ERR_INVALID, "attribute 'to' has unknown data type %lld",
                             (long long)a->i);
    }
    return infer_target(ic, to);
}

static dl_status infer_castlike(dl_infer *ic) {
    DL_TRY(dl_infer_require_dtype(ic, 1, k_castable));
    return infer_target(ic, ic->in[1]->dtype);
}

/* ---------------------------------------------------------------- the kernel */

static void cast_elem(const dl_tensor *x, int64_t i, dl_tensor *o) {
    int ks = kind_of(x->dtype), kd = kind_of(o->dtype);
    if (o->dtype == DL_BOOL) {
        bool v =
            ks == K_F ? dl_get_f64(x, i) != 0.0 || isnan(dl_get_f64(x, i)) : dl_get_i64(x, i) != 0;
        dl_set_i64(o, i, v);
    } else if (kd == K_F) {
        double v;
        if (ks == K_F)
            v = dl_get_f64(x, i);
        else if (ks == K_S)
            v = (double)dl_get_i64(x, i);
        else
            v = (double)(uint64_t)dl_get_i64(x, i);
        dl_set_f64(o, i, v);
    } else if (ks != K_F) {
        dl_set_i64(o, i, dl_get_i64(x, i)); /* int → int wraps */
    } else {
        double v = dl_get_f64(x, i);
        int64_t r;
        if (isnan(v))
            r = 0;
        else if (kd == K_U && v >= 9223372036854775808.0)
            r = (int64_t)(v >= 18446744073709551616.0 ? UINT64_MAX : (uint64_t)v);
        else if (v >= 9223372036854775808.0)
            r = INT64_MAX;
        else if (v < -9223372036854775808.0)
            r = INT64_MIN;
        else
            r = (int64_t)v;
        dl_set_i64(o, i, r);
    }
}

static dl_status ref_cast(dl_kernel *kc) {
    const dl_tensor *x = kc->in[0];
    dl_tensor *o = kc->out[0];
    if (!o->data) {
        const dl_type *ty = &kc->out_type[0];
        if (!dl_type_known(ty))
            return dl_kernel_fail(kc, DL_ERR_INTERNAL, "output shape not known");
        DL_TRY(dl_kernel_alloc_out(kc, 0, ty->dtype, ty->rank, ty->dims));
        o = kc->out[0];
    }
    if (o->numel != x->numel)
        return dl_kernel_fail(kc, DL_ERR_INTERNAL, "output size does not match the input");
    if (o->dtype == x->dtype) {
        if (o->numel) memcpy(o->data, x->data, (size_t)o->numel * dl_dtype_size(o->dtype));
        return DL_OK;
    }
    for (int64_t i = 0; i < x->numel; i++) cast_elem(x, i, o);
    return DL_OK;
}

/* ---------------------------------------------------------------- the rows */

static const dl_attr_spec cast_attrs[] = {
    {"to", DL_ATTR_INT}, {"saturate", DL_ATTR_INT}, {NULL, 0}};
static const dl_attr_spec castlike_attrs[] = {{"saturate", DL_ATTR_INT}, {NULL, 0}};

/* ---- gradient rule (grad.h) ---- */

/* Cast / CastLike between floating dtypes: dy cast back to the input's dtype. An integer or bool
 * side carries no gradient (autodiff never asks), nor does CastLike's target_type input. */
static dl_status grad_cast(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy, dl_value **dx) {
    if (!dg_needs(gc, n, 0) || !dl_dtype_is_float(dy[0]->type.dtype)) return dg_status(gc);
    char to[32];
    snprintf(to, sizeof to, "to=%d", (int)dl_dtype_to_onnx(n->in[0]->type.dtype));
    dx[0] = dg_op1(gc, "Cast", dy[0], to);
    return dg_status(gc);
}

const dl_op_def dl_ops_cast[] = {
    {.name = "Cast",
     .min_in = 1,
     .max_in = 1,
     .min_out = 1,
     .max_out = 1,
     .attrs = cast_attrs,
     .infer = infer_cast,
     .ref = ref_cast,
     .grad = grad_cast},
    {.name = "CastLike",
     .min_in = 2,
     .max_in = 2,
     .min_out = 1,
     .max_out = 1,
     .attrs = castlike_attrs,
     .infer = infer_castlike,
     .ref = ref_cast,
     .grad = grad_cast},
    {.name = NULL},
};
