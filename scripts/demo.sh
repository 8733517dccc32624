#!/usr/bin/env bash
# The main job on the bundled default model: show its graph, run it on the reference
# interpreter with a fixed-seed random input, and write the output as .npy.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
"$BUILD/dlcc" show models/default.onnx --dot "$BUILD/default.dot"
"$BUILD/dlcc" run models/default.onnx --output-dir "$BUILD/demo-out"
