/* cmd-show.c — `dlcc show MODEL [--dot FILE] [--nodes]`. */
#include "cli.h"

#include <string.h>

static const char help[] =
    "usage: dlcc show MODEL.onnx [--dot FILE] [--nodes]\n\n"
    "Prints the graph: inputs and outputs with their (possibly symbolic) shapes, op counts,\n"
    "parameter count and bytes.\n"
    "  --dot FILE   also write the graph in Graphviz DOT format\n"
    "  --nodes      list every node with its inputs and inferred output types\n";

int cmd_show(int argc, char **argv) {
    const char *model = NULL, *dot = NULL;
    int nodes = 0;
    for (int i = 1; i < argc; i++) {
        const char *v;
        if (cli_is_help(argv[i])) {
            fputs(help, stdout);
            return 0;
        } else if ((v = cli_opt(argc, argv, &i, "--dot"))) {
            dot = v;
        } else if (strcmp(argv[i], "--nodes") == 0) {
            nodes = 1;
        } else if (argv[i][0] == '-') {
            return cli_error("show: unknown option '%s'", argv[i]) + 1;
        } else if (!model) {
            model = argv[i];
        } else {
            return cli_error("show: more than one model given") + 1;
        }
    }
    if (!model) {
        fputs(help, stderr);
        return 2;
    }
    dl_ctx *ctx = dl_ctx_new();
    dl_graph *g = NULL;
    int rc = 0;
    if (dl_load_onnx(ctx, model, &g) != DL_OK || dl_graph_print(g, stdout, nodes) != DL_OK ||
        (dot && dl_graph_write_dot(g, dot) != DL_OK))
        rc = cli_error("%s", dl_errmsg(ctx));
    else if (dot)
        printf("wrote %s\n", dot);
    dl_graph_free(g);
    dl_ctx_free(ctx);
    return rc;
}
