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

#endif
