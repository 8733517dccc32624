/* test_argmax.c — ArgMax and ArgMin as a native kernel (an ARGMAX group: dlrt_argmax,
 * src/kernels/rt/argmax.c) against the reference interpreter's own, index for index: the first
 * and a middle and the last axis, keepdims both ways, select_last_index both ways, data with many
 * ties (a few levels), NaNs in some rows (every value NaN in one), -0 beside 0, rows shorter than
 * the 16 lanes, of exactly 16 and with a tail, planes wider than a 256-wide block, a symbolic
 * batch at two sizes, and enough data to be split over the threads (1 vs 2 threads bit for
 * bit); integer data stays with the reference kernel. */
#include "../../src/runtime/program-impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define CHECK_PRINT_PASS
#include "check.h"
#include "test-cache.h"
#include "native-ref.h"
#include "kernel-case.h"
#include "test-rng.h"

/* case tables leave trailing fields to their zero defaults */
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

static dl_compile_options opts;
static char dir[] = "/tmp/dlcc-test-argmax-XXXXXX";

typedef struct acase {
    const char *name;
    int rank;
    int64_t dims[4];
    bool sym;
    int axis, keepdims, last;
    int levels; /* > 0: values on so many levels (ties); 0: uniform */
    bool nans;  /* NaN at positions 29 and 45 mod 53 and one row all NaN; -0 and 0 mixed in */
    dl_dtype dtype;
} acase;

static dl_tensor *case_input(dl_ctx *ctx, const acase *c, int64_t batch) {
    int64_t d[4];
    for (int k = 0; k < c->rank; k++) d[k] = k == 0 && c->sym ? batch : c->dims[k];
    dl_tensor *t = NULL;
    if (dl_tensor_new(ctx, c->dtype ? c->dtype : DL_F32, c->rank, d, &t) != DL_OK) return NULL;
    const int64_t n = dl_tensor_numel(t), row = d[c->rank - 1];
    for (int64_t i = 0; i < n; i++) {
        double v = c->levels ? (double)irand(0, c->levels - 1) : frand();
        /* NaNs 16 apart (one lane of the row scan), the first past the lanes' first values */
        if (c->nans && (i % 53 == 29 || i % 53 == 45 || i / row == 1)) v = NAN;
        if (c->nans && i % 11 == 5) v = i % 2 ? -0.0 : 0.0;
        dl_set_f64(t, i, v);
    }
    return t;
}

static void check_case(dl_ctx *ctx, const acase *c, const char *op, bool native) {
    char nm[256], name[200];
    snprintf(name, sizeof name, "%s %s", op, c->name);
    dl_graph *g = dl_graph_new(ctx);
    const char *sym[1] = {"N"};
    int64_t xd[4];
    for (int d = 0; d < c->rank; d++) xd[d] = d == 0 && c->sym ? -1 : c->dims[d];
    dl_value *x = dl_input(g, "x", c->dtype ? c->dtype : DL_F32, c->rank, xd, sym), *y = NULL;
    char a1[32], a2[32], a3[40];
    snprintf(a1, sizeof a1, "axis=%d", c->axis);
    snprintf(a2, sizeof a2, "keepdims=%d", c->keepdims);
    snprintf(a3, sizeof a3, "select_last_index=%d", c->last);
    const char *at[3] = {a1, a2, a3};
    if (dl_add_node(g, op, 1, &x, 1, &y, 3, at) == DL_OK) dl_output(g, y, "y");
    dl_program *p = NULL, *p2 = NULL;
    if (!compile_case(ctx, g, &opts, name, DL_G_ARGMAX, "an argmax kernel", native, &p, &p2))
        return;
    for (int64_t batch = 1; batch <= (c->sym ? 3 : 1); batch += 2) {
        dl_tensor *in = case_input(ctx, c, batch), *want = NULL, *got = NULL;
        const bool ran = dl_run(ctx, g, DL_BACKEND_REF, 1, NULL, &in, &want) == DL_OK &&
                         dl_program_run(ctx, p, 1, NULL, &in, &got) == DL_OK;
        snprintf(nm, sizeof nm, "%s, batch %lld: native picks the reference's indices", name,
                 (long long)batch);
        CHECK(nm, ran && dl_tensor_numel(want) == dl_tensor_numel(got) &&
                      !memcmp(dl_tensor_data(want), dl_tensor_data(got),
                              sizeof(int64_t) * (size_t)dl_tensor_numel(got)));
        if (!ran) printf("  %s\n", dl_errmsg(ctx));
        dl_ctx_clear(ctx);
        snprintf(nm, sizeof nm, "%s, batch %lld: the same with 2 threads", name, (long long)batch);
        CHECK(nm, same_bits_1_2(ctx, p, p2, 1, &in));
        dl_tensor_free(in), dl_tensor_free(want), dl_tensor_free(got);
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
    const acase cases[] = {
        {"last axis, rows of 1000, symbolic batch", 3, {2, 5, 1000}, true, -1, 1, 0},
        {"last axis, ties on 3 levels", 2, {9, 100}, false, 1, 0, 0, 3},
        {"last axis, ties, select_last_index", 2, {9, 100}, false, 1, 0, 1, 3},
        {"last axis, NaNs and -0", 2, {6, 77}, false, -1, 1, 0, 4, true},
        {"last axis, NaNs and -0, select_last_index", 2, {6, 77}, false, -1, 1, 1, 4, true},
        {"rows of 5 (fewer than the lanes)", 2, {4, 5}, false, 1, 1, 0, 2},
        {"rows of 16", 2, {4, 16}, false, 1, 1, 0, 2},
        {"rows of 17", 2, {4, 17}, false, 1, 1, 1, 2},
        {"rows of 1", 2, {4, 1}, false, 1, 1, 0},
        {"middle axis of [2, 21, 30, 40] (a segmentation map)", 4, {2, 21, 30, 40}, true, 1, 0, 0},
        {"middle axis, ties", 3, {3, 6, 300}, false, 1, 1, 0, 2},
        {"middle axis, ties, select_last_index", 3, {3, 6, 300}, false, 1, 1, 1, 2},
        {"middle axis, NaNs and -0", 3, {3, 5, 290}, false, -2, 0, 0, 3, true},
        {"first axis", 3, {7, 3, 5}, false, 0, 1, 0, 2},
        {"middle axis of [1, 21, 256, 256] (threads)", 4, {1, 21, 256, 256}, false, 1, 0, 0},
        {"last axis of [64, 1024, 32] (threads)", 3, {64, 1024, 32}, false, 2, 1, 0, 5},
    };
    /* clang-format on */
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        check_case(ctx, &cases[i], "ArgMax", true);
        check_case(ctx, &cases[i], "ArgMin", true);
    }
    const acase ints = {"of int32 data", 2, {4, 9}, false, 1, 1, 0, 5, false, DL_I32};
    check_case(ctx, &ints, "ArgMax", false);
    dl_ctx_free(ctx);
    test_cache_remove(dir);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
