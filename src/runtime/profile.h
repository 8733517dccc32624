/* profile.h — measuring a compiled program, for `dlcc bench` and `dlcc profile`: repeated timed
 * runs (profile.c), per-step times through the executor's step hook with FLOP and byte
 * estimates per fusion group (profile.c), the machine's roofline — peak FLOP/s and memory
 * bandwidth (roofline.c) — and the printed table, the bench summary and the Chrome trace
 * (profile-out.c). */
#ifndef DL_PROFILE_H
#define DL_PROFILE_H

#include "program-impl.h"

/* ---- bench: whole runs ---- */
typedef struct dl_bench_result {
    int warmup, iters;
    double median_ms, p90_ms, min_ms, mean_ms;
} dl_bench_result;

/* Runs the program warmup times, then iters timed runs (iters <= 0: at least 10 and about 2 s
 * worth, at most 1000). Outputs are freed after each run, outside the timed span. */
dl_status dl_bench_program(dl_ctx *ctx, dl_program *p, int n_inputs, const char *const *names,
                           dl_tensor *const *inputs, int warmup, int iters, dl_bench_result *out);

/* Median of v[0..n) (n >= 1; sorts v). */
double dl_median(double *v, int n);

/* Threads the program's kernels run on (its compile option, else all cores). */
int dl_program_threads(const dl_program *p);
/* All online cores (what `dlcc bench` and `dlcc profile` use when --threads is not given). */
int dl_default_threads(void);

/* ---- profile: per step ---- */
typedef struct dl_step_stat {
    dl_gkind kind;
    double ms;    /* median over the iterations */
    double flops; /* estimate (see profile.c); 0 when not counted */
    double bytes; /* the group's input and output tensors, constants included; 0 when unknown */
    dl_type out;  /* concrete type of the group's first output; rank -1 when unknown */
} dl_step_stat;

typedef struct dl_profile {
    int n_steps, iters;
    bool interp_only; /* the program runs on the reference interpreter: no steps */
    dl_step_stat *steps;
    double run_ms; /* median over the iterations of the whole dl_program_run */
    /* One representative iteration (the run closest to the median) for the trace: step s
     * started rep_start_us[s] after the run began and took rep_dur_us[s]. */
    double *rep_start_us, *rep_dur_us;
    double rep_run_us;
} dl_profile;

/* Runs the program warmup times, then iters timed runs (iters <= 0: at least 10 and about 2 s
 * worth, as dl_bench_program; at most 1000; out->iters says how many) with a step hook that
 * only reads CLOCK_MONOTONIC. A step's time is the span since the previous step ended (since
 * the call began for step 0, so it includes binding the inputs). out is zeroed first; free it
 * with dl_profile_free, also after a failure. */
dl_status dl_profile_program(dl_ctx *ctx, dl_program *p, int n_inputs, const char *const *names,
                             dl_tensor *const *inputs, int warmup, int iters, dl_profile *out);
void dl_profile_free(dl_profile *pr);

/* ---- tune: each convolution's algorithm measured in the model (tune.c) ---- */
typedef struct dl_tune_opts {
    int rounds;    /* profiles of every variant, in turn (<= 0: 3; at most 64 count) */
    int warmup;    /* untimed runs before each profile */
    int iters;     /* timed runs per profile (<= 0: about 2 s worth, as dl_profile_program) */
    double margin; /* an algorithm replaces the cost model's pick only when this much faster
                    * (a fraction: 0.03 is 3%) */
    void *log;     /* FILE* for progress and the table of layers; NULL: quiet */
} dl_tune_opts;

typedef struct dl_tune_result {
    int layers;      /* convolutions with a choice of algorithm */
    int keys;        /* distinct geometries among them: the records written */
    int changed;     /* records whose measured algorithm is not the cost model's */
    double base_ms;  /* whole model, median: the cost model's program (0 when nothing changed) */
    double tuned_ms; /* ... and the program with the records */
    bool kept;       /* the tuned program was not faster by a third of the margin: every record
                      * says "model" (changed still counts the layers' verdicts) */
} dl_tune_result;

/* Times every convolution algorithm that applies to each layer of g inside the model (inputs
 * bound by position; o: the compile options, o->tuning ignored) and adds a record per layer
 * geometry to db: the fastest, where it beats the cost model's pick by the margin, else the
 * cost model's pick; and the cost model's picks throughout where the whole model is not
 * faster with the records (res->kept). */
dl_status dl_tune(dl_ctx *ctx, dl_graph *g, const dl_compile_options *o, int n_in,
                  dl_tensor *const *inputs, const dl_tune_opts *to, dl_tuning *db,
                  dl_tune_result *res);

/* ---- the machine's roofline ---- */
typedef struct dl_machine {
    int threads;
    const char *isa;      /* the vector code the FMA loop ran: "avx512f", "avx2", "generic" */
    double peak_gflops_1; /* one thread */
    double peak_gflops;   /* one thread x threads */
    double bandwidth_gbs; /* memcpy over 64 MiB on `threads` threads, read + write bytes */
} dl_machine;

/* Takes ~0.1 s. Fails only for lack of memory. */
dl_status dl_measure_machine(dl_ctx *ctx, int threads, dl_machine *out);
/* Percent of the roofline that flops in ms reach: achieved / min(peak, intensity x bandwidth);
 * negative when it does not apply (no flops or bytes counted, no time). */
double dl_roofline_percent(const dl_machine *m, double flops, double bytes, double ms);

/* ---- output ---- */
/* The per-step table sorted by time (top <= 0: all steps), then totals per kind. m may be NULL
 * (no roofline column). file: FILE*. */
dl_status dl_profile_print(dl_ctx *ctx, const dl_profile *pr, const dl_program *p,
                           const dl_machine *m, int top, void *file);
/* Chrome trace JSON ({"traceEvents": [...]}) of the representative iteration. */
dl_status dl_profile_trace_json(dl_ctx *ctx, const dl_profile *pr, const dl_program *p,
                                dl_sbuf *out);
dl_status dl_profile_write_trace(dl_ctx *ctx, const dl_profile *pr, const dl_program *p,
                                 const char *path);
/* Appends s as a JSON string literal: quotes, escapes, and U+FFFD for bytes that are not
 * UTF-8 (model names are arbitrary bytes). */
void dl_json_string(dl_sbuf *b, const char *s);
/* Copies s for a table column: at most max_chars characters ("..." marks a cut), control
 * characters and broken UTF-8 as '?'. */
void dl_table_text(const char *s, int max_chars, char *buf, size_t n);
/* `dlcc bench`: a short block, or one JSON line (the format scripts parse). file: FILE*. */
dl_status dl_bench_print(dl_ctx *ctx, const char *model, int threads, const dl_bench_result *r,
                         double compile_ms, bool json, void *file);

#endif
