/* op-call.c — calls a row's infer function for one node; shared by static shape inference and
 * the interpreter so both see exactly the same checks. */
#include "op-call.h"

dl_status dl_node_infer(dl_ctx *ctx, dl_graph *g, const dl_node *n, const dl_type *const *in,
                        const dl_tensor *const *vals, dl_type *out) {
    for (int i = 0; i < n->n_out; i++) {
        out[i].dtype = DL_DTYPE_UNDEFINED;
        out[i].rank = DL_RANK_UNKNOWN;
    }
    dl_infer ic = {.ctx = ctx, .g = g, .node = n, .opset = n->opset, .n_in = n->n_in, .in = in,
                   .value = vals, .n_out = n->n_out, .out = out};
    if (!n->op->infer) {
        char d[300];
        return dl_fail(ctx, DL_ERR_INTERNAL, "%s: op has no inference rule", dl_node_desc(n, d, sizeof d));
    }
    DL_TRY(n->op->infer(&ic));
    for (int i = 0; i < n->n_out; i++) {
        if (!n->out[i]) continue;
        if (out[i].dtype == DL_DTYPE_UNDEFINED) {
            char d[300];
            return dl_fail(ctx, DL_ERR_INTERNAL, "%s: inference left output %d without a dtype",
                           dl_node_desc(n, d, sizeof d), i);
        }
    }
    return DL_OK;
}
