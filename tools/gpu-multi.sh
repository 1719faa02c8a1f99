#!/usr/bin/env bash
# Run on a multi-GPU machine from the repository root, with a release build of
# flowscope at $BIN. Checks that N GPUs reproduce one GPU bit for bit, then
# measures strong and weak scaling. Writes the log to $OUT/gpu-multi.log.
set -uo pipefail
BIN=${BIN:-.dev/flowscope}
LOG=${OUT:-/tmp}/gpu-multi.log
N=${N:-$(nvidia-smi -L | wc -l)}
export NCCL_NVLS_ENABLE=0
{
    date -u
    nvidia-smi --query-gpu=index,name,memory.total --format=csv
    nvidia-smi topo -m
    "$BIN" check-cuda --gpus "$N" --steps 201
    echo "check-cuda --gpus $N exit code: $?"
    "$BIN" run assets/scenarios/sphere.toml --gpus "$N" --steps 400 \
        --set 'domain.size=[200,128,128]' --set 'obstacles.0.center=[50,63.5,63.5]' --set 'obstacles.0.radius=10'
    echo "run --gpus $N exit code: $?"
    "$BIN" bench --solver cuda --gpus "$(seq -s, 1 "$N" | sed 's/,3,/,/')" \
        --size 256 --size 512 --repeats 3 ${DOMAINS:-}
} 2>&1 | tee "$LOG"
