/* loop-ir.h — the loop-level IR that fused groups lower to (the algorithm), the schedule
 * primitives that rearrange its loops without changing results (Halide's split of algorithm and
 * schedule), and the C renderer.
 *
 * A function (dl_lfunc) owns an arena holding its expressions and statements, a table of
 * buffers (b[slot] of the generated-code convention in lower.h) and a table of variables:
 * loop variables (bound by a for loop), lets (immutable int64 definitions, e.g. the original
 * index of a split loop) and locals (mutable scalars: accumulators). Expressions are typed with
 * a dl_dtype (DL_BOOL is C `bool`; a DL_BOOL buffer stores one byte per element, 0 or 1).
 *
 * Builders never fail loudly: on allocation failure they return NULL (or -1), mark the function
 * (f->oom) and accept NULL operands, so a lowering checks dl_lfunc_status once at the end. */
#ifndef DL_LOOP_IR_H
#define DL_LOOP_IR_H

#include "lower.h"

typedef enum dl_lop {
    /* arithmetic; signed integer ADD/SUB/MUL must not overflow (index math): plain C */
    DL_LOP_ADD,
    DL_LOP_SUB,
    DL_LOP_MUL,
    DL_LOP_DIV, /* C semantics: the caller rules out division by zero and INT_MIN / -1 */
    DL_LOP_MOD,
    DL_LOP_WADD, /* two's complement wrapping forms for integer data */
    DL_LOP_WSUB,
    DL_LOP_WMUL,
    DL_LOP_MIN, /* a < b ? a : b (C select semantics, also for NaN) */
    DL_LOP_MAX, /* a > b ? a : b */
    DL_LOP_BAND,
    DL_LOP_BOR,
    DL_LOP_BXOR,
    DL_LOP_SHL, /* unsigned operands, shift < width */
    DL_LOP_SHR,
    /* comparisons and logic: result DL_BOOL */
    DL_LOP_LT,
    DL_LOP_LE,
    DL_LOP_GT,
    DL_LOP_GE,
    DL_LOP_EQ,
    DL_LOP_NE,
    DL_LOP_AND, /* bool operands */
    DL_LOP_OR,
    /* unary */
    DL_LOP_NEG,  /* float negation */
    DL_LOP_WNEG, /* wrapping integer negation */
    DL_LOP_NOT,  /* logical not (bool) */
    DL_LOP_BNOT, /* bitwise not */
    DL_LOP_COUNT
} dl_lop;

typedef enum dl_lx_kind {
    DL_LX_INT,    /* integer or bool constant: i */
    DL_LX_FLOAT,  /* f32/f64 constant: f (inf and NaN allowed) */
    DL_LX_VAR,    /* variable `var` */
    DL_LX_SYM,    /* s[var]: a runtime symbol, int64 */
    DL_LX_BIN,    /* op(a[0], a[1]) */
    DL_LX_UN,     /* op(a[0]) */
    DL_LX_SELECT, /* a[0] ? a[1] : a[2] */
    DL_LX_CAST,   /* (type)a[0]: a C conversion (float to int only when in range) */
    DL_LX_LOAD,   /* buffer `var` at index a[0] */
    DL_LX_CALL,   /* fn(a[0..n)): a math.h function or a prelude helper */
} dl_lx_kind;

typedef struct dl_lexpr dl_lexpr;
struct dl_lexpr {
    dl_lx_kind kind;
    dl_dtype type;
    dl_lop op;
    int var;
    int64_t i;
    double f;
    const char *fn;
    int n;
    dl_lexpr **a;
};

typedef enum dl_ls_kind {
    DL_LS_BLOCK,
    DL_LS_FOR,
    DL_LS_STORE,
    DL_LS_DECL,   /* declares variable `var` (a let or a local) with initial value `value` */
    DL_LS_ASSIGN, /* local `var` = value */
    DL_LS_IF,
} dl_ls_kind;

/* How an accumulator carried by a reduction loop combines; ADD and MUL map to OpenMP's
 * reduction clause, OTHER (max/min with NaN rules) cannot be vectorized exactly. */
typedef enum dl_red_op { DL_REDOP_NONE, DL_REDOP_ADD, DL_REDOP_MUL, DL_REDOP_OTHER } dl_red_op;

typedef struct dl_lstmt dl_lstmt;
struct dl_lstmt {
    dl_ls_kind kind;
    /* BLOCK */
    int n, cap;
    dl_lstmt **items;
    /* FOR: for (var = 0; var < extent; var++) body */
    int var;
    dl_lexpr *extent;
    dl_lstmt *body;
    bool parallel, vectorize;
    int unroll;       /* > 1: #pragma GCC unroll */
    dl_lexpr *par_if; /* parallel only when this holds (NULL: always) */
    int collapse;     /* > 1: the parallel loop shares out this many nested loops */
    bool unit_stride; /* lowering's hint: consecutive iterations touch consecutive elements */
    dl_red_op red_op; /* != NONE: iterations accumulate into local red_var (loop-carried) */
    int red_var;
    /* STORE: buffer `buf` at index = value;  DECL/ASSIGN use var and value; IF uses cond */
    int buf;
    dl_lexpr *index, *value, *cond;
    dl_lstmt *then_s, *else_s;
};

typedef enum dl_lvar_kind { DL_LV_LOOP, DL_LV_LET, DL_LV_LOCAL } dl_lvar_kind;

typedef struct dl_lvar {
    const char *name;
    dl_dtype type;
    dl_lvar_kind kind;
} dl_lvar;

typedef struct dl_lbuf {
    int slot;
    dl_dtype dtype; /* element type in memory (DL_BOOL: one byte) */
    bool written;
} dl_lbuf;

typedef struct dl_lfunc {
    dl_arena arena;
    const char *name;
    dl_lbuf *bufs;
    int n_bufs, cap_bufs;
    dl_lvar *vars;
    int n_vars, cap_vars;
    dl_lstmt *body; /* a block */
    bool oom;
} dl_lfunc;

/* ---- functions (loop-ir.c) ---- */
dl_status dl_lfunc_new(dl_ctx *ctx, const char *name, dl_lfunc **out);
void dl_lfunc_free(dl_lfunc *f);
/* DL_ERR_NOMEM (recorded on ctx) when a builder ran out of memory. */
dl_status dl_lfunc_status(dl_ctx *ctx, const dl_lfunc *f);
/* Buffer index for (slot, dtype), added on first use; -1 on OOM. */
int dl_lf_buf(dl_lfunc *f, int slot, dl_dtype dtype);
/* A new variable; the name is made unique ("i0", "i0_2"...). -1 on OOM. */
int dl_lf_var(dl_lfunc *f, const char *name, dl_dtype type, dl_lvar_kind kind);
/* Variable id by name, -1 when absent. */
int dl_lf_find_var(const dl_lfunc *f, const char *name);
/* Loop variables in pre-order (outermost first, then program order); returns the count (may
 * exceed cap, only cap are written). */
int dl_lf_loops(const dl_lfunc *f, int *vars, int cap);
/* The for statement of a loop variable, NULL when none (and its enclosing for loops, outermost
 * first, when path is not NULL: path holds DL_LOOP_MAX_DEPTH entries; *depth receives their
 * count, which may exceed that). */
#define DL_LOOP_MAX_DEPTH 64
dl_lstmt *dl_lf_find_loop(const dl_lfunc *f, int var, dl_lstmt **path, int *depth);

/* ---- expressions ---- */
dl_lexpr *dl_le_int(dl_lfunc *f, dl_dtype t, int64_t v);
dl_lexpr *dl_le_i64(dl_lfunc *f, int64_t v);
dl_lexpr *dl_le_float(dl_lfunc *f, dl_dtype t, double v);
dl_lexpr *dl_le_var(dl_lfunc *f, int var);
dl_lexpr *dl_le_sym(dl_lfunc *f, int sym);
/* A dim of a kernel buffer as an int64 expression (constant or s[sym]). */
dl_lexpr *dl_le_kdim(dl_lfunc *f, dl_kdim d);
dl_lexpr *dl_le_bin(dl_lfunc *f, dl_lop op, dl_lexpr *a, dl_lexpr *b);
dl_lexpr *dl_le_un(dl_lfunc *f, dl_lop op, dl_lexpr *a);
dl_lexpr *dl_le_select(dl_lfunc *f, dl_lexpr *c, dl_lexpr *a, dl_lexpr *b);
dl_lexpr *dl_le_cast(dl_lfunc *f, dl_dtype t, dl_lexpr *a); /* no-op when a has type t */
dl_lexpr *dl_le_load(dl_lfunc *f, int buf, dl_lexpr *index);
dl_lexpr *dl_le_call(dl_lfunc *f, dl_dtype t, const char *fn, int n, dl_lexpr *const *args);
dl_lexpr *dl_le_call1(dl_lfunc *f, dl_dtype t, const char *fn, dl_lexpr *a);
dl_lexpr *dl_le_call2(dl_lfunc *f, dl_dtype t, const char *fn, dl_lexpr *a, dl_lexpr *b);
/* int64 index arithmetic with constant folding. */
dl_lexpr *dl_le_iadd(dl_lfunc *f, dl_lexpr *a, dl_lexpr *b);
dl_lexpr *dl_le_imul(dl_lfunc *f, dl_lexpr *a, dl_lexpr *b);
bool dl_le_is_const(const dl_lexpr *e, int64_t *v); /* an integer constant? */
/* True when e reads variable var (directly). */
bool dl_le_uses_var(const dl_lexpr *e, int var);

/* ---- statements ---- */
dl_lstmt *dl_ls_block(dl_lfunc *f);
void dl_ls_append(dl_lfunc *f, dl_lstmt *block, dl_lstmt *s);
dl_lstmt *dl_ls_for(dl_lfunc *f, int var, dl_lexpr *extent, dl_lstmt *body);
dl_lstmt *dl_ls_store(dl_lfunc *f, int buf, dl_lexpr *index, dl_lexpr *value);
dl_lstmt *dl_ls_decl(dl_lfunc *f, int var, dl_lexpr *init);
dl_lstmt *dl_ls_assign(dl_lfunc *f, int var, dl_lexpr *value);
dl_lstmt *dl_ls_if(dl_lfunc *f, dl_lexpr *cond, dl_lstmt *then_s, dl_lstmt *else_s);

/* ---- schedule primitives (schedule.c) ----
 * Each names loops by their variable, checks that the request is legal and leaves the function
 * unchanged with an error (DL_ERR_INVALID) when it is not. None changes what is computed. */
typedef enum dl_tail {
    DL_TAIL_MIN,   /* inner extent min(factor, extent - outer*factor) */
    DL_TAIL_GUARD, /* inner extent factor, body guarded by if (index < extent) */
} dl_tail;
/* var → outer (extent ceil(E/factor)) and inner (extent factor); the old var becomes a let
 * outer*factor + inner at the top of the inner body. The loop must carry no annotation yet. */
dl_status dl_sched_split(dl_ctx *ctx, dl_lfunc *f, int var, int64_t factor, dl_tail tail,
                         int *outer, int *inner);
/* vars (outermost first) must be a perfectly nested chain of loops (lets between them move to
 * the innermost body); no extent may depend on a loop placed inside it. */
dl_status dl_sched_reorder(dl_ctx *ctx, dl_lfunc *f, int n, const int *vars);
/* #pragma omp simd: innermost loops only; a loop carrying an accumulation needs ADD or MUL. */
dl_status dl_sched_vectorize(dl_ctx *ctx, dl_lfunc *f, int var);
/* Parallel (rendered as a function of a range of iterations run by the runtime's pool): not on
 * loop-carried loops, not nested in/around another parallel loop. cond (may be NULL): shared out
 * only when it holds. */
dl_status dl_sched_parallel(dl_ctx *ctx, dl_lfunc *f, int var, dl_lexpr *cond);
/* Collapse n on parallel loop var: it and the n-1 loops perfectly nested in it (no lets
 * between, extents independent of each other, no annotations) share out their iterations as
 * one flattened range. */
dl_status dl_sched_collapse(dl_ctx *ctx, dl_lfunc *f, int var, int n);
/* #pragma GCC unroll n, 2 <= n <= 64. */
dl_status dl_sched_unroll(dl_ctx *ctx, dl_lfunc *f, int var, int n);
/* The default schedule: vectorize innermost unit-stride loops, parallelize the outermost loop
 * when the work is large enough (threshold below; an if() clause when it depends on symbols),
 * collapsing nested loops into it while its constant trip count is below 4 * threads. */
#define DL_PAR_MIN_WORK 32768
dl_status dl_sched_default(dl_ctx *ctx, dl_lfunc *f, const dl_target *t);
/* Tiles the loop pair (a outer in the nest, b inner) by factor, making a_o .. b_o a_i b_i. */
dl_status dl_sched_tile2(dl_ctx *ctx, dl_lfunc *f, int a, int b, int64_t factor);

/* ---- rendering (render-c.c) ---- */
/* The includes and helper functions generated code needs; once per source file. */
void dl_render_prelude(dl_sbuf *sb);
/* One `static void NAME(void *const *b, const int64_t *s)` function. */
dl_status dl_render_c(dl_ctx *ctx, const dl_lfunc *f, dl_sbuf *sb);
/* C spelling of a scalar type ("float", "int64_t", "bool"); of a buffer element ("uint8_t" for
 * bool). */
const char *dl_ctype(dl_dtype t);
const char *dl_ctype_mem(dl_dtype t);

/* ---- lowerings: the algorithm only, no schedule (lower-ew.c, lower-reduce.c) ---- */
dl_status dl_lower_elementwise(dl_ctx *ctx, const dl_ew_group *g, const char *name, dl_lfunc **out);
dl_status dl_lower_reduce(dl_ctx *ctx, const dl_reduce_desc *d, const char *name, dl_lfunc **out);
dl_status dl_lower_transpose(dl_ctx *ctx, const dl_transpose_desc *d, const char *name,
                             dl_lfunc **out);
/* The transpose schedule: tiles a 2-D-like transpose, then the default schedule. */
dl_status dl_sched_transpose(dl_ctx *ctx, dl_lfunc *f, const dl_target *t);

/* ---- scalar ops (scalar-ops.c) ---- */
/* The value of node n given its argument values (args[k] NULL for an omitted optional input),
 * with the node's output dtype. DL_ERR_UNSUPPORTED when dl_ew_supported(n) is false. */
dl_status dl_scalar_op(dl_ctx *ctx, dl_lfunc *f, const dl_node *n, int n_args,
                       dl_lexpr *const *args, dl_lexpr **out);

#endif
