/* tune.c — `dlcc tune`: the convolution algorithm of each layer measured inside the model, not
 * modelled. The cost model (kernels/rt/conv.c) was fitted on one machine to a few models; here
 * every algorithm that applies to a layer is timed where the layer runs, with its neighbours'
 * data in the caches as in a real run.
 *
 * One program is compiled per algorithm, forcing it on every layer it applies to (so each
 * variant is a whole model, a layer's neighbours running the same algorithm where they can),
 * plus the cost model's. Each
 * variant's outputs must agree with the cost model's program (a wrong kernel is dropped, not
 * timed; within 1e-3 of the outputs' largest magnitude, 1e-1 under --math bf16). Then `rounds`
 * rounds profile every variant in turn, so that a busy spell of the machine falls on all of them
 * alike; a layer's time under an algorithm is the median over the rounds of its per-step median.
 * Layers of the same geometry (a ResNet's repeated blocks) are decided together, on the sum of
 * their times. An algorithm replaces the cost model's pick only where it is faster by more than the
 * margin, so noise does not flip a pick, and only where the whole model is faster with the records
 * too. */
#include "profile.h"
#include "../codegen/emit-params.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* A tuned layer: its group, key, the cost model's algorithm, the algorithms that apply (bit a)
 * and its times per algorithm. */
typedef struct tune_layer {
    int gi;
    char key[DL_TUNING_KEY_MAX];
    int model_algo;
    unsigned applies;
    double ms[DLRT_CONV_ALGOS]; /* median over rounds; < 0: not measured */
} tune_layer;

typedef struct tune_variant {
    int algo; /* -1: the cost model's program */
    dl_program *prog;
    double *ms; /* [rounds][steps] */
} tune_variant;

/* Largest |a - b| over the float outputs, relative to the largest |a| (at least 1); other
 * outputs (a class index) must be equal; inf for any output that differs in dtype, size or
 * (not float) bytes. */
static double max_rel_diff(dl_tensor **a, dl_tensor **b, int n) {
    double diff = 0, scale = 1;
    for (int j = 0; j < n; j++) {
        const int64_t numel = dl_tensor_numel(a[j]);
        if (dl_tensor_dtype(a[j]) != dl_tensor_dtype(b[j]) || numel != dl_tensor_numel(b[j]))
            return INFINITY;
        if (dl_tensor_dtype(a[j]) != DL_F32) {
            if (numel && memcmp(dl_tensor_data(a[j]), dl_tensor_data(b[j]),
                                (size_t)numel * dl_dtype_size(dl_tensor_dtype(a[j]))) != 0)
                return INFINITY;
            continue;
        }
        const float *x = dl_tensor_data(a[j]), *y = dl_tensor_data(b[j]);
        for (int64_t i = 0; i < dl_tensor_numel(a[j]); i++) {
            const double d = fabs((double)x[i] - (double)y[i]);
            if (!(d <= diff)) diff = d; /* NaN counts as a difference */
            if (fabs(x[i]) > scale) scale = fabs(x[i]);
        }
    }
    return diff / scale;
}

static void free_outputs(dl_tensor **o, int n) {
    for (int j = 0; o && j < n; j++) dl_tensor_free(o[j]), o[j] = NULL;
}

/* Whether variant v gives the cost model's outputs (ref) within tol. */
static dl_status agrees(dl_ctx *ctx, dl_program *v, int n_in, dl_tensor *const *in, dl_tensor **ref,
                        int n_out, double tol, bool *ok, double *err) {
    dl_tensor **o = dl_calloc((size_t)n_out + 1, sizeof *o);
    if (!o) return dl_fail(ctx, DL_ERR_NOMEM, "out of memory tuning");
    dl_status s = dl_program_run(ctx, v, n_in, NULL, in, o);
    if (s == DL_OK) {
        *err = max_rel_diff(ref, o, n_out);
        *ok = *err <= tol;
    }
    free_outputs(o, n_out);
    dl_free(o);
    return s;
}

static void layer_note(const tune_layer *ly, int count, int threads, int pick, char *buf,
                       size_t n) {
    size_t at = (size_t)snprintf(buf, n, "ms per layer:");
    for (int a = 0; a < DLRT_CONV_ALGOS && at < n; a++)
        if (ly->ms[a] >= 0)
            at += (size_t)snprintf(buf + at, n - at, " %s %.3f", dlrt_conv_algo_name(a),
                                   ly->ms[a] / count);
    if (at < n)
        snprintf(buf + at, n - at, "; cost model %s; %d layer%s, %d thread%s%s",
                 dlrt_conv_algo_name(ly->model_algo), count, count == 1 ? "" : "s", threads,
                 threads == 1 ? "" : "s", pick == ly->model_algo ? "" : "; measured faster");
}

/* The layers of layers[l]'s key summed (each algorithm's time, -1 where one was not measured)
 * into *sum, their count in *count; false where an earlier layer has the key (already done). */
static bool key_sum(const tune_layer *layers, int nl, int l, tune_layer *sum, int *count) {
    for (int k = 0; k < l; k++)
        if (strcmp(layers[k].key, layers[l].key) == 0) return false;
    *sum = layers[l];
    *count = 1;
    for (int k = l + 1; k < nl; k++) {
        if (strcmp(layers[k].key, layers[l].key) != 0) continue;
        ++*count;
        for (int a = 0; a < DLRT_CONV_ALGOS; a++)
            sum->ms[a] =
                sum->ms[a] >= 0 && layers[k].ms[a] >= 0 ? sum->ms[a] + layers[k].ms[a] : -1;
    }
    return true;
}

dl_status dl_tune(dl_ctx *ctx, dl_graph *g, const dl_compile_options *o, int n_in,
                  dl_tensor *const *inputs, const dl_tune_opts *to, dl_tuning *db,
                  dl_tune_result *res) {
    FILE *log = to->log;
    memset(res, 0, sizeof *res);
    /* (col[] and runs[] below hold 64 rounds) */
    const int rounds = to->rounds <= 0 ? 3 : to->rounds > 64 ? 64 : to->rounds;
    const int n_out = dl_graph_num_outputs(g);
    tune_variant var[DLRT_CONV_ALGOS + 2]; /* the cost model, each algorithm, the tuned */
    int nv = 0;
    memset(var, 0, sizeof var);
    tune_layer *layers = NULL;
    dl_tensor **ref = dl_calloc((size_t)n_out + 1, sizeof *ref);
    dl_status s = ref ? DL_OK : dl_fail(ctx, DL_ERR_NOMEM, "out of memory tuning");
    if (s == DL_OK) s = dl_compile_tuned(ctx, g, o, NULL, -1, &var[0].prog);
    if (s != DL_OK) goto done;
    var[nv++].algo = -1;
    dl_program *base = var[0].prog;
    if (base->interp_only) {
        s = dl_fail(ctx, DL_ERR_UNSUPPORTED,
                    "tuning needs native code: no working C compiler (set CC)");
        goto done;
    }
    const int steps = base->fusion->n;
    layers = dl_calloc((size_t)steps + 1, sizeof *layers);
    if (!layers) {
        s = dl_fail(ctx, DL_ERR_NOMEM, "out of memory tuning");
        goto done;
    }
    /* the reference outputs; the run also binds the batch of a symbolic one */
    if ((s = dl_program_run(ctx, base, n_in, NULL, inputs, ref)) != DL_OK) goto done;
    /* the layers: convolutions that have a choice */
    int nl = 0;
    bool applies[DLRT_CONV_ALGOS] = {0};
    for (int gi = 0; gi < steps; gi++) {
        const dl_group *gr = &base->fusion->groups[gi];
        dlrt_conv p; /* its batch 0 when symbolic (the key's n=*); depthwise: one algorithm */
        if (!dl_tuning_conv_of(gr, &p, NULL) || (p.group > 1 && p.c_in == p.group)) continue;
        tune_layer *ly = &layers[nl];
        ly->gi = gi;
        dl_tuning_conv_key(&p, base->stats.isa, ly->key, sizeof ly->key);
        ly->model_algo = dl_tuning_conv_algo(gr, base->plan.valid ? base->plan.syms : NULL);
        int choices = 0;
        /* (whether an algorithm applies does not depend on the batch, 0 when symbolic) */
        for (int a = 0; a < DLRT_CONV_ALGOS; a++) {
            ly->ms[a] = -1;
            if (a != DLRT_CONV_DEPTHWISE && dlrt_conv_algo_ok(&p, a)) {
                choices++;
                ly->applies |= 1u << a;
                if (a != ly->model_algo) applies[a] = true;
            }
        }
        if (choices > 1) nl++;
    }
    res->layers = nl;
    if (nl == 0) {
        if (log) fprintf(log, "no convolution of this model has a choice of algorithm\n");
        goto done;
    }
    /* one program per algorithm that some layer could run instead of the model's pick */
    for (int a = 0; a < DLRT_CONV_ALGOS; a++) {
        if (!applies[a]) continue;
        if (log) fprintf(log, "compiling with %s where it applies\n", dlrt_conv_algo_name(a));
        dl_program *v;
        if ((s = dl_compile_tuned(ctx, g, o, NULL, a, &v)) != DL_OK) goto done;
        bool ok = false;
        double err = 0;
        /* under bf16 a forced algorithm also changes precision (Winograd, implicit and direct
         * layers compute in float32, 1x1 and im2col in bfloat16) and the rounding compounds
         * from layer to layer: 16 3x3 layers of 64 channels differed by 6e-3 to 9e-3 */
        const double tol = o && o->math == DL_MATH_BF16 ? 1e-1 : 1e-3;
        if ((s = agrees(ctx, v, n_in, inputs, ref, n_out, tol, &ok, &err)) != DL_OK ||
            v->fusion->n != steps) {
            dl_program_free(v);
            if (s == DL_OK) s = dl_fail(ctx, DL_ERR_INTERNAL, "tuning: a variant has other steps");
            goto done;
        }
        if (!ok) { /* a kernel bug: never pick it, say so */
            fprintf(stderr,
                    "dlcc: warning: tune: %s gives outputs %.3g (relative) off the cost model's "
                    "program; not timed\n",
                    dlrt_conv_algo_name(a), err);
            dl_program_free(v);
            continue;
        }
        var[nv].algo = a;
        var[nv++].prog = v;
    }
    for (int i = 0; i < nv; i++) {
        var[i].ms = dl_calloc((size_t)rounds * (size_t)steps + 1, sizeof *var[i].ms);
        if (!var[i].ms) {
            s = dl_fail(ctx, DL_ERR_NOMEM, "out of memory tuning");
            goto done;
        }
    }
    for (int r = 0; r < rounds; r++) {
        if (log) fprintf(log, "round %d of %d: timing %d programs\n", r + 1, rounds, nv);
        for (int i = 0; i < nv; i++) {
            dl_profile pr;
            s = dl_profile_program(ctx, var[i].prog, n_in, NULL, inputs, to->warmup, to->iters,
                                   &pr);
            for (int st = 0; s == DL_OK && st < steps; st++)
                var[i].ms[(size_t)r * steps + st] = pr.steps[st].ms;
            dl_profile_free(&pr);
            if (s != DL_OK) goto done;
        }
    }
    /* each layer's median over rounds, per algorithm that ran it */
    double col[64];
    for (int l = 0; l < nl; l++) {
        tune_layer *ly = &layers[l];
        for (int i = 0; i < nv; i++) {
            const int a = var[i].algo < 0 ? ly->model_algo : var[i].algo;
            if (var[i].algo >= 0 && (a == ly->model_algo || !(ly->applies >> a & 1))) continue;
            for (int r = 0; r < rounds; r++) col[r] = var[i].ms[(size_t)r * steps + ly->gi];
            ly->ms[a] = dl_median(col, rounds);
        }
    }
    /* decide per key, on the sums over its layers */
    if (log)
        fprintf(log, "\n%-72s %6s  %-12s %8s  %-12s %8s\n", "layer geometry", "layers",
                "cost model", "ms", "measured", "ms");
    for (int l = 0; l < nl; l++) {
        tune_layer sum;
        int count;
        if (!key_sum(layers, nl, l, &sum, &count)) continue;
        int best = sum.model_algo;
        for (int a = 0; a < DLRT_CONV_ALGOS; a++)
            if (sum.ms[a] >= 0 && sum.ms[best] >= 0 && sum.ms[a] < sum.ms[best]) best = a;
        if (!(sum.ms[best] < sum.ms[sum.model_algo] * (1.0 - to->margin))) best = sum.model_algo;
        char note[DL_TUNING_LINE_MAX / 2];
        layer_note(&sum, count, dl_program_threads(base), best, note, sizeof note);
        /* a record that keeps the pick says "model": the layer then compiles as without one
         * (a pinned pick would no longer follow the batch nor packed weights) */
        if ((s = dl_tuning_set(ctx, db, sum.key, best == sum.model_algo ? DL_TUNING_MODEL : best,
                               note)) != DL_OK)
            goto done;
        res->keys++;
        res->changed += best != sum.model_algo;
        if (log)
            fprintf(log, "%-72s %6d  %-12s %8.3f  %-12s %8.3f%s\n", sum.key, count,
                    dlrt_conv_algo_name(sum.model_algo), sum.ms[sum.model_algo],
                    dlrt_conv_algo_name(best), sum.ms[best],
                    best != sum.model_algo ? "  <- changed" : "");
    }
    /* the whole model, tuned against the cost model's, in alternation */
    if (res->changed > 0) {
        if (log) fprintf(log, "\ntiming the tuned program against the cost model's\n");
        if ((s = dl_compile_tuned(ctx, g, o, db, -1, &var[nv].prog)) != DL_OK) goto done;
        var[nv++].algo = -1;
        double runs[2][64];
        for (int r = 0; r < rounds && s == DL_OK; r++)
            for (int w = 0; w < 2 && s == DL_OK; w++) {
                dl_bench_result b;
                s = dl_bench_program(ctx, w ? var[nv - 1].prog : base, n_in, NULL, inputs,
                                     to->warmup, to->iters, &b);
                if (s == DL_OK) runs[w][r] = b.median_ms;
            }
        if (s != DL_OK) goto done;
        res->base_ms = dl_median(runs[0], rounds);
        res->tuned_ms = dl_median(runs[1], rounds);
        /* faster layer by layer is not faster as a whole where a layer's gain moves to its
         * neighbours (the data it leaves in the caches): then every record says "model", the
         * times kept as its note (ResNet-50: 5 layer geometries 4-12% faster
         * alone, the whole model 1.003x) */
        if (!(res->tuned_ms < res->base_ms * (1.0 - to->margin / 3.0))) {
            res->kept = true;
            for (int l = 0; l < nl && s == DL_OK; l++) {
                tune_layer sum;
                int count;
                if (!key_sum(layers, nl, l, &sum, &count) ||
                    dl_tuning_get(db, sum.key) == DL_TUNING_MODEL)
                    continue;
                char note[DL_TUNING_LINE_MAX / 2];
                layer_note(&sum, count, dl_program_threads(base), sum.model_algo, note,
                           sizeof note);
                const size_t at = strlen(note);
                snprintf(note + at, sizeof note - at,
                         "; faster alone, but not the whole model (%.3f against %.3f ms)",
                         res->tuned_ms, res->base_ms);
                s = dl_tuning_set(ctx, db, sum.key, DL_TUNING_MODEL, note);
            }
        }
    }
done:
    free_outputs(ref, n_out);
    dl_free(ref);
    for (int i = 0; i < nv; i++) dl_program_free(var[i].prog), dl_free(var[i].ms);
    dl_free(layers);
    return s;
}
