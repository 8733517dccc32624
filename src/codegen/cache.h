/* cache.h — private to the JIT: the on-disk compile cache (layout, verified lookups, atomic
 * publication, listing and clearing) and the scratch build folders.
 *
 * Layout of the cache folder (nothing else in it is ever touched):
 *   <key>.so, <key>.o      a model's shared object / a shared source's object file
 *   <key>.meta             "dlcc-cache-meta 1", the entry's file name, size and XXH3-128
 *   <key>.probe            a remembered compiler probe (e.g. whether -pthread works)
 *   <key>.<ext>.tmp.<pid>[.<n>] a file being written, renamed into place when complete
 *   tmp-<pid>-XXXXXX/      a build in progress (one folder per build, flat)
 * where <key> is 32 lowercase hex digits. */
#ifndef DL_CACHE_H
#define DL_CACHE_H

#include "jit.h"

#define DL_CACHE_KEY_HEX 32

/* Creates the folder (and its parents, mode 0700) and checks that it is a directory owned by
 * this user that nobody else can write: a folder others can write to could hand us their code.
 * False (with the reason in why) when it cannot be used. */
bool dl_cache_prepare(const char *dir, char *why, size_t why_n);

/* True when <dir>/<key><ext> is a regular file whose size and checksum match <key>.meta. */
bool dl_cache_entry_ok(const char *dir, const char *key, const char *ext);

/* Moves the finished file `built` to <dir>/<key><ext> (rename: readers see the old entry or
 * the new one, never a partial file), then writes <key>.meta the same way. */
dl_status dl_cache_publish(dl_ctx *ctx, const char *dir, const char *key, const char *ext,
                           const char *built);

/* A small remembered value (a probe result) under <dir>/<key>.probe. */
bool dl_cache_probe_get(const char *dir, const char *key, int *value);
void dl_cache_probe_put(const char *dir, const char *key, int value);

/* A fresh private build folder: tmp-<pid>-XXXXXX inside `parent`, or dlcc-XXXXXX inside
 * $TMPDIR (else /tmp) when parent is NULL. */
dl_status dl_build_dir_make(dl_ctx *ctx, const char *parent, char *out, size_t n);
/* Removes a build folder made above: its plain files, then the folder (one level, no links
 * followed). */
void dl_build_dir_remove(const char *path);

/* Writes text to path (created 0600, truncated). */
dl_status dl_write_text(dl_ctx *ctx, const char *path, const char *text);

#endif
