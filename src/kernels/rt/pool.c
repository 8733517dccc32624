/* pool.c — dlrt_pool_forward: MaxPool, AveragePool and LpPool (and their Global forms, which
 * are the full-window case) over float32 NC + 1-3 spatial dims, with the semantics of the
 * reference interpreter (src/ops/pool.c): taps in the padding are skipped; the average divides
 * by the taps inside the input, or with count_include_pad by those inside the padded input;
 * a window with no tap inside the input gives 0.
 *
 * Max and average split each output row at the columns whose windows lie inside the input in
 * width (the interior, [ia, ib)). The interior runs as passes over the row with the taps in the
 * outer loop and the output columns innermost, loops the compiler vectorizes; the rows whose
 * windows also lie inside the input in height ([ha, hb)) take their interior in one call when a
 * window is one pass (2x2, 3x3, up to 3 taps in a row). The edge columns take one output at a
 * time: for the rows [ha, hb) a column at a time, with the tap range worked out once. Lp takes
 * every output one at a time.
 *
 * Unpadded 2x2 stride-2 max pooling takes its own path (pool-pair.h), and so does 3x3 stride-2
 * max pooling padded by one (pool-s2.h, AVX-512 builds).
 *
 * Every path visits an output's taps in the reference's order (depth, height, width), so the
 * results are bit-identical to it: max starts from the first tap inside the input and replaces
 * it only by a strictly greater one (the first of equal values, e.g. of -0 and +0, stays, and so
 * does a leading NaN; a later NaN is ignored); sums start from 0 in double and add the same
 * values in the same order, and the average divides by the same count. */
#include "dlrt-impl.h"
#include "pool-pair.h"
#include "pool-s2.h"

#if defined(__GNUC__) || defined(__clang__)
#define DLRT_POOL_INLINE inline __attribute__((always_inline))
#else
#define DLRT_POOL_INLINE inline
#endif

/* Interior outputs are done in chunks of up to DLRT_POOL_CHUNK (the averages' partial sums live
 * on the stack). Rows with fewer than DLRT_POOL_MIN_RUN interior columns, and strides above 2,
 * are done one output at a time (a global pool has one column). */
#define DLRT_POOL_CHUNK   256
#define DLRT_POOL_MIN_RUN 4

/* One output row (od, oh) of a plane: its depth and height taps inside the input. */
typedef struct dlrt_pool_row {
    const float *x;   /* the input plane */
    int64_t id0, ih0; /* input depth and height of tap 0 (may be in the padding) */
    int64_t d_lo, d_hi, h_lo, h_hi;
    int64_t d_pad, dh_pad; /* depth, depth x height taps inside the padded input */
} dlrt_pool_row;

static const float *dlrt_pool_row_ptr(const dlrt_win3 *g, const dlrt_pool_row *r, int64_t kd,
                                      int64_t kh) {
    int64_t id = r->id0 + kd * g->dil[0], ih = r->ih0 + kh * g->dil[1];
    return r->x + (id * g->in[1] + ih) * g->in[2];
}

/* dlrt_win_taps (taps [*lo, *hi) inside the input) and dlrt_pool_padded_taps of output o in
 * dim d, without their divisions when the dim is not dilated (the usual case: on a narrow row a
 * few integer divisions cost more than the row's arithmetic). */
static void dlrt_pool_taps(const dlrt_win3 *g, int d, int64_t o, int64_t *lo, int64_t *hi) {
    if (g->dil[d] != 1) {
        dlrt_win_taps(o, g->stride[d], g->pad[d], g->dil[d], g->k[d], g->in[d], lo, hi);
        return;
    }
    const int64_t start = o * g->stride[d] - g->pad[d];
    *lo = start >= 0 ? 0 : -start;
    *hi = start >= g->in[d] ? 0 : DLRT_MIN(g->in[d] - start, g->k[d]);
}

static int64_t dlrt_pool_pad_taps(const dlrt_win3 *g, const int64_t *pe, int d, int64_t o) {
    if (g->dil[d] != 1)
        return dlrt_pool_padded_taps(o, g->stride[d], g->pad[d], pe[d], g->dil[d], g->k[d],
                                     g->in[d]);
    const int64_t room = g->in[d] + g->pad[d] + pe[d] - o * g->stride[d];
    return room <= 0 ? 0 : DLRT_MIN(room, g->k[d]);
}

/* The outputs [*a, *b) of dim d whose windows have all k taps inside [0, in):
 * o*s - pad >= 0 and o*s - pad + (k-1)*dil <= in - 1. */
static void dlrt_pool_full_range(const dlrt_win3 *g, int d, int64_t *a, int64_t *b) {
    const int64_t s = g->stride[d], pad = g->pad[d];
    const int64_t last = g->in[d] - 1 + pad - (g->k[d] - 1) * g->dil[d];
    const int64_t lo = pad <= 0 ? 0 : (pad + s - 1) / s;
    const int64_t hi = last < 0 ? 0 : DLRT_MIN(last / s + 1, g->out[d]);
    *a = DLRT_MIN(lo, hi);
    *b = hi;
}

/* ---- one output at a time ---- */

/* Outputs [o0, o1) of row r, any window. */
static DLRT_POOL_INLINE void dlrt_pool_outs(const dlrt_pool *p, const dlrt_win3 *g,
                                            const int64_t *pe, const dlrt_pool_row *r, int64_t o0,
                                            int64_t o1, float *yr) {
    const int kind = p->kind;
    const double lp = p->p;
    const int64_t dw = g->dil[2];
    for (int64_t ow = o0; ow < o1; ow++) {
        int64_t w_lo, w_hi;
        dlrt_pool_taps(g, 2, ow, &w_lo, &w_hi);
        if (w_lo >= w_hi) {
            yr[ow] = 0.0f;
            continue;
        }
        const int64_t iw0 = ow * g->stride[2] - g->pad[2];
        float best = 0.0f;
        int seen = 0;
        double acc = 0.0;
        for (int64_t kd = r->d_lo; kd < r->d_hi; kd++)
            for (int64_t kh = r->h_lo; kh < r->h_hi; kh++) {
                const float *xr = dlrt_pool_row_ptr(g, r, kd, kh) + iw0;
                if (kind == 0) {
                    int64_t kw = w_lo;
                    if (!seen) {
                        best = xr[kw * dw];
                        seen = 1;
                        kw++;
                    }
                    for (; kw < w_hi; kw++)
                        if (xr[kw * dw] > best) best = xr[kw * dw];
                } else if (kind == 1) {
                    for (int64_t kw = w_lo; kw < w_hi; kw++) acc += xr[kw * dw];
                } else if (lp == 1.0) {
                    for (int64_t kw = w_lo; kw < w_hi; kw++) acc += fabs(xr[kw * dw]);
                } else if (lp == 2.0) {
                    for (int64_t kw = w_lo; kw < w_hi; kw++) {
                        double v = xr[kw * dw];
                        acc += v * v;
                    }
                } else {
                    for (int64_t kw = w_lo; kw < w_hi; kw++)
                        acc += pow(fabs((double)xr[kw * dw]), lp);
                }
            }
        if (kind == 0) {
            yr[ow] = best;
        } else if (kind == 1) {
            int64_t cnt = p->count_include_pad
                              ? r->dh_pad * dlrt_pool_pad_taps(g, pe, 2, ow)
                              : (r->d_hi - r->d_lo) * (r->h_hi - r->h_lo) * (w_hi - w_lo);
            yr[ow] = (float)(acc / (double)cnt);
        } else {
            yr[ow] = (float)(lp == 1.0 ? acc : lp == 2.0 ? sqrt(acc) : pow(acc, 1.0 / lp));
        }
    }
}

/* The columns of row r outside [ia, ib). */
static void dlrt_pool_edges(const dlrt_pool *p, const dlrt_win3 *g, const int64_t *pe,
                            const dlrt_pool_row *r, int64_t ia, int64_t ib, float *yr) {
    dlrt_pool_outs(p, g, pe, r, 0, ia, yr);
    dlrt_pool_outs(p, g, pe, r, ib, g->out[2], yr);
}

/* Column ow of the rows [a, b) of row r's depth slice yd (out[1] x out[2]), rows whose windows
 * lie inside the input in height, so that only the width clips them: the tap range and the
 * divisor are worked out once for the column. Max or average. */
static void dlrt_pool_edge_col(const dlrt_pool *p, const dlrt_win3 *g, const int64_t *pe,
                               const dlrt_pool_row *r, int64_t a, int64_t b, int64_t ow,
                               float *yd) {
    int64_t w_lo, w_hi;
    dlrt_pool_taps(g, 2, ow, &w_lo, &w_hi);
    const int64_t ys = g->out[2], kh_n = g->k[1], dw = g->dil[2];
    if (w_lo >= w_hi) {
        for (int64_t oh = a; oh < b; oh++) yd[oh * ys + ow] = 0.0f;
        return;
    }
    const int64_t plane = g->in[1] * g->in[2], row_s = g->stride[1] * g->in[2];
    const int64_t kh_s = g->dil[1] * g->in[2], kd_s = g->dil[0] * plane;
    /* the first tap of row a's window: depth d_lo, height 0, width w_lo */
    const float *x0 = r->x + (r->id0 + r->d_lo * g->dil[0]) * plane +
                      (a * g->stride[1] - g->pad[1]) * g->in[2] + ow * g->stride[2] - g->pad[2] +
                      w_lo * dw;
    const int64_t nd = r->d_hi - r->d_lo, nw = w_hi - w_lo;
    if (p->kind == 0) {
        for (int64_t oh = a; oh < b; oh++, x0 += row_s) {
            float v = x0[0]; /* folding it again below changes nothing */
            for (int64_t kd = 0; kd < nd; kd++)
                for (int64_t kh = 0; kh < kh_n; kh++) {
                    const float *xr = x0 + kd * kd_s + kh * kh_s;
                    for (int64_t kw = 0; kw < nw; kw++) {
                        float u = xr[kw * dw];
                        v = u > v ? u : v;
                    }
                }
            yd[oh * ys + ow] = v;
        }
        return;
    }
    /* all k[1] height taps are inside the input, so also inside the padded input */
    const int64_t cnt =
        p->count_include_pad ? r->d_pad * kh_n * dlrt_pool_pad_taps(g, pe, 2, ow) : nd * kh_n * nw;
    for (int64_t oh = a; oh < b; oh++, x0 += row_s) {
        double acc = 0.0;
        for (int64_t kd = 0; kd < nd; kd++)
            for (int64_t kh = 0; kh < kh_n; kh++) {
                const float *xr = x0 + kd * kd_s + kh * kh_s;
                for (int64_t kw = 0; kw < nw; kw++) acc += xr[kw * dw];
            }
        yd[oh * ys + ow] = (float)(acc / (double)cnt);
    }
}

/* ---- the interior: passes over a row ---- */

/* A pass folds n taps into each of m outputs: output j's tap t is at tp[t][j*s], folded in the
 * order t. Max keeps y[j], strict >; a first pass (first != 0) starts from tap 0, the window's
 * first (folding it again changes nothing: equal, or a NaN the strict > never replaces). The
 * average sums in double in acc[j]; a first pass holds the whole window: it sums from 0 and
 * stores the sum divided by cnt in y[j] (first == 2: times cnt, then 1 over a power of 2, which
 * gives the same bits). The taps come as pointers rather than as offsets from a row: clang turns
 * the overlapping loads of constant offsets at stride 1 into a recurrence it cannot vectorize. */
static inline void dlrt_pool_max_pass(const float *const *tp, int n, int64_t s, int first,
                                      int64_t m, float *restrict y) {
    for (int64_t j = 0; j < m; j++) {
        float v = first ? tp[0][j * s] : y[j];
        for (int t = 0; t < n; t++) {
            float u = tp[t][j * s];
            v = u > v ? u : v;
        }
        y[j] = v;
    }
}

static inline void dlrt_pool_avg_pass(const float *const *tp, int n, int64_t s, int first,
                                      int64_t m, float *restrict y, double *restrict acc,
                                      double cnt) {
    for (int64_t j = 0; j < m; j++) {
        double a = first ? 0.0 : acc[j];
        for (int t = 0; t < n; t++) a += tp[t][j * s];
        if (first == 2)
            y[j] = (float)(a * cnt);
        else if (first)
            y[j] = (float)(a / cnt);
        else
            acc[j] = a;
    }
}

/* A pass over nrow output rows: row i's taps are xs floats and its outputs ys floats after row
 * 0's (nrow > 1 only for passes that store y). Each instance below has n, s and first as
 * constants, so that the taps unroll and the loop over j vectorizes, and is a function of its
 * own (reached through dlrt_pool_passes), which keeps the compile time linear in their number. */
typedef void dlrt_pool_pass_fn(const float *const *tp, int64_t m, float *y, double *acc, double cnt,
                               int64_t nrow, int64_t xs, int64_t ys);

/* clang-format off */
#define DLRT_POOL_MAX(N, S, F)                                                                     \
    static void dlrt_pool_max_##N##_##S##F(const float *const *tp, int64_t m, float *y,            \
                                           double *acc, double cnt, int64_t nrow, int64_t xs,      \
                                           int64_t ys) {                                           \
        (void)acc, (void)cnt;                                                                      \
        for (int64_t i = 0; i < nrow; i++) {                                                       \
            const float *q[N];                                                                     \
            for (int t = 0; t < N; t++) q[t] = tp[t] + i * xs;                                     \
            dlrt_pool_max_pass(q, N, S, F, m, y + i * ys);                                         \
        }                                                                                          \
    }
#define DLRT_POOL_AVG(N, S, F)                                                                     \
    static void dlrt_pool_avg_##N##_##S##F(const float *const *tp, int64_t m, float *y,            \
                                           double *acc, double cnt, int64_t nrow, int64_t xs,      \
                                           int64_t ys) {                                           \
        if (F == 2) cnt = 1.0 / cnt;                                                               \
        for (int64_t i = 0; i < nrow; i++) {                                                       \
            const float *q[N];                                                                     \
            for (int t = 0; t < N; t++) q[t] = tp[t] + i * xs;                                     \
            dlrt_pool_avg_pass(q, N, S, F, m, y + i * ys, acc, cnt);                               \
        }                                                                                          \
    }
/* passes of 1, 2 or 3 taps (a row's taps, in runs of up to 3), 4 (2x2) and 9 (3x3) */
#define DLRT_POOL_COUNTS(INST, S, F)                                                               \
    INST(1, S, F) INST(2, S, F) INST(3, S, F) INST(4, S, F) INST(9, S, F)
DLRT_POOL_COUNTS(DLRT_POOL_MAX, 1, 0)
DLRT_POOL_COUNTS(DLRT_POOL_MAX, 1, 1)
DLRT_POOL_COUNTS(DLRT_POOL_MAX, 2, 0)
DLRT_POOL_COUNTS(DLRT_POOL_MAX, 2, 1)
DLRT_POOL_COUNTS(DLRT_POOL_AVG, 1, 0)
DLRT_POOL_COUNTS(DLRT_POOL_AVG, 1, 1)
DLRT_POOL_COUNTS(DLRT_POOL_AVG, 2, 0)
DLRT_POOL_COUNTS(DLRT_POOL_AVG, 2, 1)
DLRT_POOL_AVG(1, 1, 2) DLRT_POOL_AVG(2, 1, 2) DLRT_POOL_AVG(4, 1, 2)
DLRT_POOL_AVG(1, 2, 2) DLRT_POOL_AVG(2, 2, 2) DLRT_POOL_AVG(4, 2, 2)
#undef DLRT_POOL_COUNTS
#undef DLRT_POOL_AVG
#undef DLRT_POOL_MAX

/* [kind][stride - 1][first][n: 1, 2, 3, 4, 9 taps]. first == 2 is the average's alone, over 1,
 * 2 or 4 taps (3 or 9 taps never have a power of 2 for divisor): max's repeats first == 1. */
#define DLRT_POOL_TABLE(K, S, F)                                                                   \
    { dlrt_pool_##K##_1_##S##F, dlrt_pool_##K##_2_##S##F, dlrt_pool_##K##_3_##S##F,                \
      dlrt_pool_##K##_4_##S##F, dlrt_pool_##K##_9_##S##F }
#define DLRT_POOL_TABLE2(S)                                                                        \
    { dlrt_pool_avg_1_##S##2, dlrt_pool_avg_2_##S##2, dlrt_pool_avg_3_##S##1,                      \
      dlrt_pool_avg_4_##S##2, dlrt_pool_avg_9_##S##1 }
static dlrt_pool_pass_fn *const dlrt_pool_passes[2][2][3][5] = {
    {{DLRT_POOL_TABLE(max, 1, 0), DLRT_POOL_TABLE(max, 1, 1), DLRT_POOL_TABLE(max, 1, 1)},
     {DLRT_POOL_TABLE(max, 2, 0), DLRT_POOL_TABLE(max, 2, 1), DLRT_POOL_TABLE(max, 2, 1)}},
    {{DLRT_POOL_TABLE(avg, 1, 0), DLRT_POOL_TABLE(avg, 1, 1), DLRT_POOL_TABLE2(1)},
     {DLRT_POOL_TABLE(avg, 2, 0), DLRT_POOL_TABLE(avg, 2, 1), DLRT_POOL_TABLE2(2)}},
};
#undef DLRT_POOL_TABLE2
#undef DLRT_POOL_TABLE
/* clang-format on */

/* The pass of n taps (1, 2, 3, 4 or 9) at stride s (1 or 2). */
static dlrt_pool_pass_fn *dlrt_pool_pass_of(int kind, int64_t s, int first, int n) {
    return dlrt_pool_passes[kind][s - 1][first][n == 9 ? 4 : n - 1];
}

/* The first (and only) pass of an average over cnt taps: 2, a multiplication by 1/cnt, where
 * cnt is a power of 2, so that 1/cnt and each product are exact and equal the quotient (a
 * division costs several multiplications); else 1, the division. */
static int dlrt_pool_avg_first(double cnt) {
    const int64_t c = (int64_t)cnt;
    return (c & (c - 1)) == 0 ? 2 : 1;
}

/* How many input rows of taps a pass takes: all of a 2- or 3-wide window's, else 1. */
static int dlrt_pool_group(const dlrt_win3 *g) {
    return g->k[2] == 2 || g->k[2] == 3 ? (int)g->k[2] : 1;
}

/* Whether an interior window over `rows` input rows is one pass (2x2, 3x3, or one row of up to
 * 3 taps). */
static int dlrt_pool_one_pass(const dlrt_win3 *g, int64_t rows) {
    const int group = dlrt_pool_group(g);
    return group > 1 ? rows == group : rows == 1 && g->k[2] <= 3;
}

static void dlrt_pool_pass(int kind, const dlrt_win3 *g, int first, const float *const *tp, int n,
                           int64_t m, float *y, double *acc, double cnt) {
    dlrt_pool_pass_of(kind, g->stride[2], first, n)(tp, m, y, acc, cnt, 1, 0, 0);
}

/* m <= DLRT_POOL_CHUNK interior outputs of row r, output 0's tap 0 at input column iw0, the
 * others s apart: every tap in the reference's order, the 4 or 9 taps of 2 or 3 rows of a 2- or
 * 3-wide window per pass, else a row per pass in runs of up to 3 taps. A window that is one pass
 * takes one first pass; else the average sums in acc from 0 and divides by cnt at the end. */
static void dlrt_pool_chunk(int kind, const dlrt_win3 *g, const dlrt_pool_row *r, int64_t iw0,
                            int64_t m, double cnt, float *y) {
    double acc[DLRT_POOL_CHUNK];
    const int64_t kw_n = g->k[2], dw = g->dil[2];
    const int group = dlrt_pool_group(g);
    const int one_pass = dlrt_pool_one_pass(g, (r->d_hi - r->d_lo) * (r->h_hi - r->h_lo));
    int first = kind == 0 ? 1 : one_pass ? dlrt_pool_avg_first(cnt) : 0;
    if (!first)
        for (int64_t j = 0; j < m; j++) acc[j] = 0.0;
    const float *tp[9];
    int n = 0;
    for (int64_t kd = r->d_lo; kd < r->d_hi; kd++)
        for (int64_t kh = r->h_lo; kh < r->h_hi; kh++) {
            const float *row = dlrt_pool_row_ptr(g, r, kd, kh) + iw0;
            if (group > 1) {
                for (int t = 0; t < group; t++) tp[n++] = row + t * dw;
                if (n == group * group) {
                    dlrt_pool_pass(kind, g, first, tp, n, m, y, acc, cnt);
                    n = first = 0;
                }
                continue;
            }
            for (int64_t kw = 0; kw < kw_n; kw += 3, first = 0) {
                const int t_n = (int)DLRT_MIN(3, kw_n - kw);
                for (int t = 0; t < t_n; t++) tp[t] = row + (kw + t) * dw;
                dlrt_pool_pass(kind, g, first, tp, t_n, m, y, acc, cnt);
            }
        }
    for (int i = 0; i < n; i += group, first = 0) /* the rows left over, one per pass */
        dlrt_pool_pass(kind, g, first, tp + i, group, m, y, acc, cnt);
    if (kind != 0 && !one_pass)
        for (int64_t j = 0; j < m; j++) y[j] = (float)(acc[j] / cnt);
}

/* The interior [a, b) of row r, in chunks. */
static void dlrt_pool_interior(const dlrt_pool *p, const dlrt_win3 *g, const dlrt_pool_row *r,
                               int64_t a, int64_t b, float *y) {
    /* every width tap is inside the input, so also inside the padded input */
    const int64_t dh = p->count_include_pad ? r->dh_pad : (r->d_hi - r->d_lo) * (r->h_hi - r->h_lo);
    const double cnt = (double)(dh * g->k[2]);
    for (int64_t j0 = a; j0 < b; j0 += DLRT_POOL_CHUNK) {
        const int64_t m = DLRT_MIN(DLRT_POOL_CHUNK, b - j0);
        dlrt_pool_chunk(p->kind, g, r, j0 * g->stride[2] - g->pad[2], m, cnt, y + j0);
    }
}

/* The interior [ia, ib) of the rows [ha, hb) of row r's depth slice yd in one pass per row, when
 * their windows are one pass. Returns whether it did. */
static int dlrt_pool_interior_rows(const dlrt_pool *p, const dlrt_win3 *g, dlrt_pool_row *r,
                                   const int64_t *span, float *yd) {
    const int64_t ia = span[0], ib = span[1], ha = span[2], hb = span[3];
    const int64_t nd = r->d_hi - r->d_lo;
    if (ia >= ib || ib - ia > DLRT_POOL_CHUNK || ha >= hb || nd <= 0 ||
        !dlrt_pool_one_pass(g, nd * g->k[1]))
        return 0;
    const float *tp[9];
    int n = 0;
    r->ih0 = ha * g->stride[1] - g->pad[1];
    for (int64_t kd = r->d_lo; kd < r->d_hi; kd++)
        for (int64_t kh = 0; kh < g->k[1]; kh++)
            for (int64_t kw = 0; kw < g->k[2]; kw++)
                tp[n++] = dlrt_pool_row_ptr(g, r, kd, kh) + ia * g->stride[2] - g->pad[2] +
                          kw * g->dil[2];
    /* all k[1] x k[2] taps are inside the input, so also inside the padded input */
    const double cnt = (double)((p->count_include_pad ? r->d_pad : nd) * g->k[1] * g->k[2]);
    const int first = p->kind == 0 ? 1 : dlrt_pool_avg_first(cnt);
    dlrt_pool_pass_of(p->kind, g->stride[2], first, n)(tp, ib - ia, yd + ha * g->out[2] + ia, NULL,
                                                       cnt, hb - ha, g->stride[1] * g->in[2],
                                                       g->out[2]);
    return 1;
}

/* ---- planes ---- */

/* Row r's depth taps for output depth od. Inlined, like dlrt_pool_row_h: with r passed to a
 * call, gcc kept it in memory through dlrt_pool_outs's loops (LpPool about 30% slower). */
static DLRT_POOL_INLINE void dlrt_pool_row_d(const dlrt_win3 *g, const int64_t *pe,
                                             dlrt_pool_row *r, int64_t od) {
    dlrt_pool_taps(g, 0, od, &r->d_lo, &r->d_hi);
    r->id0 = od * g->stride[0] - g->pad[0];
    r->d_pad = dlrt_pool_pad_taps(g, pe, 0, od);
}

/* Row r's height taps for output row oh; 0, with the row yr set to 0, when its windows have no
 * tap inside the input. */
static DLRT_POOL_INLINE int dlrt_pool_row_h(const dlrt_win3 *g, const int64_t *pe, dlrt_pool_row *r,
                                            int64_t oh, float *yr) {
    dlrt_pool_taps(g, 1, oh, &r->h_lo, &r->h_hi);
    r->ih0 = oh * g->stride[1] - g->pad[1];
    r->dh_pad = r->d_pad * dlrt_pool_pad_taps(g, pe, 1, oh);
    if (r->d_lo < r->d_hi && r->h_lo < r->h_hi) return 1;
    for (int64_t ow = 0; ow < g->out[2]; ow++) yr[ow] = 0.0f;
    return 0;
}

/* One output plane of LpPool. */
static void dlrt_pool_plane_lp(const dlrt_pool *p, const dlrt_win3 *g, const int64_t *pe,
                               const float *x, float *y) {
    dlrt_pool_row r;
    r.x = x;
    for (int64_t od = 0; od < g->out[0]; od++) {
        dlrt_pool_row_d(g, pe, &r, od);
        for (int64_t oh = 0; oh < g->out[1]; oh++) {
            float *yr = y + (od * g->out[1] + oh) * g->out[2];
            if (dlrt_pool_row_h(g, pe, &r, oh, yr)) dlrt_pool_outs(p, g, pe, &r, 0, g->out[2], yr);
        }
    }
}

/* One output plane of MaxPool or AveragePool; span = {ia, ib, ha, hb} (ia == ib: no interior). */
static void dlrt_pool_plane(const dlrt_pool *p, const dlrt_win3 *g, const int64_t *pe,
                            const int64_t *span, const float *x, float *y) {
    const int64_t ia = span[0], ib = span[1], ha = span[2], hb = span[3];
    dlrt_pool_row r;
    r.x = x;
    for (int64_t od = 0; od < g->out[0]; od++) {
        float *yd = y + od * g->out[1] * g->out[2];
        dlrt_pool_row_d(g, pe, &r, od);
        const int rows_done = dlrt_pool_interior_rows(p, g, &r, span, yd);
        for (int64_t oh = 0; oh < g->out[1]; oh++) {
            float *yr = yd + oh * g->out[2];
            if (!dlrt_pool_row_h(g, pe, &r, oh, yr)) continue;
            const int full_h = oh >= ha && oh < hb;
            if (ia < ib && !(rows_done && full_h)) dlrt_pool_interior(p, g, &r, ia, ib, yr);
            if (!full_h) dlrt_pool_edges(p, g, pe, &r, ia, ib, yr);
        }
        if (r.d_lo >= r.d_hi || ha >= hb) continue;
        for (int64_t ow = 0; ow < ia; ow++) dlrt_pool_edge_col(p, g, pe, &r, ha, hb, ow, yd);
        for (int64_t ow = ib; ow < g->out[2]; ow++)
            dlrt_pool_edge_col(p, g, pe, &r, ha, hb, ow, yd);
    }
}

typedef struct dlrt_pool_job {
    const dlrt_pool *p;
    const dlrt_win3 *g;
    const int64_t *pe, *span;
    const float *x;
    float *y;
} dlrt_pool_job;

static void dlrt_pool_planes(void *ctx, int64_t lo, int64_t hi) {
    const dlrt_pool_job *j = ctx;
    const dlrt_win3 *g = j->g;
    for (int64_t pl = lo; pl < hi; pl++) {
        if (j->p->kind == 2)
            dlrt_pool_plane_lp(j->p, g, j->pe, j->x + pl * g->in_sp, j->y + pl * g->out_sp);
        else
            dlrt_pool_plane(j->p, g, j->pe, j->span, j->x + pl * g->in_sp, j->y + pl * g->out_sp);
    }
}

void dlrt_pool_forward(const dlrt_pool *p, const float *x, float *y) {
    dlrt_win3 g;
    int64_t pe[3];
    dlrt_pool_geom(p, &g, pe);
    const int64_t planes = p->n * p->c;
    if (planes <= 0 || g.out_sp <= 0) return;
    if (dlrt_pool_pair(p, &g)) {
        dlrt_pool_pair_forward(&g, planes * g.out[0], x, y);
        return;
    }
    if (dlrt_pool_s2(p, &g)) {
        dlrt_pool_s2_forward(&g, planes * g.out[0], x, y);
        return;
    }
    int64_t span[4];
    dlrt_pool_full_range(&g, 2, &span[0], &span[1]);
    dlrt_pool_full_range(&g, 1, &span[2], &span[3]);
    if (g.stride[2] > 2 || span[1] - span[0] < DLRT_POOL_MIN_RUN) span[0] = span[1] = 0;
    dlrt_pool_job job = {p, &g, pe, span, x, y};
    dlrt_parallel_for(planes, (double)planes * (double)g.out_sp * (double)g.k_sp >= DLRT_PAR_MIN,
                      dlrt_pool_planes, &job);
}
