/* dlcc.h — the one public header of dlcc, a deep learning compiler.
 *
 * Handles are opaque. Every call that can fail returns a dl_status; the message lives on the
 * context (dl_errmsg). Builder calls (dl_add, dl_matmul, ...) return NULL on error and record the
 * error on the graph's context; a NULL operand makes them return NULL too, so a chain of builder
 * calls can be checked once at the end with dl_graph_status(). */
#ifndef DLCC_H
#define DLCC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DL_MAX_RANK 8

typedef enum dl_status {
    DL_OK = 0,
    DL_ERR_IO,          /* file missing, unreadable, short read */
    DL_ERR_PARSE,       /* malformed model or tensor file */
    DL_ERR_UNSUPPORTED, /* valid input dlcc does not handle (op, dtype, feature) */
    DL_ERR_SHAPE,       /* shapes do not agree */
    DL_ERR_TYPE,        /* dtypes do not agree */
    DL_ERR_INVALID,     /* bad argument or attribute value */
    DL_ERR_NOMEM,       /* allocation failed */
    DL_ERR_LIMIT,       /* a size derived from the input exceeds a cap */
    DL_ERR_INTERNAL,    /* a dlcc bug */
    DL_STATUS_COUNT
} dl_status;

typedef enum dl_dtype {
    DL_DTYPE_UNDEFINED = 0,
    DL_F32,
    DL_F64,
    DL_F16,
    DL_BF16,
    DL_I8,
    DL_U8,
    DL_I16,
    DL_U16,
    DL_I32,
    DL_U32,
    DL_I64,
    DL_U64,
    DL_BOOL,
    DL_DTYPE_COUNT
} dl_dtype;

typedef struct dl_ctx dl_ctx;       /* error state, allocation limits */
typedef struct dl_graph dl_graph;   /* a model: values, nodes, weights */
typedef struct dl_value dl_value;   /* an edge of the graph */
typedef struct dl_tensor dl_tensor; /* a dense n-d array */

/* ---- context and errors ---- */
dl_ctx *dl_ctx_new(void);
void dl_ctx_free(dl_ctx *ctx);
const char *dl_errmsg(const dl_ctx *ctx);
const char *dl_status_name(dl_status s);
/* Largest single allocation that model contents may cause (bytes). Default 8 GiB. */
void dl_set_alloc_limit(size_t bytes);

/* ---- dtypes ---- */
const char *dl_dtype_name(dl_dtype t);
size_t dl_dtype_size(dl_dtype t);
dl_dtype dl_dtype_from_name(const char *name); /* "float32" ... ; DL_DTYPE_UNDEFINED if unknown */

/* ---- tensors ---- */
dl_status dl_tensor_new(dl_ctx *ctx, dl_dtype dtype, int rank, const int64_t *dims, dl_tensor **out);
void dl_tensor_free(dl_tensor *t);
dl_dtype dl_tensor_dtype(const dl_tensor *t);
int dl_tensor_rank(const dl_tensor *t);
const int64_t *dl_tensor_dims(const dl_tensor *t);
int64_t dl_tensor_numel(const dl_tensor *t);
void *dl_tensor_data(dl_tensor *t);
/* NumPy .npy files (format 1.0-3.0, little-endian, C order). */
dl_status dl_npy_load(dl_ctx *ctx, const char *path, dl_tensor **out);
dl_status dl_npy_save(dl_ctx *ctx, const char *path, const dl_tensor *t);

/* ---- graphs ---- */
dl_status dl_load_onnx(dl_ctx *ctx, const char *path, dl_graph **out);
/* Writes g as an ONNX model (atomically): initializers for weights, Constant nodes for the
 * other constants, symbolic dims by name. */
dl_status dl_save_onnx(dl_ctx *ctx, dl_graph *g, const char *path);
dl_graph *dl_graph_new(dl_ctx *ctx);
void dl_graph_free(dl_graph *g);
dl_status dl_graph_status(const dl_graph *g); /* first builder error, or DL_OK */
dl_status dl_graph_verify(dl_graph *g);
int dl_graph_num_inputs(const dl_graph *g);
int dl_graph_num_outputs(const dl_graph *g);
dl_value *dl_graph_input(const dl_graph *g, int i);
dl_value *dl_graph_output(const dl_graph *g, int i);
const char *dl_value_name(const dl_value *v);
dl_dtype dl_value_dtype(const dl_value *v);
/* Dims of a value; a symbolic dim is reported as -1 (its name via dl_value_dim_name). */
int dl_value_rank(const dl_value *v);
int64_t dl_value_dim(const dl_value *v, int i);
const char *dl_value_dim_name(const dl_value *v, int i);

/* Printers: human-readable text and Graphviz DOT. */
dl_status dl_graph_print(dl_graph *g, void *file /* FILE* */, int verbose);
dl_status dl_graph_write_dot(dl_graph *g, const char *path);

/* ---- builder: each call adds a node and computes nothing ---- */
/* dims: a negative entry is symbolic; its name is taken from sym_names[i] (may be NULL → "?"). */
dl_value *dl_input(dl_graph *g, const char *name, dl_dtype dtype, int rank, const int64_t *dims,
                   const char *const *sym_names);
dl_value *dl_constant(dl_graph *g, const char *name, dl_tensor *t); /* takes ownership of t */
/* A weight: a constant that training treats as a parameter (an ONNX initializer). */
dl_value *dl_parameter(dl_graph *g, const char *name, dl_tensor *t);
void dl_output(dl_graph *g, dl_value *v, const char *name);

/* Generic node: op name as in ONNX, attributes as "key=value" strings:
 * "axis=1", "perm=[0,2,1]", "alpha=0.5", "mode=constant" (ints, floats, strings, their lists). */
dl_status dl_add_node(dl_graph *g, const char *op, int n_in, dl_value *const *in, int n_out,
                      dl_value **out, int n_attr, const char *const *attrs);
dl_value *dl_op1(dl_graph *g, const char *op, dl_value *a, const char *attrs /* "k=v;k=v" or NULL */);
dl_value *dl_op2(dl_graph *g, const char *op, dl_value *a, dl_value *b, const char *attrs);
dl_value *dl_add(dl_graph *g, dl_value *a, dl_value *b);
dl_value *dl_sub(dl_graph *g, dl_value *a, dl_value *b);
dl_value *dl_mul(dl_graph *g, dl_value *a, dl_value *b);
dl_value *dl_div(dl_graph *g, dl_value *a, dl_value *b);
dl_value *dl_matmul(dl_graph *g, dl_value *a, dl_value *b);
dl_value *dl_relu(dl_graph *g, dl_value *x);
dl_value *dl_sigmoid(dl_graph *g, dl_value *x);
dl_value *dl_tanh(dl_graph *g, dl_value *x);
dl_value *dl_softmax(dl_graph *g, dl_value *x, int axis);
/* w: [M, C, kh, kw]; b may be NULL. pads: top,left,bottom,right. */
dl_value *dl_conv2d(dl_graph *g, dl_value *x, dl_value *w, dl_value *b, int stride, int pad);
dl_value *dl_gemm(dl_graph *g, dl_value *a, dl_value *b, dl_value *c, int trans_b);
dl_value *dl_flatten(dl_graph *g, dl_value *x, int axis);
dl_value *dl_maxpool2d(dl_graph *g, dl_value *x, int kernel, int stride);
dl_value *dl_global_avgpool(dl_graph *g, dl_value *x);

/* ---- running ---- */
/* REF: the reference interpreter (the oracle). NATIVE: optimized, generated and compiled code
 * (falls back to REF with a warning when no C compiler can be run). */
typedef enum dl_backend { DL_BACKEND_REF = 0, DL_BACKEND_NATIVE, DL_BACKEND_COUNT } dl_backend;

/* Runs the graph once. inputs are matched to graph inputs by name (names[i]) or, when names is
 * NULL, by position. outputs receives dl_graph_num_outputs() new tensors the caller frees.
 * With DL_BACKEND_NATIVE this compiles (through the on-disk cache) and runs once; to run many
 * times, compile once with dl_compile. */
dl_status dl_run(dl_ctx *ctx, dl_graph *g, dl_backend backend, int n_inputs,
                 const char *const *names, dl_tensor *const *inputs, dl_tensor **outputs);

/* ---- compiling ---- */
typedef struct dl_program dl_program;

typedef struct dl_compile_options {
    const char *cc;        /* C compiler; NULL: $CC, else "cc" */
    const char *cflags;    /* NULL: $DLCC_CFLAGS, else the flags of the instruction set (isa) */
    const char *cache_dir; /* NULL: $DLCC_CACHE_DIR, else ~/.cache/dlcc */
    int no_cache;          /* build in a temporary directory, keep nothing */
    int threads;           /* 0: one per CPU */
    const char *dump_ir;   /* print the IR after this pass ("all" for every pass) */
    void *dump_to;         /* FILE* for dump_ir; NULL: stderr */
    int verbose;           /* print compiler command lines */
    const char *isa;       /* "native" (NULL: $DLCC_ISA, else native), "avx512", "avx2", "generic" */
    /* a file of `dlcc tune` records: the convolution algorithm measured fastest per layer
     * geometry and instruction set; layers without a record keep the cost model's pick. NULL:
     * none */
    const char *tuning;
    /* Precision of the float products of MatMul and Gemm (dl_math). */
    int math;
} dl_compile_options;

/* DL_MATH_FP32 (the default) rounds nothing. DL_MATH_BF16 rounds both operands of each MatMul
 * and Gemm product (training steps' included) to bfloat16 and sums their products in float32,
 * as mixed-precision training does: about 1.6x the float32 speed on CPUs with AVX512-BF16, at a
 * relative error of a few 2^-9 of the operands' magnitudes per product. Kernels built without
 * AVX512-BF16 (another instruction set, or such a CPU) compute in float32 and the compile report
 * says so. Convolutions and fused attention stay in float32. */
typedef enum dl_math { DL_MATH_FP32 = 0, DL_MATH_BF16 = 1, DL_MATH_COUNT } dl_math;

void dl_compile_options_init(dl_compile_options *o);
/* Optimizes a copy of g (g is left as it is and must outlive the program), generates C for
 * its kernels and builds it. */
dl_status dl_compile(dl_ctx *ctx, dl_graph *g, const dl_compile_options *o, dl_program **out);
/* Same contract as dl_run. Symbolic dims may take new sizes on every call: nothing is
 * recompiled, only the memory plan is redone for new shapes. */
dl_status dl_program_run(dl_ctx *ctx, dl_program *p, int n_inputs, const char *const *names,
                         dl_tensor *const *inputs, dl_tensor **outputs);
void dl_program_free(dl_program *p);
/* The optimized graph (for printing); owned by the program. */
dl_graph *dl_program_graph(dl_program *p);
/* Prints what the compiler did: node counts, kernels by kind, the memory plan for these inputs
 * (arena vs the naive peak and the sum of all intermediates), compile times. file: FILE*. */
dl_status dl_program_report(dl_ctx *ctx, dl_program *p, int n_inputs, dl_tensor *const *inputs,
                            void *file);
/* Writes a standalone C bundle of the program to dir (see dlcc compile --help); inputs give
 * the shapes that symbolic dims take. */
dl_status dl_emit_bundle(dl_ctx *ctx, dl_program *p, int n_inputs, dl_tensor *const *inputs,
                         const char *dir);
/* The compile cache in use ($DLCC_CACHE_DIR or ~/.cache/dlcc): list (file: FILE*), clear. */
dl_status dl_cache_ls(dl_ctx *ctx, void *file);
dl_status dl_cache_clear_all(dl_ctx *ctx, int *removed);
/* Graphviz DOT of the optimized graph, one cluster per fusion group. */
dl_status dl_program_write_dot(dl_ctx *ctx, dl_program *p, const char *path);
/* Runs g on the reference backend and compiled, side by side, comparing every step's results;
 * prints the first step (and its nodes) that differs beyond rtol/atol to report (FILE*, NULL:
 * stderr) and fails with DL_ERR_INTERNAL then. */
dl_status dl_check(dl_ctx *ctx, dl_graph *g, const dl_compile_options *o, int n_inputs,
                   const char *const *names, dl_tensor *const *inputs, double rtol, double atol,
                   void *report);

/* ---- training ----
 * A trainer turns a model into one compiled program per step: forward, loss, backward (autodiff
 * over the graph) and the optimizer update. The model's float initializers (dl_parameter) that
 * the loss depends on are the parameters, unless frozen; its first input is the batch, its first
 * output the prediction fed to the loss. Hyper-parameters are runtime inputs of the step, so
 * changing them (a schedule) never recompiles. */
typedef struct dl_trainer dl_trainer;
typedef enum dl_loss_kind {
    DL_LOSS_CROSS_ENTROPY = 0, /* logits [N, C], integer labels with N elements; mean */
    DL_LOSS_MSE,               /* mean squared error against a target shaped like the prediction */
    DL_LOSS_BCE_LOGITS,        /* binary cross-entropy on logits; mean */
    DL_LOSS_COUNT
} dl_loss_kind;
typedef enum dl_optimizer_kind { DL_OPT_SGD = 0, DL_OPT_ADAM, DL_OPT_ADAMW, DL_OPT_COUNT } dl_optimizer_kind;

typedef struct dl_train_options {
    dl_loss_kind loss;
    dl_optimizer_kind optimizer;
    int momentum;   /* SGD: keep a velocity buffer (its factor is the hyper-parameter) */
    int nesterov;   /* SGD: Nesterov momentum */
    int clip;       /* clip gradients to a global norm (hparams.max_grad_norm) */
    int n_frozen;   /* initializers that are not trained, by name */
    const char *const *frozen;
    dl_backend backend;                 /* NATIVE (default) or REF */
    const dl_compile_options *compile;  /* NULL: defaults */
} dl_train_options;

typedef struct dl_hparams {
    float lr, momentum, weight_decay, beta1, beta2, eps, max_grad_norm, label_smoothing;
} dl_hparams;

void dl_train_options_init(dl_train_options *o);
/* PyTorch's defaults: momentum 0, betas 0.9/0.999, eps 1e-8, weight decay 0.01 for AdamW and 0
 * otherwise, max norm 1, no label smoothing; lr 1e-3. */
void dl_hparams_init(dl_hparams *h, dl_optimizer_kind opt);
/* model must outlive the trainer; its parameters' current values are the starting point. */
dl_status dl_trainer_new(dl_ctx *ctx, dl_graph *model, const dl_train_options *o, dl_trainer **out);
void dl_trainer_free(dl_trainer *t);
/* One step on a batch (x: the model input, y: the labels or targets): loss, gradients and the
 * update run as one program. *loss receives the batch loss before the update. */
dl_status dl_train_step(dl_ctx *ctx, dl_trainer *t, dl_tensor *x, dl_tensor *y,
                        const dl_hparams *hp, float *loss);
/* Forward and loss without an update; *pred (may be NULL) receives the prediction. */
dl_status dl_trainer_eval(dl_ctx *ctx, dl_trainer *t, dl_tensor *x, dl_tensor *y, float *loss,
                          dl_tensor **pred);
int64_t dl_trainer_steps(const dl_trainer *t);
int dl_trainer_num_params(const dl_trainer *t);
const char *dl_trainer_param_name(const dl_trainer *t, int i);
dl_tensor *dl_trainer_param(dl_trainer *t, int i);
/* The model with the trained weights, as ONNX. */
dl_status dl_trainer_export_onnx(dl_ctx *ctx, dl_trainer *t, const char *path);
/* The training graph (forward + loss + backward + update) and the step program (may be NULL on
 * the reference backend), for printing and tests. */
dl_graph *dl_trainer_graph(dl_trainer *t);
dl_program *dl_trainer_program(dl_trainer *t);

#ifdef __cplusplus
}
#endif
#endif
