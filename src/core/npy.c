/* npy.c — NumPy .npy reader and writer (format versions 1.0, 2.0 and 3.0; little-endian; C order).
 * Files are untrusted: the header is parsed with bounds checks and the data size must match. */
#include "core-impl.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>

static const struct {
    const char *descr;
    dl_dtype dtype;
} npy_types[] = {
    {"f4", DL_F32}, {"f8", DL_F64}, {"f2", DL_F16}, {"i1", DL_I8}, {"u1", DL_U8},
    {"i2", DL_I16}, {"u2", DL_U16}, {"i4", DL_I32}, {"u4", DL_U32}, {"i8", DL_I64},
    {"u8", DL_U64}, {"b1", DL_BOOL},
};

/* Finds 'key' in the header dict and returns a pointer just past the following ':'. */
static const char *find_key(const char *hdr, const char *key) {
    char pat[32];
    snprintf(pat, sizeof pat, "'%s'", key);
    const char *p = strstr(hdr, pat);
    if (!p) {
        snprintf(pat, sizeof pat, "\"%s\"", key);
        p = strstr(hdr, pat);
    }
    if (!p) return NULL;
    p = strchr(p + strlen(pat), ':');
    if (!p) return NULL;
    p++;
    while (*p == ' ') p++;
    return p;
}

static dl_status parse_header(dl_ctx *ctx, const char *path, const char *hdr, dl_dtype *dtype,
                              int *rank, int64_t *dims) {
    const char *p = find_key(hdr, "descr");
    if (!p || (*p != '\'' && *p != '"'))
        return dl_fail(ctx, DL_ERR_PARSE, "%s: .npy header has no 'descr'", path);
    char q = *p++;
    char descr[16] = {0};
    size_t n = 0;
    while (*p && *p != q && n < sizeof descr - 1) descr[n++] = *p++;
    if (*p != q) return dl_fail(ctx, DL_ERR_PARSE, "%s: bad 'descr' in .npy header", path);
    const char *code = descr;
    if (*code == '<' || *code == '|' || *code == '=') code++;
    else if (*code == '>' && !(code[2] == '1' && code[3] == 0))
        return dl_fail(ctx, DL_ERR_UNSUPPORTED, "%s: big-endian .npy data (%s) is not supported", path,
                       descr);
    else if (*code == '>') code++;
    *dtype = DL_DTYPE_UNDEFINED;
    for (size_t i = 0; i < DL_ARRAY_LEN(npy_types); i++)
        if (strcmp(code, npy_types[i].descr) == 0) *dtype = npy_types[i].dtype;
    if (*dtype == DL_DTYPE_UNDEFINED)
        return dl_fail(ctx, DL_ERR_UNSUPPORTED, "%s: .npy dtype '%s' is not supported", path, descr);

    p = find_key(hdr, "fortran_order");
    if (!p) return dl_fail(ctx, DL_ERR_PARSE, "%s: .npy header has no 'fortran_order'", path);
    if (strncmp(p, "True", 4) == 0)
        return dl_fail(ctx, DL_ERR_UNSUPPORTED, "%s: Fortran-order .npy arrays are not supported", path);

    p = find_key(hdr, "shape");
    if (!p || *p != '(') return dl_fail(ctx, DL_ERR_PARSE, "%s: .npy header has no 'shape'", path);
    p++;
    *rank = 0;
    for (;;) {
        while (*p == ' ' || *p == ',') p++;
        if (*p == ')') break;
        if (!isdigit((unsigned char)*p))
            return dl_fail(ctx, DL_ERR_PARSE, "%s: bad 'shape' in .npy header", path);
        if (*rank == DL_MAX_RANK)
            return dl_fail(ctx, DL_ERR_UNSUPPORTED, "%s: .npy rank above %d", path, DL_MAX_RANK);
        errno = 0;
        char *end;
        long long v = strtoll(p, &end, 10);
        if (errno || v < 0) return dl_fail(ctx, DL_ERR_PARSE, "%s: bad dimension in .npy header", path);
        dims[(*rank)++] = v;
        p = end;
    }
    return DL_OK;
}

dl_status dl_npy_load(dl_ctx *ctx, const char *path, dl_tensor **out) {
    *out = NULL;
    void *buf;
    size_t size;
    DL_TRY(dl_read_file(ctx, path, dl_alloc_limit(), &buf, &size));
    const unsigned char *b = buf;
    dl_status s = DL_OK;
    if (size < 10 || memcmp(b, "\x93NUMPY", 6) != 0) {
        s = dl_fail(ctx, DL_ERR_PARSE, "%s: not a .npy file (bad magic)", path);
        goto done;
    }
    int major = b[6];
    size_t hlen, hstart;
    if (major == 1) {
        hlen = (size_t)b[8] | (size_t)b[9] << 8;
        hstart = 10;
    } else if (major == 2 || major == 3) {
        if (size < 12) {
            s = dl_fail(ctx, DL_ERR_PARSE, "%s: truncated .npy header", path);
            goto done;
        }
        hlen = (size_t)b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 | (size_t)b[11] << 24;
        hstart = 12;
    } else {
        s = dl_fail(ctx, DL_ERR_UNSUPPORTED, "%s: .npy format version %d", path, major);
        goto done;
    }
    if (hlen > size - hstart) {
        s = dl_fail(ctx, DL_ERR_PARSE, "%s: truncated .npy header", path);
        goto done;
    }
    char *hdr = dl_malloc(hlen + 1);
    if (!hdr) {
        s = dl_fail(ctx, DL_ERR_NOMEM, "out of memory");
        goto done;
    }
    memcpy(hdr, b + hstart, hlen);
    hdr[hlen] = 0;
    dl_dtype dtype = DL_DTYPE_UNDEFINED;
    int rank = 0;
    int64_t dims[DL_MAX_RANK];
    s = parse_header(ctx, path, hdr, &dtype, &rank, dims);
    dl_free(hdr);
    if (s != DL_OK) goto done;
    dl_tensor *t;
    s = dl_tensor_new(ctx, dtype, rank, dims, &t);
    if (s != DL_OK) goto done;
    size_t data_off = hstart + hlen;
    if (size - data_off != t->nbytes) {
        char d[256];
        s = dl_fail(ctx, DL_ERR_PARSE, "%s: .npy data is %zu bytes but %s%s needs %zu", path,
                    size - data_off, dl_dtype_name(dtype), dl_dims_str(rank, dims, d, sizeof d),
                    t->nbytes);
        dl_tensor_free(t);
        goto done;
    }
    memcpy(t->data, b + data_off, t->nbytes);
    *out = t;
done:
    dl_free(buf);
    return s;
}

dl_status dl_npy_save(dl_ctx *ctx, const char *path, const dl_tensor *t) {
    const char *descr = NULL;
    for (size_t i = 0; i < DL_ARRAY_LEN(npy_types); i++)
        if (npy_types[i].dtype == t->dtype) descr = npy_types[i].descr;
    if (!descr)
        return dl_fail(ctx, DL_ERR_UNSUPPORTED, "%s: dtype %s cannot be written as .npy", path,
                       dl_dtype_name(t->dtype));
    /* numpy spells shapes as Python tuples: (), (5,), (1, 3) */
    char shape[512] = "(";
    size_t used = 1;
    for (int i = 0; i < t->rank; i++)
        used += (size_t)snprintf(shape + used, sizeof shape - used, "%s%lld", i ? ", " : "",
                                 (long long)t->dims[i]);
    snprintf(shape + used, sizeof shape - used, t->rank == 1 ? ",)" : ")");
    char hdr[640];
    int n = snprintf(hdr, sizeof hdr, "{'descr': '%c%s', 'fortran_order': False, 'shape': %s, }",
                     (descr[1] == '1') ? '|' : '<', descr, shape);
    /* pad with spaces so that magic + header is a multiple of 64, ending in '\n' */
    size_t total = 10 + (size_t)n + 1;
    size_t pad = (64 - total % 64) % 64;
    FILE *f = fopen(path, "wb");
    if (!f) return dl_fail(ctx, DL_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
    size_t hlen = (size_t)n + pad + 1;
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hlen & 0xff),
                             (unsigned char)(hlen >> 8)};
    bool ok = fwrite(pre, 1, 10, f) == 10 && fwrite(hdr, 1, (size_t)n, f) == (size_t)n;
    for (size_t i = 0; ok && i < pad; i++) ok = fputc(' ', f) != EOF;
    ok = ok && fputc('\n', f) != EOF;
    ok = ok && (t->nbytes == 0 || fwrite(t->data, 1, t->nbytes, f) == t->nbytes);
    ok = (fclose(f) == 0) && ok;
    if (!ok) return dl_fail(ctx, DL_ERR_IO, "%s: write failed", path);
    return DL_OK;
}
