/* vecmath.h — lets the compiler vectorize loops that call math functions. Declaring expf & co.
 * with GCC's `simd` attribute makes a vectorized loop call their GNU vector-ABI variants
 * (_ZGVeN16v_expf...), which glibc's libmvec or SLEEF's libsleefgnuabi provide (jit.c prefers
 * libmvec, measured faster). The JIT defines DLRT_VECMATH only when it found and links such a
 * library, and builds with -fno-math-errno (a call that may set errno is never vectorized).
 * Elsewhere (AOT bundles, clang, other architectures) the loops call the scalar functions. The
 * vector variants' error bounds: libmvec at most 4 ulp (glibc's published tables; the float
 * functions here are 1-2 ulp), SLEEF 1.0 ulp; the conformance and PyTorch parity suites run
 * with them. Only functions every vector variant (SSE2, AVX2, AVX-512) of both libraries
 * provides are listed. Below them, math the runtime computes itself, branch-free so that loops
 * calling it vectorize without either library: erf (dlrt_erf). */
#ifndef DLRT_VECMATH_H
#define DLRT_VECMATH_H

#include <math.h>

#if defined(DLRT_VECMATH) && defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define DLRT_SIMD_FN __attribute__((simd("notinbranch")))
float expf(float) DLRT_SIMD_FN;
float logf(float) DLRT_SIMD_FN;
float tanhf(float) DLRT_SIMD_FN;
float erff(float) DLRT_SIMD_FN;
float sinf(float) DLRT_SIMD_FN;
float cosf(float) DLRT_SIMD_FN;
float expm1f(float) DLRT_SIMD_FN;
float log1pf(float) DLRT_SIMD_FN;
float atanf(float) DLRT_SIMD_FN;
double exp(double) DLRT_SIMD_FN;
double log(double) DLRT_SIMD_FN;
double tanh(double) DLRT_SIMD_FN;
double erf(double) DLRT_SIMD_FN;
#endif

/* a * b + c, fused where the build has FMA (one rounding, one instruction), else two operations
 * (a library call per element would not vectorize). */
#if defined(__FMA__) || defined(__AVX512F__) /* (gcc's -mavx512f alone defines no __FMA__) */
#define DLRT_FMAF(a, b, c) fmaf(a, b, c)
#else
#define DLRT_FMAF(a, b, c) ((a) * (b) + (c))
#endif

/* erf(t) as t P(t^2) / Q(t^2), |t| clamped to 3.92 (erf is 1 in float beyond) and the result
 * to [-1, 1]: the GELU epilogue's erf, and Erf in generated elementwise loops
 * (scalar-ops.c), which vectorize it with any compiler and without a vector math library
 * (glibc's vector erff took 60% of a [1024,1024] GELU's time). P and Q (6 coefficients each,
 * lowest first) are a fit of least maximum relative error on (0, 3.92] (1.9e-8 in exact
 * arithmetic). Evaluated in float with FMA: at most 6 ulp from erf, 3.6e-7 absolute (all floats
 * checked against double erf; 3.9 ulp under 0.5, 4.7 under 2); with separate multiply and add (no
 * FMA in the build): 7.7 ulp, 4.6e-7 absolute. About 3x the speed of glibc's vector erff, which
 * cost BERT-base 1.7 ms a run. The vector forms in dlrt-impl.h (DLRT_GELU_VEC) do the same
 * operations in the same order, so each value has the same bits whichever form computed it (a row's
 * tail runs the scalar one). */
static const float dlrt_erf_p[6] = {1.1283791462e+00f, 1.9040497492e-01f, 5.2748525668e-02f,
                                    3.7655537584e-03f, 2.8488145562e-04f, 2.0501002735e-06f};
static const float dlrt_erf_q[6] = {1.0f,
                                    5.0207475676e-01f,
                                    1.1410849515e-01f,
                                    1.4969088841e-02f,
                                    1.1625205303e-03f,
                                    3.8091784091e-05f};
#define DLRT_ERF_CLAMP 3.92f
/* maxps / minps order: a > b ? a : b, a < b ? a : b (so a NaN b comes out) */
static inline float dlrt_maxf(float a, float b) {
    return a > b ? a : b;
}
static inline float dlrt_minf(float a, float b) {
    return a < b ? a : b;
}

static inline float dlrt_erf(float x) {
    const float t = dlrt_minf(DLRT_ERF_CLAMP, dlrt_maxf(-DLRT_ERF_CLAMP, x)); /* NaN stays */
    const float s = t * t;
    /* Horner's steps written out: a loop here would be the innermost loop of a generated
     * elementwise loop calling this, and only the innermost loop is vectorized. */
    float p = dlrt_erf_p[5], q = dlrt_erf_q[5];
    p = DLRT_FMAF(p, s, dlrt_erf_p[4]), q = DLRT_FMAF(q, s, dlrt_erf_q[4]);
    p = DLRT_FMAF(p, s, dlrt_erf_p[3]), q = DLRT_FMAF(q, s, dlrt_erf_q[3]);
    p = DLRT_FMAF(p, s, dlrt_erf_p[2]), q = DLRT_FMAF(q, s, dlrt_erf_q[2]);
    p = DLRT_FMAF(p, s, dlrt_erf_p[1]), q = DLRT_FMAF(q, s, dlrt_erf_q[1]);
    p = DLRT_FMAF(p, s, dlrt_erf_p[0]), q = DLRT_FMAF(q, s, dlrt_erf_q[0]);
    return dlrt_minf(1.0f, dlrt_maxf(-1.0f, t * p / q));
}

#endif
