#!/usr/bin/env bash
# The contaminant on a GPU machine (issue 24), from the repository root with
# a release build of flowscope at $BIN: check-cuda's contaminant section
# (GPU against the host engine and the CPU, both methods, every 1 and 3
# steps), its cost per interval at 256³ (Re 100 and 1000) and in the urban
# release, and the urban release over 10 minutes of physical time moved
# every 1st, 4th and 8th step (stepping time and the doses at its receptors).
# Writes the log to $OUT/contaminant-check.log when $OUT is set.
set -uo pipefail
BIN=$(realpath "${BIN:-target/release/flowscope}")
LOG=${OUT:-/tmp}/contaminant-check.log
S=assets/scenarios
{
    date -u
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
    "$BIN" check-cuda --contaminants-only
    echo "check-cuda --contaminants-only exit code: $?"
    B="bench --solver cuda --precision fp32 --repeats 3"
    "$BIN" $B --scenario $S/cavity-dye.toml --scale 3.8788
    "$BIN" $B --scenario $S/cavity-dye.toml --scale 3.8788 --set fluid.reynolds=1000
    "$BIN" $B --scenario $S/urban-release.toml
    W=$(mktemp -d)
    for k in 1 4 8; do
        "$BIN" run $S/urban-release.toml --quiet --set dispersion.interval=$k \
            --receptors "$W/urban-$k.csv" --every 500 2>&1 | grep "steps in\|receptor\|error"
    done
    rm -rf "$W"
} 2>&1 | tee "$LOG"
