/* rnn.c — dlrt_rnn_forward, the kernel of ONNX's LSTM, GRU and RNN with their default
 * activations (sigmoid for the gates, tanh for the cell and the output), no clip, peepholes or
 * sequence lengths, in layout 0 (X [T, B, I], Y [T, dirs, B, H]).
 *
 * The input's share of every gate does not depend on the state, so it is one product for all
 * time steps, X [T*B, I] times W^T, the biases that add to it folded in through the epilogue.
 * Each step then multiplies the state h [B, H] by R^T, whose panels are packed once per call
 * (every step reads all of R), or at load with W's where the weights are constants, and
 * combines the two in a pass over the gates. The reference
 * kernel (src/ops/rnn.c) runs each (direction, batch row) on its own, a dot product per gate
 * value, in double: a 64-step LSTM of 256 over a batch of 8 took 0.73 s. The products here are
 * dlrt_sgemm's, whose results do not depend on the thread count; the gate passes run in the
 * caller. */
#include "dlrt-impl.h"

#include <string.h>

enum {
    DLRT_RNN_ALIGN = 16,      /* floats: each workspace part starts a cache line */
    DLRT_RNN_CHUNK = 1 << 20, /* floats of the input's share held at once (4 MiB) */
    /* R's packed bytes (a direction's) up to which the steps' products take R as in cache
     * (DLRT_B_PACKED_HOT: not prefetched). LSTMs, input size = hidden, one thread, ms with /
     * without the prefetches: hidden 256, 64 steps of batch 8 (R 1 MiB) 2.63 / 2.39; 512, 32
     * steps of batch 16 (4 MiB) 9.9 / 9.4; 16 steps of batch 8 at 768 (9 MiB) 5.7 / 5.4, but at
     * 1024 (16 MiB) 10.9 / 11.6, and 8 steps at 2048 (64 MiB, from memory) 27.4 / 33.1. Measured
     * on a Zen 5 with 32 MiB of L3, shared with other tenants; the two directions of a
     * bidirectional layer at 2 threads hold two such R's at once, not measured. */
    DLRT_RNN_HOT_BYTES = 12 << 20
};

int64_t dlrt_rnn_gates(int kind) {
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

int dlrt_rnn_packed_part(const dlrt_rnn *p, int d, int k, dlrt_rnn_part *part) {
    const int64_t H = p->H, GH = dlrt_rnn_gates(p->kind) * H;
    const int split = dlrt_rnn_split_r(p);
    if (d < 0 || d >= p->dirs || k < 0 || k > 2 || (k == 2 && !split)) return 0;
    if (k == 0)
        *part = (dlrt_rnn_part){.input = 1, .lines = GH, .K = p->I, .offset = d * GH * p->I};
    else /* R whole, or a split GRU's z and r rows (k 1) and its candidate's (k 2) */
        *part = (dlrt_rnn_part){.input = 2,
                                .lines = k == 2  ? H
                                         : split ? 2 * H
                                                 : GH,
                                .K = H,
                                .offset = d * GH * H + (k == 2 ? 2 * H * H : 0)};
    return 1;
}

static size_t dlrt_rnn_packed_floats(const dlrt_rnn *p) {
    const int64_t G = dlrt_rnn_gates(p->kind), H = p->H;
    if (dlrt_rnn_split_r(p))
        return dlrt_rnn_round(dlrt_gemm_packed_bytes(1, 2 * H, H) / sizeof(float)) +
               dlrt_rnn_round(dlrt_gemm_packed_bytes(1, H, H) / sizeof(float));
    return dlrt_rnn_round(dlrt_gemm_packed_bytes(1, G * H, H) / sizeof(float));
}

/* Bytes of the products' own workspace (dlrt_sgemm_ws), where an operand several of their tiles
 * read is packed once: the input rows of the input shares' product, the state of each step's
 * (packed by every column tile instead, the state took 8% of a 64-step LSTM of 256 at batch 8
 * with its padding). */
static size_t dlrt_rnn_gemm_ws(const dlrt_rnn *p) {
    const int64_t GH = dlrt_rnn_gates(p->kind) * p->H;
    const size_t a = dlrt_gemm_workspace(dlrt_rnn_chunk(p) * p->B, GH, p->I, 0, 0);
    const size_t b = dlrt_gemm_workspace(p->B, GH, p->H, 0, 1);
    return a > b ? a : b;
}

/* Floats of one direction's part of the workspace. */
static size_t dlrt_rnn_dir_floats(const dlrt_rnn *p) {
    const size_t GH = (size_t)(dlrt_rnn_gates(p->kind) * p->H), BH = (size_t)(p->B * p->H);
    return dlrt_rnn_round((size_t)(dlrt_rnn_chunk(p) * p->B) * GH) /* the input's share */
           + dlrt_rnn_packed_floats(p)                             /* R's panels */
           + dlrt_rnn_round((size_t)p->B * GH)                     /* a step's product h R^T */
           + 3 * dlrt_rnn_round(BH)                            /* h, c, and a row of temporaries */
           + dlrt_rnn_round(GH) + dlrt_rnn_round((size_t)p->H) /* the biases */
           + dlrt_rnn_round(dlrt_rnn_gemm_ws(p) / sizeof(float));
}

size_t dlrt_rnn_workspace(const dlrt_rnn *p) {
    return sizeof(float) * (size_t)p->dirs * dlrt_rnn_dir_floats(p);
}

/* Carves n floats off *at. */
static float *dlrt_rnn_take(float **at, size_t n) {
    float *p = *at;
    *at += dlrt_rnn_round(n);
    return p;
}

/* One direction's run: its operands, its outputs' place, and its scratch. */
typedef struct dlrt_rnn_dir {
    const dlrt_rnn *p;
    int backward;
    const float *x, *w, *r, *wb, *rb, *h0, *c0;
    float *y, *yh, *yc;
    /* the packed parts (dlrt_rnn_packed_part): W's, R's, a split GRU's candidate rows; packed
     * at load, or NULL (W is then read as it is; R's are packed per call into rp_room) */
    const float *packed[3];
    float *xw, *rp_room[3], *g, *h, *c, *tmp, *bx, *rbh;
    void *gw; /* the products' workspace, gw_bytes */
    size_t gw_bytes;
    const float *xt; /* the current step's input shares */
    int phase;       /* of a GRU step without linear_before_reset: 0 the gates, 1 the rest */
} dlrt_rnn_dir;

enum { DLRT_RNN_COLS = 64 }; /* the state values of a row one unit of a step's gate pass takes */

/* LSTM (gates i, o, f, c), columns [j0, j0 + n) of row b: g holds h R^T; updates h and c. */
static void dlrt_rnn_lstm_cols(const dlrt_rnn_dir *s, int64_t b, int64_t j0, int64_t n) {
    const int64_t H = s->p->H, GH = 4 * H;
    float *row = s->g + b * GH, *cb = s->c + b * H + j0, *tb = s->tmp + b * H + j0;
    float *hb = s->h + b * H + j0;
    const float *xr = s->xt + b * GH;
    for (int q = 0; q < 4; q++) {
        float *gq = row + q * H + j0;
        for (int64_t j = 0; j < n; j++) gq[j] += xr[q * H + j0 + j];
        dlrt_act_apply(q == 3 ? DLRT_ACT_TANH : DLRT_ACT_SIGMOID, 0, 0, gq, n);
    }
    const float *ig = row + j0, *og = row + H + j0, *fg = row + 2 * H + j0, *cc = row + 3 * H + j0;
    for (int64_t j = 0; j < n; j++) tb[j] = cb[j] = fg[j] * cb[j] + ig[j] * cc[j];
    dlrt_act_apply(DLRT_ACT_TANH, 0, 0, tb, n);
    for (int64_t j = 0; j < n; j++) hb[j] = og[j] * tb[j];
}

/* GRU (gates z, r, h), columns [j0, j0 + n) of row b. Without linear_before_reset, phase 0
 * makes the z and r gates and r * h (the candidate's product then reads it), phase 1 the
 * candidate from that product and the update; with it, one phase does all, the reset gate
 * scaling h R_h^T plus its bias. */
static void dlrt_rnn_gru_cols(const dlrt_rnn_dir *s, int64_t b, int64_t j0, int64_t n) {
    const int64_t H = s->p->H, GH = 3 * H;
    const int split = !s->p->linear_before_reset;
    float *row = s->g + b * GH, *tb = s->tmp + b * H + j0, *hb = s->h + b * H + j0;
    const float *xr = s->xt + b * GH;
    float *zg = row + j0, *rg = row + H + j0, *hg = row + 2 * H + j0;
    if (!split || s->phase == 0)
        for (int q = 0; q < 2; q++) {
            float *gq = row + q * H + j0;
            for (int64_t j = 0; j < n; j++) gq[j] += xr[q * H + j0 + j];
            dlrt_act_apply(DLRT_ACT_SIGMOID, 0, 0, gq, n);
        }
    if (split && s->phase == 0) {
        for (int64_t j = 0; j < n; j++) tb[j] = rg[j] * hb[j];
        return;
    }
    const float *xh = xr + 2 * H + j0;
    if (split)
        for (int64_t j = 0; j < n; j++) tb[j] = xh[j] + hg[j];
    else
        for (int64_t j = 0; j < n; j++) tb[j] = xh[j] + rg[j] * (hg[j] + s->rbh[j0 + j]);
    dlrt_act_apply(DLRT_ACT_TANH, 0, 0, tb, n);
    for (int64_t j = 0; j < n; j++) hb[j] = (1.0f - zg[j]) * tb[j] + zg[j] * hb[j];
}

/* RNN, columns [j0, j0 + n) of row b. */
static void dlrt_rnn_simple_cols(const dlrt_rnn_dir *s, int64_t b, int64_t j0, int64_t n) {
    const int64_t H = s->p->H;
    float *gb = s->g + b * H + j0, *hb = s->h + b * H + j0;
    const float *xr = s->xt + b * H + j0;
    for (int64_t j = 0; j < n; j++) gb[j] += xr[j];
    dlrt_act_apply(DLRT_ACT_TANH, 0, 0, gb, n);
    memcpy(hb, gb, (size_t)n * sizeof(float));
}

/* Units [lo, hi) of a step's gate pass: unit u is row u / blocks, its block u % blocks of
 * DLRT_RNN_COLS state values. */
static void dlrt_rnn_units(void *ctx, int64_t lo, int64_t hi) {
    const dlrt_rnn_dir *s = ctx;
    const int64_t H = s->p->H, blocks = (H + DLRT_RNN_COLS - 1) / DLRT_RNN_COLS;
    for (int64_t u = lo; u < hi; u++) {
        const int64_t b = u / blocks, j0 = u % blocks * DLRT_RNN_COLS;
        const int64_t n = H - j0 < DLRT_RNN_COLS ? H - j0 : DLRT_RNN_COLS;
        if (s->p->kind == DLRT_RNN_LSTM)
            dlrt_rnn_lstm_cols(s, b, j0, n);
        else if (s->p->kind == DLRT_RNN_GRU)
            dlrt_rnn_gru_cols(s, b, j0, n);
        else
            dlrt_rnn_simple_cols(s, b, j0, n);
    }
}

/* A step's gate pass over every row, shared over the threads when there is enough of it (the
 * units are fixed, so the results are the same whatever the thread count). */
static void dlrt_rnn_gate_pass(dlrt_rnn_dir *s) {
    const int64_t B = s->p->B, H = s->p->H;
    const int64_t units = B * ((H + DLRT_RNN_COLS - 1) / DLRT_RNN_COLS);
    dlrt_parallel_for(units, units > 1 && B * dlrt_rnn_gates(s->p->kind) * H >= 4096,
                      dlrt_rnn_units, s);
}

/* One direction over every step. */
static void dlrt_rnn_direction(dlrt_rnn_dir *s) {
    const dlrt_rnn *p = s->p;
    const int64_t T = p->T, B = p->B, I = p->I, H = p->H, G = dlrt_rnn_gates(p->kind);
    const int64_t GH = G * H, BH = B * H, chunk = dlrt_rnn_chunk(p);
    const int split = dlrt_rnn_split_r(p);
    /* the biases that add to the input's share: both, but for the candidate of a GRU with
     * linear_before_reset, whose recurrent bias is inside the reset gate's product */
    const int lbr = p->kind == DLRT_RNN_GRU && p->linear_before_reset;
    for (int64_t j = 0; j < GH; j++)
        s->bx[j] = s->wb ? (lbr && j >= 2 * H ? s->wb[j] : s->wb[j] + s->rb[j]) : 0.0f;
    for (int64_t j = 0; j < H; j++) s->rbh[j] = lbr && s->rb ? s->rb[2 * H + j] : 0.0f;
    const dlrt_epilogue ep = {.alpha = 1, .beta = 1, .bias = s->bx, .bias_rs = 0, .bias_cs = 1};
    /* R's panels: packed at load, else here, once per call */
    const float *rp[3] = {s->packed[0], s->packed[1], s->packed[2]};
    dlrt_rnn_part part;
    for (int k = 1; k < 3; k++)
        if (!rp[k] && dlrt_rnn_packed_part(p, 0, k, &part)) { /* (direction 0: s->r is ours) */
            dlrt_gemm_pack_operand(1, part.lines, part.K, s->r + part.offset, part.K, 1,
                                   s->rp_room[k]);
            rp[k] = s->rp_room[k];
        }
    const int r_mode =
        dlrt_gemm_packed_bytes(1, GH, H) <= DLRT_RNN_HOT_BYTES ? DLRT_B_PACKED_HOT : 1;
    if (s->h0)
        memcpy(s->h, s->h0, (size_t)BH * sizeof(float));
    else
        memset(s->h, 0, (size_t)BH * sizeof(float));
    if (s->c0)
        memcpy(s->c, s->c0, (size_t)BH * sizeof(float));
    else
        memset(s->c, 0, (size_t)BH * sizeof(float));
    int64_t t_lo = 0; /* the first time step of the input shares in xw */
    for (int64_t st = 0; st < T; st++) {
        const int64_t t = s->backward ? T - 1 - st : st;
        if (st % chunk == 0) { /* the next steps' input shares: times [t_lo, t_lo + n) */
            const int64_t n = T - st < chunk ? T - st : chunk;
            t_lo = s->backward ? T - st - n : st;
            dlrt_sgemm_ws(n * B, GH, I, s->x + t_lo * B * I, I, 0, 0, rp[0] ? rp[0] : s->w, I, 1,
                          rp[0] != NULL, s->xw, GH, &ep, s->gw, s->gw_bytes);
        }
        s->xt = s->xw + (t - t_lo) * B * GH;
        /* h R^T: all the gates, or a GRU's z and r first, then (r * h) R_h^T; R, read every
         * step, stays in cache unless large (r_mode) */
        dlrt_sgemm_ws(B, split ? 2 * H : GH, H, s->h, H, 0, 0, rp[1], 0, 0, r_mode, s->g, GH, NULL,
                      s->gw, s->gw_bytes);
        s->phase = 0;
        dlrt_rnn_gate_pass(s);
        if (split) {
            dlrt_sgemm_ws(B, H, H, s->tmp, H, 0, 0, rp[2], 0, 0, r_mode, s->g + 2 * H, GH, NULL,
                          s->gw, s->gw_bytes);
            s->phase = 1;
            dlrt_rnn_gate_pass(s);
        }
        if (s->y) memcpy(s->y + t * p->dirs * BH, s->h, (size_t)BH * sizeof(float));
    }
    if (s->yh) memcpy(s->yh, s->h, (size_t)BH * sizeof(float));
    if (s->yc) memcpy(s->yc, s->c, (size_t)BH * sizeof(float));
}

static void dlrt_rnn_directions(void *ctx, int64_t lo, int64_t hi) {
    dlrt_rnn_dir *dirs = ctx;
    for (int64_t d = lo; d < hi; d++) dlrt_rnn_direction(&dirs[d]);
}

void dlrt_rnn_forward(const dlrt_rnn *p, const float *x, const float *w, const float *r,
                      const float *bias, const float *h0, const float *c0, float *y, float *yh,
                      float *yc, const float *const *packed, void *workspace) {
    const int64_t B = p->B, I = p->I, H = p->H, GH = dlrt_rnn_gates(p->kind) * H, BH = B * H;
    dlrt_rnn_dir dirs[2];
    float *at = workspace;
    for (int d = 0; d < p->dirs && d < 2; d++) {
        dlrt_rnn_dir *s = &dirs[d];
        *s = (dlrt_rnn_dir){.p = p,
                            .backward = p->reverse || d == 1,
                            .x = x,
                            .w = w + d * GH * I,
                            .r = r + d * GH * H,
                            .wb = bias ? bias + d * 2 * GH : NULL,
                            .rb = bias ? bias + d * 2 * GH + GH : NULL,
                            .h0 = h0 ? h0 + d * BH : NULL,
                            .c0 = c0 ? c0 + d * BH : NULL,
                            .y = y ? y + d * BH : NULL,
                            .yh = yh ? yh + d * BH : NULL,
                            .yc = yc ? yc + d * BH : NULL};
        for (int k = 0; k < 3; k++) s->packed[k] = packed ? packed[3 * d + k] : NULL;
        s->xw = dlrt_rnn_take(&at, (size_t)(dlrt_rnn_chunk(p) * B * GH));
        s->rp_room[1] = dlrt_rnn_take(&at, dlrt_rnn_packed_floats(p));
        s->rp_room[2] = dlrt_rnn_split_r(p) /* (only this layout has room for it) */
                            ? s->rp_room[1] + dlrt_rnn_round(dlrt_gemm_packed_bytes(1, 2 * H, H) /
                                                             sizeof(float))
                            : NULL;
        s->g = dlrt_rnn_take(&at, (size_t)(B * GH));
        s->h = dlrt_rnn_take(&at, (size_t)BH), s->c = dlrt_rnn_take(&at, (size_t)BH);
        s->tmp = dlrt_rnn_take(&at, (size_t)BH);
        s->bx = dlrt_rnn_take(&at, (size_t)GH), s->rbh = dlrt_rnn_take(&at, (size_t)H);
        s->gw_bytes = dlrt_rnn_gemm_ws(p);
        s->gw = dlrt_rnn_take(&at, dlrt_rnn_round(s->gw_bytes / sizeof(float)));
    }
    /* the two directions of a bidirectional layer are independent: one thread each, whose
     * products then run in it, each direction's R in its own core's cache, and no step waits
     * for another thread */
    dlrt_parallel_for(p->dirs, p->dirs > 1 && dlrt_threads() > 1, dlrt_rnn_directions, dirs);
}
