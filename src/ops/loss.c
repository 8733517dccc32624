/* loss.c — op family "loss" (rows of the op table): NegativeLogLikelihoodLoss and
 * SoftmaxCrossEntropyLoss, and their gradient rules (with respect to the scores).
 *
 * Inputs are [N, C] or [N, C, d1, ..., dk] with targets [N] or [N, d1, ..., dk]; both are viewed
 * as [N, C, D] / [N, D] with D = d1 * ... * dk. Per element: loss = -weight[t] * logp[n, t, d],
 * with weight 0 for t == ignore_index. reduction: none (shape of the target), sum, or mean
 * (sum / sum of the weights used). Accumulation is in double. */
#include "op-impl.h"
#include "../train/grad.h"

#include <math.h>

typedef enum red { RED_NONE, RED_SUM, RED_MEAN, RED_BAD } red;

static red parse_reduction(const dl_node *n) {
    const char *s = dl_attr_str(n, "reduction", "mean");
    if (!strcmp(s, "none")) return RED_NONE;
    if (!strcmp(s, "sum")) return RED_SUM;
    if (!strcmp(s, "mean")) return RED_MEAN;
    return RED_BAD;
}

static const dl_attr_spec loss_attrs[] = {
    {"reduction", DL_ATTR_STRING},
    {"ignore_index", DL_ATTR_INT},
    {NULL, DL_ATTR_UNDEFINED},
};

static bool dims_clash(int64_t a, int64_t b) {
    return a >= 0 && b >= 0 && a != b;
}

/* Shared inference: input 0 scores/log-probs, input 1 targets, input 2 optional weights. */
static dl_status loss_infer(dl_infer *ic, bool with_log_prob) {
    const dl_type *x = ic->in[0], *t = ic->in[1];
    if (!dl_dtype_is_float(x->dtype))
        return dl_infer_fail(ic, DL_ERR_TYPE, "input must be a floating type, got %s",
                             dl_dtype_name(x->dtype));
    if (t->dtype != DL_I32 && t->dtype != DL_I64)
        return dl_infer_fail(ic, DL_ERR_TYPE, "target must be int32 or int64, got %s",
                             dl_dtype_name(t->dtype));
    red r = parse_reduction(ic->node);
    if (r == RED_BAD)
        return dl_infer_fail(ic, DL_ERR_INVALID, "reduction must be none, sum or mean, got '%s'",
                             dl_attr_str(ic->node, "reduction", ""));
    if (x->rank >= 0 && x->rank < 2)
        return dl_infer_fail(ic, DL_ERR_SHAPE, "input must have rank >= 2 ([N, C, ...])");
    if (x->rank >= 0 && t->rank >= 0) {
        if (t->rank != x->rank - 1)
            return dl_infer_fail(ic, DL_ERR_SHAPE, "target rank must be input rank - 1");
        for (int i = 0; i < t->rank; i++) {
            int64_t xd = x->dims[i == 0 ? 0 : i + 1];
            if (dims_clash(xd, t->dims[i]))
                return dl_infer_fail(ic, DL_ERR_SHAPE, "target dim %d does not match input", i);
        }
    }
    if (dl_has_in(ic, 2)) {
        const dl_type *w = ic->in[2];
        if (w->dtype != x->dtype)
            return dl_infer_fail(ic, DL_ERR_TYPE, "weight dtype %s differs from input %s",
                                 dl_dtype_name(w->dtype), dl_dtype_name(x->dtype));
        if (w->rank >= 0 && w->rank != 1)
            return dl_infer_fail(ic, DL_ERR_SHAPE, "weight must be 1-D [C]");
        if (w->rank == 1 && x->rank >= 2 && dims_clash(w->dims[0], x->dims[1]))
            return dl_infer_fail(ic, DL_ERR_SHAPE, "weight length must equal C");
    }
    if (r == RED_NONE) {
        if (t->rank >= 0) {
            DL_TRY(dl_infer_set(ic, 0, x->dtype, t->rank, t->dims));
        } else if (x->rank >= 0) {
            int64_t dims[DL_MAX_RANK];
            dims[0] = x->dims[0];
            for (int i = 2; i < x->rank; i++) dims[i - 1] = x->dims[i];
            DL_TRY(dl_infer_set(ic, 0, x->dtype, x->rank - 1, dims));
        } else {
            ic->out[0].dtype = x->dtype;
        }
    } else {
        DL_TRY(dl_infer_set(ic, 0, x->dtype, 0, NULL));
    }
    if (ic->n_out > 1) {
        if (!with_log_prob) return dl_infer_fail(ic, DL_ERR_INVALID, "has one output");
        DL_TRY(dl_infer_same(ic, 1, 0));
    }
    return DL_OK;
}

static dl_status nll_infer(dl_infer *ic) {
    return loss_infer(ic, false);
}
static dl_status sce_infer(dl_infer *ic) {
    return loss_infer(ic, true);
}

/* Checks the runtime shapes and returns N, C, D. */
static dl_status loss_dims(dl_kernel *kc, int64_t *N, int64_t *C, int64_t *D) {
    const dl_tensor *x = kc->in[0], *t = kc->in[1];
    const dl_tensor *w = kc->n_in > 2 ? kc->in[2] : NULL;
    if (x->rank < 2 || t->rank != x->rank - 1)
        return dl_kernel_fail(kc, DL_ERR_SHAPE, "input/target ranks do not agree");
    for (int i = 0; i < t->rank; i++)
        if (t->dims[i] != x->dims[i == 0 ? 0 : i + 1])
            return dl_kernel_fail(kc, DL_ERR_SHAPE, "target dim %d does not match input", i);
    if (w && (w->rank != 1 || w->dims[0] != x->dims[1]))
        return dl_kernel_fail(kc, DL_ERR_SHAPE, "weight must be 1-D of length C");
    *N = x->dims[0];
    *C = x->dims[1];
    int64_t d = 1;
    for (int i = 2; i < x->rank; i++) d *= x->dims[i];
    *D = d;
    return DL_OK;
}

/* The NLL part: logp is either the input tensor (lp_t) or a double buffer (lp_buf). */
static dl_status nll_core(dl_kernel *kc, const dl_tensor *lp_t, const double *lp_buf, int64_t N,
                          int64_t C, int64_t D) {
    const dl_tensor *t = kc->in[1];
    const dl_tensor *w = kc->n_in > 2 ? kc->in[2] : NULL;
    red r = parse_reduction(kc->node);
    if (r == RED_BAD) return dl_kernel_fail(kc, DL_ERR_INVALID, "bad reduction");
    bool has_ii = dl_node_attr(kc->node, "ignore_index") != NULL;
    int64_t ii = dl_attr_int(kc->node, "ignore_index", 0);
    dl_tensor *y = kc->out[0];
    if (!y->data) {
        if (r == RED_NONE)
            DL_TRY(dl_kernel_alloc_out(kc, 0, lp_t->dtype, t->rank, t->dims));
        else
            DL_TRY(dl_kernel_alloc_out(kc, 0, lp_t->dtype, 0, NULL));
        y = kc->out[0];
    }
    if (y->numel != (r == RED_NONE ? t->numel : 1))
        return dl_kernel_fail(kc, DL_ERR_INTERNAL, "output preallocated with another size");
    double total = 0, wsum = 0;
    for (int64_t n = 0; n < N; n++) {
        for (int64_t d = 0; d < D; d++) {
            int64_t ti = n * D + d;
            int64_t c = dl_get_i64(t, ti);
            double loss = 0, wt = 0;
            if (!(has_ii && c == ii)) {
                if (c < 0 || c >= C)
                    return dl_kernel_fail(kc, DL_ERR_INVALID,
                                          "target %lld out of range [0, %lld) at %lld",
                                          (long long)c, (long long)C, (long long)ti);
                wt = w ? dl_get_f64(w, c) : 1.0;
                int64_t xi = (n * C + c) * D + d;
                double lp = lp_buf ? lp_buf[xi] : dl_get_f64(lp_t, xi);
                loss = -lp * wt;
            }
            if (r == RED_NONE) dl_set_f64(y, ti, loss);
            total += loss;
            wsum += wt;
        }
    }
    if (r == RED_SUM)
        dl_set_f64(y, 0, total);
    else if (r == RED_MEAN)
        dl_set_f64(y, 0, total / wsum);
    return DL_OK;
}

static dl_status nll_ref(dl_kernel *kc) {
    int64_t N, C, D;
    DL_TRY(loss_dims(kc, &N, &C, &D));
    return nll_core(kc, kc->in[0], NULL, N, C, D);
}

static dl_status sce_ref(dl_kernel *kc) {
    const dl_tensor *x = kc->in[0];
    int64_t N, C, D;
    DL_TRY(loss_dims(kc, &N, &C, &D));
    size_t nbytes;
    DL_TRY(dl_mul_size(kc->ctx, (size_t)x->numel, sizeof(double), &nbytes, "log-probabilities"));
    double *lp = dl_malloc(nbytes ? nbytes : 1);
    if (!lp) return dl_kernel_fail(kc, DL_ERR_NOMEM, "out of memory");
    /* log-softmax over C with the maximum subtracted */
    for (int64_t n = 0; n < N; n++) {
        for (int64_t d = 0; d < D; d++) {
            int64_t base = n * C * D + d;
            double m = -INFINITY;
            for (int64_t c = 0; c < C; c++) {
                double v = dl_get_f64(x, base + c * D);
                if (v > m || isnan(v)) m = isnan(m) ? m : v;
            }
            double s = 0;
            bool finite = isfinite(m);
            for (int64_t c = 0; c < C; c++)
                s += exp(dl_get_f64(x, base + c * D) - (finite ? m : 0));
            double ls = log(s) + (finite ? m : 0);
            for (int64_t c = 0; c < C; c++) lp[base + c * D] = dl_get_f64(x, base + c * D) - ls;
        }
    }
    dl_status st = nll_core(kc, x, lp, N, C, D);
    if (st == DL_OK && kc->n_out > 1) {
        dl_tensor *o = kc->out[1];
        if (!o->data) st = dl_kernel_alloc_out(kc, 1, x->dtype, x->rank, x->dims);
        o = kc->out[1];
        if (st == DL_OK && o->numel != x->numel)
            st = dl_kernel_fail(kc, DL_ERR_INTERNAL, "log_prob preallocated with another size");
        if (st == DL_OK)
            for (int64_t i = 0; i < x->numel; i++) dl_set_f64(o, i, lp[i]);
    }
    dl_free(lp);
    return st;
}

/* ---- gradient rules (grad.h) ---- */

/* d loss / d logp, shaped like the input [N, C, d...]: -dy * w[t] at the target class of each
 * non-ignored element (one-hot from Equal(target, class index), so targets may be symbolic),
 * divided by the summed weights for reduction mean. NULL (an error on the graph) when the class
 * count is unknown or the weights would need a gradient. */
static dl_value *nll_logp_grad(dl_grad_ctx *gc, const dl_node *n, dl_value *dy) {
    dl_value *x = n->in[0], *t = n->in[1], *w = n->n_in > 2 ? n->in[2] : NULL;
    int r = x->type.rank;
    if (r < 2 || x->type.dims[1] < 0) {
        dg_refuse(gc, n, "the class count must be known");
        return NULL;
    }
    if (w && dg_needs(gc, n, 2)) {
        dg_refuse(gc, n, "no gradient for the class weights");
        return NULL;
    }
    int64_t C = x->type.dims[1], one = 1, shape[DL_MAX_RANK];
    dl_tensor *cls = NULL;
    for (int i = 0; i < r; i++) shape[i] = i == 1 ? C : 1;
    if (dl_tensor_new(gc->g->ctx, DL_I64, r, shape, &cls) != DL_OK) {
        if (gc->g->status == DL_OK) gc->g->status = gc->g->ctx->status;
        return NULL;
    }
    for (int64_t c = 0; c < C; c++) dl_set_i64(cls, c, c);
    dl_value *tu = t->type.dtype == DL_I64 ? t : dg_op1(gc, "Cast", t, "to=7");
    tu = dg_op2(gc, "Unsqueeze", tu, dg_ints(gc, 1, &one), NULL);
    dl_value *hit = dg_op2(gc, "Equal", tu,
                           dl_constant(gc->g, dl_graph_fresh_name(gc->g, "grad_const"), cls), NULL);
    int64_t ii = dl_attr_int(n, "ignore_index", 0);
    if (dl_node_attr(n, "ignore_index") && ii >= 0 && ii < C) {
        dl_value *kept =
            dg_op1(gc, "Not", dg_op2(gc, "Equal", tu, dg_ints(gc, 1, &ii), NULL), NULL);
        hit = dg_op2(gc, "And", hit, kept, NULL);
    }
    char to[32];
    snprintf(to, sizeof to, "to=%d", (int)dl_dtype_to_onnx(x->type.dtype));
    dl_value *m = dg_op1(gc, "Cast", hit, to);
    if (w) m = dg_op2(gc, "Mul", m, dg_op2(gc, "Reshape", w, dg_ints(gc, r, shape), NULL), NULL);
    red rd = parse_reduction(n);
    if (rd == RED_NONE) dy = dg_op2(gc, "Unsqueeze", dy, dg_ints(gc, 1, &one), NULL);
    if (rd == RED_MEAN) dy = dg_op2(gc, "Div", dy, dg_op1(gc, "ReduceSum", m, "keepdims=0"), NULL);
    return dg_op1(gc, "Neg", dg_op2(gc, "Mul", m, dy, NULL), NULL);
}

static dl_status nll_grad(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy, dl_value **dx) {
    if (dg_needs(gc, n, 0))
        dx[0] = nll_logp_grad(gc, n, dy[0]);
    else if (dg_needs(gc, n, 2))
        dg_refuse(gc, n, "no gradient for the class weights");
    return dg_status(gc);
}

/* SoftmaxCrossEntropyLoss = NLL of log-softmax over axis 1: the log-prob gradient (from the loss
 * and from the log_prob output) goes through LogSoftmax's backward, g - softmax(x) * sum_C(g). */
static dl_status sce_grad(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy, dl_value **dx) {
    if (!dg_needs(gc, n, 0)) {
        if (dg_needs(gc, n, 2)) dg_refuse(gc, n, "no gradient for the class weights");
        return dg_status(gc);
    }
    dl_value *g = dy[0] ? nll_logp_grad(gc, n, dy[0]) : NULL;
    if (dy[0] && !g) return dg_status(gc);
    if (n->n_out > 1 && dy[1]) g = g ? dg_op2(gc, "Add", g, dy[1], NULL) : dy[1];
    if (!g) return dg_status(gc);
    dl_value *lp = n->n_out > 1 ? n->out[1] : NULL;
    dl_value *p = lp ? dg_op1(gc, "Exp", lp, NULL) : dg_op1(gc, "Softmax", n->in[0], "axis=1");
    int64_t one = 1;
    dl_value *s = dg_op2(gc, "ReduceSum", g, dg_ints(gc, 1, &one), "keepdims=1");
    dx[0] = dg_op2(gc, "Sub", g, dg_op2(gc, "Mul", p, s, NULL), NULL);
    return dg_status(gc);
}

/* clang-format off */
const dl_op_def dl_ops_loss[] = {
    {.name = "NegativeLogLikelihoodLoss", .min_in = 2, .max_in = 3, .min_out = 1, .max_out = 1,
     .attrs = loss_attrs, .infer = nll_infer, .ref = nll_ref,
     .grad = nll_grad},
    {.name = "SoftmaxCrossEntropyLoss", .min_in = 2, .max_in = 3, .min_out = 1, .max_out = 2,
     .attrs = loss_attrs, .infer = sce_infer, .ref = sce_ref,
     .grad = sce_grad},
    {.name = NULL},
};
/* clang-format on */
