/* build_mlp.c — builds a small MLP with the builder API (y = softmax(relu(x W1 + b1) W2 + b2)),
 * runs it on the reference backend and prints the result. Builder calls compute nothing; errors
 * are sticky and checked once with dl_graph_status(). */
#include "dlcc.h"

#include <stdio.h>

static dl_tensor *filled(dl_ctx *ctx, int rank, const int64_t *dims, float scale) {
    dl_tensor *t;
    if (dl_tensor_new(ctx, DL_F32, rank, dims, &t) != DL_OK) return NULL;
    float *p = dl_tensor_data(t);
    for (int64_t i = 0; i < dl_tensor_numel(t); i++) p[i] = scale * (float)((i * 37 % 17) - 8) / 8.0f;
    return t;
}

int main(void) {
    dl_ctx *ctx = dl_ctx_new();
    dl_graph *g = dl_graph_new(ctx);
    const int64_t x_dims[] = {-1, 4}, w1_dims[] = {4, 8}, b1_dims[] = {8}, w2_dims[] = {8, 3},
                  b2_dims[] = {3};
    const char *syms[] = {"batch", NULL};
    dl_value *x = dl_input(g, "x", DL_F32, 2, x_dims, syms);
    dl_value *w1 = dl_constant(g, "w1", filled(ctx, 2, w1_dims, 0.5f));
    dl_value *b1 = dl_constant(g, "b1", filled(ctx, 1, b1_dims, 0.1f));
    dl_value *w2 = dl_constant(g, "w2", filled(ctx, 2, w2_dims, 0.5f));
    dl_value *b2 = dl_constant(g, "b2", filled(ctx, 1, b2_dims, 0.1f));
    dl_value *h = dl_relu(g, dl_add(g, dl_matmul(g, x, w1), b1));
    dl_value *y = dl_softmax(g, dl_add(g, dl_matmul(g, h, w2), b2), -1);
    dl_output(g, y, "y");
    if (dl_graph_status(g) != DL_OK) {
        fprintf(stderr, "build failed: %s\n", dl_errmsg(ctx));
        return 1;
    }
    dl_graph_print(g, stdout, 1);

    const int64_t in_dims[] = {2, 4};
    dl_tensor *in = filled(ctx, 2, in_dims, 1.0f), *out = NULL;
    if (!in || dl_run(ctx, g, DL_BACKEND_REF, 1, NULL, &in, &out) != DL_OK) {
        fprintf(stderr, "run failed: %s\n", dl_errmsg(ctx));
        return 1;
    }
    const float *p = dl_tensor_data(out);
    for (int r = 0; r < 2; r++) printf("y[%d] = %.5f %.5f %.5f\n", r, p[3 * r], p[3 * r + 1], p[3 * r + 2]);
    dl_tensor_free(in);
    dl_tensor_free(out);
    dl_graph_free(g);
    dl_ctx_free(ctx);
    return 0;
}
