#!/usr/bin/env bash
# Installs what the tests need on a Debian/Ubuntu machine, once; sourced by
# .ci/run so that the Python it sets up is the one the tests call.
#
# - Mesa's lavapipe software Vulkan adapter: the GPU render tests run on it
#   and fail without it (they never skip).
# - Xvfb: the window test runs under it.
# - g++: some of the projection method's kernels are compiled for the CPU
#   and run against the CPU code (tests/emulation).
# - Open MPI and libclang: the tests build with `--features mpi` (the `mpi`
#   crate's bindings are generated against the system's mpi.h) and run
#   `mpirun -n 2` and `-n 3`.
# - Python with `vtk` (the .vti files are read back by an independent reader)
#   and NVRTC 13.0 from `nvidia-cuda-nvrtc` (the CUDA kernels are compiled in
#   the tests, no GPU needed; the GPU machine has CUDA 13.0). Where the
#   system's Python may not take packages (Debian's is "externally managed"),
#   they go into a virtual environment in target/test-python.

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi
}

apt_packages=()
ls /usr/share/vulkan/icd.d/lvp_icd*.json >/dev/null 2>&1 || apt_packages+=(mesa-vulkan-drivers libvulkan1)
command -v Xvfb >/dev/null || apt_packages+=(xvfb)
command -v python3 >/dev/null || apt_packages+=(python3)
command -v mpirun >/dev/null || apt_packages+=(openmpi-bin)
# g++ (C++20): kernels run on the CPU in the tests (tests/emulation).
command -v g++ >/dev/null || apt_packages+=(g++)
[ -e /usr/include/x86_64-linux-gnu/mpi.h ] || [ -e /usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h ] \
    || apt_packages+=(libopenmpi-dev)
# (libclang.so itself: libclang-cpp is another library.)
ls /usr/lib/llvm-*/lib/libclang.so >/dev/null 2>&1 || apt_packages+=(libclang-dev)

has_python_packages() {
    python3 - 2>/dev/null <<'PY'
import os, sys
import vtk, nvidia
sys.exit(not os.path.exists(os.path.join(list(nvidia.__path__)[0], "cu13", "lib", "libnvrtc.so.13")))
PY
}

venv="$PWD/target/test-python"
if [ -x "$venv/bin/python3" ]; then
    export PATH="$venv/bin:$PATH"
fi
if ! has_python_packages && [ ! -x "$venv/bin/python3" ]; then
    # A virtual environment needs Debian's python3-venv.
    python3 -m venv --help >/dev/null 2>&1 && python3 -c "import ensurepip" 2>/dev/null \
        || apt_packages+=(python3-venv)
fi

if [ ${#apt_packages[@]} -gt 0 ]; then
    echo "installing ${apt_packages[*]}" >&2
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${apt_packages[@]}" >/dev/null
fi

if ! has_python_packages; then
    if ! python3 -m pip install --quiet --disable-pip-version-check vtk "nvidia-cuda-nvrtc==13.0.*" 2>/dev/null; then
        echo "installing vtk and nvidia-cuda-nvrtc 13.0 into $venv" >&2
        [ -x "$venv/bin/python3" ] || python3 -m venv "$venv"
        "$venv/bin/python3" -m pip install --quiet --disable-pip-version-check vtk "nvidia-cuda-nvrtc==13.0.*"
        export PATH="$venv/bin:$PATH"
    fi
fi
has_python_packages || { echo "error: Python's vtk and nvidia-cuda-nvrtc 13.0 are still missing" >&2; return 1 2>/dev/null || exit 1; }
