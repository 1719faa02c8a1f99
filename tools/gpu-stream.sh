#!/usr/bin/env bash
# Run on the GPU machine from the repository root, with a release build of
# flowscope at $BIN and the Vulkan loaders unpacked (see the README's developer
# section). The CUDA checks (display frames, shared ones included), then the
# solver's speed while the window's pipeline streams its fields. Log in $OUT/gpu-stream.log.
set -uo pipefail
BIN=${BIN:-.dev/flowscope}
LOG=${OUT:-/tmp}/gpu-stream.log
{
    date -u
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
    if [ "${CHECK:-1}" = 1 ]; then
        "$BIN" check-cuda
        echo "check-cuda exit code: $?"
    fi
    "$BIN" bench --stream --solver cuda --size 128 --size 256 --size 384 --size 512 --seconds ${SECONDS_PER_SIZE:-6}
    # The same through host memory (as when the window is on another GPU).
    "$BIN" bench --stream --solver cuda --size 256 --host-frames --seconds ${SECONDS_PER_SIZE:-6}
    "$BIN" bench --stream --solver cuda --precision fp16 --size 256 --seconds ${SECONDS_PER_SIZE:-6}
} 2>&1 | tee "$LOG"
