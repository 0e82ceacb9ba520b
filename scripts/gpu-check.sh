#!/usr/bin/env bash
# The GPU check: the CUDA backend's tests against the CPU (label gpu), compute-sanitizer, and the
# CUDA bench, with a one-screen summary. Three ways to run it:
#
#   scripts/gpu-check.sh pack     # on a build machine (nvcc, the Debian packages; no GPU needed):
#                                 # builds a copy of the tree at /tmp/mlpt-gpu/src with the GPU tests
#                                 # registered, and packs it with its runtime libraries into .gpu/
#   scripts/gpu-check.sh device   # on a GPU machine that has none of the build's dependencies, from
#                                 # a project root holding .gpu/: unpacks at the same absolute path
#                                 # (ctest files and compiled-in paths stay valid) and checks
#   scripts/gpu-check.sh          # on a machine with a GPU and the toolchain: build, then check
#
# A lent GPU machine (a registry-less H200) runs the packed check in one call: command
# `bash scripts/gpu-check.sh device`, carry [".gpu"], about 3 minutes plus the bench's (at most BENCH_S). Logs go to $OUT (device) or
# build-gpu/gpu-check; the summary names each failure. The check never passes without a GPU, or
# when the GPU tests were not registered (a configure that did not see MLPT_GPU_TESTS=1 turns them
# into skips, which ctest counts as "100% passed").
#
# Steps: (1) every GPU test (ctest -L gpu, 4 at a time); (2) compute-sanitizer memcheck over every
# GPU test executable, and racecheck over the op tests of the kernels that share memory (GDN, norms,
# attention, routing, sampling); (3) bench_reference_cuda (GEMM peak, copy and upload bandwidth, and
# per library path: training, decode, 64k prefill, attention and GDN MFU, init + upload, memory; then
# decode alone with and without CUDA graphs, cuda_graphs = "decode");
# (4) with 2 GPUs, NCCL across devices. Caps: TEST_S, SAN_S (per executable), BENCH_S, BENCH_GRAPHS_S seconds.
set -uo pipefail
cd "$(dirname "$0")/.."
mode=${1:-local}
SRC=/tmp/mlpt-gpu/src
TEST_S=${TEST_S:-240} SAN_S=${SAN_S:-90} BENCH_S=${BENCH_S:-420} BENCH_GRAPHS_S=${BENCH_GRAPHS_S:-180}
start=$(date +%s)
declare -a summary
fail=0
note() { summary+=("$(printf '%-44s %s' "$1" "$2")"); }
step() {  # step NAME LOG CMD...: runs CMD, logs it, records PASS/FAIL
  local name=$1 log=$2; shift 2
  local t0=$(date +%s)
  if "$@" >"$log" 2>&1; then note "$name" "PASS ($(( $(date +%s) - t0 )) s)"; return 0; fi
  note "$name" "FAIL ($(( $(date +%s) - t0 )) s, see $(basename "$log"))"; fail=1; return 1
}
gpu_targets=(test_reference_cuda_ops test_reference_cuda_model test_reference_cuda_trainer test_reference_cuda_engine
             test_reference_cuda_learning test_reference_cuda_nccl test_reference_cuda_parallel cuda_parallel_check
             test_reference_cuda_parallel_trainer test_reference_cuda_parallel_engine dist_peer mlpt-model
             bench_reference_cuda test_transport_gpu mlpt_transport_nccl transport_nccl_peer
             test_reference_cuda_decode_graphs)
registered() {  # registered BUILD_DIR: the GPU tests are registered (not the :not-run placeholders)
  local n
  n=$(ctest --test-dir "$1" -N -L gpu | sed -n 's/^Total Tests: //p')
  [ "${n:-0}" -gt 0 ] && ! ctest --test-dir "$1" -N | grep -q 'reference_cuda.*:not-run'
}

build() {  # build BUILD_DIR: configure with the GPU tests registered, build the GPU targets
  local launcher=()
  if command -v ccache >/dev/null; then  # as scripts/build.sh: paths hashed relative to the tree
    export CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=1
    launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
  fi
  MLPT_GPU_TESTS=1 cmake -S . -B "$1" -G Ninja -DMLPT_CUDA=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" >/dev/null ||
    return 1
  local have=() t
  for t in "${gpu_targets[@]}"; do ninja -C "$1" -t query "$t" >/dev/null 2>&1 && have+=("$t"); done
  cmake --build "$1" -j "${JOBS:-$(nproc)}" --target "${have[@]}" mlpt_reference mlpt_transport_inprocess mlpt_task_letters
}

if [ "$mode" = pack ]; then
  for tool in rsync xz file; do command -v $tool >/dev/null || { echo "gpu-check pack: needs $tool (apt-get install rsync xz-utils file)" >&2; exit 2; }; done
  root=$PWD out=$PWD/.gpu
  mkdir -p "$SRC" "$out"
  grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
  rsync -a --delete --exclude .git --exclude .gpu --exclude 'build*/' --exclude .cache "$root/" "$SRC/"
  mkdir -p "$SRC/.cache" && for d in npm tokenizers; do [ -e "$root/.cache/$d" ] && rsync -a "$root/.cache/$d" "$SRC/.cache/"; done
  cd "$SRC"
  build build-gpu || { echo "gpu-check pack: the build failed" >&2; exit 1; }
  export MLPT_CACHE_DIR=$SRC/.cache
  [ -d "$SRC/.cache/npm/node_modules" ] || scripts/fetch-npm-fixtures.sh
  MLPT_BUILD_DIR=build-gpu scripts/prepare-tiny.sh >/dev/null || { echo "gpu-check pack: prepare-tiny failed" >&2; exit 1; }
  registered build-gpu || { echo "gpu-check pack: the GPU tests are not registered (MLPT_GPU_TESTS=1 at configure)" >&2; exit 1; }
  stage=$(mktemp -d)
  rsync -a --exclude '*.o' --exclude '*.a' --exclude .cache/npm "$SRC" "$stage/"
  find "$stage" -type f \( -name '*.so' -o -perm -u+x \) -exec sh -c 'file -b "$1" | grep -q ELF && strip --strip-debug "$1"' _ {} \; 2>/dev/null
  tar -C "$stage" -cf - src | xz -T2 -6 > "$out/tree.tar.xz"
  # Runtime libraries of the Debian packages the GPU machine may lack; unpacked there without
  # overwriting its own files.
  pkgs="openmpi-bin openmpi-common libopenmpi3 libpmix2 libhwloc15 libhwloc-plugins libevent-core-2.1-7
   libevent-pthreads-2.1-7 libfabric1 libibverbs1 librdmacm1 libpsm-infinipath1 libpsm2-2 libucx0
   libopenblas0-pthread libgfortran5 libquadmath0 libspdlog1.10 libfmt9 libtomlplusplus3 libmunge2
   libnl-3-200 libnl-route-3-200 libnuma1 libxnvctrl0 libpciaccess0 libx11-6 libxext6 libxcb1 libxau6
   libxdmcp6 libbsd0 libmd0 libxml2 libicu72 zlib1g libzstd1 libgomp1"
  for p in $pkgs; do dpkg -L "$p" 2>/dev/null; done | sort -u | while read -r f; do { [ -f "$f" ] || [ -L "$f" ]; } && echo "${f#/}"; done \
    | grep -v -E '^usr/share/(doc|man|lintian|bug)/' > "$stage/files.txt"
  tar -C / -cf - -T "$stage/files.txt" 2>/dev/null | xz -T2 -6 > "$out/sysroot.tar.xz"
  rm -rf "$stage"
  du -sh "$out"/*
  echo "gpu-check pack: ready; on the GPU machine run: bash scripts/gpu-check.sh device (carry .gpu)"
  exit 0
fi

if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu-check: FAILED: nvidia-smi found no GPU (this check needs one; it never passes without)" >&2
  exit 1
fi
gpus=$(nvidia-smi -L | grep -c '^GPU ')

if [ "$mode" = device ]; then
  [ -f .gpu/tree.tar.xz ] || { echo "gpu-check device: no .gpu/tree.tar.xz here (run 'scripts/gpu-check.sh pack' on a build machine, carry .gpu)" >&2; exit 1; }
  unx() { if command -v xz >/dev/null; then xz -dc "$1"; else python3 -c "import lzma,sys,shutil; shutil.copyfileobj(lzma.open(sys.argv[1]), sys.stdout.buffer)" "$1"; fi; }
  mkdir -p "$(dirname "$SRC")" && unx .gpu/tree.tar.xz | tar -x -C "$(dirname "$SRC")"
  unx .gpu/sysroot.tar.xz | tar -x --skip-old-files -C / 2>/dev/null; ldconfig 2>/dev/null
  for d in /opt/torch/.venv/bin /usr/local/cuda/bin; do [ -d "$d" ] && PATH=$PATH:$d; done
  # cuDNN for cuda_attention = "cudnn" (opened at run time) and the NVRTC its runtime-compiled
  # engines open: the system's, else the Python environment's wheels; without them that path's
  # tests and bench rows fail saying what was missing.
  for so in libcudnn.so.9 libnvrtc.so.13; do
    ldconfig -p 2>/dev/null | grep -q "${so//./\\.}" && continue
    lib=$(find /opt/torch/.venv /usr/local/lib /usr/lib -name "$so" 2>/dev/null | head -1)
    [ -n "$lib" ] && export LD_LIBRARY_PATH=$(dirname "$lib")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    note "$so (cuda_attention = cudnn)" "${lib:-not found}"
  done
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  LOG_DIR=${OUT:-/tmp/gpu-check}
  cd "$SRC" || exit 1
  BUILD_DIR=build-gpu
  missing=$(find $BUILD_DIR -type f \( -name '*.so' -o -perm -u+x \) -not -path '*/CMakeFiles/*' -exec ldd {} \; 2>/dev/null | grep 'not found' | sort -u)
  [ -n "$missing" ] && { note "runtime libraries" "FAIL: $(echo "$missing" | head -3 | tr '\n' ' ')"; fail=1; }
else
  BUILD_DIR=${BUILD_DIR:-build-gpu}
  LOG_DIR=${LOG_DIR:-$BUILD_DIR/gpu-check}
  mkdir -p "$LOG_DIR"
  if [ -z "${SKIP_BUILD:-}" ]; then
    step "build" "$LOG_DIR/build.log" build "$BUILD_DIR" || { printf '%s\n' "${summary[@]}"; exit 1; }
  fi
  step "tiny model (prepare-tiny)" "$LOG_DIR/prepare-tiny.log" env MLPT_BUILD_DIR="$BUILD_DIR" scripts/prepare-tiny.sh
fi
mkdir -p "$LOG_DIR"

if ! registered "$BUILD_DIR"; then
  echo "gpu-check: FAILED: the GPU tests are not registered in $BUILD_DIR (configure without MLPT_GPU_TESTS=1 or a GPU)" >&2
  exit 1
fi
count=$(ctest --test-dir "$BUILD_DIR" -N -L gpu | sed -n 's/^Total Tests: //p')

# (1) The GPU tests. The summary lists each failure; a failing test prints where GPU and CPU part.
step "GPU tests ($count)" "$LOG_DIR/tests.log" \
  timeout -k 5 "$TEST_S" ctest --test-dir "$BUILD_DIR" -L gpu -j 4 --output-on-failure --timeout $(( TEST_S - 10 ))
while IFS= read -r line; do summary+=("  $line"); done < <(grep -E '\*\*\*Failed|\*\*\*Timeout|Not Run' "$LOG_DIR/tests.log" \
  | sed 's/^ *[0-9]*\/[0-9]* Test *#[0-9]*: //' | cut -c1-100)
grep -E '^[0-9]+/[0-9]+ Test' "$LOG_DIR/tests.log" | cut -c1-160 > "$LOG_DIR/tests-summary.txt"

# (2) compute-sanitizer: memcheck over every GPU test executable (4 at a time, each capped), then
# racecheck over the op tests of the kernels that use shared memory.
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
if [ -x "$sanitizer" ]; then
  mapfile -t exes < <(find "$BUILD_DIR/tests/reference_cuda/backends/cuda" -maxdepth 1 -type f -perm -u+x -name 'test_reference_cuda_*' \
                        ! -name '*learning*' ! -name '*parallel*' | sort)
  memcheck() {  # one executable; its log next to the others
    local exe=$1 log=$LOG_DIR/memcheck-$(basename "$1").log
    (cd "$(dirname "$exe")" && timeout -k 5 "$SAN_S" "$sanitizer" --tool memcheck --error-exitcode 9 \
       --leak-check no "$exe" >"$log" 2>&1); echo "$(basename "$exe") rc=$?"
  }
  export -f memcheck; export LOG_DIR SAN_S sanitizer
  printf '%s\n' "${exes[@]}" | xargs -P 4 -I{} bash -c 'memcheck {}' > "$LOG_DIR/memcheck.log" 2>&1
  bad=$(grep -v 'rc=0$' "$LOG_DIR/memcheck.log" | sed 's/rc=124/timed out/; s/rc=9/errors/')
  if [ -z "$bad" ] && [ "${#exes[@]}" -gt 0 ]; then note "memcheck (${#exes[@]} executables)" "PASS"
  else note "memcheck (${#exes[@]} executables)" "FAIL: $(echo $bad)"; fail=1; fi
  ops=$BUILD_DIR/tests/reference_cuda/backends/cuda/test_reference_cuda_ops
  # Catch splits a test spec at commas: name prefixes; -w NoTests fails a filter that matches nothing.
  step "racecheck (shared-memory kernels)" "$LOG_DIR/racecheck.log" timeout -k 5 "$SAN_S" "$sanitizer" --tool racecheck \
    --error-exitcode 9 "$ops" -w NoTests "gdn: *,norms*,attention*,moe: router*,sampling on the device*"
else
  note "compute-sanitizer" "FAIL (not found)"; fail=1
fi

# (3) The bench: every row of issue 28's table for each library path (cuda_gemm/cuda_experts), as
# ratios against the GEMM peak, copy and upload bandwidths measured in the same run; rows print as
# measured, so a bench cut short by BENCH_S still shows what it measured.
step "bench_reference_cuda" "$LOG_DIR/bench.log" timeout -k 5 "$BENCH_S" "$BUILD_DIR/bin/bench_reference_cuda"
while IFS= read -r line; do summary+=("  $line"); done < <(grep -E '^(peak|bandwidth|config|row|memory)' "$LOG_DIR/bench.log")
# Decode with and without CUDA graphs (cuda_graphs = "decode"), the same expert forms on both sides.
step "bench_reference_cuda decode graphs" "$LOG_DIR/bench-graphs.log" timeout -k 5 "$BENCH_GRAPHS_S" \
  "$BUILD_DIR/bin/bench_reference_cuda" --decode-only --paths cublas/device_sized,cublas/device_sized/graphs
while IFS= read -r line; do summary+=("  $line"); done < <(grep -E '^row|decode b.*graphs:' "$LOG_DIR/bench-graphs.log")

# (4) Across GPUs.
if [ "$gpus" -ge 2 ]; then
  step "NCCL transport (2 GPUs)" "$LOG_DIR/nccl.log" \
    ctest --test-dir "$BUILD_DIR" -R '^test_transport_gpu:' --output-on-failure --timeout 300
  step "CUDA model TP=2 over NCCL (2 GPUs)" "$LOG_DIR/tp-nccl.log" \
    timeout -k 5 300 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 \
    "$BUILD_DIR/tests/reference_cuda/backends/cuda/cuda_parallel_check" --config configs/models/tiny.json --communicator nccl
else
  note "NCCL across GPUs" "not run: needs 2 GPUs, found $gpus (TP/EP staged on one GPU ran in step 1)"
fi

echo "== gpu-check on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) ($gpus GPU) in $(( $(date +%s) - start )) s; logs in $LOG_DIR"
printf '%s\n' "${summary[@]}"
[ "$fail" -eq 0 ] && echo "gpu-check: PASSED" || echo "gpu-check: FAILED"
exit "$fail"
