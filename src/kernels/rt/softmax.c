/* softmax.c — dlrt_softmax (Softmax and LogSoftmax over the middle axis of [outer, n, inner])
 * and dlrt_layernorm (LayerNormalization over the last n elements of each row), with the
 * semantics of the reference interpreter (src/ops/softmax.c, src/ops/norm.c).
 *
 * Softmax subtracts the slice maximum. NaN and -inf need no test: a NaN reaches the sum and makes
 * every output NaN, and an all -inf slice gives -inf - -inf = NaN, both as in the reference. Only
 * a +inf maximum takes a separate path (the +inf entries share the mass). A row's maximum and
 * sum of exponentials are dlrt_row_max and dlrt_exp_sum (dlrt-impl.h), shared with fused
 * attention. The exponential is dlrt_exp_neg: its argument is never positive here, it
 * vectorizes without a vector math library, and a masked score (-FLT_MAX, -1e4) costs what any
 * other does, where glibc's vector expf drops to scalar code for a whole vector (a causal
 * [8,4,128,128] softmax 1.34 -> 0.125 ms, an unmasked one 0.21 -> 0.125). Results under FLT_MIN
 * are 0, as in fused attention. */
#include "dlrt-impl.h"

#define DLRT_SM_CHUNK 64 /* inner positions handled together when inner > 1 */

/* The slice x[j * stride], j < n, whose maximum is +inf: NaN everywhere if it holds a NaN,
 * else the +inf entries share probability 1. */
static void dlrt_softmax_inf(int64_t n, const float *x, int64_t stride, float *y, int log) {
    int64_t cnt = 0, nan = 0;
    for (int64_t j = 0; j < n; j++) {
        float v = x[j * stride];
        cnt += v == INFINITY;
        nan += v != v;
    }
    const float share = 1.0f / (float)cnt;
    for (int64_t j = 0; j < n; j++) {
        float pr = nan ? NAN : x[j * stride] == INFINITY ? share : 0.0f;
        y[j * stride] = log ? logf(pr) : pr;
    }
}

/* One slice of stride `stride`, plainly; for slices of the chunked path with a +inf maximum. */
static void dlrt_softmax_slice(int64_t n, const float *x, int64_t stride, float *y, int log) {
    float m = -INFINITY, s = 0.0f;
    for (int64_t j = 0; j < n; j++) m = x[j * stride] > m ? x[j * stride] : m;
    if (m == INFINITY) {
        dlrt_softmax_inf(n, x, stride, y, log);
        return;
    }
    for (int64_t j = 0; j < n; j++) s += dlrt_exp_neg(x[j * stride] - m);
    for (int64_t j = 0; j < n; j++) {
        float v = x[j * stride] - m;
        y[j * stride] = log ? v - logf(s) : dlrt_exp_neg(v) / s;
    }
}

/* One contiguous slice (inner == 1). */
static void dlrt_softmax_row(int64_t n, const float *x, float *y, int log) {
    const float m = dlrt_row_max(n, x);
    if (m == INFINITY) {
        dlrt_softmax_inf(n, x, 1, y, log);
        return;
    }
    /* LogSoftmax needs x again after the sum, so only Softmax keeps the exponentials in y (y
     * may be x) */
    const float s = dlrt_exp_sum(n, x, m, log ? NULL : y);
    if (log) {
        const float ls = logf(s);
        for (int64_t j = 0; j < n; j++) y[j] = (x[j] - m) - ls;
    } else {
        const float inv = 1.0f / s;
        for (int64_t j = 0; j < n; j++) y[j] *= inv;
    }
}

/* cn <= CHUNK adjacent slices of stride `inner` starting at x / y (inner > 1): every step of
 * the loops over j touches cn contiguous floats. */
static void dlrt_softmax_cols(int64_t n, int64_t inner, int64_t cn, const float *x, float *y,
                              int log) {
    float m[DLRT_SM_CHUNK], s[DLRT_SM_CHUNK];
    int special = 0;
    for (int64_t i = 0; i < cn; i++) m[i] = -INFINITY, s[i] = 0.0f;
    for (int64_t j = 0; j < n; j++) {
        const float *xr = x + j * inner;
        for (int64_t i = 0; i < cn; i++) m[i] = xr[i] > m[i] ? xr[i] : m[i];
    }
    for (int64_t i = 0; i < cn; i++) special |= m[i] == INFINITY;
    if (special) { /* rare: one slice at a time */
        for (int64_t i = 0; i < cn; i++) dlrt_softmax_slice(n, x + i, inner, y + i, log);
        return;
    }
    for (int64_t j = 0; j < n; j++) {
        const float *xr = x + j * inner;
        float *yr = y + j * inner;
        if (log)
            for (int64_t i = 0; i < cn; i++) s[i] += dlrt_exp_neg(xr[i] - m[i]);
        else
            for (int64_t i = 0; i < cn; i++) {
                float e = dlrt_exp_neg(xr[i] - m[i]);
                yr[i] = e;
                s[i] += e;
            }
    }
    if (log) {
        for (int64_t i = 0; i < cn; i++) s[i] = logf(s[i]);
        for (int64_t j = 0; j < n; j++) {
            const float *xr = x + j * inner;
            float *yr = y + j * inner;
            for (int64_t i = 0; i < cn; i++) yr[i] = (xr[i] - m[i]) - s[i];
        }
    } else {
        for (int64_t i = 0; i < cn; i++) s[i] = 1.0f / s[i];
        for (int64_t j = 0; j < n; j++) {
            float *yr = y + j * inner;
            for (int64_t i = 0; i < cn; i++) yr[i] *= s[i];
        }
    }
}

typedef struct dlrt_sm_job {
    const float *x;
    float *y;
    int64_t n, inner, chunks;
    int log;
} dlrt_sm_job;

static void dlrt_softmax_rows(void *ctx, int64_t lo, int64_t hi) {
    const dlrt_sm_job *j = ctx;
    const int64_t n = j->n;
    for (int64_t o = lo; o < hi; o++) dlrt_softmax_row(n, j->x + o * n, j->y + o * n, j->log);
}

/* Units [lo, hi): DLRT_SM_CHUNK columns of one outer index. */
static void dlrt_softmax_chunks(void *ctx, int64_t lo, int64_t hi) {
    const dlrt_sm_job *j = ctx;
    const int64_t n = j->n, inner = j->inner, chunks = j->chunks;
    for (int64_t t = lo; t < hi; t++) {
        int64_t o = t / chunks, i0 = (t % chunks) * DLRT_SM_CHUNK;
        int64_t cn = DLRT_MIN((int64_t)DLRT_SM_CHUNK, inner - i0);
        int64_t off = o * n * inner + i0;
        dlrt_softmax_cols(n, inner, cn, j->x + off, j->y + off, j->log);
    }
}

void dlrt_softmax(int64_t outer, int64_t n, int64_t inner, const float *x, float *y, int log) {
    if (outer <= 0 || n <= 0 || inner <= 0) return;
    const int par = 16.0 * (double)outer * (double)n * (double)inner >= DLRT_PAR_MIN;
    const int64_t chunks = (inner + DLRT_SM_CHUNK - 1) / DLRT_SM_CHUNK;
    dlrt_sm_job job = {x, y, n, inner, chunks, log};
    if (inner == 1)
        dlrt_parallel_for(outer, par, dlrt_softmax_rows, &job);
    else
        dlrt_parallel_for(outer * chunks, par, dlrt_softmax_chunks, &job);
}

/* ---- LayerNormalization ---- */

#define DLRT_LN_LANES 8

/* Sum of (x[j] - c)^2 (sq) or of x[j] - c (!sq) over j < n, in double. */
static double dlrt_ln_sum(const float *x, int64_t n, double c, int sq) {
    double l[DLRT_LN_LANES] = {0};
    int64_t j = 0;
    if (sq)
        for (; j + DLRT_LN_LANES <= n; j += DLRT_LN_LANES)
            for (int k = 0; k < DLRT_LN_LANES; k++) {
                double d = (double)x[j + k] - c;
                l[k] += d * d;
            }
    else
        for (; j + DLRT_LN_LANES <= n; j += DLRT_LN_LANES)
            for (int k = 0; k < DLRT_LN_LANES; k++) l[k] += (double)x[j + k] - c;
    double s = 0.0;
    for (; j < n; j++) {
        double d = (double)x[j] - c;
        s += sq ? d * d : d;
    }
    for (int k = 0; k < DLRT_LN_LANES; k++) s += l[k];
    return s;
}

typedef struct dlrt_ln_job {
    const float *x, *scale, *bias;
    float *y, *mean, *inv_std;
    int64_t n;
    float eps;
} dlrt_ln_job;

static void dlrt_layernorm_rows(void *ctx, int64_t lo, int64_t hi) {
    const dlrt_ln_job *jb = ctx;
    const float *x = jb->x, *scale = jb->scale, *bias = jb->bias;
    float *y = jb->y, *mean = jb->mean, *inv_std = jb->inv_std;
    const int64_t n = jb->n;
    const float eps = jb->eps;
    for (int64_t r = lo; r < hi; r++) {
        const float *xr = x + r * n;
        float *yr = y + r * n;
        const double mu = dlrt_ln_sum(xr, n, 0.0, 0) / (double)n;
        const double var = dlrt_ln_sum(xr, n, mu, 1) / (double)n;
        const double inv = 1.0 / sqrt(var + (double)eps);
        if (mean) mean[r] = (float)mu;
        if (inv_std) inv_std[r] = (float)inv;
        const float muf = (float)mu, invf = (float)inv;
        if (scale && bias)
            for (int64_t j = 0; j < n; j++) yr[j] = (xr[j] - muf) * invf * scale[j] + bias[j];
        else if (scale)
            for (int64_t j = 0; j < n; j++) yr[j] = (xr[j] - muf) * invf * scale[j];
        else if (bias)
            for (int64_t j = 0; j < n; j++) yr[j] = (xr[j] - muf) * invf + bias[j];
        else
            for (int64_t j = 0; j < n; j++) yr[j] = (xr[j] - muf) * invf;
    }
}

typedef struct dlrt_gn_job {
    const float *x, *scale, *bias;
    float *y;
    int64_t C, G, inner;
    int per_group;
    float eps;
} dlrt_gn_job;

/* Groups [lo, hi) (group r is image r / G, group r % G). */
static void dlrt_groupnorm_groups(void *ctx, int64_t lo, int64_t hi) {
    const dlrt_gn_job *jb = ctx;
    const int64_t cpg = jb->C / jb->G, inner = jb->inner, cnt = cpg * inner;
    for (int64_t r = lo; r < hi; r++) {
        const int64_t g = r % jb->G, base = (r / jb->G * jb->C + g * cpg) * inner;
        const float *xr = jb->x + base;
        float *yr = jb->y + base;
        const double mu = dlrt_ln_sum(xr, cnt, 0.0, 0) / (double)cnt;
        const double var = dlrt_ln_sum(xr, cnt, mu, 1) / (double)cnt;
        /* the mean as a float and the rest of it: data far from 0 (1000 + noise) would lose
         * the mean's rounding, 3e-5 of 1000, to every normalized value, where x - muf is exact
         * there and the rest small */
        const float muf = (float)mu, rest = (float)(mu - (double)muf);
        const float invf = (float)(1.0 / sqrt(var + (double)jb->eps));
        for (int64_t k = 0; k < cpg; k++) { /* a channel at a time: its scale and bias */
            const int64_t p = jb->per_group ? g : g * cpg + k;
            const float s = jb->scale[p], b = jb->bias[p];
            const float *xc = xr + k * inner;
            float *yc = yr + k * inner;
            for (int64_t j = 0; j < inner; j++) yc[j] = (xc[j] - muf - rest) * invf * s + b;
        }
    }
}

void dlrt_groupnorm(int64_t N, int64_t C, int64_t G, int64_t inner, const float *x,
                    const float *scale, const float *bias, int per_group, float eps, float *y) {
    if (N <= 0 || G <= 0 || C <= 0 || C % G || inner <= 0) return;
    dlrt_gn_job job = {x, scale, bias, y, C, G, inner, per_group, eps};
    dlrt_parallel_for(N * G, 16.0 * (double)N * (double)C * (double)inner >= DLRT_PAR_MIN,
                      dlrt_groupnorm_groups, &job);
}

void dlrt_layernorm(int64_t outer, int64_t n, const float *x, const float *scale, const float *bias,
                    float eps, float *y, float *mean, float *inv_std) {
    if (outer <= 0 || n <= 0) return;
    dlrt_ln_job job = {x, scale, bias, y, mean, inv_std, n, eps};
    dlrt_parallel_for(outer, 16.0 * (double)outer * (double)n >= DLRT_PAR_MIN, dlrt_layernorm_rows,
                      &job);
}
