/* shape.c — op family "shape" (rows of the op table): ops that move data without computing on it
 * (Reshape, Transpose, Concat, Split, Slice, Expand, Squeeze, Unsqueeze, Flatten, Shape, Size,
 * Identity, Tile, Pad, DepthToSpace, SpaceToDepth, Dropout in inference, Trilu, ReverseSequence),
 * with the gradient rules of all but Shape and Size.
 *
 * Shape-computing ops are how exporters build shapes, so inference uses known input values (shape
 * tensors, axes, pads) to give exact output shapes, and keeps symbolic dims where it can. */
#include "op-impl.h"
#include "../train/grad.h"

/* ---- local helpers ---- */

#define R DL_MAX_RANK

static void copy_elem(dl_tensor *dst, int64_t di, const dl_tensor *src, int64_t si) {
    size_t es = dl_dtype_size(src->dtype);
    memcpy((char *)dst->data + (size_t)di * es, (const char *)src->data + (size_t)si * es, es);
}

/* a*b for dims; false on overflow. */
static bool mul_dim(int64_t a, int64_t b, int64_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}

static int64_t prod_dims(const int64_t *dims, int from, int to) {
    int64_t p = 1;
    for (int i = from; i < to; i++) p *= dims[i];
    return p;
}

/* Reads a small known integer tensor input (rank <= 1). *known = false when the value is not
 * known statically or the input is omitted. */
static dl_status const_ints(dl_infer *ic, int i, const char *what, int64_t *vals, int cap, int *n,
                            bool *known) {
    *known = false;
    *n = 0;
    if (!dl_has_in(ic, i)) return DL_OK;
    const dl_type *ty = ic->in[i];
    if (!dl_dtype_is_int(ty->dtype))
        return dl_infer_fail(ic, DL_ERR_TYPE, "%s must be an integer tensor, got %s", what,
                             dl_dtype_name(ty->dtype));
    if (ty->rank > 1)
        return dl_infer_fail(ic, DL_ERR_SHAPE, "%s must be a scalar or 1-D tensor, got rank %d",
                             what, ty->rank);
    if (!ic->value || !ic->value[i]) return DL_OK;
    const dl_tensor *t = ic->value[i];
    if (t->numel > cap)
        return dl_infer_fail(ic, DL_ERR_UNSUPPORTED, "%s has %lld values (at most %d supported)",
                             what, (long long)t->numel, cap);
    for (int64_t k = 0; k < t->numel; k++) vals[k] = dl_get_i64(t, k);
    *n = (int)t->numel;
    *known = true;
    return DL_OK;
}

/* Count of a 1-D input statically (-1 when unknown). */
static int64_t input_len(const dl_infer *ic, int i) {
    if (!dl_has_in(ic, i)) return -1;
    const dl_type *t = ic->in[i];
    if (t->rank == 0) return 1;
    if (t->rank == 1 && t->dims[0] >= 0) return t->dims[0];
    return -1;
}

/* Output 0 with a known dtype and an unknown rank. */
static dl_status dtype_only(dl_infer *ic, dl_dtype dt) {
    ic->out[0].dtype = dt;
    return DL_OK;
}

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

/* ---- Concat ---- */

static const dl_attr_spec concat_attrs[] = {{"axis", DL_ATTR_INT}, {NULL, 0}};

static dl_status concat_infer(dl_infer *ic) {
    const dl_type *first = NULL;
    for (int i = 0; i < ic->n_in; i++) {
        if (!ic->in[i]) return dl_infer_fail(ic, DL_ERR_INVALID, "input %d is missing", i);
        if (ic->in[i]->dtype != ic->in[0]->dtype)
            return dl_infer_fail(ic, DL_ERR_TYPE, "input %d is %s, input 0 is %s", i,
                                 dl_dtype_name(ic->in[i]->dtype), dl_dtype_name(ic->in[0]->dtype));
        if (ic->in[i]->rank != DL_RANK_UNKNOWN) {
            if (!first) first = ic->in[i];
            if (ic->in[i]->rank != first->rank)
                return dl_infer_fail(ic, DL_ERR_SHAPE, "inputs have ranks %d and %d", first->rank,
                                     ic->in[i]->rank);
        }
    }
    const dl_attr *a = dl_node_attr(ic->node, "axis");
    if (!a) return dl_infer_fail(ic, DL_ERR_INVALID, "Concat needs an axis attribute");
    dl_dtype dt = ic->in[0]->dtype;
    if (!first) {
        ic->out[0].dtype = dt;
        return DL_OK;
    }
    int rank = first->rank;
    if (rank == 0) return dl_infer_fail(ic, DL_ERR_SHAPE, "cannot concatenate scalars");
    int axis;
    DL_TRY(dl_infer_axis(ic, a->i, rank, &axis));
    int64_t dims[R];
    bool all_rank = true;
    for (int i = 0; i < ic->n_in; i++)
        if (ic->in[i]->rank == DL_RANK_UNKNOWN) all_rank = false;
    for (int d = 0; d < rank; d++) {
        if (d == axis) {
            int64_t sum = 0;
            bool ok = all_rank;
            for (int i = 0; i < ic->n_in && ok; i++) {
                const dl_type *t = ic->in[i];
                if (t->dims[d] < 0 || __builtin_add_overflow(sum, t->dims[d], &sum)) ok = false;
            }
            dims[d] = ok ? sum : dl_infer_fresh_dim(ic);
            continue;
        }
        int64_t v = first->dims[d];
        for (int i = 0; i < ic->n_in; i++) {
            const dl_type *t = ic->in[i];
            if (t->rank == DL_RANK_UNKNOWN) continue;
            int64_t w = t->dims[d];
            if (w >= 0 && v >= 0 && w != v)
                return dl_infer_fail(ic, DL_ERR_SHAPE, "inputs differ in dim %d (%lld vs %lld)", d,
                                     (long long)v, (long long)w);
            if (w >= 0) v = w;
        }
        dims[d] = v;
    }
    return dl_infer_set(ic, 0, dt, rank, dims);
}

static dl_status concat_ref(dl_kernel *kc) {
    DL_TRY(dl_kernel_outs(kc));
    dl_tensor *y = kc->out[0];
    int rank = y->rank, axis = (int)dl_attr_int(kc->node, "axis", 0);
    if (axis < 0) axis += rank;
    if (y->numel == 0) return DL_OK;
    size_t es = dl_dtype_size(y->dtype);
    int64_t outer = prod_dims(y->dims, 0, axis), inner = prod_dims(y->dims, axis + 1, rank);
    char *dst = y->data;
    for (int64_t o = 0; o < outer; o++) {
        for (int i = 0; i < kc->n_in; i++) {
            size_t chunk = (size_t)(kc->in[i]->dims[axis] * inner) * es;
            if (chunk == 0) continue;
            memcpy(dst, (const char *)kc->in[i]->data + (size_t)o * chunk, chunk);
            dst += chunk;
        }
    }
    return DL_OK;
}

/* ---- Split ---- */

static const dl_attr_spec split_attrs[] = {
    {"axis", DL_ATTR_INT}, {"split", DL_ATTR_INTS}, {"num_outputs", DL_ATTR_INT}, {NULL, 0}};

static dl_status split_infer(dl_infer *ic) {
    const dl_type *x = ic->in[0];
    int nout = ic->n_out;
    /* Sizes: attribute before 13, input from 13. */
    const int64_t *attr_split = NULL;
    const dl_tensor *in_split = NULL;
    bool have_split = false, split_known = true;
    if (ic->opset < 13) {
        int n = dl_attr_ints(ic->node, "split", &attr_split);
        if (n >= 0) {
            have_split = true;
            if (n != nout)
                return dl_infer_fail(ic, DL_ERR_INVALID, "split has %d entries for %d outputs", n,
                                     nout);
        }
    } else if (dl_has_in(ic, 1)) {
        have_split = true;
        const dl_type *st = ic->in[1];
        if (!dl_dtype_is_int(st->dtype))
            return dl_infer_fail(ic, DL_ERR_TYPE, "split must be int64");
        if (st->rank > 1) return dl_infer_fail(ic, DL_ERR_SHAPE, "split must be 1-D");
        in_split = ic->value ? ic->value[1] : NULL;
        if (!in_split) split_known = false;
        if (in_split && in_split->numel != nout)
            return dl_infer_fail(ic, DL_ERR_INVALID, "split has %lld entries for %d outputs",
                                 (long long)in_split->numel, nout);
    }
    if (x->rank == DL_RANK_UNKNOWN) {
        for (int o = 0; o < nout; o++) ic->out[o].dtype = x->dtype;
        return DL_OK;
    }
    int axis;
    DL_TRY(dl_infer_axis(ic, dl_attr_int(ic->node, "axis", 0), x->rank, &axis));
    int64_t d = x->dims[axis];
    int64_t sum = 0;
    for (int o = 0; o < nout && have_split && split_known; o++) {
        int64_t v = attr_split ? attr_split[o] : dl_get_i64(in_split, o);
        if (v < 0)
            return dl_infer_fail(ic, DL_ERR_INVALID, "split[%d] = %lld is negative", o,
                                 (long long)v);
        if (__builtin_add_overflow(sum, v, &sum))
            return dl_infer_fail(ic, DL_ERR_INVALID, "split sizes overflow");
    }
    if (have_split && split_known && d >= 0 && sum != d)
        return dl_infer_fail(ic, DL_ERR_SHAPE, "split sizes sum to %lld, axis dim is %lld",
                             (long long)sum, (long long)d);
    if (!have_split && d >= 0 && d % nout != 0)
        return dl_infer_fail(ic, DL_ERR_SHAPE, "axis dim %lld does not split into %d equal parts",
                             (long long)d, nout);
    for (int o = 0; o < nout; o++) {
        int64_t dims[R];
        memcpy(dims, x->dims, sizeof(int64_t) * (size_t)x->rank);
        if (have_split && split_known)
            dims[axis] = attr_split ? attr_split[o] : dl_get_i64(in_split, o);
        else if (!have_split && d >= 0)
            dims[axis] = d / nout;
        else if (!have_split && nout == 1)
            dims[axis] = d;
        else
            dims[axis] = dl_infer_fresh_dim(ic);
        DL_TRY(dl_infer_set(ic, o, x->dtype, x->rank, dims));
    }
    return DL_OK;
}

static dl_status split_ref(dl_kernel *kc) {
    DL_TRY(dl_kernel_outs(kc));
    const dl_tensor *x = kc->in[0];
    int rank = x->rank, axis = (int)dl_attr_int(kc->node, "axis", 0);
    if (axis < 0) axis += rank;
    size_t es = dl_dtype_size(x->dtype);
    int64_t outer = prod_dims(x->dims, 0, axis), inner = prod_dims(x->dims, axis + 1, rank);
    size_t row = (size_t)(x->dims[axis] * inner) * es;
    int64_t off = 0;
    for (int o = 0; o < kc->n_out; o++) {
        dl_tensor *y = kc->out[o];
        size_t chunk = (size_t)(y->dims[axis] * inner) * es;
        for (int64_t b = 0; b < outer && chunk > 0; b++)
            memcpy((char *)y->data + (size_t)b * chunk,
                   (const char *)x->data + (size_t)b * row + (size_t)off * es, chunk);
        off += y->dims[axis] * inner;
    }
    return DL_OK;
}

/* ---- Slice ---- */

static const dl_attr_spec slice_attrs[] = {
    {"starts", DL_ATTR_INTS}, {"ends", DL_ATTR_INTS}, {"axes", DL_ATTR_INTS}, {NULL, 0}};

typedef struct slice_p {
    bool known;       /* all parameter values known */
    bool sliced[R];   /* axis is named by axes */
    int64_t start[R]; /* raw values per axis */
    int64_t end[R];
    int64_t step[R];
} slice_p;

/* Normalized start and length of one sliced axis of known size d. */
static void slice_axis(int64_t d, int64_t start, int64_t end, int64_t step, int64_t *s_out,
                       int64_t *len) {
    if (d == 0) {
        *s_out = 0;
        *len = 0;
        return;
    }
    if (start < 0) start += d;
    if (end < 0) end += d;
    if (step > 0) {
        start = start < 0 ? 0 : start > d ? d : start;
        end = end < 0 ? 0 : end > d ? d : end;
        *s_out = start;
        *len = end > start ? (end - start - 1) / step + 1 : 0;
    } else {
        start = start < 0 ? 0 : start > d - 1 ? d - 1 : start;
        end = end < -1 ? -1 : end > d - 1 ? d - 1 : end;
        *s_out = start;
        uint64_t ustep = (uint64_t)(-(step + 1)) + 1;
        *len = start > end ? (int64_t)((uint64_t)(start - end - 1) / ustep + 1) : 0;
    }
}

/* Reads and validates starts/ends/axes/steps for a known input rank. */
static dl_status slice_params(dl_infer *ic, int rank, slice_p *p) {
    memset(p, 0, sizeof *p);
    int64_t starts[R], ends[R], axes[R], steps[R];
    int ns = 0, ne = 0, na = -1, nst = -1;
    bool k1 = true, k2 = true, k3 = true, k4 = true;
    if (ic->opset < 10) {
        const int64_t *v;
        ns = dl_attr_ints(ic->node, "starts", &v);
        if (ns < 0 || ns > R)
            return dl_infer_fail(ic, DL_ERR_INVALID, "Slice needs starts (at most %d)", R);
        memcpy(starts, v, sizeof(int64_t) * (size_t)ns);
        ne = dl_attr_ints(ic->node, "ends", &v);
        if (ne < 0 || ne > R)
            return dl_infer_fail(ic, DL_ERR_INVALID, "Slice needs ends (at most %d)", R);
        memcpy(ends, v, sizeof(int64_t) * (size_t)ne);
        na = dl_attr_ints(ic->node, "axes", &v);
        if (na > R) return dl_infer_fail(ic, DL_ERR_INVALID, "too many axes");
        if (na > 0) memcpy(axes, v, sizeof(int64_t) * (size_t)na);
    } else {
        if (!dl_has_in(ic, 1) || !dl_has_in(ic, 2))
            return dl_infer_fail(ic, DL_ERR_INVALID, "Slice needs starts and ends inputs");
        DL_TRY(const_ints(ic, 1, "starts", starts, R, &ns, &k1));
        DL_TRY(const_ints(ic, 2, "ends", ends, R, &ne, &k2));
        if (dl_has_in(ic, 3)) DL_TRY(const_ints(ic, 3, "axes", axes, R, &na, &k3));
        if (dl_has_in(ic, 4)) DL_TRY(const_ints(ic, 4, "steps", steps, R, &nst, &k4));
    }
    if (!(k1 && k2 && k3 && k4)) {
        p->known = false;
        /* Mark the sliced axes when they are known. */
        if (k3 && na >= 0) {
            for (int i = 0; i < na; i++) {
                int a;
                DL_TRY(dl_infer_axis(ic, axes[i], rank, &a));
                p->sliced[a] = true;
            }
        } else if (k3 && na < 0 && k1) {
            for (int i = 0; i < ns && i < rank; i++) p->sliced[i] = true;
        } else {
            for (int i = 0; i < rank; i++) p->sliced[i] = true;
        }
        return DL_OK;
    }
    if (ns != ne) return dl_infer_fail(ic, DL_ERR_INVALID, "starts has %d values, ends %d", ns, ne);
    if (na >= 0 && na != ns)
        return dl_infer_fail(ic, DL_ERR_INVALID, "axes has %d values, starts %d", na, ns);
    if (nst >= 0 && nst != ns)
        return dl_infer_fail(ic, DL_ERR_INVALID, "steps has %d values, starts %d", nst, ns);
    if (ns > rank)
        return dl_infer_fail(ic, DL_ERR_INVALID, "%d slice entries for a rank-%d input", ns, rank);
    for (int i = 0; i < rank; i++) {
        p->start[i] = 0;
        p->end[i] = INT64_MAX;
        p->step[i] = 1;
    }
    for (int i = 0; i < ns; i++) {
        int a = i;
        if (na >= 0) {
            if (ic->opset < 11 && axes[i] < 0)
                return dl_infer_fail(ic, DL_ERR_INVALID, "negative axes need opset 11");
            DL_TRY(dl_infer_axis(ic, axes[i], rank, &a));
        }
        if (p->sliced[a]) return dl_infer_fail(ic, DL_ERR_INVALID, "axis %d repeats in axes", a);
        p->sliced[a] = true;
        int64_t st = nst >= 0 ? steps[i] : 1;
        if (st == 0) return dl_infer_fail(ic, DL_ERR_INVALID, "steps must not be 0");
        p->start[a] = starts[i];
        p->end[a] = ends[i];
        p->step[a] = st;
    }
    p->known = true;
    return DL_OK;
}

static dl_status slice_infer(dl_infer *ic) {
    const dl_type *x = ic->in[0];
    if (ic->opset >= 10 && ic->n_in < 3)
        return dl_infer_fail(ic, DL_ERR_INVALID, "Slice needs starts and ends inputs");
    if (x->rank == DL_RANK_UNKNOWN) return dtype_only(ic, x->dtype);
    if (x->rank == 0) return dl_infer_fail(ic, DL_ERR_SHAPE, "cannot slice a scalar");
    slice_p p;
    DL_TRY(slice_params(ic, x->rank, &p));
    int64_t dims[R];
    for (int a = 0; a < x->rank; a++) {
        int64_t d = x->dims[a];
        if (!p.sliced[a]) {
            dims[a] = d;
        } else if (!p.known) {
            dims[a] = dl_infer_fresh_dim(ic);
        } else if (d < 0) {
            /* [0:big:1] keeps a symbolic dim. */
            bool full = p.start[a] == 0 && p.step[a] == 1 && p.end[a] >= INT32_MAX;
            dims[a] = full ? d : dl_infer_fresh_dim(ic);
        } else {
            int64_t s;
            slice_axis(d, p.start[a], p.end[a], p.step[a], &s, &dims[a]);
        }
    }
    return dl_infer_set(ic, 0, x->dtype, x->rank, dims);
}

static dl_status slice_ref(dl_kernel *kc) {
    DL_TRY(dl_kernel_outs(kc));
    dl_infer ic = dl_kernel_infer(kc);
    const dl_tensor *x = kc->in[0];
    dl_tensor *y = kc->out[0];
    int rank = x->rank;
    slice_p p;
    dl_status s = slice_params(&ic, rank, &p);
    if (s != DL_OK || y->numel == 0) return s;
    int64_t start[R], len[R], xs[R], idx[R] = {0}, o = 0;
    for (int a = 0; a < rank; a++)
        slice_axis(x->dims[a], p.start[a], p.end[a], p.step[a], &start[a], &len[a]);
    dl_strides(rank, x->dims, xs);
    do {
        int64_t src = 0;
        for (int a = 0; a < rank; a++) src += (start[a] + idx[a] * p.step[a]) * xs[a];
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
    if (!known) {
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
        if (b < 0)
            return dl_infer_fail(ic, DL_ERR_INVALID, "shape[%d] = %lld is negative", si,
                                 (long long)b);
        if (a == b || b == 1)
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

/* ---- Tile ---- */

static dl_status tile_infer(dl_infer *ic) {
    const dl_type *x = ic->in[0];
    if (!dl_has_in(ic, 1)) return dl_infer_fail(ic, DL_ERR_INVALID, "Tile needs repeats");
    int64_t rep[R];
    int n;
    bool known;
    DL_TRY(const_ints(ic, 1, "repeats", rep, R, &n, &known));
    if (x->rank == DL_RANK_UNKNOWN) return dtype_only(ic, x->dtype);
    int64_t len = input_len(ic, 1);
    if (len >= 0 && len != x->rank)
        return dl_infer_fail(ic, DL_ERR_SHAPE, "repeats has %lld values for a rank-%d input",
                             (long long)len, x->rank);
    int64_t dims[R];
    for (int i = 0; i < x->rank; i++) {
        if (!known) {
            dims[i] = dl_infer_fresh_dim(ic);
            continue;
        }
        if (rep[i] < 0)
            return dl_infer_fail(ic, DL_ERR_INVALID, "repeats[%d] = %lld is negative", i,
                                 (long long)rep[i]);
        if (x->dims[i] < 0)
            dims[i] = rep[i] == 1 ? x->dims[i] : rep[i] == 0 ? 0 : dl_infer_fresh_dim(ic);
        else if (!mul_dim(x->dims[i], rep[i], &dims[i]))
            return dl_infer_fail(ic, DL_ERR_LIMIT, "tiled size overflows");
    }
    return dl_infer_set(ic, 0, x->dtype, x->rank, dims);
}

static dl_status tile_ref(dl_kernel *kc) {
    DL_TRY(dl_kernel_outs(kc));
    const dl_tensor *x = kc->in[0];
    dl_tensor *y = kc->out[0];
    if (y->numel == 0) return DL_OK; /* else every x dim is > 0 */
    int64_t xs[R], idx[R] = {0}, o = 0;
    dl_strides(x->rank, x->dims, xs);
    do {
        int64_t src = 0;
        for (int i = 0; i < x->rank; i++) src += (idx[i] % x->dims[i]) * xs[i];
        copy_elem(y, o++, x, src);
    } while (dl_index_next(y->rank, y->dims, idx));
    return DL_OK;
}

/* ---- Pad ---- */

static const dl_attr_spec pad_attrs[] = {
    {"mode", DL_ATTR_STRING}, {"pads", DL_ATTR_INTS}, {"value", DL_ATTR_FLOAT}, {NULL, 0}};

enum { PAD_CONSTANT, PAD_REFLECT, PAD_EDGE };

/* Mode and pads (2*rank: all begins then all ends); *known false when pads are not known. */
static dl_status pad_params(dl_infer *ic, int rank, int *mode, int64_t *pads, bool *known) {
    const char *m = dl_attr_str(ic->node, "mode", "constant");
    if (!strcmp(m, "constant"))
        *mode = PAD_CONSTANT;
    else if (!strcmp(m, "reflect"))
        *mode = PAD_REFLECT;
    else if (!strcmp(m, "edge"))
        *mode = PAD_EDGE;
    else
        return dl_infer_fail(ic, DL_ERR_UNSUPPORTED, "pad mode '%s' is not supported", m);
    int n;
    if (ic->opset < 11) {
        const int64_t *v;
        n = dl_attr_ints(ic->node, "pads", &v);
        if (n < 0) return dl_infer_fail(ic, DL_ERR_INVALID, "Pad needs a pads attribute");
        if (n > 2 * R) return dl_infer_fail(ic, DL_ERR_INVALID, "too many pads");
        memcpy(pads, v, sizeof(int64_t) * (size_t)n);
        *known = true;
    } else {
        if (!dl_has_in(ic, 1)) return dl_infer_fail(ic, DL_ERR_INVALID, "Pad needs a pads input");
        DL_TRY(const_ints(ic, 1, "pads", pads, 2 * R, &n, known));
        if (dl_has_in(ic, 2)) {
            const dl_type *cv = ic->in[2];
            if (cv->dtype != ic->in[0]->dtype)
                return dl_infer_fail(ic, DL_ERR_TYPE, "constant_value is %s, data is %s",
                                     dl_dtype_name(cv->dtype), dl_dtype_name(ic->in[0]->dtype));
            if (cv->rank > 1 || (cv->rank == 1 && cv->dims[0] > 1))
                return dl_infer_fail(ic, DL_ERR_SHAPE, "constant_value must be a scalar");
        }
        if (!*known) {
            int64_t len = input_len(ic, 1);
            if (rank >= 0 && len >= 0 && len != 2 * rank)
                return dl_infer_fail(ic, DL_ERR_SHAPE, "pads has %lld values for a rank-%d input",
                                     (long long)len, rank);
            return DL_OK;
        }
    }
    if (rank >= 0 && n != 2 * rank)
        return dl_infer_fail(ic, DL_ERR_SHAPE, "pads has %d values for a rank-%d input", n, rank);
    return DL_OK;
}

static dl_status pad_infer(dl_infer *ic) {
    const dl_type *x = ic->in[0];
    int mode;
    int64_t pads[2 * R];
    bool known;
    DL_TRY(pad_params(ic, x->rank, &mode, pads, &known));
    int r = x->rank;
    if (r == DL_RANK_UNKNOWN) return dtype_only(ic, x->dtype);
    int64_t dims[R];
    for (int i = 0; i < r; i++) {
        if (!known) {
            dims[i] = dl_infer_fresh_dim(ic);
            continue;
        }
        int64_t a = pads[i], b = pads[i + r], d = x->dims[i], add;
        if (__builtin_add_overflow(a, b, &add) || add > ((int64_t)1 << 50) ||
            add < -((int64_t)1 << 50))
            return dl_infer_fail(ic, DL_ERR_LIMIT, "pads on axis %d are too large", i);
        if (d < 0) {
            dims[i] = add == 0 ? d : dl_infer_fresh_dim(ic);
            continue;
        }
        dims[i] = d + add;
        if (dims[i] < 0)
            return dl_infer_fail(ic, DL_ERR_SHAPE, "pads make axis %d negative (%lld)", i,
                                 (long long)dims[i]);
        if (mode != PAD_CONSTANT && d == 0 && dims[i] > 0)
            return dl_infer_fail(ic, DL_ERR_INVALID, "cannot %s-pad an empty axis %d",
                                 mode == PAD_EDGE ? "edge" : "reflect", i);
    }
    return dl_infer_set(ic, 0, x->dtype, r, dims);
}

static dl_status pad_ref(dl_kernel *kc) {
    DL_TRY(dl_kernel_outs(kc));
    dl_infer ic = dl_kernel_infer(kc);
    const dl_tensor *x = kc->in[0];
    dl_tensor *y = kc->out[0];
    int r = x->rank, mode;
    int64_t pads[2 * R];
    bool known;
    dl_status s = pad_params(&ic, r, &mode, pads, &known);
    if (s != DL_OK || y->numel == 0) return s;
    /* The constant as one element of the data dtype. */
    uint64_t cbuf[2] = {0, 0};
    dl_tensor cv = {.dtype = x->dtype, .numel = 1, .nbytes = dl_dtype_size(x->dtype), .data = cbuf};
    if (kc->opset < 11) {
        double v = dl_attr_float(kc->node, "value", 0.0f);
        if (dl_dtype_is_float(x->dtype))
            dl_set_f64(&cv, 0, v);
        else
            dl_set_i64(&cv, 0, (int64_t)v);
    } else if (kc->n_in > 2 && kc->in[2] && kc->in[2]->numel > 0) {
        copy_elem(&cv, 0, kc->in[2], 0);
    }
    int64_t xs[R], idx[R] = {0}, o = 0;
    dl_strides(r, x->dims, xs);
    do {
        int64_t src = 0;
        bool outside = false;
        for (int i = 0; i < r && !outside; i++) {
            int64_t d = x->dims[i], j = idx[i] - pads[i], per = 2 * (d - 1);
            if (j < 0 || j >= d) {
                if (mode == PAD_CONSTANT)
                    outside = true;
                else if (mode == PAD_EDGE || d == 1)
                    j = j < 0 ? 0 : d - 1;
                else if ((j = ((j % per) + per) % per) >= d) /* reflect, numpy-style repeats */
                    j = per - j;
            }
            src += j * xs[i];
        }
        copy_elem(y, o++, outside ? &cv : x, outside ? 0 : src);
    } while (dl_index_next(r, y->dims, idx));
    return DL_OK;
}

/* ---- DepthToSpace / SpaceToDepth ---- */

static const dl_attr_spec d2s_attrs[] = {
    {"blocksize", DL_ATTR_INT}, {"mode", DL_ATTR_STRING}, {NULL, 0}};
static const dl_attr_spec s2d_attrs[] = {{"blocksize", DL_ATTR_INT}, {NULL, 0}};

static dl_status blocksize(dl_infer *ic, int64_t *b) {
    const dl_attr *a = dl_node_attr(ic->node, "blocksize");
    if (!a) return dl_infer_fail(ic, DL_ERR_INVALID, "blocksize attribute is required");
    if (a->i <= 0 || a->i > 65536)
        return dl_infer_fail(ic, DL_ERR_INVALID, "blocksize %lld is invalid", (long long)a->i);
    *b = a->i;
    return DL_OK;
}

static dl_status d2s_infer(dl_infer *ic) {
    const dl_type *x = ic->in[0];
    int64_t b;
    DL_TRY(blocksize(ic, &b));
    if (ic->opset >= 11) {
        const char *m = dl_attr_str(ic->node, "mode", "DCR");
        if (strcmp(m, "DCR") && strcmp(m, "CRD"))
            return dl_infer_fail(ic, DL_ERR_INVALID, "mode '%s' must be DCR or CRD", m);
    }
    if (x->rank == DL_RANK_UNKNOWN) return dl_infer_set(ic, 0, x->dtype, 4, NULL);
    if (x->rank != 4) return dl_infer_fail(ic, DL_ERR_SHAPE, "input must be 4-D");
    int64_t dims[4] = {x->dims[0], dl_infer_fresh_dim(ic), dl_infer_fresh_dim(ic),
                       dl_infer_fresh_dim(ic)};
    if (x->dims[1] >= 0) {
        if (x->dims[1] % (b * b))
            return dl_infer_fail(ic, DL_ERR_SHAPE, "channels %lld not divisible by %lld",
                                 (long long)x->dims[1], (long long)(b * b));
        dims[1] = x->dims[1] / (b * b);
    }
    for (int i = 2; i < 4; i++)
        if (x->dims[i] >= 0 && !mul_dim(x->dims[i], b, &dims[i]))
            return dl_infer_fail(ic, DL_ERR_LIMIT, "size overflows");
    return dl_infer_set(ic, 0, x->dtype, 4, dims);
}

static dl_status s2d_infer(dl_infer *ic) {
    const dl_type *x = ic->in[0];
    int64_t b;
    DL_TRY(blocksize(ic, &b));
    if (x->rank == DL_RANK_UNKNOWN) return dl_infer_set(ic, 0, x->dtype, 4, NULL);
    if (x->rank != 4) return dl_infer_fail(ic, DL_ERR_SHAPE, "input must be 4-D");
    int64_t dims[4] = {x->dims[0], dl_infer_fresh_dim(ic), dl_infer_fresh_dim(ic),
                       dl_infer_fresh_dim(ic)};
    if (x->dims[1] >= 0 && !mul_dim(x->dims[1], b * b, &dims[1]))
        return dl_infer_fail(ic, DL_ERR_LIMIT, "size overflows");
    for (int i = 2; i < 4; i++) {
        if (x->dims[i] < 0) continue;
        if (x->dims[i] % b)
            return dl_infer_fail(ic, DL_ERR_SHAPE, "dim %d (%lld) not divisible by %lld", i,
                                 (long long)x->dims[i], (long long)b);
        dims[i] = x->dims[i] / b;
    }
    return dl_infer_set(ic, 0, x->dtype, 4, dims);
}

/* Moves elements between x [N,C,H,W] and y [N,C/b²,H*b,W*b] (depth to space) or the reverse. */
static dl_status space_depth_ref(dl_kernel *kc, bool to_space) {
    DL_TRY(dl_kernel_outs(kc));
    const dl_tensor *x = kc->in[0];
    dl_tensor *y = kc->out[0];
    int64_t b = dl_attr_int(kc->node, "blocksize", 1);
    bool crd = to_space && kc->opset >= 11 && !strcmp(dl_attr_str(kc->node, "mode", "DCR"), "CRD");
    /* The "space" side s and the "depth" side d. */
    const dl_tensor *d = to_space ? x : y, *s = to_space ? y : x;
    int64_t N = s->dims[0], C = s->dims[1], H = d->dims[2], W = d->dims[3];
    for (int64_t n = 0; n < N; n++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t i = 0; i < b; i++)
                    for (int64_t w = 0; w < W; w++)
                        for (int64_t j = 0; j < b; j++) {
                            int64_t dc = crd ? c * b * b + i * b + j : (i * b + j) * C + c;
                            int64_t di = ((n * C * b * b + dc) * H + h) * W + w;
                            int64_t si = ((n * C + c) * H * b + h * b + i) * W * b + w * b + j;
                            if (to_space)
                                copy_elem(y, si, x, di);
                            else
                                copy_elem(y, di, x, si);
                        }
    return DL_OK;
}

static dl_status d2s_ref(dl_kernel *kc) {
    return space_depth_ref(kc, true);
}
static dl_status s2d_ref(dl_kernel *kc) {
    return space_depth_ref(kc, false);
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

/* ---- Trilu ---- */

static const dl_attr_spec trilu_attrs[] = {{"upper", DL_ATTR_INT}, {NULL, 0}};

static dl_status trilu_infer(dl_infer *ic) {
    const dl_type *x = ic->in[0];
    if (x->rank != DL_RANK_UNKNOWN && x->rank < 2)
        return dl_infer_fail(ic, DL_ERR_SHAPE, "Trilu needs rank >= 2, got %d", x->rank);
    if (dl_has_in(ic, 1)) {
        const dl_type *k = ic->in[1];
        if (!dl_dtype_is_int(k->dtype)) return dl_infer_fail(ic, DL_ERR_TYPE, "k must be int64");
        if (k->rank > 1 || (k->rank == 1 && k->dims[0] >= 0 && k->dims[0] != 1))
            return dl_infer_fail(ic, DL_ERR_SHAPE, "k must be a scalar");
    }
    return dl_infer_same(ic, 0, 0);
}

static dl_status trilu_ref(dl_kernel *kc) {
    DL_TRY(dl_kernel_outs(kc));
    const dl_tensor *x = kc->in[0];
    dl_tensor *y = kc->out[0];
    if (x->numel == 0) return DL_OK;
    int64_t k = 0;
    if (kc->n_in > 1 && kc->in[1]) {
        if (kc->in[1]->numel != 1) return dl_kernel_fail(kc, DL_ERR_SHAPE, "k must be a scalar");
        k = dl_get_i64(kc->in[1], 0);
    }
    bool upper = dl_attr_int(kc->node, "upper", 1) != 0;
    int64_t rows = x->dims[x->rank - 2], cols = x->dims[x->rank - 1], i = 0;
    memset(y->data, 0, y->nbytes);
    for (int64_t b = 0; b < x->numel / (rows * cols); b++)
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < cols; c++, i++)
                if (upper ? c - r >= k : c - r <= k) copy_elem(y, i, x, i);
    return DL_OK;
}

/* ---- ReverseSequence ---- */

static const dl_attr_spec revseq_attrs[] = {
    {"batch_axis", DL_ATTR_INT}, {"time_axis", DL_ATTR_INT}, {NULL, 0}};

static dl_status revseq_infer(dl_infer *ic) {
    const dl_type *x = ic->in[0];
    int64_t ba = dl_attr_int(ic->node, "batch_axis", 1), ta = dl_attr_int(ic->node, "time_axis", 0);
    if (!((ba == 0 && ta == 1) || (ba == 1 && ta == 0)))
        return dl_infer_fail(ic, DL_ERR_INVALID, "batch_axis/time_axis must be 0 and 1");
    if (!dl_has_in(ic, 1)) return dl_infer_fail(ic, DL_ERR_INVALID, "sequence_lens is required");
    const dl_type *l = ic->in[1];
    if (!dl_dtype_is_int(l->dtype))
        return dl_infer_fail(ic, DL_ERR_TYPE, "sequence_lens must be int64");
    if (l->rank != DL_RANK_UNKNOWN && l->rank != 1)
        return dl_infer_fail(ic, DL_ERR_SHAPE, "sequence_lens must be 1-D");
    if (x->rank != DL_RANK_UNKNOWN) {
        if (x->rank < 2) return dl_infer_fail(ic, DL_ERR_SHAPE, "input needs rank >= 2");
        if (l->rank == 1 && l->dims[0] >= 0 && x->dims[ba] >= 0 && l->dims[0] != x->dims[ba])
            return dl_infer_fail(ic, DL_ERR_SHAPE, "sequence_lens has %lld entries, batch is %lld",
                                 (long long)l->dims[0], (long long)x->dims[ba]);
    }
    return dl_infer_same(ic, 0, 0);
}

static dl_status revseq_ref(dl_kernel *kc) {
    DL_TRY(dl_kernel_outs(kc));
    const dl_tensor *x = kc->in[0], *lens = kc->in[1];
    dl_tensor *y = kc->out[0];
    int ba = (int)dl_attr_int(kc->node, "batch_axis", 1), ta = 1 - ba;
    int64_t B = x->dims[ba], T = x->dims[ta], inner = prod_dims(x->dims, 2, x->rank);
    for (int64_t b = 0; b < B; b++) {
        int64_t len = dl_get_i64(lens, b);
        if (len < 0 || len > T)
            return dl_kernel_fail(kc, DL_ERR_INVALID, "sequence_lens[%lld] = %lld not in [0, %lld]",
                                  (long long)b, (long long)len, (long long)T);
        for (int64_t t = 0; t < T; t++) {
            int64_t st = t < len ? len - 1 - t : t;
            int64_t dst_row = ba == 0 ? b * T + t : t * B + b;
            int64_t src_row = ba == 0 ? b * T + st : st * B + b;
            for (int64_t i = 0; i < inner; i++)
                copy_elem(y, dst_row * inner + i, x, src_row * inner + i);
        }
    }
    return DL_OK;
}

/* ---- gradient rules (grad.h) ---- */

/* Slice of one axis. */
static dl_value *grad_slice1(dl_grad_ctx *gc, dl_value *v, int axis, int64_t start, int64_t end,
                             int64_t step) {
    int64_t a = axis;
    dl_value *in[5] = {v, dg_ints(gc, 1, &start), dg_ints(gc, 1, &end), dg_ints(gc, 1, &a),
                       dg_ints(gc, 1, &step)};
    return dg_op(gc, "Slice", 5, in, NULL);
}

/* Constant zero padding of one axis of a rank-r value. */
static dl_value *grad_pad1(dl_grad_ctx *gc, dl_value *v, int r, int axis, int64_t before,
                           int64_t after) {
    int64_t pads[2 * R] = {0};
    pads[axis] = before;
    pads[axis + r] = after;
    return dg_op2(gc, "Pad", v, dg_ints(gc, 2 * r, pads), NULL);
}

static dl_value *grad_sum1(dl_grad_ctx *gc, dl_value *v, int axis) {
    int64_t a = axis;
    return dg_op2(gc, "ReduceSum", v, dg_ints(gc, 1, &a), "keepdims=1");
}

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

/* Concat: dy split back into the inputs' extents along the axis. */
static dl_status concat_grad(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy,
                             dl_value **dx) {
    int rank = n->out[0]->type.rank, k = n->n_in;
    if (rank < 0) return dg_refuse(gc, n, "the rank is unknown");
    int64_t axis = dl_attr_int(n, "axis", 0), sizes[64];
    if (axis < 0) axis += rank;
    if (k == 1) {
        dx[0] = dy[0];
        return dg_status(gc);
    }
    bool known = true;
    for (int i = 0; i < k; i++) {
        if (n->in[i]->type.rank != rank) return dg_refuse(gc, n, "an input rank is unknown");
        sizes[i] = n->in[i]->type.dims[axis];
        known = known && sizes[i] >= 0;
    }
    dl_value *split;
    if (known) {
        split = dg_ints(gc, k, sizes);
    } else {
        dl_value *ext[64];
        char a[64];
        snprintf(a, sizeof a, "start=%d;end=%d", (int)axis, (int)axis + 1);
        for (int i = 0; i < k; i++) ext[i] = dg_op1(gc, "Shape", n->in[i], a);
        split = dg_op(gc, "Concat", k, ext, "axis=0");
    }
    dl_value *in[2] = {dy[0], split}, *out[64];
    char a[32];
    snprintf(a, sizeof a, "axis=%d", (int)axis);
    if (dg_op_like(gc, NULL, "Split", 2, in, NULL, a, k, out) != DL_OK) return dg_status(gc);
    for (int i = 0; i < k; i++)
        if (dg_needs(gc, n, i)) dx[i] = out[i];
    return dg_status(gc);
}

/* Split: the outputs' gradients concatenated (zeros for an output that does not reach the loss). */
static dl_status split_grad(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy, dl_value **dx) {
    int rank = n->in[0]->type.rank;
    if (rank < 0) return dg_refuse(gc, n, "the input rank is unknown");
    int64_t axis = dl_attr_int(n, "axis", 0);
    if (axis < 0) axis += rank;
    dl_value *parts[64];
    for (int o = 0; o < n->n_out; o++) {
        if (!n->out[o]) return dg_refuse(gc, n, "an output is omitted");
        parts[o] = dy[o] ? dy[o] : dg_zeros_like(gc, n->out[o]);
    }
    char a[32];
    snprintf(a, sizeof a, "axis=%d", (int)axis);
    dx[0] = n->n_out == 1 ? parts[0] : dg_op(gc, "Concat", n->n_out, parts, a);
    return dg_status(gc);
}

/* Spreads g along axis so element i lands at i*step: a new axis after it padded to step, merged
 * back, and cut to span elements. g must have known dims. */
static dl_value *spread_axis(dl_grad_ctx *gc, dl_value *g, int axis, int64_t step, int64_t span) {
    if (!g) return NULL;
    int r = g->type.rank;
    int64_t a1 = axis + 1, dims[R];
    dl_value *u = dg_op2(gc, "Unsqueeze", g, dg_ints(gc, 1, &a1), NULL);
    u = grad_pad1(gc, u, r + 1, axis + 1, 0, step - 1);
    memcpy(dims, g->type.dims, sizeof(int64_t) * (size_t)r);
    int64_t full = dims[axis] * step;
    dims[axis] = full;
    u = dg_op2(gc, "Reshape", u, dg_ints(gc, r, dims), NULL);
    return span < full ? grad_slice1(gc, u, axis, 0, span, 1) : u;
}

/* Slice: dy placed back at the sliced positions (zero elsewhere). Negative steps reverse dy first;
 * steps beyond 1 interleave zeros; one Pad puts the result at the start offsets. */
static dl_status slice_grad(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy, dl_value **dx) {
    dl_value *x = n->in[0], *g = dy[0];
    int r = x->type.rank;
    if (r < 1) return dg_refuse(gc, n, "the input rank is unknown");
    slice_p p;
    dg_view v;
    if (dg_check(gc, slice_params(dg_view_of(gc, n, &v), r, &p)) != DL_OK) return dg_status(gc);
    if (!p.known) return dg_refuse(gc, n, "starts, ends, axes and steps must be constants");
    int64_t pads[2 * R] = {0};
    bool any = false;
    for (int a = 0; a < r && g; a++) {
        if (!p.sliced[a]) continue;
        int64_t d = x->type.dims[a], s0, len, st = p.step[a] < 0 ? -p.step[a] : p.step[a];
        if (d < 0) return dg_refuse(gc, n, "a sliced axis has a symbolic size");
        slice_axis(d, p.start[a], p.end[a], p.step[a], &s0, &len);
        if (len == 0) {
            dx[0] = dg_zeros_like(gc, x);
            return dg_status(gc);
        }
        if (p.step[a] < 0) {
            g = grad_slice1(gc, g, a, -1, INT64_MIN, -1);
            s0 -= (len - 1) * st;
        }
        int64_t span = (len - 1) * st + 1; /* from the first to the last sliced element */
        if (st > 1) {
            if (!dl_type_known(&x->type) || r >= R)
                return dg_refuse(gc, n, "steps other than 1 need known dims and rank < 8");
            g = spread_axis(gc, g, a, st, span);
        }
        pads[a] = s0;
        pads[a + r] = d - s0 - span;
        any = any || pads[a] || pads[a + r];
    }
    dx[0] = any ? dg_op2(gc, "Pad", g, dg_ints(gc, 2 * r, pads), NULL) : g;
    return dg_status(gc);
}

static dl_status expand_grad(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy,
                             dl_value **dx) {
    dx[0] = dg_sum_to(gc, dy[0], n->in[0]);
    return dg_status(gc);
}

/* Tile: y viewed as [r0, d0, r1, d1, ...] (only the repeated axes split), summed over the r's. */
static dl_status tile_grad(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy, dl_value **dx) {
    dl_value *x = n->in[0];
    const dl_tensor *rep = n->in[1]->constant;
    int r = x->type.rank;
    if (!rep) return dg_refuse(gc, n, "repeats must be a constant");
    if (!dl_type_known(&x->type)) return dg_refuse(gc, n, "the input dims must be known");
    int64_t dims[R], axes[R];
    int nd = 0, na = 0;
    for (int i = 0; i < r; i++) {
        int64_t k = dl_get_i64(rep, i);
        if (nd + (k != 1) >= R)
            return dg_refuse(gc, n, "too many repeated axes for the rank limit");
        if (k != 1) {
            axes[na++] = nd;
            dims[nd++] = k;
        }
        dims[nd++] = x->type.dims[i];
    }
    if (na == 0) {
        dx[0] = dy[0];
        return dg_status(gc);
    }
    dl_value *g = dg_op2(gc, "Reshape", dy[0], dg_ints(gc, nd, dims), NULL);
    dx[0] = dg_op2(gc, "ReduceSum", g, dg_ints(gc, na, axes), "keepdims=0");
    return dg_status(gc);
}

/* Edge padding of one axis (d > 0 input elements, pads b and e): the first and last input
 * elements also receive the gradients of the copies padded next to them. */
static dl_value *edge_axis_grad(dl_grad_ctx *gc, dl_value *g, int axis, int64_t d, int64_t b,
                                int64_t e) {
    if (d == 1) return grad_sum1(gc, g, axis);
    dl_value *first = grad_slice1(gc, g, axis, 0, b + 1, 1);
    dl_value *last = grad_slice1(gc, g, axis, b + d - 1, b + d + e, 1);
    if (b) first = grad_sum1(gc, first, axis);
    if (e) last = grad_sum1(gc, last, axis);
    dl_value *parts[3] = {first, grad_slice1(gc, g, axis, b + 1, b + d - 1, 1), last};
    char a[32];
    snprintf(a, sizeof a, "axis=%d", axis);
    if (d == 2) {
        parts[1] = last;
        return dg_op(gc, "Concat", 2, parts, a);
    }
    return dg_op(gc, "Concat", 3, parts, a);
}

/* Reflect padding of one axis (pads b, e <= d - 1): padded element b-1-j copies input 1+j, padded
 * element b+d+j copies input d-2-j; their gradients are reversed and added there. */
static dl_value *reflect_axis_grad(dl_grad_ctx *gc, dl_value *g, int r, int axis, int64_t d,
                                   int64_t b, int64_t e) {
    dl_value *core = grad_slice1(gc, g, axis, b, b + d, 1);
    if (b) {
        dl_value *left = grad_slice1(gc, g, axis, b - 1, INT64_MIN, -1);
        core = dg_op2(gc, "Add", core, grad_pad1(gc, left, r, axis, 1, d - 1 - b), NULL);
    }
    if (e) {
        dl_value *right = grad_slice1(gc, g, axis, b + d + e - 1, b + d - 1, -1);
        core = dg_op2(gc, "Add", core, grad_pad1(gc, right, r, axis, d - 1 - e, 1), NULL);
    }
    return core;
}

/* Pad. Constant mode: dy cut back to the input's extent (a Pad with the pads negated when the
 * forward cropped); the pad value gets the sum of dy over the padded positions. Edge and reflect:
 * per axis, the gradients of the copies folded back onto the elements they copy. */
static dl_status pad_grad(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy, dl_value **dx) {
    dl_value *x = n->in[0];
    int r = x->type.rank, mode;
    if (r < 0) return dg_refuse(gc, n, "the input rank is unknown");
    int64_t pads[2 * R];
    bool known = false;
    dg_view v;
    if (dg_check(gc, pad_params(dg_view_of(gc, n, &v), r, &mode, pads, &known)) != DL_OK)
        return dg_status(gc);
    if (!known) return dg_refuse(gc, n, "pads must be a constant");
    bool nonneg = true;
    for (int i = 0; i < 2 * r; i++) nonneg = nonneg && pads[i] >= 0;
    dl_value *g = dy[0];
    if (mode == PAD_CONSTANT) {
        if (nonneg) {
            int64_t st[R], en[R], ax[R];
            int k = 0;
            for (int i = 0; i < r; i++) {
                if (!pads[i] && !pads[i + r]) continue;
                st[k] = pads[i];
                en[k] = pads[i + r] ? -pads[i + r] : INT64_MAX;
                ax[k++] = i;
            }
            if (k) {
                dl_value *in[4] = {g, dg_ints(gc, k, st), dg_ints(gc, k, en), dg_ints(gc, k, ax)};
                g = dg_op(gc, "Slice", 4, in, NULL);
            }
        } else {
            int64_t neg[2 * R];
            for (int i = 0; i < 2 * r; i++) neg[i] = -pads[i];
            g = dg_op2(gc, "Pad", g, dg_ints(gc, 2 * r, neg), NULL);
        }
        if (dg_needs(gc, n, 0)) dx[0] = g;
        if (dg_needs(gc, n, 2)) {
            dl_value *all = dg_op1(gc, "ReduceSum", dy[0], "keepdims=0");
            dl_value *kept = dg_op1(gc, "ReduceSum", g, "keepdims=0");
            dx[2] = dg_reshape_like(gc, dg_op2(gc, "Sub", all, kept, NULL), n->in[2]);
        }
        return dg_status(gc);
    }
    if (!nonneg) return dg_refuse(gc, n, "edge/reflect padding with negative pads");
    for (int a = 0; a < r && g; a++) {
        int64_t b = pads[a], e = pads[a + r], d = x->type.dims[a];
        if (!b && !e) continue;
        if (d < 0) return dg_refuse(gc, n, "a padded axis has a symbolic size");
        if (mode == PAD_EDGE) {
            g = edge_axis_grad(gc, g, a, d, b, e);
        } else {
            if (b > d - 1 || e > d - 1)
                return dg_refuse(gc, n, "reflect pads wider than the axis size minus one");
            g = reflect_axis_grad(gc, g, r, a, d, b, e);
        }
    }
    dx[0] = g;
    return dg_status(gc);
}

/* DepthToSpace (DCR) and SpaceToDepth are inverses; CRD mode is undone by its reshape/transpose
 * chain run backwards: dy [N, C, H*b, W*b] -> [N, C, H, b, W, b] -> [N, C, b, b, H, W]. */
static dl_status d2s_grad(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy, dl_value **dx) {
    int64_t b = dl_attr_int(n, "blocksize", 1);
    bool crd = n->opset >= 11 && !strcmp(dl_attr_str(n, "mode", "DCR"), "CRD");
    char a[48];
    snprintf(a, sizeof a, "blocksize=%lld", (long long)b);
    if (!crd) {
        dx[0] = dg_op1(gc, "SpaceToDepth", dy[0], a);
        return dg_status(gc);
    }
    const dl_type *y = &n->out[0]->type;
    if (y->rank != 4 || y->dims[1] < 0 || y->dims[2] < 0 || y->dims[3] < 0)
        return dg_refuse(gc, n, "CRD mode needs known C, H and W");
    int64_t six[6] = {0, y->dims[1], y->dims[2] / b, b, y->dims[3] / b, b};
    dl_value *g = dg_op2(gc, "Reshape", dy[0], dg_ints(gc, 6, six), NULL);
    g = dg_op1(gc, "Transpose", g, "perm=[0,1,3,5,2,4]");
    dx[0] = dg_reshape_like(gc, g, n->in[0]);
    return dg_status(gc);
}

static dl_status s2d_grad(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy, dl_value **dx) {
    char a[64];
    snprintf(a, sizeof a, "blocksize=%lld;mode=DCR", (long long)dl_attr_int(n, "blocksize", 1));
    dx[0] = dg_op1(gc, "DepthToSpace", dy[0], a);
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

/* Trilu and ReverseSequence are their own adjoints (same k / same lengths). */
static dl_status self_adjoint_grad(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy,
                                   dl_value **dx) {
    dl_value *in[2] = {dy[0], n->n_in > 1 ? n->in[1] : NULL};
    dg_op_like(gc, NULL, n->op->name, n->n_in, in, n, NULL, 1, &dx[0]);
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
    {.name = "Concat", .min_in = 1, .max_in = DL_VARIADIC, .min_out = 1, .max_out = 1,
     .attrs = concat_attrs, .infer = concat_infer, .ref = concat_ref,
     .grad = concat_grad},
    {.name = "Split", .min_in = 1, .max_in = 2, .min_out = 1, .max_out = DL_VARIADIC,
     .attrs = split_attrs, .infer = split_infer, .ref = split_ref,
     .grad = split_grad},
    {.name = "Slice", .min_in = 1, .max_in = 5, .min_out = 1, .max_out = 1,
     .attrs = slice_attrs, .infer = slice_infer, .ref = slice_ref,
     .grad = slice_grad},
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
    {.name = "Tile", .min_in = 2, .max_in = 2, .min_out = 1, .max_out = 1,
     .infer = tile_infer, .ref = tile_ref,
     .grad = tile_grad},
    {.name = "Pad", .min_in = 1, .max_in = 3, .min_out = 1, .max_out = 1,
     .attrs = pad_attrs, .infer = pad_infer, .ref = pad_ref,
     .grad = pad_grad},
    {.name = "DepthToSpace", .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1,
     .attrs = d2s_attrs, .infer = d2s_infer, .ref = d2s_ref,
     .grad = d2s_grad},
    {.name = "SpaceToDepth", .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1,
     .attrs = s2d_attrs, .infer = s2d_infer, .ref = s2d_ref,
     .grad = s2d_grad},
    {.name = "Dropout", .min_in = 1, .max_in = 3, .min_out = 1, .max_out = 2,
     .attrs = dropout_attrs, .infer = dropout_infer, .ref = dropout_ref,
     .grad = dropout_grad},
    {.name = "Trilu", .min_in = 1, .max_in = 2, .min_out = 1, .max_out = 1,
     .attrs = trilu_attrs, .infer = trilu_infer, .ref = trilu_ref,
     .grad = self_adjoint_grad},
    {.name = "ReverseSequence", .min_in = 2, .max_in = 2, .min_out = 1, .max_out = 1,
     .attrs = revseq_attrs, .infer = revseq_infer, .ref = revseq_ref,
     .grad = self_adjoint_grad},
    {.name = NULL},
};
/* clang-format on */
