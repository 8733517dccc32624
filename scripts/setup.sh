#!/usr/bin/env bash
# Installs what dlcc needs to build and test, from Debian's packages. Idempotent: packages
# already present are not reinstalled. Needs root (or sudo) only when something is missing.
set -euo pipefail

build_pkgs=(gcc make protobuf-c-compiler libprotobuf-c-dev libonnx-dev libxxhash-dev)
test_pkgs=(libonnx-testdata python3 python3-numpy python3-onnx python3-torch python3-torchvision python3-sklearn)
want=("${build_pkgs[@]}")
[ "${DLCC_SETUP_BUILD_ONLY:-0}" = 1 ] || want+=("${test_pkgs[@]}")

missing=()
for p in "${want[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "setup: all dependencies present"
    exit 0
fi
echo "setup: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" = 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
