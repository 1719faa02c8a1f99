// Mesh voxelisation by ray parity (src/scenario/mesh/mod.rs has the method and
// the CPU reference). Compiled with --fmad=false: every product is rounded as
// the CPU rounds it, so both find the same crossings and the same cells.

// The canonical edge function of p-q at (y, z) and the side an on-edge point
// falls to (see `edge` in mod.rs): returns the value for p -> q, sets *side.
__device__ double edge(double p0, double p1, double q0, double q1, double y, double z, double *side) {
    bool forward = p0 < q0 || (p0 == q0 && p1 < q1);
    double a0 = forward ? p0 : q0, a1 = forward ? p1 : q1;
    double b0 = forward ? q0 : p0, b1 = forward ? q1 : p1;
    double e = (b0 - a0) * (z - a1) - (b1 - a1) * (y - a0);
    double s = e != 0.0 ? e : (b1 != a1 ? a1 - b1 : b0 - a0);
    double sign = copysign(1.0, s);
    *side = forward ? sign : -sign;
    return forward ? e : -e;
}

// One thread per triangle (9 doubles each, cell coordinates): flips bit c of
// `flips` for the first cell c at or beyond each crossing of a column.
extern "C" __global__ void mesh_crossings(const double *tris, unsigned n, int nx, int ny, int nz,
                                          unsigned *flips) {
    for (unsigned k = blockIdx.x * blockDim.x + threadIdx.x; k < n; k += gridDim.x * blockDim.x) {
        const double *t = tris + 9 * (size_t)k;
        double x0 = t[0], y0 = t[1], z0 = t[2];
        double x1 = t[3], y1 = t[4], z1 = t[5];
        double x2 = t[6], y2 = t[7], z2 = t[8];
        double area = (y1 - y0) * (z2 - z0) - (z1 - z0) * (y2 - y0);
        if (area == 0.0) continue;
        double ylo = fmax(ceil(fmin(fmin(y0, y1), y2)), 0.0);
        double yhi = fmin(floor(fmax(fmax(y0, y1), y2)), (double)ny - 1.0);
        double zlo = fmax(ceil(fmin(fmin(z0, z1), z2)), 0.0);
        double zhi = fmin(floor(fmax(fmax(z0, z1), z2)), (double)nz - 1.0);
        if (ylo > yhi || zlo > zhi) continue;
        for (long long z = (long long)zlo; z <= (long long)zhi; z++) {
            for (long long y = (long long)ylo; y <= (long long)yhi; y++) {
                double yf = (double)y, zf = (double)z, s0, s1, s2;
                double w0 = edge(y1, z1, y2, z2, yf, zf, &s0);
                double w1 = edge(y2, z2, y0, z0, yf, zf, &s1);
                double w2 = edge(y0, z0, y1, z1, yf, zf, &s2);
                if (s0 != s1 || s1 != s2) continue;
                double sum = w0 + w1 + w2;
                if (sum == 0.0) continue;
                double x = (w0 * x0 + w1 * x1 + w2 * x2) / sum;
                long long first = (long long)ceil(x);
                if (first >= nx) continue;
                if (first < 0) first = 0;
                size_t c = (size_t)first + (size_t)nx * ((size_t)y + (size_t)ny * (size_t)z);
                atomicXor(flips + c / 32, 1u << (c % 32));
            }
        }
    }
}

// One thread per column: the running parity of the flips along x.
extern "C" __global__ void mesh_parity(const unsigned *flips, int nx, unsigned columns,
                                       unsigned *out) {
    for (unsigned col = blockIdx.x * blockDim.x + threadIdx.x; col < columns;
         col += gridDim.x * blockDim.x) {
        size_t base = (size_t)nx * col;
        unsigned inside = 0, word = 0;
        for (int x = 0; x < nx; x++) {
            size_t c = base + x;
            inside ^= (flips[c / 32] >> (c % 32)) & 1u;
            word |= inside << (c % 32);
            if (c % 32 == 31 || x == nx - 1) {
                if (word) atomicOr(out + c / 32, word);
                word = 0;
            }
        }
    }
}
