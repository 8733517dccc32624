/* module.h — one C translation unit holding every generated kernel of a program, plus the
 * small exported interface the runtime looks up with dlsym (and the AOT bundle calls):
 *   void (*const dlk_kernels[])(void *const *b, const int64_t *s)   one per group, NULL when
 *                                  the group is a view or runs its reference kernel
 *   const int dlk_n_kernels;
 *   void dlk_set_threads(int n);   the kernels' thread count (dlrt_set_threads)
 *   const int dlk_n_packs, dlk_pack_src[];     weights to pack once (value ids of constants)
 *   int64_t dlk_pack_bytes(int k); void dlk_pack(int k, const void *src, void *dst);
 * Kernels find value pointers at b[id], scratch at b[DLK_WS], the run's error record at
 * b[DLK_ERR] and packed weight k at b[DLK_PACK + k] (NULL: they pack per call); see dl_slot_ws
 * in codegen-impl.h. */
#ifndef DL_MODULE_H
#define DL_MODULE_H

#include "codegen-impl.h"

/* Emits the module for fusion f of graph g. A group whose emission reports DL_ERR_UNSUPPORTED
 * is split into one FALLBACK group per node (f is modified) and a note is added to `notes`
 * (may be NULL). *n_generated counts the kernels emitted. */
dl_status dl_module_emit(dl_ctx *ctx, dl_graph *g, dl_fusion *f, const dl_target *t, dl_sbuf *sb,
                         int *n_generated, dl_sbuf *notes);

#endif
