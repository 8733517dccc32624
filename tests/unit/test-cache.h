/* test-cache.h — a private compile cache for a unit-test binary: a fresh temporary folder (so a
 * test neither reads nor fills the user's ~/.cache/dlcc, and its first compiles are cache misses)
 * set as the options' cache_dir, and removed at the end. Include after dlcc.h. */
#ifndef DLCC_TEST_CACHE_H
#define DLCC_TEST_CACHE_H

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* Makes the folder from the template dir ("...XXXXXX", rewritten in place) and initializes o to
 * use it; false (after saying why) when it cannot be made. */
static inline int test_cache_open(char *dir, dl_compile_options *o) {
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 0;
    }
    dl_compile_options_init(o);
    o->cache_dir = dir;
    return 1;
}

static inline void test_cache_remove(const char *dir) {
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

#endif
