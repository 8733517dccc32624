/* train-graph.c — a model turned into one training step: the loss on its first output, the
 * backward graph (autodiff over every parameter) and the optimizer update, all graph nodes, so the
 * whole step compiles into one program. Parameters, optimizer state and hyper-parameters are
 * inputs; the new parameters and state are outputs. */
#include "grad.h"
#include "train.h"

#include "../ir/rewrite.h"
#include "../passes/passes-impl.h"

#include <stdio.h>

const char *const dl_hp_names[DL_HP_COUNT] = {
    "hp.lr",   "hp.momentum", "hp.weight_decay",    "hp.beta1", "hp.beta2",
    "hp.eps",  "hp.max_norm", "hp.label_smoothing", "hp.step",
};

typedef struct builder {
    dl_ctx *ctx;
    dl_graph *g;
    dl_grad_ctx gc;
    const dl_train_options *o;
    dl_value *hp[DL_HP_COUNT];
    dl_train_graph *tg;
} builder;

static dl_status fail_g(builder *b, dl_status s, const char *msg, const char *arg) {
    if (b->g->status == DL_OK) b->g->status = dl_fail(b->ctx, s, "train: %s%s", msg, arg ? arg : "");
    return b->g->status;
}

/* The hyper-parameter input k (created on first use), in the parameters' float dtype. */
static dl_value *hp(builder *b, dl_hp_kind k) {
    if (!b->hp[k]) {
        b->hp[k] = dl_input(b->g, dl_hp_names[k], DL_F32, 0, NULL, NULL);
        b->tg->hp[b->tg->n_hp++] = k;
    }
    return b->hp[k];
}

static dl_value *num(builder *b, double v) { return dg_scalar(&b->gc, v, DL_F32); }

static dl_value *op2(builder *b, const char *op, dl_value *x, dl_value *y) {
    return dg_op2(&b->gc, op, x, y, NULL);
}

static dl_value *cast_to(builder *b, dl_value *v, dl_dtype dt) {
    if (!v || v->type.dtype == dt) return v;
    char to[24];
    snprintf(to, sizeof to, "to=%lld", (long long)dl_dtype_to_onnx(dt));
    return dg_op1(&b->gc, "Cast", v, to);
}

/* ---- losses ---- */

/* Mean cross-entropy of logits [N, C] against integer labels [N], with label smoothing ε:
 * target = (1-ε)·onehot + ε/C, loss = -mean_n Σ_c target·log_softmax. The one-hot comes from
 * Equal(label, range(C)), so it carries no gradient. */
static dl_value *loss_cross_entropy(builder *b, dl_value *pred, dl_value *y) {
    const dl_type *t = &pred->type;
    if (t->rank != 2 || t->dims[1] < 1) {
        char buf[160];
        fail_g(b, DL_ERR_SHAPE, "cross_entropy needs logits [N, C] with a known C, the model gives ",
               dl_type_str(b->g, t, buf, sizeof buf));
        return NULL;
    }
    int64_t c = t->dims[1];
    b->tg->n_classes = c;
    dl_tensor *range = NULL;
    if (dg_check(&b->gc, dl_tensor_new(b->ctx, DL_I64, 1, &c, &range)) != DL_OK) return NULL;
    for (int64_t i = 0; i < c; i++) ((int64_t *)range->data)[i] = i;
    dl_value *classes = dl_constant(b->g, dl_graph_fresh_name(b->g, "classes"), range);
    int64_t one = 1;
    dl_value *lab = dg_op2(&b->gc, "Unsqueeze", cast_to(b, y, DL_I64), dg_ints(&b->gc, 1, &one), NULL);
    dl_dtype dt = t->dtype;
    dl_value *onehot = cast_to(b, op2(b, "Equal", lab, classes), dt);
    dl_value *ls = cast_to(b, hp(b, DL_HP_LABEL_SMOOTHING), dt);
    dl_value *target = op2(b, "Add", op2(b, "Mul", onehot, op2(b, "Sub", dg_scalar(&b->gc, 1, dt), ls)),
                           op2(b, "Div", ls, dg_scalar(&b->gc, (double)c, dt)));
    dl_value *logp = dg_op1(&b->gc, "LogSoftmax", pred, "axis=1");
    dl_value *per = dg_op2(&b->gc, "ReduceSum", op2(b, "Mul", target, logp),
                           dg_ints(&b->gc, 1, &one), "keepdims=0");
    return dg_op1(&b->gc, "Neg", dg_op1(&b->gc, "ReduceMean", per, "keepdims=0"), NULL);
}

static dl_value *loss_mse(builder *b, dl_value *pred, dl_value *y) {
    dl_value *d = op2(b, "Sub", pred, y);
    return dg_op1(&b->gc, "ReduceMean", op2(b, "Mul", d, d), "keepdims=0");
}

/* mean(max(x,0) - x·y + log(1 + exp(-|x|))): the stable form PyTorch uses. */
static dl_value *loss_bce_logits(builder *b, dl_value *x, dl_value *y) {
    dl_value *sp = dg_op1(&b->gc, "Softplus", dg_op1(&b->gc, "Neg", dg_op1(&b->gc, "Abs", x, NULL), NULL), NULL);
    dl_value *l = op2(b, "Add", op2(b, "Sub", dg_op1(&b->gc, "Relu", x, NULL), op2(b, "Mul", x, y)), sp);
    return dg_op1(&b->gc, "ReduceMean", l, "keepdims=0");
}

/* The label input: integer [N] for cross-entropy (N = the logits' batch dim, same symbol), else
 * shaped like the prediction. */
static dl_value *label_input(builder *b, dl_value *pred) {
    const dl_type *t = &pred->type;
    if (t->rank < 0) {
        fail_g(b, DL_ERR_SHAPE, "the model's prediction has an unknown rank", NULL);
        return NULL;
    }
    int64_t dims[DL_MAX_RANK];
    const char *syms[DL_MAX_RANK];
    int rank = b->o->loss == DL_LOSS_CROSS_ENTROPY ? 1 : t->rank;
    for (int i = 0; i < rank; i++) {
        dims[i] = t->dims[i];
        syms[i] = dims[i] < 0 ? dl_graph_sym_name(b->g, dims[i]) : NULL;
    }
    dl_dtype dt = b->o->loss == DL_LOSS_CROSS_ENTROPY ? DL_I64 : t->dtype;
    return dl_input(b->g, "y", dt, rank, dims, syms);
}

/* ---- which initializers are parameters ---- */

static bool frozen(const dl_train_options *o, const char *name) {
    for (int i = 0; i < o->n_frozen; i++)
        if (o->frozen && o->frozen[i] && strcmp(o->frozen[i], name) == 0) return true;
    return false;
}

/* Values the loss depends on through floating values (so a float weight only read by Shape is
 * not a parameter). */
static bool *float_ancestors(dl_graph *g, dl_value *loss) {
    bool *mark = dl_calloc((size_t)g->values.len + 1, sizeof *mark);
    if (!mark) return NULL;
    mark[loss->id] = true;
    for (int k = g->nodes.len - 1; k >= 0; k--) {
        dl_node *n = g->nodes.items[k];
        bool any = false;
        for (int o = 0; o < n->n_out; o++)
            any = any || (n->out[o] && mark[n->out[o]->id] && dl_dtype_is_float(n->out[o]->type.dtype));
        for (int i = 0; any && i < n->n_in; i++)
            if (n->in[i]) mark[n->in[i]->id] = true;
    }
    return mark;
}

static dl_status make_input(dl_graph *g, dl_value *v) {
    v->constant = NULL; /* the clone's tensor is a view; the graph still frees the header */
    v->is_input = true;
    return dl_ptrvec_push(&g->inputs, v);
}

/* ---- optimizers ---- */

typedef struct opt_consts {
    dl_value *lr, *mu, *wd, *b1, *b2, *eps, *one_b1, *one_b2, *step_size, *sqrt_bc2, *decay;
} opt_consts;

static void opt_scalars(builder *b, opt_consts *c) {
    const dl_train_options *o = b->o;
    c->lr = hp(b, DL_HP_LR);
    c->wd = hp(b, DL_HP_WEIGHT_DECAY);
    if (o->optimizer == DL_OPT_SGD) {
        if (o->momentum) c->mu = hp(b, DL_HP_MOMENTUM);
        return;
    }
    c->b1 = hp(b, DL_HP_BETA1);
    c->b2 = hp(b, DL_HP_BETA2);
    c->eps = hp(b, DL_HP_EPS);
    dl_value *t = hp(b, DL_HP_STEP);
    c->one_b1 = op2(b, "Sub", num(b, 1), c->b1);
    c->one_b2 = op2(b, "Sub", num(b, 1), c->b2);
    dl_value *bc1 = op2(b, "Sub", num(b, 1), op2(b, "Pow", c->b1, t));
    dl_value *bc2 = op2(b, "Sub", num(b, 1), op2(b, "Pow", c->b2, t));
    c->step_size = op2(b, "Div", c->lr, bc1);
    c->sqrt_bc2 = dg_op1(&b->gc, "Sqrt", bc2, NULL);
    if (o->optimizer == DL_OPT_ADAMW) c->decay = op2(b, "Sub", num(b, 1), op2(b, "Mul", c->lr, c->wd));
}

/* One parameter's update; states in/out: SGD [velocity], Adam(W) [m, v]. Follows torch.optim
 * (SGD: dampening 0, weight decay added to the gradient; AdamW: decoupled decay first). */
static dl_value *opt_update(builder *b, const opt_consts *c, dl_value *p, dl_value *g,
                            dl_value *const *st, dl_value **st_new) {
    const dl_train_options *o = b->o;
    if (o->optimizer == DL_OPT_SGD) {
        dl_value *g1 = op2(b, "Add", g, op2(b, "Mul", c->wd, p)), *upd = g1;
        if (o->momentum) {
            st_new[0] = op2(b, "Add", op2(b, "Mul", c->mu, st[0]), g1);
            upd = o->nesterov ? op2(b, "Add", g1, op2(b, "Mul", c->mu, st_new[0])) : st_new[0];
        }
        return op2(b, "Sub", p, op2(b, "Mul", c->lr, upd));
    }
    dl_value *g1 = g, *p1 = p;
    if (o->optimizer == DL_OPT_ADAM) g1 = op2(b, "Add", g, op2(b, "Mul", c->wd, p));
    else p1 = op2(b, "Mul", p, c->decay);
    st_new[0] = op2(b, "Add", op2(b, "Mul", c->b1, st[0]), op2(b, "Mul", c->one_b1, g1));
    st_new[1] = op2(b, "Add", op2(b, "Mul", c->b2, st[1]), op2(b, "Mul", c->one_b2, op2(b, "Mul", g1, g1)));
    dl_value *denom = op2(b, "Add", op2(b, "Div", dg_op1(&b->gc, "Sqrt", st_new[1], NULL), c->sqrt_bc2), c->eps);
    return op2(b, "Sub", p1, op2(b, "Mul", c->step_size, op2(b, "Div", st_new[0], denom)));
}

/* Global-norm clipping (torch.nn.utils.clip_grad_norm_): g *= min(1, max_norm / (‖g‖ + 1e-6)). */
static void clip_grads(builder *b, int n, dl_value **grads) {
    dl_value *sq = NULL;
    for (int i = 0; i < n; i++) {
        dl_value *s = cast_to(b, dg_op1(&b->gc, "ReduceSumSquare", grads[i], "keepdims=0"), DL_F32);
        sq = sq ? op2(b, "Add", sq, s) : s;
    }
    if (!sq) return;
    dl_value *norm = dg_op1(&b->gc, "Sqrt", sq, NULL);
    dl_value *coef = op2(b, "Div", hp(b, DL_HP_MAX_NORM), op2(b, "Add", norm, num(b, 1e-6)));
    dl_value *factor = op2(b, "Min", coef, num(b, 1));
    for (int i = 0; i < n; i++) grads[i] = op2(b, "Mul", grads[i], cast_to(b, factor, grads[i]->type.dtype));
}

/* ---- the whole graph ---- */

/* BatchNormalization's running statistics are buffers: inputs of both graphs, never trained.
 * In the step graph a BatchNormalization normalizes with the batch's statistics instead (what
 * PyTorch's train mode does) and updates the running ones (momentum as ONNX defines it,
 * running = running·momentum + batch·(1 - momentum), the variance unbiased as PyTorch keeps
 * it); its gradients then come from the primitive ops' rules. */
static dl_status batchnorm_buffers(builder *b, bool eval, bool *is_buf, int *nbuf, dl_value **bufs,
                                   dl_value **bufs_new) {
    dl_graph *g = b->g;
    dl_grad_ctx *gc = &b->gc;
    int n_nodes = g->nodes.len;
    for (int k = 0; k < n_nodes; k++) {
        dl_node *n = g->nodes.items[k];
        if (n->dead || (n->op->domain && n->op->domain[0]) || strcmp(n->op->name, "BatchNormalization") ||
            n->n_in < 5 || !n->in[3] || !n->in[4] || !n->in[3]->is_input || !n->in[4]->is_input)
            continue;
        char nd[200];
        if (dl_attr_int(n, "training_mode", 0))
            return fail_g(b, DL_ERR_UNSUPPORTED, "BatchNormalization with training_mode=1 in the model: ",
                          dl_node_desc(n, nd, sizeof nd));
        dl_value *x = n->in[0], *mean = n->in[3], *var = n->in[4];
        /* distinct initializers, each a candidate parameter: the buffer lists are sized by those */
        if (mean == var || !mean->is_initializer || !var->is_initializer || is_buf[mean->id] ||
            is_buf[var->id] || x->type.rank < 2 || x->type.dims[1] < 1)
            return fail_g(b, DL_ERR_UNSUPPORTED, "BatchNormalization with shared or non-initializer "
                          "statistics, or an unknown channel count: ", dl_node_desc(n, nd, sizeof nd));
        is_buf[mean->id] = is_buf[var->id] = true;
        bufs[*nbuf] = mean;
        bufs[*nbuf + 1] = var;
        if (eval) {
            *nbuf += 2;
            continue;
        }
        int r = x->type.rank;
        int64_t c = x->type.dims[1], cshape[DL_MAX_RANK];
        char axes[96] = "axes=[0";
        for (int d = 2; d < r; d++) snprintf(axes + strlen(axes), sizeof axes - strlen(axes), ",%d", d);
        strcat(axes, "];keepdims=1");
        for (int d = 0; d < r; d++) cshape[d] = d == 1 ? c : 1;
        dl_dtype dt = x->type.dtype;
        dl_value *bm = dg_op1(gc, "ReduceMean", x, axes);
        dl_value *dev = dg_op2(gc, "Sub", x, bm, NULL);
        dl_value *bv = dg_op1(gc, "ReduceMean", dg_op2(gc, "Mul", dev, dev, NULL), axes);
        dl_value *eps = dg_scalar(gc, dl_attr_float(n, "epsilon", 1e-5f), dt);
        dl_value *xhat = dg_op2(gc, "Div", dev, dg_op1(gc, "Sqrt", dg_op2(gc, "Add", bv, eps, NULL), NULL), NULL);
        dl_value *cs = dg_ints(gc, r, cshape);
        dl_value *y = dg_op2(gc, "Add", dg_op2(gc, "Mul", xhat, dg_op2(gc, "Reshape", n->in[1], cs, NULL), NULL),
                             dg_op2(gc, "Reshape", n->in[2], cs, NULL), NULL);
        /* running statistics */
        double mom = dl_attr_float(n, "momentum", 0.9f);
        char to[24];
        snprintf(to, sizeof to, "to=%lld", (long long)dl_dtype_to_onnx(dt));
        dl_value *cnt = dg_op2(gc, "Div", dg_op1(gc, "Cast", dg_op1(gc, "Size", x, NULL), to),
                               dg_scalar(gc, (double)c, dt), NULL);
        dl_value *unbias = dg_op2(gc, "Div", cnt, dg_op2(gc, "Sub", cnt, dg_scalar(gc, 1, dt), NULL), NULL);
        dl_value *c1 = dg_ints(gc, 1, &c);
        dl_value *m_mom = dg_scalar(gc, mom, dt), *one_m = dg_scalar(gc, 1 - mom, dt);
        bufs_new[*nbuf] = dg_op2(gc, "Add", dg_op2(gc, "Mul", mean, m_mom, NULL),
                                 dg_op2(gc, "Mul", dg_op2(gc, "Reshape", bm, c1, NULL), one_m, NULL), NULL);
        dl_value *bvu = dg_op2(gc, "Mul", dg_op2(gc, "Reshape", bv, c1, NULL), unbias, NULL);
        bufs_new[*nbuf + 1] = dg_op2(gc, "Add", dg_op2(gc, "Mul", var, m_mom, NULL),
                                     dg_op2(gc, "Mul", bvu, one_m, NULL), NULL);
        *nbuf += 2;
        DL_TRY(dl_graph_status(g));
        /* the consumers of the BatchNormalization read y; the node itself is left to DCE */
        dl_value *old = n->out[0];
        for (int j = 0; j < g->nodes.len; j++) {
            dl_node *m = g->nodes.items[j];
            for (int i = 0; m != n && i < m->n_in; i++)
                if (m->in[i] == old) m->in[i] = y;
        }
        for (int j = 0; j < g->outputs.len; j++)
            if (g->outputs.items[j] == old) g->outputs.items[j] = y;
    }
    return dl_graph_status(g);
}

/* Inputs in the order the trainer binds them: x, y, parameters, optimizer state, buffers, then
 * the hyper-parameters. */
static void order_inputs(builder *b, dl_value *x, dl_value *y, dl_value *const *params, int np,
                         dl_value *const *st, int nst, dl_value *const *bufs, int nb) {
    dl_graph *g = b->g;
    int k = 0;
    g->inputs.items[k++] = x;
    g->inputs.items[k++] = y;
    for (int i = 0; i < np; i++) g->inputs.items[k++] = params[i];
    for (int i = 0; i < nst; i++) g->inputs.items[k++] = st[i];
    for (int i = 0; i < nb; i++) g->inputs.items[k++] = bufs[i];
    for (int i = 0; i < b->tg->n_hp; i++) g->inputs.items[k++] = b->hp[b->tg->hp[i]];
    g->inputs.len = k;
}

static dl_status build(builder *b, bool eval) {
    dl_graph *g = b->g;
    const dl_train_options *o = b->o;
    dl_train_graph *tg = b->tg;
    dl_value *x = NULL;
    for (int i = 0; i < g->inputs.len; i++) {
        dl_value *v = g->inputs.items[i];
        if (v->constant) continue;
        if (x) return fail_g(b, DL_ERR_UNSUPPORTED, "the model has more than one input; training feeds one: ", v->name);
        x = v;
    }
    if (!x) return fail_g(b, DL_ERR_INVALID, "the model has no input", NULL);
    if (g->outputs.len < 1) return fail_g(b, DL_ERR_INVALID, "the model has no output", NULL);
    /* keep only x: constant inputs (old-style initializers listed as inputs) stay constants */
    g->inputs.len = 0;
    DL_TRY(dl_ptrvec_push(&g->inputs, x));
    /* candidate parameters become inputs before the cleanup passes, so none is folded into a
     * constant (a Transpose of a weight, say); those the loss turns out not to need go back */
    int nv0 = g->values.len, nc = 0;
    dl_value **cand = dl_calloc((size_t)nv0 + 1, sizeof *cand);
    dl_tensor **cand_t = dl_calloc((size_t)nv0 + 1, sizeof *cand_t);
    if (!cand || !cand_t) {
        dl_free(cand);
        dl_free(cand_t);
        return dl_fail(b->ctx, DL_ERR_NOMEM, "out of memory");
    }
    dl_status s = DL_OK;
    for (int i = 0; i < nv0 && s == DL_OK; i++) {
        dl_value *v = g->values.items[i];
        if (v->constant && v->is_initializer && dl_dtype_is_float(v->type.dtype) && !frozen(o, v->name)) {
            cand[nc] = v;
            cand_t[nc++] = v->constant;
            s = make_input(g, v);
        }
    }
    if (s == DL_OK) {
        dl_pass_ctx pc = {.ctx = b->ctx, .g = g};
        s = dl_run_passes(&pc, dl_training_prep_passes);
    }
    bool *is_buf = dl_calloc((size_t)g->values.len + 1, sizeof *is_buf);
    dl_value **bufs = dl_calloc((size_t)nc + 1, sizeof *bufs);
    dl_value **bufs_new = dl_calloc((size_t)nc + 1, sizeof *bufs_new);
    int nb = 0;
    if (s == DL_OK && (!is_buf || !bufs || !bufs_new)) s = dl_fail(b->ctx, DL_ERR_NOMEM, "out of memory");
    if (s == DL_OK) s = batchnorm_buffers(b, eval, is_buf, &nb, bufs, bufs_new);
    dl_value *pred = s == DL_OK ? g->outputs.items[0] : NULL;
    if (s == DL_OK && !dl_dtype_is_float(pred->type.dtype))
        s = fail_g(b, DL_ERR_TYPE, "the model's first output is not floating: ", pred->name);
    if (s != DL_OK) {
        dl_free(cand);
        dl_free(cand_t);
        dl_free(is_buf);
        dl_free(bufs);
        dl_free(bufs_new);
        return s;
    }
    for (int i = 0; i < g->outputs.len; i++) ((dl_value *)g->outputs.items[i])->is_output = false;
    g->outputs.len = 0;
    tg->pred = pred;
    dl_value *y = label_input(b, pred), *loss = NULL;
    switch (o->loss) {
    case DL_LOSS_CROSS_ENTROPY: loss = loss_cross_entropy(b, pred, y); break;
    case DL_LOSS_MSE: loss = loss_mse(b, pred, y); break;
    case DL_LOSS_BCE_LOGITS: loss = loss_bce_logits(b, pred, y); break;
    default: fail_g(b, DL_ERR_INVALID, "unknown loss", NULL);
    }
    loss = cast_to(b, loss, DL_F32);
    s = dl_graph_status(g);
    if (s == DL_OK) s = dl_graph_toposort(g);
    /* parameters: candidates the loss depends on; the others become constants again */
    bool *mark = s == DL_OK ? float_ancestors(g, loss) : NULL;
    dl_value **params = dl_calloc((size_t)nc + 1, sizeof *params);
    if (s == DL_OK && (!mark || !params)) s = dl_fail(b->ctx, DL_ERR_NOMEM, "out of memory");
    int np = 0;
    for (int i = 0; i < nc && s == DL_OK; i++) {
        dl_value *v = cand[i];
        /* a candidate DCE dropped has no id any more: it is no longer in g->values */
        bool alive = v->id < g->values.len && g->values.items[v->id] == v;
        if (alive && is_buf[v->id]) continue; /* a buffer: stays an input */
        if (alive && mark[v->id]) {
            params[np++] = v;
            continue;
        }
        v->constant = cand_t[i];
        v->is_input = false;
    }
    dl_free(mark);
    dl_free(cand);
    dl_free(cand_t);
    dl_free(is_buf);
    tg->n_params = np;
    tg->n_buffers = nb;
    tg->buffer_names = dl_arena_alloc(&g->arena, sizeof(char *) * (size_t)(nb + 1));
    if (!tg->buffer_names) s = dl_fail(b->ctx, DL_ERR_NOMEM, "out of memory");
    for (int i = 0; i < nb && s == DL_OK; i++) tg->buffer_names[i] = bufs[i]->name;
    tg->param_names = dl_arena_alloc(&g->arena, sizeof(char *) * (size_t)(np + 1));
    if (!tg->param_names) s = dl_fail(b->ctx, DL_ERR_NOMEM, "out of memory");
    for (int i = 0; i < np && s == DL_OK; i++) {
        if (params[i]->type.dtype != DL_F32 && params[i]->type.dtype != DL_F64)
            s = fail_g(b, DL_ERR_UNSUPPORTED, "training float16/bfloat16 parameters is not supported: ", params[i]->name);
        tg->param_names[i] = params[i]->name;
    }
    if (s == DL_OK && eval) {
        dl_output(g, loss, NULL);
        dl_output(g, pred, NULL);
        s = dl_graph_status(g);
        if (s == DL_OK) order_inputs(b, x, y, params, np, NULL, 0, bufs, nb);
    }
    if (s != DL_OK || eval) {
        dl_free(params);
        dl_free(bufs);
        dl_free(bufs_new);
        return s;
    }
    /* backward */
    dl_value **grads = dl_calloc((size_t)np + 1, sizeof *grads);
    if (!grads) s = dl_fail(b->ctx, DL_ERR_NOMEM, "out of memory");
    if (s == DL_OK) s = dl_autodiff(g, loss, np, params, grads);
    if (s == DL_OK && o->clip) clip_grads(b, np, grads);
    /* optimizer: state inputs after the parameters, hyper-parameters last */
    int sp = o->optimizer == DL_OPT_SGD ? (o->momentum ? 1 : 0) : 2;
    tg->states_per_param = sp;
    dl_value **st = dl_calloc((size_t)(np * sp) + 1, sizeof *st);
    dl_value **st_new = dl_calloc((size_t)(np * sp) + 1, sizeof *st_new);
    dl_value **p_new = dl_calloc((size_t)np + 1, sizeof *p_new);
    if (s == DL_OK && (!st || !st_new || !p_new)) s = dl_fail(b->ctx, DL_ERR_NOMEM, "out of memory");
    for (int i = 0; i < np && s == DL_OK; i++)
        for (int k = 0; k < sp; k++) {
            char nm[64];
            snprintf(nm, sizeof nm, "state%d.", k);
            size_t len = strlen(nm) + strlen(params[i]->name) + 1;
            char *full = dl_arena_alloc(&g->arena, len);
            if (!full) {
                s = dl_fail(b->ctx, DL_ERR_NOMEM, "out of memory");
                break;
            }
            snprintf(full, len, "%s%s", nm, params[i]->name);
            const dl_type *t = &params[i]->type;
            st[i * sp + k] = dl_input(g, full, t->dtype, t->rank, t->dims, NULL);
        }
    if (s == DL_OK) s = dl_graph_status(g);
    if (s == DL_OK) {
        opt_consts c = {0};
        opt_scalars(b, &c);
        for (int i = 0; i < np && dl_graph_status(g) == DL_OK; i++) {
            dl_dtype dt = params[i]->type.dtype;
            opt_consts cd = c;
            if (dt != DL_F32) { /* float64 parameters: the scalars in their dtype */
                dl_value **f[] = {&cd.lr, &cd.mu, &cd.wd, &cd.b1, &cd.b2, &cd.eps, &cd.one_b1,
                                  &cd.one_b2, &cd.step_size, &cd.sqrt_bc2, &cd.decay};
                for (size_t k = 0; k < sizeof f / sizeof *f; k++) *f[k] = cast_to(b, *f[k], dt);
            }
            p_new[i] = opt_update(b, &cd, params[i], grads[i], st + i * sp, st_new + i * sp);
        }
        s = dl_graph_status(g);
    }
    dl_output(g, loss, NULL);
    for (int i = 0; i < np && s == DL_OK; i++) dl_output(g, p_new[i], NULL);
    for (int i = 0; i < np * sp && s == DL_OK; i++) dl_output(g, st_new[i], NULL);
    for (int i = 0; i < nb && s == DL_OK; i++) dl_output(g, bufs_new[i], NULL);
    if (s == DL_OK) s = dl_graph_status(g);
    if (s == DL_OK) order_inputs(b, x, y, params, np, st, np * sp, bufs, nb);
    if (s == DL_OK) s = dl_graph_toposort(g);
    dl_free(params);
    dl_free(grads);
    dl_free(st);
    dl_free(st_new);
    dl_free(p_new);
    dl_free(bufs);
    dl_free(bufs_new);
    return s;
}

dl_status dl_train_graph_build(dl_ctx *ctx, dl_graph *model, const dl_train_options *o, bool eval,
                               dl_train_graph *out) {
    memset(out, 0, sizeof *out);
    if (!model || !o) return dl_fail(ctx, DL_ERR_INVALID, "train: NULL model or options");
    if (o->loss < 0 || o->loss >= DL_LOSS_COUNT || o->optimizer < 0 || o->optimizer >= DL_OPT_COUNT)
        return dl_fail(ctx, DL_ERR_INVALID, "train: unknown loss or optimizer");
    DL_TRY(dl_graph_status(model));
    dl_graph *g = NULL;
    DL_TRY(dl_graph_clone(model, false, &g));
    builder b = {.ctx = ctx, .g = g, .gc = {.g = g}, .o = o, .tg = out};
    dl_status s = dl_graph_toposort(g);
    if (s == DL_OK) s = dl_graph_infer(g);
    if (s == DL_OK) s = build(&b, eval);
    if (s == DL_OK) s = dl_graph_verify(g);
    if (s != DL_OK) {
        dl_graph_free(g);
        memset(out, 0, sizeof *out);
        return s;
    }
    out->g = g;
    return DL_OK;
}

void dl_train_graph_free(dl_train_graph *tg) {
    if (!tg) return;
    dl_graph_free(tg->g);
    memset(tg, 0, sizeof *tg);
}
