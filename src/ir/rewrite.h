/* rewrite.h — primitives for rewriting a graph in place, shared by every pass: use counts and
 * use lists per value, replacing all uses of a value (keeping graph output names stable), killing
 * nodes, turning values into constants, adding constants and nodes; and dl_graph_clone, so that
 * the compiler works on a copy and never mutates the user's graph.
 *
 * A pass brackets its work with dl_rw_begin / dl_rw_end. In between, g->nodes keeps its order;
 * killed nodes stay in the list with n->dead set (skip them) and appended nodes sit at the end;
 * dl_rw_end drops the dead ones and re-sorts when nodes were added.
 *
 * Constant data is never written in place: a clone borrows the source's tensors (see
 * dl_graph_clone), and one constant may feed many nodes. A pass that wants other numbers makes a
 * new constant (dl_rw_add_constant) and points the consumer at it. */
#ifndef DL_REWRITE_H
#define DL_REWRITE_H

#include "ir-impl.h"

typedef struct dl_use {
    dl_node *node;
    int slot;
    int next; /* index of the next entry in the pool, -1 at the end */
} dl_use;

typedef struct dl_rewriter {
    dl_graph *g;
    int cap;      /* entries of the per-value arrays (grown as values are added) */
    int *uses;    /* by value id: input slots of live nodes that read the value */
    int *head;    /* by value id: first use entry in pool, -1 for none */
    dl_use *pool; /* entries go stale (node dead or slot rewired): checked when read */
    int pool_len, pool_cap;
    bool added; /* nodes were appended: dl_rw_end re-sorts */
} dl_rewriter;

dl_status dl_rw_begin(dl_rewriter *rw, dl_graph *g);
/* Drops dead nodes (their outputs lose their producer), re-sorts if nodes were added and frees
 * the bookkeeping. Pass the pass's status: on an error it only frees and returns that error. */
dl_status dl_rw_end(dl_rewriter *rw, dl_status s);

/* Input slots of live nodes reading v (graph outputs not counted: see v->is_output). */
int dl_rw_uses(const dl_rewriter *rw, const dl_value *v);
/* The one live node reading v when dl_rw_uses(v) == 1 (its input slot in *slot); else NULL. */
dl_node *dl_rw_single_use(const dl_rewriter *rw, const dl_value *v, int *slot);

/* Whether every use of old can be pointed at nw. Fails only for graph outputs: old's output name
 * must stay, so nw takes it over, which needs nw to be a plain intermediate (a node's output that
 * is no graph output itself). */
bool dl_rw_can_replace(const dl_value *old, const dl_value *nw);
/* Points every use of old at nw; when old is a graph output, nw takes over its name and its
 * place in g->outputs (old gets nw's former name). *done = false (and nothing changes) when
 * dl_rw_can_replace says no: the pass then skips the rewrite. */
dl_status dl_rw_replace(dl_rewriter *rw, dl_value *old, dl_value *nw, bool *done);
/* n->in[slot] = v (slot may lie past n->n_in to add an optional input, up to the op's max). */
dl_status dl_rw_set_input(dl_rewriter *rw, dl_node *n, int slot, dl_value *v);
/* Marks n dead and releases its inputs. Its outputs must have no uses left. */
void dl_rw_kill(dl_rewriter *rw, dl_node *n);

/* v becomes a constant holding t (ownership of t passes to the graph, also on failure); it
 * leaves its producer, which is killed once none of its outputs is left. */
dl_status dl_rw_make_constant(dl_rewriter *rw, dl_value *v, dl_tensor *t);
/* A new constant value named prefix_N holding t (ownership passes to the graph, also on failure). */
dl_status dl_rw_add_constant(dl_rewriter *rw, const char *prefix, dl_tensor *t, dl_value **out);
/* Appends a default-domain node (at most 8 inputs) with one new output named after the op, at
 * the graph's opset; attrs must have graph-lifetime arrays. The output's type is inferred. */
dl_status dl_rw_add_node(dl_rewriter *rw, const char *op, int n_in, dl_value *const *in,
                         int n_attrs, const dl_attr *attrs, dl_value **out);
/* The same at a given opset (a pass introducing an op newer than the model's imports, e.g.
 * LayerNormalization-17 recognized in an opset-13 graph: the IR's rows are per op, not per
 * model, and the compiler never writes the graph back out). */
dl_status dl_rw_add_node_at(dl_rewriter *rw, const char *op, int opset, int n_in,
                            dl_value *const *in, int n_attrs, const dl_attr *attrs,
                            dl_value **out);
/* Sets attribute a on n (replacing one of the same name), copying n's attribute array into the
 * graph arena; a's own arrays must live as long as the graph (dl_arena_alloc). */
dl_status dl_node_set_attr(dl_graph *g, dl_node *n, const dl_attr *a);

/* Removes the values with drop[id] set from g->values (renumbering ids and rebuilding the name
 * index) and frees the constant tensors they held. Graph inputs and outputs are never dropped;
 * the caller guarantees that no live node reads a dropped value. */
dl_status dl_graph_drop_values(dl_graph *g, const bool *drop);

/* A copy of src that a compiler may rewrite freely: values, nodes, attributes, symbols, inputs
 * and outputs are new (same names, same ids, same order). With copy_data false, constant and
 * attribute tensors are views (owns_data false) of src's data, so the clone costs no weight
 * copies but MUST NOT OUTLIVE src (passes never write into constant data, so src is unchanged).
 * With copy_data true the clone owns copies of all data and is independent of src. */
dl_status dl_graph_clone(dl_graph *src, bool copy_data, dl_graph **out);

#endif
