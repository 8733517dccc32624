/* create.c — op family "create" (rows of the op table): ops that make tensors from attributes or
 * from shape-like inputs (Constant, ConstantOfShape, Range, EyeLike). */
#include "op-impl.h"

#include <math.h>

#define R DL_MAX_RANK

/* ---- local helpers ---- */

static dl_status check_out(dl_kernel *kc, int o, dl_dtype dt, int64_t numel) {
    const dl_tensor *y = kc->out[o];
    if (y->dtype != dt || y->numel != numel || (numel > 0 && !y->data))
        return dl_kernel_fail(kc, DL_ERR_INTERNAL, "output %d has an unexpected shape", o);
    return DL_OK;
}

static void set_one(dl_tensor *t, int64_t i, double v) {
    if (dl_dtype_is_float(t->dtype))
        dl_set_f64(t, i, v);
    else
        dl_set_i64(t, i, (int64_t)v);
}

/* ---- Constant ---- */

static const dl_attr_spec constant_attrs[] = {
    {"value", DL_ATTR_TENSOR},          {"value_float", DL_ATTR_FLOAT},
    {"value_floats", DL_ATTR_FLOATS},   {"value_int", DL_ATTR_INT},
    {"value_ints", DL_ATTR_INTS},       {"value_string", DL_ATTR_STRING},
    {"value_strings", DL_ATTR_STRINGS}, {NULL, 0}};

/* The one value attribute of a Constant node. */
static dl_status constant_attr(dl_infer *ic, const dl_attr **out) {
    static const char *const names[] = {"value",         "value_float", "value_floats",
                                        "value_int",     "value_ints",  "value_string",
                                        "value_strings", "sparse_value"};
    const dl_attr *found = NULL;
    for (size_t i = 0; i < DL_ARRAY_LEN(names); i++) {
        const dl_attr *a = dl_node_attr(ic->node, names[i]);
        if (!a) continue;
        if (found)
            return dl_infer_fail(ic, DL_ERR_INVALID, "Constant has both '%s' and '%s'", found->name,
                                 a->name);
        found = a;
    }
    if (!found) return dl_infer_fail(ic, DL_ERR_INVALID, "Constant has no value attribute");
    if (!strcmp(found->name, "sparse_value"))
        return dl_infer_fail(ic, DL_ERR_UNSUPPORTED, "sparse Constant values are not supported");
    if (!strncmp(found->name, "value_string", 12))
        return dl_infer_fail(ic, DL_ERR_UNSUPPORTED, "string Constant values are not supported");
    if (!strcmp(found->name, "value") && (!found->t || found->t->dtype == DL_DTYPE_UNDEFINED))
        return dl_infer_fail(ic, DL_ERR_UNSUPPORTED, "Constant value has an unsupported dtype");
    if (found->type == DL_ATTR_FLOATS || found->type == DL_ATTR_INTS) {
        if (found->n < 0) return dl_infer_fail(ic, DL_ERR_INVALID, "bad list attribute");
    }
    *out = found;
    return DL_OK;
}

static dl_status constant_infer(dl_infer *ic) {
    const dl_attr *a = NULL;
    DL_TRY(constant_attr(ic, &a));
    int64_t n = a->n;
    switch (a->type) {
    case DL_ATTR_TENSOR:
        return dl_infer_set(ic, 0, a->t->dtype, a->t->rank, a->t->dims);
    case DL_ATTR_FLOAT:
        return dl_infer_set(ic, 0, DL_F32, 0, NULL);
    case DL_ATTR_INT:
        return dl_infer_set(ic, 0, DL_I64, 0, NULL);
    case DL_ATTR_FLOATS:
        return dl_infer_set(ic, 0, DL_F32, 1, &n);
    case DL_ATTR_INTS:
        return dl_infer_set(ic, 0, DL_I64, 1, &n);
    default:
        return dl_infer_fail(ic, DL_ERR_UNSUPPORTED, "unsupported Constant attribute");
    }
}

static dl_status constant_ref(dl_kernel *kc) {
    DL_TRY(dl_kernel_outs(kc));
    dl_tensor *y = kc->out[0];
    const dl_attr *a = NULL;
    static const char *const names[] = {"value", "value_float", "value_floats", "value_int",
                                        "value_ints"};
    for (size_t i = 0; i < DL_ARRAY_LEN(names) && !a; i++) a = dl_node_attr(kc->node, names[i]);
    if (!a) return dl_kernel_fail(kc, DL_ERR_INTERNAL, "Constant has no value");
    switch (a->type) {
    case DL_ATTR_TENSOR:
        DL_TRY(check_out(kc, 0, a->t->dtype, a->t->numel));
        if (a->t->nbytes != y->nbytes) return dl_kernel_fail(kc, DL_ERR_INTERNAL, "size mismatch");
        if (y->nbytes > 0) memcpy(y->data, a->t->data, y->nbytes);
        break;
    case DL_ATTR_FLOAT:
        DL_TRY(check_out(kc, 0, DL_F32, 1));
        dl_set_f64(y, 0, a->f);
        break;
    case DL_ATTR_INT:
        DL_TRY(check_out(kc, 0, DL_I64, 1));
        dl_set_i64(y, 0, a->i);
        break;
    case DL_ATTR_FLOATS:
        DL_TRY(check_out(kc, 0, DL_F32, a->n));
        for (int i = 0; i < a->n; i++) dl_set_f64(y, i, a->floats[i]);
        break;
    case DL_ATTR_INTS:
        DL_TRY(check_out(kc, 0, DL_I64, a->n));
        for (int i = 0; i < a->n; i++) dl_set_i64(y, i, a->ints[i]);
        break;
    default:
        return dl_kernel_fail(kc, DL_ERR_UNSUPPORTED, "unsupported Constant attribute");
    }
    return DL_OK;
}

/* ---- ConstantOfShape ---- */

static const dl_attr_spec cos_attrs[] = {{"value", DL_ATTR_TENSOR}, {NULL, 0}};

static dl_status cos_infer(dl_infer *ic) {
    const dl_tensor *v = dl_attr_tensor(ic->node, "value");
    dl_dtype dt = DL_F32;
    if (v) {
        if (v->dtype == DL_DTYPE_UNDEFINED)
            return dl_infer_fail(ic, DL_ERR_UNSUPPORTED, "value has an unsupported dtype");
        if (v->numel != 1)
            return dl_infer_fail(ic, DL_ERR_INVALID, "value must have one element, has %lld",
                                 (long long)v->numel);
        dt = v->dtype;
    }
    const dl_type *s = ic->in[0];
    if (!dl_dtype_is_int(s->dtype))
        return dl_infer_fail(ic, DL_ERR_TYPE, "shape must be int64, got %s",
                             dl_dtype_name(s->dtype));
    if (s->rank != DL_RANK_UNKNOWN && s->rank != 1)
        return dl_infer_fail(ic, DL_ERR_SHAPE, "shape must be 1-D, got rank %d", s->rank);
    int64_t dims[R];
    int n;
    bool known;
    DL_TRY(dl_infer_const_ints(ic, 0, dims, R, &n, &known));
    if (!known) {
        if (s->rank == 1 && s->dims[0] >= 0) {
            if (s->dims[0] > R)
                return dl_infer_fail(ic, DL_ERR_UNSUPPORTED, "output rank %lld exceeds %d",
                                     (long long)s->dims[0], R);
            return dl_infer_set(ic, 0, dt, (int)s->dims[0], NULL);
        }
        ic->out[0].dtype = dt;
        return DL_OK;
    }
    for (int i = 0; i < n; i++)
        if (dims[i] < 0)
            return dl_infer_fail(ic, DL_ERR_INVALID, "shape[%d] = %lld is negative", i,
                                 (long long)dims[i]);
    int64_t numel = 1;
    for (int i = 0; i < n; i++)
        if (__builtin_mul_overflow(numel, dims[i], &numel))
            return dl_infer_fail(ic, DL_ERR_LIMIT, "output shape is too large");
    return dl_infer_set(ic, 0, dt, n, dims);
}

static dl_status cos_ref(dl_kernel *kc) {
    DL_TRY(dl_kernel_outs(kc));
    dl_tensor *y = kc->out[0];
    const dl_tensor *v = dl_attr_tensor(kc->node, "value");
    if (!v) {
        DL_TRY(check_out(kc, 0, DL_F32, y->numel));
        if (y->nbytes) memset(y->data, 0, y->nbytes);
        return DL_OK;
    }
    DL_TRY(check_out(kc, 0, v->dtype, y->numel));
    size_t es = dl_dtype_size(v->dtype);
    for (int64_t i = 0; i < y->numel; i++) memcpy((char *)y->data + (size_t)i * es, v->data, es);
    return DL_OK;
}

/* ---- Range ---- */

#define RANGE_MAX ((int64_t)1 << 40)

/* Element count of a range, or an error for delta 0 / non-finite values / huge counts. */
static dl_status range_count(dl_infer *ic, const dl_tensor *s, const dl_tensor *l,
                             const dl_tensor *d, int64_t *n) {
    if (s->numel != 1 || l->numel != 1 || d->numel != 1)
        return dl_infer_fail(ic, DL_ERR_SHAPE, "start, limit and delta must be scalars");
    if (dl_dtype_is_float(s->dtype)) {
        double a = dl_get_f64(s, 0), b = dl_get_f64(l, 0), c = dl_get_f64(d, 0);
        if (!isfinite(a) || !isfinite(b) || !isfinite(c) || c == 0.0)
            return dl_infer_fail(ic, DL_ERR_INVALID, "range needs finite values and delta != 0");
        double cnt = ceil((b - a) / c);
        if (cnt <= 0) cnt = 0;
        if (cnt > (double)RANGE_MAX)
            return dl_infer_fail(ic, DL_ERR_LIMIT, "range has too many elements (%g)", cnt);
        *n = (int64_t)cnt;
        return DL_OK;
    }
    int64_t a = dl_get_i64(s, 0), b = dl_get_i64(l, 0), c = dl_get_i64(d, 0);
    if (c == 0) return dl_infer_fail(ic, DL_ERR_INVALID, "range delta must not be 0");
    uint64_t cnt = 0;
    if (c > 0 && b > a)
        cnt = ((uint64_t)b - (uint64_t)a - 1) / (uint64_t)c + 1;
    else if (c < 0 && a > b)
        cnt = ((uint64_t)a - (uint64_t)b - 1) / ((uint64_t)(-(c + 1)) + 1) + 1;
    if (cnt > (uint64_t)RANGE_MAX)
        return dl_infer_fail(ic, DL_ERR_LIMIT, "range has too many elements (%llu)",
                             (unsigned long long)cnt);
    *n = (int64_t)cnt;
    return DL_OK;
}

static dl_status range_infer(dl_infer *ic) {
    static const dl_dtype ok[] = {DL_F32, DL_F64, DL_F16, DL_BF16,           DL_I16,
                                  DL_I32, DL_I64, DL_I8,  DL_DTYPE_UNDEFINED};
    static const int all[] = {0, 1, 2};
    for (int i = 0; i < 3; i++) {
        DL_TRY(dl_infer_require_dtype(ic, i, ok));
        if (ic->in[i]->rank > 1 ||
            (ic->in[i]->rank == 1 && ic->in[i]->dims[0] >= 0 && ic->in[i]->dims[0] != 1))
            return dl_infer_fail(ic, DL_ERR_SHAPE, "input %d must be a scalar", i);
    }
    DL_TRY(dl_infer_same_dtype(ic, 3, all));
    dl_dtype dt = ic->in[0]->dtype;
    const dl_tensor *s = ic->value ? ic->value[0] : NULL, *l = ic->value ? ic->value[1] : NULL,
                    *d = ic->value ? ic->value[2] : NULL;
    int64_t n = dl_infer_fresh_dim(ic);
    if (s && l && d) DL_TRY(range_count(ic, s, l, d, &n));
    return dl_infer_set(ic, 0, dt, 1, &n);
}

static dl_status range_ref(dl_kernel *kc) {
    DL_TRY(dl_kernel_outs(kc));
    const dl_tensor *s = kc->in[0], *d = kc->in[2];
    dl_tensor *y = kc->out[0];
    if (y->rank != 1 || y->dtype != s->dtype)
        return dl_kernel_fail(kc, DL_ERR_INTERNAL, "range output mismatch");
    if (dl_dtype_is_float(s->dtype)) {
        double a = dl_get_f64(s, 0), c = dl_get_f64(d, 0);
        for (int64_t i = 0; i < y->numel; i++) dl_set_f64(y, i, a + (double)i * c);
    } else {
        uint64_t a = (uint64_t)dl_get_i64(s, 0), c = (uint64_t)dl_get_i64(d, 0);
        for (int64_t i = 0; i < y->numel; i++) dl_set_i64(y, i, (int64_t)(a + (uint64_t)i * c));
    }
    return DL_OK;
}

/* ---- EyeLike ---- */

static const dl_attr_spec eyelike_attrs[] = {{"dtype", DL_ATTR_INT}, {"k", DL_ATTR_INT}, {NULL, 0}};

static dl_status eyelike_infer(dl_infer *ic) {
    const dl_type *x = ic->in[0];
    dl_dtype dt = x->dtype;
    const dl_attr *a = dl_node_attr(ic->node, "dtype");
    if (a) {
        dt = dl_dtype_from_onnx(a->i);
        if (dt == DL_DTYPE_UNDEFINED)
            return dl_infer_fail(ic, DL_ERR_UNSUPPORTED, "dtype %lld is not supported",
                                 (long long)a->i);
    }
    if (x->rank != DL_RANK_UNKNOWN && x->rank != 2)
        return dl_infer_fail(ic, DL_ERR_SHAPE, "EyeLike needs a 2-D input, got rank %d", x->rank);
    if (x->rank == DL_RANK_UNKNOWN) return dl_infer_set(ic, 0, dt, 2, NULL);
    return dl_infer_set(ic, 0, dt, 2, x->dims);
}

static dl_status eyelike_ref(dl_kernel *kc) {
    DL_TRY(dl_kernel_outs(kc));
    const dl_tensor *x = kc->in[0];
    dl_tensor *y = kc->out[0];
    if (y->rank != 2 || x->rank != 2 || y->dims[0] != x->dims[0] || y->dims[1] != x->dims[1])
        return dl_kernel_fail(kc, DL_ERR_INTERNAL, "eyelike output mismatch");
    int64_t k = dl_attr_int(kc->node, "k", 0);
    int64_t rows = y->dims[0], cols = y->dims[1];
    if (y->nbytes) memset(y->data, 0, y->nbytes);
    for (int64_t i = 0; i < rows; i++) {
        if (k > cols || k < -rows) break;
        int64_t j = i + k;
        if (j >= 0 && j < cols) set_one(y, i * cols + j, 1.0);
    }
    return DL_OK;
}

/* ---- the table ---- */

/* clang-format off */
const dl_op_def dl_ops_create[] = {
    {.name = "Constant", .min_in = 0, .max_in = 0, .min_out = 1, .max_out = 1,
     .attrs = constant_attrs, .infer = constant_infer, .ref = constant_ref},
    {.name = "ConstantOfShape", .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1,
     .attrs = cos_attrs, .infer = cos_infer, .ref = cos_ref},
    {.name = "Range", .min_in = 3, .max_in = 3, .min_out = 1, .max_out = 1,
     .infer = range_infer, .ref = range_ref},
    {.name = "EyeLike", .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1,
     .attrs = eyelike_attrs, .infer = eyelike_infer, .ref = eyelike_ref},
    {.name = NULL},
};
/* clang-format on */
