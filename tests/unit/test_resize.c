/* test_resize.c — Resize and Upsample as a native kernel (a RESIZE group: dlrt_resize2d with
 * the taps src/ops/resize.c works out, emitted as tables; select.c, emit-params.c) against the
 * reference interpreter's own Resize (every output a sum over all axes' taps, in double):
 *   - nearest (every nearest_mode), linear and cubic; half_pixel, pytorch_half_pixel,
 *     align_corners, asymmetric, half_pixel_symmetric, tf_half_pixel_for_nn; upsampling,
 *     downsampling and odd factors; scales and sizes (keep_aspect_ratio_policy too);
 *     exclude_outside; Resize-10 and Upsample-9 / -7; ranks 2, 3 (the last axis alone), 4 with
 *     a symbolic batch at two sizes, and 5; nearest results bit for bit;
 *   - the same bits with 1 and 2 threads;
 *   - nodes that stay with the reference kernel: tf_crop_and_resize, a resized channel axis,
 *     tf_half_pixel_for_nn where it moves the leading axes (or may: a symbolic batch), scales
 *     that are not constant, integer data. */
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
/* test-graph.h's scalar constant is not needed here */
#pragma GCC diagnostic ignored "-Wunused-function"
#include "test-graph.h"

static dl_compile_options opts;
static char dir[] = "/tmp/dlcc-test-resize-XXXXXX";

/* One Resize (or Upsample) node on x [dims, dim 0 symbolic when sym], its scales or sizes
 * constants (NULL: absent) or, with scales_input, a graph input. */
typedef struct rcase {
    const char *name, *op;
    int opset, rank;
    int64_t dims[5];
    bool sym;
    const float *scales;
    const int64_t *sizes;
    bool scales_input;
    dl_dtype dtype;
    const char *attrs[6];
    int n_sizes;  /* sizes' length (0: the rank) */
    bool special; /* inf, NaN and -0 among the data */
    bool sym_hw;  /* the last two dims symbolic too */
} rcase;

static dl_value *const_f32(dl_ctx *ctx, dl_graph *g, int n, const float *v) {
    int64_t d = n;
    dl_tensor *t = NULL;
    if (dl_tensor_new(ctx, DL_F32, 1, &d, &t) != DL_OK) return NULL;
    if (n) memcpy(dl_tensor_data(t), v, sizeof(float) * (size_t)n);
    return dl_constant(g, NULL, t);
}

static dl_value *const_i64(dl_ctx *ctx, dl_graph *g, int n, const int64_t *v) {
    int64_t d = n;
    dl_tensor *t = NULL;
    if (dl_tensor_new(ctx, DL_I64, 1, &d, &t) != DL_OK) return NULL;
    memcpy(dl_tensor_data(t), v, sizeof(int64_t) * (size_t)n);
    return dl_constant(g, NULL, t);
}

static dl_graph *case_graph(dl_ctx *ctx, const rcase *c) {
    dl_graph *g = dl_graph_new(ctx);
    const char *sym[5] = {"N", NULL, NULL, "H", "W"};
    if (c->rank == 4) sym[2] = "H", sym[3] = "W";
    int64_t xd[5];
    for (int d = 0; d < c->rank; d++)
        xd[d] = (d == 0 && c->sym) || (d >= c->rank - 2 && c->sym_hw) ? -1 : c->dims[d];
    dl_value *in[4] = {dl_input(g, "x", c->dtype ? c->dtype : DL_F32, c->rank, xd, sym)};
    int n_in = 1;
    const bool upsample = !strcmp(c->op, "Upsample");
    if (c->scales_input) {
        const int64_t sd = c->rank;
        if (!upsample && c->opset >= 11) in[n_in++] = const_f32(ctx, g, 0, NULL); /* roi */
        in[n_in++] = dl_input(g, "scales", DL_F32, 1, &sd, NULL);
    } else if (upsample && c->opset >= 9) {
        in[n_in++] = const_f32(ctx, g, c->rank, c->scales);
    } else if (!upsample && c->opset < 11) {
        in[n_in++] = const_f32(ctx, g, c->rank, c->scales);
    } else if (!upsample) {
        in[n_in++] = const_f32(ctx, g, 0, NULL); /* roi */
        in[n_in++] = c->scales ? const_f32(ctx, g, c->rank, c->scales) : const_f32(ctx, g, 0, NULL);
        if (c->sizes) in[n_in++] = const_i64(ctx, g, c->n_sizes ? c->n_sizes : c->rank, c->sizes);
    }
    int na = 0;
    while (na < 6 && c->attrs[na]) na++;
    dl_value *y = NULL;
    if (dl_add_node_ex(g, NULL, c->op, c->opset, n_in, in, 1, &y, na, c->attrs, 0, NULL) == DL_OK)
        dl_output(g, y, "y");
    return g;
}

static dl_tensor *case_input(dl_ctx *ctx, const rcase *c, int64_t batch, int i) {
    int64_t d[5];
    for (int k = 0; k < c->rank; k++) d[k] = k == 0 && c->sym ? batch : c->dims[k];
    if (i == 1) { /* the scales as an input */
        const int64_t n = c->rank;
        dl_tensor *t = NULL;
        if (dl_tensor_new(ctx, DL_F32, 1, &n, &t) == DL_OK)
            memcpy(dl_tensor_data(t), c->scales, sizeof(float) * (size_t)n);
        return t;
    }
    if (c->dtype && c->dtype != DL_F32) {
        dl_tensor *t = NULL;
        if (dl_tensor_new(ctx, c->dtype, c->rank, d, &t) != DL_OK) return NULL;
        unsigned char *p = dl_tensor_data(t);
        for (int64_t k = 0; k < dl_tensor_numel(t) * (int64_t)dl_dtype_size(c->dtype); k++)
            p[k] = (unsigned char)(k * 7 + 3);
        return t;
    }
    dl_tensor *t = rand_tensor(ctx, c->rank, d);
    float *v = t ? dl_tensor_data(t) : NULL;
    for (int64_t k = 0; c->special && v && k < dl_tensor_numel(t); k++)
        v[k] = k % 13 == 4 ? INFINITY : k % 17 == 9 ? NAN : k % 5 == 1 ? -0.0f : v[k];
    return t;
}

/* Whether p gives the reference interpreter's outputs on the inputs: bit for bit (tol 0), or
 * within tol relative (allclose with atol = 0.1 * tol), the same infinities and NaNs (of any
 * payload) in the same places either way. */
static bool ref_same(dl_ctx *ctx, dl_graph *g, dl_program *p, int n_in, dl_tensor *const *in,
                     double tol) {
    dl_tensor *want = NULL, *got = NULL;
    bool same = dl_run(ctx, g, DL_BACKEND_REF, n_in, NULL, in, &want) == DL_OK &&
                dl_program_run(ctx, p, n_in, NULL, in, &got) == DL_OK &&
                dl_tensor_numel(want) == dl_tensor_numel(got) &&
                dl_tensor_dtype(want) == dl_tensor_dtype(got);
    const size_t es = same ? dl_dtype_size(dl_tensor_dtype(got)) : 0;
    for (int64_t i = 0; same && i < dl_tensor_numel(got); i++) {
        const double a = dl_get_f64(got, i), b = dl_get_f64(want, i);
        if (isnan(a) || isnan(b))
            same = isnan(a) && isnan(b);
        else if (tol == 0 || isinf(a) || isinf(b))
            same = !memcmp((const char *)dl_tensor_data(got) + (size_t)i * es,
                           (const char *)dl_tensor_data(want) + (size_t)i * es, es);
        else
            same = fabs(a - b) <= tol * (0.1 + fabs(b));
        if (!same) printf("  [%lld] got %.9g want %.9g\n", (long long)i, a, b);
    }
    if (!same) printf("  %s\n", dl_errmsg(ctx));
    dl_ctx_clear(ctx);
    dl_tensor_free(want);
    dl_tensor_free(got);
    return same;
}

/* The case compiled: one RESIZE group (native) or one fallback, then against the reference at
 * one or two batches (within 1e-5; bit for bit for nearest), and 2 threads against 1. */
static void check_case(dl_ctx *ctx, const rcase *c, bool native, bool exact) {
    char nm[256];
    dl_graph *g = case_graph(ctx, c);
    dl_program *p = NULL, *p2 = NULL;
    if (!compile_case(ctx, g, &opts, c->name, DL_G_RESIZE, "a resize kernel", native, &p, &p2))
        return;
    const int n_in = c->scales_input ? 2 : 1;
    for (int64_t batch = 1; batch <= (c->sym ? 3 : 1); batch += 2) {
        dl_tensor *in[2] = {case_input(ctx, c, batch, 0),
                            n_in > 1 ? case_input(ctx, c, batch, 1) : NULL};
        snprintf(nm, sizeof nm, "%s, batch %lld: native equals ref (%s)", c->name, (long long)batch,
                 exact ? "bit for bit" : "within 1e-5");
        CHECK(nm, ref_same(ctx, g, p, n_in, in, exact ? 0 : 1e-5));
        snprintf(nm, sizeof nm, "%s, batch %lld: the same bits with 2 threads", c->name,
                 (long long)batch);
        CHECK(nm, same_bits_1_2(ctx, p, p2, n_in, in));
        dl_tensor_free(in[0]), dl_tensor_free(in[1]);
    }
    dl_program_free(p);
    dl_program_free(p2);
    dl_graph_free(g);
}

static const float up2[4] = {1, 1, 2, 2}, odd[4] = {1, 1, 1.5f, 2.5f}, down[4] = {1, 1, 0.5f, 0.6f};

static void test_modes(dl_ctx *ctx) {
    static const char *nearest[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};
    static const char *coords[] = {"half_pixel", "pytorch_half_pixel",   "align_corners",
                                   "asymmetric", "half_pixel_symmetric", "tf_half_pixel_for_nn"};
    char nm[128], a_nm[64], a_ct[64];
    for (int m = 0; m < 3; m++) {
        const char *mode = m == 0 ? "nearest" : m == 1 ? "linear" : "cubic";
        for (size_t ci = 0; ci < sizeof coords / sizeof *coords; ci++) {
            if (m && ci == 5) continue; /* tf_half_pixel_for_nn is for nearest */
            for (int f = 0; f < 3; f++) {
                const float *sc = f == 0 ? up2 : f == 1 ? odd : down;
                snprintf(nm, sizeof nm, "%s %s, scales %g x %g", mode, coords[ci], sc[2], sc[3]);
                snprintf(a_nm, sizeof a_nm, "mode=%s", mode);
                snprintf(a_ct, sizeof a_ct, "coordinate_transformation_mode=%s", coords[ci]);
                /* clang-format off */
                rcase c = {nm, "Resize", 19, 4, {2, 3, 9, 11}, true, sc, NULL, false, 0,
                           {a_nm, a_ct, m == 0 ? "nearest_mode=round_prefer_ceil" : NULL}};
                /* clang-format on */
                /* tf_half_pixel_for_nn reads o + 0.5 on every axis, so that the batch and
                 * channel axes are not the identity: with round_prefer_ceil they shift by one
                 * (and the batch is a symbol): the reference kernel */
                check_case(ctx, &c, ci != 5, m == 0);
            }
        }
    }
    for (size_t k = 0; k < sizeof nearest / sizeof *nearest; k++) {
        snprintf(a_nm, sizeof a_nm, "nearest_mode=%s", nearest[k]);
        snprintf(nm, sizeof nm, "nearest, %s, scales 1.5 x 2.5", nearest[k]);
        /* clang-format off */
        rcase c = {nm, "Resize", 13, 4, {1, 2, 7, 5}, false, odd, NULL, false, 0, {"mode=nearest", a_nm}};
        /* clang-format on */
        check_case(ctx, &c, true, true);
    }
}

static void test_shapes(dl_ctx *ctx) {
    static const int64_t sizes[4] = {1, 3, 17, 4}, sizes3[3] = {2, 3, 29};
    static const float s3[3] = {1, 1, 3.5f}, s5[5] = {1, 2, 1, 2, 3}, s2[2] = {2, 3},
                       s5keep[5] = {1, 1, 1, 2, 3};
    /* one case a line */
    /* clang-format off */
    const rcase cases[] = {
        {"linear sizes 17 x 4", "Resize", 13, 4, {1, 3, 8, 9}, false, NULL, sizes, false, 0, {"mode=linear"}},
        {"cubic exclude_outside, a = -0.5", "Resize", 13, 4, {1, 3, 8, 9}, false, up2, NULL, false, 0,
         {"mode=cubic", "exclude_outside=1", "cubic_coeff_a=-0.5"}},
        {"linear not_larger sizes 17 x 4 on axes 2, 3", "Resize", 18, 4, {1, 3, 8, 9}, false, NULL,
         sizes + 2, false, 0, {"mode=linear", "keep_aspect_ratio_policy=not_larger", "axes=[2,3]"}, 2},
        {"rank 3: the last axis alone", "Resize", 13, 3, {2, 3, 10}, false, s3, NULL, false, 0, {"mode=linear"}},
        {"rank 3 sizes", "Resize", 13, 3, {2, 3, 10}, false, NULL, sizes3, false, 0, {"mode=nearest"}},
        {"rank 2", "Resize", 13, 2, {6, 7}, false, s2, NULL, false, 0, {"mode=linear"}},
        {"rank 5, symbolic batch", "Resize", 13, 5, {2, 2, 3, 4, 5}, true, s5keep, NULL, false, 0, {"mode=linear"}},
        {"tf_half_pixel_for_nn, round_prefer_floor: leading axes the identity", "Resize", 13, 4,
         {2, 3, 5, 6}, false, odd, NULL, false, 0,
         {"mode=nearest", "coordinate_transformation_mode=tf_half_pixel_for_nn"}},
        {"Resize-10 nearest", "Resize", 10, 4, {1, 2, 5, 6}, false, up2, NULL, false, 0, {"mode=nearest"}},
        {"Upsample-9 linear", "Upsample", 9, 4, {2, 2, 5, 6}, true, up2, NULL, false, 0, {"mode=linear"}},
        {"Upsample-7 nearest", "Upsample", 7, 4, {1, 2, 5, 6}, false, up2, NULL, false, 0,
         {"mode=nearest", "scales=[1.0,1.0,2.0,2.0]"}},
        /* 1M outputs, rows split over 2 threads at row 2079, the second of a repeated pair:
         * each piece computes its first row, never copies it from the other's */
        {"nearest 2x of 33 x 63 x 128, over threads", "Resize", 13, 4, {1, 33, 63, 128}, false, up2, NULL,
         false, 0, {"mode=nearest"}},
        /* a tap of weight 0 adds nothing, as in the reference: no inf * 0 = NaN, and -0 of the
         * data comes out +0 (sums from +0) */
        {"linear asymmetric 2x over inf, NaN and -0", "Resize", 13, 4, {1, 2, 6, 7}, false, up2, NULL, false, 0,
         {"mode=linear", "coordinate_transformation_mode=asymmetric"}, 0, true},
        {"nearest 2x over inf, NaN and -0", "Resize", 13, 4, {1, 2, 6, 7}, false, up2, NULL, false, 0,
         {"mode=nearest"}, 0, true},
        {"rank 3 linear over inf: the channel axis left as it is", "Resize", 13, 3, {1, 3, 8}, false, s3,
         NULL, false, 0, {"mode=linear", "coordinate_transformation_mode=asymmetric"}, 0, true},
        {"nearest floor with exclude_outside: weights 0 at the edge", "Resize", 13, 4, {1, 2, 5, 6}, false,
         up2, NULL, false, 0, {"mode=nearest", "nearest_mode=floor", "exclude_outside=1"}},
        {"a wide row (256 -> 512)", "Resize", 13, 4, {1, 2, 3, 256}, false, up2, NULL, false, 0, {"mode=linear"}},
    };
    /* clang-format on */
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        check_case(ctx, &cases[i], true, strstr(cases[i].attrs[0], "nearest") != NULL);
    /* clang-format off */
    const rcase kept[] = {
        {"tf_crop_and_resize", "Resize", 13, 4, {1, 2, 5, 6}, false, up2, NULL, false, 0,
         {"mode=linear", "coordinate_transformation_mode=tf_crop_and_resize"}},
        {"a resized channel axis", "Resize", 13, 5, {1, 2, 3, 4, 5}, false, s5, NULL, false, 0, {"mode=nearest"}},
        {"scales from an input", "Resize", 10, 4, {1, 2, 5, 6}, false, up2, NULL, true, 0, {"mode=nearest"}},
        {"tf_half_pixel_for_nn, round_prefer_ceil: the channels shift", "Resize", 13, 4,
         {1, 3, 5, 6}, false, up2, NULL, false, 0,
         {"mode=nearest", "coordinate_transformation_mode=tf_half_pixel_for_nn",
          "nearest_mode=round_prefer_ceil"}},
        /* weights that overflow float (rank 2: no leading axis whose taps would be checked) */
        {"cubic with cubic_coeff_a 3e38", "Resize", 13, 2, {5, 6}, false, s2, NULL, false, 0,
         {"mode=cubic", "cubic_coeff_a=3e38"}},
        {"scales from an input, symbolic height and width", "Resize", 13, 4, {1, 2, 5, 6}, false, up2, NULL,
         true, 0, {"mode=linear"}, 0, false, true},
        {"uint8 data", "Resize", 13, 4, {1, 2, 5, 6}, false, up2, NULL, false, DL_U8, {"mode=nearest"}},
    };
    /* clang-format on */
    for (size_t i = 0; i < sizeof kept / sizeof *kept; i++) check_case(ctx, &kept[i], false, true);
}

int main(void) {
    if (!test_cache_open(dir, &opts)) return 1;
    opts.threads = 1;
    dl_ctx *ctx = dl_ctx_new();
    test_modes(ctx);
    test_shapes(ctx);
    dl_ctx_free(ctx);
    test_cache_remove(dir);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
