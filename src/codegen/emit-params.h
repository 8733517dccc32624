/* emit-params.h — the runtime-kernel parameters of heavy groups (conv, gemm, matmul, pool,
 * attention, the backward of conv and pool), computed once from the graph. The emitter prints
 * them as C; the planner uses the same structs to size scratch memory, so both always agree. */
#ifndef DL_EMIT_PARAMS_H
#define DL_EMIT_PARAMS_H

#include "codegen-impl.h"
#include "../kernels/rt/dlrt.h"

typedef struct dl_epi_params {
    float alpha, beta;
    int bias_slot; /* -1: none */
    int64_t bias_rs, bias_cs;
    int res_slot; /* -1: none */
    int64_t res_rs, res_cs;
    int act;
    float act_a, act_b;
} dl_epi_params;

typedef struct dl_conv_params {
    dlrt_conv p; /* p.n is 0 when the batch is symbolic */
    int n_sym;   /* >= 0: batch is s[n_sym] */
    int x_slot, w_slot, y_slot;
    dl_epi_params epi;
} dl_conv_params;

/* A size in generated code: c times the product of the runtime symbols s[sym[0..n)]. */
typedef struct dl_sexpr {
    int64_t c;
    int n;
    int sym[DL_MAX_RANK];
} dl_sexpr;

/* Whether a product's operand v is a weight the runtime packs once at load (a float constant;
 * request_pack asks for it, in emit.c): a Gemm or MatMul group's workspace then holds A packed
 * once, else A and B (dlrt_gemm_run packs into it what several tiles would otherwise each
 * pack: a training step's weight gradients, the products of two activations). */
bool dl_gemm_packed_weight(const dl_value *v);

/* The product of dims [from, to) of v (1 when empty; a value has at most DL_MAX_RANK symbols). */
dl_sexpr dl_dims_sexpr(const dl_value *v, int from, int to);

_Static_assert(DL_MAX_RANK <= DLRT_COPY_MAX_RANK, "dlrt_copy_strided takes up to 8 dims");

/* One dlrt_copy_strided call of a COPY group (copy-params.c): dims[0 .. rank) of esize-byte
 * elements from value src_slot at element src_off, strides ss, to value dst_slot at dst_off,
 * strides ds; rank 0: nothing to move (an empty part). With fill (a Pad), dst's fill_count
 * elements are first set to fill_value's first esize bytes (dlrt_fill). */
typedef struct dl_copy_move {
    int src_slot, dst_slot, rank;
    int64_t esize;
    dl_sexpr dims[DL_MAX_RANK], ss[DL_MAX_RANK], ds[DL_MAX_RANK], src_off, dst_off;
    bool fill;
    uint64_t fill_value;
    int64_t fill_count;
} dl_copy_move;

/* Move k of node n, one of dl_copy_moves(n); false when there is none. */
bool dl_copy_move_of(const dl_node *n, int k, dl_copy_move *m);

/* A Gather as one dlrt_gather call (copy-params.c): rows of row_bytes of value x_slot, extent
 * of them for each of outer, picked by count indices of idx_bytes (4 or 8) at idx_slot into
 * y_slot; axis is the Gather's, for the error a bad index reports. */
typedef struct dl_gather_params {
    int x_slot, idx_slot, y_slot, idx_bytes, axis;
    dl_sexpr outer, extent, count, row_bytes;
} dl_gather_params;

/* Whether Gather node n runs as dlrt_gather (any element width of 1 to 8 bytes, int32 or int64
 * indices, dims that are numbers or symbols but consistent with the output's), and how. */
bool dl_gather_params_of(const dl_node *n, dl_gather_params *gp);

typedef struct dl_gemm_params {
    int64_t N, K, ldb; /* N and K negative when symbolic */
    dl_sexpr m, n, k;  /* the product's sizes, as the emitted call and its workspace use them */
    int trans_a, trans_b;
    bool b_weight; /* B is a float constant, packed once at load (dl_gemm_packed_weight) */
    int a_slot, b_slot, y_slot;
    dl_epi_params epi;
} dl_gemm_params;

typedef struct dl_matmul_params {
    const dl_value *a, *b, *y; /* the MatMul's operands as it sees them (after any Transpose) */
    int64_t N, K;
    dl_sexpr m;           /* rows of each product (A's batch dims folded in when fold_batch) */
    int nbatch;           /* batch dims of y (0 when both operands are at most 2-D) */
    bool fold_batch;      /* B is a matrix and A plain: A's batch dims fold into M */
    int trans_a, trans_b; /* the value read holds the operand with its last two axes swapped */
    const dl_value *a_in, *b_in; /* the values read: a and b, or the absorbed Transposes' inputs */
    bool b_weight; /* b_in is one float constant matrix, packed once at load (dl_gemm_packed_weight)
                    */
    int a_slot, b_slot, y_slot;
    dl_epi_params epi;
} dl_matmul_params;

typedef struct dl_pool_params {
    dlrt_pool p;
    int n_sym;
    int x_slot, y_slot;
} dl_pool_params;

/* A CONV_GRAD or CONV_TRANSPOSE group: the forward convolution of its ConvGradInput(dY, W,
 * shape) -> dX, ConvGradWeight(X, dY) -> dW or ConvTranspose(dY, W, bias) -> dX node. */
typedef struct dl_conv_grad_params {
    dlrt_conv p;                /* p.n is 0 when the batch is symbolic */
    int n_sym;                  /* >= 0: batch is s[n_sym] */
    bool weight;                /* ConvGradWeight */
    int a_slot, b_slot, y_slot; /* the node's first two inputs and its output */
    int bias_slot;              /* a ConvTranspose's bias; -1: none */
} dl_conv_grad_params;

/* A POOL_GRAD group: the forward pooling (p.kind 0 max, 1 average) of its MaxPoolGrad(X, dY) or
 * AveragePoolGrad(dY, shape) node, whose output is dX. */
typedef struct dl_pool_grad_params {
    dlrt_pool p;
    int n_sym;
    int x_slot; /* -1 for AveragePoolGrad */
    int dy_slot, dx_slot;
} dl_pool_grad_params;

/* dlrt_attn of an ATTENTION group, each size and stride as an expression of the symbols. */
enum { DL_ATTN_Q, DL_ATTN_K, DL_ATTN_V, DL_ATTN_Y, DL_ATTN_MASK, DL_ATTN_OPERANDS };
typedef struct dl_attn_params {
    dl_sexpr batch, heads, tq, tk, d, dv;
    dl_sexpr stride[DL_ATTN_OPERANDS][4]; /* batch, head, row, column (dlrt_attn's X_sb..X_sc) */
    float scale;
    int causal;
    int slot[DL_ATTN_OPERANDS]; /* value ids; slot[DL_ATTN_MASK] is -1 without a mask */
} dl_attn_params;

/* An InstanceNormalization or GroupNormalization node as dlrt_groupnorm computes it (a
 * LAYERNORM group): float32 data with every dim known but the batch, its groups (G = C for
 * InstanceNormalization) dividing its C > 0 channels, a scale and a bias of G (per group) or C
 * values; false otherwise. */
bool dl_groupnorm_params_of(const dl_node *n, int64_t *G, bool *per_group);

/* An ArgMax or ArgMin node over float32 data of known rank into int64 indices (an ARGMAX group):
 * its axis, counted from 0; false otherwise. Its dims may be numbers or symbols. */
bool dl_argmax_axis(const dl_node *n, int *axis);

/* An RNN group: an LSTM, GRU or RNN node that dlrt_rnn_forward runs (float32, layout 0, the
 * default activations, no clip, peepholes, input_forget or sequence_lens; T and B numbers or
 * symbols, I and H numbers): the kernel's parameters (T or B 0 where t_sym or b_sym names the
 * symbol) and the value ids of its inputs and outputs (-1 where absent). */
typedef struct dl_rnn_params {
    dlrt_rnn p;
    int t_sym, b_sym;
    int x, w, r, bias, h0, c0, y, yh, yc;
} dl_rnn_params;
bool dl_rnn_params_of(const dl_node *n, dl_rnn_params *rp);

/* A RESIZE group (a Resize or Upsample node n): the planes (the dims before the last two, which
 * it must leave alone), the last two axes' sizes, and with taps their taps as dlrt_resize
 * takes them (ih/iw, wh/ww allocated: dl_resize_params_free). Only float32 data whose last two
 * dims are known, roi/scales/sizes constants, coordinate modes but tf_crop_and_resize, output
 * axes up to 2^20 long, tap weights that are finite floats; otherwise DL_ERR_UNSUPPORTED (ctx
 * may be NULL: no message). */
typedef struct dl_resize_params {
    dl_sexpr planes;
    int64_t in_h, in_w, out_h, out_w;
    int nh, nw; /* taps a row / column coordinate (with taps only) */
    int32_t *ih, *iw;
    float *wh, *ww;
    int x_slot, y_slot;
} dl_resize_params;
dl_status dl_resize_params_of(dl_ctx *ctx, const dl_node *n, dl_resize_params *rp, bool taps);
void dl_resize_params_free(dl_resize_params *rp);

dl_status dl_conv_params_of(dl_ctx *ctx, const dl_group *gr, dl_conv_params *cp);
dl_status dl_gemm_params_of(dl_ctx *ctx, const dl_group *gr, dl_gemm_params *gp);
dl_status dl_matmul_params_of(dl_ctx *ctx, const dl_group *gr, dl_matmul_params *mp);
/* Whether a MATMUL group of this MatMul can be emitted (known inner and column sizes). */
bool dl_matmul_shapes_ok(const dl_node *mm);
dl_status dl_pool_params_of(dl_ctx *ctx, const dl_group *gr, dl_pool_params *pp);
dl_status dl_attn_params_of(dl_ctx *ctx, const dl_group *gr, dl_attn_params *ap);
dl_status dl_conv_grad_params_of(dl_ctx *ctx, const dl_group *gr, dl_conv_grad_params *cp);
dl_status dl_pool_grad_params_of(dl_ctx *ctx, const dl_group *gr, dl_pool_grad_params *pp);

/* The value of e with the given symbol values. */
int64_t dl_sexpr_eval(const dl_sexpr *e, const int64_t *syms);
/* dlrt_attn for the given symbol values. */
void dl_attn_params_eval(const dl_attn_params *ap, const int64_t *syms, dlrt_attn *a);

/* Scratch bytes a group needs with the given symbol values (0 for most). */
size_t dl_group_workspace(const dl_group *gr, const int64_t *syms);

#endif
