/* onnx-tensor.c — TensorProto to dl_tensor: typed fields, raw data (adopted without a copy) and
 * external data files, each length checked against the declared shape. */
#include "onnx-impl.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static void *pb_alloc(void *data, size_t size) {
    DL_UNUSED(data);
    return dl_malloc(size);
}
static void pb_free(void *data, void *p) {
    DL_UNUSED(data);
    dl_free(p);
}
ProtobufCAllocator dl_onnx_allocator = {pb_alloc, pb_free, NULL};

dl_status dl_map_file(dl_ctx *ctx, const char *path, size_t max_bytes, void **data, size_t *size) {
    *data = NULL;
    *size = 0;
    int fd = open(path, O_RDONLY | O_NONBLOCK); /* a FIFO must not block the open */
    if (fd < 0) return dl_fail(ctx, DL_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return dl_fail(ctx, DL_ERR_IO, "%s: not a regular file", path);
    }
    if ((uint64_t)st.st_size > max_bytes) {
        close(fd);
        return dl_fail(ctx, DL_ERR_LIMIT, "%s: %lld bytes exceeds the cap of %zu", path,
                       (long long)st.st_size, max_bytes);
    }
    if (st.st_size == 0) {
        close(fd);
        return DL_OK;
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
        return dl_fail(ctx, DL_ERR_IO, "%s: cannot map: %s", path, strerror(errno));
    *data = p;
    *size = (size_t)st.st_size;
    return DL_OK;
}

void dl_unmap_file(void *data, size_t size) {
    if (data) munmap(data, size);
}

/* External data: the location must stay inside the model's folder (no absolute paths, no "..")
 * because a model file must not be able to read arbitrary files. */
static dl_status read_external(dl_ctx *ctx, Onnx__TensorProto *tp, const char *base_dir,
                               dl_tensor *t) {
    const char *location = NULL;
    int64_t offset = 0, length = -1;
    for (size_t i = 0; i < tp->n_external_data; i++) {
        const Onnx__StringStringEntryProto *e = tp->external_data[i];
        if (!e->key || !e->value) continue;
        char *end;
        if (strcmp(e->key, "location") == 0)
            location = e->value;
        else if (strcmp(e->key, "offset") == 0)
            offset = strtoll(e->value, &end, 10);
        else if (strcmp(e->key, "length") == 0)
            length = strtoll(e->value, &end, 10);
    }
    if (!base_dir) return dl_fail(ctx, DL_ERR_UNSUPPORTED, "external data is not allowed here");
    if (!location || !location[0])
        return dl_fail(ctx, DL_ERR_PARSE, "external tensor has no 'location'");
    if (location[0] == '/' || strstr(location, ".."))
        return dl_fail(
            ctx, DL_ERR_INVALID,
            "external data location '%s' must be a relative path inside the model folder",
            location);
    if (offset < 0) return dl_fail(ctx, DL_ERR_PARSE, "negative external data offset");
    if (length >= 0 && (uint64_t)length != t->nbytes)
        return dl_fail(ctx, DL_ERR_PARSE, "external data length %lld does not match %zu bytes",
                       (long long)length, t->nbytes);
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/%s", base_dir, location) >= (int)sizeof path)
        return dl_fail(ctx, DL_ERR_INVALID, "external data path is too long");
    FILE *f = fopen(path, "rb");
    if (!f)
        return dl_fail(ctx, DL_ERR_IO, "%s: cannot open external data: %s", path, strerror(errno));
    struct stat st;
    dl_status s = DL_OK;
    if (fstat(fileno(f), &st) != 0 || (uint64_t)st.st_size < (uint64_t)offset + t->nbytes) {
        s = dl_fail(ctx, DL_ERR_PARSE,
                    "%s: external data file is shorter than offset %lld + %zu bytes", path,
                    (long long)offset, t->nbytes);
    } else if ((s = dl_tensor_alloc_data(ctx, t)) == DL_OK) {
        if (fseeko(f, (off_t)offset, SEEK_SET) != 0 || fread(t->data, 1, t->nbytes, f) != t->nbytes)
            s = dl_fail(ctx, DL_ERR_IO, "%s: short read of external data", path);
    }
    fclose(f);
    return s;
}

static dl_status copy_typed(dl_ctx *ctx, Onnx__TensorProto *tp, dl_tensor *t) {
    size_t have;
    switch (t->dtype) {
    case DL_F32:
        have = tp->n_float_data;
        break;
    case DL_F64:
        have = tp->n_double_data;
        break;
    case DL_I64:
        have = tp->n_int64_data;
        break;
    case DL_U32:
    case DL_U64:
        have = tp->n_uint64_data;
        break;
    default:
        have = tp->n_int32_data;
        break;
    }
    if (have != (size_t)t->numel)
        return dl_fail(ctx, DL_ERR_PARSE, "holds %zu values but its shape needs %lld", have,
                       (long long)t->numel);
    DL_TRY(dl_tensor_alloc_data(ctx, t));
    for (int64_t i = 0; i < t->numel; i++) {
        switch (t->dtype) {
        case DL_F32:
            ((float *)t->data)[i] = tp->float_data[i];
            break;
        case DL_F64:
            ((double *)t->data)[i] = tp->double_data[i];
            break;
        case DL_I64:
            ((int64_t *)t->data)[i] = tp->int64_data[i];
            break;
        case DL_U32:
            ((uint32_t *)t->data)[i] = (uint32_t)tp->uint64_data[i];
            break;
        case DL_U64:
            ((uint64_t *)t->data)[i] = tp->uint64_data[i];
            break;
        case DL_F16:
        case DL_BF16:
        case DL_U16:
            ((uint16_t *)t->data)[i] = (uint16_t)tp->int32_data[i];
            break;
        default:
            dl_set_i64(t, i, tp->int32_data[i]);
            break;
        }
    }
    return DL_OK;
}

dl_status dl_onnx_tensor(dl_ctx *ctx, Onnx__TensorProto *tp, const char *base_dir,
                         dl_tensor **out) {
    *out = NULL;
    const char *nm = tp->name ? tp->name : "";
    dl_dtype dtype = dl_dtype_from_onnx(tp->data_type);
    if (!tp->has_data_type || tp->data_type == 0)
        return dl_fail(ctx, DL_ERR_PARSE, "tensor '%s' has no data type (empty or corrupt)", nm);
    if (dtype == DL_DTYPE_UNDEFINED)
        return dl_fail(ctx, DL_ERR_UNSUPPORTED, "tensor '%s': dtype %s (%d) is not supported", nm,
                       dl_onnx_type_name(tp->data_type), (int)tp->data_type);
    if (tp->n_dims > DL_MAX_RANK)
        return dl_fail(ctx, DL_ERR_UNSUPPORTED, "tensor '%s': rank %zu exceeds %d", nm, tp->n_dims,
                       DL_MAX_RANK);
    if (tp->segment) return dl_fail(ctx, DL_ERR_UNSUPPORTED, "tensor '%s': segmented tensors", nm);
    dl_tensor *t;
    dl_status s = dl_tensor_empty(ctx, dtype, (int)tp->n_dims, tp->dims, &t);
    if (s != DL_OK) {
        dl_ctx_prefix(ctx, "tensor '%s'", nm);
        return s;
    }
    if (tp->has_data_location && tp->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL) {
        s = read_external(ctx, tp, base_dir, t);
    } else if (tp->has_raw_data) {
        if (tp->raw_data.len != t->nbytes) {
            char d[256];
            s = dl_fail(ctx, DL_ERR_PARSE, "raw data is %zu bytes but %s needs %zu",
                        tp->raw_data.len, dl_tensor_desc(t, d, sizeof d), t->nbytes);
        } else if (t->nbytes && tp->raw_data.data) {
            t->data = tp->raw_data.data; /* adopt: allocated by dl_onnx_allocator */
            t->owns_data = true;
            tp->raw_data.data = NULL;
            tp->raw_data.len = 0;
        } else {
            s = dl_tensor_alloc_data(ctx, t);
        }
    } else {
        s = copy_typed(ctx, tp, t);
    }
    if (s != DL_OK) {
        dl_ctx_prefix(ctx, "tensor '%s'", nm);
        dl_tensor_free(t);
        return s;
    }
    *out = t;
    return DL_OK;
}

dl_status dl_onnx_load_tensor_file(dl_ctx *ctx, const char *path, dl_tensor **out, char **name) {
    *out = NULL;
    if (name) *name = NULL;
    void *data;
    size_t size;
    DL_TRY(dl_map_file(ctx, path, dl_alloc_limit(), &data, &size));
    if (!dl_pb_nesting_ok(&onnx__tensor_proto__descriptor, data, size)) {
        dl_unmap_file(data, size);
        return dl_fail(ctx, DL_ERR_LIMIT, "%s: messages are nested too deeply", path);
    }
    Onnx__TensorProto *tp = onnx__tensor_proto__unpack(&dl_onnx_allocator, size, data);
    dl_unmap_file(data, size);
    if (!tp) return dl_fail(ctx, DL_ERR_PARSE, "%s: not a valid serialized TensorProto", path);
    dl_status s = dl_onnx_tensor(ctx, tp, NULL, out);
    if (s == DL_OK && name && tp->name) *name = dl_strdup(tp->name);
    onnx__tensor_proto__free_unpacked(tp, &dl_onnx_allocator);
    if (s != DL_OK) dl_ctx_prefix(ctx, "%s", path);
    return s;
}
