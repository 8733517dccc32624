/* lower-ew.c — lowering of an elementwise group (lower.h) to a loop nest: one loop per output
 * dim (size-1 dims dropped, adjacent dims merged when every input walks them alike), inputs
 * loaded with numpy broadcasting (stride 0 on broadcast dims; a symbolic input dim facing a
 * different output dim gets its stride at run time: dim == 1 ? 0 : stride), one local per op,
 * one store per output. */
#include "loop-ir.h"

typedef enum { CAT_FULL, CAT_BCAST, CAT_DYN } dim_cat;

/* A loop of the nest: one or more merged output dims. */

typedef struct vdim {
    dl_lexpr *extent;
    dim_cat cat[DL_EW_MAX_INPUTS];
    dl_lexpr *stride[DL_EW_MAX_INPUTS]; /* per input, elements */
} vdim;

static bool kdim_eq(dl_kdim a, dl_kdim b) {
    return a.sym >= 0 ? b.sym == a.sym : (b.sym < 0 && a.c == b.c);
}

static bool kdim_is(dl_kdim d, int64_t c) {
    return d.sym < 0 && d.c == c;
}

/* Product of dims[from..rank) as an expression. */
static dl_lexpr *dims_product(dl_lfunc *f, const dl_kbuf *b, int from) {
    dl_lexpr *p = dl_le_i64(f, 1);
    for (int d = from; d < b->rank; d++) p = dl_le_imul(f, p, dl_le_kdim(f, b->dims[d]));
    return p;
}

/* A non-constant loop-invariant expression becomes a let at the top of the function. */
static dl_lexpr *hoist(dl_lfunc *f, dl_lexpr *e, const char *name) {
    if (!e || dl_le_is_const(e, NULL) || e->kind == DL_LX_SYM || e->kind == DL_LX_VAR) return e;
    int v = dl_lf_var(f, name, DL_I64, DL_LV_LET);
    dl_ls_append(f, f->body, dl_ls_decl(f, v, e));
    return dl_le_var(f, v);
}

static dl_status check_group(dl_ctx *ctx, const dl_ew_group *g) {
    if (g->n_out < 1 || g->n_ops < 1 || g->n_in < 0 || g->n_in > DL_EW_MAX_INPUTS)
        return dl_fail(ctx, DL_ERR_INVALID, "elementwise group: %d inputs, %d ops, %d outputs",
                       g->n_in, g->n_ops, g->n_out);
    const dl_kbuf *o = &g->out[0];
    if (o->rank < 0 || o->rank > DL_MAX_RANK)
        return dl_fail(ctx, DL_ERR_INVALID, "elementwise group: output rank %d", o->rank);
    for (int k = 0; k < g->n_out; k++) {
        bool same = g->out[k].rank == o->rank;
        for (int d = 0; same && d < o->rank; d++) same = kdim_eq(g->out[k].dims[d], o->dims[d]);
        if (!same)
            return dl_fail(ctx, DL_ERR_SHAPE, "elementwise group: output %d's shape differs", k);
        if (g->out_op[k] < 0 || g->out_op[k] >= g->n_ops)
            return dl_fail(ctx, DL_ERR_INVALID, "elementwise group: output %d names op %d", k,
                           g->out_op[k]);
    }
    for (int j = 0; j < g->n_ops; j++) {
        const dl_ew_op *op = &g->ops[j];
        if (!op->node || op->n_args < 0 || op->n_args > DL_EW_MAX_ARGS)
            return dl_fail(ctx, DL_ERR_INVALID, "elementwise group: op %d is malformed", j);
        for (int a = 0; a < op->n_args; a++) {
            int x = op->args[a];
            if (x != DL_EW_ABSENT && (x >= g->n_in || (x < 0 && -x - 1 >= j)))
                return dl_fail(ctx, DL_ERR_INVALID,
                               "elementwise group: op %d argument %d refers to %d", j, a, x);
        }
    }
    for (int k = 0; k < g->n_in; k++)
        if (g->in[k].rank < 0 || g->in[k].rank > DL_MAX_RANK)
            return dl_fail(ctx, DL_ERR_INVALID, "elementwise group: input %d rank %d", k,
                           g->in[k].rank);
    return DL_OK;
}

/* Category and stride of input k against output dim d. */
static dl_status classify(dl_ctx *ctx, dl_lfunc *f, const dl_kbuf *in, int k, const dl_kbuf *o,
                          int d, dim_cat *cat, dl_lexpr **stride) {
    int td = d - (o->rank - in->rank);
    dl_kdim od = o->dims[d];
    if (td < 0 || kdim_is(in->dims[td], 1)) {
        *cat = CAT_BCAST;
        *stride = dl_le_i64(f, 0);
        return DL_OK;
    }
    dl_kdim id = in->dims[td];
    dl_lexpr *st = dims_product(f, in, td + 1);
    if (kdim_eq(id, od) || (id.sym < 0 && od.sym >= 0)) {
        *cat = CAT_FULL;
        *stride = st;
    } else if (id.sym >= 0) {
        *cat = CAT_DYN;
        dl_lexpr *one = dl_le_bin(f, DL_LOP_EQ, dl_le_sym(f, id.sym), dl_le_i64(f, 1));
        *stride = dl_le_select(f, one, dl_le_i64(f, 0), st);
    } else {
        return dl_fail(ctx, DL_ERR_SHAPE,
                       "elementwise group: input %d dim %d (%lld) does not broadcast to %lld", k,
                       td, (long long)id.c, (long long)od.c);
    }
    return DL_OK;
}

/* The loops of the nest (outermost first); returns their count in *n. */
static dl_status build_vdims(dl_ctx *ctx, dl_lfunc *f, const dl_ew_group *g, vdim *v, int *n) {
    const dl_kbuf *o = &g->out[0];
    *n = 0;
    for (int k = 0; k < g->n_in; k++)
        for (int d = 0; d < g->in[k].rank - o->rank; d++)
            if (!kdim_is(g->in[k].dims[d], 1))
                return dl_fail(ctx, DL_ERR_SHAPE,
                               "elementwise group: input %d has more dims than the output", k);
    for (int d = 0; d < o->rank; d++) {
        if (kdim_is(o->dims[d], 1)) continue;
        vdim cur = {.extent = dl_le_kdim(f, o->dims[d])};
        for (int k = 0; k < g->n_in; k++)
            DL_TRY(classify(ctx, f, &g->in[k], k, o, d, &cur.cat[k], &cur.stride[k]));
        bool merge = *n > 0;
        for (int k = 0; merge && k < g->n_in; k++)
            merge = cur.cat[k] != CAT_DYN && cur.cat[k] == v[*n - 1].cat[k];
        if (merge) {
            vdim *p = &v[*n - 1];
            p->extent = dl_le_imul(f, p->extent, cur.extent);
            for (int k = 0; k < g->n_in; k++) p->stride[k] = cur.stride[k];
        } else {
            v[(*n)++] = cur;
        }
    }
    return dl_lfunc_status(ctx, f);
}

dl_status dl_lower_elementwise(dl_ctx *ctx, const dl_ew_group *g, const char *name,
                               dl_lfunc **out) {
    *out = NULL;
    DL_TRY(check_group(ctx, g));
    dl_lfunc *f;
    DL_TRY(dl_lfunc_new(ctx, name, &f));
    vdim v[DL_MAX_RANK];
    int nv = 0;
    dl_status s = build_vdims(ctx, f, g, v, &nv);
    if (s != DL_OK) {
        dl_lfunc_free(f);
        return s;
    }
    /* extents, output strides and input strides that are not constants become lets */
    char nm[48];
    int loopvar[DL_MAX_RANK];
    dl_lexpr *ostride[DL_MAX_RANK];
    for (int j = 0; j < nv; j++) {
        snprintf(nm, sizeof nm, "n%d", j);
        v[j].extent = hoist(f, v[j].extent, nm);
    }
    dl_lexpr *acc = dl_le_i64(f, 1);
    for (int j = nv - 1; j >= 0; j--) {
        snprintf(nm, sizeof nm, "os%d", j);
        ostride[j] = hoist(f, acc, nm);
        acc = dl_le_imul(f, acc, v[j].extent);
        snprintf(nm, sizeof nm, "i%d", j);
        loopvar[j] = dl_lf_var(f, nm, DL_I64, DL_LV_LOOP);
        for (int k = 0; k < g->n_in; k++) {
            snprintf(nm, sizeof nm, "st%d_%d", k, j);
            v[j].stride[k] = hoist(f, v[j].stride[k], nm);
        }
    }
    /* the body: loads, one local per op, stores */
    dl_lstmt *body = dl_ls_block(f);
    dl_lexpr *oidx = dl_le_i64(f, 0);
    for (int j = 0; j < nv; j++)
        oidx = dl_le_iadd(f, oidx, dl_le_imul(f, dl_le_var(f, loopvar[j]), ostride[j]));
    dl_lexpr *inval[DL_EW_MAX_INPUTS] = {NULL};
    for (int k = 0; k < g->n_in; k++) {
        dl_lexpr *idx = dl_le_i64(f, 0);
        for (int j = 0; j < nv; j++)
            idx = dl_le_iadd(f, idx, dl_le_imul(f, dl_le_var(f, loopvar[j]), v[j].stride[k]));
        int buf = dl_lf_buf(f, g->in[k].slot, g->in[k].dtype);
        snprintf(nm, sizeof nm, "x%d", k);
        int var = dl_lf_var(f, nm, g->in[k].dtype, DL_LV_LET);
        dl_ls_append(f, body, dl_ls_decl(f, var, dl_le_load(f, buf, idx)));
        inval[k] = dl_le_var(f, var);
    }
    dl_lexpr **opval = dl_arena_alloc(&f->arena, sizeof(dl_lexpr *) * (size_t)g->n_ops);
    if (!opval) f->oom = true;
    for (int j = 0; s == DL_OK && opval && j < g->n_ops; j++) {
        const dl_ew_op *op = &g->ops[j];
        dl_lexpr *args[DL_EW_MAX_ARGS] = {NULL}, *val = NULL;
        for (int a = 0; a < op->n_args; a++) {
            int x = op->args[a];
            args[a] = x == DL_EW_ABSENT ? NULL : x >= 0 ? inval[x] : opval[-x - 1];
        }
        s = dl_scalar_op(ctx, f, op->node, op->n_args, args, &val);
        if (s != DL_OK) break;
        snprintf(nm, sizeof nm, "v%d", j);
        int var = dl_lf_var(f, nm, val->type, DL_LV_LET);
        dl_ls_append(f, body, dl_ls_decl(f, var, val));
        opval[j] = dl_le_var(f, var);
    }
    for (int k = 0; s == DL_OK && opval && k < g->n_out; k++) {
        dl_lexpr *val = opval[g->out_op[k]];
        if (val && val->type != g->out[k].dtype) {
            s = dl_fail(ctx, DL_ERR_TYPE, "elementwise group: output %d is %s, op %d gives %s", k,
                        dl_dtype_name(g->out[k].dtype), g->out_op[k], dl_dtype_name(val->type));
            break;
        }
        int buf = dl_lf_buf(f, g->out[k].slot, g->out[k].dtype);
        dl_ls_append(f, body, dl_ls_store(f, buf, oidx, val));
    }
    /* the loop nest, innermost first */
    dl_lstmt *nest = body;
    for (int j = nv - 1; s == DL_OK && j >= 0; j--) {
        nest = dl_ls_for(f, loopvar[j], v[j].extent, nest);
        if (nest) nest->unit_stride = j == nv - 1;
    }
    dl_ls_append(f, f->body, nest);
    if (s == DL_OK) s = dl_lfunc_status(ctx, f);
    if (s != DL_OK) {
        dl_lfunc_free(f);
        return s;
    }
    *out = f;
    return DL_OK;
}

dl_status dl_emit_elementwise(dl_ctx *ctx, const dl_ew_group *g, const dl_target *t,
                              const char *name, dl_sbuf *sb) {
    dl_lfunc *f;
    DL_TRY(dl_lower_elementwise(ctx, g, name, &f));
    dl_status s = dl_sched_default(ctx, f, t);
    if (s == DL_OK) s = dl_render_c(ctx, f, sb);
    dl_lfunc_free(f);
    return s;
}
