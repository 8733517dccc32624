/* print.c — text and Graphviz DOT printers for the graph IR. */
#include "ir-impl.h"
#include "../ops/op-impl.h"

#include <stdlib.h>

static void print_value_list(FILE *f, const dl_graph *g, const dl_ptrvec *vals) {
    for (int i = 0; i < vals->len; i++) {
        const dl_value *v = vals->items[i];
        char t[256];
        fprintf(f, "  %s: %s\n", v->name, dl_type_str(g, &v->type, t, sizeof t));
    }
}

static int cmp_count(const void *a, const void *b) {
    const int *x = a, *y = b;
    return y[1] - x[1];
}

dl_status dl_graph_print(dl_graph *g, void *file, int verbose) {
    FILE *f = file ? file : stdout;
    int64_t params = 0;
    size_t bytes = 0;
    int nconst = 0;
    for (int i = 0; i < g->values.len; i++) {
        const dl_value *v = g->values.items[i];
        if (!v->constant) continue;
        nconst++;
        params += v->constant->numel;
        bytes += v->constant->nbytes;
    }
    fprintf(f, "graph '%s'%s%s: %d nodes, %d values, opset %d\n", g->name ? g->name : "",
            g->source_path ? " from " : "", g->source_path ? g->source_path : "", g->nodes.len,
            g->values.len, g->opset);
    fprintf(f, "inputs (%d):\n", g->inputs.len);
    print_value_list(f, g, &g->inputs);
    fprintf(f, "outputs (%d):\n", g->outputs.len);
    print_value_list(f, g, &g->outputs);
    fprintf(f, "parameters: %lld in %d tensors, %.2f MB\n", (long long)params, nconst, bytes / 1e6);

    /* op histogram: pairs (op index, count) */
    int nops = dl_op_count();
    int(*hist)[2] = dl_calloc((size_t)nops + 1, sizeof *hist);
    if (!hist) return dl_fail(g->ctx, DL_ERR_NOMEM, "out of memory");
    const dl_op_def **ops = dl_calloc((size_t)nops + 1, sizeof *ops);
    if (!ops) {
        dl_free(hist);
        return dl_fail(g->ctx, DL_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < nops; i++) {
        hist[i][0] = i;
        ops[i] = dl_op_at(i);
    }
    for (int k = 0; k < g->nodes.len; k++) {
        const dl_node *n = g->nodes.items[k];
        for (int i = 0; i < nops; i++)
            if (ops[i] == n->op) {
                hist[i][1]++;
                break;
            }
    }
    qsort(hist, (size_t)nops, sizeof *hist, cmp_count);
    fprintf(f, "op counts:\n");
    for (int i = 0; i < nops && hist[i][1]; i++)
        fprintf(f, "  %-24s %d\n", ops[hist[i][0]]->name, hist[i][1]);
    dl_free(hist);
    dl_free((void *)ops);

    if (verbose) {
        fprintf(f, "nodes:\n");
        for (int k = 0; k < g->nodes.len; k++) {
            const dl_node *n = g->nodes.items[k];
            fprintf(f, "  %%%d %s '%s' (", k, n->op->name, n->name);
            for (int i = 0; i < n->n_in; i++)
                fprintf(f, "%s%s", i ? ", " : "", n->in[i] ? n->in[i]->name : "-");
            fprintf(f, ") -> ");
            for (int i = 0; i < n->n_out; i++) {
                char t[256];
                if (n->out[i])
                    fprintf(f, "%s%s: %s", i ? ", " : "", n->out[i]->name,
                            dl_type_str(g, &n->out[i]->type, t, sizeof t));
            }
            fprintf(f, "\n");
        }
    }
    return DL_OK;
}

/* DOT identifiers are quoted; escape quotes and backslashes from model-supplied names. */
static void dot_escaped(FILE *f, const char *s) {
    for (; *s; s++) {
        if (*s == '"' || *s == '\\') fputc('\\', f);
        if ((unsigned char)*s >= 0x20) fputc(*s, f);
    }
}

dl_status dl_graph_write_dot(dl_graph *g, const char *path) {
    FILE *f = fopen(path, "w");
    if (!f) return dl_fail(g->ctx, DL_ERR_IO, "%s: cannot write", path);
    fprintf(f, "digraph dlcc {\n  rankdir=TB;\n  node [fontname=\"Helvetica\", fontsize=10];\n");
    for (int i = 0; i < g->inputs.len; i++) {
        const dl_value *v = g->inputs.items[i];
        char t[256];
        fprintf(f, "  v%d [shape=ellipse, style=filled, fillcolor=lightblue, label=\"", v->id);
        dot_escaped(f, v->name);
        fprintf(f, "\\n%s\"];\n", dl_type_str(g, &v->type, t, sizeof t));
    }
    for (int k = 0; k < g->nodes.len; k++) {
        const dl_node *n = g->nodes.items[k];
        fprintf(f, "  n%d [shape=box, style=rounded, label=\"%s\\n", k, n->op->name);
        dot_escaped(f, n->name);
        fprintf(f, "\"];\n");
        for (int i = 0; i < n->n_in; i++) {
            const dl_value *v = n->in[i];
            if (!v || v->constant) continue;
            char t[256];
            if (v->producer)
                fprintf(f, "  n%d -> n%d [label=\"%s\"];\n", v->producer->id, k,
                        dl_type_str(g, &v->type, t, sizeof t));
            else
                fprintf(f, "  v%d -> n%d;\n", v->id, k);
        }
    }
    for (int i = 0; i < g->outputs.len; i++) {
        const dl_value *v = g->outputs.items[i];
        char t[256];
        fprintf(f, "  o%d [shape=ellipse, style=filled, fillcolor=palegreen, label=\"", i);
        dot_escaped(f, v->name);
        fprintf(f, "\\n%s\"];\n", dl_type_str(g, &v->type, t, sizeof t));
        if (v->producer)
            fprintf(f, "  n%d -> o%d;\n", v->producer->id, i);
        else
            fprintf(f, "  v%d -> o%d;\n", v->id, i);
    }
    fprintf(f, "}\n");
    if (fclose(f) != 0) return dl_fail(g->ctx, DL_ERR_IO, "%s: write failed", path);
    return DL_OK;
}
