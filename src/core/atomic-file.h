/* atomic-file.h — writing a file so that readers and crashes only ever see the old contents or
 * the new ones: the bytes go to a temporary file next to the target, which is renamed over it
 * once complete (optionally synced first, and the directory after). Used for ONNX models,
 * checkpoints and compile cache entries.
 *
 * The temporary file is "<path>.tmp.<pid>", or "<path>.tmp.<pid>.<n>" when that name is taken
 * (another thread of this process writing the same path, or a file left by a process that had
 * the same pid), always created anew (O_EXCL: no link is followed, nothing is overwritten).
 * Every failure removes it and leaves path as it was, except a failed directory sync under
 * DL_ATOMIC_SYNC_DIR, which comes after the rename. Messages name the file and the system's
 * reason: "checkpoint 'a.st': renaming 'a.st.tmp.42' failed: Is a directory". */
#ifndef DL_ATOMIC_FILE_H
#define DL_ATOMIC_FILE_H

#include "core-impl.h"

enum {
    /* fsync the file before the rename and its directory after (the directory: best effort) */
    DL_ATOMIC_SYNC = 1 << 0,
    /* with DL_ATOMIC_SYNC: a directory that cannot be synced fails the call (EINVAL, a
     * filesystem that cannot sync directories, excepted); path already holds the new file */
    DL_ATOMIC_SYNC_DIR = 1 << 1,
    /* the file is created 0600 rather than 0666 (both before the umask) */
    DL_ATOMIC_PRIVATE = 1 << 2,
    /* after a success, removes the temporary files of path that processes no longer running
     * left behind (killed while writing); best effort */
    DL_ATOMIC_REMOVE_STALE = 1 << 3,
};

/* The temporary file while it is being filled. A fill reads `written` and `status`; the rest
 * belongs to dl_atomic_write. */
typedef struct dl_atomic_file {
    dl_ctx *ctx;
    const char *path, *what;
    const char *tmp;
    int fd;
    dl_status status; /* DL_ERR_IO once a dl_atomic_put failed (its message is recorded) */
    uint64_t written; /* bytes written so far */
} dl_atomic_file;

/* Appends n bytes. After a failure (recorded on the context, naming the file and the reason)
 * this and every later call write nothing and return false; dl_atomic_write then fails with
 * that error, so a fill may ignore the result. */
bool dl_atomic_put(dl_atomic_file *f, const void *data, size_t n);

/* Writes the file's contents with dl_atomic_put. Returning an error (recorded with dl_fail)
 * abandons the write: the temporary file is removed and path is untouched. */
typedef dl_status (*dl_atomic_fill_fn)(dl_ctx *ctx, dl_atomic_file *f, void *arg);

/* Replaces path (or creates it) with what fill writes. `what` names the file in messages:
 * "checkpoint" gives "checkpoint 'p': ...", NULL gives "p: ...". flags: DL_ATOMIC_*. ctx may
 * be NULL when nobody wants the message. Allocates nothing. */
dl_status dl_atomic_write(dl_ctx *ctx, const char *path, const char *what, unsigned flags,
                          dl_atomic_fill_fn fill, void *arg);
/* The same with the n bytes at data as the contents. */
dl_status dl_atomic_write_buf(dl_ctx *ctx, const char *path, const char *what, unsigned flags,
                              const void *data, size_t n);

/* Whether s (the part of a file name after the target's name) is a temporary suffix above:
 * ".tmp.<pid>" or ".tmp.<pid>.<n>", with the writer's pid in *pid. */
bool dl_atomic_temp_suffix(const char *s, long *pid);

/* write(2) until all n bytes are written (EINTR retried); false with errno set otherwise (EIO
 * when the system wrote nothing without saying why). */
bool dl_write_all(int fd, const void *data, size_t n);

#endif
