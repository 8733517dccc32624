/* cmd-profile.c — `dlcc profile MODEL`: compile natively, time every step (fusion group) over
 * several runs and print a table sorted by time with GFLOP/s, GB/s and the share of the
 * machine's roofline; --trace writes a Chrome trace. The measuring is in src/runtime/profile.c. */
#include "cli.h"
#include "../src/runtime/profile.h"

#include <stdlib.h>

static const char help[] =
    "usage: dlcc profile MODEL.onnx [--threads N] [--iters N] [--warmup N] [--top K]\n"
    "                    [--trace FILE.json] [--input NAME=FILE.npy]... [--seed N]\n"
    "                    [--tuning FILE] [--math fp32|bf16]\n\n"
    "Compiles the model (native backend), runs it --warmup times (default 5), then --iters\n"
    "times (default: at least 10 and about 2 s worth, at most 1000) timing each step, and\n"
    "prints the steps sorted by their median time:\n"
    "kind, time, share, GFLOP/s and GB/s (estimated FLOPs; bytes of the step's inputs and\n"
    "outputs), percent of the roofline (peak FLOP/s and memory bandwidth measured on this\n"
    "machine first; above 100%% when a step's data stays in cache), output shape and nodes;\n"
    "then totals per kind. Step 0's time includes binding the inputs.\n"
    "  --threads N            threads for compiled kernels (default: all cores)\n"
    "  --top K                show the K slowest steps (default 20; 0: all)\n"
    "  --trace FILE.json      write a Chrome trace of one run (the one closest to the median;\n"
    "                         open it in ui.perfetto.dev or chrome://tracing)\n"
    "  --input NAME=FILE.npy  bind a graph input (repeatable); the others get random values from\n"
    "                         a fixed seed, symbolic dims taken as 1\n"
    "  --seed N               seed for random inputs (default 0)\n"
    "  --tuning FILE          convolution algorithms measured by dlcc tune (records for other\n"
    "                         layers or instruction sets are ignored; default: the cost model)\n"
    "  --math fp32|bf16       bf16: MatMul, Gemm and convolutions run as GEMMs with bfloat16\n"
    "                         operands, float32 sums (AVX512-BF16; faster, less exact; default\n"
    "                         fp32)\n";

int cmd_profile(int argc, char **argv) {
    cli_model_args a = {.warmup = 5};
    const char *trace = NULL, *v;
    int top = 20, rc;
    for (int i = 1; i < argc; i++) {
        if (cli_is_help(argv[i])) {
            fputs(help, stdout);
            return 0;
        } else if ((rc = cli_model_arg(&a, "profile", argc, argv, &i)) >= 0) {
            if (rc) return rc;
        } else if ((v = cli_opt(argc, argv, &i, "--top"))) {
            char *end;
            long k = strtol(v, &end, 10);
            if (end == v || *end || k < 0 || k > 1000000)
                return cli_error("profile: --top: expected a count (0: all), got '%s'", v) + 1;
            top = (int)k;
        } else if ((v = cli_opt(argc, argv, &i, "--trace"))) {
            trace = v;
        } else {
            return cli_error("profile: unknown option '%s' (see dlcc profile --help)", argv[i]) + 1;
        }
    }
    if (!a.model) {
        fputs(help, stderr);
        return 2;
    }
    cli_model m;
    dl_profile pr = {0};
    dl_machine mach;
    rc = 1;
    if (cli_model_open(&m, &a, 0)) goto done;
    if (dl_measure_machine(m.ctx, m.threads, &mach) != DL_OK ||
        dl_profile_program(m.ctx, m.prog, m.n_in, NULL, m.inputs, a.warmup, a.iters, &pr) !=
            DL_OK ||
        dl_profile_print(m.ctx, &pr, m.prog, &mach, top, stdout) != DL_OK) {
        cli_error("%s: %s", a.model, dl_errmsg(m.ctx));
        goto done;
    }
    if (trace && pr.interp_only) {
        cli_error("profile: no steps to trace (the program runs on the reference interpreter)");
        goto done;
    }
    if (trace && dl_profile_write_trace(m.ctx, &pr, m.prog, trace) != DL_OK) {
        cli_error("%s", dl_errmsg(m.ctx));
        goto done;
    }
    if (trace) printf("wrote a Chrome trace of one run to %s\n", trace);
    rc = 0;
done:
    dl_profile_free(&pr);
    cli_model_close(&m);
    return rc;
}
