/* threads.c — the runtime kernels' thread pool (dlrt_parallel, dlrt.h).
 *
 * Why not OpenMP: an OpenMP parallel region ends in a barrier that waits for every thread of
 * the team, including one the OS has not scheduled yet. With another process busy on one of two
 * cores, each of MobileNetV2's ~55 parallel steps waited for the preempted worker's next time
 * slice: 1.9 ms became 17.8-27.1 ms at 2 threads (ONNX Runtime, whose caller takes the shards
 * nobody has started, 5.9 ms). Here a job is cut into pieces that threads claim one at a time
 * from a shared counter, the caller among them, and the caller waits only for pieces already
 * claimed: a worker that wakes late finds nothing left and never touched the job.
 *
 * The claim counter holds the job's generation in its upper 32 bits and the next piece in the
 * lower, and a finished job's caller closes it (the piece index past any count) before the next
 * job's fields are written: a worker's compare-and-swap from (g, i) succeeds only while job g
 * still has piece i unclaimed, and then the fields it read before are job g's, since the next
 * job's are written only after all of g's pieces are done, one of them by this worker. Idle
 * workers spin for DLRT_SPIN_NS, then sleep on a condition variable (no busy spinning when
 * idle). A worker stalled across 2^32 jobs could see its generation come round again; none is.
 *
 * One pool per copy of the runtime (each JIT module and AOT bundle has its own), its thread
 * count set for the copy (dlrt_set_threads); a caller that finds it busy (another host thread's
 * job, or a job inside a piece), or a team of one, runs the pieces itself in order. Each piece
 * computes the same whoever runs it, so results never depend on the thread count. Pieces learn
 * their thread's slot as an argument (dlrt_parallel_slots), not from thread-local storage: a
 * module's dynamic TLS left stale entries in threads' TLS vectors after dlclose, which crashed
 * LeakSanitizer's exit scan in the ONNX node tests. Built without DLRT_THREADS (no pthreads: a
 * microcontroller), every job runs in the caller. */
#if !defined(_POSIX_C_SOURCE) && !defined(_DEFAULT_SOURCE) /* compiled on its own, -std=c11 */
#define _POSIX_C_SOURCE 200809L
#endif
#include "dlrt-impl.h"

#ifdef DLRT_THREADS
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

/* Idle workers spin this long after their last job before sleeping: back-to-back kernels of
 * one model run start within microseconds of each other, and waking a sleeper costs a system
 * call on each side. */
#ifndef DLRT_SPIN_NS
#define DLRT_SPIN_NS 200000
#endif
static _Atomic int64_t dlrt_spin_ns = DLRT_SPIN_NS; /* (test_threads.c changes it) */

/* Points where test_threads.c widens the windows between a worker's reads and the next job's
 * writes (a preemption there); nothing otherwise. */
#ifndef DLRT_TPOOL_HOOK_WORKER
#define DLRT_TPOOL_HOOK_WORKER() ((void)0)
#define DLRT_TPOOL_HOOK_CALLER() ((void)0)
#endif

#if defined(__x86_64__) || defined(__i386__)
#define DLRT_PAUSE() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define DLRT_PAUSE() __asm__ __volatile__("yield")
#else
#define DLRT_PAUSE() ((void)0)
#endif

#if defined(__GNUC__) || defined(__clang__)
#define DLRT_TPOOL_DTOR __attribute__((destructor))
#else
#define DLRT_TPOOL_DTOR
#endif

/* The claim of a finished job: above any piece count (pieces <= 2^30). */
#define DLRT_TPOOL_CLOSED 0xffffffffu

typedef struct dlrt_tpool {
    /* the job: written by the caller before it publishes the generation in claim */
    _Atomic(dlrt_slot_fn) fn;
    _Atomic(void *) ctx;
    _Atomic int64_t n, pieces, align;
    _Atomic int team;       /* workers numbered team or more sit this job out */
    _Atomic uint64_t claim; /* generation << 32 | next piece */
    _Atomic int64_t done;   /* pieces finished */
    atomic_flag busy;       /* held by the caller of the current job */
    _Atomic int active;     /* a job is running (dlrt_in_parallel) */
    _Atomic int threads;    /* dlrt_set_threads; 0: the CPU count */
    _Atomic int stop;
    _Atomic int sleepers;
    pthread_mutex_t lock; /* guards sleeping and starting workers */
    pthread_cond_t wake;
    int workers;
    pthread_t tid[DLRT_MAX_THREADS];
    _Atomic uint32_t start_gen; /* the generation when workers were last started */
    int at_fork;    /* the child handler is registered (a fork's child has no workers) */
    int no_threads; /* pthread_create failed: run with the workers there are */
} dlrt_tpool;

static dlrt_tpool dlrt_the_tpool = {
    .busy = ATOMIC_FLAG_INIT, .lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER};

static int64_t dlrt_now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* Where piece i of `pieces` starts, in units: floor(units i / pieces) without the product
 * (which overflows for a large n): q i + floor(r i / pieces), r i < pieces^2 <= 2^60. */
static int64_t dlrt_tpool_cut(int64_t units, int64_t pieces, int64_t i) {
    const int64_t q = units / pieces, r = units % pieces;
    return q * i + r * i / pieces;
}

/* Piece i of the current job: units [units i / pieces, units (i + 1) / pieces) of align
 * iterations each (the last unit cut at n). */
static void dlrt_tpool_piece(int64_t n, int64_t pieces, int64_t align, int64_t i, int64_t *lo,
                             int64_t *hi) {
    const int64_t units = (n - 1) / align + 1, end = dlrt_tpool_cut(units, pieces, i + 1);
    *lo = dlrt_tpool_cut(units, pieces, i) * align; /* at most (units - 1) align < n */
    *hi = end == units ? n : end * align;
}

/* Claims and runs pieces of generation gen on slot `slot` (0 the caller, 1.. the workers) until
 * none is left or the job is gone. */
static void dlrt_tpool_work(dlrt_tpool *p, uint32_t gen, int slot) {
    for (;;) {
        uint64_t c = atomic_load_explicit(&p->claim, memory_order_acquire);
        if ((uint32_t)(c >> 32) != gen) return;
        const int64_t i = (int64_t)(c & 0xffffffffu);
        DLRT_TPOOL_HOOK_WORKER();
        const int64_t pieces = atomic_load_explicit(&p->pieces, memory_order_relaxed);
        if (i >= pieces) return;
        const dlrt_slot_fn fn = atomic_load_explicit(&p->fn, memory_order_relaxed);
        void *ctx = atomic_load_explicit(&p->ctx, memory_order_relaxed);
        const int64_t n = atomic_load_explicit(&p->n, memory_order_relaxed);
        const int64_t align = atomic_load_explicit(&p->align, memory_order_relaxed);
        /* a field of a later job read here: its caller closed this job first (dlrt_tpool_run) and
         * fenced the close before the fields, so the compare-and-swap fails */
        atomic_thread_fence(memory_order_acquire);
        if (!atomic_compare_exchange_weak_explicit(&p->claim, &c, c + 1, memory_order_acq_rel,
                                                   memory_order_relaxed))
            continue; /* another thread took it, or the job changed: look again */
        int64_t lo, hi;
        dlrt_tpool_piece(n, pieces, align, i, &lo, &hi);
        if (lo < hi) fn(ctx, lo, hi, slot);
        atomic_fetch_add_explicit(&p->done, 1, memory_order_release);
    }
}

/* Waits for a generation other than seen (spinning, then asleep); returns it, or -1 to stop. */
static int64_t dlrt_tpool_wait(dlrt_tpool *p, uint32_t seen) {
    const int64_t t0 = dlrt_now_ns(),
                  spin_ns = atomic_load_explicit(&dlrt_spin_ns, memory_order_relaxed);
    for (unsigned spin = 0;; spin++) {
        if (atomic_load_explicit(&p->stop, memory_order_acquire)) return -1;
        const uint64_t c = atomic_load_explicit(&p->claim, memory_order_acquire);
        if ((uint32_t)(c >> 32) != seen) return (int64_t)(c >> 32);
        DLRT_PAUSE();
        if ((spin & 255) == 255 && dlrt_now_ns() - t0 > spin_ns) break;
    }
    pthread_mutex_lock(&p->lock);
    atomic_fetch_add(&p->sleepers, 1); /* seq_cst: the caller reads it after publishing */
    int64_t got = -1;
    while (!atomic_load(&p->stop)) {
        const uint64_t c = atomic_load(&p->claim);
        if ((uint32_t)(c >> 32) != seen) {
            got = (int64_t)(c >> 32);
            break;
        }
        pthread_cond_wait(&p->wake, &p->lock);
    }
    atomic_fetch_sub(&p->sleepers, 1);
    pthread_mutex_unlock(&p->lock);
    return got;
}

static void *dlrt_tpool_worker(void *arg) {
    dlrt_tpool *p = &dlrt_the_tpool;
    const int slot = (int)(intptr_t)arg;
    /* the generation before the job its starter is about to publish, which this worker then
     * takes part in (read at start, it could be that job's: the worker sat its first job out) */
    uint32_t seen = atomic_load(&p->start_gen);
    for (;;) {
        const int64_t gen = dlrt_tpool_wait(p, seen);
        if (gen < 0) return NULL;
        seen = (uint32_t)gen;
        if (slot < atomic_load_explicit(&p->team, memory_order_relaxed))
            dlrt_tpool_work(p, seen, slot);
    }
}

static void dlrt_tpool_after_fork(void) {
    dlrt_tpool *p = &dlrt_the_tpool;
    p->workers = 0; /* the child has only the thread that forked */
    p->no_threads = 0;
    atomic_store(&p->active, 0); /* nor another thread's job */
    atomic_store(&p->sleepers, 0);
    atomic_flag_clear(&p->busy);
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
}

/* Starts workers until there are want - 1 (fewer if the system refuses threads: the caller
 * then runs more of each job). Called by the caller holding busy. */
static void dlrt_tpool_grow(dlrt_tpool *p, int want) {
    if (p->workers >= want - 1 || p->no_threads) return;
    pthread_mutex_lock(&p->lock);
    if (!p->at_fork) p->at_fork = pthread_atfork(NULL, NULL, dlrt_tpool_after_fork) == 0;
    atomic_store(&p->start_gen, (uint32_t)(atomic_load(&p->claim) >> 32));
    while (p->workers < want - 1) {
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setstacksize(&attr, (size_t)8 << 20); /* kernels keep tiles on the stack */
        const int ok = pthread_create(&p->tid[p->workers], &attr, dlrt_tpool_worker,
                                      (void *)(intptr_t)(p->workers + 1)) == 0;
        pthread_attr_destroy(&attr);
        if (!ok) {
            p->no_threads = 1; /* not tried again at every job */
            break;
        }
        p->workers++;
    }
    pthread_mutex_unlock(&p->lock);
}

/* Joins the workers when the copy of the runtime they run is unloaded (dlclose of a module) or
 * the process exits. */
static DLRT_TPOOL_DTOR void dlrt_tpool_stop(void) {
    dlrt_tpool *p = &dlrt_the_tpool;
    if (!p->workers) return;
    pthread_mutex_lock(&p->lock);
    atomic_store(&p->stop, 1);
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    for (int i = 0; i < p->workers; i++) pthread_join(p->tid[i], NULL);
    p->workers = 0;
    atomic_store(&p->stop, 0);
}

static int dlrt_cpu_count(void) {
    static _Atomic int cpus;
    int n = atomic_load_explicit(&cpus, memory_order_relaxed);
    if (!n) {
        const long c = sysconf(_SC_NPROCESSORS_ONLN);
        n = c < 1 ? 1 : c > DLRT_MAX_THREADS ? DLRT_MAX_THREADS : (int)c;
        atomic_store_explicit(&cpus, n, memory_order_relaxed);
    }
    return n;
}

void dlrt_set_threads(int n) {
    atomic_store_explicit(&dlrt_the_tpool.threads,
                          n < 1                  ? 0
                          : n > DLRT_MAX_THREADS ? DLRT_MAX_THREADS
                                                 : n,
                          memory_order_relaxed);
}

int dlrt_in_parallel(void) {
    return atomic_load_explicit(&dlrt_the_tpool.active, memory_order_relaxed);
}

int dlrt_threads(void) {
    if (dlrt_in_parallel()) return 1;
    const int n = atomic_load_explicit(&dlrt_the_tpool.threads, memory_order_relaxed);
    return n ? n : dlrt_cpu_count();
}

/* Publishes a job of `pieces` pieces of [0, n) (align iterations a unit) to a team of `team`,
 * takes part, waits for the pieces other threads claimed, and closes the job. The caller holds
 * busy, which this releases. */
static void dlrt_tpool_run(dlrt_tpool *p, int team, int64_t n, int64_t pieces, int64_t align,
                           dlrt_slot_fn fn, void *ctx) {
    dlrt_tpool_grow(p, team);
    atomic_thread_fence(memory_order_release); /* the last job's close before the new fields */
    atomic_store_explicit(&p->active, 1, memory_order_relaxed);
    atomic_store_explicit(&p->fn, fn, memory_order_relaxed);
    atomic_store_explicit(&p->ctx, ctx, memory_order_relaxed);
    atomic_store_explicit(&p->n, n, memory_order_relaxed);
    atomic_store_explicit(&p->pieces, pieces, memory_order_relaxed);
    atomic_store_explicit(&p->align, align, memory_order_relaxed);
    atomic_store_explicit(&p->team, team, memory_order_relaxed);
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    const uint32_t gen =
        (uint32_t)(atomic_load_explicit(&p->claim, memory_order_relaxed) >> 32) + 1;
    DLRT_TPOOL_HOOK_CALLER();
    atomic_store(&p->claim, (uint64_t)gen << 32); /* seq_cst: before reading sleepers */
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->lock);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->lock);
    }
    dlrt_tpool_work(p, gen, 0);
    /* only pieces other threads claimed remain; a worker preempted inside one holds us up, so
     * after a while give the CPU away in case it waits for ours */
    const int64_t t0 = dlrt_now_ns(),
                  spin_ns = atomic_load_explicit(&dlrt_spin_ns, memory_order_relaxed);
    for (unsigned spin = 0; atomic_load_explicit(&p->done, memory_order_acquire) < pieces; spin++) {
        DLRT_PAUSE();
        if ((spin & 1023) == 1023 && dlrt_now_ns() - t0 > spin_ns) sched_yield();
    }
    /* close the job: claim would stay (gen, pieces), and a worker that read it, then the next
     * job's larger `pieces`, would claim a piece that does not exist, with that job's fields,
     * before the next claim is stored (a reviewer's stress test: 2-7 iterations run twice in 3M
     * pairs of 2- and 64-piece jobs) */
    atomic_store_explicit(&p->claim, (uint64_t)gen << 32 | DLRT_TPOOL_CLOSED, memory_order_relaxed);
    atomic_store_explicit(&p->active, 0, memory_order_relaxed);
    atomic_flag_clear_explicit(&p->busy, memory_order_release);
}

/* The team of a job capped at max_team threads (0: no cap). */
static int dlrt_team_for(int max_team) {
    const int team = dlrt_threads();
    return max_team > 0 && team > max_team ? max_team : team;
}

/* Whether a job of `pieces` pieces for a team of `team` runs in parallel: two or more of each
 * and the pool not busy (then held by the caller). */
static int dlrt_tpool_try_hold(dlrt_tpool *p, int team, int64_t pieces) {
    /* a job inside a piece finds the pool busy too, as does another host thread's */
    return team >= 2 && pieces >= 2 &&
           !atomic_flag_test_and_set_explicit(&p->busy, memory_order_acquire);
}

/* A job whose chunks are shared out as spans, each thread starting on one (its piece) and taking
 * that span's chunks from the front and, once it is empty, the other spans' from their backs (work
 * stealing; dlrt_parallel_spans). Why: with one piece per thread, a thread slower than the other
 * (its core shared with another process, or with another virtual machine) held every product
 * up until it finished its half. On this 2-core machine, with a second process pinned to one
 * core running 0.2 ms of every 0.8, ResNet-50 at 2 threads (its GEMM tiles as chunks) took
 * 22.9-23.3 ms against 21.0-21.9 with spans; 22-27 against 20.7 with bursts of 2 ms of every 8;
 * alone, 16.7-17.0 either way (medians of 40 runs, alternating builds). With an equal-priority
 * busy loop on one core (bench/contention.sh), MobileNetV2 4.9-9.9 -> 3.9-5.7 ms, ResNet-50
 * 43.5 -> 35.1 in one run, 44 -> 43-45 in another: its Winograd and direct layers, one piece per
 * thread, still wait for a worker preempted inside one for the rest of its time slice (ONNX
 * Runtime took 39-41 ms there). Cutting the generated and other kernels' per-thread pieces
 * into four spans' chunks each measured no clear gain under these loads, and alone +1-2% on
 * MobileNetV2 in one run (1.995 -> 2.030 ms), nothing in a quieter one (1.98 against 1.975,
 * ResNet-50 17.05 against 17.10), so only the GEMM uses spans for now. A span's unclaimed chunks
 * are one word, front << 32 | end, so that each chunk is taken once, by whichever side's
 * compare-and-swap moves past it first. A thread takes its own chunks in runs up to the next
 * multiple of the job's group, so that chunks sharing data (a GEMM's tiles of one column of
 * weights) run as one call; stolen ones go one at a time, to hold a slow thread up no more. */
typedef struct dlrt_steal_job {
    dlrt_slot_fn fn; /* called with a run of chunks [c, c + n): n = 1 from the back */
    void *ctx;
    int spans;
    int64_t group; /* front runs end at multiples of this (>= 1), or at the span's end */
    /* a line each: a thread taking its own chunks does not contend with the others' takes */
    struct {
        _Alignas(64) _Atomic uint64_t left;
    } span[DLRT_MAX_THREADS];
} dlrt_steal_job;

/* Takes the back chunk of a span (back), or its front run up to the next multiple of group (>= 1;
 * at most the span's end), into [*chunk, *chunk + count) and returns count; 0 when the span is
 * empty. */
static int64_t dlrt_steal_take(_Atomic uint64_t *span, int back, int64_t group, int64_t *chunk) {
    uint64_t s = atomic_load_explicit(span, memory_order_relaxed);
    for (;;) {
        const uint32_t front = (uint32_t)(s >> 32), end = (uint32_t)s;
        if (front >= end) return 0;
        const int64_t count =
            back ? 1 : DLRT_MIN((int64_t)end - front, group - (int64_t)front % group);
        const uint64_t next = back ? s - 1 : s + ((uint64_t)count << 32);
        if (atomic_compare_exchange_weak_explicit(span, &s, next, memory_order_relaxed,
                                                  memory_order_relaxed)) {
            *chunk = back ? (int64_t)end - 1 : (int64_t)front;
            return count;
        }
    }
}

/* Pool piece r of a stealing job: span r from its front, then the others' chunks from their
 * backs, the next spans first. */
static void dlrt_steal_piece(void *ctx, int64_t lo, int64_t hi, int slot) {
    dlrt_steal_job *j = ctx;
    for (int64_t r = lo; r < hi; r++) {
        int64_t c, n;
        while ((n = dlrt_steal_take(&j->span[r].left, 0, j->group, &c)) > 0)
            j->fn(j->ctx, c, c + n, slot);
        for (int k = 1; k < j->spans; k++)
            while (dlrt_steal_take(&j->span[(r + k) % j->spans].left, 1, 1, &c))
                j->fn(j->ctx, c, c + 1, slot);
    }
}

/* Where span r of `spans` starts: starts[r] (NULL: as even as chunks allow), held within
 * [the start of span r - 1, chunks] so that the spans tile [0, chunks) whatever the caller gave
 * (the first at 0, and span `spans` meaning the end). */
static int64_t dlrt_steal_start(int64_t chunks, int spans, const int64_t *starts, int r,
                                int64_t before) {
    if (r == 0) return 0;
    if (r == spans) return chunks;
    const int64_t at = starts ? starts[r] : dlrt_tpool_cut(chunks, spans, r);
    return DLRT_MIN(DLRT_MAX(at, before), chunks);
}

/* Runs chunks [0, chunks) as `spans` spans (dlrt_steal_start) on a team of `team` (the pool
 * held: busy). */
static void dlrt_steal_run(dlrt_tpool *p, int team, int64_t chunks, int spans,
                           const int64_t *starts, int64_t group, dlrt_slot_fn fn, void *ctx) {
    dlrt_steal_job job = {.fn = fn, .ctx = ctx, .spans = spans, .group = DLRT_MAX(group, 1)};
    int64_t a = 0;
    for (int r = 0; r < spans; r++) {
        const int64_t b = dlrt_steal_start(chunks, spans, starts, r + 1, a);
        atomic_init(&job.span[r].left, (uint64_t)a << 32 | (uint64_t)b);
        a = b;
    }
    dlrt_tpool_run(p, team, spans, spans, 1, dlrt_steal_piece, &job);
}

void dlrt_parallel_slots(int64_t n, int64_t pieces, int64_t align, int max_team, dlrt_slot_fn fn,
                         void *ctx) {
    if (n <= 0) return;
    if (align < 1) align = 1;
    const int64_t units = (n - 1) / align + 1;
    dlrt_tpool *p = &dlrt_the_tpool;
    const int team = dlrt_team_for(max_team);
    if (pieces <= 0) pieces = team;
    pieces = DLRT_MIN(DLRT_MIN(pieces, units), (int64_t)1 << 30);
    if (!dlrt_tpool_try_hold(p, team, pieces)) {
        fn(ctx, 0, n, 0); /* the pieces in order are the whole range */
        return;
    }
    dlrt_tpool_run(p, team, n, pieces, align, fn, ctx);
}

void dlrt_parallel_spans(int64_t chunks, int spans, const int64_t *starts, int64_t group,
                         int max_team, dlrt_slot_fn fn, void *ctx) {
    if (chunks <= 0) return;
    dlrt_tpool *p = &dlrt_the_tpool;
    const int team = dlrt_team_for(max_team);
    /* (a span's bounds are 32-bit halves of one word) */
    if (spans < 2 || chunks > (int64_t)UINT32_MAX || !dlrt_tpool_try_hold(p, team, chunks)) {
        fn(ctx, 0, chunks, 0);
        return;
    }
    dlrt_steal_run(p, team, chunks, DLRT_MIN(spans, DLRT_MAX_THREADS), starts, group, fn, ctx);
}

#else /* no threads: every job runs in the caller */

void dlrt_set_threads(int n) {
    (void)n;
}

int dlrt_threads(void) {
    return 1;
}

int dlrt_in_parallel(void) {
    return 0;
}

void dlrt_parallel_slots(int64_t n, int64_t pieces, int64_t align, int max_team, dlrt_slot_fn fn,
                         void *ctx) {
    (void)pieces, (void)align, (void)max_team;
    if (n > 0) fn(ctx, 0, n, 0);
}

void dlrt_parallel_spans(int64_t chunks, int spans, const int64_t *starts, int64_t group,
                         int max_team, dlrt_slot_fn fn, void *ctx) {
    (void)spans, (void)starts, (void)group, (void)max_team;
    if (chunks > 0) fn(ctx, 0, chunks, 0);
}

#endif

/* dlrt_parallel's function, called through the pool's one kind of piece function */
typedef struct dlrt_range_call {
    dlrt_range_fn fn;
    void *ctx;
} dlrt_range_call;

static void dlrt_range_piece(void *ctx, int64_t lo, int64_t hi, int slot) {
    const dlrt_range_call *c = ctx;
    (void)slot;
    c->fn(c->ctx, lo, hi);
}

void dlrt_parallel(int64_t n, int64_t pieces, int64_t align, int max_team, dlrt_range_fn fn,
                   void *ctx) {
    dlrt_range_call call = {fn, ctx};
    dlrt_parallel_slots(n, pieces, align, max_team, dlrt_range_piece, &call);
}
