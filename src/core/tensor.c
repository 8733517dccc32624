/* tensor.c — dense n-d arrays: creation with checked sizes, wrapping, cloning, describing. */
#include "core-impl.h"

dl_status dl_shape_numel(dl_ctx *ctx, dl_dtype dtype, int rank, const int64_t *dims, int64_t *numel,
                         size_t *nbytes) {
    if ((unsigned)dtype >= DL_DTYPE_COUNT || dtype == DL_DTYPE_UNDEFINED)
        return dl_fail(ctx, DL_ERR_TYPE, "invalid dtype %d", (int)dtype);
    if (rank < 0 || rank > DL_MAX_RANK)
        return dl_fail(ctx, DL_ERR_UNSUPPORTED, "rank %d is outside 0..%d", rank, DL_MAX_RANK);
    uint64_t n = 1;
    for (int i = 0; i < rank; i++) {
        if (dims[i] < 0) return dl_fail(ctx, DL_ERR_SHAPE, "negative dimension %lld", (long long)dims[i]);
        if (dims[i] != 0 && n > (uint64_t)INT64_MAX / (uint64_t)dims[i])
            return dl_fail(ctx, DL_ERR_LIMIT, "tensor element count overflows");
        n *= (uint64_t)dims[i];
    }
    size_t bytes;
    DL_TRY(dl_mul_size(ctx, (size_t)n, dl_dtype_size(dtype), &bytes, "tensor"));
    *numel = (int64_t)n;
    *nbytes = bytes;
    return DL_OK;
}

dl_status dl_tensor_empty(dl_ctx *ctx, dl_dtype dtype, int rank, const int64_t *dims,
                          dl_tensor **out) {
    *out = NULL;
    int64_t numel;
    size_t nbytes;
    DL_TRY(dl_shape_numel(ctx, dtype, rank, dims, &numel, &nbytes));
    dl_tensor *t = dl_calloc(1, sizeof *t);
    if (!t) return dl_fail(ctx, DL_ERR_NOMEM, "out of memory for a tensor header");
    t->dtype = dtype;
    t->rank = rank;
    for (int i = 0; i < rank; i++) t->dims[i] = dims[i];
    t->numel = numel;
    t->nbytes = nbytes;
    *out = t;
    return DL_OK;
}

dl_status dl_tensor_alloc_data(dl_ctx *ctx, dl_tensor *t) {
    void *p;
    DL_TRY(dl_alloc_checked(ctx, t->nbytes, &p, "tensor data"));
    if (t->owns_data) dl_free(t->data);
    t->data = p;
    t->owns_data = true;
    return DL_OK;
}

dl_status dl_tensor_new(dl_ctx *ctx, dl_dtype dtype, int rank, const int64_t *dims, dl_tensor **out) {
    DL_TRY(dl_tensor_empty(ctx, dtype, rank, dims, out));
    dl_status s = dl_tensor_alloc_data(ctx, *out);
    if (s != DL_OK) {
        dl_tensor_free(*out);
        *out = NULL;
    }
    return s;
}

dl_status dl_tensor_wrap(dl_ctx *ctx, dl_dtype dtype, int rank, const int64_t *dims, void *data,
                         dl_tensor **out) {
    DL_TRY(dl_tensor_empty(ctx, dtype, rank, dims, out));
    (*out)->data = data;
    (*out)->owns_data = false;
    return DL_OK;
}

dl_status dl_tensor_adopt(dl_ctx *ctx, dl_dtype dtype, int rank, const int64_t *dims, void *data,
                          dl_tensor **out) {
    dl_status s = dl_tensor_wrap(ctx, dtype, rank, dims, data, out);
    if (s != DL_OK) {
        dl_free(data);
        return s;
    }
    (*out)->owns_data = true;
    return DL_OK;
}

dl_status dl_tensor_clone(dl_ctx *ctx, const dl_tensor *t, dl_tensor **out) {
    DL_TRY(dl_tensor_new(ctx, t->dtype, t->rank, t->dims, out));
    if (t->nbytes) memcpy((*out)->data, t->data, t->nbytes);
    return DL_OK;
}

dl_tensor *dl_tensor_scalar_f32(dl_ctx *ctx, float v) {
    dl_tensor *t;
    if (dl_tensor_new(ctx, DL_F32, 0, NULL, &t) != DL_OK) return NULL;
    *(float *)t->data = v;
    return t;
}

void dl_tensor_free(dl_tensor *t) {
    if (!t) return;
    if (t->owns_data) dl_free(t->data);
    dl_free(t);
}

dl_dtype dl_tensor_dtype(const dl_tensor *t) { return t->dtype; }
int dl_tensor_rank(const dl_tensor *t) { return t->rank; }
const int64_t *dl_tensor_dims(const dl_tensor *t) { return t->dims; }
int64_t dl_tensor_numel(const dl_tensor *t) { return t->numel; }
void *dl_tensor_data(dl_tensor *t) { return t->data; }

const char *dl_dims_str(int rank, const int64_t *dims, char *buf, size_t n) {
    size_t used = 0;
    if (n == 0) return buf;
    buf[0] = 0;
    used += (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < rank && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, i ? ",%lld" : "%lld", (long long)dims[i]);
    if (used < n) snprintf(buf + used, n - used, "]");
    return buf;
}

const char *dl_tensor_desc(const dl_tensor *t, char *buf, size_t n) {
    char dims[256];
    snprintf(buf, n, "%s%s", dl_dtype_name(t->dtype), dl_dims_str(t->rank, t->dims, dims, sizeof dims));
    return buf;
}
