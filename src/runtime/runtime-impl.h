/* runtime-impl.h — private interface of the runtime (backends that execute a graph). */
#ifndef DL_RUNTIME_IMPL_H
#define DL_RUNTIME_IMPL_H

#include "../ir/ir-impl.h"

/* The reference interpreter (backend "ref"). outputs: one new tensor per graph output. */
dl_status dl_interp_run(dl_ctx *ctx, dl_graph *g, int n_inputs, const char *const *names,
                        dl_tensor *const *inputs, dl_tensor **outputs);

#endif
