/* pool-pair.h — max pooling over 2x2 windows at stride 2 with no padding (LeNet's and VGG's
 * pools), forward (pool.c) and backward (conv-grad.c), a tensor's depth slices taken as one run
 * of rows of windows: the per-window, per-row and per-plane bookkeeping of the general paths
 * cost more than the four taps (a LeNet's pools at batch 64 took 0.04 and 0.11 ms for 55 K
 * windows, forward and backward).
 *
 * A row of windows is read as vectors of its two input rows, split into their even and odd
 * columns by shuffles: 8 windows per step, or 4 on rows of 4 to 7 windows; rows of 1 to 3
 * windows go one window at a time. A row's last step overlaps the one before when the row is
 * not a multiple of the step: results are stored, never accumulated, so a window done twice
 * stores the same values. The forward folds a window's taps in the reference's order (row 0's
 * two, then row 1's) keeping the first maximum with strict >; the backward puts 0 + dy (what
 * adding to a zeroed dx gives) on the tap that fold kept and +0 on the three others. Both
 * therefore match the general paths to the bit, NaNs and signed zeros included. */
#ifndef DLRT_POOL_PAIR_H
#define DLRT_POOL_PAIR_H
#include "dlrt-impl.h"

/* Whether p is such a pool: 2x2 windows at stride 2, undilated, without padding before, every
 * window inside the input (leftover rows and columns, as a floor-mode pool of odd sizes has, are
 * read by no window), and in depth (3-D pools) one tap at stride 1, so that each depth slice is
 * a plane of its own. */
static inline int dlrt_pool_pair(const dlrt_pool *p, const dlrt_win3 *g) {
    return p->kind == 0 && g->k[0] == 1 && g->stride[0] == 1 && g->pad[0] == 0 &&
           g->in[0] == g->out[0] && g->k[1] == 2 && g->k[2] == 2 && g->stride[1] == 2 &&
           g->stride[2] == 2 && g->dil[1] == 1 && g->dil[2] == 1 && g->pad[1] == 0 &&
           g->pad[2] == 0 && 2 * g->out[1] <= g->in[1] && 2 * g->out[2] <= g->in[2];
}

/* One window: taps a, c (row 0), e, f (row 1). The forward's maximum, and the backward's masks
 * g1, g2, g3: whether c, e, f replaced the maximum so far. */
static inline float dlrt_pair_max1(const float *r0, const float *r1) {
    float m = r0[0];
    m = r0[1] > m ? r0[1] : m;
    m = r1[0] > m ? r1[0] : m;
    return r1[1] > m ? r1[1] : m;
}

/* v where keep is 1, +0 where it is 0, without a branch (activations mispredict). */
static inline float dlrt_pair_keep(float v, int keep) {
    uint32_t bits;
    memcpy(&bits, &v, sizeof bits);
    bits &= 0u - (uint32_t)keep;
    memcpy(&v, &bits, sizeof v);
    return v;
}

static inline void dlrt_pair_grad1(const float *r0, const float *r1, float dy, float *d0,
                                   float *d1) {
    const float a = r0[0], c = r0[1], e = r1[0], f = r1[1], v = 0.0f + dy;
    const int g1 = c > a;
    const float m1 = g1 ? c : a;
    const int g2 = e > m1;
    const int g3 = f > (g2 ? e : m1);
    d0[0] = dlrt_pair_keep(v, (g1 | g2 | g3) ^ 1);
    d0[1] = dlrt_pair_keep(v, g1 & ((g2 | g3) ^ 1));
    d1[0] = dlrt_pair_keep(v, g2 & (g3 ^ 1));
    d1[1] = dlrt_pair_keep(v, g3);
}

#if defined(__GNUC__) || defined(__clang__)
/* Vectors of W windows (W = 8 or 4): F floats and I their lanes' masks; EV and OD pick the even
 * and odd columns of two vectors of a row, LO and HI interleave two vectors back. */
typedef float dlrt_pf8 __attribute__((vector_size(32)));
typedef int32_t dlrt_pi8 __attribute__((vector_size(32)));
typedef float dlrt_pf4 __attribute__((vector_size(16)));
typedef int32_t dlrt_pi4 __attribute__((vector_size(16)));
#define DLRT_PAIR_EV8 0, 2, 4, 6, 8, 10, 12, 14
#define DLRT_PAIR_OD8 1, 3, 5, 7, 9, 11, 13, 15
#define DLRT_PAIR_LO8 0, 8, 1, 9, 2, 10, 3, 11
#define DLRT_PAIR_HI8 4, 12, 5, 13, 6, 14, 7, 15
#define DLRT_PAIR_EV4 0, 2, 4, 6
#define DLRT_PAIR_OD4 1, 3, 5, 7
#define DLRT_PAIR_LO4 0, 4, 1, 5
#define DLRT_PAIR_HI4 2, 6, 3, 7

/* Windows [o, o + W) of a row: the taps' vectors a, c, e, f as in dlrt_pair_grad1. */
#define DLRT_PAIR_TAPS(W, r0, r1, o)                                                               \
    dlrt_pf##W x0_, x1_, x2_, x3_;                                                                 \
    memcpy(&x0_, (r0) + 2 * (o), sizeof x0_);                                                      \
    memcpy(&x1_, (r0) + 2 * (o) + (W), sizeof x1_);                                                \
    memcpy(&x2_, (r1) + 2 * (o), sizeof x2_);                                                      \
    memcpy(&x3_, (r1) + 2 * (o) + (W), sizeof x3_);                                                \
    const dlrt_pf##W a = __builtin_shufflevector(x0_, x1_, DLRT_PAIR_EV##W);                       \
    const dlrt_pf##W c = __builtin_shufflevector(x0_, x1_, DLRT_PAIR_OD##W);                       \
    const dlrt_pf##W e = __builtin_shufflevector(x2_, x3_, DLRT_PAIR_EV##W);                       \
    const dlrt_pf##W f = __builtin_shufflevector(x2_, x3_, DLRT_PAIR_OD##W)

/* u where the mask m is set, else v (m from a comparison u > v: the fold's step) */
#define DLRT_PAIR_SEL(W, m, u, v) ((dlrt_pf##W)(((m) & (dlrt_pi##W)(u)) | (~(m) & (dlrt_pi##W)(v))))

#define DLRT_PAIR_STEPS(W)                                                                         \
    static inline void dlrt_pair_max##W(const float *r0, const float *r1, float *y, int64_t o) {   \
        DLRT_PAIR_TAPS(W, r0, r1, o);                                                              \
        dlrt_pf##W m = DLRT_PAIR_SEL(W, c > a, c, a);                                              \
        m = DLRT_PAIR_SEL(W, e > m, e, m);                                                         \
        m = DLRT_PAIR_SEL(W, f > m, f, m);                                                         \
        memcpy(y + o, &m, sizeof m);                                                               \
    }                                                                                              \
    static inline void dlrt_pair_grad##W(const float *r0, const float *r1, const float *dy,        \
                                         float *d0, float *d1, int64_t o) {                        \
        DLRT_PAIR_TAPS(W, r0, r1, o);                                                              \
        dlrt_pf##W v;                                                                              \
        memcpy(&v, dy + o, sizeof v);                                                              \
        const dlrt_pi##W vi = (dlrt_pi##W)(v + 0.0f);                                              \
        const dlrt_pi##W g1 = c > a;                                                               \
        const dlrt_pf##W m1 = DLRT_PAIR_SEL(W, g1, c, a);                                          \
        const dlrt_pi##W g2 = e > m1;                                                              \
        const dlrt_pi##W g3 = f > DLRT_PAIR_SEL(W, g2, e, m1);                                     \
        const dlrt_pi##W da = vi & ~(g1 | g2 | g3), dc = vi & g1 & ~(g2 | g3);                     \
        const dlrt_pi##W de = vi & g2 & ~g3, df = vi & g3;                                         \
        const dlrt_pi##W s0 = __builtin_shufflevector(da, dc, DLRT_PAIR_LO##W);                    \
        const dlrt_pi##W s1 = __builtin_shufflevector(da, dc, DLRT_PAIR_HI##W);                    \
        const dlrt_pi##W s2 = __builtin_shufflevector(de, df, DLRT_PAIR_LO##W);                    \
        const dlrt_pi##W s3 = __builtin_shufflevector(de, df, DLRT_PAIR_HI##W);                    \
        memcpy(d0 + 2 * o, &s0, sizeof s0);                                                        \
        memcpy(d0 + 2 * o + (W), &s1, sizeof s1);                                                  \
        memcpy(d1 + 2 * o, &s2, sizeof s2);                                                        \
        memcpy(d1 + 2 * o + (W), &s3, sizeof s3);                                                  \
    }
DLRT_PAIR_STEPS(8)
DLRT_PAIR_STEPS(4)
#undef DLRT_PAIR_STEPS

/* The steps of a row of n windows, by W at o, the last one at n - W (overlapping). */
#define DLRT_PAIR_ROW(W, n, STEP)                                                                  \
    for (int64_t o = 0;; o += (W)) {                                                               \
        if (o > (n) - (W)) o = (n) - (W);                                                          \
        STEP;                                                                                      \
        if (o == (n) - (W)) break;                                                                 \
    }
#define DLRT_PAIR_ROWS(n, STEP8, STEP4, STEP1)                                                     \
    do {                                                                                           \
        if ((n) >= 8) {                                                                            \
            DLRT_PAIR_ROW(8, n, STEP8)                                                             \
        } else if ((n) >= 4) {                                                                     \
            DLRT_PAIR_ROW(4, n, STEP4)                                                             \
        } else {                                                                                   \
            for (int64_t o = 0; o < (n); o++) STEP1;                                               \
        }                                                                                          \
    } while (0)
#else
#define DLRT_PAIR_ROWS(n, STEP8, STEP4, STEP1)                                                     \
    do {                                                                                           \
        for (int64_t o = 0; o < (n); o++) STEP1;                                                   \
    } while (0)
#endif

/* A row of n windows, their input rows at r0 and r1: the maxima to y, or dy to the input rows'
 * gradients d0 and d1 (every tap written). */
static inline void dlrt_pair_max_row(const float *r0, const float *r1, float *y, int64_t n) {
    DLRT_PAIR_ROWS(n, dlrt_pair_max8(r0, r1, y, o), dlrt_pair_max4(r0, r1, y, o),
                   y[o] = dlrt_pair_max1(r0 + 2 * o, r1 + 2 * o));
}

static inline void dlrt_pair_grad_row(const float *r0, const float *r1, const float *dy, float *d0,
                                      float *d1, int64_t n) {
    DLRT_PAIR_ROWS(n, dlrt_pair_grad8(r0, r1, dy, d0, d1, o),
                   dlrt_pair_grad4(r0, r1, dy, d0, d1, o),
                   dlrt_pair_grad1(r0 + 2 * o, r1 + 2 * o, dy[o], d0 + 2 * o, d1 + 2 * o));
}

/* The forward of `slices` depth slices of g's geometry (planes of in[1] x in[2] to planes of
 * out[1] x out[2]). */
static void dlrt_pool_pair_slices(void *ctx, int64_t lo, int64_t hi) {
    const dlrt_slices_job *j = ctx;
    const dlrt_win3 *g = j->g;
    const int64_t in_w = g->in[2], n = g->out[2], in_p = g->in[1] * in_w, out_p = g->out[1] * n;
    for (int64_t s = lo; s < hi; s++)
        for (int64_t oh = 0; oh < g->out[1]; oh++) {
            const float *r0 = j->x + s * in_p + 2 * oh * in_w;
            dlrt_pair_max_row(r0, r0 + in_w, j->y + s * out_p + oh * n, n);
        }
}

static inline void dlrt_pool_pair_forward(const dlrt_win3 *g, int64_t slices, const float *x,
                                          float *y) {
    dlrt_slices_job job = {g, x, NULL, y};
    dlrt_parallel_for(slices,
                      (double)slices * (double)(g->out[1] * g->out[2]) * 4.0 >= DLRT_PAR_MIN,
                      dlrt_pool_pair_slices, &job);
}

/* The backward: dx of `slices` depth slices, overwritten (rows and columns no window reads get
 * 0). */
static void dlrt_pool_pair_grad_slices(void *ctx, int64_t lo, int64_t hi) {
    const dlrt_slices_job *j = ctx;
    const dlrt_win3 *g = j->g;
    const int64_t in_w = g->in[2], n = g->out[2], in_p = g->in[1] * in_w, out_p = g->out[1] * n;
    const int exact = 2 * g->out[1] == g->in[1] && 2 * n == in_w;
    float *dx = j->y;
    for (int64_t s = lo; s < hi; s++) {
        if (!exact) memset(dx + s * in_p, 0, (size_t)in_p * sizeof(float));
        for (int64_t oh = 0; oh < g->out[1]; oh++) {
            const int64_t at = s * in_p + 2 * oh * in_w;
            dlrt_pair_grad_row(j->x + at, j->x + at + in_w, j->dy + s * out_p + oh * n, dx + at,
                               dx + at + in_w, n);
        }
    }
}

static inline void dlrt_pool_pair_grad(const dlrt_win3 *g, int64_t slices, const float *x,
                                       const float *dy, float *dx) {
    dlrt_slices_job job = {g, x, dy, dx};
    dlrt_parallel_for(slices, (double)slices * (double)(g->in[1] * g->in[2]) * 2.0 >= DLRT_PAR_MIN,
                      dlrt_pool_pair_grad_slices, &job);
}

#endif
