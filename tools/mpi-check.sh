#!/usr/bin/env bash
# MPI on a GPU machine (issue 25): two processes sharing GPU 0 against one,
# bit for bit on every lattice scenario in FP32 and 16-bit, and the cost of the
# MPI path on the urban case and a 256³ cavity (each process prints where its
# halo exchange spends its time).
#
#   BIN=target/release/flowscope bash tools/mpi-check.sh   # built with --features mpi
#
# Uses the `mpirun` on PATH. A machine without Open MPI can use a copy of
# Debian's unpacked into OMPI=folder (the files of openmpi-bin, libopenmpi3,
# openmpi-common, libpmix2, libhwloc15, libevent-core-2.1-7,
# libevent-pthreads-2.1-7 and libudev1 under folder/usr, and /etc/openmpi under
# folder/etc): the script then points Open MPI's relocation variables there.
set -u
BIN=$(realpath "${BIN:-target/release/flowscope}")
STEPS=${STEPS:-1001}
if [ -n "${OMPI:-}" ]; then
    O=$(realpath "$OMPI")
    L=$O/usr/lib/x86_64-linux-gnu
    export OPAL_PREFIX=$O/usr OPAL_EXEC_PREFIX=$O/usr OPAL_BINDIR=$O/usr/bin
    export OPAL_LIBDIR=$L/openmpi/lib OPAL_PKGLIBDIR=$L/openmpi/lib/openmpi3
    export OPAL_PKGDATADIR=$O/usr/share/openmpi OPAL_DATADIR=$O/usr/share OPAL_DATAROOTDIR=$O/usr/share
    export OPAL_SYSCONFDIR=$O/etc/openmpi
    export LD_LIBRARY_PATH=$L:$L/openmpi/lib:$L/pmix2/lib:${LD_LIBRARY_PATH:-}
    export PMIX_MCA_mca_base_component_path=$L/pmix2/lib/pmix PMIX_MCA_pcompress_base_silence_warning=1
    export PATH=$O/usr/bin:$PATH
    MPIRUN=$O/usr/bin/orterun
else
    MPIRUN=mpirun
fi
# One machine: shared memory between the processes.
export OMPI_MCA_btl=self,vader OMPI_MCA_pml=ob1 OMPI_MCA_mca_base_component_show_load_errors=0
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
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
