/* rewrite.c — graph-rewrite primitives (use lists, replace-all-uses with stable output names,
 * node removal, constants), value-list compaction and graph cloning. See rewrite.h. */
#include "rewrite.h"
#include "../ops/op-call.h"

#include <stdlib.h>

/* ---- bookkeeping ---- */

static dl_status nomem(dl_graph *g) {
    return dl_fail(g->ctx, DL_ERR_NOMEM, "out of memory rewriting the graph");
}

/* Grows the per-value arrays to cover value ids below n. */
static dl_status ensure_values(dl_rewriter *rw, int n) {
    if (n <= rw->cap) return DL_OK;
    int cap = rw->cap * 2 > n ? rw->cap * 2 : n + 64;
    int *uses = dl_realloc(rw->uses, sizeof *uses * (size_t)cap);
    if (!uses) return nomem(rw->g);
    rw->uses = uses;
    int *head = dl_realloc(rw->head, sizeof *head * (size_t)cap);
    if (!head) return nomem(rw->g);
    rw->head = head;
    for (int i = rw->cap; i < cap; i++) {
        rw->uses[i] = 0;
        rw->head[i] = -1;
    }
    rw->cap = cap;
    return DL_OK;
}

static dl_status add_use(dl_rewriter *rw, dl_value *v, dl_node *n, int slot) {
    DL_TRY(ensure_values(rw, v->id + 1));
    if (rw->pool_len == rw->pool_cap) {
        int cap = rw->pool_cap ? rw->pool_cap * 2 : 256;
        dl_use *p = dl_realloc(rw->pool, sizeof *p * (size_t)cap);
        if (!p) return nomem(rw->g);
        rw->pool = p;
        rw->pool_cap = cap;
    }
    rw->pool[rw->pool_len] = (dl_use){.node = n, .slot = slot, .next = rw->head[v->id]};
    rw->head[v->id] = rw->pool_len++;
    rw->uses[v->id]++;
    return DL_OK;
}

static bool use_live(const dl_use *u, const dl_value *v) {
    return !u->node->dead && u->slot < u->node->n_in && u->node->in[u->slot] == v;
}

dl_status dl_rw_begin(dl_rewriter *rw, dl_graph *g) {
    *rw = (dl_rewriter){.g = g};
    dl_status s = ensure_values(rw, g->values.len + 64);
    for (int k = 0; k < g->nodes.len && s == DL_OK; k++) {
        dl_node *n = g->nodes.items[k];
        n->dead = false;
        for (int i = 0; i < n->n_in && s == DL_OK; i++)
            if (n->in[i]) s = add_use(rw, n->in[i], n, i);
    }
    if (s != DL_OK) return dl_rw_end(rw, s);
    return DL_OK;
}

dl_status dl_rw_end(dl_rewriter *rw, dl_status s) {
    dl_graph *g = rw->g;
    int kept = 0;
    for (int k = 0; k < g->nodes.len; k++) {
        dl_node *n = g->nodes.items[k];
        if (!n->dead) {
            n->id = kept;
            g->nodes.items[kept++] = n;
            continue;
        }
        for (int i = 0; i < n->n_out; i++)
            if (n->out[i] && n->out[i]->producer == n) n->out[i]->producer = NULL;
    }
    g->nodes.len = kept;
    if (s == DL_OK && rw->added) s = dl_graph_toposort(g);
    dl_free(rw->uses);
    dl_free(rw->head);
    dl_free(rw->pool);
    *rw = (dl_rewriter){.g = g};
    return s;
}

int dl_rw_uses(const dl_rewriter *rw, const dl_value *v) {
    return v->id < rw->cap ? rw->uses[v->id] : 0;
}

dl_node *dl_rw_single_use(const dl_rewriter *rw, const dl_value *v, int *slot) {
    if (dl_rw_uses(rw, v) != 1) return NULL;
    for (int e = rw->head[v->id]; e >= 0; e = rw->pool[e].next)
        if (use_live(&rw->pool[e], v)) {
            *slot = rw->pool[e].slot;
            return rw->pool[e].node;
        }
    return NULL;
}

/* ---- replacing values ---- */

bool dl_rw_can_replace(const dl_value *old, const dl_value *nw) {
    if (old == nw) return false;
    if (!old->is_output) return true;
    return nw->producer && !nw->is_input && !nw->constant && !nw->is_output;
}

/* Swaps the names of a and b, and their slots in the name index with them, so that lookups by
 * either name keep working without rebuilding the index. */
static void swap_names(dl_graph *g, dl_value *a, dl_value *b) {
    int sa = -1, sb = -1;
    for (int j = 0; j < g->vcap; j++) {
        if (g->vindex[j] == a) sa = j;
        if (g->vindex[j] == b) sb = j;
    }
    DL_ASSERT(sa >= 0 && sb >= 0);
    g->vindex[sa] = b;
    g->vindex[sb] = a;
    const char *t = a->name;
    a->name = b->name;
    b->name = t;
}

dl_status dl_rw_replace(dl_rewriter *rw, dl_value *old, dl_value *nw, bool *done) {
    *done = false;
    if (!dl_rw_can_replace(old, nw)) return DL_OK;
    DL_TRY(ensure_values(rw, (old->id > nw->id ? old->id : nw->id) + 1));
    int e = rw->head[old->id];
    rw->head[old->id] = -1;
    while (e >= 0) { /* by index: add_use may move the pool */
        dl_use u = rw->pool[e];
        e = u.next;
        if (!use_live(&u, old)) continue;
        u.node->in[u.slot] = nw;
        DL_TRY(add_use(rw, nw, u.node, u.slot));
        rw->uses[old->id]--;
    }
    if (old->is_output) {
        swap_names(rw->g, old, nw);
        old->is_output = false;
        nw->is_output = true;
        for (int i = 0; i < rw->g->outputs.len; i++)
            if (rw->g->outputs.items[i] == old) rw->g->outputs.items[i] = nw;
    }
    *done = true;
    return DL_OK;
}

dl_status dl_rw_set_input(dl_rewriter *rw, dl_node *n, int slot, dl_value *v) {
    dl_graph *g = rw->g;
    if (slot < 0 || slot >= n->op->max_in) {
        char d[300];
        return dl_fail(g->ctx, DL_ERR_INTERNAL, "%s: no input slot %d",
                       dl_node_desc(n, d, sizeof d), slot);
    }
    if (slot >= n->n_in) {
        dl_value **in = dl_arena_alloc(&g->arena, sizeof *in * (size_t)(slot + 1));
        if (!in) return nomem(g);
        for (int i = 0; i < n->n_in; i++) in[i] = n->in[i];
        n->in = in;
        n->n_in = slot + 1;
    }
    dl_value *old = n->in[slot];
    if (old == v) return DL_OK;
    if (old && old->id < rw->cap) rw->uses[old->id]--;
    n->in[slot] = v;
    return v ? add_use(rw, v, n, slot) : DL_OK;
}

void dl_rw_kill(dl_rewriter *rw, dl_node *n) {
    if (n->dead) return;
    n->dead = true;
    for (int i = 0; i < n->n_in; i++)
        if (n->in[i] && n->in[i]->id < rw->cap) rw->uses[n->in[i]->id]--;
}

/* ---- constants and new nodes ---- */

static void type_of_tensor(dl_value *v, const dl_tensor *t) {
    v->type.dtype = t->dtype;
    v->type.rank = t->rank;
    for (int i = 0; i < t->rank; i++) v->type.dims[i] = t->dims[i];
}

dl_status dl_rw_make_constant(dl_rewriter *rw, dl_value *v, dl_tensor *t) {
    DL_TRY(dl_graph_own_tensor(rw->g, t));
    v->constant = t;
    type_of_tensor(v, t);
    dl_node *p = v->producer;
    if (!p) return DL_OK;
    p->out[v->producer_slot] = NULL;
    v->producer = NULL;
    v->producer_slot = 0;
    for (int i = 0; i < p->n_out; i++)
        if (p->out[i]) return DL_OK;
    dl_rw_kill(rw, p);
    return DL_OK;
}

dl_status dl_rw_add_constant(dl_rewriter *rw, const char *prefix, dl_tensor *t, dl_value **out) {
    dl_graph *g = rw->g;
    *out = NULL;
    DL_TRY(dl_graph_own_tensor(g, t));
    const char *name = dl_graph_fresh_name(g, prefix);
    if (!name) return nomem(g);
    dl_value *v;
    DL_TRY(dl_graph_add_value(g, name, &v));
    v->constant = t;
    type_of_tensor(v, t);
    DL_TRY(ensure_values(rw, v->id + 1));
    *out = v;
    return DL_OK;
}

dl_status dl_rw_add_node(dl_rewriter *rw, const char *op, int n_in, dl_value *const *in,
                         int n_attrs, const dl_attr *attrs, dl_value **out) {
    return dl_rw_add_node_at(rw, op, rw->g->opset, n_in, in, n_attrs, attrs, out);
}

dl_status dl_rw_add_node_at(dl_rewriter *rw, const char *op, int opset, int n_in,
                            dl_value *const *in, int n_attrs, const dl_attr *attrs,
                            dl_value **out) {
    dl_graph *g = rw->g;
    *out = NULL;
    if (n_in > 8) return dl_fail(g->ctx, DL_ERR_INTERNAL, "dl_rw_add_node: too many inputs");
    const char *name = dl_graph_fresh_name(g, op);
    if (!name) return nomem(g);
    dl_value *v;
    dl_node *n;
    DL_TRY(dl_graph_add_value(g, name, &v));
    DL_TRY(dl_graph_add_node(g, op, NULL, opset, NULL, n_in, in, 1, &v, n_attrs, attrs, &n));
    rw->added = true;
    const dl_type *ty[8];
    const dl_tensor *val[8];
    for (int i = 0; i < n_in; i++) {
        ty[i] = in[i] ? &in[i]->type : NULL;
        val[i] = in[i] ? in[i]->constant : NULL;
        if (in[i]) DL_TRY(add_use(rw, in[i], n, i));
    }
    DL_TRY(ensure_values(rw, v->id + 1));
    DL_TRY(dl_node_infer(g->ctx, g, n, ty, val, &v->type));
    *out = v;
    return DL_OK;
}

dl_status dl_node_set_attr(dl_graph *g, dl_node *n, const dl_attr *a) {
    dl_attr *attrs = dl_arena_alloc(&g->arena, sizeof *attrs * (size_t)(n->n_attrs + 1));
    const char *name = dl_arena_strdup(&g->arena, a->name);
    if (!attrs || !name) return nomem(g);
    int k = n->n_attrs;
    for (int i = 0; i < n->n_attrs; i++) {
        attrs[i] = n->attrs[i];
        if (strcmp(n->attrs[i].name, a->name) == 0) k = i;
    }
    attrs[k] = *a;
    attrs[k].name = name;
    n->attrs = attrs;
    if (k == n->n_attrs) n->n_attrs++;
    return DL_OK;
}

/* ---- dropping values ---- */

static int cmp_ptr(const void *a, const void *b) {
    uintptr_t x = (uintptr_t) * (void *const *)a, y = (uintptr_t) * (void *const *)b;
    return x < y ? -1 : x > y;
}

/* Rebuilds the open-addressing name index over g->values, the way graph.c fills it (hash of the
 * name, linear probing), then checks that every value is found through dl_graph_find_value. */
static dl_status rebuild_index(dl_graph *g) {
    int cap = g->vcap >= 64 ? g->vcap : 64;
    while (cap < g->values.len * 2) cap *= 2;
    dl_value **idx = dl_calloc((size_t)cap, sizeof *idx);
    if (!idx) return nomem(g);
    for (int i = 0; i < g->values.len; i++) {
        dl_value *v = g->values.items[i];
        int j = (int)(dl_hash_bytes(v->name, strlen(v->name), 0) & (uint64_t)(cap - 1));
        while (idx[j]) j = (j + 1) & (cap - 1);
        idx[j] = v;
    }
    dl_free(g->vindex);
    g->vindex = idx;
    g->vcap = cap;
    for (int i = 0; i < g->values.len; i++)
        if (dl_graph_find_value(g, ((dl_value *)g->values.items[i])->name) != g->values.items[i])
            return dl_fail(g->ctx, DL_ERR_INTERNAL, "value name index rebuilt inconsistently");
    return DL_OK;
}

dl_status dl_graph_drop_values(dl_graph *g, const bool *drop) {
    int kept = 0, nfree = 0;
    void **gone = dl_malloc(sizeof *gone * (size_t)(g->values.len + 1));
    if (!gone) return nomem(g);
    for (int i = 0; i < g->values.len; i++) {
        dl_value *v = g->values.items[i];
        if (!drop[i] || v->is_input || v->is_output) {
            v->id = kept;
            g->values.items[kept++] = v;
            continue;
        }
        if (v->constant) gone[nfree++] = v->constant;
        v->constant = NULL;
        v->producer = NULL;
        v->id = -1;
    }
    g->values.len = kept;
    qsort(gone, (size_t)nfree, sizeof *gone, cmp_ptr);
    int tk = 0;
    for (int i = 0; i < g->tensors.len; i++) {
        dl_tensor *t = g->tensors.items[i];
        if (nfree && bsearch(&t, gone, (size_t)nfree, sizeof *gone, cmp_ptr))
            dl_tensor_free(t);
        else
            g->tensors.items[tk++] = t;
    }
    g->tensors.len = tk;
    dl_free(gone);
    return rebuild_index(g);
}

/* ---- cloning ---- */

/* A tensor for the clone: a view of t's data, or a copy. Owned by dst. */
static dl_status clone_tensor(dl_graph *dst, const dl_tensor *t, bool copy, dl_tensor **out) {
    *out = NULL;
    dl_tensor *c;
    if (copy)
        DL_TRY(dl_tensor_clone(dst->ctx, t, &c));
    else
        DL_TRY(dl_tensor_wrap(dst->ctx, t->dtype, t->rank, t->dims, t->data, &c));
    DL_TRY(dl_graph_own_tensor(dst, c));
    *out = c;
    return DL_OK;
}

static void *arena_copy(dl_arena *a, const void *p, size_t n) {
    if (!p) return NULL;
    void *q = dl_arena_alloc(a, n ? n : 1);
    if (q && n) memcpy(q, p, n);
    return q;
}

static dl_status clone_attr(dl_graph *dst, const dl_attr *a, bool copy, dl_attr *c) {
    dl_arena *ar = &dst->arena;
    *c = *a;
    size_t n = a->n > 0 ? (size_t)a->n : 0;
    c->name = dl_arena_strdup(ar, a->name);
    if (!c->name) return nomem(dst);
    if (a->s && !(c->s = arena_copy(ar, a->s, a->s_len + 1))) return nomem(dst);
    if (a->ints && !(c->ints = arena_copy(ar, a->ints, n * sizeof *a->ints))) return nomem(dst);
    if (a->floats && !(c->floats = arena_copy(ar, a->floats, n * sizeof *a->floats)))
        return nomem(dst);
    if (a->t) DL_TRY(clone_tensor(dst, a->t, copy, &c->t));
    if (a->strings) {
        const char **s = dl_arena_alloc(ar, sizeof *s * (n ? n : 1));
        if (!s) return nomem(dst);
        for (size_t i = 0; i < n; i++)
            if (a->strings[i] && !(s[i] = dl_arena_strdup(ar, a->strings[i]))) return nomem(dst);
        c->strings = s;
    }
    if (a->tensors) {
        dl_tensor **t = dl_arena_alloc(ar, sizeof *t * (n ? n : 1));
        if (!t) return nomem(dst);
        for (size_t i = 0; i < n; i++)
            if (a->tensors[i]) DL_TRY(clone_tensor(dst, a->tensors[i], copy, &t[i]));
        c->tensors = t;
    }
    return DL_OK;
}

static dl_status clone_node(dl_graph *dst, const dl_node *n, bool copy) {
    dl_arena *ar = &dst->arena;
    dl_node *c = dl_arena_alloc(ar, sizeof *c);
    if (!c) return nomem(dst);
    *c = *n;
    c->dead = false;
    c->name = dl_arena_strdup(ar, n->name ? n->name : "");
    c->in = dl_arena_alloc(ar, sizeof *c->in * (size_t)(n->n_in ? n->n_in : 1));
    c->out = dl_arena_alloc(ar, sizeof *c->out * (size_t)(n->n_out ? n->n_out : 1));
    c->attrs = dl_arena_alloc(ar, sizeof *c->attrs * (size_t)(n->n_attrs ? n->n_attrs : 1));
    if (!c->name || !c->in || !c->out || !c->attrs) return nomem(dst);
    for (int i = 0; i < n->n_in; i++) c->in[i] = n->in[i] ? dst->values.items[n->in[i]->id] : NULL;
    for (int i = 0; i < n->n_out; i++) {
        c->out[i] = n->out[i] ? dst->values.items[n->out[i]->id] : NULL;
        if (c->out[i]) c->out[i]->producer = c;
    }
    for (int i = 0; i < n->n_attrs; i++) DL_TRY(clone_attr(dst, &n->attrs[i], copy, &c->attrs[i]));
    c->id = dst->nodes.len;
    return dl_ptrvec_push(&dst->nodes, c) == DL_OK ? DL_OK : nomem(dst);
}

static dl_status clone_into(dl_graph *src, bool copy, dl_graph *dst) {
    dl_arena *ar = &dst->arena;
    dst->name = src->name ? dl_arena_strdup(ar, src->name) : NULL;
    dst->source_path = src->source_path ? dl_arena_strdup(ar, src->source_path) : NULL;
    if ((src->name && !dst->name) || (src->source_path && !dst->source_path)) return nomem(dst);
    dst->ir_version = src->ir_version;
    dst->opset = src->opset;
    dst->status = src->status;
    for (int i = 0; i < src->syms.len; i++) {
        char *s = dl_arena_strdup(ar, src->syms.items[i]);
        if (!s || dl_ptrvec_push(&dst->syms, s) != DL_OK) return nomem(dst);
    }
    for (int i = 0; i < src->values.len; i++) {
        const dl_value *v = src->values.items[i];
        dl_value *c;
        DL_TRY(dl_graph_add_value(dst, v->name, &c));
        c->type = v->type;
        c->producer_slot = v->producer_slot;
        c->is_input = v->is_input;
        c->is_output = v->is_output;
        c->is_initializer = v->is_initializer;
        if (v->constant) DL_TRY(clone_tensor(dst, v->constant, copy, &c->constant));
    }
    for (int i = 0; i < src->inputs.len; i++)
        if (dl_ptrvec_push(&dst->inputs, dst->values.items[((dl_value *)src->inputs.items[i])->id]))
            return nomem(dst);
    for (int i = 0; i < src->outputs.len; i++)
        if (dl_ptrvec_push(&dst->outputs,
                           dst->values.items[((dl_value *)src->outputs.items[i])->id]))
            return nomem(dst);
    for (int k = 0; k < src->nodes.len; k++) DL_TRY(clone_node(dst, src->nodes.items[k], copy));
    dst->name_counter = src->name_counter; /* after add_value: fresh names continue src's */
    return DL_OK;
}

dl_status dl_graph_clone(dl_graph *src, bool copy_data, dl_graph **out) {
    *out = NULL;
    dl_graph *dst = dl_graph_new(src->ctx);
    if (!dst) return DL_ERR_NOMEM;
    dl_status s = clone_into(src, copy_data, dst);
    if (s != DL_OK) {
        dl_graph_free(dst);
        return s;
    }
    *out = dst;
    return DL_OK;
}
