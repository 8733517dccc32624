/* optim.c — op family "optim" (rows of the op table). */
#include "op-impl.h"

const dl_op_def dl_ops_optim[] = {
    {.name = NULL},
};
