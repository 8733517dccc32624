/* schedule.c — schedule primitives over a loop-IR function (split, reorder, vectorize,
 * parallel, unroll, 2-D tiling) and the default schedule for a target. Each primitive checks
 * its request and changes nothing when it is illegal, so every schedule computes the same
 * values (up to the summation order of vectorized reductions). */
#include "loop-ir.h"

static const char *vname(const dl_lfunc *f, int var) {
    return var >= 0 && var < f->n_vars ? f->vars[var].name : "?";
}

/* The place a loop over var is stored (a block item, a loop body or an if branch). */
static dl_lstmt **find_slot(dl_lstmt **slot, int var) {
    dl_lstmt *s = *slot;
    if (!s) return NULL;
    switch (s->kind) {
    case DL_LS_BLOCK:
        for (int i = 0; i < s->n; i++) {
            dl_lstmt **r = find_slot(&s->items[i], var);
            if (r) return r;
        }
        return NULL;
    case DL_LS_FOR:
        return s->var == var ? slot : find_slot(&s->body, var);
    case DL_LS_IF: {
        dl_lstmt **r = find_slot(&s->then_s, var);
        return r ? r : find_slot(&s->else_s, var);
    }
    default:
        return NULL;
    }
}

static bool has_loop(const dl_lstmt *s) {
    if (!s) return false;
    switch (s->kind) {
    case DL_LS_FOR:
        return true;
    case DL_LS_BLOCK:
        for (int i = 0; i < s->n; i++)
            if (has_loop(s->items[i])) return true;
        return false;
    case DL_LS_IF:
        return has_loop(s->then_s) || has_loop(s->else_s);
    default:
        return false;
    }
}

static bool has_parallel(const dl_lstmt *s) {
    if (!s) return false;
    switch (s->kind) {
    case DL_LS_FOR:
        return s->parallel || has_parallel(s->body);
    case DL_LS_BLOCK:
        for (int i = 0; i < s->n; i++)
            if (has_parallel(s->items[i])) return true;
        return false;
    case DL_LS_IF:
        return has_parallel(s->then_s) || has_parallel(s->else_s);
    default:
        return false;
    }
}

static dl_status get_loop(dl_ctx *ctx, dl_lfunc *f, int var, const char *what, dl_lstmt ***slot) {
    *slot = var >= 0 && var < f->n_vars ? find_slot(&f->body, var) : NULL;
    if (!*slot)
        return dl_fail(ctx, DL_ERR_INVALID, "%s: %s: no loop over variable '%s'", f->name, what,
                       vname(f, var));
    return DL_OK;
}

/* ---------------------------------------------------------------- split */

dl_status dl_sched_split(dl_ctx *ctx, dl_lfunc *f, int var, int64_t factor, dl_tail tail,
                         int *outer, int *inner) {
    dl_lstmt **slot;
    DL_TRY(get_loop(ctx, f, var, "split", &slot));
    dl_lstmt *l = *slot;
    if (factor < 2 || factor > (1 << 20))
        return dl_fail(ctx, DL_ERR_INVALID, "%s: split of '%s': factor %lld is not in [2, 2^20]",
                       f->name, vname(f, var), (long long)factor);
    if (l->parallel || l->vectorize || l->unroll > 1)
        return dl_fail(ctx, DL_ERR_INVALID,
                       "%s: split of '%s': the loop is already annotated (split first)", f->name,
                       vname(f, var));
    char nm[80];
    snprintf(nm, sizeof nm, "%s_o", vname(f, var));
    int vo = dl_lf_var(f, nm, DL_I64, DL_LV_LOOP);
    snprintf(nm, sizeof nm, "%s_i", vname(f, var));
    int vi = dl_lf_var(f, nm, DL_I64, DL_LV_LOOP);
    if (vo < 0 || vi < 0) return dl_lfunc_status(ctx, f);
    dl_lexpr *E = l->extent, *F = dl_le_i64(f, factor);
    int64_t ec = 0;
    bool is_const = dl_le_is_const(E, &ec);
    bool exact = is_const && ec % factor == 0;
    dl_lexpr *outer_ext =
        is_const ? dl_le_i64(f, ec / factor + (ec % factor != 0))
                 : dl_le_bin(f, DL_LOP_DIV, dl_le_iadd(f, E, dl_le_i64(f, factor - 1)), F);
    dl_lexpr *base = dl_le_imul(f, dl_le_var(f, vo), F);
    dl_lexpr *inner_ext = F;
    if (!exact && tail == DL_TAIL_MIN)
        inner_ext = dl_le_bin(f, DL_LOP_MIN, F, dl_le_bin(f, DL_LOP_SUB, E, base));
    dl_lstmt *body = dl_ls_block(f);
    f->vars[var].kind = DL_LV_LET; /* the old loop variable becomes a let */
    dl_ls_append(f, body, dl_ls_decl(f, var, dl_le_iadd(f, base, dl_le_var(f, vi))));
    dl_lstmt *old = l->body;
    if (!exact && tail == DL_TAIL_GUARD) {
        dl_lexpr *c = dl_le_bin(f, DL_LOP_LT, dl_le_var(f, var), E);
        dl_ls_append(f, body, dl_ls_if(f, c, old, NULL));
    } else if (old && old->kind == DL_LS_BLOCK) {
        for (int i = 0; i < old->n; i++) dl_ls_append(f, body, old->items[i]);
    } else {
        dl_ls_append(f, body, old);
    }
    dl_lstmt *li = dl_ls_for(f, vi, inner_ext, body);
    dl_lstmt *lo = dl_ls_for(f, vo, outer_ext, li);
    if (!li || !lo || f->oom) {
        f->vars[var].kind = DL_LV_LOOP;
        return dl_lfunc_status(ctx, f);
    }
    li->unit_stride = l->unit_stride;
    li->red_op = lo->red_op = l->red_op;
    li->red_var = lo->red_var = l->red_var;
    *slot = lo;
    if (outer) *outer = vo;
    if (inner) *inner = vi;
    return DL_OK;
}

/* ---------------------------------------------------------------- reorder */

/* The loop directly inside l when l's body is that loop, possibly after lets; NULL otherwise.
 * The lets are appended to lets[*n_lets]. */
static dl_lstmt *nested_loop(const dl_lfunc *f, dl_lstmt *l, dl_lstmt **lets, int *n_lets) {
    dl_lstmt *b = l->body;
    if (b->kind == DL_LS_FOR) return b;
    if (b->kind != DL_LS_BLOCK || b->n == 0 || b->items[b->n - 1]->kind != DL_LS_FOR) return NULL;
    for (int i = 0; i < b->n - 1; i++) {
        dl_lstmt *s = b->items[i];
        if (s->kind != DL_LS_DECL || f->vars[s->var].kind != DL_LV_LET) return NULL;
    }
    for (int i = 0; i < b->n - 1 && *n_lets < DL_LOOP_MAX_DEPTH; i++)
        lets[(*n_lets)++] = b->items[i];
    return b->items[b->n - 1];
}

dl_status dl_sched_reorder(dl_ctx *ctx, dl_lfunc *f, int n, const int *vars) {
    if (n < 1 || n > DL_LOOP_MAX_DEPTH)
        return dl_fail(ctx, DL_ERR_INVALID, "%s: reorder of %d loops", f->name, n);
    dl_lstmt **top = NULL;
    int top_depth = 0;
    for (int k = 0; k < n; k++) {
        dl_lstmt **slot;
        DL_TRY(get_loop(ctx, f, vars[k], "reorder", &slot));
        for (int j = 0; j < k; j++)
            if (vars[j] == vars[k])
                return dl_fail(ctx, DL_ERR_INVALID, "%s: reorder names '%s' twice", f->name,
                               vname(f, vars[k]));
        int depth;
        dl_lf_find_loop(f, vars[k], NULL, &depth);
        if (!top || depth < top_depth) {
            top = slot;
            top_depth = depth;
        }
    }
    dl_lstmt *chain[DL_LOOP_MAX_DEPTH], *lets[DL_LOOP_MAX_DEPTH];
    int n_lets = 0;
    chain[0] = *top;
    for (int k = 1; k < n; k++) {
        chain[k] = nested_loop(f, chain[k - 1], lets, &n_lets);
        bool listed = false;
        for (int j = 0; chain[k] && j < n; j++) listed = listed || vars[j] == chain[k]->var;
        if (!chain[k] || !listed)
            return dl_fail(ctx, DL_ERR_INVALID,
                           "%s: reorder: the loops are not a perfectly nested chain below '%s'",
                           f->name, vname(f, chain[0]->var));
    }
    /* legality: an extent may only use loops that stay outside it, and no let of the chain */
    for (int p = 0; p < n; p++) {
        dl_lstmt *l = NULL;
        for (int k = 0; k < n; k++)
            if (chain[k]->var == vars[p]) l = chain[k];
        for (int q = p + 1; q < n; q++)
            if (dl_le_uses_var(l->extent, vars[q]))
                return dl_fail(ctx, DL_ERR_INVALID,
                               "%s: reorder: the extent of '%s' depends on '%s', which would be "
                               "inside it",
                               f->name, vname(f, vars[p]), vname(f, vars[q]));
        for (int i = 0; i < n_lets; i++)
            if (dl_le_uses_var(l->extent, lets[i]->var))
                return dl_fail(ctx, DL_ERR_INVALID,
                               "%s: reorder: the extent of '%s' depends on '%s'", f->name,
                               vname(f, vars[p]), vname(f, lets[i]->var));
        if (l->vectorize && p != n - 1)
            return dl_fail(ctx, DL_ERR_INVALID,
                           "%s: reorder: vectorized loop '%s' must stay innermost", f->name,
                           vname(f, vars[p]));
    }
    /* the innermost body, with the chain's lets first */
    dl_lstmt *inner = chain[n - 1]->body;
    if (n_lets) {
        dl_lstmt *b = dl_ls_block(f);
        for (int i = 0; i < n_lets; i++) dl_ls_append(f, b, lets[i]);
        if (inner->kind == DL_LS_BLOCK)
            for (int i = 0; i < inner->n; i++) dl_ls_append(f, b, inner->items[i]);
        else
            dl_ls_append(f, b, inner);
        DL_TRY(dl_lfunc_status(ctx, f));
        inner = b;
    }
    dl_lstmt *loops[DL_LOOP_MAX_DEPTH];
    for (int p = 0; p < n; p++)
        for (int k = 0; k < n; k++)
            if (chain[k]->var == vars[p]) loops[p] = chain[k];
    for (int p = 0; p < n; p++) loops[p]->body = p == n - 1 ? inner : loops[p + 1];
    *top = loops[0];
    return DL_OK;
}

/* ---------------------------------------------------------------- annotations */

/* gcc accepts no `#pragma GCC unroll` next to an OpenMP loop pragma (clang only after it). */
static dl_status unroll_conflict(dl_ctx *ctx, dl_lfunc *f, int var) {
    return dl_fail(ctx, DL_ERR_INVALID,
                   "%s: loop '%s' cannot be both unrolled and parallel or vectorized (split it)",
                   f->name, vname(f, var));
}

dl_status dl_sched_vectorize(dl_ctx *ctx, dl_lfunc *f, int var) {
    dl_lstmt **slot;
    DL_TRY(get_loop(ctx, f, var, "vectorize", &slot));
    dl_lstmt *l = *slot;
    if (has_loop(l->body))
        return dl_fail(ctx, DL_ERR_INVALID, "%s: vectorize: '%s' is not an innermost loop", f->name,
                       vname(f, var));
    if (l->red_op == DL_REDOP_OTHER)
        return dl_fail(ctx, DL_ERR_INVALID,
                       "%s: vectorize: '%s' carries a max/min-like accumulation that "
                       "omp simd cannot reproduce exactly",
                       f->name, vname(f, var));
    if (l->unroll > 1) return unroll_conflict(ctx, f, var);
    l->vectorize = true;
    return DL_OK;
}

dl_status dl_sched_parallel(dl_ctx *ctx, dl_lfunc *f, int var, dl_lexpr *cond) {
    dl_lstmt **slot;
    DL_TRY(get_loop(ctx, f, var, "parallel", &slot));
    dl_lstmt *l = *slot, *path[DL_LOOP_MAX_DEPTH];
    int depth;
    dl_lf_find_loop(f, var, path, &depth);
    if (l->red_op != DL_REDOP_NONE)
        return dl_fail(ctx, DL_ERR_INVALID,
                       "%s: parallel: '%s' carries an accumulation from one iteration to the next",
                       f->name, vname(f, var));
    for (int i = 0; i < depth && i < DL_LOOP_MAX_DEPTH; i++) {
        if (path[i]->parallel)
            return dl_fail(ctx, DL_ERR_INVALID, "%s: parallel: '%s' is inside parallel loop '%s'",
                           f->name, vname(f, var), vname(f, path[i]->var));
        if (path[i]->red_op != DL_REDOP_NONE)
            return dl_fail(ctx, DL_ERR_INVALID, "%s: parallel: '%s' is inside reduction loop '%s'",
                           f->name, vname(f, var), vname(f, path[i]->var));
    }
    if (has_parallel(l->body))
        return dl_fail(ctx, DL_ERR_INVALID, "%s: parallel: '%s' contains a parallel loop", f->name,
                       vname(f, var));
    if (l->unroll > 1) return unroll_conflict(ctx, f, var);
    if (cond && cond->type != DL_BOOL)
        return dl_fail(ctx, DL_ERR_INVALID, "%s: parallel: condition is not a bool", f->name);
    l->parallel = true;
    l->par_if = cond;
    return DL_OK;
}

dl_status dl_sched_collapse(dl_ctx *ctx, dl_lfunc *f, int var, int n) {
    dl_lstmt **slot;
    DL_TRY(get_loop(ctx, f, var, "collapse", &slot));
    dl_lstmt *l = *slot;
    if (!l->parallel || n < 2 || n > DL_LOOP_MAX_DEPTH)
        return dl_fail(ctx, DL_ERR_INVALID,
                       "%s: collapse(%d) of '%s': needs a parallel loop and n >= 2", f->name, n,
                       vname(f, var));
    dl_lstmt *chain[DL_LOOP_MAX_DEPTH];
    chain[0] = l;
    for (int k = 1; k < n; k++) {
        dl_lstmt *c = chain[k - 1]->body;
        if (c->kind != DL_LS_FOR || c->parallel || c->vectorize || c->unroll > 1 ||
            c->red_op != DL_REDOP_NONE)
            return dl_fail(ctx, DL_ERR_INVALID,
                           "%s: collapse(%d) of '%s': %d loops are not perfectly nested and free",
                           f->name, n, vname(f, var), n);
        for (int j = 0; j < k; j++)
            if (dl_le_uses_var(c->extent, chain[j]->var))
                return dl_fail(ctx, DL_ERR_INVALID,
                               "%s: collapse: the extent of '%s' depends on '%s'", f->name,
                               vname(f, c->var), vname(f, chain[j]->var));
        chain[k] = c;
    }
    l->collapse = n;
    return DL_OK;
}

dl_status dl_sched_unroll(dl_ctx *ctx, dl_lfunc *f, int var, int n) {
    dl_lstmt **slot;
    DL_TRY(get_loop(ctx, f, var, "unroll", &slot));
    if (n < 2 || n > 64)
        return dl_fail(ctx, DL_ERR_INVALID, "%s: unroll of '%s' by %d: factor must be in [2, 64]",
                       f->name, vname(f, var), n);
    if ((*slot)->parallel || (*slot)->vectorize) return unroll_conflict(ctx, f, var);
    (*slot)->unroll = n;
    return DL_OK;
}

dl_status dl_sched_tile2(dl_ctx *ctx, dl_lfunc *f, int a, int b, int64_t factor) {
    dl_lstmt **sa, **sb;
    DL_TRY(get_loop(ctx, f, a, "tile", &sa));
    DL_TRY(get_loop(ctx, f, b, "tile", &sb));
    if (a == b || factor < 2 || factor > (1 << 20))
        return dl_fail(ctx, DL_ERR_INVALID, "%s: tile of '%s' and '%s' by %lld", f->name,
                       vname(f, a), vname(f, b), (long long)factor);
    for (dl_lstmt *l = *sa; l; l = l == *sa ? *sb : NULL)
        if (l->parallel || l->vectorize || l->unroll > 1)
            return dl_fail(ctx, DL_ERR_INVALID, "%s: tile: '%s' is already annotated", f->name,
                           vname(f, l->var));
    /* b must sit in a's perfectly nested chain */
    dl_lstmt *lets[DL_LOOP_MAX_DEPTH];
    int n_lets = 0, n = 1;
    for (dl_lstmt *l = *sa; l && l->var != b; n++) {
        l = nested_loop(f, l, lets, &n_lets);
        if (!l || n >= DL_LOOP_MAX_DEPTH - 4)
            return dl_fail(ctx, DL_ERR_INVALID, "%s: tile: '%s' is not perfectly nested in '%s'",
                           f->name, vname(f, b), vname(f, a));
    }
    int ao, ai, bo, bi;
    DL_TRY(dl_sched_split(ctx, f, a, factor, DL_TAIL_MIN, &ao, &ai));
    DL_TRY(dl_sched_split(ctx, f, b, factor, DL_TAIL_MIN, &bo, &bi));
    /* chain now: ao ai (mid...) bo bi → ao (mid...) bo ai bi */
    int order[DL_LOOP_MAX_DEPTH], k = 0;
    n_lets = 0;
    order[k++] = ao;
    dl_lstmt *l = *find_slot(&f->body, ao);
    l = nested_loop(f, l, lets, &n_lets); /* ai */
    while (l && l->var != bo) {
        l = nested_loop(f, l, lets, &n_lets);
        if (l && l->var != bo) order[k++] = l->var;
    }
    order[k++] = bo;
    order[k++] = ai;
    order[k++] = bi;
    return dl_sched_reorder(ctx, f, k, order);
}

/* ---------------------------------------------------------------- default schedule */

static void vectorize_inner(dl_lfunc *f, dl_lstmt *s) {
    if (!s) return;
    switch (s->kind) {
    case DL_LS_BLOCK:
        for (int i = 0; i < s->n; i++) vectorize_inner(f, s->items[i]);
        break;
    case DL_LS_IF:
        vectorize_inner(f, s->then_s);
        vectorize_inner(f, s->else_s);
        break;
    case DL_LS_FOR:
        if (has_loop(s->body))
            vectorize_inner(f, s->body);
        else if (s->unit_stride && s->red_op != DL_REDOP_OTHER && s->unroll <= 1)
            s->vectorize = true;
        break;
    default:
        break;
    }
}

/* An estimate of a loop's trip count that does not depend on enclosing loops: the extent, or
 * the constant bound of a min() tail extent; NULL when unknown. */
static dl_lexpr *trip_estimate(dl_lfunc *f, const dl_lstmt *l) {
    const dl_lexpr *e = l->extent;
    for (int v = 0; v < f->n_vars; v++)
        if (f->vars[v].kind != DL_LV_LET && dl_le_uses_var(e, v)) {
            if (e->kind == DL_LX_BIN && e->op == DL_LOP_MIN && dl_le_is_const(e->a[0], NULL))
                return e->a[0];
            return NULL;
        }
    return l->extent;
}

/* Product of trip counts of l and the first loop nest inside it (a reduction's accumulation
 * loops count too). */
static dl_lexpr *work_of(dl_lfunc *f, dl_lstmt *s) {
    if (!s) return dl_le_i64(f, 1);
    switch (s->kind) {
    case DL_LS_FOR: {
        dl_lexpr *t = trip_estimate(f, s);
        return dl_le_imul(f, t ? t : dl_le_i64(f, 1), work_of(f, s->body));
    }
    case DL_LS_BLOCK:
        for (int i = 0; i < s->n; i++)
            if (has_loop(s->items[i])) return work_of(f, s->items[i]);
        return dl_le_i64(f, 1);
    case DL_LS_IF:
        return work_of(f, s->then_s);
    default:
        return dl_le_i64(f, 1);
    }
}

dl_status dl_sched_default(dl_ctx *ctx, dl_lfunc *f, const dl_target *t) {
    vectorize_inner(f, f->body);
    if (!t || t->threads <= 1 || has_parallel(f->body)) return dl_lfunc_status(ctx, f);
    for (int i = 0; i < f->body->n; i++) {
        dl_lstmt *l = f->body->items[i];
        if (l->kind != DL_LS_FOR || l->red_op != DL_REDOP_NONE || l->unroll > 1) continue;
        dl_lexpr *w = work_of(f, l);
        int64_t wc;
        if (dl_le_is_const(w, &wc)) {
            if (wc <= DL_PAR_MIN_WORK) continue;
            DL_TRY(dl_sched_parallel(ctx, f, l->var, NULL));
        } else if (w) {
            dl_lexpr *c = dl_le_bin(f, DL_LOP_GT, w, dl_le_i64(f, DL_PAR_MIN_WORK));
            DL_TRY(dl_lfunc_status(ctx, f));
            DL_TRY(dl_sched_parallel(ctx, f, l->var, c));
        }
        /* few outer iterations: share out the loops below too (never the vectorized one) */
        int n = 1;
        int64_t trips;
        dl_lstmt *c = l;
        while (dl_le_is_const(c->extent, &trips) && c->body->kind == DL_LS_FOR &&
               has_loop(c->body->body) && dl_le_is_const(c->body->extent, NULL) &&
               !c->body->parallel && !c->body->vectorize && c->body->unroll <= 1 &&
               c->body->red_op == DL_REDOP_NONE && n < DL_LOOP_MAX_DEPTH) {
            int64_t total = 1;
            for (dl_lstmt *k = l; k != c->body; k = k->body) {
                int64_t e = 0;
                dl_le_is_const(k->extent, &e);
                total *= e;
            }
            if (total >= 4 * (int64_t)t->threads) break;
            c = c->body;
            n++;
        }
        if (n > 1) DL_TRY(dl_sched_collapse(ctx, f, l->var, n));
    }
    return dl_lfunc_status(ctx, f);
}
