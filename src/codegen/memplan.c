/* memplan.c — static memory planning: one arena, offsets by liveness (greedy by size).
 *
 * Steps:
 *  1. validate; resolve each view (alias_of chains) to its root buffer and widen the root's live
 *     range to cover all its views;
 *  2. in order of writing step, accept in-place candidates that are legal: the candidate's root
 *     must end exactly at this buffer's writing step, have been written strictly earlier, be at
 *     least as large, and still be the last holder of its storage. Accepted buffers join the
 *     candidate's storage group, which then lives until the group's last reader;
 *  3. greedy by size over the storage groups (memplan-place.c).
 * Live ranges are inclusive: two buffers with ranges [a,b] and [b,c] are live together at step b
 * (the step that reads one writes the other), which is exactly what in-place exempts. */
#include "memplan-impl.h"

#include <stdlib.h>

#define DL_MP_MAX_BUFS (1 << 26)

typedef struct mp_key {
    int64_t size;
    int first, last, idx;
} mp_key;

typedef struct mp_work {
    int *root;    /* alias root of each buffer; -1 unvisited, -2 being visited */
    int *first;   /* live range after widening roots over their views */
    int *last;
    int *group;   /* storage group of each root buffer, -1 for zero-size ones */
    dl_mp_group *groups;
    mp_key *order;
} mp_work;

static void mp_work_free(mp_work *w) {
    dl_free(w->root);
    dl_free(w->first);
    dl_free(w->last);
    dl_free(w->group);
    dl_free(w->groups);
    dl_free(w->order);
}

static dl_status mp_work_alloc(dl_ctx *ctx, mp_work *w, int n) {
    size_t m = (size_t)n;
    w->root = dl_malloc(m * sizeof *w->root);
    w->first = dl_malloc(m * sizeof *w->first);
    w->last = dl_malloc(m * sizeof *w->last);
    w->group = dl_malloc(m * sizeof *w->group);
    w->groups = dl_malloc(m * sizeof *w->groups);
    w->order = dl_malloc(2 * m * sizeof *w->order); /* also the naive simulation's events */
    if (!w->root || !w->first || !w->last || !w->group || !w->groups || !w->order)
        return dl_fail(ctx, DL_ERR_NOMEM, "memory plan: out of memory for %d buffers", n);
    return DL_OK;
}

static dl_status mp_validate(dl_ctx *ctx, int n, const dl_mp_buf *bufs, int64_t align,
                             const int64_t *offsets) {
    if (n < 0) return dl_fail(ctx, DL_ERR_INVALID, "memory plan: negative buffer count %d", n);
    if (n > DL_MP_MAX_BUFS) /* keeps every index and count of the planner within int */
        return dl_fail(ctx, DL_ERR_LIMIT, "memory plan: %d buffers (at most %d)", n,
                       DL_MP_MAX_BUFS);
    if (align <= 0 || (align & (align - 1)) != 0)
        return dl_fail(ctx, DL_ERR_INVALID, "memory plan: alignment %lld is not a power of two",
                       (long long)align);
    if (n > 0 && (!bufs || !offsets))
        return dl_fail(ctx, DL_ERR_INVALID, "memory plan: NULL buffer or offset array");
    for (int i = 0; i < n; i++) {
        const dl_mp_buf *b = &bufs[i];
        if (b->size < 0)
            return dl_fail(ctx, DL_ERR_INVALID, "memory plan: buffer %d has negative size %lld", i,
                           (long long)b->size);
        if (b->first < 0 || b->first > b->last)
            return dl_fail(ctx, DL_ERR_INVALID,
                           "memory plan: buffer %d has live range [%d,%d] (needs 0 <= first <= "
                           "last)",
                           i, b->first, b->last);
        if (b->alias_of < -1 || b->alias_of >= n || b->alias_of == i)
            return dl_fail(ctx, DL_ERR_INVALID, "memory plan: buffer %d: bad alias_of %d (n=%d)",
                           i, b->alias_of, n);
        if (b->inplace_of < -1 || b->inplace_of >= n || b->inplace_of == i)
            return dl_fail(ctx, DL_ERR_INVALID,
                           "memory plan: buffer %d: bad inplace_of %d (n=%d)", i, b->inplace_of, n);
    }
    return DL_OK;
}

/* Roots of alias chains (with cycle detection) and live ranges widened over views. */
static dl_status mp_resolve_aliases(dl_ctx *ctx, int n, const dl_mp_buf *bufs, mp_work *w) {
    for (int i = 0; i < n; i++) w->root[i] = -1;
    for (int i = 0; i < n; i++) {
        if (w->root[i] >= 0) continue;
        int j = i, r;
        for (;;) {
            if (w->root[j] >= 0) {
                r = w->root[j];
                break;
            }
            if (w->root[j] == -2)
                return dl_fail(ctx, DL_ERR_INVALID,
                               "memory plan: buffer %d: alias_of chain forms a cycle", i);
            w->root[j] = -2;
            if (bufs[j].alias_of < 0) {
                r = j;
                break;
            }
            j = bufs[j].alias_of;
        }
        for (j = i; w->root[j] < 0; j = bufs[j].alias_of) {
            w->root[j] = r;
            if (bufs[j].alias_of < 0) break;
        }
    }
    for (int i = 0; i < n; i++) {
        w->first[i] = bufs[i].first;
        w->last[i] = bufs[i].last;
    }
    for (int i = 0; i < n; i++) {
        int r = w->root[i];
        if (r == i) continue;
        if (bufs[i].size > bufs[r].size)
            return dl_fail(ctx, DL_ERR_INVALID,
                           "memory plan: view %d (%lld bytes) is larger than its base %d (%lld "
                           "bytes)",
                           i, (long long)bufs[i].size, r, (long long)bufs[r].size);
        if (bufs[i].first < w->first[r]) w->first[r] = bufs[i].first;
        if (bufs[i].last > w->last[r]) w->last[r] = bufs[i].last;
    }
    return DL_OK;
}

static int mp_cmp_first(const void *a, const void *b) {
    const mp_key *x = a, *y = b;
    if (x->first != y->first) return x->first < y->first ? -1 : 1;
    return (x->idx > y->idx) - (x->idx < y->idx);
}

/* Forms storage groups: every non-empty root starts its own group unless it legally takes over
 * its in-place candidate's storage. Returns the number of groups. */
static int mp_group_storage(int n, const dl_mp_buf *bufs, mp_work *w, int *n_inplace) {
    int nk = 0;
    for (int i = 0; i < n; i++) {
        w->group[i] = -1;
        if (w->root[i] == i && bufs[i].size > 0)
            w->order[nk++] = (mp_key){bufs[i].size, w->first[i], w->last[i], i};
    }
    qsort(w->order, (size_t)nk, sizeof *w->order, mp_cmp_first);
    int ng = 0;
    *n_inplace = 0;
    for (int k = 0; k < nk; k++) {
        int i = w->order[k].idx;
        int c = bufs[i].inplace_of;
        if (c >= 0) {
            int rc = w->root[c];
            int g = rc != i ? w->group[rc] : -1;
            /* g >= 0 implies rc was processed before i, i.e. written no later than i */
            if (g >= 0 && w->groups[g].tail == rc && w->last[rc] == w->first[i] &&
                w->first[rc] < w->first[i] && bufs[rc].size >= bufs[i].size) {
                w->group[i] = g;
                w->groups[g].tail = i;
                if (w->last[i] > w->groups[g].last) w->groups[g].last = w->last[i];
                (*n_inplace)++;
                continue;
            }
        }
        w->groups[ng] = (dl_mp_group){bufs[i].size, w->first[i], w->last[i], i, 0};
        w->group[i] = ng++;
    }
    return ng;
}

static int64_t mp_sat_add(int64_t a, int64_t b) {
    int64_t r;
    return __builtin_add_overflow(a, b, &r) ? INT64_MAX : r;
}

/* Events of the naive allocator: (step, kind) with allocations (kind 0) of a step before its
 * frees (kind 1), so a step's outputs and inputs count as live together. */
static int mp_cmp_event(const void *a, const void *b) {
    const mp_key *x = a, *y = b;
    if (x->first != y->first) return x->first < y->first ? -1 : 1;
    return (x->last > y->last) - (x->last < y->last);
}

/* Peak of malloc-at-write / free-after-last-read over root buffers (views allocate nothing and
 * keep their base alive). Sums saturate at INT64_MAX. */
static int64_t mp_naive_peak(int n, const dl_mp_buf *bufs, mp_work *w) {
    int ne = 0;
    for (int i = 0; i < n; i++) {
        if (w->root[i] != i || bufs[i].size == 0) continue;
        w->order[ne++] = (mp_key){bufs[i].size, w->first[i], 0, i};
        w->order[ne++] = (mp_key){-bufs[i].size, w->last[i], 1, i};
    }
    qsort(w->order, (size_t)ne, sizeof *w->order, mp_cmp_event);
    int64_t live = 0, peak = 0;
    bool saturated = false;
    for (int e = 0; e < ne && !saturated; e++) {
        if (w->order[e].size > 0) {
            live = mp_sat_add(live, w->order[e].size);
            saturated = live == INT64_MAX;
            if (live > peak) peak = live;
        } else {
            live += w->order[e].size;
        }
    }
    return saturated ? INT64_MAX : peak;
}

dl_status dl_memplan(dl_ctx *ctx, int n, const dl_mp_buf *bufs, int64_t align, int64_t *offsets,
                     dl_mp_stats *stats) {
    DL_TRY(mp_validate(ctx, n, bufs, align, offsets));
    if (stats) memset(stats, 0, sizeof *stats);
    if (n == 0) return DL_OK;
    mp_work w = {0};
    dl_status s = mp_work_alloc(ctx, &w, n);
    if (s == DL_OK) s = mp_resolve_aliases(ctx, n, bufs, &w);
    int n_inplace = 0, ng = 0;
    int64_t arena = 0;
    if (s == DL_OK) ng = mp_group_storage(n, bufs, &w, &n_inplace);
    if (s == DL_OK) s = dl_mp_place(ctx, ng, w.groups, align, &arena);
    if (s == DL_OK) {
        for (int i = 0; i < n; i++) {
            int g = w.group[w.root[i]];
            offsets[i] = g >= 0 ? w.groups[g].off : 0;
        }
        if (stats) {
            stats->arena = arena;
            for (int i = 0; i < n; i++)
                if (w.root[i] == i) stats->sum = mp_sat_add(stats->sum, bufs[i].size);
            stats->naive_peak = mp_naive_peak(n, bufs, &w);
            stats->n_inplace = n_inplace;
        }
    }
    mp_work_free(&w);
    return s;
}
