/* fuse.h — fusion groups: the unit of code generation. The fuse pass partitions the nodes of
 * an optimized graph into groups; each group becomes one kernel (one generated function, a
 * runtime-kernel call with a fused epilogue, a view, or a reference-kernel fallback). Every
 * group materializes exactly the values listed in `out`, all produced by its last node (an
 * elementwise group's by any of its nodes, stored by its one loop), and the groups run in the
 * order of their last nodes: nothing outside a group reads its results before that. */
#ifndef DL_FUSE_H
#define DL_FUSE_H

#include "passes-impl.h"

/* The most values an elementwise group reads, and the most ops it holds (its kernel's tables:
 * emit.c, lower-ew.c). */
#define DL_EW_GROUP_INPUTS 64
#define DL_EW_GROUP_NODES  64

typedef enum dl_gkind {
    DL_G_EW,        /* elementwise chain: loop IR */
    DL_G_REDUCE,    /* ReduceX with constant axes, GlobalAverage/MaxPool: loop IR */
    DL_G_TRANSPOSE, /* loop IR */
    DL_G_CONV,      /* dlrt_conv_forward + epilogue */
    DL_G_GEMM,      /* Gemm: dlrt_sgemm + epilogue */
    DL_G_MATMUL,    /* MatMul (batched, broadcast): dlrt_sgemm per matrix + epilogue */
    DL_G_POOL,      /* MaxPool / AveragePool / LpPool: dlrt_pool_forward */
    DL_G_SOFTMAX,   /* Softmax / LogSoftmax: dlrt_softmax */
    DL_G_LAYERNORM, /* LayerNormalization: dlrt_layernorm; Instance-, GroupNormalization:
                     * dlrt_groupnorm */
    DL_G_ATTENTION, /* MatMul(q, k') [scale] [mask] Softmax MatMul(., v): dlrt_attention */
    DL_G_CONV_GRAD, /* ai.dlcc.ConvGradInput / ConvGradWeight: dlrt_conv_grad_input / _weight */
    /* ConvTranspose: dlrt_conv_transpose (a ConvGradInput and its bias) */
    DL_G_CONV_TRANSPOSE,
    DL_G_POOL_GRAD, /* ai.dlcc.MaxPoolGrad / AveragePoolGrad: dlrt_maxpool_grad / _avgpool_grad */
    DL_G_RESIZE,    /* Resize, Upsample: dlrt_resize2d */
    DL_G_ARGMAX,    /* ArgMax, ArgMin: dlrt_argmax */
    DL_G_RNN,       /* LSTM, GRU, RNN: dlrt_rnn_forward */
    DL_G_COPY,      /* Slice, Split, Concat, Pad, DepthToSpace, SpaceToDepth:
                     * dlrt_copy_strided per input or output; Gather: dlrt_gather */
    DL_G_VIEW,      /* Reshape, Flatten, Squeeze, Unsqueeze, Identity: same bytes, new shape */
    DL_G_FALLBACK,  /* the op's reference kernel, called by the executor */
    DL_G_KIND_COUNT
} dl_gkind;

const char *dl_gkind_name(dl_gkind k);

/* Epilogue absorbed by a heavy group (CONV, GEMM, MATMUL), applied in this order. */
typedef struct dl_gepi {
    dl_value *bias;     /* per output channel (conv) or per column (gemm/matmul); NULL: none */
    dl_value *residual; /* same shape as the output; NULL: none */
    const dl_node *act; /* activation node, or the last node of a matched chain; NULL: none */
    /* the runtime activation of a matched chain of several nodes (a GELU spelled out: fuse.c's
     * match_gelu, match_gelu_tanh) and its parameters; DLRT_ACT_NONE: act is one node */
    int chain_act;
    float chain_a, chain_b;
} dl_gepi;

/* What an ATTENTION group computes: y = softmax(scale * q k^T + mask) v per head, where the
 * group's nodes are the two MatMuls, the Softmax, the scale and mask nodes between them, and
 * the Transposes and scales it absorbed around its operands and its result (fuse.c). */
typedef struct dl_gattn {
    dl_value *q, *k, *v;       /* the values read, before the absorbed Transposes and scales */
    const dl_node *q_tr, *k_tr, *v_tr; /* absorbed Transpose giving each MatMul operand; NULL: none */
    const dl_node *y_tr;       /* absorbed Transpose of the result; NULL: none */
    const dl_node *qk, *pv;    /* MatMul(q, k^T) and MatMul(p, v) */
    dl_value *mask;            /* added to the scores; NULL: none */
    float scale;               /* product of the absorbed scalar Mul / Div */
    bool causal;               /* a Where kept only keys j <= i + tk - tq */
} dl_gattn;

/* What a MATMUL group computes: mm, with A and/or B read straight from the input of a Transpose
 * that swapped their last two axes (the GEMM's trans flags), when that Transpose fed only mm. */
typedef struct dl_gmatmul {
    const dl_node *mm;          /* the MatMul */
    const dl_node *a_tr, *b_tr; /* absorbed Transpose giving A / B; NULL: none */
} dl_gmatmul;

typedef struct dl_group {
    dl_gkind kind;
    int n_nodes;
    /* topological order; nodes[0] is the anchor of CONV and GEMM groups and of MATMUL groups
     * without absorbed Transposes (dl_group_anchor) */
    dl_node **nodes;
    int n_out;
    dl_value **out; /* materialized results (all outputs of a FALLBACK, LAYERNORM, COPY or RNN
                     * group's node, else one value) */
    int n_in;
    dl_value **in; /* the values it reads and does not compute itself (no duplicates, no NULLs) */
    dl_gepi epi;
    dl_gattn attn; /* ATTENTION groups only */
    dl_gmatmul mm; /* MATMUL groups only */
    /* CONV groups: 1 + the convolution algorithm a tuning record names (dl_tuning_apply), 0:
     * the cost model's; becomes dlrt_conv.tuned */
    int conv_tuned;
    /* CONV, CONV_GRAD and CONV_TRANSPOSE groups: 1 when the program computes products in
     * bfloat16 (--math bf16); becomes dlrt_conv.bf16 */
    int conv_bf16;
} dl_group;

struct dl_fusion {
    int n;
    dl_group *groups; /* in execution order */
    dl_arena arena;   /* owns groups and their arrays */
};

void dl_fusion_free(dl_fusion *f);
/* The node a group is named after: a MATMUL group's MatMul (absorbed Transposes come before it
 * in `nodes`), an ATTENTION group's first MatMul, else nodes[0]. */
const dl_node *dl_group_anchor(const dl_group *gr);
/* Splits group gi into single-node FALLBACK groups, in place (when its code cannot be made). */
dl_status dl_fusion_split(dl_ctx *ctx, dl_fusion *f, int gi);

/* Which kernel a single node would become (the codegen decides what it can lower). */
dl_gkind dl_node_kernel_kind(const dl_node *n);

#endif
