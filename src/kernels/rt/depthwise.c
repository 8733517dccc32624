/* depthwise.c — dlrt_conv_depthwise: convolution with one input channel per group (any channel
 * multiplier, 1-3 spatial dims), computed directly per output plane; im2col would copy the input
 * k times over for a GEMM with M = 1.
 *
 * The fast path (kernel depth 1: every 1-D and 2-D convolution) never tests bounds per tap. A
 * tile of output rows (whole rows when they fit, else column chunks) has the input it needs
 * copied, zero-padded, into a per-thread stack buffer, split by stride into phase planes: padded
 * position (u, v) goes to plane (u % sh, v % sw) at (u / sh, v / sw). Then every tap, at any
 * stride and dilation, reads a contiguous run of one phase plane: output (i, j) of tap (a, b)
 * is plane ((a*dh) % sh, (b*dw) % sw) at (i + a*dh / sh, j + b*dw / sw). Each output row is a
 * sum of kh*kw shifted vectors; 3-, 9-, 25- and 49-tap kernels get unrolled versions computing
 * 16 outputs at a time with the sum in a register. Results go through the epilogue from the
 * buffer before they are stored, so an in-place residual is read before it is overwritten.
 * Geometries that fit no tile (huge dilations) and kernels with depth > 1 take a plain direct
 * loop.
 *
 * Work is split over planes (image x channel), and over blocks of rows when there are few
 * planes. */
#include "conv-impl.h"

/* Floats of per-thread stack for a tile's padded input and its results (32 KiB: L1). */
#ifndef DLRT_DW_BUF
#define DLRT_DW_BUF 8192
#endif

/* Multiply-add, fused where the target has it (ISO C mode does not contract a*b + c). */
#ifdef __FMA__
#define DLRT_DW_FMA(a, b, c) fmaf(a, b, c)
#else
#define DLRT_DW_FMA(a, b, c) ((a) * (b) + (c))
#endif

/* Outputs are computed in blocks of this many (one AVX-512 vector), past the end of a tile when
 * it is not a multiple: the phase planes and the results are followed by this much slack. */
enum { DLRT_DW_VEC = 16 };

/* The largest tile (whole rows preferred) whose phase planes and results fit in cap floats:
 * np*(rh + eh - 1)*wq + rh*wq, plus the slack. */
static int dlrt_dw_fit(const dlrt_win3 *g, int64_t cap, dlrt_dw_plan *t) {
    const int64_t sh = g->stride[1], sw = g->stride[2], np = sh * sw;
    t->eh = ((g->k[1] - 1) * g->dil[1] + sh) / sh;
    t->ew = ((g->k[2] - 1) * g->dil[2] + sw) / sw;
    cap -= 2 * DLRT_DW_VEC;
    if (cap <= 0) return 0;
    t->wq = g->out[2] + t->ew - 1;
    t->rh = (cap / t->wq - np * (t->eh - 1)) / (np + 1);
    if (t->rh < DLRT_MIN(g->out[1], (int64_t)4)) { /* column chunks of 4 rows, or of 1 */
        t->rh = DLRT_MIN(g->out[1], (int64_t)4);
        t->wq = cap / (np * (t->rh + t->eh - 1) + t->rh);
        if (t->wq < t->ew) t->rh = 1, t->wq = cap / (np * t->eh + 1);
        if (t->wq < t->ew) return 0;
    }
    t->rh = DLRT_MIN(t->rh, g->out[1]);
    t->cw = t->wq - t->ew + 1;
    t->hq = t->rh + t->eh - 1;
    t->sub = t->hq * t->wq;
    return 1;
}

/* Row r of out (rows x cn, compact) is out[r*cn + j] = sum over taps t of w[t] * p[t][r*pitch + j].
 * T is constant, so the taps unroll and each block of DLRT_DW_VEC outputs is one vector sum
 * kept in registers. The block goes through a local array: summed straight into out, clang
 * cannot tell out from the taps and does not vectorize; summed tap by tap into the array, gcc
 * keeps it on the stack (each 3-4x slower). A row's last block runs over into the next row
 * (computed after it) or into the slack. */
static DLRT_INLINE void dlrt_dw_fixed(const float *const *p, const float *w, int64_t rows,
                                      int64_t cn, int64_t pitch, float *restrict out, const int T) {
    const float *q[49];
    float wv[49];
    for (int t = 0; t < T; t++) q[t] = p[t], wv[t] = w[t];
    for (int64_t r = 0; r < rows; r++, out += cn)
        for (int64_t j0 = 0; j0 < cn; j0 += DLRT_DW_VEC) {
            const int64_t at = r * pitch + j0;
            float s[DLRT_DW_VEC];
            for (int j = 0; j < DLRT_DW_VEC; j++) {
                float v = wv[0] * q[0][at + j];
                for (int t = 1; t < T; t++) v = DLRT_DW_FMA(wv[t], q[t][at + j], v);
                s[j] = v;
            }
            for (int j = 0; j < DLRT_DW_VEC; j++) out[j0 + j] = s[j];
        }
}

/* The same for any number of taps, one tap at a time, accumulating into out. */
static void dlrt_dw_taps(const float *const *p, const float *w, int64_t taps, int64_t rows,
                         int64_t cn, int64_t pitch, float *restrict out) {
    for (int64_t t = 0; t < taps; t++) {
        const float wv = w[t];
        for (int64_t r = 0; r < rows; r++) {
            const float *pt = p[t] + r * pitch;
            float *o = out + r * cn;
            for (int64_t j = 0; j < cn; j++) o[j] = DLRT_DW_FMA(wv, pt[j], o[j]);
        }
    }
}

/* Fills the phase planes of a tile from input slice xs (NULL: the tile lies in the depth
 * padding), the padded input whose row u and column v are input row r0 + u and column c0 + v:
 * padded (u, v) = (qr*sh + pr, qc*sw + pc) goes to slab[(pr*sw + pc)*sub + qr*wq + qc], for
 * qr < hq and qc < wq, with 0 outside the input. With `edges` 0, the columns left and right of
 * the input are not written: they still hold the zeros of an earlier tile with the same columns. */
static void dlrt_dw_fill(const dlrt_win3 *g, const float *xs, int64_t r0, int64_t c0, int64_t hq,
                         int64_t wq, int64_t sub, int edges, float *slab) {
    const int64_t sh = g->stride[1], sw = g->stride[2], ih_n = g->in[1], iw_n = g->in[2];
    for (int64_t pc = 0; pc < sw; pc++) {
        int64_t lo, hi; /* the same columns for every row */
        dlrt_conv_span(wq, sw, c0 + pc, iw_n, &lo, &hi);
        if (hi < lo) hi = lo;
        const int64_t base = c0 + pc; /* input column of q = 0; base + q*sw >= 0 from lo on */
        for (int64_t pr = 0; pr < sh; pr++) {
            float *dst = slab + (pr * sw + pc) * sub;
            for (int64_t qr = 0, ih = r0 + pr; qr < hq; qr++, ih += sh, dst += wq) {
                if (!xs || ih < 0 || ih >= ih_n) {
                    for (int64_t q = 0; q < wq; q++) dst[q] = 0.0f;
                    continue;
                }
                const float *xr = xs + ih * iw_n;
                for (int64_t q = 0; q < lo && edges; q++) dst[q] = 0.0f;
                if (sw == 1)
                    memcpy(dst + lo, xr + base + lo, (size_t)(hi - lo) * sizeof(float));
                else if (sw == 2) /* a constant stride vectorizes (a variable one gathers) */
                    for (int64_t q = lo; q < hi; q++) dst[q] = xr[base + 2 * q];
                else
                    for (int64_t q = lo; q < hi; q++) dst[q] = xr[base + q * sw];
                for (int64_t q = hi; q < wq && edges; q++) dst[q] = 0.0f;
            }
        }
    }
}

/* Offset in the phase planes of tap (a, b) of output (0, 0). */
static int64_t dlrt_dw_tap_off(const dlrt_win3 *g, const dlrt_dw_plan *t, int64_t a, int64_t b) {
    const int64_t sh = g->stride[1], sw = g->stride[2], ra = a * g->dil[1], cb = b * g->dil[2];
    return ((ra % sh) * sw + cb % sw) * t->sub + (ra / sh) * t->wq + cb / sw;
}

/* One tile: output rows oh0..oh0+nr of depth slice od, columns c0..c0+cn. The outputs land in
 * acc (nr x cn) and go through the epilogue and into y from there. */
static void dlrt_dw_tile_run(const dlrt_win3 *g, const dlrt_dw_plan *t, const float *x,
                             const float *w, float *y, int64_t oc, const dlrt_epilogue *ep,
                             int64_t od, int64_t oh0, int64_t nr, int64_t c0, int64_t cn,
                             float *slab, float *acc) {
    const int64_t kh = g->k[1], kw = g->k[2], ow_n = g->out[2], wq = t->wq;
    const int64_t id = od * g->stride[0] - g->pad[0];
    const float *xs = id >= 0 && id < g->in[0] ? x + id * g->in[1] * g->in[2] : NULL;
    dlrt_dw_fill(g, xs, oh0 * g->stride[1] - g->pad[1], c0 * g->stride[2] - g->pad[2],
                 nr + t->eh - 1, wq, t->sub, t->cw < ow_n, slab);
    const int64_t taps = kh * kw;
    const float *pt[DLRT_DW_FIXED];
    if (taps <= DLRT_DW_FIXED) {
        for (int64_t i = 0; i < taps; i++) pt[i] = slab + t->off[i];
        switch (taps) {
        case 3:
            dlrt_dw_fixed(pt, w, nr, cn, wq, acc, 3);
            break;
        case 9:
            dlrt_dw_fixed(pt, w, nr, cn, wq, acc, 9);
            break;
        case 25:
            dlrt_dw_fixed(pt, w, nr, cn, wq, acc, 25);
            break;
        case 49:
            dlrt_dw_fixed(pt, w, nr, cn, wq, acc, 49);
            break;
        default:
            for (int64_t j = 0; j < nr * cn; j++) acc[j] = 0.0f;
            dlrt_dw_taps(pt, w, taps, nr, cn, wq, acc);
            break;
        }
    } else { /* many taps: DLRT_DW_FIXED of a kernel row at a time */
        for (int64_t j = 0; j < nr * cn; j++) acc[j] = 0.0f;
        for (int64_t a = 0; a < kh; a++)
            for (int64_t b0 = 0; b0 < kw; b0 += DLRT_DW_FIXED) {
                const int64_t nb = DLRT_MIN((int64_t)DLRT_DW_FIXED, kw - b0);
                for (int64_t b = 0; b < nb; b++) pt[b] = slab + dlrt_dw_tap_off(g, t, a, b0 + b);
                dlrt_dw_taps(pt, w + a * kw + b0, nb, nr, cn, wq, acc);
            }
    }
    const int64_t j0 = (od * g->out[1] + oh0) * ow_n + c0;
    if (cn == ow_n) { /* whole rows: one run of y */
        dlrt_epi_apply(ep, oc, j0, acc, nr * cn);
        memcpy(y + j0, acc, (size_t)(nr * cn) * sizeof(float));
        return;
    }
    for (int64_t i = 0; i < nr; i++) {
        dlrt_epi_apply(ep, oc, j0 + i * ow_n, acc + i * cn, cn);
        memcpy(y + j0 + i * ow_n, acc + i * cn, (size_t)cn * sizeof(float));
    }
}

int dlrt_conv_dw_plan(const dlrt_win3 *g, int64_t cap, dlrt_dw_plan *pl) {
    if (g->k[0] != 1 || !dlrt_dw_fit(g, cap, pl)) return 0;
    if (g->k[1] * g->k[2] <= DLRT_DW_FIXED)
        for (int64_t a = 0; a < g->k[1]; a++)
            for (int64_t b = 0; b < g->k[2]; b++)
                pl->off[a * g->k[2] + b] = dlrt_dw_tap_off(g, pl, a, b);
    return 1;
}

void dlrt_conv_dw_plane(const dlrt_win3 *g, const dlrt_dw_plan *pl, const float *x, const float *w,
                        float *y, int64_t oc, const dlrt_epilogue *ep, int64_t r0, int64_t r1,
                        float *buf) {
    const int64_t planes = g->stride[1] * g->stride[2] * pl->sub;
    /* rows of a short last tile and the slack are read for outputs that are thrown away: make
     * them numbers */
    for (int64_t i = 0; i < planes + DLRT_DW_VEC; i++) buf[i] = 0.0f;
    float *acc = buf + planes + DLRT_DW_VEC;
    const int64_t oh_n = g->out[1], ow_n = g->out[2];
    for (int64_t r = r0; r < r1;) {
        const int64_t od = r / oh_n, oh0 = r % oh_n;
        const int64_t nr = DLRT_MIN(DLRT_MIN(pl->rh, oh_n - oh0), r1 - r);
        for (int64_t c0 = 0; c0 < ow_n; c0 += pl->cw)
            dlrt_dw_tile_run(g, pl, x, w, y, oc, ep, od, oh0, nr, c0, DLRT_MIN(pl->cw, ow_n - c0),
                             buf, acc);
        r += nr;
    }
}

/* Output rows [r0, r1) of one plane for any geometry: per output row, the taps inside the input
 * in each dim form an interval; the row is accumulated in chunks in a local buffer. */
static void dlrt_dw_plane_any(const dlrt_win3 *g, const float *x, const float *w, float *y,
                              int64_t oc, const dlrt_epilogue *ep, int64_t r0, int64_t r1) {
    enum { CH = 256 };
    float acc[CH];
    const int64_t ow_n = g->out[2], sw = g->stride[2];
    for (int64_t r = r0; r < r1; r++) {
        const int64_t od = r / g->out[1], oh = r % g->out[1];
        int64_t d_lo, d_hi, h_lo, h_hi;
        dlrt_win_taps(od, g->stride[0], g->pad[0], g->dil[0], g->k[0], g->in[0], &d_lo, &d_hi);
        dlrt_win_taps(oh, g->stride[1], g->pad[1], g->dil[1], g->k[1], g->in[1], &h_lo, &h_hi);
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
                        for (int64_t j = lo; j < hi; j++) acc[j] += wv * xr[base + j * sw];
                    }
                }
            }
            dlrt_epi_apply(ep, oc, r * ow_n + c0, acc, cn);
            memcpy(y + r * ow_n + c0, acc, (size_t)cn * sizeof(float));
        }
    }
}

typedef struct dlrt_dw_job {
    const dlrt_conv *p;
    const dlrt_win3 *g;
    const dlrt_dw_plan *plan;
    const float *x, *w;
    float *y;
    const dlrt_epilogue *ep;
    int64_t cv, c_rest, mult, rows, blocks;
    int fast;
} dlrt_dw_job;

/* Units [lo, hi): a block of rows of a plane. */
static void dlrt_dw_units(void *ctx, int64_t lo, int64_t hi) {
    const dlrt_dw_job *j = ctx;
    const dlrt_conv *p = j->p;
    const dlrt_win3 *g = j->g;
    const int64_t rows = j->rows, blocks = j->blocks;
    for (int64_t u = lo; u < hi; u++) {
        const int64_t pl = u / blocks, blk = u % blocks;
        const int64_t r0 = rows * blk / blocks, r1 = rows * (blk + 1) / blocks;
        const int64_t b = pl / j->c_rest, oc = j->cv + pl % j->c_rest;
        const float *xp = j->x + (b * p->c_in + oc / j->mult) * g->in_sp, *wp = j->w + oc * g->k_sp;
        float *yp = j->y + (b * p->c_out + oc) * g->out_sp;
        dlrt_epilogue e;
        const dlrt_epilogue *eb = dlrt_conv_ep(p, g->out_sp, j->ep, b, 0, &e);
        float buf[DLRT_DW_BUF];
        if (j->fast)
            dlrt_conv_dw_plane(g, j->plan, xp, wp, yp, oc, eb, r0, r1, buf);
        else
            dlrt_dw_plane_any(g, xp, wp, yp, oc, eb, r0, r1);
    }
}

void dlrt_conv_depthwise(const dlrt_conv *p, const float *x, const float *w, float *y,
                         const dlrt_epilogue *ep) {
    dlrt_win3 g;
    dlrt_conv_geom(p, &g);
    if (p->n <= 0 || p->c_out <= 0 || g.out_sp <= 0 || p->c_in <= 0) return;
    /* 3x3 on wide planes straight from the rows (depthwise-row.c) */
    if (dlrt_conv_dw_row(p, &g, x, w, y, ep)) return;
    /* the first channels 16 at a time where that kernel applies (depthwise-cv.c) */
    const int64_t cv = dlrt_conv_dw_cv(p, &g, x, w, y, ep), c_rest = p->c_out - cv;
    const int64_t mult = p->c_out / p->c_in, planes = p->n * c_rest;
    if (planes <= 0) return;
    const int64_t rows = g.out[0] * g.out[1];
    const int64_t blocks = dlrt_conv_row_blocks(planes, rows);
    const int64_t units = planes * blocks;
    dlrt_dw_plan plan;
    const int fast = dlrt_conv_dw_plan(&g, DLRT_DW_BUF, &plan);
    dlrt_dw_job job = {p, &g, &plan, x, w, y, ep, cv, c_rest, mult, rows, blocks, fast};
    dlrt_parallel_for(units, (double)planes * (double)g.out_sp * (double)g.k_sp >= DLRT_PAR_MIN,
                      dlrt_dw_units, &job);
}
