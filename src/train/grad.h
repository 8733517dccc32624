/* grad.h — what a gradient rule (an op row's .grad, op-impl.h) sees, and the helpers it builds
 * backward nodes with. Reverse-mode autodiff (autodiff.c) walks the forward graph from the loss
 * back, calls each node's rule with the gradients of its outputs and sums the contributions each
 * value receives.
 *
 * A rule builds ordinary graph nodes (default domain at DG_OPSET, or the internal "ai.dlcc"
 * domain for the few backward kernels ONNX has no op for, e.g. ConvGradWeight), so the backward
 * graph goes through the same passes, fusion, planner and codegen as any forward graph. Errors
 * are sticky on the graph: a helper returns NULL after the first one and the rule returns
 * dg_status(gc). A rule sets dx[i] only for inputs with dg_needs(gc, n, i); autodiff checks that
 * each dx[i] has its input's dtype and shape. */
#ifndef DL_GRAD_H
#define DL_GRAD_H

#include "../ops/op-impl.h"

#define DG_OPSET  17        /* opset of the default-domain nodes rules build */
#define DG_DOMAIN "ai.dlcc" /* internal backward ops (src/ops/grad-ops.c) */

struct dl_grad_ctx {
    dl_graph *g;
    const bool *needs; /* by value id: the value depends on a parameter (needs a gradient) */
    int n_needs;
};

/* Whether input i of n needs a gradient (present, floating, depends on a parameter). */
bool dg_needs(const dl_grad_ctx *gc, const dl_node *n, int i);
dl_status dg_status(const dl_grad_ctx *gc);
/* A node the rule cannot differentiate: records "autodiff: NODE: why" (DL_ERR_UNSUPPORTED) on
 * the graph unless it already has an error, and returns the graph's status. */
dl_status dg_refuse(dl_grad_ctx *gc, const dl_node *n, const char *why);
/* Records s on the graph (first error wins) and returns the graph's status: for a rule calling
 * its row's own parsing code. */
dl_status dg_check(dl_grad_ctx *gc, dl_status s);

/* The node seen as an inference context over its inputs' static types and constant values, so
 * a rule reads perm, slice starts or pads with its row's own parsing (the first 8 inputs). */
typedef struct dg_view {
    dl_infer ic;
    const dl_type *ty[8];
    const dl_tensor *val[8];
} dg_view;
dl_infer *dg_view_of(dl_grad_ctx *gc, const dl_node *n, dg_view *v);

/* One-output default-domain node at DG_OPSET; attrs "k=v;k=v" or NULL. */
dl_value *dg_op(dl_grad_ctx *gc, const char *op, int n_in, dl_value *const *in, const char *attrs);
dl_value *dg_op1(dl_grad_ctx *gc, const char *op, dl_value *a, const char *attrs);
dl_value *dg_op2(dl_grad_ctx *gc, const char *op, dl_value *a, dl_value *b, const char *attrs);
dl_value *dg_op3(dl_grad_ctx *gc, const char *op, dl_value *a, dl_value *b, dl_value *c,
                 const char *attrs);
/* A node with like's attributes (attrs override them); domain NULL = default at DG_OPSET,
 * DG_DOMAIN = the internal backward ops. n_out outputs into out[] (NULL entries skipped). */
dl_status dg_op_like(dl_grad_ctx *gc, const char *domain, const char *op, int n_in,
                     dl_value *const *in, const dl_node *like, const char *attrs, int n_out,
                     dl_value **out);

/* Rank-0 constant of dtype dt. */
dl_value *dg_scalar(dl_grad_ctx *gc, double v, dl_dtype dt);
/* 1-D int64 constant. */
dl_value *dg_ints(dl_grad_ctx *gc, int n, const int64_t *v);
/* Zeros shaped like x (a constant when x's shape is static). */
dl_value *dg_zeros_like(dl_grad_ctx *gc, dl_value *x);
/* v's shape: a constant when it is known, else Shape(v) (keeping v's symbols). */
dl_value *dg_shape(dl_grad_ctx *gc, dl_value *v);
/* grad (shaped like a broadcast result) summed over the axes x was broadcast along, shaped like
 * x. Returns grad itself when nothing was broadcast. Fails when a dim relation is unknown (a
 * symbolic dim against a different one). */
dl_value *dg_sum_to(dl_grad_ctx *gc, dl_value *grad, const dl_value *x);
/* Reshape(v, Shape(like)) — for views; v itself when the shapes already agree statically. */
dl_value *dg_reshape_like(dl_grad_ctx *gc, dl_value *v, dl_value *like);
/* Expand(v, Shape(like)) with like's shape (v broadcasts to it); v itself when equal. */
dl_value *dg_expand_like(dl_grad_ctx *gc, dl_value *v, dl_value *like);
/* Transpose of the last two axes. */
dl_value *dg_transpose_last2(dl_grad_ctx *gc, dl_value *v);

/* ---- autodiff (autodiff.c) ---- */
/* Appends to g the nodes computing d loss / d wrt[i] into grads[i] (NULL when the loss does not
 * depend on wrt[i]... a zero tensor is made then, shaped like wrt[i]). loss: a floating value with
 * one element. g must be topologically sorted. Fails naming the op when a needed gradient has no
 * rule. */
dl_status dl_autodiff(dl_graph *g, dl_value *loss, int n_wrt, dl_value *const *wrt,
                      dl_value **grads);

#endif
