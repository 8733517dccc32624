/* argmax.c — dlrt_argmax, the kernel of ArgMax and ArgMin over float32 (a segmentation map's
 * class per pixel, a classifier's or a sampler's pick), with the reference kernel's order: NaN
 * counts as the largest value (ArgMax picks the first NaN, ArgMin a NaN only when every value
 * is one), -0 equals 0, and of equal values the first index wins (the last with
 * select_last_index). Along a middle axis the positions after it are scanned side by side, a
 * vector of them at a time; along the last axis each row is scanned in 16 interleaved lanes,
 * whose winners are then compared, ties going to the lower index (the higher with
 * select_last_index), which gives the index a scan in order gives. */
#include "dlrt-impl.h"

#include <math.h>
#include <string.h>

enum { DLRT_ARG_LANES = 16, DLRT_ARG_BLOCK = 256 };

/* Whether v and b tie: equal (-0 and 0 too), or both NaN. */
static inline int dlrt_arg_ties(float v, float b) {
    return (v == b) | ((v != v) & (b != b));
}

/* Whether v takes b's place in a scan in order: beats it (ArgMax: larger, or NaN over a number;
 * ArgMin: smaller, or a number over NaN) or, with last, ties it (equal, or both NaN). Bitwise,
 * so the scans below stay branch-free, and so vectorize; is_max and last are constants where it
 * is inlined. */
static inline int dlrt_arg_takes(float v, float b, int is_max, int last) {
    const int beats = is_max ? (v > b) | ((v != v) & (b == b)) : (v < b) | ((v == v) & (b != b));
    return beats | (last & dlrt_arg_ties(v, b));
}

typedef struct dlrt_arg_job {
    const float *x;
    int64_t *y;
    int64_t n, inner, blocks;
    int is_max, last;
} dlrt_arg_job;

#if defined(__GNUC__)
typedef float dlrt_arg_fv __attribute__((vector_size(4 * DLRT_ARG_LANES)));
typedef int32_t dlrt_arg_iv __attribute__((vector_size(4 * DLRT_ARG_LANES)));
#endif

/* Row r of a last-axis scan (inner 1): lane l holds the winner of the indices l mod 16 (GNU C
 * vector types: gcc had unrolled the lanes into scalar compares). */
static DLRT_INLINE void dlrt_arg_row(const dlrt_arg_job *j, int64_t r, int is_max, int last) {
    const int64_t n = j->n;
    const float *x = j->x + r * n;
    float bv[DLRT_ARG_LANES];
    int32_t bi[DLRT_ARG_LANES] = {0};
    const int lanes = n < DLRT_ARG_LANES ? (int)n : DLRT_ARG_LANES;
    for (int l = 0; l < lanes; l++) bv[l] = x[l], bi[l] = l;
    int64_t k = lanes;
#if defined(__GNUC__)
    if (lanes == DLRT_ARG_LANES) {
        dlrt_arg_fv b, v;
        dlrt_arg_iv i, at, step;
        memcpy(&b, bv, sizeof b);
        memcpy(&i, bi, sizeof i);
        for (int l = 0; l < DLRT_ARG_LANES; l++) step[l] = DLRT_ARG_LANES;
        at = i;
        for (; k + DLRT_ARG_LANES <= n; k += DLRT_ARG_LANES) {
            memcpy(&v, x + k, sizeof v);
            at += step;
            /* dlrt_arg_takes on the 16 lanes, as a mask (-1 where v takes b's place; written
             * out here: a function returning the vector would change the ABI by build) */
            const dlrt_arg_iv vn = v != v, bn = b != b;
            dlrt_arg_iv t = is_max ? (v > b) | (vn & ~bn) : (v < b) | (~vn & bn);
            if (last) t |= (v == b) | (vn & bn);
            b = (dlrt_arg_fv)(((dlrt_arg_iv)v & t) | ((dlrt_arg_iv)b & ~t));
            i = (at & t) | (i & ~t);
        }
        memcpy(bv, &b, sizeof b);
        memcpy(bi, &i, sizeof i);
    }
#endif
    for (; k + DLRT_ARG_LANES <= n; k += DLRT_ARG_LANES)
        for (int l = 0; l < DLRT_ARG_LANES; l++)
            if (dlrt_arg_takes(x[k + l], bv[l], is_max, last))
                bv[l] = x[k + l], bi[l] = (int32_t)(k + l);
    for (; k < n; k++) { /* the tail, into the lane its index falls in */
        const int l = (int)(k % DLRT_ARG_LANES);
        if (dlrt_arg_takes(x[k], bv[l], is_max, last)) bv[l] = x[k], bi[l] = (int32_t)k;
    }
    int64_t best = bi[0];
    float b = bv[0];
    for (int l = 1; l < lanes; l++) /* a tie goes to the index a scan in order would keep */
        if (dlrt_arg_takes(bv[l], b, is_max, 0) ||
            (dlrt_arg_ties(bv[l], b) && (last ? bi[l] > best : bi[l] < best)))
            b = bv[l], best = bi[l];
    j->y[r] = best;
}

/* Block t of a middle-axis scan: up to DLRT_ARG_BLOCK positions after the axis of one outer
 * index, side by side. */
static DLRT_INLINE void dlrt_arg_block(const dlrt_arg_job *j, int64_t t, int is_max, int last) {
    const int64_t n = j->n, inner = j->inner;
    float bv[DLRT_ARG_BLOCK];
    int32_t bi[DLRT_ARG_BLOCK];
    const int64_t o = t / j->blocks, i0 = t % j->blocks * DLRT_ARG_BLOCK;
    const int64_t m = DLRT_MIN(DLRT_ARG_BLOCK, inner - i0);
    const float *x = j->x + o * n * inner + i0;
    for (int64_t i = 0; i < m; i++) bv[i] = x[i], bi[i] = 0;
    for (int64_t k = 1; k < n; k++) {
        const float *xk = x + k * inner;
        for (int64_t i = 0; i < m; i++) {
            const int take = dlrt_arg_takes(xk[i], bv[i], is_max, last);
            bv[i] = take ? xk[i] : bv[i];
            bi[i] = take ? (int32_t)k : bi[i];
        }
    }
    for (int64_t i = 0; i < m; i++) j->y[o * inner + i0 + i] = bi[i];
}

/* Row (inner 1) or block t, is_max and last constants where it is inlined. */
static DLRT_INLINE void dlrt_arg_one(const dlrt_arg_job *j, int64_t t, int is_max, int last) {
    if (j->inner == 1)
        dlrt_arg_row(j, t, is_max, last);
    else
        dlrt_arg_block(j, t, is_max, last);
}

/* Rows, or blocks, [lo, hi), the scan specialized for each of the four modes. */
static void dlrt_arg_range(void *ctx, int64_t lo, int64_t hi) {
    const dlrt_arg_job *j = ctx;
    for (int64_t t = lo; t < hi; t++) {
        if (j->is_max && j->last)
            dlrt_arg_one(j, t, 1, 1);
        else if (j->is_max)
            dlrt_arg_one(j, t, 1, 0);
        else if (j->last)
            dlrt_arg_one(j, t, 0, 1);
        else
            dlrt_arg_one(j, t, 0, 0);
    }
}

void dlrt_argmax(int64_t outer, int64_t n, int64_t inner, const float *x, int64_t *y, int is_max,
                 int last) {
    if (outer <= 0 || n <= 0 || inner <= 0) return;
    if (n > INT32_MAX) { /* past the int32 indices of the scans below: one by one */
        for (int64_t o = 0; o < outer; o++)
            for (int64_t i = 0; i < inner; i++) {
                const float *xo = x + o * n * inner + i;
                int64_t best = 0;
                for (int64_t k = 1; k < n; k++)
                    if (dlrt_arg_takes(xo[k * inner], xo[best * inner], is_max != 0, last != 0))
                        best = k;
                y[o * inner + i] = best;
            }
        return;
    }
    const int64_t blocks = (inner + DLRT_ARG_BLOCK - 1) / DLRT_ARG_BLOCK;
    dlrt_arg_job j = {x, y, n, inner, blocks, is_max != 0, last != 0};
    const int par = (double)outer * (double)n * (double)inner >= DLRT_PAR_MIN;
    dlrt_parallel_for(inner == 1 ? outer : outer * blocks, par, dlrt_arg_range, &j);
}
