/* test-conv-ref.h — the convolution tests' reference (test_rtconv, test_conv_bf16): a plain loop
 * over outputs and taps, summed in double, with the sizes of a dlrt_conv's tensors. Include after
 * dlrt.h. */
#ifndef DLCC_TEST_CONV_REF_H
#define DLCC_TEST_CONV_REF_H

#include <math.h>
#include <stdint.h>

static int64_t numel_out(const dlrt_conv *p) {
    int64_t n = p->n * p->c_out;
    for (int d = 0; d < p->nsp; d++) n *= p->out[d];
    return n;
}
static int64_t numel_in(const dlrt_conv *p) {
    int64_t n = p->n * p->c_in;
    for (int d = 0; d < p->nsp; d++) n *= p->in[d];
    return n;
}
static int64_t numel_w(const dlrt_conv *p) {
    int64_t n = p->c_out * (p->c_in / p->group);
    for (int d = 0; d < p->nsp; d++) n *= p->k[d];
    return n;
}

/* Calls visit(ctx, yi, xi, wi) for every term x[xi] * w[wi] of output yi of the convolution
 * (taps in the padding left out), outputs in order and each output's terms in order. */
static inline void ref_conv_taps(const dlrt_conv *p,
                                 void (*visit)(void *ctx, int64_t yi, int64_t xi, int64_t wi),
                                 void *ctx) {
    int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, k[3] = {1, 1, 1}, s[3] = {1, 1, 1},
            dl[3] = {1, 1, 1}, pb[3] = {0, 0, 0};
    for (int d = 0, l = 3 - p->nsp; d < p->nsp; d++) {
        in[l + d] = p->in[d], out[l + d] = p->out[d], k[l + d] = p->k[d];
        s[l + d] = p->stride[d], dl[l + d] = p->dil[d], pb[l + d] = p->pad_begin[d];
    }
    const int64_t cig = p->c_in / p->group, cog = p->c_out / p->group;
    int64_t i = 0;
    for (int64_t b = 0; b < p->n; b++)
        for (int64_t oc = 0; oc < p->c_out; oc++)
            for (int64_t o0 = 0; o0 < out[0]; o0++)
                for (int64_t o1 = 0; o1 < out[1]; o1++)
                    for (int64_t o2 = 0; o2 < out[2]; o2++, i++)
                        for (int64_t c = 0; c < cig; c++) {
                            const int64_t ic = oc / cog * cig + c;
                            for (int64_t t0 = 0; t0 < k[0]; t0++)
                                for (int64_t t1 = 0; t1 < k[1]; t1++)
                                    for (int64_t t2 = 0; t2 < k[2]; t2++) {
                                        int64_t i0 = o0 * s[0] - pb[0] + t0 * dl[0];
                                        int64_t i1 = o1 * s[1] - pb[1] + t1 * dl[1];
                                        int64_t i2 = o2 * s[2] - pb[2] + t2 * dl[2];
                                        if (i0 < 0 || i0 >= in[0] || i1 < 0 || i1 >= in[1] ||
                                            i2 < 0 || i2 >= in[2])
                                            continue;
                                        int64_t xi = ((b * p->c_in + ic) * in[0] + i0) * in[1];
                                        int64_t wi = ((oc * cig + c) * k[0] + t0) * k[1];
                                        xi = (xi + i1) * in[2] + i2, wi = (wi + t1) * k[2] + t2;
                                        visit(ctx, i, xi, wi);
                                    }
                        }
}

typedef struct ref_conv_sums {
    const float *x, *w;
    double *acc, *mag;
} ref_conv_sums;

static inline void ref_conv_add(void *ctx, int64_t yi, int64_t xi, int64_t wi) {
    ref_conv_sums *r = ctx;
    const double v = (double)r->x[xi] * r->w[wi];
    r->acc[yi] += v, r->mag[yi] += fabs(v);
}

/* acc[i] = the convolution sum of output i, mag[i] = the sum of the magnitudes of its terms. */
static void ref_conv(const dlrt_conv *p, const float *x, const float *w, double *acc, double *mag) {
    const int64_t yn = numel_out(p);
    for (int64_t i = 0; i < yn; i++) acc[i] = mag[i] = 0;
    ref_conv_sums r = {x, w, acc, mag};
    ref_conv_taps(p, ref_conv_add, &r);
}

#endif
