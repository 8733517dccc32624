/* resize.c — dlrt_resize2d, the kernel of Resize and Upsample (nearest, linear and cubic
 * upsampling and downsampling in decoders, feature pyramids, segmentation heads). The taps of
 * each axis are worked out once by the compiler (src/ops/resize.c's, as the reference kernel
 * computes them), so this only sums them: an output row is first the weighted sum of its input
 * rows (vectors across the row), then each output element the weighted sum of that row's
 * entries its column taps name. Output rows that take the same input rows with the same
 * weights (nearest upsampling's repeated rows) are copied from the one before. */
#include "dlrt-impl.h"

#include <string.h>

/* y[c] = w[c] * row[ix[c]] for c in [0, n) (w NULL: weight 1), or with add y[c] += that: one
 * tap across an output row. Vector gathers where the build has them (gcc does not make them
 * here of itself: its tuning for AMD cores keeps gathers off), the product rounded before the
 * sum, as in the scalar tail. */
static inline void dlrt_resize_tap(float *restrict y, const float *restrict row,
                                   const int32_t *restrict ix, const float *restrict w, int64_t n,
                                   int add) {
    int64_t c = 0;
#if defined(__AVX512F__)
    for (; c + 16 <= n; c += 16) {
        __m512 v = _mm512_i32gather_ps(_mm512_loadu_si512(ix + c), row, 4);
        if (w) v = _mm512_mul_ps(v, _mm512_loadu_ps(w + c));
        if (add) v = _mm512_add_ps(_mm512_loadu_ps(y + c), v);
        _mm512_storeu_ps(y + c, v);
    }
#elif defined(__AVX2__)
    for (; c + 8 <= n; c += 8) {
        __m256 v = _mm256_i32gather_ps(row, _mm256_loadu_si256((const __m256i *)(ix + c)), 4);
        if (w) v = _mm256_mul_ps(v, _mm256_loadu_ps(w + c));
        if (add) v = _mm256_add_ps(_mm256_loadu_ps(y + c), v);
        _mm256_storeu_ps(y + c, v);
    }
#endif
    for (; c < n; c++) {
        float v = row[ix[c]];
        if (w) v = v * w[c];
        y[c] = add ? y[c] + v : v;
    }
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
    float *restrict t = j->ws + (size_t)slot * (size_t)in_w;
    for (int64_t i = lo; i < hi; i++) {
        const int64_t plane = i / r->out_h, o = i % r->out_h;
        float *restrict yr = j->y + i * out_w;
        if (i > lo && dlrt_resize_same_row(r, o)) { /* the row before is in this range */
            memcpy(yr, yr - out_w, (size_t)out_w * sizeof(float));
            continue;
        }
        const float *xp = j->x + plane * r->in_h * in_w;
        const float *restrict row = xp + (int64_t)r->ih[o * r->nh] * in_w;
        if (r->nh > 1) { /* the input rows' weighted sum, in tap order */
            const float w0 = r->wh[o * r->nh];
            for (int64_t c = 0; c < in_w; c++) t[c] = w0 * row[c];
            for (int k = 1; k < r->nh; k++) {
                const float wk = r->wh[o * r->nh + k];
                const float *restrict rk = xp + (int64_t)r->ih[o * r->nh + k] * in_w;
                for (int64_t c = 0; c < in_w; c++) t[c] += wk * rk[c];
            }
            row = t;
        }
        /* a tap at a time across the row (its indices and weights contiguous), the sums in
         * tap order */
        for (int k = 0; k < r->nw; k++)
            dlrt_resize_tap(yr, row, r->iw + k * out_w, r->nw > 1 ? r->ww + k * out_w : NULL, out_w,
                            k > 0);
    }
}

size_t dlrt_resize_workspace(const dlrt_resize *r) {
    return r->nh > 1 && r->in_w > 0 ? (size_t)DLRT_MAX_THREADS * (size_t)r->in_w * sizeof(float)
                                    : 0;
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
