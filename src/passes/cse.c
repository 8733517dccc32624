/* cse.c — common-subexpression elimination. First identical constants (same dtype, shape and
 * bytes) are merged, then, in topological order, a node with the same op, opset, inputs (the
 * same values) and attributes (all kinds, tensors byte-wise) as an earlier node is replaced by
 * that node. Random ops are never merged. Both use hash tables keyed on content; large tensors
 * are hashed on a sample of their bytes and compared in full on a hash match, so ResNet-sized
 * weights cost no full pass over their data. */
#include "passes-impl.h"
#include "../ir/rewrite.h"

typedef struct table {
    void **slot;
    uint64_t *hash;
    int cap;
} table;

static dl_status table_init(dl_graph *g, table *t, int n) {
    t->cap = 64;
    while (t->cap < 2 * n) t->cap *= 2;
    t->slot = dl_calloc((size_t)t->cap, sizeof *t->slot);
    t->hash = dl_calloc((size_t)t->cap, sizeof *t->hash);
    if (!t->slot || !t->hash) return dl_fail(g->ctx, DL_ERR_NOMEM, "out of memory in cse");
    return DL_OK;
}

static void table_free(table *t) {
    dl_free(t->slot);
    dl_free(t->hash);
}

/* Finds an entry equal to item (by eq) or inserts item; returns the entry found or NULL. The
 * table holds at most cap / 2 items, so probing always ends. */
static void *table_find_or_add(table *t, void *item, uint64_t h,
                               bool (*eq)(const void *, const void *)) {
    int j = (int)(h & (uint64_t)(t->cap - 1));
    for (; t->slot[j]; j = (j + 1) & (t->cap - 1))
        if (t->hash[j] == h && eq(t->slot[j], item)) return t->slot[j];
    t->slot[j] = item;
    t->hash[j] = h;
    return NULL;
}

/* ---- tensors ---- */

#define SAMPLE 256 /* bytes hashed at each of the start, middle and end of large data */

static uint64_t tensor_hash(const dl_tensor *t, uint64_t h) {
    h = dl_hash_bytes(&t->dtype, sizeof t->dtype, h);
    h = dl_hash_bytes(t->dims, sizeof(int64_t) * (size_t)t->rank, h ^ (uint64_t)t->rank);
    const unsigned char *p = t->data;
    if (t->nbytes <= 3 * SAMPLE) return dl_hash_bytes(p, t->nbytes, h);
    h = dl_hash_bytes(p, SAMPLE, h);
    h = dl_hash_bytes(p + t->nbytes / 2, SAMPLE, h);
    return dl_hash_bytes(p + t->nbytes - SAMPLE, SAMPLE, h);
}

static bool tensor_eq(const dl_tensor *a, const dl_tensor *b) {
    if (a == b) return true;
    if (!a || !b || a->dtype != b->dtype || a->rank != b->rank || a->nbytes != b->nbytes)
        return false;
    if (memcmp(a->dims, b->dims, sizeof(int64_t) * (size_t)a->rank) != 0) return false;
    return a->nbytes == 0 || memcmp(a->data, b->data, a->nbytes) == 0;
}

static bool value_const_eq(const void *a, const void *b) {
    return tensor_eq(((const dl_value *)a)->constant, ((const dl_value *)b)->constant);
}

/* ---- attributes ---- */

static uint64_t attr_hash(const dl_attr *a) {
    uint64_t h = dl_hash_bytes(a->name, strlen(a->name), (uint64_t)a->type);
    switch (a->type) {
    case DL_ATTR_INT: return dl_hash_bytes(&a->i, sizeof a->i, h);
    case DL_ATTR_FLOAT: return dl_hash_bytes(&a->f, sizeof a->f, h);
    case DL_ATTR_STRING: return dl_hash_bytes(a->s, a->s_len, h);
    case DL_ATTR_TENSOR: return a->t ? tensor_hash(a->t, h) : h;
    case DL_ATTR_INTS: return dl_hash_bytes(a->ints, sizeof(int64_t) * (size_t)a->n, h);
    case DL_ATTR_FLOATS: return dl_hash_bytes(a->floats, sizeof(float) * (size_t)a->n, h);
    default: return dl_hash_bytes(&a->n, sizeof a->n, h);
    }
}

static bool attr_eq(const dl_attr *a, const dl_attr *b) {
    if (a->type != b->type || strcmp(a->name, b->name) != 0) return false;
    switch (a->type) {
    case DL_ATTR_INT: return a->i == b->i;
    case DL_ATTR_FLOAT: return memcmp(&a->f, &b->f, sizeof a->f) == 0;
    case DL_ATTR_STRING: return a->s_len == b->s_len && memcmp(a->s, b->s, a->s_len) == 0;
    case DL_ATTR_TENSOR: return tensor_eq(a->t, b->t);
    case DL_ATTR_INTS:
        return a->n == b->n && (a->n == 0 || memcmp(a->ints, b->ints, sizeof(int64_t) * (size_t)a->n) == 0);
    case DL_ATTR_FLOATS:
        return a->n == b->n && (a->n == 0 || memcmp(a->floats, b->floats, sizeof(float) * (size_t)a->n) == 0);
    case DL_ATTR_STRINGS:
        if (a->n != b->n) return false;
        for (int i = 0; i < a->n; i++)
            if (strcmp(a->strings[i], b->strings[i]) != 0) return false;
        return true;
    case DL_ATTR_TENSORS:
        if (a->n != b->n) return false;
        for (int i = 0; i < a->n; i++)
            if (!tensor_eq(a->tensors[i], b->tensors[i])) return false;
        return true;
    default: return false; /* graphs: never equal */
    }
}

/* ---- nodes ---- */

static uint64_t node_hash(const dl_node *n) {
    uint64_t h = dl_hash_bytes(&n->op, sizeof n->op, (uint64_t)n->opset);
    int sig[2] = {n->n_in, n->n_out};
    h = dl_hash_bytes(sig, sizeof sig, h);
    for (int i = 0; i < n->n_in; i++) {
        int id = n->in[i] ? n->in[i]->id : -1;
        h = dl_hash_bytes(&id, sizeof id, h);
    }
    uint64_t ah = 0; /* attribute order does not matter */
    for (int i = 0; i < n->n_attrs; i++) ah += attr_hash(&n->attrs[i]);
    return h ^ ah;
}

static bool node_eq(const void *pa, const void *pb) {
    const dl_node *a = pa, *b = pb;
    if (a->op != b->op || a->opset != b->opset || a->n_in != b->n_in || a->n_out != b->n_out ||
        a->n_attrs != b->n_attrs)
        return false;
    for (int i = 0; i < a->n_in; i++)
        if (a->in[i] != b->in[i]) return false;
    for (int i = 0; i < a->n_attrs; i++) {
        const dl_attr *other = dl_node_attr(b, a->attrs[i].name);
        if (!other || !attr_eq(&a->attrs[i], other)) return false;
    }
    return true;
}

/* Every used output of dup has a counterpart in keep that can take over its uses. */
static bool can_merge(const dl_rewriter *rw, const dl_node *keep, const dl_node *dup) {
    for (int i = 0; i < dup->n_out; i++) {
        dl_value *o = dup->out[i];
        if (!o || (!o->is_output && !dl_rw_uses(rw, o))) continue;
        if (!keep->out[i] || !dl_rw_can_replace(o, keep->out[i])) return false;
    }
    return true;
}

/* ---- the two kinds of duplicates, and the one loop that finds them ---- */

typedef struct dup_kind {
    bool (*eligible)(const dl_rewriter *rw, const void *item);
    uint64_t (*hash)(const void *item);
    bool (*eq)(const void *a, const void *b);
    /* makes dup's users use keep; *done when it did */
    dl_status (*merge)(dl_rewriter *rw, void *keep, void *dup, bool *done);
} dup_kind;

static bool const_eligible(const dl_rewriter *rw, const void *item) {
    const dl_value *v = item;
    return v->constant && (v->is_output || dl_rw_uses(rw, v));
}

static uint64_t const_hash(const void *item) {
    return tensor_hash(((const dl_value *)item)->constant, 0);
}

static dl_status const_merge(dl_rewriter *rw, void *keep, void *dup, bool *done) {
    return dl_rw_replace(rw, dup, keep, done);
}

static bool node_eligible(const dl_rewriter *rw, const void *item) {
    DL_UNUSED(rw);
    const dl_node *n = item;
    return !n->dead && !dl_op_is_random(n->op);
}

static uint64_t node_hash_of(const void *item) {
    return node_hash(item);
}

static dl_status node_merge(dl_rewriter *rw, void *keep_p, void *dup_p, bool *done) {
    dl_node *keep = keep_p, *dup = dup_p;
    *done = false;
    if (!can_merge(rw, keep, dup)) return DL_OK;
    for (int i = 0; i < dup->n_out; i++) {
        dl_value *o = dup->out[i];
        bool replaced;
        if (o && keep->out[i] && (o->is_output || dl_rw_uses(rw, o)))
            DL_TRY(dl_rw_replace(rw, o, keep->out[i], &replaced));
    }
    dl_rw_kill(rw, dup);
    *done = true;
    return DL_OK;
}

static const dup_kind const_dups = {const_eligible, const_hash, value_const_eq, const_merge};
static const dup_kind node_dups = {node_eligible, node_hash_of, node_eq, node_merge};

/* Items in order; each one equal to an earlier one is merged into it. */
static dl_status merge_dups(dl_pass_ctx *pc, dl_rewriter *rw, const dl_ptrvec *items,
                            const dup_kind *k) {
    table t;
    dl_status s = table_init(pc->g, &t, items->len);
    for (int i = 0; i < items->len && s == DL_OK; i++) {
        void *item = items->items[i];
        if (!k->eligible(rw, item)) continue;
        void *first = table_find_or_add(&t, item, k->hash(item), k->eq);
        bool done = false;
        if (first) s = k->merge(rw, first, item, &done);
        pc->changes += done;
    }
    table_free(&t);
    return s;
}

dl_status dl_pass_cse(dl_pass_ctx *pc) {
    dl_rewriter rw;
    DL_TRY(dl_rw_begin(&rw, pc->g));
    dl_status s = merge_dups(pc, &rw, &pc->g->values, &const_dups);
    if (s == DL_OK) s = merge_dups(pc, &rw, &pc->g->nodes, &node_dups);
    return dl_rw_end(&rw, s);
}
