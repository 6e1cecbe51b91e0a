#!/usr/bin/env bash
# vLLM on one H200, unattended: the CUDA tests, the engine benchmark, the live runs with vLLM
# (release: sleep and destroy) and calibrate -> validate on two of them. Run from the repository
# root after vLLM is installed and `. /tmp/site/env.sh` (PYTHONPATH and vLLM's environment):
#
#   bash benchmarks/gpu/vllm_h200.sh [PARTS]   PARTS: comma-separated, default tests,bench-1.5b
#     tests       pytest tests/executor/test_vllm_cuda.py (3 engine processes)         ~3 min
#     bench-1.5b  benchmarks/bench_vllm_h200.py --shape 1.5b                           ~7 min
#     bench-0.5b  the same, 0.5b shape (bench: both)                                   ~6 min
#                 BENCH_PARTS=vllm_destroy,... measures only those parts (the others' figures
#                 come from benchmarks/results/vllm_h200.json); BENCH_LIMIT_S (420) per shape
#     live-sleep  benchmarks/bench_live.py --device cuda --engine vllm --release sleep ~3 min
#     live-destroy  the same with --release destroy (live: both)                      ~3 min
#     loop        two sleep runs (sync pipeline) with schedules that hold each split two
#                 steps: the first (14 steps) makes every move between the three splits once,
#                 for `dynaresize calibrate`; the second (8 steps), another order, for
#                 `validate`                                                            ~8 min
#     semantics   pytest tests/executor/test_live_vllm_cuda.py (two live runs)          ~4 min
#     weight-paths  pytest tests/executor/test_device_weight_paths_gpu.py and
#                 test_vllm_cuda_parts.py (no vLLM engine)                              ~1 min
#     collectives pytest tests/executor/test_trainer_gpu.py and
#                 benchmarks/bench_trainer_collectives.py (trainers sharing the GPU:
#                 ipc against host; no vLLM engine)                                      ~3 min
#
# One call must stay under the machine's 10 minutes a command, so split the parts over calls:
#   1. tests,weight-paths   2. loop   3. semantics,bench-0.5b   4. bench-1.5b   5. live
# (BENCH_PARTS=vllm_destroy for the destroy figures alone).
# Every step runs under `timeout` (its own limit, or what is left of the call's BUDGET_S,
# default 540 s); a step that fails or runs out is logged and the next one runs; a part that
# does not fit in what is left is skipped and logged. The live runs take LIVE_STEPS (4) steps;
# LIVE_EXTRA adds bench_live arguments to every live run (LIVE_EXTRA=--cuda-graphs).
# Two calls' engine figures merge with
#   python benchmarks/bench_vllm_h200.py --merge A/vllm_h200.json B/vllm_h200.json
# (into benchmarks/results/vllm_h200.json and .md). Everything lands in $OUT (at most 8 files):
#   steps.log            each step: command, exit status, seconds
#   tests.log            pytest's reports                bench.log   the benchmark's output
#   vllm_h200.json, .md  the engine figures per shape (or, with collectives alone,
#   trainer_collectives.json, .md)
#   loop_traces.tar.gz   the loop's two traces (calibrate and validate run again from them)
#   live.json, live.md   the live runs' summaries         loop.txt    live logs, calibrate, validate
set -uo pipefail
PARTS=${1:-tests,bench-1.5b}
OUT=${OUT:-$(mktemp -d)}
PY=${PYTHON:-python3}
BUDGET_S=${BUDGET_S:-540}
START=$(date +%s)
SCRATCH=$(mktemp -d /tmp/vllm_h200.XXXXXX)
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export HF_HUB_OFFLINE=1

left() { echo $(( BUDGET_S - ($(date +%s) - START) )); }

# The device's memory in GB (calibrate and validate size the memory-feasible splits with it) and
# the KV cache per engine of the live runs: 8 GiB, or 4 GiB on a device under 100 GiB (an H100),
# which the live batch (128 samples of at most 192 tokens) fills to a few per cent either way.
GPU_MIB=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -1)
GPU_GB=$(( ${GPU_MIB:-143771} * 1048576 / 1000000000 ))
if (( ${GPU_MIB:-143771} < 102400 )); then LIVE_KV_GIB=${LIVE_KV_GIB:-4}; fi
LIVE_KV_GIB=${LIVE_KV_GIB:-8}

# step NAME LIMIT_S LOG COMMAND...: run COMMAND under `timeout` (LIMIT_S or what is left),
# appending its output to LOG; never stops the script.
step() {
    local name=$1 limit=$2 log=$3; shift 3
    local rest; rest=$(left)
    if (( rest < 30 )); then
        echo "SKIP $name: ${rest} s of the budget left" | tee -a "$OUT/steps.log"; return 0
    fi
    (( limit > rest )) && limit=$rest
    local begin; begin=$(date +%s)
    echo "== $name: $* (limit ${limit} s)" | tee -a "$OUT/steps.log" >> "$log"
    timeout -k 20 "$limit" "$@" >> "$log" 2>&1
    local rc=$?
    echo "   $name: exit $rc after $(( $(date +%s) - begin )) s" | tee -a "$OUT/steps.log"
    return 0
}

has() { [[ ",$PARTS," == *",$1,"* ]]; }

nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv >> "$OUT/steps.log" 2>&1
$PY -c "import vllm, torch; print('vllm', vllm.__version__, 'torch', torch.__version__)" \
    >> "$OUT/steps.log" 2>&1

if has tests; then
    step tests 330 "$OUT/tests.log" $PY -m pytest -q -rA -p no:randomly -p no:cacheprovider \
        tests/executor/test_vllm_cuda.py
fi

if has weight-paths; then
    step weight_paths 180 "$OUT/tests.log" $PY -m pytest -q -rA -p no:randomly -p no:cacheprovider \
        tests/executor/test_device_weight_paths_gpu.py tests/executor/test_vllm_cuda_parts.py
fi

if has collectives; then
    step trainer_tests 240 "$OUT/tests.log" $PY -m pytest -q -rA -p no:randomly \
        -p no:cacheprovider tests/executor/test_trainer_gpu.py
    step collectives_bench 240 "$OUT/bench.log" $PY benchmarks/bench_trainer_collectives.py \
        --out-dir "$OUT"
fi

if has semantics; then
    step semantics 420 "$OUT/tests.log" $PY -m pytest -q -rA -p no:randomly -p no:cacheprovider \
        tests/executor/test_live_vllm_cuda.py
fi

# the committed figures are the starting point, so that a call measuring some parts
# (BENCH_PARTS, default all) returns the whole table
if has bench || has bench-1.5b || has bench-0.5b; then
    [[ -f "$OUT/vllm_h200.json" ]] || cp benchmarks/results/vllm_h200.json "$OUT/vllm_h200.json"
fi
for shape in 1.5b 0.5b; do
    if has bench || has "bench-$shape"; then
        step "bench_$shape" "${BENCH_LIMIT_S:-420}" "$OUT/bench.log" \
            $PY benchmarks/bench_vllm_h200.py --shape "$shape" --out "$OUT/vllm_h200.json" \
            ${BENCH_PARTS:+--parts "$BENCH_PARTS"}
    fi
done

live() {  # NAME RELEASE [more bench_live arguments]
    local name=$1 release=$2; shift 2
    step "live_$name" "${LIVE_LIMIT_S:-400}" "$OUT/loop.txt" $PY benchmarks/bench_live.py \
        --device cuda --engine vllm --release "$release" --kv-gib "$LIVE_KV_GIB" --tag "$name" \
        --out-dir "$SCRATCH/results" \
        --run-dir "$SCRATCH/run_$name" --steps "${LIVE_STEPS:-4}" ${LIVE_EXTRA:-} "$@"
}

# 2:2 -> 3:1 removes a replica, 3:1 -> 1:3 adds two: both figures within LIVE_STEPS (4) steps
SCHEDULE=${SCHEDULE:-"1@3:1;2@1:3"}
if has live || has live-sleep; then live vllm_sleep sleep --schedule "$SCHEDULE"; fi
if has live || has live-destroy; then live vllm_destroy destroy --schedule "$SCHEDULE"; fi

if has loop; then
    # Each split held for two steps or more, so that calibrate fits every trainer count the
    # validation run visits (a step right after a resize is not a clean training time).
    # `sync`: with every role on one GPU, a rollout overlapped with training slows both by a
    # contention that a twin of separate devices does not model (one_step_off on 2026-12-03:
    # per-step error 21%, most of it in rollout times that varied 2.2-3.9 s within a split).
    # The calibration run makes each of the six moves between 3:1, 2:2 and 1:3 once, so that
    # every phase is fitted on moves of one and two GPUs in both directions (waking engines on
    # one shared GPU takes longer the more a move wakes: `s_per_moved_gpu`).
    live vllm_calibrate sleep --steps "${CALIBRATE_STEPS:-14}" --pipeline sync \
        --schedule "${CALIBRATE_SCHEDULE:-1@3:1;3@1:3;5@2:2;7@1:3;9@3:1;11@2:2}"
    live vllm_sleep_other sleep --steps "${LOOP_STEPS:-8}" --pipeline sync \
        --schedule "${VALIDATE_SCHEDULE:-1@1:3;3@3:1;5@2:2}"
    step calibrate 60 "$OUT/loop.txt" $PY -m dynaresize.cli calibrate \
        --trace "$SCRATCH/run_vllm_calibrate/trace" --out "$SCRATCH/costs.yaml" \
        --gpu-memory-gb "$GPU_GB"
    step validate 60 "$OUT/loop.txt" $PY -m dynaresize.cli validate \
        --trace "$SCRATCH/run_vllm_sleep_other/trace" --costs "$SCRATCH/costs.yaml" \
        --out "$SCRATCH/validate" --gpu-memory-gb "$GPU_GB"
    # the two runs' traces come back, so that calibrate and validate can be run again anywhere
    tar -czf "$OUT/loop_traces.tar.gz" -C "$SCRATCH" run_vllm_calibrate/trace \
        run_vllm_sleep_other/trace 2>> "$OUT/loop.txt"
    { echo "== costs.yaml"; cat "$SCRATCH/costs.yaml"; echo "== validate"
      find "$SCRATCH/validate" -maxdepth 1 -type f \( -name '*.md' -o -name '*.txt' -o -name '*.json' \) \
          -exec sh -c 'echo "-- $1"; head -c 20000 "$1"' _ {} \; ; } >> "$OUT/loop.txt" 2>&1
fi

# the live summaries, merged into two files
if compgen -G "$SCRATCH/results/live_*.json" > /dev/null; then
    $PY - "$SCRATCH/results" "$OUT" <<'PY'
import json, pathlib, sys
src, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
runs = {p.stem.removeprefix("live_"): json.loads(p.read_text()) for p in sorted(src.glob("live_*.json"))}
(out / "live.json").write_text(json.dumps(runs, indent=2))
(out / "live.md").write_text("\n\n".join(p.read_text() for p in sorted(src.glob("live_*.md"))))
PY
fi
rm -rf "$SCRATCH"
echo "done in $(( $(date +%s) - START )) s" | tee -a "$OUT/steps.log"
