/* onnx-writer.c — graph IR to an ONNX ModelProto file, the inverse of onnx-reader.c: opset
 * imports per domain, typed graph inputs and outputs (symbolic dims by name), the constants that
 * live nodes read (model initializers as raw-data initializers, other constants as Constant
 * nodes), the live nodes with every attribute type but subgraphs. The file is written with
 * dl_atomic_write (temporary name next to the target, synced, renamed), so a crash or a full
 * disk never leaves a half-written model under the target's name. */
#include "onnx-impl.h"
#include "../ops/op-impl.h"
#include "../core/atomic-file.h"

#define DEFAULT_IR_VERSION 8
#define DEFAULT_OPSET 17
/* A protobuf message may not exceed 2 GiB; beyond it ONNX needs external data, not written yet. */
#define PROTO_SIZE_CAP ((size_t)INT32_MAX)

typedef struct writer {
    dl_ctx *ctx;
    dl_graph *g;
    dl_arena arena;     /* every proto struct and array: they die once the file is written */
    uint8_t *written;   /* by value id: WRITE_* flags */
    const char **names; /* by value id: the name in the file */
    const char **set;   /* open-addressing set of the names given out */
    size_t set_cap;
    dl_status status;   /* first allocation failure */
} writer;

/* WRITE_DEFINED: a graph input or a live node's output; WRITE_CONSTANT: a constant still to write
 * (an initializer, or a Constant node for one that was no model initializer) */
enum { WRITE_DEFINED = 1, WRITE_CONSTANT = 2 };

static dl_status nomem(writer *w) {
    return w->status = dl_fail(w->ctx, DL_ERR_NOMEM, "out of memory writing an ONNX model");
}

/* count * size zeroed bytes in the writer's arena; NULL (and w->status set) on overflow or OOM. */
static void *walloc(writer *w, size_t count, size_t size) {
    size_t n;
    if (w->status != DL_OK) return NULL;
    dl_status s = dl_mul_size(w->ctx, count ? count : 1, size, &n, "an ONNX model field");
    if (s != DL_OK) {
        w->status = s;
        return NULL;
    }
    void *p = dl_arena_alloc(&w->arena, n);
    if (!p) nomem(w);
    return p;
}

static void *wnew(writer *w, size_t size, const void *init) {
    void *p = walloc(w, 1, size);
    if (p) memcpy(p, init, size);
    return p;
}
/* A new protobuf-c message of type, set to its INIT value (which holds its descriptor). */
#define WNEW(w, type, INIT) ((type *)wnew((w), sizeof(type), &(type)INIT))

static bool is_default_domain(const char *d) {
    return !d || !d[0] || strcmp(d, "ai.onnx") == 0;
}

/* ---- names: unique in the file; a value keeps its own name whenever it can ---- */
static size_t name_slot(const writer *w, const char *s) {
    size_t j = (size_t)dl_hash_bytes(s, strlen(s), 0) & (w->set_cap - 1);
    while (w->set[j] && strcmp(w->set[j], s) != 0) j = (j + 1) & (w->set_cap - 1);
    return j;
}

static bool claim_name(writer *w, dl_value *v) {
    if (w->names[v->id] || !v->name || !v->name[0]) return w->names[v->id] != NULL;
    size_t j = name_slot(w, v->name);
    if (w->set[j]) return false;
    w->set[j] = w->names[v->id] = v->name;
    return true;
}

static dl_status fresh_name(writer *w, dl_value *v) {
    const char *stem = v->name && v->name[0] ? v->name : "value";
    char buf[300];
    for (int k = 1;; k++) {
        snprintf(buf, sizeof buf, "%.200s_%d", stem, k);
        size_t j = name_slot(w, buf);
        if (w->set[j]) continue;
        if (!(w->set[j] = w->names[v->id] = dl_arena_strdup(&w->arena, buf))) return nomem(w);
        return DL_OK;
    }
}

static bool value_ok(const writer *w, const dl_value *v) {
    return v && v->id >= 0 && v->id < w->g->values.len && w->g->values.items[v->id] == v;
}

/* Marks what goes into the file, checks that every value read is defined there, and names the
 * values: graph inputs and outputs first, so they keep their names under any collision. */
static dl_status plan_values(writer *w) {
    dl_graph *g = w->g;
    char d[300];
    for (int i = 0; i < g->inputs.len; i++) {
        dl_value *v = g->inputs.items[i];
        if (!value_ok(w, v)) return dl_fail(w->ctx, DL_ERR_INVALID, "graph input %d is not a value of the graph", i);
        w->written[v->id] |= WRITE_DEFINED;
    }
    for (int i = 0; i < g->nodes.len; i++) {
        dl_node *n = g->nodes.items[i];
        if (n->dead) continue;
        for (int j = 0; j < n->n_out; j++) {
            if (!n->out[j]) continue;
            if (!value_ok(w, n->out[j]))
                return dl_fail(w->ctx, DL_ERR_INVALID, "%s: output %d is not a value of the graph",
                               dl_node_desc(n, d, sizeof d), j);
            w->written[n->out[j]->id] |= WRITE_DEFINED;
        }
    }
    for (int i = 0; i <= g->nodes.len; i++) { /* the nodes' inputs, then the graph outputs */
        dl_node *n = i < g->nodes.len ? g->nodes.items[i] : NULL;
        if (n && n->dead) continue;
        int count = n ? n->n_in : g->outputs.len;
        for (int j = 0; j < count; j++) {
            dl_value *v = n ? n->in[j] : g->outputs.items[j];
            if (!v && n) continue;
            if (!value_ok(w, v) && n)
                return dl_fail(w->ctx, DL_ERR_INVALID, "%s: input %d is not a value of the graph",
                               dl_node_desc(n, d, sizeof d), j);
            if (!value_ok(w, v))
                return dl_fail(w->ctx, DL_ERR_INVALID, "graph output %d is not a value of the graph", j);
            if (v->constant && !(w->written[v->id] & WRITE_DEFINED)) w->written[v->id] |= WRITE_CONSTANT;
            if (!w->written[v->id])
                return dl_fail(w->ctx, DL_ERR_INVALID,
                               "cannot save the graph: '%s' (read by %s) has no live producer",
                               v->name ? v->name : "?",
                               n ? dl_node_desc(n, d, sizeof d) : "a graph output");
        }
    }
    for (int i = 0; i < g->inputs.len; i++) claim_name(w, g->inputs.items[i]);
    for (int i = 0; i < g->outputs.len; i++) claim_name(w, g->outputs.items[i]);
    for (int i = 0; i < g->values.len; i++)
        if (w->written[i]) claim_name(w, g->values.items[i]);
    for (int i = 0; i < g->values.len; i++)
        if (w->written[i] && !w->names[i]) DL_TRY(fresh_name(w, g->values.items[i]));
    return DL_OK;
}

/* ---- tensors and types ---- */
static bool host_little_endian(void) {
    const uint16_t one = 1;
    return *(const uint8_t *)&one == 1;
}

static Onnx__TensorProto *tensor_proto(writer *w, const dl_tensor *t, const char *name) {
    Onnx__TensorProto *tp = WNEW(w, Onnx__TensorProto, ONNX__TENSOR_PROTO__INIT);
    if (!tp) return NULL;
    int code = (int)dl_dtype_to_onnx(t->dtype);
    size_t esize = dl_dtype_size(t->dtype);
    if (!code || (t->nbytes && !t->data)) {
        w->status = dl_fail(w->ctx, DL_ERR_INVALID, "tensor '%s' has no data or no ONNX type",
                            name ? name : "");
        return NULL;
    }
    tp->name = (char *)name;
    tp->has_data_type = true;
    tp->data_type = code;
    tp->n_dims = (size_t)t->rank;
    tp->dims = (int64_t *)t->dims;
    tp->has_raw_data = true;
    tp->raw_data.len = t->nbytes;
    tp->raw_data.data = t->data;
    if (esize > 1 && t->nbytes && !host_little_endian()) { /* raw_data is little-endian */
        uint8_t *le = walloc(w, t->nbytes, 1);
        if (!le) return NULL;
        const uint8_t *src = t->data;
        for (size_t i = 0; i < t->nbytes; i += esize)
            for (size_t b = 0; b < esize; b++) le[i + b] = src[i + esize - 1 - b];
        tp->raw_data.data = le;
    }
    return tp;
}

static Onnx__ValueInfoProto *value_info(writer *w, const dl_value *v) {
    Onnx__ValueInfoProto *vi = WNEW(w, Onnx__ValueInfoProto, ONNX__VALUE_INFO_PROTO__INIT);
    if (!vi) return NULL;
    vi->name = (char *)w->names[v->id];
    int code = (int)dl_dtype_to_onnx(v->type.dtype);
    if (!code) return vi; /* type unknown: the reader infers it */
    Onnx__TypeProto *tp = WNEW(w, Onnx__TypeProto, ONNX__TYPE_PROTO__INIT);
    Onnx__TypeProto__Tensor *tt = WNEW(w, Onnx__TypeProto__Tensor, ONNX__TYPE_PROTO__TENSOR__INIT);
    if (!tp || !tt) return NULL;
    vi->type = tp;
    tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    tp->tensor_type = tt;
    tt->has_elem_type = true;
    tt->elem_type = code;
    if (v->type.rank < 0) return vi;
    Onnx__TensorShapeProto *sh = WNEW(w, Onnx__TensorShapeProto, ONNX__TENSOR_SHAPE_PROTO__INIT);
    Onnx__TensorShapeProto__Dimension **dims = walloc(w, (size_t)v->type.rank, sizeof *dims);
    if (!sh || !dims) return NULL;
    tt->shape = sh;
    sh->n_dim = (size_t)v->type.rank;
    sh->dim = dims;
    for (int i = 0; i < v->type.rank; i++) {
        Onnx__TensorShapeProto__Dimension *dm =
            WNEW(w, Onnx__TensorShapeProto__Dimension, ONNX__TENSOR_SHAPE_PROTO__DIMENSION__INIT);
        if (!dm) return NULL;
        dims[i] = dm;
        int64_t d = v->type.dims[i];
        const char *sym = DL_DIM_IS_SYM(d) ? dl_graph_sym_name(w->g, d) : NULL;
        if (!DL_DIM_IS_SYM(d)) {
            dm->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
            dm->dim_value = d;
        } else if (sym && sym[0] && sym[0] != '?') { /* "?N": dlcc's name for an unknown size */
            dm->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
            dm->dim_param = (char *)sym;
        }
    }
    return vi;
}

/* ---- nodes ---- */
static Onnx__AttributeProto *attr_proto(writer *w, const dl_node *n, const dl_attr *a) {
    Onnx__AttributeProto *ap = WNEW(w, Onnx__AttributeProto, ONNX__ATTRIBUTE_PROTO__INIT);
    if (!ap) return NULL;
    char d[300];
    ap->name = (char *)a->name;
    ap->has_type = true;
    size_t count = a->n > 0 ? (size_t)a->n : 0;
    switch (a->type) {
    case DL_ATTR_FLOAT:
        ap->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT;
        ap->has_f = true;
        ap->f = a->f;
        break;
    case DL_ATTR_INT:
        ap->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
        ap->has_i = true;
        ap->i = a->i;
        break;
    case DL_ATTR_STRING:
        ap->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING;
        ap->has_s = true;
        ap->s.len = a->s ? a->s_len : 0;
        ap->s.data = (uint8_t *)a->s;
        break;
    case DL_ATTR_TENSOR:
        ap->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR;
        if (!a->t) goto missing;
        if (!(ap->t = tensor_proto(w, a->t, NULL))) return NULL;
        break;
    case DL_ATTR_FLOATS:
        ap->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS;
        if (count && !a->floats) goto missing;
        ap->n_floats = count;
        ap->floats = a->floats;
        break;
    case DL_ATTR_INTS:
        ap->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
        if (count && !a->ints) goto missing;
        ap->n_ints = count;
        ap->ints = a->ints;
        break;
    case DL_ATTR_STRINGS:
        ap->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS;
        if (count && !a->strings) goto missing;
        if (!(ap->strings = walloc(w, count, sizeof *ap->strings))) return NULL;
        ap->n_strings = count;
        for (size_t i = 0; i < count; i++) { /* the IR keeps list strings NUL-terminated */
            ap->strings[i].data = (uint8_t *)a->strings[i];
            ap->strings[i].len = a->strings[i] ? strlen(a->strings[i]) : 0;
        }
        break;
    case DL_ATTR_TENSORS:
        ap->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSORS;
        if (count && !a->tensors) goto missing;
        if (!(ap->tensors = walloc(w, count, sizeof *ap->tensors))) return NULL;
        ap->n_tensors = count;
        for (size_t i = 0; i < count; i++) {
            if (!a->tensors[i]) goto missing;
            if (!(ap->tensors[i] = tensor_proto(w, a->tensors[i], NULL))) return NULL;
        }
        break;
    case DL_ATTR_GRAPH:
    case DL_ATTR_GRAPHS:
        w->status = dl_fail(w->ctx, DL_ERR_UNSUPPORTED,
                            "%s: attribute '%s' holds a subgraph; writing subgraphs "
                            "(If/Loop/Scan) to ONNX is not supported",
                            dl_node_desc(n, d, sizeof d), a->name);
        return NULL;
    default:
        w->status = dl_fail(w->ctx, DL_ERR_INVALID, "%s: attribute '%s' has no valid type (%d)",
                            dl_node_desc(n, d, sizeof d), a->name, (int)a->type);
        return NULL;
    }
    return ap;
missing:
    w->status = dl_fail(w->ctx, DL_ERR_INVALID, "%s: attribute '%s' has no value",
                        dl_node_desc(n, d, sizeof d), a->name);
    return NULL;
}

static Onnx__NodeProto *node_proto(writer *w, const dl_node *n) {
    Onnx__NodeProto *np = WNEW(w, Onnx__NodeProto, ONNX__NODE_PROTO__INIT);
    if (!np) return NULL;
    np->op_type = (char *)n->op->name;
    np->domain = is_default_domain(n->op->domain) ? NULL : (char *)n->op->domain;
    np->name = n->name && n->name[0] ? (char *)n->name : NULL;
    int n_in = n->n_in;
    while (n_in > 0 && !n->in[n_in - 1]) n_in--; /* trailing omitted inputs are left out */
    np->input = walloc(w, (size_t)n_in, sizeof *np->input);
    np->output = walloc(w, (size_t)n->n_out, sizeof *np->output);
    np->attribute = walloc(w, (size_t)n->n_attrs, sizeof *np->attribute);
    if (!np->input || !np->output || !np->attribute) return NULL;
    np->n_input = (size_t)n_in;
    for (int i = 0; i < n_in; i++) np->input[i] = n->in[i] ? (char *)w->names[n->in[i]->id] : "";
    np->n_output = (size_t)n->n_out;
    for (int i = 0; i < n->n_out; i++)
        np->output[i] = n->out[i] ? (char *)w->names[n->out[i]->id] : "";
    np->n_attribute = (size_t)n->n_attrs;
    for (int i = 0; i < n->n_attrs; i++)
        if (!(np->attribute[i] = attr_proto(w, n, &n->attrs[i]))) return NULL;
    return np;
}

/* The default domain at the graph's opset (or a newer one a node carries); every other domain
 * at the highest opset its nodes carry. */
static dl_status opset_imports(writer *w, Onnx__ModelProto *m) {
    dl_graph *g = w->g;
    Onnx__OperatorSetIdProto **ops = walloc(w, (size_t)g->nodes.len + 1, sizeof *ops);
    if (!ops) return w->status;
    Onnx__OperatorSetIdProto *dflt = WNEW(w, Onnx__OperatorSetIdProto, ONNX__OPERATOR_SET_ID_PROTO__INIT);
    if (!dflt) return w->status;
    dflt->domain = "";
    dflt->has_version = true;
    dflt->version = g->opset;
    ops[0] = dflt;
    size_t n_ops = 1;
    for (int i = 0; i < g->nodes.len; i++) {
        const dl_node *n = g->nodes.items[i];
        if (n->dead) continue;
        const char *dom = is_default_domain(n->op->domain) ? "" : n->op->domain;
        size_t k = 0;
        while (k < n_ops && strcmp(ops[k]->domain, dom) != 0) k++;
        if (k == n_ops) {
            if (!(ops[k] = WNEW(w, Onnx__OperatorSetIdProto, ONNX__OPERATOR_SET_ID_PROTO__INIT)))
                return w->status;
            ops[k]->domain = (char *)dom;
            ops[k]->has_version = true;
            ops[k]->version = n->opset;
            n_ops++;
        }
        if (n->opset > ops[k]->version) ops[k]->version = n->opset;
    }
    if (dflt->version < 1) dflt->version = DEFAULT_OPSET;
    m->opset_import = ops;
    m->n_opset_import = n_ops;
    return DL_OK;
}

/* A constant that was no model initializer (a Constant node's value, a builder dl_constant, a
 * folded result) goes back as a Constant node, so training after a reload still tells parameters
 * (initializers) from fixed constants. */
static Onnx__NodeProto *constant_node(writer *w, const dl_value *v) {
    Onnx__NodeProto *np = WNEW(w, Onnx__NodeProto, ONNX__NODE_PROTO__INIT);
    Onnx__AttributeProto *ap = WNEW(w, Onnx__AttributeProto, ONNX__ATTRIBUTE_PROTO__INIT);
    char **out = walloc(w, 1, sizeof *out);
    Onnx__AttributeProto **attrs = walloc(w, 1, sizeof *attrs);
    if (!np || !ap || !out || !attrs) return NULL;
    np->output = out;
    np->attribute = attrs;
    np->op_type = "Constant";
    np->name = (char *)w->names[v->id];
    np->n_output = 1;
    np->output[0] = (char *)w->names[v->id];
    np->n_attribute = 1;
    np->attribute[0] = ap;
    ap->name = "value";
    ap->has_type = true;
    ap->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR;
    return (ap->t = tensor_proto(w, v->constant, NULL)) ? np : NULL;
}

static dl_status build_graph(writer *w, Onnx__GraphProto *gp, int64_t ir_version) {
    dl_graph *g = w->g;
    size_t nv = (size_t)g->values.len;
    gp->name = g->name && g->name[0] ? (char *)g->name : "dlcc";
    gp->initializer = walloc(w, nv, sizeof *gp->initializer);
    gp->node = walloc(w, (size_t)g->nodes.len + nv, sizeof *gp->node);
    gp->input = walloc(w, (size_t)g->inputs.len + nv, sizeof *gp->input);
    gp->output = walloc(w, (size_t)g->outputs.len, sizeof *gp->output);
    if (!gp->initializer || !gp->node || !gp->input || !gp->output) return w->status;
    for (int i = 0; i < g->inputs.len; i++)
        if (!(gp->input[gp->n_input++] = value_info(w, g->inputs.items[i]))) return w->status;
    /* constants in order of first use, so saving a reloaded model gives the same bytes */
    for (int i = 0; i <= g->nodes.len; i++) {
        dl_node *n = i < g->nodes.len ? g->nodes.items[i] : NULL;
        if (n && n->dead) continue;
        int count = n ? n->n_in : g->outputs.len;
        for (int j = 0; j < count; j++) {
            dl_value *v = n ? n->in[j] : g->outputs.items[j];
            if (!v || !(w->written[v->id] & WRITE_CONSTANT)) continue;
            w->written[v->id] &= (uint8_t)~WRITE_CONSTANT;
            if (!v->is_initializer) {
                if (!(gp->node[gp->n_node++] = constant_node(w, v))) return w->status;
                continue;
            }
            Onnx__TensorProto *tp = tensor_proto(w, v->constant, w->names[v->id]);
            if (!tp) return w->status;
            gp->initializer[gp->n_initializer++] = tp;
            /* IR < 4 requires every initializer to be a graph input as well */
            if (ir_version < 4 && !(gp->input[gp->n_input++] = value_info(w, v))) return w->status;
        }
        if (n && !(gp->node[gp->n_node++] = node_proto(w, n))) return w->status;
    }
    for (int i = 0; i < g->outputs.len; i++)
        if (!(gp->output[gp->n_output++] = value_info(w, g->outputs.items[i]))) return w->status;
    return DL_OK;
}

/* ---- the file ---- */
/* protobuf-c hands many tiny fields to the sink: batch them into larger writes. */
typedef struct batch_sink {
    ProtobufCBuffer base;
    dl_atomic_file *out;
    size_t len;
    uint8_t buf[1 << 16];
} batch_sink;

static void batch_flush(batch_sink *b) {
    dl_atomic_put(b->out, b->buf, b->len);
    b->len = 0;
}

static void batch_append(ProtobufCBuffer *pb, size_t len, const uint8_t *data) {
    batch_sink *b = (batch_sink *)pb;
    if (b->len + len > sizeof b->buf) batch_flush(b);
    if (len >= sizeof b->buf) {
        dl_atomic_put(b->out, data, len);
        return;
    }
    memcpy(b->buf + b->len, data, len);
    b->len += len;
}

typedef struct model_contents {
    const Onnx__ModelProto *m;
    size_t size;
    batch_sink *batch;
} model_contents;

static dl_status put_model(dl_ctx *ctx, dl_atomic_file *f, void *arg) {
    model_contents *c = arg;
    batch_sink *b = c->batch;
    b->base.append = batch_append;
    b->out = f;
    b->len = 0;
    size_t packed = onnx__model_proto__pack_to_buffer(c->m, &b->base);
    batch_flush(b);
    if (f->status == DL_OK && (packed != c->size || f->written != c->size))
        return dl_fail(ctx, DL_ERR_INTERNAL, "%s: wrote %llu bytes of a %zu-byte model", f->path,
                       (unsigned long long)f->written, c->size);
    return DL_OK; /* a failed write is reported by dl_atomic_write */
}

static dl_status write_model(dl_ctx *ctx, const char *path, const Onnx__ModelProto *m,
                             size_t size) {
    model_contents c = {.m = m, .size = size, .batch = dl_malloc(sizeof *c.batch)};
    if (!c.batch) return dl_fail(ctx, DL_ERR_NOMEM, "out of memory writing %s", path);
    dl_status s = dl_atomic_write(ctx, path, NULL, DL_ATOMIC_SYNC, put_model, &c);
    dl_free(c.batch);
    return s;
}

dl_status dl_save_onnx(dl_ctx *ctx, dl_graph *g, const char *path) {
    if (!g || !path || !path[0]) return dl_fail(ctx, DL_ERR_INVALID, "dl_save_onnx: no graph or path");
    if (g->status != DL_OK)
        return dl_fail(ctx, g->status, "%s: the graph has a build error and cannot be saved", path);
    writer w = {.ctx = ctx, .g = g};
    size_t nv = (size_t)g->values.len;
    w.set_cap = 16;
    while (w.set_cap < 2 * nv + 16) w.set_cap *= 2;
    w.written = dl_calloc(nv + 1, sizeof *w.written);
    w.names = dl_calloc(nv + 1, sizeof *w.names);
    w.set = dl_calloc(w.set_cap, sizeof *w.set);
    dl_status s = (!w.written || !w.names || !w.set) ? nomem(&w) : plan_values(&w);
    Onnx__ModelProto m = ONNX__MODEL_PROTO__INIT;
    Onnx__GraphProto gp = ONNX__GRAPH_PROTO__INIT;
    m.has_ir_version = true;
    m.ir_version = g->ir_version > 0 ? g->ir_version : DEFAULT_IR_VERSION;
    m.producer_name = "dlcc";
    m.graph = &gp;
    if (s == DL_OK) s = opset_imports(&w, &m);
    if (s == DL_OK) s = build_graph(&w, &gp, m.ir_version);
    if (s == DL_OK) {
        size_t size = onnx__model_proto__get_packed_size(&m);
        if (size > PROTO_SIZE_CAP)
            s = dl_fail(ctx, DL_ERR_LIMIT,
                        "%s: the model is %zu bytes, over protobuf's 2 GiB limit (external data "
                        "is not written yet)", path, size);
        else
            s = write_model(ctx, path, &m, size);
    }
    if (s != DL_OK && !strstr(dl_errmsg(ctx), path)) dl_ctx_prefix(ctx, "saving %s", path);
    dl_arena_free(&w.arena);
    dl_free(w.written);
    dl_free(w.names);
    dl_free(w.set);
    return s;
}
