/* infer-shapes.c — static shape and dtype inference over the whole graph, in topological order.
 * Dims that cannot be known statically stay symbolic; constants feed value-dependent shapes. */
#include "../ops/op-call.h"

dl_status dl_graph_infer(dl_graph *g) {
    dl_status s = DL_OK;
    int cap = 0;
    const dl_type **in = NULL;
    const dl_tensor **vals = NULL;
    dl_type *out = NULL;
    for (int k = 0; k < g->nodes.len && s == DL_OK; k++) {
        dl_node *n = g->nodes.items[k];
        int need = n->n_in > n->n_out ? n->n_in : n->n_out;
        if (need > cap) {
            cap = need * 2;
            dl_free(in);
            dl_free(vals);
            dl_free(out);
            in = dl_calloc((size_t)cap, sizeof *in);
            vals = dl_calloc((size_t)cap, sizeof *vals);
            out = dl_calloc((size_t)cap, sizeof *out);
            if (!in || !vals || !out) {
                s = dl_fail(g->ctx, DL_ERR_NOMEM, "out of memory in shape inference");
                break;
            }
        }
        for (int i = 0; i < n->n_in; i++) {
            in[i] = n->in[i] ? &n->in[i]->type : NULL;
            vals[i] = n->in[i] ? n->in[i]->constant : NULL;
        }
        s = dl_node_infer(g->ctx, g, n, in, vals, out);
        for (int i = 0; i < n->n_out && s == DL_OK; i++)
            if (n->out[i]) n->out[i]->type = out[i];
    }
    dl_free(in);
    dl_free(vals);
    dl_free(out);
    return s;
}
