/* trainer.c — dl_trainer: owns the parameters and optimizer state, runs the step program (one
 * compiled program: forward, loss, backward, update) and the evaluation program. Between steps
 * the host only swaps the new parameter and state tensors in: no per-parameter computation. */
#include "train.h"

#include "../frontend/onnx-impl.h"
#include "../ir/rewrite.h"
#include "../runtime/program-impl.h"
#include "../runtime/profile.h"

#include <math.h>
#include <stdio.h>

struct dl_trainer {
    dl_ctx *ctx;
    dl_graph *model;
    dl_train_options opt;
    dl_compile_options copt;
    dl_train_graph step, eval;
    dl_program *p_step, *p_eval; /* NULL on the reference backend */
    int n_params, n_states, n_buffers;
    dl_tensor **params;  /* owned */
    dl_tensor **states;  /* owned */
    dl_tensor **buffers; /* owned: BatchNormalization running statistics */
    dl_tensor *hp[DL_HP_COUNT]; /* rank-0 float32, refilled every step */
    /* by step output (1 + parameter/state index): the tensors of two steps ago, which the next
     * step writes its outputs into (fresh allocations of that size cost page faults) */
    dl_tensor **spare;
    int64_t steps;
};

void dl_train_options_init(dl_train_options *o) {
    memset(o, 0, sizeof *o);
    o->backend = DL_BACKEND_NATIVE;
}

void dl_hparams_init(dl_hparams *h, dl_optimizer_kind opt) {
    memset(h, 0, sizeof *h);
    h->lr = 1e-3f;
    h->beta1 = 0.9f;
    h->beta2 = 0.999f;
    h->eps = 1e-8f;
    h->max_grad_norm = 1.0f;
    h->weight_decay = opt == DL_OPT_ADAMW ? 0.01f : 0.0f;
}

static dl_status compile_one(dl_trainer *t, dl_train_graph *tg, dl_program **out) {
    if (t->opt.backend == DL_BACKEND_REF) return DL_OK;
    return dl_compile(t->ctx, tg->g, &t->copt, out);
}

dl_status dl_trainer_new(dl_ctx *ctx, dl_graph *model, const dl_train_options *o, dl_trainer **out) {
    if (!out || !model) return dl_fail(ctx, DL_ERR_INVALID, "dl_trainer_new: NULL argument");
    *out = NULL;
    dl_train_options def;
    if (!o) {
        dl_train_options_init(&def);
        o = &def;
    }
    if (o->backend != DL_BACKEND_REF && o->backend != DL_BACKEND_NATIVE)
        return dl_fail(ctx, DL_ERR_INVALID, "dl_trainer_new: unknown backend");
    if (o->backend == DL_BACKEND_REF && o->compile && o->compile->math != DL_MATH_FP32)
        return dl_fail(ctx, DL_ERR_INVALID,
                       "dl_trainer_new: math mode %d chooses compiled kernels: the reference "
                       "backend computes in float32",
                       o->compile->math);
    dl_trainer *t = dl_calloc(1, sizeof *t);
    if (!t) return dl_fail(ctx, DL_ERR_NOMEM, "out of memory");
    t->ctx = ctx;
    t->model = model;
    t->opt = *o;
    t->opt.compile = NULL;
    if (o->compile) t->copt = *o->compile;
    else dl_compile_options_init(&t->copt);
    dl_status s = dl_train_graph_build(ctx, model, &t->opt, false, &t->step);
    if (s == DL_OK) s = dl_train_graph_build(ctx, model, &t->opt, true, &t->eval);
    if (s == DL_OK && t->step.n_params == 0)
        s = dl_fail(ctx, DL_ERR_INVALID, "train: the model has no trainable parameters (no float "
                                         "initializer that the loss depends on)");
    if (s == DL_OK) {
        t->n_params = t->step.n_params;
        t->n_states = t->n_params * t->step.states_per_param;
        t->params = dl_calloc((size_t)t->n_params + 1, sizeof *t->params);
        t->states = dl_calloc((size_t)t->n_states + 1, sizeof *t->states);
        t->n_buffers = t->step.n_buffers;
        t->buffers = dl_calloc((size_t)t->n_buffers + 1, sizeof *t->buffers);
        t->spare = dl_calloc((size_t)(1 + t->n_params + t->n_states + t->n_buffers), sizeof *t->spare);
        if (!t->params || !t->states || !t->buffers || !t->spare)
            s = dl_fail(ctx, DL_ERR_NOMEM, "out of memory");
        if (s == DL_OK && t->eval.n_buffers != t->n_buffers)
            s = dl_fail(ctx, DL_ERR_INTERNAL, "train: step and eval graphs disagree on buffers");
    }
    /* starting values: copies of the model's weights; zeroed optimizer state */
    for (int i = 0; i < t->n_params && s == DL_OK; i++) {
        dl_value *v = dl_graph_find_value(model, t->step.param_names[i]);
        if (!v || !v->constant) {
            s = dl_fail(ctx, DL_ERR_INTERNAL, "train: parameter '%s' not found in the model",
                        t->step.param_names[i]);
            break;
        }
        s = dl_tensor_clone(ctx, v->constant, &t->params[i]);
    }
    for (int i = 0; i < t->n_buffers && s == DL_OK; i++) {
        dl_value *v = dl_graph_find_value(model, t->step.buffer_names[i]);
        if (!v || !v->constant)
            s = dl_fail(ctx, DL_ERR_INTERNAL, "train: buffer '%s' not found in the model",
                        t->step.buffer_names[i]);
        else
            s = dl_tensor_clone(ctx, v->constant, &t->buffers[i]);
    }
    for (int i = 0; i < t->n_states && s == DL_OK; i++) {
        const dl_tensor *p = t->params[i / t->step.states_per_param];
        s = dl_tensor_new(ctx, p->dtype, p->rank, p->dims, &t->states[i]);
    }
    for (int k = 0; k < DL_HP_COUNT && s == DL_OK; k++) s = dl_tensor_new(ctx, DL_F32, 0, NULL, &t->hp[k]);
    if (s == DL_OK) s = compile_one(t, &t->step, &t->p_step);
    if (s == DL_OK) s = compile_one(t, &t->eval, &t->p_eval);
    if (s != DL_OK) {
        dl_trainer_free(t);
        return s;
    }
    *out = t;
    return DL_OK;
}

void dl_trainer_free(dl_trainer *t) {
    if (!t) return;
    dl_program_free(t->p_step);
    dl_program_free(t->p_eval);
    for (int i = 0; t->params && i < t->n_params; i++) dl_tensor_free(t->params[i]);
    for (int i = 0; t->states && i < t->n_states; i++) dl_tensor_free(t->states[i]);
    for (int i = 0; t->buffers && i < t->n_buffers; i++) dl_tensor_free(t->buffers[i]);
    dl_free(t->buffers);
    for (int k = 0; k < DL_HP_COUNT; k++) dl_tensor_free(t->hp[k]);
    for (int i = 0; t->spare && i < 1 + t->n_params + t->n_states + t->n_buffers; i++)
        dl_tensor_free(t->spare[i]);
    dl_free(t->spare);
    dl_free(t->params);
    dl_free(t->states);
    dl_train_graph_free(&t->step);
    dl_train_graph_free(&t->eval);
    dl_free(t);
}

/* y as the label input wants it: cross-entropy labels flattened to [N] (checked to lie in
 * [0, C): an out-of-range label would silently be a zero row of the one-hot); targets reshaped
 * to the prediction's shape when only the batch dim is unknown. A view, no copy. */
static dl_status label_view(dl_trainer *t, const dl_train_graph *tg, dl_tensor *y, dl_tensor **out) {
    dl_ctx *ctx = t->ctx;
    if (!y) return dl_fail(ctx, DL_ERR_INVALID, "train: no labels");
    if (t->opt.loss == DL_LOSS_CROSS_ENTROPY) {
        if (!dl_dtype_is_int(y->dtype))
            return dl_fail(ctx, DL_ERR_TYPE, "train: cross_entropy labels must be integers, got %s",
                           dl_dtype_name(y->dtype));
        for (int64_t i = 0; i < y->numel; i++) {
            double c = dl_get_f64(y, i);
            if (!(c >= 0 && c < (double)tg->n_classes))
                return dl_fail(ctx, DL_ERR_INVALID,
                               "train: label %g at index %lld is outside [0, %lld) (the model "
                               "has %lld classes)",
                               c, (long long)i, (long long)tg->n_classes, (long long)tg->n_classes);
        }
        int64_t n = y->numel;
        if (y->dtype == DL_I64) return dl_tensor_wrap(ctx, DL_I64, 1, &n, y->data, out);
        DL_TRY(dl_tensor_new(ctx, DL_I64, 1, &n, out));
        for (int64_t i = 0; i < n; i++) ((int64_t *)(*out)->data)[i] = (int64_t)dl_get_f64(y, i);
        return DL_OK;
    }
    const dl_type *pt = &tg->pred->type;
    if (y->dtype != pt->dtype)
        return dl_fail(ctx, DL_ERR_TYPE, "train: targets are %s, the prediction is %s",
                       dl_dtype_name(y->dtype), dl_dtype_name(pt->dtype));
    int64_t dims[DL_MAX_RANK], known = 1;
    int unknown = -1;
    for (int i = 0; i < pt->rank; i++) {
        dims[i] = pt->dims[i];
        if (dims[i] < 0) {
            if (unknown >= 0) return dl_tensor_wrap(ctx, y->dtype, y->rank, y->dims, y->data, out);
            unknown = i;
        } else {
            known *= dims[i];
        }
    }
    if (unknown >= 0) {
        if (known == 0 || y->numel % known)
            return dl_fail(ctx, DL_ERR_SHAPE, "train: %lld target values do not fit the prediction",
                           (long long)y->numel);
        dims[unknown] = y->numel / known;
    } else if (known != y->numel) {
        return dl_fail(ctx, DL_ERR_SHAPE, "train: %lld target values, the prediction has %lld",
                       (long long)y->numel, (long long)known);
    }
    return dl_tensor_wrap(ctx, y->dtype, pt->rank, dims, y->data, out);
}

static void set_hparams(dl_trainer *t, const dl_hparams *h) {
    float v[DL_HP_COUNT] = {
        [DL_HP_LR] = h->lr,
        [DL_HP_MOMENTUM] = h->momentum,
        [DL_HP_WEIGHT_DECAY] = h->weight_decay,
        [DL_HP_BETA1] = h->beta1,
        [DL_HP_BETA2] = h->beta2,
        [DL_HP_EPS] = h->eps,
        [DL_HP_MAX_NORM] = h->max_grad_norm,
        [DL_HP_LABEL_SMOOTHING] = h->label_smoothing,
        [DL_HP_STEP] = (float)(t->steps + 1),
    };
    for (int k = 0; k < DL_HP_COUNT; k++) *(float *)t->hp[k]->data = v[k];
}

static dl_status run(dl_trainer *t, dl_train_graph *tg, dl_program *p, int n_in, dl_tensor **in,
                     dl_tensor **outs, dl_tensor *const *reuse) {
    if (p) return dl_program_run_reuse(t->ctx, p, n_in, NULL, in, outs, reuse);
    return dl_run(t->ctx, tg->g, DL_BACKEND_REF, n_in, NULL, in, outs);
}

static dl_status check_hparams(dl_ctx *ctx, const dl_hparams *h) {
    const float v[] = {h->lr, h->momentum, h->weight_decay, h->beta1, h->beta2, h->eps,
                       h->max_grad_norm, h->label_smoothing};
    for (size_t i = 0; i < sizeof v / sizeof *v; i++)
        if (!isfinite(v[i]) || v[i] < 0)
            return dl_fail(ctx, DL_ERR_INVALID, "train: hyper-parameters must be finite and >= 0");
    if (h->beta1 >= 1 || h->beta2 >= 1 || h->label_smoothing > 1)
        return dl_fail(ctx, DL_ERR_INVALID, "train: betas must be < 1, label smoothing <= 1");
    return DL_OK;
}

/* The step program's inputs in order: x, y, parameters, state, buffers, hyper-parameters. */
static void step_inputs(dl_trainer *t, dl_tensor *x, dl_tensor *yv, dl_tensor **in) {
    int k = 0;
    in[k++] = x;
    in[k++] = yv;
    for (int i = 0; i < t->n_params; i++) in[k++] = t->params[i];
    for (int i = 0; i < t->n_states; i++) in[k++] = t->states[i];
    for (int i = 0; i < t->n_buffers; i++) in[k++] = t->buffers[i];
    for (int i = 0; i < t->step.n_hp; i++) in[k++] = t->hp[t->step.hp[i]];
}

dl_status dl_trainer_profile(dl_ctx *ctx, dl_trainer *t, dl_tensor *x, dl_tensor *y,
                             const dl_hparams *hp, int top, void *file) {
    if (!t || !x || !y || !hp) return dl_fail(ctx, DL_ERR_INVALID, "dl_trainer_profile: NULL argument");
    if (!t->p_step) return dl_fail(ctx, DL_ERR_INVALID, "profiling needs the native backend");
    dl_tensor *yv = NULL;
    DL_TRY(label_view(t, &t->step, y, &yv));
    set_hparams(t, hp);
    int n_in = 2 + t->n_params + t->n_states + t->n_buffers + t->step.n_hp;
    dl_tensor **in = dl_calloc((size_t)n_in, sizeof *in);
    dl_profile pr = {0};
    dl_machine m;
    dl_status s = in ? DL_OK : dl_fail(ctx, DL_ERR_NOMEM, "out of memory");
    if (s == DL_OK) {
        step_inputs(t, x, yv, in);
        s = dl_profile_program(ctx, t->p_step, n_in, NULL, in, 1, 5, &pr);
    }
    if (s == DL_OK) s = dl_measure_machine(ctx, t->p_step->threads, &m);
    if (s == DL_OK) s = dl_profile_print(ctx, &pr, t->p_step, &m, top, file);
    dl_profile_free(&pr);
    dl_free(in);
    dl_tensor_free(yv);
    return s;
}

dl_status dl_train_step(dl_ctx *ctx, dl_trainer *t, dl_tensor *x, dl_tensor *y,
                        const dl_hparams *hp, float *loss) {
    if (!t || !x || !y || !hp) return dl_fail(ctx, DL_ERR_INVALID, "dl_train_step: NULL argument");
    DL_TRY(check_hparams(ctx, hp));
    t->ctx = ctx;
    dl_tensor *yv = NULL;
    DL_TRY(label_view(t, &t->step, y, &yv));
    set_hparams(t, hp);
    int n_in = 2 + t->n_params + t->n_states + t->n_buffers + t->step.n_hp;
    int n_out = 1 + t->n_params + t->n_states + t->n_buffers;
    dl_tensor **in = dl_calloc((size_t)n_in, sizeof *in), **outs = dl_calloc((size_t)n_out, sizeof *outs);
    dl_status s = (in && outs) ? DL_OK : dl_fail(ctx, DL_ERR_NOMEM, "out of memory");
    if (s == DL_OK) {
        step_inputs(t, x, yv, in);
        s = run(t, &t->step, t->p_step, n_in, in, outs, t->spare);
    }
    if (s == DL_OK) {
        float l = (float)dl_get_f64(outs[0], 0);
        if (loss) *loss = l;
        /* a non-finite loss leaves the weights as they were: the caller decides what to do */
        if (!isfinite(l)) {
            s = dl_fail(ctx, DL_ERR_INVALID, "train: the loss is %s at step %lld (weights kept "
                        "from before this step); lower the learning rate?",
                        isnan(l) ? "NaN" : "infinite", (long long)t->steps + 1);
        } else {
            /* the replaced tensors become the next step's output buffers */
            for (int i = 0; i < dl_trainer_num_tensors(t); i++) {
                dl_tensor **cur = dl_trainer_slot(t, i);
                if (t->spare[1 + i] != outs[1 + i]) dl_tensor_free(t->spare[1 + i]);
                t->spare[1 + i] = *cur;
                *cur = outs[1 + i];
                outs[1 + i] = NULL;
            }
            t->steps++;
        }
    }
    for (int i = 0; outs && i < n_out; i++)
        if (outs[i] != t->spare[i]) dl_tensor_free(outs[i]);
    dl_free(in);
    dl_free(outs);
    dl_tensor_free(yv);
    return s;
}

dl_status dl_trainer_eval(dl_ctx *ctx, dl_trainer *t, dl_tensor *x, dl_tensor *y, float *loss,
                          dl_tensor **pred) {
    if (!t || !x || !y) return dl_fail(ctx, DL_ERR_INVALID, "dl_trainer_eval: NULL argument");
    t->ctx = ctx;
    if (pred) *pred = NULL;
    dl_tensor *yv = NULL;
    DL_TRY(label_view(t, &t->eval, y, &yv));
    int n_in = 2 + t->n_params + t->n_buffers + t->eval.n_hp;
    dl_tensor **in = dl_calloc((size_t)n_in, sizeof *in), *outs[2] = {0};
    dl_status s = in ? DL_OK : dl_fail(ctx, DL_ERR_NOMEM, "out of memory");
    if (s == DL_OK) {
        in[0] = x;
        in[1] = yv;
        int k = 2;
        for (int i = 0; i < t->n_params; i++) in[k++] = t->params[i];
        for (int i = 0; i < t->n_buffers; i++) in[k++] = t->buffers[i];
        /* the label smoothing of the last step (0 before any) */
        for (int i = 0; i < t->eval.n_hp; i++) in[k++] = t->hp[t->eval.hp[i]];
        s = run(t, &t->eval, t->p_eval, n_in, in, outs, NULL);
    }
    if (s == DL_OK) {
        if (loss) *loss = (float)dl_get_f64(outs[0], 0);
        if (pred) {
            *pred = outs[1];
            outs[1] = NULL;
        }
    }
    dl_tensor_free(outs[0]);
    dl_tensor_free(outs[1]);
    dl_free(in);
    dl_tensor_free(yv);
    return s;
}

int64_t dl_trainer_steps(const dl_trainer *t) { return t ? t->steps : 0; }
int dl_trainer_num_params(const dl_trainer *t) { return t ? t->n_params : 0; }
const char *dl_trainer_param_name(const dl_trainer *t, int i) {
    return t && i >= 0 && i < t->n_params ? t->step.param_names[i] : NULL;
}
dl_tensor *dl_trainer_param(dl_trainer *t, int i) {
    return t && i >= 0 && i < t->n_params ? t->params[i] : NULL;
}
dl_graph *dl_trainer_graph(dl_trainer *t) { return t ? t->step.g : NULL; }
dl_program *dl_trainer_program(dl_trainer *t) { return t ? t->p_step : NULL; }

dl_status dl_trainer_export_onnx(dl_ctx *ctx, dl_trainer *t, const char *path) {
    if (!t || !path) return dl_fail(ctx, DL_ERR_INVALID, "dl_trainer_export_onnx: NULL argument");
    dl_graph *g = NULL;
    DL_TRY(dl_graph_clone(t->model, false, &g));
    dl_status s = DL_OK;
    for (int i = 0; i < t->n_params + t->n_buffers && s == DL_OK; i++) {
        bool par = i < t->n_params;
        const char *nm = par ? t->step.param_names[i] : t->step.buffer_names[i - t->n_params];
        dl_value *v = dl_graph_find_value(g, nm);
        dl_tensor *w = NULL;
        if (!v || !v->constant) {
            s = dl_fail(ctx, DL_ERR_INTERNAL, "export: weight '%s' not in the model", nm);
            break;
        }
        const dl_tensor *p = par ? t->params[i] : t->buffers[i - t->n_params];
        s = dl_tensor_wrap(ctx, p->dtype, p->rank, p->dims, p->data, &w);
        if (s == DL_OK) s = dl_graph_own_tensor(g, w);
        if (s == DL_OK) v->constant = w;
    }
    if (s == DL_OK) s = dl_save_onnx(ctx, g, path);
    dl_graph_free(g);
    return s;
}

/* ---- for checkpoints (checkpoint.c) ---- */

int dl_trainer_num_tensors(const dl_trainer *t) { return t->n_params + t->n_states + t->n_buffers; }

dl_tensor **dl_trainer_slot(dl_trainer *t, int i) {
    if (i < t->n_params) return &t->params[i];
    if (i < t->n_params + t->n_states) return &t->states[i - t->n_params];
    return &t->buffers[i - t->n_params - t->n_states];
}

char *dl_trainer_slot_name(const dl_trainer *t, int i) {
    char pre[32] = "param/";
    const char *base;
    int j = i - t->n_params, sp = t->step.states_per_param;
    if (i < t->n_params) {
        base = t->step.param_names[i];
    } else if (j < t->n_states) {
        snprintf(pre, sizeof pre, "state%d/", j % sp);
        base = t->step.param_names[j / sp];
    } else {
        snprintf(pre, sizeof pre, "buffer/");
        base = t->step.buffer_names[j - t->n_states];
    }
    size_t n = strlen(pre) + strlen(base) + 1;
    char *s = dl_malloc(n);
    if (s) snprintf(s, n, "%s%s", pre, base);
    return s;
}
void dl_trainer_set_steps(dl_trainer *t, int64_t steps) { t->steps = steps; }
const dl_train_options *dl_trainer_options(const dl_trainer *t) { return &t->opt; }
