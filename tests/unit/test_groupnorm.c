/* test_groupnorm.c — InstanceNormalization and GroupNormalization as native kernels (LAYERNORM
 * groups calling dlrt_groupnorm; emit-params.c's dl_groupnorm_params_of) against the reference
 * interpreter's own (a loop in double): ranks 2 to 5, a symbolic batch at two sizes, epsilon,
 * GroupNormalization with per-group (opset 18) and per-channel (opset 21) scales, one group and
 * as many groups as channels, data far from zero (the variance of 1000 + noise), a tensor large
 * enough to be split over the threads; the same bits with 1 and 2 threads; nodes that stay with
 * the reference kernel (a symbolic spatial dim, float64 data). */
#include "../../src/runtime/program-impl.h"

#include <stdlib.h>
#include <string.h>

#define CHECK_PRINT_PASS
#include "check.h"

/* case tables leave trailing fields to their zero defaults */
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#include "test-cache.h"
#include "native-ref.h"
#include "kernel-case.h"
#include "test-rng.h"

static dl_compile_options opts;
static char dir[] = "/tmp/dlcc-test-groupnorm-XXXXXX";

/* A normalization node on x [dims] (dim 0 symbolic when sym; dim 2 too when sym2), its scale
 * and bias of n_affine values; the data offset by `offset`. */
typedef struct ncase {
    const char *name, *op;
    int opset, rank;
    int64_t dims[5];
    bool sym, sym2;
    int64_t groups, n_affine;
    dl_dtype dtype;
    double offset;
    const char *eps;
} ncase;

static dl_tensor *tensor_of(dl_ctx *ctx, dl_dtype dt, int rank, const int64_t *dims,
                            double offset) {
    dl_tensor *t = NULL;
    if (dl_tensor_new(ctx, dt, rank, dims, &t) != DL_OK) return NULL;
    for (int64_t i = 0; i < dl_tensor_numel(t); i++) dl_set_f64(t, i, offset + frand());
    return t;
}

static dl_graph *case_graph(dl_ctx *ctx, const ncase *c) {
    dl_graph *g = dl_graph_new(ctx);
    const char *sym[3] = {"N", NULL, "H"};
    int64_t xd[5];
    for (int d = 0; d < c->rank; d++)
        xd[d] = (d == 0 && c->sym) || (d == 2 && c->sym2) ? -1 : c->dims[d];
    const dl_dtype dt = c->dtype ? c->dtype : DL_F32;
    dl_value *in[3] = {dl_input(g, "x", dt, c->rank, xd, sym),
                       dl_constant(g, "scale", tensor_of(ctx, dt, 1, &c->n_affine, 0.5)),
                       dl_constant(g, "bias", tensor_of(ctx, dt, 1, &c->n_affine, 0))};
    char grp[48], eps[48];
    snprintf(grp, sizeof grp, "num_groups=%lld", (long long)c->groups);
    snprintf(eps, sizeof eps, "epsilon=%s", c->eps ? c->eps : "1e-5");
    const char *at[2] = {eps, grp};
    dl_value *y = NULL;
    if (dl_add_node_ex(g, NULL, c->op, c->opset, 3, in, 1, &y,
                       strcmp(c->op, "GroupNormalization") ? 1 : 2, at, 0, NULL) == DL_OK)
        dl_output(g, y, "y");
    return g;
}

static void check_case(dl_ctx *ctx, const ncase *c, bool native) {
    char nm[256];
    dl_graph *g = case_graph(ctx, c);
    dl_program *p = NULL, *p2 = NULL;
    if (!compile_case(ctx, g, &opts, c->name, DL_G_LAYERNORM, "a dlrt_groupnorm kernel", native, &p,
                      &p2))
        return;
    for (int64_t batch = 1; batch <= (c->sym ? 3 : 1); batch += 2) {
        int64_t d[5];
        for (int k = 0; k < c->rank; k++) d[k] = k == 0 && c->sym ? batch : c->dims[k];
        dl_tensor *x = tensor_of(ctx, c->dtype ? c->dtype : DL_F32, c->rank, d, c->offset);
        snprintf(nm, sizeof nm, "%s, batch %lld", c->name, (long long)batch);
        check_run(ctx, g, p, p2, 1, &x, 1e-5, nm);
        dl_tensor_free(x);
    }
    dl_program_free(p);
    dl_program_free(p2);
    dl_graph_free(g);
}

int main(void) {
    if (!test_cache_open(dir, &opts)) return 1;
    opts.threads = 1;
    dl_ctx *ctx = dl_ctx_new();
    /* clang-format off */
    const ncase native[] = {
        {"InstanceNormalization [N, 3, 5, 7]", "InstanceNormalization", 13, 4, {2, 3, 5, 7}, true, false, 3, 3},
        {"InstanceNormalization rank 3, epsilon 0.01", "InstanceNormalization", 13, 3, {2, 4, 9}, false, false,
         4, 4, 0, 0, "0.01"},
        {"InstanceNormalization rank 5", "InstanceNormalization", 13, 5, {1, 2, 3, 4, 5}, false, false, 2, 2},
        {"InstanceNormalization rank 2 (one element a channel)", "InstanceNormalization", 13, 2, {3, 4}, false,
         false, 4, 4},
        {"InstanceNormalization of 1000 + noise", "InstanceNormalization", 13, 4, {1, 3, 6, 6}, false, false, 3,
         3, 0, 1000},
        {"InstanceNormalization [1, 64, 64, 64] (threads)", "InstanceNormalization", 13, 4, {1, 64, 64, 64},
         false, false, 64, 64},
        {"GroupNormalization-18, 2 groups of 3, per-group scale", "GroupNormalization", 18, 4, {2, 6, 4, 5},
         true, false, 2, 2},
        {"GroupNormalization-21, 2 groups of 3, per-channel scale", "GroupNormalization", 21, 4, {2, 6, 4, 5},
         true, false, 2, 6},
        {"GroupNormalization, one group", "GroupNormalization", 18, 4, {1, 4, 3, 3}, false, false, 1, 1},
        {"GroupNormalization, a group a channel", "GroupNormalization", 18, 3, {2, 5, 7}, false, false, 5, 5},
    };
    const ncase kept[] = {
        {"InstanceNormalization of a symbolic height", "InstanceNormalization", 13, 4, {1, 3, 5, 7}, false, true,
         3, 3},
        {"InstanceNormalization of float64", "InstanceNormalization", 13, 4, {1, 3, 5, 7}, false, false, 3, 3,
         DL_F64},
    };
    /* clang-format on */
    for (size_t i = 0; i < sizeof native / sizeof *native; i++) check_case(ctx, &native[i], true);
    for (size_t i = 0; i < sizeof kept / sizeof *kept; i++) check_case(ctx, &kept[i], false);
    dl_ctx_free(ctx);
    test_cache_remove(dir);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
