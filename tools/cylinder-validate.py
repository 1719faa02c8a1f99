#!/usr/bin/env python3
"""Cylinder at Re 3900 against Norberg's experiments, from a `flowscope run`'s
forces CSV (with --average-from) and a probe line along the wake centre line
(with the time averages' ux_mean column).

usage: cylinder-validate.py FORCES.csv PROBE.csv [--d 32] [--u 0.05] [--x-back 176] [--from STEP]

Prints the mean drag coefficient (from the CSV's closing `mean` row), the
Strouhal number from the peak of the lift coefficient's periodogram over the
averaging window, the number of shedding periods averaged, and the mean
recirculation length behind the cylinder (where the mean streamwise velocity
on the centre line turns positive for good), in diameters.
"""
import argparse
import csv
import sys

a = argparse.ArgumentParser()
a.add_argument("forces")
a.add_argument("probe")
a.add_argument("--d", type=float, default=32.0, help="diameter, cells")
a.add_argument("--u", type=float, default=0.05, help="inflow speed, lattice units")
a.add_argument("--x-back", type=float, default=176.0, help="x of the cylinder's back, cells")
a.add_argument("--from", dest="start", type=int, default=None, help="first step of the averages")
args = a.parse_args()

rows, mean_row = [], None
with open(args.forces) as f:
    r = csv.reader(f)
    header = next(r)
    for row in r:
        if row[0] == "mean":
            mean_row = [float(v) for v in row[1:]]
        elif row[0] == "rms":
            pass
        else:
            rows.append((int(row[0]), float(row[1]), float(row[2])))
if mean_row is None:
    sys.exit("the forces file has no `mean` row: run with --average-from")
start = args.start
if start is None:
    # The averaging window: the rows the mean row summarises (the last ones).
    cd = [c for _, c, _ in rows]
    for k in range(len(rows)):
        tail = cd[k:]
        if abs(sum(tail) / len(tail) - mean_row[0]) < 1e-6 * abs(mean_row[0]):
            start = rows[k][0]
            break
window = [r for r in rows if r[0] >= start]
# The shedding frequency: the peak of the lift's periodogram (Hann window),
# scanned over Strouhal numbers 0.05 to 0.6. Zero crossings of a turbulent
# lift signal count its small wiggles too.
import math
t0 = window[0][0]
ts = [r[0] - t0 for r in window]
cl_mean = sum(r[2] for r in window) / len(window)
span = ts[-1] - ts[0]
n = len(window)
hann = [0.5 - 0.5 * math.cos(2 * math.pi * k / (n - 1)) for k in range(n)]
best = (0.0, None)
steps = 2000
for j in range(steps + 1):
    st_try = 0.05 + 0.55 * j / steps
    f = st_try * args.u / args.d  # cycles per step
    re = im = 0.0
    for k, r in enumerate(window):
        a = 2 * math.pi * f * ts[k]
        v = hann[k] * (r[2] - cl_mean)
        re += v * math.cos(a)
        im -= v * math.sin(a)
    power = re * re + im * im
    if power > best[0]:
        best = (power, st_try)
st = best[1]
period = args.d / (args.u * st)
periods = span / period

probe = list(csv.DictReader(open(args.probe)))
if probe and "ux_mean" in probe[0]:
    # The means at the last step written (the file holds every sample).
    last = probe[-1]["step"]
    probe = [p for p in probe if p["step"] == last]
if not probe or "ux_mean" not in probe[0]:
    sys.exit("the probe file has no ux_mean column: run with --average-from")
# The end of the reversed flow: the last point with a negative mean (a thin
# layer of forward flow right behind the cylinder, a secondary eddy, does
# not end the recirculation).
line = [(float(p["x"]), float(p["ux_mean"])) for p in probe]
line = [(x, u) for x, u in line if x >= args.x_back]
lr = None
negative = [k for k, (_, u) in enumerate(line) if u < 0]
if negative and negative[-1] + 1 < len(line):
    (xa, ua), (xb, ub) = line[negative[-1]], line[negative[-1] + 1]
    x0 = xa + (xb - xa) * (-ua) / (ub - ua)
    lr = (x0 - args.x_back) / args.d

print(f"averaged from step {start}: {len(window)} force rows, {periods:.1f} shedding periods of {period:.0f} steps")
print(f"mean drag coefficient {mean_row[0]:.3f} (Norberg 0.98: {100 * (mean_row[0] / 0.98 - 1):+.1f}%)")
print(f"Strouhal number {st:.4f} (0.215: {100 * (st / 0.215 - 1):+.1f}%)")
print(f"mean lift coefficient {mean_row[1]:.3f}")
if lr is None:
    print("mean recirculation length: no reversed flow found on the probe line")
else:
    print(f"mean recirculation length {lr:.2f} D (1.2-1.7 D)")
