/* depthwise-cv.c — depthwise convolution vectorized over channels (AVX-512 builds).
 *
 * The plane-by-plane kernel of depthwise.c vectorizes along output rows, which wastes most of
 * each vector and pays a fixed cost per plane when planes are small (MobileNetV2's 14x14 and 7x7
 * layers ran at 5-25 GFLOP/s). Here 16 channels are computed together: a tile of input rows of
 * 16 planes is transposed, zero-padded, into a buffer of one vector per pixel ([row][col][16]),
 * each output pixel is then a sum of one FMA per tap whatever the stride or dilation, and the
 * results are transposed back into the 16 output planes. The transposes are 16x16 blocks in
 * registers.
 *
 * Each output is w[0]*x[0] followed by fused multiply-adds in tap order, the order of the plane
 * kernel's unrolled path, so both give the same bits. The epilogue (scale, per-channel bias,
 * activation) runs on the blocked results, where each is elementwise; an epilogue with a
 * residual is left to the plane kernel. Work is split over (image, channel block, row tile) and
 * each output is computed by exactly one unit, so results do not depend on the thread count.
 * Other instruction sets compute nothing here (dlrt_conv_dw_cv_channels gives 0). */
#include "conv-impl.h"
#include "gemm-micro.h" /* dlrt_gemm_vtranspose */

#if defined(__AVX512F__) && !defined(DLRT_GEMM_GENERIC)
#include <immintrin.h>

enum {
    DLRT_CV = 16,          /* channels per block: one vector */
    DLRT_CV_BUF = 16384,   /* floats of per-thread stack for a tile's input and results */
    DLRT_CV_PIX = 8,       /* output pixels computed together (independent FMA chains) */
    DLRT_CV_MAX_TAPS = 49, /* weight vectors kept per block */
    /* larger planes stay with the plane kernel: up to 112x112 this one measured faster (32 ch
     * 112x112: 0.16 vs 0.18 ms on one thread) once the input fill stored whole rows of pixels */
    DLRT_CV_MAX_PLANE = 12544
};

/* A tile of nr output rows: the padded input rows it reads (hq) and columns (wp). */
typedef struct dlrt_cv_tile {
    int64_t nr, hq, wp;
} dlrt_cv_tile;

static int64_t dlrt_cv_in_rows(const dlrt_win3 *g, int64_t nr) {
    return (nr - 1) * g->stride[1] + (g->k[1] - 1) * g->dil[1] + 1;
}

/* The most output rows per tile whose buffers fit DLRT_CV_BUF floats; 0 when one row does not. */
static int dlrt_cv_plan(const dlrt_win3 *g, dlrt_cv_tile *t) {
    t->wp = (g->out[2] - 1) * g->stride[2] + (g->k[2] - 1) * g->dil[2] + 1;
    const int64_t out_row = dlrt_conv_round16(g->out[2]) * DLRT_CV;
    t->nr = 0;
    for (int64_t nr = 1; nr <= g->out[1]; nr++) {
        const int64_t need =
            dlrt_cv_in_rows(g, nr) * t->wp * DLRT_CV + nr * out_row + DLRT_CV * DLRT_CV;
        if (need > DLRT_CV_BUF) break;
        t->nr = nr;
    }
    t->hq = dlrt_cv_in_rows(g, t->nr);
    return t->nr > 0;
}

/* The channels this kernel takes (a multiple of 16, 0 when it does not apply), with its tiling. */
static int64_t dlrt_cv_applies(const dlrt_conv *p, const dlrt_win3 *g, const dlrt_epilogue *ep,
                               dlrt_cv_tile *t) {
    if (p->c_out != p->c_in || p->c_in < DLRT_CV || (ep && ep->residual)) return 0;
    if (g->k[0] != 1 || g->in[0] != 1 || g->out[0] != 1) return 0;
    if (g->k_sp > DLRT_CV_MAX_TAPS || g->out_sp > DLRT_CV_MAX_PLANE) return 0;
    if (g->pad[1] < 0 || g->pad[2] < 0) return 0;
    if (!dlrt_cv_plan(g, t)) return 0;
    return p->c_out / DLRT_CV * DLRT_CV;
}

int64_t dlrt_conv_dw_cv_channels(const dlrt_conv *p, const dlrt_win3 *g, const dlrt_epilogue *ep) {
    dlrt_cv_tile t;
    return dlrt_cv_applies(p, g, ep, &t);
}

/* Fills the tile's input buffer: padded row u, column v is input row ih0 + u, column v - pad of
 * 16 planes (sp floats apart from x), one vector per pixel; zero outside the input. The input
 * rows inside are contiguous in each plane, so they are transposed 16 pixels at a time. */
static void dlrt_cv_fill(const dlrt_win3 *g, const dlrt_cv_tile *t, const float *x, int64_t sp,
                         int64_t ih0, int64_t hq, float *buf) {
    const int64_t ih_n = g->in[1], iw_n = g->in[2], pw = g->pad[2], wp = t->wp;
    const int64_t lo = DLRT_MAX(ih0, (int64_t)0), hi = DLRT_MIN(ih0 + hq, ih_n);
    const __m512 zero = _mm512_setzero_ps();
    /* the padding: rows outside, columns left and right (v < pw, v >= pw + iw_n) */
    const int64_t left = DLRT_MIN(pw, wp), right = DLRT_MIN(DLRT_MAX(pw + iw_n, left), wp);
    for (int64_t u = 0; u < hq; u++) {
        float *row = buf + u * wp * DLRT_CV;
        const int inside = ih0 + u >= lo && ih0 + u < hi;
        for (int64_t v = 0; v < (inside ? left : wp); v++)
            _mm512_storeu_ps(row + v * DLRT_CV, zero);
        for (int64_t v = inside ? right : wp; v < wp; v++)
            _mm512_storeu_ps(row + v * DLRT_CV, zero);
    }
    if (hi <= lo) return;
    const int64_t npix = (hi - lo) * iw_n;
    const float *src = x + lo * iw_n;
    int64_t ih = lo, iw = 0; /* of pixel p0 + q */
    for (int64_t p0 = 0; p0 < npix; p0 += DLRT_CV) {
        const int n = (int)DLRT_MIN((int64_t)DLRT_CV, npix - p0);
        const __mmask16 m = (__mmask16)((1u << n) - 1u);
        __m512 r[16];
        for (int c = 0; c < DLRT_CV; c++) r[c] = _mm512_maskz_loadu_ps(m, src + c * sp + p0);
        dlrt_gemm_vtranspose(r);
        if (n == DLRT_CV && iw + DLRT_CV <= iw_n && iw + pw + DLRT_CV <= wp) {
            /* 16 pixels of one row, all kept: stored straight from the registers */
            float *dst = buf + ((ih - ih0) * wp + iw + pw) * DLRT_CV;
            for (int q = 0; q < DLRT_CV; q++) _mm512_storeu_ps(dst + q * DLRT_CV, r[q]);
            iw += DLRT_CV;
            if (iw == iw_n) iw = 0, ih++;
            continue;
        }
        for (int q = 0; q < n; q++) {
            const int64_t v = iw + pw;
            if (v < wp) _mm512_storeu_ps(buf + ((ih - ih0) * wp + v) * DLRT_CV, r[q]);
            if (++iw == iw_n) iw = 0, ih++;
        }
    }
}

/* Output pixels [j0, j0 + PIX) of tile row i: each the sum over T taps of w[t] * in[base + off[t]]
 * (T constant, so the taps unroll; the pixels are independent chains). */
static DLRT_INLINE void dlrt_cv_pixels(const float *in, const int64_t *off, const __m512 *wv,
                                       int64_t step, float *out, int np, const int T) {
    __m512 acc[DLRT_CV_PIX];
    for (int q = 0; q < DLRT_CV_PIX; q++)
        acc[q] = q < np ? _mm512_mul_ps(wv[0], _mm512_loadu_ps(in + q * step + off[0]))
                        : _mm512_setzero_ps();
    for (int tp = 1; tp < T; tp++)
        for (int q = 0; q < DLRT_CV_PIX; q++)
            if (q < np)
                acc[q] = _mm512_fmadd_ps(wv[tp], _mm512_loadu_ps(in + q * step + off[tp]), acc[q]);
    for (int q = 0; q < DLRT_CV_PIX; q++)
        if (q < np) _mm512_storeu_ps(out + q * DLRT_CV, acc[q]);
}

/* All nr x ow outputs of a tile, into out ([pixel][16], in the planes' pixel order). */
static DLRT_INLINE void dlrt_cv_compute(const dlrt_win3 *g, const dlrt_cv_tile *t, int64_t nr,
                                        const float *in, const int64_t *off, const __m512 *wv,
                                        float *out, const int T) {
    const int64_t ow = g->out[2], step = g->stride[2] * DLRT_CV;
    for (int64_t i = 0; i < nr; i++) {
        const float *row = in + i * g->stride[1] * t->wp * DLRT_CV;
        for (int64_t j = 0; j < ow; j += DLRT_CV_PIX) {
            const int np = (int)DLRT_MIN((int64_t)DLRT_CV_PIX, ow - j);
            float *o = out + (i * ow + j) * DLRT_CV;
            if (np == DLRT_CV_PIX)
                dlrt_cv_pixels(row + j * step, off, wv, step, o, DLRT_CV_PIX, T);
            else
                dlrt_cv_pixels(row + j * step, off, wv, step, o, np, T);
        }
    }
}

/* The taps unrolled for the common kernels (3x3, 5x5), a loop for the others. */
static void dlrt_cv_compute_any(const dlrt_win3 *g, const dlrt_cv_tile *t, int64_t nr,
                                const float *in, const int64_t *off, const __m512 *wv, float *out) {
    if (g->k_sp == 9)
        dlrt_cv_compute(g, t, nr, in, off, wv, out, 9);
    else if (g->k_sp == 25)
        dlrt_cv_compute(g, t, nr, in, off, wv, out, 25);
    else
        dlrt_cv_compute(g, t, nr, in, off, wv, out, (int)g->k_sp);
}

/* The epilogue on the blocked results (npix vectors), as dlrt_epi_apply orders it: scale, bias
 * (one per channel), activation; then the pixels transposed back into the 16 planes of y (sp
 * floats apart), starting at pixel pix0. */
static void dlrt_cv_store(const dlrt_epilogue *ep, int64_t c0, float *out, int64_t npix, float *y,
                          int64_t sp, int64_t pix0) {
    if (ep) {
        const __m512 alpha = _mm512_set1_ps(ep->alpha);
        __m512 bias = _mm512_setzero_ps();
        if (ep->bias)
            for (int c = 0; c < DLRT_CV; c++) bias[c] = ep->beta * ep->bias[(c0 + c) * ep->bias_rs];
        for (int64_t q = 0; q < npix; q++) {
            __m512 v = _mm512_loadu_ps(out + q * DLRT_CV);
            if (ep->alpha != 1.0f) v = _mm512_mul_ps(v, alpha);
            if (ep->bias) v = _mm512_add_ps(v, bias);
            _mm512_storeu_ps(out + q * DLRT_CV, v);
        }
        dlrt_act_apply(ep->act, ep->act_a, ep->act_b, out, npix * DLRT_CV);
    }
    for (int64_t p0 = 0; p0 < npix; p0 += DLRT_CV) {
        const int n = (int)DLRT_MIN((int64_t)DLRT_CV, npix - p0);
        const __mmask16 m = (__mmask16)((1u << n) - 1u);
        __m512 r[16];
        for (int q = 0; q < DLRT_CV; q++)
            r[q] = q < n ? _mm512_loadu_ps(out + (p0 + q) * DLRT_CV) : _mm512_setzero_ps();
        dlrt_gemm_vtranspose(r);
        for (int c = 0; c < DLRT_CV; c++) _mm512_mask_storeu_ps(y + c * sp + pix0 + p0, m, r[c]);
    }
}

typedef struct dlrt_cv_job {
    const dlrt_conv *p;
    const dlrt_win3 *g;
    const dlrt_cv_tile *t;
    const int64_t *off;
    const float *x, *w;
    float *y;
    const dlrt_epilogue *ep;
    int64_t blocks, tiles;
} dlrt_cv_job;

/* Units [lo, hi): a tile of output rows of 16 channels of an image. */
static void dlrt_cv_units(void *ctx, int64_t lo, int64_t hi) {
    const dlrt_cv_job *j = ctx;
    const dlrt_conv *p = j->p;
    const dlrt_win3 *g = j->g;
    const dlrt_cv_tile t = *j->t;
    const int64_t blocks = j->blocks, tiles = j->tiles, oh_n = g->out[1], ow_n = g->out[2];
    const int64_t in_sp = g->in_sp, out_sp = g->out_sp, T = g->k_sp;
    for (int64_t un = lo; un < hi; un++) {
        const int64_t tile = un % tiles, blk = un / tiles % blocks, b = un / tiles / blocks;
        const int64_t c0 = blk * DLRT_CV, oh0 = tile * t.nr, nr = DLRT_MIN(t.nr, oh_n - oh0);
        const float *xb = j->x + (b * p->c_in + c0) * in_sp;
        float buf[DLRT_CV_BUF];
        float *in = buf, *out = buf + t.hq * t.wp * DLRT_CV;
        __m512 wv[DLRT_CV_MAX_TAPS];
        for (int64_t tp = 0; tp < T; tp++)
            for (int c = 0; c < DLRT_CV; c++) wv[tp][c] = j->w[(c0 + c) * T + tp];
        dlrt_cv_fill(g, &t, xb, in_sp, oh0 * g->stride[1] - g->pad[1], dlrt_cv_in_rows(g, nr), in);
        dlrt_cv_compute_any(g, &t, nr, in, j->off, wv, out);
        dlrt_epilogue e;
        const dlrt_epilogue *eb = dlrt_conv_ep(p, out_sp, j->ep, b, 0, &e);
        dlrt_cv_store(eb, c0, out, nr * ow_n, j->y + (b * p->c_out + c0) * out_sp, out_sp,
                      oh0 * ow_n);
    }
}

int64_t dlrt_conv_dw_cv(const dlrt_conv *p, const dlrt_win3 *g, const float *x, const float *w,
                        float *y, const dlrt_epilogue *ep) {
    dlrt_cv_tile t;
    const int64_t channels = dlrt_cv_applies(p, g, ep, &t);
    if (channels <= 0) return 0;
    const int64_t blocks = channels / DLRT_CV;
    const int64_t tiles = (g->out[1] + t.nr - 1) / t.nr, units = p->n * blocks * tiles;
    int64_t off[DLRT_CV_MAX_TAPS];
    for (int64_t a = 0; a < g->k[1]; a++)
        for (int64_t b = 0; b < g->k[2]; b++)
            off[a * g->k[2] + b] = (a * g->dil[1] * t.wp + b * g->dil[2]) * DLRT_CV;
    /* a sixteenth of the usual threshold: the whole layer is often only tens of microseconds,
     * and a team of spinning workers starts in about one (MobileNetV2's 576 channels 14x14 ->
     * 7x7, 254k taps, 0.015 -> 0.008 ms at 2 threads, left serial at a quarter) */
    const int par =
        units > 1 &&
        (double)p->n * (double)channels * (double)g->out_sp * (double)g->k_sp >= DLRT_PAR_MIN / 16;
    dlrt_cv_job job = {p, g, &t, off, x, w, y, ep, blocks, tiles};
    dlrt_parallel_for(units, par, dlrt_cv_units, &job);
    return channels;
}

#else

int64_t dlrt_conv_dw_cv_channels(const dlrt_conv *p, const dlrt_win3 *g, const dlrt_epilogue *ep) {
    (void)p, (void)g, (void)ep;
    return 0;
}

int64_t dlrt_conv_dw_cv(const dlrt_conv *p, const dlrt_win3 *g, const float *x, const float *w,
                        float *y, const dlrt_epilogue *ep) {
    (void)p, (void)g, (void)x, (void)w, (void)y, (void)ep;
    return 0;
}

#endif
