#!/usr/bin/env bash
# Run on the GPU machine from the repository root (see tools/gpu-check.sh):
# the visualisation benchmark (bench --render) and renders of the cylinder and
# sphere scenarios as mesh, sphere impostors and streamlines, mono and
# anaglyph, into $OUT. Needs the Vulkan loader: carry .gl and unpack it first.
set -uo pipefail
BIN=${BIN:-.dev/flowscope}
OUT=${OUT:-/tmp}
if [ -d .gl ]; then for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig; fi
"$BIN" bench --render --size 128 --size 256 --repeats 7 2>&1 | tee "$OUT/bench-render.txt"
shot() { # scenario steps plot iso-frac name extra...
    local s=$1 steps=$2 plot=$3 frac=$4 name=$5; shift 5
    for stereo in mono anaglyph; do
        local extra=()
        [ "$stereo" = anaglyph ] && extra=(--stereo anaglyph)
        "$BIN" render "assets/scenarios/$s.toml" --steps "$steps" --plot "$plot" --iso-frac "$frac" \
            --size 960x540 "$@" "${extra[@]}" --out "$OUT/$s-$name-$stereo.png" 2>&1 | tail -2
    done
}
shot cylinder 30000 vorticity 0.12 mesh --mode mesh
shot cylinder 30000 vorticity 0.12 spheres --mode spheres --sphere-radius 0.7
shot cylinder 30000 vorticity 0.12 streamlines --mode none --streamlines --streamline-steps 2000 --streamline-radius 0.5
shot sphere 8000 vorticity 0.2 mesh --mode mesh
shot sphere 8000 vorticity 0.2 spheres --mode spheres
shot sphere 8000 vorticity 0.2 streamlines --mode none --streamlines --streamline-steps 2000 --streamline-radius 0.5
# One file back, not twelve.
(cd "$OUT" && tar cf renders.tar ./*.png && rm -f ./*.png)
