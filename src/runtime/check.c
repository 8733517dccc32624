/* check.c — `dlcc run --check`: the reference interpreter and the native program run on the
 * same inputs; after each native step its results are compared with the reference values of
 * the same name, and the first step that differs beyond tolerance is named with its nodes. */
#include "program-impl.h"

#include <math.h>

typedef struct checker {
    dl_ctx *ctx;
    dl_graph *src;
    dl_tensor **ref; /* by source value id */
    double rtol, atol;
    /* atol's floor, a fraction of a value's largest magnitude: float32 sums (2e-6); or, under
     * --math bf16, bfloat16 products, whose rounding scales with the terms, not with the
     * result (BERT-base's first query projection: 0.006 off on a value of 0.06; 1e-2), and in
     * a program with convolutions compounds from layer to layer (ResNet-50 with random weights
     * drifts to 5% of a value's largest magnitude in its third stage; PyTorch's autocast bf16
     * ends 15% off its float32; 1e-1) */
    double peak_rel;
    FILE *out;
    int compared;
} checker;

static double elem(const dl_tensor *t, int64_t i) {
    return dl_get_f64(t, i);
}

/* A value of the optimized graph is comparable with the source value of the same name only when
 * an identical node computes both (same op, same input names): a rewrite such as BatchNorm
 * folding keeps a Conv's output name but changes what it holds (its weights are new values). */
static bool same_computation(const dl_value *v, const dl_value *sv) {
    const dl_node *a = v->producer, *b = sv->producer;
    if (!a || !b || a->op != b->op || a->n_in != b->n_in) return false;
    for (int i = 0; i < a->n_in; i++) {
        if (!a->in[i] != !b->in[i]) return false;
        if (a->in[i] && strcmp(a->in[i]->name, b->in[i]->name) != 0) return false;
    }
    return true;
}

static dl_status compare_step(void *user, const dl_program *p, int step, dl_tensor *const *values) {
    checker *ck = user;
    const dl_group *gr = &p->fusion->groups[step];
    for (int o = 0; o < gr->n_out; o++) {
        const dl_value *v = gr->out[o];
        dl_value *sv = dl_graph_find_value(ck->src, v->name);
        if (!sv || !same_computation(v, sv)) continue;
        const dl_tensor *got = values[v->id], *want = ck->ref[sv->id];
        if (!got || !want) continue; /* a value the optimizer created: no reference to compare */
        ck->compared++;
        char d[300], a[256], b[256];
        bool shape_ok = got->dtype == want->dtype && got->rank == want->rank;
        for (int k = 0; shape_ok && k < got->rank; k++) shape_ok = got->dims[k] == want->dims[k];
        int64_t bad = -1;
        double worst = 0, peak = 0;
        /* float32 rounding in long sums scales with the terms, so atol grows with the value's
         * largest magnitude (as in tests/torch/compare.py) */
        for (int64_t i = 0; shape_ok && i < want->numel; i++)
            if (fabs(elem(want, i)) > peak && isfinite(elem(want, i))) peak = fabs(elem(want, i));
        double atol = fmax(ck->atol, ck->peak_rel * peak);
        for (int64_t i = 0; shape_ok && i < got->numel; i++) {
            double x = elem(got, i), y = elem(want, i);
            if (isnan(x) && isnan(y)) continue;
            double err = fabs(x - y);
            if (!(err <= atol + ck->rtol * fabs(y))) {
                if (bad < 0 || err > worst) worst = err;
                if (bad < 0) bad = i;
            }
        }
        if (shape_ok && bad < 0) continue;
        fprintf(ck->out, "check: step %d (%s group of %d node%s) differs from the reference\n",
                step, dl_gkind_name(gr->kind), gr->n_nodes, gr->n_nodes == 1 ? "" : "s");
        for (int k = 0; k < gr->n_nodes; k++)
            fprintf(ck->out, "  %s\n", dl_node_desc(gr->nodes[k], d, sizeof d));
        if (!shape_ok)
            fprintf(ck->out, "  value '%s': native %s, reference %s\n", v->name,
                    dl_tensor_desc(got, a, sizeof a), dl_tensor_desc(want, b, sizeof b));
        else
            fprintf(ck->out,
                    "  value '%s': first difference at element %lld: native %.9g, reference "
                    "%.9g (largest error %.3g; rtol %g, atol %g)\n",
                    v->name, (long long)bad, elem(got, bad), elem(want, bad), worst, ck->rtol,
                    atol);
        return dl_fail(ck->ctx, DL_ERR_INTERNAL, "native output differs from the reference at %s",
                       dl_node_desc(dl_group_anchor(gr), d, sizeof d));
    }
    return DL_OK;
}

dl_status dl_check(dl_ctx *ctx, dl_graph *g, const dl_compile_options *o, int n_inputs,
                   const char *const *names, dl_tensor *const *inputs, double rtol, double atol,
                   void *report) {
    FILE *out = report ? report : stderr;
    int nv = g->values.len, nout = g->outputs.len;
    dl_tensor **keep = dl_calloc((size_t)nv + 1, sizeof *keep);
    dl_tensor **ref_out = dl_calloc((size_t)nout + 1, sizeof *ref_out);
    dl_tensor **nat_out = dl_calloc((size_t)nout + 1, sizeof *nat_out);
    dl_program *p = NULL;
    dl_status s = DL_OK;
    if (!keep || !ref_out || !nat_out) {
        s = dl_fail(ctx, DL_ERR_NOMEM, "out of memory");
        goto done;
    }
    if ((s = dl_interp_run_keep(ctx, g, n_inputs, names, inputs, ref_out, keep)) != DL_OK)
        goto done;
    if ((s = dl_compile(ctx, g, o, &p)) != DL_OK) goto done;
    checker ck = {.ctx = ctx,
                  .src = g,
                  .ref = keep,
                  .rtol = rtol,
                  .atol = atol,
                  .peak_rel = o && o->math == DL_MATH_BF16 ? (p->stats.convs ? 1e-1 : 1e-2) : 2e-6,
                  .out = out};
    s = dl_program_run_hooked(ctx, p, n_inputs, names, inputs, nat_out, compare_step, &ck, NULL);
    if (s == DL_OK)
        fprintf(out,
                "check: %d steps, %d values compared with the reference: all within rtol %g, "
                "atol max(%g, %g * largest magnitude)\n",
                p->fusion->n, ck.compared, rtol, atol, ck.peak_rel);
done:
    for (int i = 0; keep && i < nv; i++) dl_tensor_free(keep[i]);
    for (int i = 0; i < nout; i++) {
        if (ref_out) dl_tensor_free(ref_out[i]);
        if (nat_out) dl_tensor_free(nat_out[i]);
    }
    dl_free(keep);
    dl_free(ref_out);
    dl_free(nat_out);
    dl_program_free(p);
    return s;
}
