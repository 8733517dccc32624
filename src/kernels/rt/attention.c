/* attention.c — dlrt_attention: y = softmax(scale * q k^T + mask) v for every head (dlrt.h),
 * in one pass over the queries, so the [tq, tk] score matrices of the unfused graph never
 * reach memory.
 *
 * Work is cut into (head, block of query rows) items run in parallel. For each item the scores
 * of the block live in one per-thread buffer: q_blk k^T through dlrt_sgemm with the scale as
 * alpha and the mask as the epilogue's bias, the causal cut, the softmax numerators in place,
 * then p v through dlrt_sgemm again and each row of y divided by its sum. dlrt_sgemm takes row-
 * or column-major operands, which covers the transposed layouts of exported graphs; an operand
 * with neither unit stride goes through plain loops one row at a time. Under causal masking a
 * block computes only the key columns its last row may see.
 *
 * The softmax matches the unfused one (dlrt_softmax) in its special cases: a NaN score makes its
 * row NaN, a row of -inf gives NaN (exp(-inf - -inf)), and a row whose maximum is +inf is left to
 * dlrt_softmax (the +inf entries share the mass). Both take the exponential of dlrt_exp_neg, a
 * branch-free polynomial that vectorizes (about 1 ulp).
 *
 * Buffers: up to DLRT_ATTN_STACK floats on each thread's stack, which holds at least one row of
 * scores when tk <= DLRT_ATTN_MAX_TK. Longer rows use the caller's workspace, one row per
 * thread: the kernel then runs at most min(dlrt_threads(), DLRT_ATTN_MAX_THREADS) threads,
 * and dlrt_attention_workspace(a, threads) sizes for `threads` of them, or for
 * DLRT_ATTN_MAX_THREADS when threads <= 0 (a caller that cannot bound the team). */
#include "dlrt-impl.h"

#ifndef DLRT_ATTN_MAX_TK
#define DLRT_ATTN_MAX_TK 16384
#endif
#define DLRT_ATTN_STACK       DLRT_ATTN_MAX_TK /* floats of scores on a thread's stack */
#define DLRT_ATTN_MAX_ROWS    128              /* query rows per block */
#define DLRT_ATTN_MIN_ROWS    16               /* ... at least, when halving them for parallelism */
#define DLRT_ATTN_MIN_ITEMS   16               /* work items that halving aims at */
#define DLRT_ATTN_MAX_THREADS 256

/* How a [rows, cols] operand with strides (st, sc) is stored for dlrt_sgemm: row-major with
 * leading dimension *ld (*col_major = 0) or column-major (*col_major = 1). 0 when neither. */
static int dlrt_attn_layout(int64_t st, int64_t sc, int64_t rows, int64_t cols, int64_t *ld,
                            int *col_major) {
    if (sc == 1 || cols == 1) {
        *ld = st;
        *col_major = 0;
    } else if (st == 1 || rows == 1) {
        *ld = sc;
        *col_major = 1;
    } else {
        return 0;
    }
    return 1;
}

typedef struct dlrt_attn_plan {
    int fast; /* every operand has a dlrt_sgemm layout */
    int64_t q_ld, k_ld, v_ld, y_ld;
    int q_cm, k_cm, v_cm, y_cm;
} dlrt_attn_plan;

/* Key columns [0, n) row i may see: all of them unless causal. */
static int64_t dlrt_attn_keys(const dlrt_attn *a, int64_t i) {
    if (!a->causal) return a->tk;
    int64_t n = i + 1 + (a->tk - a->tq);
    return n < 0 ? 0 : n > a->tk ? a->tk : n;
}

/* y row i of a head whose scores are all masked: NaN (as softmax over -inf gives), or 0 when
 * there are no keys at all (an empty softmax feeding a matmul over nothing). */
static void dlrt_attn_fill_row(const dlrt_attn *a, float *yh, int64_t i) {
    const float v = a->tk > 0 ? NAN : 0.0f;
    for (int64_t c = 0; c < a->dv; c++) yh[i * a->y_st + c * a->y_sc] = v;
}

/* Replaces scores s[0..n) by their softmax numerators exp(s - max) and returns 1 / their sum.
 * A row whose maximum is +inf is normalized by dlrt_softmax itself (returns 1). */
static float dlrt_attn_softmax_row(float *s, int64_t n) {
    const float m = dlrt_row_max(n, s);
    if (m == INFINITY) {
        dlrt_softmax(1, n, 1, s, s, 0);
        return 1.0f;
    }
    return 1.0f / dlrt_exp_sum(n, s, m, s);
}

/* Rows [i0, i0 + mb) of one head through dlrt_sgemm; s holds mb * tk floats. */
static void dlrt_attn_block_gemm(const dlrt_attn *a, const dlrt_attn_plan *pl, const float *qh,
                                 const float *kh, const float *vh, const float *mh, float *yh,
                                 int64_t i0, int64_t mb, float *s) {
    const int64_t n = dlrt_attn_keys(a, i0 + mb - 1);
    if (n == 0) {
        for (int64_t r = 0; r < mb; r++) dlrt_attn_fill_row(a, yh, i0 + r);
        return;
    }
    dlrt_epilogue ep = {.alpha = a->scale, .beta = 1.0f};
    if (mh) {
        ep.bias = mh + i0 * a->m_st;
        ep.bias_rs = a->m_st;
        ep.bias_cs = a->m_sc;
    }
    const float *qb = qh + i0 * a->q_st;
    /* k^T is [d, n]: column-major k gives it row-major */
    dlrt_sgemm(mb, n, a->d, qb, pl->q_ld, pl->q_cm, kh, pl->k_ld, !pl->k_cm, s, n, &ep);
    float inv[DLRT_ATTN_MAX_ROWS];
    for (int64_t r = 0; r < mb; r++) {
        float *sr = s + r * n;
        if (a->causal)
            for (int64_t j = dlrt_attn_keys(a, i0 + r); j < n; j++) sr[j] = -INFINITY;
        inv[r] = dlrt_attn_softmax_row(sr, n);
    }
    float *yb = yh + i0 * a->y_st;
    if (!pl->y_cm)
        dlrt_sgemm(mb, a->dv, n, s, n, 0, vh, pl->v_ld, pl->v_cm, yb, pl->y_ld, NULL);
    else /* y^T = v^T p^T */
        dlrt_sgemm(a->dv, mb, n, vh, pl->v_ld, !pl->v_cm, s, n, 1, yb, pl->y_ld, NULL);
    for (int64_t r = 0; r < mb; r++) {
        float *yr = yb + r * a->y_st;
        const float f = inv[r];
        if (a->y_sc == 1)
            for (int64_t c = 0; c < a->dv; c++) yr[c] *= f;
        else
            for (int64_t c = 0; c < a->dv; c++) yr[c * a->y_sc] *= f;
    }
}

/* The same for operands of any strides, one row at a time; s holds tk floats. */
static void dlrt_attn_block_loops(const dlrt_attn *a, const float *qh, const float *kh,
                                  const float *vh, const float *mh, float *yh, int64_t i0,
                                  int64_t mb, float *s) {
    for (int64_t i = i0; i < i0 + mb; i++) {
        const int64_t n = dlrt_attn_keys(a, i);
        if (n == 0) {
            dlrt_attn_fill_row(a, yh, i);
            continue;
        }
        const float *qr = qh + i * a->q_st;
        for (int64_t j = 0; j < n; j++) {
            const float *kr = kh + j * a->k_st;
            float acc = 0.0f;
            for (int64_t c = 0; c < a->d; c++) acc += qr[c * a->q_sc] * kr[c * a->k_sc];
            s[j] = a->scale * acc + (mh ? mh[i * a->m_st + j * a->m_sc] : 0.0f);
        }
        const float inv = dlrt_attn_softmax_row(s, n);
        for (int64_t c = 0; c < a->dv; c++) {
            const float *vc = vh + c * a->v_sc;
            float acc = 0.0f;
            for (int64_t j = 0; j < n; j++) acc += s[j] * vc[j * a->v_st];
            yh[i * a->y_st + c * a->y_sc] = acc * inv;
        }
    }
}

/* Work item t: head t / nblk, query rows of block t % nblk. */
static void dlrt_attn_item(const dlrt_attn *a, const dlrt_attn_plan *pl, const float *q,
                           const float *k, const float *v, const float *mask, float *y, int64_t t,
                           int64_t nblk, int64_t rows, float *s) {
    const int64_t h = t / nblk, b = h / a->heads, hh = h % a->heads;
    const int64_t i0 = (t % nblk) * rows, mb = DLRT_MIN(rows, a->tq - i0);
    const float *qh = q + b * a->q_sb + hh * a->q_sh;
    const float *kh = k + b * a->k_sb + hh * a->k_sh;
    const float *vh = v + b * a->v_sb + hh * a->v_sh;
    const float *mh = mask ? mask + b * a->m_sb + hh * a->m_sh : NULL;
    float *yh = y + b * a->y_sb + hh * a->y_sh;
    if (pl->fast)
        dlrt_attn_block_gemm(a, pl, qh, kh, vh, mh, yh, i0, mb, s);
    else
        dlrt_attn_block_loops(a, qh, kh, vh, mh, yh, i0, mb, s);
}

size_t dlrt_attention_workspace(const dlrt_attn *a, int threads) {
    if (a->tk <= DLRT_ATTN_MAX_TK) return 0;
    const int64_t slots =
        threads <= 0 || threads > DLRT_ATTN_MAX_THREADS ? DLRT_ATTN_MAX_THREADS : threads;
    if ((uint64_t)a->tk > SIZE_MAX / sizeof(float) / (uint64_t)slots) return SIZE_MAX;
    return (size_t)slots * (size_t)a->tk * sizeof(float);
}

typedef struct dlrt_attn_job {
    const dlrt_attn *a;
    const dlrt_attn_plan *pl;
    const float *q, *k, *v, *mask;
    float *y;
    float *workspace; /* a->tk floats per thread, when the scores do not fit the stack */
    int64_t nblk, rows;
} dlrt_attn_job;

/* Items [lo, hi): a block of query rows of one (image, head). */
static void dlrt_attn_items(void *ctx, int64_t lo, int64_t hi, int slot) {
    const dlrt_attn_job *j = ctx;
    float stack[DLRT_ATTN_STACK];
    float *s = j->workspace ? j->workspace + (size_t)slot * (size_t)j->a->tk : stack;
    for (int64_t t = lo; t < hi; t++)
        dlrt_attn_item(j->a, j->pl, j->q, j->k, j->v, j->mask, j->y, t, j->nblk, j->rows, s);
}

void dlrt_attention(const dlrt_attn *a, const float *q, const float *k, const float *v,
                    const float *mask, float *y, void *workspace) {
    if (a->batch <= 0 || a->heads <= 0 || a->tq <= 0 || a->dv <= 0) return;
    dlrt_attn_plan pl;
    pl.fast = dlrt_attn_layout(a->q_st, a->q_sc, a->tq, a->d, &pl.q_ld, &pl.q_cm) &&
              dlrt_attn_layout(a->k_st, a->k_sc, a->tk, a->d, &pl.k_ld, &pl.k_cm) &&
              dlrt_attn_layout(a->v_st, a->v_sc, a->tk, a->dv, &pl.v_ld, &pl.v_cm) &&
              dlrt_attn_layout(a->y_st, a->y_sc, a->tq, a->dv, &pl.y_ld, &pl.y_cm);
    const int64_t bh = a->batch * a->heads;
    const int on_stack = a->tk <= DLRT_ATTN_MAX_TK;
    int threads = dlrt_threads();
    if (!on_stack && threads > DLRT_ATTN_MAX_THREADS) threads = DLRT_ATTN_MAX_THREADS;
    /* Rows per block: as many as the buffer holds (one in the loop path), fewer when that
     * leaves few items to share among threads. The blocks depend on the shape only, never on
     * the thread count, so the results do not either. */
    int64_t rows = 1;
    if (pl.fast && on_stack) {
        rows = DLRT_MIN((int64_t)DLRT_ATTN_MAX_ROWS, DLRT_ATTN_STACK / DLRT_MAX(a->tk, (int64_t)1));
        rows = DLRT_MIN(rows, a->tq);
        while (rows > DLRT_ATTN_MIN_ROWS && bh * ((a->tq + rows - 1) / rows) < DLRT_ATTN_MIN_ITEMS)
            rows = (rows + 1) / 2;
    }
    const int64_t nblk = (a->tq + rows - 1) / rows, items = bh * nblk;
    const double work = (double)bh * (double)a->tq * (double)a->tk * (double)(a->d + a->dv + 16);
    const int par = items > 1 && work >= DLRT_PAR_MIN;
    dlrt_attn_job job = {.a = a,
                         .pl = &pl,
                         .q = q,
                         .k = k,
                         .v = v,
                         .mask = mask,
                         .y = y,
                         .workspace = on_stack ? NULL : (float *)workspace,
                         .nblk = nblk,
                         .rows = rows};
    /* one item a piece, claimed as threads come free: items differ in work (causal masks) */
    dlrt_parallel_slots(items, par ? items : 1, 1, threads, dlrt_attn_items, &job);
}
