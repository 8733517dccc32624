/* lower.h — the contract between kernel selection (which fused group becomes which kernel) and
 * the loop IR: descriptions of the groups that lower to loop nests, in terms of buffers whose
 * dims are constants or runtime symbols.
 *
 * Generated-code conventions (every kernel, JIT and AOT):
 *   static void NAME(void *const *b, const int64_t *s)
 * b[slot] is the base pointer of buffer `slot`; s[sym] is the runtime size of graph symbol `sym`.
 * Buffers are dense row-major. */
#ifndef DL_LOWER_H
#define DL_LOWER_H

#include "../ops/op-impl.h"
#include "../core/strbuf.h"

typedef struct dl_kdim {
    int64_t c; /* the size when sym < 0 */
    int sym;   /* >= 0: the size is s[sym] at run time */
} dl_kdim;

typedef struct dl_kbuf {
    int slot;
    dl_dtype dtype;
    int rank;
    dl_kdim dims[DL_MAX_RANK];
} dl_kbuf;

#define DL_EW_MAX_ARGS   8
#define DL_EW_MAX_INPUTS 64 /* the values a group's loops read (dl_ew_group.in) */

/* One op of an elementwise group. args[k] >= 0: group input k; args[k] < 0: the result of op
 * (-args[k] - 1), which comes earlier. Omitted optional inputs of the node are DL_EW_ABSENT. */
#define DL_EW_ABSENT (-1000000)
typedef struct dl_ew_op {
    const dl_node *node;
    int n_args;
    int args[DL_EW_MAX_ARGS];
} dl_ew_op;

/* An elementwise group: every op's operands broadcast (numpy rules, right-aligned) to the
 * index space of outs[0]; each output k stores the result of op out_op[k] over that whole index
 * space (all outputs have the same shape). Inputs are loaded with broadcasting against it. */
typedef struct dl_ew_group {
    int n_in;
    const dl_kbuf *in;
    int n_out;
    const dl_kbuf *out;
    const int *out_op;
    int n_ops;
    const dl_ew_op *ops;
} dl_ew_group;

/* True when the node can be an op of an elementwise group: its op, attributes and dtypes have a
 * scalar form (scalar-ops.c). Inputs that must be constants (e.g. Clip's min/max) are accepted
 * as group inputs too. */
bool dl_ew_supported(const dl_node *n);
/* Whether input i of such a node is an operand of its scalar form: all are but those its row
 * marks as read by inference only (Expand's shape); a group passes no argument for them and
 * does not load them. */
bool dl_ew_operand(const dl_node *n, int i);

/* Reductions: out[j] = reduce over the axes flagged in `axes` of in; out has in's rank with
 * reduced dims of size 1 (keepdims is a reshape, handled by the caller). */
typedef enum dl_reduce_kind {
    DL_RED_SUM, DL_RED_MEAN, DL_RED_MAX, DL_RED_MIN, DL_RED_PROD, DL_RED_SUM_SQUARE,
    DL_RED_L1, DL_RED_L2, DL_RED_LOG_SUM, DL_RED_LOG_SUM_EXP, DL_RED_COUNT
} dl_reduce_kind;
typedef struct dl_reduce_desc {
    dl_kbuf in, out;
    dl_reduce_kind kind;
    bool axes[DL_MAX_RANK];
} dl_reduce_desc;

/* out = transpose(in, perm): out.dims[i] = in.dims[perm[i]]. */
typedef struct dl_transpose_desc {
    dl_kbuf in, out;
    int perm[DL_MAX_RANK];
} dl_transpose_desc;

/* Target facts a default schedule uses. */
typedef struct dl_target {
    int vector_bytes; /* 64 with AVX-512, 32 with AVX2, 16 otherwise */
    int threads;      /* > 1: outer loops may be parallel (the pool) */
    bool math_bf16;   /* MatMul and Gemm products in bfloat16 (dl_compile_options.math) */
} dl_target;

/* Lowers a description to a loop-IR function, applies the target's default schedule, and
 * renders it as C (one static function named `name`, conventions above) appended to sb. */
dl_status dl_emit_elementwise(dl_ctx *ctx, const dl_ew_group *g, const dl_target *t,
                              const char *name, dl_sbuf *sb);
dl_status dl_emit_reduce(dl_ctx *ctx, const dl_reduce_desc *d, const dl_target *t,
                         const char *name, dl_sbuf *sb);
dl_status dl_emit_transpose(dl_ctx *ctx, const dl_transpose_desc *d, const dl_target *t,
                            const char *name, dl_sbuf *sb);

/* C spelling of a dim in generated code: "12" or "s[3]". */
const char *dl_kdim_c(dl_kdim d, char *buf, size_t n);

#endif
