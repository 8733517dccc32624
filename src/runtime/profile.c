/* profile.c — timing a compiled program: whole runs for `dlcc bench`, and per step for
 * `dlcc profile` through the executor's step hook (which only reads the clock, so the
 * measurement costs ~20 ns per step), with the estimated FLOPs and bytes each fusion group
 * moves, for GFLOP/s, GB/s and the roofline. */
#include "profile.h"
#include "../codegen/emit-params.h"
#include "../ops/op-impl.h"

#include <math.h>
#include <stdlib.h>
#include <time.h>

static double ts_ms(const struct timespec *t) {
    return t->tv_sec * 1e3 + t->tv_nsec / 1e6;
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return ts_ms(&t);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double dl_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int dl_default_threads(void) {
    return dl_host_target(0).threads;
}

int dl_program_threads(const dl_program *p) {
    return p->threads;
}

/* Runs timed when the caller gives no count: at least ADAPTIVE_MIN and about BUDGET_MS worth;
 * never more than MAX_ITERS. A fixed handful measured too early (MobileNetV2's first ten
 * profiled runs after two warm-ups were 30% slower than its steady state). */
enum { MAX_ITERS = 1000, ADAPTIVE_MIN = 10 };
static const double BUDGET_MS = 2000;

/* Whether run n (0-based) should happen: n < iters, or adaptively (iters <= 0) until the
 * minimum count and the time budget since start are both reached. */
static bool another_run(int n, int iters, double start) {
    if (n >= MAX_ITERS) return false;
    if (iters > 0) return n < iters;
    return n < ADAPTIVE_MIN || now_ms() - start < BUDGET_MS;
}

/* One run, its outputs written into the previous run's (kept[], which the caller frees with
 * free_kept), as a serving loop does: tensors allocated afresh are zeroed (calloc), which for
 * GPT-2's 25 MB of logits took 0.5 ms of every run, all of it charged to the first step. */
static dl_status timed_run(dl_ctx *ctx, dl_program *p, int n_inputs, const char *const *names,
                           dl_tensor *const *inputs, dl_tensor **outputs, dl_tensor **kept,
                           dl_step_hook hook, void *user, double *start, double *ms) {
    int n_out = p->g->outputs.len;
    double t0 = now_ms();
    dl_status s = dl_program_run_hooked(ctx, p, n_inputs, names, inputs, outputs, hook, user, kept);
    *ms = now_ms() - t0;
    if (start) *start = t0;
    for (int i = 0; s == DL_OK && i < n_out; i++) {
        if (outputs[i] != kept[i]) {
            dl_tensor_free(kept[i]);
            kept[i] = outputs[i];
        }
        outputs[i] = NULL;
    }
    return s;
}

static void free_kept(const dl_program *p, dl_tensor **kept) {
    for (int i = 0; kept && i < p->g->outputs.len; i++) dl_tensor_free(kept[i]);
    dl_free(kept);
}

dl_status dl_bench_program(dl_ctx *ctx, dl_program *p, int n_inputs, const char *const *names,
                           dl_tensor *const *inputs, int warmup, int iters, dl_bench_result *out) {
    memset(out, 0, sizeof *out);
    if (warmup < 0) warmup = 0;
    dl_tensor **outputs = dl_calloc((size_t)p->g->outputs.len + 1, sizeof *outputs);
    dl_tensor **kept = dl_calloc((size_t)p->g->outputs.len + 1, sizeof *kept);
    double *t = dl_malloc(sizeof(double) * (size_t)MAX_ITERS);
    dl_status s = DL_OK;
    if (!outputs || !kept || !t) {
        s = dl_fail(ctx, DL_ERR_NOMEM, "out of memory benchmarking");
        goto done;
    }
    double ms;
    for (int i = 0; i < warmup && s == DL_OK; i++)
        s = timed_run(ctx, p, n_inputs, names, inputs, outputs, kept, NULL, NULL, NULL, &ms);
    int n = 0;
    double start = now_ms();
    while (s == DL_OK && another_run(n, iters, start)) {
        s = timed_run(ctx, p, n_inputs, names, inputs, outputs, kept, NULL, NULL, NULL, &t[n]);
        n++;
    }
    if (s != DL_OK) goto done;
    double sum = 0;
    for (int i = 0; i < n; i++) sum += t[i];
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    out->warmup = warmup;
    out->iters = n;
    out->min_ms = t[0];
    out->mean_ms = sum / n;
    out->median_ms = dl_median(t, n);
    int k = (int)ceil(0.9 * n) - 1; /* nearest rank */
    out->p90_ms = t[k < 0 ? 0 : k];
done:
    dl_free(outputs);
    free_kept(p, kept);
    dl_free(t);
    return s;
}

/* ---- per-step costs ---- */

/* Concrete types of values, from the plan and from the tensors of one run. */
typedef struct cost_ctx {
    const dl_program *p;
    dl_type *vt; /* by value id; rank -1 when unknown */
} cost_ctx;

static const dl_type *vtype(const cost_ctx *c, const dl_value *v) {
    if (!v) return NULL;
    const dl_type *t = &c->vt[v->id];
    return t->rank >= 0 ? t : dl_type_known(&v->type) ? &v->type : NULL;
}

static double numel_of(const dl_type *t) {
    double n = 1;
    for (int d = 0; t && d < t->rank; d++) n *= (double)t->dims[d];
    return t ? n : 0;
}

/* A value inside a fused group that no plan gave a type (dynamic plans): elementwise chains and
 * epilogues keep the group output's shape. */
static const dl_type *vtype_or(const cost_ctx *c, const dl_value *v, const dl_group *gr) {
    const dl_type *t = vtype(c, v);
    return t ? t : vtype(c, gr->out[0]);
}

/* The product of a convolution weight's dims after the first: the taps each output (Conv, a
 * gradient) or input (ConvTranspose) element meets. */
static double weight_taps(const dl_type *w) {
    double taps = 1;
    for (int d = 1; d < w->rank; d++) taps *= (double)w->dims[d];
    return taps;
}

static double node_flops(const cost_ctx *c, const dl_group *gr, const dl_node *n) {
    if (!n->n_out || !n->out[0] || !n->n_in || !n->in[0]) return 0;
    const dl_type *out = vtype_or(c, n->out[0], gr), *a = vtype(c, n->in[0]);
    if (!out) return 0;
    if (dl_node_is(n, "Conv")) {
        /* 2 * N * Cout * prod(out spatial) * (Cin / group) * prod(kernel): the weight's dims
         * after the first are Cin/group and the kernel */
        const dl_type *w = n->n_in > 1 ? vtype(c, n->in[1]) : NULL;
        if (!w || w->rank < 1) return 0;
        return 2 * numel_of(out) * weight_taps(w);
    }
    if (dl_node_is(n, "ConvTranspose")) {
        /* each input element meets (Cout / group) * prod(kernel) weights, the weight's dims
         * after the first: 2 * numel(X) * that */
        const dl_type *w = n->n_in > 1 ? vtype(c, n->in[1]) : NULL;
        if (!w || !a || w->rank < 1) return 0;
        return 2 * numel_of(a) * weight_taps(w);
    }
    if (dl_node_is(n, "Gemm")) {
        if (!a || a->rank != 2) return 0;
        double k = (double)a->dims[dl_attr_int(n, "transA", 0) ? 0 : 1];
        return 2 * numel_of(out) * k;
    }
    if (dl_node_is(n, "MatMul")) { /* 2*M*N*K per matrix, times the batch */
        if (!a || a->rank < 1) return 0;
        return 2 * numel_of(out) * (double)a->dims[a->rank - 1];
    }
    if (n->op->domain && !strcmp(n->op->domain, "ai.dlcc")) {
        /* a conv's input and weight gradients each cost what the conv does: 2 * numel(dY) *
         * (Cin / group) * prod(kernel), the weight (W or dW) giving the last two; pool gradients
         * count dX's elements, as pools count X's */
        bool gi = !strcmp(n->op->name, "ConvGradInput");
        if (gi || !strcmp(n->op->name, "ConvGradWeight")) {
            const dl_type *w = gi ? (n->n_in > 1 ? vtype(c, n->in[1]) : NULL) : out;
            const dl_type *dy = gi ? a : n->n_in > 1 ? vtype(c, n->in[1]) : NULL;
            if (!w || !dy || w->rank < 1) return 0;
            return 2 * numel_of(dy) * weight_taps(w);
        }
        return !strcmp(n->op->name, "MaxPoolGrad") || !strcmp(n->op->name, "AveragePoolGrad")
                   ? numel_of(out)
                   : 0;
    }
    switch (dl_node_kernel_kind(n)) {
    case DL_G_RNN: { /* the products: 2 * T * B * dirs * G*H * (I + H) */
        dl_rnn_params rp;
        if (!dl_rnn_params_of(n, &rp) || !a || rp.p.I < 1) return 0;
        return 2 * (numel_of(a) / (double)rp.p.I) * rp.p.dirs *
               (double)(dlrt_rnn_gates(rp.p.kind) * rp.p.H) * (double)(rp.p.I + rp.p.H);
    }
    case DL_G_EW:
        return numel_of(out);
    case DL_G_REDUCE:
    case DL_G_ARGMAX:
    case DL_G_POOL:
        return a ? numel_of(a) : 0;
    case DL_G_SOFTMAX:
    case DL_G_LAYERNORM:
        return 5 * numel_of(out);
    default:
        return 0;
    }
}

static void group_cost(const cost_ctx *c, const dl_group *gr, dl_step_stat *st) {
    st->kind = gr->kind;
    st->flops = 0;
    for (int k = 0; k < gr->n_nodes; k++) st->flops += node_flops(c, gr, gr->nodes[k]);
    bool known = true;
    double bytes = 0;
    /* a Gather or a Slice reads only as much of its data as it writes (GPT-2's token lookup
     * reads 128 rows of its 154 MB table) */
    const dl_node *n0 = gr->nodes[0];
    const dl_value *partial = gr->kind == DL_G_COPY && gr->n_out == 1 &&
                                      (dl_node_is(n0, "Gather") || dl_node_is(n0, "Slice"))
                                  ? n0->in[0]
                                  : NULL;
    for (int i = 0; i < gr->n_in + gr->n_out; i++) {
        const dl_value *v = i < gr->n_in ? gr->in[i] : gr->out[i - gr->n_in];
        const dl_type *t = vtype(c, v == partial ? gr->out[0] : v);
        if (!t)
            known = false;
        else
            bytes += numel_of(t) * (double)dl_dtype_size(t->dtype);
    }
    st->bytes = known ? bytes : 0;
    const dl_type *o = gr->n_out ? vtype(c, gr->out[0]) : NULL;
    if (o)
        st->out = *o;
    else
        st->out.rank = -1;
}

/* The warm-up hook of the first run: records the concrete type of every value a step reads or
 * writes (dynamic plans have no types before the run). */
static dl_status capture_hook(void *user, const dl_program *p, int step, dl_tensor *const *values) {
    dl_type *vt = user;
    const dl_group *gr = &p->fusion->groups[step];
    for (int i = 0; i < gr->n_in + gr->n_out; i++) {
        const dl_value *v = i < gr->n_in ? gr->in[i] : gr->out[i - gr->n_in];
        const dl_tensor *t = v->constant ? v->constant : values[v->id];
        if (!t) continue;
        vt[v->id].dtype = t->dtype;
        vt[v->id].rank = t->rank;
        memcpy(vt[v->id].dims, t->dims, sizeof(int64_t) * (size_t)t->rank);
    }
    return DL_OK;
}

static dl_status time_hook(void *user, const dl_program *p, int step, dl_tensor *const *values) {
    DL_UNUSED(p);
    DL_UNUSED(values);
    clock_gettime(CLOCK_MONOTONIC, (struct timespec *)user + step);
    return DL_OK;
}

void dl_profile_free(dl_profile *pr) {
    dl_free(pr->steps);
    dl_free(pr->rep_start_us);
    dl_free(pr->rep_dur_us);
    memset(pr, 0, sizeof *pr);
}

/* Step durations of one run from the hook's clock readings. */
static void step_durations(const struct timespec *ts, int n, double t0, double *dur) {
    double prev = t0;
    for (int s = 0; s < n; s++) {
        double t = ts_ms(&ts[s]);
        dur[s] = t - prev;
        prev = t;
    }
}

dl_status dl_profile_program(dl_ctx *ctx, dl_program *p, int n_inputs, const char *const *names,
                             dl_tensor *const *inputs, int warmup, int iters, dl_profile *out) {
    memset(out, 0, sizeof *out);
    if (iters > MAX_ITERS) iters = MAX_ITERS;
    const int cap = iters > 0 ? iters : MAX_ITERS; /* runs there is room for */
    if (warmup < 0) warmup = 0;
    int nv = p->g->values.len, ns = p->interp_only || !p->fusion ? 0 : p->fusion->n;
    out->interp_only = ns == 0 && p->interp_only;
    out->n_steps = ns;
    dl_tensor **outputs = dl_calloc((size_t)p->g->outputs.len + 1, sizeof *outputs);
    dl_tensor **kept = dl_calloc((size_t)p->g->outputs.len + 1, sizeof *kept);
    dl_type *vt = dl_calloc((size_t)nv + 1, sizeof *vt);
    struct timespec *ts = dl_calloc((size_t)cap * (size_t)ns + 1, sizeof *ts);
    double *run = dl_calloc((size_t)cap + 1, sizeof *run);
    double *col = dl_calloc((size_t)(cap > ns ? cap : ns) + 1, sizeof *col);
    double *t0 = dl_calloc((size_t)cap + 1, sizeof *t0);
    out->steps = dl_calloc((size_t)ns + 1, sizeof *out->steps);
    out->rep_start_us = dl_calloc((size_t)ns + 1, sizeof *out->rep_start_us);
    out->rep_dur_us = dl_calloc((size_t)ns + 1, sizeof *out->rep_dur_us);
    dl_status s = DL_OK;
    if (!outputs || !kept || !vt || !ts || !run || !col || !t0 || !out->steps ||
        !out->rep_start_us || !out->rep_dur_us) {
        s = dl_fail(ctx, DL_ERR_NOMEM, "out of memory profiling");
        goto done;
    }
    for (int i = 0; i < nv; i++) vt[i].rank = -1;
    double ms;
    /* at least one untimed run: it records the types and binds the memory plan */
    for (int i = 0; i < (warmup > 0 ? warmup : 1) && s == DL_OK; i++)
        s = timed_run(ctx, p, n_inputs, names, inputs, outputs, kept, i == 0 ? capture_hook : NULL,
                      vt, NULL, &ms);
    const double start = now_ms();
    int n = 0;
    for (; s == DL_OK && another_run(n, iters, start); n++)
        s = timed_run(ctx, p, n_inputs, names, inputs, outputs, kept, time_hook,
                      ts + (size_t)n * ns, &t0[n], &run[n]);
    if (s != DL_OK) goto done;
    iters = out->iters = n;
    /* the plan types the values fused groups keep internal (static plans) */
    const dl_plan *pl = &p->plan;
    for (int i = 0; pl->valid && pl->ctype && i < nv; i++)
        if (vt[i].rank < 0 && pl->ctype[i].rank >= 0 && dl_type_known(&pl->ctype[i]))
            vt[i] = pl->ctype[i];
    cost_ctx cc = {.p = p, .vt = vt};
    for (int st = 0; st < ns; st++) group_cost(&cc, &p->fusion->groups[st], &out->steps[st]);
    /* median per step; dur[] of iteration it goes through col[] one step at a time */
    double *dur = dl_calloc((size_t)ns * (size_t)iters + 1, sizeof *dur);
    if (!dur) {
        s = dl_fail(ctx, DL_ERR_NOMEM, "out of memory profiling");
        goto done;
    }
    for (int it = 0; it < iters; it++)
        step_durations(ts + (size_t)it * ns, ns, t0[it], dur + (size_t)it * ns);
    for (int st = 0; st < ns; st++) {
        for (int it = 0; it < iters; it++) col[it] = dur[(size_t)it * ns + st];
        out->steps[st].ms = dl_median(col, iters);
    }
    memcpy(col, run, sizeof(double) * (size_t)iters);
    out->run_ms = dl_median(col, iters);
    int rep = 0;
    for (int it = 1; it < iters; it++)
        if (fabs(run[it] - out->run_ms) < fabs(run[rep] - out->run_ms)) rep = it;
    out->rep_run_us = run[rep] * 1e3;
    double at = 0;
    for (int st = 0; st < ns; st++) {
        out->rep_dur_us[st] = dur[(size_t)rep * ns + st] * 1e3;
        out->rep_start_us[st] = at;
        at += out->rep_dur_us[st];
    }
    dl_free(dur);
done:
    dl_free(outputs);
    free_kept(p, kept);
    dl_free(vt);
    dl_free(ts);
    dl_free(run);
    dl_free(col);
    dl_free(t0);
    return s;
}
