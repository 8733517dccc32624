/* cmd-compile.c — `dlcc compile MODEL [--report] [--dot FILE] [--dump-ir PASS] [--emit c -o DIR]`. */
#include "cli.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char help[] =
    "usage: dlcc compile MODEL.onnx [--report] [--cold-warm] [--dot FILE] [--dump-ir PASS]\n"
    "                    [--emit c -o DIR] [--input NAME=FILE.npy]... [--threads N] [--no-cache]\n"
    "                    [--tuning FILE] [--math fp32|bf16]\n\n"
    "Optimizes the model and compiles its kernels (through the on-disk cache, $DLCC_CACHE_DIR,\n"
    "default ~/.cache/dlcc).\n"
    "  --report          node counts before/after the passes, kernels by kind, the memory plan\n"
    "                    (arena vs the naive peak) for the input shapes, compile times\n"
    "  --cold-warm       compile twice with a fresh temporary cache: prints the cold and the\n"
    "                    warm (cache hit) compile times\n"
    "  --dot FILE        write the optimized graph with its fusion groups (Graphviz)\n"
    "  --dump-ir PASS    print the IR after graph pass PASS (or 'all') to stderr\n"
    "  --emit c -o DIR   write a standalone C bundle (model.c, model.h, weights, Makefile, main.c)\n"
    "                    that builds with any C11 compiler; symbolic dims take the --input shapes\n"
    "                    (or 1)\n"
    "  --input NAME=FILE.npy  shapes (and values) used for the report and the bundle\n"
    "  --threads N       threads the kernels are scheduled for (default: all cores)\n"
    "  --no-cache        build in a temporary directory\n"
    "  --tuning FILE     convolution algorithms measured by dlcc tune (records for other layers\n"
    "                    or instruction sets are ignored; default: the cost model)\n"
    "  --math fp32|bf16  bf16: MatMul, Gemm and convolutions run as GEMMs with bfloat16\n"
    "                    operands, float32 sums (AVX512-BF16; faster, less exact; default fp32)\n";

#define MAX_INPUTS 256

static int compile_once(dl_ctx *ctx, dl_graph *g, dl_compile_options *co, double *ms,
                        dl_program **out) {
    double t0 = cli_now();
    if (dl_compile(ctx, g, co, out) != DL_OK) return cli_error("%s", dl_errmsg(ctx));
    *ms = (cli_now() - t0) * 1e3;
    return 0;
}

int cmd_compile(int argc, char **argv) {
    const char *model = NULL, *dot = NULL, *dump_ir = NULL, *emit = NULL, *outdir = NULL;
    const char *tuning = NULL;
    const char *in_spec[MAX_INPUTS];
    int n_spec = 0, report = 0, cold_warm = 0, threads = 0, no_cache = 0, math = DL_MATH_FP32;
    for (int i = 1; i < argc; i++) {
        const char *v;
        if (cli_is_help(argv[i])) {
            fputs(help, stdout);
            return 0;
        } else if ((v = cli_opt(argc, argv, &i, "--dot"))) {
            dot = v;
        } else if ((v = cli_opt(argc, argv, &i, "--dump-ir"))) {
            dump_ir = v;
        } else if ((v = cli_opt(argc, argv, &i, "--emit"))) {
            emit = v;
        } else if ((v = cli_opt(argc, argv, &i, "-o"))) {
            outdir = v;
        } else if ((v = cli_opt(argc, argv, &i, "--input"))) {
            if (n_spec == MAX_INPUTS) return cli_error("compile: too many --input options");
            in_spec[n_spec++] = v;
        } else if ((v = cli_opt(argc, argv, &i, "--tuning"))) {
            tuning = v;
        } else if ((v = cli_opt(argc, argv, &i, "--math"))) {
            int rc = cli_math("compile", v, &math);
            if (rc) return rc;
        } else if ((v = cli_opt(argc, argv, &i, "--threads"))) {
            int rc = cli_threads(v, &threads);
            if (rc) return rc;
        } else if (strcmp(argv[i], "--report") == 0) {
            report = 1;
        } else if (strcmp(argv[i], "--cold-warm") == 0) {
            cold_warm = 1;
        } else if (strcmp(argv[i], "--no-cache") == 0) {
            no_cache = 1;
        } else if (argv[i][0] == '-') {
            return cli_error("compile: unknown option '%s' (see dlcc compile --help)", argv[i]) + 1;
        } else if (!model) {
            model = argv[i];
        } else {
            return cli_error("compile: more than one model given") + 1;
        }
    }
    if (!model) {
        fputs(help, stderr);
        return 2;
    }
    if (emit && strcmp(emit, "c") != 0)
        return cli_error("compile: --emit supports 'c' only, got '%s'", emit) + 1;
    if (emit && !outdir) return cli_error("compile: --emit c needs -o DIR") + 1;

    dl_ctx *ctx = dl_ctx_new();
    dl_graph *g = NULL;
    dl_program *prog = NULL;
    dl_tensor **inputs = NULL;
    int rc = 1, n_in = 0;
    char tmp_cache[] = "/tmp/dlcc-cache-XXXXXX";
    bool made_tmp = false;
    if (dl_load_onnx(ctx, model, &g) != DL_OK) {
        cli_error("%s", dl_errmsg(ctx));
        goto done;
    }
    n_in = dl_graph_num_inputs(g);
    inputs = calloc((size_t)n_in + 1, sizeof *inputs);
    if (!inputs) {
        cli_error("out of memory");
        goto done;
    }
    if (cli_bind_inputs(ctx, g, model, n_spec, in_spec, 0, 1, inputs) != 0) goto done;
    dl_compile_options co;
    dl_compile_options_init(&co);
    co.threads = threads;
    co.dump_ir = dump_ir;
    co.no_cache = no_cache;
    co.tuning = tuning;
    co.math = math;
    double ms = 0;
    if (cold_warm) {
        if (!mkdtemp(tmp_cache)) {
            cli_error("compile: cannot create a temporary cache directory");
            goto done;
        }
        made_tmp = true;
        co.cache_dir = tmp_cache;
        double cold, warm;
        if (compile_once(ctx, g, &co, &cold, &prog)) goto done;
        dl_program_free(prog);
        prog = NULL;
        co.dump_ir = NULL;
        if (compile_once(ctx, g, &co, &warm, &prog)) goto done;
        printf("compile: cold %.1f ms, warm (cache hit) %.1f ms\n", cold, warm);
    } else {
        if (compile_once(ctx, g, &co, &ms, &prog)) goto done;
        printf("%s: compiled in %.1f ms\n", model, ms);
    }
    if (report && dl_program_report(ctx, prog, n_in, inputs, stdout) != DL_OK) {
        cli_error("%s", dl_errmsg(ctx));
        goto done;
    }
    if (dot && dl_program_write_dot(ctx, prog, dot) != DL_OK) {
        cli_error("%s", dl_errmsg(ctx));
        goto done;
    }
    if (emit && dl_emit_bundle(ctx, prog, n_in, inputs, outdir) != DL_OK) {
        cli_error("%s", dl_errmsg(ctx));
        goto done;
    }
    if (emit) printf("wrote a C bundle to %s/ (make -C %s)\n", outdir, outdir);
    rc = 0;
done:
    if (made_tmp) {
        char cmd[256];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_cache); /* our own mkdtemp name: no quoting issues */
        if (system(cmd) != 0) fprintf(stderr, "dlcc: warning: could not remove %s\n", tmp_cache);
    }
    for (int i = 0; inputs && i < n_in; i++) dl_tensor_free(inputs[i]);
    free(inputs);
    dl_program_free(prog);
    dl_graph_free(g);
    dl_ctx_free(ctx);
    return rc;
}
