#!/usr/bin/env bash
# Stays-up soak: the window under Xvfb (CPU solver, field frames streaming,
# the plot type and isovalue slider changing every 10 frames) and a headless
# `run` that writes a checkpoint about every minute, side by side for
# $MINUTES minutes (default 30). Samples each process's resident size every
# 10 s and checks that after the first minute it stays within 5% of its value
# then, that both are still running at the end, and that neither printed an
# error. The window's first minute is counted from the end of its scripted
# start (surface modes, streamlines, anaglyph, display limits) and of one
# round of the timer's plot types and isovalues ("smoke: every plot type
# drawn ..."): until then the software driver's memory grows with each new
# view, and a loaded machine takes minutes to get there. Prints the figures
# for BENCHMARKS.md; exit code 0 when all hold.
#
# Under Xvfb the window draws with Mesa's lavapipe. Debian 12's Mesa 22.3
# lavapipe itself leaks (heaptrack: millions of allocations inside
# libvulkan_lvp.so never freed) and the window's resident size grows with
# it; use Mesa 25 from bookworm-backports
# (apt-get install -t bookworm-backports mesa-vulkan-drivers).
#
#   tools/soak.sh [BINARY]        (default target/release/flowscope)
set -uo pipefail
BIN=$(realpath "${1:-target/release/flowscope}")
MINUTES=${MINUTES:-30}
ROOT=$(realpath "$(dirname "$0")/..")
WORK=$(mktemp -d /tmp/flowscope-soak.XXXXXX)
cd "$WORK"
echo "soak: $MINUTES min, $BIN, in $WORK"
command -v Xvfb >/dev/null || { echo "soak: Xvfb is missing (apt-get install xvfb)"; exit 2; }

DISPLAY_NUM=":$((50 + RANDOM % 40))"
Xvfb "$DISPLAY_NUM" -screen 0 1280x800x24 >/dev/null 2>&1 &
XVFB=$!
sleep 2

# Steps per minute of the run from a quick benchmark of its grid (66³).
MLUPS=$("$BIN" bench --solver cpu --size 66 --repeats 1 2>/dev/null | awk '$1 == 66 { print $3 }')
EVERY=$(awk -v m="${MLUPS:-5}" 'BEGIN { n = int(m * 1e6 * 60 / 287496 / 2); print (n < 100 ? 100 : n) }')
echo "soak: run at ~$MLUPS MLUPS alone (shared with the window: about half), checkpoint every $EVERY steps"

DISPLAY=$DISPLAY_NUM XDG_CONFIG_HOME="$WORK/config" "$BIN" gui "$ROOT/assets/scenarios/cavity.toml" \
    --solver cpu --smoke-frames 1000000000 >window.log 2>&1 &
WINDOW=$!
"$BIN" run "$ROOT/assets/scenarios/cavity.toml" --solver cpu --steps 1000000000 \
    --set run.until_steady=1e-30 --checkpoint soak.ckpt --checkpoint-every "$EVERY" >run.log 2>&1 &
RUN=$!

rss() { awk '/VmRSS/ { print $2 }' "/proc/$1/status" 2>/dev/null || echo 0; }
echo "seconds window_rss_kb run_rss_kb checkpoint_step window_started" >samples.txt
END=$((SECONDS + MINUTES * 60))
while [ $SECONDS -lt $END ]; do
    sleep 10
    step=$(od -An -t u8 -j 44 -N 8 soak.ckpt 2>/dev/null | tr -d ' ')
    started=$(grep -q 'smoke: every plot type drawn' window.log && echo 1 || echo 0)
    echo "$SECONDS $(rss $WINDOW) $(rss $RUN) ${step:-0} $started" >>samples.txt
done
alive_window=$(kill -0 $WINDOW 2>/dev/null && echo yes || echo no)
alive_run=$(kill -0 $RUN 2>/dev/null && echo yes || echo no)
kill -INT $RUN 2>/dev/null
kill $WINDOW 2>/dev/null
wait $RUN 2>/dev/null
run_code=$?
wait $WINDOW 2>/dev/null
kill $XVFB 2>/dev/null

# Lowest and highest resident size in each 5 minutes: growth shows in the
# lows, transient allocations in the highs.
awk 'NR > 1 && $1 >= 60 {
        k = int(($1 - 60) / 300)
        if (!(k in wl) || $2 < wl[k]) wl[k] = $2; if ($2 > wh[k]) wh[k] = $2
        if (!(k in rl) || $3 < rl[k]) rl[k] = $3; if ($3 > rh[k]) rh[k] = $3
        n = k
    }
    END {
        print "minutes   window low-high MB   run low-high MB"
        for (k = 0; k <= n; k++)
            printf "%2d-%-2d     %6.1f-%-6.1f        %5.1f-%-5.1f\n", 1 + 5 * k, 6 + 5 * k, wl[k] / 1024, wh[k] / 1024, rl[k] / 1024, rh[k] / 1024
    }' samples.txt

# Within 5% of the value at the first minute, from then on.
awk -v minutes="$MINUTES" '
    NR == 1 { next }
    $1 >= 60 && !base_r { base_r = $3 }
    $1 >= 60 && $5 == 1 && !base_w { base_w = $2; at_w = $1 }
    base_r { r = $3 / base_r
             if (r > rmax) rmax = r; if (!rmin || r < rmin) rmin = r
             last_r = $3; step = $4 }
    base_w { w = $2 / base_w
             if (w > wmax) wmax = w; if (!wmin || w < wmin) wmin = w
             last_w = $2 }
    END {
        printf "window RSS: %.0f MB at %d s (a minute, its scripted start and a round of plot types done), %.0f MB at the end, range %+.1f%% to %+.1f%%\n", base_w / 1024, at_w, last_w / 1024, (wmin - 1) * 100, (wmax - 1) * 100
        printf "run RSS:    %.0f MB at 1 min, %.0f MB at the end, range %+.1f%% to %+.1f%%; last checkpoint at step %d\n", base_r / 1024, last_r / 1024, (rmin - 1) * 100, (rmax - 1) * 100, step
        ok = (wmax <= 1.05 && wmin >= 0.95 && rmax <= 1.05 && rmin >= 0.95)
        print (ok ? "memory: flat (within 5%)" : "memory: NOT flat")
        exit !ok
    }' samples.txt
flat=$?
checkpoints=$(grep -c "" <(awk 'NR > 1 && $4 != prev { prev = $4; print }' samples.txt))
errors=$(grep -ciE "panicked|error" window.log run.log | awk -F: '{ s += $2 } END { print s + 0 }')
echo "checkpoint written $checkpoints times; window alive at the end: $alive_window; run alive: $alive_run (exit $run_code after Ctrl-C)"
echo "error lines in the logs: $errors (XDG_RUNTIME_DIR notes from Mesa excluded below)"
grep -iE "panicked|error" window.log run.log | grep -v XDG_RUNTIME_DIR | head -5
real_errors=$(grep -iE "panicked|error" window.log run.log | grep -vc XDG_RUNTIME_DIR)
echo "samples and logs in $WORK"
[ $flat = 0 ] && [ "$alive_window" = yes ] && [ "$alive_run" = yes ] && [ "$run_code" = 130 ] && [ "$real_errors" = 0 ]
