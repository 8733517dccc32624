/* isa.c — resolves the instruction set to build kernels for from the CPU's features. A forced
 * set must be one the CPU runs: code built for AVX-512 would die with SIGILL elsewhere, so the
 * request is refused with a message instead. */
#include "isa.h"

#include <stdlib.h>
#include <string.h>

typedef struct isa_row {
    const char *name;
    const char *cflags;
    int vector_bytes;
} isa_row;

#if defined(__x86_64__) || defined(__i386__)
static const isa_row rows[] = {
    {"avx512", "-O3 -march=x86-64-v4 -mtune=native", 64},
    {"avx2", "-O3 -march=x86-64-v3 -mtune=native", 32},
    {"generic", "-O3 -march=x86-64 -mtune=generic", 16},
};

static bool cpu_has(const char *name) {
    __builtin_cpu_init();
    if (!strcmp(name, "avx512"))
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("avx512cd");
    if (!strcmp(name, "avx2"))
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
               __builtin_cpu_supports("bmi2");
    return true;
}
#else
static const isa_row rows[] = {{"generic", "-O3", 16}};
static bool cpu_has(const char *name) {
    return !strcmp(name, "generic");
}
#endif

dl_status dl_isa_resolve(dl_ctx *ctx, const char *req, dl_isa *out) {
    if (!req || !*req) req = getenv("DLCC_ISA");
    if (!req || !*req) req = "native";
    const int n = (int)(sizeof rows / sizeof rows[0]);
    if (!strcmp(req, "native")) {
        /* the best set the CPU has, built with everything it offers */
        for (int i = 0; i < n; i++)
            if (cpu_has(rows[i].name)) {
                snprintf(out->name, sizeof out->name, "%s", rows[i].name);
                snprintf(out->cflags, sizeof out->cflags, "-O3 -march=native");
                out->vector_bytes = rows[i].vector_bytes;
                return DL_OK;
            }
    }
    for (int i = 0; i < n; i++) {
        if (strcmp(req, rows[i].name) != 0) continue;
        if (!cpu_has(req))
            return dl_fail(ctx, DL_ERR_UNSUPPORTED,
                           "instruction set '%s' requested (DLCC_ISA) but this CPU lacks it", req);
        snprintf(out->name, sizeof out->name, "%s", rows[i].name);
        snprintf(out->cflags, sizeof out->cflags, "%s", rows[i].cflags);
        out->vector_bytes = rows[i].vector_bytes;
        return DL_OK;
    }
    char names[128] = "native";
    for (int i = 0; i < n; i++)
        snprintf(names + strlen(names), sizeof names - strlen(names), ", %s", rows[i].name);
    return dl_fail(ctx, DL_ERR_INVALID, "unknown instruction set '%.40s' (DLCC_ISA): expected %s",
                   req, names);
}
