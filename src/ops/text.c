/* text.c — op family "text" (rows of the op table). */
#include "op-impl.h"

const dl_op_def dl_ops_text[] = {
    {.name = NULL},
};
