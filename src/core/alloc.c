/* alloc.c — the one allocation hook. Every heap allocation in dlcc goes through here so that a
 * cap on model-derived sizes applies everywhere and tests can fail the Nth allocation. */
#include "core-impl.h"

#include <stdatomic.h>
#include <stdlib.h>

static size_t alloc_limit = (size_t)8 << 30;
static atomic_long fail_countdown = -1;

void dl_set_alloc_limit(size_t bytes) { alloc_limit = bytes; }
size_t dl_alloc_limit(void) { return alloc_limit; }
void dl_alloc_fail_after(long n) { atomic_store(&fail_countdown, n); }

static bool injected_failure(void) {
    long c = atomic_load(&fail_countdown);
    if (c < 0) return false;
    if (c == 0) return true;
    atomic_fetch_sub(&fail_countdown, 1);
    return false;
}

void *dl_malloc(size_t n) {
    if (injected_failure()) return NULL;
    return malloc(n ? n : 1);
}

void *dl_calloc(size_t count, size_t size) {
    if (injected_failure()) return NULL;
    if (count == 0 || size == 0) return calloc(1, 1);
    return calloc(count, size);
}

void *dl_realloc(void *p, size_t n) {
    if (injected_failure()) return NULL;
    return realloc(p, n ? n : 1);
}

void dl_free(void *p) { free(p); }

char *dl_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = dl_malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

dl_status dl_alloc_checked(dl_ctx *ctx, size_t n, void **out, const char *what) {
    *out = NULL;
    if (n > alloc_limit)
        return dl_fail(ctx, DL_ERR_LIMIT, "%s needs %zu bytes, over the allocation cap of %zu",
                       what, n, alloc_limit);
    void *p = dl_calloc(1, n);
    if (!p) return dl_fail(ctx, DL_ERR_NOMEM, "out of memory allocating %zu bytes for %s", n, what);
    *out = p;
    return DL_OK;
}

dl_status dl_mul_size(dl_ctx *ctx, size_t a, size_t b, size_t *out, const char *what) {
    if (b != 0 && a > SIZE_MAX / b)
        return dl_fail(ctx, DL_ERR_LIMIT, "size of %s overflows", what);
    *out = a * b;
    if (*out > alloc_limit)
        return dl_fail(ctx, DL_ERR_LIMIT, "%s needs %zu bytes, over the allocation cap of %zu",
                       what, *out, alloc_limit);
    return DL_OK;
}
