/* shape-impl.h — helpers the shape-moving op families share (shape.c, slicing.c): element copies,
 * overflow-checked dim products, and reading small integer inputs (shapes, axes, pads) when
 * inference knows their values. Private to src/ops. */
#ifndef DL_SHAPE_IMPL_H
#define DL_SHAPE_IMPL_H

#include "op-impl.h"

#define R DL_MAX_RANK

static inline void copy_elem(dl_tensor *dst, int64_t di, const dl_tensor *src, int64_t si) {
    size_t es = dl_dtype_size(src->dtype);
    memcpy((char *)dst->data + (size_t)di * es, (const char *)src->data + (size_t)si * es, es);
}

/* a*b for dims; false on overflow. */
static inline bool mul_dim(int64_t a, int64_t b, int64_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}

/* Reads a small known integer tensor input (rank <= 1). *known = false when the value is not
 * known statically or the input is omitted. */
static inline dl_status const_ints(dl_infer *ic, int i, const char *what, int64_t *vals, int cap, int *n,
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
static inline int64_t input_len(const dl_infer *ic, int i) {
    if (!dl_has_in(ic, i)) return -1;
    const dl_type *t = ic->in[i];
    if (t->rank == 0) return 1;
    if (t->rank == 1 && t->dims[0] >= 0) return t->dims[0];
    return -1;
}

/* Output 0 with a known dtype and an unknown rank. */
static inline dl_status dtype_only(dl_infer *ic, dl_dtype dt) {
    ic->out[0].dtype = dt;
    return DL_OK;
}

/* When input i is Shape(v) (all of it: no start/end) of a value of known rank, v's dims, symbols
 * included: what a computed shape holds although its values are not known statically
 * (Expand(dy, Shape(x)), Reshape(t, Shape(x)) in gradients). */
static inline bool shape_of_input(const dl_infer *ic, int i, int64_t *dims, int *n) {
    const dl_value *s = ic->node && i < ic->node->n_in ? ic->node->in[i] : NULL;
    const dl_node *p = s ? s->producer : NULL;
    if (!p || (p->op->domain && p->op->domain[0]) || strcmp(p->op->name, "Shape") != 0 ||
        !p->in[0] || p->in[0]->type.rank < 0 || dl_node_attr(p, "start") || dl_node_attr(p, "end"))
        return false;
    *n = p->in[0]->type.rank;
    memcpy(dims, p->in[0]->type.dims, sizeof(int64_t) * (size_t)*n);
    return true;
}

#endif
