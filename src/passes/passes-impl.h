/* passes-impl.h — graph passes and the pipeline that runs them. A pass rewrites the graph in place
 * (through the primitives in ../ir/rewrite.h) and leaves it verified and shape-inferred.
 * pipeline.c holds the flat named lists; each pass lives in its own file. */
#ifndef DL_PASSES_IMPL_H
#define DL_PASSES_IMPL_H

#include "../ops/op-impl.h" /* passes read op rows (name, arity) */

typedef struct dl_fusion dl_fusion; /* fusion groups; defined in fuse.h */

typedef struct dl_pass_ctx {
    dl_ctx *ctx;
    dl_graph *g;
    FILE *dump_to;        /* where --dump-ir writes (stderr by default) */
    const char *dump_ir;  /* NULL, a pass name, or "all" */
    dl_fusion *fusion;    /* set by the fuse pass (the last of the inference list) */
    int changes;          /* a pass adds how many rewrites it made (for reports and dumps) */
} dl_pass_ctx;

typedef struct dl_pass {
    const char *name;
    dl_status (*run)(dl_pass_ctx *pc);
} dl_pass;

/* The inference pipeline: NULL-name-terminated. */
extern const dl_pass dl_inference_passes[];
/* The cleanup a model gets before autodiff (train-graph.c). */
extern const dl_pass dl_training_prep_passes[];

/* Runs each pass in order; verifies the graph after each (dl_graph_verify) and dumps it when
 * pc->dump_ir names that pass or is "all". An unknown dump_ir name is an error listing the names. */
dl_status dl_run_passes(dl_pass_ctx *pc, const dl_pass *list);

/* ---- helpers shared by the passes ---- */
/* Re-runs n's inference from its inputs' current types and constant values and merges the result
 * into its outputs' types: where the new inference only has a symbol created at or after symbol
 * index fresh_from (an anonymous "don't know"), the dim keeps what the old type said, so
 * re-inference after rewrites never loses a symbolic or known dim. *changed (may be NULL) is set
 * when an output type changed. */
dl_status dl_node_reinfer(dl_graph *g, dl_node *n, int fresh_from, bool *changed);
/* Same dtype, rank and dims (a symbol equals only itself). */
bool dl_type_equal(const dl_type *a, const dl_type *b);
/* Forgets the symbols created since fresh_from that no value refers to any more. */
void dl_trim_fresh_syms(dl_graph *g, int fresh_from);
/* Whether n is the default-domain (ai.onnx) op called name. */
bool dl_node_is(const dl_node *n, const char *name);
/* The nodes reading each value: sets every node's id to its position in g->nodes, then the
 * positions of the nodes reading value v, once per input slot that does, in node order, are
 * (*readers)[(*at)[v] .. (*at)[v + 1]); the caller frees both (dl_free). */
dl_status dl_reader_lists(dl_graph *g, int **at, int **readers);
/* Ops whose results are random: never folded, never merged. */
bool dl_op_is_random(const dl_op_def *op);

/* Individual passes (one file each). */
dl_status dl_pass_infer_shapes(dl_pass_ctx *pc);   /* infer-shapes.c */
dl_status dl_pass_fold_constants(dl_pass_ctx *pc); /* fold-constants.c (incl. symbolic shapes) */
dl_status dl_pass_simplify(dl_pass_ctx *pc);       /* simplify.c */
dl_status dl_pass_fold_batchnorm(dl_pass_ctx *pc); /* fold-batchnorm.c */
dl_status dl_pass_match_layernorm(dl_pass_ctx *pc); /* match-layernorm.c */
dl_status dl_pass_cse(dl_pass_ctx *pc);            /* cse.c */
dl_status dl_pass_dce(dl_pass_ctx *pc);            /* dce.c */
dl_status dl_pass_remat(dl_pass_ctx *pc);          /* remat.c: recompute instead of store */
dl_status dl_pass_fuse(dl_pass_ctx *pc);           /* fuse.c: groups nodes into kernels */

#endif
