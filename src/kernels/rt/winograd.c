/* winograd.c — dlrt_conv_winograd: 2-D 3x3 convolution with stride 1, dilation 1 and one group
 * by Winograd's minimal filtering F(m x m, 3x3) (Lavin & Gray), m = 4 (points 0, +-1, +-2, inf)
 * or m = 2 (points 0, +-1, inf): each m x m output tile is A^T [(G g G^T) . (B^T d B)] A over the
 * a x a input tile d (a = m + 2), so the a^2 products of a tile and an (output, input) channel
 * pair replace 9 m^2 multiply-adds of the direct form (36 for 144 at m = 4, 16 for 36 at m = 2).
 * The products summed over input channels are a^2 independent GEMMs, one per frequency xi:
 *   M[xi] (c_out x tiles) = U[xi] (c_out x c_in) x V[xi] (c_in x tiles)
 * run by dlrt_sgemm. V and M, for a batch of images (several when the images have few tiles, so
 * that the GEMMs stay wide enough), live in the caller's workspace
 * (dlrt_conv_winograd_workspace). U, the transformed weights, is either made there on every
 * call, or, for a layer's constant weights, made once at load time already packed as the GEMMs'
 * operand (dlrt_conv_winograd_pack; conv.c decides which and how). The output transform applies the
 * epilogue before storing, one row of a tile row at a time (the residual is read before y is
 * written, so it may be y).
 *
 * The transforms work on a chunk of DLRT_WG_TB tiles of a tile row at once, laid side by side
 * with the tile index innermost, so that every pass runs on vectors of tiles: the input
 * transform zero-pads the 6 input rows of the chunk into a local buffer, puts each tile's
 * columns apart (dlrt_wg_apart), applies B^T down the columns, then B across each tile; the
 * output transform reads each frequency for the chunk's tiles (contiguous in M), applies A^T
 * both ways and puts each tile's columns back together (dlrt_wg_together). A chunk always
 * computes DLRT_WG_TB tiles: those past the tile row's end (a row of 14 tiles on a 56-wide
 * plane) are computed on whatever the local buffers hold there (zeros, or the image's last
 * columns) and neither stored to V nor read from M. Tiles that overhang the output's bottom or
 * right edge are computed in full (their inputs past the image are zeros) and cut when stored.
 * Accuracy: at c_in = 512 on N(0, 1) data the largest error is about 6e-6 of the largest output at
 * m = 4 (tests/unit/test_rtconv.c checks 1e-4).
 *
 * Why two tile sizes: at m = 4 the transformed weights are 4x the filters (36 / 9 floats), at
 * m = 2 1.8x (16 / 9), and a product has a quarter as many columns. On small planes with many
 * channels (ResNet-50's 256-channel 14x14 layers: 16 columns at m = 4, 49 at m = 2) the narrow
 * products and the stream of 9.4 MB of transformed weights per call cost more than m = 4 saves
 * in multiply-adds; conv.c's cost model picks per layer. */
#include "conv-impl.h"

enum {
    DLRT_WG_TB = 16,    /* tiles per transform chunk (the masks and transposes assume 16) */
    DLRT_WG_COLS = 128, /* images are batched until a GEMM has at least this many tiles */
    DLRT_WG_GB = 256,   /* GEMM columns per parallel work unit */
    /* floats added between the frequencies' matrices: a transform writes (or reads) the 36 at
     * once, and with strides of a power of two they would all fall into one cache set */
    DLRT_WG_SKEW = 16
};

_Static_assert(DLRT_WG_TB == 16, "the chunk moves and transposes are written for 16 tiles");
_Static_assert(DLRT_WG_SKEW >= 8, "AVX2's masked moves address 8 floats past a short chunk");

typedef struct dlrt_wg {
    int m, a, nf; /* output tile side (4 or 2), input tile side m + 2, frequencies a * a */
    int64_t ci, co, ih, iw, oh, ow, ph, pw;
    int64_t th, tw, tiles; /* tile rows and columns per image, th * tw */
    int64_t nb, cols;      /* images per batch, nb * tiles (the width of V and M) */
    int64_t us, vs, ms;    /* floats between frequencies in U, V and M */
} dlrt_wg;

int dlrt_conv_winograd_ok(const dlrt_conv *p) {
    return p->nsp == 2 && p->group == 1 && p->k[0] == 3 && p->k[1] == 3 && p->stride[0] == 1 &&
           p->stride[1] == 1 && p->dil[0] == 1 && p->dil[1] == 1;
}

static void dlrt_wg_init(const dlrt_conv *p, int m, dlrt_wg *s) {
    s->m = m == 2 ? 2 : 4, s->a = s->m + 2, s->nf = dlrt_conv_winograd_freqs(m);
    s->ci = p->c_in, s->co = p->c_out;
    s->ih = p->in[0], s->iw = p->in[1], s->oh = p->out[0], s->ow = p->out[1];
    s->ph = p->pad_begin[0], s->pw = p->pad_begin[1];
    s->th = (s->oh + s->m - 1) / s->m, s->tw = (s->ow + s->m - 1) / s->m;
    s->tiles = s->th * s->tw;
    s->nb = s->tiles > 0 ? (DLRT_WG_COLS + s->tiles - 1) / s->tiles : 1;
    s->nb = DLRT_MAX((int64_t)1, DLRT_MIN(s->nb, p->n));
    s->cols = s->nb * s->tiles;
    s->us = s->co * s->ci + DLRT_WG_SKEW;
    s->vs = s->ci * s->cols + DLRT_WG_SKEW;
    s->ms = s->co * s->cols + DLRT_WG_SKEW;
}

void dlrt_conv_winograd_cols(const dlrt_conv *p, int m, int64_t *tiles, int64_t *cols) {
    dlrt_wg s;
    dlrt_wg_init(p, m, &s);
    *tiles = s.tiles, *cols = s.cols;
}

size_t dlrt_conv_winograd_workspace(const dlrt_conv *p, int m, int packed) {
    dlrt_wg s;
    dlrt_wg_init(p, m, &s);
    if (p->n <= 0 || s.tiles <= 0) return 0;
    return (size_t)s.nf * (size_t)((packed ? 0 : s.us) + s.vs + s.ms) * sizeof(float);
}

int dlrt_conv_winograd_tile(int mode) {
    return mode == DLRT_WG_PACKED || mode == DLRT_WG_PACKED_T     ? 4
           : mode == DLRT_WG2_PACKED || mode == DLRT_WG2_PACKED_T ? 2
                                                                  : 0;
}

/* The 1-D transforms, each applied twice per tile (down the columns, then across the rows):
 * out[r * os] = (T in)[r] for the in[j * is]. Written once per matrix so that both passes run the
 * same expressions; inlined with constant strides, each pass still vectorizes across the tiles
 * (or filters) its caller loops over. */
static DLRT_INLINE void dlrt_wg_g4(const float *in, int64_t is, float *out, int64_t os) {
    const float g0 = in[0], g1 = in[is], g2 = in[2 * is]; /* G, F(4x4): 3 -> 6 */
    out[0] = g0 * (1.0f / 4.0f);
    out[os] = (g0 + g1 + g2) * (-1.0f / 6.0f);
    out[2 * os] = (g0 - g1 + g2) * (-1.0f / 6.0f);
    out[3 * os] = g0 * (1.0f / 24.0f) + g1 * (1.0f / 12.0f) + g2 * (1.0f / 6.0f);
    out[4 * os] = g0 * (1.0f / 24.0f) - g1 * (1.0f / 12.0f) + g2 * (1.0f / 6.0f);
    out[5 * os] = g2;
}

static DLRT_INLINE void dlrt_wg_g2(const float *in, int64_t is, float *out, int64_t os) {
    const float g0 = in[0], g1 = in[is], g2 = in[2 * is]; /* G, F(2x2): 3 -> 4 */
    out[0] = g0;
    out[os] = (g0 + g1 + g2) * 0.5f;
    out[2 * os] = (g0 - g1 + g2) * 0.5f;
    out[3 * os] = g2;
}

static DLRT_INLINE void dlrt_wg_bt4(const float *in, int64_t is, float *out, int64_t os) {
    const float d0 = in[0], d1 = in[is], d2 = in[2 * is], d3 = in[3 * is], d4 = in[4 * is],
                d5 = in[5 * is]; /* B^T, F(4x4): 6 -> 6 */
    out[0] = 4.0f * d0 - 5.0f * d2 + d4;
    out[os] = -4.0f * (d1 + d2) + d3 + d4;
    out[2 * os] = 4.0f * (d1 - d2) - d3 + d4;
    out[3 * os] = 2.0f * (d3 - d1) - d2 + d4;
    out[4 * os] = 2.0f * (d1 - d3) - d2 + d4;
    out[5 * os] = 4.0f * d1 - 5.0f * d3 + d5;
}

static DLRT_INLINE void dlrt_wg_bt2(const float *in, int64_t is, float *out, int64_t os) {
    const float d0 = in[0], d1 = in[is], d2 = in[2 * is], d3 = in[3 * is]; /* B^T, F(2x2) */
    out[0] = d0 - d2;
    out[os] = d1 + d2;
    out[2 * os] = d2 - d1;
    out[3 * os] = d1 - d3;
}

static DLRT_INLINE void dlrt_wg_at4(const float *in, int64_t is, float *out, int64_t os) {
    const float a0 = in[0], a1 = in[is], a2 = in[2 * is], a3 = in[3 * is], a4 = in[4 * is],
                a5 = in[5 * is]; /* A^T, F(4x4): 6 -> 4 */
    out[0] = a0 + a1 + a2 + a3 + a4;
    out[os] = a1 - a2 + 2.0f * (a3 - a4);
    out[2 * os] = a1 + a2 + 4.0f * (a3 + a4);
    out[3 * os] = a1 - a2 + 8.0f * (a3 - a4) + a5;
}

static DLRT_INLINE void dlrt_wg_at2(const float *in, int64_t is, float *out, int64_t os) {
    const float a0 = in[0], a1 = in[is], a2 = in[2 * is], a3 = in[3 * is]; /* A^T, F(2x2) */
    out[0] = a0 + a1 + a2;
    out[os] = a1 - a2 - a3;
}

/* The 1-D transforms of tile size m, 4 or 2: a constant at every call (the 2-D transforms below
 * are inlined with it), so each picks one matrix and its callers' loops keep constant bounds. */
static DLRT_INLINE void dlrt_wg_g(int m, const float *in, int64_t is, float *out, int64_t os) {
    if (m == 4)
        dlrt_wg_g4(in, is, out, os);
    else
        dlrt_wg_g2(in, is, out, os);
}
static DLRT_INLINE void dlrt_wg_bt(int m, const float *in, int64_t is, float *out, int64_t os) {
    if (m == 4)
        dlrt_wg_bt4(in, is, out, os);
    else
        dlrt_wg_bt2(in, is, out, os);
}
static DLRT_INLINE void dlrt_wg_at(int m, const float *in, int64_t is, float *out, int64_t os) {
    if (m == 4)
        dlrt_wg_at4(in, is, out, os);
    else
        dlrt_wg_at2(in, is, out, os);
}

/* o[xi][k] = (G g G^T)[xi] for the nc <= DLRT_WG_TB filters g = src[k * 9 .. k * 9 + 9):
 * (m + 2)^2 frequencies. */
static DLRT_INLINE void dlrt_wg_filters(const int m, const float *src, int nc,
                                        float o[36][DLRT_WG_TB]) {
    enum { CB = DLRT_WG_TB };
    const int a = m + 2;
    float g[9][CB], t[6][3][CB];
    for (int k = 0; k < nc; k++) /* the filters' taps, channel innermost */
        for (int e = 0; e < 9; e++) g[e][k] = src[k * 9 + e];
    for (int c = 0; c < 3; c++) /* G g, column c */
        for (int k = 0; k < nc; k++) dlrt_wg_g(m, &g[c][k], 3 * CB, &t[0][c][k], 3 * CB);
    for (int i = 0; i < a; i++) /* then (G g) G^T, row i */
        for (int k = 0; k < nc; k++) dlrt_wg_g(m, &t[i][0][k], CB, &o[i * a][k], CB);
}

/* U[xi] = (G g G^T)[xi] for each 3x3 filter g = w[co][ci] (c_out x c_in of them), DLRT_WG_TB
 * input channels at a time. Frequency xi's matrix starts xs floats after xi - 1's; operand < 0
 * stores it by rows (element (co, ci) at co * c_in + ci: a block of one filter row's results is
 * 36 runs), else as that GEMM operand is packed (dlrt_gemm_packed_index; the padding lines are
 * the caller's). */
typedef struct dlrt_wg_weights_job {
    const float *w;
    float *U;
    size_t xs;
    int64_t c_in, blocks;
    int m, operand;
} dlrt_wg_weights_job;

/* Units [lo, hi): a block of DLRT_WG_TB input channels of an output channel's filters. */
static void dlrt_wg_weights_units(void *ctx, int64_t lo, int64_t hi) {
    enum { CB = DLRT_WG_TB };
    const dlrt_wg_weights_job *j = ctx;
    const float *w = j->w;
    float *U = j->U;
    const size_t xs = j->xs;
    const int64_t c_in = j->c_in, blocks = j->blocks;
    const int m = j->m, operand = j->operand, nf = dlrt_conv_winograd_freqs(m);
    for (int64_t u = lo; u < hi; u++) {
        const int64_t co = u / blocks, c0 = (u % blocks) * CB;
        const int nc = (int)DLRT_MIN((int64_t)CB, c_in - c0);
        float o[36][CB];
        if (m == 2)
            dlrt_wg_filters(2, w + (co * c_in + c0) * 9, nc, o);
        else
            dlrt_wg_filters(4, w + (co * c_in + c0) * 9, nc, o);
        if (operand >= 0) {
            for (int k = 0; k < nc; k++) {
                const size_t at = dlrt_gemm_packed_index(operand, co, c0 + k, c_in);
                for (int xi = 0; xi < nf; xi++) U[(size_t)xi * xs + at] = o[xi][k];
            }
            continue;
        }
        float *dst = U + co * c_in + c0;
        if (nc == CB) /* a constant length: vector moves, not 36 calls of a memcpy */
            for (int xi = 0; xi < nf; xi++)
                for (int k = 0; k < CB; k++) dst[(size_t)xi * xs + k] = o[xi][k];
        else
            for (int xi = 0; xi < nf; xi++)
                for (int k = 0; k < nc; k++) dst[(size_t)xi * xs + k] = o[xi][k];
    }
}

static void dlrt_wg_weights(int m, int64_t c_out, int64_t c_in, const float *w, float *U, size_t xs,
                            int operand) {
    const int64_t blocks = (c_in + DLRT_WG_TB - 1) / DLRT_WG_TB;
    const int nf = dlrt_conv_winograd_freqs(m);
    dlrt_wg_weights_job job = {w, U, xs, c_in, blocks, m, operand};
    dlrt_parallel_for(c_out * blocks, (double)c_out * (double)c_in * nf * 6.0 >= DLRT_PAR_MIN,
                      dlrt_wg_weights_units, &job);
}

/* The GEMM operand that each frequency's c_out x c_in matrix of transformed weights is packed
 * as: op(A) of M[xi] = U[xi] V[xi], or, transposed, the right operand of M^T = V^T U^T. */
static int dlrt_wg_operand(int mode) {
    return mode == DLRT_WG_PACKED_T || mode == DLRT_WG2_PACKED_T ? 1 : 0;
}

int dlrt_conv_winograd_mode_for(int vector_bytes, const dlrt_conv *p, int m) {
    dlrt_wg s;
    dlrt_wg_init(p, m, &s);
    /* dlrt_wg_gemms' products: co x (up to DLRT_WG_GB columns) x ci */
    const int64_t nc = DLRT_MIN(s.cols, (int64_t)DLRT_WG_GB);
    const int t = dlrt_sgemm_transposes_for(vector_bytes, s.co, nc, s.ci);
    if (s.m == 2) return t ? DLRT_WG2_PACKED_T : DLRT_WG2_PACKED;
    return t ? DLRT_WG_PACKED_T : DLRT_WG_PACKED;
}

size_t dlrt_conv_winograd_packed_bytes(int mode, int64_t c_out, int64_t c_in) {
    const int m = dlrt_conv_winograd_tile(mode);
    if (!m) return 0;
    const size_t one = dlrt_gemm_packed_bytes(dlrt_wg_operand(mode), c_out, c_in);
    const size_t nf = (size_t)dlrt_conv_winograd_freqs(m);
    return one > SIZE_MAX / nf ? 0 : nf * one;
}

void dlrt_conv_winograd_pack(int mode, int64_t c_out, int64_t c_in, const float *w, float *dst) {
    const size_t bytes = dlrt_conv_winograd_packed_bytes(mode, c_out, c_in);
    if (!bytes) return;
    const int m = dlrt_conv_winograd_tile(mode);
    memset(dst, 0, bytes); /* the lines that pad the last panel */
    dlrt_wg_weights(m, c_out, c_in, w, dst,
                    bytes / (size_t)dlrt_conv_winograd_freqs(m) / sizeof(float),
                    dlrt_wg_operand(mode));
}

enum { DLRT_WG_W = 4 * DLRT_WG_TB + 2 }; /* the widest input span of a chunk */

/* d[r][u] = the input at row r0 + r, column c0 + u for r < s->a, u < width; zero in the
 * padding. */
static void dlrt_wg_in_rows(const dlrt_wg *s, const float *xc, int64_t r0, int64_t c0,
                            int64_t width, float d[6][DLRT_WG_W]) {
    int64_t lo, hi;
    dlrt_conv_span(width, 1, c0, s->iw, &lo, &hi);
    if (hi < lo) hi = lo;
    for (int r = 0; r < s->a; r++) {
        const int64_t ih = r0 + r;
        if (ih < 0 || ih >= s->ih) {
            for (int64_t u = 0; u < width; u++) d[r][u] = 0.0f;
            continue;
        }
        const float *xr = xc + ih * s->iw; /* column c0 + u, inside for u in [lo, hi) */
        for (int64_t u = 0; u < lo; u++) d[r][u] = 0.0f;
        for (int64_t u = lo; u < hi; u++) d[r][u] = xr[c0 + u];
        for (int64_t u = hi; u < width; u++) d[r][u] = 0.0f;
    }
}

#if defined(__AVX2__) && !defined(__AVX512F__)
/* The mask of an 8-float move's first n lanes (none for n <= 0, all from 8 on). */
static DLRT_INLINE __m256i dlrt_wg_first8(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* v's lanes moved down by one, x entering the top. */
static DLRT_INLINE __m256 dlrt_wg_shift_in8(__m256 v, float x) {
    const __m256 r = _mm256_permutevar8x32_ps(v, _mm256_setr_epi32(1, 2, 3, 4, 5, 6, 7, 0));
    return _mm256_blend_ps(r, _mm256_set1_ps(x), 0x80);
}

/* The even (hi = 0) or odd 64-bit units of a and b, paired as unpcklpd / unpckhpd pair them. */
static DLRT_INLINE __m256 dlrt_wg_unpack64_8(__m256 a, __m256 b, int hi) {
    const __m256d x = _mm256_castps_pd(a), y = _mm256_castps_pd(b);
    return _mm256_castpd_ps(hi ? _mm256_unpackhi_pd(x, y) : _mm256_unpacklo_pd(x, y));
}
#endif

/* dst[0, n) = src[0, n) for n <= DLRT_WG_TB, and the reverse with zeros from n on: a chunk
 * computes all its DLRT_WG_TB tiles in local arrays, but only its nt tiles are stored to V or
 * read from M, by masked moves on AVX-512 (one) and AVX2 (two). The AVX2 forms address 8
 * floats past dst / src even when n <= 8: inside the workspace, since each frequency's matrix
 * has DLRT_WG_SKEW floats after it. */
static DLRT_INLINE void dlrt_wg_put(float *dst, const float *src, int n) {
#ifdef __AVX512F__
    _mm512_mask_storeu_ps(dst, (__mmask16)((1u << n) - 1u), _mm512_loadu_ps(src));
#elif defined(__AVX2__)
    _mm256_maskstore_ps(dst, dlrt_wg_first8(n), _mm256_loadu_ps(src));
    _mm256_maskstore_ps(dst + 8, dlrt_wg_first8(n - 8), _mm256_loadu_ps(src + 8));
#else
    for (int t = 0; t < n; t++) dst[t] = src[t];
#endif
}

static DLRT_INLINE void dlrt_wg_get(const float *src, int n, float *dst) {
#ifdef __AVX512F__
    _mm512_storeu_ps(dst, _mm512_maskz_loadu_ps((__mmask16)((1u << n) - 1u), src));
#elif defined(__AVX2__)
    _mm256_storeu_ps(dst, _mm256_maskload_ps(src, dlrt_wg_first8(n)));
    _mm256_storeu_ps(dst + 8, _mm256_maskload_ps(src + 8, dlrt_wg_first8(n - 8)));
#else
    for (int t = 0; t < DLRT_WG_TB; t++) dst[t] = t < n ? src[t] : 0.0f;
#endif
}

#ifdef __AVX512F__
/* v's lanes moved down by one, the float at next entering the top. */
static DLRT_INLINE __m512 dlrt_wg_shift_in(__m512 v, const float *next) {
    const __m512i top = _mm512_castps_si512(_mm512_maskz_loadu_ps(1, next));
    return _mm512_castsi512_ps(_mm512_alignr_epi32(top, _mm512_castps_si512(v), 1));
}

/* The even (hi = 0) or odd 64-bit units of a and b, paired as unpcklpd / unpckhpd pair them. */
static DLRT_INLINE __m512 dlrt_wg_unpack64(__m512 a, __m512 b, int hi) {
    const __m512d x = _mm512_castps_pd(a), y = _mm512_castps_pd(b);
    return _mm512_castpd_ps(hi ? _mm512_unpackhi_pd(x, y) : _mm512_unpacklo_pd(x, y));
}
#endif

/* p[j][t] = row[m t + j] for j < m + 2, t < DLRT_WG_TB: a chunk's input row with its tiles'
 * columns apart (row holds m * DLRT_WG_TB + 2 floats). On AVX-512, m = 4: a 4x4 transpose of
 * 128-bit lanes, then one within them; m = 2: even and odd elements; the last two columns are
 * the first two shifted by a tile. */
static DLRT_INLINE void dlrt_wg_apart(const int m, const float *row, float p[6][DLRT_WG_TB]) {
#ifdef __AVX512F__
    if (m == 4 || m == 2) {
        __m512 p0, p1;
        if (m == 4) {
            const __m512 l0 = _mm512_loadu_ps(row), l1 = _mm512_loadu_ps(row + 16),
                         l2 = _mm512_loadu_ps(row + 32), l3 = _mm512_loadu_ps(row + 48);
            const __m512 f0 = _mm512_shuffle_f32x4(l0, l1, 0x88),
                         f1 = _mm512_shuffle_f32x4(l0, l1, 0xdd),
                         f2 = _mm512_shuffle_f32x4(l2, l3, 0x88),
                         f3 = _mm512_shuffle_f32x4(l2, l3, 0xdd);
            /* lane k of e_i: tile 4k + i's four columns */
            const __m512 e0 = _mm512_shuffle_f32x4(f0, f2, 0x88),
                         e2 = _mm512_shuffle_f32x4(f0, f2, 0xdd),
                         e1 = _mm512_shuffle_f32x4(f1, f3, 0x88),
                         e3 = _mm512_shuffle_f32x4(f1, f3, 0xdd);
            const __m512 t0 = _mm512_unpacklo_ps(e0, e1), t1 = _mm512_unpackhi_ps(e0, e1),
                         t2 = _mm512_unpacklo_ps(e2, e3), t3 = _mm512_unpackhi_ps(e2, e3);
            p0 = dlrt_wg_unpack64(t0, t2, 0), p1 = dlrt_wg_unpack64(t0, t2, 1);
            _mm512_storeu_ps(p[2], dlrt_wg_unpack64(t1, t3, 0));
            _mm512_storeu_ps(p[3], dlrt_wg_unpack64(t1, t3, 1));
        } else {
            const __m512 l0 = _mm512_loadu_ps(row), l1 = _mm512_loadu_ps(row + 16);
            const __m512i even =
                _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
            const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
            p0 = _mm512_permutex2var_ps(l0, even, l1), p1 = _mm512_permutex2var_ps(l0, odd, l1);
        }
        _mm512_storeu_ps(p[0], p0);
        _mm512_storeu_ps(p[1], p1);
        _mm512_storeu_ps(p[m], dlrt_wg_shift_in(p0, row + m * DLRT_WG_TB));
        _mm512_storeu_ps(p[m + 1], dlrt_wg_shift_in(p1, row + m * DLRT_WG_TB + 1));
        return;
    }
#elif defined(__AVX2__)
    /* the same for each half of the tiles: m = 4, each 128-bit half of a load is a tile */
    for (int h = 0; m == 4 && h < 2; h++) {
        const float *b = row + 32 * h;
        const __m256 l0 = _mm256_loadu_ps(b), l1 = _mm256_loadu_ps(b + 8),
                     l2 = _mm256_loadu_ps(b + 16), l3 = _mm256_loadu_ps(b + 24);
        /* half k of e_i: tile 4k + i's four columns */
        const __m256 e0 = _mm256_permute2f128_ps(l0, l2, 0x20),
                     e1 = _mm256_permute2f128_ps(l0, l2, 0x31),
                     e2 = _mm256_permute2f128_ps(l1, l3, 0x20),
                     e3 = _mm256_permute2f128_ps(l1, l3, 0x31);
        const __m256 t0 = _mm256_unpacklo_ps(e0, e1), t1 = _mm256_unpackhi_ps(e0, e1),
                     t2 = _mm256_unpacklo_ps(e2, e3), t3 = _mm256_unpackhi_ps(e2, e3);
        const __m256 p0 = dlrt_wg_unpack64_8(t0, t2, 0), p1 = dlrt_wg_unpack64_8(t0, t2, 1);
        _mm256_storeu_ps(p[0] + 8 * h, p0);
        _mm256_storeu_ps(p[1] + 8 * h, p1);
        _mm256_storeu_ps(p[2] + 8 * h, dlrt_wg_unpack64_8(t1, t3, 0));
        _mm256_storeu_ps(p[3] + 8 * h, dlrt_wg_unpack64_8(t1, t3, 1));
        _mm256_storeu_ps(p[4] + 8 * h, dlrt_wg_shift_in8(p0, b[32]));
        _mm256_storeu_ps(p[5] + 8 * h, dlrt_wg_shift_in8(p1, b[33]));
    }
    for (int h = 0; m == 2 && h < 2; h++) {
        const float *b = row + 16 * h;
        const __m256 l0 = _mm256_loadu_ps(b), l1 = _mm256_loadu_ps(b + 8);
        /* [b0 b2 b8 b10 | b4 b6 b12 b14] and the odd ones, 64-bit units put in order */
        const __m256 p0 = _mm256_castpd_ps(
            _mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(l0, l1, 0x88)), 0xd8));
        const __m256 p1 = _mm256_castpd_ps(
            _mm256_permute4x64_pd(_mm256_castps_pd(_mm256_shuffle_ps(l0, l1, 0xdd)), 0xd8));
        _mm256_storeu_ps(p[0] + 8 * h, p0);
        _mm256_storeu_ps(p[1] + 8 * h, p1);
        _mm256_storeu_ps(p[2] + 8 * h, dlrt_wg_shift_in8(p0, b[16]));
        _mm256_storeu_ps(p[3] + 8 * h, dlrt_wg_shift_in8(p1, b[17]));
    }
    if (m == 4 || m == 2) return;
#endif
    for (int j = 0; j < m + 2; j++)
        for (int t = 0; t < DLRT_WG_TB; t++) p[j][t] = row[m * t + j];
}

/* row[m t + c] = p[c][t] for c < m, t < DLRT_WG_TB: the inverse for a chunk's output row. */
static DLRT_INLINE void dlrt_wg_together(const int m, float p[4][DLRT_WG_TB], float *row) {
#ifdef __AVX512F__
    if (m == 4) {
        const __m512 a = _mm512_loadu_ps(p[0]), b = _mm512_loadu_ps(p[1]),
                     c = _mm512_loadu_ps(p[2]), d = _mm512_loadu_ps(p[3]);
        const __m512 ab0 = _mm512_unpacklo_ps(a, b), ab1 = _mm512_unpackhi_ps(a, b),
                     cd0 = _mm512_unpacklo_ps(c, d), cd1 = _mm512_unpackhi_ps(c, d);
        /* lane k of e_i: tile 4k + i's four columns */
        const __m512 e0 = dlrt_wg_unpack64(ab0, cd0, 0), e1 = dlrt_wg_unpack64(ab0, cd0, 1),
                     e2 = dlrt_wg_unpack64(ab1, cd1, 0), e3 = dlrt_wg_unpack64(ab1, cd1, 1);
        const __m512 f0 = _mm512_shuffle_f32x4(e0, e1, 0x44),
                     f1 = _mm512_shuffle_f32x4(e0, e1, 0xee),
                     f2 = _mm512_shuffle_f32x4(e2, e3, 0x44),
                     f3 = _mm512_shuffle_f32x4(e2, e3, 0xee);
        _mm512_storeu_ps(row, _mm512_shuffle_f32x4(f0, f2, 0x88));
        _mm512_storeu_ps(row + 16, _mm512_shuffle_f32x4(f0, f2, 0xdd));
        _mm512_storeu_ps(row + 32, _mm512_shuffle_f32x4(f1, f3, 0x88));
        _mm512_storeu_ps(row + 48, _mm512_shuffle_f32x4(f1, f3, 0xdd));
        return;
    }
    if (m == 2) {
        const __m512 a = _mm512_loadu_ps(p[0]), b = _mm512_loadu_ps(p[1]);
        const __m512i lo = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
        const __m512i hi = _mm512_add_epi32(lo, _mm512_set1_epi32(8));
        _mm512_storeu_ps(row, _mm512_permutex2var_ps(a, lo, b));
        _mm512_storeu_ps(row + 16, _mm512_permutex2var_ps(a, hi, b));
        return;
    }
#elif defined(__AVX2__)
    for (int h = 0; m == 4 && h < 2; h++) {
        const __m256 a = _mm256_loadu_ps(p[0] + 8 * h), b = _mm256_loadu_ps(p[1] + 8 * h),
                     c = _mm256_loadu_ps(p[2] + 8 * h), d = _mm256_loadu_ps(p[3] + 8 * h);
        const __m256 ab0 = _mm256_unpacklo_ps(a, b), ab1 = _mm256_unpackhi_ps(a, b),
                     cd0 = _mm256_unpacklo_ps(c, d), cd1 = _mm256_unpackhi_ps(c, d);
        /* half k of e_i: tile 4k + i's four columns */
        const __m256 e0 = dlrt_wg_unpack64_8(ab0, cd0, 0), e1 = dlrt_wg_unpack64_8(ab0, cd0, 1),
                     e2 = dlrt_wg_unpack64_8(ab1, cd1, 0), e3 = dlrt_wg_unpack64_8(ab1, cd1, 1);
        float *o = row + 32 * h;
        _mm256_storeu_ps(o, _mm256_permute2f128_ps(e0, e1, 0x20));
        _mm256_storeu_ps(o + 8, _mm256_permute2f128_ps(e2, e3, 0x20));
        _mm256_storeu_ps(o + 16, _mm256_permute2f128_ps(e0, e1, 0x31));
        _mm256_storeu_ps(o + 24, _mm256_permute2f128_ps(e2, e3, 0x31));
    }
    for (int h = 0; m == 2 && h < 2; h++) {
        const __m256 a = _mm256_loadu_ps(p[0] + 8 * h), b = _mm256_loadu_ps(p[1] + 8 * h);
        const __m256 lo = _mm256_unpacklo_ps(a, b), hi = _mm256_unpackhi_ps(a, b);
        _mm256_storeu_ps(row + 16 * h, _mm256_permute2f128_ps(lo, hi, 0x20));
        _mm256_storeu_ps(row + 16 * h + 8, _mm256_permute2f128_ps(lo, hi, 0x31));
    }
    if (m == 4 || m == 2) return;
#endif
    for (int c = 0; c < m; c++)
        for (int t = 0; t < DLRT_WG_TB; t++) row[m * t + c] = p[c][t];
}

/* V[xi][ci][col0 + t] = (B^T d B)[xi] for the tiles t < nt of one chunk of a tile row, whose
 * m + 2 input rows start at input row r0 and column c0 (either may lie in the padding). The
 * chunk's DLRT_WG_TB tiles are laid side by side, tile innermost (dp[r][j][t]: row r, column
 * j of tile t), so that every step, B^T down the columns and B across each tile, runs on whole
 * vectors of tiles; with the tile's columns adjacent instead, the step across each tile was
 * scalar code (a third of a 64-channel 56x56 layer's time). Same operations on the same
 * values as per tile. */
static DLRT_INLINE void dlrt_wg_in_chunk(const int m, const dlrt_wg *s, const float *xc, int64_t r0,
                                         int64_t c0, int nt, float *V) {
    enum { W = DLRT_WG_W, TB = DLRT_WG_TB };
    const int a = m + 2;
    float d[6][W], dp[6][6][TB], vp[6][6][TB], o[6][6][TB];
    dlrt_wg_in_rows(s, xc, r0, c0, m * TB + 2, d);
    for (int r = 0; r < a; r++) dlrt_wg_apart(m, d[r], dp[r]);
    for (int j = 0; j < a; j++) /* B^T down each column */
        for (int t = 0; t < TB; t++) dlrt_wg_bt(m, &dp[0][j][t], 6 * TB, &vp[0][j][t], 6 * TB);
    for (int i = 0; i < a; i++) /* then B across each tile */
        for (int t = 0; t < TB; t++) dlrt_wg_bt(m, &vp[i][0][t], TB, &o[i][0][t], TB);
    for (int i = 0; i < a; i++)
        for (int k = 0; k < a; k++) dlrt_wg_put(V + (int64_t)(i * a + k) * s->vs, o[i][k], nt);
}

/* A transform's or the products' job over images from b0 (dlrt_wg_input, _output, _gemms). */
typedef struct dlrt_wg_job {
    const dlrt_conv *p;
    const dlrt_wg *s;
    const float *in, *U;
    float *out;
    const dlrt_epilogue *ep;
    int64_t b0, blocks, cols;
    int mode;
} dlrt_wg_job;

/* Units [lo, hi) of the input transform: a row of tiles of an input channel of an image. */
static void dlrt_wg_input_units(void *ctx, int64_t lo, int64_t hi) {
    const dlrt_wg_job *j = ctx;
    const dlrt_wg *s = j->s;
    const float *x = j->in;
    float *V = j->out;
    const int64_t b0 = j->b0;
    for (int64_t u = lo; u < hi; u++) {
        const int64_t ty = u % s->th, ci = (u / s->th) % s->ci, bi = u / (s->th * s->ci);
        const float *xc = x + ((b0 + bi) * s->ci + ci) * s->ih * s->iw;
        for (int64_t tx0 = 0; tx0 < s->tw; tx0 += DLRT_WG_TB) {
            const int nt = (int)DLRT_MIN((int64_t)DLRT_WG_TB, s->tw - tx0);
            const int64_t col0 = bi * s->tiles + ty * s->tw + tx0;
            const int64_t r0 = s->m * ty - s->ph, c0 = s->m * tx0 - s->pw;
            float *v = V + ci * s->cols + col0;
            if (s->m == 2)
                dlrt_wg_in_chunk(2, s, xc, r0, c0, nt, v);
            else
                dlrt_wg_in_chunk(4, s, xc, r0, c0, nt, v);
        }
    }
}

/* The input transform of images [b0, b0 + nbi) into V. */
static void dlrt_wg_input(const dlrt_wg *s, const float *x, int64_t b0, int64_t nbi, float *V) {
    const int64_t units = nbi * s->ci * s->th;
    dlrt_wg_job job = {.s = s, .in = x, .out = V, .b0 = b0};
    dlrt_parallel_for(units, (double)units * (double)s->tw * 4.0 * s->m * s->nf >= DLRT_PAR_MIN,
                      dlrt_wg_input_units, &job);
}

/* Stores rows[r][0, m * nt) as output row m * ty + r, columns c0.., of channel co's plane yc
 * through the image's epilogue ep, cutting what overhangs the plane. */
static void dlrt_wg_store(const dlrt_wg *s, float rows[4][4 * DLRT_WG_TB], int64_t co, int64_t ty,
                          int64_t c0, int nt, float *yc, const dlrt_epilogue *ep) {
    const int64_t ncol = DLRT_MIN(s->m * (int64_t)nt, s->ow - c0);
    for (int r = 0; r < s->m && s->m * ty + r < s->oh; r++) {
        const int64_t j0 = (s->m * ty + r) * s->ow + c0;
        dlrt_epi_apply(ep, co, j0, rows[r], ncol);
        memcpy(yc + j0, rows[r], (size_t)ncol * sizeof(float));
    }
}

/* y = epilogue(A^T M A) for the tiles t < nt of one chunk of a tile row of channel co; M points
 * at the chunk's first tile in frequency 0 and yc at the channel's output plane, whose rows
 * m*ty.. and columns c0.. the chunk covers. ep is the image's epilogue. As in the input
 * transform, the tiles lie side by side (f[i][j][t], q[i][c][t], rp[r][c][t]) so that both
 * passes run on vectors of tiles; only the last step puts each tile's m columns together. */
static DLRT_INLINE void dlrt_wg_out_chunk(const int m, const dlrt_wg *s, const float *M, int64_t co,
                                          int64_t ty, int64_t c0, int nt, float *yc,
                                          const dlrt_epilogue *ep) {
    enum { TB = DLRT_WG_TB };
    const int a = m + 2;
    float f[6][6][TB], q[6][4][TB], rp[4][4][TB], rows[4][4 * TB];
    for (int i = 0; i < a; i++)
        for (int j = 0; j < a; j++) dlrt_wg_get(M + (int64_t)(i * a + j) * s->ms, nt, f[i][j]);
    for (int i = 0; i < a; i++) /* A^T across each tile's frequency row i */
        for (int t = 0; t < TB; t++) dlrt_wg_at(m, &f[i][0][t], TB, &q[i][0][t], TB);
    for (int c = 0; c < m; c++) /* then down each column */
        for (int t = 0; t < TB; t++) dlrt_wg_at(m, &q[0][c][t], 4 * TB, &rp[0][c][t], 4 * TB);
    for (int r = 0; r < m; r++) dlrt_wg_together(m, rp[r], rows[r]);
    dlrt_wg_store(s, rows, co, ty, c0, nt, yc, ep);
}

/* Units [lo, hi) of the output transform: a row of tiles of an output channel of an image. */
static void dlrt_wg_output_units(void *ctx, int64_t lo, int64_t hi) {
    const dlrt_wg_job *j = ctx;
    const dlrt_conv *p = j->p;
    const dlrt_wg *s = j->s;
    const float *M = j->in;
    float *y = j->out;
    const dlrt_epilogue *ep = j->ep;
    const int64_t b0 = j->b0, out_sp = s->oh * s->ow;
    for (int64_t u = lo; u < hi; u++) {
        const int64_t ty = u % s->th, co = (u / s->th) % s->co, bi = u / (s->th * s->co);
        dlrt_epilogue e;
        const dlrt_epilogue *eb = dlrt_conv_ep(p, out_sp, ep, b0 + bi, 0, &e);
        float *yc = y + ((b0 + bi) * s->co + co) * out_sp;
        for (int64_t tx0 = 0; tx0 < s->tw; tx0 += DLRT_WG_TB) {
            const int nt = (int)DLRT_MIN((int64_t)DLRT_WG_TB, s->tw - tx0);
            const int64_t col0 = bi * s->tiles + ty * s->tw + tx0;
            const float *mc = M + co * s->cols + col0;
            if (s->m == 2)
                dlrt_wg_out_chunk(2, s, mc, co, ty, 2 * tx0, nt, yc, eb);
            else
                dlrt_wg_out_chunk(4, s, mc, co, ty, 4 * tx0, nt, yc, eb);
        }
    }
}

/* The output transform of images [b0, b0 + nbi) from M into y. */
static void dlrt_wg_output(const dlrt_conv *p, const dlrt_wg *s, const float *M, int64_t b0,
                           int64_t nbi, float *y, const dlrt_epilogue *ep) {
    const int64_t units = nbi * s->co * s->th;
    dlrt_wg_job job = {.p = p, .s = s, .in = M, .out = y, .ep = ep, .b0 = b0};
    dlrt_parallel_for(units, (double)units * (double)s->tw * 4.0 * s->m * s->nf >= DLRT_PAR_MIN,
                      dlrt_wg_output_units, &job);
}

/* M[xi] = U[xi] V[xi] for the first `cols` columns, split into (frequency, column block) units;
 * U is packed by dlrt_conv_winograd_pack when mode is not 0. */
static void dlrt_wg_gemm_units(void *ctx, int64_t lo, int64_t hi) {
    const dlrt_wg_job *j = ctx;
    const dlrt_wg *s = j->s;
    const float *U = j->U, *V = j->in;
    float *M = j->out;
    const int64_t blocks = j->blocks, cols = j->cols;
    const int mode = j->mode;
    for (int64_t u = lo; u < hi; u++) {
        const int64_t xi = u / blocks, c0 = (u % blocks) * DLRT_WG_GB;
        const int64_t nc = DLRT_MIN((int64_t)DLRT_WG_GB, cols - c0);
        const int a_packed = !mode ? 0 : dlrt_wg_operand(mode) ? DLRT_A_PACKED_T : DLRT_A_PACKED;
        dlrt_sgemm_ex(s->co, nc, s->ci, U + xi * s->us, s->ci, 0, a_packed, V + xi * s->vs + c0,
                      s->cols, 0, 0, M + xi * s->ms + c0, s->cols, NULL);
    }
}

static void dlrt_wg_gemms(const dlrt_wg *s, const float *U, int mode, const float *V, float *M,
                          int64_t cols) {
    const int64_t blocks = (cols + DLRT_WG_GB - 1) / DLRT_WG_GB, units = s->nf * blocks;
    dlrt_wg_job job = {
        .s = s, .in = V, .U = U, .out = M, .blocks = blocks, .cols = cols, .mode = mode};
    dlrt_parallel_for(units, (double)s->co * (double)s->ci * (double)cols * s->nf >= DLRT_PAR_MIN,
                      dlrt_wg_gemm_units, &job);
}

void dlrt_conv_winograd(const dlrt_conv *p, int m, const float *x, const float *w,
                        const float *wpacked, int wpack_mode, float *y, void *workspace,
                        const dlrt_epilogue *ep) {
    const int mode = wpacked ? wpack_mode : 0;
    dlrt_wg s;
    dlrt_wg_init(p, mode ? dlrt_conv_winograd_tile(mode) : m, &s);
    if (p->n <= 0 || s.co <= 0 || s.tiles <= 0) return;
    float *V = workspace, *M = V + s.nf * s.vs;
    const float *U = wpacked;
    if (!mode) { /* the weights' transform goes after V and M */
        float *u = M + s.nf * s.ms;
        dlrt_wg_weights(s.m, s.co, s.ci, w, u, (size_t)s.us, -1);
        U = u;
    } else { /* the packed frequencies follow each other */
        s.us = (int64_t)(dlrt_conv_winograd_packed_bytes(mode, s.co, s.ci) / (size_t)s.nf /
                         sizeof(float));
    }
    for (int64_t b0 = 0; b0 < p->n; b0 += s.nb) {
        const int64_t nbi = DLRT_MIN(s.nb, p->n - b0);
        dlrt_wg_input(&s, x, b0, nbi, V);
        dlrt_wg_gemms(&s, U, mode, V, M, nbi * s.tiles);
        dlrt_wg_output(p, &s, M, b0, nbi, y, ep);
    }
}
