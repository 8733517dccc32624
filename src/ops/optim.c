/* optim.c — op family "optim" (rows of the op table): the training optimizers of the
 * "ai.onnx.preview.training" domain (Adagrad, Adam, Momentum).
 *
 * All three are variadic: inputs are R (scalar learning rate), T (scalar int64 update count),
 * then n tensors to optimize X1..Xn, their gradients G1..Gn and one (Adagrad, Momentum) or two
 * (Adam: V then H) groups of n state tensors. Outputs are the new X1..Xn followed by the new state
 * groups in the same order; a model may request only a prefix of the output groups. Every X_i,
 * G_i and state tensor of one slot i share dtype and shape. Math is done in double. */
#include "op-impl.h"

#include <math.h>

#define OPTIM_DOMAIN "ai.onnx.preview.training"

typedef enum optim_kind { O_ADAGRAD, O_ADAM, O_MOMENTUM } optim_kind;

/* Number of per-tensor input groups (X, G and the states). */
static int optim_groups(optim_kind k) {
    return k == O_ADAM ? 4 : 3;
}

static const dl_dtype k_opt_float[] = {DL_F32, DL_F64, DL_F16, DL_BF16, DL_DTYPE_UNDEFINED};
static const dl_dtype k_opt_int[] = {DL_I64, DL_I32, DL_DTYPE_UNDEFINED};

/* Checks that an input is a scalar (rank 0, or a single element). */
static dl_status require_scalar(dl_infer *ic, int i, const char *what) {
    const dl_type *t = ic->in[i];
    if (t->rank < 0) return DL_OK;
    for (int d = 0; d < t->rank; d++)
        if (t->dims[d] >= 0 && t->dims[d] != 1)
            return dl_infer_fail(ic, DL_ERR_SHAPE, "%s must be a scalar", what);
    return DL_OK;
}

/* Splits the variadic arity into n (tensors optimized) and the number of output groups. */
static dl_status optim_arity(dl_infer *ic, optim_kind k, int *n, int *out_groups) {
    int g = optim_groups(k);
    if (ic->n_in < 2 + g || (ic->n_in - 2) % g != 0)
        return dl_infer_fail(ic, DL_ERR_INVALID,
                             "expects R, T and %d groups of tensors, got %d inputs", g, ic->n_in);
    *n = (ic->n_in - 2) / g;
    if (ic->n_out % *n != 0 || ic->n_out / *n < 1 || ic->n_out / *n > g - 1)
        return dl_infer_fail(ic, DL_ERR_INVALID,
                             "%d outputs do not match %d optimized tensors (expects a multiple "
                             "up to %d)",
                             ic->n_out, *n, (g - 1) * *n);
    *out_groups = ic->n_out / *n;
    return DL_OK;
}

static dl_status infer_optim(dl_infer *ic, optim_kind k) {
    const dl_node *node = ic->node;
    if (k == O_MOMENTUM) {
        static const char *req[] = {"alpha", "beta", "mode", "norm_coefficient"};
        for (size_t i = 0; i < DL_ARRAY_LEN(req); i++)
            if (!dl_node_attr(node, req[i]))
                return dl_infer_fail(ic, DL_ERR_INVALID, "required attribute %s is missing",
                                     req[i]);
        const char *mode = dl_attr_str(node, "mode", "");
        if (strcmp(mode, "standard") != 0 && strcmp(mode, "nesterov") != 0)
            return dl_infer_fail(ic, DL_ERR_INVALID,
                                 "attribute mode must be \"standard\" or \"nesterov\", got \"%s\"",
                                 mode);
    }
    int n = 0, og = 0;
    DL_TRY(optim_arity(ic, k, &n, &og));
    int g = optim_groups(k);
    for (int i = 0; i < ic->n_in; i++)
        if (!dl_has_in(ic, i))
            return dl_infer_fail(ic, DL_ERR_INVALID, "input %d must not be omitted", i);
    DL_TRY(dl_infer_require_dtype(ic, 0, k_opt_float));
    DL_TRY(dl_infer_require_dtype(ic, 1, k_opt_int));
    DL_TRY(require_scalar(ic, 0, "R"));
    DL_TRY(require_scalar(ic, 1, "T"));
    for (int j = 0; j < n; j++) {
        const dl_type *x = ic->in[2 + j];
        DL_TRY(dl_infer_require_dtype(ic, 2 + j, k_opt_float));
        for (int q = 1; q < g; q++) {
            const dl_type *t = ic->in[2 + q * n + j];
            if (t->dtype != x->dtype)
                return dl_infer_fail(ic, DL_ERR_TYPE, "input %d must have the dtype of X%d",
                                     2 + q * n + j, j + 1);
            if (t->rank >= 0 && x->rank >= 0) {
                if (t->rank != x->rank)
                    return dl_infer_fail(ic, DL_ERR_SHAPE, "input %d must have the shape of X%d",
                                         2 + q * n + j, j + 1);
                for (int d = 0; d < x->rank; d++)
                    if (t->dims[d] >= 0 && x->dims[d] >= 0 && t->dims[d] != x->dims[d])
                        return dl_infer_fail(ic, DL_ERR_SHAPE,
                                             "input %d must have the shape of X%d", 2 + q * n + j,
                                             j + 1);
            }
        }
        /* Output group 0 is X_new, group q >= 1 is the new state of input group q + 1. */
        for (int q = 0; q < og; q++)
            DL_TRY(dl_infer_same(ic, q * n + j, q == 0 ? 2 + j : 2 + (q + 1) * n + j));
    }
    return DL_OK;
}

static dl_status infer_adagrad(dl_infer *ic) {
    return infer_optim(ic, O_ADAGRAD);
}
static dl_status infer_adam(dl_infer *ic) {
    return infer_optim(ic, O_ADAM);
}
static dl_status infer_momentum(dl_infer *ic) {
    return infer_optim(ic, O_MOMENTUM);
}

/* ---------------------------------------------------------------- kernels */


typedef struct optim_params {
    double r, t; /* learning rate, update count */
    double norm, eps, decay, alpha, beta, norm_post;
    bool nesterov;
} optim_params;

static optim_params optim_read(const dl_kernel *kc, optim_kind k) {
    const dl_node *n = kc->node;
    optim_params p;
    memset(&p, 0, sizeof p);
    p.r = dl_get_f64(kc->in[0], 0);
    p.t = (double)dl_get_i64(kc->in[1], 0);
    p.norm = dl_attr_float(n, "norm_coefficient", 0.0f);
    switch (k) {
    case O_ADAGRAD:
        p.eps = dl_attr_float(n, "epsilon", 1e-6f);
        p.decay = dl_attr_float(n, "decay_factor", 0.0f);
        break;
    case O_ADAM:
        p.eps = dl_attr_float(n, "epsilon", 1e-6f);
        p.alpha = dl_attr_float(n, "alpha", 0.9f);
        p.beta = dl_attr_float(n, "beta", 0.999f);
        p.norm_post = dl_attr_float(n, "norm_coefficient_post", 0.0f);
        break;
    case O_MOMENTUM:
        p.alpha = dl_attr_float(n, "alpha", 0.0f);
        p.beta = dl_attr_float(n, "beta", 0.0f);
        p.nesterov = strcmp(dl_attr_str(n, "mode", "standard"), "nesterov") == 0;
        break;
    }
    return p;
}

/* One element of the update: x, g and the states s[0..] in, new x and states out. */
static void optim_step(optim_kind k, const optim_params *p, double x, double g, const double *s,
                       double *x_new, double *s_new) {
    double gr = p->norm * x + g; /* gradient with the L2 regularization term */
    switch (k) {
    case O_ADAGRAD: {
        double r = p->r / (1.0 + p->t * p->decay);
        double h = s[0] + gr * gr;
        s_new[0] = h;
        *x_new = x - r * gr / (sqrt(h) + p->eps);
        break;
    }
    case O_ADAM: {
        double v = p->alpha * s[0] + (1.0 - p->alpha) * gr;
        double h = p->beta * s[1] + (1.0 - p->beta) * gr * gr;
        double r = p->r;
        if (p->t > 0) r = r * sqrt(1.0 - pow(p->beta, p->t)) / (1.0 - pow(p->alpha, p->t));
        s_new[0] = v;
        s_new[1] = h;
        *x_new = (1.0 - p->norm_post) * (x - r * (v / (sqrt(h) + p->eps)));
        break;
    }
    case O_MOMENTUM: {
        double beta = p->t > 0 ? p->beta : 1.0;
        double v = p->alpha * s[0] + beta * gr;
        s_new[0] = v;
        *x_new = p->nesterov ? x - p->r * (gr + p->alpha * v) : x - p->r * v;
        break;
    }
    }
}

static dl_status ref_optim(dl_kernel *kc, optim_kind k) {
    int g = optim_groups(k);
    int n = (kc->n_in - 2) / g;
    if (n < 1 || kc->n_in != 2 + g * n || kc->n_out % n != 0)
        return dl_kernel_fail(kc, DL_ERR_INTERNAL, "arity does not match");
    int og = kc->n_out / n;
    if (og < 1 || og > g - 1) return dl_kernel_fail(kc, DL_ERR_INTERNAL, "arity does not match");
    for (int i = 0; i < kc->n_in; i++)
        if (!kc->in[i]) return dl_kernel_fail(kc, DL_ERR_INVALID, "input %d is missing", i);
    if (kc->in[0]->numel != 1 || kc->in[1]->numel != 1)
        return dl_kernel_fail(kc, DL_ERR_SHAPE, "R and T must be scalars");
    optim_params p = optim_read(kc, k);
    for (int j = 0; j < n; j++) {
        const dl_tensor *x = kc->in[2 + j];
        for (int q = 1; q < g; q++) {
            const dl_tensor *t = kc->in[2 + q * n + j];
            if (t->numel != x->numel || t->dtype != x->dtype)
                return dl_kernel_fail(kc, DL_ERR_SHAPE, "input %d does not match X%d",
                                      2 + q * n + j, j + 1);
        }
        dl_tensor *outs[3] = {NULL, NULL, NULL};
        for (int q = 0; q < og; q++) {
            DL_TRY(dl_kernel_out(kc, q * n + j, &outs[q]));
            if (outs[q]->numel != x->numel || outs[q]->dtype != x->dtype)
                return dl_kernel_fail(kc, DL_ERR_INTERNAL, "output %d does not match X%d",
                                      q * n + j, j + 1);
        }
        for (int64_t e = 0; e < x->numel; e++) {
            double s[2] = {0, 0}, s_new[2] = {0, 0}, x_new = 0;
            for (int q = 2; q < g; q++) s[q - 2] = dl_get_f64(kc->in[2 + q * n + j], e);
            optim_step(k, &p, dl_get_f64(x, e), dl_get_f64(kc->in[2 + n + j], e), s, &x_new, s_new);
            dl_set_f64(outs[0], e, x_new);
            for (int q = 1; q < og; q++) dl_set_f64(outs[q], e, s_new[q - 1]);
        }
    }
    return DL_OK;
}

static dl_status ref_adagrad(dl_kernel *kc) {
    return ref_optim(kc, O_ADAGRAD);
}
static dl_status ref_adam(dl_kernel *kc) {
    return ref_optim(kc, O_ADAM);
}
static dl_status ref_momentum(dl_kernel *kc) {
    return ref_optim(kc, O_MOMENTUM);
}

/* ---------------------------------------------------------------- the rows */

static const dl_attr_spec adagrad_attrs[] = {{"decay_factor", DL_ATTR_FLOAT},
                                             {"epsilon", DL_ATTR_FLOAT},
                                             {"norm_coefficient", DL_ATTR_FLOAT},
                                             {NULL, 0}};
static const dl_attr_spec adam_attrs[] = {{"alpha", DL_ATTR_FLOAT},
                                          {"beta", DL_ATTR_FLOAT},
                                          {"epsilon", DL_ATTR_FLOAT},
                                          {"norm_coefficient", DL_ATTR_FLOAT},
                                          {"norm_coefficient_post", DL_ATTR_FLOAT},
                                          {NULL, 0}};
static const dl_attr_spec momentum_attrs[] = {{"alpha", DL_ATTR_FLOAT},
                                              {"beta", DL_ATTR_FLOAT},
                                              {"mode", DL_ATTR_STRING},
                                              {"norm_coefficient", DL_ATTR_FLOAT},
                                              {NULL, 0}};

const dl_op_def dl_ops_optim[] = {
    {.name = "Adagrad",
     .domain = OPTIM_DOMAIN,
     .min_in = 5,
     .max_in = DL_VARIADIC,
     .min_out = 1,
     .max_out = DL_VARIADIC,
     .attrs = adagrad_attrs,
     .infer = infer_adagrad,
     .ref = ref_adagrad},
    {.name = "Adam",
     .domain = OPTIM_DOMAIN,
     .min_in = 6,
     .max_in = DL_VARIADIC,
     .min_out = 1,
     .max_out = DL_VARIADIC,
     .attrs = adam_attrs,
     .infer = infer_adam,
     .ref = ref_adam},
    {.name = "Momentum",
     .domain = OPTIM_DOMAIN,
     .min_in = 5,
     .max_in = DL_VARIADIC,
     .min_out = 1,
     .max_out = DL_VARIADIC,
     .attrs = momentum_attrs,
     .infer = infer_momentum,
     .ref = ref_momentum},
    {.name = NULL},
};
