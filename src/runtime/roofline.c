/* roofline.c — what the machine can do, measured once per profile: peak FLOP/s of one thread (a
 * loop of independent multiply-add chains over the widest float vectors the CPU runs, picked at
 * run time so libdlcc itself stays portable) times the threads, and memory bandwidth (memcpy of
 * 32 MiB into 32 MiB, split over the threads, best of a few). */
#include "profile.h"

#include <pthread.h>
#include <time.h>

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#define DL_X86_VECTORS 1
#include <immintrin.h>
#endif

#define CHAINS                                                                                     \
    12 /* independent accumulators in FMA_LOOP: enough to cover FMA latency x issue width */

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* Each loop returns a sum of its accumulators so the work cannot be dropped. The multiplier
 * sits just below 1 so nothing overflows or turns denormal. */
/* Read at run time, so no compiler can fold the loop (with constants, clang's constant
 * propagation finds the accumulators' fixed point and deletes it). */
static volatile float fma_mul = 0.9999999f, fma_add = 1e-7f;

/* Explicit accumulators rather than an array: they must live in registers at any -O level. */
#define FMA_LOOP(VEC, SET1, FMA, LANE0)                                                            \
    VEC m = SET1(fma_mul), c = SET1(fma_add);                                                      \
    VEC a0 = SET1(1.00f), a1 = SET1(1.01f), a2 = SET1(1.02f), a3 = SET1(1.03f);                    \
    VEC a4 = SET1(1.04f), a5 = SET1(1.05f), a6 = SET1(1.06f), a7 = SET1(1.07f);                    \
    VEC a8 = SET1(1.08f), a9 = SET1(1.09f), a10 = SET1(1.10f), a11 = SET1(1.11f);                  \
    for (long r = 0; r < reps; r++) {                                                              \
        a0 = FMA(a0, m, c), a1 = FMA(a1, m, c), a2 = FMA(a2, m, c), a3 = FMA(a3, m, c);            \
        a4 = FMA(a4, m, c), a5 = FMA(a5, m, c), a6 = FMA(a6, m, c), a7 = FMA(a7, m, c);            \
        a8 = FMA(a8, m, c), a9 = FMA(a9, m, c), a10 = FMA(a10, m, c), a11 = FMA(a11, m, c);        \
    }                                                                                              \
    return LANE0(a0) + LANE0(a1) + LANE0(a2) + LANE0(a3) + LANE0(a4) + LANE0(a5) + LANE0(a6) +     \
           LANE0(a7) + LANE0(a8) + LANE0(a9) + LANE0(a10) + LANE0(a11);

typedef float dl_vf4 __attribute__((vector_size(16)));
static dl_vf4 vf4_set1(float x) {
    return (dl_vf4){x, x, x, x};
}
static dl_vf4 vf4_madd(dl_vf4 a, dl_vf4 b, dl_vf4 c) {
    return a * b + c;
}
static float vf4_lane0(dl_vf4 a) {
    return a[0];
}
static float fma_generic(long reps) {
    FMA_LOOP(dl_vf4, vf4_set1, vf4_madd, vf4_lane0)
}

#ifdef DL_X86_VECTORS
__attribute__((target("avx2,fma"))) static float fma_avx2(long reps) {
    FMA_LOOP(__m256, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_cvtss_f32)
}
__attribute__((target("avx512f"))) static float fma_avx512(long reps) {
    FMA_LOOP(__m512, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_cvtss_f32)
}
#endif

typedef struct fma_kernel {
    const char *isa;
    int lanes;
    float (*run)(long reps);
} fma_kernel;

static fma_kernel pick_kernel(void) {
#ifdef DL_X86_VECTORS
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return (fma_kernel){"avx512f", 16, fma_avx512};
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return (fma_kernel){"avx2", 8, fma_avx2};
#endif
    return (fma_kernel){"generic", 4, fma_generic};
}

static volatile float fma_sink;

/* GFLOP/s of one thread: reps doubled until a run takes 5 ms, then the best of five. */
static double peak_one_thread(const fma_kernel *k) {
    long reps = 1 << 14;
    double t = 0;
    for (;;) {
        double t0 = now_s();
        fma_sink = k->run(reps);
        t = now_s() - t0;
        if (t >= 0.005 || reps > (1L << 30)) break;
        reps *= 2;
    }
    for (int i = 0; i < 5; i++) { /* best of five: a shared core has slow moments */
        double t0 = now_s();
        fma_sink = k->run(reps);
        double ti = now_s() - t0;
        if (ti < t) t = ti;
    }
    double flops = 2.0 * k->lanes * CHAINS * (double)reps;
    return t > 0 ? flops / t * 1e-9 : 0;
}

typedef struct copy_job {
    unsigned char *dst;
    const unsigned char *src;
    size_t n;
} copy_job;

static void *copy_worker(void *arg) {
    copy_job *j = arg;
    memcpy(j->dst, j->src, j->n);
    return NULL;
}

/* One memcpy of n bytes split over `threads` threads; returns seconds. */
static double timed_copy(unsigned char *dst, const unsigned char *src, size_t n, int threads) {
    pthread_t tid[64];
    copy_job jobs[64];
    bool started[64] = {false};
    size_t chunk = (n / (size_t)threads) & ~(size_t)63;
    double t0 = now_s();
    for (int i = 0; i < threads; i++) {
        size_t off = (size_t)i * chunk;
        jobs[i] = (copy_job){dst + off, src + off, i == threads - 1 ? n - off : chunk};
        if (i > 0) started[i] = pthread_create(&tid[i], NULL, copy_worker, &jobs[i]) == 0;
    }
    copy_worker(&jobs[0]);
    for (int i = 1; i < threads; i++) {
        if (started[i])
            pthread_join(tid[i], NULL);
        else
            copy_worker(&jobs[i]);
    }
    return now_s() - t0;
}

dl_status dl_measure_machine(dl_ctx *ctx, int threads, dl_machine *out) {
    memset(out, 0, sizeof *out);
    out->threads = threads > 0 ? threads : dl_default_threads();
    fma_kernel k = pick_kernel();
    out->isa = k.isa;
    out->peak_gflops_1 = peak_one_thread(&k);
    out->peak_gflops = out->peak_gflops_1 * out->threads;
    const size_t n = (size_t)32 << 20;
    unsigned char *src = dl_malloc(n), *dst = dl_malloc(n);
    if (!src || !dst) {
        dl_free(src);
        dl_free(dst);
        return dl_fail(ctx, DL_ERR_NOMEM, "out of memory measuring the memory bandwidth");
    }
    memset(src, 1, n); /* touch every page before timing */
    memset(dst, 0, n);
    int nt = out->threads < 64 ? out->threads : 64;
    double best = timed_copy(dst, src, n, nt);
    for (int i = 0; i < 3; i++) {
        double t = timed_copy(dst, src, n, nt);
        if (t < best) best = t;
    }
    out->bandwidth_gbs = best > 0 ? 2.0 * (double)n / best * 1e-9 : 0;
    dl_free(src);
    dl_free(dst);
    return DL_OK;
}

double dl_roofline_percent(const dl_machine *m, double flops, double bytes, double ms) {
    if (!m || flops <= 0 || ms <= 0 || m->peak_gflops <= 0) return -1;
    double achieved = flops / (ms * 1e-3) * 1e-9;
    double bound = m->peak_gflops;
    if (bytes > 0 && m->bandwidth_gbs > 0 && flops / bytes * m->bandwidth_gbs < bound)
        bound = flops / bytes * m->bandwidth_gbs;
    return 100.0 * achieved / bound;
}
