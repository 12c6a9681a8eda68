#!/usr/bin/env bash
# One H200 measurement campaign per call (device time is scarce): bash benchmarks/h200_campaign.sh STEP
# Everything lands in $OUT (the device tool brings it back); each step is bounded by timeout.
set -u
export PYTHONUNBUFFERED=1 TRITON_INTERPRET=0 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
OUT=${OUT:-out}; mkdir -p "$OUT"
step=${1:-smoke}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
run() { local name=$1 secs=$2; shift 2; echo "=== $name"; timeout "$secs" "$@" > "$OUT/$name.txt" 2>&1; echo "=== $name rc=$?"; tail -n 25 "$OUT/$name.txt"; }
# in_variant DIR NAME SECS CMD..: `run` from DIR, whose softfp8 python then imports (the working
# directory comes first on sys.path; a PYTHONPATH entry does not beat it: see fp4dec)
in_variant() { local d=$1; shift; echo "$1: $(cd "$d" && python3 -c 'import softfp8; print(softfp8.__file__)')"; (cd "$d" && run "$@"); }
# ab_each NAME SECS CMD..: CMD from variants/prev (the commit before, a `git archive`) and from
# here, interleaved twice: NAME-prev, NAME-cur, NAME-prev2, NAME-cur2; @V@ in CMD becomes the
# variant's name
ab_each() {
  local name=$1 secs=$2 v d; shift 2
  for v in prev cur prev2 cur2; do
    case $v in cur*) d=$PWD ;; *) d=$PWD/variants/prev ;; esac
    in_variant "$d" "$name-$v" "$secs" "${@//@V@/$v}"
  done
}
# flip_prev MODULE LINE NEW: variants/prev gets this tree's softfp8 (the built-in, for ab_each),
# then MODULE's (a path under softfp8/) LINE becomes NEW here; both lines printed
flip_prev() {
  local f=softfp8/$1
  mkdir -p variants/prev && rm -rf variants/prev/softfp8 && cp -r softfp8 variants/prev/
  sed -i "s/^$2\$/$3/" "$f"
  grep -n "^${2%% *}" "$f" "variants/prev/$f"
}
# ab_bench NAME SECS CMD..: a softfp8-bench CMD as ab_each, each with --out $OUT/r/NAME-<variant>.json
ab_bench() {
  local name=$1 secs=$2; shift 2
  ab_each "$name" "$secs" "$@" --out "$OUT/r/$name-@V@.json"
}
# host_ab: benchmarks/gpu_host_overhead.py as ab_each (host-prev .. host-cur2), its per-call
# rows printed after
host_ab() {
  local v
  ab_each host 150 python3 benchmarks/gpu_host_overhead.py
  for v in prev cur prev2 cur2; do echo "== $v"; grep " us$" "$OUT/host-$v.txt"; done
}
# smallm_all SECS: softfp8-bench small-m on the llama3-8b shapes at M = 1..16 into $OUT/r, the
# summary over all shapes printed
smallm_all() {
  run smallm "$1" python3 -m softfp8.bench small-m --preset llama3-8b --backends triton --m 1,2,4,8,12,16 --out "$OUT/r/smallm.json"
  grep -A30 "over all shapes" "$OUT/smallm.txt" | tail -30
}
# smallm_ab SECS TABLE MS V..: softfp8-bench small-m (8-bit, M in MS) once per V, on the
# built-in table where V starts with "base", else on TABLE (SOFTFP8_TRITON_TABLE)
smallm_ab() {
  local secs=$1 table=$2 ms=$3 v t; shift 3
  for v in "$@"; do
    case $v in base*) t= ;; *) t=$table ;; esac
    run "smallm-$v" "$secs" env SOFTFP8_TRITON_TABLE=$t python3 -m softfp8.bench small-m --preset llama3-8b --backends triton --formats e5m2,e4m3 --m "$ms" --out "$OUT/r/smallm-$v.json"
    grep -A8 "over all shapes" "$OUT/smallm-$v.txt" | tail -8
  done
}
# gpu_tests NAME PROCS SECS KEXPR: the GPU tests of tests/test_triton.py matching KEXPR, split
# over PROCS pytest processes at once (the compiles are CPU-bound), NAME-<i>.txt each, their
# last lines printed
gpu_tests() {
  local name=$1 procs=$2 secs=$3 kexpr=$4 i
  python3 -m pytest --collect-only -q -m gpu -p no:cacheprovider tests/test_triton.py -k "$kexpr" 2>/dev/null | grep "::" > "$OUT/ids.txt"
  wc -l < "$OUT/ids.txt"
  for i in $(seq 0 $((procs - 1))); do
    awk -v i=$i -v n=$procs 'NR % n == i' "$OUT/ids.txt" > "$OUT/ids-$i.txt"
    (timeout "$secs" python3 -m pytest -q -m gpu -p no:cacheprovider $(cat "$OUT/ids-$i.txt") > "$OUT/$name-$i.txt" 2>&1; echo "rc=$?" >> "$OUT/$name-$i.txt") &
  done
  wait
  for i in $(seq 0 $((procs - 1))); do tail -n 3 "$OUT/$name-$i.txt"; done
}
# sweep_l3 NAME SECS ARGS..: sweep_gemv.py ARGS on the five llama3-8b shapes into $OUT/r/NAME.json,
# its shape, table and best lines printed
sweep_l3() {
  local name=$1 secs=$2; shift 2
  run "$name" "$secs" python3 benchmarks/sweep_gemv.py "$@" --shapes "6144,4096;4096,4096;28672,4096;4096,14336;128256,4096" --out "$OUT/r/$name.json"
  grep -E "x4096 M=|x14336 M=|table:|BEST:" "$OUT/$name.txt" | cut -c1-110
}
# sweep_l2 NAME SECS ARGS..: as sweep_l3 on the five llama2-7b shapes (the token's)
sweep_l2() {
  local name=$1 secs=$2; shift 2
  run "$name" "$secs" python3 benchmarks/sweep_gemv.py "$@" --shapes "12288,4096;4096,4096;22016,4096;4096,11008;32000,4096" --out "$OUT/r/$name.json"
  grep -E "x4096 M=|x11008 M=|table:|BEST:" "$OUT/$name.txt" | cut -c1-110
}
# ring_table FILE STAGES:WARPS SHAPES [FMTS]: a SOFTFP8_TRITON_TABLE with every M = 1 shape in
# SHAPES ("N,K;N,K..") on the ring with S stages in W warps, unsplit, for FMTS ("e5m2,e4m3")
ring_table() {
  python3 - "$@" <<'PY'
import json, sys
path, spec, shapes = sys.argv[1:4]
fmts = sys.argv[4].split(",") if len(sys.argv) > 4 else ("e5m2", "e4m3")
ring, warps = map(int, spec.split(":"))
rows = [dict(n=n, k=k, m=1, fmt=f, kernel="mma_gemv", block_m=1, block_n=4 * warps, block_k=128,
             split_k=1, num_warps=warps, num_stages=0, depth=1, ring=ring)
        for n, k in (map(int, s.split(",")) for s in shapes.split(";")) for f in fmts]
with open(path, "w") as f:
    json.dump(dict(best=rows, note=f"M = 1 ring, {ring} stages, {warps} warps: {shapes}"), f)
PY
}
# ring_tables STAGES:WARPS..: $OUT/r/table-rSwW.json for each: the llama2-7b M = 1 shapes
# (benchmarks/fp8_ring_all_table.json's) on the ring with S stages in W warps
ring_tables() {
  local spec
  for spec in "$@"; do
    ring_table "$OUT/r/table-r${spec%:*}w${spec#*:}.json" "$spec" "12288,4096;4096,4096;22016,4096;4096,11008"
  done
}
# table_ab NAME SECS UNTIL V.. -- ARGS..: softfp8-bench ARGS once per V (while the call's
# SECONDS < UNTIL), on the built-in table where V starts with "base", else on
# $OUT/r/table-V.json (a trailing _2, the second pair, dropped), each into $OUT/r/NAME-V.json
table_ab() {
  local name=$1 secs=$2 until=$3 v t vs=(); shift 3
  while [ "$1" != "--" ]; do vs+=("$1"); shift; done; shift
  for v in "${vs[@]}"; do
    case $v in base*) t= ;; *) t=$OUT/r/table-${v%_2}.json ;; esac
    [ $SECONDS -lt "$until" ] && run "$name-$v" "$secs" env SOFTFP8_TRITON_TABLE=$t python3 -m softfp8.bench "$@" --out "$OUT/r/$name-$v.json"
  done
}
# ring_x_variant: variants/rx, a copy of softfp8 and benchmarks whose launcher keeps FP4's x
# off the ring (the kernel's RING_X = False, diagnostics only: the launcher has no setting)
ring_x_variant() {
  mkdir -p variants/rx && cp -r softfp8 benchmarks variants/rx/
  python3 - variants/rx/softfp8/backends/triton/__init__.py <<'PY'
import sys
p = sys.argv[1]
s = open(p).read()
old = "RING=cfg.ring,"
assert s.count(old) == 1
s = s.replace(old, "RING=cfg.ring, RING_X=packed.fmt in (Format.E5M2, Format.E4M3),")
open(p, "w").write(s)
PY
}
# pack STEP: $OUT/r (and the logs) into $OUT/STEP.tgz, printing the token/shape rows last
pack() {
  cp "$OUT"/*.txt "$OUT/r/"
  for f in "$OUT"/r/token-*.md "$OUT"/r/shapes-*.md; do
    [ -f "$f" ] || continue
    echo "== $f"; grep -E "^\| *(torch float16|e5m2|e4m3|nvfp4|mxfp4|lm_head|gate_up|down|qkv|o) " "$f" | grep -v bfloat | grep -v "torch float16 F.linear | -" | cut -c1-120
  done
  if [ -f "$OUT/r/gputests.txt" ]; then tail -3 "$OUT/r/gputests.txt"; fi
  tar -czf "$OUT/$1.tgz" -C "$OUT/r" .
  rm -rf "$OUT/r" "$OUT"/*.txt
}
case $step in
smoke)
  run probe 90 python3 -m softfp8.probe --bandwidth
  run gputests 240 python3 -m pytest -q -x -m gpu -p no:cacheprovider tests/
  run tritoncheck 150 python3 benchmarks/gpu_triton_check.py
  run sweep 200 python3 benchmarks/sweep_gemv.py --quick --formats e5m2,nvfp4,mxfp4 --out "$OUT/sweep.json"
  run token 150 python3 -m softfp8.bench token --preset llama2-7b --backends triton --out "$OUT/token.json"
  ;;
sweep1)
  run sweep1 560 python3 benchmarks/sweep_gemv.py --ms 1 --budget 500 --out "$OUT/sweep1.json"
  ;;
sweep2)
  run gputests 200 python3 -m pytest -q -x -m gpu -p no:cacheprovider tests/test_triton.py
  run sweep2 330 python3 benchmarks/sweep_gemv.py --ms 1 --budget 300 --shapes "4096,4096;12288,4096;22016,4096;4096,11008;128256,4096" --out "$OUT/sweep2.json"
  SOFTFP8_FP8_DECODE=integer run token 120 python3 -m softfp8.bench token --preset llama2-7b --backends triton --out "$OUT/token.json"
  ;;
final)
  # issue 3/4/5/7/8 numbers: one call. The software FP8 decode is forced where it matters
  # (SOFTFP8_FP8_DECODE=integer: what a GPU without FP8 units runs).
  run probe 40 python3 -m softfp8.probe --bandwidth
  run gputests 110 python3 -m pytest -q -m gpu -p no:cacheprovider tests/
  export SOFTFP8_FP8_DECODE=integer
  run token 40 python3 -m softfp8.bench token --preset llama2-7b --backends triton --out "$OUT/token.json"
  run shapes 60 python3 -m softfp8.bench shapes --preset llama3-8b --backends triton --out "$OUT/shapes.json"
  run smallm 50 python3 -m softfp8.bench small-m --preset llama3-8b --backends triton --formats e5m2,e4m3 --out "$OUT/smallm.json"
  run prefill 50 python3 -m softfp8.bench prefill --preset llama3-8b --backends triton --formats e5m2,e4m3,nvfp4 --out "$OUT/prefill.json"
  unset SOFTFP8_FP8_DECODE
  run native 70 python3 benchmarks/gpu_native_crossover.py --ms 1,4,16,32,64,128,256,512,2048 --reps 10 --json "$OUT/native.json"
  SOFTFP8_FP8_DECODE=integer run e2e 120 python3 benchmarks/gpu_e2e_generate.py --variants fp16,e5m2,e4m3,nvfp4 --modes eager --short 8 --long 40 --repeats 2 --json "$OUT/e2e.json"
  ;;
fp4)
  run gputests 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_triton.py
  run sweep3 200 python3 benchmarks/sweep_gemv.py --ms 1 --budget 180 --formats nvfp4,mxfp4 --shapes "4096,4096;22016,4096;4096,11008;128256,4096" --out "$OUT/sweep3.json"
  SOFTFP8_FP8_DECODE=integer run token 40 python3 -m softfp8.bench token --preset llama2-7b --backends triton --out "$OUT/token.json"
  ;;
wdot1)
  # the weight-as-left-operand kernel (WDOT) against the table, then the token with the winners
  run gputests 120 python3 -m pytest -q -x -m gpu -p no:cacheprovider tests/test_triton.py
  export SOFTFP8_FP8_DECODE=integer
  run sweepm1 230 python3 benchmarks/sweep_gemv.py --ms 1 --kernels wdot --e2m1 inject --budget 210 --shapes "12288,4096;4096,4096;22016,4096;4096,11008;128256,4096" --out "$OUT/sweep_m1.json"
  SOFTFP8_TRITON_TABLE="$OUT/sweep_m1.json" run token 50 python3 -m softfp8.bench token --preset llama2-7b --backends triton --out "$OUT/token.json"
  run sweeppf 140 python3 benchmarks/sweep_gemv.py --ms 2048 --kernels wdot,tiled --e2m1 inject --formats e5m2,nvfp4 --budget 120 --shapes "4096,4096;28672,4096;4096,14336;6144,4096" --out "$OUT/sweep_pf.json"
  ;;
pdl1)
  # programmatic dependent launch (off / on without prefetch / on with 32 KiB and 128 KiB L2
  # prefetch per program), then the FP4 and E4M3 settings with injection on the dot kernel
  run gputests 120 python3 -m pytest -q -x -m gpu -p no:cacheprovider tests/test_triton.py
  export SOFTFP8_FP8_DECODE=integer
  for v in off:0 auto:0 auto:32768 auto:131072; do
    SOFTFP8_PDL=${v%%:*} SOFTFP8_PDL_PREFETCH=${v##*:} run "token-${v%%:*}-${v##*:}" 60 python3 -m softfp8.bench token --preset llama2-7b --backends triton
  done
  run sweepm1 300 python3 benchmarks/sweep_gemv.py --ms 1 --kernels gemv,small_m --e2m1 inject --formats e5m2,nvfp4,mxfp4,e4m3 --budget 280 --shapes "4096,4096;4096,11008;12288,4096;22016,4096" --out "$OUT/sweep_m1.json"
  ;;
pdl2)
  # PDL with the trigger after the main loop, the dequant+cuBLAS prefill, deeper lm_head pipelines
  run gputests 120 python3 -m pytest -q -x -m gpu -p no:cacheprovider tests/test_triton.py
  export SOFTFP8_FP8_DECODE=integer
  for v in off:0 late:0 late:32768 early:32768; do
    SOFTFP8_PDL=${v%%:*} SOFTFP8_PDL_PREFETCH=${v##*:} run "token-${v%%:*}-${v##*:}" 60 python3 -m softfp8.bench token --preset llama2-7b --backends triton
  done
  run sweeppf 200 python3 benchmarks/sweep_gemv.py --ms 512,2048 --kernels dequant,tiled --e2m1 inject --budget 180 --shapes "6144,4096;4096,4096;28672,4096;4096,14336;128256,4096" --out "$OUT/sweep_pf.json"
  run sweeplm 120 python3 benchmarks/sweep_gemv.py --ms 1 --kernels small_m --formats e5m2,e4m3 --budget 100 --shapes "128256,4096;28672,4096" --out "$OUT/sweep_lm.json"
  ;;
final2)
  # the second session's numbers: one call; bench receipts go into one tarball (the device tool
  # brings back at most 8 files)
  run gputests 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  run token 60 python3 -m softfp8.bench token --preset llama2-7b --backends triton --out "$OUT/r/token.json"
  run shapes 70 python3 -m softfp8.bench shapes --preset llama3-8b --backends triton --out "$OUT/r/shapes.json"
  run smallm 60 python3 -m softfp8.bench small-m --preset llama3-8b --backends triton --formats e5m2,e4m3 --out "$OUT/r/smallm.json"
  run prefill 80 python3 -m softfp8.bench prefill --preset llama3-8b --backends triton --out "$OUT/r/prefill.json"
  run e2e 150 python3 benchmarks/gpu_e2e_generate.py --variants fp16,e5m2,e4m3,nvfp4,mxfp4 --modes static-compile --short 8 --long 40 --repeats 2 --json "$OUT/r/e2e.json"
  tar czf "$OUT/receipts.tgz" -C "$OUT" r && rm -rf "$OUT/r"
  ;;
tune3)
  # E5M2 PDL off against late in the token; lm_head/gate_up tiles under PDL late; M = 2, 8 tiles
  export SOFTFP8_FP8_DECODE=integer
  SOFTFP8_PDL=off run token-off 40 python3 -m softfp8.bench token --preset llama2-7b --backends triton --formats e5m2,e4m3
  run sweeplm 70 python3 benchmarks/sweep_gemv.py --ms 1 --kernels small_m --formats e5m2 --budget 60 --shapes "128256,4096;28672,4096" --out "$OUT/sweep_lm.json"
  run sweepsm 170 python3 benchmarks/sweep_gemv.py --ms 2,8 --kernels gemv,small_m --formats e4m3,e5m2 --budget 160 --shapes "4096,4096;6144,4096;4096,14336" --out "$OUT/sweep_sm.json"
  ;;
final3)
  # the numbers of the final table (kernels as in final2, whose GPU tests all passed)
  run gputests 90 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_triton.py
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  run token 60 python3 -m softfp8.bench token --preset llama2-7b --backends triton --out "$OUT/r/token.json"
  run shapes 60 python3 -m softfp8.bench shapes --preset llama3-8b --backends triton --out "$OUT/r/shapes.json"
  run smallm 60 python3 -m softfp8.bench small-m --preset llama3-8b --backends triton --formats e5m2,e4m3 --out "$OUT/r/smallm.json"
  run prefill 80 python3 -m softfp8.bench prefill --preset llama3-8b --backends triton --out "$OUT/r/prefill.json"
  tar czf "$OUT/receipts.tgz" -C "$OUT" r && rm -rf "$OUT/r"
  ;;
final4)
  # DEQUANT with its exact pass for rows fp16 can't hold (and DEQUANT_MIN_M = 1024)
  run gputests 90 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_triton.py
  export SOFTFP8_FP8_DECODE=integer
  run prefill 80 python3 -m softfp8.bench prefill --preset llama3-8b --backends triton --out "$OUT/prefill.json"
  ;;
mma1)
  # the FP4 mma.sync GEMV (Kernel.MMA_GEMV): correctness first, then its warps/split settings on
  # the llama2-7b shapes, then the token with the built-in table and with the sweep's winners
  run mmatests 150 python3 -m pytest -q -x -m gpu -p no:cacheprovider tests/test_triton.py -k "mma or e2m1_code"
  grep -q " passed" "$OUT/mmatests.txt" && ! grep -q "failed\|error" "$OUT/mmatests.txt" || exit 1
  run sweepmma 200 python3 benchmarks/sweep_gemv.py --ms 1 --kernels mma_gemv --formats nvfp4,mxfp4 --budget 180 --shapes "12288,4096;4096,4096;22016,4096;4096,11008;32000,4096" --out "$OUT/sweep_mma.json"
  export SOFTFP8_FP8_DECODE=integer
  run token 60 python3 -m softfp8.bench token --preset llama2-7b --backends triton --out "$OUT/token.json"
  SOFTFP8_TRITON_TABLE="$OUT/sweep_mma.json" run token-sweep 60 python3 -m softfp8.bench token --preset llama2-7b --backends triton --formats nvfp4,mxfp4 --out "$OUT/token_sweep.json"
  ;;
mma2)
  # the same with an L2 prefetch AHEAD steps ahead (LaunchConfig.num_stages) in the sweep
  run mmatests 150 python3 -m pytest -q -x -m gpu -p no:cacheprovider tests/test_triton.py -k "mma or e2m1_code"
  grep -q " passed" "$OUT/mmatests.txt" && ! grep -q "failed\|error" "$OUT/mmatests.txt" || exit 1
  run sweepmma 250 python3 benchmarks/sweep_gemv.py --ms 1 --kernels mma_gemv --formats nvfp4,mxfp4 --budget 230 --shapes "12288,4096;4096,4096;22016,4096;4096,11008;32000,4096" --out "$OUT/sweep_mma.json"
  SOFTFP8_TRITON_TABLE="$OUT/sweep_mma.json" run token-sweep 60 python3 -m softfp8.bench token --preset llama2-7b --backends triton --formats nvfp4,mxfp4 --out "$OUT/token_sweep.json"
  ;;
final5)
  # the third session's numbers (Kernel.MMA_GEMV for FP4 at M <= 8): receipts in one tarball
  run gputests 170 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_triton.py
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  run token 60 python3 -m softfp8.bench token --preset llama2-7b --backends triton --out "$OUT/r/token.json"
  run shapes 80 python3 -m softfp8.bench shapes --preset llama3-8b --backends triton --out "$OUT/r/shapes.json"
  run smallm 80 python3 -m softfp8.bench small-m --preset llama3-8b --backends triton --out "$OUT/r/smallm.json"
  tar czf "$OUT/receipts.tgz" -C "$OUT" r && rm -rf "$OUT/r"
  ;;
probe)
  # where Kernel.MMA_GEMV's time goes: without the decode, and with the loads alone
  run probe 200 python3 benchmarks/gpu_mma_probe.py
  ;;
long1)
  # the 512-byte-run mapping for M = 1 (block_m = 1): tests, the probe, a sweep, the token
  run mmatests 150 python3 -m pytest -q -x -m gpu -p no:cacheprovider tests/test_triton.py -k "mma or e2m1_code"
  grep -q " passed" "$OUT/mmatests.txt" && ! grep -q "failed\|error" "$OUT/mmatests.txt" || exit 1
  run probe 150 python3 benchmarks/gpu_mma_probe.py --formats nvfp4
  run sweepmma 200 python3 benchmarks/sweep_gemv.py --ms 1 --kernels mma_gemv --formats nvfp4,mxfp4 --budget 180 --shapes "12288,4096;4096,4096;22016,4096;4096,11008;32000,4096" --out "$OUT/sweep_mma.json"
  SOFTFP8_TRITON_TABLE="$OUT/sweep_mma.json" run token-sweep 60 python3 -m softfp8.bench token --preset llama2-7b --backends triton --formats nvfp4,mxfp4 --out "$OUT/token_sweep.json"
  ;;
pdl3)
  # programmatic dependent launch settings for Kernel.MMA_GEMV (FP4 token)
  for v in off:0 late:0 early:0 early:32768; do
    SOFTFP8_PDL=${v%%:*} SOFTFP8_PDL_PREFETCH=${v##*:} run "token-${v%%:*}-${v##*:}" 60 python3 -m softfp8.bench token --preset llama2-7b --backends triton --formats nvfp4,mxfp4
  done
  ;;
final6)
  # the final token table after pdl3 (FP4: early PDL, no prefetch), and the Triton GPU tests
  run gputests 170 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_triton.py
  export SOFTFP8_FP8_DECODE=integer
  run token 60 python3 -m softfp8.bench token --preset llama2-7b --backends triton --out "$OUT/token.json"
  ;;
mma8)
  # Kernel.MMA_GEMV for the 8-bit formats: tests, a sweep against the table, the token with it
  export SOFTFP8_FP8_DECODE=integer
  run mmatests 150 python3 -m pytest -q -x -m gpu -p no:cacheprovider tests/test_triton.py -k "mma or code"
  grep -q " passed" "$OUT/mmatests.txt" && ! grep -q "failed\|error" "$OUT/mmatests.txt" || exit 1
  run sweep8 200 python3 benchmarks/sweep_gemv.py --ms 1 --kernels mma_gemv --formats e5m2,e4m3 --budget 180 --shapes "12288,4096;4096,4096;22016,4096;4096,11008;32000,4096" --out "$OUT/sweep8.json"
  SOFTFP8_TRITON_TABLE="$OUT/sweep8.json" run token-sweep 60 python3 -m softfp8.bench token --preset llama2-7b --backends triton --formats e5m2,e4m3 --out "$OUT/token8.json"
  ;;
final7)
  # 8-bit M = 1 on Kernel.MMA_GEMV: GPU tests, the token, small M with the built-in table (M = 2..8
  # on the dot kernel) and with MMA_GEMV's 32-row tiles forced for 8-bit M = 2..8
  run gputests 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_triton.py
  export SOFTFP8_FP8_DECODE=integer
  run token 50 python3 -m softfp8.bench token --preset llama2-7b --backends triton --out "$OUT/token.json"
  run smallm 50 python3 -m softfp8.bench small-m --preset llama3-8b --backends triton --formats e5m2,e4m3 --out "$OUT/smallm.json"
  SOFTFP8_TRITON_TABLE=benchmarks/mma8_smallm_table.json run smallm-mma 50 python3 -m softfp8.bench small-m --preset llama3-8b --backends triton --formats e5m2,e4m3
  ;;
runs1)
  # the run mapping (block_m = the x rows it is laid out for, 2 or 4 tiles a warp): GPU tests,
  # the M = 1 sweep of every format on the llama2-7b shapes, the token with its winners and without
  export SOFTFP8_FP8_DECODE=integer
  run mmatests 170 python3 -m pytest -q -x -m gpu -p no:cacheprovider tests/test_triton.py -k "mma or code"
  grep -q " passed" "$OUT/mmatests.txt" && ! grep -q "failed\|error" "$OUT/mmatests.txt" || exit 1
  run sweepm1 260 python3 benchmarks/sweep_gemv.py --ms 1 --kernels mma_gemv --budget 240 --shapes "22016,4096;12288,4096;4096,11008;4096,4096;32000,4096" --out "$OUT/sweep_runs_m1.json"
  SOFTFP8_TRITON_TABLE="$OUT/sweep_runs_m1.json" run token-sweep 60 python3 -m softfp8.bench token --preset llama2-7b --backends triton --out "$OUT/token_sweep.json"
  run token 50 python3 -m softfp8.bench token --preset llama2-7b --backends triton
  ;;
runs2)
  # 8-bit small M on the run mapping: sweep M = 1, 2, 4, 8 on the llama3-8b shapes, then small-m
  # with the sweep's winners and with the built-in table in the same call
  export SOFTFP8_FP8_DECODE=integer
  run sweepsm 400 python3 benchmarks/sweep_gemv.py --ms 1,2,4,8 --kernels mma_gemv --formats e4m3,e5m2 --budget 380 --shapes "28672,4096;4096,14336;6144,4096;4096,4096;128256,4096" --out "$OUT/sweep_runs_sm.json"
  SOFTFP8_TRITON_TABLE="$OUT/sweep_runs_sm.json" run smallm-sweep 70 python3 -m softfp8.bench small-m --preset llama3-8b --backends triton --formats e5m2,e4m3 --out "$OUT/smallm_sweep.json"
  run smallm 60 python3 -m softfp8.bench small-m --preset llama3-8b --backends triton --formats e5m2,e4m3
  ;;
runs3)
  # the built-in table after runs1/runs2 (M = 1 in 2 warps; 8-bit M = 2 and E4M3 M <= 4 on the
  # runs) with E4M3's NaN-free decode: GPU tests, token, small M, shapes; then FP4 at M = 2, 4
  # on the runs against the 32-row tiles
  run gputests 220 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_triton.py
  grep -q " passed" "$OUT/gputests.txt" && ! grep -q "failed\|error" "$OUT/gputests.txt" || exit 1
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  run token 50 python3 -m softfp8.bench token --preset llama2-7b --backends triton --out "$OUT/r/token.json"
  run smallm 60 python3 -m softfp8.bench small-m --preset llama3-8b --backends triton --formats e5m2,e4m3 --out "$OUT/r/smallm.json"
  run shapes 70 python3 -m softfp8.bench shapes --preset llama3-8b --backends triton --out "$OUT/r/shapes.json"
  run sweepfp4 120 python3 benchmarks/sweep_gemv.py --ms 2,4 --kernels mma_gemv --formats nvfp4,mxfp4 --budget 100 --shapes "28672,4096;4096,14336;6144,4096;4096,4096;128256,4096" --out "$OUT/r/sweep_fp4_sm.json"
  tar czf "$OUT/receipts.tgz" -C "$OUT" r && rm -rf "$OUT/r"
  ;;
runs4)
  # runs3's table with 4 KB rows unsplit at M = 1 and 8-bit vocabulary heads on the dot kernel:
  # a sweep of both kernels on the tall 8-bit shapes, then token, small M and shapes (built-in)
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  run sweeptall 150 python3 benchmarks/sweep_gemv.py --ms 1 --kernels small_m,mma_gemv --formats e5m2,e4m3 --budget 130 --shapes "128256,4096;32000,4096;28672,4096" --out "$OUT/r/sweep_tall.json"
  run token 50 python3 -m softfp8.bench token --preset llama2-7b --backends triton --out "$OUT/r/token.json"
  run smallm 60 python3 -m softfp8.bench small-m --preset llama3-8b --backends triton --out "$OUT/r/smallm.json"
  run shapes 70 python3 -m softfp8.bench shapes --preset llama3-8b --backends triton --out "$OUT/r/shapes.json"
  tar czf "$OUT/receipts.tgz" -C "$OUT" r && rm -rf "$OUT/r"
  ;;
final8)
  # the fourth session's numbers (8-bit M <= 2 on the run mapping, E4M3 NaN-free decode, 8-bit
  # vocabulary heads and M >= 3 on the dot kernel): token, small M, shapes; receipts in one tarball
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  run token 50 python3 -m softfp8.bench token --preset llama2-7b --backends triton --out "$OUT/r/token.json"
  run smallm 70 python3 -m softfp8.bench small-m --preset llama3-8b --backends triton --out "$OUT/r/smallm.json"
  run shapes 70 python3 -m softfp8.bench shapes --preset llama3-8b --backends triton --out "$OUT/r/shapes.json"
  run token2 50 python3 -m softfp8.bench token --preset llama2-7b --backends triton --formats e5m2,e4m3
  tar czf "$OUT/receipts.tgz" -C "$OUT" r && rm -rf "$OUT/r"
  ;;
prefill9)
  # the fifth session: DEQUANT's decode (E4M3 through fp16, FP4 scales per block) and the
  # per-weight row-range cache; where the prefill time goes, then the prefill bench
  run gputests 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_triton.py -k "dequant or every"
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  run probe 240 python3 benchmarks/gpu_prefill_probe.py --json "$OUT/r/prefill-probe.json"
  run prefill 120 python3 -m softfp8.bench prefill --preset llama3-8b --backends triton --out "$OUT/r/prefill.json"
  tar czf "$OUT/receipts.tgz" -C "$OUT" r && rm -rf "$OUT/r"
  ;;
prefill10)
  # slab sizes and a shorter first slab, CUDA graph and eager, and the host cost of a slab
  export SOFTFP8_FP8_DECODE=integer
  run sweep 300 python3 benchmarks/gpu_prefill_probe.py --sweep --formats e4m3,nvfp4 --json "$OUT/prefill-sweep.json"
  ;;
persist1)
  # the M = 1 run mapping as a persistent grid (2-16 programs an SM), llama2-7b's shapes; the
  # token with the table as it is and with the sweep's best settings (ran on c0c013b; the
  # persistent grid and --kernels persist were reverted after it: BENCHMARKS.md's log)
  run gputests 150 python3 -m pytest -q -x -m gpu -p no:cacheprovider tests/test_triton.py -k "mma"
  export SOFTFP8_FP8_DECODE=integer
  run sweep 240 python3 benchmarks/sweep_gemv.py --ms 1 --kernels persist --budget 220 --shapes "12288,4096;4096,4096;22016,4096;4096,11008" --out "$OUT/sweep-persist.json"
  run token 60 python3 -m softfp8.bench token --preset llama2-7b --backends triton
  SOFTFP8_TRITON_TABLE="$OUT/sweep-persist.json" run tokenp 60 python3 -m softfp8.bench token --preset llama2-7b --backends triton
  ;;
ncu1)
  # Nsight Compute on the M = 1 MMA GEMV (22016 x 4096, E5M2 / E4M3 / NVFP4): bandwidth, issue
  # slots, warp stalls, occupancy (clocks left alone)
  NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  echo "ncu: $NCU"
  run ncu 300 "$NCU" --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis --section SchedulerStats --section WarpStateStats --section Occupancy --section LaunchStats -k regex:mma_gemv -c 6 python3 benchmarks/gpu_ncu_target.py --launches 0
  run ncu-lm 200 "$NCU" --clock-control none --section SpeedOfLight --section SchedulerStats --section WarpStateStats --section Occupancy -k regex:dot_kernel -c 2 python3 benchmarks/gpu_ncu_target.py --formats e5m2 --shape 128256,4096 --launches 1
  ;;
final9)
  # the fifth session's numbers: GPU tests, DEQUANT with the PTX 8-bit decode, prefill (graph)
  # and where its time goes eagerly (probe); receipts in one tarball
  run gputests 240 python3 -m pytest -q -m gpu -p no:cacheprovider tests/
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  run prefill 120 python3 -m softfp8.bench prefill --preset llama3-8b --backends triton --out "$OUT/r/prefill.json"
  run probe 200 python3 benchmarks/gpu_prefill_probe.py --json "$OUT/r/prefill-probe.json"
  tar czf "$OUT/receipts.tgz" -C "$OUT" r && rm -rf "$OUT/r"
  ;;
prefill11)
  # slab sizes for E5M2 and MXFP4 (prefill10 swept E4M3 and NVFP4), and a second prefill sample
  export SOFTFP8_FP8_DECODE=integer
  run sweep 200 python3 benchmarks/gpu_prefill_probe.py --sweep --formats e5m2,mxfp4 --json "$OUT/prefill-sweep2.json"
  run prefill 120 python3 -m softfp8.bench prefill --preset llama3-8b --backends triton --m 2048 --out "$OUT/prefill2.json"
  ;;
stage1)
  # experiment: the 8-bit M = 1 run mapping with its weights staged through shared memory by
  # Triton's pipeliner (SOFTFP8_MMA_STAGES = tl.range num_stages; 0 = the register double buffer)
  # (ran on the commit that added it; reverted after: BENCHMARKS.md's log)
  SOFTFP8_MMA_STAGES=3 run gputests 200 python3 -m pytest -q -x -m gpu -p no:cacheprovider tests/test_triton.py -k "mma and not mxfp4 and not nvfp4"
  export SOFTFP8_FP8_DECODE=integer
  i=0
  for st in 0 2 3 4 0 3; do
    i=$((i + 1))
    SOFTFP8_MMA_STAGES=$st run "token$i-s$st" 60 python3 -m softfp8.bench token --preset llama2-7b --backends triton --formats e5m2,e4m3
  done
  SOFTFP8_MMA_STAGES=3 run shapes-s3 90 python3 -m softfp8.bench shapes --preset llama2-7b --backends triton --formats e5m2,e4m3
  SOFTFP8_MMA_STAGES=0 run shapes-s0 90 python3 -m softfp8.bench shapes --preset llama2-7b --backends triton --formats e5m2,e4m3
  tar czf "$OUT/stage1.tgz" -C "$OUT" $(cd "$OUT" && ls *.txt) && rm -f "$OUT"/*.txt
  ;;
host1)
  # host time per eager batch-1 call (package check cached / uncached) and eager generate()
  export SOFTFP8_FP8_DECODE=integer
  run host 120 python3 benchmarks/gpu_host_overhead.py
  run e2e 200 python3 benchmarks/gpu_e2e_generate.py --variants fp16,e5m2,nvfp4 --modes eager --short 8 --long 40 --repeats 2 --json "$OUT/e2e.json"
  ;;
host2)
  # the same after the plain-eager fast path (ops.run_linear)
  export SOFTFP8_FP8_DECODE=integer
  run host 120 python3 benchmarks/gpu_host_overhead.py
  run e2e 200 python3 benchmarks/gpu_e2e_generate.py --variants fp16,e5m2,nvfp4 --modes eager --short 8 --long 40 --repeats 2 --json "$OUT/e2e.json"
  ;;
pipe1)
  # sixth session: Kernel.MMA_GEMV with two register buffers (depth 2) and/or an L2 prefetch
  # beyond them, 8-bit M = 1: ptxas issues a one-buffer loop's next loads after its mma
  # (SASS), so one step a warp is in flight; the sweep's winners as a table for the token
  run gputests 200 python3 -m pytest -q -x -m gpu -p no:cacheprovider tests/test_triton.py -k "mma or depth"
  export SOFTFP8_FP8_DECODE=integer
  T7B="22016,4096;4096,11008;12288,4096;4096,4096"
  run sweep 280 python3 benchmarks/sweep_gemv.py --ms 1 --formats e5m2,e4m3 --kernels mma_gemv --mma-pipes 1:0,1:2,2:0,2:4 --mma-warps 2,4 --shapes "$T7B" --budget 250 --out "$OUT/sweep-pipe.json"
  run token-a 60 python3 -m softfp8.bench token --preset llama2-7b --backends triton --formats e5m2,e4m3
  SOFTFP8_TRITON_TABLE="$OUT/sweep-pipe.json" run token-b 60 python3 -m softfp8.bench token --preset llama2-7b --backends triton --formats e5m2,e4m3 --out "$OUT/token-pipe.json"
  SOFTFP8_PDL_PREFETCH=4096 run token-c 60 python3 -m softfp8.bench token --preset llama2-7b --backends triton --formats e5m2,e4m3
  SOFTFP8_TRITON_TABLE="$OUT/sweep-pipe.json" run token-d 60 python3 -m softfp8.bench token --preset llama2-7b --backends triton --formats e5m2,e4m3
  ;;
pipe2)
  # depth 2 in the table for 8-bit M = 1; FP4 and M = 2 swept with it; the vocabulary head on
  # the runs against the dot kernel; prefill M = 512 DEQUANT against the tiled kernel
  export SOFTFP8_FP8_DECODE=integer
  T7B="22016,4096;4096,11008;12288,4096;4096,4096"
  L3="128256,4096;28672,4096;6144,4096;4096,14336;4096,4096"
  run sweep-fp4 120 python3 benchmarks/sweep_gemv.py --ms 1 --formats nvfp4,mxfp4 --kernels mma_gemv --mma-pipes 1:0,2:0 --mma-warps 2,4 --shapes "$T7B" --budget 100 --out "$OUT/sweep-fp4.json"
  run sweep-l3 100 python3 benchmarks/sweep_gemv.py --ms 1 --formats e5m2,e4m3 --kernels mma_gemv --mma-pipes 2:0 --mma-warps 2,4 --shapes "128256,4096;28672,4096;6144,4096;4096,14336" --budget 80 --out "$OUT/sweep-l3.json"
  run sweep-m2 100 python3 benchmarks/sweep_gemv.py --ms 2 --formats e5m2,e4m3 --kernels mma_gemv --mma-pipes 1:0,2:0 --shapes "$L3" --budget 80 --out "$OUT/sweep-m2.json"
  run token 60 python3 -m softfp8.bench token --preset llama2-7b --backends triton --out "$OUT/token.json"
  run shapes 60 python3 -m softfp8.bench shapes --preset llama3-8b --backends triton --formats e5m2,e4m3 --out "$OUT/shapes.json"
  run smallm 60 python3 -m softfp8.bench small-m --preset llama3-8b --backends triton --formats e5m2,e4m3 --out "$OUT/smallm.json"
  run sweep-512 100 python3 benchmarks/sweep_gemv.py --ms 512 --formats e5m2,e4m3,nvfp4 --kernels dequant,tiled --shapes "$L3" --budget 80 --out "$OUT/sweep-512.json"
  ;;
pipe3)
  # the table after pipe2 (8-bit M <= 2 on the runs with two buffers, vocabulary heads too,
  # 4 warps from 16384 rows at M = 1; DEQUANT from M = 512): GPU suite, then every bench;
  # M = 4, 8 on the runs with two buffers against the dot kernel; M = 256 DEQUANT vs tiled
  run gputests 250 python3 -m pytest -q -x -m gpu -p no:cacheprovider tests/
  export SOFTFP8_FP8_DECODE=integer
  T7B="22016,4096;4096,11008;12288,4096;4096,4096"
  L3="128256,4096;28672,4096;6144,4096;4096,14336;4096,4096"
  run token 60 python3 -m softfp8.bench token --preset llama2-7b --backends triton --out "$OUT/token.json"
  run shapes 60 python3 -m softfp8.bench shapes --preset llama3-8b --backends triton --out "$OUT/shapes.json"
  run smallm 60 python3 -m softfp8.bench small-m --preset llama3-8b --backends triton --formats e5m2,e4m3 --out "$OUT/smallm.json"
  run prefill 90 python3 -m softfp8.bench prefill --preset llama3-8b --backends triton --out "$OUT/prefill.json"
  run sweep-m48 60 python3 benchmarks/sweep_gemv.py --ms 4,8 --formats e5m2,e4m3 --kernels mma_gemv --mma-pipes 1:0,2:0 --shapes "$L3" --budget 50 --out "$OUT/sweep-m48.json"
  run sweep-256 50 python3 benchmarks/sweep_gemv.py --ms 256 --formats e5m2,e4m3,nvfp4 --kernels dequant,tiled --shapes "$L3" --budget 40 --out "$OUT/sweep-256.json"
  run sweep-fp4 50 python3 benchmarks/sweep_gemv.py --ms 1 --formats nvfp4,mxfp4 --kernels mma_gemv --mma-pipes 1:0,2:0 --mma-warps 2,4 --shapes "$T7B" --budget 40 --out "$OUT/sweep-fp4.json"
  tar czf "$OUT/pipe3.tgz" -C "$OUT" $(cd "$OUT" && ls) && find "$OUT" -type f ! -name pipe3.tgz -delete
  ;;
pipe4)
  # sweep vs bench on one vocabulary head (timing method), then the table after pipe3 (8-bit
  # M <= 4 on the runs with two buffers; FP4 DEQUANT from M = 256)
  export SOFTFP8_FP8_DECODE=integer
  run timing-method 90 python3 benchmarks/gpu_timing_method.py
  run timing-method-e4m3 60 python3 benchmarks/gpu_timing_method.py --fmt e4m3
  run gputests 150 python3 -m pytest -q -x -m gpu -p no:cacheprovider tests/test_triton.py -k "mma or dequant or depth"
  run token 60 python3 -m softfp8.bench token --preset llama2-7b --backends triton --out "$OUT/token.json"
  run shapes 60 python3 -m softfp8.bench shapes --preset llama3-8b --backends triton --out "$OUT/shapes.json"
  run smallm 60 python3 -m softfp8.bench small-m --preset llama3-8b --backends triton --formats e5m2,e4m3 --out "$OUT/smallm.json"
  run prefill 90 python3 -m softfp8.bench prefill --preset llama3-8b --backends triton --m 256,512,2048 --out "$OUT/prefill.json"
  tar czf "$OUT/pipe4.tgz" -C "$OUT" $(cd "$OUT" && ls) && find "$OUT" -type f ! -name pipe4.tgz -delete
  ;;
pipe5)
  # GPU suite on the new table; the E4M3 slab decode with 256 folded into the row scale;
  # the vocabulary head alone in the bench against inside the preset (pipe3/4: 135 us in the
  # bench, 118-122 in sweep_gemv and gpu_timing_method)
  run gputests 250 python3 -m pytest -q -x -m gpu -p no:cacheprovider tests/
  export SOFTFP8_FP8_DECODE=integer
  run lmhead-alone 40 python3 -m softfp8.bench shapes --shape 128256,4096 --backends triton --formats e5m2,e4m3 --out "$OUT/lmhead.json"
  run shapes-8bit 60 python3 -m softfp8.bench shapes --preset llama3-8b --backends triton --formats e5m2,e4m3 --out "$OUT/shapes8.json"
  run prefill-a 60 python3 -m softfp8.bench prefill --preset llama3-8b --backends triton --m 2048 --out "$OUT/prefill-a.json"
  run probe 90 python3 benchmarks/gpu_prefill_probe.py --formats e5m2,e4m3,nvfp4 --json "$OUT/prefill-probe.json"
  run prefill-b 60 python3 -m softfp8.bench prefill --preset llama3-8b --backends triton --m 2048 --out "$OUT/prefill-b.json"
  tar czf "$OUT/pipe5.tgz" -C "$OUT" $(cd "$OUT" && ls) && find "$OUT" -type f ! -name pipe5.tgz -delete
  ;;
pipe6)
  # the vocabulary head: sweep-style data against the bench's, and the library's entry point
  export SOFTFP8_FP8_DECODE=integer
  run timing-bench-data 100 python3 benchmarks/gpu_timing_method.py --bench-data
  run timing-plain 100 python3 benchmarks/gpu_timing_method.py
  ;;
pipe7)
  # small M with vocabulary heads at M = 2..4 back on the dot kernel (MMA_FP8_MAX_N)
  export SOFTFP8_FP8_DECODE=integer
  run smallm 90 python3 -m softfp8.bench small-m --preset llama3-8b --backends triton --formats e5m2,e4m3 --out "$OUT/smallm.json"
  ;;
timing2)
  # (prepared for the next session) the vocabulary head through the bench's own measure() in
  # the timing script: 136 us there means the bench's timing, 118-130 the bench process's state
  export SOFTFP8_FP8_DECODE=integer
  run timing 120 python3 benchmarks/gpu_timing_method.py --bench-data
  run lmhead-alone 40 python3 -m softfp8.bench shapes --shape 128256,4096 --backends triton --formats e5m2 --out "$OUT/lmhead.json"
  ;;
check6)
  # (prepared) first call of the next session: the GPU suite on main (51ef1c0's E4M3 pair
  # decode has only run in the PTX emulator) and a token, before anything else
  run gputests 250 python3 -m pytest -q -x -m gpu -p no:cacheprovider tests/
  export SOFTFP8_FP8_DECODE=integer
  run token 60 python3 -m softfp8.bench token --preset llama2-7b --backends triton --out "$OUT/token.json"
  ;;
pdlw1)
  # the MMA GEMV's first weight loads before the PDL wait (this tree) against 192e7f1 (wait
  # first), PDL off / late / early, same call
  run gputests 200 python3 -m pytest -q -x -m gpu -p no:cacheprovider tests/test_triton.py -k "mma or pdl"
  export SOFTFP8_FP8_DECODE=integer
  old=/tmp/old192; mkdir -p $old; git archive 192e7f1 | tar -x -C $old 2>/dev/null || echo "no git here"
  for v in auto late early off; do
    SOFTFP8_PDL=$v run "token-new-$v" 80 python3 -m softfp8.bench token --preset llama2-7b --backends triton --out "$OUT/token-new-$v.json"
    [ -d $old/softfp8 ] && (cd $old && SOFTFP8_PDL=$v PYTHONPATH=$old run "token-old-$v" 80 python3 -m softfp8.bench token --preset llama2-7b --backends triton --out "$OUT/token-old-$v.json")
  done
  tar -czf "$OUT/pdlw1.tgz" -C "$OUT" $(cd "$OUT" && ls | grep -v tgz)
  ;;
pdlw2)
  # the token with PDL's early launch overlapping the MMA GEMV's first weight loads (FP4) and the
  # ceiling of 128 separate read kernels of the same bytes (gpu_read_chain.py)
  export SOFTFP8_FP8_DECODE=integer
  run token 80 python3 -m softfp8.bench token --preset llama2-7b --backends triton --out "$OUT/token.json"
  run readchain 200 python3 benchmarks/gpu_read_chain.py --json "$OUT/readchain.json"
  tar -czf "$OUT/pdlw2.tgz" -C "$OUT" $(cd "$OUT" && ls | grep -v tgz)
  ;;
timing3)
  # the vocabulary head in softfp8-bench shapes (134 us) against every other harness (118-120):
  # numba's probe threads, 2 rotated copies, the shape twice in one process
  export SOFTFP8_FP8_DECODE=integer
  b="python3 -m softfp8.bench shapes --backends triton --formats e5m2"
  run lm-a 60 $b --shape 128256,4096 --out "$OUT/lm-a.json"
  NUMBA_NUM_THREADS=1 run lm-numba1 60 $b --shape 128256,4096 --out "$OUT/lm-numba1.json"
  run lm-rot8 60 $b --shape 128256,4096 --rotate 8 --out "$OUT/lm-rot8.json"
  run lm-twice 90 $b --shape 128256,4096 --shape 128256,4096 --out "$OUT/lm-twice.json"
  run lm-small-first 90 $b --shape 4096,4096 --shape 128256,4096 --out "$OUT/lm-small-first.json"
  tar -czf "$OUT/timing3.tgz" -C "$OUT" $(cd "$OUT" && ls | grep -v tgz)
  ;;
bisect1)
  # the bench's steps one at a time (gpu_bench_bisect.py), the vocabulary head
  export SOFTFP8_FP8_DECODE=integer
  run bisect 120 python3 benchmarks/gpu_bench_bisect.py
  ;;
bisect2)
  # what makes the next measure() of the vocabulary head slow (gpu_bench_bisect.py, second form)
  export SOFTFP8_FP8_DECODE=integer
  run bisect2 150 python3 benchmarks/gpu_bench_bisect.py
  ;;
s7final)
  # this session's numbers after the bench's clock warm-up (timing.WARM_GPU_S): the bisect
  # again, the token, llama3-8b shapes and small M; then the GPU suite
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  run lmhead 40 python3 -m softfp8.bench shapes --shape 128256,4096 --backends triton --formats e5m2 --out "$OUT/r/lmhead.json"
  run token 80 python3 -m softfp8.bench token --preset llama2-7b --backends triton --out "$OUT/r/token.json"
  run shapes 100 python3 -m softfp8.bench shapes --preset llama3-8b --backends triton --out "$OUT/r/shapes.json"
  run smallm 120 python3 -m softfp8.bench small-m --preset llama3-8b --backends triton --formats e5m2,e4m3 --out "$OUT/r/smallm.json"
  unset SOFTFP8_FP8_DECODE
  run gputests 230 python3 -m pytest -q -m gpu -p no:cacheprovider tests/
  cp "$OUT"/*.txt "$OUT/r/"
  tar -czf "$OUT/s7final.tgz" -C "$OUT/r" .
  rm -rf "$OUT/r" "$OUT"/*.txt
  ;;
e4head)
  # E4M3's vocabulary head at M = 1: MMA_GEMV (the table; 136 us in s7final) against the dot
  # kernel's 64 x 256 and 128 x 256 tiles (125 us at M = 2 in the same run)
  export SOFTFP8_FP8_DECODE=integer
  b="python3 -m softfp8.bench shapes --shape 128256,4096 --backends triton --formats e4m3"
  run head-table 50 $b --out "$OUT/head-table.json"
  SOFTFP8_TRITON_TABLE=benchmarks/e4head_dot64.json run head-dot64 50 $b --out "$OUT/head-dot64.json"
  SOFTFP8_TRITON_TABLE=benchmarks/e4head_dot128.json run head-dot128 50 $b --out "$OUT/head-dot128.json"
  tar -czf "$OUT/e4head.tgz" -C "$OUT" $(cd "$OUT" && ls | grep -v tgz)
  rm -f "$OUT"/*.json "$OUT"/*.jsonl "$OUT"/*.md
  ;;
prefill7)
  # prefill after the bench's warm-up change (kernels as in s7final)
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  run prefill 150 python3 -m softfp8.bench prefill --preset llama3-8b --backends triton --out "$OUT/r/prefill.json"
  cp "$OUT"/*.txt "$OUT/r/"
  tar -czf "$OUT/prefill7.tgz" -C "$OUT/r" .
  rm -rf "$OUT/r" "$OUT"/*.txt
  ;;
fp4dec)
  # FP4 decode in 17 instructions a word (signs by a prmt), and loads that leave switched-off
  # registers unzeroed over whole steps (ZERO = 0); against the previous kernels (variants/base:
  # git archive of fde01bc) and the new decode with the zeroing kept (variants/zero); token
  # new / base / zero / new again (drift), FP4 shapes new / base; then head8's two runs
  # (flawed: run from the repo root, every variant imported the root's softfp8; see fp4ab)
  # fp4dec's variants ran from the repo root, which python puts first on sys.path: every run there
  # was the new code. Here each variant runs from its own directory (printed), interleaved
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  root=$PWD
  for v in base new zero base2 new2; do
    case $v in new*) d=$root ;; base*) d=$root/variants/base ;; *) d=$root/variants/$v ;; esac
    in_variant "$d" "token-$v" 60 python3 -m softfp8.bench token --preset llama2-7b --backends triton --out "$OUT/r/token-$v.json"
  done
  for v in base new; do
    case $v in new*) d=$root ;; *) d=$root/variants/$v ;; esac
    in_variant "$d" "shapes-$v" 60 python3 -m softfp8.bench shapes --preset llama3-8b --backends triton --formats nvfp4,mxfp4 --out "$OUT/r/shapes-$v.json"
  done
  run probe 150 python3 benchmarks/gpu_mma_probe.py --formats nvfp4,mxfp4
  pack fp4ab
  ;;
fp4tab)
  # the E2M1 table word in a register (124f764) against 7d4efdf (variants/prev), and FP4 M = 1 at
  # depth 2 (benchmarks/fp4_depth2_table.json); then the whole GPU suite on this commit
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  root=$PWD
  for v in prev cur depth2 prev2 cur2; do
    case $v in prev*) d=$root/variants/prev ;; *) d=$root ;; esac
    case $v in depth2) tab=$root/benchmarks/fp4_depth2_table.json ;; *) tab= ;; esac
    SOFTFP8_TRITON_TABLE=$tab in_variant "$d" "token-$v" 60 python3 -m softfp8.bench token --preset llama2-7b --backends triton --out "$OUT/r/token-$v.json"
  done
  run shapes-cur 60 python3 -m softfp8.bench shapes --preset llama3-8b --backends triton --out "$OUT/r/shapes-cur.json"
  SOFTFP8_TRITON_TABLE=$root/benchmarks/fp4_depth2_table.json run shapes-depth2 60 python3 -m softfp8.bench shapes --preset llama3-8b --backends triton --formats nvfp4,mxfp4 --out "$OUT/r/shapes-depth2.json"
  unset SOFTFP8_FP8_DECODE
  run gputests 240 python3 -m pytest -q -m gpu -p no:cacheprovider tests/
  pack fp4tab
  ;;
fp4nat)
  # FP4 pairs that are x's own (no x re-pairing) against 7d4efdf (variants/prev), interleaved;
  # then the whole GPU suite on this commit
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  root=$PWD
  for v in prev cur prev2 cur2; do
    case $v in prev*) d=$root/variants/prev ;; *) d=$root ;; esac
    in_variant "$d" "token-$v" 60 python3 -m softfp8.bench token --preset llama2-7b --backends triton --out "$OUT/r/token-$v.json"
  done
  for v in prev cur; do
    case $v in prev*) d=$root/variants/prev ;; *) d=$root ;; esac
    in_variant "$d" "shapes-$v" 60 python3 -m softfp8.bench shapes --preset llama3-8b --backends triton --formats nvfp4,mxfp4 --out "$OUT/r/shapes-$v.json"
  done
  unset SOFTFP8_FP8_DECODE
  run gputests 240 python3 -m pytest -q -m gpu -p no:cacheprovider tests/
  pack fp4nat
  ;;
fp4w4)
  # FP4 M = 1 in 4 warps from 16384 rows (benchmarks/fp4_warps4_table.json; the probe had 22016 x
  # 4096 at 23.2 against 24.0 us), interleaved with the built-in rule; then 8-bit small M on this
  # commit (its M = 2..4 kernels load with ZERO = 0 since 7d4efdf)
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  w4=$PWD/benchmarks/fp4_warps4_table.json
  for v in rule w4 rule2 w42; do
    case $v in w4*) tab=$w4 ;; *) tab= ;; esac
    SOFTFP8_TRITON_TABLE=$tab run "token-$v" 60 python3 -m softfp8.bench token --preset llama2-7b --backends triton --formats nvfp4,mxfp4 --out "$OUT/r/token-$v.json"
  done
  for v in rule w4; do
    case $v in w4*) tab=$w4 ;; *) tab= ;; esac
    SOFTFP8_TRITON_TABLE=$tab run "shapes-$v" 60 python3 -m softfp8.bench shapes --preset llama3-8b --backends triton --formats nvfp4,mxfp4 --out "$OUT/r/shapes-$v.json"
  done
  run smallm 150 python3 -m softfp8.bench small-m --preset llama3-8b --backends triton --formats e5m2,e4m3 --out "$OUT/r/smallm.json"
  grep -A12 "over all shapes" "$OUT/smallm.txt" | tail -12
  pack fp4w4
  ;;
mmatests)
  # the MMA GEMV's GPU tests after mma_zero_fill also asks x to cover the padded rows
  run mmatests 240 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_triton.py -k "mma or e2m1_code or every"
  tail -3 "$OUT/mmatests.txt"
  ;;
smallm8)
  # 8-bit M = 5..8 on the MMA GEMV for the small weights (MMA_FP8_M8_MAX_CODES) against the dot
  # kernel (variants/prev = the commit before); the MMA GEMV's GPU tests for the 8-bit formats
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  run mmatests8 100 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_triton.py -k "mma_gemv and (e5m2 or e4m3)"
  tail -2 "$OUT/mmatests8.txt"
  b="python3 -m softfp8.bench small-m --preset llama3-8b --backends triton --formats e5m2,e4m3 --m 1,8"
  in_variant "$PWD/variants/prev" smallm-prev 70 $b --out "$OUT/r/smallm-prev.json"
  in_variant "$PWD" smallm-cur 70 $b --out "$OUT/r/smallm-cur.json"
  for v in prev cur; do echo "== $v"; grep -A8 "over all shapes" "$OUT/smallm-$v.txt" | tail -5; grep -E "(qkv|o) .* 8 +e" "$OUT/smallm-$v.txt" | cut -c1-110; done
  pack smallm8
  ;;
head8)
  # (prepared) MMA_FP8_MAX_N was decided under the bench's 3-pass warm-up: the 8-bit vocabulary
  # head at M = 1..4 with the table (dot kernel from M = 2) and with MMA_GEMV forced (table file)
  export SOFTFP8_FP8_DECODE=integer
  b="python3 -m softfp8.bench small-m --shape 128256,4096 --backends triton --formats e5m2,e4m3 --m 1,2,3,4"
  run head-table 90 $b --out "$OUT/head-table.json"
  SOFTFP8_TRITON_TABLE=benchmarks/head_mma_m24_table.json run head-mma 90 $b --out "$OUT/head-mma.json"
  tar -czf "$OUT/head8.tgz" -C "$OUT" $(cd "$OUT" && ls | grep -v tgz)
  rm -f "$OUT"/*.json "$OUT"/*.jsonl "$OUT"/*.md
  ;;
host9)
  # the eager call's host time after 6b13bff (select's early cache look-up, Linear's kept
  # PackedWeight, one argument check) against 922a9c9 (variants/prev), twice interleaved; then
  # the whole GPU suite on this commit
  mkdir -p "$OUT/r"
  for v in prev cur prev2 cur2; do
    case $v in cur*) d=$PWD ;; *) d=$PWD/variants/prev ;; esac
    in_variant "$d" "host-$v" 120 python3 benchmarks/gpu_host_overhead.py
  done
  for v in prev cur prev2 cur2; do echo "== $v"; grep -E "^(fp16|e5m2|e4m3|nvfp4) " "$OUT/host-$v.txt"; done
  run gputests 400 python3 -m pytest -q -m gpu -p no:cacheprovider tests/
  tail -3 "$OUT/gputests.txt"
  pack host9
  ;;
e2e9)
  # eager generate() of the 7B-shaped Llama after 6b13bff against 922a9c9 (variants/prev)
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  for v in prev cur; do
    case $v in cur*) d=$PWD ;; *) d=$PWD/variants/prev ;; esac
    in_variant "$d" "e2e-$v" 280 python3 benchmarks/gpu_e2e_generate.py --variants fp16,e5m2,nvfp4 --modes eager --short 8 --long 40 --repeats 2 --json "$OUT/r/e2e-$v.json"
  done
  for v in prev cur; do echo "== $v"; tail -8 "$OUT/e2e-$v.txt"; done
  pack e2e9
  ;;
groups9)
  # M = 9..16 on the MMA GEMV as two groups of 8 x rows (FP4 always, 8-bit small weights)
  # against the dot kernel (variants/prev = 922a9c9); the MMA GEMV's GPU tests first
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  run mmatests 240 python3 -m pytest -q -x -m gpu -p no:cacheprovider tests/test_triton.py -k "mma"
  tail -2 "$OUT/mmatests.txt"
  b="python3 -m softfp8.bench small-m --preset llama3-8b --backends triton --m 1,8,12,16"
  in_variant "$PWD/variants/prev" smallm-prev 150 $b --out "$OUT/r/smallm-prev.json"
  in_variant "$PWD" smallm-cur 150 $b --out "$OUT/r/smallm-cur.json"
  for v in prev cur; do echo "== $v"; grep -B2 -A10 "over all shapes" "$OUT/smallm-$v.txt" | tail -14; done
  pack groups9
  ;;
groups9b)
  # after groups9: the table with M = 9..16 on the MMA GEMV for FP4 only (NVFP4 heads M <= 12);
  # the small-m bench on it and the GPU tests of the Triton backend other than the MMA GEMV's
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  smallm_all 150
  run gputests 330 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_triton.py -k "not mma"
  tail -2 "$OUT/gputests.txt"
  pack groups9b
  ;;
wide10)
  # M = 9..16 on the MMA GEMV in one program that decodes each step's weights once for both
  # halves of x's rows (WIDE, block_m 16) against the table (FP4: two groups that each decode;
  # 8-bit: the dot kernel); the MMA GEMV's GPU tests first
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  run mmatests 200 python3 -m pytest -q -x -m gpu -p no:cacheprovider tests/test_triton.py -k "mma"
  tail -2 "$OUT/mmatests.txt"
  sweep_l3 sweepwide 340 --ms 12,16 --kernels mma_gemv --budget 320
  pack wide10
  ;;
wide10b)
  # after wide10: the table with M = 9..16 wide (FP4, E5M2 small weights); the MMA GEMV's GPU
  # tests (every config of the wide kernel), the small-m bench, the token (M = 1 unchanged?)
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  run mmatests 290 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_triton.py -k "mma"
  tail -2 "$OUT/mmatests.txt"
  smallm_all 170
  run token 60 python3 -m softfp8.bench token --preset llama2-7b --backends triton --out "$OUT/r/token.json"
  pack wide10b
  ;;
fp4m10)
  # FP4 at M = 2..8 runs the 32-row tiles; wide10 found the runs faster than the tiles at
  # M = 12..16 on gate_up and the head: sweep the runs (laid out for 2, 4, 8 rows) against them
  mkdir -p "$OUT/r"
  sweep_l3 sweepfp4m 230 --ms 2,4,8 --formats nvfp4,mxfp4 --kernels mma_gemv --budget 210
  pack fp4m10
  ;;
fp4m10b)
  # after fp4m10: FP4 M = 2..4 on the runs too; the small-m bench on the table, then the GPU
  # tests of the Triton backend other than the MMA GEMV's (auto dispatch at every M)
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  smallm_all 170
  run gputests 330 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_triton.py -k "not mma"
  tail -2 "$OUT/gputests.txt"
  pack fp4m10b
  ;;
s10final)
  # after fp4m10b: MXFP4 M = 3..4 back on the tiles but for vocabulary heads (_fp4_runs);
  # the small-m bench on the final table
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  smallm_all 170
  pack s10final
  ;;
host10)
  # the eager call's host time by the fastest of interleaved rounds (gpu_host_overhead.py's
  # new method), twice in a row: does it hold still where the means over 2000 calls moved 2x?
  mkdir -p "$OUT/r"
  run host-a 150 python3 benchmarks/gpu_host_overhead.py
  run host-b 150 python3 benchmarks/gpu_host_overhead.py
  paste <(grep " us$" "$OUT/host-a.txt") <(grep " us$" "$OUT/host-b.txt" | awk '{print $(NF-1)}')
  pack host10
  ;;
host10b)
  # the eager call's host time: module-level constexprs as `Const` (Triton compares every global
  # a kernel uses on each launch) and matmul's settings cached (`_plan`) against the commit
  # before (variants/prev: softfp8 and benchmarks), interleaved twice; then the Triton GPU tests
  mkdir -p "$OUT/r"
  host_ab
  run gputests 330 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_triton.py -k "not mma_gemv_matches"
  tail -2 "$OUT/gputests.txt"
  pack host10b
  ;;
e2e10)
  # generate() end to end, eager and static cache + CUDA graphs (torch.compile reduce-overhead),
  # an 8-layer 7B-shaped Llama (the 32-layer compile of a softfp8 model never finished inside a
  # step's limit), fp16 against E5M2 and NVFP4 (software FP8 decode)
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  run e2e 420 python3 benchmarks/gpu_e2e_generate.py --variants fp16,e5m2,nvfp4 --modes eager,static-compile --layers 8 --short 8 --long 40 --repeats 2 --json "$OUT/r/e2e.json"
  pack e2e10
  ;;
e2e10b)
  # e2e10 had E5M2 compiled at fp16's speed (2.65 against 2.62 ms a token) where NVFP4 took 1.92:
  # is it the 8-bit PDL mode (late) inside torch.compile's CUDA graphs? E5M2 with PDL off,
  # early, and the default again beside fp16
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  e="python3 benchmarks/gpu_e2e_generate.py --modes static-compile --layers 8 --short 8 --long 40 --repeats 2"
  run e2e-default 120 $e --variants fp16,e5m2 --json "$OUT/r/e2e-default.json"
  SOFTFP8_PDL=off run e2e-pdloff 80 $e --variants e5m2 --json "$OUT/r/e2e-pdloff.json"
  SOFTFP8_PDL=early run e2e-pdlearly 80 $e --variants e5m2 --json "$OUT/r/e2e-pdlearly.json"
  for v in default pdloff pdlearly; do echo "== $v"; grep -E "^(fp16|e5m2) " "$OUT/e2e-$v.txt"; done
  pack e2e10b
  ;;
hf11)
  # transformers' own Llama (separate q, k, v, gate and up): its whole decode step replayed as a
  # CUDA graph at 32 layers (gpu_e2e_step.py, every variant resident, interleaved rounds), and
  # the token and shapes benches on those linears (llama2-7b-hf)
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  run step 300 python3 benchmarks/gpu_e2e_step.py --json "$OUT/r/step.json"
  run token-hf 90 python3 -m softfp8.bench token --preset llama2-7b-hf --backends triton --out "$OUT/r/token-hf.json"
  run shapes-hf 150 python3 -m softfp8.bench shapes --preset llama2-7b-hf --backends triton --out "$OUT/r/shapes-hf.json"
  pack hf11
  ;;
graph11)
  # hf11's step found E4M3's graph replay off its eager step by 0.3% (E5M2, fp16 bit-equal):
  # a chain of linears as one graph against eager under each PDL mode (tests/test_gpu_graphs.py),
  # the 8-layer step with E4M3 under each mode, then the 32-layer step without E4M3
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  run graphtests 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_gpu_graphs.py
  grep -E "passed|failed|differ" "$OUT/graphtests.txt" | head -20
  for p in off late early; do
    SOFTFP8_PDL=$p run step-e4m3-$p 120 python3 benchmarks/gpu_e2e_step.py --variants fp16,e4m3 --layers 8 --rounds 3 --json "$OUT/r/step-e4m3-$p.json"
  done
  run step 240 python3 benchmarks/gpu_e2e_step.py --variants fp16,e5m2,nvfp4,mxfp4 --json "$OUT/r/step.json"
  pack graph11
  ;;
step11)
  # transformers' Llama decode step as one CUDA graph: 32 layers as eager modules, then 8 layers
  # through torch.compile (inductor fuses the glue between the linears), every variant
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  run step32 240 python3 benchmarks/gpu_e2e_step.py --json "$OUT/r/step32.json"
  run step8c 320 python3 benchmarks/gpu_e2e_step.py --layers 8 --compile --json "$OUT/r/step8c.json"
  pack step11
  ;;
stepprof)
  # step8c's compiled 8-layer step: E5M2 and NVFP4 spend 8-12 us a layer more than fp16 outside
  # their linears' bench times; which kernels
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  run step8cp 300 python3 benchmarks/gpu_e2e_step.py --layers 8 --compile --variants fp16,e5m2,nvfp4 --rounds 5 --profile 16 --json "$OUT/r/step8cp.json"
  pack stepprof
  ;;
step32c)
  # the compiled step at the model's real depth: 32 layers, every variant (step8c: ~15 s of
  # compile a variant at 8 layers)
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  run step32c 540 python3 benchmarks/gpu_e2e_step.py --compile --rounds 11 --json "$OUT/r/step32c.json"
  pack step32c
  ;;
pdlstep)
  # step32c: outside their linears' token time the formats' compiled step spends ~0.25 ms more
  # than fp16's. Each softfp8 kernel there follows an inductor kernel; is it the PDL launch?
  # Each format's step captured under off, late and early from one compiled model
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  run pdlstep 500 python3 benchmarks/gpu_e2e_step.py --compile --variants fp16,e5m2,nvfp4 --pdl-modes off,late,early --rounds 11 --json "$OUT/r/pdlstep.json"
  pack pdlstep
  ;;
final11)
  # the eleventh session's code on the GPU: the whole GPU suite (the launch settings split out
  # of _table into _device and _mma_table; the graph tests), then the token bench on the
  # llama3-8b layout transformers holds (separate q, k, v, gate, up; GQA k/v 1024 x 4096)
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  # 280 s ran 201 of the 224 GPU tests on a fresh machine (first compiles included): give 420
  run gputests 420 python3 -m pytest -q -m gpu -p no:cacheprovider tests/
  tail -3 "$OUT/gputests.txt"
  run token-l3hf 90 python3 -m softfp8.bench token --preset llama3-8b-hf --backends triton --out "$OUT/r/token-l3hf.json"
  pack final11
  ;;
hfsweep)
  # (prepared in the eleventh session, not yet run) transformers' own shapes at M = 1: the
  # 4096 x 4096 q/k/v/o run at 31-56% of read (`hf11`), and 1024 x 4096 (llama3 k/v) and
  # 11008 / 14336 x 4096 were never swept; sweep them, then the token bench on both -hf presets
  # with the table and with the sweep's winners (SOFTFP8_TRITON_TABLE), interleaved
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  run sweephf 260 python3 benchmarks/sweep_gemv.py --ms 1 --formats e5m2,e4m3,nvfp4,mxfp4 --kernels mma_gemv --mma-pipes 1:0,2:0 --mma-warps 1,2,4 --budget 230 --shapes "4096,4096;1024,4096;11008,4096;14336,4096" --out "$OUT/r/sweephf.json"
  grep -E "table:|BEST:" "$OUT/sweephf.txt" | head -40
  for v in table sweep table2 sweep2; do
    case $v in sweep*) t="$OUT/r/sweephf.json" ;; *) t="" ;; esac
    for p in llama2-7b-hf llama3-8b-hf; do
      SOFTFP8_TRITON_TABLE=$t run "token-$p-$v" 60 python3 -m softfp8.bench token --preset $p --backends triton --out "$OUT/r/token-$p-$v.json"
    done
  done
  pack hfsweep
  ;;
gen32|gen32b|gen32h)
  # (prepared in the eleventh session, not yet run) issue 8's last item: transformers'
  # generate() with static cache + torch.compile ("reduce-overhead": CUDA graphs) on the full
  # 32-layer 7B-shaped Llama, every format; compiling takes ~45 s a variant at 32 layers
  # (`step32c`), so two calls: gen32 fp16,e5m2,e4m3; gen32b fp16,nvfp4,mxfp4 (fp16 in each:
  # the same-process baseline); gen32h (thirteenth session, one call's device time left):
  # fp16,e5m2,nvfp4
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  vs=fp16,e5m2,e4m3; [ "$step" = gen32b ] && vs=fp16,nvfp4,mxfp4; [ "$step" = gen32h ] && vs=fp16,e5m2,nvfp4
  run "$step" 560 python3 benchmarks/gpu_e2e_generate.py --variants $vs --modes static-compile --layers 32 --short 8 --long 40 --repeats 2 --json "$OUT/r/$step.json"
  pack "$step"
  ;;
host11)
  # (prepared in the eleventh session, not yet run) the eleventh session's eager changes on the
  # GPU host (SOFTFP8_* reads through `_env`, `dispatch.load` from sys.modules, the facts dict)
  # against 69abccb; first: git archive 69abccb | tar -x -C variants/prev (not committed);
  # then the 24 MMA reference cases `final11` did not reach
  mkdir -p "$OUT/r"
  host_ab
  run mmaref 300 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_triton.py -k "mma_gemv_matches or depth_two or block_scales_apart"
  tail -2 "$OUT/mmaref.txt"
  pack host11
  ;;
e2eprof)
  # (prepared in the tenth session, not yet run) why compiled E5M2 generate() is no faster than
  # fp16 (e2e10): one compiled generate() of 16 tokens under torch.profiler per variant, kernels
  # ranked by device time a token
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  for v in fp16 e5m2 nvfp4; do
    # perf_hints: inductor says when it skips CUDA graphs, and why
    TORCH_LOGS=perf_hints run "prof-$v" 150 python3 benchmarks/gpu_e2e_profile.py --variant $v --layers 8 --tokens 16
  done
  for v in fp16 e5m2 nvfp4; do
    echo "== $v"; grep -ciE "skipping cudagraphs" "$OUT/prof-$v.txt"
    grep -A16 "^# $v" "$OUT/prof-$v.txt" | head -20
  done
  pack e2eprof
  ;;
m16sweep)
  # 8-bit M = 16 runs the dot kernel with settings never swept at 16 (o and qkv at 0.68-0.77 of
  # M = 1): sweep its settings on the llama3-8b shapes (the small ones first), then the bench
  # with the table and with the sweep's winners (SOFTFP8_TRITON_TABLE)
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  run sweep16 340 python3 benchmarks/sweep_gemv.py --ms 16 --formats e5m2,e4m3 --kernels small_m --budget 300 --shapes "4096,4096;6144,4096;4096,14336;28672,4096;128256,4096" --out "$OUT/r/sweep16.json"
  grep -E "table:|BEST:|M=16" "$OUT/sweep16.txt"
  b="python3 -m softfp8.bench small-m --preset llama3-8b --backends triton --formats e5m2,e4m3 --m 1,16"
  run smallm-table 90 $b --out "$OUT/r/smallm-table.json"
  SOFTFP8_TRITON_TABLE="$OUT/r/sweep16.json" run smallm-sweep 90 $b --out "$OUT/r/smallm-sweep.json"
  for v in table sweep; do echo "== $v"; grep -A8 "over all shapes" "$OUT/smallm-$v.txt" | tail -5; done
  pack m16sweep
  ;;
m16b)
  # the dot kernel unsplit at M = 9..16 from SMALL_M_UNSPLIT_PER_SM row blocks an SM, against
  # the commit before (variants/prev), interleaved; the Triton GPU tests of the dot kernel
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  ab_bench smallm 90 python3 -m softfp8.bench small-m --preset llama3-8b --backends triton --formats e5m2,e4m3 --m 1,12,16
  for v in prev cur prev2 cur2; do echo "== $v"; grep -A7 "over all shapes" "$OUT/smallm-$v.txt" | tail -4; grep -E "^gate_up .* (12|16) +e" "$OUT/smallm-$v.txt" | cut -c1-100; done
  run gputests 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_triton.py -k "not mma"
  tail -1 "$OUT/gputests.txt"
  pack m16b
  ;;
sweep9)
  # 8-bit at M = 8 on the dot kernel (large weights): split or not, as at M = 16 (m16sweep);
  # 8-bit M = 1 on gate_up and the head: the MMA GEMV's warps, tiles and splits on this
  # commit's kernels; then the shapes bench for the >= 100 MB GEMVs
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  run sweep8 120 python3 benchmarks/sweep_gemv.py --ms 5,8 --formats e5m2,e4m3 --kernels small_m --budget 100 --shapes "28672,4096;4096,14336" --out "$OUT/r/sweep8.json"
  grep -E "table:|BEST:|M=" "$OUT/sweep8.txt"
  run sweep1 200 python3 benchmarks/sweep_gemv.py --ms 1 --formats e5m2,e4m3 --kernels mma_gemv --mma-pipes 1:0,2:0 --mma-warps 2,4,8 --budget 180 --shapes "28672,4096;128256,4096" --out "$OUT/r/sweep1.json"
  grep -E "table:|BEST:|M=" "$OUT/sweep1.txt"
  run shapes 120 python3 -m softfp8.bench shapes --preset llama3-8b --backends triton --formats e5m2,e4m3 --out "$OUT/r/shapes.json"
  grep -E "^(gate_up|lm_head)" "$OUT/shapes.txt" | cut -c1-110
  pack sweep9
  ;;
s9final)
  # (named final9 at first, which an older step already was: that one ran instead, see BENCHMARKS)
  # (1) the dot kernel unsplit at M = 5..8 too (this commit) against the commit before
  # (variants/prev), 8-bit M = 1, 5, 8; (2) 8-bit M = 1 in 2 warps from 16384 rows
  # (benchmarks/fp8_m1_warps2_table.json) against the table's 4: token and shapes, interleaved
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  ab_bench smallm 45 python3 -m softfp8.bench small-m --preset llama3-8b --backends triton --formats e5m2,e4m3 --m 1,5,8
  for v in prev cur prev2 cur2; do echo "== $v"; grep -E "^(gate_up|down|lm_head) .* [58] +e" "$OUT/smallm-$v.txt" | cut -c1-100; done
  t="python3 -m softfp8.bench token --preset llama2-7b --backends triton --formats e5m2,e4m3"
  s="python3 -m softfp8.bench shapes --preset llama3-8b --backends triton --formats e5m2,e4m3"
  for v in w4 w2 w4b w2b; do
    case $v in w2*) export SOFTFP8_TRITON_TABLE=$PWD/benchmarks/fp8_m1_warps2_table.json ;; *) unset SOFTFP8_TRITON_TABLE ;; esac
    run "token-$v" 40 $t --out "$OUT/r/token-$v.json"
    case $v in w4|w2) run "shapes-$v" 40 $s --out "$OUT/r/shapes-$v.json" ;; esac
  done
  unset SOFTFP8_TRITON_TABLE
  for v in w4 w2 w4b w2b; do echo "== $v"; grep -E "^(torch float16|e5m2|e4m3) " "$OUT/token-$v.txt" | cut -c1-90; grep -sE "^(gate_up|lm_head) .*(e5m2|e4m3)" "$OUT/shapes-$v.txt" | cut -c1-100; done
  pack s9final
  ;;
splitk12)
  # split-K reduced by each tile's last program (`_splitk`, twelfth session): its GPU tests (the
  # reduce kernel's bits for every format and MMA mapping, graphs with and without counters made
  # before capture), test_triton (the MMA reference cases final11 did not reach) and the graph
  # tests; then the token bench on transformers' llama2 layout (NVFP4 splits q/k/v/o and down)
  # and the fused one, with SOFTFP8_SPLITK_REDUCE=kernel / last interleaved twice
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  run gputests 250 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_splitk.py tests/test_triton.py tests/test_gpu_graphs.py
  tail -3 "$OUT/gputests.txt"
  for v in kernel last kernel2 last2; do
    for p in llama2-7b-hf llama2-7b; do
      case $p$v in llama2-7b[kl]*2) continue ;; esac  # the fused layout once each (time)
      SOFTFP8_SPLITK_REDUCE=${v%2} run "token-$p-$v" 50 python3 -m softfp8.bench token --preset $p --backends triton --out "$OUT/r/token-$p-$v.json"
    done
  done
  for f in "$OUT"/token-*.txt; do echo "== $f"; grep -E "^(torch float16|e5m2|e4m3|nvfp4|mxfp4) " "$f" | cut -c1-90; done
  pack splitk12
  ;;
splitk12b)
  # split-K's last-program reduce now eager-only (splitk12: graphs 0.7-2.7% slower for FP4):
  # the host time a call with it and with the reduce kernel (NVFP4 4096 x 4096 splits 2), then
  # the whole GPU suite (splitk12's 250 s ran 71 tests: --durations says where the time goes)
  mkdir -p "$OUT/r"
  run host 120 python3 benchmarks/gpu_host_overhead.py
  grep " us$" "$OUT/host.txt"
  run gputests 440 python3 -m pytest -q -m gpu -p no:cacheprovider --durations=12 tests/
  tail -22 "$OUT/gputests.txt"
  pack splitk12b
  ;;
hf12)
  # the five GPU tests splitk12b's 440 s did not reach (the last MMA reference cases), then
  # `hfsweep` cut to one call: transformers' q/k/v/o (4096 x 4096), k/v of llama3 (1024 x 4096)
  # and gate/up (11008 / 14336 x 4096) swept at M = 1, and the llama2-7b-hf token with the table
  # and with the sweep's winners, interleaved
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  run gputests 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_triton.py -k "37-264-9-2 or depth_two or block_scales_apart"
  tail -3 "$OUT/gputests.txt"
  run sweephf 215 python3 benchmarks/sweep_gemv.py --ms 1 --formats e5m2,e4m3,nvfp4,mxfp4 --kernels mma_gemv --mma-pipes 1:0,2:0 --mma-warps 1,2,4 --budget 190 --shapes "4096,4096;1024,4096;11008,4096;14336,4096" --out "$OUT/r/sweephf.json"
  grep -E "table:|BEST:" "$OUT/sweephf.txt" | head -40
  for v in table sweep table2 sweep2; do
    case $v in sweep*) t="$OUT/r/sweephf.json" ;; *) t="" ;; esac
    SOFTFP8_TRITON_TABLE=$t run "token-hf-$v" 45 python3 -m softfp8.bench token --preset llama2-7b-hf --backends triton --out "$OUT/r/token-hf-$v.json"
  done
  for v in table sweep table2 sweep2; do echo "== $v"; grep -E "^(torch float16|e5m2|e4m3|nvfp4|mxfp4) " "$OUT/token-hf-$v.txt" | cut -c1-90; done
  pack hf12
  ;;
fp4w1)
  # FP4 M = 1 on 8192..16383 rows in one-warp programs (MMA_FP4_M1_ONE_WARP_ROWS, from the
  # hf12 sweep) against the commit before (variants/prev): the MMA reference cases with the
  # one-warp config first, then the token of three presets (FP4 only), interleaved twice
  mkdir -p "$OUT/r"
  run gputests 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_triton.py -k "mma_gemv_matches_reference and (4103 or 1000-11008)"
  tail -3 "$OUT/gputests.txt"
  for p in llama2-7b-hf llama3-8b-hf llama2-7b; do
    ab_bench "token-$p" 40 python3 -m softfp8.bench token --preset $p --backends triton --formats nvfp4,mxfp4
  done
  for f in "$OUT"/token-*.txt; do echo "== $f"; grep -E "^(torch float16|nvfp4|mxfp4) " "$f" | cut -c1-90; done
  pack fp4w1
  ;;
noinline13)
  # split-K's last-program reduce as a called (noinline) function taking scalars (sm_90
  # cross-compile: FP4 MMA GEMV at M = 1 128 -> 100/121 registers, E4M3's 8-row runs lose their
  # spill), and counters for captured launches again (SOFTFP8_SPLITK_REDUCE=last): its GPU tests
  # and the graph tests, then the token of transformers' llama2 layout and the fused one with
  # the reduce kernel in graphs (eager, the default) and the fused reduce (last), interleaved.
  # Ran on f09920a (2026-12-01 22:50 UTC); slower in graphs again, reverted after: SOFTFP8_SPLITK_REDUCE
  # takes no "eager" since
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  run gputests 180 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_splitk.py tests/test_gpu_graphs.py
  tail -3 "$OUT/gputests.txt"
  for v in eager last eager2 last2; do
    for p in llama2-7b-hf llama2-7b; do
      SOFTFP8_SPLITK_REDUCE=${v%2} run "token-$p-$v" 50 python3 -m softfp8.bench token --preset $p --backends triton --out "$OUT/r/token-$p-$v.json"
    done
  done
  for f in "$OUT"/token-*.txt; do echo "== $f"; grep -E "^(torch float16|e5m2|e4m3|nvfp4|mxfp4) " "$f" | cut -c1-90; done
  pack noinline13
  ;;
hint13)
  # the weight codes' loads in the MMA GEMV with an L2 prefetch-size hint (SOFTFP8_MMA_LOAD_HINT,
  # an experiment: the L2 fetches 256 bytes around each 16-byte access; a row's 64 bytes a step
  # are two 32-byte sectors) and without L1 allocation; per shape (llama3-8b incl. lm_head and
  # 28672-row gate_up) and the llama2-7b token, the variants interleaved, two rounds; each
  # variant its own Triton cache (the hint is a global the kernels read). Ran on 5db434c
  # (2026-12-01 23:15 UTC): 8-bit slower with either hint, FP4 the same; the hook reverted after
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  for r in "" 2; do
    for v in none l2_256 noalloc_256; do
      case $v in none) h="" ;; l2_256) h=".L2::256B" ;; noalloc_256) h=".L1::no_allocate.L2::256B" ;; esac
      SOFTFP8_MMA_LOAD_HINT=$h TRITON_CACHE_DIR=/tmp/tc-$v run "shapes-$v$r" 45 python3 -m softfp8.bench shapes --preset llama3-8b --backends triton --out "$OUT/r/shapes-$v$r.json"
      SOFTFP8_MMA_LOAD_HINT=$h TRITON_CACHE_DIR=/tmp/tc-$v run "token-$v$r" 50 python3 -m softfp8.bench token --preset llama2-7b --backends triton --out "$OUT/r/token-$v$r.json"
    done
  done
  for f in "$OUT"/token-*.txt; do echo "== $f"; grep -E "^(torch float16|e5m2|e4m3|nvfp4|mxfp4) " "$f" | cut -c1-90; done
  pack hint13
  ;;
prof32)
  # gen32h: compiled 32-layer generate() NVFP4 139.8 tok/s against fp16 147.5 and E5M2 198.3,
  # where the 8-layer run (e2e10) had NVFP4 fastest: one compiled generate() of 16 tokens under
  # torch.profiler at 32 layers, fp16 and nvfp4, kernels ranked by device time a token
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  for v in nvfp4 fp16; do
    TORCH_LOGS=perf_hints run "prof-$v" 220 python3 benchmarks/gpu_e2e_profile.py --variant $v --layers 32 --tokens 16
  done
  for v in nvfp4 fp16; do
    echo "== $v"; grep -ciE "skipping cudagraphs" "$OUT/prof-$v.txt"
    grep -A16 "^# $v" "$OUT/prof-$v.txt" | head -20
  done
  pack prof32
  ;;
gen32r)
  # gen32h again, NVFP4 first and four timed pairs a row: is NVFP4's 139.8 tok/s (fp16 147.5)
  # the variant or the order / the noise of two pairs? (prof32: NVFP4's profiled generate()
  # recorded a CUDA graph again, fp16's did not)
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  run "$step" 560 python3 benchmarks/gpu_e2e_generate.py --variants nvfp4,fp16,e5m2 --modes static-compile --layers 32 --short 8 --long 40 --repeats 4 --json "$OUT/r/$step.json"
  pack "$step"
  ;;
rerec14)
  # (fourteenth session) why compiled generate() records CUDA graphs inside timed calls (prof32:
  # NVFP4 at 32 layers; e2eprof: E5M2 at 8): TORCH_LOGS +cudagraphs (each recording, and a
  # re-recording's reason) and recompiles, with each generate() call marked (--log-calls);
  # 8 layers for three variants, then NVFP4 at 32
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  TORCH_LOGS="+cudagraphs,recompiles" run rerec8 240 python3 benchmarks/gpu_e2e_generate.py --variants nvfp4,e5m2,fp16 --modes static-compile --layers 8 --short 8 --long 24 --repeats 2 --log-calls --json "$OUT/r/rerec8.json"
  TORCH_LOGS="+cudagraphs,recompiles" run rerec32 300 python3 benchmarks/gpu_e2e_generate.py --variants nvfp4 --modes static-compile --layers 32 --short 8 --long 40 --repeats 2 --log-calls --json "$OUT/r/rerec32.json"
  for f in rerec8 rerec32; do
    echo "== $f"
    grep -E "^## generate|Re-recording|Recording function|Recompiling|^(fp16|e5m2|nvfp4) " "$OUT/$f.txt" | cut -c1-240 | head -100
  done
  pack rerec14
  ;;
rerec14b)
  # rerec14: NVFP4's compiled generate() fails the replay check of the graph it recorded for the
  # grown cache (E5M2 and fp16 do not); TORCH_LOGS=+cudagraphs then asserts inside torch. Here
  # --log-calls' own probe says which check fails and which inputs moved; then NVFP4 with
  # SOFTFP8_SPLITK_REDUCE=kernel (no split-K counter pool: is its first allocation the cause?)
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  TORCH_LOGS=recompiles run rerec8b 200 python3 benchmarks/gpu_e2e_generate.py --variants nvfp4,e5m2 --modes static-compile --layers 8 --short 8 --long 24 --repeats 2 --log-calls --json "$OUT/r/rerec8b.json"
  SOFTFP8_SPLITK_REDUCE=kernel run rerec8k 150 python3 benchmarks/gpu_e2e_generate.py --variants nvfp4 --modes static-compile --layers 8 --short 8 --long 24 --repeats 2 --log-calls --json "$OUT/r/rerec8k.json"
  for f in rerec8b rerec8k; do
    echo "== $f"
    grep -E "^## |Recompiling|^(fp16|e5m2|nvfp4) " "$OUT/$f.txt" | cut -c1-400 | head -60
  done
  pack rerec14b
  ;;
rerec14c)
  # rerec14b: NVFP4's compiled generate() recorded its decode graph again because half the
  # layers' static caches moved (per-call split-K workspaces in the caching allocator; E5M2 and
  # fp16 none). Now eager split launches keep a workspace per stream: the GPU split/graph/
  # compile tests, then the probe at 8 layers (expect no failed replay check), then fp16 and
  # NVFP4 compiled generate() at 32 layers without the probe (gen32h/gen32r had re-recordings)
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  run gputests 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_splitk.py tests/test_gpu_graphs.py tests/test_compile.py
  run gputests2 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_triton.py -k "split or mma_gemv_matches"
  tail -2 "$OUT/gputests.txt" "$OUT/gputests2.txt"
  run rerec8c 150 python3 benchmarks/gpu_e2e_generate.py --variants nvfp4 --modes static-compile --layers 8 --short 8 --long 24 --repeats 2 --log-calls --json "$OUT/r/rerec8c.json"
  grep -E "^## |^nvfp4 " "$OUT/rerec8c.txt" | cut -c1-200 | uniq -c | head -40
  run gen32w 330 python3 benchmarks/gpu_e2e_generate.py --variants nvfp4,fp16 --modes static-compile --layers 32 --short 8 --long 40 --repeats 3 --json "$OUT/r/gen32w.json"
  pack rerec14c
  ;;
rerec14d)
  # rerec14c: the stream workspace, first made in the CUDA-graph trees' warm-up (its own stream,
  # allocating into the graph's pool), made recording refuse ("tensor(s) in the cudagraph pool
  # not tracked as outputs"); the kept buffers are now made on the default stream. Same checks
  # as rerec14c (the test_triton run dropped: it outran its limit, nothing failed)
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  run gputests 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_splitk.py tests/test_gpu_graphs.py tests/test_compile.py
  run rerec8d 150 python3 benchmarks/gpu_e2e_generate.py --variants nvfp4 --modes static-compile --layers 8 --short 8 --long 24 --repeats 2 --log-calls --json "$OUT/r/rerec8d.json"
  grep -E "^## |^nvfp4 " "$OUT/rerec8d.txt" | cut -c1-200 | uniq -c | head -40
  run gen32w 300 python3 benchmarks/gpu_e2e_generate.py --variants nvfp4,fp16 --modes static-compile --layers 32 --short 8 --long 40 --repeats 3 --json "$OUT/r/gen32w.json"
  pack rerec14d
  ;;
rerec14e)
  # rerec14d: the default stream did not escape the warm-up's pool (torch sends every allocation
  # of the warming thread there); the kept buffers are now made on a thread of their own. The
  # new GPU test (reduce-overhead with nothing eager first) and the 8-layer probe (device time
  # left: ~4 minutes)
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  run gputests 100 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_compile.py tests/test_splitk.py
  run rerec8e 110 python3 benchmarks/gpu_e2e_generate.py --variants nvfp4 --modes static-compile --layers 8 --short 8 --long 24 --repeats 2 --log-calls --json "$OUT/r/rerec8e.json"
  tail -2 "$OUT/gputests.txt"
  grep -E "^## |^nvfp4 " "$OUT/rerec8e.txt" | cut -c1-200 | uniq -c | head -40
  pack rerec14e
  ;;
gen32x)
  # (prepared in the fourteenth session, not yet run) the 32-layer compiled generate() with the
  # warm-up that goes on while a pair of calls records a CUDA graph, and the count of graphs
  # recorded in timed calls in each row (gen32h/gen32r swung with such recordings); also the
  # first GPU run of split-K's counters made apart without the reverted workspace
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  run gputests 100 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_compile.py tests/test_splitk.py
  tail -1 "$OUT/gputests.txt"
  run "$step" 480 python3 benchmarks/gpu_e2e_generate.py --variants nvfp4,fp16,e5m2 --modes static-compile --layers 32 --short 8 --long 40 --repeats 3 --json "$OUT/r/$step.json"
  pack "$step"
  ;;
rerec15)
  # (prepared in the fourteenth session, not yet run) what moves NVFP4's static caches at the
  # third compiled generate() (rerec14b/rerec14e): --log-calls now also says how many static
  # caches are still alive when a call starts; then the same with gc.collect() before each call
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  run rerec15a 150 python3 benchmarks/gpu_e2e_generate.py --variants nvfp4,e5m2 --modes static-compile --layers 8 --short 8 --long 24 --repeats 2 --log-calls --json "$OUT/r/rerec15a.json"
  run rerec15b 150 python3 benchmarks/gpu_e2e_generate.py --variants nvfp4 --modes static-compile --layers 8 --short 8 --long 24 --repeats 2 --log-calls --gc-each-call --json "$OUT/r/rerec15b.json"
  for f in rerec15a rerec15b; do
    echo "== $f"
    grep -E "^## |^(e5m2|nvfp4) " "$OUT/$f.txt" | cut -c1-160 | uniq -c | head -50
  done
  pack rerec15
  ;;
inj15)
  # FP4 in Kernel.MMA_GEMV decoded by exponent injection (e2m1=inject, which auto picks on the
  # H200: its probe measured no FTZ) against the table decode (SOFTFP8_E2M1_DECODE=select), the
  # same code, interleaved: token select / inject / select / inject; FP4 shapes (inject); the mma
  # probe (table, inject, no decode, loads only); first the GPU tests of the MMA GEMV and codes
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  run gputests 240 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_triton.py -k "mma or e2m1_code or every"
  tail -3 "$OUT/gputests.txt"
  for v in sel inj sel2 inj2; do
    case $v in sel*) export SOFTFP8_E2M1_DECODE=select ;; *) export SOFTFP8_E2M1_DECODE=auto ;; esac
    run "token-$v" 90 python3 -m softfp8.bench token --preset llama2-7b --backends triton --formats nvfp4,mxfp4 --out "$OUT/r/token-$v.json"
  done
  export SOFTFP8_E2M1_DECODE=auto
  run shapes-inj 120 python3 -m softfp8.bench shapes --preset llama3-8b --backends triton --formats nvfp4,mxfp4 --out "$OUT/r/shapes-inj.json"
  run probe 150 python3 benchmarks/gpu_mma_probe.py --formats nvfp4,mxfp4 --shapes "22016,4096;4096,11008"
  pack inj15
  ;;
inj15b)
  # inj15's GPU tests ran out of time (all passing so far): the injection decode's own tests;
  # then FP4 M = 1 at depth 2 (benchmarks/fp4_depth2_table.json; the injection decode holds two
  # steps in 168 registers where the table decode's ptxas keeps 127) against the built-in table,
  # both decoding by injection, interleaved
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  run gputests 300 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_triton.py -k "(mma_gemv_matches_reference and inject) or (e2m1_code and mma) or block_scales"
  tail -3 "$OUT/gputests.txt"
  root=$PWD
  for v in cur depth2 cur2 depth2b; do
    case $v in depth2*) tab=$root/benchmarks/fp4_depth2_table.json ;; *) tab= ;; esac
    SOFTFP8_TRITON_TABLE=$tab run "token-$v" 90 python3 -m softfp8.bench token --preset llama2-7b --backends triton --formats nvfp4,mxfp4 --out "$OUT/r/token-$v.json"
  done
  pack inj15b
  ;;
final15)
  # the session's final numbers in one call: token (every format) and shapes (llama3-8b, every
  # format) on the injection decode's commit; then rerec15's first half (static caches alive
  # at each compiled generate() call)
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  run token-final 90 python3 -m softfp8.bench token --preset llama2-7b --backends triton --out "$OUT/r/token-final.json"
  run shapes-final 150 python3 -m softfp8.bench shapes --preset llama3-8b --backends triton --out "$OUT/r/shapes-final.json"
  run rerec15a 150 python3 benchmarks/gpu_e2e_generate.py --variants nvfp4,e5m2 --modes static-compile --layers 8 --short 8 --long 24 --repeats 2 --log-calls --json "$OUT/r/rerec15a.json"
  grep -E "^## |^(e5m2|nvfp4) " "$OUT/rerec15a.txt" | cut -c1-160 | uniq -c | head -40
  pack final15
  ;;
ncu15)
  # Nsight Compute on the FP4 M = 1 MMA GEMV (22016 x 4096), table (select) and injection decode:
  # pipe utilisation (is the integer ALU the limit?), warp stalls, occupancy (clocks left alone)
  NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  echo "ncu: $NCU"
  mkdir -p "$OUT/r"
  run ncu15 300 "$NCU" --clock-control none --section SpeedOfLight --section ComputeWorkloadAnalysis --section SchedulerStats --section WarpStateStats --section Occupancy --section InstructionStats -k regex:mma_gemv --launch-skip 1 -c 7 python3 benchmarks/gpu_ncu_target.py --formats nvfp4,mxfp4 --e2m1 select,inject --launches 0
  grep -E "^  [a-z_]+|Duration|Throughput|Issue Slots|Issued Warp|Eligible|Active Warps|Registers|Achieved Occupancy|Stall|pipe|Pipe|ALU|FMA" "$OUT/ncu15.txt" | head -150
  pack ncu15
  ;;
nreg15)
  # ncu15: FP4's M = 1 kernel is occupancy-bound (4 warps a scheduler, 123 registers, ALU 45-58%
  # busy): the injection decode held to fewer registers by ptxas (112: 9 programs an SM, spills
  # 32 bytes; 96: 10, spills 208), the table's setting, twice
  mkdir -p "$OUT/r"
  run nreg15 200 python3 benchmarks/gpu_mma_probe.py --formats nvfp4,mxfp4 --shapes "22016,4096;4096,11008;22016,4096" --maxnreg 112,104,96
  pack nreg15
  ;;
gpu15)
  # the GPU suite on the session's final code (auto now decodes FP4 by injection on the H200),
  # less the MMA GEMV's select-path cases (code unchanged, ~40 cases of compiles)
  mkdir -p "$OUT/r"
  run gputests 270 python3 -m pytest -q -m gpu -p no:cacheprovider tests/ -k "not (mma_gemv_matches_reference and select)"
  tail -3 "$OUT/gputests.txt"
  pack gpu15
  ;;
ring16)
  # the shared-memory ring (cp.async, RING - 1 steps ahead, no registers held; LaunchConfig.ring):
  # a sweep of ring against the table's settings at M = 1 (llama2-7b's four shapes and the
  # 128256-row head; the sweep flags a wrong result), then correctness at every stage/warp class
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  SH="12288,4096;4096,4096;22016,4096;4096,11008;128256,4096"
  run ringsweep 300 python3 benchmarks/sweep_gemv.py --formats nvfp4,e5m2 --e2m1 inject --kernels mma_gemv --mma-pipes 1:0,2:0,1:0:2,1:0:3,1:0:4 --mma-warps 1,2,4 --mma-tiles 2 --shapes "$SH" --budget 280 --out "$OUT/r/ringsweep.json"
  grep -E "table:|BEST|WRONG|FAILED|fp16 F.linear" "$OUT/ringsweep.txt" | head -60
  run ringtest 220 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_triton.py -k "ring and (inject or e5m2 or needs) and (4103-4096 or 1000-11008 or 300-2048-8 or 40-4080 or 64-4104 or needs)"
  tail -3 "$OUT/ringtest.txt"
  pack ring16
  ;;
ring16b)
  # the token with the sweep's winners (ring16's receipt, committed as benchmarks/ring16_table.json)
  # against the built-in table, twice interleaved, same process order each time
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  for v in base ring base2 ring2; do
    case $v in ring*) T=benchmarks/ring16_table.json ;; *) T= ;; esac
    run "token-$v" 100 env SOFTFP8_TRITON_TABLE=$T python3 -m softfp8.bench token --preset llama2-7b --backends triton --formats e5m2,nvfp4,mxfp4 --out "$OUT/r/token-$v.json"
  done
  pack ring16b
  ;;
ncu16)
  # ring16: the ring ran 7x slower than the registers (300-590 GB/s, any stage count): Nsight
  # Compute on the table's setting and the ring (3 stages), E5M2 and NVFP4, 22016 x 4096
  NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  mkdir -p "$OUT/r"
  run ncu16 300 "$NCU" --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --section SchedulerStats --section WarpStateStats --section Occupancy --section LaunchStats -k regex:mma_gemv --launch-skip 1 -c 7 python3 benchmarks/gpu_ncu_target.py --formats e5m2,nvfp4 --ring 3 --launches 0
  grep -E "^  [a-z_]+|Duration|Throughput|Bank|bank|Shared|Wavefront|Registers|Achieved Occupancy|Block Limit|Stall|stall|Warp Cycles|Eligible|Active Warps|Issued" "$OUT/ncu16.txt" | head -200
  pack ncu16
  ;;
ring16c)
  # the ring with each piece laid thread after thread (a warp's copy is 512 contiguous bytes;
  # ring16's layout, each thread's 144 bytes together, ran 7x slow on a full MIO queue): ring
  # tests, Nsight Compute on the table's setting and the ring, a sweep on three shapes
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  run ringtest 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_triton.py -k "ring and (inject or e5m2 or needs) and (4103-4096 or 300-2048-8 or 40-4080 or 64-4104 or needs)"
  tail -3 "$OUT/ringtest.txt"
  NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  run ncu16c 150 "$NCU" --clock-control none --section SpeedOfLight --section SchedulerStats --section WarpStateStats --section Occupancy -k regex:mma_gemv --launch-skip 1 -c 7 python3 benchmarks/gpu_ncu_target.py --formats e5m2,nvfp4 --ring 3 --launches 0
  grep -E "^(e5m2|nvfp4)|Duration|DRAM Throughput|Registers Per|Achieved Active|Warp Cycles Per Issued|stalled" "$OUT/ncu16c.txt" | head -60
  run ringsweep 200 python3 benchmarks/sweep_gemv.py --formats nvfp4,e5m2 --e2m1 inject --kernels mma_gemv --mma-pipes 1:0,2:0,1:0:2,1:0:3,1:0:4 --mma-warps 1,2 --mma-tiles 2 --shapes "22016,4096;4096,11008;128256,4096" --budget 180 --out "$OUT/r/ringsweep-c.json"
  grep -E "table:|BEST|WRONG|FAILED|fp16 F.linear" "$OUT/ringsweep.txt" | head -40
  pack ring16c
  ;;
ring16d)
  # ring16c: still 5x slow with contiguous pieces (warps stall on a full MIO queue and on LDS
  # results). Which part: x through the ring or by registers, the ring's loads alone (no mma);
  # then the per-instruction stalls of the ring kernel (Nsight Compute source page, SASS)
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  run ringprobe 200 python3 benchmarks/gpu_mma_probe.py --formats e5m2,nvfp4 --shapes "22016,4096;4096,11008" --ring 2,3,4
  NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  run ncusrc 150 "$NCU" --clock-control none --section SourceCounters --section WarpStateStats --page source --print-source sass -k regex:mma_gemv --launch-skip 3 -c 1 python3 benchmarks/gpu_ncu_target.py --formats e5m2 --ring 3 --launches 0
  head -c 3000 "$OUT/ncusrc.txt"
  pack ring16d
  ;;
ring16e)
  # ring16d: x through the ring (.cg copies: every SM's warps on the same few L2 lines) was the
  # 5x; x by registers ran as fast as the table. x now copied through L1 (.ca): the probe again,
  # then a sweep of the ring against the table on llama2-7b's shapes and the 128256-row head
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  run ringprobe2 120 python3 benchmarks/gpu_mma_probe.py --formats e5m2,nvfp4 --shapes "22016,4096;4096,11008" --ring 2,3
  SH="12288,4096;4096,4096;22016,4096;4096,11008;128256,4096"
  run ringsweep2 330 python3 benchmarks/sweep_gemv.py --formats nvfp4,e5m2,mxfp4 --e2m1 inject --kernels mma_gemv --mma-pipes 1:0,2:0,1:0:2,1:0:3 --mma-warps 1,2,4 --mma-tiles 2 --shapes "$SH" --budget 310 --out "$OUT/r/ringsweep2.json"
  grep -E "table:|BEST|WRONG|FAILED|fp16 F.linear" "$OUT/ringsweep2.txt" | head -60
  pack ring16e
  ;;
ring16f)
  # 8-bit M = 1 below 8192 rows on the ring (3 stages) against the table before (variants/prev:
  # git archive of the commit before), interleaved: token E5M2/E4M3 twice each; llama3-8b shapes
  # once each (4096 x 14336 and 6144 x 4096 unmeasured on the ring); the ring's GPU tests
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  ab_bench token 80 python3 -m softfp8.bench token --preset llama2-7b --backends triton --formats e5m2,e4m3
  for v in prev cur; do
    case $v in cur) d=$PWD ;; *) d=$PWD/variants/prev ;; esac
    in_variant "$d" "shapes-$v" 100 python3 -m softfp8.bench shapes --preset llama3-8b --backends triton --formats e5m2,e4m3 --out "$OUT/r/shapes-$v.json"
  done
  run ringtest 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_triton.py -k "ring and (e4m3 or e5m2 or needs) and (4103-4096 or 300-2048-8 or 40-4080 or 64-4104 or 1000-11008 or needs)"
  tail -3 "$OUT/ringtest.txt"
  pack ring16f
  ;;
ring16g)
  # ring16f: the ring faster on every shape it took in the shapes bench (o 4096 x 4096 E5M2
  # 2.05x -> 2.27x fp16) but the token 2% slower (1.766 -> 1.803 ms). Hypothesis: the token's
  # kernels alternate between no shared memory and the ring's, and the SM's L1/shared split
  # changes at each such boundary. Every 8-bit shape on the ring (benchmarks/fp8_ring_all_table.json)
  # against prev and cur, interleaved twice
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  for v in prev cur all prev2 cur2 all2; do
    T=; d=$PWD
    case $v in prev*) d=$PWD/variants/prev ;; all*) T=$PWD/benchmarks/fp8_ring_all_table.json ;; esac
    in_variant "$d" "token-$v" 60 env SOFTFP8_TRITON_TABLE=$T python3 -m softfp8.bench token --preset llama2-7b --backends triton --formats e5m2,e4m3 --out "$OUT/r/token-$v.json"
  done
  pack ring16g
  ;;
final16)
  # the session's final numbers: every 8-bit M = 1 shape on the ring (ring16g); token and
  # llama3-8b shapes, every format; then the GPU tests of the MMA GEMV, codes and the ring
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  run token-final 80 python3 -m softfp8.bench token --preset llama2-7b --backends triton --out "$OUT/r/token-final.json"
  run shapes-final 120 python3 -m softfp8.bench shapes --preset llama3-8b --backends triton --out "$OUT/r/shapes-final.json"
  run gputests 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_triton.py -k "(mma or every or ring) and not (mma_gemv_matches_reference and select)"
  tail -3 "$OUT/gputests.txt"
  pack final16
  ;;
ring17)
  # (prepared in the sixteenth session, not run: its device time was spent) the ring at
  # M = 2..8 for 8-bit: a sweep on llama3-8b's shapes (the ring against two register buffers),
  # then the small-m bench with the sweep's fastest per shape (SOFTFP8_TRITON_TABLE) against
  # the built-in table, interleaved; the issue's small-m target is M = 2..16 against M = 1,
  # which the ring made faster
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  sweep_l3 ringm 300 --formats e5m2,e4m3 --ms 2,4,8 --kernels mma_gemv --mma-pipes 2:0,1:0:2,1:0:3 --mma-warps 2,4 --mma-tiles 2 --budget 280
  smallm_ab 90 "$OUT/r/ringm.json" 1,2,4,8 base ring
  pack ring17
  ;;
ring17b)
  # (seventeenth session) after ring17 (the ring won at M = 2..4, lost at 8): the ring at
  # M = 2..4 with splits for ~6 and ~12 resident warps an SM and none, M = 8 with 4 tiles a
  # warp against 2, then the small-m bench on the first sweep's table against the built-in one
  # (interleaved) and the whole small-m (M = 1..16) on the built-in table
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  sweep_l3 ringm2 200 --formats e5m2,e4m3 --ms 2,4 --kernels mma_gemv --mma-pipes 1:0:2,1:0:3 --mma-warps 2,4 --mma-tiles 2 --budget 170
  sweep_l3 m8 140 --formats e5m2,e4m3 --ms 8 --kernels mma_gemv --mma-pipes 2:0,1:0 --mma-warps 2,4 --mma-tiles 2,4 --budget 110
  smallm_ab 60 "$OUT/r/ringm2.json" 1,2,4,8 ring base ring2 base2
  smallm_all 100
  pack ring17b
  ;;
final17)
  # (seventeenth session) 8-bit M = 2..4 on the ring (MMA_FP8_RING_MAX_M): the ring's GPU tests
  # (each now also runs the table's own setting), the whole small-m and prefill
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  run gputests 240 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_triton.py -k "ring or domain"
  smallm_all 100
  run prefill 150 python3 -m softfp8.bench prefill --preset llama3-8b --backends triton --out "$OUT/r/prefill.json"
  pack final17
  ;;
dot17)
  # (seventeenth session) 8-bit M = 8..16 trail M = 1 (the head on the dot kernel: 139 us
  # against 118): the dot kernel's tiles and pipelines swept at M = 8 and 16, then small-m on
  # the sweep's fastest against the built-in table, interleaved
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  run dotm 270 python3 benchmarks/sweep_gemv.py --formats e5m2,e4m3 --ms 8,16 --kernels small_m --budget 250 --shapes "28672,4096;4096,14336;128256,4096" --out "$OUT/r/dotm.json"
  grep -E "x4096 M=|x14336 M=|table:|BEST:" "$OUT/dotm.txt" | cut -c1-110
  smallm_ab 60 "$OUT/r/dotm.json" 1,8,16 dot base dot2 base2
  pack dot17
  ;;
clk18)
  # (eighteenth session) E4M3's M = 1 vocabulary head takes 0.121 ms in some bench processes and
  # 0.136 in others (sessions 17, 18; E5M2 stays at 0.118-0.119): the head alone, six processes
  # in a row, with the SM clock, power and temperature logged every 200 ms beside them
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv -lms 200 > "$OUT/r/clocks.csv" 2>&1 &
  smi=$!
  for i in 1 2 3 4 5 6; do
    date +%T.%N | cut -c1-12 >> "$OUT/r/marks.txt"
    run "head-$i" 60 python3 -m softfp8.bench shapes --shape 128256,4096 --backends triton --formats e5m2,e4m3 --out "$OUT/r/head-$i.json"
    date +%T.%N | cut -c1-12 >> "$OUT/r/marks.txt"
    grep -E "^lm|128256" "$OUT/head-$i.txt" | grep -E "e4m3|e5m2" | cut -c1-110
  done
  kill $smi
  pack clk18
  ;;
dot18)
  # (eighteenth session) 8-bit M = 12 and 16 trail M = 1 by 10-12% (the head on the dot kernel
  # at ~130 us against ~119): deeper / wider dot tiles on the head and gate_up (sweep_gemv's
  # grid, four more settings), then small-m on the sweep's fastest against the built-in table,
  # interleaved twice
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  run dotw 280 python3 benchmarks/sweep_gemv.py --formats e5m2,e4m3 --ms 12,16 --kernels small_m --budget 260 --shapes "28672,4096;128256,4096" --out "$OUT/r/dotw.json"
  grep -E "x4096 M=|table:|BEST:" "$OUT/dotw.txt" | cut -c1-110
  smallm_ab 60 "$OUT/r/dotw.json" 1,12,16 dot base dot2 base2
  pack dot18
  ;;
tall17)
  # (seventeenth session) SMALL_M_FP8_TALL_ROWS in the built-in table against the commit
  # before (variants/prev), small-m at M = 1, 8, 16, interleaved twice (the bench checks
  # each result against the reference: its "ok" column)
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  ab_bench tall 60 python3 -m softfp8.bench small-m --preset llama3-8b --backends triton --formats e5m2,e4m3 --m 1,8,16
  for v in prev cur prev2 cur2; do echo "== $v"; grep -A9 "over all shapes" "$OUT/tall-$v.txt" | grep -E "e5m2|e4m3"; grep -c " ok " "$OUT/tall-$v.txt"; done
  pack tall17
  ;;
fp4d17)
  # (seventeenth session) FP4 M = 1 at depth 2 was 35% slower in a token at 168 registers
  # (fifteenth session) although its loop has no register moves (393 instructions a step
  # against 418 at depth 1, sm_90 SASS here); ptxas holds it to 136 without spills: the table's
  # setting against depth 2 at 168 / 136 registers, per shape
  mkdir -p "$OUT/r"
  run fp4d 200 python3 benchmarks/gpu_mma_probe.py --formats nvfp4,mxfp4 --shapes "22016,4096;11008,4096;4096,11008;4096,4096" --maxnreg 136 --depth2
  pack fp4d17
  ;;
final17b)
  # (seventeenth session) the final numbers on the final table: the llama2-7b token (M = 1,
  # unchanged kernels: a check) and the whole small-m (M = 12 had run before the tall tiles)
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  run token-final 80 python3 -m softfp8.bench token --preset llama2-7b --backends triton --out "$OUT/r/token-final.json"
  smallm_all 100
  pack final17b
  ;;
sm19)
  # (nineteenth session) 8-bit M = 12 / 16 at 0.884-0.900 of M = 1's bandwidth over llama3-8b's
  # shapes: the head and gate_up were swept (dot17, dot18), the three small shapes (qkv, o,
  # down: 0.64-0.77 of their M = 1 bandwidth) only at M = 2..8 (ring17) or down alone (dot17);
  # here they are swept at M = 12 and 16 over the dot kernel's and the MMA GEMV's grids
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  run sm 290 python3 benchmarks/sweep_gemv.py --formats e5m2,e4m3 --ms 12,16 --kernels small_m,mma_gemv --budget 270 --shapes "6144,4096;4096,4096;4096,14336" --out "$OUT/r/sm.json"
  grep -E "x4096 M=|x14336 M=|table:|BEST:" "$OUT/sm.txt" | cut -c1-110
  pack sm19
  ;;
e4h19)
  # (nineteenth session) E4M3's M = 1 head takes 0.121 ms in some processes and 0.136 in others
  # (sessions 17, 18; not the SM clock: clk18). Both PDL on (the table's late launch) and off,
  # alternating, six processes each: does the bimodality follow the launch overlap?
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  for i in 1 2 3 4 5 6; do
    for pdl in auto off; do
      run "head-$pdl-$i" 60 env SOFTFP8_PDL=$pdl python3 -m softfp8.bench shapes --shape 128256,4096 --backends triton --formats e5m2,e4m3 --out "$OUT/r/head-$pdl-$i.json"
      grep -E "128256" "$OUT/head-$pdl-$i.txt" | grep -E "e4m3|e5m2" | cut -c1-110
    done
  done
  pack e4h19
  ;;
mov21)
  # (twenty-first session) FP4 by injection at depth 1 with each tile's next-step loads right
  # after the tile (SASS: ~32 register moves a step gone, NVFP4 M = 1 418 -> 386 instructions)
  # against the commit before (variants/prev: git archive HEAD~1, not committed), interleaved
  # twice; then the MMA GEMV's GPU tests of the injection decode
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  ab_bench token 75 python3 -m softfp8.bench token --preset llama2-7b --backends triton --formats nvfp4,mxfp4
  run gputests 270 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_triton.py -k "mma_gemv_matches_reference and INJECT"
  tail -3 "$OUT/gputests.txt"
  pack mov21
  ;;
pdl25)
  # (twenty-fifth session) is 1.654 ms (E5M2's bytes) the ceiling of 128 kernels once they
  # overlap under PDL as softfp8's do? The read chain under each PDL mode; then the 8-bit token
  # (every M = 1 shape on the ring) under late (auto) and early, interleaved twice
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  run readchain 300 python3 benchmarks/gpu_read_chain.py --pdl off,late,early,early-all --json "$OUT/r/readchain.json"
  for v in late early late2 early2; do
    run "token-$v" 100 env SOFTFP8_PDL=${v%2} python3 -m softfp8.bench token --preset llama2-7b --backends triton --formats e5m2,e4m3 --out "$OUT/r/token-$v.json"
  done
  grep "read chain\|F.linear" "$OUT/readchain.txt"
  pack pdl25
  ;;
pf25)
  # (twenty-fifth session) pdl25: the read chain gained 0.09-0.16 ms (E5M2's bytes) when each
  # kernel loaded all its bytes before its PDL wait (early-all). Here: a bulk L2 prefetch of each
  # program's weights before the wait (early-l2; softfp8: SOFTFP8_PDL=early with
  # SOFTFP8_PDL_PREFETCH, the ring and the FP4 loads-first path now honour it), the token
  # interleaved twice, then the graph tests under the prefetch
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  run readchain 150 python3 benchmarks/gpu_read_chain.py --pdl late,early,early-all,early-l2 --tiles 2048x4x4,1024x4x4 --formats e5m2,nvfp4 --json "$OUT/r/readchain.json"
  for v in auto pf32k pf128k auto2 pf32k2 pf128k2; do
    case ${v%2} in
      auto) e="SOFTFP8_PDL=auto" ;;
      pf32k) e="SOFTFP8_PDL=early SOFTFP8_PDL_PREFETCH=32768" ;;
      pf128k) e="SOFTFP8_PDL=early SOFTFP8_PDL_PREFETCH=131072" ;;
    esac
    run "token-$v" 70 env $e python3 -m softfp8.bench token --preset llama2-7b --backends triton --out "$OUT/r/token-$v.json"
  done
  run gputests 120 env SOFTFP8_PDL_PREFETCH=32768 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_gpu_graphs.py
  grep "read chain\|F.linear" "$OUT/readchain.txt"
  pack pf25
  ;;
ring25)
  # (twenty-fifth session) pf25: an L2 prefetch before the PDL wait loses (token E5M2 1.731 ->
  # 2.03 ms); the read chain gains only where a kernel holds its bytes before the wait. The 8-bit
  # ring holds RING - 1 steps: 4 stages (3 steps) in 2 warps or 1, per shape (sweep, whose best
  # rows then serve as a table) and in the token (tables from fp8_ring_all_table.json), the
  # built-in table beside, interleaved twice; r4w2e: 4 stages under an early launch
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  run ringsweep 200 python3 benchmarks/sweep_gemv.py --formats e5m2,e4m3 --kernels mma_gemv --mma-pipes 1:0:3,1:0:4 --mma-warps 1,2 --mma-tiles 2 --shapes "12288,4096;4096,4096;22016,4096;4096,11008" --budget 180 --out "$OUT/r/ringsweep.json"
  grep -E "x4096 M=|x11008 M=|BEST|WRONG|FAILED" "$OUT/ringsweep.txt" | cut -c1-120
  ring_tables 4:2 4:1
  for v in base r4w2 r4w1 sweep r4w2e base2 r4w2b r4w1b sweep2 r4w2e2; do
    case $v in
      base*) t= ; p=auto ;;
      sweep*) t=$OUT/r/ringsweep.json; p=auto ;;
      r4w2e*) t=$OUT/r/table-r4w2.json; p=early ;;
      *) t=$OUT/r/table-${v:0:4}.json; p=auto ;;
    esac
    run "token-$v" 60 env SOFTFP8_TRITON_TABLE=$t SOFTFP8_PDL=$p python3 -m softfp8.bench token --preset llama2-7b --backends triton --formats e5m2,e4m3 --out "$OUT/r/token-$v.json"
  done
  pack ring25
  ;;
deep25)
  # (twenty-fifth session) ring25: 4 stages in 2 warps under an early launch took the E5M2 token
  # 1.728 -> 1.650-1.653 ms (E4M3 1.822 -> 1.805-1.809): each program holds 3 of its steps before
  # the PDL wait. Deeper: 6 and 8 stages in one warp (5 and 7 of a 4096-byte row's 8 steps),
  # 4 in one warp, all under early, the built-in table (late) beside, interleaved twice; then the
  # ring's GPU tests (every stage count)
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  ring_tables 4:2 4:1 6:1 8:1
  for v in base r4w2 r8w1 r6w1 r4w1 base2 r4w2b r8w1b r6w1b r4w1b; do
    case $v in
      base*) t= ; p=auto ;;
      *) t=$OUT/r/table-${v:0:4}.json; p=early ;;
    esac
    run "token-$v" 60 env SOFTFP8_TRITON_TABLE=$t SOFTFP8_PDL=$p python3 -m softfp8.bench token --preset llama2-7b --backends triton --formats e5m2,e4m3 --out "$OUT/r/token-$v.json"
  done
  run gputests 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_triton.py -k "ring"
  tail -3 "$OUT/gputests.txt"
  pack deep25
  ;;
final25)
  # (twenty-fifth session) the final kernels (8-bit M = 1: the ring in one warp of 4 stages,
  # launched early): the token, the graph tests under every PDL mode and the parity tests, the
  # llama3-8b shapes and small M, a second token; files left loose in $OUT (no pack), so a run
  # cut short by the device budget still brings back what it finished
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  run token 60 python3 -m softfp8.bench token --preset llama2-7b --backends triton --out "$OUT/r/token.json"
  run gputests 90 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_gpu_graphs.py tests/test_triton.py -k "graph or parity_3840"
  tail -2 "$OUT/gputests.txt"
  run shapes 120 python3 -m softfp8.bench shapes --preset llama3-8b --backends triton --out "$OUT/r/shapes.json"
  smallm_all 100
  run token2 60 python3 -m softfp8.bench token --preset llama2-7b --backends triton --out "$OUT/r/token2.json"
  for f in "$OUT"/r/token*.md "$OUT"/r/shapes.md; do
    echo "== $f"; grep -E "^\| *(torch float16|e5m2|e4m3|nvfp4|mxfp4|lm_head|gate_up|down|qkv|o) " "$f" | grep -v bfloat | cut -c1-120
  done
  ;;
fp4ring25)
  # (twenty-fifth session) 8-bit gained 8% in the token from the ring at 4 stages in one warp
  # launched early, though no faster alone. FP4 (auto early, one step of registers before the
  # wait) on the ring the same way: tables over the llama2-7b shapes, the built-in beside,
  # interleaved twice
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  python3 - "$OUT/r" <<'PY'
import json, sys
for name, ring, warps in (("f4w1", 4, 1), ("f3w2", 3, 2)):
    rows = [dict(n=n, k=k, m=1, fmt=f, kernel="mma_gemv", block_m=1, block_n=4 * warps,
                 block_k=128, split_k=1, num_warps=warps, num_stages=0, depth=1, ring=ring)
            for n, k in ((12288, 4096), (4096, 4096), (22016, 4096), (4096, 11008))
            for f in ("nvfp4", "mxfp4")]
    with open(f"{sys.argv[1]}/table-{name}.json", "w") as f:
        json.dump(dict(best=rows, note=f"FP4 M = 1 on the ring, {ring} stages, {warps} warps"), f)
PY
  for v in base f4w1 f3w2 base2 f4w1b f3w2b; do
    case $v in base*) t= ;; *) t=$OUT/r/table-${v:0:4}.json ;; esac
    run "token-$v" 60 env SOFTFP8_TRITON_TABLE=$t python3 -m softfp8.bench token --preset llama2-7b --backends triton --formats nvfp4,mxfp4 --out "$OUT/r/token-$v.json"
  done
  for f in "$OUT"/r/token*.md; do echo "== $f"; grep -E "^\| *(torch float16|nvfp4|mxfp4) " "$f" | cut -c1-110; done
  ;;
ring26)
  # (twenty-sixth session) the 8-bit ring's loop with its row mask computed once and its stages
  # by running address (SASS, sm_90: E5M2 110 -> 94 instructions a step, E4M3 173 -> 157), and
  # 8-bit stages of 96 bytes a thread, not FP4's 144 (12 KB a one-warp program of 4 stages, not
  # 18 KB). The token against the commit before (variants/prev), interleaved twice; the same
  # code on 3 / 6 stages in one warp and 4 in two (tables, early); the ring's GPU tests and the
  # graph / parity tests; then the llama3-8b shapes, small M and prefill. Steps past 500 s of
  # the call are skipped, so the pack always runs
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  ab_bench token 70 python3 -m softfp8.bench token --preset llama2-7b --backends triton --formats e5m2,e4m3
  ring_tables 3:1 6:1 4:2
  for v in r3w1 r6w1 r4w2 r3w1b r6w1b r4w2b; do
    [ $SECONDS -lt 400 ] || break
    run "token-$v" 60 env SOFTFP8_TRITON_TABLE=$OUT/r/table-${v:0:4}.json SOFTFP8_PDL=early python3 -m softfp8.bench token --preset llama2-7b --backends triton --formats e5m2,e4m3 --out "$OUT/r/token-$v.json"
  done
  run gputests 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_gpu_graphs.py tests/test_triton.py -k "ring or graph or parity_3840"
  tail -2 "$OUT/gputests.txt"
  [ $SECONDS -lt 440 ] && run shapes 60 python3 -m softfp8.bench shapes --preset llama3-8b --backends triton --formats e5m2,e4m3 --out "$OUT/r/shapes.json"
  [ $SECONDS -lt 470 ] && run smallm 70 python3 -m softfp8.bench small-m --preset llama3-8b --backends triton --formats e5m2,e4m3 --m 1,2,4,8,12,16 --out "$OUT/r/smallm.json"
  grep -A14 "over all shapes" "$OUT/smallm.txt" | tail -14
  pack ring26
  ;;
slot26)
  # (twenty-sixth session) ring26: the leaner 8-bit ring loop with 96-byte stages took the E5M2
  # token 1.608 -> 1.628 ms, E4M3 1.786 -> 1.777, and in the shapes bench qkv / o slower (E5M2
  # 86 -> 73%, 67 -> 59% of read), gate_up / down faster. Which change: the same loop with
  # FP4's 144-byte stages (variants/s144) beside the commit before (prev) and this one (cur),
  # token and llama3-8b shapes (8-bit), interleaved twice
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  for v in prev s144 cur prev2 s1442 cur2; do
    case $v in cur*) d=$PWD ;; *) d=$PWD/variants/${v%2} ;; esac
    in_variant "$d" "token-$v" 60 python3 -m softfp8.bench token --preset llama2-7b --backends triton --formats e5m2,e4m3 --out "$OUT/r/token-$v.json"
    in_variant "$d" "shapes-$v" 60 python3 -m softfp8.bench shapes --preset llama3-8b --backends triton --formats e5m2,e4m3 --out "$OUT/r/shapes-$v.json"
  done
  # ring26's test run ran out of time (177 passed, none failed): the ring's tests alone
  run gputests 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_triton.py -k ring
  pack slot26
  ;;
tune26)
  # (twenty-sixth session) the two issue-5 gaps nearest their bar: the >= 100 MB GEMVs at M = 1
  # (llama3-8b gate_up E5M2 92.3-92.8% of read against 93; the head, E4M3 at 86% in 5 of 7
  # shapes runs and 96-98% in the other 2) on the ring in 2 warps, or split in 2, beside the
  # built-in 1 warp, interleaved twice; then down (4096 x 14336, 62% of read at M = 8..16 on
  # the dot kernel) swept with K splits, and small M with its best against the built-in table
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  python3 - "$OUT/r" <<'PY'
import json, sys
for name, warps, split in (("r4w2", 2, 1), ("r4w1s2", 1, 2)):
    rows = [dict(n=n, k=4096, m=1, fmt=f, kernel="mma_gemv", block_m=1, block_n=4 * warps,
                 block_k=128, split_k=split, num_warps=warps, num_stages=0, depth=1, ring=4)
            for n in (28672, 128256) for f in ("e5m2", "e4m3")]
    with open(f"{sys.argv[1]}/table-{name}.json", "w") as f:
        json.dump(dict(best=rows, note=f"ring 4 stages, {warps} warps, split {split}"), f)
PY
  for v in base r4w2 r4w1s2 baseb r4w2b r4w1s2b; do
    case $v in base*) t= ;; *) t=$OUT/r/table-${v%b}.json ;; esac
    run "tall-$v" 60 env SOFTFP8_TRITON_TABLE=$t python3 -m softfp8.bench shapes --shape 28672,4096 --shape 128256,4096 --backends triton --formats e5m2,e4m3 --out "$OUT/r/tall-$v.json"
    grep -E "^(gate_up|lm_head|28672|128256).*(e5m2|e4m3)" "$OUT/tall-$v.txt" | cut -c1-80
  done
  # each step only where the call has time left for it (the pack must run)
  [ $SECONDS -lt 200 ] && run downsweep 110 python3 benchmarks/sweep_gemv.py --formats e5m2,e4m3 --kernels small_m --ms 8,12,16 --shapes "4096,14336" --budget 90 --out "$OUT/r/downsweep.json"
  grep -E "M=|BEST" "$OUT/downsweep.txt" | cut -c1-120 | tail -12
  for v in base down baseb downb; do
    [ $SECONDS -lt 330 ] && smallm_ab 45 "$OUT/r/downsweep.json" 1,8,12,16 $v
  done
  pack tune26
  ;;
wide27)
  # 8-bit M = 9..16 on the ring (WIDE: x row g + 8 in the slot), and how a layout for more x
  # rows (shorter runs of each row a step) costs at M = 1. (The WIDE ring, slower everywhere
  # here, was removed after this step (46bf24c has it): its test and sweep rows are gone.)
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  run gputests 170 python3 -m pytest -q -x -m gpu -p no:cacheprovider tests/test_triton.py -k "ring_wide or ring_needs"
  run layouts 60 python3 benchmarks/sweep_gemv.py --formats e5m2,e4m3 --kernels mma_gemv --ms 1 --mma-pipes 1:0:4 --mma-warps 1 --mma-tiles 2 --mma-runs 1,2,4,8 --shapes "28672,4096" --out "$OUT/r/layouts.json"
  grep -E "M=|BEST|table" "$OUT/layouts.txt" | cut -c1-110
  python3 - "$OUT/r/layouts.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["results"]:
    print(r["fmt"], "block_m", r["block_m"], "split", r["split_k"], f'{r["us"]:.1f} us', f'{r["gbps"]:.0f} GB/s')
PY
  [ $SECONDS -lt 260 ] && sweep_l3 widesweep 240 --formats e5m2 --kernels mma_gemv --ms 8,16 --mma-pipes 1:0:4,1:0:3 --mma-warps 1,2 --mma-tiles 2 --budget 210
  for v in base wide baseb wideb; do
    [ $SECONDS -lt 520 ] && smallm_ab 40 "$OUT/r/widesweep.json" 1,8,16 $v
  done
  pack wide27
  ;;
ncu27)
  # E4M3's M = 1 ring is ~20% slower than E5M2's on gate_up (wide27 layouts: 35.2 against 29.4
  # us) with a loop not issue-bound on paper: Nsight Compute on both (the table's setting),
  # then E4M3's per-instruction stalls; then the head's two speeds (the heads step)
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  run ncu27 200 "$NCU" --clock-control none --section SpeedOfLight --section SchedulerStats --section WarpStateStats --section Occupancy --section InstructionStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis -k regex:mma_gemv --launch-skip 1 -c 3 python3 benchmarks/gpu_ncu_target.py --formats e5m2,e4m3 --shape 28672,4096 --launches 0
  grep -E "^(e5m2|e4m3)|Duration|DRAM Throughput|Registers Per|Achieved Active|Warp Cycles Per Issued|Issue Slots|Eligible|Issued Warp|No Eligible" "$OUT/ncu27.txt" | head -60
  run ncusrc27 150 "$NCU" --clock-control none --section SourceCounters --section WarpStateStats --page source --print-source sass -k regex:mma_gemv --launch-skip 3 -c 1 python3 benchmarks/gpu_ncu_target.py --formats e5m2,e4m3 --shape 28672,4096 --launches 0
  for i in 1 2 3; do
    [ $SECONDS -lt 480 ] && run "heads-$i" 100 python3 benchmarks/gpu_head_modes.py --json "$OUT/r/heads-$i.json"
    tail -20 "$OUT/heads-$i.txt"
  done
  pack ncu27
  ;;
len27)
  # (1) the head's slow first timing: its time course right after quantize (--trace), two
  # processes; (2) how a program's length (steps a program: K) moves the 8-bit M = 1 ring, same
  # bytes, 8 / 16 / 32 steps a program, with the scales prefetched at the start (cur) or not
  # (prev); (3) the llama2-7b token, prev / cur
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  for i in 1 2; do
    run "trace-$i" 90 python3 benchmarks/gpu_head_modes.py --allocs 1 --repeats 2 --trace 60 --json "$OUT/r/trace-$i.json"
    grep -E "trace|e5m2 |e4m3 " "$OUT/trace-$i.txt" | cut -c1-400
  done
  run ringtest 150 python3 -m pytest -q -x -m gpu -p no:cacheprovider tests/test_triton.py -k "ring and (e4m3 or e5m2) and not wide"
  ab_bench len 70 python3 -m softfp8.bench shapes --shape 25344,4096 --shape 12672,8192 --shape 6336,16384 --shape 28672,4096 --backends triton --formats e5m2,e4m3
  for v in prev cur prev2 cur2; do grep -E "^[0-9]+x[0-9]+ .*(e5m2|e4m3)" "$OUT/len-$v.txt" | cut -c1-90; done
  [ $SECONDS -lt 420 ] && ab_bench token 60 python3 -m softfp8.bench token --preset llama2-7b --backends triton --formats e5m2,e4m3
  pack len27
  ;;
final27)
  # the issue-5 numbers on this session's kernels (scales prefetched) and the bench's longer
  # warm-up (200 ms busy): token, shapes, small-m twice each, prefill
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  run benchtests 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_bench.py
  tail -2 "$OUT/benchtests.txt"
  for i in 1 2; do
    run "token-$i" 90 python3 -m softfp8.bench token --preset llama2-7b --backends triton --out "$OUT/r/token-$i.json"
    run "shapes-$i" 120 python3 -m softfp8.bench shapes --preset llama3-8b --backends triton --out "$OUT/r/shapes-$i.json"
    [ $SECONDS -lt 400 ] && run "smallm-$i" 110 python3 -m softfp8.bench small-m --preset llama3-8b --backends triton --formats e5m2,e4m3 --m 1,2,4,8,12,16 --out "$OUT/r/smallm-$i.json"
    grep -A12 "over all shapes" "$OUT/smallm-$i.txt" | tail -12
  done
  [ $SECONDS -lt 480 ] && run prefill 100 python3 -m softfp8.bench prefill --preset llama3-8b --backends triton --out "$OUT/r/prefill.json"
  grep -A12 "over all shapes" "$OUT/prefill.txt" | tail -12
  pack final27
  ;;
blk27)
  # the ring running on across a program's row blocks (LaunchConfig.blocks): one fill and
  # one drain a program; len27 had E4M3 at 85% of read with 8 steps a program and 88.7% with
  # 32 (E5M2 90% either way). GPU tests, then tables (1 warp, 4 stages) with blocks per shape
  # (NAME:N=B,..), the single GEMVs and the llama2-7b token against the built-in table.
  # (LaunchConfig.blocks lost everywhere but qkv and was removed after this step.)
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  run blocktests 150 python3 -m pytest -q -x -m gpu -p no:cacheprovider tests/test_triton.py -k "ring_blocks"
  tail -3 "$OUT/blocktests.txt"
  python3 - "$OUT/r" b2:12288=2,22016=2,28672=2,128256=2 b4:12288=2,22016=4,28672=4,128256=8 <<'PY'
import json, sys
for spec in sys.argv[2:]:
    name, pairs = spec.split(":")
    rows = [dict(n=int(n), k=4096, m=1, fmt=f, kernel="mma_gemv", block_m=1, block_n=4,
                 block_k=128, split_k=1, num_warps=1, num_stages=0, depth=1, ring=4,
                 blocks=int(b))
            for n, b in (p.split("=") for p in pairs.split(",")) for f in ("e5m2", "e4m3")]
    with open(f"{sys.argv[1]}/table-{name}.json", "w") as f:
        json.dump(dict(best=rows, note=f"ring 4 stages, 1 warp, blocks {pairs}"), f)
PY
  for v in base b2 b4 baseb b2b b4b; do
    case $v in base*) t= ;; *) t=$OUT/r/table-${v%b}.json ;; esac
    [ $SECONDS -lt 300 ] && run "blk-$v" 60 env SOFTFP8_TRITON_TABLE=$t python3 -m softfp8.bench shapes --shape 12288,4096 --shape 22016,4096 --shape 28672,4096 --shape 128256,4096 --backends triton --formats e5m2,e4m3 --out "$OUT/r/blk-$v.json"
    grep -E "^custom.*(e5m2|e4m3)" "$OUT/blk-$v.txt" | cut -c1-90
  done
  for v in base b2 b4 baseb b2b b4b; do
    case $v in base*) t= ;; *) t=$OUT/r/table-${v%b}.json ;; esac
    [ $SECONDS -lt 500 ] && run "token-$v" 50 env SOFTFP8_TRITON_TABLE=$t python3 -m softfp8.bench token --preset llama2-7b --backends triton --formats e5m2,e4m3 --out "$OUT/r/token-$v.json"
  done
  pack blk27
  ;;
sweep27)
  # sweep_gemv.graph_time now times as the bench does (200 ms busy first, replays back to back):
  # its head should read what the bench reads (final27: 0.118 / 0.120 ms at M = 1). Then the
  # dot kernel's head at M = 8 and 16 in the bench, three runs (final27: E4M3 0.129-0.171 ms)
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  run headsweep 150 python3 benchmarks/sweep_gemv.py --formats e5m2,e4m3 --kernels small_m,mma_gemv --mma-pipes 1:0:4 --mma-warps 1 --mma-tiles 2 --ms 1,16 --shapes "128256,4096" --budget 110 --out "$OUT/r/headsweep.json"
  grep -E "M=|table:|BEST:" "$OUT/headsweep.txt" | cut -c1-110
  for i in 1 2 3; do
    [ $SECONDS -lt 330 ] && run "headm-$i" 60 python3 -m softfp8.bench small-m --shape 128256,4096 --backends triton --formats e5m2,e4m3 --m 1,8,16 --out "$OUT/r/headm-$i.json"
    grep -E "^custom.*(e5m2|e4m3)" "$OUT/headm-$i.txt" | cut -c1-80
  done
  pack sweep27
  ;;
epi28)
  # the epilogue's row terms (scale, tensor scale, bias) loaded before any store (`_mma_store`):
  # E4M3's four scale loads no longer wait one after another behind the stores. GPU tests of
  # Kernel.MMA_GEMV, then the commit before (prev) and after (cur), interleaved twice: the
  # llama2-7b token (all formats), the llama3-8b shapes (8-bit), small M on the ring (M <= 4)
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  run gputests 200 python3 -m pytest -q -x -m gpu -p no:cacheprovider tests/test_triton.py -k "mma"
  tail -3 "$OUT/gputests.txt"
  ab_bench token 60 python3 -m softfp8.bench token --preset llama2-7b --backends triton
  for v in prev cur prev2 cur2; do grep -E "triton" "$OUT/token-$v.txt" | cut -c1-100; done
  [ $SECONDS -lt 380 ] && ab_bench shapes 70 python3 -m softfp8.bench shapes --preset llama3-8b --backends triton --formats e5m2,e4m3
  [ $SECONDS -lt 500 ] && ab_bench smallm 60 python3 -m softfp8.bench small-m --preset llama3-8b --backends triton --formats e5m2,e4m3 --m 1,2,4
  pack epi28
  ;;
final28)
  # the issue-5 numbers on this session's kernels (row terms loaded before the stores): token,
  # shapes, small-m twice each, prefill (as final27)
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  for i in 1 2; do
    run "token-$i" 90 python3 -m softfp8.bench token --preset llama2-7b --backends triton --out "$OUT/r/token-$i.json"
    [ $SECONDS -lt 200 ] && run "shapes-$i" 120 python3 -m softfp8.bench shapes --preset llama3-8b --backends triton --out "$OUT/r/shapes-$i.json"
    [ $SECONDS -lt 240 ] && run "smallm-$i" 110 python3 -m softfp8.bench small-m --preset llama3-8b --backends triton --formats e5m2,e4m3 --m 1,2,4,8,12,16 --out "$OUT/r/smallm-$i.json"
    grep -A12 "over all shapes" "$OUT/smallm-$i.txt" | tail -12
  done
  [ $SECONDS -lt 290 ] && run prefill 100 python3 -m softfp8.bench prefill --preset llama3-8b --backends triton --out "$OUT/r/prefill.json"
  grep -A12 "over all shapes" "$OUT/prefill.txt" | tail -12
  pack final28
  ;;
tests28)
  # epi28's GPU tests ran out of time (25 of 112 passed in 200 s, compiling): every
  # Kernel.MMA_GEMV GPU test, in 6 processes at once (the compiles are CPU-bound; 16 cores)
  mkdir -p "$OUT/r"
  python3 -m pytest --collect-only -q -m gpu -p no:cacheprovider tests/test_triton.py -k "mma" 2>/dev/null | grep "::" > "$OUT/ids.txt"
  wc -l < "$OUT/ids.txt"
  for i in 0 1 2 3 4 5; do
    awk -v i=$i 'NR % 6 == i' "$OUT/ids.txt" > "$OUT/ids-$i.txt"
    (timeout 480 python3 -m pytest -q -m gpu -p no:cacheprovider $(cat "$OUT/ids-$i.txt") > "$OUT/mmatests-$i.txt" 2>&1; echo "rc=$?" >> "$OUT/mmatests-$i.txt") &
  done
  wait
  for i in 0 1 2 3 4 5; do tail -2 "$OUT/mmatests-$i.txt"; done
  pack tests28
  ;;
pdl28)
  # 8-bit M = 5..16 launches late under PDL (`_table.pdl_auto`; measured on the M = 1 token
  # only): qkv and o run at 0.56-0.62 of their M = 1 bandwidth from M = 8 (`final28`), ~5 us
  # above their bytes' time. Small M with every launch early (SOFTFP8_PDL=early) against auto
  mkdir -p "$OUT/r"
  for v in auto early auto2 early2; do
    [ $SECONDS -lt 150 ] && run "smallm-$v" 50 env SOFTFP8_PDL=${v%2} SOFTFP8_FP8_DECODE=integer python3 -m softfp8.bench small-m --preset llama3-8b --backends triton --formats e5m2,e4m3 --m 1,8,16 --out "$OUT/r/smallm-$v.json"
  done
  pack pdl28
  ;;
shapes29)
  # (prepared in session 28, not yet run) o and down of llama2-7b (4096 rows) run as 1024
  # one-warp ring programs on 1584 slots (0.65 of a wave); o's programs have 8 steps, 3 of them
  # copied before the PDL wait. Tables for just those two shapes: K split 2 / 3 (more programs
  # an SM), and o with 8 stages (all its steps before the wait); the token against the built-in
  # table, interleaved twice. Then the same tables' single GEMVs.
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  python3 - "$OUT/r" <<'PY'
import json, sys
def row(n, k, fmt, split, ring):
    return dict(n=n, k=k, m=1, fmt=fmt, kernel="mma_gemv", block_m=1, block_n=4, block_k=128,
                split_k=split, num_warps=1, num_stages=0, depth=1, ring=ring)
specs = {"s2": [(4096, 4096, 2, 4), (4096, 11008, 2, 4)],
         "s3": [(4096, 4096, 3, 4), (4096, 11008, 3, 4)],
         "o8": [(4096, 4096, 1, 8)]}
for name, shapes in specs.items():
    rows = [row(n, k, f, sp, rg) for n, k, sp, rg in shapes for f in ("e5m2", "e4m3")]
    with open(f"{sys.argv[1]}/table-{name}.json", "w") as f:
        json.dump(dict(best=rows, note=f"session 28's shapes29: {shapes}"), f)
PY
  for v in base s2 s3 o8 base2 s2b s3b o8b; do
    case $v in base*) t= ;; *) t=$OUT/r/table-${v%b}.json ;; esac
    [ $SECONDS -lt 330 ] && run "token-$v" 50 env SOFTFP8_TRITON_TABLE=$t python3 -m softfp8.bench token --preset llama2-7b --backends triton --formats e5m2,e4m3 --out "$OUT/r/token-$v.json"
    grep -E "^(e5m2|e4m3) triton" "$OUT/token-$v.txt" | cut -c1-80
  done
  for v in base s2 s3 o8; do
    case $v in base) t= ;; *) t=$OUT/r/table-$v.json ;; esac
    [ $SECONDS -lt 480 ] && run "gemv-$v" 50 env SOFTFP8_TRITON_TABLE=$t python3 -m softfp8.bench shapes --shape 4096,4096 --shape 4096,11008 --backends triton --formats e5m2,e4m3 --out "$OUT/r/gemv-$v.json"
    grep -E "^custom.*(e5m2|e4m3)" "$OUT/gemv-$v.txt" | cut -c1-90
  done
  pack shapes29
  ;;
cyc29)
  # LaunchConfig.cyclic: the 8-bit M = 1 ring with as many programs as the SMs hold (12 an SM
  # here: 4 stages of one warp, 19 KB of shared memory each), each taking row blocks p, p + G,
  # ... in turn with the ring running on (len27: E4M3 ~3% faster with 4x longer programs;
  # blk27's consecutive blocks lost by a program count off the slots). GPU tests of the ring
  # first, then tables: every M = 1 shape of the two presets cyclic 12 (c12) or 11 (c11)
  # against the built-in table, the token interleaved twice, then the llama3-8b GEMVs
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  gpu_tests cyctests 4 150 "cyclic or (ring_matches and (e5m2 or e4m3))"
  python3 - "$OUT/r" <<'PY'
import json, sys
shapes = [(12288, 4096), (4096, 4096), (22016, 4096), (4096, 11008), (32000, 4096),
          (6144, 4096), (28672, 4096), (4096, 14336), (128256, 4096)]
for c in (12, 11):
    rows = [dict(n=n, k=k, m=1, fmt=f, kernel="mma_gemv", block_m=1, block_n=4, block_k=128,
                 split_k=1, num_warps=1, num_stages=0, depth=1, ring=4, cyclic=c)
            for n, k in shapes for f in ("e5m2", "e4m3")]
    with open(f"{sys.argv[1]}/table-c{c}.json", "w") as f:
        json.dump(dict(best=rows, note=f"session 29's cyc29: every M = 1 shape cyclic {c}"), f)
PY
  for v in base c12 c11 base2 c12b c11b; do
    case $v in base*) t= ;; *) t=$OUT/r/table-${v%b}.json ;; esac
    [ $SECONDS -lt 400 ] && run "token-$v" 50 env SOFTFP8_TRITON_TABLE=$t python3 -m softfp8.bench token --preset llama2-7b --backends triton --formats e5m2,e4m3 --out "$OUT/r/token-$v.json"
    grep -E "^(e5m2|e4m3) triton" "$OUT/token-$v.txt" | cut -c1-80
  done
  for v in base c12 base2 c12b; do
    case $v in base*) t= ;; *) t=$OUT/r/table-${v%b}.json ;; esac
    [ $SECONDS -lt 520 ] && run "shapes-$v" 60 env SOFTFP8_TRITON_TABLE=$t python3 -m softfp8.bench shapes --preset llama3-8b --backends triton --formats e5m2,e4m3 --out "$OUT/r/shapes-$v.json"
    grep -E "^(qkv|o |gate|down|lm_head).*(e5m2|e4m3)" "$OUT/shapes-$v.txt" | cut -c1-90
  done
  pack cyc29
  ;;
headm29)
  # The dot kernel's vocabulary head at M = 8..16 moved ~30% between bench runs (final27,
  # final28: M = 12 0.130 against 0.165-0.182 ms): per process, per weight copy, or per run?
  # gpu_head_modes.py --m in three processes, the bench's own small-m on the head twice, then
  # Nsight Compute on the M = 12 launches in two processes
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  for i in 1 2 3; do
    [ $SECONDS -lt 200 ] && run "headm-$i" 90 python3 benchmarks/gpu_head_modes.py --m 8,12,16 --allocs 3 --repeats 2 --json "$OUT/r/headm-$i.json"
    grep -E "^(e5m2|e4m3) " "$OUT/headm-$i.txt"
  done
  for i in 1 2; do
    [ $SECONDS -lt 300 ] && run "smallm-$i" 60 python3 -m softfp8.bench small-m --shape 128256,4096 --m 1,8,12,16 --backends triton --formats e5m2,e4m3 --out "$OUT/r/smallm-$i.json"
    grep -E "^custom.*(e5m2|e4m3)" "$OUT/smallm-$i.txt" | cut -c1-90
  done
  NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  for i in 1 2; do
    [ $SECONDS -lt 450 ] && run "ncu-$i" 100 "$NCU" --clock-control none --section SpeedOfLight --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis --section SchedulerStats --section WarpStateStats -k regex:dot_kernel -c 6 python3 benchmarks/gpu_ncu_target.py --formats e5m2,e4m3 --shape 128256,4096 --m 12 --launches 1
    grep -E "^(e5m2|e4m3)|Duration|DRAM Throughput|Achieved Occupancy|Achieved Active|Waves Per SM|Shared Memory Configuration|Block Limit|L2 Hit|Warp Cycles Per Issued|Issue Slots Busy|No Eligible" "$OUT/ncu-$i.txt" | head -80
  done
  pack headm29
  ;;
dot29)
  # headm29's Nsight Compute: the dot kernel's 128 x 256 tiles at M = 12 run 2 programs an SM
  # (shared memory; registers would allow 3), 3.8 waves, DRAM 84-87% of peak. Tiles that fit
  # 3 an SM (sm_90 build here: 128 x 128 in 3 or 4 stages 37-53 KB / 166 registers; 64 x 256 in
  # 3 stages 41 KB / 168) against the built-in table on the head and gate_up at M = 8, 12, 16,
  # interleaved twice (tables: no code change)
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  python3 - "$OUT/r" <<'PY'
import json, sys
tiles = {"n128k128s4": (128, 128, 4), "n128k128s3": (128, 128, 3), "n64k256s3": (64, 256, 3)}
for name, (bn, bk, st) in tiles.items():
    rows = [dict(n=n, k=4096, m=m, fmt=f, kernel="small_m", block_m=16, block_n=bn, block_k=bk,
                 split_k=1, num_warps=4, num_stages=st)
            for n in (128256, 28672) for m in (8, 12, 16) for f in ("e5m2", "e4m3")]
    with open(f"{sys.argv[1]}/table-{name}.json", "w") as f:
        json.dump(dict(best=rows, note=f"session 29's dot29: {name}"), f)
PY
  for v in base n128k128s4 n128k128s3 n64k256s3 base2 n128k128s4b n128k128s3b n64k256s3b; do
    case $v in base*) t= ;; *) t=$OUT/r/table-${v%b}.json ;; esac
    [ $SECONDS -lt 480 ] && run "dot-$v" 50 env SOFTFP8_TRITON_TABLE=$t python3 -m softfp8.bench small-m --shape 128256,4096 --shape 28672,4096 --m 1,8,12,16 --backends triton --formats e5m2,e4m3 --out "$OUT/r/dot-$v.json"
    grep -E "^custom.*(e5m2|e4m3)" "$OUT/dot-$v.txt" | cut -c1-80
  done
  pack dot29
  ;;
whole29)
  # `_mma`'s WHOLE: the 8-bit ring's copies without predicates where every row and step is
  # inside, its last ring - 1 steps a loop of their own (sm_90 SASS: the M = 1 loop 94 -> 78
  # instructions a step for E5M2, 219 -> 205 for E4M3 with its NaN fix, 156 -> 142 without).
  # GPU tests of the ring, then the commit before (prev) and after (cur) interleaved twice:
  # the llama2-7b token and the llama3-8b GEMVs (8-bit)
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  gpu_tests ringtests 4 150 "ring and (e5m2 or e4m3 or whole or needs)"
  ab_bench token 50 python3 -m softfp8.bench token --preset llama2-7b --backends triton --formats e5m2,e4m3
  for v in prev cur prev2 cur2; do grep -E "^(e5m2|e4m3) triton" "$OUT/token-$v.txt" | cut -c1-90; done
  [ $SECONDS -lt 420 ] && ab_bench shapes 60 python3 -m softfp8.bench shapes --preset llama3-8b --backends triton --formats e5m2,e4m3
  for v in prev cur prev2 cur2; do grep -E "^(qkv|o |gate|down|lm_head).*(e5m2|e4m3)" "$OUT/shapes-$v.txt" | cut -c1-90; done
  pack whole29
  ;;
final29)
  # the issue-5 numbers on this session's kernels (the ring's WHOLE copies): token, shapes,
  # small-m twice each (as final28, no prefill: M = 2048 does not run the ring)
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  for i in 1 2; do
    [ $SECONDS -lt 200 ] && run "token-$i" 90 python3 -m softfp8.bench token --preset llama2-7b --backends triton --out "$OUT/r/token-$i.json"
    [ $SECONDS -lt 230 ] && run "shapes-$i" 100 python3 -m softfp8.bench shapes --preset llama3-8b --backends triton --out "$OUT/r/shapes-$i.json"
    [ $SECONDS -lt 260 ] && run "smallm-$i" 100 python3 -m softfp8.bench small-m --preset llama3-8b --backends triton --formats e5m2,e4m3 --m 1,2,4,8,12,16 --out "$OUT/r/smallm-$i.json"
    grep -A12 "over all shapes" "$OUT/smallm-$i.txt" | tail -12
  done
  pack final29
  ;;
review29)
  # (not run: no machine could be started) the review's refactor of WHOLE (one main loop, a
  # flag on the issue helpers): every ring GPU test (8-bit and FP4, WHOLE included). Its 26
  # ring builds' sm_90 SASS was byte-identical before and after, compiled here
  mkdir -p "$OUT/r"
  gpu_tests ringtests 6 200 "ring"
  pack review29
  ;;
groups30)
  # (thirtieth session) every ring GPU test (review29's, not run then) and the run mapping's
  # x-row groups (new: any block_m, not only 8); then 8-bit M = 8 / 12 / 16 as 2 / 3 / 4 groups
  # of the M = 4 ring (each group's program decodes the row block again, the weights from L2
  # after the first) against the built-in table, interleaved twice: g4 keeps M = 4's K split,
  # g4s splits for ~12 warps an SM over all the groups' programs
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  gpu_tests ringtests 6 220 "ring or run_groups"
  python3 - "$OUT/r" <<'PY'
import dataclasses, json, sys
from softfp8.backends.triton import DeviceInfo, mma_config, mma_split
from softfp8.formats import Format
info = DeviceInfo(sm_count=132, capability=(9, 0), interpreter=False)
shapes = ((6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336), (128256, 4096))
for name in ("g4", "g4s"):
    rows = []
    for n, k in shapes:
        for fmt in (Format.E5M2, Format.E4M3):
            c = mma_config(n, k, 4, fmt, info)
            for m in (8, 12, 16):
                split = c.split_k
                if name == "g4s":
                    split = mma_split(-(-n // c.block_n) * (m // 4), c.num_warps, info, 12)
                rows.append(dict(n=n, k=k, m=m, fmt=fmt.value, kernel=c.kernel.value,
                                 block_m=c.block_m, block_n=c.block_n, block_k=c.block_k,
                                 split_k=split, num_warps=c.num_warps, num_stages=c.num_stages,
                                 depth=c.depth, ring=c.ring))
    with open(f"{sys.argv[1]}/table-{name}.json", "w") as f:
        json.dump(dict(best=rows, note=f"M = 8..16 as groups of the M = 4 ring ({name})"), f)
    print(name, rows[:3])
PY
  for v in base g4 g4s base2 g4_2 g4s_2; do
    [ $SECONDS -lt 500 ] && smallm_ab 50 "$OUT/r/table-${v%_2}.json" 1,8,12,16 $v
  done
  pack groups30
  ;;
final30)
  # the issue-5 numbers again, now with the GPU's clocks in every row (softfp8-bench samples
  # nvidia-smi every 20 ms): does a slow stretch (a whole measurement 30-50% slow) come with a
  # lower SM or memory clock, more power or a clock-event reason? The bench's GPU tests first
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,clocks_event_reasons.active --format=csv,noheader,nounits
  run benchtests 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_bench_clocks.py tests/test_bench.py
  for i in 1 2; do
    [ $SECONDS -lt 240 ] && run "token-$i" 90 python3 -m softfp8.bench token --preset llama2-7b --backends triton --out "$OUT/r/token-$i.json"
    [ $SECONDS -lt 300 ] && run "smallm-$i" 100 python3 -m softfp8.bench small-m --preset llama3-8b --backends triton --formats e5m2,e4m3 --m 1,2,4,8,12,16 --out "$OUT/r/smallm-$i.json"
    grep -A12 "over all shapes" "$OUT/smallm-$i.txt" | tail -12
  done
  [ $SECONDS -lt 420 ] && run shapes-1 100 python3 -m softfp8.bench shapes --preset llama3-8b --backends triton --out "$OUT/r/shapes-1.json"
  python3 - "$OUT/r" <<'PY'
import glob, json, sys
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    r = json.load(open(f))
    if "rows" not in r:
        continue
    mhz = sorted({x.get("sm_mhz") for x in r["rows"] if x.get("sm_mhz")})
    why = sorted({x["clocks"]["reasons"] for x in r["rows"] if x.get("clocks")} - {None})
    print(f.rsplit("/", 1)[1], r["settings"].get("clocks"), "SM MHz seen:", mhz, "reasons:", why)
PY
  pack final30
  ;;
clk30)
  # final30 found the SW power cap (reason 0x4) and SM clocks of 1125-1980 MHz in the bench's
  # windows, but a window's clocks were mostly its 200 ms warm-up's. Now the clocks of the
  # timed replays themselves (`clocks_timed`): small-m twice, the bench's GPU tests first
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  run benchtests 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_bench_clocks.py
  for i in 1 2 3; do
    [ $SECONDS -lt 300 ] && run "smallm-$i" 100 python3 -m softfp8.bench small-m --preset llama3-8b --backends triton --formats e5m2,e4m3 --m 1,2,4,8,12,16 --out "$OUT/r/smallm-$i.json"
    grep -A12 "over all shapes" "$OUT/smallm-$i.txt" | tail -12
  done
  pack clk30
  ;;
tok30)
  # the token twice more with the timed replays' clocks (clk30's machine, if still held): is
  # E4M3's token (88.5-88.8% of read, 0.2-0.5 points short) run under the power cap's clocks?
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  for i in 1 2; do
    run "token-$i" 90 python3 -m softfp8.bench token --preset llama2-7b --backends triton --out "$OUT/r/token-$i.json"
  done
  pack tok30
  ;;
shapes30)
  # the llama3-8b GEMVs twice on tok30's machine (the >= 100 MB target), clocks in every row
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  for i in 1 2; do
    run "shapes-$i" 100 python3 -m softfp8.bench shapes --preset llama3-8b --backends triton --out "$OUT/r/shapes-$i.json"
  done
  pack shapes30
  ;;
tail30)
  # the M = 1 ring's program count against the GPU's slots: a one-warp program of S stages
  # takes S x 4.6 KB of shared memory, so 24 / 16 / 12 / 8 of them fit an SM at S = 2 / 3 / 4
  # / 6 and a weight's programs make a different number of waves (llama3 gate_up, 7168
  # programs: 2.3 / 3.4 / 4.5 / 6.8 waves). Tables with every 8-bit M = 1 shape of llama2-7b
  # and llama3-8b (not the heads) at S stages, one warp, against the built-in 4, interleaved twice
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  L3="12288,4096;4096,4096;22016,4096;4096,11008;6144,4096;28672,4096;4096,14336"
  for r in 2 3 6; do ring_table "$OUT/r/table-r$r.json" "$r:1" "$L3"; done
  table_ab tail 60 420 base r2 r3 r6 base2 r2_2 r3_2 r6_2 -- shapes --shape 12288,4096 --shape 4096,4096 --shape 22016,4096 --shape 4096,11008 --shape 6144,4096 --shape 28672,4096 --shape 4096,14336 --backends triton --formats e5m2,e4m3
  for v in base r2 r3 r6 base2 r2_2 r3_2 r6_2; do grep -A4 "over all shapes" "$OUT/tail-$v.txt" | tail -2; done
  pack tail30
  ;;
tok6)
  # tail30's finding in the token: o and down (4096 rows: 1024 one-warp programs, which all fit
  # the GPU at once at 6 stages, 8 an SM) on the ring at 6 stages, the rest built-in; the
  # llama2-7b token interleaved twice against the built-in table
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  ring_table "$OUT/r/table-r6o.json" 6:1 "4096,4096;4096,11008;4096,14336"
  table_ab token 80 400 base r6o base2 r6o_2 -- token --preset llama2-7b --backends triton --formats e5m2,e4m3
  for v in base r6o base2 r6o_2; do grep -E "^(torch float16|e5m2|e4m3)" "$OUT/token-$v.txt" | cut -c1-120; done
  pack tok6
  ;;
tok6all)
  # tok6's likely reason tested: the whole llama2-7b token at one footprint, every 8-bit M = 1
  # shape (the head too) on the ring at 6 stages, against the built-in table, interleaved twice
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  ring_table "$OUT/r/table-r6all.json" 6:1 "12288,4096;4096,4096;22016,4096;4096,11008;32000,4096"
  table_ab token 80 400 base r6all base2 r6all_2 -- token --preset llama2-7b --backends triton --formats e5m2,e4m3
  for v in base r6all base2 r6all_2; do grep -E "^(torch float16|e5m2|e4m3)" "$OUT/token-$v.txt" | cut -c1-120; done
  pack tok6all
  ;;
slow30)
  # the bench's slow stretches (a whole measurement 20-50% slow, the head at M = 12 in 5 of 7,
  # not the SM clock: final30, clk30): rows now carry their warm-up's ~10 ms chunks (ms a call
  # each), so a slow row shows whether its 200 ms warm-up was slow too (a stretch longer than
  # the measurement) or the speed changed inside it. small-m on the head alone four times, then
  # the five shapes once (the slow rows so far came in full runs)
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  run benchtests 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_bench_clocks.py
  for i in 1 2 3 4; do
    [ $SECONDS -lt 300 ] && run "head-$i" 60 python3 -m softfp8.bench small-m --shape 128256,4096 --backends triton --formats e5m2,e4m3 --m 1,8,12,16 --out "$OUT/r/head-$i.json"
  done
  [ $SECONDS -lt 330 ] && run smallm 100 python3 -m softfp8.bench small-m --preset llama3-8b --backends triton --formats e5m2,e4m3 --m 1,2,4,8,12,16 --out "$OUT/r/smallm.json"
  python3 - "$OUT/r" <<'PY'
import glob, json, statistics, sys
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    r = json.load(open(f))
    for x in r.get("rows", []):
        if not x.get("shape", "").startswith("lm_head") or "warm_ms" not in x:
            continue
        w = x["warm_ms"]
        print(f.rsplit("/", 1)[1], x["m"], x["impl"][:12], "%.1f us" % (x["ms"] * 1e3),
              "warm us first/median/last %.1f/%.1f/%.1f" % (w[0] * 1e3, statistics.median(w) * 1e3, w[-1] * 1e3),
              "SM", x.get("sm_mhz"))
PY
  pack slow30
  ;;
fp4r31)
  # (thirty-first session) FP4 M = 1 runs from registers: 123 registers a thread, 4 warps a
  # scheduler, one step (2 KB a warp) in flight. Its ring was slower (fp4ring25: 3 stages in 2
  # warps or 4 in 1 take 27.6 / 18.4 KB a program, 3-4 warps a scheduler by shared memory). At 2
  # stages in 1 warp a program is 9.2 KB and 75 registers (SASS, sm_90): 6 warps a scheduler.
  # Tables over the llama2-7b shapes at 2:1, 3:1, 2:2 against the built-in, interleaved twice
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  for spec in 2:1 3:1 2:2; do
    ring_table "$OUT/r/table-r${spec%:*}w${spec#*:}.json" "$spec" "12288,4096;4096,4096;22016,4096;4096,11008;32000,4096" nvfp4,mxfp4
  done
  table_ab token 60 430 base r2w1 r3w1 r2w2 base_2 r2w1_2 r3w1_2 r2w2_2 -- token --preset llama2-7b --backends triton --formats nvfp4,mxfp4
  [ $SECONDS -lt 470 ] && run gputests 110 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_triton.py -k "ring"
  pack fp4r31
  ;;
rx31)
  # (thirty-first session) fp4r31: FP4 M = 1 on the ring is 11-15% slower than from registers
  # even at 2 stages in 1 warp (6 warps a scheduler against 4). A ring stage carries x too: for
  # FP4 2 KB a warp-step beside the 2 KB of codes, copied into shared memory and read back. The
  # same tables with x by registers (the kernel's RING_X = False, one step ahead, 78 registers
  # at 2 stages; a patched copy: the launcher has no setting for it), token interleaved twice;
  # then Nsight Compute on NVFP4 22016 x 4096: registers, ring, ring with x by registers
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  ring_x_variant
  for spec in 2:1 3:1 4:1; do
    ring_table "$OUT/r/table-r${spec%:*}w${spec#*:}.json" "$spec" "12288,4096;4096,4096;22016,4096;4096,11008;32000,4096" nvfp4,mxfp4
  done
  T="token --preset llama2-7b --backends triton --formats nvfp4,mxfp4"
  for v in base rx2 rx3 rx4 base_2 rx2_2 rx3_2 rx4_2; do
    [ $SECONDS -lt 300 ] || break
    case $v in
      base*) run "token-$v" 60 python3 -m softfp8.bench $T --out "$OUT/r/token-$v.json" ;;
      *) in_variant variants/rx "token-$v" 60 env SOFTFP8_TRITON_TABLE=$OUT/r/table-r${v:2:1}w1.json python3 -m softfp8.bench $T --out "$OUT/r/token-$v.json" ;;
    esac
  done
  NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  S="--clock-control none --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section SchedulerStats --section WarpStateStats --section Occupancy -k regex:mma_gemv --launch-skip 1 -c 1"
  A="benchmarks/gpu_ncu_target.py --formats nvfp4 --shape 22016,4096 --launches 0"
  [ $SECONDS -lt 420 ] && run ncu-base 80 "$NCU" $S python3 $A
  [ $SECONDS -lt 450 ] && run ncu-r2 80 env SOFTFP8_TRITON_TABLE=$OUT/r/table-r2w1.json "$NCU" $S python3 $A
  [ $SECONDS -lt 480 ] && in_variant variants/rx ncu-rx2 80 env SOFTFP8_TRITON_TABLE=$OUT/r/table-r2w1.json "$NCU" $S python3 $A
  for f in "$OUT"/ncu-*.txt; do echo "== $f"; grep -E "LaunchConfig|Duration|DRAM Through|L1/TEX Cache|L2 Cache Through|Issue Slots Busy|highest-utilized|Eligible Warps|Active Warps Per Sch|Warp Cycles Per Issued|Achieved Active|Mem Busy|Max Bandwidth|Mem Pipes" "$f" | cut -c1-150; grep -A3 "spends" "$f" | cut -c1-150 | head -8; done
  pack rx31
  ;;
rx31b)
  # rx31: FP4 on the 2-stage ring with x by registers (patched copy) was 4% faster alone on
  # 22016 x 4096 (Nsight Compute: 21.63 against 22.50 us) but 6% slower in the token: its table
  # left o and down (4096 rows: 1024 one-warp programs, 2 warps a scheduler) unsplit, where the
  # built-in splits them 2 ways. The same with o and down split 2 and 4, token interleaved
  # twice; then where the registers' warps stall (Nsight Compute's stall-reason metrics)
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  ring_x_variant
  python3 - "$OUT/r" <<'PY'
import json, sys
for split in (2, 4):
    rows = [dict(n=n, k=k, m=1, fmt=f, kernel="mma_gemv", block_m=1, block_n=4, block_k=128,
                 split_k=split if n == 4096 else 1, num_warps=1, num_stages=0, depth=1, ring=2)
            for n, k in ((12288, 4096), (4096, 4096), (22016, 4096), (4096, 11008), (32000, 4096))
            for f in ("nvfp4", "mxfp4")]
    with open(f"{sys.argv[1]}/table-s{split}.json", "w") as f:
        json.dump(dict(best=rows, note=f"FP4 M = 1, 2-stage ring in 1 warp, 4096 rows split {split}"), f)
PY
  T="token --preset llama2-7b --backends triton --formats nvfp4,mxfp4"
  for v in base s2 s4 base_2 s2_2 s4_2; do
    [ $SECONDS -lt 240 ] || break
    case $v in
      base*) run "token-$v" 60 python3 -m softfp8.bench $T --out "$OUT/r/token-$v.json" ;;
      *) in_variant variants/rx "token-$v" 60 env SOFTFP8_TRITON_TABLE=$OUT/r/table-${v:0:2}.json python3 -m softfp8.bench $T --out "$OUT/r/token-$v.json" ;;
    esac
  done
  NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  M=""
  for r in barrier branch_resolving dispatch_stall drain imc_miss lg_throttle long_scoreboard math_pipe_throttle membar mio_throttle misc no_instruction not_selected selected short_scoreboard sleeping tex_throttle wait; do
    M="$M${M:+,}smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio"
  done
  A="benchmarks/gpu_ncu_target.py --formats nvfp4 --shape 22016,4096 --launches 0"
  [ $SECONDS -lt 400 ] && run ncu-stall-base 80 "$NCU" --clock-control none --metrics "$M" -k regex:mma_gemv --launch-skip 1 -c 1 python3 $A
  [ $SECONDS -lt 440 ] && in_variant variants/rx ncu-stall-rx2 80 env SOFTFP8_TRITON_TABLE=$OUT/r/table-s2.json "$NCU" --clock-control none --metrics "$M" -k regex:mma_gemv --launch-skip 1 -c 1 python3 $A
  [ $SECONDS -lt 480 ] && run ncu-stall-e5m2 80 "$NCU" --clock-control none --metrics "$M" -k regex:mma_gemv --launch-skip 1 -c 1 python3 benchmarks/gpu_ncu_target.py --formats e5m2 --shape 22016,4096 --launches 0
  for f in "$OUT"/ncu-stall-*.txt; do echo "== $f"; grep -E "LaunchConfig|stalled" "$f" | sed 's/smsp__average_warps_issue_stalled_//; s/_per_issue_active.ratio//' | cut -c1-120; done
  pack rx31b
  ;;
xstep31)
  # (thirty-first session) the MMA GEMV's register path (FP4 M = 1; 8-bit depth 2 at M = 5..16
  # on small weights) against the commit before (variants/prev: git archive 84f0dfb, not
  # committed): x of a step loaded in that step, not one step ahead (16 registers and 16
  # copies a step fewer), x's bounds one test a step where the K range is whole steps, the
  # scale offset by a shift (SASS, sm_90: NVFP4 418 -> 384 instructions a step, 123 -> 115
  # registers; MXFP4 465 -> 436). Predicted: FP4 token 3-6% faster (its issue slots, ~50%
  # busy, scale with the instructions only in part). GPU tests of the MMA GEMV first
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  run gputests 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_triton.py -k "mma_gemv and not ring or parity_3840"
  tail -3 "$OUT/gputests.txt"
  ab_bench token 60 python3 -m softfp8.bench token --preset llama2-7b --backends triton --formats nvfp4,mxfp4
  [ $SECONDS -lt 420 ] && ab_bench smallm 80 python3 -m softfp8.bench small-m --preset llama3-8b --backends triton --formats e5m2,e4m3 --m 1,8,16
  [ $SECONDS -lt 500 ] && run shapes 70 python3 -m softfp8.bench shapes --preset llama3-8b --backends triton --formats nvfp4,mxfp4 --out "$OUT/r/shapes.json"
  pack xstep31
  ;;
xstep31b)
  # xstep31: x loaded in its step made MXFP4's token 3% faster and NVFP4's 4% slower; now
  # MXFP4 only (mma_x_in_step), the x-bounds and scale-offset changes for both. Against
  # 84f0dfb again (variants/prev), token interleaved twice; the FP4 MMA GEMV GPU tests first
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  run gputests 230 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_triton.py -k "mma_gemv and not ring and (mxfp4 or nvfp4)"
  tail -3 "$OUT/gputests.txt"
  ab_bench token 60 python3 -m softfp8.bench token --preset llama2-7b --backends triton --formats nvfp4,mxfp4
  pack xstep31b
  ;;
verify32)
  # (written in the thirty-first session, not run yet) the FP4 MMA GEMV GPU tests whole: the
  # register loop changed in 8c2b81c / 265b032 (x's bounds, the scale offset, MXFP4's x in its
  # step) and xstep31 / xstep31b ran only the first 50 / 30 tests before their time ran out
  # (none failed); the groups, WIDE and block-scale cases are among the rest
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  run gputests 560 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_triton.py -k "mma_gemv and not ring and (mxfp4 or nvfp4)"
  tail -5 "$OUT/gputests.txt"
  pack verify32
  ;;
nan32)
  # FP4's MMA tile without its NaN checks where the block scales hold no NaN code
  # (codes_nan_free; SASS sm_90: NVFP4 401 -> 396 instructions a step, MXFP4 436 -> 424):
  # the FP4 MMA GEMV GPU tests (the new every-scale-code one among them) in 4 processes, then
  # against 9b12e0f (variants/prev) interleaved twice: token, and the llama3-8b GEMVs
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  gpu_tests gputests 4 300 "(mma_gemv and not ring and (mxfp4 or nvfp4)) or every_scale_code or nan_free"
  ab_bench token 60 python3 -m softfp8.bench token --preset llama2-7b --backends triton --formats nvfp4,mxfp4
  ab_bench shapes 60 python3 -m softfp8.bench shapes --preset llama3-8b --backends triton --formats nvfp4,mxfp4
  pack nan32
  ;;
nan32b)
  # nan32's new GPU test compared MXFP4's fp16 y with the fp32 scale values (2^-127 .. 2^127);
  # now with them in fp16, as y is
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  gpu_tests gputests 4 200 "every_scale_code"
  pack nan32b
  ;;
rowe32)
  # MXFP4 against each row's exponent (`_mma` ROW_E, `mx_row_exponents`; SASS sm_90 424 -> 369
  # instructions a step): the FP4 MMA GEMV GPU tests and the new ones in 4 processes, then the
  # token against HEAD (variants/prev) and against ROW_E with x one step ahead (variants/ahead:
  # mma_x_in_step False), interleaved twice; the llama3-8b GEMVs against prev
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  gpu_tests gputests 4 240 "(mma_gemv and not ring and mxfp4) or every_scale_code or row_exponents"
  for v in prev cur ahead prev2 cur2 ahead2; do
    case $v in cur*) d=$PWD ;; prev*) d=$PWD/variants/prev ;; *) d=$PWD/variants/ahead ;; esac
    in_variant "$d" "token-$v" 60 python3 -m softfp8.bench token --preset llama2-7b --backends triton --formats nvfp4,mxfp4 --out "$OUT/r/token-$v.json"
  done
  ab_bench shapes 60 python3 -m softfp8.bench shapes --preset llama3-8b --backends triton --formats mxfp4
  pack rowe32
  ;;
rowe32b)
  # rowe32's result as the launcher's rule (ROW_E with x one step ahead, `mma_x_in_step`): the
  # MXFP4 MMA GEMV GPU tests again, then token and the llama3-8b GEMVs against HEAD
  # (variants/prev), interleaved twice
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  gpu_tests gputests 4 240 "(mma_gemv and not ring and mxfp4) or every_scale_code or row_exponents"
  ab_bench token 60 python3 -m softfp8.bench token --preset llama2-7b --backends triton --formats nvfp4,mxfp4
  ab_bench shapes 60 python3 -m softfp8.bench shapes --preset llama3-8b --backends triton --formats nvfp4,mxfp4
  pack rowe32b
  ;;
final32)
  # the session's end: some 8-bit MMA GEMV GPU tests (the epilogue's code changed for ROW_E),
  # then the issue-5 token twice, FP4 small M once, the llama3-8b GEMVs once
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  gpu_tests gputests 4 100 "every_fp8_code or ring_whole or (mma_gemv_matches_reference and e4m3)"
  for i in 1 2; do
    [ $SECONDS -lt 300 ] && run "token-$i" 90 python3 -m softfp8.bench token --preset llama2-7b --backends triton --out "$OUT/r/token-$i.json"
  done
  [ $SECONDS -lt 360 ] && run smallm-fp4 100 python3 -m softfp8.bench small-m --preset llama3-8b --backends triton --formats nvfp4,mxfp4 --m 1,2,4,8,16 --out "$OUT/r/smallm-fp4.json"
  [ $SECONDS -lt 420 ] && run shapes-1 90 python3 -m softfp8.bench shapes --preset llama3-8b --backends triton --out "$OUT/r/shapes-1.json"
  pack final32
  ;;
verify32b)
  # every GPU test of tests/test_triton.py and tests/test_splitk.py after this session's kernel
  # changes (the MMA epilogue's ROW_E plumbing reaches every MMA variant), 8 processes
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  python3 -m pytest --collect-only -q -m gpu -p no:cacheprovider tests/test_triton.py tests/test_splitk.py 2>/dev/null | grep "::" > "$OUT/ids.txt"
  wc -l < "$OUT/ids.txt"
  for i in $(seq 0 7); do
    awk -v i=$i 'NR % 8 == i' "$OUT/ids.txt" > "$OUT/ids-$i.txt"
    (timeout 270 python3 -m pytest -q -m gpu -p no:cacheprovider $(cat "$OUT/ids-$i.txt") > "$OUT/gputests-$i.txt" 2>&1; echo "rc=$?" >> "$OUT/gputests-$i.txt") &
  done
  wait
  for i in $(seq 0 7); do tail -n 3 "$OUT/gputests-$i.txt"; done
  pack verify32b
  ;;
fp4m33)
  # (written in the thirty-second session, not run yet) MXFP4's loop changed under ROW_E (424 ->
  # 387 instructions a step, x ahead): the table's FP4 rules were measured on the old one
  # (`_fp4_runs`: MXFP4 M = 3..4 on the runs only for heads; M = 1 warps by rows). Sweep MXFP4
  # at M = 1 (warps 1, 2, 4) and at M = 2..8 (the runs against the tiles), llama3-8b shapes
  mkdir -p "$OUT/r"
  sweep_l3 sweepmx1 150 --ms 1 --formats mxfp4 --kernels mma_gemv --mma-warps 1,2,4 --budget 130
  sweep_l3 sweepmxm 230 --ms 2,4,8 --formats mxfp4 --kernels mma_gemv --budget 210
  pack fp4m33
  ;;
fp4s33)
  # (thirty-third session) `fp4m33` swept the FP4 `select` decode; the token and every H200 user
  # get `inject` (the probe finds denormals kept). Both FP4 formats under inject: M = 1 warps
  # 1, 2, 4 on the token's llama2-7b shapes and llama3-8b's, then M = 2..8 (runs against tiles)
  mkdir -p "$OUT/r"
  sweep_l2 sweep1l2 150 --ms 1 --formats nvfp4,mxfp4 --e2m1 inject --kernels mma_gemv --mma-warps 1,2,4 --budget 120
  sweep_l3 sweep1l3 150 --ms 1 --formats nvfp4,mxfp4 --e2m1 inject --kernels mma_gemv --mma-warps 1,2,4 --budget 120
  sweep_l3 sweepm 240 --ms 2,4,8 --formats nvfp4,mxfp4 --e2m1 inject --kernels mma_gemv --budget 215
  pack fp4s33
  ;;
fp4t33)
  # `fp4s33`'s FP4 rules as the table (M = 1 one warp from 6144 rows; K split to 11 warps an SM;
  # M = 3..4 on the runs from 8192 rows, both formats): token and FP4 small M against HEAD
  # (variants/prev), interleaved twice, then the FP4 MMA GEMV GPU tests (MXFP4's row exponents
  # now run at M = 3..4 on the runs)
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  ab_bench token 60 python3 -m softfp8.bench token --preset llama2-7b --backends triton --formats nvfp4,mxfp4
  ab_bench smallm 75 python3 -m softfp8.bench small-m --preset llama3-8b --backends triton --formats nvfp4,mxfp4 --m 1,2,4,8
  gpu_tests gputests 4 150 "mma_gemv and not ring and (mxfp4 or nvfp4 or row_exponents)"
  pack fp4t33
  ;;
fp4v33)
  # `fp4t33` split 3 ways at M = 2 (o, down) and lost: FP4 splits now stop at whole loop steps
  # (`_whole_step_split`). Token and FP4 small M against HEAD (variants/prev), interleaved
  # twice, on llama3-8b's shapes (M = 1..8) and llama2-7b's (M = 2, 4)
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  ab_bench token 60 python3 -m softfp8.bench token --preset llama2-7b --backends triton --formats nvfp4,mxfp4
  ab_bench smallm 75 python3 -m softfp8.bench small-m --preset llama3-8b --backends triton --formats nvfp4,mxfp4 --m 1,2,4,8
  ab_bench smallm2 60 python3 -m softfp8.bench small-m --preset llama2-7b --backends triton --formats nvfp4,mxfp4 --m 2,4
  pack fp4v33
  ;;
final33)
  # the session's table (FP4 splits: whole steps, else a power of two): FP4 small M on the
  # llama2-7b shapes (M = 2, 4: down at M = 2 split 4 again) against HEAD~ (variants/prev),
  # interleaved twice; then the issue-5 token once, every format
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  ab_bench smallm2 60 python3 -m softfp8.bench small-m --preset llama2-7b --backends triton --formats nvfp4,mxfp4 --m 2,4
  run token 90 python3 -m softfp8.bench token --preset llama2-7b --backends triton --out "$OUT/r/token.json"
  pack final33
  ;;
epi33)
  # MXFP4 on its rows' exponents (ROW_E) without a bias loads each row's 2^(E - 127) before the
  # loop, not after it (SASS: the loop 387 -> 384 instructions in 2 warps, 385 either way in
  # one): the MXFP4 MMA GEMV GPU tests, then token and llama3-8b GEMVs (MXFP4) against HEAD
  # (variants/prev), interleaved twice
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  gpu_tests gputests 4 110 "row_exponents or every_scale_code or (mma_gemv and mxfp4 and not ring)"
  ab_bench token 45 python3 -m softfp8.bench token --preset llama2-7b --backends triton --formats mxfp4
  ab_bench shapes 45 python3 -m softfp8.bench shapes --preset llama3-8b --backends triton --formats mxfp4
  pack epi33
  ;;
fp4q34)
  # (written in the thirty-third session, run in the thirty-fourth: the rule
  # MMA_FP4_M1_FOUR_TILES_MAX_PER_SM since) `fp4s33`'s fastest at 12288 x 4096, M = 1
  # (llama2-7b's qkv) was 4 tiles a warp in one warp (NVFP4 10.4 against the table's 11.1 us,
  # MXFP4 10.7 against 11.1, there without its row exponents: ROW_E takes 2 tiles); 2 tiles
  # everywhere else. The token with that shape at 4 tiles (a table file) against the built-in
  # table, interleaved twice
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  python3 - "$OUT/t4.json" <<'PY'
import json, sys
rows = [dict(n=12288, k=4096, m=1, fmt=f, kernel="mma_gemv", block_m=1, block_n=8, block_k=128,
             split_k=1, num_warps=1, num_stages=0, depth=1, ring=0) for f in ("nvfp4", "mxfp4")]
json.dump({"best": rows}, open(sys.argv[1], "w"))
PY
  for v in base t4 base2 t4b; do
    case $v in base*) t= ;; *) t=$OUT/t4.json ;; esac
    run "token-$v" 60 env SOFTFP8_TRITON_TABLE=$t python3 -m softfp8.bench token --preset llama2-7b --backends triton --formats nvfp4,mxfp4 --out "$OUT/r/token-$v.json"
  done
  pack fp4q34
  ;;
unroll34|unroll34b)
  # (thirty-fourth session: unroll34 run, FP4's token 2-5% slower; unroll34b not run. UNROLL
  # and MMA_FP4_UNROLL are gone since, so on a later tree this step times nothing: its sed
  # finds no line) FP4's register loop
  # two steps a pass (`_mma_table.MMA_FP4_UNROLL` = 2: SASS sm_90 NVFP4 395 -> 362.5, MXFP4
  # 385 -> 349.5 instructions a step in one warp, the 35 register copies a step gone; 154-156
  # registers in two warps). Predicted: FP4 is issue-bound, so up to ~8% off its token. The
  # built-in 1 (variants/prev, copied before the flip) against 2 in this tree: unroll34 the FP4
  # MMA GEMV GPU tests and the token, unroll34b FP4 small M and the llama3-8b GEMVs
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r" variants/prev
  rm -rf variants/prev/softfp8 && cp -r softfp8 variants/prev/
  sed -i 's/^MMA_FP4_UNROLL = 1$/MMA_FP4_UNROLL = 2/' softfp8/backends/triton/_mma_table.py
  grep -n "^MMA_FP4_UNROLL" softfp8/backends/triton/_mma_table.py variants/prev/softfp8/backends/triton/_mma_table.py
  if [ "$step" = unroll34 ]; then
    gpu_tests gputests 4 150 "mma_gemv and not ring and (mxfp4 or nvfp4 or row_exponents)"
    ab_bench token 60 python3 -m softfp8.bench token --preset llama2-7b --backends triton --formats nvfp4,mxfp4
  else
    ab_bench smallm 75 python3 -m softfp8.bench small-m --preset llama3-8b --backends triton --formats nvfp4,mxfp4 --m 1,2,4
    ab_bench shapes 45 python3 -m softfp8.bench shapes --preset llama2-7b --backends triton --formats nvfp4,mxfp4
  fi
  pack "$step"
  ;;
peel35)
  # (written in the thirty-fourth session, not run: no device was lent) the 8-bit M = 1 ring
  # whose rows end inside a step (llama2-7b's down, 4096 x 11008: 21.5 steps of 512 bytes)
  # copies without predicates but the last step (`_mma` PEEL, `_mma_flags.MMA_RING_PEEL`): SASS
  # sm_90 E5M2 94 -> 79 instructions a step, E4M3 219 -> 207. Predicted from WHOLE's gain
  # where it applied (`whole29`): down ~1% (E5M2) / ~3% (E4M3) faster, the token ~0.2% / ~0.6%
  # (down is 22% of its bytes). The built-in off (variants/prev, copied before the flip)
  # against on in this tree: the 8-bit ring GPU tests, token and llama2-7b GEMVs interleaved
  # twice; then the token of every format on the built-in (the FP4 M = 1 four-tile rule as
  # landed)
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  flip_prev backends/triton/_mma_flags.py "MMA_RING_PEEL = False" "MMA_RING_PEEL = True"
  gpu_tests gputests 4 150 "ring_peel or ring_whole or (mma_gemv and ring and (e5m2 or e4m3))"
  ab_bench token 60 python3 -m softfp8.bench token --preset llama2-7b --backends triton --formats e5m2,e4m3
  ab_bench shapes 45 python3 -m softfp8.bench shapes --preset llama2-7b --backends triton --formats e5m2,e4m3
  in_variant variants/prev token 90 python3 -m softfp8.bench token --preset llama2-7b --backends triton --out "$OUT/r/token.json"
  pack peel35
  ;;
fp4t35)
  # (written in the thirty-fourth session, not run: no device was lent) the MMA GEMV's GPU tests
  # against the reference for FP4, now with the run mapping in one warp of 4 tiles at the
  # test's M (the table's FP4 M = 1 setting for 11..12 programs an SM since 3f2f3fc, timed in
  # `fp4q34` but not checked there), both E2M1 decodes
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  gpu_tests gputests 4 300 "gpu_mma_gemv_matches_reference and (nvfp4 or mxfp4)"
  pack fp4t35
  ;;
nreg35)
  # (written in the thirty-fourth session, not run: no device was lent) NVFP4 M = 1 in one warp
  # of 4 tiles (12288 x 4096, llama2-7b's qkv, since 3f2f3fc) takes 180 registers (sm_90,
  # triton 3.9): 11 one-warp programs an SM, 84 of its 1536 past the first wave. Capped at 168
  # (`_mma_flags.MMA_FP4_FOUR_TILES_MAXNREG`; no spills, loop 737 -> 735) 12 fit. Predicted:
  # the qkv ~0.5-1 us faster (its tail), the NVFP4 token ~1-2%; MXFP4 (164) unchanged. Prints
  # the registers triton 3.6 gives both builds, then the built-in (variants/prev) against the
  # cap: NVFP4 MMA GEMV GPU tests, token and llama2-7b GEMVs interleaved twice
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  flip_prev backends/triton/_mma_flags.py "MMA_FP4_FOUR_TILES_MAXNREG = 0" \
    "MMA_FP4_FOUR_TILES_MAXNREG = 168"
  for n in 0 168; do python3 benchmarks/sass_mma_loop.py nvfp4 --facts --warps 1 --set TILES=4 --maxnreg $n 2>&1 | sed -n 2p; done
  gpu_tests gputests 4 200 "gpu_mma_gemv_matches_reference and nvfp4"
  ab_bench token 60 python3 -m softfp8.bench token --preset llama2-7b --backends triton --formats nvfp4,mxfp4
  ab_bench shapes 45 python3 -m softfp8.bench shapes --preset llama2-7b --backends triton --formats nvfp4
  pack nreg35
  ;;
heads)
  # (written in the twenty-sixth session, not run yet) the M = 1 vocabulary head's two speeds:
  # per process, per weight copy, or per run? benchmarks/gpu_head_modes.py in three processes
  export SOFTFP8_FP8_DECODE=integer
  mkdir -p "$OUT/r"
  for i in 1 2 3; do
    run "heads-$i" 150 python3 benchmarks/gpu_head_modes.py --json "$OUT/r/heads-$i.json"
  done
  pack heads
  ;;
esac
