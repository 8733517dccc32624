/* test_profile.c — the measuring behind `dlcc bench` and `dlcc profile` (src/runtime/profile.h):
 * FLOP and byte estimates per step against hand-computed numbers (conv, gemm with transA,
 * batched matmul, elementwise chains, reductions, softmax, a data-dependent shape), per-step
 * times that are non-negative and add up within the run, the Chrome trace and the bench JSON
 * line checked by a strict JSON parser (with hostile node names), the escaping and table-text
 * helpers, the roofline arithmetic, the interpreter-only program, and allocation failures. No
 * assertion depends on how fast anything runs. */
#include "../../src/runtime/profile.h"

#include <math.h>
#include <stdlib.h>
#include <unistd.h>

#define CHECK_FAIL_DETAIL() printf(" [%s]", dl_errmsg(ctx_for_detail))
static dl_ctx *ctx_for_detail;
#include "check.h"
#include "test-cache.h"

static dl_compile_options opts;

/* ---- a strict JSON well-formedness check (RFC 8259, UTF-8 in strings) ---- */

typedef struct jp {
    const unsigned char *s;
    int depth;
} jp;

static void ws(jp *p) {
    while (*p->s == ' ' || *p->s == '\t' || *p->s == '\n' || *p->s == '\r') p->s++;
}

static bool j_value(jp *p);

static bool j_utf8(jp *p) { /* one multi-byte character, strictly */
    unsigned c = *p->s, cp, n;
    if ((c & 0xE0) == 0xC0)
        n = 1, cp = c & 0x1F;
    else if ((c & 0xF0) == 0xE0)
        n = 2, cp = c & 0x0F;
    else if ((c & 0xF8) == 0xF0)
        n = 3, cp = c & 0x07;
    else
        return false;
    for (unsigned i = 1; i <= n; i++) {
        if ((p->s[i] & 0xC0) != 0x80) return false;
        cp = cp << 6 | (p->s[i] & 0x3F);
    }
    static const unsigned min[] = {0, 0x80, 0x800, 0x10000};
    if (cp < min[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    p->s += n + 1;
    return true;
}

static bool j_string(jp *p) {
    if (*p->s != '"') return false;
    p->s++;
    for (;;) {
        unsigned c = *p->s;
        if (c == '"') {
            p->s++;
            return true;
        }
        if (c < 0x20) return false; /* raw control characters (and the end) are not allowed */
        if (c == '\\') {
            p->s++;
            if (*p->s == 'u') {
                for (int i = 1; i <= 4; i++)
                    if (!strchr("0123456789abcdefABCDEF", p->s[i]) || !p->s[i]) return false;
                p->s += 5;
            } else if (*p->s && strchr("\"\\/bfnrt", *p->s)) {
                p->s++;
            } else {
                return false;
            }
        } else if (c >= 0x80) {
            if (!j_utf8(p)) return false;
        } else {
            p->s++;
        }
    }
}

static bool digits(jp *p) {
    if (*p->s < '0' || *p->s > '9') return false;
    while (*p->s >= '0' && *p->s <= '9') p->s++;
    return true;
}

static bool j_number(jp *p) {
    if (*p->s == '-') p->s++;
    if (*p->s == '0')
        p->s++;
    else if (!digits(p))
        return false;
    if (*p->s == '.') {
        p->s++;
        if (!digits(p)) return false;
    }
    if (*p->s == 'e' || *p->s == 'E') {
        p->s++;
        if (*p->s == '+' || *p->s == '-') p->s++;
        if (!digits(p)) return false;
    }
    return true;
}

static bool j_list(jp *p, char close, bool object) {
    p->s++;
    ws(p);
    if (*p->s == close) {
        p->s++;
        return true;
    }
    for (;;) {
        ws(p);
        if (object) {
            if (!j_string(p)) return false;
            ws(p);
            if (*p->s++ != ':') return false;
        }
        if (!j_value(p)) return false;
        ws(p);
        if (*p->s == close) {
            p->s++;
            return true;
        }
        if (*p->s++ != ',') return false;
    }
}

static bool j_value(jp *p) {
    ws(p);
    if (++p->depth > 64) return false;
    bool ok;
    switch (*p->s) {
    case '{':
        ok = j_list(p, '}', true);
        break;
    case '[':
        ok = j_list(p, ']', false);
        break;
    case '"':
        ok = j_string(p);
        break;
    case 't':
        ok = !strncmp((const char *)p->s, "true", 4) && (p->s += 4);
        break;
    case 'f':
        ok = !strncmp((const char *)p->s, "false", 5) && (p->s += 5);
        break;
    case 'n':
        ok = !strncmp((const char *)p->s, "null", 4) && (p->s += 4);
        break;
    default:
        ok = j_number(p);
    }
    p->depth--;
    return ok;
}

static bool json_valid(const char *text) {
    jp p = {(const unsigned char *)text, 0};
    if (!j_value(&p)) return false;
    ws(&p);
    return *p.s == 0;
}

static int count_of(const char *hay, const char *needle) {
    int n = 0;
    for (const char *q = hay; (q = strstr(q, needle)); q += strlen(needle)) n++;
    return n;
}

/* ---- helpers ---- */

static dl_tensor *filled(dl_ctx *ctx, int rank, const int64_t *dims, float scale) {
    dl_tensor *t = NULL;
    if (dl_tensor_new(ctx, DL_F32, rank, dims, &t) != DL_OK) return NULL;
    float *p = dl_tensor_data(t);
    for (int64_t i = 0; i < dl_tensor_numel(t); i++) p[i] = scale * (float)((i * 7) % 11 - 5);
    return t;
}

static double total_flops(const dl_profile *pr) {
    double f = 0;
    for (int s = 0; s < pr->n_steps; s++) f += pr->steps[s].flops;
    return f;
}

/* The step whose first node has this op, or -1. */
static int step_of(const dl_program *p, const char *op) {
    for (int s = 0; s < p->fusion->n; s++)
        if (!strcmp(p->fusion->groups[s].nodes[0]->op->name, op)) return s;
    return -1;
}

static int ops_in_step(const dl_program *p, int s, const char *op) {
    int n = 0;
    for (int k = 0; s >= 0 && k < p->fusion->groups[s].n_nodes; k++)
        n += !strcmp(p->fusion->groups[s].nodes[k]->op->name, op);
    return n;
}

/* Times are non-negative, the representative run's steps are laid end to end and fit in it. */
static void check_times(const char *what, const dl_profile *pr) {
    char name[128];
    bool nonneg = pr->run_ms > 0, laid = true;
    double sum = 0;
    for (int s = 0; s < pr->n_steps; s++) {
        nonneg = nonneg && pr->steps[s].ms >= 0 && pr->rep_dur_us[s] >= 0;
        laid = laid && fabs(pr->rep_start_us[s] - sum) <= 1e-6 * (1 + sum);
        sum += pr->rep_dur_us[s];
    }
    snprintf(name, sizeof name, "%s: step times are non-negative", what);
    CHECK(name, nonneg);
    snprintf(name, sizeof name, "%s: steps follow each other from the run's start", what);
    CHECK(name, laid);
    snprintf(name, sizeof name, "%s: steps sum to at most the run (%.3f <= %.3f us)", what, sum,
             pr->rep_run_us);
    CHECK(name, sum > 0 && sum <= pr->rep_run_us * (1 + 1e-9));
}

/* ---- tests ---- */

/* x[1,3,8,8] -> Conv(4x3x3x3, bias, pad 1) -> Relu -> Flatten -> MatMul[256,5] -> Softmax */
static void test_cnn_flops(dl_ctx *ctx) {
    dl_graph *g = dl_graph_new(ctx);
    const int64_t xd[] = {1, 3, 8, 8}, wd[] = {4, 3, 3, 3}, bd[] = {4}, md[] = {256, 5};
    dl_value *x = dl_input(g, "x", DL_F32, 4, xd, NULL);
    dl_value *w = dl_constant(g, "w", filled(ctx, 4, wd, 0.1f));
    dl_value *b = dl_constant(g, "b", filled(ctx, 1, bd, 0.1f));
    dl_value *m = dl_constant(g, "m", filled(ctx, 2, md, 0.01f));
    dl_value *y = dl_relu(g, dl_conv2d(g, x, w, b, 1, 1));
    dl_output(g, dl_softmax(g, dl_matmul(g, dl_flatten(g, y, 1), m), 1), "probs");
    dl_program *p = NULL;
    dl_profile pr = {0};
    dl_tensor *in = filled(ctx, 4, xd, 1.0f);
    if (dl_graph_status(g) != DL_OK || dl_compile(ctx, g, &opts, &p) != DL_OK ||
        dl_profile_program(ctx, p, 1, NULL, &in, 1, 5, &pr) != DL_OK) {
        CHECK("cnn: compiles and profiles", false);
        goto done;
    }
    CHECK("cnn: one stat per step", pr.n_steps == p->fusion->n && pr.iters == 5 && !pr.interp_only);
    /* conv 2*N*Cout*H*W*Cin*kh*kw = 2*1*4*64*3*9; relu 256; matmul 2*1*5*256; softmax 5*5 */
    const double conv = 13824, relu = 256, matmul = 2560, softmax = 25;
    CHECK("cnn: total FLOPs", total_flops(&pr) == conv + relu + matmul + softmax);
    int sc = step_of(p, "Conv");
    CHECK("cnn: conv step FLOPs (Conv + its fused Relu)",
          sc >= 0 && pr.steps[sc].flops == conv + relu * ops_in_step(p, sc, "Relu"));
    if (sc >= 0 && p->fusion->groups[sc].n_nodes == 2) /* Conv+Relu: x, w, b in; y out */
        CHECK("cnn: conv step bytes", pr.steps[sc].bytes == (192 + 108 + 4 + 256) * 4.0);
    CHECK("cnn: conv step output shape", sc >= 0 && pr.steps[sc].out.rank == 4 &&
                                             pr.steps[sc].out.dims[1] == 4 &&
                                             pr.steps[sc].out.dims[3] == 8);
    int sm = step_of(p, "MatMul");
    CHECK("cnn: matmul step FLOPs", sm >= 0 && pr.steps[sm].flops == matmul);
    CHECK("cnn: matmul step bytes", sm >= 0 && pr.steps[sm].bytes == (256 + 256 * 5 + 5) * 4.0);
    int ss = step_of(p, "Softmax");
    CHECK("cnn: softmax step FLOPs", ss >= 0 && pr.steps[ss].flops == softmax);
    int sf = step_of(p, "Flatten");
    CHECK("cnn: a view counts no FLOPs", sf < 0 || pr.steps[sf].flops == 0);
    check_times("cnn", &pr);
    /* no count given: at least 10 runs and about 2 s worth, at most 1000 (this program runs in
     * microseconds, so the cap or the budget ends it), and the count is reported */
    dl_profile_free(&pr);
    if (dl_profile_program(ctx, p, 1, NULL, &in, 1, 0, &pr) != DL_OK) {
        CHECK("cnn: profiles with an adaptive run count", false);
        goto done;
    }
    char what[96];
    snprintf(what, sizeof what, "cnn: adaptive run count 10..1000 (%d)", pr.iters);
    CHECK(what, pr.iters >= 10 && pr.iters <= 1000 && pr.n_steps == p->fusion->n);
    check_times("cnn adaptive", &pr);
done:
    dl_profile_free(&pr);
    dl_tensor_free(in);
    dl_program_free(p);
    dl_graph_free(g);
}

/* Gemm with transA, a batched MatMul, an elementwise chain, a reduction and a Gather. */
static void test_other_flops(dl_ctx *ctx) {
    dl_graph *g = dl_graph_new(ctx);
    const int64_t ad[] = {7, 3}, bd[] = {7, 4}, xd[] = {2, 3, 4, 5}, wd[] = {5, 6}, ed[] = {4, 6};
    dl_value *a = dl_input(g, "a", DL_F32, 2, ad, NULL);
    dl_value *bv = dl_constant(g, "b", filled(ctx, 2, bd, 0.5f));
    dl_value *x = dl_input(g, "x", DL_F32, 4, xd, NULL);
    dl_value *w = dl_constant(g, "w", filled(ctx, 2, wd, 0.5f));
    dl_value *e = dl_input(g, "e", DL_F32, 2, ed, NULL);
    dl_value *gm = NULL;
    const char *attrs[] = {"transA=1"};
    dl_value *gin[] = {a, bv};
    if (dl_add_node(g, "Gemm", 2, gin, 1, &gm, 1, attrs) != DL_OK) gm = NULL;
    dl_output(g, gm, "gemm");
    dl_output(g, dl_matmul(g, x, w), "mm");
    dl_output(g, dl_sigmoid(g, dl_mul(g, dl_add(g, e, e), e)), "ew");
    dl_tensor *axes_t = NULL;
    const int64_t one = 1;
    if (dl_tensor_new(ctx, DL_I64, 1, &one, &axes_t) == DL_OK)
        *(int64_t *)dl_tensor_data(axes_t) = 1;
    dl_value *axes = dl_constant(g, "axes", axes_t);
    dl_output(g, dl_op2(g, "ReduceSum", e, axes, "keepdims=1"), "red");
    /* rows of a [50, 8] table picked by 6 ids */
    const int64_t td[] = {50, 8}, idd[] = {2, 3};
    dl_value *ids = dl_input(g, "ids", DL_I64, 2, idd, NULL);
    dl_output(g, dl_op2(g, "Gather", dl_constant(g, "table", filled(ctx, 2, td, 0.5f)), ids, NULL),
              "rows");
    dl_program *p = NULL;
    dl_profile pr = {0};
    dl_tensor *in[4] = {filled(ctx, 2, ad, 1), filled(ctx, 4, xd, 1), filled(ctx, 2, ed, 1), NULL};
    if (dl_tensor_new(ctx, DL_I64, 2, idd, &in[3]) == DL_OK)
        memset(dl_tensor_data(in[3]), 0, 6 * sizeof(int64_t));
    if (dl_graph_status(g) != DL_OK || dl_compile(ctx, g, &opts, &p) != DL_OK ||
        dl_profile_program(ctx, p, 4, NULL, in, 0, 3, &pr) != DL_OK) {
        CHECK("gemm/matmul/ew/reduce: compiles and profiles", false);
        goto done;
    }
    const double gemm = 2 * 3 * 4 * 7, mm = 2.0 * 2 * 3 * 4 * 6 * 5, ew = 3 * 24, red = 24;
    int sg = step_of(p, "Gemm"), sm = step_of(p, "MatMul"), sr = step_of(p, "ReduceSum");
    CHECK("gemm with transA: 2*M*N*K", sg >= 0 && pr.steps[sg].flops == gemm);
    CHECK("gemm bytes: a, b in, out", sg >= 0 && pr.steps[sg].bytes == (21 + 28 + 12) * 4.0);
    CHECK("batched matmul: 2*M*N*K times the batch", sm >= 0 && pr.steps[sm].flops == mm);
    CHECK("reduction: input elements", sr >= 0 && pr.steps[sr].flops == red);
    const int sgat = step_of(p, "Gather");
    CHECK("gather bytes: the rows read, not the whole table; ids; out",
          sgat >= 0 && pr.steps[sgat].bytes == 48 * 4 + 6 * 8 + 48 * 4);
    CHECK("total FLOPs (elementwise: output elements per node)",
          total_flops(&pr) == gemm + mm + ew + red);
    check_times("gemm/matmul/ew/reduce", &pr);
done:
    dl_profile_free(&pr);
    for (int i = 0; i < 4; i++) dl_tensor_free(in[i]);
    dl_program_free(p);
    dl_graph_free(g);
}

/* NonZero: the plan is dynamic, shapes come from the run itself. */
static void test_dynamic_flops(dl_ctx *ctx) {
    dl_graph *g = dl_graph_new(ctx);
    const int64_t xd[] = {6};
    dl_value *x = dl_input(g, "x", DL_F32, 1, xd, NULL);
    dl_value *nz = dl_op1(g, "NonZero", dl_relu(g, x), NULL);
    dl_value *y = dl_op1(g, "Cast", nz, "to=1");
    dl_output(g, dl_relu(g, dl_add(g, y, y)), "y");
    dl_program *p = NULL;
    dl_profile pr = {0};
    dl_tensor *in = NULL;
    const float xv[] = {1, -1, 2, -2, 3, 0}; /* 3 non-zeros after Relu */
    if (dl_graph_status(g) != DL_OK || dl_compile(ctx, g, &opts, &p) != DL_OK ||
        dl_tensor_new(ctx, DL_F32, 1, xd, &in) != DL_OK) {
        CHECK("dynamic: compiles", false);
        goto done;
    }
    memcpy(dl_tensor_data(in), xv, sizeof xv);
    if (dl_profile_program(ctx, p, 1, NULL, &in, 0, 2, &pr) != DL_OK) {
        CHECK("dynamic: profiles", false);
        goto done;
    }
    CHECK("dynamic: the plan is dynamic", p->plan.dynamic);
    int scast = step_of(p, "Cast");
    const dl_node *cast = NULL;
    for (int s = 0; s < p->fusion->n; s++)
        for (int k = 0; k < p->fusion->groups[s].n_nodes; k++)
            if (!strcmp(p->fusion->groups[s].nodes[k]->op->name, "Cast"))
                cast = p->fusion->groups[s].nodes[k];
    double cast_flops = cast && dl_node_kernel_kind(cast) == DL_G_EW ? 3 : 0;
    DL_UNUSED(scast);
    /* relu over 6, then Cast, Add and Relu over the 3 non-zeros */
    CHECK("dynamic: FLOPs from the run's shapes", total_flops(&pr) == 6 + 3 + 3 + cast_flops);
    int last = pr.n_steps - 1;
    CHECK("dynamic: output shape from the run",
          last >= 0 && pr.steps[last].out.rank == 2 && pr.steps[last].out.dims[1] == 3);
    check_times("dynamic", &pr);
done:
    dl_profile_free(&pr);
    dl_tensor_free(in);
    dl_program_free(p);
    dl_graph_free(g);
}

static void test_json_string(void) {
    static const struct {
        const char *in, *want;
    } cases[] = {
        {"plain", "\"plain\""},
        {"a\"b\\c", "\"a\\\"b\\\\c\""},
        {"line\nbreak\ttab\x01", "\"line\\nbreak\\ttab\\u0001\""},
        {"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80",
         "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\""},
        {"bad\xff", "\"bad\\ufffd\""},
        {"overlong\xc0\xaf", "\"overlong\\ufffd\\ufffd\""},
        {"cut\xe2\x82", "\"cut\\ufffd\\ufffd\""},
        {"surrogate\xed\xa0\x80", "\"surrogate\\ufffd\\ufffd\\ufffd\""},
        {"", "\"\""},
    };
    for (size_t i = 0; i < DL_ARRAY_LEN(cases); i++) {
        dl_sbuf b = {0};
        dl_json_string(&b, cases[i].in);
        char name[96];
        snprintf(name, sizeof name, "json string %zu escapes as expected and parses", i);
        CHECK(name, !strcmp(dl_sb_str(&b), cases[i].want) && json_valid(dl_sb_str(&b)));
        dl_sb_free(&b);
    }
}

static void test_table_text(void) {
    char buf[64];
    dl_table_text("short", 10, buf, sizeof buf);
    CHECK("table text: short names unchanged", !strcmp(buf, "short"));
    dl_table_text("abcdefghijklmnop", 10, buf, sizeof buf);
    CHECK("table text: long names cut to the width with ...", !strcmp(buf, "abcdefg..."));
    dl_table_text("a\x1b[31mred\xff", 20, buf, sizeof buf);
    CHECK("table text: escapes and broken UTF-8 become ?", !strcmp(buf, "a?[31mred?"));
    dl_table_text("\xc2\x9b"
                  "2J",
                  20, buf, sizeof buf);
    CHECK("table text: C1 controls become ?", !strcmp(buf, "?2J"));
    dl_table_text("\xc3\xa9t\xc3\xa9", 3, buf, sizeof buf);
    CHECK("table text: counts characters, not bytes", !strcmp(buf, "\xc3\xa9t\xc3\xa9"));
    char small[5];
    memset(small, 'x', sizeof small);
    dl_table_text("abcdefghij", 40, small, sizeof small);
    CHECK("table text: never overruns the buffer", small[4] == 0 && strlen(small) == 4);
}

static void test_roofline(dl_ctx *ctx) {
    dl_machine m = {
        .threads = 2, .isa = "test", .peak_gflops_1 = 50, .peak_gflops = 100, .bandwidth_gbs = 10};
    /* intensity 1 flop/byte: bound 10 GFLOP/s; 1e9 flops in 1 s = 1 GFLOP/s */
    CHECK("roofline: memory-bound case", fabs(dl_roofline_percent(&m, 1e9, 1e9, 1000) - 10) < 1e-9);
    /* intensity 100: bound is the peak, 100 GFLOP/s */
    CHECK("roofline: compute-bound case",
          fabs(dl_roofline_percent(&m, 1e11, 1e9, 1000) - 100) < 1e-9);
    CHECK("roofline: no flops, no percentage", dl_roofline_percent(&m, 0, 1e9, 1) < 0);
    CHECK("roofline: no time, no percentage", dl_roofline_percent(&m, 1e9, 1e9, 0) < 0);
    dl_machine real;
    CHECK("machine: measured", dl_measure_machine(ctx, 2, &real) == DL_OK);
    CHECK("machine: peak and bandwidth are positive and finite",
          real.peak_gflops_1 > 0 && isfinite(real.peak_gflops) && real.bandwidth_gbs > 0 &&
              isfinite(real.bandwidth_gbs) && real.threads == 2 && real.isa);
    CHECK("machine: peak is per thread times threads",
          fabs(real.peak_gflops - 2 * real.peak_gflops_1) <= 1e-9 * real.peak_gflops);
}

/* The trace and the printed table of a program whose node names are hostile. */
static void test_trace(dl_ctx *ctx) {
    dl_graph *g = dl_graph_new(ctx);
    const int64_t xd[] = {2, 8}, wd[] = {8, 8};
    dl_value *x = dl_input(g, "x", DL_F32, 2, xd, NULL);
    dl_value *w = dl_constant(g, "w", filled(ctx, 2, wd, 0.1f));
    dl_output(g, dl_tanh(g, dl_matmul(g, dl_relu(g, x), w)), "y");
    dl_program *p = NULL;
    dl_profile pr = {0};
    dl_sbuf b = {0};
    dl_tensor *in = filled(ctx, 2, xd, 1);
    if (dl_graph_status(g) != DL_OK || dl_compile(ctx, g, &opts, &p) != DL_OK ||
        dl_profile_program(ctx, p, 1, NULL, &in, 1, 3, &pr) != DL_OK) {
        CHECK("trace: compiles and profiles", false);
        goto done;
    }
    static const char *names[] = {"q\"uote\\back\nnl\x01\x1b[2J", "\xff\xfe broken", ""};
    for (int s = 0; s < p->fusion->n; s++) p->fusion->groups[s].nodes[0]->name = names[s % 3];
    CHECK("trace: written", dl_profile_trace_json(ctx, &pr, p, &b) == DL_OK);
    const char *t = dl_sb_str(&b);
    CHECK("trace: strict JSON", json_valid(t));
    CHECK("trace: one complete event per step and one for the run",
          count_of(t, "\"ph\":\"X\"") == pr.n_steps + 1);
    CHECK("trace: has the display unit", strstr(t, "\"displayTimeUnit\":\"ms\"") != NULL);
    CHECK("trace: the hostile name is escaped",
          strstr(t, "q\\\"uote\\\\back\\nnl\\u0001\\u001b[2J"));
    FILE *f = tmpfile();
    if (f) {
        CHECK("table: printed", dl_profile_print(ctx, &pr, p, NULL, 0, f) == DL_OK);
        long n = ftell(f);
        char *text = calloc((size_t)n + 1, 1);
        rewind(f);
        size_t got = text ? fread(text, 1, (size_t)n, f) : 0;
        bool clean = got == (size_t)n;
        for (long i = 0; clean && i < n; i++)
            clean = text[i] == '\n' || ((unsigned char)text[i] >= 0x20 && text[i] != 0x7f);
        CHECK("table: no control characters reach the terminal", clean);
        CHECK("table: one row per step", text && count_of(text, "\n") == pr.n_steps + 3);
        free(text);
        fclose(f);
    }
    char path[] = "/tmp/dlcc-test-trace-XXXXXX";
    int fd = mkstemp(path);
    if (fd >= 0) {
        close(fd);
        CHECK("trace: file written", dl_profile_write_trace(ctx, &pr, p, path) == DL_OK);
        unlink(path);
    }
    CHECK("trace: unwritable path fails cleanly",
          dl_profile_write_trace(ctx, &pr, p, "/nonexistent-dir/t.json") == DL_ERR_IO);
    dl_ctx_clear(ctx);
done:
    dl_sb_free(&b);
    dl_profile_free(&pr);
    dl_tensor_free(in);
    dl_program_free(p);
    dl_graph_free(g);
}

static void test_bench(dl_ctx *ctx) {
    dl_graph *g = dl_graph_new(ctx);
    const int64_t xd[] = {4, 4};
    dl_value *x = dl_input(g, "x", DL_F32, 2, xd, NULL);
    dl_output(g, dl_relu(g, dl_add(g, x, x)), "y");
    dl_program *p = NULL;
    dl_tensor *in = filled(ctx, 2, xd, 1);
    if (dl_graph_status(g) != DL_OK || dl_compile(ctx, g, &opts, &p) != DL_OK) {
        CHECK("bench: compiles", false);
        goto done;
    }
    dl_bench_result r;
    CHECK("bench: fixed iterations run", dl_bench_program(ctx, p, 1, NULL, &in, 2, 3, &r) == DL_OK);
    CHECK("bench: counts", r.iters == 3 && r.warmup == 2);
    CHECK("bench: min <= median <= p90, min <= mean, all positive",
          r.min_ms > 0 && r.min_ms <= r.median_ms && r.median_ms <= r.p90_ms &&
              r.min_ms <= r.mean_ms);
    CHECK("bench: adaptive iterations run",
          dl_bench_program(ctx, p, 1, NULL, &in, 0, 0, &r) == DL_OK);
    CHECK("bench: adaptive count is 10..1000", r.iters >= 10 && r.iters <= 1000);
    char *line = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&line, &len);
    if (f) {
        dl_status s = dl_bench_print(ctx, "models/we\"ird\n.onnx", 3, &r, 1.5, true, f);
        fclose(f);
        CHECK("bench json: printed", s == DL_OK && line);
        CHECK("bench json: one line", line && count_of(line, "\n") == 1 && line[len - 1] == '\n');
        CHECK("bench json: strict JSON", line && json_valid(line));
        static const char *keys[] = {"{\"model\":",   ",\"threads\":3,", "\"iters\":",
                                     "\"warmup\":0,", "\"median_ms\":",  "\"p90_ms\":",
                                     "\"min_ms\":",   "\"mean_ms\":",    "\"compile_ms\":1.5}"};
        const char *at = line;
        for (size_t k = 0; at && k < DL_ARRAY_LEN(keys); k++) {
            at = strstr(at, keys[k]);
            if (at) at += strlen(keys[k]);
        }
        CHECK("bench json: the keys in the agreed order", at != NULL);
        CHECK("bench json: starts with the model", line && !strncmp(line, "{\"model\":", 9));
    }
    free(line);
done:
    dl_tensor_free(in);
    dl_program_free(p);
    dl_graph_free(g);
}

/* Bench and profile write each run's outputs into the previous run's tensors: outputs that are
 * the same value twice, an input passed through and a view of a kernel's result, over several
 * runs, then freed once (the ASan build checks for leaks and double frees). */
static void test_bench_kept_outputs(dl_ctx *ctx) {
    dl_graph *g = dl_graph_new(ctx);
    const int64_t xd[] = {4, 6};
    dl_value *x = dl_input(g, "x", DL_F32, 2, xd, NULL);
    dl_value *y = dl_relu(g, dl_add(g, x, x));
    dl_output(g, y, "y");
    dl_output(g, y, "y_again");
    dl_output(g, x, "x_through");
    dl_tensor *shape = NULL;
    const int64_t sd[] = {1};
    if (dl_tensor_new(ctx, DL_I64, 1, sd, &shape) == DL_OK)
        ((int64_t *)dl_tensor_data(shape))[0] = 24;
    dl_output(g, dl_op2(g, "Reshape", dl_sigmoid(g, x), dl_constant(g, "s", shape), NULL), "flat");
    dl_program *p = NULL;
    dl_tensor *in = filled(ctx, 2, xd, 1);
    if (dl_graph_status(g) != DL_OK || dl_compile(ctx, g, &opts, &p) != DL_OK) {
        CHECK("kept outputs: compiles", false);
        printf("  %s\n", dl_errmsg(ctx));
        goto done;
    }
    dl_bench_result r;
    CHECK("kept outputs: bench runs", dl_bench_program(ctx, p, 1, NULL, &in, 2, 4, &r) == DL_OK);
    dl_profile pr;
    CHECK("kept outputs: profile runs",
          dl_profile_program(ctx, p, 1, NULL, &in, 2, 4, &pr) == DL_OK && pr.iters == 4);
    dl_profile_free(&pr);
done:
    dl_tensor_free(in);
    dl_program_free(p);
    dl_graph_free(g);
}

/* Without a C compiler the program runs on the interpreter: a whole-run time, no steps. */
static void test_interp_only(dl_ctx *ctx) {
    dl_graph *g = dl_graph_new(ctx);
    const int64_t xd[] = {3};
    dl_value *x = dl_input(g, "x", DL_F32, 1, xd, NULL);
    dl_output(g, dl_relu(g, x), "y");
    dl_compile_options o = opts;
    o.cc = "/nonexistent/cc";
    dl_program *p = NULL;
    dl_profile pr = {0};
    dl_tensor *in = filled(ctx, 1, xd, 1);
    if (dl_graph_status(g) != DL_OK || dl_compile(ctx, g, &o, &p) != DL_OK) {
        CHECK("interp-only: compiles", false);
        goto done;
    }
    CHECK("interp-only: profiles", dl_profile_program(ctx, p, 1, NULL, &in, 0, 2, &pr) == DL_OK);
    CHECK("interp-only: no steps, a run time", pr.interp_only && pr.n_steps == 0 && pr.run_ms > 0);
    FILE *f = tmpfile();
    if (f) {
        CHECK("interp-only: printable", dl_profile_print(ctx, &pr, p, NULL, 5, f) == DL_OK);
        fclose(f);
    }
done:
    dl_profile_free(&pr);
    dl_tensor_free(in);
    dl_program_free(p);
    dl_graph_free(g);
}

/* Every allocation in dl_profile_program failing in turn: an error, never a leak or crash. */
static void test_alloc_failures(dl_ctx *ctx) {
    dl_graph *g = dl_graph_new(ctx);
    const int64_t xd[] = {2, 3};
    dl_value *x = dl_input(g, "x", DL_F32, 2, xd, NULL);
    dl_output(g, dl_sigmoid(g, dl_add(g, x, x)), "y");
    dl_program *p = NULL;
    dl_tensor *in = filled(ctx, 2, xd, 1);
    if (dl_graph_status(g) != DL_OK || dl_compile(ctx, g, &opts, &p) != DL_OK) {
        CHECK("alloc failures: compiles", false);
        goto done;
    }
    bool all_nomem = true, finished = false;
    for (long n = 0; n < 200 && !finished; n++) {
        dl_profile pr;
        dl_ctx_clear(ctx);
        dl_alloc_fail_after(n);
        dl_status s = dl_profile_program(ctx, p, 1, NULL, &in, 1, 2, &pr);
        dl_alloc_fail_after(-1);
        if (s == DL_OK)
            finished = true;
        else if (s != DL_ERR_NOMEM)
            all_nomem = false;
        dl_profile_free(&pr);
    }
    dl_ctx_clear(ctx);
    CHECK("alloc failures: each reported as out of memory", all_nomem);
    CHECK("alloc failures: succeeds once allocations do", finished);
done:
    dl_tensor_free(in);
    dl_program_free(p);
    dl_graph_free(g);
}

int main(void) {
    char dir[] = "/tmp/dlcc-test-profile-XXXXXX";
    if (!test_cache_open(dir, &opts)) return 1;
    opts.threads = 1;
    dl_ctx *ctx = dl_ctx_new();
    ctx_for_detail = ctx;
    void (*tests[])(dl_ctx *) = {test_cnn_flops,          test_other_flops, test_dynamic_flops,
                                 test_roofline,           test_trace,       test_bench,
                                 test_bench_kept_outputs, test_interp_only, test_alloc_failures};
    for (size_t i = 0; i < DL_ARRAY_LEN(tests); i++) {
        tests[i](ctx);
        dl_ctx_clear(ctx);
    }
    test_json_string();
    test_table_text();
    dl_ctx_free(ctx);
    test_cache_remove(dir);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
