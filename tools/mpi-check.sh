#!/usr/bin/env bash
# MPI on a GPU machine (issue 25): two processes sharing GPU 0 against one,
# bit for bit on every lattice scenario in FP32 and 16-bit, and the cost of the
# MPI path on the urban case and a 256³ cavity (each process prints where its
# halo exchange spends its time).
#
#   BIN=target/release/flowscope bash tools/mpi-check.sh   # built with --features mpi
#
# Open MPI: tools/ompi-env.sh (OMPI=folder for a copy of Debian's).
set -u
BIN=$(realpath "${BIN:-target/release/flowscope}")
STEPS=${STEPS:-1001}
source "$(dirname "$0")/ompi-env.sh"
M="$MPIRUN --oversubscribe --bind-to none"
SCENARIOS=$(realpath assets/scenarios)
WORK=$(mktemp -d)
cd "$WORK" || exit 1
failed=0
for p in fp32 fp16; do
    for sc in cube urban cylinder sphere; do
        S=$SCENARIOS/$sc.toml
        "$BIN" run "$S" --solver cuda --precision $p --steps "$STEPS" --vti one.vti -q 2>&1 | grep "steps in"
        $M -n 2 "$BIN" run "$S" --solver cuda --precision $p --steps "$STEPS" --vti two.vti -q 2>&1 | grep "steps in\|halo"
        if cmp -s one.vti two.vti; then echo "EQUAL $p $sc"; else echo "DIFFER $p $sc"; failed=1; fi
    done
done
S=$SCENARIOS/urban.toml
"$BIN" run "$S" --solver cuda --steps 20000 -q 2>&1 | grep "steps in"
$M -n 2 "$BIN" run "$S" --solver cuda --steps 20000 -q 2>&1 | grep "steps in\|halo"
rm -rf "$WORK"
[ $failed = 0 ] && echo "mpi-check: two processes equal one on every scenario" || echo "mpi-check: FAILED"
exit $failed
