/* vecmath.h — lets the compiler vectorize loops that call math functions. Declaring expf & co.
 * with GCC's `simd` attribute makes a vectorized loop call their GNU vector-ABI variants
 * (_ZGVeN16v_expf...), which glibc's libmvec or SLEEF's libsleefgnuabi provide (jit.c prefers
 * libmvec, measured faster). The JIT defines DLRT_VECMATH only when it found and links such a
 * library, and builds with -fno-math-errno (a call that may set errno is never vectorized).
 * Elsewhere (AOT bundles, clang, other architectures) the loops call the scalar functions. The
 * vector variants' error bounds: libmvec at most 4 ulp (glibc's published tables; the float
 * functions here are 1-2 ulp), SLEEF 1.0 ulp; the conformance and PyTorch parity suites run
 * with them. Only functions every vector variant (SSE2, AVX2, AVX-512) of both libraries
 * provides are listed. */
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

#endif
