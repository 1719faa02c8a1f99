#!/usr/bin/env bash
# Run on the GPU machine from the repository root (see tools/gpu-check.sh):
# renders the shipped scenarios with the CUDA solver and Vulkan into $OUT.
# Needs the Vulkan loader: carry .gl (README, developers) and unpack it first.
set -uo pipefail
BIN=${BIN:-.dev/flowscope}
OUT=${OUT:-/tmp}
if [ -d .gl ]; then for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig; fi
"$BIN" render assets/scenarios/cylinder.toml --steps 30000 --plot curl --iso-frac 0.7 --size 1280x720 --out "$OUT/cylinder-curl.png"
"$BIN" render assets/scenarios/cylinder.toml --steps 30000 --plot q --iso-frac 0.55 --size 1280x720 --out "$OUT/cylinder-q.png"
"$BIN" render assets/scenarios/sphere.toml --steps 8000 --plot vorticity --iso-frac 0.2 --size 1280x720 --out "$OUT/sphere-vorticity.png"
"$BIN" render assets/scenarios/urban.toml --steps 8000 --plot vorticity --iso-frac 0.2 --size 1280x720 --out "$OUT/urban-vorticity.png"
"$BIN" render assets/scenarios/cube.toml --steps 8000 --plot q --iso-frac 0.55 --size 1280x720 --out "$OUT/cube-q.png"
