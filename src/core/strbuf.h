/* strbuf.h — a growable string for code generation and reports. Errors are sticky: after an
 * allocation failure every append is a no-op and dl_sb_status reports DL_ERR_NOMEM. */
#ifndef DL_STRBUF_H
#define DL_STRBUF_H

#include "core-impl.h"

typedef struct dl_sbuf {
    char *s;    /* NUL-terminated; NULL until the first append */
    size_t len, cap;
    bool failed;
} dl_sbuf;

void dl_sb_put(dl_sbuf *b, const char *s);
void dl_sb_putn(dl_sbuf *b, const char *s, size_t n);
void dl_sb_printf(dl_sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The text so far ("" when empty); valid until the next append. */
const char *dl_sb_str(const dl_sbuf *b);
dl_status dl_sb_status(dl_ctx *ctx, const dl_sbuf *b);
void dl_sb_free(dl_sbuf *b);

#endif
