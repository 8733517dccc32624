/* gemm_bench.c — SGEMM side by side: dlcc's runtime kernel (dlrt_sgemm_ws, src/kernels/rt/gemm.c,
 * compiled into this program with the flags dlcc's JIT uses) against OpenBLAS (cblas_sgemm), on
 * row-major C[M,N] = A[M,K] * B[K,N], no transposition, alpha 1, beta 0, no epilogue. dlcc gets
 * the workspace a compiled program's planner gives such a call (both operands unpacked:
 * dlrt_gemm_workspace(M, N, K, 0, 0) bytes, where each operand shared by several tiles is packed
 * once), allocated once outside the timing, as OpenBLAS keeps its own buffers between calls.
 *
 * Built and run by bench/gemm.sh. usage:
 *   gemm_bench [--threads 1,2] [--time SEC] [--json] [--math bf16] [MxNxK ...]
 * Without sizes: squares 256..2048, BERT-base seq-128 shapes and ResNet-50 convolutions seen as
 * GEMMs (M = output channels, N = output positions, K = input channels x kernel taps).
 *
 * For each size and thread count: one untimed call of each (also compared: max |dlcc - OpenBLAS|
 * over max |OpenBLAS|), then calls timed one by one in blocks ordered dlcc, OpenBLAS, OpenBLAS,
 * dlcc, each block starting with an untimed call and lasting SEC/2 (default SEC 0.3 s, at least 2
 * calls), with a 120 ms pause between blocks: OpenBLAS's pthread workers spin for ~0.1 s after a
 * call and would otherwise steal a core from the next dlcc block (and dlcc's from OpenBLAS).
 * The figure is 2*M*N*K over the median call time.
 * Threads: dlrt_set_threads for dlcc (its pool, threads.c), openblas_set_num_threads for OpenBLAS;
 * both are read back and the program stops if either differs from what was asked.
 * Peak: a one-thread FMA-throughput loop (independent accumulator chains in the widest vectors
 * the build targets: AVX-512, else AVX2+FMA, else scalar), best of 50 runs of 10 ms; the peak for
 * T threads is taken as T times that (other load on the machine shows up as < 100%).
 * --math bf16 times dlrt_sgemm_bf16 (bfloat16 operands, float32 sums: what dlcc --math bf16 runs)
 * against the same float32 OpenBLAS call: not the same computation (its error against OpenBLAS
 * is then allowed up to 1e-2, and its percent of the float32 peak can pass 100). */
#define _POSIX_C_SOURCE 200809L
#include "dlrt.h"

#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif

/* OpenBLAS extensions (declared in its cblas.h, repeated for other cblas.h files). */
void openblas_set_num_threads(int num_threads);
int openblas_get_num_threads(void);
char *openblas_get_config(void);
char *openblas_get_corename(void);

typedef struct {
    const char *label;
    int64_t m, n, k;
} gemm_size;

static const gemm_size default_sizes[] = {
    {"square", 256, 256, 256},
    {"square", 512, 512, 512},
    {"square", 1024, 1024, 1024},
    {"square", 2048, 2048, 2048},
    {"bert qkv/out", 128, 768, 768},
    {"bert ffn1", 128, 3072, 768},
    {"bert ffn2", 128, 768, 3072},
    {"r50 l1 3x3", 64, 3136, 576},
    {"r50 l2 3x3", 128, 784, 1152},
    {"r50 l3 3x3", 256, 196, 2304},
    {"r50 l4 3x3", 512, 49, 4608},
    {"r50 l1 1x1", 256, 3136, 64},
    {"r50 l4 1x1", 2048, 49, 512},
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void pause_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* ---- peak FMA throughput, one thread ---------------------------------------------------------- */

#if defined(__AVX512F__)
#define PEAK_ISA "AVX-512 (zmm)"
#define PEAK_CHAINS 24
#define PEAK_LANES 16
typedef __m512 peak_vec;
#define PEAK_SET1(x) _mm512_set1_ps(x)
#define PEAK_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define PEAK_ADD(a, b) _mm512_add_ps(a, b)
#define PEAK_SUM(v) _mm512_reduce_add_ps(v)
#elif defined(__AVX2__) && defined(__FMA__)
#define PEAK_ISA "AVX2+FMA (ymm)"
#define PEAK_CHAINS 12
#define PEAK_LANES 8
typedef __m256 peak_vec;
#define PEAK_SET1(x) _mm256_set1_ps(x)
#define PEAK_FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define PEAK_ADD(a, b) _mm256_add_ps(a, b)
static float peak_sum(__m256 v) {
    float t[8];
    _mm256_storeu_ps(t, v);
    return t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
}
#define PEAK_SUM(v) peak_sum(v)
#else
#define PEAK_ISA "scalar"
#define PEAK_CHAINS 12
#define PEAK_LANES 1
typedef float peak_vec;
#define PEAK_SET1(x) (x)
#define PEAK_FMA(a, b, c) fmaf(a, b, c)
#define PEAK_ADD(a, b) ((a) + (b))
#define PEAK_SUM(v) (v)
#endif

/* acc = acc * a + b on PEAK_CHAINS independent registers: enough chains to cover the FMA
 * latency times the number of FMA pipes on current x86 cores. acc converges to b / (1 - a), so
 * nothing overflows or goes denormal. The result is returned so the loop is not removed. */
static float peak_loop(long iters) {
    peak_vec acc[PEAK_CHAINS];
    const peak_vec a = PEAK_SET1(0.999f), b = PEAK_SET1(0.001f);
    for (int c = 0; c < PEAK_CHAINS; c++) acc[c] = PEAK_SET1((float)c);
    for (long i = 0; i < iters; i++) {
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC unroll 32
#elif defined(__clang__)
#pragma unroll
#endif
        for (int c = 0; c < PEAK_CHAINS; c++) acc[c] = PEAK_FMA(acc[c], a, b);
    }
    peak_vec s = acc[0];
    for (int c = 1; c < PEAK_CHAINS; c++) s = PEAK_ADD(s, acc[c]);
    return PEAK_SUM(s);
}

/* GFLOP/s of one thread: the best of 50 runs of ~10 ms. Other load on the machine can only slow
 * a run down, and short runs are likelier to find the core to themselves. */
static double measure_peak(void) {
    long iters = 1 << 12;
    double t;
    volatile float sink;
    for (;;) { /* size the loop */
        double t0 = now_s();
        sink = peak_loop(iters);
        t = now_s() - t0;
        if (t > 0.005) break;
        iters *= 2;
    }
    iters = (long)((double)iters * 0.01 / t) + 1;
    double best = 0;
    for (int r = 0; r < 50; r++) {
        double t0 = now_s();
        sink = peak_loop(iters);
        double g = 2.0 * PEAK_CHAINS * PEAK_LANES * (double)iters / (now_s() - t0) / 1e9;
        if (g > best) best = g;
    }
    (void)sink;
    return best;
}

/* ---- GEMM calls -------------------------------------------------------------------------------- */

typedef struct {
    int64_t m, n, k;
    const float *a, *b;
    float *c;
    void *ws; /* dlcc's workspace (dlrt_gemm_workspace bytes), allocated once, untimed */
    size_t ws_bytes;
} gemm_job;

static int math_bf16; /* --math bf16 */

static void call_dlcc(const gemm_job *j) {
    (math_bf16 ? dlrt_sgemm_bf16 : dlrt_sgemm_ws)(j->m, j->n, j->k, j->a, j->k, 0, 0, j->b, j->n,
                                                  0, 0, j->c, j->n, NULL, j->ws, j->ws_bytes);
}

static void call_openblas(const gemm_job *j) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)j->m, (int)j->n, (int)j->k, 1.0f,
                j->a, (int)j->k, j->b, (int)j->n, 0.0f, j->c, (int)j->n);
}

typedef struct {
    double *t;
    int n, cap;
} samples;

static int samples_push(samples *s, double v) {
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 256;
        double *t = realloc(s->t, (size_t)cap * sizeof *t);
        if (!t) return -1;
        s->t = t;
        s->cap = cap;
    }
    s->t[s->n++] = v;
    return 0;
}

/* One block: an untimed call, then timed calls until `budget` seconds and at least 2 calls. */
static int run_block(void (*fn)(const gemm_job *), const gemm_job *j, double budget, samples *s) {
    fn(j);
    double start = now_s();
    int calls = 0;
    while (calls < 2 || now_s() - start < budget) {
        double t0 = now_s();
        fn(j);
        if (samples_push(s, now_s() - t0)) return -1;
        calls++;
    }
    return 0;
}

static double median(samples *s) {
    qsort(s->t, (size_t)s->n, sizeof *s->t, cmp_double);
    return s->n % 2 ? s->t[s->n / 2] : 0.5 * (s->t[s->n / 2 - 1] + s->t[s->n / 2]);
}

static float *alloc_floats(int64_t n) {
    size_t bytes = ((size_t)n * sizeof(float) + 63) / 64 * 64;
    return aligned_alloc(64, bytes ? bytes : 64);
}

static void fill_random(float *x, int64_t n, uint64_t *state) {
    for (int64_t i = 0; i < n; i++) { /* xorshift64*, uniform in [-1, 1) */
        *state ^= *state >> 12;
        *state ^= *state << 25;
        *state ^= *state >> 27;
        uint64_t r = *state * 0x2545F4914F6CDD1Dull;
        x[i] = (float)((double)(r >> 40) / 8388608.0 - 1.0);
    }
}

static int set_threads(int t) {
    dlrt_set_threads(t);
    openblas_set_num_threads(t);
    int o = dlrt_threads(), b = openblas_get_num_threads();
    if (o != t || b != t) {
        fprintf(stderr, "gemm_bench: asked for %d threads, got %d (dlcc) and %d OpenBLAS\n", t, o,
                b);
        return -1;
    }
    return 0;
}

static void usage(FILE *f) {
    fprintf(f, "usage: gemm_bench [--threads 1,2] [--time SEC] [--json] [--math bf16] [MxNxK ...]\n");
}

int main(int argc, char **argv) {
    int threads[16], nthreads = 0, json = 0;
    double budget = 0.3;
    gemm_size *sizes = calloc((size_t)argc + sizeof default_sizes / sizeof *default_sizes,
                              sizeof *sizes);
    int nsizes = 0;
    if (!sizes) return 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            char *p = argv[++i], *end;
            nthreads = 0;
            while (*p && nthreads < 16) {
                long t = strtol(p, &end, 10);
                if (end == p || t < 1 || t > 1024) {
                    fprintf(stderr, "gemm_bench: bad --threads list '%s'\n", argv[i]);
                    return 2;
                }
                threads[nthreads++] = (int)t;
                p = *end ? end + 1 : end;
            }
        } else if (!strcmp(argv[i], "--time") && i + 1 < argc) {
            budget = atof(argv[++i]);
            if (!(budget > 0)) {
                fprintf(stderr, "gemm_bench: bad --time '%s'\n", argv[i]);
                return 2;
            }
        } else if (!strcmp(argv[i], "--math") && i + 1 < argc &&
                   (!strcmp(argv[i + 1], "bf16") || !strcmp(argv[i + 1], "fp32"))) {
            math_bf16 = !strcmp(argv[++i], "bf16");
        } else if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else {
            long long m, n, k;
            char tail;
            if (sscanf(argv[i], "%lldx%lldx%lld%c", &m, &n, &k, &tail) != 3 || m < 1 || n < 1 ||
                k < 1 || m > INT32_MAX || n > INT32_MAX || k > INT32_MAX) {
                usage(stderr);
                return 2;
            }
            sizes[nsizes++] = (gemm_size){"custom", m, n, k};
        }
    }
    if (!nthreads) {
        threads[0] = 1;
        threads[1] = 2;
        nthreads = 2;
    }
    if (!nsizes) {
        nsizes = (int)(sizeof default_sizes / sizeof *default_sizes);
        memcpy(sizes, default_sizes, sizeof default_sizes);
    }

    double peak = measure_peak();
    double load = -1;
    FILE *lf = fopen("/proc/loadavg", "r");
    if (lf) {
        if (fscanf(lf, "%lf", &load) != 1) load = -1;
        fclose(lf);
    }
    if (!json) {
        printf("OpenBLAS: %s (core %s)\n", openblas_get_config(), openblas_get_corename());
        printf("peak: %.1f GFLOP/s per thread, measured here on one thread (%s FMA loop, %d chains);"
               " the peak for T threads is taken as T x that\n",
               peak, PEAK_ISA, PEAK_CHAINS);
        if (math_bf16)
            printf("dlcc: dlrt_sgemm_bf16 (bfloat16 operands, float32 sums%s); OpenBLAS in "
                   "float32\n",
                   dlrt_gemm_has_bf16() ? "" : "; this build has no AVX512-BF16: float32");
        printf("timing: median of single calls, blocks dlcc/OpenBLAS/OpenBLAS/dlcc of %.2f s each\n",
               budget / 2);
        if (load >= 0)
            printf("load average (1 min) at start: %.2f%s\n", load,
                   load > 0.5 ? " -- other work is running: expect noise, above all with 2+ threads"
                              : "");
        printf("\n");
        printf("%-13s %5s %5s %5s %3s %10s %10s %9s %7s %7s %9s\n", "shape", "M", "N", "K", "thr",
               "dlcc GF/s", "BLAS GF/s", "dlcc/BLAS", "dlcc %", "BLAS %", "max err");
    }
    int rc = 0;
    for (int si = 0; si < nsizes; si++) {
        const gemm_size *z = &sizes[si];
        float *a = alloc_floats(z->m * z->k), *b = alloc_floats(z->k * z->n),
              *c1 = alloc_floats(z->m * z->n), *c2 = alloc_floats(z->m * z->n);
        /* the workspace a compiled program's planner gives the call (emit_sgemm_call) */
        const size_t ws_bytes = dlrt_gemm_workspace(z->m, z->n, z->k, 0, 0);
        float *ws = ws_bytes ? alloc_floats((int64_t)(ws_bytes / sizeof(float))) : NULL;
        if (!a || !b || !c1 || !c2 || (ws_bytes && !ws)) {
            fprintf(stderr, "gemm_bench: out of memory at %lldx%lldx%lld\n", (long long)z->m,
                    (long long)z->n, (long long)z->k);
            return 1;
        }
        uint64_t state = 0x9E3779B97F4A7C15ull + (uint64_t)si;
        fill_random(a, z->m * z->k, &state);
        fill_random(b, z->k * z->n, &state);
        for (int ti = 0; ti < nthreads; ti++) {
            int t = threads[ti];
            if (set_threads(t)) return 1;
            gemm_job jd = {z->m, z->n, z->k, a, b, c1, ws, ws_bytes},
                     jb = {z->m, z->n, z->k, a, b, c2, NULL, 0};
            memset(c1, 0xff, (size_t)(z->m * z->n) * sizeof(float)); /* NaN: unwritten shows */
            memset(c2, 0, (size_t)(z->m * z->n) * sizeof(float));
            call_dlcc(&jd);
            call_openblas(&jb);
            double err = 0, scale = 0;
            for (int64_t i = 0; i < z->m * z->n; i++) {
                double d = fabs((double)c1[i] - (double)c2[i]);
                if (!(d <= err)) err = d; /* NaN propagates */
                if (fabs((double)c2[i]) > scale) scale = fabs((double)c2[i]);
            }
            double rel = scale > 0 ? err / scale : err;
            samples sd = {0}, sb = {0};
            int bad = run_block(call_dlcc, &jd, budget / 2, &sd);
            pause_ms(120);
            bad |= run_block(call_openblas, &jb, budget / 2, &sb);
            pause_ms(120);
            bad |= run_block(call_openblas, &jb, budget / 2, &sb);
            pause_ms(120);
            bad |= run_block(call_dlcc, &jd, budget / 2, &sd);
            pause_ms(120);
            if (bad) {
                fprintf(stderr, "gemm_bench: out of memory for samples\n");
                return 1;
            }
            double flop = 2.0 * (double)z->m * (double)z->n * (double)z->k;
            double gd = flop / median(&sd) / 1e9, gb = flop / median(&sb) / 1e9;
            int wrong = !(rel <= (math_bf16 ? 1e-2 : 1e-4));
            if (wrong) rc = 1;
            if (json)
                printf("{\"shape\":\"%s\",\"m\":%lld,\"n\":%lld,\"k\":%lld,\"threads\":%d,"
                       "\"dlcc_gflops\":%.2f,\"openblas_gflops\":%.2f,\"ratio\":%.3f,"
                       "\"peak_gflops_per_thread\":%.2f,\"dlcc_runs\":%d,\"openblas_runs\":%d,"
                       "\"max_rel_err\":%.3g,\"loadavg\":%.2f,\"math\":\"%s\"}\n",
                       z->label, (long long)z->m, (long long)z->n, (long long)z->k, t, gd, gb,
                       gd / gb, peak, sd.n, sb.n, rel, load, math_bf16 ? "bf16" : "fp32");
            else
                printf("%-13s %5lld %5lld %5lld %3d %10.1f %10.1f %9.2f %6.0f%% %6.0f%% %9.2g%s\n",
                       z->label, (long long)z->m, (long long)z->n, (long long)z->k, t, gd, gb,
                       gd / gb, 100 * gd / (peak * t), 100 * gb / (peak * t), rel,
                       wrong ? "  WRONG" : "");
            fflush(stdout);
            free(sd.t);
            free(sb.t);
        }
        free(a);
        free(b);
        free(c1);
        free(c2);
        free(ws);
    }
    if (!json)
        printf("\nGF/s = 2*M*N*K / median call time; dlcc/BLAS > 1: dlcc faster; %% of peak for the"
               " thread count; max err = max |dlcc - OpenBLAS| / max |OpenBLAS|\n");
    free(sizes);
    return rc;
}
