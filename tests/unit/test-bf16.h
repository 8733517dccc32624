/* test-bf16.h — bfloat16 rounding as the AVX512-BF16 conversion instructions do it (nearest, ties
 * to even; zero and denormals to a signed zero; NaN kept, made quiet; large values may round up
 * to infinity), for the references of the bfloat16 products' tests. */
#ifndef DLCC_TEST_BF16_H
#define DLCC_TEST_BF16_H

#include <stdint.h>
#include <string.h>

/* x rounded to bfloat16, back as a float. */
static inline float bf16_round(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7f800000u) == 0)
        u &= 0x80000000u;
    else if ((u & 0x7fffffffu) > 0x7f800000u)
        u |= 0x00400000u;
    else
        u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    memcpy(&x, &u, sizeof x);
    return x;
}

#endif
