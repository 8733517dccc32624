/* cmd-onnx-test.c — `dlcc onnx-test [--backend B] PATH...`: runs ONNX backend test cases (a folder
 * with model.onnx and test_data_set_N/{input,output}_M.pb) and compares outputs with the suite's
 * tolerances. Each case runs in a child process so a crash or hang is reported, not fatal. */
#include "cli.h"
#include "../src/frontend/onnx-impl.h"

#include <dirent.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static const char help[] =
    "usage: dlcc onnx-test [--backend native|ref] [--rtol R] [--atol A] [--timeout S]\n"
    "                      [--expect FILE] [--write-passing FILE] [--threads N] [--quiet]\n"
    "                      PATH...\n\n"
    "Runs ONNX backend test cases. PATH is one case (a folder holding model.onnx and\n"
    "test_data_set_*/) or a folder of cases. Prints PASS, FAIL (with the worst mismatch) or\n"
    "UNSUPPORTED (with the reason) per case, then 'N passed, N failed' (unsupported counts as\n"
    "failed). Tolerances default to the ONNX suite's: rtol 1e-3, atol 1e-7.\n"
    "  --backend B            native (compiled; the default) or ref (the reference interpreter)\n"
    "  --expect FILE          exit non-zero only if a case listed in FILE does not pass\n"
    "                         (a regression); otherwise exit non-zero if any case fails\n"
    "  --write-passing FILE   write the names of passing cases to FILE\n"
    "  --timeout S            seconds per case before it counts as failed (default 120)\n"
    "  --threads N            threads for compiled kernels (default: all cores)\n"
    "  --quiet                print only failures and the summary\n";

enum { CASE_PASS = 0, CASE_FAIL = 1, CASE_UNSUPPORTED = 2 };

typedef struct opts {
    double rtol, atol;
    int timeout;
    int quiet;
    int threads; /* 0: the compiler's default */
    dl_backend backend;
} opts;

static bool is_case_dir(const char *path) {
    char p[PATH_MAX];
    struct stat st;
    snprintf(p, sizeof p, "%s/model.onnx", path);
    return stat(p, &st) == 0;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sorted list of entries of dir whose name starts with prefix. */
static int list_dir(const char *dir, const char *prefix, char ***out) {
    DIR *d = opendir(dir);
    *out = NULL;
    if (!d) return 0;
    int n = 0, cap = 0;
    char **names = NULL;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || strncmp(e->d_name, prefix, strlen(prefix)) != 0) continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            char **nn = realloc(names, sizeof *names * (size_t)cap);
            if (!nn) break;
            names = nn;
        }
        names[n++] = strdup(e->d_name);
    }
    closedir(d);
    if (n) qsort(names, (size_t)n, sizeof *names, cmp_str);
    *out = names;
    return n;
}

static void free_list(char **l, int n) {
    for (int i = 0; i < n; i++) free(l[i]);
    free(l);
}

/* Numbered files input_0.pb, input_1.pb ... in order. */
static int count_numbered(const char *dir, const char *stem) {
    int n = 0;
    for (;; n++) {
        char p[PATH_MAX];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s_%d.pb", dir, stem, n);
        if (stat(p, &st) != 0) return n;
    }
}

static bool close_enough(double got, double want, const opts *o) {
    if (isnan(want)) return isnan(got);
    if (isinf(want)) return got == want;
    return fabs(got - want) <= o->atol + o->rtol * fabs(want);
}

/* Returns true when equal; otherwise writes the worst mismatch into why. */
static bool compare(const dl_tensor *got, const dl_tensor *want, const opts *o, char *why, size_t n) {
    char a[256], b[256];
    if (got->dtype != want->dtype || got->rank != want->rank ||
        memcmp(got->dims, want->dims, sizeof(int64_t) * (size_t)got->rank) != 0) {
        snprintf(why, n, "got %s, expected %s", dl_tensor_desc(got, a, sizeof a),
                 dl_tensor_desc(want, b, sizeof b));
        return false;
    }
    bool fl = dl_dtype_is_float(want->dtype);
    int64_t worst = -1, bad = 0;
    double worst_err = -1;
    for (int64_t i = 0; i < want->numel; i++) {
        bool ok;
        double err;
        if (fl) {
            double g = dl_get_f64(got, i), w = dl_get_f64(want, i);
            ok = close_enough(g, w, o);
            err = (isnan(g) || isnan(w) || isinf(g) || isinf(w)) ? INFINITY : fabs(g - w);
        } else if (want->dtype == DL_U64) {
            uint64_t g = ((const uint64_t *)got->data)[i], w = ((const uint64_t *)want->data)[i];
            ok = g == w;
            err = ok ? 0 : 1;
        } else {
            int64_t g = dl_get_i64(got, i), w = dl_get_i64(want, i);
            ok = g == w;
            err = ok ? 0 : fabs((double)g - (double)w);
        }
        if (!ok) {
            bad++;
            if (err > worst_err) worst_err = err, worst = i;
        }
    }
    if (!bad) return true;
    snprintf(why, n, "%lld of %lld values differ; worst at %lld: got %.9g, expected %.9g",
             (long long)bad, (long long)want->numel, (long long)worst, dl_get_f64(got, worst),
             dl_get_f64(want, worst));
    return false;
}

/* dl_run, with --threads applied to the native backend. */
static dl_status run_graph(dl_ctx *ctx, dl_graph *g, const opts *o, int nin, dl_tensor **in,
                           dl_tensor **got) {
    if (o->backend != DL_BACKEND_NATIVE || o->threads <= 0)
        return dl_run(ctx, g, o->backend, nin, NULL, in, got);
    dl_compile_options co;
    dl_compile_options_init(&co);
    co.threads = o->threads;
    dl_program *p;
    dl_status s = dl_compile(ctx, g, &co, &p);
    if (s == DL_OK) {
        s = dl_program_run(ctx, p, nin, NULL, in, got);
        dl_program_free(p);
    }
    return s;
}

/* Runs one case in this process; prints nothing; returns status and a reason. */
static int run_case(const char *dir, const opts *o, char *why, size_t n) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    dl_ctx *ctx = dl_ctx_new();
    dl_graph *g = NULL;
    int result = CASE_PASS;
    if (dl_load_onnx(ctx, path, &g) != DL_OK) {
        result = ctx->status == DL_ERR_UNSUPPORTED ? CASE_UNSUPPORTED : CASE_FAIL;
        snprintf(why, n, "%s", dl_errmsg(ctx));
        dl_ctx_free(ctx);
        return result;
    }
    char **sets;
    int nsets = list_dir(dir, "test_data_set_", &sets);
    if (nsets == 0) {
        snprintf(why, n, "no test_data_set_* folders");
        result = CASE_FAIL;
    }
    for (int k = 0; k < nsets && result == CASE_PASS; k++) {
        char sdir[PATH_MAX];
        snprintf(sdir, sizeof sdir, "%s/%s", dir, sets[k]);
        int nin = count_numbered(sdir, "input"), nout = count_numbered(sdir, "output");
        dl_tensor **in = calloc((size_t)nin + 1, sizeof *in);
        dl_tensor **want = calloc((size_t)nout + 1, sizeof *want);
        dl_tensor **got = calloc((size_t)dl_graph_num_outputs(g) + 1, sizeof *got);
        for (int i = 0; i < nin && result == CASE_PASS; i++) {
            snprintf(path, sizeof path, "%s/input_%d.pb", sdir, i);
            if (dl_onnx_load_tensor_file(ctx, path, &in[i], NULL) != DL_OK) {
                result = ctx->status == DL_ERR_UNSUPPORTED ? CASE_UNSUPPORTED : CASE_FAIL;
                snprintf(why, n, "%s", dl_errmsg(ctx));
            }
        }
        for (int i = 0; i < nout && result == CASE_PASS; i++) {
            snprintf(path, sizeof path, "%s/output_%d.pb", sdir, i);
            if (dl_onnx_load_tensor_file(ctx, path, &want[i], NULL) != DL_OK) {
                result = ctx->status == DL_ERR_UNSUPPORTED ? CASE_UNSUPPORTED : CASE_FAIL;
                snprintf(why, n, "%s", dl_errmsg(ctx));
            }
        }
        /* onnx 1.12 wrote bfloat16 test tensors as uint16 bit patterns: relabel them */
        for (int i = 0; i < nin && i < dl_graph_num_inputs(g) && result == CASE_PASS; i++)
            if (in[i]->dtype == DL_U16 && dl_value_dtype(dl_graph_input(g, i)) == DL_BF16)
                in[i]->dtype = DL_BF16;
        for (int i = 0; i < nout && i < dl_graph_num_outputs(g) && result == CASE_PASS; i++)
            if (want[i]->dtype == DL_U16 && dl_value_dtype(dl_graph_output(g, i)) == DL_BF16)
                want[i]->dtype = DL_BF16;
        if (result == CASE_PASS && nout != dl_graph_num_outputs(g)) {
            snprintf(why, n, "%d expected outputs but the model has %d", nout, dl_graph_num_outputs(g));
            result = CASE_FAIL;
        }
        if (result == CASE_PASS && run_graph(ctx, g, o, nin, in, got) != DL_OK) {
            result = ctx->status == DL_ERR_UNSUPPORTED ? CASE_UNSUPPORTED : CASE_FAIL;
            snprintf(why, n, "%s", dl_errmsg(ctx));
        }
        for (int i = 0; i < nout && result == CASE_PASS; i++) {
            char w[512];
            if (!compare(got[i], want[i], o, w, sizeof w)) {
                snprintf(why, n, "%s output %d '%s': %s", sets[k], i,
                         dl_value_name(dl_graph_output(g, i)), w);
                result = CASE_FAIL;
            }
        }
        for (int i = 0; i < nin; i++) dl_tensor_free(in[i]);
        for (int i = 0; i < nout; i++) dl_tensor_free(want[i]);
        for (int i = 0; got && i < dl_graph_num_outputs(g); i++) dl_tensor_free(got[i]);
        free(in);
        free(want);
        free(got);
    }
    free_list(sets, nsets);
    dl_graph_free(g);
    dl_ctx_free(ctx);
    return result;
}

/* Forks so that a crash, abort or hang in one case is a reported failure. */
static int run_case_isolated(const char *dir, const opts *o, char *why, size_t n) {
    int fds[2];
    if (pipe(fds) != 0) return run_case(dir, o, why, n);
    fflush(NULL); /* the child exits through exit(): no buffered output may be written twice */
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return run_case(dir, o, why, n);
    }
    if (pid == 0) {
        close(fds[0]);
        alarm((unsigned)o->timeout);
        char msg[2048] = "";
        int r = run_case(dir, o, msg, sizeof msg);
        ssize_t w = write(fds[1], msg, strlen(msg));
        (void)w;
        close(fds[1]);
        exit(r); /* not _exit: LeakSanitizer checks at exit in sanitized builds */
    }
    close(fds[1]);
    size_t got = 0;
    ssize_t r;
    while (got + 1 < n && (r = read(fds[0], why + got, n - 1 - got)) > 0) got += (size_t)r;
    why[got] = 0;
    close(fds[0]);
    int st;
    waitpid(pid, &st, 0);
    if (WIFEXITED(st) && WEXITSTATUS(st) <= CASE_UNSUPPORTED) return WEXITSTATUS(st);
    if (WIFSIGNALED(st))
        snprintf(why, n, "%s (signal %d: %s)", WTERMSIG(st) == SIGALRM ? "timed out" : "CRASHED",
                 WTERMSIG(st), strsignal(WTERMSIG(st)));
    else
        snprintf(why, n, "CRASHED (exit status %d)", WEXITSTATUS(st));
    return CASE_FAIL;
}

static char **read_lines(const char *path, int *n) {
    *n = 0;
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    char **lines = NULL, buf[1024];
    int cap = 0;
    while (fgets(buf, sizeof buf, f)) {
        buf[strcspn(buf, "\r\n")] = 0;
        if (!buf[0] || buf[0] == '#') continue;
        if (*n == cap) {
            cap = cap ? cap * 2 : 256;
            char **nl = realloc(lines, sizeof *lines * (size_t)cap);
            if (!nl) break;
            lines = nl;
        }
        lines[(*n)++] = strdup(buf);
    }
    fclose(f);
    return lines;
}

int cmd_onnx_test(int argc, char **argv) {
    opts o = {.rtol = 1e-3, .atol = 1e-7, .timeout = 120, .backend = DL_BACKEND_NATIVE};
    const char *expect = NULL, *write_passing = NULL;
    char **paths = calloc((size_t)argc, sizeof *paths);
    int npaths = 0;
    for (int i = 1; i < argc; i++) {
        const char *v;
        if (cli_is_help(argv[i])) {
            fputs(help, stdout);
            free(paths);
            return 0;
        } else if ((v = cli_opt(argc, argv, &i, "--backend"))) {
            if (strcmp(v, "ref") != 0 && strcmp(v, "native") != 0) {
                free(paths);
                return cli_error("onnx-test: unknown backend '%s' (available: native, ref)", v) + 1;
            }
            o.backend = strcmp(v, "ref") == 0 ? DL_BACKEND_REF : DL_BACKEND_NATIVE;
        } else if ((v = cli_opt(argc, argv, &i, "--rtol"))) {
            o.rtol = atof(v);
        } else if ((v = cli_opt(argc, argv, &i, "--atol"))) {
            o.atol = atof(v);
        } else if ((v = cli_opt(argc, argv, &i, "--timeout"))) {
            o.timeout = atoi(v) > 0 ? atoi(v) : 120;
        } else if ((v = cli_opt(argc, argv, &i, "--threads"))) {
            int rc = cli_threads(v, &o.threads);
            if (rc) {
                free(paths);
                return rc;
            }
        } else if ((v = cli_opt(argc, argv, &i, "--expect"))) {
            expect = v;
        } else if ((v = cli_opt(argc, argv, &i, "--write-passing"))) {
            write_passing = v;
        } else if (strcmp(argv[i], "--quiet") == 0) {
            o.quiet = 1;
        } else if (argv[i][0] == '-') {
            free(paths);
            return cli_error("onnx-test: unknown option '%s'", argv[i]) + 1;
        } else {
            paths[npaths++] = argv[i];
        }
    }
    if (!npaths) {
        free(paths);
        fputs(help, stderr);
        return 2;
    }
    /* expand folders of cases */
    int ncases = 0, cap = 0;
    char **cases = NULL;
    for (int i = 0; i < npaths; i++) {
        char **sub = NULL;
        int nsub = 0;
        size_t plen = strlen(paths[i]);
        while (plen > 1 && paths[i][plen - 1] == '/') paths[i][--plen] = 0; /* "case/" names "case" */
        if (is_case_dir(paths[i])) {
            sub = malloc(sizeof *sub);
            sub[0] = strdup(paths[i]);
            nsub = 1;
        } else {
            char **names;
            int nn = list_dir(paths[i], "", &names);
            sub = calloc((size_t)nn + 1, sizeof *sub);
            for (int k = 0; k < nn; k++) {
                char p[PATH_MAX];
                snprintf(p, sizeof p, "%s/%s", paths[i], names[k]);
                if (is_case_dir(p)) sub[nsub++] = strdup(p);
            }
            free_list(names, nn);
            if (nsub == 0) fprintf(stderr, "dlcc: warning: %s holds no test cases\n", paths[i]);
        }
        for (int k = 0; k < nsub; k++) {
            if (ncases == cap) {
                cap = cap ? cap * 2 : 256;
                cases = realloc(cases, sizeof *cases * (size_t)cap);
            }
            cases[ncases++] = sub[k];
        }
        free(sub);
    }
    if (ncases == 0) {
        free(cases);
        free(paths);
        return cli_error("onnx-test: no test cases found (a case is a folder holding model.onnx)");
    }
    int nexp = 0;
    char **expected = expect ? read_lines(expect, &nexp) : NULL;
    if (expect && !expected) fprintf(stderr, "dlcc: warning: cannot read %s\n", expect);
    FILE *pf = write_passing ? fopen(write_passing, "w") : NULL;
    int passed = 0, failed = 0, unsupported = 0, regressions = 0;
    for (int i = 0; i < ncases; i++) {
        const char *name = strrchr(cases[i], '/') ? strrchr(cases[i], '/') + 1 : cases[i];
        char why[2048] = "";
        int r = run_case_isolated(cases[i], &o, why, sizeof why);
        bool was_expected = false;
        for (int k = 0; k < nexp; k++)
            if (strcmp(expected[k], name) == 0) was_expected = true;
        if (r == CASE_PASS) {
            passed++;
            if (!o.quiet) printf("PASS %s\n", name);
            if (pf) fprintf(pf, "%s\n", name);
        } else {
            if (r == CASE_UNSUPPORTED) unsupported++;
            else failed++;
            if (was_expected) regressions++;
            printf("%s %s: %s%s\n", r == CASE_UNSUPPORTED ? "UNSUPPORTED" : "FAIL", name, why,
                   was_expected ? "  [REGRESSION: this case passed before]" : "");
        }
        fflush(stdout);
    }
    if (pf) fclose(pf);
    if (expect) printf("%d regressions against %s (%d cases listed)\n", regressions, expect, nexp);
    printf("%d unsupported\n", unsupported);
    printf("%d passed, %d failed\n", passed, failed + unsupported);
    free_list(cases, ncases);
    free_list(expected, nexp);
    free(paths);
    if (expect) return regressions ? 1 : 0;
    return (failed + unsupported) ? 1 : 0;
}
