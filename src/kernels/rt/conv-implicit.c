/* conv-implicit.c — convolution as an implicit GEMM (DLRT_CONV_IMPLICIT): the product of the
 * weights and the windows, with the windows read where they lie in the input instead of being
 * copied into columns.
 *
 * Output position o's window holds, at depth p = (channel, kd, kh, kw) (a weight row's order),
 * the input at rows[o] + off[p]: rows[o] is the window's first tap, off[p] the tap's offset from
 * it. dlrt_sgemm_indexed runs the product transposed (output positions are its rows, a tile's
 * six rows broadcast straight from the input; output channels its columns, the weights packed
 * as DLRT_A_PACKED_T) and stores each output channel's run of positions back through the
 * epilogue. Where a window reaches the padding, the image is first copied into a zero-padded
 * buffer as large as the windows reach (one pass over the input), so that no tap is tested.
 *
 * This is what strided layers need: im2col gathers a stride-2 layer's columns element by
 * element and writes them out (the transposed product) or gathers them per tile (the plain one),
 * where here a tap is one broadcast from the input (ResNet-50's 256-channel 3x3 stride-2 layer:
 * 1.20 ms as im2col, 0.95 here, one thread). Each output's sum runs over the depths in order,
 * in K blocks, as the packed GEMM sums it. */
#include "conv-impl.h"

/* The layout the windows are read from: the image itself when no window reaches the padding,
 * else a zero-padded copy of dims dim[] covering exactly what the windows reach. */
typedef struct dlrt_imp_src {
    int copy;
    int64_t dim[3], plane; /* dims of a channel's (padded) volume, and their product */
} dlrt_imp_src;

static void dlrt_imp_src_of(const dlrt_win3 *g, dlrt_imp_src *s) {
    s->copy = !dlrt_conv_inside(g);
    for (int d = 0; d < 3; d++)
        s->dim[d] =
            s->copy ? (g->out[d] - 1) * g->stride[d] + (g->k[d] - 1) * g->dil[d] + 1 : g->in[d];
    s->plane = s->dim[0] * s->dim[1] * s->dim[2];
}

/* The pieces of the workspace, in floats from its start (each at a 64-byte boundary): the
 * windows' row pointers first, then the tap offsets, the padded image and the packed weights. */
typedef struct dlrt_imp_ws {
    size_t off, pad, wpack, total; /* floats */
} dlrt_imp_ws;

static size_t dlrt_imp_round(size_t floats) {
    return (floats + 15) / 16 * 16;
}

static void dlrt_imp_ws_of(const dlrt_conv *p, const dlrt_win3 *g, const dlrt_imp_src *s,
                           int packed, dlrt_imp_ws *w) {
    const int64_t K = p->c_in * g->k_sp;
    w->off = dlrt_imp_round((size_t)g->out_sp * sizeof(float *) / sizeof(float));
    w->pad = w->off + dlrt_imp_round((size_t)K * sizeof(int32_t) / sizeof(float) + 1);
    w->wpack = w->pad + (s->copy ? dlrt_imp_round((size_t)(p->c_in * s->plane)) : 0);
    w->total =
        w->wpack +
        (packed ? 0 : dlrt_imp_round(dlrt_gemm_packed_bytes(1, p->c_out, K) / sizeof(float)));
}

int dlrt_conv_implicit_ok(const dlrt_conv *p) {
    dlrt_win3 g;
    dlrt_conv_geom(p, &g);
    if (p->group != 1 || p->c_in <= 0 || p->c_out <= 0 || g.out_sp <= 0) return 0;
    dlrt_imp_src s;
    dlrt_imp_src_of(&g, &s);
    /* every offset (a channel's volume times the channels, plus a window) fits 32 bits */
    const double reach = (double)p->c_in * (double)s.plane + (double)s.plane;
    return reach < (double)INT32_MAX;
}

size_t dlrt_conv_implicit_workspace(const dlrt_conv *p, int packed) {
    if (!dlrt_conv_implicit_ok(p)) return 0;
    dlrt_win3 g;
    dlrt_conv_geom(p, &g);
    dlrt_imp_src s;
    dlrt_imp_src_of(&g, &s);
    dlrt_imp_ws w;
    dlrt_imp_ws_of(p, &g, &s, packed, &w);
    return w.total * sizeof(float);
}

typedef struct dlrt_imp_pad_job {
    const dlrt_win3 *g;
    const dlrt_imp_src *s;
    const float *xb;
    float *dst;
} dlrt_imp_pad_job;

/* Channels [c0, c1) of dlrt_imp_pad. */
static void dlrt_imp_pad_channels(void *ctx, int64_t c0, int64_t c1) {
    const dlrt_imp_pad_job *job = ctx;
    const dlrt_win3 *g = job->g;
    const dlrt_imp_src *s = job->s;
    const float *xb = job->xb;
    float *dst = job->dst;
    const int64_t rows = s->dim[0] * s->dim[1], wp = s->dim[2];
    int64_t lo, hi; /* padded columns that hold input columns: [lo, hi) */
    lo = DLRT_MIN(g->pad[2], wp);
    hi = DLRT_MAX(DLRT_MIN(g->pad[2] + g->in[2], wp), lo);
    for (int64_t c = c0; c < c1; c++)
        for (int64_t r = 0; r < rows; r++) {
            float *restrict d = dst + c * s->plane + r * wp;
            const int64_t id = r / s->dim[1] - g->pad[0], ih = r % s->dim[1] - g->pad[1];
            if (id < 0 || id >= g->in[0] || ih < 0 || ih >= g->in[1]) {
                memset(d, 0, (size_t)wp * sizeof(float));
                continue;
            }
            /* inline loops: rows are short (56 floats), where a library call per piece costs
             * more than the copy */
            const float *restrict src = xb + c * g->in_sp + (id * g->in[1] + ih) * g->in[2];
            for (int64_t j = 0; j < lo; j++) d[j] = 0.0f;
            for (int64_t j = lo; j < hi; j++) d[j] = src[j - g->pad[2]];
            for (int64_t j = hi; j < wp; j++) d[j] = 0.0f;
        }
}

/* Image xb's channels into the zero-padded volumes at dst (s->dim each): padded position u in a
 * dim is input position u - pad. Rows are copied whole, the padding around them zeroed. */
static void dlrt_imp_pad(const dlrt_win3 *g, const dlrt_imp_src *s, int64_t channels,
                         const float *xb, float *dst) {
    dlrt_imp_pad_job job = {g, s, xb, dst};
    dlrt_parallel_for(channels, (double)channels * (double)s->plane >= DLRT_PAR_MIN / 8,
                      dlrt_imp_pad_channels, &job);
}

void dlrt_conv_implicit(const dlrt_conv *p, const float *x, const float *w, const float *wpacked,
                        float *y, void *workspace, const dlrt_epilogue *ep) {
    dlrt_win3 g;
    dlrt_conv_geom(p, &g);
    if (p->n <= 0 || g.out_sp <= 0 || !dlrt_conv_implicit_ok(p)) return;
    const int64_t K = p->c_in * g.k_sp;
    dlrt_imp_src s;
    dlrt_imp_src_of(&g, &s);
    dlrt_imp_ws ws;
    dlrt_imp_ws_of(p, &g, &s, wpacked != NULL, &ws);
    float *base = workspace;
    const float **rows = (const float **)(void *)base;
    int32_t *off = (int32_t *)(void *)(base + ws.off);
    float *pad = base + ws.pad;
    if (!wpacked) {
        float *wp = base + ws.wpack;
        dlrt_gemm_pack_operand(1, p->c_out, K, w, K, 1, wp);
        wpacked = wp;
    }
    /* tap (c, kd, kh, kw) from the window's first tap */
    for (int64_t c = 0, t = 0; c < p->c_in; c++)
        for (int64_t a = 0; a < g.k[0]; a++)
            for (int64_t b = 0; b < g.k[1]; b++)
                for (int64_t e = 0; e < g.k[2]; e++, t++)
                    off[t] = (int32_t)(c * s.plane +
                                       (a * g.dil[0] * s.dim[1] + b * g.dil[1]) * s.dim[2] +
                                       e * g.dil[2]);
    const dlrt_gemm_index ax = {rows, off};
    for (int64_t b = 0; b < p->n; b++) {
        const float *src = x + b * p->c_in * g.in_sp;
        if (s.copy) {
            dlrt_imp_pad(&g, &s, p->c_in, src, pad);
            src = pad;
        }
        /* the windows' first taps: they move with the image, but stay put in the padded copy */
        if (b == 0 || !s.copy)
            for (int64_t o = 0; o < g.out_sp; o++) {
                const int64_t ow = o % g.out[2], oh = o / g.out[2] % g.out[1],
                              od = o / (g.out[2] * g.out[1]);
                rows[o] = src + (od * g.stride[0] * s.dim[1] + oh * g.stride[1]) * s.dim[2] +
                          ow * g.stride[2];
            }
        dlrt_epilogue e;
        const dlrt_epilogue *eb = dlrt_conv_ep(p, g.out_sp, ep, b, 0, &e);
        dlrt_sgemm_indexed(p->c_out, g.out_sp, K, wpacked, &ax, y + b * p->c_out * g.out_sp,
                           g.out_sp, eb);
    }
}
