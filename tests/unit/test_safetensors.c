/* test_safetensors.c — checkpoint files (src/train/safetensors.c): round trips of every dtype
 * with escapes in names and metadata, every single-byte corruption and every truncation of a
 * small file, files written by other tools, hostile headers, allocation failures, crash safety
 * (a writer killed with SIGKILL at random times) and, when python3 with numpy is there, that
 * an independent reader parses what dlcc writes and dlcc parses what it writes. */
#include "../../src/train/safetensors.h"

#include <dirent.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CHECK_PRINT_PASS
#include "check.h"

static char dir[] = "/tmp/dlcc-st-XXXXXX";

static void path_of(char *buf, size_t n, const char *name) {
    snprintf(buf, n, "%s/%s", dir, name);
}

/* ---- files and tensors ---- */

static unsigned char *slurp(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)n + 1);
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    *size = (size_t)n;
    return b;
}

static bool spit(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return false;
    bool ok = fwrite(data, 1, n, f) == n;
    return (fclose(f) == 0) && ok;
}

static bool same_file(const char *path, const unsigned char *want, size_t want_n) {
    size_t n;
    unsigned char *b = slurp(path, &n);
    bool ok = b && n == want_n && memcmp(b, want, n) == 0;
    free(b);
    return ok;
}

/* Whether dir holds any "*.tmp.*" file. */
static bool temp_files_left(void) {
    DIR *d = opendir(dir);
    bool found = false;
    for (struct dirent *e; d && (e = readdir(d));) found |= strstr(e->d_name, ".tmp.") != NULL;
    if (d) closedir(d);
    return found;
}

#include "test-rng.h"

static dl_tensor *random_tensor(dl_ctx *ctx, dl_dtype dt, int rank, const int64_t *dims) {
    dl_tensor *t = NULL;
    if (dl_tensor_new(ctx, dt, rank, dims, &t) != DL_OK) return NULL;
    for (size_t i = 0; i < t->nbytes; i++)
        ((unsigned char *)t->data)[i] = (unsigned char)(dt == DL_BOOL ? rnext() & 1 : rnext());
    return t;
}

static bool same_tensor(const dl_tensor *a, const dl_tensor *b) {
    if (!a || !b || a->dtype != b->dtype || a->rank != b->rank || a->nbytes != b->nbytes)
        return false;
    for (int d = 0; d < a->rank; d++)
        if (a->dims[d] != b->dims[d]) return false;
    return a->nbytes == 0 || memcmp(a->data, b->data, a->nbytes) == 0;
}

/* One checkpoint's contents, as given to dl_st_save. */
typedef struct version {
    int n, n_meta;
    const char *names[16];
    dl_tensor *t[16];
    const char *keys[8], *vals[8];
} version;

static dl_status save_version(dl_ctx *ctx, const char *path, const version *v) {
    return dl_st_save(ctx, path, v->n, v->names, (const dl_tensor *const *)v->t, v->n_meta, v->keys,
                      v->vals);
}

static bool matches(const dl_st_file *f, const version *v) {
    if (!f || dl_st_count(f) != v->n) return false;
    for (int i = 0; i < v->n; i++)
        if (strcmp(dl_st_name(f, i), v->names[i]) != 0 ||
            !same_tensor(dl_st_tensor(f, i), v->t[i]) ||
            dl_st_find(f, v->names[i]) != dl_st_tensor(f, i))
            return false;
    for (int i = 0; i < v->n_meta; i++)
        if (!dl_st_meta(f, v->keys[i]) || strcmp(dl_st_meta(f, v->keys[i]), v->vals[i]) != 0)
            return false;
    return true;
}

static void free_version(version *v) {
    for (int i = 0; i < v->n; i++) dl_tensor_free(v->t[i]);
}

static uint64_t header_len(const unsigned char *b) {
    uint64_t n = 0;
    for (int i = 0; i < 8; i++) n |= (uint64_t)b[i] << (8 * i);
    return n;
}

/* A load that must fail: with one of the two statuses, and a message naming the file. */
static bool fails_clearly(dl_ctx *ctx, const char *path, dl_status s, dl_st_file *f) {
    const char *m = dl_errmsg(ctx);
    return !f && (s == DL_ERR_PARSE || s == DL_ERR_IO) && strstr(m, path) && !strchr(m, '\n');
}

/* ---- round trips ---- */

static void build_many(dl_ctx *ctx, version *v) {
    static const struct {
        const char *name;
        dl_dtype dt;
        int rank;
        int64_t dims[8];
    } specs[] = {
        {"f32 matrix", DL_F32, 2, {2, 3}},
        {"scalar.f64", DL_F64, 0, {0}},
        {"f16", DL_F16, 1, {4}},
        {"bf16", DL_BF16, 2, {2, 2}},
        {"i64", DL_I64, 1, {3}},
        {"i32 rank 8", DL_I32, 8, {1, 2, 1, 2, 1, 1, 2, 1}},
        {"i16 empty", DL_I16, 2, {0, 5}},
        {"i8", DL_I8, 1, {7}},
        {"u64", DL_U64, 1, {2}},
        {"u32", DL_U32, 3, {1, 1, 3}},
        {"u16", DL_U16, 1, {5}},
        {"u8 empty", DL_U8, 1, {0}},
        {"bool", DL_BOOL, 1, {5}},
        {"layer\"1\"\\w\n\t\x01 caf\xc3\xa9 \xe2\x98\x83 \xf0\x9f\x98\x80", DL_U8, 1, {3}},
    };
    memset(v, 0, sizeof *v);
    for (size_t i = 0; i < DL_ARRAY_LEN(specs); i++) {
        v->names[v->n] = specs[i].name;
        v->t[v->n++] = random_tensor(ctx, specs[i].dt, specs[i].rank, specs[i].dims);
    }
    v->n_meta = 3;
    v->keys[0] = "epoch", v->vals[0] = "12";
    v->keys[1] = "quote\"key\\",
    v->vals[1] = "back\\slash\nnewline\ttab\x01\x1f\b\f\r \xc3\xa9 \xf0\x9f\x98\x80";
    v->keys[2] = "empty", v->vals[2] = "";
}

static void test_round_trip(dl_ctx *ctx) {
    char path[512];
    path_of(path, sizeof path, "many.safetensors");
    version v;
    build_many(ctx, &v);
    dl_st_file *f = NULL;
    dl_status s = save_version(ctx, path, &v);
    CHECK("save 14 tensors of 13 dtypes (rank 0, rank 8, empty) and escaped metadata", s == DL_OK);
    s = dl_st_load(ctx, path, &f);
    CHECK("load them back", s == DL_OK && f);
    CHECK("names, dtypes, shapes, data and metadata round trip, in order", matches(f, &v));
    CHECK("absent name and key give NULL", f && !dl_st_find(f, "nope") && !dl_st_meta(f, "nope") &&
                                               !dl_st_name(f, 99) && !dl_st_tensor(f, -1));
    size_t total = 0, n;
    for (int i = 0; i < v.n; i++) total += v.t[i]->nbytes;
    unsigned char *b = slurp(path, &n);
    char want[32];
    snprintf(want, sizeof want, "%zu", total);
    const char *hex = f ? dl_st_meta(f, "dlcc.data_xxh3") : NULL;
    CHECK("layout: header padded to 8, data section follows, dlcc.data_bytes and a 16-digit "
          "dlcc.data_xxh3",
          b && n >= 8 && header_len(b) % 8 == 0 && n == 8 + header_len(b) + total && b[8] == '{' &&
              f && strcmp(dl_st_meta(f, "dlcc.data_bytes"), want) == 0 && hex &&
              strlen(hex) == 16 && strspn(hex, "0123456789abcdef") == 16 &&
              dl_st_meta(f, "dlcc.header_xxh3"));
    free(b);
    dl_st_free(f);

    /* a second save replaces the first; an empty checkpoint is a valid one */
    version empty = {0};
    f = NULL;
    CHECK("an empty checkpoint saves over a full one and loads with no tensors",
          save_version(ctx, path, &empty) == DL_OK && dl_st_load(ctx, path, &f) == DL_OK &&
              dl_st_count(f) == 0 && !dl_st_find(f, "f16"));
    dl_st_free(f);
    CHECK("no temp file is left behind", !temp_files_left());
    free_version(&v);
}

static void test_save_errors(dl_ctx *ctx) {
    char path[512], missing[512];
    path_of(path, sizeof path, "keep.safetensors");
    path_of(missing, sizeof missing, "no/such/dir/x.safetensors");
    version v;
    build_many(ctx, &v);
    int all = v.n;
    v.n = 3;
    v.n_meta = 1;
    dl_status s = save_version(ctx, path, &v);
    size_t old_n;
    unsigned char *old = slurp(path, &old_n);
    CHECK("save a file to keep", s == DL_OK && old);
    struct {
        const char *what;
        const char *name0, *key0;
        dl_status want;
    } cases[] = {
        {"duplicate tensor names", "scalar.f64", "epoch", DL_ERR_INVALID},
        {"reserved metadata key", "f32 matrix", "dlcc.data_xxh3", DL_ERR_INVALID},
        {"a tensor named __metadata__", "__metadata__", "epoch", DL_ERR_INVALID},
        {"a name that is not UTF-8", "bad \xff name", "epoch", DL_ERR_INVALID},
        {"a key that is not UTF-8", "f32 matrix", "\xc0\xaf", DL_ERR_INVALID},
    };
    for (size_t i = 0; i < DL_ARRAY_LEN(cases); i++) {
        version w = v;
        w.names[0] = cases[i].name0;
        w.keys[0] = cases[i].key0;
        dl_ctx_clear(ctx);
        s = save_version(ctx, path, &w);
        char name[160];
        snprintf(name, sizeof name, "save refuses %s, names the file, leaves the old file",
                 cases[i].what);
        CHECK(name, s == cases[i].want && strstr(dl_errmsg(ctx), path) &&
                        same_file(path, old, old_n) && !temp_files_left());
    }
    dl_ctx_clear(ctx);
    s = save_version(ctx, missing, &v);
    CHECK("save into a missing directory is an I/O error naming the file",
          s == DL_ERR_IO && strstr(dl_errmsg(ctx), missing));
    /* a directory where the file should go: the rename fails, the temp file goes away */
    char sub[512];
    path_of(sub, sizeof sub, "a-directory");
    mkdir(sub, 0700);
    dl_ctx_clear(ctx);
    s = save_version(ctx, sub, &v);
    CHECK("a failed rename is an I/O error and removes the temp file",
          s == DL_ERR_IO && strstr(dl_errmsg(ctx), "renaming") && !temp_files_left());
    rmdir(sub);
    dl_ctx_clear(ctx);
    free(old);
    v.n = all;
    free_version(&v);
}

/* ---- corruption ---- */

static void build_small(dl_ctx *ctx, version *v) {
    memset(v, 0, sizeof *v);
    const int64_t d22[] = {2, 2}, d3[] = {3}, d0[] = {0};
    v->names[0] = "a", v->t[0] = random_tensor(ctx, DL_F32, 2, d22);
    v->names[1] = "b\"", v->t[1] = random_tensor(ctx, DL_I64, 1, d3);
    v->names[2] = "c", v->t[2] = random_tensor(ctx, DL_U8, 1, d0);
    v->names[3] = "s", v->t[3] = random_tensor(ctx, DL_F16, 0, NULL);
    v->n = 4;
    v->keys[0] = "k", v->vals[0] = "v\"x";
    v->n_meta = 1;
}

static void test_corruption(dl_ctx *ctx) {
    char path[512], bad[512];
    path_of(path, sizeof path, "small.safetensors");
    path_of(bad, sizeof bad, "corrupt.safetensors");
    version v;
    build_small(ctx, &v);
    size_t n;
    unsigned char *orig = NULL;
    if (save_version(ctx, path, &v) != DL_OK || !(orig = slurp(path, &n))) {
        CHECK("save the small file", 0);
        free_version(&v);
        return;
    }
    /* the padding: after the JSON's closing brace, up to the header's end */
    size_t hend = 8 + (size_t)header_len(orig), json_end = hend;
    while (json_end > 8 && orig[json_end - 1] != '}') json_end--;
    unsigned char *b = malloc(n);
    static const unsigned masks[] = {0x01, 0x02, 0x20, 0x29, 0x80, 0xff};
    for (size_t m = 0; m < DL_ARRAY_LEN(masks); m++) {
        int bad_at = -1, harmless = 0;
        char why[DL_ERRMSG_LEN] = "";
        for (size_t pos = 0; pos < n; pos++) {
            memcpy(b, orig, n);
            b[pos] ^= (unsigned char)masks[m];
            dl_st_file *f = NULL;
            dl_ctx_clear(ctx);
            dl_status s = spit(bad, b, n) ? dl_st_load(ctx, bad, &f) : DL_ERR_INTERNAL;
            bool ok;
            if (s == DL_OK) {
                ok = pos >= json_end && pos < hend && matches(f, &v);
                harmless++;
            } else {
                ok = fails_clearly(ctx, bad, s, f);
            }
            dl_st_free(f);
            if (!ok && bad_at < 0) {
                bad_at = (int)pos;
                snprintf(why, sizeof why, "%s", s == DL_OK ? "loaded" : dl_errmsg(ctx));
            }
        }
        char name[200];
        snprintf(name, sizeof name,
                 "each of %zu single-byte flips (xor 0x%02x) fails with a clear "
                 "parse error or only touches padding (%d harmless)",
                 n, masks[m], harmless);
        CHECK(name, bad_at < 0);
        if (bad_at >= 0) printf("  first bad flip at byte %d: %s\n", bad_at, why);
    }
    int bad_len = -1;
    for (size_t len = 0; len < n; len++) {
        dl_st_file *f = NULL;
        dl_ctx_clear(ctx);
        dl_status s = spit(bad, orig, len) ? dl_st_load(ctx, bad, &f) : DL_ERR_INTERNAL;
        if (!fails_clearly(ctx, bad, s, f) && bad_len < 0) bad_len = (int)len;
        dl_st_free(f);
    }
    CHECK("every truncation (0 .. size-1 bytes) fails with a clear error", bad_len < 0);
    if (bad_len >= 0) printf("  truncation to %d bytes: %s\n", bad_len, dl_errmsg(ctx));
    /* a byte appended after the data */
    memcpy(b, orig, n);
    FILE *fa = fopen(bad, "wb");
    if (fa) {
        fwrite(b, 1, n, fa);
        fputc(0, fa);
        fclose(fa);
    }
    dl_st_file *f = NULL;
    dl_ctx_clear(ctx);
    dl_status s = dl_st_load(ctx, bad, &f);
    CHECK("a trailing byte after the data is refused",
          fails_clearly(ctx, bad, s, f) && strstr(dl_errmsg(ctx), "data section"));
    /* the data changed but the header left as is: the data checksum catches it */
    memcpy(b, orig, n);
    b[n - 1] ^= 1;
    dl_ctx_clear(ctx);
    s = spit(bad, b, n) ? dl_st_load(ctx, bad, &f) : DL_ERR_INTERNAL;
    CHECK("a flipped data bit reads 'checksum mismatch (file corrupt)'",
          s == DL_ERR_PARSE && strstr(dl_errmsg(ctx), "checksum mismatch (file corrupt)"));
    dl_st_free(f);
    dl_ctx_clear(ctx);
    free(b);
    free(orig);
    free_version(&v);
}

/* ---- files from other tools, hostile files ---- */

/* Writes 8-byte length + hdr (unpadded) + data_n bytes (0,1,2,...). */
static bool write_raw(const char *path, const char *hdr, size_t data_n) {
    size_t h = strlen(hdr), n = 8 + h + data_n;
    unsigned char *b = malloc(n);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)h >> (8 * i));
    memcpy(b + 8, hdr, h);
    for (size_t i = 0; i < data_n; i++) b[8 + h + i] = (unsigned char)i;
    bool ok = spit(path, b, n);
    free(b);
    return ok;
}

static void test_foreign(dl_ctx *ctx) {
    char path[512];
    path_of(path, sizeof path, "foreign.safetensors");
    /* keys not in data order, whitespace, no padding, escapes a writer may choose */
    const char *hdr =
        "{\n  \"__metadata__\": {\"format\": \"pt\"},\n"
        "  \"b\": {\"data_offsets\": [8, 16], \"dtype\": \"I32\", \"shape\": [2]},\n"
        "  \"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},\n"
        "  \"\\u00e9t\\u00E9 \\ud83d\\ude00 a\\/b\": {\"dtype\": \"BF16\", \"shape\": [],"
        " \"data_offsets\": [16, 18]},\n"
        "  \"e\": {\"dtype\": \"F64\", \"shape\": [0, 3], \"data_offsets\": [18, 18]}\n}";
    const float a[2] = {1.5f, -2.0f};
    const int32_t bv[2] = {7, -9};
    const uint16_t z = 0x3fc0; /* bf16 1.5 */
    unsigned char data[18];
    memcpy(data, a, 8);
    memcpy(data + 8, bv, 8);
    memcpy(data + 16, &z, 2);
    size_t h = strlen(hdr);
    unsigned char *b = malloc(8 + h + 18);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)h >> (8 * i));
    memcpy(b + 8, hdr, h);
    memcpy(b + 8 + h, data, 18);
    bool wrote = spit(path, b, 8 + h + 18);
    free(b);
    dl_st_file *f = NULL;
    dl_ctx_clear(ctx);
    dl_status s = wrote ? dl_st_load(ctx, path, &f) : DL_ERR_IO;
    CHECK("a file from another tool (no dlcc metadata, unpadded, out of data order) loads",
          s == DL_OK && f && dl_st_count(f) == 4);
    if (f && dl_st_count(f) == 4) {
        const dl_tensor *ta = dl_st_find(f, "a"), *tb = dl_st_find(f, "b");
        const dl_tensor *tz = dl_st_find(f, "\xc3\xa9t\xc3\xa9 \xf0\x9f\x98\x80 a/b");
        const dl_tensor *te = dl_st_find(f, "e");
        CHECK("its values, dtypes and shapes are right",
              ta && ta->dtype == DL_F32 && ta->rank == 1 && memcmp(ta->data, a, 8) == 0 && tb &&
                  tb->dtype == DL_I32 && memcmp(tb->data, bv, 8) == 0 && tz && tz->rank == 0 &&
                  tz->dtype == DL_BF16 && dl_bf16_to_f32(*(uint16_t *)tz->data) == 1.5f && te &&
                  te->dtype == DL_F64 && te->rank == 2 && te->dims[1] == 3 && te->numel == 0);
        CHECK("header order kept, \\u escapes and surrogate pairs decoded, metadata read",
              strcmp(dl_st_name(f, 0), "b") == 0 && strcmp(dl_st_name(f, 1), "a") == 0 &&
                  dl_st_tensor(f, 2) == tz && strcmp(dl_st_meta(f, "format"), "pt") == 0 &&
                  !dl_st_meta(f, "dlcc.data_xxh3"));
    }
    dl_st_free(f);
    f = NULL;
    dl_ctx_clear(ctx);
    CHECK("a header of just {} loads as an empty checkpoint",
          write_raw(path, "{}", 0) && dl_st_load(ctx, path, &f) == DL_OK && dl_st_count(f) == 0);
    dl_st_free(f);
}

static void test_hostile(dl_ctx *ctx) {
    char path[512];
    path_of(path, sizeof path, "hostile.safetensors");
#define E1(dt, shape, off)                                                                         \
    "{\"t\":{\"dtype\":\"" dt "\",\"shape\":" shape ",\"data_offsets\":" off "}}"
    static const struct {
        const char *what, *hdr;
        size_t data_n;
        dl_status want;
        const char *msg;
    } cases[] = {
        {"unknown dtype", E1("Q7", "[1]", "[0,1]"), 1, DL_ERR_PARSE, "unknown dtype 'Q7'"},
        {"safetensors dtype dlcc lacks", E1("F8_E4M3", "[1]", "[0,1]"), 1, DL_ERR_UNSUPPORTED,
         "does not support"},
        {"rank 9", E1("U8", "[1,1,1,1,1,1,1,1,1]", "[0,1]"), 1, DL_ERR_UNSUPPORTED, "rank 9"},
        {"negative dim", E1("U8", "[-1]", "[0,1]"), 1, DL_ERR_PARSE, "negative"},
        {"fractional dim", E1("U8", "[1.0]", "[0,1]"), 1, DL_ERR_PARSE, "fraction"},
        {"leading zero", E1("U8", "[01]", "[0,1]"), 1, DL_ERR_PARSE, "leading zero"},
        {"dim past int64", E1("U8", "[9223372036854775808]", "[0,1]"), 1, DL_ERR_PARSE,
         "too large"},
        {"shape overflow", E1("F32", "[4294967296,4294967296,4294967296]", "[0,4]"), 4,
         DL_ERR_PARSE, "overflows"},
        {"offsets span the wrong size", E1("F32", "[2]", "[0,4]"), 4, DL_ERR_PARSE,
         "needs 8 bytes"},
        {"begin after end", E1("U8", "[0]", "[2,1]"), 2, DL_ERR_PARSE, "data_offsets are [2, 1]"},
        {"offsets past the data", E1("U8", "[4]", "[0,4]"), 2, DL_ERR_PARSE,
         "data section holds 2"},
        {"bytes after the last tensor", E1("U8", "[1]", "[0,1]"), 2, DL_ERR_PARSE, "data section"},
        {"offsets with three values", E1("U8", "[1]", "[0,1,1]"), 1, DL_ERR_PARSE, "two integers"},
        {"overlapping tensors",
         "{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
         "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[1,3]}}",
         3, DL_ERR_PARSE, "overlap"},
        {"a gap between tensors",
         "{\"a\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[0,2]},"
         "\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[3,5]}}",
         5, DL_ERR_PARSE, "gap"},
        {"duplicate tensor names",
         "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
         "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
         2, DL_ERR_PARSE, "duplicate tensor name 'a'"},
        {"duplicate metadata keys", "{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0, DL_ERR_PARSE,
         "duplicate metadata key 'k'"},
        {"two __metadata__", "{\"__metadata__\":{},\"__metadata__\":{}}", 0, DL_ERR_PARSE,
         "second __metadata__"},
        {"an object as a metadata value", "{\"__metadata__\":{\"k\":{\"x\":\"y\"}}}", 0,
         DL_ERR_PARSE, "must be strings"},
        {"a number as a metadata value", "{\"__metadata__\":{\"k\":1}}", 0, DL_ERR_PARSE,
         "must be strings"},
        {"text after the JSON", "{}x", 0, DL_ERR_PARSE, "after the end"},
        {"a trailing comma", "{\"__metadata__\":{},}", 0, DL_ERR_PARSE, "trailing comma"},
        {"a top-level array", "[]", 0, DL_ERR_PARSE, "expected '{'"},
        {"an unterminated string", "{\"abc", 0, DL_ERR_PARSE, "unterminated"},
        {"an unterminated object", "{\"__metadata__\":{}", 0, DL_ERR_PARSE, "end of text"},
        {"an invalid escape", "{\"__metadata__\":{\"a\\x\":\"\"}}", 0, DL_ERR_PARSE,
         "invalid escape"},
        {"a lone surrogate", "{\"__metadata__\":{\"\\ud800\":\"\"}}", 0, DL_ERR_PARSE, "surrogate"},
        {"\\u0000 in a name", "{\"__metadata__\":{\"a\\u0000\":\"\"}}", 0, DL_ERR_PARSE, "u0000"},
        {"a raw control character", "{\"__metadata__\":{\"a\x01\":\"\"}}", 0, DL_ERR_PARSE,
         "control character"},
        {"bytes that are not UTF-8", "{\"__metadata__\":{\"a\xc3\x28\":\"\"}}", 0, DL_ERR_PARSE,
         "UTF-8"},
        {"an overlong UTF-8 form", "{\"__metadata__\":{\"\xc0\xaf\":\"\"}}", 0, DL_ERR_PARSE,
         "UTF-8"},
        {"a missing data_offsets", "{\"t\":{\"dtype\":\"U8\",\"shape\":[0]}}", 0, DL_ERR_PARSE,
         "lacks"},
        {"an unknown entry key", "{\"t\":{\"dtypes\":\"U8\"}}", 0, DL_ERR_PARSE, "unknown key"},
        {"a repeated entry key", "{\"t\":{\"dtype\":\"U8\",\"dtype\":\"U8\"}}", 0, DL_ERR_PARSE,
         "repeated key"},
        {"(control) a valid empty tensor", E1("U8", "[0]", "[0,0]"), 0, DL_OK, NULL},
        {"a numeric dtype", "{\"t\":{\"dtype\":5,\"shape\":[0],\"data_offsets\":[0,0]}}", 0,
         DL_ERR_PARSE, "expected '\"'"},
        {"a shape that is not an array", E1("U8", "1", "[0,1]"), 1, DL_ERR_PARSE, "expected '['"},
        {"dlcc checksums without the header checksum",
         "{\"__metadata__\":{\"dlcc.data_xxh3\":\"0000000000000000\"}}", 0, DL_ERR_PARSE,
         "no dlcc.header_xxh3"},
        {"a malformed header checksum", "{\"__metadata__\":{\"dlcc.header_xxh3\":\"xyz\"}}", 0,
         DL_ERR_PARSE, "header checksum mismatch"},
    };
#undef E1
    for (size_t i = 0; i < DL_ARRAY_LEN(cases); i++) {
        dl_st_file *f = NULL;
        dl_ctx_clear(ctx);
        dl_status s = write_raw(path, cases[i].hdr, cases[i].data_n) ? dl_st_load(ctx, path, &f)
                                                                     : DL_ERR_INTERNAL;
        char name[200];
        snprintf(name, sizeof name, "hostile header: %s -> %s", cases[i].what,
                 dl_status_name(cases[i].want));
        bool ok = s == cases[i].want && (s == DL_OK ? f != NULL
                                                    : !f && strstr(dl_errmsg(ctx), path) &&
                                                          strstr(dl_errmsg(ctx), cases[i].msg));
        CHECK(name, ok);
        if (!ok) printf("  got %s: %s\n", dl_status_name(s), dl_errmsg(ctx));
        dl_st_free(f);
    }

    /* the 8-byte length itself */
    unsigned char b[16] = {0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, '{', '}'};
    dl_st_file *f = NULL;
    dl_ctx_clear(ctx);
    dl_status s = spit(path, b, 10) ? dl_st_load(ctx, path, &f) : DL_ERR_INTERNAL;
    CHECK("a header length past the file's end",
          s == DL_ERR_PARSE && strstr(dl_errmsg(ctx), "exceeds"));
    dl_ctx_clear(ctx);
    s = spit(path, b, 0) ? dl_st_load(ctx, path, &f) : DL_ERR_INTERNAL;
    CHECK("an empty file", s == DL_ERR_PARSE && strstr(dl_errmsg(ctx), "too short"));
    /* a sparse 101 MiB file claiming a 101 MiB header: refused by the cap before reading it */
    uint64_t big = (uint64_t)101 << 20;
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(big >> (8 * i));
    FILE *fp = fopen(path, "wb");
    bool made = fp && fwrite(b, 1, 8, fp) == 8 && ftruncate(fileno(fp), (off_t)(big + 8)) == 0;
    if (fp) fclose(fp);
    dl_ctx_clear(ctx);
    s = made ? dl_st_load(ctx, path, &f) : DL_ERR_INTERNAL;
    CHECK("a header over the 100 MB cap is refused as a limit",
          s == DL_ERR_LIMIT && strstr(dl_errmsg(ctx), "cap"));
    dl_ctx_clear(ctx);
    s = dl_st_load(ctx, dir, &f);
    CHECK("a directory is not a checkpoint", s == DL_ERR_IO && strstr(dl_errmsg(ctx), "regular"));
    char missing[512];
    path_of(missing, sizeof missing, "missing.safetensors");
    dl_ctx_clear(ctx);
    s = dl_st_load(ctx, missing, &f);
    CHECK("a missing file is an I/O error naming it",
          s == DL_ERR_IO && strstr(dl_errmsg(ctx), missing) && !f);
    /* a tensor bigger than the allocation cap: refused as a limit, naming file and tensor */
    char hdr[200];
    snprintf(hdr, sizeof hdr, "{\"big\":{\"dtype\":\"U8\",\"shape\":[%d],\"data_offsets\":[0,%d]}}",
             4096, 4096);
    dl_set_alloc_limit(1000);
    dl_ctx_clear(ctx);
    s = write_raw(path, hdr, 4096) ? dl_st_load(ctx, path, &f) : DL_ERR_INTERNAL;
    dl_set_alloc_limit((size_t)8 << 30);
    CHECK("a tensor over the allocation cap is a limit error naming it",
          s == DL_ERR_LIMIT && strstr(dl_errmsg(ctx), path) && strstr(dl_errmsg(ctx), "'big'"));
    dl_set_alloc_limit(32);
    dl_ctx_clear(ctx);
    s = dl_st_load(ctx, path, &f);
    dl_set_alloc_limit((size_t)8 << 30);
    CHECK("a header over the allocation cap is a limit error naming the file",
          s == DL_ERR_LIMIT && strstr(dl_errmsg(ctx), path) && strstr(dl_errmsg(ctx), "header"));
    unlink(path);
    dl_ctx_clear(ctx);
}

/* ---- allocation failures ---- */

static void test_alloc_failures(dl_ctx *ctx) {
    char path[512];
    path_of(path, sizeof path, "alloc.safetensors");
    version v, w;
    build_small(ctx, &v);
    build_small(ctx, &w);
    dl_status s = save_version(ctx, path, &v);
    size_t old_n;
    unsigned char *old = slurp(path, &old_n);
    int k, bad = 0;
    for (k = 0; k < 1000; k++) {
        dl_ctx_clear(ctx);
        dl_alloc_fail_after(k);
        s = save_version(ctx, path, &w);
        dl_alloc_fail_after(-1);
        if (s == DL_OK) break;
        if (s != DL_ERR_NOMEM || !strstr(dl_errmsg(ctx), path) || !same_file(path, old, old_n) ||
            temp_files_left()) {
            bad++;
            printf("  save with allocation %d failing: %s\n", k, dl_errmsg(ctx));
        }
    }
    char name[160];
    snprintf(name, sizeof name,
             "save with each of its %d allocations failing: a NOMEM error "
             "naming the file, old file kept, no temp file",
             k);
    CHECK(name, old && k > 0 && k < 1000 && bad == 0);
    int saves = k;
    bad = 0;
    for (k = 0; k < 1000; k++) {
        dl_st_file *f = NULL;
        dl_ctx_clear(ctx);
        dl_alloc_fail_after(k);
        s = dl_st_load(ctx, path, &f);
        dl_alloc_fail_after(-1);
        if (s == DL_OK) {
            if (!matches(f, &w)) bad++;
            dl_st_free(f);
            break;
        }
        if (s != DL_ERR_NOMEM || f || !strstr(dl_errmsg(ctx), path)) bad++;
    }
    snprintf(name, sizeof name,
             "load with each of its %d allocations failing: a NOMEM error naming "
             "the file, nothing leaked",
             k);
    CHECK(name, k > 0 && k < 1000 && bad == 0 && saves > 0);
    dl_ctx_clear(ctx);
    free(old);
    free_version(&v);
    free_version(&w);
}

/* ---- crash safety ---- */

static void build_big(dl_ctx *ctx, version *v, const char *tag) {
    memset(v, 0, sizeof *v);
    const int64_t d1[] = {128, 1024}, d2[] = {64, 1024};
    v->names[0] = "w1", v->t[0] = random_tensor(ctx, DL_F32, 2, d1);
    v->names[1] = "w2", v->t[1] = random_tensor(ctx, DL_F64, 2, d2);
    v->n = 2;
    v->keys[0] = "version", v->vals[0] = tag;
    v->n_meta = 1;
}

static void test_kill_during_save(dl_ctx *ctx) {
    char path[512];
    path_of(path, sizeof path, "crash.safetensors");
    version va, vb;
    build_big(ctx, &va, "A");
    build_big(ctx, &vb, "B");
    volatile long *shared =
        mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared == MAP_FAILED || save_version(ctx, path, &va) != DL_OK) {
        CHECK("crash test setup", 0);
        return;
    }
    int rounds = 30, intact = 0, mid_save = 0, saves = 0, leftovers = 0;
    for (int r = 0; r < rounds; r++) {
        shared[0] = 0; /* saves completed */
        shared[1] = 0; /* inside a save */
        pid_t pid = fork();
        if (pid == 0) {
            for (long i = 0;; i++) {
                shared[1] = 1;
                if (save_version(ctx, path, i % 2 ? &va : &vb) != DL_OK) _exit(3);
                shared[1] = 0;
                shared[0]++;
            }
        }
        if (pid < 0) break;
        struct timespec ts = {0, (long)(1000000 + rnext() % 40000000)}; /* 1 .. 41 ms */
        nanosleep(&ts, NULL);
        /* every other round waits until the writer is inside a save, so some kills surely land
         * mid-save whatever the scheduler does (bounded: the writer may have died) */
        for (long spin = 0; r % 2 == 0 && shared[1] != 1 && spin < 100000000; spin++) sched_yield();
        kill(pid, SIGKILL);
        int st;
        waitpid(pid, &st, 0);
        saves += (int)shared[0];
        mid_save += shared[1] == 1;
        dl_st_file *f = NULL;
        dl_ctx_clear(ctx);
        if (dl_st_load(ctx, path, &f) == DL_OK && (matches(f, &va) || matches(f, &vb)))
            intact++;
        else
            printf("  round %d: %s\n", r, dl_errmsg(ctx));
        dl_st_free(f);
        char tmp[600];
        snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)pid);
        leftovers += unlink(tmp) == 0;
    }
    char name[200];
    snprintf(name, sizeof name,
             "writer killed at random times %d times (%d mid-save, %d saves "
             "done, %d temp files left): the file is always a whole A or B",
             rounds, mid_save, saves, leftovers);
    CHECK(name, intact == rounds && mid_save > 0);
    CHECK("only <path>.tmp.<pid> files are left by killed writers", !temp_files_left());
    munmap((void *)shared, 4096);
    free_version(&va);
    free_version(&vb);
}

/* ---- interoperability with an independent reader and writer ---- */

static const char *py_script =
    "import json, struct, sys\n"
    "import numpy as np\n"
    "def read(p):\n"
    "    b = open(p, 'rb').read()\n"
    "    n = struct.unpack('<Q', b[:8])[0]\n"
    "    h = json.loads(b[8:8 + n].decode('utf-8'))\n"
    "    return n, h, b[8 + n:]\n"
    "n, h, data = read(sys.argv[1])\n"
    "assert n % 8 == 0\n"
    "meta = h.pop('__metadata__')\n"
    "assert meta['note'] == 'say \"hi\"\\\\\\n\\t\\u00e9\\U0001F600', meta\n"
    "assert int(meta['dlcc.data_bytes']) == len(data)\n"
    "types = {'F32': '<f4', 'F64': '<f8', 'F16': '<f2', 'I64': '<i8', 'U8': 'u1'}\n"
    "pos = 0\n"
    "for b0, e0 in sorted(v['data_offsets'] for v in h.values()):\n"
    "    assert b0 == pos\n"
    "    pos = e0\n"
    "assert pos == len(data)\n"
    "def arr(k):\n"
    "    v = h[k]\n"
    "    b0, e0 = v['data_offsets']\n"
    "    return np.frombuffer(data[b0:e0], dtype=types[v['dtype']]).reshape(v['shape'])\n"
    "assert set(h) == {'w', 'idx', 'h', 'e', 's', 'caf\\u00e9 \"x\"'}, set(h)\n"
    "assert np.array_equal(arr('w'), (np.arange(6, dtype='<f4') * 0.5 - 1).reshape(2, 3))\n"
    "assert np.array_equal(arr('idx'), np.arange(4, dtype='<i8') * 1000000007 - 3)\n"
    "assert np.array_equal(arr('h'), np.array([1.0, -2.5, 65504.0], dtype='<f2'))\n"
    "assert arr('e').shape == (0,) and arr('s').shape == () and arr('s') == 3.25\n"
    "assert arr('caf\\u00e9 \"x\"').tolist() == [1, 2, 3]\n"
    "# the other way: a file as the safetensors library lays it out\n"
    "x = np.arange(4, dtype='<f4').reshape(2, 2) / 4\n"
    "y = np.array([-1, 0, 2**40], dtype='<i8')\n"
    "hd = {'__metadata__': {'format': 'np'},\n"
    "      'y': {'dtype': 'I64', 'shape': [3], 'data_offsets': [0, 24]},\n"
    "      'x': {'dtype': 'F32', 'shape': [2, 2], 'data_offsets': [24, 40]}}\n"
    "t = json.dumps(hd, ensure_ascii=True).encode()\n"
    "t += b' ' * (-len(t) % 8)\n"
    "open(sys.argv[2], 'wb').write(struct.pack('<Q', len(t)) + t + y.tobytes() + x.tobytes())\n"
    "print('ok')\n";

static void test_python_interop(dl_ctx *ctx) {
    if (system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") != 0) {
        printf("SKIP interop with python3+numpy: not available (not counted as passed)\n");
        return;
    }
    char path[512], back[512], script[512], cmd[2000];
    path_of(path, sizeof path, "interop.safetensors");
    path_of(back, sizeof back, "from-numpy.safetensors");
    path_of(script, sizeof script, "check.py");
    version v = {0};
    const int64_t dw[] = {2, 3}, di[] = {4}, dh[] = {3}, de[] = {0};
    v.names[0] = "w", v.t[0] = random_tensor(ctx, DL_F32, 2, dw);
    v.names[1] = "idx", v.t[1] = random_tensor(ctx, DL_I64, 1, di);
    v.names[2] = "h", v.t[2] = random_tensor(ctx, DL_F16, 1, dh);
    v.names[3] = "e", v.t[3] = random_tensor(ctx, DL_U8, 1, de);
    v.names[4] = "s", v.t[4] = random_tensor(ctx, DL_F64, 0, NULL);
    v.names[5] = "caf\xc3\xa9 \"x\"", v.t[5] = random_tensor(ctx, DL_U8, 1, dh);
    v.n = 6;
    v.keys[0] = "note", v.vals[0] = "say \"hi\"\\\n\t\xc3\xa9\xf0\x9f\x98\x80";
    v.n_meta = 1;
    for (int i = 0; i < 6; i++) ((float *)v.t[0]->data)[i] = (float)i * 0.5f - 1;
    for (int i = 0; i < 4; i++) ((int64_t *)v.t[1]->data)[i] = (int64_t)i * 1000000007 - 3;
    const float hv[3] = {1.0f, -2.5f, 65504.0f};
    for (int i = 0; i < 3; i++) ((uint16_t *)v.t[2]->data)[i] = dl_f32_to_f16(hv[i]);
    *(double *)v.t[4]->data = 3.25;
    for (int i = 0; i < 3; i++) ((uint8_t *)v.t[5]->data)[i] = (uint8_t)(i + 1);
    bool ok = save_version(ctx, path, &v) == DL_OK && spit(script, py_script, strlen(py_script));
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s' '%s' '%s' >/dev/null", script, path, back);
    CHECK("python (json + numpy) parses dlcc's file as safetensors, values and escapes included",
          ok && system(cmd) == 0);
    dl_st_file *f = NULL;
    dl_ctx_clear(ctx);
    dl_status s = dl_st_load(ctx, back, &f);
    const dl_tensor *x = f ? dl_st_find(f, "x") : NULL, *y = f ? dl_st_find(f, "y") : NULL;
    const float xw[4] = {0, 0.25f, 0.5f, 0.75f};
    const int64_t yw[3] = {-1, 0, (int64_t)1 << 40};
    CHECK("dlcc loads the file numpy wrote",
          s == DL_OK && x && y && x->rank == 2 && x->dims[0] == 2 && memcmp(x->data, xw, 16) == 0 &&
              y->dtype == DL_I64 && memcmp(y->data, yw, 24) == 0 &&
              strcmp(dl_st_meta(f, "format"), "np") == 0);
    dl_st_free(f);
    unlink(script);
    dl_ctx_clear(ctx);
    free_version(&v);
}

/* Removes the test folder and what the tests left in it. */
static void remove_dir(void) {
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        char p[600];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    if (d) closedir(d);
    rmdir(dir);
}

int main(void) {
    dl_ctx *ctx = dl_ctx_new();
    if (!ctx || !mkdtemp(dir)) {
        printf("FAIL setup\n0 passed, 1 failed\n");
        return 1;
    }
    test_round_trip(ctx);
    test_save_errors(ctx);
    test_corruption(ctx);
    test_foreign(ctx);
    test_hostile(ctx);
    test_alloc_failures(ctx);
    test_kill_during_save(ctx);
    test_python_interop(ctx);
    remove_dir();
    dl_ctx_free(ctx);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
