/* test_tuning.c — tuning records (src/codegen/tuning.c) and their use: keys, the file's round
 * trip and every way a line can be malformed, dlrt_conv.tuned in the runtime's choice, and
 * convolutions compiled with each algorithm forced (as `dlcc tune` compiles them), with a record
 * from a file, or as the cost model picks for random geometries and batches, compared with the
 * reference interpreter. */
#include "../../src/runtime/profile.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHECK_PRINT_PASS
#include "check.h"
#include "test-cache.h"
#include "native-ref.h"
#include "test-rng.h"

static dl_compile_options opts;
static char dir[] = "/tmp/dlcc-test-tuning-XXXXXX";

static dlrt_conv conv2d(int64_t n, int64_t ci, int64_t co, int64_t hw, int64_t k, int64_t s,
                        int64_t pad) {
    dlrt_conv p = {.nsp = 2, .n = n, .c_in = ci, .c_out = co, .group = 1};
    for (int d = 0; d < 3; d++)
        p.in[d] = p.out[d] = p.k[d] = p.stride[d] = p.dil[d] = 1, p.pad_begin[d] = 0;
    for (int d = 0; d < 2; d++) {
        p.in[d] = hw, p.k[d] = k, p.stride[d] = s, p.pad_begin[d] = pad;
        p.out[d] = (hw + 2 * pad - k) / s + 1;
    }
    return p;
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static void test_keys(void) {
    char key[DL_TUNING_KEY_MAX];
    dlrt_conv p = conv2d(2, 64, 256, 56, 1, 1, 0);
    dl_tuning_conv_key(&p, "avx512", key, sizeof key);
    CHECK("key of a 2-D convolution",
          strcmp(key, "avx512 n=2 c=64>256 g=1 in=56x56 k=1x1 s=1x1 d=1x1 p=0x0 out=56x56") == 0);
    p.bf16 = 1;
    dl_tuning_conv_key(&p, "avx512", key, sizeof key);
    CHECK("a layer with bfloat16 products has its own key",
          strcmp(key, "avx512+bf16 n=2 c=64>256 g=1 in=56x56 k=1x1 s=1x1 d=1x1 p=0x0 out=56x56") ==
              0);
    p.bf16 = 0;
    p.n = 0;
    dl_tuning_conv_key(&p, "avx2", key, sizeof key);
    CHECK("a symbolic batch is n=*",
          strcmp(key, "avx2 n=* c=64>256 g=1 in=56x56 k=1x1 s=1x1 d=1x1 p=0x0 out=56x56") == 0);
    p.nsp = 1;
    dl_tuning_conv_key(&p, "generic", key, sizeof key);
    CHECK("key of a 1-D convolution",
          strcmp(key, "generic n=* c=64>256 g=1 in=56 k=1 s=1 d=1 p=0 out=56") == 0);
}

static void test_choice(void) {
    dlrt_conv p = conv2d(1, 16, 16, 32, 3, 1, 1);
    const int model = dlrt_conv_choose(&p);
    p.tuned = 1 + DLRT_CONV_WINOGRAD_F2;
    CHECK("tuned: the runtime runs the recorded algorithm",
          dlrt_conv_choose(&p) == DLRT_CONV_WINOGRAD_F2 &&
              dlrt_conv_choose_packed(&p, 1) == DLRT_CONV_WINOGRAD_F2);
    CHECK("tuned: the packing follows the record",
          dlrt_conv_packs_weights(&p) == DLRT_WG2_PACKED ||
              dlrt_conv_packs_weights(&p) == DLRT_WG2_PACKED_T);
    p.tuned = 1 + DLRT_CONV_GEMM_1X1; /* not a 1x1 layer */
    CHECK("tuned: an algorithm that does not apply leaves the cost model's pick",
          dlrt_conv_choose(&p) == model);
    p.tuned = 99;
    CHECK("tuned: an out-of-range value leaves the cost model's pick",
          dlrt_conv_choose(&p) == model);
}

static void test_file(dl_ctx *ctx) {
    char path[256];
    snprintf(path, sizeof path, "%s/t.txt", dir);
    dl_tuning *t = dl_tuning_new();
    CHECK("set two records, replace one",
          t && dl_tuning_set(ctx, t, "avx512 n=1 a", DLRT_CONV_IM2COL, "first") == DL_OK &&
              dl_tuning_set(ctx, t, "avx512 n=1 b", DLRT_CONV_WINOGRAD, NULL) == DL_OK &&
              dl_tuning_set(ctx, t, "avx512 n=1 a", DLRT_CONV_IMPLICIT, "again") == DL_OK &&
              dl_tuning_count(t) == 2 && dl_tuning_get(t, "avx512 n=1 a") == DLRT_CONV_IMPLICIT &&
              dl_tuning_get(t, "avx512 n=1 c") == -1);
    CHECK("a bad algorithm is refused",
          dl_tuning_set(NULL, t, "k", DL_TUNING_MODEL + 1, NULL) != DL_OK &&
              dl_tuning_set(NULL, t, "k", -1, NULL) != DL_OK && dl_tuning_count(t) == 2);
    CHECK("write", dl_tuning_write(ctx, t, path, "line one\nline two") == DL_OK);
    dl_tuning_free(t);
    dl_tuning *back = NULL;
    CHECK("read back: the same records",
          dl_tuning_load(ctx, path, false, &back) == DL_OK && dl_tuning_count(back) == 2 &&
              dl_tuning_get(back, "avx512 n=1 a") == DLRT_CONV_IMPLICIT &&
              dl_tuning_get(back, "avx512 n=1 b") == DLRT_CONV_WINOGRAD);
    /* written again, the file is byte for byte the same (notes and header kept) */
    char again[256];
    snprintf(again, sizeof again, "%s/t2.txt", dir);
    void *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    CHECK("a record's note survives a round trip",
          back && dl_tuning_write(ctx, back, again, "line one\nline two") == DL_OK &&
              dl_read_file(ctx, path, 1 << 20, &a, &na) == DL_OK &&
              dl_read_file(ctx, again, 1 << 20, &b, &nb) == DL_OK && na == nb &&
              memcmp(a, b, na) == 0 && strstr(a, "# line two\n") && strstr(a, "  # again\n"));
    dl_free(a), dl_free(b);
    dl_tuning_free(back);

    snprintf(path, sizeof path, "%s/missing.txt", dir);
    dl_tuning *m = NULL;
    CHECK("a missing file is empty when allowed",
          dl_tuning_load(ctx, path, true, &m) == DL_OK && dl_tuning_count(m) == 0);
    dl_tuning_free(m);
    m = NULL;
    CHECK("a missing file is an error naming it", dl_tuning_load(ctx, path, false, &m) != DL_OK &&
                                                      !m && strstr(dl_errmsg(ctx), "missing.txt") &&
                                                      strstr(dl_errmsg(ctx), "tuning file"));
    dl_ctx_clear(ctx);

    static const struct {
        const char *text, *want;
    } bad[] = {
        {"# ok\nconvolution a -> im2col\n", "line 2: expected 'conv KEY -> ALGORITHM'"},
        {"conv a im2col\n", "line 1: expected 'conv KEY -> ALGORITHM' with a key"},
        {"conv  -> im2col\n", "with a key"},
        {"conv a -> fastest\n", "unknown algorithm 'fastest' (gemm1x1, im2col"},
        {"conv a -> im2col extra\n", "unexpected text after the algorithm"},
        {"conv a\x01 -> im2col\n", "not printable ASCII"},
        {"conv a -> im2col\n\n#\nconv b -> \n", "line 4: unknown algorithm ''"},
    };
    snprintf(path, sizeof path, "%s/bad.txt", dir);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_text(path, bad[i].text);
        m = NULL;
        const dl_status s = dl_tuning_load(ctx, path, false, &m);
        char name[160];
        snprintf(name, sizeof name, "malformed file %zu fails with \"%s\"", i, bad[i].want);
        CHECK(name, s == DL_ERR_PARSE && !m && strstr(dl_errmsg(ctx), bad[i].want));
        if (s == DL_OK || !strstr(dl_errmsg(ctx), bad[i].want)) printf("  %s\n", dl_errmsg(ctx));
        dl_tuning_free(m);
        dl_ctx_clear(ctx);
    }
    /* a long line and a NUL byte */
    char *longl = malloc(DL_TUNING_LINE_MAX + 64);
    if (longl) {
        memset(longl, 'x', DL_TUNING_LINE_MAX + 8);
        memcpy(longl, "conv ", 5);
        strcpy(longl + DL_TUNING_LINE_MAX + 8, " -> im2col\n");
        write_text(path, longl);
        free(longl);
        m = NULL;
        CHECK("a line over the cap fails", dl_tuning_load(ctx, path, false, &m) == DL_ERR_LIMIT &&
                                               !m && strstr(dl_errmsg(ctx), "longer than"));
        dl_ctx_clear(ctx);
    }
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite("conv a\0b -> im2col\n", 1, 19, f);
        fclose(f);
    }
    m = NULL;
    CHECK("a NUL byte fails",
          dl_tuning_load(ctx, path, false, &m) == DL_ERR_PARSE && strstr(dl_errmsg(ctx), "NUL"));
    dl_ctx_clear(ctx);
    /* comments, blank lines, CRLF, a note, blanks after the arrow, "model" */
    write_text(path, "\r\n  # c\nconv avx2 n=1 x -> direct\t# 0.1 ms\r\nconv y ->  winograd2x2\n"
                     "conv z -> model  # kept");
    m = NULL;
    CHECK("comments, blank lines, CRLF, blanks after the arrow, model, no final newline",
          dl_tuning_load(ctx, path, false, &m) == DL_OK && dl_tuning_count(m) == 3 &&
              dl_tuning_get(m, "avx2 n=1 x") == DLRT_CONV_DIRECT &&
              dl_tuning_get(m, "y") == DLRT_CONV_WINOGRAD_F2 &&
              dl_tuning_get(m, "z") == DL_TUNING_MODEL);
    dl_tuning_free(m);
    /* the longest line a file may hold: its note is cut so that the file dlcc writes back reads
     * back (it had grown by the "  # " of the written note and failed the next read) */
    char *full = malloc(DL_TUNING_LINE_MAX + 8);
    if (full) {
        const int head = snprintf(full, DL_TUNING_LINE_MAX, "conv long -> im2col #");
        memset(full + head, 'n', (size_t)(DL_TUNING_LINE_MAX - 1 - head));
        strcpy(full + DL_TUNING_LINE_MAX - 1, "\n");
        write_text(path, full);
        free(full);
        m = NULL;
        char twice[256];
        snprintf(twice, sizeof twice, "%s/long2.txt", dir);
        dl_tuning *m2 = NULL;
        CHECK("a longest line reads, writes back and reads again",
              dl_tuning_load(ctx, path, false, &m) == DL_OK &&
                  dl_tuning_write(ctx, m, twice, NULL) == DL_OK &&
                  dl_tuning_load(ctx, twice, false, &m2) == DL_OK &&
                  dl_tuning_get(m2, "long") == DLRT_CONV_IM2COL);
        dl_tuning_free(m), dl_tuning_free(m2);
        dl_ctx_clear(ctx);
    }
    /* more records than the cap: the error names the file and line */
    f = fopen(path, "w");
    for (int i = 0; f && i <= 4096; i++) fprintf(f, "conv k%d -> im2col\n", i);
    if (f) fclose(f);
    m = NULL;
    CHECK("more than 4096 records fail at the line past the cap",
          dl_tuning_load(ctx, path, false, &m) == DL_ERR_LIMIT && !m &&
              strstr(dl_errmsg(ctx), "bad.txt' line 4097") &&
              strstr(dl_errmsg(ctx), "more than 4096"));
    dl_ctx_clear(ctx);
}

/* x [batch (-1: symbolic), ci, hw, hw] -> Conv(k, s, pad, group) + bias -> Relu, weights
 * constant. */
static dl_graph *conv_graph_g(dl_ctx *ctx, int64_t batch, int64_t ci, int64_t co, int64_t hw, int k,
                              int s, int pad, int group) {
    dl_graph *g = dl_graph_new(ctx);
    const int64_t xd[] = {batch, ci, hw, hw}, wd[] = {co, ci / group, k, k}, bd[] = {co};
    const char *sym[] = {"N", NULL, NULL, NULL};
    dl_value *x = dl_input(g, "x", DL_F32, 4, xd, sym);
    dl_tensor *w = NULL, *b = NULL;
    dl_tensor_new(ctx, DL_F32, 4, wd, &w);
    dl_tensor_new(ctx, DL_F32, 1, bd, &b);
    if (!w || !b) return g;
    for (int64_t i = 0; i < dl_tensor_numel(w); i++)
        ((float *)dl_tensor_data(w))[i] = frand() * 0.2f;
    for (int64_t i = 0; i < co; i++) ((float *)dl_tensor_data(b))[i] = frand();
    dl_value *in[3] = {x, dl_parameter(g, "w", w), dl_parameter(g, "b", b)};
    char ks[48], ss[48], ps[64], gs[32];
    snprintf(ks, sizeof ks, "kernel_shape=[%d,%d]", k, k);
    snprintf(ss, sizeof ss, "strides=[%d,%d]", s, s);
    snprintf(ps, sizeof ps, "pads=[%d,%d,%d,%d]", pad, pad, pad, pad);
    snprintf(gs, sizeof gs, "group=%d", group);
    const char *al[4] = {ks, ss, ps, gs};
    dl_value *out[1] = {NULL};
    dl_add_node(g, "Conv", 3, in, 1, out, 4, al);
    dl_output(g, dl_relu(g, out[0]), "y");
    return g;
}

static dl_graph *conv_graph(dl_ctx *ctx, int64_t batch, int64_t ci, int64_t co, int64_t hw, int k,
                            int s, int pad) {
    return conv_graph_g(ctx, batch, ci, co, hw, k, s, pad, 1);
}

/* Convolutions of random geometry and batch (1-4; groups, depthwise, strides, pads, 1x1 to
 * 7x7), compiled as the cost model picks, against the reference: the picks on packed weights
 * and on a batch differ (test_rtconv's test_packed_pick), which the kernel tests that force
 * each algorithm never reach. First the layer where that gave NaNs. */
static void test_random_convs(dl_ctx *ctx) {
    int bad = 0, ran = 0;
    for (int c = 0; c < 40; c++) {
        int64_t n = 2, ci = 32, co = 16, hw = 48;
        int k = 3, s = 1, pad = 1, group = 1;
        if (c > 0) {
            static const int ks[] = {1, 3, 3, 5, 7};
            n = irand(1, 4), k = ks[irand(0, 4)], s = (int)irand(1, 2), pad = (int)irand(0, k / 2);
            group = irand(0, 4) == 0 ? 2 : 1;
            ci = group * (int64_t)(1 << irand(0, 6)), co = group * (int64_t)(1 << irand(1, 6));
            if (irand(0, 5) == 0) group = (int)ci, co = ci * irand(1, 2); /* depthwise */
            hw = irand(k > 2 * pad ? k - 2 * pad : 1, 40);
        }
        const int64_t ho = (hw + 2 * pad - k) / s + 1;
        if (n * co * (ci / group) * k * k * ho * ho > 30000000) continue;
        dl_graph *g = conv_graph_g(ctx, n, ci, co, hw, k, s, pad, group);
        const int64_t xd[] = {n, ci, hw, hw};
        dl_tensor *x = NULL;
        dl_tensor_new(ctx, DL_F32, 4, xd, &x);
        for (int64_t i = 0; x && i < dl_tensor_numel(x); i++)
            ((float *)dl_tensor_data(x))[i] = frand();
        dl_program *prog = NULL;
        double e = INFINITY;
        if (x && dl_compile(ctx, g, &opts, &prog) == DL_OK) {
            dl_tensor *in[1] = {x};
            e = native_vs_ref(ctx, g, prog, 1, in);
        }
        ran++;
        if (!(e < 1e-4)) {
            bad++;
            printf("  n=%lld c=%lld->%lld g=%d %lldx%lld k=%d s=%d p=%d: max rel err %.3g %s\n",
                   (long long)n, (long long)ci, (long long)co, group, (long long)hw, (long long)hw,
                   k, s, pad, e, dl_errmsg(ctx));
            dl_ctx_clear(ctx);
        }
        dl_program_free(prog);
        dl_tensor_free(x);
        dl_graph_free(g);
    }
    char name[96];
    snprintf(name, sizeof name, "%d random convolutions compiled natively match the reference",
             ran);
    CHECK(name, bad == 0 && ran >= 20);
}

/* Each algorithm forced on a layer it applies to, as dlcc tune compiles it, against the
 * reference interpreter; the batch is symbolic, run at 2. */
static void forced_case(dl_ctx *ctx, int64_t ci, int64_t co, int64_t hw, int k, int s, int pad) {
    dl_graph *g = conv_graph(ctx, -1, ci, co, hw, k, s, pad);
    const int64_t xd[] = {2, ci, hw, hw};
    dl_tensor *x = NULL;
    dl_tensor_new(ctx, DL_F32, 4, xd, &x);
    for (int64_t i = 0; x && i < dl_tensor_numel(x); i++) ((float *)dl_tensor_data(x))[i] = frand();
    dlrt_conv p = conv2d(2, ci, co, hw, k, s, pad);
    for (int a = 0; a < DLRT_CONV_ALGOS; a++) {
        if (a == DLRT_CONV_DEPTHWISE || !dlrt_conv_algo_ok(&p, a)) continue;
        dl_program *prog = NULL;
        char name[200];
        snprintf(name, sizeof name, "%lld->%lld %lldx%lld k%d s%d forced %s: compiles, runs it",
                 (long long)ci, (long long)co, (long long)hw, (long long)hw, k, s,
                 dlrt_conv_algo_name(a));
        const bool ok = dl_compile_tuned(ctx, g, &opts, NULL, a, &prog) == DL_OK;
        char want[32];
        snprintf(want, sizeof want, ".tuned = %d", 1 + a);
        CHECK(name, ok && prog->stats.tuned_convs == 1 && strstr(dl_sb_str(&prog->source), want));
        if (!ok) {
            printf("  %s\n", dl_errmsg(ctx));
            dl_ctx_clear(ctx);
            continue;
        }
        dl_tensor *in[1] = {x};
        const double e = native_vs_ref(ctx, g, prog, 1, in);
        snprintf(name, sizeof name,
                 "%lld->%lld %lldx%lld k%d s%d forced %s: matches the reference "
                 "(max rel err %.2g)",
                 (long long)ci, (long long)co, (long long)hw, (long long)hw, k, s,
                 dlrt_conv_algo_name(a), e);
        CHECK(name, e < 1e-4);
        dl_program_free(prog);
    }
    dl_tensor_free(x);
    dl_graph_free(g);
}

/* dl_compile reads the file its options name: a record changes the generated code, a malformed
 * file stops the compile with the file's message. */
static void test_compile_with_file(dl_ctx *ctx) {
    dl_graph *g = conv_graph(ctx, 1, 16, 16, 32, 3, 1, 1);
    dl_program *plain = NULL, *tuned = NULL;
    char path[256], text[512], key[DL_TUNING_KEY_MAX];
    snprintf(path, sizeof path, "%s/c.txt", dir);
    CHECK("compile without records", dl_compile(ctx, g, &opts, &plain) == DL_OK &&
                                         plain->stats.tuned_convs == 0 &&
                                         !strstr(dl_sb_str(&plain->source), ".tuned"));
    dlrt_conv p = conv2d(1, 16, 16, 32, 3, 1, 1);
    const int model = plain ? dlrt_conv_choose_packed(&p, 1) : -1;
    const int other = model == DLRT_CONV_IM2COL ? DLRT_CONV_IMPLICIT : DLRT_CONV_IM2COL;
    dl_tuning_conv_key(&p, plain ? plain->stats.isa : "?", key, sizeof key);
    snprintf(text, sizeof text, "conv %s -> %s\nconv avx2 n=1 other -> direct\n", key,
             dlrt_conv_algo_name(other));
    write_text(path, text);
    dl_compile_options o = opts;
    o.tuning = path;
    char want[32];
    snprintf(want, sizeof want, ".tuned = %d", 1 + other);
    CHECK("a record for the layer is written into the code",
          dl_compile(ctx, g, &o, &tuned) == DL_OK && tuned->stats.tuned_convs == 1 &&
              strstr(dl_sb_str(&tuned->source), want));
    const int64_t xd[] = {1, 16, 32, 32};
    dl_tensor *x = NULL;
    dl_tensor_new(ctx, DL_F32, 4, xd, &x);
    for (int64_t i = 0; x && i < dl_tensor_numel(x); i++) ((float *)dl_tensor_data(x))[i] = frand();
    dl_tensor *in[1] = {x};
    CHECK("the tuned program matches the reference",
          tuned && native_vs_ref(ctx, g, tuned, 1, in) < 1e-4);
    dl_program_free(tuned);
    tuned = NULL;
    /* a "model" record: compiled as without one */
    snprintf(text, sizeof text, "conv %s -> model  # kept\n", key);
    write_text(path, text);
    CHECK("a 'model' record leaves the cost model's pick",
          dl_compile(ctx, g, &o, &tuned) == DL_OK && tuned->stats.tuned_convs == 0 &&
              !strstr(dl_sb_str(&tuned->source), ".tuned"));
    dl_program_free(tuned);
    tuned = NULL;
    /* a record for another instruction set is not this one's */
    snprintf(text, sizeof text, "conv zz%s -> %s\n", key, dlrt_conv_algo_name(other));
    write_text(path, text);
    CHECK("records of other keys leave the cost model's pick",
          dl_compile(ctx, g, &o, &tuned) == DL_OK && tuned->stats.tuned_convs == 0);
    dl_program_free(tuned);
    tuned = NULL;
    write_text(path, "conv x -> quick\n");
    CHECK("a malformed file fails the compile with its message",
          dl_compile(ctx, g, &o, &tuned) == DL_ERR_PARSE && !tuned &&
              strstr(dl_errmsg(ctx), "c.txt' line 1: unknown algorithm 'quick'"));
    dl_ctx_clear(ctx);
    dl_tensor_free(x);
    dl_program_free(plain);
    dl_graph_free(g);
}

/* dl_tune on a one-convolution graph: one record, naming an algorithm that applies; with a
 * margin of 99% nothing beats the cost model's pick by it, so the record is that pick. */
static void test_tune(dl_ctx *ctx) {
    dl_graph *g = conv_graph(ctx, 1, 16, 16, 24, 3, 1, 1);
    const int64_t xd[] = {1, 16, 24, 24};
    dl_tensor *x = NULL;
    dl_tensor_new(ctx, DL_F32, 4, xd, &x);
    for (int64_t i = 0; x && i < dl_tensor_numel(x); i++) ((float *)dl_tensor_data(x))[i] = frand();
    dl_tensor *in[1] = {x};
    for (int strict = 0; strict < 2; strict++) {
        dl_tuning *db = dl_tuning_new();
        dl_tune_opts to = {.rounds = 2, .warmup = 0, .iters = 3, .margin = strict ? 0.99 : 0.0};
        dl_tune_result res;
        const dl_status s = dl_tune(ctx, g, &opts, 1, in, &to, db, &res);
        dlrt_conv p = conv2d(1, 16, 16, 24, 3, 1, 1);
        char key[DL_TUNING_KEY_MAX];
        dl_program *base = NULL;
        dl_compile(ctx, g, &opts, &base);
        dl_tuning_conv_key(&p, base ? base->stats.isa : "?", key, sizeof key);
        const int algo = dl_tuning_get(db, key);
        CHECK(strict ? "dl_tune, margin 99%: one layer, one record, keeping the cost model's pick"
                     : "dl_tune: one layer, one record, an algorithm that applies or 'model'",
              s == DL_OK && res.layers == 1 && res.keys == 1 && dl_tuning_count(db) == 1 &&
                  (algo == DL_TUNING_MODEL || (algo >= 0 && dlrt_conv_algo_ok(&p, algo))) &&
                  (!strict || (res.changed == 0 && algo == DL_TUNING_MODEL)));
        if (s != DL_OK) printf("  %s\n", dl_errmsg(ctx));
        dl_program_free(base);
        dl_tuning_free(db);
        dl_ctx_clear(ctx);
    }
    dl_tensor_free(x);
    dl_graph_free(g);
}

int main(void) {
    if (!test_cache_open(dir, &opts)) return 1;
    dl_ctx *ctx = dl_ctx_new();
    test_keys();
    test_choice();
    test_file(ctx);
    dl_ctx_clear(ctx);
    forced_case(ctx, 16, 16, 20, 3, 1, 1); /* Winograd both sizes, im2col, implicit, direct */
    forced_case(ctx, 8, 24, 12, 1, 1, 0);  /* 1x1: GEMM, im2col, implicit */
    forced_case(ctx, 6, 10, 15, 3, 2, 1);  /* stride 2: im2col, implicit */
    forced_case(ctx, 3, 16, 17, 7, 2, 3);  /* a stem: im2col, implicit */
    forced_case(ctx, 3, 16, 32, 3, 1, 1);  /* few taps: direct too */
    test_compile_with_file(ctx);
    test_tune(ctx);
    test_random_convs(ctx);
    dl_ctx_free(ctx);
    test_cache_remove(dir);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
