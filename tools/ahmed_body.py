#!/usr/bin/env python3
"""Writes the Ahmed body (Ahmed, Ramm & Faltin 1984, SAE 840300) as a binary STL
in millimetres: length 1044, width 389, height 288, front edges rounded with a
100 mm radius, a 222 mm rear slant at 25 degrees, 50 mm above the floor (z = 0).

The front is a rectangle that shrinks towards the nose as the 100 mm radius
says, so the rounded edges meet in lines at the corners where the original's
corners are spherical; the four 30 mm stilts are left out (the body floats at
its ground clearance). Usage: python3 tools/ahmed_body.py [slant_degrees] [out]
"""
import math
import struct
import sys

L, W, H, R, SLANT, CLEARANCE = 1044.0, 389.0, 288.0, 100.0, 222.0, 50.0


def stations(angle_deg):
    """(x, inset of the sides, top of the section) along the body."""
    out = []
    for k in range(17):
        phi = math.radians(90.0 * k / 16)
        x = R - R * math.cos(phi)
        d = R - R * math.sin(phi)
        out.append((x, d, CLEARANCE + H - d))
    a = math.radians(angle_deg)
    start = L - SLANT * math.cos(a)
    out.append((start, 0.0, CLEARANCE + H))
    out.append((L, 0.0, CLEARANCE + H - SLANT * math.sin(a)))
    return out


def ring(x, d, top):
    """The section's corners, counter-clockwise seen from +x."""
    y0, y1 = -W / 2 + d, W / 2 - d
    z0 = CLEARANCE + d
    return [(x, y0, z0), (x, y1, z0), (x, y1, top), (x, y0, top)]


def triangles(angle_deg):
    rings = [ring(*s) for s in stations(angle_deg)]
    tris = []
    for a, b in zip(rings, rings[1:]):
        for k in range(4):
            p, q = a[k], a[(k + 1) % 4]
            r, s = b[(k + 1) % 4], b[k]
            # Outward: the section runs counter-clockwise seen from +x.
            tris += [(p, r, s), (p, q, r)]
    front, back = rings[0], rings[-1]
    tris += [(front[0], front[2], front[1]), (front[0], front[3], front[2])]
    tris += [(back[0], back[1], back[2]), (back[0], back[2], back[3])]
    return tris


def normal(t):
    u = [t[1][i] - t[0][i] for i in range(3)]
    v = [t[2][i] - t[0][i] for i in range(3)]
    n = [u[1] * v[2] - u[2] * v[1], u[2] * v[0] - u[0] * v[2], u[0] * v[1] - u[1] * v[0]]
    length = math.sqrt(sum(c * c for c in n))
    return [c / length for c in n]


def main():
    angle = float(sys.argv[1]) if len(sys.argv) > 1 else 25.0
    out = sys.argv[2] if len(sys.argv) > 2 else f"assets/meshes/ahmed-{angle:g}.stl"
    tris = triangles(angle)
    with open(out, "wb") as f:
        header = f"Ahmed body, {angle:g} degree slant, mm (tools/ahmed_body.py)".encode()
        f.write(header.ljust(80, b" "))
        f.write(struct.pack("<I", len(tris)))
        for t in tris:
            f.write(struct.pack("<3f", *normal(t)))
            for v in t:
                f.write(struct.pack("<3f", *v))
            f.write(b"\0\0")
    print(f"{out}: {len(tris)} triangles")


if __name__ == "__main__":
    main()
