/* codegen-impl.h — kernel selection and emission: which node becomes which kind of kernel
 * (select.c), and the C text of each fused group (emit.c), shared by the JIT (src/runtime) and
 * the AOT bundle writer (aot.c). */
#ifndef DL_CODEGEN_IMPL_H
#define DL_CODEGEN_IMPL_H

#include "../passes/fuse.h"
#include "lower.h"

/* Reduction facts of a ReduceX / Global*Pool node: kind and reduced-axis mask over the input's
 * rank. False when the node cannot be lowered (unknown axes, empty axes with noop...). */
bool dl_reduce_info(const dl_node *n, dl_reduce_kind *kind, bool mask[DL_MAX_RANK]);

/* How many dlrt_copy_strided calls a Slice, Split, Concat or Pad node runs as a COPY group (one
 * per Split output or Concat input, one for a Slice or Pad); -1 when it cannot be one
 * (copy-params.c; a Gather's COPY group is dl_gather_params_of's instead). */
int dl_copy_moves(const dl_node *n);

/* A value's type as a kernel buffer (slot = value id). False when its rank is unknown. */
bool dl_value_kbuf(const dl_value *v, dl_kbuf *kb);

/* The pointer array every kernel gets (module.h) holds one slot per value of g (by id), then
 * the kernel scratch (DLK_WS in the module), the run's error record (DLK_ERR: DLRT_ERR_WORDS
 * int64s, dlrt.h, where a kernel reports data it cannot use), then the prepacked weights
 * (DLK_PACK + k). The executor and the AOT bundle lay it out so. */
static inline int dl_slot_ws(const dl_graph *g) {
    return g->values.len;
}
static inline int dl_slot_err(const dl_graph *g) {
    return g->values.len + 1;
}
static inline int dl_slot_pack(const dl_graph *g, int k) {
    return g->values.len + 2 + k;
}

/* Emits the C function `name` for group gr (not for VIEW or FALLBACK groups). Returns
 * DL_ERR_UNSUPPORTED (with a message) when this group cannot be generated after all; the caller
 * then runs its nodes as fallbacks. A kernel that needs scratch memory (dl_group_workspace in
 * emit-params.h) finds it at b[DLK_WS]. */
/* Weights the module packs once into the GEMM microkernel's layout (module.h: dlk_pack*): the
 * kernel of request k reads the packed copy at b[DLK_PACK + k] (NULL: pack per call, as in AOT
 * bundles). src is the constant's value id, offset the element of it where the operand starts
 * (one direction's matrix of an RNN's weights); the rest are dlrt_gemm_pack_operand's
 * arguments. */
typedef struct dl_pack_req {
    int src, operand, trans;
    int64_t lines, K, ld, offset;
} dl_pack_req;
typedef struct dl_packs {
    dl_pack_req *items;
    int n, cap;
} dl_packs;

/* packs may be NULL (no packing requested). */
dl_status dl_emit_group(dl_ctx *ctx, const dl_group *gr, const dl_target *t, const char *name,
                        dl_packs *packs, dl_sbuf *sb);

/* The runtime-kernel sources embedded at build time (src/kernels/rt/). */
typedef struct dl_rt_file {
    const char *name;
    const char *text;
} dl_rt_file;
extern const dl_rt_file dl_rt_files[];
extern const int dl_rt_n_files;

#endif
