#!/usr/bin/env bash
# Fit on the 180 M runs of two presets (plus the 24 M run for the resize rates) and validate on
# each run of the third; needs `dynaresize` on PATH (the venv of the README).
set -e
cd "$(dirname "$0")/.."  # the folder of the runs
D=leave_one_preset_out
rm -rf $D/costs_* $D/cal_* $D/val_*
fit() {
    name=$1; shift
    dynaresize calibrate "$@" --trace live_gpu_small_short_tail/trace \
        --config live_gpu_medium_short_tail/scenario.yaml --out $D/costs_$name.yaml > $D/cal_$name.txt 2>&1
}
val() {
    name=$1; run=$2
    dynaresize validate --trace $run/trace --costs $D/costs_$name.yaml --config $run/scenario.yaml \
        --out $D/val_${name}_$run > $D/val_${name}_$run.txt 2>&1
    echo "== $name -> $run"; head -4 $D/val_${name}_$run.txt
}
fit no_wide --trace live_gpu_medium_short_tail/trace --trace live_gpu_medium_short_swing/trace \
    --trace live_gpu_medium_long_tail/trace
val no_wide live_gpu_medium_wide_tail
val no_wide live_gpu_medium_wide_swing
fit no_short --trace live_gpu_medium_wide_tail/trace --trace live_gpu_medium_wide_swing/trace \
    --trace live_gpu_medium_long_tail/trace
val no_short live_gpu_medium_short_tail
val no_short live_gpu_medium_short_swing
