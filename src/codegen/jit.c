/* jit.c — builds generated C into a shared object with the system C compiler and loads it.
 *
 * The compiler runs through posix_spawn with an argument vector (never a shell), so nothing in
 * CC, the flags or the sources is ever interpreted as shell syntax; CC and the flags are split
 * on whitespace (no quoting). Every compiler invocation of one build is started before any is
 * waited for, so the per-model source and the runtime sources compile in parallel.
 *
 * Sources whose name ends in ".h" are written next to the others for #include and never
 * compiled on their own; they enter the key of every object. Shared sources (the runtime
 * kernels) become <key>.o entries of the cache, reused by every model on this machine. The
 * key hashes the format version, the compiler (CC words, resolved path, `--version` output),
 * the final flags, the CPU's features and every source's name and text (cache.h has the
 * layout). */
#define _GNU_SOURCE /* pipe2 */
#include "cache.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

extern char **environ;

#define JIT_FORMAT      "dlcc-jit 1" /* bump when the fixed flags or the way keys are made change */
#define JIT_MAX_WORDS   96           /* words of CC or of the flags */
#define JIT_VERSION_MAX 2048
#define JIT_MAX_SOURCES 256
#define JIT_NAME_MAX    100
#define JIT_CC_SLOTS    8

struct dl_jit_lib {
    void *handle;
};

/* ---- the compiler, probed once per process ---- */

typedef struct jit_cc {
    char spec[512];                /* CC as given: program and extra words */
    bool runs;                     /* `CC --version` exited with 0 */
    char path[1024];               /* the program, resolved through PATH */
    char version[JIT_VERSION_MAX]; /* its --version output */
    int threads;  /* -pthread builds a pthread program: 1, not: 0, not probed yet: -1 */
    int omp_simd; /* -fopenmp-simd accepted (the `omp simd` pragmas): 1, 0, -1 */
    int vecmath;  /* index in vecmath_libs + 1, 0 none, -1 not probed yet */
} jit_cc;

/* Vector math: libraries implementing the GNU vector function ABI (_ZGVeN16v_expf...), so loops
 * calling expf/tanhf... vectorize (src/kernels/rt/vecmath.h declares them; Erf is the runtime's
 * own polynomial, dlrt_erf, which needs neither). glibc's libmvec
 * first: on a Zen 5 its AVX-512 erff/tanhf ran 3.5x/4.7x faster than Debian's SLEEF 3.5
 * libsleefgnuabi (0.17 vs 0.59 ms and 0.08 vs 0.39 ms for 393216 values; expf equal), else SLEEF
 * (C libraries other than glibc). */
static const char *const vecmath_libs[] = {"-lmvec", "-lsleefgnuabi"};

static jit_cc cc_slots[JIT_CC_SLOTS];
static int cc_used;
static pthread_mutex_t cc_lock = PTHREAD_MUTEX_INITIALIZER;

/* Splits s in place on whitespace; -1 when there are more than max words. */
static int split_words(char *s, const char **words, int max) {
    int n = 0;
    for (char *p = s; *p;) {
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') *p++ = 0;
        if (!*p) break;
        if (n == max) return -1;
        words[n++] = p;
        while (*p && *p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') p++;
    }
    return n;
}

/* dir/name, with dir made absolute first (compilers run in the build folder). */
static bool absolute_path(const char *path, char *out, size_t n) {
    char cwd[1024];
    if (path[0] == '/') return (size_t)snprintf(out, n, "%s", path) < n;
    if (!getcwd(cwd, sizeof cwd)) return false;
    return (size_t)snprintf(out, n, "%s/%s", cwd, path) < n;
}

static bool resolve_program(const char *prog, char *out, size_t n) {
    if (strchr(prog, '/')) return absolute_path(prog, out, n) && access(out, X_OK) == 0;
    const char *path = getenv("PATH");
    if (!path || !*path) path = "/usr/local/bin:/usr/bin:/bin";
    for (const char *p = path; *p;) {
        const char *end = strchr(p, ':');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len > 0 && (size_t)snprintf(out, n, "%.*s/%s", (int)len, p, prog) < n) {
            struct stat st;
            if (stat(out, &st) == 0 && S_ISREG(st.st_mode) && access(out, X_OK) == 0) return true;
        }
        p += len + (end ? 1 : 0);
    }
    return false;
}

static void wait_child(pid_t pid, int *status) {
    while (waitpid(pid, status, 0) < 0) {
        if (errno != EINTR) {
            *status = -1;
            return;
        }
    }
}

static bool exited_ok(int status) {
    return status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/* Runs argv (argv[0] a path) with stdin from /dev/null and stdout+stderr into out (truncated).
 * Returns the wait status, -1 when it could not run. */
static int run_capture(char *const argv[], char *out, size_t cap) {
    int p[2];
    out[0] = 0;
    if (pipe2(p, O_CLOEXEC) != 0) return -1;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, p[1], 1);
    posix_spawn_file_actions_adddup2(&fa, p[1], 2);
    pid_t pid;
    int err = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(p[1]);
    if (err != 0) {
        close(p[0]);
        return -1;
    }
    size_t len = 0;
    char sink[512];
    for (;;) { /* read to the end so the child never blocks on a full pipe */
        char *dst = len + 1 < cap ? out + len : sink;
        size_t room = len + 1 < cap ? cap - 1 - len : sizeof sink;
        ssize_t got = read(p[0], dst, room);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) break;
        if (dst != sink) len += (size_t)got;
    }
    out[len] = 0;
    close(p[0]);
    int status;
    wait_child(pid, &status);
    return status;
}

/* The slot of a CC spec, probed with --version on first use. Called with cc_lock held. */
static jit_cc *cc_lookup(const char *spec) {
    for (int i = 0; i < cc_used; i++)
        if (strcmp(cc_slots[i].spec, spec) == 0) return &cc_slots[i];
    static jit_cc spare; /* probe results for specs past the table are not remembered */
    jit_cc *c = cc_used < JIT_CC_SLOTS ? &cc_slots[cc_used++] : &spare;
    memset(c, 0, sizeof *c);
    c->threads = -1;
    c->omp_simd = -1;
    c->vecmath = -1;
    snprintf(c->spec, sizeof c->spec, "%s", spec);
    char copy[sizeof c->spec];
    const char *words[JIT_MAX_WORDS + 2];
    snprintf(copy, sizeof copy, "%s", spec);
    int nw = split_words(copy, words, JIT_MAX_WORDS);
    if (nw <= 0 || strlen(spec) >= sizeof c->spec ||
        !resolve_program(words[0], c->path, sizeof c->path))
        return c;
    words[0] = c->path;
    words[nw] = "--version";
    words[nw + 1] = NULL;
    c->runs = exited_ok(run_capture((char *const *)words, c->version, sizeof c->version));
    return c;
}

static const char *cc_spec(const dl_jit_opts *o) {
    const char *cc = o && o->cc && *o->cc ? o->cc : getenv("CC");
    return cc && *cc ? cc : "cc";
}

bool dl_jit_available(const dl_jit_opts *o) {
    pthread_mutex_lock(&cc_lock);
    bool runs = cc_lookup(cc_spec(o))->runs;
    pthread_mutex_unlock(&cc_lock);
    return runs;
}

/* ---- CPU features (part of the key: -march=native code differs per CPU) ---- */

static char cpu_features[4096];
static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;

static void read_cpu_features(void) {
    struct utsname u;
    size_t len = 0;
    if (uname(&u) == 0) len = (size_t)snprintf(cpu_features, sizeof cpu_features, "%s;", u.machine);
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[4096];
    bool found = false;
    while (f && !found && fgets(line, sizeof line, f)) {
        if (strncmp(line, "flags", 5) == 0 || strncmp(line, "Features", 8) == 0) {
            snprintf(cpu_features + len, sizeof cpu_features - len, "%s", line);
            found = true;
        }
    }
    if (f) fclose(f);
#if defined(__x86_64__) || defined(__i386__)
    if (!found) { /* no /proc: ask the CPU about what -march=native would use most */
        __builtin_cpu_init();
        snprintf(cpu_features + len, sizeof cpu_features - len,
                 "sse4.2=%d avx=%d avx2=%d fma=%d avx512f=%d avx512bw=%d avx512vl=%d",
                 __builtin_cpu_supports("sse4.2") != 0, __builtin_cpu_supports("avx") != 0,
                 __builtin_cpu_supports("avx2") != 0, __builtin_cpu_supports("fma") != 0,
                 __builtin_cpu_supports("avx512f") != 0, __builtin_cpu_supports("avx512bw") != 0,
                 __builtin_cpu_supports("avx512vl") != 0);
    }
#endif
}

/* ---- the build's settings ---- */

typedef struct jit_cfg {
    jit_cc cc; /* a copy of the probed compiler */
    char cc_copy[512];
    const char *cc_words[JIT_MAX_WORDS + 1];
    int n_cc; /* cc_words[0] is the resolved program */
    char *flag_copy;
    const char *flags[JIT_MAX_WORDS];
    int n_flags;
    bool verbose;
    char cache[1024]; /* "" when building without the cache */
} jit_cfg;

static void hex128(XXH128_hash_t h, char out[DL_CACHE_KEY_HEX + 1]) {
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, h);
    for (int i = 0; i < 16; i++) snprintf(out + 2 * i, 3, "%02x", c.digest[i]);
}

static void key_str(XXH3_state_t *st, const char *s) {
    uint64_t n = strlen(s);
    XXH3_128bits_update(st, &n, sizeof n); /* length first: ("ab","c") != ("a","bc") */
    XXH3_128bits_update(st, s, n);
}

static void key_compiler(XXH3_state_t *st, const jit_cfg *c) {
    key_str(st, JIT_FORMAT);
    key_str(st, c->cc.spec);
    key_str(st, c->cc.path);
    key_str(st, c->cc.version);
    key_str(st, cpu_features);
    for (int i = 0; i < c->n_flags; i++) key_str(st, c->flags[i]);
    key_str(st, c->cc.threads == 1 ? "-pthread" : "no-threads");
    key_str(st, c->cc.omp_simd == 1 ? "-fopenmp-simd" : "no-omp-simd");
    key_str(st, c->cc.vecmath > 0 ? vecmath_libs[c->cc.vecmath - 1] : "no-vecmath");
}

static bool is_header(const dl_jit_src *s) {
    size_t n = strlen(s->name);
    return n >= 2 && strcmp(s->name + n - 2, ".h") == 0;
}

/* The key of a whole build (kind "so") or of one shared source's object (kind "o"). */
static void make_key(const jit_cfg *c, const char *kind, int n, const dl_jit_src *srcs,
                     const dl_jit_src *only, char out[DL_CACHE_KEY_HEX + 1]) {
    XXH3_state_t st;
    XXH3_128bits_reset(&st);
    key_compiler(&st, c);
    key_str(&st, kind);
    for (int i = 0; i < n; i++) {
        if (only && &srcs[i] != only && !is_header(&srcs[i])) continue;
        key_str(&st, srcs[i].name);
        key_str(&st, srcs[i].shared ? "shared" : "model");
        key_str(&st, srcs[i].text);
    }
    hex128(XXH3_128bits_digest(&st), out);
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/* ---- running the compiler ---- */

typedef struct jit_job {
    const dl_jit_src *src;
    char obj[1100]; /* the object to link */
    char log[1100];
    char key[DL_CACHE_KEY_HEX + 1]; /* shared sources: the object's cache key */
    bool from_cache;
    pid_t pid;
    int status, spawn_err;
} jit_job;

static void print_command(const char *const *argv) {
    fputs("dlcc: jit:", stderr);
    for (int i = 0; argv[i]; i++) fprintf(stderr, " %s", argv[i]);
    fputc('\n', stderr);
}

#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 29))
#define JIT_HAVE_ADDCHDIR 1 /* compilers then run in the build folder and name sources briefly */
#endif

/* Starts argv (in folder cwd when not NULL and supported) with stdout and stderr into log;
 * sets the job's pid, or spawn_err. */
static void spawn_logged(const jit_cfg *c, const char *const *argv, const char *cwd, jit_job *job) {
    if (c->verbose) print_command(argv);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
#ifdef JIT_HAVE_ADDCHDIR
    if (cwd) posix_spawn_file_actions_addchdir_np(&fa, cwd);
#else
    DL_UNUSED(cwd);
#endif
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, job->log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    job->spawn_err = posix_spawn(&job->pid, argv[0], &fa, NULL, (char *const *)argv, environ);
    posix_spawn_file_actions_destroy(&fa);
}

/* "what failed (status): first lines of the log" as one line. */
static dl_status job_failure(dl_ctx *ctx, const jit_job *job, const char *what, const char *dir) {
    if (job->spawn_err)
        return dl_fail(ctx, DL_ERR_INTERNAL, "JIT: cannot run the C compiler for %s: %s", what,
                       strerror(job->spawn_err));
    char text[700] = "";
    FILE *f = fopen(job->log, "r");
    if (f) {
        size_t got = fread(text, 1, sizeof text - 1, f);
        text[got] = 0;
        fclose(f);
    }
    char brief[800]; /* the first lines, joined with " / " onto one line */
    size_t k = 0;
    int lines = 0;
    for (const char *p = text; *p && k + 4 < sizeof brief && lines < 6; p++) {
        if (*p != '\n') {
            brief[k++] = *p;
        } else if (p[1] && ++lines < 6) {
            memcpy(brief + k, " / ", 3);
            k += 3;
        }
    }
    brief[k] = 0;
    char code[48];
    if (job->status != -1 && WIFEXITED(job->status))
        snprintf(code, sizeof code, "exit status %d", WEXITSTATUS(job->status));
    else if (job->status != -1 && WIFSIGNALED(job->status))
        snprintf(code, sizeof code, "signal %d", WTERMSIG(job->status));
    else
        snprintf(code, sizeof code, "no status");
    return dl_fail(ctx, DL_ERR_INTERNAL, "JIT: %s failed (%s; sources and logs kept in %s): %s",
                   what, code, dir, brief[0] ? brief : "(no compiler output)");
}

/* Words common to compiling and linking: CC, -std/-fPIC, -pthread -DDLRT_THREADS (the runtime's
 * thread pool, threads.c) and -fopenmp-simd where the compiler takes them, then the user's flags
 * (last, so they can override ours). Returns the count. */
static int base_words(const jit_cfg *c, const char **argv) {
    int k = 0;
    for (int i = 0; i < c->n_cc; i++) argv[k++] = c->cc_words[i];
    argv[k++] = "-std=c11";
    argv[k++] = "-fPIC";
    if (c->cc.threads == 1) {
        argv[k++] = "-pthread";
        argv[k++] = "-DDLRT_THREADS=1";
    }
    if (c->cc.omp_simd == 1) argv[k++] = "-fopenmp-simd";
    /* errno is never read; without this gcc will not call vector variants of math functions */
    argv[k++] = "-fno-math-errno";
    if (c->cc.vecmath > 0) argv[k++] = "-DDLRT_VECMATH=1";
    for (int i = 0; i < c->n_flags; i++) argv[k++] = c->flags[i];
    return k;
}

/* Whether `CC <flag> probe.c -shared` builds: remembered per process and in the cache folder
 * (under a key naming the probe and the compiler). Runs in a scratch folder; failing to probe
 * means no. */
static int probe_build(const jit_cfg *c, const char *what, const char *src_text, const char *flag,
                       bool flag_last) {
    char pkey[DL_CACHE_KEY_HEX + 1];
    XXH3_state_t st;
    XXH3_128bits_reset(&st);
    key_str(&st, what);
    key_str(&st, c->cc.spec);
    key_str(&st, c->cc.path);
    key_str(&st, c->cc.version);
    hex128(XXH3_128bits_digest(&st), pkey);
    int known = -1;
    if (c->cache[0] && dl_cache_probe_get(c->cache, pkey, &known)) return known != 0;
    char dir[1100];
    dl_ctx *quiet = dl_ctx_new(); /* a failed probe is an answer, not an error */
    known = 0;
    if (quiet &&
        dl_build_dir_make(quiet, c->cache[0] ? c->cache : NULL, dir, sizeof dir) == DL_OK) {
        jit_job job = {0};
        char src[1200], so[1200];
        snprintf(src, sizeof src, "%s/probe.c", dir);
        snprintf(so, sizeof so, "%s/probe.so", dir);
        snprintf(job.log, sizeof job.log, "%s/probe.log", dir);
        if (dl_write_text(quiet, src, src_text) == DL_OK) {
            const char *argv[JIT_MAX_WORDS + 8];
            int k = 0;
            for (int i = 0; i < c->n_cc; i++) argv[k++] = c->cc_words[i];
            if (!flag_last) argv[k++] = flag;
            const char *tail[] = {"-fPIC", "-shared", src, "-o", so, flag_last ? flag : NULL, NULL};
            memcpy(argv + k, tail, sizeof tail);
            spawn_logged(c, argv, NULL, &job);
            if (job.spawn_err == 0) wait_child(job.pid, &job.status);
            known = job.spawn_err == 0 && exited_ok(job.status);
        }
        dl_build_dir_remove(dir);
        if (c->cache[0]) dl_cache_probe_put(c->cache, pkey, known);
    }
    dl_ctx_free(quiet);
    return known;
}

/* Probes threads, `omp simd` and the vector-math libraries once per compiler. */
static void probe_features(jit_cfg *c) {
    pthread_mutex_lock(&cc_lock);
    jit_cc *slot = cc_lookup(c->cc.spec);
    int threads = slot->threads, omp_simd = slot->omp_simd, vecmath = slot->vecmath;
    pthread_mutex_unlock(&cc_lock);
    if (threads < 0)
        threads = probe_build(c, "threads probe 2",
                              "#include <pthread.h>\n#include <stdatomic.h>\n"
                              "static _Atomic int dl_n;\n"
                              "static void *dl_run(void *a) { dl_n += 1; return a; }\n"
                              "int dl_threads_probe(void) {\n    pthread_t t;\n"
                              "    if (pthread_create(&t, 0, dl_run, 0)) return 0;\n"
                              "    pthread_join(t, 0);\n    return dl_n;\n}\n",
                              "-pthread", false);
    if (omp_simd < 0)
        omp_simd = probe_build(c, "omp simd probe 1",
                               "void dl_simd_probe(float *x, int n) {\n"
                               "#pragma omp simd\n    for (int i = 0; i < n; i++) x[i] += 1;\n}\n",
                               "-fopenmp-simd", false);
    if (vecmath < 0) {
        vecmath = 0;
        const int n = (int)(sizeof vecmath_libs / sizeof vecmath_libs[0]);
        for (int i = 0; i < n && !vecmath; i++) {
            char what[64];
            snprintf(what, sizeof what, "vecmath probe 1 %s", vecmath_libs[i]);
            if (probe_build(c, what,
                            "extern char _ZGVbN4v_expf[];\n"
                            "void *dl_vecmath_probe(void) { return _ZGVbN4v_expf; }\n",
                            vecmath_libs[i], true))
                vecmath = i + 1;
        }
    }
    pthread_mutex_lock(&cc_lock);
    slot = cc_lookup(c->cc.spec);
    slot->threads = threads;
    slot->omp_simd = omp_simd;
    slot->vecmath = vecmath;
    pthread_mutex_unlock(&cc_lock);
    c->cc.threads = threads;
    c->cc.omp_simd = omp_simd;
    c->cc.vecmath = vecmath;
}

static bool valid_name(const char *name) {
    size_t n = strlen(name);
    if (n < 3 || n > JIT_NAME_MAX || name[0] == '.' || name[0] == '-') return false;
    for (size_t i = 0; i < n; i++) {
        char ch = name[i];
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                  (ch >= '0' && ch <= '9') || ch == '_' || ch == '-' || ch == '.';
        if (!ok) return false;
    }
    return strcmp(name + n - 2, ".c") == 0 || strcmp(name + n - 2, ".h") == 0;
}

static dl_status check_sources(dl_ctx *ctx, int n, const dl_jit_src *srcs) {
    if (n <= 0 || n > JIT_MAX_SOURCES || !srcs)
        return dl_fail(ctx, DL_ERR_INVALID, "JIT: %d sources (need 1 to %d)", n, JIT_MAX_SOURCES);
    int n_c = 0;
    for (int i = 0; i < n; i++) {
        if (!srcs[i].name || !srcs[i].text)
            return dl_fail(ctx, DL_ERR_INVALID, "JIT: source %d has no name or no text", i);
        if (!valid_name(srcs[i].name))
            return dl_fail(ctx, DL_ERR_INVALID,
                           "JIT: source name '%.100s' must be letters, digits, '_', '-', '.' "
                           "ending in .c or .h",
                           srcs[i].name);
        for (int j = 0; j < i; j++)
            if (strcmp(srcs[i].name, srcs[j].name) == 0)
                return dl_fail(ctx, DL_ERR_INVALID, "JIT: two sources named '%s'", srcs[i].name);
        n_c += !is_header(&srcs[i]);
    }
    if (n_c == 0) return dl_fail(ctx, DL_ERR_INVALID, "JIT: no .c source to compile");
    return DL_OK;
}

static atomic_flag warned_cache = ATOMIC_FLAG_INIT;

static dl_status setup(dl_ctx *ctx, const dl_jit_opts *o, jit_cfg *c) {
    pthread_once(&cpu_once, read_cpu_features);
    const char *spec = cc_spec(o);
    pthread_mutex_lock(&cc_lock);
    c->cc = *cc_lookup(spec);
    pthread_mutex_unlock(&cc_lock);
    if (!c->cc.runs)
        return dl_fail(ctx, DL_ERR_UNSUPPORTED,
                       "JIT: the C compiler '%.200s' cannot be run (set CC to a working compiler)",
                       spec);
    snprintf(c->cc_copy, sizeof c->cc_copy, "%s", c->cc.spec);
    c->n_cc = split_words(c->cc_copy, c->cc_words, JIT_MAX_WORDS);
    c->cc_words[0] = c->cc.path;
    const char *flags = o && o->cflags ? o->cflags : getenv("DLCC_CFLAGS");
    if (!flags) flags = "-O3 -march=native";
    c->flag_copy = dl_strdup(flags);
    if (!c->flag_copy) return dl_fail(ctx, DL_ERR_NOMEM, "JIT: out of memory");
    c->n_flags = split_words(c->flag_copy, c->flags, JIT_MAX_WORDS);
    if (c->n_flags < 0)
        return dl_fail(ctx, DL_ERR_INVALID, "JIT: more than %d compiler flags", JIT_MAX_WORDS);
    c->verbose = o && o->verbose;
    c->cache[0] = 0;
    if (!(o && o->no_cache)) {
        char why[600];
        char given[sizeof c->cache] = "(none)";
        bool usable = false;
        if (!dl_cache_dir(o, given, sizeof given) ||
            !absolute_path(given, c->cache, sizeof c->cache))
            snprintf(why, sizeof why, "set DLCC_CACHE_DIR or HOME");
        else
            usable = dl_cache_prepare(c->cache, why, sizeof why);
        if (!usable) {
            c->cache[0] = 0;
            if (!atomic_flag_test_and_set(&warned_cache))
                dl_warn("compile cache %s unusable (%s): building in a temporary folder", given,
                        why);
        }
    }
    probe_features(c);
    return DL_OK;
}

/* Compiles the sources in a fresh folder (shared objects from the cache when there), links
 * `so` there, and publishes objects and the .so to the cache when one is used. */
static dl_status compile_and_link(dl_ctx *ctx, const jit_cfg *c, const char *key, int n,
                                  const dl_jit_src *srcs, char *bdir, size_t bdir_n, char *so,
                                  size_t so_n, bool *keep_dir) {
    *keep_dir = false;
    DL_TRY(dl_build_dir_make(ctx, c->cache[0] ? c->cache : NULL, bdir, bdir_n));
    jit_job *jobs = dl_calloc((size_t)n, sizeof *jobs);
    const char **argv = dl_malloc(((size_t)n + 2 * JIT_MAX_WORDS + 16) * sizeof *argv);
    dl_status s = jobs && argv ? DL_OK : dl_fail(ctx, DL_ERR_NOMEM, "JIT: out of memory");
    char path[1200];
    for (int i = 0; i < n && s == DL_OK; i++) {
        snprintf(path, sizeof path, "%s/%s", bdir, srcs[i].name);
        s = dl_write_text(ctx, path, srcs[i].text);
    }
    int nj = 0;
    for (int i = 0; i < n && s == DL_OK; i++) { /* start every compile, then wait for all */
        if (is_header(&srcs[i])) continue;
        jit_job *j = &jobs[nj++];
        j->src = &srcs[i];
        if (srcs[i].shared && c->cache[0]) {
            make_key(c, "o", n, srcs, &srcs[i], j->key);
            if (dl_cache_entry_ok(c->cache, j->key, ".o")) {
                snprintf(j->obj, sizeof j->obj, "%s/%s.o", c->cache, j->key);
                j->from_cache = true;
                continue;
            }
        }
#ifdef JIT_HAVE_ADDCHDIR
        snprintf(path, sizeof path, "%s", srcs[i].name);
#else
        snprintf(path, sizeof path, "%s/%s", bdir, srcs[i].name);
#endif
        snprintf(j->obj, sizeof j->obj, "%s/%s.o", bdir, srcs[i].name);
        snprintf(j->log, sizeof j->log, "%s/%s.log", bdir, srcs[i].name);
        int k = base_words(c, argv);
        const char *tail[] = {"-c", "-x", "c", path, "-o", j->obj, NULL};
        memcpy(argv + k, tail, sizeof tail);
        spawn_logged(c, argv, bdir, j);
    }
    for (int i = 0; i < nj; i++)
        if (!jobs[i].from_cache && jobs[i].spawn_err == 0) wait_child(jobs[i].pid, &jobs[i].status);
    for (int i = 0; i < nj && s == DL_OK; i++) {
        if (jobs[i].from_cache) continue;
        if (jobs[i].spawn_err || !exited_ok(jobs[i].status)) {
            char what[200];
            snprintf(what, sizeof what, "compiling %s", jobs[i].src->name);
            s = job_failure(ctx, &jobs[i], what, bdir);
            *keep_dir = true;
        } else if (jobs[i].key[0]) { /* a shared object: into the cache before linking */
            s = dl_cache_publish(ctx, c->cache, jobs[i].key, ".o", jobs[i].obj);
            snprintf(jobs[i].obj, sizeof jobs[i].obj, "%s/%s.o", c->cache, jobs[i].key);
        }
    }
    if (s == DL_OK) {
        jit_job link = {0};
        snprintf(so, so_n, "%s/%s.so", bdir, key);
        snprintf(link.log, sizeof link.log, "%s/link.log", bdir);
        int k = base_words(c, argv);
        argv[k++] = "-shared";
        for (int i = 0; i < nj; i++) argv[k++] = jobs[i].obj;
        const char *tail[] = {"-o", so, c->cc.vecmath > 0 ? vecmath_libs[c->cc.vecmath - 1] : "-lm",
                              "-lm", NULL};
        memcpy(argv + k, tail, sizeof tail);
        spawn_logged(c, argv, NULL, &link);
        if (link.spawn_err == 0) wait_child(link.pid, &link.status);
        if (link.spawn_err || !exited_ok(link.status)) {
            s = job_failure(ctx, &link, "linking", bdir);
            *keep_dir = true;
        }
    }
    if (s == DL_OK && c->cache[0]) {
        s = dl_cache_publish(ctx, c->cache, key, ".so", so);
        snprintf(so, so_n, "%s/%s.so", c->cache, key);
    }
    dl_free(jobs);
    dl_free(argv);
    return s;
}

static void *open_lib(const char *path, char *err, size_t n) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(err, n, "%s", e ? e : "unknown dlopen error");
    }
    return h;
}

dl_status dl_jit_build(dl_ctx *ctx, const dl_jit_opts *o, int n, const dl_jit_src *srcs,
                       dl_jit_lib **out, dl_jit_info *info) {
    double t0 = now_ms();
    dl_jit_info local;
    if (!info) info = &local;
    memset(info, 0, sizeof *info);
    if (!out) return dl_fail(ctx, DL_ERR_INVALID, "JIT: no output handle");
    *out = NULL;
    DL_TRY(check_sources(ctx, n, srcs));
    jit_cfg *c = dl_calloc(1, sizeof *c);
    dl_jit_lib *lib = dl_calloc(1, sizeof *lib);
    dl_status s = c && lib ? DL_OK : dl_fail(ctx, DL_ERR_NOMEM, "JIT: out of memory");
    if (s == DL_OK) s = setup(ctx, o, c);
    char path[1100] = "", err[512] = "", bdir[1100] = "";
    bool keep_dir = false;
    if (s == DL_OK) {
        make_key(c, "so", n, srcs, NULL, info->key);
        if (c->cache[0] && dl_cache_entry_ok(c->cache, info->key, ".so")) {
            snprintf(path, sizeof path, "%s/%s.so", c->cache, info->key);
            lib->handle = open_lib(path, err, sizeof err);
            info->cache_hit = lib->handle != NULL; /* a checked entry that will not load: rebuild */
        }
    }
    if (s == DL_OK && !lib->handle) {
        double tb = now_ms();
        s = compile_and_link(ctx, c, info->key, n, srcs, bdir, sizeof bdir, path, sizeof path,
                             &keep_dir);
        info->build_ms = now_ms() - tb;
        if (s == DL_OK && !(lib->handle = open_lib(path, err, sizeof err)))
            s = dl_fail(ctx, DL_ERR_INTERNAL, "JIT: cannot load %s: %s", path, err);
    }
    if (bdir[0] && !keep_dir) dl_build_dir_remove(bdir);
    if (c) dl_free(c->flag_copy);
    dl_free(c);
    if (s != DL_OK) {
        if (lib && lib->handle) dlclose(lib->handle);
        dl_free(lib);
        return s;
    }
    snprintf(info->path, sizeof info->path, "%s", path);
    info->total_ms = now_ms() - t0;
    *out = lib;
    return DL_OK;
}

void *dl_jit_sym(dl_jit_lib *lib, const char *name) {
    return lib && lib->handle && name ? dlsym(lib->handle, name) : NULL;
}

void dl_jit_close(dl_jit_lib *lib) {
    if (!lib) return;
    if (lib->handle) dlclose(lib->handle);
    dl_free(lib);
}
