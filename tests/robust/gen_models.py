#!/usr/bin/python3
"""gen_models.py OUTDIR SEED — writes the inputs of tests/robust/run.sh into OUTDIR:

  bad/*.onnx, bad/*.npy   hand-made malformed models and input files (one per check in run.sh)
  mut/*.onnx              truncated and byte-flipped copies of real models
  mut/manifest.tsv        one line per mutated file: PATH <TAB> KIND <TAB> EXPECT
                          EXPECT is 'err' (must be rejected) or 'any' (exit 0 allowed)

Everything is deterministic for a given SEED. Nothing here is committed as a binary file.
"""
import os
import random
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OUT = sys.argv[1]
SEED = int(sys.argv[2]) if len(sys.argv) > 2 else 1234
N_CUTS = int(os.environ.get("ROBUST_CUTS", "20"))
N_FLIPS = int(os.environ.get("ROBUST_FLIPS", "200"))
NODE_DIR = "/usr/share/libonnx-testdata/data/node"
REAL_CASES = [
    "test_conv_with_strides_padding",
    "test_gemm_default_matrix_bias",
    "test_lstm_with_initial_bias",
    "test_resize_upsample_scales_linear",
    "test_reshape_extended_dims",
    "test_gather_0",
    "test_batchnorm_example",
    "test_layer_normalization_4d_axis0",
    "test_maxpool_2d_pads",
    "test_einsum_batch_matmul",
]

BAD = os.path.join(OUT, "bad")
MUT = os.path.join(OUT, "mut")
os.makedirs(BAD, exist_ok=True)
os.makedirs(MUT, exist_ok=True)

F = TensorProto.FLOAT
I64 = TensorProto.INT64


def vi(name, dtype, shape):
    return helper.make_tensor_value_info(name, dtype, shape)


def model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(list(nodes), "g", list(inputs), list(outputs), list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def save(m, name, sub=BAD):
    path = os.path.join(sub, name)
    with open(path, "wb") as f:
        f.write(m.SerializeToString())
    return path


def i64(name, vals):
    return numpy_helper.from_array(np.array(vals, dtype=np.int64), name)


X23 = vi("X", F, [2, 3])

# ---- graph-level errors ----
save(model([helper.make_node("FooBarNoSuchOp", ["X"], ["Y"])], [X23], [vi("Y", F, None)]),
     "unknown_op.onnx")
save(model([helper.make_node("Relu", ["X"], ["Y"], domain="com.example.nosuchdomain")], [X23],
           [vi("Y", F, None)]), "unknown_domain.onnx")
save(model([helper.make_node("Relu", ["nonexistent_tensor"], ["Y"])], [X23], [vi("Y", F, [2, 3])]),
     "undefined_input.onnx")
save(model([helper.make_node("Relu", ["X"], ["Y"])], [X23], [vi("nonexistent_output", F, [2, 3])]),
     "undefined_output.onnx")
save(model([helper.make_node("Add", ["X", "B"], ["A"]), helper.make_node("Relu", ["A"], ["B"])],
           [X23], [vi("A", F, [2, 3])]), "cycle.onnx")
save(model([helper.make_node("Relu", ["A"], ["A"])], [X23], [vi("A", F, [2, 3])]), "self_loop.onnx")
save(model([helper.make_node("Relu", ["X"], ["Y"]), helper.make_node("Neg", ["X"], ["Y"])], [X23],
           [vi("Y", F, [2, 3])]), "duplicate_output.onnx")
save(model([helper.make_node("Add", ["X", "Z"], ["Y"])], [X23, vi("Z", F, [4, 5])],
           [vi("Y", F, None)]), "add_shape_mismatch.onnx")
save(model([helper.make_node("MatMul", ["X", "Z"], ["Y"])], [X23, vi("Z", F, [4, 5])],
           [vi("Y", F, None)]), "matmul_mismatch.onnx")
save(model([helper.make_node("Add", ["X", "Z"], ["Y"])], [X23, vi("Z", TensorProto.INT32, [2, 3])],
           [vi("Y", F, None)]), "add_dtype_mismatch.onnx")
save(model([helper.make_node("Reshape", ["X", "S"], ["Y"])], [X23], [vi("Y", F, None)],
           [i64("S", [7])]), "reshape_impossible.onnx")
save(model([helper.make_node("Reshape", ["X", "S"], ["Y"])], [X23], [vi("Y", F, None)],
           [i64("S", [-1, -1])]), "reshape_two_minus_one.onnx")
# Gather: data is a graph input (so the gather happens at run time), indices a constant.
save(model([helper.make_node("Gather", ["X", "I"], ["Y"], axis=0)], [X23], [vi("Y", F, None)],
           [i64("I", [0, 5])]), "gather_oob.onnx")
save(model([helper.make_node("Gather", ["X", "I"], ["Y"], axis=0)], [X23], [vi("Y", F, None)],
           [i64("I", [-3])]), "gather_oob_negative.onnx")
save(model([helper.make_node("Gather", ["X", "I"], ["Y"], axis=7)], [X23], [vi("Y", F, None)],
           [i64("I", [0])]), "gather_bad_axis.onnx")
save(model([helper.make_node("ConstantOfShape", ["S"], ["Y"])], [], [vi("Y", F, None)],
           [i64("S", [1 << 40])]), "constantofshape_huge.onnx")
save(model([helper.make_node("ConstantOfShape", ["S"], ["Y"])], [], [vi("Y", F, None)],
           [i64("S", [1 << 31, 1 << 31, 1 << 31])]), "constantofshape_overflow.onnx")
save(model([helper.make_node("ConstantOfShape", ["S"], ["Y"])], [], [vi("Y", F, None)],
           [i64("S", [-5])]), "constantofshape_negative.onnx")
save(model([helper.make_node("Expand", ["X", "S"], ["Y"])], [X23], [vi("Y", F, None)],
           [i64("S", [1 << 20, 1 << 20, 2, 3])]), "expand_huge.onnx")
save(model([helper.make_node("Tile", ["X", "R"], ["Y"])], [X23], [vi("Y", F, None)],
           [i64("R", [1 << 30, 1 << 30])]), "tile_huge.onnx")
save(model([helper.make_node("Range", ["A", "B", "C"], ["Y"])], [], [vi("Y", F, None)],
           [numpy_helper.from_array(np.array(0, np.float32), "A"),
            numpy_helper.from_array(np.array(1e30, np.float32), "B"),
            numpy_helper.from_array(np.array(1, np.float32), "C")]), "range_huge.onnx")
save(model([helper.make_node("Range", ["A", "B", "C"], ["Y"])], [], [vi("Y", I64, None)],
           [i64("A", 0), i64("B", 10), i64("C", 0)]), "range_zero_delta.onnx")

# ---- attribute errors ----
save(model([helper.make_node("Transpose", ["X"], ["Y"], perm=[0, 0])], [X23], [vi("Y", F, None)]),
     "transpose_bad_perm.onnx")
save(model([helper.make_node("Softmax", ["X"], ["Y"], axis=5)], [X23], [vi("Y", F, None)]),
     "softmax_bad_axis.onnx")
save(model([helper.make_node("Concat", ["X", "X"], ["Y"], axis=-3)], [X23], [vi("Y", F, None)]),
     "concat_bad_axis.onnx")
save(model([helper.make_node("Concat", ["X", "Z"], ["Y"], axis=0)], [X23, vi("Z", F, [2, 4])],
           [vi("Y", F, None)]), "concat_shape_mismatch.onnx")
save(model([helper.make_node("Split", ["X", "S"], ["A", "B"], axis=1)], [X23],
           [vi("A", F, None), vi("B", F, None)], [i64("S", [2, 2])]), "split_bad_sizes.onnx")
save(model([helper.make_node("Slice", ["X", "st", "en", "ax", "sp"], ["Y"])], [X23],
           [vi("Y", F, None)], [i64("st", [0]), i64("en", [2]), i64("ax", [1]), i64("sp", [0])]),
     "slice_zero_step.onnx")
save(model([helper.make_node("Conv", ["X4", "W"], ["Y"])], [vi("X4", F, [1, 1, 5, 5])],
           [vi("Y", F, None)],
           [numpy_helper.from_array(np.ones((1, 2, 3, 3), np.float32), "W")]),
     "conv_channel_mismatch.onnx")
save(model([helper.make_node("Conv", ["X4", "W"], ["Y"])], [vi("X4", F, [1, 1, 2, 2])],
           [vi("Y", F, None)],
           [numpy_helper.from_array(np.ones((1, 1, 5, 5), np.float32), "W")]),
     "conv_kernel_larger_than_input.onnx")
save(model([helper.make_node("Conv", ["X4", "W"], ["Y"], strides=[0, 0])],
           [vi("X4", F, [1, 1, 5, 5])], [vi("Y", F, None)],
           [numpy_helper.from_array(np.ones((1, 1, 3, 3), np.float32), "W")]),
     "conv_zero_stride.onnx")
save(model([helper.make_node("MaxPool", ["X4"], ["Y"], kernel_shape=[3, 3], pads=[-4, -4, -4, -4])],
           [vi("X4", F, [1, 1, 5, 5])], [vi("Y", F, None)]), "maxpool_negative_pads.onnx")
save(model([helper.make_node("Pad", ["X", "P"], ["Y"])], [X23], [vi("Y", F, None)],
           [i64("P", [0, -5, 0, 0])]), "pad_negative_too_big.onnx")
save(model([helper.make_node("Flatten", ["X"], ["Y"], axis="one")], [X23], [vi("Y", F, None)]),
     "attr_wrong_type.onnx")
save(model([helper.make_node("Relu", ["X"], ["Y"])], [X23], [vi("Y", F, None)], opset=999),
     "opset_999.onnx")

def attr_typed_but_empty(attr_type, name):
    """A Constant node whose 'value' attribute declares attr_type but carries no payload."""
    n = helper.make_node("Constant", [], ["Y"])
    a = n.attribute.add()
    a.name, a.type = "value", attr_type
    save(model([n], [], [vi("Y", F, None)]), name)


attr_typed_but_empty(onnx.AttributeProto.TENSOR, "attr_tensor_without_t.onnx")
attr_typed_but_empty(onnx.AttributeProto.GRAPH, "attr_graph_without_g.onnx")
attr_typed_but_empty(onnx.AttributeProto.SPARSE_TENSOR, "attr_sparse_without_payload.onnx")
attr_typed_but_empty(onnx.AttributeProto.TENSORS, "attr_tensors_empty.onnx")
attr_typed_but_empty(onnx.AttributeProto.FLOATS, "attr_floats_empty.onnx")
n = helper.make_node("Constant", [], ["Y"], value_float=1.5)
b = model([n], [], [vi("Y", F, None)]).SerializeToString()
assert b.count(b"\xa0\x01\x01") == 1  # AttributeProto.type (field 20) = FLOAT
with open(os.path.join(BAD, "attr_type_77.onnx"), "wb") as f:  # no such AttributeType
    f.write(b.replace(b"\xa0\x01\x01", b"\xa0\x01\x4d"))

# ---- tensor errors ----
t = numpy_helper.from_array(np.ones((2, 3), np.float32), "B")
t.raw_data = t.raw_data[:8]
save(model([helper.make_node("Add", ["X", "B"], ["Y"])], [X23], [vi("Y", F, None)], [t]),
     "raw_data_short.onnx")
t = numpy_helper.from_array(np.ones((2, 3), np.float32), "B")
t.raw_data = t.raw_data + b"\0" * 4
save(model([helper.make_node("Add", ["X", "B"], ["Y"])], [X23], [vi("Y", F, None)], [t]),
     "raw_data_long.onnx")
t = TensorProto(name="B", data_type=F, dims=[2, 3])
t.float_data.extend([1.0, 2.0])  # float_data with 2 of 6 values
save(model([helper.make_node("Add", ["X", "B"], ["Y"])], [X23], [vi("Y", F, None)], [t]),
     "float_data_short.onnx")
t = TensorProto(name="B", data_type=F, dims=[-2, 3])
t.raw_data = b"\0" * 24
save(model([helper.make_node("Add", ["X", "B"], ["Y"])], [X23], [vi("Y", F, None)], [t]),
     "negative_dims.onnx")
t = TensorProto(name="B", data_type=F, dims=[1 << 40, 1 << 30])
save(model([helper.make_node("Add", ["X", "B"], ["Y"])], [X23], [vi("Y", F, None)], [t]),
     "huge_dims_no_data.onnx")
t = TensorProto(name="B", data_type=F, dims=[1, 1, 1, 1, 1, 1, 1, 1, 1, 1])
t.raw_data = b"\0" * 4
save(model([helper.make_node("Add", ["X", "B"], ["Y"])], [X23], [vi("Y", F, None)], [t]),
     "rank_10_initializer.onnx")
t = TensorProto(name="B", data_type=12345, dims=[2])
t.raw_data = b"\0" * 8
save(model([helper.make_node("Add", ["X", "B"], ["Y"])], [X23], [vi("Y", F, None)], [t]),
     "bad_dtype_code.onnx")
save(model([helper.make_node("Relu", ["X"], ["Y"])], [vi("X", F, [1 << 40, 1 << 20])],
           [vi("Y", F, None)]), "input_huge_dims.onnx")
save(model([helper.make_node("Relu", ["X"], ["Y"])], [vi("X", F, [2, -7])], [vi("Y", F, None)]),
     "input_negative_dim.onnx")
save(model([helper.make_node("Relu", ["X"], ["Y"])], [vi("X", F, [1] * 12)], [vi("Y", F, None)]),
     "input_rank_12.onnx")


def external(location, offset=0, length=None):
    t = TensorProto(name="B", data_type=F, dims=[2, 3])
    t.data_location = TensorProto.EXTERNAL
    for k, v in [("location", location), ("offset", str(offset))] + \
            ([("length", str(length))] if length is not None else []):
        e = t.external_data.add()
        e.key, e.value = k, v
    return model([helper.make_node("Add", ["X", "B"], ["Y"])], [X23], [vi("Y", F, None)], [t])


ext = os.path.join(BAD, "ext")
os.makedirs(ext, exist_ok=True)
save(external("../../etc/passwd"), "ext_dotdot.onnx", ext)
save(external("/etc/passwd"), "ext_absolute.onnx", ext)
save(external("missing_weights.bin"), "ext_missing.onnx", ext)
with open(os.path.join(ext, "short.bin"), "wb") as f:
    f.write(b"\0" * 10)
save(external("short.bin"), "ext_short.onnx", ext)
save(external("short.bin", offset=1 << 62), "ext_huge_offset.onnx", ext)
os.makedirs(os.path.join(ext, "adir"), exist_ok=True)
save(external("adir"), "ext_directory.onnx", ext)

# ---- inputs for `dlcc run --input` on a model with X: float32[2,3] ----
save(model([helper.make_node("Relu", ["X"], ["Y"])], [X23], [vi("Y", F, [2, 3])]), "relu23.onnx")
np.save(os.path.join(BAD, "ok.npy"), np.ones((2, 3), np.float32))
np.save(os.path.join(BAD, "wrong_dtype.npy"), np.ones((2, 3), np.int32))
np.save(os.path.join(BAD, "wrong_rank.npy"), np.ones((2, 3, 1), np.float32))
np.save(os.path.join(BAD, "wrong_dim.npy"), np.ones((2, 4), np.float32))
np.save(os.path.join(BAD, "scalar.npy"), np.float32(1))
np.save(os.path.join(BAD, "big_endian.npy"), np.ones((2, 3), ">f4"))
np.save(os.path.join(BAD, "fortran.npy"), np.asfortranarray(np.ones((2, 3), np.float32)))
np.save(os.path.join(BAD, "object.npy"), np.array([{}, 1], dtype=object), allow_pickle=True)
with open(os.path.join(BAD, "ok.npy"), "rb") as f:
    good = f.read()
with open(os.path.join(BAD, "truncated.npy"), "wb") as f:
    f.write(good[:-5])
with open(os.path.join(BAD, "truncated_header.npy"), "wb") as f:
    f.write(good[:20])
with open(os.path.join(BAD, "header_len_huge.npy"), "wb") as f:
    f.write(good[:8] + b"\xff\xff" + good[10:])
with open(os.path.join(BAD, "header_garbage.npy"), "wb") as f:
    hdr = b"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999999, -3), }"
    hdr += b" " * (63 - (10 + len(hdr)) % 64) + b"\n"
    f.write(b"\x93NUMPY\x01\x00" + len(hdr).to_bytes(2, "little") + hdr)
with open(os.path.join(BAD, "not_npy.npy"), "wb") as f:
    f.write(b"this is not a numpy file\n")
with open(os.path.join(BAD, "text.onnx"), "wb") as f:
    f.write(b"ir_version: 8\ngraph { node { op_type: \"Relu\" } }\n")
open(os.path.join(BAD, "empty.onnx"), "wb").close()


# ---- mutated copies of real models ----
def mini_cnn():
    """A model with initializers of several kinds (raw_data, float_data, int64_data)."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 1, 3, 3)).astype(np.float32), "W")
    b = helper.make_tensor("Bc", F, [4], [0.1, 0.2, 0.3, 0.4])  # float_data
    fw = numpy_helper.from_array(rng.standard_normal((16, 3)).astype(np.float32), "FW")
    shape = helper.make_tensor("S", I64, [2], [1, 16])  # int64_data
    nodes = [
        helper.make_node("Conv", ["X", "W", "Bc"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Reshape", ["p", "S"], ["f"]),
        helper.make_node("Gemm", ["f", "FW"], ["g"], alpha=0.5),
        helper.make_node("Softmax", ["g"], ["Y"], axis=-1),
    ]
    return model(nodes, [vi("X", F, [1, 1, 8, 8])], [vi("Y", F, [1, 3])], [w, b, fw, shape], 13)


sources = []
for case in REAL_CASES:
    p = os.path.join(NODE_DIR, case, "model.onnx")
    if os.path.exists(p):
        with open(p, "rb") as f:
            sources.append((case, f.read()))
sources.append(("mini_cnn", mini_cnn().SerializeToString()))
for extra in sys.argv[3:]:  # e.g. models/default.onnx
    if os.path.exists(extra):
        with open(extra, "rb") as f:
            sources.append((os.path.basename(extra).replace(".onnx", ""), f.read()))


def still_valid(data):
    """True when the bytes decode to a model that onnx's checker accepts: then exit 0 is fine."""
    try:
        m = onnx.ModelProto()
        m.ParseFromString(data)
        onnx.checker.check_model(m)
        return len(m.graph.node) > 0
    except Exception:
        return False


rng = random.Random(SEED)
manifest = []
for name, data in sources:
    n = len(data)
    pool = sorted(set([1, 2, n // 2, n - 2, n - 1] + [rng.randrange(1, n) for _ in range(N_CUTS)]))
    cuts = [c for c in pool if 0 < c < n][:N_CUTS]
    for c in cuts:
        p = os.path.join(MUT, f"trunc_{name}_{c}.onnx")
        with open(p, "wb") as f:
            f.write(data[:c])
        manifest.append((p, "truncated", "any" if still_valid(data[:c]) else "err"))
flips_each = max(1, N_FLIPS // len(sources))
for name, data in sources:
    for k in range(flips_each):
        b = bytearray(data)
        nflip = rng.choice([1, 1, 1, 2, 3, 8])
        for _ in range(nflip):
            pos = rng.randrange(len(b))
            if rng.random() < 0.5:
                b[pos] ^= 1 << rng.randrange(8)
            else:
                b[pos] = rng.choice([0x00, 0xff, 0x80, 0x7f, 0x01, rng.randrange(256)])
        p = os.path.join(MUT, f"flip_{name}_{k}.onnx")
        with open(p, "wb") as f:
            f.write(bytes(b))
        manifest.append((p, f"flipped({nflip})", "any"))
with open(os.path.join(MUT, "manifest.tsv"), "w") as f:
    for row in manifest:
        f.write("\t".join(row) + "\n")

# ---- malformed `dlcc onnx-test` case folders (model input X: float32[2,3], output Y = Relu(X)) ----
def write_case(name, model_bytes, inputs=(), outputs=()):
    d = os.path.join(OUT, "cases", name)
    os.makedirs(os.path.join(d, "test_data_set_0"), exist_ok=True)
    with open(os.path.join(d, "model.onnx"), "wb") as f:
        f.write(model_bytes)
    for kind, items in (("input", inputs), ("output", outputs)):
        for i, b in enumerate(items):
            with open(os.path.join(d, "test_data_set_0", f"{kind}_{i}.pb"), "wb") as f:
                f.write(b)


relu = model([helper.make_node("Relu", ["X"], ["Y"])], [X23], [vi("Y", F, [2, 3])]).SerializeToString()
x = np.arange(6, dtype=np.float32).reshape(2, 3) - 3
good_in = numpy_helper.from_array(x, "X").SerializeToString()
good_out = numpy_helper.from_array(np.maximum(x, 0), "Y").SerializeToString()
write_case("ok", relu, [good_in], [good_out])
write_case("truncated_model", relu[: len(relu) // 2], [good_in], [good_out])
write_case("garbage_input_pb", relu, [b"\xff\xfe garbage \x00\x01"], [good_out])
write_case("truncated_input_pb", relu, [good_in[:-7]], [good_out])
write_case("empty_input_pb", relu, [b""], [good_out])
write_case("input_pb_wrong_shape", relu,
           [numpy_helper.from_array(np.ones((3, 2), np.float32), "X").SerializeToString()], [good_out])
write_case("output_pb_wrong_shape", relu, [good_in],
           [numpy_helper.from_array(np.ones((3, 2), np.float32), "Y").SerializeToString()])
write_case("output_pb_wrong_dtype", relu, [good_in],
           [numpy_helper.from_array(np.ones((2, 3), np.int64), "Y").SerializeToString()])
t = TensorProto(name="X", data_type=F, dims=[1 << 40, 1 << 30])
write_case("input_pb_huge_dims", relu, [t.SerializeToString()], [good_out])
write_case("too_many_inputs", relu, [good_in, good_in, good_in], [good_out])
write_case("too_many_outputs", relu, [good_in], [good_out, good_out])
write_case("no_outputs", relu, [good_in], [])
write_case("no_inputs", relu, [], [good_out])
