/* emit-params.c — runtime-kernel parameters of heavy groups (see emit-params.h). */
#include "emit-params.h"
#include "../ops/spatial.h"

#include <math.h>

static float const_scalar(const dl_value *v, float def) {
    if (!v || !v->constant || v->constant->numel != 1 || v->constant->dtype != DL_F32) return def;
    return ((const float *)v->constant->data)[0];
}

/* Strides of v (rank <= 2 after right alignment) broadcast over an M x N result: 0 where v has
 * size 1 or lacks the dim. */
static void broadcast_strides(const dl_value *v, int64_t *rs, int64_t *cs) {
    int r = v->type.rank;
    int64_t dn = r >= 1 ? v->type.dims[r - 1] : 1;
    int64_t dm = 1;
    for (int d = 0; d < r - 1; d++) dm *= v->type.dims[d] < 0 ? 2 : v->type.dims[d];
    *cs = dn == 1 ? 0 : 1;
    *rs = dm == 1 ? 0 : dn;
}

static void epi_defaults(dl_epi_params *e) {
    memset(e, 0, sizeof *e);
    e->alpha = 1.0f;
    e->beta = 1.0f;
    e->bias_slot = -1;
    e->res_slot = -1;
}

static void epi_activation(const dl_group *gr, dl_epi_params *e) {
    const dl_node *a = gr->epi.act;
    if (!a) return;
    if (dl_node_is(a, "Relu")) e->act = DLRT_ACT_RELU;
    else if (dl_node_is(a, "Sigmoid")) e->act = DLRT_ACT_SIGMOID;
    else if (dl_node_is(a, "Tanh")) e->act = DLRT_ACT_TANH;
    else if (dl_node_is(a, "LeakyRelu")) {
        e->act = DLRT_ACT_LEAKY_RELU;
        e->act_a = dl_attr_float(a, "alpha", 0.01f);
    } else if (dl_node_is(a, "HardSigmoid")) {
        e->act = DLRT_ACT_HARD_SIGMOID;
        e->act_a = dl_attr_float(a, "alpha", 0.2f);
        e->act_b = dl_attr_float(a, "beta", 0.5f);
    } else if (dl_node_is(a, "HardSwish")) {
        e->act = DLRT_ACT_HARD_SWISH;
    } else if (dl_node_is(a, "Clip")) {
        e->act = DLRT_ACT_CLIP;
        if (a->opset < 11) {
            e->act_a = dl_attr_float(a, "min", -INFINITY);
            e->act_b = dl_attr_float(a, "max", INFINITY);
        } else {
            e->act_a = const_scalar(a->n_in > 1 ? a->in[1] : NULL, -INFINITY);
            e->act_b = const_scalar(a->n_in > 2 ? a->in[2] : NULL, INFINITY);
        }
    }
}

static void epi_residual(const dl_group *gr, dl_epi_params *e, int64_t row) {
    if (!gr->epi.residual) return;
    e->res_slot = gr->epi.residual->id;
    e->res_rs = row;
    e->res_cs = 1;
}

dl_status dl_conv_params_of(dl_ctx *ctx, const dl_group *gr, dl_conv_params *cp) {
    const dl_node *n = gr->nodes[0];
    const dl_value *x = n->in[0], *w = n->in[1], *y = n->out[0];
    memset(cp, 0, sizeof *cp);
    int r = x->type.rank, ns = r - 2;
    dl_window win;
    char err[200];
    const char *e = dl_conv_window(n, ns, x->type.dims + 2, w->type.dims + 2, &win, err, sizeof err);
    if (e) return dl_fail(ctx, DL_ERR_UNSUPPORTED, "conv geometry: %s", e);
    dlrt_conv *p = &cp->p;
    p->nsp = ns;
    cp->n_sym = x->type.dims[0] < 0 ? (int)(-x->type.dims[0] - 1) : -1;
    p->n = x->type.dims[0] < 0 ? 0 : x->type.dims[0];
    p->c_in = x->type.dims[1];
    p->c_out = w->type.dims[0];
    p->group = dl_attr_int(n, "group", 1);
    for (int d = 0; d < 3; d++) {
        bool in = d < ns;
        p->in[d] = in ? x->type.dims[2 + d] : 1;
        p->out[d] = in ? y->type.dims[2 + d] : 1;
        p->k[d] = in ? w->type.dims[2 + d] : 1;
        p->stride[d] = in ? win.stride[d] : 1;
        p->dil[d] = in ? win.dil[d] : 1;
        p->pad_begin[d] = in ? win.pb[d] : 0;
        if (in && win.out[d] != p->out[d])
            return dl_fail(ctx, DL_ERR_UNSUPPORTED, "conv output size disagrees with geometry");
    }
    if (p->group < 1 || p->c_in % p->group || p->c_out % p->group)
        return dl_fail(ctx, DL_ERR_UNSUPPORTED, "conv groups do not divide the channels");
    cp->x_slot = x->id;
    cp->w_slot = w->id;
    cp->y_slot = gr->out[0]->id;
    epi_defaults(&cp->epi);
    const dl_value *bias = n->n_in > 2 && n->in[2] ? n->in[2] : gr->epi.bias;
    if (bias) {
        cp->epi.bias_slot = bias->id;
        cp->epi.bias_rs = 1; /* one value per channel, contiguous (other dims are 1) */
        cp->epi.bias_cs = 0;
    }
    int64_t sp = 1;
    for (int d = 0; d < ns; d++) sp *= p->out[d];
    epi_residual(gr, &cp->epi, sp);
    epi_activation(gr, &cp->epi);
    return DL_OK;
}

dl_status dl_gemm_params_of(dl_ctx *ctx, const dl_group *gr, dl_gemm_params *gp) {
    const dl_node *n = gr->nodes[0];
    const dl_value *a = n->in[0], *b = n->in[1], *y = n->out[0];
    memset(gp, 0, sizeof *gp);
    gp->trans_a = dl_attr_int(n, "transA", 0) != 0;
    gp->trans_b = dl_attr_int(n, "transB", 0) != 0;
    gp->N = y->type.dims[1];
    gp->K = gp->trans_a ? a->type.dims[0] : a->type.dims[1];
    gp->lda = a->type.dims[1];
    gp->ldb = b->type.dims[1];
    if (gp->N < 0 || gp->K < 0 || gp->lda < 0 || gp->ldb < 0 || (gp->trans_a && y->type.dims[0] < 0))
        return dl_fail(ctx, DL_ERR_UNSUPPORTED, "gemm with symbolic inner dims");
    gp->a_slot = a->id;
    gp->b_slot = b->id;
    gp->y_slot = gr->out[0]->id;
    epi_defaults(&gp->epi);
    gp->epi.alpha = dl_attr_float(n, "alpha", 1.0f);
    const dl_value *bias = n->n_in > 2 && n->in[2] ? n->in[2] : gr->epi.bias;
    if (bias) {
        gp->epi.beta = n->n_in > 2 && n->in[2] ? dl_attr_float(n, "beta", 1.0f) : 1.0f;
        gp->epi.bias_slot = bias->id;
        broadcast_strides(bias, &gp->epi.bias_rs, &gp->epi.bias_cs);
    }
    epi_residual(gr, &gp->epi, gp->N);
    epi_activation(gr, &gp->epi);
    return DL_OK;
}

dl_status dl_matmul_params_of(dl_ctx *ctx, const dl_group *gr, dl_matmul_params *mp) {
    const dl_node *n = gr->nodes[0];
    memset(mp, 0, sizeof *mp);
    const dl_value *a = n->in[0], *b = n->in[1], *y = n->out[0];
    int ar = a->type.rank, br = b->type.rank;
    mp->a = a;
    mp->b = b;
    mp->y = y;
    mp->K = a->type.dims[ar - 1];
    mp->N = br == 1 ? 1 : b->type.dims[br - 1];
    int64_t bk = br == 1 ? b->type.dims[0] : b->type.dims[br - 2];
    if (mp->K < 0 || mp->N < 0 || bk != mp->K)
        return dl_fail(ctx, DL_ERR_UNSUPPORTED, "matmul with symbolic inner dims");
    int yr = y->type.rank;
    int mat_dims = (ar > 1) + (br > 1);
    mp->nbatch = yr - mat_dims;
    if (mp->nbatch < 0) return dl_fail(ctx, DL_ERR_UNSUPPORTED, "matmul rank");
    mp->fold_batch = br <= 2;
    if (ar == 1 && mp->nbatch > 0) mp->fold_batch = false;
    mp->a_slot = a->id;
    mp->b_slot = b->id;
    mp->y_slot = gr->out[0]->id;
    epi_defaults(&mp->epi);
    if (gr->epi.bias) {
        mp->epi.bias_slot = gr->epi.bias->id;
        broadcast_strides(gr->epi.bias, &mp->epi.bias_rs, &mp->epi.bias_cs);
        mp->epi.bias_rs = 0; /* a per-column bias (is_bias checked the other dims are 1) */
    }
    epi_residual(gr, &mp->epi, mp->N);
    epi_activation(gr, &mp->epi);
    return DL_OK;
}

dl_status dl_pool_params_of(dl_ctx *ctx, const dl_group *gr, dl_pool_params *pp) {
    const dl_node *n = gr->nodes[0];
    const dl_value *x = n->in[0], *y = n->out[0];
    memset(pp, 0, sizeof *pp);
    int r = x->type.rank, ns = r - 2;
    dl_window win;
    char err[200];
    const char *e = dl_pool_window(n, false, ns, x->type.dims + 2, &win, err, sizeof err);
    if (e) return dl_fail(ctx, DL_ERR_UNSUPPORTED, "pool geometry: %s", e);
    dlrt_pool *p = &pp->p;
    p->nsp = ns;
    p->kind = dl_node_is(n, "MaxPool") ? 0 : dl_node_is(n, "AveragePool") ? 1 : 2;
    p->count_include_pad = (int)dl_attr_int(n, "count_include_pad", 0);
    p->p = (float)dl_attr_int(n, "p", 2);
    pp->n_sym = x->type.dims[0] < 0 ? (int)(-x->type.dims[0] - 1) : -1;
    p->n = x->type.dims[0] < 0 ? 0 : x->type.dims[0];
    p->c = x->type.dims[1];
    for (int d = 0; d < 3; d++) {
        bool in = d < ns;
        p->in[d] = in ? x->type.dims[2 + d] : 1;
        p->out[d] = in ? y->type.dims[2 + d] : 1;
        p->k[d] = in ? win.k[d] : 1;
        p->stride[d] = in ? win.stride[d] : 1;
        p->dil[d] = in ? win.dil[d] : 1;
        p->pad_begin[d] = in ? win.pb[d] : 0;
        p->pad_end[d] = in ? win.pe[d] : 0;
        if (in && win.out[d] != p->out[d])
            return dl_fail(ctx, DL_ERR_UNSUPPORTED, "pool output size disagrees with geometry");
    }
    pp->x_slot = x->id;
    pp->y_slot = y->id;
    return DL_OK;
}

size_t dl_group_workspace(const dl_group *gr, const int64_t *syms) {
    if (gr->kind != DL_G_CONV) return 0;
    dl_conv_params cp;
    if (dl_conv_params_of(NULL, gr, &cp) != DL_OK) return 0;
    if (cp.n_sym >= 0) cp.p.n = syms[cp.n_sym];
    return dlrt_conv_workspace(&cp.p);
}
