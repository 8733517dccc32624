/* test_rnn.c — LSTM, GRU and RNN as a native kernel (an RNN group: dlrt_rnn_forward,
 * src/kernels/rt/rnn.c) against the reference interpreter's own, which runs each batch row on its
 * own in double: forward, reverse and bidirectional; with and without the bias and the initial
 * states; GRU with and without linear_before_reset; every output or only Y; the default
 * activations spelled out; sizes off the vector width; a symbolic batch and a symbolic sequence
 * at two sizes each; a sequence longer than the input shares held at once, both ways; enough
 * work to be split over the threads: a step's gate pass, the recurrent product of one row, and
 * the directions of a bidirectional layer side by side (1 vs 2 threads bit for bit). Nodes the
 * kernel does not take
 * (other activations, clip, sequence_lens, layout 1, peepholes, input_forget) keep the reference
 * kernel. */
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
static char dir[] = "/tmp/dlcc-test-rnn-XXXXXX";

typedef struct rcase {
    const char *name;
    const char *op; /* "LSTM", "GRU", "RNN" */
    const char *direction;
    int64_t T, B, I, H;
    bool sym_b, sym_t;       /* the batch / the sequence a symbol, run at two sizes */
    bool bias, h0, c0;       /* optional inputs given */
    int n_out;               /* outputs asked for: 1 (Y) to 3 */
    const char *extra;       /* one more attribute ("linear_before_reset=1", ...) or NULL */
    const char *extra2;      /* and another */
    bool seq_lens, peephole; /* inputs the kernel leaves to the reference */
    bool native;
    bool const_wr; /* W and R constants (initializers), packed at load */
} rcase;

static int gates(const char *op) {
    return !strcmp(op, "LSTM") ? 4 : !strcmp(op, "GRU") ? 3 : 1;
}

static int dirs_of(const rcase *c) {
    return !strcmp(c->direction, "bidirectional") ? 2 : 1;
}

/* A [d0, d1, d2] (or [d0, d1]: d2 0) input of values uniform in [-scale, scale). */
static dl_tensor *rand_tensor(dl_ctx *ctx, int64_t d0, int64_t d1, int64_t d2, double scale) {
    const int64_t d[3] = {d0, d1, d2};
    dl_tensor *t = NULL;
    if (dl_tensor_new(ctx, DL_F32, d2 ? 3 : 2, d, &t) != DL_OK) return NULL;
    for (int64_t i = 0; i < dl_tensor_numel(t); i++) dl_set_f64(t, i, scale * frand());
    return t;
}

static void check_case(dl_ctx *ctx, const rcase *c) {
    char nm[300];
    const int G = gates(c->op), D = dirs_of(c);
    const int64_t T = c->T, B = c->B, I = c->I, H = c->H;
    dl_graph *g = dl_graph_new(ctx);
    const char *sym_x[3] = {"T", "N", NULL}, *sym_h[3] = {NULL, "N", NULL};
    const int64_t xd[3] = {c->sym_t ? -1 : T, c->sym_b ? -1 : B, I};
    const int64_t wd[3] = {D, G * H, I}, rd[3] = {D, G * H, H}, bd[2] = {D, 2 * G * H};
    const int64_t hd[3] = {D, c->sym_b ? -1 : B, H}, pd[2] = {D, 3 * H}, sd[1] = {B};
    dl_value *in[8] = {0};
    in[0] = dl_input(g, "x", DL_F32, 3, xd, sym_x);
    const double ws = 1.0 / sqrt((double)H); /* PyTorch's initial scale */
    if (c->const_wr) {
        in[1] = dl_constant(g, "w", rand_tensor(ctx, D, G * H, I, ws));
        in[2] = dl_constant(g, "r", rand_tensor(ctx, D, G * H, H, ws));
    } else {
        in[1] = dl_input(g, "w", DL_F32, 3, wd, NULL);
        in[2] = dl_input(g, "r", DL_F32, 3, rd, NULL);
    }
    if (c->bias) in[3] = dl_input(g, "b", DL_F32, 2, bd, NULL);
    if (c->seq_lens) in[4] = dl_input(g, "seq", DL_I32, 1, sd, NULL);
    if (c->h0) in[5] = dl_input(g, "h0", DL_F32, 3, hd, sym_h);
    if (c->c0) in[6] = dl_input(g, "c0", DL_F32, 3, hd, sym_h);
    if (c->peephole) in[7] = dl_input(g, "p", DL_F32, 2, pd, NULL);
    int n_in = 8;
    while (n_in > 3 && !in[n_in - 1]) n_in--;
    char a1[40], a2[40];
    snprintf(a1, sizeof a1, "direction=%s", c->direction);
    snprintf(a2, sizeof a2, "hidden_size=%lld", (long long)H);
    const char *at[4] = {a1, a2, c->extra, c->extra2};
    const int n_attr = 2 + (c->extra != NULL) + (c->extra2 != NULL);
    dl_value *out[3] = {0};
    static const char *const out_names[3] = {"y", "y_h", "y_c"};
    if (dl_add_node(g, c->op, n_in, in, c->n_out, out, n_attr, at) == DL_OK)
        for (int k = 0; k < c->n_out; k++) dl_output(g, out[k], out_names[k]);
    snprintf(nm, sizeof nm, "%s %s", c->op, c->name);
    dl_program *p = NULL, *p2 = NULL;
    if (!compile_case(ctx, g, &opts, nm, DL_G_RNN, "an rnn kernel", c->native, &p, &p2)) return;
    if (c->const_wr) { /* each direction's W and R (a split GRU's R in two) packed at load */
        const bool split_r =
            !strcmp(c->op, "GRU") && !(c->extra && strstr(c->extra, "linear_before_reset=1"));
        const int want = D * (split_r ? 3 : 2);
        snprintf(nm, sizeof nm, "%s %s: %d weights packed at load (%d)", c->op, c->name, want,
                 p->n_packs);
        CHECK(nm, p->n_packs == want && p2->n_packs == want);
    }
    for (int run = 0; run < (c->sym_b || c->sym_t ? 2 : 1); run++) {
        const int64_t t_run = c->sym_t && run ? T + 3 : T, b_run = c->sym_b && run ? B + 2 : B;
        dl_tensor *t[8] = {0};
        int n = 0;
        t[n++] = rand_tensor(ctx, t_run, b_run, I, 1.0);
        if (!c->const_wr) {
            t[n++] = rand_tensor(ctx, D, G * H, I, ws);
            t[n++] = rand_tensor(ctx, D, G * H, H, ws);
        }
        if (c->bias) t[n++] = rand_tensor(ctx, D, 2 * G * H, 0, ws);
        if (c->seq_lens) {
            const int64_t d1[1] = {b_run};
            dl_tensor_new(ctx, DL_I32, 1, d1, &t[n]);
            for (int64_t i = 0; i < b_run; i++) dl_set_f64(t[n], i, (double)t_run);
            n++;
        }
        if (c->h0) t[n++] = rand_tensor(ctx, D, b_run, H, 0.5);
        if (c->c0) t[n++] = rand_tensor(ctx, D, b_run, H, 0.5);
        if (c->peephole) t[n++] = rand_tensor(ctx, D, 3 * H, 0, 0.1);
        snprintf(nm, sizeof nm, "%s %s, T %lld, B %lld", c->op, c->name, (long long)t_run,
                 (long long)b_run);
        check_run(ctx, g, p, p2, n, t, 2e-5, nm);
        for (int k = 0; k < n; k++) dl_tensor_free(t[k]);
    }
    dl_program_free(p);
    dl_program_free(p2);
    dl_graph_free(g);
}

/* The C API's string-list attributes (the activations): items trimmed of spaces; malformed lists
 * refused with a message, never half read. */
static void test_string_lists(dl_ctx *ctx) {
    static const char *const bad[] = {"[",       "[Tanh",   "[Tanh,,Tanh]", "Tanh]",
                                      "[Tanh]x", "[Tanh,]", "[,Tanh]",      ""};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        dl_graph *g = dl_graph_new(ctx);
        const int64_t xd[3] = {2, 1, 3}, wd[3] = {1, 4, 3}, rd[3] = {1, 4, 4};
        dl_value *in[3] = {dl_input(g, "x", DL_F32, 3, xd, NULL),
                           dl_input(g, "w", DL_F32, 3, wd, NULL),
                           dl_input(g, "r", DL_F32, 3, rd, NULL)};
        char a[64], nm[120];
        snprintf(a, sizeof a, "activations=%s", bad[i]);
        const char *at[1] = {a};
        dl_value *y = NULL;
        const dl_status st = dl_add_node(g, "RNN", 3, in, 1, &y, 1, at);
        snprintf(nm, sizeof nm, "attribute '%s' refused with a message", a);
        CHECK(nm, st != DL_OK && strstr(dl_errmsg(ctx), "cannot parse attribute"));
        dl_ctx_clear(ctx);
        dl_graph_free(g);
    }
    const rcase spaced = {"activations with spaces",
                          "RNN",
                          "bidirectional",
                          3,
                          2,
                          3,
                          4,
                          false,
                          false,
                          true,
                          false,
                          false,
                          2,
                          "activations=[ Tanh , tanh ]",
                          NULL,
                          false,
                          false,
                          true};
    check_case(ctx, &spaced);
}

int main(void) {
    if (!test_cache_open(dir, &opts)) return 1;
    opts.threads = 1;
    dl_ctx *ctx = dl_ctx_new();
    /* name, op, direction, T, B, I, H, sym_b, sym_t, bias, h0, c0, n_out, extra, extra2,
     * seq_lens, peephole, native, const_wr */
    /* clang-format off */
    const rcase cases[] = {
        {"forward, all inputs and outputs", "LSTM", "forward", 7, 3, 5, 20, false, false, true, true, true, 3, NULL, NULL, false, false, true},
        {"reverse, no bias or states", "LSTM", "reverse", 6, 2, 16, 16, false, false, false, false, false, 3, NULL, NULL, false, false, true},
        {"bidirectional, symbolic batch", "LSTM", "bidirectional", 5, 2, 9, 33, true, false, true, true, true, 3, NULL, NULL, false, false, true},
        {"forward, symbolic sequence, Y only", "LSTM", "forward", 4, 3, 8, 12, false, true, true, false, false, 1, NULL, NULL, false, false, true},
        {"one step, one row, hidden 1", "LSTM", "forward", 1, 1, 3, 1, false, false, true, true, true, 3, NULL, NULL, false, false, true},
        {"default activations spelled out", "LSTM", "bidirectional", 4, 2, 6, 10, false, false, true, false, false, 3, "activations=[sigmoid,tanh,tanh]", NULL, false, false, true},
        {"300 steps (two products of input shares), bidirectional", "LSTM", "bidirectional", 300, 16, 8, 64, false, false, true, true, true, 3, NULL, NULL, false, false, true},
        {"batch 1, hidden 128 (threads: the recurrent product's panels)", "LSTM", "reverse", 9, 1, 16, 128, false, false, true, true, true, 3, NULL, NULL, false, false, true},
        {"batch 8, hidden 256 (threads)", "LSTM", "forward", 12, 8, 64, 256, false, false, true, false, false, 2, NULL, NULL, false, false, true},
        {"forward, all inputs and outputs", "GRU", "forward", 7, 3, 5, 20, false, false, true, true, false, 2, NULL, NULL, false, false, true},
        {"linear_before_reset", "GRU", "forward", 7, 3, 5, 20, false, false, true, true, false, 2, "linear_before_reset=1", NULL, false, false, true},
        {"bidirectional, linear_before_reset, symbolic batch", "GRU", "bidirectional", 6, 2, 7, 17, true, false, true, true, false, 2, "linear_before_reset=1", NULL, false, false, true},
        {"reverse, no bias", "GRU", "reverse", 5, 4, 16, 32, false, false, false, true, false, 2, NULL, NULL, false, false, true},
        {"batch 8, hidden 256 (threads)", "GRU", "bidirectional", 10, 8, 32, 256, false, false, true, false, false, 1, "linear_before_reset=1", NULL, false, false, true},
        {"forward", "RNN", "forward", 8, 3, 5, 24, false, false, true, true, false, 2, NULL, NULL, false, false, true},
        {"bidirectional, symbolic sequence", "RNN", "bidirectional", 5, 2, 4, 9, false, true, false, false, false, 2, NULL, NULL, false, false, true},
        /* constant weights, packed at load */
        {"bidirectional, constant weights", "LSTM", "bidirectional", 6, 3, 24, 64, false, false, true, true, true, 3, NULL, NULL, false, false, true, true},
        {"batch 8, hidden 256, constant weights (threads)", "LSTM", "bidirectional", 9, 8, 40, 256, false, false, true, false, false, 3, NULL, NULL, false, false, true, true},
        {"bidirectional, constant weights, symbolic batch", "GRU", "bidirectional", 5, 3, 11, 20, true, false, true, true, false, 2, NULL, NULL, false, false, true, true},
        {"linear_before_reset, constant weights", "GRU", "reverse", 5, 3, 11, 20, false, false, true, true, false, 2, "linear_before_reset=1", NULL, false, false, true, true},
        {"reverse, constant weights", "RNN", "reverse", 7, 2, 5, 33, false, false, true, false, false, 2, NULL, NULL, false, false, true, true},
        /* left to the reference kernel */
        {"with Relu", "RNN", "forward", 4, 2, 3, 5, false, false, true, false, false, 2, "activations=[Relu]", NULL, false, false, false},
        {"with clip", "LSTM", "forward", 4, 2, 3, 5, false, false, true, false, false, 3, "clip=0.5", NULL, false, false, false},
        {"with sequence_lens", "GRU", "forward", 4, 2, 3, 5, false, false, true, false, false, 2, NULL, NULL, true, false, false},
        {"with peepholes", "LSTM", "forward", 4, 2, 3, 5, false, false, true, true, true, 3, NULL, NULL, false, true, false},
        {"in layout 1", "LSTM", "forward", 4, 2, 3, 5, false, false, true, false, false, 3, "layout=1", NULL, false, false, false},
        {"with input_forget", "LSTM", "forward", 4, 2, 3, 5, false, false, true, false, false, 3, "input_forget=1", NULL, false, false, false},
        {"with an activation's alpha", "LSTM", "forward", 4, 2, 3, 5, false, false, true, false, false, 3, "activations=[HardSigmoid,tanh,tanh]", "activation_alpha=[0.3]", false, false, false},
    };
    /* clang-format on */
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) check_case(ctx, &cases[i]);
    test_string_lists(ctx);
    dl_ctx_free(ctx);
    test_cache_remove(dir);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
