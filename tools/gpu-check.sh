#!/usr/bin/env bash
# Run on the GPU machine from the repository root, with a release build of
# flowscope at $BIN (built elsewhere: the GPU machine has no Rust toolchain).
# Checks the CUDA solver against the CPU reference, then benchmarks it.
# Writes the full log to $OUT/gpu-check.log when $OUT is set.
set -uo pipefail
BIN=${BIN:-.dev/flowscope}
LOG=${OUT:-/tmp}/gpu-check.log
{
    date -u
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.memory --format=csv
    "$BIN" check-cuda
    echo "check-cuda exit code: $?"
    "$BIN" bench --solver cuda --size 128 --size 256 --size 512 \
        --precision fp32 --precision fp16 --block 64 --block 128 --largest
    if [ "${PROFILE:-0}" = 1 ] && command -v ncu >/dev/null; then
        # Memory throughput of the two bulk kernels at 256^3 (after warm-up).
        for p in fp32 fp16; do
            ncu --kernel-name regex:'aa_(even|odd)' --launch-skip 10 --launch-count 2 \
                --section SpeedOfLight --section Occupancy \
                "$BIN" bench --solver cuda --size 256 --precision $p --repeats 1
        done
    fi
} 2>&1 | tee "$LOG"
