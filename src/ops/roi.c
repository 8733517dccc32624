/* roi.c — op family "roi" (rows of the op table). */
#include "op-impl.h"

const dl_op_def dl_ops_roi[] = {
    {.name = NULL},
};
