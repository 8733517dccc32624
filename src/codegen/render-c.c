/* render-c.c — renders a loop-IR function as C (the conventions of lower.h) and the prelude of
 * includes and scalar helpers that generated code calls. Schedules become pragmas
 * (`#pragma omp simd`, honoured under -fopenmp or -fopenmp-simd, and `#pragma GCC unroll`) and
 * parallel loops calls of the runtime's thread pool: each is outlined into a function of a
 * range of its iterations (NAME_pK) that reads the variables it needs from a struct, which
 * dlrt_parallel (threads.c) runs in pieces. No pointer is `restrict`: the memory planner may
 * run an elementwise kernel in place. */
#include "loop-ir.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Helpers follow the reference kernels' scalar rules exactly (NaN propagation, integer division
 * by zero giving 0, saturating float → int conversion, activations computed in double). */
/* clang-format off */
static const char prelude[] =
    "#include <math.h>\n"
    "#include <stdbool.h>\n"
    "#include <stddef.h>\n"
    "#include <stdint.h>\n"
    "\n"
    "#define DLG_FN static inline __attribute__((unused))\n"
    "/* the runtime's thread pool (dlrt.h), which parallel loops are outlined for */\n"
    "typedef void (*dlrt_range_fn)(void *ctx, int64_t lo, int64_t hi);\n"
    "__attribute__((visibility(\"hidden\"))) void dlrt_parallel(int64_t n, int64_t pieces, int64_t align,\n"
    "                                                       int max_team, dlrt_range_fn fn, void *ctx);\n"
    "DLG_FN float dlg_minf(float a, float b) { return (a != a || b != b) ? NAN : (b < a ? b : a); }\n"
    "DLG_FN float dlg_maxf(float a, float b) { return (a != a || b != b) ? NAN : (b > a ? b : a); }\n"
    "DLG_FN double dlg_min(double a, double b) { return (a != a || b != b) ? NAN : (b < a ? b : a); }\n"
    "DLG_FN double dlg_max(double a, double b) { return (a != a || b != b) ? NAN : (b > a ? b : a); }\n"
    "DLG_FN int64_t dlg_divs(int64_t a, int64_t b) {\n"
    "    return b == 0 ? 0 : b == -1 ? (int64_t)(0 - (uint64_t)a) : a / b;\n"
    "}\n"
    "DLG_FN uint64_t dlg_divu(uint64_t a, uint64_t b) { return b == 0 ? 0 : a / b; }\n"
    "DLG_FN int64_t dlg_fmods(int64_t a, int64_t b) { return (b == 0 || b == -1) ? 0 : a % b; }\n"
    "DLG_FN int64_t dlg_pmods(int64_t a, int64_t b) {\n"
    "    int64_t r = dlg_fmods(a, b);\n"
    "    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;\n"
    "}\n"
    "DLG_FN uint64_t dlg_modu(uint64_t a, uint64_t b) { return b == 0 ? 0 : a % b; }\n"
    "DLG_FN double dlg_pmod(double a, double b) {\n"
    "    double r = fmod(a, b);\n"
    "    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;\n"
    "}\n"
    "DLG_FN int64_t dlg_f2i(double v) {\n"
    "    if (v != v) return 0;\n"
    "    if (v >= 9223372036854775808.0) return INT64_MAX;\n"
    "    if (v < -9223372036854775808.0) return INT64_MIN;\n"
    "    return (int64_t)v;\n"
    "}\n"
    "DLG_FN uint64_t dlg_f2u(double v) {\n"
    "    if (v >= 9223372036854775808.0) return v >= 18446744073709551616.0 ? UINT64_MAX : (uint64_t)v;\n"
    "    return (uint64_t)dlg_f2i(v);\n"
    "}\n"
    "DLG_FN uint64_t dlg_ipow(uint64_t base, int64_t e, int e_unsigned, int base_signed) {\n"
    "    if (e_unsigned || e >= 0) {\n"
    "        uint64_t r = 1, k = (uint64_t)e;\n"
    "        while (k) {\n"
    "            if (k & 1) r *= base;\n"
    "            k >>= 1;\n"
    "            if (k) base *= base;\n"
    "        }\n"
    "        return r;\n"
    "    }\n"
    "    if (base == 1) return 1;\n"
    "    if (base_signed && base == UINT64_MAX) return (e & 1) ? UINT64_MAX : 1;\n"
    "    return 0;\n"
    "}\n"
    "DLG_FN double dlg_sign(double x) { return x != x ? x : (double)((x > 0) - (x < 0)); }\n"
    "DLG_FN double dlg_sigmoid(double x) {\n"
    "    return x >= 0 ? 1.0 / (1.0 + exp(-x)) : exp(x) / (1.0 + exp(x));\n"
    "}\n"
    "/* one unconditional expf, so a loop of these vectorizes (within an ulp of the two-sided form) */\n"
    "DLG_FN float dlg_sigmoidf(float x) {\n"
    "    float e = expf(-fabsf(x)), r = 1.0f / (1.0f + e);\n"
    "    return x >= 0 ? r : e * r;\n"
    "}\n"
    "DLG_FN double dlg_softplus(double x) { return x > 0 ? x + log1p(exp(-x)) : log1p(exp(x)); }\n"
    "DLG_FN float dlg_softplusf(float x) {\n"
    "    return x > 0 ? x + log1pf(expf(-x)) : log1pf(expf(x));\n"
    "}\n"
    "DLG_FN double dlg_mish(double x) { return x * tanh(dlg_softplus(x)); }\n"
    "DLG_FN float dlg_mishf(float x) { return x * tanhf(dlg_softplusf(x)); }\n"
    "DLG_FN double dlg_elu(double x, double a) { return x < 0 ? a * (exp(x) - 1.0) : x; }\n"
    "DLG_FN double dlg_selu(double x, double a, double g) {\n"
    "    return x > 0 ? g * x : g * (a * exp(x) - a);\n"
    "}\n"
    "DLG_FN double dlg_celu(double x, double a) {\n"
    "    return fmax(0.0, x) + fmin(0.0, a * (exp(x / a) - 1.0));\n"
    "}\n"
    "DLG_FN double dlg_hardsigmoid(double x, double a, double b) {\n"
    "    return fmax(0.0, fmin(1.0, a * x + b));\n"
    "}\n"
    "DLG_FN double dlg_hardswish(double x) { return x * fmax(0.0, fmin(1.0, x / 6.0 + 0.5)); }\n"
    "DLG_FN double dlg_softsign(double x) { return x / (1.0 + fabs(x)); }\n"
    "DLG_FN double dlg_shrink(double x, double l, double b) {\n"
    "    return x < -l ? x + b : (x > l ? x - b : 0.0);\n"
    "}\n"
    "DLG_FN double dlg_gelu(double x) { return 0.5 * x * (1.0 + erf(x / sqrt(2.0))); }\n"
    "DLG_FN double dlg_gelu_tanh(double x) {\n"
    "    double c = sqrt(2.0 / 3.14159265358979323846);\n"
    "    return 0.5 * x * (1.0 + tanh(c * (x + 0.044715 * x * x * x)));\n"
    "}\n"
    "\n";
/* clang-format on */

void dl_render_prelude(dl_sbuf *sb) {
    dl_sb_put(sb, prelude);
}

const char *dl_ctype(dl_dtype t) {
    switch (t) {
    case DL_F32:
        return "float";
    case DL_F64:
        return "double";
    case DL_I8:
        return "int8_t";
    case DL_U8:
        return "uint8_t";
    case DL_I16:
        return "int16_t";
    case DL_U16:
    case DL_F16:
    case DL_BF16:
        return "uint16_t";
    case DL_I32:
        return "int32_t";
    case DL_U32:
        return "uint32_t";
    case DL_I64:
        return "int64_t";
    case DL_U64:
        return "uint64_t";
    case DL_BOOL:
        return "bool";
    default:
        return "void";
    }
}

const char *dl_ctype_mem(dl_dtype t) {
    return t == DL_BOOL ? "uint8_t" : dl_ctype(t);
}

/* ---------------------------------------------------------------- expressions */

typedef struct rctx {
    const dl_lfunc *f;
    dl_sbuf *sb;
    char (*bufname)[32];
    int n_par;  /* parallel loops met so far (numbers the outlined functions) */
    bool nomem; /* an allocation failed while rendering */
} rctx;

enum {
    P_SELECT = 3,
    P_OR = 4,
    P_AND = 5,
    P_BOR = 6,
    P_BXOR = 7,
    P_BAND = 8,
    P_EQ = 9,
    P_REL = 10,
    P_SHIFT = 11,
    P_ADD = 12,
    P_MUL = 13,
    P_UNARY = 15,
    P_PRIMARY = 16
};

static const struct {
    const char *c;
    int prec;
} binops[DL_LOP_NEG] = {
    [DL_LOP_ADD] = {"+", P_ADD},    [DL_LOP_SUB] = {"-", P_ADD},    [DL_LOP_MUL] = {"*", P_MUL},
    [DL_LOP_DIV] = {"/", P_MUL},    [DL_LOP_MOD] = {"%", P_MUL},    [DL_LOP_WADD] = {"+", P_ADD},
    [DL_LOP_WSUB] = {"-", P_ADD},   [DL_LOP_WMUL] = {"*", P_MUL},   [DL_LOP_MIN] = {"<", P_SELECT},
    [DL_LOP_MAX] = {">", P_SELECT}, [DL_LOP_BAND] = {"&", P_BAND},  [DL_LOP_BOR] = {"|", P_BOR},
    [DL_LOP_BXOR] = {"^", P_BXOR},  [DL_LOP_SHL] = {"<<", P_SHIFT}, [DL_LOP_SHR] = {">>", P_SHIFT},
    [DL_LOP_LT] = {"<", P_REL},     [DL_LOP_LE] = {"<=", P_REL},    [DL_LOP_GT] = {">", P_REL},
    [DL_LOP_GE] = {">=", P_REL},    [DL_LOP_EQ] = {"==", P_EQ},     [DL_LOP_NE] = {"!=", P_EQ},
    [DL_LOP_AND] = {"&&", P_AND},   [DL_LOP_OR] = {"||", P_OR},
};

static bool is_small_int(dl_dtype t) {
    return t == DL_I8 || t == DL_U8 || t == DL_I16 || t == DL_U16;
}

/* The unsigned type wrapping arithmetic on t goes through (NULL: t's own ops wrap or are float). */
static const char *wrap_type(dl_dtype t) {
    switch (t) {
    case DL_I8:
    case DL_I16:
    case DL_I32:
    case DL_U8:
    case DL_U16:
        return "uint32_t";
    case DL_I64:
        return "uint64_t";
    default:
        return NULL;
    }
}

static int expr_prec(const dl_lexpr *e) {
    switch (e->kind) {
    case DL_LX_BIN: {
        if (e->op == DL_LOP_MIN || e->op == DL_LOP_MAX) return P_SELECT;
        bool wrap = (e->op == DL_LOP_WADD || e->op == DL_LOP_WSUB || e->op == DL_LOP_WMUL) &&
                    wrap_type(e->type);
        bool narrow = is_small_int(e->type) && !(e->op >= DL_LOP_LT && e->op <= DL_LOP_OR);
        return wrap || narrow ? P_UNARY : binops[e->op].prec;
    }
    case DL_LX_UN:
    case DL_LX_CAST:
        return P_UNARY;
    case DL_LX_SELECT:
        return P_SELECT;
    case DL_LX_LOAD:
        return e->type == DL_BOOL ? P_EQ : P_PRIMARY;
    default:
        return P_PRIMARY;
    }
}

static void put_float(dl_sbuf *sb, dl_dtype t, double v) {
    if (isnan(v)) {
        dl_sb_put(sb, "NAN");
        return;
    }
    if (isinf(v)) {
        dl_sb_put(sb, v > 0 ? "INFINITY" : "(-INFINITY)");
        return;
    }
    char buf[64];
    /* the shortest spelling that reads back as the same value */
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, sizeof buf, "%.*g", p, v);
        if (t == DL_F32 ? strtof(buf, NULL) == (float)v : strtod(buf, NULL) == v) break;
    }
    if (!strpbrk(buf, ".en")) strcat(buf, ".0");
    dl_sb_printf(sb, v < 0 || (v == 0 && signbit(v)) ? "(%s%s)" : "%s%s", buf,
                 t == DL_F32 ? "f" : "");
}

static void put_int(dl_sbuf *sb, dl_dtype t, int64_t v) {
    if (t == DL_U64 || t == DL_U32) {
        dl_sb_printf(sb, t == DL_U64 ? "UINT64_C(%llu)" : "%lluu", (unsigned long long)(uint64_t)v);
    } else if (v == INT64_MIN) {
        dl_sb_put(sb, "INT64_MIN");
    } else if (v < INT32_MIN || v > INT32_MAX) {
        dl_sb_printf(sb, v < 0 ? "(INT64_C(%lld))" : "INT64_C(%lld)", (long long)v);
    } else {
        dl_sb_printf(sb, v < 0 ? "(%lld)" : "%lld", (long long)v);
    }
}

static void render_expr(rctx *r, const dl_lexpr *e, int min_prec);

static void render_bin(rctx *r, const dl_lexpr *e) {
    dl_sbuf *sb = r->sb;
    const dl_lexpr *a = e->a[0], *b = e->a[1];
    int p = binops[e->op].prec;
    if (e->op == DL_LOP_MIN || e->op == DL_LOP_MAX) {
        render_expr(r, a, P_REL + 1);
        dl_sb_printf(sb, " %s ", binops[e->op].c);
        render_expr(r, b, P_REL + 1);
        dl_sb_put(sb, " ? ");
        render_expr(r, a, 0);
        dl_sb_put(sb, " : ");
        render_expr(r, b, P_SELECT);
        return;
    }
    const char *w = (e->op == DL_LOP_WADD || e->op == DL_LOP_WSUB || e->op == DL_LOP_WMUL)
                        ? wrap_type(e->type)
                        : NULL;
    bool narrow = is_small_int(e->type) && !(e->op >= DL_LOP_LT && e->op <= DL_LOP_OR);
    if (w) {
        dl_sb_printf(sb, "(%s)((%s)", dl_ctype(e->type), w);
        render_expr(r, a, P_UNARY);
        dl_sb_printf(sb, " %s (%s)", binops[e->op].c, w);
        render_expr(r, b, P_UNARY);
        dl_sb_put(sb, ")");
        return;
    }
    if (narrow) dl_sb_printf(sb, "(%s)(", dl_ctype(e->type));
    render_expr(r, a, p);
    dl_sb_printf(sb, " %s ", binops[e->op].c);
    render_expr(r, b, p + 1);
    if (narrow) dl_sb_put(sb, ")");
}

static void render_expr(rctx *r, const dl_lexpr *e, int min_prec) {
    dl_sbuf *sb = r->sb;
    bool paren = expr_prec(e) < min_prec;
    if (paren) dl_sb_put(sb, "(");
    switch (e->kind) {
    case DL_LX_INT:
        put_int(sb, e->type, e->i);
        break;
    case DL_LX_FLOAT:
        put_float(sb, e->type, e->f);
        break;
    case DL_LX_VAR:
        dl_sb_put(sb, r->f->vars[e->var].name);
        break;
    case DL_LX_SYM:
        dl_sb_printf(sb, "s[%d]", e->var);
        break;
    case DL_LX_BIN:
        render_bin(r, e);
        break;
    case DL_LX_UN:
        switch (e->op) {
        case DL_LOP_NEG:
            dl_sb_put(sb, "-");
            render_expr(r, e->a[0], P_PRIMARY);
            break;
        case DL_LOP_NOT:
            dl_sb_put(sb, "!");
            render_expr(r, e->a[0], P_UNARY);
            break;
        case DL_LOP_BNOT:
            dl_sb_printf(sb, "(%s)~", dl_ctype(e->type));
            render_expr(r, e->a[0], P_UNARY);
            break;
        default: { /* WNEG */
            const char *w = wrap_type(e->type);
            if (w) {
                dl_sb_printf(sb, "(%s)((%s)0 - (%s)", dl_ctype(e->type), w, w);
                render_expr(r, e->a[0], P_UNARY);
                dl_sb_put(sb, ")");
            } else {
                dl_sb_printf(sb, "(%s)(0 - ", dl_ctype(e->type));
                render_expr(r, e->a[0], P_ADD + 1);
                dl_sb_put(sb, ")");
            }
            break;
        }
        }
        break;
    case DL_LX_SELECT:
        render_expr(r, e->a[0], P_OR);
        dl_sb_put(sb, " ? ");
        render_expr(r, e->a[1], P_SELECT + 1); /* a nested select here reads better in parens */
        dl_sb_put(sb, " : ");
        render_expr(r, e->a[2], P_SELECT);
        break;
    case DL_LX_CAST:
        dl_sb_printf(sb, "(%s)", dl_ctype(e->type));
        render_expr(r, e->a[0], P_UNARY);
        break;
    case DL_LX_LOAD:
        dl_sb_printf(sb, "%s[", r->bufname[e->var]);
        render_expr(r, e->a[0], 0);
        dl_sb_put(sb, e->type == DL_BOOL ? "] != 0" : "]");
        break;
    case DL_LX_CALL:
        dl_sb_printf(sb, "%s(", e->fn);
        for (int i = 0; i < e->n; i++) {
            if (i) dl_sb_put(sb, ", ");
            render_expr(r, e->a[i], P_SELECT);
        }
        dl_sb_put(sb, ")");
        break;
    }
    if (paren) dl_sb_put(sb, ")");
}

/* ---------------------------------------------------------------- statements */

static void indent(dl_sbuf *sb, int depth) {
    for (int i = 0; i < depth; i++) dl_sb_put(sb, "    ");
}

/* Use counts; a let whose value nobody reads is dead (its declaration is not rendered, and what
 * only it read does not count). */
typedef struct uses {
    int *var, *buf;
    bool sym;
    const bool *dead;
    bool outside_par; /* count what the function itself renders: not inside parallel loops,
                       * which are outlined (but their shared extents and condition) */
} uses;

static void count_expr(const dl_lexpr *e, uses *u) {
    if (!e) return;
    if (e->kind == DL_LX_VAR) u->var[e->var]++;
    if (e->kind == DL_LX_LOAD) u->buf[e->var]++;
    if (e->kind == DL_LX_SYM) u->sym = true;
    for (int i = 0; i < e->n; i++) count_expr(e->a[i], u);
}

static void count_stmt(const dl_lstmt *s, uses *u) {
    if (!s) return;
    switch (s->kind) {
    case DL_LS_BLOCK:
        for (int i = 0; i < s->n; i++) count_stmt(s->items[i], u);
        break;
    case DL_LS_FOR:
        count_expr(s->extent, u);
        count_expr(s->par_if, u);
        if (u->outside_par && s->parallel) {
            const dl_lstmt *l = s;
            for (int i = 1; i < s->collapse; i++, l = l->body) count_expr(l->body->extent, u);
            u->sym = true; /* the call passes b and s */
            break;
        }
        count_stmt(s->body, u);
        break;
    case DL_LS_STORE:
        u->buf[s->buf]++;
        count_expr(s->index, u);
        count_expr(s->value, u);
        break;
    case DL_LS_DECL:
        if (!u->dead[s->var]) count_expr(s->value, u);
        break;
    case DL_LS_ASSIGN:
        count_expr(s->value, u);
        break;
    case DL_LS_IF:
        count_expr(s->cond, u);
        count_stmt(s->then_s, u);
        count_stmt(s->else_s, u);
        break;
    }
}

/* Counts until no more lets die. */
static void count_live(const dl_lfunc *f, int *var_uses, int *buf_uses, bool *dead, bool *sym) {
    for (bool changed = true; changed;) {
        memset(var_uses, 0, sizeof(int) * (size_t)f->n_vars);
        memset(buf_uses, 0, sizeof(int) * (size_t)f->n_bufs);
        uses u = {.var = var_uses, .buf = buf_uses, .dead = dead};
        count_stmt(f->body, &u);
        *sym = u.sym;
        changed = false;
        for (int v = 0; v < f->n_vars; v++)
            if (f->vars[v].kind == DL_LV_LET && !var_uses[v] && !dead[v]) dead[v] = changed = true;
    }
}

/* ---------------------------------------------------------------- parallel loops */

static void render_stmt(rctx *r, const dl_lstmt *s, int depth, const bool *dead);

/* Marks the variables statement s declares: lets, locals, loop variables. */
static void mark_declared(const dl_lstmt *s, bool *decl) {
    if (!s) return;
    switch (s->kind) {
    case DL_LS_BLOCK:
        for (int i = 0; i < s->n; i++) mark_declared(s->items[i], decl);
        break;
    case DL_LS_FOR:
        decl[s->var] = true;
        mark_declared(s->body, decl);
        break;
    case DL_LS_DECL:
        decl[s->var] = true;
        break;
    case DL_LS_IF:
        mark_declared(s->then_s, decl);
        mark_declared(s->else_s, decl);
        break;
    default:
        break;
    }
}

/* What parallel loop s reads from the function around it: the variables it uses but does not
 * declare (captured[v]), the uses of each variable inside it (vars[v]) and the buffers it
 * touches (bufs[i] > 0). Returns whether it reads symbols. The three arrays are the caller's
 * (n_vars, n_vars and n_bufs long), overwritten here. */
static bool par_captures(const rctx *r, const dl_lstmt *s, const bool *dead, bool *captured,
                         int *vars, int *bufs) {
    const dl_lfunc *f = r->f;
    memset(vars, 0, sizeof(int) * (size_t)f->n_vars);
    memset(bufs, 0, sizeof(int) * (size_t)f->n_bufs);
    memset(captured, 0, sizeof(bool) * (size_t)f->n_vars);
    uses u = {.var = vars, .buf = bufs, .dead = dead};
    count_stmt(s->body, &u);
    const dl_lstmt *l = s; /* the collapsed loops' extents are evaluated inside */
    for (int i = 1; i < s->collapse; i++, l = l->body) count_expr(l->body->extent, &u);
    mark_declared(s, captured); /* (borrowed as "declared inside" first) */
    for (int v = 0; v < f->n_vars; v++) captured[v] = vars[v] > 0 && !captured[v];
    return u.sym;
}

/* The loops a parallel loop shares out: itself and collapse - 1 loops nested in it. */
static int par_nest(const dl_lstmt *s, const dl_lstmt **loops) {
    const int n = s->collapse > 1 ? s->collapse : 1;
    loops[0] = s;
    for (int i = 1; i < n; i++) loops[i] = loops[i - 1]->body;
    return n;
}

/* Renders parallel loop s as a function of a range of its iterations (flattened over the
 * collapsed loops), NAME_pK, with the struct NAME_pK_ctx it reads the captured variables from.
 * Each piece of the range starts on a multiple of 64 iterations where the loop is vectorized,
 * so every element takes the same path (vector body or scalar tail) whatever the thread count:
 * a vector math function and its scalar twin may differ in the last bit. */
static void render_par_fn(rctx *r, const dl_lstmt *s, int k, const bool *dead, bool *captured,
                          int *vars, int *bufs) {
    dl_sbuf *sb = r->sb;
    const dl_lfunc *f = r->f;
    const bool sym = par_captures(r, s, dead, captured, vars, bufs);
    dl_sb_printf(sb, "typedef struct %s_p%d_ctx {\n    void *const *b;\n    const int64_t *s;\n",
                 f->name, k);
    for (int v = 0; v < f->n_vars; v++)
        if (captured[v])
            dl_sb_printf(sb, "    %s %s;\n", dl_ctype(f->vars[v].type), f->vars[v].name);
    dl_sb_printf(sb, "} %s_p%d_ctx;\n\n", f->name, k);
    dl_sb_printf(sb,
                 "static void %s_p%d(void *dlg_ctx, int64_t dlg_lo, int64_t dlg_hi) {\n"
                 "    const %s_p%d_ctx *dlg_c = (const %s_p%d_ctx *)dlg_ctx;\n",
                 f->name, k, f->name, k, f->name, k);
    bool any_buf = false;
    for (int i = 0; i < f->n_bufs; i++) any_buf = any_buf || bufs[i] > 0;
    if (any_buf) dl_sb_put(sb, "    void *const *b = dlg_c->b;\n");
    if (sym) dl_sb_put(sb, "    const int64_t *s = dlg_c->s;\n");
    for (int i = 0; i < f->n_bufs; i++) {
        if (!bufs[i]) continue;
        const dl_lbuf *bf = &f->bufs[i];
        const char *ct = dl_ctype_mem(bf->dtype), *q = bf->written ? "" : "const ";
        dl_sb_printf(sb, "    %s%s *%s = (%s%s *)b[%d];\n", q, ct, r->bufname[i], q, ct, bf->slot);
    }
    for (int v = 0; v < f->n_vars; v++)
        if (captured[v])
            dl_sb_printf(sb, "    %s%s %s = dlg_c->%s;\n",
                         f->vars[v].kind == DL_LV_LOCAL ? "" : "const ", dl_ctype(f->vars[v].type),
                         f->vars[v].name, f->vars[v].name);
    const dl_lstmt *loops[DL_LOOP_MAX_DEPTH + 1];
    const int n = par_nest(s, loops);
    for (int i = 1; i < n; i++) {
        dl_sb_printf(sb, "    const int64_t dlg_e%d = ", i);
        render_expr(r, loops[i]->extent, 0);
        dl_sb_put(sb, ";\n");
    }
    if (s->vectorize) dl_sb_put(sb, "    #pragma omp simd\n");
    if (n == 1) {
        const char *v = f->vars[s->var].name;
        dl_sb_printf(sb, "    for (int64_t %s = dlg_lo; %s < dlg_hi; %s++) {\n", v, v, v);
    } else {
        dl_sb_put(sb, "    for (int64_t dlg_f = dlg_lo; dlg_f < dlg_hi; dlg_f++) {\n");
        /* the innermost loop's variable varies fastest; one the body never reads is left out */
        for (int i = 0; i < n; i++) {
            if (!vars[loops[i]->var]) continue;
            dl_sb_printf(sb, "        const int64_t %s = dlg_f", f->vars[loops[i]->var].name);
            for (int j = i + 1; j < n; j++) dl_sb_printf(sb, " / dlg_e%d", j);
            if (i > 0) dl_sb_printf(sb, " %% dlg_e%d", i);
            dl_sb_put(sb, ";\n");
        }
    }
    render_stmt(r, loops[n - 1]->body, 2, dead);
    dl_sb_put(sb, "    }\n}\n\n");
}

/* Outlines every parallel loop of s, in the order render_stmt meets them. */
static void render_par_fns(rctx *r, const dl_lstmt *s, const bool *dead, bool *captured, int *vars,
                           int *bufs) {
    if (!s) return;
    switch (s->kind) {
    case DL_LS_BLOCK:
        for (int i = 0; i < s->n; i++) render_par_fns(r, s->items[i], dead, captured, vars, bufs);
        break;
    case DL_LS_FOR:
        if (s->parallel)
            render_par_fn(r, s, r->n_par++, dead, captured, vars, bufs);
        else
            render_par_fns(r, s->body, dead, captured, vars, bufs);
        break;
    case DL_LS_IF:
        render_par_fns(r, s->then_s, dead, captured, vars, bufs);
        render_par_fns(r, s->else_s, dead, captured, vars, bufs);
        break;
    default:
        break;
    }
}

/* The call that runs outlined parallel loop s (render_par_fn) over all its iterations, in one
 * piece per thread, or in one piece where its condition does not hold. */
static void render_par_call(rctx *r, const dl_lstmt *s, int depth, const bool *dead) {
    dl_sbuf *sb = r->sb;
    const dl_lfunc *f = r->f;
    const int k = r->n_par++;
    bool *captured = dl_calloc((size_t)f->n_vars + 1, sizeof(bool));
    int *vars = dl_calloc((size_t)f->n_vars + 1, sizeof(int));
    int *bufs = dl_calloc((size_t)f->n_bufs + 1, sizeof(int));
    if (!captured || !vars || !bufs) {
        r->nomem = true;
    } else {
        par_captures(r, s, dead, captured, vars, bufs);
        indent(sb, depth);
        dl_sb_printf(sb, "{\n");
        indent(sb, depth + 1);
        dl_sb_printf(sb, "%s_p%d_ctx dlg_c = {.b = b, .s = s", f->name, k);
        for (int v = 0; v < f->n_vars; v++)
            if (captured[v]) dl_sb_printf(sb, ", .%s = %s", f->vars[v].name, f->vars[v].name);
        dl_sb_put(sb, "};\n");
        indent(sb, depth + 1);
        dl_sb_put(sb, "dlrt_parallel(");
        const dl_lstmt *loops[DL_LOOP_MAX_DEPTH + 1];
        const int n = par_nest(s, loops);
        for (int i = 0; i < n; i++) {
            if (i) dl_sb_put(sb, " * ");
            dl_sb_put(sb, "(int64_t)(");
            render_expr(r, loops[i]->extent, 0);
            dl_sb_put(sb, ")");
        }
        if (s->par_if) {
            dl_sb_put(sb, ", (");
            render_expr(r, s->par_if, 0);
            dl_sb_put(sb, ") ? 0 : 1");
        } else {
            dl_sb_put(sb, ", 0");
        }
        dl_sb_printf(sb, ", %d, 0, %s_p%d, &dlg_c);\n", s->vectorize ? 64 : 1, f->name, k);
        indent(sb, depth);
        dl_sb_put(sb, "}\n");
    }
    dl_free(captured);
    dl_free(vars);
    dl_free(bufs);
}

static void render_stmt(rctx *r, const dl_lstmt *s, int depth, const bool *dead) {
    dl_sbuf *sb = r->sb;
    const dl_lfunc *f = r->f;
    switch (s->kind) {
    case DL_LS_BLOCK:
        for (int i = 0; i < s->n; i++) render_stmt(r, s->items[i], depth, dead);
        break;
    case DL_LS_FOR: {
        const char *v = f->vars[s->var].name;
        if (s->parallel) {
            render_par_call(r, s, depth, dead);
            break;
        }
        if (s->vectorize) {
            indent(sb, depth);
            dl_sb_put(sb, "#pragma omp simd");
            if (s->red_op != DL_REDOP_NONE)
                dl_sb_printf(sb, " reduction(%s:%s)", s->red_op == DL_REDOP_MUL ? "*" : "+",
                             f->vars[s->red_var].name);
            dl_sb_put(sb, "\n");
        }
        if (s->unroll > 1) {
            indent(sb, depth);
            dl_sb_printf(sb, "#pragma GCC unroll %d\n", s->unroll);
        }
        indent(sb, depth);
        dl_sb_printf(sb, "for (int64_t %s = 0; %s < ", v, v);
        render_expr(r, s->extent, P_REL + 1);
        dl_sb_printf(sb, "; %s++) {\n", v);
        render_stmt(r, s->body, depth + 1, dead);
        indent(sb, depth);
        dl_sb_put(sb, "}\n");
        break;
    }
    case DL_LS_STORE:
        indent(sb, depth);
        dl_sb_printf(sb, "%s[", r->bufname[s->buf]);
        render_expr(r, s->index, 0);
        dl_sb_put(sb, "] = ");
        render_expr(r, s->value, 0);
        dl_sb_put(sb, ";\n");
        break;
    case DL_LS_DECL: {
        const dl_lvar *v = &f->vars[s->var];
        if (dead[s->var]) break; /* pure and unused */
        indent(sb, depth);
        dl_sb_printf(sb, "%s%s %s = ", v->kind == DL_LV_LET ? "const " : "", dl_ctype(v->type),
                     v->name);
        render_expr(r, s->value, 0);
        dl_sb_put(sb, ";\n");
        break;
    }
    case DL_LS_ASSIGN:
        indent(sb, depth);
        dl_sb_printf(sb, "%s = ", f->vars[s->var].name);
        render_expr(r, s->value, 0);
        dl_sb_put(sb, ";\n");
        break;
    case DL_LS_IF:
        indent(sb, depth);
        dl_sb_put(sb, "if (");
        render_expr(r, s->cond, 0);
        dl_sb_put(sb, ") {\n");
        render_stmt(r, s->then_s, depth + 1, dead);
        if (s->else_s) {
            indent(sb, depth);
            dl_sb_put(sb, "} else {\n");
            render_stmt(r, s->else_s, depth + 1, dead);
        }
        indent(sb, depth);
        dl_sb_put(sb, "}\n");
        break;
    }
}

dl_status dl_render_c(dl_ctx *ctx, const dl_lfunc *f, dl_sbuf *sb) {
    DL_TRY(dl_lfunc_status(ctx, f));
    bool ident = f->name[0] && !(f->name[0] >= '0' && f->name[0] <= '9');
    for (const char *p = f->name; *p; p++)
        ident = ident && (*p == '_' || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                          (*p >= '0' && *p <= '9'));
    if (!ident)
        return dl_fail(ctx, DL_ERR_INVALID, "kernel name '%s' is not a C identifier", f->name);
    int *var_uses = dl_calloc((size_t)f->n_vars + 1, sizeof(int));
    int *buf_uses = dl_calloc((size_t)f->n_bufs + 1, sizeof(int));
    bool *dead = dl_calloc((size_t)f->n_vars + 1, sizeof(bool));
    char(*names)[32] = dl_calloc((size_t)f->n_bufs + 1, sizeof *names);
    if (!var_uses || !buf_uses || !dead || !names) {
        dl_free(var_uses);
        dl_free(buf_uses);
        dl_free(dead);
        dl_free(names);
        return dl_fail(ctx, DL_ERR_NOMEM, "out of memory rendering %s", f->name);
    }
    bool sym_used = false;
    count_live(f, var_uses, buf_uses, dead, &sym_used);
    for (int i = 0; i < f->n_bufs; i++) {
        const dl_lbuf *bf = &f->bufs[i];
        bool dup = false;
        for (int j = 0; j < i; j++) dup = dup || f->bufs[j].slot == bf->slot;
        if (dup)
            snprintf(names[i], sizeof names[i], "b%d_%s", bf->slot, dl_dtype_name(bf->dtype));
        else
            snprintf(names[i], sizeof names[i], "b%d", bf->slot);
    }
    /* the parallel loops' functions first, then what the function itself uses */
    rctx r = {.f = f, .sb = sb, .bufname = names};
    bool *scratch = dl_calloc((size_t)f->n_vars + 1, sizeof(bool));
    if (scratch) render_par_fns(&r, f->body, dead, scratch, var_uses, buf_uses);
    r.nomem = !scratch;
    dl_free(scratch);
    const bool any_par = r.n_par > 0;
    r.n_par = 0;
    memset(buf_uses, 0, sizeof(int) * ((size_t)f->n_bufs + 1));
    uses own = {.var = var_uses, .buf = buf_uses, .dead = dead, .outside_par = true};
    count_stmt(f->body, &own);
    sym_used = own.sym;
    dl_sb_printf(sb, "static void %s(void *const *b, const int64_t *s) {\n", f->name);
    bool any_buf = false;
    for (int i = 0; i < f->n_bufs; i++) {
        const dl_lbuf *bf = &f->bufs[i];
        if (!buf_uses[i]) continue;
        any_buf = true;
        const char *ct = dl_ctype_mem(bf->dtype), *q = bf->written ? "" : "const ";
        dl_sb_printf(sb, "    %s%s *%s = (%s%s *)b[%d];\n", q, ct, names[i], q, ct, bf->slot);
    }
    if (!any_buf && !any_par) dl_sb_put(sb, "    (void)b;\n");
    if (!sym_used) dl_sb_put(sb, "    (void)s;\n");
    render_stmt(&r, f->body, 1, dead);
    dl_sb_put(sb, "}\n");
    dl_free(var_uses);
    dl_free(buf_uses);
    dl_free(dead);
    dl_free(names);
    if (r.nomem) return dl_fail(ctx, DL_ERR_NOMEM, "out of memory rendering %s", f->name);
    return dl_sb_status(ctx, sb);
}
