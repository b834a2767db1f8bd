#!/usr/bin/env bash
# Packs what the device check needs onto a GPU machine that has nvcc, CMake, ninja and PyTorch but
# none of our Debian packages and no network: the binaries built here (sm_90), the CUDA module, the
# Debian shared libraries they load (not glibc or libstdc++, which the device has; not cuBLASLt or
# NCCL, hundreds of MB each, which gpu_check.sh finds in the device's toolkit or PyTorch), and the
# Llama-3 tokenizer (for dummy models). Run after a build; carry the folder it writes ($GPU_BUNDLE, default
# gpu-bundle/; gpu_check.sh reads the same variable). It fails when the bundle and the working tree
# together are over the 64 MiB that travel to the device.
#
#   scripts/gpu_bundle.sh [BUILD_DIR]        (default: build)
# then the device tool `run` with carry ["gpu-bundle"], timeout_s 400 and the command
# scripts/gpu_check.sh "$OUT" (its header says what it runs and returns).
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-$REPO/build}"
BUNDLE="${GPU_BUNDLE:-$REPO/gpu-bundle}"

rm -rf "$BUNDLE"
mkdir -p "$BUNDLE/lib" "$BUNDLE/assets/tokenizers"
binaries=("$BUILD/server/tpserve" "$BUILD/tests/cuda_ops_test" "$BUILD/tests/cuda_engine_test"
          "$BUILD/tests/cuda_engine_limits_test"
          "$BUILD/benchmarks/bench_cuda_gemm" "$BUILD/benchmarks/bench_cuda_kernels" "$BUILD/lib/libtpserve_cuda.so")
for binary in "${binaries[@]}"; do
  [[ -f "$binary" ]] || { echo "gpu_bundle: $binary is missing (build with nvcc present first)" >&2; exit 1; }
  cp "$binary" "$BUNDLE/"
done
# Shared libraries that are ours to bring; the C and C++ runtimes are the device's own.
ldd "${binaries[@]}" | awk '/=> \// {print $3}' | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libdl.so*|libpthread.so*|librt.so*|libgcc_s.so*|libstdc++.so*) ;;
    libcublas*|libnccl*|libcudart*|libcuda.so*) ;;
    *) cp -L "$lib" "$BUNDLE/lib/" ;;
  esac
done
cp -r "$REPO/.assets/tokenizers/llama3" "$BUNDLE/assets/tokenizers/"
bundle_kib=$(du -sk "$BUNDLE" | cut -f1)
# What else travels: tracked files and untracked ones git does not ignore.
tree_kib=$( (cd "$REPO" && git ls-files -z --cached --others --exclude-standard 2>/dev/null |
  du -sck --files0-from=- 2>/dev/null | tail -1 | cut -f1) || echo 0)
echo "gpu_bundle: $((bundle_kib / 1024)) MiB in $BUNDLE ($(find "$BUNDLE/lib" -type f | wc -l) libraries)," \
  "$((tree_kib / 1024)) MiB of working tree beside it (at most 64 MiB travel)"
if ((bundle_kib + ${tree_kib:-0} > 64 * 1024)); then
  echo "gpu_bundle: the bundle and the working tree are over 64 MiB: the device will refuse the call" >&2
  exit 1
fi
