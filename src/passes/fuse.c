/* fuse.c — fusion grouping, the last pass of the inference pipeline. Greedy over the nodes in
 * topological order:
 *  - a Conv / Gemm / MatMul absorbs the chain that follows it when each link is its only
 *    consumer: a constant per-channel (per-column) bias Add, then a same-shape residual Add, then
 *    one activation — the runtime GEMM applies these while the output tile is in cache;
 *  - an elementwise node joins the group of its producer when that producer's result feeds
 *    only this node and is not a graph output, so chains become one loop nest;
 *  - every other node is a group of its own.
 * Values inside a group are never materialized. */
#include "fuse.h"
#include "../codegen/codegen-impl.h"

typedef struct fuser {
    dl_graph *g;
    dl_fusion *f;
    int *uses;        /* by value id: number of node-input references */
    dl_node **first_consumer; /* by value id */
    int *group_of;    /* by node position: group index or -1 */
    int *last_pos;    /* by group: position of its last node */
    int cap;
} fuser;

static const char *const activations[] = {"Relu", "Clip", "LeakyRelu", "Sigmoid", "Tanh",
                                          "HardSigmoid", "HardSwish", NULL};

static bool is_activation(const dl_node *n) {
    for (int i = 0; activations[i]; i++)
        if (dl_node_is(n, activations[i])) {
            if (!n->out[0] || n->out[0]->type.dtype != DL_F32) return false;
            /* Clip bounds must be known when the kernel is generated. */
            for (int k = 1; k < n->n_in; k++)
                if (n->in[k] && (!n->in[k]->constant || n->in[k]->constant->numel != 1 ||
                                 n->in[k]->constant->dtype != DL_F32))
                    return false;
            return true;
        }
    return false;
}

static bool same_type(const dl_type *a, const dl_type *b) {
    if (a->dtype != b->dtype || a->rank != b->rank || a->rank < 0) return false;
    for (int d = 0; d < a->rank; d++)
        if (a->dims[d] != b->dims[d]) return false;
    return true;
}

/* A constant that broadcasts as one value per output channel (dim 1 of a conv output) or per
 * column (last dim of a gemm output). */
static bool is_bias(const dl_value *b, const dl_value *y, bool conv) {
    if (!b->constant || b->type.dtype != DL_F32 || b->type.rank > y->type.rank) return false;
    int yr = y->type.rank, br = b->type.rank;
    int ch = conv ? 1 : yr - 1;
    int64_t nch = y->type.dims[ch];
    if (nch < 0) return false;
    bool has_ch = false;
    for (int d = 0; d < br; d++) {
        int yd = yr - br + d;
        int64_t bd = b->type.dims[d];
        if (yd == ch && bd == nch)
            has_ch = true;
        else if (bd != 1)
            return false;
    }
    return has_ch || nch == 1;
}

static dl_value *other_input(const dl_node *n, const dl_value *v) {
    if (n->n_in != 2 || !n->in[0] || !n->in[1]) return NULL;
    if (n->in[0] == v && n->in[1] != v) return n->in[1];
    if (n->in[1] == v && n->in[0] != v) return n->in[0];
    return NULL;
}

static dl_group *new_group(fuser *fu, dl_gkind kind, int pos) {
    dl_fusion *f = fu->f;
    if (f->n == fu->cap) {
        int cap = fu->cap ? fu->cap * 2 : 64;
        dl_group *ng = dl_arena_alloc(&f->arena, sizeof(dl_group) * (size_t)cap);
        int *nl = dl_arena_alloc(&f->arena, sizeof(int) * (size_t)cap);
        if (!ng || !nl) return NULL;
        if (f->n) {
            memcpy(ng, f->groups, sizeof(dl_group) * (size_t)f->n);
            memcpy(nl, fu->last_pos, sizeof(int) * (size_t)f->n);
        }
        f->groups = ng;
        fu->last_pos = nl;
        fu->cap = cap;
    }
    dl_group *gr = &f->groups[f->n];
    memset(gr, 0, sizeof *gr);
    gr->kind = kind;
    fu->last_pos[f->n] = pos;
    f->n++;
    return gr;
}

/* Appends node (at position pos) to group gi; its first output becomes the group's result. */
static dl_status add_node(fuser *fu, int gi, dl_node *n, int pos, bool result_is_all_outputs) {
    dl_group *gr = &fu->f->groups[gi];
    dl_node **nodes = dl_arena_alloc(&fu->f->arena, sizeof(dl_node *) * (size_t)(gr->n_nodes + 1));
    if (!nodes) return dl_fail(fu->g->ctx, DL_ERR_NOMEM, "out of memory in fusion");
    if (gr->n_nodes) memcpy(nodes, gr->nodes, sizeof(dl_node *) * (size_t)gr->n_nodes);
    nodes[gr->n_nodes++] = n;
    gr->nodes = nodes;
    int n_out = 0;
    for (int i = 0; i < n->n_out; i++)
        if (n->out[i] && (result_is_all_outputs || i == 0)) n_out++;
    gr->out = dl_arena_alloc(&fu->f->arena, sizeof(dl_value *) * (size_t)(n_out ? n_out : 1));
    if (!gr->out) return dl_fail(fu->g->ctx, DL_ERR_NOMEM, "out of memory in fusion");
    gr->n_out = 0;
    for (int i = 0; i < n->n_out; i++)
        if (n->out[i] && (result_is_all_outputs || i == 0)) gr->out[gr->n_out++] = n->out[i];
    fu->group_of[pos] = gi;
    if (pos > fu->last_pos[gi]) fu->last_pos[gi] = pos;
    return DL_OK;
}

/* The single consumer of v when v feeds exactly one node input and is not a graph output. */
static dl_node *sole_consumer(fuser *fu, const dl_value *v) {
    if (v->is_output || fu->uses[v->id] != 1) return NULL;
    return fu->first_consumer[v->id];
}

static dl_status absorb_epilogue(fuser *fu, int gi) {
    dl_group *gr = &fu->f->groups[gi];
    bool conv = gr->kind == DL_G_CONV;
    const dl_node *anchor = gr->nodes[0];
    /* Conv and Gemm may carry their own bias input (MatMul has none) */
    bool has_bias = gr->kind != DL_G_MATMUL && anchor->n_in > 2 && anchor->in[2];
    dl_value *cur = anchor->out[0];
    for (;;) {
        dl_node *c = sole_consumer(fu, cur);
        if (!c || fu->group_of[c->id] >= 0) break;
        if (dl_node_is(c, "Add") && !gr->epi.act) {
            dl_value *o = other_input(c, cur);
            if (!o || !same_type(&c->out[0]->type, &cur->type)) break;
            if (!has_bias && !gr->epi.residual && is_bias(o, cur, conv)) {
                gr->epi.bias = o;
                has_bias = true;
            } else if (!gr->epi.residual && same_type(&o->type, &cur->type)) {
                gr->epi.residual = o;
            } else {
                break;
            }
        } else if (is_activation(c) && !gr->epi.act) {
            gr->epi.act = c;
        } else {
            break;
        }
        DL_TRY(add_node(fu, gi, c, c->id, false));
        gr = &fu->f->groups[gi];
        cur = c->out[0];
        if (gr->epi.act) break;
    }
    return DL_OK;
}

/* An elementwise node joins the open elementwise group of one of its producers. */
static int joinable_group(fuser *fu, const dl_node *n) {
    for (int i = 0; i < n->n_in; i++) {
        dl_value *v = n->in[i];
        if (!v || !v->producer || sole_consumer(fu, v) != n) continue;
        int gi = fu->group_of[v->producer->id];
        if (gi < 0) continue;
        dl_group *gr = &fu->f->groups[gi];
        if (gr->kind == DL_G_EW && gr->n_out == 1 && gr->out[0] == v &&
            gr->n_nodes < 64)
            return gi;
    }
    return -1;
}

/* Insertion sort of group indices by their last node: groups come out nearly sorted. */
static void sort_by_last(int *idx, int n, const int *last) {
    for (int i = 1; i < n; i++) {
        int v = idx[i], j = i;
        for (; j > 0 && last[idx[j - 1]] > last[v]; j--) idx[j] = idx[j - 1];
        idx[j] = v;
    }
}

void dl_fusion_free(dl_fusion *f) {
    if (!f) return;
    dl_arena_free(&f->arena);
    dl_free(f);
}

/* Fills gr->in: the values the group's nodes read that no earlier node of the group computes. */
static dl_status set_inputs(dl_arena *arena, dl_group *gr) {
    int cap = 0;
    for (int k = 0; k < gr->n_nodes; k++) cap += gr->nodes[k]->n_in;
    gr->n_in = 0;
    gr->in = dl_arena_alloc(arena, sizeof(dl_value *) * (size_t)(cap + 1));
    if (!gr->in) return DL_ERR_NOMEM;
    for (int k = 0; k < gr->n_nodes; k++) {
        const dl_node *nd = gr->nodes[k];
        for (int i = 0; i < nd->n_in; i++) {
            dl_value *v = nd->in[i];
            bool skip = !v;
            for (int j = 0; j < k && !skip; j++)
                for (int o = 0; o < gr->nodes[j]->n_out && !skip; o++) skip = gr->nodes[j]->out[o] == v;
            for (int j = 0; j < gr->n_in && !skip; j++) skip = gr->in[j] == v;
            if (!skip) gr->in[gr->n_in++] = v;
        }
    }
    return DL_OK;
}

dl_status dl_fusion_split(dl_ctx *ctx, dl_fusion *f, int gi) {
    dl_group old = f->groups[gi];
    int n = f->n + old.n_nodes - 1;
    dl_group *ng = dl_arena_alloc(&f->arena, sizeof(dl_group) * (size_t)n);
    if (!ng) return dl_fail(ctx, DL_ERR_NOMEM, "out of memory splitting a group");
    memcpy(ng, f->groups, sizeof(dl_group) * (size_t)gi);
    for (int k = 0; k < old.n_nodes; k++) {
        dl_group *gr = &ng[gi + k];
        dl_node *nd = old.nodes[k];
        memset(gr, 0, sizeof *gr);
        gr->kind = DL_G_FALLBACK;
        gr->n_nodes = 1;
        gr->nodes = dl_arena_alloc(&f->arena, sizeof(dl_node *));
        gr->out = dl_arena_alloc(&f->arena, sizeof(dl_value *) * (size_t)(nd->n_out + 1));
        if (!gr->nodes || !gr->out) return dl_fail(ctx, DL_ERR_NOMEM, "out of memory splitting a group");
        gr->nodes[0] = nd;
        for (int i = 0; i < nd->n_out; i++)
            if (nd->out[i]) gr->out[gr->n_out++] = nd->out[i];
        if (set_inputs(&f->arena, gr) != DL_OK)
            return dl_fail(ctx, DL_ERR_NOMEM, "out of memory splitting a group");
    }
    memcpy(ng + gi + old.n_nodes, f->groups + gi + 1, sizeof(dl_group) * (size_t)(f->n - gi - 1));
    f->groups = ng;
    f->n = n;
    return DL_OK;
}

dl_status dl_pass_fuse(dl_pass_ctx *pc) {
    dl_graph *g = pc->g;
    dl_ctx *ctx = g->ctx;
    if (pc->fusion) {
        dl_fusion_free(pc->fusion);
        pc->fusion = NULL;
    }
    int nn = g->nodes.len, nv = g->values.len;
    fuser fu = {.g = g};
    fu.f = dl_calloc(1, sizeof(dl_fusion));
    fu.uses = dl_calloc((size_t)nv + 1, sizeof(int));
    fu.first_consumer = dl_calloc((size_t)nv + 1, sizeof(dl_node *));
    fu.group_of = dl_malloc(sizeof(int) * ((size_t)nn + 1));
    int *order = NULL;
    dl_status s = DL_OK;
    if (!fu.f || !fu.uses || !fu.first_consumer || !fu.group_of) {
        s = dl_fail(ctx, DL_ERR_NOMEM, "out of memory in fusion");
        goto done;
    }
    for (int k = 0; k < nn; k++) {
        dl_node *n = g->nodes.items[k];
        n->id = k;
        fu.group_of[k] = -1;
        for (int i = 0; i < n->n_in; i++) {
            dl_value *v = n->in[i];
            if (!v) continue;
            if (!fu.uses[v->id]++) fu.first_consumer[v->id] = n;
        }
    }
    for (int k = 0; k < nn && s == DL_OK; k++) {
        dl_node *n = g->nodes.items[k];
        if (fu.group_of[k] >= 0) continue;
        dl_gkind kind = dl_node_kernel_kind(n);
        int gi = kind == DL_G_EW ? joinable_group(&fu, n) : -1;
        if (gi < 0) {
            if (!new_group(&fu, kind, k)) {
                s = dl_fail(ctx, DL_ERR_NOMEM, "out of memory in fusion");
                break;
            }
            gi = fu.f->n - 1;
        }
        bool all_outs = kind == DL_G_FALLBACK || kind == DL_G_LAYERNORM;
        if ((s = add_node(&fu, gi, n, k, all_outs)) != DL_OK) break;
        if (kind == DL_G_CONV || kind == DL_G_GEMM || kind == DL_G_MATMUL)
            s = absorb_epilogue(&fu, gi);
    }
    if (s != DL_OK) goto done;
    /* Run groups in the order of their last nodes. */
    int ng = fu.f->n;
    order = dl_malloc(sizeof(int) * ((size_t)ng + 1));
    dl_group *sorted = dl_arena_alloc(&fu.f->arena, sizeof(dl_group) * ((size_t)ng + 1));
    if (!order || !sorted) {
        s = dl_fail(ctx, DL_ERR_NOMEM, "out of memory in fusion");
        goto done;
    }
    for (int i = 0; i < ng; i++) order[i] = i;
    sort_by_last(order, ng, fu.last_pos);
    for (int i = 0; i < ng; i++) {
        sorted[i] = fu.f->groups[order[i]];
        if (set_inputs(&fu.f->arena, &sorted[i]) != DL_OK) {
            s = dl_fail(ctx, DL_ERR_NOMEM, "out of memory in fusion");
            goto done;
        }
    }
    fu.f->groups = sorted;
    pc->fusion = fu.f;
    fu.f = NULL;
done:
    dl_fusion_free(fu.f);
    dl_free(fu.uses);
    dl_free(fu.first_consumer);
    dl_free(fu.group_of);
    dl_free(order);
    return s;
}
