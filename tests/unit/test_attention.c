/* test_attention.c — fused attention: (a) the runtime kernel dlrt_attention against plain loops
 * in double over many shapes, operand layouts (the fast GEMM path and the strided loop path),
 * masks, causal cuts and special values (all -inf rows, +inf scores, NaN, no keys, rows longer
 * than the stack buffer); (b) graphs built with the builder API in the shapes torch exports
 * (BERT / GPT / nn.MultiheadAttention style, rank 2 to 4, with and without masks and
 * transposes) compiled natively and compared with the reference backend, checking that the
 * attention group formed — and that patterns which must not match (an intermediate used twice,
 * softmax over another axis, a non-causal Where, float64) keep their separate kernels. */
#define _GNU_SOURCE /* open_memstream */
#include "../../src/runtime/program-impl.h"
#include "../../src/kernels/rt/dlrt.h"

#include <math.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "test-cache.h"

#include "test-rng.h"

/* ---------------------------------------------------------------- (a) the kernel ---- */

/* Operand layouts, for a per-head [rows, cols] matrix of a [batch, heads] grid. */
enum {
    L_DENSE,     /* [B, H, rows, cols] */
    L_HEADSPLIT, /* [B, rows, H, cols]: the head split of exported graphs */
    L_COLMAJOR,  /* [B, H, cols, rows] */
    L_STRIDED,   /* no unit stride at all: the loop path */
    L_SEQFIRST,  /* [rows, B, H, cols]: nn.MultiheadAttention's layout */
    L_COUNT
};

typedef struct strides {
    int64_t sb, sh, st, sc, size; /* size: floats the buffer needs */
} strides;

static strides layout(int kind, int64_t B, int64_t H, int64_t rows, int64_t cols) {
    strides s = {0};
    switch (kind) {
    case L_DENSE: s = (strides){H * rows * cols, rows * cols, cols, 1, 0}; break;
    case L_HEADSPLIT: s = (strides){rows * H * cols, cols, H * cols, 1, 0}; break;
    case L_COLMAJOR: s = (strides){H * rows * cols, rows * cols, 1, rows, 0}; break;
    case L_STRIDED: {
        int64_t st = 2 * cols + 3, sh = rows * st + 1;
        s = (strides){H * sh + 5, sh, st, 2, 0};
        break;
    }
    default: s = (strides){H * cols, cols, B * H * cols, 1, 0}; break;
    }
    s.size = 1 + (B - 1) * s.sb + (H - 1) * s.sh + (rows > 0 ? rows - 1 : 0) * s.st +
             (cols > 0 ? cols - 1 : 0) * s.sc;
    return s;
}

enum { M_NONE, M_BATCH_KEYS, M_SQUARE, M_FULL, M_FULL_TRANSPOSED, M_COUNT };

static strides mask_layout(int kind, int64_t B, int64_t H, int64_t tq, int64_t tk) {
    strides s = {0};
    switch (kind) {
    case M_BATCH_KEYS: s = (strides){tk, 0, 0, 1, B * tk}; break;           /* [B, 1, 1, tk] */
    case M_SQUARE: s = (strides){0, 0, tk, 1, tq * tk}; break;              /* [tq, tk] */
    case M_FULL: s = (strides){H * tq * tk, tq * tk, tk, 1, B * H * tq * tk}; break;
    case M_FULL_TRANSPOSED: s = (strides){H * tq * tk, tq * tk, 1, tq, B * H * tq * tk}; break;
    default: break;
    }
    return s;
}

static float *rand_buf(int64_t n) {
    float *p = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    for (int64_t i = 0; p && i < n; i++) p[i] = frand();
    return p;
}

#define AT(p, s, b, h, i, c) (p)[(b) * (s).sb + (h) * (s).sh + (i) * (s).st + (c) * (s).sc]

/* y = softmax(scale q k^T + mask) v in double, with the unfused graph's special cases: a NaN
 * score makes the row NaN, +inf scores share the mass, a row of -inf (or with no keys under the
 * causal cut) is NaN, no keys at all gives 0. */
static void reference(const dlrt_attn *a, const float *q, strides qs, const float *k, strides ks,
                      const float *v, strides vs, const float *m, strides ms, double *y) {
    int64_t tq = a->tq, tk = a->tk;
    double *s = malloc(sizeof(double) * (size_t)(tk > 0 ? tk : 1));
    for (int64_t b = 0; b < a->batch; b++)
        for (int64_t h = 0; h < a->heads; h++)
            for (int64_t i = 0; i < tq; i++) {
                double mx = -INFINITY;
                bool nan = false;
                for (int64_t j = 0; j < tk; j++) {
                    if (a->causal && j > i + tk - tq) {
                        s[j] = -INFINITY;
                        continue;
                    }
                    double acc = 0;
                    for (int64_t c = 0; c < a->d; c++)
                        acc += (double)AT(q, qs, b, h, i, c) * AT(k, ks, b, h, j, c);
                    s[j] = a->scale * acc + (m ? AT(m, ms, b, h, i, j) : 0.0);
                    if (isnan(s[j])) nan = true;
                    else if (s[j] > mx) mx = s[j];
                }
                double sum = 0;
                int64_t n_inf = 0;
                for (int64_t j = 0; j < tk; j++) n_inf += s[j] == INFINITY;
                for (int64_t j = 0; j < tk; j++) {
                    s[j] = mx == INFINITY ? (s[j] == INFINITY ? 1.0 / (double)n_inf : 0.0)
                                          : exp(s[j] - mx);
                    sum += s[j];
                }
                if (mx == INFINITY) sum = 1.0;
                for (int64_t c = 0; c < a->dv; c++) {
                    double acc = 0;
                    for (int64_t j = 0; j < tk; j++) acc += s[j] * AT(v, vs, b, h, j, c);
                    double out = tk == 0 ? 0.0 : (nan || mx == -INFINITY) ? NAN : acc / sum;
                    y[((b * a->heads + h) * tq + i) * a->dv + c] = out;
                }
            }
    free(s);
}

typedef struct kcase {
    int64_t B, H, tq, tk, d, dv;
    int lq, lk, lv, ly, mask, causal;
    int special; /* 0 none, 1 a -inf mask row, 2 a +inf score, 3 a NaN in q */
} kcase;

/* Runs one case; returns the largest error (inf on a mismatch of NaN-ness or a write outside
 * the view). */
static double run_kernel_case(const kcase *kc, bool *checked_ws) {
    dlrt_attn a = {.batch = kc->B, .heads = kc->H, .tq = kc->tq, .tk = kc->tk, .d = kc->d,
                   .dv = kc->dv, .scale = 0.7f, .causal = kc->causal};
    strides qs = layout(kc->lq, kc->B, kc->H, kc->tq, kc->d);
    strides ks = layout(kc->lk, kc->B, kc->H, kc->tk, kc->d);
    strides vs = layout(kc->lv, kc->B, kc->H, kc->tk, kc->dv);
    strides ys = layout(kc->ly, kc->B, kc->H, kc->tq, kc->dv);
    strides ms = mask_layout(kc->mask, kc->B, kc->H, kc->tq, kc->tk);
    a.q_sb = qs.sb, a.q_sh = qs.sh, a.q_st = qs.st, a.q_sc = qs.sc;
    a.k_sb = ks.sb, a.k_sh = ks.sh, a.k_st = ks.st, a.k_sc = ks.sc;
    a.v_sb = vs.sb, a.v_sh = vs.sh, a.v_st = vs.st, a.v_sc = vs.sc;
    a.y_sb = ys.sb, a.y_sh = ys.sh, a.y_st = ys.st, a.y_sc = ys.sc;
    a.m_sb = ms.sb, a.m_sh = ms.sh, a.m_st = ms.st, a.m_sc = ms.sc;
    float *q = rand_buf(qs.size), *k = rand_buf(ks.size), *v = rand_buf(vs.size);
    float *m = kc->mask ? rand_buf(ms.size) : NULL;
    float *y = malloc(sizeof(float) * (size_t)(ys.size > 0 ? ys.size : 1));
    int64_t ny = kc->B * kc->H * kc->tq * kc->dv;
    double *want = malloc(sizeof(double) * (size_t)(ny > 0 ? ny : 1));
    size_t ws_bytes = dlrt_attention_workspace(&a, 0);
    void *ws = ws_bytes ? malloc(ws_bytes) : NULL;
    double worst = INFINITY;
    if (!q || !k || !v || (kc->mask && !m) || !y || !want || (ws_bytes && !ws)) goto done;
    if (ws_bytes) *checked_ws = true;
    for (int64_t i = 0; i < ys.size; i++) y[i] = 12345.0f;
    if (m && kc->special == 1 && kc->tq > 1) /* row 1 of head (0, 0) sees only -inf */
        for (int64_t j = 0; j < kc->tk; j++) AT(m, ms, 0, 0, 1, j) = -INFINITY;
    if (m && kc->special == 2 && kc->tk > 2) AT(m, ms, 0, 0, 0, 2) = INFINITY;
    if (kc->special == 3 && kc->tq > 0 && kc->d > 0) AT(q, qs, 0, 0, kc->tq - 1, 0) = NAN;
    reference(&a, q, qs, k, ks, v, vs, m, ms, want);
    dlrt_attention(&a, q, k, v, m, y, ws);
    worst = 0;
    for (int64_t b = 0; b < kc->B; b++)
        for (int64_t h = 0; h < kc->H; h++)
            for (int64_t i = 0; i < kc->tq; i++)
                for (int64_t c = 0; c < kc->dv; c++) {
                    double w = want[((b * kc->H + h) * kc->tq + i) * kc->dv + c];
                    float *gp = &AT(y, ys, b, h, i, c);
                    double g = *gp;
                    *gp = 12345.0f; /* visited: the untouched check below skips it */
                    double e = isnan(w) || isnan(g) ? (isnan(w) && isnan(g) ? 0 : INFINITY)
                                                    : fabs(g - w) / (1e-3 + fabs(w));
                    if (!(e <= worst)) worst = e;
                }
    for (int64_t i = 0; i < ys.size; i++)
        if (y[i] != 12345.0f) worst = INFINITY; /* wrote outside its view */
done:
    free(q), free(k), free(v), free(m), free(y), free(want), free(ws);
    return worst;
}

static void test_kernel(void) {
    static const int64_t shapes[][6] = {
        /* B, H, tq, tk, d, dv */
        {1, 1, 1, 1, 1, 1},   {2, 3, 5, 7, 4, 3},    {1, 2, 17, 17, 8, 8}, {2, 2, 100, 128, 16, 16},
        {1, 2, 7, 3, 5, 5},   {1, 1, 64, 300, 12, 20}, {2, 1, 6, 6, 1, 7},  {1, 3, 9, 40, 33, 2},
    };
    int n_shapes = (int)(sizeof shapes / sizeof shapes[0]);
    bool ws_seen = false;
    for (int si = 0; si < n_shapes; si++) {
        const int64_t *sh = shapes[si];
        for (int combo = 0; combo < 30; combo++) {
            kcase kc = {sh[0], sh[1], sh[2], sh[3], sh[4], sh[5],
                        combo % L_COUNT, (combo / L_COUNT) % L_COUNT,
                        (combo + combo / L_COUNT) % L_COUNT, (combo * 3 + 1) % L_COUNT,
                        combo % M_COUNT, (combo / 2) % 2, 0};
            if (combo >= 25) kc.lq = kc.lk = kc.lv = kc.ly = combo - 25; /* one layout for all */
            double e = run_kernel_case(&kc, &ws_seen);
            char name[200];
            snprintf(name, sizeof name,
                     "kernel [%lld,%lld] tq %lld tk %lld d %lld dv %lld, layouts q%d k%d v%d y%d, "
                     "mask %d, causal %d (max rel err %.2g)",
                     (long long)kc.B, (long long)kc.H, (long long)kc.tq, (long long)kc.tk,
                     (long long)kc.d, (long long)kc.dv, kc.lq, kc.lk, kc.lv, kc.ly, kc.mask,
                     kc.causal, e);
            CHECK(name, e < 1e-4);
        }
    }
    /* special values, in both paths */
    static const char *const special_names[] = {"", "a row of -inf gives NaN",
                                                "a +inf score takes all the mass",
                                                "a NaN in q gives a NaN row"};
    for (int sp = 1; sp <= 3; sp++)
        for (int lay = L_DENSE; lay <= L_STRIDED; lay += L_STRIDED) {
            kcase kc = {2, 2, 6, 9, 5, 4, lay, lay, lay, lay, M_FULL, 0, sp};
            double e = run_kernel_case(&kc, &ws_seen);
            char name[160];
            snprintf(name, sizeof name, "kernel: %s (layout %d, err %.2g)", special_names[sp], lay, e);
            CHECK(name, e < 1e-4);
        }
    /* causal with more queries than keys: the first rows see no key (NaN); no keys at all: 0;
     * an empty head dim: the scores are the mask */
    for (int lay = L_DENSE; lay <= L_STRIDED; lay += L_STRIDED) {
        kcase c1 = {1, 2, 9, 4, 3, 3, lay, lay, lay, lay, M_NONE, 1, 0};
        kcase c2 = {2, 1, 3, 0, 3, 2, lay, lay, lay, lay, M_NONE, 0, 0};
        kcase c3 = {1, 2, 3, 5, 0, 2, lay, lay, lay, lay, M_FULL, 0, 0};
        CHECK("kernel: causal rows without keys are NaN", run_kernel_case(&c1, &ws_seen) < 1e-4);
        CHECK("kernel: no keys gives 0", run_kernel_case(&c2, &ws_seen) < 1e-4);
        CHECK("kernel: d = 0 gives softmax(mask) v", run_kernel_case(&c3, &ws_seen) < 1e-4);
    }
    /* rows longer than the stack buffer go through the workspace */
    for (int lay = L_HEADSPLIT; lay <= L_STRIDED; lay += L_STRIDED - L_HEADSPLIT)
        for (int causal = 0; causal < 2; causal++) {
            kcase kc = {1, 2, 3, 16500, 4, 3, lay, lay, lay, lay, M_BATCH_KEYS, causal, 0};
            char name[120];
            double e = run_kernel_case(&kc, &ws_seen);
            snprintf(name, sizeof name, "kernel: tk 16500 through the workspace (layout %d, causal %d, err %.2g)",
                     lay, causal, e);
            CHECK(name, e < 1e-4);
        }
    CHECK("the long rows used a workspace", ws_seen);
    dlrt_attn a = {.batch = 1, .heads = 1, .tq = 4, .tk = 16384, .d = 4, .dv = 4};
    CHECK("no workspace up to DLRT_ATTN_MAX_TK keys", dlrt_attention_workspace(&a, 8) == 0);
    a.tk = 20000;
    CHECK("workspace: one row per thread",
          dlrt_attention_workspace(&a, 3) == 3 * 20000 * sizeof(float) &&
              dlrt_attention_workspace(&a, 0) >= dlrt_attention_workspace(&a, 64));
}

/* ---------------------------------------------------------------- (b) graphs ---- */

static dl_compile_options opts;

static dl_value *const_f32(dl_graph *g, const char *name, int rank, const int64_t *dims,
                           const float *vals) {
    dl_tensor *t = NULL;
    if (dl_tensor_new(NULL, DL_F32, rank, dims, &t) != DL_OK) return NULL;
    float *p = dl_tensor_data(t);
    for (int64_t i = 0; i < dl_tensor_numel(t); i++) p[i] = vals ? vals[i] : frand();
    return dl_constant(g, name, t);
}

static dl_value *scalar(dl_graph *g, const char *name, float v) {
    return const_f32(g, name, 0, NULL, &v);
}

static dl_value *shape_const(dl_graph *g, const char *name, int n, const int64_t *v) {
    dl_tensor *t = NULL;
    int64_t dims[1] = {n};
    if (dl_tensor_new(NULL, DL_I64, 1, dims, &t) != DL_OK) return NULL;
    memcpy(dl_tensor_data(t), v, sizeof(int64_t) * (size_t)n);
    return dl_constant(g, name, t);
}

/* [1, 1, tq, tk] booleans: keep (j <= i + tk - tq) when !masked_fill, else its negation. */
static dl_value *causal_cond(dl_graph *g, const char *name, int64_t tq, int64_t tk, bool masked_fill,
                             bool spoil) {
    dl_tensor *t = NULL;
    int64_t dims[4] = {1, 1, tq, tk};
    if (dl_tensor_new(NULL, DL_BOOL, 4, dims, &t) != DL_OK) return NULL;
    uint8_t *p = dl_tensor_data(t);
    for (int64_t i = 0; i < tq; i++)
        for (int64_t j = 0; j < tk; j++) p[i * tk + j] = (j <= i + tk - tq) != masked_fill;
    if (spoil) p[tk] = !p[tk]; /* one cell off the causal pattern */
    return dl_constant(g, name, t);
}

static dl_value *tr(dl_graph *g, dl_value *x, const char *perm) {
    char a[64];
    snprintf(a, sizeof a, "perm=%s", perm);
    return dl_op1(g, "Transpose", x, a);
}

static const dl_group *attention_group(const dl_program *p, int *count) {
    const dl_group *found = NULL;
    *count = 0;
    for (int gi = 0; gi < p->fusion->n; gi++)
        if (p->fusion->groups[gi].kind == DL_G_ATTENTION) {
            found = &p->fusion->groups[gi];
            ++*count;
        }
    return found;
}

/* Largest |a - b| / (|b| + 0.1 * peak), peak the largest |b| (at least 1): float sums of
 * terms much larger than their result (softmax-weighted averages) err relative to the terms. */
static double max_rel(const dl_tensor *a, const dl_tensor *b) {
    if (!a || !b || a->numel != b->numel || a->rank != b->rank) return INFINITY;
    double worst = 0, peak = 1;
    for (int64_t i = 0; i < b->numel; i++)
        if (fabs(dl_get_f64(b, i)) > peak) peak = fabs(dl_get_f64(b, i));
    for (int64_t i = 0; i < a->numel; i++) {
        double x = dl_get_f64(a, i), y = dl_get_f64(b, i);
        double e = isnan(x) || isnan(y) ? (isnan(x) && isnan(y) ? 0 : INFINITY)
                                        : fabs(x - y) / (fabs(y) + 0.1 * peak);
        if (!(e <= worst)) worst = e;
    }
    return worst;
}

/* What a graph case expects of the fusion. */
typedef struct gcase {
    const char *name;
    int expect_groups;  /* attention groups wanted */
    int expect_nodes;   /* nodes in the group (0: any) */
    int expect_causal;  /* -1: any */
    bool expect_mask;
} gcase;

/* Compiles g (and frees it), checks its attention group against gc, then runs it natively and
 * on the reference backend n_runs times with random inputs: in run r a symbolic dim named "T"
 * takes sym_vals[r][1], one named "S" sym_vals[r][2], any other sym_vals[r][0]. */
static void check_graph(dl_ctx *ctx, dl_graph *g, const gcase *gc, int n_runs,
                        const int64_t sym_vals[][4]) {
    char name[256];
    if (dl_graph_status(g) != DL_OK) {
        snprintf(name, sizeof name, "%s: graph builds (%s)", gc->name, dl_errmsg(ctx));
        CHECK(name, false);
        dl_graph_free(g);
        return;
    }
    dl_program *p = NULL;
    if (dl_compile(ctx, g, &opts, &p) != DL_OK) {
        snprintf(name, sizeof name, "%s: compiles (%s)", gc->name, dl_errmsg(ctx));
        CHECK(name, false);
        dl_graph_free(g);
        return;
    }
    int count;
    const dl_group *gr = attention_group(p, &count);
    snprintf(name, sizeof name, "%s: %d attention group(s) (got %d)", gc->name, gc->expect_groups, count);
    CHECK(name, count == gc->expect_groups);
    if (gr && gc->expect_nodes) {
        snprintf(name, sizeof name, "%s: the group absorbed %d nodes (got %d)", gc->name,
                 gc->expect_nodes, gr->n_nodes);
        CHECK(name, gr->n_nodes == gc->expect_nodes);
    }
    if (gr && gc->expect_causal >= 0) {
        snprintf(name, sizeof name, "%s: causal %d, mask %d", gc->name, gc->expect_causal, gc->expect_mask);
        CHECK(name, gr->attn.causal == (gc->expect_causal != 0) && (gr->attn.mask != NULL) == gc->expect_mask);
    }
    int n_in = dl_graph_num_inputs(g);
    for (int run = 0; run < n_runs; run++) {
        dl_tensor *in[4] = {0}, *want[4] = {0}, *got[4] = {0};
        int n_out = dl_graph_num_outputs(g);
        bool ok = n_in <= 4 && n_out <= 4;
        for (int i = 0; ok && i < n_in; i++) {
            dl_value *v = dl_graph_input(g, i);
            int64_t dims[DL_MAX_RANK];
            int r = dl_value_rank(v), k = 0;
            for (int d = 0; d < r; d++) {
                dims[d] = dl_value_dim(v, d);
                if (dims[d] < 0) {
                    const char *sn = dl_value_dim_name(v, d);
                    k = sn && !strcmp(sn, "T") ? 1 : sn && !strcmp(sn, "S") ? 2 : 0;
                    dims[d] = sym_vals[run][k];
                }
            }
            ok = dl_tensor_new(ctx, DL_F32, r, dims, &in[i]) == DL_OK;
            float *pd = ok ? dl_tensor_data(in[i]) : NULL;
            for (int64_t e = 0; ok && e < dl_tensor_numel(in[i]); e++) pd[e] = 2.0f * frand();
        }
        ok = ok && dl_run(ctx, g, DL_BACKEND_REF, n_in, NULL, in, want) == DL_OK;
        ok = ok && dl_program_run(ctx, p, n_in, NULL, in, got) == DL_OK;
        double e = ok ? 0 : INFINITY;
        for (int o = 0; ok && o < n_out; o++) {
            double eo = max_rel(got[o], want[o]);
            if (!(eo <= e)) e = eo;
        }
        snprintf(name, sizeof name, "%s: native matches ref, sizes %lld/%lld/%lld (max rel err %.2g)%s%s",
                 gc->name, (long long)sym_vals[run][0], (long long)sym_vals[run][1],
                 (long long)sym_vals[run][2], e, ok ? "" : ": ", ok ? "" : dl_errmsg(ctx));
        CHECK(name, e < 1e-4);
        dl_ctx_clear(ctx);
        if (run == 0 && count > 0) { /* the report names the kind */
            char *text = NULL;
            size_t len = 0;
            FILE *f = open_memstream(&text, &len);
            bool said = f && dl_program_report(ctx, p, n_in, in, f) == DL_OK;
            if (f) fclose(f);
            snprintf(name, sizeof name, "%s: the report lists the attention kernel", gc->name);
            CHECK(name, said && text && strstr(text, "attention "));
            free(text);
            dl_ctx_clear(ctx);
        }
        for (int i = 0; i < n_in; i++) dl_tensor_free(in[i]);
        for (int o = 0; o < 4; o++) {
            dl_tensor_free(want[o]);
            dl_tensor_free(got[o]);
        }
    }
    dl_program_free(p);
    dl_graph_free(g);
}

/* BERT self-attention as torch exports it: projections, head split (Reshape + Transpose),
 * k transposed to [B, H, d, T] by one Transpose, Div by sqrt(d), Add of a [B, 1, 1, T] mask,
 * Softmax, MatMul with v, Transpose back and merge heads. Batch and sequence are symbolic. */
static dl_graph *bert_graph(dl_ctx *ctx, bool with_mask) {
    enum { E = 32, H = 4, D = 8 };
    dl_graph *g = dl_graph_new(ctx);
    const char *syms[] = {"B", "T", NULL};
    dl_value *x = dl_input(g, "x", DL_F32, 3, (int64_t[]){-1, -2, E}, syms);
    dl_value *mask = with_mask ? dl_input(g, "mask", DL_F32, 4, (int64_t[]){-1, 1, 1, -2},
                                          (const char *[]){"B", NULL, NULL, "T"})
                               : NULL;
    dl_value *split = shape_const(g, "split", 4, (int64_t[]){0, 0, H, D});
    dl_value *merge = shape_const(g, "merge", 3, (int64_t[]){0, 0, E});
    dl_value *heads[3];
    for (int i = 0; i < 3; i++) {
        char n[8];
        snprintf(n, sizeof n, "w%d", i);
        float wv[E * E]; /* scaled like a trained layer's, so the scores stay well conditioned */
        for (int j = 0; j < E * E; j++) wv[j] = frand() * 0.25f;
        dl_value *w = const_f32(g, n, 2, (int64_t[]){E, E}, wv);
        heads[i] = dl_op2(g, "Reshape", dl_matmul(g, x, w), split, NULL);
    }
    dl_value *q = tr(g, heads[0], "[0,2,1,3]"), *k = tr(g, heads[1], "[0,2,3,1]");
    dl_value *v = tr(g, heads[2], "[0,2,1,3]");
    dl_value *s = dl_div(g, dl_matmul(g, q, k), scalar(g, "sqrt_d", sqrtf((float)D)));
    if (mask) s = dl_add(g, s, mask);
    dl_value *y = tr(g, dl_matmul(g, dl_softmax(g, s, -1), v), "[0,2,1,3]");
    dl_output(g, dl_op2(g, "Reshape", y, merge, NULL), "y");
    return g;
}

static void test_bert(dl_ctx *ctx, bool with_mask) {
    gcase gc = {with_mask ? "bert (rank 4, mask)" : "bert (rank 4, no mask)", 1,
                with_mask ? 9 : 8, 0, with_mask};
    const int64_t sizes[][4] = {{1, 5, 0, 0}, {3, 33, 0, 0}, {2, 64, 0, 0}};
    check_graph(ctx, bert_graph(ctx, with_mask), &gc, 3, sizes);
}

/* The blocks of work depend on the shape only: 1, 2 and 5 threads give the same bits. */
static void test_thread_count(dl_ctx *ctx) {
    dl_graph *g = bert_graph(ctx, true);
    dl_tensor *in[2] = {0}, *out[3] = {0};
    bool ok = dl_graph_status(g) == DL_OK &&
              dl_tensor_new(ctx, DL_F32, 3, (int64_t[]){1, 100, 32}, &in[0]) == DL_OK &&
              dl_tensor_new(ctx, DL_F32, 4, (int64_t[]){1, 1, 1, 100}, &in[1]) == DL_OK;
    for (int i = 0; ok && i < 2; i++) {
        float *p = dl_tensor_data(in[i]);
        for (int64_t e = 0; e < dl_tensor_numel(in[i]); e++) p[e] = frand();
    }
    const int threads[3] = {1, 2, 5};
    for (int t = 0; ok && t < 3; t++) {
        dl_compile_options o = opts;
        o.threads = threads[t];
        dl_program *p = NULL;
        ok = dl_compile(ctx, g, &o, &p) == DL_OK && dl_program_run(ctx, p, 2, NULL, in, &out[t]) == DL_OK;
        dl_program_free(p);
    }
    for (int t = 1; ok && t < 3; t++)
        ok = out[t]->numel == out[0]->numel &&
             !memcmp(dl_tensor_data(out[t]), dl_tensor_data(out[0]), sizeof(float) * (size_t)out[0]->numel);
    CHECK("bert: identical results with 1, 2 and 5 threads", ok);
    for (int i = 0; i < 3; i++) dl_tensor_free(out[i]);
    dl_tensor_free(in[0]);
    dl_tensor_free(in[1]);
    dl_graph_free(g);
}

/* GPT-2 style causal attention: Where(tril, scores, -1e4) (or masked_fill: Where(triu, -inf,
 * scores)) on fixed-size inputs; a spoiled pattern must not become causal. */
static void test_gpt(dl_ctx *ctx, bool masked_fill, bool spoil) {
    enum { B = 2, H = 3, T = 12, D = 8 };
    dl_graph *g = dl_graph_new(ctx);
    dl_value *x[3];
    for (int i = 0; i < 3; i++) {
        char n[4] = {"qkv"[i], 0};
        x[i] = dl_input(g, n, DL_F32, 4, (int64_t[]){B, T, H, D}, NULL);
    }
    dl_value *q = tr(g, x[0], "[0,2,1,3]"), *k = tr(g, x[1], "[0,2,3,1]"), *v = tr(g, x[2], "[0,2,1,3]");
    dl_value *s = dl_div(g, dl_matmul(g, q, k), scalar(g, "sqrt_d", sqrtf((float)D)));
    dl_value *cond = causal_cond(g, "tril", T, T, masked_fill, spoil);
    dl_value *fill = scalar(g, "fill", masked_fill ? -INFINITY : -1e4f);
    dl_value *w_in[3] = {cond, masked_fill ? fill : s, masked_fill ? s : fill}, *w_out[1];
    dl_add_node(g, "Where", 3, w_in, 1, w_out, 0, NULL);
    dl_value *y = tr(g, dl_matmul(g, dl_softmax(g, w_out[0], -1), v), "[0,2,1,3]");
    dl_output(g, y, "y");
    gcase gc = {masked_fill ? "gpt (masked_fill -inf)" : "gpt (where tril, -1e4)", 1, 9, 1, false};
    if (spoil) gc = (gcase){"gpt with a non-causal Where: no attention", 0, 0, -1, false};
    const int64_t sizes[][4] = {{0, 0, 0, 0}};
    check_graph(ctx, g, &gc, 1, sizes);
}

/* nn.MultiheadAttention: rank 3 [B*H, T, d] made by Transpose(1, 0, 2) from [T, B*H, d], q
 * scaled before the MatMul, an additive constant mask [T, S], result transposed back. */
static void test_mha_rank3(dl_ctx *ctx) {
    enum { T = 10, S = 14, BH = 6, D = 4 };
    dl_graph *g = dl_graph_new(ctx);
    dl_value *q0 = dl_input(g, "q", DL_F32, 3, (int64_t[]){T, BH, D}, NULL);
    dl_value *k0 = dl_input(g, "k", DL_F32, 3, (int64_t[]){S, BH, D}, NULL);
    dl_value *v0 = dl_input(g, "v", DL_F32, 3, (int64_t[]){S, BH, 5}, NULL);
    dl_value *q = dl_mul(g, tr(g, q0, "[1,0,2]"), scalar(g, "scaling", 0.5f));
    dl_value *k = tr(g, k0, "[1,2,0]");
    dl_value *mask = const_f32(g, "mask", 2, (int64_t[]){T, S}, NULL);
    dl_value *s = dl_add(g, mask, dl_matmul(g, q, k));
    dl_value *y = tr(g, dl_matmul(g, dl_softmax(g, s, 2), tr(g, v0, "[1,0,2]")), "[1,0,2]");
    dl_output(g, y, "y");
    gcase gc = {"multihead attention (rank 3, q scaled, constant mask)", 1, 9, 0, true};
    const int64_t sizes[][4] = {{0, 0, 0, 0}};
    check_graph(ctx, g, &gc, 1, sizes);
}

/* Cross attention without transposes: k given as [B, 1, d, S] (shared by the heads), Mul after
 * the MatMul, a [B, H, T, S] mask input, dv != d, symbolic T and S. */
static void test_plain(dl_ctx *ctx) {
    dl_graph *g = dl_graph_new(ctx);
    dl_value *q = dl_input(g, "q", DL_F32, 4, (int64_t[]){2, 3, -1, 6}, (const char *[]){NULL, NULL, "T", NULL});
    dl_value *k = dl_input(g, "k", DL_F32, 4, (int64_t[]){2, 1, 6, -1}, (const char *[]){NULL, NULL, NULL, "S"});
    dl_value *v = dl_input(g, "v", DL_F32, 4, (int64_t[]){2, 3, -1, 9}, (const char *[]){NULL, NULL, "S", NULL});
    dl_value *m = dl_input(g, "m", DL_F32, 4, (int64_t[]){2, 3, -1, -2}, (const char *[]){NULL, NULL, "T", "S"});
    dl_value *s = dl_add(g, dl_mul(g, scalar(g, "c", 0.3f), dl_matmul(g, q, k)), m);
    dl_output(g, dl_matmul(g, dl_softmax(g, s, -1), v), "y");
    gcase gc = {"cross attention, k [B,1,d,S], symbolic T and S", 1, 5, 0, true};
    const int64_t sizes[][4] = {{0, 7, 11, 0}, {0, 1, 70, 0}};
    check_graph(ctx, g, &gc, 2, sizes);
}

/* One head, rank 2, with opset-11 style Softmax(axis=1). */
static void test_rank2(dl_ctx *ctx) {
    dl_graph *g = dl_graph_new(ctx);
    dl_value *q = dl_input(g, "q", DL_F32, 2, (int64_t[]){7, 5}, NULL);
    dl_value *k = dl_input(g, "k", DL_F32, 2, (int64_t[]){9, 5}, NULL);
    dl_value *v = dl_input(g, "v", DL_F32, 2, (int64_t[]){9, 3}, NULL);
    dl_value *s = dl_matmul(g, q, tr(g, k, "[1,0]"));
    dl_output(g, dl_matmul(g, dl_softmax(g, s, 1), v), "y");
    gcase gc = {"single head, rank 2", 1, 4, 0, false};
    const int64_t sizes[][4] = {{0, 0, 0, 0}};
    check_graph(ctx, g, &gc, 1, sizes);
}

/* Sizes where the kernel runs in parallel (the runtime's pool) and, with 16500 keys, through the
 * plan's workspace. */
static void test_large(dl_ctx *ctx, int64_t t, int64_t s) {
    dl_graph *g = dl_graph_new(ctx);
    dl_value *q = dl_input(g, "q", DL_F32, 4, (int64_t[]){2, 4, t, 32}, NULL);
    dl_value *k = dl_input(g, "k", DL_F32, 4, (int64_t[]){2, s, 4, 32}, NULL);
    dl_value *v = dl_input(g, "v", DL_F32, 4, (int64_t[]){2, 4, s, 32}, NULL);
    dl_value *sc = dl_mul(g, dl_matmul(g, q, tr(g, k, "[0,2,3,1]")), scalar(g, "c", 0.125f));
    dl_output(g, dl_matmul(g, dl_softmax(g, sc, -1), v), "y");
    gcase gc = {s > 16384 ? "16500 keys (workspace)" : "64 x 64 (parallel)", 1, 5, 0, false};
    const int64_t sizes[][4] = {{0, 0, 0, 0}};
    check_graph(ctx, g, &gc, 1, sizes);
}

/* Patterns that must keep their separate kernels (and still compute the same). */
static void test_no_match(dl_ctx *ctx, int which) {
    dl_graph *g = dl_graph_new(ctx);
    dl_dtype dt = which == 3 ? DL_F64 : DL_F32;
    dl_value *q = dl_input(g, "q", dt, 4, (int64_t[]){2, 2, 5, 4}, NULL);
    dl_value *k = dl_input(g, "k", dt, 4, (int64_t[]){2, 2, 4, 5}, NULL);
    dl_value *v = dl_input(g, "v", dt, 4, (int64_t[]){2, 2, 5, 3}, NULL);
    dl_value *s = dl_matmul(g, q, k);
    dl_value *p = dl_softmax(g, s, which == 1 ? -2 : -1);
    dl_value *y = dl_matmul(g, p, v);
    static const char *const names[] = {"softmax output used twice: no attention",
                                        "softmax over the query axis: no attention",
                                        "scores are a graph output: no attention",
                                        "float64: no attention"};
    dl_output(g, y, "y");
    if (which == 0) dl_output(g, dl_relu(g, p), "p");
    if (which == 2) dl_output(g, s, "scores");
    if (which == 3) { /* the f64 graph is compared in f32 terms: cast the output */
        dl_graph_free(g);
        g = dl_graph_new(ctx);
        q = dl_op1(g, "Cast", dl_input(g, "q", DL_F32, 4, (int64_t[]){2, 2, 5, 4}, NULL), "to=11");
        k = dl_op1(g, "Cast", dl_input(g, "k", DL_F32, 4, (int64_t[]){2, 2, 4, 5}, NULL), "to=11");
        v = dl_op1(g, "Cast", dl_input(g, "v", DL_F32, 4, (int64_t[]){2, 2, 5, 3}, NULL), "to=11");
        y = dl_matmul(g, dl_softmax(g, dl_matmul(g, q, k), -1), v);
        dl_output(g, dl_op1(g, "Cast", y, "to=1"), "y");
    }
    gcase gc = {names[which], 0, 0, -1, false};
    const int64_t sizes[][4] = {{0, 0, 0, 0}};
    check_graph(ctx, g, &gc, 1, sizes);
}

int main(void) {
    test_kernel();
    char dir[] = "/tmp/dlcc-test-attention-XXXXXX";
    if (!test_cache_open(dir, &opts)) return 1;
    dl_ctx *ctx = dl_ctx_new();
    test_bert(ctx, true);
    test_bert(ctx, false);
    test_thread_count(ctx);
    test_gpt(ctx, false, false);
    test_gpt(ctx, true, false);
    test_gpt(ctx, false, true);
    test_mha_rank3(ctx);
    test_plain(ctx);
    test_rank2(ctx);
    test_large(ctx, 64, 64);
    test_large(ctx, 3, 16500);
    for (int which = 0; which < 4; which++) test_no_match(ctx, which);
    dl_ctx_free(ctx);
    test_cache_remove(dir);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
