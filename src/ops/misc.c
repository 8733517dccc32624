/* misc.c — op family "misc" (rows of the op table): TopK, Det, Unique, NonMaxSuppression,
 * HannWindow, HammingWindow, BlackmanWindow; TopK's gradient rule. */
#include "op-impl.h"
#include "../train/grad.h"

#include <math.h>

/* ---------------------------------------------------------------------------------------------
 * shared helpers
 * ------------------------------------------------------------------------------------------- */

/* Stable merge sort of n int64 keys with a context comparator; tmp holds n entries. */
typedef int (*cmp_fn)(int64_t a, int64_t b, const void *ctx);

static void msort(int64_t *a, int64_t *tmp, int64_t n, cmp_fn cmp, const void *ctx) {
    for (int64_t w = 1; w < n; w *= 2) {
        for (int64_t lo = 0; lo < n; lo += 2 * w) {
            int64_t mid = lo + w < n ? lo + w : n;
            int64_t hi = lo + 2 * w < n ? lo + 2 * w : n;
            int64_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) tmp[k++] = cmp(a[j], a[i], ctx) < 0 ? a[j++] : a[i++];
            while (i < mid) tmp[k++] = a[i++];
            while (j < hi) tmp[k++] = a[j++];
        }
        memcpy(a, tmp, (size_t)n * sizeof(int64_t));
    }
}

/* Allocates n int64 (at least one) with size checks. */
static int64_t *alloc_i64(dl_kernel *kc, int64_t n) {
    size_t nb;
    if (n < 0 || dl_mul_size(kc->ctx, (size_t)(n ? n : 1), sizeof(int64_t), &nb, "scratch"))
        return NULL;
    return dl_malloc(nb);
}

/* ---------------------------------------------------------------------------------------------
 * TopK
 * ------------------------------------------------------------------------------------------- */

static const dl_attr_spec topk_attrs[] = {
    {"k", DL_ATTR_INT},      {"axis", DL_ATTR_INT},     {"largest", DL_ATTR_INT},
    {"sorted", DL_ATTR_INT}, {NULL, DL_ATTR_UNDEFINED},
};

static dl_status topk_infer(dl_infer *ic) {
    const dl_type *x = ic->in[0];
    if (!dl_dtype_is_float(x->dtype) && !dl_dtype_is_int(x->dtype))
        return dl_infer_fail(ic, DL_ERR_TYPE, "unsupported input dtype %s",
                             dl_dtype_name(x->dtype));
    int64_t k = -1;
    bool known = true;
    if (ic->opset < 10) {
        if (ic->n_in > 1) return dl_infer_fail(ic, DL_ERR_INVALID, "takes 1 input before opset 10");
        if (!dl_node_attr(ic->node, "k"))
            return dl_infer_fail(ic, DL_ERR_INVALID, "missing attribute k");
        k = dl_attr_int(ic->node, "k", 0);
    } else {
        if (!dl_has_in(ic, 1)) return dl_infer_fail(ic, DL_ERR_INVALID, "missing input K");
        const dl_type *kt = ic->in[1];
        if (kt->dtype != DL_I64)
            return dl_infer_fail(ic, DL_ERR_TYPE, "K must be int64, got %s",
                                 dl_dtype_name(kt->dtype));
        if (kt->rank > 1) return dl_infer_fail(ic, DL_ERR_SHAPE, "K must be 1-D with one value");
        int64_t v[1];
        int n = 0;
        DL_TRY(dl_infer_const_ints(ic, 1, v, 1, &n, &known));
        if (known) {
            if (n != 1) return dl_infer_fail(ic, DL_ERR_SHAPE, "K must hold one value");
            k = v[0];
        }
    }
    if (known && k < 0)
        return dl_infer_fail(ic, DL_ERR_INVALID, "k must be >= 0, got %lld", (long long)k);
    ic->out[0].dtype = x->dtype;
    if (ic->n_out > 1) ic->out[1].dtype = DL_I64;
    if (x->rank < 0) return DL_OK;
    int axis;
    DL_TRY(dl_infer_axis(ic, dl_attr_int(ic->node, "axis", -1), x->rank, &axis));
    if (known && x->dims[axis] >= 0 && k > x->dims[axis])
        return dl_infer_fail(ic, DL_ERR_INVALID, "k = %lld exceeds axis size %lld", (long long)k,
                             (long long)x->dims[axis]);
    int64_t dims[DL_MAX_RANK];
    for (int d = 0; d < x->rank; d++) dims[d] = x->dims[d];
    dims[axis] = known ? k : dl_infer_fresh_dim(ic);
    DL_TRY(dl_infer_set(ic, 0, x->dtype, x->rank, dims));
    if (ic->n_out > 1) DL_TRY(dl_infer_set(ic, 1, DL_I64, x->rank, dims));
    return DL_OK;
}

typedef struct topk_ctx {
    const dl_tensor *x;
    int64_t base, stride;
    bool largest;
} topk_ctx;

/* Orders candidate positions: best first, ties by lower index. */
static int topk_cmp(int64_t a, int64_t b, const void *p) {
    const topk_ctx *c = p;
    int r = dl_cmp_elems(c->x, c->base + a * c->stride, c->x, c->base + b * c->stride);
    if (c->largest) r = -r;
    if (r) return r;
    return a < b ? -1 : (a > b ? 1 : 0);
}

static dl_status topk_ref(dl_kernel *kc) {
    const dl_tensor *x = kc->in[0];
    int rank = x->rank;
    int64_t k;
    if (kc->opset < 10) {
        k = dl_attr_int(kc->node, "k", 0);
    } else {
        const dl_tensor *kt = kc->in[1];
        if (!kt || kt->numel != 1) return dl_kernel_fail(kc, DL_ERR_SHAPE, "K must hold one value");
        k = dl_get_i64(kt, 0);
    }
    int64_t a = dl_attr_int(kc->node, "axis", -1);
    if (a < -rank || a >= rank)
        return dl_kernel_fail(kc, DL_ERR_INVALID, "axis %lld out of range", (long long)a);
    int axis = (int)(a < 0 ? a + rank : a);
    int64_t n = x->dims[axis];
    if (k < 0 || k > n)
        return dl_kernel_fail(kc, DL_ERR_INVALID, "k = %lld out of range [0, %lld]", (long long)k,
                              (long long)n);
    bool largest = dl_attr_int(kc->node, "largest", 1) != 0;
    int64_t dims[DL_MAX_RANK];
    for (int d = 0; d < rank; d++) dims[d] = x->dims[d];
    dims[axis] = k;
    DL_TRY(dl_kernel_out_as(kc, 0, x->dtype, rank, dims));
    if (kc->n_out > 1) DL_TRY(dl_kernel_out_as(kc, 1, DL_I64, rank, dims));
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis; d++) outer *= x->dims[d];
    for (int d = axis + 1; d < rank; d++) inner *= x->dims[d];
    if (k == 0 || outer == 0 || inner == 0) return DL_OK;
    int64_t *ord = alloc_i64(kc, n), *tmp = alloc_i64(kc, n);
    if (!ord || !tmp) {
        dl_free(ord);
        dl_free(tmp);
        return dl_kernel_fail(kc, DL_ERR_NOMEM, "out of memory");
    }
    dl_tensor *vals = kc->out[0];
    dl_tensor *idx = kc->n_out > 1 ? kc->out[1] : NULL;
    bool fl = dl_dtype_is_float(x->dtype);
    for (int64_t o = 0; o < outer; o++) {
        for (int64_t in = 0; in < inner; in++) {
            topk_ctx c = {x, o * n * inner + in, inner, largest};
            for (int64_t j = 0; j < n; j++) ord[j] = j;
            msort(ord, tmp, n, topk_cmp, &c);
            for (int64_t j = 0; j < k; j++) {
                int64_t src = c.base + ord[j] * inner;
                int64_t dst = (o * k + j) * inner + in;
                if (fl)
                    dl_set_f64(vals, dst, dl_get_f64(x, src));
                else
                    dl_set_i64(vals, dst, dl_get_i64(x, src));
                if (idx) dl_set_i64(idx, dst, ord[j]);
            }
        }
    }
    dl_free(ord);
    dl_free(tmp);
    return DL_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Det
 * ------------------------------------------------------------------------------------------- */

static dl_status det_infer(dl_infer *ic) {
    const dl_type *x = ic->in[0];
    if (!dl_dtype_is_float(x->dtype))
        return dl_infer_fail(ic, DL_ERR_TYPE, "input must be a floating type, got %s",
                             dl_dtype_name(x->dtype));
    if (x->rank < 0) {
        ic->out[0].dtype = x->dtype;
        return DL_OK;
    }
    if (x->rank < 2) return dl_infer_fail(ic, DL_ERR_SHAPE, "input must have rank >= 2");
    int64_t m = x->dims[x->rank - 2], m2 = x->dims[x->rank - 1];
    if (m >= 0 && m2 >= 0 && m != m2)
        return dl_infer_fail(ic, DL_ERR_SHAPE, "matrices must be square");
    return dl_infer_set(ic, 0, x->dtype, x->rank - 2, x->dims);
}

static dl_status det_ref(dl_kernel *kc) {
    const dl_tensor *x = kc->in[0];
    int rank = x->rank;
    if (rank < 2 || x->dims[rank - 1] != x->dims[rank - 2])
        return dl_kernel_fail(kc, DL_ERR_SHAPE, "input must be [*, M, M]");
    DL_TRY(dl_kernel_out_as(kc, 0, x->dtype, rank - 2, x->dims));
    dl_tensor *y = kc->out[0];
    int64_t m = x->dims[rank - 1];
    int64_t batch = y->numel;
    size_t nb, mm;
    DL_TRY(dl_mul_size(kc->ctx, (size_t)m, (size_t)m, &mm, "det scratch"));
    DL_TRY(dl_mul_size(kc->ctx, mm ? mm : 1, sizeof(double), &nb, "det scratch"));
    double *a = dl_malloc(nb);
    if (!a) return dl_kernel_fail(kc, DL_ERR_NOMEM, "out of memory");
    for (int64_t b = 0; b < batch; b++) {
        for (size_t i = 0; i < mm; i++) a[i] = dl_get_f64(x, b * (int64_t)mm + (int64_t)i);
        /* LU with partial pivoting */
        double det = 1;
        for (int64_t c = 0; c < m && det != 0; c++) {
            int64_t p = c;
            for (int64_t r = c + 1; r < m; r++)
                if (fabs(a[r * m + c]) > fabs(a[p * m + c])) p = r;
            if (a[p * m + c] == 0) {
                det = 0;
                break;
            }
            if (p != c) {
                for (int64_t j = 0; j < m; j++) {
                    double t = a[c * m + j];
                    a[c * m + j] = a[p * m + j];
                    a[p * m + j] = t;
                }
                det = -det;
            }
            double piv = a[c * m + c];
            det *= piv;
            for (int64_t r = c + 1; r < m; r++) {
                double f = a[r * m + c] / piv;
                if (f == 0) continue;
                for (int64_t j = c; j < m; j++) a[r * m + j] -= f * a[c * m + j];
            }
        }
        dl_set_f64(y, b, det);
    }
    dl_free(a);
    return DL_OK;
}

/* ---------------------------------------------------------------------------------------------
 * Unique
 * ------------------------------------------------------------------------------------------- */

static const dl_attr_spec unique_attrs[] = {
    {"axis", DL_ATTR_INT},
    {"sorted", DL_ATTR_INT},
    {NULL, DL_ATTR_UNDEFINED},
};

static dl_status unique_infer(dl_infer *ic) {
    const dl_type *x = ic->in[0];
    if (x->dtype == DL_DTYPE_UNDEFINED || x->dtype >= DL_DTYPE_COUNT)
        return dl_infer_fail(ic, DL_ERR_TYPE, "unsupported input dtype");
    bool has_axis = dl_node_attr(ic->node, "axis") != NULL;
    for (int o = 0; o < ic->n_out; o++) ic->out[o].dtype = o == 0 ? x->dtype : DL_I64;
    if (x->rank < 0) return DL_OK;
    int64_t u = dl_infer_fresh_dim(ic);
    int64_t ydims[DL_MAX_RANK];
    int yrank = 1;
    int64_t n; /* length of inverse_indices */
    ydims[0] = u;
    if (has_axis) {
        int axis;
        DL_TRY(dl_infer_axis(ic, dl_attr_int(ic->node, "axis", 0), x->rank, &axis));
        yrank = x->rank;
        for (int d = 0; d < x->rank; d++) ydims[d] = d == axis ? u : x->dims[d];
        n = x->dims[axis];
    } else {
        n = 1;
        for (int d = 0; d < x->rank && n >= 0; d++) {
            if (x->dims[d] < 0)
                n = -1;
            else if (x->dims[d] != 0 && n > INT64_MAX / x->dims[d])
                n = -1;
            else
                n *= x->dims[d];
        }
        if (n < 0) n = dl_infer_fresh_dim(ic);
    }
    DL_TRY(dl_infer_set(ic, 0, x->dtype, yrank, ydims));
    if (ic->n_out > 1) DL_TRY(dl_infer_set(ic, 1, DL_I64, 1, &u));
    if (ic->n_out > 2) DL_TRY(dl_infer_set(ic, 2, DL_I64, 1, &n));
    if (ic->n_out > 3) DL_TRY(dl_infer_set(ic, 3, DL_I64, 1, &u));
    return DL_OK;
}

typedef struct uniq_ctx {
    const dl_tensor *x;
    int64_t outer, n, inner;
} uniq_ctx;

/* Lexicographic comparison of slices a and b along the axis. */
static int uniq_cmp(int64_t a, int64_t b, const void *p) {
    const uniq_ctx *c = p;
    for (int64_t o = 0; o < c->outer; o++) {
        for (int64_t in = 0; in < c->inner; in++) {
            int64_t base = o * c->n * c->inner + in;
            int r = dl_cmp_elems(c->x, base + a * c->inner, c->x, base + b * c->inner);
            if (r) return r;
        }
    }
    return 0;
}

static int first_cmp(int64_t a, int64_t b, const void *p) {
    const int64_t *first = p;
    return first[a] < first[b] ? -1 : (first[a] > first[b] ? 1 : 0);
}

static dl_status unique_ref(dl_kernel *kc) {
    const dl_tensor *x = kc->in[0];
    int rank = x->rank;
    bool has_axis = dl_node_attr(kc->node, "axis") != NULL;
    bool sorted = dl_attr_int(kc->node, "sorted", 1) != 0;
    uniq_ctx c = {x, 1, x->numel, 1};
    int axis = 0;
    if (has_axis) {
        int64_t a = dl_attr_int(kc->node, "axis", 0);
        if (a < -rank || a >= rank)
            return dl_kernel_fail(kc, DL_ERR_INVALID, "axis %lld out of range", (long long)a);
        axis = (int)(a < 0 ? a + rank : a);
        c.n = x->dims[axis];
        for (int d = 0; d < axis; d++) c.outer *= x->dims[d];
        for (int d = axis + 1; d < rank; d++) c.inner *= x->dims[d];
    }
    int64_t n = c.n;
    /* ord: sorted slice positions; grp: group of each position; first/count per group;
     * outpos: output position of each group */
    int64_t *ord = alloc_i64(kc, n), *tmp = alloc_i64(kc, n), *grp = alloc_i64(kc, n);
    int64_t *first = alloc_i64(kc, n), *count = alloc_i64(kc, n), *gord = alloc_i64(kc, n);
    int64_t *outpos = alloc_i64(kc, n);
    dl_status st = DL_OK;
    if (!ord || !tmp || !grp || !first || !count || !gord || !outpos) {
        st = dl_kernel_fail(kc, DL_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int64_t j = 0; j < n; j++) ord[j] = j;
    msort(ord, tmp, n, uniq_cmp, &c);
    int64_t u = 0;
    for (int64_t j = 0; j < n; j++) {
        if (j == 0 || uniq_cmp(ord[j - 1], ord[j], &c) != 0) {
            first[u] = ord[j]; /* stable sort: the lowest index of the group comes first */
            count[u] = 0;
            u++;
        }
        grp[ord[j]] = u - 1;
        count[u - 1]++;
    }
    for (int64_t g = 0; g < u; g++) gord[g] = g;
    if (!sorted) msort(gord, tmp, u, first_cmp, first);
    for (int64_t p = 0; p < u; p++) outpos[gord[p]] = p;

    int64_t ydims[DL_MAX_RANK];
    int yrank = 1;
    ydims[0] = u;
    if (has_axis) {
        yrank = rank;
        for (int d = 0; d < rank; d++) ydims[d] = d == axis ? u : x->dims[d];
    }
    st = dl_kernel_out_as(kc, 0, x->dtype, yrank, ydims);
    if (st == DL_OK && kc->n_out > 1) st = dl_kernel_out_as(kc, 1, DL_I64, 1, &u);
    if (st == DL_OK && kc->n_out > 2) st = dl_kernel_out_as(kc, 2, DL_I64, 1, &n);
    if (st == DL_OK && kc->n_out > 3) st = dl_kernel_out_as(kc, 3, DL_I64, 1, &u);
    if (st != DL_OK) goto done;
    dl_tensor *y = kc->out[0];
    bool fl = dl_dtype_is_float(x->dtype);
    for (int64_t p = 0; p < u; p++) {
        int64_t src_j = first[gord[p]];
        for (int64_t o = 0; o < c.outer; o++) {
            for (int64_t in = 0; in < c.inner; in++) {
                int64_t src = (o * n + src_j) * c.inner + in;
                int64_t dst = (o * u + p) * c.inner + in;
                if (fl)
                    dl_set_f64(y, dst, dl_get_f64(x, src));
                else
                    dl_set_i64(y, dst, dl_get_i64(x, src));
            }
        }
        if (kc->n_out > 1) dl_set_i64(kc->out[1], p, src_j);
        if (kc->n_out > 3) dl_set_i64(kc->out[3], p, count[gord[p]]);
    }
    if (kc->n_out > 2)
        for (int64_t j = 0; j < n; j++) dl_set_i64(kc->out[2], j, outpos[grp[j]]);
done:
    dl_free(ord);
    dl_free(tmp);
    dl_free(grp);
    dl_free(first);
    dl_free(count);
    dl_free(gord);
    dl_free(outpos);
    return st;
}

/* ---------------------------------------------------------------------------------------------
 * NonMaxSuppression
 * ------------------------------------------------------------------------------------------- */

static const dl_attr_spec nms_attrs[] = {
    {"center_point_box", DL_ATTR_INT},
    {NULL, DL_ATTR_UNDEFINED},
};

static dl_status nms_infer(dl_infer *ic) {
    const dl_type *b = ic->in[0], *s = ic->in[1];
    if (!dl_dtype_is_float(b->dtype) || s->dtype != b->dtype)
        return dl_infer_fail(ic, DL_ERR_TYPE, "boxes and scores must share a floating dtype");
    if (b->rank >= 0 && (b->rank != 3 || (b->dims[2] >= 0 && b->dims[2] != 4)))
        return dl_infer_fail(ic, DL_ERR_SHAPE, "boxes must be [batch, boxes, 4]");
    if (s->rank >= 0 && s->rank != 3)
        return dl_infer_fail(ic, DL_ERR_SHAPE, "scores must be [batch, classes, boxes]");
    if (b->rank == 3 && s->rank == 3) {
        if (b->dims[0] >= 0 && s->dims[0] >= 0 && b->dims[0] != s->dims[0])
            return dl_infer_fail(ic, DL_ERR_SHAPE, "boxes and scores batch sizes differ");
        if (b->dims[1] >= 0 && s->dims[2] >= 0 && b->dims[1] != s->dims[2])
            return dl_infer_fail(ic, DL_ERR_SHAPE, "boxes and scores box counts differ");
    }
    if (dl_has_in(ic, 2) && ic->in[2]->dtype != DL_I64)
        return dl_infer_fail(ic, DL_ERR_TYPE, "max_output_boxes_per_class must be int64");
    for (int i = 3; i < 5; i++)
        if (dl_has_in(ic, i) && !dl_dtype_is_float(ic->in[i]->dtype))
            return dl_infer_fail(ic, DL_ERR_TYPE, "input %d must be a float scalar", i);
    for (int i = 2; i < 5; i++)
        if (dl_has_in(ic, i) && ic->in[i]->rank > 1)
            return dl_infer_fail(ic, DL_ERR_SHAPE, "input %d must be a scalar", i);
    int64_t c = dl_attr_int(ic->node, "center_point_box", 0);
    if (c != 0 && c != 1)
        return dl_infer_fail(ic, DL_ERR_INVALID, "center_point_box must be 0 or 1");
    int64_t dims[2] = {dl_infer_fresh_dim(ic), 3};
    return dl_infer_set(ic, 0, DL_I64, 2, dims);
}

typedef struct nms_ctx {
    const dl_tensor *scores;
    int64_t base;
} nms_ctx;

/* Higher score first; ties by lower box index. */
static int nms_cmp(int64_t a, int64_t b, const void *p) {
    const nms_ctx *c = p;
    double x = dl_get_f64(c->scores, c->base + a), y = dl_get_f64(c->scores, c->base + b);
    if (x > y) return -1;
    if (x < y) return 1;
    return a < b ? -1 : (a > b ? 1 : 0);
}

/* Box i of batch b as (y1, x1, y2, x2) with y1 <= y2, x1 <= x2. */
static void nms_box(const dl_tensor *boxes, int64_t off, bool center, double *r) {
    double v[4];
    for (int i = 0; i < 4; i++) v[i] = dl_get_f64(boxes, off + i);
    if (center) { /* x_center, y_center, width, height */
        r[0] = v[1] - v[3] / 2;
        r[2] = v[1] + v[3] / 2;
        r[1] = v[0] - v[2] / 2;
        r[3] = v[0] + v[2] / 2;
    } else {
        r[0] = fmin(v[0], v[2]);
        r[2] = fmax(v[0], v[2]);
        r[1] = fmin(v[1], v[3]);
        r[3] = fmax(v[1], v[3]);
    }
}

static double nms_iou(const double *a, const double *b) {
    double area_a = (a[2] - a[0]) * (a[3] - a[1]);
    double area_b = (b[2] - b[0]) * (b[3] - b[1]);
    if (area_a <= 0 || area_b <= 0) return 0;
    double ih = fmin(a[2], b[2]) - fmax(a[0], b[0]);
    double iw = fmin(a[3], b[3]) - fmax(a[1], b[1]);
    if (ih <= 0 || iw <= 0) return 0;
    double inter = ih * iw;
    return inter / (area_a + area_b - inter);
}

static dl_status nms_ref(dl_kernel *kc) {
    const dl_tensor *boxes = kc->in[0], *scores = kc->in[1];
    const dl_tensor *mo = kc->n_in > 2 ? kc->in[2] : NULL;
    const dl_tensor *iou_t = kc->n_in > 3 ? kc->in[3] : NULL;
    const dl_tensor *st_t = kc->n_in > 4 ? kc->in[4] : NULL;
    if (boxes->rank != 3 || boxes->dims[2] != 4 || scores->rank != 3 ||
        scores->dims[0] != boxes->dims[0] || scores->dims[2] != boxes->dims[1])
        return dl_kernel_fail(kc, DL_ERR_SHAPE, "boxes/scores shapes do not agree");
    if ((mo && mo->numel > 1) || (iou_t && iou_t->numel > 1) || (st_t && st_t->numel > 1))
        return dl_kernel_fail(kc, DL_ERR_SHAPE, "scalar inputs must hold one value");
    int64_t max_out = mo && mo->numel == 1 ? dl_get_i64(mo, 0) : 0;
    double iou_th = iou_t && iou_t->numel == 1 ? dl_get_f64(iou_t, 0) : 0;
    bool has_st = st_t && st_t->numel == 1;
    double score_th = has_st ? dl_get_f64(st_t, 0) : 0;
    bool center = dl_attr_int(kc->node, "center_point_box", 0) != 0;
    int64_t B = boxes->dims[0], N = boxes->dims[1], C = scores->dims[1];
    if (max_out < 0) max_out = 0;
    if (max_out > N) max_out = N;
    /* worst case B * C * max_out selections */
    size_t cap;
    DL_TRY(dl_mul_size(kc->ctx, (size_t)B, (size_t)C, &cap, "selections"));
    DL_TRY(dl_mul_size(kc->ctx, cap, (size_t)max_out, &cap, "selections"));
    DL_TRY(dl_mul_size(kc->ctx, cap, 3, &cap, "selections"));
    int64_t *sel = alloc_i64(kc, (int64_t)cap);
    int64_t *ord = alloc_i64(kc, N), *tmp = alloc_i64(kc, N), *kept = alloc_i64(kc, N);
    dl_status st = DL_OK;
    if (!sel || !ord || !tmp || !kept) {
        st = dl_kernel_fail(kc, DL_ERR_NOMEM, "out of memory");
        goto done;
    }
    int64_t nsel = 0;
    for (int64_t b = 0; b < B && max_out > 0; b++) {
        for (int64_t c = 0; c < C; c++) {
            nms_ctx ctx = {scores, (b * C + c) * N};
            int64_t m = 0;
            for (int64_t i = 0; i < N; i++)
                if (!has_st || dl_get_f64(scores, ctx.base + i) > score_th) ord[m++] = i;
            msort(ord, tmp, m, nms_cmp, &ctx);
            int64_t nk = 0;
            for (int64_t j = 0; j < m && nk < max_out; j++) {
                double bj[4];
                nms_box(boxes, (b * N + ord[j]) * 4, center, bj);
                bool keep = true;
                for (int64_t q = 0; q < nk && keep; q++) {
                    double bq[4];
                    nms_box(boxes, (b * N + kept[q]) * 4, center, bq);
                    if (nms_iou(bj, bq) > iou_th) keep = false;
                }
                if (!keep) continue;
                kept[nk++] = ord[j];
                sel[nsel * 3] = b;
                sel[nsel * 3 + 1] = c;
                sel[nsel * 3 + 2] = ord[j];
                nsel++;
            }
        }
    }
    int64_t dims[2] = {nsel, 3};
    st = dl_kernel_out_as(kc, 0, DL_I64, 2, dims);
    if (st == DL_OK)
        for (int64_t i = 0; i < nsel * 3; i++) dl_set_i64(kc->out[0], i, sel[i]);
done:
    dl_free(sel);
    dl_free(ord);
    dl_free(tmp);
    dl_free(kept);
    return st;
}

/* ---------------------------------------------------------------------------------------------
 * HannWindow / HammingWindow / BlackmanWindow (opset 17)
 * ------------------------------------------------------------------------------------------- */

static const dl_attr_spec window_attrs[] = {
    {"output_datatype", DL_ATTR_INT},
    {"periodic", DL_ATTR_INT},
    {NULL, DL_ATTR_UNDEFINED},
};

static dl_status window_infer(dl_infer *ic) {
    const dl_type *s = ic->in[0];
    if (s->dtype != DL_I32 && s->dtype != DL_I64)
        return dl_infer_fail(ic, DL_ERR_TYPE, "size must be int32 or int64, got %s",
                             dl_dtype_name(s->dtype));
    if (s->rank > 1 || (s->rank == 1 && s->dims[0] >= 0 && s->dims[0] != 1))
        return dl_infer_fail(ic, DL_ERR_SHAPE, "size must be a scalar");
    int64_t code = dl_attr_int(ic->node, "output_datatype", 1);
    dl_dtype dt = dl_dtype_from_onnx(code);
    if (dt == DL_DTYPE_UNDEFINED || dt == DL_BOOL)
        return dl_infer_fail(ic, DL_ERR_UNSUPPORTED, "unsupported output_datatype %lld",
                             (long long)code);
    int64_t v[1];
    int n = 0;
    bool known = false;
    DL_TRY(dl_infer_const_ints(ic, 0, v, 1, &n, &known));
    int64_t dim;
    if (known) {
        if (n != 1) return dl_infer_fail(ic, DL_ERR_SHAPE, "size must hold one value");
        if (v[0] < 0)
            return dl_infer_fail(ic, DL_ERR_INVALID, "size must be >= 0, got %lld",
                                 (long long)v[0]);
        dim = v[0];
    } else {
        dim = dl_infer_fresh_dim(ic);
    }
    return dl_infer_set(ic, 0, dt, 1, &dim);
}

typedef enum wkind { W_HANN, W_HAMMING, W_BLACKMAN } wkind;

static dl_status window_ref(dl_kernel *kc, wkind k) {
    const dl_tensor *s = kc->in[0];
    if (s->numel != 1) return dl_kernel_fail(kc, DL_ERR_SHAPE, "size must hold one value");
    int64_t size = dl_get_i64(s, 0);
    if (size < 0)
        return dl_kernel_fail(kc, DL_ERR_INVALID, "size must be >= 0, got %lld", (long long)size);
    dl_dtype dt = dl_dtype_from_onnx(dl_attr_int(kc->node, "output_datatype", 1));
    if (dt == DL_DTYPE_UNDEFINED || dt == DL_BOOL)
        return dl_kernel_fail(kc, DL_ERR_UNSUPPORTED, "unsupported output_datatype");
    DL_TRY(dl_kernel_out_as(kc, 0, dt, 1, &size));
    dl_tensor *y = kc->out[0];
    bool periodic = dl_attr_int(kc->node, "periodic", 1) != 0;
    double N = periodic ? (double)size : (double)(size - 1);
    const double pi = 3.14159265358979323846;
    for (int64_t i = 0; i < size; i++) {
        double t = N > 0 ? 2 * pi * (double)i / N : 0;
        double w;
        switch (k) {
        case W_HANN:
            w = 0.5 - 0.5 * cos(t);
            break;
        case W_HAMMING:
            w = 25.0 / 46.0 - (21.0 / 46.0) * cos(t);
            break;
        default:
            w = 0.42 - 0.5 * cos(t) + 0.08 * cos(2 * t);
            break;
        }
        dl_set_f64(y, i, w);
    }
    return DL_OK;
}

static dl_status hann_ref(dl_kernel *kc) {
    return window_ref(kc, W_HANN);
}
static dl_status hamming_ref(dl_kernel *kc) {
    return window_ref(kc, W_HAMMING);
}
static dl_status blackman_ref(dl_kernel *kc) {
    return window_ref(kc, W_BLACKMAN);
}

/* ---- gradient rules (grad.h) ---- */

/* TopK: the values' gradient lands at the selected indices (distinct along the axis); the rest
 * of the input gets zero. */
static dl_status topk_grad(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy, dl_value **dx) {
    dl_value *x = n->in[0];
    dl_value *zeros = dg_expand_like(gc, dg_scalar(gc, 0, x->type.dtype), x);
    char a[64];
    snprintf(a, sizeof a, "axis=%lld;reduction=add", (long long)dl_attr_int(n, "axis", -1));
    dx[0] = dg_op3(gc, "ScatterElements", zeros, n->out[1], dy[0], a);
    return dg_status(gc);
}

/* clang-format off */
const dl_op_def dl_ops_misc[] = {
    {.name = "TopK", .min_in = 1, .max_in = 2, .min_out = 2, .max_out = 2,
     .attrs = topk_attrs, .infer = topk_infer, .ref = topk_ref,
     .grad = topk_grad},
    {.name = "Det", .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1,
     .infer = det_infer, .ref = det_ref},
    {.name = "Unique", .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 4,
     .attrs = unique_attrs, .infer = unique_infer, .ref = unique_ref},
    {.name = "NonMaxSuppression", .min_in = 2, .max_in = 5, .min_out = 1, .max_out = 1,
     .attrs = nms_attrs, .infer = nms_infer, .ref = nms_ref},
    {.name = "HannWindow", .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1,
     .attrs = window_attrs, .infer = window_infer, .ref = hann_ref},
    {.name = "HammingWindow", .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1,
     .attrs = window_attrs, .infer = window_infer, .ref = hamming_ref},
    {.name = "BlackmanWindow", .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1,
     .attrs = window_attrs, .infer = window_infer, .ref = blackman_ref},
    {.name = NULL},
};
/* clang-format on */
