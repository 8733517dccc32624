/* emit.c — the C text of each fused group. Loop-IR groups (elementwise, reduce, transpose) go
 * through the loop IR and its schedules (lower-*.c); heavy groups become a call of a runtime
 * kernel (src/kernels/rt/dlrt.h) with their fused epilogue, whose parameters are written as
 * constants except for symbolic dims, which read s[sym]. */
#include "codegen-impl.h"
#include "emit-params.h"

#include <math.h>

static const char *fmt_float(double v, char *buf, size_t n) {
    if (isnan(v))
        snprintf(buf, n, "NAN");
    else if (isinf(v))
        snprintf(buf, n, v > 0 ? "INFINITY" : "-INFINITY");
    else
        snprintf(buf, n, "(float)%.17g", v);
    return buf;
}

static const char *dim_c(const dl_value *v, int d, char *buf, size_t n) {
    int64_t x = v->type.dims[d];
    dl_kdim k = {.c = x >= 0 ? x : 0, .sym = x >= 0 ? -1 : (int)(-x - 1)};
    return dl_kdim_c(k, buf, n);
}

/* "12", "s[0]" or "((int64_t)12*s[0]*s[3])" in buf (DL_SEXPR_C_LEN bytes hold any). */
enum { DL_SEXPR_C_LEN = 32 + 16 * DL_MAX_RANK };
static const char *sexpr_str(const dl_sexpr *e, char *buf) {
    if (!e->n) {
        snprintf(buf, DL_SEXPR_C_LEN, "%lld", (long long)e->c);
    } else if (e->n == 1 && e->c == 1) {
        snprintf(buf, DL_SEXPR_C_LEN, "s[%d]", e->sym[0]);
    } else {
        int l = snprintf(buf, DL_SEXPR_C_LEN, "((int64_t)%lld", (long long)e->c);
        for (int i = 0; i < e->n; i++)
            l += snprintf(buf + l, DL_SEXPR_C_LEN - (size_t)l, "*s[%d]", e->sym[i]);
        snprintf(buf + l, DL_SEXPR_C_LEN - (size_t)l, ")");
    }
    return buf;
}

static void sexpr_c(dl_sbuf *sb, const dl_sexpr *e) {
    char b[DL_SEXPR_C_LEN];
    dl_sb_put(sb, sexpr_str(e, b));
}

/* The product of dims [from, to) of v as C (sexpr_c); "1" when empty. */
static void prod_c(dl_sbuf *sb, const dl_value *v, int from, int to) {
    const dl_sexpr e = dl_dims_sexpr(v, from, to);
    sexpr_c(sb, &e);
}

static void emit_epilogue(dl_sbuf *sb, const dl_epi_params *e) {
    char f1[48], f2[48], f3[48], f4[48];
    dl_sb_printf(sb,
                 "    dlrt_epilogue ep = {.alpha = %s, .beta = %s, .act = %d, .act_a = %s, "
                 ".act_b = %s};\n",
                 fmt_float(e->alpha, f1, sizeof f1), fmt_float(e->beta, f2, sizeof f2), e->act,
                 fmt_float(e->act_a, f3, sizeof f3), fmt_float(e->act_b, f4, sizeof f4));
    if (e->bias_slot >= 0)
        dl_sb_printf(sb,
                     "    ep.bias = (const float *)b[%d]; ep.bias_rs = %lld; ep.bias_cs = %lld;\n",
                     e->bias_slot, (long long)e->bias_rs, (long long)e->bias_cs);
}

static void emit_residual(dl_sbuf *sb, const dl_epi_params *e, const char *offset) {
    if (e->res_slot < 0) return;
    dl_sb_printf(sb,
                 "    ep.residual = (const float *)b[%d]%s; ep.res_rs = %lld; ep.res_cs = %lld;\n",
                 e->res_slot, offset, (long long)e->res_rs, (long long)e->res_cs);
}

/* The kernel signature every group gets (lower.h). */
static void emit_open(dl_sbuf *sb, const char *name) {
    dl_sb_printf(sb, "static void %s(void *const *b, const int64_t *s) {\n    (void)s;\n", name);
}

/* ", .NAME = {a, b, c}" for each 3-entry window field of a dlrt_conv / dlrt_pool. */
static void emit_window_field(dl_sbuf *sb, const char *name, const int64_t *v) {
    dl_sb_printf(sb, ", .%s = {%lld, %lld, %lld}", name, (long long)v[0], (long long)v[1],
                 (long long)v[2]);
}

/* ".n = s[sym]" or the constant batch. */
static void emit_batch(dl_sbuf *sb, int n_sym, int64_t n) {
    if (n_sym >= 0)
        dl_sb_printf(sb, ".n = s[%d]", n_sym);
    else
        dl_sb_printf(sb, ".n = %lld", (long long)n);
}

/* Registers a constant weight for packing once as GEMM operand `operand` (0: op(A), lines = M
 * rows; 1: op(B), lines = N columns; stored with ld/trans), or, with a Winograd packing mode
 * (DLRT_WG_PACKED...) as operand, as a 3x3 convolution's transformed weights (lines = c_out, K =
 * c_in), from element `offset` of the constant on; *index is the request, -1 when there is no
 * registry or the weight is not a float constant. */
static dl_status request_pack_at(dl_ctx *ctx, dl_packs *pk, const dl_value *v, int operand,
                                 int64_t lines, int64_t K, int64_t ld, int trans, int64_t offset,
                                 int *index) {
    *index = -1;
    if (!pk || !dl_gemm_packed_weight(v) || lines <= 0 || K <= 0) return DL_OK;
    if (offset != 0) { /* (RNN weights, one direction's matrix: GEMM operand 1 or 0) */
        const bool rows = (operand == 1) == (trans != 0); /* lines are rows of ld floats */
        const int64_t end = offset + (rows ? (lines - 1) * ld + K : (K - 1) * ld + lines);
        if ((operand != 0 && operand != 1) || offset < 0 || end > v->constant->numel)
            return dl_fail(ctx, DL_ERR_INTERNAL, "a packed weight would read past '%s'", v->name);
    }
    for (int i = 0; i < pk->n; i++) { /* one weight read by several products is packed once */
        const dl_pack_req *r = &pk->items[i];
        if (r->src == v->id && r->operand == operand && r->lines == lines && r->K == K &&
            r->ld == ld && r->trans == trans && r->offset == offset) {
            *index = i;
            return DL_OK;
        }
    }
    if (pk->n == pk->cap) {
        int cap = pk->cap ? 2 * pk->cap : 16;
        dl_pack_req *items = dl_realloc(pk->items, sizeof *items * (size_t)cap);
        if (!items) return dl_fail(ctx, DL_ERR_NOMEM, "out of memory emitting kernels");
        pk->items = items;
        pk->cap = cap;
    }
    pk->items[pk->n] = (dl_pack_req){.src = v->id,
                                     .operand = operand,
                                     .trans = trans,
                                     .lines = lines,
                                     .K = K,
                                     .ld = ld,
                                     .offset = offset};
    *index = pk->n++;
    return DL_OK;
}
/* The same for an operand at the constant's start. */
static dl_status request_pack(dl_ctx *ctx, dl_packs *pk, const dl_value *v, int operand,
                              int64_t lines, int64_t K, int64_t ld, int trans, int *index) {
    return request_pack_at(ctx, pk, v, operand, lines, K, ld, trans, 0, index);
}

/* "    dlrt_conv p = {...};" with the batch s[n_sym] when n_sym >= 0. */
static void emit_conv_struct(dl_sbuf *sb, const dlrt_conv *p, int n_sym) {
    dl_sb_printf(sb, "    dlrt_conv p = {.nsp = %d, ", p->nsp);
    emit_batch(sb, n_sym, p->n);
    dl_sb_printf(sb, ", .c_in = %lld, .c_out = %lld, .group = %lld", (long long)p->c_in,
                 (long long)p->c_out, (long long)p->group);
    emit_window_field(sb, "in", p->in);
    emit_window_field(sb, "out", p->out);
    emit_window_field(sb, "k", p->k);
    emit_window_field(sb, "stride", p->stride);
    emit_window_field(sb, "dil", p->dil);
    emit_window_field(sb, "pad_begin", p->pad_begin);
    if (p->tuned) dl_sb_printf(sb, ", .tuned = %d", p->tuned);
    if (p->bf16) dl_sb_put(sb, ", .bf16 = 1");
    dl_sb_put(sb, "};\n");
}

static dl_status emit_conv(dl_ctx *ctx, const dl_group *gr, const dl_target *t, const char *name,
                           dl_packs *packs, dl_sbuf *sb) {
    dl_conv_params cp;
    DL_TRY(dl_conv_params_of(ctx, gr, &cp));
    const dlrt_conv *p = &cp.p;
    emit_open(sb, name);
    emit_conv_struct(sb, p, cp.n_sym);
    emit_epilogue(sb, &cp.epi);
    emit_residual(sb, &cp.epi, "");
    /* weights packed once when the layer runs as GEMMs or as Winograd
     * (dlrt_conv_packs_weights; the kernel decides again at run time and ignores the copy
     * otherwise) */
    int64_t kdim = p->group > 0 ? p->c_in / p->group : 0;
    for (int d = 0; d < p->nsp; d++) kdim *= p->k[d];
    int pk = -1;
    const int mode = dlrt_conv_packs_weights_for(t->vector_bytes, p); /* the target's tiles */
    const dl_value *w = gr->nodes[0]->in[1];
    if (dlrt_conv_winograd_tile(mode)) /* transformed, c_out x c_in each */
        DL_TRY(request_pack(ctx, packs, w, mode, p->c_out, p->c_in, 0, 0, &pk));
    else if (mode) { /* op(A) = w as the left operand, or as the transposed product's right one;
                      * in depth pairs for bfloat16 products */
        int operand, trans;
        dlrt_conv_gemm_pack_args(mode, &operand, &trans);
        DL_TRY(request_pack(ctx, packs, w, operand, p->c_out, kdim, kdim, trans, &pk));
    }
    /* NULL packed weights (no request, or an AOT bundle's empty slot): plain dlrt_conv_forward */
    char packed[48] = "0";
    if (pk >= 0) snprintf(packed, sizeof packed, "(const float *)b[DLK_PACK + %d]", pk);
    dl_sb_printf(sb,
                 "    dlrt_conv_forward_packed(&p, (const float *)b[%d], (const float *)b[%d], %s, "
                 "%d, (float *)b[%d], b[DLK_WS], &ep);\n}\n",
                 cp.x_slot, cp.w_slot, packed, pk >= 0 ? mode : 0, cp.y_slot);
    return DL_OK;
}

/* The statement "dlrt_sgemm_ws(M, N, K, A, lda, ta, 0, B, ldb, tb, 0, C, ldc, &ep, ws, bytes);"
 * where A, B and C are pointer expressions; with B prepacked (request pk >= 0) it passes the
 * packed copy, or B itself when the runtime made none (an AOT bundle). The workspace holds A
 * packed once, and B unless it is a weight (dl_group_workspace reserves
 * dlrt_gemm_workspace(M, N, K, 0, b_weight) bytes). With bf16 (dl_target.math_bf16) the call is
 * dlrt_sgemm_bf16, same arguments, B's pack in depth pairs (DLRT_B_PAIRS). */
static void emit_sgemm_call(dl_sbuf *sb, const char *indent, bool bf16, const char *m,
                            const char *n, const char *k, const char *a, const char *lda, int ta,
                            const char *b, const char *ldb, int tb, const char *c, const char *ldc,
                            int pk, bool b_weight) {
    dl_sb_printf(sb, "%sdlrt_sgemm_%s(%s, %s, %s, %s, %s, %d, 0,\n%s    ", indent,
                 bf16 ? "bf16" : "ws", m, n, k, a, lda, ta, indent);
    if (pk < 0)
        dl_sb_printf(sb, "%s, %s, %d, 0,", b, ldb, tb);
    else /* bf16: packed in depth pairs (request_pack's operand DLRT_B_PAIRS) */
        dl_sb_printf(sb,
                     "b[DLK_PACK + %d] ? (const float *)b[DLK_PACK + %d] : %s, %s, %d, "
                     "(b[DLK_PACK + %d] != 0) * %d,",
                     pk, pk, b, ldb, tb, pk, bf16 ? DLRT_B_PAIRS : 1);
    dl_sb_printf(sb, "\n%s    %s, %s, &ep, b[DLK_WS], dlrt_gemm_workspace(%s, %s, %s, 0, %d));\n",
                 indent, c, ldc, m, n, k, b_weight);
}

/* "(const float *)b[slot]" followed by `offset` (may be ""). */
static const char *slot_ptr(int slot, bool is_const, const char *offset, char *buf, size_t n) {
    snprintf(buf, n, "(%sfloat *)b[%d]%s", is_const ? "const " : "", slot, offset);
    return buf;
}

static dl_status emit_gemm(dl_ctx *ctx, const dl_group *gr, const dl_target *t, const char *name,
                           dl_packs *packs, dl_sbuf *sb) {
    dl_gemm_params gp;
    DL_TRY(dl_gemm_params_of(ctx, gr, &gp));
    const dl_node *n = gr->nodes[0];
    int pk;
    DL_TRY(request_pack(ctx, packs, n->in[1], t->math_bf16 ? DLRT_B_PAIRS : 1, gp.N, gp.K, gp.ldb,
                        gp.trans_b, &pk));
    char m[DL_SEXPR_C_LEN], nn[DL_SEXPR_C_LEN], kk[DL_SEXPR_C_LEN], lda[32], ldb[32], pa[48],
        pb[48], pc[48];
    const dl_value *a = n->in[0], *b = n->in[1];
    sexpr_str(&gp.m, m);
    sexpr_str(&gp.n, nn);
    sexpr_str(&gp.k, kk);
    dim_c(a, 1, lda, sizeof lda);
    dim_c(b, 1, ldb, sizeof ldb);
    emit_open(sb, name);
    emit_epilogue(sb, &gp.epi);
    emit_residual(sb, &gp.epi, "");
    emit_sgemm_call(sb, "    ", t->math_bf16, m, nn, kk,
                    slot_ptr(gp.a_slot, true, "", pa, sizeof pa), lda, gp.trans_a,
                    slot_ptr(gp.b_slot, true, "", pb, sizeof pb), ldb, gp.trans_b,
                    slot_ptr(gp.y_slot, false, "", pc, sizeof pc), nn, pk, gp.b_weight);
    dl_sb_put(sb, "}\n");
    return DL_OK;
}

/* MatMul with numpy batch broadcasting: one dlrt_sgemm per output matrix, or a single one
 * when B is a plain matrix and A is not transposed (A's batch dims fold into M). An operand
 * read through an absorbed Transpose is stored with its rows and columns swapped: the GEMM
 * reads it with its trans flag, the stored row length (M for A, K for B) as leading dim. */
static dl_status emit_matmul(dl_ctx *ctx, const dl_group *gr, const dl_target *t, const char *name,
                             dl_packs *packs, dl_sbuf *sb) {
    dl_matmul_params mp;
    DL_TRY(dl_matmul_params_of(ctx, gr, &mp));
    const dl_value *a = mp.a, *bv = mp.b, *y = mp.y;
    int ar = a->type.rank, br = bv->type.rank;
    const char *lda = mp.trans_a ? "M" : "K", *ldb = mp.trans_b ? "K" : "N";
    /* a B that is one matrix for the whole batch is packed once when constant */
    int pk = -1;
    if (br <= 2)
        DL_TRY(request_pack(ctx, packs, mp.b_in, t->math_bf16 ? DLRT_B_PAIRS : 1, mp.N, mp.K,
                            mp.trans_b ? mp.K : mp.N, mp.trans_b, &pk));
    char pa[64], pb[64], pc[64];
    emit_open(sb, name);
    emit_epilogue(sb, &mp.epi);
    dl_sb_put(sb, "    const int64_t M = ");
    sexpr_c(sb, &mp.m);
    dl_sb_printf(sb, ";\n    const int64_t N = %lld, K = %lld;\n", (long long)mp.N,
                 (long long)mp.K);
    dl_sb_put(sb, "    const int64_t nb = ");
    if (mp.fold_batch)
        dl_sb_put(sb, "1");
    else
        prod_c(sb, y, 0, mp.nbatch);
    dl_sb_put(sb, ";\n");
    if (mp.fold_batch || mp.nbatch == 0) {
        emit_residual(sb, &mp.epi, "");
        dl_sb_put(sb, "    if (nb > 0)\n");
        emit_sgemm_call(sb, "        ", t->math_bf16, "M", "N", "K",
                        slot_ptr(mp.a_slot, true, "", pa, sizeof pa), lda, mp.trans_a,
                        slot_ptr(mp.b_slot, true, "", pb, sizeof pb), ldb, mp.trans_b,
                        slot_ptr(mp.y_slot, false, "", pc, sizeof pc), "N", pk, mp.b_weight);
        dl_sb_put(sb, "}\n");
        return DL_OK;
    }
    /* Batch loop: decompose the flat batch index over y's batch dims, broadcast into A and B. */
    int nb = mp.nbatch;
    char d[32];
    dl_sb_printf(sb, "    const int64_t yd[%d] = {", nb);
    for (int i = 0; i < nb; i++) dl_sb_printf(sb, "%s%s", i ? ", " : "", dim_c(y, i, d, sizeof d));
    dl_sb_printf(sb, "};\n    const int64_t ad[%d] = {", nb);
    for (int i = 0; i < nb; i++) {
        int ai = i - (nb - (ar - 2));
        dl_sb_printf(sb, "%s%s", i ? ", " : "",
                     ai >= 0 && ar > 2 ? dim_c(a, ai, d, sizeof d) : "1");
    }
    dl_sb_printf(sb, "};\n    const int64_t bd[%d] = {", nb);
    for (int i = 0; i < nb; i++) {
        int bi = i - (nb - (br - 2));
        dl_sb_printf(sb, "%s%s", i ? ", " : "",
                     bi >= 0 && br > 2 ? dim_c(bv, bi, d, sizeof d) : "1");
    }
    dl_sb_printf(sb, "};\n");
    dl_sb_printf(sb,
                 "    for (int64_t t = 0; t < nb; t++) {\n"
                 "        int64_t rem = t, ao = 0, bo = 0, as = 1, bs = 1;\n"
                 "        for (int i = %d; i >= 0; i--) {\n"
                 "            int64_t idx = rem %% yd[i];\n"
                 "            rem /= yd[i];\n"
                 "            ao += (ad[i] == 1 ? 0 : idx) * as;\n"
                 "            bo += (bd[i] == 1 ? 0 : idx) * bs;\n"
                 "            as *= ad[i];\n"
                 "            bs *= bd[i];\n"
                 "        }\n",
                 nb - 1);
    if (mp.epi.res_slot >= 0)
        dl_sb_printf(sb,
                     "        ep.residual = (const float *)b[%d] + t * M * N; ep.res_rs = N; "
                     "ep.res_cs = 1;\n",
                     mp.epi.res_slot);
    emit_sgemm_call(sb, "        ", t->math_bf16, "M", "N", "K",
                    slot_ptr(mp.a_slot, true, " + ao * M * K", pa, sizeof pa), lda, mp.trans_a,
                    slot_ptr(mp.b_slot, true, " + bo * K * N", pb, sizeof pb), ldb, mp.trans_b,
                    slot_ptr(mp.y_slot, false, " + t * M * N", pc, sizeof pc), "N", pk,
                    mp.b_weight);
    dl_sb_put(sb, "    }\n}\n");
    return DL_OK;
}

/* "    dlrt_pool p = {...};" with the batch s[n_sym] when n_sym >= 0. */
static void emit_pool_struct(dl_sbuf *sb, const dlrt_pool *p, int n_sym) {
    char f[48];
    dl_sb_printf(sb, "    dlrt_pool p = {.nsp = %d, .kind = %d, .count_include_pad = %d, ", p->nsp,
                 p->kind, p->count_include_pad);
    emit_batch(sb, n_sym, p->n);
    dl_sb_printf(sb, ", .c = %lld", (long long)p->c);
    emit_window_field(sb, "in", p->in);
    emit_window_field(sb, "out", p->out);
    emit_window_field(sb, "k", p->k);
    emit_window_field(sb, "stride", p->stride);
    emit_window_field(sb, "dil", p->dil);
    emit_window_field(sb, "pad_begin", p->pad_begin);
    emit_window_field(sb, "pad_end", p->pad_end);
    dl_sb_printf(sb, ", .p = %s};\n", fmt_float(p->p, f, sizeof f));
}

static dl_status emit_pool(dl_ctx *ctx, const dl_group *gr, const char *name, dl_sbuf *sb) {
    dl_pool_params pp;
    DL_TRY(dl_pool_params_of(ctx, gr, &pp));
    emit_open(sb, name);
    emit_pool_struct(sb, &pp.p, pp.n_sym);
    dl_sb_printf(sb, "    dlrt_pool_forward(&p, (const float *)b[%d], (float *)b[%d]);\n}\n",
                 pp.x_slot, pp.y_slot);
    return DL_OK;
}

/* A CONV_GRAD group's dlrt_conv_grad_input / _weight call, or a CONV_TRANSPOSE group's
 * dlrt_conv_transpose, which also takes its weights packed once where its GEMM runs on them
 * (dlrt_conv_transpose_packs_weights for the target's tiles) and the bias (or NULL). */
static dl_status emit_conv_grad(dl_ctx *ctx, const dl_group *gr, const dl_target *t,
                                const char *name, dl_packs *packs, dl_sbuf *sb) {
    dl_conv_grad_params cg;
    DL_TRY(dl_conv_grad_params_of(ctx, gr, &cg));
    emit_open(sb, name);
    emit_conv_struct(sb, &cg.p, cg.n_sym);
    if (gr->kind != DL_G_CONV_TRANSPOSE) {
        dl_sb_printf(sb,
                     "    dlrt_conv_grad_%s(&p, (const float *)b[%d], (const float *)b[%d], "
                     "(float *)b[%d], b[DLK_WS]);\n}\n",
                     cg.weight ? "weight" : "input", cg.a_slot, cg.b_slot, cg.y_slot);
        return DL_OK;
    }
    const dlrt_conv *p = &cg.p;
    int64_t kdim = p->c_in;
    for (int d = 0; d < p->nsp; d++) kdim *= p->k[d];
    /* W [c_out, kdim] read transposed as the left operand, or as is as the transposed
     * product's right one */
    const int mode = dlrt_conv_transpose_packs_weights_for(t->vector_bytes, p);
    int pk = -1;
    if (mode)
        DL_TRY(request_pack(ctx, packs, gr->nodes[0]->in[1], mode == DLRT_A_PACKED ? 0 : 1, kdim,
                            p->c_out, kdim, mode == DLRT_A_PACKED, &pk));
    char packed[48] = "0", bias[48] = "0";
    if (pk >= 0) snprintf(packed, sizeof packed, "(const float *)b[DLK_PACK + %d]", pk);
    if (cg.bias_slot >= 0) snprintf(bias, sizeof bias, "(const float *)b[%d]", cg.bias_slot);
    dl_sb_printf(sb,
                 "    dlrt_conv_transpose(&p, (const float *)b[%d], (const float *)b[%d], %s, %d, "
                 "%s, (float *)b[%d], b[DLK_WS]);\n}\n",
                 cg.a_slot, cg.b_slot, packed, pk >= 0 ? mode : 0, bias, cg.y_slot);
    return DL_OK;
}

/* An ARGMAX group: one dlrt_argmax call over x seen as [outer, n, inner]. */
static dl_status emit_argmax(dl_ctx *ctx, const dl_group *gr, const char *name, dl_sbuf *sb) {
    const dl_node *n = gr->nodes[0];
    int axis;
    if (!dl_argmax_axis(n, &axis)) return dl_fail(ctx, DL_ERR_UNSUPPORTED, "not an argmax kernel");
    const dl_value *x = n->in[0];
    emit_open(sb, name);
    dl_sb_put(sb, "    dlrt_argmax(");
    prod_c(sb, x, 0, axis);
    dl_sb_put(sb, ", ");
    prod_c(sb, x, axis, axis + 1);
    dl_sb_put(sb, ", ");
    prod_c(sb, x, axis + 1, x->type.rank);
    dl_sb_printf(sb, ", (const float *)b[%d], (int64_t *)b[%d], %d, %d);\n}\n", x->id,
                 n->out[0]->id, dl_node_is(n, "ArgMax"),
                 dl_attr_int(n, "select_last_index", 0) != 0);
    return DL_OK;
}

/* b[slot] as a float pointer, or NULL where the value is absent. */
static void emit_slot_or_null(dl_sbuf *sb, const char *type, int slot) {
    if (slot >= 0)
        dl_sb_printf(sb, ", (%s *)b[%d]", type, slot);
    else
        dl_sb_put(sb, ", NULL");
}

/* An RNN group: one dlrt_rnn_forward call over the node's inputs and outputs. Constant weights
 * are packed at load, part by part as the kernel reads them (dlrt_rnn_packed_part), in the order
 * its `packed` takes them; NULL where not packed. */
static dl_status emit_rnn(dl_ctx *ctx, const dl_group *gr, const char *name, dl_packs *packs,
                          dl_sbuf *sb) {
    dl_rnn_params rp;
    if (!dl_rnn_params_of(gr->nodes[0], &rp))
        return dl_fail(ctx, DL_ERR_UNSUPPORTED, "not an rnn kernel");
    const dl_value *x = gr->nodes[0]->in[0];
    int pk[6] = {-1, -1, -1, -1, -1, -1};
    dlrt_rnn_part part;
    for (int i = 0; i < 6; i++)
        if (dlrt_rnn_packed_part(&rp.p, i / 3, i % 3, &part))
            DL_TRY(request_pack_at(ctx, packs, gr->nodes[0]->in[part.input], 1, part.lines, part.K,
                                   part.K, 1, part.offset, &pk[i]));
    emit_open(sb, name);
    dl_sb_put(sb, "    const float *const pk[6] = {");
    for (int i = 0; i < 6; i++)
        if (pk[i] < 0)
            dl_sb_printf(sb, "%sNULL", i ? ", " : "");
        else
            dl_sb_printf(sb, "%s(const float *)b[DLK_PACK + %d]", i ? ", " : "", pk[i]);
    dl_sb_put(sb, "};\n");
    dl_sb_printf(sb,
                 "    const dlrt_rnn p = {.kind = %d, .dirs = %d, .reverse = %d, "
                 ".linear_before_reset = %d, .T = ",
                 rp.p.kind, rp.p.dirs, rp.p.reverse, rp.p.linear_before_reset);
    prod_c(sb, x, 0, 1);
    dl_sb_put(sb, ", .B = ");
    prod_c(sb, x, 1, 2);
    dl_sb_printf(sb, ", .I = %lld, .H = %lld};\n    dlrt_rnn_forward(&p", (long long)rp.p.I,
                 (long long)rp.p.H);
    emit_slot_or_null(sb, "const float", rp.x);
    emit_slot_or_null(sb, "const float", rp.w);
    emit_slot_or_null(sb, "const float", rp.r);
    emit_slot_or_null(sb, "const float", rp.bias);
    emit_slot_or_null(sb, "const float", rp.h0);
    emit_slot_or_null(sb, "const float", rp.c0);
    emit_slot_or_null(sb, "float", rp.y);
    emit_slot_or_null(sb, "float", rp.yh);
    emit_slot_or_null(sb, "float", rp.yc);
    dl_sb_put(sb, ", pk, b[DLK_WS]);\n}\n");
    return DL_OK;
}

/* An int32 or float table `name` of n values, static in the kernel. */
static void emit_table(dl_sbuf *sb, const char *type, const char *name, const int32_t *iv,
                       const float *fv, int64_t n) {
    dl_sb_printf(sb, "    static const %s %s[%lld] = {", type, name, (long long)n);
    for (int64_t i = 0; i < n; i++) {
        if (i % 16 == 0) dl_sb_put(sb, "\n        ");
        if (iv)
            dl_sb_printf(sb, "%d,", iv[i]);
        else
            dl_sb_printf(sb, "%.9g,", (double)fv[i]); /* 9 digits: the same float read back */
    }
    dl_sb_put(sb, "};\n");
}

/* A RESIZE group: its taps as static tables, and one dlrt_resize2d call. */
static dl_status emit_resize(dl_ctx *ctx, const dl_group *gr, const char *name, dl_sbuf *sb) {
    dl_resize_params rp;
    DL_TRY(dl_resize_params_of(ctx, gr->nodes[0], &rp, true));
    char planes[DL_SEXPR_C_LEN];
    emit_open(sb, name);
    emit_table(sb, "int32_t", "ih", rp.ih, NULL, rp.out_h * rp.nh);
    emit_table(sb, "int32_t", "iw", rp.iw, NULL, rp.out_w * rp.nw);
    emit_table(sb, "float", "wh", NULL, rp.wh, rp.out_h * rp.nh);
    emit_table(sb, "float", "ww", NULL, rp.ww, rp.out_w * rp.nw);
    dl_sb_printf(sb,
                 "    const dlrt_resize r = {%s, %lld, %lld, %lld, %lld, %d, %d, ih, iw, wh, ww};\n"
                 "    dlrt_resize2d(&r, (const float *)b[%d], (float *)b[%d], b[DLK_WS]);\n}\n",
                 sexpr_str(&rp.planes, planes), (long long)rp.in_h, (long long)rp.in_w,
                 (long long)rp.out_h, (long long)rp.out_w, rp.nh, rp.nw, rp.x_slot, rp.y_slot);
    dl_resize_params_free(&rp);
    return DL_OK;
}

static dl_status emit_pool_grad(dl_ctx *ctx, const dl_group *gr, const char *name, dl_sbuf *sb) {
    dl_pool_grad_params pg;
    DL_TRY(dl_pool_grad_params_of(ctx, gr, &pg));
    emit_open(sb, name);
    emit_pool_struct(sb, &pg.p, pg.n_sym);
    char x[48] = "";
    if (pg.x_slot >= 0) snprintf(x, sizeof x, "(const float *)b[%d], ", pg.x_slot);
    dl_sb_printf(sb, "    dlrt_%spool_grad(&p, %s(const float *)b[%d], (float *)b[%d]);\n}\n",
                 pg.x_slot >= 0 ? "max" : "avg", x, pg.dy_slot, pg.dx_slot);
    return DL_OK;
}

static dl_status emit_softmax(dl_ctx *ctx, const dl_group *gr, const char *name, dl_sbuf *sb) {
    const dl_node *n = gr->nodes[0];
    const dl_value *x = n->in[0];
    int r = x->type.rank;
    int64_t axis = dl_attr_int(n, "axis", n->opset >= 13 ? -1 : 1);
    if (r == 0)
        axis = 0;
    else if (axis < 0)
        axis += r;
    if (r > 0 && (axis < 0 || axis >= r))
        return dl_fail(ctx, DL_ERR_UNSUPPORTED, "softmax axis out of range");
    emit_open(sb, name);
    dl_sb_put(sb, "    dlrt_softmax(");
    prod_c(sb, x, 0, (int)axis);
    dl_sb_put(sb, ", ");
    if (n->opset >= 13) {
        prod_c(sb, x, (int)axis, r ? (int)axis + 1 : 0);
        dl_sb_put(sb, ", ");
        prod_c(sb, x, r ? (int)axis + 1 : 0, r);
    } else {
        prod_c(sb, x, (int)axis, r);
        dl_sb_put(sb, ", 1");
    }
    dl_sb_printf(sb, ", (const float *)b[%d], (float *)b[%d], %d);\n}\n", x->id, n->out[0]->id,
                 !strcmp(n->op->name, "LogSoftmax"));
    return DL_OK;
}

/* dlrt_groupnorm for an InstanceNormalization or GroupNormalization node. */
static dl_status emit_groupnorm(dl_ctx *ctx, const dl_node *n, const char *name, dl_sbuf *sb) {
    int64_t G;
    bool per_group;
    if (!dl_groupnorm_params_of(n, &G, &per_group))
        return dl_fail(ctx, DL_ERR_UNSUPPORTED, "not a group normalization kernel");
    const dl_value *x = n->in[0];
    char f[48];
    emit_open(sb, name);
    dl_sb_put(sb, "    dlrt_groupnorm(");
    prod_c(sb, x, 0, 1);
    dl_sb_printf(sb, ", %lld, %lld, ", (long long)x->type.dims[1], (long long)G);
    prod_c(sb, x, 2, x->type.rank);
    dl_sb_printf(sb,
                 ", (const float *)b[%d], (const float *)b[%d], (const float *)b[%d], %d, %s, "
                 "(float *)b[%d]);\n}\n",
                 x->id, n->in[1]->id, n->in[2]->id, per_group,
                 fmt_float(dl_attr_float(n, "epsilon", 1e-5f), f, sizeof f), n->out[0]->id);
    return DL_OK;
}

/* dlrt_layernorm for a LayerNormalization node, dlrt_groupnorm for the others. */
static dl_status emit_layernorm(dl_ctx *ctx, const dl_group *gr, const char *name, dl_sbuf *sb) {
    const dl_node *n = gr->nodes[0];
    if (!dl_node_is(n, "LayerNormalization")) return emit_groupnorm(ctx, n, name, sb);
    const dl_value *x = n->in[0];
    int r = x->type.rank;
    int64_t axis = dl_attr_int(n, "axis", -1);
    if (axis < 0) axis += r;
    char f[48];
    emit_open(sb, name);
    dl_sb_put(sb, "    dlrt_layernorm(");
    prod_c(sb, x, 0, (int)axis);
    dl_sb_put(sb, ", ");
    prod_c(sb, x, (int)axis, r);
    dl_sb_printf(sb, ", (const float *)b[%d], (const float *)b[%d], ", x->id, n->in[1]->id);
    if (n->n_in > 2 && n->in[2])
        dl_sb_printf(sb, "(const float *)b[%d]", n->in[2]->id);
    else
        dl_sb_put(sb, "NULL");
    dl_sb_printf(sb, ", %s, (float *)b[%d]",
                 fmt_float(dl_attr_float(n, "epsilon", 1e-5f), f, sizeof f), n->out[0]->id);
    for (int i = 1; i < 3; i++) {
        if (i < n->n_out && n->out[i])
            dl_sb_printf(sb, ", (float *)b[%d]", n->out[i]->id);
        else
            dl_sb_put(sb, ", NULL");
    }
    dl_sb_put(sb, ");\n}\n");
    return DL_OK;
}

static dl_status emit_attention(dl_ctx *ctx, const dl_group *gr, const char *name, dl_sbuf *sb) {
    dl_attn_params ap;
    DL_TRY(dl_attn_params_of(ctx, gr, &ap));
    static const char *const ops[DL_ATTN_OPERANDS] = {"q", "k", "v", "y", "m"};
    static const char *const dims[4] = {"sb", "sh", "st", "sc"};
    const struct {
        const char *name;
        const dl_sexpr *e;
    } sizes[] = {{"batch", &ap.batch}, {"heads", &ap.heads}, {"tq", &ap.tq},
                 {"tk", &ap.tk},       {"d", &ap.d},         {"dv", &ap.dv}};
    char f[48];
    emit_open(sb, name);
    dl_sb_put(sb, "    dlrt_attn a = {");
    for (size_t i = 0; i < DL_ARRAY_LEN(sizes); i++) {
        dl_sb_printf(sb, ".%s = ", sizes[i].name);
        sexpr_c(sb, sizes[i].e);
        dl_sb_put(sb, ", ");
    }
    dl_sb_printf(sb, ".scale = %s, .causal = %d", fmt_float(ap.scale, f, sizeof f), ap.causal);
    for (int o = 0; o < DL_ATTN_OPERANDS; o++) {
        if (o == DL_ATTN_MASK && ap.slot[o] < 0) break;
        dl_sb_put(sb, ",\n        ");
        for (int k = 0; k < 4; k++) {
            dl_sb_printf(sb, "%s.%s_%s = ", k ? ", " : "", ops[o], dims[k]);
            sexpr_c(sb, &ap.stride[o][k]);
        }
    }
    dl_sb_put(sb, "};\n    dlrt_attention(&a");
    for (int o = DL_ATTN_Q; o <= DL_ATTN_V; o++)
        dl_sb_printf(sb, ", (const float *)b[%d]", ap.slot[o]);
    if (ap.slot[DL_ATTN_MASK] >= 0)
        dl_sb_printf(sb, ", (const float *)b[%d]", ap.slot[DL_ATTN_MASK]);
    else
        dl_sb_put(sb, ", NULL");
    dl_sb_printf(sb, ", (float *)b[%d], b[DLK_WS]);\n}\n", ap.slot[DL_ATTN_Y]);
    return DL_OK;
}

static dl_status emit_reduce(dl_ctx *ctx, const dl_group *gr, const dl_target *t, const char *name,
                             dl_sbuf *sb) {
    const dl_node *n = gr->nodes[0];
    dl_reduce_desc d;
    memset(&d, 0, sizeof d);
    if (!dl_reduce_info(n, &d.kind, d.axes) || !dl_value_kbuf(n->in[0], &d.in))
        return dl_fail(ctx, DL_ERR_UNSUPPORTED, "reduction not lowerable");
    d.out = d.in;
    d.out.slot = n->out[0]->id;
    for (int i = 0; i < d.in.rank; i++)
        if (d.axes[i]) {
            d.out.dims[i].c = 1;
            d.out.dims[i].sym = -1;
        }
    return dl_emit_reduce(ctx, &d, t, name, sb);
}

/* Where perm swaps two runs of dims after a common prefix, [0 .. k) then [j .. r) then [k .. j)
 * (a batch of matrices, in [.., Y, X] and out [.., X, Y]): j (and k in *lead), or 0 when it
 * does not. */
static int transpose_swap_at(const int *perm, int r, int *lead) {
    int k = 0;
    while (k < r && perm[k] == k) k++;
    *lead = k;
    if (k >= r - 1) return 0;
    const int j = perm[k];
    for (int i = k; i < r; i++) {
        const int want = i < k + (r - j) ? j + (i - k) : k + (i - k - (r - j));
        if (perm[i] != want) return 0;
    }
    return j;
}

static dl_status emit_transpose(dl_ctx *ctx, const dl_group *gr, const dl_target *t,
                                const char *name, dl_sbuf *sb) {
    const dl_node *n = gr->nodes[0];
    dl_transpose_desc d;
    memset(&d, 0, sizeof d);
    if (!dl_value_kbuf(n->in[0], &d.in) || !dl_value_kbuf(n->out[0], &d.out))
        return dl_fail(ctx, DL_ERR_UNSUPPORTED, "transpose of unknown rank");
    int r = d.in.rank;
    const int64_t *perm;
    int np = dl_attr_ints(n, "perm", &perm);
    for (int i = 0; i < r; i++) {
        int64_t p = np < 0 ? r - 1 - i : (i < np ? perm[i] : -1);
        if (p < 0 || p >= r) return dl_fail(ctx, DL_ERR_UNSUPPORTED, "bad transpose perm");
        d.perm[i] = (int)p;
    }
    /* a batch of matrices of 4-byte elements: the runtime's register transposes
     * (dlrt_transpose32), not the generated loops' element by element copy */
    const dl_value *x = n->in[0];
    int lead;
    const int j = transpose_swap_at(d.perm, r, &lead);
    if (j > 0 && dl_dtype_size(x->type.dtype) == 4) {
        emit_open(sb, name);
        dl_sb_put(sb, "    dlrt_transpose32(");
        prod_c(sb, x, 0, lead);
        dl_sb_put(sb, ", ");
        prod_c(sb, x, lead, j);
        dl_sb_put(sb, ", ");
        prod_c(sb, x, j, r);
        dl_sb_printf(sb, ", b[%d], b[%d]);\n}\n", x->id, n->out[0]->id);
        return DL_OK;
    }
    return dl_emit_transpose(ctx, &d, t, name, sb);
}

/* "{a, b, c}": n sizes as C. */
static void sexprs_c(dl_sbuf *sb, const dl_sexpr *e, int n) {
    dl_sb_put(sb, "{");
    for (int i = 0; i < n; i++) {
        if (i) dl_sb_put(sb, ", ");
        sexpr_c(sb, &e[i]);
    }
    dl_sb_put(sb, "}");
}

/* A Gather: one dlrt_gather call, which reports a bad index in the run's error record. */
static dl_status emit_gather(dl_ctx *ctx, const dl_node *n, const char *name, dl_sbuf *sb) {
    dl_gather_params gp;
    char d[300];
    if (!dl_gather_params_of(n, &gp))
        return dl_fail(ctx, DL_ERR_UNSUPPORTED, "%s: not a gather kernel",
                       dl_node_desc(n, d, sizeof d));
    emit_open(sb, name);
    dl_sb_printf(sb, "    dlrt_gather(b[%d], b[%d], %d, ", gp.x_slot, gp.idx_slot, gp.idx_bytes);
    const dl_sexpr *sizes[] = {&gp.outer, &gp.extent, &gp.count, &gp.row_bytes};
    for (int i = 0; i < 4; i++) {
        sexpr_c(sb, sizes[i]);
        dl_sb_put(sb, ", ");
    }
    dl_sb_printf(sb, "b[%d], %d, (int64_t *)b[DLK_ERR]);\n}\n", gp.y_slot, gp.axis);
    return DL_OK;
}

/* Slice, Split, Concat, Pad: one dlrt_copy_strided call per move (copy-params.c), after a Pad's
 * fill; a Gather: emit_gather. */
static dl_status emit_copy(dl_ctx *ctx, const dl_group *gr, const char *name, dl_sbuf *sb) {
    const dl_node *n = gr->nodes[0];
    if (dl_node_is(n, "Gather")) return emit_gather(ctx, n, name, sb);
    const int moves = dl_copy_moves(n);
    char d[300];
    if (moves < 1)
        return dl_fail(ctx, DL_ERR_UNSUPPORTED, "%s: not a copy kernel",
                       dl_node_desc(n, d, sizeof d));
    emit_open(sb, name);
    for (int k = 0; k < moves; k++) {
        dl_copy_move m;
        if (!dl_copy_move_of(n, k, &m))
            return dl_fail(ctx, DL_ERR_INTERNAL, "%s: no move %d", dl_node_desc(n, d, sizeof d), k);
        if (m.fill) {
            /* the constant's bytes in the compiling machine's order, as the bundle's weights
             * are written (an AOT bundle assumes a target of the same byte order) */
            const unsigned char *v = (const unsigned char *)&m.fill_value;
            dl_sb_put(sb, "    {\n        static const unsigned char v[8] = {");
            for (int i = 0; i < 8; i++) dl_sb_printf(sb, "%s%u", i ? ", " : "", v[i]);
            dl_sb_printf(sb, "};\n        dlrt_fill(b[%d], %lld, %lld, v);\n    }\n", m.dst_slot,
                         (long long)m.fill_count, (long long)m.esize);
        }
        if (m.rank == 0) continue;
        dl_sb_printf(sb, "    {\n        const int64_t es = %lld, d[] = ", (long long)m.esize);
        sexprs_c(sb, m.dims, m.rank);
        dl_sb_put(sb, ", ss[] = ");
        sexprs_c(sb, m.ss, m.rank);
        dl_sb_put(sb, ", ds[] = ");
        sexprs_c(sb, m.ds, m.rank);
        dl_sb_printf(sb, ";\n        dlrt_copy_strided(%d, d, es, (const char *)b[%d] + ", m.rank,
                     m.src_slot);
        sexpr_c(sb, &m.src_off);
        dl_sb_printf(sb, " * es, ss, (char *)b[%d] + ", m.dst_slot);
        sexpr_c(sb, &m.dst_off);
        dl_sb_put(sb, " * es, ds);\n    }\n");
    }
    dl_sb_put(sb, "}\n");
    return DL_OK;
}

_Static_assert(DL_EW_GROUP_INPUTS <= DL_EW_MAX_INPUTS,
               "the fuse pass caps a group's inputs at what the lowering takes");

static dl_status emit_ew(dl_ctx *ctx, const dl_group *gr, const dl_target *t, const char *name,
                         dl_sbuf *sb) {
    if (gr->n_in > DL_EW_GROUP_INPUTS)
        return dl_fail(ctx, DL_ERR_UNSUPPORTED, "too many group inputs");
    dl_kbuf kin[DL_EW_GROUP_INPUTS], kout[DL_EW_GROUP_NODES];
    int out_op[DL_EW_GROUP_NODES];
    dl_ew_op ops[DL_EW_GROUP_NODES];
    if (gr->n_nodes > DL_EW_GROUP_NODES) return dl_fail(ctx, DL_ERR_UNSUPPORTED, "group too large");
    /* the group inputs that some op takes as an operand (not only as Expand's shape): the ones
     * the loops load */
    bool operand[DL_EW_GROUP_INPUTS] = {false};
    for (int k = 0; k < gr->n_nodes; k++)
        for (int i = 0; i < gr->nodes[k]->n_in; i++)
            for (int j = 0; j < gr->n_in; j++)
                operand[j] |= gr->nodes[k]->in[i] == gr->in[j] && dl_ew_operand(gr->nodes[k], i);
    dl_value *ins[DL_EW_GROUP_INPUTS];
    int n_in = 0;
    for (int j = 0; j < gr->n_in; j++)
        if (operand[j]) ins[n_in++] = gr->in[j];
    for (int i = 0; i < n_in; i++)
        if (!dl_value_kbuf(ins[i], &kin[i]))
            return dl_fail(ctx, DL_ERR_UNSUPPORTED, "unranked input");
    if (gr->n_out < 1 || gr->n_out > DL_EW_GROUP_NODES)
        return dl_fail(ctx, DL_ERR_UNSUPPORTED, "%d group results", gr->n_out);
    for (int k = 0; k < gr->n_out; k++) { /* each result, and the op that computes it */
        if (!dl_value_kbuf(gr->out[k], &kout[k]))
            return dl_fail(ctx, DL_ERR_UNSUPPORTED, "unranked output");
        out_op[k] = -1;
        for (int j = 0; j < gr->n_nodes && out_op[k] < 0; j++)
            if (gr->nodes[j]->out[0] == gr->out[k]) out_op[k] = j;
        if (out_op[k] < 0) return dl_fail(ctx, DL_ERR_INTERNAL, "group result %d has no op", k);
    }
    for (int k = 0; k < gr->n_nodes; k++) {
        const dl_node *nd = gr->nodes[k];
        if (nd->n_in > DL_EW_MAX_ARGS) return dl_fail(ctx, DL_ERR_UNSUPPORTED, "too many operands");
        ops[k].node = nd;
        ops[k].n_args = nd->n_in;
        for (int i = 0; i < nd->n_in; i++) {
            const dl_value *v = dl_ew_operand(nd, i) ? nd->in[i] : NULL;
            int arg = DL_EW_ABSENT;
            for (int j = 0; v && j < k && arg == DL_EW_ABSENT; j++)
                if (gr->nodes[j]->out[0] == v) arg = -j - 1;
            for (int j = 0; v && j < n_in && arg == DL_EW_ABSENT; j++)
                if (ins[j] == v) arg = j;
            ops[k].args[i] = arg;
        }
    }
    dl_ew_group eg = {.n_in = n_in,
                      .in = kin,
                      .n_out = gr->n_out,
                      .out = kout,
                      .out_op = out_op,
                      .n_ops = gr->n_nodes,
                      .ops = ops};
    return dl_emit_elementwise(ctx, &eg, t, name, sb);
}

dl_status dl_emit_group(dl_ctx *ctx, const dl_group *gr, const dl_target *t, const char *name,
                        dl_packs *packs, dl_sbuf *sb) {
    switch (gr->kind) {
    case DL_G_EW:
        return emit_ew(ctx, gr, t, name, sb);
    case DL_G_REDUCE:
        return emit_reduce(ctx, gr, t, name, sb);
    case DL_G_TRANSPOSE:
        return emit_transpose(ctx, gr, t, name, sb);
    case DL_G_CONV:
        return emit_conv(ctx, gr, t, name, packs, sb);
    case DL_G_GEMM:
        return emit_gemm(ctx, gr, t, name, packs, sb);
    case DL_G_MATMUL:
        return emit_matmul(ctx, gr, t, name, packs, sb);
    case DL_G_POOL:
        return emit_pool(ctx, gr, name, sb);
    case DL_G_SOFTMAX:
        return emit_softmax(ctx, gr, name, sb);
    case DL_G_COPY:
        return emit_copy(ctx, gr, name, sb);
    case DL_G_LAYERNORM:
        return emit_layernorm(ctx, gr, name, sb);
    case DL_G_ATTENTION:
        return emit_attention(ctx, gr, name, sb);
    case DL_G_CONV_GRAD:
    case DL_G_CONV_TRANSPOSE:
        return emit_conv_grad(ctx, gr, t, name, packs, sb);
    case DL_G_POOL_GRAD:
        return emit_pool_grad(ctx, gr, name, sb);
    case DL_G_RESIZE:
        return emit_resize(ctx, gr, name, sb);
    case DL_G_ARGMAX:
        return emit_argmax(ctx, gr, name, sb);
    case DL_G_RNN:
        return emit_rnn(ctx, gr, name, packs, sb);
    default:
        return dl_fail(ctx, DL_ERR_INTERNAL, "no code for a %s group", dl_gkind_name(gr->kind));
    }
}
