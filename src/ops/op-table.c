/* op-table.c — gathers the op families into one table and finds rows by (domain, name).
 * Adding an op never touches this file: add its row to its family file. */
#include "op-impl.h"

#include <stdlib.h>

static const dl_op_def *const families[] = {
    dl_ops_elementwise, dl_ops_activation, dl_ops_logic, dl_ops_cast,   dl_ops_shape, dl_ops_slicing,
    dl_ops_index,       dl_ops_create,     dl_ops_conv,  dl_ops_pool,   dl_ops_matmul,
    dl_ops_norm,        dl_ops_resize,     dl_ops_reduce, dl_ops_softmax, dl_ops_loss,
    dl_ops_rnn,         dl_ops_quant,      dl_ops_misc,  dl_ops_signal, dl_ops_optim,
    dl_ops_text,        dl_ops_roi,
    dl_ops_grad,
};

static bool is_default_domain(const char *d) {
    return !d || !d[0] || strcmp(d, "ai.onnx") == 0;
}

static bool same_domain(const char *a, const char *b) {
    if (is_default_domain(a) || is_default_domain(b)) return is_default_domain(a) && is_default_domain(b);
    return strcmp(a, b) == 0;
}

const dl_op_def *dl_op_find(const char *domain, const char *name) {
    for (size_t f = 0; f < DL_ARRAY_LEN(families); f++)
        for (const dl_op_def *op = families[f]; op->name; op++)
            if (strcmp(op->name, name) == 0 && same_domain(op->domain, domain)) return op;
    return NULL;
}

int dl_op_count(void) {
    int n = 0;
    for (size_t f = 0; f < DL_ARRAY_LEN(families); f++)
        for (const dl_op_def *op = families[f]; op->name; op++) n++;
    return n;
}

const dl_op_def *dl_op_at(int i) {
    for (size_t f = 0; f < DL_ARRAY_LEN(families); f++)
        for (const dl_op_def *op = families[f]; op->name; op++)
            if (i-- == 0) return op;
    return NULL;
}
