/* util.c — n-d index helpers, hashing and whole-file reads. */
#include "core-impl.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

bool dl_index_next(int rank, const int64_t *dims, int64_t *idx) {
    for (int d = rank - 1; d >= 0; d--) {
        if (++idx[d] < dims[d]) return true;
        idx[d] = 0;
    }
    return false;
}

void dl_strides(int rank, const int64_t *dims, int64_t *strides) {
    int64_t s = 1;
    for (int d = rank - 1; d >= 0; d--) {
        strides[d] = s;
        s *= dims[d];
    }
}

void dl_broadcast_strides(const dl_tensor *t, int out_rank, const int64_t *out_dims,
                          int64_t *strides) {
    int64_t own[DL_MAX_RANK];
    dl_strides(t->rank, t->dims, own);
    int off = out_rank - t->rank;
    for (int d = 0; d < out_rank; d++) {
        int td = d - off;
        strides[d] = (td < 0 || t->dims[td] == 1) ? 0 : own[td];
        DL_UNUSED(out_dims);
    }
}

/* FNV-1a, 64-bit: stable across runs and machines, good enough for names and cache keys. */
uint64_t dl_hash_bytes(const void *p, size_t n, uint64_t seed) {
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ull ^ seed;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 1099511628211ull;
    }
    return h;
}

dl_status dl_read_file(dl_ctx *ctx, const char *path, size_t max_bytes, void **data, size_t *size) {
    *data = NULL;
    *size = 0;
    int fd = open(path, O_RDONLY | O_NONBLOCK); /* a FIFO must not block the open */
    FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
    if (!f) {
        dl_status s = dl_fail(ctx, DL_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        if (fd >= 0) close(fd);
        return s;
    }
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return dl_fail(ctx, DL_ERR_IO, "%s: not a regular file", path);
    }
    if ((uint64_t)st.st_size > max_bytes) {
        fclose(f);
        return dl_fail(ctx, DL_ERR_LIMIT, "%s: file of %lld bytes exceeds the cap of %zu", path,
                       (long long)st.st_size, max_bytes);
    }
    size_t n = (size_t)st.st_size;
    unsigned char *buf = dl_malloc(n + 1);
    if (!buf) {
        fclose(f);
        return dl_fail(ctx, DL_ERR_NOMEM, "%s: out of memory reading %zu bytes", path, n);
    }
    size_t got = fread(buf, 1, n, f);
    fclose(f);
    if (got != n) {
        dl_free(buf);
        return dl_fail(ctx, DL_ERR_IO, "%s: short read (%zu of %zu bytes)", path, got, n);
    }
    buf[n] = 0;
    *data = buf;
    *size = n;
    return DL_OK;
}
