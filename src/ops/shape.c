/* shape.c — op family "shape" (rows of the op table): ops that reshape or re-index a tensor as a
 * whole, or read its shape (Reshape, Transpose, Expand, Squeeze, Unsqueeze, Flatten, Shape, Size,
 * Identity, Dropout in inference), with the gradient rules of all but Shape and Size. Ops that
 * cut, join and pad tensors are the "slicing" family (slicing.c).
 *
 * Shape-computing ops are how exporters build shapes, so inference uses known input values (shape
 * tensors, axes, pads) to give exact output shapes, and keeps symbolic dims where it can. */
#include "shape-impl.h"
#include "../train/grad.h"

/* Kernel for ops that keep the bytes in order (Reshape, Squeeze, Unsqueeze, Flatten, Identity). */
static dl_status copy_kernel(dl_kernel *kc) {
    DL_TRY(dl_kernel_outs(kc));
    const dl_tensor *x = kc->in[0];
    if (kc->out[0]->nbytes != x->nbytes)
        return dl_kernel_fail(kc, DL_ERR_INTERNAL, "output size differs from input");
    if (x->nbytes > 0) memcpy(kc->out[0]->data, x->data, x->nbytes);
    return DL_OK;
}

/* ---- Reshape ---- */

static const dl_attr_spec reshape_attrs[] = {{"allowzero", DL_ATTR_INT}, {NULL, 0}};

static dl_status reshape_infer(dl_infer *ic) {
    const dl_type *x = ic->in[0];
    if (!dl_has_in(ic, 1)) return dl_infer_fail(ic, DL_ERR_INVALID, "Reshape needs a shape input");
    const dl_type *st = ic->in[1];
    if (st->rank != DL_RANK_UNKNOWN && st->rank != 1)
        return dl_infer_fail(ic, DL_ERR_SHAPE, "shape must be 1-D, got rank %d", st->rank);
    bool allowzero = ic->opset >= 14 && dl_attr_int(ic->node, "allowzero", 0) != 0;
    int64_t sh[R];
    int n;
    bool known;
    DL_TRY(const_ints(ic, 1, "shape", sh, R, &n, &known));
    if (!known) {
        if (shape_of_input(ic, 1, sh, &n)) return dl_infer_set(ic, 0, x->dtype, n, sh);
        int64_t len = input_len(ic, 1);
        if (len > R)
            return dl_infer_fail(ic, DL_ERR_UNSUPPORTED, "output rank %lld exceeds %d",
                                 (long long)len, R);
        if (len < 0) return dtype_only(ic, x->dtype);
        return dl_infer_set(ic, 0, x->dtype, (int)len, NULL);
    }
    int64_t out[R];
    int neg = -1;
    bool has_zero = false;
    for (int i = 0; i < n; i++) {
        int64_t v = sh[i];
        if (v == -1) {
            if (neg >= 0) return dl_infer_fail(ic, DL_ERR_INVALID, "shape has more than one -1");
            neg = i;
            out[i] = 1;
        } else if (v < -1) {
            return dl_infer_fail(ic, DL_ERR_INVALID, "shape[%d] = %lld is invalid", i,
                                 (long long)v);
        } else if (v == 0 && !allowzero) {
            if (x->rank == DL_RANK_UNKNOWN) {
                out[i] = dl_infer_fresh_dim(ic);
            } else {
                if (i >= x->rank)
                    return dl_infer_fail(ic, DL_ERR_SHAPE,
                                         "shape[%d] = 0 copies a dim the rank-%d input lacks", i,
                                         x->rank);
                out[i] = x->dims[i];
            }
        } else {
            if (v == 0) has_zero = true;
            out[i] = v;
        }
    }
    if (allowzero && has_zero && neg >= 0)
        return dl_infer_fail(ic, DL_ERR_INVALID, "allowzero shape has both 0 and -1");

    /* Cancel symbols shared by input and output, multiply the known rest. */
    if (x->rank != DL_RANK_UNKNOWN) {
        int64_t syms[R];
        int nsym = 0;
        int64_t in_known = 1;
        bool ovf = false;
        for (int i = 0; i < x->rank; i++) {
            if (x->dims[i] < 0)
                syms[nsym++] = x->dims[i];
            else
                ovf |= !mul_dim(in_known, x->dims[i], &in_known);
        }
        int64_t out_known = 1;
        bool out_ok = true;
        for (int i = 0; i < n && !ovf; i++) {
            if (i == neg) continue;
            if (out[i] >= 0) {
                ovf |= !mul_dim(out_known, out[i], &out_known);
                continue;
            }
            int j = 0;
            while (j < nsym && syms[j] != out[i]) j++;
            if (j == nsym) {
                out_ok = false;
                continue;
            }
            syms[j] = syms[--nsym];
        }
        if (ovf) return dl_infer_fail(ic, DL_ERR_LIMIT, "shape size overflows");
        if (out_ok && nsym == 0) {
            if (neg >= 0) {
                if (out_known == 0)
                    return dl_infer_fail(ic, DL_ERR_INVALID,
                                         "cannot infer -1 when other dims have size 0");
                if (in_known % out_known != 0)
                    return dl_infer_fail(ic, DL_ERR_SHAPE,
                                         "cannot reshape %lld elements with -1 and product %lld",
                                         (long long)in_known, (long long)out_known);
                out[neg] = in_known / out_known;
            } else if (in_known != out_known) {
                return dl_infer_fail(ic, DL_ERR_SHAPE,
                                     "cannot reshape %lld elements into %lld elements",
                                     (long long)in_known, (long long)out_known);
            }
        } else if (out_ok && nsym == 1 && neg >= 0 && in_known == out_known && out_known != 0) {
            out[neg] = syms[0]; /* [N, a, b] -> [-1, a·b...]: the -1 is N itself */
        } else if (neg >= 0) {
            out[neg] = dl_infer_fresh_dim(ic);
        }
    } else if (neg >= 0) {
        out[neg] = dl_infer_fresh_dim(ic);
    }
    return dl_infer_set(ic, 0, x->dtype, n, out);
}

/* ---- Transpose ---- */

static const dl_attr_spec transpose_attrs[] = {{"perm", DL_ATTR_INTS}, {NULL, 0}};

/* perm for a rank (reverse by default); validated. */
static dl_status transpose_perm(dl_infer *ic, int rank, int *perm) {
    const int64_t *p;
    int n = dl_attr_ints(ic->node, "perm", &p);
    if (n < 0) {
        for (int i = 0; i < rank; i++) perm[i] = rank - 1 - i;
        return DL_OK;
    }
    if (n != rank)
        return dl_infer_fail(ic, DL_ERR_INVALID, "perm has %d entries for a rank-%d input", n,
                             rank);
    bool seen[R] = {false};
    for (int i = 0; i < n; i++) {
        if (p[i] < 0 || p[i] >= rank || seen[p[i]])
            return dl_infer_fail(ic, DL_ERR_INVALID, "perm is not a permutation of 0..%d",
                                 rank - 1);
        seen[p[i]] = true;
        perm[i] = (int)p[i];
    }
    return DL_OK;
}

static dl_status transpose_infer(dl_infer *ic) {
    const dl_type *x = ic->in[0];
    int rank = x->rank;
    if (rank == DL_RANK_UNKNOWN) {
        const int64_t *p;
        int n = dl_attr_ints(ic->node, "perm", &p);
        if (n < 0 || n > R) return dtype_only(ic, x->dtype);
        return dl_infer_set(ic, 0, x->dtype, n, NULL);
    }
    int perm[R];
    DL_TRY(transpose_perm(ic, rank, perm));
    int64_t dims[R];
    for (int i = 0; i < rank; i++) dims[i] = x->dims[perm[i]];
    return dl_infer_set(ic, 0, x->dtype, rank, dims);
}

static dl_status transpose_ref(dl_kernel *kc) {
    DL_TRY(dl_kernel_outs(kc));
    dl_infer ic = dl_kernel_infer(kc);
    const dl_tensor *x = kc->in[0];
    dl_tensor *y = kc->out[0];
    int perm[R], rank = x->rank;
    dl_status s = transpose_perm(&ic, rank, perm);
    if (s != DL_OK || x->numel == 0) return s;
    int64_t xs[R], ys[R], idx[R] = {0}, o = 0;
    dl_strides(rank, x->dims, xs);
    for (int i = 0; i < rank; i++) ys[i] = xs[perm[i]];
    do {
        int64_t src = 0;
        for (int i = 0; i < rank; i++) src += idx[i] * ys[i];
        copy_elem(y, o++, x, src);
    } while (dl_index_next(rank, y->dims, idx));
    return DL_OK;
}

/* ---- Expand ---- */

static dl_status expand_infer(dl_infer *ic) {
    const dl_type *x = ic->in[0];
    if (!dl_has_in(ic, 1)) return dl_infer_fail(ic, DL_ERR_INVALID, "Expand needs a shape input");
    if (ic->in[1]->rank != DL_RANK_UNKNOWN && ic->in[1]->rank != 1)
        return dl_infer_fail(ic, DL_ERR_SHAPE, "shape must be 1-D");
    int64_t sh[R];
    int n;
    bool known;
    DL_TRY(const_ints(ic, 1, "shape", sh, R, &n, &known));
    if (x->rank == DL_RANK_UNKNOWN) return dtype_only(ic, x->dtype);
    bool computed = !known && shape_of_input(ic, 1, sh, &n);
    if (!known && !computed) {
        int64_t len = input_len(ic, 1);
        if (len < 0) return dtype_only(ic, x->dtype);
        int rank = (int)(len > x->rank ? len : x->rank);
        if (rank > R) return dl_infer_fail(ic, DL_ERR_UNSUPPORTED, "output rank exceeds %d", R);
        int64_t dims[R];
        for (int i = 0; i < rank; i++) {
            int xi = i - (rank - x->rank);
            int64_t a = xi >= 0 ? x->dims[xi] : 1;
            dims[i] = a > 1 ? a : dl_infer_fresh_dim(ic);
        }
        return dl_infer_set(ic, 0, x->dtype, rank, dims);
    }
    int rank = n > x->rank ? n : x->rank;
    int64_t dims[R];
    for (int i = 0; i < rank; i++) {
        int xi = i - (rank - x->rank), si = i - (rank - n);
        int64_t a = xi >= 0 ? x->dims[xi] : 1;
        int64_t b = si >= 0 ? sh[si] : 1;
        if (b < 0 && !computed)
            return dl_infer_fail(ic, DL_ERR_INVALID, "shape[%d] = %lld is negative", si,
                                 (long long)b);
        if (a == b || b == 1 || (b < 0 && a > 1)) /* a symbol b must be 1 or a */
            dims[i] = a;
        else if (a == 1 || a < 0)
            dims[i] = b; /* a symbolic dim must be 1 or b */
        else
            return dl_infer_fail(ic, DL_ERR_SHAPE, "dim %lld cannot expand to %lld", (long long)a,
                                 (long long)b);
    }
    return dl_infer_set(ic, 0, x->dtype, rank, dims);
}

static dl_status expand_ref(dl_kernel *kc) {
    DL_TRY(dl_kernel_outs(kc));
    const dl_tensor *x = kc->in[0];
    dl_tensor *y = kc->out[0];
    if (y->numel == 0) return DL_OK;
    int64_t st[R], idx[R] = {0}, o = 0;
    dl_broadcast_strides(x, y->rank, y->dims, st);
    do {
        int64_t src = 0;
        for (int i = 0; i < y->rank; i++) src += idx[i] * st[i];
        copy_elem(y, o++, x, src);
    } while (dl_index_next(y->rank, y->dims, idx));
    return DL_OK;
}

/* ---- Squeeze / Unsqueeze ---- */

static const dl_attr_spec axes_attrs[] = {{"axes", DL_ATTR_INTS}, {NULL, 0}};

/* Reads axes from the attribute (before 13) or input 1 (from 13). *have = false when absent. */
static dl_status read_axes(dl_infer *ic, int64_t *axes, int *n, bool *have, bool *known) {
    *have = false;
    *known = true;
    *n = 0;
    if (ic->opset < 13) {
        const int64_t *v;
        int c = dl_attr_ints(ic->node, "axes", &v);
        if (c < 0) return DL_OK;
        if (c > R) return dl_infer_fail(ic, DL_ERR_INVALID, "too many axes (%d)", c);
        memcpy(axes, v, sizeof(int64_t) * (size_t)c);
        *n = c;
        *have = true;
        return DL_OK;
    }
    if (!dl_has_in(ic, 1)) return DL_OK;
    *have = true;
    return const_ints(ic, 1, "axes", axes, R, n, known);
}

static dl_status squeeze_infer(dl_infer *ic) {
    const dl_type *x = ic->in[0];
    int64_t axes[R];
    int n;
    bool have, known;
    DL_TRY(read_axes(ic, axes, &n, &have, &known));
    if (x->rank == DL_RANK_UNKNOWN) return dtype_only(ic, x->dtype);
    bool drop[R] = {false};
    if (have && !known) {
        int64_t len = input_len(ic, 1);
        if (len <= 0 || len > x->rank) return dtype_only(ic, x->dtype);
        return dl_infer_set(ic, 0, x->dtype, x->rank - (int)len, NULL);
    }
    if (have && n > 0) { /* empty axes squeeze all 1s, like no axes */
        for (int i = 0; i < n; i++) {
            int a;
            DL_TRY(dl_infer_axis(ic, axes[i], x->rank, &a));
            if (drop[a]) return dl_infer_fail(ic, DL_ERR_INVALID, "axis %d repeats", a);
            if (x->dims[a] >= 0 && x->dims[a] != 1)
                return dl_infer_fail(ic, DL_ERR_SHAPE, "cannot squeeze axis %d of size %lld", a,
                                     (long long)x->dims[a]);
            drop[a] = true;
        }
    } else {
        for (int a = 0; a < x->rank; a++) {
            if (x->dims[a] < 0) return dtype_only(ic, x->dtype); /* may or may not be 1 */
            drop[a] = x->dims[a] == 1;
        }
    }
    int64_t dims[R];
    int r = 0;
    for (int a = 0; a < x->rank; a++)
        if (!drop[a]) dims[r++] = x->dims[a];
    return dl_infer_set(ic, 0, x->dtype, r, dims);
}

static dl_status unsqueeze_infer(dl_infer *ic) {
    const dl_type *x = ic->in[0];
    int64_t axes[R];
    int n;
    bool have, known;
    DL_TRY(read_axes(ic, axes, &n, &have, &known));
    if (!have) return dl_infer_fail(ic, DL_ERR_INVALID, "Unsqueeze needs axes");
    if (x->rank == DL_RANK_UNKNOWN) return dtype_only(ic, x->dtype);
    if (!known) {
        int64_t len = input_len(ic, 1);
        if (len < 0) return dtype_only(ic, x->dtype);
        if (x->rank + len > R)
            return dl_infer_fail(ic, DL_ERR_UNSUPPORTED, "output rank exceeds %d", R);
        return dl_infer_set(ic, 0, x->dtype, x->rank + (int)len, NULL);
    }
    int rank = x->rank + n;
    if (rank > R)
        return dl_infer_fail(ic, DL_ERR_UNSUPPORTED, "output rank %d exceeds %d", rank, R);
    bool ins[R] = {false};
    for (int i = 0; i < n; i++) {
        int a;
        DL_TRY(dl_infer_axis(ic, axes[i], rank, &a));
        if (ins[a]) return dl_infer_fail(ic, DL_ERR_INVALID, "axis %d repeats", a);
        ins[a] = true;
    }
    int64_t dims[R];
    int j = 0;
    for (int a = 0; a < rank; a++) dims[a] = ins[a] ? 1 : x->dims[j++];
    return dl_infer_set(ic, 0, x->dtype, rank, dims);
}

/* ---- Flatten ---- */

static const dl_attr_spec flatten_attrs[] = {{"axis", DL_ATTR_INT}, {NULL, 0}};

/* Product of dims [from, to): a known size, the single symbol, or a fresh dim. */
static int64_t dims_product(dl_infer *ic, const int64_t *dims, int from, int to, bool *ovf) {
    int64_t p = 1, sym = 0;
    int nsym = 0;
    for (int i = from; i < to; i++) {
        if (dims[i] == 0) return 0;
        if (dims[i] < 0) {
            sym = dims[i];
            nsym++;
        } else if (!mul_dim(p, dims[i], &p)) {
            *ovf = true;
        }
    }
    if (nsym == 0) return p;
    if (nsym == 1 && p == 1) return sym;
    return dl_infer_fresh_dim(ic);
}

static dl_status flatten_infer(dl_infer *ic) {
    const dl_type *x = ic->in[0];
    if (x->rank == DL_RANK_UNKNOWN) return dl_infer_set(ic, 0, x->dtype, 2, NULL);
    int64_t axis = dl_attr_int(ic->node, "axis", 1);
    int r = x->rank;
    if (axis < 0 && ic->opset >= 11) axis += r;
    if (axis < 0 || axis > r)
        return dl_infer_fail(ic, DL_ERR_INVALID, "axis %lld out of range for rank %d",
                             (long long)dl_attr_int(ic->node, "axis", 1), r);
    bool ovf = false;
    int64_t dims[2];
    dims[0] = dims_product(ic, x->dims, 0, (int)axis, &ovf);
    dims[1] = dims_product(ic, x->dims, (int)axis, r, &ovf);
    if (ovf) return dl_infer_fail(ic, DL_ERR_LIMIT, "size overflows");
    return dl_infer_set(ic, 0, x->dtype, 2, dims);
}

/* ---- Shape / Size / Identity ---- */

static const dl_attr_spec shape_attrs[] = {{"start", DL_ATTR_INT}, {"end", DL_ATTR_INT}, {NULL, 0}};

static void shape_range(const dl_node *node, int opset, int rank, int *s, int *e) {
    int64_t start = 0, end = rank;
    if (opset >= 15) {
        start = dl_attr_int(node, "start", 0);
        end = dl_attr_int(node, "end", rank);
    }
    if (start < 0) start += rank;
    if (end < 0) end += rank;
    start = start < 0 ? 0 : start > rank ? rank : start;
    end = end < 0 ? 0 : end > rank ? rank : end;
    *s = (int)start;
    *e = end > start ? (int)end : (int)start;
}

static dl_status shape_infer(dl_infer *ic) {
    const dl_type *x = ic->in[0];
    int64_t d;
    if (x->rank == DL_RANK_UNKNOWN) {
        d = dl_infer_fresh_dim(ic);
    } else {
        int s, e;
        shape_range(ic->node, ic->opset, x->rank, &s, &e);
        d = e - s;
    }
    return dl_infer_set(ic, 0, DL_I64, 1, &d);
}

static dl_status shape_ref(dl_kernel *kc) {
    DL_TRY(dl_kernel_outs(kc));
    const dl_tensor *x = kc->in[0];
    int s, e;
    shape_range(kc->node, kc->opset, x->rank, &s, &e);
    for (int i = s; i < e; i++) dl_set_i64(kc->out[0], i - s, x->dims[i]);
    return DL_OK;
}

static dl_status size_infer(dl_infer *ic) {
    return dl_infer_set(ic, 0, DL_I64, 0, NULL);
}

static dl_status size_ref(dl_kernel *kc) {
    DL_TRY(dl_kernel_outs(kc));
    dl_set_i64(kc->out[0], 0, kc->in[0]->numel);
    return DL_OK;
}

static dl_status identity_infer(dl_infer *ic) {
    return dl_infer_same(ic, 0, 0);
}

/* ---- Dropout (inference; training mode only with ratio 0) ---- */

static const dl_attr_spec dropout_attrs[] = {
    {"ratio", DL_ATTR_FLOAT}, {"seed", DL_ATTR_INT}, {NULL, 0}};

static dl_status dropout_infer(dl_infer *ic) {
    const dl_type *x = ic->in[0];
    if (!dl_dtype_is_float(x->dtype))
        return dl_infer_fail(ic, DL_ERR_TYPE, "Dropout needs a float input, got %s",
                             dl_dtype_name(x->dtype));
    if (ic->opset < 12) {
        float r = dl_attr_float(ic->node, "ratio", 0.5f);
        if (!(r >= 0.0f && r < 1.0f))
            return dl_infer_fail(ic, DL_ERR_INVALID, "ratio %g must be in [0, 1)", r);
    } else {
        if (dl_has_in(ic, 1) && (!dl_dtype_is_float(ic->in[1]->dtype) || ic->in[1]->rank > 1))
            return dl_infer_fail(ic, DL_ERR_INVALID, "ratio must be a float scalar");
        if (dl_has_in(ic, 2) && (ic->in[2]->dtype != DL_BOOL || ic->in[2]->rank > 1))
            return dl_infer_fail(ic, DL_ERR_INVALID, "training_mode must be a bool scalar");
    }
    DL_TRY(dl_infer_same(ic, 0, 0));
    if (ic->n_out > 1) {
        DL_TRY(dl_infer_same(ic, 1, 0));
        ic->out[1].dtype = ic->opset >= 10 ? DL_BOOL : x->dtype;
    }
    return DL_OK;
}

static dl_status dropout_ref(dl_kernel *kc) {
    DL_TRY(dl_kernel_outs(kc));
    const dl_tensor *x = kc->in[0];
    if (kc->opset >= 12 && kc->n_in > 2 && kc->in[2] && kc->in[2]->numel > 0 &&
        dl_get_i64(kc->in[2], 0) != 0) {
        double ratio = 0.5;
        if (kc->n_in > 1 && kc->in[1] && kc->in[1]->numel > 0) ratio = dl_get_f64(kc->in[1], 0);
        if (ratio != 0.0)
            return dl_kernel_fail(kc, DL_ERR_UNSUPPORTED,
                                  "Dropout in training mode with ratio %g is random", ratio);
    }
    if (x->nbytes > 0) memcpy(kc->out[0]->data, x->data, x->nbytes);
    for (int64_t i = 0; kc->n_out > 1 && i < kc->out[1]->numel; i++)
        dl_set_f64(kc->out[1], i, 1.0); /* mask: all kept */
    return DL_OK;
}

/* ---- gradient rules (grad.h) ---- */

/* Views and Identity: the gradient is dy in the input's shape. */
static dl_status view_grad(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy, dl_value **dx) {
    dx[0] = dg_reshape_like(gc, dy[0], n->in[0]);
    return dg_status(gc);
}

static dl_status transpose_grad(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy,
                                dl_value **dx) {
    int rank = n->in[0]->type.rank, perm[R];
    if (rank < 0) return dg_refuse(gc, n, "the input rank is unknown");
    dg_view v;
    if (dg_check(gc, transpose_perm(dg_view_of(gc, n, &v), rank, perm)) != DL_OK)
        return dg_status(gc);
    int inv[R];
    for (int i = 0; i < rank; i++) inv[perm[i]] = i;
    char attrs[64] = "perm=[";
    for (int i = 0; i < rank; i++)
        snprintf(attrs + strlen(attrs), sizeof attrs - strlen(attrs), "%s%d", i ? "," : "", inv[i]);
    strcat(attrs, "]");
    dx[0] = dg_op1(gc, "Transpose", dy[0], attrs);
    return dg_status(gc);
}

static dl_status expand_grad(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy,
                             dl_value **dx) {
    dx[0] = dg_sum_to(gc, dy[0], n->in[0]);
    return dg_status(gc);
}

/* Dropout passes the gradient through in inference (no training_mode, or ratio 0); random
 * training-mode masks are refused. */
static dl_status dropout_grad(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy,
                              dl_value **dx) {
    if (!dy[0] || !dg_needs(gc, n, 0)) return dg_status(gc);
    if (n->opset >= 12 && n->n_in > 2 && n->in[2]) {
        const dl_tensor *tm = n->in[2]->constant;
        const dl_tensor *rt = n->n_in > 1 && n->in[1] ? n->in[1]->constant : NULL;
        if (!tm) return dg_refuse(gc, n, "training_mode must be a constant");
        bool training = tm->numel > 0 && dl_get_i64(tm, 0) != 0;
        if (training && n->n_in > 1 && n->in[1] && !rt)
            return dg_refuse(gc, n, "ratio must be a constant in training mode");
        double ratio = rt && rt->numel > 0 ? dl_get_f64(rt, 0) : 0.5;
        if (training && ratio != 0.0)
            return dg_refuse(gc, n, "training-mode Dropout (a random mask) is not supported");
    }
    dx[0] = dy[0];
    return dg_status(gc);
}

/* ---- the table ---- */

/* clang-format off */
const dl_op_def dl_ops_shape[] = {
    {.name = "Reshape", .min_in = 2, .max_in = 2, .min_out = 1, .max_out = 1,
     .attrs = reshape_attrs, .infer = reshape_infer, .ref = copy_kernel,
     .grad = view_grad},
    {.name = "Transpose", .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1,
     .attrs = transpose_attrs, .infer = transpose_infer, .ref = transpose_ref,
     .grad = transpose_grad},
    {.name = "Expand", .min_in = 2, .max_in = 2, .min_out = 1, .max_out = 1,
     .infer = expand_infer, .ref = expand_ref,
     .grad = expand_grad},
    {.name = "Squeeze", .min_in = 1, .max_in = 2, .min_out = 1, .max_out = 1,
     .attrs = axes_attrs, .infer = squeeze_infer, .ref = copy_kernel,
     .grad = view_grad},
    {.name = "Unsqueeze", .min_in = 1, .max_in = 2, .min_out = 1, .max_out = 1,
     .attrs = axes_attrs, .infer = unsqueeze_infer, .ref = copy_kernel,
     .grad = view_grad},
    {.name = "Flatten", .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1,
     .attrs = flatten_attrs, .infer = flatten_infer, .ref = copy_kernel,
     .grad = view_grad},
    {.name = "Shape", .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1,
     .attrs = shape_attrs, .infer = shape_infer, .ref = shape_ref},
    {.name = "Size", .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1,
     .infer = size_infer, .ref = size_ref},
    {.name = "Identity", .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1,
     .infer = identity_infer, .ref = copy_kernel,
     .grad = view_grad},
    {.name = "Dropout", .min_in = 1, .max_in = 3, .min_out = 1, .max_out = 2,
     .attrs = dropout_attrs, .infer = dropout_infer, .ref = dropout_ref,
     .grad = dropout_grad},
    {.name = NULL},
};
/* clang-format on */
