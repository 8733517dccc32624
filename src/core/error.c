/* error.c — the context: first error wins, messages name what failed. */
#include "core-impl.h"

#include <stdlib.h>

static const char *const status_names[DL_STATUS_COUNT] = {
    [DL_OK] = "ok",
    [DL_ERR_IO] = "I/O error",
    [DL_ERR_PARSE] = "parse error",
    [DL_ERR_UNSUPPORTED] = "unsupported",
    [DL_ERR_SHAPE] = "shape error",
    [DL_ERR_TYPE] = "type error",
    [DL_ERR_INVALID] = "invalid argument",
    [DL_ERR_NOMEM] = "out of memory",
    [DL_ERR_LIMIT] = "limit exceeded",
    [DL_ERR_INTERNAL] = "internal error",
};
_Static_assert(DL_ARRAY_LEN(status_names) == DL_STATUS_COUNT, "status name per status");

const char *dl_status_name(dl_status s) {
    if ((unsigned)s >= DL_STATUS_COUNT) return "unknown status";
    return status_names[s];
}

dl_ctx *dl_ctx_new(void) { return dl_calloc(1, sizeof(dl_ctx)); }
void dl_ctx_free(dl_ctx *ctx) { dl_free(ctx); }

const char *dl_errmsg(const dl_ctx *ctx) {
    if (!ctx) return "no context";
    return ctx->status == DL_OK ? "" : ctx->msg;
}

void dl_ctx_clear(dl_ctx *ctx) {
    if (!ctx) return;
    ctx->status = DL_OK;
    ctx->msg[0] = 0;
}

dl_status dl_vfail(dl_ctx *ctx, dl_status status, const char *fmt, va_list ap) {
    if (!ctx || ctx->status != DL_OK) return status;
    ctx->status = status;
    vsnprintf(ctx->msg, sizeof ctx->msg, fmt, ap);
    /* names inside messages come from model files: keep the message on one printable line */
    for (char *c = ctx->msg; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = '?';
    return status;
}

dl_status dl_fail(dl_ctx *ctx, dl_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    dl_vfail(ctx, status, fmt, ap);
    va_end(ap);
    return status;
}

void dl_ctx_prefix(dl_ctx *ctx, const char *fmt, ...) {
    if (!ctx || ctx->status == DL_OK) return;
    char prefix[512], old[DL_ERRMSG_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, ctx->msg, sizeof old);
    snprintf(ctx->msg, sizeof ctx->msg, "%.500s: %.500s", prefix, old);
    for (char *c = ctx->msg; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = '?';
}

_Noreturn void dl_assert_fail(const char *cond, const char *file, int line) {
    fprintf(stderr, "dlcc internal error: assertion '%s' failed at %s:%d\n", cond, file, line);
    abort();
}

void dl_warn(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("dlcc: warning: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}
