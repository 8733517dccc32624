/* strbuf.c — growable strings (see strbuf.h). */
#include "strbuf.h"

static bool reserve(dl_sbuf *b, size_t extra) {
    if (b->failed) return false;
    if (b->len + extra + 1 <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1) {
        if (cap > SIZE_MAX / 2) {
            b->failed = true;
            return false;
        }
        cap *= 2;
    }
    char *s = dl_realloc(b->s, cap);
    if (!s) {
        b->failed = true;
        return false;
    }
    b->s = s;
    b->cap = cap;
    return true;
}

void dl_sb_putn(dl_sbuf *b, const char *s, size_t n) {
    if (!reserve(b, n)) return;
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = '\0';
}

void dl_sb_put(dl_sbuf *b, const char *s) { dl_sb_putn(b, s, strlen(s)); }

void dl_sb_printf(dl_sbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n >= 0 && reserve(b, (size_t)n)) {
        vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap2);
        b->len += (size_t)n;
    } else if (n < 0) {
        b->failed = true;
    }
    va_end(ap2);
}

const char *dl_sb_str(const dl_sbuf *b) { return b->s ? b->s : ""; }

dl_status dl_sb_status(dl_ctx *ctx, const dl_sbuf *b) {
    return b->failed ? dl_fail(ctx, DL_ERR_NOMEM, "out of memory building text") : DL_OK;
}

void dl_sb_free(dl_sbuf *b) {
    dl_free(b->s);
    memset(b, 0, sizeof *b);
}
