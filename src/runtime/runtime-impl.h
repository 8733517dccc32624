/* runtime-impl.h — private interface of the runtime (backends that execute a graph). */
#ifndef DL_RUNTIME_IMPL_H
#define DL_RUNTIME_IMPL_H

#include "../ir/ir-impl.h"

/* The reference interpreter (backend "ref"). outputs: one new tensor per graph output. */
dl_status dl_interp_run(dl_ctx *ctx, dl_graph *g, int n_inputs, const char *const *names,
                        dl_tensor *const *inputs, dl_tensor **outputs);
/* Same, and keep[value id] receives every value computed (the caller frees them; keep must be
 * zeroed with one entry per graph value). */
dl_status dl_interp_run_keep(dl_ctx *ctx, dl_graph *g, int n_inputs, const char *const *names,
                             dl_tensor *const *inputs, dl_tensor **outputs, dl_tensor **keep);

/* Runs node n's reference kernel on concrete inputs (NULL for omitted ones), re-running its
 * inference on them first. outs[i] (n->n_out entries): a preallocated tensor of exactly the
 * inferred shape (zeroed, then written), or NULL to have it allocated. On failure the outputs
 * allocated here are freed and reset to NULL. */
dl_status dl_run_node_ref(dl_ctx *ctx, const dl_node *n, const dl_tensor *const *in,
                          dl_tensor **outs);

/* Orders the given inputs by graph input position (names NULL: positional), checking that every
 * input is given, is not NULL, and has the model's dtype and rank. */
dl_status dl_order_inputs(dl_ctx *ctx, dl_graph *g, int n, const char *const *names,
                          dl_tensor *const *inputs, dl_tensor **ordered);

#endif
