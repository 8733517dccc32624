/* test_atomic_file.c — dl_atomic_write (src/core/atomic-file.c): contents and modes of the file
 * written, the old file kept and no temporary file left by every kind of failure (the fill's
 * own error, a failed write, a missing directory, a directory in the way, a path too long),
 * taken temporary names, links at the target, stale temporary files of dead writers, the name
 * parser, writers racing on one path, and that the helper allocates nothing. */
#include "../../src/core/atomic-file.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHECK_PRINT_PASS
#include "check.h"

static char dir[] = "/tmp/dlcc-atomic-XXXXXX";
static dl_ctx *ctx;

static void path_of(char *buf, size_t n, const char *name) {
    snprintf(buf, n, "%s/%s", dir, name);
}

/* The whole file as a malloc'd string (NULL if it cannot be read); its size in *n. */
static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, len = 0;
    char *b = malloc(cap + 1);
    for (size_t got; b && (got = fread(b + len, 1, cap - len, f)) > 0;) {
        len += got;
        if (len == cap) {
            char *grown = realloc(b, 2 * cap + 1);
            if (!grown) free(b);
            b = grown;
            cap *= 2;
        }
    }
    fclose(f);
    if (b) b[len] = 0;
    *n = len;
    return b;
}

static bool file_is(const char *path, const void *want, size_t want_n) {
    size_t n;
    char *b = slurp(path, &n);
    bool ok = b && n == want_n && memcmp(b, want, n) == 0;
    free(b);
    return ok;
}

static bool spit(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) return false;
    bool ok = fputs(text, f) >= 0;
    return fclose(f) == 0 && ok;
}

/* How many names in the folder contain ".tmp." */
static int temp_files(void) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += strstr(e->d_name, ".tmp.") != NULL;
    if (d) closedir(d);
    return n;
}

static bool msg_has(const char *a, const char *b) {
    const char *m = dl_errmsg(ctx);
    return strstr(m, a) && (!b || strstr(m, b));
}

/* A pid that no process has any more. */
static long dead_pid(void) {
    pid_t p = fork();
    if (p == 0) _exit(0);
    waitpid(p, NULL, 0);
    return (long)p;
}

/* ---- fills ---- */

typedef struct chunks {
    int count;
    size_t size;
    int fail_after; /* return an error after this many chunks; -1: never */
    bool allocate;  /* allocate (and free) a scratch buffer first */
} chunks;

static unsigned char chunk_byte(size_t i) {
    return (unsigned char)(i * 7 + i / 251);
}

static dl_status put_chunks(dl_ctx *c, dl_atomic_file *f, void *arg) {
    const chunks *k = arg;
    unsigned char *buf = malloc(k->size ? k->size : 1);
    if (!buf) return dl_fail(c, DL_ERR_NOMEM, "test: out of memory");
    if (k->allocate) {
        void *p = dl_malloc(64);
        if (!p) {
            free(buf);
            return dl_fail(c, DL_ERR_NOMEM, "fill: out of memory");
        }
        dl_free(p);
    }
    size_t at = 0;
    for (int i = 0; i < k->count; i++) {
        if (i == k->fail_after) {
            free(buf);
            return dl_fail(c, DL_ERR_PARSE, "fill refused after %d chunks", i);
        }
        for (size_t j = 0; j < k->size; j++) buf[j] = chunk_byte(at + j);
        if (!dl_atomic_put(f, buf, k->size)) break;
        at += k->size;
    }
    free(buf);
    return DL_OK;
}

static bool is_chunk_file(const char *path, size_t total) {
    size_t n;
    unsigned char *b = (unsigned char *)slurp(path, &n);
    bool ok = b && n == total;
    for (size_t i = 0; ok && i < n; i++) ok = b[i] == chunk_byte(i);
    free(b);
    return ok;
}

/* ---- tests ---- */

static void test_success(void) {
    char path[600];
    path_of(path, sizeof path, "a.bin");
    const char *text = "first version\n";
    dl_ctx_clear(ctx);
    dl_status s = dl_atomic_write_buf(ctx, path, NULL, DL_ATOMIC_SYNC, text, strlen(text));
    CHECK("a buffer is written whole to a new file",
          s == DL_OK && file_is(path, text, strlen(text)) && temp_files() == 0);
    struct stat st;
    mode_t mask = umask(022);
    umask(mask);
    CHECK("a new file is 0666 less the umask",
          stat(path, &st) == 0 && (st.st_mode & 0777) == (0666 & ~mask));

    chunks k = {.count = 40, .size = 100003, .fail_after = -1};
    s = dl_atomic_write(ctx, path, "thing", DL_ATOMIC_SYNC | DL_ATOMIC_SYNC_DIR, put_chunks, &k);
    CHECK("a fill's many puts (4 MB) replace the old file, byte for byte",
          s == DL_OK && is_chunk_file(path, 40 * (size_t)100003) && temp_files() == 0);

    s = dl_atomic_write_buf(ctx, path, NULL, DL_ATOMIC_PRIVATE, "", 0);
    CHECK("empty contents: an empty file, 0600 with DL_ATOMIC_PRIVATE",
          s == DL_OK && file_is(path, "", 0) && stat(path, &st) == 0 &&
              (st.st_mode & 0777) == (0600 & ~mask));

    /* a bare name goes to the current directory (and its directory sync is ".") */
    char cwd[600];
    if (getcwd(cwd, sizeof cwd) && chdir(dir) == 0) {
        s = dl_atomic_write_buf(ctx, "bare.txt", NULL, DL_ATOMIC_SYNC | DL_ATOMIC_SYNC_DIR, "x", 1);
        path_of(path, sizeof path, "bare.txt");
        CHECK("a bare file name is written in the current directory",
              s == DL_OK && file_is(path, "x", 1) && temp_files() == 0);
        unlink(path);
        if (chdir(cwd) != 0) printf("  cannot return to %s\n", cwd);
    }
    path_of(path, sizeof path, "a.bin");
    unlink(path);
}

static void test_fill_error(void) {
    char path[600];
    path_of(path, sizeof path, "keep.bin");
    const char *old = "the old contents";
    spit(path, old);
    chunks k = {.count = 10, .size = 5000, .fail_after = 3};
    dl_ctx_clear(ctx);
    dl_status s = dl_atomic_write(ctx, path, "model", DL_ATOMIC_SYNC, put_chunks, &k);
    CHECK("an error from the fill is returned with its own message",
          s == DL_ERR_PARSE && strcmp(dl_errmsg(ctx), "fill refused after 3 chunks") == 0);
    CHECK("after a fill error the old file is intact and no temp file is left",
          file_is(path, old, strlen(old)) && temp_files() == 0);
    k.fail_after = 0;
    dl_ctx_clear(ctx);
    s = dl_atomic_write(ctx, path, NULL, 0, put_chunks, &k);
    CHECK("a fill failing before any write: the same",
          s == DL_ERR_PARSE && file_is(path, old, strlen(old)) && temp_files() == 0);
    unlink(path);
}

/* A put that fails (the file size limit: EFBIG) is reported by dl_atomic_write. */
static void test_write_error(void) {
    char path[600];
    path_of(path, sizeof path, "big.bin");
    const char *old = "small";
    spit(path, old);
    struct rlimit was;
    if (getrlimit(RLIMIT_FSIZE, &was) != 0) return;
    struct rlimit lim = was;
    lim.rlim_cur = 10000;
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    if (setrlimit(RLIMIT_FSIZE, &lim) != 0) {
        CHECK("setrlimit(RLIMIT_FSIZE)", 0);
        signal(SIGXFSZ, prev);
        return;
    }
    chunks k = {.count = 10, .size = 4000, .fail_after = -1};
    dl_ctx_clear(ctx);
    dl_status s = dl_atomic_write(ctx, path, "checkpoint", DL_ATOMIC_SYNC, put_chunks, &k);
    setrlimit(RLIMIT_FSIZE, &was);
    signal(SIGXFSZ, prev);
    char want[700];
    snprintf(want, sizeof want, "checkpoint '%s': writing '%s.tmp.", path, path);
    CHECK("a failed write is an I/O error naming the file, the step and the reason",
          s == DL_ERR_IO && strncmp(dl_errmsg(ctx), want, strlen(want)) == 0 &&
              msg_has(strerror(EFBIG), NULL));
    CHECK("after a failed write the old file is intact and no temp file is left",
          file_is(path, old, strlen(old)) && temp_files() == 0);
    dl_ctx_clear(ctx);
    s = dl_atomic_write(ctx, path, NULL, 0, put_chunks, &k);
    CHECK("the limit lifted, the same path writes fine",
          s == DL_OK && is_chunk_file(path, 40000) && temp_files() == 0);
    unlink(path);
}

static void test_bad_paths(void) {
    char path[600], sub[600];
    path_of(path, sizeof path, "no-such-dir/x.bin");
    dl_ctx_clear(ctx);
    dl_status s = dl_atomic_write_buf(ctx, path, NULL, DL_ATOMIC_SYNC, "x", 1);
    char want[700];
    snprintf(want, sizeof want, "%s: cannot create '%s.tmp.", path, path);
    CHECK("a missing directory is an I/O error naming the path and the reason",
          s == DL_ERR_IO && strncmp(dl_errmsg(ctx), want, strlen(want)) == 0 &&
              msg_has(strerror(ENOENT), NULL) && !strchr(dl_errmsg(ctx), '\n'));
    dl_ctx_clear(ctx);
    s = dl_atomic_write_buf(ctx, path, "checkpoint", 0, "x", 1);
    snprintf(want, sizeof want, "checkpoint '%s': cannot create", path);
    CHECK("with a noun the message reads \"<what> '<path>': ...\"",
          s == DL_ERR_IO && strncmp(dl_errmsg(ctx), want, strlen(want)) == 0);

    path_of(sub, sizeof sub, "a-directory");
    mkdir(sub, 0700);
    path_of(path, sizeof path, "a-directory/inside");
    spit(path, "inside");
    dl_ctx_clear(ctx);
    s = dl_atomic_write_buf(ctx, sub, NULL, DL_ATOMIC_SYNC, "x", 1);
    CHECK("a directory in the way: the rename fails, an I/O error saying so",
          s == DL_ERR_IO && msg_has(sub, "renaming") && msg_has(strerror(EISDIR), NULL));
    CHECK("after a failed rename the directory is untouched and no temp file is left",
          file_is(path, "inside", 6) && temp_files() == 0);
    unlink(path);
    rmdir(sub);

    size_t long_n = PATH_MAX + 100;
    char *long_path = malloc(long_n + 1);
    if (long_path) {
        memset(long_path, 'a', long_n);
        long_path[long_n] = 0;
        dl_ctx_clear(ctx);
        s = dl_atomic_write_buf(ctx, long_path, NULL, 0, "x", 1);
        CHECK("a path longer than PATH_MAX is refused",
              s == DL_ERR_INVALID && msg_has("...: path is too long", NULL));
        free(long_path);
    }

    dl_ctx_clear(ctx);
    path_of(path, sizeof path, "no-such-dir/x.bin");
    s = dl_atomic_write_buf(NULL, path, NULL, 0, "x", 1);
    CHECK("without a context a failure is still returned", s == DL_ERR_IO);
}

/* The first temp name is taken: the next one is used, the taken file left alone. */
static void test_taken_temp_name(void) {
    char path[600], taken[700];
    path_of(path, sizeof path, "taken.bin");
    snprintf(taken, sizeof taken, "%s.tmp.%ld", path, (long)getpid());
    spit(taken, "someone else's");
    dl_ctx_clear(ctx);
    dl_status s = dl_atomic_write_buf(ctx, path, NULL, DL_ATOMIC_SYNC, "mine", 4);
    CHECK("a taken temp name: another is used, the file is written",
          s == DL_OK && file_is(path, "mine", 4));
    CHECK("... and the file under the taken name is not touched",
          file_is(taken, "someone else's", 14) && temp_files() == 1);
    unlink(taken);
    unlink(path);
}

/* A link at the target is replaced by the file; what it pointed to is not written. */
static void test_link_target(void) {
    char path[600], victim[600];
    path_of(path, sizeof path, "link.bin");
    path_of(victim, sizeof victim, "victim.bin");
    spit(victim, "victim");
    if (symlink(victim, path) != 0) {
        CHECK("symlink", 0);
        return;
    }
    dl_ctx_clear(ctx);
    dl_status s = dl_atomic_write_buf(ctx, path, NULL, 0, "new", 3);
    struct stat st;
    CHECK("a link at the path is replaced by a regular file, its target untouched",
          s == DL_OK && lstat(path, &st) == 0 && S_ISREG(st.st_mode) && file_is(path, "new", 3) &&
              file_is(victim, "victim", 6));
    unlink(path);
    unlink(victim);
}

static void test_remove_stale(void) {
    char path[600], names[6][700];
    path_of(path, sizeof path, "ckpt.st");
    long dead = dead_pid(), me = (long)getpid(), live = (long)getppid();
    snprintf(names[0], sizeof names[0], "%s.tmp.%ld", path, dead);         /* stale */
    snprintf(names[1], sizeof names[1], "%s.tmp.%ld.3", path, dead);       /* stale */
    snprintf(names[2], sizeof names[2], "%s.tmp.%ld.9", path, me);         /* ours: kept */
    snprintf(names[3], sizeof names[3], "%s.tmp.%ld", path, live);         /* alive: kept */
    snprintf(names[4], sizeof names[4], "%s/other.st.tmp.%ld", dir, dead); /* not ours */
    snprintf(names[5], sizeof names[5], "%s.tmp.%ldx", path, dead);        /* not a temp name */
    for (int i = 0; i < 6; i++) spit(names[i], "left over");
    dl_ctx_clear(ctx);
    dl_status s = dl_atomic_write_buf(ctx, path, NULL, DL_ATOMIC_SYNC, "v1", 2);
    bool all_there = true;
    for (int i = 0; i < 6; i++) all_there &= access(names[i], F_OK) == 0;
    CHECK("without DL_ATOMIC_REMOVE_STALE leftovers stay", s == DL_OK && all_there);
    s = dl_atomic_write_buf(ctx, path, NULL, DL_ATOMIC_SYNC | DL_ATOMIC_REMOVE_STALE, "v2", 2);
    CHECK("DL_ATOMIC_REMOVE_STALE removes the temp files of dead writers of this path",
          s == DL_OK && file_is(path, "v2", 2) && access(names[0], F_OK) != 0 &&
              access(names[1], F_OK) != 0);
    CHECK("... and keeps this process's, a live process's, other files' and other names",
          access(names[2], F_OK) == 0 && access(names[3], F_OK) == 0 &&
              access(names[4], F_OK) == 0 && access(names[5], F_OK) == 0);
    for (int i = 0; i < 6; i++) unlink(names[i]);
    unlink(path);
}

static void test_temp_suffix(void) {
    static const struct {
        const char *s;
        bool ok;
        long pid;
    } cases[] = {
        {".tmp.123", true, 123},
        {".tmp.123.0", true, 123},
        {".tmp.7.4294967295", true, 7},
        {".tmp.", false, 0},
        {".tmp.0", false, 0},
        {".tmp.12a", false, 0},
        {".tmp.12.", false, 0},
        {".tmp.12.x", false, 0},
        {".tmp.12.3.4", false, 0},
        {".tmp12.3", false, 0},
        {"", false, 0},
        {".tmp.-5", false, 0},
        {".tmp.99999999999", false, 0},
        {".tmp. 5", false, 0},
    };
    int bad = 0;
    for (size_t i = 0; i < DL_ARRAY_LEN(cases); i++) {
        long pid = -1;
        bool ok = dl_atomic_temp_suffix(cases[i].s, &pid);
        if (ok != cases[i].ok || (ok && pid != cases[i].pid)) {
            printf("  \"%s\": %d, pid %ld\n", cases[i].s, ok, pid);
            bad++;
        }
    }
    CHECK("temp name suffixes: .tmp.<pid> and .tmp.<pid>.<n> only, with the pid", bad == 0);
}

/* ---- racing writers ---- */

#define RACERS      8
#define RACE_ROUNDS 25
#define RACE_BYTES  20000

typedef struct racer {
    const char *path;
    int id, failures;
} racer;

static void *race(void *arg) {
    racer *r = arg;
    unsigned char *buf = malloc(RACE_BYTES);
    if (!buf) return NULL;
    memset(buf, 'A' + r->id, RACE_BYTES);
    for (int i = 0; i < RACE_ROUNDS; i++)
        r->failures += dl_atomic_write_buf(NULL, r->path, NULL, 0, buf, RACE_BYTES) != DL_OK;
    free(buf);
    return NULL;
}

static void test_racing_writers(void) {
    char path[600];
    path_of(path, sizeof path, "race.bin");
    pthread_t t[RACERS];
    racer r[RACERS];
    int started = 0, failures = 0;
    for (int i = 0; i < RACERS; i++) {
        r[i] = (racer){.path = path, .id = i};
        if (pthread_create(&t[i], NULL, race, &r[i]) == 0)
            started++;
        else
            break;
    }
    for (int i = 0; i < started; i++) {
        pthread_join(t[i], NULL);
        failures += r[i].failures;
    }
    size_t n;
    char *b = slurp(path, &n);
    bool whole = b && n == RACE_BYTES;
    for (size_t i = 1; whole && i < n; i++) whole = b[i] == b[0];
    free(b);
    CHECK("threads of one process writing one path: every write succeeds, the file is one whole "
          "write, no temp file left",
          started == RACERS && failures == 0 && whole && temp_files() == 0);
    unlink(path);
}

/* The helper allocates nothing; a fill's allocation failure cleans up like any fill error. */
static void test_alloc_failures(void) {
    char path[600];
    path_of(path, sizeof path, "oom.bin");
    spit(path, "old");
    chunks k = {.count = 3, .size = 1000, .fail_after = -1};
    dl_ctx_clear(ctx);
    dl_alloc_fail_after(0);
    dl_status s =
        dl_atomic_write(ctx, path, NULL, DL_ATOMIC_SYNC | DL_ATOMIC_REMOVE_STALE, put_chunks, &k);
    dl_alloc_fail_after(-1);
    CHECK("with every allocation failing a write still succeeds (the helper allocates nothing)",
          s == DL_OK && is_chunk_file(path, 3000) && temp_files() == 0);
    spit(path, "old");
    k.allocate = true;
    dl_ctx_clear(ctx);
    dl_alloc_fail_after(0);
    s = dl_atomic_write(ctx, path, NULL, DL_ATOMIC_SYNC, put_chunks, &k);
    dl_alloc_fail_after(-1);
    CHECK("a fill running out of memory: NOMEM, old file intact, no temp file",
          s == DL_ERR_NOMEM && msg_has("out of memory", NULL) && file_is(path, "old", 3) &&
              temp_files() == 0);
    dl_ctx_clear(ctx);
    s = dl_atomic_write(ctx, path, NULL, DL_ATOMIC_SYNC, put_chunks, &k);
    CHECK("... and succeeds once memory is there", s == DL_OK && is_chunk_file(path, 3000));
    unlink(path);
}

int main(void) {
    ctx = dl_ctx_new();
    if (!ctx || !mkdtemp(dir)) {
        printf("FAIL cannot create a context or a temporary folder\n0 passed, 1 failed\n");
        return 1;
    }
    test_success();
    test_fill_error();
    test_write_error();
    test_bad_paths();
    test_taken_temp_name();
    test_link_target();
    test_remove_stale();
    test_temp_suffix();
    test_racing_writers();
    test_alloc_failures();

    /* everything the tests made is gone: only the folder is left */
    DIR *d = opendir(dir);
    int left = 0;
    for (struct dirent *e; d && (e = readdir(d));) left += e->d_name[0] != '.';
    if (d) closedir(d);
    CHECK("the tests left nothing behind", left == 0);
    rmdir(dir);
    dl_ctx_free(ctx);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
