/* safetensors.c — checkpoint files: the safetensors format, written atomically with dlcc's
 * checksums and read as untrusted input (see safetensors.h). */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "safetensors.h"

#include "json-min.h"
#include "../core/atomic-file.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data is little-endian and is written from and read into host memory as is"
#endif

#define META_BYTES "dlcc.data_bytes"
#define META_DATA "dlcc.data_xxh3"
#define META_HEADER "dlcc.header_xxh3"
#define META_RESERVED "dlcc."

static const struct {
    const char *name;
    dl_dtype dtype;
} st_types[] = {
    {"F64", DL_F64}, {"F32", DL_F32}, {"F16", DL_F16}, {"BF16", DL_BF16}, {"I64", DL_I64},
    {"I32", DL_I32}, {"I16", DL_I16}, {"I8", DL_I8},   {"U64", DL_U64},   {"U32", DL_U32},
    {"U16", DL_U16}, {"U8", DL_U8},   {"BOOL", DL_BOOL},
};
/* Valid safetensors dtypes that dlcc has no type for (refused as unsupported, not as corrupt). */
static const char *const st_foreign_types[] = {"F8_E4M3", "F8_E5M2", "F8_E8M0", "F6_E2M3",
                                               "F6_E3M2", "F4",      "C64"};

/* One tensor of a file. On save, name and dtype are borrowed; on load, both are owned. */
typedef struct st_entry {
    const char *name, *dtype;
    int rank; /* as read: may exceed DL_MAX_RANK until checked (only the first dims are kept) */
    int64_t dims[DL_MAX_RANK];
    uint64_t begin, end; /* data_offsets */
    dl_dtype type;       /* on load: set by check_entry */
    dl_tensor *t;
} st_entry;

struct dl_st_file {
    int n, n_meta;
    st_entry *e;
    char **keys, **vals;
    st_entry **by_name; /* sorted, for dl_st_find */
};

/* ---- shared by save and load ---- */

static void hash_u64(XXH3_state_t *h, uint64_t v) { XXH3_64bits_update(h, &v, sizeof v); }

static void hash_str(XXH3_state_t *h, const char *s) {
    size_t n = strlen(s);
    hash_u64(h, n);
    XXH3_64bits_update(h, s, n);
}

/* The header checksum: every metadata entry but META_HEADER, then every tensor's name, dtype,
 * shape and offsets, each string length-prefixed so that no two headers feed the same bytes. */
static uint64_t header_hash(int n_meta, const char *const *keys, const char *const *vals, int n,
                            const st_entry *e) {
    XXH3_state_t h;
    XXH3_64bits_reset(&h);
    hash_str(&h, "dlcc safetensors header 1");
    uint64_t counted = 0;
    for (int i = 0; i < n_meta; i++) counted += strcmp(keys[i], META_HEADER) != 0;
    hash_u64(&h, counted);
    for (int i = 0; i < n_meta; i++) {
        if (strcmp(keys[i], META_HEADER) == 0) continue;
        hash_str(&h, keys[i]);
        hash_str(&h, vals[i]);
    }
    hash_u64(&h, (uint64_t)n);
    for (int i = 0; i < n; i++) {
        hash_str(&h, e[i].name);
        hash_str(&h, e[i].dtype);
        hash_u64(&h, (uint64_t)e[i].rank);
        for (int d = 0; d < e[i].rank && d < DL_MAX_RANK; d++) hash_u64(&h, (uint64_t)e[i].dims[d]);
        hash_u64(&h, e[i].begin);
        hash_u64(&h, e[i].end);
    }
    return XXH3_64bits_digest(&h);
}

static void hex64(uint64_t v, char out[17]) { snprintf(out, 17, "%016llx", (unsigned long long)v); }

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int cmp_entry_name(const void *a, const void *b) {
    return strcmp((*(const st_entry *const *)a)->name, (*(const st_entry *const *)b)->name);
}

static int cmp_entry_offsets(const void *a, const void *b) {
    const st_entry *x = *(const st_entry *const *)a, *y = *(const st_entry *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

/* n pointers to e's entries sorted by cmp (dl_malloc'd; NULL on OOM). */
static st_entry **sorted_entries(st_entry *e, int n, int (*cmp)(const void *, const void *)) {
    st_entry **v = dl_malloc(sizeof *v * (size_t)(n ? n : 1));
    if (!v) return NULL;
    for (int i = 0; i < n; i++) v[i] = &e[i];
    qsort(v, (size_t)n, sizeof *v, cmp);
    return v;
}

/* The first string occurring twice among n (NULL when all differ); *nomem on OOM. */
static const char *duplicate_string(const char *const *s, int n, bool *nomem) {
    *nomem = false;
    if (n < 2) return NULL;
    const char **v = dl_malloc(sizeof *v * (size_t)n);
    if (!v) {
        *nomem = true;
        return NULL;
    }
    memcpy(v, s, sizeof *v * (size_t)n);
    qsort(v, (size_t)n, sizeof *v, cmp_str);
    const char *dup = NULL;
    for (int i = 1; i < n && !dup; i++)
        if (strcmp(v[i - 1], v[i]) == 0) dup = v[i];
    dl_free(v);
    return dup;
}

/* ---- save ---- */

typedef struct st_contents {
    const dl_sbuf *hdr;
    int n;
    const dl_tensor *const *tensors;
} st_contents;

static dl_status put_contents(dl_ctx *ctx, dl_atomic_file *f, void *arg) {
    DL_UNUSED(ctx);
    const st_contents *c = arg;
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)c->hdr->len >> (8 * i));
    bool ok = dl_atomic_put(f, len8, 8) && dl_atomic_put(f, dl_sb_str(c->hdr), c->hdr->len);
    for (int i = 0; ok && i < c->n; i++)
        ok = dl_atomic_put(f, c->tensors[i]->data, c->tensors[i]->nbytes);
    return DL_OK; /* a failed put is reported by dl_atomic_write */
}

static const char *st_type_name(dl_dtype t) {
    for (size_t i = 0; i < DL_ARRAY_LEN(st_types); i++)
        if (st_types[i].dtype == t) return st_types[i].name;
    return NULL;
}

/* Everything a caller can get wrong, before anything is written. */
static dl_status check_save_args(dl_ctx *ctx, const char *path, int n, const char *const *names,
                                 const dl_tensor *const *tensors, int n_meta,
                                 const char *const *keys, const char *const *vals) {
    uint64_t total = 0;
    for (int i = 0; i < n; i++) {
        const dl_tensor *t = tensors[i];
        if (!names[i] || !t)
            return dl_fail(ctx, DL_ERR_INVALID, "checkpoint '%s': tensor %d has no name or no tensor",
                           path, i);
        if (!dl_jm_utf8_valid(names[i]) || strcmp(names[i], "__metadata__") == 0)
            return dl_fail(ctx, DL_ERR_INVALID,
                           "checkpoint '%s': tensor name '%.200s' is not valid UTF-8 or is reserved",
                           path, names[i]);
        if (!st_type_name(t->dtype))
            return dl_fail(ctx, DL_ERR_UNSUPPORTED, "checkpoint '%s': tensor '%.200s' has dtype %s, "
                           "which safetensors cannot store", path, names[i], dl_dtype_name(t->dtype));
        if (t->nbytes && !t->data)
            return dl_fail(ctx, DL_ERR_INVALID, "checkpoint '%s': tensor '%.200s' has no data", path,
                           names[i]);
        if (t->nbytes > UINT64_MAX - total)
            return dl_fail(ctx, DL_ERR_LIMIT, "checkpoint '%s': the data size overflows", path);
        total += t->nbytes;
    }
    for (int i = 0; i < n_meta; i++) {
        if (!keys[i] || !vals[i] || !dl_jm_utf8_valid(keys[i]) || !dl_jm_utf8_valid(vals[i]))
            return dl_fail(ctx, DL_ERR_INVALID,
                           "checkpoint '%s': metadata entry %d is missing or not valid UTF-8", path, i);
        if (strncmp(keys[i], META_RESERVED, strlen(META_RESERVED)) == 0)
            return dl_fail(ctx, DL_ERR_INVALID, "checkpoint '%s': metadata key '%.200s' is reserved "
                           "(dlcc.* keys are written by dlcc)", path, keys[i]);
    }
    bool nomem;
    const char *dup = duplicate_string(names, n, &nomem);
    if (!nomem && !dup) dup = duplicate_string(keys, n_meta, &nomem);
    if (nomem) return dl_fail(ctx, DL_ERR_NOMEM, "checkpoint '%s': out of memory", path);
    if (dup)
        return dl_fail(ctx, DL_ERR_INVALID, "checkpoint '%s': name '%.200s' is given twice", path,
                       dup);
    return DL_OK;
}

static void put_header(dl_sbuf *b, int n_meta, const char *const *keys, const char *const *vals,
                       int n, const st_entry *e) {
    dl_sb_put(b, "{\"__metadata__\":{");
    for (int i = 0; i < n_meta; i++) {
        if (i) dl_sb_put(b, ",");
        dl_jm_put_string(b, keys[i]);
        dl_sb_put(b, ":");
        dl_jm_put_string(b, vals[i]);
    }
    dl_sb_put(b, "}");
    for (int i = 0; i < n; i++) {
        dl_sb_put(b, ",");
        dl_jm_put_string(b, e[i].name);
        dl_sb_printf(b, ":{\"dtype\":\"%s\",\"shape\":[", e[i].dtype);
        for (int d = 0; d < e[i].rank; d++)
            dl_sb_printf(b, d ? ",%lld" : "%lld", (long long)e[i].dims[d]);
        dl_sb_printf(b, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)e[i].begin,
                     (unsigned long long)e[i].end);
    }
    dl_sb_put(b, "}");
    while (!b->failed && b->len % 8) dl_sb_put(b, " "); /* the data then starts 8-aligned */
}

dl_status dl_st_save(dl_ctx *ctx, const char *path, int n, const char *const *names,
                     const dl_tensor *const *tensors, int n_meta, const char *const *meta_keys,
                     const char *const *meta_vals) {
    if (!path || n < 0 || n_meta < 0 || (n && (!names || !tensors)) ||
        (n_meta && (!meta_keys || !meta_vals)) || n_meta > INT_MAX - 3)
        return dl_fail(ctx, DL_ERR_INVALID, "checkpoint '%s': invalid arguments to save",
                       path ? path : "(null)");
    DL_TRY(check_save_args(ctx, path, n, names, tensors, n_meta, meta_keys, meta_vals));
    st_entry *e = dl_calloc((size_t)(n ? n : 1), sizeof *e);
    const char **keys = dl_malloc(sizeof *keys * ((size_t)n_meta + 3));
    const char **vals = dl_malloc(sizeof *vals * ((size_t)n_meta + 3));
    if (!e || !keys || !vals) {
        dl_free(e);
        dl_free(keys);
        dl_free(vals);
        return dl_fail(ctx, DL_ERR_NOMEM, "checkpoint '%s': out of memory", path);
    }
    XXH3_state_t h;
    XXH3_64bits_reset(&h);
    uint64_t total = 0;
    for (int i = 0; i < n; i++) {
        const dl_tensor *t = tensors[i];
        e[i] = (st_entry){.name = names[i], .dtype = st_type_name(t->dtype), .rank = t->rank,
                          .begin = total, .end = total + t->nbytes};
        memcpy(e[i].dims, t->dims, sizeof t->dims);
        total += t->nbytes; /* check_save_args made sure this does not overflow */
        if (t->nbytes) XXH3_64bits_update(&h, t->data, t->nbytes);
    }
    char bytes_s[24], data_hex[17], header_hex[17];
    snprintf(bytes_s, sizeof bytes_s, "%llu", (unsigned long long)total);
    hex64(XXH3_64bits_digest(&h), data_hex);
    for (int i = 0; i < n_meta; i++) {
        keys[i] = meta_keys[i];
        vals[i] = meta_vals[i];
    }
    keys[n_meta] = META_BYTES, vals[n_meta] = bytes_s;
    keys[n_meta + 1] = META_DATA, vals[n_meta + 1] = data_hex;
    keys[n_meta + 2] = META_HEADER, vals[n_meta + 2] = header_hex;
    hex64(header_hash(n_meta + 2, keys, vals, n, e), header_hex);

    dl_sbuf hdr = {0};
    put_header(&hdr, n_meta + 3, keys, vals, n, e);
    dl_status s = hdr.failed ? dl_fail(ctx, DL_ERR_NOMEM, "checkpoint '%s': out of memory "
                                       "building the header", path)
                             : DL_OK;
    if (s == DL_OK && hdr.len > DL_ST_MAX_HEADER)
        s = dl_fail(ctx, DL_ERR_LIMIT, "checkpoint '%s': header of %zu bytes exceeds the %llu "
                    "bytes a checkpoint may hold", path, hdr.len, (unsigned long long)DL_ST_MAX_HEADER);
    st_contents contents = {&hdr, n, tensors};
    if (s == DL_OK)
        s = dl_atomic_write(ctx, path, "checkpoint",
                            DL_ATOMIC_SYNC | DL_ATOMIC_SYNC_DIR | DL_ATOMIC_REMOVE_STALE,
                            put_contents, &contents);
    dl_sb_free(&hdr);
    dl_free(e);
    dl_free(keys);
    dl_free(vals);
    return s;
}

/* ---- load: the header ---- */

/* Grows *v (of elements of size sz, *cap of them) to hold at least need; false on OOM. */
static bool grow(void **v, int *cap, int need, size_t sz) {
    if (need <= *cap) return true;
    int c = *cap ? *cap : 16;
    while (c < need) c = c > INT_MAX / 2 ? INT_MAX : c * 2;
    void *p = dl_realloc(*v, (size_t)c * sz);
    if (!p) return false;
    *v = p;
    *cap = c;
    return true;
}

/* A JSON array of non-negative integers: the first max are stored, *count says how many. */
static bool read_uints(dl_jm *j, int max, int64_t *v, int *count) {
    if (!dl_jm_expect(j, '[')) return false;
    int r;
    *count = 0;
    while ((r = dl_jm_next(j, ']', count)) == 1) {
        uint64_t x;
        if (!dl_jm_uint(j, &x)) return false;
        if (*count <= max) v[*count - 1] = (int64_t)x;
    }
    return r == 0;
}

static bool parse_entry(dl_jm *j, st_entry *e) {
    if (!dl_jm_expect(j, '{')) return false;
    static const char *const fields[3] = {"dtype", "shape", "data_offsets"};
    bool seen[3] = {false, false, false};
    int count = 0, r;
    while ((r = dl_jm_next(j, '}', &count)) == 1) {
        char *k = NULL;
        if (!dl_jm_string(j, &k) || !dl_jm_expect(j, ':')) {
            dl_free(k);
            return false;
        }
        int f = 0;
        while (f < 3 && strcmp(k, fields[f]) != 0) f++;
        dl_free(k);
        if (f == 3) return dl_jm_fail(j, "unknown key in a tensor entry");
        if (seen[f]) return dl_jm_fail(j, "repeated key in a tensor entry");
        seen[f] = true;
        if (f == 0) {
            char *dt = NULL;
            if (!dl_jm_string(j, &dt)) return false;
            e->dtype = dt;
        } else if (f == 1) {
            if (!read_uints(j, DL_MAX_RANK, e->dims, &e->rank)) return false;
        } else {
            int64_t off[2];
            int got;
            if (!read_uints(j, 2, off, &got)) return false;
            if (got != 2) return dl_jm_fail(j, "data_offsets must hold two integers");
            e->begin = (uint64_t)off[0];
            e->end = (uint64_t)off[1];
        }
    }
    if (r < 0) return false;
    if (!seen[0] || !seen[1] || !seen[2])
        return dl_jm_fail(j, "tensor entry lacks dtype, shape or data_offsets");
    return true;
}

static bool parse_meta(dl_jm *j, dl_st_file *f, int *cap_k, int *cap_v) {
    if (!dl_jm_expect(j, '{')) return false;
    int count = 0, r;
    while ((r = dl_jm_next(j, '}', &count)) == 1) {
        if (!grow((void **)&f->keys, cap_k, f->n_meta + 1, sizeof *f->keys) ||
            !grow((void **)&f->vals, cap_v, f->n_meta + 1, sizeof *f->vals)) {
            j->nomem = true;
            return dl_jm_fail(j, "out of memory");
        }
        char *k = NULL, *v = NULL;
        if (dl_jm_string(j, &k) && dl_jm_expect(j, ':')) {
            if (dl_jm_peek(j) != '"') dl_jm_fail(j, "metadata values must be strings");
            else dl_jm_string(j, &v);
        }
        if (!v) {
            dl_free(k);
            return false;
        }
        f->keys[f->n_meta] = k;
        f->vals[f->n_meta++] = v;
    }
    return r == 0;
}

static dl_status parse_header(dl_ctx *ctx, const char *path, const char *text, size_t len,
                              dl_st_file *f) {
    dl_jm j;
    dl_jm_init(&j, text, len);
    int cap_e = 0, cap_k = 0, cap_v = 0, count = 0, r = -1;
    bool seen_meta = false;
    if (dl_jm_expect(&j, '{')) {
        while ((r = dl_jm_next(&j, '}', &count)) == 1) {
            char *key = NULL;
            if (!dl_jm_string(&j, &key) || !dl_jm_expect(&j, ':')) {
                dl_free(key);
                break;
            }
            if (strcmp(key, "__metadata__") == 0) {
                dl_free(key);
                if (seen_meta) {
                    dl_jm_fail(&j, "second __metadata__");
                    break;
                }
                seen_meta = true;
                if (!parse_meta(&j, f, &cap_k, &cap_v)) break;
                continue;
            }
            if (!grow((void **)&f->e, &cap_e, f->n + 1, sizeof *f->e)) {
                dl_free(key);
                j.nomem = true;
                dl_jm_fail(&j, "out of memory");
                break;
            }
            st_entry *e = &f->e[f->n++];
            memset(e, 0, sizeof *e);
            e->name = key;
            if (!parse_entry(&j, e)) break;
        }
    }
    if (r == 0) dl_jm_finish(&j);
    if (!j.err) return DL_OK;
    if (j.nomem) return dl_fail(ctx, DL_ERR_NOMEM, "checkpoint '%s': out of memory reading the header", path);
    return dl_fail(ctx, DL_ERR_PARSE, "checkpoint '%s': bad safetensors header at byte %zu: %s",
                   path, j.err_at, j.err);
}

static const char *meta_value(const dl_st_file *f, const char *key) {
    for (int i = 0; i < f->n_meta; i++)
        if (strcmp(f->keys[i], key) == 0) return f->vals[i];
    return NULL;
}

static dl_status check_checksummed_header(dl_ctx *ctx, const char *path, const dl_st_file *f) {
    const char *want = meta_value(f, META_HEADER);
    if (!want) {
        if (meta_value(f, META_DATA) || meta_value(f, META_BYTES))
            return dl_fail(ctx, DL_ERR_PARSE, "checkpoint '%s': has dlcc checksums but no %s "
                           "(file corrupt)", path, META_HEADER);
        return DL_OK;
    }
    char got[17];
    hex64(header_hash(f->n_meta, (const char *const *)f->keys, (const char *const *)f->vals, f->n,
                      f->e), got);
    if (strcmp(got, want) != 0)
        return dl_fail(ctx, DL_ERR_PARSE, "checkpoint '%s': header checksum mismatch (file corrupt)",
                       path);
    return DL_OK;
}

/* dtype known, rank supported, offsets spanning exactly the shape's bytes. */
static dl_status check_entry(dl_ctx *ctx, const char *path, st_entry *e) {
    e->type = DL_DTYPE_UNDEFINED;
    for (size_t i = 0; i < DL_ARRAY_LEN(st_types); i++)
        if (strcmp(e->dtype, st_types[i].name) == 0) e->type = st_types[i].dtype;
    if (e->type == DL_DTYPE_UNDEFINED) {
        for (size_t i = 0; i < DL_ARRAY_LEN(st_foreign_types); i++)
            if (strcmp(e->dtype, st_foreign_types[i]) == 0)
                return dl_fail(ctx, DL_ERR_UNSUPPORTED, "checkpoint '%s': tensor '%.200s' has "
                               "dtype %s, which dlcc does not support", path, e->name, e->dtype);
        return dl_fail(ctx, DL_ERR_PARSE, "checkpoint '%s': tensor '%.200s' has unknown dtype "
                       "'%.40s'", path, e->name, e->dtype);
    }
    if (e->rank > DL_MAX_RANK)
        return dl_fail(ctx, DL_ERR_UNSUPPORTED, "checkpoint '%s': tensor '%.200s' has rank %d, "
                       "above dlcc's %d", path, e->name, e->rank, DL_MAX_RANK);
    uint64_t bytes = dl_dtype_size(e->type); /* dims are <= INT64_MAX (json-min) */
    for (int d = 0; d < e->rank; d++) {
        uint64_t dim = (uint64_t)e->dims[d];
        if (dim && bytes > (uint64_t)INT64_MAX / dim)
            return dl_fail(ctx, DL_ERR_PARSE, "checkpoint '%s': the shape of tensor '%.200s' "
                           "overflows", path, e->name);
        bytes *= dim;
    }
    if (e->begin > e->end || e->end - e->begin != bytes) {
        char dims[256];
        return dl_fail(ctx, DL_ERR_PARSE, "checkpoint '%s': tensor '%.200s' (%s%s) needs %llu "
                       "bytes but its data_offsets are [%llu, %llu]", path, e->name, e->dtype,
                       dl_dims_str(e->rank, e->dims, dims, sizeof dims),
                       (unsigned long long)bytes, (unsigned long long)e->begin,
                       (unsigned long long)e->end);
    }
    return DL_OK;
}

/* Every entry valid, names unique, offsets tiling the data section exactly; *by_off (the
 * entries in data order) is dl_malloc'd for the caller. */
static dl_status check_layout(dl_ctx *ctx, const char *path, dl_st_file *f, uint64_t data_size,
                              st_entry ***by_off) {
    bool nomem;
    const char *dup = duplicate_string((const char *const *)f->keys, f->n_meta, &nomem);
    f->by_name = nomem ? NULL : sorted_entries(f->e, f->n, cmp_entry_name);
    *by_off = f->by_name ? sorted_entries(f->e, f->n, cmp_entry_offsets) : NULL;
    if (!*by_off) return dl_fail(ctx, DL_ERR_NOMEM, "checkpoint '%s': out of memory", path);
    if (dup)
        return dl_fail(ctx, DL_ERR_PARSE, "checkpoint '%s': duplicate metadata key '%.200s'", path,
                       dup);
    for (int i = 1; i < f->n; i++)
        if (strcmp(f->by_name[i - 1]->name, f->by_name[i]->name) == 0)
            return dl_fail(ctx, DL_ERR_PARSE, "checkpoint '%s': duplicate tensor name '%.200s'",
                           path, f->by_name[i]->name);
    for (int i = 0; i < f->n; i++) DL_TRY(check_entry(ctx, path, &f->e[i]));
    uint64_t at = 0;
    for (int i = 0; i < f->n; i++) {
        const st_entry *e = (*by_off)[i];
        if (e->begin != at)
            return dl_fail(ctx, DL_ERR_PARSE, "checkpoint '%s': data of tensor '%.200s' starts at "
                           "%llu, but the previous tensor ends at %llu (overlap or gap)", path,
                           e->name, (unsigned long long)e->begin, (unsigned long long)at);
        at = e->end;
    }
    if (at != data_size)
        return dl_fail(ctx, DL_ERR_PARSE, "checkpoint '%s': the tensors cover %llu bytes but the "
                       "data section holds %llu (truncated or corrupt)", path,
                       (unsigned long long)at, (unsigned long long)data_size);
    const char *bytes_meta = meta_value(f, META_BYTES);
    char bytes_s[24];
    snprintf(bytes_s, sizeof bytes_s, "%llu", (unsigned long long)data_size);
    if (bytes_meta && strcmp(bytes_meta, bytes_s) != 0)
        return dl_fail(ctx, DL_ERR_PARSE, "checkpoint '%s': %s is '%.30s' but the data section "
                       "holds %s bytes (file corrupt)", path, META_BYTES, bytes_meta, bytes_s);
    return DL_OK;
}

/* ---- load: the data ---- */

static bool read_at(int fd, uint64_t off, void *buf, size_t n) {
    char *p = buf;
    while (n > 0) {
        ssize_t got = pread(fd, p, n, (off_t)off);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {
            if (got == 0) errno = EIO; /* the file shrank while it was read */
            return false;
        }
        p += got;
        off += (uint64_t)got;
        n -= (size_t)got;
    }
    return true;
}

static dl_status read_data(dl_ctx *ctx, const char *path, int fd, uint64_t base,
                           st_entry *const *by_off, int n, const char *want_hash) {
    XXH3_state_t h;
    XXH3_64bits_reset(&h);
    for (int i = 0; i < n; i++) {
        st_entry *e = by_off[i];
        dl_status s = dl_tensor_new(ctx, e->type, e->rank, e->dims, &e->t);
        if (s != DL_OK) {
            dl_ctx_prefix(ctx, "checkpoint '%s': tensor '%.200s'", path, e->name);
            return s;
        }
        if (!read_at(fd, base + e->begin, e->t->data, e->t->nbytes))
            return dl_fail(ctx, DL_ERR_IO, "checkpoint '%s': reading tensor '%.200s' failed: %s",
                           path, e->name, strerror(errno));
        XXH3_64bits_update(&h, e->t->data, e->t->nbytes);
    }
    char got[17];
    hex64(XXH3_64bits_digest(&h), got);
    if (want_hash && strcmp(got, want_hash) != 0)
        return dl_fail(ctx, DL_ERR_PARSE, "checkpoint '%s': checksum mismatch (file corrupt)", path);
    return DL_OK;
}

/* The load after the file was opened: header, checks, then the data. */
static dl_status load_from(dl_ctx *ctx, const char *path, int fd, uint64_t size, dl_st_file *f) {
    unsigned char len8[8];
    if (size < 8)
        return dl_fail(ctx, DL_ERR_PARSE, "checkpoint '%s': file of %llu bytes is too short for a "
                       "safetensors header", path, (unsigned long long)size);
    if (!read_at(fd, 0, len8, 8))
        return dl_fail(ctx, DL_ERR_IO, "checkpoint '%s': cannot read: %s", path, strerror(errno));
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++) hlen |= (uint64_t)len8[i] << (8 * i);
    if (hlen > size - 8)
        return dl_fail(ctx, DL_ERR_PARSE, "checkpoint '%s': header length %llu exceeds the file's "
                       "%llu bytes (truncated or not a safetensors file)", path,
                       (unsigned long long)hlen, (unsigned long long)size);
    if (hlen > DL_ST_MAX_HEADER)
        return dl_fail(ctx, DL_ERR_LIMIT, "checkpoint '%s': header of %llu bytes exceeds the cap "
                       "of %llu", path, (unsigned long long)hlen,
                       (unsigned long long)DL_ST_MAX_HEADER);
    void *buf;
    dl_status s = dl_alloc_checked(ctx, (size_t)hlen + 1, &buf, "the header");
    if (s != DL_OK) {
        dl_ctx_prefix(ctx, "checkpoint '%s'", path);
        return s;
    }
    char *text = buf;
    if (!read_at(fd, 8, text, (size_t)hlen))
        s = dl_fail(ctx, DL_ERR_IO, "checkpoint '%s': cannot read the header: %s", path,
                    strerror(errno));
    if (s == DL_OK) s = parse_header(ctx, path, text, (size_t)hlen, f);
    dl_free(text);
    if (s == DL_OK) s = check_checksummed_header(ctx, path, f);
    st_entry **by_off = NULL;
    if (s == DL_OK) s = check_layout(ctx, path, f, size - 8 - hlen, &by_off);
    if (s == DL_OK) s = read_data(ctx, path, fd, 8 + hlen, by_off, f->n, meta_value(f, META_DATA));
    dl_free(by_off);
    return s;
}

dl_status dl_st_load(dl_ctx *ctx, const char *path, dl_st_file **out) {
    *out = NULL;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC); /* a FIFO must not block the open */
    if (fd < 0)
        return dl_fail(ctx, DL_ERR_IO, "checkpoint '%s': cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return dl_fail(ctx, DL_ERR_IO, "checkpoint '%s': not a regular file", path);
    }
    dl_st_file *f = dl_calloc(1, sizeof *f);
    dl_status s = f ? load_from(ctx, path, fd, (uint64_t)st.st_size, f)
                    : dl_fail(ctx, DL_ERR_NOMEM, "checkpoint '%s': out of memory", path);
    close(fd);
    if (s != DL_OK) dl_st_free(f);
    else *out = f;
    return s;
}

void dl_st_free(dl_st_file *f) {
    if (!f) return;
    for (int i = 0; i < f->n; i++) {
        dl_free((char *)f->e[i].name);
        dl_free((char *)f->e[i].dtype);
        dl_tensor_free(f->e[i].t);
    }
    for (int i = 0; i < f->n_meta; i++) {
        dl_free(f->keys[i]);
        dl_free(f->vals[i]);
    }
    dl_free(f->e);
    dl_free(f->keys);
    dl_free(f->vals);
    dl_free(f->by_name);
    dl_free(f);
}

/* ---- access ---- */

int dl_st_count(const dl_st_file *f) { return f->n; }

const char *dl_st_name(const dl_st_file *f, int i) {
    return i >= 0 && i < f->n ? f->e[i].name : NULL;
}

const dl_tensor *dl_st_tensor(const dl_st_file *f, int i) {
    return i >= 0 && i < f->n ? f->e[i].t : NULL;
}

const dl_tensor *dl_st_find(const dl_st_file *f, const char *name) {
    st_entry key = {.name = name}, *pk = &key;
    st_entry **hit = f->n ? bsearch(&pk, f->by_name, (size_t)f->n, sizeof *hit, cmp_entry_name) : NULL;
    return hit ? (*hit)->t : NULL;
}

const char *dl_st_meta(const dl_st_file *f, const char *key) { return meta_value(f, key); }
