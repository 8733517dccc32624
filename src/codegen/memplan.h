/* memplan.h — static memory planning: given each intermediate buffer's size and live range (in
 * step indices), assign byte offsets in one arena so that buffers live at the same time never
 * overlap. Inputs, outputs and weights are pinned elsewhere and never enter the plan. */
#ifndef DL_MEMPLAN_H
#define DL_MEMPLAN_H

#include "../core/core-impl.h"

typedef struct dl_mp_buf {
    int64_t size;   /* bytes, >= 0 */
    int first;      /* step that writes it */
    int last;       /* last step that reads it (>= first) */
    /* In-place candidate: index of another buffer whose storage this one may take over because
     * that buffer's last reader is this buffer's writer (step == first) and the kernel allows it
     * (elementwise, views). -1 for none. The planner may or may not honour it. */
    int inplace_of;
    /* A view shares storage with another buffer (Reshape, Squeeze...): index of that buffer, or
     * -1. A view gets the same offset; the planner extends the base's live range to cover it. */
    int alias_of;
} dl_mp_buf;

typedef struct dl_mp_stats {
    int64_t arena;      /* bytes of the planned arena */
    int64_t sum;        /* sum of all (non-alias) buffer sizes: no reuse at all */
    int64_t naive_peak; /* peak of a malloc-at-write, free-after-last-read allocator */
    int n_inplace;      /* in-place candidates honoured */
} dl_mp_stats;

/* offsets[i] receives buffer i's offset, aligned to `align` (a power of two). */
dl_status dl_memplan(dl_ctx *ctx, int n, const dl_mp_buf *bufs, int64_t align, int64_t *offsets,
                     dl_mp_stats *stats);

#endif
