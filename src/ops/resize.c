/* resize.c — op family "resize" (rows of the op table). */
#include "op-impl.h"

const dl_op_def dl_ops_resize[] = {
    {.name = NULL},
};
