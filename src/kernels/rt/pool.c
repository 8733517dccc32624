/* pool.c — dlrt_pool_forward: MaxPool, AveragePool and LpPool (and their Global forms, which
 * are the full-window case) over float32 NC + 1-3 spatial dims, with the semantics of the
 * reference interpreter (src/ops/pool.c): taps in the padding are skipped; the average divides
 * by the taps inside the input, or with count_include_pad by those inside the padded input;
 * a window with no tap inside the input gives 0.
 *
 * Per output, the window's taps inside the input are an interval in each dim, so the loops run
 * over exactly those taps with no test per tap. Sums go through double like the reference. */
#include "dlrt-impl.h"

/* One output plane. */
static void dlrt_pool_plane(const dlrt_pool *p, const dlrt_win3 *g, const int64_t *pe,
                            const float *x, float *y) {
    const int kind = p->kind;
    const double lp = p->p;
    for (int64_t od = 0; od < g->out[0]; od++) {
        int64_t d_lo, d_hi;
        dlrt_win_taps(od, g->stride[0], g->pad[0], g->dil[0], g->k[0], g->in[0], &d_lo, &d_hi);
        int64_t d_pad =
            dlrt_pool_padded_taps(od, g->stride[0], g->pad[0], pe[0], g->dil[0], g->k[0], g->in[0]);
        for (int64_t oh = 0; oh < g->out[1]; oh++) {
            int64_t h_lo, h_hi;
            dlrt_win_taps(oh, g->stride[1], g->pad[1], g->dil[1], g->k[1], g->in[1], &h_lo, &h_hi);
            int64_t h_pad = dlrt_pool_padded_taps(oh, g->stride[1], g->pad[1], pe[1], g->dil[1],
                                                  g->k[1], g->in[1]);
            float *yr = y + (od * g->out[1] + oh) * g->out[2];
            for (int64_t ow = 0; ow < g->out[2]; ow++) {
                int64_t w_lo, w_hi;
                dlrt_win_taps(ow, g->stride[2], g->pad[2], g->dil[2], g->k[2], g->in[2], &w_lo,
                              &w_hi);
                if (d_lo >= d_hi || h_lo >= h_hi || w_lo >= w_hi) {
                    yr[ow] = 0.0f;
                    continue;
                }
                const int64_t iw0 = ow * g->stride[2] - g->pad[2], dw = g->dil[2];
                float best = 0.0f;
                int seen = 0;
                double acc = 0.0;
                for (int64_t kd = d_lo; kd < d_hi; kd++) {
                    int64_t id = od * g->stride[0] - g->pad[0] + kd * g->dil[0];
                    for (int64_t kh = h_lo; kh < h_hi; kh++) {
                        int64_t ih = oh * g->stride[1] - g->pad[1] + kh * g->dil[1];
                        const float *xr = x + (id * g->in[1] + ih) * g->in[2] + iw0;
                        if (kind == 0) {
                            int64_t kw = w_lo;
                            if (!seen) {
                                best = xr[kw * dw];
                                seen = 1;
                                kw++;
                            }
                            /* strict > keeps the first of equal values and a leading NaN,
                             * like the reference */
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
                }
                if (kind == 0) {
                    yr[ow] = best;
                } else if (kind == 1) {
                    int64_t cnt = p->count_include_pad
                                      ? d_pad * h_pad *
                                            dlrt_pool_padded_taps(ow, g->stride[2], g->pad[2],
                                                                  pe[2], dw, g->k[2], g->in[2])
                                      : (d_hi - d_lo) * (h_hi - h_lo) * (w_hi - w_lo);
                    yr[ow] = (float)(acc / (double)cnt);
                } else {
                    yr[ow] = (float)(lp == 1.0 ? acc : lp == 2.0 ? sqrt(acc) : pow(acc, 1.0 / lp));
                }
            }
        }
    }
}

void dlrt_pool_forward(const dlrt_pool *p, const float *x, float *y) {
    dlrt_win3 g;
    int64_t pe[3];
    dlrt_pool_geom(p, &g, pe);
    const int64_t planes = p->n * p->c;
    if (planes <= 0 || g.out_sp <= 0) return;
    const int par = (double)planes * (double)g.out_sp * (double)g.k_sp >= DLRT_PAR_MIN;
    (void)par;
    DLRT_PRAGMA_OMP(parallel for schedule(static) if(par))
    for (int64_t pl = 0; pl < planes; pl++)
        dlrt_pool_plane(p, &g, pe, x + pl * g.in_sp, y + pl * g.out_sp);
}
