/* copy.c — dlrt_copy_strided: a block of a tensor moved to another place, element for element,
 * each side with its own strides. It is the kernel of the ops that only move data between
 * buffers (Slice, Split, Concat, Pad): the reference kernels ran them in the executor, one element
 * (Slice) or one run (Split, Concat) at a time on one thread, with every output a fresh
 * allocation. Where the last dim is contiguous on both sides the runs are memcpy'd; elsewhere
 * (a Slice with steps, or a reversed one) elements move one at a time by width. Only bits move,
 * so the result does not depend on the split over threads. A Pad fills its output first
 * (dlrt_fill). */
#include "dlrt-impl.h"

#include <string.h>

typedef struct dlrt_copy_job {
    int rank;
    int64_t dims[DLRT_COPY_MAX_RANK], ss[DLRT_COPY_MAX_RANK], ds[DLRT_COPY_MAX_RANK];
    int64_t esize;
    const char *src;
    char *dst;
} dlrt_copy_job;

/* One run along the last dim: n elements, s and d elements apart on each side. */
static void dlrt_copy_run(const char *src, int64_t s, char *dst, int64_t d, int64_t n, int64_t es) {
    if (s == 1 && d == 1) {
        memcpy(dst, src, (size_t)(n * es));
        return;
    }
    switch (es) {
    case 4:
        for (int64_t i = 0; i < n; i++) memcpy(dst + i * d * 4, src + i * s * 4, 4);
        break;
    case 8:
        for (int64_t i = 0; i < n; i++) memcpy(dst + i * d * 8, src + i * s * 8, 8);
        break;
    case 2:
        for (int64_t i = 0; i < n; i++) memcpy(dst + i * d * 2, src + i * s * 2, 2);
        break;
    case 1:
        for (int64_t i = 0; i < n; i++) dst[i * d] = src[i * s];
        break;
    default:
        for (int64_t i = 0; i < n; i++) memcpy(dst + i * d * es, src + i * s * es, (size_t)es);
    }
}

/* Runs [lo, hi) in row-major order of dims[0 .. rank - 1). */
static void dlrt_copy_runs(void *ctx, int64_t lo, int64_t hi) {
    const dlrt_copy_job *j = ctx;
    const int last = j->rank - 1;
    int64_t idx[DLRT_COPY_MAX_RANK] = {0};
    int64_t rem = lo;
    for (int d = last - 1; d >= 0; d--) idx[d] = rem % j->dims[d], rem /= j->dims[d];
    for (int64_t r = lo; r < hi; r++) {
        int64_t so = 0, dof = 0;
        for (int d = 0; d < last; d++) so += idx[d] * j->ss[d], dof += idx[d] * j->ds[d];
        dlrt_copy_run(j->src + so * j->esize, j->ss[last], j->dst + dof * j->esize, j->ds[last],
                      j->dims[last], j->esize);
        for (int d = last - 1; d >= 0 && ++idx[d] == j->dims[d]; d--) idx[d] = 0;
    }
}

void dlrt_fill(void *dst, int64_t n, int64_t esize, const void *value) {
    if (n <= 0 || esize < 1) return;
    unsigned char *d = dst;
    const unsigned char *v = value;
    int zero = 1;
    for (int64_t i = 0; i < esize; i++) zero &= v[i] == 0;
    if (zero) {
        memset(d, 0, (size_t)(n * esize));
        return;
    }
    /* one element, then the filled part doubled until it covers the rest */
    memcpy(d, v, (size_t)esize);
    for (int64_t have = 1; have < n;) {
        const int64_t more = DLRT_MIN(have, n - have);
        memcpy(d + have * esize, d, (size_t)(more * esize));
        have += more;
    }
}

void dlrt_copy_strided(int rank, const int64_t *dims, int64_t esize, const void *src,
                       const int64_t *sstride, void *dst, const int64_t *dstride) {
    if (rank < 1 || rank > DLRT_COPY_MAX_RANK || esize < 1) return;
    dlrt_copy_job j = {.rank = rank, .esize = esize, .src = src, .dst = dst};
    int64_t runs = 1;
    for (int d = 0; d < rank; d++) {
        if (dims[d] <= 0) return; /* nothing to move */
        j.dims[d] = dims[d], j.ss[d] = sstride[d], j.ds[d] = dstride[d];
        if (d < rank - 1) runs *= dims[d];
    }
    const double bytes = (double)runs * (double)dims[rank - 1] * (double)esize;
    dlrt_parallel_for(runs, runs > 1 && bytes >= DLRT_MOVE_PAR_BYTES, dlrt_copy_runs, &j);
}
