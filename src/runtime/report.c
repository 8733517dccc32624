/* report.c — `dlcc compile --report`: what the compiler did to a model (node counts, groups by
 * kind, memory plan against the naive allocators, compile times), and `--dot` with groups. */
#include "program-impl.h"

static double mib(int64_t b) {
    return (double)b / (1024.0 * 1024.0);
}

dl_status dl_program_report(dl_ctx *ctx, dl_program *p, int n_inputs, dl_tensor *const *inputs,
                            void *file) {
    FILE *f = file ? file : stdout;
    const dl_compile_stats *st = &p->stats;
    fprintf(f, "nodes: %d before passes, %d after\n", st->nodes_before, st->nodes_after);
    if (p->interp_only) {
        fprintf(f, "no C compiler: the program runs on the reference interpreter\n");
        return DL_OK;
    }
    int by_kind[DL_G_KIND_COUNT] = {0};
    for (int gi = 0; gi < p->fusion->n; gi++) by_kind[p->fusion->groups[gi].kind]++;
    fprintf(f, "kernels: %d steps, %d generated (", p->fusion->n, st->kernels_generated);
    bool first = true;
    for (int k = 0; k < DL_G_KIND_COUNT; k++) {
        if (!by_kind[k] || k == DL_G_VIEW || k == DL_G_FALLBACK) continue;
        fprintf(f, "%s%s %d", first ? "" : ", ", dl_gkind_name((dl_gkind)k), by_kind[k]);
        first = false;
    }
    fprintf(f, "), %d views, %d reference fallbacks\n", by_kind[DL_G_VIEW], by_kind[DL_G_FALLBACK]);
    if (by_kind[DL_G_FALLBACK]) {
        fprintf(f, "fallback ops:");
        for (int gi = 0, shown = 0; gi < p->fusion->n && shown < 20; gi++) {
            const dl_group *gr = &p->fusion->groups[gi];
            if (gr->kind != DL_G_FALLBACK) continue;
            fprintf(f, " %s", gr->nodes[0]->op->name);
            shown++;
        }
        fprintf(f, "\n");
    }
    if (p->notes.len) fprintf(f, "%s", dl_sb_str(&p->notes));
    if (n_inputs != p->g->inputs.len)
        return dl_fail(ctx, DL_ERR_INVALID, "report: %d inputs given, the model has %d", n_inputs,
                       p->g->inputs.len);
    DL_TRY(dl_plan_bind(ctx, p, inputs));
    const dl_plan *pl = &p->plan;
    int by_algo[DLRT_CONV_ALGOS] = {0}, convs = 0;
    for (int gi = 0; gi < p->fusion->n; gi++) {
        const int a = dl_tuning_conv_algo(&p->fusion->groups[gi], pl->valid ? pl->syms : NULL);
        if (a >= 0 && a < DLRT_CONV_ALGOS) by_algo[a]++, convs++;
    }
    if (convs) {
        fprintf(f, "convolutions:");
        for (int a = 0, n = 0; a < DLRT_CONV_ALGOS; a++)
            if (by_algo[a])
                fprintf(f, "%s %s %d", n++ ? "," : "", dlrt_conv_algo_name(a), by_algo[a]);
        fprintf(f, " (%d by tuning records, the others by the cost model)\n", st->tuned_convs);
    }
    if (st->math == DL_MATH_BF16)
        fprintf(f, "math: bf16: MatMul/Gemm products: %d, convolutions as GEMMs: %d, %s\n",
                st->products, by_algo[DLRT_CONV_GEMM_1X1] + by_algo[DLRT_CONV_IM2COL],
                st->bf16_built ? "in bfloat16 (AVX512-BF16), sums in float32"
                               : "in float32: the kernels were built without AVX512-BF16");
    if (pl->dynamic) {
        fprintf(f, "memory: shapes depend on data; tensors are allocated step by step\n");
    } else {
        fprintf(f,
                "memory: arena %.2f MiB (planned); naive free-after-last-use peak %.2f MiB; sum of "
                "all intermediates %.2f MiB; kernel scratch %.2f MiB\n",
                mib(pl->arena_bytes), mib(pl->naive_peak), mib(pl->sum_bytes),
                mib((int64_t)pl->ws_bytes));
    }
    fprintf(f,
            "compile: instruction set %s; passes %.1f ms, codegen %.1f ms (%zu bytes of C), "
            "build %.1f ms (%s), total %.1f ms\n",
            st->isa[0] ? st->isa : "none (interpreter)", st->passes_ms, st->emit_ms,
            st->source_bytes, st->build_ms,
            st->kernels_generated == 0 ? "nothing to build"
            : st->cache_hit            ? "cache hit"
                                       : "cache miss",
            st->total_ms);
    return DL_OK;
}

dl_status dl_program_write_dot(dl_ctx *ctx, dl_program *p, const char *path) {
    FILE *f = fopen(path, "w");
    if (!f) return dl_fail(ctx, DL_ERR_IO, "cannot write '%s'", path);
    fprintf(f, "digraph dlcc {\n  rankdir=TB;\n  node [shape=box, fontsize=10];\n");
    char t[256];
    for (int gi = 0; p->fusion && gi < p->fusion->n; gi++) {
        const dl_group *gr = &p->fusion->groups[gi];
        fprintf(f, "  subgraph cluster_%d {\n    label=\"%d: %s\";\n    style=rounded;\n", gi, gi,
                dl_gkind_name(gr->kind));
        for (int k = 0; k < gr->n_nodes; k++)
            fprintf(f, "    n%p [label=\"%s\"];\n", (void *)gr->nodes[k], gr->nodes[k]->op->name);
        fprintf(f, "  }\n");
    }
    for (int k = 0; k < p->g->nodes.len; k++) {
        const dl_node *n = p->g->nodes.items[k];
        for (int i = 0; i < n->n_in; i++) {
            const dl_value *v = n->in[i];
            if (!v || !v->producer) continue;
            fprintf(f, "  n%p -> n%p [label=\"%s\", fontsize=8];\n", (void *)v->producer, (void *)n,
                    dl_type_str(p->g, &v->type, t, sizeof t));
        }
    }
    fprintf(f, "}\n");
    bool bad = ferror(f);
    if (fclose(f) != 0 || bad) return dl_fail(ctx, DL_ERR_IO, "error writing '%s'", path);
    return DL_OK;
}
