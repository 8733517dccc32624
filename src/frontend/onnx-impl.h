/* onnx-impl.h — private interface of the ONNX frontend (protobuf-c over onnx.proto). */
#ifndef DL_ONNX_IMPL_H
#define DL_ONNX_IMPL_H

#include "../ir/ir-impl.h"
#include "onnx.pb-c.h"

/* protobuf-c allocations routed through dl_malloc, so raw tensor bytes can be adopted in place. */
extern ProtobufCAllocator dl_onnx_allocator;

/* Converts a TensorProto. raw_data is adopted (the proto's pointer is cleared), typed fields are
 * copied. base_dir resolves external data (NULL forbids external data). */
dl_status dl_onnx_tensor(dl_ctx *ctx, Onnx__TensorProto *tp, const char *base_dir, dl_tensor **out);

/* Reads a serialized TensorProto file (ONNX test data input_N.pb / output_N.pb). */
dl_status dl_onnx_load_tensor_file(dl_ctx *ctx, const char *path, dl_tensor **out, char **name);

/* False when messages nest deeper than protobuf-c can safely unpack (stack depth). */
bool dl_pb_nesting_ok(const ProtobufCMessageDescriptor *d, const void *data, size_t size);

/* Maps a whole file read-only; the caller unmaps with dl_unmap_file. */
dl_status dl_map_file(dl_ctx *ctx, const char *path, size_t max_bytes, void **data, size_t *size);
void dl_unmap_file(void *data, size_t size);

/* ---- onnx-writer.c ---- */
/* Writes g as an ONNX ModelProto: opset imports per domain, typed inputs and outputs with
 * symbolic dims by name, the constants live nodes read as raw-data initializers, the live nodes
 * in order. Atomic: a temporary file next to path, fsync, rename. Subgraph attributes are
 * DL_ERR_UNSUPPORTED. */
dl_status dl_save_onnx(dl_ctx *ctx, dl_graph *g, const char *path);

#endif
