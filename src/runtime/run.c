/* run.c — the public entry point for running a graph on a chosen backend. */
#include "program-impl.h"

dl_status dl_run(dl_ctx *ctx, dl_graph *g, dl_backend backend, int n_inputs,
                 const char *const *names, dl_tensor *const *inputs, dl_tensor **outputs) {
    if (!g || !outputs || (n_inputs > 0 && !inputs))
        return dl_fail(ctx, DL_ERR_INVALID, "dl_run: NULL graph, inputs or outputs");
    if (g->status != DL_OK)
        return dl_fail(ctx, g->status, "dl_run: the graph has a builder error: %s",
                       dl_errmsg(g->ctx));
    DL_TRY(dl_graph_verify(g));
    switch (backend) {
    case DL_BACKEND_REF:
        return dl_interp_run(ctx, g, n_inputs, names, inputs, outputs);
    case DL_BACKEND_NATIVE: {
        dl_program *p;
        DL_TRY(dl_compile(ctx, g, NULL, &p));
        dl_status s = dl_program_run(ctx, p, n_inputs, names, inputs, outputs);
        dl_program_free(p);
        return s;
    }
    default:
        return dl_fail(ctx, DL_ERR_INVALID, "unknown backend %d", (int)backend);
    }
}
