/* op-impl.h — the op table: one row per op holds its whole story (arity, attributes, shape and
 * dtype inference, reference kernel; later gradient rule, cost and lowering).
 *
 * Rows live in family files (elementwise.c, conv.c, ...) as NULL-name-terminated arrays; op-table.c
 * gathers the families and looks rows up by (domain, name).
 *
 * Contract of a row:
 *  - infer(ic): validates attributes and input types, sets ic->out[i]. It runs both statically on
 *    the graph (dims may be symbolic, input values known only for constants) and at run time in the
 *    interpreter (all dims known, all input values known). When an output's shape depends on an
 *    input value that is not known, set its rank/dims to symbolic via dl_infer_fresh_dim or
 *    rank DL_RANK_UNKNOWN. Errors go through dl_infer_fail (names node, op, shapes).
 *  - ref(kc): the reference kernel. Outputs whose inferred shape was fully known are already
 *    allocated (zeroed) with that dtype and shape; data-dependent ones have data == NULL and the
 *    kernel calls dl_kernel_alloc_out. Inputs are dense row-major tensors; omitted optional inputs
 *    are NULL. The kernel must not trust shapes beyond what infer checked. */
#ifndef DL_OP_IMPL_H
#define DL_OP_IMPL_H

#include "../ir/ir-impl.h"

typedef struct dl_infer dl_infer;
typedef struct dl_kernel dl_kernel;

typedef dl_status (*dl_infer_fn)(dl_infer *ic);
typedef dl_status (*dl_kernel_fn)(dl_kernel *kc);
/* Gradient rule (src/train/grad.h): given the loss's gradients dy[o] with respect to the node's
 * outputs (NULL for an output that does not reach the loss), builds graph nodes for the gradients
 * with respect to its inputs into dx[i] (left NULL for inputs that need none: see dg_needs). */
typedef struct dl_grad_ctx dl_grad_ctx;
typedef dl_status (*dl_grad_fn)(dl_grad_ctx *gc, const dl_node *n, dl_value *const *dy,
                                dl_value **dx);

typedef struct dl_attr_spec {
    const char *name;
    dl_attr_type type;
} dl_attr_spec;

/* The runtime activation (DLRT_ACT_*, kernels/rt/dlrt.h) that node n computes when a GEMM or a
 * convolution applies it to its output tile (passes/fuse.c), its parameters in *a and *b; 0
 * (DLRT_ACT_NONE) when it cannot be (a Clip bound that is not a constant, a Gelu form other than
 * "none" and "tanh"). */
typedef int (*dl_epilogue_fn)(const dl_node *n, float *a, float *b);

#define DL_VARIADIC 1000 /* max_in/max_out for variadic ops */

struct dl_op_def {
    const char *name;
    const char *domain; /* NULL or "" = ai.onnx */
    int min_in, max_in;
    int min_out, max_out;
    const dl_attr_spec *attrs; /* NULL-terminated; NULL = no attributes */
    dl_infer_fn infer;
    dl_kernel_fn ref;
    dl_grad_fn grad; /* NULL: not differentiable (autodiff says so when a gradient is needed) */
    dl_epilogue_fn epilogue; /* NULL: never a GEMM/convolution epilogue activation */
    /* Filled by later work: cost model, lowering. */
    const void *cost;
    const void *lower;
};

struct dl_infer {
    dl_ctx *ctx;
    dl_graph *g; /* for fresh symbols; may be NULL at run time */
    const dl_node *node;
    int opset;
    int n_in;
    const dl_type *const *in;      /* NULL for omitted optional inputs */
    const dl_tensor *const *value; /* known input values (constants; all at run time); else NULL */
    int n_out;
    dl_type *out; /* to fill; preset to dtype UNDEFINED, rank DL_RANK_UNKNOWN */
};

struct dl_kernel {
    dl_ctx *ctx;
    const dl_node *node;
    int opset;
    int n_in;
    const dl_tensor *const *in;    /* NULL for omitted optional inputs */
    const dl_type *const *in_type; /* the inputs' types, as inference saw them */
    int n_out;
    dl_tensor **out; /* never NULL entries; data NULL when not preallocated */
    const dl_type *out_type;
};

/* ---- op table ---- */
const dl_op_def *dl_op_find(const char *domain, const char *name);
int dl_op_count(void);
const dl_op_def *dl_op_at(int i);

/* ---- errors that name the node, the op and the input shapes ---- */
dl_status dl_infer_fail(dl_infer *ic, dl_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
dl_status dl_kernel_fail(dl_kernel *kc, dl_status s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- inference helpers ---- */
static inline bool dl_has_in(const dl_infer *ic, int i) {
    return i < ic->n_in && ic->in[i];
}
static inline bool dl_type_known(const dl_type *t) {
    if (t->rank < 0) return false;
    for (int i = 0; i < t->rank; i++)
        if (t->dims[i] < 0) return false;
    return true;
}
int64_t dl_infer_fresh_dim(dl_infer *ic); /* a new anonymous symbol (or -1 at run time) */
/* Sets out[o] = in[i] (dtype and shape). */
dl_status dl_infer_same(dl_infer *ic, int o, int i);
/* Sets out[o] to the numpy broadcast of inputs idx[0..n) with dtype taken from input idx[0]. */
dl_status dl_infer_broadcast(dl_infer *ic, int o, int n, const int *idx);
dl_status dl_infer_set(dl_infer *ic, int o, dl_dtype dtype, int rank, const int64_t *dims);
/* Requires input i present with a dtype in the given set (list ends with DL_DTYPE_UNDEFINED). */
dl_status dl_infer_require_dtype(dl_infer *ic, int i, const dl_dtype *allowed);
dl_status dl_infer_require_float(dl_infer *ic, int i);
/* Requires all present inputs in idx[0..n) to share one dtype. */
dl_status dl_infer_same_dtype(dl_infer *ic, int n, const int *idx);
/* Normalizes axis against rank: [-rank, rank) -> [0, rank); error otherwise. */
dl_status dl_infer_axis(dl_infer *ic, int64_t axis, int rank, int *out);
/* Reads a known int tensor input as int64 values (count to *n, up to cap). Returns false when
 * the value is not known statically. Error (via status) when it is malformed. */
dl_status dl_infer_const_ints(dl_infer *ic, int i, int64_t *vals, int cap, int *n, bool *known);

/* A Slice node's first index and step on each axis of its input, whose dims must be known, as
 * its reference kernel reads them (slicing.c); false when a parameter is not constant or is
 * malformed. The output's dims are its inferred type's. */
bool dl_slice_geometry(const dl_node *n, int64_t start[DL_MAX_RANK], int64_t step[DL_MAX_RANK]);

/* A constant-mode Pad node's pads (begins then ends, 2 x its input's rank) and its constant as
 * one element of the data's dtype in *value's first bytes, as its reference kernel reads them;
 * false for other modes, pads or a constant that are not constants, or malformed ones. */
bool dl_pad_geometry(const dl_node *n, int64_t pads[2 * DL_MAX_RANK], uint64_t *value);

/* A Resize or Upsample node (resize.c) as its reference kernel computes it on input dims in[]
 * (rank; a dim < 0 is symbolic), when its roi, scales and sizes are constants and its
 * coordinate mode is not tf_crop_and_resize: each axis's output dim (-1 where it depends on a
 * symbol) and scale; with ix and w not NULL, also axis `axis`'s taps, whose input dim must be
 * known: *n_taps per output coordinate (nearest 1, linear 2, cubic 4), ix[o * n + k] the input
 * index (clamped to the edge) and w[o * n + k] its weight, at most cap of each. An error
 * message, or NULL. */
const char *dl_resize_static(const dl_node *n, int rank, const int64_t *in, int64_t *out,
                             double *scale, int axis, int64_t cap, int *n_taps, int64_t *ix,
                             double *w);

/* An RNN, GRU or LSTM node's directions (rnn.c): 1 (forward, reverse) or 2 (bidirectional), 0
 * for another direction; *defaults whether its activations (given or not) are its op's
 * defaults, sigmoid gates and tanh elsewhere, as the reference kernel parses them. */
int dl_rnn_directions(const dl_node *n, bool *defaults);

/* The words for index v outside [-d, d) on axis (index.c), as the index ops' reference kernels
 * and the executor (for a compiled kernel's report) give them. */
void dl_bad_index_text(char *buf, size_t n, int64_t v, int64_t d, int64_t axis);

/* ---- kernel helpers ---- */
dl_status dl_kernel_alloc_out(dl_kernel *kc, int o, dl_dtype dtype, int rank, const int64_t *dims);
/* Output o, allocated from its inferred type when the interpreter could not preallocate it. */
dl_status dl_kernel_out(dl_kernel *kc, int o, dl_tensor **out);
/* Output o with a shape the kernel computed: allocated unless the interpreter already did, in
 * which case the shapes must agree (so a kernel never writes past a buffer sized otherwise). */
dl_status dl_kernel_out_as(dl_kernel *kc, int o, dl_dtype dtype, int rank, const int64_t *dims);
/* Three-way comparison of a[i] and b[j] (same dtype): exact for every integer dtype, and NaN
 * compares above every number and equal to NaN, so sorts and arg-reductions see it as an extreme.
 */
int dl_cmp_elems(const dl_tensor *a, int64_t i, const dl_tensor *b, int64_t j);
/* dl_kernel_out for every output. */
dl_status dl_kernel_outs(dl_kernel *kc);
/* The kernel seen as an inference context over its actual inputs (all values known), so a row's
 * parameter parsing written for infer (perm, slice starts, pads...) serves its kernel too without
 * re-running inference. It has no outputs: dl_infer_set on it writes nothing. */
dl_infer dl_kernel_infer(const dl_kernel *kc);
/* Generic element-wise loops for reference kernels: out = f(a) / f(a, b) with broadcasting.
 * Floating outputs compute in double; integer in int64. */
typedef double (*dl_unary_f64)(double x, const dl_node *n);
typedef double (*dl_binary_f64)(double a, double b, const dl_node *n);
typedef int64_t (*dl_binary_i64)(int64_t a, int64_t b, const dl_node *n);
dl_status dl_map_unary(dl_kernel *kc, dl_unary_f64 f);
dl_status dl_map_binary(dl_kernel *kc, dl_binary_f64 ff, dl_binary_i64 fi);

/* ---- family tables (each family file defines one; op-table.c lists them) ---- */
extern const dl_op_def dl_ops_elementwise[];
extern const dl_op_def dl_ops_activation[];
extern const dl_op_def dl_ops_logic[];
extern const dl_op_def dl_ops_cast[];
extern const dl_op_def dl_ops_shape[];
extern const dl_op_def dl_ops_slicing[];
extern const dl_op_def dl_ops_index[];
extern const dl_op_def dl_ops_create[];
extern const dl_op_def dl_ops_conv[];
extern const dl_op_def dl_ops_pool[];
extern const dl_op_def dl_ops_matmul[];
extern const dl_op_def dl_ops_norm[];
extern const dl_op_def dl_ops_resize[];
extern const dl_op_def dl_ops_reduce[];
extern const dl_op_def dl_ops_softmax[];
extern const dl_op_def dl_ops_loss[];
extern const dl_op_def dl_ops_rnn[];
extern const dl_op_def dl_ops_quant[];
extern const dl_op_def dl_ops_misc[];
extern const dl_op_def dl_ops_signal[];
extern const dl_op_def dl_ops_optim[];
extern const dl_op_def dl_ops_text[];
extern const dl_op_def dl_ops_roi[];
extern const dl_op_def dl_ops_grad[];

#endif
