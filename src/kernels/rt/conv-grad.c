/* conv-grad.c — the backward of convolution and pooling for training (dlrt.h:
 * dlrt_conv_grad_input / _weight / _workspace, dlrt_maxpool_grad, dlrt_avgpool_grad), with the
 * semantics of the reference kernels of ai.dlcc.ConvGradInput, ConvGradWeight, MaxPoolGrad and
 * AveragePoolGrad (src/ops/grad-ops.c).
 *
 * Convolution, per image and group, W_g being the forward's [cog, cig * k_sp] weights:
 *   - input gradient: col = W_gᵀ · dY_g (dlrt_sgemm reading W transposed), then col2im into dX_g.
 *     col2im adds each column row into its input plane in tap order, the planes in parallel
 *     (so the sums do not depend on the thread count). For a 1x1 stride-1 unpadded convolution
 *     col is dX_g itself: the GEMM writes it directly;
 *   - weight gradient: dW_g = Σ_n dY_ng · im2col(X_ng)ᵀ (conv.c's im2col, dlrt_sgemm reading
 *     the columns transposed), one GEMM per image that accumulates through the epilogue's
 *     in-place residual from the second image on.
 * Pooling: (n, c) planes in parallel; within a plane the outputs are visited in order and each
 * dY is added to dX in the reference kernels' order, so the results are theirs bit for bit. */
#include "conv-impl.h"

size_t dlrt_conv_grad_workspace(const dlrt_conv *p) {
    if (p->group <= 0 || dlrt_conv_algo_ok(p, DLRT_CONV_GEMM_1X1)) return 0;
    return dlrt_conv_algo_workspace(p, DLRT_CONV_IM2COL); /* one image and group's columns */
}

/* d[0..n) += s[0..n), in whole blocks of 8 first: rows are short in small layers, and a fixed
 * block is one vector operation without a vector loop's set-up. */
static inline void dlrt_add_row(float *restrict d, const float *restrict s, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) d[i + j] += s[i + j];
    for (; i < n; i++) d[i] += s[i];
}

/* Plane ci of dx (one image and group) = the adjoint of im2col applied to col
 * [cig * k_sp, out_sp]: each of its column rows is added at the tap's offsets. Taps are visited
 * in order and output rows one after the other, so consecutive vector updates land on different
 * input rows (the next tap's, shifted by one element, would stall on forwarding from the store
 * before it). */
static void dlrt_conv_col2im_plane(const dlrt_win3 *g, int64_t ci, const float *col, float *plane) {
    const int64_t ow_n = g->out[2], sw = g->stride[2];
    memset(plane, 0, (size_t)g->in_sp * sizeof(float));
    for (int64_t t = 0; t < g->k_sp; t++) {
        const int64_t kw = t % g->k[2], kh = t / g->k[2] % g->k[1], kd = t / (g->k[2] * g->k[1]);
        const int64_t woff = kw * g->dil[2] - g->pad[2];
        int64_t w_lo, w_hi;
        dlrt_conv_span(ow_n, sw, woff, g->in[2], &w_lo, &w_hi);
        if (w_lo >= w_hi) continue;
        const float *src = col + (ci * g->k_sp + t) * g->out_sp;
        for (int64_t od = 0; od < g->out[0]; od++) {
            const int64_t id = od * g->stride[0] - g->pad[0] + kd * g->dil[0];
            if (id < 0 || id >= g->in[0]) continue;
            for (int64_t oh = 0; oh < g->out[1]; oh++) {
                const int64_t ih = oh * g->stride[1] - g->pad[1] + kh * g->dil[1];
                if (ih < 0 || ih >= g->in[1]) continue;
                float *restrict d = plane + (id * g->in[1] + ih) * g->in[2];
                const float *restrict s = src + (od * g->out[1] + oh) * ow_n;
                if (sw == 1)
                    dlrt_add_row(d + w_lo + woff, s + w_lo, w_hi - w_lo);
                else
                    for (int64_t ow = w_lo; ow < w_hi; ow++) d[ow * sw + woff] += s[ow];
            }
        }
    }
}

/* The cig planes of dx, in parallel when the work pays. */
static void dlrt_conv_col2im(const dlrt_win3 *g, int64_t cig, const float *col, float *dx) {
    const int par = (double)cig * (double)g->k_sp * (double)g->out_sp >= DLRT_PAR_MIN;
    (void)par;
    DLRT_PRAGMA_OMP(parallel for schedule(static) if(par))
    for (int64_t ci = 0; ci < cig; ci++) dlrt_conv_col2im_plane(g, ci, col, dx + ci * g->in_sp);
}

void dlrt_conv_grad_input(const dlrt_conv *p, const float *dy, const float *w, float *dx,
                          void *workspace) {
    dlrt_win3 g;
    dlrt_conv_geom(p, &g);
    if (p->n <= 0 || p->c_in <= 0 || g.in_sp <= 0 || p->group <= 0) return;
    const int64_t cig = p->c_in / p->group, cog = p->c_out / p->group, kdim = cig * g.k_sp;
    if (g.out_sp <= 0 || cog <= 0) { /* no output: nothing flows back */
        memset(dx, 0, (size_t)(p->n * p->c_in * g.in_sp) * sizeof(float));
        return;
    }
    const int pointwise = dlrt_conv_algo_ok(p, DLRT_CONV_GEMM_1X1);
    float *col = workspace;
    for (int64_t b = 0; b < p->n; b++)
        for (int64_t gi = 0; gi < p->group; gi++) {
            const float *wg = w + gi * cog * kdim;
            const float *dyg = dy + (b * p->c_out + gi * cog) * g.out_sp;
            float *dxg = dx + (b * p->c_in + gi * cig) * g.in_sp;
            if (pointwise) {
                dlrt_sgemm(cig, g.out_sp, cog, wg, cig, 1, dyg, g.out_sp, 0, dxg, g.in_sp, NULL);
                continue;
            }
            dlrt_sgemm(kdim, g.out_sp, cog, wg, kdim, 1, dyg, g.out_sp, 0, col, g.out_sp, NULL);
            dlrt_conv_col2im(&g, cig, col, dxg);
        }
}

void dlrt_conv_grad_weight(const dlrt_conv *p, const float *x, const float *dy, float *dw,
                           void *workspace) {
    dlrt_win3 g;
    dlrt_conv_geom(p, &g);
    if (p->group <= 0 || p->c_out <= 0) return;
    const int64_t cig = p->c_in / p->group, cog = p->c_out / p->group, kdim = cig * g.k_sp;
    if (kdim <= 0) return;
    if (p->n <= 0) { /* an empty batch: the sum is empty */
        memset(dw, 0, (size_t)(p->c_out * kdim) * sizeof(float));
        return;
    }
    const int pointwise = dlrt_conv_algo_ok(p, DLRT_CONV_GEMM_1X1);
    float *col = workspace;
    for (int64_t b = 0; b < p->n; b++)
        for (int64_t gi = 0; gi < p->group; gi++) {
            const float *src = x + (b * p->c_in + gi * cig) * g.in_sp;
            const float *dyg = dy + (b * p->c_out + gi * cog) * g.out_sp;
            float *dwg = dw + gi * cog * kdim;
            if (!pointwise) {
                dlrt_conv_im2col(&g, cig, src, col);
                src = col;
            }
            const dlrt_epilogue acc = {.alpha = 1.0f, .residual = dwg, .res_rs = kdim, .res_cs = 1};
            dlrt_sgemm(cog, kdim, g.out_sp, dyg, g.out_sp, 0, src, g.out_sp, 1, dwg, kdim,
                       b ? &acc : NULL);
        }
}

/* ---- pooling ---- */

/* dlrt_win_taps without its divisions for a window inside the input (the usual case). */
static inline void dlrt_grad_taps(int64_t o, int64_t s, int64_t pad, int64_t dil, int64_t k,
                                  int64_t in, int64_t *lo, int64_t *hi) {
    const int64_t start = o * s - pad;
    if (start >= 0 && start + (k - 1) * dil < in) {
        *lo = 0;
        *hi = k;
        return;
    }
    dlrt_win_taps(o, s, pad, dil, k, in, lo, hi);
}

/* The first maximum among the taps [lo, hi) (per dim) of a window whose tap (0, 0, 0) is at
 * plane offset base, taps st[] apart: visited in the forward's order (row-major over the kernel)
 * with its comparison (strict >: the first of equal values and a leading NaN win); branch-free,
 * maxima fall at random. The window is not empty. */
static inline int64_t dlrt_pool_argmax(const float *x, int64_t base, const int64_t *st,
                                       const int64_t *lo, const int64_t *hi) {
    int64_t best = base + lo[0] * st[0] + lo[1] * st[1] + lo[2] * st[2];
    float bv = x[best];
    for (int64_t kd = lo[0]; kd < hi[0]; kd++)
        for (int64_t kh = lo[1]; kh < hi[1]; kh++) {
            const int64_t row = base + kd * st[0] + kh * st[1];
            for (int64_t kw = lo[2]; kw < hi[2]; kw++) {
                const int64_t at = row + kw * st[2];
                const float v = x[at];
                const int gt = v > bv;
                best = gt ? at : best;
                bv = gt ? v : bv;
            }
        }
    return best;
}

/* dx += v on the taps [lo, hi) of a window (as for dlrt_pool_argmax). */
static inline void dlrt_pool_spread(float *dx, int64_t base, const int64_t *st, const int64_t *lo,
                                    const int64_t *hi, float v) {
    for (int64_t kd = lo[0]; kd < hi[0]; kd++)
        for (int64_t kh = lo[1]; kh < hi[1]; kh++) {
            const int64_t row = base + kd * st[0] + kh * st[1];
            for (int64_t kw = lo[2]; kw < hi[2]; kw++) dx[row + kw * st[2]] += v;
        }
}

/* One plane: each dy[o] goes to the first maximum of output o's window (max), or divided by the
 * count the forward divided by (taps inside the input, or with count_include_pad inside the
 * padded input) to each tap of the window inside the input. */
static void dlrt_pool_grad_plane(const dlrt_win3 *g, const int64_t *pe, int max, int include_pad,
                                 const float *x, const float *dy, float *dx) {
    memset(dx, 0, (size_t)g->in_sp * sizeof(float));
    const int64_t st[3] = {g->dil[0] * g->in[1] * g->in[2], g->dil[1] * g->in[2], g->dil[2]};
    int64_t lo[3], hi[3];
    for (int64_t od = 0; od < g->out[0]; od++) {
        dlrt_win_taps(od, g->stride[0], g->pad[0], g->dil[0], g->k[0], g->in[0], &lo[0], &hi[0]);
        const int64_t d_pad =
            dlrt_pool_padded_taps(od, g->stride[0], g->pad[0], pe[0], g->dil[0], g->k[0], g->in[0]);
        for (int64_t oh = 0; oh < g->out[1]; oh++) {
            dlrt_win_taps(oh, g->stride[1], g->pad[1], g->dil[1], g->k[1], g->in[1], &lo[1],
                          &hi[1]);
            const int64_t h_pad = dlrt_pool_padded_taps(oh, g->stride[1], g->pad[1], pe[1],
                                                        g->dil[1], g->k[1], g->in[1]);
            const int64_t row0 =
                ((od * g->stride[0] - g->pad[0]) * g->in[1] + oh * g->stride[1] - g->pad[1]) *
                g->in[2];
            const float *dyr = dy + (od * g->out[1] + oh) * g->out[2];
            for (int64_t ow = 0; ow < g->out[2]; ow++) {
                dlrt_grad_taps(ow, g->stride[2], g->pad[2], g->dil[2], g->k[2], g->in[2], &lo[2],
                               &hi[2]);
                if (lo[0] >= hi[0] || lo[1] >= hi[1] || lo[2] >= hi[2]) continue;
                const int64_t base = row0 + ow * g->stride[2] - g->pad[2];
                if (max) {
                    dx[dlrt_pool_argmax(x, base, st, lo, hi)] += dyr[ow];
                    continue;
                }
                const int64_t cnt =
                    include_pad ? d_pad * h_pad *
                                      dlrt_pool_padded_taps(ow, g->stride[2], g->pad[2], pe[2],
                                                            g->dil[2], g->k[2], g->in[2])
                                : (hi[0] - lo[0]) * (hi[1] - lo[1]) * (hi[2] - lo[2]);
                dlrt_pool_spread(dx, base, st, lo, hi, dyr[ow] / (float)cnt);
            }
        }
    }
}

/* Every (n, c) plane, in parallel when the work pays; x is read only by the max. */
static void dlrt_pool_grad(const dlrt_pool *p, int max, const float *x, const float *dy,
                           float *dx) {
    dlrt_win3 g;
    int64_t pe[3];
    dlrt_pool_geom(p, &g, pe);
    const int64_t planes = p->n * p->c;
    if (planes <= 0 || g.in_sp <= 0) return;
    const int par =
        (double)planes * ((double)g.out_sp * (double)g.k_sp + (double)g.in_sp) >= DLRT_PAR_MIN;
    (void)par;
    DLRT_PRAGMA_OMP(parallel for schedule(static) if(par))
    for (int64_t pl = 0; pl < planes; pl++)
        dlrt_pool_grad_plane(&g, pe, max, p->count_include_pad, max ? x + pl * g.in_sp : NULL,
                             dy + pl * g.out_sp, dx + pl * g.in_sp);
}

void dlrt_maxpool_grad(const dlrt_pool *p, const float *x, const float *dy, float *dx) {
    dlrt_pool_grad(p, 1, x, dy, dx);
}

void dlrt_avgpool_grad(const dlrt_pool *p, const float *dy, float *dx) {
    dlrt_pool_grad(p, 0, NULL, dy, dx);
}
