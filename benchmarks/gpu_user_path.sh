#!/usr/bin/env bash
# The user-path campaign on a lent GPU, one step a call:
#   OUT=$OUT bash benchmarks/gpu_user_path.sh STEP [STEP ...]
# tests: the GPU tests of the recorded eager calls, compile and CUDA graphs;
# calls: an eager call's host time (softfp8-bench calls);
# eager / static: softfp8-bench generate on llama2-7b (software FP8 decode);
# eager8b / static8b: the same on llama3-8b (~100 s a variant on an H100; GEN_FORMATS=a,b: those only);
# diag: inside eager generate(), the recorded calls replayed and refused, and a profile
#   (benchmarks/gpu_eager_diag.py); rounds: eager llama2-7b, every variant in GPU memory, timed
#   in 5 interleaved rounds (the same script);
# step: one decode step of the whole model as a CUDA graph, compiled (benchmarks/gpu_e2e_step.py);
# b128: E4M3_B128 on the MMA GEMV: its GPU tests (tests/test_mma_gemv.py -k b128), then
#   benchmarks/gpu_e4m3_b128.py (parity on llama2-7b's shapes, each linear, the token against
#   E4M3 in one process; issue 48's bar: token ratio <= 1.05);
# tag: softfp8-bench token on llama2-7b, this tree against the tag lab-archive-2026-12 (its
#   softfp8/ extracted to .tag/ and carried: git archive lab-archive-2026-12 softfp8 | tar -x -C .tag;
#   the tag is commit 7b4899e where a clone lacks it);
# gpu: the whole GPU suite (pytest -m gpu) over 8 processes (pytest-xdist), cut after GPU_SUITE_S
#   seconds (default 540); each test's line in $OUT/gpu-suite.log as it ends, so a cut run still
#   names its failures (in one H100 call, -q with files kept whole reached 53% in 300 s); with
#   GPU_SUITE_DONE=FILE (test ids, one a line: the PASSED ids of a cut run's log) it runs the rest;
#   every test phase's seconds go to $OUT/gpu-times.txt as it ends (tests/conftest.py); with
#   GPU_SUITE_SHARD=I/N only shard I of N runs (tests/conftest.py; on an H100 the suite's 422
#   tests take ~5,500 s of test time, so N = 2 makes two calls of ~300-400 s over 8 processes);
# cudabk: the CUDA backend (CuPy + NVRTC) against the Triton one (benchmarks/gpu_cuda_backend.py);
# load: benchmarks/gpu_load.py, every checkpoint layout loaded and run ($OUT/gpu_load.json); with
#   .whl-ct/ carried (pip download --no-deps --only-binary=:all: --python-version 3.12 --platform
#   manylinux2014_x86_64 -d .whl-ct compressed-tensors==0.20.1 loguru pydantic==2.13.4
#   pydantic-core==2.46.4 annotated-types typing-inspection typing-extensions psutil) it writes
#   compressed-tensors' layouts too;
# newtf: the compile, graph and hub GPU tests and static-cache generate on the transformers whose
#   wheels lie in .whl/ (carried; installed into /tmp/site-newtf, not over the machine's own);
# in:DIR:STEP: STEP of DIR's own copy of this script, run in DIR (a branch's tree, extracted with
#   git archive BRANCH softfp8 tests benchmarks pyproject.toml | tar -x -C DIR, and carried).
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
gen_formats=${GEN_FORMATS:-e5m2,e4m3,nvfp4,mxfp4}  # eager8b / static8b
export PYTHONUNBUFFERED=1
echo "== $(date -u +%FT%TZ) $(nvidia-smi -L | head -1)"
python3 -c "import torch, triton, transformers; print('torch', torch.__version__, 'triton', triton.__version__, 'transformers', transformers.__version__)"
for step in "$@"; do
  echo "== step $step $(date -u +%T)"
  case $step in
    tests) python3 -m pytest -q -m gpu tests/test_fastcall.py tests/test_compile.py 2>&1 | tail -25 ;;
    graphs) python3 -m pytest -q -m gpu tests/test_gpu_graphs.py tests/test_hub_hf.py 2>&1 | tail -15 ;;
    calls) python3 -m softfp8.bench calls --out "$OUT/calls.json" ;;
    eager) SOFTFP8_FP8_DECODE=integer python3 -m softfp8.bench generate --preset llama2-7b --modes eager --gpu-time --out "$OUT/gen-eager.json" ;;
    static) SOFTFP8_FP8_DECODE=integer python3 -m softfp8.bench generate --preset llama2-7b --modes static --gpu-time --out "$OUT/gen-static.json" ;;
    static2) SOFTFP8_FP8_DECODE=integer python3 -m softfp8.bench generate --preset llama2-7b --modes static --formats e5m2,nvfp4 --gpu-time --out "$OUT/gen-static2.json" ;;
    eager8b) SOFTFP8_FP8_DECODE=integer python3 -m softfp8.bench generate --preset llama3-8b --modes eager --gpu-time \
               --formats "$gen_formats" --out "$OUT/gen-eager-8b.json" ;;
    static8b) SOFTFP8_FP8_DECODE=integer python3 -m softfp8.bench generate --preset llama3-8b --modes static --gpu-time \
               --formats "$gen_formats" --out "$OUT/gen-static-8b.json" ;;
    diag) SOFTFP8_FP8_DECODE=integer python3 benchmarks/gpu_eager_diag.py 2>&1 | grep -v "Warn\|warn" ;;
    rounds) SOFTFP8_FP8_DECODE=integer DIAG_LAYERS=32 DIAG_ROUNDS=5 DIAG_FORMATS=fp16,e5m2,e4m3,nvfp4,mxfp4 \
              python3 benchmarks/gpu_eager_diag.py 2>&1 | grep -v "Warn\|warn\|layer/s" ;;
    step) SOFTFP8_FP8_DECODE=integer python3 benchmarks/gpu_e2e_step.py --compile --json "$OUT/e2e-step-compile.json" ;;
    tag) for round in 1 2; do
           for tree in .tag .; do
             echo "-- token, tree $tree, round $round"
             (cd "$tree" && SOFTFP8_FP8_DECODE=integer python3 -m softfp8.bench token --preset llama2-7b \
                --backends triton --out "$OUT/token-$(basename "$(realpath "$tree")")-$round.json" 2>&1 | tail -8)
           done
         done ;;
    b128) python3 -m pytest -q -m gpu tests/test_mma_gemv.py -k "b128 or B128" 2>&1 | tail -15
          python3 benchmarks/gpu_e4m3_b128.py --skip-tests --out "$OUT/gpu-e4m3-b128.json" 2>&1 | tail -25 ;;
    gpu) done_args=()  # GPU_SUITE_DONE: a file of test ids that passed in an earlier, cut run
         if [ -n "${GPU_SUITE_DONE:-}" ]; then
           while read -r id; do [ -n "$id" ] && done_args+=(--deselect "$id"); done < "$GPU_SUITE_DONE"
           echo "leaving out $(( ${#done_args[@]} / 2 )) ids that passed before ($GPU_SUITE_DONE)"
         fi
         SOFTFP8_TEST_SHARD=${GPU_SUITE_SHARD:-} SOFTFP8_TEST_TIMES=$OUT/gpu-times.txt timeout "${GPU_SUITE_S:-540}" python3 -m pytest -v -m gpu -n 8 -p no:cacheprovider -rfE --durations=15 \
           "${done_args[@]}" tests > "$OUT/gpu-suite.log" 2>&1
         grep -E "FAILED|ERROR" "$OUT/gpu-suite.log" | head -20
         grep -cE "PASSED" "$OUT/gpu-suite.log"; tail -22 "$OUT/gpu-suite.log"
         echo "-- slowest phases ($OUT/gpu-times.txt)"; sort -rn "$OUT/gpu-times.txt" | head -25 ;;
    cudabk) python3 benchmarks/gpu_cuda_backend.py --out "$OUT" 2>&1 | grep -v "Warn\\|warn" | tail -30 ;;
    load) if [ -d .whl-ct ]; then  # compressed-tensors and its deps, for its layouts
            python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site-ct .whl-ct/*.whl
          fi
          PYTHONPATH=/tmp/site-ct${PYTHONPATH:+:$PYTHONPATH} python3 benchmarks/gpu_load.py 2>&1 | grep -v "Warn\|warn" | tail -40 ;;
    newtf) python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site-newtf .whl/*.whl \
           && PYTHONPATH=/tmp/site-newtf python3 -c "import transformers; print('transformers', transformers.__version__)" \
           && PYTHONPATH=/tmp/site-newtf python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_compile.py tests/test_gpu_graphs.py tests/test_hub_hf.py 2>&1 | tail -12 \
           && SOFTFP8_FP8_DECODE=integer PYTHONPATH=/tmp/site-newtf python3 -m softfp8.bench generate --preset llama2-7b --modes static \
                --formats e5m2,nvfp4 --out "$OUT/gen-static-newtf.json" ;;
    in:*) spec=${step#in:}; dir=${spec%%:*}
          (cd "$dir" && OUT=$OUT bash benchmarks/gpu_user_path.sh "${spec#*:}") ;;
    *) echo "unknown step $step" ;;
  esac
done
echo "== done $(date -u +%T)"
