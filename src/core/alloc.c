/* alloc.c — the one allocation hook. Every heap allocation in dlcc goes through here so that a
 * cap on model-derived sizes applies everywhere and tests can fail the Nth allocation. */
#include "core-impl.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <sys/mman.h>

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

/* Blocks of 2 MiB or more are mapped on their own, 2 MiB-aligned, and advised as transparent
 * huge pages (the system's default is often "madvise": only advised memory gets them). The
 * kernels stream the packed weights (ResNet-50: 100 MB a run) and sweep the arena and scratch
 * memory in strides of whole planes (a Winograd transform writes 36 matrices at once); with
 * 4 KiB pages each of those misses the TLB every 4 KiB. Measured, packed weights, arena and
 * scratch advised, medians alternating with the unadvised build: ResNet-50 35.2 -> 34.1 ms at 1
 * thread, 17.9 -> 17.6 at 2; BERT 96.0 -> 94.5 at 1. Mapped rather than taken from malloc, so
 * that the advice never outlives the block on heap memory that malloc hands out again. Where
 * the kernel has no huge pages (or they are set to "never") the advice does nothing and the
 * memory is plain. 2 MiB is x86-64's huge page. */
enum { DL_HUGE_PAGE = 2 << 20 };

/* The bytes mapped for a block of n >= DL_HUGE_PAGE (0 when that overflows). */
static size_t huge_len(size_t n) {
    if (n > SIZE_MAX - 2 * (size_t)DL_HUGE_PAGE) return 0;
    return (n + DL_HUGE_PAGE - 1) / DL_HUGE_PAGE * DL_HUGE_PAGE;
}

void *dl_malloc_huge(size_t n) {
    if (injected_failure()) return NULL;
    if (n < DL_HUGE_PAGE) {
        const size_t len = (n + 63) / 64 * 64 + 64 * (n == 0);
        void *p = aligned_alloc(64, len);
        if (p) memset(p, 0, len);
        return p;
    }
    const size_t len = huge_len(n);
    if (!len) return NULL;
    /* over-map by a huge page and trim to an aligned run of len bytes (anonymous: zeros) */
    char *m =
        mmap(NULL, len + DL_HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return NULL;
    char *p = (char *)(((uintptr_t)m + DL_HUGE_PAGE - 1) & ~(uintptr_t)(DL_HUGE_PAGE - 1));
    const size_t head = (size_t)(p - m); /* < DL_HUGE_PAGE, so there is a tail to unmap too */
    if (head) munmap(m, head);
    munmap(p + len, DL_HUGE_PAGE - head);
#ifdef MADV_HUGEPAGE
    (void)madvise(p, len, MADV_HUGEPAGE);
#endif
    return p;
}

void dl_free_huge(void *p, size_t n) {
    if (!p) return;
    if (n < DL_HUGE_PAGE)
        free(p);
    else
        munmap(p, huge_len(n));
}

dl_status dl_alloc_huge_checked(dl_ctx *ctx, size_t n, void **out, const char *what) {
    *out = NULL;
    if (n > alloc_limit)
        return dl_fail(ctx, DL_ERR_LIMIT, "%s needs %zu bytes, over the allocation cap of %zu",
                       what, n, alloc_limit);
    void *p = dl_malloc_huge(n);
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
