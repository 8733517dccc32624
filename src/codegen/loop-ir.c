/* loop-ir.c — loop-IR functions and their builders (see loop-ir.h): buffers, variables, typed
 * expressions with small constant folding for index math, statements, and loop look-ups the
 * schedule primitives and tests use. */
#include "loop-ir.h"

#include <stdlib.h>

dl_status dl_lfunc_new(dl_ctx *ctx, const char *name, dl_lfunc **out) {
    *out = NULL;
    dl_lfunc *f = dl_calloc(1, sizeof *f);
    if (!f) return dl_fail(ctx, DL_ERR_NOMEM, "out of memory (loop IR)");
    f->name = dl_arena_strdup(&f->arena, name ? name : "kernel");
    f->body = dl_ls_block(f);
    if (!f->name || !f->body) {
        dl_lfunc_free(f);
        return dl_fail(ctx, DL_ERR_NOMEM, "out of memory (loop IR)");
    }
    *out = f;
    return DL_OK;
}

void dl_lfunc_free(dl_lfunc *f) {
    if (!f) return;
    dl_free(f->bufs);
    dl_free(f->vars);
    dl_arena_free(&f->arena);
    dl_free(f);
}

dl_status dl_lfunc_status(dl_ctx *ctx, const dl_lfunc *f) {
    if (f->oom) return dl_fail(ctx, DL_ERR_NOMEM, "out of memory building loop IR for %s", f->name);
    return DL_OK;
}

static void *falloc(dl_lfunc *f, size_t n) {
    void *p = dl_arena_alloc(&f->arena, n);
    if (!p) f->oom = true;
    return p;
}

/* Grows a heap array of elem-sized items to hold one more. */
static bool grow(dl_lfunc *f, void **items, int *cap, int n, size_t elem) {
    if (n < *cap) return true;
    int nc = *cap ? *cap * 2 : 16;
    void *p = dl_realloc(*items, (size_t)nc * elem);
    if (!p) {
        f->oom = true;
        return false;
    }
    *items = p;
    *cap = nc;
    return true;
}

int dl_lf_buf(dl_lfunc *f, int slot, dl_dtype dtype) {
    for (int i = 0; i < f->n_bufs; i++)
        if (f->bufs[i].slot == slot && f->bufs[i].dtype == dtype) return i;
    if (!grow(f, (void **)&f->bufs, &f->cap_bufs, f->n_bufs, sizeof(dl_lbuf))) return -1;
    f->bufs[f->n_bufs] = (dl_lbuf){.slot = slot, .dtype = dtype, .written = false};
    return f->n_bufs++;
}

int dl_lf_find_var(const dl_lfunc *f, const char *name) {
    for (int i = 0; i < f->n_vars; i++)
        if (strcmp(f->vars[i].name, name) == 0) return i;
    return -1;
}

int dl_lf_var(dl_lfunc *f, const char *name, dl_dtype type, dl_lvar_kind kind) {
    char buf[64];
    snprintf(buf, sizeof buf, "%s", name);
    for (int k = 2; dl_lf_find_var(f, buf) >= 0; k++) snprintf(buf, sizeof buf, "%s_%d", name, k);
    if (!grow(f, (void **)&f->vars, &f->cap_vars, f->n_vars, sizeof(dl_lvar))) return -1;
    const char *nm = dl_arena_strdup(&f->arena, buf);
    if (!nm) {
        f->oom = true;
        return -1;
    }
    f->vars[f->n_vars] = (dl_lvar){.name = nm, .type = type, .kind = kind};
    return f->n_vars++;
}

static void collect_loops(const dl_lstmt *s, int *vars, int cap, int *n) {
    if (!s) return;
    switch (s->kind) {
    case DL_LS_BLOCK:
        for (int i = 0; i < s->n; i++) collect_loops(s->items[i], vars, cap, n);
        break;
    case DL_LS_FOR:
        if (*n < cap) vars[*n] = s->var;
        (*n)++;
        collect_loops(s->body, vars, cap, n);
        break;
    case DL_LS_IF:
        collect_loops(s->then_s, vars, cap, n);
        collect_loops(s->else_s, vars, cap, n);
        break;
    default:
        break;
    }
}

int dl_lf_loops(const dl_lfunc *f, int *vars, int cap) {
    int n = 0;
    collect_loops(f->body, vars, cap, &n);
    return n;
}

static dl_lstmt *find_loop(dl_lstmt *s, int var, dl_lstmt **path, int *depth) {
    if (!s) return NULL;
    switch (s->kind) {
    case DL_LS_BLOCK:
        for (int i = 0; i < s->n; i++) {
            dl_lstmt *r = find_loop(s->items[i], var, path, depth);
            if (r) return r;
        }
        return NULL;
    case DL_LS_FOR: {
        if (s->var == var) return s;
        int d = *depth;
        if (path && d < DL_LOOP_MAX_DEPTH) path[d] = s;
        (*depth)++;
        dl_lstmt *r = find_loop(s->body, var, path, depth);
        if (!r) *depth = d;
        return r;
    }
    case DL_LS_IF: {
        dl_lstmt *r = find_loop(s->then_s, var, path, depth);
        return r ? r : find_loop(s->else_s, var, path, depth);
    }
    default:
        return NULL;
    }
}

dl_lstmt *dl_lf_find_loop(const dl_lfunc *f, int var, dl_lstmt **path, int *depth) {
    int d = 0;
    dl_lstmt *r = find_loop(f->body, var, path, &d);
    if (depth) *depth = d;
    return r;
}

/* ---------------------------------------------------------------- expressions */

static dl_lexpr *mk(dl_lfunc *f, dl_lx_kind kind, dl_dtype t, int n) {
    dl_lexpr *e = falloc(f, sizeof *e + (size_t)n * sizeof(dl_lexpr *));
    if (!e) return NULL;
    e->kind = kind;
    e->type = t;
    e->n = n;
    e->a = (dl_lexpr **)(e + 1);
    return e;
}

dl_lexpr *dl_le_int(dl_lfunc *f, dl_dtype t, int64_t v) {
    dl_lexpr *e = mk(f, DL_LX_INT, t, 0);
    if (e) e->i = v;
    return e;
}

dl_lexpr *dl_le_i64(dl_lfunc *f, int64_t v) {
    return dl_le_int(f, DL_I64, v);
}

dl_lexpr *dl_le_float(dl_lfunc *f, dl_dtype t, double v) {
    DL_ASSERT(t == DL_F32 || t == DL_F64);
    dl_lexpr *e = mk(f, DL_LX_FLOAT, t, 0);
    if (e) e->f = t == DL_F32 ? (double)(float)v : v;
    return e;
}

dl_lexpr *dl_le_var(dl_lfunc *f, int var) {
    if (var < 0) return NULL;
    dl_lexpr *e = mk(f, DL_LX_VAR, f->vars[var].type, 0);
    if (e) e->var = var;
    return e;
}

dl_lexpr *dl_le_sym(dl_lfunc *f, int sym) {
    dl_lexpr *e = mk(f, DL_LX_SYM, DL_I64, 0);
    if (e) e->var = sym;
    return e;
}

dl_lexpr *dl_le_kdim(dl_lfunc *f, dl_kdim d) {
    return d.sym >= 0 ? dl_le_sym(f, d.sym) : dl_le_i64(f, d.c);
}

static bool is_cmp(dl_lop op) {
    return op >= DL_LOP_LT && op <= DL_LOP_OR;
}

dl_lexpr *dl_le_bin(dl_lfunc *f, dl_lop op, dl_lexpr *a, dl_lexpr *b) {
    if (!a || !b) return NULL;
    DL_ASSERT(op < DL_LOP_NEG);
    DL_ASSERT(a->type == b->type);
    dl_lexpr *e = mk(f, DL_LX_BIN, is_cmp(op) ? DL_BOOL : a->type, 2);
    if (!e) return NULL;
    e->op = op;
    e->a[0] = a;
    e->a[1] = b;
    return e;
}

dl_lexpr *dl_le_un(dl_lfunc *f, dl_lop op, dl_lexpr *a) {
    if (!a) return NULL;
    DL_ASSERT(op >= DL_LOP_NEG && op < DL_LOP_COUNT);
    dl_lexpr *e = mk(f, DL_LX_UN, op == DL_LOP_NOT ? DL_BOOL : a->type, 1);
    if (!e) return NULL;
    e->op = op;
    e->a[0] = a;
    return e;
}

dl_lexpr *dl_le_select(dl_lfunc *f, dl_lexpr *c, dl_lexpr *a, dl_lexpr *b) {
    if (!c || !a || !b) return NULL;
    DL_ASSERT(c->type == DL_BOOL && a->type == b->type);
    dl_lexpr *e = mk(f, DL_LX_SELECT, a->type, 3);
    if (!e) return NULL;
    e->a[0] = c;
    e->a[1] = a;
    e->a[2] = b;
    return e;
}

dl_lexpr *dl_le_cast(dl_lfunc *f, dl_dtype t, dl_lexpr *a) {
    if (!a) return NULL;
    if (a->type == t) return a;
    dl_lexpr *e = mk(f, DL_LX_CAST, t, 1);
    if (e) e->a[0] = a;
    return e;
}

dl_lexpr *dl_le_load(dl_lfunc *f, int buf, dl_lexpr *index) {
    if (!index || buf < 0) return NULL;
    dl_lexpr *e = mk(f, DL_LX_LOAD, f->bufs[buf].dtype, 1);
    if (!e) return NULL;
    e->var = buf;
    e->a[0] = index;
    return e;
}

dl_lexpr *dl_le_call(dl_lfunc *f, dl_dtype t, const char *fn, int n, dl_lexpr *const *args) {
    for (int i = 0; i < n; i++)
        if (!args[i]) return NULL;
    dl_lexpr *e = mk(f, DL_LX_CALL, t, n);
    if (!e) return NULL;
    e->fn = fn;
    for (int i = 0; i < n; i++) e->a[i] = args[i];
    return e;
}

dl_lexpr *dl_le_call1(dl_lfunc *f, dl_dtype t, const char *fn, dl_lexpr *a) {
    return dl_le_call(f, t, fn, 1, &a);
}

dl_lexpr *dl_le_call2(dl_lfunc *f, dl_dtype t, const char *fn, dl_lexpr *a, dl_lexpr *b) {
    dl_lexpr *args[2] = {a, b};
    return dl_le_call(f, t, fn, 2, args);
}

bool dl_le_is_const(const dl_lexpr *e, int64_t *v) {
    if (!e || e->kind != DL_LX_INT) return false;
    if (v) *v = e->i;
    return true;
}

dl_lexpr *dl_le_iadd(dl_lfunc *f, dl_lexpr *a, dl_lexpr *b) {
    if (!a || !b) return NULL;
    int64_t x, y;
    bool ca = dl_le_is_const(a, &x), cb = dl_le_is_const(b, &y);
    if (ca && cb && !__builtin_add_overflow(x, y, &x)) return dl_le_i64(f, x);
    if (ca && x == 0) return b;
    if (cb && y == 0) return a;
    return dl_le_bin(f, DL_LOP_ADD, a, b);
}

dl_lexpr *dl_le_imul(dl_lfunc *f, dl_lexpr *a, dl_lexpr *b) {
    if (!a || !b) return NULL;
    int64_t x, y;
    bool ca = dl_le_is_const(a, &x), cb = dl_le_is_const(b, &y);
    if (ca && cb && !__builtin_mul_overflow(x, y, &x)) return dl_le_i64(f, x);
    if ((ca && x == 0) || (cb && y == 0)) return dl_le_i64(f, 0);
    if (ca && x == 1) return b;
    if (cb && y == 1) return a;
    if (ca && !cb) return dl_le_imul(f, b, a); /* constants to the right */
    int64_t z;
    if (cb && a->kind == DL_LX_BIN && a->op == DL_LOP_MUL && dl_le_is_const(a->a[1], &z) &&
        !__builtin_mul_overflow(z, y, &z))
        return dl_le_bin(f, DL_LOP_MUL, a->a[0], dl_le_i64(f, z)); /* (x * c1) * c2 */
    return dl_le_bin(f, DL_LOP_MUL, a, b);
}

bool dl_le_uses_var(const dl_lexpr *e, int var) {
    if (!e) return false;
    if (e->kind == DL_LX_VAR && e->var == var) return true;
    for (int i = 0; i < e->n; i++)
        if (dl_le_uses_var(e->a[i], var)) return true;
    return false;
}

/* ---------------------------------------------------------------- statements */

static dl_lstmt *mks(dl_lfunc *f, dl_ls_kind kind) {
    dl_lstmt *s = falloc(f, sizeof *s);
    if (s) s->kind = kind;
    return s;
}

dl_lstmt *dl_ls_block(dl_lfunc *f) {
    return mks(f, DL_LS_BLOCK);
}

void dl_ls_append(dl_lfunc *f, dl_lstmt *block, dl_lstmt *s) {
    if (!block || !s) {
        f->oom = f->oom || !s || !block;
        return;
    }
    DL_ASSERT(block->kind == DL_LS_BLOCK);
    if (block->n == block->cap) {
        int nc = block->cap ? block->cap * 2 : 8;
        dl_lstmt **items = falloc(f, (size_t)nc * sizeof *items);
        if (!items) return;
        if (block->n) memcpy(items, block->items, (size_t)block->n * sizeof *items);
        block->items = items;
        block->cap = nc;
    }
    block->items[block->n++] = s;
}

dl_lstmt *dl_ls_for(dl_lfunc *f, int var, dl_lexpr *extent, dl_lstmt *body) {
    if (var < 0 || !extent || !body) return NULL;
    DL_ASSERT(f->vars[var].kind == DL_LV_LOOP && extent->type == DL_I64);
    dl_lstmt *s = mks(f, DL_LS_FOR);
    if (!s) return NULL;
    s->var = var;
    s->extent = extent;
    s->body = body;
    s->red_var = -1;
    return s;
}

dl_lstmt *dl_ls_store(dl_lfunc *f, int buf, dl_lexpr *index, dl_lexpr *value) {
    if (buf < 0 || !index || !value) return NULL;
    dl_lstmt *s = mks(f, DL_LS_STORE);
    if (!s) return NULL;
    DL_ASSERT(value->type == f->bufs[buf].dtype);
    f->bufs[buf].written = true;
    s->buf = buf;
    s->index = index;
    s->value = value;
    return s;
}

dl_lstmt *dl_ls_decl(dl_lfunc *f, int var, dl_lexpr *init) {
    if (var < 0 || !init) return NULL;
    DL_ASSERT(f->vars[var].kind != DL_LV_LOOP && f->vars[var].type == init->type);
    dl_lstmt *s = mks(f, DL_LS_DECL);
    if (!s) return NULL;
    s->var = var;
    s->value = init;
    return s;
}

dl_lstmt *dl_ls_assign(dl_lfunc *f, int var, dl_lexpr *value) {
    if (var < 0 || !value) return NULL;
    DL_ASSERT(f->vars[var].kind == DL_LV_LOCAL && f->vars[var].type == value->type);
    dl_lstmt *s = mks(f, DL_LS_ASSIGN);
    if (!s) return NULL;
    s->var = var;
    s->value = value;
    return s;
}

dl_lstmt *dl_ls_if(dl_lfunc *f, dl_lexpr *cond, dl_lstmt *then_s, dl_lstmt *else_s) {
    if (!cond || !then_s) return NULL;
    DL_ASSERT(cond->type == DL_BOOL);
    dl_lstmt *s = mks(f, DL_LS_IF);
    if (!s) return NULL;
    s->cond = cond;
    s->then_s = then_s;
    s->else_s = else_s;
    return s;
}
