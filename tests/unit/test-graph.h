/* test-graph.h — what the compiler's graph tests build their inputs from: a float32 tensor of
 * test-rng.h's random values, and a float32 scalar constant. Include after dlcc.h and
 * test-rng.h. */
#ifndef DLCC_TEST_GRAPH_H
#define DLCC_TEST_GRAPH_H

static dl_tensor *rand_tensor(dl_ctx *ctx, int rank, const int64_t *dims) {
    dl_tensor *t = NULL;
    if (dl_tensor_new(ctx, DL_F32, rank, dims, &t) != DL_OK) return NULL;
    float *p = dl_tensor_data(t);
    for (int64_t i = 0; i < dl_tensor_numel(t); i++) p[i] = frand();
    return t;
}

static dl_value *scalar_const(dl_ctx *ctx, dl_graph *g, const char *name, float v) {
    dl_tensor *t = NULL;
    if (dl_tensor_new(ctx, DL_F32, 0, NULL, &t) == DL_OK) *(float *)dl_tensor_data(t) = v;
    return dl_constant(g, name, t);
}

#endif
