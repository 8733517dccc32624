/* op-call.h — invoking op rows (inference) for a node. */
#ifndef DL_OP_CALL_H
#define DL_OP_CALL_H

#include "op-impl.h"

/* Runs n's inference with the given input types and known values; out has n->n_out entries. */
dl_status dl_node_infer(dl_ctx *ctx, dl_graph *g, const dl_node *n, const dl_type *const *in,
                        const dl_tensor *const *vals, dl_type *out);

#endif
