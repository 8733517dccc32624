/* pipeline.c — the named pass lists and the driver that runs them: verifies the graph after each
 * pass and prints it after the passes --dump-ir names. Also the small helpers every pass uses. */
#include "passes-impl.h"
#include "../ops/op-impl.h"

/* Folding first exposes what simplification and CSE can see (shape chains become constants);
 * BatchNorm folding needs constant weights; DCE then drops the dead shape chains and weights.
 * A second round catches what the first round's rewrites made foldable. fuse stays last, after
 * remat and a DCE of the originals it leaves unread: nothing may merge remat's copies back. */
const dl_pass dl_inference_passes[] = {
    {"infer_shapes", dl_pass_infer_shapes},
    {"fold_constants", dl_pass_fold_constants},
    {"simplify", dl_pass_simplify},
    {"fold_batchnorm", dl_pass_fold_batchnorm},
    {"match_layernorm", dl_pass_match_layernorm},
    {"cse", dl_pass_cse},
    {"dce", dl_pass_dce},
    {"fold_constants", dl_pass_fold_constants},
    {"simplify", dl_pass_simplify},
    {"dce", dl_pass_dce},
    {"infer_shapes", dl_pass_infer_shapes},
    {"remat", dl_pass_remat},
    {"dce", dl_pass_dce},
    {"fuse", dl_pass_fuse},
    {NULL, NULL},
};

/* Before autodiff (train-graph.c), with the parameters already graph inputs so nothing folds
 * them away: folding resolves computed shapes (Shape→Gather→Concat→Reshape) to the model's own
 * symbols, so the gradient rules can relate the dims of values that meet in a broadcast. */
const dl_pass dl_training_prep_passes[] = {
    {"infer_shapes", dl_pass_infer_shapes},
    {"fold_constants", dl_pass_fold_constants},
    {"simplify", dl_pass_simplify},
    {"cse", dl_pass_cse},
    {"dce", dl_pass_dce},
    {"infer_shapes", dl_pass_infer_shapes},
    {NULL, NULL},
};

bool dl_node_is(const dl_node *n, const char *name) {
    const char *d = n->op->domain;
    return (!d || !d[0]) && strcmp(n->op->name, name) == 0;
}

dl_status dl_reader_lists(dl_graph *g, int **at_out, int **readers_out) {
    const int nn = g->nodes.len, nv = g->values.len;
    *at_out = *readers_out = NULL;
    /* each value's count at at[v + 2], summed into where v + 1's list starts; placing a reader
     * then moves at[v + 1] on, to v's end at last */
    int *at = dl_calloc((size_t)nv + 2, sizeof(int));
    if (!at) return dl_fail(g->ctx, DL_ERR_NOMEM, "out of memory listing readers");
    for (int k = 0; k < nn; k++) {
        dl_node *n = g->nodes.items[k];
        n->id = k;
        for (int i = 0; i < n->n_in; i++)
            if (n->in[i]) at[n->in[i]->id + 2]++;
    }
    for (int v = 0; v < nv; v++) at[v + 2] += at[v + 1];
    int *readers = dl_malloc(sizeof(int) * ((size_t)at[nv + 1] + 1));
    if (!readers) {
        dl_free(at);
        return dl_fail(g->ctx, DL_ERR_NOMEM, "out of memory listing readers");
    }
    for (int k = 0; k < nn; k++) {
        const dl_node *n = g->nodes.items[k];
        for (int i = 0; i < n->n_in; i++)
            if (n->in[i]) readers[at[n->in[i]->id + 1]++] = k;
    }
    *at_out = at;
    *readers_out = readers;
    return DL_OK;
}

bool dl_op_is_random(const dl_op_def *op) {
    static const char *const random_ops[] = {"RandomNormal",     "RandomUniform", "RandomNormalLike",
                                             "RandomUniformLike", "Bernoulli",     "Multinomial"};
    for (size_t i = 0; i < DL_ARRAY_LEN(random_ops); i++)
        if (strcmp(op->name, random_ops[i]) == 0) return true;
    return false;
}

static bool list_has(const dl_pass *list, const dl_pass *upto, const char *name) {
    for (const dl_pass *p = list; p->name && p != upto; p++)
        if (strcmp(p->name, name) == 0) return true;
    return false;
}

/* "all, infer_shapes, fold_constants, ..." with each name once. */
static void list_names(const dl_pass *list, char *buf, size_t n) {
    size_t used = (size_t)snprintf(buf, n, "all");
    for (const dl_pass *p = list; p->name && used < n; p++)
        if (!list_has(list, p, p->name)) used += (size_t)snprintf(buf + used, n - used, ", %s", p->name);
}

dl_status dl_run_passes(dl_pass_ctx *pc, const dl_pass *list) {
    dl_graph *g = pc->g;
    if (!pc->ctx) pc->ctx = g->ctx;
    const char *dump = pc->dump_ir;
    if (dump && strcmp(dump, "all") != 0 && !list_has(list, NULL, dump)) {
        char names[512];
        list_names(list, names, sizeof names);
        return dl_fail(pc->ctx, DL_ERR_INVALID, "--dump-ir: unknown pass '%s' (valid: %s)", dump,
                       names);
    }
    for (const dl_pass *p = list; p->name; p++) {
        int before = pc->changes;
        dl_status s = p->run(pc);
        if (s == DL_OK) s = dl_graph_verify(g);
        if (s != DL_OK) {
            dl_ctx_prefix(pc->ctx, "pass %s", p->name);
            return s;
        }
        if (dump && (strcmp(dump, "all") == 0 || strcmp(dump, p->name) == 0)) {
            FILE *f = pc->dump_to ? pc->dump_to : stderr;
            fprintf(f, "=== after %s (%d changes)\n", p->name, pc->changes - before);
            DL_TRY(dl_graph_print(g, f, 1));
        }
    }
    return DL_OK;
}
