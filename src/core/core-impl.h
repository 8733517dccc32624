/* core-impl.h — private core of dlcc: the context and its error message, the one allocation hook,
 * tensors, dtype conversion, an arena for graph-lifetime objects. Every other module includes it. */
#ifndef DL_CORE_IMPL_H
#define DL_CORE_IMPL_H

#include "dlcc.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define DL_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define DL_UNUSED(x) ((void)(x))

/* For programmer bugs only: never for anything a model file or a user can cause. */
#define DL_ASSERT(cond)                                                                            \
    do {                                                                                           \
        if (!(cond)) dl_assert_fail(#cond, __FILE__, __LINE__);                                    \
    } while (0)
_Noreturn void dl_assert_fail(const char *cond, const char *file, int line);

#define DL_TRY(expr)                                                                               \
    do {                                                                                           \
        dl_status dl_try_s_ = (expr);                                                              \
        if (dl_try_s_ != DL_OK) return dl_try_s_;                                                  \
    } while (0)

#define DL_ERRMSG_LEN 1024

struct dl_ctx {
    dl_status status;
    char msg[DL_ERRMSG_LEN];
    int warned_once;
};

/* Records the error on ctx (if not NULL) and returns status. Later errors do not overwrite an
 * earlier one until dl_ctx_clear. */
dl_status dl_fail(dl_ctx *ctx, dl_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
dl_status dl_vfail(dl_ctx *ctx, dl_status status, const char *fmt, va_list ap);
/* Prefixes the current message: "context: old message" (used to add file or node names). */
void dl_ctx_prefix(dl_ctx *ctx, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void dl_ctx_clear(dl_ctx *ctx);

/* ---- the one allocation hook ----
 * All heap memory goes through these so tests can fail the Nth allocation. dl_malloc returns NULL
 * (never aborts). dl_alloc_checked also applies the model-derived size cap and reports errors. */
void *dl_malloc(size_t n);
void *dl_calloc(size_t count, size_t size);
void *dl_realloc(void *p, size_t n);
void dl_free(void *p);
char *dl_strdup(const char *s);
void dl_alloc_fail_after(long n); /* test hook: the (n+1)th allocation fails; -1 disables */
size_t dl_alloc_limit(void);
dl_status dl_alloc_checked(dl_ctx *ctx, size_t n, void **out, const char *what);
/* For the large blocks the kernels sweep on every run (arena, scratch, packed weights): n bytes
 * of zeros, 64-byte aligned, and from 2 MiB up mapped 2 MiB-aligned and advised as huge pages
 * (alloc.c says why). Freed only by dl_free_huge with the same n. dl_alloc_huge_checked caps
 * and reports as dl_alloc_checked does. */
void *dl_malloc_huge(size_t n);
void dl_free_huge(void *p, size_t n);
dl_status dl_alloc_huge_checked(dl_ctx *ctx, size_t n, void **out, const char *what);
/* a*b with overflow and cap checks; result in *out. */
dl_status dl_mul_size(dl_ctx *ctx, size_t a, size_t b, size_t *out, const char *what);

/* ---- arena: bump allocator for objects that die with their owner ---- */
typedef struct dl_arena_block dl_arena_block;
typedef struct dl_arena {
    dl_arena_block *head;
} dl_arena;
void *dl_arena_alloc(dl_arena *a, size_t n); /* zeroed, 16-byte aligned; NULL on OOM */
char *dl_arena_strdup(dl_arena *a, const char *s);
void dl_arena_free(dl_arena *a);

/* ---- tensors ---- */
struct dl_tensor {
    dl_dtype dtype;
    int rank;
    int64_t dims[DL_MAX_RANK];
    int64_t numel;
    size_t nbytes;
    void *data;
    bool owns_data; /* data freed with dl_free when the tensor is freed */
};

/* numel and nbytes of a shape, with overflow and cap checks. */
dl_status dl_shape_numel(dl_ctx *ctx, dl_dtype dtype, int rank, const int64_t *dims, int64_t *numel,
                         size_t *nbytes);
/* A tensor header on the heap with no data (data == NULL). */
dl_status dl_tensor_empty(dl_ctx *ctx, dl_dtype dtype, int rank, const int64_t *dims,
                          dl_tensor **out);
/* Allocates zeroed data for a tensor made by dl_tensor_empty. */
dl_status dl_tensor_alloc_data(dl_ctx *ctx, dl_tensor *t);
/* Wraps memory that the caller keeps alive (not freed with the tensor). */
dl_status dl_tensor_wrap(dl_ctx *ctx, dl_dtype dtype, int rank, const int64_t *dims, void *data,
                         dl_tensor **out);
/* Takes ownership of heap data that came from dl_malloc. */
dl_status dl_tensor_adopt(dl_ctx *ctx, dl_dtype dtype, int rank, const int64_t *dims, void *data,
                          dl_tensor **out);
dl_status dl_tensor_clone(dl_ctx *ctx, const dl_tensor *t, dl_tensor **out);
dl_tensor *dl_tensor_scalar_f32(dl_ctx *ctx, float v); /* NULL on OOM */
/* Formats "float32[1,3,224,224]" into buf. */
const char *dl_tensor_desc(const dl_tensor *t, char *buf, size_t n);
const char *dl_dims_str(int rank, const int64_t *dims, char *buf, size_t n);

/* ---- dtype helpers for reference kernels ----
 * Readable, dtype-generic element access. Floating types go through double, integer types
 * through int64 (uint64 values above INT64_MAX wrap; reference kernels for those use u64 paths). */
/* ONNX TensorProto.DataType code -> dtype (UNDEFINED when dlcc has no such dtype), and its name. */
dl_dtype dl_dtype_from_onnx(int64_t code);
int64_t dl_dtype_to_onnx(dl_dtype t); /* the TensorProto data type code; 0 if none */
const char *dl_onnx_type_name(int64_t code);
bool dl_dtype_is_float(dl_dtype t);
bool dl_dtype_is_int(dl_dtype t); /* signed or unsigned integer, not bool */
bool dl_dtype_is_signed(dl_dtype t);
double dl_get_f64(const dl_tensor *t, int64_t i);
void dl_set_f64(dl_tensor *t, int64_t i, double v);
int64_t dl_get_i64(const dl_tensor *t, int64_t i);
void dl_set_i64(dl_tensor *t, int64_t i, int64_t v);
/* Converts v to the dtype's value domain the way a cast does (saturation is not applied:
 * float→int truncates toward zero like C, out-of-range is implementation-defined in ONNX). */
float dl_f16_to_f32(uint16_t h);
uint16_t dl_f32_to_f16(float f);
float dl_bf16_to_f32(uint16_t h);
uint16_t dl_f32_to_bf16(float f);

/* ---- index helpers for n-d loops ---- */
/* Advances a row-major multi-index; returns false after the last element. */
bool dl_index_next(int rank, const int64_t *dims, int64_t *idx);
/* Row-major strides (in elements) of dims. */
void dl_strides(int rank, const int64_t *dims, int64_t *strides);
/* Strides of t viewed with out_rank dims under numpy broadcasting: 0 where t's dim is 1 or
 * missing. Caller has checked that t broadcasts to out_dims. */
void dl_broadcast_strides(const dl_tensor *t, int out_rank, const int64_t *out_dims,
                          int64_t *strides);

/* ---- misc ---- */
uint64_t dl_hash_bytes(const void *p, size_t n, uint64_t seed);
/* Reads a whole file into a dl_malloc'd buffer; caps at max_bytes. */
dl_status dl_read_file(dl_ctx *ctx, const char *path, size_t max_bytes, void **data, size_t *size);
void dl_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
