/* remat.c — rematerialization, just before fusion: an elementwise value that one fused group
 * computes and elementwise groups further on read (a training step's forward activations, read
 * by the backward) is recomputed by each of those readers from what it was computed from,
 * rather than written to memory by its group and read back by theirs.
 *
 * A GELU spelled out in nodes shows why: its group reads the pre-activation and wrote four
 * results, x + b, x / sqrt(2), 1 + erf(.) and the output, three of them only for the backward's
 * group, which read them again; recomputed there from x and b, the forward writes one result
 * and the backward reads one value instead of three (4 MB each in the GPT benchmark's blocks).
 *
 * A fusion is made first (the fuse pass, whose groups are then dropped) to see which values
 * are results read by other groups. A result v of elementwise group G is recomputed when
 *  - it holds at least DL_REMAT_MIN_NUMEL values, or a symbolic number;
 *  - every node reading it outside G belongs to an elementwise group and reads it as a loop
 *    operand (so its recomputation joins that group's loop), and it is no graph output;
 *  - its cone, the nodes of G it depends on, has at most DL_REMAT_MAX_NODES nodes, all cheap
 *    arithmetic (no transcendental: cheap_op);
 *  - for each group H reading it, the cone reads at most one value that H does not read already
 *    and that is not small beside v (is_small: a bias, a scalar), and that one no wider a type
 *    than v's (a mask of bools is not traded for the floats it came from): H's traffic does
 *    not grow, and G no longer writes v;
 *  - H stays within an elementwise kernel's limits with all the copies it gets
 *    (DL_EW_GROUP_NODES, DL_EW_GROUP_INPUTS), else the fuse pass would split it and write them.
 * Each reading group gets its own copies of the cone's nodes (shared by all the values it
 * recomputes), placed just before their first reader; the readers' inputs are pointed at them.
 * The copies compute what the originals did from the same inputs, and keep their types
 * (symbols included). Dead-code elimination follows (an original whose readers all went to
 * copies, the last node of its group, would still be written as that group's last result), then
 * the fuse pass groups the graph again; nothing between may merge the copies back (CSE). */
#include "fuse.h"
#include "../codegen/lower.h" /* dl_ew_operand */

#include <limits.h>

enum { DL_REMAT_MAX_NODES = 16, DL_REMAT_MIN_NUMEL = 4096 };

/* Ops cheap enough to compute twice: a few vector instructions a value. A transcendental costs
 * more than the memory traffic it would save (glibc's vector erff about 24 cycles per 16 floats
 * on a Zen 5, expf 13, against about 4 to stream 16 floats in or out): recomputing the GELU's
 * erf in its backward made that group 0.45 -> 0.71 ms where the forward saved 0.04. (Erf is
 * now the runtime's dlrt_erf, about a third of erff's cost, not measured again here.) Div, Sqrt
 * and Reciprocal are slower than the rest (a vdivps about 5 cycles per 16 floats) but on the
 * side of the traffic: the GELU's x / sqrt(2), recomputed, made its backward faster. */
static bool cheap_op(const dl_node *n) {
    static const char *const cheap[] = {"Add",        "Sub",      "Mul",         "Div",
                                        "Neg",        "Abs",      "Relu",        "LeakyRelu",
                                        "Min",        "Max",      "Clip",        "Where",
                                        "Cast",       "Identity", "Expand",      "Equal",
                                        "Less",       "Greater",  "LessOrEqual", "GreaterOrEqual",
                                        "Not",        "And",      "Or",          "Sign",
                                        "Reciprocal", "Sqrt"};
    for (size_t i = 0; i < sizeof cheap / sizeof *cheap; i++)
        if (dl_node_is(n, cheap[i])) return true;
    return false;
}

typedef struct remat {
    dl_graph *g;
    const dl_fusion *f;
    int nn;                 /* nodes before any copy */
    int *group_of;          /* by node position: its group in f */
    int *read_at, *readers; /* the nodes reading each value (dl_reader_lists) */
    int *stamp, stamp_now;  /* cone membership by node position: stamp[pos] == stamp_now */
    dl_node *cone[DL_REMAT_MAX_NODES];
    int n_cone;
    /* by group: the nodes, and (at most) the inputs, that copies made for it add */
    int *extra_nodes, *extra_in;
} remat;

/* The product of v's known dims (a symbolic dim counts as 1); *exact: no dim was symbolic. */
static int64_t known_numel(const dl_type *t, bool *exact) {
    int64_t n = 1;
    *exact = true;
    for (int d = 0; d < t->rank; d++) {
        if (t->dims[d] < 0) {
            *exact = false;
            continue;
        }
        n = t->dims[d] > 0 && n > INT64_MAX / t->dims[d] ? INT64_MAX : n * t->dims[d];
    }
    return n;
}

/* Whether reading u instead of v costs little: u has a known size at most an eighth of the
 * least v can hold (a scalar constant), or it broadcasts along a symbolic dim of v (a bias
 * against a batch of rows: [128] against [N, 128]). */
static bool is_small(const dl_value *u, const dl_value *v) {
    const dl_type *ut = &u->type, *vt = &v->type;
    if (ut->rank < 0 || vt->rank < 0 || ut->rank > vt->rank) return false;
    bool u_exact, v_exact;
    const int64_t un = known_numel(ut, &u_exact), vn = known_numel(vt, &v_exact);
    (void)v_exact;
    if (!u_exact) return false;
    if (un <= vn / 8) return true;
    for (int d = 0; d < vt->rank; d++) { /* u's dims aligned to v's last ones */
        const int du = d - (vt->rank - ut->rank);
        if (vt->dims[d] < 0 && (du < 0 || ut->dims[du] == 1)) return true;
    }
    return false;
}

static bool in_group(const remat *r, const dl_node *n, int gi) {
    return n->id >= 0 && n->id < r->nn && r->g->nodes.items[n->id] == n && r->group_of[n->id] == gi;
}

/* Collects into r->cone the nodes of group gi that v depends on, in topological order; false
 * when there are too many or one cannot be copied. */
static bool collect_cone(remat *r, const dl_value *v, int gi) {
    r->n_cone = 0;
    r->stamp_now++;
    dl_node *stack[DL_REMAT_MAX_NODES];
    int top = 0;
    stack[top++] = v->producer;
    r->stamp[v->producer->id] = r->stamp_now;
    while (top) {
        dl_node *m = stack[--top];
        if (r->n_cone == DL_REMAT_MAX_NODES || m->n_out != 1 || m->n_in > 64 || !cheap_op(m))
            return false;
        r->cone[r->n_cone++] = m;
        for (int i = 0; i < m->n_in; i++) {
            const dl_value *u = m->in[i];
            if (!u || !u->producer || !in_group(r, u->producer, gi)) continue;
            if (r->stamp[u->producer->id] == r->stamp_now) continue;
            if (top == DL_REMAT_MAX_NODES) return false;
            r->stamp[u->producer->id] = r->stamp_now;
            stack[top++] = u->producer;
        }
    }
    for (int i = 1; i < r->n_cone; i++) { /* insertion sort by position */
        dl_node *m = r->cone[i];
        int j = i;
        for (; j > 0 && r->cone[j - 1]->id > m->id; j--) r->cone[j] = r->cone[j - 1];
        r->cone[j] = m;
    }
    return true;
}

static bool group_reads(const dl_group *h, const dl_value *u) {
    for (int i = 0; i < h->n_in; i++)
        if (h->in[i] == u) return true;
    return false;
}

/* Whether group hi can recompute v from the cone's inputs without reading more than it read,
 * and stay one kernel with the nodes and inputs the copies already given to it add. */
static bool cone_fits(const remat *r, int hi, const dl_value *v) {
    const dl_group *h = &r->f->groups[hi];
    int big = 0, new_in = 0;
    if (h->n_nodes + r->extra_nodes[hi] + r->n_cone > DL_EW_GROUP_NODES) return false;
    for (int k = 0; k < r->n_cone; k++) {
        const dl_node *m = r->cone[k];
        for (int i = 0; i < m->n_in; i++) {
            const dl_value *u = m->in[i];
            if (!u || (u->producer && in_group(r, u->producer, r->group_of[v->producer->id]) &&
                       r->stamp[u->producer->id] == r->stamp_now))
                continue;      /* computed in the cone */
            bool seen = false; /* counted once, however many cone nodes read it */
            for (int k2 = 0; k2 <= k && !seen; k2++)
                for (int i2 = 0; i2 < r->cone[k2]->n_in && !seen; i2++)
                    seen = (k2 < k || i2 < i) && r->cone[k2]->in[i2] == u;
            if (seen || group_reads(h, u)) continue;
            new_in++;
            /* (a wider type: a mask of bools read back costs less than the floats it came from) */
            if (!is_small(u, v) &&
                (++big > 1 || dl_dtype_size(u->type.dtype) > dl_dtype_size(v->type.dtype)))
                return false;
        }
    }
    return h->n_in + r->extra_in[hi] + new_in <= DL_EW_GROUP_INPUTS;
}

/* Whether result v of elementwise group gi is to be recomputed by its readers (the cone is left
 * in r->cone). */
static bool worth_it(remat *r, const dl_value *v, int gi) {
    bool exact;
    const int64_t n = known_numel(&v->type, &exact);
    /* (a small value costs next to nothing to keep: an optimizer's bias corrections, read by
     * the update of every parameter, are scalars) */
    if (v->is_output || !v->producer || v->type.rank < 0 || (exact && n < DL_REMAT_MIN_NUMEL) ||
        !collect_cone(r, v, gi))
        return false;
    int readers = 0;
    for (int c = r->read_at[v->id]; c < r->read_at[v->id + 1]; c++) {
        const int pos = r->readers[c], hi = r->group_of[pos];
        if (hi == gi) continue;
        const dl_node *reader = r->g->nodes.items[pos];
        if (hi < 0 || r->f->groups[hi].kind != DL_G_EW) return false;
        for (int i = 0; i < reader->n_in; i++)
            if (reader->in[i] == v && !dl_ew_operand(reader, i)) return false;
        if (!cone_fits(r, hi, v)) return false;
        readers++;
    }
    return readers > 0;
}

/* The copy of cone node m made for the current reading group, or NULL. */
typedef struct copies {
    dl_value **of; /* by node position (of the originals) */
    int *touched, n_touched;
} copies;

/* Copies r->cone for reading group hi, whose copies are `cp` (those already made are reused);
 * the new nodes are appended to the graph, and counted against the group's limits. */
static dl_status copy_cone(remat *r, copies *cp, int hi) {
    dl_graph *g = r->g;
    const dl_group *h = &r->f->groups[hi];
    for (int k = 0; k < r->n_cone; k++) {
        const dl_node *m = r->cone[k];
        if (cp->of[m->id]) continue;
        dl_value *in[64]; /* (collect_cone took no node with more inputs) */
        for (int i = 0; i < m->n_in; i++) {
            dl_value *u = m->in[i];
            const bool copied = u && u->producer && in_group(r, u->producer, r->group_of[m->id]) &&
                                cp->of[u->producer->id];
            in[i] = copied ? cp->of[u->producer->id] : u;
            if (u && !copied && !group_reads(h, u)) r->extra_in[hi]++;
        }
        dl_value *out = NULL;
        DL_TRY(dl_add_node_ex(g, m->op->domain, m->op->name, m->opset, m->n_in, in, 1, &out, 0,
                              NULL, m->n_attrs, m->attrs));
        /* the original's type: inferred afresh, a symbolic dim would get a new symbol */
        out->type = m->out[0]->type;
        cp->of[m->id] = out;
        cp->touched[cp->n_touched++] = m->id;
        r->extra_nodes[hi]++;
    }
    return DL_OK;
}

/* A reader (node position) whose inputs `from` are to read the copy `to`. */
typedef struct remat_wire {
    int pos;
    const dl_value *from;
    dl_value *to;
} remat_wire;

/* Points the readers at their copies, then puts every copy (the nodes from position nn on)
 * just before the first node that reads it, copies that read copies after those: the originals
 * keep their order. (Its memory is taken first: a failure leaves the graph as it was, the
 * copies unread at its end.) */
static dl_status place_copies(remat *r, const remat_wire *wires, int n_wire) {
    dl_graph *g = r->g;
    const int total = g->nodes.len, extra = total - r->nn;
    int *place = dl_malloc(sizeof(int) * ((size_t)extra + 1));
    int *copy_of_value = dl_malloc(sizeof(int) * ((size_t)g->values.len + 1));
    dl_node **order = dl_malloc(sizeof(dl_node *) * ((size_t)total + 1));
    int *sorted = dl_malloc(sizeof(int) * ((size_t)extra + 1));
    dl_status s = DL_OK;
    if (!place || !copy_of_value || !order || !sorted) {
        s = dl_fail(g->ctx, DL_ERR_NOMEM, "out of memory in remat");
        goto done;
    }
    for (int w = 0; w < n_wire; w++) {
        dl_node *n = g->nodes.items[wires[w].pos];
        for (int i = 0; i < n->n_in; i++)
            if (n->in[i] == wires[w].from) n->in[i] = wires[w].to;
    }
    for (int i = 0; i < g->values.len; i++) copy_of_value[i] = -1;
    for (int c = 0; c < extra; c++) {
        const dl_node *n = g->nodes.items[r->nn + c];
        place[c] = INT_MAX;
        copy_of_value[n->out[0]->id] = c;
    }
    for (int k = 0; k < r->nn; k++) { /* originals reading copies */
        const dl_node *n = g->nodes.items[k];
        for (int i = 0; i < n->n_in; i++)
            if (n->in[i] && copy_of_value[n->in[i]->id] >= 0 &&
                place[copy_of_value[n->in[i]->id]] > k)
                place[copy_of_value[n->in[i]->id]] = k;
    }
    for (int c = extra - 1; c >= 0; c--) { /* copies reading copies made before them */
        const dl_node *n = g->nodes.items[r->nn + c];
        for (int i = 0; i < n->n_in; i++) {
            const int u = n->in[i] ? copy_of_value[n->in[i]->id] : -1;
            if (u >= 0 && place[u] > place[c]) place[u] = place[c];
        }
    }
    for (int c = 0; c < extra; c++) { /* stable insertion sort by place */
        int j = c;
        for (; j > 0 && place[sorted[j - 1]] > place[c]; j--) sorted[j] = sorted[j - 1];
        sorted[j] = c;
    }
    int at = 0, next = 0;
    for (int k = 0; k <= r->nn; k++) {
        while (next < extra && place[sorted[next]] <= k)
            order[at++] = g->nodes.items[r->nn + sorted[next++]];
        if (k < r->nn) order[at++] = g->nodes.items[k];
    }
    while (next < extra) order[at++] = g->nodes.items[r->nn + sorted[next++]];
    for (int k = 0; k < total; k++) {
        g->nodes.items[k] = order[k];
        order[k]->id = k;
    }
done:
    dl_free(place);
    dl_free(copy_of_value);
    dl_free(order);
    dl_free(sorted);
    return s;
}

dl_status dl_pass_remat(dl_pass_ctx *pc) {
    dl_graph *g = pc->g;
    DL_TRY(dl_pass_fuse(pc));
    dl_fusion *f = pc->fusion;
    pc->fusion = NULL;
    remat r = {.g = g, .f = f, .nn = g->nodes.len};
    r.group_of = dl_malloc(sizeof(int) * ((size_t)r.nn + 1));
    r.stamp = dl_calloc((size_t)r.nn + 1, sizeof(int));
    copies cp = {.of = dl_calloc((size_t)r.nn + 1, sizeof(dl_value *)),
                 .touched = dl_malloc(sizeof(int) * ((size_t)r.nn + 1))};
    r.extra_nodes = dl_calloc((size_t)f->n + 1, sizeof(int));
    r.extra_in = dl_calloc((size_t)f->n + 1, sizeof(int));
    /* the readers' inputs to point at copies, once all are made (a cone copied later reads the
     * originals) */
    int n_wire = 0, cap_wire = 0;
    remat_wire *wires = NULL;
    dl_status s = DL_OK;
    if (!r.group_of || !r.stamp || !cp.of || !cp.touched || !r.extra_nodes || !r.extra_in) {
        s = dl_fail(g->ctx, DL_ERR_NOMEM, "out of memory in remat");
        goto done;
    }
    for (int k = 0; k < r.nn; k++) r.group_of[k] = -1;
    for (int gi = 0; gi < f->n; gi++)
        for (int k = 0; k < f->groups[gi].n_nodes; k++) r.group_of[f->groups[gi].nodes[k]->id] = gi;
    if ((s = dl_reader_lists(g, &r.read_at, &r.readers)) != DL_OK) goto done;
    /* by reading group, so that its copies are shared by the values it recomputes */
    for (int hi = 0; hi < f->n && s == DL_OK; hi++) {
        const dl_group *h = &f->groups[hi];
        if (h->kind != DL_G_EW) continue;
        for (int j = 0; j < h->n_in && s == DL_OK; j++) {
            dl_value *v = h->in[j];
            const int gi = v->producer ? r.group_of[v->producer->id] : -1;
            if (gi < 0 || gi == hi || f->groups[gi].kind != DL_G_EW || !worth_it(&r, v, gi))
                continue;
            s = copy_cone(&r, &cp, hi);
            for (int c = r.read_at[v->id]; c < r.read_at[v->id + 1] && s == DL_OK; c++) {
                if (r.group_of[r.readers[c]] != hi) continue;
                if (n_wire == cap_wire) {
                    cap_wire = cap_wire ? 2 * cap_wire : 64;
                    void *nw = dl_realloc(wires, sizeof *wires * (size_t)cap_wire);
                    if (!nw) {
                        s = dl_fail(g->ctx, DL_ERR_NOMEM, "out of memory in remat");
                        break;
                    }
                    wires = nw;
                }
                wires[n_wire++] = (remat_wire){r.readers[c], v, cp.of[v->producer->id]};
            }
        }
        for (int t = 0; t < cp.n_touched; t++) cp.of[cp.touched[t]] = NULL;
        cp.n_touched = 0;
    }
    if (s != DL_OK) goto done;
    pc->changes += g->nodes.len - r.nn;
    if (g->nodes.len > r.nn) s = place_copies(&r, wires, n_wire);
done:
    dl_fusion_free(f);
    dl_free(r.group_of);
    dl_free(r.stamp);
    dl_free(r.read_at);
    dl_free(r.readers);
    dl_free(cp.of);
    dl_free(cp.touched);
    dl_free(r.extra_nodes);
    dl_free(r.extra_in);
    dl_free(wires);
    return s;
}
