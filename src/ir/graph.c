/* graph.c — the graph container: values (with a name index), nodes, symbols, owned tensors,
 * topological order and attribute lookup. */
#include "ir-impl.h"
#include "../ops/op-impl.h"

dl_status dl_ptrvec_push(dl_ptrvec *v, void *p) {
    if (v->len == v->cap) {
        int cap = v->cap ? v->cap * 2 : 16;
        void **items = dl_realloc(v->items, (size_t)cap * sizeof *items);
        if (!items) return DL_ERR_NOMEM;
        v->items = items;
        v->cap = cap;
    }
    v->items[v->len++] = p;
    return DL_OK;
}

void dl_ptrvec_free(dl_ptrvec *v) {
    dl_free(v->items);
    v->items = NULL;
    v->len = v->cap = 0;
}

dl_graph *dl_graph_new(dl_ctx *ctx) {
    dl_graph *g = dl_calloc(1, sizeof *g);
    if (!g) {
        dl_fail(ctx, DL_ERR_NOMEM, "out of memory creating a graph");
        return NULL;
    }
    g->ctx = ctx;
    g->opset = 17;
    return g;
}

void dl_graph_free(dl_graph *g) {
    if (!g) return;
    for (int i = 0; i < g->tensors.len; i++) dl_tensor_free(g->tensors.items[i]);
    dl_ptrvec_free(&g->values);
    dl_ptrvec_free(&g->nodes);
    dl_ptrvec_free(&g->inputs);
    dl_ptrvec_free(&g->outputs);
    dl_ptrvec_free(&g->tensors);
    dl_ptrvec_free(&g->syms);
    dl_free(g->vindex);
    dl_arena_free(&g->arena);
    dl_free(g);
}

dl_status dl_graph_status(const dl_graph *g) {
    return g ? g->status : DL_ERR_INVALID;
}

/* ---- value name index: open addressing on the name hash ---- */
static uint64_t name_hash(const char *s) {
    return dl_hash_bytes(s, strlen(s), 0);
}

static dl_status vindex_grow(dl_graph *g) {
    int cap = g->vcap ? g->vcap * 2 : 64;
    dl_value **idx = dl_calloc((size_t)cap, sizeof *idx);
    if (!idx) return DL_ERR_NOMEM;
    for (int i = 0; i < g->values.len; i++) {
        dl_value *v = g->values.items[i];
        uint64_t h = name_hash(v->name);
        int j = (int)(h & (uint64_t)(cap - 1));
        while (idx[j]) j = (j + 1) & (cap - 1);
        idx[j] = v;
    }
    dl_free(g->vindex);
    g->vindex = idx;
    g->vcap = cap;
    return DL_OK;
}

dl_value *dl_graph_find_value(dl_graph *g, const char *name) {
    if (!g->vcap) return NULL;
    int j = (int)(name_hash(name) & (uint64_t)(g->vcap - 1));
    while (g->vindex[j]) {
        if (strcmp(g->vindex[j]->name, name) == 0) return g->vindex[j];
        j = (j + 1) & (g->vcap - 1);
    }
    return NULL;
}

dl_status dl_graph_add_value(dl_graph *g, const char *name, dl_value **out) {
    *out = NULL;
    if (dl_graph_find_value(g, name))
        return dl_fail(g->ctx, DL_ERR_PARSE, "value name '%s' is defined twice", name);
    dl_value *v = dl_arena_alloc(&g->arena, sizeof *v);
    const char *nm = v ? dl_arena_strdup(&g->arena, name) : NULL;
    if (!nm) return dl_fail(g->ctx, DL_ERR_NOMEM, "out of memory adding value '%s'", name);
    v->name = nm;
    v->type.rank = DL_RANK_UNKNOWN;
    v->id = g->values.len;
    v->graph = g;
    if (dl_ptrvec_push(&g->values, v) != DL_OK)
        return dl_fail(g->ctx, DL_ERR_NOMEM, "out of memory adding value '%s'", name);
    if (g->values.len * 2 > g->vcap) { /* keep the index at most half full */
        if (vindex_grow(g) != DL_OK)   /* rebuilds from g->values, v included */
            return dl_fail(g->ctx, DL_ERR_NOMEM, "out of memory adding value '%s'", name);
    } else {
        int j = (int)(name_hash(nm) & (uint64_t)(g->vcap - 1));
        while (g->vindex[j]) j = (j + 1) & (g->vcap - 1);
        g->vindex[j] = v;
    }
    *out = v;
    return DL_OK;
}

const char *dl_graph_fresh_name(dl_graph *g, const char *prefix) {
    char buf[256];
    do snprintf(buf, sizeof buf, "%s_%d", prefix, g->name_counter++);
    while (dl_graph_find_value(g, buf));
    return dl_arena_strdup(&g->arena, buf);
}

int64_t dl_graph_new_sym(dl_graph *g, const char *name) {
    char buf[32];
    if (!name) {
        snprintf(buf, sizeof buf, "?%d", g->syms.len);
        name = buf;
    }
    const char *nm = dl_arena_strdup(&g->arena, name);
    if (!nm || dl_ptrvec_push(&g->syms, (void *)nm) != DL_OK) return -1; /* "?" on OOM */
    return -(int64_t)g->syms.len;
}

int64_t dl_graph_sym(dl_graph *g, const char *name) {
    for (int i = 0; i < g->syms.len; i++)
        if (strcmp(g->syms.items[i], name) == 0) return -(int64_t)(i + 1);
    return dl_graph_new_sym(g, name);
}

const char *dl_graph_sym_name(const dl_graph *g, int64_t dim) {
    int64_t i = -dim - 1;
    if (!g || dim >= 0 || i >= g->syms.len) return "?";
    return g->syms.items[i];
}

dl_status dl_graph_own_tensor(dl_graph *g, dl_tensor *t) {
    if (dl_ptrvec_push(&g->tensors, t) != DL_OK) {
        dl_tensor_free(t);
        return dl_fail(g->ctx, DL_ERR_NOMEM, "out of memory");
    }
    return DL_OK;
}

const char *dl_node_desc(const dl_node *n, char *buf, size_t len) {
    snprintf(buf, len, "node '%s' (%s)", n->name ? n->name : "?", n->op ? n->op->name : "?");
    return buf;
}

static const dl_attr_spec *find_spec(const dl_op_def *op, const char *name) {
    for (const dl_attr_spec *s = op->attrs; s && s->name; s++)
        if (strcmp(s->name, name) == 0) return s;
    return NULL;
}

static const char *const attr_type_names[DL_ATTR_TYPE_COUNT] = {
    "undefined", "float", "int",     "string",  "tensor", "graph",
    "floats",    "ints",  "strings", "tensors", "graphs"};

dl_status dl_graph_add_node(dl_graph *g, const char *op_name, const char *domain, int opset,
                            const char *node_name, int n_in, dl_value *const *in, int n_out,
                            dl_value *const *out, int n_attrs, const dl_attr *attrs,
                            dl_node **out_node) {
    const char *nm = (node_name && node_name[0]) ? node_name : NULL;
    char label[300];
    snprintf(label, sizeof label, "node '%s' (%s%s%s)",
             nm ? nm : (n_out && out[0] ? out[0]->name : "?"), (domain && domain[0]) ? domain : "",
             (domain && domain[0]) ? "." : "", op_name);
    const dl_op_def *op = dl_op_find(domain, op_name);
    if (!op)
        return dl_fail(g->ctx, DL_ERR_UNSUPPORTED, "%s: unsupported op '%s%s%s'", label,
                       (domain && domain[0]) ? domain : "", (domain && domain[0]) ? "." : "",
                       op_name);
    if (n_in < op->min_in || n_in > op->max_in)
        return dl_fail(g->ctx, DL_ERR_PARSE, "%s: has %d inputs, expected %d..%d", label, n_in,
                       op->min_in, op->max_in);
    if (n_out < op->min_out || n_out > op->max_out)
        return dl_fail(g->ctx, DL_ERR_PARSE, "%s: has %d outputs, expected %d..%d", label, n_out,
                       op->min_out, op->max_out);
    for (int i = 0; i < op->min_in; i++)
        if (!in[i])
            return dl_fail(g->ctx, DL_ERR_PARSE, "%s: required input %d is missing", label, i);
    for (int i = 0; i < n_attrs; i++) {
        const dl_attr_spec *spec = find_spec(op, attrs[i].name);
        if (!spec) continue; /* unknown attributes are ignored, as most runtimes do */
        if (spec->type != attrs[i].type)
            return dl_fail(g->ctx, DL_ERR_PARSE, "%s: attribute '%s' is %s, expected %s", label,
                           attrs[i].name, attr_type_names[attrs[i].type],
                           attr_type_names[spec->type]);
        for (int j = 0; j < i; j++)
            if (strcmp(attrs[j].name, attrs[i].name) == 0)
                return dl_fail(g->ctx, DL_ERR_PARSE, "%s: attribute '%s' given twice", label,
                               attrs[i].name);
    }
    for (int i = 0; i < n_out; i++) {
        if (!out[i]) continue;
        if (out[i]->producer || out[i]->constant || out[i]->is_input)
            return dl_fail(g->ctx, DL_ERR_PARSE, "%s: output '%s' is already defined elsewhere",
                           label, out[i]->name);
    }
    dl_node *n = dl_arena_alloc(&g->arena, sizeof *n);
    if (!n) return dl_fail(g->ctx, DL_ERR_NOMEM, "out of memory");
    n->op = op;
    n->opset = opset;
    n->name = nm ? dl_arena_strdup(&g->arena, nm) : dl_graph_fresh_name(g, op_name);
    n->n_in = n_in;
    n->n_out = n_out;
    n->in = dl_arena_alloc(&g->arena, sizeof(dl_value *) * (size_t)(n_in ? n_in : 1));
    n->out = dl_arena_alloc(&g->arena, sizeof(dl_value *) * (size_t)(n_out ? n_out : 1));
    n->n_attrs = n_attrs;
    n->attrs = dl_arena_alloc(&g->arena, sizeof(dl_attr) * (size_t)(n_attrs ? n_attrs : 1));
    if (!n->name || !n->in || !n->out || !n->attrs)
        return dl_fail(g->ctx, DL_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n_in; i++) n->in[i] = in[i];
    for (int i = 0; i < n_out; i++) {
        n->out[i] = out[i];
        if (out[i]) {
            out[i]->producer = n;
            out[i]->producer_slot = i;
        }
    }
    for (int i = 0; i < n_attrs; i++) n->attrs[i] = attrs[i];
    n->id = g->nodes.len;
    if (dl_ptrvec_push(&g->nodes, n) != DL_OK)
        return dl_fail(g->ctx, DL_ERR_NOMEM, "out of memory");
    if (out_node) *out_node = n;
    return DL_OK;
}

/* Repeated ready-sweeps, stable with respect to the original order. */
dl_status dl_graph_toposort(dl_graph *g) {
    int n = g->nodes.len;
    if (n == 0) return DL_OK;
    bool *is_placed = dl_calloc((size_t)n, sizeof *is_placed);
    dl_node **order = dl_calloc((size_t)n, sizeof *order);
    bool *done_val = dl_calloc((size_t)g->values.len, sizeof *done_val);
    dl_status s = DL_OK;
    if (!is_placed || !order || !done_val) {
        s = dl_fail(g->ctx, DL_ERR_NOMEM, "out of memory sorting the graph");
        goto out;
    }
    for (int i = 0; i < g->values.len; i++) {
        dl_value *v = g->values.items[i];
        done_val[i] = v->is_input || v->constant;
    }
    for (int i = 0; i < n; i++) {
        dl_node *nd = g->nodes.items[i];
        nd->id = i;
        for (int j = 0; j < nd->n_in; j++) {
            dl_value *v = nd->in[j];
            if (!v) continue;
            if (!done_val[v->id] && !v->producer) {
                char d[300];
                s = dl_fail(g->ctx, DL_ERR_PARSE,
                            "%s: input '%s' is not produced by any node, "
                            "initializer or graph input",
                            dl_node_desc(nd, d, sizeof d), v->name);
                goto out;
            }
        }
    }
    /* simple repeated sweep: O(n * passes); graphs are in order already in nearly every model */
    int placed = 0;
    while (placed < n) {
        int before = placed;
        for (int i = 0; i < n; i++) {
            dl_node *nd = g->nodes.items[i];
            if (is_placed[i]) continue;
            bool ready = true;
            for (int j = 0; j < nd->n_in && ready; j++)
                if (nd->in[j] && !done_val[nd->in[j]->id]) ready = false;
            if (!ready) continue;
            is_placed[i] = true;
            order[placed++] = nd;
            for (int j = 0; j < nd->n_out; j++)
                if (nd->out[j]) done_val[nd->out[j]->id] = true;
        }
        if (placed == before) {
            s = dl_fail(g->ctx, DL_ERR_PARSE, "the graph has a cycle (%d of %d nodes ordered)",
                        placed, n);
            goto out;
        }
    }
    for (int i = 0; i < n; i++) {
        g->nodes.items[i] = order[i];
        order[i]->id = i;
    }
out:
    dl_free(is_placed);
    dl_free(order);
    dl_free(done_val);
    return s;
}

/* ---- attribute access ---- */
const dl_attr *dl_node_attr(const dl_node *n, const char *name) {
    for (int i = 0; i < n->n_attrs; i++)
        if (strcmp(n->attrs[i].name, name) == 0) return &n->attrs[i];
    return NULL;
}

int64_t dl_attr_int(const dl_node *n, const char *name, int64_t def) {
    const dl_attr *a = dl_node_attr(n, name);
    return (a && a->type == DL_ATTR_INT) ? a->i : def;
}

float dl_attr_float(const dl_node *n, const char *name, float def) {
    const dl_attr *a = dl_node_attr(n, name);
    if (a && a->type == DL_ATTR_FLOAT) return a->f;
    return def;
}

const char *dl_attr_str(const dl_node *n, const char *name, const char *def) {
    const dl_attr *a = dl_node_attr(n, name);
    return (a && a->type == DL_ATTR_STRING) ? a->s : def;
}

int dl_attr_ints(const dl_node *n, const char *name, const int64_t **vals) {
    const dl_attr *a = dl_node_attr(n, name);
    if (!a || a->type != DL_ATTR_INTS) return -1;
    *vals = a->ints;
    return a->n;
}

int dl_attr_floats(const dl_node *n, const char *name, const float **vals) {
    const dl_attr *a = dl_node_attr(n, name);
    if (!a || a->type != DL_ATTR_FLOATS) return -1;
    *vals = a->floats;
    return a->n;
}

const dl_tensor *dl_attr_tensor(const dl_node *n, const char *name) {
    const dl_attr *a = dl_node_attr(n, name);
    return (a && a->type == DL_ATTR_TENSOR) ? a->t : NULL;
}

/* ---- public accessors ---- */
int dl_graph_num_inputs(const dl_graph *g) {
    return g->inputs.len;
}
int dl_graph_num_outputs(const dl_graph *g) {
    return g->outputs.len;
}
dl_value *dl_graph_input(const dl_graph *g, int i) {
    return (i >= 0 && i < g->inputs.len) ? g->inputs.items[i] : NULL;
}
dl_value *dl_graph_output(const dl_graph *g, int i) {
    return (i >= 0 && i < g->outputs.len) ? g->outputs.items[i] : NULL;
}
const char *dl_value_name(const dl_value *v) {
    return v->name;
}
dl_dtype dl_value_dtype(const dl_value *v) {
    return v->type.dtype;
}
int dl_value_rank(const dl_value *v) {
    return v->type.rank;
}
int64_t dl_value_dim(const dl_value *v, int i) {
    if (i < 0 || i >= v->type.rank) return -1;
    return v->type.dims[i] >= 0 ? v->type.dims[i] : -1;
}
const char *dl_value_dim_name(const dl_value *v, int i) {
    if (i < 0 || i >= v->type.rank) return NULL;
    return v->type.dims[i] >= 0 ? NULL : dl_graph_sym_name(v->graph, v->type.dims[i]);
}
