/* cli.h — shared pieces of the dlcc command-line tool: one function per subcommand. */
#ifndef DL_CLI_H
#define DL_CLI_H

#include "dlcc.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

int cmd_run(int argc, char **argv);
int cmd_show(int argc, char **argv);
int cmd_onnx_test(int argc, char **argv);

/* True when argv[i] is -h or --help. */
bool cli_is_help(const char *arg);
/* Reads the value of an option "--name VALUE" or "--name=VALUE"; advances *i. NULL if absent. */
const char *cli_opt(int argc, char **argv, int *i, const char *name);
/* Prints "dlcc: error: ..." and returns 1 (or 2 for usage errors). */
int cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
double cli_now(void);
/* Fills inputs[0..n_inputs) from NAME=FILE.npy specs, random values for the rest; 0 on success,
 * else prints the error and returns 1. */
int cli_bind_inputs(dl_ctx *ctx, dl_graph *g, const char *model, int n_spec,
                    const char *const *in_spec, uint64_t seed, int quiet, dl_tensor **inputs);
int cmd_compile(int argc, char **argv);
int cmd_cache(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_profile(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_tune(int argc, char **argv);
/* Parses an option's count, min to max, into *out; 0 on success, else prints "CMD: OPT:
 * expected an integer from MIN to MAX, got 'VALUE'" and returns 2 (a usage error). */
int cli_count(const char *cmd, const char *opt, const char *value, int min, int max, int *out);
/* Parses the value of --threads (a positive integer) into *out; 0 on success, else prints
 * the error and returns 2 (a usage error). */
int cli_threads(const char *value, int *out);
/* Parses the value of --math ("fp32" or "bf16": dl_math) into *out; 0 on success, else prints
 * "CMD: --math: ..." and returns 2 (a usage error). */
int cli_math(const char *cmd, const char *value, int *out);

/* ---- commands that time a compiled model (cli-model.c) ---- */
#define CLI_MAX_INPUTS 256
typedef struct cli_model_args {
    const char *model;
    const char *in_spec[CLI_MAX_INPUTS]; /* NAME=FILE.npy */
    int n_spec;
    int threads; /* 0: all cores */
    int iters, warmup;
    uint64_t seed;
    const char *tuning; /* --tuning FILE: dlcc tune's records */
    int math;           /* --math: dl_math */
    bool load_only;     /* cli_model_open loads and binds but does not compile (dlcc tune) */
} cli_model_args;
/* Takes argv[*i] when it is a shared option (--threads, --iters, --warmup, --input, --seed,
 * --tuning, --math) or the model: 0 when taken, -1 for another option, else the exit status after
 * an error. */
int cli_model_arg(cli_model_args *a, const char *cmd, int argc, char **argv, int *i);

typedef struct cli_model {
    dl_ctx *ctx;
    dl_graph *g;
    dl_program *prog;
    dl_tensor **inputs; /* n_in, by graph input position */
    int n_in;
    int threads; /* what the kernels run on */
    double compile_ms;
} cli_model;
/* Loads the model, binds its inputs like `dlcc run` and (unless a->load_only) compiles it
 * natively; 0 on success, else prints the error and returns 1. Close m in both cases. */
int cli_model_open(cli_model *m, const cli_model_args *a, int quiet);
void cli_model_close(cli_model *m);

#endif
