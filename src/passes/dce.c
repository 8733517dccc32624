/* dce.c — dead code elimination: drops nodes none of whose outputs reaches a graph output, then
 * the values nothing reads any more (unused constants, freeing their data, and the outputs of
 * removed nodes), so later stages see only what the model computes. */
#include "passes-impl.h"
#include "../ir/rewrite.h"

dl_status dl_pass_dce(dl_pass_ctx *pc) {
    dl_graph *g = pc->g;
    bool *live = dl_calloc((size_t)g->values.len + 1, sizeof *live);
    if (!live) return dl_fail(g->ctx, DL_ERR_NOMEM, "out of memory in dce");
    for (int i = 0; i < g->outputs.len; i++) live[((dl_value *)g->outputs.items[i])->id] = true;
    dl_rewriter rw;
    dl_status s = dl_rw_begin(&rw, g);
    if (s != DL_OK) {
        dl_free(live);
        return s;
    }
    for (int k = g->nodes.len - 1; k >= 0; k--) { /* reverse topological order */
        dl_node *n = g->nodes.items[k];
        bool needed = false;
        for (int i = 0; i < n->n_out && !needed; i++) needed = n->out[i] && live[n->out[i]->id];
        if (!needed) {
            dl_rw_kill(&rw, n);
            pc->changes++;
            continue;
        }
        for (int i = 0; i < n->n_in; i++)
            if (n->in[i]) live[n->in[i]->id] = true;
    }
    s = dl_rw_end(&rw, s);
    if (s == DL_OK) {
        /* a value no live node reads and no live node produces is gone for good */
        for (int i = 0; i < g->values.len; i++) {
            const dl_value *v = g->values.items[i];
            live[i] = live[i] || v->producer || v->is_input || v->is_output;
        }
        for (int i = 0; i < g->values.len; i++) live[i] = !live[i]; /* now: drop */
        s = dl_graph_drop_values(g, live);
    }
    dl_free(live);
    return s;
}
