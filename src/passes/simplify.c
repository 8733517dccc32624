/* simplify.c — algebraic simplification: nodes that compute nothing are bypassed (Identity,
 * x*1, x+0, x-0, x/1 when broadcasting cannot enlarge x, reshapes and casts to what x already
 * is, inference-mode Dropout, zero Pad, whole Slice, one-input Concat, identity Transpose), and
 * chains are shortened (Transpose of Transpose composes the perms; Reshape of a reshape-like op
 * reads the original tensor; a Gemm reads a matrix Transpose's input with its trans flag flipped,
 * and a Transpose of a bias-free Gemm becomes the Gemm with operands swapped — the weight
 * gradients of dense layers). A bypassed node whose output is a graph output hands the output
 * name to its input when that is an intermediate, and otherwise stays. */
#include "passes-impl.h"
#include "../ir/rewrite.h"

typedef struct simp {
    dl_pass_ctx *pc;
    dl_graph *g;
    dl_rewriter rw;
    int fresh_from;
} simp;

/* Every element of constant v equals x (false for non-constants and booleans). */
static bool const_all(const dl_value *v, double x) {
    const dl_tensor *t = v ? v->constant : NULL;
    if (!t || t->dtype == DL_BOOL) return false;
    bool fl = dl_dtype_is_float(t->dtype);
    for (int64_t i = 0; i < t->numel; i++)
        if (fl ? dl_get_f64(t, i) != x : dl_get_i64(t, i) != (int64_t)x) return false;
    return true;
}

static bool same_type(const dl_value *a, const dl_value *b) {
    return a->type.rank >= 0 && dl_type_equal(&a->type, &b->type);
}

/* The value of an unused or absent output. */
static bool unused(const simp *s, const dl_node *n, int o) {
    return o >= n->n_out || !n->out[o] || (!n->out[o]->is_output && !dl_rw_uses(&s->rw, n->out[o]));
}

/* x op c (or c op x) where c is the neutral element on x's side and the output is exactly x. */
static dl_value *neutral_operand(const dl_node *n) {
    if (n->n_in != 2 || !n->out[0]) return NULL;
    dl_value *a = n->in[0], *b = n->in[1], *y = n->out[0];
    const char *op = n->op->name;
    bool add = dl_node_is(n, "Add"), mul = dl_node_is(n, "Mul");
    if (!add && !mul && !dl_node_is(n, "Sub") && !dl_node_is(n, "Div")) return NULL;
    double unit = (add || op[0] == 'S') ? 0.0 : 1.0;
    if (const_all(b, unit) && same_type(a, y)) return a;
    if ((add || mul) && const_all(a, unit) && same_type(b, y)) return b;
    return NULL;
}

static void transpose_perm(const dl_node *n, int rank, int64_t *perm) {
    const int64_t *p;
    if (dl_attr_ints(n, "perm", &p) == rank)
        for (int i = 0; i < rank; i++) perm[i] = p[i];
    else
        for (int i = 0; i < rank; i++) perm[i] = rank - 1 - i;
}

static bool is_identity_perm(const dl_node *n) {
    int rank = n->in[0]->type.rank;
    int64_t perm[DL_MAX_RANK];
    if (rank < 0) return false;
    transpose_perm(n, rank, perm);
    for (int i = 0; i < rank; i++)
        if (perm[i] != i) return false;
    return true;
}

static bool pads_zero(const dl_node *n) {
    if (n->opset >= 11) return n->n_in >= 2 && const_all(n->in[1], 0.0);
    const int64_t *p;
    int c = dl_attr_ints(n, n->opset < 2 ? "paddings" : "pads", &p);
    for (int i = 0; i < c; i++)
        if (p[i] != 0) return false;
    return c >= 0;
}

/* What n's output 0 equals when n computes nothing, or NULL. */
static dl_value *passthrough(const simp *s, const dl_node *n) {
    dl_value *x = n->n_in > 0 ? n->in[0] : NULL, *y = n->out[0];
    if (!x || !y) return NULL;
    if (dl_node_is(n, "Identity")) return x;
    if (dl_node_is(n, "Dropout")) {
        bool train = n->n_in > 2 && n->in[2] && !const_all(n->in[2], 0.0);
        return !train && unused(s, n, 1) ? x : NULL;
    }
    if (n->n_out != 1) return NULL;
    if (dl_node_is(n, "Cast") || dl_node_is(n, "CastLike") || dl_node_is(n, "Reshape") ||
        dl_node_is(n, "Flatten") || dl_node_is(n, "Squeeze") || dl_node_is(n, "Unsqueeze") ||
        dl_node_is(n, "Expand") || dl_node_is(n, "Tile"))
        return same_type(x, y) || (dl_node_is(n, "Cast") && x->type.dtype == y->type.dtype) ? x : NULL;
    if (dl_node_is(n, "Concat")) return n->n_in == 1 ? x : NULL;
    if (dl_node_is(n, "Transpose")) return is_identity_perm(n) ? x : NULL;
    if (dl_node_is(n, "Pad")) return pads_zero(n) && same_type(x, y) ? x : NULL;
    if (dl_node_is(n, "Slice")) {
        bool unit_steps = n->n_in < 5 || !n->in[4] || const_all(n->in[4], 1.0);
        return unit_steps && same_type(x, y) ? x : NULL;
    }
    return neutral_operand(n);
}

/* Transpose(Transpose(x)) -> Transpose(x) with the composed perm. */
static dl_status compose_transposes(simp *s, dl_node *n, bool *changed) {
    dl_node *inner = n->in[0]->producer;
    if (!inner || !dl_node_is(inner, "Transpose")) return DL_OK;
    dl_value *x = inner->in[0];
    int rank = x->type.rank;
    if (rank < 0) return DL_OK;
    int64_t p1[DL_MAX_RANK], p2[DL_MAX_RANK];
    transpose_perm(inner, rank, p1);
    transpose_perm(n, rank, p2);
    int64_t *c = dl_arena_alloc(&s->g->arena, sizeof *c * (size_t)(rank ? rank : 1));
    if (!c) return dl_fail(s->g->ctx, DL_ERR_NOMEM, "out of memory simplifying");
    for (int j = 0; j < rank; j++) c[j] = p1[p2[j]];
    dl_attr a = {.name = "perm", .type = DL_ATTR_INTS, .n = rank, .ints = c};
    DL_TRY(dl_node_set_attr(s->g, n, &a));
    DL_TRY(dl_rw_set_input(&s->rw, n, 0, x));
    *changed = true;
    return DL_OK;
}

/* A 2-D Transpose (perm [1,0]) that produced v, or NULL. */
static dl_node *matrix_transpose(const dl_value *v) {
    dl_node *p = v ? v->producer : NULL;
    if (!p || !dl_node_is(p, "Transpose") || !p->in[0] || p->in[0]->type.rank != 2) return NULL;
    int64_t perm[2];
    transpose_perm(p, 2, perm);
    return perm[0] == 1 && perm[1] == 0 ? p : NULL;
}

static dl_status set_int_attr(dl_graph *g, dl_node *n, const char *name, int64_t v) {
    dl_attr a = {.name = name, .type = DL_ATTR_INT, .i = v};
    return dl_node_set_attr(g, n, &a);
}

/* Gemm(Transpose(A), B, transA=t) -> Gemm(A, B, transA=!t), the same for B. */
static dl_status gemm_read_through_transpose(simp *s, dl_node *n, bool *changed) {
    static const char *const flag[2] = {"transA", "transB"};
    for (int i = 0; i < 2 && i < n->n_in; i++) {
        dl_node *t = matrix_transpose(n->in[i]);
        if (!t) continue;
        DL_TRY(set_int_attr(s->g, n, flag[i], !dl_attr_int(n, flag[i], 0)));
        DL_TRY(dl_rw_set_input(&s->rw, n, i, t->in[0]));
        *changed = true;
    }
    return DL_OK;
}

/* Transpose(Gemm(A, B, tA, tB)) -> Gemm(B, A, !tB, !tA): (A'B')ᵀ = B'ᵀA'ᵀ. Only for a Gemm
 * without C whose result nothing else reads; the Gemm is rewritten and the Transpose bypassed. */
static dl_status transpose_of_gemm(simp *s, dl_node *n, bool *done) {
    dl_node *gm = n->in[0]->producer;
    if (matrix_transpose(n->out[0]) != n) return DL_OK;
    if (!gm || !dl_node_is(gm, "Gemm") || (gm->n_in > 2 && gm->in[2]) || gm->out[0]->is_output ||
        dl_rw_uses(&s->rw, gm->out[0]) != 1 || !dl_rw_can_replace(n->out[0], gm->out[0]))
        return DL_OK;
    int ta = dl_attr_int(gm, "transA", 0) != 0, tb = dl_attr_int(gm, "transB", 0) != 0;
    dl_value *a = gm->in[0], *b = gm->in[1];
    DL_TRY(set_int_attr(s->g, gm, "transA", !tb));
    DL_TRY(set_int_attr(s->g, gm, "transB", !ta));
    DL_TRY(dl_rw_set_input(&s->rw, gm, 0, b));
    DL_TRY(dl_rw_set_input(&s->rw, gm, 1, a));
    DL_TRY(dl_node_reinfer(s->g, gm, s->fresh_from, NULL));
    DL_TRY(dl_rw_replace(&s->rw, n->out[0], gm->out[0], done));
    if (*done) {
        dl_rw_kill(&s->rw, n);
        s->pc->changes++;
    }
    return DL_OK;
}

/* Reshape(view(x), s) -> Reshape(x, s) when s does not copy dims (0 entries) from view(x). */
static dl_status skip_inner_reshape(simp *s, dl_node *n, bool *changed) {
    dl_node *inner = n->in[0]->producer;
    if (!inner || n->n_in < 2 || !n->in[1] || !n->in[1]->constant || !inner->in[0]) return DL_OK;
    if (!dl_node_is(inner, "Reshape") && !dl_node_is(inner, "Flatten") &&
        !dl_node_is(inner, "Squeeze") && !dl_node_is(inner, "Unsqueeze"))
        return DL_OK;
    const dl_tensor *t = n->in[1]->constant;
    bool allowzero = n->opset >= 14 && dl_attr_int(n, "allowzero", 0) != 0;
    for (int64_t i = 0; !allowzero && i < t->numel; i++)
        if (dl_get_i64(t, i) == 0) return DL_OK;
    DL_TRY(dl_rw_set_input(&s->rw, n, 0, inner->in[0]));
    *changed = true;
    return DL_OK;
}

/* The pads of a Pad node that only adds +0 around the spatial dims of a rank-`rank` tensor (N and
 * C untouched), begins then ends as ONNX orders them, into p[0 .. 2 rank); false when it pads
 * anything else, in another mode or with another value (-0 too: a window all of -0 padding would
 * sum to -0 where the Conv's gives +0), crops, or its parameters are not constants. Read as the
 * Pad's reference kernel reads them (dl_pad_geometry). */
static bool spatial_zero_pads(const dl_node *pad, int rank, int64_t *p) {
    uint64_t value;
    if (!pad || !dl_node_is(pad, "Pad") || rank < 3 || pad->n_out != 1 || !pad->in[0] ||
        pad->in[0]->type.rank != rank || !dl_pad_geometry(pad, p, &value) || value != 0)
        return false;
    if (p[0] || p[1] || p[rank] || p[rank + 1]) return false;
    for (int d = 2; d < rank; d++)
        if (p[d] < 0 || p[rank + d] < 0) return false;
    return true;
}

/* Conv(Pad(x, zeros around the spatial dims)) -> Conv(x) with the pads added to its own, when
 * nothing else reads the padded tensor: the padded copy is never made (exporters write "same"
 * padding of TensorFlow models this way). */
static dl_status conv_absorbs_pad(simp *s, dl_node *n, bool *changed) {
    dl_value *x = n->in[0];
    const int rank = x->type.rank, sp = rank - 2;
    int64_t p[2 * DL_MAX_RANK];
    if (!spatial_zero_pads(x->producer, rank, p) || x->is_output || dl_rw_uses(&s->rw, x) != 1 ||
        strcmp(dl_attr_str(n, "auto_pad", "NOTSET"), "NOTSET") != 0)
        return DL_OK;
    const int64_t *cp;
    const int c = dl_attr_ints(n, "pads", &cp);
    if (c >= 0 && c != 2 * sp) return DL_OK;
    int64_t *np = dl_arena_alloc(&s->g->arena, sizeof *np * (size_t)(2 * sp));
    if (!np) return dl_fail(s->g->ctx, DL_ERR_NOMEM, "out of memory simplifying");
    for (int i = 0; i < sp; i++)
        if (__builtin_add_overflow(c > 0 ? cp[i] : 0, p[2 + i], &np[i]) ||
            __builtin_add_overflow(c > 0 ? cp[sp + i] : 0, p[rank + 2 + i], &np[sp + i]))
            return DL_OK; /* left for shape inference to reject */
    dl_attr a = {.name = "pads", .type = DL_ATTR_INTS, .n = 2 * sp, .ints = np};
    DL_TRY(dl_node_set_attr(s->g, n, &a));
    DL_TRY(dl_rw_set_input(&s->rw, n, 0, x->producer->in[0]));
    *changed = true;
    return DL_OK;
}

static dl_status visit(simp *s, dl_node *n) {
    bool changed = false;
    if (n->n_in > 0 && n->in[0] && dl_node_is(n, "Transpose")) {
        bool done = false;
        DL_TRY(transpose_of_gemm(s, n, &done));
        if (done) return DL_OK;
        DL_TRY(compose_transposes(s, n, &changed));
    }
    if (n->n_in >= 2 && n->in[0] && n->in[1] && dl_node_is(n, "Gemm"))
        DL_TRY(gemm_read_through_transpose(s, n, &changed));
    if (n->n_in > 0 && n->in[0] && dl_node_is(n, "Reshape")) DL_TRY(skip_inner_reshape(s, n, &changed));
    if (n->n_in > 0 && n->in[0] && dl_node_is(n, "Conv")) DL_TRY(conv_absorbs_pad(s, n, &changed));
    if (changed) {
        s->pc->changes++;
        DL_TRY(dl_node_reinfer(s->g, n, s->fresh_from, NULL));
    }
    dl_value *x = passthrough(s, n);
    if (!x) return DL_OK;
    bool done;
    DL_TRY(dl_rw_replace(&s->rw, n->out[0], x, &done));
    if (done) {
        dl_rw_kill(&s->rw, n);
        s->pc->changes++;
    }
    return DL_OK;
}

dl_status dl_pass_simplify(dl_pass_ctx *pc) {
    simp s = {.pc = pc, .g = pc->g, .fresh_from = pc->g->syms.len};
    DL_TRY(dl_rw_begin(&s.rw, s.g));
    dl_status st = DL_OK;
    for (int k = 0; k < s.g->nodes.len && st == DL_OK; k++) {
        dl_node *n = s.g->nodes.items[k];
        if (!n->dead) st = visit(&s, n);
    }
    st = dl_rw_end(&s.rw, st);
    if (st == DL_OK) dl_trim_fresh_syms(s.g, s.fresh_from);
    return st;
}
