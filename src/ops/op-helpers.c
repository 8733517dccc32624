/* op-helpers.c — shared pieces of op rows: error messages that name the node and its input
 * shapes, inference helpers (broadcasting, axes, constant inputs) and generic elementwise loops. */
#include "op-impl.h"

#include <math.h>

static void append_inputs_desc(char *buf, size_t n, const dl_graph *g, int n_in,
                               const dl_type *const *in) {
    size_t used = strlen(buf);
    used += (size_t)snprintf(buf + used, used < n ? n - used : 0, " (inputs: ");
    for (int i = 0; i < n_in && used < n; i++) {
        char t[256];
        const char *d = in[i] ? dl_type_str(g, in[i], t, sizeof t) : "none";
        used += (size_t)snprintf(buf + used, n - used, "%s%s", i ? ", " : "", d);
    }
    if (used < n) snprintf(buf + used, n - used, ")");
}

dl_status dl_infer_fail(dl_infer *ic, dl_status s, const char *fmt, ...) {
    char msg[700], d[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    char full[DL_ERRMSG_LEN];
    snprintf(full, sizeof full, "%s: %s", dl_node_desc(ic->node, d, sizeof d), msg);
    append_inputs_desc(full, sizeof full, ic->g, ic->n_in, ic->in);
    return dl_fail(ic->ctx, s, "%s", full);
}

dl_status dl_kernel_fail(dl_kernel *kc, dl_status s, const char *fmt, ...) {
    char msg[700], d[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    char full[DL_ERRMSG_LEN];
    size_t used = (size_t)snprintf(full, sizeof full,
                                   "%s: %s (inputs: ", dl_node_desc(kc->node, d, sizeof d), msg);
    for (int i = 0; i < kc->n_in && used < sizeof full; i++) {
        char t[256];
        const char *desc = kc->in[i] ? dl_tensor_desc(kc->in[i], t, sizeof t) : "none";
        used += (size_t)snprintf(full + used, sizeof full - used, "%s%s", i ? ", " : "", desc);
    }
    if (used < sizeof full) snprintf(full + used, sizeof full - used, ")");
    return dl_fail(kc->ctx, s, "%s", full);
}

const char *dl_type_str(const dl_graph *g, const dl_type *t, char *buf, size_t n) {
    size_t used = (size_t)snprintf(buf, n, "%s", dl_dtype_name(t->dtype));
    if (t->rank < 0) {
        if (used < n) snprintf(buf + used, n - used, "[?]");
        return buf;
    }
    if (used < n) used += (size_t)snprintf(buf + used, n - used, "[");
    for (int i = 0; i < t->rank && used < n; i++) {
        if (t->dims[i] >= 0)
            used += (size_t)snprintf(buf + used, n - used, "%s%lld", i ? "," : "",
                                     (long long)t->dims[i]);
        else
            used += (size_t)snprintf(buf + used, n - used, "%s%s", i ? "," : "",
                                     dl_graph_sym_name(g, t->dims[i]));
    }
    if (used < n) snprintf(buf + used, n - used, "]");
    return buf;
}

int64_t dl_infer_fresh_dim(dl_infer *ic) {
    return ic->g ? dl_graph_new_sym(ic->g, NULL) : -1;
}

dl_status dl_infer_set(dl_infer *ic, int o, dl_dtype dtype, int rank, const int64_t *dims) {
    if (o >= ic->n_out) return DL_OK; /* optional output not requested */
    if (rank > DL_MAX_RANK)
        return dl_infer_fail(ic, DL_ERR_UNSUPPORTED, "output rank %d exceeds %d", rank,
                             DL_MAX_RANK);
    dl_type *t = &ic->out[o];
    t->dtype = dtype;
    t->rank = rank;
    for (int i = 0; i < rank && dims; i++) t->dims[i] = dims[i];
    if (!dims)
        for (int i = 0; i < rank; i++) t->dims[i] = dl_infer_fresh_dim(ic);
    return DL_OK;
}

dl_status dl_infer_same(dl_infer *ic, int o, int i) {
    if (!dl_has_in(ic, i)) return dl_infer_fail(ic, DL_ERR_INVALID, "input %d is missing", i);
    const dl_type *t = ic->in[i];
    return dl_infer_set(ic, o, t->dtype, t->rank, t->dims);
}

dl_status dl_infer_broadcast(dl_infer *ic, int o, int n, const int *idx) {
    int rank = 0;
    for (int k = 0; k < n; k++) {
        if (!dl_has_in(ic, idx[k]))
            return dl_infer_fail(ic, DL_ERR_INVALID, "input %d is missing", idx[k]);
        const dl_type *t = ic->in[idx[k]];
        if (t->rank < 0) return dl_infer_set(ic, o, ic->in[idx[0]]->dtype, DL_RANK_UNKNOWN, NULL);
        if (t->rank > rank) rank = t->rank;
    }
    int64_t dims[DL_MAX_RANK];
    for (int d = 0; d < rank; d++) {
        int64_t r = 1;
        bool sym_seen = false;
        int64_t sym = 0;
        for (int k = 0; k < n; k++) {
            const dl_type *t = ic->in[idx[k]];
            int td = d - (rank - t->rank);
            if (td < 0) continue;
            int64_t v = t->dims[td];
            if (v < 0) {
                if (!sym_seen || sym == v)
                    sym = v;
                else
                    sym = 0; /* two different symbols: result unknown unless a known dim decides */
                sym_seen = true;
                continue;
            }
            if (v == 1) continue;
            if (r != 1 && r != v)
                return dl_infer_fail(ic, DL_ERR_SHAPE,
                                     "shapes do not broadcast (dim %d: %lld vs %lld)", d,
                                     (long long)r, (long long)v);
            r = v;
        }
        if (r != 1 || !sym_seen)
            dims[d] = r; /* a known size > 1 wins over symbols */
        else
            dims[d] = sym ? sym : dl_infer_fresh_dim(ic);
    }
    return dl_infer_set(ic, o, ic->in[idx[0]]->dtype, rank, dims);
}

dl_status dl_infer_require_dtype(dl_infer *ic, int i, const dl_dtype *allowed) {
    if (!dl_has_in(ic, i)) return dl_infer_fail(ic, DL_ERR_INVALID, "input %d is missing", i);
    dl_dtype t = ic->in[i]->dtype;
    for (const dl_dtype *a = allowed; *a != DL_DTYPE_UNDEFINED; a++)
        if (*a == t) return DL_OK;
    return dl_infer_fail(ic, DL_ERR_TYPE, "input %d has unsupported dtype %s", i, dl_dtype_name(t));
}

dl_status dl_infer_require_float(dl_infer *ic, int i) {
    static const dl_dtype floats[] = {DL_F32, DL_F64, DL_F16, DL_BF16, DL_DTYPE_UNDEFINED};
    return dl_infer_require_dtype(ic, i, floats);
}

dl_status dl_infer_same_dtype(dl_infer *ic, int n, const int *idx) {
    dl_dtype first = DL_DTYPE_UNDEFINED;
    for (int k = 0; k < n; k++) {
        if (!dl_has_in(ic, idx[k])) continue;
        dl_dtype t = ic->in[idx[k]]->dtype;
        if (first == DL_DTYPE_UNDEFINED)
            first = t;
        else if (t != first)
            return dl_infer_fail(ic, DL_ERR_TYPE, "inputs %d and %d differ in dtype (%s vs %s)",
                                 idx[0], idx[k], dl_dtype_name(first), dl_dtype_name(t));
    }
    return DL_OK;
}

dl_status dl_infer_axis(dl_infer *ic, int64_t axis, int rank, int *out) {
    if (axis < -rank || axis >= rank)
        return dl_infer_fail(ic, DL_ERR_INVALID, "axis %lld is out of range for rank %d",
                             (long long)axis, rank);
    *out = (int)(axis < 0 ? axis + rank : axis);
    return DL_OK;
}

dl_status dl_infer_const_ints(dl_infer *ic, int i, int64_t *vals, int cap, int *n, bool *known) {
    *known = false;
    *n = 0;
    if (!dl_has_in(ic, i) || !ic->value[i]) return DL_OK;
    const dl_tensor *t = ic->value[i];
    if (!dl_dtype_is_int(t->dtype))
        return dl_infer_fail(ic, DL_ERR_TYPE, "input %d must be an integer tensor, got %s", i,
                             dl_dtype_name(t->dtype));
    if (t->rank > 1)
        return dl_infer_fail(ic, DL_ERR_SHAPE, "input %d must be a scalar or 1-D, got rank %d", i,
                             t->rank);
    if (t->numel > cap)
        return dl_infer_fail(ic, DL_ERR_SHAPE, "input %d has %lld values, at most %d allowed", i,
                             (long long)t->numel, cap);
    for (int64_t k = 0; k < t->numel; k++) vals[k] = dl_get_i64(t, k);
    *n = (int)t->numel;
    *known = true;
    return DL_OK;
}

dl_status dl_kernel_alloc_out(dl_kernel *kc, int o, dl_dtype dtype, int rank, const int64_t *dims) {
    if (o < 0 || o >= kc->n_out)
        return dl_kernel_fail(kc, DL_ERR_INTERNAL, "output %d does not exist", o);
    dl_tensor *t = kc->out[o];
    int64_t numel;
    size_t nbytes;
    if (dl_shape_numel(kc->ctx, dtype, rank, dims, &numel, &nbytes) != DL_OK) {
        dl_ctx_prefix(kc->ctx, "%s output %d", kc->node->name, o);
        return kc->ctx->status;
    }
    if (t->owns_data) dl_free(t->data);
    t->data = NULL;
    t->owns_data = false;
    t->dtype = dtype;
    t->rank = rank;
    for (int i = 0; i < rank; i++) t->dims[i] = dims[i];
    t->numel = numel;
    t->nbytes = nbytes;
    return dl_tensor_alloc_data(kc->ctx, t);
}

dl_status dl_kernel_out(dl_kernel *kc, int o, dl_tensor **out) {
    dl_tensor *t = kc->out[o];
    if (!t->data) {
        const dl_type *ty = &kc->out_type[o];
        if (!dl_type_known(ty))
            return dl_kernel_fail(kc, DL_ERR_INTERNAL, "output %d shape not known", o);
        DL_TRY(dl_kernel_alloc_out(kc, o, ty->dtype, ty->rank, ty->dims));
        t = kc->out[o];
    }
    *out = t;
    return DL_OK;
}

dl_status dl_kernel_out_as(dl_kernel *kc, int o, dl_dtype dtype, int rank, const int64_t *dims) {
    dl_tensor *t = kc->out[o];
    if (!t->data) return dl_kernel_alloc_out(kc, o, dtype, rank, dims);
    bool same = t->rank == rank && t->dtype == dtype;
    for (int i = 0; same && i < rank; i++) same = t->dims[i] == dims[i];
    if (!same)
        return dl_kernel_fail(kc, DL_ERR_INTERNAL, "output %d was preallocated with another type",
                              o);
    return DL_OK;
}

int dl_cmp_elems(const dl_tensor *a, int64_t i, const dl_tensor *b, int64_t j) {
    if (dl_dtype_is_float(a->dtype)) {
        double x = dl_get_f64(a, i), y = dl_get_f64(b, j);
        bool nx = isnan(x), ny = isnan(y);
        if (nx || ny) return nx && ny ? 0 : (nx ? 1 : -1);
        return x < y ? -1 : (x > y ? 1 : 0);
    }
    if (dl_dtype_is_int(a->dtype) && !dl_dtype_is_signed(a->dtype)) {
        uint64_t x = (uint64_t)dl_get_i64(a, i), y = (uint64_t)dl_get_i64(b, j);
        return x < y ? -1 : (x > y ? 1 : 0);
    }
    int64_t x = dl_get_i64(a, i), y = dl_get_i64(b, j);
    return x < y ? -1 : (x > y ? 1 : 0);
}

dl_status dl_kernel_outs(dl_kernel *kc) {
    for (int o = 0; o < kc->n_out; o++) {
        dl_tensor *t;
        DL_TRY(dl_kernel_out(kc, o, &t));
    }
    return DL_OK;
}

dl_infer dl_kernel_infer(const dl_kernel *kc) {
    return (dl_infer){.ctx = kc->ctx,
                      .node = kc->node,
                      .opset = kc->opset,
                      .n_in = kc->n_in,
                      .in = kc->in_type,
                      .value = kc->in};
}

/* ---- generic elementwise loops ---- */
dl_status dl_map_unary(dl_kernel *kc, dl_unary_f64 f) {
    const dl_tensor *a = kc->in[0];
    dl_tensor *y = kc->out[0];
    for (int64_t i = 0; i < y->numel; i++) dl_set_f64(y, i, f(dl_get_f64(a, i), kc->node));
    return DL_OK;
}

dl_status dl_map_binary(dl_kernel *kc, dl_binary_f64 ff, dl_binary_i64 fi) {
    const dl_tensor *a = kc->in[0], *b = kc->in[1];
    dl_tensor *y = kc->out[0];
    int64_t sa[DL_MAX_RANK], sb[DL_MAX_RANK], idx[DL_MAX_RANK] = {0};
    dl_broadcast_strides(a, y->rank, y->dims, sa);
    dl_broadcast_strides(b, y->rank, y->dims, sb);
    bool use_int = !dl_dtype_is_float(a->dtype) && fi;
    for (int64_t i = 0; i < y->numel; i++) {
        int64_t ia = 0, ib = 0;
        for (int d = 0; d < y->rank; d++) {
            ia += idx[d] * sa[d];
            ib += idx[d] * sb[d];
        }
        if (use_int)
            dl_set_i64(y, i, fi(dl_get_i64(a, ia), dl_get_i64(b, ib), kc->node));
        else
            dl_set_f64(y, i, ff(dl_get_f64(a, ia), dl_get_f64(b, ib), kc->node));
        dl_index_next(y->rank, y->dims, idx);
    }
    return DL_OK;
}
