#!/usr/bin/env bash
# The main job on the bundled default model: show its graph, compile it (report: passes,
# kernels, memory plan, compile time), run it compiled with a fixed-seed random input, check it
# against the reference interpreter, and write the output as .npy.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
"$BUILD/dlcc" show models/default.onnx --dot "$BUILD/default.dot"
"$BUILD/dlcc" compile models/default.onnx --report
"$BUILD/dlcc" run models/default.onnx --output-dir "$BUILD/demo-out"
"$BUILD/dlcc" run models/default.onnx --check
