/* builder.c — the public graph-building API. Each call adds a node, runs that op's shape
 * inference at once (so mistakes surface where they are made) and computes nothing. Errors are
 * sticky: after the first one every call returns NULL and dl_graph_status() reports it. */
#include "ir-impl.h"
#include "../ops/op-call.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>

static bool ok(dl_graph *g) { return g && g->status == DL_OK; }

static void *record(dl_graph *g, dl_status s) {
    if (s != DL_OK && g->status == DL_OK) g->status = s;
    return NULL;
}

dl_value *dl_input(dl_graph *g, const char *name, dl_dtype dtype, int rank, const int64_t *dims,
                   const char *const *sym_names) {
    if (!ok(g)) return NULL;
    if (rank < 0 || rank > DL_MAX_RANK || (unsigned)dtype >= DL_DTYPE_COUNT || dtype == DL_DTYPE_UNDEFINED)
        return record(g, dl_fail(g->ctx, DL_ERR_INVALID, "dl_input '%s': bad dtype or rank %d", name, rank));
    dl_value *v;
    dl_status s = dl_graph_add_value(g, name, &v);
    if (s != DL_OK) return record(g, s);
    v->type.dtype = dtype;
    v->type.rank = rank;
    for (int i = 0; i < rank; i++)
        v->type.dims[i] = dims[i] >= 0 ? dims[i]
                                       : dl_graph_sym(g, (sym_names && sym_names[i]) ? sym_names[i] : "?");
    v->is_input = true;
    if (dl_ptrvec_push(&g->inputs, v) != DL_OK) return record(g, dl_fail(g->ctx, DL_ERR_NOMEM, "out of memory"));
    return v;
}

dl_value *dl_constant(dl_graph *g, const char *name, dl_tensor *t) {
    if (!ok(g) || !t) {
        dl_tensor_free(t);
        return g ? record(g, t ? g->status : dl_fail(g->ctx, DL_ERR_INVALID, "dl_constant: NULL tensor")) : NULL;
    }
    dl_status s = dl_graph_own_tensor(g, t);
    if (s != DL_OK) return record(g, s);
    dl_value *v;
    s = dl_graph_add_value(g, name ? name : dl_graph_fresh_name(g, "const"), &v);
    if (s != DL_OK) return record(g, s);
    v->constant = t;
    v->type.dtype = t->dtype;
    v->type.rank = t->rank;
    for (int i = 0; i < t->rank; i++) v->type.dims[i] = t->dims[i];
    return v;
}

dl_value *dl_parameter(dl_graph *g, const char *name, dl_tensor *t) {
    dl_value *v = dl_constant(g, name, t);
    if (v) v->is_initializer = true;
    return v;
}

void dl_output(dl_graph *g, dl_value *v, const char *name) {
    DL_UNUSED(name); /* values keep the name they were built with */
    if (!ok(g)) return;
    if (!v) {
        record(g, dl_fail(g->ctx, DL_ERR_INVALID, "dl_output: NULL value"));
        return;
    }
    v->is_output = true;
    if (dl_ptrvec_push(&g->outputs, v) != DL_OK) record(g, dl_fail(g->ctx, DL_ERR_NOMEM, "out of memory"));
}

/* Parses "key=value" against the op row's declared attribute type. */
static dl_status parse_attr(dl_graph *g, const dl_op_def *op, const char *text, dl_attr *a) {
    const char *eq = strchr(text, '=');
    if (!eq || eq == text)
        return dl_fail(g->ctx, DL_ERR_INVALID, "%s: attribute '%s' is not key=value", op->name, text);
    char key[128];
    size_t klen = (size_t)(eq - text);
    if (klen >= sizeof key) return dl_fail(g->ctx, DL_ERR_INVALID, "%s: attribute name too long", op->name);
    memcpy(key, text, klen);
    key[klen] = 0;
    const char *val = eq + 1;
    dl_attr_type type = DL_ATTR_UNDEFINED;
    for (const dl_attr_spec *s = op->attrs; s && s->name; s++)
        if (strcmp(s->name, key) == 0) type = s->type;
    if (type == DL_ATTR_UNDEFINED)
        return dl_fail(g->ctx, DL_ERR_INVALID, "%s has no attribute '%s'", op->name, key);
    a->name = dl_arena_strdup(&g->arena, key);
    a->type = type;
    char *end;
    errno = 0;
    switch (type) {
    case DL_ATTR_INT: a->i = strtoll(val, &end, 10); break;
    case DL_ATTR_FLOAT: a->f = strtof(val, &end); break;
    case DL_ATTR_STRING:
        a->s = dl_arena_strdup(&g->arena, val);
        a->s_len = strlen(val);
        return a->s ? DL_OK : dl_fail(g->ctx, DL_ERR_NOMEM, "out of memory");
    case DL_ATTR_INTS:
    case DL_ATTR_FLOATS: {
        if (*val != '[') goto bad;
        int cap = 1;
        for (const char *p = val; *p; p++) cap += *p == ',';
        if (type == DL_ATTR_INTS) a->ints = dl_arena_alloc(&g->arena, sizeof(int64_t) * (size_t)cap);
        else a->floats = dl_arena_alloc(&g->arena, sizeof(float) * (size_t)cap);
        if (!a->ints && !a->floats) return dl_fail(g->ctx, DL_ERR_NOMEM, "out of memory");
        const char *p = val + 1;
        while (isspace((unsigned char)*p)) p++;
        while (*p != ']') {
            if (a->n >= cap) goto bad;
            if (type == DL_ATTR_INTS) a->ints[a->n++] = strtoll(p, &end, 10);
            else a->floats[a->n++] = strtof(p, &end);
            if (end == p) goto bad;
            p = end;
            while (isspace((unsigned char)*p)) p++;
            if (*p == ',') p++;
            else if (*p != ']') goto bad;
        }
        end = (char *)p + 1;
        break;
    }
    case DL_ATTR_STRINGS: { /* "[a, b, c]": the items trimmed of spaces, none of them empty */
        if (*val != '[' || !strchr(val, ']') || strchr(val, ']')[1]) goto bad;
        int cap = 1;
        for (const char *p = val; *p; p++) cap += *p == ',';
        a->strings = dl_arena_alloc(&g->arena, sizeof(char *) * (size_t)cap);
        if (!a->strings) return dl_fail(g->ctx, DL_ERR_NOMEM, "out of memory");
        const char *p = val + 1;
        while (isspace((unsigned char)*p)) p++;
        while (*p != ']') {
            const char *stop = p;
            while (*stop != ',' && *stop != ']') stop++;
            const char *last = stop;
            while (last > p && isspace((unsigned char)last[-1])) last--;
            if (last == p || a->n >= cap) goto bad;
            char *item = dl_arena_alloc(&g->arena, (size_t)(last - p) + 1);
            if (!item) return dl_fail(g->ctx, DL_ERR_NOMEM, "out of memory");
            memcpy(item, p, (size_t)(last - p));
            item[last - p] = 0;
            a->strings[a->n++] = item;
            p = *stop == ',' ? stop + 1 : stop;
            while (isspace((unsigned char)*p)) p++;
            if (*stop == ',' && *p == ']') goto bad; /* "[a,]" */
        }
        return DL_OK;
    }
    default: goto bad;
    }
    if (errno || *end) goto bad;
    return DL_OK;
bad:
    return dl_fail(g->ctx, DL_ERR_INVALID, "%s: cannot parse attribute '%s'", op->name, text);
}

dl_status dl_add_node(dl_graph *g, const char *op_name, int n_in, dl_value *const *in, int n_out,
                      dl_value **out, int n_attr, const char *const *attrs) {
    if (!g) return DL_ERR_INVALID;
    return dl_add_node_ex(g, NULL, op_name, g->opset, n_in, in, n_out, out, n_attr, attrs, 0, NULL);
}

dl_status dl_add_node_ex(dl_graph *g, const char *domain, const char *op_name, int opset, int n_in,
                         dl_value *const *in, int n_out, dl_value **out, int n_attr,
                         const char *const *attrs, int n_copy, const dl_attr *copy) {
    if (!g) return DL_ERR_INVALID;
    if (!ok(g)) return g->status;
    for (int i = 0; i < n_out; i++) out[i] = NULL;
    const dl_op_def *op = dl_op_find(domain, op_name);
    if (!op) return record(g, dl_fail(g->ctx, DL_ERR_UNSUPPORTED, "unknown op '%s'", op_name)), g->status;
    if (n_out < 1 || n_out > 64 || n_attr < 0 || n_attr > 64 || n_copy < 0 || n_copy > 64)
        return record(g, dl_fail(g->ctx, DL_ERR_INVALID, "%s: bad output or attribute count", op_name)), g->status;
    dl_attr *a = dl_arena_alloc(&g->arena, sizeof(dl_attr) * (size_t)(n_attr + n_copy + 1));
    if (!a) return record(g, dl_fail(g->ctx, DL_ERR_NOMEM, "out of memory")), g->status;
    dl_status s = DL_OK;
    for (int i = 0; i < n_attr && s == DL_OK; i++) s = parse_attr(g, op, attrs[i], &a[i]);
    /* copied attributes that the parsed ones do not override (arrays shared: same graph arena) */
    int na = n_attr;
    for (int i = 0; i < n_copy && s == DL_OK; i++) {
        bool given = false;
        for (int j = 0; j < n_attr; j++) given = given || strcmp(a[j].name, copy[i].name) == 0;
        if (!given) a[na++] = copy[i];
    }
    for (int i = 0; i < n_out && s == DL_OK; i++)
        s = dl_graph_add_value(g, dl_graph_fresh_name(g, op_name), &out[i]);
    dl_node *n = NULL;
    if (s == DL_OK)
        s = dl_graph_add_node(g, op_name, domain, opset, NULL, n_in, in, n_out, out, na, a, &n);
    if (s == DL_OK) {
        const dl_type *in_ty[64];
        const dl_tensor *in_val[64];
        dl_type out_ty[64];
        if (n_in > 64) s = dl_fail(g->ctx, DL_ERR_INVALID, "%s: too many inputs", op_name);
        for (int i = 0; i < n_in && s == DL_OK; i++) {
            in_ty[i] = in[i] ? &in[i]->type : NULL;
            in_val[i] = in[i] ? in[i]->constant : NULL;
        }
        if (s == DL_OK) s = dl_node_infer(g->ctx, g, n, in_ty, in_val, out_ty);
        for (int i = 0; i < n_out && s == DL_OK; i++) out[i]->type = out_ty[i];
    }
    if (s != DL_OK) {
        for (int i = 0; i < n_out; i++) out[i] = NULL;
        record(g, s);
    }
    return s;
}

/* Adds a one-output node; attrs is "k=v;k=v", split into "k=v" strings in a scratch buffer. */
static dl_value *op_n(dl_graph *g, const char *op, int n_in, dl_value *const *in, const char *attrs) {
    if (!ok(g)) return NULL; /* callers have checked their required operands */
    char buf[1024];
    const char *list[32];
    int n_attr = 0;
    if (attrs && attrs[0]) {
        if (strlen(attrs) >= sizeof buf)
            return record(g, dl_fail(g->ctx, DL_ERR_INVALID, "%s: attribute string too long", op));
        strcpy(buf, attrs);
        for (char *tok = strtok(buf, ";"); tok && n_attr < 32; tok = strtok(NULL, ";")) list[n_attr++] = tok;
    }
    dl_value *out;
    if (dl_add_node(g, op, n_in, in, 1, &out, n_attr, list) != DL_OK) return NULL;
    return out;
}

dl_value *dl_op1(dl_graph *g, const char *op, dl_value *a, const char *attrs) {
    if (g && !a) return record(g, ok(g) ? dl_fail(g->ctx, DL_ERR_INVALID, "%s: NULL operand", op) : g->status);
    return op_n(g, op, 1, &a, attrs);
}

dl_value *dl_op2(dl_graph *g, const char *op, dl_value *a, dl_value *b, const char *attrs) {
    if (g && (!a || !b))
        return record(g, ok(g) ? dl_fail(g->ctx, DL_ERR_INVALID, "%s: NULL operand", op) : g->status);
    dl_value *in[2] = {a, b};
    return op_n(g, op, 2, in, attrs);
}

dl_value *dl_add(dl_graph *g, dl_value *a, dl_value *b) { return dl_op2(g, "Add", a, b, NULL); }
dl_value *dl_sub(dl_graph *g, dl_value *a, dl_value *b) { return dl_op2(g, "Sub", a, b, NULL); }
dl_value *dl_mul(dl_graph *g, dl_value *a, dl_value *b) { return dl_op2(g, "Mul", a, b, NULL); }
dl_value *dl_div(dl_graph *g, dl_value *a, dl_value *b) { return dl_op2(g, "Div", a, b, NULL); }
dl_value *dl_matmul(dl_graph *g, dl_value *a, dl_value *b) { return dl_op2(g, "MatMul", a, b, NULL); }
dl_value *dl_relu(dl_graph *g, dl_value *x) { return dl_op1(g, "Relu", x, NULL); }
dl_value *dl_sigmoid(dl_graph *g, dl_value *x) { return dl_op1(g, "Sigmoid", x, NULL); }
dl_value *dl_tanh(dl_graph *g, dl_value *x) { return dl_op1(g, "Tanh", x, NULL); }

dl_value *dl_softmax(dl_graph *g, dl_value *x, int axis) {
    char a[64];
    snprintf(a, sizeof a, "axis=%d", axis);
    return dl_op1(g, "Softmax", x, a);
}

dl_value *dl_conv2d(dl_graph *g, dl_value *x, dl_value *w, dl_value *b, int stride, int pad) {
    if (g && (!x || !w))
        return record(g, ok(g) ? dl_fail(g->ctx, DL_ERR_INVALID, "Conv: NULL operand") : g->status);
    char a[128];
    snprintf(a, sizeof a, "strides=[%d,%d];pads=[%d,%d,%d,%d]", stride, stride, pad, pad, pad, pad);
    dl_value *in[3] = {x, w, b};
    return op_n(g, "Conv", b ? 3 : 2, in, a);
}

dl_value *dl_gemm(dl_graph *g, dl_value *a, dl_value *b, dl_value *c, int trans_b) {
    if (g && (!a || !b))
        return record(g, ok(g) ? dl_fail(g->ctx, DL_ERR_INVALID, "Gemm: NULL operand") : g->status);
    dl_value *in[3] = {a, b, c};
    return op_n(g, "Gemm", c ? 3 : 2, in, trans_b ? "transB=1" : NULL);
}

dl_value *dl_flatten(dl_graph *g, dl_value *x, int axis) {
    char a[64];
    snprintf(a, sizeof a, "axis=%d", axis);
    return dl_op1(g, "Flatten", x, a);
}

dl_value *dl_maxpool2d(dl_graph *g, dl_value *x, int kernel, int stride) {
    char a[128];
    snprintf(a, sizeof a, "kernel_shape=[%d,%d];strides=[%d,%d]", kernel, kernel, stride, stride);
    return dl_op1(g, "MaxPool", x, a);
}

dl_value *dl_global_avgpool(dl_graph *g, dl_value *x) { return dl_op1(g, "GlobalAveragePool", x, NULL); }
