/* fold-batchnorm.c — inference-mode BatchNormalization with constant float32 parameters is
 * y = x * s + t per channel (s = scale / sqrt(var + eps), t = B - mean * s). When x comes from
 * a Conv, a Gemm or a MatMul (+ bias Add) with constant weights that nothing else reads, s and t
 * go into the weights and bias of that node (its output channel is the BN channel) and the BN
 * disappears. Any other such BN becomes Mul + Add with [C,1,...,1] constants, which later fuse
 * as elementwise ops. The arithmetic is in double, rounded once to float32. New weights are new
 * constants: the old ones may be shared or borrowed (see rewrite.h) and are left to dce. */
#include "passes-impl.h"
#include "../ir/rewrite.h"

#include <math.h>

typedef struct bn_fold {
    dl_pass_ctx *pc;
    dl_graph *g;
    dl_rewriter rw;
    int64_t C;
    double *s, *t; /* per channel */
} bn_fold;

static bool f32_const(const dl_value *v) {
    return v && v->constant && v->constant->dtype == DL_F32;
}

static bool f32_vec(const dl_value *v, int64_t n) {
    return f32_const(v) && v->constant->rank == 1 && v->constant->dims[0] == n;
}

/* Inference mode, per-channel constant float32 parameters matching x's channel dim. */
static bool foldable_bn(const dl_node *n) {
    if (!dl_node_is(n, "BatchNormalization") || n->n_in < 5 || !n->out[0]) return false;
    if (n->opset >= 14 && dl_attr_int(n, "training_mode", 0) != 0) return false;
    for (int o = 1; o < n->n_out; o++)
        if (n->out[o]) return false; /* extra outputs mean training mode before opset 14 */
    if (n->opset < 9 && dl_attr_int(n, "spatial", 1) == 0) return false;
    const dl_type *x = &n->in[0]->type;
    if (x->dtype != DL_F32 || x->rank < 2 || x->dims[1] < 0) return false;
    for (int i = 1; i <= 4; i++)
        if (!f32_vec(n->in[i], x->dims[1])) return false;
    return true;
}

static dl_status bn_coeffs(bn_fold *b, const dl_node *n) {
    b->C = n->in[0]->type.dims[1];
    dl_free(b->s);
    b->s = dl_malloc(sizeof(double) * (size_t)(2 * b->C + 1));
    if (!b->s) return dl_fail(b->g->ctx, DL_ERR_NOMEM, "out of memory folding BatchNormalization");
    b->t = b->s + b->C;
    double eps = dl_attr_float(n, "epsilon", 1e-5f);
    const float *scale = n->in[1]->constant->data, *bias = n->in[2]->constant->data;
    const float *mean = n->in[3]->constant->data, *var = n->in[4]->constant->data;
    for (int64_t c = 0; c < b->C; c++) {
        b->s[c] = scale[c] / sqrt((double)var[c] + eps);
        b->t[c] = bias[c] - mean[c] * b->s[c];
    }
    return DL_OK;
}

/* A float32 constant of the given shape: v[i] = f(i) computed by the caller into data. */
static dl_status new_const(bn_fold *b, int rank, const int64_t *dims, dl_tensor **t) {
    return dl_tensor_new(b->g->ctx, DL_F32, rank, dims, t);
}

/* Rescales w along one axis: w'[..., c, ...] = w[..., c, ...] * s[c], with `inner` elements per
 * step of that axis and the axis of size C (outer steps repeat it). */
static dl_status scaled_weights(bn_fold *b, const dl_tensor *w, int64_t inner, dl_value **out) {
    dl_tensor *t;
    DL_TRY(new_const(b, w->rank, w->dims, &t));
    const float *src = w->data;
    float *dst = t->data;
    for (int64_t i = 0; i < w->numel; i++) dst[i] = (float)(src[i] * b->s[(i / inner) % b->C]);
    return dl_rw_add_constant(&b->rw, "bn_weight", t, out);
}

/* bias'[c] = old[c] * mul * s[c] + t[c]; old may be NULL (zero) or hold one broadcast value. */
static dl_status folded_bias(bn_fold *b, const dl_tensor *old, double mul, dl_value **out) {
    dl_tensor *t;
    DL_TRY(new_const(b, 1, &b->C, &t));
    float *dst = t->data;
    for (int64_t c = 0; c < b->C; c++) {
        double o = old ? ((const float *)old->data)[old->numel == 1 ? 0 : c] : 0.0;
        dst[c] = (float)(o * mul * b->s[c] + b->t[c]);
    }
    return dl_rw_add_constant(&b->rw, "bn_bias", t, out);
}

/* x is read by the BN alone, so rewriting its producer changes nothing else. */
static dl_node *sole_producer(const bn_fold *b, const dl_value *x, const char *op) {
    dl_node *p = x->producer;
    if (!p || x->is_output || dl_rw_uses(&b->rw, x) != 1 || !dl_node_is(p, op) || p->out[0] != x)
        return NULL;
    return p;
}

static dl_status bypass_bn(bn_fold *b, dl_node *bn, dl_value *y, bool *done) {
    DL_TRY(dl_rw_replace(&b->rw, bn->out[0], y, done));
    if (*done) {
        dl_rw_kill(&b->rw, bn);
        b->pc->changes++;
    }
    return DL_OK;
}

static dl_status into_conv(bn_fold *b, dl_node *bn, bool *done) {
    dl_value *x = bn->in[0];
    dl_node *conv = sole_producer(b, x, "Conv");
    if (!conv || !f32_const(conv->in[1]) || conv->in[1]->constant->rank < 3 ||
        conv->in[1]->constant->dims[0] != b->C)
        return DL_OK;
    const dl_value *bias = conv->n_in > 2 ? conv->in[2] : NULL;
    if (bias && !f32_vec(bias, b->C)) return DL_OK;
    const dl_tensor *w = conv->in[1]->constant;
    dl_value *nw, *nb;
    DL_TRY(scaled_weights(b, w, w->numel / b->C, &nw));
    DL_TRY(folded_bias(b, bias ? bias->constant : NULL, 1.0, &nb));
    DL_TRY(dl_rw_set_input(&b->rw, conv, 1, nw));
    DL_TRY(dl_rw_set_input(&b->rw, conv, 2, nb));
    DL_TRY(dl_node_reinfer(b->g, conv, b->g->syms.len, NULL));
    return bypass_bn(b, bn, x, done);
}

/* A Gemm or Add bias that is one value or one value per output column ([N], [1,N], scalar). */
static bool column_bias(const dl_value *c, int64_t n) {
    if (!f32_const(c)) return false;
    const dl_tensor *t = c->constant;
    if (t->numel == 1) return t->rank <= 2;
    return t->rank >= 1 && t->rank <= 2 && t->dims[t->rank - 1] == n && t->numel == n;
}

static dl_status into_gemm(bn_fold *b, dl_node *bn, bool *done) {
    dl_value *x = bn->in[0];
    dl_node *gemm = sole_producer(b, x, "Gemm");
    if (!gemm || x->type.rank != 2 || !f32_const(gemm->in[1])) return DL_OK;
    const dl_value *c = gemm->n_in > 2 ? gemm->in[2] : NULL;
    if (c && !column_bias(c, b->C)) return DL_OK;
    bool tb = dl_attr_int(gemm, "transB", 0) != 0;
    const dl_tensor *w = gemm->in[1]->constant;
    if (w->rank != 2 || w->dims[tb ? 0 : 1] != b->C) return DL_OK;
    dl_value *nw, *nb;
    DL_TRY(scaled_weights(b, w, tb ? w->dims[1] : 1, &nw));
    DL_TRY(folded_bias(b, c ? c->constant : NULL, dl_attr_float(gemm, "beta", 1.0f), &nb));
    dl_attr beta = {.name = "beta", .type = DL_ATTR_FLOAT, .f = 1.0f};
    DL_TRY(dl_node_set_attr(b->g, gemm, &beta));
    DL_TRY(dl_rw_set_input(&b->rw, gemm, 1, nw));
    DL_TRY(dl_rw_set_input(&b->rw, gemm, 2, nb));
    DL_TRY(dl_node_reinfer(b->g, gemm, b->g->syms.len, NULL));
    return bypass_bn(b, bn, x, done);
}

/* MatMul(A, W) [+ bias] with A and the result 2-D: the BN channel is W's column. */
static dl_status into_matmul(bn_fold *b, dl_node *bn, bool *done) {
    dl_value *x = bn->in[0];
    dl_node *add = sole_producer(b, x, "Add");
    int cslot = -1;
    dl_value *mm_out = x;
    if (add) {
        cslot = column_bias(add->in[1], b->C) ? 1 : column_bias(add->in[0], b->C) ? 0 : -1;
        if (cslot < 0) return DL_OK;
        mm_out = add->in[1 - cslot];
    }
    dl_node *mm = sole_producer(b, mm_out, "MatMul");
    if (!mm || x->type.rank != 2 || mm_out->type.rank != 2 || !f32_const(mm->in[1])) return DL_OK;
    const dl_tensor *w = mm->in[1]->constant;
    if (w->rank != 2 || w->dims[1] != b->C) return DL_OK;
    dl_value *nw, *nb;
    DL_TRY(scaled_weights(b, w, 1, &nw));
    DL_TRY(folded_bias(b, add ? add->in[cslot]->constant : NULL, 1.0, &nb));
    DL_TRY(dl_rw_set_input(&b->rw, mm, 1, nw));
    if (add) {
        DL_TRY(dl_rw_set_input(&b->rw, add, cslot, nb));
        DL_TRY(dl_node_reinfer(b->g, add, b->g->syms.len, NULL));
        return bypass_bn(b, bn, x, done);
    }
    dl_value *in[2] = {mm_out, nb}, *y;
    DL_TRY(dl_rw_add_node(&b->rw, "Add", 2, in, 0, NULL, &y));
    return bypass_bn(b, bn, y, done);
}

/* y = x * s + t with s, t shaped [C, 1, ..., 1] so they broadcast over x's channel dim. */
static dl_status into_mul_add(bn_fold *b, dl_node *bn, bool *done) {
    dl_value *x = bn->in[0];
    int rank = x->type.rank - 1;
    int64_t dims[DL_MAX_RANK];
    dims[0] = b->C;
    for (int i = 1; i < rank; i++) dims[i] = 1;
    dl_tensor *ts, *tt;
    DL_TRY(new_const(b, rank, dims, &ts));
    dl_status s = new_const(b, rank, dims, &tt);
    if (s != DL_OK) {
        dl_tensor_free(ts);
        return s;
    }
    for (int64_t c = 0; c < b->C; c++) {
        ((float *)ts->data)[c] = (float)b->s[c];
        ((float *)tt->data)[c] = (float)b->t[c];
    }
    dl_value *vs, *vt, *m, *y;
    s = dl_rw_add_constant(&b->rw, "bn_scale", ts, &vs);
    if (s != DL_OK) {
        dl_tensor_free(tt);
        return s;
    }
    DL_TRY(dl_rw_add_constant(&b->rw, "bn_shift", tt, &vt));
    dl_value *in1[2] = {x, vs};
    DL_TRY(dl_rw_add_node(&b->rw, "Mul", 2, in1, 0, NULL, &m));
    dl_value *in2[2] = {m, vt};
    DL_TRY(dl_rw_add_node(&b->rw, "Add", 2, in2, 0, NULL, &y));
    return bypass_bn(b, bn, y, done);
}

static dl_status visit(bn_fold *b, dl_node *bn) {
    if (!foldable_bn(bn)) return DL_OK;
    DL_TRY(bn_coeffs(b, bn));
    bool done = false;
    DL_TRY(into_conv(b, bn, &done));
    if (!done) DL_TRY(into_gemm(b, bn, &done));
    if (!done) DL_TRY(into_matmul(b, bn, &done));
    if (!done) DL_TRY(into_mul_add(b, bn, &done));
    return DL_OK;
}

dl_status dl_pass_fold_batchnorm(dl_pass_ctx *pc) {
    bn_fold b = {.pc = pc, .g = pc->g};
    DL_TRY(dl_rw_begin(&b.rw, b.g));
    dl_status s = DL_OK;
    int n = b.g->nodes.len; /* nodes appended here are Mul/Add, never BNs */
    for (int k = 0; k < n && s == DL_OK; k++) {
        dl_node *node = b.g->nodes.items[k];
        if (!node->dead) s = visit(&b, node);
    }
    dl_free(b.s);
    return dl_rw_end(&b.rw, s);
}
