/* autodiff.c — reverse-mode differentiation as a graph transformation: the gradient of a scalar
 * loss with respect to chosen values, built from each op row's gradient rule (grad.h). */
#include "grad.h"

#include <stdio.h>

/* ---- helpers rules build with ---- */

bool dg_needs(const dl_grad_ctx *gc, const dl_node *n, int i) {
    if (i >= n->n_in || !n->in[i]) return false;
    int id = n->in[i]->id;
    return id < gc->n_needs && gc->needs[id];
}

dl_status dg_status(const dl_grad_ctx *gc) {
    return gc->g->status;
}

dl_status dg_check(dl_grad_ctx *gc, dl_status s) {
    if (s != DL_OK && gc->g->status == DL_OK) gc->g->status = s;
    return gc->g->status;
}

dl_status dg_refuse(dl_grad_ctx *gc, const dl_node *n, const char *why) {
    char nd[200];
    if (gc->g->status == DL_OK)
        gc->g->status = dl_fail(gc->g->ctx, DL_ERR_UNSUPPORTED, "autodiff: %s: %s",
                                dl_node_desc(n, nd, sizeof nd), why);
    return gc->g->status;
}

dl_infer *dg_view_of(dl_grad_ctx *gc, const dl_node *n, dg_view *v) {
    int k = n->n_in < 8 ? n->n_in : 8;
    for (int i = 0; i < k; i++) {
        v->ty[i] = n->in[i] ? &n->in[i]->type : NULL;
        v->val[i] = n->in[i] ? n->in[i]->constant : NULL;
    }
    v->ic = (dl_infer){.ctx = gc->g->ctx,
                       .g = gc->g,
                       .node = n,
                       .opset = n->opset,
                       .n_in = k,
                       .in = v->ty,
                       .value = v->val};
    return &v->ic;
}

static dl_value *op_at(dl_grad_ctx *gc, const char *domain, const char *op, int n_in,
                       dl_value *const *in, const dl_node *like, const char *attrs) {
    dl_value *out = NULL;
    if (dg_op_like(gc, domain, op, n_in, in, like, attrs, 1, &out) != DL_OK) return NULL;
    return out;
}

dl_status dg_op_like(dl_grad_ctx *gc, const char *domain, const char *op, int n_in,
                     dl_value *const *in, const dl_node *like, const char *attrs, int n_out,
                     dl_value **out) {
    dl_graph *g = gc->g;
    if (g->status != DL_OK) return g->status;
    for (int i = 0; i < n_in; i++)
        if (!in[i] && i == 0) /* an earlier helper failed (its error is on the graph) */
            return g->status != DL_OK
                       ? g->status
                       : (g->status = dl_fail(g->ctx, DL_ERR_INTERNAL,
                                              "%s: missing operand in a gradient rule", op));
    char buf[1024];
    const char *list[32];
    int n_attr = 0;
    if (attrs && attrs[0]) {
        if (strlen(attrs) >= sizeof buf)
            return g->status =
                       dl_fail(g->ctx, DL_ERR_INTERNAL, "%s: attribute string too long", op);
        strcpy(buf, attrs);
        char *save = NULL;
        for (char *t = strtok_r(buf, ";", &save); t && n_attr < 32; t = strtok_r(NULL, ";", &save))
            list[n_attr++] = t;
    }
    bool internal = domain && domain[0];
    int opset = internal ? 1 : DG_OPSET;
    return dl_add_node_ex(g, domain, op, opset, n_in, in, n_out, out, n_attr, list,
                          like ? like->n_attrs : 0, like ? like->attrs : NULL);
}

dl_value *dg_op(dl_grad_ctx *gc, const char *op, int n_in, dl_value *const *in, const char *attrs) {
    return op_at(gc, NULL, op, n_in, in, NULL, attrs);
}

dl_value *dg_op1(dl_grad_ctx *gc, const char *op, dl_value *a, const char *attrs) {
    return op_at(gc, NULL, op, 1, &a, NULL, attrs);
}

dl_value *dg_op2(dl_grad_ctx *gc, const char *op, dl_value *a, dl_value *b, const char *attrs) {
    if (!a || !b) return NULL;
    dl_value *in[2] = {a, b};
    return op_at(gc, NULL, op, 2, in, NULL, attrs);
}

dl_value *dg_op3(dl_grad_ctx *gc, const char *op, dl_value *a, dl_value *b, dl_value *c,
                 const char *attrs) {
    if (!a || !b || !c) return NULL;
    dl_value *in[3] = {a, b, c};
    return op_at(gc, NULL, op, 3, in, NULL, attrs);
}

static dl_value *add_const(dl_grad_ctx *gc, dl_tensor *t) {
    if (!t) {
        if (gc->g->status == DL_OK)
            gc->g->status = dl_fail(gc->g->ctx, DL_ERR_NOMEM, "out of memory");
        return NULL;
    }
    return dl_constant(gc->g, dl_graph_fresh_name(gc->g, "grad_const"), t);
}

dl_value *dg_scalar(dl_grad_ctx *gc, double v, dl_dtype dt) {
    if (gc->g->status != DL_OK) return NULL;
    dl_tensor *t = NULL;
    if (dl_tensor_new(gc->g->ctx, dt, 0, NULL, &t) != DL_OK) return add_const(gc, NULL);
    dl_set_f64(t, 0, v);
    return add_const(gc, t);
}

dl_value *dg_ints(dl_grad_ctx *gc, int n, const int64_t *v) {
    if (gc->g->status != DL_OK) return NULL;
    dl_tensor *t = NULL;
    int64_t d = n;
    if (dl_tensor_new(gc->g->ctx, DL_I64, 1, &d, &t) != DL_OK) return add_const(gc, NULL);
    if (n) memcpy(t->data, v, sizeof(int64_t) * (size_t)n);
    return add_const(gc, t);
}

dl_value *dg_shape(dl_grad_ctx *gc, dl_value *v) {
    if (!v) return NULL;
    if (dl_type_known(&v->type)) return dg_ints(gc, v->type.rank, v->type.dims);
    return dg_op1(gc, "Shape", v, NULL);
}

static bool same_shape(const dl_type *a, const dl_type *b) {
    if (a->rank != b->rank || a->rank < 0) return false;
    for (int i = 0; i < a->rank; i++)
        if (a->dims[i] != b->dims[i]) return false;
    return true;
}

dl_value *dg_reshape_like(dl_grad_ctx *gc, dl_value *v, dl_value *like) {
    if (!v || !like) return NULL;
    if (same_shape(&v->type, &like->type)) return v;
    return dg_op2(gc, "Reshape", v, dg_shape(gc, like), NULL);
}

dl_value *dg_expand_like(dl_grad_ctx *gc, dl_value *v, dl_value *like) {
    if (!v || !like) return NULL;
    if (same_shape(&v->type, &like->type)) return v;
    return dg_op2(gc, "Expand", v, dg_shape(gc, like), NULL);
}

dl_value *dg_sum_to(dl_grad_ctx *gc, dl_value *grad, const dl_value *x) {
    if (!grad || !x) return NULL;
    const dl_type *gt = &grad->type, *xt = &x->type;
    if (same_shape(gt, xt)) return grad;
    dl_graph *g = gc->g;
    if (gt->rank < 0 || xt->rank < 0 || xt->rank > gt->rank) {
        if (g->status == DL_OK)
            g->status = dl_fail(g->ctx, DL_ERR_UNSUPPORTED,
                                "autodiff: cannot reduce a gradient of rank %d to rank %d",
                                gt->rank, xt->rank);
        return NULL;
    }
    int64_t axes[DL_MAX_RANK];
    int n_axes = 0, lead = gt->rank - xt->rank;
    for (int i = 0; i < gt->rank; i++) {
        if (i < lead) {
            axes[n_axes++] = i;
            continue;
        }
        int64_t xd = xt->dims[i - lead], gd = gt->dims[i];
        if (xd == gd) continue;
        if (xd == 1) {
            axes[n_axes++] = i;
            continue;
        }
        char b1[160], b2[160];
        if (g->status == DL_OK)
            g->status =
                dl_fail(g->ctx, DL_ERR_UNSUPPORTED, "autodiff: cannot tell how %s broadcasts to %s",
                        dl_type_str(g, xt, b1, sizeof b1), dl_type_str(g, gt, b2, sizeof b2));
        return NULL;
    }
    dl_value *r = grad;
    if (n_axes) r = dg_op2(gc, "ReduceSum", grad, dg_ints(gc, n_axes, axes), "keepdims=1");
    return dg_reshape_like(gc, r, (dl_value *)x);
}

dl_value *dg_transpose_last2(dl_grad_ctx *gc, dl_value *v) {
    if (!v) return NULL;
    int r = v->type.rank;
    if (r < 2) {
        if (gc->g->status == DL_OK)
            gc->g->status =
                dl_fail(gc->g->ctx, DL_ERR_INTERNAL, "autodiff: transpose of rank %d", r);
        return NULL;
    }
    char attrs[64] = "perm=[";
    for (int i = 0; i < r; i++) {
        int p = i < r - 2 ? i : (i == r - 2 ? r - 1 : r - 2);
        snprintf(attrs + strlen(attrs), sizeof attrs - strlen(attrs), "%s%d", i ? "," : "", p);
    }
    strcat(attrs, "]");
    return dg_op1(gc, "Transpose", v, attrs);
}

/* ---- the pass ---- */

static dl_status check_grad(dl_graph *g, const dl_node *n, int i, const dl_value *dx) {
    const dl_type *xt = &n->in[i]->type, *gt = &dx->type;
    bool ok = xt->dtype == gt->dtype && xt->rank == gt->rank;
    for (int d = 0; ok && d < xt->rank; d++)
        if (xt->dims[d] >= 0 && gt->dims[d] >= 0 && xt->dims[d] != gt->dims[d]) ok = false;
    if (ok) return DL_OK;
    char b1[160], b2[160], nd[200];
    return dl_fail(g->ctx, DL_ERR_INTERNAL,
                   "autodiff: the gradient rule of %s gave %s for input %d of type %s",
                   dl_node_desc(n, nd, sizeof nd), dl_type_str(g, gt, b1, sizeof b1), i,
                   dl_type_str(g, xt, b2, sizeof b2));
}

/* Adds a contribution to the gradient of value id (summing when it already has one). */
static dl_status accumulate(dl_grad_ctx *gc, dl_value **acc, const dl_value *v, dl_value *dx) {
    if (!acc[v->id])
        acc[v->id] = dx;
    else
        acc[v->id] = dg_op2(gc, "Add", acc[v->id], dx, NULL);
    return dg_status(gc);
}

dl_value *dg_zeros_like(dl_grad_ctx *gc, dl_value *x) {
    if (dl_type_known(&x->type)) {
        dl_tensor *t = NULL;
        if (dl_tensor_new(gc->g->ctx, x->type.dtype, x->type.rank, x->type.dims, &t) != DL_OK)
            return add_const(gc, NULL);
        return add_const(gc, t);
    }
    return dg_op2(gc, "Mul", x, dg_scalar(gc, 0.0, x->type.dtype), NULL);
}

dl_status dl_autodiff(dl_graph *g, dl_value *loss, int n_wrt, dl_value *const *wrt,
                      dl_value **grads) {
    if (!g || !loss || (n_wrt && (!wrt || !grads)))
        return g ? dl_fail(g->ctx, DL_ERR_INVALID, "dl_autodiff: NULL argument") : DL_ERR_INVALID;
    if (g->status != DL_OK) return g->status;
    if (!dl_dtype_is_float(loss->type.dtype) || !dl_type_known(&loss->type))
        return dl_fail(g->ctx, DL_ERR_INVALID, "autodiff: the loss '%s' must be a floating value",
                       loss->name);
    int64_t numel = 1;
    for (int i = 0; i < loss->type.rank; i++) numel *= loss->type.dims[i];
    if (numel != 1)
        return dl_fail(g->ctx, DL_ERR_INVALID, "autodiff: the loss '%s' has %lld elements, not 1",
                       loss->name, (long long)numel);
    int nv = g->values.len, n_nodes = g->nodes.len;
    bool *needs = dl_calloc((size_t)nv + 1, sizeof *needs);
    dl_value **acc = NULL;
    if (!needs) return dl_fail(g->ctx, DL_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n_wrt; i++) {
        if (!wrt[i] || !dl_dtype_is_float(wrt[i]->type.dtype)) {
            dl_free(needs);
            return dl_fail(g->ctx, DL_ERR_INVALID, "autodiff: '%s' is not a floating value",
                           wrt[i] ? wrt[i]->name : "(null)");
        }
        needs[wrt[i]->id] = true;
    }
    /* forward: which values depend on a parameter */
    for (int k = 0; k < n_nodes; k++) {
        dl_node *n = g->nodes.items[k];
        bool any = false;
        for (int i = 0; i < n->n_in; i++) any = any || (n->in[i] && needs[n->in[i]->id]);
        for (int o = 0; any && o < n->n_out; o++)
            if (n->out[o] && dl_dtype_is_float(n->out[o]->type.dtype)) needs[n->out[o]->id] = true;
    }
    dl_grad_ctx gc = {.g = g, .needs = needs, .n_needs = nv};
    dl_status s = DL_OK;
    /* acc grows with the graph: gradients are only ever attached to forward values (id < nv) */
    acc = dl_calloc((size_t)nv + 1, sizeof *acc);
    if (!acc) {
        dl_free(needs);
        return dl_fail(g->ctx, DL_ERR_NOMEM, "out of memory");
    }
    {
        dl_tensor *one = NULL;
        s = dl_tensor_new(g->ctx, loss->type.dtype, loss->type.rank, loss->type.dims, &one);
        if (s == DL_OK) {
            dl_set_f64(one, 0, 1.0);
            acc[loss->id] = add_const(&gc, one);
            s = dg_status(&gc);
        }
    }
    for (int k = n_nodes - 1; k >= 0 && s == DL_OK; k--) {
        dl_node *n = g->nodes.items[k];
        dl_value *dy[64] = {0}, *dx[64] = {0};
        bool has_dy = false, wants = false;
        if (n->n_out > 64 || n->n_in > 64) {
            char nd[200];
            s = dl_fail(g->ctx, DL_ERR_UNSUPPORTED, "autodiff: %s has more than 64 inputs or outputs",
                        dl_node_desc(n, nd, sizeof nd));
            break;
        }
        for (int o = 0; o < n->n_out; o++)
            if (n->out[o] && n->out[o]->id < nv && acc[n->out[o]->id]) {
                dy[o] = acc[n->out[o]->id];
                has_dy = true;
            }
        for (int i = 0; i < n->n_in; i++) wants = wants || dg_needs(&gc, n, i);
        if (!has_dy || !wants) continue;
        if (!n->op->grad) {
            char nd[200];
            int which = 0;
            while (which < n->n_in && !dg_needs(&gc, n, which)) which++;
            s = dl_fail(g->ctx, DL_ERR_UNSUPPORTED,
                        "autodiff: %s has no gradient rule (the loss depends on its input %d '%s')",
                        dl_node_desc(n, nd, sizeof nd), which, n->in[which]->name);
            break;
        }
        s = n->op->grad(&gc, n, dy, dx);
        if (s == DL_OK) s = dg_status(&gc);
        for (int i = 0; i < n->n_in && s == DL_OK; i++) {
            if (!dx[i] || !dg_needs(&gc, n, i)) continue;
            s = check_grad(g, n, i, dx[i]);
            if (s == DL_OK) s = accumulate(&gc, acc, n->in[i], dx[i]);
        }
    }
    for (int i = 0; i < n_wrt && s == DL_OK; i++) {
        grads[i] = acc[wrt[i]->id] ? acc[wrt[i]->id] : dg_zeros_like(&gc, wrt[i]);
        s = dg_status(&gc);
    }
    if (s == DL_OK) s = dl_graph_toposort(g);
    if (s != DL_OK && g->status == DL_OK) g->status = s;
    dl_free(needs);
    dl_free(acc);
    return s;
}
