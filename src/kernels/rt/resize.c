/* resize.c — dlrt_resize2d, the kernel of Resize and Upsample (nearest, linear and cubic
 * upsampling and downsampling in decoders, feature pyramids, segmentation heads). The taps of
 * each axis are worked out once by the compiler (src/ops/resize.c's, as the reference kernel
 * computes them), so this only sums them: an output row is first the weighted sum of its input
 * rows (vectors across the row), then each output element the weighted sum of that row's
 * entries its column taps name. Output rows that take the same input rows with the same
 * weights (nearest upsampling's repeated rows) are copied from the one before. */
#include "dlrt-impl.h"

#include <string.h>

/* y[c] = w[c] * row[ix[c]] for c in [0, n), or with add y[c] += that: one
 * tap across an output row. As in the reference kernel, a tap of weight 0 adds nothing (an inf
 * or NaN it names does not turn into NaN), and a sum starts from +0 (so -0 becomes +0). Vector
 * gathers where the build has them (gcc does not make them here of itself: its tuning for AMD
 * cores keeps gathers off), the product rounded before the sum, as in the scalar tail. */
static inline void dlrt_resize_tap(float *restrict y, const float *restrict row,
                                   const int32_t *restrict ix, const float *restrict w, int64_t n,
                                   int add) {
    int64_t c = 0;
#if defined(__AVX512F__)
    for (; c + 16 <= n; c += 16) {
        __m512 v = _mm512_i32gather_ps(_mm512_loadu_si512(ix + c), row, 4);
        const __m512 wv = _mm512_loadu_ps(w + c);
        v = _mm512_maskz_mul_ps(_mm512_cmp_ps_mask(wv, _mm512_setzero_ps(), _CMP_NEQ_OQ), v, wv);
        v = _mm512_add_ps(add ? _mm512_loadu_ps(y + c) : _mm512_setzero_ps(), v);
        _mm512_storeu_ps(y + c, v);
    }
#elif defined(__AVX2__)
    for (; c + 8 <= n; c += 8) {
        __m256 v = _mm256_i32gather_ps(row, _mm256_loadu_si256((const __m256i *)(ix + c)), 4);
        const __m256 wv = _mm256_loadu_ps(w + c);
        v = _mm256_and_ps(_mm256_cmp_ps(wv, _mm256_setzero_ps(), _CMP_NEQ_OQ),
                          _mm256_mul_ps(v, wv));
        v = _mm256_add_ps(add ? _mm256_loadu_ps(y + c) : _mm256_setzero_ps(), v);
        _mm256_storeu_ps(y + c, v);
    }
#endif
    for (; c < n; c++) {
        const float v = w[c] != 0.0f ? row[ix[c]] * w[c] : 0.0f;
        y[c] = (add ? y[c] : 0.0f) + v;
    }
}

/* A thread's row of sums: whole cache lines, so that two threads never write one. */
static inline size_t dlrt_resize_row_floats(int64_t in_w) {
    return ((size_t)in_w + 15) / 16 * 16;
}

typedef struct dlrt_resize_job {
    const dlrt_resize *r;
    const float *x;
    float *y, *ws;
} dlrt_resize_job;

/* Whether output row o takes the same input rows with the same weights as row o - 1. */
static int dlrt_resize_same_row(const dlrt_resize *r, int64_t o) {
    if (o == 0) return 0;
    for (int k = 0; k < r->nh; k++)
        if (r->ih[o * r->nh + k] != r->ih[(o - 1) * r->nh + k] ||
            r->wh[o * r->nh + k] != r->wh[(o - 1) * r->nh + k])
            return 0;
    return 1;
}

/* Output rows [lo, hi) of all planes (row i is plane i / out_h, row i % out_h); the thread's
 * scratch holds one input row's worth of floats. */
static void dlrt_resize_rows(void *ctx, int64_t lo, int64_t hi, int slot) {
    const dlrt_resize_job *j = ctx;
    const dlrt_resize *r = j->r;
    const int64_t in_w = r->in_w, out_w = r->out_w;
    float *restrict t = j->ws + (size_t)slot * dlrt_resize_row_floats(in_w);
    for (int64_t i = lo; i < hi; i++) {
        const int64_t plane = i / r->out_h, o = i % r->out_h;
        float *restrict yr = j->y + i * out_w;
        if (i > lo && dlrt_resize_same_row(r, o)) { /* the row before is in this range */
            memcpy(yr, yr - out_w, (size_t)out_w * sizeof(float));
            continue;
        }
        const float *xp = j->x + plane * r->in_h * in_w;
        /* the input rows' weighted sum, in tap order, over the taps that weigh something; a
         * single one of weight 1 (an axis left as it is, an exact position) is that row */
        const float *row = NULL;
        int used = 0;
        for (int k = 0; k < r->nh; k++) {
            const float wk = r->wh[o * r->nh + k];
            if (wk == 0.0f) continue;
            const float *restrict rk = xp + (int64_t)r->ih[o * r->nh + k] * in_w;
            if (used++ == 0) {
                row = rk;
                if (wk == 1.0f) continue;
                for (int64_t c = 0; c < in_w; c++) t[c] = wk * rk[c];
            } else {
                if (row != t)
                    for (int64_t c = 0; c < in_w; c++) t[c] = row[c]; /* weight 1 so far */
                for (int64_t c = 0; c < in_w; c++) t[c] += wk * rk[c];
            }
            row = t;
        }
        if (!used) { /* every tap weighs 0 (a cubic's exclude_outside): zeros */
            for (int64_t c = 0; c < in_w; c++) t[c] = 0.0f;
            row = t;
        }
        /* a tap at a time across the row (its indices and weights contiguous), the sums in
         * tap order */
        for (int k = 0; k < r->nw; k++)
            dlrt_resize_tap(yr, row, r->iw + k * out_w, r->ww + k * out_w, out_w, k > 0);
    }
}

size_t dlrt_resize_workspace(const dlrt_resize *r) {
    /* a row of sums, or of zeros where every row tap weighs 0 (nearest's exclude_outside) */
    return r->in_w > 0 ? DLRT_MAX_THREADS * dlrt_resize_row_floats(r->in_w) * sizeof(float) : 0;
}

void dlrt_resize2d(const dlrt_resize *r, const float *x, float *y, void *workspace) {
    const int64_t rows = r->planes * r->out_h;
    if (rows <= 0 || r->out_w <= 0 || r->in_h <= 0 || r->in_w <= 0) return;
    dlrt_resize_job j = {r, x, y, workspace};
    /* an output costs a gather and a store a column tap: about four multiply-adds' worth */
    const double work = 4.0 * (double)rows * (double)r->out_w * (double)(r->nh * r->nw);
    /* pieces of whole rows; results do not depend on the cut (each row is computed alone, and
     * a repeated row is copied only from within its own piece, equal either way) */
    dlrt_parallel_slots(rows, work >= DLRT_PAR_MIN ? 0 : 1, 1, DLRT_MAX_THREADS, dlrt_resize_rows,
                        &j);
}
