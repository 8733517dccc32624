/* dlrt.h — the runtime kernels that generated code calls: GEMM and convolution with a fused
 * epilogue, pooling, softmax, layer normalization, and the backward of convolution and pooling
 * (training). Portable C11 with no dependency on libdlcc and no allocation: these files are
 * embedded into libdlcc as text and copied into every JIT build and every AOT bundle. Kernels
 * share their work out through dlrt_parallel (threads.c: a pool of pthreads when built with
 * -DDLRT_THREADS -pthread, else everything runs in the caller). All tensors are dense row-major
 * float32. */
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
    DLRT_ACT_GELU,         /* x*(erf(x/a)+1)*0.5, a the divisor (sqrt(2), GELU as torch exports
                              it; a = 0 is taken as sqrt(2)); erf is dlrt_erf (vecmath.h) */
    DLRT_ACT_HARD_SIGMOID, /* max(0, min(1, a*x + b)) */
    DLRT_ACT_HARD_SWISH,   /* x * max(0, min(1, x/6 + 1/2)) */
    DLRT_ACT_GELU_TANH,    /* x*(1+tanh(a*(x + b*x*x*x)))*0.5, GELU's tanh form: a = sqrt(2/pi)
                              and b = 0.044715 as the graph spells them (a = 0: the two below) */
};
#define DLRT_GELU_TANH_A 0.7978845608f /* sqrt(2 / pi) */
#define DLRT_GELU_TANH_B 0.044715f     /* x^3's factor */

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
/* Prepacked operands, for products that reuse one operand (a layer's weights): the operand is
 * packed once into the microkernel's panel layout, over all of K, and later products skip that
 * work. operand 0 packs op(A) (lines = M rows, trans = trans_a), 1 packs op(B) (lines = N
 * columns, trans = trans_b). The layout depends on the instruction set the kernels were built
 * for, so a packed buffer must be made and used by the same build. */
size_t dlrt_gemm_packed_bytes(int operand, int64_t lines, int64_t K);
void dlrt_gemm_pack_operand(int operand, int64_t lines, int64_t K, const float *X, int64_t ld,
                            int trans, float *dst);
/* Whether a product reads the full panels of a B that is not prepacked (rows ldb floats apart,
 * not transposed) where they are, rather than packing them, for K blocks of kc rows: unless
 * the rows' stride would crowd them into few cache sets, and never on the generic C build. The
 * same rule decides for a transposed product's row panels, B's columns (depths ldb apart). The
 * results are the same either way. */
int dlrt_gemm_b_in_place(int64_t ldb, int64_t kc);
/* Where dlrt_gemm_pack_operand puts line `line` at depth p (in floats from dst), for packers that
 * make an operand's values themselves (lines past the last are zeros the caller writes). */
size_t dlrt_gemm_packed_index(int operand, int64_t line, int64_t p, int64_t K);
/* dlrt_sgemm where A and/or B may be prepacked (a_packed / b_packed: then lda/trans_a, or
 * ldb/trans_b, are ignored). Same epilogue and aliasing rules. a_packed = DLRT_A_PACKED_T says
 * op(A) was packed as the right operand of the transposed product (dlrt_gemm_pack_operand(1, M,
 * K, A, lda, !trans_a, ...)): the product is then computed transposed, C^T = op(B)^T op(A)^T,
 * for a narrow N (dlrt_sgemm_transposes) whose left operand is a layer's weights. */
enum { DLRT_A_PACKED = 1, DLRT_A_PACKED_T = 2 };
/* b_packed = DLRT_B_PACKED_HOT: B is prepacked (as b_packed = 1) and in cache, read again and
 * again (an RNN's recurrent weights, every step), so the product does not prefetch it as it
 * does weights that come from memory: those prefetches had taken a tenth of a 64-step LSTM's
 * time. The results are the same as with b_packed = 1. */
enum { DLRT_B_PACKED_HOT = 3 };
void dlrt_sgemm_ex(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, int trans_a,
                   int a_packed, const float *B, int64_t ldb, int trans_b, int b_packed, float *C,
                   int64_t ldc, const dlrt_epilogue *ep);
/* dlrt_sgemm_ex with a workspace of ws_bytes at ws (may be NULL): an operand packed per call
 * that several tiles of the product read is then packed once, into it, instead of by each
 * tile. dlrt_gemm_workspace(M, N, K, a_packed, b_packed) bytes let it do so for every operand
 * that is not prepacked, on every instruction set; with less it packs what fits, and per tile
 * the rest. The results are the same either way. */
size_t dlrt_gemm_workspace(int64_t M, int64_t N, int64_t K, int a_packed, int b_packed);
void dlrt_sgemm_ws(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, int trans_a,
                   int a_packed, const float *B, int64_t ldb, int trans_b, int b_packed, float *C,
                   int64_t ldc, const dlrt_epilogue *ep, void *ws, size_t ws_bytes);
/* dlrt_sgemm_ws with bfloat16 products (a compile option: dl_compile_options.math): both
 * operands are rounded to bfloat16 (nearest even) and their products summed in float32, at
 * twice the multiply-adds of float32 on CPUs with AVX512-BF16. Builds without AVX512-BF16
 * (dlrt_gemm_has_bf16() == 0) compute in float32. Same results
 * whatever the thread count; same epilogue and aliasing rules. */
/* Its right operand may come packed in depth pairs (a layer's weights, half the bytes of float32
 * panels, no conversion per call): dlrt_gemm_packed_bytes / dlrt_gemm_pack_operand with operand
 * DLRT_B_PAIRS (lines = N columns, trans = trans_b), passed with b_packed = DLRT_B_PAIRS, to
 * dlrt_sgemm_bf16 only. Where the build has no bfloat16 products, that packing makes float32
 * panels (operand 1) and the product reads them as such. */
enum { DLRT_B_PAIRS = 2 };
/* The same for the left operand (a convolution's weights): operand DLRT_A_PAIRS of
 * dlrt_gemm_packed_bytes / dlrt_gemm_pack_operand (lines = M rows, trans = trans_a), passed
 * with a_packed = DLRT_A_PAIRS; and a_packed = DLRT_A_PAIRS_T for op(A) packed in pairs as the
 * right operand of the transposed product (operand DLRT_B_PAIRS, lines M, trans !trans_a), as
 * DLRT_A_PACKED_T is in float32. Their values stay clear of the convolutions' packing modes
 * (DLRT_WG_PACKED ...), which share the a_packed argument. */
enum { DLRT_A_PAIRS = 7, DLRT_A_PAIRS_T = 8 };
void dlrt_sgemm_bf16(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, int trans_a,
                     int a_packed, const float *B, int64_t ldb, int trans_b, int b_packed, float *C,
                     int64_t ldc, const dlrt_epilogue *ep, void *ws, size_t ws_bytes);
int dlrt_gemm_has_bf16(void);
/* Whether dlrt_sgemm computes an M x N product transposed (narrow N) when B is not transposed
 * (a convolution's image or columns): prepacking its left operand then does not pay. */
int dlrt_sgemm_transposes(int64_t M, int64_t N, int64_t K);
/* The same decision for the kernels of a build with vectors of vector_bytes (64: AVX-512,
 * 32: AVX2+FMA, else generic C), so a host built for another instruction set plans as the
 * generated code will run. */
int dlrt_sgemm_transposes_for(int vector_bytes, int64_t M, int64_t N, int64_t K);
/* The instruction set the GEMM microkernel was built for: "avx512", "avx2" or "generic". */
const char *dlrt_gemm_isa(void);

/* N-d convolution (1 to 3 spatial dims), NCHW layout, ONNX semantics (pads begin/end, strides,
 * dilations, groups). w is [C_out, C_in/group, k...]. The end padding is implied by out[].
 * The epilogue's bias has one value per output channel and the residual has y's layout
 * ([n, c_out, out...], for all images); the bias/residual strides in ep are not used.
 * The residual may be y itself (in place); y must not overlap x, w or the bias. */
typedef struct dlrt_conv {
    int nsp; /* spatial rank, 1..3 */
    int64_t n, c_in, c_out, group;
    int64_t in[3], out[3], k[3], stride[3], dil[3], pad_begin[3];
    /* 0: the cost model picks the algorithm (dlrt_conv_choose); else 1 + the DLRT_CONV_*
     * algorithm to run, measured fastest for this layer by `dlcc tune`, taken where
     * dlrt_conv_algo_ok allows it (else the cost model's pick) */
    int tuned;
    /* 1: the algorithms that run as GEMMs (1x1, im2col) compute their products in bfloat16
     * (dlrt_sgemm_bf16; --math bf16); the others stay in float32, and the cost model does not
     * pick the implicit GEMM (im2col instead; a tuning record naming it is followed). The
     * backward's GEMMs too (dlrt_conv_grad_*), and its input gradient run as a convolution
     * where that runs as GEMMs; its direct weight gradient (few input channels) and a Winograd
     * input gradient stay float32 */
    int bf16;
} dlrt_conv;
/* Scratch bytes dlrt_conv_forward or dlrt_conv_forward_packed needs for the algorithm it picks
 * (may be 0, then workspace may be NULL): none for depthwise and 1x1, one image and group's
 * im2col matrix (c_in/group * prod(k) * prod(out) floats) for im2col, one batch of transformed
 * inputs and outputs for Winograd, plus the transformed weights unless they come packed, the
 * weights interleaved (c_out * c_in * prod(k) floats) for the direct algorithm. When it is not
 * 0, workspace must hold that many bytes. */
size_t dlrt_conv_workspace(const dlrt_conv *p);
void dlrt_conv_forward(const dlrt_conv *p, const float *x, const float *w, float *y,
                       void *workspace, const dlrt_epilogue *ep);
/* The same with the weights also prepacked once (a layer's constant weights); when wpacked is
 * NULL, exactly dlrt_conv_forward. dlrt_conv_packs_weights says how: 0 not packed;
 * DLRT_A_PACKED as the GEMM's left operand (dlrt_gemm_pack_operand(0, c_out, K, w, K, 0,
 * wpacked), K = c_in * prod(k)); DLRT_A_PACKED_T as the right operand of the transposed
 * product, for narrow output planes (dlrt_gemm_pack_operand(1, c_out, K, w, K, 1, wpacked));
 * DLRT_WG_PACKED / DLRT_WG_PACKED_T: Winograd F(4x4, 3x3)-transformed, each frequency's matrix
 * packed the same two ways (dlrt_conv_winograd_pack(mode, c_out, c_in, w, wpacked));
 * DLRT_WG2_PACKED / DLRT_WG2_PACKED_T: the same for F(2x2, 3x3); DLRT_A_PAIRS / DLRT_A_PAIRS_T
 * (p->bf16): DLRT_A_PACKED / _T in depth pairs (operands DLRT_A_PAIRS and DLRT_B_PAIRS of
 * dlrt_gemm_pack_operand). With its weights
 * transformed once, Winograd pays on more layers, so the algorithm may differ from
 * dlrt_conv_forward's (dlrt_conv_workspace covers both). The emitter decides with
 * dlrt_conv_packs_weights_for(the target's vector bytes, p); wpack_mode says how wpacked was
 * packed, and a copy packed otherwise than this build would (a mismatched target, another
 * batch size) is ignored rather than misread. */
enum { DLRT_WG_PACKED = 3, DLRT_WG_PACKED_T = 4, DLRT_WG2_PACKED = 5, DLRT_WG2_PACKED_T = 6 };
/* The output tile side of a Winograd packing mode: 4, 2, or 0 for any other mode. */
int dlrt_conv_winograd_tile(int mode);
/* dlrt_gemm_pack_operand's operand and trans for the weights of a layer packed as mode
 * (DLRT_A_PACKED, DLRT_A_PACKED_T, DLRT_A_PAIRS, DLRT_A_PAIRS_T): the left operand, or the
 * right one of the transposed product, in float32 panels or in depth pairs. */
void dlrt_conv_gemm_pack_args(int mode, int *operand, int *trans);
size_t dlrt_conv_winograd_packed_bytes(int mode, int64_t c_out, int64_t c_in);
void dlrt_conv_winograd_pack(int mode, int64_t c_out, int64_t c_in, const float *w, float *dst);
void dlrt_conv_forward_packed(const dlrt_conv *p, const float *x, const float *w,
                              const float *wpacked, int wpack_mode, float *y, void *workspace,
                              const dlrt_epilogue *ep);
int dlrt_conv_packs_weights(const dlrt_conv *p);
int dlrt_conv_packs_weights_for(int vector_bytes, const dlrt_conv *p);

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

/* The backward of dlrt_conv_forward without epilogue (conv-grad.c), p being the forward
 * convolution. Input gradient: dx [n, c_in, in...] = the transposed convolution of dy
 * [n, c_out, out...] with w; weight gradient: dw [c_out, c_in/group, k...] = the sum over images
 * and output positions of dy times x's window. Both overwrite their result (positions no window
 * covers get 0). Per image and group one GEMM through dlrt_sgemm, with col2im / im2col in the
 * workspace (the input gradient of stride-1 layers with many input channels, and of depthwise
 * ones, is instead dlrt_conv_forward of dy with the filters flipped); batches of small images are
 * split over threads in a number of chunks fixed by the geometry and the batch (never the thread
 * count, so neither are the results), each chunk with its own columns and partial weight gradient.
 * dlrt_conv_grad_workspace(p) bytes serve either kernel (0, and workspace may be NULL, for a 1x1
 * stride-1 unpadded convolution that is not split, e.g. a single image). dx and dw must not overlap
 * the operands. */
size_t dlrt_conv_grad_workspace(const dlrt_conv *p);
void dlrt_conv_grad_input(const dlrt_conv *p, const float *dy, const float *w, float *dx,
                          void *workspace);
void dlrt_conv_grad_weight(const dlrt_conv *p, const float *x, const float *dy, float *dw,
                           void *workspace);
/* ConvTranspose: y [n, c_in, in...] = the transposed convolution of x [n, c_out, out...] with w
 * [c_out, c_in/group, k...], plus bias[c_in] (NULL: none) in every position; p is the
 * convolution whose input gradient it is (dl_convtr_forward_window), so this is
 * dlrt_conv_grad_input(p, x, w, y, workspace) and the bias, with its workspace. wpacked (may be
 * NULL) holds w packed once for its GEMM in mode wpack_mode, the nonzero
 * dlrt_conv_transpose_packs_weights(p): DLRT_A_PACKED as the left operand
 * (dlrt_gemm_pack_operand(0, c_in * k, c_out, w, c_in * k, 1, wpacked), w read transposed) or
 * DLRT_A_PACKED_T as the transposed product's right one (dlrt_gemm_pack_operand(1, c_in * k,
 * c_out, w, c_in * k, 0, wpacked)); 0 where the layer does not run as such a GEMM (groups,
 * bfloat16 products, a stride-1 layer run as a convolution with flipped filters). A copy packed
 * in another mode than this build's (a mismatched target, another batch) is not read. */
int dlrt_conv_transpose_packs_weights(const dlrt_conv *p);
int dlrt_conv_transpose_packs_weights_for(int vector_bytes, const dlrt_conv *p);
void dlrt_conv_transpose(const dlrt_conv *p, const float *x, const float *w, const float *wpacked,
                         int wpack_mode, const float *bias, float *y, void *workspace);
/* The backward of MaxPool and AveragePool (p as for dlrt_pool_forward; kind and p are not read),
 * like the reference kernels: dx gets each dy at its window's first maximum (the forward's
 * comparison, so ties and NaNs pick the element the forward picked), or dy divided by the count
 * the average used on each tap inside the input. dx is overwritten and must not overlap. */
void dlrt_maxpool_grad(const dlrt_pool *p, const float *x, const float *dy, float *dx);
void dlrt_avgpool_grad(const dlrt_pool *p, const float *dy, float *dx);

/* Softmax / LogSoftmax (log != 0) along a middle axis of a tensor seen as [outer, n, inner],
 * like the reference: a NaN in a slice makes the whole slice NaN; +inf entries share the mass.
 * y may be x (in place). */
void dlrt_softmax(int64_t outer, int64_t n, int64_t inner, const float *x, float *y, int log);

/* LayerNormalization over the last `n` elements of each of `outer` rows: y = (x - mean) /
 * sqrt(var + eps) * scale + bias, var the population variance; scale/bias have n elements (bias
 * may be NULL). mean and inv_std (outer elements each) may be NULL. y may be x (in place). */
void dlrt_layernorm(int64_t outer, int64_t n, const float *x, const float *scale, const float *bias,
                    float eps, float *y, float *mean, float *inv_std);

/* GroupNormalization (and InstanceNormalization: G = C) of x [N, C, inner...]: each image's C / G
 * channels of a group normalized together by their mean and population variance (summed in
 * double, as dlrt_layernorm), then y = v * scale[p] + bias[p], p the channel, or the group with
 * per_group. y may be x. */
void dlrt_groupnorm(int64_t N, int64_t C, int64_t G, int64_t inner, const float *x,
                    const float *scale, const float *bias, int per_group, float eps, float *y);

/* Scaled dot-product attention for a batch of heads (attention.c): for each head h in [0, bh),
 *   y_h = softmax(scale * q_h k_h^T + mask_h) v_h
 * q_h is [tq, d], k_h [tk, d], v_h [tk, dv], y_h [tq, dv]. Each operand is addressed through
 * strides (elements): X_h[i][c] = X[(h / heads) * X_sb + (h % heads) * X_sh + i * X_st + c * X_sc],
 * so the transposes around attention in exported graphs need no copy. The mask (may be NULL)
 * is added before the softmax, broadcast through its own strides (0 for a broadcast dim);
 * causal != 0 additionally masks key positions j > i + (tk - tq). Rows whose every score is
 * -inf give NaN, like the unfused softmax. No allocation: the kernel keeps one row of scores
 * per thread in a stack buffer when tk <= DLRT_ATTN_MAX_TK, otherwise in the caller's
 * workspace (dlrt_attention_workspace bytes). The kernel cannot know how many threads its
 * workspace was sized for: past DLRT_ATTN_MAX_TK keys it runs at most min(dlrt_threads(),
 * 256) threads, and dlrt_attention_workspace(a, threads <= 0) sizes for 256 (256 * tk floats,
 * only when tk > DLRT_ATTN_MAX_TK). */
#ifndef DLRT_ATTN_MAX_TK
#define DLRT_ATTN_MAX_TK 16384
#endif
typedef struct dlrt_attn {
    int64_t batch, heads, tq, tk, d, dv;
    float scale;
    int causal;
    int64_t q_sb, q_sh, q_st, q_sc;
    int64_t k_sb, k_sh, k_st, k_sc;
    int64_t v_sb, v_sh, v_st, v_sc;
    int64_t y_sb, y_sh, y_st, y_sc;
    int64_t m_sb, m_sh, m_st, m_sc;
} dlrt_attn;
size_t dlrt_attention_workspace(const dlrt_attn *a, int threads);
void dlrt_attention(const dlrt_attn *a, const float *q, const float *k, const float *v,
                    const float *mask, float *y, void *workspace);

/* Moves the block dims[0 .. rank) (rank 1-8) of esize-byte elements: element i goes from src +
 * sum(i[d] * sstride[d]) to dst + sum(i[d] * dstride[d]) elements, strides of any sign (a
 * reversed Slice). Nothing moves when a dim is 0. Source and destination must not overlap. The
 * kernel of Slice, Split, Concat and Pad (emit.c). */
#define DLRT_COPY_MAX_RANK 8 /* the most dims dlrt_copy_strided takes */
void dlrt_copy_strided(int rank, const int64_t *dims, int64_t esize, const void *src,
                       const int64_t *sstride, void *dst, const int64_t *dstride);
/* dst[0 .. n) = the esize-byte element at value (a Pad's constant). */
void dlrt_fill(void *dst, int64_t n, int64_t esize, const void *value);

/* A run's error record: kernels whose inputs can be wrong in ways only the data shows (an index
 * out of range) write the first such error here instead of reading past a buffer, and finish
 * their work; the caller checks it after the kernel and fails the run. err[0] is the code (0:
 * none), err[1 .. 3] its details. */
enum {
    DLRT_ERR_NONE = 0,
    DLRT_ERR_INDEX = 1 /* err[1] the index, err[2] the extent, err[3] the axis */
};
#define DLRT_ERR_WORDS 4
/* Records an error in err (may be NULL) unless one is there already; threads may race (the
 * winner's stands). */
void dlrt_report(int64_t *err, int64_t code, int64_t a, int64_t b, int64_t c);

/* Gather: y[o][j] = x[o][idx[j]] for o < outer, j < count, each a row of row_bytes, x holding
 * `extent` rows per o; idx has count int32 (idx_bytes 4) or int64 (8) elements, negative ones
 * counting from the end. A row whose index lies outside [-extent, extent) is zeroed, and the first
 * such index in idx (whatever the threads) is reported in err as DLRT_ERR_INDEX on `axis`. x and
 * y must not overlap. */
void dlrt_gather(const void *x, const void *idx, int idx_bytes, int64_t outer, int64_t extent,
                 int64_t count, int64_t row_bytes, void *y, int axis, int64_t *err);

/* out[b][c][r] = in[b][r][c] for `batch` matrices of rows x cols elements of 4 bytes (any such
 * type: only bits move); in and out must not overlap. */
void dlrt_transpose32(int64_t batch, int64_t rows, int64_t cols, const void *in, void *out);

/* Convolution algorithms (conv.c picks one per layer by dlrt_conv_choose: a cost model over the
 * geometry, so the host and the generated code always agree; or the one that dlrt_conv.tuned
 * names, measured by `dlcc tune` and written into the generated code). */
enum {
    DLRT_CONV_GEMM_1X1 = 0, /* 1x1, stride 1, no padding: one GEMM on the input */
    DLRT_CONV_IM2COL,       /* im2col into the workspace, then GEMM */
    DLRT_CONV_DEPTHWISE,    /* one input channel per group: direct, vectorized */
    DLRT_CONV_WINOGRAD,     /* 3x3, stride 1, dilation 1, 2-D: Winograd F(4x4, 3x3) */
    DLRT_CONV_WINOGRAD_F2,  /* the same by F(2x2, 3x3) */
    DLRT_CONV_DIRECT,       /* 2-D, stride 1, few taps per output (c_in * k <= 32): direct */
    DLRT_CONV_IMPLICIT,     /* one group: GEMM reading the windows in place (strided layers) */
    DLRT_CONV_ALGOS         /* how many there are */
};
int dlrt_conv_choose(const dlrt_conv *p);
/* The algorithm that runs: dlrt_conv_choose's for dlrt_conv_forward, and with packed set for
 * dlrt_conv_forward_packed given its packed weights (Winograd then pays on more layers). p->tuned
 * comes first where the algorithm applies. */
int dlrt_conv_choose_packed(const dlrt_conv *p, int packed);
/* The algorithm dlrt_conv_forward_packed runs on p given weights packed as wpack_mode (0: none,
 * or NULL weights): the packed pick where that packing is still p's, else the plain one. */
int dlrt_conv_runs(const dlrt_conv *p, int wpack_mode);
/* Whether algorithm algo can run p. */
int dlrt_conv_algo_ok(const dlrt_conv *p, int algo);
/* A short name of an algorithm ("gemm1x1", "im2col", "depthwise", "winograd",
 * "winograd2x2", "direct", "implicit"). */
const char *dlrt_conv_algo_name(int algo);

/* ArgMax (is_max) or ArgMin of x [outer, n, inner] along n into y [outer, inner] (argmax.c): NaN
 * counts as the largest value, -0 equals 0, and of equal values the first index wins (the last
 * with `last`), as in the reference kernel. */
void dlrt_argmax(int64_t outer, int64_t n, int64_t inner, const float *x, int64_t *y, int is_max,
                 int last);

/* ---- LSTM, GRU, RNN (rnn.c) ---- */

enum { DLRT_RNN_SIMPLE = 0, DLRT_RNN_GRU = 1, DLRT_RNN_LSTM = 2 };
/* ONNX's recurrent ops in layout 0 with their default activations (sigmoid gates, tanh cell
 * and output), no clip, peepholes or sequence lengths: x [T, B, I], w [dirs, G*H, I], r [dirs,
 * G*H, H], bias [dirs, 2*G*H] or NULL, h0 and c0 [dirs, B, H] or NULL (zeros); outputs y [T,
 * dirs, B, H], yh and yc [dirs, B, H], each may be NULL. G is 1 (RNN), 3 (GRU: z r h) or 4
 * (LSTM: i o f c). reverse runs a single direction backward; with dirs 2 the second runs
 * backward. packed (may be NULL) holds at 3 d + k part k of direction d's weights
 * (dlrt_rnn_packed_part) prepacked; a NULL entry is packed per call (or W read as it is).
 * workspace: dlrt_rnn_workspace(p) bytes. */
typedef struct dlrt_rnn {
    int kind, dirs, reverse, linear_before_reset;
    int64_t T, B, I, H;
} dlrt_rnn;
/* G for a kind: 1, 3 or 4 gates. */
int64_t dlrt_rnn_gates(int kind);
size_t dlrt_rnn_workspace(const dlrt_rnn *p);
/* Part k (0 W, 1 R, 2 R's candidate rows) of direction d's weights as dlrt_rnn_forward's products
 * read them prepacked: dlrt_gemm_pack_operand(1, lines, K, in + offset, K, 1, ...), in the
 * kernel's input `input` (1: w, 2: r). R is in two parts for a GRU without linear_before_reset
 * (its z and r rows, then the candidate's), else part 2 does not exist: 0 then, else 1. */
typedef struct dlrt_rnn_part {
    int input;
    int64_t lines, K, offset;
} dlrt_rnn_part;
int dlrt_rnn_packed_part(const dlrt_rnn *p, int d, int k, dlrt_rnn_part *part);
void dlrt_rnn_forward(const dlrt_rnn *p, const float *x, const float *w, const float *r,
                      const float *bias, const float *h0, const float *c0, float *y, float *yh,
                      float *yc, const float *const *packed, void *workspace);

/* ---- Resize (resize.c) ---- */

/* Resize of the last two axes of planes x [planes, in_h, in_w] into y [planes, out_h, out_w]:
 * y[p][o][c] = sum over row taps a and column taps b of wh[o * nh + a] * ww[b * out_w + c] *
 * x[p][ih[o * nh + a]][iw[b * out_w + c]], the row taps summed first (a row of sums), in tap
 * order, taps of weight 0 left out and the sums from +0, as the reference kernel; every index
 * within its axis (the compiler's taps, src/ops/resize.c). Nearest resizing has one tap (of
 * weight 1, or 0 outside with exclude_outside), linear two, cubic four. workspace:
 * dlrt_resize_workspace(r) bytes (0: may be NULL). */
typedef struct dlrt_resize {
    int64_t planes, in_h, in_w, out_h, out_w;
    int nh, nw;             /* taps per output row / column */
    const int32_t *ih, *iw; /* [out_h][nh], [nw][out_w] (the column taps tap-major) */
    const float *wh, *ww;   /* their weights */
} dlrt_resize;
size_t dlrt_resize_workspace(const dlrt_resize *r);
void dlrt_resize2d(const dlrt_resize *r, const float *x, float *y, void *workspace);

/* ---- threads (threads.c) ---- */

#define DLRT_MAX_THREADS 64

#if defined(__GNUC__) || defined(__clang__)
#define DLRT_HIDDEN __attribute__((visibility("hidden"))) /* each module's own pool */
#else
#define DLRT_HIDDEN
#endif

/* Runs fn(ctx, lo, hi) over [0, n) cut into `pieces` consecutive ranges (0: one per thread),
 * each starting at a multiple of align (but the first), claimed one at a time by the calling
 * thread and up to max_team - 1 workers (0: no cap below the thread count). The caller returns
 * once every piece is done, without waiting for workers that have not started. Pieces may run
 * in any order and on any thread, so fn must compute each the same wherever it runs. A call from
 * inside a piece, from a second host thread while the pool is busy, or with one thread runs all
 * of [0, n) in the caller as one range. */
typedef void (*dlrt_range_fn)(void *ctx, int64_t lo, int64_t hi);
DLRT_HIDDEN void dlrt_parallel(int64_t n, int64_t pieces, int64_t align, int max_team,
                               dlrt_range_fn fn, void *ctx);
/* The same for pieces that need per-thread scratch: fn also gets the slot, in [0, team) (team <=
 * max_team when that is > 0), of the thread running the piece; two pieces never run at once on
 * one slot. */
typedef void (*dlrt_slot_fn)(void *ctx, int64_t lo, int64_t hi, int slot);
DLRT_HIDDEN void dlrt_parallel_slots(int64_t n, int64_t pieces, int64_t align, int max_team,
                                     dlrt_slot_fn fn, void *ctx);
/* Runs fn(ctx, lo, hi, slot) over chunks [0, chunks), shared out as `spans` consecutive spans
 * (span r from starts[r] to starts[r + 1], the last to chunks, each start held within the
 * previous one and chunks, the first at 0; starts NULL: as even as they go), each thread
 * starting on one: it takes that span's chunks from the front, a run at a time up to the next
 * multiple of group (< 2: one at a time) or the span's end, then the others' from their backs
 * one at a time, so that a thread slower than the rest (its core shared) holds no more than the
 * run it is in. Calls are a run from a front ([c, c + n), never across a multiple of group), one
 * chunk from a back, or [0, chunks) where the job runs in the caller (as dlrt_parallel's rules
 * say). Each chunk must compute the same whichever thread runs it and whatever run it is in. */
DLRT_HIDDEN void dlrt_parallel_spans(int64_t chunks, int spans, const int64_t *starts,
                                     int64_t group, int max_team, dlrt_slot_fn fn, void *ctx);
/* The team size of later jobs of this copy of the runtime (a module's; n < 1: the number of
 * CPUs; at most DLRT_MAX_THREADS), as `--threads N` sets it before each run. */
DLRT_HIDDEN void dlrt_set_threads(int n);
/* The team a job started now would get: 1 while a job runs (inside a piece: nested jobs run in
 * their caller) or without DLRT_THREADS. */
DLRT_HIDDEN int dlrt_threads(void);
/* Whether a job of this pool is running. */
DLRT_HIDDEN int dlrt_in_parallel(void);

#endif
