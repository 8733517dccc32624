/* program-impl.h — a compiled program: the optimized graph, its fusion groups (the steps), the
 * loaded kernels, and the memory plan for the last input shapes seen. */
#ifndef DL_PROGRAM_IMPL_H
#define DL_PROGRAM_IMPL_H

#include "runtime-impl.h"
#include "../passes/fuse.h"
#include "../codegen/jit.h"
#include "../core/strbuf.h"
#include "../codegen/lower.h"
#include "../codegen/tuning.h"

typedef void (*dl_kernel_ptr)(void *const *b, const int64_t *s);

typedef struct dl_compile_stats {
    int nodes_before, nodes_after;
    int groups, kernels_generated, views, fallbacks;
    double passes_ms, emit_ms, build_ms, total_ms;
    bool cache_hit;
    char cache_key[33];
    size_t source_bytes;
    char isa[16];    /* instruction set the kernels were built for */
    int tuned_convs; /* convolutions that run the algorithm a tuning record names */
    int math;        /* dl_compile_options.math */
    int products;    /* Gemm and MatMul groups (what math bf16 runs in bfloat16) */
    int convs;       /* Conv, ConvTranspose groups (math bf16: those run as GEMMs in bf16) */
    bool bf16_built; /* the kernels' dlrt_sgemm_bf16 computes in bfloat16 (dlk_has_bf16) */
} dl_compile_stats;

/* The memory plan of one binding of input shapes. */
typedef struct dl_plan {
    bool valid;
    bool dynamic;      /* some shape depends on data: tensors are allocated step by step */
    int64_t *in_dims;  /* the input shapes this plan is for (rank+dims per input, flattened) */
    int n_in_dims;
    dl_type *ctype;    /* concrete type of every value (static plans) */
    int64_t *syms;     /* size of every graph symbol */
    int *first, *last; /* by value id: step that writes it / last step that reads it (-1) */
    int64_t *offset;   /* by value id: arena offset, -1 when not in the arena */
    int *alias;        /* by value id: value whose storage a view shares, -1 */
    int *out_view;     /* by value id: the graph output, a view of it, whose bytes it is computed
                        * into (no arena slot), -1 */
    unsigned char *arena;
    int64_t arena_bytes, sum_bytes, naive_peak;
    size_t ws_bytes;
    void *ws;
} dl_plan;

struct dl_program {
    dl_graph *src;   /* the user's graph (not owned) */
    dl_graph *g;     /* optimized clone (owned) */
    dl_fusion *fusion;
    dl_jit_lib *lib;
    dl_kernel_ptr *kernels; /* per group, NULL for views and fallbacks */
    void (*set_threads)(int);
    int threads; /* kernel threads of every run (the option, else all cores) */
    dl_compile_stats stats;
    dl_sbuf notes;   /* groups that fell back, and why */
    dl_sbuf source;  /* the generated C (kept for --emit and debugging) */
    dl_plan plan;
    /* Weights packed once into the GEMM microkernel's layout, when the module asks for it
     * (module.h: dlk_n_packs); 64-byte aligned views of pack_mem, one block of pack_bytes for
     * all (dl_malloc_huge). */
    int n_packs;
    void **packs;
    void *pack_mem;
    size_t pack_bytes;
    bool interp_only; /* no C compiler: every step runs its reference kernel */
};

/* dl_compile with the tuning records t (may be NULL) in place of the file o->tuning names, or
 * with force >= 0: that convolution algorithm on every layer it applies to (dlcc tune). */
dl_status dl_compile_tuned(dl_ctx *ctx, dl_graph *g, const dl_compile_options *o,
                           const dl_tuning *t, int force, dl_program **out);

/* The target the host CPU offers (vector width from its features; threads <= 0: all cores). */
dl_target dl_host_target(int threads);
/* Inlines the runtime-kernel headers into a source text (see compile.c). */
void dl_rt_expand(const char *text, dl_sbuf *out);

/* Bytes of a concrete type; -1 past the allocation cap (or on overflow). */
int64_t dl_type_nbytes(const dl_type *t);

/* Plans memory for the given bound input tensors (by graph input position); reuses the current
 * plan when the shapes are unchanged. */
dl_status dl_plan_bind(dl_ctx *ctx, dl_program *p, dl_tensor *const *in);
void dl_plan_free(dl_plan *pl);
/* Binds v's static dims to the concrete type ct: fixed dims must agree, each symbol takes one
 * size (recorded in syms). is_input words the error for a user's input. */
dl_status dl_bind_type(dl_ctx *ctx, dl_graph *g, const dl_value *v, const dl_type *ct,
                       int64_t *syms, bool is_input);

/* Called after each step when set (dlcc run --check): values[vid] are the tensors produced so
 * far. Returning non-OK stops the run with that status. reuse as for dl_program_run_reuse (may
 * be NULL). */
typedef dl_status (*dl_step_hook)(void *user, const dl_program *p, int step,
                                  dl_tensor *const *values);
dl_status dl_program_run_hooked(dl_ctx *ctx, dl_program *p, int n_inputs,
                                const char *const *names, dl_tensor *const *inputs,
                                dl_tensor **outputs, dl_step_hook hook, void *user,
                                dl_tensor *const *reuse);
/* dl_program_run where reuse[j] (may be NULL) is a tensor of the caller's that output j is
 * written into when its dtype and shape match (then outputs[j] == reuse[j], still the
 * caller's); others are allocated as usual. A reused tensor must not be an input. */
dl_status dl_program_run_reuse(dl_ctx *ctx, dl_program *p, int n_inputs, const char *const *names,
                               dl_tensor *const *inputs, dl_tensor **outputs,
                               dl_tensor *const *reuse);

#endif
