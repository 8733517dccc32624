/* gather.c — dlrt_gather, the kernel of Gather (embedding lookups: a model's token ids picking
 * rows of a table), and dlrt_report, how a kernel says that its data was wrong. The indices come
 * from the model's input, so each is checked as it is read: one outside its axis leaves its row
 * zeroed and is reported, so a bad input never reads past the table and the run fails with the
 * index named. Only bits move, so the result does not depend on the split over threads. */
#include "dlrt-impl.h"

#include <string.h>

void dlrt_report(int64_t *err, int64_t code, int64_t a, int64_t b, int64_t c) {
    int64_t none = DLRT_ERR_NONE;
    if (!err ||
        !__atomic_compare_exchange_n(&err[0], &none, code, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return; /* the first error stands; the caller reads it after the job has joined */
    err[1] = a, err[2] = b, err[3] = c;
}

static inline int64_t dlrt_index_at(const void *idx, int idx_bytes, int64_t j) {
    return idx_bytes == 4 ? ((const int32_t *)idx)[j] : ((const int64_t *)idx)[j];
}

/* Index v counted from the end when negative into *at; false when outside [-extent, extent). */
static inline int dlrt_index_norm(int64_t v, int64_t extent, int64_t *at) {
    *at = v < 0 ? v + extent : v;
    return *at >= 0 && *at < extent;
}

typedef struct dlrt_gather_job {
    const char *x;
    const void *idx;
    int idx_bytes;
    int64_t extent, count, row_bytes;
    char *y;
    int bad; /* some row's index was out of range (set by any thread, read after the join) */
} dlrt_gather_job;

/* Output rows [lo, hi) (row r is o = r / count, j = r % count). */
static void dlrt_gather_rows(void *ctx, int64_t lo, int64_t hi) {
    dlrt_gather_job *g = ctx;
    for (int64_t r = lo; r < hi; r++) {
        const int64_t o = r / g->count, j = r % g->count;
        int64_t v;
        char *dst = g->y + r * g->row_bytes;
        if (!dlrt_index_norm(dlrt_index_at(g->idx, g->idx_bytes, j), g->extent, &v)) {
            memset(dst, 0, (size_t)g->row_bytes);
            __atomic_store_n(&g->bad, 1, __ATOMIC_RELAXED);
            continue;
        }
        memcpy(dst, g->x + (o * g->extent + v) * g->row_bytes, (size_t)g->row_bytes);
    }
}

/* Reports the first index out of range in index order, as the reference kernel does (the
 * threads find theirs in any order). */
static void dlrt_gather_report(const void *idx, int idx_bytes, int64_t count, int64_t extent,
                               int axis, int64_t *err) {
    for (int64_t j = 0; j < count; j++) {
        const int64_t v = dlrt_index_at(idx, idx_bytes, j);
        int64_t at;
        if (!dlrt_index_norm(v, extent, &at)) {
            dlrt_report(err, DLRT_ERR_INDEX, v, extent, axis);
            return;
        }
    }
}

void dlrt_gather(const void *x, const void *idx, int idx_bytes, int64_t outer, int64_t extent,
                 int64_t count, int64_t row_bytes, void *y, int axis, int64_t *err) {
    if (count <= 0 || (idx_bytes != 4 && idx_bytes != 8)) return;
    if (outer <= 0 || row_bytes <= 0) { /* nothing moves, but the indices are still checked */
        dlrt_gather_report(idx, idx_bytes, count, extent, axis, err);
        return;
    }
    dlrt_gather_job g = {.x = x,
                         .idx = idx,
                         .idx_bytes = idx_bytes,
                         .extent = extent,
                         .count = count,
                         .row_bytes = row_bytes,
                         .y = y};
    const int64_t rows = outer * count;
    const double bytes = (double)rows * (double)row_bytes;
    dlrt_parallel_for(rows, rows > 1 && bytes >= DLRT_MOVE_PAR_BYTES, dlrt_gather_rows, &g);
    if (g.bad) dlrt_gather_report(idx, idx_bytes, count, extent, axis, err);
}
