/* plan.c — the memory plan of a program for one binding of input shapes. Concrete shapes of
 * every value come from re-running the rows' inference with the bound input shapes and the
 * constants; graph symbols get their sizes from them. When some shape depends on tensor data
 * (NonZero, a Reshape whose target is computed at run time...) the plan is marked dynamic and
 * the executor allocates step by step instead. Otherwise every intermediate value gets an
 * offset in one arena (memplan.c); inputs, outputs and weights are pinned outside it. */
#include "program-impl.h"
#include "../codegen/emit-params.h"
#include "../codegen/memplan.h"
#include "../ops/op-call.h"

void dl_plan_free(dl_plan *pl) {
    dl_free(pl->in_dims);
    dl_free(pl->ctype);
    dl_free(pl->syms);
    dl_free(pl->first);
    dl_free(pl->last);
    dl_free(pl->offset);
    dl_free(pl->alias);
    dl_free(pl->out_view);
    dl_free_huge(pl->arena, (size_t)pl->arena_bytes);
    dl_free_huge(pl->ws, pl->ws_bytes);
    memset(pl, 0, sizeof *pl);
}

static dl_status shape_key(dl_ctx *ctx, dl_graph *g, dl_tensor *const *in, int64_t **key, int *n) {
    int len = 0;
    for (int i = 0; i < g->inputs.len; i++) len += 2 + in[i]->rank;
    int64_t *k = dl_malloc(sizeof(int64_t) * (size_t)(len + 1));
    if (!k) return dl_fail(ctx, DL_ERR_NOMEM, "out of memory planning");
    int p = 0;
    for (int i = 0; i < g->inputs.len; i++) {
        k[p++] = in[i]->dtype;
        k[p++] = in[i]->rank;
        for (int d = 0; d < in[i]->rank; d++) k[p++] = in[i]->dims[d];
    }
    *key = k;
    *n = len;
    return DL_OK;
}

static void set_type_from_tensor(dl_type *t, const dl_tensor *x) {
    t->dtype = x->dtype;
    t->rank = x->rank;
    memcpy(t->dims, x->dims, sizeof(int64_t) * (size_t)x->rank);
}

/* Binds the static dims of v to the concrete type ct: fixed dims must agree, symbols take one
 * size each. */
dl_status dl_bind_type(dl_ctx *ctx, dl_graph *g, const dl_value *v, const dl_type *ct,
                       int64_t *syms, bool is_input) {
    if (v->type.rank < 0) return DL_OK;
    char want[256], got[256];
    if (v->type.rank != ct->rank || v->type.dtype != ct->dtype) goto mismatch;
    for (int d = 0; d < ct->rank; d++) {
        int64_t sd = v->type.dims[d];
        if (sd >= 0) {
            if (sd != ct->dims[d]) goto mismatch;
            continue;
        }
        int64_t k = -sd - 1;
        if (k >= g->syms.len) continue;
        if (syms[k] < 0)
            syms[k] = ct->dims[d];
        else if (syms[k] != ct->dims[d])
            goto mismatch;
    }
    return DL_OK;
mismatch:
    dl_type_str(g, &v->type, want, sizeof want);
    dl_type_str(g, ct, got, sizeof got);
    if (is_input)
        return dl_fail(ctx, DL_ERR_SHAPE,
                       "input '%s' is %s but the model expects %s (a symbol bound to two sizes, "
                       "or a fixed size differs)",
                       v->name, got, want);
    return dl_fail(ctx, DL_ERR_SHAPE, "value '%s' is %s at run time but %s was inferred", v->name,
                   got, want);
}

/* The value of Shape(x) (with its start/end) once x's concrete type is known: shapes that
 * gradients compute this way (Expand(dy, Shape(x))) are then known to the plan, which stays
 * static. NULL (no error) when x's type is not known. */
static dl_status shape_value(dl_ctx *ctx, const dl_node *n, const dl_type *x, dl_tensor **out) {
    *out = NULL;
    if (!x || x->rank < 0 || !dl_type_known(x)) return DL_OK;
    int64_t r = x->rank, start = dl_attr_int(n, "start", 0), end = dl_attr_int(n, "end", r);
    if (start < 0) start += r;
    if (end < 0) end += r;
    start = start < 0 ? 0 : start > r ? r : start;
    end = end < 0 ? 0 : end > r ? r : end;
    int64_t len = end > start ? end - start : 0;
    DL_TRY(dl_tensor_new(ctx, DL_I64, 1, &len, out));
    for (int64_t i = 0; i < len; i++) ((int64_t *)(*out)->data)[i] = x->dims[start + i];
    return DL_OK;
}

static bool is_shape_node(const dl_node *n) {
    return (!n->op->domain || !n->op->domain[0]) && strcmp(n->op->name, "Shape") == 0 && n->out[0];
}

/* Concrete types of every value from the bound inputs; false in *dynamic when a shape needs
 * data that only exists at run time. */
static dl_status concrete_types(dl_ctx *ctx, dl_program *p, dl_tensor *const *in, dl_plan *pl) {
    dl_graph *g = p->g;
    for (int i = 0; i < g->values.len; i++) {
        dl_value *v = g->values.items[i];
        pl->ctype[i].rank = DL_RANK_UNKNOWN;
        if (v->constant) set_type_from_tensor(&pl->ctype[i], v->constant);
    }
    for (int i = 0; i < g->inputs.len; i++) {
        dl_value *v = g->inputs.items[i];
        set_type_from_tensor(&pl->ctype[v->id], in[i]);
        DL_TRY(dl_bind_type(ctx, g, v, &pl->ctype[v->id], pl->syms, true));
    }
    dl_tensor **known = dl_calloc((size_t)g->values.len + 1, sizeof *known);
    if (!known) return dl_fail(ctx, DL_ERR_NOMEM, "out of memory");
    dl_status s = DL_OK;
    const dl_type *tin[64];
    const dl_tensor *vin[64];
    dl_type tout[64];
    for (int k = 0; k < g->nodes.len && s == DL_OK && !pl->dynamic; k++) {
        dl_node *n = g->nodes.items[k];
        if (n->n_in > 64 || n->n_out > 64) {
            pl->dynamic = true;
            break;
        }
        for (int i = 0; i < n->n_in; i++) {
            tin[i] = n->in[i] ? &pl->ctype[n->in[i]->id] : NULL;
            vin[i] = n->in[i] ? (n->in[i]->constant ? n->in[i]->constant : known[n->in[i]->id]) : NULL;
        }
        s = dl_node_infer(ctx, NULL, n, tin, vin, tout);
        for (int i = 0; i < n->n_out && s == DL_OK; i++) {
            if (!n->out[i]) continue;
            if (!dl_type_known(&tout[i])) {
                pl->dynamic = true;
                break;
            }
            pl->ctype[n->out[i]->id] = tout[i];
        }
        if (s == DL_OK && is_shape_node(n)) s = shape_value(ctx, n, tin[0], &known[n->out[0]->id]);
    }
    for (int i = 0; i < g->values.len; i++) dl_tensor_free(known[i]);
    dl_free(known);
    if (s != DL_OK || pl->dynamic) return s;
    for (int i = 0; i < g->values.len; i++) {
        dl_value *v = g->values.items[i];
        if (pl->ctype[i].rank >= 0 && !v->is_input)
            DL_TRY(dl_bind_type(ctx, g, v, &pl->ctype[i], pl->syms, false));
    }
    return DL_OK;
}

static bool pinned(const dl_value *v) {
    return v->is_input || v->is_output || v->constant;
}

/* Bytes of a concrete type; -1 past the allocation cap (or on overflow). */
int64_t dl_type_nbytes(const dl_type *t) {
    int64_t n = (int64_t)dl_dtype_size(t->dtype), cap = (int64_t)dl_alloc_limit();
    for (int d = 0; d < t->rank; d++) {
        if (t->dims[d] != 0 && n > cap / t->dims[d]) return -1;
        n *= t->dims[d];
    }
    return n;
}

static dl_status live_ranges(dl_ctx *ctx, dl_program *p, dl_plan *pl) {
    dl_graph *g = p->g;
    dl_fusion *f = p->fusion;
    for (int i = 0; i < g->values.len; i++) {
        pl->first[i] = pl->last[i] = -1;
        pl->alias[i] = pl->out_view[i] = -1;
    }
    DL_UNUSED(ctx);
    for (int gi = 0; gi < f->n; gi++) {
        const dl_group *gr = &f->groups[gi];
        for (int o = 0; o < gr->n_out; o++) pl->first[gr->out[o]->id] = gi;
        for (int i = 0; i < gr->n_in; i++) pl->last[gr->in[i]->id] = gi;
        if (gr->kind == DL_G_VIEW && !gr->out[0]->is_output)
            pl->alias[gr->out[0]->id] = gr->nodes[0]->in[0]->id;
        /* a graph output that is a view (a Reshape) of an intermediate a kernel step made: the
         * intermediate is computed straight into the output's bytes, so the view copies
         * nothing (GPT-2's logits, 25 MB: 1.3 ms a run) and needs no arena slot. Every reader
         * of the intermediate reads it there; nothing else writes those bytes. The first such
         * view of a value claims it; a second is copied. */
        const dl_value *in = gr->kind == DL_G_VIEW ? gr->nodes[0]->in[0] : NULL;
        if (in && gr->out[0]->is_output && !pinned(in) && pl->first[in->id] >= 0 &&
            f->groups[pl->first[in->id]].kind != DL_G_VIEW && pl->out_view[in->id] < 0)
            pl->out_view[in->id] = gr->out[0]->id;
    }
    return DL_OK;
}

/* Gives value i a buffer unless it needs none (not materialized, pinned, or a view of pinned
 * memory); its alias, if any, has been placed already. */
static dl_status place_one(dl_ctx *ctx, dl_program *p, dl_plan *pl, int i, int *buf_of, int *val_of,
                           dl_mp_buf *bufs, int *nb_io) {
    dl_graph *g = p->g;
    dl_value *v = g->values.items[i];
    int nb = *nb_io;
    if (pinned(v) || pl->first[i] < 0 || pl->out_view[i] >= 0) return DL_OK;
    /* a view of pinned memory (an input, a weight) needs no storage of its own */
    if (pl->alias[i] >= 0 && buf_of[pl->alias[i]] < 0) return DL_OK;
    dl_mp_buf *b = &bufs[nb];
    b->size = dl_type_nbytes(&pl->ctype[i]);
    if (b->size < 0) {
        char t[256];
        return dl_fail(ctx, DL_ERR_LIMIT, "value '%s' (%s) is larger than the allocation cap",
                       v->name, dl_type_str(g, &pl->ctype[i], t, sizeof t));
    }
    b->first = pl->first[i];
    b->last = pl->last[i] >= b->first ? pl->last[i] : b->first;
    b->alias_of = pl->alias[i] >= 0 ? buf_of[pl->alias[i]] : -1;
    b->inplace_of = -1;
    buf_of[i] = nb;
    val_of[nb] = i;
    nb++;
    *nb_io = nb;
    return DL_OK;
}

/* Offsets for every unpinned materialized value. */
static dl_status place(dl_ctx *ctx, dl_program *p, dl_plan *pl) {
    dl_graph *g = p->g;
    int nv = g->values.len;
    int *buf_of = dl_malloc(sizeof(int) * (size_t)(nv + 1));
    int *val_of = dl_malloc(sizeof(int) * (size_t)(nv + 1));
    dl_mp_buf *bufs = dl_calloc((size_t)nv + 1, sizeof *bufs);
    int64_t *offs = dl_calloc((size_t)nv + 1, sizeof *offs);
    dl_status s = DL_OK;
    if (!buf_of || !val_of || !bufs || !offs) {
        s = dl_fail(ctx, DL_ERR_NOMEM, "out of memory planning");
        goto done;
    }
    int nb = 0;
    for (int i = 0; i < nv; i++) buf_of[i] = -1, pl->offset[i] = -1;
    /* Views after the values they alias: a pass may have created the aliased value later (a
     * higher id), so values without an alias go first, then views whose target is settled,
     * round by round (a view of a view settles one round later). */
    bool *done_v = dl_calloc((size_t)nv + 1, sizeof *done_v);
    if (!done_v) {
        s = dl_fail(ctx, DL_ERR_NOMEM, "out of memory planning");
        goto done;
    }
    for (int round = 0, progress = 1; progress && round <= nv; round++) {
        progress = 0;
        for (int i = 0; i < nv; i++) {
            if (done_v[i] || (round == 0 && pl->alias[i] >= 0)) continue;
            if (pl->alias[i] >= 0 && !done_v[pl->alias[i]]) continue;
            done_v[i] = true;
            progress = 1;
            dl_status si = place_one(ctx, p, pl, i, buf_of, val_of, bufs, &nb);
            if (si != DL_OK) {
                dl_free(done_v);
                s = si;
                goto done;
            }
        }
    }
    dl_free(done_v);

    /* In place: an elementwise result may take over an input of the same size and element
     * width that dies in this step (each element is read before it is written, at one index). */
    for (int k = 0; k < nb; k++) {
        int vi = val_of[k];
        const dl_group *gr = &p->fusion->groups[bufs[k].first];
        if (gr->kind != DL_G_EW || bufs[k].alias_of >= 0) continue;
        for (int i = 0; i < gr->n_in; i++) {
            const dl_value *in = gr->in[i];
            int bi = buf_of[in->id];
            if (bi < 0 || bufs[bi].alias_of >= 0 || pl->last[in->id] != bufs[k].first) continue;
            const dl_type *a = &pl->ctype[in->id], *b = &pl->ctype[vi];
            if (dl_dtype_size(a->dtype) != dl_dtype_size(b->dtype) ||
                dl_type_nbytes(a) != dl_type_nbytes(b))
                continue;
            bufs[k].inplace_of = bi;
            break;
        }
    }
    dl_mp_stats st;
    if ((s = dl_memplan(ctx, nb, bufs, 64, offs, &st)) != DL_OK) goto done;
    for (int k = 0; k < nb; k++) pl->offset[val_of[k]] = offs[k];
    pl->arena_bytes = st.arena;
    pl->sum_bytes = st.sum;
    pl->naive_peak = st.naive_peak;
done:
    dl_free(buf_of);
    dl_free(val_of);
    dl_free(bufs);
    dl_free(offs);
    return s;
}

dl_status dl_plan_bind(dl_ctx *ctx, dl_program *p, dl_tensor *const *in) {
    dl_graph *g = p->g;
    dl_plan *pl = &p->plan;
    int64_t *key = NULL;
    int nkey = 0;
    DL_TRY(shape_key(ctx, g, in, &key, &nkey));
    if (pl->valid && pl->n_in_dims == nkey &&
        !memcmp(pl->in_dims, key, sizeof(int64_t) * (size_t)nkey)) {
        dl_free(key);
        return DL_OK;
    }
    dl_plan_free(pl);
    pl->in_dims = key;
    pl->n_in_dims = nkey;
    int nv = g->values.len, ns = g->syms.len;
    pl->ctype = dl_calloc((size_t)nv + 1, sizeof *pl->ctype);
    pl->syms = dl_malloc(sizeof(int64_t) * (size_t)(ns + 1));
    pl->first = dl_malloc(sizeof(int) * (size_t)(nv + 1));
    pl->last = dl_malloc(sizeof(int) * (size_t)(nv + 1));
    pl->offset = dl_malloc(sizeof(int64_t) * (size_t)(nv + 1));
    pl->alias = dl_malloc(sizeof(int) * (size_t)(nv + 1));
    pl->out_view = dl_malloc(sizeof(int) * (size_t)(nv + 1));
    dl_status s = DL_OK;
    if (!pl->ctype || !pl->syms || !pl->first || !pl->last || !pl->offset || !pl->alias ||
        !pl->out_view) {
        s = dl_fail(ctx, DL_ERR_NOMEM, "out of memory planning");
        goto fail;
    }
    for (int i = 0; i <= ns; i++) pl->syms[i] = -1;
    if ((s = concrete_types(ctx, p, in, pl)) != DL_OK) goto fail;
    if ((s = live_ranges(ctx, p, pl)) != DL_OK) goto fail;
    if (!pl->dynamic) {
        if ((s = place(ctx, p, pl)) != DL_OK) goto fail;
        for (int gi = 0; gi < p->fusion->n; gi++) {
            size_t w = dl_group_workspace(&p->fusion->groups[gi], pl->syms);
            if (w > pl->ws_bytes) pl->ws_bytes = w;
        }
        void *arena = NULL, *ws = NULL;
        /* (64-byte aligned, as every intermediate's offset is) */
        if ((s = dl_alloc_huge_checked(ctx, (size_t)pl->arena_bytes, &arena, "the memory arena")) !=
            DL_OK)
            goto fail;
        pl->arena = arena;
        if (pl->ws_bytes &&
            (s = dl_alloc_huge_checked(ctx, pl->ws_bytes, &ws, "kernel scratch memory")) != DL_OK)
            goto fail;
        pl->ws = ws;
    }
    pl->valid = true;
    return DL_OK;
fail:
    dl_plan_free(pl);
    return s;
}
