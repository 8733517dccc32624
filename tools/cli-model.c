/* cli-model.c — what the commands that time a compiled model (bench, profile) share: their
 * common options, loading + binding inputs + compiling natively; and the --threads parser of
 * every command that runs a model. */
#include "cli.h"
#include "../src/runtime/profile.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int cli_threads(const char *value, int *out) {
    char *end;
    errno = 0;
    long n = strtol(value, &end, 10);
    if (end == value || *end || n < 1 || errno == ERANGE || n > 65536) {
        cli_error("--threads: expected a positive integer%s, got '%s'",
                  n > 65536 || errno == ERANGE ? " (at most 65536)" : "", value);
        return 2;
    }
    *out = (int)n;
    return 0;
}

int cli_count(const char *cmd, const char *opt, const char *value, int min, int max, int *out) {
    char *end;
    long n = strtol(value, &end, 10);
    if (end == value || *end || n < min || n > max) {
        cli_error("%s: %s: expected an integer from %d to %d, got '%s'", cmd, opt, min, max, value);
        return 2;
    }
    *out = (int)n;
    return 0;
}

int cli_math(const char *cmd, const char *value, int *out) {
    if (!strcmp(value, "fp32")) {
        *out = DL_MATH_FP32;
    } else if (!strcmp(value, "bf16")) {
        *out = DL_MATH_BF16;
    } else {
        cli_error("%s: --math: expected fp32 or bf16, got '%s'", cmd, value);
        return 2;
    }
    return 0;
}

int cli_model_arg(cli_model_args *a, const char *cmd, int argc, char **argv, int *i) {
    const char *v;
    if ((v = cli_opt(argc, argv, i, "--threads"))) return cli_threads(v, &a->threads);
    if ((v = cli_opt(argc, argv, i, "--iters")))
        return cli_count(cmd, "--iters", v, 1, 1000, &a->iters);
    if ((v = cli_opt(argc, argv, i, "--warmup")))
        return cli_count(cmd, "--warmup", v, 0, 1000, &a->warmup);
    if ((v = cli_opt(argc, argv, i, "--seed"))) {
        a->seed = strtoull(v, NULL, 10);
        return 0;
    }
    if ((v = cli_opt(argc, argv, i, "--tuning"))) {
        a->tuning = v;
        return 0;
    }
    if ((v = cli_opt(argc, argv, i, "--math"))) return cli_math(cmd, v, &a->math);
    if ((v = cli_opt(argc, argv, i, "--input"))) {
        if (a->n_spec == CLI_MAX_INPUTS) return cli_error("%s: too many --input options", cmd) + 1;
        a->in_spec[a->n_spec++] = v;
        return 0;
    }
    if (argv[*i][0] == '-') return -1;
    if (a->model) return cli_error("%s: more than one model given", cmd) + 1;
    a->model = argv[*i];
    return 0;
}

int cli_model_open(cli_model *m, const cli_model_args *a, int quiet) {
    memset(m, 0, sizeof *m);
    m->ctx = dl_ctx_new();
    if (!m->ctx) return cli_error("out of memory");
    if (dl_load_onnx(m->ctx, a->model, &m->g) != DL_OK) return cli_error("%s", dl_errmsg(m->ctx));
    m->n_in = dl_graph_num_inputs(m->g);
    m->inputs = calloc((size_t)m->n_in + 1, sizeof *m->inputs);
    if (!m->inputs) return cli_error("out of memory");
    if (cli_bind_inputs(m->ctx, m->g, a->model, a->n_spec, a->in_spec, a->seed, quiet, m->inputs))
        return 1;
    dl_compile_options co;
    dl_compile_options_init(&co);
    co.threads = m->threads = a->threads ? a->threads : dl_default_threads();
    co.tuning = a->tuning;
    co.math = a->math;
    if (a->load_only) return 0;
    double t0 = cli_now();
    if (dl_compile(m->ctx, m->g, &co, &m->prog) != DL_OK)
        return cli_error("%s: %s", a->model, dl_errmsg(m->ctx));
    m->compile_ms = (cli_now() - t0) * 1e3;
    return 0;
}

void cli_model_close(cli_model *m) {
    for (int i = 0; m->inputs && i < m->n_in; i++) dl_tensor_free(m->inputs[i]);
    free(m->inputs);
    dl_program_free(m->prog);
    dl_graph_free(m->g);
    dl_ctx_free(m->ctx);
    memset(m, 0, sizeof *m);
}
