/* match-layernorm.c — recognizes layer normalization written out in primitive ops, as
 * torch.onnx exports it below opset 17:
 *
 *   m = ReduceMean(x, last axis); d = x - m; v = ReduceMean(d^2 or d*d, last axis);
 *   y = d / Sqrt(v + eps) [* gamma] [+ beta]
 *
 * and replaces it by one LayerNormalization(x, gamma, beta, axis=-1, epsilon=eps) node, which
 * the compiler runs as a single kernel (two passes over each row instead of nine kernels and
 * three intermediate tensors). Float32 only; every intermediate must be read only inside the
 * pattern; gamma and beta must be constants of the normalized size. The old nodes are left
 * without readers for dce. */
#include "passes-impl.h"
#include "../ir/rewrite.h"

typedef struct ln_match {
    dl_value *x, *gamma, *beta, *out;
    float eps;
} ln_match;

/* The one live node reading v, if exactly one slot reads it and v is no graph output. */
static dl_node *only_reader(const dl_rewriter *rw, const dl_value *v, const char *op) {
    int slot;
    if (!v || v->is_output) return NULL;
    dl_node *n = dl_rw_single_use(rw, v, &slot);
    return n && dl_node_is(n, op) && n->n_out >= 1 && n->out[0] ? n : NULL;
}

/* ReduceMean over exactly the last axis of its input, keeping dims. */
static bool mean_over_last(const dl_node *n) {
    if (!dl_node_is(n, "ReduceMean") || !n->out[0] || dl_attr_int(n, "keepdims", 1) != 1)
        return false;
    const dl_type *t = &n->in[0]->type;
    if (t->dtype != DL_F32 || t->rank < 1) return false;
    int64_t axis;
    if (n->n_in > 1 && n->in[1]) { /* opset 18: axes as an input */
        const dl_tensor *a = n->in[1]->constant;
        if (!a || a->dtype != DL_I64 || a->numel != 1) return false;
        axis = ((const int64_t *)a->data)[0];
    } else {
        const int64_t *axes;
        if (dl_attr_ints(n, "axes", &axes) != 1) return false;
        axis = axes[0];
    }
    return axis == -1 || axis == t->rank - 1;
}

static bool scalar_f32(const dl_value *v, float *out) {
    if (!v || !v->constant || v->constant->dtype != DL_F32 || v->constant->numel != 1) return false;
    *out = ((const float *)v->constant->data)[0];
    return true;
}

/* A float32 constant of shape [C] (or a broadcastable [1,..,1,C]). */
static bool channel_const(const dl_value *v, int64_t C) {
    if (!v || !v->constant || v->constant->dtype != DL_F32 || v->constant->numel != C) return false;
    return v->constant->rank >= 1 && v->constant->dims[v->constant->rank - 1] == C;
}

/* The operand of a commutative binary node n that is not `self`. */
static dl_value *other_operand(const dl_node *n, const dl_value *self) {
    return n->n_in == 2 ? (n->in[0] == self ? n->in[1] : n->in[1] == self ? n->in[0] : NULL) : NULL;
}

static bool match_at(const dl_rewriter *rw, dl_node *m1, ln_match *m) {
    if (!mean_over_last(m1)) return false;
    dl_value *x = m1->in[0];
    const int64_t C = x->type.dims[x->type.rank - 1];
    if (C <= 0) return false;
    dl_node *sub = only_reader(rw, m1->out[0], "Sub");
    if (!sub || sub->in[0] != x || sub->in[1] != m1->out[0]) return false;
    dl_value *d = sub->out[0];
    if (d->is_output || dl_rw_uses(rw, d) != 2) return false;
    /* d's two readers: the square and the division */
    dl_node *sq = NULL, *div = NULL;
    for (int k = 0; k < rw->g->nodes.len; k++) {
        dl_node *n = rw->g->nodes.items[k];
        if (n->dead) continue;
        for (int i = 0; i < n->n_in; i++)
            if (n->in[i] == d) {
                if (dl_node_is(n, "Div") && n->in[0] == d && n->in[1] != d)
                    div = n;
                else if (dl_node_is(n, "Pow") && i == 0)
                    sq = n;
                else if (dl_node_is(n, "Mul") && n->in[0] == d && n->in[1] == d)
                    sq = n;
            }
    }
    float two;
    if (!sq || !div || (dl_node_is(sq, "Pow") && (!scalar_f32(sq->in[1], &two) || two != 2.0f)))
        return false;
    dl_node *m2 = only_reader(rw, sq->out[0], "ReduceMean");
    if (!m2 || !mean_over_last(m2)) return false;
    dl_node *add = only_reader(rw, m2->out[0], "Add");
    if (!add || !scalar_f32(other_operand(add, m2->out[0]), &m->eps)) return false;
    dl_node *sqrt = only_reader(rw, add->out[0], "Sqrt");
    if (!sqrt || div->in[1] != sqrt->out[0] || dl_rw_uses(rw, sqrt->out[0]) != 1 ||
        sqrt->out[0]->is_output)
        return false;
    m->x = x;
    m->out = div->out[0];
    m->gamma = m->beta = NULL;
    dl_node *mul = div->out[0]->is_output ? NULL : only_reader(rw, div->out[0], "Mul");
    if (mul && channel_const(other_operand(mul, div->out[0]), C)) {
        m->gamma = other_operand(mul, div->out[0]);
        m->out = mul->out[0];
        dl_node *ab = mul->out[0]->is_output ? NULL : only_reader(rw, mul->out[0], "Add");
        if (ab && channel_const(other_operand(ab, mul->out[0]), C)) {
            m->beta = other_operand(ab, mul->out[0]);
            m->out = ab->out[0];
        }
    }
    /* the output keeps x's shape (no broadcasting in through gamma/beta) */
    return dl_type_equal(&m->out->type, &x->type);
}

/* A [C] view of a constant gamma/beta, or a new [C] constant of ones when gamma is absent. */
static dl_status norm_param(dl_rewriter *rw, dl_value *v, int64_t C, float fill, dl_value **out) {
    if (v && v->constant->rank == 1) {
        *out = v;
        return DL_OK;
    }
    dl_tensor *t;
    DL_TRY(dl_tensor_new(rw->g->ctx, DL_F32, 1, &C, &t));
    float *dst = t->data;
    for (int64_t c = 0; c < C; c++) dst[c] = v ? ((const float *)v->constant->data)[c] : fill;
    return dl_rw_add_constant(rw, "ln_param", t, out);
}

dl_status dl_pass_match_layernorm(dl_pass_ctx *pc) {
    dl_rewriter rw;
    DL_TRY(dl_rw_begin(&rw, pc->g));
    dl_status s = DL_OK;
    const int n_nodes = pc->g->nodes.len;
    for (int k = 0; k < n_nodes && s == DL_OK; k++) {
        dl_node *n = pc->g->nodes.items[k];
        ln_match m;
        if (n->dead || !match_at(&rw, n, &m)) continue;
        const int64_t C = m.x->type.dims[m.x->type.rank - 1];
        dl_value *in[3];
        in[0] = m.x;
        if ((s = norm_param(&rw, m.gamma, C, 1.0f, &in[1])) != DL_OK) break;
        if (m.beta && (s = norm_param(&rw, m.beta, C, 0.0f, &in[2])) != DL_OK) break;
        dl_attr attrs[2] = {{.name = "axis", .type = DL_ATTR_INT, .i = -1},
                            {.name = "epsilon", .type = DL_ATTR_FLOAT, .f = m.eps}};
        dl_value *y;
        if ((s = dl_rw_add_node_at(&rw, "LayerNormalization", 17, m.beta ? 3 : 2, in, 2, attrs,
                                   &y)) != DL_OK)
            break;
        bool done;
        if ((s = dl_rw_replace(&rw, m.out, y, &done)) != DL_OK) break;
        pc->changes += done;
    }
    return dl_rw_end(&rw, s);
}
