/* create.c — op family "create" (rows of the op table). */
#include "op-impl.h"

const dl_op_def dl_ops_create[] = {
    {.name = NULL},
};
