/* emit-params.c — runtime-kernel parameters of heavy groups (see emit-params.h). */
#include "emit-params.h"
#include "../ops/spatial.h"

#include <math.h>
#include <string.h>

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
    if (gr->epi.chain_act != DLRT_ACT_NONE) { /* a GELU spelled out, ending at a Mul */
        e->act = gr->epi.chain_act;
        e->act_a = gr->epi.chain_a;
        e->act_b = gr->epi.chain_b;
    } else { /* an activation node: its op's row says which (fuse.c took only those) */
        e->act = a->op->epilogue(a, &e->act_a, &e->act_b);
    }
}

static void epi_residual(const dl_group *gr, dl_epi_params *e, int64_t row) {
    if (!gr->epi.residual) return;
    e->res_slot = gr->epi.residual->id;
    e->res_rs = row;
    e->res_cs = 1;
}

/* The dlrt_conv of y = conv(x, w) with node n's attributes (a Conv, or a ConvGradInput /
 * ConvGradWeight carrying its forward's, or a ConvTranspose, whose input is y and output x);
 * *n_sym >= 0 when the batch is that symbol (p->n 0). */
static dl_status conv_of(dl_ctx *ctx, const dl_node *n, const dl_value *x, const dl_value *w,
                         const dl_value *y, dlrt_conv *p, int *n_sym) {
    int r = x->type.rank, ns = r - 2;
    dl_window win;
    char err[200];
    const char *e =
        dl_node_is(n, "ConvTranspose")
            ? dl_convtr_forward_window(n, ns, y->type.dims + 2, w->type.dims + 2, &win, err,
                                       sizeof err)
            : dl_conv_window(n, ns, x->type.dims + 2, w->type.dims + 2, &win, err, sizeof err);
    if (e) return dl_fail(ctx, DL_ERR_UNSUPPORTED, "conv geometry: %s", e);
    p->nsp = ns;
    *n_sym = x->type.dims[0] < 0 ? (int)(-x->type.dims[0] - 1) : -1;
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
        if (in && (win.out[d] != p->out[d] || win.in[d] != p->in[d]))
            return dl_fail(ctx, DL_ERR_UNSUPPORTED, "conv output size disagrees with geometry");
    }
    if (p->group < 1 || p->c_in % p->group || p->c_out % p->group)
        return dl_fail(ctx, DL_ERR_UNSUPPORTED, "conv groups do not divide the channels");
    return DL_OK;
}

dl_status dl_conv_params_of(dl_ctx *ctx, const dl_group *gr, dl_conv_params *cp) {
    const dl_node *n = gr->nodes[0];
    const dl_value *x = n->in[0], *w = n->in[1], *y = n->out[0];
    memset(cp, 0, sizeof *cp);
    DL_TRY(conv_of(ctx, n, x, w, y, &cp->p, &cp->n_sym));
    cp->p.tuned = gr->conv_tuned;
    cp->p.bf16 = gr->conv_bf16;
    const dlrt_conv *p = &cp->p;
    const int ns = p->nsp;
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

static dl_sexpr sexpr_const(int64_t c) {
    dl_sexpr e;
    memset(&e, 0, sizeof e);
    e.c = c;
    return e;
}

dl_sexpr dl_dims_sexpr(const dl_value *v, int from, int to) {
    dl_sexpr e = sexpr_const(1);
    for (int d = from; d < to; d++) {
        int64_t x = v->type.dims[d];
        if (x >= 0)
            e.c *= x;
        else
            e.sym[e.n++] = (int)(-x - 1);
    }
    return e;
}

bool dl_gemm_packed_weight(const dl_value *v) {
    return v->constant && v->constant->dtype == DL_F32;
}

dl_status dl_gemm_params_of(dl_ctx *ctx, const dl_group *gr, dl_gemm_params *gp) {
    const dl_node *n = gr->nodes[0];
    const dl_value *a = n->in[0], *b = n->in[1], *y = n->out[0];
    memset(gp, 0, sizeof *gp);
    gp->trans_a = dl_attr_int(n, "transA", 0) != 0;
    gp->trans_b = dl_attr_int(n, "transB", 0) != 0;
    gp->N = y->type.dims[1];
    gp->K = gp->trans_a ? a->type.dims[0] : a->type.dims[1];
    gp->m = dl_dims_sexpr(y, 0, 1);
    gp->n = dl_dims_sexpr(y, 1, 2);
    gp->k = dl_dims_sexpr(a, gp->trans_a ? 0 : 1, gp->trans_a ? 1 : 2);
    gp->ldb = b->type.dims[1];
    /* a symbolic dim stays negative here: the emitter writes it as its runtime size (the
     * weight gradient of a dense layer sums over the batch: K = N); the residual's row stride
     * is a number, so a fused residual needs a known N */
    if (gr->epi.residual && gp->N < 0)
        return dl_fail(ctx, DL_ERR_UNSUPPORTED, "Gemm residual with a symbolic column count");
    gp->b_weight = dl_gemm_packed_weight(b);
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

/* K (A's last dim) and N (B's last, 1 for a vector), or -1 when unknown or inconsistent. */
static void matmul_kn(const dl_node *mm, int64_t *k, int64_t *n) {
    const dl_value *a = mm->in[0], *b = mm->in[1];
    int ar = a->type.rank, br = b->type.rank;
    int64_t bk = br == 1 ? b->type.dims[0] : b->type.dims[br - 2];
    *k = a->type.dims[ar - 1];
    *n = br == 1 ? 1 : b->type.dims[br - 1];
    if (*k < 0 || bk != *k) *k = -1;
}

bool dl_matmul_shapes_ok(const dl_node *mm) {
    if (mm->n_in != 2 || !mm->in[0] || !mm->in[1] || mm->in[0]->type.rank < 1 ||
        mm->in[1]->type.rank < 1)
        return false;
    int64_t k, n;
    matmul_kn(mm, &k, &n);
    return k >= 0 && n >= 0;
}

dl_status dl_matmul_params_of(dl_ctx *ctx, const dl_group *gr, dl_matmul_params *mp) {
    const dl_gmatmul *g = &gr->mm;
    const dl_node *n = g->mm ? g->mm : gr->nodes[0];
    memset(mp, 0, sizeof *mp);
    const dl_value *a = n->in[0], *b = n->in[1], *y = n->out[0];
    int ar = a->type.rank, br = b->type.rank;
    mp->a = a;
    mp->b = b;
    mp->y = y;
    matmul_kn(n, &mp->K, &mp->N);
    if (mp->K < 0 || mp->N < 0)
        return dl_fail(ctx, DL_ERR_UNSUPPORTED, "matmul with symbolic inner dims");
    int yr = y->type.rank;
    int mat_dims = (ar > 1) + (br > 1);
    mp->nbatch = yr - mat_dims;
    if (mp->nbatch < 0) return dl_fail(ctx, DL_ERR_UNSUPPORTED, "matmul rank");
    /* an absorbed Transpose swapped the last two axes: its input is the operand, transposed */
    mp->trans_a = g->a_tr != NULL;
    mp->trans_b = g->b_tr != NULL;
    if ((g->a_tr && (g->a_tr->out[0] != a || ar < 2)) ||
        (g->b_tr && (g->b_tr->out[0] != b || br < 2)))
        return dl_fail(ctx, DL_ERR_INTERNAL, "matmul group with a stray transpose");
    /* transposed matrices of a batch do not stack into one taller matrix */
    mp->fold_batch = br <= 2 && !(mp->trans_a && ar > 2);
    if (ar == 1 && mp->nbatch > 0) mp->fold_batch = false;
    /* M: rows of A's matrix (1 for a vector); with a 2-D B, A's batch dims fold into it */
    mp->m = ar == 1 ? sexpr_const(1) : dl_dims_sexpr(a, mp->fold_batch ? 0 : ar - 2, ar - 1);
    mp->a_in = g->a_tr ? g->a_tr->in[0] : a;
    mp->b_in = g->b_tr ? g->b_tr->in[0] : b;
    mp->a_slot = mp->a_in->id;
    mp->b_weight = br <= 2 && dl_gemm_packed_weight(mp->b_in);
    mp->b_slot = mp->b_in->id;
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

/* The window of y = pool(x) with node n's attributes (a pooling, or a MaxPoolGrad /
 * AveragePoolGrad carrying its forward's): every field of p but kind, count_include_pad and p. */
static dl_status pool_of(dl_ctx *ctx, const dl_node *n, bool global, const dl_value *x,
                         const dl_value *y, dlrt_pool *p, int *n_sym) {
    int r = x->type.rank, ns = r - 2;
    dl_window win;
    char err[200];
    const char *e = dl_pool_window(n, global, ns, x->type.dims + 2, &win, err, sizeof err);
    if (e) return dl_fail(ctx, DL_ERR_UNSUPPORTED, "pool geometry: %s", e);
    p->nsp = ns;
    *n_sym = x->type.dims[0] < 0 ? (int)(-x->type.dims[0] - 1) : -1;
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
    return DL_OK;
}

dl_status dl_pool_params_of(dl_ctx *ctx, const dl_group *gr, dl_pool_params *pp) {
    const dl_node *n = gr->nodes[0];
    const dl_value *x = n->in[0], *y = n->out[0];
    memset(pp, 0, sizeof *pp);
    dlrt_pool *p = &pp->p;
    DL_TRY(pool_of(ctx, n, false, x, y, p, &pp->n_sym));
    p->kind = dl_node_is(n, "MaxPool") ? 0 : dl_node_is(n, "AveragePool") ? 1 : 2;
    p->count_include_pad = (int)dl_attr_int(n, "count_include_pad", 0);
    p->p = (float)dl_attr_int(n, "p", 2);
    pp->x_slot = x->id;
    pp->y_slot = y->id;
    return DL_OK;
}

/* ---- ArgMax, ArgMin ---- */

bool dl_argmax_axis(const dl_node *n, int *axis) {
    if (!dl_node_is(n, "ArgMax") && !dl_node_is(n, "ArgMin")) return false;
    const dl_value *x = n->n_in > 0 ? n->in[0] : NULL, *y = n->n_out > 0 ? n->out[0] : NULL;
    if (!x || !y || x->type.dtype != DL_F32 || y->type.dtype != DL_I64 || x->type.rank < 1 ||
        y->type.rank < 0)
        return false;
    const int r = x->type.rank;
    int64_t a = dl_attr_int(n, "axis", 0);
    if (a < -r || a >= r) return false;
    *axis = (int)(a < 0 ? a + r : a);
    return true;
}

/* ---- LSTM, GRU, RNN ---- */

/* The id of n's input or output k, -1 when absent. */
static int rnn_slot(dl_value *const *v, int count, int k) {
    return k < count && v[k] ? v[k]->id : -1;
}

/* Whether n's input k, if present, is float32 of rank r with every dim a number. */
static bool rnn_input_ok(const dl_node *n, int k, int r) {
    if (k >= n->n_in || !n->in[k]) return true;
    const dl_type *t = &n->in[k]->type;
    if (t->dtype != DL_F32 || t->rank != r) return false;
    for (int d = 0; d < r; d++)
        if (t->dims[d] < 0) return false;
    return true;
}

bool dl_rnn_params_of(const dl_node *n, dl_rnn_params *rp) {
    memset(rp, 0, sizeof *rp);
    const int kind = dl_node_is(n, "LSTM")  ? DLRT_RNN_LSTM
                     : dl_node_is(n, "GRU") ? DLRT_RNN_GRU
                     : dl_node_is(n, "RNN") ? DLRT_RNN_SIMPLE
                                            : -1;
    if (kind < 0 || n->n_in < 3 || !n->in[0] || !n->in[1] || !n->in[2]) return false;
    bool default_acts;
    const int dirs = dl_rnn_directions(n, &default_acts);
    /* what the kernel leaves to the reference: other layouts and activations, clip, peepholes,
     * input_forget, per-row sequence lengths */
    if (!dirs || !default_acts || dl_attr_int(n, "layout", 0) != 0 || dl_node_attr(n, "clip") ||
        dl_node_attr(n, "activation_alpha") || dl_node_attr(n, "activation_beta") ||
        dl_attr_int(n, "input_forget", 0) != 0 || (n->n_in > 4 && n->in[4]) ||
        (n->n_in > 7 && n->in[7]))
        return false;
    const int lbr = (int)dl_attr_int(n, "linear_before_reset", 0);
    if (kind == DLRT_RNN_GRU && lbr != 0 && lbr != 1) return false;
    const dl_type *x = &n->in[0]->type, *w = &n->in[1]->type, *r = &n->in[2]->type;
    if (x->dtype != DL_F32 || x->rank != 3 || x->dims[2] < 0 || !rnn_input_ok(n, 1, 3) ||
        !rnn_input_ok(n, 2, 3) || !rnn_input_ok(n, 3, 2))
        return false;
    const int64_t G = dlrt_rnn_gates(kind), I = x->dims[2], H = r->dims[2];
    if (H < 1 || w->dims[0] != dirs || w->dims[1] != G * H || w->dims[2] != I ||
        r->dims[0] != dirs || r->dims[1] != G * H)
        return false;
    if (n->n_in > 3 && n->in[3] &&
        (n->in[3]->type.dims[0] != dirs || n->in[3]->type.dims[1] != 2 * G * H))
        return false;
    for (int k = 5; k <= 6; k++) /* initial_h, initial_c: [dirs, B, H], B as X's */
        if (k < n->n_in && n->in[k]) {
            const dl_type *t = &n->in[k]->type;
            if (t->dtype != DL_F32 || t->rank != 3 || t->dims[0] != dirs ||
                t->dims[1] != x->dims[1] || t->dims[2] != H)
                return false;
        }
    if (kind != DLRT_RNN_LSTM && n->n_in > 6 && n->in[6]) return false;
    rp->p = (dlrt_rnn){.kind = kind,
                       .dirs = dirs,
                       .reverse = !strcmp(dl_attr_str(n, "direction", "forward"), "reverse"),
                       .linear_before_reset = kind == DLRT_RNN_GRU && lbr,
                       .T = x->dims[0] < 0 ? 0 : x->dims[0],
                       .B = x->dims[1] < 0 ? 0 : x->dims[1],
                       .I = I,
                       .H = H};
    rp->t_sym = x->dims[0] < 0 ? (int)(-x->dims[0] - 1) : -1;
    rp->b_sym = x->dims[1] < 0 ? (int)(-x->dims[1] - 1) : -1;
    rp->x = n->in[0]->id, rp->w = n->in[1]->id, rp->r = n->in[2]->id;
    rp->bias = rnn_slot(n->in, n->n_in, 3);
    rp->h0 = rnn_slot(n->in, n->n_in, 5);
    rp->c0 = rnn_slot(n->in, n->n_in, 6);
    rp->y = rnn_slot(n->out, n->n_out, 0);
    rp->yh = rnn_slot(n->out, n->n_out, 1);
    rp->yc = kind == DLRT_RNN_LSTM ? rnn_slot(n->out, n->n_out, 2) : -1;
    return true;
}

/* ---- group normalization ---- */

bool dl_groupnorm_params_of(const dl_node *n, int64_t *G, bool *per_group) {
    const bool inst = dl_node_is(n, "InstanceNormalization");
    if (!inst && !dl_node_is(n, "GroupNormalization")) return false;
    const dl_value *x = n->in[0], *y = n->out[0];
    if (n->n_in < 3 || !x || !y || !n->in[1] || !n->in[2] || x->type.dtype != DL_F32 ||
        y->type.dtype != DL_F32 || x->type.rank < 2 || y->type.rank != x->type.rank)
        return false;
    for (int i = 1; i < n->n_out; i++)
        if (n->out[i]) return false;
    for (int d = 1; d < x->type.rank; d++)
        if (x->type.dims[d] < 0) return false;
    const int64_t C = x->type.dims[1];
    *G = inst ? C : dl_attr_int(n, "num_groups", -1);
    if (C <= 0 || *G < 1 || C % *G) return false;
    int64_t len[2];
    for (int i = 0; i < 2; i++) {
        const dl_value *v = n->in[1 + i];
        if (v->type.dtype != DL_F32 || v->type.rank != 1) return false;
        len[i] = v->type.dims[0];
    }
    *per_group = len[0] == *G && len[1] == *G;
    return *per_group || (len[0] == C && len[1] == C);
}

/* ---- resize ---- */

/* the longest output axis the kernel takes (its tables: up to 4 taps a coordinate) */
enum { DL_RESIZE_MAX_OUT = 1 << 20 };

/* Axis `axis`'s taps into int32 indices and float weights of *ix / *w (allocated); refused
 * when a weight is not a finite float (a cubic_coeff_a of NaN, or one so large the weights
 * overflow). */
static const char *resize_taps(const dl_node *n, int r, const int64_t *in, int axis, int *nt,
                               int32_t **ix, float **w) {
    int64_t out[DL_MAX_RANK];
    double scale[DL_MAX_RANK];
    *ix = NULL, *w = NULL;
    const char *e = dl_resize_static(n, r, in, out, scale, 0, 0, NULL, NULL, NULL);
    if (e) return e;
    const int64_t cap = out[axis] * 4; /* the most taps any mode gives */
    int64_t *ix64 = dl_malloc((size_t)cap * sizeof *ix64 + 1);
    double *w64 = dl_malloc((size_t)cap * sizeof *w64 + 1);
    e = !ix64 || !w64 ? "out of memory"
                      : dl_resize_static(n, r, in, out, scale, axis, cap, nt, ix64, w64);
    const int64_t cnt = e ? 0 : out[axis] * *nt;
    *ix = e ? NULL : dl_malloc((size_t)cnt * sizeof **ix + 1);
    *w = e ? NULL : dl_malloc((size_t)cnt * sizeof **w + 1);
    if (!e && (!*ix || !*w)) e = "out of memory";
    for (int64_t i = 0; !e && i < cnt; i++) {
        (*ix)[i] = (int32_t)ix64[i], (*w)[i] = (float)w64[i];
        if (!isfinite((*w)[i])) e = "a tap's weight is not a finite float";
    }
    dl_free(ix64);
    dl_free(w64);
    if (e) dl_free(*ix), dl_free(*w), *ix = NULL, *w = NULL;
    return e;
}

/* Whether every output coordinate o of axis d takes input o alone (the other taps weigh 0). */
static bool resize_identity(const dl_node *n, int r, const dl_value *x, int d) {
    int nt = 0;
    int32_t *ix = NULL;
    float *w = NULL;
    bool same = !resize_taps(n, r, x->type.dims, d, &nt, &ix, &w);
    for (int64_t o = 0; same && o < x->type.dims[d]; o++) {
        float own = 0; /* taps clamped to the edge may name o twice */
        for (int k = 0; k < nt; k++)
            if (ix[o * nt + k] == o)
                own += w[o * nt + k];
            else
                same = same && w[o * nt + k] == 0.0f;
        same = same && own == 1.0f;
    }
    dl_free(ix);
    dl_free(w);
    return same;
}

void dl_resize_params_free(dl_resize_params *rp) {
    dl_free(rp->ih), dl_free(rp->iw), dl_free(rp->wh), dl_free(rp->ww);
    rp->ih = rp->iw = NULL, rp->wh = rp->ww = NULL;
}

dl_status dl_resize_params_of(dl_ctx *ctx, const dl_node *n, dl_resize_params *rp, bool taps) {
    memset(rp, 0, sizeof *rp);
    const dl_value *x = n->n_in > 0 ? n->in[0] : NULL, *y = n->n_out > 0 ? n->out[0] : NULL;
    for (int i = 1; i < n->n_out; i++)
        if (n->out[i]) y = NULL;
    if (!x || !y || x->type.dtype != DL_F32 || y->type.dtype != DL_F32 || x->type.rank < 2 ||
        y->type.rank != x->type.rank)
        return ctx ? dl_fail(ctx, DL_ERR_UNSUPPORTED, "resize: not float32 of rank 2 or more")
                   : DL_ERR_UNSUPPORTED;
    const int r = x->type.rank;
    int64_t out[DL_MAX_RANK];
    double scale[DL_MAX_RANK];
    const char *e = dl_resize_static(n, r, x->type.dims, out, scale, 0, 0, NULL, NULL, NULL);
    /* the leading dims are planes: unchanged, whether numbers or symbols. Scaled by 1, an
     * axis keeps its size, and its taps are the identity in every coordinate mode but
     * tf_half_pixel_for_nn (which reads half a pixel on: o + 0.5, rounded); a known axis has
     * its taps checked, a symbolic one can only be assumed so in the other modes */
    const bool half_on =
        !strcmp(dl_attr_str(n, "coordinate_transformation_mode", ""), "tf_half_pixel_for_nn");
    for (int d = 0; !e && d < r - 2; d++)
        if (scale[d] != 1.0 || y->type.dims[d] != x->type.dims[d] ||
            (x->type.dims[d] >= 0 ? out[d] != x->type.dims[d] || !resize_identity(n, r, x, d)
                                  : half_on))
            e = "a leading axis is resized";
    /* float sums of a cubic's taps: weights of about 20 a at most, kept far from overflow */
    if (!e && !strcmp(dl_attr_str(n, "mode", "nearest"), "cubic") &&
        !(fabs(dl_attr_float(n, "cubic_coeff_a", -0.75f)) <= 1e6))
        e = "cubic_coeff_a is not a number of reasonable size";
    for (int d = r - 2; !e && d < r; d++)
        if (x->type.dims[d] <= 0 || out[d] != y->type.dims[d] || out[d] <= 0)
            e = "the last two axes' sizes are not known (or 0)";
        else if (x->type.dims[d] > INT32_MAX || out[d] > DL_RESIZE_MAX_OUT)
            e = "an axis is too long for the kernel's int32 tap tables";
    if (e) return ctx ? dl_fail(ctx, DL_ERR_UNSUPPORTED, "resize: %s", e) : DL_ERR_UNSUPPORTED;
    rp->planes = dl_dims_sexpr(x, 0, r - 2);
    rp->in_h = x->type.dims[r - 2], rp->in_w = x->type.dims[r - 1];
    rp->out_h = out[r - 2], rp->out_w = out[r - 1];
    rp->x_slot = x->id, rp->y_slot = y->id;
    if (!taps) return DL_OK;
    if ((e = resize_taps(n, r, x->type.dims, r - 2, &rp->nh, &rp->ih, &rp->wh)) ||
        (e = resize_taps(n, r, x->type.dims, r - 1, &rp->nw, &rp->iw, &rp->ww))) {
        dl_resize_params_free(rp);
        return ctx ? dl_fail(ctx, DL_ERR_UNSUPPORTED, "resize: %s", e) : DL_ERR_UNSUPPORTED;
    }
    /* the column taps tap-major, as dlrt_resize2d reads them */
    const int64_t cnt = rp->out_w * rp->nw;
    int32_t *iw = dl_malloc((size_t)cnt * sizeof *iw + 1);
    float *ww = dl_malloc((size_t)cnt * sizeof *ww + 1);
    if (!iw || !ww) {
        dl_free(iw), dl_free(ww), dl_resize_params_free(rp);
        return ctx ? dl_fail(ctx, DL_ERR_NOMEM, "resize: out of memory") : DL_ERR_NOMEM;
    }
    for (int64_t c = 0; c < rp->out_w; c++)
        for (int k = 0; k < rp->nw; k++)
            iw[k * rp->out_w + c] = rp->iw[c * rp->nw + k],
                               ww[k * rp->out_w + c] = rp->ww[c * rp->nw + k];
    dl_free(rp->iw), dl_free(rp->ww);
    rp->iw = iw, rp->ww = ww;
    return DL_OK;
}

/* ---- backward of convolution and pooling ---- */

dl_status dl_conv_grad_params_of(dl_ctx *ctx, const dl_group *gr, dl_conv_grad_params *cp) {
    const dl_node *n = gr->nodes[0];
    memset(cp, 0, sizeof *cp);
    cp->weight = !strcmp(n->op->name, "ConvGradWeight");
    cp->bias_slot = dl_node_is(n, "ConvTranspose") && n->n_in > 2 && n->in[2] ? n->in[2]->id : -1;
    /* the forward's X, W and Y: ConvGradWeight(X, dY) -> dW, ConvGradInput(dY, W, shape) -> dX,
     * ConvTranspose(dY, W, bias) -> dX */
    const dl_value *x = cp->weight ? n->in[0] : n->out[0];
    const dl_value *w = cp->weight ? n->out[0] : n->in[1];
    const dl_value *dy = cp->weight ? n->in[1] : n->in[0];
    /* the batch is X's (or dX's) symbol: dY's may be another one, equal at run time (the
     * node's inference checks it on the concrete shapes) */
    DL_TRY(conv_of(ctx, n, x, w, dy, &cp->p, &cp->n_sym));
    if (dy->type.dims[1] != cp->p.c_out || w->type.dims[1] * cp->p.group != cp->p.c_in)
        return dl_fail(ctx, DL_ERR_UNSUPPORTED, "conv gradient shapes disagree");
    cp->p.bf16 = gr->conv_bf16;
    cp->a_slot = n->in[0]->id;
    cp->b_slot = n->in[1]->id;
    cp->y_slot = n->out[0]->id;
    return DL_OK;
}

dl_status dl_pool_grad_params_of(dl_ctx *ctx, const dl_group *gr, dl_pool_grad_params *pp) {
    const dl_node *n = gr->nodes[0];
    memset(pp, 0, sizeof *pp);
    bool max = !strcmp(n->op->name, "MaxPoolGrad");
    /* MaxPoolGrad(X, dY) -> dX, AveragePoolGrad(dY, shape) -> dX */
    const dl_value *dy = n->in[max ? 1 : 0], *dx = n->out[0];
    dlrt_pool *p = &pp->p;
    /* the batch is dX's symbol, equal to dY's at run time (as for convolutions) */
    DL_TRY(pool_of(ctx, n, dl_attr_int(n, "global", 0) != 0, dx, dy, p, &pp->n_sym));
    if (dx->type.dims[1] != dy->type.dims[1])
        return dl_fail(ctx, DL_ERR_UNSUPPORTED, "pool gradient shapes disagree");
    p->kind = max ? 0 : 1;
    p->count_include_pad = (int)dl_attr_int(n, "count_include_pad", 0);
    pp->x_slot = max ? n->in[0]->id : -1;
    pp->dy_slot = dy->id;
    pp->dx_slot = dx->id;
    return DL_OK;
}

/* ---- attention ---- */

/* Row-major stride of dim i of v: the product of the dims after it. */
static dl_sexpr dense_stride(const dl_value *v, int i) {
    return dl_dims_sexpr(v, i + 1, v->type.rank);
}

/* Source dim of dim i of a Transpose's output (perm absent: reversed). */
static int perm_at(const dl_node *tr, int i, int r) {
    const int64_t *perm;
    int np = dl_attr_ints(tr, "perm", &perm);
    return np < 0 ? r - 1 - i : (int)perm[i];
}

/* Strides of an operand seen with `logical`'s type, read from `raw` through the absorbed
 * Transpose tr (NULL: none); batch dims of size 1 (broadcast) get stride 0. */
static void operand_strides(const dl_value *raw, const dl_node *tr, const dl_value *logical, int r,
                            dl_sexpr *st) {
    for (int i = 0; i < r; i++) {
        st[i] = dense_stride(raw, tr ? perm_at(tr, i, r) : i);
        if (i < r - 2 && logical->type.dims[i] == 1) st[i] = sexpr_const(0);
    }
}

/* dlrt_attn's (batch, head, row, column) strides from the strides of a rank-r operand: rank 3
 * has no head dim, rank 2 neither batch nor head. */
static void kernel_strides(const dl_sexpr *st, int r, dl_sexpr out[4]) {
    for (int k = 0; k < 4; k++) out[k] = sexpr_const(0);
    for (int i = 0; i < r; i++) out[i < r - 2 ? i : 4 - r + i] = st[i];
}

static dl_sexpr dim_expr(const dl_value *v, int d) {
    return dl_dims_sexpr(v, d, d + 1);
}

dl_status dl_attn_params_of(dl_ctx *ctx, const dl_group *gr, dl_attn_params *ap) {
    const dl_gattn *at = &gr->attn;
    memset(ap, 0, sizeof *ap);
    if (gr->kind != DL_G_ATTENTION || !at->qk || !at->pv || !at->q || !at->k || !at->v)
        return dl_fail(ctx, DL_ERR_INTERNAL, "attention group without its pattern");
    const dl_value *sc = at->qk->out[0], *y = at->pv->out[0];
    const dl_value *out = at->y_tr ? at->y_tr->out[0] : y;
    int r = sc->type.rank;
    if (r < 2 || r > 4 || gr->n_out != 1 || gr->out[0] != out)
        return dl_fail(ctx, DL_ERR_INTERNAL, "attention group of an unexpected shape");
    ap->batch = r > 2 ? dim_expr(sc, 0) : sexpr_const(1);
    ap->heads = r > 3 ? dim_expr(sc, 1) : sexpr_const(1);
    ap->tq = dim_expr(sc, r - 2);
    ap->tk = dim_expr(sc, r - 1);
    ap->d = dim_expr(at->qk->in[0], r - 1);
    ap->dv = dim_expr(at->pv->in[1], r - 1);
    ap->scale = at->scale;
    ap->causal = at->causal;
    dl_sexpr st[DL_MAX_RANK], kt[DL_MAX_RANK];
    operand_strides(at->q, at->q_tr, at->qk->in[0], r, st);
    kernel_strides(st, r, ap->stride[DL_ATTN_Q]);
    /* k^T arrives as [.., d, tk]: the kernel's k rows are its columns */
    operand_strides(at->k, at->k_tr, at->qk->in[1], r, kt);
    dl_sexpr swap = kt[r - 2];
    kt[r - 2] = kt[r - 1];
    kt[r - 1] = swap;
    kernel_strides(kt, r, ap->stride[DL_ATTN_K]);
    operand_strides(at->v, at->v_tr, at->pv->in[1], r, st);
    kernel_strides(st, r, ap->stride[DL_ATTN_V]);
    /* the result is written through the absorbed Transpose: y dim perm[j] is out's dim j */
    for (int j = 0; j < r; j++) st[at->y_tr ? perm_at(at->y_tr, j, r) : j] = dense_stride(out, j);
    kernel_strides(st, r, ap->stride[DL_ATTN_Y]);
    ap->slot[DL_ATTN_Q] = at->q->id;
    ap->slot[DL_ATTN_K] = at->k->id;
    ap->slot[DL_ATTN_V] = at->v->id;
    ap->slot[DL_ATTN_Y] = out->id;
    ap->slot[DL_ATTN_MASK] = -1;
    if (at->mask) {
        const dl_value *m = at->mask;
        int off = r - m->type.rank;
        for (int i = 0; i < r; i++) {
            int mi = i - off;
            st[i] = mi < 0 || m->type.dims[mi] == 1 ? sexpr_const(0) : dense_stride(m, mi);
        }
        kernel_strides(st, r, ap->stride[DL_ATTN_MASK]);
        ap->slot[DL_ATTN_MASK] = m->id;
    }
    return DL_OK;
}

int64_t dl_sexpr_eval(const dl_sexpr *e, const int64_t *syms) {
    int64_t v = e->c;
    for (int i = 0; i < e->n; i++) v *= syms[e->sym[i]];
    return v;
}

void dl_attn_params_eval(const dl_attn_params *ap, const int64_t *syms, dlrt_attn *a) {
    memset(a, 0, sizeof *a);
    a->batch = dl_sexpr_eval(&ap->batch, syms);
    a->heads = dl_sexpr_eval(&ap->heads, syms);
    a->tq = dl_sexpr_eval(&ap->tq, syms);
    a->tk = dl_sexpr_eval(&ap->tk, syms);
    a->d = dl_sexpr_eval(&ap->d, syms);
    a->dv = dl_sexpr_eval(&ap->dv, syms);
    a->scale = ap->scale;
    a->causal = ap->causal;
    int64_t v[DL_ATTN_OPERANDS][4];
    for (int o = 0; o < DL_ATTN_OPERANDS; o++)
        for (int k = 0; k < 4; k++) v[o][k] = dl_sexpr_eval(&ap->stride[o][k], syms);
    a->q_sb = v[DL_ATTN_Q][0], a->q_sh = v[DL_ATTN_Q][1], a->q_st = v[DL_ATTN_Q][2],
    a->q_sc = v[DL_ATTN_Q][3];
    a->k_sb = v[DL_ATTN_K][0], a->k_sh = v[DL_ATTN_K][1], a->k_st = v[DL_ATTN_K][2],
    a->k_sc = v[DL_ATTN_K][3];
    a->v_sb = v[DL_ATTN_V][0], a->v_sh = v[DL_ATTN_V][1], a->v_st = v[DL_ATTN_V][2],
    a->v_sc = v[DL_ATTN_V][3];
    a->y_sb = v[DL_ATTN_Y][0], a->y_sh = v[DL_ATTN_Y][1], a->y_st = v[DL_ATTN_Y][2],
    a->y_sc = v[DL_ATTN_Y][3];
    a->m_sb = v[DL_ATTN_MASK][0], a->m_sh = v[DL_ATTN_MASK][1], a->m_st = v[DL_ATTN_MASK][2];
    a->m_sc = v[DL_ATTN_MASK][3];
}

/* The workspace of a Gemm or MatMul group's dlrt_sgemm_ws calls (emit_sgemm_call): its left
 * operand packed once, and its right one unless a weight (dl_gemm_packed_weight), for the M x N x K
 * of each call (a MatMul's batch runs them in turn), from the same size expressions the
 * emitted call is written with. */
static size_t gemm_group_workspace(const dl_group *gr, const int64_t *syms) {
    if (gr->kind == DL_G_GEMM) {
        dl_gemm_params gp;
        if (dl_gemm_params_of(NULL, gr, &gp) != DL_OK) return 0;
        return dlrt_gemm_workspace(dl_sexpr_eval(&gp.m, syms), dl_sexpr_eval(&gp.n, syms),
                                   dl_sexpr_eval(&gp.k, syms), 0, gp.b_weight);
    }
    dl_matmul_params mp;
    if (dl_matmul_params_of(NULL, gr, &mp) != DL_OK) return 0;
    return dlrt_gemm_workspace(dl_sexpr_eval(&mp.m, syms), mp.N, mp.K, 0, mp.b_weight);
}

size_t dl_group_workspace(const dl_group *gr, const int64_t *syms) {
    if (gr->kind == DL_G_GEMM || gr->kind == DL_G_MATMUL) return gemm_group_workspace(gr, syms);
    if (gr->kind == DL_G_ATTENTION) {
        dl_attn_params ap;
        dlrt_attn a;
        if (dl_attn_params_of(NULL, gr, &ap) != DL_OK) return 0;
        dl_attn_params_eval(&ap, syms, &a);
        /* the thread count of the generated code is set at run time: size for the most the
         * kernel uses */
        return dlrt_attention_workspace(&a, 0);
    }
    if (gr->kind == DL_G_RNN) {
        dl_rnn_params rp;
        if (!dl_rnn_params_of(gr->nodes[0], &rp)) return 0;
        if (rp.t_sym >= 0) rp.p.T = syms[rp.t_sym];
        if (rp.b_sym >= 0) rp.p.B = syms[rp.b_sym];
        return dlrt_rnn_workspace(&rp.p);
    }
    if (gr->kind == DL_G_RESIZE) {
        dl_resize_params rp;
        if (dl_resize_params_of(NULL, gr->nodes[0], &rp, false) != DL_OK) return 0;
        const dlrt_resize r = {.in_w = rp.in_w};
        return dlrt_resize_workspace(&r);
    }
    if (gr->kind == DL_G_CONV_GRAD || gr->kind == DL_G_CONV_TRANSPOSE) {
        dl_conv_grad_params cg;
        if (dl_conv_grad_params_of(NULL, gr, &cg) != DL_OK) return 0;
        if (cg.n_sym >= 0) cg.p.n = syms[cg.n_sym];
        return dlrt_conv_grad_workspace(&cg.p);
    }
    if (gr->kind != DL_G_CONV) return 0;
    dl_conv_params cp;
    if (dl_conv_params_of(NULL, gr, &cp) != DL_OK) return 0;
    if (cp.n_sym >= 0) cp.p.n = syms[cp.n_sym];
    return dlrt_conv_workspace(&cp.p);
}
