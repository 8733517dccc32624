/* test_rt.c — unit tests of the runtime kernels (src/kernels/rt): dlrt_sgemm, dlrt_conv_forward,
 * dlrt_pool_forward, dlrt_softmax and dlrt_layernorm, each compared with the reference
 * interpreter running the equivalent ONNX graph (Gemm + Add + activation, Conv + Add + Relu,
 * MaxPool / AveragePool / LpPool, Softmax / LogSoftmax, LayerNormalization). The kernel sources
 * are included here (all of them, through rt-lib.c, so the copy in libdlcc is never linked in) and
 * built with this binary's flags: tests/run-tests.sh also builds it per instruction set. Padding
 * around strided buffers is filled with a canary and checked after each call.
 *
 * `test_rt --bench` prints single-thread GFLOP/s of dlrt_sgemm at n = 256, 512, 1024 instead. */
#include "../../src/kernels/rt-lib.c"
#include "dlcc.h"

#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static int passed, failed;
#define CANARY 12345.0f

static void check(int ok, const char *what) {
    if (ok)
        passed++;
    else {
        failed++;
        printf("FAIL %s\n", what);
    }
}

#include "test-rng.h"
static float *rand_buf(int64_t n) {
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++) p[i] = frand();
    return p;
}

static int close_to(float got, float ref, double tol) {
    if (isnan(ref) || isnan(got)) return isnan(ref) && isnan(got);
    if (isinf(ref) || isinf(got)) return got == ref;
    return fabs((double)got - (double)ref) <= tol * (1.0 + fabs((double)ref));
}

/* ---- reference graphs ---- */

typedef struct ref_graph {
    dl_ctx *ctx;
    dl_graph *g;
    int names;
} ref_graph;

static void rg_init(ref_graph *r) {
    r->ctx = dl_ctx_new();
    r->g = dl_graph_new(r->ctx);
    r->names = 0;
}

static dl_value *rg_const(ref_graph *r, int rank, const int64_t *dims, const float *data) {
    dl_tensor *t;
    char name[32];
    if (dl_tensor_new(r->ctx, DL_F32, rank, dims, &t) != DL_OK) return NULL;
    if (dl_tensor_numel(t) > 0) memcpy(dl_tensor_data(t), data, (size_t)dl_tensor_numel(t) * 4);
    snprintf(name, sizeof name, "k%d", r->names++);
    return dl_constant(r->g, name, t);
}

static dl_value *rg_node(ref_graph *r, const char *op, int n_in, dl_value *const *in,
                         const char *attrs) {
    const char *a[12];
    char buf[512];
    int na = 0;
    snprintf(buf, sizeof buf, "%s", attrs ? attrs : "");
    for (char *s = buf; *s && na < 12;) {
        a[na++] = s;
        char *e = strchr(s, ';');
        if (!e) break;
        *e = 0;
        s = e + 1;
    }
    dl_value *out = NULL;
    if (dl_add_node(r->g, op, n_in, in, 1, &out, na, a) != DL_OK) return NULL;
    return out;
}

/* Runs the graph with outputs outs[0..n) into res[]; 0 on failure (reported). */
static int rg_run(ref_graph *r, int n, dl_value **outs, dl_tensor **res, const char *what) {
    for (int i = 0; i < n; i++) dl_output(r->g, outs[i], NULL);
    if (dl_graph_status(r->g) != DL_OK ||
        dl_run(r->ctx, r->g, DL_BACKEND_REF, 0, NULL, NULL, res) != DL_OK) {
        printf("FAIL %s: reference failed: %s\n", what, dl_errmsg(r->ctx));
        failed++;
        return 0;
    }
    return 1;
}

static void rg_free(ref_graph *r, int n, dl_tensor **res) {
    for (int i = 0; i < n; i++) dl_tensor_free(res[i]);
    dl_graph_free(r->g);
    dl_ctx_free(r->ctx);
}

/* Appends the activation node for `act` (with its parameters) to y. */
static dl_value *rg_act(ref_graph *r, dl_value *y, int act, float a, float b) {
    char at[96];
    switch (act) {
    case DLRT_ACT_RELU:
        return rg_node(r, "Relu", 1, &y, NULL);
    case DLRT_ACT_CLIP: {
        int64_t none[1] = {0};
        dl_value *in[3] = {y, rg_const(r, 0, none, &a), rg_const(r, 0, none, &b)};
        return rg_node(r, "Clip", 3, in, NULL);
    }
    case DLRT_ACT_LEAKY_RELU:
        snprintf(at, sizeof at, "alpha=%.9g", a);
        return rg_node(r, "LeakyRelu", 1, &y, at);
    case DLRT_ACT_SIGMOID:
        return rg_node(r, "Sigmoid", 1, &y, NULL);
    case DLRT_ACT_TANH:
        return rg_node(r, "Tanh", 1, &y, NULL);
    case DLRT_ACT_GELU:
        return rg_node(r, "Gelu", 1, &y, NULL);
    case DLRT_ACT_HARD_SIGMOID:
        snprintf(at, sizeof at, "alpha=%.9g;beta=%.9g", a, b);
        return rg_node(r, "HardSigmoid", 1, &y, at);
    case DLRT_ACT_HARD_SWISH:
        return rg_node(r, "HardSwish", 1, &y, NULL);
    case DLRT_ACT_GELU_TANH: /* (its parameters are the node's own) */
        return rg_node(r, "Gelu", 1, &y, "approximate=tanh");
    default:
        return y;
    }
}

/* ---- GEMM ---- */

enum { BIAS_NONE, BIAS_ROW, BIAS_COL, BIAS_SCALAR, BIAS_FULL, BIAS_FULL_T, BIAS_KINDS };
enum { RES_NONE, RES_DENSE, RES_T, RES_INPLACE, RES_KINDS };

typedef struct gemm_cfg {
    float alpha, beta;
    int bias, res, act;
    float act_a, act_b;
    int use_ep;
} gemm_cfg;

/* dlrt_sgemm on padded copies against Gemm [+ Add residual] [+ activation]. */
static void gemm_case(int64_t M, int64_t N, int64_t K, int ta, int tb, const gemm_cfg *c) {
    char what[200];
    snprintf(what, sizeof what, "sgemm M=%lld N=%lld K=%lld ta=%d tb=%d bias=%d res=%d act=%d",
             (long long)M, (long long)N, (long long)K, ta, tb, c->bias, c->res, c->act);
    const int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
    float *a = rand_buf(ar * ac), *b = rand_buf(br * bc), *bias = rand_buf(M * N + M + N);
    float *res = rand_buf(M * N);
    ref_graph r;
    rg_init(&r);
    int64_t adims[2] = {ar, ac}, bdims[2] = {br, bc}, cdims[2] = {M, N};
    dl_value *in[3] = {rg_const(&r, 2, adims, a), rg_const(&r, 2, bdims, b), NULL};
    int bias_on = c->use_ep && c->bias != BIAS_NONE;
    if (bias_on) {
        int64_t row[1] = {N}, col[2] = {M, 1}, one[1] = {1};
        if (c->bias == BIAS_ROW)
            in[2] = rg_const(&r, 1, row, bias);
        else if (c->bias == BIAS_COL)
            in[2] = rg_const(&r, 2, col, bias);
        else if (c->bias == BIAS_SCALAR)
            in[2] = rg_const(&r, 1, one, bias);
        else
            in[2] = rg_const(&r, 2, cdims, bias);
    }
    char at[128];
    snprintf(at, sizeof at, "transA=%d;transB=%d;alpha=%.9g;beta=%.9g", ta, tb,
             c->use_ep ? c->alpha : 1.0f, c->use_ep ? c->beta : 1.0f);
    dl_value *y = rg_node(&r, "Gemm", bias_on ? 3 : 2, in, at);
    if (c->use_ep && c->res != RES_NONE) {
        dl_value *ad[2] = {y, rg_const(&r, 2, cdims, res)};
        y = rg_node(&r, "Add", 2, ad, NULL);
    }
    if (c->use_ep) y = rg_act(&r, y, c->act, c->act_a, c->act_b);
    dl_tensor *out = NULL;
    if (!rg_run(&r, 1, &y, &out, what)) goto done;

    /* padded operands */
    const int64_t lda = ac + 3, ldb = bc + 5, ldc = N + 7, ldbias = N + 2, ldr = N + 1;
    float *ap = malloc((size_t)(ar * lda + 1) * 4), *bp = malloc((size_t)(br * ldb + 1) * 4);
    float *cp = malloc((size_t)(M * ldc + 1) * 4);
    float *biasp = malloc((size_t)(M * ldbias + M + N + 1) * 4),
          *resp = malloc((size_t)(M * ldr + 1) * 4);
    for (int64_t i = 0; i < ar * lda; i++) ap[i] = (i % lda) < ac ? a[i / lda * ac + i % lda] : NAN;
    for (int64_t i = 0; i < br * ldb; i++) bp[i] = (i % ldb) < bc ? b[i / ldb * bc + i % ldb] : NAN;
    for (int64_t i = 0; i < M * ldc; i++) cp[i] = CANARY;
    dlrt_epilogue ep = {
        .alpha = c->alpha, .beta = c->beta, .act = c->act, .act_a = c->act_a, .act_b = c->act_b};
    if (bias_on) {
        ep.bias = biasp;
        switch (c->bias) {
        case BIAS_ROW:
            memcpy(biasp, bias, (size_t)N * 4), ep.bias_cs = 1;
            break;
        case BIAS_COL:
            memcpy(biasp, bias, (size_t)M * 4), ep.bias_rs = 1;
            break;
        case BIAS_SCALAR:
            biasp[0] = bias[0];
            break;
        case BIAS_FULL: /* row stride ldbias */
            for (int64_t i = 0; i < M * N; i++) biasp[i / N * ldbias + i % N] = bias[i];
            ep.bias_rs = ldbias, ep.bias_cs = 1;
            break;
        default: /* stored transposed, N x M */
            for (int64_t i = 0; i < M * N; i++) biasp[i % N * M + i / N] = bias[i];
            ep.bias_rs = 1, ep.bias_cs = M;
        }
    }
    if (c->res == RES_DENSE || c->res == RES_T || c->res == RES_INPLACE) {
        int t = c->res == RES_T;
        float *dst = c->res == RES_INPLACE ? cp : resp;
        int64_t rs = c->res == RES_INPLACE ? ldc : t ? 1 : ldr, cs = t ? M : 1;
        for (int64_t i = 0; i < M * N; i++) dst[i / N * rs + i % N * cs] = res[i];
        ep.residual = dst, ep.res_rs = rs, ep.res_cs = cs;
    }
    dlrt_sgemm(M, N, K, ap, lda, ta, bp, ldb, tb, cp, ldc, c->use_ep ? &ep : NULL);
    const float *ref = dl_tensor_data(out);
    int ok = dl_tensor_numel(out) == M * N, bad_at = -1;
    for (int64_t i = 0; ok && i < M * ldc; i++) {
        int64_t row = i / ldc, col = i % ldc;
        /* float sums of K products differ with the summation order (microkernel vs
         * reference) by a bound that grows with K */
        ok = col < N ? close_to(cp[i], ref[row * N + col], 1e-5 * (1.0 + (double)K / 100.0))
                     : cp[i] == CANARY;
        if (!ok) bad_at = (int)i;
    }
    if (!ok && bad_at >= 0)
        printf("  at C[%lld][%lld]: got %.8g want %.8g\n", (long long)(bad_at / ldc),
               (long long)(bad_at % ldc), cp[bad_at],
               bad_at % ldc < N ? ref[bad_at / ldc * N + bad_at % ldc] : CANARY);
    check(ok, what);
    free(ap), free(bp), free(cp), free(biasp), free(resp);
done:
    rg_free(&r, 1, &out);
    free(a), free(b), free(bias), free(res);
}

/* alpha * product + beta * bias per column + a dense residual (rows N apart), then ReLU. */
static dlrt_epilogue col_bias_res_relu(float alpha, float beta, const float *bias, const float *res,
                                       int64_t N) {
    return (dlrt_epilogue){.alpha = alpha,
                           .beta = beta,
                           .bias = bias,
                           .bias_cs = 1,
                           .residual = res,
                           .res_rs = N,
                           .res_cs = 1,
                           .act = DLRT_ACT_RELU};
}

/* dlrt_sgemm_ex with op(A) and/or op(B) prepacked vs straightforward loops, with a bias-row +
 * residual + relu epilogue. */
static void packed_case(int64_t M, int64_t N, int64_t K, int ta, int tb, int pa, int pb) {
    float *a = rand_buf(M * K), *b = rand_buf(K * N), *bias = rand_buf(N), *res = rand_buf(M * N);
    float *c = malloc((size_t)(M * N) * sizeof(float));
    float *ap = malloc(dlrt_gemm_packed_bytes(0, M, K) + 4);
    float *bp = malloc(dlrt_gemm_packed_bytes(1, N, K) + 4);
    const int64_t lda = ta ? M : K, ldb = tb ? K : N;
    if (pa) dlrt_gemm_pack_operand(0, M, K, a, lda, ta, ap);
    if (pb) dlrt_gemm_pack_operand(1, N, K, b, ldb, tb, bp);
    const dlrt_epilogue ep = col_bias_res_relu(1.0f, 1.0f, bias, res, N);
    dlrt_sgemm_ex(M, N, K, pa ? ap : a, lda, ta, pa, pb ? bp : b, ldb, tb, pb, c, N, &ep);
    int ok = 1;
    for (int64_t i = 0; i < M && ok; i++)
        for (int64_t j = 0; j < N && ok; j++) {
            double acc = 0;
            for (int64_t p = 0; p < K; p++)
                acc +=
                    (double)a[ta ? p * M + i : i * K + p] * (double)b[tb ? j * K + p : p * N + j];
            acc += bias[j] + res[i * N + j];
            ok = close_to(c[i * N + j], (float)(acc > 0 ? acc : 0), 1e-5 * (1.0 + K / 100.0));
        }
    char what[160];
    snprintf(what, sizeof what, "sgemm packed M=%lld N=%lld K=%lld ta=%d tb=%d packed A=%d B=%d",
             (long long)M, (long long)N, (long long)K, ta, tb, pa, pb);
    check(ok, what);
    if (pb) { /* B marked as in cache (not prefetched): the same bits */
        float *hot = malloc((size_t)(M * N) * sizeof(float));
        dlrt_sgemm_ex(M, N, K, pa ? ap : a, lda, ta, pa, bp, ldb, tb, DLRT_B_PACKED_HOT, hot, N,
                      &ep);
        snprintf(what, sizeof what, "sgemm packed M=%lld N=%lld K=%lld ta=%d packed A=%d: B hot",
                 (long long)M, (long long)N, (long long)K, ta, pa);
        check(!memcmp(c, hot, (size_t)(M * N) * sizeof(float)), what);
        free(hot);
    }
    free(a), free(b), free(bias), free(res), free(c), free(ap), free(bp);
}

/* dlrt_sgemm_ws packs an operand that several tiles read once, into the workspace: the product
 * must be bit-identical to dlrt_sgemm_ex's (which packs it per tile), the workspace must be
 * used when dlrt_gemm_workspace bytes are given and not overrun, and a smaller one must still
 * give the same product (it packs what fits). pa: A (the left operand) prepacked as weights. */
static void workspace_case(int64_t M, int64_t N, int64_t K, int ta, int tb, int pa) {
    float *a = rand_buf(M * K), *b = rand_buf(K * N), *bias = rand_buf(N), *res = rand_buf(M * N);
    float *ap = malloc(dlrt_gemm_packed_bytes(0, M, K) + 4);
    const size_t mc = (size_t)(M * N) * sizeof(float), c_n = (size_t)(M * N);
    float *want = malloc(mc), *got = malloc(mc), *small = malloc(mc);
    const int64_t lda = ta ? M : K, ldb = tb ? K : N;
    if (pa) dlrt_gemm_pack_operand(0, M, K, a, lda, ta, ap);
    const float *A = pa ? ap : a;
    const size_t wsb = dlrt_gemm_workspace(M, N, K, pa, 0), wsn = wsb / sizeof(float);
    float *ws = malloc(wsb + 64 * sizeof(float));
    for (size_t i = 0; i < wsn + 64; i++) ws[i] = -7.0f; /* canary past the end */
    const dlrt_epilogue ep = col_bias_res_relu(0.5f, 1.5f, bias, res, N);
    dlrt_sgemm_ex(M, N, K, A, lda, ta, pa, b, ldb, tb, 0, want, N, &ep);
    dlrt_sgemm_ws(M, N, K, A, lda, ta, pa, b, ldb, tb, 0, got, N, &ep, ws, wsb);
    int used = 0, canary = 1;
    for (size_t i = 0; i < wsn; i++) used |= ws[i] != -7.0f;
    for (size_t i = wsn; i < wsn + 64; i++) canary &= ws[i] == -7.0f;
    dlrt_sgemm_ws(M, N, K, A, lda, ta, pa, b, ldb, tb, 0, small, N, &ep, ws, wsb / 2);
    char what[160];
    snprintf(what, sizeof what, "sgemm workspace M=%lld N=%lld K=%lld ta=%d tb=%d packed A=%d",
             (long long)M, (long long)N, (long long)K, ta, tb, pa);
    check(wsb > 0 && used && canary && !memcmp(want, got, c_n * sizeof(float)) &&
              !memcmp(want, small, c_n * sizeof(float)),
          what);
    free(a), free(b), free(bias), free(res), free(ap), free(want), free(got), free(small);
    free(ws);
}

/* B read in place (rows N + 3 apart; packed all the same on the generic build) against B
 * packed (rows 64 KiB apart, which dlrt_gemm_b_in_place turns down): the same products to the bit,
 * both close to the double reference, with a bias-row + residual + ReLU epilogue. */
static void in_place_case(int64_t M, int64_t N, int64_t K) {
    enum { FAR = 16384 }; /* floats: 64 KiB */
    const int64_t near = N + 3;
    float *a = rand_buf(M * K), *b = rand_buf(K * N), *bias = rand_buf(N), *res = rand_buf(M * N);
    float *bn = malloc((size_t)(K * near) * sizeof(float));
    float *bf = malloc((size_t)(K * FAR) * sizeof(float));
    for (int64_t i = 0; i < K * near; i++) bn[i] = i % near < N ? b[i / near * N + i % near] : NAN;
    for (int64_t p = 0; p < K; p++) memcpy(bf + p * FAR, b + p * N, (size_t)N * sizeof(float));
    float *cn = malloc((size_t)(M * N) * sizeof(float)), *cf = malloc((size_t)(M * N) * 4);
    const dlrt_epilogue ep = col_bias_res_relu(1.0f, 1.0f, bias, res, N);
    dlrt_sgemm(M, N, K, a, K, 0, bn, near, 0, cn, N, &ep);
    dlrt_sgemm(M, N, K, a, K, 0, bf, FAR, 0, cf, N, &ep);
    const int in_place = strcmp(dlrt_gemm_isa(), "generic") != 0; /* else always packed */
    /* (K >= 9: the far rows are packed whatever the K block) */
    int ok = dlrt_gemm_b_in_place(near, K) == in_place && !dlrt_gemm_b_in_place(FAR, 9) &&
             !memcmp(cn, cf, (size_t)(M * N) * sizeof(float));
    for (int64_t i = 0; i < M && ok; i++)
        for (int64_t j = 0; j < N && ok; j++) {
            double acc = bias[j] + res[i * N + j];
            for (int64_t p = 0; p < K; p++) acc += (double)a[i * K + p] * (double)b[p * N + j];
            ok = close_to(cn[i * N + j], (float)(acc > 0 ? acc : 0), 1e-5 * (1.0 + K / 100.0));
        }
    char what[128];
    snprintf(what, sizeof what, "sgemm B in place M=%lld N=%lld K=%lld", (long long)M, (long long)N,
             (long long)K);
    check(ok, what);
    free(a), free(b), free(bias), free(res), free(bn), free(bf), free(cn), free(cf);
}

/* Products whose tiles do not share out evenly are cut finer for the thread count
 * (dlrt_gemm_run): the results must not change with it. BERT's 128 x 768 shape and a narrow
 * prepacked one, with a column bias scaled by beta (fused in full tiles), residual and ReLU. */
static void test_gemm_threads(void) {
#ifdef DLRT_THREADS
    /* M, N, K and which operand is prepacked (1: A, 2: B, 3: A as the right operand of the
     * transposed product: a 1x1 convolution's weights). The sixth: transposed, its row panels
     * B's columns read in place on the vector builds; B prepacked: its tiles shared out in
     * column-major order, GPT-2's 128 x 2304 cut finer to even it out on 2 threads
     * (dlrt_gemm_even_out). Where rows are cut too, a thread's tiles of one column run as one
     * tile (dlrt_gemm_run_tiles): 49 x 320, 49 x 160 (at 4 threads), 150 x 448 (where MC is
     * 192), transposed 49 x 320 and 144 x 320 (row units of MR and of MT); 200 x 448 has more
     * rows than MC on AVX-512. Each also runs cut for 3 threads but serially (the pool held, as
     * inside another job), where a column's tiles merge up to MC. */
    static const int64_t shapes[][4] = {{128, 768, 300, 0}, {130, 700, 200, 0},  {600, 49, 500, 1},
                                        {128, 784, 150, 0}, {64, 3136, 40, 0},   {160, 49, 960, 0},
                                        {49, 320, 960, 2},  {128, 2304, 100, 2}, {49, 160, 960, 2},
                                        {150, 448, 300, 2}, {200, 448, 300, 2},  {320, 49, 960, 3},
                                        {320, 144, 500, 3}};
    const int saved = dlrt_threads();
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int64_t M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
        const int a_packed = shapes[s][3] == 1   ? DLRT_A_PACKED
                             : shapes[s][3] == 3 ? DLRT_A_PACKED_T
                                                 : 0;
        const int b_packed = shapes[s][3] == 2;
        float *a = rand_buf(M * K), *b = rand_buf(K * N), *bias = rand_buf(N);
        float *res = rand_buf(M * N),
              *ap = malloc(dlrt_gemm_packed_bytes(a_packed == DLRT_A_PACKED_T, M, K) + 4);
        float *bp = malloc(dlrt_gemm_packed_bytes(1, N, K) + 4);
        float *c1 = malloc((size_t)(M * N) * sizeof(float));
        float *ct = malloc((size_t)(M * N) * sizeof(float));
        if (a_packed == DLRT_A_PACKED_T)
            dlrt_gemm_pack_operand(1, M, K, a, K, 1, ap);
        else
            dlrt_gemm_pack_operand(0, M, K, a, K, 0, ap);
        dlrt_gemm_pack_operand(1, N, K, b, N, 0, bp);
        const dlrt_epilogue ep = col_bias_res_relu(0.5f, 1.5f, bias, res, N);
        int same = 1;
        for (int t = 1; t <= 4; t++) {
            dlrt_set_threads(t);
            memset(ct, 0xff, (size_t)(M * N) * sizeof(float)); /* (NaNs: a tile left unrun shows) */
            dlrt_sgemm_ex(M, N, K, a_packed ? ap : a, K, 0, a_packed, b_packed ? bp : b, N, 0,
                          b_packed, t == 1 ? c1 : ct, N, &ep);
            if (t > 1) same = same && !memcmp(c1, ct, (size_t)(M * N) * sizeof(float));
        }
        /* cut for 3 threads, run in this thread: the pool is held */
        dlrt_set_threads(3);
        memset(ct, 0xff, (size_t)(M * N) * sizeof(float));
        const int held = dlrt_tpool_try_hold(&dlrt_the_tpool, 2, 2);
        dlrt_sgemm_ex(M, N, K, a_packed ? ap : a, K, 0, a_packed, b_packed ? bp : b, N, 0, b_packed,
                      ct, N, &ep);
        if (held) atomic_flag_clear(&dlrt_the_tpool.busy);
        same = same && held && !memcmp(c1, ct, (size_t)(M * N) * sizeof(float));
        char what[120];
        snprintf(what, sizeof what, "gemm %lldx%lldx%lld: identical on 1-4 threads", (long long)M,
                 (long long)N, (long long)K);
        check(same, what);
        free(a), free(b), free(bias), free(res), free(ap), free(bp), free(c1), free(ct);
    }
    dlrt_set_threads(saved);
#endif
}

/* One row against a prepacked B (a classifier at batch 1) streams each panel whole
 * (dlrt_gemm_row_packed): the same bits as the tiled path gives that row in a two-row product,
 * the same on 1 and 2 threads, and within rounding of double sums; N and K on and off the panel
 * and K-block sizes, A read with a stride (trans_a), B packed from either orientation. The
 * bias goes per column scaled by 1.5 (the two-row tile then takes the buffered store), per
 * column unscaled and per row (its short tile stored straight into C: dlrt_gemm_micro_store_short
 * must round as the row store does). */
static void test_gemm_row_packed(void) {
    static const int64_t shapes[][4] = {
        {1000, 2048, 0, 1}, {37, 130, 1, 0}, {64, 64, 0, 0}, {130, 1, 1, 1}, {200, 777, 0, 1}};
    for (size_t v = 0; v < 3 * sizeof shapes / sizeof shapes[0]; v++) {
        const size_t s = v / 3;
        const int bias_kind = (int)(v % 3); /* 0: per column x 1.5, 1: per column, 2: per row */
        const int64_t N = shapes[s][0], K = shapes[s][1];
        const int ta = (int)shapes[s][2], tb = (int)shapes[s][3];
        /* two rows of A: op(A) is 2 x K, stored K x 2 when transposed */
        float *a = rand_buf(2 * K), *b = rand_buf(K * N), *bias = rand_buf(N),
              *res = rand_buf(2 * N);
        float *bp = malloc(dlrt_gemm_packed_bytes(1, N, K));
        float *c1 = malloc((size_t)N * sizeof(float)),
              *c2 = malloc((size_t)(2 * N) * sizeof(float));
        float *ct = malloc((size_t)N * sizeof(float));
        dlrt_gemm_pack_operand(1, N, K, b, tb ? K : N, tb, bp);
        const int64_t lda = ta ? 2 : K;
        dlrt_epilogue ep = col_bias_res_relu(0.5f, bias_kind == 1 ? 1.0f : 1.5f, bias, res, N);
        if (bias_kind == 2) ep.bias_rs = 1, ep.bias_cs = 0;
        if (s % 2)
            ep.act = DLRT_ACT_SIGMOID, ep.residual = NULL; /* an activation after the store */
        dlrt_sgemm_ex(1, N, K, a, lda, ta, 0, bp, tb ? K : N, tb, 1, c1, N, &ep);
        dlrt_sgemm_ex(2, N, K, a, lda, ta, 0, bp, tb ? K : N, tb, 1, c2, N, &ep);
        int same_threads = 1;
#ifdef DLRT_THREADS
        const int saved = dlrt_threads();
        dlrt_set_threads(2);
        dlrt_sgemm_ex(1, N, K, a, lda, ta, 0, bp, tb ? K : N, tb, 1, ct, N, &ep);
        same_threads = !memcmp(c1, ct, (size_t)N * sizeof(float));
        dlrt_set_threads(saved);
#endif
        int close = 1;
        for (int64_t j = 0; j < N && close; j++) {
            double acc = 0;
            for (int64_t p = 0; p < K; p++)
                acc += (double)a[ta ? p * 2 : p] * (double)b[tb ? j * K + p : p * N + j];
            acc = 0.5 * acc + (double)ep.beta * (double)bias[bias_kind == 2 ? 0 : j] +
                  (ep.residual ? (double)res[j] : 0.0);
            acc = s % 2 ? 1.0 / (1.0 + exp(-acc)) : (acc > 0 ? acc : 0);
            close = close_to(c1[j], (float)acc, 1e-5 * (1.0 + K / 100.0));
        }
        char what[140];
        snprintf(what, sizeof what,
                 "gemm 1x%lldx%lld, B prepacked (ta %d, tb %d, bias %d): as the tiles, on 2 "
                 "threads, near the reference",
                 (long long)N, (long long)K, ta, tb, bias_kind);
        check(!memcmp(c1, c2, (size_t)N * sizeof(float)) && same_threads && close, what);
        free(a), free(b), free(bias), free(res), free(bp), free(c1), free(c2), free(ct);
    }
}

/* Whether a tm x tn cut covers an M x N product exactly: blocks starting on whole units (mu
 * rows, NR columns), non-empty, none past MC x NC, whole units but the last. */
static int gemm_cut_exact(int64_t M, int64_t N, int64_t mu, int64_t tm, int64_t tn) {
    int exact = tm >= 1 && tn >= 1 && dlrt_gemm_cut(M, mu, tm, 0) == 0 &&
                dlrt_gemm_cut(M, mu, tm, tm) == M && dlrt_gemm_cut(N, DLRT_GEMM_NR, tn, 0) == 0 &&
                dlrt_gemm_cut(N, DLRT_GEMM_NR, tn, tn) == N;
    for (int64_t b = 0; b < tm && exact; b++) {
        int64_t h;
        const int64_t lo = dlrt_gemm_block(M, mu, tm, b, &h);
        exact = lo % mu == 0 && h > 0 && h <= DLRT_GEMM_MC && (b == tm - 1 || h % mu == 0);
    }
    for (int64_t b = 0; b < tn && exact; b++) {
        int64_t w;
        const int64_t lo = dlrt_gemm_block(N, DLRT_GEMM_NR, tn, b, &w);
        exact = lo % DLRT_GEMM_NR == 0 && w > 0 && w <= DLRT_GEMM_NC;
    }
    return exact;
}

/* The cut of a product into tiles for 2 threads (dlrt_gemm_split_rows) covers it exactly with
 * whole
 * panels, none wider than MC x NC, and shares it out over the threads by area (dlrt_gemm_owner)
 * within 1/8 of even: ResNet-50's 128 x 784 layers were cut 256+256+256+16, one of two threads
 * getting 512 columns of 784 (or, cut by rows to even it out, packing B twice). Rows are cut in
 * units of mu: MR, or MT for a transposed product, whose tiles then hold whole blocks of its
 * vector-square store but the last, unless MT cannot share the product out evenly. */
static void test_gemm_split(void) {
    /* M, N and the variants (bits: 1 << variant) whose cut dlrt_gemm_even_out must bring within
     * 1/16 of even, as it does for AVX-512's tiles: GPT-2's 128 x 2304 with its weights as B (9
     * tiles: 16 and 20 panels of 36) and a stride-2 3x3 on 28x28 (784 x 128 transposed, weights
     * as B: 432 and 352 rows) */
    static const int64_t shapes[][3] = {
        {128, 784, 0}, {64, 3136, 0},   {128, 768, 0}, {600, 49, 0},   {49, 512, 0},
        {7, 1000, 0},  {2048, 2048, 0}, {13, 130, 0},  {12544, 64, 0}, {784, 128, 8},
        {49, 160, 0},  {49, 1280, 0},   {49, 320, 0},  {128, 2304, 12}};
    enum { NSHAPES = sizeof shapes / sizeof shapes[0] };
    /* variant 2: B prepacked (weights), columns cut before rows; 3: that and transposed (a 1x1
     * or implicit-GEMM convolution on a small plane) */
    for (int variant = 0; variant < 4; variant++)
        for (int s = 0; s < NSHAPES; s++) {
            const int64_t M = shapes[s][0], N = shapes[s][1];
            const int transposed = variant & 1, cols_first = variant >= 2;
            int64_t mu, tm, tn;
            dlrt_gemm_split_rows(M, N, transposed, cols_first, 2, &mu, &tm, &tn);
            /* MT where it shares out evenly: not a 7x7 plane's 49 rows over 160 columns (3
             * panels) when MT is over half of them (AVX-512's 48) */
            const int mt = transposed && !((s == 10 || s == 12) && 2 * DLRT_GEMM_MT > 49);
            const int unit = mu == (mt ? DLRT_GEMM_MT : DLRT_GEMM_MR);
            const int exact = gemm_cut_exact(M, N, mu, tm, tn);
            int64_t prev = 0;
            int ordered = 1;
            /* consecutive runs, from thread 0 to 1, in the order the tiles are shared out
             * (column-major with the weights as B); with the weights cut to a tile per panel
             * and rows cut too, each thread's tiles cover at most one panel more than half */
            int64_t cols[2][2] = {{N, 0}, {N, 0}}; /* each thread's first and end column */
            for (int64_t t = 0; t < tm * tn; t++) {
                int64_t bi, bj, w;
                dlrt_gemm_tile_at(t, tm, tn, cols_first, &bi, &bj);
                const int64_t o = dlrt_gemm_owner(M, N, mu, tm, tn, bi, bj, cols_first, 2);
                ordered &= o >= prev && o <= 1 && (t > 0 || o == 0);
                prev = o;
                const int64_t j0 = dlrt_gemm_block(N, DLRT_GEMM_NR, tn, bj, &w);
                cols[o][0] = DLRT_MIN(cols[o][0], j0), cols[o][1] = DLRT_MAX(cols[o][1], j0 + w);
            }
            const int64_t panels = (N + DLRT_GEMM_NR - 1) / DLRT_GEMM_NR;
            const int64_t half_panels = (panels + 1) / 2;
            for (int o = 0; o < 2 && cols_first && tn == panels && tm > 1; o++)
                ordered &= cols[o][1] - cols[o][0] <= (half_panels + 1) * DLRT_GEMM_NR;
            const int64_t load = dlrt_gemm_max_load(M, N, mu, tm, tn, cols_first, 2);
            const int even = !(shapes[s][2] >> variant & 1) || 16 * load <= 17 * M * N / 2;
            const int balanced = 8 * load <= 9 * M * N / 2 && even;
            /* rows M <= MC share out by columns, so B is not packed once per row block; with
             * prepacked weights of 4 panels or more, columns always go first (rows are cut
             * only once each column panel is a tile), so that each thread streams only its
             * share of them (BERT's 128 x 768 at 2 threads: 60.0 -> 56.6 ms a model) */
            const int by_columns =
                (s > 1 || M > DLRT_GEMM_MC || tm == 1) &&
                (!cols_first || panels < 4 || M > DLRT_GEMM_MC || tm == 1 || tn == panels);
            char what[160];
            snprintf(what, sizeof what,
                     "gemm split %lldx%lld over 2 threads, rows in units of %lld%s: %lldx%lld "
                     "tiles",
                     (long long)M, (long long)N, (long long)mu, cols_first ? ", columns first" : "",
                     (long long)tm, (long long)tn);
            check(exact && ordered && prev == 1 && balanced && by_columns && unit, what);
        }
}

/* Random products on 2-4 threads (dlrt_gemm_split_rows, finer cuts of dlrt_gemm_even_out
 * included): every cut covers the product exactly with non-empty blocks of whole units (the last
 * block's may be partial), none past MC x NC, at most one a unit or a panel, and hands every
 * tile to one thread in order, their areas summing to the product's. A check per variant. */
static void test_gemm_split_random(void) {
    for (int variant = 0; variant < 4; variant++) {
        const int transposed = variant & 1, cols_first = variant >= 2;
        int ok = 1;
        char what[200];
        snprintf(what, sizeof what, "gemm split of 3000 random products on 2-4 threads%s%s",
                 transposed ? ", transposed" : "", cols_first ? ", columns first" : "");
        for (int c = 0; c < 3000 && ok; c++) { /* small sizes often: few panels, few units */
            const int64_t M = irand(1, c % 2 ? 400 : 3000), N = irand(1, c % 3 ? 800 : 5000);
            const int64_t team = irand(2, 4);
            int64_t mu, tm, tn;
            dlrt_gemm_split_rows(M, N, transposed, cols_first, team, &mu, &tm, &tn);
            ok = gemm_cut_exact(M, N, mu, tm, tn);
            int64_t prev = 0, area = 0;
            for (int64_t t = 0; t < tm * tn && ok; t++) {
                int64_t bi, bj, h, w;
                dlrt_gemm_tile_at(t, tm, tn, cols_first, &bi, &bj);
                const int64_t o = dlrt_gemm_owner(M, N, mu, tm, tn, bi, bj, cols_first, team);
                ok = o >= prev && o < team;
                prev = o;
                dlrt_gemm_block(M, mu, tm, bi, &h);
                dlrt_gemm_block(N, DLRT_GEMM_NR, tn, bj, &w);
                area += h * w;
            }
            ok = ok && area == M * N;
            if (!ok)
                snprintf(what, sizeof what,
                         "gemm split %lldx%lld on %lld threads%s%s: %lldx%lld tiles of rows in "
                         "units of %lld",
                         (long long)M, (long long)N, (long long)team,
                         transposed ? ", transposed" : "", cols_first ? ", columns first" : "",
                         (long long)tm, (long long)tn, (long long)mu);
        }
        check(ok, what);
    }
}

/* dlrt_gemm_packed_index names where dlrt_gemm_pack_operand put each value (lines past a
 * panel boundary, depths past a KC piece), for both operands. */
static void test_packed_index(void) {
    static const int64_t lines_k[][2] = {{1, 1}, {7, 5}, {70, 300}, {13, 600}, {200, 300}};
    /* mode 2: B's columns stored as columns (packed depth by depth across the panels) */
    for (int mode = 0; mode < 3; mode++)
        for (size_t c = 0; c < sizeof lines_k / sizeof lines_k[0]; c++) {
            const int operand = mode > 0, trans = mode == 1;
            const int64_t lines = lines_k[c][0], K = lines_k[c][1];
            float *x = rand_buf(lines * K),
                  *dst = malloc(dlrt_gemm_packed_bytes(operand, lines, K));
            /* line i at depth p is x[i * K + p] (A's rows, B's columns stored transposed), or
             * x[p * lines + i] (B's columns as columns) */
            dlrt_gemm_pack_operand(operand, lines, K, x, mode == 2 ? lines : K, trans, dst);
            int ok = 1;
            for (int64_t i = 0; i < lines && ok; i++)
                for (int64_t q = 0; q < K && ok; q++)
                    ok = dst[dlrt_gemm_packed_index(operand, i, q, K)] ==
                         x[mode == 2 ? q * lines + i : i * K + q];
            char what[96];
            snprintf(what, sizeof what, "packed index: operand %d (mode %d), %lld lines, K %lld",
                     operand, mode, (long long)lines, (long long)K);
            check(ok, what);
            free(x), free(dst);
        }
}

/* dlrt_sgemm_indexed (the implicit-GEMM convolution's product) on lines read through row
 * pointers: every output within tolerance of a double-precision sum, and each element's bits
 * those of the same product with more lines, so that a last row tile of 1 .. MR - 1 lines (its
 * own short kernel) sums exactly as a full tile does. M covers full and partial panels of
 * every build's NR, N every remainder of MR and past one tile of MC, K one K block and several. */
static void test_gemm_indexed(void) {
    static const int64_t ms[] = {16, 64, 96, 136};
    static const int64_t ks[] = {5, 70, 300};
    int64_t ns[22]; /* 1 .. 20, 49 (a 7x7 plane), 197 (past MC) */
    for (int i = 0; i < 20; i++) ns[i] = i + 1;
    ns[20] = 49, ns[21] = 197;
    enum { BIG = 211 }; /* lines of the product the others are compared with */
    for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++)
        for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
            const int64_t M = ms[mi], K = ks[ki];
            float *a = rand_buf(M * K), *x = rand_buf(BIG * K);
            float *ap = malloc(dlrt_gemm_packed_bytes(1, M, K));
            dlrt_gemm_pack_operand(1, M, K, a, K, 1, ap);
            const float **rows = malloc((size_t)BIG * sizeof *rows);
            int32_t *off = malloc((size_t)K * sizeof *off);
            for (int64_t i = 0; i < BIG; i++) rows[i] = x + i * K;
            for (int64_t p = 0; p < K; p++) off[p] = (int32_t)p;
            const dlrt_gemm_index ax = {rows, off};
            float *cb = malloc((size_t)(M * BIG) * sizeof(float));
            dlrt_sgemm_indexed(M, BIG, K, ap, &ax, cb, BIG, NULL);
            /* the double-precision sums and their magnitudes, once for every line */
            double *ref = malloc((size_t)(M * BIG) * sizeof(double)),
                   *mag = malloc((size_t)(M * BIG) * sizeof(double));
            for (int64_t m = 0; m < M; m++)
                for (int64_t j = 0; j < BIG; j++) {
                    double r = 0, g = 0;
                    for (int64_t p = 0; p < K; p++) {
                        r += (double)a[m * K + p] * x[j * K + p];
                        g += fabs((double)a[m * K + p] * x[j * K + p]);
                    }
                    ref[m * BIG + j] = r, mag[m * BIG + j] = g;
                }
            int close = 1, same = 1;
            for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
                const int64_t n = ns[ni];
                float *c = malloc((size_t)(M * n) * sizeof(float));
                dlrt_sgemm_indexed(M, n, K, ap, &ax, c, n, NULL);
                for (int64_t m = 0; m < M; m++)
                    for (int64_t j = 0; j < n; j++) {
                        close &=
                            fabs(c[m * n + j] - ref[m * BIG + j]) <= 1e-5 * mag[m * BIG + j] + 1e-6;
                        same &= memcmp(&c[m * n + j], &cb[m * BIG + j], sizeof(float)) == 0;
                    }
                free(c);
            }
            char what[128];
            snprintf(what, sizeof what,
                     "indexed GEMM, M %lld, K %lld: N 1-20, 49, 197 close to the sum", (long long)M,
                     (long long)K);
            check(close, what);
            snprintf(what, sizeof what,
                     "indexed GEMM, M %lld, K %lld: short row tiles sum as full ones", (long long)M,
                     (long long)K);
            check(same, what);
            free(a), free(x), free(ap), free(rows), free(off), free(cb), free(ref), free(mag);
        }
}

static void test_gemm(void) {
    static const int64_t sz[] = {0, 1, 3, 17, 64, 129};
    gemm_cfg plain = {.alpha = 1, .beta = 1};
    gemm_cfg full = {.alpha = 0.75f,
                     .beta = -1.5f,
                     .bias = BIAS_ROW,
                     .res = RES_DENSE,
                     .act = DLRT_ACT_RELU,
                     .use_ep = 1};
    int i = 0;
    for (int m = 0; m < 6; m++)
        for (int n = 0; n < 6; n++)
            for (int k = 0; k < 6; k++)
                for (int t = 0; t < 4; t++, i++)
                    gemm_case(sz[m], sz[n], sz[k], t >> 1, t & 1, i % 3 ? &plain : &full);
    /* every epilogue feature, at a shape inside one tile and one spanning several tiles and
     * K blocks (partial sums, in-place residual across K blocks) */
    check(dlrt_sgemm_transposes(97, 3, 67) && !dlrt_sgemm_transposes(13, 150, 200) &&
              (dlrt_sgemm_transposes(150, 49, 67) || !strcmp(dlrt_gemm_isa(), "generic")),
          "gemm: the shapes below take the transposed and the direct-store paths");
    static const float acts[][3] = {
        {DLRT_ACT_NONE, 0, 0},           {DLRT_ACT_RELU, 0, 0},
        {DLRT_ACT_CLIP, -0.5f, 0.7f},    {DLRT_ACT_LEAKY_RELU, 0.1f, 0},
        {DLRT_ACT_SIGMOID, 0, 0},        {DLRT_ACT_TANH, 0, 0},
        {DLRT_ACT_GELU, 1.41421356f, 0}, {DLRT_ACT_HARD_SIGMOID, 0.3f, 0.4f},
        {DLRT_ACT_HARD_SWISH, 0, 0},     {DLRT_ACT_GELU_TANH, DLRT_GELU_TANH_A, DLRT_GELU_TANH_B}};
    for (int a = 0; a < (int)(sizeof acts / sizeof acts[0]); a++)
        for (int bk = 0; bk < BIAS_KINDS; bk++)
            for (int rk = 0; rk < RES_KINDS; rk++) {
                gemm_cfg c = {.alpha = a % 2 ? 1.0f : 0.5f,
                              .beta = bk % 2 ? 2.0f : 1.0f,
                              .bias = bk,
                              .res = rk,
                              .act = (int)acts[a][0],
                              .act_a = acts[a][1],
                              .act_b = acts[a][2],
                              .use_ep = 1};
                gemm_case(7, 37, 19, a & 1, (a >> 1) & 1, &c);
                /* full register tiles on every ISA (AVX-512: 6 x 64) with a partial edge and
                 * two K blocks on AVX-512 (one on AVX2): the epilogue applied in registers and
                 * stored straight to C */
                gemm_case(13, 150, 200, a & 1, (a >> 1) & 1, &c);
                /* narrow N: computed transposed (C^T = B^T A^T) and stored back transposed */
                gemm_case(97, 3, 67, a & 1, (a >> 1) & 1, &c);
                /* transposed with whole vector-square blocks (stored through register
                 * transposes) and rows and columns past them (stored element by element) */
                gemm_case(150, 49, 67, a & 1, (a >> 1) & 1, &c);
                if (rk == RES_INPLACE || (bk == BIAS_FULL_T && rk == RES_T)) {
                    gemm_case(a % 2 ? 101 : 1, 300, 411, rk & 1, a & 1, &c);
                    gemm_case(300, a % 2 ? 3 : 1, 411, a & 1, rk & 1, &c);
                }
            }
    /* every short last row tile (M = 6k + 1 .. 6k + 5) of full-width panels on every ISA
     * (N = 128: two AVX-512 panels, eight AVX2 ones), in one K block and over several */
    for (int64_t m = 13; m <= 17; m++) {
        gemm_cfg plain = {.alpha = 1.0f, .beta = 1.0f};
        gemm_cfg relu = {
            .alpha = 1.0f, .beta = 1.0f, .bias = BIAS_ROW, .act = DLRT_ACT_RELU, .use_ep = 1};
        gemm_case(m, 128, 40, 0, 0, &plain);
        gemm_case(m, 128, 300, (int)(m & 1), 1, &relu);
    }
    /* prepacked A and/or B give the same products as packing per call (the same microkernel;
     * bit-identical where both sum over K in the same blocks, else close: a prepacked B goes in
     * blocks of KC_STREAM) */
    /* (the last two: A prepacked and one panel of B take all of K in one pass, which the tile
     * buffer allows while K * NR <= KC * NC) */
    /* (the last: an LSTM step's h R^T, batch 8, hidden 256) */
    static const int64_t pk[][3] = {{7, 37, 19},    {1, 300, 411},  {133, 65, 200}, {300, 2, 411},
                                    {300, 60, 500}, {130, 60, 512}, {8, 1024, 256}};
    check(!dlrt_sgemm_transposes_for(64, 300, 60, 500) &&
              !dlrt_sgemm_transposes_for(64, 130, 60, 512) &&
              512 * DLRT_GEMM_NR <= DLRT_GEMM_KC * DLRT_GEMM_NC,
          "gemm: the single-pass shapes are computed untransposed on AVX-512, in one pass");
    /* the orientation model: a transposed product whose row panels (B's columns) are read in
     * place pays no packing, so MobileNetV2's 576 -> 96 on 14x14 runs transposed on AVX-512
     * when B is not transposed, and not when it is (its columns would be packed); with more
     * columns than one tile (1100) they are packed once all the same */
    check(dlrt_gemm_transposes_b(64, 96, 196, 576, 1) &&
              !dlrt_gemm_transposes_b(64, 96, 196, 576, 0) &&
              dlrt_sgemm_transposes_for(64, 96, 196, 576) &&
              dlrt_gemm_transposes_b(64, 1100, 196, 576, 1) ==
                  dlrt_gemm_transposes_b(64, 1100, 196, 576, 0),
          "gemm: transposing pays when B's columns are read in place");
    for (int s = 0; s < 7; s++)
        for (int mode = 1; mode < 4; mode++)
            for (int t = 0; t < 4; t++)
                packed_case(pk[s][0], pk[s][1], pk[s][2], t >> 1, t & 1, mode & 1, mode >> 1);
    /* operands packed once into a workspace: B shared by rows of tiles (M > MC), A by columns
     * (N > NC), both, a transposed product's image side (N = 49), with A as packed weights */
    static const int64_t wsp[][4] = {{300, 200, 150, 0}, {100, 700, 230, 0}, {300, 700, 250, 0},
                                     {2048, 49, 300, 0}, {400, 300, 200, 1}, {1024, 49, 200, 1}};
    for (int s = 0; s < 6; s++)
        for (int t = 0; t < 4; t++)
            workspace_case(wsp[s][0], wsp[s][1], wsp[s][2], t >> 1, t & 1, (int)wsp[s][3]);
    /* the workspace holds the operand's packed panels: BERT's 128 rows pack to 22 panels of 6
     * (132 lines), wider than the 128 rounded to 64; a short one is silently not used */
    int ws_fits = 1;
    for (int64_t m = 1; m <= 200; m++)
        ws_fits =
            ws_fits &&
            dlrt_gemm_workspace(m, 768, 768, 0, 1) >= dlrt_gemm_packed_bytes(0, m, 768) &&
            dlrt_gemm_workspace(768, m + 96, 300, 1, 0) >= dlrt_gemm_packed_bytes(1, m + 96, 300) &&
            /* a transposed product's image side: B's lines as 6-row A panels */
            dlrt_gemm_workspace(768, m + 96, 300, 1, 0) >= dlrt_gemm_packed_bytes(0, m + 96, 300);
    check(ws_fits, "gemm: a workspace holds the packed operand it is sized for (1-200 rows)");
    /* B's full panels read in place: short row tiles (16 = 6 + 6 + 4, 13, 1), a partial last
     * panel (200 = 3 x 64 + 8; packed: its kernels read whole vectors), several K blocks and
     * column tiles, the transposed orientation (N = 3) */
    static const int64_t inp[][3] = {{16, 200, 40},  {13, 128, 300}, {1, 64, 9},
                                     {64, 3136, 40}, {130, 70, 250}, {97, 3, 67}};
    for (int s = 0; s < 6; s++) in_place_case(inp[s][0], inp[s][1], inp[s][2]);
    /* transposed products (on the vector builds), whose row panels are then B's columns read in
     * place (full ones; a short last one packed): 49 = 8 x 6 + 1 rows over several K blocks with
     * a two-vector last panel run two row panels at once (a 1x1 convolution on 7x7), 22 = 6 + 6
     * + 6 + 4, and 10 and 49 rows against more columns than a tile holds (no workspace here) */
    static const int64_t inp_t[][3] = {
        {160, 49, 960}, {300, 22, 100}, {700, 10, 300}, {1100, 49, 50}};
    for (int s = 0; s < 4; s++) {
        check(dlrt_sgemm_transposes(inp_t[s][0], inp_t[s][1], inp_t[s][2]) ||
                  !strcmp(dlrt_gemm_isa(), "generic"),
              "gemm: the narrow in-place cases run transposed on the vector builds");
        in_place_case(inp_t[s][0], inp_t[s][1], inp_t[s][2]);
    }
    for (int t = 0; t < 4; t++) { /* K == 0: C = epilogue(0) */
        gemm_cfg c = {.alpha = 2,
                      .beta = 0.5f,
                      .bias = BIAS_COL,
                      .res = RES_T,
                      .act = DLRT_ACT_SIGMOID,
                      .use_ep = 1};
        gemm_case(5, 70, 0, t >> 1, t & 1, &c);
    }
}

/* ---- convolution ---- */

typedef struct conv_case {
    int nsp;
    int64_t n, c_in, c_out, group;
    int64_t in[3], k[3], stride[3], dil[3], pb[3], pe[3];
} conv_case;

static void list_attr(char *buf, size_t n, const char *name, int cnt, const int64_t *a,
                      const int64_t *b) {
    size_t l = strlen(buf);
    l += (size_t)snprintf(buf + l, n - l, "%s%s=[", l ? ";" : "", name);
    for (int i = 0; i < cnt; i++)
        l += (size_t)snprintf(buf + l, n - l, "%s%lld", i ? "," : "", (long long)a[i]);
    for (int i = 0; b && i < cnt; i++)
        l += (size_t)snprintf(buf + l, n - l, ",%lld", (long long)b[i]);
    snprintf(buf + l, n - l, "]");
}

/* epi: 0 none, 1 bias + residual + relu, 2 the same with the residual in y (in place) */
static void conv_run(const conv_case *cc, int epi) {
    char what[256], at[256] = "";
    int ns = cc->nsp;
    snprintf(what, sizeof what,
             "conv %dd n=%lld c=%lld->%lld g=%lld in=%lldx%lldx%lld k=%lldx%lldx%lld s=%lld,%lld "
             "d=%lld,%lld epi=%d",
             ns, (long long)cc->n, (long long)cc->c_in, (long long)cc->c_out, (long long)cc->group,
             (long long)cc->in[0], (long long)cc->in[1], (long long)cc->in[2], (long long)cc->k[0],
             (long long)cc->k[1], (long long)cc->k[2], (long long)cc->stride[0],
             (long long)cc->stride[1], (long long)cc->dil[0], (long long)cc->dil[1], epi);
    int64_t xd[5] = {cc->n, cc->c_in}, wd[5] = {cc->c_out, cc->c_in / cc->group},
            bd[1] = {cc->c_out};
    int64_t xn = cc->n * cc->c_in, wn = cc->c_out * wd[1];
    for (int d = 0; d < ns; d++) {
        xd[2 + d] = cc->in[d], wd[2 + d] = cc->k[d];
        xn *= cc->in[d], wn *= cc->k[d];
    }
    float *x = rand_buf(xn), *w = rand_buf(wn), *b = rand_buf(cc->c_out);
    ref_graph r;
    rg_init(&r);
    dl_value *in[3] = {rg_const(&r, 2 + ns, xd, x), rg_const(&r, 2 + ns, wd, w),
                       rg_const(&r, 1, bd, b)};
    list_attr(at, sizeof at, "kernel_shape", ns, cc->k, NULL);
    list_attr(at, sizeof at, "strides", ns, cc->stride, NULL);
    list_attr(at, sizeof at, "dilations", ns, cc->dil, NULL);
    list_attr(at, sizeof at, "pads", ns, cc->pb, cc->pe);
    snprintf(at + strlen(at), sizeof at - strlen(at), ";group=%lld", (long long)cc->group);
    dl_value *y = rg_node(&r, "Conv", epi ? 3 : 2, in, at);
    dl_tensor *out = NULL;
    dl_value *plain = y;
    if (!rg_run(&r, 1, &plain, &out, what)) {
        rg_free(&r, 0, NULL);
        free(x), free(w), free(b);
        return;
    }
    int64_t yn = dl_tensor_numel(out);
    float *res = rand_buf(yn), *ref = malloc((size_t)(yn + 1) * 4);
    memcpy(ref, dl_tensor_data(out), (size_t)yn * 4);
    for (int64_t i = 0; epi && i < yn; i++) { /* + residual, relu: plain C on the Conv output */
        float v = ref[i] + res[i];
        ref[i] = v > 0 ? v : 0;
    }
    dlrt_conv p = {.nsp = ns, .n = cc->n, .c_in = cc->c_in, .c_out = cc->c_out, .group = cc->group};
    for (int d = 0; d < ns; d++) {
        p.in[d] = cc->in[d], p.out[d] = dl_tensor_dims(out)[2 + d], p.k[d] = cc->k[d];
        p.stride[d] = cc->stride[d], p.dil[d] = cc->dil[d], p.pad_begin[d] = cc->pb[d];
    }
    size_t ws = dlrt_conv_workspace(&p);
    void *work = ws ? malloc(ws) : NULL;
    float *yp = malloc((size_t)(yn + 1) * 4);
    for (int64_t i = 0; i <= yn; i++) yp[i] = epi == 2 && i < yn ? res[i] : CANARY;
    dlrt_epilogue ep = {
        .alpha = 1, .beta = 1, .bias = b, .residual = epi == 2 ? yp : res, .act = DLRT_ACT_RELU};
    dlrt_conv_forward(&p, x, w, yp, work, epi ? &ep : NULL);
    int ok = yp[yn] == CANARY;
    for (int64_t i = 0; ok && i < yn; i++) {
        ok = close_to(yp[i], ref[i], 1e-5);
        if (!ok) printf("  at y[%lld]: got %.8g want %.8g\n", (long long)i, yp[i], ref[i]);
    }
    check(ok, what);
    free(work), free(yp), free(res), free(ref);
    rg_free(&r, 1, &out);
    free(x), free(w), free(b);
}

/* dlrt_conv_forward_packed (weights prepacked as the GEMM's left operand, or as the right
 * operand of the transposed product for narrow output planes) against dlrt_conv_forward, with a
 * bias + in-place residual + relu epilogue, for layers that run as GEMMs and for ones that ignore
 * the packed copy (depthwise, grouped). */

/* The other orientation of a packing mode's tile size (the GEMM's A_PACKED / A_PACKED_T, or
 * Winograd's plain / transposed packings of the same tile size), named rather than derived from
 * the enum values. */
static int other_packing(int mode) {
    switch (mode) {
    case DLRT_A_PACKED:
        return DLRT_A_PACKED_T;
    case DLRT_A_PACKED_T:
        return DLRT_A_PACKED;
    case DLRT_WG_PACKED:
        return DLRT_WG_PACKED_T;
    case DLRT_WG_PACKED_T:
        return DLRT_WG_PACKED;
    case DLRT_WG2_PACKED:
        return DLRT_WG2_PACKED_T;
    case DLRT_WG2_PACKED_T:
        return DLRT_WG2_PACKED;
    default:
        return 0;
    }
}

static void test_conv_packed(void) {
    /* n, c_in, c_out, group, in (square), out, kernel, stride, pad */
    static const int64_t rows[][9] = {
        {1, 16, 24, 1, 9, 9, 1, 1, 0},     /* 1x1: packs */
        {2, 8, 13, 1, 10, 10, 3, 1, 1},    /* im2col, batch 2: packs */
        {1, 6, 70, 1, 17, 8, 3, 2, 0},     /* strided im2col */
        {1, 16, 70, 1, 17, 9, 3, 2, 1},    /* strided, 144 depths: implicit GEMM, packs as B */
        {2, 32, 64, 1, 33, 17, 3, 2, 1},   /* the same, batch 2 */
        {1, 8, 8, 8, 7, 7, 3, 1, 1},       /* depthwise: ignores the copy */
        {1, 64, 300, 1, 2, 2, 1, 1, 0},    /* narrow output, computed transposed: packs as B */
        {1, 32, 100, 1, 3, 1, 3, 1, 0},    /* one output position, im2col transposed: as B */
        {1, 40, 136, 1, 7, 7, 3, 1, 1},    /* a 7x7 plane: as B or as A, by the ISA's tile */
        {1, 4, 4, 2, 7, 7, 3, 1, 1},       /* grouped: ignores the copy */
        {1, 64, 64, 1, 28, 28, 3, 1, 1},   /* Winograd F(4x4) on filters transformed at load */
        {2, 64, 70, 1, 29, 29, 3, 1, 1},   /* the same, batch 2, partial tiles and panels */
        {2, 256, 40, 1, 10, 10, 3, 1, 1},  /* F(2x2), tiles of two images per GEMM */
        {1, 256, 256, 1, 14, 14, 3, 1, 1}, /* F(2x2): ResNet-50's 256-channel layer */
    };
    enum { N_CASES = sizeof rows / sizeof rows[0] };
    dlrt_conv cs[N_CASES];
    int modes[DLRT_WG2_PACKED_T + 1] = {0};
    for (int i = 0; i < N_CASES; i++) {
        const int64_t *r = rows[i];
        cs[i] = (dlrt_conv){.nsp = 2,
                            .n = r[0],
                            .c_in = r[1],
                            .c_out = r[2],
                            .group = r[3],
                            .in = {r[4], r[4]},
                            .out = {r[5], r[5]},
                            .k = {r[6], r[6]},
                            .stride = {r[7], r[7]},
                            .dil = {1, 1},
                            .pad_begin = {r[8], r[8]}};
        modes[dlrt_conv_packs_weights(&cs[i])]++;
    }
    check(modes[0] >= 2 && modes[DLRT_A_PACKED] >= 2 && modes[DLRT_A_PACKED_T] >= 2 &&
              modes[DLRT_WG_PACKED] + modes[DLRT_WG_PACKED_T] >= 2 &&
              modes[DLRT_WG2_PACKED] + modes[DLRT_WG2_PACKED_T] >= 2,
          "conv packed: layers pack their weights as A, as the transposed product's B, "
          "Winograd-transformed for 4x4 or 2x2 tiles, or not");
    for (size_t ci = 0; ci < sizeof cs / sizeof cs[0]; ci++) {
        const dlrt_conv *p = &cs[ci];
        int64_t in_sp = p->in[0] * p->in[1], out_sp = p->out[0] * p->out[1];
        int64_t kdim = p->c_in / p->group * p->k[0] * p->k[1];
        int64_t yn = p->n * p->c_out * out_sp;
        float *x = rand_buf(p->n * p->c_in * in_sp), *w = rand_buf(p->c_out * kdim);
        float *bias = rand_buf(p->c_out), *y1 = rand_buf(yn), *y2 = malloc((size_t)yn * 4);
        memcpy(y2, y1, (size_t)yn * 4); /* the in-place residual */
        const int mode = dlrt_conv_packs_weights(p), operand = mode == DLRT_A_PACKED_T;
        const int wg = dlrt_conv_winograd_tile(mode) != 0;
        float *wp = malloc((wg ? dlrt_conv_winograd_packed_bytes(mode, p->c_out, p->c_in)
                               : dlrt_gemm_packed_bytes(operand, p->c_out, kdim)) +
                           4);
        void *ws = malloc(dlrt_conv_workspace(p) + 4);
        if (wg)
            dlrt_conv_winograd_pack(mode, p->c_out, p->c_in, w, wp);
        else
            dlrt_gemm_pack_operand(operand, p->c_out, kdim, w, kdim, operand, wp);
        dlrt_epilogue ep = {
            .alpha = 1, .beta = 1, .bias = bias, .residual = y1, .act = DLRT_ACT_RELU};
        dlrt_conv_forward(p, x, w, y1, ws, &ep);
        ep.residual = y2;
        dlrt_conv_forward_packed(p, x, w, wp, mode, y2, ws, &ep);
        /* a copy packed the other way (a host built for other tiles decided) is ignored */
        if (mode) {
            float *y3 = malloc((size_t)yn * 4);
            memcpy(y3, y2, (size_t)yn * 4);
            ep.residual = NULL;
            dlrt_conv_forward(p, x, w, y3, ws, &ep);
            float *y4 = malloc((size_t)yn * 4);
            /* (Winograd's two packings of a tile size are each other's other mode too) */
            const int other = other_packing(mode);
            dlrt_conv_forward_packed(p, x, w, wp, other, y4, ws, &ep);
            char w2[96];
            snprintf(w2, sizeof w2, "conv packed: case %zu, a copy of the other mode ignored", ci);
            check(!memcmp(y3, y4, (size_t)yn * 4), w2);
            free(y3), free(y4);
        }
        int ok = 1;
        /* Winograd against im2col: F(4x4, 3x3) rounds differently (test_rtconv bounds it) */
        for (int64_t i = 0; i < yn && ok; i++)
            ok = close_to(y2[i], y1[i], (wg ? 1e-4 : 1e-5) * (1.0 + kdim / 100.0));
        char what[160];
        snprintf(what, sizeof what, "conv with packed weights: case %zu (packs: %d)", ci, mode);
        check(ok, what);
        free(x), free(w), free(bias), free(y1), free(y2), free(wp), free(ws);
    }
}

static void test_conv(void) {
    static const conv_case cases[] = {
        /* 1-D: stride, dilation, asymmetric pads */
        {1, 2, 3, 4, 1, {11}, {3}, {2}, {2}, {1}, {2}},
        {1, 1, 4, 6, 2, {9}, {2}, {1}, {3}, {0}, {1}},
        {1, 2, 5, 5, 5, {13}, {4}, {3}, {1}, {2}, {0}}, /* depthwise */
        /* 2-D */
        {2, 2, 4, 6, 1, {9, 10}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}},
        {2, 1, 3, 5, 1, {8, 11}, {3, 2}, {2, 1}, {1, 1}, {0, 2}, {1, 0}},
        {2, 2, 3, 4, 1, {10, 9}, {2, 3}, {1, 2}, {2, 3}, {1, 0}, {2, 2}},
        {2, 2, 4, 6, 2, {7, 8}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {0, 1}},     /* groups */
        {2, 2, 6, 6, 6, {9, 9}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}},     /* depthwise */
        {2, 1, 5, 5, 5, {12, 7}, {5, 3}, {1, 1}, {2, 1}, {4, 0}, {3, 2}},    /* depthwise */
        {2, 2, 3, 6, 3, {6, 7}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}},     /* multiplier */
        {2, 2, 8, 12, 1, {5, 6}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, {0, 0}},    /* 1x1 */
        {2, 2, 6, 4, 2, {5, 6}, {1, 1}, {1, 1}, {1, 1}, {0, 0}, {0, 0}},     /* 1x1 groups */
        {2, 1, 8, 4, 1, {7, 6}, {1, 1}, {2, 2}, {1, 1}, {0, 0}, {0, 0}},     /* 1x1 s2 */
        {2, 1, 4, 4, 1, {5, 6}, {1, 1}, {1, 1}, {1, 1}, {1, 0}, {0, 1}},     /* 1x1 padded */
        {2, 1, 16, 40, 1, {20, 21}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}}, /* many tiles */
        {2, 1, 2, 3, 1, {3, 3}, {3, 3}, {1, 1}, {1, 1}, {2, 2}, {2, 2}},     /* pad > in */
        /* 3-D */
        {3, 2, 2, 3, 1, {5, 6, 7}, {2, 3, 2}, {1, 2, 1}, {2, 1, 1}, {0, 1, 1}, {1, 0, 1}},
        {3, 1, 4, 4, 2, {4, 5, 5}, {3, 1, 3}, {2, 1, 1}, {1, 1, 2}, {1, 0, 2}, {1, 0, 0}},
        {3, 2, 3, 3, 3, {5, 4, 6}, {3, 3, 3}, {1, 1, 2}, {1, 2, 1}, {1, 1, 1}, {1, 1, 1}},
        {3, 1, 3, 2, 1, {3, 4, 5}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {0, 0, 0}, {0, 0, 0}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        for (int epi = 0; epi < 3; epi++) conv_run(&cases[i], epi);
}

/* ---- pooling ---- */

static void pool_run(int kind, int nsp, const int64_t *in, const int64_t *k, const int64_t *s,
                     const int64_t *dil, const int64_t *pb, const int64_t *pe, int ceil_mode,
                     int include_pad, int lp) {
    static const char *ops[] = {"MaxPool", "AveragePool", "LpPool"};
    char what[256], at[256] = "";
    const int l_ = nsp - 1; /* the last dim too: the width, where the kernel's fast path splits */
    snprintf(what, sizeof what,
             "%s %dd in0=%lld k0=%lld s0=%lld d0=%lld pads0=%lld,%lld in%d=%lld k=%lld s=%lld "
             "d=%lld pads=%lld,%lld ceil=%d incl=%d p=%d",
             ops[kind], nsp, (long long)in[0], (long long)k[0], (long long)s[0], (long long)dil[0],
             (long long)pb[0], (long long)pe[0], l_, (long long)in[l_], (long long)k[l_],
             (long long)s[l_], (long long)dil[l_], (long long)pb[l_], (long long)pe[l_], ceil_mode,
             include_pad, lp);
    int64_t xd[5] = {2, 3}, xn = 6;
    for (int d = 0; d < nsp; d++) xd[2 + d] = in[d], xn *= in[d];
    float *x = rand_buf(xn);
    ref_graph r;
    rg_init(&r);
    dl_value *xv = rg_const(&r, 2 + nsp, xd, x);
    list_attr(at, sizeof at, "kernel_shape", nsp, k, NULL);
    list_attr(at, sizeof at, "strides", nsp, s, NULL);
    list_attr(at, sizeof at, "dilations", nsp, dil, NULL);
    list_attr(at, sizeof at, "pads", nsp, pb, pe);
    size_t l = strlen(at);
    if (kind != 2) snprintf(at + l, sizeof at - l, ";ceil_mode=%d", ceil_mode);
    l = strlen(at);
    if (kind == 1) snprintf(at + l, sizeof at - l, ";count_include_pad=%d", include_pad);
    if (kind == 2) snprintf(at + l, sizeof at - l, ";p=%d", lp);
    dl_value *y = rg_node(&r, ops[kind], 1, &xv, at);
    dl_tensor *out = NULL;
    if (rg_run(&r, 1, &y, &out, what)) {
        dlrt_pool p = {.nsp = nsp,
                       .kind = kind,
                       .count_include_pad = include_pad,
                       .n = 2,
                       .c = 3,
                       .p = (float)lp};
        for (int d = 0; d < nsp; d++) {
            p.in[d] = in[d], p.out[d] = dl_tensor_dims(out)[2 + d], p.k[d] = k[d];
            p.stride[d] = s[d], p.dil[d] = dil[d], p.pad_begin[d] = pb[d], p.pad_end[d] = pe[d];
        }
        int64_t yn = dl_tensor_numel(out);
        float *yp = malloc((size_t)(yn + 1) * 4);
        yp[yn] = CANARY;
        dlrt_pool_forward(&p, x, yp);
        const float *ref = dl_tensor_data(out);
        int ok = yp[yn] == CANARY;
        for (int64_t i = 0; ok && i < yn; i++) {
            ok = close_to(yp[i], ref[i], 1e-5);
            if (!ok) printf("  at y[%lld]: got %.8g want %.8g\n", (long long)i, yp[i], ref[i]);
        }
        check(ok, what);
        free(yp);
        rg_free(&r, 1, &out);
    } else {
        rg_free(&r, 0, NULL);
    }
    free(x);
}

/* Wide rows, where dlrt_pool_forward splits each output row into the columns whose windows lie
 * inside the input (its vectorized fast path, 2x2 and 3x3 windows fused into one pass) and the
 * edge columns: the shapes it specializes (strides 1 and 2), those it does in several passes
 * (5x5, 3x4, 3-D) and those it leaves to the per-output code (dilation inside a row, stride 3). */
static void test_pool_wide(void) {
    static const int64_t one[3] = {1, 1, 1};
    for (int kind = 0; kind < 2; kind++)
        for (int variant = 0; variant < 2; variant++) {
            const int incl = kind == 1 && variant;
            int64_t in[2] = {37, 41}, p0[2] = {0, 0}, p1[2] = {1, 1}, p2[2] = {2, 2};
            int64_t k3[2] = {3, 3}, k2[2] = {2, 2}, k5[2] = {5, 5}, k34[2] = {3, 4};
            int64_t s1[2] = {1, 1}, s2[2] = {2, 2}, s3[2] = {3, 3}, d2[2] = {2, 2}, d12[2] = {1, 2};
            pool_run(kind, 2, in, k3, s2, one, p1, p1, variant, incl, 0); /* ResNet's MaxPool */
            pool_run(kind, 2, in, k2, s2, one, p0, p0, variant, incl, 0); /* ceil: 21st column */
            pool_run(kind, 2, in, k3, s1, one, p1, p1, variant, incl, 0);
            pool_run(kind, 2, in, k2, s1, one, p0, p1, variant, incl, 0);
            pool_run(kind, 2, in, k5, s1, one, p2, p2, variant, incl, 0);  /* several passes */
            pool_run(kind, 2, in, k34, s2, one, p1, p2, variant, incl, 0); /* rows of 3 + 1 taps */
            pool_run(kind, 2, in, k3, s1, d2, p2, p2, variant, incl, 0);   /* dilated */
            pool_run(kind, 2, in, k3, s2, d12, p1, p2, variant, incl, 0);  /* dilated in width */
            pool_run(kind, 2, in, k3, s3, one, p1, p1, variant, incl, 0);  /* stride 3 */
            int64_t in1[1] = {700}, k1[1] = {3}, s11[1] = {1}, p11[1] = {1}; /* > 256 columns */
            pool_run(kind, 1, in1, k1, s11, one, p11, p11, variant, incl, 0);
            int64_t in3[3] = {4, 9, 40}, k3d[3] = {2, 3, 3}, s3d[3] = {1, 2, 2}, p3d[3] = {0, 1, 1};
            pool_run(kind, 3, in3, k3d, s3d, one, p3d, p3d, variant, incl, 0); /* 6 rows a window */
            int64_t k3e[3] = {1, 2, 2}, s3e[3] = {2, 2, 2};
            pool_run(kind, 3, in3, k3e, s3e, one, p3d, p3d, variant, incl, 0);
        }
    int64_t in[2] = {37, 41}, k3[2] = {3, 3}, s2[2] = {2, 2}, p1[2] = {1, 1};
    pool_run(2, 2, in, k3, s2, one, p1, p1, 0, 0, 2);
}

/* out[d] of a pooling, as ONNX's MaxPool / AveragePool shape inference */
static int64_t pool_out_dim(int64_t in, int64_t k, int64_t s, int64_t dil, int64_t pb, int64_t pe,
                            int ceil_mode) {
    int64_t span = in + pb + pe - ((k - 1) * dil + 1);
    if (span < 0) return 0;
    int64_t out = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
    if (ceil_mode && (out - 1) * s >= in + pb) out--;
    return out;
}

/* The reference's semantics as a plain loop over each output's taps in order: max keeps the first
 * in-range tap and replaces it only by a strictly greater one (so a leading NaN stays and a later
 * one is ignored, and the first of equal values, e.g. of -0 and +0, is kept); the average sums
 * from 0 in double and divides by the taps counted. */
static void pool_plain(int kind, int nsp, const int64_t *in, const int64_t *out, const int64_t *k,
                       const int64_t *s, const int64_t *dil, const int64_t *pb, const int64_t *pe,
                       int incl, int64_t planes, const float *x, float *y) {
    int64_t in_sp = 1, out_sp = 1, k_sp = 1;
    for (int d = 0; d < nsp; d++) in_sp *= in[d], out_sp *= out[d], k_sp *= k[d];
    for (int64_t pl = 0; pl < planes; pl++)
        for (int64_t o = 0; o < out_sp; o++) {
            float best = 0.0f;
            int seen = 0;
            double acc = 0.0;
            int64_t cnt = 0;
            for (int64_t t = 0; t < k_sp; t++) {
                int64_t off = 0, orem = o, trem = t, ostep = out_sp, tstep = k_sp;
                int inside = 1, in_pad = 1;
                for (int d = 0; d < nsp; d++) {
                    ostep /= out[d], tstep /= k[d];
                    int64_t od = orem / ostep, td = trem / tstep;
                    orem %= ostep, trem %= tstep;
                    int64_t i = od * s[d] - pb[d] + td * dil[d];
                    inside = inside && i >= 0 && i < in[d];
                    in_pad = in_pad && i >= -pb[d] && i < in[d] + pe[d];
                    off = off * in[d] + i;
                }
                if (!inside) {
                    cnt += incl && in_pad;
                    continue;
                }
                float v = x[pl * in_sp + off];
                cnt++;
                if (!seen || v > best) best = v;
                seen = 1;
                acc += v;
            }
            y[pl * out_sp + o] =
                kind == 0 ? (seen ? best : 0.0f) : (float)(cnt ? acc / (double)cnt : 0.0);
        }
}

/* dlrt_pool_forward against pool_plain bit for bit, on inputs full of ties (half the values from a
 * small set, with -0 and +0), NaNs and infinities. An average over more than one NaN may be a NaN
 * of either sign (C leaves the operand order of +, which picks the NaN, to the compiler), so two
 * NaNs count as equal there. */
static void pool_exact(int kind, int nsp, const int64_t *in, const int64_t *k, const int64_t *s,
                       const int64_t *dil, const int64_t *pb, const int64_t *pe, int ceil_mode,
                       int incl) {
    static const float vals[] = {1.0f, 2.0f, 0.0f, -0.0f, -1.0f, 0.5f, 2.0f, 1.0f};
    char what[200];
    snprintf(what, sizeof what,
             "pool exact kind=%d %dd in=%lld k=%lld s=%lld d=%lld pads=%lld,%lld ceil=%d incl=%d",
             kind, nsp, (long long)in[nsp - 1], (long long)k[nsp - 1], (long long)s[nsp - 1],
             (long long)dil[nsp - 1], (long long)pb[nsp - 1], (long long)pe[nsp - 1], ceil_mode,
             incl);
    dlrt_pool p = {.nsp = nsp, .kind = kind, .count_include_pad = incl, .n = 2, .c = 3};
    int64_t in_sp = 1, out_sp = 1;
    for (int d = 0; d < nsp; d++) {
        p.in[d] = in[d], p.k[d] = k[d], p.stride[d] = s[d], p.dil[d] = dil[d];
        p.pad_begin[d] = pb[d], p.pad_end[d] = pe[d];
        p.out[d] = pool_out_dim(in[d], k[d], s[d], dil[d], pb[d], pe[d], ceil_mode);
        in_sp *= in[d], out_sp *= p.out[d];
    }
    const int64_t xn = 6 * in_sp, yn = 6 * out_sp;
    float *x = rand_buf(xn), *y = malloc((size_t)(yn + 1) * 4), *ref = malloc((size_t)yn * 4 + 4);
    for (int64_t i = 0; i < xn; i++) {
        uint64_t r = (uint64_t)((x[i] + 1.0f) * 1000.0f);
        /* the rest random: sums that round */
        x[i] = r % 37 == 0   ? NAN
               : r % 41 == 0 ? -NAN
               : r % 43 == 0 ? INFINITY
               : r % 47 == 0 ? -INFINITY
               : r % 2       ? vals[r / 2 % 8]
                             : x[i];
    }
    y[yn] = CANARY;
    dlrt_pool_forward(&p, x, y);
    pool_plain(kind, nsp, in, p.out, k, s, dil, pb, pe, incl, 6, x, ref);
    int ok = y[yn] == CANARY;
    for (int64_t i = 0; ok && i < yn; i++) {
        ok = !memcmp(&y[i], &ref[i], 4) || (kind == 1 && isnan(y[i]) && isnan(ref[i]));
        if (!ok) printf("  at y[%lld]: got %g want %g\n", (long long)i, y[i], ref[i]);
    }
    check(ok, what);
    free(x), free(y), free(ref);
}

static void test_pool_exact(void) {
    static const int64_t one[3] = {1, 1, 1}, zero[3] = {0, 0, 0};
    for (int kind = 0; kind < 2; kind++)
        for (int variant = 0; variant < 2; variant++) {
            const int incl = kind == 1 && variant;
            int64_t in[2] = {37, 41}, p1[2] = {1, 1}, p2[2] = {2, 2};
            int64_t k3[2] = {3, 3}, k2[2] = {2, 2}, k5[2] = {5, 4}, s1[2] = {1, 1}, s2[2] = {2, 2};
            int64_t s3[2] = {3, 3}, d2[2] = {1, 2};
            pool_exact(kind, 2, in, k3, s2, one, p1, p1, variant, incl);
            pool_exact(kind, 2, in, k2, s2, one, zero, zero, variant, incl);
            pool_exact(kind, 2, in, k3, s1, one, p1, p1, variant, incl);
            pool_exact(kind, 2, in, k2, s1, one, zero, p1, variant, incl);
            pool_exact(kind, 2, in, k5, s1, one, p2, p1, variant, incl);
            pool_exact(kind, 2, in, k3, s1, d2, p2, p2, variant, incl);
            pool_exact(kind, 2, in, k3, s3, one, p1, p2, variant, incl);
            int64_t k31[2] = {3, 1}, p10[2] = {2, 0}; /* divisors 1 to 3 on the border rows */
            pool_exact(kind, 2, in, k31, s1, one, p10, p10, variant, incl);
            int64_t big[2] = {40, 45}; /* windows larger than the input */
            pool_exact(kind, 2, in, big, s2, one, p2, p2, variant, incl);
            int64_t in1[1] = {300}, k1[1] = {3}, s11[1] = {2}, p11[1] = {1};
            pool_exact(kind, 1, in1, k1, s11, one, p11, p11, variant, incl);
            int64_t in3[3] = {4, 7, 33}, k3d[3] = {2, 3, 3}, s3d[3] = {1, 1, 2}, p3d[3] = {1, 1, 1};
            pool_exact(kind, 3, in3, k3d, s3d, one, p3d, p3d, variant, incl);
        }
}

/* Max pooling with window k, stride s and pads pad (depth first, one tap in depth), bit for bit
 * against the plain loops: on each of the n planes sizes[] in floor and ceil modes, then on the
 * 3-D input in3. */
static void max_pool_cases(const int64_t (*sizes)[2], size_t n, const int64_t *k, const int64_t *s,
                           const int64_t *pad, const int64_t *in3) {
    static const int64_t one[3] = {1, 1, 1};
    for (size_t i = 0; i < n; i++)
        for (int ceil_mode = 0; ceil_mode < 2; ceil_mode++)
            pool_exact(0, 2, sizes[i], k + 1, s + 1, one, pad + 1, pad + 1, ceil_mode, 0);
    pool_exact(0, 3, in3, k, s, one, pad, pad, 0, 0);
}

/* 3x3 stride-2 max pooling padded by one, read straight from the rows on AVX-512 builds
 * (pool-s2.h): bit for bit against the plain loops over NaNs, infinities and ties, on widths
 * even and odd, rows of exactly 16 windows and ragged ones, floor and ceil modes, a 3-D pool
 * with one tap in depth; where the rule takes a pool and where it leaves it. */
static void test_pool_s2(void) {
    static const int64_t k3[3] = {1, 3, 3}, s2[3] = {1, 2, 2}, p1[3] = {0, 1, 1};
    static const int64_t sizes[][2] = {{20, 112}, {9, 33}, {16, 31}, {7, 32}, {5, 64}, {3, 47}};
    static const int64_t in3[3] = {3, 9, 40};
    max_pool_cases(sizes, sizeof sizes / sizeof sizes[0], k3, s2, p1, in3);
    /* the rule: taken for ResNet's stem pool, left for narrower rows, other windows, strides,
     * pads, averages */
    for (int c = 0; c < 6; c++) {
        dlrt_pool p = {.nsp = 2, .kind = 0, .n = 1, .c = 1};
        for (int d = 0; d < 2; d++) {
            p.in[d] = 112, p.k[d] = 3, p.stride[d] = 2, p.dil[d] = 1;
            p.pad_begin[d] = p.pad_end[d] = 1;
        }
        if (c == 1) p.in[1] = 29; /* 15 windows a row */
        if (c == 2) p.k[0] = p.k[1] = 2;
        if (c == 3) p.stride[0] = p.stride[1] = 3;
        if (c == 4) p.pad_begin[0] = p.pad_begin[1] = p.pad_end[0] = p.pad_end[1] = 0;
        if (c == 5) p.kind = 1;
        for (int d = 0; d < 2; d++)
            p.out[d] =
                pool_out_dim(p.in[d], p.k[d], p.stride[d], 1, p.pad_begin[d], p.pad_end[d], 0);
        dlrt_win3 g;
        int64_t pe[3];
        dlrt_pool_geom(&p, &g, pe);
        char what[80];
        snprintf(what, sizeof what, "3x3 stride-2 max pool path: case %d %s", c,
                 c ? "left to the general one" : "taken");
#if defined(__AVX512F__)
        check(dlrt_pool_s2(&p, &g) == (c == 0), what);
#else
        check(!dlrt_pool_s2(&p, &g), what);
#endif
    }
}

/* Unpadded 2x2 stride-2 max pooling (dlrt_pool_forward's own path): rows of windows by 8, by 4
 * (4 to 7 windows, LeNet's 8x8 to 4x4) and one at a time (1 to 3), each with and without a last
 * step overlapping the one before; leftover rows and columns; a 3-D pool with one depth tap. */
static void test_pool_pair(void) {
    static const int64_t zero[3] = {0, 0, 0}, k2[3] = {1, 2, 2}, s2[3] = {1, 2, 2};
    static const int64_t sizes[][2] = {{24, 32}, {5, 34}, {8, 8}, {11, 13}, {40, 6}, {30, 3}};
    static const int64_t in3[3] = {3, 8, 18};
    max_pool_cases(sizes, sizeof sizes / sizeof sizes[0], k2, s2, zero, in3);
}

static void test_pool(void) {
    static const int64_t one[3] = {1, 1, 1}, zero[3] = {0, 0, 0};
    for (int kind = 0; kind < 3; kind++)
        for (int variant = 0; variant < 2; variant++) {
            int incl = kind == 1 && variant, lp = kind == 2 ? 1 + variant : 0;
            int64_t in2[2] = {9, 8}, k2[2] = {3, 2}, s2[2] = {2, 2};
            int64_t pb2[2] = {1, 0}, pe2[2] = {1, 1}, d2[2] = {2, 1};
            pool_run(kind, 2, in2, k2, s2, one, pb2, pe2, 0, incl, lp);
            pool_run(kind, 2, in2, k2, s2, one, pb2, pe2, 1, incl, lp);      /* ceil mode */
            pool_run(kind, 2, in2, k2, s2, d2, pb2, pe2, variant, incl, lp); /* dilation */
            int64_t in1[1] = {10}, k1[1] = {3}, s1[1] = {3}, pb1[1] = {2}, pe1[1] = {0};
            pool_run(kind, 1, in1, k1, s1, one, pb1, pe1, 1, incl, lp); /* ceil past end pad */
            int64_t kb[1] = {2}, pbig[1] = {3}, sb[1] = {1}; /* windows wholly in the padding */
            pool_run(kind, 1, in1, kb, sb, one, pbig, pbig, 0, incl, lp);
            int64_t in3[3] = {5, 6, 7}, k3[3] = {2, 3, 2}, s3[3] = {1, 2, 2};
            int64_t pb3[3] = {1, 1, 0}, pe3[3] = {0, 1, 1}, d3[3] = {2, 1, 1};
            pool_run(kind, 3, in3, k3, s3, d3, pb3, pe3, variant, incl, lp);
            int64_t full[2] = {7, 6}; /* global-like: the window is the whole input */
            pool_run(kind, 2, full, full, one, one, zero, zero, 0, incl, lp);
        }
    int64_t in2[2] = {6, 6}, k2[2] = {3, 3}, s2[2] = {1, 1}, pb2[2] = {1, 1};
    pool_run(2, 2, in2, k2, s2, one, pb2, pb2, 0, 0, 3); /* Lp p = 3 */
    test_pool_wide();
    test_pool_exact();
    test_pool_pair();
    test_pool_s2();
}

/* ---- softmax and layer normalization ---- */

static void softmax_run(int rank, const int64_t *dims, int axis, int log, int specials,
                        int in_place) {
    char what[160];
    snprintf(what, sizeof what, "%s rank=%d axis=%d dims0=%lld specials=%d in_place=%d",
             log ? "logsoftmax" : "softmax", rank, axis, (long long)dims[0], specials, in_place);
    int64_t outer = 1, n = dims[axis], inner = 1, numel = 1;
    for (int d = 0; d < rank; d++) {
        numel *= dims[d];
        if (d < axis) outer *= dims[d];
        if (d > axis) inner *= dims[d];
    }
    float *x = rand_buf(numel);
    for (int64_t i = 0; i < numel; i++) x[i] *= 8.0f;
    /* slices 0..3 (slice s starts at (s / inner) * n * inner + s % inner): two +inf; a NaN;
     * all -inf; a NaN next to a +inf */
    /* specials 2: masked scores as attention has them, a causal mask's -FLT_MAX over the second
     * half of every slice and -1e4 (an additive padding mask) on every third score of the
     * first half, plus one score 95 below its slice's maximum (e^-95 is under FLT_MIN: 0) */
    for (int64_t sl = 0; specials == 2 && sl < outer * inner; sl++) {
        float *b = x + sl / inner * n * inner + sl % inner;
        float m = -INFINITY;
        for (int64_t j = 0; j < (n + 1) / 2; j++) m = b[j * inner] > m ? b[j * inner] : m;
        for (int64_t j = 0; j < n; j++)
            if (j >= (n + 1) / 2)
                b[j * inner] = -FLT_MAX;
            else if (j % 3 == 2)
                b[j * inner] = -1e4f;
        if (n >= 3 && b[0] != m) b[0] = m - 95.0f;
    }
    /* specials 3: one score per slice 300 above the rest, at a position that moves with the
     * slice through every lane of the vectors (a maximum missed there overflows exp) */
    for (int64_t sl = 0; specials == 3 && sl < outer * inner; sl++) {
        float *b = x + sl / inner * n * inner + sl % inner;
        b[(sl * 7 + sl / 16) % n * inner] = 300.0f;
    }
    for (int64_t sl = 0; specials == 1 && sl < 4 && sl < outer * inner && n >= 2; sl++) {
        float *b = x + sl / inner * n * inner + sl % inner;
        if (sl == 0) b[0] = b[(n - 1) * inner] = INFINITY;
        if (sl == 1 || sl == 3) b[n / 2 * inner] = NAN;
        if (sl == 2)
            for (int64_t j = 0; j < n; j++) b[j * inner] = -INFINITY;
        if (sl == 3) b[0] = INFINITY;
    }
    float *x_in = malloc((size_t)numel * 4); /* x itself is overwritten in place */
    memcpy(x_in, x, (size_t)numel * 4);
    ref_graph r;
    rg_init(&r);
    dl_value *xv = rg_const(&r, rank, dims, x);
    char at[32];
    snprintf(at, sizeof at, "axis=%d", axis);
    dl_value *y = rg_node(&r, log ? "LogSoftmax" : "Softmax", 1, &xv, at);
    dl_tensor *out = NULL;
    if (rg_run(&r, 1, &y, &out, what)) {
        float *yp = in_place ? x : malloc((size_t)numel * 4);
        dlrt_softmax(outer, n, inner, x, yp, log);
        const float *ref = dl_tensor_data(out);
        int ok = 1;
        for (int64_t i = 0; ok && i < numel; i++) {
            ok = close_to(yp[i], ref[i], 1e-5);
            /* a masked score's probability is exactly 0 */
            if (specials == 2 && !log && x_in[i] == -FLT_MAX) ok = ok && yp[i] == 0.0f;
            if (!ok) printf("  at y[%lld]: got %.8g want %.8g\n", (long long)i, yp[i], ref[i]);
        }
        check(ok, what);
        if (!in_place) free(yp);
        rg_free(&r, 1, &out);
    } else {
        rg_free(&r, 0, NULL);
    }
    free(x), free(x_in);
}

static void layernorm_run(int rank, const int64_t *dims, int axis, int with_bias, float eps,
                          int in_place) {
    char what[160];
    snprintf(what, sizeof what, "layernorm rank=%d axis=%d bias=%d eps=%g in_place=%d", rank, axis,
             with_bias, eps, in_place);
    int64_t outer = 1, n = 1;
    for (int d = 0; d < rank; d++) *(d < axis ? &outer : &n) *= dims[d];
    float *x = rand_buf(outer * n), *scale = rand_buf(n), *bias = rand_buf(n);
    for (int64_t i = 0; i < outer * n; i++) x[i] = 3.0f * x[i] + 1.5f;
    ref_graph r;
    rg_init(&r);
    dl_value *in[3] = {rg_const(&r, rank, dims, x), rg_const(&r, rank - axis, dims + axis, scale),
                       rg_const(&r, rank - axis, dims + axis, bias)};
    char at[64];
    snprintf(at, sizeof at, "axis=%d;epsilon=%.9g", axis, eps);
    const char *a[2] = {at, NULL};
    char *semi = strchr(at, ';');
    *semi = 0, a[1] = semi + 1;
    dl_value *outs[3];
    dl_tensor *res[3] = {NULL, NULL, NULL};
    if (dl_add_node(r.g, "LayerNormalization", with_bias ? 3 : 2, in, 3, outs, 2, a) != DL_OK ||
        !rg_run(&r, 3, outs, res, what)) {
        rg_free(&r, 0, NULL);
        free(x), free(scale), free(bias);
        return;
    }
    float *yp = in_place ? x : malloc((size_t)(outer * n) * 4);
    float *mean = malloc((size_t)outer * 4), *inv = malloc((size_t)outer * 4);
    dlrt_layernorm(outer, n, x, scale, with_bias ? bias : NULL, eps, yp, mean, inv);
    const float *ry = dl_tensor_data(res[0]), *rm = dl_tensor_data(res[1]);
    const float *ri = dl_tensor_data(res[2]);
    int ok = 1;
    for (int64_t i = 0; ok && i < outer * n; i++) ok = close_to(yp[i], ry[i], 1e-5);
    for (int64_t i = 0; ok && i < outer; i++)
        ok = close_to(mean[i], rm[i], 1e-6) && close_to(inv[i], ri[i], 1e-6);
    check(ok, what);
    dlrt_layernorm(outer, n, x, scale, NULL, eps, yp, NULL, NULL); /* optional outputs absent */
    check(1, "layernorm without statistics outputs runs");
    if (!in_place) free(yp);
    free(mean), free(inv);
    rg_free(&r, 3, res);
    free(x), free(scale), free(bias);
}

/* dlrt_transpose32 against plain loops, bit for bit (the input's bit patterns include NaNs):
 * matrices narrower and wider than a vector block, with and without leftover rows and columns,
 * batches, and one large enough to be split over threads. */
static void test_transpose32(void) {
    static const int64_t shapes[][3] = {{1, 1, 1},   {1, 16, 16},  {2, 17, 33},  {3, 8, 40},
                                        {1, 5, 100}, {4, 64, 128}, {2, 31, 15},  {8, 128, 256},
                                        {1, 300, 7}, {5, 48, 48},  {1, 257, 129}};
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
        const int64_t b = shapes[c][0], r = shapes[c][1], k = shapes[c][2], n = b * r * k;
        uint32_t *x = malloc((size_t)n * 4), *y = malloc((size_t)(n + 1) * 4);
        for (int64_t i = 0; i < n; i++)
            x[i] = (uint32_t)(i * 2654435761u) | 0x7F800000u * (i % 5 == 0);
        y[n] = 0xDEADBEEFu; /* canary */
        dlrt_transpose32(b, r, k, x, y);
        int ok = y[n] == 0xDEADBEEFu;
        for (int64_t bi = 0; ok && bi < b; bi++)
            for (int64_t i = 0; ok && i < r; i++)
                for (int64_t j = 0; ok && j < k; j++)
                    ok = y[(bi * k + j) * r + i] == x[(bi * r + i) * k + j];
        char what[96];
        snprintf(what, sizeof what, "transpose32 batch %lld of %lld x %lld", (long long)b,
                 (long long)r, (long long)k);
        check(ok, what);
        free(x), free(y);
    }
}

/* The GELU epilogue's erf against double erf at about a million floats spread over every
 * binade up to 10 (both signs: it is odd) and at its special values; then GELU's vector and
 * scalar forms give the same bits (a row's tail runs the scalar one, and where a row splits
 * depends on tiles and threads), and both stay within the stated bound of the true GELU. */
static void test_erf_gelu(void) {
#if defined(__FMA__) || defined(__AVX512F__) /* DLRT_FMAF fused */
    const double max_ulp = 6.0, max_abs = 3.6e-7;
#else
    const double max_ulp = 7.7, max_abs = 4.6e-7;
#endif
    double worst_ulp = 0, worst_abs = 0;
    int odd = 1;
    uint32_t top;
    const float ten = 10.0f;
    memcpy(&top, &ten, sizeof top);
    for (uint32_t bits = 1; bits < top; bits += 1021) {
        float x;
        memcpy(&x, &bits, sizeof x);
        const double ref = erf((double)x);
        const float y = dlrt_erf(x), rf = (float)ref;
        const float ulp = rf >= 1.0f ? 5.9604645e-8f : nextafterf(rf, INFINITY) - rf;
        const double e = fabs((double)y - ref);
        worst_abs = e > worst_abs ? e : worst_abs;
        worst_ulp = e / ulp > worst_ulp ? e / ulp : worst_ulp;
        odd = odd && dlrt_erf(-x) == -y;
    }
    char what[160];
    snprintf(what, sizeof what, "erf: at most %.1f ulp and %.1e from double erf (%.2f ulp, %.2e)",
             max_ulp, max_abs, worst_ulp, worst_abs);
    check(worst_ulp <= max_ulp && worst_abs <= max_abs, what);
    check(odd && dlrt_erf(0.0f) == 0.0f && signbit(dlrt_erf(-0.0f)) && dlrt_erf(4.0f) == 1.0f &&
              dlrt_erf(INFINITY) == 1.0f && dlrt_erf(-INFINITY) == -1.0f && isnan(dlrt_erf(NAN)),
          "erf: odd, exact at 0 and -0, 1 from 4 up and at infinity, NaN kept");
    /* GELU: 67 values (vectors and a tail), divisors sqrt(2) and 2; specials in both forms */
    for (int di = 0; di < 2; di++) {
        const float d = di ? 2.0f : 1.41421356f;
        float v[67], w[67];
        int same = 1, close = 1;
        for (int i = 0; i < 67; i++) v[i] = w[i] = (float)(i - 40) * 0.173f + 0.01f * (i % 7);
        v[3] = w[3] = 9.5f, v[4] = w[4] = -9.5f, v[5] = w[5] = 0.0f, v[6] = w[6] = -0.0f;
        v[7] = w[7] = NAN, v[8] = w[8] = INFINITY, v[9] = w[9] = -INFINITY, v[66] = w[66] = -0.0f;
        v[65] = w[65] = NAN, v[64] = w[64] = -INFINITY, v[63] = w[63] = -9.5f;
        dlrt_act_apply(DLRT_ACT_GELU, d, 0, v, 67);
        for (int i = 0; i < 67; i++) {
            same = same && !memcmp(&v[i], &(float){dlrt_gelu1(w[i], 1.0f / d)}, sizeof(float));
            if (!isfinite(w[i])) continue;
            const double x = w[i], ref = 0.5 * x * (1.0 + erf(x / d));
            /* erf's bound scaled by |x| / 2, plus 2 ulp of the result (erf + 1 and the
             * product) */
            close = close && fabs(v[i] - ref) <= 0.5 * fabs(x) * (max_abs + 2.4e-7) +
                                                     2.0 * 1.2e-7 * fabs(ref) + 1e-30;
        }
        snprintf(what, sizeof what, "gelu (divisor %g): vector and scalar forms agree bit for bit",
                 d);
        check(same, what);
        snprintf(what, sizeof what,
                 "gelu (divisor %g): within erf's bound of x (1 + erf(x / d)) / 2", d);
        check(close && v[3] == 9.5f, what);
        snprintf(what, sizeof what,
                 "gelu (divisor %g): -0 and erf's -1 give -0, NaN and -inf NaN, inf inf", d);
        check(v[4] == 0.0f && signbit(v[4]) && v[6] == 0.0f && signbit(v[6]) && signbit(v[66]) &&
                  v[63] == 0.0f && signbit(v[63]) && isnan(v[7]) && isnan(v[65]) && isnan(v[9]) &&
                  isnan(v[64]) && v[8] == INFINITY && v[5] == 0.0f && !signbit(v[5]),
              what);
    }
}

/* The softmax exponential against double exp over every 61st float of [-87.3, 0] (its
 * domain: a score minus its row's maximum), 0 below, NaN kept. */
static void test_exp_neg(void) {
    double worst = 0;
    float at = 0;
    uint32_t hi;
    const float bottom = -87.33f;
    memcpy(&hi, &bottom, sizeof hi);
    for (uint32_t bits = 0x80000000u; bits <= hi; bits += 61) {
        float x;
        memcpy(&x, &bits, sizeof x);
        const double ref = exp((double)x);
        const float rf = (float)ref, ulp = nextafterf(rf, INFINITY) - rf;
        const double e = fabs((double)dlrt_exp_neg(x) - ref) / ulp;
        if (e > worst) worst = e, at = x;
    }
    char what[128];
    snprintf(what, sizeof what, "exp_neg: within 1.5 ulp of exp on [-87.3, 0] (%.2f ulp at %g)",
             worst, at);
    check(worst <= 1.5, what);
    check(dlrt_exp_neg(0.0f) == 1.0f && dlrt_exp_neg(-100.0f) == 0.0f &&
              dlrt_exp_neg(-INFINITY) == 0.0f && isnan(dlrt_exp_neg(NAN)),
          "exp_neg: 1 at 0, 0 below -87.3 and at -inf, NaN kept");
}

static void test_softmax_layernorm(void) {
    int64_t d4[4] = {2, 3, 4, 5}, rows[2] = {3, 1000}, wide[3] = {2, 70, 130};
    for (int log = 0; log < 2; log++) {
        for (int axis = 0; axis < 4; axis++) softmax_run(4, d4, axis, log, 0, 0);
        softmax_run(2, rows, 1, log, 1, 0);
        softmax_run(2, rows, 1, log, 1, 1);
        softmax_run(3, wide, 1, log, 1, 0);
        softmax_run(3, wide, 1, log, 0, 1);
        softmax_run(3, wide, 0, log, 1, 0);
        int64_t heads[3] = {8, 128, 128}; /* attention scores under masks, by rows and columns */
        softmax_run(3, heads, 2, log, 2, 0);
        softmax_run(3, heads, 2, log, 2, 1);
        softmax_run(3, wide, 1, log, 2, 0);
        softmax_run(3, heads, 2, log, 3, 0);
        softmax_run(3, wide, 1, log, 3, 0);
    }
    int64_t l3[3] = {4, 7, 33}, l2[2] = {3, 1000};
    layernorm_run(3, l3, 2, 1, 1e-5f, 0);
    layernorm_run(3, l3, 1, 0, 1e-3f, 0);
    layernorm_run(3, l3, 0, 1, 1e-5f, 1);
    layernorm_run(2, l2, 1, 1, 1e-5f, 0);
}

/* ---- benchmark ---- */

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void bench(void) {
    for (int64_t n = 256; n <= 1024; n *= 2) {
        float *a = rand_buf(n * n), *b = rand_buf(n * n), *c = malloc((size_t)(n * n) * 4);
        double best = 1e30;
        for (int rep = 0; rep < (n < 1024 ? 10 : 3); rep++) {
            double t = now_s();
            dlrt_sgemm(n, n, n, a, n, 0, b, n, 0, c, n, NULL);
            t = now_s() - t;
            best = t < best ? t : best;
        }
        printf("sgemm n=%lld: %.1f GFLOP/s\n", (long long)n,
               2.0 * (double)(n * n * n) / best / 1e9);
        free(a), free(b), free(c);
    }
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--bench")) {
        bench();
        return 0;
    }
    double t = now_s();
    test_gemm();
    test_packed_index();
    test_gemm_indexed();
    test_gemm_threads();
    test_gemm_row_packed();
    test_gemm_split();
    test_gemm_split_random();
    printf("gemm: %d passed, %d failed (%.1f s)\n", passed, failed, now_s() - t);
    test_conv();
    test_conv_packed();
    test_pool();
    test_softmax_layernorm();
    test_erf_gelu();
    test_exp_neg();
    test_transpose32();
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
