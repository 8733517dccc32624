/* test_copy.c — Slice, Split, Concat, constant Pad, DepthToSpace and SpaceToDepth as COPY kernels
 * (dlrt_copy_strided calls, a Pad's dlrt_fill; copy-params.c) and Gather (dlrt_gather) against
 * the reference interpreter, bit for bit: clamped, negative
 * and reversed slices (whose dims merge into one run of stride -1), empty parts, 1-, 2-, 4- and
 * 8-byte elements, a symbolic batch, blocks large enough to be split over threads, pads that add,
 * crop or both with constants of every width, and the nodes that must stay with the reference
 * kernel (parameters not constant, dims inference could not prove equal). */
#include "../../src/runtime/program-impl.h"

#include <stdlib.h>
#include <string.h>

#define CHECK_PRINT_PASS
#include "check.h"
#include "test-cache.h"

static dl_compile_options opts;

static int count_kind(const dl_program *p, dl_gkind k) {
    int n = 0;
    for (int gi = 0; gi < p->fusion->n; gi++) n += p->fusion->groups[gi].kind == k;
    return n;
}

static dl_value *i64s(dl_ctx *ctx, dl_graph *g, int n, const int64_t *v) {
    int64_t d = n;
    dl_tensor *t = NULL;
    if (dl_tensor_new(ctx, DL_I64, 1, &d, &t) != DL_OK) return NULL;
    memcpy(dl_tensor_data(t), v, sizeof(int64_t) * (size_t)n);
    return dl_constant(g, NULL, t);
}

/* A tensor of dt with dims whose bytes are a pattern (NaNs among the floats: moved, never
 * computed on). */
static dl_tensor *pattern(dl_ctx *ctx, dl_dtype dt, int rank, const int64_t *dims, unsigned seed) {
    dl_tensor *t = NULL;
    if (dl_tensor_new(ctx, dt, rank, dims, &t) != DL_OK) return NULL;
    unsigned char *raw = dl_tensor_data(t);
    const size_t bytes = (size_t)dl_tensor_numel(t) * dl_dtype_size(dt);
    for (size_t i = 0; i < bytes; i++) raw[i] = (unsigned char)(i * 7 + i / 5 + seed);
    return t;
}

/* Fills integer tensor t with indices cycling through [-extent, extent) (both ends reached). */
static void fill_indices(dl_tensor *t, int64_t extent) {
    const int64_t n = dl_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        const int64_t v = (i * 7) % (2 * extent) - extent;
        if (dl_tensor_dtype(t) == DL_I32)
            ((int32_t *)dl_tensor_data(t))[i] = (int32_t)v;
        else
            ((int64_t *)dl_tensor_data(t))[i] = v;
    }
}

/* g compiled: `copies` COPY groups and `fallbacks` reference fallbacks expected; then run at
 * each batch of batches[0 .. nb) (the inputs' dim 0 when symbolic, any other symbol 4; none
 * when nb is 0) against the reference, every output bit for bit. With extent > 0, graph input 1
 * holds a Gather's indices, in [-extent, extent) (fill_indices). Frees g. */
static void check_graph_ix(dl_ctx *ctx, dl_graph *g, const char *what, int copies, int fallbacks,
                           const int64_t *batches, int nb, int64_t extent) {
    char name[256];
    dl_program *p = NULL;
    snprintf(name, sizeof name, "%s: compiles", what);
    if (dl_graph_status(g) != DL_OK || dl_compile(ctx, g, &opts, &p) != DL_OK) {
        CHECK(name, false);
        printf("  %s\n", dl_errmsg(ctx));
        dl_ctx_clear(ctx);
        dl_graph_free(g);
        return;
    }
    snprintf(name, sizeof name, "%s: %d copy kernels, %d fallbacks", what, copies, fallbacks);
    CHECK(name, count_kind(p, DL_G_COPY) == copies && count_kind(p, DL_G_FALLBACK) == fallbacks);
    const int n_in = dl_graph_num_inputs(g), n_out = dl_graph_num_outputs(g);
    for (int b = 0; b < nb; b++) {
        dl_tensor *in[4] = {NULL}, *want[8] = {NULL}, *got[8] = {NULL};
        for (int i = 0; i < n_in && i < 4; i++) {
            const dl_value *v = dl_graph_input(g, i);
            int64_t dims[8];
            const int r = dl_value_rank(v);
            for (int d = 0; d < r; d++) /* the batch, and 4 for any other symbol */
                dims[d] = dl_value_dim(v, d) >= 0 ? dl_value_dim(v, d) : d == 0 ? batches[b] : 4;
            in[i] = pattern(ctx, dl_value_dtype(v), r, dims, (unsigned)(17 * i + b));
            if (i == 1 && extent > 0 && in[i]) fill_indices(in[i], extent);
        }
        const bool ran = dl_run(ctx, g, DL_BACKEND_REF, n_in, NULL, in, want) == DL_OK &&
                         dl_program_run(ctx, p, n_in, NULL, in, got) == DL_OK;
        bool same = ran;
        for (int o = 0; same && o < n_out; o++) {
            const size_t bytes =
                (size_t)dl_tensor_numel(want[o]) * dl_dtype_size(dl_tensor_dtype(want[o]));
            same = got[o] && dl_tensor_numel(got[o]) == dl_tensor_numel(want[o]) &&
                   dl_tensor_rank(got[o]) == dl_tensor_rank(want[o]) &&
                   (bytes == 0 || !memcmp(dl_tensor_data(got[o]), dl_tensor_data(want[o]), bytes));
        }
        snprintf(name, sizeof name, "%s, batch %lld: native equals ref bit for bit", what,
                 (long long)batches[b]);
        CHECK(name, same);
        if (!ran) printf("  %s\n", dl_errmsg(ctx));
        dl_ctx_clear(ctx);
        for (int o = 0; o < n_out && o < 8; o++) dl_tensor_free(want[o]), dl_tensor_free(got[o]);
        for (int i = 0; i < n_in && i < 4; i++) dl_tensor_free(in[i]);
    }
    dl_program_free(p);
    dl_graph_free(g);
}

static void check_graph(dl_ctx *ctx, dl_graph *g, const char *what, int copies, int fallbacks,
                        const int64_t *batches, int nb) {
    check_graph_ix(ctx, g, what, copies, fallbacks, batches, nb, 0);
}

/* Slice of x (dims xd, constant dims) by constant starts/ends/axes/steps (steps may be NULL). */
static void slice_case(dl_ctx *ctx, const char *what, dl_dtype dt, int rank, const int64_t *xd,
                       int n, const int64_t *starts, const int64_t *ends, const int64_t *axes,
                       const int64_t *steps) {
    dl_graph *g = dl_graph_new(ctx);
    dl_value *in[5] = {dl_input(g, "x", dt, rank, xd, NULL), i64s(ctx, g, n, starts),
                       i64s(ctx, g, n, ends), i64s(ctx, g, n, axes),
                       steps ? i64s(ctx, g, n, steps) : NULL};
    dl_value *y[1] = {NULL};
    dl_add_node(g, "Slice", steps ? 5 : 4, in, 1, y, 0, NULL);
    dl_output(g, y[0], "y");
    const int64_t one[] = {1};
    check_graph(ctx, g, what, 1, 0, one, 1);
}

static void test_slices(dl_ctx *ctx) {
    const int64_t xd[] = {5, 7, 9};
    /* clamped ends and a negative start, the middle axis whole */
    slice_case(ctx, "slice clamped", DL_F32, 3, xd, 2, (int64_t[]){1, -3}, (int64_t[]){4, 100},
               (int64_t[]){0, 2}, NULL);
    /* steps of 2 and 3: elements one at a time */
    slice_case(ctx, "slice steps 2, 3", DL_F32, 3, xd, 2, (int64_t[]){0, 1}, (int64_t[]){5, 7},
               (int64_t[]){0, 1}, (int64_t[]){2, 3});
    /* reversed axes with steps -2 and -1, negative axes */
    slice_case(ctx, "slice negative steps", DL_F32, 3, xd, 2, (int64_t[]){-1, 6},
               (int64_t[]){-100, 0}, (int64_t[]){-2, -1}, (int64_t[]){-2, -1});
    /* every axis reversed whole: the dims merge into one run of stride -1 */
    slice_case(ctx, "slice reversed", DL_F32, 3, xd, 3, (int64_t[]){-1, -1, -1},
               (int64_t[]){INT64_MIN, INT64_MIN, INT64_MIN}, (int64_t[]){0, 1, 2},
               (int64_t[]){-1, -1, -1});
    /* an empty result, and a start past the end */
    slice_case(ctx, "slice empty", DL_F32, 3, xd, 1, (int64_t[]){3}, (int64_t[]){3}, (int64_t[]){0},
               NULL);
    slice_case(ctx, "slice start past the end", DL_F32, 3, xd, 1, (int64_t[]){20}, (int64_t[]){30},
               (int64_t[]){2}, NULL);
    /* element widths 8, 2, 1 */
    slice_case(ctx, "slice int64", DL_I64, 3, xd, 2, (int64_t[]){1, 2}, (int64_t[]){4, 9},
               (int64_t[]){1, 2}, (int64_t[]){2, 3});
    slice_case(ctx, "slice float16", DL_F16, 3, xd, 1, (int64_t[]){8}, (int64_t[]){0},
               (int64_t[]){2}, (int64_t[]){-3});
    slice_case(ctx, "slice uint8", DL_U8, 3, xd, 2, (int64_t[]){1, 1}, (int64_t[]){5, 8},
               (int64_t[]){0, 2}, (int64_t[]){1, 2});
    /* one element */
    slice_case(ctx, "slice one element", DL_I32, 3, xd, 3, (int64_t[]){4, 6, 8},
               (int64_t[]){5, 7, 9}, (int64_t[]){0, 1, 2}, NULL);

    /* big enough for threads, rank 3: each thread starts its runs mid-way through two dims */
    const int64_t bd[] = {64, 40, 300};
    slice_case(ctx, "slice reversed with steps, [64, 40, 300] (threads)", DL_F32, 3, bd, 3,
               (int64_t[]){-1, 1, -2}, (int64_t[]){INT64_MIN, 40, INT64_MIN}, (int64_t[]){0, 1, 2},
               (int64_t[]){-1, 1, -1});

    /* not constant: the reference kernel */
    dl_graph *g = dl_graph_new(ctx);
    const int64_t sd[] = {1};
    dl_value *in[3] = {dl_input(g, "x", DL_F32, 3, xd, NULL), dl_input(g, "s", DL_I64, 1, sd, NULL),
                       i64s(ctx, g, 1, (int64_t[]){4})};
    dl_value *y[1] = {NULL};
    dl_add_node(g, "Slice", 3, in, 1, y, 0, NULL);
    dl_output(g, y[0], "y");
    check_graph(ctx, g, "slice with starts from an input", 0, 1, NULL, 0);
}

/* Split of x (dims xd, dim 0 the symbolic batch) on axis into n parts of the given sizes (a
 * constant), or equal ones (sizes NULL); every part an output. */
static void split_case(dl_ctx *ctx, const char *what, dl_dtype dt, int axis, int n,
                       const int64_t *sizes, const int64_t *xd, int copies, int fallbacks) {
    dl_graph *g = dl_graph_new(ctx);
    const char *syms[] = {"batch", NULL, NULL};
    dl_value *in[2] = {dl_input(g, "x", dt, 3, xd, syms), sizes ? i64s(ctx, g, n, sizes) : NULL};
    dl_value *out[8] = {NULL};
    char attr[32];
    snprintf(attr, sizeof attr, "axis=%d", axis);
    const char *attrs[] = {attr};
    dl_add_node(g, "Split", sizes ? 2 : 1, in, n, out, 1, attrs);
    for (int k = 0; k < n; k++) {
        char nm[16];
        snprintf(nm, sizeof nm, "y%d", k);
        dl_output(g, out[k], nm);
    }
    const int64_t batches[] = {1, 3};
    check_graph(ctx, g, what, copies, fallbacks, batches, 2);
}

/* Concat on axis of inputs of dims[k] (symbolic dims: the batch first, "other" after) */
static void concat_case(dl_ctx *ctx, const char *what, dl_dtype dt, int axis, int n,
                        const int64_t (*dims)[3], int copies, int fallbacks, bool run) {
    dl_graph *g = dl_graph_new(ctx);
    const char *syms[] = {"batch", "other", NULL};
    dl_value *in[8];
    for (int k = 0; k < n; k++) {
        char nm[16];
        snprintf(nm, sizeof nm, "x%d", k);
        in[k] = dl_input(g, nm, dt, 3, dims[k], syms);
    }
    char attr[32];
    snprintf(attr, sizeof attr, "axis=%d", axis);
    const char *attrs[] = {attr};
    dl_value *y[1] = {NULL};
    dl_add_node(g, "Concat", n, in, 1, y, 1, attrs);
    dl_output(g, y[0], "y");
    const int64_t batches[] = {1, 3};
    check_graph(ctx, g, what, copies, fallbacks, batches, run ? 2 : 0);
}

static void test_splits_concats(dl_ctx *ctx) {
    const int64_t xd[] = {-1, 10, 6};
    split_case(ctx, "split 3 + 0 + 7 on axis 1", DL_F32, 1, 3, (int64_t[]){3, 0, 7}, xd, 1, 0);
    split_case(ctx, "split equal parts on axis -1, int64", DL_I64, -1, 3, NULL, xd, 1, 0);
    split_case(ctx, "split uint8", DL_U8, 2, 2, (int64_t[]){1, 5}, xd, 1, 0);
    /* the batch split: its extents are symbols, so the reference kernel */
    split_case(ctx, "split on the symbolic axis", DL_F32, 0, 1, NULL, xd, 0, 1);

    const int64_t a[][3] = {{-1, 2, 5}, {-1, 3, 5}, {-1, 0, 5}, {-1, 1, 5}};
    concat_case(ctx, "concat 2 + 3 + 0 + 1 on axis 1", DL_F32, 1, 4, a, 1, 0, true);
    const int64_t b[][3] = {{-1, 4, 2}, {-1, 4, 3}};
    concat_case(ctx, "concat on the last axis, float16", DL_F16, -1, 2, b, 1, 0, true);
    /* an input whose middle dim is a symbol where the other's is 4: the output's dim is 4, and
     * nothing proves the input's is */
    const int64_t c[][3] = {{-1, 4, 2}, {-1, -2, 3}};
    concat_case(ctx, "concat of unproven dims", DL_F32, 2, 2, c, 0, 1, true);

    /* dims whose strides would overflow int64 (a model may declare any): the reference kernel,
     * compiled only (no such tensor can be given) */
    const int64_t huge[][3] = {{-1, 2, (int64_t)1 << 62}, {-1, 3, (int64_t)1 << 62}};
    concat_case(ctx, "concat of dims past int64", DL_F32, 1, 2, huge, 0, 1, false);

    /* blocks of 2 MB and more: split over threads */
    const int64_t big[] = {-1, 64, 2304};
    split_case(ctx, "split of [b, 64, 2304] into thirds (threads)", DL_F32, 2, 3, NULL, big, 1, 0);
    const int64_t bd[][3] = {{-1, 1500, 300}, {-1, 700, 300}};
    concat_case(ctx, "concat of [b, 1500 + 700, 300] (threads)", DL_F32, 1, 2, bd, 1, 0, true);
}

/* Opset 18's Split with num_outputs: parts of ceil(d / n) and a shorter last one, checked against
 * the input's columns directly (the reference kernel reads the same inferred dims); then the
 * counts that cannot be split so, which must fail to build with a message. */
static void test_split_num_outputs(dl_ctx *ctx) {
    const int64_t xd[] = {2, 8};
    dl_graph *g = dl_graph_new(ctx);
    dl_value *in[1] = {dl_input(g, "x", DL_F32, 2, xd, NULL)}, *out[3] = {NULL};
    const char *attrs[] = {"axis=1", "num_outputs=3"};
    dl_add_node_ex(g, NULL, "Split", 18, 1, in, 3, out, 2, attrs, 0, NULL);
    for (int k = 0; k < 3; k++) dl_output(g, out[k], (const char *[]){"y0", "y1", "y2"}[k]);
    dl_program *p = NULL;
    const bool built = dl_graph_status(g) == DL_OK && dl_compile(ctx, g, &opts, &p) == DL_OK;
    CHECK("split 8 into num_outputs=3: compiles", built);
    if (built) {
        CHECK("split 8 into num_outputs=3: one copy kernel", count_kind(p, DL_G_COPY) == 1);
        dl_tensor *x = NULL, *y[3] = {NULL};
        if (dl_tensor_new(ctx, DL_F32, 2, xd, &x) == DL_OK) {
            float *xv = dl_tensor_data(x);
            for (int i = 0; i < 16; i++) xv[i] = (float)i;
        }
        bool ok = x && dl_program_run(ctx, p, 1, NULL, &x, y) == DL_OK;
        const int64_t widths[] = {3, 3, 2};
        for (int k = 0, off = 0; ok && k < 3; off += (int)widths[k], k++) {
            ok = dl_tensor_rank(y[k]) == 2 && dl_tensor_dims(y[k])[0] == 2 &&
                 dl_tensor_dims(y[k])[1] == widths[k];
            const float *yv = ok ? dl_tensor_data(y[k]) : NULL;
            for (int r = 0; ok && r < 2; r++)
                for (int c = 0; c < widths[k]; c++)
                    ok = ok && yv[r * widths[k] + c] == (float)(r * 8 + off + c);
        }
        CHECK("split 8 into num_outputs=3: parts of 3, 3, 2 with the input's columns", ok);
        for (int k = 0; k < 3; k++) dl_tensor_free(y[k]);
        dl_tensor_free(x);
        dl_program_free(p);
    }
    dl_ctx_clear(ctx);
    dl_graph_free(g);

    /* an axis of INT64_MAX: parts of ceil(d / 3) computed without overflow */
    {
        g = dl_graph_new(ctx);
        const int64_t d = INT64_MAX;
        dl_value *x = dl_input(g, "x", DL_F32, 1, &d, NULL), *o[3] = {NULL};
        const char *a[] = {"num_outputs=3"};
        const dl_status st = dl_add_node_ex(g, NULL, "Split", 18, 1, &x, 3, o, 1, a, 0, NULL);
        const int64_t c = INT64_MAX / 3 + 1;
        CHECK("split INT64_MAX into num_outputs=3: parts of ceil(d / 3), the last shorter",
              st == DL_OK && dl_value_dim(o[0], 0) == c && dl_value_dim(o[1], 0) == c &&
                  dl_value_dim(o[2], 0) == INT64_MAX - 2 * c);
        dl_ctx_clear(ctx);
        dl_graph_free(g);
    }
    struct {
        int64_t d;
        int parts;
        const char *num, *want;
        int opset;
        bool sizes;
    } bad[] = {{5, 4, "num_outputs=4", "too short", 18, false},
               {6, 3, "num_outputs=2", "num_outputs is 2", 18, false},
               {6, 3, "num_outputs=0", "num_outputs is 0", 18, false},
               {6, 3, "num_outputs=3", "from opset 18", 13, false},
               {6, 3, "num_outputs=3", "both the split input and num_outputs", 18, true}};
    for (int b = 0; b < 5; b++) {
        g = dl_graph_new(ctx);
        const int64_t sizes[] = {2, 2, 2};
        dl_value *x[2] = {dl_input(g, "x", DL_F32, 1, &bad[b].d, NULL),
                          bad[b].sizes ? i64s(ctx, g, 3, sizes) : NULL},
                 *o[4] = {NULL};
        const char *a[] = {bad[b].num};
        const dl_status st = dl_add_node_ex(g, NULL, "Split", bad[b].opset, bad[b].sizes ? 2 : 1, x,
                                            bad[b].parts, o, 1, a, 0, NULL);
        char name[160];
        snprintf(name, sizeof name,
                 "split %lld into %d outputs with %s%s (opset %d): refused, saying '%s'",
                 (long long)bad[b].d, bad[b].parts, bad[b].num, bad[b].sizes ? " and sizes" : "",
                 bad[b].opset, bad[b].want);
        CHECK(name, st != DL_OK && strstr(dl_errmsg(ctx), bad[b].want) != NULL);
        dl_ctx_clear(ctx);
        dl_graph_free(g);
    }
}

/* Gather of x (rank xr, dims xd: -1 the symbol "other", 4 at run time) on axis by indices of
 * idt and rank ir, dims id (-1 the batch); both graph inputs. */
static dl_graph *gather_graph(dl_ctx *ctx, dl_dtype dt, int xr, const int64_t *xd, dl_dtype idt,
                              int ir, const int64_t *id, int axis) {
    dl_graph *g = dl_graph_new(ctx);
    const char *xs[] = {"other", "other", "other"}, *is[] = {"batch", "batch", "batch"};
    dl_value *in[2] = {dl_input(g, "x", dt, xr, xd, xs), dl_input(g, "ids", idt, ir, id, is)};
    char attr[32];
    snprintf(attr, sizeof attr, "axis=%d", axis);
    const char *attrs[] = {attr};
    dl_value *y[1] = {NULL};
    dl_add_node(g, "Gather", 2, in, 1, y, 1, attrs);
    dl_output(g, y[0], "y");
    return g;
}

/* The graph's program run with x a pattern and index `bad` (at position at) among good ones, and
 * another bad one later (at later_at, when >= 0), must fail naming the first as out of range. */
static void gather_refuses(dl_ctx *ctx, const char *what, dl_graph *g, int64_t bad, int64_t at,
                           int64_t later_at, int64_t extent) {
    dl_program *p = NULL;
    bool refused = false;
    if (dl_graph_status(g) == DL_OK && dl_compile(ctx, g, &opts, &p) == DL_OK) {
        dl_tensor *in[2] = {NULL}, *out[1] = {NULL};
        for (int i = 0; i < 2; i++) {
            const dl_value *v = dl_graph_input(g, i);
            int64_t dims[8];
            for (int d = 0; d < dl_value_rank(v); d++)
                dims[d] = dl_value_dim(v, d) >= 0 ? dl_value_dim(v, d) : 2;
            in[i] = pattern(ctx, dl_value_dtype(v), dl_value_rank(v), dims, 5);
        }
        if (in[0] && in[1]) {
            fill_indices(in[1], extent);
            for (int k = 0; k < 2; k++) {
                const int64_t pos = k ? later_at : at, v = k ? extent + 7 : bad;
                if (pos < 0) continue;
                if (dl_tensor_dtype(in[1]) == DL_I32)
                    ((int32_t *)dl_tensor_data(in[1]))[pos] = (int32_t)v;
                else
                    ((int64_t *)dl_tensor_data(in[1]))[pos] = v;
            }
            char want[64];
            snprintf(want, sizeof want, "index %lld is out of range", (long long)bad);
            refused = dl_program_run(ctx, p, 2, NULL, in, out) != DL_OK &&
                      strstr(dl_errmsg(ctx), want) && !out[0];
            if (!refused) printf("  %s\n", dl_errmsg(ctx));
        }
        dl_tensor_free(out[0]);
        for (int i = 0; i < 2; i++) dl_tensor_free(in[i]);
        dl_program_free(p);
    }
    CHECK(what, refused);
    dl_ctx_clear(ctx);
    dl_graph_free(g);
}

static void test_gathers(dl_ctx *ctx) {
    const int64_t batches[] = {1, 3};
    /* rows of a table picked by a batch of ids, negative ones among them */
    check_graph_ix(
        ctx, gather_graph(ctx, DL_F32, 2, (int64_t[]){12, 5}, DL_I64, 2, (int64_t[]){-1, 3}, 0),
        "gather rows of [12, 5] by int64 ids [b, 3]", 1, 0, batches, 2, 12);
    /* a symbolic extent (4 at run time), int32 ids */
    check_graph_ix(ctx,
                   gather_graph(ctx, DL_F32, 2, (int64_t[]){6, -1}, DL_I32, 1, (int64_t[]){-1}, 1),
                   "gather on axis 1 of [6, other] by int32 ids [b]", 1, 0, batches, 2, 4);
    /* a middle axis of float16, and the last axis of bytes by one scalar index */
    check_graph_ix(
        ctx, gather_graph(ctx, DL_F16, 3, (int64_t[]){4, 9, 3}, DL_I32, 2, (int64_t[]){2, 2}, 1),
        "gather on axis 1 of float16 [4, 9, 3] by [2, 2]", 1, 0, batches, 1, 9);
    check_graph_ix(ctx, gather_graph(ctx, DL_U8, 2, (int64_t[]){3, 7}, DL_I64, 0, NULL, -1),
                   "gather on the last axis of uint8 [3, 7] by a scalar", 1, 0, batches, 1, 7);
    /* 393 KB of rows: split over threads */
    check_graph_ix(
        ctx,
        gather_graph(ctx, DL_F32, 2, (int64_t[]){1000, 768}, DL_I64, 2, (int64_t[]){-1, 128}, 0),
        "gather of [b, 128] rows of [1000, 768] (threads)", 1, 0, batches + 1, 1, 1000);
    /* constant ids (position ids) picking columns of an input, then fed to a kernel */
    {
        dl_graph *g = dl_graph_new(ctx);
        const char *syms[] = {"batch", NULL};
        dl_value *x = dl_input(g, "x", DL_F32, 2, (int64_t[]){-1, 6}, syms);
        const int64_t ids[] = {0, -1, 2, 2};
        dl_output(g, dl_relu(g, dl_op2(g, "Gather", x, i64s(ctx, g, 4, ids), "axis=1")), "y");
        check_graph(ctx, g, "gather by constant ids, then Relu", 1, 0, batches, 2);
    }
    /* rows whose bytes would overflow int64, and dims past int64 behind a 0 (a model may declare
     * any): the reference kernel, compiled only (make test-asan's UBSan sees any overflow) */
    check_graph_ix(ctx,
                   gather_graph(ctx, DL_F32, 2, (int64_t[]){2, (int64_t)1 << 61}, DL_I64, 1,
                                (int64_t[]){3}, 0),
                   "gather of rows of 2^63 bytes", 0, 1, batches, 0, 0);
    check_graph_ix(ctx,
                   gather_graph(ctx, DL_F32, 3, (int64_t[]){0, (int64_t)1 << 40, (int64_t)1 << 40},
                                DL_I64, 1, (int64_t[]){0}, 0),
                   "gather of [0, 2^40, 2^40]", 0, 1, batches, 0, 0);
    /* no rows to move ([0, 5] on axis 1): the indices are still checked */
    check_graph_ix(ctx,
                   gather_graph(ctx, DL_F32, 2, (int64_t[]){0, 5}, DL_I64, 1, (int64_t[]){3}, 1),
                   "gather on axis 1 of [0, 5]", 1, 0, batches, 1, 5);

    gather_refuses(
        ctx, "gather: an id past the table fails the run, naming it",
        gather_graph(ctx, DL_F32, 2, (int64_t[]){12, 5}, DL_I64, 2, (int64_t[]){-1, 3}, 0), 12, 4,
        -1, 12);
    gather_refuses(ctx, "gather: an int32 id below -extent fails the run",
                   gather_graph(ctx, DL_F32, 2, (int64_t[]){12, 5}, DL_I32, 1, (int64_t[]){-1}, 0),
                   -13, 1, -1, 12);
    /* 786 KB of rows on threads: the first bad id in order is named, whichever thread met it */
    gather_refuses(
        ctx, "gather: of two bad ids read on threads, the first is named",
        gather_graph(ctx, DL_F32, 2, (int64_t[]){1000, 768}, DL_I64, 2, (int64_t[]){-1, 128}, 0),
        -1001, 40, 250, 1000);
    gather_refuses(
        ctx, "gather: a bad int32 id in the second half (threads)",
        gather_graph(ctx, DL_F32, 2, (int64_t[]){1000, 768}, DL_I32, 2, (int64_t[]){-1, 128}, 0),
        1000, 250, -1, 1000);
    gather_refuses(ctx, "gather: a bad id with no rows to move fails the run",
                   gather_graph(ctx, DL_F32, 2, (int64_t[]){0, 5}, DL_I64, 1, (int64_t[]){3}, 1), 5,
                   2, -1, 5);
}

/* Pad of x (dims xd; a symbolic batch when sym) by constant pads, with the constant value (of
 * x's dtype; NULL: none given) in the given mode. */
static void pad_case(dl_ctx *ctx, const char *what, dl_dtype dt, const int64_t *xd,
                     const int64_t *pads, const void *value, const char *mode, bool sym, int copies,
                     int fallbacks) {
    dl_graph *g = dl_graph_new(ctx);
    const char *syms[] = {"batch", NULL, NULL, NULL};
    int64_t d[4] = {sym ? -1 : xd[0], xd[1], xd[2], xd[3]};
    dl_value *in[3] = {dl_input(g, "x", dt, 4, d, syms), i64s(ctx, g, 8, pads), NULL};
    if (value) {
        dl_tensor *t = NULL;
        if (dl_tensor_new(ctx, dt, 0, NULL, &t) == DL_OK)
            memcpy(dl_tensor_data(t), value, dl_dtype_size(dt));
        in[2] = dl_constant(g, NULL, t);
    }
    char attr[32];
    snprintf(attr, sizeof attr, "mode=%s", mode);
    const char *attrs[] = {attr};
    dl_value *y[1] = {NULL};
    dl_add_node(g, "Pad", value ? 3 : 2, in, 1, y, 1, attrs);
    dl_output(g, y[0], "y");
    const int64_t batches[] = {2, 3};
    check_graph(ctx, g, what, copies, fallbacks, batches, sym ? 2 : 1);
}

static void test_pads(dl_ctx *ctx) {
    const int64_t xd[] = {2, 3, 5, 6};
    const float f15 = 1.5f;
    const int64_t i7 = -7;
    const unsigned char u200 = 200;
    const uint16_t h = 0x3c00; /* float16 1.0 */
    pad_case(ctx, "pad of zeros around H and W", DL_F32, xd, (int64_t[]){0, 0, 1, 2, 0, 0, 2, 0},
             NULL, "constant", false, 1, 0);
    pad_case(ctx, "pad of 1.5 on every axis", DL_F32, xd, (int64_t[]){1, 2, 0, 1, 1, 0, 3, 1}, &f15,
             "constant", false, 1, 0);
    pad_case(ctx, "pad of 1.5 at the ends only", DL_F32, xd, (int64_t[]){0, 0, 0, 0, 0, 1, 2, 1},
             &f15, "constant", false, 1, 0);
    pad_case(ctx, "pad with crops", DL_F32, xd, (int64_t[]){0, 0, -1, 2, 0, -1, 1, -2}, &f15,
             "constant", false, 1, 0);
    pad_case(ctx, "pad that only crops", DL_F32, xd, (int64_t[]){0, -1, -1, 0, -1, 0, -2, -3}, NULL,
             "constant", false, 1, 0);
    pad_case(ctx, "pad that crops an axis away", DL_F32, xd, (int64_t[]){0, 0, 2, 0, 0, 0, -5, 0},
             &f15, "constant", false, 1, 0);
    pad_case(ctx, "pad int64 of -7", DL_I64, xd, (int64_t[]){0, 1, 1, 1, 0, 0, 0, 2}, &i7,
             "constant", false, 1, 0);
    pad_case(ctx, "pad uint8 of 200", DL_U8, xd, (int64_t[]){0, 0, 3, 3, 0, 0, 3, 3}, &u200,
             "constant", false, 1, 0);
    pad_case(ctx, "pad float16 of 1", DL_F16, xd, (int64_t[]){0, 0, 0, 1, 0, 0, 0, 1}, &h,
             "constant", false, 1, 0);
    const int64_t bd[] = {8, 16, 64, 64};
    pad_case(ctx, "pad of [8, 16, 64, 64] (threads)", DL_F32, bd,
             (int64_t[]){0, 0, 1, 2, 0, 0, 3, 1}, &f15, "constant", false, 1, 0);
    /* the reference kernel keeps the other modes and symbolic dims */
    pad_case(ctx, "pad reflect", DL_F32, xd, (int64_t[]){0, 0, 1, 2, 0, 0, 2, 1}, NULL, "reflect",
             false, 0, 1);
    pad_case(ctx, "pad of a symbolic batch", DL_F32, xd, (int64_t[]){0, 0, 1, 1, 0, 0, 1, 1}, NULL,
             "constant", true, 0, 1);
    /* pads, or the constant, from a graph input: the reference kernel */
    for (int which = 1; which <= 2; which++) {
        dl_graph *g = dl_graph_new(ctx);
        const int64_t pd[] = {8}, none[] = {0};
        dl_value *in[3] = {dl_input(g, "x", DL_F32, 4, xd, NULL),
                           which == 1 ? dl_input(g, "p", DL_I64, 1, pd, NULL)
                                      : i64s(ctx, g, 8, (int64_t[]){0, 0, 1, 1, 0, 0, 1, 1}),
                           which == 2 ? dl_input(g, "v", DL_F32, 0, none, NULL) : NULL};
        dl_value *y[1] = {NULL};
        dl_add_node(g, "Pad", which == 2 ? 3 : 2, in, 1, y, 0, NULL);
        dl_output(g, y[0], "y");
        check_graph(ctx, g,
                    which == 1 ? "pad with pads from an input"
                               : "pad with its constant from an input",
                    0, 1, NULL, 0);
    }
}

/* DepthToSpace (DCR or CRD; opset 13) or SpaceToDepth of x [N, c, h, w] (N symbolic when
 * sym) with block size b, as one COPY move (`copies` 1) or the reference kernel. */
static void space_depth_case(dl_ctx *ctx, const char *what, const char *op, const char *mode,
                             dl_dtype dt, const int64_t *xd, int64_t b, bool sym, int copies) {
    dl_graph *g = dl_graph_new(ctx);
    const char *names[1] = {"N"};
    int64_t d[4] = {sym ? -1 : xd[0], xd[1], xd[2], xd[3]};
    dl_value *in[1] = {dl_input(g, "x", dt, 4, d, names)}, *y[1] = {NULL};
    char bs[32], md[32];
    snprintf(bs, sizeof bs, "blocksize=%lld", (long long)b);
    snprintf(md, sizeof md, "mode=%s", mode ? mode : "DCR");
    const char *at[2] = {bs, md};
    dl_add_node(g, op, 1, in, 1, y, mode ? 2 : 1, at);
    dl_output(g, y[0], "y");
    const int64_t batches[] = {1, 3};
    check_graph(ctx, g, what, copies, 1 - copies, batches, sym ? 2 : 1);
}

static void test_space_depth(dl_ctx *ctx) {
    const int64_t d8[] = {2, 8, 3, 5}, d18[] = {1, 18, 4, 3}, s[] = {2, 3, 6, 10};
    space_depth_case(ctx, "DepthToSpace DCR, block 2", "DepthToSpace", "DCR", DL_F32, d8, 2, false,
                     1);
    space_depth_case(ctx, "DepthToSpace CRD, block 2, symbolic batch", "DepthToSpace", "CRD",
                     DL_F32, d8, 2, true, 1);
    space_depth_case(ctx, "DepthToSpace CRD, block 3, bytes", "DepthToSpace", "CRD", DL_U8, d18, 3,
                     false, 1);
    space_depth_case(ctx, "DepthToSpace DCR (default mode), block 3, int64", "DepthToSpace", NULL,
                     DL_I64, d18, 3, false, 1);
    space_depth_case(ctx, "SpaceToDepth, block 2, symbolic batch", "SpaceToDepth", NULL, DL_F32, s,
                     2, true, 1);
    space_depth_case(ctx, "SpaceToDepth, block 2, float16", "SpaceToDepth", NULL, DL_F16, s, 2,
                     false, 1);
    const int64_t big[] = {1, 256, 32, 32}; /* 1 MiB: moved over the threads */
    space_depth_case(ctx, "DepthToSpace CRD of [1, 256, 32, 32]", "DepthToSpace", "CRD", DL_F32,
                     big, 2, false, 1);
    /* a symbolic channel count: the reference kernel */
    dl_graph *g = dl_graph_new(ctx);
    const char *names[2] = {NULL, "C"}; /* by dim */
    dl_value *in[1] = {dl_input(g, "x", DL_F32, 4, (int64_t[]){1, -1, 3, 5}, names)}, *y[1] = {0};
    const char *at[1] = {"blocksize=2"};
    dl_add_node(g, "DepthToSpace", 1, in, 1, y, 1, at);
    dl_output(g, y[0], "y");
    check_graph(ctx, g, "DepthToSpace of a symbolic channel count", 0, 1, NULL, 0);
}

int main(void) {
    char dir[] = "/tmp/dlcc-test-copy-XXXXXX";
    if (!test_cache_open(dir, &opts)) return 1;
    opts.threads = 2;
    dl_ctx *ctx = dl_ctx_new();
    test_slices(ctx);
    test_splits_concats(ctx);
    test_split_num_outputs(ctx);
    test_gathers(ctx);
    test_pads(ctx);
    test_space_depth(ctx);
    dl_ctx_free(ctx);
    test_cache_remove(dir);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
