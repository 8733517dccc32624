/* cache-cmd.c — the public face of the compile cache (dlcc cache ls|clear). */
#include "program-impl.h"

dl_status dl_cache_ls(dl_ctx *ctx, void *file) {
    dl_jit_opts o = {0};
    return dl_cache_list(ctx, &o, file ? file : stdout);
}

dl_status dl_cache_clear_all(dl_ctx *ctx, int *removed) {
    dl_jit_opts o = {0};
    return dl_cache_clear(ctx, &o, removed);
}
