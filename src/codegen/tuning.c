/* tuning.c — tuning records (tuning.h): reading and writing the file, keys, and marking a
 * program's conv groups with the algorithm to run. The file is the user's input like a model:
 * its size, line lengths and record count are capped and every line is checked. */
#include "tuning.h"
#include "emit-params.h"
#include "../core/atomic-file.h"
#include "../core/strbuf.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

enum {
    TUNING_FILE_MAX = 16 << 20, /* bytes */
    /* records are looked up by a linear search, once per line read and per layer compiled: a
     * file that serves many models holds a few hundred geometries */
    TUNING_RECORDS_MAX = 4096
};

typedef struct tuning_rec {
    char *key, *note;
    int algo;
} tuning_rec;

struct dl_tuning {
    int n, cap;
    tuning_rec *recs;
};

dl_tuning *dl_tuning_new(void) {
    return dl_calloc(1, sizeof(dl_tuning));
}

void dl_tuning_free(dl_tuning *t) {
    if (!t) return;
    for (int i = 0; i < t->n; i++) dl_free(t->recs[i].key), dl_free(t->recs[i].note);
    dl_free(t->recs);
    dl_free(t);
}

int dl_tuning_count(const dl_tuning *t) {
    return t ? t->n : 0;
}

static int find(const dl_tuning *t, const char *key) {
    for (int i = 0; t && i < t->n; i++)
        if (strcmp(t->recs[i].key, key) == 0) return i;
    return -1;
}

int dl_tuning_get(const dl_tuning *t, const char *key) {
    const int i = find(t, key);
    return i < 0 ? -1 : t->recs[i].algo;
}

dl_status dl_tuning_set(dl_ctx *ctx, dl_tuning *t, const char *key, int algo, const char *note) {
    if (algo < 0 || algo > DL_TUNING_MODEL || strlen(key) >= DL_TUNING_KEY_MAX)
        return dl_fail(ctx, DL_ERR_INVALID, "tuning record: bad algorithm or key");
    char cut[DL_TUNING_NOTE_MAX];
    if (note && strlen(note) >= sizeof cut) {
        memcpy(cut, note, sizeof cut - 1);
        cut[sizeof cut - 1] = 0;
        note = cut;
    }
    char *nk = dl_strdup(key), *nn = note ? dl_strdup(note) : NULL;
    if (!nk || (note && !nn)) {
        dl_free(nk), dl_free(nn);
        return dl_fail(ctx, DL_ERR_NOMEM, "out of memory for tuning records");
    }
    int i = find(t, key);
    if (i >= 0) {
        dl_free(t->recs[i].key), dl_free(t->recs[i].note);
    } else {
        if (t->n == TUNING_RECORDS_MAX) {
            dl_free(nk), dl_free(nn);
            return dl_fail(ctx, DL_ERR_LIMIT, "more than %d tuning records", TUNING_RECORDS_MAX);
        }
        if (t->n == t->cap) {
            const int cap = t->cap ? 2 * t->cap : 32;
            tuning_rec *r = dl_realloc(t->recs, sizeof *r * (size_t)cap);
            if (!r) {
                dl_free(nk), dl_free(nn);
                return dl_fail(ctx, DL_ERR_NOMEM, "out of memory for tuning records");
            }
            t->recs = r, t->cap = cap;
        }
        i = t->n++;
    }
    t->recs[i] = (tuning_rec){.key = nk, .note = nn, .algo = algo};
    return DL_OK;
}

static const char *algo_text(int algo) {
    return algo == DL_TUNING_MODEL ? "model" : dlrt_conv_algo_name(algo);
}

static int algo_named(const char *s, size_t n) {
    for (int a = 0; a <= DL_TUNING_MODEL; a++) {
        const char *name = algo_text(a);
        if (strlen(name) == n && memcmp(name, s, n) == 0) return a;
    }
    return -1;
}

static bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\r';
}

/* One line (len bytes, no newline) of file `path` into t. */
static dl_status parse_line(dl_ctx *ctx, dl_tuning *t, const char *path, int line_no, const char *s,
                            size_t len) {
    size_t i = 0;
    while (i < len && is_space(s[i])) i++;
    if (i == len || s[i] == '#') return DL_OK;
    if (len - i < 5 || memcmp(s + i, "conv ", 5) != 0)
        return dl_fail(ctx, DL_ERR_PARSE,
                       "tuning file '%s' line %d: expected 'conv KEY -> ALGORITHM'", path, line_no);
    i += 5;
    const char *arrow = NULL;
    for (size_t j = i; j + 4 <= len; j++)
        if (memcmp(s + j, " -> ", 4) == 0) {
            arrow = s + j;
            break;
        }
    const size_t key_len = arrow ? (size_t)(arrow - (s + i)) : 0;
    if (!arrow || key_len == 0 || key_len >= DL_TUNING_KEY_MAX)
        return dl_fail(ctx, DL_ERR_PARSE,
                       "tuning file '%s' line %d: expected 'conv KEY -> ALGORITHM' with a key of "
                       "1 to %d characters",
                       path, line_no, DL_TUNING_KEY_MAX - 1);
    char key[DL_TUNING_KEY_MAX];
    memcpy(key, s + i, key_len);
    key[key_len] = 0;
    for (size_t j = 0; j < key_len; j++)
        if ((unsigned char)key[j] < 0x20 || (unsigned char)key[j] > 0x7e)
            return dl_fail(ctx, DL_ERR_PARSE,
                           "tuning file '%s' line %d: the key holds a byte that is not printable "
                           "ASCII",
                           path, line_no);
    size_t a = (size_t)(arrow - s) + 4;
    while (a < len && is_space(s[a])) a++;
    size_t e = a;
    while (e < len && !is_space(s[e]) && s[e] != '#') e++;
    const int algo = algo_named(s + a, e - a);
    if (algo < 0)
        return dl_fail(ctx, DL_ERR_PARSE,
                       "tuning file '%s' line %d: unknown algorithm '%.*s' (gemm1x1, im2col, "
                       "depthwise, winograd, winograd2x2, direct, implicit, model)",
                       path, line_no, (int)(e - a < 40 ? e - a : 40), s + a);
    while (e < len && is_space(s[e])) e++;
    if (e < len && s[e] != '#')
        return dl_fail(ctx, DL_ERR_PARSE,
                       "tuning file '%s' line %d: unexpected text after the algorithm", path,
                       line_no);
    /* the comment is kept as the record's note (without its "# "; dl_tuning_set cuts it) */
    char note[DL_TUNING_LINE_MAX];
    size_t nl = 0;
    if (e < len) {
        e++;
        while (e < len && is_space(s[e])) e++;
        nl = len - e;
        while (nl > 0 && is_space(s[e + nl - 1])) nl--;
        memcpy(note, s + e, nl);
    }
    note[nl] = 0;
    for (size_t j = 0; j < nl; j++)
        if ((unsigned char)note[j] < 0x20 && note[j] != '\t') note[j] = '?';
    const dl_status st = dl_tuning_set(ctx, t, key, algo, nl ? note : NULL);
    if (st != DL_OK) dl_ctx_prefix(ctx, "tuning file '%s' line %d", path, line_no);
    return st;
}

dl_status dl_tuning_load(dl_ctx *ctx, const char *path, bool missing_ok, dl_tuning **out) {
    *out = NULL;
    dl_tuning *t = dl_tuning_new();
    if (!t) return dl_fail(ctx, DL_ERR_NOMEM, "out of memory for tuning records");
    if (missing_ok && access(path, F_OK) != 0 && errno == ENOENT) {
        *out = t;
        return DL_OK;
    }
    void *data = NULL;
    size_t size = 0;
    dl_status s = dl_read_file(ctx, path, TUNING_FILE_MAX, &data, &size);
    if (s != DL_OK) {
        dl_tuning_free(t);
        dl_ctx_prefix(ctx, "tuning file");
        return s;
    }
    const char *c = data;
    int line_no = 0;
    for (size_t at = 0; at < size && s == DL_OK;) {
        const char *nl = memchr(c + at, '\n', size - at);
        const size_t len = nl ? (size_t)(nl - (c + at)) : size - at;
        line_no++;
        if (len >= DL_TUNING_LINE_MAX)
            s = dl_fail(ctx, DL_ERR_LIMIT, "tuning file '%s' line %d: longer than %d bytes", path,
                        line_no, DL_TUNING_LINE_MAX - 1);
        else if (memchr(c + at, 0, len))
            s = dl_fail(ctx, DL_ERR_PARSE, "tuning file '%s' line %d: holds a NUL byte", path,
                        line_no);
        else
            s = parse_line(ctx, t, path, line_no, c + at, len);
        at += len + 1;
    }
    dl_free(data);
    if (s != DL_OK) {
        dl_tuning_free(t);
        return s;
    }
    *out = t;
    return DL_OK;
}

dl_status dl_tuning_write(dl_ctx *ctx, const dl_tuning *t, const char *path, const char *header) {
    dl_sbuf b = {0};
    dl_sb_put(&b, "# dlcc tuning records (dlcc tune --help): conv KEY -> ALGORITHM\n");
    for (const char *h = header; h && *h;) {
        const char *nl = strchr(h, '\n');
        const size_t n = nl ? (size_t)(nl - h) : strlen(h);
        dl_sb_put(&b, "# ");
        dl_sb_putn(&b, h, n);
        dl_sb_put(&b, "\n");
        h += n + (nl != NULL);
    }
    for (int i = 0; i < t->n; i++) {
        dl_sb_printf(&b, "conv %s -> %s", t->recs[i].key, algo_text(t->recs[i].algo));
        if (t->recs[i].note) dl_sb_printf(&b, "  # %s", t->recs[i].note);
        dl_sb_put(&b, "\n");
    }
    dl_status s = dl_sb_status(ctx, &b);
    if (s == DL_OK)
        s = dl_atomic_write_buf(ctx, path, "tuning file", DL_ATOMIC_SYNC, dl_sb_str(&b), b.len);
    dl_sb_free(&b);
    return s;
}

/* "a", "axb" or "axbxc": the first nsp entries of v. */
static void dims_text(char *buf, size_t n, int nsp, const int64_t *v) {
    size_t at = 0;
    buf[0] = 0;
    for (int d = 0; d < nsp && at < n; d++)
        at += (size_t)snprintf(buf + at, n - at, "%s%lld", d ? "x" : "", (long long)v[d]);
}

void dl_tuning_conv_key(const dlrt_conv *p, const char *isa, char *buf, size_t n) {
    char in[64], k[64], st[64], dil[64], pad[64], out[64];
    const int ns = p->nsp < 1 ? 1 : p->nsp > 3 ? 3 : p->nsp;
    dims_text(in, sizeof in, ns, p->in);
    dims_text(k, sizeof k, ns, p->k);
    dims_text(st, sizeof st, ns, p->stride);
    dims_text(dil, sizeof dil, ns, p->dil);
    dims_text(pad, sizeof pad, ns, p->pad_begin);
    dims_text(out, sizeof out, ns, p->out);
    char batch[24] = "*";
    if (p->n > 0) snprintf(batch, sizeof batch, "%lld", (long long)p->n);
    /* bfloat16 products change the GEMM algorithms' speeds: their records are apart */
    snprintf(buf, n, "%s%s n=%s c=%lld>%lld g=%lld in=%s k=%s s=%s d=%s p=%s out=%s", isa,
             p->bf16 ? "+bf16" : "", batch, (long long)p->c_in, (long long)p->c_out,
             (long long)p->group, in, k, st, dil, pad, out);
}

bool dl_tuning_conv_of(const dl_group *gr, dlrt_conv *p, int *n_sym) {
    dl_conv_params cp;
    if (gr->kind != DL_G_CONV || dl_conv_params_of(NULL, gr, &cp) != DL_OK) return false;
    *p = cp.p;
    p->tuned = 0;
    if (cp.n_sym >= 0) p->n = 0;
    if (n_sym) *n_sym = cp.n_sym;
    return true;
}

int dl_tuning_conv_algo(const dl_group *gr, const int64_t *syms) {
    dlrt_conv p;
    int n_sym = -1;
    if (!dl_tuning_conv_of(gr, &p, &n_sym)) return -1;
    p.tuned = gr->conv_tuned;
    /* packed as emit.c packs them (with the batch unknown when symbolic) */
    const int emitted =
        dl_gemm_packed_weight(gr->nodes[0]->in[1]) ? dlrt_conv_packs_weights(&p) : 0;
    if (n_sym >= 0) p.n = syms ? syms[n_sym] : 1;
    return dlrt_conv_runs(&p, emitted);
}

int dl_tuning_apply(const dl_tuning *t, int force, dl_fusion *f, const char *isa) {
    int set = 0;
    for (int gi = 0; f && gi < f->n; gi++) {
        dl_group *gr = &f->groups[gi];
        dlrt_conv p;
        if (!dl_tuning_conv_of(gr, &p, NULL) || (p.group > 1 && p.c_in == p.group)) continue;
        int algo = force;
        if (force < 0) {
            char key[DL_TUNING_KEY_MAX];
            dl_tuning_conv_key(&p, isa, key, sizeof key);
            algo = dl_tuning_get(t, key);
        }
        if (algo < 0 || algo == DL_TUNING_MODEL || !dlrt_conv_algo_ok(&p, algo)) continue;
        gr->conv_tuned = 1 + algo;
        set++;
    }
    return set;
}
