/* cli.h — shared pieces of the dlcc command-line tool: one function per subcommand. */
#ifndef DL_CLI_H
#define DL_CLI_H

#include "dlcc.h"

#include <stdbool.h>
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

#endif
