/* cmd-tune.c — `dlcc tune MODEL`: time every convolution algorithm that applies to each layer,
 * inside the model, and record the fastest per layer geometry in a tuning file that compile,
 * run, bench and profile read with --tuning. The measuring is in src/runtime/tune.c. */
#include "cli.h"
#include "../src/runtime/profile.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char help[] =
    "usage: dlcc tune MODEL.onnx [--out FILE] [--threads N] [--rounds N] [--iters N]\n"
    "                 [--warmup N] [--margin PCT] [--input NAME=FILE.npy]... [--seed N]\n"
    "                 [--math fp32|bf16]\n\n"
    "Measures which convolution algorithm is fastest for each layer of the model on this\n"
    "machine, where the cost model only estimates it. One program is compiled per algorithm\n"
    "(im2col, 1x1 GEMM, implicit GEMM, Winograd F(4x4) and F(2x2), direct), each forcing it on\n"
    "every layer it applies to; each must give the cost model's outputs within 1e-3 of their\n"
    "largest magnitude or 1 (1e-1 with --math bf16, where algorithms differ in precision too;\n"
    "else it is dropped with a warning). Every program is then profiled in turn, --rounds\n"
    "times, and each layer takes the algorithm with the lowest median time, summed over the\n"
    "layers of the same geometry, where it beats the cost model's pick by more than --margin;\n"
    "elsewhere the record says 'model' (the cost model picks, as without a record). Last, the\n"
    "tuned program is timed against the cost model's; where the whole model is not faster by\n"
    "a third of the margin, every record says 'model' (a layer's gain alone can move to its\n"
    "neighbours through the caches).\n\n"
    "The records go to FILE (one line per layer geometry and instruction set, with the times as\n"
    "a comment); records already in FILE for other geometries are kept, so one file can serve\n"
    "several models. Use them with --tuning FILE on compile, run, bench and profile (or the C\n"
    "API's dl_compile_options.tuning). They do not depend on the thread count: a program's\n"
    "results are the same whatever --threads runs it, but tune with the thread count you\n"
    "deploy with.\n"
    "  --out FILE             the tuning file (default dlcc-tuning.txt)\n"
    "  --threads N            threads for compiled kernels (default: all cores)\n"
    "  --rounds N             profiles of each program, in turn (default 3)\n"
    "  --iters N              timed runs per profile (default: about 2 s worth)\n"
    "  --warmup N             untimed runs before each profile (default 3)\n"
    "  --margin PCT           how much faster than the cost model's pick an algorithm must be\n"
    "                         to replace it, in percent (default 3)\n"
    "  --input NAME=FILE.npy  bind a graph input (repeatable); the others get random values from\n"
    "                         a fixed seed, symbolic dims taken as 1\n"
    "  --seed N               seed for random inputs (default 0)\n"
    "  --math fp32|bf16       the products' precision of the programs timed (as they will be\n"
    "                         compiled: see dlcc compile --help; default fp32)\n";

int cmd_tune(int argc, char **argv) {
    cli_model_args a = {.warmup = 3, .load_only = true}; /* dl_tune compiles its programs */
    const char *out = "dlcc-tuning.txt", *v;
    int rounds = 3, rc;
    double margin = 3;
    for (int i = 1; i < argc; i++) {
        if (cli_is_help(argv[i])) {
            fputs(help, stdout);
            return 0;
        } else if ((v = cli_opt(argc, argv, &i, "--tuning"))) {
            return cli_error("tune: --tuning: the file tune writes is --out") + 1;
        } else if ((rc = cli_model_arg(&a, "tune", argc, argv, &i)) >= 0) {
            if (rc) return rc;
        } else if ((v = cli_opt(argc, argv, &i, "--out"))) {
            out = v;
        } else if ((v = cli_opt(argc, argv, &i, "--rounds"))) {
            if ((rc = cli_count("tune", "--rounds", v, 1, 64, &rounds))) return rc;
        } else if ((v = cli_opt(argc, argv, &i, "--margin"))) {
            char *end;
            margin = strtod(v, &end);
            if (end == v || *end || !(margin >= 0 && margin < 100))
                return cli_error("tune: --margin: expected a percentage from 0 up to (not "
                                 "including) 100, got '%s'",
                                 v) +
                       1;
        } else {
            return cli_error("tune: unknown option '%s' (see dlcc tune --help)", argv[i]) + 1;
        }
    }
    if (!a.model) {
        fputs(help, stderr);
        return 2;
    }
    cli_model m;
    dl_tuning *db = NULL;
    rc = 1;
    /* the file is read first: a malformed one stops before minutes of measuring */
    dl_ctx *fctx = dl_ctx_new();
    if (!fctx) return cli_error("out of memory");
    if (dl_tuning_load(fctx, out, true, &db) != DL_OK) {
        cli_error("%s", dl_errmsg(fctx));
        dl_ctx_free(fctx);
        return 1;
    }
    dl_ctx_free(fctx);
    /* and where it goes must take a file: not after minutes of measuring */
    char dir[4096];
    const char *slash = strrchr(out, '/');
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - out) + (slash == out) : 1,
             slash ? out : ".");
    if (access(dir, W_OK | X_OK) != 0) {
        cli_error("tune: --out %s: cannot write in '%s': %s", out, dir, strerror(errno));
        dl_tuning_free(db);
        return 1;
    }
    if (cli_model_open(&m, &a, 0)) goto done;
    dl_compile_options co;
    dl_compile_options_init(&co);
    co.threads = m.threads;
    co.math = a.math;
    dl_tune_opts to = {.rounds = rounds,
                       .warmup = a.warmup,
                       .iters = a.iters,
                       .margin = margin / 100.0,
                       .log = stdout};
    dl_tune_result res;
    if (dl_tune(m.ctx, m.g, &co, m.n_in, m.inputs, &to, db, &res) != DL_OK) {
        cli_error("%s: %s", a.model, dl_errmsg(m.ctx));
        goto done;
    }
    if (res.layers == 0) {
        rc = 0;
        goto done;
    }
    char header[512];
    snprintf(header, sizeof header,
             "last tuned: %s, %d thread%s, %d round%s; margin %.3g%%\n"
             "records: the fastest algorithm where it beat the cost model's pick by the margin, "
             "else 'model' (the cost model picks)",
             a.model, m.threads, m.threads == 1 ? "" : "s", rounds, rounds == 1 ? "" : "s", margin);
    for (char *c = header; *c; c++) /* a model path is not trusted to be one printable line */
        if ((unsigned char)*c < 0x20 && *c != '\n') *c = '?';
    if (dl_tuning_write(m.ctx, db, out, header) != DL_OK) {
        cli_error("%s", dl_errmsg(m.ctx));
        goto done;
    }
    printf("\n%d layers with a choice, %d geometries, %d measured faster than the cost model's "
           "pick\n",
           res.layers, res.keys, res.changed);
    if (res.changed)
        printf("whole model, median of %d rounds: cost model %.3f ms, tuned %.3f ms (%.3fx)%s\n",
               rounds, res.base_ms, res.tuned_ms,
               res.base_ms > 0 ? res.tuned_ms / res.base_ms : 0.0,
               res.kept ? ": not faster as a whole, so every record says 'model'" : "");
    printf("wrote %d records to %s (use: --tuning %s)\n", dl_tuning_count(db), out, out);
    rc = 0;
done:
    dl_tuning_free(db);
    cli_model_close(&m);
    return rc;
}
