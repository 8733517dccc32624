/* conv-direct.c — dlrt_conv_direct: 2-D convolutions at stride 1 or 2 with few taps per output
 * (c_in x k_h x k_w, see DLRT_DIRECT_TAPS: a first layer on grey or colour images, LeNet's 1->6
 * 5x5, ResNet's 3->64 7x7 stride 2), computed directly. As one GEMM per image they have K = c_in *
 * k (25 for LeNet) and few rows, so the GEMM spends its time packing and on partial tiles (LeNet's
 * 1->6 on 28x28 at batch 64: 0.23 ms, 50 GFLOP/s).
 *
 * A unit is one output row of one image. For each block of up to DLRT_DIRECT_CB (on AVX-512,
 * for rows of 3 vectors or more, DLRT_DIRECT_CB_WIDE) output channels and each vector of the row,
 * every channel of the block has an accumulator; each tap (input channel, tap row, tap column)
 * loads the input vector once and multiplies it into all of them by the tap's weight. A row whose
 * length is not a multiple of the vector ends with a vector overlapping the one before; it computes
 * its outputs again, into the row buffer, so that the epilogue (which may add a residual in place)
 * runs once per output. Input rows outside the image in height are skipped; rows reaching the
 * padding in width are copied, zero-padded, first. At stride 2 every input row is copied split into
 * its even and odd columns, so that each tap column again reads consecutive floats (tap kw: phase
 * kw % 2 from column kw / 2 on). The weights are first copied to the workspace interleaved, each
 * block's tap by tap (dlrt_direct_interleave). Sums run over the taps in (channel, row, column)
 * order, so the results depend on the geometry only, not on the thread count. */
#include "conv-impl.h"
#include "gemm-micro.h" /* DLRT_GEMM_VBYTES: the vectors of this build */

enum {
    DLRT_DIRECT_VW = DLRT_GEMM_VBYTES / (int)sizeof(float),
    /* The most taps per output (c_in x k_h x k_w): 32 at stride 1; at stride 2 160 with at most
     * 8 input channels, where the products im2col or the implicit GEMM make are narrow
     * (one thread, layer alone, im2col or implicit -> direct): MobileNetV2's 3->32 3x3 0.190 ->
     * 0.139 ms, ResNet-50's 3->64 7x7 1.147 -> 1.092, 4->32 5x5 on 64x64 0.043 -> 0.035, 8->16
     * 3x3 on 56x56 0.021 -> 0.018; but 16->32 3x3 on 112x112 0.176 -> 0.186 and 16->64 on
     * 56x56 0.077 -> 0.087, so 16 channels stay with the GEMMs. */
    DLRT_DIRECT_TAPS = 160,
    DLRT_DIRECT_TAPS_S1 = 32,
    DLRT_DIRECT_CIN_S2 = 8,
    DLRT_DIRECT_ROW = 512, /* the longest output row */
    /* the shortest: the widest vector of any build, so that every build (the host sizing the
     * workspace, generated code built for another target) makes the same choice */
    DLRT_DIRECT_MIN_ROW = 16,
    DLRT_DIRECT_PADDED = 8192 /* floats of zero-padded input rows a unit may need */
};

/* Output channels per block and vectors of a row computed together: their accumulators, the
 * inputs' vectors and a weight fit in 32 registers (AVX-512) or 16. On AVX-512 a row of three
 * vectors or more takes blocks of up to DLRT_DIRECT_CB_WIDE channels, 4 or 3 vectors at a time
 * (a 112-wide row as 4 + 3: 24 multiply-adds per 10 loads, where blocks of 8 as 2 + 2 + 2 + 1
 * had 16 per 10, and 8 per 9 for the last vector); narrower rows keep blocks of 8 in pairs.
 * Each output sums its taps in the same order either way. */
#ifdef __AVX512F__
#define DLRT_DIRECT_CB      8
#define DLRT_DIRECT_CB_WIDE 6
#define DLRT_DIRECT_JV      4
#else
#define DLRT_DIRECT_CB      6
#define DLRT_DIRECT_CB_WIDE 6
#define DLRT_DIRECT_JV      2
#endif

/* The vectors: the GEMM's intrinsics where the build has them (ISO C does not contract a * b + c
 * into a fused multiply-add), else GNU vectors of 4 floats. */
#ifdef DLRT_GEMM_VW
typedef dlrt_vf dlrt_cdv;
#define DLRT_CD_ZERO()         DLRT_VZERO()
#define DLRT_CD_LOAD(p)        DLRT_VLOAD(p)
#define DLRT_CD_STORE(p, v)    DLRT_VSTORE(p, v)
#define DLRT_CD_BCAST(s)       DLRT_VBCAST(s)
#define DLRT_CD_FMA(a, b, acc) DLRT_VFMA(a, b, acc)
#else
typedef dlrt_gv dlrt_cdv;
#define DLRT_CD_ZERO()         ((dlrt_cdv){0})
#define DLRT_CD_LOAD(p)        dlrt_gv_load(p)
#define DLRT_CD_STORE(p, v)    memcpy(p, &(v), sizeof(v))
#define DLRT_CD_BCAST(s)       ((dlrt_cdv){0} + (s))
#define DLRT_CD_FMA(a, b, acc) ((acc) + (a) * (b))
#endif

/* Whether output rows read past the input in width (padding at either end), so that their input
 * rows are copied, zero-padded, to out[2] + k[2] - 1 floats (stride 1). At stride 2 every row
 * is copied, split into its even and odd columns (dlrt_direct_phases). */
static int dlrt_direct_pads_w(const dlrt_win3 *g) {
    return g->pad[2] > 0 || g->out[2] + g->k[2] - 1 > g->in[2];
}

/* Floats of one phase row at stride 2: tap column kw of output j reads padded column 2j + kw,
 * column j + kw / 2 of phase kw % 2. */
static int64_t dlrt_direct_phase_len(const dlrt_win3 *g) {
    return g->out[2] + (g->k[2] - 1) / 2;
}

/* Floats of zero-padded input rows a unit copies (0: it reads the input in place). */
static int64_t dlrt_direct_copied(const dlrt_conv *p, const dlrt_win3 *g) {
    if (g->stride[2] == 2) return p->c_in * g->k[1] * 2 * dlrt_direct_phase_len(g);
    return dlrt_direct_pads_w(g) ? p->c_in * g->k[1] * (g->out[2] + g->k[2] - 1) : 0;
}

/* The even (ev[q] = padded column 2q) and odd (od[q] = column 2q + 1) columns of an input row
 * of in_w floats with pad zeros on its left and zeros past its end, q < len: zeros, then the
 * columns inside the row (dlrt_conv_span) in loops without tests, which the compiler vectorizes
 * (a test per element took a quarter of MobileNetV2's first layer). */
static void dlrt_direct_phases(const float *row, int64_t in_w, int64_t pad, int64_t len, float *ev,
                               float *od) {
    int64_t elo, ehi, olo, ohi;
    dlrt_conv_span(len, 2, -pad, in_w, &elo, &ehi);
    dlrt_conv_span(len, 2, 1 - pad, in_w, &olo, &ohi);
    for (int64_t q = 0; q < len; q++) ev[q] = od[q] = 0.0f;
    for (int64_t q = elo; q < ehi; q++) ev[q] = row[2 * q - pad];
    for (int64_t q = olo; q < ohi; q++) od[q] = row[2 * q + 1 - pad];
}

int dlrt_conv_direct_ok(const dlrt_conv *p) {
    dlrt_win3 g;
    dlrt_conv_geom(p, &g);
    const int64_t taps = p->c_in * g.k[1] * g.k[2], s = g.stride[1];
    /* k_w >= 2: 1x1 convolutions are one GEMM on the input, without packing (dlrt_conv_gemm) */
    return p->group == 1 && g.k[2] >= 2 && g.k[0] == 1 && g.in[0] == 1 && (s == 1 || s == 2) &&
           g.stride[2] == s && g.dil[1] == 1 && g.dil[2] == 1 && taps >= 1 &&
           taps <= (s == 1 ? DLRT_DIRECT_TAPS_S1 : DLRT_DIRECT_TAPS) &&
           (s == 1 || p->c_in <= DLRT_DIRECT_CIN_S2) && g.out[2] >= DLRT_DIRECT_MIN_ROW &&
           g.out[2] <= DLRT_DIRECT_ROW && dlrt_direct_copied(p, &g) <= DLRT_DIRECT_PADDED;
}

/* Where a channel block's row goes: channel c's to out + c * out_s. With ep (vector builds), the
 * results are finished in registers (DLRT_EPI_BLOCK), the block's channels being c0.. and
 * the row's first output at column col0 of the plane. */
typedef struct dlrt_direct_out {
    float *out;
    int64_t out_s;
    const dlrt_epilogue *ep;
    int64_t c0, col0;
} dlrt_direct_out;

/* Where vector v of a group starts in the row: j[v], or j0 + v * VW when j is NULL. */
#define DLRT_DIRECT_J(v) (j ? j[v] : j0 + (v) * (int64_t)DLRT_DIRECT_VW)

/* Channels [0, cb) of the row at jv vectors of output columns (DLRT_DIRECT_J: the columns j[v],
 * or consecutive vectors from j0 when j is NULL): tp[r * k_w + kw] is where tap column kw of
 * input channel r / k_h and tap row r % k_h reads output 0's input (NULL for the whole tap row:
 * outside the image), consecutive outputs reading consecutive floats; wb the block's weights
 * interleaved, [taps][cb] (dlrt_direct_interleave). cb and jv are constants after inlining, so
 * the cb x jv accumulators stay in registers; each tap's weight is broadcast once for the jv
 * vectors. */
static DLRT_INLINE void dlrt_direct_vecs(int cb, int jv, int64_t j0, const int64_t *j,
                                         const float *const *tp, int64_t nrows, int64_t k_w,
                                         const float *wb, const dlrt_direct_out *o) {
    dlrt_cdv acc[DLRT_DIRECT_CB][DLRT_DIRECT_JV];
    for (int c = 0; c < cb; c++)
        for (int v = 0; v < jv; v++) acc[c][v] = DLRT_CD_ZERO();
    for (int64_t r = 0; r < nrows; r++) {
        if (!tp[r * k_w]) continue;
        const float *wr = wb + r * k_w * cb;
        for (int64_t kw = 0; kw < k_w; kw++, wr += cb) {
            dlrt_cdv x[DLRT_DIRECT_JV];
            /* a group of consecutive vectors (j NULL) from j0: one pointer, constant offsets */
            const float *t = tp[r * k_w + kw] + (j ? 0 : j0);
            for (int v = 0; v < jv; v++)
                x[v] = DLRT_CD_LOAD(t + (j ? j[v] : v * (int64_t)DLRT_DIRECT_VW));
            for (int c = 0; c < cb; c++) {
                const dlrt_cdv wv = DLRT_CD_BCAST(wr[c]);
                for (int v = 0; v < jv; v++) acc[c][v] = DLRT_CD_FMA(x[v], wv, acc[c][v]);
            }
        }
    }
#ifdef DLRT_GEMM_VW
    /* dlrt_epi_apply's operations in registers (an image's epilogue from dlrt_conv_ep: a bias per
     * channel, the residual by columns); reading back vectors the overlapping last one had partly
     * rewritten stalled on store forwarding (10% of LeNet's first layer) */
    if (o->ep)
        DLRT_EPI_BLOCK(o->ep, acc, cb, jv, o->c0 + i_,
                       o->ep->bias + (o->c0 + i_) * o->ep->bias_rs + o->col0 + DLRT_DIRECT_J(j_),
                       o->ep->residual + (o->c0 + i_) * o->ep->res_rs + o->col0 +
                           DLRT_DIRECT_J(j_));
#endif
    for (int c = 0; c < cb; c++)
        for (int v = 0; v < jv; v++)
            DLRT_CD_STORE(o->out + c * o->out_s + DLRT_DIRECT_J(v), acc[c][v]);
}
#undef DLRT_DIRECT_J

/* Vectors of a row's next group when r of its vectors remain, for blocks of up to
 * DLRT_DIRECT_CB_WIDE channels on AVX-512: 4 or 3, leaving no lone vector behind where the row
 * allows (5 = 3 + 2, 6 = 3 + 3, 7 = 4 + 3, 9 = 4 + 3 + 2), and no more than the row holds whole
 * (rows of 49-63 outputs 2 + 2, of 33-47 2 + 1). */
static DLRT_INLINE int dlrt_direct_group(int64_t r, int64_t ow_n) {
    int jv = r == 4 || r >= 7 ? 4 : r >= 3 ? 3 : (int)r;
    if (jv == 4 && 4 * (int64_t)DLRT_DIRECT_VW > ow_n) jv = 2;
    while (jv > 1 && jv * (int64_t)DLRT_DIRECT_VW > ow_n) jv--;
    return jv;
}

/* j[0..jv): the vectors [v0, v0 + jv) of a row of ow_n outputs, the last one at ow_n - VW
 * (overlapping the one before when VW does not divide ow_n). */
static DLRT_INLINE void dlrt_direct_at(int jv, int64_t v0, int64_t ow_n, int64_t *j) {
    for (int v = 0; v < jv; v++) j[v] = DLRT_MIN((v0 + v) * DLRT_DIRECT_VW, ow_n - DLRT_DIRECT_VW);
}

/* The cb channels of a row of ow_n outputs, group by group of its vectors: on AVX-512, blocks of
 * up to DLRT_DIRECT_CB_WIDE channels in groups of 4 or 3 (dlrt_direct_group); otherwise pairs,
 * then the last one. wb: the block's weights interleaved, tap by tap (dlrt_direct_interleave). */
static DLRT_INLINE void dlrt_direct_row(int cb, const float *const *tp, int64_t nrows, int64_t k_w,
                                        const float *wb, int64_t ow_n, const dlrt_direct_out *o) {
    const int64_t nv = (ow_n + DLRT_DIRECT_VW - 1) / DLRT_DIRECT_VW;
    int64_t j[DLRT_DIRECT_JV], v0 = 0;
#if DLRT_DIRECT_JV == 4
    if (cb <= DLRT_DIRECT_CB_WIDE && nv >= 3) {
        while (v0 < nv) {
            const int jv = dlrt_direct_group(nv - v0, ow_n);
            /* consecutive vectors from j0; the last group ends at the row's end, its overlap
             * recomputing outputs as the last vector of a row does */
            const int64_t j0 = DLRT_MIN(v0 * DLRT_DIRECT_VW, ow_n - jv * DLRT_DIRECT_VW);
            switch (jv) { /* constant counts, so the accumulators stay in registers */
            case 4:
                dlrt_direct_vecs(cb, 4, j0, NULL, tp, nrows, k_w, wb, o);
                break;
            case 3:
                dlrt_direct_vecs(cb, 3, j0, NULL, tp, nrows, k_w, wb, o);
                break;
            case 2:
                dlrt_direct_vecs(cb, 2, j0, NULL, tp, nrows, k_w, wb, o);
                break;
            default:
                dlrt_direct_vecs(cb, 1, j0, NULL, tp, nrows, k_w, wb, o);
            }
            v0 += jv;
        }
        return;
    }
#endif
    for (; v0 + 2 <= nv; v0 += 2) {
        dlrt_direct_at(2, v0, ow_n, j);
        dlrt_direct_vecs(cb, 2, 0, j, tp, nrows, k_w, wb, o);
    }
    for (; v0 < nv; v0++) {
        dlrt_direct_at(1, v0, ow_n, j);
        dlrt_direct_vecs(cb, 1, 0, j, tp, nrows, k_w, wb, o);
    }
}

/* The channel blocks of p's output rows: nb blocks of sizes differing by at most 1 (6 channels:
 * one block; 10: 5 + 5), of at most DLRT_DIRECT_CB_WIDE channels where rows have 3 vectors or
 * more, else DLRT_DIRECT_CB. Block blk has dlrt_direct_cb(p, nb, blk) channels. */
static int64_t dlrt_direct_blocks(const dlrt_conv *p, const dlrt_win3 *g) {
    const int64_t nv = (g->out[2] + DLRT_DIRECT_VW - 1) / DLRT_DIRECT_VW;
    const int64_t cbm = nv >= 3 ? DLRT_DIRECT_CB_WIDE : DLRT_DIRECT_CB;
    return (p->c_out + cbm - 1) / cbm;
}

static int dlrt_direct_cb(const dlrt_conv *p, int64_t nb, int64_t blk) {
    return (int)(p->c_out / nb + (blk < p->c_out % nb));
}

/* The weights [c_out][taps] block by block, each block's [taps][cb]: a tap's cb weights side by
 * side, so the tap loop steps one pointer and reads them at constant offsets (with a row of
 * weights per channel, gcc kept the channels' offsets on the stack once 4 vectors' offsets
 * took the registers). */
static void dlrt_direct_interleave(const dlrt_conv *p, const dlrt_win3 *g, const float *w,
                                   float *wi) {
    const int64_t taps = p->c_in * g->k[1] * g->k[2], nb = dlrt_direct_blocks(p, g);
    for (int64_t blk = 0, c0 = 0; blk < nb; blk++) {
        const int cb = dlrt_direct_cb(p, nb, blk);
        for (int64_t t = 0; t < taps; t++)
            for (int c = 0; c < cb; c++) wi[c0 * taps + t * cb + c] = w[(c0 + c) * taps + t];
        c0 += cb;
    }
}

size_t dlrt_conv_direct_workspace(const dlrt_conv *p) {
    dlrt_win3 g;
    dlrt_conv_geom(p, &g);
    return (size_t)p->c_out * (size_t)(p->c_in * g.k[1] * g.k[2]) * sizeof(float);
}

/* Input row ih (inside the image) of channel ci of image b. */
static const float *dlrt_direct_in_row(const dlrt_conv *p, const dlrt_win3 *g, const float *x,
                                       int64_t b, int64_t ci, int64_t ih) {
    return x + ((b * p->c_in + ci) * g->in[1] + ih) * g->in[2];
}

/* Output row oh of image b: every channel block, through the epilogue into y. */
static void dlrt_direct_unit(const dlrt_conv *p, const dlrt_win3 *g, const float *x, const float *w,
                             float *y, const dlrt_epilogue *ep, int64_t b, int64_t oh) {
    const int64_t k_h = g->k[1], k_w = g->k[2], ow_n = g->out[2], in_w = g->in[2];
    const int64_t pw = g->pad[2], taps = p->c_in * k_h * k_w, s = g->stride[1];
    const int64_t len = s == 2 ? dlrt_direct_phase_len(g) : ow_n + k_w - 1;
    const float *tp[DLRT_DIRECT_TAPS];
    float padded[DLRT_DIRECT_PADDED];
    const int pad_w = dlrt_direct_pads_w(g);
    for (int64_t ci = 0; ci < p->c_in; ci++)
        for (int64_t kh = 0; kh < k_h; kh++) {
            const int64_t ih = oh * s - g->pad[1] + kh, at = ci * k_h + kh;
            const float **t = tp + at * k_w;
            if (ih < 0 || ih >= g->in[1]) {
                t[0] = NULL;
                continue;
            }
            const float *src = dlrt_direct_in_row(p, g, x, b, ci, ih);
            if (s == 2) { /* tap kw: column kw / 2 on of the phase kw % 2 */
                float *ev = padded + 2 * at * len, *od = ev + len;
                dlrt_direct_phases(src, in_w, pw, len, ev, od);
                for (int64_t kw = 0; kw < k_w; kw++) t[kw] = (kw % 2 ? od : ev) + kw / 2;
                continue;
            }
            if (pad_w) {
                dlrt_pad_row(src, in_w, pw, len, padded + at * len);
                src = padded + at * len;
            }
            for (int64_t kw = 0; kw < k_w; kw++) t[kw] = src + kw;
        }
    /* the input rows the next output row adds (its last s), which are not in cache when this
     * layer starts a model's run, its input read by no layer before (MobileNetV2's first layer
     * in the model at one thread 0.184-0.197 -> 0.154-0.158 ms; alone, input in cache, 0.138 ->
     * 0.142) */
    for (int64_t ci = 0; oh + 1 < g->out[1] && ci < p->c_in; ci++)
        for (int64_t kh = DLRT_MAX(k_h - s, (int64_t)0); kh < k_h; kh++) {
            const int64_t ih = (oh + 1) * s - g->pad[1] + kh;
            if (ih < 0 || ih >= g->in[1]) continue;
            const char *src = (const char *)dlrt_direct_in_row(p, g, x, b, ci, ih);
            for (int64_t o = 0; o < in_w * (int64_t)sizeof(float); o += 64)
                __builtin_prefetch(src + o, 0, 3);
        }
    dlrt_epilogue e;
    const dlrt_epilogue *eb = dlrt_conv_ep(p, g->out_sp, ep, b, 0, &e);
    /* the results go to y, finished in registers (vector builds) or in place after, unless the
     * epilogue adds a residual that is y itself: then they go to res first, and the residual is
     * read before y is written */
    const int in_place = eb && eb->residual == y + b * p->c_out * g->out_sp;
#ifdef DLRT_GEMM_VW
    const int in_regs = eb && !in_place;
#else
    const int in_regs = 0;
#endif
    float res[DLRT_DIRECT_CB * DLRT_DIRECT_ROW];
    const int64_t nb = dlrt_direct_blocks(p, g);
    for (int64_t blk = 0, c0 = 0; blk < nb; blk++) {
        const int cb = dlrt_direct_cb(p, nb, blk);
        const float *wb = w + c0 * taps;
        float *yb = y + (b * p->c_out + c0) * g->out_sp + oh * ow_n;
        const dlrt_direct_out o = {in_place ? res : yb, in_place ? DLRT_DIRECT_ROW : g->out_sp,
                                   in_regs ? eb : NULL, c0, oh * ow_n};
        switch (cb) {
#define DLRT_DIRECT_CASE(CB)                                                                       \
    case CB:                                                                                       \
        dlrt_direct_row(CB, tp, p->c_in *k_h, k_w, wb, ow_n, &o);                                  \
        break;
            DLRT_DIRECT_CASE(1)
            DLRT_DIRECT_CASE(2)
            DLRT_DIRECT_CASE(3)
            DLRT_DIRECT_CASE(4)
            DLRT_DIRECT_CASE(5)
            DLRT_DIRECT_CASE(6)
#if DLRT_DIRECT_CB == 8
            DLRT_DIRECT_CASE(7)
            DLRT_DIRECT_CASE(8)
#endif
#undef DLRT_DIRECT_CASE
        }
        for (int c = 0; c < cb && eb; c++) {
            float *r = o.out + c * o.out_s;
            if (!in_regs)
                dlrt_epi_apply(eb, c0 + c, oh * ow_n, r, ow_n);
            else if (eb->act != DLRT_ACT_NONE && eb->act != DLRT_ACT_RELU &&
                     eb->act != DLRT_ACT_CLIP)
                dlrt_act_apply(eb->act, eb->act_a, eb->act_b, r, ow_n);
            if (in_place) memcpy(yb + c * g->out_sp, r, (size_t)ow_n * sizeof(float));
        }
        c0 += cb;
    }
}

typedef struct dlrt_direct_job {
    const dlrt_conv *p;
    const dlrt_win3 *g;
    const float *x, *w;
    float *y;
    const dlrt_epilogue *ep;
} dlrt_direct_job;

/* Units [lo, hi): an output row of an image. */
static void dlrt_direct_units(void *ctx, int64_t lo, int64_t hi) {
    const dlrt_direct_job *j = ctx;
    const int64_t oh_n = j->g->out[1];
    for (int64_t u = lo; u < hi; u++)
        dlrt_direct_unit(j->p, j->g, j->x, j->w, j->y, j->ep, u / oh_n, u % oh_n);
}

void dlrt_conv_direct(const dlrt_conv *p, const float *x, const float *w, float *y, void *workspace,
                      const dlrt_epilogue *ep) {
    dlrt_win3 g;
    dlrt_conv_geom(p, &g);
    float *wi = (float *)workspace; /* dlrt_conv_direct_workspace */
    dlrt_direct_interleave(p, &g, w, wi);
    w = wi;
    const int64_t units = p->n * g.out[1];
    const int par =
        (double)units * (double)g.out[2] * (double)p->c_out * (double)(p->c_in * g.k_sp) >=
        DLRT_PAR_MIN;
    dlrt_direct_job job = {p, &g, x, w, y, ep};
    dlrt_parallel_for(units, par, dlrt_direct_units, &job);
}
