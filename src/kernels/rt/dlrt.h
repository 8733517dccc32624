/* dlrt.h — the runtime kernels that generated code calls: GEMM and convolution with a fused
 * epilogue, pooling, softmax, layer normalization. Portable C11 with no dependency on libdlcc and
 * no allocation: these files are embedded into libdlcc as text and copied into every JIT build
 * and every AOT bundle. Loops may carry `#pragma omp` (built with -fopenmp when threads are
 * wanted; ignored otherwise). All tensors are dense row-major float32. */
#ifndef DLRT_H
#define DLRT_H

#include <stddef.h>
#include <stdint.h>

/* Activation applied last in an epilogue. */
enum {
    DLRT_ACT_NONE = 0,
    DLRT_ACT_RELU,
    DLRT_ACT_CLIP,       /* min(max(x, a), b) */
    DLRT_ACT_LEAKY_RELU, /* x < 0 ? a*x : x */
    DLRT_ACT_SIGMOID,
    DLRT_ACT_TANH,
    DLRT_ACT_GELU,         /* 0.5*x*(1+erf(x/sqrt(2))) */
    DLRT_ACT_HARD_SIGMOID, /* max(0, min(1, a*x + b)) */
    DLRT_ACT_HARD_SWISH,   /* x * max(0, min(1, x/6 + 1/2)) */
};

/* Applied to each output element y[i][j] of an M x N result, in this order:
 *   v = alpha * acc
 *   v += beta * bias[i*bias_rs + j*bias_cs]          (when bias != NULL; strides may be 0)
 *   v += residual[i*res_rs + j*res_cs]               (when residual != NULL)
 *   v = act(v)
 * For convolution, i is the output channel and j the flattened output position within one
 * image (dlrt_conv_forward derives the per-image bias and residual pointers itself). */
typedef struct dlrt_epilogue {
    float alpha, beta;
    const float *bias;
    int64_t bias_rs, bias_cs;
    const float *residual;
    int64_t res_rs, res_cs;
    int act;
    float act_a, act_b;
} dlrt_epilogue;

/* C[M,N] = epilogue(op(A) * op(B)); op(A) is A (M x K, row stride lda) or A^T when trans_a
 * (A stored K x M). Same for B (K x N, or N x K when trans_b). C has row stride ldc and is
 * overwritten; K == 0 gives epilogue(0). ep may be NULL (alpha 1, nothing else). C must not
 * overlap A, B or the bias; the residual may be C itself (same element positions: an in-place
 * residual add), otherwise it must not overlap C either. */
void dlrt_sgemm(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, int trans_a,
                const float *B, int64_t ldb, int trans_b, float *C, int64_t ldc,
                const dlrt_epilogue *ep);

/* N-d convolution (1 to 3 spatial dims), NCHW layout, ONNX semantics (pads begin/end, strides,
 * dilations, groups). w is [C_out, C_in/group, k...]. The end padding is implied by out[].
 * The epilogue's bias has one value per output channel and the residual has y's layout
 * ([n, c_out, out...], for all images); the bias/residual strides in ep are not used.
 * The residual may be y itself (in place); y must not overlap x, w or the bias. */
typedef struct dlrt_conv {
    int nsp; /* spatial rank, 1..3 */
    int64_t n, c_in, c_out, group;
    int64_t in[3], out[3], k[3], stride[3], dil[3], pad_begin[3];
} dlrt_conv;
/* Scratch bytes dlrt_conv_forward needs (may be 0, then workspace may be NULL): one image and
 * group's im2col matrix, c_in/group * prod(k) * prod(out) floats, unless the convolution is 1x1
 * with stride 1 and no padding, or has one input channel per group (depthwise). */
size_t dlrt_conv_workspace(const dlrt_conv *p);
void dlrt_conv_forward(const dlrt_conv *p, const float *x, const float *w, float *y,
                       void *workspace, const dlrt_epilogue *ep);

/* Pooling over NC + spatial (1 to 3 dims). kind: 0 max, 1 average, 2 Lp (p). Windows follow
 * ONNX (pads, strides, dilations; ceil_mode is already reflected in out[]). The average divides
 * by the number of taps inside the input, or with count_include_pad by the number inside the
 * padded input [-pad_begin, in + pad_end) (taps of a ceil_mode window that reach past the end
 * padding are never counted; pad_end is read only for this). Windows with no element inside
 * the input give 0, like the reference interpreter. */
typedef struct dlrt_pool {
    int nsp, kind, count_include_pad;
    int64_t n, c;
    int64_t in[3], out[3], k[3], stride[3], dil[3], pad_begin[3], pad_end[3];
    float p;
} dlrt_pool;
void dlrt_pool_forward(const dlrt_pool *p, const float *x, float *y);

/* Softmax / LogSoftmax (log != 0) along a middle axis of a tensor seen as [outer, n, inner],
 * like the reference: a NaN in a slice makes the whole slice NaN; +inf entries share the mass.
 * y may be x (in place). */
void dlrt_softmax(int64_t outer, int64_t n, int64_t inner, const float *x, float *y, int log);

/* LayerNormalization over the last `n` elements of each of `outer` rows: y = (x - mean) /
 * sqrt(var + eps) * scale + bias, var the population variance; scale/bias have n elements (bias
 * may be NULL). mean and inv_std (outer elements each) may be NULL. y may be x (in place). */
void dlrt_layernorm(int64_t outer, int64_t n, const float *x, const float *scale, const float *bias,
                    float eps, float *y, float *mean, float *inv_std);

#endif
