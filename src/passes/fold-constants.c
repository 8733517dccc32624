/* fold-constants.c — constant folding and symbolic shape folding, in one topological sweep that
 * re-infers each node before looking at it (so every rewrite upstream sharpens the types seen
 * downstream).
 *
 * 1. A deterministic node whose inputs are all constants is run once with its reference kernel
 *    and its outputs become constants (skipped when its outputs exceed FOLD_MAX_BYTES, or when
 *    the kernel fails: that error is left for run time, where it names the inputs).
 * 2. Exporters compute reshape targets from a tensor's (symbolic) shape: Shape -> Gather ->
 *    Unsqueeze -> Concat -> Reshape, with Slice, Cast, Squeeze and scalar arithmetic on the way.
 *    For small int32/int64 vectors the sweep tracks what each element is: a known number, a
 *    graph symbol (a dim of some value's type), or opaque. A fully known vector becomes a
 *    constant. A Reshape whose target is fully described gets a constant target: a symbol equal
 *    to the data's dim at the same position becomes 0 (copy; needs allowzero = 0), one other
 *    unknown becomes -1 (and the output dim there is named by the tracked symbol, which
 *    inference behind a -1 cannot know). Expand gets 1 where the target repeats the input's own
 *    symbolic dim. The shape chains die (dce removes them) and the symbols flow on through
 *    inference, so a model's batch symbol reaches its outputs.
 *
 * Known limits, both about empty tensors: a target rewritten with -1 cannot be inferred when
 * another target dim is 0 at run time, where the original explicit target could; and a symbol
 * that is 0 at run time means "copy" to a Reshape with allowzero = 0, so the symbol named on its
 * output can then be wrong (no kernel reads past an empty tensor, but the static type lies). */
#include "passes-impl.h"
#include "../ir/rewrite.h"
#include "../runtime/runtime-impl.h"

/* Folded outputs larger than this stay computed at run time (the model would grow by it). */
#define FOLD_MAX_BYTES ((size_t)64 << 20)
#define VEC_MAX DL_MAX_RANK /* longest tracked vector: shapes of up to rank 8 */

typedef enum { DX_CONST, DX_SYM, DX_OPAQUE } dx_kind;

typedef struct dx {
    dx_kind k;
    int64_t v; /* the number (DX_CONST) or the symbol's dim code (DX_SYM) */
} dx;

typedef struct dvec {
    bool ok;
    int rank; /* 0 or 1 */
    int n;
    dx e[VEC_MAX];
} dvec;

typedef struct folder {
    dl_pass_ctx *pc;
    dl_graph *g;
    dl_rewriter rw;
    dvec *vec; /* by value id; values added during the pass are constants */
    int nvec;
    int fresh_from;
} folder;

/* ---- 1. evaluating a node on constants ---- */

static bool all_inputs_constant(const dl_node *n) {
    for (int i = 0; i < n->n_in; i++)
        if (n->in[i] && !n->in[i]->constant) return false;
    return true;
}

/* Bytes of n's outputs by their (static) types, SIZE_MAX when over the cap; unknown shapes
 * count 0 here and are checked after the kernel ran. */
static size_t static_out_bytes(const dl_node *n) {
    size_t total = 0;
    for (int i = 0; i < n->n_out; i++) {
        const dl_type *t = n->out[i] ? &n->out[i]->type : NULL;
        if (!t || !dl_type_known(t)) continue;
        size_t b = dl_dtype_size(t->dtype);
        for (int d = 0; d < t->rank; d++)
            if (__builtin_mul_overflow(b, (size_t)t->dims[d], &b)) return SIZE_MAX;
        if (__builtin_add_overflow(total, b, &total) || total > FOLD_MAX_BYTES) return SIZE_MAX;
    }
    return total;
}

/* Runs n's kernel on its constant inputs (the interpreter's own node runner). outs[0..n_out)
 * receive new tensors when *ok; any failure but running out of memory just leaves the node
 * alone (its error, if real, is reported at run time with the actual inputs). */
static dl_status eval_node(folder *f, dl_node *n, dl_tensor **outs, bool *ok) {
    dl_ctx *ctx = f->g->ctx;
    *ok = false;
    if (static_out_bytes(n) == SIZE_MAX) return DL_OK;
    const dl_tensor **in = dl_calloc((size_t)n->n_in + 1, sizeof *in);
    if (!in) return dl_fail(ctx, DL_ERR_NOMEM, "out of memory folding constants");
    for (int i = 0; i < n->n_in; i++) in[i] = n->in[i] ? n->in[i]->constant : NULL;
    dl_ctx saved = *ctx;
    dl_status s = dl_run_node_ref(ctx, n, in, outs);
    dl_free((void *)in);
    size_t total = 0;
    for (int i = 0; i < n->n_out && s == DL_OK; i++) total += outs[i]->nbytes;
    if (s == DL_OK && total > FOLD_MAX_BYTES) {
        for (int i = 0; i < n->n_out; i++) {
            dl_tensor_free(outs[i]);
            outs[i] = NULL;
        }
        return DL_OK;
    }
    *ok = s == DL_OK;
    if (s != DL_OK && s != DL_ERR_NOMEM) {
        *ctx = saved; /* not folding is no error */
        s = DL_OK;
    }
    return s;
}

static dl_status fold_node(folder *f, dl_node *n, bool *folded) {
    *folded = false;
    if (!n->op->ref || dl_op_is_random(n->op) || !all_inputs_constant(n)) return DL_OK;
    dl_tensor **outs = dl_calloc((size_t)n->n_out + 1, sizeof *outs);
    if (!outs) return dl_fail(f->g->ctx, DL_ERR_NOMEM, "out of memory folding constants");
    bool ok;
    dl_status s = eval_node(f, n, outs, &ok);
    for (int i = 0; i < n->n_out; i++) {
        dl_value *v = n->out[i];
        if (s == DL_OK && ok && v) {
            s = dl_rw_make_constant(&f->rw, v, outs[i]); /* takes outs[i] */
        } else {
            dl_tensor_free(outs[i]);
        }
    }
    dl_free(outs);
    if (s == DL_OK && ok) {
        dl_rw_kill(&f->rw, n); /* also when every output was omitted */
        *folded = true;
    }
    return s;
}

/* ---- 2. symbolic shape vectors ---- */

static bool int_index_type(dl_dtype t) {
    return t == DL_I64 || t == DL_I32;
}

/* What is known about v's elements, if it is a small integer vector. */
static bool get_vec(const folder *f, const dl_value *v, dvec *out) {
    if (!v) return false;
    const dl_tensor *t = v->constant;
    if (t) {
        if (!dl_dtype_is_int(t->dtype) || t->rank > 1 || t->numel > VEC_MAX) return false;
        *out = (dvec){.ok = true, .rank = t->rank, .n = (int)t->numel};
        for (int i = 0; i < out->n; i++) out->e[i] = (dx){DX_CONST, dl_get_i64(t, i)};
        return true;
    }
    if (v->id >= f->nvec || !f->vec[v->id].ok) return false;
    *out = f->vec[v->id];
    return true;
}

/* The constant entries of a small integer input (absent: *n = -1). False when not constant. */
static bool const_list(const folder *f, const dl_node *n, int i, int64_t *vals, int *count) {
    *count = -1;
    if (i >= n->n_in || !n->in[i]) return true;
    dvec d;
    if (!n->in[i]->constant || !get_vec(f, n->in[i], &d)) return false;
    for (int k = 0; k < d.n; k++) vals[k] = d.e[k].v;
    *count = d.n;
    return true;
}

static bool dims_vec(const dl_type *t, int from, int to, dvec *r) {
    if (t->rank < 0 || to - from > VEC_MAX) return false;
    r->n = to - from;
    for (int i = from; i < to; i++)
        r->e[i - from] = t->dims[i] >= 0 ? (dx){DX_CONST, t->dims[i]} : (dx){DX_SYM, t->dims[i]};
    return true;
}

static bool track_shape(const dl_node *n, dvec *r) {
    const dl_type *x = &n->in[0]->type;
    if (x->rank < 0) return false;
    int64_t s = 0, e = x->rank;
    if (n->opset >= 15) {
        s = dl_attr_int(n, "start", 0);
        e = dl_attr_int(n, "end", x->rank);
    }
    if (s < 0) s += x->rank;
    if (e < 0) e += x->rank;
    s = s < 0 ? 0 : s > x->rank ? x->rank : s;
    e = e < s ? s : e > x->rank ? x->rank : e;
    return dims_vec(x, (int)s, (int)e, r);
}

static bool track_size(const dl_node *n, dvec *r) {
    dvec d;
    if (!dims_vec(&n->in[0]->type, 0, n->in[0]->type.rank, &d)) return false;
    int64_t known = 1, sym = 0;
    int nsym = 0;
    for (int i = 0; i < d.n; i++) {
        if (d.e[i].k == DX_SYM) {
            sym = d.e[i].v;
            nsym++;
        } else if (__builtin_mul_overflow(known, d.e[i].v, &known)) {
            return false;
        }
    }
    r->n = 1;
    if (nsym == 0 || known == 0) r->e[0] = (dx){DX_CONST, known};
    else if (nsym == 1 && known == 1) r->e[0] = (dx){DX_SYM, sym};
    else r->e[0] = (dx){DX_OPAQUE, 0};
    return true;
}

static bool track_gather(const folder *f, const dl_node *n, dvec *r) {
    dvec d, idx;
    if (!get_vec(f, n->in[0], &d) || d.rank != 1 || !n->in[1]->constant ||
        !get_vec(f, n->in[1], &idx))
        return false;
    int64_t axis = dl_attr_int(n, "axis", 0);
    if (axis != 0 && axis != -1) return false;
    r->n = idx.n;
    for (int i = 0; i < idx.n; i++) {
        int64_t k = idx.e[i].v < 0 ? idx.e[i].v + d.n : idx.e[i].v;
        if (k < 0 || k >= d.n) return false;
        r->e[i] = d.e[k];
    }
    return true;
}

static bool track_concat(const folder *f, const dl_node *n, dvec *r) {
    int64_t axis = dl_attr_int(n, "axis", 0);
    if (axis != 0 && axis != -1) return false;
    r->n = 0;
    for (int i = 0; i < n->n_in; i++) {
        dvec d;
        if (!get_vec(f, n->in[i], &d) || d.rank != 1 || r->n + d.n > VEC_MAX) return false;
        for (int k = 0; k < d.n; k++) r->e[r->n++] = d.e[k];
    }
    return true;
}

static bool track_slice(const folder *f, const dl_node *n, dvec *r) {
    dvec d;
    if (!get_vec(f, n->in[0], &d) || d.rank != 1) return false;
    int64_t st[VEC_MAX], en[VEC_MAX], ax[VEC_MAX], sp[VEC_MAX];
    int ns, ne, na, np = -1;
    if (n->opset < 10) {
        const int64_t *p;
        if ((ns = dl_attr_ints(n, "starts", &p)) != 1) return false;
        st[0] = p[0];
        if ((ne = dl_attr_ints(n, "ends", &p)) != 1) return false;
        en[0] = p[0];
        if ((na = dl_attr_ints(n, "axes", &p)) == 1) ax[0] = p[0];
    } else if (!const_list(f, n, 1, st, &ns) || !const_list(f, n, 2, en, &ne) ||
               !const_list(f, n, 3, ax, &na) || !const_list(f, n, 4, sp, &np)) {
        return false;
    }
    if (ns != 1 || ne != 1 || (na >= 0 && (na != 1 || (ax[0] != 0 && ax[0] != -1))) ||
        (np >= 0 && (np != 1 || sp[0] == 0)))
        return false;
    /* ONNX clamping: starts to [0, len] (backwards [0, len-1]), ends to [0, len] ([-1, len-1]) */
    int64_t len = d.n, step = np == 1 ? sp[0] : 1, s = st[0], e = en[0];
    int64_t hi = step > 0 ? len : len - 1, lo_e = step > 0 ? 0 : -1;
    if (s < 0) s += len;
    if (e < 0) e += len;
    s = s < 0 ? 0 : s > hi ? hi : s;
    e = e < lo_e ? lo_e : e > hi ? hi : e;
    r->n = 0;
    for (int64_t i = s; len > 0 && (step > 0 ? i < e : i > e);) {
        r->e[r->n++] = d.e[i];
        if (__builtin_add_overflow(i, step, &i)) break;
    }
    return true;
}

/* One element of a binary arithmetic op; opaque unless the result is certain. */
static dx arith(const char *op, dx a, dx b) {
    const dx opaque = {DX_OPAQUE, 0};
    int64_t v;
    char c = op[0];
    if (a.k == DX_CONST && b.k == DX_CONST) {
        bool bad = c == 'A'   ? __builtin_add_overflow(a.v, b.v, &v)
                   : c == 'S' ? __builtin_sub_overflow(a.v, b.v, &v)
                   : c == 'M' ? __builtin_mul_overflow(a.v, b.v, &v)
                              : (b.v == 0 || (b.v == -1 && a.v == INT64_MIN) ||
                                 a.v % b.v != 0 || (v = a.v / b.v, false));
        return bad ? opaque : (dx){DX_CONST, v};
    }
    bool a0 = a.k == DX_CONST && a.v == 0, b0 = b.k == DX_CONST && b.v == 0;
    bool a1 = a.k == DX_CONST && a.v == 1, b1 = b.k == DX_CONST && b.v == 1;
    if ((c == 'A' || c == 'S') && b0) return a;
    if (c == 'A' && a0) return b;
    if ((c == 'M' || c == 'D') && b1) return a;
    if (c == 'M' && a1) return b;
    if (c == 'M' && (a0 || b0)) return (dx){DX_CONST, 0};
    return opaque;
}

static bool track_arith(const folder *f, const dl_node *n, dvec *r) {
    dvec a, b;
    if (!get_vec(f, n->in[0], &a) || !get_vec(f, n->in[1], &b)) return false;
    if (a.n != b.n && a.n != 1 && b.n != 1) return false;
    r->n = a.n > b.n ? a.n : b.n;
    for (int i = 0; i < r->n; i++)
        r->e[i] = arith(n->op->name, a.e[a.n == 1 ? 0 : i], b.e[b.n == 1 ? 0 : i]);
    return true;
}

/* Ops that keep the elements in order (the output being a scalar or 1-D). */
static bool track_copy(const folder *f, const dl_node *n, dvec *r) {
    dvec a;
    if (!get_vec(f, n->in[0], &a)) return false;
    r->n = a.n;
    memcpy(r->e, a.e, sizeof(dx) * (size_t)a.n);
    return true;
}

/* What output 0 of n holds, when it is a small integer vector built from shapes. */
static bool track(const folder *f, const dl_node *n, dvec *r) {
    const dl_value *y = n->out[0];
    if (!y || n->n_in < 1 || !n->in[0] || !int_index_type(y->type.dtype) || y->type.rank < 0 ||
        y->type.rank > 1)
        return false;
    *r = (dvec){.ok = true, .rank = y->type.rank};
    bool ok;
    if (dl_node_is(n, "Shape")) ok = track_shape(n, r);
    else if (dl_node_is(n, "Size")) ok = track_size(n, r);
    else if (dl_node_is(n, "Gather")) ok = n->n_in == 2 && track_gather(f, n, r);
    else if (dl_node_is(n, "Concat")) ok = track_concat(f, n, r);
    else if (dl_node_is(n, "Slice")) ok = track_slice(f, n, r);
    else if (dl_node_is(n, "Add") || dl_node_is(n, "Sub") || dl_node_is(n, "Mul") ||
             dl_node_is(n, "Div"))
        ok = track_arith(f, n, r);
    else if (dl_node_is(n, "Unsqueeze") || dl_node_is(n, "Squeeze") || dl_node_is(n, "Reshape") ||
             dl_node_is(n, "Identity") || dl_node_is(n, "Cast"))
        ok = track_copy(f, n, r);
    else
        ok = false;
    /* the element count must agree with the inferred type */
    int64_t want = y->type.rank == 0 ? 1 : y->type.dims[0];
    return ok && (want < 0 || want == r->n) && (y->type.rank == 1 || r->n == 1);
}

static bool all_const(const dvec *d) {
    for (int i = 0; i < d->n; i++)
        if (d->e[i].k != DX_CONST) return false;
    return true;
}

static dl_status vec_tensor(dl_ctx *ctx, dl_dtype dt, const dvec *d, const int64_t *vals,
                            dl_tensor **out) {
    int64_t dim = d->n;
    DL_TRY(dl_tensor_new(ctx, dt, d->rank, &dim, out));
    for (int i = 0; i < d->n; i++) dl_set_i64(*out, i, vals ? vals[i] : d->e[i].v);
    return DL_OK;
}

/* Reshape(x, shape) with a tracked shape: a constant target that ONNX Reshape evaluates to the
 * same output shape. False when the target has more unknowns than 0/-1 can express. */
static bool reshape_target(const dl_node *n, const dvec *d, int64_t *t) {
    const dl_type *x = &n->in[0]->type;
    bool allowzero = n->opset >= 14 && dl_attr_int(n, "allowzero", 0) != 0;
    int neg = -1, unknown = -1;
    bool zero = false;
    for (int i = 0; i < d->n; i++) {
        const dx *e = &d->e[i];
        if (e->k == DX_CONST) {
            t[i] = e->v;
            if (e->v == -1) neg = i;
            zero |= e->v == 0;
        } else if (e->k == DX_SYM && !allowzero && i < x->rank && x->dims[i] == e->v) {
            t[i] = 0;
        } else {
            if (unknown >= 0) return false;
            unknown = i;
        }
    }
    if (unknown >= 0) {
        if (neg >= 0 || (allowzero && zero)) return false;
        t[unknown] = -1;
    }
    return true;
}

/* Expand(x, shape): 1 where the target repeats x's own (symbolic) dim at that position. */
static bool expand_target(const dl_node *n, const dvec *d, int64_t *t) {
    const dl_type *x = &n->in[0]->type;
    if (x->rank < 0) return false;
    for (int i = 0; i < d->n; i++) {
        int xi = i - (d->n - x->rank);
        if (d->e[i].k == DX_CONST) t[i] = d->e[i].v;
        else if (d->e[i].k == DX_SYM && xi >= 0 && x->dims[xi] == d->e[i].v) t[i] = 1;
        else return false;
    }
    return true;
}

static dl_status rewrite_shape_input(folder *f, dl_node *n) {
    dl_value *sv = n->in[1];
    dvec d;
    int64_t t[VEC_MAX];
    if (sv->constant || !get_vec(f, sv, &d) || d.rank != 1) return DL_OK;
    bool ok = dl_node_is(n, "Reshape") ? reshape_target(n, &d, t) : expand_target(n, &d, t);
    if (!ok) return DL_OK;
    dl_tensor *c;
    dl_value *cv;
    DL_TRY(vec_tensor(f->g->ctx, DL_I64, &d, t, &c));
    DL_TRY(dl_rw_add_constant(&f->rw, "shape", c, &cv));
    DL_TRY(dl_rw_set_input(&f->rw, n, 1, cv));
    f->pc->changes++;
    DL_TRY(dl_node_reinfer(f->g, n, f->fresh_from, NULL));
    /* A Reshape's output dims are its target's entries: where inference could only say "some
     * size" (an anonymous symbol, e.g. behind a -1), the tracked symbol is the better name. */
    dl_type *y = n->out[0] ? &n->out[0]->type : NULL;
    for (int i = 0; y && dl_node_is(n, "Reshape") && y->rank == d.n && i < d.n; i++)
        if (d.e[i].k == DX_SYM && y->dims[i] < 0 && dl_graph_sym_name(f->g, y->dims[i])[0] == '?')
            y->dims[i] = d.e[i].v;
    return DL_OK;
}

static dl_status visit(folder *f, dl_node *n) {
    DL_TRY(dl_node_reinfer(f->g, n, f->fresh_from, NULL));
    bool folded;
    DL_TRY(fold_node(f, n, &folded));
    if (folded) {
        f->pc->changes++;
        return DL_OK;
    }
    dvec d;
    if (n->n_out == 1 && track(f, n, &d)) {
        dl_value *y = n->out[0];
        if (!all_const(&d)) {
            if (y->id < f->nvec) f->vec[y->id] = d;
        } else {
            dl_tensor *c;
            DL_TRY(vec_tensor(f->g->ctx, y->type.dtype, &d, NULL, &c));
            DL_TRY(dl_rw_make_constant(&f->rw, y, c));
            f->pc->changes++;
            return DL_OK;
        }
    }
    if ((dl_node_is(n, "Reshape") || dl_node_is(n, "Expand")) && n->n_in >= 2 && n->in[1])
        DL_TRY(rewrite_shape_input(f, n));
    return DL_OK;
}

dl_status dl_pass_fold_constants(dl_pass_ctx *pc) {
    dl_graph *g = pc->g;
    folder f = {.pc = pc, .g = g, .nvec = g->values.len, .fresh_from = g->syms.len};
    f.vec = dl_calloc((size_t)f.nvec + 1, sizeof *f.vec);
    if (!f.vec) return dl_fail(g->ctx, DL_ERR_NOMEM, "out of memory folding constants");
    dl_status s = dl_rw_begin(&f.rw, g);
    if (s != DL_OK) {
        dl_free(f.vec);
        return s;
    }
    for (int k = 0; k < g->nodes.len && s == DL_OK; k++) {
        dl_node *n = g->nodes.items[k];
        if (!n->dead) s = visit(&f, n);
    }
    s = dl_rw_end(&f.rw, s);
    dl_free(f.vec);
    if (s == DL_OK) dl_trim_fresh_syms(g, f.fresh_from);
    return s;
}
