/* rnn.c — dlrt_rnn_forward, the kernel of ONNX's LSTM, GRU and RNN with their default
 * activations (sigmoid for the gates, tanh for the cell and the output), no clip, peepholes or
 * sequence lengths, in layout 0 (X [T, B, I], Y [T, dirs, B, H]).
 *
 * The input's share of every gate does not depend on the state, so it is one product for all
 * time steps, X [T*B, I] times W^T, the biases that add to it folded in through the epilogue.
 * Each step then multiplies the state h [B, H] by R^T, whose panels are packed once per call
 * (every step reads all of R), and combines the two in a pass over the gates. The reference
 * kernel (src/ops/rnn.c) runs each (direction, batch row) on its own, a dot product per gate
 * value, in double: a 64-step LSTM of 256 over a batch of 8 took 0.73 s. The products here are
 * dlrt_sgemm's, whose results do not depend on the thread count; the gate passes run in the
 * caller. */
#include "dlrt-impl.h"

#include <string.h>

enum {
    DLRT_RNN_ALIGN = 16,     /* floats: each workspace part starts a cache line */
    DLRT_RNN_CHUNK = 1 << 20 /* floats of the input's share held at once (4 MiB) */
};

static int64_t dlrt_rnn_gates(int kind) {
    return kind == DLRT_RNN_LSTM ? 4 : kind == DLRT_RNN_GRU ? 3 : 1;
}

static size_t dlrt_rnn_round(size_t floats) {
    return (floats + DLRT_RNN_ALIGN - 1) / DLRT_RNN_ALIGN * DLRT_RNN_ALIGN;
}

/* GRU without linear_before_reset multiplies (r * h) by the candidate's rows of R, after the
 * z and r rows' product with h: the two parts of R are packed apart. */
static int dlrt_rnn_split_r(const dlrt_rnn *p) {
    return p->kind == DLRT_RNN_GRU && !p->linear_before_reset;
}

/* Steps whose input shares are computed by one product: all of them unless that takes more
 * than DLRT_RNN_CHUNK floats (long sequences), at least one. */
static int64_t dlrt_rnn_chunk(const dlrt_rnn *p) {
    const int64_t per_step = p->B * dlrt_rnn_gates(p->kind) * p->H;
    const int64_t n = per_step > 0 ? DLRT_RNN_CHUNK / per_step : p->T;
    return n < 1 ? 1 : n > p->T ? p->T : n;
}

static size_t dlrt_rnn_packed_floats(const dlrt_rnn *p) {
    const int64_t G = dlrt_rnn_gates(p->kind), H = p->H;
    if (dlrt_rnn_split_r(p))
        return dlrt_rnn_round(dlrt_gemm_packed_bytes(1, 2 * H, H) / sizeof(float)) +
               dlrt_rnn_round(dlrt_gemm_packed_bytes(1, H, H) / sizeof(float));
    return dlrt_rnn_round(dlrt_gemm_packed_bytes(1, G * H, H) / sizeof(float));
}

size_t dlrt_rnn_workspace(const dlrt_rnn *p) {
    const size_t GH = (size_t)(dlrt_rnn_gates(p->kind) * p->H), BH = (size_t)(p->B * p->H);
    return sizeof(float) *
           (dlrt_rnn_round((size_t)(dlrt_rnn_chunk(p) * p->B) * GH) /* the input's share */
            + dlrt_rnn_packed_floats(p)                             /* R's panels */
            + dlrt_rnn_round((size_t)p->B * GH)                     /* a step's product h R^T */
            + 3 * dlrt_rnn_round(BH) /* h, c, and a row of temporaries */
            + dlrt_rnn_round(GH) + dlrt_rnn_round((size_t)p->H)); /* the biases */
}

/* Carves n floats off *at. */
static float *dlrt_rnn_take(float **at, size_t n) {
    float *p = *at;
    *at += dlrt_rnn_round(n);
    return p;
}

/* One LSTM step (gates i, o, f, c): g holds h R^T, xt the input's share; updates h and c. */
static void dlrt_rnn_lstm_step(const dlrt_rnn *p, float *g, const float *xt, float *h, float *c,
                               float *tmp) {
    const int64_t H = p->H, GH = 4 * H;
    for (int64_t b = 0; b < p->B; b++) {
        float *row = g + b * GH, *cb = c + b * H, *tb = tmp + b * H;
        const float *xr = xt + b * GH;
        for (int64_t j = 0; j < GH; j++) row[j] += xr[j];
        dlrt_act_apply(DLRT_ACT_SIGMOID, 0, 0, row, 3 * H);
        dlrt_act_apply(DLRT_ACT_TANH, 0, 0, row + 3 * H, H);
        for (int64_t j = 0; j < H; j++)
            tb[j] = cb[j] = row[2 * H + j] * cb[j] + row[j] * row[3 * H + j];
    }
    dlrt_act_apply(DLRT_ACT_TANH, 0, 0, tmp, p->B * H);
    for (int64_t b = 0; b < p->B; b++)
        for (int64_t j = 0; j < H; j++) h[b * H + j] = g[b * GH + H + j] * tmp[b * H + j];
}

/* The end of a GRU step: z from g's first H values a row, the candidate in cand; h moves
 * towards it. */
static void dlrt_rnn_gru_update(const dlrt_rnn *p, const float *g, const float *cand, float *h) {
    const int64_t H = p->H, GH = 3 * H;
    for (int64_t b = 0; b < p->B; b++)
        for (int64_t j = 0; j < H; j++) {
            const float z = g[b * GH + j];
            h[b * H + j] = (1.0f - z) * cand[b * H + j] + z * h[b * H + j];
        }
}

/* The z and r gates of a GRU step: g's first 2H values a row plus the input's share. */
static void dlrt_rnn_gru_gates(const dlrt_rnn *p, float *g, const float *xt) {
    const int64_t H = p->H, GH = 3 * H;
    for (int64_t b = 0; b < p->B; b++) {
        float *row = g + b * GH;
        for (int64_t j = 0; j < 2 * H; j++) row[j] += xt[b * GH + j];
        dlrt_act_apply(DLRT_ACT_SIGMOID, 0, 0, row, 2 * H);
    }
}

void dlrt_rnn_forward(const dlrt_rnn *p, const float *x, const float *w, const float *r,
                      const float *bias, const float *h0, const float *c0, float *y, float *yh,
                      float *yc, void *workspace) {
    const int64_t T = p->T, B = p->B, I = p->I, H = p->H, G = dlrt_rnn_gates(p->kind);
    const int64_t GH = G * H, BH = B * H;
    const int split = dlrt_rnn_split_r(p);
    float *at = workspace;
    const int64_t chunk = dlrt_rnn_chunk(p);
    float *xw = dlrt_rnn_take(&at, (size_t)(chunk * B * GH));
    float *rp = dlrt_rnn_take(&at, dlrt_rnn_packed_floats(p));
    float *g = dlrt_rnn_take(&at, (size_t)(B * GH));
    float *h = dlrt_rnn_take(&at, (size_t)BH), *c = dlrt_rnn_take(&at, (size_t)BH);
    float *tmp = dlrt_rnn_take(&at, (size_t)BH);
    float *bx = dlrt_rnn_take(&at, (size_t)GH), *rbh = dlrt_rnn_take(&at, (size_t)H);
    float *rp_h =
        split ? rp + dlrt_rnn_round(dlrt_gemm_packed_bytes(1, 2 * H, H) / sizeof(float)) : NULL;
    for (int d = 0; d < p->dirs; d++) {
        const int backward = p->reverse || d == 1;
        const float *wd = w + d * GH * I, *rd = r + d * GH * H;
        const float *wb = bias ? bias + d * 2 * GH : NULL, *rb = wb ? wb + GH : NULL;
        /* the biases that add to the input's share: both, but for the candidate of a GRU with
         * linear_before_reset, whose recurrent bias is inside the reset gate's product */
        const int lbr = p->kind == DLRT_RNN_GRU && p->linear_before_reset;
        for (int64_t j = 0; j < GH; j++)
            bx[j] = wb ? (lbr && j >= 2 * H ? wb[j] : wb[j] + rb[j]) : 0.0f;
        for (int64_t j = 0; j < H; j++) rbh[j] = lbr && rb ? rb[2 * H + j] : 0.0f;
        const dlrt_epilogue ep = {.alpha = 1, .beta = 1, .bias = bx, .bias_rs = 0, .bias_cs = 1};
        if (split) {
            dlrt_gemm_pack_operand(1, 2 * H, H, rd, H, 1, rp);
            dlrt_gemm_pack_operand(1, H, H, rd + 2 * H * H, H, 1, rp_h);
        } else {
            dlrt_gemm_pack_operand(1, GH, H, rd, H, 1, rp);
        }
        if (h0)
            memcpy(h, h0 + d * BH, (size_t)BH * sizeof(float));
        else
            memset(h, 0, (size_t)BH * sizeof(float));
        if (c0)
            memcpy(c, c0 + d * BH, (size_t)BH * sizeof(float));
        else
            memset(c, 0, (size_t)BH * sizeof(float));
        int64_t t_lo = 0; /* the first time step of the input shares in xw */
        for (int64_t s = 0; s < T; s++) {
            const int64_t t = backward ? T - 1 - s : s;
            if (s % chunk == 0) { /* the next steps' input shares: times [t_lo, t_lo + n) */
                const int64_t n = T - s < chunk ? T - s : chunk;
                t_lo = backward ? T - s - n : s;
                dlrt_sgemm(n * B, GH, I, x + t_lo * B * I, I, 0, wd, I, 1, xw, GH, &ep);
            }
            const float *xt = xw + (t - t_lo) * B * GH;
            if (p->kind == DLRT_RNN_LSTM) {
                dlrt_sgemm_ex(B, GH, H, h, H, 0, 0, rp, 0, 0, 1, g, GH, NULL);
                dlrt_rnn_lstm_step(p, g, xt, h, c, tmp);
            } else if (p->kind == DLRT_RNN_GRU && split) {
                dlrt_sgemm_ex(B, 2 * H, H, h, H, 0, 0, rp, 0, 0, 1, g, GH, NULL);
                dlrt_rnn_gru_gates(p, g, xt);
                for (int64_t b = 0; b < B; b++) /* r * h */
                    for (int64_t j = 0; j < H; j++)
                        tmp[b * H + j] = g[b * GH + H + j] * h[b * H + j];
                dlrt_sgemm_ex(B, H, H, tmp, H, 0, 0, rp_h, 0, 0, 1, g + 2 * H, GH, NULL);
                for (int64_t b = 0; b < B; b++)
                    for (int64_t j = 0; j < H; j++)
                        tmp[b * H + j] = xt[b * GH + 2 * H + j] + g[b * GH + 2 * H + j];
                dlrt_act_apply(DLRT_ACT_TANH, 0, 0, tmp, BH);
                dlrt_rnn_gru_update(p, g, tmp, h);
            } else if (p->kind == DLRT_RNN_GRU) {
                dlrt_sgemm_ex(B, GH, H, h, H, 0, 0, rp, 0, 0, 1, g, GH, NULL);
                dlrt_rnn_gru_gates(p, g, xt);
                for (int64_t b = 0; b < B; b++)
                    for (int64_t j = 0; j < H; j++)
                        tmp[b * H + j] = xt[b * GH + 2 * H + j] +
                                         g[b * GH + H + j] * (g[b * GH + 2 * H + j] + rbh[j]);
                dlrt_act_apply(DLRT_ACT_TANH, 0, 0, tmp, BH);
                dlrt_rnn_gru_update(p, g, tmp, h);
            } else {
                dlrt_sgemm_ex(B, H, H, h, H, 0, 0, rp, 0, 0, 1, g, H, NULL);
                for (int64_t k = 0; k < BH; k++) g[k] += xt[k];
                dlrt_act_apply(DLRT_ACT_TANH, 0, 0, g, BH);
                memcpy(h, g, (size_t)BH * sizeof(float));
            }
            if (y) memcpy(y + (t * p->dirs + d) * BH, h, (size_t)BH * sizeof(float));
        }
        if (yh) memcpy(yh + d * BH, h, (size_t)BH * sizeof(float));
        if (yc) memcpy(yc + d * BH, c, (size_t)BH * sizeof(float));
    }
}
