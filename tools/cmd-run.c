/* cmd-run.c — `dlcc run MODEL [--input NAME=FILE.npy]... [--output-dir DIR] [--backend ref]`. */
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char help[] =
    "usage: dlcc run MODEL.onnx [--input NAME=FILE.npy]... [--output-dir DIR] [--backend ref]\n"
    "                [--seed N] [--quiet]\n\n"
    "Runs the model once and prints a summary of each output.\n"
    "  --input NAME=FILE.npy  bind a graph input to a NumPy .npy file (repeatable). Inputs not\n"
    "                         given are filled with random values from a fixed seed (said so on\n"
    "                         stderr); symbolic dims of such inputs are taken as 1.\n"
    "  --output-dir DIR       write each output to DIR/<output name>.npy (DIR is created)\n"
    "  --backend ref          execution backend: ref (the reference interpreter; the default)\n"
    "  --seed N               seed for random inputs (default 0)\n"
    "  --quiet                print nothing but errors\n";

#define MAX_INPUTS 256

static uint64_t rng_next(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static dl_status random_input(dl_ctx *ctx, dl_value *v, uint64_t *seed, dl_tensor **out) {
    int rank = dl_value_rank(v);
    if (rank < 0) rank = 0;
    int64_t dims[DL_MAX_RANK];
    for (int i = 0; i < rank; i++) {
        int64_t d = dl_value_dim(v, i);
        dims[i] = d >= 0 ? d : 1;
    }
    dl_dtype dt = dl_value_dtype(v);
    dl_status s = dl_tensor_new(ctx, dt, rank, dims, out);
    if (s != DL_OK) return s;
    void *p = dl_tensor_data(*out);
    int64_t n = dl_tensor_numel(*out);
    for (int64_t i = 0; i < n; i++) {
        uint64_t r = rng_next(seed);
        double u = (double)(r >> 11) / 9007199254740992.0; /* [0,1) */
        switch (dt) {
        case DL_F32: ((float *)p)[i] = (float)(2 * u - 1); break;
        case DL_F64: ((double *)p)[i] = 2 * u - 1; break;
        case DL_I64: ((int64_t *)p)[i] = (int64_t)(r % 10); break;
        case DL_I32: ((int32_t *)p)[i] = (int32_t)(r % 10); break;
        case DL_BOOL: ((uint8_t *)p)[i] = (uint8_t)(r & 1); break;
        case DL_U8: ((uint8_t *)p)[i] = (uint8_t)r; break;
        case DL_I8: ((int8_t *)p)[i] = (int8_t)(r % 10); break;
        default: break; /* zero-filled */
        }
    }
    return DL_OK;
}

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
    const char *model = NULL, *outdir = NULL, *backend = "ref";
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
    if (strcmp(backend, "ref") != 0)
        return cli_error("run: unknown backend '%s' (available: ref)", backend) + 1;

    dl_ctx *ctx = dl_ctx_new();
    dl_graph *g = NULL;
    int rc = 1, n_in = 0;
    dl_tensor **inputs = NULL, **outputs = NULL;
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
    for (int k = 0; k < n_spec; k++) {
        const char *eq = strchr(in_spec[k], '=');
        if (!eq) {
            cli_error("run: --input wants NAME=FILE.npy, got '%s'", in_spec[k]);
            goto done;
        }
        int found = -1;
        for (int i = 0; i < n_in; i++) {
            const char *nm = dl_value_name(dl_graph_input(g, i));
            if (strlen(nm) == (size_t)(eq - in_spec[k]) && strncmp(nm, in_spec[k], (size_t)(eq - in_spec[k])) == 0)
                found = i;
        }
        if (found < 0) {
            cli_error("run: model %s has no input named '%.*s'", model, (int)(eq - in_spec[k]), in_spec[k]);
            goto done;
        }
        dl_tensor_free(inputs[found]);
        if (dl_npy_load(ctx, eq + 1, &inputs[found]) != DL_OK) {
            cli_error("%s", dl_errmsg(ctx));
            goto done;
        }
    }
    const uint64_t seed0 = seed;
    for (int i = 0; i < n_in; i++) {
        if (inputs[i]) continue;
        dl_value *v = dl_graph_input(g, i);
        if (random_input(ctx, v, &seed, &inputs[i]) != DL_OK) {
            cli_error("%s: random value for input '%s': %s", model, dl_value_name(v), dl_errmsg(ctx));
            goto done;
        }
        if (!quiet)
            fprintf(stderr, "dlcc: no --input for '%s': using random %s values (seed %llu)\n",
                    dl_value_name(v), dl_dtype_name(dl_value_dtype(v)), (unsigned long long)seed0);
    }
    double t0 = cli_now();
    if (dl_run(ctx, g, DL_BACKEND_REF, n_in, NULL, inputs, outputs) != DL_OK) {
        cli_error("%s: %s", model, dl_errmsg(ctx));
        goto done;
    }
    double t1 = cli_now();
    if (outdir && mkdir(outdir, 0777) != 0 && errno != EEXIST) {
        cli_error("run: cannot create %s: %s", outdir, strerror(errno));
        goto done;
    }
    if (!quiet) printf("%s: ran in %.1f ms on backend %s\noutputs:\n", model, (t1 - t0) * 1e3, backend);
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
    dl_graph_free(g);
    dl_ctx_free(ctx);
    return rc;
}
