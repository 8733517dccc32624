/* memplan-impl.h — private to the memory planner: storage groups (a buffer plus the buffers that
 * took its storage over in place, one after another) and their placement in the arena. */
#ifndef DL_MEMPLAN_IMPL_H
#define DL_MEMPLAN_IMPL_H

#include "memplan.h"

typedef struct dl_mp_group {
    int64_t size;    /* the first holder's size; later holders are no larger */
    int first, last; /* from the first holder's write to the last holder's last read */
    int tail;        /* buffer holding the storage last: the only one a newcomer may take over */
    int64_t off;     /* set by dl_mp_place */
} dl_mp_group;

/* Greedy by size: sets every group's offset (aligned, size > 0 for every group) so that groups
 * whose live ranges intersect never share bytes; *arena receives the highest end. DL_ERR_LIMIT
 * when the arena would not fit in int64_t. */
dl_status dl_mp_place(dl_ctx *ctx, int ng, dl_mp_group *groups, int64_t align, int64_t *arena);

#endif
