/* cache.c — the JIT's on-disk compile cache: where it lives, checked lookups, atomic
 * publication (rename, dl_atomic_write), `dlcc cache ls|clear`, and the scratch build folders.
 * Only names matching the layout in cache.h are ever read, replaced or removed, and no link is
 * followed out of the folder. */
#include "cache.h"

#include "../core/atomic-file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#define META_MAGIC "dlcc-cache-meta 1"
#define PROBE_MAGIC "dlcc-probe 1"
#define TEMP_MAX_AGE_S 3600 /* a temp file this old belongs to no live build */

const char *dl_cache_dir(const dl_jit_opts *o, char *buf, size_t n) {
    const char *dir = o ? o->cache_dir : NULL;
    if (!dir || !*dir) dir = getenv("DLCC_CACHE_DIR");
    int len;
    if (dir && *dir) {
        len = snprintf(buf, n, "%s", dir);
    } else {
        const char *home = getenv("HOME");
        if (!home || !*home) return NULL;
        len = snprintf(buf, n, "%s/.cache/dlcc", home);
    }
    if (len < 0 || (size_t)len >= n) return NULL;
    return buf;
}

bool dl_cache_prepare(const char *dir, char *why, size_t why_n) {
    char path[1024];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path) {
        snprintf(why, why_n, "path too long");
        return false;
    }
    for (char *p = path + 1;; p++) { /* mkdir -p */
        bool end = *p == 0;
        if (*p == '/' || end) {
            *p = 0;
            if (mkdir(path, 0700) != 0 && errno != EEXIST) {
                snprintf(why, why_n, "cannot create %s: %s", path, strerror(errno));
                return false;
            }
            if (end) break;
            *p = '/';
        }
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(why, why_n, "not a directory");
        return false;
    }
    if (st.st_uid != geteuid() || (st.st_mode & 022)) {
        snprintf(why, why_n, "not owned by this user or writable by others");
        return false;
    }
    if (access(dir, W_OK | X_OK) != 0) {
        snprintf(why, why_n, "not writable: %s", strerror(errno));
        return false;
    }
    return true;
}

static void hex128(XXH128_hash_t h, char out[DL_CACHE_KEY_HEX + 1]) {
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, h);
    for (int i = 0; i < 16; i++) snprintf(out + 2 * i, 3, "%02x", c.digest[i]);
}

/* Size and checksum of a regular file (never through a link). */
static bool file_digest(const char *path, int64_t *size, char hex[DL_CACHE_KEY_HEX + 1]) {
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return false;
    struct stat st;
    bool ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    XXH3_state_t state;
    XXH3_128bits_reset(&state);
    int64_t total = 0;
    unsigned char buf[1 << 14];
    while (ok) {
        ssize_t got = read(fd, buf, sizeof buf);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {
            ok = got == 0;
            break;
        }
        XXH3_128bits_update(&state, buf, (size_t)got);
        total += got;
    }
    close(fd);
    if (!ok) return false;
    *size = total;
    hex128(XXH3_128bits_digest(&state), hex);
    return true;
}

/* Reads a small regular file (no links) into buf as a string. */
static bool read_small(const char *path, char *buf, size_t n) {
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return false;
    struct stat st;
    size_t len = 0;
    bool ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (size_t)st.st_size < n;
    while (ok && len < n - 1) {
        ssize_t got = read(fd, buf + len, n - 1 - len);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) {
            ok = got == 0;
            break;
        }
        len += (size_t)got;
    }
    close(fd);
    buf[ok ? len : 0] = 0;
    return ok;
}

bool dl_cache_entry_ok(const char *dir, const char *key, const char *ext) {
    char path[1100], meta[1100], text[512], want[600];
    snprintf(path, sizeof path, "%s/%s%s", dir, key, ext);
    snprintf(meta, sizeof meta, "%s/%s.meta", dir, key);
    if (!read_small(meta, text, sizeof text)) return false;
    int64_t size;
    char hex[DL_CACHE_KEY_HEX + 1];
    if (!file_digest(path, &size, hex)) return false;
    snprintf(want, sizeof want, META_MAGIC "\nfile %s%s\nsize %lld\nxxh3 %s\n", key, ext,
             (long long)size, hex);
    return strcmp(text, want) == 0;
}

dl_status dl_cache_publish(dl_ctx *ctx, const char *dir, const char *key, const char *ext,
                           const char *built) {
    char final[1100], meta[600];
    int64_t size;
    char hex[DL_CACHE_KEY_HEX + 1];
    if (!file_digest(built, &size, hex))
        return dl_fail(ctx, DL_ERR_IO, "compile cache: cannot read %s: %s", built,
                       strerror(errno));
    snprintf(final, sizeof final, "%s/%s%s", dir, key, ext);
    if (rename(built, final) != 0)
        return dl_fail(ctx, DL_ERR_IO, "compile cache: cannot rename %s to %s: %s", built, final,
                       strerror(errno));
    snprintf(meta, sizeof meta, META_MAGIC "\nfile %s%s\nsize %lld\nxxh3 %s\n", key, ext,
             (long long)size, hex);
    char meta_path[1100];
    snprintf(meta_path, sizeof meta_path, "%s/%s.meta", dir, key);
    return dl_atomic_write_buf(ctx, meta_path, "compile cache", DL_ATOMIC_PRIVATE, meta,
                               strlen(meta));
}

bool dl_cache_probe_get(const char *dir, const char *key, int *value) {
    char path[1100], text[64];
    snprintf(path, sizeof path, "%s/%s.probe", dir, key);
    if (!read_small(path, text, sizeof text)) return false;
    return sscanf(text, PROBE_MAGIC " %d\n", value) == 1;
}

void dl_cache_probe_put(const char *dir, const char *key, int value) {
    char path[1100], text[64];
    snprintf(path, sizeof path, "%s/%s.probe", dir, key);
    snprintf(text, sizeof text, PROBE_MAGIC " %d\n", value);
    /* only an optimization: failure is harmless, so nobody wants a message */
    dl_atomic_write_buf(NULL, path, NULL, DL_ATOMIC_PRIVATE, text, strlen(text));
}

dl_status dl_build_dir_make(dl_ctx *ctx, const char *parent, char *out, size_t n) {
    int len;
    if (parent) {
        len = snprintf(out, n, "%s/tmp-%ld-XXXXXX", parent, (long)getpid());
    } else {
        const char *tmp = getenv("TMPDIR");
        len = snprintf(out, n, "%s/dlcc-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    }
    if (len < 0 || (size_t)len >= n)
        return dl_fail(ctx, DL_ERR_IO, "JIT: build folder path too long");
    if (!mkdtemp(out))
        return dl_fail(ctx, DL_ERR_IO, "JIT: cannot create a build folder %s: %s", out,
                       strerror(errno));
    return DL_OK;
}

/* Removes the plain files (and links, not their targets) of one folder, then the folder. */
static int remove_flat_at(int parent_fd, const char *name) {
    int fd = openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return 0;
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return 0;
    }
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        struct stat st;
        if (fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || S_ISDIR(st.st_mode)) continue;
        if (unlinkat(fd, e->d_name, 0) == 0) removed++;
    }
    closedir(d);
    if (unlinkat(parent_fd, name, AT_REMOVEDIR) == 0) removed++;
    return removed;
}

void dl_build_dir_remove(const char *path) { remove_flat_at(AT_FDCWD, path); }

dl_status dl_write_text(dl_ctx *ctx, const char *path, const char *text) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    bool ok = fd >= 0 && dl_write_all(fd, text, strlen(text));
    int err = errno;
    if (fd >= 0 && close(fd) != 0 && ok) {
        ok = false;
        err = errno;
    }
    if (!ok) return dl_fail(ctx, DL_ERR_IO, "JIT: cannot write %s: %s", path, strerror(err));
    return DL_OK;
}

/* ---- names of the layout ---- */

enum { NAME_OTHER, NAME_ENTRY, NAME_TEMP };

static bool is_key(const char *s) {
    for (int i = 0; i < DL_CACHE_KEY_HEX; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return false;
    return true;
}

/* Parses "<digits>" at s, stores the number; returns the end or NULL. */
static const char *parse_pid(const char *s, long *pid) {
    const char *p = s;
    long v = 0;
    while (*p >= '0' && *p <= '9' && v < 100000000) v = v * 10 + (*p++ - '0');
    if (p == s) return NULL;
    *pid = v;
    return p;
}

/* Classifies a folder entry; for temp names, *pid is the writer's process id. */
static int name_kind(const char *name, long *pid) {
    static const char *const exts[] = {".so", ".o", ".meta", ".probe"};
    *pid = 0;
    if (strncmp(name, "tmp-", 4) == 0) { /* tmp-<pid>-XXXXXX */
        const char *p = parse_pid(name + 4, pid);
        return p && p[0] == '-' && strlen(p + 1) == 6 ? NAME_TEMP : NAME_OTHER;
    }
    if (strlen(name) < DL_CACHE_KEY_HEX || !is_key(name)) return NAME_OTHER;
    const char *rest = name + DL_CACHE_KEY_HEX;
    for (size_t i = 0; i < DL_ARRAY_LEN(exts); i++) {
        size_t el = strlen(exts[i]);
        if (strncmp(rest, exts[i], el) != 0) continue;
        if (rest[el] == 0) return NAME_ENTRY;
        if (dl_atomic_temp_suffix(rest + el, pid)) return NAME_TEMP; /* <ext>.tmp.<pid>[.<n>] */
    }
    return NAME_OTHER;
}

/* A temp name whose writer is gone (or that is older than any build). */
static bool temp_is_stale(long pid, const struct stat *st) {
    if (time(NULL) - st->st_mtime > TEMP_MAX_AGE_S) return true;
    if (pid == (long)getpid()) return false;
    return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

typedef struct cache_row {
    char key[DL_CACHE_KEY_HEX + 1];
    char kind[4];
    int64_t size;
    time_t mtime;
} cache_row;

static int row_by_age(const void *a, const void *b) {
    const cache_row *x = a, *y = b;
    return (x->mtime < y->mtime) - (x->mtime > y->mtime);
}

static void format_age(time_t s, char *buf, size_t n) {
    if (s < 0) s = 0;
    if (s < 120) snprintf(buf, n, "%lds", (long)s);
    else if (s < 7200) snprintf(buf, n, "%ldm", (long)(s / 60));
    else if (s < 172800) snprintf(buf, n, "%ldh", (long)(s / 3600));
    else snprintf(buf, n, "%ldd", (long)(s / 86400));
}

/* Opens the cache folder for listing; *d = NULL (and DL_OK) when it does not exist yet. */
static dl_status open_cache(dl_ctx *ctx, const dl_jit_opts *o, char *dir, size_t n, DIR **d) {
    *d = NULL;
    if (!dl_cache_dir(o, dir, n))
        return dl_fail(ctx, DL_ERR_INVALID, "compile cache: no folder (set DLCC_CACHE_DIR or HOME)");
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) return DL_OK;
    if (fd >= 0 && !(*d = fdopendir(fd))) close(fd);
    if (!*d) return dl_fail(ctx, DL_ERR_IO, "compile cache: cannot open %s: %s", dir, strerror(errno));
    return DL_OK;
}

dl_status dl_cache_list(dl_ctx *ctx, const dl_jit_opts *o, FILE *f) {
    char dir[1024];
    DIR *d;
    DL_TRY(open_cache(ctx, o, dir, sizeof dir, &d));
    cache_row *rows = NULL;
    size_t nrows = 0, cap = 0;
    dl_status s = DL_OK;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        long pid;
        struct stat st;
        if (name_kind(e->d_name, &pid) != NAME_ENTRY) continue;
        const char *ext = e->d_name + DL_CACHE_KEY_HEX;
        if (strcmp(ext, ".so") != 0 && strcmp(ext, ".o") != 0) continue;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
            continue;
        if (nrows == cap) {
            cap = cap ? 2 * cap : 64;
            cache_row *grown = dl_realloc(rows, cap * sizeof *rows);
            if (!grown) {
                s = dl_fail(ctx, DL_ERR_NOMEM, "compile cache: out of memory listing %s", dir);
                break;
            }
            rows = grown;
        }
        cache_row *r = &rows[nrows++];
        memcpy(r->key, e->d_name, DL_CACHE_KEY_HEX);
        r->key[DL_CACHE_KEY_HEX] = 0;
        snprintf(r->kind, sizeof r->kind, "%s", ext + 1);
        r->size = st.st_size;
        r->mtime = st.st_mtime;
    }
    if (d) closedir(d);
    if (s == DL_OK) {
        if (nrows > 1) qsort(rows, nrows, sizeof *rows, row_by_age);
        int64_t total = 0;
        time_t now = time(NULL);
        for (size_t i = 0; i < nrows; i++) {
            char age[32];
            format_age(now - rows[i].mtime, age, sizeof age);
            fprintf(f, "%s  %-2s  %10.1f KiB  %s ago\n", rows[i].key, rows[i].kind,
                    rows[i].size / 1024.0, age);
            total += rows[i].size;
        }
        fprintf(f, "%zu entr%s, %.1f KiB in %s\n", nrows, nrows == 1 ? "y" : "ies",
                total / 1024.0, dir);
    }
    dl_free(rows);
    return s;
}

dl_status dl_cache_clear(dl_ctx *ctx, const dl_jit_opts *o, int *removed) {
    char dir[1024];
    DIR *d;
    if (removed) *removed = 0;
    DL_TRY(open_cache(ctx, o, dir, sizeof dir, &d));
    if (!d) return DL_OK;
    int count = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        long pid;
        struct stat st;
        int kind = name_kind(e->d_name, &pid);
        if (kind == NAME_OTHER || fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
            continue;
        if (kind == NAME_TEMP && !temp_is_stale(pid, &st)) continue; /* a build in progress */
        if (S_ISDIR(st.st_mode)) {
            if (kind == NAME_TEMP) count += remove_flat_at(dirfd(d), e->d_name);
        } else if (unlinkat(dirfd(d), e->d_name, 0) == 0) {
            count++;
        }
    }
    closedir(d);
    if (removed) *removed = count;
    return DL_OK;
}
