/* lower-reduce.c — lowering of reductions and transposes (lower.h) to loop nests, the transpose
 * schedule (2-D tiling), and dl_kdim_c.
 *
 * A reduction loops over the kept dims outside and the reduced dims inside, with a scalar
 * accumulator per output element, so each output sees its inputs in the reference's row-major
 * order. Like the reference (src/ops/reduce.c), float sums, products and norms accumulate in
 * double; max/min propagate the first NaN; log-sum-exp subtracts the maximum; integers wrap in
 * 64 bits. */
#include "loop-ir.h"

#include <math.h>

const char *dl_kdim_c(dl_kdim d, char *buf, size_t n) {
    if (d.sym >= 0)
        snprintf(buf, n, "s[%d]", d.sym);
    else
        snprintf(buf, n, "%lld", (long long)d.c);
    return buf;
}

static bool kdim_eq(dl_kdim a, dl_kdim b) {
    return a.sym >= 0 ? b.sym == a.sym : (b.sym < 0 && a.c == b.c);
}

static bool kdim_is(dl_kdim d, int64_t c) {
    return d.sym < 0 && d.c == c;
}

/* Stride (elements) of dim d of a dense row-major buffer. */
static dl_lexpr *stride_of(dl_lfunc *f, const dl_kbuf *b, int d) {
    dl_lexpr *p = dl_le_i64(f, 1);
    for (int k = d + 1; k < b->rank; k++) p = dl_le_imul(f, p, dl_le_kdim(f, b->dims[k]));
    return p;
}

static dl_lexpr *hoist(dl_lfunc *f, dl_lexpr *e, const char *fmt, int i) {
    if (!e || dl_le_is_const(e, NULL) || e->kind == DL_LX_SYM || e->kind == DL_LX_VAR) return e;
    char nm[32];
    snprintf(nm, sizeof nm, fmt, i);
    int v = dl_lf_var(f, nm, DL_I64, DL_LV_LET);
    dl_ls_append(f, f->body, dl_ls_decl(f, v, e));
    return dl_le_var(f, v);
}

/* A loop of a nest: merged dims of one class. */
typedef struct lgroup {
    dl_lexpr *extent, *in_stride, *out_stride;
    bool reduced;
    int var;
} lgroup;

/* ---------------------------------------------------------------- reductions */

static bool is_f(dl_dtype t) {
    return t == DL_F32 || t == DL_F64;
}
static bool is_uint(dl_dtype t) {
    return t == DL_U8 || t == DL_U16 || t == DL_U32 || t == DL_U64;
}
static bool is_int(dl_dtype t) {
    return is_uint(t) || t == DL_I8 || t == DL_I16 || t == DL_I32 || t == DL_I64;
}

static dl_status check_reduce(dl_ctx *ctx, const dl_reduce_desc *d) {
    const dl_kbuf *in = &d->in, *out = &d->out;
    if (in->rank < 0 || in->rank > DL_MAX_RANK || out->rank != in->rank)
        return dl_fail(ctx, DL_ERR_INVALID, "reduce: input rank %d, output rank %d", in->rank,
                       out->rank);
    if (in->dtype != out->dtype)
        return dl_fail(ctx, DL_ERR_TYPE, "reduce: input %s, output %s", dl_dtype_name(in->dtype),
                       dl_dtype_name(out->dtype));
    for (int k = 0; k < in->rank; k++)
        if (d->axes[k] ? !kdim_is(out->dims[k], 1) : !kdim_eq(out->dims[k], in->dims[k]))
            return dl_fail(ctx, DL_ERR_SHAPE, "reduce: output dim %d does not match", k);
    if ((unsigned)d->kind >= DL_RED_COUNT)
        return dl_fail(ctx, DL_ERR_INVALID, "reduce: unknown kind %d", (int)d->kind);
    bool int_ok = d->kind == DL_RED_SUM || d->kind == DL_RED_MEAN || d->kind == DL_RED_MAX ||
                  d->kind == DL_RED_MIN || d->kind == DL_RED_PROD || d->kind == DL_RED_L1 ||
                  d->kind == DL_RED_SUM_SQUARE;
    if (!is_f(in->dtype) && !(is_int(in->dtype) && int_ok))
        return dl_fail(ctx, DL_ERR_UNSUPPORTED, "reduce: kind %d on %s is not lowered",
                       (int)d->kind, dl_dtype_name(in->dtype));
    return DL_OK;
}

/* Groups of adjacent dims of one class (size-1 dims dropped); returns the count. */
static int reduce_groups(dl_lfunc *f, const dl_reduce_desc *d, lgroup *g, dl_lexpr **count) {
    int n = 0;
    *count = dl_le_i64(f, 1);
    for (int k = 0; k < d->in.rank; k++) {
        if (kdim_is(d->in.dims[k], 1)) continue;
        dl_lexpr *e = dl_le_kdim(f, d->in.dims[k]);
        if (d->axes[k]) *count = dl_le_imul(f, *count, e);
        if (n > 0 && g[n - 1].reduced == d->axes[k]) {
            g[n - 1].extent = dl_le_imul(f, g[n - 1].extent, e);
            g[n - 1].in_stride = stride_of(f, &d->in, k);
        } else {
            g[n++] = (lgroup){.extent = e,
                              .in_stride = stride_of(f, &d->in, k),
                              .reduced = d->axes[k],
                              .var = -1};
        }
    }
    return n;
}

/* Fresh loop variables prefix0, prefix1... for the reduced groups. */
static void reduce_vars(dl_lfunc *f, lgroup *g, int n, const char *prefix) {
    char nm[16];
    for (int j = 0, nr = 0; j < n; j++)
        if (g[j].reduced) {
            snprintf(nm, sizeof nm, "%s%d", prefix, nr++);
            g[j].var = dl_lf_var(f, nm, DL_I64, DL_LV_LOOP);
        }
}

/* The reduced loops around `body`, which accumulates into acc with op. */
static dl_lstmt *reduce_nest(dl_lfunc *f, const lgroup *g, int n, dl_lstmt *body, int acc,
                             dl_red_op op) {
    dl_lstmt *s = body;
    for (int j = n - 1; j >= 0; j--) {
        if (!g[j].reduced) continue;
        s = dl_ls_for(f, g[j].var, g[j].extent, s);
        if (!s) return NULL;
        s->red_op = op;
        s->red_var = acc;
        int64_t st;
        s->unit_stride = dl_le_is_const(g[j].in_stride, &st) && st == 1;
    }
    return s;
}

static dl_lexpr *in_index(dl_lfunc *f, const lgroup *g, int n) {
    dl_lexpr *idx = dl_le_i64(f, 0);
    for (int j = 0; j < n; j++)
        idx = dl_le_iadd(f, idx, dl_le_imul(f, dl_le_var(f, g[j].var), g[j].in_stride));
    return idx;
}

/* NaN-propagating max/min step in the input's float type: the first NaN sticks. */
static dl_lexpr *maxmin_step(dl_lfunc *f, dl_lexpr *acc, dl_lexpr *v, bool is_max) {
    dl_lexpr *better = dl_le_bin(f, DL_LOP_OR, dl_le_bin(f, DL_LOP_NE, v, v),
                                 dl_le_bin(f, is_max ? DL_LOP_GT : DL_LOP_LT, v, acc));
    dl_lexpr *keep_nan = dl_le_select(f, dl_le_bin(f, DL_LOP_NE, acc, acc), acc, v);
    return dl_le_select(f, better, keep_nan, acc);
}

/* Accumulator type, initial value, combine step and result for the kind. */
typedef struct racc {
    dl_dtype type;
    dl_lexpr *init;
    dl_red_op op;
} racc;

static racc float_acc(dl_lfunc *f, dl_reduce_kind k, dl_dtype t) {
    switch (k) {
    case DL_RED_MAX:
    case DL_RED_LOG_SUM_EXP:
        return (racc){t, dl_le_float(f, t, -INFINITY), DL_REDOP_OTHER};
    case DL_RED_MIN:
        return (racc){t, dl_le_float(f, t, INFINITY), DL_REDOP_OTHER};
    case DL_RED_PROD:
        return (racc){DL_F64, dl_le_float(f, DL_F64, 1), DL_REDOP_MUL};
    default:
        return (racc){DL_F64, dl_le_float(f, DL_F64, 0), DL_REDOP_ADD};
    }
}

static racc int_acc(dl_lfunc *f, dl_reduce_kind k, dl_dtype t) {
    bool u = is_uint(t);
    switch (k) {
    case DL_RED_MAX:
        return u ? (racc){DL_U64, dl_le_int(f, DL_U64, 0), DL_REDOP_OTHER}
                 : (racc){DL_I64, dl_le_int(f, DL_I64, INT64_MIN), DL_REDOP_OTHER};
    case DL_RED_MIN:
        return u ? (racc){DL_U64, dl_le_int(f, DL_U64, (int64_t)UINT64_MAX), DL_REDOP_OTHER}
                 : (racc){DL_I64, dl_le_int(f, DL_I64, INT64_MAX), DL_REDOP_OTHER};
    case DL_RED_PROD:
        return (racc){DL_U64, dl_le_int(f, DL_U64, 1), DL_REDOP_MUL};
    default:
        return (racc){DL_U64, dl_le_int(f, DL_U64, 0), DL_REDOP_ADD};
    }
}

static dl_lexpr *combine(dl_lfunc *f, dl_reduce_kind k, dl_dtype t, dl_dtype at, dl_lexpr *acc,
                         dl_lexpr *v) {
    if (k == DL_RED_MAX || k == DL_RED_MIN || k == DL_RED_LOG_SUM_EXP) {
        bool mx = k != DL_RED_MIN;
        if (is_f(t)) return maxmin_step(f, acc, v, mx);
        dl_lexpr *w = dl_le_cast(f, at, v);
        return dl_le_select(f, dl_le_bin(f, mx ? DL_LOP_GT : DL_LOP_LT, w, acc), w, acc);
    }
    dl_lexpr *w = dl_le_cast(f, at, v);
    if (k == DL_RED_L1)
        w = is_f(t)      ? dl_le_call1(f, DL_F64, "fabs", w)
            : is_uint(t) ? w
                         : dl_le_select(f, dl_le_bin(f, DL_LOP_LT, v, dl_le_int(f, t, 0)),
                                        dl_le_bin(f, DL_LOP_SUB, dl_le_int(f, DL_U64, 0), w), w);
    if (k == DL_RED_L2 || k == DL_RED_SUM_SQUARE) w = dl_le_bin(f, DL_LOP_MUL, w, w);
    return dl_le_bin(f, k == DL_RED_PROD ? DL_LOP_MUL : DL_LOP_ADD, acc, w);
}

static dl_lexpr *finish(dl_lfunc *f, dl_reduce_kind k, dl_dtype t, dl_lexpr *acc, dl_lexpr *count) {
    if (is_f(t)) {
        if (k == DL_RED_MEAN) acc = dl_le_bin(f, DL_LOP_DIV, acc, dl_le_cast(f, DL_F64, count));
        if (k == DL_RED_L2) acc = dl_le_call1(f, DL_F64, "sqrt", acc);
        if (k == DL_RED_LOG_SUM) acc = dl_le_call1(f, DL_F64, "log", acc);
        return dl_le_cast(f, t, acc);
    }
    if (k == DL_RED_MEAN) {
        dl_dtype w = is_uint(t) ? DL_U64 : DL_I64;
        dl_lexpr *c = dl_le_cast(f, w, count);
        dl_lexpr *q = dl_le_bin(f, DL_LOP_DIV, dl_le_cast(f, w, acc), c);
        int64_t cc;
        if (!dl_le_is_const(count, &cc) || cc == 0)
            q = dl_le_select(f, dl_le_bin(f, DL_LOP_EQ, c, dl_le_int(f, w, 0)), dl_le_int(f, w, 0),
                             q);
        acc = q;
    }
    return dl_le_cast(f, t, acc);
}

/* A float sum (or mean) over leading dims of a contiguous input — a bias gradient, [R, C] ->
 * [C]: reading it kept-index by kept-index strides across all of memory for every output, so
 * instead the output rows accumulate the input rows in order: out = 0; for r: out[:] += x[r, :]
 * (the inner loop vectorized; the r loop carries the accumulation, so it is never parallel). */
static dl_status lower_row_sum(dl_ctx *ctx, const dl_reduce_desc *d, dl_lfunc *f, lgroup *g,
                               dl_lexpr *count) {
    dl_dtype t = d->in.dtype;
    dl_lexpr *R = hoist(f, g[0].extent, "n%d", 0), *C = hoist(f, g[1].extent, "n%d", 1);
    int in_buf = dl_lf_buf(f, d->in.slot, t), out_buf = dl_lf_buf(f, d->out.slot, t);
    int i0 = dl_lf_var(f, "i0", DL_I64, DL_LV_LOOP), i1 = dl_lf_var(f, "i1", DL_I64, DL_LV_LOOP);
    int r = dl_lf_var(f, "r0", DL_I64, DL_LV_LOOP), i2 = dl_lf_var(f, "i2", DL_I64, DL_LV_LOOP);
    dl_lstmt *zero = dl_ls_for(f, i0, C, dl_ls_store(f, out_buf, dl_le_var(f, i0), dl_le_float(f, t, 0)));
    if (zero) zero->unit_stride = true;
    dl_lexpr *xi = dl_le_iadd(f, dl_le_imul(f, dl_le_var(f, r), C), dl_le_var(f, i1));
    dl_lexpr *sum = dl_le_bin(f, DL_LOP_ADD, dl_le_load(f, out_buf, dl_le_var(f, i1)), dl_le_load(f, in_buf, xi));
    dl_lstmt *row = dl_ls_for(f, i1, C, dl_ls_store(f, out_buf, dl_le_var(f, i1), sum));
    if (row) row->unit_stride = true;
    dl_lstmt *rows = dl_ls_for(f, r, R, row);
    if (rows) rows->red_op = DL_REDOP_OTHER;
    dl_ls_append(f, f->body, zero);
    dl_ls_append(f, f->body, rows);
    if (d->kind == DL_RED_MEAN) {
        dl_lexpr *q = dl_le_bin(f, DL_LOP_DIV, dl_le_load(f, out_buf, dl_le_var(f, i2)),
                                dl_le_cast(f, t, hoist(f, count, "count%d", 0)));
        dl_lstmt *div = dl_ls_for(f, i2, C, dl_ls_store(f, out_buf, dl_le_var(f, i2), q));
        if (div) div->unit_stride = true;
        dl_ls_append(f, f->body, div);
    }
    return dl_lfunc_status(ctx, f);
}

dl_status dl_lower_reduce(dl_ctx *ctx, const dl_reduce_desc *d, const char *name, dl_lfunc **out) {
    *out = NULL;
    DL_TRY(check_reduce(ctx, d));
    dl_lfunc *f;
    DL_TRY(dl_lfunc_new(ctx, name, &f));
    dl_dtype t = d->in.dtype;
    lgroup g[DL_MAX_RANK];
    dl_lexpr *count;
    int n = reduce_groups(f, d, g, &count);
    int64_t st1;
    if (n == 2 && g[0].reduced && !g[1].reduced && (t == DL_F32 || t == DL_F64) &&
        (d->kind == DL_RED_SUM || d->kind == DL_RED_MEAN) &&
        dl_le_is_const(g[1].in_stride, &st1) && st1 == 1) {
        dl_status s = lower_row_sum(ctx, d, f, g, count);
        if (s != DL_OK) {
            dl_lfunc_free(f);
            return s;
        }
        *out = f;
        return DL_OK;
    }
    /* hoisted extents and strides; output strides run over the kept groups */
    dl_lexpr *ost = dl_le_i64(f, 1);
    for (int j = n - 1; j >= 0; j--) {
        g[j].extent = hoist(f, g[j].extent, "n%d", j);
        g[j].in_stride = hoist(f, g[j].in_stride, "st%d", j);
        if (!g[j].reduced) {
            g[j].out_stride = hoist(f, ost, "os%d", j);
            ost = dl_le_imul(f, ost, g[j].extent);
        }
    }
    count = hoist(f, count, "count%d", 0);
    int in_buf = dl_lf_buf(f, d->in.slot, t), out_buf = dl_lf_buf(f, d->out.slot, t);
    racc ra = is_f(t) ? float_acc(f, d->kind, t) : int_acc(f, d->kind, t);
    int acc = dl_lf_var(f, d->kind == DL_RED_LOG_SUM_EXP ? "mx" : "acc", ra.type, DL_LV_LOCAL);
    dl_lexpr *accv = dl_le_var(f, acc);
    /* kept loop variables first, so the nests below can index the input */
    char nm[16];
    int nk = 0;
    for (int j = 0; j < n; j++)
        if (!g[j].reduced) {
            snprintf(nm, sizeof nm, "i%d", nk++);
            g[j].var = dl_lf_var(f, nm, DL_I64, DL_LV_LOOP);
        }
    bool any_red = false;
    for (int j = 0; j < n; j++) any_red = any_red || g[j].reduced;
    dl_lstmt *body = dl_ls_block(f);
    dl_ls_append(f, body, dl_ls_decl(f, acc, ra.init));
    reduce_vars(f, g, n, "r");
    dl_lstmt *step = dl_ls_block(f);
    int x = dl_lf_var(f, "x", t, DL_LV_LET);
    dl_ls_append(f, step, dl_ls_decl(f, x, dl_le_load(f, in_buf, in_index(f, g, n))));
    dl_ls_append(f, step,
                 dl_ls_assign(f, acc, combine(f, d->kind, t, ra.type, accv, dl_le_var(f, x))));
    dl_ls_append(f, body, reduce_nest(f, g, n, step, acc, ra.op));
    dl_lexpr *result;
    if (d->kind == DL_RED_LOG_SUM_EXP) {
        int sum = dl_lf_var(f, "sum", DL_F64, DL_LV_LOCAL);
        dl_ls_append(f, body, dl_ls_decl(f, sum, dl_le_float(f, DL_F64, 0)));
        reduce_vars(f, g, n, "k");
        dl_lexpr *x = dl_le_cast(f, DL_F64, dl_le_load(f, in_buf, in_index(f, g, n)));
        dl_lexpr *mx = dl_le_cast(f, DL_F64, accv);
        dl_lexpr *e = dl_le_call1(f, DL_F64, "exp", dl_le_bin(f, DL_LOP_SUB, x, mx));
        dl_lstmt *add = dl_ls_assign(f, sum, dl_le_bin(f, DL_LOP_ADD, dl_le_var(f, sum), e));
        dl_lexpr *fin = dl_le_call1(f, DL_BOOL, "isfinite", accv);
        dl_ls_append(f, body, dl_ls_if(f, fin, reduce_nest(f, g, n, add, sum, DL_REDOP_ADD), NULL));
        dl_lexpr *lse =
            dl_le_bin(f, DL_LOP_ADD, mx, dl_le_call1(f, DL_F64, "log", dl_le_var(f, sum)));
        result = dl_le_select(f, fin, dl_le_cast(f, t, lse), accv);
    } else {
        result = finish(f, d->kind, t, accv, count);
    }
    dl_lexpr *oidx = dl_le_i64(f, 0);
    for (int j = 0; j < n; j++)
        if (!g[j].reduced)
            oidx = dl_le_iadd(f, oidx, dl_le_imul(f, dl_le_var(f, g[j].var), g[j].out_stride));
    dl_ls_append(f, body, dl_ls_store(f, out_buf, oidx, result));
    dl_lstmt *s = body;
    for (int j = n - 1; j >= 0; j--) {
        if (g[j].reduced) continue;
        bool inner = s == body;
        s = dl_ls_for(f, g[j].var, g[j].extent, s);
        int64_t st;
        /* innermost kept loop with no reduction inside: contiguous on both sides */
        if (s && inner && !any_red) s->unit_stride = dl_le_is_const(g[j].in_stride, &st) && st == 1;
    }
    dl_ls_append(f, f->body, s);
    dl_status st = dl_lfunc_status(ctx, f);
    if (st != DL_OK) {
        dl_lfunc_free(f);
        return st;
    }
    *out = f;
    return DL_OK;
}

dl_status dl_emit_reduce(dl_ctx *ctx, const dl_reduce_desc *d, const dl_target *t, const char *name,
                         dl_sbuf *sb) {
    dl_lfunc *f;
    DL_TRY(dl_lower_reduce(ctx, d, name, &f));
    dl_status s = dl_sched_default(ctx, f, t);
    if (s == DL_OK) s = dl_render_c(ctx, f, sb);
    dl_lfunc_free(f);
    return s;
}

/* ---------------------------------------------------------------- transpose */

/* Transposes move bytes: the element type by size (bool and half types as raw integers). */
static dl_dtype storage_type(dl_dtype t) {
    switch (t) {
    case DL_BOOL:
        return DL_U8;
    case DL_F16:
    case DL_BF16:
        return DL_U16;
    default:
        return t;
    }
}

dl_status dl_lower_transpose(dl_ctx *ctx, const dl_transpose_desc *d, const char *name,
                             dl_lfunc **out) {
    *out = NULL;
    const dl_kbuf *in = &d->in, *o = &d->out;
    int r = in->rank;
    if (r < 0 || r > DL_MAX_RANK || o->rank != r || in->dtype != o->dtype ||
        dl_dtype_size(in->dtype) == 0)
        return dl_fail(ctx, DL_ERR_INVALID, "transpose: ranks %d/%d, dtypes %s/%s", r, o->rank,
                       dl_dtype_name(in->dtype), dl_dtype_name(o->dtype));
    bool seen[DL_MAX_RANK] = {false};
    for (int i = 0; i < r; i++) {
        int p = d->perm[i];
        if (p < 0 || p >= r || seen[p] || !kdim_eq(o->dims[i], in->dims[p]))
            return dl_fail(ctx, DL_ERR_INVALID, "transpose: perm or output dim %d is wrong", i);
        seen[p] = true;
    }
    dl_lfunc *f;
    DL_TRY(dl_lfunc_new(ctx, name, &f));
    lgroup g[DL_MAX_RANK];
    int n = 0, last_in = -1;
    for (int i = 0; i < r; i++) {
        int p = d->perm[i];
        if (kdim_is(o->dims[i], 1)) continue;
        /* merge when the input dim follows the previous one (only size-1 dims between) */
        bool follows = n > 0 && p > last_in;
        for (int q = last_in + 1; follows && q < p; q++) follows = kdim_is(in->dims[q], 1);
        dl_lexpr *e = dl_le_kdim(f, o->dims[i]);
        if (follows) {
            g[n - 1].extent = dl_le_imul(f, g[n - 1].extent, e);
            g[n - 1].in_stride = stride_of(f, in, p);
        } else {
            g[n++] = (lgroup){.extent = e, .in_stride = stride_of(f, in, p), .var = -1};
        }
        last_in = p;
    }
    dl_lexpr *ost = dl_le_i64(f, 1);
    for (int j = n - 1; j >= 0; j--) {
        g[j].extent = hoist(f, g[j].extent, "n%d", j);
        g[j].in_stride = hoist(f, g[j].in_stride, "st%d", j);
        g[j].out_stride = hoist(f, ost, "os%d", j);
        ost = dl_le_imul(f, ost, g[j].extent);
        char nm[16];
        snprintf(nm, sizeof nm, "i%d", j);
        g[j].var = dl_lf_var(f, nm, DL_I64, DL_LV_LOOP);
    }
    dl_dtype t = storage_type(in->dtype);
    int ib = dl_lf_buf(f, in->slot, t), ob = dl_lf_buf(f, o->slot, t);
    dl_lexpr *iidx = in_index(f, g, n), *oidx = dl_le_i64(f, 0);
    for (int j = 0; j < n; j++)
        oidx = dl_le_iadd(f, oidx, dl_le_imul(f, dl_le_var(f, g[j].var), g[j].out_stride));
    dl_lstmt *s = dl_ls_store(f, ob, oidx, dl_le_load(f, ib, iidx));
    for (int j = n - 1; j >= 0; j--) {
        s = dl_ls_for(f, g[j].var, g[j].extent, s);
        int64_t st;
        if (s && j == n - 1) s->unit_stride = dl_le_is_const(g[j].in_stride, &st) && st == 1;
    }
    dl_ls_append(f, f->body, s);
    dl_status st = dl_lfunc_status(ctx, f);
    if (st != DL_OK) {
        dl_lfunc_free(f);
        return st;
    }
    *out = f;
    return DL_OK;
}

/* True when var appears as a bare term (stride 1) of a sum-of-products index. */
static bool unit_term(const dl_lexpr *e, int var) {
    if (e->kind == DL_LX_BIN && e->op == DL_LOP_ADD)
        return unit_term(e->a[0], var) || unit_term(e->a[1], var);
    return e->kind == DL_LX_VAR && e->var == var;
}

dl_status dl_sched_transpose(dl_ctx *ctx, dl_lfunc *f, const dl_target *t) {
    int loops[DL_MAX_RANK];
    int n = dl_lf_loops(f, loops, DL_MAX_RANK);
    dl_lstmt *inner =
        n >= 2 && n <= DL_MAX_RANK ? dl_lf_find_loop(f, loops[n - 1], NULL, NULL) : NULL;
    if (inner && !inner->unit_stride && inner->body->kind == DL_LS_STORE) {
        /* tile the loop that reads the input contiguously against the innermost one */
        const dl_lexpr *load = inner->body->value;
        int a = -1;
        for (int j = 0; j < n - 1; j++)
            if (unit_term(load->a[0], loops[j])) a = j;
        if (a >= 0) {
            dl_lstmt *la = dl_lf_find_loop(f, loops[a], NULL, NULL);
            size_t es = dl_dtype_size(load->type);
            int64_t factor = es >= 8 ? 8 : es == 4 ? 16 : 32, ea, eb;
            bool small = (dl_le_is_const(la->extent, &ea) && ea < factor) ||
                         (dl_le_is_const(inner->extent, &eb) && eb < factor);
            if (!small) DL_TRY(dl_sched_tile2(ctx, f, loops[a], loops[n - 1], factor));
        }
    }
    return dl_sched_default(ctx, f, t);
}

dl_status dl_emit_transpose(dl_ctx *ctx, const dl_transpose_desc *d, const dl_target *t,
                            const char *name, dl_sbuf *sb) {
    dl_lfunc *f;
    DL_TRY(dl_lower_transpose(ctx, d, name, &f));
    dl_status s = dl_sched_transpose(ctx, f, t);
    if (s == DL_OK) s = dl_render_c(ctx, f, sb);
    dl_lfunc_free(f);
    return s;
}
