/* kernel-case.h — how the tests of one op's native kernel (test_convtranspose, test_resize,
 * test_groupnorm) start a case: the graph compiled at 1 and 2 threads, and the program checked
 * to be one group of the kernel's kind, or one reference fallback where the op must keep it.
 * Include after program-impl.h, check.h and native-ref.h. */
#ifndef DLCC_TEST_KERNEL_CASE_H
#define DLCC_TEST_KERNEL_CASE_H

static inline int count_kind(const dl_program *p, dl_gkind k) {
    int n = 0;
    for (int gi = 0; gi < p->fusion->n; gi++) n += p->fusion->groups[gi].kind == k;
    return n;
}

/* g compiled with o into *p and at 2 threads into *p2, with the checks "NAME: compiles" and
 * "NAME: WHAT" (one `kind` group and no fallback when native, else no such group and one
 * fallback); false when it did not compile (g is then freed). */
static inline bool compile_case(dl_ctx *ctx, dl_graph *g, const dl_compile_options *o,
                                const char *name, dl_gkind kind, const char *what, bool native,
                                dl_program **p, dl_program **p2) {
    char nm[256];
    snprintf(nm, sizeof nm, "%s: compiles", name);
    if (!compile_1_2(ctx, g, o, p, p2)) {
        CHECK(nm, false);
        dl_graph_free(g);
        return false;
    }
    snprintf(nm, sizeof nm, "%s: %s", name, native ? what : "stays with the reference kernel");
    CHECK(nm, native ? count_kind(*p, kind) == 1 && count_kind(*p, DL_G_FALLBACK) == 0
                     : count_kind(*p, kind) == 0 && count_kind(*p, DL_G_FALLBACK) == 1);
    return true;
}

/* One run of a compiled case on inputs in: "WHAT: native equals ref (ERR)", native_vs_ref within
 * tol, and "WHAT: the same bits with 2 threads" (p2 is the program at 2 threads). */
static inline void check_run(dl_ctx *ctx, dl_graph *g, dl_program *p, dl_program *p2, int n_in,
                             dl_tensor **in, double tol, const char *what) {
    char nm[320];
    const double err = native_vs_ref(ctx, g, p, n_in, in);
    snprintf(nm, sizeof nm, "%s: native equals ref (%.2g)", what, err);
    CHECK(nm, err <= tol);
    dl_ctx_clear(ctx);
    snprintf(nm, sizeof nm, "%s: the same bits with 2 threads", what);
    CHECK(nm, same_bits_1_2(ctx, p, p2, n_in, in));
}

#endif
