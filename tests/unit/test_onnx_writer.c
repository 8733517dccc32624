/* test_onnx_writer.c — dl_save_onnx round trips.
 *
 * (1) ONNX backend test cases (attributes of every kind the data has, omitted optional inputs and
 *     outputs, a non-default domain, many dtypes): load, save, reload; the reloaded graph has the
 *     same structure and gives bit-identical outputs on the reference interpreter, and saving it
 *     again gives the same bytes. Pass case folders as arguments to run those instead.
 * (2) a graph from the builder API with a symbolic batch dim: same outputs for two batch sizes,
 *     the dim keeps its name, parameters come back as initializers and plain constants as
 *     constants (through Constant nodes), unused constants are left out.
 * (3) every IR attribute type (float, int, string with NUL bytes, tensor, floats, ints, strings,
 *     tensors) survives byte for byte; an RNN with activations/activation_alpha runs the same.
 * (4) errors: an unwritable path is DL_ERR_IO with a message and leaves nothing behind; a subgraph
 *     attribute is DL_ERR_UNSUPPORTED.
 * When /usr/bin/python3 has onnx, onnx.checker.check_model validates some saved files; when the
 * python3 on PATH has onnxruntime, it runs the builder model and compares with dlcc. */
#include "../../src/frontend/onnx-impl.h"
#include "../../src/ops/op-impl.h"

#include <dirent.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

static dl_ctx *ctx;
#define CHECK_FAIL_DETAIL() printf(" [%s]", dl_errmsg(ctx))
#include "check.h"
#include "test-rng.h"

#define TESTDATA "/usr/share/libonnx-testdata/data/node"

static const char *const cases[] = {
    /* float, int, string, tensor and ints attributes */
    "test_leakyrelu",
    "test_elu",
    "test_gemm_all_attributes",
    "test_batchnorm_epsilon",
    "test_hardsigmoid",
    "test_softmax_axis_0",
    "test_concat_2d_axis_0",
    "test_argmax_keepdims_example_select_last_index",
    "test_flatten_axis1",
    "test_averagepool_2d_same_upper",
    "test_depthtospace_crd_mode",
    "test_constant_pad",
    "test_bitshift_left_uint16",
    "test_conv_with_autopad_same",
    "test_einsum_batch_matmul",
    "test_constantofshape_float_ones",
    "test_constantofshape_int_zeros",
    "test_constant",
    "test_transpose_all_permutations_0",
    "test_maxpool_2d_pads",
    "test_basic_conv_with_padding",
    "test_convtranspose_autopad_same",
    "test_cumsum_1d_reverse_exclusive",
    "test_slice_neg_steps",
    /* omitted optional inputs ("" in the middle, trailing ones dropped) */
    "test_clip_default_inbounds",
    "test_clip_default_int8_max",
    "test_resize_upsample_scales_nearest",
    "test_resize_downsample_sizes_nearest",
    "test_resize_tf_crop_and_resize",
    "test_stft",
    /* omitted optional outputs, several outputs */
    "test_lstm_defaults",
    "test_gru_with_initial_bias",
    "test_simple_rnn_defaults",
    "test_rnn_seq_length",
    "test_dropout_default_mask",
    "test_batchnorm_example_training_mode",
    "test_split_equal_parts_1d",
    "test_top_k",
    /* a non-default domain (ai.onnx.preview.training) */
    "test_adagrad",
    "test_adam",
    "test_momentum_multiple",
    /* larger expanded graphs with Constant nodes turned into initializers */
    "test_layer_normalization_4d_axis1_expanded",
    "test_celu_expanded",
    "test_dynamicquantizelinear_expanded",
    "test_hannwindow_expanded",
    /* dtypes and data-dependent shapes */
    "test_cast_FLOAT_to_FLOAT16",
    "test_equal_bcast",
    "test_where_example",
    "test_mod_mixed_sign_int8",
    "test_nonzero_example",
    "test_gather_0",
    "test_reduce_sum_keepdims_example",
    "test_shape_start_1",
    "test_range_float_type_positive_delta",
    "test_qlinearmatmul_2D",
    "test_reshape_negative_dim",
    "test_pow_types_int32_float32",
};

static char tmpdir[64];
static bool have_onnx, have_ort;
static int onnx_checked;

static bool same_tensor(const dl_tensor *a, const dl_tensor *b) {
    return a && b && a->dtype == b->dtype && a->rank == b->rank &&
           memcmp(a->dims, b->dims, sizeof(int64_t) * (size_t)a->rank) == 0 &&
           a->nbytes == b->nbytes && (a->nbytes == 0 || memcmp(a->data, b->data, a->nbytes) == 0);
}

static void free_tensors(dl_tensor **t, int n) {
    for (int i = 0; i < n; i++) dl_tensor_free(t[i]);
}

/* Runs g on the reference interpreter; out gets dl_graph_num_outputs(g) tensors. */
static bool run_ref(dl_graph *g, int n_in, dl_tensor **in, dl_tensor **out) {
    for (int i = 0; i < dl_graph_num_outputs(g); i++) out[i] = NULL;
    return dl_run(ctx, g, DL_BACKEND_REF, n_in, NULL, in, out) == DL_OK;
}

static bool same_outputs(dl_graph *a, dl_graph *b, int n_in, dl_tensor **in) {
    int n = dl_graph_num_outputs(a);
    if (n != dl_graph_num_outputs(b) || n > 16) return false;
    dl_tensor *oa[16], *ob[16];
    bool ok = run_ref(a, n_in, in, oa) && run_ref(b, n_in, in, ob);
    for (int i = 0; ok && i < n; i++) ok = same_tensor(oa[i], ob[i]);
    free_tensors(oa, n);
    free_tensors(ob, n);
    return ok;
}

static const char *value_name_or_empty(const dl_value *v) {
    return v ? v->name : "";
}

/* Same inputs, outputs, live nodes (op, domain, name, inputs, outputs, attribute names). */
static bool same_structure(dl_graph *a, dl_graph *b) {
    if (a->inputs.len != b->inputs.len || a->outputs.len != b->outputs.len) return false;
    for (int i = 0; i < a->inputs.len; i++)
        if (strcmp(dl_value_name(a->inputs.items[i]), dl_value_name(b->inputs.items[i])) != 0)
            return false;
    for (int i = 0; i < a->outputs.len; i++)
        if (strcmp(dl_value_name(a->outputs.items[i]), dl_value_name(b->outputs.items[i])) != 0)
            return false;
    int j = 0;
    for (int i = 0; i < a->nodes.len; i++) {
        dl_node *na = a->nodes.items[i];
        if (na->dead) continue;
        if (j >= b->nodes.len) return false;
        dl_node *nb = b->nodes.items[j++];
        if (na->op != nb->op || strcmp(na->name, nb->name) != 0 || na->n_out != nb->n_out ||
            na->n_attrs != nb->n_attrs || na->opset != nb->opset)
            return false;
        int n_in = na->n_in > nb->n_in ? na->n_in : nb->n_in;
        for (int k = 0; k < n_in; k++)
            if (strcmp(value_name_or_empty(k < na->n_in ? na->in[k] : NULL),
                       value_name_or_empty(k < nb->n_in ? nb->in[k] : NULL)) != 0)
                return false;
        for (int k = 0; k < na->n_out; k++)
            if (strcmp(value_name_or_empty(na->out[k]), value_name_or_empty(nb->out[k])) != 0)
                return false;
        for (int k = 0; k < na->n_attrs; k++)
            if (strcmp(na->attrs[k].name, nb->attrs[k].name) != 0 ||
                na->attrs[k].type != nb->attrs[k].type)
                return false;
    }
    /* every constant of b is a's, with the same data, and an initializer only when it was one */
    for (int i = 0; i < b->values.len; i++) {
        dl_value *vb = b->values.items[i], *va = dl_graph_find_value(a, vb->name);
        if (vb->constant && (!va || !va->constant || va->is_initializer != vb->is_initializer ||
                             !same_tensor(va->constant, vb->constant)))
            return false;
    }
    return j == b->nodes.len;
}

static bool same_file(const char *p, const char *q) {
    void *a, *b;
    size_t na, nb;
    if (dl_read_file(ctx, p, (size_t)1 << 30, &a, &na) != DL_OK) return false;
    if (dl_read_file(ctx, q, (size_t)1 << 30, &b, &nb) != DL_OK) {
        dl_free(a);
        return false;
    }
    bool same = na == nb && memcmp(a, b, na) == 0;
    dl_free(a);
    dl_free(b);
    return same;
}

static void onnx_check(const char *path, const char *what) {
    if (!have_onnx) return;
    char cmd[PATH_MAX + 200];
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 -c 'import onnx,sys; onnx.checker.check_model(sys.argv[1])' '%s'",
             path);
    char name[200];
    snprintf(name, sizeof name, "onnx.checker accepts %s", what);
    CHECK(name, system(cmd) == 0);
    onnx_checked++;
}

/* Reads test_data_set_0/input_N.pb of a case into in; returns the count or -1. */
static int load_inputs(const char *dir, dl_graph *g, dl_tensor **in, int cap) {
    int n = 0;
    for (;; n++) {
        char p[PATH_MAX];
        snprintf(p, sizeof p, "%s/test_data_set_0/input_%d.pb", dir, n);
        if (access(p, R_OK) != 0) break;
        if (n == cap || dl_onnx_load_tensor_file(ctx, p, &in[n], NULL) != DL_OK) {
            free_tensors(in, n);
            return -1;
        }
        /* onnx 1.12 wrote bfloat16 test tensors as uint16 bit patterns */
        if (n < dl_graph_num_inputs(g) && in[n]->dtype == DL_U16 &&
            dl_value_dtype(dl_graph_input(g, n)) == DL_BF16)
            in[n]->dtype = DL_BF16;
    }
    return n;
}

static const char *const checked_cases[] = {
    "test_lstm_defaults",
    "test_resize_upsample_scales_nearest",
    "test_adam",
    "test_constantofshape_float_ones",
    "test_averagepool_2d_same_upper",
    "test_celu_expanded",
    "test_clip_default_inbounds",
};

static void round_trip_case(const char *dir) {
    const char *base = strrchr(dir, '/') ? strrchr(dir, '/') + 1 : dir;
    char model[PATH_MAX], saved[PATH_MAX], again[PATH_MAX], name[300];
    snprintf(model, sizeof model, "%s/model.onnx", dir);
    snprintf(saved, sizeof saved, "%s/%s.onnx", tmpdir, base);
    snprintf(again, sizeof again, "%s/%s.again.onnx", tmpdir, base);
    dl_ctx_clear(ctx);
    dl_graph *g = NULL, *r = NULL, *r2 = NULL;
    dl_tensor *in[32];
    int n_in = -1;
    bool ok = dl_load_onnx(ctx, model, &g) == DL_OK;
    snprintf(name, sizeof name, "%s: loads", base);
    CHECK(name, ok);
    if (ok) {
        ok = dl_save_onnx(ctx, g, saved) == DL_OK;
        snprintf(name, sizeof name, "%s: saves", base);
        CHECK(name, ok);
    }
    if (ok) {
        ok = dl_load_onnx(ctx, saved, &r) == DL_OK;
        snprintf(name, sizeof name, "%s: saved model reloads", base);
        CHECK(name, ok);
    }
    if (ok) {
        snprintf(name, sizeof name, "%s: same structure after reload", base);
        CHECK(name, same_structure(g, r));
        n_in = load_inputs(dir, g, in, 32);
        snprintf(name, sizeof name, "%s: test inputs load", base);
        CHECK(name, n_in >= 0);
    }
    if (n_in >= 0) {
        snprintf(name, sizeof name, "%s: reloaded graph gives bit-identical outputs", base);
        CHECK(name, same_outputs(g, r, n_in, in));
        free_tensors(in, n_in);
        snprintf(name, sizeof name, "%s: saving the reloaded graph gives the same bytes", base);
        CHECK(name, dl_save_onnx(ctx, r, again) == DL_OK && same_file(saved, again) &&
                        dl_load_onnx(ctx, again, &r2) == DL_OK);
    }
    for (size_t i = 0; ok && i < DL_ARRAY_LEN(checked_cases); i++)
        if (strcmp(base, checked_cases[i]) == 0) onnx_check(saved, base);
    dl_graph_free(g);
    dl_graph_free(r);
    dl_graph_free(r2);
}

/* ---- (2) the builder API ---- */
static dl_tensor *rand_tensor(int rank, const int64_t *dims) {
    dl_tensor *t;
    if (dl_tensor_new(ctx, DL_F32, rank, dims, &t) != DL_OK) return NULL;
    for (int64_t i = 0; i < t->numel; i++) ((float *)t->data)[i] = frand();
    return t;
}

static dl_graph *build_cnn(void) {
    dl_graph *g = dl_graph_new(ctx);
    const int64_t xd[] = {-1, 3, 8, 8}, wd[] = {4, 3, 3, 3}, bd[] = {4}, fd[] = {10, 64},
                  fb[] = {10}, ud[] = {5};
    const char *const syms[] = {"N", NULL, NULL, NULL};
    dl_value *x = dl_input(g, "image", DL_F32, 4, xd, syms);
    /* parameters become initializers, plain constants Constant nodes */
    dl_value *w = dl_parameter(g, "conv.weight", rand_tensor(4, wd));
    dl_value *b = dl_parameter(g, "conv.bias", rand_tensor(1, bd));
    dl_value *fw = dl_parameter(g, "fc.weight", rand_tensor(2, fd));
    dl_value *fbias = dl_constant(g, "fc.bias", rand_tensor(1, fb));
    dl_parameter(g, "unused.weight", rand_tensor(1, ud));
    dl_value *h = dl_relu(g, dl_conv2d(g, x, w, b, 1, 1));
    h = dl_flatten(g, dl_maxpool2d(g, h, 2, 2), 1);
    h = dl_softmax(g, dl_relu(g, dl_gemm(g, h, fw, fbias, 1)), 1);
    dl_output(g, h, "probs");
    if (dl_graph_status(g) != DL_OK) {
        dl_graph_free(g);
        return NULL;
    }
    return g;
}

static void run_onnxruntime(const char *model, dl_tensor *in, dl_tensor *want) {
    char script[PATH_MAX], inp[PATH_MAX], outp[PATH_MAX], cmd[4 * PATH_MAX];
    snprintf(script, sizeof script, "%s/ort.py", tmpdir);
    snprintf(inp, sizeof inp, "%s/ort_in.npy", tmpdir);
    snprintf(outp, sizeof outp, "%s/ort_want.npy", tmpdir);
    FILE *f = fopen(script, "w");
    if (!f) return;
    fputs("import sys, numpy as np, onnxruntime as ort\n"
          "s = ort.InferenceSession(sys.argv[1], providers=['CPUExecutionProvider'])\n"
          "x, want = np.load(sys.argv[2]), np.load(sys.argv[3])\n"
          "got = s.run(None, {s.get_inputs()[0].name: x})[0]\n"
          "sys.exit(0 if got.shape == want.shape and np.allclose(got, want, rtol=1e-4, atol=1e-6) "
          "else 1)\n",
          f);
    fclose(f);
    bool saved = dl_npy_save(ctx, inp, in) == DL_OK && dl_npy_save(ctx, outp, want) == DL_OK;
    snprintf(cmd, sizeof cmd, "python3 '%s' '%s' '%s' '%s'", script, model, inp, outp);
    CHECK("onnxruntime runs the saved builder model and agrees with dlcc",
          saved && system(cmd) == 0);
}

static void test_builder(void) {
    char path[PATH_MAX], again[PATH_MAX];
    snprintf(path, sizeof path, "%s/cnn.onnx", tmpdir);
    snprintf(again, sizeof again, "%s/cnn.again.onnx", tmpdir);
    dl_ctx_clear(ctx);
    dl_graph *g = build_cnn(), *r = NULL, *r2 = NULL;
    CHECK("builder graph builds", g != NULL);
    if (!g) return;
    CHECK("builder graph saves", dl_save_onnx(ctx, g, path) == DL_OK);
    CHECK("builder graph reloads", dl_load_onnx(ctx, path, &r) == DL_OK);
    if (!r) {
        dl_graph_free(g);
        return;
    }
    dl_value *x = dl_graph_input(r, 0), *y = dl_graph_output(r, 0);
    CHECK("input keeps its name and shape",
          dl_graph_num_inputs(r) == 1 && strcmp(dl_value_name(x), "image") == 0 &&
              dl_value_rank(x) == 4 && dl_value_dim(x, 1) == 3 && dl_value_dim(x, 3) == 8);
    CHECK("symbolic batch dim keeps its name", dl_value_dim(x, 0) == -1 &&
                                                   dl_value_dim_name(x, 0) &&
                                                   strcmp(dl_value_dim_name(x, 0), "N") == 0);
    CHECK("output keeps its name and symbolic dim",
          dl_graph_num_outputs(r) == 1 &&
              strcmp(dl_value_name(y), dl_value_name(dl_graph_output(g, 0))) == 0 &&
              dl_value_dim_name(y, 0) && strcmp(dl_value_dim_name(y, 0), "N") == 0 &&
              dl_value_dim(y, 1) == 10);
    dl_value *cw = dl_graph_find_value(r, "conv.weight"), *fcb = dl_graph_find_value(r, "fc.bias");
    CHECK("weights keep their names", cw && fcb && cw->constant && fcb->constant);
    CHECK("parameters stay initializers, constants stay constants",
          cw && fcb && cw->is_initializer && !fcb->is_initializer);
    CHECK("constants nothing reads are left out", !dl_graph_find_value(r, "unused.weight"));
    CHECK("same structure after reload", same_structure(g, r));
    for (int batch = 2; batch <= 5; batch += 3) {
        const int64_t dims[] = {batch, 3, 8, 8};
        dl_tensor *in = rand_tensor(4, dims);
        char name[100];
        snprintf(name, sizeof name, "builder graph: bit-identical outputs at batch %d", batch);
        CHECK(name, in && same_outputs(g, r, 1, &in));
        if (batch == 2 && have_ort && in) {
            dl_tensor *out[1];
            if (run_ref(g, 1, &in, out)) run_onnxruntime(path, in, out[0]);
            free_tensors(out, 1);
        }
        dl_tensor_free(in);
    }
    CHECK("saving the reloaded builder graph gives the same bytes",
          dl_save_onnx(ctx, r, again) == DL_OK && same_file(path, again) &&
              dl_load_onnx(ctx, again, &r2) == DL_OK);
    onnx_check(path, "the builder model");
    dl_graph_free(g);
    dl_graph_free(r);
    dl_graph_free(r2);
}

/* ---- (3) every attribute type ---- */
static dl_tensor *small_tensor(dl_dtype dt, int rank, const int64_t *dims) {
    dl_tensor *t;
    if (dl_tensor_new(ctx, dt, rank, dims, &t) != DL_OK) return NULL;
    for (size_t i = 0; i < t->nbytes; i++) ((uint8_t *)t->data)[i] = (uint8_t)(i * 37 + 11);
    if (dt == DL_BOOL)
        for (size_t i = 0; i < t->nbytes; i++) ((uint8_t *)t->data)[i] &= 1;
    return t;
}

static void *arena_copy(dl_graph *g, const void *p, size_t n) {
    void *d = dl_arena_alloc(&g->arena, n);
    if (d) memcpy(d, p, n);
    return d;
}

static const float attr_floats[] = {1.5f, -0.0f, 3e38f};
static const int64_t attr_ints[] = {INT64_MIN, -1, 0, INT64_MAX};
static const char attr_bytes[] = {'a', 0, 'b', (char)0xff, 'c'};
static const char *const attr_strs[] = {"Sigmoid", "", "ünïcode"};

static dl_graph *build_attr_graph(bool with_subgraph) {
    dl_graph *g = dl_graph_new(ctx);
    const int64_t xd[] = {2, 3}, td[] = {2, 2}, hd[] = {3}, sd[] = {0};
    dl_value *x = dl_input(g, "x", DL_F32, 2, xd, NULL);
    /* Relu ignores attributes it does not know, so it can carry one of each type */
    const char *strs[] = {dl_arena_strdup(&g->arena, attr_strs[0]),
                          dl_arena_strdup(&g->arena, attr_strs[1]),
                          dl_arena_strdup(&g->arena, attr_strs[2])};
    dl_tensor *t = small_tensor(DL_I64, 2, td), *t1 = small_tensor(DL_F16, 1, hd),
              *t2 = small_tensor(DL_BOOL, 0, NULL), *t3 = small_tensor(DL_F32, 1, sd);
    dl_tensor **ts = dl_arena_alloc(&g->arena, 3 * sizeof *ts);
    if (!x || !t || !t1 || !t2 || !t3 || !ts) goto fail;
    ts[0] = t1, ts[1] = t2, ts[2] = t3;
    if (dl_graph_own_tensor(g, t) || dl_graph_own_tensor(g, t1) || dl_graph_own_tensor(g, t2) ||
        dl_graph_own_tensor(g, t3))
        goto fail;
    char *s = dl_arena_alloc(&g->arena, sizeof attr_bytes + 1); /* zeroed: NUL-terminated */
    if (!s) goto fail;
    memcpy(s, attr_bytes, sizeof attr_bytes);
    dl_attr a[9] = {
        {.name = "f", .type = DL_ATTR_FLOAT, .f = -2.75f},
        {.name = "i", .type = DL_ATTR_INT, .i = -1234567890123},
        {.name = "s", .type = DL_ATTR_STRING, .s = s, .s_len = sizeof attr_bytes},
        {.name = "t", .type = DL_ATTR_TENSOR, .t = t},
        {.name = "fs",
         .type = DL_ATTR_FLOATS,
         .n = 3,
         .floats = arena_copy(g, attr_floats, sizeof attr_floats)},
        {.name = "is",
         .type = DL_ATTR_INTS,
         .n = 4,
         .ints = arena_copy(g, attr_ints, sizeof attr_ints)},
        {.name = "ss",
         .type = DL_ATTR_STRINGS,
         .n = 3,
         .strings = arena_copy(g, strs, sizeof strs)},
        {.name = "ts", .type = DL_ATTR_TENSORS, .n = 3, .tensors = ts},
        {.name = "body", .type = DL_ATTR_GRAPH},
    };
    dl_value *y;
    if (dl_graph_add_value(g, "y", &y) != DL_OK ||
        dl_graph_add_node(g, "Relu", NULL, g->opset, "relu_with_attrs", 1, &x, 1, &y,
                          with_subgraph ? 9 : 8, a, NULL) != DL_OK)
        goto fail;
    /* RNN: activations (strings), activation_alpha (floats); Y omitted, only Y_h produced */
    const int64_t wd[] = {1, 4, 3}, rd[] = {1, 4, 4};
    dl_value *w = dl_constant(g, "W", rand_tensor(3, wd)),
             *rr = dl_constant(g, "R", rand_tensor(3, rd));
    const char **act = dl_arena_alloc(&g->arena, sizeof *act);
    float *alpha = dl_arena_alloc(&g->arena, sizeof *alpha);
    if (!w || !rr || !act || !alpha) goto fail;
    act[0] = dl_arena_strdup(&g->arena, "LeakyRelu");
    alpha[0] = 0.3f;
    dl_attr ra[3] = {{.name = "hidden_size", .type = DL_ATTR_INT, .i = 4},
                     {.name = "activations", .type = DL_ATTR_STRINGS, .n = 1, .strings = act},
                     {.name = "activation_alpha", .type = DL_ATTR_FLOATS, .n = 1, .floats = alpha}};
    /* x viewed as [seq 2, batch 1, input 3] */
    const int64_t shape3[] = {2, 1, 3};
    dl_tensor *sh;
    if (dl_tensor_new(ctx, DL_I64, 1, (const int64_t[]){3}, &sh) != DL_OK) goto fail;
    memcpy(sh->data, shape3, sizeof shape3);
    dl_value *xs = dl_op2(g, "Reshape", x, dl_constant(g, "seq_shape", sh), NULL);
    dl_value *rin[3] = {xs, w, rr}, *rout[2] = {NULL, NULL};
    if (!xs || dl_graph_add_value(g, "Y_h", &rout[1]) != DL_OK ||
        dl_graph_add_node(g, "RNN", NULL, g->opset, "rnn", 3, rin, 2, rout, 3, ra, NULL) != DL_OK ||
        dl_graph_infer(g) != DL_OK)
        goto fail;
    dl_output(g, y, NULL);
    dl_output(g, rout[1], NULL);
    if (dl_graph_status(g) == DL_OK) return g;
fail:
    dl_graph_free(g);
    return NULL;
}

static void test_attributes(void) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/attrs.onnx", tmpdir);
    dl_ctx_clear(ctx);
    dl_graph *g = build_attr_graph(false), *r = NULL;
    CHECK("attribute graph builds", g != NULL);
    if (!g) return;
    CHECK("attribute graph saves", dl_save_onnx(ctx, g, path) == DL_OK);
    CHECK("attribute graph reloads", dl_load_onnx(ctx, path, &r) == DL_OK);
    if (r) {
        CHECK("attribute graph: same structure", same_structure(g, r));
        dl_node *a = g->nodes.items[0], *b = r->nodes.items[0];
        const dl_attr *f = dl_node_attr(b, "f"), *i = dl_node_attr(b, "i"),
                      *str = dl_node_attr(b, "s"), *ss = dl_node_attr(b, "ss"),
                      *ts = dl_node_attr(b, "ts");
        const float *fs;
        const int64_t *is;
        CHECK("float attribute survives", f && f->type == DL_ATTR_FLOAT && f->f == -2.75f);
        CHECK("int attribute survives", i && i->type == DL_ATTR_INT && i->i == -1234567890123);
        CHECK("string attribute with NUL and 0xff bytes survives byte for byte",
              str && str->type == DL_ATTR_STRING && str->s_len == sizeof attr_bytes &&
                  memcmp(str->s, attr_bytes, sizeof attr_bytes) == 0);
        CHECK("tensor attribute survives",
              same_tensor(dl_attr_tensor(b, "t"), dl_attr_tensor(a, "t")));
        CHECK("floats attribute survives (-0.0 and 3e38 included)",
              dl_attr_floats(b, "fs", &fs) == 3 &&
                  memcmp(fs, attr_floats, sizeof attr_floats) == 0);
        CHECK("ints attribute survives (INT64_MIN/MAX included)",
              dl_attr_ints(b, "is", &is) == 4 && memcmp(is, attr_ints, sizeof attr_ints) == 0);
        CHECK("strings attribute survives (an empty one and UTF-8 included)",
              ss && ss->type == DL_ATTR_STRINGS && ss->n == 3 &&
                  strcmp(ss->strings[0], attr_strs[0]) == 0 &&
                  strcmp(ss->strings[1], attr_strs[1]) == 0 &&
                  strcmp(ss->strings[2], attr_strs[2]) == 0);
        const dl_attr *ts0 = dl_node_attr(a, "ts");
        CHECK("tensors attribute survives (float16, a bool scalar, an empty tensor)",
              ts && ts->type == DL_ATTR_TENSORS && ts->n == 3 &&
                  same_tensor(ts->tensors[0], ts0->tensors[0]) &&
                  same_tensor(ts->tensors[1], ts0->tensors[1]) &&
                  same_tensor(ts->tensors[2], ts0->tensors[2]));
        dl_node *rnn = r->nodes.items[r->nodes.len - 1];
        CHECK("omitted optional output stays omitted",
              strcmp(rnn->op->name, "RNN") == 0 && rnn->n_out == 2 && !rnn->out[0] && rnn->out[1]);
        const int64_t xd[] = {2, 3};
        dl_tensor *in = rand_tensor(2, xd);
        CHECK("RNN with activations and activation_alpha: bit-identical outputs",
              in && same_outputs(g, r, 1, &in));
        dl_tensor_free(in);
    }
    dl_graph_free(g);
    dl_graph_free(r);
}

/* A value with no name gets a fresh one that no other value has; the others keep theirs. */
static void test_names(void) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/names.onnx", tmpdir);
    dl_ctx_clear(ctx);
    dl_graph *g = dl_graph_new(ctx), *r = NULL;
    const int64_t d[] = {2};
    dl_value *x = dl_input(g, "", DL_F32, 1, d, NULL);
    dl_value *c = dl_constant(g, "value_1", rand_tensor(1, d));
    dl_output(g, dl_add(g, x, c), NULL);
    /* a node a pass has killed (still in the list, marked dead) and the constant only it read */
    dl_value *gone = dl_relu(g, dl_constant(g, "dead.input", rand_tensor(1, d)));
    if (gone) gone->producer->dead = true;
    bool ok = dl_graph_status(g) == DL_OK && dl_save_onnx(ctx, g, path) == DL_OK &&
              dl_load_onnx(ctx, path, &r) == DL_OK;
    CHECK("a graph with an unnamed input saves and reloads", ok);
    if (ok) {
        CHECK("the unnamed input gets a fresh name; the others keep theirs",
              strcmp(dl_value_name(dl_graph_input(r, 0)), "value_2") == 0 &&
                  dl_graph_find_value(r, "value_1") &&
                  dl_graph_find_value(r, "value_1")->constant &&
                  strcmp(dl_value_name(dl_graph_output(r, 0)),
                         dl_value_name(dl_graph_output(g, 0))) == 0);
        CHECK("dead nodes and the constants only they read are left out",
              r->nodes.len == 1 && !dl_graph_find_value(r, "dead.input") &&
                  !dl_graph_find_value(r, dl_value_name(gone)));
        dl_tensor *in = rand_tensor(1, d);
        CHECK("renamed graph: bit-identical outputs", in && same_outputs(g, r, 1, &in));
        dl_tensor_free(in);
    }
    dl_graph_free(g);
    dl_graph_free(r);
}

/* ---- (4) errors ---- */
static int count_entries(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    if (!d) return -1;
    for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

static void test_errors(void) {
    char blocker[PATH_MAX], path[PATH_MAX], sub[PATH_MAX];
    snprintf(blocker, sizeof blocker, "%s/not-a-dir", tmpdir);
    snprintf(path, sizeof path, "%s/model.onnx", blocker);
    FILE *f = fopen(blocker, "w");
    if (f) fclose(f);
    dl_graph *g = build_cnn();
    dl_ctx_clear(ctx);
    CHECK("unwritable path: DL_ERR_IO", g && dl_save_onnx(ctx, g, path) == DL_ERR_IO);
    CHECK("unwritable path: the message names the path",
          strstr(dl_errmsg(ctx), "not-a-dir/model.onnx") != NULL);
    dl_ctx_clear(ctx);
    CHECK("a directory in the way: DL_ERR_IO", g && dl_save_onnx(ctx, g, tmpdir) == DL_ERR_IO);
    dl_graph_free(g);

    snprintf(sub, sizeof sub, "%s/sub", tmpdir);
    mkdir(sub, 0777);
    snprintf(path, sizeof path, "%s/sub/loop.onnx", tmpdir);
    g = build_attr_graph(true);
    dl_ctx_clear(ctx);
    CHECK("subgraph attribute: DL_ERR_UNSUPPORTED",
          g && dl_save_onnx(ctx, g, path) == DL_ERR_UNSUPPORTED &&
              strstr(dl_errmsg(ctx), "subgraph") && strstr(dl_errmsg(ctx), "body"));
    CHECK("a failed save leaves no file behind", count_entries(sub) == 0);
    dl_graph_free(g);

    /* a failed save does not touch an existing file */
    snprintf(path, sizeof path, "%s/sub/keep.onnx", tmpdir);
    g = build_cnn();
    dl_graph *bad = build_attr_graph(true), *r = NULL;
    dl_ctx_clear(ctx);
    bool ok = g && bad && dl_save_onnx(ctx, g, path) == DL_OK &&
              dl_save_onnx(ctx, bad, path) == DL_ERR_UNSUPPORTED;
    dl_ctx_clear(ctx);
    CHECK("a failed save keeps the old file intact", ok && dl_load_onnx(ctx, path, &r) == DL_OK &&
                                                         same_structure(g, r) &&
                                                         count_entries(sub) == 1);
    dl_graph_free(g);
    dl_graph_free(bad);
    dl_graph_free(r);
}

/* Every allocation of a save failing in turn: a clean DL_ERR_NOMEM, no file, no temp file. */
static void test_alloc_failures(void) {
    char sub[PATH_MAX], path[PATH_MAX];
    snprintf(sub, sizeof sub, "%s/oom", tmpdir);
    snprintf(path, sizeof path, "%s/oom/cnn.onnx", tmpdir);
    mkdir(sub, 0777);
    dl_graph *g = build_cnn();
    if (!g) return;
    int failures = 0, bad = 0;
    dl_status s = DL_ERR_NOMEM;
    for (long n = 0; n < 10000 && s == DL_ERR_NOMEM; n++) {
        dl_ctx_clear(ctx);
        dl_alloc_fail_after(n);
        s = dl_save_onnx(ctx, g, path);
        dl_alloc_fail_after(-1);
        if (s == DL_ERR_NOMEM) {
            failures++;
            bad += !strstr(dl_errmsg(ctx), "out of memory") || count_entries(sub) != 0;
        }
    }
    CHECK("failing each allocation in turn: DL_ERR_NOMEM until the save succeeds",
          s == DL_OK && failures > 3);
    CHECK("a save that ran out of memory says so and leaves no file", bad == 0);
    dl_graph_free(g);
}

int main(int argc, char **argv) {
    ctx = dl_ctx_new();
    snprintf(tmpdir, sizeof tmpdir, "/tmp/dlcc-onnx-writer-XXXXXX");
    if (!ctx || !mkdtemp(tmpdir)) {
        printf("FAIL cannot create a context or a temporary folder\n0 passed, 1 failed\n");
        return 1;
    }
    have_onnx = system("/usr/bin/python3 -c 'import onnx' >/dev/null 2>&1") == 0;
    have_ort = system("python3 -c 'import onnxruntime, numpy' >/dev/null 2>&1") == 0;
    if (argc > 1) {
        for (int i = 1; i < argc; i++) round_trip_case(argv[i]);
    } else {
        int found = 0;
        for (size_t i = 0; i < DL_ARRAY_LEN(cases); i++) {
            char dir[PATH_MAX];
            snprintf(dir, sizeof dir, "%s/%s", TESTDATA, cases[i]);
            if (access(dir, R_OK) != 0) continue; /* test data not installed */
            found++;
            round_trip_case(dir);
        }
        if (!found)
            printf("note: no ONNX test data under %s; skipping the round-trip cases\n", TESTDATA);
        test_builder();
        test_attributes();
        test_names();
        test_errors();
        test_alloc_failures();
    }
    if (!have_onnx)
        printf("note: /usr/bin/python3 has no onnx module; onnx.checker not run\n");
    else
        printf("note: onnx.checker ran on %d saved files\n", onnx_checked);
    if (!have_ort) printf("note: python3 has no onnxruntime; onnxruntime comparison not run\n");
    char cmd[PATH_MAX];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) printf("note: could not remove %s\n", tmpdir);
    dl_ctx_free(ctx);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
