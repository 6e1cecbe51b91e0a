#!/usr/bin/env bash
# The trainer's figures on one H200, unattended, in under 9 minutes: the trainer step alone
# (benchmarks/bench_trainer.py), the trainer's CUDA tests, and a live run
# (benchmarks/bench_live.py --device cuda, own sampler) whose steps train on two, three and one
# trainers. Each part runs under its own time limit, within the whole budget; a part that fails
# or runs out of time is logged and the next one runs. Writes into $OUT (8 files at most):
#   summary.txt, bench_trainer.log, trainer_h200.json, trainer_h200.md,
#   pytest_cuda.log, bench_live.log, live_h200.json, live_h200.md
#
#   OUT=/some/folder bash benchmarks/gpu/trainer_h200.sh     (from the repository root)
set -u
cd "$(dirname "$0")/../.."
if [ -f /tmp/site/env.sh ]; then . /tmp/site/env.sh; fi
OUT="${OUT:?set OUT to the folder for results}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
BUDGET_S="${BUDGET_S:-520}"
START_S=$(date +%s)
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"

left() { echo $(( BUDGET_S - ($(date +%s) - START_S) )); }

# part NAME CAP_S LOG COMMAND...: run COMMAND under min(CAP_S, time left), log its exit status
part() {
  local name="$1" cap="$2" log="$3"; shift 3
  local limit; limit=$(left)
  if [ "$limit" -gt "$cap" ]; then limit="$cap"; fi
  if [ "$limit" -lt 10 ]; then
    echo "$name: skipped (budget spent)" | tee -a "$SUMMARY"; return
  fi
  local t0; t0=$(date +%s)
  timeout -k 10 "$limit" "$@" > "$log" 2>&1
  local rc=$?
  echo "$name: exit $rc after $(( $(date +%s) - t0 )) s (limit $limit s)" | tee -a "$SUMMARY"
}

{
  echo "start $(date -u +%FT%TZ) on $(hostname)"
  nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv,noheader 2>&1 | head -2
  "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" 2>&1
} >> "$SUMMARY"

part bench_trainer 150 "$OUT/bench_trainer.log" \
  "$PY" benchmarks/bench_trainer.py --device cuda --steps 3 --out-dir "$OUT" --tag h200
part pytest_cuda 150 "$OUT/pytest_cuda.log" \
  "$PY" -m pytest -q -p no:randomly -p no:cacheprovider -rs tests/executor/test_trainer_gpu.py
part bench_live 240 "$OUT/bench_live.log" \
  "$PY" benchmarks/bench_live.py --device cuda --out-dir "$OUT" --tag h200

# train_s of every live step, beside the figures of the host-bound trainer (live_h200.md before)
"$PY" - "$OUT/live_h200.json" >> "$SUMMARY" 2>&1 <<'PYEOF'
import json, sys
try:
    steps = json.load(open(sys.argv[1]))["steps"]
except Exception as error:  # the live run failed: its log says why
    print("live steps: none", repr(error)); raise SystemExit(0)
before = {0: 16.31, 1: 12.82, 2: 11.44, 3: 11.15, 4: 5.89}
for s in steps:
    print(f"live step {s['step']} split {s['split']} train_s {s['train_s']:.3f} "
          f"(host-bound trainer: {before.get(s['step'], float('nan')):.2f})")
PYEOF
echo "end after $(( $(date +%s) - START_S )) s" >> "$SUMMARY"
