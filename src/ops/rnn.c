/* rnn.c — op family "rnn" (rows of the op table): RNN, GRU, LSTM.
 *
 * Shared layout of the three ops (ONNX):
 *   X [seq, batch, input] (layout 1: [batch, seq, input])
 *   W [dirs, G*H, input], R [dirs, G*H, H], B [dirs, 2*G*H]
 *   sequence_lens [batch], initial_h / initial_c [dirs, batch, H] (layout 1: [batch, dirs, H])
 *   P [dirs, 3*H] (LSTM peepholes i, o, f)
 *   Y [seq, dirs, batch, H] (layout 1: [batch, seq, dirs, H]), Y_h / Y_c like initial_h.
 * G is 1 (RNN), 3 (GRU, gates z r h) or 4 (LSTM, gates i o f c). The reference kernel runs each
 * (direction, batch) pair on its own in double precision. */
#include "op-impl.h"

#include <math.h>
#include <strings.h>

typedef enum rnn_kind { RNN_SIMPLE, RNN_GRU, RNN_LSTM } rnn_kind;

static const dl_attr_spec rnn_attrs[] = {
    {"activation_alpha", DL_ATTR_FLOATS},
    {"activation_beta", DL_ATTR_FLOATS},
    {"activations", DL_ATTR_STRINGS},
    {"clip", DL_ATTR_FLOAT},
    {"direction", DL_ATTR_STRING},
    {"hidden_size", DL_ATTR_INT},
    {"layout", DL_ATTR_INT},
    {NULL, 0},
};

static const dl_attr_spec gru_attrs[] = {
    {"activation_alpha", DL_ATTR_FLOATS},
    {"activation_beta", DL_ATTR_FLOATS},
    {"activations", DL_ATTR_STRINGS},
    {"clip", DL_ATTR_FLOAT},
    {"direction", DL_ATTR_STRING},
    {"hidden_size", DL_ATTR_INT},
    {"layout", DL_ATTR_INT},
    {"linear_before_reset", DL_ATTR_INT},
    {NULL, 0},
};

static const dl_attr_spec lstm_attrs[] = {
    {"activation_alpha", DL_ATTR_FLOATS},
    {"activation_beta", DL_ATTR_FLOATS},
    {"activations", DL_ATTR_STRINGS},
    {"clip", DL_ATTR_FLOAT},
    {"direction", DL_ATTR_STRING},
    {"hidden_size", DL_ATTR_INT},
    {"input_forget", DL_ATTR_INT},
    {"layout", DL_ATTR_INT},
    {NULL, 0},
};

/* ---- activation functions ---- */

typedef enum act_kind {
    ACT_RELU,
    ACT_TANH,
    ACT_SIGMOID,
    ACT_AFFINE,
    ACT_LEAKY_RELU,
    ACT_THRESHOLDED_RELU,
    ACT_SCALED_TANH,
    ACT_HARD_SIGMOID,
    ACT_ELU,
    ACT_SOFTSIGN,
    ACT_SOFTPLUS,
} act_kind;

typedef struct act_fn {
    act_kind kind;
    double alpha, beta;
} act_fn;

static const struct {
    const char *name;
    act_kind kind;
    int n_params; /* how many of alpha, beta it takes from the attribute lists */
    double alpha, beta;
} act_table[] = {
    {"Relu", ACT_RELU, 0, 0, 0},
    {"Tanh", ACT_TANH, 0, 0, 0},
    {"Sigmoid", ACT_SIGMOID, 0, 0, 0},
    {"Affine", ACT_AFFINE, 2, 1.0, 0.0},
    {"LeakyRelu", ACT_LEAKY_RELU, 1, 0.01, 0},
    {"ThresholdedRelu", ACT_THRESHOLDED_RELU, 1, 1.0, 0},
    {"ScaledTanh", ACT_SCALED_TANH, 2, 1.0, 1.0},
    {"HardSigmoid", ACT_HARD_SIGMOID, 2, 0.2, 0.5},
    {"Elu", ACT_ELU, 1, 1.0, 0},
    {"Softsign", ACT_SOFTSIGN, 0, 0, 0},
    {"Softplus", ACT_SOFTPLUS, 0, 0, 0},
};

static double act_apply(const act_fn *a, double x) {
    switch (a->kind) {
    case ACT_RELU:
        return x > 0 ? x : 0;
    case ACT_TANH:
        return tanh(x);
    case ACT_SIGMOID:
        return x >= 0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x));
    case ACT_AFFINE:
        return a->alpha * x + a->beta;
    case ACT_LEAKY_RELU:
        return x >= 0 ? x : a->alpha * x;
    case ACT_THRESHOLDED_RELU:
        return x > a->alpha ? x : 0;
    case ACT_SCALED_TANH:
        return a->alpha * tanh(a->beta * x);
    case ACT_HARD_SIGMOID: {
        double v = a->alpha * x + a->beta;
        return v < 0 ? 0 : (v > 1 ? 1 : v);
    }
    case ACT_ELU:
        return x >= 0 ? x : a->alpha * (exp(x) - 1.0);
    case ACT_SOFTSIGN:
        return x / (1.0 + fabs(x));
    case ACT_SOFTPLUS:
        return x > 30 ? x : log1p(exp(x));
    }
    return x;
}

/* Number of activation functions per direction. */
static int acts_per_dir(rnn_kind k) {
    return k == RNN_SIMPLE ? 1 : (k == RNN_GRU ? 2 : 3);
}
static int gates_of(rnn_kind k) {
    return k == RNN_SIMPLE ? 1 : (k == RNN_GRU ? 3 : 4);
}

#define RNN_MAX_ACTS 6

/* Resolves the activation list of a node into acts[dirs * per_dir]. err receives a message on
 * failure (returns false). */
static bool rnn_parse_acts(const dl_node *n, rnn_kind kind, int dirs, act_fn *acts, char *err,
                           size_t errlen) {
    int per = acts_per_dir(kind);
    int total = per * dirs;
    static const act_kind defaults[3][3] = {
        {ACT_TANH, ACT_TANH, ACT_TANH},
        {ACT_SIGMOID, ACT_TANH, ACT_TANH},
        {ACT_SIGMOID, ACT_TANH, ACT_TANH},
    };
    const dl_attr *a = dl_node_attr(n, "activations");
    if (!a || a->n == 0) {
        for (int d = 0; d < dirs; d++)
            for (int i = 0; i < per; i++) acts[d * per + i] = (act_fn){defaults[kind][i], 0, 0};
        return true;
    }
    if (a->n != total && !(dirs == 2 && a->n == per)) {
        snprintf(err, errlen, "activations has %d entries, expected %d", a->n, total);
        return false;
    }
    const float *alphas = NULL, *betas = NULL;
    int n_alpha = dl_attr_floats(n, "activation_alpha", &alphas);
    int n_beta = dl_attr_floats(n, "activation_beta", &betas);
    if (n_alpha < 0) n_alpha = 0;
    if (n_beta < 0) n_beta = 0;
    int ia = 0, ib = 0;
    for (int i = 0; i < a->n; i++) {
        const char *name = a->strings[i];
        int found = -1;
        for (size_t t = 0; t < DL_ARRAY_LEN(act_table); t++)
            if (name && strcasecmp(name, act_table[t].name) == 0) found = (int)t;
        if (found < 0) {
            snprintf(err, errlen, "unsupported activation '%s'", name ? name : "");
            return false;
        }
        act_fn f = {act_table[found].kind, act_table[found].alpha, act_table[found].beta};
        if (act_table[found].n_params >= 1 && ia < n_alpha) f.alpha = alphas[ia++];
        if (act_table[found].n_params >= 2 && ib < n_beta) f.beta = betas[ib++];
        acts[i] = f;
    }
    if (a->n != total) /* one set given for a bidirectional op: both directions use it */
        for (int i = 0; i < per; i++) acts[per + i] = acts[i];
    return true;
}

static int rnn_dirs(const char *dir) {
    if (strcmp(dir, "forward") == 0 || strcmp(dir, "reverse") == 0) return 1;
    if (strcmp(dir, "bidirectional") == 0) return 2;
    return 0;
}

int dl_rnn_directions(const dl_node *n, bool *defaults) {
    const char *op = n->op ? n->op->name : "";
    const rnn_kind kind = !strcmp(op, "LSTM")  ? RNN_LSTM
                          : !strcmp(op, "GRU") ? RNN_GRU
                                               : RNN_SIMPLE;
    const int dirs = rnn_dirs(dl_attr_str(n, "direction", "forward"));
    act_fn acts[RNN_MAX_ACTS];
    char err[160];
    *defaults = dirs && rnn_parse_acts(n, kind, dirs, acts, err, sizeof err);
    for (int k = 0; *defaults && k < dirs * acts_per_dir(kind); k++) /* sigmoid, then tanh */
        *defaults = acts[k].kind ==
                    (k % acts_per_dir(kind) == 0 && kind != RNN_SIMPLE ? ACT_SIGMOID : ACT_TANH);
    return dirs;
}

/* ---- inference ---- */

/* Fails when two dims are both known and differ. */
static dl_status dim_match(dl_infer *ic, int64_t have, int64_t want, const char *what) {
    if (have >= 0 && want >= 0 && have != want)
        return dl_infer_fail(ic, DL_ERR_SHAPE, "%s is %lld, expected %lld", what, (long long)have,
                             (long long)want);
    return DL_OK;
}

/* Checks that optional input i (if present) has rank r and the given dims, dtype dt. */
static dl_status check_input(dl_infer *ic, int i, const char *name, dl_dtype dt, int r,
                             const int64_t *dims) {
    if (!dl_has_in(ic, i)) return DL_OK;
    const dl_type *t = ic->in[i];
    if (t->dtype != dt)
        return dl_infer_fail(ic, DL_ERR_TYPE, "input %s must have the dtype of X", name);
    if (t->rank < 0) return DL_OK;
    if (t->rank != r)
        return dl_infer_fail(ic, DL_ERR_SHAPE, "input %s must have rank %d, got %d", name, r,
                             t->rank);
    char what[64];
    for (int k = 0; k < r; k++) {
        snprintf(what, sizeof what, "%s dim %d", name, k);
        DL_TRY(dim_match(ic, t->dims[k], dims[k], what));
    }
    return DL_OK;
}

static dl_status rnn_infer_common(dl_infer *ic, rnn_kind kind) {
    const dl_node *n = ic->node;
    int G = gates_of(kind);
    DL_TRY(dl_infer_require_float(ic, 0));
    dl_dtype dt = ic->in[0]->dtype;
    const char *dir = dl_attr_str(n, "direction", "forward");
    int dirs = rnn_dirs(dir);
    if (dirs == 0) return dl_infer_fail(ic, DL_ERR_INVALID, "unknown direction '%s'", dir);
    int64_t layout = ic->opset >= 14 ? dl_attr_int(n, "layout", 0) : 0;
    if (layout != 0 && layout != 1)
        return dl_infer_fail(ic, DL_ERR_INVALID, "layout must be 0 or 1, got %lld",
                             (long long)layout);
    if (dl_node_attr(n, "clip") && !(dl_attr_float(n, "clip", 0) > 0))
        return dl_infer_fail(ic, DL_ERR_INVALID, "clip must be positive");
    if (kind == RNN_GRU) {
        int64_t lbr = dl_attr_int(n, "linear_before_reset", 0);
        if (lbr != 0 && lbr != 1)
            return dl_infer_fail(ic, DL_ERR_INVALID, "linear_before_reset must be 0 or 1");
    }
    if (kind == RNN_LSTM) {
        int64_t inf = dl_attr_int(n, "input_forget", 0);
        if (inf != 0 && inf != 1)
            return dl_infer_fail(ic, DL_ERR_INVALID, "input_forget must be 0 or 1");
    }
    act_fn acts[RNN_MAX_ACTS];
    char err[160];
    if (!rnn_parse_acts(n, kind, dirs, acts, err, sizeof err))
        return dl_infer_fail(ic, DL_ERR_INVALID, "%s", err);

    const dl_type *X = ic->in[0], *W = ic->in[1], *R = ic->in[2];
    if (!W || !R) return dl_infer_fail(ic, DL_ERR_INVALID, "W and R are required");
    if (X->rank >= 0 && X->rank != 3)
        return dl_infer_fail(ic, DL_ERR_SHAPE, "X must have rank 3, got %d", X->rank);
    if (W->rank >= 0 && W->rank != 3)
        return dl_infer_fail(ic, DL_ERR_SHAPE, "W must have rank 3, got %d", W->rank);
    if (R->rank >= 0 && R->rank != 3)
        return dl_infer_fail(ic, DL_ERR_SHAPE, "R must have rank 3, got %d", R->rank);
    if (W->dtype != dt || R->dtype != dt)
        return dl_infer_fail(ic, DL_ERR_TYPE, "W and R must have the dtype of X");

    int64_t seq = -1, batch = -1, input = -1;
    if (X->rank == 3) {
        seq = X->dims[layout ? 1 : 0];
        batch = X->dims[layout ? 0 : 1];
        input = X->dims[2];
    }
    int64_t H = -1;
    const dl_attr *hs = dl_node_attr(n, "hidden_size");
    if (hs) {
        if (hs->i <= 0 || hs->i > INT32_MAX)
            return dl_infer_fail(ic, DL_ERR_INVALID, "hidden_size must be in [1, 2^31), got %lld",
                                 (long long)hs->i);
        H = hs->i;
    } else if (R->rank == 3 && R->dims[2] >= 0) {
        H = R->dims[2];
        if (H == 0) return dl_infer_fail(ic, DL_ERR_INVALID, "hidden size is 0");
    }
    int64_t GH = H >= 0 ? G * H : -1;
    if (W->rank == 3) {
        DL_TRY(dim_match(ic, W->dims[0], dirs, "W dim 0 (num_directions)"));
        DL_TRY(dim_match(ic, W->dims[1], GH, "W dim 1 (gates*hidden_size)"));
        DL_TRY(dim_match(ic, W->dims[2], input, "W dim 2 (input_size)"));
        if (input < 0) input = W->dims[2];
    }
    if (R->rank == 3) {
        DL_TRY(dim_match(ic, R->dims[0], dirs, "R dim 0 (num_directions)"));
        DL_TRY(dim_match(ic, R->dims[1], GH, "R dim 1 (gates*hidden_size)"));
        DL_TRY(dim_match(ic, R->dims[2], H, "R dim 2 (hidden_size)"));
    }
    int64_t bdims[2] = {dirs, GH >= 0 ? 2 * GH : -1};
    DL_TRY(check_input(ic, 3, "B", dt, 2, bdims));
    if (dl_has_in(ic, 4)) {
        const dl_type *s = ic->in[4];
        if (s->dtype != DL_I32 && s->dtype != DL_I64)
            return dl_infer_fail(ic, DL_ERR_TYPE, "sequence_lens must be int32");
        if (s->rank >= 0 && s->rank != 1)
            return dl_infer_fail(ic, DL_ERR_SHAPE, "sequence_lens must have rank 1");
        if (s->rank == 1) DL_TRY(dim_match(ic, s->dims[0], batch, "sequence_lens length"));
    }
    int64_t hdims[3];
    hdims[layout ? 1 : 0] = dirs;
    hdims[layout ? 0 : 1] = batch;
    hdims[2] = H;
    DL_TRY(check_input(ic, 5, "initial_h", dt, 3, hdims));
    if (kind == RNN_LSTM) {
        DL_TRY(check_input(ic, 6, "initial_c", dt, 3, hdims));
        int64_t pdims[2] = {dirs, H >= 0 ? 3 * H : -1};
        DL_TRY(check_input(ic, 7, "P", dt, 2, pdims));
    }

    int64_t s_ = X->rank == 3 ? seq : dl_infer_fresh_dim(ic);
    int64_t b_ = X->rank == 3 ? batch : dl_infer_fresh_dim(ic);
    int64_t h_ = H >= 0 ? H : dl_infer_fresh_dim(ic);
    int64_t ydims[4], yhdims[3];
    if (layout == 0) {
        ydims[0] = s_, ydims[1] = dirs, ydims[2] = b_, ydims[3] = h_;
        yhdims[0] = dirs, yhdims[1] = b_, yhdims[2] = h_;
    } else {
        ydims[0] = b_, ydims[1] = s_, ydims[2] = dirs, ydims[3] = h_;
        yhdims[0] = b_, yhdims[1] = dirs, yhdims[2] = h_;
    }
    if (ic->n_out > 0) DL_TRY(dl_infer_set(ic, 0, dt, 4, ydims));
    if (ic->n_out > 1) DL_TRY(dl_infer_set(ic, 1, dt, 3, yhdims));
    if (ic->n_out > 2) DL_TRY(dl_infer_set(ic, 2, dt, 3, yhdims));
    return DL_OK;
}

static dl_status rnn_infer(dl_infer *ic) {
    return rnn_infer_common(ic, RNN_SIMPLE);
}
static dl_status gru_infer(dl_infer *ic) {
    return rnn_infer_common(ic, RNN_GRU);
}
static dl_status lstm_infer(dl_infer *ic) {
    return rnn_infer_common(ic, RNN_LSTM);
}

/* ---- reference kernel ---- */

typedef struct rnn_run {
    rnn_kind kind;
    int dirs, layout;
    bool reverse_only; /* direction == "reverse" */
    int64_t T, Bn, I, H, G;
    bool has_clip;
    double clip;
    bool lbr, input_forget;
    act_fn acts[RNN_MAX_ACTS];
    const dl_tensor *X, *W, *R, *B, *seq, *h0, *c0, *P;
    dl_tensor *Y, *Yh, *Yc;
    /* scratch */
    double *x, *h, *c, *pre, *tmp;
} rnn_run;

static double clipv(const rnn_run *r, double v) {
    if (!r->has_clip) return v;
    return v < -r->clip ? -r->clip : (v > r->clip ? r->clip : v);
}

static double act(const rnn_run *r, int d, int which, double v) {
    int per = acts_per_dir(r->kind);
    return act_apply(&r->acts[d * per + which], clipv(r, v));
}

/* Index of element (d, b, j) of a state tensor ([dirs,batch,H] or [batch,dirs,H]). */
static int64_t st_idx(const rnn_run *r, int d, int64_t b, int64_t j) {
    return r->layout == 0 ? ((int64_t)d * r->Bn + b) * r->H + j : (b * r->dirs + d) * r->H + j;
}

static int64_t y_idx(const rnn_run *r, int64_t t, int d, int64_t b, int64_t j) {
    return r->layout == 0 ? ((t * r->dirs + d) * r->Bn + b) * r->H + j
                          : ((b * r->T + t) * r->dirs + d) * r->H + j;
}

static int64_t x_idx(const rnn_run *r, int64_t t, int64_t b, int64_t i) {
    return r->layout == 0 ? (t * r->Bn + b) * r->I + i : (b * r->T + t) * r->I + i;
}

/* pre[row] = W[d,row,:]·x + Wb[d,row] for rows [r0, r1). */
static void w_times_x(const rnn_run *r, int d, int64_t r0, int64_t r1, double *out) {
    int64_t GH = r->G * r->H;
    for (int64_t row = r0; row < r1; row++) {
        double s = 0;
        int64_t base = ((int64_t)d * GH + row) * r->I;
        for (int64_t i = 0; i < r->I; i++) s += dl_get_f64(r->W, base + i) * r->x[i];
        if (r->B) s += dl_get_f64(r->B, (int64_t)d * 2 * GH + row);
        out[row - r0] = s;
    }
}

/* out[row] = R[d,row,:]·v + Rb[d,row] for rows [r0, r1). */
static void r_times_h(const rnn_run *r, int d, int64_t r0, int64_t r1, const double *v,
                      double *out) {
    int64_t GH = r->G * r->H;
    for (int64_t row = r0; row < r1; row++) {
        double s = 0;
        int64_t base = ((int64_t)d * GH + row) * r->H;
        for (int64_t k = 0; k < r->H; k++) s += dl_get_f64(r->R, base + k) * v[k];
        if (r->B) s += dl_get_f64(r->B, (int64_t)d * 2 * GH + GH + row);
        out[row - r0] = s;
    }
}

/* One time step for direction d; updates r->h (and r->c). */
static void rnn_step(rnn_run *r, int d) {
    int64_t H = r->H, GH = r->G * H;
    double *pre = r->pre, *tmp = r->tmp; /* each GH long */
    if (r->kind == RNN_SIMPLE) {
        w_times_x(r, d, 0, H, pre);
        r_times_h(r, d, 0, H, r->h, tmp);
        for (int64_t j = 0; j < H; j++) r->h[j] = act(r, d, 0, pre[j] + tmp[j]);
    } else if (r->kind == RNN_GRU) {
        /* gates z (0), r (1), h (2) */
        w_times_x(r, d, 0, GH, pre);
        r_times_h(r, d, 0, 2 * H, r->h, tmp);
        for (int64_t j = 0; j < 2 * H; j++) pre[j] = act(r, d, 0, pre[j] + tmp[j]);
        /* pre[0..H) = z, pre[H..2H) = r */
        if (r->lbr) {
            r_times_h(r, d, 2 * H, 3 * H, r->h, tmp);
            for (int64_t j = 0; j < H; j++)
                tmp[j] = act(r, d, 1, pre[2 * H + j] + pre[H + j] * tmp[j]);
        } else {
            double *rh = tmp + H; /* r ∘ h, H values */
            for (int64_t j = 0; j < H; j++) rh[j] = pre[H + j] * r->h[j];
            r_times_h(r, d, 2 * H, 3 * H, rh, tmp + 2 * H);
            for (int64_t j = 0; j < H; j++) tmp[j] = act(r, d, 1, pre[2 * H + j] + tmp[2 * H + j]);
        }
        for (int64_t j = 0; j < H; j++) r->h[j] = (1.0 - pre[j]) * tmp[j] + pre[j] * r->h[j];
    } else {
        /* gates i (0), o (1), f (2), c (3); peepholes i, o, f */
        w_times_x(r, d, 0, GH, pre);
        r_times_h(r, d, 0, GH, r->h, tmp);
        for (int64_t j = 0; j < GH; j++) pre[j] += tmp[j];
        for (int64_t j = 0; j < H; j++) {
            double pi = 0, po = 0, pf = 0;
            if (r->P) {
                int64_t pb = (int64_t)d * 3 * H;
                pi = dl_get_f64(r->P, pb + j);
                po = dl_get_f64(r->P, pb + H + j);
                pf = dl_get_f64(r->P, pb + 2 * H + j);
            }
            double cprev = r->c[j];
            double ig = act(r, d, 0, pre[j] + pi * cprev);
            double fg = r->input_forget ? 1.0 - ig : act(r, d, 0, pre[2 * H + j] + pf * cprev);
            double cc = act(r, d, 1, pre[3 * H + j]);
            double cn = fg * cprev + ig * cc;
            double og = act(r, d, 0, pre[H + j] + po * cn);
            r->c[j] = cn;
            tmp[j] = og * act(r, d, 2, cn);
        }
        for (int64_t j = 0; j < H; j++) r->h[j] = tmp[j];
    }
}

static dl_status rnn_ref_common(dl_kernel *kc, rnn_kind kind) {
    const dl_node *n = kc->node;
    rnn_run r;
    memset(&r, 0, sizeof r);
    r.kind = kind;
    const char *dir = dl_attr_str(n, "direction", "forward");
    r.dirs = rnn_dirs(dir);
    r.reverse_only = strcmp(dir, "reverse") == 0;
    r.layout = kc->opset >= 14 ? (int)dl_attr_int(n, "layout", 0) : 0;
    r.has_clip = dl_node_attr(n, "clip") != NULL;
    r.clip = dl_attr_float(n, "clip", 0);
    r.lbr = kind == RNN_GRU && dl_attr_int(n, "linear_before_reset", 0) != 0;
    r.input_forget = kind == RNN_LSTM && dl_attr_int(n, "input_forget", 0) != 0;
    char err[160];
    if (r.dirs == 0 || !rnn_parse_acts(n, kind, r.dirs, r.acts, err, sizeof err))
        return dl_kernel_fail(kc, DL_ERR_INVALID, "bad direction or activations");
    r.G = gates_of(kind);
    r.X = kc->in[0];
    r.W = kc->in[1];
    r.R = kc->in[2];
    r.B = kc->n_in > 3 ? kc->in[3] : NULL;
    r.seq = kc->n_in > 4 ? kc->in[4] : NULL;
    r.h0 = kc->n_in > 5 ? kc->in[5] : NULL;
    r.c0 = kind == RNN_LSTM && kc->n_in > 6 ? kc->in[6] : NULL;
    r.P = kind == RNN_LSTM && kc->n_in > 7 ? kc->in[7] : NULL;
    r.T = r.X->dims[r.layout ? 1 : 0];
    r.Bn = r.X->dims[r.layout ? 0 : 1];
    r.I = r.X->dims[2];
    r.H = r.R->dims[2];
    /* Inference checked shapes; re-check the ones indexing relies on, cheaply. */
    if (r.W->numel != r.dirs * r.G * r.H * r.I || r.R->numel != r.dirs * r.G * r.H * r.H ||
        (r.B && r.B->numel != r.dirs * 2 * r.G * r.H) || (r.seq && r.seq->numel != r.Bn) ||
        (r.h0 && r.h0->numel != r.dirs * r.Bn * r.H) ||
        (r.c0 && r.c0->numel != r.dirs * r.Bn * r.H) || (r.P && r.P->numel != r.dirs * 3 * r.H))
        return dl_kernel_fail(kc, DL_ERR_SHAPE, "input shapes do not agree");
    r.Y = kc->n_out > 0 && kc->out[0]->data ? kc->out[0] : NULL;
    r.Yh = kc->n_out > 1 && kc->out[1]->data ? kc->out[1] : NULL;
    r.Yc = kind == RNN_LSTM && kc->n_out > 2 && kc->out[2]->data ? kc->out[2] : NULL;
    if ((r.Y && r.Y->numel != r.T * r.dirs * r.Bn * r.H) ||
        (r.Yh && r.Yh->numel != r.dirs * r.Bn * r.H) ||
        (r.Yc && r.Yc->numel != r.dirs * r.Bn * r.H))
        return dl_kernel_fail(kc, DL_ERR_INTERNAL, "output shapes do not agree");
    if (r.seq) {
        for (int64_t b = 0; b < r.Bn; b++) {
            int64_t L = dl_get_i64(r.seq, b);
            if (L < 0 || L > r.T)
                return dl_kernel_fail(kc, DL_ERR_INVALID,
                                      "sequence_lens[%lld] = %lld is outside [0, %lld]",
                                      (long long)b, (long long)L, (long long)r.T);
        }
    }

    size_t GH = (size_t)(r.G * r.H);
    size_t n_scratch = (size_t)r.I + 2 * (size_t)r.H + 2 * GH + 3 * (size_t)r.H;
    double *buf = NULL;
    size_t bytes;
    DL_TRY(dl_mul_size(kc->ctx, n_scratch, sizeof(double), &bytes, "rnn scratch"));
    DL_TRY(dl_alloc_checked(kc->ctx, bytes, (void **)&buf, "rnn scratch"));
    r.x = buf;
    r.h = r.x + r.I;
    r.c = r.h + r.H;
    r.pre = r.c + r.H;
    r.tmp = r.pre + GH; /* GH + 3H: room for GRU's extra vectors */

    for (int d = 0; d < r.dirs; d++) {
        bool backward = r.reverse_only || d == 1;
        for (int64_t b = 0; b < r.Bn; b++) {
            int64_t L = r.seq ? dl_get_i64(r.seq, b) : r.T;
            for (int64_t j = 0; j < r.H; j++) {
                r.h[j] = r.h0 ? dl_get_f64(r.h0, st_idx(&r, d, b, j)) : 0.0;
                r.c[j] = r.c0 ? dl_get_f64(r.c0, st_idx(&r, d, b, j)) : 0.0;
            }
            for (int64_t s = 0; s < L; s++) {
                int64_t t = backward ? L - 1 - s : s;
                for (int64_t i = 0; i < r.I; i++) r.x[i] = dl_get_f64(r.X, x_idx(&r, t, b, i));
                rnn_step(&r, d);
                if (r.Y)
                    for (int64_t j = 0; j < r.H; j++)
                        dl_set_f64(r.Y, y_idx(&r, t, d, b, j), r.h[j]);
            }
            for (int64_t j = 0; j < r.H; j++) {
                if (r.Yh) dl_set_f64(r.Yh, st_idx(&r, d, b, j), r.h[j]);
                if (r.Yc) dl_set_f64(r.Yc, st_idx(&r, d, b, j), r.c[j]);
            }
        }
    }
    dl_free(buf);
    return DL_OK;
}

static dl_status rnn_ref(dl_kernel *kc) {
    return rnn_ref_common(kc, RNN_SIMPLE);
}
static dl_status gru_ref(dl_kernel *kc) {
    return rnn_ref_common(kc, RNN_GRU);
}
static dl_status lstm_ref(dl_kernel *kc) {
    return rnn_ref_common(kc, RNN_LSTM);
}

const dl_op_def dl_ops_rnn[] = {
    {.name = "RNN",
     .min_in = 3,
     .max_in = 6,
     .min_out = 0,
     .max_out = 2,
     .attrs = rnn_attrs,
     .infer = rnn_infer,
     .ref = rnn_ref},
    {.name = "GRU",
     .min_in = 3,
     .max_in = 6,
     .min_out = 0,
     .max_out = 2,
     .attrs = gru_attrs,
     .infer = gru_infer,
     .ref = gru_ref},
    {.name = "LSTM",
     .min_in = 3,
     .max_in = 8,
     .min_out = 0,
     .max_out = 3,
     .attrs = lstm_attrs,
     .infer = lstm_infer,
     .ref = lstm_ref},
    {.name = NULL},
};
