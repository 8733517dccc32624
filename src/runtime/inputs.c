/* inputs.c — matching the tensors a caller gives to a graph's inputs (by name or position),
 * shared by the interpreter and the native executor. */
#include "runtime-impl.h"

dl_status dl_order_inputs(dl_ctx *ctx, dl_graph *g, int n, const char *const *names,
                          dl_tensor *const *inputs, dl_tensor **ordered) {
    if (!names && n != g->inputs.len)
        return dl_fail(ctx, DL_ERR_INVALID, "the model has %d inputs but %d were given",
                       g->inputs.len, n);
    for (int i = 0; i < g->inputs.len; i++) ordered[i] = NULL;
    for (int i = 0; i < n; i++) {
        int pos = i;
        if (names) {
            dl_value *nv = dl_graph_find_value(g, names[i]);
            pos = -1;
            for (int k = 0; nv && nv->is_input && k < g->inputs.len && pos < 0; k++)
                if (g->inputs.items[k] == nv) pos = k;
            if (pos < 0)
                return dl_fail(ctx, DL_ERR_INVALID, "'%s' is not an input of the model", names[i]);
        }
        dl_value *v = g->inputs.items[pos];
        if (!inputs[i]) return dl_fail(ctx, DL_ERR_INVALID, "input '%s' is NULL", v->name);
        ordered[pos] = inputs[i];
    }
    for (int i = 0; i < g->inputs.len; i++) {
        dl_value *v = g->inputs.items[i];
        char t[256], a[256];
        if (!ordered[i])
            return dl_fail(ctx, DL_ERR_INVALID, "input '%s' (%s) was not given", v->name,
                           dl_type_str(g, &v->type, t, sizeof t));
        if (ordered[i]->dtype != v->type.dtype ||
            (v->type.rank >= 0 && ordered[i]->rank != v->type.rank))
            return dl_fail(ctx, DL_ERR_TYPE, "input '%s' is %s but the model expects %s", v->name,
                           dl_tensor_desc(ordered[i], a, sizeof a),
                           dl_type_str(g, &v->type, t, sizeof t));
    }
    return DL_OK;
}
