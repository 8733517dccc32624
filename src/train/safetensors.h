/* safetensors.h — checkpoint files in the safetensors format
 * (https://huggingface.co/docs/safetensors): an 8-byte little-endian header length N, N bytes of
 * JSON ({"__metadata__": {string: string}, name: {"dtype", "shape", "data_offsets"}}) padded
 * with spaces to a multiple of 8, then the raw little-endian row-major data of each tensor,
 * contiguous, in the header's order.
 *
 * Saving is crash-safe: the file is written to "<path>.tmp.<pid>" next to it, synced, renamed
 * over path and the directory synced, so path always holds a whole old or a whole new file.
 * dlcc adds three metadata entries (reserved: callers may not pass "dlcc.*" keys):
 *   dlcc.data_bytes   size of the data section, decimal
 *   dlcc.data_xxh3    XXH3-64 of the data section, 16 lowercase hex digits
 *   dlcc.header_xxh3  XXH3-64 of the header's contents (every metadata entry but this one, then
 *                     every tensor's name, dtype, shape and offsets, in header order; see
 *                     header_hash in safetensors.c), so a changed name, dtype or shape is caught
 *                     even where the JSON still parses.
 * Loading treats the file as untrusted: strict JSON, every size and offset bounded, the checksums
 * verified when present (files from other tools, without them, load too). Errors are one line
 * naming the file: "checkpoint 'x.st': checksum mismatch (file corrupt)". */
#ifndef DL_SAFETENSORS_H
#define DL_SAFETENSORS_H

#include "../core/core-impl.h"

typedef struct dl_st_file dl_st_file; /* a loaded file: its tensors and metadata, owned */

#define DL_ST_MAX_HEADER ((uint64_t)100 << 20) /* header bytes accepted on load */

/* Writes n tensors (names unique, valid UTF-8, not "__metadata__"; data NULL only when empty)
 * and n_meta metadata strings to path, atomically. On failure path is untouched and the temp
 * file removed. Temp names are unique (see core/atomic-file.h); a symlink at
 * path is replaced by the file, not followed. */
dl_status dl_st_save(dl_ctx *ctx, const char *path, int n, const char *const *names,
                     const dl_tensor *const *tensors, int n_meta, const char *const *meta_keys,
                     const char *const *meta_vals);
dl_status dl_st_load(dl_ctx *ctx, const char *path, dl_st_file **out);
void dl_st_free(dl_st_file *f);

/* Tensors in header order (for dlcc's own files: the order they were saved in). */
int dl_st_count(const dl_st_file *f);
const char *dl_st_name(const dl_st_file *f, int i);
const dl_tensor *dl_st_tensor(const dl_st_file *f, int i);
const dl_tensor *dl_st_find(const dl_st_file *f, const char *name); /* NULL if absent */
/* Metadata value, dlcc.* entries included; NULL if absent. */
const char *dl_st_meta(const dl_st_file *f, const char *key);

#endif
