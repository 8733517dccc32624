/* rowvec.h — reading windows straight from NCHW rows in AVX-512 vectors, for the kernels that
 * slide 3-wide windows along a row (depthwise-row.c, pool-s2.h): a row's floats from a column
 * with zeros past its end, and the window taps of 16 consecutive outputs made in registers from
 * such loads (shifted by a lane at stride 1, split into even and odd columns at stride 2).
 * Included only by AVX-512 builds. */
#ifndef DLRT_ROWVEC_H
#define DLRT_ROWVEC_H
#include "dlrt-impl.h"

#include <immintrin.h>

/* The lanes below n (0 <= n), as a mask: all 16 from n = 16 on. */
static inline __mmask16 dlrt_rv_lanes(int64_t n) {
    return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1u);
}

/* The lane numbers 0..15. */
static inline __m512i dlrt_rv_iota(void) {
    return _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
}

/* row[at .. at + 16) of a row of len floats (0 <= at), zeros past its end; nothing past it is
 * read, nor is a pointer past it formed. */
static inline __m512 dlrt_rv_load(const float *row, int64_t at, int64_t len) {
    const int64_t n = len - at;
    if (n >= 16) return _mm512_loadu_ps(row + at);
    if (n <= 0) return _mm512_setzero_ps();
    return _mm512_maskz_loadu_ps(dlrt_rv_lanes(n), row + at);
}

/* Lane 15 of lo, then lanes 0..14 of hi: x[j - 1] from the vectors holding x[j - 16 ..] (lo)
 * and x[j ..] (hi). */
static inline __m512 dlrt_rv_back1(__m512 hi, __m512 lo) {
    return _mm512_castsi512_ps(
        _mm512_alignr_epi32(_mm512_castps_si512(hi), _mm512_castps_si512(lo), 15));
}

/* Lanes 1..15 of lo, then lane 0 of hi: x[j + 1] from the vectors holding x[j ..] (lo) and
 * x[j + 16 ..] (hi). */
static inline __m512 dlrt_rv_next1(__m512 hi, __m512 lo) {
    return _mm512_castsi512_ps(
        _mm512_alignr_epi32(_mm512_castps_si512(hi), _mm512_castps_si512(lo), 1));
}

/* dlrt_rv_back1 and dlrt_rv_next1 with the lanes outside `keep` zeroed: taps that would cross
 * the edge of a row when rows follow each other in one vector (depthwise-row.c's flat kernel). */
static inline __m512 dlrt_rv_back1_z(__mmask16 keep, __m512 hi, __m512 lo) {
    return _mm512_castsi512_ps(
        _mm512_maskz_alignr_epi32(keep, _mm512_castps_si512(hi), _mm512_castps_si512(lo), 15));
}
static inline __m512 dlrt_rv_next1_z(__mmask16 keep, __m512 hi, __m512 lo) {
    return _mm512_castsi512_ps(
        _mm512_maskz_alignr_epi32(keep, _mm512_castps_si512(hi), _mm512_castps_si512(lo), 1));
}

/* The three taps of 16 windows 3 wide at stride 2 whose outputs j read columns 2j - 1 (*a),
 * 2j (*b) and 2j + 1 (*c) of a row of len floats, outputs from j0 on: the 32 columns from 2 j0
 * split into their even and odd lanes; *odd_prev carries the odd lanes from one step to the next
 * (lane 15: column 2 j0 - 1; zeros before the first step, the padding). */
static inline void dlrt_rv_taps2(const float *row, int64_t len, int64_t j0, __m512 *odd_prev,
                                 __m512 *a, __m512 *b, __m512 *c) {
    const __m512i even =
        _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i odd = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
    const __m512 lo = dlrt_rv_load(row, 2 * j0, len), hi = dlrt_rv_load(row, 2 * j0 + 16, len);
    *b = _mm512_permutex2var_ps(lo, even, hi);
    *c = _mm512_permutex2var_ps(lo, odd, hi);
    *a = dlrt_rv_back1(*c, *odd_prev);
    *odd_prev = *c;
}

#endif
