/* cmd-run.c — `dlcc run MODEL [--input NAME=FILE.npy]... [--output-dir DIR] [--backend B] [--check]`. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char help[] =
    "usage: dlcc run MODEL.onnx [--input NAME=FILE.npy]... [--output-dir DIR]\n"
    "                [--backend native|ref] [--check] [--threads N] [--dump-ir PASS]\n"
    "                [--tuning FILE] [--math fp32|bf16] [--seed N] [--quiet]\n\n"
    "Runs the model once and prints a summary of each output.\n"
    "  --input NAME=FILE.npy  bind a graph input to a NumPy .npy file (repeatable). Inputs not\n"
    "                         given are filled with random values from a fixed seed (said so on\n"
    "                         stderr); symbolic dims of such inputs are taken as 1.\n"
    "  --output-dir DIR       write each output to DIR/<output name>.npy (DIR is created)\n"
    "  --backend B            native (compiled; the default) or ref (the reference interpreter)\n"
    "  --check                run native and ref side by side; name the first step whose output\n"
    "                         differs beyond --rtol (default 1e-4) / --atol (default 1e-5;\n"
    "                         with --math bf16, 3e-2 / 1e-3: the reference is float32); atol\n"
    "                         is at least 2e-6 times the value's largest magnitude (bf16: 0.01,\n"
    "                         and 0.1 for a model with convolutions, whose rounding compounds\n"
    "                         over the layers: the check then catches gross errors only)\n"
    "  --threads N            threads for compiled kernels (default: all cores)\n"
    "  --dump-ir PASS         print the IR after graph pass PASS (or 'all') to stderr\n"
    "  --tuning FILE          convolution algorithms measured by dlcc tune (records for other\n"
    "                         layers or instruction sets are ignored; default: the cost model)\n"
    "  --math fp32|bf16       bf16: MatMul, Gemm and convolutions run as GEMMs with bfloat16\n"
    "                         operands, float32 sums (AVX512-BF16; faster, less exact; default\n"
    "                         fp32)\n"
    "  --seed N               seed for random inputs (default 0)\n"
    "  --quiet                print nothing but errors\n";

#define MAX_INPUTS 256

static void summarize(const char *name, dl_tensor *t) {
    char dims[256] = "[";
    size_t used = 1;
    for (int i = 0; i < dl_tensor_rank(t); i++)
        used += (size_t)snprintf(dims + used, sizeof dims - used, "%s%lld", i ? "," : "",
                                 (long long)dl_tensor_dims(t)[i]);
    snprintf(dims + used, sizeof dims - used, "]");
    int64_t n = dl_tensor_numel(t);
    printf("  %s: %s%s", name, dl_dtype_name(dl_tensor_dtype(t)), dims);
    if (dl_tensor_dtype(t) == DL_F32 && n > 0) {
        const float *p = dl_tensor_data(t);
        double mn = p[0], mx = p[0], sum = 0;
        for (int64_t i = 0; i < n; i++) {
            mn = fmin(mn, p[i]);
            mx = fmax(mx, p[i]);
            sum += p[i];
        }
        printf("  min %.6g  max %.6g  mean %.6g  first [", mn, mx, sum / (double)n);
        for (int64_t i = 0; i < n && i < 5; i++) printf("%s%.6g", i ? ", " : "", p[i]);
        printf("%s]", n > 5 ? ", ..." : "");
    }
    printf("\n");
}

/* Output names come from the model: keep [A-Za-z0-9._-], replace the rest. */
static void safe_filename(const char *name, char *buf, size_t n) {
    size_t j = 0;
    for (size_t i = 0; name[i] && j + 1 < n; i++) {
        char c = name[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '.' || c == '_' || c == '-';
        buf[j++] = ok ? c : '_';
    }
    buf[j] = 0;
    if (j == 0 || strcmp(buf, ".") == 0 || strcmp(buf, "..") == 0) snprintf(buf, n, "output");
}

int cmd_run(int argc, char **argv) {
    const char *model = NULL, *outdir = NULL, *backend = "native", *dump_ir = NULL;
    const char *tuning = NULL;
    int check = 0, threads = 0, math = DL_MATH_FP32;
    double rtol = -1, atol = -1; /* defaults below, by --math */
    const char *in_spec[MAX_INPUTS];
    int n_spec = 0, quiet = 0;
    uint64_t seed = 0;
    for (int i = 1; i < argc; i++) {
        const char *v;
        if (cli_is_help(argv[i])) {
            fputs(help, stdout);
            return 0;
        } else if ((v = cli_opt(argc, argv, &i, "--input"))) {
            if (n_spec == MAX_INPUTS) return cli_error("run: too many --input options");
            in_spec[n_spec++] = v;
        } else if ((v = cli_opt(argc, argv, &i, "--output-dir"))) {
            outdir = v;
        } else if ((v = cli_opt(argc, argv, &i, "--backend"))) {
            backend = v;
        } else if ((v = cli_opt(argc, argv, &i, "--dump-ir"))) {
            dump_ir = v;
        } else if ((v = cli_opt(argc, argv, &i, "--threads"))) {
            int rc = cli_threads(v, &threads);
            if (rc) return rc;
        } else if ((v = cli_opt(argc, argv, &i, "--tuning"))) {
            tuning = v;
        } else if ((v = cli_opt(argc, argv, &i, "--math"))) {
            int rc = cli_math("run", v, &math);
            if (rc) return rc;
        } else if ((v = cli_opt(argc, argv, &i, "--rtol"))) {
            rtol = atof(v);
        } else if ((v = cli_opt(argc, argv, &i, "--atol"))) {
            atol = atof(v);
        } else if (strcmp(argv[i], "--check") == 0) {
            check = 1;
        } else if ((v = cli_opt(argc, argv, &i, "--seed"))) {
            seed = strtoull(v, NULL, 10);
        } else if (strcmp(argv[i], "--quiet") == 0) {
            quiet = 1;
        } else if (argv[i][0] == '-') {
            return cli_error("run: unknown option '%s' (see dlcc run --help)", argv[i]) + 1;
        } else if (!model) {
            model = argv[i];
        } else {
            return cli_error("run: more than one model given") + 1;
        }
    }
    if (!model) {
        fputs(help, stderr);
        return 2;
    }
    if (strcmp(backend, "ref") != 0 && strcmp(backend, "native") != 0)
        return cli_error("run: unknown backend '%s' (available: native, ref)", backend) + 1;
    /* bfloat16 products are checked against the float32 reference: their operands keep 8 bits */
    if (rtol < 0) rtol = math == DL_MATH_BF16 ? 3e-2 : 1e-4;
    if (atol < 0) atol = math == DL_MATH_BF16 ? 1e-3 : 1e-5;
    if ((tuning || math != DL_MATH_FP32) && strcmp(backend, "ref") == 0)
        return cli_error("run: %s chooses compiled kernels: it does not apply to --backend ref",
                         tuning ? "--tuning" : "--math") +
               1;

    dl_ctx *ctx = dl_ctx_new();
    dl_graph *g = NULL;
    int rc = 1, n_in = 0;
    dl_tensor **inputs = NULL, **outputs = NULL;
    dl_program *prog = NULL;
    if (dl_load_onnx(ctx, model, &g) != DL_OK) {
        cli_error("%s", dl_errmsg(ctx));
        goto done;
    }
    n_in = dl_graph_num_inputs(g);
    inputs = calloc((size_t)n_in + 1, sizeof *inputs);
    outputs = calloc((size_t)dl_graph_num_outputs(g) + 1, sizeof *outputs);
    if (!inputs || !outputs) {
        cli_error("out of memory");
        goto done;
    }
    if (cli_bind_inputs(ctx, g, model, n_spec, in_spec, seed, quiet, inputs) != 0) goto done;
    dl_compile_options co;
    dl_compile_options_init(&co);
    co.threads = threads;
    co.dump_ir = dump_ir;
    co.tuning = tuning;
    co.math = math;
    if (check) {
        if (dl_check(ctx, g, &co, n_in, NULL, inputs, rtol, atol, stdout) != DL_OK) {
            cli_error("%s: %s", model, dl_errmsg(ctx));
            goto done;
        }
        rc = 0;
        goto done;
    }
    double t0 = cli_now(), tc = 0;
    if (strcmp(backend, "ref") == 0) {
        if (dl_run(ctx, g, DL_BACKEND_REF, n_in, NULL, inputs, outputs) != DL_OK) {
            cli_error("%s: %s", model, dl_errmsg(ctx));
            goto done;
        }
    } else {
        if (dl_compile(ctx, g, &co, &prog) != DL_OK) {
            cli_error("%s: %s", model, dl_errmsg(ctx));
            goto done;
        }
        tc = cli_now();
        if (dl_program_run(ctx, prog, n_in, NULL, inputs, outputs) != DL_OK) {
            cli_error("%s: %s", model, dl_errmsg(ctx));
            goto done;
        }
    }
    double t1 = cli_now();
    if (outdir && mkdir(outdir, 0777) != 0 && errno != EEXIST) {
        cli_error("run: cannot create %s: %s", outdir, strerror(errno));
        goto done;
    }
    if (!quiet && tc > 0)
        printf("%s: compiled in %.1f ms, ran in %.1f ms on backend %s\noutputs:\n", model,
               (tc - t0) * 1e3, (t1 - tc) * 1e3, backend);
    else if (!quiet)
        printf("%s: ran in %.1f ms on backend %s\noutputs:\n", model, (t1 - t0) * 1e3, backend);
    for (int i = 0; i < dl_graph_num_outputs(g); i++) {
        const char *nm = dl_value_name(dl_graph_output(g, i));
        if (!quiet) summarize(nm, outputs[i]);
        if (outdir) {
            char file[256], path[4096];
            safe_filename(nm, file, sizeof file);
            snprintf(path, sizeof path, "%s/%s.npy", outdir, file);
            if (dl_npy_save(ctx, path, outputs[i]) != DL_OK) {
                cli_error("%s", dl_errmsg(ctx));
                goto done;
            }
        }
    }
    if (outdir && !quiet) printf("wrote %d outputs to %s/\n", dl_graph_num_outputs(g), outdir);
    rc = 0;
done:
    for (int i = 0; inputs && i < n_in; i++) dl_tensor_free(inputs[i]);
    for (int i = 0; outputs && g && i < dl_graph_num_outputs(g); i++) dl_tensor_free(outputs[i]);
    free(inputs);
    free(outputs);
    dl_program_free(prog);
    dl_graph_free(g);
    dl_ctx_free(ctx);
    return rc;
}
