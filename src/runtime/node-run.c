/* node-run.c — running one node's reference kernel on concrete tensors, with the row's
 * inference re-run on the actual inputs (so every shape check applies at run time) and the
 * outputs checked against it. Shared by the interpreter and the native executor's fallbacks. */
#include "runtime-impl.h"
#include "../ops/op-call.h"

/* After a kernel: its outputs must have the dtype and known dims that inference promised. */
static dl_status check_output(dl_ctx *ctx, const dl_node *n, int i, const dl_type *ty,
                              const dl_tensor *t) {
    char d[300], a[256], b[256];
    if (!t->data)
        return dl_fail(ctx, DL_ERR_INTERNAL, "%s: kernel did not produce output %d",
                       dl_node_desc(n, d, sizeof d), i);
    bool ok = t->dtype == ty->dtype && (ty->rank < 0 || ty->rank == t->rank);
    for (int k = 0; ok && ty->rank >= 0 && k < t->rank; k++)
        if (ty->dims[k] >= 0 && ty->dims[k] != t->dims[k]) ok = false;
    if (!ok)
        return dl_fail(ctx, DL_ERR_INTERNAL, "%s: output %d is %s but inference said %s",
                       dl_node_desc(n, d, sizeof d), i, dl_tensor_desc(t, a, sizeof a),
                       dl_type_str(n->out[i] ? n->out[i]->graph : NULL, ty, b, sizeof b));
    return DL_OK;
}

static bool same_shape(const dl_type *ty, const dl_tensor *t) {
    if (ty->dtype != t->dtype || ty->rank != t->rank) return false;
    for (int k = 0; k < t->rank; k++)
        if (ty->dims[k] != t->dims[k]) return false;
    return true;
}

#define NODE_IO_STACK 16

dl_status dl_run_node_ref(dl_ctx *ctx, const dl_node *n, const dl_tensor *const *in,
                          dl_tensor **outs) {
    int max_io = n->n_in > n->n_out ? n->n_in : n->n_out;
    const dl_type *in_ty_s[NODE_IO_STACK];
    dl_type in_store_s[NODE_IO_STACK], out_ty_s[NODE_IO_STACK];
    bool given_s[NODE_IO_STACK];
    const dl_type **in_ty = in_ty_s;
    dl_type *in_store = in_store_s, *out_ty = out_ty_s;
    bool *given = given_s;
    if (max_io > NODE_IO_STACK) {
        in_ty = dl_calloc((size_t)max_io, sizeof *in_ty);
        in_store = dl_calloc((size_t)max_io, sizeof *in_store);
        out_ty = dl_calloc((size_t)max_io, sizeof *out_ty);
        given = dl_calloc((size_t)max_io, sizeof *given);
    }
    dl_status s = DL_OK;
    if (!in_ty || !in_store || !out_ty || !given) {
        s = dl_fail(ctx, DL_ERR_NOMEM, "out of memory running a node");
        goto done;
    }
    /* outputs the caller preallocated stay the caller's, even when inference fails */
    for (int i = 0; i < n->n_out; i++) given[i] = outs[i] != NULL;
    for (int i = 0; i < n->n_in; i++) {
        in_ty[i] = NULL;
        if (!in[i]) continue;
        dl_type *t = &in_store[i];
        t->dtype = in[i]->dtype;
        t->rank = in[i]->rank;
        memcpy(t->dims, in[i]->dims, sizeof(int64_t) * (size_t)t->rank);
        in_ty[i] = t;
    }
    if ((s = dl_node_infer(ctx, NULL, n, in_ty, in, out_ty)) != DL_OK) goto done;
    for (int i = 0; i < n->n_out; i++) {
        const dl_type *ty = &out_ty[i];
        if (given[i]) {
            /* preallocated by a memory plan: the plan's shape must be the one inference says */
            if (!same_shape(ty, outs[i])) {
                char d[300], a[256];
                s = dl_fail(ctx, DL_ERR_INTERNAL, "%s: output %d was planned as %s",
                            dl_node_desc(n, d, sizeof d), i, dl_tensor_desc(outs[i], a, sizeof a));
                goto done;
            }
            if (outs[i]->nbytes) memset(outs[i]->data, 0, outs[i]->nbytes);
        } else if (dl_type_known(ty)) {
            if ((s = dl_tensor_new(ctx, ty->dtype, ty->rank, ty->dims, &outs[i])) != DL_OK) {
                char d[300];
                dl_ctx_prefix(ctx, "%s: output %d", dl_node_desc(n, d, sizeof d), i);
                goto done;
            }
        } else {
            outs[i] = dl_calloc(1, sizeof(dl_tensor));
            if (!outs[i]) {
                s = dl_fail(ctx, DL_ERR_NOMEM, "out of memory");
                goto done;
            }
            outs[i]->dtype = ty->dtype;
        }
    }
    dl_kernel kc = {.ctx = ctx,
                    .node = n,
                    .opset = n->opset,
                    .n_in = n->n_in,
                    .in = in,
                    .in_type = in_ty,
                    .n_out = n->n_out,
                    .out = outs,
                    .out_type = out_ty};
    if ((s = n->op->ref(&kc)) != DL_OK) goto done;
    for (int i = 0; i < n->n_out && s == DL_OK; i++)
        if (n->out[i]) s = check_output(ctx, n, i, &out_ty[i], outs[i]);
done:
    if (s != DL_OK)
        for (int i = 0; i < n->n_out; i++)
            if (given && !given[i]) { /* nothing was allocated when given is NULL */
                dl_tensor_free(outs[i]);
                outs[i] = NULL;
            }
    if (in_ty != in_ty_s) {
        dl_free(in_ty);
        dl_free(in_store);
        dl_free(out_ty);
        dl_free(given);
    }
    return s;
}
