/* spatial.h — window geometry shared by the spatial op families (conv.c, pool.c, quant.c):
 * reading kernel_shape / strides / dilations / pads / auto_pad with validation, and the output
 * size of a sliding window (Conv, pooling with ceil_mode, ConvInteger, QLinearConv). Private to
 * src/ops. Functions return an error message (written into err) or NULL. */
#ifndef DL_SPATIAL_H
#define DL_SPATIAL_H

#include "op-impl.h"

#define DL_SP_MAX        (DL_MAX_RANK - 2)  /* spatial dims: rank minus batch and channel */
#define DL_SP_ATTR_LIMIT ((int64_t)1 << 30) /* bound on kernel/stride/dilation/pad/spatial sizes   \
                                             */
#define DL_SP_ELEM_LIMIT ((int64_t)1 << 40) /* bound on products of spatial sizes in kernels */

typedef enum {
    DL_AUTO_PAD_NOTSET,
    DL_AUTO_PAD_SAME_UPPER,
    DL_AUTO_PAD_SAME_LOWER,
    DL_AUTO_PAD_VALID
} dl_auto_pad;

typedef struct dl_window {
    int ns;                 /* spatial rank */
    int64_t in[DL_SP_MAX];  /* input spatial dims, < 0 when symbolic */
    int64_t k[DL_SP_MAX];   /* kernel dims, < 0 when not known yet */
    int64_t out[DL_SP_MAX]; /* output spatial dims, -1 when unknown */
    int64_t stride[DL_SP_MAX];
    int64_t dil[DL_SP_MAX];
    int64_t pb[DL_SP_MAX], pe[DL_SP_MAX]; /* pads at begin / end */
} dl_window;

/* The auto_pad attribute ("" counts as NOTSET); error "unknown auto_pad '...'". */
const char *dl_sp_auto_pad(const dl_node *n, dl_auto_pad *ap, char *err, size_t errlen);

/* Reads an optional ints attribute of length want into out (default def), checking each value
 * lies in [lo, DL_SP_ATTR_LIMIT). */
const char *dl_sp_read_ints(const dl_node *n, const char *name, int want, int64_t def, int64_t lo,
                            int64_t *out, char *err, size_t errlen);

/* Zeroes g and sets ns and the input dims in[] (< 0 when symbolic), checking their size;
 * out[] is set to -1. */
const char *dl_sp_init(dl_window *g, int ns, const int64_t *in, char *err, size_t errlen);

/* Reads strides, dilations (when dilations is false they are all 1), pads and kernel_shape
 * (default -1: taken from the weight later) into g, set up by dl_sp_init. pads apply only with
 * auto_pad NOTSET, otherwise pb/pe stay 0. */
const char *dl_sp_read_attrs(const dl_node *n, dl_auto_pad ap, bool dilations, dl_window *g,
                             char *err, size_t errlen);

/* Conv kernels: takes kernel dims from the weight's spatial dims wk[] (< 0 when symbolic) where
 * kernel_shape did not give them, checking that both agree and the size limit. */
const char *dl_sp_kernel_from_weight(dl_window *g, const int64_t *wk, char *err, size_t errlen);

/* Output size of a forward sliding window (Conv, pooling) in each dim whose input and kernel are
 * known: SAME_* pads to ceil(in / stride) outputs (the odd pad at the end for SAME_UPPER, at the
 * begin for SAME_LOWER); otherwise floor (or with ceil_mode, ceil, the last window starting
 * inside the input or the leading pad) of (in + pads - extent) / stride + 1. */
const char *dl_sp_forward_out(dl_window *g, dl_auto_pad ap, bool ceil_mode, char *err,
                              size_t errlen);

/* Product of v[0..n) into *out; false when a value is negative or the product reaches past
 * DL_SP_ELEM_LIMIT. */
bool dl_sp_prod(int n, const int64_t *v, int64_t *out);

/* The window of a Conv node (as its inference computes it) and of a pooling node (MaxPool,
 * AveragePool, LpPool; global = the Global* forms), for backends that lower these ops. */
const char *dl_conv_window(const dl_node *n, int ns, const int64_t *in, const int64_t *wk,
                           dl_window *g, char *err, size_t errlen);
const char *dl_pool_window(const dl_node *n, bool global, int ns, const int64_t *in, dl_window *g,
                           char *err, size_t errlen);
/* A ConvTranspose node as the Conv whose input gradient it is (same weights, strides,
 * dilations, group and the pads it resolves): that Conv's window, its in[] being the
 * ConvTranspose's output dims and its out[] the input dims in[] (< 0 when symbolic). Refused
 * (an error message) where the two differ: output_padding not below the stride, or an
 * output_shape beyond the full transposed output, whose extra positions only hold the bias. */
const char *dl_convtr_forward_window(const dl_node *n, int ns, const int64_t *in, const int64_t *wk,
                                     dl_window *fwd, char *err, size_t errlen);

#endif
