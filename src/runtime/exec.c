/* exec.c — the native executor: runs a compiled program's steps (fusion groups) in order.
 * Generated kernels get a pointer per value and the symbol sizes; views share their input's
 * bytes; fallback groups call the reference kernel of their node. With a static plan every
 * intermediate lives at its planned arena offset (or in the bytes of an output that is a view of
 * it) and nothing is allocated but the outputs; with a dynamic plan (data-dependent shapes)
 * tensors are allocated step by step and freed after their last use. */
#include "program-impl.h"
#include "../codegen/emit-params.h"
#include "../ops/op-call.h"

typedef struct exec {
    dl_ctx *ctx;
    dl_program *p;
    dl_graph *g;
    dl_plan *pl;
    dl_tensor **val;  /* by value id */
    dl_tensor *views; /* by value id: headers over arena or shared bytes */
    bool *owned;      /* val[i] allocated here */
    int *uses_left;   /* dynamic plans: readers still to run */
    dl_type *ctype;   /* dynamic plans: concrete types known so far */
    void **ptr;       /* by value id, then the scratch and error slots, then the prepacked
                       * weights (dl_slot_ws) */
    int64_t err[DLRT_ERR_WORDS]; /* the run's error record, where kernels report bad data */
    int64_t *syms;
    unsigned char *base;
    void *ws;                /* the plan's scratch, aligned */
    dl_tensor *const *reuse; /* by output index: caller tensors to write outputs into, or NULL */
} exec;

/* The tensor holding v now: its constant, or what the steps so far bound or produced. */
static dl_tensor *value_tensor(const exec *ex, const dl_value *v) {
    return v ? (v->constant ? v->constant : ex->val[v->id]) : NULL;
}

static void set_view(dl_tensor *t, const dl_type *ty, void *data) {
    memset(t, 0, sizeof *t);
    t->dtype = ty->dtype;
    t->rank = ty->rank;
    memcpy(t->dims, ty->dims, sizeof(int64_t) * (size_t)ty->rank);
    t->numel = 1;
    for (int d = 0; d < ty->rank; d++) t->numel *= ty->dims[d];
    t->nbytes = (size_t)t->numel * dl_dtype_size(ty->dtype);
    t->data = data;
    t->owns_data = false;
}

static dl_status setup_static(exec *ex) {
    dl_graph *g = ex->g;
    /* outputs written into the caller's tensors where they fit (not owned here) */
    for (int j = 0; ex->reuse && j < g->outputs.len; j++) {
        const dl_value *v = g->outputs.items[j];
        const dl_tensor *r = ex->reuse[j];
        const dl_type *t = &ex->pl->ctype[v->id];
        if (r && v->producer && !ex->val[v->id] && r->dtype == t->dtype && r->rank == t->rank &&
            r->data && memcmp(r->dims, t->dims, sizeof(int64_t) * (size_t)t->rank) == 0)
            ex->val[v->id] = ex->reuse[j];
    }
    for (int i = 0; i < g->values.len; i++) {
        dl_value *v = g->values.items[i];
        if (v->constant || v->is_input || ex->val[i]) continue;
        if (v->is_output && v->producer) {
            const dl_type *t = &ex->pl->ctype[i];
            DL_TRY(dl_tensor_new(ex->ctx, t->dtype, t->rank, t->dims, &ex->val[i]));
            ex->owned[i] = true;
        } else if (ex->pl->offset[i] >= 0) {
            set_view(&ex->views[i], &ex->pl->ctype[i], ex->base + ex->pl->offset[i]);
            ex->val[i] = &ex->views[i];
        }
    }
    /* intermediates computed into the bytes of an output that is a view of them (plan.c) */
    for (int i = 0; i < g->values.len; i++) {
        const int o = ex->pl->out_view[i];
        if (o < 0) continue;
        const dl_tensor *dst = ex->val[o];
        const int64_t nb = dl_type_nbytes(&ex->pl->ctype[i]);
        if (!dst || nb < 0 || (size_t)nb != dst->nbytes)
            return dl_fail(ex->ctx, DL_ERR_INTERNAL, "value '%s' does not fit its output view",
                           ((const dl_value *)g->values.items[i])->name);
        set_view(&ex->views[i], &ex->pl->ctype[i], dst->data);
        ex->val[i] = &ex->views[i];
    }
    return DL_OK;
}

/* Dynamic plans: concrete output types of a generated group's nodes, from its inputs' actual
 * shapes, then its outputs allocated and the symbols bound. */
static dl_status prepare_dynamic(exec *ex, const dl_group *gr) {
    const dl_type *tin[64];
    const dl_tensor *vin[64];
    dl_type tout[64];
    for (int k = 0; k < gr->n_nodes; k++) {
        const dl_node *n = gr->nodes[k];
        if (n->n_in > 64 || n->n_out > 64)
            return dl_fail(ex->ctx, DL_ERR_UNSUPPORTED, "node with more than 64 inputs");
        for (int i = 0; i < n->n_in; i++) {
            const dl_value *v = n->in[i];
            tin[i] = v ? &ex->ctype[v->id] : NULL;
            vin[i] = value_tensor(ex, v);
        }
        DL_TRY(dl_node_infer(ex->ctx, NULL, n, tin, vin, tout));
        for (int i = 0; i < n->n_out; i++)
            if (n->out[i]) ex->ctype[n->out[i]->id] = tout[i];
    }
    for (int i = 0; i < gr->n_in; i++)
        DL_TRY(dl_bind_type(ex->ctx, ex->g, gr->in[i], &ex->ctype[gr->in[i]->id], ex->syms, false));
    for (int o = 0; o < gr->n_out; o++) {
        const dl_value *v = gr->out[o];
        const dl_type *t = &ex->ctype[v->id];
        if (!dl_type_known(t)) {
            char d[300];
            return dl_fail(ex->ctx, DL_ERR_INTERNAL, "%s: output shape unknown at run time",
                           dl_node_desc(gr->nodes[gr->n_nodes - 1], d, sizeof d));
        }
        DL_TRY(dl_bind_type(ex->ctx, ex->g, v, t, ex->syms, false));
        DL_TRY(dl_tensor_new(ex->ctx, t->dtype, t->rank, t->dims, &ex->val[v->id]));
        ex->owned[v->id] = true;
    }
    return DL_OK;
}

static dl_status run_view(exec *ex, const dl_group *gr) {
    const dl_value *in = gr->nodes[0]->in[0], *out = gr->out[0];
    dl_tensor *src = ex->val[in->id];
    if (ex->pl->dynamic || out->is_output) {
        if (ex->pl->dynamic) {
            char d[300];
            dl_tensor *outs[1] = {NULL};
            const dl_tensor *ins[8] = {0};
            const dl_node *n = gr->nodes[0];
            if (n->n_in > 8)
                return dl_fail(ex->ctx, DL_ERR_INTERNAL, "%s: too many inputs",
                               dl_node_desc(n, d, sizeof d));
            for (int i = 0; i < n->n_in; i++) ins[i] = value_tensor(ex, n->in[i]);
            DL_TRY(dl_run_node_ref(ex->ctx, n, ins, outs));
            ex->val[out->id] = outs[0];
            ex->owned[out->id] = true;
            ex->ctype[out->id].dtype = outs[0]->dtype;
            ex->ctype[out->id].rank = outs[0]->rank;
            memcpy(ex->ctype[out->id].dims, outs[0]->dims, sizeof(int64_t) * (size_t)outs[0]->rank);
            return dl_bind_type(ex->ctx, ex->g, out, &ex->ctype[out->id], ex->syms, false);
        }
        dl_tensor *dst = ex->val[out->id];
        if (dst->nbytes != src->nbytes)
            return dl_fail(ex->ctx, DL_ERR_INTERNAL, "view '%s' changes the byte size", out->name);
        if (dst->nbytes && dst->data != src->data) memcpy(dst->data, src->data, dst->nbytes);
        return DL_OK;
    }
    set_view(&ex->views[out->id], &ex->pl->ctype[out->id], src->data);
    ex->val[out->id] = &ex->views[out->id];
    return DL_OK;
}

static dl_status run_fallback(exec *ex, const dl_group *gr) {
    const dl_node *n = gr->nodes[0];
    const dl_tensor *ins_s[16];
    dl_tensor *outs_s[16];
    const dl_tensor **ins = ins_s;
    dl_tensor **outs = outs_s;
    if (n->n_in > 16 || n->n_out > 16) {
        ins = dl_calloc((size_t)n->n_in + 1, sizeof *ins);
        outs = dl_calloc((size_t)n->n_out + 1, sizeof *outs);
        if (!ins || !outs) {
            dl_free(ins);
            dl_free(outs);
            return dl_fail(ex->ctx, DL_ERR_NOMEM, "out of memory");
        }
    }
    for (int i = 0; i < n->n_in; i++) ins[i] = value_tensor(ex, n->in[i]);
    for (int i = 0; i < n->n_out; i++)
        outs[i] = n->out[i] && !ex->pl->dynamic ? ex->val[n->out[i]->id] : NULL;
    dl_status s = dl_run_node_ref(ex->ctx, n, ins, outs);
    for (int i = 0; i < n->n_out && s == DL_OK; i++) {
        const dl_value *v = n->out[i];
        if (!v) {
            dl_tensor_free(outs[i]); /* an omitted optional output */
            continue;
        }
        if (!ex->pl->dynamic) continue;
        ex->val[v->id] = outs[i];
        ex->owned[v->id] = true;
        dl_type *t = &ex->ctype[v->id];
        t->dtype = outs[i]->dtype;
        t->rank = outs[i]->rank;
        memcpy(t->dims, outs[i]->dims, sizeof(int64_t) * (size_t)t->rank);
        s = dl_bind_type(ex->ctx, ex->g, v, t, ex->syms, false);
    }
    if (ins != ins_s) {
        dl_free(ins);
        dl_free(outs);
    }
    return s;
}

/* The error a kernel of gr reported in the run's record (dlrt.h), worded as the reference
 * kernel words the same error (without its list of inputs); DL_OK when none. */
static dl_status kernel_error(const exec *ex, const dl_group *gr) {
    const int64_t *e = ex->err;
    if (e[0] == DLRT_ERR_NONE) return DL_OK;
    char d[300], t[160];
    dl_node_desc(dl_group_anchor(gr), d, sizeof d);
    if (e[0] == DLRT_ERR_INDEX) {
        dl_bad_index_text(t, sizeof t, e[1], e[2], e[3]);
        return dl_fail(ex->ctx, DL_ERR_INVALID, "%s: %s", d, t);
    }
    return dl_fail(ex->ctx, DL_ERR_INTERNAL, "%s: kernel reported error %lld", d, (long long)e[0]);
}

static dl_status run_kernel(exec *ex, int gi, const dl_group *gr) {
    for (int i = 0; i < gr->n_in; i++) {
        const dl_tensor *t = value_tensor(ex, gr->in[i]);
        if (!t)
            return dl_fail(ex->ctx, DL_ERR_INTERNAL, "value '%s' was not computed",
                           gr->in[i]->name);
        ex->ptr[gr->in[i]->id] = t->data;
    }
    for (int o = 0; o < gr->n_out; o++) {
        dl_tensor *t = ex->val[gr->out[o]->id];
        if (!t) return dl_fail(ex->ctx, DL_ERR_INTERNAL, "no storage for '%s'", gr->out[o]->name);
        ex->ptr[gr->out[o]->id] = t->data;
    }
    void *ws = ex->ws;
    size_t need = ex->pl->dynamic ? dl_group_workspace(gr, ex->syms) : 0;
    if (need) DL_TRY(dl_alloc_checked(ex->ctx, need, &ws, "kernel scratch memory"));
    ex->ptr[dl_slot_ws(ex->g)] = ws;
    ex->p->kernels[gi](ex->ptr, ex->syms);
    if (need) dl_free(ws);
    return kernel_error(ex, gr);
}

static void release_dead(exec *ex, const dl_group *gr) {
    for (int i = 0; i < gr->n_in; i++) {
        int id = gr->in[i]->id;
        if (--ex->uses_left[id] > 0 || gr->in[i]->is_output || !ex->owned[id]) continue;
        dl_tensor_free(ex->val[id]);
        ex->val[id] = NULL;
        ex->owned[id] = false;
    }
}

static dl_status run_program(dl_ctx *ctx, dl_program *p, int n_inputs, const char *const *names,
                             dl_tensor *const *inputs, dl_tensor **outputs, dl_step_hook hook,
                             void *user, dl_tensor *const *reuse);

dl_status dl_program_run_hooked(dl_ctx *ctx, dl_program *p, int n_inputs, const char *const *names,
                                dl_tensor *const *inputs, dl_tensor **outputs, dl_step_hook hook,
                                void *user, dl_tensor *const *reuse) {
    return run_program(ctx, p, n_inputs, names, inputs, outputs, hook, user, reuse);
}

dl_status dl_program_run_reuse(dl_ctx *ctx, dl_program *p, int n_inputs, const char *const *names,
                               dl_tensor *const *inputs, dl_tensor **outputs,
                               dl_tensor *const *reuse) {
    if (!p) return dl_fail(ctx, DL_ERR_INVALID, "dl_program_run: NULL program");
    return run_program(ctx, p, n_inputs, names, inputs, outputs, NULL, NULL, reuse);
}

static dl_status run_program(dl_ctx *ctx, dl_program *p, int n_inputs, const char *const *names,
                             dl_tensor *const *inputs, dl_tensor **outputs, dl_step_hook hook,
                             void *user, dl_tensor *const *reuse) {
    dl_graph *g = p->g;
    if (!outputs || (n_inputs > 0 && !inputs))
        return dl_fail(ctx, DL_ERR_INVALID, "dl_program_run: NULL inputs or outputs");
    if (p->interp_only) return dl_interp_run(ctx, p->src, n_inputs, names, inputs, outputs);
    int nv = g->values.len;
    dl_tensor **ordered = dl_calloc((size_t)g->inputs.len + 1, sizeof *ordered);
    exec ex = {.ctx = ctx, .p = p, .g = g, .pl = &p->plan, .reuse = reuse};
    ex.val = dl_calloc((size_t)nv + 1, sizeof *ex.val);
    ex.views = dl_calloc((size_t)nv + 1, sizeof *ex.views);
    ex.owned = dl_calloc((size_t)nv + 1, sizeof *ex.owned);
    ex.uses_left = dl_calloc((size_t)nv + 1, sizeof *ex.uses_left);
    ex.ctype = dl_calloc((size_t)nv + 1, sizeof *ex.ctype);
    /* by value id, then the scratch and error slots, then the prepacked weights (module.h) */
    ex.ptr = dl_calloc((size_t)dl_slot_pack(g, p->n_packs), sizeof *ex.ptr);
    ex.syms = dl_malloc(sizeof(int64_t) * (size_t)(g->syms.len + 1));
    dl_status s = DL_OK;
    if (!ordered || !ex.val || !ex.views || !ex.owned || !ex.uses_left || !ex.ctype || !ex.ptr ||
        !ex.syms) {
        s = dl_fail(ctx, DL_ERR_NOMEM, "out of memory starting a program");
        goto done;
    }
    for (int k = 0; k < p->n_packs; k++) ex.ptr[dl_slot_pack(g, k)] = p->packs[k];
    ex.ptr[dl_slot_err(g)] = ex.err;
    if ((s = dl_order_inputs(ctx, g, n_inputs, names, inputs, ordered)) != DL_OK) goto done;
    if ((s = dl_plan_bind(ctx, p, ordered)) != DL_OK) goto done;
    memcpy(ex.syms, p->plan.syms, sizeof(int64_t) * (size_t)(g->syms.len + 1));
    /* every run sets its count: the pool's is per module, and another program sharing the
     * cached module may have changed it since */
    if (p->set_threads) p->set_threads(p->threads);
    for (int i = 0; i < nv; i++) {
        dl_value *v = g->values.items[i];
        if (v->constant) {
            ex.val[i] = v->constant;
            ex.ctype[i].dtype = v->constant->dtype;
            ex.ctype[i].rank = v->constant->rank;
            memcpy(ex.ctype[i].dims, v->constant->dims,
                   sizeof(int64_t) * (size_t)v->constant->rank);
        }
    }
    for (int i = 0; i < g->inputs.len; i++) {
        dl_value *v = g->inputs.items[i];
        ex.val[v->id] = ordered[i];
        ex.ctype[v->id].dtype = ordered[i]->dtype;
        ex.ctype[v->id].rank = ordered[i]->rank;
        memcpy(ex.ctype[v->id].dims, ordered[i]->dims, sizeof(int64_t) * (size_t)ordered[i]->rank);
    }
    if (p->plan.dynamic) {
        for (int gi = 0; gi < p->fusion->n; gi++)
            for (int i = 0; i < p->fusion->groups[gi].n_in; i++)
                ex.uses_left[p->fusion->groups[gi].in[i]->id]++;
    } else {
        ex.base = p->plan.arena; /* both 64-byte aligned (dl_malloc_huge) */
        ex.ws = p->plan.ws;
        if ((s = setup_static(&ex)) != DL_OK) goto done;
    }
    for (int gi = 0; gi < p->fusion->n && s == DL_OK; gi++) {
        const dl_group *gr = &p->fusion->groups[gi];
        switch (gr->kind) {
        case DL_G_VIEW:
            s = run_view(&ex, gr);
            break;
        case DL_G_FALLBACK:
            s = run_fallback(&ex, gr);
            break;
        default:
            if (!p->kernels[gi]) {
                s = dl_fail(ctx, DL_ERR_INTERNAL, "step %d has no kernel", gi);
                break;
            }
            if (p->plan.dynamic && (s = prepare_dynamic(&ex, gr)) != DL_OK) break;
            s = run_kernel(&ex, gi, gr);
        }
        if (s == DL_OK && hook) s = hook(user, p, gi, ex.val);
        if (s == DL_OK && p->plan.dynamic) release_dead(&ex, gr);
    }
    for (int i = 0; i < g->outputs.len && s == DL_OK; i++) outputs[i] = NULL;
    for (int i = 0; i < g->outputs.len && s == DL_OK; i++) {
        dl_value *v = g->outputs.items[i];
        if (ex.owned[v->id]) {
            outputs[i] = ex.val[v->id];
            ex.owned[v->id] = false;
        } else if (reuse && reuse[i] && ex.val[v->id] == reuse[i]) {
            outputs[i] = reuse[i];
        } else if (ex.val[v->id]) {
            s = dl_tensor_clone(ctx, ex.val[v->id], &outputs[i]);
        } else {
            s = dl_fail(ctx, DL_ERR_INTERNAL, "output '%s' was not computed", v->name);
        }
    }
    if (s != DL_OK)
        for (int i = 0; i < g->outputs.len; i++) {
            if (!(reuse && outputs[i] == reuse[i])) dl_tensor_free(outputs[i]);
            outputs[i] = NULL;
        }
done:
    for (int i = 0; ex.owned && i < nv; i++)
        if (ex.owned[i]) dl_tensor_free(ex.val[i]);
    dl_free(ordered);
    dl_free(ex.val);
    dl_free(ex.views);
    dl_free(ex.owned);
    dl_free(ex.uses_left);
    dl_free(ex.ctype);
    dl_free(ex.ptr);
    dl_free(ex.syms);
    return s;
}

dl_status dl_program_run(dl_ctx *ctx, dl_program *p, int n_inputs, const char *const *names,
                         dl_tensor *const *inputs, dl_tensor **outputs) {
    if (!p) return dl_fail(ctx, DL_ERR_INVALID, "dl_program_run: NULL program");
    return dl_program_run_hooked(ctx, p, n_inputs, names, inputs, outputs, NULL, NULL, NULL);
}
