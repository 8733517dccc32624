/* conv.c — dlrt_conv_forward / dlrt_conv_workspace: ONNX Conv (1-3 spatial dims, groups,
 * strides, dilations, pads) over float32 NCHW, with the GEMM epilogue per output channel.
 *
 * Three paths, chosen by the geometry alone (so the workspace size and the forward pass agree):
 *   - 1x1, stride 1, no padding: per image and group, y = W x is one GEMM on the input itself;
 *   - one input channel per group (depthwise, with any channel multiplier): a direct loop per
 *     output plane, vectorized along output rows (im2col would copy k times the input for a
 *     GEMM with M = 1);
 *   - otherwise im2col of one image and group into the caller's workspace, then one GEMM
 *     W_g[c_out/g, c_in/g * k] x col[c_in/g * k, out_spatial]; the workspace is reused by every
 *     image and group, parallelism comes from inside im2col and the GEMM.
 * Spatial ranks 1 and 2 are run as rank 3 with leading dims of 1. */
#include "dlrt-impl.h"

static void dlrt_conv_geom(const dlrt_conv *p, dlrt_win3 *g) {
    dlrt_win3_init(g, p->nsp, p->in, p->out, p->k, p->stride, p->dil, p->pad_begin);
}

static int dlrt_conv_is_1x1(const dlrt_win3 *g) {
    for (int d = 0; d < 3; d++)
        if (g->k[d] != 1 || g->stride[d] != 1 || g->pad[d] != 0 || g->out[d] != g->in[d]) return 0;
    return 1;
}

static int dlrt_conv_is_direct(const dlrt_conv *p) {
    return p->group > 1 && p->c_in == p->group;
}

/* Outputs o in [0, n) with 0 <= o*s + off < in: [*lo, *hi) (empty when lo >= hi). */
static void dlrt_conv_span(int64_t n, int64_t s, int64_t off, int64_t in, int64_t *lo,
                           int64_t *hi) {
    int64_t a = off >= 0 ? 0 : (-off + s - 1) / s;
    int64_t b = in - off <= 0 ? 0 : (in - off + s - 1) / s;
    *lo = a;
    *hi = b < n ? b : n;
}

size_t dlrt_conv_workspace(const dlrt_conv *p) {
    dlrt_win3 g;
    dlrt_conv_geom(p, &g);
    if (p->group <= 0 || dlrt_conv_is_1x1(&g) || dlrt_conv_is_direct(p)) return 0;
    return (size_t)(p->c_in / p->group) * (size_t)g.k_sp * (size_t)g.out_sp * sizeof(float);
}

/* col[(ci * k_sp + tap) * out_sp + o] = x[ci] at the tap's input position for output o, or 0 in
 * the padding. */
static void dlrt_conv_im2col(const dlrt_win3 *g, int64_t cig, const float *x, float *col) {
    const int64_t rows = cig * g->k_sp;
    const int par = (double)rows * (double)g->out_sp >= DLRT_PAR_MIN;
    (void)par;
    DLRT_PRAGMA_OMP(parallel for schedule(static) if(par))
    for (int64_t r = 0; r < rows; r++) {
        int64_t ci = r / g->k_sp, t = r % g->k_sp;
        int64_t kw = t % g->k[2], kh = (t / g->k[2]) % g->k[1], kd = t / (g->k[2] * g->k[1]);
        const float *xc = x + ci * g->in_sp;
        float *dst = col + r * g->out_sp;
        const int64_t ow_n = g->out[2], sw = g->stride[2];
        const int64_t woff = kw * g->dil[2] - g->pad[2];
        int64_t w_lo, w_hi;
        dlrt_conv_span(ow_n, sw, woff, g->in[2], &w_lo, &w_hi);
        for (int64_t od = 0; od < g->out[0]; od++) {
            int64_t id = od * g->stride[0] - g->pad[0] + kd * g->dil[0];
            for (int64_t oh = 0; oh < g->out[1]; oh++, dst += ow_n) {
                int64_t ih = oh * g->stride[1] - g->pad[1] + kh * g->dil[1];
                if (id < 0 || id >= g->in[0] || ih < 0 || ih >= g->in[1] || w_lo >= w_hi) {
                    memset(dst, 0, (size_t)ow_n * sizeof(float));
                    continue;
                }
                const float *src = xc + (id * g->in[1] + ih) * g->in[2];
                for (int64_t ow = 0; ow < w_lo; ow++) dst[ow] = 0.0f;
                if (sw == 1)
                    memcpy(dst + w_lo, src + w_lo + woff, (size_t)(w_hi - w_lo) * sizeof(float));
                else
                    for (int64_t ow = w_lo; ow < w_hi; ow++) dst[ow] = src[ow * sw + woff];
                for (int64_t ow = w_hi; ow < ow_n; ow++) dst[ow] = 0.0f;
            }
        }
    }
}

/* One output plane of the direct path: y[o] = sum over taps of w[tap] * x[in(o, tap)], then the
 * epilogue (row oc). Output rows are cut into chunks held in a local buffer. */
static void dlrt_conv_direct_plane(const dlrt_win3 *g, const float *x, const float *w, float *y,
                                   int64_t oc, const dlrt_epilogue *ep) {
    enum { CH = 256 };
    float acc[CH];
    const int64_t ow_n = g->out[2], sw = g->stride[2];
    for (int64_t od = 0; od < g->out[0]; od++) {
        int64_t d_lo, d_hi;
        dlrt_win_taps(od, g->stride[0], g->pad[0], g->dil[0], g->k[0], g->in[0], &d_lo, &d_hi);
        for (int64_t oh = 0; oh < g->out[1]; oh++) {
            int64_t h_lo, h_hi;
            dlrt_win_taps(oh, g->stride[1], g->pad[1], g->dil[1], g->k[1], g->in[1], &h_lo, &h_hi);
            int64_t row = (od * g->out[1] + oh) * ow_n;
            for (int64_t c0 = 0; c0 < ow_n; c0 += CH) {
                int64_t cn = DLRT_MIN((int64_t)CH, ow_n - c0);
                for (int64_t j = 0; j < cn; j++) acc[j] = 0.0f;
                for (int64_t kd = d_lo; kd < d_hi; kd++) {
                    int64_t id = od * g->stride[0] - g->pad[0] + kd * g->dil[0];
                    for (int64_t kh = h_lo; kh < h_hi; kh++) {
                        int64_t ih = oh * g->stride[1] - g->pad[1] + kh * g->dil[1];
                        const float *xr = x + (id * g->in[1] + ih) * g->in[2];
                        const float *wr = w + (kd * g->k[1] + kh) * g->k[2];
                        for (int64_t kw = 0; kw < g->k[2]; kw++) {
                            const int64_t off = kw * g->dil[2] - g->pad[2];
                            int64_t lo, hi;
                            dlrt_conv_span(ow_n, sw, off, g->in[2], &lo, &hi);
                            lo = DLRT_MAX(lo, c0) - c0;
                            hi = DLRT_MIN(hi, c0 + cn) - c0;
                            const float wv = wr[kw];
                            const int64_t base = off + c0 * sw; /* input column of acc[0] */
                            if (sw == 1)
                                for (int64_t j = lo; j < hi; j++) acc[j] += wv * xr[base + j];
                            else
                                for (int64_t j = lo; j < hi; j++) acc[j] += wv * xr[base + j * sw];
                        }
                    }
                }
                dlrt_epi_apply(ep, oc, row + c0, acc, cn);
                memcpy(y + row + c0, acc, (size_t)cn * sizeof(float));
            }
        }
    }
}

/* The epilogue of dlrt_conv_forward for image b and the channel block starting at channel c0:
 * bias indexed by channel, residual with y's layout. */
static const dlrt_epilogue *dlrt_conv_ep(const dlrt_conv *p, const dlrt_win3 *g,
                                         const dlrt_epilogue *ep, int64_t b, int64_t c0,
                                         dlrt_epilogue *out) {
    if (!ep) return NULL;
    *out = *ep;
    out->bias = ep->bias ? ep->bias + c0 : NULL;
    out->bias_rs = 1;
    out->bias_cs = 0;
    out->residual = ep->residual ? ep->residual + (b * p->c_out + c0) * g->out_sp : NULL;
    out->res_rs = g->out_sp;
    out->res_cs = 1;
    return out;
}

void dlrt_conv_forward(const dlrt_conv *p, const float *x, const float *w, float *y,
                       void *workspace, const dlrt_epilogue *ep) {
    dlrt_win3 g;
    dlrt_conv_geom(p, &g);
    if (p->n <= 0 || p->c_out <= 0 || g.out_sp <= 0 || p->group <= 0) return;
    const int64_t cig = p->c_in / p->group, cog = p->c_out / p->group;
    const int64_t kdim = cig * g.k_sp; /* GEMM K: one weight row */

    if (dlrt_conv_is_direct(p)) {
        const int64_t planes = p->n * p->c_out;
        const int par = (double)planes * (double)g.out_sp * (double)g.k_sp >= DLRT_PAR_MIN;
        (void)par;
        DLRT_PRAGMA_OMP(parallel for schedule(static) if(par))
        for (int64_t pl = 0; pl < planes; pl++) {
            int64_t b = pl / p->c_out, oc = pl % p->c_out, ic = oc / cog;
            dlrt_epilogue e;
            const dlrt_epilogue *eb = dlrt_conv_ep(p, &g, ep, b, 0, &e);
            dlrt_conv_direct_plane(&g, x + (b * p->c_in + ic) * g.in_sp, w + oc * g.k_sp,
                                   y + pl * g.out_sp, oc, eb);
        }
        return;
    }

    const int is_1x1 = dlrt_conv_is_1x1(&g);
    float *col = workspace;
    for (int64_t b = 0; b < p->n; b++)
        for (int64_t gi = 0; gi < p->group; gi++) {
            const int64_t c0 = gi * cog;
            const float *xg = x + (b * p->c_in + gi * cig) * g.in_sp;
            const float *src = xg;
            if (!is_1x1 && kdim > 0) {
                dlrt_conv_im2col(&g, cig, xg, col);
                src = col;
            }
            dlrt_epilogue e;
            const dlrt_epilogue *eb = dlrt_conv_ep(p, &g, ep, b, c0, &e);
            dlrt_sgemm(cog, g.out_sp, kdim, w + c0 * kdim, kdim, 0, src, g.out_sp, 0,
                       y + (b * p->c_out + c0) * g.out_sp, g.out_sp, eb);
        }
}
