/* load_onnx.c — loads an ONNX model, feeds it .npy inputs (in graph-input order) and writes
 * each output to out_<i>.npy.   usage: load_onnx MODEL.onnx [INPUT.npy ...] */
#include "dlcc.h"

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL.onnx [INPUT.npy ...]\n", argv[0]);
        return 2;
    }
    dl_ctx *ctx = dl_ctx_new();
    dl_graph *g = NULL;
    int rc = 1;
    if (dl_load_onnx(ctx, argv[1], &g) != DL_OK) goto fail;
    int n_in = dl_graph_num_inputs(g), n_out = dl_graph_num_outputs(g);
    if (argc - 2 != n_in) {
        fprintf(stderr, "%s has %d inputs; %d .npy files given\n", argv[1], n_in, argc - 2);
        goto out;
    }
    dl_tensor **in = calloc((size_t)n_in + 1, sizeof *in), **out = calloc((size_t)n_out, sizeof *out);
    for (int i = 0; i < n_in; i++)
        if (dl_npy_load(ctx, argv[2 + i], &in[i]) != DL_OK) goto fail;
    if (dl_run(ctx, g, DL_BACKEND_REF, n_in, NULL, in, out) != DL_OK) goto fail;
    for (int i = 0; i < n_out; i++) {
        char path[64];
        snprintf(path, sizeof path, "out_%d.npy", i);
        if (dl_npy_save(ctx, path, out[i]) != DL_OK) goto fail;
        printf("%s -> %s (%lld values)\n", dl_value_name(dl_graph_output(g, i)), path,
               (long long)dl_tensor_numel(out[i]));
        dl_tensor_free(out[i]);
    }
    for (int i = 0; i < n_in; i++) dl_tensor_free(in[i]);
    free(in);
    free(out);
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "error: %s\n", dl_errmsg(ctx));
out:
    dl_graph_free(g);
    dl_ctx_free(ctx);
    return rc;
}
