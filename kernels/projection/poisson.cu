// The pressure Poisson equation on the GPU: the operator of each multigrid
// level, its red-black Gauss–Seidel and Jacobi sweeps, restriction and
// prolongation, the coarsest grid's solve, and the reductions and vector
// updates of conjugate gradients (src/solver/projection/poisson.rs and
// multigrid.rs are the reference, whose order of operations the kernels keep;
// the reductions are trees in double precision).
//
// A level: `links` bit d set where the neighbour in direction d (−x, +x, −y,
// +y, −z, +z) is coupled; `weights` the couplings toward +x, +y and +z, an
// array of the level's cells for each (null: all 1, the finest grid; the
// coupling toward −x is the one toward +x of the cell below, the operator
// being symmetric to the bit, which the host checks); `diag` the diagonal,
// 0 where the cell takes no part, or null on the finest grid where its
// links byte holds it (see `diagonal`). `faces` holds two bits per domain
// face, face (axis, high) at bit 2 (2 axis + high): 0 wall, 1 periodic,
// 2 fixed pressure.

#define FACE_WALL 0u
#define FACE_PERIODIC 1u
#define FACE_FIXED 2u

struct Level {
    int n[3];
    unsigned faces;
};

__device__ __forceinline__ unsigned face(const Level& l, int axis, int high) {
    return (l.faces >> (2 * (2 * axis + high))) & 3u;
}

// Cell indices are 32-bit (the host refuses grids of 2^32 / 3 cells or more):
// the 64-bit index arithmetic of every neighbour made the operator's
// kernels instruction-bound (issue 20, twenty-second session).
__device__ __forceinline__ unsigned index_of(const Level& l, const int p[3]) {
    return (unsigned)p[0] + (unsigned)l.n[0] * ((unsigned)p[1] + (unsigned)l.n[1] * (unsigned)p[2]);
}

__device__ __forceinline__ bool own_cell(const Level& l, int p[3], unsigned* c) {
    p[0] = blockIdx.x * blockDim.x + threadIdx.x;
    p[1] = blockIdx.y * blockDim.y + threadIdx.y;
    p[2] = blockIdx.z * blockDim.z + threadIdx.z;
    if (p[0] >= l.n[0] || p[1] >= l.n[1] || p[2] >= l.n[2]) return false;
    *c = index_of(l, p);
    return true;
}

// poisson::neighbour for each direction of cell c at p (−x, +x, −y, +y,
// −z, +z), wrapped at every face: a step of the axis' stride, or back
// across the grid at its ends.
__device__ __forceinline__ void neighbours(const Level& l, const int p[3], unsigned c,
                                           unsigned nb[6]) {
    unsigned stride = 1;
#pragma unroll
    for (int a = 0; a < 3; a++) {
        unsigned span = (unsigned)(l.n[a] - 1) * stride;
        nb[2 * a] = p[a] > 0 ? c - stride : c + span;
        nb[2 * a + 1] = p[a] < l.n[a] - 1 ? c + stride : c - span;
        stride *= (unsigned)l.n[a];
    }
}

// The six couplings of cell c, linked or not, read together (as `gather`):
// three stored with the cell, three with its neighbours below (nb). Half
// the bytes of six a cell, which the coarse grids' sweeps spent most of
// their traffic on.
__device__ __forceinline__ void couplings(const Level& l, const float* weights, unsigned c,
                                          const unsigned nb[6], float w[6]) {
    unsigned n = (unsigned)l.n[0] * (unsigned)l.n[1] * (unsigned)l.n[2];
#pragma unroll
    for (int a = 0; a < 3; a++) {
        w[2 * a] = weights ? weights[a * n + nb[2 * a]] : 1.0f;
        w[2 * a + 1] = weights ? weights[a * n + c] : 1.0f;
    }
}

// The diagonal of cell c: diag[c], or without `diag` (the finest grid, its
// couplings all 1) the links counted plus bits 6-7 of the links byte, the
// fixed-pressure part: the same value, from one byte a cell instead of five.
__device__ __forceinline__ float diagonal(const unsigned char* links, const float* diag, size_t c) {
    if (diag) return diag[c];
    unsigned bits = links[c];
    return (float)(__popc(bits & 63u) + (bits >> 6));
}

// x at the six neighbours, linked or not (`neighbours` wraps every axis,
// so each index lies in the grid): loads issued together, where
// loads under each link's branch waited for one another (apply and the
// smoother ran at a third of the bandwidth, latency-bound).
__device__ __forceinline__ void gather(const float* x, const unsigned nb[6], float around[6]) {
#pragma unroll
    for (int dir = 0; dir < 6; dir++) around[dir] = x[nb[dir]];
}

// What the operator reads at cell c: its links and diagonal, x there and at
// the six neighbours, the six couplings. Loaded together, before any branch
// on them: a kernel that first tested the diagonal, then read x, waited for
// memory twice (apply, the smoother and prolongation ran at a third to a
// half of the bandwidth).
struct Stencil {
    unsigned bits;
    float d, own;
    float around[6], w[6];
};

__device__ __forceinline__ Stencil stencil(const Level& l, const unsigned char* links,
                                           const float* weights, const float* diag,
                                           const float* x, unsigned c, const int p[3]) {
    Stencil s;
    unsigned nb[6];
    neighbours(l, p, c, nb);
    gather(x, nb, s.around);
    couplings(l, weights, c, nb, s.w);
    s.own = x[c];
    s.bits = links[c];
    s.d = diagonal(links, diag, c);
    return s;
}

// Operator::differences: (A x)_c as a sum of differences.
__device__ __forceinline__ float differences_of(const Stencil& t) {
    float s = 0.0f, coupled = 0.0f;
#pragma unroll
    for (int dir = 0; dir < 6; dir++) {
        if (t.bits & (1u << dir)) {
            s += t.w[dir] * (t.own - t.around[dir]);
            coupled += t.w[dir];
        }
    }
    return s + (t.d - coupled) * t.own;
}

__device__ __forceinline__ float differences(const Level& l, const unsigned char* links,
                                             const float* weights, const float* diag,
                                             const float* x, unsigned c, const int p[3]) {
    return differences_of(stencil(l, links, weights, diag, x, c, p));
}

// out = A x (residual = 0), or out = b − A x (residual = 1); 0 in cells that
// take no part.
__device__ __forceinline__ void apply_on(const unsigned char* __restrict__ links,
                                         const float* __restrict__ weights,
                                         const float* __restrict__ diag, int nx, int ny, int nz,
                                         unsigned faces, const float* __restrict__ x,
                                         const float* __restrict__ b, int residual,
                                         float* __restrict__ out) {
    Level l = {{nx, ny, nz}, faces};
    int p[3];
    unsigned c;
    if (!own_cell(l, p, &c)) return;
    Stencil t = stencil(l, links, weights, diag, x, c, p);
    float bc = residual ? b[c] : 0.0f;
    // Worked out everywhere and chosen, not branched on: behind a branch
    // the compiler moved the loads after the diagonal's.
    float ax = differences_of(t);
    out[c] = t.d > 0.0f ? (residual ? bc - ax : ax) : 0.0f;
}

// The finest grid (no weights, its diagonal in the links byte) runs a copy
// of each operator kernel compiled with those pointers null, so that its
// couplings and diagonal cost no instructions: a fifth fewer in a colour
// pass of `smooth` (whose time did not move: it is bound by L2 bandwidth),
// 16% less time in the marching `smooth_sweep` before this one (H100, ncu,
// thirty-second session).
extern "C" __global__ void apply(const unsigned char* __restrict__ links,
                                 const float* __restrict__ weights, const float* __restrict__ diag,
                                 int nx, int ny, int nz, unsigned faces,
                                 const float* __restrict__ x, const float* __restrict__ b,
                                 int residual, float* __restrict__ out) {
    if (!weights && !diag) {
        apply_on(links, nullptr, nullptr, nx, ny, nz, faces, x, b, residual, out);
    } else {
        apply_on(links, weights, diag, nx, ny, nz, faces, x, b, residual, out);
    }
}

// One colour of a red-black Gauss–Seidel sweep: the cells with x + y + z of
// parity `colour`. Along a periodic axis of odd length the first and last
// cells have the same colour: the CPU's sweep (rows and planes in order, the
// last plane apart) updates a cell on the last layer of such an axis after its
// neighbour across the wrap, so those go in later passes: pass k takes the
// cells on the last layer of k of the axes in `odd` (all cells when `odd` is
// 0 and pass is 0).
// One thread per cell of the colour: thread i of a row takes x = 2 i or
// 2 i + 1.
__device__ __forceinline__ void smooth_on(const unsigned char* __restrict__ links,
                                          const float* __restrict__ weights,
                                          const float* __restrict__ diag, int nx, int ny, int nz,
                                          unsigned faces, float* __restrict__ x,
                                          const float* __restrict__ b, int colour, unsigned odd,
                                          int pass) {
    Level l = {{nx, ny, nz}, faces};
    int p[3];
    p[1] = blockIdx.y * blockDim.y + threadIdx.y;
    p[2] = blockIdx.z * blockDim.z + threadIdx.z;
    p[0] = 2 * (int)(blockIdx.x * blockDim.x + threadIdx.x) + ((colour + p[1] + p[2]) & 1);
    if (p[0] >= nx || p[1] >= ny || p[2] >= nz) return;
    unsigned c = index_of(l, p);
    if (odd) {
        int last = 0;
        for (int a = 0; a < 3; a++) last += ((odd >> a) & 1u) && p[a] == l.n[a] - 1;
        if (last != pass) return;
    }
    Stencil t = stencil(l, links, weights, diag, x, c, p);
    float bc = b[c];
    float s = 0.0f;
#pragma unroll
    for (int dir = 0; dir < 6; dir++) {
        if (t.bits & (1u << dir)) s += t.w[dir] * t.around[dir];
    }
    float gs = (bc + s) / t.d;
    // A cell that takes no part keeps its value, stored back rather than
    // branched around (see `apply`).
    x[c] = t.d > 0.0f ? t.own + 1.0f * (gs - t.own) : t.own;
}

extern "C" __global__ void smooth(const unsigned char* __restrict__ links,
                                  const float* __restrict__ weights,
                                  const float* __restrict__ diag, int nx, int ny, int nz,
                                  unsigned faces, float* __restrict__ x,
                                  const float* __restrict__ b, int colour, unsigned odd,
                                  int pass) {
    if (!weights && !diag) {
        smooth_on(links, nullptr, nullptr, nx, ny, nz, faces, x, b, colour, odd, pass);
    } else {
        smooth_on(links, weights, diag, nx, ny, nz, faces, x, b, colour, odd, pass);
    }
}

// One red-black sweep of a level without periodic axes of odd length and of
// even length along x, in one pass. A block takes SWEEP_TY rows of
// SWEEP_TX cells and `span` planes of them and marches up the planes: a
// thread holds a pair of neighbours of a row (x even and odd) on four planes
// in registers, and the block each plane in shared memory for the rows and
// pairs beside. At step m a thread updates the first colour's cell of its
// pair on plane m, then the second colour's on plane m − 1 (the cell below
// it), whose neighbours all hold the first colour's new values by then, and
// writes that plane's pair to `to` (another vector: a block must not see its
// neighbours' new values). The block's outer rows, and the pairs at either
// end of a row, update the first colour only, for the rows and pairs inside;
// an outer row's neighbour across the block's edge is read from `from`. The
// values and their order of operations are smooth's, cell by cell.
//
// smooth's colour passes each read every sector of x, b and the links for
// half the cells, and are bound by L2 (81% of its throughput on the H100,
// the finest urban grid). Blocks of 32 × 8 × 4 cells with their own halo of
// two made the 256³ cavity's step 40% slower than the colour passes, and
// 32 × 8 columns marching through five planes in shared memory took 63 µs a
// sweep of that grid against their 41: 250 instructions a cell, two
// barriers a plane, a third of the threads idle in each phase (thirty-first
// and thirty-second sessions). This form, one barrier a plane and about as
// many instructions a cell as the colour passes' (its SASS), is not yet
// timed.
#define SWEEP_LANES 32
#define SWEEP_TY 8
#define SWEEP_ROWS (SWEEP_TY + 2)
#define SWEEP_TX (2 * SWEEP_LANES - 4)
#define SWEEP_WIDTH (2 * SWEEP_LANES)
#define SWEEP_SLOTS 3

// v in [−2, n + 1] wrapped into the grid (n ≥ 2 on every axis: the host's
// condition).
__device__ __forceinline__ int wrapped(int v, int n) {
    return v < 0 ? v + n : (v >= n ? v - n : v);
}

// What a cell's update reads from memory besides x and the couplings,
// loaded a step of the march ahead, so that no step waits on memory after
// its barrier.
struct Operands {
    unsigned c, bits;
    float bc, dd;
};

__device__ __forceinline__ Operands operands(const unsigned char* links, const float* diag,
                                             const float* b, unsigned c) {
    Operands o;
    o.c = c;
    o.bits = links[c];
    o.bc = b[c];
    o.dd = diag ? diag[c] : 0.0f;
    return o;
}

// Gauss–Seidel at a cell (global position p, what it reads `o`) from x at
// its six neighbours (−x, +x, −y, +y, −z, +z) and its own: the new value
// (smooth's, to the bit).
__device__ __forceinline__ float sweep_cell(const Level& l, const float* weights,
                                            const float* diag, const Operands& o,
                                            const float around[6], float own, const int p[3]) {
    float w[6];
    if (weights) {
        unsigned nb[6];
        neighbours(l, p, o.c, nb);
        couplings(l, weights, o.c, nb, w);
    } else {
#pragma unroll
        for (int dir = 0; dir < 6; dir++) w[dir] = 1.0f;
    }
    // diagonal(), from the links byte already read.
    const float d = diag ? o.dd : (float)(__popc(o.bits & 63u) + (o.bits >> 6));
    float s = 0.0f;
#pragma unroll
    for (int dir = 0; dir < 6; dir++) {
        if (o.bits & (1u << dir)) s += w[dir] * around[dir];
    }
    float gs = (o.bc + s) / d;
    return d > 0.0f ? own + 1.0f * (gs - own) : own;
}

__device__ __forceinline__ float element(float2 v, int e) { return e ? v.y : v.x; }

__device__ __forceinline__ void set_element(float2& v, int e, float f) {
    v.x = e ? v.x : f;
    v.y = e ? f : v.y;
}

__device__ __forceinline__ void smooth_sweep_on(const unsigned char* __restrict__ links,
                                                const float* __restrict__ weights,
                                                const float* __restrict__ diag, int nx, int ny,
                                                int nz, unsigned faces,
                                                const float* __restrict__ from,
                                                float* __restrict__ to, const float* __restrict__ b,
                                                int first, int span) {
    __shared__ float2 t[SWEEP_SLOTS][SWEEP_ROWS][SWEEP_LANES];
    Level l = {{nx, ny, nz}, faces};
    const int lane = (int)threadIdx.x, row = (int)threadIdx.y;
    const int z0 = (int)blockIdx.z * span, z1 = min(z0 + span, nz);
    const unsigned plane = (unsigned)nx * (unsigned)ny;
    // This thread's pair, unwrapped (ux even, as nx is) and wrapped: a block
    // past the grid's end reaches more than two cells beyond it.
    const int ux = (int)blockIdx.x * SWEEP_TX - 2 + 2 * lane;
    const int uy = (int)blockIdx.y * SWEEP_TY - 1 + row;
    const int x = (ux % nx + nx) % nx, y = (uy % ny + ny) % ny;
    const unsigned column = (unsigned)x + (unsigned)nx * (unsigned)y;
    // An outer row's neighbour across the block's edge.
    const bool edge = row == 0 || row == SWEEP_ROWS - 1;
    const int y_out = ((row == 0 ? uy - 1 : uy + 1) % ny + ny) % ny;
    const unsigned outer = (unsigned)x + (unsigned)nx * (unsigned)y_out;
    // The pairs of the rows inside update the second colour and write.
    const bool inside = lane > 0 && lane < SWEEP_LANES - 1 && !edge && ux < nx && uy < ny;

    auto pair = [&](int z) {
        return *reinterpret_cast<const float2*>(from + plane * (unsigned)wrapped(z, nz) + column);
    };
    // The element of the pair of the first colour on plane z (that of the
    // second on plane z − 1).
    auto first_of = [&](int z) { return (first - (uy + z)) & 1; };
    auto slot = [&](int z) { return (z - z0 + 3) % SWEEP_SLOTS; };
    auto cell = [&](int z, int e, int p[3]) {
        p[0] = x + e;
        p[1] = y;
        p[2] = wrapped(z, nz);
        return plane * (unsigned)p[2] + column + (unsigned)e;
    };
    // x at element e's neighbours −x, +x, −y, +y on plane z, from the
    // block's copy (clamped at the rows' ends, whose values are not used).
    auto in_plane = [&](int z, int e, float around[6]) {
        const float* s = reinterpret_cast<const float*>(t[slot(z)]);
        const int i = row * SWEEP_WIDTH + 2 * lane + e;
        around[0] = s[e || lane > 0 ? i - 1 : i];
        around[1] = s[!e || lane < SWEEP_LANES - 1 ? i + 1 : i];
        around[2] = s[row > 0 ? i - SWEEP_WIDTH : i];
        around[3] = s[row < SWEEP_ROWS - 1 ? i + SWEEP_WIDTH : i];
    };

    // At step m: planes m − 2 to m + 1 in p2, p1, p0, p_next; the block's
    // copy of plane m (as it was) and of plane m − 1 (its first colour new)
    // in shared memory; what the first colour's update on plane m and the
    // second's on plane m − 1 read from memory in `one`, `two` and `far`.
    int p[3];
    float2 p2 = {0.0f, 0.0f}, p1 = pair(z0 - 2), p0 = pair(z0 - 1), p_next = pair(z0);
    t[slot(z0 - 1)][row][lane] = p0;
    Operands one = operands(links, diag, b, cell(z0 - 1, first_of(z0 - 1), p)), two = {};
    float far = 0.0f;
    if (edge) far = from[plane * (unsigned)wrapped(z0 - 1, nz) + outer + first_of(z0 - 1)];
    __syncthreads();
    for (int m = z0 - 1; m <= z1; m++) {
        const int e = first_of(m);
        t[slot(m + 1)][row][lane] = p_next;
        // The next step's reads, issued before this step's work.
        float2 p_after = m + 2 <= z1 + 1 ? pair(m + 2) : p_next;
        Operands one_next = {}, two_next = {};
        float far_next = 0.0f;
        if (m + 1 <= z1) {
            one_next = operands(links, diag, b, cell(m + 1, 1 - e, p));
            if (edge) far_next = from[plane * (unsigned)wrapped(m + 1, nz) + outer + 1 - e];
        }
        if (inside && m >= z0 && m < z1) two_next = operands(links, diag, b, cell(m, 1 - e, p));
        // The first colour on plane m: its z neighbours are the second
        // colour's, as they were.
        {
            float around[6];
            in_plane(m, e, around);
            if (edge) around[row == 0 ? 2 : 3] = far;
            around[4] = element(p1, e);
            around[5] = element(p_next, e);
            cell(m, e, p);
            const float v = sweep_cell(l, weights, diag, one, around, element(p0, e), p);
            set_element(p0, e, v);
            reinterpret_cast<float*>(t[slot(m)][row])[2 * lane + e] = v;
        }
        // The second colour on plane m − 1 (element e there too): its z
        // neighbours are the first colour's, new.
        if (inside && m - 1 >= z0) {
            float around[6];
            in_plane(m - 1, e, around);
            around[4] = element(p2, e);
            around[5] = element(p0, e);
            cell(m - 1, e, p);
            set_element(p1, e, sweep_cell(l, weights, diag, two, around, element(p1, e), p));
            *reinterpret_cast<float2*>(to + plane * (unsigned)(m - 1) + column) = p1;
        }
        __syncthreads();
        p2 = p1;
        p1 = p0;
        p0 = p_next;
        p_next = p_after;
        one = one_next;
        two = two_next;
        far = far_next;
    }
}

extern "C" __global__ void __launch_bounds__(SWEEP_LANES * SWEEP_ROWS)
    smooth_sweep(const unsigned char* __restrict__ links, const float* __restrict__ weights,
                 const float* __restrict__ diag, int nx, int ny, int nz, unsigned faces,
                 const float* __restrict__ from, float* __restrict__ to,
                 const float* __restrict__ b, int first, int span) {
    if (!weights && !diag) {
        smooth_sweep_on(links, nullptr, nullptr, nx, ny, nz, faces, from, to, b, first, span);
    } else {
        smooth_sweep_on(links, weights, diag, nx, ny, nz, faces, from, to, b, first, span);
    }
}

// One damped Jacobi sweep: out = x + ω (b − A x) / diag (0 where no part).
extern "C" __global__ void jacobi(const unsigned char* __restrict__ links,
                                  const float* __restrict__ diag, int nx, int ny, int nz,
                                  unsigned faces, const float* __restrict__ x,
                                  const float* __restrict__ b, float omega,
                                  float* __restrict__ out) {
    Level l = {{nx, ny, nz}, faces};
    int p[3];
    unsigned c;
    if (!own_cell(l, p, &c)) return;
    float d = diagonal(links, diag, c);
    out[c] = d > 0.0f ? x[c] + omega * (b[c] - differences(l, links, nullptr, diag, x, c, p)) / d
                      : 0.0f;
}

// Coarse right-hand side: half the sum of the fine residual b − A x over
// each coarse cell (one thread per coarse cell), the residual computed here
// rather than stored: the same values as the CPU's residual then its sum.
__device__ __forceinline__ void restrict_residual_on(const unsigned char* __restrict__ links,
                                                     const float* __restrict__ weights,
                                                     const float* __restrict__ diag, int fx, int fy,
                                                     int fz, unsigned faces,
                                                     const float* __restrict__ x,
                                                     const float* __restrict__ fine_b,
                                                     const float* __restrict__ coarse_diag, int nx,
                                                     int ny, int nz, float* __restrict__ b) {
    Level coarse = {{nx, ny, nz}, 0};
    Level fine = {{fx, fy, fz}, faces};
    int p[3];
    unsigned c;
    if (!own_cell(coarse, p, &c)) return;
    float s = 0.0f;
#pragma unroll
    for (int dz = 0; dz < 2; dz++)
#pragma unroll
        for (int dy = 0; dy < 2; dy++)
#pragma unroll
            for (int dx = 0; dx < 2; dx++) {
                int q[3] = {2 * p[0] + dx, 2 * p[1] + dy, 2 * p[2] + dz};
                if (q[0] < fx && q[1] < fy && q[2] < fz) {
                    unsigned f = index_of(fine, q);
                    // Chosen, not branched on (see `apply`).
                    Stencil t = stencil(fine, links, weights, diag, x, f, q);
                    float r = fine_b[f] - differences_of(t);
                    s += t.d > 0.0f ? r : 0.0f;
                }
            }
    b[c] = coarse_diag[c] > 0.0f ? 0.5f * s : 0.0f;
}

extern "C" __global__ void restrict_residual(const unsigned char* __restrict__ links,
                                             const float* __restrict__ weights,
                                             const float* __restrict__ diag, int fx, int fy,
                                             int fz, unsigned faces,
                                             const float* __restrict__ x,
                                             const float* __restrict__ fine_b,
                                             const float* __restrict__ coarse_diag, int nx,
                                             int ny, int nz, float* __restrict__ b) {
    if (!weights && !diag) {
        restrict_residual_on(links, nullptr, nullptr, fx, fy, fz, faces, x, fine_b, coarse_diag,
                             nx, ny, nz, b);
    } else {
        restrict_residual_on(links, weights, diag, fx, fy, fz, faces, x, fine_b, coarse_diag,
                             nx, ny, nz, b);
    }
}

// multigrid::along: the two coarse cells nearest fine cell i along an axis.
__device__ __forceinline__ void along(int i, int n, unsigned low_face, unsigned high_face,
                                      int cell[2], float w[2]) {
    int holder = i / 2;
    cell[0] = holder;
    w[0] = 0.75f;
    unsigned f;
    int wrapped;
    if ((i & 1) == 0) {
        if (holder != 0) {
            cell[1] = holder - 1;
            w[1] = 0.25f;
            return;
        }
        f = low_face;
        wrapped = n - 1;
    } else {
        if (holder + 1 != n) {
            cell[1] = holder + 1;
            w[1] = 0.25f;
            return;
        }
        f = high_face;
        wrapped = 0;
    }
    if (f == FACE_PERIODIC) {
        cell[1] = wrapped;
        w[1] = 0.25f;
    } else {
        cell[1] = holder;
        w[1] = f == FACE_FIXED ? -0.25f : 0.25f;
    }
}

// x_fine += the coarse correction e: trilinear where all eight coarse cells
// take part, else the holder's value (multigrid::Stencil). A thread takes
// the two fine cells 2h and 2h + 1 of a row beside each other: their
// corners lie among twelve coarse cells, read once with the two cells'
// own values before anything is worked out (a thread per fine cell read
// sixteen values for each and was instruction-bound; one per coarse cell,
// eight fine cells and 27 corners, held 112 registers and waited on each
// fine cell's loads in turn).
extern "C" __global__ void prolong_add(const float* __restrict__ e,
                                       const float* __restrict__ coarse_diag, int cx, int cy,
                                       int cz, const unsigned char* __restrict__ fine_links,
                                       const float* __restrict__ fine_diag, int nx, int ny, int nz,
                                       unsigned faces, float* __restrict__ x) {
    Level l = {{nx, ny, nz}, faces};
    int h = blockIdx.x * blockDim.x + threadIdx.x;
    int q[3] = {2 * h, (int)(blockIdx.y * blockDim.y + threadIdx.y),
                (int)(blockIdx.z * blockDim.z + threadIdx.z)};
    if (h >= cx || q[1] >= ny || q[2] >= nz) return;
    // Along x for each parity, and along y and z: the two coarse cells (0
    // the holder) and their weights. at: the three coarse columns, the
    // holder in the middle.
    int cell[4][2];
    float w[4][2];
    along(q[0], cx, face(l, 0, 0), face(l, 0, 1), cell[0], w[0]);
    along(q[0] + 1, cx, face(l, 0, 0), face(l, 0, 1), cell[1], w[1]);
    along(q[1], cy, face(l, 1, 0), face(l, 1, 1), cell[2], w[2]);
    along(q[2], cz, face(l, 2, 0), face(l, 2, 1), cell[3], w[3]);
    int at[3] = {cell[0][1], h, cell[1][1]};
    float corner[12];
    unsigned active = 0;
#pragma unroll
    for (int k = 0; k < 12; k++) {
        unsigned m = (unsigned)at[k % 3] +
                     (unsigned)cx * ((unsigned)cell[2][(k / 3) & 1] +
                                     (unsigned)cy * (unsigned)cell[3][k / 6]);
        active |= (coarse_diag[m] > 0.0f ? 1u : 0u) << k;
        corner[k] = e[m];
    }
    bool second = q[0] + 1 < nx;
    unsigned c = index_of(l, q);
    unsigned c2 = second ? c + 1 : c;
    float own[2] = {x[c], x[c2]};
    bool part[2] = {diagonal(fine_links, fine_diag, c) > 0.0f,
                    diagonal(fine_links, fine_diag, c2) > 0.0f};
#pragma unroll
    for (int par = 0; par < 2; par++) {
        int count = 0;
        float sum = own[par];
#pragma unroll
        for (int k = 0; k < 8; k++) {
            // Corner k's place among the twelve: bit 0 the x neighbour
            // (below h for the even cell, above for the odd), bits 1 and 2
            // the y and z ones.
            int slot = ((k & 1) ? 2 * par : 1) + 3 * ((k >> 1) & 1) + 6 * (k >> 2);
            count += (active >> slot) & 1u;
            sum += w[par][k & 1] * w[2][(k >> 1) & 1] * w[3][k >> 2] * corner[slot];
        }
        float out = count < 8 ? own[par] + 1.0f * corner[1] : sum;
        if (part[par] && (par == 0 || second)) x[par ? c2 : c] = out;
    }
}

// The coarsest grid, step 1 (one block): y = b at its active cells, less its
// mean when the operator is singular.
extern "C" __global__ void coarsest_gather(const float* __restrict__ b,
                                           const unsigned* __restrict__ cells, unsigned m,
                                           int singular, double* __restrict__ y) {
    __shared__ double part[1024];
    double s = 0.0;
    for (unsigned j = threadIdx.x; j < m; j += blockDim.x) {
        double v = (double)b[cells[j]];
        y[j] = v;
        s += v;
    }
    part[threadIdx.x] = s;
    __syncthreads();
    for (unsigned o = blockDim.x / 2; o > 0; o >>= 1) {
        if (threadIdx.x < o) part[threadIdx.x] += part[threadIdx.x + o];
        __syncthreads();
    }
    if (!singular) return;
    double mean = part[0] / (double)(m > 0 ? m : 1);
    for (unsigned j = threadIdx.x; j < m; j += blockDim.x) y[j] -= mean;
}

// Step 2 (a warp per row): x at the active cells = A⁻¹ y (the inverse of the
// factorised matrix, double precision); x is zero elsewhere beforehand.
extern "C" __global__ void coarsest_solve(const double* __restrict__ inverse,
                                          const double* __restrict__ y,
                                          const unsigned* __restrict__ cells, unsigned m,
                                          float* __restrict__ x) {
    unsigned row = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
    unsigned lane = threadIdx.x & 31;
    if (row >= m) return;
    double s = 0.0;
    for (unsigned j = lane; j < m; j += 32) s += inverse[(size_t)row * m + j] * y[j];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
    if (lane == 0) x[cells[row]] = (float)s;
}

// The block's sums of t0, t1 and (s2 given) t2 into s0[0], s1[0] and s2[0]
// (a tree over the threads, blockDim a power of two).
__device__ void block_sums(double* s0, double* s1, double t0, double t1, double* s2 = nullptr,
                           double t2 = 0.0) {
    s0[threadIdx.x] = t0;
    s1[threadIdx.x] = t1;
    if (s2) s2[threadIdx.x] = t2;
    __syncthreads();
    for (unsigned o = blockDim.x / 2; o > 0; o >>= 1) {
        if (threadIdx.x < o) {
            s0[threadIdx.x] += s0[threadIdx.x + o];
            s1[threadIdx.x] += s1[threadIdx.x + o];
            if (s2) s2[threadIdx.x] += s2[threadIdx.x + o];
        }
        __syncthreads();
    }
}

// Reductions, first pass: per block, Σ a·b (b null: Σ a) and, where c is
// given, Σ c·d, over the cells where the diagonal (`links`, `mask` as in
// `diagonal`) is positive or everywhere (links null), in double precision;
// into partial[2 block + k]; where e is given, Σ e·e as well, into
// partial[2 blocks + block].
extern "C" __global__ void reduce(const float* __restrict__ a, const float* __restrict__ b,
                                  const float* __restrict__ c, const float* __restrict__ d,
                                  const float* __restrict__ e,
                                  const unsigned char* __restrict__ links,
                                  const float* __restrict__ mask, size_t n,
                                  double* __restrict__ partial) {
    __shared__ double s0[256], s1[256], s2[256];
    double t0 = 0.0, t1 = 0.0, t2 = 0.0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        if (links && !(diagonal(links, mask, i) > 0.0f)) continue;
        t0 += b ? (double)a[i] * (double)b[i] : (double)a[i];
        if (c) t1 += (double)c[i] * (double)d[i];
        if (e) t2 += (double)e[i] * (double)e[i];
    }
    block_sums(s0, s1, t0, t1, e ? s2 : nullptr, t2);
    if (threadIdx.x == 0) {
        partial[2 * blockIdx.x] = s0[0];
        partial[2 * blockIdx.x + 1] = s1[0];
        if (e) partial[2 * gridDim.x + blockIdx.x] = s2[0];
    }
}

// The next kernels fuse a vector pass of conjugate gradients with the
// reduction that follows it: each writes what the pass writes and its
// blocks' sums into partial[2 block + k] as `reduce` does (in its grid:
// blocks of 256 taking the cells by a grid-wide stride), for reduce_finish.

// out = A x on the finest grid (0 in cells that take no part), and Σ x·out.
__device__ __forceinline__ void apply_dot_on(const unsigned char* __restrict__ links,
                                             const float* __restrict__ weights,
                                             const float* __restrict__ diag, int nx, int ny, int nz,
                                             unsigned faces, const float* __restrict__ x,
                                             float* __restrict__ out,
                                             double* __restrict__ partial) {
    __shared__ double s0[256], s1[256];
    Level l = {{nx, ny, nz}, faces};
    unsigned n = (unsigned)nx * (unsigned)ny * (unsigned)nz;
    double t0 = 0.0;
    // The cell's coordinates stepped along with it (a division for each
    // cell cost more than its stencil).
    unsigned first = blockIdx.x * blockDim.x + threadIdx.x, step = gridDim.x * blockDim.x;
    int p[3], d[3];
    unsigned row = first / (unsigned)nx, rows = step / (unsigned)nx;
    p[0] = (int)(first - row * (unsigned)nx);
    p[1] = (int)(row % (unsigned)ny);
    p[2] = (int)(row / (unsigned)ny);
    d[0] = (int)(step - rows * (unsigned)nx);
    d[1] = (int)(rows % (unsigned)ny);
    d[2] = (int)(rows / (unsigned)ny);
    for (unsigned c = first; c < n; c += step) {
        Stencil t = stencil(l, links, weights, diag, x, c, p);
        float ax = differences_of(t);
        ax = t.d > 0.0f ? ax : 0.0f;
        out[c] = ax;
        t0 += (double)t.own * (double)ax;
        p[0] += d[0];
        int carry = p[0] >= nx;
        p[0] -= carry ? nx : 0;
        p[1] += d[1] + carry;
        carry = p[1] >= ny;
        p[1] -= carry ? ny : 0;
        p[2] += d[2] + carry;
    }
    block_sums(s0, s1, t0, 0.0);
    if (threadIdx.x == 0) {
        partial[2 * blockIdx.x] = s0[0];
        partial[2 * blockIdx.x + 1] = s1[0];
    }
}

extern "C" __global__ void apply_dot(const unsigned char* __restrict__ links,
                                     const float* __restrict__ weights,
                                     const float* __restrict__ diag, int nx, int ny, int nz,
                                     unsigned faces, const float* __restrict__ x,
                                     float* __restrict__ out, double* __restrict__ partial) {
    if (!weights && !diag) {
        apply_dot_on(links, nullptr, nullptr, nx, ny, nz, faces, x, out, partial);
    } else {
        apply_dot_on(links, weights, diag, nx, ny, nz, faces, x, out, partial);
    }
}

// x += α p, r −= α q with α = rz / pq from the scalars (no change where pq
// is not positive: CG stops there), then Σ r·r over every cell (`squares`),
// or Σ r over the cells that take part (the mean a singular operator's r
// loses).
extern "C" __global__ void cg_update_sum(float* __restrict__ x, float* __restrict__ r,
                                         const float* __restrict__ p,
                                         const float* __restrict__ q, size_t n,
                                         const double* __restrict__ scalars, int rz, int pq,
                                         const unsigned char* __restrict__ links,
                                         const float* __restrict__ diag, int squares,
                                         double* __restrict__ partial) {
    __shared__ double s0[256], s1[256];
    double d = scalars[pq];
    bool update = d > 0.0;
    float alpha = update ? (float)(scalars[rz] / d) : 0.0f;
    double t0 = 0.0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float ri = r[i];
        if (update) {
            x[i] += alpha * p[i];
            ri += -alpha * q[i];
            r[i] = ri;
        }
        if (squares) {
            t0 += (double)ri * (double)ri;
        } else if (diagonal(links, diag, i) > 0.0f) {
            t0 += (double)ri;
        }
    }
    block_sums(s0, s1, t0, 0.0);
    if (threadIdx.x == 0) {
        partial[2 * blockIdx.x] = s0[0];
        partial[2 * blockIdx.x + 1] = s1[0];
    }
}

// subtract_mean, then Σ a·b and (c given) Σ c·d over every cell, of the
// vectors after it (any of them may be v).
extern "C" __global__ void subtract_mean_dots(float* v, const unsigned char* __restrict__ links,
                                              const float* __restrict__ diag, size_t n,
                                              const double* __restrict__ scalars, int slot,
                                              double count, const float* a, const float* b,
                                              const float* c, const float* d,
                                              double* __restrict__ partial) {
    __shared__ double s0[256], s1[256];
    float mean = (float)(scalars[slot] / count);
    double t0 = 0.0, t1 = 0.0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        if (diagonal(links, diag, i) > 0.0f) v[i] -= mean;
        t0 += (double)a[i] * (double)b[i];
        if (c) t1 += (double)c[i] * (double)d[i];
    }
    block_sums(s0, s1, t0, t1);
    if (threadIdx.x == 0) {
        partial[2 * blockIdx.x] = s0[0];
        partial[2 * blockIdx.x + 1] = s1[0];
    }
}

// Second pass (one block of 256): the blocks' sums into scalars[slot0],
// scalars[slot1] and scalars[slot2] (negative: not wanted).
extern "C" __global__ void reduce_finish(const double* __restrict__ partial, unsigned blocks,
                                         double* __restrict__ scalars, int slot0, int slot1,
                                         int slot2) {
    __shared__ double s0[256], s1[256], s2[256];
    double t0 = 0.0, t1 = 0.0, t2 = 0.0;
    for (unsigned i = threadIdx.x; i < blocks; i += blockDim.x) {
        t0 += partial[2 * i];
        t1 += partial[2 * i + 1];
        if (slot2 >= 0) t2 += partial[2 * blocks + i];
    }
    block_sums(s0, s1, t0, t1, slot2 >= 0 ? s2 : nullptr, t2);
    if (threadIdx.x == 0) {
        scalars[slot0] = s0[0];
        if (slot1 >= 0) scalars[slot1] = s1[0];
        if (slot2 >= 0) scalars[slot2] = s2[0];
    }
}

// v −= its mean over the active cells, the sum in scalars[slot].
extern "C" __global__ void subtract_mean(float* __restrict__ v,
                                         const unsigned char* __restrict__ links,
                                         const float* __restrict__ diag, size_t n,
                                         const double* __restrict__ scalars, int slot,
                                         double count) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n || !(diagonal(links, diag, i) > 0.0f)) return;
    float mean = (float)(scalars[slot] / count);
    v[i] -= mean;
}

// Zeroes the cells that take no part.
extern "C" __global__ void clear_inactive(float* __restrict__ v,
                                          const unsigned char* __restrict__ links,
                                          const float* __restrict__ diag, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n && !(diagonal(links, diag, i) > 0.0f)) v[i] = 0.0f;
}

// CG's new direction: p = z on the first iteration, else p = z + β p with the
// flexible β = (r·z − r·z_old) / rz_old from the scalars.
extern "C" __global__ void direction(float* __restrict__ p, const float* __restrict__ z, size_t n,
                                     const double* __restrict__ scalars, int first, int rz_new,
                                     int rz_cross, int rz_old) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    if (first) {
        p[i] = z[i];
        return;
    }
    float beta = (float)((scalars[rz_new] - scalars[rz_cross]) / scalars[rz_old]);
    p[i] = z[i] + beta * p[i];
}
