/* conv-impl.h — private to the convolution kernels (conv.c: dispatch, 1x1 and im2col;
 * depthwise.c; winograd.c; conv-grad.c: the backward): the geometry and per-image epilogue
 * helpers they share, and the entry points conv.c dispatches to. The algorithm files are
 * separate translation units (the JIT and AOT bundles compile every rt .c file on its own), so
 * these entry points have external linkage and the dlrt_conv_ prefix. */
#ifndef DLRT_CONV_IMPL_H
#define DLRT_CONV_IMPL_H

#include "dlrt-impl.h"

/* Batches of small images are split into chunks of images that run in parallel, each with its
 * own scratch (the forward in conv.c, the backward in conv-grad.c). The number of chunks is
 * decided by these constants, the geometry and the batch alone, never by build flags
 * (DLRT_PAR_MIN is overridden in test builds) nor the thread count: the host sizes the
 * workspace with its own copy of the sources and must plan as the generated code does, and the
 * results must not depend on the thread count. */
enum {
    /* chunks at most: enough for 16 cores, and the backward's partial sums stay cheap */
    DLRT_CONV_CHUNKS = 16,
    /* multiply-adds per chunk at least: a fork pays for that much (DLRT_PAR_MIN's default / 4) */
    DLRT_CONV_CHUNK_WORK = 1 << 18,
    /* one image and group's GEMM from which the images stay serial: the GEMM then splits
     * itself (DLRT_PAR_MIN's default) */
    DLRT_CONV_IMAGE_PAR = 1 << 20,
};
/* The workspace the chunks may use (bytes) before their number is cut. */
#define DLRT_CONV_CHUNK_WS_MAX ((size_t)16 << 20)

static inline int64_t dlrt_conv_round16(int64_t n) {
    return (n + 15) / 16 * 16;
}

static inline void dlrt_conv_geom(const dlrt_conv *p, dlrt_win3 *g) {
    dlrt_win3_init(g, p->nsp, p->in, p->out, p->k, p->stride, p->dil, p->pad_begin);
}

/* Outputs o in [0, n) with 0 <= o*s + off < in: [*lo, *hi) (empty when lo >= hi). */
static inline void dlrt_conv_span(int64_t n, int64_t s, int64_t off, int64_t in, int64_t *lo,
                                  int64_t *hi) {
    int64_t a = off >= 0 ? 0 : (-off + s - 1) / s;
    int64_t b = in - off <= 0 ? 0 : (in - off + s - 1) / s;
    *lo = a;
    *hi = b < n ? b : n;
}

/* Whether every tap of every output reads inside the input (no padding reached): the copies then
 * need no bounds. */
static inline int dlrt_conv_inside(const dlrt_win3 *g) {
    for (int d = 0; d < 3; d++)
        if (g->pad[d] != 0 ||
            (g->out[d] - 1) * g->stride[d] + (g->k[d] - 1) * g->dil[d] >= g->in[d])
            return 0;
    return 1;
}

/* The epilogue for image b and the channel block starting at channel c0, with rows indexed by
 * channel (relative to c0) and columns by output position: the bias is per channel and the
 * residual has y's layout. NULL when ep is NULL. */
static inline const dlrt_epilogue *dlrt_conv_ep(const dlrt_conv *p, int64_t out_sp,
                                                const dlrt_epilogue *ep, int64_t b, int64_t c0,
                                                dlrt_epilogue *out) {
    if (!ep) return NULL;
    *out = *ep;
    out->bias = ep->bias ? ep->bias + c0 : NULL;
    out->bias_rs = 1;
    out->bias_cs = 0;
    out->residual = ep->residual ? ep->residual + (b * p->c_out + c0) * out_sp : NULL;
    out->res_rs = out_sp;
    out->res_cs = 1;
    return out;
}

/* The GEMM a layer's products run through (dlrt_sgemm_ws's arguments): in bfloat16 for a layer
 * with p->bf16 (--math bf16), forward (conv.c) and backward (conv-grad.c). */
typedef void dlrt_sgemm_fn(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                           int trans_a, int a_packed, const float *B, int64_t ldb, int trans_b,
                           int b_packed, float *C, int64_t ldc, const dlrt_epilogue *ep, void *ws,
                           size_t ws_bytes);
static inline dlrt_sgemm_fn *dlrt_conv_sgemm(const dlrt_conv *p) {
    return p->bf16 ? dlrt_sgemm_bf16 : dlrt_sgemm_ws;
}

/* conv.c: one image and group's im2col matrix [cig * k_sp, out_sp] (cig input planes at x);
 * also read by the weight gradient (conv-grad.c). */
void dlrt_conv_im2col(const dlrt_win3 *g, int64_t cig, const float *x, float *col);
/* The same matrix as a GEMM operand never written out (dlrt_gemm_gather's lines, ctx a
 * dlrt_conv_cols): its lines are the columns, output positions. The im2col algorithm runs its
 * GEMM on it when the columns are the product's right operand; building with
 * -DDLRT_CONV_GATHER=0 writes them out always (for comparing the two). */
typedef struct dlrt_conv_cols {
    const dlrt_win3 *g;
    const float *x; /* the image and group's first input plane */
} dlrt_conv_cols;
void dlrt_conv_gather_cols(const void *ctx, int64_t i0, int m, int64_t p0, int kc, int w,
                           size_t pstride, float *restrict dst);
#ifndef DLRT_CONV_GATHER
#define DLRT_CONV_GATHER 1
#endif

/* Workspace bytes of algorithm `algo` on p (which must be applicable). */
size_t dlrt_conv_algo_workspace(const dlrt_conv *p, int algo);
/* dlrt_conv_forward through a given applicable algorithm (tests and benchmarks force each one;
 * dlrt_conv_forward passes dlrt_conv_choose(p)). The workspace has
 * dlrt_conv_algo_workspace(p, algo) bytes. */
void dlrt_conv_forward_algo(const dlrt_conv *p, int algo, const float *x, const float *w, float *y,
                            void *workspace, const dlrt_epilogue *ep);

/* Row blocks per plane for the depthwise kernels' units of work (plane x block): 1 with 64
 * planes or more, else as many as make about 64 units, blocks of at least 4 rows. */
static inline int64_t dlrt_conv_row_blocks(int64_t planes, int64_t rows) {
    enum { UNITS = 64 };
    if (planes >= UNITS) return 1;
    return DLRT_MAX((int64_t)1, DLRT_MIN((UNITS + planes - 1) / planes, rows / 4));
}

/* depthwise.c: c_in == group, any channel multiplier, any rank; no workspace. */
void dlrt_conv_depthwise(const dlrt_conv *p, const float *x, const float *w, float *y,
                         const dlrt_epilogue *ep);
/* depthwise-cv.c (AVX-512 builds; elsewhere it takes no channels): computes the first channels
 * of every image 16 at a time where it applies and returns how many (a multiple of 16, 0 when it
 * does not apply; the rest stay with the plane kernel); dlrt_conv_dw_cv_channels tells how many
 * it would take. */
int64_t dlrt_conv_dw_cv(const dlrt_conv *p, const dlrt_win3 *g, const float *x, const float *w,
                        float *y, const dlrt_epilogue *ep);
int64_t dlrt_conv_dw_cv_channels(const dlrt_conv *p, const dlrt_win3 *g, const dlrt_epilogue *ep);
/* depthwise-row.c (AVX-512 builds; elsewhere it applies to nothing): 2-D 3x3 depthwise with
 * pad 1 before (any padding after), stride 1 or 2, channel multiplier 1, output rows of 28+ (14+
 * at stride 2),
 * computed straight from the planes; dlrt_conv_dw_row computes the whole layer and returns 1
 * where dlrt_conv_dw_row_applies, else 0 and computes nothing. */
int dlrt_conv_dw_row_applies(const dlrt_conv *p, const dlrt_win3 *g);
int dlrt_conv_dw_row(const dlrt_conv *p, const dlrt_win3 *g, const float *x, const float *w,
                     float *y, const dlrt_epilogue *ep);
/* The fast depthwise path's tiling of one geometry, planned once per call: tiles of rh x cw
 * outputs are computed from stride[1]*stride[2] phase planes of hq x wq padded inputs, sub =
 * hq*wq floats apart, where a window spans eh x ew; off[] are the offsets of the kernel's taps
 * in the phase planes when there are at most DLRT_DW_FIXED of them. */
enum { DLRT_DW_FIXED = 49 };
typedef struct dlrt_dw_plan {
    int64_t rh, cw, hq, wq, sub, eh, ew;
    int64_t off[DLRT_DW_FIXED];
} dlrt_dw_plan;
/* Plans the fast path for tiles that fit in cap floats; 0 when the kernel has depth > 1 or no
 * tile fits (then a plain direct loop runs). Exposed, like the next one, so that the tests can
 * force column chunks with small caps. */
int dlrt_conv_dw_plan(const dlrt_win3 *g, int64_t cap, dlrt_dw_plan *pl);
/* Output rows [r0, r1) (row r is at depth r / out[1]) of one plane by plan pl, with the cap
 * floats it was planned for at buf. x and y are the input and output planes, w the channel's
 * taps, ep the image's epilogue (dlrt_conv_ep) and oc the channel. */
void dlrt_conv_dw_plane(const dlrt_win3 *g, const dlrt_dw_plan *pl, const float *x, const float *w,
                        float *y, int64_t oc, const dlrt_epilogue *ep, int64_t r0, int64_t r1,
                        float *buf);

/* dst[j] = row[j - pad] for j in [0, len), 0 where j - pad is outside [0, in_w): an input row
 * zero-padded in width, for the direct kernels (conv-direct.c, the weight gradient in
 * conv-grad.c), which read a window's taps without bounds checks. */
static inline void dlrt_pad_row(const float *row, int64_t in_w, int64_t pad, int64_t len,
                                float *dst) {
    for (int64_t j = 0; j < len; j++) dst[j] = j >= pad && j - pad < in_w ? row[j - pad] : 0.0f;
}

/* conv-direct.c: 2-D convolutions with stride 1 and at most 32 taps per output (c_in x k_h x
 * k_w, k_w >= 2), or stride 2, at most 8 input channels and 160 taps; one group, output rows of
 * a vector to 512 wide, computed directly. */
int dlrt_conv_direct_ok(const dlrt_conv *p);
/* Its workspace holds the weights interleaved block by block (c_out x taps floats). */
size_t dlrt_conv_direct_workspace(const dlrt_conv *p);
void dlrt_conv_direct(const dlrt_conv *p, const float *x, const float *w, float *y, void *workspace,
                      const dlrt_epilogue *ep);

/* conv-implicit.c: one group, any rank, stride, dilation and padding, as long as offsets in the
 * (padded) input fit 32 bits: the product of the weights (prepacked as DLRT_A_PACKED_T, or
 * packed per call into the workspace when wpacked is NULL) and the windows read in place. */
int dlrt_conv_implicit_ok(const dlrt_conv *p);
size_t dlrt_conv_implicit_workspace(const dlrt_conv *p, int packed);
void dlrt_conv_implicit(const dlrt_conv *p, const float *x, const float *w, const float *wpacked,
                        float *y, void *workspace, const dlrt_epilogue *ep);

/* winograd.c: F(m x m, 3x3), m = 4 or 2, for 2-D 3x3 convolutions with stride 1, dilation 1
 * and one group. */
int dlrt_conv_winograd_ok(const dlrt_conv *p);
/* The frequencies (GEMMs per batch) of tile side m, 4 or 2 (anything else is taken as 4):
 * (m + 2)^2. */
static inline int dlrt_conv_winograd_freqs(int m) {
    return m == 2 ? 16 : 36;
}
/* Its tiles per image and the columns of each batch of GEMMs (images are batched up to a
 * minimum width) at tile side m. */
void dlrt_conv_winograd_cols(const dlrt_conv *p, int m, int64_t *tiles, int64_t *cols);
/* How its weights are packed at tile side m (DLRT_WG_PACKED or _T for 4, DLRT_WG2_PACKED or _T
 * for 2) for a build whose vectors have vector_bytes: as the product of its GEMMs pads least. */
int dlrt_conv_winograd_mode_for(int vector_bytes, const dlrt_conv *p, int m);
/* Scratch bytes at tile side m; packed: the weights come transformed (wpacked), none made per
 * call. */
size_t dlrt_conv_winograd_workspace(const dlrt_conv *p, int m, int packed);
/* wpacked: NULL (transform w on every call, tile side m) or dlrt_conv_winograd_pack's buffer for
 * wpack_mode, whose tile side is used (m is then ignored). */
void dlrt_conv_winograd(const dlrt_conv *p, int m, const float *x, const float *w,
                        const float *wpacked, int wpack_mode, float *y, void *workspace,
                        const dlrt_epilogue *ep);

#endif
