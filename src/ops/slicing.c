/* slicing.c — op family "slicing" (rows of the op table): ops that cut, join, pad or rearrange
 * parts of tensors (Concat, Split, Slice, Tile, Pad, DepthToSpace, SpaceToDepth, Trilu,
 * ReverseSequence), with their gradient rules. Inference reads known starts, splits, repeats
 * and pads (shape-impl.h) to give exact output shapes. */
#include "shape-impl.h"
#include "../train/grad.h"

static int64_t prod_dims(const int64_t *dims, int from, int to) {
    int64_t p = 1;
    for (int i = from; i < to; i++) p *= dims[i];
    return p;
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
    /* Opset 18's num_outputs makes every part ceil(d / n) long but the last, which takes what is
     * left (8 into 3 gives 3, 3, 2); without it the parts must be equal. */
    const bool has_num = dl_node_attr(ic->node, "num_outputs") != NULL;
    const int64_t num_outputs = has_num ? dl_attr_int(ic->node, "num_outputs", 0) : 0;
    if (has_num && ic->opset < 18)
        return dl_infer_fail(ic, DL_ERR_INVALID,
                             "num_outputs is an attribute of Split from opset 18 (this is %d)",
                             ic->opset);
    if (has_num && have_split)
        return dl_infer_fail(ic, DL_ERR_INVALID, "both the split input and num_outputs are given");
    if (has_num && num_outputs != nout)
        return dl_infer_fail(ic, DL_ERR_INVALID, "num_outputs is %lld but the node has %d outputs",
                             (long long)num_outputs, nout);
    const int64_t chunk = d < 0 ? 0 : d / nout + (has_num && d % nout != 0);
    if (!have_split && d >= 0 && !has_num && d % nout != 0)
        return dl_infer_fail(ic, DL_ERR_SHAPE, "axis dim %lld does not split into %d equal parts",
                             (long long)d, nout);
    int64_t full = 0; /* the first n - 1 parts' extent */
    if (!have_split && d >= 0 &&
        (__builtin_mul_overflow(chunk, (int64_t)(nout - 1), &full) || full > d))
        return dl_infer_fail(ic, DL_ERR_SHAPE,
                             "axis dim %lld is too short for %d parts of %lld (num_outputs)",
                             (long long)d, nout, (long long)chunk);
    for (int o = 0; o < nout; o++) {
        int64_t dims[R];
        memcpy(dims, x->dims, sizeof(int64_t) * (size_t)x->rank);
        if (have_split && split_known)
            dims[axis] = attr_split ? attr_split[o] : dl_get_i64(in_split, o);
        else if (!have_split && d >= 0)
            dims[axis] = o < nout - 1 ? chunk : d - full;
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

/* An inference context for graph node n (at most 5 inputs) whose known values are its constant
 * inputs, for reading its parameters at compile time (dl_slice_geometry, dl_pad_geometry). No
 * dl_ctx: a node whose parameters are malformed is left to its reference kernel, which reports
 * them. */
static dl_infer graph_node_params(const dl_node *n, const dl_type *types[5],
                                  const dl_tensor *values[5]) {
    for (int i = 0; i < n->n_in && i < 5; i++) {
        types[i] = n->in[i] ? &n->in[i]->type : NULL;
        values[i] = n->in[i] ? n->in[i]->constant : NULL;
    }
    return (dl_infer){.node = n, .opset = n->opset, .n_in = n->n_in, .in = types, .value = values};
}

bool dl_slice_geometry(const dl_node *n, int64_t start[DL_MAX_RANK], int64_t step[DL_MAX_RANK]) {
    const dl_value *x = n->n_in > 0 ? n->in[0] : NULL;
    if (!x || x->type.rank < 1 || x->type.rank > R || n->n_in > 5) return false;
    const dl_type *types[5] = {NULL};
    const dl_tensor *values[5] = {NULL};
    dl_infer ic = graph_node_params(n, types, values);
    slice_p p;
    if (slice_params(&ic, x->type.rank, &p) != DL_OK || !p.known) return false;
    for (int a = 0; a < x->type.rank; a++) {
        int64_t len;
        if (x->type.dims[a] < 0) return false;
        slice_axis(x->type.dims[a], p.start[a], p.end[a], p.step[a], &start[a], &len);
        step[a] = p.step[a];
    }
    return true;
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

bool dl_pad_geometry(const dl_node *n, int64_t pads[2 * DL_MAX_RANK], uint64_t *value) {
    const dl_value *x = n->n_in > 0 ? n->in[0] : NULL;
    if (!x || x->type.rank < 1 || x->type.rank > R || n->n_in > 3 ||
        dl_dtype_size(x->type.dtype) > sizeof *value)
        return false;
    const dl_type *types[5] = {NULL};
    const dl_tensor *values[5] = {NULL};
    dl_infer ic = graph_node_params(n, types, values);
    int mode;
    bool known;
    if (pad_params(&ic, x->type.rank, &mode, pads, &known) != DL_OK || !known ||
        mode != PAD_CONSTANT || (n->n_in > 2 && n->in[2] && !n->in[2]->constant))
        return false;
    /* the constant as one element of the data's dtype, as pad_ref makes it */
    *value = 0;
    dl_tensor cv = {
        .dtype = x->type.dtype, .numel = 1, .nbytes = dl_dtype_size(x->type.dtype), .data = value};
    if (n->opset < 11) {
        double v = dl_attr_float(n, "value", 0.0f);
        if (dl_dtype_is_float(x->type.dtype))
            dl_set_f64(&cv, 0, v);
        else
            dl_set_i64(&cv, 0, (int64_t)v);
    } else if (n->n_in > 2 && n->in[2] && n->in[2]->constant->numel > 0) {
        copy_elem(&cv, 0, n->in[2]->constant, 0);
    }
    return true;
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

/* Trilu and ReverseSequence are their own adjoints (same k / same lengths). */
static dl_status self_adjoint_grad(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy,
                                   dl_value **dx) {
    dl_value *in[2] = {dy[0], n->n_in > 1 ? n->in[1] : NULL};
    dg_op_like(gc, NULL, n->op->name, n->n_in, in, n, NULL, 1, &dx[0]);
    return dg_status(gc);
}

/* ---- the table ---- */

/* clang-format off */
const dl_op_def dl_ops_slicing[] = {
    {.name = "Concat", .min_in = 1, .max_in = DL_VARIADIC, .min_out = 1, .max_out = 1,
     .attrs = concat_attrs, .infer = concat_infer, .ref = concat_ref,
     .grad = concat_grad},
    {.name = "Split", .min_in = 1, .max_in = 2, .min_out = 1, .max_out = DL_VARIADIC,
     .attrs = split_attrs, .infer = split_infer, .ref = split_ref,
     .grad = split_grad},
    {.name = "Slice", .min_in = 1, .max_in = 5, .min_out = 1, .max_out = 1,
     .attrs = slice_attrs, .infer = slice_infer, .ref = slice_ref,
     .grad = slice_grad},
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
    {.name = "Trilu", .min_in = 1, .max_in = 2, .min_out = 1, .max_out = 1,
     .attrs = trilu_attrs, .infer = trilu_infer, .ref = trilu_ref,
     .grad = self_adjoint_grad},
    {.name = "ReverseSequence", .min_in = 2, .max_in = 2, .min_out = 1, .max_out = 1,
     .attrs = revseq_attrs, .infer = revseq_infer, .ref = revseq_ref,
     .grad = self_adjoint_grad},
    {.name = NULL},
};
/* clang-format on */
