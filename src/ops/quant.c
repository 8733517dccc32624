/* quant.c — op family "quant" (rows of the op table): QuantizeLinear, DequantizeLinear,
 * DynamicQuantizeLinear, MatMulInteger, QLinearMatMul, ConvInteger, QLinearConv.
 *
 * Quantization rounds half to even (rint in the default rounding mode) and saturates to the range
 * of the output dtype. Float math follows the ONNX reference: float32 for float32 inputs. */
#include "op-impl.h"
#include "spatial.h"

#include <math.h>

/* ---- small shared pieces ---- */

static bool q_range(dl_dtype t, int64_t *lo, int64_t *hi) {
    switch (t) {
    case DL_I8:
        *lo = INT8_MIN, *hi = INT8_MAX;
        return true;
    case DL_U8:
        *lo = 0, *hi = UINT8_MAX;
        return true;
    case DL_I16:
        *lo = INT16_MIN, *hi = INT16_MAX;
        return true;
    case DL_U16:
        *lo = 0, *hi = UINT16_MAX;
        return true;
    case DL_I32:
        *lo = INT32_MIN, *hi = INT32_MAX;
        return true;
    default:
        return false;
    }
}

/* Rounds half to even and saturates into [lo, hi]; NaN becomes 0 (then clamped). */
static int64_t q_saturate(double v, int64_t lo, int64_t hi) {
    if (isnan(v)) v = 0;
    v = rint(v);
    if (v <= (double)lo) return lo;
    if (v >= (double)hi) return hi;
    return (int64_t)v;
}

static const dl_dtype q8_types[] = {DL_I8, DL_U8, DL_DTYPE_UNDEFINED};
static const dl_dtype scale_types[] = {DL_F32, DL_F16, DL_F64, DL_DTYPE_UNDEFINED};

static int64_t type_numel(const dl_type *t) {
    if (t->rank < 0) return -1;
    int64_t n = 1;
    for (int i = 0; i < t->rank; i++) {
        if (t->dims[i] < 0) return -1;
        n *= t->dims[i];
    }
    return n;
}

/* Is the type a scalar or a 1-element 1-D tensor (per-tensor parameter)? */
static bool is_scalarish(const dl_type *t) {
    return t->rank == 0 || (t->rank == 1 && t->dims[0] == 1);
}

static dl_status scalar_check(dl_infer *ic, int i, const char *what) {
    if (!dl_has_in(ic, i)) return DL_OK;
    const dl_type *t = ic->in[i];
    if (t->rank < 0) return DL_OK;
    int64_t n = type_numel(t);
    if (t->rank > 1 || (n >= 0 && n != 1))
        return dl_infer_fail(ic, DL_ERR_SHAPE, "%s must be a scalar", what);
    return DL_OK;
}

/* ---- QuantizeLinear / DequantizeLinear ---- */

static const dl_attr_spec qdq_attrs[] = {
    {"axis", DL_ATTR_INT},
    {"saturate", DL_ATTR_INT},
    {NULL, 0},
};

/* Checks the scale (input si) and zero point (zi, optional) against x (input 0). Per-axis needs
 * opset >= 13 and a 1-D scale of length x.dims[axis]. */
static dl_status qdq_check_params(dl_infer *ic, int si, int zi) {
    const dl_type *x = ic->in[0], *s = ic->in[si];
    const dl_type *z = dl_has_in(ic, zi) ? ic->in[zi] : NULL;
    if (s->rank < 0) return DL_OK;
    if (s->rank > 1)
        return dl_infer_fail(ic, DL_ERR_SHAPE, "scale must be a scalar or 1-D, got rank %d",
                             s->rank);
    if (z && z->rank >= 0) {
        if (z->rank > 1 || (z->rank == 1 && s->rank == 0 && z->dims[0] != 1) ||
            (z->rank == 0 && s->rank == 1 && s->dims[0] != 1) ||
            (z->rank == 1 && s->rank == 1 && z->dims[0] >= 0 && s->dims[0] >= 0 &&
             z->dims[0] != s->dims[0]))
            return dl_infer_fail(ic, DL_ERR_SHAPE, "zero point shape must match scale shape");
    }
    if (is_scalarish(s)) return DL_OK;
    if (ic->opset < 13)
        return dl_infer_fail(ic, DL_ERR_SHAPE, "per-axis quantization needs opset 13");
    if (x->rank < 0) return DL_OK;
    int axis;
    DL_TRY(dl_infer_axis(ic, dl_attr_int(ic->node, "axis", 1), x->rank, &axis));
    if (s->dims[0] >= 0 && x->dims[axis] >= 0 && s->dims[0] != x->dims[axis])
        return dl_infer_fail(ic, DL_ERR_SHAPE, "scale has %lld elements, x has %lld along axis %d",
                             (long long)s->dims[0], (long long)x->dims[axis], axis);
    return DL_OK;
}

/* Per-element parameter lookup: channel = (e / inner) % nch (nch == 1: per tensor). */
typedef struct qaxis {
    int64_t nch, inner;
} qaxis;

static dl_status qdq_axis(dl_kernel *kc, const dl_tensor *x, const dl_tensor *s, const dl_tensor *z,
                          qaxis *qa) {
    qa->nch = 1;
    qa->inner = 1;
    if (z && z->numel != s->numel)
        return dl_kernel_fail(kc, DL_ERR_SHAPE, "zero point and scale sizes differ");
    if (s->numel == 1) return DL_OK;
    if (s->rank != 1 || x->rank < 1) return dl_kernel_fail(kc, DL_ERR_SHAPE, "bad per-axis scale");
    int64_t axis = dl_attr_int(kc->node, "axis", 1);
    if (axis < 0) axis += x->rank;
    if (axis < 0 || axis >= x->rank || x->dims[axis] != s->numel)
        return dl_kernel_fail(kc, DL_ERR_SHAPE, "per-axis scale does not match x");
    for (int i = (int)axis + 1; i < x->rank; i++) qa->inner *= x->dims[i];
    qa->nch = s->numel;
    return DL_OK;
}

static dl_status quantize_infer(dl_infer *ic) {
    static const dl_dtype xt[] = {DL_F32, DL_F16, DL_F64, DL_I32, DL_DTYPE_UNDEFINED};
    static const dl_dtype zt[] = {DL_I8, DL_U8, DL_I16, DL_U16, DL_DTYPE_UNDEFINED};
    DL_TRY(dl_infer_require_dtype(ic, 0, xt));
    DL_TRY(dl_infer_require_dtype(ic, 1, scale_types));
    dl_dtype out = DL_U8;
    if (dl_has_in(ic, 2)) {
        DL_TRY(dl_infer_require_dtype(ic, 2, zt));
        out = ic->in[2]->dtype;
    }
    DL_TRY(qdq_check_params(ic, 1, 2));
    return dl_infer_set(ic, 0, out, ic->in[0]->rank, ic->in[0]->dims);
}

static dl_status quantize_ref(dl_kernel *kc) {
    const dl_tensor *x = kc->in[0], *s = kc->in[1];
    const dl_tensor *z = kc->n_in > 2 ? kc->in[2] : NULL;
    dl_tensor *y = kc->out[0];
    qaxis qa;
    DL_TRY(qdq_axis(kc, x, s, z, &qa));
    int64_t lo, hi;
    if (!q_range(y->dtype, &lo, &hi))
        return dl_kernel_fail(kc, DL_ERR_TYPE, "unsupported output dtype");
    bool dbl = x->dtype == DL_F64;
    for (int64_t e = 0; e < x->numel; e++) {
        int64_t ch = (e / qa.inner) % qa.nch;
        double xv = dl_dtype_is_float(x->dtype) ? dl_get_f64(x, e) : (double)dl_get_i64(x, e);
        double sv = dl_get_f64(s, ch);
        double q = dbl ? xv / sv : (double)((float)xv / (float)sv);
        q = rint(q);
        if (z) q += (double)dl_get_i64(z, ch);
        dl_set_i64(y, e, q_saturate(q, lo, hi));
    }
    return DL_OK;
}

static dl_status dequantize_infer(dl_infer *ic) {
    static const dl_dtype xt[] = {DL_I8, DL_U8, DL_I16, DL_U16, DL_I32, DL_DTYPE_UNDEFINED};
    DL_TRY(dl_infer_require_dtype(ic, 0, xt));
    DL_TRY(dl_infer_require_dtype(ic, 1, scale_types));
    if (dl_has_in(ic, 2) && ic->in[2]->dtype != ic->in[0]->dtype)
        return dl_infer_fail(ic, DL_ERR_TYPE, "x_zero_point must have the dtype of x");
    DL_TRY(qdq_check_params(ic, 1, 2));
    return dl_infer_set(ic, 0, ic->in[1]->dtype, ic->in[0]->rank, ic->in[0]->dims);
}

static dl_status dequantize_ref(dl_kernel *kc) {
    const dl_tensor *x = kc->in[0], *s = kc->in[1];
    const dl_tensor *z = kc->n_in > 2 ? kc->in[2] : NULL;
    dl_tensor *y = kc->out[0];
    qaxis qa;
    DL_TRY(qdq_axis(kc, x, s, z, &qa));
    bool dbl = s->dtype == DL_F64;
    for (int64_t e = 0; e < x->numel; e++) {
        int64_t ch = (e / qa.inner) % qa.nch;
        int64_t v = dl_get_i64(x, e) - (z ? dl_get_i64(z, ch) : 0);
        double sv = dl_get_f64(s, ch);
        dl_set_f64(y, e, dbl ? (double)v * sv : (double)((float)v * (float)sv));
    }
    return DL_OK;
}

/* ---- DynamicQuantizeLinear ---- */

static dl_status dynq_infer(dl_infer *ic) {
    static const dl_dtype xt[] = {DL_F32, DL_DTYPE_UNDEFINED};
    DL_TRY(dl_infer_require_dtype(ic, 0, xt));
    DL_TRY(dl_infer_set(ic, 0, DL_U8, ic->in[0]->rank, ic->in[0]->dims));
    if (ic->n_out > 1) DL_TRY(dl_infer_set(ic, 1, DL_F32, 0, NULL));
    if (ic->n_out > 2) DL_TRY(dl_infer_set(ic, 2, DL_U8, 0, NULL));
    return DL_OK;
}

static dl_status dynq_ref(dl_kernel *kc) {
    const dl_tensor *x = kc->in[0];
    const float *xv = x->data;
    float mn = 0, mx = 0;
    for (int64_t e = 0; e < x->numel; e++) {
        if (xv[e] < mn) mn = xv[e];
        if (xv[e] > mx) mx = xv[e];
    }
    float scale = (mx - mn) / 255.0f;
    int64_t zp = 0;
    if (scale > 0 && isfinite(scale))
        zp = q_saturate((double)((0.0f - mn) / scale), 0, 255);
    else
        scale = 0;
    dl_tensor *y = kc->out[0];
    for (int64_t e = 0; e < x->numel; e++) {
        int64_t q = zp;
        if (scale > 0) q = q_saturate(rint((double)(xv[e] / scale)) + (double)zp, 0, 255);
        dl_set_i64(y, e, q);
    }
    if (kc->n_out > 1 && kc->out[1]->data) dl_set_f64(kc->out[1], 0, scale);
    if (kc->n_out > 2 && kc->out[2]->data) dl_set_i64(kc->out[2], 0, zp);
    return DL_OK;
}

/* ---- matmul geometry (numpy matmul semantics) ---- */

/* Output shape of matmul(a, b); symbolic dims allowed (fresh symbols for unknown broadcasts). */
static dl_status mm_infer_shape(dl_infer *ic, const dl_type *a, const dl_type *b, int *orank,
                                int64_t *odims) {
    *orank = DL_RANK_UNKNOWN;
    if (a->rank < 0 || b->rank < 0) return DL_OK;
    if (a->rank < 1 || b->rank < 1)
        return dl_infer_fail(ic, DL_ERR_SHAPE, "matmul inputs must have rank >= 1");
    int64_t ad[DL_MAX_RANK + 1], bd[DL_MAX_RANK + 1];
    int ar = a->rank, br = b->rank;
    if (ar == 1)
        ad[0] = 1, ad[1] = a->dims[0], ar = 2;
    else
        memcpy(ad, a->dims, sizeof(int64_t) * (size_t)ar);
    if (br == 1)
        bd[0] = b->dims[0], bd[1] = 1, br = 2;
    else
        memcpy(bd, b->dims, sizeof(int64_t) * (size_t)br);
    int64_t K1 = ad[ar - 1], K2 = bd[br - 2];
    if (K1 >= 0 && K2 >= 0 && K1 != K2)
        return dl_infer_fail(ic, DL_ERR_SHAPE, "matmul inner dims differ (%lld vs %lld)",
                             (long long)K1, (long long)K2);
    int nb = (ar > br ? ar : br) - 2;
    int r = 0;
    for (int i = 0; i < nb; i++) {
        int ia = i - (nb - (ar - 2)), ib = i - (nb - (br - 2));
        int64_t da = ia >= 0 ? ad[ia] : 1, db = ib >= 0 ? bd[ib] : 1;
        int64_t o;
        if (da == 1)
            o = db;
        else if (db == 1)
            o = da;
        else if (da == db)
            o = da;
        else if (da >= 0 && db >= 0)
            return dl_infer_fail(ic, DL_ERR_SHAPE, "matmul batch dims do not broadcast");
        else if (da >= 0)
            o = da;
        else if (db >= 0)
            o = db;
        else
            o = dl_infer_fresh_dim(ic);
        odims[r++] = o;
    }
    if (a->rank > 1) odims[r++] = ad[ar - 2];
    if (b->rank > 1) odims[r++] = bd[br - 1];
    if (r > DL_MAX_RANK) return dl_infer_fail(ic, DL_ERR_UNSUPPORTED, "rank too large");
    *orank = r;
    return DL_OK;
}

/* Run-time matmul plan over real tensors. */
typedef struct mm_plan {
    int64_t M, N, K, batch;
    int nb;
    int64_t bdims[DL_MAX_RANK];
    int64_t astr[DL_MAX_RANK], bstr[DL_MAX_RANK]; /* batch strides in matrices */
} mm_plan;

static dl_status mm_plan_make(dl_kernel *kc, const dl_tensor *a, const dl_tensor *b,
                              const dl_tensor *y, mm_plan *p) {
    int64_t ad[DL_MAX_RANK + 1], bd[DL_MAX_RANK + 1];
    int ar = a->rank, br = b->rank;
    if (ar < 1 || br < 1) return dl_kernel_fail(kc, DL_ERR_SHAPE, "matmul rank < 1");
    if (ar == 1)
        ad[0] = 1, ad[1] = a->dims[0], ar = 2;
    else
        memcpy(ad, a->dims, sizeof(int64_t) * (size_t)ar);
    if (br == 1)
        bd[0] = b->dims[0], bd[1] = 1, br = 2;
    else
        memcpy(bd, b->dims, sizeof(int64_t) * (size_t)br);
    p->M = ad[ar - 2];
    p->K = ad[ar - 1];
    p->N = bd[br - 1];
    if (bd[br - 2] != p->K) return dl_kernel_fail(kc, DL_ERR_SHAPE, "matmul inner dims differ");
    p->nb = (ar > br ? ar : br) - 2;
    int64_t sa = 1, sb = 1;
    p->batch = 1;
    for (int i = p->nb - 1; i >= 0; i--) {
        int ia = i - (p->nb - (ar - 2)), ib = i - (p->nb - (br - 2));
        int64_t da = ia >= 0 ? ad[ia] : 1, db = ib >= 0 ? bd[ib] : 1;
        if (da != db && da != 1 && db != 1)
            return dl_kernel_fail(kc, DL_ERR_SHAPE, "matmul batch dims do not broadcast");
        p->bdims[i] = da > db ? da : db;
        if (da == 0 || db == 0) p->bdims[i] = 0;
        p->astr[i] = da == 1 ? 0 : sa;
        p->bstr[i] = db == 1 ? 0 : sb;
        sa *= da;
        sb *= db;
        p->batch *= p->bdims[i];
    }
    if (y->numel != p->batch * p->M * p->N)
        return dl_kernel_fail(kc, DL_ERR_INTERNAL, "matmul output size mismatch");
    return DL_OK;
}

/* A per-row (of a) or per-column (of b) parameter: scalar, 1-D of length `len`, or full shape of
 * the operand with a 1 in the reduced dim. Returns the stride layout: kind 0 scalar, 1 vector,
 * 2 batched [batch_of_operand, len]. */
typedef struct mm_param {
    const dl_tensor *t;
    int kind;
} mm_param;

static dl_status mm_param_make(dl_kernel *kc, const dl_tensor *t, const dl_tensor *op, bool row,
                               int64_t len, mm_param *p, const char *what) {
    p->t = t;
    p->kind = 0;
    if (!t || t->numel == 1) return DL_OK;
    if (t->rank == 1 && t->numel == len) {
        p->kind = 1;
        return DL_OK;
    }
    if (op->rank >= 2 && t->rank == op->rank) {
        bool ok = true;
        for (int i = 0; i < t->rank; i++) {
            int64_t want = op->dims[i];
            if (i == op->rank - (row ? 1 : 2)) want = 1;
            if (t->dims[i] != want) ok = false;
        }
        if (ok) {
            p->kind = 2;
            return DL_OK;
        }
    }
    return dl_kernel_fail(kc, DL_ERR_SHAPE, "%s has an unsupported shape", what);
}

/* Value of the parameter for operand-matrix index mat and row/column index i. */
static double mm_param_f(const mm_param *p, int64_t mat, int64_t i, int64_t len) {
    if (!p->t) return 0;
    int64_t e = p->kind == 0 ? 0 : (p->kind == 1 ? i : mat * len + i);
    return dl_dtype_is_float(p->t->dtype) ? dl_get_f64(p->t, e) : (double)dl_get_i64(p->t, e);
}

static int64_t mm_param_i(const mm_param *p, int64_t mat, int64_t i, int64_t len) {
    if (!p->t) return 0;
    int64_t e = p->kind == 0 ? 0 : (p->kind == 1 ? i : mat * len + i);
    return dl_get_i64(p->t, e);
}

/* Static check of such a parameter (input i) against operand input oi: scalar, 1-D of the
 * operand's rows (row) or columns, or the operand's rank (checked fully at run time). */
static dl_status mm_param_infer(dl_infer *ic, int i, int oi, bool row, const char *what) {
    if (!dl_has_in(ic, i)) return DL_OK;
    const dl_type *t = ic->in[i], *op = ic->in[oi];
    if (t->rank < 0 || op->rank < 0 || is_scalarish(t)) return DL_OK;
    if (t->rank == 1) {
        int64_t len = -1;
        if (row && op->rank >= 2) len = op->dims[op->rank - 2];
        if (!row && op->rank >= 2) len = op->dims[op->rank - 1];
        if (len < 0 || t->dims[0] < 0 || t->dims[0] == len) return DL_OK;
        return dl_infer_fail(ic, DL_ERR_SHAPE, "%s has %lld elements, expected 1 or %lld", what,
                             (long long)t->dims[0], (long long)len);
    }
    if (t->rank == op->rank && type_numel(t) != 0) return DL_OK;
    return dl_infer_fail(ic, DL_ERR_SHAPE, "%s has an unsupported shape", what);
}

/* The integer matmul core: acc[b, m, n] = sum_k (a - azp)(b - bzp), then emit(). */
typedef void (*mm_emit)(dl_kernel *kc, int64_t amat, int64_t bmat, int64_t ye, int64_t m, int64_t n,
                        int64_t acc, void *ctx);

static dl_status mm_run(dl_kernel *kc, const dl_tensor *a, const dl_tensor *b, const mm_param *azp,
                        const mm_param *bzp, const mm_plan *p, mm_emit emit, void *ctx) {
    int64_t idx[DL_MAX_RANK] = {0};
    int64_t MK = p->M * p->K, KN = p->K * p->N;
    for (int64_t bi = 0; bi < p->batch; bi++) {
        int64_t amat = 0, bmat = 0;
        for (int i = 0; i < p->nb; i++) amat += idx[i] * p->astr[i], bmat += idx[i] * p->bstr[i];
        for (int64_t m = 0; m < p->M; m++) {
            int64_t za = mm_param_i(azp, amat, m, p->M);
            for (int64_t n = 0; n < p->N; n++) {
                int64_t zb = mm_param_i(bzp, bmat, n, p->N);
                int64_t acc = 0;
                for (int64_t k = 0; k < p->K; k++)
                    acc += (dl_get_i64(a, amat * MK + m * p->K + k) - za) *
                           (dl_get_i64(b, bmat * KN + k * p->N + n) - zb);
                emit(kc, amat, bmat, (bi * p->M + m) * p->N + n, m, n, acc, ctx);
            }
        }
        dl_index_next(p->nb, p->bdims, idx);
    }
    return DL_OK;
}

/* ---- MatMulInteger ---- */

static dl_status mmi_infer(dl_infer *ic) {
    DL_TRY(dl_infer_require_dtype(ic, 0, q8_types));
    DL_TRY(dl_infer_require_dtype(ic, 1, q8_types));
    if (dl_has_in(ic, 2) && ic->in[2]->dtype != ic->in[0]->dtype)
        return dl_infer_fail(ic, DL_ERR_TYPE, "a_zero_point must have the dtype of A");
    if (dl_has_in(ic, 3) && ic->in[3]->dtype != ic->in[1]->dtype)
        return dl_infer_fail(ic, DL_ERR_TYPE, "b_zero_point must have the dtype of B");
    DL_TRY(mm_param_infer(ic, 2, 0, true, "a_zero_point"));
    DL_TRY(mm_param_infer(ic, 3, 1, false, "b_zero_point"));
    int r;
    int64_t d[DL_MAX_RANK];
    DL_TRY(mm_infer_shape(ic, ic->in[0], ic->in[1], &r, d));
    return dl_infer_set(ic, 0, DL_I32, r, d);
}

static void mmi_emit(dl_kernel *kc, int64_t amat, int64_t bmat, int64_t ye, int64_t m, int64_t n,
                     int64_t acc, void *ctx) {
    DL_UNUSED(amat), DL_UNUSED(bmat), DL_UNUSED(m), DL_UNUSED(n), DL_UNUSED(ctx);
    dl_set_i64(kc->out[0], ye, (int64_t)(int32_t)(uint32_t)acc);
}

static dl_status mmi_ref(dl_kernel *kc) {
    const dl_tensor *a = kc->in[0], *b = kc->in[1];
    mm_plan p;
    DL_TRY(mm_plan_make(kc, a, b, kc->out[0], &p));
    mm_param az, bz;
    DL_TRY(mm_param_make(kc, kc->n_in > 2 ? kc->in[2] : NULL, a, true, p.M, &az, "a_zero_point"));
    DL_TRY(mm_param_make(kc, kc->n_in > 3 ? kc->in[3] : NULL, b, false, p.N, &bz, "b_zero_point"));
    return mm_run(kc, a, b, &az, &bz, &p, mmi_emit, NULL);
}

/* ---- QLinearMatMul ---- */

static dl_status qlmm_infer(dl_infer *ic) {
    static const dl_dtype ft[] = {DL_F32, DL_DTYPE_UNDEFINED};
    for (int i = 0; i < 8; i++)
        if (!dl_has_in(ic, i)) return dl_infer_fail(ic, DL_ERR_INVALID, "all 8 inputs required");
    DL_TRY(dl_infer_require_dtype(ic, 0, q8_types));
    DL_TRY(dl_infer_require_dtype(ic, 3, q8_types));
    DL_TRY(dl_infer_require_dtype(ic, 7, q8_types));
    DL_TRY(dl_infer_require_dtype(ic, 1, ft));
    DL_TRY(dl_infer_require_dtype(ic, 4, ft));
    DL_TRY(dl_infer_require_dtype(ic, 6, ft));
    if (ic->in[2]->dtype != ic->in[0]->dtype || ic->in[5]->dtype != ic->in[3]->dtype)
        return dl_infer_fail(ic, DL_ERR_TYPE, "zero points must match their inputs' dtypes");
    DL_TRY(mm_param_infer(ic, 1, 0, true, "a_scale"));
    DL_TRY(mm_param_infer(ic, 2, 0, true, "a_zero_point"));
    DL_TRY(mm_param_infer(ic, 4, 3, false, "b_scale"));
    DL_TRY(mm_param_infer(ic, 5, 3, false, "b_zero_point"));
    DL_TRY(scalar_check(ic, 6, "y_scale"));
    DL_TRY(scalar_check(ic, 7, "y_zero_point"));
    int r;
    int64_t d[DL_MAX_RANK];
    DL_TRY(mm_infer_shape(ic, ic->in[0], ic->in[3], &r, d));
    return dl_infer_set(ic, 0, ic->in[7]->dtype, r, d);
}

typedef struct qlmm_ctx {
    mm_param as, bs;
    const mm_plan *p;
    float ys;
    int64_t yz, lo, hi;
} qlmm_ctx;

static void qlmm_emit(dl_kernel *kc, int64_t amat, int64_t bmat, int64_t ye, int64_t m, int64_t n,
                      int64_t acc, void *vctx) {
    qlmm_ctx *c = vctx;
    float mult = (float)mm_param_f(&c->as, amat, m, c->p->M) *
                 (float)mm_param_f(&c->bs, bmat, n, c->p->N) / c->ys;
    double v = rint((double)acc * (double)mult) + (double)c->yz;
    dl_set_i64(kc->out[0], ye, q_saturate(v, c->lo, c->hi));
}

static dl_status qlmm_ref(dl_kernel *kc) {
    const dl_tensor *a = kc->in[0], *b = kc->in[3];
    mm_plan p;
    DL_TRY(mm_plan_make(kc, a, b, kc->out[0], &p));
    mm_param az, bz;
    qlmm_ctx c;
    c.p = &p;
    DL_TRY(mm_param_make(kc, kc->in[1], a, true, p.M, &c.as, "a_scale"));
    DL_TRY(mm_param_make(kc, kc->in[2], a, true, p.M, &az, "a_zero_point"));
    DL_TRY(mm_param_make(kc, kc->in[4], b, false, p.N, &c.bs, "b_scale"));
    DL_TRY(mm_param_make(kc, kc->in[5], b, false, p.N, &bz, "b_zero_point"));
    if (kc->in[6]->numel != 1 || kc->in[7]->numel != 1)
        return dl_kernel_fail(kc, DL_ERR_SHAPE, "y_scale and y_zero_point must be scalars");
    c.ys = (float)dl_get_f64(kc->in[6], 0);
    c.yz = dl_get_i64(kc->in[7], 0);
    if (!q_range(kc->out[0]->dtype, &c.lo, &c.hi))
        return dl_kernel_fail(kc, DL_ERR_TYPE, "bad output dtype");
    return mm_run(kc, a, b, &az, &bz, &p, qlmm_emit, &c);
}

/* ---- integer convolution ---- */

static const dl_attr_spec conv_attrs[] = {
    {"auto_pad", DL_ATTR_STRING},
    {"dilations", DL_ATTR_INTS},
    {"group", DL_ATTR_INT},
    {"kernel_shape", DL_ATTR_INTS},
    {"pads", DL_ATTR_INTS},
    {"strides", DL_ATTR_INTS},
    {NULL, 0},
};

typedef struct conv_geom {
    dl_window w; /* spatial window: kernel, strides, dilations, pads, output size */
    int64_t group;
} conv_geom;

/* Resolves the conv attributes for x dims / w dims (either may hold symbolic dims < 0). */
static bool conv_setup(const dl_node *n, int xr, const int64_t *xd, int wr, const int64_t *wd,
                       conv_geom *g, char *err, size_t errlen) {
    if (xr < 3 || xr > DL_MAX_RANK) {
        snprintf(err, errlen, "x must have rank 3..%d, got %d", DL_MAX_RANK, xr);
        return false;
    }
    if (wr != xr) {
        snprintf(err, errlen, "w rank %d differs from x rank %d", wr, xr);
        return false;
    }
    g->group = dl_attr_int(n, "group", 1);
    if (g->group < 1) {
        snprintf(err, errlen, "group must be >= 1");
        return false;
    }
    dl_auto_pad ap; /* the dl_sp_ helpers return an error message (in err) or NULL */
    if (dl_sp_auto_pad(n, &ap, err, errlen) || dl_sp_init(&g->w, xr - 2, xd + 2, err, errlen) ||
        dl_sp_read_attrs(n, ap, true, &g->w, err, errlen))
        return false;
    int64_t C = xd[1], M = wd[0], Cg = wd[1];
    if (M >= 0 && M % g->group != 0) {
        snprintf(err, errlen, "output channels %lld not divisible by group %lld", (long long)M,
                 (long long)g->group);
        return false;
    }
    if (C >= 0 && Cg >= 0 && C != Cg * g->group) {
        snprintf(err, errlen, "x has %lld channels, w expects %lld x group %lld", (long long)C,
                 (long long)Cg, (long long)g->group);
        return false;
    }
    return !dl_sp_kernel_from_weight(&g->w, wd + 2, err, errlen) &&
           !dl_sp_forward_out(&g->w, ap, false, err, errlen);
}

/* Checks x (input xi) and w (input wi), sets output 0 with dtype odt. */
static dl_status conv_infer_common(dl_infer *ic, int xi, int wi, dl_dtype odt) {
    const dl_type *x = ic->in[xi], *w = ic->in[wi];
    if (x->rank < 0 || w->rank < 0) return dl_infer_set(ic, 0, odt, DL_RANK_UNKNOWN, NULL);
    conv_geom g;
    char err[200];
    if (!conv_setup(ic->node, x->rank, x->dims, w->rank, w->dims, &g, err, sizeof err))
        return dl_infer_fail(ic, DL_ERR_SHAPE, "%s", err);
    int64_t od[DL_MAX_RANK];
    od[0] = x->dims[0];
    od[1] = w->dims[0];
    for (int i = 0; i < g.w.ns; i++)
        od[2 + i] = g.w.out[i] >= 0 ? g.w.out[i] : dl_infer_fresh_dim(ic);
    return dl_infer_set(ic, 0, odt, x->rank, od);
}

/* Per-output-channel parameter check: scalar or 1-D of length M. */
static dl_status per_channel_check(dl_infer *ic, int i, int wi, const char *what) {
    if (!dl_has_in(ic, i)) return DL_OK;
    const dl_type *t = ic->in[i], *w = ic->in[wi];
    if (t->rank < 0 || is_scalarish(t)) return DL_OK;
    if (t->rank != 1) return dl_infer_fail(ic, DL_ERR_SHAPE, "%s must be a scalar or 1-D", what);
    if (w->rank >= 1 && w->dims[0] >= 0 && t->dims[0] >= 0 && t->dims[0] != w->dims[0])
        return dl_infer_fail(ic, DL_ERR_SHAPE, "%s has %lld elements, w has %lld output channels",
                             what, (long long)t->dims[0], (long long)w->dims[0]);
    return DL_OK;
}

typedef void (*conv_emit)(dl_kernel *kc, int64_t ye, int64_t oc, int64_t acc, void *ctx);

/* Direct integer convolution: acc = sum (x - xz) * (w - wz[oc]). */
static dl_status conv_run(dl_kernel *kc, const dl_tensor *x, const dl_tensor *w, int64_t xz,
                          const dl_tensor *wz, conv_emit emit, void *ctx) {
    conv_geom g;
    char err[200];
    if (!conv_setup(kc->node, x->rank, x->dims, w->rank, w->dims, &g, err, sizeof err))
        return dl_kernel_fail(kc, DL_ERR_SHAPE, "%s", err);
    int64_t N = x->dims[0], C = x->dims[1], M = w->dims[0], Cg = w->dims[1];
    int64_t Mg = M / g.group;
    for (int i = 0; i < g.w.ns; i++)
        if (g.w.k[i] != w->dims[2 + i]) return dl_kernel_fail(kc, DL_ERR_SHAPE, "kernel mismatch");
    if (wz && wz->numel != 1 && wz->numel != M)
        return dl_kernel_fail(kc, DL_ERR_SHAPE, "w_zero_point size mismatch");
    const dl_tensor *y = kc->out[0];
    int64_t ynumel = N * M;
    for (int i = 0; i < g.w.ns; i++) ynumel *= g.w.out[i];
    if (y->numel != ynumel || y->rank != x->rank)
        return dl_kernel_fail(kc, DL_ERR_INTERNAL, "conv output size mismatch");
    int nsp = g.w.ns;
    int64_t xsp = 1, ksp = 1, ysp = 1;
    for (int i = 0; i < nsp; i++) xsp *= x->dims[2 + i], ksp *= g.w.k[i], ysp *= g.w.out[i];
    int64_t oidx[DL_SP_MAX], kidx[DL_SP_MAX];
    for (int64_t nb = 0; nb < N; nb++) {
        for (int64_t oc = 0; oc < M; oc++) {
            int64_t grp = oc / Mg;
            int64_t wzv = wz ? dl_get_i64(wz, wz->numel == 1 ? 0 : oc) : 0;
            memset(oidx, 0, sizeof oidx);
            for (int64_t yo = 0; yo < ysp; yo++) {
                int64_t acc = 0;
                for (int64_t c = 0; c < Cg; c++) {
                    int64_t xc = grp * Cg + c;
                    if (xc >= C) continue;
                    int64_t xbase = (nb * C + xc) * xsp;
                    int64_t wbase = (oc * Cg + c) * ksp;
                    memset(kidx, 0, sizeof kidx);
                    for (int64_t ko = 0; ko < ksp; ko++) {
                        int64_t off = 0;
                        bool inside = true;
                        for (int i = 0; i < nsp; i++) {
                            int64_t p = oidx[i] * g.w.stride[i] - g.w.pb[i] + kidx[i] * g.w.dil[i];
                            if (p < 0 || p >= x->dims[2 + i]) {
                                inside = false;
                                break;
                            }
                            off = off * x->dims[2 + i] + p;
                        }
                        if (inside)
                            acc += (dl_get_i64(x, xbase + off) - xz) *
                                   (dl_get_i64(w, wbase + ko) - wzv);
                        dl_index_next(nsp, g.w.k, kidx);
                    }
                }
                emit(kc, (nb * M + oc) * ysp + yo, oc, acc, ctx);
                dl_index_next(nsp, g.w.out, oidx);
            }
        }
    }
    return DL_OK;
}

/* ---- ConvInteger ---- */

static dl_status convi_infer(dl_infer *ic) {
    DL_TRY(dl_infer_require_dtype(ic, 0, q8_types));
    DL_TRY(dl_infer_require_dtype(ic, 1, q8_types));
    if (dl_has_in(ic, 2) && ic->in[2]->dtype != ic->in[0]->dtype)
        return dl_infer_fail(ic, DL_ERR_TYPE, "x_zero_point must have the dtype of x");
    if (dl_has_in(ic, 3) && ic->in[3]->dtype != ic->in[1]->dtype)
        return dl_infer_fail(ic, DL_ERR_TYPE, "w_zero_point must have the dtype of w");
    DL_TRY(scalar_check(ic, 2, "x_zero_point"));
    DL_TRY(per_channel_check(ic, 3, 1, "w_zero_point"));
    return conv_infer_common(ic, 0, 1, DL_I32);
}

static void convi_emit(dl_kernel *kc, int64_t ye, int64_t oc, int64_t acc, void *ctx) {
    DL_UNUSED(oc), DL_UNUSED(ctx);
    dl_set_i64(kc->out[0], ye, (int64_t)(int32_t)(uint32_t)acc);
}

static dl_status convi_ref(dl_kernel *kc) {
    const dl_tensor *xz = kc->n_in > 2 ? kc->in[2] : NULL;
    const dl_tensor *wz = kc->n_in > 3 ? kc->in[3] : NULL;
    if (xz && xz->numel != 1)
        return dl_kernel_fail(kc, DL_ERR_SHAPE, "x_zero_point must be a scalar");
    return conv_run(kc, kc->in[0], kc->in[1], xz ? dl_get_i64(xz, 0) : 0, wz, convi_emit, NULL);
}

/* ---- QLinearConv ---- */

static dl_status qlconv_infer(dl_infer *ic) {
    static const dl_dtype ft[] = {DL_F32, DL_DTYPE_UNDEFINED};
    static const dl_dtype bt[] = {DL_I32, DL_DTYPE_UNDEFINED};
    for (int i = 0; i < 8; i++)
        if (!dl_has_in(ic, i)) return dl_infer_fail(ic, DL_ERR_INVALID, "inputs 0..7 are required");
    DL_TRY(dl_infer_require_dtype(ic, 0, q8_types));
    DL_TRY(dl_infer_require_dtype(ic, 3, q8_types));
    DL_TRY(dl_infer_require_dtype(ic, 7, q8_types));
    DL_TRY(dl_infer_require_dtype(ic, 1, ft));
    DL_TRY(dl_infer_require_dtype(ic, 4, ft));
    DL_TRY(dl_infer_require_dtype(ic, 6, ft));
    if (ic->in[2]->dtype != ic->in[0]->dtype || ic->in[5]->dtype != ic->in[3]->dtype)
        return dl_infer_fail(ic, DL_ERR_TYPE, "zero points must match their inputs' dtypes");
    DL_TRY(scalar_check(ic, 1, "x_scale"));
    DL_TRY(scalar_check(ic, 2, "x_zero_point"));
    DL_TRY(scalar_check(ic, 6, "y_scale"));
    DL_TRY(scalar_check(ic, 7, "y_zero_point"));
    DL_TRY(per_channel_check(ic, 4, 3, "w_scale"));
    DL_TRY(per_channel_check(ic, 5, 3, "w_zero_point"));
    if (dl_has_in(ic, 8)) {
        DL_TRY(dl_infer_require_dtype(ic, 8, bt));
        const dl_type *b = ic->in[8], *w = ic->in[3];
        if (b->rank >= 0 && b->rank != 1) return dl_infer_fail(ic, DL_ERR_SHAPE, "B must be 1-D");
        if (b->rank == 1 && w->rank >= 1 && b->dims[0] >= 0 && w->dims[0] >= 0 &&
            b->dims[0] != w->dims[0])
            return dl_infer_fail(ic, DL_ERR_SHAPE, "B must have one value per output channel");
    }
    return conv_infer_common(ic, 0, 3, ic->in[7]->dtype);
}

typedef struct qlconv_ctx {
    float xs, ys;
    const dl_tensor *ws, *bias;
    int64_t yz, lo, hi;
} qlconv_ctx;

static void qlconv_emit(dl_kernel *kc, int64_t ye, int64_t oc, int64_t acc, void *vctx) {
    qlconv_ctx *c = vctx;
    if (c->bias) acc += dl_get_i64(c->bias, oc);
    float ws = (float)dl_get_f64(c->ws, c->ws->numel == 1 ? 0 : oc);
    float mult = c->xs * ws / c->ys;
    double v = rint((double)acc * (double)mult) + (double)c->yz;
    dl_set_i64(kc->out[0], ye, q_saturate(v, c->lo, c->hi));
}

static dl_status qlconv_ref(dl_kernel *kc) {
    const dl_tensor *w = kc->in[3];
    qlconv_ctx c;
    for (int i = 1; i < 8; i++)
        if (i != 3 && kc->in[i]->numel < 1)
            return dl_kernel_fail(kc, DL_ERR_SHAPE, "empty scale or zero point");
    if (kc->in[1]->numel != 1 || kc->in[2]->numel != 1 || kc->in[6]->numel != 1 ||
        kc->in[7]->numel != 1)
        return dl_kernel_fail(kc, DL_ERR_SHAPE, "x and y scales/zero points must be scalars");
    c.xs = (float)dl_get_f64(kc->in[1], 0);
    c.ys = (float)dl_get_f64(kc->in[6], 0);
    c.yz = dl_get_i64(kc->in[7], 0);
    c.ws = kc->in[4];
    c.bias = kc->n_in > 8 ? kc->in[8] : NULL;
    if (w->rank < 1 || (c.ws->numel != 1 && c.ws->numel != w->dims[0]) ||
        (c.bias && c.bias->numel != w->dims[0]))
        return dl_kernel_fail(kc, DL_ERR_SHAPE, "w_scale or B size mismatch");
    if (!q_range(kc->out[0]->dtype, &c.lo, &c.hi))
        return dl_kernel_fail(kc, DL_ERR_TYPE, "bad output dtype");
    return conv_run(kc, kc->in[0], w, dl_get_i64(kc->in[2], 0), kc->in[5], qlconv_emit, &c);
}

const dl_op_def dl_ops_quant[] = {
    {.name = "QuantizeLinear",
     .min_in = 2,
     .max_in = 3,
     .min_out = 1,
     .max_out = 1,
     .attrs = qdq_attrs,
     .infer = quantize_infer,
     .ref = quantize_ref},
    {.name = "DequantizeLinear",
     .min_in = 2,
     .max_in = 3,
     .min_out = 1,
     .max_out = 1,
     .attrs = qdq_attrs,
     .infer = dequantize_infer,
     .ref = dequantize_ref},
    {.name = "DynamicQuantizeLinear",
     .min_in = 1,
     .max_in = 1,
     .min_out = 1,
     .max_out = 3,
     .infer = dynq_infer,
     .ref = dynq_ref},
    {.name = "MatMulInteger",
     .min_in = 2,
     .max_in = 4,
     .min_out = 1,
     .max_out = 1,
     .infer = mmi_infer,
     .ref = mmi_ref},
    {.name = "QLinearMatMul",
     .min_in = 8,
     .max_in = 8,
     .min_out = 1,
     .max_out = 1,
     .infer = qlmm_infer,
     .ref = qlmm_ref},
    {.name = "ConvInteger",
     .min_in = 2,
     .max_in = 4,
     .min_out = 1,
     .max_out = 1,
     .attrs = conv_attrs,
     .infer = convi_infer,
     .ref = convi_ref},
    {.name = "QLinearConv",
     .min_in = 8,
     .max_in = 9,
     .min_out = 1,
     .max_out = 1,
     .attrs = conv_attrs,
     .infer = qlconv_infer,
     .ref = qlconv_ref},
    {.name = NULL},
};
