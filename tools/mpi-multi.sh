#!/usr/bin/env bash
# MPI on a machine of N GPUs (issue 26): `mpirun -n N`, one process per GPU,
# against one GPU bit for bit on every shipped scenario in FP32, and against
# one process driving the N GPUs (the NCCL slabs) on the periodic box:
# strong scaling at 512³, weak at 512³ per GPU. Then the slabs' scaling in
# both storages at 512³ and 1024³ (`bench --gpus`).
#
#   N=4 BIN=target/release/flowscope OMPI=folder bash tools/mpi-multi.sh
#
# BIN built with `--features mpi`; Open MPI as tools/ompi-env.sh says.
set -u
BIN=$(realpath "${BIN:-target/release/flowscope}")
N=${N:-$(nvidia-smi -L | wc -l)}
STEPS=${STEPS:-301}
source "$(dirname "$0")/ompi-env.sh"
# NVLink multicast off (tools/gpu-multi.sh).
export NCCL_NVLS_ENABLE=0
M="$MPIRUN --oversubscribe --bind-to none"
SCENARIOS=$(realpath assets/scenarios)
BOX=$(realpath tools/box.toml)
WORK=$(mktemp -d)
cd "$WORK" || exit 1
nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv
failed=0
echo "== mpirun -n $N against one GPU, FP32"
for S in "$SCENARIOS"/*.toml; do
    sc=$(basename "$S" .toml)
    # The contaminant moves on each process's CPU under MPI: fewer steps.
    steps=$STEPS
    grep -q '^\[\[sources\]\]' "$S" && steps=101
    "$BIN" run "$S" --solver cuda --steps $steps --every $steps --vti one.vti -q 2>&1 | grep "steps in\|error"
    $M -n "$N" "$BIN" run "$S" --solver cuda --steps $steps --every $steps --vti many.vti -q 2>&1 | grep "steps in\|error"
    if cmp -s one.vti many.vti; then echo "EQUAL $sc ($steps steps)"; else echo "DIFFER $sc"; failed=1; fi
    rm -f one.vti many.vti
done
echo "== the box: one process on 1..$N GPUs against mpirun (1000 steps)"
R="run $BOX --solver cuda --steps 1000 --every 1000 -q"
echo "1 GPU, 512^3:"; "$BIN" $R 2>&1 | grep "steps in"
for n in $(seq 2 "$N"); do
    for kind in strong weak; do
        D=512; [ $kind = weak ] && D=$((512 * n))
        echo "$kind, 512x512x$D, one process --gpus $n:"
        "$BIN" $R --gpus "$n" --set "domain.size=[512,512,$D]" 2>&1 | grep "steps in"
        echo "$kind, 512x512x$D, mpirun -n $n:"
        $M -n "$n" "$BIN" $R --set "domain.size=[512,512,$D]" 2>&1 | grep "steps in"
    done
done
echo "== the slabs in both storages"
"$BIN" bench --solver cuda --gpus "$(seq -s, 1 "$N")" --size 512 --precision fp32 --precision fp16 --repeats 3
"$BIN" bench --solver cuda --gpus "$(seq -s, 1 "$N")" --size 1024 --precision fp16 --repeats 3
rm -rf "$WORK"
[ $failed = 0 ] && echo "mpi-multi: $N processes equal one GPU on every scenario" || echo "mpi-multi: FAILED"
exit $failed
