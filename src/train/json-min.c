/* json-min.c — the strict JSON pull reader and string writer of json-min.h. */
#include "json-min.h"

void dl_jm_init(dl_jm *j, const char *text, size_t len) {
    memset(j, 0, sizeof *j);
    j->start = j->p = text;
    j->end = text + len;
}

bool dl_jm_fail(dl_jm *j, const char *what) {
    if (!j->err) {
        j->err = what;
        j->err_at = (size_t)(j->p - j->start);
    }
    return false;
}

static void skip_ws(dl_jm *j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
        j->p++;
}

int dl_jm_peek(dl_jm *j) {
    skip_ws(j);
    return j->p < j->end ? (unsigned char)*j->p : 0;
}

bool dl_jm_expect(dl_jm *j, char c) {
    static const char *const msgs[] = {"expected '{'", "expected '}'", "expected '['",
                                       "expected ']'", "expected ':'", "expected ','",
                                       "expected '\"'"};
    static const char chars[] = "{}[]:,\"";
    if (dl_jm_peek(j) == (unsigned char)c) {
        j->p++;
        return true;
    }
    const char *hit = strchr(chars, c);
    return dl_jm_fail(j, hit ? msgs[hit - chars] : "unexpected character");
}

int dl_jm_next(dl_jm *j, char close, int *count) {
    int c = dl_jm_peek(j);
    if (c == (unsigned char)close) {
        j->p++;
        return 0;
    }
    if (c == 0) {
        dl_jm_fail(j, "unexpected end of text");
        return -1;
    }
    if (*count > 0) {
        if (c != ',') {
            dl_jm_fail(j, close == '}' ? "expected ',' or '}'" : "expected ',' or ']'");
            return -1;
        }
        j->p++;
        if (dl_jm_peek(j) == (unsigned char)close) { /* JSON has no trailing commas */
            dl_jm_fail(j, "trailing comma");
            return -1;
        }
    }
    (*count)++;
    return 1;
}

/* Length of the well-formed UTF-8 sequence at s (Unicode table 3-7), 0 when there is none. */
static size_t utf8_seq(const unsigned char *s, const unsigned char *end) {
    unsigned c = s[0], lo = 0x80, hi = 0xBF; /* the range allowed for the second byte */
    size_t n;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) {
        n = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        if (c == 0xE0) lo = 0xA0; /* overlong */
        if (c == 0xED) hi = 0x9F; /* surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        if (c == 0xF0) lo = 0x90; /* overlong */
        if (c == 0xF4) hi = 0x8F; /* past U+10FFFF */
    } else {
        return 0;
    }
    if ((size_t)(end - s) < n || s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < n; i++)
        if (s[i] < 0x80 || s[i] > 0xBF) return 0;
    return n;
}

bool dl_jm_utf8_valid(const char *s) {
    const unsigned char *p = (const unsigned char *)s, *end = p + strlen(s);
    while (p < end) {
        size_t n = utf8_seq(p, end);
        if (!n) return false;
        p += n;
    }
    return true;
}

static int hex_digit(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Four hex digits after "\u" at p (bounded by end); -1 when they are not there. */
static long hex4(const char *p, const char *end) {
    if (end - p < 4) return -1;
    long v = 0;
    for (int i = 0; i < 4; i++) {
        int d = hex_digit((unsigned char)p[i]);
        if (d < 0) return -1;
        v = v << 4 | d;
    }
    return v;
}

static size_t put_utf8(char *out, unsigned long cp) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | cp >> 6);
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | cp >> 12);
        out[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | cp >> 18);
    out[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    out[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* One escape after the backslash at j->p; appends its UTF-8 to out. */
static bool read_escape(dl_jm *j, char *out, size_t *len) {
    static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
    if (j->end - j->p < 2) return dl_jm_fail(j, "unterminated string");
    char c = j->p[1];
    const char *hit = c ? strchr(from, c) : NULL;
    if (hit) {
        out[(*len)++] = to[hit - from];
        j->p += 2;
        return true;
    }
    if (c != 'u') return dl_jm_fail(j, "invalid escape in string");
    long cp = hex4(j->p + 2, j->end);
    if (cp < 0) return dl_jm_fail(j, "invalid \\u escape in string");
    if (cp >= 0xDC00 && cp <= 0xDFFF) return dl_jm_fail(j, "lone low surrogate in string");
    if (cp >= 0xD800 && cp <= 0xDBFF) {
        long lo = (j->end - j->p >= 12 && j->p[6] == '\\' && j->p[7] == 'u') ? hex4(j->p + 8, j->end)
                                                                             : -1;
        if (lo < 0xDC00 || lo > 0xDFFF) return dl_jm_fail(j, "lone high surrogate in string");
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        j->p += 6;
    }
    if (cp == 0) return dl_jm_fail(j, "\\u0000 in string (names are C strings)");
    *len += put_utf8(out + *len, (unsigned long)cp);
    j->p += 6;
    return true;
}

bool dl_jm_string(dl_jm *j, char **out) {
    *out = NULL;
    if (!dl_jm_expect(j, '"')) return false;
    /* find the closing quote first: the decoded text is never longer than the raw text */
    const char *q = j->p;
    while (q < j->end && *q != '"') q += (*q == '\\' && q + 1 < j->end) ? 2 : 1;
    if (q >= j->end) return dl_jm_fail(j, "unterminated string");
    char *s = dl_malloc((size_t)(q - j->p) + 1);
    if (!s) {
        j->nomem = true;
        return dl_jm_fail(j, "out of memory");
    }
    size_t len = 0;
    while (j->p < q) {
        unsigned char c = (unsigned char)*j->p;
        if (c == '\\') {
            if (!read_escape(j, s, &len)) break;
            continue;
        }
        if (c < 0x20) {
            dl_jm_fail(j, "control character in string");
            break;
        }
        size_t n = utf8_seq((const unsigned char *)j->p, (const unsigned char *)q);
        if (!n) {
            dl_jm_fail(j, "invalid UTF-8 in string");
            break;
        }
        memcpy(s + len, j->p, n);
        len += n;
        j->p += n;
    }
    if (j->p != q) {
        dl_free(s);
        return false;
    }
    j->p++;
    s[len] = 0;
    *out = s;
    return true;
}

bool dl_jm_uint(dl_jm *j, uint64_t *out) {
    int c = dl_jm_peek(j);
    if (c == '-') return dl_jm_fail(j, "negative number");
    if (c < '0' || c > '9') return dl_jm_fail(j, "expected an integer");
    if (c == '0' && j->p + 1 < j->end && j->p[1] >= '0' && j->p[1] <= '9')
        return dl_jm_fail(j, "number with a leading zero");
    uint64_t v = 0;
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') {
        unsigned d = (unsigned)(*j->p - '0');
        if (v > ((uint64_t)INT64_MAX - d) / 10) return dl_jm_fail(j, "integer too large");
        v = v * 10 + d;
        j->p++;
    }
    if (j->p < j->end && (*j->p == '.' || *j->p == 'e' || *j->p == 'E'))
        return dl_jm_fail(j, "expected an integer, found a fraction or exponent");
    *out = v;
    return true;
}

bool dl_jm_finish(dl_jm *j) {
    if (dl_jm_peek(j) != 0 || j->p != j->end) return dl_jm_fail(j, "unexpected text after the end");
    return true;
}

void dl_jm_put_string(dl_sbuf *b, const char *s) {
    static const char short_esc[] = "\b\f\n\r\t", short_name[] = "bfnrt";
    dl_sb_putn(b, "\"", 1);
    for (const char *p = s; *p; p++) {
        unsigned char c = (unsigned char)*p;
        const char *hit = strchr(short_esc, c);
        if (c == '"' || c == '\\') {
            char esc[2] = {'\\', (char)c};
            dl_sb_putn(b, esc, 2);
        } else if (hit) {
            char esc[2] = {'\\', short_name[hit - short_esc]};
            dl_sb_putn(b, esc, 2);
        } else if (c < 0x20) {
            dl_sb_printf(b, "\\u%04X", c);
        } else {
            dl_sb_putn(b, p, 1);
        }
    }
    dl_sb_putn(b, "\"", 1);
}
