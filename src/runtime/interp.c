/* interp.c — the reference interpreter: runs a graph node by node with the op table's reference
 * kernels. It re-runs each row's inference on the concrete input tensors, so every shape check
 * applies at run time too, and frees each intermediate after its last use. It is the oracle for
 * every later backend, so it stays simple. */
#include "runtime-impl.h"

typedef struct interp {
    dl_ctx *ctx;
    dl_graph *g;
    dl_tensor **val;  /* by value id */
    bool *owned;      /* val[i] was produced here and is freed here */
    int *uses_left;   /* consumers still to run */
    int64_t *sym_val; /* bound size of each graph symbol, -1 if unbound */
} interp;

static dl_status bind_dim(interp *it, const dl_value *v, int d, int64_t actual) {
    int64_t want = v->type.dims[d];
    if (want >= 0) {
        if (want != actual) goto mismatch;
        return DL_OK;
    }
    int64_t sym = -want - 1;
    if (sym >= it->g->syms.len) return DL_OK;
    if (it->sym_val[sym] < 0)
        it->sym_val[sym] = actual;
    else if (it->sym_val[sym] != actual)
        goto mismatch;
    return DL_OK;
mismatch:;
    char t[256];
    return dl_fail(it->ctx, DL_ERR_SHAPE,
                   "input '%s': dim %d is %lld but the model expects %s (%s)", v->name, d,
                   (long long)actual, dl_type_str(it->g, &v->type, t, sizeof t),
                   want >= 0 ? "fixed size" : "symbol already bound to another size");
}

static dl_status bind_input(interp *it, const dl_value *v, dl_tensor *t) {
    char want[256], got[256];
    if (t->dtype != v->type.dtype)
        return dl_fail(it->ctx, DL_ERR_TYPE, "input '%s' is %s but the model expects %s", v->name,
                       dl_tensor_desc(t, got, sizeof got),
                       dl_type_str(it->g, &v->type, want, sizeof want));
    if (v->type.rank >= 0 && t->rank != v->type.rank)
        return dl_fail(it->ctx, DL_ERR_SHAPE, "input '%s' is %s but the model expects %s", v->name,
                       dl_tensor_desc(t, got, sizeof got),
                       dl_type_str(it->g, &v->type, want, sizeof want));
    for (int d = 0; v->type.rank >= 0 && d < t->rank; d++) DL_TRY(bind_dim(it, v, d, t->dims[d]));
    it->val[v->id] = t;
    return DL_OK;
}

static dl_status bind_inputs(interp *it, int n, const char *const *names,
                             dl_tensor *const *inputs) {
    dl_graph *g = it->g;
    dl_tensor **ordered = dl_calloc((size_t)g->inputs.len + 1, sizeof *ordered);
    if (!ordered) return dl_fail(it->ctx, DL_ERR_NOMEM, "out of memory binding inputs");
    dl_status s = dl_order_inputs(it->ctx, g, n, names, inputs, ordered);
    for (int i = 0; i < g->inputs.len && s == DL_OK; i++)
        s = bind_input(it, g->inputs.items[i], ordered[i]);
    dl_free(ordered);
    return s;
}

static dl_status run_node(interp *it, dl_node *n, const dl_tensor **in_val, dl_tensor **outs) {
    for (int i = 0; i < n->n_in; i++) in_val[i] = n->in[i] ? it->val[n->in[i]->id] : NULL;
    return dl_run_node_ref(it->ctx, n, in_val, outs);
}

static void release_inputs(interp *it, const dl_node *n) {
    for (int i = 0; i < n->n_in; i++) {
        const dl_value *v = n->in[i];
        if (!v || --it->uses_left[v->id] > 0 || v->is_output || !it->owned[v->id]) continue;
        dl_tensor_free(it->val[v->id]);
        it->val[v->id] = NULL;
        it->owned[v->id] = false;
    }
}

dl_status dl_interp_run(dl_ctx *ctx, dl_graph *g, int n_inputs, const char *const *names,
                        dl_tensor *const *inputs, dl_tensor **outputs) {
    return dl_interp_run_keep(ctx, g, n_inputs, names, inputs, outputs, NULL);
}

dl_status dl_interp_run_keep(dl_ctx *ctx, dl_graph *g, int n_inputs, const char *const *names,
                             dl_tensor *const *inputs, dl_tensor **outputs, dl_tensor **keep) {
    int nv = g->values.len, max_io = 1;
    for (int k = 0; k < g->nodes.len; k++) {
        const dl_node *n = g->nodes.items[k];
        if (n->n_in > max_io) max_io = n->n_in;
        if (n->n_out > max_io) max_io = n->n_out;
    }
    interp it = {.ctx = ctx, .g = g};
    it.val = dl_calloc((size_t)nv, sizeof *it.val);
    it.owned = dl_calloc((size_t)nv, sizeof *it.owned);
    it.uses_left = dl_calloc((size_t)nv, sizeof *it.uses_left);
    it.sym_val = dl_malloc(sizeof(int64_t) * (size_t)(g->syms.len + 1));
    const dl_tensor **in_val = dl_calloc((size_t)max_io, sizeof *in_val);
    dl_tensor **outs = dl_calloc((size_t)max_io, sizeof *outs);
    dl_status s = DL_OK;
    if (!it.val || !it.owned || !it.uses_left || !it.sym_val || !in_val || !outs) {
        s = dl_fail(ctx, DL_ERR_NOMEM, "out of memory starting the interpreter");
        goto done;
    }
    for (int i = 0; i <= g->syms.len; i++) it.sym_val[i] = -1;
    for (int i = 0; i < nv; i++) {
        dl_value *v = g->values.items[i];
        if (v->constant) it.val[i] = v->constant;
    }
    for (int k = 0; k < g->nodes.len; k++) {
        const dl_node *n = g->nodes.items[k];
        for (int i = 0; i < n->n_in; i++)
            if (n->in[i]) it.uses_left[n->in[i]->id]++;
    }
    if ((s = bind_inputs(&it, n_inputs, names, inputs)) != DL_OK) goto done;

    for (int k = 0; k < g->nodes.len && s == DL_OK; k++) {
        dl_node *n = g->nodes.items[k];
        for (int i = 0; i < n->n_out; i++) outs[i] = NULL;
        s = run_node(&it, n, in_val, outs);
        for (int i = 0; i < n->n_out; i++) {
            if (s == DL_OK && n->out[i]) {
                it.val[n->out[i]->id] = outs[i];
                it.owned[n->out[i]->id] = true;
            } else {
                dl_tensor_free(outs[i]); /* omitted optional output, or failure */
            }
        }
        if (s == DL_OK && !keep) release_inputs(&it, n);
    }
    for (int i = 0; i < g->outputs.len && s == DL_OK; i++) outputs[i] = NULL;
    for (int i = 0; i < g->outputs.len && s == DL_OK; i++) {
        dl_value *v = g->outputs.items[i];
        if (it.owned[v->id]) {
            outputs[i] = it.val[v->id];
            it.owned[v->id] = false; /* handed to the caller; a repeated output is cloned below */
            if (keep && !keep[v->id]) s = dl_tensor_clone(ctx, outputs[i], &keep[v->id]);
        } else {
            s = dl_tensor_clone(ctx, it.val[v->id], &outputs[i]);
        }
    }
    if (s != DL_OK)
        for (int i = 0; i < g->outputs.len; i++) {
            dl_tensor_free(outputs[i]);
            outputs[i] = NULL;
        }
    for (int i = 0; keep && it.owned && i < nv; i++)
        if (it.owned[i] && !keep[i]) {
            keep[i] = it.val[i]; /* every intermediate, for dlcc run --check */
            it.owned[i] = false;
        }
done:
    for (int i = 0; it.owned && i < nv; i++)
        if (it.owned[i]) dl_tensor_free(it.val[i]);
    dl_free(it.val);
    dl_free(it.owned);
    dl_free(it.uses_left);
    dl_free(it.sym_val);
    dl_free(in_val);
    dl_free(outs);
    return s;
}
