/* test_memplan.c — the static memory planner: hand-made cases with known optimal plans, input
 * errors, allocation failures, a randomized property test against plain-loop references
 * (live-overlapping buffers never share bytes unless a legal in-place pair, alignment, bounds),
 * and timing on 10^4 buffers. */
#include "../../src/codegen/memplan.h"

#include <stdlib.h>
#include <time.h>

#include "check.h"
#include "test-rng.h"

static dl_mp_buf B(int64_t size, int first, int last) {
    return (dl_mp_buf){size, first, last, -1, -1};
}

static dl_status plan(int n, const dl_mp_buf *b, int64_t align, int64_t *off, dl_mp_stats *st) {
    dl_ctx *ctx = dl_ctx_new();
    dl_status s = dl_memplan(ctx, n, b, align, off, st);
    if (s != DL_OK && dl_errmsg(ctx)[0] == 0) s = DL_ERR_INTERNAL; /* an error must say why */
    dl_ctx_free(ctx);
    return s;
}

static bool mem_overlap(int64_t a, int64_t sa, int64_t b, int64_t sb) {
    return sa > 0 && sb > 0 && a < b + sb && b < a + sa;
}

static void test_chains(void) {
    dl_mp_stats st;
    int64_t off[8];
    CHECK("empty plan", plan(0, NULL, 64, NULL, &st) == DL_OK && st.arena == 0 && st.sum == 0);

    dl_mp_buf chain[4] = {B(100, 0, 1), B(100, 1, 2), B(100, 2, 3), B(100, 3, 4)};
    CHECK("chain without in-place: ping-pong",
          plan(4, chain, 1, off, &st) == DL_OK && st.arena == 200 && st.sum == 400 &&
              st.naive_peak == 200 && st.n_inplace == 0 && off[0] == off[2] && off[1] == off[3] &&
              off[0] != off[1]);
    for (int i = 1; i < 4; i++) chain[i].inplace_of = i - 1;
    CHECK("chain in place: one buffer",
          plan(4, chain, 1, off, &st) == DL_OK && st.arena == 100 && st.n_inplace == 3 &&
              st.naive_peak == 200 && off[0] == 0 && off[1] == 0 && off[2] == 0 && off[3] == 0);

    /* a diamond: x feeds a and b; the Add writes y reading a and b */
    dl_mp_buf dia[4] = {B(64, 0, 2), B(64, 1, 3), B(64, 2, 3), B(64, 3, 4)};
    dia[3].inplace_of = 1;
    dia[2].inplace_of = 0; /* x's last reader is the step that writes b */
    CHECK("diamond in place", plan(4, dia, 1, off, &st) == DL_OK && st.n_inplace == 2 &&
                                  off[2] == off[0] && off[3] == off[1] && st.arena == 128);

    /* greedy by size: the big one first, small ones share the rest */
    dl_mp_buf g[4] = {B(32, 0, 1), B(28, 1, 2), B(36, 2, 3), B(16, 3, 4)};
    CHECK("greedy by size reaches the live lower bound",
          plan(4, g, 1, off, &st) == DL_OK && st.arena == 64 && st.naive_peak == 64);
}

static void test_inplace_rules(void) {
    dl_mp_stats st;
    int64_t off[4];
    dl_mp_buf b[3] = {B(100, 0, 2), B(100, 1, 3), B(0, 0, 0)};
    b[1].inplace_of = 0; /* candidate still read at step 2 > 1 */
    CHECK("in-place refused when the candidate outlives the writer",
          plan(2, b, 1, off, &st) == DL_OK && st.n_inplace == 0 && off[0] != off[1]);
    b[0] = B(50, 0, 1);
    CHECK("in-place refused when the candidate is smaller",
          plan(2, b, 1, off, &st) == DL_OK && st.n_inplace == 0 && st.arena == 150);
    b[0] = B(200, 0, 1);
    CHECK("in-place into a larger candidate", plan(2, b, 1, off, &st) == DL_OK &&
                                                  st.n_inplace == 1 && off[0] == off[1] &&
                                                  st.arena == 200);
    b[2] = B(100, 1, 2);
    b[2].inplace_of = 0;
    CHECK("one candidate serves one buffer", plan(3, b, 1, off, &st) == DL_OK &&
                                                 st.n_inplace == 1 &&
                                                 !mem_overlap(off[1], 100, off[2], 100));
    b[0] = B(100, 1, 1);
    b[1] = B(100, 1, 2);
    b[1].inplace_of = 0;
    CHECK("in-place refused when the candidate is written by the same step",
          plan(2, b, 1, off, &st) == DL_OK && st.n_inplace == 0);

    /* in place of a view: legal when base and view both end at the writer */
    dl_mp_buf v[3] = {B(64, 0, 1), B(64, 1, 2), B(64, 2, 3)};
    v[1].alias_of = 0;
    v[2].inplace_of = 1;
    CHECK("in place of a view takes the base's storage",
          plan(3, v, 1, off, &st) == DL_OK && st.n_inplace == 1 && off[0] == off[1] &&
              off[2] == off[0] && st.arena == 64);
    v[1] = B(64, 1, 3);
    v[1].alias_of = 0;
    v[2].inplace_of = 0;
    CHECK("in place refused when a view keeps the base alive",
          plan(3, v, 1, off, &st) == DL_OK && st.n_inplace == 0 && off[0] == off[1] &&
              off[2] != off[0]);
}

static void test_aliases(void) {
    dl_mp_stats st;
    int64_t off[5];
    /* base [0,1]; view of the base read until 5; view of the view; x live at [3,4] */
    dl_mp_buf b[4] = {B(100, 0, 1), B(100, 1, 5), B(40, 2, 4), B(100, 3, 4)};
    b[1].alias_of = 0;
    b[2].alias_of = 1;
    CHECK("aliases share the base's offset and keep it alive",
          plan(4, b, 1, off, &st) == DL_OK && off[1] == off[0] && off[2] == off[0] &&
              !mem_overlap(off[0], 100, off[3], 100) && st.sum == 200 && st.arena == 200 &&
              st.naive_peak == 200);
    b[0].alias_of = 2;
    CHECK("alias cycle is an error", plan(4, b, 1, off, &st) == DL_ERR_INVALID);
    b[0].alias_of = -1;
    b[2].size = 101;
    CHECK("view larger than its base is an error", plan(4, b, 1, off, &st) == DL_ERR_INVALID);
}

static void test_alignment_and_zero(void) {
    dl_mp_stats st;
    int64_t off[4];
    dl_mp_buf b[4] = {B(1, 0, 1), B(1, 0, 1), B(0, 0, 5), B(65, 1, 1)};
    CHECK("alignment pads buffers apart", plan(4, b, 64, off, &st) == DL_OK && off[0] % 64 == 0 &&
                                              off[1] % 64 == 0 && off[3] % 64 == 0 &&
                                              off[0] != off[1] && off[2] == 0 &&
                                              st.arena == 128 + 65 && st.sum == 67);
    CHECK("zero-size buffers take no room",
          plan(3, b, 1, off, &st) == DL_OK && st.arena == 2 && off[2] == 0);
    CHECK("alignment 0 rejected", plan(2, b, 0, off, &st) == DL_ERR_INVALID);
    CHECK("alignment 3 rejected", plan(2, b, 3, off, &st) == DL_ERR_INVALID);
    CHECK("alignment -8 rejected", plan(2, b, -8, off, &st) == DL_ERR_INVALID);
    CHECK("alignment 2^62 accepted",
          plan(2, b, (int64_t)1 << 62, off, &st) == DL_OK && off[0] + off[1] == (int64_t)1 << 62);
    CHECK("null stats accepted", plan(2, b, 16, off, NULL) == DL_OK);
}

static void test_errors(void) {
    int64_t off[3];
    dl_mp_stats st;
    dl_mp_buf b[2] = {B(8, 0, 1), B(8, 1, 2)};
    CHECK("negative count", plan(-1, b, 8, off, &st) == DL_ERR_INVALID);
    CHECK("absurd count", plan(1 << 27, b, 8, off, &st) == DL_ERR_LIMIT);
    CHECK("null arrays", plan(2, NULL, 8, off, &st) == DL_ERR_INVALID &&
                             plan(2, b, 8, NULL, &st) == DL_ERR_INVALID);
    b[1].size = -1;
    CHECK("negative size", plan(2, b, 8, off, &st) == DL_ERR_INVALID);
    b[1] = B(8, 3, 2);
    CHECK("first > last", plan(2, b, 8, off, &st) == DL_ERR_INVALID);
    b[1] = B(8, -1, 2);
    CHECK("negative step", plan(2, b, 8, off, &st) == DL_ERR_INVALID);
    b[1] = B(8, 1, 2);
    b[1].inplace_of = 2;
    CHECK("inplace_of out of range", plan(2, b, 8, off, &st) == DL_ERR_INVALID);
    b[1].inplace_of = 1;
    CHECK("inplace_of self", plan(2, b, 8, off, &st) == DL_ERR_INVALID);
    b[1].inplace_of = -7;
    CHECK("inplace_of negative", plan(2, b, 8, off, &st) == DL_ERR_INVALID);
    b[1].inplace_of = -1;
    b[1].alias_of = 1;
    CHECK("alias_of self", plan(2, b, 8, off, &st) == DL_ERR_INVALID);
    b[1].alias_of = 5;
    CHECK("alias_of out of range", plan(2, b, 8, off, &st) == DL_ERR_INVALID);

    int64_t half = ((int64_t)1 << 62) + 1;
    dl_mp_buf big[2] = {B(half, 0, 1), B(half, 0, 1)};
    CHECK("arena overflow is a limit error", plan(2, big, 1, off, &st) == DL_ERR_LIMIT);
    big[1] = B(INT64_MAX, 2, 3);
    CHECK("huge disjoint buffers plan; sum saturates",
          plan(2, big, 1, off, &st) == DL_OK && st.arena == INT64_MAX && st.sum == INT64_MAX &&
              off[0] == 0 && off[1] == 0);
    big[0] = B(INT64_MAX - 10, 0, 1);
    big[1] = B(5, 0, 1);
    CHECK("aligning past INT64_MAX is a limit error", plan(2, big, 64, off, &st) == DL_ERR_LIMIT);

    /* every allocation failure is a clean NOMEM */
    dl_mp_buf c[3] = {B(8, 0, 1), B(8, 1, 2), B(8, 2, 3)};
    c[1].inplace_of = 0;
    int nomem = 0, tries = 0;
    for (long k = 0; k < 12; k++) {
        dl_ctx *ctx = dl_ctx_new();
        dl_alloc_fail_after(k);
        dl_status s = dl_memplan(ctx, 3, c, 8, off, &st);
        dl_alloc_fail_after(-1);
        tries++;
        if (s == DL_ERR_NOMEM || s == DL_OK) nomem++;
        dl_ctx_free(ctx);
    }
    CHECK("allocation failures give NOMEM or succeed", nomem == tries);
}

/* ---- randomized property test ---- */

/* uniform in [0, n) */
static uint32_t rnd(uint32_t n) {
    return (uint32_t)(rnext() % n);
}

#define RMAX 2048

static int64_t align_up(int64_t x, int64_t a) {
    return (x + a - 1) / a * a;
}

/* One random case; returns false (after printing why) on any violated property. */
/* Scratch for one case (static: RMAX-sized arrays are too big for the stack). */
static dl_mp_buf b[RMAX];
static int root[RMAX], first[RMAX], last[RMAX], inplace_of_root[RMAX];
static int64_t off[RMAX];

/* n buffers over about n/steps_div steps: small n exercises the planner's plain scan, large n
 * its time index. */
static bool random_case(int iter, int nmax, int steps_div, double *ratio_sum, int *ratio_n) {
    int n = 1 + (int)rnd((uint32_t)nmax), steps = 1 + (int)rnd((uint32_t)(n / steps_div + 24));
    int64_t aligns[] = {1, 4, 64, 256};
    int64_t align = aligns[rnd(4)];
    for (int i = 0; i < n; i++) {
        int f = (int)rnd((uint32_t)steps),
            l = f + (int)(rnd(20) == 0 ? rnd((uint32_t)steps) : rnd(4));
        int64_t size = rnd(8) == 0 ? 0 : 1 + rnd(rnd(2) ? 100 : 5000);
        b[i] = B(size, f, l);
        root[i] = i;
        if (i > 0 && rnd(6) == 0) { /* a view of an earlier buffer, no larger than its root */
            int a = (int)rnd((uint32_t)i);
            b[i].alias_of = a;
            root[i] = root[a];
            b[i].size = b[root[i]].size ? rnd((uint32_t)b[root[i]].size + 1) : 0;
        } else if (i > 0 && rnd(3) == 0) { /* an in-place candidate, often shaped to be legal */
            int c = (int)rnd((uint32_t)i);
            b[i].inplace_of = c;
            if (rnd(4) != 0) {
                b[i].first = b[c].last;
                b[i].last = b[i].first + (int)rnd(4);
            }
            if (rnd(2)) b[i].size = b[root[c]].size > 3 ? b[root[c]].size - rnd(3) : 0;
        }
    }
    for (int i = 0; i < n; i++) first[i] = b[i].first, last[i] = b[i].last;
    for (int i = 0; i < n; i++) {
        int r = root[i];
        if (b[i].first < first[r]) first[r] = b[i].first;
        if (b[i].last > last[r]) last[r] = b[i].last;
    }
    dl_mp_stats st;
    dl_status s = plan(n, b, align, off, &st);
    if (s != DL_OK) {
        printf("FAIL random case %d: status %d\n", iter, s);
        return false;
    }
    int64_t sum = 0, sum_aligned = 0;
    for (int i = 0; i < n; i++) {
        if (off[i] < 0 || off[i] % align != 0 || off[i] > st.arena - b[i].size ||
            off[i] != off[root[i]]) {
            printf("FAIL random case %d: buffer %d offset %lld (arena %lld)\n", iter, i,
                   (long long)off[i], (long long)st.arena);
            return false;
        }
        if (root[i] == i) sum += b[i].size, sum_aligned += align_up(b[i].size, align);
    }
    /* every pair of roots live together and sharing bytes must be a legal in-place pair */
    int honoured = 0;
    for (int j = 0; j < n; j++) inplace_of_root[j] = -1;
    for (int i = 0; i < n; i++) {
        for (int j = i + 1; j < n; j++) {
            if (root[i] != i || root[j] != j) continue;
            bool live = first[i] <= last[j] && first[j] <= last[i];
            if (!live || !mem_overlap(off[i], b[i].size, off[j], b[j].size)) continue;
            int y = first[i] > first[j] ? i : j, x = i + j - y; /* y took x's storage */
            if (b[y].inplace_of < 0 || root[b[y].inplace_of] != x) goto illegal;
            if (last[x] != first[y] || first[x] >= first[y] || b[x].size < b[y].size ||
                off[x] != off[y] || inplace_of_root[y] >= 0)
                goto illegal;
            inplace_of_root[y] = x;
            honoured++;
            continue;
        illegal:
            printf("FAIL random case %d: buffers %d [%d,%d] @%lld+%lld and %d [%d,%d] @%lld+%lld "
                   "share memory while live\n",
                   iter, i, first[i], last[i], (long long)off[i], (long long)b[i].size, j, first[j],
                   last[j], (long long)off[j], (long long)b[j].size);
            return false;
        }
    }
    /* live-sum lower bounds: without in-place (naive peak), and with the honoured pairs sharing */
    int64_t naive = 0, lower = 0;
    int max_step = 0;
    for (int i = 0; i < n; i++)
        if (last[i] > max_step) max_step = last[i];
    for (int t = 0; t <= max_step; t++) {
        int64_t live = 0, shared = 0;
        for (int i = 0; i < n; i++) {
            if (root[i] != i || first[i] > t || last[i] < t) continue;
            live += b[i].size;
            if (inplace_of_root[i] >= 0 && first[i] == t) shared += b[i].size;
        }
        if (live > naive) naive = live;
        if (live - shared > lower) lower = live - shared;
    }
    bool ok = st.sum == sum && st.naive_peak == naive && st.n_inplace == honoured &&
              st.arena >= lower && st.arena <= sum_aligned;
    if (!ok) {
        printf("FAIL random case %d: arena %lld (lower %lld, aligned sum %lld), sum %lld/%lld, "
               "naive %lld/%lld, in-place %d/%d\n",
               iter, (long long)st.arena, (long long)lower, (long long)sum_aligned,
               (long long)st.sum, (long long)sum, (long long)st.naive_peak, (long long)naive,
               st.n_inplace, honoured);
        return false;
    }
    if (align == 1 && lower > 0) {
        *ratio_sum += (double)st.arena / (double)lower;
        (*ratio_n)++;
    }
    return true;
}

static void test_random(void) {
    int bad = 0, ratio_n = 0;
    double ratio_sum = 0;
    for (int it = 0; it < 20000 && bad < 5; it++)
        if (!random_case(it, 64, 4, &ratio_sum, &ratio_n)) bad++;
    CHECK("20000 random plans: no live overlap, aligned, bounds, stats", bad == 0);
    for (int it = 0; it < 60 && bad < 5; it++)
        if (!random_case(it, RMAX, 2, &ratio_sum, &ratio_n)) bad++;
    CHECK("60 random plans of up to 2048 buffers: same properties", bad == 0);
    double mean = ratio_n ? ratio_sum / ratio_n : 0;
    printf("random plans: arena / live lower bound = %.3f on average (%d cases, align 1)\n", mean,
           ratio_n);
    CHECK("greedy by size stays close to the live lower bound", mean >= 1.0 && mean < 1.15);
}

/* ---- timing on 10^4 buffers ---- */

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* For sets without views: buffers live together share no bytes unless one took the other's
 * storage in place (same offset, the candidate's last read is the taker's write). */
static bool plan_valid(int n, const dl_mp_buf *b, const int64_t *off) {
    for (int i = 0; i < n; i++) {
        if (off[i] % 64 != 0) return false;
        for (int j = i + 1; j < n; j++) {
            if (b[i].first > b[j].last || b[j].first > b[i].last) continue;
            if (!mem_overlap(off[i], b[i].size, off[j], b[j].size)) continue;
            bool pair = (b[j].inplace_of == i && b[i].last == b[j].first) ||
                        (b[i].inplace_of == j && b[j].last == b[i].first);
            if (!pair || off[i] != off[j]) return false;
        }
    }
    return true;
}

static double time_plan(int n, const dl_mp_buf *b, int64_t *off) {
    double best = 1e9;
    for (int r = 0; r < 3; r++) {
        dl_mp_stats st;
        double t0 = now_ms();
        dl_status s = plan(n, b, 64, off, &st);
        double t = now_ms() - t0;
        if (s != DL_OK) return 1e9;
        if (t < best) best = t;
    }
    return best;
}

static void test_timing(void) {
    enum { N = 10000 };
    dl_mp_buf *b = malloc(N * sizeof *b);
    int64_t *off = malloc(N * sizeof *off);
    if (!b || !off) {
        CHECK("timing buffers allocated", false);
        free(b);
        free(off);
        return;
    }
    double limit = getenv("DLCC_SANITIZED") ? 1000 : 50;
    for (int i = 0; i < N; i++) { /* a long network: short ranges, a few long skips */
        int f = i / 2, l = f + 1 + (int)(rnd(50) == 0 ? rnd(2000) : rnd(3));
        b[i] = B(64 * (1 + rnd(4096)), f, l);
        if (i > 0 && rnd(3) == 0 && b[i - 1].last == f) b[i].inplace_of = i - 1;
    }
    double t1 = time_plan(N, b, off);
    CHECK("10^4 network-like buffers: valid plan", plan_valid(N, b, off));
    for (int i = 0; i < N; i++) b[i] = B(64 * (1 + rnd(4096)), 0, 1); /* all live together */
    double t2 = time_plan(N, b, off);
    CHECK("10^4 buffers live at once: valid plan", plan_valid(N, b, off));
    printf("10^4 buffers: %.1f ms (network-like), %.1f ms (all live at once)\n", t1, t2);
    CHECK("10^4 buffers plan in under 50 ms", t1 < limit && t2 < limit);
    free(b);
    free(off);
}

int main(void) {
    test_chains();
    test_inplace_rules();
    test_aliases();
    test_alignment_and_zero();
    test_errors();
    test_random();
    test_timing();
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
