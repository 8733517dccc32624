/* verify.c — structural checks of the IR: arity within the op row, every input defined before
 * use (topological order), single producers, typed values, outputs that exist. Run after every
 * pass in debug builds and before execution. */
#include "ir-impl.h"
#include "../ops/op-impl.h"

dl_status dl_graph_verify(dl_graph *g) {
    dl_ctx *ctx = g->ctx;
    bool *defined = dl_calloc((size_t)g->values.len + 1, sizeof *defined);
    if (!defined) return dl_fail(ctx, DL_ERR_NOMEM, "out of memory verifying the graph");
    dl_status s = DL_OK;
    char d[300];
    for (int i = 0; i < g->values.len; i++) {
        dl_value *v = g->values.items[i];
        if (v->id != i) {
            s = dl_fail(ctx, DL_ERR_INTERNAL, "value '%s' has id %d at index %d", v->name, v->id, i);
            goto out;
        }
        defined[i] = v->is_input || v->constant;
        if (v->is_input && v->producer) {
            s = dl_fail(ctx, DL_ERR_INTERNAL, "graph input '%s' also has a producer", v->name);
            goto out;
        }
    }
    for (int k = 0; k < g->nodes.len; k++) {
        dl_node *n = g->nodes.items[k];
        if (!n->op || n->n_in < n->op->min_in || n->n_in > n->op->max_in ||
            n->n_out < n->op->min_out || n->n_out > n->op->max_out) {
            s = dl_fail(ctx, DL_ERR_INTERNAL, "%s: arity outside its op row", dl_node_desc(n, d, sizeof d));
            goto out;
        }
        for (int i = 0; i < n->n_in; i++) {
            const dl_value *v = n->in[i];
            if (!v) {
                if (i < n->op->min_in) {
                    s = dl_fail(ctx, DL_ERR_INTERNAL, "%s: required input %d missing",
                                dl_node_desc(n, d, sizeof d), i);
                    goto out;
                }
                continue;
            }
            if (!defined[v->id]) {
                s = dl_fail(ctx, DL_ERR_INTERNAL, "%s: input '%s' is used before it is defined",
                            dl_node_desc(n, d, sizeof d), v->name);
                goto out;
            }
        }
        for (int i = 0; i < n->n_out; i++) {
            dl_value *v = n->out[i];
            if (!v) continue;
            if (v->producer != n || v->producer_slot != i || defined[v->id]) {
                s = dl_fail(ctx, DL_ERR_INTERNAL, "%s: output '%s' has an inconsistent producer",
                            dl_node_desc(n, d, sizeof d), v->name);
                goto out;
            }
            if (v->type.dtype == DL_DTYPE_UNDEFINED) {
                s = dl_fail(ctx, DL_ERR_INTERNAL, "%s: output '%s' has no dtype",
                            dl_node_desc(n, d, sizeof d), v->name);
                goto out;
            }
            defined[v->id] = true;
        }
    }
    if (g->outputs.len == 0) s = dl_fail(ctx, DL_ERR_INVALID, "the graph has no outputs");
    for (int i = 0; i < g->outputs.len && s == DL_OK; i++) {
        dl_value *v = g->outputs.items[i];
        if (!defined[v->id])
            s = dl_fail(ctx, DL_ERR_INTERNAL, "graph output '%s' is never defined", v->name);
    }
out:
    dl_free(defined);
    return s;
}
