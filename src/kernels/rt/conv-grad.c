/* conv-grad.c — the backward of convolution and pooling for training (dlrt.h:
 * dlrt_conv_grad_input / _weight / _workspace, dlrt_maxpool_grad, dlrt_avgpool_grad), with the
 * semantics of the reference kernels of ai.dlcc.ConvGradInput, ConvGradWeight, MaxPoolGrad and
 * AveragePoolGrad (src/ops/grad-ops.c), and ConvTranspose for inference (dlrt_conv_transpose):
 * the input gradient of the convolution it transposes, its weights optionally packed once at
 * load for the GEMM below (dlrt_conv_transpose_packs_weights), then its bias in a pass of its
 * own.
 *
 * Convolution, per image and group, W_g being the forward's [cog, cig * k_sp] weights:
 *   - input gradient: where it pays (dlrt_grad_input_as_conv: stride 1, group 1 with 32 input
 *     channels or more and no fewer input positions in the batch, or depthwise), a forward
 *     convolution (conv.c, every image at once) of dY with the filters flipped. Otherwise
 *     col = W_gᵀ · dY_g (dlrt_sgemm reading W transposed), then col2im into dX_g: it adds
 *     the column rows into each input plane in a fixed order (by input row at stride 1, by
 *     tap otherwise), the planes in parallel (so the sums do not depend on the thread count).
 *     For a 1x1 stride-1 unpadded convolution col is dX_g itself: the GEMM writes it directly;
 *   - weight gradient: dW_g = Σ_n dY_ng · im2col(X_ng)ᵀ (conv.c's im2col, dlrt_sgemm reading
 *     the columns transposed), one GEMM per image that accumulates through the epilogue's
 *     in-place residual from the second image (of a chunk, below) on; or, for stride-1 layers
 *     with few input channels, directly, without columns (dlrt_grad_weight_direct).
 * Small layers (a LeNet at batch 64: GEMMs of 6-16 x 25-150 x 100-784) are too small for the
 * GEMM, im2col and col2im to split internally, so a batch of them is split over the images
 * instead, in C contiguous chunks (dlrt_grad_plan_of), C depending on the geometry only, never
 * on the thread count, so neither do the results:
 *   - input gradient: images are independent; they run in parallel, each thread with its own
 *     columns (the workspace has C of them; threads are capped to C);
 *   - weight gradient: chunk c sums its images in order (as above) into its own partial dW
 *     (chunk 0 into dw itself), then dw += partial 1, += partial 2, ... in chunk order, each
 *     element on its own. The chunks go to however many threads there are.
 * With p->bf16 (--math bf16) the products (dlrt_conv_sgemm), and the forward convolution of the
 * input gradient, take bfloat16 operands; the direct weight gradient, col2im and the
 * chunks' sums stay float32.
 * Workspace: C * cols + (C - 1) * part floats, cols = one image and group's columns
 * (cig * k_sp * out_sp, none for the direct 1x1 GEMM) and part = dW's c_out * cig * k_sp, both
 * rounded up to 16 floats when C > 1 (C = 1: the columns alone, as before the chunks); or,
 * when larger and the input gradient runs as a forward convolution, the flipped filters
 * (rounded to 16 floats) and that convolution's workspace.
 * Layers with one image's GEMM large enough to be parallel inside, or one image, or too little
 * work to fork for, have C = 1: the images one after the other, outside any job of the pool, so
 * that the GEMM and im2col may share their own work out. So does any layer at one thread,
 * without a job for the pool (its pieces would only run one after the other in the caller).
 * Pooling: (n, c) planes in parallel; within a plane the outputs are visited in order and each
 * dY is added to dX in the reference kernels' order, so the results are theirs bit for bit. */
#include "conv-impl.h"
#include "gemm-micro.h" /* DLRT_GEMM_VBYTES: the vectors of this build */
#include "pool-pair.h"

/* How the backward of p lays out its work and workspace: per chunk cols floats of columns (0 for
 * the direct 1x1 GEMM) and part floats of partial dW, both rounded to 64 bytes when there are
 * several chunks so that threads do not share cache lines; chunks 1.. have a partial (chunk 0
 * sums into dw). */
typedef struct dlrt_grad_plan {
    int64_t chunks, cols, part;
} dlrt_grad_plan;

static size_t dlrt_grad_plan_bytes(const dlrt_grad_plan *pl) {
    return ((size_t)pl->chunks * (size_t)pl->cols + (size_t)(pl->chunks - 1) * (size_t)pl->part) *
           sizeof(float);
}

/* The chunk count: 1 for a single image, for one image and group's GEMM of DLRT_CONV_IMAGE_PAR
 * multiply-adds or more, or for a batch under 2 * DLRT_CONV_CHUNK_WORK; otherwise one chunk per
 * DLRT_CONV_CHUNK_WORK of the batch, at most one per image and DLRT_CONV_CHUNKS, fewer when their
 * workspace would pass DLRT_CONV_CHUNK_WS_MAX. The sizes are products of integers computed in
 * double: exact up to 2^53, and past that still far beyond every threshold, whatever the rounding.
 */
static dlrt_grad_plan dlrt_grad_plan_of(const dlrt_conv *p) {
    dlrt_win3 g;
    dlrt_conv_geom(p, &g);
    dlrt_grad_plan pl = {1, 0, 0};
    if (p->group <= 0) return pl;
    const int64_t cig = p->c_in / p->group, cog = p->c_out / p->group, kdim = cig * g.k_sp;
    pl.cols = dlrt_conv_algo_ok(p, DLRT_CONV_GEMM_1X1) ? 0 : kdim * g.out_sp;
    const double gemm = (double)cog * (double)kdim * (double)g.out_sp;
    if (p->n < 2 || gemm <= 0 || gemm >= DLRT_CONV_IMAGE_PAR) return pl;
    const double by_work = gemm * (double)p->group * (double)p->n / DLRT_CONV_CHUNK_WORK;
    dlrt_grad_plan t = {by_work < DLRT_CONV_CHUNKS ? (int64_t)by_work : DLRT_CONV_CHUNKS,
                        dlrt_conv_round16(pl.cols), dlrt_conv_round16(p->c_out * kdim)};
    t.chunks = DLRT_MIN(t.chunks, p->n);
    while (t.chunks > 1 && dlrt_grad_plan_bytes(&t) > DLRT_CONV_CHUNK_WS_MAX) t.chunks--;
    return t.chunks > 1 ? t : pl;
}

/* A stride-1 convolution's input gradient is itself a forward convolution, run by
 * dlrt_conv_forward with the algorithm it would pick for it (the gather's implicit GEMM that
 * never writes columns, Winograd, depthwise): dY, padded by (k - 1) * dil - pad on each side,
 * convolved with the filters' taps reversed and, within each group, their two channel axes
 * swapped, gives dX. t is that convolution. It is taken where it was measured to win (single
 * thread, batch 8, against the GEMM and col2im below): 3x3 pad 1 with 32-512 channels 1.0-2.1x
 * faster, depthwise 3x faster. Not where p has few input channels (t's output channels, its
 * GEMM's rows: 3 -> 64 at 56x56 was 5.6x slower, 16 -> 16 at 14x14 1.2x), nor grouped (16 ->
 * 32 in 4 groups 2x slower), nor where the input is much larger than the output (LeNet's 5x5
 * on 12x12: t's product runs over 144 positions mostly padding where p's has 64, 4.8x slower).
 * 0 then, and also for a stride above 1 or a pad past the kernel's span (t's pad would be
 * negative), and for the 1x1 convolution whose input gradient is one GEMM on dY. */
static int dlrt_grad_input_as_conv(const dlrt_conv *p, dlrt_conv *t) {
    if (p->group <= 0) return 0;
    const int depthwise = p->group == p->c_in && p->c_out == p->c_in;
    if (!depthwise && (p->group != 1 || p->c_in < 32)) return 0;
    if (dlrt_conv_algo_ok(p, DLRT_CONV_GEMM_1X1)) return 0;
    dlrt_win3 g;
    dlrt_conv_geom(p, &g);
    if ((double)g.in_sp * 4 > (double)g.out_sp * 5) return 0;
    *t = *p;
    t->c_in = p->c_out;
    t->c_out = p->c_in;
    for (int d = 0; d < 3; d++) {
        const int64_t span = (g.k[d] - 1) * g.dil[d];
        /* the end pad p implies: out = in + pad_begin + pad_end - span at stride 1 */
        const int64_t pad_end = g.out[d] + span - g.in[d] - g.pad[d];
        if (g.stride[d] != 1 || g.pad[d] > span || pad_end > span || pad_end < 0) return 0;
    }
    for (int d = 0; d < p->nsp; d++) {
        t->in[d] = p->out[d];
        t->out[d] = p->in[d];
        t->pad_begin[d] = (p->k[d] - 1) * p->dil[d] - p->pad_begin[d];
    }
    /* Few positions per filter: with fewer input positions in the batch than input channels,
     * t's filters (flipped, and transformed by Winograd, on every call) and its narrow
     * products cost more than the GEMM and col2im (3x3 pad 1 on 7x7, 1 thread: 512 channels
     * at batch 1, 4, 8 1.65, 1.48, 1.2x slower, at batch 16 1.35x faster; 256 at batch 2 even,
     * at batch 8 1.85x faster). Not for depthwise filters, which are few. */
    if (!depthwise && (double)p->n * (double)g.in_sp < (double)p->c_in) return 0;
    return 1;
}

/* Floats of t's weights at the start of the input gradient's workspace (64-byte multiple). */
static int64_t dlrt_grad_flipped_floats(const dlrt_conv *p) {
    dlrt_win3 g;
    dlrt_conv_geom(p, &g);
    return dlrt_conv_round16(p->c_out * (p->c_in / p->group) * g.k_sp);
}

size_t dlrt_conv_grad_workspace(const dlrt_conv *p) {
    const dlrt_grad_plan pl = dlrt_grad_plan_of(p);
    dlrt_conv t;
    const size_t as_conv =
        dlrt_grad_input_as_conv(p, &t)
            ? (size_t)dlrt_grad_flipped_floats(p) * sizeof(float) + dlrt_conv_workspace(&t)
            : 0;
    return DLRT_MAX(dlrt_grad_plan_bytes(&pl), as_conv);
}

typedef struct dlrt_grad_flip_job {
    const float *w;
    float *wt;
    int64_t cig, cog, k_sp;
} dlrt_grad_flip_job;

/* Filters [lo, hi) of p's weights, flipped into t's. */
static void dlrt_grad_flip_filters(void *ctx, int64_t lo, int64_t hi) {
    const dlrt_grad_flip_job *j = ctx;
    const int64_t cig = j->cig, cog = j->cog, k_sp = j->k_sp;
    const float *w = j->w;
    float *wt = j->wt;
    for (int64_t f = lo; f < hi; f++) {
        const int64_t gi = f / cog, co = f % cog;
        for (int64_t ci = 0; ci < cig; ci++) {
            const float *s = w + (f * cig + ci) * k_sp;
            float *d = wt + ((gi * cig + ci) * cog + co) * k_sp + k_sp - 1;
            for (int64_t i = 0; i < k_sp; i++) d[-i] = s[i];
        }
    }
}

/* t's weights [c_in, c_out / group, k...] from p's [c_out, c_in / group, k...]: per group the
 * channel axes swapped, and the taps of each filter reversed (reversing the flattened tap index
 * reverses every spatial axis). */
static void dlrt_grad_flip_weights(const dlrt_conv *p, int64_t k_sp, const float *w, float *wt) {
    const int64_t cig = p->c_in / p->group, cog = p->c_out / p->group;
    /* 512 x 512 3x3 filters are 2.4M floats: a share of the convolution worth splitting */
    const int par = (double)p->c_out * (double)cig * (double)k_sp >= DLRT_PAR_MIN;
    dlrt_grad_flip_job job = {w, wt, cig, cog, k_sp};
    dlrt_parallel_for(p->c_out, par, dlrt_grad_flip_filters, &job);
}

/* Threads for the chunked loops: the workspace has columns for one per chunk. */
static int dlrt_grad_threads(int64_t chunks) {
    return (int)DLRT_MIN((int64_t)dlrt_threads(), chunks);
}

/* d[0..n) += s[0..n), in whole blocks of 8 first: rows are short in small layers, and a fixed
 * block is one vector operation without a vector loop's set-up. */
static inline void dlrt_add_row(float *restrict d, const float *restrict s, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) d[i + j] += s[i + j];
    for (; i < n; i++) d[i] += s[i];
}

/* d[2 * ow] += s0[ow] and d[2 * ow + 1] += s1[ow] (s1 NULL: nothing) for ow in [lo, hi): two
 * taps of a stride-2 row whose offsets are one apart fill a run of d together, so the run is
 * updated a vector at a time with the two rows interleaved, where each tap alone would update
 * every other element, one at a time. Nothing is added to an element but its own tap's value
 * (the lanes without a tap add +0, which leaves every sum as it was: a sum from a zeroed plane is
 * never -0). */
static inline void dlrt_add_pair(float *restrict d, const float *restrict s0,
                                 const float *restrict s1, int64_t lo, int64_t hi) {
    int64_t ow = lo;
#if defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 12) /* __builtin_shufflevector */
    typedef float f8 __attribute__((vector_size(32)));
    for (; ow + 8 <= hi; ow += 8) {
        f8 a, b = {0}, lo8, hi8;
        memcpy(&a, s0 + ow, sizeof a);
        if (s1) memcpy(&b, s1 + ow, sizeof b);
        memcpy(&lo8, d + 2 * ow, sizeof lo8);
        memcpy(&hi8, d + 2 * ow + 8, sizeof hi8);
        lo8 += __builtin_shufflevector(a, b, 0, 8, 1, 9, 2, 10, 3, 11);
        hi8 += __builtin_shufflevector(a, b, 4, 12, 5, 13, 6, 14, 7, 15);
        memcpy(d + 2 * ow, &lo8, sizeof lo8);
        memcpy(d + 2 * ow + 8, &hi8, sizeof hi8);
    }
#endif
    for (; ow < hi; ow++) {
        d[2 * ow] += s0[ow];
        if (s1) d[2 * ow + 1] += s1[ow];
    }
}

/* d[2 * ow] += s[ow] for ow in [lo, hi). */
static inline void dlrt_add_strided2(float *restrict d, const float *restrict s, int64_t lo,
                                     int64_t hi) {
    for (int64_t ow = lo; ow < hi; ow++) d[2 * ow] += s[ow];
}

/* Plane ci of dx (one image and group) = the adjoint of im2col applied to col
 * [cig * k_sp, out_sp]: each of its column rows is added at the tap's offsets. Taps are visited
 * in order and output rows one after the other, so consecutive vector updates land on different
 * input rows (the next tap's, shifted by one element, would stall on forwarding from the store
 * before it). With stride 2 and dilation 1 in W (ConvTranspose's upsampling), taps kw and kw + 1
 * go together through dlrt_add_pair where both reach (every element still gets its taps in
 * order: the two never reach the same one); ConvTranspose 128 -> 64 4x4 stride 2 on 32x32 (DCGAN):
 * col2im 0.43 -> 0.17 ms of the layer's 1.7 -> 1.3 ms at one thread. Forced inline: the input
 * gradient's hot loop, ~5% slower out of line (gcc). */
static DLRT_INLINE void dlrt_conv_col2im_plane(const dlrt_win3 *g, int64_t ci, const float *col,
                                               float *plane) {
    const int64_t ow_n = g->out[2], sw = g->stride[2], kw_n = g->k[2];
    const int pairs = sw == 2 && g->dil[2] == 1;
    memset(plane, 0, (size_t)g->in_sp * sizeof(float));
    for (int64_t t = 0; t < g->k_sp; t++) {
        const int64_t kw = t % kw_n, kh = t / kw_n % g->k[1], kd = t / (kw_n * g->k[1]);
        const int64_t woff = kw * g->dil[2] - g->pad[2];
        /* with pairs, tap kw + 1 comes along: this tap covers output columns [w_lo, w_hi), the
         * next [n_lo, n_hi), which starts and ends no later (its offset is one more), so the
         * two together cover [w_lo, p_hi), tap kw alone [p_hi, w_hi) and tap kw + 1 alone
         * [n_lo, w_lo). A last tap pairs with none, its partner's lanes adding +0 where they
         * are in the row (a plane is one thread's) */
        const int pair = pairs && kw + 1 < kw_n;
        int64_t w_lo, w_hi, n_lo = 0, n_hi = 0;
        dlrt_conv_span(ow_n, sw, woff, g->in[2], &w_lo, &w_hi);
        if (pairs) dlrt_conv_span(ow_n, sw, woff + 1, g->in[2], &n_lo, &n_hi);
        const int64_t p_hi = DLRT_MAX(w_lo, DLRT_MIN(w_hi, n_hi));
        if (w_lo >= w_hi && !(pair && n_lo < n_hi)) continue; /* kw + 1 then pairs with kw + 2 */
        const float *src = col + (ci * g->k_sp + t) * g->out_sp;
        for (int64_t od = 0; od < g->out[0]; od++) {
            const int64_t id = od * g->stride[0] - g->pad[0] + kd * g->dil[0];
            if (id < 0 || id >= g->in[0]) continue;
            for (int64_t oh = 0; oh < g->out[1]; oh++) {
                const int64_t ih = oh * g->stride[1] - g->pad[1] + kh * g->dil[1];
                if (ih < 0 || ih >= g->in[1]) continue;
                float *restrict d = plane + (id * g->in[1] + ih) * g->in[2];
                const int64_t row = (od * g->out[1] + oh) * ow_n;
                const float *restrict s = src + row;
                if (sw == 1) {
                    dlrt_add_row(d + w_lo + woff, s + w_lo, w_hi - w_lo);
                } else if (pairs) {
                    const float *s1 = pair ? src + g->out_sp + row : NULL;
                    dlrt_add_strided2(d + woff, s, p_hi, w_hi);
                    if (pair) dlrt_add_strided2(d + woff + 1, s1, n_lo, DLRT_MIN(w_lo, n_hi));
                    dlrt_add_pair(d + woff, s, s1, w_lo, p_hi);
                } else {
                    for (int64_t ow = w_lo; ow < w_hi; ow++) d[ow * sw + woff] += s[ow];
                }
            }
        }
        t += pair; /* tap kw + 1 is done */
    }
}

/* Rows of columns summed in registers before each update of dX in dlrt_conv_col2im_plane1. */
enum { DLRT_COL2IM_ROWS = 32 };

/* d[0..n) += rows[0][off..off + n) + ... + rows[nr - 1][...], added in that order, 8 floats at
 * a time held in registers: d is read and written once per block of 8, not once per row. */
static inline void dlrt_add_rows(float *restrict d, const float *const *rows, int nr, int64_t off,
                                 int64_t n) {
    int64_t i = 0;
#if defined(__GNUC__)
    typedef float f8 __attribute__((vector_size(32)));
    for (; i + 8 <= n; i += 8) {
        f8 acc, odd = {0}, v; /* two sums: half the chain of dependent additions */
        memcpy(&acc, d + i, sizeof acc);
        int r = 0;
        for (; r + 2 <= nr; r += 2) {
            memcpy(&v, rows[r] + off + i, sizeof v);
            acc += v;
            memcpy(&v, rows[r + 1] + off + i, sizeof v);
            odd += v;
        }
        if (r < nr) {
            memcpy(&v, rows[r] + off + i, sizeof v);
            acc += v;
        }
        acc += odd;
        memcpy(d + i, &acc, sizeof acc);
    }
#endif
    for (; i < n; i++) {
        float a = d[i];
        for (int r = 0; r < nr; r++) a += rows[r][off + i];
        d[i] = a;
    }
}

/* dlrt_conv_col2im_plane for stride 1 in every dimension (the stride-1 layers whose input
 * gradient dlrt_grad_input_as_conv leaves here: few input channels as in LeNet's 5x5 on 12x12,
 * groups, batches with few positions): by input row rather than by tap. For each tap column kw and
 * input row, the column rows of every (kd, kh) whose window covers it are summed in registers and
 * added to the row once; per tap and output row, as above, each 8-wide update read back a row
 * partly overwritten by the previous tap's update a few rows before (LeNet's 6 -> 16 input gradient
 * at batch 64: 0.44 -> 0.33 ms, col2im 0.27 -> 0.17). */
static DLRT_INLINE void dlrt_conv_col2im_plane1(const dlrt_win3 *g, int64_t ci, const float *col,
                                                float *plane) {
    /* the geometry in locals: the stores to the plane may alias *g as far as gcc knows */
    const int64_t ow_n = g->out[2], oh_n = g->out[1], od_n = g->out[0], ih_n = g->in[1];
    const int64_t kh_n = g->k[1], kd_n = g->k[0], kw_n = g->k[2], out_sp = g->out_sp;
    const int64_t dd = g->dil[0], dh = g->dil[1], pd = g->pad[0], ph = g->pad[1];
    const float *rows[DLRT_COL2IM_ROWS];
    memset(plane, 0, (size_t)g->in_sp * sizeof(float));
    for (int64_t kw = 0; kw < kw_n; kw++) {
        const int64_t woff = kw * g->dil[2] - g->pad[2];
        int64_t w_lo, w_hi;
        dlrt_conv_span(ow_n, 1, woff, g->in[2], &w_lo, &w_hi);
        if (w_lo >= w_hi) continue;
        const float *tap = col + (ci * g->k_sp + kw) * out_sp;
        float *d = plane + woff;
        for (int64_t id = 0; id < g->in[0]; id++)
            for (int64_t ih = 0; ih < ih_n; ih++, d += g->in[2]) {
                int nr = 0;
                for (int64_t kd = 0; kd < kd_n; kd++) {
                    const int64_t od = id + pd - kd * dd;
                    if (od < 0 || od >= od_n) continue;
                    for (int64_t kh = 0; kh < kh_n; kh++) {
                        const int64_t oh = ih + ph - kh * dh;
                        if (oh < 0 || oh >= oh_n) continue;
                        rows[nr++] =
                            tap + (kd * kh_n + kh) * kw_n * out_sp + (od * oh_n + oh) * ow_n;
                        if (nr == DLRT_COL2IM_ROWS) {
                            dlrt_add_rows(d + w_lo, rows, nr, w_lo, w_hi - w_lo);
                            nr = 0;
                        }
                    }
                }
                if (nr) dlrt_add_rows(d + w_lo, rows, nr, w_lo, w_hi - w_lo);
            }
    }
}

/* Plane ci of dx by whichever of the two above fits the strides. */
static inline void dlrt_conv_col2im_any(const dlrt_win3 *g, int stride1, int64_t ci,
                                        const float *col, float *dx) {
    if (stride1)
        dlrt_conv_col2im_plane1(g, ci, col, dx + ci * g->in_sp);
    else
        dlrt_conv_col2im_plane(g, ci, col, dx + ci * g->in_sp);
}

typedef struct dlrt_col2im_job {
    const dlrt_win3 *g;
    const float *col;
    float *dx;
    int stride1;
} dlrt_col2im_job;

/* Planes [lo, hi) of dx. */
static void dlrt_conv_col2im_planes(void *ctx, int64_t lo, int64_t hi) {
    const dlrt_col2im_job *j = ctx;
    for (int64_t ci = lo; ci < hi; ci++) dlrt_conv_col2im_any(j->g, j->stride1, ci, j->col, j->dx);
}

/* The cig planes of dx, in parallel when the work pays; otherwise no job for the pool at all
 * (inside a piece of the images' job it would run in the caller anyway, see above). */
static void dlrt_conv_col2im(const dlrt_win3 *g, int64_t cig, const float *col, float *dx) {
    const int stride1 = g->stride[0] == 1 && g->stride[1] == 1 && g->stride[2] == 1;
    if ((double)cig * (double)g->k_sp * (double)g->out_sp < DLRT_PAR_MIN) {
        for (int64_t ci = 0; ci < cig; ci++) dlrt_conv_col2im_any(g, stride1, ci, col, dx);
        return;
    }
    dlrt_col2im_job job = {g, col, dx, stride1};
    dlrt_parallel_for(cig, 1, dlrt_conv_col2im_planes, &job);
}

/* The weights of the input gradient's GEMM, W_g read transposed (wg + group * cog * kdim), or
 * with one group packed once (wpacked in mode DLRT_A_PACKED or DLRT_A_PACKED_T, as
 * dlrt_conv_transpose_packs_weights says; NULL: not packed). */
typedef struct dlrt_grad_w {
    const float *w, *wpacked;
    int mode;
} dlrt_grad_w;

/* The input gradient of image b (every group), columns in col. */
static void dlrt_conv_grad_input_image(const dlrt_conv *p, const dlrt_win3 *g, int pointwise,
                                       int64_t b, const float *dy, const dlrt_grad_w *w, float *dx,
                                       float *col) {
    const int64_t cig = p->c_in / p->group, cog = p->c_out / p->group, kdim = cig * g->k_sp;
    for (int64_t gi = 0; gi < p->group; gi++) {
        const float *wg = w->wpacked ? w->wpacked : w->w + gi * cog * kdim;
        const int a_mode = w->wpacked ? w->mode : 0;
        const float *dyg = dy + (b * p->c_out + gi * cog) * g->out_sp;
        float *dxg = dx + (b * p->c_in + gi * cig) * g->in_sp;
        if (pointwise) {
            dlrt_conv_sgemm(p)(cig, g->out_sp, cog, wg, cig, 1, a_mode, dyg, g->out_sp, 0, 0, dxg,
                               g->in_sp, NULL, NULL, 0);
            continue;
        }
        dlrt_conv_sgemm(p)(kdim, g->out_sp, cog, wg, kdim, 1, a_mode, dyg, g->out_sp, 0, 0, col,
                           g->out_sp, NULL, NULL, 0);
        dlrt_conv_col2im(g, cig, col, dxg);
    }
}

typedef struct dlrt_grad_input_job {
    const dlrt_conv *p;
    const dlrt_win3 *g;
    const float *dy;
    const dlrt_grad_w *w;
    float *dx, *cols;
    int64_t cols_floats; /* one thread's columns */
    int pointwise;
} dlrt_grad_input_job;

/* Images [lo, hi), in the columns of the thread running them. */
static void dlrt_grad_input_images(void *ctx, int64_t lo, int64_t hi, int slot) {
    const dlrt_grad_input_job *j = ctx;
    float *col = j->pointwise ? NULL : j->cols + (size_t)slot * (size_t)j->cols_floats;
    for (int64_t b = lo; b < hi; b++)
        dlrt_conv_grad_input_image(j->p, j->g, j->pointwise, b, j->dy, j->w, j->dx, col);
}

static void dlrt_conv_grad_input_w(const dlrt_conv *p, const float *dy, const dlrt_grad_w *w,
                                   float *dx, void *workspace) {
    dlrt_win3 g;
    dlrt_conv_geom(p, &g);
    if (p->n <= 0 || p->c_in <= 0 || g.in_sp <= 0 || p->group <= 0) return;
    if (g.out_sp <= 0 || p->c_out / p->group <= 0) { /* no output: nothing flows back */
        memset(dx, 0, (size_t)(p->n * p->c_in * g.in_sp) * sizeof(float));
        return;
    }
    dlrt_conv t;
    if (dlrt_grad_input_as_conv(p, &t)) {
        float *wt = workspace;
        dlrt_grad_flip_weights(p, g.k_sp, w->w, wt);
        dlrt_conv_forward(&t, dy, wt, dx, wt + dlrt_grad_flipped_floats(p), NULL);
        return;
    }
    const int pointwise = dlrt_conv_algo_ok(p, DLRT_CONV_GEMM_1X1);
    const dlrt_grad_plan pl = dlrt_grad_plan_of(p);
    const int threads = dlrt_grad_threads(pl.chunks);
    float *cols = workspace;
    if (threads == 1) { /* no job: the GEMM may then share its own work out */
        for (int64_t b = 0; b < p->n; b++)
            dlrt_conv_grad_input_image(p, &g, pointwise, b, dy, w, dx, cols);
        return;
    }
    /* images are independent: any thread may take any image, each with its own columns (the
     * team capped to threads, so every slot has some); one piece per image, claimed one at a
     * time, so that a thread that loses its core to another process leaves its images to the
     * others */
    dlrt_grad_input_job job = {p, &g, dy, w, dx, cols, pl.cols, pointwise};
    dlrt_parallel_slots(p->n, p->n, 1, threads, dlrt_grad_input_images, &job);
}

void dlrt_conv_grad_input(const dlrt_conv *p, const float *dy, const float *w, float *dx,
                          void *workspace) {
    const dlrt_grad_w gw = {w, NULL, 0};
    dlrt_conv_grad_input_w(p, dy, &gw, dx, workspace);
}

int dlrt_conv_transpose_packs_weights_for(int vector_bytes, const dlrt_conv *p) {
    dlrt_conv t;
    if (p->group != 1 || p->bf16 || p->c_in <= 0 || p->c_out <= 0 || dlrt_grad_input_as_conv(p, &t))
        return 0;
    dlrt_win3 g;
    dlrt_conv_geom(p, &g);
    if (g.out_sp <= 0 || g.k_sp <= 0) return 0;
    /* the product's orientation, which the packed operand fixes: as dlrt_sgemm would pick it */
    return dlrt_sgemm_transposes_for(vector_bytes, p->c_in * g.k_sp, g.out_sp, p->c_out)
               ? DLRT_A_PACKED_T
               : DLRT_A_PACKED;
}

int dlrt_conv_transpose_packs_weights(const dlrt_conv *p) {
    return dlrt_conv_transpose_packs_weights_for(DLRT_GEMM_VBYTES, p);
}

typedef struct dlrt_bias_job {
    const float *bias;
    float *y;
    int64_t channels, plane;
} dlrt_bias_job;

/* Planes [lo, hi) of y (plane i is channel i % channels of its image) plus their bias. */
static void dlrt_add_bias_planes(void *ctx, int64_t lo, int64_t hi) {
    const dlrt_bias_job *j = ctx;
    for (int64_t i = lo; i < hi; i++) {
        const float b = j->bias[i % j->channels];
        float *yp = j->y + i * j->plane;
        for (int64_t k = 0; k < j->plane; k++) yp[k] += b;
    }
}

void dlrt_conv_transpose(const dlrt_conv *p, const float *x, const float *w, const float *wpacked,
                         int wpack_mode, const float *bias, float *y, void *workspace) {
    /* a copy packed otherwise than this build and batch would run is not read */
    const int mode = dlrt_conv_transpose_packs_weights(p);
    const dlrt_grad_w gw = {w, wpacked && mode && wpack_mode == mode ? wpacked : NULL, mode};
    dlrt_conv_grad_input_w(p, x, &gw, y, workspace);
    dlrt_win3 g;
    dlrt_conv_geom(p, &g);
    const int64_t planes = p->n * p->c_in;
    if (!bias || planes <= 0 || g.in_sp <= 0) return;
    /* a pass of its own: it costs one read and write of y (0.03 of DCGAN's 1.4 ms 128 -> 64
     * layer), where folding it into the three ways dX is written (col2im, the 1x1 GEMM, the
     * flipped forward convolution) would need each to start from it */
    dlrt_bias_job job = {bias, y, p->c_in, g.in_sp};
    dlrt_parallel_for(planes, (double)planes * (double)g.in_sp >= DLRT_PAR_MIN,
                      dlrt_add_bias_planes, &job);
}

/* ---- the weight gradient of layers with few input channels, directly ---- */

#if defined(__GNUC__)
/* dW[co][ci][kh][kw] = sum over images and outputs of dY[co][oh][ow] * X[ci][oh + kh - ph][ow +
 * kw - pw]. For a layer with few input channels the GEMM dW = dY im2col(X)^T has few columns
 * (LeNet's 1 -> 6 5x5: 25), which pad its register tile, and the columns cost as much to make
 * as the product (0.37 ms of a 2 ms step, 30 GFLOP/s). Here an output row is vectors of
 * consecutive outputs: for a block of output channels and one tap row, every tap column of
 * every channel of the block has its own accumulator, fed by one load of dY per channel and one
 * (unaligned) load of X per tap column, so nothing is written but dW. Stride 1, dilation 1,
 * one group, tap columns 3 or 5 (a kernel per width keeps the accumulators in registers). A row
 * whose length is not a multiple of the vector ends with a vector overlapping the one before,
 * its repeated lanes masked off in both factors; a row reaching the padding in W is copied,
 * zero-padded, first. Each accumulator sums the images of the chunk in order, then its lanes in
 * order: the sums depend on the geometry and the chunks only. */
#define DLRT_DW_DIRECT 1
enum { DLRT_DW_VW = DLRT_GEMM_VBYTES / (int)sizeof(float), DLRT_DW_ROW = 512 };
#ifdef __AVX512F__
enum { DLRT_DW_REGS = 32 };
#else
enum { DLRT_DW_REGS = 16 };
#endif
/* Where X's row ih of plane xc is read for the taps of a row of ow_n outputs: the row itself
 * when every tap is inside it, else buf holding it zero-padded (buf[j] = row[j - pw]). */
static const float *dlrt_dw_row(const dlrt_win3 *g, const float *xc, int64_t ih, int kw,
                                float *buf) {
    const int64_t in_w = g->in[2], pw = g->pad[2], len = g->out[2] + kw - 1;
    const float *row = xc + ih * in_w;
    if (pw == 0 && len <= in_w) return row;
    dlrt_pad_row(row, in_w, pw, len, buf);
    return buf;
}

/* Zeros standing in for the dY rows of the channels a block does not have. */
static const float dlrt_dw_zeros[DLRT_DW_ROW];

/* The accumulators' update for outputs [o, o + VW) of one row (dr[c]: channel c's dY row, xr:
 * the X row the tap row reads), the lanes outside `keep` dropped when masked. */
#define DLRT_DW_STEP(KW, CB, o, masked)                                                            \
    do {                                                                                           \
        dlrt_gv d_[CB];                                                                            \
        for (int c_ = 0; c_ < (CB); c_++) {                                                        \
            d_[c_] = dlrt_gv_load(dr[c_] + (o));                                                   \
            if (masked) d_[c_] = (dlrt_gv)((dlrt_gvi)d_[c_] & keep);                               \
        }                                                                                          \
        for (int k_ = 0; k_ < (KW); k_++) {                                                        \
            dlrt_gv xv_ = dlrt_gv_load(xr + (o) + k_);                                             \
            /* both factors: 0 * inf would be a NaN that the sum never had */                      \
            if (masked) xv_ = (dlrt_gv)((dlrt_gvi)xv_ & keep);                                     \
            for (int c_ = 0; c_ < (CB); c_++) acc[c_][k_] += d_[c_] * xv_;                         \
        }                                                                                          \
    } while (0)

/* Output channels [co0, co0 + cb) (cb <= CB), input channel ci and tap row kh over images
 * [b0, b1): dw's KW taps of each of the cb channels, overwritten. */
#define DLRT_DW_KERNEL(KW, CB)                                                                     \
    static void dlrt_dw_block_##KW##_##CB(const dlrt_conv *p, const dlrt_win3 *g, int64_t b0,      \
                                          int64_t b1, int64_t ci, int64_t co0, int cb, int64_t kh, \
                                          const float *x, const float *dy, float *dw) {            \
        const int64_t ow_n = g->out[2], rem = ow_n % DLRT_DW_VW, full = ow_n / DLRT_DW_VW;         \
        dlrt_gvi keep; /* the tail vector's lanes that the last full one did not cover */          \
        for (int t = 0; t < DLRT_DW_VW; t++) keep[t] = t >= DLRT_DW_VW - rem ? -1 : 0;             \
        dlrt_gv acc[CB][KW];                                                                       \
        for (int c = 0; c < (CB); c++)                                                             \
            for (int k = 0; k < (KW); k++) acc[c][k] = (dlrt_gv){0};                               \
        float buf[DLRT_DW_ROW];                                                                    \
        for (int64_t b = b0; b < b1; b++) {                                                        \
            const float *xc = x + (b * p->c_in + ci) * g->in_sp;                                   \
            const float *dyb = dy + (b * p->c_out + co0) * g->out_sp;                              \
            for (int64_t oh = 0; oh < g->out[1]; oh++) {                                           \
                const int64_t ih = oh + kh - g->pad[1];                                            \
                if (ih < 0 || ih >= g->in[1]) continue;                                            \
                const float *xr = dlrt_dw_row(g, xc, ih, KW, buf);                                 \
                const float *dr[CB];                                                               \
                for (int c = 0; c < (CB); c++)                                                     \
                    dr[c] = c < cb ? dyb + c * g->out_sp + oh * ow_n : dlrt_dw_zeros;              \
                for (int64_t j = 0; j < full; j++) DLRT_DW_STEP(KW, CB, j *DLRT_DW_VW, 0);         \
                if (rem) DLRT_DW_STEP(KW, CB, ow_n - DLRT_DW_VW, 1);                               \
            }                                                                                      \
        }                                                                                          \
        for (int c = 0; c < cb; c++)                                                               \
            for (int k = 0; k < (KW); k++) {                                                       \
                float sum = 0.0f;                                                                  \
                for (int t = 0; t < DLRT_DW_VW; t++) sum += acc[c][k][t];                          \
                dw[(((co0 + c) * p->c_in + ci) * g->k[1] + kh) * (KW) + k] = sum;                  \
            }                                                                                      \
    }
/* a kernel per block size, so that a layer's channels split evenly (6 as 3 + 3, not 4 + 2) */
DLRT_DW_KERNEL(5, 1)
DLRT_DW_KERNEL(5, 2)
DLRT_DW_KERNEL(5, 3)
DLRT_DW_KERNEL(5, 4)
DLRT_DW_KERNEL(3, 1)
DLRT_DW_KERNEL(3, 2)
DLRT_DW_KERNEL(3, 3)
DLRT_DW_KERNEL(3, 4)
DLRT_DW_KERNEL(3, 5)
DLRT_DW_KERNEL(3, 6)
DLRT_DW_KERNEL(3, 7)
typedef void (*dlrt_dw_kernel)(const dlrt_conv *, const dlrt_win3 *, int64_t, int64_t, int64_t,
                               int64_t, int, int64_t, const float *, const float *, float *);
static const dlrt_dw_kernel dlrt_dw_kernels3[] = {
    dlrt_dw_block_3_1, dlrt_dw_block_3_2, dlrt_dw_block_3_3, dlrt_dw_block_3_4,
    dlrt_dw_block_3_5, dlrt_dw_block_3_6, dlrt_dw_block_3_7};
static const dlrt_dw_kernel dlrt_dw_kernels5[] = {dlrt_dw_block_5_1, dlrt_dw_block_5_2,
                                                  dlrt_dw_block_5_3, dlrt_dw_block_5_4};

/* The kernels for kw tap columns (3 or 5), by block size from 1, and how many there are. */
static const dlrt_dw_kernel *dlrt_dw_kernels(int64_t kw, int64_t *count) {
    *count = kw == 3 ? (int64_t)(sizeof dlrt_dw_kernels3 / sizeof *dlrt_dw_kernels3)
                     : (int64_t)(sizeof dlrt_dw_kernels5 / sizeof *dlrt_dw_kernels5);
    return kw == 3 ? dlrt_dw_kernels3 : dlrt_dw_kernels5;
}

/* Output channels per block for kw tap columns and c_out channels: as many as the registers
 * hold (CB x kw accumulators, CB rows of dY, one of X) and a kernel exists for, evened out over
 * the blocks. */
static int dlrt_dw_block(int64_t kw, int64_t c_out) {
    int64_t kernels;
    dlrt_dw_kernels(kw, &kernels);
    const int64_t most = DLRT_MIN((DLRT_DW_REGS - 4) / (kw + 1), kernels);
    const int64_t blocks = (c_out + most - 1) / most;
    return (int)((c_out + blocks - 1) / blocks);
}

typedef struct dlrt_dwgrad_job {
    const dlrt_conv *p;
    const dlrt_win3 *g;
    int64_t b0, b1;
    const float *x, *dy;
    float *dw;
    dlrt_dw_kernel run;
    int cbw;
} dlrt_dwgrad_job;

/* Units [lo, hi) of dlrt_grad_weight_direct_images. */
static void dlrt_dwgrad_units(void *ctx, int64_t lo, int64_t hi) {
    const dlrt_dwgrad_job *j = ctx;
    const dlrt_conv *p = j->p;
    const dlrt_win3 *g = j->g;
    const int cbw = j->cbw;
    for (int64_t u = lo; u < hi; u++) {
        const int64_t kh = u % g->k[1], ci = u / g->k[1] % p->c_in,
                      co0 = u / g->k[1] / p->c_in * cbw;
        const int cb = (int)DLRT_MIN((int64_t)cbw, p->c_out - co0);
        j->run(p, g, j->b0, j->b1, ci, co0, cb, kh, j->x, j->dy, j->dw);
    }
}
#endif

/* Whether the weight gradient of p runs directly (above) rather than as GEMMs: where it
 * measured faster, with few input channels (GEMM columns c_in * taps <= 32). */
static int dlrt_grad_weight_direct(const dlrt_conv *p, const dlrt_win3 *g) {
#ifdef DLRT_DW_DIRECT
    /* 1-D or 2-D: a 3-D layer with one tap in depth still has planes in depth */
    if (p->group != 1 || p->c_in * g->k_sp > 32 || g->in[0] != 1 || g->out[0] != 1 ||
        (g->k[2] != 3 && g->k[2] != 5))
        return 0;
    for (int d = 0; d < 3; d++)
        if (g->stride[d] != 1 || g->dil[d] != 1) return 0;
    return g->out[2] >= DLRT_DW_VW && g->out[2] + g->k[2] - 1 <= DLRT_DW_ROW;
#else
    (void)p, (void)g;
    return 0;
#endif
}

/* The direct weight gradient of images [b0, b1) into dw (overwritten), its (channel block, input
 * channel, tap row) units in parallel when large enough (inside a piece of the chunks' job, in
 * the caller): each writes its own elements of dw. */
static void dlrt_grad_weight_direct_images(const dlrt_conv *p, const dlrt_win3 *g, int64_t b0,
                                           int64_t b1, const float *x, const float *dy, float *dw) {
#ifdef DLRT_DW_DIRECT
    const int cbw = dlrt_dw_block(g->k[2], p->c_out);
    int64_t kernels;
    const dlrt_dw_kernel run = dlrt_dw_kernels(g->k[2], &kernels)[cbw - 1];
    const int64_t blocks = (p->c_out + cbw - 1) / cbw, units = blocks * p->c_in * g->k[1];
    const int par = (double)(b1 - b0) * (double)p->c_out * (double)p->c_in * (double)g->k_sp *
                        (double)g->out_sp >=
                    DLRT_PAR_MIN;
    dlrt_dwgrad_job job = {p, g, b0, b1, x, dy, dw, run, cbw};
    dlrt_parallel_for(units, par, dlrt_dwgrad_units, &job);
#else
    (void)p, (void)g, (void)b0, (void)b1, (void)x, (void)dy, (void)dw;
#endif
}

/* Weight gradient of images [b0, b1) (every group) into dw: the first image's product
 * overwrites, the next ones add theirs in image order. Columns in col. */
static void dlrt_conv_grad_weight_images(const dlrt_conv *p, const dlrt_win3 *g, int pointwise,
                                         int64_t b0, int64_t b1, const float *x, const float *dy,
                                         float *dw, float *col) {
    if (dlrt_grad_weight_direct(p, g)) {
        dlrt_grad_weight_direct_images(p, g, b0, b1, x, dy, dw);
        return;
    }
    const int64_t cig = p->c_in / p->group, cog = p->c_out / p->group, kdim = cig * g->k_sp;
    for (int64_t b = b0; b < b1; b++)
        for (int64_t gi = 0; gi < p->group; gi++) {
            const float *src = x + (b * p->c_in + gi * cig) * g->in_sp;
            const float *dyg = dy + (b * p->c_out + gi * cog) * g->out_sp;
            float *dwg = dw + gi * cog * kdim;
            if (!pointwise) {
                dlrt_conv_im2col(g, cig, src, col);
                src = col;
            }
            const dlrt_epilogue acc = {.alpha = 1.0f, .residual = dwg, .res_rs = kdim, .res_cs = 1};
            dlrt_conv_sgemm(p)(cog, kdim, g->out_sp, dyg, g->out_sp, 0, 0, src, g->out_sp, 1, 0,
                               dwg, kdim, b > b0 ? &acc : NULL, NULL, 0);
        }
}

/* Chunk c of plan pl: its images into dw (chunk 0) or its partial in parts. */
static void dlrt_grad_weight_chunk(const dlrt_conv *p, const dlrt_win3 *g, int pointwise,
                                   const dlrt_grad_plan *pl, int64_t c, const float *x,
                                   const float *dy, float *dw, float *parts, float *col) {
    dlrt_conv_grad_weight_images(p, g, pointwise, c * p->n / pl->chunks,
                                 (c + 1) * p->n / pl->chunks, x, dy,
                                 c ? parts + (size_t)(c - 1) * (size_t)pl->part : dw, col);
}

/* dw += the partials of chunks 1.. in chunk order, on elements [i0, i0 + len). */
static void dlrt_grad_reduce(const dlrt_grad_plan *pl, const float *parts, float *dw, int64_t i0,
                             int64_t len) {
    for (int64_t c = 1; c < pl->chunks; c++)
        dlrt_add_row(dw + i0, parts + (size_t)(c - 1) * (size_t)pl->part + i0, len);
}

enum { DLRT_GRAD_BLOCK = 1024 }; /* elements per reduction step */

typedef struct dlrt_grad_weight_job {
    const dlrt_conv *p;
    const dlrt_win3 *g;
    const dlrt_grad_plan *pl;
    const float *x, *dy;
    float *dw, *parts, *cols;
    int64_t nel;
    int pointwise;
} dlrt_grad_weight_job;

/* Chunks [lo, hi), in the columns of the thread running them. */
static void dlrt_grad_weight_chunks(void *ctx, int64_t lo, int64_t hi, int slot) {
    const dlrt_grad_weight_job *j = ctx;
    float *col = j->cols + (size_t)slot * (size_t)j->pl->cols;
    for (int64_t c = lo; c < hi; c++)
        dlrt_grad_weight_chunk(j->p, j->g, j->pointwise, j->pl, c, j->x, j->dy, j->dw, j->parts,
                               col);
}

/* Reduction blocks [lo, hi) of DLRT_GRAD_BLOCK elements of dw. */
static void dlrt_grad_reduce_blocks(void *ctx, int64_t lo, int64_t hi) {
    enum { BLOCK = DLRT_GRAD_BLOCK };
    const dlrt_grad_weight_job *j = ctx;
    const int64_t nel = j->nel;
    for (int64_t k = lo; k < hi; k++)
        dlrt_grad_reduce(j->pl, j->parts, j->dw, k * BLOCK,
                         DLRT_MIN((int64_t)BLOCK, nel - k * BLOCK));
}

void dlrt_conv_grad_weight(const dlrt_conv *p, const float *x, const float *dy, float *dw,
                           void *workspace) {
    dlrt_win3 g;
    dlrt_conv_geom(p, &g);
    if (p->group <= 0 || p->c_out <= 0) return;
    const int64_t kdim = p->c_in / p->group * g.k_sp, nel = p->c_out * kdim;
    if (kdim <= 0) return;
    if (p->n <= 0) { /* an empty batch: the sum is empty */
        memset(dw, 0, (size_t)nel * sizeof(float));
        return;
    }
    const int pointwise = dlrt_conv_algo_ok(p, DLRT_CONV_GEMM_1X1);
    const dlrt_grad_plan pl = dlrt_grad_plan_of(p);
    float *cols = workspace;
    if (pl.chunks == 1) {
        dlrt_conv_grad_weight_images(p, &g, pointwise, 0, p->n, x, dy, dw, cols);
        return;
    }
    float *parts = cols + (size_t)pl.chunks * (size_t)pl.cols; /* chunk c's at (c - 1) * part */
    const int threads = dlrt_grad_threads(pl.chunks);
    if (threads == 1) { /* the same sums without a job (see dlrt_conv_grad_input) */
        for (int64_t c = 0; c < pl.chunks; c++)
            dlrt_grad_weight_chunk(p, &g, pointwise, &pl, c, x, dy, dw, parts, cols);
        dlrt_grad_reduce(&pl, parts, dw, 0, nel);
        return;
    }
    const int64_t blocks = (nel + DLRT_GRAD_BLOCK - 1) / DLRT_GRAD_BLOCK;
    dlrt_grad_weight_job job = {p, &g, &pl, x, dy, dw, parts, cols, nel, pointwise};
    /* one piece per chunk, claimed one at a time as for the input gradient (the team capped
     * to threads, which have columns each): a chunk's sums do not depend on its thread */
    dlrt_parallel_slots(pl.chunks, pl.chunks, 1, threads, dlrt_grad_weight_chunks, &job);
    /* the partials in chunk order, whatever thread computed them (once every chunk is done:
     * the job above has returned), one piece per thread */
    dlrt_parallel(blocks, 0, 1, threads, dlrt_grad_reduce_blocks, &job);
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
    const int pair = max && g->k[0] == 1 && g->k[1] == 2 && g->k[2] == 2 && g->stride[1] == 2 &&
                     g->stride[2] == 2 && g->dil[1] == 1 && g->dil[2] == 1;
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
            /* [f_lo, f_hi): 2x2 windows inside the input, done at once (padded pools: unpadded
             * ones never come here, they take dlrt_pool_pair_grad) */
            int64_t f_lo = 0, f_hi = 0;
            if (pair && lo[0] < hi[0] && lo[1] == 0 && hi[1] == 2) {
                dlrt_conv_span(g->out[2], 2, -g->pad[2], g->in[2] - 1, &f_lo, &f_hi);
                const int64_t at = row0 + 2 * f_lo - g->pad[2];
                if (f_lo < f_hi)
                    dlrt_pair_grad_row(x + at, x + at + g->in[2], dyr + f_lo, dx + at,
                                       dx + at + g->in[2], f_hi - f_lo);
            }
            for (int64_t ow = 0; ow < g->out[2]; ow++) {
                if (ow == f_lo && f_lo < f_hi) {
                    ow = f_hi - 1;
                    continue;
                }
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

typedef struct dlrt_pool_grad_job {
    const dlrt_win3 *g;
    const int64_t *pe;
    const float *x, *dy;
    float *dx;
    int max, include_pad;
} dlrt_pool_grad_job;

/* Planes [lo, hi) of dlrt_pool_grad. */
static void dlrt_pool_grad_planes(void *ctx, int64_t lo, int64_t hi) {
    const dlrt_pool_grad_job *j = ctx;
    const dlrt_win3 *g = j->g;
    const int max = j->max;
    for (int64_t pl = lo; pl < hi; pl++)
        dlrt_pool_grad_plane(g, j->pe, max, j->include_pad, max ? j->x + pl * g->in_sp : NULL,
                             j->dy + pl * g->out_sp, j->dx + pl * g->in_sp);
}

/* Every (n, c) plane, in parallel when the work pays; x is read only by the max. */
static void dlrt_pool_grad(const dlrt_pool *p, int max, const float *x, const float *dy,
                           float *dx) {
    dlrt_win3 g;
    int64_t pe[3];
    dlrt_pool_geom(p, &g, pe);
    const int64_t planes = p->n * p->c;
    if (planes <= 0 || g.in_sp <= 0) return;
    if (max && dlrt_pool_pair(p, &g)) {
        dlrt_pool_pair_grad(&g, planes * g.out[0], x, dy, dx);
        return;
    }
    const int par =
        (double)planes * ((double)g.out_sp * (double)g.k_sp + (double)g.in_sp) >= DLRT_PAR_MIN;
    dlrt_pool_grad_job job = {&g, pe, x, dy, dx, max, p->count_include_pad};
    dlrt_parallel_for(planes, par, dlrt_pool_grad_planes, &job);
}

void dlrt_maxpool_grad(const dlrt_pool *p, const float *x, const float *dy, float *dx) {
    dlrt_pool_grad(p, 1, x, dy, dx);
}

void dlrt_avgpool_grad(const dlrt_pool *p, const float *dy, float *dx) {
    dlrt_pool_grad(p, 0, NULL, dy, dx);
}
