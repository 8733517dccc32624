/* cmd-cache.c — `dlcc cache ls|clear`: the on-disk compile cache. */
#include "cli.h"

#include <string.h>

static const char help[] =
    "usage: dlcc cache ls | clear\n\n"
    "The compile cache ($DLCC_CACHE_DIR, default ~/.cache/dlcc) holds built kernels by a hash\n"
    "of their code, the compiler, its flags and the CPU.\n"
    "  ls     list entries with their size and age\n"
    "  clear  remove every entry\n";

int cmd_cache(int argc, char **argv) {
    if (argc < 2 || cli_is_help(argv[1])) {
        fputs(help, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    dl_ctx *ctx = dl_ctx_new();
    int rc = 0;
    if (!strcmp(argv[1], "ls")) {
        if (dl_cache_ls(ctx, stdout) != DL_OK) rc = cli_error("%s", dl_errmsg(ctx));
    } else if (!strcmp(argv[1], "clear")) {
        int removed = 0;
        if (dl_cache_clear_all(ctx, &removed) != DL_OK) rc = cli_error("%s", dl_errmsg(ctx));
        else printf("removed %d files\n", removed);
    } else {
        rc = cli_error("cache: unknown action '%s' (ls or clear)", argv[1]) + 1;
    }
    dl_ctx_free(ctx);
    return rc;
}
