/* fuse.c — fusion grouping, the last pass of the inference pipeline. First, every attention
 * pattern (MatMul(q, k^T), an optional scalar scale, an optional additive mask or causal Where,
 * Softmax over the last axis, MatMul with v) becomes one group together with the Transposes and
 * scalar scales around its operands and result, when each of those values has no other use.
 * Next, a MatMul takes in the Transpose giving its A and/or B when that Transpose only swaps
 * the last two axes and feeds nothing else: the GEMM reads the Transpose's input with its trans
 * flag set, so the transposed copy is never made (autodiff writes x^T y and x y^T this way).
 * Then greedy over the remaining nodes in topological order:
 *  - a Conv / Gemm / MatMul absorbs the chain that follows it when each link is its only
 *    consumer: a constant per-channel (per-column) bias Add, then a same-shape residual Add, then
 *    one activation or a GELU spelled out in nodes (match_gelu, match_gelu_tanh) — the runtime
 *    GEMM applies these while the output tile is in cache;
 *  - an elementwise node joins the elementwise group that computes one of its inputs, so chains
 *    become one loop nest; an input also read elsewhere stays a result of the group (one pass,
 *    several results), and the groups computing its other inputs are merged in, while nothing
 *    outside reads a result before the node and all results share its shape (joinable_group);
 *  - every other node is a group of its own.
 * Values inside a group are never materialized. */
#include "fuse.h"
#include "../codegen/codegen-impl.h"
#include "../codegen/emit-params.h"

typedef struct fuser {
    dl_graph *g;
    dl_fusion *f;
    /* by value id v: the positions of the nodes reading it, once per input that does, in node
     * order, are cons[cons_at[v] .. cons_at[v + 1]) (dl_reader_lists) */
    int *cons_at, *cons;
    int *group_of; /* by node position: group index or -1 */
    int *last_pos; /* by group: position of its last node */
    int cap;
} fuser;

/* An activation a GEMM or convolution can apply to its output tile: its op's row says which
 * runtime activation it is, if any (dl_op_def.epilogue). */
static bool is_activation(const dl_node *n) {
    float a = 0.0f, b = 0.0f;
    return n->op && n->op->epilogue && n->out[0] && n->out[0]->type.dtype == DL_F32 &&
           n->op->epilogue(n, &a, &b) != DLRT_ACT_NONE;
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

/* How many node inputs read v. */
static int n_uses(const fuser *fu, const dl_value *v) {
    return fu->cons_at[v->id + 1] - fu->cons_at[v->id];
}

/* The position of the first node reading v (which some node does). */
static int first_use(const fuser *fu, const dl_value *v) {
    return fu->cons[fu->cons_at[v->id]];
}

/* The single consumer of v when v feeds exactly one node input and is not a graph output. */
static dl_node *sole_consumer(fuser *fu, const dl_value *v) {
    if (v->is_output || n_uses(fu, v) != 1) return NULL;
    return fu->g->nodes.items[first_use(fu, v)];
}

static bool scalar_const(const dl_value *v, float *out) {
    if (!v || !v->constant || v->constant->dtype != DL_F32 || v->constant->numel != 1) return false;
    *out = ((const float *)v->constant->data)[0];
    return true;
}

/* The sole consumer of v when it is an op of that name, not yet in a group, keeping v's type. */
static dl_node *chain_next(fuser *fu, const dl_value *v, const char *op) {
    dl_node *c = sole_consumer(fu, v);
    if (!c || fu->group_of[c->id] >= 0 || !dl_node_is(c, op) || !c->out[0] ||
        !same_type(&c->out[0]->type, &v->type))
        return NULL;
    return c;
}

/* chain_next whose other input is the scalar constant want. */
static dl_node *chain_link(fuser *fu, const dl_value *v, const char *op, float want) {
    dl_node *c = chain_next(fu, v, op);
    float k;
    return c && scalar_const(other_input(c, v), &k) && k == want ? c : NULL;
}

/* Both GELU chains end alike: v (erf's or tanh's result) + 1, times x, times 0.5; tail[] gets
 * the Add and the two Muls. */
static bool match_gelu_end(fuser *fu, const dl_value *v, const dl_value *x, dl_node **tail) {
    dl_node *one = chain_link(fu, v, "Add", 1.0f);
    dl_node *prod = one ? chain_next(fu, one->out[0], "Mul") : NULL;
    if (!prod || other_input(prod, one->out[0]) != x) return false;
    dl_node *half = chain_link(fu, prod->out[0], "Mul", 0.5f);
    if (!half) return false;
    tail[0] = one, tail[1] = prod, tail[2] = half;
    return true;
}

/* GELU as torch exports nn.GELU(): y = x * (erf(x / d) + 1) * 0.5, five nodes reading x from a
 * Div and a Mul and nothing else (BERT's feed-forward layers). chain[] gets Div, Erf, Add, Mul,
 * Mul and *d the divisor (sqrt(2)); the GEMM applies it to its rows as DLRT_ACT_GELU, with the
 * runtime's own erf (dlrt_erf, vecmath.h: within 6 ulp of erf, at a third of the cost of glibc's
 * vector erff; an unfused chain's Erf calls it too; dlrt-impl.h says what that means for GELU's
 * small negative values). */
static bool match_gelu(fuser *fu, dl_value *x, dl_node **chain, float *d) {
    if (x->is_output || n_uses(fu, x) != 2 || x->type.dtype != DL_F32) return false;
    /* x's two readers come at or after its first one, in topological order */
    dl_node *div = NULL;
    for (int k = first_use(fu, x); k < fu->g->nodes.len && !div; k++) {
        dl_node *n = fu->g->nodes.items[k];
        if (dl_node_is(n, "Div") && n->n_in == 2 && n->in[0] == x && n->in[1] != x &&
            fu->group_of[n->id] < 0 && scalar_const(n->in[1], d) && n->out[0] &&
            same_type(&n->out[0]->type, &x->type))
            div = n;
    }
    if (!div) return false;
    dl_node *erf = chain_next(fu, div->out[0], "Erf");
    if (!erf || !match_gelu_end(fu, erf->out[0], x, chain + 2)) return false;
    chain[0] = div, chain[1] = erf;
    return true;
}

/* GELU's tanh form spelled out as GPT-2 implementations write it: y = x * (1 + tanh(a * (x + b *
 * x^3))) * 0.5, a = sqrt(2/pi) and b = 0.044715, with x^3 either x * (x * x) or Pow(x, 3), and
 * nothing else reading x. chain[] gets the n (9 or 8) nodes in order, the last the final Mul;
 * the GEMM applies it to its rows as DLRT_ACT_GELU_TANH (tanhf, in the same order of operations:
 * an unfused chain costs GPT-2 a pass over each 128 x 3072 feed-forward activation). */
static bool match_gelu_tanh(fuser *fu, dl_value *x, dl_node **chain, int *n, float *a, float *b) {
    const int uses = n_uses(fu, x);
    if (x->is_output || x->type.dtype != DL_F32 || (uses != 3 && uses != 5)) return false;
    dl_node *cube = NULL;
    int k = 0;
    for (int i = first_use(fu, x); i < fu->g->nodes.len && !cube; i++) {
        dl_node *c = fu->g->nodes.items[i];
        float e;
        if (fu->group_of[c->id] >= 0 || !c->out[0] || !same_type(&c->out[0]->type, &x->type))
            continue;
        if (uses == 3 && dl_node_is(c, "Pow") && c->n_in == 2 && c->in[0] == x &&
            scalar_const(c->in[1], &e) && e == 3.0f) {
            chain[k++] = cube = c;
        } else if (uses == 5 && dl_node_is(c, "Mul") && c->n_in == 2 && c->in[0] == x &&
                   c->in[1] == x) {
            dl_node *m = chain_next(fu, c->out[0], "Mul");
            if (m && other_input(m, c->out[0]) == x) chain[k++] = c, chain[k++] = cube = m;
        }
    }
    if (!cube) return false;
    dl_node *scaled = chain_next(fu, cube->out[0], "Mul");
    if (!scaled || !scalar_const(other_input(scaled, cube->out[0]), b)) return false;
    dl_node *inner = chain_next(fu, scaled->out[0], "Add");
    if (!inner || other_input(inner, scaled->out[0]) != x) return false;
    /* (a = 0 would read as "the defaults" to the runtime) */
    dl_node *arg = chain_next(fu, inner->out[0], "Mul");
    if (!arg || !scalar_const(other_input(arg, inner->out[0]), a) || *a == 0.0f) return false;
    dl_node *t = chain_next(fu, arg->out[0], "Tanh");
    if (!t || !match_gelu_end(fu, t->out[0], x, chain + k + 4)) return false;
    chain[k++] = scaled, chain[k++] = inner, chain[k++] = arg, chain[k++] = t;
    *n = k + 3;
    return true;
}

static bool fits_at(const fuser *fu, int gk, int gj, const dl_node *n);
static int ew_producer(const fuser *fu, const dl_node *n, int i);

/* Whether the residual Add c (of a product's result and o) is left to the elementwise pass that
 * computes o, where o fits its results at c's place (fits_at) or is read by c alone, and c's
 * result goes on into elementwise ops: that pass then reads the product once and writes the
 * end of the chain, where as the product's residual, o was written, read back by the product,
 * and its sum written and read again. SGD's weight decay (the gradient plus wd times the weight,
 * then the momentum and the update) becomes one pass after the weight gradient's product. */
static bool residual_joins_pass(fuser *fu, const dl_node *c, const dl_value *o) {
    const dl_node *next = sole_consumer(fu, c->out[0]);
    if (!next || dl_node_kernel_kind(next) != DL_G_EW || !o->producer ||
        dl_node_kernel_kind(o->producer) != DL_G_EW)
        return false;
    /* (o's elementwise node may come after the product, not grouped yet: then c, its only
     * reader, will start its pass) */
    if (fu->group_of[o->producer->id] < 0) return sole_consumer(fu, o) == c;
    for (int i = 0; i < c->n_in; i++)
        if (c->in[i] == o) {
            const int g = ew_producer(fu, c, i);
            return g >= 0 && fits_at(fu, g, -1, c);
        }
    return false;
}

static dl_status absorb_epilogue(fuser *fu, int gi) {
    dl_group *gr = &fu->f->groups[gi];
    bool conv = gr->kind == DL_G_CONV;
    const dl_node *anchor = dl_group_anchor(gr);
    /* Conv and Gemm may carry their own bias input (MatMul has none) */
    bool has_bias = gr->kind != DL_G_MATMUL && anchor->n_in > 2 && anchor->in[2];
    dl_value *cur = anchor->out[0];
    for (;;) {
        dl_node *chain[9];
        float ca = 0.0f, cb = 0.0f;
        int n_chain = 0, chain_act = DLRT_ACT_NONE;
        if (!gr->epi.act && match_gelu(fu, cur, chain, &ca))
            n_chain = 5, chain_act = DLRT_ACT_GELU;
        else if (!gr->epi.act && match_gelu_tanh(fu, cur, chain, &n_chain, &ca, &cb))
            chain_act = DLRT_ACT_GELU_TANH;
        if (chain_act != DLRT_ACT_NONE) {
            for (int k = 0; k < n_chain; k++)
                DL_TRY(add_node(fu, gi, chain[k], chain[k]->id, false));
            gr = &fu->f->groups[gi];
            gr->epi.act = chain[n_chain - 1];
            gr->epi.chain_act = chain_act;
            gr->epi.chain_a = ca, gr->epi.chain_b = cb;
            break;
        }
        dl_node *c = sole_consumer(fu, cur);
        if (!c || fu->group_of[c->id] >= 0) break;
        if (dl_node_is(c, "Add") && !gr->epi.act) {
            dl_value *o = other_input(c, cur);
            if (!o || !same_type(&c->out[0]->type, &cur->type)) break;
            if (!has_bias && !gr->epi.residual && is_bias(o, cur, conv)) {
                gr->epi.bias = o;
                has_bias = true;
            } else if (!gr->epi.residual && same_type(&o->type, &cur->type) &&
                       !residual_joins_pass(fu, c, o)) {
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

/* ---- attention: MatMul(q, k') [Mul/Div scalar] [Add mask | causal Where] Softmax MatMul(., v) ---- */

#define ATTN_MAX_NODES 16

typedef struct attn_match {
    dl_node *nodes[ATTN_MAX_NODES];
    int n;
    dl_gattn a;
} attn_match;

static bool f32_ranked(const dl_value *v, int rank) {
    return v && v->type.dtype == DL_F32 && v->type.rank == rank;
}

/* The producer of v when the pattern may absorb it: v feeds only `by`, is no graph output, and
 * the producer is not in a group yet. */
static dl_node *absorbable(fuser *fu, const dl_value *v, const dl_node *by) {
    dl_node *p = v ? v->producer : NULL;
    if (!p || sole_consumer(fu, v) != by || fu->group_of[p->id] >= 0) return NULL;
    return p;
}

static bool attn_push(attn_match *m, dl_node *n) {
    if (m->n == ATTN_MAX_NODES) return false;
    m->nodes[m->n++] = n;
    return true;
}

/* A Transpose of a rank-`rank` value with a valid perm (absent: reversed dims). */
static bool valid_transpose(const dl_node *n, int rank) {
    if (!dl_node_is(n, "Transpose") || !f32_ranked(n->in[0], rank) || !f32_ranked(n->out[0], rank))
        return false;
    const int64_t *perm;
    int np = dl_attr_ints(n, "perm", &perm);
    if (np < 0) return true;
    bool seen[DL_MAX_RANK] = {false};
    if (np != rank) return false;
    for (int i = 0; i < np; i++) {
        if (perm[i] < 0 || perm[i] >= rank || seen[perm[i]]) return false;
        seen[perm[i]] = true;
    }
    return true;
}

/* n = Mul(x, c), Mul(c, x) or Div(x, c) with a one-element constant c that leaves x's type as it
 * is: returns x and multiplies *scale by c (or 1/c). */
static dl_value *scaled_input(const dl_node *n, float *scale) {
    float c;
    dl_value *x = NULL;
    if (n->n_in != 2 || !n->in[0] || !n->in[1]) return NULL;
    if (dl_node_is(n, "Mul")) {
        if (scalar_const(n->in[1], &c)) x = n->in[0];
        else if (scalar_const(n->in[0], &c)) x = n->in[1];
    } else if (dl_node_is(n, "Div") && scalar_const(n->in[1], &c)) {
        x = n->in[0];
        c = 1.0f / c;
    }
    if (!x || x->constant || !dl_type_equal(&x->type, &n->out[0]->type)) return NULL;
    *scale *= c;
    return x;
}

/* Walks up from operand v of `by`, absorbing at most one Transpose and (when scalable) one
 * scalar scale, in either order. Returns the value the kernel reads (NULL: too many nodes). */
static dl_value *attn_operand(fuser *fu, attn_match *m, dl_value *v, dl_node *by,
                              const dl_node **tr, bool scalable, int rank) {
    bool scaled = !scalable;
    for (dl_node *p; (p = absorbable(fu, v, by)) != NULL; by = p) {
        dl_value *x = NULL;
        if (!*tr && valid_transpose(p, rank)) {
            *tr = p;
            x = p->in[0];
        } else if (!scaled && (x = scaled_input(p, &m->a.scale)) != NULL) {
            scaled = true;
        }
        if (!x) break;
        if (!attn_push(m, p)) return NULL;
        v = x;
    }
    return v;
}

/* Where(cond, s, fill) or Where(cond, fill, s) that keeps exactly the causal keys of s, whose
 * type is s_type ([..., tq, tk] with tq <= tk known): cond is a boolean constant broadcast over
 * the leading dims, fill a constant so negative that exp(fill - max) vanishes like exp(-inf). */
static dl_value *causal_input(const dl_node *n, const dl_type *s_type) {
    if (!dl_node_is(n, "Where") || n->n_in != 3 || !n->in[0] || !n->in[1] || !n->in[2]) return NULL;
    const dl_tensor *c = n->in[0]->constant;
    int r = s_type->rank;
    int64_t tq = s_type->dims[r - 2], tk = s_type->dims[r - 1];
    if (!c || c->dtype != DL_BOOL || c->rank < 2 || c->rank > r || tq < 0 || tq > tk) return NULL;
    for (int d = 0; d < c->rank - 2; d++)
        if (c->dims[d] != 1) return NULL;
    if (c->dims[c->rank - 2] != tq || c->dims[c->rank - 1] != tk) return NULL;
    float fill;
    int si = scalar_const(n->in[2], &fill) ? 1 : scalar_const(n->in[1], &fill) ? 2 : 0;
    if (!si || !(fill <= -1e4f) || !dl_type_equal(&n->in[si]->type, s_type) ||
        !dl_type_equal(&n->out[0]->type, s_type))
        return NULL;
    const uint8_t *cond = c->data;
    for (int64_t i = 0; i < tq; i++)
        for (int64_t j = 0; j < tk; j++) {
            bool kept = si == 1 ? cond[i * tk + j] != 0 : cond[i * tk + j] == 0;
            if (kept != (j <= i + tk - tq)) return NULL;
        }
    return n->in[si];
}

/* Add(s, mask) or Add(mask, s): the side that continues the chain is the one computed by a
 * node the pattern can take (a scale or the MatMul); the mask broadcasts to s's type. */
static dl_value *masked_input(fuser *fu, const dl_node *n, dl_value **mask) {
    if (!dl_node_is(n, "Add") || n->n_in != 2 || !n->in[0] || !n->in[1]) return NULL;
    const dl_type *t = &n->out[0]->type;
    for (int k = 0; k < 2; k++) {
        dl_value *s = n->in[k], *mk = n->in[1 - k];
        dl_node *p = absorbable(fu, s, n);
        if (!p || !dl_type_equal(&s->type, t) || s == mk) continue;
        if (!dl_node_is(p, "MatMul") && !dl_node_is(p, "Mul") && !dl_node_is(p, "Div")) continue;
        if (mk->type.dtype != DL_F32 || mk->type.rank < 0 || mk->type.rank > t->rank) return NULL;
        for (int d = 0; d < mk->type.rank; d++) {
            int64_t md = mk->type.dims[d], sd = t->dims[t->rank - mk->type.rank + d];
            if (md != 1 && md != sd) return NULL;
        }
        *mask = mk;
        return s;
    }
    return NULL;
}

static bool softmax_last_axis(const dl_node *sm, int rank) {
    int64_t axis = dl_attr_int(sm, "axis", sm->opset >= 13 ? -1 : 1);
    if (axis < 0) axis += rank;
    return axis == rank - 1;
}

/* The operand's batch dims equal the scores' or are 1 (broadcast); its matrix is rows x cols. */
static bool attn_dims_ok(const dl_value *v, const dl_type *s, int64_t rows, int64_t cols) {
    int r = s->rank;
    for (int d = 0; d < r - 2; d++)
        if (v->type.dims[d] != s->dims[d] && v->type.dims[d] != 1) return false;
    return v->type.dims[r - 2] == rows && v->type.dims[r - 1] == cols;
}

/* Absorbs a Transpose that is the only consumer of the result y. */
static bool attn_output(fuser *fu, attn_match *m, dl_value *y, int rank) {
    dl_node *yt = sole_consumer(fu, y);
    if (!yt || fu->group_of[yt->id] >= 0 || !valid_transpose(yt, rank) || yt->n_out != 1) return true;
    m->a.y_tr = yt;
    return attn_push(m, yt);
}

/* The whole pattern around Softmax node sm, or false (its nodes then fuse as usual). */
static bool match_attention(fuser *fu, dl_node *sm, attn_match *m) {
    memset(m, 0, sizeof *m);
    m->a.scale = 1.0f;
    dl_value *p = sm->out[0];
    int r = p ? p->type.rank : -1;
    if (!dl_node_is(sm, "Softmax") || fu->group_of[sm->id] >= 0 || r < 2 || r > 4 ||
        !f32_ranked(p, r) || !softmax_last_axis(sm, r) || sm->n_out != 1)
        return false;
    dl_node *pv = sole_consumer(fu, p);
    if (!pv || !dl_node_is(pv, "MatMul") || pv->n_in != 2 || pv->in[0] != p || pv->in[1] == p ||
        fu->group_of[pv->id] >= 0)
        return false;
    attn_push(m, sm);
    attn_push(m, pv);
    /* from the softmax back to the first MatMul */
    dl_node *n = absorbable(fu, sm->in[0], sm);
    const dl_type *st = &p->type;
    dl_value *x = NULL;
    if (n && (x = causal_input(n, st)) != NULL) m->a.causal = true;
    else if (n) x = masked_input(fu, n, &m->a.mask);
    if (n && x) {
        attn_push(m, n);
        n = absorbable(fu, x, n);
    }
    if (n && (x = scaled_input(n, &m->a.scale)) != NULL) {
        attn_push(m, n);
        n = absorbable(fu, x, n);
    }
    if (!n || !dl_node_is(n, "MatMul") || n->n_in != 2 || !dl_type_equal(&n->out[0]->type, st))
        return false;
    dl_node *qk = n;
    attn_push(m, qk);
    m->a.qk = qk;
    m->a.pv = pv;
    dl_value *qv = qk->in[0], *kv = qk->in[1], *vv = pv->in[1], *y = pv->out[0];
    if (!f32_ranked(qv, r) || !f32_ranked(kv, r) || !f32_ranked(vv, r) || !f32_ranked(y, r))
        return false;
    int64_t tq = st->dims[r - 2], tk = st->dims[r - 1], d = qv->type.dims[r - 1];
    int64_t dv = vv->type.dims[r - 1];
    if (!attn_dims_ok(qv, st, tq, d) || !attn_dims_ok(kv, st, d, tk) || !attn_dims_ok(vv, st, tk, dv))
        return false;
    for (int i = 0; i < r; i++)
        if (y->type.dims[i] != (i < r - 1 ? st->dims[i] : dv)) return false;
    m->a.q = attn_operand(fu, m, qv, qk, &m->a.q_tr, true, r);
    m->a.k = attn_operand(fu, m, kv, qk, &m->a.k_tr, true, r);
    m->a.v = attn_operand(fu, m, vv, pv, &m->a.v_tr, false, r);
    return f32_ranked(m->a.q, r) && f32_ranked(m->a.k, r) && f32_ranked(m->a.v, r) && attn_output(fu, m, y, r);
}

/* Groups every attention pattern of the graph before the greedy pass sees its nodes. */
static dl_status fuse_attention(fuser *fu) {
    dl_graph *g = fu->g;
    for (int k = 0; k < g->nodes.len; k++) {
        attn_match m;
        if (!match_attention(fu, g->nodes.items[k], &m)) continue;
        /* topological order: by position */
        for (int i = 1; i < m.n; i++)
            for (int j = i; j > 0 && m.nodes[j - 1]->id > m.nodes[j]->id; j--) {
                dl_node *t = m.nodes[j];
                m.nodes[j] = m.nodes[j - 1];
                m.nodes[j - 1] = t;
            }
        dl_group *gr = new_group(fu, DL_G_ATTENTION, m.nodes[0]->id);
        if (!gr) return dl_fail(g->ctx, DL_ERR_NOMEM, "out of memory in fusion");
        gr->attn = m.a;
        int gi = fu->f->n - 1;
        for (int i = 0; i < m.n; i++) DL_TRY(add_node(fu, gi, m.nodes[i], m.nodes[i]->id, false));
    }
    return DL_OK;
}

/* ---- MatMul reading a transposed operand through the GEMM's trans flag ---- */

/* A float Transpose that swaps the last two axes of a rank >= 2 value and keeps the others. */
static bool swaps_last_two(const dl_node *n) {
    if (!dl_node_is(n, "Transpose") || n->n_in != 1 || n->n_out != 1 || !n->out[0]) return false;
    int r = n->in[0] ? n->in[0]->type.rank : -1;
    if (r < 2 || !f32_ranked(n->in[0], r) || !f32_ranked(n->out[0], r)) return false;
    const int64_t *perm;
    int np = dl_attr_ints(n, "perm", &perm);
    if (np < 0) return r == 2; /* no perm: all axes reversed */
    if (np != r) return false;
    for (int i = 0; i < r; i++)
        if (perm[i] != (i < r - 2 ? i : i == r - 2 ? r - 1 : r - 2)) return false;
    return true;
}

/* The Transpose giving operand `which` of mm when the group of mm may absorb it. */
static dl_node *transposed_operand(fuser *fu, dl_node *mm, int which) {
    dl_node *t = absorbable(fu, mm->in[which], mm);
    return t && swaps_last_two(t) ? t : NULL;
}

/* Groups each MatMul that reads a single-use transposed operand with that Transpose (before the
 * greedy pass would give the Transpose a kernel of its own), then its epilogue. */
static dl_status fuse_matmul_transposes(fuser *fu) {
    dl_graph *g = fu->g;
    for (int k = 0; k < g->nodes.len; k++) {
        dl_node *mm = g->nodes.items[k];
        if (!dl_node_is(mm, "MatMul") || fu->group_of[k] >= 0 || mm->n_in != 2 ||
            dl_node_kernel_kind(mm) != DL_G_MATMUL || !dl_matmul_shapes_ok(mm))
            continue;
        dl_node *ta = transposed_operand(fu, mm, 0), *tb = transposed_operand(fu, mm, 1);
        if (!ta && !tb) continue;
        dl_node *first = ta && (!tb || ta->id < tb->id) ? ta : tb;
        dl_node *second = first == ta ? tb : ta;
        if (!new_group(fu, DL_G_MATMUL, first->id))
            return dl_fail(g->ctx, DL_ERR_NOMEM, "out of memory in fusion");
        int gi = fu->f->n - 1;
        fu->f->groups[gi].mm = (dl_gmatmul){.mm = mm, .a_tr = ta, .b_tr = tb};
        DL_TRY(add_node(fu, gi, first, first->id, false));
        if (second) DL_TRY(add_node(fu, gi, second, second->id, false));
        DL_TRY(add_node(fu, gi, mm, k, false));
        DL_TRY(absorb_epilogue(fu, gi));
    }
    return DL_OK;
}

/* Whether value w, computed in group gi (merged with group gj; -1 for none), is read by a node
 * outside both other than n, or is a graph output: it then stays one of the group's results
 * when n joins. With early true, whether such a reader comes before n instead, which the
 * group, run at its last node's place (n's once it joins), would then leave without w. */
static bool read_outside(const fuser *fu, int gi, int gj, const dl_node *n, const dl_value *w,
                         bool early) {
    if (w->is_output && !early) return true;
    for (int c = fu->cons_at[w->id]; c < fu->cons_at[w->id + 1]; c++) {
        const int at = fu->cons[c], in = fu->group_of[at];
        if (at != n->id && in != gi && (gj < 0 || in != gj) && (!early || at < n->id)) return true;
    }
    return false;
}

static bool same_dims(const dl_type *a, const dl_type *b) {
    if (a->rank != b->rank || a->rank < 0) return false;
    for (int d = 0; d < a->rank; d++)
        if (a->dims[d] != b->dims[d]) return false;
    return true;
}

/* Whether every result of group gk (merged with group gj, or -1) can be computed at n's place:
 * none is read outside before n, and each still read outside has n's shape (one loop nest). */
static bool fits_at(const fuser *fu, int gk, int gj, const dl_node *n) {
    const dl_group *gr = &fu->f->groups[gk];
    for (int o = 0; o < gr->n_out; o++) {
        const dl_value *w = gr->out[o];
        if (!read_outside(fu, gk, gj, n, w, false)) continue; /* n is its last reader */
        if (read_outside(fu, gk, gj, n, w, true) || !same_dims(&w->type, &n->out[0]->type))
            return false;
    }
    return true;
}

/* The elementwise group that has input i of n among its results, or -1. */
static int ew_producer(const fuser *fu, const dl_node *n, int i) {
    const dl_value *v = n->in[i];
    /* (not through an input the loops do not read: Expand's shape) */
    if (!v || !v->producer || !dl_ew_operand(n, i)) return -1;
    const int gi = fu->group_of[v->producer->id];
    if (gi < 0 || fu->f->groups[gi].kind != DL_G_EW) return -1;
    for (int o = 0; o < fu->f->groups[gi].n_out; o++)
        if (fu->f->groups[gi].out[o] == v) return gi;
    return -1;
}

/* Adds to seen[] (*ns of them, at most DL_EW_GROUP_INPUTS) the values node m reads from outside
 * groups gi and gj (or -1); false when that outgrows seen or m reads a value computed in them
 * through an input the loops do not load (one_kernel). */
static bool kernel_reads(const fuser *fu, int gi, int gj, const dl_node *m, const dl_value **seen,
                         int *ns) {
    for (int i = 0; i < m->n_in; i++) {
        const dl_value *v = m->in[i];
        if (!v) continue;
        const int in = v->producer ? fu->group_of[v->producer->id] : -1;
        if (in >= 0 && (in == gi || in == gj)) { /* computed among them */
            if (!dl_ew_operand(m, i)) return false;
            continue;
        }
        bool dup = false;
        for (int j = 0; j < *ns && !dup; j++) dup = seen[j] == v;
        if (dup) continue;
        if (*ns == DL_EW_GROUP_INPUTS) return false;
        seen[(*ns)++] = v;
    }
    return true;
}

/* Whether one kernel can hold groups gi and gj (or -1) and n: they read at most
 * DL_EW_GROUP_INPUTS values from outside (what an elementwise kernel takes: emit.c), and none
 * of their nodes reads a value computed among them through an input the loops do not load
 * (Expand's shape: the executor needs it before the kernel runs, for the output's shape). */
static bool one_kernel(const fuser *fu, int gi, int gj, const dl_node *n) {
    const dl_value *seen[DL_EW_GROUP_INPUTS];
    int ns = 0;
    const int groups[2] = {gi, gj};
    for (int g = 0; g < 2; g++) {
        if (groups[g] < 0) continue;
        const dl_group *grp = &fu->f->groups[groups[g]];
        for (int k = 0; k < grp->n_nodes; k++)
            if (!kernel_reads(fu, gi, gj, grp->nodes[k], seen, &ns)) return false;
    }
    return kernel_reads(fu, gi, gj, n, seen, &ns);
}

/* An elementwise node joins the elementwise group that computes one of its inputs. That input
 * may be read elsewhere too (a training step saves activations for the backward pass, and an
 * optimizer's new state is both a result and the next op's input): the group then keeps it as
 * a result beside n's, all computed in one pass over memory, as long as every result has n's
 * shape (one loop nest) and nothing outside reads one before n. */
static int joinable_group(fuser *fu, const dl_node *n) {
    if (!n->out[0]) return -1;
    for (int i = 0; i < n->n_in; i++) {
        const int gi = ew_producer(fu, n, i);
        if (gi >= 0 && fu->f->groups[gi].n_nodes < DL_EW_GROUP_NODES && fits_at(fu, gi, -1, n) &&
            one_kernel(fu, gi, -1, n))
            return gi;
    }
    return -1;
}

/* Moves the nodes of group gj into group gi, in the graph's order (the ops' order in the loop),
 * leaving gj empty (dropped when the groups are ordered). */
static dl_status merge_groups(fuser *fu, int gi, int gj) {
    dl_group *a = &fu->f->groups[gi], *b = &fu->f->groups[gj];
    const int total = a->n_nodes + b->n_nodes;
    dl_node **nodes = dl_arena_alloc(&fu->f->arena, sizeof(dl_node *) * (size_t)total);
    if (!nodes) return dl_fail(fu->g->ctx, DL_ERR_NOMEM, "out of memory in fusion");
    for (int i = 0, j = 0, k = 0; k < total; k++)
        nodes[k] = j >= b->n_nodes || (i < a->n_nodes && a->nodes[i]->id < b->nodes[j]->id)
                       ? a->nodes[i++]
                       : b->nodes[j++];
    for (int j = 0; j < b->n_nodes; j++) fu->group_of[b->nodes[j]->id] = gi;
    a->nodes = nodes;
    a->n_nodes = total;
    if (fu->last_pos[gj] > fu->last_pos[gi]) fu->last_pos[gi] = fu->last_pos[gj];
    b->n_nodes = 0;
    b->n_out = 0;
    return DL_OK;
}

/* Appends elementwise node n (at position pos) to group gi, first merging into it the other
 * elementwise groups that compute n's inputs where their results fit at n's place too (Adam's
 * update reads the new first and second moments, two passes of their own until then); the
 * group's results are then the values its nodes compute that are read outside it or are graph
 * outputs, n's last. */
static dl_status add_ew_node(fuser *fu, int gi, dl_node *n, int pos) {
    /* (n starting a group of its own joined none of its inputs' groups: it merges none) */
    const bool joined = fu->f->groups[gi].n_nodes > 0;
    for (int i = 0; i < n->n_in && joined; i++) {
        const int gj = ew_producer(fu, n, i);
        if (gj < 0 || gj == gi ||
            fu->f->groups[gi].n_nodes + fu->f->groups[gj].n_nodes >= DL_EW_GROUP_NODES ||
            !fits_at(fu, gj, gi, n) || !one_kernel(fu, gi, gj, n))
            continue;
        DL_TRY(merge_groups(fu, gi, gj));
    }
    DL_TRY(add_node(fu, gi, n, pos, false));
    dl_group *gr = &fu->f->groups[gi];
    if (gr->n_nodes == 1) return DL_OK;
    int n_out = 0;
    dl_value **out = dl_arena_alloc(&fu->f->arena, sizeof(dl_value *) * (size_t)gr->n_nodes);
    if (!out) return dl_fail(fu->g->ctx, DL_ERR_NOMEM, "out of memory in fusion");
    for (int k = 0; k < gr->n_nodes; k++) {
        dl_value *w = gr->nodes[k]->out[0];
        if (w && (k == gr->n_nodes - 1 || read_outside(fu, gi, -1, n, w, false))) out[n_out++] = w;
    }
    gr->out = out;
    gr->n_out = n_out;
    return DL_OK;
}

/* Insertion sort of group indices by their last node: groups come out nearly sorted. */
static void sort_by_last(int *idx, int n, const int *last) {
    for (int i = 1; i < n; i++) {
        int v = idx[i], j = i;
        for (; j > 0 && last[idx[j - 1]] > last[v]; j--) idx[j] = idx[j - 1];
        idx[j] = v;
    }
}

const dl_node *dl_group_anchor(const dl_group *gr) {
    if (gr->kind == DL_G_MATMUL && gr->mm.mm) return gr->mm.mm;
    if (gr->kind == DL_G_ATTENTION && gr->attn.qk) return gr->attn.qk;
    return gr->n_nodes ? gr->nodes[0] : NULL;
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
    const int nn = g->nodes.len;
    fuser fu = {.g = g};
    fu.f = dl_calloc(1, sizeof(dl_fusion));
    fu.group_of = dl_malloc(sizeof(int) * ((size_t)nn + 1));
    int *order = NULL;
    dl_status s = DL_OK;
    if (!fu.f || !fu.group_of) {
        s = dl_fail(ctx, DL_ERR_NOMEM, "out of memory in fusion");
        goto done;
    }
    for (int k = 0; k < nn; k++) fu.group_of[k] = -1;
    if ((s = dl_reader_lists(g, &fu.cons_at, &fu.cons)) != DL_OK) goto done;
    s = fuse_attention(&fu);
    if (s == DL_OK) s = fuse_matmul_transposes(&fu);
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
        bool all_outs = kind == DL_G_FALLBACK || kind == DL_G_LAYERNORM || kind == DL_G_COPY ||
                        kind == DL_G_RNN;
        s = kind == DL_G_EW ? add_ew_node(&fu, gi, n, k) : add_node(&fu, gi, n, k, all_outs);
        if (s != DL_OK) break;
        if (kind == DL_G_MATMUL) fu.f->groups[gi].mm.mm = n;
        if (kind == DL_G_CONV || kind == DL_G_GEMM || kind == DL_G_MATMUL)
            s = absorb_epilogue(&fu, gi);
    }
    if (s != DL_OK) goto done;
    /* Run groups in the order of their last nodes (groups merged into others are empty). */
    int ng = 0;
    order = dl_malloc(sizeof(int) * ((size_t)fu.f->n + 1));
    dl_group *sorted = dl_arena_alloc(&fu.f->arena, sizeof(dl_group) * ((size_t)fu.f->n + 1));
    if (!order || !sorted) {
        s = dl_fail(ctx, DL_ERR_NOMEM, "out of memory in fusion");
        goto done;
    }
    for (int i = 0; i < fu.f->n; i++)
        if (fu.f->groups[i].n_nodes) order[ng++] = i;
    sort_by_last(order, ng, fu.last_pos);
    for (int i = 0; i < ng; i++) {
        sorted[i] = fu.f->groups[order[i]];
        if (set_inputs(&fu.f->arena, &sorted[i]) != DL_OK) {
            s = dl_fail(ctx, DL_ERR_NOMEM, "out of memory in fusion");
            goto done;
        }
    }
    fu.f->groups = sorted;
    fu.f->n = ng;
    pc->fusion = fu.f;
    fu.f = NULL;
done:
    dl_fusion_free(fu.f);
    dl_free(fu.cons_at);
    dl_free(fu.cons);
    dl_free(fu.group_of);
    dl_free(order);
    return s;
}
