/* memplan-place.c — greedy-by-size placement of storage groups in one arena (the strategy of
 * TFLite's and XLA's planners): largest first, each at the lowest aligned offset clear of every
 * placed group whose live range intersects its own.
 *
 * Finding those groups fast is the whole job here. Two structures, chosen per query:
 *  - a time index: steps (compressed to their distinct values) cut into buckets that list the
 *    placed groups living in them. A short-lived group meets only its neighbours in time; they
 *    are sorted by offset and scanned for the first gap;
 *  - the placed groups sorted by offset, in blocks of MP_BLOCK with summaries (live-range bounds,
 *    the largest inner gap) so a scan skips whole blocks that cannot hold the group. Used when
 *    the time index would list a large share of all placed groups (long-lived or all-live sets).
 * Both give the same offset; the worst case is O(n^2 / MP_BLOCK) plus O(n^2) for
 * pathological mixes. */
#include "memplan-impl.h"

#include <limits.h>
#include <stdlib.h>

#define MP_BLOCK 32

typedef struct mp_placed {
    int64_t off, end;
    int first, last;
} mp_placed;

typedef struct mp_order {
    int64_t size;
    int first, last, idx;
} mp_order;

/* Bounds of one block of the offset-sorted list. When every group of the block meets a query,
 * `gap` bounds the room between them from above, so the block can be stepped over whole. */
typedef struct mp_block {
    int64_t off0; /* offset of the block's lowest group */
    int64_t gap;  /* largest space between a group and the aligned top of those below it */
    int64_t aend; /* aligned highest end (INT64_MAX when aligning would overflow) */
    int min_first, max_first, min_last, max_last;
} mp_block;

typedef struct mp_state {
    int ng;
    int64_t align;
    dl_mp_group *groups;
    mp_order *order;
    mp_placed *placed; /* [0, nm) sorted by offset, then groups placed since the last merge */
    int np, nm;
    mp_placed *hits;   /* a query's groups from the time index; also merge scratch */
    mp_block *blocks;
    int width;         /* compressed steps per bucket */
    int *cfirst, *clast;
    int *start, *fill; /* bucket b lists entries[start[b] .. start[b] + fill[b]) */
    int *entries;
    int *stamp;        /* last query that met each group, so it is listed once */
} mp_state;

static void mp_state_free(mp_state *s) {
    dl_free(s->order);
    dl_free(s->placed);
    dl_free(s->hits);
    dl_free(s->blocks);
    dl_free(s->cfirst);
    dl_free(s->clast);
    dl_free(s->start);
    dl_free(s->fill);
    dl_free(s->entries);
    dl_free(s->stamp);
}

/* Aligned up, or INT64_MAX (nothing fits above it) when that would overflow. */
static int64_t mp_align_sat(int64_t x, int64_t align) {
    return x > INT64_MAX - (align - 1) ? INT64_MAX : (x + (align - 1)) & ~(align - 1);
}

/* The first-fit step for one met group q: true when `size` bytes fit at *off below q;
 * otherwise *off moves past q. *off stays aligned (or INT64_MAX). */
static inline bool mp_fits_below(const mp_placed *q, int64_t size, int64_t align, int64_t *off) {
    if (q->off >= *off && q->off - *off >= size) return true;
    if (q->end > *off) *off = mp_align_sat(q->end, align);
    return false;
}

static inline bool mp_meets(const mp_placed *q, int first, int last) {
    return q->last >= first && q->first <= last;
}

static bool mp_fit_done(int64_t off, int64_t size, int64_t *out) {
    if (size > INT64_MAX - off) return false;
    *out = off;
    return true;
}

/* First fit among p[0..n), sorted by offset. */
static bool mp_fit_list(const mp_placed *p, int n, int first, int last, int64_t size,
                        int64_t align, int64_t *out) {
    int64_t off = 0;
    for (int i = 0; i < n; i++)
        if (mp_meets(&p[i], first, last) && mp_fits_below(&p[i], size, align, &off)) break;
    return mp_fit_done(off, size, out);
}

/* First fit over the sorted placed list, a block at a time. */
static bool mp_fit_blocks(const mp_state *s, int first, int last, int64_t size, int64_t *out) {
    int64_t off = 0;
    for (int b = 0; b * MP_BLOCK < s->nm; b++) {
        const mp_block *k = &s->blocks[b];
        if (k->max_last < first || k->min_first > last) continue;
        bool all_met = k->max_first <= last && k->min_last >= first;
        if (all_met && k->gap < size && !(k->off0 >= off && k->off0 - off >= size)) {
            if (k->aend > off) off = k->aend;
            continue;
        }
        int hi = b * MP_BLOCK + MP_BLOCK < s->nm ? b * MP_BLOCK + MP_BLOCK : s->nm;
        for (int i = b * MP_BLOCK; i < hi; i++)
            if (mp_meets(&s->placed[i], first, last) &&
                mp_fits_below(&s->placed[i], size, s->align, &off))
                return mp_fit_done(off, size, out);
    }
    return mp_fit_done(off, size, out);
}

static void mp_block_update(mp_state *s, int b) {
    int lo = b * MP_BLOCK, hi = lo + MP_BLOCK < s->nm ? lo + MP_BLOCK : s->nm;
    mp_block k = {s->placed[lo].off, INT64_MIN, 0, INT_MAX, INT_MIN, INT_MAX, INT_MIN};
    int64_t top = 0;
    for (int i = lo; i < hi; i++) {
        const mp_placed *q = &s->placed[i];
        if (i > lo && q->off - mp_align_sat(top, s->align) > k.gap)
            k.gap = q->off - mp_align_sat(top, s->align);
        if (q->end > top) top = q->end;
        if (q->first < k.min_first) k.min_first = q->first;
        if (q->first > k.max_first) k.max_first = q->first;
        if (q->last < k.min_last) k.min_last = q->last;
        if (q->last > k.max_last) k.max_last = q->last;
    }
    k.aend = mp_align_sat(top, s->align);
    s->blocks[b] = k;
}

static int mp_cmp_off(const void *a, const void *b) {
    const mp_placed *x = a, *y = b;
    return (x->off > y->off) - (x->off < y->off);
}

/* Most queries meet a handful of groups: insertion sort beats qsort's indirect calls there. */
static void mp_sort_by_off(mp_placed *p, int n) {
    if (n > 48) {
        qsort(p, (size_t)n, sizeof *p, mp_cmp_off);
        return;
    }
    for (int i = 1; i < n; i++) {
        mp_placed v = p[i];
        int j = i;
        for (; j > 0 && p[j - 1].off > v.off; j--) p[j] = p[j - 1];
        p[j] = v;
    }
}

/* Merges the groups placed since the last merge into the sorted list, from the back so that
 * only what lies above the lowest newcomer moves, and refreshes the blocks that changed. */
static void mp_merge_placed(mp_state *s) {
    int t = s->np - s->nm;
    if (t == 0) return;
    memcpy(s->hits, s->placed + s->nm, (size_t)t * sizeof *s->hits);
    mp_sort_by_off(s->hits, t);
    int i = s->nm - 1, j = t - 1, k = s->np - 1;
    while (j >= 0) {
        if (i >= 0 && s->placed[i].off > s->hits[j].off) s->placed[k--] = s->placed[i--];
        else s->placed[k--] = s->hits[j--];
    }
    s->nm = s->np;
    for (int b = (k + 1) / MP_BLOCK; b * MP_BLOCK < s->nm; b++) mp_block_update(s, b);
}

static int mp_cmp_int(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

static int mp_lower_bound(const int *v, int n, int key) {
    int lo = 0, hi = n;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (v[mid] < key) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

static int64_t mp_index_entries(const mp_state *s) {
    int64_t e = 0;
    for (int g = 0; g < s->ng; g++) e += s->clast[g] / s->width - s->cfirst[g] / s->width + 1;
    return e;
}

static dl_status mp_index_build(dl_ctx *ctx, mp_state *s) {
    int ng = s->ng;
    int *vals = dl_malloc(2 * (size_t)ng * sizeof *vals);
    if (!vals) return dl_fail(ctx, DL_ERR_NOMEM, "memory plan: out of memory for the time index");
    for (int g = 0; g < ng; g++) {
        vals[2 * g] = s->groups[g].first;
        vals[2 * g + 1] = s->groups[g].last;
        s->stamp[g] = -1;
    }
    qsort(vals, 2 * (size_t)ng, sizeof *vals, mp_cmp_int);
    int nv = 0;
    for (int i = 0; i < 2 * ng; i++)
        if (nv == 0 || vals[nv - 1] != vals[i]) vals[nv++] = vals[i];
    for (int g = 0; g < ng; g++) {
        s->cfirst[g] = mp_lower_bound(vals, nv, s->groups[g].first);
        s->clast[g] = mp_lower_bound(vals, nv, s->groups[g].last);
    }
    dl_free(vals);
    /* about 4 groups per bucket; wider buckets while long-lived groups would make the lists
     * much longer than the groups themselves */
    int nb = ng / 4 > 1 ? ng / 4 : 1;
    s->width = nv > nb ? (nv + nb - 1) / nb : 1;
    while (s->width < nv && mp_index_entries(s) > 16 * (int64_t)ng)
        s->width = s->width > nv / 2 ? nv : 2 * s->width;
    nb = (nv + s->width - 1) / s->width;
    s->start = dl_calloc((size_t)nb + 1, sizeof *s->start);
    s->fill = dl_calloc((size_t)nb, sizeof *s->fill);
    s->entries = dl_malloc((size_t)mp_index_entries(s) * sizeof *s->entries);
    if (!s->start || !s->fill || !s->entries)
        return dl_fail(ctx, DL_ERR_NOMEM, "memory plan: out of memory for the time index");
    for (int g = 0; g < ng; g++)
        for (int b = s->cfirst[g] / s->width; b <= s->clast[g] / s->width; b++) s->start[b + 1]++;
    for (int b = 0; b < nb; b++) s->start[b + 1] += s->start[b];
    return DL_OK;
}

/* Larger first; among equal sizes the longer-lived first (they constrain more); then stable. */
static int mp_cmp_size(const void *a, const void *b) {
    const mp_order *x = a, *y = b;
    if (x->size != y->size) return x->size > y->size ? -1 : 1;
    int64_t lx = (int64_t)x->last - x->first, ly = (int64_t)y->last - y->first;
    if (lx != ly) return lx > ly ? -1 : 1;
    if (x->first != y->first) return x->first < y->first ? -1 : 1;
    return (x->idx > y->idx) - (x->idx < y->idx);
}

/* Places group g (the k-th in size order) and records it in both structures. */
static bool mp_place_one(mp_state *s, int k, int g) {
    dl_mp_group *gr = &s->groups[g];
    int b0 = s->cfirst[g] / s->width, b1 = s->clast[g] / s->width;
    int64_t met = 0, off;
    for (int b = b0; b <= b1; b++) met += s->fill[b];
    bool ok;
    if (met * 8 > s->np) {
        mp_merge_placed(s);
        ok = mp_fit_blocks(s, gr->first, gr->last, gr->size, &off);
    } else {
        int nh = 0;
        for (int b = b0; b <= b1; b++) {
            for (int e = s->start[b]; e < s->start[b] + s->fill[b]; e++) {
                int h = s->entries[e];
                if (s->stamp[h] == k) continue;
                s->stamp[h] = k;
                const dl_mp_group *q = &s->groups[h];
                if (q->last >= gr->first && q->first <= gr->last)
                    s->hits[nh++] = (mp_placed){q->off, q->off + q->size, q->first, q->last};
            }
        }
        mp_sort_by_off(s->hits, nh);
        ok = mp_fit_list(s->hits, nh, gr->first, gr->last, gr->size, s->align, &off);
    }
    if (!ok) return false;
    gr->off = off;
    s->placed[s->np++] = (mp_placed){off, off + gr->size, gr->first, gr->last};
    for (int b = b0; b <= b1; b++) s->entries[s->start[b] + s->fill[b]++] = g;
    return true;
}

dl_status dl_mp_place(dl_ctx *ctx, int ng, dl_mp_group *groups, int64_t align, int64_t *arena) {
    *arena = 0;
    if (ng == 0) return DL_OK;
    size_t m = (size_t)ng;
    mp_state s = {.ng = ng, .align = align, .groups = groups};
    s.order = dl_malloc(m * sizeof *s.order);
    s.placed = dl_malloc(m * sizeof *s.placed);
    s.hits = dl_malloc(m * sizeof *s.hits);
    s.blocks = dl_malloc((m / MP_BLOCK + 1) * sizeof *s.blocks);
    s.cfirst = dl_malloc(m * sizeof *s.cfirst);
    s.clast = dl_malloc(m * sizeof *s.clast);
    s.stamp = dl_malloc(m * sizeof *s.stamp);
    dl_status st = DL_OK;
    if (!s.order || !s.placed || !s.hits || !s.blocks || !s.cfirst || !s.clast || !s.stamp)
        st = dl_fail(ctx, DL_ERR_NOMEM, "memory plan: out of memory placing %d buffers", ng);
    if (st == DL_OK) st = mp_index_build(ctx, &s);
    if (st == DL_OK) {
        for (int g = 0; g < ng; g++)
            s.order[g] = (mp_order){groups[g].size, groups[g].first, groups[g].last, g};
        qsort(s.order, m, sizeof *s.order, mp_cmp_size);
    }
    for (int k = 0; k < ng && st == DL_OK; k++) {
        if (!mp_place_one(&s, k, s.order[k].idx))
            st = dl_fail(ctx, DL_ERR_LIMIT, "memory plan: arena size overflows 64 bits");
        else if (groups[s.order[k].idx].off + groups[s.order[k].idx].size > *arena)
            *arena = groups[s.order[k].idx].off + groups[s.order[k].idx].size;
    }
    mp_state_free(&s);
    return st;
}
