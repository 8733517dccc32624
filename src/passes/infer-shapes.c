/* infer-shapes.c — static shape and dtype inference over the whole graph, in topological order.
 * Dims that cannot be known statically stay symbolic; constants feed value-dependent shapes.
 * The infer_shapes pass re-infers after rewrites without losing what types already knew. */
#include "../ops/op-call.h"
#include "passes-impl.h"

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

/* ---- re-inference for passes: never loses what a type already knew ---- */

bool dl_type_equal(const dl_type *a, const dl_type *b) {
    if (a->dtype != b->dtype || a->rank != b->rank) return false;
    for (int i = 0; i < a->rank; i++)
        if (a->dims[i] != b->dims[i]) return false;
    return true;
}

static bool fresh_sym(int64_t d, int fresh_from) {
    return d < 0 && -d - 1 >= fresh_from;
}

/* Merges a newly inferred type into the value's current one (see dl_node_reinfer). */
static void merge_type(dl_type *old, const dl_type *nw, int fresh_from) {
    dl_type m = *nw;
    if (old->dtype == nw->dtype && old->rank >= 0) {
        if (nw->rank < 0) {
            m = *old;
        } else if (nw->rank == old->rank) {
            for (int i = 0; i < m.rank; i++)
                if (fresh_sym(nw->dims[i], fresh_from)) m.dims[i] = old->dims[i];
        }
    }
    *old = m;
}

dl_status dl_node_reinfer(dl_graph *g, dl_node *n, int fresh_from, bool *changed) {
    enum { SMALL = 16 };
    const dl_type *in_s[SMALL];
    const dl_tensor *val_s[SMALL];
    dl_type out_s[SMALL];
    const dl_type **in = in_s;
    const dl_tensor **val = val_s;
    dl_type *out = out_s;
    if (n->n_in > SMALL || n->n_out > SMALL) {
        int cap = n->n_in > n->n_out ? n->n_in : n->n_out;
        in = dl_calloc((size_t)cap, sizeof *in);
        val = dl_calloc((size_t)cap, sizeof *val);
        out = dl_calloc((size_t)cap, sizeof *out);
    }
    dl_status s = DL_OK;
    if (!in || !val || !out) {
        s = dl_fail(g->ctx, DL_ERR_NOMEM, "out of memory in shape inference");
        goto done;
    }
    for (int i = 0; i < n->n_in; i++) {
        in[i] = n->in[i] ? &n->in[i]->type : NULL;
        val[i] = n->in[i] ? n->in[i]->constant : NULL;
    }
    s = dl_node_infer(g->ctx, g, n, in, val, out);
    for (int i = 0; i < n->n_out && s == DL_OK; i++) {
        dl_value *v = n->out[i];
        if (!v) continue;
        dl_type before = v->type;
        merge_type(&v->type, &out[i], fresh_from);
        if (changed && !dl_type_equal(&before, &v->type)) *changed = true;
    }
done:
    if (in != in_s) {
        dl_free(in);
        dl_free(val);
        dl_free(out);
    }
    return s;
}

void dl_trim_fresh_syms(dl_graph *g, int fresh_from) {
    int keep = fresh_from;
    for (int i = 0; i < g->values.len; i++) {
        const dl_value *v = g->values.items[i];
        for (int d = 0; d < v->type.rank; d++)
            if (v->type.dims[d] < 0 && -v->type.dims[d] > keep) keep = (int)-v->type.dims[d];
    }
    if (keep < g->syms.len) g->syms.len = keep;
}

dl_status dl_pass_infer_shapes(dl_pass_ctx *pc) {
    dl_graph *g = pc->g;
    int fresh_from = g->syms.len;
    for (int k = 0; k < g->nodes.len; k++) {
        bool changed = false;
        DL_TRY(dl_node_reinfer(g, g->nodes.items[k], fresh_from, &changed));
        pc->changes += changed;
    }
    dl_trim_fresh_syms(g, fresh_from);
    return DL_OK;
}
