/* profile-out.c — what `dlcc profile` and `dlcc bench` print: the per-step table with totals by
 * kind, the Chrome trace (valid JSON whatever bytes a model's node names hold), the bench
 * summary and its one-line JSON form. */
#include "profile.h"

#include <stdlib.h>

/* Length of the valid UTF-8 sequence at s (1-4), or 0 when it is not one (overlong forms,
 * surrogates and code points past U+10FFFF included). */
static int utf8_len(const unsigned char *s) {
    unsigned c = s[0], cp, min;
    int n;
    if (c < 0x80) return 1;
    if ((c & 0xE0) == 0xC0)
        n = 2, cp = c & 0x1F, min = 0x80;
    else if ((c & 0xF0) == 0xE0)
        n = 3, cp = c & 0x0F, min = 0x800;
    else if ((c & 0xF8) == 0xF0)
        n = 4, cp = c & 0x07, min = 0x10000;
    else
        return 0;
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0; /* also stops at the terminating NUL */
        cp = cp << 6 | (s[i] & 0x3F);
    }
    return cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF) ? 0 : n;
}

void dl_json_string(dl_sbuf *b, const char *s) {
    const unsigned char *p = (const unsigned char *)(s ? s : "");
    dl_sb_put(b, "\"");
    while (*p) {
        int n = utf8_len(p);
        if (*p == '"' || *p == '\\') {
            char esc[3] = {'\\', (char)*p, 0};
            dl_sb_put(b, esc);
        } else if (*p == '\n') {
            dl_sb_put(b, "\\n");
        } else if (*p == '\t') {
            dl_sb_put(b, "\\t");
        } else if (*p < 0x20) {
            dl_sb_printf(b, "\\u%04x", *p);
        } else if (n == 0) {
            dl_sb_put(b, "\\ufffd");
            n = 1;
        } else {
            dl_sb_putn(b, (const char *)p, (size_t)n);
        }
        p += n ? n : 1;
    }
    dl_sb_put(b, "\"");
}

void dl_table_text(const char *s, int max_chars, char *buf, size_t n) {
    const unsigned char *p = (const unsigned char *)(s ? s : "");
    int total = 0;
    for (const unsigned char *q = p; *q; total++) q += utf8_len(q) ? utf8_len(q) : 1;
    int keep = total <= max_chars ? total : max_chars > 3 ? max_chars - 3 : 0;
    size_t used = 0;
    for (int i = 0; i < keep && *p; i++) {
        int len = utf8_len(p);
        /* C0 and C1 controls would reach the terminal as escape sequences */
        bool bad = len == 0 || *p < 0x20 || *p == 0x7f || (*p == 0xC2 && p[1] < 0xA0);
        size_t w = bad ? 1 : (size_t)len;
        if (used + w + 1 > n) break;
        if (bad)
            buf[used] = '?';
        else
            memcpy(buf + used, p, w);
        used += w;
        p += len ? len : 1;
    }
    if (keep < total && used + 4 <= n) memcpy(buf + used, "...", 3), used += 3;
    if (n) buf[used < n ? used : n - 1] = 0;
}

/* "Conv+Add+Relu": the ops of a group, cut with "+..." past the buffer. */
static void ops_label(const dl_group *gr, char *buf, size_t n) {
    size_t used = 0;
    buf[0] = 0;
    for (int k = 0; k < gr->n_nodes; k++) {
        const char *op = gr->nodes[k]->op->name;
        size_t len = strlen(op) + (k > 0);
        if (used + len + 5 > n) {
            snprintf(buf + used, n - used, "+...");
            return;
        }
        used += (size_t)snprintf(buf + used, n - used, "%s%s", k ? "+" : "", op);
    }
}

static void shape_text(const dl_type *t, char *buf, size_t n) {
    if (t->rank < 0)
        snprintf(buf, n, "?");
    else
        dl_dims_str(t->rank, t->dims, buf, n);
}

typedef struct ranked {
    double ms;
    int step;
} ranked;

static int slowest_first(const void *a, const void *b) {
    const ranked *x = a, *y = b;
    if (x->ms != y->ms) return x->ms > y->ms ? -1 : 1;
    return x->step - y->step;
}

static void print_rate(FILE *f, double amount, double ms, int width) {
    if (amount > 0 && ms > 0)
        fprintf(f, " %*.2f", width, amount / (ms * 1e6));
    else
        fprintf(f, " %*s", width, "-");
}

static void print_kind_totals(FILE *f, const dl_profile *pr, double total) {
    double by_kind[DL_G_KIND_COUNT] = {0};
    for (int s = 0; s < pr->n_steps; s++) by_kind[pr->steps[s].kind] += pr->steps[s].ms;
    fprintf(f, "by kind:");
    bool used[DL_G_KIND_COUNT] = {false};
    for (int shown = 0; shown < DL_G_KIND_COUNT; shown++) { /* largest first */
        int best = -1;
        for (int k = 0; k < DL_G_KIND_COUNT; k++)
            if (!used[k] && by_kind[k] > 0 && (best < 0 || by_kind[k] > by_kind[best])) best = k;
        if (best < 0) break;
        used[best] = true;
        fprintf(f, "%s %s %.3f ms (%.1f%%)", shown ? "," : "", dl_gkind_name((dl_gkind)best),
                by_kind[best], total > 0 ? 100 * by_kind[best] / total : 0);
    }
    fprintf(f, "\n");
}

dl_status dl_profile_print(dl_ctx *ctx, const dl_profile *pr, const dl_program *p,
                           const dl_machine *m, int top, void *file) {
    FILE *f = file ? file : stdout;
    if (m)
        fprintf(f,
                "machine: %d threads, peak %.1f GFLOP/s (%.1f per thread, %s), memory %.1f GB/s\n",
                m->threads, m->peak_gflops, m->peak_gflops_1, m->isa, m->bandwidth_gbs);
    if (pr->interp_only) {
        fprintf(f,
                "no C compiler: the program runs on the reference interpreter, no steps to "
                "profile; whole run %.3f ms (median of %d)\n",
                pr->run_ms, pr->iters);
        return DL_OK;
    }
    ranked *order = dl_malloc(sizeof(ranked) * ((size_t)pr->n_steps + 1));
    if (!order) return dl_fail(ctx, DL_ERR_NOMEM, "out of memory printing the profile");
    double total = 0, flops = 0;
    for (int s = 0; s < pr->n_steps; s++) {
        order[s] = (ranked){pr->steps[s].ms, s};
        total += pr->steps[s].ms;
        flops += pr->steps[s].flops;
    }
    qsort(order, (size_t)pr->n_steps, sizeof *order, slowest_first);
    int shown = top > 0 && top < pr->n_steps ? top : pr->n_steps;
    fprintf(f, "%4s  %-11s %9s %6s %8s %8s %6s  %-18s %s\n", "step", "kind", "time ms", "share",
            "GFLOP/s", "GB/s", m ? "roof%" : "", "output", "nodes");
    for (int r = 0; r < shown; r++) {
        const dl_step_stat *st = &pr->steps[order[r].step];
        const dl_group *gr = &p->fusion->groups[order[r].step];
        char ops[64], name[64], shape[96];
        ops_label(gr, ops, sizeof ops);
        dl_table_text(dl_group_anchor(gr)->name, 40, name, sizeof name);
        shape_text(&st->out, shape, sizeof shape);
        fprintf(f, "%4d  %-11s %9.3f %5.1f%%", order[r].step, dl_gkind_name(st->kind), st->ms,
                total > 0 ? 100 * st->ms / total : 0);
        print_rate(f, st->flops, st->ms, 8);
        print_rate(f, st->bytes, st->ms, 8);
        double roof = dl_roofline_percent(m, st->flops, st->bytes, st->ms);
        if (roof >= 0)
            fprintf(f, " %5.0f%%", roof);
        else
            fprintf(f, " %6s", m ? "-" : "");
        fprintf(f, "  %-18s %s%s%s\n", shape, ops, name[0] ? " " : "", name);
    }
    if (shown < pr->n_steps) {
        double rest = 0;
        for (int r = shown; r < pr->n_steps; r++) rest += pr->steps[order[r].step].ms;
        fprintf(f, "  ... %d more steps, %.3f ms (--top 0 shows all)\n", pr->n_steps - shown, rest);
    }
    fprintf(f,
            "total: %.3f ms in %d steps (median per step over %d runs); whole run %.3f ms "
            "(median)",
            total, pr->n_steps, pr->iters, pr->run_ms);
    if (flops > 0 && pr->run_ms > 0) fprintf(f, ", %.2f GFLOP/s", flops / (pr->run_ms * 1e6));
    fprintf(f, "\n");
    print_kind_totals(f, pr, total);
    dl_free(order);
    return DL_OK;
}

dl_status dl_profile_trace_json(dl_ctx *ctx, const dl_profile *pr, const dl_program *p,
                                dl_sbuf *out) {
    dl_sb_put(out, "{\"traceEvents\":[\n");
    dl_sb_put(out, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"tid\":1,"
                   "\"args\":{\"name\":\"dlcc\"}},\n");
    dl_sb_printf(out,
                 "{\"name\":\"run\",\"cat\":\"run\",\"ph\":\"X\",\"ts\":0,\"dur\":%.3f,"
                 "\"pid\":1,\"tid\":1,\"args\":{\"steps\":%d}}",
                 pr->rep_run_us, pr->n_steps);
    for (int s = 0; s < pr->n_steps; s++) {
        const dl_step_stat *st = &pr->steps[s];
        const dl_group *gr = &p->fusion->groups[s];
        char ops[256], shape[256];
        ops_label(gr, ops, sizeof ops);
        shape_text(&st->out, shape, sizeof shape);
        dl_sb_put(out, ",\n{\"name\":");
        dl_json_string(out, ops);
        dl_sb_put(out, ",\"cat\":");
        dl_json_string(out, dl_gkind_name(st->kind));
        dl_sb_printf(out,
                     ",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":1,\"tid\":1,"
                     "\"args\":{\"step\":%d,\"node\":",
                     pr->rep_start_us[s], pr->rep_dur_us[s], s);
        dl_json_string(out, dl_group_anchor(gr)->name);
        dl_sb_put(out, ",\"shape\":");
        dl_json_string(out, shape);
        dl_sb_printf(out, ",\"flops\":%.0f,\"bytes\":%.0f,\"median_ms\":%.6f}}", st->flops,
                     st->bytes, st->ms);
    }
    dl_sb_put(out, "\n],\"displayTimeUnit\":\"ms\"}\n");
    return dl_sb_status(ctx, out);
}

dl_status dl_profile_write_trace(dl_ctx *ctx, const dl_profile *pr, const dl_program *p,
                                 const char *path) {
    dl_sbuf b = {0};
    dl_status s = dl_profile_trace_json(ctx, pr, p, &b);
    if (s == DL_OK) {
        FILE *f = fopen(path, "w");
        bool ok = f && fwrite(dl_sb_str(&b), 1, b.len, f) == b.len;
        if (f && fclose(f) != 0) ok = false;
        if (!ok) s = dl_fail(ctx, DL_ERR_IO, "cannot write the trace to '%s'", path);
    }
    dl_sb_free(&b);
    return s;
}

dl_status dl_bench_print(dl_ctx *ctx, const char *model, int threads, const dl_bench_result *r,
                         double compile_ms, bool json, void *file) {
    FILE *f = file ? file : stdout;
    if (!json) {
        fprintf(f, "%s: %d threads, %d timed runs after %d warm-up\n", model, threads, r->iters,
                r->warmup);
        fprintf(f, "  latency  median %.3f ms  p90 %.3f ms  min %.3f ms  mean %.3f ms\n",
                r->median_ms, r->p90_ms, r->min_ms, r->mean_ms);
        fprintf(f, "  compile  %.1f ms\n", compile_ms);
        return DL_OK;
    }
    dl_sbuf b = {0};
    dl_sb_put(&b, "{\"model\":");
    dl_json_string(&b, model);
    dl_sb_printf(&b,
                 ",\"threads\":%d,\"iters\":%d,\"warmup\":%d,\"median_ms\":%.6g,"
                 "\"p90_ms\":%.6g,\"min_ms\":%.6g,\"mean_ms\":%.6g,\"compile_ms\":%.6g}\n",
                 threads, r->iters, r->warmup, r->median_ms, r->p90_ms, r->min_ms, r->mean_ms,
                 compile_ms);
    dl_status s = dl_sb_status(ctx, &b);
    if (s == DL_OK) fputs(dl_sb_str(&b), f);
    dl_sb_free(&b);
    return s;
}
