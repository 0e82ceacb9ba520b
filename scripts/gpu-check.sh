#!/usr/bin/env bash
# GPU check, for a machine with an NVIDIA GPU (none exists in CI, so the GPU tests are registered
# only here). Builds with CUDA and MLPT_GPU_TESTS=1 into build-gpu/, then:
#   1. the CUDA backend's tests against the CPU backend (label gpu): every op forward and backward,
#      the whole model, the qwen35_cuda trainer and engine against qwen35_cpu, and the letters run
#      on both qwen35_cuda components (the tiny model from scripts/prepare-tiny.sh, which needs the
#      npm fixtures in .cache: fetch them where the registry is reachable and bring .cache along),
#   2. compute-sanitizer (memcheck) on two op tests (GDN, sampling),
#   3. bench_reference_cuda (GEMM peak, bandwidth; a ~1B config's training step as MFU and its
#      decode through the engine's device step as a fraction of bandwidth),
#   4. the NCCL transport test when there are 2 GPUs (NCCL refuses two ranks on one device); the
#      model-parallel NCCL communicator's test runs in step 1 with one rank per visible GPU, and
#      the CUDA model's tensor parallelism (TP=2 under mpirun) runs in step 1 on one GPU with the
#      host-staged MPI communicator (and EP=2, TP=2 x EP=2 with host-staged expert dispatch), here
#      TP=2 over NCCL when there are 2 GPUs; the qwen35_cuda trainer's
#      groups (TP=2, EP=2 by host-staged dispatch, TP=2 x EP=2, data parallel 2, TP=2 x DP=2) run in
#      step 1 (test_reference_cuda_parallel_trainer), and so does the qwen35_cuda engine as TP=2,
#      EP=2 and TP=2 x EP=2 groups (test_reference_cuda_parallel_engine).
# Prints a one-screen summary; exits non-zero when anything fails, when there is no GPU, or when no
# GPU test was registered. Target: under 8 minutes on one H200 (JOBS defaults to nproc).
#   scripts/gpu-check.sh            # build + test + bench
#   BUILD_DIR=... JOBS=... SKIP_BUILD=1 scripts/gpu-check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build-gpu}
JOBS=${JOBS:-$(nproc)}
LOG_DIR=${LOG_DIR:-$BUILD_DIR/gpu-check}
start=$(date +%s)
declare -a summary
fail=0
note() { summary+=("$(printf '%-34s %s' "$1" "$2")"); }
step() {  # step NAME LOG CMD...: runs CMD, logs it, records PASS/FAIL
  local name=$1 log=$2; shift 2
  local t0=$(date +%s)
  if "$@" >"$log" 2>&1; then note "$name" "PASS ($(( $(date +%s) - t0 )) s)"; return 0; fi
  note "$name" "FAIL ($(( $(date +%s) - t0 )) s, see $log)"; fail=1; return 1
}

if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu-check: FAILED: nvidia-smi found no GPU (this check needs one; it never passes without)" >&2
  exit 1
fi
gpus=$(nvidia-smi -L | grep -c '^GPU ')
mkdir -p "$LOG_DIR"
if [ -z "${SKIP_BUILD:-}" ]; then
  MLPT_GPU_TESTS=1 cmake -S . -B "$BUILD_DIR" -G Ninja -DMLPT_CUDA=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    >"$LOG_DIR/configure.log" 2>&1 || { echo "gpu-check: FAILED to configure (see $LOG_DIR/configure.log)" >&2; exit 1; }
  targets=(test_reference_cuda_ops test_reference_cuda_model test_reference_cuda_trainer test_reference_cuda_engine
           test_reference_cuda_learning test_reference_cuda_nccl test_reference_cuda_parallel cuda_parallel_check
           test_reference_cuda_parallel_trainer test_reference_cuda_parallel_engine dist_peer
           mlpt-model bench_reference_cuda)
  [ "$gpus" -ge 2 ] && targets+=(test_transport_gpu mlpt_transport_nccl transport_nccl_peer)
  step "build (${targets[*]})" "$LOG_DIR/build.log" cmake --build "$BUILD_DIR" -j "$JOBS" --target "${targets[@]}" || {
    printf '%s\n' "${summary[@]}"; exit 1; }
fi

# The tiny model of the letters run (idempotent; a failure here shows again as the learning test's).
step "tiny model (prepare-tiny)" "$LOG_DIR/prepare-tiny.log" env MLPT_BUILD_DIR="$BUILD_DIR" scripts/prepare-tiny.sh

count=$(ctest --test-dir "$BUILD_DIR" -N -L gpu -R '^test_reference_cuda_' | sed -n 's/^Total Tests: //p')
if [ "${count:-0}" -eq 0 ] || ctest --test-dir "$BUILD_DIR" -N -R ':not-run$' | grep -q reference_cuda; then
  echo "gpu-check: FAILED: no GPU test was registered (configure did not see the GPU)" >&2; exit 1
fi
step "GPU tests vs CPU ($count cases)" "$LOG_DIR/tests.log" \
  ctest --test-dir "$BUILD_DIR" -L gpu -R '^test_reference_cuda_' --output-on-failure --timeout 300
while IFS= read -r line; do summary+=("$line"); done < <(grep -E 'Failed|\*\*\*' "$LOG_DIR/tests.log" \
  | sed 's/^ *[0-9]*\/[0-9]* Test *#[0-9]*: /  /' | cut -c1-110)
sanitizer=/usr/local/cuda/bin/compute-sanitizer
if [ -x "$sanitizer" ]; then
  # Catch splits a test spec at commas (the names have some): name prefixes, and -w NoTests fails
  # the step when they match nothing instead of passing with no test run.
  step "compute-sanitizer memcheck (gdn, sampling)" "$LOG_DIR/sanitizer.log" \
    "$sanitizer" --tool memcheck --error-exitcode 9 "$BUILD_DIR/tests/gpu/reference_cuda/test_reference_cuda_ops" \
    -w NoTests "gdn: recurrent*,sampling on the device*"
else
  note "compute-sanitizer" "FAIL (not found at $sanitizer)"; fail=1
fi
if step "bench_reference_cuda" "$LOG_DIR/bench.log" timeout 240 "$BUILD_DIR/bin/bench_reference_cuda"; then
  while IFS= read -r line; do summary+=("  $line"); done < <(grep -E '^(peak|bandwidth|op|train|decode)' "$LOG_DIR/bench.log")
fi
if [ "$gpus" -ge 2 ]; then
  step "NCCL transport (2 GPUs)" "$LOG_DIR/nccl.log" \
    ctest --test-dir "$BUILD_DIR" -R '^test_transport_gpu:' --output-on-failure --timeout 300
  step "CUDA model TP=2 over NCCL (2 GPUs)" "$LOG_DIR/tp-nccl.log" \
    timeout -k 5 300 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 \
    "$BUILD_DIR/tests/gpu/reference_cuda/cuda_parallel_check" --config configs/models/tiny.json --communicator nccl
  [ -f "$LOG_DIR/tp-nccl.log" ] && summary+=("  $(grep -o '"max_logprob_diff_one_rank[^,]*' "$LOG_DIR/tp-nccl.log")")
else
  note "NCCL transport" "not run: needs 2 GPUs, found $gpus"
  note "CUDA model TP=2 over NCCL" "not run: needs 2 GPUs, found $gpus (TP=2 staged ran in the GPU tests)"
fi

echo "== gpu-check on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) ($gpus GPU) in $(( $(date +%s) - start )) s"
printf '%s\n' "${summary[@]}"
[ "$fail" -eq 0 ] && echo "gpu-check: PASSED" || echo "gpu-check: FAILED"
exit "$fail"
