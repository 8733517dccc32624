/* test_core.c — unit tests of the core, the builder API and the interpreter's error paths.
 * Each check prints PASS/FAIL; the process exits non-zero if any check failed. */
#include "../../src/core/core-impl.h"
#include "dlcc.h"

#include <cpuid.h>
#include <immintrin.h>
#include <math.h>
#include <errno.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#define CHECK_PRINT_PASS
#include "check.h"


/* Half-precision conversion against the CPU's own F16C instructions (an independent reference,
 * and available to gcc and clang alike). */
__attribute__((target("f16c"))) static void test_half(void) {
    unsigned eax, ebx, ecx = 0, edx;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !(ecx & (1u << 29))) { /* CPUID.1:ECX.F16C */
        CHECK("f16 conversions (no F16C on this CPU: checked by round trip only)",
              dl_f16_to_f32(dl_f32_to_f16(1.5f)) == 1.5f);
        return;
    }
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float ref = _cvtsh_ss((unsigned short)h), f = dl_f16_to_f32((uint16_t)h);
        if (!(isnan(f) && isnan(ref)) && f != ref) bad++;
    }
    CHECK("f16 -> f32 matches F16C for all 65536 values", bad == 0);
    bad = 0;
    uint64_t s = 12345;
    for (int i = 0; i < 1000000; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t b = (uint32_t)(s >> 32);
        float f;
        memcpy(&f, &b, 4);
        if (isnan(f)) continue;
        if (dl_f32_to_f16(f) != _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT)) bad++;
    }
    CHECK("f32 -> f16 rounds like F16C on 1e6 random floats", bad == 0);
    CHECK("bf16 round to nearest even", dl_f32_to_bf16(1.00390625f) == 0x3f80 &&
                                            dl_f32_to_bf16(1.01171875f) == 0x3f82 &&
                                            dl_bf16_to_f32(0x3f80) == 1.0f);
}

static void test_tensor_caps(void) {
    dl_ctx *ctx = dl_ctx_new();
    dl_tensor *t = NULL;
    int64_t huge[] = {1ll << 40, 1ll << 10};
    CHECK("huge tensor is refused with a limit error",
          dl_tensor_new(ctx, DL_F32, 2, huge, &t) == DL_ERR_LIMIT && !t &&
              strstr(dl_errmsg(ctx), "cap"));
    dl_ctx_clear(ctx);
    int64_t overflow[] = {1ll << 40, 1ll << 40};
    CHECK("element-count overflow is refused", dl_tensor_new(ctx, DL_F32, 2, overflow, &t) == DL_ERR_LIMIT);
    dl_ctx_clear(ctx);
    int64_t neg[] = {3, -2};
    CHECK("negative dim is refused", dl_tensor_new(ctx, DL_F32, 2, neg, &t) == DL_ERR_SHAPE);
    dl_ctx_free(ctx);
}

/* The blocks the kernels sweep every run (dl_malloc_huge, dl_alloc_huge_checked): zeros,
 * 64-byte aligned, from 2 MiB up a mapping of their own, 2 MiB-aligned, gone after
 * dl_free_huge; capped and failing cleanly like dl_alloc_checked. Whether the kernel backs them
 * with huge pages depends on the system, so that is reported, not asserted. */
static long anon_huge_kb(void) {
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "AnonHugePages: %ld", &kb) == 1) break;
    if (f) fclose(f);
    return kb;
}

static bool all_zero(const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i]) return false;
    return true;
}

static void test_huge_alloc(void) {
    dl_ctx *ctx = dl_ctx_new();
    void *p = NULL;
    const size_t n = (3u << 20) + 100;
    long before = anon_huge_kb();
    dl_status s = dl_alloc_huge_checked(ctx, n, &p, "a test block");
    CHECK("a 3 MiB block is 2 MiB-aligned, zeroed, and mapped",
          s == DL_OK && p && ((uintptr_t)p & ((2u << 20) - 1)) == 0 && all_zero(p, n) &&
              msync(p, n, MS_ASYNC) == 0);
    if (p) memset(p, 1, n); /* all of it is ours */
    printf("  (huge pages backing it: %ld kB more than before)\n", anon_huge_kb() - before);
    dl_free_huge(p, n);
    CHECK("a freed 3 MiB block is unmapped, to its last page",
          p && msync(p, 4096, MS_ASYNC) != 0 && errno == ENOMEM &&
              msync((char *)p + (4u << 20) - 4096, 4096, MS_ASYNC) != 0);
    /* a small block comes from malloc: one just freed, full of ones, must come back zeroed */
    p = dl_malloc_huge(1000);
    if (p) memset(p, 0xff, 1000);
    dl_free_huge(p, 1000);
    p = dl_malloc_huge(1000);
    CHECK("a small block is zeroed and 64-byte aligned",
          p && ((uintptr_t)p & 63) == 0 && all_zero(p, 1000));
    dl_free_huge(p, 1000);
    size_t cap = dl_alloc_limit();
    dl_set_alloc_limit(4u << 20);
    s = dl_alloc_huge_checked(ctx, 4u << 20, &p, "a test block");
    CHECK("a block of exactly the cap is allocated", s == DL_OK && p);
    dl_free_huge(p, 4u << 20);
    s = dl_alloc_huge_checked(ctx, (4u << 20) + 1, &p, "a test block");
    CHECK("a block over the cap is refused with a limit error",
          s == DL_ERR_LIMIT && !p && strstr(dl_errmsg(ctx), "a test block"));
    dl_set_alloc_limit(512);
    dl_ctx_clear(ctx);
    s = dl_alloc_huge_checked(ctx, 1024, &p, "a test block");
    CHECK("a small block over the cap is refused too", s == DL_ERR_LIMIT && !p);
    dl_set_alloc_limit(cap);
    dl_ctx_clear(ctx);
    for (int k = 0; k < 2; k++) {
        dl_alloc_fail_after(0);
        s = dl_alloc_huge_checked(ctx, k ? 100 : 5u << 20, &p, "a test block");
        dl_alloc_fail_after(-1);
        CHECK(k ? "a failed small block is a clean out-of-memory error"
                : "a failed large block is a clean out-of-memory error",
              s == DL_ERR_NOMEM && !p);
        dl_ctx_clear(ctx);
    }
    dl_ctx_free(ctx);
}

static void test_npy(void) {
    dl_ctx *ctx = dl_ctx_new();
    char path[] = "/tmp/dlcc-test-XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    const dl_dtype types[] = {DL_F32, DL_F64, DL_I64, DL_U8, DL_BOOL, DL_F16};
    const int64_t dims[3][3] = {{0}, {5}, {2, 3, 4}};
    const int ranks[3] = {0, 1, 3};
    int ok = 1;
    for (size_t k = 0; k < DL_ARRAY_LEN(types); k++)
        for (int r = 0; r < 3; r++) {
            dl_tensor *a, *b = NULL;
            if (dl_tensor_new(ctx, types[k], ranks[r], dims[r], &a) != DL_OK) {
                ok = 0;
                continue;
            }
            for (size_t i = 0; i < a->nbytes; i++) ((uint8_t *)a->data)[i] = (uint8_t)(i * 7 + 1);
            if (types[k] == DL_BOOL)
                for (size_t i = 0; i < a->nbytes; i++) ((uint8_t *)a->data)[i] &= 1;
            if (dl_npy_save(ctx, path, a) != DL_OK || dl_npy_load(ctx, path, &b) != DL_OK ||
                b->dtype != a->dtype || b->rank != a->rank || b->nbytes != a->nbytes ||
                memcmp(a->dims, b->dims, sizeof(int64_t) * (size_t)a->rank) ||
                memcmp(a->data, b->data, a->nbytes))
                ok = 0;
            dl_tensor_free(a);
            dl_tensor_free(b);
        }
    CHECK("npy save/load round trip (6 dtypes x ranks 0,1,3)", ok);
    /* truncated file */
    FILE *f = fopen(path, "wb");
    fwrite("\x93NUMPY\x01\x00\x76\x00{'descr': '<f4', 'fortran_order': False, 'shape': (100,), }", 1, 70, f);
    fclose(f);
    dl_tensor *t = NULL;
    dl_ctx_clear(ctx);
    CHECK("truncated npy is a parse error", dl_npy_load(ctx, path, &t) == DL_ERR_PARSE && !t);
    unlink(path);
    dl_ctx_free(ctx);
}

static dl_tensor *tensor_f32(dl_ctx *ctx, int rank, const int64_t *dims, const float *vals) {
    dl_tensor *t;
    if (dl_tensor_new(ctx, DL_F32, rank, dims, &t) != DL_OK) return NULL;
    memcpy(t->data, vals, t->nbytes);
    return t;
}

static void test_builder(void) {
    dl_ctx *ctx = dl_ctx_new();
    dl_graph *g = dl_graph_new(ctx);
    const int64_t ad[] = {2, 3}, bd[] = {4, 5};
    dl_value *a = dl_input(g, "a", DL_F32, 2, ad, NULL);
    dl_value *b = dl_input(g, "b", DL_F32, 2, bd, NULL);
    dl_value *c = dl_add(g, a, b);
    dl_value *d = dl_relu(g, c); /* sticky: NULL operand after an error */
    CHECK("builder: shape mismatch gives NULL and a message naming op and shapes",
          !c && !d && dl_graph_status(g) == DL_ERR_SHAPE && strstr(dl_errmsg(ctx), "Add") &&
              strstr(dl_errmsg(ctx), "[2,3]") && strstr(dl_errmsg(ctx), "[4,5]"));
    dl_graph_free(g);
    dl_ctx_clear(ctx);

    /* (x @ w) + bias with a symbolic batch: runs for batch 1 and 3 */
    g = dl_graph_new(ctx);
    const int64_t xd[] = {-1, 2}, wd[] = {2, 2}, biasd[] = {2};
    const char *syms[] = {"N", NULL};
    const float w[] = {1, 2, 3, 4}, bias[] = {10, 20};
    dl_value *x = dl_input(g, "x", DL_F32, 2, xd, syms);
    dl_value *y = dl_add(g, dl_matmul(g, x, dl_constant(g, "w", tensor_f32(ctx, 2, wd, w))),
                         dl_constant(g, "bias", tensor_f32(ctx, 1, biasd, bias)));
    dl_output(g, y, "y");
    CHECK("builder: symbolic batch propagates", dl_graph_status(g) == DL_OK &&
                                                   dl_value_dim(y, 0) == -1 &&
                                                   strcmp(dl_value_dim_name(y, 0), "N") == 0);
    const float xv[] = {1, 1, 2, 0, 0, 3};
    const float want[] = {14, 26, 12, 24, 19, 32};
    for (int batch = 1; batch <= 3; batch += 2) {
        const int64_t dims[] = {batch, 2};
        dl_tensor *in = tensor_f32(ctx, 2, dims, xv), *out = NULL;
        dl_status s = dl_run(ctx, g, DL_BACKEND_REF, 1, NULL, &in, &out);
        int ok = s == DL_OK && out->dims[0] == batch;
        for (int i = 0; ok && i < batch * 2; i++) ok = ((float *)out->data)[i] == want[i];
        CHECK(batch == 1 ? "builder: matmul+add, batch 1" : "builder: matmul+add, batch 3", ok);
        dl_tensor_free(in);
        dl_tensor_free(out);
    }
    /* wrong input dtype and shape give errors naming the input */
    const int64_t bad_dims[] = {2, 3};
    dl_tensor *bad = NULL, *out = NULL;
    dl_tensor_new(ctx, DL_F32, 2, bad_dims, &bad);
    CHECK("run: wrong input shape is an error naming the input",
          dl_run(ctx, g, DL_BACKEND_REF, 1, NULL, &bad, &out) == DL_ERR_SHAPE &&
              strstr(dl_errmsg(ctx), "'x'"));
    dl_tensor_free(bad);
    dl_ctx_clear(ctx);
    const int64_t ok_dims[] = {1, 2};
    dl_tensor_new(ctx, DL_I64, 2, ok_dims, &bad);
    CHECK("run: wrong input dtype is a type error",
          dl_run(ctx, g, DL_BACKEND_REF, 1, NULL, &bad, &out) == DL_ERR_TYPE);
    dl_tensor_free(bad);
    dl_graph_free(g);
    dl_ctx_free(ctx);
}

/* Fails the Nth allocation for every N until the whole load+run succeeds: each failure must be
 * a clean error (and, under ASan, leak-free). */
static void test_alloc_failures(const char *model) {
    int clean = 1, n;
    for (n = 0; n < 100000; n++) {
        dl_ctx *ctx = dl_ctx_new();
        if (!ctx) continue;
        dl_graph *g = NULL;
        dl_alloc_fail_after(n);
        dl_status s = dl_load_onnx(ctx, model, &g);
        dl_tensor *in = NULL, *out = NULL;
        if (s == DL_OK) {
            const int64_t dims[] = {1, 3, 32, 32};
            s = dl_tensor_new(ctx, DL_F32, 4, dims, &in);
            if (s == DL_OK) s = dl_run(ctx, g, DL_BACKEND_REF, 1, NULL, &in, &out);
        }
        dl_alloc_fail_after(-1);
        /* protobuf-c reports its own allocation failures as a decode failure */
        bool pb_oom = s == DL_ERR_PARSE && strstr(dl_errmsg(ctx), "protobuf decoding failed");
        if (s != DL_OK && s != DL_ERR_NOMEM && !pb_oom && clean) {
            printf("  allocation %d: unexpected status %s: %s\n", n, dl_status_name(s), dl_errmsg(ctx));
            clean = 0;
        }
        dl_tensor_free(in);
        dl_tensor_free(out);
        dl_graph_free(g);
        dl_ctx_free(ctx);
        if (s == DL_OK) break;
    }
    printf("  (load+run of %s needed %d allocations)\n", model, n);
    CHECK("every failed allocation during load and run is a clean out-of-memory error", clean && n > 10);
}

int main(int argc, char **argv) {
    test_half();
    test_tensor_caps();
    test_huge_alloc();
    test_npy();
    test_builder();
    if (argc > 1) test_alloc_failures(argv[1]);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
