/* dlcc.c — entry point of the command-line tool: dispatches subcommands. */
#include "cli.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DLCC_VERSION "0.1.0"

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *summary;
} commands[] = {
    {"run", cmd_run, "run a model on inputs from .npy files (or random inputs)"},
    {"show", cmd_show, "print a model's graph: inputs, outputs, op counts, parameters; --dot"},
    {"compile", cmd_compile, "optimize and compile a model: --report, --dot, --emit c (AOT bundle)"},
    {"bench", cmd_bench, "time a compiled model: median, p90, min, mean latency; --json"},
    {"profile", cmd_profile, "time each kernel of a compiled model: GFLOP/s, GB/s, roofline; --trace"},
    {"tune", cmd_tune, "measure each convolution's fastest algorithm in the model; --tuning FILE"},
    {"train", cmd_train, "train a model's weights on .npy data: losses, optimizers, checkpoints, export"},
    {"cache", cmd_cache, "list or clear the compile cache (ls | clear)"},
    {"onnx-test", cmd_onnx_test, "run ONNX backend test cases and compare with expected outputs"},
};

static void usage(FILE *f) {
    fprintf(f, "dlcc %s — a deep learning compiler\n\nusage: dlcc COMMAND [options]\n\ncommands:\n",
            DLCC_VERSION);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\n'dlcc COMMAND --help' documents each command.\n");
}

bool cli_is_help(const char *arg) { return strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0; }

const char *cli_opt(int argc, char **argv, int *i, const char *name) {
    size_t n = strlen(name);
    if (strncmp(argv[*i], name, n) != 0) return NULL;
    if (argv[*i][n] == '=') return argv[*i] + n + 1;
    if (argv[*i][n] != 0) return NULL;
    if (*i + 1 >= argc) {
        cli_error("option %s needs a value", name);
        exit(2); /* a usage error: nothing has been opened yet */
    }
    return argv[++*i];
}

int cli_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("dlcc: error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 1;
}

double cli_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc < 2 || cli_is_help(argv[1])) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("dlcc %s\n", DLCC_VERSION);
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(argv[1], commands[i].name) == 0) return commands[i].fn(argc - 1, argv + 1);
    cli_error("unknown command '%s' (see dlcc --help)", argv[1]);
    return 2;
}
