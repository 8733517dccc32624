/* burst.c — a competing process for bench/contention.sh: busy for BUSY_MS, asleep for IDLE_MS,
 * over and over for SECONDS (IDLE_MS 0: busy all the time). Pinned to one core by its caller, it
 * makes that core run the benchmark's thread slower, as another program or another virtual
 * machine sharing the core would.
 *
 * usage: burst BUSY_MS IDLE_MS SECONDS */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: burst BUSY_MS IDLE_MS SECONDS\n");
        return 2;
    }
    const double busy = atof(argv[1]) * 1e-3, idle = atof(argv[2]) * 1e-3, secs = atof(argv[3]);
    if (!(busy > 0 && busy < 10 && idle >= 0 && idle < 10 && secs > 0 && secs < 3600)) {
        fprintf(stderr, "burst: BUSY_MS in (0, 10000), IDLE_MS in [0, 10000), SECONDS in (0, 3600)\n");
        return 2;
    }
    const double end = now_s() + secs;
    volatile unsigned long spin = 0;
    while (now_s() < end) {
        for (const double stop = now_s() + busy; now_s() < stop;) spin++;
        if (idle > 0) {
            const struct timespec ts = {(time_t)idle, (long)((idle - (double)(time_t)idle) * 1e9)};
            nanosleep(&ts, NULL);
        }
    }
    return 0;
}
