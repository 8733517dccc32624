/* onnx-reader.c — ONNX ModelProto to graph IR: opset imports, typed graph inputs with symbolic
 * dims, initializers, nodes with every attribute type, graph outputs. Subgraphs, sparse tensors
 * and non-tensor types are rejected with a message that says so. */
#include "onnx-impl.h"

#include <libgen.h>
#include <limits.h>

#define MODEL_FILE_CAP ((size_t)4 << 30) /* protobuf itself cannot exceed 2 GiB */

typedef struct reader {
    dl_ctx *ctx;
    dl_graph *g;
    const char *path;
    char base_dir[PATH_MAX];
    Onnx__ModelProto *model;
} reader;

static int opset_for(const reader *r, const char *domain) {
    bool dflt = !domain || !domain[0] || strcmp(domain, "ai.onnx") == 0;
    for (size_t i = 0; i < r->model->n_opset_import; i++) {
        const Onnx__OperatorSetIdProto *o = r->model->opset_import[i];
        const char *d = o->domain ? o->domain : "";
        bool odflt = !d[0] || strcmp(d, "ai.onnx") == 0;
        if ((dflt && odflt) || (!dflt && !odflt && strcmp(d, domain) == 0)) return (int)o->version;
    }
    return dflt ? 1 : 1;
}

static dl_status read_value_type(reader *r, const Onnx__ValueInfoProto *vi, dl_type *t) {
    const char *nm = vi->name ? vi->name : "?";
    t->rank = DL_RANK_UNKNOWN;
    t->dtype = DL_DTYPE_UNDEFINED;
    const Onnx__TypeProto *tp = vi->type;
    if (!tp) return DL_OK; /* untyped: inferred later */
    if (tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type)
        return dl_fail(r->ctx, DL_ERR_UNSUPPORTED,
                       "value '%s' is not a tensor (sequence, map, optional and sparse types are "
                       "not supported)", nm);
    const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
    t->dtype = dl_dtype_from_onnx(tt->elem_type);
    if (t->dtype == DL_DTYPE_UNDEFINED)
        return dl_fail(r->ctx, DL_ERR_UNSUPPORTED, "value '%s' has unsupported dtype %s", nm,
                       dl_onnx_type_name(tt->elem_type));
    if (!tt->shape) return DL_OK;
    if (tt->shape->n_dim > DL_MAX_RANK)
        return dl_fail(r->ctx, DL_ERR_UNSUPPORTED, "value '%s' has rank %zu, above %d", nm,
                       tt->shape->n_dim, DL_MAX_RANK);
    t->rank = (int)tt->shape->n_dim;
    for (int i = 0; i < t->rank; i++) {
        const Onnx__TensorShapeProto__Dimension *d = tt->shape->dim[i];
        if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE && d->dim_value < 0)
            return dl_fail(r->ctx, DL_ERR_PARSE, "value '%s' has negative dimension %lld", nm,
                           (long long)d->dim_value);
        if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE)
            t->dims[i] = d->dim_value;
        else if (d->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM && d->dim_param &&
                 d->dim_param[0])
            t->dims[i] = dl_graph_sym(r->g, d->dim_param);
        else
            t->dims[i] = dl_graph_new_sym(r->g, NULL);
    }
    return DL_OK;
}

static dl_status add_initializer(reader *r, Onnx__TensorProto *tp) {
    if (!tp->name || !tp->name[0])
        return dl_fail(r->ctx, DL_ERR_PARSE, "an initializer has no name");
    dl_tensor *t;
    DL_TRY(dl_onnx_tensor(r->ctx, tp, r->base_dir, &t));
    DL_TRY(dl_graph_own_tensor(r->g, t));
    dl_value *v;
    DL_TRY(dl_graph_add_value(r->g, tp->name, &v));
    v->constant = t;
    v->is_initializer = true;
    v->type.dtype = t->dtype;
    v->type.rank = t->rank;
    for (int i = 0; i < t->rank; i++) v->type.dims[i] = t->dims[i];
    return DL_OK;
}

static dl_attr_type attr_kind(const Onnx__AttributeProto *a) {
    switch (a->type) {
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT: return DL_ATTR_FLOAT;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT: return DL_ATTR_INT;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING: return DL_ATTR_STRING;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR: return DL_ATTR_TENSOR;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH: return DL_ATTR_GRAPH;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS: return DL_ATTR_FLOATS;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS: return DL_ATTR_INTS;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS: return DL_ATTR_STRINGS;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSORS: return DL_ATTR_TENSORS;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPHS: return DL_ATTR_GRAPHS;
    case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__UNDEFINED: break; /* IR v1: guess from fields */
    default: return DL_ATTR_UNDEFINED;
    }
    if (a->has_f) return DL_ATTR_FLOAT;
    if (a->has_i) return DL_ATTR_INT;
    if (a->has_s) return DL_ATTR_STRING;
    if (a->t) return DL_ATTR_TENSOR;
    if (a->g) return DL_ATTR_GRAPH;
    if (a->n_floats) return DL_ATTR_FLOATS;
    if (a->n_ints) return DL_ATTR_INTS;
    if (a->n_strings) return DL_ATTR_STRINGS;
    if (a->n_tensors) return DL_ATTR_TENSORS;
    if (a->n_graphs) return DL_ATTR_GRAPHS;
    return DL_ATTR_UNDEFINED;
}

static char *arena_bytes(dl_arena *a, const ProtobufCBinaryData *b) {
    char *s = dl_arena_alloc(a, b->len + 1);
    if (s && b->len) memcpy(s, b->data, b->len);
    return s;
}

static dl_status read_attr(reader *r, const char *label, Onnx__AttributeProto *a, dl_attr *out) {
    dl_arena *ar = &r->g->arena;
    const char *an = a->name ? a->name : "";
    if (!an[0]) return dl_fail(r->ctx, DL_ERR_PARSE, "%s: an attribute has no name", label);
    if (a->ref_attr_name && a->ref_attr_name[0])
        return dl_fail(r->ctx, DL_ERR_UNSUPPORTED, "%s: attribute '%s' refers to a function attribute",
                       label, an);
    out->name = dl_arena_strdup(ar, an);
    out->type = attr_kind(a);
    switch (out->type) {
    case DL_ATTR_FLOAT: out->f = a->f; break;
    case DL_ATTR_INT: out->i = a->i; break;
    case DL_ATTR_STRING:
        out->s = arena_bytes(ar, &a->s);
        out->s_len = a->s.len;
        if (!out->s) return dl_fail(r->ctx, DL_ERR_NOMEM, "out of memory");
        break;
    case DL_ATTR_TENSOR: {
        if (!a->t)
            return dl_fail(r->ctx, DL_ERR_PARSE, "%s: attribute '%s' is of type tensor but holds none",
                           label, an);
        dl_status s = dl_onnx_tensor(r->ctx, a->t, r->base_dir, &out->t);
        if (s != DL_OK) {
            dl_ctx_prefix(r->ctx, "%s: attribute '%s'", label, an);
            return s;
        }
        DL_TRY(dl_graph_own_tensor(r->g, out->t));
        break;
    }
    case DL_ATTR_FLOATS:
        out->n = (int)a->n_floats;
        out->floats = dl_arena_alloc(ar, sizeof(float) * a->n_floats);
        if (!out->floats) return dl_fail(r->ctx, DL_ERR_NOMEM, "out of memory");
        if (a->n_floats) memcpy(out->floats, a->floats, sizeof(float) * a->n_floats);
        break;
    case DL_ATTR_INTS:
        out->n = (int)a->n_ints;
        out->ints = dl_arena_alloc(ar, sizeof(int64_t) * a->n_ints);
        if (!out->ints) return dl_fail(r->ctx, DL_ERR_NOMEM, "out of memory");
        if (a->n_ints) memcpy(out->ints, a->ints, sizeof(int64_t) * a->n_ints);
        break;
    case DL_ATTR_STRINGS:
        out->n = (int)a->n_strings;
        out->strings = dl_arena_alloc(ar, sizeof(char *) * a->n_strings);
        if (!out->strings) return dl_fail(r->ctx, DL_ERR_NOMEM, "out of memory");
        for (size_t i = 0; i < a->n_strings; i++)
            if (!(out->strings[i] = arena_bytes(ar, &a->strings[i])))
                return dl_fail(r->ctx, DL_ERR_NOMEM, "out of memory");
        break;
    case DL_ATTR_TENSORS:
        out->n = (int)a->n_tensors;
        out->tensors = dl_arena_alloc(ar, sizeof(dl_tensor *) * a->n_tensors);
        if (!out->tensors) return dl_fail(r->ctx, DL_ERR_NOMEM, "out of memory");
        for (size_t i = 0; i < a->n_tensors; i++) {
            DL_TRY(dl_onnx_tensor(r->ctx, a->tensors[i], r->base_dir, &out->tensors[i]));
            DL_TRY(dl_graph_own_tensor(r->g, out->tensors[i]));
        }
        break;
    case DL_ATTR_GRAPH:
    case DL_ATTR_GRAPHS:
        return dl_fail(r->ctx, DL_ERR_UNSUPPORTED,
                       "%s: attribute '%s' holds a subgraph; control flow with subgraphs "
                       "(If/Loop/Scan) is not supported yet", label, an);
    default:
        return dl_fail(r->ctx, DL_ERR_UNSUPPORTED,
                       "%s: attribute '%s' has an unsupported type (sparse tensor or type proto)",
                       label, an);
    }
    return DL_OK;
}

static dl_status read_node(reader *r, Onnx__NodeProto *np, int index) {
    const char *op = np->op_type ? np->op_type : "";
    const char *domain = np->domain ? np->domain : "";
    char label[400];
    snprintf(label, sizeof label, "%s: node %d '%s' (%s)", r->path, index,
             np->name && np->name[0] ? np->name : (np->n_output && np->output[0] ? np->output[0] : "?"),
             op);
    if (!op[0]) return dl_fail(r->ctx, DL_ERR_PARSE, "%s: node has no op_type", label);
    if (np->n_input > 100000 || np->n_output > 100000 || np->n_attribute > 100000)
        return dl_fail(r->ctx, DL_ERR_LIMIT, "%s: too many inputs, outputs or attributes", label);
    int n_in = (int)np->n_input, n_out = (int)np->n_output, n_attr = (int)np->n_attribute;
    dl_value **in = dl_arena_alloc(&r->g->arena, sizeof(dl_value *) * (size_t)(n_in + 1));
    dl_value **out = dl_arena_alloc(&r->g->arena, sizeof(dl_value *) * (size_t)(n_out + 1));
    dl_attr *attrs = dl_arena_alloc(&r->g->arena, sizeof(dl_attr) * (size_t)(n_attr + 1));
    if (!in || !out || !attrs) return dl_fail(r->ctx, DL_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n_in; i++) {
        const char *nm = np->input[i];
        if (!nm || !nm[0]) continue; /* omitted optional input */
        in[i] = dl_graph_find_value(r->g, nm);
        if (!in[i])
            return dl_fail(r->ctx, DL_ERR_PARSE,
                           "%s: input '%s' is not a graph input, initializer or earlier output", label, nm);
    }
    /* drop trailing omitted inputs so arity checks see the real count */
    while (n_in > 0 && !in[n_in - 1]) n_in--;
    for (int i = 0; i < n_out; i++) {
        const char *nm = np->output[i];
        if (!nm || !nm[0]) continue;
        if (dl_graph_find_value(r->g, nm))
            return dl_fail(r->ctx, DL_ERR_PARSE, "%s: output '%s' is defined twice", label, nm);
        DL_TRY(dl_graph_add_value(r->g, nm, &out[i]));
    }
    for (int i = 0; i < n_attr; i++) DL_TRY(read_attr(r, label, np->attribute[i], &attrs[i]));
    /* Constant(value=tensor) is an initializer written as a node: make it one, so its value is
     * known to shape inference (exporters compute shapes from such constants). */
    bool dflt = !domain[0] || strcmp(domain, "ai.onnx") == 0;
    if (dflt && strcmp(op, "Constant") == 0 && n_in == 0 && n_out == 1 && out[0] && n_attr == 1 &&
        attrs[0].type == DL_ATTR_TENSOR && strcmp(attrs[0].name, "value") == 0) {
        dl_tensor *t = attrs[0].t;
        out[0]->constant = t;
        out[0]->type.dtype = t->dtype;
        out[0]->type.rank = t->rank;
        for (int i = 0; i < t->rank; i++) out[0]->type.dims[i] = t->dims[i];
        return DL_OK;
    }
    dl_status s = dl_graph_add_node(r->g, op, domain, opset_for(r, domain), np->name, n_in, in, n_out,
                                    out, n_attr, attrs, NULL);
    if (s != DL_OK) dl_ctx_prefix(r->ctx, "%s", r->path);
    return s;
}

static dl_status read_graph(reader *r) {
    Onnx__GraphProto *gp = r->model->graph;
    if (!gp) return dl_fail(r->ctx, DL_ERR_PARSE, "%s: model has no graph", r->path);
    dl_graph *g = r->g;
    g->name = dl_arena_strdup(&g->arena, gp->name ? gp->name : "");
    if (gp->n_sparse_initializer)
        return dl_fail(r->ctx, DL_ERR_UNSUPPORTED, "%s: sparse initializers are not supported", r->path);
    for (size_t i = 0; i < gp->n_initializer; i++) {
        dl_status s = add_initializer(r, gp->initializer[i]);
        if (s != DL_OK) {
            dl_ctx_prefix(r->ctx, "%s: initializer %zu", r->path, i);
            return s;
        }
    }
    for (size_t i = 0; i < gp->n_input; i++) {
        const Onnx__ValueInfoProto *vi = gp->input[i];
        if (!vi->name || !vi->name[0]) return dl_fail(r->ctx, DL_ERR_PARSE, "%s: graph input %zu has no name", r->path, i);
        if (dl_graph_find_value(g, vi->name)) continue; /* IR < 4 lists initializers as inputs */
        dl_value *v;
        DL_TRY(dl_graph_add_value(g, vi->name, &v));
        dl_status s = read_value_type(r, vi, &v->type);
        if (s != DL_OK) {
            dl_ctx_prefix(r->ctx, "%s: graph input", r->path);
            return s;
        }
        if (v->type.dtype == DL_DTYPE_UNDEFINED)
            return dl_fail(r->ctx, DL_ERR_PARSE, "%s: graph input '%s' has no tensor type", r->path, vi->name);
        v->is_input = true;
        if (dl_ptrvec_push(&g->inputs, v) != DL_OK) return dl_fail(r->ctx, DL_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < gp->n_node; i++) DL_TRY(read_node(r, gp->node[i], (int)i));
    for (size_t i = 0; i < gp->n_output; i++) {
        const Onnx__ValueInfoProto *vi = gp->output[i];
        dl_value *v = vi->name ? dl_graph_find_value(g, vi->name) : NULL;
        if (!v)
            return dl_fail(r->ctx, DL_ERR_PARSE, "%s: graph output '%s' is not produced by the graph",
                           r->path, vi->name ? vi->name : "");
        dl_type declared;
        dl_status s = read_value_type(r, vi, &declared);
        if (s != DL_OK) {
            dl_ctx_prefix(r->ctx, "%s: graph output", r->path);
            return s;
        }
        v->is_output = true;
        if (dl_ptrvec_push(&g->outputs, v) != DL_OK) return dl_fail(r->ctx, DL_ERR_NOMEM, "out of memory");
    }
    if (g->outputs.len == 0) return dl_fail(r->ctx, DL_ERR_PARSE, "%s: graph has no outputs", r->path);
    return DL_OK;
}

dl_status dl_load_onnx(dl_ctx *ctx, const char *path, dl_graph **out) {
    *out = NULL;
    reader r = {.ctx = ctx, .path = path};
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof tmp, "%s", path) >= (int)sizeof tmp)
        return dl_fail(ctx, DL_ERR_INVALID, "path is too long");
    snprintf(r.base_dir, sizeof r.base_dir, "%s", dirname(tmp));
    void *data;
    size_t size;
    DL_TRY(dl_map_file(ctx, path, MODEL_FILE_CAP, &data, &size));
    if (size == 0) return dl_fail(ctx, DL_ERR_PARSE, "%s: file is empty", path);
    if (!dl_pb_nesting_ok(&onnx__model_proto__descriptor, data, size)) {
        dl_unmap_file(data, size);
        return dl_fail(ctx, DL_ERR_LIMIT, "%s: messages are nested too deeply (corrupt or hostile file)",
                       path);
    }
    r.model = onnx__model_proto__unpack(&dl_onnx_allocator, size, data);
    dl_unmap_file(data, size);
    if (!r.model)
        return dl_fail(ctx, DL_ERR_PARSE,
                       "%s: not a valid ONNX model (protobuf decoding failed: truncated or corrupt file, or out of memory)",
                       path);
    dl_status s = DL_OK;
    r.g = dl_graph_new(ctx);
    if (!r.g) {
        s = DL_ERR_NOMEM;
        goto done;
    }
    r.g->ir_version = r.model->ir_version;
    r.g->opset = opset_for(&r, "");
    r.g->source_path = dl_arena_strdup(&r.g->arena, path);
    if (r.g->opset > 18)
        dl_warn("%s: opset %d is newer than dlcc knows (18); ops whose semantics changed may "
                "differ", path, r.g->opset);
    s = read_graph(&r);
    if (s == DL_OK) s = dl_graph_toposort(r.g);
    if (s == DL_OK) s = dl_graph_infer(r.g);
    if (s != DL_OK && ctx->msg[0] && !strstr(ctx->msg, path)) dl_ctx_prefix(ctx, "%s", path);
done:
    onnx__model_proto__free_unpacked(r.model, &dl_onnx_allocator);
    if (s != DL_OK) {
        dl_graph_free(r.g);
        return s;
    }
    *out = r.g;
    return DL_OK;
}
