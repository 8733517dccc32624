/* compile.c — dl_compile: copy the graph, run the inference passes, emit one C module for the
 * fusion groups, build it through the JIT cache and look its kernels up. Without a usable C
 * compiler the program runs on the reference interpreter, with a warning. */
#include "program-impl.h"
#include "../codegen/isa.h"
#include "../codegen/module.h"
#include "../ir/rewrite.h"

#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

void dl_compile_options_init(dl_compile_options *o) {
    memset(o, 0, sizeof *o);
}

dl_target dl_host_target(int threads) {
    dl_target t = {.vector_bytes = 16, .threads = threads};
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f"))
        t.vector_bytes = 64;
    else if (__builtin_cpu_supports("avx2"))
        t.vector_bytes = 32;
#endif
    if (t.threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        t.threads = n > 0 ? (int)n : 1;
    }
    return t;
}

/* Replaces `#include "dlrt.h"` / `#include "dlrt-impl.h"` lines by the files' text, so each
 * translation unit stands alone (no include path needed by the compiler). */
void dl_rt_expand(const char *text, dl_sbuf *out) {
    const char *p = text;
    while (*p) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p + 1) : strlen(p);
        bool done = false;
        if (!strncmp(p, "#include \"", 10)) {
            const char *q = p + 10, *e = memchr(q, '"', len - 10);
            for (int i = 0; e && i < dl_rt_n_files && !done; i++) {
                const char *name = dl_rt_files[i].name;
                if (strlen(name) == (size_t)(e - q) && !strncmp(q, name, (size_t)(e - q))) {
                    dl_sb_printf(out, "/* ---- %s ---- */\n", name);
                    dl_rt_expand(dl_rt_files[i].text, out);
                    done = true;
                }
            }
        }
        if (!done) dl_sb_putn(out, p, len);
        p += len;
    }
}

/* Explicit flags (the option, then $DLCC_CFLAGS) win over the instruction set's. */
static dl_jit_opts jit_opts(const dl_compile_options *o, const dl_isa *isa) {
    const char *flags = o->cflags ? o->cflags : getenv("DLCC_CFLAGS");
    dl_jit_opts j = {.cc = o->cc,
                     .cflags = flags ? flags : isa->cflags,
                     .cache_dir = o->cache_dir,
                     .no_cache = o->no_cache != 0,
                     .verbose = o->verbose != 0};
    return j;
}

/* Packs the weights the module asked for (module.h: dlk_n_packs, dlk_pack_src, dlk_pack_bytes,
 * dlk_pack), once, with the module's own code, so the layout matches its microkernel. */
static dl_status prepack(dl_ctx *ctx, dl_program *p) {
    const int *np = dl_jit_sym(p->lib, "dlk_n_packs");
    const int *src = dl_jit_sym(p->lib, "dlk_pack_src");
    int64_t (*bytes)(int) = (int64_t(*)(int))dl_jit_sym(p->lib, "dlk_pack_bytes");
    void (*pack)(int, const void *, void *) =
        (void (*)(int, const void *, void *))dl_jit_sym(p->lib, "dlk_pack");
    if (!np || *np == 0) return DL_OK;
    if (!src || !bytes || !pack || *np < 0)
        return dl_fail(ctx, DL_ERR_INTERNAL, "the compiled module's weight packing is incomplete");
    p->packs = dl_calloc((size_t)*np, sizeof *p->packs);
    if (!p->packs) return dl_fail(ctx, DL_ERR_NOMEM, "out of memory packing weights");
    p->n_packs = *np;
    /* one block for all, so that it can be backed by huge pages (dl_malloc_huge); each pack
     * starts 64-byte aligned, at the offset first kept in packs[k] */
    size_t total = 0;
    for (int k = 0; k < *np; k++) {
        const dl_value *v =
            src[k] >= 0 && src[k] < p->g->values.len ? p->g->values.items[src[k]] : NULL;
        int64_t n = bytes(k);
        if (!v || !v->constant || n < 0)
            return dl_fail(ctx, DL_ERR_INTERNAL, "packed weight %d has no constant source", k);
        if ((uint64_t)n > dl_alloc_limit())
            return dl_fail(ctx, DL_ERR_LIMIT,
                           "packed weight %d needs %lld bytes, over the allocation cap of %zu", k,
                           (long long)n, dl_alloc_limit());
        const size_t len = ((size_t)n + 63) / 64 * 64;
        if (total > SIZE_MAX - len)
            return dl_fail(ctx, DL_ERR_LIMIT, "the packed weights' size overflows");
        p->packs[k] = (void *)(uintptr_t)total;
        total += len;
    }
    /* (each pack is capped as one allocation would be; their block is as large as their sum) */
    p->pack_mem = dl_malloc_huge(total);
    if (!p->pack_mem)
        return dl_fail(ctx, DL_ERR_NOMEM, "out of memory allocating %zu bytes of packed weights",
                       total);
    p->pack_bytes = total;
    for (int k = 0; k < *np; k++) {
        p->packs[k] = (char *)p->pack_mem + (uintptr_t)p->packs[k];
        pack(k, ((const dl_value *)p->g->values.items[src[k]])->constant->data, p->packs[k]);
    }
    return DL_OK;
}

static dl_status build(dl_ctx *ctx, dl_program *p, const dl_jit_opts *jo) {
    int n_rt_c = 0;
    for (int i = 0; i < dl_rt_n_files; i++) {
        const char *nm = dl_rt_files[i].name;
        size_t l = strlen(nm);
        if (l > 2 && !strcmp(nm + l - 2, ".c")) n_rt_c++;
    }
    dl_jit_src *srcs = dl_calloc((size_t)n_rt_c + 1, sizeof *srcs);
    dl_sbuf *texts = dl_calloc((size_t)n_rt_c + 2, sizeof *texts);
    dl_status s = DL_OK;
    if (!srcs || !texts) {
        s = dl_fail(ctx, DL_ERR_NOMEM, "out of memory building");
        goto done;
    }
    int k = 0;
    for (int i = 0; i < dl_rt_n_files; i++) {
        const char *nm = dl_rt_files[i].name;
        size_t l = strlen(nm);
        if (l <= 2 || strcmp(nm + l - 2, ".c")) continue;
        dl_rt_expand(dl_rt_files[i].text, &texts[k]);
        if ((s = dl_sb_status(ctx, &texts[k])) != DL_OK) goto done;
        srcs[k] = (dl_jit_src){.name = nm, .text = dl_sb_str(&texts[k]), .shared = true};
        k++;
    }
    dl_rt_expand(dl_sb_str(&p->source), &texts[k]);
    if ((s = dl_sb_status(ctx, &texts[k])) != DL_OK) goto done;
    srcs[k] = (dl_jit_src){.name = "model.c", .text = dl_sb_str(&texts[k]), .shared = false};
    dl_jit_info info;
    memset(&info, 0, sizeof info);
    if ((s = dl_jit_build(ctx, jo, k + 1, srcs, &p->lib, &info)) != DL_OK) goto done;
    p->stats.cache_hit = info.cache_hit;
    p->stats.build_ms = info.total_ms;
    memcpy(p->stats.cache_key, info.key, sizeof info.key);
    const int *nk = dl_jit_sym(p->lib, "dlk_n_kernels");
    dl_kernel_ptr const *table = dl_jit_sym(p->lib, "dlk_kernels");
    p->set_threads = (void (*)(int))dl_jit_sym(p->lib, "dlk_set_threads");
    int (*has_bf16)(void) = (int (*)(void))dl_jit_sym(p->lib, "dlk_has_bf16");
    p->stats.bf16_built = has_bf16 && has_bf16();
    if (!nk || !table || *nk != p->fusion->n) {
        s = dl_fail(ctx, DL_ERR_INTERNAL, "the compiled module %s does not match its program",
                    info.path);
        goto done;
    }
    for (int gi = 0; gi < p->fusion->n; gi++) p->kernels[gi] = table[gi];
    s = prepack(ctx, p);
done:
    for (int i = 0; texts && i <= n_rt_c; i++) dl_sb_free(&texts[i]);
    dl_free(texts);
    dl_free(srcs);
    return s;
}

static bool warned_no_cc, warned_no_bf16;

dl_status dl_compile(dl_ctx *ctx, dl_graph *g, const dl_compile_options *opts, dl_program **out) {
    if (!opts || !opts->tuning) return dl_compile_tuned(ctx, g, opts, NULL, -1, out);
    if (out) *out = NULL;
    dl_tuning *t;
    DL_TRY(dl_tuning_load(ctx, opts->tuning, false, &t));
    const dl_status s = dl_compile_tuned(ctx, g, opts, t, -1, out);
    dl_tuning_free(t);
    return s;
}

dl_status dl_compile_tuned(dl_ctx *ctx, dl_graph *g, const dl_compile_options *opts,
                           const dl_tuning *tuning, int force, dl_program **out) {
    if (!g || !out) return dl_fail(ctx, DL_ERR_INVALID, "dl_compile: NULL graph or output");
    *out = NULL;
    if (g->status != DL_OK)
        return dl_fail(ctx, g->status, "dl_compile: the graph has a builder error: %s",
                       dl_errmsg(g->ctx));
    DL_TRY(dl_graph_verify(g));
    dl_compile_options defaults;
    dl_compile_options_init(&defaults);
    const dl_compile_options *o = opts ? opts : &defaults;
    if (o->math < 0 || o->math >= DL_MATH_COUNT)
        return dl_fail(ctx, DL_ERR_INVALID, "dl_compile: unknown math mode %d (dl_math)", o->math);
    double t0 = now_ms();
    dl_program *p = dl_calloc(1, sizeof *p);
    if (!p) return dl_fail(ctx, DL_ERR_NOMEM, "out of memory compiling");
    p->src = g;
    p->threads = o->threads > 0 ? o->threads : dl_host_target(0).threads;
    p->stats.nodes_before = g->nodes.len;
    dl_status s = dl_graph_clone(g, false, &p->g);
    if (s != DL_OK) {
        dl_fail(ctx, s, "copying the graph: %s", dl_errmsg(g->ctx));
        goto fail;
    }
    dl_pass_ctx pc = {.ctx = ctx, .g = p->g, .dump_to = o->dump_to, .dump_ir = o->dump_ir};
    s = dl_run_passes(&pc, dl_inference_passes);
    p->fusion = pc.fusion;
    if (s != DL_OK) goto fail;
    if (!p->fusion) {
        s = dl_fail(ctx, DL_ERR_INTERNAL, "the pipeline did not group the graph");
        goto fail;
    }
    p->stats.nodes_after = p->g->nodes.len;
    for (int gi = 0; gi < p->fusion->n; gi++) {
        dl_group *gr = &p->fusion->groups[gi];
        p->stats.products += gr->kind == DL_G_GEMM || gr->kind == DL_G_MATMUL;
        p->stats.convs += gr->kind == DL_G_CONV || gr->kind == DL_G_CONV_TRANSPOSE;
        gr->conv_bf16 = (gr->kind == DL_G_CONV || gr->kind == DL_G_CONV_GRAD ||
                         gr->kind == DL_G_CONV_TRANSPOSE) &&
                        o->math == DL_MATH_BF16;
    }
    double t1 = now_ms();
    p->stats.passes_ms = t1 - t0;
    dl_isa isa;
    if ((s = dl_isa_resolve(ctx, o->isa, &isa)) != DL_OK) goto fail;
    snprintf(p->stats.isa, sizeof p->stats.isa, "%s", isa.name);
    dl_jit_opts jo = jit_opts(o, &isa);
    if (!dl_jit_available(&jo)) {
        if (!warned_no_cc)
            fprintf(stderr, "dlcc: warning: no working C compiler (set CC); running on the "
                            "reference interpreter\n");
        warned_no_cc = true;
        p->interp_only = true;
        *out = p;
        return DL_OK;
    }
    /* The code is the same whatever the thread count asked for (that is set at run time,
     * dlk_set_threads): one cached module serves every --threads, and a loop's vector/scalar
     * split (a vector math function and its scalar twin may differ in the last bit) never
     * depends on it, so results are bit-identical for any thread count. */
    dl_target t = dl_host_target(0);
    if (jo.cflags == isa.cflags) t.vector_bytes = isa.vector_bytes;
    t.math_bf16 = o->math == DL_MATH_BF16;
    p->stats.math = o->math;
    /* records are per instruction set: the kernels' speeds differ between them */
    p->stats.tuned_convs = dl_tuning_apply(tuning, force, p->fusion, isa.name);
    int generated = 0;
    if ((s = dl_module_emit(ctx, p->g, p->fusion, &t, &p->source, &generated, &p->notes)) != DL_OK)
        goto fail;
    p->stats.emit_ms = now_ms() - t1;
    p->stats.groups = p->fusion->n;
    p->stats.kernels_generated = generated;
    p->stats.source_bytes = p->source.len;
    for (int gi = 0; gi < p->fusion->n; gi++) {
        dl_gkind k = p->fusion->groups[gi].kind;
        p->stats.views += k == DL_G_VIEW;
        p->stats.fallbacks += k == DL_G_FALLBACK;
    }
    p->kernels = dl_calloc((size_t)p->fusion->n + 1, sizeof *p->kernels);
    if (!p->kernels) {
        s = dl_fail(ctx, DL_ERR_NOMEM, "out of memory compiling");
        goto fail;
    }
    /* A program made only of views and fallbacks needs no compiler run. */
    if (generated > 0 && (s = build(ctx, p, &jo)) != DL_OK) goto fail;
    if (o->math == DL_MATH_BF16 && (p->stats.products || p->stats.convs) && !p->stats.bf16_built &&
        !warned_no_bf16) {
        fprintf(stderr,
                "dlcc: warning: math bf16: the kernels (%s) were built without AVX512-BF16; "
                "products (MatMul, Gemm, convolutions as GEMMs) run in float32\n",
                isa.name);
        warned_no_bf16 = true;
    }
    p->stats.total_ms = now_ms() - t0;
    *out = p;
    return DL_OK;
fail:
    dl_program_free(p);
    return s;
}

void dl_program_free(dl_program *p) {
    if (!p) return;
    dl_plan_free(&p->plan);
    if (p->lib) dl_jit_close(p->lib);
    dl_free(p->kernels);
    dl_free_huge(p->pack_mem, p->pack_bytes);
    dl_free(p->packs);
    dl_fusion_free(p->fusion);
    if (p->g) dl_graph_free(p->g);
    dl_sb_free(&p->notes);
    dl_sb_free(&p->source);
    dl_free(p);
}

dl_graph *dl_program_graph(dl_program *p) {
    return p ? p->g : NULL;
}
