/* norm.c — op family "norm" (rows of the op table). */
#include "op-impl.h"

const dl_op_def dl_ops_norm[] = {
    {.name = NULL},
};
