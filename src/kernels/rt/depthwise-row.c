/* depthwise-row.c — 3x3 depthwise convolution with pad 1 at stride 1 or 2, read straight from
 * the NCHW planes and vectorized along output rows (AVX-512 builds).
 *
 * MobileNet-style layers on planes of 28x28 and up (at stride 2, outputs of 14x14 and up). The
 * blocked kernel (depthwise-cv.c) spends most of its time putting 16 planes into channel vectors
 * and back (filling and storing its buffer: 58% of a 14x14 unit), the plane kernel
 * (depthwise.c) copying the input into zero-padded phase planes; here nothing is copied. Each
 * vector of 16 outputs of a row is, per input row of the window, one load of the next 16 inputs
 * and the shifted neighbours made in registers:
 * - stride 1: the taps x[j-1], x[j], x[j+1] are the current vector shifted with its neighbours
 *   (valignd), the previous one carried over from the last step;
 * - stride 2: the 32 inputs x[2j .. 2j+31] are split into their even (x[2j], tap 1) and odd
 *   (x[2j+1], tap 2) lanes (vpermt2ps); tap 0, x[2j-1], is the odd vector shifted by one lane
 *   with the last odd lane of the step before.
 * Inputs outside the plane are zeros: rows above and below by a zero vector, columns past the
 * row's end (any padding after it) by masked loads bounded by the input's width, the column left
 * of the plane by the zero carried into the first step. The row reads are rowvec.h's.
 * Stride-1 rows of 28 to 40 (pad 1 all round) run flat instead: the plane is read as one row of
 * H*W floats, the window's rows in_w apart, and the taps that would cross a row's edge are lanes
 * masked to zero, so every vector is full and nothing restarts at each row (dlrt_dwf_range).
 * MobileNetV2's layers, one thread (layer alone, blocked kernel -> this one): 96 ch 112x112
 * stride 2 0.174 -> 0.106 ms, 32 ch 112x112 0.131 -> 0.071, 144 ch 56x56 0.139 -> 0.103, 144 ch
 * 56x56 stride 2 0.066 -> 0.045, 192 ch 28x28 0.046 -> 0.041; on 14x14 planes the blocked
 * kernel stays faster (384 ch: 0.024 vs 0.032), so they stay with it, but at stride 2 this one
 * takes output rows from 14 wide (DLRT_DWR_MIN_WIDTH_S2).
 *
 * Each output is w[0]*x[0] followed by fused multiply-adds in tap order, padding taps included
 * as zeros, and the epilogue takes dlrt_epi_apply's steps on the vector (dlrt_dwr_store, a copy
 * of dlrt_gemm_epi_vec's): the bits of the plane kernel. Work is split over planes (image x
 * channel), and over row blocks (runs of vectors for the flat kernel) when planes are few; each
 * output is computed by one unit, whatever the thread count. */
#include "conv-impl.h"
#include "gemm-micro.h" /* dlrt_gemm_act_after */

#if defined(__AVX512F__) && !defined(DLRT_GEMM_GENERIC)
#include "rowvec.h"

enum {
    DLRT_DWR_VEC = 16,
    DLRT_DWR_MIN_WIDTH = 28, /* at stride 1, output rows narrower than this stay with the
                                blocked kernel */
    /* at stride 2 from 14: the blocked kernel transposes four input pixels per output there.
     * One thread, layer alone, blocked -> row kernel: 192 ch 28x28 -> 14x14 0.0209 -> 0.0187
     * ms, 96 ch 32 -> 16 0.0165 -> 0.0102, 256 ch 48 -> 24 0.085 -> 0.064; 24 -> 12 alike (96
     * ch 0.0080 both), 20 -> 10 and 14 -> 7 slower (576 ch 0.0157 -> 0.029) */
    DLRT_DWR_MIN_WIDTH_S2 = 14,
    DLRT_DWF_MAX_WIDTH = 40 /* stride-1 rows up to this wide run flat (dlrt_dwf_range) */
};

/* A plane's epilogue resolved once (dlrt_dwr_epi_for): the steps of dlrt_gemm_epi_vec as flags
 * and broadcast vectors, kept in a local of the plane's function (dlrt_dwr_plane,
 * dlrt_dwr_plane_flat). Read through the epilogue itself, every output vector reloaded its fields
 * (a store to y may alias them, for all the compiler knows), multiplied beta by the plane's bias
 * again and branched on each step: layer alone, one thread, rows still one at a time, stride 2
 * on 112x112 (96 ch) 0.111 -> 0.109 ms and 56x56 (144 ch) 0.0465 -> 0.046 (0.113 -> 0.097 in one
 * build whose row loop was inlined into the work loop; such builds varied, see dlrt_dwr_plane). */
typedef struct dlrt_dwr_epi {
    __m512 alpha, bias, lo, hi; /* alpha; beta times the plane's bias; Clip's bounds */
    const float *res;           /* the plane's residual (NULL: none) */
    int on, scale, add_bias, act;
} dlrt_dwr_epi;

/* Plane oc's steps of eb (a dlrt_conv_ep epilogue: one bias per plane, planes of residual
 * res_rs apart), or none when eb is NULL. */
static dlrt_dwr_epi dlrt_dwr_epi_for(const dlrt_epilogue *eb, int64_t oc) {
    dlrt_dwr_epi e = {0};
    if (!eb) return e;
    e.on = 1;
    e.scale = eb->alpha != 1.0f;
    e.alpha = _mm512_set1_ps(eb->alpha);
    e.add_bias = eb->bias != NULL;
    if (e.add_bias) e.bias = _mm512_set1_ps(eb->beta * eb->bias[oc * eb->bias_rs]);
    e.res = eb->residual ? eb->residual + oc * eb->res_rs : NULL;
    e.act = eb->act;
    e.lo = _mm512_set1_ps(eb->act_a), e.hi = _mm512_set1_ps(eb->act_b);
    return e;
}

/* The epilogue on output vector v of the plane's positions j.. (n valid), then the store: the
 * steps and roundings of dlrt_gemm_epi_vec. The residual is read before the store (it may be y
 * itself) and, in a row's last vector, only where the row has it. */
static DLRT_INLINE void dlrt_dwr_store(const dlrt_dwr_epi *e, int64_t j, __m512 v, float *dst,
                                       int64_t n) {
    if (e->on) {
        if (e->scale) v = _mm512_mul_ps(v, e->alpha);
        if (e->add_bias) v = _mm512_add_ps(v, e->bias);
        if (e->res) v = _mm512_add_ps(v, dlrt_rv_load(e->res, j, j + n));
        if (e->act == DLRT_ACT_RELU) v = _mm512_max_ps(v, _mm512_setzero_ps());
        if (e->act == DLRT_ACT_CLIP) v = _mm512_min_ps(e->hi, _mm512_max_ps(e->lo, v));
    }
    if (n >= DLRT_DWR_VEC)
        _mm512_storeu_ps(dst, v);
    else
        _mm512_mask_storeu_ps(dst, dlrt_rv_lanes(n), v);
}

/* acc after window row ky's taps a, b, c (left, centre, right) weighted by w[3 ky ..]: the first
 * row starts the sum with a product, then fused multiply-adds in tap order (the plane kernel's). */
static DLRT_INLINE __m512 dlrt_dwr_taps(const __m512 *w, int ky, __m512 a, __m512 b, __m512 c,
                                        __m512 acc) {
    acc = ky ? _mm512_fmadd_ps(w[3 * ky], a, acc) : _mm512_mul_ps(w[0], a);
    acc = _mm512_fmadd_ps(w[3 * ky + 1], b, acc);
    return _mm512_fmadd_ps(w[3 * ky + 2], c, acc);
}

/* One output row at stride 1: wn outputs from rows of in_w inputs (wn differs from in_w when the
 * padding after the row is not 1), r[ky] the window's input rows (NULL: padding), w the 9 taps;
 * the row's outputs are positions j0.. of the plane (for the epilogue). */
static DLRT_INLINE void dlrt_dwr_row1(const float *const *r, const __m512 *w, int64_t in_w,
                                      int64_t wn, float *y, const dlrt_dwr_epi *pe, int64_t j0) {
    const __m512 z = _mm512_setzero_ps();
    __m512 prev[3] = {z, z, z}, cur[3];
    for (int ky = 0; ky < 3; ky++) cur[ky] = r[ky] ? dlrt_rv_load(r[ky], 0, in_w) : z;
    for (int64_t j = 0; j < wn; j += DLRT_DWR_VEC) {
        __m512 acc = z;
        for (int ky = 0; ky < 3; ky++) {
            const __m512 nx = r[ky] ? dlrt_rv_load(r[ky], j + DLRT_DWR_VEC, in_w) : z;
            acc = dlrt_dwr_taps(w, ky, dlrt_rv_back1(cur[ky], prev[ky]), cur[ky],
                                dlrt_rv_next1(nx, cur[ky]), acc);
            prev[ky] = cur[ky], cur[ky] = nx;
        }
        dlrt_dwr_store(pe, j0 + j, acc, y + j, wn - j);
    }
}

/* Two output rows at stride 1, each summed as dlrt_dwr_row1 sums it (the same bits): r[0 ..
 * 3] the input rows the two windows read (the first row's window r[0 .. 2], the second's r[1 ..
 * 3]; the two rows they share are loaded and shifted once), y the first row's outputs, the
 * second's wn floats on, j0 the first's position in the plane. Each output's sum is a chain of
 * nine dependent multiply-adds: one row at a time, the chains of successive vectors did not
 * overlap enough to keep the FMA units busy; two rows' chains interleaved do (figures in
 * dlrt_dwr_plane). Four rows at a time spill registers (144 ch 56x56 0.082 -> 0.185 ms). */
static DLRT_INLINE void dlrt_dwr_rows1x2(const float *const *r, const __m512 *w, int64_t in_w,
                                         int64_t wn, float *y, const dlrt_dwr_epi *pe, int64_t j0) {
    const __m512 z = _mm512_setzero_ps();
    __m512 prev[4] = {z, z, z, z}, cur[4];
    for (int k = 0; k < 4; k++) cur[k] = r[k] ? dlrt_rv_load(r[k], 0, in_w) : z;
    for (int64_t j = 0; j < wn; j += DLRT_DWR_VEC) {
        __m512 a[4], c[4], acc0 = z, acc1 = z;
        for (int k = 0; k < 4; k++) {
            const __m512 nx = r[k] ? dlrt_rv_load(r[k], j + DLRT_DWR_VEC, in_w) : z;
            a[k] = dlrt_rv_back1(cur[k], prev[k]);
            c[k] = dlrt_rv_next1(nx, cur[k]);
            prev[k] = cur[k], cur[k] = nx; /* prev[k]: the centre taps now */
        }
        for (int ky = 0; ky < 3; ky++) {
            acc0 = dlrt_dwr_taps(w, ky, a[ky], prev[ky], c[ky], acc0);
            acc1 = dlrt_dwr_taps(w, ky, a[ky + 1], prev[ky + 1], c[ky + 1], acc1);
        }
        dlrt_dwr_store(pe, j0 + j, acc0, y + j, wn - j);
        dlrt_dwr_store(pe, j0 + wn + j, acc1, y + wn + j, wn - j);
    }
}

/* One output row at stride 2 (wn outputs from rows of in_w inputs). */
static DLRT_INLINE void dlrt_dwr_row2(const float *const *r, const __m512 *w, int64_t in_w,
                                      int64_t wn, float *y, const dlrt_dwr_epi *pe, int64_t j0) {
    const __m512 z = _mm512_setzero_ps();
    __m512 prev[3] = {z, z, z}; /* the odd lanes of the step before: lane 15 is x[2j - 1] */
    for (int64_t j = 0; j < wn; j += DLRT_DWR_VEC) {
        __m512 acc = z;
        for (int ky = 0; ky < 3; ky++) {
            __m512 a = z, b = z, c = z;
            if (r[ky]) dlrt_rv_taps2(r[ky], in_w, j, &prev[ky], &a, &b, &c);
            acc = dlrt_dwr_taps(w, ky, a, b, c, acc);
        }
        dlrt_dwr_store(pe, j0 + j, acc, y + j, wn - j);
    }
}

/* Two output rows at stride 2 (the same bits as dlrt_dwr_row2 gives each): r[0 .. 4] the input
 * rows, the first window's r[0 .. 2], the second's r[2 .. 4]. Input row by input row, each row's
 * taps going to the windows that read it, so that only one row's taps are live beside the
 * weights and the carried odd lanes; all five rows' taps at once spilled. */
static DLRT_INLINE void dlrt_dwr_rows2x2(const float *const *r, const __m512 *w, int64_t in_w,
                                         int64_t wn, float *y, const dlrt_dwr_epi *pe, int64_t j0) {
    const __m512 z = _mm512_setzero_ps();
    __m512 prev[5] = {z, z, z, z, z};
    for (int64_t j = 0; j < wn; j += DLRT_DWR_VEC) {
        __m512 acc0 = z, acc1 = z;
        for (int k = 0; k < 5; k++) {
            __m512 a = z, b = z, c = z;
            if (r[k]) dlrt_rv_taps2(r[k], in_w, j, &prev[k], &a, &b, &c);
            if (k <= 2) acc0 = dlrt_dwr_taps(w, k, a, b, c, acc0);
            if (k >= 2) acc1 = dlrt_dwr_taps(w, k - 2, a, b, c, acc1);
        }
        dlrt_dwr_store(pe, j0 + j, acc0, y + j, wn - j);
        dlrt_dwr_store(pe, j0 + wn + j, acc1, y + wn + j, wn - j);
    }
}

/* A plane's floats [at, at + 16) of n (n >= 16), zeros outside [0, n): rows above and below the
 * plane, for the flat kernel. Near the plane's ends the 16 floats at its start or end are read and
 * moved into place, so no pointer outside the plane is formed. */
static DLRT_INLINE __m512 dlrt_dwf_load(const float *x, int64_t n, int64_t at) {
    if (at >= 0 && at + DLRT_DWR_VEC <= n) return _mm512_loadu_ps(x + at);
    if (at <= -DLRT_DWR_VEC || at >= n) return _mm512_setzero_ps();
    const int64_t base = at < 0 ? 0 : n - DLRT_DWR_VEC, lo = at < 0 ? -at : 0;
    const __m512i idx = _mm512_add_epi32(dlrt_rv_iota(), _mm512_set1_epi32((int)(at - base)));
    const __mmask16 keep = (__mmask16)(dlrt_rv_lanes(n - at) & ~dlrt_rv_lanes(lo));
    return _mm512_maskz_permutexvar_ps(keep, idx, _mm512_loadu_ps(x + base));
}

/* col with in_w taken off the lanes that reached it: a column index kept below in_w after a
 * step of less than in_w. */
static DLRT_INLINE __m512i dlrt_dwf_wrap(__m512i col, __m512i width) {
    return _mm512_mask_sub_epi32(col, _mm512_cmpge_epi32_mask(col, width), col, width);
}

/* Outputs [q0, q1) of one plane at stride 1, the plane (in_w wide, n floats, as many outputs)
 * taken as one row of n floats: the window rows of output q start at q - in_w, q and q + in_w,
 * and a tap left of column 0 or right of the last column is a lane masked to zero (the column
 * of each lane is carried from vector to vector). Rows of 28 to 40 fill whole vectors this way
 * where the row kernel leaves lanes idle and restarts at every row. */
static void dlrt_dwf_range(const float *x, int64_t n, int64_t in_w, const __m512 *w, float *y,
                           const dlrt_dwr_epi *pe, int64_t q0, int64_t q1) {
    const __m512 z = _mm512_setzero_ps();
    const __m512i width = _mm512_set1_epi32((int)in_w), last = _mm512_set1_epi32((int)in_w - 1);
    const __m512i step = _mm512_set1_epi32(DLRT_DWR_VEC);
    /* lane l's column, (q0 + l) % in_w, by one subtraction (rows are wider than a vector:
     * dlrt_dwf_applies): sixteen divisions per run of a plane measured slower */
    __m512i col =
        dlrt_dwf_wrap(_mm512_add_epi32(dlrt_rv_iota(), _mm512_set1_epi32((int)(q0 % in_w))), width);
    __m512 prev[3], cur[3];
    for (int ky = 0; ky < 3; ky++) {
        const int64_t at = q0 + (ky - 1) * in_w;
        prev[ky] = dlrt_dwf_load(x, n, at - DLRT_DWR_VEC);
        cur[ky] = dlrt_dwf_load(x, n, at);
    }
    for (int64_t q = q0; q < q1; q += DLRT_DWR_VEC) {
        const __mmask16 left = _mm512_cmpneq_epi32_mask(col, _mm512_setzero_si512());
        const __mmask16 right = _mm512_cmpneq_epi32_mask(col, last);
        __m512 acc = z;
        for (int ky = 0; ky < 3; ky++) {
            const __m512 nx = dlrt_dwf_load(x, n, q + (ky - 1) * in_w + DLRT_DWR_VEC);
            acc = dlrt_dwr_taps(w, ky, dlrt_rv_back1_z(left, cur[ky], prev[ky]), cur[ky],
                                dlrt_rv_next1_z(right, nx, cur[ky]), acc);
            prev[ky] = cur[ky], cur[ky] = nx;
        }
        dlrt_dwr_store(pe, q, acc, y + q, q1 - q);
        col = dlrt_dwf_wrap(_mm512_add_epi32(col, step), width);
    }
}

/* Whether the flat kernel takes a stride-1 layer the row kernel applies to: pad 1 on every side
 * (outputs as many as inputs), rows wider than a vector (the column wrap and the plane-end loads
 * count on it) and at most DLRT_DWF_MAX_WIDTH, where rows that fill vectors badly cost most.
 * Layer alone, one thread, row -> flat: 192 ch 28x28 0.045 -> 0.042 ms, 128 ch 40x40 0.058 ->
 * 0.055; 96 ch 48x48 0.050 -> 0.057 and 144 ch 56x56 0.110 -> 0.116 stay with rows; below 28 the
 * blocked kernel is as fast (192 ch 24x24 0.031 vs 0.032). In MobileNetV2, whose 28x28 input
 * comes from the cache, 0.049 -> 0.040. */
static int dlrt_dwf_applies(const dlrt_win3 *g) {
    return g->stride[1] == 1 && g->out[1] == g->in[1] && g->out[2] == g->in[2] &&
           g->in[2] > DLRT_DWR_VEC && g->in[2] <= DLRT_DWF_MAX_WIDTH;
}

int dlrt_conv_dw_row_applies(const dlrt_conv *p, const dlrt_win3 *g) {
    if (p->nsp != 2 || p->c_in != p->group || p->c_out != p->c_in) return 0;
    for (int d = 1; d < 3; d++)
        if (g->k[d] != 3 || g->dil[d] != 1 || g->pad[d] != 1 || g->stride[d] != g->stride[1])
            return 0;
    const int64_t min_w = g->stride[1] == 2 ? DLRT_DWR_MIN_WIDTH_S2 : DLRT_DWR_MIN_WIDTH;
    return (g->stride[1] == 1 || g->stride[1] == 2) && g->out[2] >= min_w;
}

/* One work unit of dlrt_conv_dw_row: where a plane's input and output are, its weights, and
 * its epilogue (dlrt_conv_ep's, bias and residual indexed by oc). */
typedef struct dlrt_dwr_unit {
    const float *x; /* the input plane, ih x iw */
    float *y;       /* the output plane, rows ow wide */
    const float *w; /* its 9 taps */
    int64_t ih, iw, ow;
    const dlrt_epilogue *eb; /* or NULL */
    int64_t oc;              /* its channel */
} dlrt_dwr_unit;

/* rows[k] = input row ih0 + k of the plane for k < n, NULL for rows outside it (padding). */
static DLRT_INLINE void dlrt_dwr_rows_at(const dlrt_dwr_unit *u, int64_t ih0, int n,
                                         const float **rows) {
    for (int k = 0; k < n; k++) {
        const int64_t ih = ih0 + k;
        rows[k] = ih >= 0 && ih < u->ih ? u->x + ih * u->iw : NULL;
    }
}

/* Output rows [r0, r1) of a plane at stride s (1 or 2), two at a time (dlrt_dwr_rows1x2,
 * dlrt_dwr_rows2x2), then the last alone. A function of its own for each stride
 * (dlrt_dwr_plane_s1, _s2): the epilogue, resolved once into a local, and the weights stay in
 * registers for all the rows. With the row functions not inlined, each row paid for loading
 * them again (all slower than before); inlined into the work loop, the strides' copies shared
 * one register allocation and the gains came and went from build to build. Layer alone, one
 * thread, medians, before -> after the epilogue and two rows at a time (the same bits): 144 ch
 * 56x56 0.115 -> 0.081 ms; stride 2: 96 ch 112x112 0.111 -> 0.106, 144 ch 56x56 0.046 ->
 * 0.044 (rows one at a time with the epilogue resolved: 0.109 and 0.046). */
static DLRT_INLINE void dlrt_dwr_plane(const int s, const dlrt_dwr_unit *u, int64_t r0,
                                       int64_t r1) {
    const dlrt_dwr_epi pe = dlrt_dwr_epi_for(u->eb, u->oc);
    const int64_t iw_n = u->iw, ow_n = u->ow;
    __m512 wv[9];
    for (int t = 0; t < 9; t++) wv[t] = _mm512_set1_ps(u->w[t]);
    const int act_after = dlrt_gemm_act_after(u->eb);
    for (int64_t oh = r0; oh < r1;) {
        const int pair = oh + 1 < r1;
        const float *rows[5]; /* the window rows of the pair, s + 3 of them, or of the row */
        dlrt_dwr_rows_at(u, oh * s - 1, pair ? s + 3 : 3, rows);
        float *yr = u->y + oh * ow_n;
        if (pair && s == 1)
            dlrt_dwr_rows1x2(rows, wv, iw_n, ow_n, yr, &pe, oh * ow_n);
        else if (pair)
            dlrt_dwr_rows2x2(rows, wv, iw_n, ow_n, yr, &pe, oh * ow_n);
        else if (s == 1)
            dlrt_dwr_row1(rows, wv, iw_n, ow_n, yr, &pe, oh * ow_n);
        else
            dlrt_dwr_row2(rows, wv, iw_n, ow_n, yr, &pe, oh * ow_n);
        const int done = pair ? 2 : 1;
        if (act_after) /* the rest of dlrt_epi_apply, on the stored rows */
            dlrt_act_apply(u->eb->act, u->eb->act_a, u->eb->act_b, yr, done * ow_n);
        oh += done;
    }
}

static DLRT_NOINLINE void dlrt_dwr_plane_s1(const dlrt_dwr_unit *u, int64_t r0, int64_t r1) {
    dlrt_dwr_plane(1, u, r0, r1);
}

static DLRT_NOINLINE void dlrt_dwr_plane_s2(const dlrt_dwr_unit *u, int64_t r0, int64_t r1) {
    dlrt_dwr_plane(2, u, r0, r1);
}

/* Outputs [q0, q1) of a plane by the flat kernel, one vector a step: two a step, their chains
 * interleaved as dlrt_dwr_rows1x2 does, were slower (192 ch 28x28 0.044 -> 0.049 ms). */
static DLRT_NOINLINE void dlrt_dwr_plane_flat(const dlrt_dwr_unit *u, int64_t n, int64_t q0,
                                              int64_t q1) {
    const dlrt_dwr_epi pe = dlrt_dwr_epi_for(u->eb, u->oc);
    __m512 wv[9];
    for (int t = 0; t < 9; t++) wv[t] = _mm512_set1_ps(u->w[t]);
    dlrt_dwf_range(u->x, n, u->iw, wv, u->y, &pe, q0, q1);
    if (dlrt_gemm_act_after(u->eb))
        dlrt_act_apply(u->eb->act, u->eb->act_a, u->eb->act_b, u->y + q0, q1 - q0);
}

typedef struct dlrt_dwr_job {
    const dlrt_conv *p;
    const dlrt_win3 *g;
    const float *x, *w;
    float *y;
    const dlrt_epilogue *ep;
    int64_t blocks, nvec;
    int flat;
} dlrt_dwr_job;

/* Units [lo, hi): a block of rows (or of the flat kernel's vectors) of a plane. */
static void dlrt_dwr_units(void *ctx, int64_t lo, int64_t hi) {
    const dlrt_dwr_job *j = ctx;
    const dlrt_conv *p = j->p;
    const dlrt_win3 *g = j->g;
    const float *x = j->x, *w = j->w;
    float *y = j->y;
    const int64_t blocks = j->blocks, nvec = j->nvec, oh_n = g->out[1];
    for (int64_t un = lo; un < hi; un++) {
        const int64_t pl = un / blocks, blk = un % blocks, b = pl / p->c_out, oc = pl % p->c_out;
        dlrt_epilogue e;
        const dlrt_dwr_unit u = {.x = x + (b * p->c_in + oc) * g->in_sp,
                                 .y = y + (b * p->c_out + oc) * g->out_sp,
                                 .w = w + oc * 9,
                                 .ih = g->in[1],
                                 .iw = g->in[2],
                                 .ow = g->out[2],
                                 .eb = dlrt_conv_ep(p, g->out_sp, j->ep, b, 0, &e),
                                 .oc = oc};
        if (j->flat)
            dlrt_dwr_plane_flat(&u, g->in_sp, nvec * blk / blocks * DLRT_DWR_VEC,
                                DLRT_MIN(nvec * (blk + 1) / blocks * DLRT_DWR_VEC, g->out_sp));
        else if (g->stride[1] == 1)
            dlrt_dwr_plane_s1(&u, oh_n * blk / blocks, oh_n * (blk + 1) / blocks);
        else
            dlrt_dwr_plane_s2(&u, oh_n * blk / blocks, oh_n * (blk + 1) / blocks);
    }
}

int dlrt_conv_dw_row(const dlrt_conv *p, const dlrt_win3 *g, const float *x, const float *w,
                     float *y, const dlrt_epilogue *ep) {
    if (!dlrt_conv_dw_row_applies(p, g)) return 0;
    const int64_t planes = p->n * p->c_out;
    const int flat = dlrt_dwf_applies(g);
    const int64_t nvec = (g->out_sp + DLRT_DWR_VEC - 1) / DLRT_DWR_VEC;
    const int64_t blocks = dlrt_conv_row_blocks(planes, flat ? nvec : g->out[1]);
    const int64_t units = planes * blocks;
    dlrt_dwr_job job = {p, g, x, w, y, ep, blocks, nvec, flat};
    dlrt_parallel_for(units,
                      units > 1 && (double)planes * (double)g->out_sp * 9.0 >= DLRT_PAR_MIN / 4,
                      dlrt_dwr_units, &job);
    return 1;
}

#else

int dlrt_conv_dw_row_applies(const dlrt_conv *p, const dlrt_win3 *g) {
    (void)p, (void)g;
    return 0;
}

int dlrt_conv_dw_row(const dlrt_conv *p, const dlrt_win3 *g, const float *x, const float *w,
                     float *y, const dlrt_epilogue *ep) {
    (void)p, (void)g, (void)x, (void)w, (void)y, (void)ep;
    return 0;
}

#endif
