/* norm.c — op family "norm": BatchNormalization (inference and training mode),
 * LayerNormalization, InstanceNormalization, GroupNormalization, LRN and
 * MeanVarianceNormalization.
 *
 * Reference kernels compute statistics in double through the dtype-generic accessors. */
#include "op-impl.h"

#include <math.h>

static const dl_attr_spec bn_attrs[] = {
    {"epsilon", DL_ATTR_FLOAT},     {"momentum", DL_ATTR_FLOAT}, {"spatial", DL_ATTR_INT},
    {"training_mode", DL_ATTR_INT}, {"is_test", DL_ATTR_INT},    {"consumed_inputs", DL_ATTR_INTS},
    {NULL, DL_ATTR_UNDEFINED},
};

static const dl_attr_spec ln_attrs[] = {
    {"axis", DL_ATTR_INT},
    {"epsilon", DL_ATTR_FLOAT},
    {"stash_type", DL_ATTR_INT},
    {NULL, DL_ATTR_UNDEFINED},
};

static const dl_attr_spec in_attrs[] = {
    {"epsilon", DL_ATTR_FLOAT},
    {NULL, DL_ATTR_UNDEFINED},
};

static const dl_attr_spec gn_attrs[] = {
    {"epsilon", DL_ATTR_FLOAT},
    {"num_groups", DL_ATTR_INT},
    {"stash_type", DL_ATTR_INT},
    {NULL, DL_ATTR_UNDEFINED},
};

static const dl_attr_spec lrn_attrs[] = {
    {"alpha", DL_ATTR_FLOAT}, {"beta", DL_ATTR_FLOAT},   {"bias", DL_ATTR_FLOAT},
    {"size", DL_ATTR_INT},    {NULL, DL_ATTR_UNDEFINED},
};

static const dl_attr_spec mvn_attrs[] = {
    {"axes", DL_ATTR_INTS},
    {NULL, DL_ATTR_UNDEFINED},
};

/* Requires input i (if present) to be 1-D with n elements (n < 0: unknown). */
static dl_status require_vec(dl_infer *ic, int i, int64_t n, const char *what) {
    if (!dl_has_in(ic, i)) return DL_OK;
    DL_TRY(dl_infer_require_float(ic, i));
    const dl_type *t = ic->in[i];
    if (t->rank < 0) return DL_OK;
    if (t->rank != 1)
        return dl_infer_fail(ic, DL_ERR_SHAPE, "%s must be 1-D, got rank %d", what, t->rank);
    if (n >= 0 && t->dims[0] >= 0 && t->dims[0] != n)
        return dl_infer_fail(ic, DL_ERR_SHAPE, "%s has %lld values, expected %lld", what,
                             (long long)t->dims[0], (long long)n);
    return DL_OK;
}

/* Checks that input i is a tensor with n elements at run time. */
static bool vec_ok(const dl_tensor *t, int64_t n) {
    return t && t->numel == n;
}

/* ---- BatchNormalization ---- */

static bool bn_training(const dl_node *n, int opset) {
    if (opset >= 14) return dl_attr_int(n, "training_mode", 0) != 0;
    for (int o = 1; o < n->n_out; o++)
        if (n->out[o]) return true; /* before opset 14 the extra outputs mean training */
    return false;
}

static dl_status bn_infer(dl_infer *ic) {
    DL_TRY(dl_infer_require_float(ic, 0));
    const dl_type *x = ic->in[0];
    if (x->rank >= 0 && x->rank < 2)
        return dl_infer_fail(ic, DL_ERR_SHAPE, "X must have rank >= 2, got %d", x->rank);
    bool spatial = ic->opset >= 9 || dl_attr_int(ic->node, "spatial", 1) != 0;
    int64_t C = x->rank >= 2 ? x->dims[1] : -1;
    static const char *names[4] = {"scale", "B", "mean", "var"};
    for (int i = 1; i <= 4; i++) {
        if (!dl_has_in(ic, i)) return dl_infer_fail(ic, DL_ERR_INVALID, "input %d is missing", i);
        if (spatial) {
            DL_TRY(require_vec(ic, i, C, names[i - 1]));
        } else {
            DL_TRY(dl_infer_require_float(ic, i));
        }
    }
    bool training = bn_training(ic->node, ic->opset);
    if (training && !spatial)
        return dl_infer_fail(ic, DL_ERR_UNSUPPORTED, "training mode with spatial=0");
    DL_TRY(dl_infer_same(ic, 0, 0));
    for (int o = 1; o < ic->n_out && o < 5; o++) {
        int64_t d = C >= 0 ? C : dl_infer_fresh_dim(ic);
        DL_TRY(dl_infer_set(ic, o, ic->in[o <= 2 ? o + 2 : 3]->dtype, 1, &d));
    }
    return DL_OK;
}

static dl_status bn_ref(dl_kernel *kc) {
    const dl_tensor *x = kc->in[0];
    dl_tensor *y = kc->out[0];
    bool spatial = kc->opset >= 9 || dl_attr_int(kc->node, "spatial", 1) != 0;
    bool training = bn_training(kc->node, kc->opset);
    double eps = dl_attr_float(kc->node, "epsilon", 1e-5f);
    double momentum = dl_attr_float(kc->node, "momentum", 0.9f);
    if (x->rank < 2 || !y->data || y->numel != x->numel)
        return dl_kernel_fail(kc, DL_ERR_INTERNAL, "unexpected shapes");
    if (x->numel == 0) return DL_OK;
    int64_t N = x->dims[0], C = x->dims[1], inner = x->numel / (N * C);
    int64_t np = spatial ? C : C * inner; /* parameter count */
    for (int i = 1; i <= 4; i++)
        if (!vec_ok(kc->in[i], np))
            return dl_kernel_fail(kc, DL_ERR_SHAPE, "input %d must have %lld values", i,
                                  (long long)np);
    if (x->numel == 0) return DL_OK;
    const dl_tensor *scale = kc->in[1], *bias = kc->in[2], *mean = kc->in[3], *var = kc->in[4];
    if (!training) {
        for (int64_t i = 0; i < x->numel; i++) {
            int64_t p = spatial ? (i / inner) % C : i % (C * inner);
            double a = dl_get_f64(scale, p) / sqrt(dl_get_f64(var, p) + eps);
            double v = (dl_get_f64(x, i) - dl_get_f64(mean, p)) * a + dl_get_f64(bias, p);
            dl_set_f64(y, i, v);
        }
        return DL_OK;
    }
    /* training: normalize with the batch statistics, update running statistics */
    int64_t cnt = N * inner;
    for (int64_t c = 0; c < C; c++) {
        double s = 0, ss = 0;
        for (int64_t n = 0; n < N; n++)
            for (int64_t k = 0; k < inner; k++) s += dl_get_f64(x, (n * C + c) * inner + k);
        double bm = s / (double)cnt;
        for (int64_t n = 0; n < N; n++)
            for (int64_t k = 0; k < inner; k++) {
                double d = dl_get_f64(x, (n * C + c) * inner + k) - bm;
                ss += d * d;
            }
        double bv = ss / (double)cnt;
        double a = dl_get_f64(scale, c) / sqrt(bv + eps), b = dl_get_f64(bias, c);
        for (int64_t n = 0; n < N; n++)
            for (int64_t k = 0; k < inner; k++) {
                int64_t i = (n * C + c) * inner + k;
                dl_set_f64(y, i, (dl_get_f64(x, i) - bm) * a + b);
            }
        double outs[5] = {0, dl_get_f64(mean, c) * momentum + bm * (1 - momentum),
                          dl_get_f64(var, c) * momentum + bv * (1 - momentum), bm, bv};
        for (int o = 1; o < kc->n_out && o < 5; o++)
            if (kc->node->out[o] && kc->out[o]->data && kc->out[o]->numel == C)
                dl_set_f64(kc->out[o], c, outs[o]);
    }
    return DL_OK;
}

/* ---- LayerNormalization ---- */

static bool stash_dtype(int64_t st, dl_dtype *out) {
    switch (st) {
    case 1:
        *out = DL_F32;
        return true;
    case 10:
        *out = DL_F16;
        return true;
    case 11:
        *out = DL_F64;
        return true;
    case 16:
        *out = DL_BF16;
        return true;
    default:
        return false;
    }
}

/* Input i (if present) must broadcast unidirectionally to x (right-aligned). */
static dl_status require_bcast_to(dl_infer *ic, int i, const dl_type *x) {
    if (!dl_has_in(ic, i)) return DL_OK;
    DL_TRY(dl_infer_require_float(ic, i));
    const dl_type *t = ic->in[i];
    if (t->rank < 0 || x->rank < 0) return DL_OK;
    if (t->rank > x->rank)
        return dl_infer_fail(ic, DL_ERR_SHAPE, "input %d has a higher rank than X", i);
    for (int d = 0; d < t->rank; d++) {
        int64_t td = t->dims[d], xd = x->dims[x->rank - t->rank + d];
        if (td >= 0 && xd >= 0 && td != 1 && td != xd)
            return dl_infer_fail(ic, DL_ERR_SHAPE, "input %d does not broadcast to X", i);
    }
    return DL_OK;
}

static bool bcast_ok(const dl_tensor *t, const dl_tensor *x) {
    if (t->rank > x->rank) return false;
    for (int d = 0; d < t->rank; d++) {
        int64_t td = t->dims[d], xd = x->dims[x->rank - t->rank + d];
        if (td != 1 && td != xd) return false;
    }
    return true;
}

static dl_status ln_infer(dl_infer *ic) {
    DL_TRY(dl_infer_require_float(ic, 0));
    const dl_type *x = ic->in[0];
    DL_TRY(require_bcast_to(ic, 1, x));
    DL_TRY(require_bcast_to(ic, 2, x));
    dl_dtype st;
    if (!stash_dtype(dl_attr_int(ic->node, "stash_type", 1), &st))
        return dl_infer_fail(ic, DL_ERR_INVALID, "unsupported stash_type");
    DL_TRY(dl_infer_same(ic, 0, 0));
    if (x->rank < 0) {
        for (int o = 1; o < ic->n_out; o++) DL_TRY(dl_infer_set(ic, o, st, DL_RANK_UNKNOWN, NULL));
        return DL_OK;
    }
    int axis;
    DL_TRY(dl_infer_axis(ic, dl_attr_int(ic->node, "axis", -1), x->rank, &axis));
    int64_t dims[DL_MAX_RANK];
    for (int d = 0; d < x->rank; d++) dims[d] = d < axis ? x->dims[d] : 1;
    for (int o = 1; o < ic->n_out && o < 3; o++) DL_TRY(dl_infer_set(ic, o, st, x->rank, dims));
    return DL_OK;
}

static dl_status ln_ref(dl_kernel *kc) {
    const dl_tensor *x = kc->in[0];
    const dl_tensor *scale = kc->n_in > 1 ? kc->in[1] : NULL;
    const dl_tensor *bias = kc->n_in > 2 ? kc->in[2] : NULL;
    dl_tensor *y = kc->out[0];
    int64_t axis = dl_attr_int(kc->node, "axis", -1);
    double eps = dl_attr_float(kc->node, "epsilon", 1e-5f);
    if (axis < 0) axis += x->rank;
    if (axis < 0 || axis >= x->rank || !y->data || y->numel != x->numel ||
        (scale && !bcast_ok(scale, x)) || (bias && !bcast_ok(bias, x)))
        return dl_kernel_fail(kc, DL_ERR_SHAPE, "inconsistent shapes");
    if (x->numel == 0) return DL_OK;
    int64_t cols = 1;
    for (int d = (int)axis; d < x->rank; d++) cols *= x->dims[d];
    int64_t rows = cols ? x->numel / cols : 0;
    int64_t ss[DL_MAX_RANK], bs[DL_MAX_RANK], idx[DL_MAX_RANK] = {0};
    if (scale) dl_broadcast_strides(scale, x->rank, x->dims, ss);
    if (bias) dl_broadcast_strides(bias, x->rank, x->dims, bs);
    dl_tensor *mo = kc->n_out > 1 && kc->node->out[1] ? kc->out[1] : NULL;
    dl_tensor *io = kc->n_out > 2 && kc->node->out[2] ? kc->out[2] : NULL;
    if ((mo && (!mo->data || mo->numel != rows)) || (io && (!io->data || io->numel != rows)))
        return dl_kernel_fail(kc, DL_ERR_INTERNAL, "unexpected statistics outputs");
    int64_t i = 0;
    for (int64_t r = 0; r < rows; r++) {
        double s = 0, ss2 = 0;
        for (int64_t c = 0; c < cols; c++) s += dl_get_f64(x, r * cols + c);
        double mean = s / (double)cols;
        for (int64_t c = 0; c < cols; c++) {
            double d = dl_get_f64(x, r * cols + c) - mean;
            ss2 += d * d;
        }
        double inv = 1.0 / sqrt(ss2 / (double)cols + eps);
        if (mo) dl_set_f64(mo, r, mean);
        if (io) dl_set_f64(io, r, inv);
        for (int64_t c = 0; c < cols; c++, i++, dl_index_next(x->rank, x->dims, idx)) {
            double v = (dl_get_f64(x, i) - mean) * inv;
            int64_t so = 0, bo = 0;
            for (int d = 0; d < x->rank; d++) {
                if (scale) so += idx[d] * ss[d];
                if (bias) bo += idx[d] * bs[d];
            }
            if (scale) v *= dl_get_f64(scale, so);
            if (bias) v += dl_get_f64(bias, bo);
            dl_set_f64(y, i, v);
        }
    }
    return DL_OK;
}

/* ---- InstanceNormalization and GroupNormalization ---- */

/* Normalizes x viewed as [N, G, cnt] (G groups of cnt elements; channel c = group-local
 * position / inner). Per-channel (per_group false) or per-group scale and bias. */
static void group_norm(const dl_tensor *x, dl_tensor *y, int64_t N, int64_t C, int64_t G,
                       int64_t inner, const dl_tensor *scale, const dl_tensor *bias, bool per_group,
                       double eps) {
    int64_t cpg = C / G, cnt = cpg * inner;
    for (int64_t n = 0; n < N; n++)
        for (int64_t g = 0; g < G; g++) {
            int64_t base = (n * C + g * cpg) * inner;
            double s = 0, ss = 0;
            for (int64_t k = 0; k < cnt; k++) s += dl_get_f64(x, base + k);
            double mean = cnt ? s / (double)cnt : 0;
            for (int64_t k = 0; k < cnt; k++) {
                double d = dl_get_f64(x, base + k) - mean;
                ss += d * d;
            }
            double inv = 1.0 / sqrt((cnt ? ss / (double)cnt : 0) + eps);
            for (int64_t k = 0; k < cnt; k++) {
                int64_t p = per_group ? g : g * cpg + k / inner;
                double v = (dl_get_f64(x, base + k) - mean) * inv;
                dl_set_f64(y, base + k, v * dl_get_f64(scale, p) + dl_get_f64(bias, p));
            }
        }
}

static dl_status instnorm_infer(dl_infer *ic) {
    DL_TRY(dl_infer_require_float(ic, 0));
    const dl_type *x = ic->in[0];
    if (x->rank >= 0 && x->rank < 2)
        return dl_infer_fail(ic, DL_ERR_SHAPE, "X must have rank >= 2, got %d", x->rank);
    int64_t C = x->rank >= 2 ? x->dims[1] : -1;
    DL_TRY(require_vec(ic, 1, C, "scale"));
    DL_TRY(require_vec(ic, 2, C, "B"));
    return dl_infer_same(ic, 0, 0);
}

static dl_status instnorm_ref(dl_kernel *kc) {
    const dl_tensor *x = kc->in[0];
    dl_tensor *y = kc->out[0];
    if (x->rank < 2 || !y->data || y->numel != x->numel)
        return dl_kernel_fail(kc, DL_ERR_INTERNAL, "unexpected shapes");
    int64_t N = x->dims[0], C = x->dims[1];
    if (!vec_ok(kc->in[1], C) || !vec_ok(kc->in[2], C))
        return dl_kernel_fail(kc, DL_ERR_SHAPE, "scale and B must have C values");
    if (x->numel == 0) return DL_OK;
    int64_t inner = x->numel / (N * C);
    group_norm(x, y, N, C, C, inner, kc->in[1], kc->in[2], false,
               dl_attr_float(kc->node, "epsilon", 1e-5f));
    return DL_OK;
}

static dl_status groupnorm_infer(dl_infer *ic) {
    DL_TRY(dl_infer_require_float(ic, 0));
    const dl_type *x = ic->in[0];
    if (x->rank >= 0 && x->rank < 2)
        return dl_infer_fail(ic, DL_ERR_SHAPE, "X must have rank >= 2, got %d", x->rank);
    int64_t G = dl_attr_int(ic->node, "num_groups", -1);
    if (G < 1) return dl_infer_fail(ic, DL_ERR_INVALID, "num_groups must be >= 1");
    int64_t C = x->rank >= 2 ? x->dims[1] : -1;
    if (C >= 0 && C % G != 0)
        return dl_infer_fail(ic, DL_ERR_SHAPE, "channels %lld not divisible by num_groups %lld",
                             (long long)C, (long long)G);
    for (int i = 1; i <= 2; i++) {
        if (!dl_has_in(ic, i)) return dl_infer_fail(ic, DL_ERR_INVALID, "input %d is missing", i);
        DL_TRY(require_vec(ic, i, -1, i == 1 ? "scale" : "bias"));
        int64_t n = ic->in[i]->rank == 1 ? ic->in[i]->dims[0] : -1;
        if (n >= 0 && n != G && C >= 0 && n != C)
            return dl_infer_fail(ic, DL_ERR_SHAPE, "input %d must have num_groups or C values", i);
    }
    return dl_infer_same(ic, 0, 0);
}

static dl_status groupnorm_ref(dl_kernel *kc) {
    const dl_tensor *x = kc->in[0];
    dl_tensor *y = kc->out[0];
    int64_t G = dl_attr_int(kc->node, "num_groups", -1);
    if (x->rank < 2 || !y->data || y->numel != x->numel || G < 1)
        return dl_kernel_fail(kc, DL_ERR_INTERNAL, "unexpected shapes");
    int64_t N = x->dims[0], C = x->dims[1];
    if (C % G != 0) return dl_kernel_fail(kc, DL_ERR_SHAPE, "C not divisible by num_groups");
    bool per_group = vec_ok(kc->in[1], G) && vec_ok(kc->in[2], G);
    if (!per_group && !(vec_ok(kc->in[1], C) && vec_ok(kc->in[2], C)))
        return dl_kernel_fail(kc, DL_ERR_SHAPE, "scale and bias must have num_groups or C values");
    if (x->numel == 0) return DL_OK;
    int64_t inner = x->numel / (N * C);
    group_norm(x, y, N, C, G, inner, kc->in[1], kc->in[2], per_group,
               dl_attr_float(kc->node, "epsilon", 1e-5f));
    return DL_OK;
}

/* ---- LRN ---- */

static dl_status lrn_infer(dl_infer *ic) {
    DL_TRY(dl_infer_require_float(ic, 0));
    const dl_type *x = ic->in[0];
    if (x->rank >= 0 && x->rank < 2)
        return dl_infer_fail(ic, DL_ERR_SHAPE, "X must have rank >= 2, got %d", x->rank);
    int64_t size = dl_attr_int(ic->node, "size", -1);
    if (size < 1 || size > ((int64_t)1 << 30))
        return dl_infer_fail(ic, DL_ERR_INVALID, "attribute size must be >= 1");
    return dl_infer_same(ic, 0, 0);
}

static dl_status lrn_ref(dl_kernel *kc) {
    const dl_tensor *x = kc->in[0];
    dl_tensor *y = kc->out[0];
    if (x->rank < 2 || !y->data || y->numel != x->numel)
        return dl_kernel_fail(kc, DL_ERR_INTERNAL, "unexpected shapes");
    double alpha = dl_attr_float(kc->node, "alpha", 1e-4f);
    double beta = dl_attr_float(kc->node, "beta", 0.75f);
    double bias = dl_attr_float(kc->node, "bias", 1.0f);
    int64_t size = dl_attr_int(kc->node, "size", 1);
    int64_t C = x->dims[1], lo = (size - 1) / 2, hi = size - 1 - lo;
    if (x->numel == 0) return DL_OK;
    int64_t inner = x->numel / (x->dims[0] * C);
    for (int64_t i = 0; i < x->numel; i++) {
        int64_t c = (i / inner) % C, base = i - c * inner;
        int64_t c0 = c - lo < 0 ? 0 : c - lo, c1 = c + hi >= C ? C - 1 : c + hi;
        double ss = 0;
        for (int64_t k = c0; k <= c1; k++) {
            double v = dl_get_f64(x, base + k * inner);
            ss += v * v;
        }
        dl_set_f64(y, i, dl_get_f64(x, i) / pow(bias + alpha / (double)size * ss, beta));
    }
    return DL_OK;
}

/* ---- MeanVarianceNormalization ---- */

/* Reduction mask from the axes attribute (default {0, 2, 3}). Error message or NULL. */
static const char *mvn_axes(const dl_node *n, int rank, bool *mask) {
    static const int64_t def[3] = {0, 2, 3};
    const int64_t *axes = def;
    int cnt = dl_attr_ints(n, "axes", &axes);
    if (cnt < 0) {
        axes = def;
        cnt = 3;
    }
    for (int d = 0; d < rank; d++) mask[d] = false;
    for (int i = 0; i < cnt; i++) {
        int64_t a = axes[i] < 0 ? axes[i] + rank : axes[i];
        if (a < 0 || a >= rank) return "axes value out of range";
        mask[a] = true;
    }
    return NULL;
}

static dl_status mvn_infer(dl_infer *ic) {
    DL_TRY(dl_infer_require_float(ic, 0));
    const dl_type *x = ic->in[0];
    if (x->rank >= 0) {
        bool mask[DL_MAX_RANK];
        const char *e = mvn_axes(ic->node, x->rank, mask);
        if (e) return dl_infer_fail(ic, DL_ERR_INVALID, "%s", e);
    }
    return dl_infer_same(ic, 0, 0);
}

static dl_status mvn_ref(dl_kernel *kc) {
    const dl_tensor *x = kc->in[0];
    dl_tensor *y = kc->out[0];
    bool mask[DL_MAX_RANK];
    const char *e = mvn_axes(kc->node, x->rank, mask);
    if (e) return dl_kernel_fail(kc, DL_ERR_INVALID, "%s", e);
    if (!y->data || y->numel != x->numel)
        return dl_kernel_fail(kc, DL_ERR_INTERNAL, "unexpected shapes");
    if (x->numel == 0) return DL_OK;
    /* statistics indexed by the kept dims */
    int64_t kdims[DL_MAX_RANK], kstr[DL_MAX_RANK], nstat = 1, idx[DL_MAX_RANK] = {0};
    for (int d = 0; d < x->rank; d++) {
        kdims[d] = mask[d] ? 1 : x->dims[d];
        nstat *= kdims[d];
    }
    dl_strides(x->rank, kdims, kstr);
    int64_t per = x->numel / nstat;
    double *sum = dl_calloc((size_t)nstat, 2 * sizeof(double));
    if (!sum) return dl_kernel_fail(kc, DL_ERR_NOMEM, "out of memory");
    double *sq = sum + nstat;
    for (int pass = 0; pass < 3; pass++) {
        memset(idx, 0, sizeof idx);
        for (int64_t i = 0; i < x->numel; i++, dl_index_next(x->rank, x->dims, idx)) {
            int64_t s = 0;
            for (int d = 0; d < x->rank; d++) s += mask[d] ? 0 : idx[d] * kstr[d];
            double v = dl_get_f64(x, i);
            if (pass == 0)
                sum[s] += v;
            else if (pass == 1)
                sq[s] += (v - sum[s]) * (v - sum[s]);
            else
                dl_set_f64(y, i, (v - sum[s]) / (sqrt(sq[s]) + 1e-9));
        }
        for (int64_t s = 0; s < nstat; s++) {
            if (pass == 0)
                sum[s] /= (double)per;
            else if (pass == 1)
                sq[s] /= (double)per;
        }
    }
    dl_free(sum);
    return DL_OK;
}

const dl_op_def dl_ops_norm[] = {
    {.name = "BatchNormalization",
     .min_in = 5,
     .max_in = 5,
     .min_out = 1,
     .max_out = 5,
     .attrs = bn_attrs,
     .infer = bn_infer,
     .ref = bn_ref},
    {.name = "LayerNormalization",
     .min_in = 2,
     .max_in = 3,
     .min_out = 1,
     .max_out = 3,
     .attrs = ln_attrs,
     .infer = ln_infer,
     .ref = ln_ref},
    {.name = "InstanceNormalization",
     .min_in = 3,
     .max_in = 3,
     .min_out = 1,
     .max_out = 1,
     .attrs = in_attrs,
     .infer = instnorm_infer,
     .ref = instnorm_ref},
    {.name = "GroupNormalization",
     .min_in = 3,
     .max_in = 3,
     .min_out = 1,
     .max_out = 1,
     .attrs = gn_attrs,
     .infer = groupnorm_infer,
     .ref = groupnorm_ref},
    {.name = "LRN",
     .min_in = 1,
     .max_in = 1,
     .min_out = 1,
     .max_out = 1,
     .attrs = lrn_attrs,
     .infer = lrn_infer,
     .ref = lrn_ref},
    {.name = "MeanVarianceNormalization",
     .min_in = 1,
     .max_in = 1,
     .min_out = 1,
     .max_out = 1,
     .attrs = mvn_attrs,
     .infer = mvn_infer,
     .ref = mvn_ref},
    {.name = NULL},
};
