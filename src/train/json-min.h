/* json-min.h — a small strict JSON reader and a string writer, for checkpoint headers
 * (safetensors.c). It reads only what such a header holds — objects, strings, arrays of
 * non-negative integers — as a pull parser the caller drives, so the expected shape is spelled
 * out in the caller and no recursion depends on the input. Input is untrusted: every read is
 * bounded by the text's end, strings must be valid UTF-8 without control characters, escapes
 * are checked (surrogate pairs joined, \u0000 refused since names are C strings). The first
 * error is kept with its byte offset. */
#ifndef DL_JSON_MIN_H
#define DL_JSON_MIN_H

#include "../core/strbuf.h"

typedef struct dl_jm {
    const char *start, *p, *end;
    const char *err; /* first error (static text), NULL while none */
    size_t err_at;   /* its byte offset in the text */
    bool nomem;      /* the error is an allocation failure */
} dl_jm;

void dl_jm_init(dl_jm *j, const char *text, size_t len);
/* Records an error at the current position (the first one wins); returns false. */
bool dl_jm_fail(dl_jm *j, const char *what);
/* The next byte after whitespace (not consumed), 0 at the end of the text. */
int dl_jm_peek(dl_jm *j);
/* Consumes c after whitespace, else records "expected 'c'". */
bool dl_jm_expect(dl_jm *j, char c);
/* Inside an object or array whose opening bracket was consumed: returns 1 when another element
 * follows (its separating comma consumed), 0 when `close` was consumed, -1 on error. *count is
 * the number of elements seen so far (the caller starts it at 0). */
int dl_jm_next(dl_jm *j, char close, int *count);
/* A string, decoded into a dl_malloc'd NUL-terminated copy. */
bool dl_jm_string(dl_jm *j, char **out);
/* A non-negative integer in JSON syntax (no sign, fraction, exponent or leading zeros), at most
 * INT64_MAX. */
bool dl_jm_uint(dl_jm *j, uint64_t *out);
/* Only whitespace remains. */
bool dl_jm_finish(dl_jm *j);

/* Whether s is valid UTF-8 (no overlong forms, surrogates or code points past U+10FFFF). */
bool dl_jm_utf8_valid(const char *s);
/* Appends s (valid UTF-8) as a JSON string literal with quotes and escapes. */
void dl_jm_put_string(dl_sbuf *b, const char *s);

#endif
