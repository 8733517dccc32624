/* dlrt-impl.h — private to the runtime kernels (the .c files in src/kernels/rt): the parallel
 * loop helper, the epilogue applied to a row of results (GEMM and the direct convolution) and
 * sliding-window geometry (convolution and pooling). Everything here is static inline: the kernel
 * sources may be compiled one by one or concatenated into one translation unit with generated code,
 * so helpers carry the dlrt_ prefix and none has external linkage. */
#ifndef DLRT_IMPL_H
#define DLRT_IMPL_H

#include "dlrt.h"
#include "vecmath.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#if defined(__AVX__)
#include <immintrin.h>
#endif

/* Inlining hint for the fixed-size kernels that are specialized by constant arguments. */
#if defined(__GNUC__) || defined(__clang__)
#define DLRT_INLINE inline __attribute__((always_inline))
#else
#define DLRT_INLINE inline
#endif
/* Kept out of line (unused: a file not calling it gets no warning): the GELU epilogue, whose
 * vector code inlined into every GEMM store path made the kernels around it slower. */
#if defined(__GNUC__) || defined(__clang__)
#define DLRT_NOINLINE __attribute__((noinline, unused))
#else
#define DLRT_NOINLINE
#endif

/* Bytes below which a kernel that only moves data (copy.c, gather.c) stays on the calling
 * thread: a fork costs about as much as moving this much from cache. */
enum { DLRT_MOVE_PAR_BYTES = 1 << 18 };

/* A loop over [0, n) run in pieces, one per thread, when par (dlrt_parallel). */
static inline void dlrt_parallel_for(int64_t n, int par, dlrt_range_fn fn, void *ctx) {
    dlrt_parallel(n, par ? 0 : 1, 1, 0, fn, ctx);
}

/* A loop runs in parallel when its work, estimated in multiply-adds (an exp counts 16, a copy
 * or comparison 1), reaches this: below it the fork costs more than it saves. Building with
 * -DDLRT_THREADS -DDLRT_PAR_MIN=1 runs every parallel path (how test_rt.c was checked). */
#ifndef DLRT_PAR_MIN
#define DLRT_PAR_MIN 1048576.0
#endif

#define DLRT_MIN(a, b) ((a) < (b) ? (a) : (b))
#define DLRT_MAX(a, b) ((a) > (b) ? (a) : (b))

/* A GEMM operand that is never stored (a convolution's im2col columns): dlrt_sgemm_gather makes
 * its values where it packs them. lines(ctx, i0, m, p0, kc, w, pstride, dst) writes lines
 * [i0, i0 + m) at depths [p0, p0 + kc) in panels of w lines (w <= 64): line i0 + ii at depth
 * p0 + p goes to dst[ii / w * pstride + p * w + ii % w]; the GEMM zeroes the last panel's
 * lines past m. Lines are op(B)'s columns; it may be called from several threads at once. */
typedef struct dlrt_gemm_gather {
    void (*lines)(const void *ctx, int64_t i0, int m, int64_t p0, int kc, int w, size_t pstride,
                  float *restrict dst);
    const void *ctx;
} dlrt_gemm_gather;
/* dlrt_sgemm_ws with op(B) (K x N) made by bg: the same panels hold the same values as when
 * op(B) is stored and packed, so the results are the same bit for bit. */
void dlrt_sgemm_gather(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, int trans_a,
                       int a_packed, const dlrt_gemm_gather *bg, float *C, int64_t ldc,
                       const dlrt_epilogue *ep, void *ws, size_t ws_bytes);

/* A GEMM operand read where it lies, never packed nor copied: line i at depth p is
 * rows[i][off[p]]. A convolution's windows in its (padded) input are such an operand: rows[i]
 * the first tap of output position i's window, off[p] the offset of tap p (channel, then kernel
 * position) from it. Offsets fit 32 bits. */
typedef struct dlrt_gemm_index {
    const float *const *rows;
    const int32_t *off;
} dlrt_gemm_index;
/* C[M, N] = epilogue(A X^T) where X (N lines x K depths) is read through ax and A (M x K) was
 * packed as the right operand of the transposed product (DLRT_A_PACKED_T:
 * dlrt_gemm_pack_operand(1, M, K, A, K, 1, ...)). Computed transposed, C^T = X A^T, each
 * element summed over K in order as dlrt_sgemm_ex sums it; same epilogue and aliasing rules. */
void dlrt_sgemm_indexed(int64_t M, int64_t N, int64_t K, const float *a_packed_t,
                        const dlrt_gemm_index *ax, float *C, int64_t ldc, const dlrt_epilogue *ep);

/* exp(x) for x <= 0 (a softmax score minus its row's maximum), branch-free so that loops over
 * it vectorize with any compiler and without a vector math library: x = k ln2 + r with |r| <=
 * ln2/2 (Cody-Waite), e^r by Cephes' expf polynomial (about 1 ulp), 2^k written into the
 * exponent bits. Below -87.3, where e^x is under FLT_MIN, it gives 0 (and at -inf); NaN stays
 * NaN. Softmax and fused attention use it rather than expf: glibc's vector expf takes a scalar
 * path for a whole vector when one lane underflows, which a causal mask's -FLT_MAX scores make
 * the rule (a [8,4,128,128] softmax 6x slower). */
static inline float dlrt_exp_neg(float x) {
    const float kf = x * 1.44269504088896341f + 12582912.0f; /* k in the low mantissa bits */
    const float k = kf - 12582912.0f;
    const float r = DLRT_FMAF(k, 2.12194440e-4f, DLRT_FMAF(k, -0.693359375f, x));
    float p = 1.9875691500e-4f;
    p = DLRT_FMAF(p, r, 1.3981999507e-3f);
    p = DLRT_FMAF(p, r, 8.3334519073e-3f);
    p = DLRT_FMAF(p, r, 4.1665795894e-2f);
    p = DLRT_FMAF(p, r, 1.6666665459e-1f);
    p = DLRT_FMAF(p, r, 5.0000001201e-1f);
    p = DLRT_FMAF(p * r, r, r) + 1.0f;
    uint32_t bits;
    memcpy(&bits, &kf, sizeof bits);
    bits = (bits - 0x4B400000u + 127u) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return x < -87.33654f ? 0.0f : p * scale;
}

/* GELU's y = x (erf(x / d) + 1) / 2 as h (erf(x inv_d) + 1), h = x / 2 and inv_d = 1 / d (the
 * reference's form: -0 and the x whose erf is -1 give -0). Where x < 0, erf + 1 cancels: y
 * carries the erf's absolute error times |x| / 2, at most 9.5e-7 (about 1e-7 for the float
 * formula with a 1-ulp erf), which is 4.5e-6 of y for x in [-2, -1], 0.45% at x = -4 (y is
 * -1.3e-4) and as large as y itself below -4; for x > 0 a few ulp (1.25e-6 at x = 6). */
static inline float dlrt_gelu1(float x, float inv_d) {
    return 0.5f * x * (dlrt_erf(x * inv_d) + 1.0f);
}
/* dlrt_gelu1's operations on a vector type V of intrinsics prefix P (_mm512, _mm256): the same
 * order, so the same bits. */
#define DLRT_GELU_VEC(name, V, P)                                                                  \
    static inline V name(V x, V inv_d) {                                                           \
        const V t = P##_min_ps(P##_set1_ps(DLRT_ERF_CLAMP),                                        \
                               P##_max_ps(P##_set1_ps(-DLRT_ERF_CLAMP), P##_mul_ps(x, inv_d)));    \
        const V s = P##_mul_ps(t, t);                                                              \
        V p = P##_set1_ps(dlrt_erf_p[5]), q = P##_set1_ps(dlrt_erf_q[5]);                          \
        for (int k = 4; k >= 0; k--) {                                                             \
            p = P##_fmadd_ps(p, s, P##_set1_ps(dlrt_erf_p[k]));                                    \
            q = P##_fmadd_ps(q, s, P##_set1_ps(dlrt_erf_q[k]));                                    \
        }                                                                                          \
        const V e = P##_min_ps(P##_set1_ps(1.0f),                                                  \
                               P##_max_ps(P##_set1_ps(-1.0f), P##_div_ps(P##_mul_ps(t, p), q)));   \
        return P##_mul_ps(P##_mul_ps(P##_set1_ps(0.5f), x), P##_add_ps(e, P##_set1_ps(1.0f)));     \
    }
#if defined(__AVX512F__)
DLRT_GELU_VEC(dlrt_gelu16, __m512, _mm512)
#elif defined(__AVX2__) && defined(__FMA__)
DLRT_GELU_VEC(dlrt_gelu8, __m256, _mm256)
#endif
#undef DLRT_GELU_VEC

/* GELU with divisor d over v[0..n) in place. */
static DLRT_NOINLINE void dlrt_gelu_apply(float d, float *v, int64_t n) {
    const float inv_d = 1.0f / d;
    int64_t whole = 0; /* values the vector form takes */
#if defined(__AVX512F__)
    whole = n - n % 16;
    for (int64_t j = 0; j < whole; j += 16)
        _mm512_storeu_ps(v + j, dlrt_gelu16(_mm512_loadu_ps(v + j), _mm512_set1_ps(inv_d)));
#elif defined(__AVX2__) && defined(__FMA__)
    whole = n - n % 8;
    for (int64_t j = 0; j < whole; j += 8)
        _mm256_storeu_ps(v + j, dlrt_gelu8(_mm256_loadu_ps(v + j), _mm256_set1_ps(inv_d)));
#endif
    for (int64_t j = whole; j < n; j++) v[j] = dlrt_gelu1(v[j], inv_d);
}

/* Lanes of the partial results of a softmax row's reductions: kept apart in small local arrays,
 * that is what lets the compiler vectorize them without reassociating one sum. */
#define DLRT_SM_LANES 16

/* The maximum of x[0..n) by > comparisons (-inf for an empty row; NaNs never win one). The
 * lanes' loop in vector instructions where the build has them: gcc (12, -std=c11) vectorizes
 * no form of it in plain C and ran 16 scalar maxss per 16 scores, a third of BERT's fused
 * attention's softmax. maxps(a, b) is a > b ? a : b, lane by lane, NaNs included. */
static inline float dlrt_row_max(int64_t n, const float *x) {
    float ml[DLRT_SM_LANES];
    int64_t j = 0;
#if defined(__AVX512F__)
    __m512 mv = _mm512_set1_ps(-INFINITY);
    for (; j + DLRT_SM_LANES <= n; j += DLRT_SM_LANES)
        mv = _mm512_max_ps(_mm512_loadu_ps(x + j), mv);
    _mm512_storeu_ps(ml, mv);
#elif defined(__AVX__)
    __m256 mv0 = _mm256_set1_ps(-INFINITY), mv1 = mv0;
    for (; j + DLRT_SM_LANES <= n; j += DLRT_SM_LANES) {
        mv0 = _mm256_max_ps(_mm256_loadu_ps(x + j), mv0);
        mv1 = _mm256_max_ps(_mm256_loadu_ps(x + j + 8), mv1);
    }
    _mm256_storeu_ps(ml, mv0);
    _mm256_storeu_ps(ml + 8, mv1);
#else
    for (int l = 0; l < DLRT_SM_LANES; l++) ml[l] = -INFINITY;
    for (; j + DLRT_SM_LANES <= n; j += DLRT_SM_LANES)
        for (int l = 0; l < DLRT_SM_LANES; l++) ml[l] = x[j + l] > ml[l] ? x[j + l] : ml[l];
#endif
    float m = -INFINITY;
    for (; j < n; j++) m = x[j] > m ? x[j] : m;
    for (int l = 0; l < DLRT_SM_LANES; l++) m = ml[l] > m ? ml[l] : m;
    return m;
}

/* The sum of exp(x[j] - m) over j < n (m not +inf), the whole vectors' terms in lanes, then the
 * tail's, then the lanes; each term is also stored to e[j] when e is not NULL (e may be x).
 * Softmax's rows and fused attention's both sum this way. */
static inline float dlrt_exp_sum(int64_t n, const float *x, float m, float *e) {
    float sl[DLRT_SM_LANES];
    for (int l = 0; l < DLRT_SM_LANES; l++) sl[l] = 0.0f;
    int64_t j = 0;
    /* two loops rather than a conditional store, so each vectorizes */
    if (e)
        for (; j + DLRT_SM_LANES <= n; j += DLRT_SM_LANES)
            for (int l = 0; l < DLRT_SM_LANES; l++) {
                const float v = dlrt_exp_neg(x[j + l] - m);
                e[j + l] = v;
                sl[l] += v;
            }
    else
        for (; j + DLRT_SM_LANES <= n; j += DLRT_SM_LANES)
            for (int l = 0; l < DLRT_SM_LANES; l++) sl[l] += dlrt_exp_neg(x[j + l] - m);
    float s = 0.0f;
    for (; j < n; j++) {
        const float v = dlrt_exp_neg(x[j] - m);
        if (e) e[j] = v;
        s += v;
    }
    for (int l = 0; l < DLRT_SM_LANES; l++) s += sl[l];
    return s;
}

/* Activations over n values in place; the switch sits outside the loops so each loop is a plain
 * map the compiler can vectorize. */
static inline void dlrt_act_apply(int act, float a, float b, float *v, int64_t n) {
    switch (act) {
    case DLRT_ACT_RELU:
        for (int64_t j = 0; j < n; j++) v[j] = v[j] > 0.0f ? v[j] : 0.0f;
        break;
    case DLRT_ACT_CLIP:
        for (int64_t j = 0; j < n; j++) {
            float x = v[j] < a ? a : v[j];
            v[j] = x > b ? b : x;
        }
        break;
    case DLRT_ACT_LEAKY_RELU:
        for (int64_t j = 0; j < n; j++) v[j] = v[j] < 0.0f ? a * v[j] : v[j];
        break;
    case DLRT_ACT_SIGMOID:
        for (int64_t j = 0; j < n; j++) v[j] = 1.0f / (1.0f + expf(-v[j]));
        break;
    case DLRT_ACT_TANH:
        for (int64_t j = 0; j < n; j++) v[j] = tanhf(v[j]);
        break;
    case DLRT_ACT_GELU: /* a = 0: an epilogue zeroed but for act, d = sqrt(2) */
        dlrt_gelu_apply(a != 0.0f ? a : 1.41421356f, v, n);
        break;
    case DLRT_ACT_HARD_SIGMOID:
        for (int64_t j = 0; j < n; j++) {
            float x = a * v[j] + b;
            x = x > 1.0f ? 1.0f : x;
            v[j] = x < 0.0f ? 0.0f : x;
        }
        break;
    case DLRT_ACT_HARD_SWISH:
        for (int64_t j = 0; j < n; j++) {
            float x = v[j] * (1.0f / 6.0f) + 0.5f;
            x = x > 1.0f ? 1.0f : x;
            v[j] = v[j] * (x < 0.0f ? 0.0f : x);
        }
        break;
    case DLRT_ACT_GELU_TANH: {
        /* the graph's own order (x*x, then x times that, ...), each step rounded as there */
        const float s = a != 0.0f ? a : DLRT_GELU_TANH_A, c = a != 0.0f ? b : DLRT_GELU_TANH_B;
        for (int64_t j = 0; j < n; j++) {
            const float x = v[j];
            v[j] = x * (1.0f + tanhf(s * (x + c * (x * (x * x))))) * 0.5f;
        }
        break;
    }
    default: /* DLRT_ACT_NONE */
        break;
    }
}

/* Turns accumulators v[0..n) of row i, columns j0.. into final values: alpha, bias, residual,
 * activation. v is the caller's local buffer and the residual is read here, before the caller
 * stores v, so a residual that is C itself (an in-place add) is read before it is overwritten. */
static inline void dlrt_epi_apply(const dlrt_epilogue *ep, int64_t i, int64_t j0, float *v,
                                  int64_t n) {
    if (!ep) return;
    const float alpha = ep->alpha;
    if (alpha != 1.0f)
        for (int64_t j = 0; j < n; j++) v[j] *= alpha;
    if (ep->bias) {
        const float beta = ep->beta;
        const float *bp = ep->bias + i * ep->bias_rs + j0 * ep->bias_cs;
        const int64_t cs = ep->bias_cs;
        if (cs == 0) {
            const float bv = beta * bp[0];
            for (int64_t j = 0; j < n; j++) v[j] += bv;
        } else if (cs == 1) {
            for (int64_t j = 0; j < n; j++) v[j] += beta * bp[j];
        } else {
            for (int64_t j = 0; j < n; j++) v[j] += beta * bp[j * cs];
        }
    }
    if (ep->residual) {
        const float *rp = ep->residual + i * ep->res_rs + j0 * ep->res_cs;
        const int64_t cs = ep->res_cs;
        if (cs == 1) {
            for (int64_t j = 0; j < n; j++) v[j] += rp[j];
        } else {
            for (int64_t j = 0; j < n; j++) v[j] += rp[j * cs];
        }
    }
    dlrt_act_apply(ep->act, ep->act_a, ep->act_b, v, n);
}

/* A sliding window over 3 spatial dims (depth, height, width): ranks 1 and 2 are padded with
 * leading dims of size 1 (kernel 1, stride 1, no padding). */
typedef struct dlrt_win3 {
    int64_t in[3], out[3], k[3], stride[3], dil[3], pad[3];
    int64_t in_sp, out_sp, k_sp; /* products of in, out, k */
} dlrt_win3;

/* A job over depth slices of one window geometry (the pooling kernels' dlrt_parallel pieces). */
typedef struct dlrt_slices_job {
    const dlrt_win3 *g;
    const float *x, *dy;
    float *y;
} dlrt_slices_job;

static inline void dlrt_win3_init(dlrt_win3 *g, int nsp, const int64_t *in, const int64_t *out,
                                  const int64_t *k, const int64_t *stride, const int64_t *dil,
                                  const int64_t *pad_begin) {
    int lead = 3 - nsp;
    for (int d = 0; d < 3; d++) {
        int s = d - lead;
        g->in[d] = s >= 0 ? in[s] : 1;
        g->out[d] = s >= 0 ? out[s] : 1;
        g->k[d] = s >= 0 ? k[s] : 1;
        g->stride[d] = s >= 0 ? stride[s] : 1;
        g->dil[d] = s >= 0 ? dil[s] : 1;
        g->pad[d] = s >= 0 ? pad_begin[s] : 0;
    }
    g->in_sp = g->in[0] * g->in[1] * g->in[2];
    g->out_sp = g->out[0] * g->out[1] * g->out[2];
    g->k_sp = g->k[0] * g->k[1] * g->k[2];
}

/* Taps t in [0, k) of the window of output o that land in [0, in), i.e.
 * 0 <= o*s - pad + t*dil < in: the range [*lo, *hi), empty when *lo >= *hi. */
static inline void dlrt_win_taps(int64_t o, int64_t s, int64_t pad, int64_t dil, int64_t k,
                                 int64_t in, int64_t *lo, int64_t *hi) {
    int64_t start = o * s - pad;
    int64_t a = start >= 0 ? 0 : (-start + dil - 1) / dil;
    int64_t b = start >= in ? 0 : (in - start + dil - 1) / dil;
    *lo = a;
    *hi = b < k ? b : k;
}

/* Taps t in [0, k) of output o that lie inside the padded input, i.e.
 * o*s - pb + t*dil < in + pe (they never fall before -pb): what count_include_pad counts. */
static inline int64_t dlrt_pool_padded_taps(int64_t o, int64_t s, int64_t pb, int64_t pe,
                                            int64_t dil, int64_t k, int64_t in) {
    int64_t room = in + pb + pe - o * s;
    if (room <= 0) return 0;
    int64_t n = (room + dil - 1) / dil;
    return n < k ? n : k;
}

/* The window of a pooling (forward or backward) as rank 3, and its end pads pe[]. */
static inline void dlrt_pool_geom(const dlrt_pool *p, dlrt_win3 *g, int64_t pe[3]) {
    dlrt_win3_init(g, p->nsp, p->in, p->out, p->k, p->stride, p->dil, p->pad_begin);
    for (int d = 0; d < 3; d++) pe[d] = d >= 3 - p->nsp ? p->pad_end[d - (3 - p->nsp)] : 0;
}

#endif
