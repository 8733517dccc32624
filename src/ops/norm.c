/* norm.c — op family "norm": BatchNormalization (inference and training mode),
 * LayerNormalization, InstanceNormalization, GroupNormalization, LRN and
 * MeanVarianceNormalization.
 *
 * Reference kernels compute statistics in double through the dtype-generic accessors. */
#include "../train/grad.h"
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

/* ---- gradient rules (grad.h) ----
 * Built from ReduceMean/ReduceSum and elementwise ops, which the compiler fuses. Statistics are
 * recomputed in X's dtype (LayerNormalization reuses its Mean/InvStdDev outputs when they have
 * it). With xhat = (x - mean) * inv over the normalized axes and g = dL/dxhat:
 *   dx = inv * (g - mean(g) - xhat * mean(g * xhat)). */

static dl_value *cast_to(dl_grad_ctx *gc, dl_value *v, dl_dtype dt) {
    if (!v || v->type.dtype == dt) return v;
    char to[32];
    snprintf(to, sizeof to, "to=%d", (int)dl_dtype_to_onnx(dt));
    return dg_op1(gc, "Cast", v, to);
}

/* Axes a..b-1 into axes[] (axis 0 first when with0); returns their count. */
static int axes_list(int a, int b, bool with0, int64_t *axes) {
    int n = 0;
    if (with0) axes[n++] = 0;
    for (int d = a; d < b; d++) axes[n++] = d;
    return n;
}

static dl_value *mean_over(dl_grad_ctx *gc, dl_value *v, int n, const int64_t *axes) {
    char at[160] = "keepdims=1;axes=[";
    for (int i = 0; i < n; i++)
        snprintf(at + strlen(at), sizeof at - strlen(at), "%s%lld", i ? "," : "", (long long)axes[i]);
    strcat(at, "]");
    return dg_op1(gc, "ReduceMean", v, at);
}

static dl_value *sum_over(dl_grad_ctx *gc, dl_value *v, int n, const int64_t *axes) {
    return dg_op2(gc, "ReduceSum", v, dg_ints(gc, n, axes), "keepdims=0");
}

/* x - mean and 1 / sqrt(var + eps) over axes (keepdims). */
static void norm_stats(dl_grad_ctx *gc, dl_value *x, int n, const int64_t *axes, double eps,
                       dl_value **xc, dl_value **inv) {
    dl_dtype dt = x->type.dtype;
    *xc = dg_op2(gc, "Sub", x, mean_over(gc, x, n, axes), NULL);
    dl_value *var = mean_over(gc, dg_op2(gc, "Mul", *xc, *xc, NULL), n, axes);
    dl_value *sd = dg_op1(gc, "Sqrt", dg_op2(gc, "Add", var, dg_scalar(gc, eps, dt), NULL), NULL);
    *inv = dg_op2(gc, "Div", dg_scalar(gc, 1.0, dt), sd, NULL);
}

/* inv * (g - mean(g) - xhat * mean(g * xhat)) */
static dl_value *norm_backward(dl_grad_ctx *gc, dl_value *g, dl_value *xhat, dl_value *inv, int n,
                               const int64_t *axes) {
    dl_value *mg = mean_over(gc, g, n, axes);
    dl_value *mgx = mean_over(gc, dg_op2(gc, "Mul", g, xhat, NULL), n, axes);
    dl_value *t = dg_op2(gc, "Sub", dg_op2(gc, "Sub", g, mg, NULL),
                         dg_op2(gc, "Mul", xhat, mgx, NULL), NULL);
    return dg_op2(gc, "Mul", t, inv, NULL);
}

/* A per-channel [C] vector shaped [C, 1, ...] to broadcast against a rank-r [N, C, ...]. */
static dl_value *per_channel(dl_grad_ctx *gc, dl_value *v, int r) {
    if (r <= 2) return v;
    int64_t axes[DL_MAX_RANK];
    int n = axes_list(1, r - 1, false, axes);
    return dg_op2(gc, "Unsqueeze", v, dg_ints(gc, n, axes), NULL);
}

/* 1 / (the element count of x per element of stat), static when known. */
static dl_value *inv_count(dl_grad_ctx *gc, dl_value *x, dl_value *stat, int from) {
    dl_dtype dt = x->type.dtype;
    int64_t c = 1;
    bool known = true;
    for (int d = from; d < x->type.rank; d++) {
        if (x->type.dims[d] < 0) known = false;
        c *= known ? x->type.dims[d] : 1;
    }
    if (known) return dg_scalar(gc, 1.0 / (double)(c ? c : 1), dt);
    return dg_op2(gc, "Div", cast_to(gc, dg_op1(gc, "Size", stat, NULL), dt),
                  cast_to(gc, dg_op1(gc, "Size", x, NULL), dt), NULL);
}

/* Y = xhat * scale + bias over axes [axis, rank); the optional Mean and InvStdDev outputs
 * contribute dMean / H and -dInv * inv³ * (x - mean) / H (H: the normalized count). */
static dl_status ln_grad(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy, dl_value **dx) {
    dl_value *x = n->in[0], *scale = n->in[1], *bias = n->n_in > 2 ? n->in[2] : NULL;
    int rank = x->type.rank;
    dl_dtype dt = x->type.dtype;
    if (rank < 1) return dg_refuse(gc, n, "X needs a known rank");
    int64_t axis = dl_attr_int(n, "axis", -1);
    if (axis < 0) axis += rank;
    if (axis < 0 || axis >= rank) return dg_refuse(gc, n, "axis out of range");
    double eps = dl_attr_float(n, "epsilon", 1e-5f);
    int64_t axes[DL_MAX_RANK];
    int na = axes_list((int)axis, rank, false, axes);
    dl_value *mo = n->n_out > 1 ? n->out[1] : NULL, *io = n->n_out > 2 ? n->out[2] : NULL;
    dl_value *xc, *inv;
    if (mo && io && mo->type.dtype == dt && io->type.dtype == dt) {
        xc = dg_op2(gc, "Sub", x, mo, NULL);
        inv = io;
    } else {
        norm_stats(gc, x, na, axes, eps, &xc, &inv);
    }
    dl_value *xhat = dg_op2(gc, "Mul", xc, inv, NULL);
    dl_value *dxv = NULL;
    if (dy[0] && dg_needs(gc, n, 0)) {
        dl_value *g = scale ? dg_op2(gc, "Mul", dy[0], scale, NULL) : dy[0];
        dxv = norm_backward(gc, g, xhat, inv, na, axes);
    }
    if (dg_needs(gc, n, 0) && ((n->n_out > 1 && dy[1]) || (n->n_out > 2 && dy[2]))) {
        dl_value *ic = inv_count(gc, x, inv, (int)axis), *extra = NULL;
        if (n->n_out > 1 && dy[1])
            extra = dg_op2(gc, "Mul", cast_to(gc, dy[1], dt), ic, NULL);
        if (n->n_out > 2 && dy[2]) {
            dl_value *i3 = dg_op2(gc, "Mul", dg_op2(gc, "Mul", inv, inv, NULL), inv, NULL);
            dl_value *t = dg_op2(gc, "Mul", dg_op2(gc, "Mul", cast_to(gc, dy[2], dt), i3, NULL),
                                 dg_op2(gc, "Mul", xc, ic, NULL), NULL);
            t = dg_op1(gc, "Neg", t, NULL);
            extra = extra ? dg_op2(gc, "Add", extra, t, NULL) : t;
        }
        /* extra has the statistics' shape when only dMean came: broadcast it to X's */
        dxv = dxv ? dg_op2(gc, "Add", dxv, extra, NULL) : dg_expand_like(gc, extra, x);
    }
    if (dg_needs(gc, n, 0)) dx[0] = dxv;
    if (dy[0] && dg_needs(gc, n, 1))
        dx[1] = dg_sum_to(gc, dg_op2(gc, "Mul", dy[0], xhat, NULL), scale);
    if (dy[0] && dg_needs(gc, n, 2)) dx[2] = dg_sum_to(gc, dy[0], bias);
    return dg_status(gc);
}

/* Inference form: y = (x - mean) * a + B with a = scale / sqrt(var + eps), per channel. */
static dl_status bn_grad(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy, dl_value **dx) {
    if (bn_training(n, n->opset))
        return dg_refuse(gc, n,
                         "training mode (batch statistics) is not differentiable here; use the "
                         "inference form (training_mode=0) with running statistics");
    if (n->opset < 9 && dl_attr_int(n, "spatial", 1) == 0)
        return dg_refuse(gc, n, "spatial=0 is not supported");
    dl_value *x = n->in[0];
    int rank = x->type.rank;
    dl_dtype dt = x->type.dtype;
    if (rank < 2) return dg_refuse(gc, n, "X needs a known rank >= 2");
    double eps = dl_attr_float(n, "epsilon", 1e-5f);
    dl_value *p[5] = {NULL}; /* scale, B, mean, var in X's dtype */
    for (int i = 1; i <= 4; i++) p[i] = cast_to(gc, n->in[i], dt);
    dl_value *inv = dg_op2(gc, "Div", dg_scalar(gc, 1.0, dt),
                           dg_op1(gc, "Sqrt", dg_op2(gc, "Add", p[4], dg_scalar(gc, eps, dt), NULL),
                                  NULL),
                           NULL); /* [C] */
    dl_value *a = dg_op2(gc, "Mul", p[1], inv, NULL);
    int64_t red[DL_MAX_RANK];
    int nr = axes_list(2, rank, true, red);
    if (dg_needs(gc, n, 0)) dx[0] = dg_op2(gc, "Mul", dy[0], per_channel(gc, a, rank), NULL);
    dl_value *xc = NULL, *sdy = NULL, *sdyxc = NULL;
    if (dg_needs(gc, n, 1) || dg_needs(gc, n, 4)) {
        xc = dg_op2(gc, "Sub", x, per_channel(gc, p[3], rank), NULL);
        sdyxc = sum_over(gc, dg_op2(gc, "Mul", dy[0], xc, NULL), nr, red); /* [C] */
    }
    if (dg_needs(gc, n, 2) || dg_needs(gc, n, 3)) sdy = sum_over(gc, dy[0], nr, red);
    if (dg_needs(gc, n, 1))
        dx[1] = cast_to(gc, dg_op2(gc, "Mul", sdyxc, inv, NULL), n->in[1]->type.dtype);
    if (dg_needs(gc, n, 2)) dx[2] = cast_to(gc, sdy, n->in[2]->type.dtype);
    if (dg_needs(gc, n, 3))
        dx[3] = cast_to(gc, dg_op1(gc, "Neg", dg_op2(gc, "Mul", sdy, a, NULL), NULL),
                        n->in[3]->type.dtype);
    if (dg_needs(gc, n, 4)) { /* d/dvar = sum(dy * xc) * scale * -inv³ / 2 */
        dl_value *i3 = dg_op2(gc, "Mul", dg_op2(gc, "Mul", inv, inv, NULL), inv, NULL);
        dl_value *t = dg_op2(gc, "Mul", dg_op2(gc, "Mul", sdyxc, p[1], NULL), i3, NULL);
        dx[4] = cast_to(gc, dg_op2(gc, "Mul", t, dg_scalar(gc, -0.5, dt), NULL),
                        n->in[4]->type.dtype);
    }
    return dg_status(gc);
}

/* Shared by InstanceNormalization (groups = channels) and GroupNormalization: x viewed as
 * [N, G, rest] normalized over rest; scale and bias per channel ([C]) or per group ([G]). */
static dl_status group_norm_grad(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy,
                                 dl_value **dx, int64_t G, bool per_group) {
    dl_value *x = n->in[0], *scale = n->in[1];
    int rank = x->type.rank;
    double eps = dl_attr_float(n, "epsilon", 1e-5f);
    int64_t gshape[3] = {0, G, -1}, stat_axis = 2, red_g[2] = {0, 2}, red[DL_MAX_RANK];
    int nr = axes_list(2, rank, true, red);
    dl_value *xg = dg_op2(gc, "Reshape", x, dg_ints(gc, 3, gshape), NULL);
    dl_value *xc, *inv;
    norm_stats(gc, xg, 1, &stat_axis, eps, &xc, &inv);
    dl_value *xhat_g = dg_op2(gc, "Mul", xc, inv, NULL); /* [N, G, rest] */
    dl_value *dyg = dg_op2(gc, "Reshape", dy[0], dg_ints(gc, 3, gshape), NULL);
    if (dg_needs(gc, n, 0)) {
        dl_value *gg;
        if (per_group) {
            int64_t gs[2] = {G, 1};
            gg = dg_op2(gc, "Mul", dyg, dg_op2(gc, "Reshape", scale, dg_ints(gc, 2, gs), NULL),
                        NULL);
        } else {
            dl_value *g = dg_op2(gc, "Mul", dy[0], per_channel(gc, scale, rank), NULL);
            gg = dg_op2(gc, "Reshape", g, dg_ints(gc, 3, gshape), NULL);
        }
        dx[0] = dg_reshape_like(gc, norm_backward(gc, gg, xhat_g, inv, 1, &stat_axis), x);
    }
    if (per_group) {
        if (dg_needs(gc, n, 1))
            dx[1] = sum_over(gc, dg_op2(gc, "Mul", dyg, xhat_g, NULL), 2, red_g);
        if (dg_needs(gc, n, 2)) dx[2] = sum_over(gc, dyg, 2, red_g);
    } else {
        if (dg_needs(gc, n, 1)) {
            dl_value *xhat = dg_reshape_like(gc, xhat_g, x);
            dx[1] = sum_over(gc, dg_op2(gc, "Mul", dy[0], xhat, NULL), nr, red);
        }
        if (dg_needs(gc, n, 2)) dx[2] = sum_over(gc, dy[0], nr, red);
    }
    return dg_status(gc);
}

static dl_status instnorm_grad(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy,
                               dl_value **dx) {
    const dl_type *xt = &n->in[0]->type;
    if (xt->rank < 2 || xt->dims[1] < 0)
        return dg_refuse(gc, n, "X needs a known rank and channel count");
    return group_norm_grad(gc, n, dy, dx, xt->dims[1], false);
}

/* Scale and bias have num_groups values (opset 18) or C (opset 21): the same when G == C. */
static dl_status groupnorm_grad(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy,
                                dl_value **dx) {
    const dl_type *xt = &n->in[0]->type, *st = &n->in[1]->type;
    int64_t G = dl_attr_int(n, "num_groups", -1);
    if (xt->rank < 2 || xt->dims[1] < 0 || st->rank != 1 || st->dims[0] < 0)
        return dg_refuse(gc, n, "X's rank and channels and the scale's size must be known");
    return group_norm_grad(gc, n, dy, dx, G, st->dims[0] == G);
}

const dl_op_def dl_ops_norm[] = {
    {.name = "BatchNormalization",
     .min_in = 5,
     .max_in = 5,
     .min_out = 1,
     .max_out = 5,
     .attrs = bn_attrs,
     .infer = bn_infer,
     .ref = bn_ref,
     .grad = bn_grad},
    {.name = "LayerNormalization",
     .min_in = 2,
     .max_in = 3,
     .min_out = 1,
     .max_out = 3,
     .attrs = ln_attrs,
     .infer = ln_infer,
     .ref = ln_ref,
     .grad = ln_grad},
    {.name = "InstanceNormalization",
     .min_in = 3,
     .max_in = 3,
     .min_out = 1,
     .max_out = 1,
     .attrs = in_attrs,
     .infer = instnorm_infer,
     .ref = instnorm_ref,
     .grad = instnorm_grad},
    {.name = "GroupNormalization",
     .min_in = 3,
     .max_in = 3,
     .min_out = 1,
     .max_out = 1,
     .attrs = gn_attrs,
     .infer = groupnorm_infer,
     .ref = groupnorm_ref,
     .grad = groupnorm_grad},
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
