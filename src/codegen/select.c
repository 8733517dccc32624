/* select.c — kernel selection: which kind of kernel each node can become. Only float32 heavy
 * ops with static spatial/contraction dims are lowered; everything else keeps its reference
 * kernel (DL_G_FALLBACK), so the native backend runs every graph the reference backend runs. */
#include "emit-params.h"
#include "../ops/spatial.h"

static bool default_domain(const dl_node *n) {
    return !n->op->domain || !*n->op->domain || !strcmp(n->op->domain, "ai.onnx");
}

static bool f32(const dl_value *v) { return v && v->type.dtype == DL_F32 && v->type.rank >= 0; }

static bool dims_known(const dl_value *v, int from, int to) {
    for (int d = from; d < to; d++)
        if (v->type.dims[d] < 0) return false;
    return true;
}

static bool all_outputs_ranked(const dl_node *n) {
    for (int i = 0; i < n->n_out; i++)
        if (n->out[i] && n->out[i]->type.rank < 0) return false;
    return true;
}

static bool only_first_output(const dl_node *n) {
    for (int i = 1; i < n->n_out; i++)
        if (n->out[i]) return false;
    return n->n_out >= 1 && n->out[0];
}

bool dl_value_kbuf(const dl_value *v, dl_kbuf *kb) {
    if (!v || v->type.rank < 0) return false;
    memset(kb, 0, sizeof *kb);
    kb->slot = v->id;
    kb->dtype = v->type.dtype;
    kb->rank = v->type.rank;
    for (int d = 0; d < kb->rank; d++) {
        int64_t x = v->type.dims[d];
        kb->dims[d].c = x >= 0 ? x : 0;
        kb->dims[d].sym = x >= 0 ? -1 : (int)(-x - 1);
    }
    return true;
}

static const struct {
    const char *op;
    dl_reduce_kind kind;
} reduce_ops[] = {
    {"ReduceSum", DL_RED_SUM},           {"ReduceMean", DL_RED_MEAN},
    {"ReduceMax", DL_RED_MAX},           {"ReduceMin", DL_RED_MIN},
    {"ReduceProd", DL_RED_PROD},         {"ReduceSumSquare", DL_RED_SUM_SQUARE},
    {"ReduceL1", DL_RED_L1},             {"ReduceL2", DL_RED_L2},
    {"ReduceLogSum", DL_RED_LOG_SUM},    {"ReduceLogSumExp", DL_RED_LOG_SUM_EXP},
    {"GlobalAveragePool", DL_RED_MEAN},
};

bool dl_reduce_info(const dl_node *n, dl_reduce_kind *kind, bool mask[DL_MAX_RANK]) {
    int which = -1;
    for (int i = 0; i < (int)DL_ARRAY_LEN(reduce_ops); i++)
        if (dl_node_is(n, reduce_ops[i].op)) which = i;
    if (which < 0 || !default_domain(n) || !f32(n->in[0]) || !only_first_output(n)) return false;
    *kind = reduce_ops[which].kind;
    int rank = n->in[0]->type.rank;
    memset(mask, 0, sizeof(bool) * DL_MAX_RANK);
    /* GlobalMaxPool stays on its reference kernel: it skips NaNs where ReduceMax propagates
     * them. GlobalAveragePool matches ReduceMean except over an empty window (0, not NaN). */
    if (dl_node_is(n, "GlobalAveragePool")) {
        if (rank < 3) return false;
        for (int d = 2; d < rank; d++) {
            if (n->in[0]->type.dims[d] <= 0) return false;
            mask[d] = true;
        }
        return true;
    }
    bool from_input = dl_node_is(n, "ReduceSum") ? n->opset >= 13 : n->opset >= 18;
    int64_t axes[DL_MAX_RANK];
    int nax = 0;
    if (from_input) {
        if (n->n_in > 1 && n->in[1]) {
            const dl_tensor *t = n->in[1]->constant;
            if (!t || t->dtype != DL_I64 || t->rank != 1 || t->numel > DL_MAX_RANK) return false;
            nax = (int)t->numel;
            memcpy(axes, t->data, sizeof(int64_t) * (size_t)nax);
        }
        if (nax == 0 && dl_attr_int(n, "noop_with_empty_axes", 0)) return false;
    } else {
        const int64_t *a;
        int cnt = dl_attr_ints(n, "axes", &a);
        if (cnt > DL_MAX_RANK) return false;
        for (int i = 0; i < cnt; i++) axes[i] = a[i];
        nax = cnt < 0 ? 0 : cnt;
    }
    for (int i = 0; i < nax; i++) {
        int64_t a = axes[i] < 0 ? axes[i] + rank : axes[i];
        if (a < 0 || a >= rank || mask[a]) return false;
        mask[a] = true;
    }
    if (nax == 0)
        for (int d = 0; d < rank; d++) mask[d] = true;
    return true;
}

static bool conv_ok(const dl_node *n) {
    const dl_value *x = n->in[0], *w = n->in[1];
    if (!f32(x) || !f32(w) || !only_first_output(n)) return false;
    int r = x->type.rank;
    if (r < 3 || r > 5 || w->type.rank != r) return false;
    if (!dims_known(x, 1, r) || !dims_known(w, 0, r)) return false;
    if (n->n_in > 2 && n->in[2] && (!f32(n->in[2]) || n->in[2]->type.rank != 1)) return false;
    return n->out[0]->type.rank == r && dims_known(n->out[0], 1, r);
}

/* A ConvTranspose runs as the input gradient of the Conv it transposes (src/ops/conv.c's
 * dl_convtr_forward_window), which must map its output's positions back onto its input's. */
static bool convtr_ok(const dl_node *n) {
    if (!conv_ok(n)) return false;
    const dl_value *x = n->in[0], *w = n->in[1], *y = n->out[0];
    const int ns = x->type.rank - 2;
    dl_window fwd;
    char err[200];
    if (dl_convtr_forward_window(n, ns, x->type.dims + 2, w->type.dims + 2, &fwd, err, sizeof err))
        return false;
    for (int d = 0; d < ns; d++)
        if (fwd.in[d] != y->type.dims[d + 2]) return false;
    return true;
}

static bool pool_ok(const dl_node *n) {
    const dl_value *x = n->in[0];
    if (!f32(x) || !only_first_output(n)) return false;
    int r = x->type.rank;
    return r >= 3 && r <= 5 && dims_known(x, 1, r) && dims_known(n->out[0], 1, r);
}

/* The backward ops of convolution and pooling (domain ai.dlcc, src/ops/grad-ops.c):
 * ConvGradInput(dY, W, x_shape) -> dX, ConvGradWeight(X, dY) -> dW, MaxPoolGrad(X, dY) -> dX,
 * AveragePoolGrad(dY, x_shape) -> dX. Lowered like their forward ops: float32, 1 to 3 spatial
 * dims, every dim known but the batch. X, dY and dX may carry different batch symbols (gradients
 * get fresh ones): their inference, which the plan re-runs on the concrete shapes, checks that
 * the sizes agree. */
static dl_gkind grad_kind(const dl_node *n) {
    const char *op = n->op->name;
    bool gi = !strcmp(op, "ConvGradInput"), gw = !strcmp(op, "ConvGradWeight");
    bool mp = !strcmp(op, "MaxPoolGrad"), ap = !strcmp(op, "AveragePoolGrad");
    if (!(gi || gw || mp || ap) || n->n_in < 2 || !n->in[0] || !only_first_output(n))
        return DL_G_FALLBACK;
    const dl_value *y = n->out[0];
    int r = y->type.rank;
    const dl_value *batched[3] = {n->in[0], gw ? n->in[1] : y, mp ? n->in[1] : NULL};
    const dl_value *whole = gi ? n->in[1] : gw ? y : NULL; /* W or dW: no batch dim */
    if (r < 3 || r > 5 || !f32(y) || (whole && (!f32(whole) || whole->type.rank != r ||
                                                !dims_known(whole, 0, r))))
        return DL_G_FALLBACK;
    for (int i = 0; i < 3; i++) {
        const dl_value *v = batched[i];
        if (v && (!f32(v) || v->type.rank != r || !dims_known(v, 1, r))) return DL_G_FALLBACK;
    }
    return gi || gw ? DL_G_CONV_GRAD : DL_G_POOL_GRAD;
}

static bool gemm_ok(const dl_node *n) {
    const dl_value *a = n->in[0], *b = n->in[1];
    if (!f32(a) || !f32(b) || a->type.rank != 2 || b->type.rank != 2) return false;
    if (n->n_in > 2 && n->in[2]) {
        const dl_value *c = n->in[2];
        if (!f32(c) || c->type.rank > 2 || !dims_known(c, 0, c->type.rank)) return false;
    }
    return only_first_output(n);
}

static bool matmul_ok(const dl_node *n) {
    const dl_value *a = n->in[0], *b = n->in[1], *y = n->out[0];
    if (!f32(a) || !f32(b) || !y || y->type.rank < 0) return false;
    return a->type.rank >= 1 && b->type.rank >= 1 && a->type.rank <= DL_MAX_RANK &&
           b->type.rank <= DL_MAX_RANK;
}

static bool layernorm_ok(const dl_node *n) {
    const dl_value *x = n->in[0], *sc = n->in[1];
    if (!f32(x) || !f32(sc) || !all_outputs_ranked(n)) return false;
    int r = x->type.rank;
    int64_t axis = dl_attr_int(n, "axis", -1);
    if (axis < 0) axis += r;
    if (axis < 0 || axis >= r || !dims_known(x, (int)axis, r)) return false;
    if (dl_attr_int(n, "stash_type", 1) != 1) return false;
    const dl_value *ps[2] = {sc, n->n_in > 2 ? n->in[2] : NULL};
    for (int k = 0; k < 2; k++) {
        const dl_value *p = ps[k];
        if (!p) continue;
        if (!f32(p) || p->type.rank != r - axis) return false;
        for (int d = 0; d < p->type.rank; d++)
            if (p->type.dims[d] != x->type.dims[axis + d]) return false;
    }
    for (int i = 1; i < n->n_out; i++)
        if (n->out[i] && n->out[i]->type.dtype != DL_F32) return false;
    return true;
}

static bool view_ok(const dl_node *n) {
    return n->n_in >= 1 && n->in[0] && only_first_output(n) && n->out[0]->type.rank >= 0 &&
           n->in[0]->type.dtype == n->out[0]->type.dtype && dl_dtype_size(n->out[0]->type.dtype) > 0;
}

static bool transpose_ok(const dl_node *n) {
    const dl_value *x = n->in[0];
    if (!x || x->type.rank < 0 || !only_first_output(n)) return false;
    dl_dtype t = x->type.dtype;
    return t == DL_F32 || t == DL_I32 || t == DL_I64;
}

dl_gkind dl_node_kernel_kind(const dl_node *n) {
    if (n->op->domain && !strcmp(n->op->domain, "ai.dlcc")) return grad_kind(n);
    if (!default_domain(n) || !all_outputs_ranked(n)) return DL_G_FALLBACK;
    if (n->n_in < 1 || !n->in[0]) return DL_G_FALLBACK;
    if (dl_node_is(n, "Conv")) return conv_ok(n) ? DL_G_CONV : DL_G_FALLBACK;
    if (dl_node_is(n, "ConvTranspose")) return convtr_ok(n) ? DL_G_CONV_TRANSPOSE : DL_G_FALLBACK;
    if (dl_node_is(n, "Gemm")) return gemm_ok(n) ? DL_G_GEMM : DL_G_FALLBACK;
    if (dl_node_is(n, "MatMul")) return matmul_ok(n) ? DL_G_MATMUL : DL_G_FALLBACK;
    if (dl_node_is(n, "MaxPool") || dl_node_is(n, "AveragePool") || dl_node_is(n, "LpPool"))
        return pool_ok(n) ? DL_G_POOL : DL_G_FALLBACK;
    if (dl_node_is(n, "Softmax") || dl_node_is(n, "LogSoftmax"))
        return f32(n->in[0]) && only_first_output(n) ? DL_G_SOFTMAX : DL_G_FALLBACK;
    if (dl_node_is(n, "LayerNormalization")) return layernorm_ok(n) ? DL_G_LAYERNORM : DL_G_FALLBACK;
    if (dl_node_is(n, "InstanceNormalization") || dl_node_is(n, "GroupNormalization")) {
        int64_t groups;
        bool per_group;
        return dl_groupnorm_params_of(n, &groups, &per_group) ? DL_G_LAYERNORM : DL_G_FALLBACK;
    }
    if (dl_node_is(n, "Transpose")) return transpose_ok(n) ? DL_G_TRANSPOSE : DL_G_FALLBACK;
    if (dl_node_is(n, "Slice") || dl_node_is(n, "Split") || dl_node_is(n, "Concat") ||
        dl_node_is(n, "Pad") || dl_node_is(n, "DepthToSpace") || dl_node_is(n, "SpaceToDepth"))
        return dl_copy_moves(n) >= 1 ? DL_G_COPY : DL_G_FALLBACK;
    if (dl_node_is(n, "ArgMax") || dl_node_is(n, "ArgMin")) {
        int axis;
        return dl_argmax_axis(n, &axis) ? DL_G_ARGMAX : DL_G_FALLBACK;
    }
    if (dl_node_is(n, "LSTM") || dl_node_is(n, "GRU") || dl_node_is(n, "RNN")) {
        dl_rnn_params rp;
        return dl_rnn_params_of(n, &rp) ? DL_G_RNN : DL_G_FALLBACK;
    }
    if (dl_node_is(n, "Resize") || dl_node_is(n, "Upsample")) {
        dl_resize_params rp;
        return dl_resize_params_of(NULL, n, &rp, false) == DL_OK ? DL_G_RESIZE : DL_G_FALLBACK;
    }
    if (dl_node_is(n, "Gather")) {
        dl_gather_params gp;
        return dl_gather_params_of(n, &gp) ? DL_G_COPY : DL_G_FALLBACK;
    }
    if (dl_node_is(n, "Reshape") || dl_node_is(n, "Flatten") || dl_node_is(n, "Squeeze") || dl_node_is(n, "Unsqueeze") ||
        dl_node_is(n, "Identity"))
        return view_ok(n) ? DL_G_VIEW : DL_G_FALLBACK;
    dl_reduce_kind rk;
    bool mask[DL_MAX_RANK];
    if (dl_reduce_info(n, &rk, mask)) return DL_G_REDUCE;
    if (only_first_output(n) && dl_ew_supported(n)) return DL_G_EW;
    return DL_G_FALLBACK;
}

const char *dl_gkind_name(dl_gkind k) {
    static const char *names[DL_G_KIND_COUNT] = {
        "elementwise", "reduce", "transpose", "conv", "gemm", "matmul",
        "pool", "softmax", "layernorm", "attention", "conv-grad", "conv-transpose",
        "pool-grad", "resize", "argmax", "rnn", "copy", "view", "fallback"};
    return k >= 0 && k < DL_G_KIND_COUNT ? names[k] : "?";
}
