/* test_threads.c — the runtime kernels' thread pool (src/kernels/rt/threads.c, dlrt_parallel):
 *   - every iteration of [0, n) runs exactly once, in pieces that start on multiples of align,
 *     for many n, piece counts, alignments and thread counts;
 *   - a job inside a piece, a team of one, and max_team: what runs where, on which slots;
 *   - the caller finishes a job alone while a worker cannot run (a signal handler holds it, as
 *     a preempted thread would be held), and the late worker then touches no later job;
 *   - thousands of back-to-back jobs whose context lives on the caller's stack, two host
 *     threads sharing one pool, and a fork's child (which has no workers);
 *   - jobs of 2 and of 16 pieces in turn with naps at the windows between a worker's reads and
 *     the next job's writes: no piece of a finished job runs, none twice, none with the other
 *     job's function (a job left open at its end let a worker claim a piece past its count);
 *   - spans (dlrt_parallel_spans): every chunk once, one per call (or a front run within a
 *     group), for any starts, empty spans and team, groups of -1 to 5 and at the 32-bit limit;
 *     front runs taken from spans that start inside a group; a thread whose chunks are slow
 *     has the rest of its span taken over.
 * The pool is compiled into this binary with threads on, whatever the build's flags. */
#if !defined(_POSIX_C_SOURCE) && !defined(_DEFAULT_SOURCE)
#define _POSIX_C_SOURCE 200809L
#endif
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

/* Naps at the pool's hook points (a worker between reading the claim and the job's fields; the
 * caller between writing the fields and publishing the claim), a quarter of the times, while
 * hooks_on: as if preempted there. */
static _Atomic int hooks_on;
static _Atomic uint64_t hook_rng = 88172645463325252u;
static void hook_nap(long ns) {
    uint64_t x = atomic_fetch_add(&hook_rng, 0x9E3779B97F4A7C15u);
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9u;
    if (!atomic_load(&hooks_on) || (x >> 40) % 4) return;
    struct timespec ts = {0, ns};
    nanosleep(&ts, NULL);
}
#define DLRT_TPOOL_HOOK_WORKER() hook_nap(20000)
#define DLRT_TPOOL_HOOK_CALLER() hook_nap(60000)
#define DLRT_THREADS             1
#include "../../src/kernels/rt/threads.c"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "check.h"

enum { MAX_N = 5000, MAX_RANGES = 6000 };

/* What one job saw: visits per iteration, the ranges it was given, the slots that ran them. */
typedef struct seen {
    _Atomic int visits[MAX_N];
    _Atomic int n_ranges;
    int64_t lo[MAX_RANGES], hi[MAX_RANGES];
    _Atomic int slot_max, nested_ok;
} seen;

static void record(void *ctx, int64_t lo, int64_t hi, int slot) {
    seen *s = ctx;
    for (int64_t i = lo; i < hi; i++) atomic_fetch_add(&s->visits[i], 1);
    const int k = atomic_fetch_add(&s->n_ranges, 1);
    if (k < MAX_RANGES) s->lo[k] = lo, s->hi[k] = hi;
    for (int m = atomic_load(&s->slot_max); slot > m;)
        if (atomic_compare_exchange_weak(&s->slot_max, &m, slot)) break;
}

static void seen_reset(seen *s) {
    for (int i = 0; i < MAX_N; i++) atomic_store(&s->visits[i], 0);
    atomic_store(&s->n_ranges, 0);
    atomic_store(&s->slot_max, 0);
    atomic_store(&s->nested_ok, 1);
}

/* Each iteration once; each range non-empty, starting at 0 or a multiple of align; at most
 * `pieces` of them when pieces > 0. */
static int seen_ok(const seen *s, int64_t n, int64_t pieces, int64_t align) {
    for (int64_t i = 0; i < n; i++)
        if (atomic_load(&s->visits[i]) != 1) return 0;
    const int k = atomic_load(&s->n_ranges);
    if (k > MAX_RANGES || (pieces > 0 && k > pieces)) return 0;
    for (int r = 0; r < k; r++)
        if (s->lo[r] >= s->hi[r] || (s->lo[r] % align != 0)) return 0;
    return 1;
}

static seen big; /* (large: not on the stack) */

static void test_coverage(void) {
    const int64_t ns[] = {1, 2, 3, 5, 16, 17, 63, 64, 65, 100, 1000, 4097};
    const int64_t pieces[] = {0, 1, 2, 3, 7, 1000};
    const int64_t aligns[] = {1, 16, 64};
    int ok = 1, multi = 0;
    for (int t = 1; t <= 4; t++) {
        dlrt_set_threads(t);
        for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
            for (size_t b = 0; b < sizeof pieces / sizeof pieces[0]; b++)
                for (size_t c = 0; c < sizeof aligns / sizeof aligns[0]; c++) {
                    seen_reset(&big);
                    dlrt_parallel_slots(ns[a], pieces[b], aligns[c], 0, record, &big);
                    const int64_t want = pieces[b] ? pieces[b] : t;
                    if (!seen_ok(&big, ns[a], want, aligns[c])) {
                        ok = 0;
                        printf("  n %lld pieces %lld align %lld threads %d: wrong ranges\n",
                               (long long)ns[a], (long long)pieces[b], (long long)aligns[c], t);
                    }
                    if (atomic_load(&big.slot_max) >= t) ok = 0;
                    multi += atomic_load(&big.n_ranges) > 1;
                }
    }
    CHECK("every iteration once, pieces on align boundaries, slots below the team", ok);
    CHECK("jobs were cut into several pieces", multi > 100);
    dlrt_set_threads(1);
    seen_reset(&big);
    dlrt_parallel_slots(1000, 8, 1, 0, record, &big);
    CHECK("one thread: the whole range in one call on the caller",
          atomic_load(&big.n_ranges) == 1 && big.lo[0] == 0 && big.hi[0] == 1000 &&
              atomic_load(&big.slot_max) == 0);
    dlrt_set_threads(4);
    int capped = 1;
    for (int r = 0; r < 200; r++) {
        seen_reset(&big);
        dlrt_parallel_slots(4000, 64, 1, 2, record, &big);
        capped = capped && seen_ok(&big, 4000, 64, 1) && atomic_load(&big.slot_max) < 2;
    }
    CHECK("max_team 2 of 4 threads: only slots 0 and 1 run pieces", capped);
    dlrt_set_threads(0);
    CHECK("dlrt_threads() outside a job: the CPU count by default",
          dlrt_threads() == (int)DLRT_MIN(sysconf(_SC_NPROCESSORS_ONLN), DLRT_MAX_THREADS));
}

/* ---- the cut of a huge range: no overflow, pieces in order and adjacent */

typedef struct huge {
    _Atomic int n_ranges;
    int64_t lo[64], hi[64];
} huge;

static void huge_record(void *ctx, int64_t lo, int64_t hi) {
    huge *h = ctx;
    const int k = atomic_fetch_add(&h->n_ranges, 1);
    if (k < 64) h->lo[k] = lo, h->hi[k] = hi;
}

static int cmp_i64(const void *a, const void *b) {
    const int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static void test_huge(void) {
    const int64_t ns[] = {INT64_MAX, INT64_MAX - 5, (int64_t)1 << 62, ((int64_t)1 << 40) + 3};
    const int64_t aligns[] = {1, 64, 1000003};
    int ok = 1;
    dlrt_set_threads(4);
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
        for (size_t b = 0; b < sizeof aligns / sizeof aligns[0]; b++) {
            huge h = {0};
            dlrt_parallel(ns[a], 37, aligns[b], 0, huge_record, &h);
            const int k = atomic_load(&h.n_ranges);
            int64_t lo[64], hi[64];
            memcpy(lo, h.lo, sizeof lo);
            qsort(lo, (size_t)k, sizeof lo[0], cmp_i64);
            memcpy(hi, h.hi, sizeof hi);
            qsort(hi, (size_t)k, sizeof hi[0], cmp_i64);
            ok = ok && k == 37 && lo[0] == 0 && hi[k - 1] == ns[a];
            for (int r = 0; r < k && ok; r++)
                ok = lo[r] < hi[r] && lo[r] % aligns[b] == 0 && (r == 0 || lo[r] == hi[r - 1]);
        }
    CHECK("ranges near INT64_MAX: 37 adjacent pieces on align boundaries, no overflow", ok);
}

/* ---- a job inside a piece runs in that piece's thread, as one range */

static void nested_inner(void *ctx, int64_t lo, int64_t hi) {
    seen *s = ctx;
    if (lo != 0 || hi != 10 || !dlrt_in_parallel() || dlrt_threads() != 1)
        atomic_store(&s->nested_ok, 0);
}

static void nested_outer(void *ctx, int64_t lo, int64_t hi, int slot) {
    record(ctx, lo, hi, slot);
    dlrt_parallel(10, 0, 1, 0, nested_inner, ctx);
}

static void test_nested(void) {
    dlrt_set_threads(2);
    seen_reset(&big);
    dlrt_parallel_slots(100, 0, 1, 0, nested_outer, &big);
    CHECK("a job inside a piece: one range in that thread",
          seen_ok(&big, 100, 2, 1) && atomic_load(&big.nested_ok));
    CHECK("after the job: not in parallel, the team back to 2",
          !dlrt_in_parallel() && dlrt_threads() == 2);
}

/* ---- a worker that cannot run */

static _Atomic int held, release_worker;
static _Atomic(pthread_t *) worker_id;
static pthread_t worker_tid;

static void hold_handler(int sig) {
    (void)sig;
    atomic_store(&held, 1);
    while (!atomic_load(&release_worker)) DLRT_PAUSE(); /* as if preempted */
}

/* Slow pieces, so that the worker takes some; the worker notes its thread id. */
static void slow_record(void *ctx, int64_t lo, int64_t hi, int slot) {
    if (slot == 1 && !atomic_load(&worker_id)) {
        worker_tid = pthread_self();
        atomic_store(&worker_id, &worker_tid);
    }
    struct timespec ts = {0, 200000};
    nanosleep(&ts, NULL);
    record(ctx, lo, hi, slot);
}

static void alarm_handler(int sig) {
    (void)sig;
    static const char msg[] = "FAIL the caller waited for a worker that could not run\n";
    if (write(1, msg, sizeof msg - 1) < 0) _exit(2);
    _exit(1);
}

typedef struct tiny {
    _Atomic int visits[64];
    int64_t n;
} tiny;

static void tiny_record(void *ctx, int64_t lo, int64_t hi) {
    tiny *t = ctx;
    for (int64_t i = lo; i < hi; i++) atomic_fetch_add(&t->visits[i], 1);
}

/* Runs `jobs` small jobs whose context is a fresh stack object each time; 1 when each saw every
 * iteration once (a late worker claiming a piece of a finished job would count twice, or write
 * into a dead stack frame, which ASan reports). */
static int many_jobs(int jobs) {
    int ok = 1;
    for (int j = 0; j < jobs; j++) {
        tiny t;
        t.n = 1 + j % 64;
        for (int i = 0; i < 64; i++) atomic_store(&t.visits[i], 0);
        dlrt_parallel(t.n, 0, 1, 0, tiny_record, &t);
        for (int64_t i = 0; i < t.n; i++) ok = ok && atomic_load(&t.visits[i]) == 1;
    }
    return ok;
}

static void test_held_worker(void) {
    /* workers spin (never hold the pool's lock) for as long as the test takes: the signal
     * must not stop one between locking and waiting, which no preemption would leave so */
    dlrt_spin_ns = 60 * (int64_t)1000000000;
    dlrt_set_threads(2);
    for (int r = 0; r < 200 && !atomic_load(&worker_id); r++) {
        seen_reset(&big);
        dlrt_parallel_slots(8, 8, 1, 0, slow_record, &big);
    }
    CHECK("the worker ran pieces", atomic_load(&worker_id) != NULL);
    if (!atomic_load(&worker_id)) return;
    signal(SIGUSR1, hold_handler);
    pthread_kill(worker_tid, SIGUSR1);
    while (!atomic_load(&held)) DLRT_PAUSE();
    signal(SIGALRM, alarm_handler);
    alarm(20); /* a pool that waits for every worker hangs here */
    int ok = 1;
    for (int r = 0; r < 50; r++) {
        seen_reset(&big);
        dlrt_parallel_slots(1000, 0, 1, 0, record, &big);
        ok = ok && seen_ok(&big, 1000, 2, 1) && atomic_load(&big.slot_max) == 0;
    }
    alarm(0);
    CHECK("with the worker held, the caller runs every piece and returns", ok);
    atomic_store(&release_worker, 1);
    CHECK("the released worker touches no finished job (stack contexts, 20000 jobs)",
          many_jobs(20000));
    dlrt_spin_ns = DLRT_SPIN_NS;
}

/* ---- jobs of different piece counts in turn, windows widened */

typedef struct turn {
    _Atomic int live, visits[4096];
    int64_t n;
    int kind;
} turn;

static turn turn_a, turn_b;
static _Atomic long turn_errors;

static void turn_fn(void *ctx, int64_t lo, int64_t hi, int kind) {
    turn *t = ctx;
    if (!atomic_load(&t->live) || t->kind != kind || lo < 0 || hi > t->n) {
        atomic_fetch_add(&turn_errors, 1);
        return;
    }
    for (int64_t i = lo; i < hi; i++) atomic_fetch_add(&t->visits[i], 1);
    if (!atomic_load(&t->live)) atomic_fetch_add(&turn_errors, 1);
}

static void turn_fn_a(void *ctx, int64_t lo, int64_t hi) {
    turn_fn(ctx, lo, hi, 0);
}

static void turn_fn_b(void *ctx, int64_t lo, int64_t hi) {
    turn_fn(ctx, lo, hi, 1);
}

/* Runs t over [0, n) in `pieces`; 1 when every iteration ran once. */
static int turn_run(turn *t, int64_t n, int kind, int64_t pieces) {
    t->n = n, t->kind = kind;
    for (int64_t i = 0; i < n; i++) atomic_store(&t->visits[i], 0);
    atomic_store(&t->live, 1);
    dlrt_parallel(n, pieces, 1, 0, kind ? turn_fn_b : turn_fn_a, t);
    atomic_store(&t->live, 0);
    int ok = 1;
    for (int64_t i = 0; i < n; i++) ok = ok && atomic_load(&t->visits[i]) == 1;
    return ok;
}

static void test_piece_counts_in_turn(void) {
    dlrt_set_threads(4);
    atomic_store(&dlrt_spin_ns, (int64_t)1000000000); /* workers spin through the naps */
    atomic_store(&hooks_on, 1);
    int ok = 1;
    for (int it = 0; it < 1500; it++) {
        ok = turn_run(&turn_a, 2, 0, 0) && ok;
        ok = turn_run(&turn_b, 4000, 1, 16) && ok;
    }
    atomic_store(&hooks_on, 0);
    struct timespec ts = {0, 50000000}; /* stragglers */
    nanosleep(&ts, NULL);
    atomic_store(&dlrt_spin_ns, (int64_t)DLRT_SPIN_NS);
    CHECK("2- and 16-piece jobs in turn: each iteration once, no piece late or of the other job",
          ok && atomic_load(&turn_errors) == 0);
}

/* ---- sleeping workers wake for the next job */

/* The caller's pieces wait, until a deadline, for a worker to have run one, so that a worker slow
 * to be scheduled on a loaded machine is not mistaken for one that never woke: with short pieces
 * the caller could otherwise run all eight before the woken worker got a core. */
static struct timespec patience_end;

static void patient_record(void *ctx, int64_t lo, int64_t hi, int slot) {
    seen *s = ctx;
    for (struct timespec now; slot == 0 && atomic_load(&s->slot_max) < 1;) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec > patience_end.tv_sec ||
            (now.tv_sec == patience_end.tv_sec && now.tv_nsec >= patience_end.tv_nsec))
            break;
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
    record(ctx, lo, hi, slot);
}

static void test_sleep_wake(void) {
    dlrt_set_threads(2);
    many_jobs(10);
    int asleep = 0, woke = 1;
    for (int r = 0; r < 20 && woke; r++) {
        /* past the spin the workers sleep: waited for up to 0.5 s on a loaded machine */
        for (int w = 0; w < 100 && atomic_load(&dlrt_the_tpool.sleepers) != dlrt_the_tpool.workers;
             w++) {
            struct timespec ts = {0, 5 * DLRT_SPIN_NS};
            nanosleep(&ts, NULL);
        }
        asleep += atomic_load(&dlrt_the_tpool.sleepers) == dlrt_the_tpool.workers;
        seen_reset(&big);
        clock_gettime(CLOCK_MONOTONIC, &patience_end);
        patience_end.tv_sec += 2;
        dlrt_parallel_slots(8, 8, 1, 0, patient_record, &big);
        woke = woke && seen_ok(&big, 8, 8, 1);
        woke = woke && atomic_load(&big.slot_max) == 1; /* the worker took pieces */
    }
    CHECK("sleeping workers wake and take pieces", woke);
    CHECK("idle workers go to sleep", asleep == 20);
}

/* ---- two host threads, one pool */

static void *host_thread(void *arg) {
    dlrt_set_threads(2);
    *(int *)arg = many_jobs(20000);
    return NULL;
}

static void test_two_callers(void) {
    int ok[2] = {0, 0};
    pthread_t t[2];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, host_thread, &ok[i]);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    CHECK("two host threads sharing the pool: every job complete", ok[0] && ok[1]);
}

/* ---- fork */

static void test_fork(void) {
    dlrt_set_threads(2);
    many_jobs(10); /* workers started */
    fflush(stdout);
    const pid_t pid = fork();
    if (pid == 0) {
        alarm(20);
        seen_reset(&big);
        dlrt_parallel_slots(4000, 0, 1, 0, slow_record, &big);
        _exit(seen_ok(&big, 4000, 2, 1) && many_jobs(2000) ? 0 : 1);
    }
    int status = 0;
    CHECK("fork: the child runs jobs (its own workers)",
          pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
              WEXITSTATUS(status) == 0);
}

/* A fork while another host thread's job runs: the child has neither that job nor its flag. */
static void *long_job(void *arg) {
    (void)arg;
    static seen s;
    seen_reset(&s);
    dlrt_parallel_slots(400, 400, 1, 0, slow_record, &s); /* 200 naps of 0.2 ms a thread */
    return NULL;
}

static void test_fork_during_job(void) {
    dlrt_set_threads(2);
    pthread_t t;
    pthread_create(&t, NULL, long_job, NULL);
    while (!dlrt_in_parallel()) DLRT_PAUSE();
    fflush(stdout);
    const pid_t pid = fork();
    if (pid == 0) {
        alarm(20);
        const int clear = !dlrt_in_parallel() && dlrt_threads() == 2;
        /* (a worker may wake too late to take a piece on a loaded machine: some job shows it) */
        int all_ok = 1, shared = 0;
        for (int r = 0; r < 20 && !shared; r++) {
            seen_reset(&big);
            dlrt_parallel_slots(8, 8, 1, 0, slow_record, &big);
            all_ok = all_ok && seen_ok(&big, 8, 8, 1);
            shared = atomic_load(&big.slot_max) == 1;
        }
        _exit(clear && all_ok && shared ? 0 : 1);
    }
    int status = 0;
    const int waited = pid > 0 && waitpid(pid, &status, 0) == pid;
    pthread_join(t, NULL);
    CHECK("fork during another thread's job: the child is not in it and shares work out",
          waited && WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* ---- spans: each thread's own chunks from the front, a slow thread's taken over from the back */

typedef struct spans_seen {
    _Atomic int visits[256];
    _Atomic int calls, bad_call, by_slot[DLRT_MAX_THREADS];
    int64_t chunks, group; /* group: runs from a span's front may be this long */
    _Atomic int runs;      /* calls of more than one chunk, not the whole range */
    long slow_ns; /* each chunk run on slot 1 naps this long, and slot 0 waits for slot 1 to start
                   * one (at most 50 ms), so that the worker surely holds a chunk of its own */
    _Atomic int worker_started;
    _Atomic int order_n[2];
    int order[2][256]; /* the chunks slots 0 and 1 ran, in turn */
} spans_seen;

static void spans_record(void *ctx, int64_t lo, int64_t hi, int slot) {
    spans_seen *s = ctx;
    /* one chunk, a run within one group, or all of them at once in the caller */
    const int whole = lo == 0 && hi == s->chunks && slot == 0;
    const int run =
        hi > lo + 1 && lo >= 0 && hi <= s->chunks && lo / s->group == (hi - 1) / s->group;
    if (!(hi == lo + 1 || whole || run)) atomic_store(&s->bad_call, 1);
    if (run && !whole) atomic_fetch_add(&s->runs, 1);
    if (slot == 1) atomic_store(&s->worker_started, 1);
    if (s->slow_ns && slot == 0) {
        const int64_t t0 = dlrt_now_ns();
        while (!atomic_load(&s->worker_started) && dlrt_now_ns() - t0 < 50000000) DLRT_PAUSE();
    }
    if (s->slow_ns && slot == 1) {
        struct timespec ts = {0, s->slow_ns};
        nanosleep(&ts, NULL);
    }
    for (int64_t c = lo; c < hi; c++) atomic_fetch_add(&s->visits[c], 1);
    atomic_fetch_add(&s->calls, 1);
    atomic_fetch_add(&s->by_slot[slot], 1);
    if (slot < 2 && hi == lo + 1) {
        const int k = atomic_fetch_add(&s->order_n[slot], 1);
        if (k < 256) s->order[slot][k] = (int)lo;
    }
}

static void spans_reset(spans_seen *s, int64_t chunks, int64_t group, long slow_ns) {
    for (int i = 0; i < 256; i++) atomic_store(&s->visits[i], 0);
    for (int i = 0; i < DLRT_MAX_THREADS; i++) atomic_store(&s->by_slot[i], 0);
    atomic_store(&s->calls, 0);
    atomic_store(&s->bad_call, 0);
    atomic_store(&s->worker_started, 0);
    atomic_store(&s->order_n[0], 0);
    atomic_store(&s->order_n[1], 0);
    atomic_store(&s->runs, 0);
    s->chunks = chunks, s->group = group < 1 ? 1 : group, s->slow_ns = slow_ns;
}

static int spans_once(const spans_seen *s) {
    for (int64_t c = 0; c < s->chunks; c++)
        if (atomic_load(&s->visits[c]) != 1) return 0;
    return !atomic_load(&s->bad_call);
}

typedef struct one_call {
    _Atomic int calls;
    int64_t lo, hi;
} one_call;

static void note_call(void *ctx, int64_t lo, int64_t hi, int slot) {
    one_call *c = ctx;
    (void)slot;
    if (atomic_fetch_add(&c->calls, 1) == 0) c->lo = lo, c->hi = hi;
}

/* Whether slot's chunks went as spans promise, spans of 8 chunks: its first the front of a span
 * (its own), then the rest of that span in order, then others' from their backs (descending). */
static int spans_in_order(const spans_seen *s, int slot) {
    const int n = DLRT_MIN(atomic_load(&s->order_n[slot]), 256);
    const int *q = s->order[slot];
    if (n == 0) return 1;
    if (q[0] % 8 != 0) return 0;
    int k = 1;
    while (k < n && q[k] == q[0] + k && k < 8) k++;
    for (int i = k; i < n; i++)
        if (q[i] / 8 == q[0] / 8 || (i > k && q[i] >= q[i - 1])) return 0;
    return 1;
}

static void test_spans(void) {
    /* starts: even, uneven, empty spans (repeated starts, starts at the end), more spans than
     * threads; and starts the runtime must hold in range: past the end, going back, negative, a
     * first one above 0 (each span then starts within the previous one's start and the end) */
    const int64_t starts_a[] = {0, 1, 7}, starts_b[] = {0, 0, 5, 5}, starts_c[] = {0, 9, 9},
                  starts_d[] = {0, 300, 2}, starts_e[] = {5, -4, 3, 1};
    int ok = 1;
    for (int t = 1; t <= 4; t++) {
        dlrt_set_threads(t);
        for (int64_t chunks = 1; chunks <= 200; chunks += chunks < 12 ? 1 : 37) {
            static spans_seen s;
            const struct {
                int spans;
                const int64_t *starts;
            } cases[] = {{2, NULL},     {3, NULL},     {t, NULL},     {3, starts_a},
                         {4, starts_b}, {3, starts_c}, {3, starts_d}, {4, starts_e}};
            for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
                spans_reset(&s, chunks, 1, 0);
                dlrt_parallel_spans(chunks, cases[k].spans, cases[k].starts, 1, 0, spans_record,
                                    &s);
                if (!spans_once(&s)) {
                    ok = 0;
                    printf("  chunks %lld spans %d case %zu threads %d: wrong chunks\n",
                           (long long)chunks, cases[k].spans, k, t);
                }
            }
        }
    }
    CHECK("spans: every chunk once, one a call (or all in the caller), any starts and team", ok);

    /* front runs up to the next multiple of group: every chunk once, no call across a multiple
     * of group, and runs of several chunks on 2-4 threads (spans of 4 or more chunks) */
    int group_ok = 1, runs_seen = 1;
    for (int t = 1; t <= 4; t++) {
        dlrt_set_threads(t);
        for (int64_t group = 2; group <= 5; group++)
            for (int64_t chunks = 1; chunks <= 200; chunks += chunks < 12 ? 1 : 37) {
                static spans_seen s;
                const int64_t *starts[] = {NULL, starts_a, starts_c, starts_e};
                for (size_t k = 0; k < sizeof starts / sizeof starts[0]; k++) {
                    spans_reset(&s, chunks, group, 0);
                    dlrt_parallel_spans(chunks, 3, starts[k], group, 0, spans_record, &s);
                    group_ok = group_ok && spans_once(&s);
                }
                spans_reset(&s, chunks, group, 0);
                dlrt_parallel_spans(chunks, 2, NULL, group, 0, spans_record, &s);
                group_ok = group_ok && spans_once(&s);
                if (t > 1 && chunks >= 8) runs_seen = runs_seen && atomic_load(&s.runs) > 0;
            }
    }
    CHECK("spans: front runs within a group, every chunk once, any starts and team", group_ok);
    CHECK("spans: a thread takes its own chunks a group at a time", runs_seen);

    /* groups below 2 take one chunk at a time (and 0 does not divide by zero) */
    int single_ok = 1;
    dlrt_set_threads(2);
    for (int64_t group = -1; group <= 1; group++) {
        static spans_seen s;
        spans_reset(&s, 40, group, 0);
        dlrt_parallel_spans(40, 2, NULL, group, 0, spans_record, &s);
        single_ok = single_ok && spans_once(&s) && atomic_load(&s.runs) == 0;
    }
    CHECK("spans: groups of -1, 0 and 1 run one chunk a call", single_ok);

    /* a span starting inside a group, taken from its front: [1, 7) in groups of 3 is [1, 3),
     * [3, 6), [6, 7); from its back, one chunk at a time */
    _Atomic uint64_t u = (uint64_t)1 << 32 | 7;
    int64_t at[4] = {-1, -1, -1, -1}, n[4];
    for (int k = 0; k < 4; k++) n[k] = dlrt_steal_take(&u, 0, 3, &at[k]);
    _Atomic uint64_t b = (uint64_t)1 << 32 | 7;
    int64_t back_at = -1;
    const int64_t back_n = dlrt_steal_take(&b, 1, 3, &back_at);
    CHECK("spans: front runs of a span starting inside a group end at the group's multiples",
          n[0] == 2 && at[0] == 1 && n[1] == 3 && at[1] == 3 && n[2] == 1 && at[2] == 6 &&
              n[3] == 0 && back_n == 1 && back_at == 6);

    /* more chunks than a span's 32-bit bounds hold (still 2 threads): all in the caller, in
     * one call */
    one_call c = {0};
    const int64_t huge_n = ((int64_t)1 << 32) + 5;
    dlrt_parallel_spans(huge_n, 2, NULL, 4, 0, note_call, &c);
    CHECK("spans: 2^32 + 5 chunks run in the caller as one call",
          atomic_load(&c.calls) == 1 && c.lo == 0 && c.hi == huge_n);
    /* the last chunks a span word can hold: from the front, then from the back */
    _Atomic uint64_t w = (uint64_t)(UINT32_MAX - 2) << 32 | UINT32_MAX;
    int64_t got[3] = {-1, -1, -1};
    const int64_t took = dlrt_steal_take(&w, 0, 1, &got[0]) + dlrt_steal_take(&w, 1, 1, &got[1]);
    CHECK("spans: a span word at the 32-bit limit gives its front and back chunks, then none",
          took == 2 && got[0] == (int64_t)UINT32_MAX - 2 && got[1] == (int64_t)UINT32_MAX - 1 &&
              !dlrt_steal_take(&w, 0, 1, &got[2]) && !dlrt_steal_take(&w, 1, 1, &got[2]));
    /* a front run there: up to the group's end (2^32 - 2 is a multiple of 2^31 - 1), then the
     * span's end, whatever the group */
    _Atomic uint64_t v = (uint64_t)(UINT32_MAX - 4) << 32 | UINT32_MAX;
    const int64_t big = ((int64_t)1 << 31) - 1, huge = (int64_t)1 << 40;
    const int64_t first = dlrt_steal_take(&v, 0, big, &got[0]);
    const int64_t second = dlrt_steal_take(&v, 0, huge, &got[1]);
    CHECK("spans: front runs at the 32-bit limit end at the group's end, then the span's",
          first == 3 && got[0] == (int64_t)UINT32_MAX - 4 && second == 1 &&
              got[1] == (int64_t)UINT32_MAX - 1 && !dlrt_steal_take(&v, 0, 1, &got[2]));

    /* slot 1's chunks take 3 ms each, the caller's none, and the caller waits until slot 1 is in
     * a chunk: it then runs its own span front first, and takes slot 1's from the back, so slot
     * 1 runs the chunk it is in, the first of its span (whichever it claimed), and few more
     * (without the taking over, all 8 of its span's) */
    int worker_runs = 0, most = 0, whole = 1, order_ok = 1;
    for (int r = 0; r < 10; r++) {
        static spans_seen s;
        spans_reset(&s, 16, 1, 3000000);
        dlrt_parallel_spans(16, 2, NULL, 1, 0, spans_record, &s);
        whole = whole && spans_once(&s);
        const int w1 = atomic_load(&s.by_slot[1]);
        worker_runs += w1 > 0;
        most = w1 > most ? w1 : most;
        if (w1 == 0) continue;
        for (int slot = 0; slot < 2; slot++) order_ok = order_ok && spans_in_order(&s, slot);
    }
    CHECK("a slow thread's chunks: each once", whole);
    CHECK("a slow thread's span is taken over: it ran at most 3 of its 8 chunks",
          worker_runs > 0 && most <= 3);
    CHECK("spans: own chunks taken from the front, the others' from the back", order_ok);
}

int main(void) {
    test_coverage();
    test_huge();
    test_nested();
    test_held_worker();
    test_piece_counts_in_turn();
    test_sleep_wake();
    test_two_callers();
    test_fork();
    test_fork_during_job();
    test_spans();
    dlrt_tpool_stop();
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
