#!/usr/bin/env bash
# GPU check for the weight transports, for a machine with NVIDIA GPUs (no GPU exists in CI, so these
# tests are registered only here): builds with CUDA and MLPT_GPU_TESTS=1 into build-gpu/, runs the
# NCCL transport test (needs 2 GPUs: NCCL refuses two ranks on one device) and the CPU transport
# tests for reference. Exits non-zero when anything fails, including "fewer than 2 GPUs".
#   scripts/gpu-check.sh            # build + test
#   BUILD_DIR=... JOBS=... scripts/gpu-check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build-gpu}
JOBS=${JOBS:-$(nproc)}
nvidia-smi -L || { echo "gpu-check: nvidia-smi found no GPU" >&2; exit 1; }
MLPT_GPU_TESTS=1 cmake -S . -B "$BUILD_DIR" -G Ninja -DMLPT_CUDA=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$BUILD_DIR" -j "$JOBS" --target test_transport test_transport_gpu bench_transport \
  mlpt_transport_inprocess mlpt_transport_ucx mlpt_transport_nccl transport_ucx_peer transport_nccl_peer
ctest --test-dir "$BUILD_DIR" -R '^test_transport_gpu:' --output-on-failure --timeout 300 \
  || { echo "gpu-check: NCCL transport test FAILED" >&2; exit 1; }
# A run that registered no GPU test must not look like a pass.
count=$(ctest --test-dir "$BUILD_DIR" -N -R '^test_transport_gpu:' | sed -n 's/^Total Tests: //p')
[ "${count:-0}" -gt 0 ] || { echo "gpu-check: no GPU test was registered" >&2; exit 1; }
ctest --test-dir "$BUILD_DIR" -R '^test_transport:' --output-on-failure --timeout 300
echo "gpu-check: transport GPU tests passed ($count)"
