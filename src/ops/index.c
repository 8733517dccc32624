/* index.c — op family "index" (rows of the op table): gathers, scatters and index-producing ops
 * (Gather, GatherElements, GatherND, ScatterElements, Scatter, ScatterND, Compress, NonZero,
 * OneHot). Indices come from the model or from data, so every one is range-checked at run time.
 * The gathers' gradient rules scatter-add dy back. */
#include "op-impl.h"
#include "../train/grad.h"

#define R DL_MAX_RANK

/* ---- local helpers ---- */

static void copy_elems(dl_tensor *dst, int64_t di, const dl_tensor *src, int64_t si, int64_t n) {
    size_t es = dl_dtype_size(src->dtype);
    if (n > 0)
        memcpy((char *)dst->data + (size_t)di * es, (const char *)src->data + (size_t)si * es,
               (size_t)n * es);
}

static int64_t prod_dims(const int64_t *dims, int from, int to) {
    int64_t p = 1;
    for (int i = from; i < to; i++) p *= dims[i];
    return p;
}

static bool is_index_dtype(dl_dtype t) {
    return t == DL_I32 || t == DL_I64;
}

static dl_status require_indices(dl_infer *ic, int i, const char *what) {
    if (!dl_has_in(ic, i)) return dl_infer_fail(ic, DL_ERR_INVALID, "%s input is missing", what);
    if (!is_index_dtype(ic->in[i]->dtype))
        return dl_infer_fail(ic, DL_ERR_TYPE, "%s must be int32 or int64, got %s", what,
                             dl_dtype_name(ic->in[i]->dtype));
    return DL_OK;
}

/* Normalizes index v against a dim of size d; false when out of [-d, d). */
static bool norm_index(int64_t *v, int64_t d) {
    if (*v < 0) *v += d;
    return *v >= 0 && *v < d;
}

void dl_bad_index_text(char *buf, size_t n, int64_t v, int64_t d, int64_t axis) {
    snprintf(buf, n, "index %lld is out of range [-%lld, %lld) on axis %lld", (long long)v,
             (long long)d, (long long)d, (long long)axis);
}

static dl_status bad_index(dl_kernel *kc, int64_t v, int64_t d, int axis) {
    char t[160];
    dl_bad_index_text(t, sizeof t, v, d, axis);
    return dl_kernel_fail(kc, DL_ERR_INVALID, "%s", t);
}

/* ---- Gather ---- */

static const dl_attr_spec axis_attrs[] = {{"axis", DL_ATTR_INT}, {NULL, 0}};

static dl_status gather_infer(dl_infer *ic) {
    const dl_type *x = ic->in[0];
    DL_TRY(require_indices(ic, 1, "indices"));
    const dl_type *ix = ic->in[1];
    if (x->rank == DL_RANK_UNKNOWN || ix->rank == DL_RANK_UNKNOWN) {
        ic->out[0].dtype = x->dtype;
        return DL_OK;
    }
    if (x->rank == 0) return dl_infer_fail(ic, DL_ERR_SHAPE, "cannot gather from a scalar");
    int axis;
    DL_TRY(dl_infer_axis(ic, dl_attr_int(ic->node, "axis", 0), x->rank, &axis));
    int rank = x->rank - 1 + ix->rank;
    if (rank > R)
        return dl_infer_fail(ic, DL_ERR_UNSUPPORTED, "output rank %d exceeds %d", rank, R);
    int64_t dims[R];
    int r = 0;
    for (int i = 0; i < axis; i++) dims[r++] = x->dims[i];
    for (int i = 0; i < ix->rank; i++) dims[r++] = ix->dims[i];
    for (int i = axis + 1; i < x->rank; i++) dims[r++] = x->dims[i];
    return dl_infer_set(ic, 0, x->dtype, rank, dims);
}

static dl_status gather_ref(dl_kernel *kc) {
    DL_TRY(dl_kernel_outs(kc));
    const dl_tensor *x = kc->in[0], *ix = kc->in[1];
    dl_tensor *y = kc->out[0];
    int axis = (int)dl_attr_int(kc->node, "axis", 0);
    if (axis < 0) axis += x->rank;
    if (axis < 0 || axis >= x->rank) return dl_kernel_fail(kc, DL_ERR_INTERNAL, "bad gather axis");
    int64_t d = x->dims[axis];
    int64_t outer = prod_dims(x->dims, 0, axis), inner = prod_dims(x->dims, axis + 1, x->rank);
    if (y->dtype != x->dtype || y->numel != outer * ix->numel * inner)
        return dl_kernel_fail(kc, DL_ERR_INTERNAL, "gather output mismatch");
    for (int64_t j = 0; j < ix->numel; j++) {
        int64_t v = dl_get_i64(ix, j);
        if (!norm_index(&v, d)) return bad_index(kc, dl_get_i64(ix, j), d, axis);
    }
    if (y->numel == 0) return DL_OK;
    int64_t o = 0;
    for (int64_t b = 0; b < outer; b++)
        for (int64_t j = 0; j < ix->numel; j++) {
            int64_t v = dl_get_i64(ix, j);
            norm_index(&v, d);
            copy_elems(y, o, x, (b * d + v) * inner, inner);
            o += inner;
        }
    return DL_OK;
}

/* ---- GatherElements ---- */

/* Shared checks of GatherElements / ScatterElements: indices rank equals data rank, and indices
 * dims fit data dims off the axis. */
static dl_status elements_check(dl_infer *ic, const dl_type *x, const dl_type *ix, int *axis) {
    if (x->rank == 0) return dl_infer_fail(ic, DL_ERR_SHAPE, "data must have rank >= 1");
    DL_TRY(dl_infer_axis(ic, dl_attr_int(ic->node, "axis", 0), x->rank, axis));
    if (ix->rank != x->rank)
        return dl_infer_fail(ic, DL_ERR_SHAPE, "indices rank %d differs from data rank %d",
                             ix->rank, x->rank);
    for (int i = 0; i < x->rank; i++)
        if (i != *axis && x->dims[i] >= 0 && ix->dims[i] >= 0 && ix->dims[i] > x->dims[i])
            return dl_infer_fail(ic, DL_ERR_SHAPE, "indices dim %d (%lld) exceeds data dim (%lld)",
                                 i, (long long)ix->dims[i], (long long)x->dims[i]);
    return DL_OK;
}

static dl_status gather_elements_infer(dl_infer *ic) {
    const dl_type *x = ic->in[0];
    DL_TRY(require_indices(ic, 1, "indices"));
    const dl_type *ix = ic->in[1];
    if (x->rank == DL_RANK_UNKNOWN || ix->rank == DL_RANK_UNKNOWN) {
        ic->out[0].dtype = x->dtype;
        if (ix->rank != DL_RANK_UNKNOWN) return dl_infer_set(ic, 0, x->dtype, ix->rank, ix->dims);
        return DL_OK;
    }
    int axis;
    DL_TRY(elements_check(ic, x, ix, &axis));
    return dl_infer_set(ic, 0, x->dtype, ix->rank, ix->dims);
}

/* Kernel-side check that indices fit data off the axis. */
static dl_status elements_kernel_check(dl_kernel *kc, const dl_tensor *x, const dl_tensor *ix,
                                       int *axis) {
    int a = (int)dl_attr_int(kc->node, "axis", 0);
    if (a < 0) a += x->rank;
    if (a < 0 || a >= x->rank || ix->rank != x->rank)
        return dl_kernel_fail(kc, DL_ERR_INTERNAL, "bad axis or indices rank");
    for (int i = 0; i < x->rank; i++)
        if (i != a && ix->dims[i] > x->dims[i])
            return dl_kernel_fail(kc, DL_ERR_INTERNAL, "indices exceed data");
    *axis = a;
    return DL_OK;
}

static dl_status gather_elements_ref(dl_kernel *kc) {
    DL_TRY(dl_kernel_outs(kc));
    const dl_tensor *x = kc->in[0], *ix = kc->in[1];
    dl_tensor *y = kc->out[0];
    int axis;
    DL_TRY(elements_kernel_check(kc, x, ix, &axis));
    if (y->numel != ix->numel || y->dtype != x->dtype)
        return dl_kernel_fail(kc, DL_ERR_INTERNAL, "gather output mismatch");
    if (ix->numel == 0) return DL_OK;
    int64_t xs[R], idx[R] = {0}, j = 0;
    dl_strides(x->rank, x->dims, xs);
    do {
        int64_t v = dl_get_i64(ix, j);
        if (!norm_index(&v, x->dims[axis]))
            return bad_index(kc, dl_get_i64(ix, j), x->dims[axis], axis);
        int64_t src = 0;
        for (int i = 0; i < x->rank; i++) src += (i == axis ? v : idx[i]) * xs[i];
        copy_elems(y, j, x, src, 1);
        j++;
    } while (dl_index_next(ix->rank, ix->dims, idx));
    return DL_OK;
}

/* ---- GatherND ---- */

static const dl_attr_spec gathernd_attrs[] = {{"batch_dims", DL_ATTR_INT}, {NULL, 0}};

/* Validates an ND gather/scatter: data rank r, indices rank q, batch dims b; sets *k (the index
 * tuple length, -1 when unknown). */
static dl_status nd_check(dl_infer *ic, const dl_type *x, const dl_type *ix, int b, int *k) {
    *k = -1;
    if (x->rank < 1 || ix->rank < 1)
        return dl_infer_fail(ic, DL_ERR_SHAPE, "data and indices must have rank >= 1");
    if (b < 0 || b >= x->rank || b >= ix->rank)
        return dl_infer_fail(ic, DL_ERR_INVALID, "batch_dims %d is out of range", b);
    for (int i = 0; i < b; i++)
        if (x->dims[i] >= 0 && ix->dims[i] >= 0 && x->dims[i] != ix->dims[i])
            return dl_infer_fail(ic, DL_ERR_SHAPE, "batch dim %d differs (%lld vs %lld)", i,
                                 (long long)x->dims[i], (long long)ix->dims[i]);
    int64_t last = ix->dims[ix->rank - 1];
    if (last < 0) return DL_OK;
    if (last > x->rank - b)
        return dl_infer_fail(ic, DL_ERR_SHAPE, "index tuples of length %lld exceed rank %d - %d",
                             (long long)last, x->rank, b);
    *k = (int)last;
    return DL_OK;
}

static dl_status gathernd_infer(dl_infer *ic) {
    const dl_type *x = ic->in[0];
    DL_TRY(require_indices(ic, 1, "indices"));
    const dl_type *ix = ic->in[1];
    int64_t bd = ic->opset >= 12 ? dl_attr_int(ic->node, "batch_dims", 0) : 0;
    if (bd < 0 || bd > R)
        return dl_infer_fail(ic, DL_ERR_INVALID, "batch_dims %lld is invalid", (long long)bd);
    if (x->rank == DL_RANK_UNKNOWN || ix->rank == DL_RANK_UNKNOWN) {
        ic->out[0].dtype = x->dtype;
        return DL_OK;
    }
    int k;
    DL_TRY(nd_check(ic, x, ix, (int)bd, &k));
    if (k < 0) {
        ic->out[0].dtype = x->dtype;
        return DL_OK;
    }
    int64_t dims[R];
    int r = 0;
    for (int i = 0; i < ix->rank - 1; i++) dims[r++] = ix->dims[i];
    for (int i = (int)bd + k; i < x->rank; i++) dims[r++] = x->dims[i];
    return dl_infer_set(ic, 0, x->dtype, r, dims);
}

/* Flat element offset in data of index tuple t (k values at ix[t*k ..]) within batch b. Returns
 * false (and the bad value) when an index is out of range. */
static bool nd_offset(const dl_tensor *x, const dl_tensor *ix, int bd, int k, int64_t batch,
                      int64_t t, int64_t *off, int64_t *bad, int *bad_axis) {
    int64_t xs[R];
    dl_strides(x->rank, x->dims, xs);
    int64_t o = batch * (bd > 0 ? xs[bd - 1] : 0);
    for (int j = 0; j < k; j++) {
        int64_t v = dl_get_i64(ix, t * k + j);
        int64_t d = x->dims[bd + j];
        if (!norm_index(&v, d)) {
            *bad = dl_get_i64(ix, t * k + j);
            *bad_axis = bd + j;
            return false;
        }
        o += v * xs[bd + j];
    }
    *off = o;
    return true;
}

static dl_status gathernd_ref(dl_kernel *kc) {
    DL_TRY(dl_kernel_outs(kc));
    const dl_tensor *x = kc->in[0], *ix = kc->in[1];
    dl_tensor *y = kc->out[0];
    int bd = kc->opset >= 12 ? (int)dl_attr_int(kc->node, "batch_dims", 0) : 0;
    int q = ix->rank;
    int k = (int)ix->dims[q - 1];
    if (bd < 0 || bd >= x->rank || bd >= q || k > x->rank - bd)
        return dl_kernel_fail(kc, DL_ERR_INTERNAL, "gathernd shapes");
    for (int i = 0; i < bd; i++)
        if (x->dims[i] != ix->dims[i])
            return dl_kernel_fail(kc, DL_ERR_INTERNAL, "gathernd shapes");
    int64_t B = prod_dims(x->dims, 0, bd);
    int64_t N = prod_dims(ix->dims, bd, q - 1);
    int64_t S = prod_dims(x->dims, bd + k, x->rank);
    if (y->numel != B * N * S || y->dtype != x->dtype)
        return dl_kernel_fail(kc, DL_ERR_INTERNAL, "gathernd output mismatch");
    int64_t o = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < N; t++) {
            int64_t off = 0, bad = 0;
            int bad_axis = 0;
            if (!nd_offset(x, ix, bd, k, b, b * N + t, &off, &bad, &bad_axis))
                return bad_index(kc, bad, x->dims[bad_axis], bad_axis);
            copy_elems(y, o, x, off, S);
            o += S;
        }
    return DL_OK;
}

/* ---- ScatterElements / Scatter / ScatterND ---- */

static const dl_attr_spec scatter_elements_attrs[] = {
    {"axis", DL_ATTR_INT}, {"reduction", DL_ATTR_STRING}, {NULL, 0}};
static const dl_attr_spec scatternd_attrs[] = {{"reduction", DL_ATTR_STRING}, {NULL, 0}};

enum { RED_NONE, RED_ADD, RED_MUL, RED_MAX, RED_MIN };

static dl_status reduction_mode(dl_infer *ic, int *mode) {
    *mode = RED_NONE;
    if (ic->opset < 16) return DL_OK;
    const char *r = dl_attr_str(ic->node, "reduction", "none");
    if (!strcmp(r, "none"))
        *mode = RED_NONE;
    else if (!strcmp(r, "add"))
        *mode = RED_ADD;
    else if (!strcmp(r, "mul"))
        *mode = RED_MUL;
    else if (!strcmp(r, "max"))
        *mode = RED_MAX;
    else if (!strcmp(r, "min"))
        *mode = RED_MIN;
    else
        return dl_infer_fail(ic, DL_ERR_INVALID, "reduction '%s' is not supported", r);
    return DL_OK;
}

static int kernel_reduction(const dl_kernel *kc) {
    if (kc->opset < 16) return RED_NONE;
    const char *r = dl_attr_str(kc->node, "reduction", "none");
    return !strcmp(r, "add")   ? RED_ADD
           : !strcmp(r, "mul") ? RED_MUL
           : !strcmp(r, "max") ? RED_MAX
           : !strcmp(r, "min") ? RED_MIN
                               : RED_NONE;
}

/* y[di] = y[di] (op) u[ui]. */
static void apply_update(dl_tensor *y, int64_t di, const dl_tensor *u, int64_t ui, int mode) {
    if (mode == RED_ADD && y->dtype == DL_F32) { /* the embedding gradient's case, kept cheap */
        ((float *)y->data)[di] += ((const float *)u->data)[ui];
    } else if (mode == RED_NONE) {
        copy_elems(y, di, u, ui, 1);
    } else if (dl_dtype_is_float(y->dtype)) {
        double a = dl_get_f64(y, di), b = dl_get_f64(u, ui);
        double r = mode == RED_ADD   ? a + b
                   : mode == RED_MUL ? a * b
                   : mode == RED_MAX ? (a > b ? a : b)
                                     : (a < b ? a : b);
        dl_set_f64(y, di, r);
    } else {
        uint64_t a = (uint64_t)dl_get_i64(y, di), b = (uint64_t)dl_get_i64(u, ui);
        int64_t sa = (int64_t)a, sb = (int64_t)b;
        int64_t r;
        if (mode == RED_ADD)
            r = (int64_t)(a + b);
        else if (mode == RED_MUL)
            r = (int64_t)(a * b);
        else if (y->dtype == DL_U64)
            r = (int64_t)(mode == RED_MAX ? (a > b ? a : b) : (a < b ? a : b));
        else
            r = mode == RED_MAX ? (sa > sb ? sa : sb) : (sa < sb ? sa : sb);
        if (y->dtype == DL_BOOL && mode == RED_MUL) r = (a && b);
        dl_set_i64(y, di, r);
    }
}

static dl_status scatter_elements_infer(dl_infer *ic) {
    const dl_type *x = ic->in[0];
    DL_TRY(require_indices(ic, 1, "indices"));
    if (!dl_has_in(ic, 2)) return dl_infer_fail(ic, DL_ERR_INVALID, "updates input is missing");
    const dl_type *ix = ic->in[1], *u = ic->in[2];
    if (u->dtype != x->dtype)
        return dl_infer_fail(ic, DL_ERR_TYPE, "updates are %s, data is %s", dl_dtype_name(u->dtype),
                             dl_dtype_name(x->dtype));
    int mode;
    DL_TRY(reduction_mode(ic, &mode));
    if (ix->rank != DL_RANK_UNKNOWN && u->rank != DL_RANK_UNKNOWN) {
        if (ix->rank != u->rank)
            return dl_infer_fail(ic, DL_ERR_SHAPE, "indices and updates differ in rank");
        for (int i = 0; i < ix->rank; i++)
            if (ix->dims[i] >= 0 && u->dims[i] >= 0 && ix->dims[i] != u->dims[i])
                return dl_infer_fail(ic, DL_ERR_SHAPE, "indices and updates differ in dim %d", i);
    }
    if (x->rank != DL_RANK_UNKNOWN && ix->rank != DL_RANK_UNKNOWN) {
        int axis;
        DL_TRY(elements_check(ic, x, ix, &axis));
    }
    return dl_infer_same(ic, 0, 0);
}

static dl_status scatter_elements_ref(dl_kernel *kc) {
    DL_TRY(dl_kernel_outs(kc));
    const dl_tensor *x = kc->in[0], *ix = kc->in[1], *u = kc->in[2];
    dl_tensor *y = kc->out[0];
    int axis;
    DL_TRY(elements_kernel_check(kc, x, ix, &axis));
    if (u->numel != ix->numel || y->numel != x->numel || y->dtype != x->dtype ||
        u->dtype != x->dtype)
        return dl_kernel_fail(kc, DL_ERR_INTERNAL, "scatter shapes");
    int mode = kernel_reduction(kc);
    copy_elems(y, 0, x, 0, x->numel);
    if (ix->numel == 0) return DL_OK;
    int64_t xs[R], idx[R] = {0}, j = 0;
    dl_strides(x->rank, x->dims, xs);
    if (y->dtype == DL_F32 && ix->dtype == DL_I64 && (mode == RED_ADD || mode == RED_NONE)) {
        /* float32 with int64 indices (a gather's gradient: the embedding's, a training step's
         * only reference kernel of note): a run of the indices' last dim at a time, its base
         * offset worked out once; the same updates in the same order as below (GPT's 256 x 256
         * embedding from 1024 tokens, one thread: 1.10 -> 0.19 ms) */
        const int last = x->rank - 1;
        const int64_t *ip = ix->data, dim = x->dims[axis];
        const float *up = u->data;
        float *yp = y->data;
        do { /* idx runs over the indices' dims but the last */
            int64_t base = 0;
            for (int i = 0; i < last; i++)
                if (i != axis) base += idx[i] * xs[i];
            for (int64_t k = 0; k < ix->dims[last]; k++, j++) {
                int64_t v = ip[j];
                if (!norm_index(&v, dim)) return bad_index(kc, ip[j], dim, axis);
                const int64_t dst = axis == last ? base + v : base + v * xs[axis] + k;
                yp[dst] = mode == RED_ADD ? yp[dst] + up[j] : up[j];
            }
        } while (dl_index_next(last, ix->dims, idx));
        return DL_OK;
    }
    do {
        int64_t v = dl_get_i64(ix, j);
        if (!norm_index(&v, x->dims[axis]))
            return bad_index(kc, dl_get_i64(ix, j), x->dims[axis], axis);
        int64_t dst = 0;
        for (int i = 0; i < x->rank; i++) dst += (i == axis ? v : idx[i]) * xs[i];
        apply_update(y, dst, u, j, mode);
        j++;
    } while (dl_index_next(ix->rank, ix->dims, idx));
    return DL_OK;
}

static dl_status scatternd_infer(dl_infer *ic) {
    const dl_type *x = ic->in[0];
    if (!dl_has_in(ic, 1) || !dl_dtype_is_int(ic->in[1]->dtype))
        return dl_infer_fail(ic, DL_ERR_TYPE, "indices must be int64");
    if (!dl_has_in(ic, 2)) return dl_infer_fail(ic, DL_ERR_INVALID, "updates input is missing");
    const dl_type *ix = ic->in[1], *u = ic->in[2];
    if (u->dtype != x->dtype)
        return dl_infer_fail(ic, DL_ERR_TYPE, "updates are %s, data is %s", dl_dtype_name(u->dtype),
                             dl_dtype_name(x->dtype));
    int mode;
    DL_TRY(reduction_mode(ic, &mode));
    if (x->rank != DL_RANK_UNKNOWN && ix->rank != DL_RANK_UNKNOWN) {
        int k;
        DL_TRY(nd_check(ic, x, ix, 0, &k));
        if (k >= 0 && u->rank != DL_RANK_UNKNOWN) {
            int want = ix->rank - 1 + x->rank - k;
            if (u->rank != want)
                return dl_infer_fail(ic, DL_ERR_SHAPE, "updates rank %d, expected %d", u->rank,
                                     want);
            for (int i = 0; i < want; i++) {
                int64_t e = i < ix->rank - 1 ? ix->dims[i] : x->dims[k + i - (ix->rank - 1)];
                if (e >= 0 && u->dims[i] >= 0 && e != u->dims[i])
                    return dl_infer_fail(ic, DL_ERR_SHAPE, "updates dim %d is %lld, expected %lld",
                                         i, (long long)u->dims[i], (long long)e);
            }
        }
    }
    return dl_infer_same(ic, 0, 0);
}

static dl_status scatternd_ref(dl_kernel *kc) {
    DL_TRY(dl_kernel_outs(kc));
    const dl_tensor *x = kc->in[0], *ix = kc->in[1], *u = kc->in[2];
    dl_tensor *y = kc->out[0];
    int q = ix->rank;
    if (q < 1 || x->rank < 1) return dl_kernel_fail(kc, DL_ERR_INTERNAL, "scatternd shapes");
    int k = (int)ix->dims[q - 1];
    if (k > x->rank) return dl_kernel_fail(kc, DL_ERR_INTERNAL, "scatternd shapes");
    int64_t N = prod_dims(ix->dims, 0, q - 1);
    int64_t S = prod_dims(x->dims, k, x->rank);
    if (u->numel != N * S || y->numel != x->numel || y->dtype != x->dtype)
        return dl_kernel_fail(kc, DL_ERR_INTERNAL, "scatternd shapes");
    int mode = kernel_reduction(kc);
    copy_elems(y, 0, x, 0, x->numel);
    for (int64_t t = 0; t < N; t++) {
        int64_t off = 0, bad = 0;
        int bad_axis = 0;
        if (!nd_offset(x, ix, 0, k, 0, t, &off, &bad, &bad_axis))
            return bad_index(kc, bad, x->dims[bad_axis], bad_axis);
        for (int64_t s = 0; s < S; s++) apply_update(y, off + s, u, t * S + s, mode);
    }
    return DL_OK;
}

/* ---- Compress ---- */

/* Number of selected entries of condition c over a length-d axis, or -1 with *bad when a true
 * entry lies beyond d. */
static int64_t compress_count(const dl_tensor *c, int64_t d, bool *bad) {
    int64_t n = 0;
    *bad = false;
    for (int64_t i = 0; i < c->numel; i++) {
        if (!dl_get_i64(c, i)) continue;
        if (i >= d) *bad = true;
        n++;
    }
    return n;
}

static dl_status compress_infer(dl_infer *ic) {
    const dl_type *x = ic->in[0];
    if (!dl_has_in(ic, 1)) return dl_infer_fail(ic, DL_ERR_INVALID, "condition input is missing");
    const dl_type *c = ic->in[1];
    if (c->dtype != DL_BOOL && !dl_dtype_is_int(c->dtype))
        return dl_infer_fail(ic, DL_ERR_TYPE, "condition must be bool");
    if (c->rank != DL_RANK_UNKNOWN && c->rank != 1)
        return dl_infer_fail(ic, DL_ERR_SHAPE, "condition must be 1-D");
    const dl_attr *a = dl_node_attr(ic->node, "axis");
    if (x->rank == DL_RANK_UNKNOWN) {
        if (!a) return dl_infer_set(ic, 0, x->dtype, 1, NULL);
        ic->out[0].dtype = x->dtype;
        return DL_OK;
    }
    int axis = -1;
    int64_t d = -1;
    if (a) {
        if (ic->opset < 11 && a->i < 0)
            return dl_infer_fail(ic, DL_ERR_INVALID, "negative axis needs opset 11");
        DL_TRY(dl_infer_axis(ic, a->i, x->rank, &axis));
        d = x->dims[axis];
    } else {
        d = 1;
        for (int i = 0; i < x->rank; i++) {
            if (x->dims[i] < 0) {
                d = -1;
                break;
            }
            if (__builtin_mul_overflow(d, x->dims[i], &d))
                return dl_infer_fail(ic, DL_ERR_LIMIT, "size overflows");
        }
    }
    int64_t n = dl_infer_fresh_dim(ic);
    const dl_tensor *cv = ic->value ? ic->value[1] : NULL;
    if (cv && d >= 0) {
        bool bad;
        n = compress_count(cv, d, &bad);
        if (bad)
            return dl_infer_fail(ic, DL_ERR_SHAPE,
                                 "condition selects entries beyond the axis length %lld",
                                 (long long)d);
    }
    if (!a) return dl_infer_set(ic, 0, x->dtype, 1, &n);
    int64_t dims[R];
    memcpy(dims, x->dims, sizeof(int64_t) * (size_t)x->rank);
    dims[axis] = n;
    return dl_infer_set(ic, 0, x->dtype, x->rank, dims);
}

static dl_status compress_ref(dl_kernel *kc) {
    DL_TRY(dl_kernel_outs(kc));
    const dl_tensor *x = kc->in[0], *c = kc->in[1];
    dl_tensor *y = kc->out[0];
    const dl_attr *a = dl_node_attr(kc->node, "axis");
    int axis = 0;
    int64_t outer = 1, d = x->numel, inner = 1;
    if (a) {
        axis = (int)(a->i < 0 ? a->i + x->rank : a->i);
        if (axis < 0 || axis >= x->rank) return dl_kernel_fail(kc, DL_ERR_INTERNAL, "bad axis");
        outer = prod_dims(x->dims, 0, axis);
        d = x->dims[axis];
        inner = prod_dims(x->dims, axis + 1, x->rank);
    }
    bool bad;
    int64_t n = compress_count(c, d, &bad);
    if (bad) return dl_kernel_fail(kc, DL_ERR_SHAPE, "condition selects entries beyond the axis");
    if (y->numel != outer * n * inner || y->dtype != x->dtype)
        return dl_kernel_fail(kc, DL_ERR_INTERNAL, "compress output mismatch");
    int64_t o = 0;
    int64_t m = c->numel < d ? c->numel : d;
    for (int64_t b = 0; b < outer; b++)
        for (int64_t i = 0; i < m; i++) {
            if (!dl_get_i64(c, i)) continue;
            copy_elems(y, o, x, (b * d + i) * inner, inner);
            o += inner;
        }
    return DL_OK;
}

/* ---- NonZero ---- */

static bool is_nonzero(const dl_tensor *x, int64_t i) {
    return dl_dtype_is_float(x->dtype) ? dl_get_f64(x, i) != 0.0 : dl_get_i64(x, i) != 0;
}

static dl_status nonzero_infer(dl_infer *ic) {
    const dl_type *x = ic->in[0];
    int64_t dims[2] = {x->rank >= 0 ? x->rank : dl_infer_fresh_dim(ic), dl_infer_fresh_dim(ic)};
    const dl_tensor *v = ic->value ? ic->value[0] : NULL;
    if (v) {
        dims[1] = 0;
        for (int64_t i = 0; i < v->numel; i++) dims[1] += is_nonzero(v, i);
    }
    return dl_infer_set(ic, 0, DL_I64, 2, dims);
}

static dl_status nonzero_ref(dl_kernel *kc) {
    DL_TRY(dl_kernel_outs(kc));
    const dl_tensor *x = kc->in[0];
    dl_tensor *y = kc->out[0];
    int64_t n = 0;
    for (int64_t i = 0; i < x->numel; i++) n += is_nonzero(x, i);
    if (y->dtype != DL_I64 || y->rank != 2 || y->dims[0] != x->rank || y->dims[1] != n)
        return dl_kernel_fail(kc, DL_ERR_INTERNAL, "nonzero output mismatch");
    if (x->numel == 0) return DL_OK;
    int64_t idx[R] = {0}, j = 0;
    int64_t *out = y->data;
    for (int64_t i = 0; i < x->numel; i++) {
        if (is_nonzero(x, i)) {
            for (int a = 0; a < x->rank; a++) out[a * n + j] = idx[a];
            j++;
        }
        dl_index_next(x->rank, x->dims, idx);
    }
    return DL_OK;
}

/* ---- OneHot ---- */

static dl_status onehot_depth(dl_infer *ic, int64_t *depth, bool *known) {
    *known = false;
    const dl_tensor *v = ic->value ? ic->value[1] : NULL;
    if (!v) return DL_OK;
    if (v->numel != 1) return dl_infer_fail(ic, DL_ERR_SHAPE, "depth must have one element");
    double d = dl_get_f64(v, 0);
    if (!(d >= 1.0 && d < 9.0e15))
        return dl_infer_fail(ic, DL_ERR_INVALID, "depth %g must be a positive count", d);
    *depth = dl_dtype_is_float(v->dtype) ? (int64_t)d : dl_get_i64(v, 0);
    *known = true;
    return DL_OK;
}

static dl_status onehot_infer(dl_infer *ic) {
    const dl_type *ix = ic->in[0];
    for (int i = 1; i < 3; i++)
        if (!dl_has_in(ic, i)) return dl_infer_fail(ic, DL_ERR_INVALID, "input %d is missing", i);
    const dl_type *dep = ic->in[1], *vals = ic->in[2];
    if (ix->dtype == DL_BOOL || dep->dtype == DL_BOOL)
        return dl_infer_fail(ic, DL_ERR_TYPE, "indices and depth must be numeric");
    if (dep->rank > 1 || (dep->rank == 1 && dep->dims[0] >= 0 && dep->dims[0] != 1))
        return dl_infer_fail(ic, DL_ERR_SHAPE, "depth must be a scalar");
    if (vals->rank != DL_RANK_UNKNOWN &&
        (vals->rank != 1 || (vals->dims[0] >= 0 && vals->dims[0] != 2)))
        return dl_infer_fail(ic, DL_ERR_SHAPE, "values must be [off_value, on_value]");
    int64_t depth;
    bool known;
    DL_TRY(onehot_depth(ic, &depth, &known));
    if (ix->rank == DL_RANK_UNKNOWN) {
        ic->out[0].dtype = vals->dtype;
        return DL_OK;
    }
    int rank = ix->rank + 1;
    if (rank > R)
        return dl_infer_fail(ic, DL_ERR_UNSUPPORTED, "output rank %d exceeds %d", rank, R);
    int axis;
    DL_TRY(dl_infer_axis(ic, dl_attr_int(ic->node, "axis", -1), rank, &axis));
    int64_t dims[R];
    int j = 0;
    for (int i = 0; i < rank; i++)
        dims[i] = i == axis ? (known ? depth : dl_infer_fresh_dim(ic)) : ix->dims[j++];
    return dl_infer_set(ic, 0, vals->dtype, rank, dims);
}

static dl_status onehot_ref(dl_kernel *kc) {
    DL_TRY(dl_kernel_outs(kc));
    const dl_tensor *ix = kc->in[0], *vals = kc->in[2];
    dl_tensor *y = kc->out[0];
    int rank = ix->rank + 1;
    int axis = (int)dl_attr_int(kc->node, "axis", -1);
    if (axis < 0) axis += rank;
    if (axis < 0 || axis >= rank || y->rank != rank || vals->numel != 2 || y->dtype != vals->dtype)
        return dl_kernel_fail(kc, DL_ERR_INTERNAL, "onehot output mismatch");
    int64_t depth = y->dims[axis];
    int64_t outer = prod_dims(ix->dims, 0, axis), inner = prod_dims(ix->dims, axis, ix->rank);
    if (y->numel != outer * depth * inner)
        return dl_kernel_fail(kc, DL_ERR_INTERNAL, "onehot output mismatch");
    for (int64_t i = 0; i < y->numel; i++) copy_elems(y, i, vals, 0, 1);
    for (int64_t o = 0; o < outer; o++)
        for (int64_t i = 0; i < inner; i++) {
            int64_t p = o * inner + i, v;
            if (dl_dtype_is_float(ix->dtype)) {
                double f = dl_get_f64(ix, p);
                if (!(f > -9.0e18 && f < 9.0e18)) continue;
                v = (int64_t)f;
            } else {
                v = dl_get_i64(ix, p);
            }
            if (!norm_index(&v, depth)) continue; /* out of range: all off */
            copy_elems(y, (o * depth + v) * inner + i, vals, 1, 1);
        }
    return DL_OK;
}

/* ---- gradient rules (grad.h) ---- */
/* A gather's gradient scatter-adds dy into zeros shaped like the data (ScatterElements /
 * ScatterND with reduction="add", so repeated indices accumulate). Negative indices are
 * normalized first: folded into a new constant when the indices are constant. */

static dl_value *grad_const(dl_grad_ctx *gc, dl_tensor *t) {
    return dl_constant(gc->g, dl_graph_fresh_name(gc->g, "grad_const"), t);
}

/* Dims [from, to) of data as an int64 vector (a constant when known). */
static dl_value *grad_dims(dl_grad_ctx *gc, dl_value *data, int from, int to) {
    bool known = true;
    for (int i = from; i < to; i++) known = known && data->type.dims[i] >= 0;
    if (known) return dg_ints(gc, to - from, data->type.dims + from);
    char a[48];
    snprintf(a, sizeof a, "start=%d;end=%d", from, to);
    return dg_op1(gc, "Shape", data, a);
}

/* Zeros shaped like data, to scatter into. */
static dl_value *grad_zeros(dl_grad_ctx *gc, dl_value *data) {
    return dg_expand_like(gc, dg_scalar(gc, 0, data->type.dtype), data);
}

/* idx with each negative entry raised by its bound: bound is data's dims [from, to), broadcast
 * along the last axis of idx (one dim when to = from + 1). */
static dl_value *nonneg_indices(dl_grad_ctx *gc, dl_value *idx, dl_value *data, int from, int to) {
    const dl_tensor *c = idx->constant;
    int k = to - from;
    bool known = true;
    for (int i = from; i < to; i++) known = known && data->type.dims[i] >= 0;
    if (c && known) {
        bool neg = false;
        for (int64_t i = 0; i < c->numel; i++) neg = neg || dl_get_i64(c, i) < 0;
        if (!neg) return idx;
        dl_tensor *t = NULL;
        if (dl_tensor_new(gc->g->ctx, DL_I64, c->rank, c->dims, &t) != DL_OK) {
            if (gc->g->status == DL_OK) gc->g->status = gc->g->ctx->status;
            return NULL;
        }
        for (int64_t i = 0; i < c->numel; i++) {
            int64_t v = dl_get_i64(c, i);
            dl_set_i64(t, i, v < 0 ? v + data->type.dims[from + (k > 1 ? i % k : 0)] : v);
        }
        return grad_const(gc, t);
    }
    dl_value *bound = grad_dims(gc, data, from, to);
    if (idx->type.dtype != DL_I64) {
        char a[16];
        snprintf(a, sizeof a, "to=%d", (int)dl_dtype_to_onnx(idx->type.dtype));
        bound = dg_op1(gc, "Cast", bound, a);
    }
    dl_value *zero = dg_scalar(gc, 0, idx->type.dtype);
    return dg_op3(gc, "Where", dg_op2(gc, "Less", idx, zero, NULL),
                  dg_op2(gc, "Add", idx, bound, NULL), idx, NULL);
}

/* Gather along axis a: dy [data[:a], I..., data[a+1:]] is viewed as [data[:a], |I|, data[a+1:]],
 * the indices as [1.., |I|, ..1] expanded to it, and scattered along a. */
static dl_status gather_grad(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy,
                             dl_value **dx) {
    dl_value *data = n->in[0], *idx = n->in[1];
    int r = data->type.rank, q = idx->type.rank;
    if (r < 1 || q < 0) return dg_refuse(gc, n, "the data and indices ranks must be known");
    int64_t axis = dl_attr_int(n, "axis", 0);
    if (axis < 0) axis += r;
    dl_value *g = dy[0], *shape;
    if (dl_type_known(&data->type) && dl_type_known(&idx->type)) {
        int64_t dims[R];
        memcpy(dims, data->type.dims, sizeof(int64_t) * (size_t)r);
        dims[axis] = prod_dims(idx->type.dims, 0, q);
        shape = dg_ints(gc, r, dims);
    } else {
        int64_t m1 = -1;
        dl_value *parts[3] = {grad_dims(gc, data, 0, (int)axis), dg_ints(gc, 1, &m1),
                              grad_dims(gc, data, (int)axis + 1, r)};
        shape = dg_op(gc, "Concat", 3, parts, "axis=0");
    }
    if (q != 1) g = dg_op2(gc, "Reshape", g, shape, NULL);
    int64_t ones[R];
    for (int i = 0; i < r; i++) ones[i] = i == axis ? -1 : 1;
    dl_value *iv = nonneg_indices(gc, idx, data, (int)axis, (int)axis + 1);
    iv = dg_op2(gc, "Reshape", iv, dg_ints(gc, r, ones), NULL);
    iv = dg_expand_like(gc, iv, g);
    char a[64];
    snprintf(a, sizeof a, "axis=%d;reduction=add", (int)axis);
    dx[0] = dg_op3(gc, "ScatterElements", grad_zeros(gc, data), iv, g, a);
    return dg_status(gc);
}

static dl_status gather_elements_grad(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy,
                                      dl_value **dx) {
    dl_value *data = n->in[0];
    int r = data->type.rank;
    if (r < 1) return dg_refuse(gc, n, "the data rank must be known");
    int64_t axis = dl_attr_int(n, "axis", 0);
    if (axis < 0) axis += r;
    char a[64];
    snprintf(a, sizeof a, "axis=%d;reduction=add", (int)axis);
    dl_value *iv = nonneg_indices(gc, n->in[1], data, (int)axis, (int)axis + 1);
    dx[0] = dg_op3(gc, "ScatterElements", grad_zeros(gc, data), iv, dy[0], a);
    return dg_status(gc);
}

/* GatherND: ScatterND-add of dy at the same index tuples. With b batch dims the tuples are
 * prefixed with their batch coordinates (a constant grid) so ScatterND, which has no batch
 * dims, addresses the whole data tensor. */
static dl_status gathernd_grad(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy,
                               dl_value **dx) {
    dl_value *data = n->in[0], *idx = n->in[1];
    int r = data->type.rank, q = idx->type.rank;
    int b = n->opset >= 12 ? (int)dl_attr_int(n, "batch_dims", 0) : 0;
    if (r < 1 || q < 1 || idx->type.dims[q - 1] < 0)
        return dg_refuse(gc, n, "the ranks and the index tuple length must be known");
    int k = (int)idx->type.dims[q - 1];
    dl_value *iv = nonneg_indices(gc, idx, data, b, b + k);
    if (b > 0) {
        if (!dl_type_known(&idx->type))
            return dg_refuse(gc, n, "batch_dims > 0 needs indices of known shape");
        if (iv && iv->type.dtype != DL_I64) iv = dg_op1(gc, "Cast", iv, "to=7");
        int64_t gd[R];
        memcpy(gd, idx->type.dims, sizeof(int64_t) * (size_t)q);
        gd[q - 1] = b;
        dl_tensor *t = NULL;
        if (dl_tensor_new(gc->g->ctx, DL_I64, q, gd, &t) != DL_OK) {
            if (gc->g->status == DL_OK) gc->g->status = gc->g->ctx->status;
            return dg_status(gc);
        }
        /* tuple j's batch coordinates: the first b digits of j in the dims idx[:q-1] */
        int64_t tuples = prod_dims(gd, 0, q - 1);
        for (int64_t j = 0; j < tuples; j++) {
            int64_t rest = j;
            for (int d = q - 2; d >= 0; d--) {
                if (d < b) dl_set_i64(t, j * b + d, rest % gd[d]);
                rest /= gd[d];
            }
        }
        dl_value *both[2] = {grad_const(gc, t), iv};
        iv = dg_op(gc, "Concat", 2, both, "axis=-1");
    }
    dx[0] = dg_op3(gc, "ScatterND", grad_zeros(gc, data), iv, dy[0], "reduction=add");
    return dg_status(gc);
}

/* ---- the table ---- */

/* clang-format off */
const dl_op_def dl_ops_index[] = {
    {.name = "Gather", .min_in = 2, .max_in = 2, .min_out = 1, .max_out = 1,
     .attrs = axis_attrs, .infer = gather_infer, .ref = gather_ref,
     .grad = gather_grad},
    {.name = "GatherElements", .min_in = 2, .max_in = 2, .min_out = 1, .max_out = 1,
     .attrs = axis_attrs, .infer = gather_elements_infer, .ref = gather_elements_ref,
     .grad = gather_elements_grad},
    {.name = "GatherND", .min_in = 2, .max_in = 2, .min_out = 1, .max_out = 1,
     .attrs = gathernd_attrs, .infer = gathernd_infer, .ref = gathernd_ref,
     .grad = gathernd_grad},
    {.name = "ScatterElements", .min_in = 3, .max_in = 3, .min_out = 1, .max_out = 1,
     .attrs = scatter_elements_attrs, .infer = scatter_elements_infer, .ref = scatter_elements_ref},
    {.name = "Scatter", .min_in = 3, .max_in = 3, .min_out = 1, .max_out = 1,
     .attrs = axis_attrs, .infer = scatter_elements_infer, .ref = scatter_elements_ref},
    {.name = "ScatterND", .min_in = 3, .max_in = 3, .min_out = 1, .max_out = 1,
     .attrs = scatternd_attrs, .infer = scatternd_infer, .ref = scatternd_ref},
    {.name = "Compress", .min_in = 2, .max_in = 2, .min_out = 1, .max_out = 1,
     .attrs = axis_attrs, .infer = compress_infer, .ref = compress_ref},
    {.name = "NonZero", .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1,
     .infer = nonzero_infer, .ref = nonzero_ref},
    {.name = "OneHot", .min_in = 3, .max_in = 3, .min_out = 1, .max_out = 1,
     .attrs = axis_attrs, .infer = onehot_infer, .ref = onehot_ref},
    {.name = NULL},
};
/* clang-format on */
