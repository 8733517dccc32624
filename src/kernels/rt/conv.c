/* conv.c — dlrt_conv_forward / dlrt_conv_workspace: ONNX Conv (1-3 spatial dims, groups,
 * strides, dilations, pads) over float32 NCHW, with the GEMM epilogue per output channel.
 *
 * Five algorithms; dlrt_conv_choose picks one from the layer's fields alone (its geometry, a
 * tuning record's pick, and whether its products are bfloat16: never from the build), so the
 * host, which sizes the workspace, and the generated code, which runs it, always agree:
 *   - depthwise (one input channel per group, any channel multiplier): direct, depthwise.c;
 *   - Winograd F(4x4, 3x3) for 3x3 stride-1 convolutions where it pays, winograd.c;
 *   - else 2-D stride-1 layers with at most 32 taps per output (c_in x k_h x k_w, as a first layer
 *     on grey images has): direct, conv-direct.c;
 *   - 1x1, stride 1, no padding: per image and group, y = W x is one GEMM on the input itself;
 *   - otherwise one GEMM W_g[c_out/g, c_in/g * k] x col[c_in/g * k, out_spatial] per image and
 *     group. When col is the product's right operand it is never written out: the GEMM packs
 *     its panels straight from the image (dlrt_conv_gather_cols), which saves writing the
 *     columns to memory and reading them back. Else (a transposed product) im2col writes col
 *     into the caller's workspace, reused by every image and group. Parallelism comes from
 *     inside the GEMM (and im2col), or, for batches of small images, from chunks of images each
 *     with its own columns (dlrt_conv_chunks_of).
 * Spatial ranks 1 and 2 are run as rank 3 with leading dims of 1. */
#include "conv-impl.h"
#include "gemm-micro.h" /* DLRT_GEMM_VBYTES: the tiles this build runs */

static int dlrt_conv_is_1x1(const dlrt_win3 *g) {
    for (int d = 0; d < 3; d++)
        if (g->k[d] != 1 || g->stride[d] != 1 || g->pad[d] != 0 || g->out[d] != g->in[d]) return 0;
    return 1;
}

/* One tap's rows of the im2col matrix for a stride-1 window whose output is as wide as its
 * input (a 3x3 convolution with pad 1): the tap's valid output rows [h_lo, h_hi) read one run of
 * the image, shifted by a constant, so they are copied at once (one call instead of one per
 * output row, which dominated on 7x7 planes); the columns that run into the previous or next
 * image row are padding, zeroed after. dst is the tap's out[1] x w plane; src the input plane. */
static void dlrt_conv_im2col_plane(const float *src, int64_t shift, int64_t h_lo, int64_t h_hi,
                                   int64_t rows, int64_t w, int64_t w_lo, int64_t w_hi,
                                   float *dst) {
    if (h_lo >= h_hi || w_lo >= w_hi) {
        memset(dst, 0, (size_t)(rows * w) * sizeof(float));
        return;
    }
    memset(dst, 0, (size_t)(h_lo * w) * sizeof(float));
    const int64_t first = h_lo * w + w_lo, end = (h_hi - 1) * w + w_hi;
    memcpy(dst + first, src + first + shift, (size_t)(end - first) * sizeof(float));
    for (int64_t oh = h_lo; oh < h_hi; oh++) {
        for (int64_t ow = 0; ow < w_lo; ow++) dst[oh * w + ow] = 0.0f;
        for (int64_t ow = w_hi; ow < w; ow++) dst[oh * w + ow] = 0.0f;
    }
    memset(dst + h_hi * w, 0, (size_t)((rows - h_hi) * w) * sizeof(float));
}

/* d[0, len) = src[j * sw]: a run of outputs whose taps are inside the input. Runs are often
 * short (an output row, 8 lines on a LeNet's 8x8 planes), so a copy is whole blocks of 8 (one or
 * two vector moves) and a remainder, rather than a library call that costs more than the copy. */
static DLRT_INLINE void dlrt_conv_copy_run(float *restrict d, const float *restrict src, int len,
                                           int64_t sw) {
    int j = 0;
    if (sw == 1) {
        for (; j + 8 <= len; j += 8)
            for (int t = 0; t < 8; t++) d[j + t] = src[j + t];
        for (; j < len; j++) d[j] = src[j];
    } else if (sw == 2) {
        for (; j < len; j++) d[j] = src[j * 2];
    } else {
        for (; j < len; j++) d[j] = src[j * sw];
    }
}

/* Lines per piece of a gather call (its runs fit a stack array); kernel widths whose valid
 * output spans are worked out once per piece. */
enum { DLRT_CONV_GATHER_LINES = 256, DLRT_CONV_GATHER_KW = 16 };

typedef struct dlrt_im2col_job {
    const dlrt_win3 *g;
    const float *x;
    float *col;
    int whole;
} dlrt_im2col_job;

/* Rows [lo, hi) of col (dlrt_conv_im2col). */
static void dlrt_conv_im2col_rows(void *ctx, int64_t lo, int64_t hi) {
    const dlrt_im2col_job *j = ctx;
    const dlrt_win3 *g = j->g;
    const float *x = j->x;
    float *col = j->col;
    const int64_t ow_n = g->out[2], sw = g->stride[2];
    const int whole = j->whole;
    for (int64_t r = lo; r < hi; r++) {
        int64_t ci = r / g->k_sp, t = r % g->k_sp;
        int64_t kw = t % g->k[2], kh = (t / g->k[2]) % g->k[1], kd = t / (g->k[2] * g->k[1]);
        const float *xc = x + ci * g->in_sp;
        float *dst = col + r * g->out_sp;
        const int64_t woff = kw * g->dil[2] - g->pad[2];
        const int64_t hoff = kh * g->dil[1] - g->pad[1];
        int64_t w_lo, w_hi, h_lo, h_hi;
        dlrt_conv_span(ow_n, sw, woff, g->in[2], &w_lo, &w_hi);
        dlrt_conv_span(g->out[1], g->stride[1], hoff, g->in[1], &h_lo, &h_hi);
        for (int64_t od = 0; od < g->out[0]; od++) {
            int64_t id = od * g->stride[0] - g->pad[0] + kd * g->dil[0];
            if (whole) {
                const int64_t plane = g->out[1] * ow_n;
                const int inside = id >= 0 && id < g->in[0];
                dlrt_conv_im2col_plane(xc + (inside ? id : 0) * g->in[1] * g->in[2],
                                       hoff * g->in[2] + woff, inside ? h_lo : 0, inside ? h_hi : 0,
                                       g->out[1], ow_n, w_lo, w_hi, dst);
                dst += plane;
                continue;
            }
            for (int64_t oh = 0; oh < g->out[1]; oh++, dst += ow_n) {
                int64_t ih = oh * g->stride[1] + hoff;
                if (id < 0 || id >= g->in[0] || oh < h_lo || oh >= h_hi || w_lo >= w_hi) {
                    memset(dst, 0, (size_t)ow_n * sizeof(float));
                    continue;
                }
                const float *src = xc + (id * g->in[1] + ih) * g->in[2];
                for (int64_t ow = 0; ow < w_lo; ow++) dst[ow] = 0.0f;
                if (sw == 1) /* rows are short (8 floats on a LeNet's 8x8 planes): no call */
                    dlrt_conv_copy_run(dst + w_lo, src + w_lo + woff, (int)(w_hi - w_lo), 1);
                else if (sw == 2) /* a constant stride vectorizes (even/odd permutes) */
                    for (int64_t ow = w_lo; ow < w_hi; ow++) dst[ow] = src[ow * 2 + woff];
                else
                    for (int64_t ow = w_lo; ow < w_hi; ow++) dst[ow] = src[ow * sw + woff];
                for (int64_t ow = w_hi; ow < ow_n; ow++) dst[ow] = 0.0f;
            }
        }
    }
}

/* col[(ci * k_sp + tap) * out_sp + o] = x[ci] at the tap's input position for output o, or 0 in
 * the padding. */
void dlrt_conv_im2col(const dlrt_win3 *g, int64_t cig, const float *x, float *col) {
    const int64_t rows = cig * g->k_sp, ow_n = g->out[2], sw = g->stride[2];
    /* work per row of col, in the units of DLRT_PAR_MIN: a copied element counts 1, a strided
     * gather 4 (it shuffles vectors), and a copy call per output row about 32, or one per
     * plane when rows run together (MobileNetV2's first layer, 27 rows of 112x112 at stride 2,
     * ran on one thread) */
    const int whole = sw == 1 && g->stride[1] == 1 && g->in[2] == ow_n;
    const double per_row = (double)g->out_sp * (sw == 1 ? 1.0 : 4.0) +
                           (whole ? 64.0 : 32.0 * (double)(g->out_sp / ow_n));
    const int par = (double)rows * per_row >= DLRT_PAR_MIN;
    if (!par && dlrt_conv_inside(g) && rows <= INT32_MAX && g->out_sp <= INT32_MAX) {
        /* no padding to test for: the gather's copies, into one panel as wide as a row, so
         * that its lines (outputs) are the matrix's columns; 20 cycles a row went to the
         * bounds below on a LeNet's 8-wide rows (the weight gradient's columns) */
        const dlrt_conv_cols cc = {g, x};
        for (int64_t i0 = 0; i0 < g->out_sp; i0 += DLRT_CONV_GATHER_LINES)
            dlrt_conv_gather_cols(&cc, i0, (int)DLRT_MIN(DLRT_CONV_GATHER_LINES, g->out_sp - i0), 0,
                                  (int)rows, (int)g->out_sp, 0, col + i0);
        return;
    }
    dlrt_im2col_job job = {g, x, col, whole};
    dlrt_parallel_for(rows, par, dlrt_conv_im2col_rows, &job);
}

/* A run of len lines of one gathered panel that are outputs of one row: at depth 0 they go to
 * dst + base on; they are outputs ow0.. of the row whose tap (0, 0, 0) would read input row ih0
 * at depth id0 with no padding. */
typedef struct dlrt_conv_seg {
    size_t base;
    int64_t ow0, ih0, id0;
    int64_t src; /* input offset of tap (0, 0, 0) of output ow0, for windows inside the input */
    int len;
} dlrt_conv_seg;

/* Outputs [a, e) of one run into d[0, e - a): input src[j * sw + woff] for j in [lo, hi), zero
 * elsewhere. */
static DLRT_INLINE void dlrt_conv_gather_run(float *restrict d, const float *src, int64_t a,
                                             int64_t e, int64_t lo, int64_t hi, int64_t sw,
                                             int64_t woff) {
    for (int64_t j = a; j < lo; j++) d[j - a] = 0.0f;
    if (sw == 1)
        for (int64_t j = lo; j < hi; j++) d[j - a] = src[j + woff];
    else if (sw == 2) /* a constant stride vectorizes */
        for (int64_t j = lo; j < hi; j++) d[j - a] = src[j * 2 + woff];
    else
        for (int64_t j = lo; j < hi; j++) d[j - a] = src[j * sw + woff];
    for (int64_t j = hi; j < e; j++) d[j - a] = 0.0f;
}

/* Depths per block of tap offsets in dlrt_conv_gather_inside. */
enum { DLRT_CONV_GATHER_DEPTHS = 128 };

/* dlrt_conv_gather_cols's runs seg[0, nseg) at depths [p0, p0 + kc) when every tap is inside the
 * input: the depths' input offsets are worked out once per block, then each run is copied at
 * every depth of the block, so that the inner loop is a copy of a run and a step. */
static void dlrt_conv_gather_inside(const dlrt_conv_cols *c, const dlrt_conv_seg *seg, int nseg,
                                    int64_t p0, int kc, int w, float *restrict dst) {
    const dlrt_win3 *g = c->g;
    const int64_t sw = g->stride[2];
    int64_t ci = p0 / g->k_sp, kw = p0 % g->k_sp % g->k[2];
    int64_t kh = p0 % g->k_sp / g->k[2] % g->k[1], kd = p0 % g->k_sp / (g->k[2] * g->k[1]);
    int64_t off[DLRT_CONV_GATHER_DEPTHS];
    for (int pb = 0; pb < kc; pb += DLRT_CONV_GATHER_DEPTHS) {
        const int nb = DLRT_MIN(DLRT_CONV_GATHER_DEPTHS, kc - pb);
        for (int p = 0; p < nb; p++) {
            off[p] = ci * g->in_sp + (kd * g->dil[0] * g->in[1] + kh * g->dil[1]) * g->in[2] +
                     kw * g->dil[2];
            if (++kw == g->k[2] && (kw = 0, ++kh == g->k[1]) && (kh = 0, ++kd == g->k[0]))
                kd = 0, ci++;
        }
        for (int s = 0; s < nseg; s++) {
            float *d = dst + seg[s].base + (size_t)pb * (size_t)w;
            const float *x = c->x + seg[s].src;
            const int len = seg[s].len;
            if (sw == 1 && len == 8) /* an 8-wide output row (LeNet's second layer) */
                for (int p = 0; p < nb; p++, d += w)
                    for (int t = 0; t < 8; t++) d[t] = x[off[p] + t];
            else
                for (int p = 0; p < nb; p++, d += w) dlrt_conv_copy_run(d, x + off[p], len, sw);
        }
    }
}

void dlrt_conv_gather_cols(const void *ctx, int64_t i0, int m, int64_t p0, int kc, int w,
                           size_t pstride, float *restrict dst) {
    const dlrt_conv_cols *c = ctx;
    const dlrt_win3 *g = c->g;
    const int64_t ow_n = g->out[2], sw = g->stride[2];
    const int inside = dlrt_conv_inside(g);
    /* pieces of whole panels, each cut once into runs that share a row (and a panel), so that
     * per depth only the tap changes */
    const int piece = DLRT_MAX(DLRT_CONV_GATHER_LINES / w, 1) * w;
    for (int q = 0; q < m; q += piece) {
        dlrt_conv_seg seg[DLRT_CONV_GATHER_LINES]; /* each run is a line at least */
        int nseg = 0;
        const int qm = DLRT_MIN(piece, m - q);
        for (int ii = 0; ii < qm;) {
            const int64_t o = i0 + q + ii, row = o / ow_n, ow = o % ow_n;
            const int in_panel = w - ii % w;
            const int len =
                (int)DLRT_MIN(DLRT_MIN(ow_n - ow, (int64_t)in_panel), (int64_t)(qm - ii));
            const int64_t ih0 = row % g->out[1] * g->stride[1],
                          id0 = row / g->out[1] * g->stride[0];
            seg[nseg++] = (dlrt_conv_seg){.base = (size_t)(q + ii) / (size_t)w * pstride +
                                                  (size_t)((q + ii) % w),
                                          .ow0 = ow,
                                          .ih0 = ih0,
                                          .id0 = id0,
                                          .src = (id0 * g->in[1] + ih0) * g->in[2] + ow * sw,
                                          .len = len};
            ii += len;
        }
        if (inside) {
            dlrt_conv_gather_inside(c, seg, nseg, p0, kc, w, dst);
            continue;
        }
        /* depth p0's tap, then stepped per depth (kw fastest, as in a weight row): the divisions
         * cost as much as a run's copy */
        int64_t ci = p0 / g->k_sp, kw = p0 % g->k_sp % g->k[2];
        int64_t kh = p0 % g->k_sp / g->k[2] % g->k[1], kd = p0 % g->k_sp / (g->k[2] * g->k[1]);
        /* the valid outputs of each column of taps, for the usual narrow kernels */
        int64_t span[DLRT_CONV_GATHER_KW][2];
        const int64_t spans = DLRT_MIN(g->k[2], (int64_t)DLRT_CONV_GATHER_KW);
        for (int64_t k = 0; k < spans; k++)
            dlrt_conv_span(ow_n, sw, k * g->dil[2] - g->pad[2], g->in[2], &span[k][0], &span[k][1]);
        for (int p = 0; p < kc; p++) {
            const int64_t woff = kw * g->dil[2] - g->pad[2], hoff = kh * g->dil[1] - g->pad[1];
            const int64_t doff = kd * g->dil[0] - g->pad[0];
            const float *xc = c->x + ci * g->in_sp;
            const int64_t k_w = kw;
            if (++kw == g->k[2] && (kw = 0, ++kh == g->k[1]) && (kh = 0, ++kd == g->k[0]))
                kd = 0, ci++;
            int64_t w_lo, w_hi;
            if (k_w < spans)
                w_lo = span[k_w][0], w_hi = span[k_w][1];
            else
                dlrt_conv_span(ow_n, sw, woff, g->in[2], &w_lo, &w_hi);
            for (int s = 0; s < nseg; s++) {
                float *d = dst + seg[s].base + (size_t)p * (size_t)w;
                const int64_t ih = seg[s].ih0 + hoff, id = seg[s].id0 + doff;
                const int64_t a = seg[s].ow0, e = a + seg[s].len;
                int64_t lo = e, hi = e; /* the valid outputs [lo, hi) of [a, e) */
                const float *src = xc;  /* the input row the tap reads, where there is one */
                if (ih >= 0 && ih < g->in[1] && id >= 0 && id < g->in[0]) {
                    lo = DLRT_MIN(DLRT_MAX(w_lo, a), e);
                    hi = DLRT_MIN(DLRT_MAX(w_hi, lo), e);
                    src = xc + (id * g->in[1] + ih) * g->in[2];
                }
                dlrt_conv_gather_run(d, src, a, e, lo, hi, sw, woff);
            }
        }
    }
}

/* How the 1x1 and im2col algorithms split a batch: chunks of images run in parallel, each with
 * cols floats of im2col columns (0 for 1x1), when one image's GEMMs are too small to be parallel
 * inside (LeNet's layers at batch 64); one chunk (the images in order, the parallelism inside
 * im2col and the GEMM) for a single image, a large image, or too little work to fork for. Each
 * image is computed the same way either way, so the results do not depend on the split. */
typedef struct dlrt_conv_chunking {
    int64_t chunks, cols;
} dlrt_conv_chunking;

static dlrt_conv_chunking dlrt_conv_chunks_of(const dlrt_conv *p, const dlrt_win3 *g, int im2col) {
    const int64_t cig = p->c_in / p->group, cog = p->c_out / p->group, kdim = cig * g->k_sp;
    dlrt_conv_chunking c = {1, im2col ? kdim * g->out_sp : 0};
    const double gemm = (double)cog * (double)kdim * (double)g->out_sp;
    if (p->n < 2 || gemm <= 0 || gemm >= DLRT_CONV_IMAGE_PAR) return c;
    const double by_work = gemm * (double)p->group * (double)p->n / DLRT_CONV_CHUNK_WORK;
    dlrt_conv_chunking t = {by_work < DLRT_CONV_CHUNKS ? (int64_t)by_work : DLRT_CONV_CHUNKS,
                            dlrt_conv_round16(c.cols)};
    t.chunks = DLRT_MIN(t.chunks, p->n);
    while (t.chunks > 1 && (size_t)(t.chunks * t.cols) * sizeof(float) > DLRT_CONV_CHUNK_WS_MAX)
        t.chunks--;
    return t.chunks > 1 ? t : c;
}

/* Images [b0, b1) of the 1x1 and im2col algorithms: one GEMM per image and group. */
static void dlrt_conv_gemm_images(const dlrt_conv *p, const dlrt_win3 *g, int im2col, int64_t b0,
                                  int64_t b1, const float *x, const float *w, const float *wpacked,
                                  int wpack_mode, float *y, float *col, float *gws,
                                  size_t gws_bytes, const dlrt_epilogue *ep) {
    const int64_t cig = p->c_in / p->group, cog = p->c_out / p->group;
    const int64_t kdim = cig * g->k_sp; /* GEMM K: one weight row */
    /* packed weights (one group, c0 = 0) are the whole left operand */
    const int a_mode = wpacked ? wpack_mode : 0;
    /* the columns are made where the GEMM packs them (no pass writing them to memory and one
     * reading them back) when it runs them as its right operand: transposed, they are the left
     * one, packed a few lines at a time, which the gather's work per depth does not pay for */
    /* (bfloat16 products write the columns out: gathered a panel or a group of panels at a
     * time into float32 and converted from there, 128 channels 3x3 on 28x28 took 0.75-0.79 ms
     * against 0.65, one thread) */
    const int gather =
        DLRT_CONV_GATHER && im2col && !p->bf16 &&
        (a_mode ? a_mode == DLRT_A_PACKED : !dlrt_sgemm_transposes(cog, g->out_sp, kdim));
    for (int64_t b = b0; b < b1; b++)
        for (int64_t gi = 0; gi < p->group; gi++) {
            const int64_t c0 = gi * cog;
            const float *xg = x + (b * p->c_in + gi * cig) * g->in_sp;
            const float *a = wpacked ? wpacked : w + c0 * kdim;
            float *yg = y + (b * p->c_out + c0) * g->out_sp;
            dlrt_epilogue e;
            const dlrt_epilogue *eb = dlrt_conv_ep(p, g->out_sp, ep, b, c0, &e);
            if (gather) {
                const dlrt_conv_cols cols = {g, xg};
                const dlrt_gemm_gather bg = {dlrt_conv_gather_cols, &cols};
                dlrt_sgemm_gather(cog, g->out_sp, kdim, a, kdim, 0, a_mode, &bg, yg, g->out_sp, eb,
                                  gws, gws_bytes);
                continue;
            }
            const float *src = xg;
            if (im2col && kdim > 0) {
                dlrt_conv_im2col(g, cig, xg, col);
                src = col;
            }
            dlrt_conv_sgemm(p)(cog, g->out_sp, kdim, a, kdim, 0, a_mode, src, g->out_sp, 0, 0, yg,
                               g->out_sp, eb, gws, gws_bytes);
        }
}

/* Bytes of workspace the GEMM of one image and group may pack its per-call operand into (the
 * image side; the weights are prepacked or small): only when images run one after the other
 * (chunking c), each GEMM then parallel inside. It follows the im2col columns at a 64-byte
 * boundary, *at floats into the workspace. */
static size_t dlrt_conv_gemm_ws(const dlrt_conv *p, const dlrt_win3 *g, const dlrt_conv_chunking *c,
                                int64_t *at) {
    *at = dlrt_conv_round16(c->cols);
    if (c->chunks != 1) return 0;
    const int64_t cig = p->c_in / p->group, cog = p->c_out / p->group;
    return dlrt_gemm_workspace(cog, g->out_sp, cig * g->k_sp, 1, 0);
}

typedef struct dlrt_conv_chunks_job {
    const dlrt_conv *p;
    const dlrt_win3 *g;
    const float *x, *w, *wpacked;
    float *y, *col;
    const dlrt_epilogue *ep;
    int64_t chunks, cols;
    int im2col, wpack_mode;
} dlrt_conv_chunks_job;

/* Chunks [lo, hi) of images, each with its own columns (dlrt_conv_gemm). */
static void dlrt_conv_gemm_chunks(void *ctx, int64_t lo, int64_t hi) {
    const dlrt_conv_chunks_job *j = ctx;
    const int64_t n = j->p->n, chunks = j->chunks;
    for (int64_t k = lo; k < hi; k++)
        dlrt_conv_gemm_images(j->p, j->g, j->im2col, k * n / chunks, (k + 1) * n / chunks, j->x,
                              j->w, j->wpacked, j->wpack_mode, j->y,
                              j->col ? j->col + k * j->cols : NULL, NULL, 0, j->ep);
}

static void dlrt_conv_gemm(const dlrt_conv *p, const dlrt_win3 *g, int im2col, const float *x,
                           const float *w, const float *wpacked, int wpack_mode, float *y,
                           void *workspace, const dlrt_epilogue *ep) {
    const dlrt_conv_chunking c = dlrt_conv_chunks_of(p, g, im2col);
    float *col = im2col ? (float *)workspace : NULL;
    if (c.chunks == 1) {
        int64_t at;
        const size_t gws_bytes = workspace ? dlrt_conv_gemm_ws(p, g, &c, &at) : 0;
        float *gws = gws_bytes ? (float *)workspace + at : NULL;
        dlrt_conv_gemm_images(p, g, im2col, 0, p->n, x, w, wpacked, wpack_mode, y, col, gws,
                              gws_bytes, ep);
        return;
    }
    /* chunk k: images [k n / C, (k+1) n / C) with the k-th columns; which thread runs it does
     * not matter */
    dlrt_conv_chunks_job job = {.p = p,
                                .g = g,
                                .x = x,
                                .w = w,
                                .wpacked = wpacked,
                                .y = y,
                                .col = col,
                                .ep = ep,
                                .chunks = c.chunks,
                                .cols = c.cols,
                                .im2col = im2col,
                                .wpack_mode = wpack_mode};
    dlrt_parallel(c.chunks, c.chunks, 1, 0, dlrt_conv_gemm_chunks, &job);
}

/* The cost model behind dlrt_conv_choose, in integers (saturating), so that the host library
 * and generated code built with other flags always decide alike. A GEMM of M x N x K costs
 * MAC * M * ceil(N / NR) * NR * (K + K0): its multiply-adds, with columns computed in panels
 * and a fixed cost per row of the operands' depth. im2col adds COPY per element it copies;
 * Winograd adds WT per transformed weight (36 per filter at F(4x4), every call) and IO per
 * element of its input and output transforms, and runs 36 GEMMs per batch of images.
 *
 * Fitted to single-thread measurements (AVX-512 EPYC, the rt sources at gcc -O3 -march=native
 * -fopenmp with OMP_NUM_THREADS=1, dlrt_sgemm with the AVX-512 microkernel) of 3x3
 * convolutions with c_in = c_out = C, pad 1: the im2col time over the Winograd time
 * (> 1: Winograd faster); the machine was shared, so take +-10%:
 *              batch 1                             batch 4
 *   C \ HxW    7     14    28    56    112         7     14    28    56    112
 *     8       0.16  0.28  0.49  0.63  0.81        0.48  0.66  0.67  0.82  0.85
 *    16       0.39  0.41  0.73  1.06  1.15        0.63  0.88  0.89  1.01  1.12
 *    32       0.37  0.57  1.04  1.33  2.00        0.82  1.15  1.20  1.29  1.47
 *    64       0.45  0.88  1.32  1.38  1.55        1.00  1.63  1.34  1.33  1.32
 *   128       0.45  0.99  1.67  1.62  1.98        1.15  1.85  1.60  1.54
 *   256       0.40  0.88  1.61  1.52              0.90  1.52  1.53
 *   512       0.19  0.65  1.41                    0.80  2.10
 * ResNet-50's 3x3 layers at batch 1, im2col / Winograd in ms: 64ch 56x56 1.47 / 1.06, 128ch
 * 28x28 1.49 / 0.89, 256ch 14x14 1.71 / 1.95, 512ch 7x7 2.18 / 11.4 (the transform of 512 x 512
 * filters alone writes 38 MB). Winograd is chosen where the model expects it to be MARGIN
 * percent faster: that is every case of the table at 1.29 or more and none below (it passes
 * up the few at 1.1-1.2). Re-measure (test_rtconv --bench) when the GEMM changes.
 *
 * Two tile sizes: the model costs F(4x4) and F(2x2) (16 GEMMs, IO2 per transformed element: its
 * transforms are additions only) and takes the cheaper. Their products have few columns, so
 * they are costed in whichever orientation pads less (dlrt_cost_gemm_either), as dlrt_sgemm
 * runs them. Weights transformed at load time are not free either: a model's weights do not
 * stay in cache from one run to the next, so each batch of GEMMs reads them from memory (WREAD
 * per transformed weight; 4 times the filters at F(4x4), 1.8 times at F(2x2)). WREAD and IO2
 * were fitted to ResNet-50's 3x3 stride-1 layers timed inside the model (dlcc profile, batch
 * 1, one thread, each forced to each algorithm), im2col / F(4x4) / F(2x2) in ms:
 *   64ch 56x56 1.39 / 0.92 / 1.04; 128ch 28x28 1.24 / 0.72 / 0.84;
 *   256ch 14x14 1.33 / 1.29 / 0.82; 512ch 7x7 1.26 / 2.08 / 2.07.
 * The model picks the fastest of each row. Since the transforms run on vectors of tiles
 * (winograd.c), Winograd is cheaper than IO and IO2 say, but the picks stand, re-timed the
 * same way, implicit GEMM (now the alternative to Winograd) / F(4x4) / F(2x2) in ms:
 *   64ch 56x56 0.96 / 0.44-0.63 / 0.71-0.89; 128ch 28x28 0.95 / 0.48-0.50 / 0.62-0.69;
 *   256ch 14x14 0.955 / 0.76 / 0.67; 512ch 7x7 1.10 / - / 1.13-1.23.
 * (Alone, with its weights in cache, the 256-channel layer took 0.74 ms at F(4x4): 9.4 MB of
 * transformed weights per call are what it loses in the model.) Without packed weights (AOT
 * bundles, training) F(2x2) is picked in three cases of the table's grid, timed as im2col / F(4x4)
 * / F(2x2) in ms: 256ch 7x7 batch 4 2.61 / 2.53 / 1.57 and 512ch 7x7 batch 4 10.2 / 12.4 / 8.3
 * (right), 512ch 14x14 batch 1 6.05 / 12.2 / 7.45 (wrong: the model misses that 16.8 MB of weights
 * transformed per call do not stay in cache; charging every unpacked case for that loses the two
 * right picks and two of the table's). */
enum {
    DLRT_COST_MAC = 11,
    DLRT_COST_NR = 16,
    DLRT_COST_K0 = 32,
    DLRT_COST_COPY = 100,
    DLRT_COST_WT = 400,
    DLRT_COST_MR = 6,
    DLRT_COST_IO = 400,
    DLRT_COST_IO2 = 200,
    DLRT_COST_WREAD = 300,
    DLRT_COST_MARGIN = 120
};

static int64_t dlrt_cost_mul(int64_t a, int64_t b) {
    if (a <= 0 || b <= 0) return 0;
    return a > INT64_MAX / b ? INT64_MAX : a * b;
}

static int64_t dlrt_cost_add(int64_t a, int64_t b) {
    return a > INT64_MAX - b ? INT64_MAX : a + b;
}

static int64_t dlrt_cost_gemm(int64_t m, int64_t n, int64_t k) {
    const int64_t cols = (n + DLRT_COST_NR - 1) / DLRT_COST_NR * DLRT_COST_NR;
    return dlrt_cost_mul(dlrt_cost_mul(dlrt_cost_mul(DLRT_COST_MAC, m), cols), k + DLRT_COST_K0);
}

/* The same for a product with prepacked or per-call packed weights that may run transposed
 * (dlrt_sgemm_transposes_for): its N columns then pad to MR rows, not to NR columns, which is
 * what makes a Winograd product of 49 columns cost 54 rows rather than 64 columns. */
static int64_t dlrt_cost_gemm_either(int64_t m, int64_t n, int64_t k) {
    const int64_t rows = (n + DLRT_COST_MR - 1) / DLRT_COST_MR * DLRT_COST_MR;
    const int64_t mcols = (m + DLRT_COST_NR - 1) / DLRT_COST_NR * DLRT_COST_NR;
    const int64_t t =
        dlrt_cost_mul(dlrt_cost_mul(dlrt_cost_mul(DLRT_COST_MAC, mcols), rows), k + DLRT_COST_K0);
    return DLRT_MIN(dlrt_cost_gemm(m, n, k), t);
}

/* The modelled cost of Winograd F(m x m, 3x3) on p (2-D, 3x3, one group); packed: its weights
 * come transformed (dlrt_conv_forward_packed), which saves the WT term. */
static int64_t dlrt_conv_winograd_cost(const dlrt_conv *p, int m, int packed) {
    const int64_t ci = p->c_in, co = p->c_out, nf = dlrt_conv_winograd_freqs(m);
    const int64_t io = m == 2 ? DLRT_COST_IO2 : DLRT_COST_IO;
    int64_t tiles, cols;
    dlrt_conv_winograd_cols(p, m, &tiles, &cols);
    if (p->n <= 0 || tiles <= 0 || ci <= 0 || co <= 0) return INT64_MAX;
    const int64_t batches = (p->n * tiles + cols - 1) / cols;
    int64_t wino = dlrt_cost_mul(dlrt_cost_gemm_either(co, cols, ci), nf * batches);
    const int64_t weights = dlrt_cost_mul(dlrt_cost_mul(nf, co), ci);
    if (packed) /* read from memory by every batch */
        wino = dlrt_cost_add(wino, dlrt_cost_mul(dlrt_cost_mul(DLRT_COST_WREAD, weights), batches));
    else /* made on every call */
        wino = dlrt_cost_add(wino, dlrt_cost_mul(DLRT_COST_WT, weights));
    return dlrt_cost_add(
        wino, dlrt_cost_mul(dlrt_cost_mul(io * nf, ci + co), dlrt_cost_mul(tiles, p->n)));
}

/* The Winograd algorithm expected to beat im2col + GEMM on p (2-D, 3x3, one group) by the
 * margin, the cheaper of the two tile sizes; -1 when neither is. */
static int dlrt_conv_winograd_pick(const dlrt_conv *p, int packed) {
    const int64_t sp = p->out[0] * p->out[1], ci = p->c_in, co = p->c_out;
    if (p->n <= 0 || sp <= 0 || ci <= 0 || co <= 0) return -1;
    /* (bfloat16 products are not priced lower: their im2col runs at 280-340 GFLOP/s on
     * ResNet-50's 3x3 layers, one thread, where Winograd in float32 does as well on 14x14 and
     * better on 28x28 and 56x56: 0.50 against 0.69 ms, 0.47-0.66 against 0.84-1.12) */
    int64_t im2col = dlrt_cost_mul(dlrt_cost_gemm(co, sp, 9 * ci), p->n);
    im2col = dlrt_cost_add(im2col, dlrt_cost_mul(dlrt_cost_mul(DLRT_COST_COPY * 9, ci), sp * p->n));
    const int64_t f4 = dlrt_conv_winograd_cost(p, 4, packed),
                  f2 = dlrt_conv_winograd_cost(p, 2, packed);
    const int64_t best = DLRT_MIN(f4, f2);
    if (!(dlrt_cost_mul(im2col, 100) > dlrt_cost_mul(best, DLRT_COST_MARGIN))) return -1;
    return f2 < f4 ? DLRT_CONV_WINOGRAD_F2 : DLRT_CONV_WINOGRAD;
}

/* The Winograd tile side of algorithm algo (4 or 2), 0 for the others. */
static int dlrt_conv_algo_tile(int algo) {
    return algo == DLRT_CONV_WINOGRAD ? 4 : algo == DLRT_CONV_WINOGRAD_F2 ? 2 : 0;
}

/* Whether the implicit GEMM (conv-implicit.c) is taken over im2col: layers with more than one
 * tap and 64 depths or more per output, unless im2col would split a batch of small images into
 * chunks (the implicit GEMM runs the images in turn). Measured one layer at a time
 * (batch 1, weights prepacked, cold caches; ms at 1 / 2 threads, im2col -> implicit):
 * ResNet-50's 3x3 stride-2 layers 64->128 on 56x56 0.61 -> 0.55 / 0.33 -> 0.31, 128ch 56x56
 * 1.19 -> 1.06 / 0.66 -> 0.57, 256ch 28x28 1.26 -> 1.04 / 0.69 -> 0.58, 512ch 14x14 1.26 ->
 * 1.17; its 7x7 stride-2 conv1 1.41 -> 1.31; 32->64 on 112x112 0.67 -> 0.61 / 0.38 -> 0.34.
 * Left to im2col: 3->32 3x3 (27 depths: MobileNetV2's first layer, 0.21 -> 0.28) and the 1x1
 * stride-2 layers (256->512 on 56x56 0.92 -> 0.99, 1024->2048 on 14x14 0.98 -> 1.05, though
 * 512->1024 on 28x28 1.08 -> 0.95). At stride 1 the two once measured alike (512ch 7x7 1.14
 * both); since the GEMM's changes of 2026-11-26 the implicit GEMM wins there too, cold weights,
 * best of 30 at 1 thread, im2col -> implicit: ResNet-50's 512ch 3x3 on 7x7 1.04-1.08 -> 0.97-1.01
 * ms, 128ch 7x7 0.087 -> 0.070, 256ch 7x7 0.288 -> 0.263, 1024ch 7x7 4.43 -> 4.01, 64ch 5x5 on
 * 28x28 0.86 -> 0.59, 32->64 5x5 on 56x56 1.50 -> 1.20. */
static int dlrt_conv_implicit_pays(const dlrt_conv *p, const dlrt_win3 *g) {
    if (!dlrt_conv_implicit_ok(p) || g->k_sp < 2 || p->c_in * g->k_sp < 64) return 0;
    return dlrt_conv_chunks_of(p, g, 1).chunks == 1;
}

static int dlrt_conv_choose_for(const dlrt_conv *p, int packed) {
    if (p->tuned > 0 && p->tuned <= DLRT_CONV_ALGOS && dlrt_conv_algo_ok(p, p->tuned - 1))
        return p->tuned - 1;
    dlrt_win3 g;
    dlrt_conv_geom(p, &g);
    /* depthwise only with several groups: one input channel and one group (a first layer on
     * grey images) is a plain GEMM with K = prod(k), about 8x faster as im2col than as a
     * depthwise plane per output channel (LeNet's 1->6 5x5: 0.29 vs 2.36 ms) */
    if (p->group > 1 && p->c_in == p->group) return DLRT_CONV_DEPTHWISE;
    if (dlrt_conv_winograd_ok(p)) {
        const int wino = dlrt_conv_winograd_pick(p, packed);
        if (wino >= 0) return wino;
    }
    if (dlrt_conv_direct_ok(p)) return DLRT_CONV_DIRECT;
    if (dlrt_conv_is_1x1(&g)) return DLRT_CONV_GEMM_1X1;
    /* (its products stay float32: bfloat16 ones run im2col) */
    if (!p->bf16 && dlrt_conv_implicit_pays(p, &g)) return DLRT_CONV_IMPLICIT;
    return DLRT_CONV_IM2COL;
}

int dlrt_conv_choose(const dlrt_conv *p) {
    return dlrt_conv_choose_for(p, 0);
}

int dlrt_conv_choose_packed(const dlrt_conv *p, int packed) {
    return dlrt_conv_choose_for(p, packed);
}

const char *dlrt_conv_algo_name(int algo) {
    switch (algo) {
    case DLRT_CONV_GEMM_1X1:
        return "gemm1x1";
    case DLRT_CONV_IM2COL:
        return "im2col";
    case DLRT_CONV_DEPTHWISE:
        return "depthwise";
    case DLRT_CONV_WINOGRAD:
        return "winograd";
    case DLRT_CONV_WINOGRAD_F2:
        return "winograd2x2";
    case DLRT_CONV_DIRECT:
        return "direct";
    case DLRT_CONV_IMPLICIT:
        return "implicit";
    default:
        return "?";
    }
}

int dlrt_conv_algo_ok(const dlrt_conv *p, int algo) {
    dlrt_win3 g;
    dlrt_conv_geom(p, &g);
    if (p->group <= 0) return 0;
    switch (algo) {
    case DLRT_CONV_GEMM_1X1:
        return dlrt_conv_is_1x1(&g);
    case DLRT_CONV_IM2COL:
        return 1;
    case DLRT_CONV_DEPTHWISE:
        return p->c_in == p->group;
    case DLRT_CONV_WINOGRAD:
    case DLRT_CONV_WINOGRAD_F2:
        return dlrt_conv_winograd_ok(p);
    case DLRT_CONV_DIRECT:
        return dlrt_conv_direct_ok(p);
    case DLRT_CONV_IMPLICIT:
        return dlrt_conv_implicit_ok(p);
    default:
        return 0;
    }
}

size_t dlrt_conv_algo_workspace(const dlrt_conv *p, int algo) {
    dlrt_win3 g;
    dlrt_conv_geom(p, &g);
    if (p->group <= 0) return 0;
    if (dlrt_conv_algo_tile(algo))
        return dlrt_conv_winograd_workspace(p, dlrt_conv_algo_tile(algo), 0);
    if (algo == DLRT_CONV_IMPLICIT) return dlrt_conv_implicit_workspace(p, 0);
    if (algo == DLRT_CONV_DIRECT) return dlrt_conv_direct_workspace(p);
    if (algo != DLRT_CONV_IM2COL && algo != DLRT_CONV_GEMM_1X1) return 0;
    const dlrt_conv_chunking c = dlrt_conv_chunks_of(p, &g, algo == DLRT_CONV_IM2COL);
    int64_t at;
    const size_t gws = dlrt_conv_gemm_ws(p, &g, &c, &at);
    if (gws) /* the columns, then the GEMM's packing space */
        return (size_t)at * sizeof(float) + gws;
    return (size_t)c.chunks * (size_t)c.cols * sizeof(float);
}

size_t dlrt_conv_workspace(const dlrt_conv *p) {
    const size_t plain = dlrt_conv_algo_workspace(p, dlrt_conv_choose(p));
    /* dlrt_conv_forward_packed runs the packed pick, which may differ either way: Winograd on
     * transformed weights where the plain pick is not, or the reverse */
    const int algo = dlrt_conv_choose_for(p, 1), tile = dlrt_conv_algo_tile(algo);
    const size_t packed =
        tile ? dlrt_conv_winograd_workspace(p, tile, 1) : dlrt_conv_algo_workspace(p, algo);
    return DLRT_MAX(plain, packed);
}

void dlrt_conv_forward_algo(const dlrt_conv *p, int algo, const float *x, const float *w, float *y,
                            void *workspace, const dlrt_epilogue *ep) {
    dlrt_win3 g;
    dlrt_conv_geom(p, &g);
    if (p->n <= 0 || p->c_out <= 0 || g.out_sp <= 0 || p->group <= 0) return;
    switch (algo) {
    case DLRT_CONV_DEPTHWISE:
        dlrt_conv_depthwise(p, x, w, y, ep);
        break;
    case DLRT_CONV_DIRECT:
        dlrt_conv_direct(p, x, w, y, workspace, ep);
        break;
    case DLRT_CONV_WINOGRAD:
    case DLRT_CONV_WINOGRAD_F2:
        dlrt_conv_winograd(p, dlrt_conv_algo_tile(algo), x, w, NULL, 0, y, workspace, ep);
        break;
    case DLRT_CONV_GEMM_1X1:
        dlrt_conv_gemm(p, &g, 0, x, w, NULL, 0, y, workspace, ep);
        break;
    case DLRT_CONV_IMPLICIT:
        dlrt_conv_implicit(p, x, w, NULL, y, workspace, ep);
        break;
    default:
        dlrt_conv_gemm(p, &g, 1, x, w, NULL, 0, y, workspace, ep);
        break;
    }
}

void dlrt_conv_forward(const dlrt_conv *p, const float *x, const float *w, float *y,
                       void *workspace, const dlrt_epilogue *ep) {
    dlrt_conv_forward_algo(p, dlrt_conv_choose(p), x, w, y, workspace, ep);
}

int dlrt_conv_packs_weights_for(int vector_bytes, const dlrt_conv *p) {
    dlrt_win3 g;
    dlrt_conv_geom(p, &g);
    const int algo = dlrt_conv_choose_for(p, 1);
    if (dlrt_conv_algo_tile(algo))
        return dlrt_conv_winograd_mode_for(vector_bytes, p, dlrt_conv_algo_tile(algo));
    if (algo == DLRT_CONV_IMPLICIT) return DLRT_A_PACKED_T; /* always the transposed product */
    if (p->group != 1 || (algo != DLRT_CONV_GEMM_1X1 && algo != DLRT_CONV_IM2COL)) return 0;
    const int t = dlrt_sgemm_transposes_for(vector_bytes, p->c_out, g.out_sp, p->c_in * g.k_sp);
    if (p->bf16) return t ? DLRT_A_PAIRS_T : DLRT_A_PAIRS;
    return t ? DLRT_A_PACKED_T : DLRT_A_PACKED;
}

void dlrt_conv_gemm_pack_args(int mode, int *operand, int *trans) {
    const int left = mode == DLRT_A_PACKED || mode == DLRT_A_PAIRS;
    const int pairs = mode == DLRT_A_PAIRS || mode == DLRT_A_PAIRS_T;
    *operand = pairs ? (left ? DLRT_A_PAIRS : DLRT_B_PAIRS) : !left;
    *trans = !left;
}

int dlrt_conv_packs_weights(const dlrt_conv *p) {
    return dlrt_conv_packs_weights_for(DLRT_GEMM_VBYTES, p);
}

/* The algorithm that runs on p given weights packed as wpack_mode (0: none), and in *used that
 * mode where the packed weights are used, else 0. Whether they are is decided again at run time:
 * with a symbolic batch the emitter could not know the algorithm, and a copy packed for other
 * tiles must not be misread. Used, they run the pick they were packed for
 * (dlrt_conv_packs_weights), not the plain pick, which may be Winograd where that one is not
 * (weights transformed on every call cost less than transformed ones read from memory once per
 * batch of images) while the packed copy is not Winograd's: run through the GEMM path as a 1x1
 * layer, such a layer (a batch of 2, 32 -> 16 channels of 3x3 on 48x48) gave NaNs. */
static int dlrt_conv_pick(const dlrt_conv *p, int wpack_mode, int *used) {
    *used = wpack_mode && dlrt_conv_packs_weights(p) == wpack_mode ? wpack_mode : 0;
    return *used ? dlrt_conv_choose_for(p, 1) : dlrt_conv_choose(p);
}

int dlrt_conv_runs(const dlrt_conv *p, int wpack_mode) {
    int used;
    return dlrt_conv_pick(p, wpack_mode, &used);
}

void dlrt_conv_forward_packed(const dlrt_conv *p, const float *x, const float *w,
                              const float *wpacked, int wpack_mode, float *y, void *workspace,
                              const dlrt_epilogue *ep) {
    dlrt_win3 g;
    dlrt_conv_geom(p, &g);
    int mode;
    const int algo = dlrt_conv_pick(p, wpacked ? wpack_mode : 0, &mode);
    if (!mode) { /* algo is dlrt_conv_forward's */
        dlrt_conv_forward_algo(p, algo, x, w, y, workspace, ep);
        return;
    }
    if (p->n <= 0 || g.out_sp <= 0) {
        dlrt_conv_forward(p, x, w, y, workspace, ep);
        return;
    }
    if (dlrt_conv_algo_tile(algo))
        dlrt_conv_winograd(p, 0, x, w, wpacked, mode, y, workspace, ep);
    else if (algo == DLRT_CONV_IMPLICIT)
        dlrt_conv_implicit(p, x, w, wpacked, y, workspace, ep);
    else
        dlrt_conv_gemm(p, &g, algo == DLRT_CONV_IM2COL, x, w, wpacked, mode, y, workspace, ep);
}
