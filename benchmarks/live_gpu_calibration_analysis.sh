#!/usr/bin/env bash
# Calibrate and validate the twin on a folder of live GPU runs made by
# benchmarks/live_gpu_calibration_runs.py; every figure of the folder's README comes from here.
#
#   benchmarks/live_gpu_calibration_analysis.sh RUNS_DIR
#
# Needs `dynaresize` on PATH (the venv of the README), or DYNARESIZE set to another command
# (e.g. DYNARESIZE="dynaresize"). Writes, in RUNS_DIR:
#   costs_fitted.yaml, calibrate.txt, validate_long_tail{,.txt}   five fitting runs, held-out long_tail
#   *_first_three*                                                the first three fitting runs only
#   costs_in_sample.yaml, in_sample_long_tail.txt, validate_in_sample/   fitted on the held-out run
#   leave_one_preset_out/                                          each preset held out in turn
set -euo pipefail
cd "$1"
dr() { ${DYNARESIZE:-dynaresize} "$@"; }
small=live_gpu_small_short_tail/trace
config=live_gpu_medium_short_tail/scenario.yaml
held=live_gpu_medium_long_tail
t() { printf -- "--trace live_gpu_medium_%s/trace " "$@"; }

calibrate() {  # NAME_OF_OUTPUT_STEM TRACE_ARGS...
    out=$1; shift
    # shellcheck disable=SC2068
    dr calibrate $@ --trace $small --config $config --out "$out.yaml" > "$out.txt" 2>&1 \
        || { cat "$out.txt"; exit 1; }
}
validate() {  # COSTS RUN OUT
    dr validate --trace "$2/trace" --costs "$1" --config "$2/scenario.yaml" --out "$3" > "$3.txt" 2>&1 \
        || { cat "$3.txt"; exit 1; }
    echo "== $1 -> $2"; head -4 "$3.txt"
}

rm -rf costs_*.yaml calibrate*.txt validate_* in_sample_long_tail.txt leave_one_preset_out
calibrate costs_fitted "$(t short_tail wide_tail short_swing wide_swing)"
mv costs_fitted.txt calibrate.txt
validate costs_fitted.yaml $held validate_long_tail
calibrate costs_fitted_first_three "$(t short_tail wide_tail)"
mv costs_fitted_first_three.txt calibrate_first_three.txt
validate costs_fitted_first_three.yaml $held validate_long_tail_first_three
calibrate costs_in_sample "$(t long_tail)"
mv costs_in_sample.txt in_sample_calibrate.txt
validate costs_in_sample.yaml $held validate_in_sample
mv validate_in_sample.txt in_sample_long_tail.txt

D=leave_one_preset_out
mkdir -p $D
calibrate $D/costs_no_long "$(t short_tail wide_tail short_swing wide_swing)"
calibrate $D/costs_no_wide "$(t short_tail short_swing long_tail)"
calibrate $D/costs_no_short "$(t wide_tail wide_swing long_tail)"
validate $D/costs_no_long.yaml $held $D/val_no_long_$held
for run in live_gpu_medium_wide_tail live_gpu_medium_wide_swing; do
    validate $D/costs_no_wide.yaml $run $D/val_no_wide_$run
done
for run in live_gpu_medium_short_tail live_gpu_medium_short_swing; do
    validate $D/costs_no_short.yaml $run $D/val_no_short_$run
done
