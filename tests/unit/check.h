/* check.h — the counting CHECK macro shared by the unit tests. Each failure prints a FAIL line
 * (with file:line); define CHECK_PRINT_PASS before including to print PASS lines too, and
 * CHECK_FAIL_DETAIL() to print something more after a FAIL (e.g. the context's message). Each
 * test's main ends with printf("%d passed, %d failed\n", passed, failed). */
#ifndef DL_TEST_CHECK_H
#define DL_TEST_CHECK_H

#include <stdio.h>

static int passed, failed;

#ifdef CHECK_PRINT_PASS
#define CHECK_PASS_LINE_(name) printf("PASS %s\n", name)
#else
#define CHECK_PASS_LINE_(name) ((void)0)
#endif
#ifndef CHECK_FAIL_DETAIL
#define CHECK_FAIL_DETAIL() ((void)0)
#endif

#define CHECK(name, cond)                                                                          \
    do {                                                                                           \
        if (cond) {                                                                                \
            passed++;                                                                              \
            CHECK_PASS_LINE_(name);                                                                \
        } else {                                                                                   \
            failed++;                                                                              \
            printf("FAIL %s (%s:%d)", name, __FILE__, __LINE__);                                   \
            CHECK_FAIL_DETAIL();                                                                   \
            printf("\n");                                                                          \
        }                                                                                          \
    } while (0)

#endif
