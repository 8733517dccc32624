/* test-rng.h — the unit tests' random numbers: a fixed-seed xorshift64 generator, so every run
 * of a test sees the same data (a failure reproduces). One state per test binary; a test whose
 * checks were tuned on another stream defines TEST_RNG_SEED before including this. */
#ifndef DLCC_TEST_RNG_H
#define DLCC_TEST_RNG_H

#include <math.h>
#include <stdint.h>

#ifndef TEST_RNG_SEED
#define TEST_RNG_SEED 0x9E3779B97F4A7C15ull
#endif
static uint64_t rng = TEST_RNG_SEED;

static inline uint64_t rnext(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}
static inline double urand(void) { /* uniform in [0, 1) */
    return (double)(rnext() >> 11) / 9007199254740992.0;
}
static inline float frand(void) { /* uniform in [-1, 1) */
    return (float)(urand() * 2.0 - 1.0);
}
static inline int64_t irand(int64_t lo, int64_t hi) { /* uniform in [lo, hi] */
    return lo + (int64_t)(rnext() % (uint64_t)(hi - lo + 1));
}
static inline float grand(void) { /* N(0, 1), Box-Muller */
    const double u = ((double)(rnext() >> 11) + 0.5) / 9007199254740992.0, v = urand();
    return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

#endif
