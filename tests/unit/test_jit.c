/* test_jit.c — the JIT and its compile cache, in a fresh cache folder (DLCC_CACHE_DIR; HOME is
 * pointed at a folder that must stay absent, so ~/.cache is never touched): build and call,
 * cache hits, keys, corrupted entries, compiler errors, a missing compiler, shared objects
 * reused across models, concurrent builders, no-cache and unusable-cache builds, listing and
 * clearing, and allocation failures. */
#include "../../src/codegen/jit.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"


static char root[256], cache[300], home[300];
static dl_ctx *ctx;

static const char *ADD_SRC = "int dl_test_add(int a, int b) { return a + b; }\n";

static dl_status build_srcs(const dl_jit_opts *o, int n, const dl_jit_src *srcs, dl_jit_lib **lib,
                            dl_jit_info *info) {
    dl_ctx_clear(ctx);
    return dl_jit_build(ctx, o, n, srcs, lib, info);
}

static dl_status build_text(const dl_jit_opts *o, const char *text, dl_jit_lib **lib,
                            dl_jit_info *info) {
    dl_jit_src src = {"model.c", text, false};
    return build_srcs(o, 1, &src, lib, info);
}

static int call2(dl_jit_lib *lib, const char *name, int a, int b) {
    void *sym = dl_jit_sym(lib, name);
    if (!sym) return -999999;
    int (*f)(int, int);
    memcpy(&f, &sym, sizeof f);
    return f(a, b);
}

static bool exists(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0;
}

static void entry_path(const char *key, const char *ext, char *out, size_t n) {
    snprintf(out, n, "%s/%s%s", cache, key, ext);
}

/* Builds ADD_SRC once more after damaging its cached files with `damage`; true when the damage
 * was noticed (a rebuild, not a hit) and the rebuilt library works. */
static bool survives(void (*damage)(const char *so, const char *meta), const char *key) {
    char so[600], meta[600];
    entry_path(key, ".so", so, sizeof so);
    entry_path(key, ".meta", meta, sizeof meta);
    damage(so, meta);
    dl_jit_lib *lib = NULL;
    dl_jit_info info;
    bool ok = build_text(NULL, ADD_SRC, &lib, &info) == DL_OK && !info.cache_hit &&
              call2(lib, "dl_test_add", 2, 3) == 5 && strcmp(info.key, key) == 0;
    dl_jit_close(lib);
    /* and the repaired entry is a hit again */
    ok = ok && build_text(NULL, ADD_SRC, &lib, &info) == DL_OK && info.cache_hit;
    dl_jit_close(lib);
    return ok;
}

static void truncate_so(const char *so, const char *meta) {
    DL_UNUSED(meta);
    if (truncate(so, 100) != 0) printf("FAIL truncate\n");
}

static void flip_byte(const char *path, long at) {
    int fd = open(path, O_RDWR);
    unsigned char b = 0;
    if (fd < 0 || pread(fd, &b, 1, at) != 1) printf("FAIL read %s\n", path);
    b ^= 0x40;
    if (fd < 0 || pwrite(fd, &b, 1, at) != 1) printf("FAIL write %s\n", path);
    if (fd >= 0) close(fd);
}

static void flip_so(const char *so, const char *meta) {
    DL_UNUSED(meta);
    struct stat st;
    stat(so, &st);
    flip_byte(so, (long)st.st_size / 2);
}

static void flip_meta(const char *so, const char *meta) {
    DL_UNUSED(so);
    struct stat st;
    stat(meta, &st);
    flip_byte(meta, (long)st.st_size - 3); /* inside the checksum */
}

static void drop_meta(const char *so, const char *meta) {
    DL_UNUSED(so);
    unlink(meta);
}

static void garbage_meta(const char *so, const char *meta) {
    DL_UNUSED(so);
    FILE *f = fopen(meta, "w");
    if (f) {
        fputs("not a meta file\n", f);
        fclose(f);
    }
}

static void so_as_link(const char *so, const char *meta) {
    DL_UNUSED(meta);
    char real[700];
    snprintf(real, sizeof real, "%s/elsewhere.so", root);
    rename(so, real); /* same bytes, but reached through a link: not an entry */
    if (symlink(real, so) != 0) printf("FAIL symlink\n");
}

static void test_basic(void) {
    dl_jit_lib *lib = NULL, *lib2 = NULL;
    dl_jit_info a, b;
    dl_status s = build_text(NULL, ADD_SRC, &lib, &a);
    if (s != DL_OK) printf("build error: %s\n", dl_errmsg(ctx));
    CHECK("first build works", s == DL_OK && call2(lib, "dl_test_add", 2, 3) == 5 && !a.cache_hit);
    CHECK("key is 32 hex digits", strlen(a.key) == 32 && strspn(a.key, "0123456789abcdef") == 32);
    char so[600], meta[600];
    entry_path(a.key, ".so", so, sizeof so);
    entry_path(a.key, ".meta", meta, sizeof meta);
    CHECK("entry and meta in the cache folder", strcmp(a.path, so) == 0 && exists(so) && exists(meta));
    CHECK("first build spent time compiling", a.build_ms > 0 && a.total_ms >= a.build_ms);
    s = build_text(NULL, ADD_SRC, &lib2, &b);
    CHECK("second build is a hit", s == DL_OK && b.cache_hit && b.build_ms == 0 &&
                                       strcmp(a.key, b.key) == 0 && call2(lib2, "dl_test_add", 4, 5) == 9);
    printf("tiny source: cold %.1f ms (compiler %.1f ms), warm %.2f ms\n", a.total_ms, a.build_ms,
           b.total_ms);
    CHECK("missing symbol is NULL", dl_jit_sym(lib, "no_such_symbol") == NULL);
    dl_jit_close(lib);
    dl_jit_close(lib2);

    dl_jit_info c;
    s = build_text(NULL, "int dl_test_add(int a, int b) { return a + b + 1; }\n", &lib, &c);
    CHECK("changed text: new key, built", s == DL_OK && strcmp(c.key, a.key) != 0 && !c.cache_hit &&
                                              call2(lib, "dl_test_add", 2, 3) == 6);
    dl_jit_close(lib);
    dl_jit_src named = {"other.c", ADD_SRC, false};
    s = build_srcs(NULL, 1, &named, &lib, &c);
    CHECK("changed source name: new key", s == DL_OK && strcmp(c.key, a.key) != 0);
    dl_jit_close(lib);
    dl_jit_opts o = {.cflags = "-O0  -DEXTRA=7\t"};
    s = build_text(&o, "int dl_test_add(int a, int b) { return a + b + EXTRA; }\n", &lib, &c);
    CHECK("flags are split on blanks and enter the key",
          s == DL_OK && call2(lib, "dl_test_add", 1, 1) == 9);
    dl_jit_close(lib);
    dl_jit_info d;
    o.cflags = "-O1";
    s = build_text(&o, ADD_SRC, &lib, &d);
    CHECK("different flags: different key", s == DL_OK && strcmp(d.key, a.key) != 0 && !d.cache_hit);
    dl_jit_close(lib);

    CHECK("truncated .so is rebuilt", survives(truncate_so, a.key));
    CHECK("flipped byte in .so is rebuilt", survives(flip_so, a.key));
    CHECK("flipped byte in .meta is rebuilt", survives(flip_meta, a.key));
    CHECK("missing .meta is rebuilt", survives(drop_meta, a.key));
    CHECK("garbage .meta is rebuilt", survives(garbage_meta, a.key));
    CHECK(".so replaced by a link is rebuilt", survives(so_as_link, a.key));
    struct stat st;
    CHECK("the rebuilt entry is a plain file", lstat(so, &st) == 0 && S_ISREG(st.st_mode));
}

static void test_errors(void) {
    dl_jit_lib *lib = NULL;
    dl_jit_info info;
    dl_status s = build_text(NULL, "int dl_test_add(int a, int b) { return a + ; }\n", &lib, &info);
    const char *msg = dl_errmsg(ctx);
    CHECK("compile error is an internal error", s == DL_ERR_INTERNAL && lib == NULL);
    CHECK("message has the compiler's words", strstr(msg, "model.c") && strstr(msg, "error"));
    const char *kept = strstr(msg, "kept in ");
    char dir[600] = "", src[700];
    if (kept) sscanf(kept + 8, "%599[^):]", dir);
    snprintf(src, sizeof src, "%s/model.c", dir);
    CHECK("source kept where the message says", kept && exists(src));
    printf("compile error message: %s\n", msg);

    dl_jit_opts bad = {.cc = "/nonexistent/cc"};
    CHECK("missing compiler: not available", !dl_jit_available(&bad));
    s = build_text(&bad, ADD_SRC, &lib, &info);
    CHECK("missing compiler: clean failure", s == DL_ERR_UNSUPPORTED && lib == NULL &&
                                                 strstr(dl_errmsg(ctx), "/nonexistent/cc"));
    dl_jit_opts fake = {.cc = "/bin/true"}; /* runs, but produces nothing */
    s = build_text(&fake, "int x(void) { return 1; }\n", &lib, &info);
    CHECK("compiler that writes nothing: clean failure", s != DL_OK && lib == NULL);
    dl_jit_opts words = {.cc = "env cc"}; /* CC with extra words */
    s = build_text(&words, "int dl_test_add(int a, int b) { return a - b; }\n", &lib, &info);
    CHECK("CC with several words", s == DL_OK && call2(lib, "dl_test_add", 5, 3) == 2);
    dl_jit_close(lib);

    dl_jit_src srcs[3] = {{"a.c", ADD_SRC, false}, {"a.c", ADD_SRC, false}, {"x.h", "", false}};
    CHECK("no sources", build_srcs(NULL, 0, srcs, &lib, &info) == DL_ERR_INVALID);
    CHECK("duplicate names", build_srcs(NULL, 2, srcs, &lib, &info) == DL_ERR_INVALID);
    CHECK("only headers", build_srcs(NULL, 1, &srcs[2], &lib, &info) == DL_ERR_INVALID);
    const char *bad_names[] = {"../evil.c", "a b.c", "x.cpp", ".hidden.c", "-o.c", "/abs.c"};
    int rejected = 0;
    for (size_t i = 0; i < DL_ARRAY_LEN(bad_names); i++) {
        dl_jit_src one = {bad_names[i], ADD_SRC, false};
        rejected += build_srcs(NULL, 1, &one, &lib, &info) == DL_ERR_INVALID;
    }
    CHECK("unsafe source names rejected", rejected == (int)DL_ARRAY_LEN(bad_names));
    dl_jit_src null_text = {"a.c", NULL, false};
    CHECK("NULL text rejected", build_srcs(NULL, 1, &null_text, &lib, &info) == DL_ERR_INVALID);
    CHECK("NULL output rejected", dl_jit_build(ctx, NULL, 1, srcs, NULL, &info) == DL_ERR_INVALID);
}

static int count_ext(const char *ext) {
    DIR *d = opendir(cache);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        size_t l = strlen(e->d_name), el = strlen(ext);
        if (l == 32 + el && strcmp(e->d_name + 32, ext) == 0) n++;
    }
    if (d) closedir(d);
    return n;
}

/* Finds the one <key>.o in the cache. */
static bool find_object(char *out, size_t n) {
    DIR *d = opendir(cache);
    bool found = false;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l == 34 && strcmp(e->d_name + 32, ".o") == 0) {
            snprintf(out, n, "%s/%s", cache, e->d_name);
            found = true;
        }
    }
    if (d) closedir(d);
    return found;
}

static void test_shared(void) {
    const char *rt_h = "int dl_rt_mul(int a, int b);\n";
    const char *rt_c = "#include \"rt.h\"\nint dl_rt_mul(int a, int b) { return a * b; }\n";
    dl_jit_src a[3] = {{"rt.h", rt_h, true},
                       {"rt.c", rt_c, true},
                       {"model.c", "#include \"rt.h\"\nint dl_model(int x, int y) { return dl_rt_mul(x, y) + 1; }\n", false}};
    dl_jit_lib *la = NULL, *lb = NULL;
    dl_jit_info ia, ib;
    int before = count_ext(".o");
    dl_status s = build_srcs(NULL, 3, a, &la, &ia);
    if (s != DL_OK) printf("build error: %s\n", dl_errmsg(ctx));
    CHECK("model with a shared source and a header", s == DL_OK && call2(la, "dl_model", 6, 7) == 43);
    char obj[600] = "";
    struct stat s1, s2;
    bool have = count_ext(".o") == before + 1 && find_object(obj, sizeof obj) && stat(obj, &s1) == 0;
    CHECK("shared source cached as one <key>.o", have);
    dl_jit_src b[3] = {a[0], a[1], {"model.c", "#include \"rt.h\"\nint dl_model(int x, int y) { return dl_rt_mul(x, y) - 1; }\n", false}};
    s = build_srcs(NULL, 3, b, &lb, &ib);
    CHECK("second model builds and links the cached object",
          s == DL_OK && !ib.cache_hit && call2(lb, "dl_model", 6, 7) == 41);
    CHECK("shared object not recompiled",
          have && stat(obj, &s2) == 0 && s1.st_ino == s2.st_ino &&
              s1.st_mtim.tv_sec == s2.st_mtim.tv_sec && s1.st_mtim.tv_nsec == s2.st_mtim.tv_nsec &&
              count_ext(".o") == before + 1);
    dl_jit_close(la);
    dl_jit_close(lb);
    /* a damaged shared object is noticed too */
    flip_byte(obj, 200);
    dl_jit_src c3[3] = {a[0], a[1], {"model.c", "#include \"rt.h\"\nint dl_model(int x, int y) { return dl_rt_mul(x, y) * 2; }\n", false}};
    s = build_srcs(NULL, 3, c3, &la, &ia);
    CHECK("damaged shared object is recompiled", s == DL_OK && call2(la, "dl_model", 6, 7) == 84 &&
                                                      stat(obj, &s2) == 0 && s2.st_ino != s1.st_ino);
    dl_jit_close(la);
    dl_jit_src d[3] = {{"rt.h", "int dl_rt_mul(int a, int b); /* changed */\n", true}, a[1], a[2]};
    s = build_srcs(NULL, 3, d, &la, &ia);
    CHECK("a changed header gives the shared source a new object",
          s == DL_OK && count_ext(".o") == before + 2);
    dl_jit_close(la);
}

static void test_concurrent(void) {
    char text[200];
    snprintf(text, sizeof text, "int dl_test_add(int a, int b) { return a + b; } /* %ld %ld */\n",
             (long)getpid(), (long)time(NULL));
    int gate[2];
    if (pipe(gate) != 0) {
        CHECK("pipe", false);
        return;
    }
    pid_t kids[4];
    for (int i = 0; i < 4; i++) {
        kids[i] = fork();
        if (kids[i] == 0) {
            char c;
            close(gate[1]);
            if (read(gate[0], &c, 1) < 0) _exit(3); /* all start when the gate closes */
            dl_jit_lib *lib = NULL;
            dl_jit_info info;
            dl_status s = dl_jit_build(ctx, NULL, 1, &(dl_jit_src){"model.c", text, false}, &lib, &info);
            int ok = s == DL_OK && call2(lib, "dl_test_add", 20, 22) == 42;
            if (!ok) fprintf(stderr, "child %d: %s\n", i, dl_errmsg(ctx));
            _exit(ok ? 0 : 1);
        }
    }
    close(gate[0]);
    close(gate[1]);
    int good = 0;
    for (int i = 0; i < 4; i++) {
        int st;
        if (kids[i] > 0 && waitpid(kids[i], &st, 0) == kids[i] && WIFEXITED(st) && WEXITSTATUS(st) == 0)
            good++;
    }
    CHECK("4 processes building the same new key all succeed", good == 4);
    dl_jit_lib *lib = NULL;
    dl_jit_info info;
    dl_status s = build_text(NULL, text, &lib, &info);
    CHECK("and leave a valid entry", s == DL_OK && info.cache_hit && call2(lib, "dl_test_add", 1, 2) == 3);
    dl_jit_close(lib);
}

static void test_no_cache(void) {
    dl_jit_opts o = {.no_cache = true};
    dl_jit_lib *lib = NULL;
    dl_jit_info info;
    int so_before = count_ext(".so");
    dl_status s = build_text(&o, "int dl_test_add(int a, int b) { return 2 * a + b; }\n", &lib, &info);
    CHECK("no_cache builds and loads", s == DL_OK && call2(lib, "dl_test_add", 2, 3) == 7 && !info.cache_hit);
    CHECK("no_cache keeps nothing", strncmp(info.path, cache, strlen(cache)) != 0 && !exists(info.path) &&
                                        count_ext(".so") == so_before);
    dl_jit_close(lib);
    s = build_text(&o, "int dl_test_add(int a, int b) { return 2 * a + b; }\n", &lib, &info);
    CHECK("no_cache never hits", s == DL_OK && !info.cache_hit);
    dl_jit_close(lib);

    char shared_dir[600];
    snprintf(shared_dir, sizeof shared_dir, "%s/open", root);
    mkdir(shared_dir, 0700);
    chmod(shared_dir, 0777); /* others could plant code here: never used as a cache */
    dl_jit_opts bad_dirs[] = {{.cache_dir = "/proc/no/such/dir"}, {.cache_dir = shared_dir}};
    for (size_t i = 0; i < DL_ARRAY_LEN(bad_dirs); i++) {
        s = build_text(&bad_dirs[i], "int dl_test_add(int a, int b) { return 3 * a + b; }\n", &lib, &info);
        CHECK("unusable cache folder: builds in a temp folder",
              s == DL_OK && call2(lib, "dl_test_add", 2, 3) == 9 && !exists(info.path));
        dl_jit_close(lib);
    }
    DIR *d = opendir(shared_dir);
    int entries = 0;
    while (d && readdir(d)) entries++;
    if (d) closedir(d);
    CHECK("nothing written to an unsafe cache folder", entries == 2);
}

static void test_verbose(void) {
    char log[600];
    snprintf(log, sizeof log, "%s/verbose.txt", root);
    fflush(stderr);
    int saved = dup(2), fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 2);
    close(fd);
    dl_jit_opts o = {.verbose = true};
    dl_jit_lib *lib = NULL;
    dl_jit_info info;
    dl_status s = build_text(&o, "int dl_test_add(int a, int b) { return a * b; }\n", &lib, &info);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    dl_jit_close(lib);
    char text[4096] = "";
    FILE *f = fopen(log, "r");
    if (f) {
        text[fread(text, 1, sizeof text - 1, f)] = 0;
        fclose(f);
    }
    CHECK("verbose prints the compile and link commands",
          s == DL_OK && strstr(text, "-std=c11") && strstr(text, " -c ") && strstr(text, "-shared"));
}

/* A ~200-line source: cold build vs cache hit. */
static void test_timing(void) {
    char *text = malloc(1 << 16);
    if (!text) return;
    size_t len = 0;
    len += (size_t)snprintf(text + len, 4096, "#include <math.h>\n#include <stdint.h>\n");
    for (int f = 0; f < 20; f++) {
        len += (size_t)snprintf(text + len, 4096,
                                "void k%d(float *restrict y, const float *restrict x, int64_t n) {\n"
                                "    for (int64_t i = 0; i < n; i++) {\n"
                                "        float v = x[i] * %d.5f + 1.0f;\n"
                                "        v = v > 0 ? v : 0.01f * v;\n"
                                "        v = tanhf(v) + expf(-v * v);\n"
                                "        y[i] = v;\n"
                                "    }\n"
                                "}\n\n",
                                f, f);
    }
    len += (size_t)snprintf(text + len, 4096, "int dl_test_add(int a, int b) { return a + b; }\n");
    dl_jit_lib *lib = NULL;
    dl_jit_info cold, warm;
    dl_status s = build_text(NULL, text, &lib, &cold);
    dl_jit_close(lib);
    dl_status s2 = build_text(NULL, text, &lib, &warm);
    dl_jit_close(lib);
    printf("~200-line source: cold %.1f ms (compiler %.1f ms), warm %.2f ms\n", cold.total_ms,
           cold.build_ms, warm.total_ms);
    /* timings are printed, not asserted: the machine is shared */
    CHECK("200-line source: second build is a cache hit", s == DL_OK && s2 == DL_OK && warm.cache_hit);
    free(text);
}

static void test_alloc_failures(void) {
    int clean = 0, tries = 0;
    for (long k = 0; k < 12; k++) {
        for (int hit = 0; hit < 2; hit++) {
            char text[128];
            snprintf(text, sizeof text, "int dl_test_add(int a, int b) { return a + b + %ld; }\n",
                     hit ? 100 : k);
            dl_jit_lib *lib = NULL;
            dl_jit_info info;
            dl_ctx_clear(ctx);
            dl_alloc_fail_after(k);
            dl_status s = dl_jit_build(ctx, NULL, 1, &(dl_jit_src){"model.c", text, false}, &lib, &info);
            dl_alloc_fail_after(-1);
            tries++;
            if ((s == DL_ERR_NOMEM && !lib) || (s == DL_OK && call2(lib, "dl_test_add", 1, 1) == 2 + (hit ? 100 : k)))
                clean++;
            dl_jit_close(lib);
        }
    }
    CHECK("allocation failures: NOMEM or success", clean == tries);
}

static void test_list_clear(void) {
    char other[600], sub[600], outside[600], link_name[600], stale[600], stale_file[700], mine[600];
    snprintf(other, sizeof other, "%s/notes.txt", cache);
    snprintf(sub, sizeof sub, "%s/keepme", cache);
    snprintf(outside, sizeof outside, "%s/outside.so", root);
    snprintf(link_name, sizeof link_name, "%s/%032d.so", cache, 0);
    FILE *f = fopen(other, "w");
    if (f) fclose(f);
    f = fopen(outside, "w");
    if (f) fclose(f);
    mkdir(sub, 0700);
    if (symlink(outside, link_name) != 0) printf("FAIL symlink\n");
    pid_t dead = fork(); /* a pid that is gone: its temp folder is stale */
    if (dead == 0) _exit(0);
    waitpid(dead, NULL, 0);
    snprintf(stale, sizeof stale, "%s/tmp-%ld-abcdef", cache, (long)dead);
    mkdir(stale, 0700);
    snprintf(stale_file, sizeof stale_file, "%s/model.c", stale);
    f = fopen(stale_file, "w");
    if (f) fclose(f);
    snprintf(mine, sizeof mine, "%s/%032d.so.tmp.%ld.7", cache, 1, (long)getpid());
    f = fopen(mine, "w"); /* a live writer's temp file */
    if (f) fclose(f);

    char *buf = NULL;
    size_t n = 0;
    FILE *mem = open_memstream(&buf, &n);
    dl_status s = dl_cache_list(ctx, NULL, mem);
    fclose(mem);
    int lines = 0;
    for (size_t i = 0; buf && i < n; i++) lines += buf[i] == '\n';
    int entries = count_ext(".so") - 1 + count_ext(".o"); /* minus the link */
    CHECK("list: a line per entry and a total", s == DL_OK && lines == entries + 1 && strstr(buf, "KiB") &&
                                                    strstr(buf, cache));
    const char *last = buf;
    for (size_t i = 0; buf && i + 1 < n; i++)
        if (buf[i] == '\n') last = buf + i + 1;
    printf("cache list: %s", last ? last : "\n");
    free(buf);

    int removed = 0;
    s = dl_cache_clear(ctx, NULL, &removed);
    CHECK("clear removes entries", s == DL_OK && removed > 2 * entries && count_ext(".so") == 0 &&
                                       count_ext(".o") == 0 && count_ext(".meta") == 0);
    CHECK("clear leaves foreign files, folders and link targets", exists(other) && exists(sub) &&
                                                                     exists(outside) && !exists(link_name));
    CHECK("clear removes stale temp folders, keeps live temp files", !exists(stale) && exists(mine));
    unlink(mine);
    buf = NULL;
    mem = open_memstream(&buf, &n);
    s = dl_cache_list(ctx, NULL, mem);
    fclose(mem);
    CHECK("list after clear", s == DL_OK && buf && strncmp(buf, "0 entries", 9) == 0);
    free(buf);

    char dirbuf[600];
    dl_jit_opts o = {.cache_dir = "/some/where"};
    CHECK("cache dir: option, then DLCC_CACHE_DIR",
          strcmp(dl_cache_dir(&o, dirbuf, sizeof dirbuf), "/some/where") == 0 &&
              strcmp(dl_cache_dir(NULL, dirbuf, sizeof dirbuf), cache) == 0);
    o.cache_dir = "/no/such/cache";
    CHECK("list/clear of a missing folder", dl_cache_list(ctx, &o, stdout) == DL_OK &&
                                                dl_cache_clear(ctx, &o, &removed) == DL_OK && removed == 0);
}

/* Removes a test folder tree (the test made everything in it). */
static void remove_tree(const char *path) {
    struct stat st;
    if (lstat(path, &st) != 0) return;
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char sub[1024];
            snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
            remove_tree(sub);
        }
        if (d) closedir(d);
        rmdir(path);
    } else {
        unlink(path);
    }
}

int main(void) {
    snprintf(root, sizeof root, "%s/dlcc-test-jit-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(root)) {
        printf("FAIL mkdtemp\n0 passed, 1 failed\n");
        return 1;
    }
    snprintf(cache, sizeof cache, "%s/cache", root);
    snprintf(home, sizeof home, "%s/home", root);
    setenv("DLCC_CACHE_DIR", cache, 1);
    setenv("HOME", home, 1); /* must stay unused */
    unsetenv("DLCC_CFLAGS");
    ctx = dl_ctx_new();
    if (!dl_jit_available(NULL)) {
        printf("no C compiler: JIT checks skipped\n");
        dl_jit_opts bad = {.cc = "/nonexistent/cc"};
        CHECK("missing compiler: not available", !dl_jit_available(&bad));
    } else {
        test_basic();
        test_errors();
        test_shared();
        test_concurrent();
        test_no_cache();
        test_verbose();
        test_timing();
        test_alloc_failures();
        test_list_clear();
    }
    CHECK("HOME was never used", !exists(home));
    dl_ctx_free(ctx);
    remove_tree(root);
    printf("%d passed, %d failed\n", passed, failed);
    return failed != 0;
}
