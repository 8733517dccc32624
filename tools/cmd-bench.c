/* cmd-bench.c — `dlcc bench MODEL`: compile natively, then time whole runs (median, p90, min,
 * mean); --profile adds the per-kernel table of `dlcc profile`. The measuring is in
 * src/runtime/profile.c. */
#include "cli.h"
#include "../src/runtime/profile.h"

#include <string.h>

static const char help[] =
    "usage: dlcc bench MODEL.onnx [--threads N] [--iters N] [--warmup N]\n"
    "                  [--input NAME=FILE.npy]... [--seed N] [--tuning FILE] [--json]\n"
    "                  [--math fp32|bf16] [--profile]\n\n"
    "Compiles the model (native backend), runs it --warmup times (default 5), then times\n"
    "--iters runs (default: at least 10 and about 2 s worth, at most 1000) and prints the\n"
    "median, p90, min and mean latency and the compile time.\n"
    "  --threads N            threads for compiled kernels (default: all cores)\n"
    "  --input NAME=FILE.npy  bind a graph input (repeatable); the others get random values from\n"
    "                         a fixed seed, symbolic dims taken as 1\n"
    "  --seed N               seed for random inputs (default 0)\n"
    "  --tuning FILE          convolution algorithms measured by dlcc tune (records for other\n"
    "                         layers or instruction sets are ignored; default: the cost model)\n"
    "  --math fp32|bf16       bf16: MatMul, Gemm and convolutions run as GEMMs with bfloat16\n"
    "                         operands, float32 sums (AVX512-BF16; faster, less exact; default\n"
    "                         fp32)\n"
    "  --json                 print one JSON line instead:\n"
    "                         {\"model\":...,\"threads\":N,\"iters\":N,\"warmup\":N,\"median_ms\":X,\n"
    "                          \"p90_ms\":X,\"min_ms\":X,\"mean_ms\":X,\"compile_ms\":X}\n"
    "  --profile              then time each kernel (see dlcc profile --help); with --json the\n"
    "                         table goes to stderr\n";

int cmd_bench(int argc, char **argv) {
    cli_model_args a = {.warmup = 5};
    int json = 0, profile = 0, rc;
    for (int i = 1; i < argc; i++) {
        if (cli_is_help(argv[i])) {
            fputs(help, stdout);
            return 0;
        } else if ((rc = cli_model_arg(&a, "bench", argc, argv, &i)) >= 0) {
            if (rc) return rc;
        } else if (strcmp(argv[i], "--json") == 0) {
            json = 1;
        } else if (strcmp(argv[i], "--profile") == 0) {
            profile = 1;
        } else {
            return cli_error("bench: unknown option '%s' (see dlcc bench --help)", argv[i]) + 1;
        }
    }
    if (!a.model) {
        fputs(help, stderr);
        return 2;
    }
    cli_model m;
    dl_profile pr = {0};
    rc = 1;
    if (cli_model_open(&m, &a, json)) goto done;
    dl_bench_result r;
    if (dl_bench_program(m.ctx, m.prog, m.n_in, NULL, m.inputs, a.warmup, a.iters, &r) != DL_OK ||
        dl_bench_print(m.ctx, a.model, m.threads, &r, m.compile_ms, json, stdout) != DL_OK) {
        cli_error("%s: %s", a.model, dl_errmsg(m.ctx));
        goto done;
    }
    if (profile) {
        dl_machine mach;
        fflush(stdout);
        if (dl_measure_machine(m.ctx, m.threads, &mach) != DL_OK ||
            dl_profile_program(m.ctx, m.prog, m.n_in, NULL, m.inputs, 1, 0, &pr) != DL_OK ||
            dl_profile_print(m.ctx, &pr, m.prog, &mach, 20, json ? stderr : stdout) != DL_OK) {
            cli_error("%s: %s", a.model, dl_errmsg(m.ctx));
            goto done;
        }
    }
    rc = 0;
done:
    dl_profile_free(&pr);
    cli_model_close(&m);
    return rc;
}
