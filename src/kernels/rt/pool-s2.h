/* pool-s2.h — max pooling over 3x3 windows at stride 2 with one row and column of padding before
 * (ResNet's stem pool), forward only, AVX-512 builds (elsewhere it applies to nothing).
 *
 * An output row is 16 windows per step, read straight from the input rows as depthwise-row.c
 * reads them: per window row, the 32 inputs x[2j .. 2j+31] split by shuffles into their even
 * (tap 1) and odd (tap 2) columns, tap 0 (x[2j-1]) the odd vector shifted by one lane with the
 * step before's last. The general path (pool.c's passes) gathers every tap at stride 2:
 * ResNet-50's 64 x 112 x 112 pool 0.114 -> 0.077 ms alone (one thread, input in L3), 0.014 ->
 * 0.009 on 8 channels in L1/L2.
 *
 * The taps fold in the reference's order (window rows, then columns), each lane starting from its
 * first tap inside the input and keeping the maximum with strict >: a tap replaces the value when
 * the lane has none yet or when it compares greater, so a leading NaN stays, a later one is
 * ignored and the first of equal values (-0 and +0) stays. Taps outside the input (the padding,
 * columns past the row) are masked out of the fold. The results are the general path's, bit for
 * bit. */
#ifndef DLRT_POOL_S2_H
#define DLRT_POOL_S2_H
#include "dlrt-impl.h"

#if defined(__AVX512F__) && !defined(DLRT_GEMM_GENERIC)
#include "rowvec.h"

/* Whether p is such a pool: 3x3 max windows at stride 2, undilated, one row and column of
 * padding before, rows of 16 windows or more, every window's first tap row and column inside
 * the input (no window lies wholly in the padding); in depth one tap at stride 1 (each depth
 * slice a plane of its own). */
static inline int dlrt_pool_s2(const dlrt_pool *p, const dlrt_win3 *g) {
    if (p->kind != 0 || g->k[0] != 1 || g->stride[0] != 1 || g->pad[0] != 0 ||
        g->in[0] != g->out[0] || g->out[2] < 16)
        return 0;
    for (int d = 1; d < 3; d++)
        if (g->k[d] != 3 || g->stride[d] != 2 || g->dil[d] != 1 || g->pad[d] != 1 ||
            2 * g->out[d] - 3 >= g->in[d])
            return 0;
    return 1;
}

/* u > v ? u : v per lane: vmaxps returns its second operand unless the first compares greater
 * (a NaN in either gives the second), the fold's exact rule. */
static inline __m512 dlrt_pool_s2_max(__m512 v, __m512 u) {
    return _mm512_max_ps(u, v);
}

/* Folds tap vector u (lanes m inside the input) into the maximum v; *st: the lanes holding one.
 * A lane's first tap is taken as it is; folding it again into itself then changes nothing. */
static inline __m512 dlrt_pool_s2_fold(__m512 v, __m512 u, __mmask16 m, __mmask16 *st) {
    v = _mm512_mask_mov_ps(v, m & (__mmask16) ~*st, u);
    *st |= m;
    return _mm512_mask_max_ps(v, m, u, v);
}

/* One output row of wn windows: r[ky] the window rows (NULL: padding) of in_w floats. Steps
 * whose stored lanes have every column tap inside the input (all but a row's first, and its
 * last on odd widths) fold without masks, in a loop of their own: with the mask bookkeeping on
 * every tap, or behind a test in one loop, this path was slower than the general one (0.17-0.2
 * vs 0.115 ms on ResNet-50's pool). */
static inline void dlrt_pool_s2_row(const float *const *r, int64_t in_w, int64_t wn, float *y) {
    /* window j's taps: column 2j - 1 inside while j < in_w / 2 + 1 (and j >= 1), 2j while
     * j < (in_w + 1) / 2, 2j + 1 while j < in_w / 2: steps from 16 on are clean while all their
     * stored windows are below in_w / 2 */
    const int64_t lim0 = in_w / 2 + 1, lim1 = (in_w + 1) / 2, lim2 = in_w / 2;
    const int64_t clean_end = 16 + DLRT_MAX((int64_t)0, (DLRT_MIN(wn, lim2) - 16) / 16 * 16);
    __m512 prev[3] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    for (int64_t j = 0; j < wn; j += 16) {
        if (j >= 16 && j < clean_end) {
            __m512 v = _mm512_setzero_ps();
            int first = 1;
            for (int ky = 0; ky < 3; ky++) {
                if (!r[ky]) continue;
                __m512 a, b, c;
                dlrt_rv_taps2(r[ky], in_w, j, &prev[ky], &a, &b, &c);
                v = first ? a : dlrt_pool_s2_max(v, a);
                v = dlrt_pool_s2_max(dlrt_pool_s2_max(v, b), c);
                first = 0;
            }
            _mm512_storeu_ps(y + j, v);
            continue;
        }
        const __mmask16 m0 = dlrt_rv_lanes(lim0 - j) & (__mmask16)(j ? 0xFFFF : 0xFFFE);
        const __mmask16 m1 = dlrt_rv_lanes(lim1 - j), m2 = dlrt_rv_lanes(lim2 - j);
        __m512 v = _mm512_setzero_ps();
        __mmask16 st = 0;
        for (int ky = 0; ky < 3; ky++) {
            if (!r[ky]) continue;
            __m512 a, b, c;
            dlrt_rv_taps2(r[ky], in_w, j, &prev[ky], &a, &b, &c);
            v = dlrt_pool_s2_fold(v, a, m0, &st);
            v = dlrt_pool_s2_fold(v, b, m1, &st);
            v = dlrt_pool_s2_fold(v, c, m2, &st);
        }
        _mm512_mask_storeu_ps(y + j, dlrt_rv_lanes(wn - j), v);
    }
}

static void dlrt_pool_s2_slices(void *ctx, int64_t lo, int64_t hi) {
    const dlrt_slices_job *j = ctx;
    const dlrt_win3 *g = j->g;
    const int64_t in_h = g->in[1], in_w = g->in[2], n = g->out[2];
    const int64_t in_p = in_h * in_w, out_p = g->out[1] * n;
    for (int64_t s = lo; s < hi; s++)
        for (int64_t oh = 0; oh < g->out[1]; oh++) {
            const float *r[3];
            for (int ky = 0; ky < 3; ky++) {
                const int64_t ih = 2 * oh - 1 + ky;
                r[ky] = ih >= 0 && ih < in_h ? j->x + s * in_p + ih * in_w : NULL;
            }
            dlrt_pool_s2_row(r, in_w, n, j->y + s * out_p + oh * n);
        }
}

/* The pool over `slices` planes (images x channels x depth). */
static inline void dlrt_pool_s2_forward(const dlrt_win3 *g, int64_t slices, const float *x,
                                        float *y) {
    dlrt_slices_job job = {g, x, NULL, y};
    dlrt_parallel_for(slices,
                      (double)slices * (double)(g->out[1] * g->out[2]) * 9.0 >= DLRT_PAR_MIN,
                      dlrt_pool_s2_slices, &job);
}

#else

static inline int dlrt_pool_s2(const dlrt_pool *p, const dlrt_win3 *g) {
    (void)p, (void)g;
    return 0;
}

static inline void dlrt_pool_s2_forward(const dlrt_win3 *g, int64_t slices, const float *x,
                                        float *y) {
    (void)g, (void)slices, (void)x, (void)y;
}

#endif
#endif
