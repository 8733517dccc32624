/* jit.h — building generated C into a shared object with the system C compiler, loading it with
 * dlopen, and the on-disk compile cache that makes the second build of the same code free.
 *
 * The cache is content-addressed: the key hashes every source's text, the compiler's identity
 * (path and `cc --version` output), the flags, the CPU's features and the dlcc cache format
 * version. Generated code receives weights by pointer, so weights never enter the key.
 * Layout: $DLCC_CACHE_DIR (default ~/.cache/dlcc) / <32 hex key>.so plus <key>.meta holding
 * the .so's own checksum and size; an entry whose checksum does not match is rebuilt, never
 * loaded. Writes go to a temp file then rename(), so concurrent compilers never see half files. */
#ifndef DL_JIT_H
#define DL_JIT_H

#include "../core/core-impl.h"

typedef struct dl_jit_src {
    const char *name; /* file name used for the temp source, e.g. "model.c" */
    const char *text;
    /* Sources marked shared (the runtime kernels) are compiled to an object cached by their own
     * key and reused by every model; others are compiled per model. */
    bool shared;
} dl_jit_src;

typedef struct dl_jit_opts {
    const char *cc;        /* NULL: $CC, else "cc" */
    const char *cflags;    /* NULL: $DLCC_CFLAGS, else "-O3 -march=native" (+ -fPIC -pthread) */
    const char *cache_dir; /* NULL: $DLCC_CACHE_DIR, else $HOME/.cache/dlcc */
    bool no_cache;         /* build in a temp dir and do not keep the result */
    bool verbose;          /* print compiler command lines to stderr */
} dl_jit_opts;

typedef struct dl_jit_info {
    bool cache_hit;
    double build_ms; /* time spent in the compiler (0 on a hit) */
    double total_ms; /* hashing + lookup + build + dlopen */
    char key[33];
    char path[1024]; /* the .so that was loaded */
} dl_jit_info;

typedef struct dl_jit_lib dl_jit_lib;

/* True when a C compiler can be run (cached per process). When false the caller falls back to
 * the reference interpreter with a warning. */
bool dl_jit_available(const dl_jit_opts *o);
dl_status dl_jit_build(dl_ctx *ctx, const dl_jit_opts *o, int n, const dl_jit_src *srcs,
                       dl_jit_lib **out, dl_jit_info *info);
void *dl_jit_sym(dl_jit_lib *lib, const char *name);
void dl_jit_close(dl_jit_lib *lib);

/* `dlcc cache ls|clear`: lists entries (key, size, age) to f / removes them. */
dl_status dl_cache_list(dl_ctx *ctx, const dl_jit_opts *o, FILE *f);
dl_status dl_cache_clear(dl_ctx *ctx, const dl_jit_opts *o, int *removed);
const char *dl_cache_dir(const dl_jit_opts *o, char *buf, size_t n);

#endif
