/* atomic-file.c — the one way dlcc replaces a file: temporary file, optional syncs, rename
 * (see atomic-file.h). */
#include "atomic-file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <unistd.h>

#define TEMP_ATTEMPTS   100
#define PATH_IN_MESSAGE 400 /* bytes of the path a message shows at most */

static atomic_uint temp_counter; /* the <n> of numbered temporary names */

/* Records "<what> '<path>': <problem>" (or "<path>: <problem>" without what). A very long path
 * is shortened so that the problem still fits in the message. */
static dl_status failf(dl_ctx *ctx, dl_status status, const char *what, const char *path,
                       const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static dl_status failf(dl_ctx *ctx, dl_status status, const char *what, const char *path,
                       const char *fmt, ...) {
    if (!ctx) return status;
    char problem[DL_ERRMSG_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(problem, sizeof problem, fmt, ap);
    va_end(ap);
    size_t len = strlen(path);
    int keep = len > PATH_IN_MESSAGE ? PATH_IN_MESSAGE : (int)len;
    const char *more = path[keep] ? "..." : "";
    if (what) return dl_fail(ctx, status, "%s '%.*s%s': %s", what, keep, path, more, problem);
    return dl_fail(ctx, status, "%.*s%s: %s", keep, path, more, problem);
}

bool dl_write_all(int fd, const void *data, size_t n) {
    const char *p = data;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            if (w == 0) errno = EIO;
            return false;
        }
        p += w;
        n -= (size_t)w;
    }
    return true;
}

bool dl_atomic_put(dl_atomic_file *f, const void *data, size_t n) {
    if (f->status != DL_OK) return false;
    if (!dl_write_all(f->fd, data, n)) {
        f->status = failf(f->ctx, DL_ERR_IO, f->what, f->path, "writing '%s' failed: %s", f->tmp,
                          strerror(errno));
        return false;
    }
    f->written += n;
    return true;
}

bool dl_atomic_temp_suffix(const char *s, long *pid) {
    if (strncmp(s, ".tmp.", 5) != 0) return false;
    const char *p = s + 5;
    long v = 0;
    if (*p < '0' || *p > '9') return false;
    for (; *p >= '0' && *p <= '9'; p++) {
        v = v * 10 + (*p - '0');
        if (v > INT_MAX) return false; /* no pid */
    }
    if (*p == '.') {
        if (p[1] < '0' || p[1] > '9') return false;
        for (p++; *p >= '0' && *p <= '9'; p++) continue;
    }
    if (*p || v == 0) return false;
    *pid = v;
    return true;
}

/* Creates f's temporary file in tmp (tmp_n bytes): "<path>.tmp.<pid>", else a numbered one. */
static dl_status create_temp(dl_atomic_file *f, char *tmp, size_t tmp_n, mode_t mode) {
    long pid = (long)getpid();
    int err = 0;
    for (int attempt = 0; attempt < TEMP_ATTEMPTS; attempt++) {
        int len = attempt == 0 ? snprintf(tmp, tmp_n, "%s.tmp.%ld", f->path, pid)
                               : snprintf(tmp, tmp_n, "%s.tmp.%ld.%u", f->path, pid,
                                          atomic_fetch_add(&temp_counter, 1));
        if (len < 0 || (size_t)len >= tmp_n)
            return failf(f->ctx, DL_ERR_INVALID, f->what, f->path, "path is too long");
        f->fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
        if (f->fd >= 0) return DL_OK;
        err = errno;
        if (err != EEXIST) break;
    }
    return failf(f->ctx, DL_ERR_IO, f->what, f->path, "cannot create '%s': %s", tmp, strerror(err));
}

/* The directory holding path: "." for a bare name, "/" for a file in the root. */
static void dir_of(const char *path, char *dir, size_t dir_n) {
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(dir, dir_n, ".");
    else if (slash == path)
        snprintf(dir, dir_n, "/");
    else
        snprintf(dir, dir_n, "%.*s", (int)(slash - path), path);
}

/* fsync of a directory, so that a rename in it survives a power loss; errno tells why not. */
static bool sync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return false;
    bool ok = fsync(fd) == 0 || errno == EINVAL; /* EINVAL: the filesystem cannot sync dirs */
    int err = errno;
    close(fd);
    errno = err;
    return ok;
}

/* Removes path's temporary files in dir whose writer no longer runs. Best effort. */
static void remove_stale_temps(const char *path, const char *dir) {
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    size_t bl = strlen(base);
    DIR *d = opendir(dir);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        long pid;
        if (strncmp(e->d_name, base, bl) != 0 || !dl_atomic_temp_suffix(e->d_name + bl, &pid) ||
            pid == (long)getpid())
            continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* alive, or not ours to tell */
        unlinkat(dirfd(d), e->d_name, 0);
    }
    closedir(d);
}

dl_status dl_atomic_write(dl_ctx *ctx, const char *path, const char *what, unsigned flags,
                          dl_atomic_fill_fn fill, void *arg) {
    DL_ASSERT(path && fill);
    char tmp[PATH_MAX];
    dl_atomic_file f = {.ctx = ctx, .path = path, .what = what, .tmp = tmp, .fd = -1};
    DL_TRY(create_temp(&f, tmp, sizeof tmp, (flags & DL_ATOMIC_PRIVATE) ? 0600 : 0666));
    dl_status s = fill(ctx, &f, arg);
    if (s == DL_OK) s = f.status;
    if (s == DL_OK && (flags & DL_ATOMIC_SYNC) && fsync(f.fd) != 0)
        s = failf(ctx, DL_ERR_IO, what, path, "syncing '%s' failed: %s", tmp, strerror(errno));
    if (close(f.fd) != 0 && s == DL_OK)
        s = failf(ctx, DL_ERR_IO, what, path, "closing '%s' failed: %s", tmp, strerror(errno));
    if (s == DL_OK && rename(tmp, path) != 0)
        s = failf(ctx, DL_ERR_IO, what, path, "renaming '%s' failed: %s", tmp, strerror(errno));
    if (s != DL_OK) {
        unlink(tmp);
        return s;
    }
    if (!(flags & (DL_ATOMIC_SYNC | DL_ATOMIC_REMOVE_STALE))) return DL_OK;
    char dir[PATH_MAX];
    dir_of(path, dir, sizeof dir);
    if ((flags & DL_ATOMIC_SYNC) && !sync_dir(dir) && (flags & DL_ATOMIC_SYNC_DIR))
        return failf(ctx, DL_ERR_IO, what, path, "written, but syncing directory '%s' failed: %s",
                     dir, strerror(errno));
    if (flags & DL_ATOMIC_REMOVE_STALE) remove_stale_temps(path, dir);
    return DL_OK;
}

typedef struct buf_contents {
    const void *data;
    size_t n;
} buf_contents;

static dl_status put_buf(dl_ctx *ctx, dl_atomic_file *f, void *arg) {
    DL_UNUSED(ctx);
    const buf_contents *b = arg;
    dl_atomic_put(f, b->data, b->n);
    return DL_OK; /* a failed put is reported by dl_atomic_write */
}

dl_status dl_atomic_write_buf(dl_ctx *ctx, const char *path, const char *what, unsigned flags,
                              const void *data, size_t n) {
    buf_contents b = {data, n};
    return dl_atomic_write(ctx, path, what, flags, put_buf, &b);
}
