/* native-ref.h — the comparison the compiler's unit tests share: a compiled program against the
 * reference interpreter on the same inputs. Include after dlcc.h and check.h's includes. */
#ifndef DL_TEST_NATIVE_REF_H
#define DL_TEST_NATIVE_REF_H

#include "../../src/core/core-impl.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Largest |a - b| / (0.1 + |b|) (allclose with atol = 0.1 * rtol); inf when dtypes or shapes
 * differ. */
static inline double max_rel(const dl_tensor *a, const dl_tensor *b) {
    if (!a || !b || a->rank != b->rank || a->numel != b->numel || a->dtype != b->dtype)
        return INFINITY;
    for (int d = 0; d < a->rank; d++)
        if (a->dims[d] != b->dims[d]) return INFINITY;
    double worst = 0;
    for (int64_t i = 0; i < a->numel; i++) {
        double x = dl_get_f64(a, i), y = dl_get_f64(b, i);
        double e = fabs(x - y) / (0.1 + fabs(y));
        if (!(e <= worst)) worst = e;
    }
    return worst;
}

/* Runs g on the reference backend and p (compiled from g) on the same inputs; the worst max_rel
 * over the outputs (inf on an error, printed, or more than 8 outputs). */
static inline double native_vs_ref(dl_ctx *ctx, dl_graph *g, dl_program *p, int n_in,
                                   dl_tensor **in) {
    int n_out = dl_graph_num_outputs(g);
    dl_tensor *want[8] = {0}, *got[8] = {0};
    double worst = INFINITY;
    if (n_out > 8) return worst;
    if (dl_run(ctx, g, DL_BACKEND_REF, n_in, NULL, in, want) != DL_OK) {
        printf("  ref: %s\n", dl_errmsg(ctx));
        return worst;
    }
    if (dl_program_run(ctx, p, n_in, NULL, in, got) != DL_OK) {
        printf("  native: %s\n", dl_errmsg(ctx));
    } else {
        worst = 0;
        for (int i = 0; i < n_out; i++) {
            double e = max_rel(got[i], want[i]);
            if (!(e <= worst)) worst = e;
        }
    }
    for (int i = 0; i < n_out; i++) {
        dl_tensor_free(want[i]);
        dl_tensor_free(got[i]);
    }
    return worst;
}

/* g compiled with o into *p1 and with o at 2 threads into *p2; false (the message printed,
 * both NULL) when either fails. */
static inline bool compile_1_2(dl_ctx *ctx, dl_graph *g, const dl_compile_options *o,
                               dl_program **p1, dl_program **p2) {
    dl_compile_options o2 = *o;
    o2.threads = 2;
    *p1 = *p2 = NULL;
    if (dl_graph_status(g) == DL_OK && dl_compile(ctx, g, o, p1) == DL_OK &&
        dl_compile(ctx, g, &o2, p2) == DL_OK)
        return true;
    printf("  %s\n", dl_errmsg(ctx));
    dl_ctx_clear(ctx);
    dl_program_free(*p1);
    *p1 = NULL;
    return false;
}

/* p1 and p2 (one graph at two thread counts) run on the same inputs: whether both run and
 * their outputs (up to 8) have the same shapes and bytes. */
static inline bool same_bits_1_2(dl_ctx *ctx, dl_program *p1, dl_program *p2, int n_in,
                                 dl_tensor *const *in) {
    dl_tensor *y1[8] = {0}, *y2[8] = {0};
    const int n_out = dl_graph_num_outputs(dl_program_graph(p1));
    bool same = n_out <= 8 && dl_program_run(ctx, p1, n_in, NULL, in, y1) == DL_OK &&
                dl_program_run(ctx, p2, n_in, NULL, in, y2) == DL_OK;
    for (int i = 0; same && i < n_out; i++)
        same = dl_tensor_numel(y1[i]) == dl_tensor_numel(y2[i]) &&
               dl_tensor_dtype(y1[i]) == dl_tensor_dtype(y2[i]) &&
               !memcmp(dl_tensor_data(y1[i]), dl_tensor_data(y2[i]),
                       (size_t)dl_tensor_numel(y1[i]) * dl_dtype_size(dl_tensor_dtype(y1[i])));
    if (!same) printf("  %s\n", dl_errmsg(ctx));
    dl_ctx_clear(ctx);
    for (int i = 0; i < 8; i++) dl_tensor_free(y1[i]), dl_tensor_free(y2[i]);
    return same;
}

#endif
