# Sourced by tools/mpi-check.sh and tools/mpi-multi.sh: sets MPIRUN and the
# environment of one machine's MPI processes. A machine without Open MPI can
# use a copy of Debian's unpacked into OMPI=folder (the files of openmpi-bin,
# libopenmpi3, openmpi-common, libpmix2, libhwloc15, libevent-core-2.1-7,
# libevent-pthreads-2.1-7 and libudev1 under folder/usr, and /etc/openmpi
# under folder/etc): Open MPI's relocation variables then point there.
# Otherwise the `mpirun` on PATH.
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
