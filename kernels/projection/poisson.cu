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

// Where a grid's cells lie: in order of x, y, z (`Natural`), or, for the
// finest grid's vectors in the preconditioner (`Split`, with
// `split_preconditioner` on the host; an even length along x), each row
// holding its cells of colour 0 ((x + y + z) even) first, in order of x,
// then those of colour 1. A colour pass then reads its neighbours' values,
// its own b and links and writes its own x, each from whole sectors, where
// in the natural order each of its reads of a row spans both colours: a
// third fewer bytes through DRAM and L2, which bound the colour passes
// (16% less time a pass, which is then bound by latency; H100, issue 20).
struct Natural {
    __device__ __forceinline__ unsigned at(const Level& l, const int p[3]) const {
        return index_of(l, p);
    }
    __device__ __forceinline__ void around(const Level& l, const int p[3], unsigned c,
                                           unsigned nb[6]) const {
        neighbours(l, p, c, nb);
    }
    // The cell after c at p along x (p[0] + 1 in the grid).
    __device__ __forceinline__ unsigned next(const Level&, const int*, unsigned c) const {
        return c + 1;
    }
};

struct Split {
    __device__ __forceinline__ unsigned at(const Level& l, const int p[3]) const {
        unsigned h = (unsigned)l.n[0] >> 1;
        unsigned colour = (unsigned)(p[0] + p[1] + p[2]) & 1u;
        return (unsigned)l.n[0] * ((unsigned)p[1] + (unsigned)l.n[1] * (unsigned)p[2]) +
               (colour ? h : 0u) + ((unsigned)p[0] >> 1);
    }
    // Along x the neighbours are the other colour's, in the other half of
    // the row; along y and z the other colour's too, at the same place in
    // their half, but across the wrap of an axis of odd length, where they
    // are the cell's own colour.
    __device__ __forceinline__ void around(const Level& l, const int p[3], unsigned c,
                                           unsigned nb[6]) const {
        unsigned h = (unsigned)l.n[0] >> 1;
        bool colour = ((p[0] + p[1] + p[2]) & 1) != 0;
        unsigned delta = colour ? 0u - h : h;
        unsigned other = c - ((unsigned)p[0] >> 1) + delta;
        nb[0] = other + (p[0] > 0 ? (unsigned)(p[0] - 1) >> 1 : h - 1);
        nb[1] = other + (p[0] < l.n[0] - 1 ? (unsigned)(p[0] + 1) >> 1 : 0u);
        unsigned stride = (unsigned)l.n[0];
#pragma unroll
        for (int a = 1; a < 3; a++) {
            unsigned span = (unsigned)(l.n[a] - 1) * stride;
            unsigned wrapped = (l.n[a] & 1) ? 0u : delta;
            nb[2 * a] = p[a] > 0 ? c - stride + delta : c + span + wrapped;
            nb[2 * a + 1] = p[a] < l.n[a] - 1 ? c + stride + delta : c - span + wrapped;
            stride *= (unsigned)l.n[a];
        }
    }
    __device__ __forceinline__ unsigned next(const Level& l, const int p[3], unsigned) const {
        int q[3] = {p[0] + 1, p[1], p[2]};
        return at(l, q);
    }
};

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

// A coarse level's couplings toward +x, +y, +z and its diagonal in one
// word a cell (`packed_coefficients` on the host, with `packed_coarse`):
// each a count of 1/64, 7 bits for the couplings, 11 for the diagonal, from
// bit 0 up; the links are the couplings that are not 0. Four bytes a cell
// instead of seventeen: the couplings of the first coarse grids are
// multiples of 1/4, 1/16 and 1/64 (each a quarter of the sum of four finer
// ones), so the values are the arrays' to the bit. The `_packed` kernels
// take the words in place of `weights` and `diag`.
struct Packed {
    const unsigned* words;
};

__device__ __forceinline__ float packed_field(unsigned word, int k) {
    unsigned bits = k < 3 ? (word >> (7 * k)) & 127u : word >> 21;
    return (float)bits * 0.015625f;
}

__device__ __forceinline__ void couplings(const Level& l, Packed weights, unsigned c,
                                          const unsigned nb[6], float w[6]) {
    unsigned own = weights.words[c];
#pragma unroll
    for (int a = 0; a < 3; a++) {
        w[2 * a] = packed_field(weights.words[nb[2 * a]], a);
        w[2 * a + 1] = packed_field(own, a);
    }
}

// The links as `stencil` reads them: the cell's byte, or, with packed
// words, the couplings that are not 0 (the host packs only levels where
// those are the links): a byte a cell less.
__device__ __forceinline__ unsigned links_of(const unsigned char* links, const float*, unsigned c,
                                             const float[6]) {
    return links[c];
}

__device__ __forceinline__ unsigned links_of(const unsigned char*, Packed, unsigned,
                                             const float w[6]) {
    unsigned bits = 0;
#pragma unroll
    for (int dir = 0; dir < 6; dir++) bits |= (w[dir] > 0.0f ? 1u : 0u) << dir;
    return bits;
}

// The diagonal as `stencil` reads it: from `diag` or the links byte, or
// from the packed word.
__device__ __forceinline__ float diagonal_of(const unsigned char* links, const float* weights,
                                             const float* diag, unsigned c) {
    return diagonal(links, diag, c);
}

__device__ __forceinline__ float diagonal_of(const unsigned char*, Packed weights, const float*,
                                             unsigned c) {
    return packed_field(weights.words[c], 3);
}

// How a level's x and b are stored: as f32 (`F32`), or, for the finest
// grid's preconditioner (`Half`, with `half_preconditioner` on the host), in
// 16 bits, which halve the bytes of the finest grid's sweeps, restriction
// and prolongation. Only the stored values are rounded: the kernels work
// in f32, as they read, and the outer CG keeps its own vectors in f32.
struct F32 {
    typedef float T;
    __device__ __forceinline__ float ld(const float* v, unsigned c) const { return v[c]; }
    __device__ __forceinline__ float dec(float v) const { return v; }
    __device__ __forceinline__ float enc(float v) const { return v; }
};

// IEEE half's layout (5 exponent bits, 10 mantissa bits, subnormals), its
// window moved by a power of two to the values of one cycle: `down` = 2^-k
// (encoding), `up` = 2^k, with r's RMS at about 2^-6 in half's units
// (`half_scale`), so that neither the right-hand side nor the solution,
// up to ~10^4 times larger on its smooth modes, leaves the range. As the
// 16-bit lattice storage (d3q19.cu's `fp16c_encode`), by multiplies and bit
// moves: the half's bits are the top bits of an f32 112 binary orders
// lower, whose denormals carry the half's subnormals; rounded to nearest,
// ties away from zero; saturated at half's largest finite value. The
// multiplies by powers of two are exact but where they reach f32's
// denormals, as they do alike on the GPU and on the CPU's emulation.
struct Half {
    typedef unsigned short T;
    float down, up;
    __device__ __forceinline__ float ld(const unsigned short* v, unsigned c) const {
        return dec(v[c]);
    }
    __device__ __forceinline__ float dec(unsigned short v) const {
#ifdef __CUDA_ARCH__
        // The half's value exactly, as the bit moves below give it (all
        // 63 488 finite halves compared on an H200), in one instruction
        // where they took four: the 16-bit colour pass was bound by issue
        // (31.0 against 23.7 M instructions, 39.9 against 33.9 µs at 256³).
        float f;
        asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v));
        return f * up;
#else
        unsigned h = v;
        return __uint_as_float(((h & 0x8000u) << 16) | ((h & 0x7fffu) << 13)) * 0x1p112f * up;
#endif
    }
    __device__ __forceinline__ unsigned short enc(float v) const {
        unsigned a = __float_as_uint(fabsf(v) * down * 0x1p-112f);
        unsigned r = min(a + 0x1000u, 0x0f7fe000u) >> 13;
        return (unsigned short)(((__float_as_uint(v) >> 16) & 0x8000u) | r);
    }
};

// The window for r with r·r = rr over n cells: 2^e ≤ its RMS < 2^(e+1),
// the RMS then stored at 2^-6 (e kept to [−100, 20], where both factors
// are normal floats).
__device__ __forceinline__ Half half_scale(double rr, double n) {
    int e = 0;
    double rms = sqrt(rr / n);
    if (rms > 0.0 && rms < 1e300) {
        frexp(rms, &e);
        e -= 1;
    }
    e = max(-100, min(20, e)) + 6;
    return {ldexpf(1.0f, -e), ldexpf(1.0f, e)};
}

// Four values of a vector from cell c on (c a multiple of 4): one 16-byte
// word in f32, one 8-byte word in 16 bits; decoded, and stored encoded.
__device__ __forceinline__ void raw4(const float* v, unsigned c, float o[4]) {
    float4 w = *reinterpret_cast<const float4*>(v + c);
    o[0] = w.x;
    o[1] = w.y;
    o[2] = w.z;
    o[3] = w.w;
}
__device__ __forceinline__ void raw4(const unsigned short* v, unsigned c, unsigned short o[4]) {
    uint2 w = *reinterpret_cast<const uint2*>(v + c);
    o[0] = (unsigned short)(w.x & 0xffffu);
    o[1] = (unsigned short)(w.x >> 16);
    o[2] = (unsigned short)(w.y & 0xffffu);
    o[3] = (unsigned short)(w.y >> 16);
}
__device__ __forceinline__ void put4(float* v, unsigned c, const float o[4]) {
    *reinterpret_cast<float4*>(v + c) = make_float4(o[0], o[1], o[2], o[3]);
}
__device__ __forceinline__ void put4(unsigned short* v, unsigned c, const unsigned short o[4]) {
    *reinterpret_cast<uint2*>(v + c) =
        make_uint2((unsigned)o[0] | ((unsigned)o[1] << 16), (unsigned)o[2] | ((unsigned)o[3] << 16));
}
template <class S>
__device__ __forceinline__ void load4(const typename S::T* v, unsigned c, S s, float o[4]) {
    typename S::T w[4];
    raw4(v, c, w);
#pragma unroll
    for (int j = 0; j < 4; j++) o[j] = s.dec(w[j]);
}
template <class S>
__device__ __forceinline__ void store4(typename S::T* v, unsigned c, S s, const float o[4]) {
    typename S::T w[4];
#pragma unroll
    for (int j = 0; j < 4; j++) w[j] = s.enc(o[j]);
    put4(v, c, w);
}

// x at the six neighbours, linked or not (`neighbours` wraps every axis,
// so each index lies in the grid): loads issued together, where
// loads under each link's branch waited for one another (apply and the
// smoother ran at a third of the bandwidth, latency-bound).
template <class S>
__device__ __forceinline__ void gather(const typename S::T* x, S s, const unsigned nb[6],
                                       float around[6]) {
#pragma unroll
    for (int dir = 0; dir < 6; dir++) around[dir] = s.ld(x, nb[dir]);
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

template <class S = F32, class W = const float*, class L = Natural>
__device__ __forceinline__ Stencil stencil(const Level& l, const unsigned char* links, W weights,
                                           const float* diag, const typename S::T* x, unsigned c,
                                           const int p[3], S storage = S(), L layout = L()) {
    Stencil s;
    unsigned nb[6];
    layout.around(l, p, c, nb);
    gather(x, storage, nb, s.around);
    couplings(l, weights, c, nb, s.w);
    s.own = storage.ld(x, c);
    s.bits = links_of(links, weights, c, s.w);
    s.d = diagonal_of(links, weights, diag, c);
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
template <class W>
__device__ __forceinline__ void apply_on(const unsigned char* __restrict__ links, W weights,
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
// pass of `smooth` (whose time did not move: it is bound by L2 bandwidth;
// H100, ncu, thirty-second session). A coarse level with packed words runs
// kernels of its own (`smooth_packed`, `restrict_residual_packed`), which
// leave the others' registers as they were.
extern "C" __global__ void apply(const unsigned char* __restrict__ links,
                                 const float* __restrict__ weights, const float* __restrict__ diag,
                                 int nx, int ny, int nz, unsigned faces,
                                 const float* __restrict__ x, const float* __restrict__ b,
                                 int residual, float* __restrict__ out) {
    if (!weights && !diag) {
        apply_on(links, (const float*)nullptr, nullptr, nx, ny, nz, faces, x, b, residual, out);
    } else {
        apply_on(links, weights, diag, nx, ny, nz, faces, x, b, residual, out);
    }
}

// A cycle's ends on split rows (`smooth_split`): its first pass, from
// x = 0, takes b from CG's r in the natural order, a pair of cells a thread,
// and keeps it in split rows for the later passes (`r`, `b`); its last
// passes give the result in the natural order, each thread its cell and
// the other of its pair, a neighbour it has read (`z`), instead of passes
// of their own to put r in split rows and take z out of them. `NoEnds`
// (every other kernel): none of it.
struct NoEnds {
    static constexpr bool on = false;
};

struct Ends {
    static constexpr bool on = true;
    const float* r;
    float* b;
    float* z;
};

// A cell's Gauss–Seidel update over-relaxed by omega, from its stencil and
// b. A cell that takes no part keeps its value, stored back rather than
// branched around (see `apply`).
__device__ __forceinline__ float relaxed(const Stencil& t, float bc, float omega) {
    float s = 0.0f;
#pragma unroll
    for (int dir = 0; dir < 6; dir++) {
        if (t.bits & (1u << dir)) s += t.w[dir] * t.around[dir];
    }
    float gs = (bc + s) / t.d;
    return t.d > 0.0f ? t.own + omega * (gs - t.own) : t.own;
}

// The same from x = 0 (the neighbours' sum +0), to the bit.
__device__ __forceinline__ float relaxed_from_zero(float bc, float d, float omega) {
    float gs = (bc + 0.0f) / d;
    return d > 0.0f ? 0.0f + omega * (gs - 0.0f) : 0.0f;
}

// One colour of a red-black Gauss–Seidel sweep: the cells with x + y + z of
// parity `colour`. Along a periodic axis of odd length the first and last
// cells have the same colour: the CPU's sweep (rows and planes in order, the
// last plane apart) updates a cell on the last layer of such an axis after its
// neighbour across the wrap, so those go in later passes: pass k takes the
// cells on the last layer of k of the axes in `odd` (all cells when `odd` is
// 0 and pass is 0).
// One thread per cell of the colour: thread i of a row takes x = 2 i or
// 2 i + 1. `zero`: see below. Each new value over-relaxed by `omega`
// (multigrid.rs's `Cycle`), as the CPU's sweep.
template <class S, class W, class L = Natural, class E = NoEnds>
__device__ __forceinline__ void smooth_on(const unsigned char* __restrict__ links, W weights,
                                          const float* __restrict__ diag, int nx, int ny, int nz,
                                          unsigned faces, typename S::T* __restrict__ x,
                                          const typename S::T* __restrict__ b, int colour,
                                          unsigned odd, int pass, int zero, float omega,
                                          S storage, L layout = L(), E ends = E()) {
    Level l = {{nx, ny, nz}, faces};
    int p[3];
    p[1] = blockIdx.y * blockDim.y + threadIdx.y;
    p[2] = blockIdx.z * blockDim.z + threadIdx.z;
    p[0] = 2 * (int)(blockIdx.x * blockDim.x + threadIdx.x) + ((colour + p[1] + p[2]) & 1);
    if (zero) {
        // The first pass of a cycle's visit, from x = 0 (no periodic axis
        // of odd length: a single pass a colour): the other colour's cell
        // of the thread's pair zeroed, its own from b alone, to the bit as
        // from zeros (the neighbours' sum is +0); no read of x, and no
        // pass to zero it first.
        if (p[1] >= ny || p[2] >= nz) return;
        int q[3] = {p[0] ^ 1, p[1], p[2]};
        if (q[0] < nx) x[layout.at(l, q)] = storage.enc(0.0f);
        if (p[0] >= nx) return;
        unsigned c = layout.at(l, p);
        float d = diagonal_of(links, weights, diag, c);
        float bc;
        if constexpr (E::on) {
            // Split rows have an even length along x: q lies in the grid.
            unsigned natural = index_of(l, p);
            unsigned partner = natural ^ 1u;
            bc = ends.r[natural];
            ends.b[c] = bc;
            ends.b[layout.at(l, q)] = ends.r[partner];
        } else {
            bc = storage.ld(b, c);
        }
        x[c] = storage.enc(relaxed_from_zero(bc, d, omega));
        return;
    }
    if (p[0] >= nx || p[1] >= ny || p[2] >= nz) return;
    unsigned c = layout.at(l, p);
    if (odd) {
        int last = 0;
        for (int a = 0; a < 3; a++) last += ((odd >> a) & 1u) && p[a] == l.n[a] - 1;
        if (last != pass) return;
    }
    Stencil t = stencil(l, links, weights, diag, x, c, p, storage, layout);
    float out = relaxed(t, storage.ld(b, c), omega);
    if constexpr (E::on) {
        if (ends.z) {
            // The other cell of the pair: the neighbour across x inside it.
            unsigned natural = index_of(l, p);
            ends.z[natural] = out;
            ends.z[natural ^ 1u] = (p[0] & 1) ? t.around[0] : t.around[1];
            // Later passes of this colour (periodic axes of odd length)
            // read it.
            if (!odd) return;
        }
    }
    x[c] = storage.enc(out);
}

extern "C" __global__ void smooth(const unsigned char* __restrict__ links,
                                  const float* __restrict__ weights,
                                  const float* __restrict__ diag, int nx, int ny, int nz,
                                  unsigned faces, float* __restrict__ x,
                                  const float* __restrict__ b, int colour, unsigned odd,
                                  int pass, int zero, float omega) {
    if (!weights && !diag) {
        smooth_on(links, (const float*)nullptr, nullptr, nx, ny, nz, faces, x, b, colour, odd,
                  pass, zero, omega, F32());
    } else {
        smooth_on(links, weights, diag, nx, ny, nz, faces, x, b, colour, odd, pass, zero, omega,
                  F32());
    }
}

// `smooth` on a level with packed words (its diagonal in them: `unused`
// null, in the place of `diag`).
extern "C" __global__ void smooth_packed(const unsigned char* __restrict__ links,
                                         const unsigned* __restrict__ words,
                                         const float* __restrict__ unused, int nx, int ny,
                                         int nz, unsigned faces, float* __restrict__ x,
                                         const float* __restrict__ b, int colour, unsigned odd,
                                         int pass, int zero, float omega) {
    smooth_on(links, Packed{words}, nullptr, nx, ny, nz, faces, x, b, colour, odd, pass, zero,
              omega, F32());
}

// `smooth` on the finest grid's x and b with split rows (`Split`; its
// links too, its weights and diagonal null), with the cycle's ends
// (`Ends`): `r` for the pass from zero (b then filled, not read), `z` for
// the last passes (null in the others).
extern "C" __global__ void smooth_split(const unsigned char* __restrict__ links,
                                        const float* __restrict__ weights,
                                        const float* __restrict__ diag, int nx, int ny, int nz,
                                        unsigned faces, float* __restrict__ x, float* b,
                                        int colour, unsigned odd, int pass, int zero,
                                        float omega, const float* __restrict__ r,
                                        float* __restrict__ z) {
    smooth_on(links, (const float*)nullptr, nullptr, nx, ny, nz, faces, x, b, colour, odd, pass,
              zero, omega, F32(), Split(), Ends{r, b, z});
}

// `smooth_split` four cells of the colour a thread, on grids whose length
// along x is a multiple of 8 without a periodic axis of odd length: each
// array read and written a 16-byte word at a time, the neighbours along y
// and z the four cells at the same place in the other colour's half of the
// rows around, those along x the four in its own row's and one beyond.
// A thread a cell (`smooth_split`) issued 9 loads a cell and worked out
// each index itself: bound by instruction issue (IPC 2.9, the SM 69%
// busy, 2.5 TB/s; H200, thirty-eighth session): 54.7 µs a pass against
// this kernel's 41.6 on the 256³ grid, half the instructions (thirty-ninth
// session). The same values as it, so the same results to the bit: each
// cell's sum in the same order (see `relaxed`).
template <class S>
__device__ __forceinline__ void smooth_split4_on(const unsigned char* __restrict__ links, int nx,
                                                 int ny, int nz, unsigned faces,
                                                 typename S::T* __restrict__ x,
                                                 typename S::T* __restrict__ b, int colour,
                                                 int zero, float omega,
                                                 const float* __restrict__ r,
                                                 float* __restrict__ z, S s) {
    Level l = {{nx, ny, nz}, faces};
    unsigned h = (unsigned)nx >> 1;
    unsigned i = 4 * (blockIdx.x * blockDim.x + threadIdx.x);
    int p[3];
    p[1] = blockIdx.y * blockDim.y + threadIdx.y;
    p[2] = blockIdx.z;
    if (i >= h || p[1] >= ny) return;
    int par = (colour + p[1] + p[2]) & 1;
    p[0] = 2 * (int)i + par;
    Split layout;
    unsigned c = layout.at(l, p);
    // The other colour's half of this row, from its place i.
    unsigned other = c + (colour ? 0u - h : h);
    uchar4 lk = *reinterpret_cast<const uchar4*>(links + c);
    unsigned bits[4] = {lk.x, lk.y, lk.z, lk.w};
    float d[4];
#pragma unroll
    for (int j = 0; j < 4; j++) d[j] = (float)(__popc(bits[j] & 63u) + (bits[j] >> 6));
    // The natural order's pairs of the four cells: eight cells from here.
    unsigned natural = index_of(l, p) - (unsigned)par;
    if (zero) {
        // As `smooth_on`'s pass from zero, b taken from r (as stored).
        float4 r0 = *reinterpret_cast<const float4*>(r + natural);
        float4 r1 = *reinterpret_cast<const float4*>(r + natural + 4);
        float pairs[8] = {r0.x, r0.y, r0.z, r0.w, r1.x, r1.y, r1.z, r1.w};
        float own[4], mine[4], theirs[4];
        const float none[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int j = 0; j < 4; j++) {
            mine[j] = pairs[2 * j + par];
            theirs[j] = pairs[2 * j + 1 - par];
            own[j] = relaxed_from_zero(s.dec(s.enc(mine[j])), d[j], omega);
        }
        store4(b, c, s, mine);
        store4(b, other, s, theirs);
        store4(x, c, s, own);
        store4(x, other, s, none);
        return;
    }
    unsigned nb[6];
    layout.around(l, p, c, nb);
    // Along x: the other colour's cells at places i to i + 3, and the one
    // before them (where this colour's cells have even x) or after them,
    // wrapped at the row's ends as `Split::around`.
    unsigned beyond = par ? (i + 4 < h ? other + 4 : other - i) : nb[0];
    float ow[4], bw[4], aw[4], across[4][4];
    load4(x, c, s, ow);
    load4(b, c, s, bw);
    load4(x, other, s, aw);
#pragma unroll
    for (int k = 0; k < 4; k++) load4(x, nb[2 + k], s, across[k]);
    float edge = s.ld(x, beyond);
    float res[4];
#pragma unroll
    for (int j = 0; j < 4; j++) {
        Stencil t;
        t.bits = bits[j];
        t.d = d[j];
        t.own = ow[j];
        float before = par ? aw[j] : (j > 0 ? aw[j - 1] : edge);
        float after = par ? (j < 3 ? aw[j + 1] : edge) : aw[j];
        t.around[0] = before;
        t.around[1] = after;
#pragma unroll
        for (int k = 0; k < 4; k++) t.around[2 + k] = across[k][j];
#pragma unroll
        for (int dir = 0; dir < 6; dir++) t.w[dir] = 1.0f;
        res[j] = relaxed(t, bw[j], omega);
    }
    if (z) {
        // The last pass: the result (as stored) in the natural order, each
        // pair's other cell the neighbour along x inside it (as
        // `smooth_on`'s ends).
        float pairs[8];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            pairs[2 * j + par] = s.dec(s.enc(res[j]));
            pairs[2 * j + 1 - par] = aw[j];
        }
        *reinterpret_cast<float4*>(z + natural) = make_float4(pairs[0], pairs[1], pairs[2], pairs[3]);
        *reinterpret_cast<float4*>(z + natural + 4) =
            make_float4(pairs[4], pairs[5], pairs[6], pairs[7]);
        return;
    }
    store4(x, c, s, res);
}

extern "C" __global__ void smooth_split4(const unsigned char* __restrict__ links, int nx, int ny,
                                         int nz, unsigned faces, float* __restrict__ x,
                                         float* __restrict__ b, int colour, int zero, float omega,
                                         const float* __restrict__ r, float* __restrict__ z) {
    smooth_split4_on(links, nx, ny, nz, faces, x, b, colour, zero, omega, r, z, F32());
}

// `smooth_split4` on x and b in 16 bits (`Half`), the window in `scale`
// (`half_window`): r rounded as it is stored in b, z the values x holds.
extern "C" __global__ void smooth_split4_half(const unsigned char* __restrict__ links, int nx,
                                              int ny, int nz, unsigned faces,
                                              unsigned short* __restrict__ x,
                                              unsigned short* __restrict__ b, int colour,
                                              int zero, float omega, const float* __restrict__ r,
                                              float* __restrict__ z,
                                              const float* __restrict__ scale) {
    Half hs = {scale[0], scale[1]};
    smooth_split4_on(links, nx, ny, nz, faces, x, b, colour, zero, omega, r, z, hs);
}

// `smooth` on x and b in 16 bits (`Half`), the window in `scale`
// (`to_half`).
extern "C" __global__ void smooth_half(const unsigned char* __restrict__ links,
                                       const float* __restrict__ weights,
                                       const float* __restrict__ diag, int nx, int ny, int nz,
                                       unsigned faces, unsigned short* __restrict__ x,
                                       const unsigned short* __restrict__ b, int colour,
                                       unsigned odd, int pass, int zero, float omega,
                                       const float* __restrict__ scale) {
    Half h = {scale[0], scale[1]};
    if (!weights && !diag) {
        smooth_on(links, (const float*)nullptr, nullptr, nx, ny, nz, faces, x, b, colour, odd,
                  pass, zero, omega, h);
    } else {
        smooth_on(links, weights, diag, nx, ny, nz, faces, x, b, colour, odd, pass, zero, omega,
                  h);
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
template <class S, class W, class L = Natural>
__device__ __forceinline__ void restrict_residual_on(const unsigned char* __restrict__ links,
                                                     W weights,
                                                     const float* __restrict__ diag, int fx, int fy,
                                                     int fz, unsigned faces,
                                                     const typename S::T* __restrict__ x,
                                                     const typename S::T* __restrict__ fine_b,
                                                     const float* __restrict__ coarse_diag, int nx,
                                                     int ny, int nz, float* __restrict__ b,
                                                     S storage, L layout = L()) {
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
                    unsigned f = layout.at(fine, q);
                    // Chosen, not branched on (see `apply`).
                    Stencil t = stencil(fine, links, weights, diag, x, f, q, storage, layout);
                    float r = storage.ld(fine_b, f) - differences_of(t);
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
        restrict_residual_on(links, (const float*)nullptr, nullptr, fx, fy, fz, faces, x, fine_b,
                             coarse_diag, nx, ny, nz, b, F32());
    } else {
        restrict_residual_on(links, weights, diag, fx, fy, fz, faces, x, fine_b, coarse_diag,
                             nx, ny, nz, b, F32());
    }
}

extern "C" __global__ void restrict_residual_packed(
    const unsigned char* __restrict__ links, const unsigned* __restrict__ words,
    const float* __restrict__ unused, int fx, int fy, int fz, unsigned faces, const float* __restrict__ x, const float* __restrict__ fine_b,
    const float* __restrict__ coarse_diag, int nx, int ny, int nz, float* __restrict__ b) {
    restrict_residual_on(links, Packed{words}, nullptr, fx, fy, fz, faces, x, fine_b, coarse_diag,
                         nx, ny, nz, b, F32());
}

extern "C" __global__ void restrict_residual_split(
    const unsigned char* __restrict__ links, const float* __restrict__ weights,
    const float* __restrict__ diag, int fx, int fy, int fz, unsigned faces,
    const float* __restrict__ x, const float* __restrict__ fine_b,
    const float* __restrict__ coarse_diag, int nx, int ny, int nz, float* __restrict__ b) {
    restrict_residual_on(links, (const float*)nullptr, nullptr, fx, fy, fz, faces, x, fine_b,
                         coarse_diag, nx, ny, nz, b, F32(), Split());
}

// `restrict_residual_split` four coarse cells along x a thread, where the
// fine length along x is a multiple of 8: the coarse cells' fine pairs lie
// at the same four places of both halves of each fine row, so each fine
// row's x, b and links and the rows around it are read as 16-byte words,
// the neighbours along x from the row's other half and one cell beyond
// each end. The fine rows in the order `restrict_residual_on` takes them,
// each coarse cell's sum in the same order: the same values to the bit.
template <class S>
__device__ __forceinline__ void restrict_residual_split4_on(
    const unsigned char* __restrict__ links, int fx, int fy, int fz,
    const typename S::T* __restrict__ x, const typename S::T* __restrict__ fine_b,
    const float* __restrict__ coarse_diag, int nx, int ny, int nz, float* __restrict__ b, S st) {
    unsigned u = 4 * (blockIdx.x * blockDim.x + threadIdx.x);
    int cy = blockIdx.y * blockDim.y + threadIdx.y, cz = blockIdx.z;
    if (u >= (unsigned)nx || cy >= ny) return;
    unsigned h = (unsigned)fx >> 1;
    // A fine row's start, its half of even x's cells and of odd x's.
    auto even_half = [&](int y, int z) {
        return (unsigned)fx * ((unsigned)y + (unsigned)fy * (unsigned)z) +
               (((y + z) & 1) ? h : 0u);
    };
    auto odd_half = [&](int y, int z) {
        return (unsigned)fx * ((unsigned)y + (unsigned)fy * (unsigned)z) +
               (((y + z) & 1) ? 0u : h);
    };
    float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int dz = 0; dz < 2; dz++)
#pragma unroll
        for (int dy = 0; dy < 2; dy++) {
            int y = 2 * cy + dy, z = 2 * cz + dz;
            if (y >= fy || z >= fz) continue;
            unsigned e = even_half(y, z), o = odd_half(y, z);
            float xew[4], xow[4], bew[4], bow[4];
            load4(x, e + u, st, xew);
            load4(x, o + u, st, xow);
            load4(fine_b, e + u, st, bew);
            load4(fine_b, o + u, st, bow);
            uchar4 le = *reinterpret_cast<const uchar4*>(links + e + u);
            uchar4 lo = *reinterpret_cast<const uchar4*>(links + o + u);
            // Before the first even cell (x = 2u − 1, wrapped) and after
            // the last odd one (x = 2u + 8, wrapped).
            float before = st.ld(x, o + (u > 0 ? u - 1 : h - 1));
            float after = st.ld(x, e + (u + 4 < h ? u + 4 : 0u));
            // The rows around: −y, +y, −z, +z (wrapped), their even and odd
            // x's cells.
            int ys[4] = {y > 0 ? y - 1 : fy - 1, y < fy - 1 ? y + 1 : 0, y, y};
            int zs[4] = {z, z, z > 0 ? z - 1 : fz - 1, z < fz - 1 ? z + 1 : 0};
            float ae[4][4], ao[4][4];
#pragma unroll
            for (int k = 0; k < 4; k++) {
                load4(x, even_half(ys[k], zs[k]) + u, st, ae[k]);
                load4(x, odd_half(ys[k], zs[k]) + u, st, ao[k]);
            }
            const unsigned char* lew = &le.x;
            const unsigned char* low = &lo.x;
#pragma unroll
            for (int j = 0; j < 4; j++)
#pragma unroll
                for (int dx = 0; dx < 2; dx++) {
                    Stencil t;
                    t.bits = dx ? low[j] : lew[j];
                    t.d = (float)(__popc(t.bits & 63u) + (t.bits >> 6));
                    t.own = dx ? xow[j] : xew[j];
                    t.around[0] = dx ? xew[j] : (j > 0 ? xow[j - 1] : before);
                    t.around[1] = dx ? (j < 3 ? xew[j + 1] : after) : xow[j];
#pragma unroll
                    for (int k = 0; k < 4; k++)
                        t.around[2 + k] = dx ? ao[k][j] : ae[k][j];
#pragma unroll
                    for (int dir = 0; dir < 6; dir++) t.w[dir] = 1.0f;
                    float r = (dx ? bow[j] : bew[j]) - differences_of(t);
                    s[j] += t.d > 0.0f ? r : 0.0f;
                }
        }
    unsigned c = u + (unsigned)nx * ((unsigned)cy + (unsigned)ny * (unsigned)cz);
    float4 cd = *reinterpret_cast<const float4*>(coarse_diag + c);
    const float* cdw = &cd.x;
    float4 out;
    float* ow = &out.x;
#pragma unroll
    for (int j = 0; j < 4; j++) ow[j] = cdw[j] > 0.0f ? 0.5f * s[j] : 0.0f;
    *reinterpret_cast<float4*>(b + c) = out;
}

extern "C" __global__ void restrict_residual_split4(
    const unsigned char* __restrict__ links, const float* __restrict__,
    const float* __restrict__, int fx, int fy, int fz, unsigned, const float* __restrict__ x,
    const float* __restrict__ fine_b, const float* __restrict__ coarse_diag, int nx, int ny,
    int nz, float* __restrict__ b) {
    restrict_residual_split4_on(links, fx, fy, fz, x, fine_b, coarse_diag, nx, ny, nz, b, F32());
}

// `restrict_residual_split4` from x and b in 16 bits.
extern "C" __global__ void restrict_residual_split4_half(
    const unsigned char* __restrict__ links, const float* __restrict__,
    const float* __restrict__, int fx, int fy, int fz, unsigned,
    const unsigned short* __restrict__ x, const unsigned short* __restrict__ fine_b,
    const float* __restrict__ coarse_diag, int nx, int ny, int nz, float* __restrict__ b,
    const float* __restrict__ scale) {
    Half hs = {scale[0], scale[1]};
    restrict_residual_split4_on(links, fx, fy, fz, x, fine_b, coarse_diag, nx, ny, nz, b, hs);
}

extern "C" __global__ void restrict_residual_half(
    const unsigned char* __restrict__ links, const float* __restrict__ weights,
    const float* __restrict__ diag, int fx, int fy, int fz, unsigned faces,
    const unsigned short* __restrict__ x, const unsigned short* __restrict__ fine_b,
    const float* __restrict__ coarse_diag, int nx, int ny, int nz, float* __restrict__ b,
    const float* __restrict__ scale) {
    Half h = {scale[0], scale[1]};
    if (!weights && !diag) {
        restrict_residual_on(links, (const float*)nullptr, nullptr, fx, fy, fz, faces, x, fine_b,
                             coarse_diag, nx, ny, nz, b, h);
    } else {
        restrict_residual_on(links, weights, diag, fx, fy, fz, faces, x, fine_b, coarse_diag,
                             nx, ny, nz, b, h);
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
template <class S, class L = Natural>
__device__ __forceinline__ void prolong_add_on(const float* __restrict__ e,
                                               const float* __restrict__ coarse_diag, int cx,
                                               int cy, int cz,
                                               const unsigned char* __restrict__ fine_links,
                                               const float* __restrict__ fine_diag, int nx, int ny,
                                               int nz, unsigned faces,
                                               typename S::T* __restrict__ x, S storage,
                                               L layout = L()) {
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
    unsigned c = layout.at(l, q);
    unsigned c2 = second ? layout.next(l, q, c) : c;
    float own[2] = {storage.ld(x, c), storage.ld(x, c2)};
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
        if (part[par] && (par == 0 || second)) x[par ? c2 : c] = storage.enc(out);
    }
}

extern "C" __global__ void prolong_add(const float* __restrict__ e,
                                       const float* __restrict__ coarse_diag, int cx, int cy,
                                       int cz, const unsigned char* __restrict__ fine_links,
                                       const float* __restrict__ fine_diag, int nx, int ny, int nz,
                                       unsigned faces, float* __restrict__ x) {
    prolong_add_on(e, coarse_diag, cx, cy, cz, fine_links, fine_diag, nx, ny, nz, faces, x,
                   F32());
}

extern "C" __global__ void prolong_add_split(const float* __restrict__ e,
                                             const float* __restrict__ coarse_diag, int cx,
                                             int cy, int cz,
                                             const unsigned char* __restrict__ fine_links,
                                             const float* __restrict__ fine_diag, int nx, int ny,
                                             int nz, unsigned faces, float* __restrict__ x) {
    prolong_add_on(e, coarse_diag, cx, cy, cz, fine_links, fine_diag, nx, ny, nz, faces, x,
                   F32(), Split());
}

// `prolong_add_split` four coarse columns (eight fine cells of a row) a
// thread, where the fine length along x is a multiple of 8: the columns'
// even and odd fine cells lie at the same four places of the row's two
// halves, read and written as 16-byte words, and each coarse row around
// them as a 16-byte word and one value beyond each end. Each fine cell's
// sum in the order `prolong_add_on` takes it: the same values to the bit.
template <class S>
__device__ __forceinline__ void prolong_add_split4_on(const float* __restrict__ e,
                                                      const float* __restrict__ coarse_diag,
                                                      int cx, int cy, int cz,
                                                      const unsigned char* __restrict__ fine_links,
                                                      int nx, int ny, int nz, unsigned faces,
                                                      typename S::T* __restrict__ x, S st) {
    Level l = {{nx, ny, nz}, faces};
    int h = 4 * (int)(blockIdx.x * blockDim.x + threadIdx.x);
    int y = blockIdx.y * blockDim.y + threadIdx.y, z = blockIdx.z * blockDim.z + threadIdx.z;
    if (h >= cx || y >= ny || z >= nz) return;
    // Along x the first column's even cell and the last one's odd cell
    // (the others' neighbours are the next columns, at 0.25), along y and
    // z as prolong_add_on.
    int cell[4][2];
    float w[4][2];
    along(2 * h, cx, face(l, 0, 0), face(l, 0, 1), cell[0], w[0]);
    along(2 * h + 7, cx, face(l, 0, 0), face(l, 0, 1), cell[1], w[1]);
    along(y, cy, face(l, 1, 0), face(l, 1, 1), cell[2], w[2]);
    along(z, cz, face(l, 2, 0), face(l, 2, 1), cell[3], w[3]);
    // Each coarse row: its columns h − 1 … h + 4 (the ends as `along` has
    // them), their values and whether they take part.
    float row[4][6];
    unsigned active[4];
#pragma unroll
    for (int k = 0; k < 4; k++) {
        unsigned base =
            (unsigned)cx * ((unsigned)cell[2][k & 1] + (unsigned)cy * (unsigned)cell[3][k >> 1]);
        float4 v = *reinterpret_cast<const float4*>(e + base + h);
        float4 d = *reinterpret_cast<const float4*>(coarse_diag + base + h);
        unsigned lo = base + (unsigned)cell[0][1], hi = base + (unsigned)cell[1][1];
        row[k][0] = e[lo];
        row[k][1] = v.x;
        row[k][2] = v.y;
        row[k][3] = v.z;
        row[k][4] = v.w;
        row[k][5] = e[hi];
        active[k] = (coarse_diag[lo] > 0.0f ? 1u : 0u) | (d.x > 0.0f ? 2u : 0u) |
                    (d.y > 0.0f ? 4u : 0u) | (d.z > 0.0f ? 8u : 0u) | (d.w > 0.0f ? 16u : 0u) |
                    (coarse_diag[hi] > 0.0f ? 32u : 0u);
    }
    unsigned start = (unsigned)nx * ((unsigned)y + (unsigned)ny * (unsigned)z);
    unsigned half = (unsigned)nx >> 1;
    unsigned at[2] = {start + (((y + z) & 1) ? half : 0u) + h,
                      start + (((y + z) & 1) ? 0u : half) + h};
#pragma unroll
    for (int par = 0; par < 2; par++) {
        // The stored words kept where a cell takes no part.
        typename S::T raw[4], out[4];
        raw4(x, at[par], raw);
        float ow[4];
#pragma unroll
        for (int j = 0; j < 4; j++) ow[j] = st.dec(raw[j]);
        uchar4 lk = *reinterpret_cast<const uchar4*>(fine_links + at[par]);
        const unsigned char* lw = &lk.x;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            // The column's holder at place j + 1 of a row, the neighbour
            // along x before it (even cell) or after it (odd cell).
            int nb = par ? j + 2 : j;
            float wx = par ? (j < 3 ? 0.25f : w[1][1]) : (j > 0 ? 0.25f : w[0][1]);
            const float wxs[2] = {0.75f, wx};
            int count = 0;
            float sum = ow[j];
#pragma unroll
            for (int k = 0; k < 8; k++) {
                int r = k >> 1, place = (k & 1) ? nb : j + 1;
                count += (active[r] >> place) & 1u;
                sum += wxs[k & 1] * w[2][(k >> 1) & 1] * w[3][k >> 2] * row[r][place];
            }
            float v = count < 8 ? ow[j] + 1.0f * row[0][j + 1] : sum;
            bool part = (float)(__popc(lw[j] & 63u) + (lw[j] >> 6)) > 0.0f;
            out[j] = part ? st.enc(v) : raw[j];
        }
        put4(x, at[par], out);
    }
}

extern "C" __global__ void prolong_add_split4(const float* __restrict__ e,
                                              const float* __restrict__ coarse_diag, int cx,
                                              int cy, int cz,
                                              const unsigned char* __restrict__ fine_links,
                                              const float* __restrict__, int nx, int ny, int nz,
                                              unsigned faces, float* __restrict__ x) {
    prolong_add_split4_on(e, coarse_diag, cx, cy, cz, fine_links, nx, ny, nz, faces, x, F32());
}

// `prolong_add_split4` onto x in 16 bits.
extern "C" __global__ void prolong_add_split4_half(
    const float* __restrict__ e, const float* __restrict__ coarse_diag, int cx, int cy, int cz,
    const unsigned char* __restrict__ fine_links, const float* __restrict__, int nx, int ny,
    int nz, unsigned faces, unsigned short* __restrict__ x, const float* __restrict__ scale) {
    Half hs = {scale[0], scale[1]};
    prolong_add_split4_on(e, coarse_diag, cx, cy, cz, fine_links, nx, ny, nz, faces, x, hs);
}

extern "C" __global__ void prolong_add_half(const float* __restrict__ e,
                                            const float* __restrict__ coarse_diag, int cx, int cy,
                                            int cz, const unsigned char* __restrict__ fine_links,
                                            const float* __restrict__ fine_diag, int nx, int ny,
                                            int nz, unsigned faces,
                                            unsigned short* __restrict__ x,
                                            const float* __restrict__ scale) {
    Half h = {scale[0], scale[1]};
    prolong_add_on(e, coarse_diag, cx, cy, cz, fine_links, fine_diag, nx, ny, nz, faces, x, h);
}

// The finest grid's right-hand side in 16 bits: b = r in the window of
// r·r = scalars[slot] (`half_scale`), which block 0 leaves in `scale` for
// the cycle's other kernels.
extern "C" __global__ void to_half(const float* __restrict__ r, size_t n,
                                   const double* __restrict__ scalars, int slot,
                                   unsigned short* __restrict__ b, float* __restrict__ scale) {
    Half h = half_scale(scalars[slot], (double)n);
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i == 0) {
        scale[0] = h.down;
        scale[1] = h.up;
    }
    if (i < n) b[i] = h.enc(r[i]);
}

// `to_half`'s window alone, for split rows in 16 bits, whose cycle's first
// pass stores r in b (`smooth_split4_half`).
extern "C" __global__ void half_window(const double* __restrict__ scalars, int slot, size_t n,
                                       float* __restrict__ scale) {
    Half h = half_scale(scalars[slot], (double)n);
    scale[0] = h.down;
    scale[1] = h.up;
}

// The cycle's result back in f32: z = x.
extern "C" __global__ void from_half(const unsigned short* __restrict__ x, size_t n,
                                     const float* __restrict__ scale, float* __restrict__ z) {
    Half h = {scale[0], scale[1]};
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) z[i] = h.ld(x, (unsigned)i);
}

// The finest grid's right-hand side with split rows: b = r (a thread a
// cell), where the first pass cannot (`Ends`).
extern "C" __global__ void to_split(const float* __restrict__ r, int nx, int ny, int nz,
                                    float* __restrict__ b) {
    Level l = {{nx, ny, nz}, 0};
    int p[3];
    unsigned c;
    if (!own_cell(l, p, &c)) return;
    b[Split().at(l, p)] = r[c];
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

// The block's three sums as `reduce` leaves them: t0 and t1 into
// partial[2 block + k], t2 into partial[2 blocks + block].
__device__ __forceinline__ void three_partials(double t0, double t1, double t2,
                                               double* __restrict__ partial) {
    __shared__ double s0[256], s1[256], s2[256];
    block_sums(s0, s1, t0, t1, s2, t2);
    if (threadIdx.x == 0) {
        partial[2 * blockIdx.x] = s0[0];
        partial[2 * blockIdx.x + 1] = s1[0];
        partial[2 * gridDim.x + blockIdx.x] = s2[0];
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

// The cells of a thread of a reduction's grid (blocks of 256 taking the
// cells by a grid-wide stride, as `reduce`), with their coordinates stepped
// along (a division for each cell cost more than its stencil).
struct Walk {
    unsigned c, step;
    int p[3], d[3], nx, ny;
    __device__ __forceinline__ Walk(int nx_, int ny_) : nx(nx_), ny(ny_) {
        c = blockIdx.x * blockDim.x + threadIdx.x;
        step = gridDim.x * blockDim.x;
        unsigned row = c / (unsigned)nx, rows = step / (unsigned)nx;
        p[0] = (int)(c - row * (unsigned)nx);
        p[1] = (int)(row % (unsigned)ny);
        p[2] = (int)(row / (unsigned)ny);
        d[0] = (int)(step - rows * (unsigned)nx);
        d[1] = (int)(rows % (unsigned)ny);
        d[2] = (int)(rows / (unsigned)ny);
    }
    __device__ __forceinline__ void next() {
        c += step;
        p[0] += d[0];
        int carry = p[0] >= nx;
        p[0] -= carry ? nx : 0;
        p[1] += d[1] + carry;
        carry = p[1] >= ny;
        p[1] -= carry ? ny : 0;
        p[2] += d[2] + carry;
    }
};

// A walk over the cells two at a time: `load` reads what a cell needs,
// `use` works it out and stores it, both cells' loads issued before either
// is used. One at a time, each thread waits on its cell's loads in turn:
// the finest grid's operator passes run at a quarter to a half of the
// bandwidth, stalled on memory latency. Each thread takes the same cells in
// the same order as one at a time, so its sums are the same to the bit.
// Past the end the second load repeats the first cell's and is not used.
// On the H200 (city block in 256³, thirty-eighth session) `residual_dots`
// took 105 µs a pass with it against 133; `apply_dot` (107 against 95)
// and `cg_update_check` (251 against 177, two stencils a cell) were slower,
// their registers for two cells costing more occupancy than the second
// cell's loads gained. Where the length along x is a multiple of 4 all
// three take four cells a thread instead (`quad_stencils`); elsewhere
// `residual_dots` walks two at a time and the others one.
template <class Load, class Use>
__device__ __forceinline__ void walk_two(int nx, int ny, unsigned n, Load load, Use use) {
    for (Walk w(nx, ny); w.c < n;) {
        Walk v = w;
        v.next();
        bool second = v.c < n;
        if (!second) v = w;
        auto a = load(w);
        auto b = load(v);
        use(w, a);
        if (second) use(v, b);
        w = v;
        w.next();
    }
}

// Four cells along x a thread for the finest grid's operator passes (its
// length along x a multiple of 4, its couplings all 1 and its diagonal in
// the links byte): a walk over groups of four cells, each group's x, links
// and neighbours across y and z read as 16-byte words, those along x from
// the group's own word and one cell beyond each end. One cell a thread,
// `apply_dot` and `residual_dots` waited on memory latency at 1.0–1.7
// TB/s (H200, thirty-eighth session). The group's stencils are the ones
// `stencil` gives its cells, so each cell's values are the same to the
// bit; the sums take the cells in another order.
__device__ __forceinline__ void quad_stencils(const Level& l, const unsigned char* links,
                                              const float* x, unsigned c, const int p[3],
                                              Stencil t[4]) {
    unsigned nb[6];
    neighbours(l, p, c, nb);
    unsigned after = p[0] + 4 < l.n[0] ? c + 4 : c + 4 - (unsigned)l.n[0];
    uchar4 lk = *reinterpret_cast<const uchar4*>(links + c);
    float4 own = *reinterpret_cast<const float4*>(x + c);
    float4 across[4];
#pragma unroll
    for (int k = 0; k < 4; k++) across[k] = *reinterpret_cast<const float4*>(x + nb[2 + k]);
    float before = x[nb[0]], beyond = x[after];
    const unsigned bits[4] = {lk.x, lk.y, lk.z, lk.w};
    const float* o = &own.x;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        t[j].bits = bits[j];
        t[j].d = (float)(__popc(bits[j] & 63u) + (bits[j] >> 6));
        t[j].own = o[j];
        t[j].around[0] = j > 0 ? o[j - 1] : before;
        t[j].around[1] = j < 3 ? o[j + 1] : beyond;
#pragma unroll
        for (int k = 0; k < 4; k++) t[j].around[2 + k] = (&across[k].x)[j];
#pragma unroll
        for (int dir = 0; dir < 6; dir++) t[j].w[dir] = 1.0f;
    }
}

// A walk over the groups of four cells along x (`quad_stencils`): `use`
// takes each group's first cell and its coordinates.
template <class Use>
__device__ __forceinline__ void walk_quads(int nx, int ny, unsigned n, Use use) {
    for (Walk w(nx / 4, ny); w.c < n / 4; w.next()) {
        int p[3] = {4 * w.p[0], w.p[1], w.p[2]};
        use(4 * w.c, p);
    }
}

// out = A x on the finest grid (0 in cells that take no part; out null: not
// stored), and Σ x·out.
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
    for (Walk w(nx, ny); w.c < n; w.next()) {
        Stencil t = stencil(l, links, weights, diag, x, w.c, w.p);
        float ax = differences_of(t);
        ax = t.d > 0.0f ? ax : 0.0f;
        if (out) out[w.c] = ax;
        t0 += (double)t.own * (double)ax;
    }
    block_sums(s0, s1, t0, 0.0);
    if (threadIdx.x == 0) {
        partial[2 * blockIdx.x] = s0[0];
        partial[2 * blockIdx.x + 1] = s1[0];
    }
}

// `apply_dot_on` four cells a thread (`quad_stencils`).
__device__ __forceinline__ void apply_dot_quad(const unsigned char* __restrict__ links, int nx,
                                               int ny, int nz, unsigned faces,
                                               const float* __restrict__ x,
                                               float* __restrict__ out,
                                               double* __restrict__ partial) {
    __shared__ double s0[256], s1[256];
    Level l = {{nx, ny, nz}, faces};
    unsigned n = (unsigned)nx * (unsigned)ny * (unsigned)nz;
    double t0 = 0.0;
    walk_quads(nx, ny, n, [&](unsigned c, const int p[3]) {
        Stencil t[4];
        quad_stencils(l, links, x, c, p, t);
        float4 q;
        float* qa = &q.x;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            float ax = differences_of(t[j]);
            qa[j] = t[j].d > 0.0f ? ax : 0.0f;
            t0 += (double)t[j].own * (double)qa[j];
        }
        if (out) *reinterpret_cast<float4*>(out + c) = q;
    });
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
    if (!weights && !diag && (nx & 3) == 0) {
        apply_dot_quad(links, nx, ny, nz, faces, x, out, partial);
    } else if (!weights && !diag) {
        apply_dot_on(links, nullptr, nullptr, nx, ny, nz, faces, x, out, partial);
    } else {
        apply_dot_on(links, weights, diag, nx, ny, nz, faces, x, out, partial);
    }
}

// r = b − A x on the finest grid (0 in cells that take no part), with Σ b·b,
// Σ r·r and Σ x·x over every cell, as `reduce` sums them after `apply`
// (the same cells a thread, the same trees): a solve's first and last true
// residuals in one pass each instead of two.
__device__ __forceinline__ void residual_dots_on(const unsigned char* __restrict__ links,
                                                 const float* __restrict__ weights,
                                                 const float* __restrict__ diag, int nx, int ny,
                                                 int nz, unsigned faces,
                                                 const float* __restrict__ x,
                                                 const float* __restrict__ b,
                                                 float* __restrict__ out,
                                                 double* __restrict__ partial) {
    Level l = {{nx, ny, nz}, faces};
    unsigned n = (unsigned)nx * (unsigned)ny * (unsigned)nz;
    double t0 = 0.0, t1 = 0.0, t2 = 0.0;
    struct Loaded {
        Stencil t;
        float b;
    };
    walk_two(
        nx, ny, n,
        [&](const Walk& w) {
            return Loaded{stencil(l, links, weights, diag, x, w.c, w.p), b[w.c]};
        },
        [&](const Walk& w, const Loaded& in) {
            float ax = differences_of(in.t);
            float r = in.t.d > 0.0f ? in.b - ax : 0.0f;
            out[w.c] = r;
            t0 += (double)in.b * (double)in.b;
            t1 += (double)r * (double)r;
            t2 += (double)in.t.own * (double)in.t.own;
        });
    three_partials(t0, t1, t2, partial);
}

// `residual_dots_on` four cells a thread (`quad_stencils`).
__device__ __forceinline__ void residual_dots_quad(const unsigned char* __restrict__ links,
                                                   int nx, int ny, int nz, unsigned faces,
                                                   const float* __restrict__ x,
                                                   const float* __restrict__ b,
                                                   float* __restrict__ out,
                                                   double* __restrict__ partial) {
    Level l = {{nx, ny, nz}, faces};
    unsigned n = (unsigned)nx * (unsigned)ny * (unsigned)nz;
    double t0 = 0.0, t1 = 0.0, t2 = 0.0;
    walk_quads(nx, ny, n, [&](unsigned c, const int p[3]) {
        Stencil t[4];
        quad_stencils(l, links, x, c, p, t);
        float4 b4 = *reinterpret_cast<const float4*>(b + c);
        const float* bw = &b4.x;
        float4 r;
        float* ra = &r.x;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            float ax = differences_of(t[j]);
            ra[j] = t[j].d > 0.0f ? bw[j] - ax : 0.0f;
            t0 += (double)bw[j] * (double)bw[j];
            t1 += (double)ra[j] * (double)ra[j];
            t2 += (double)t[j].own * (double)t[j].own;
        }
        *reinterpret_cast<float4*>(out + c) = r;
    });
    three_partials(t0, t1, t2, partial);
}

extern "C" __global__ void residual_dots(const unsigned char* __restrict__ links,
                                         const float* __restrict__ weights,
                                         const float* __restrict__ diag, int nx, int ny, int nz,
                                         unsigned faces, const float* __restrict__ x,
                                         const float* __restrict__ b, float* __restrict__ out,
                                         double* __restrict__ partial) {
    if (!weights && !diag && (nx & 3) == 0) {
        residual_dots_quad(links, nx, ny, nz, faces, x, b, out, partial);
    } else if (!weights && !diag) {
        residual_dots_on(links, nullptr, nullptr, nx, ny, nz, faces, x, b, out, partial);
    } else {
        residual_dots_on(links, weights, diag, nx, ny, nz, faces, x, b, out, partial);
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

// CG's update with the check of its true residual in the same pass, where
// `cg_update_sum` and a later `residual_dots` took two
// (`FLOWSCOPE_FUSED_CHECK=1`): x + α d into x_new (not x, whose neighbours
// other threads read: the host then swaps the two), r = rhs − A x_new (the
// true residual) stored in r, and Σ (r − α A d)² (the recurrence's, which
// decides when to look at the true one), Σ r_new² and Σ x_new² over every
// cell, as `reduce` sums them. α = rz / pq as in cg_update_sum (no change
// where pq is not positive). The new x at the neighbours is worked out from
// x and d there, rounded as it is stored.
__device__ __forceinline__ void cg_update_check_on(
    const unsigned char* __restrict__ links, const float* __restrict__ weights,
    const float* __restrict__ diag, int nx, int ny, int nz, unsigned faces,
    const float* __restrict__ x, const float* __restrict__ d, const float* __restrict__ rhs,
    float* __restrict__ r, float* __restrict__ x_new, const double* __restrict__ scalars, int rz,
    int pq, double* __restrict__ partial) {
    Level l = {{nx, ny, nz}, faces};
    unsigned n = (unsigned)nx * (unsigned)ny * (unsigned)nz;
    double dq = scalars[pq];
    bool update = dq > 0.0;
    float alpha = update ? (float)(scalars[rz] / dq) : 0.0f;
    double t0 = 0.0, t1 = 0.0, t2 = 0.0;
    for (Walk w(nx, ny); w.c < n; w.next()) {
        Stencil td = stencil(l, links, weights, diag, d, w.c, w.p);
        Stencil tx = stencil(l, links, weights, diag, x, w.c, w.p);
        float rc = r[w.c], bc = rhs[w.c];
        float q = differences_of(td);
        q = td.d > 0.0f ? q : 0.0f;
        float recurrence = update ? rc + -alpha * q : rc;
        if (update) {
            tx.own = tx.own + alpha * td.own;
#pragma unroll
            for (int dir = 0; dir < 6; dir++) {
                tx.around[dir] = tx.around[dir] + alpha * td.around[dir];
            }
        }
        float ax = differences_of(tx);
        float rt = tx.d > 0.0f ? bc - ax : 0.0f;
        x_new[w.c] = tx.own;
        r[w.c] = rt;
        t0 += (double)recurrence * (double)recurrence;
        t1 += (double)rt * (double)rt;
        t2 += (double)tx.own * (double)tx.own;
    }
    three_partials(t0, t1, t2, partial);
}

// `cg_update_check_on` four cells a thread (`quad_stencils`).
__device__ __forceinline__ void cg_update_check_quad(
    const unsigned char* __restrict__ links, int nx, int ny, int nz, unsigned faces,
    const float* __restrict__ x, const float* __restrict__ d, const float* __restrict__ rhs,
    float* __restrict__ r, float* __restrict__ x_new, const double* __restrict__ scalars, int rz,
    int pq, double* __restrict__ partial) {
    Level l = {{nx, ny, nz}, faces};
    unsigned n = (unsigned)nx * (unsigned)ny * (unsigned)nz;
    double dq = scalars[pq];
    bool update = dq > 0.0;
    float alpha = update ? (float)(scalars[rz] / dq) : 0.0f;
    double t0 = 0.0, t1 = 0.0, t2 = 0.0;
    walk_quads(nx, ny, n, [&](unsigned c, const int p[3]) {
        Stencil td[4], tx[4];
        quad_stencils(l, links, d, c, p, td);
        quad_stencils(l, links, x, c, p, tx);
        float4 r4 = *reinterpret_cast<const float4*>(r + c);
        float4 b4 = *reinterpret_cast<const float4*>(rhs + c);
        const float* rw = &r4.x;
        const float* bw = &b4.x;
        float4 xn, rn;
        float* xa = &xn.x;
        float* ra = &rn.x;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            float q = differences_of(td[j]);
            q = td[j].d > 0.0f ? q : 0.0f;
            float recurrence = update ? rw[j] + -alpha * q : rw[j];
            if (update) {
                tx[j].own = tx[j].own + alpha * td[j].own;
#pragma unroll
                for (int dir = 0; dir < 6; dir++) {
                    tx[j].around[dir] = tx[j].around[dir] + alpha * td[j].around[dir];
                }
            }
            float ax = differences_of(tx[j]);
            ra[j] = tx[j].d > 0.0f ? bw[j] - ax : 0.0f;
            xa[j] = tx[j].own;
            t0 += (double)recurrence * (double)recurrence;
            t1 += (double)ra[j] * (double)ra[j];
            t2 += (double)xa[j] * (double)xa[j];
        }
        *reinterpret_cast<float4*>(x_new + c) = xn;
        *reinterpret_cast<float4*>(r + c) = rn;
    });
    three_partials(t0, t1, t2, partial);
}

// Three blocks of 256 an SM: the four-cell path takes 96 registers
// without a bound (two blocks).
#ifndef CHECK_BLOCKS
#define CHECK_BLOCKS 3
#endif
extern "C" __global__ void __launch_bounds__(256, CHECK_BLOCKS)
    cg_update_check(const unsigned char* __restrict__ links,
                                           const float* __restrict__ weights,
                                           const float* __restrict__ diag, int nx, int ny,
                                           int nz, unsigned faces, const float* __restrict__ x,
                                           const float* __restrict__ d,
                                           const float* __restrict__ rhs, float* __restrict__ r,
                                           float* __restrict__ x_new,
                                           const double* __restrict__ scalars, int rz, int pq,
                                           double* __restrict__ partial) {
    if (!weights && !diag && (nx & 3) == 0) {
        cg_update_check_quad(links, nx, ny, nz, faces, x, d, rhs, r, x_new, scalars, rz, pq,
                             partial);
    } else if (!weights && !diag) {
        cg_update_check_on(links, nullptr, nullptr, nx, ny, nz, faces, x, d, rhs, r, x_new,
                           scalars, rz, pq, partial);
    } else {
        cg_update_check_on(links, weights, diag, nx, ny, nz, faces, x, d, rhs, r, x_new, scalars,
                           rz, pq, partial);
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
    // A thread's partials (at most 16: REDUCE_BLOCKS over 256 threads) all
    // loaded before any is added, then added in the same order as one at a
    // time, so the same sums to the bit. One at a time, each add waited on
    // its load: 9.4 µs a launch (H200, thirty-ninth session).
    constexpr int MOST = 16;
    double v0[MOST], v1[MOST], v2[MOST];
#pragma unroll
    for (int k = 0; k < MOST; k++) {
        unsigned i = threadIdx.x + (unsigned)k * blockDim.x;
        bool in = i < blocks;
        v0[k] = in ? partial[2 * i] : 0.0;
        v1[k] = in ? partial[2 * i + 1] : 0.0;
        v2[k] = in && slot2 >= 0 ? partial[2 * blocks + i] : 0.0;
    }
#pragma unroll
    for (int k = 0; k < MOST; k++) {
        if (threadIdx.x + (unsigned)k * blockDim.x < blocks) {
            t0 += v0[k];
            t1 += v1[k];
            if (slot2 >= 0) t2 += v2[k];
        }
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

// The pressures before that Flow::predict keeps (flow.rs's BEFORE).
#define BEFORE 5

// Flow::predict: the solve's first guess w0 p + w1 p1 + ... from the
// pressure p and the `len` newest of the BEFORE before it (history: a ring
// of planes, p1's at `newest`, each older one's after it), p taking the
// oldest one's plane as the newest; 0 in the cells that take no part (the
// solve's first step on the CPU, `Pcg::solve`, here without a pass of its
// own).
extern "C" __global__ void predict(float* __restrict__ p, float* __restrict__ history, size_t n,
                                   int newest, int len, float w0, float w1, float w2, float w3,
                                   float w4, float w5, const unsigned char* __restrict__ links,
                                   const float* __restrict__ diag) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float w[BEFORE] = {w1, w2, w3, w4, w5};
    float a = p[i];
    float sum = w0 * a;
#pragma unroll
    for (int k = 0; k < BEFORE; k++) {
        if (k < len) sum = sum + w[k] * history[(size_t)((newest + k) % BEFORE) * n + i];
    }
    bool part = diagonal(links, diag, i) > 0.0f;
    history[(size_t)((newest + BEFORE - 1) % BEFORE) * n + i] = a;
    p[i] = part ? sum : 0.0f;
}

// CG's new direction: p = z on the first iteration, else p = z + β p with the
// flexible β = (r·z − r·z_old) / rz_old from the scalars.
// Where n is a multiple of 4 a thread takes four cells, a 16-byte word of
// each vector (the host launches a quarter of the threads): 42 µs a pass
// against 63 (H200, 256³, thirty-ninth session).
extern "C" __global__ void direction(float* __restrict__ p, const float* __restrict__ z, size_t n,
                                     const double* __restrict__ scalars, int first, int rz_new,
                                     int rz_cross, int rz_old) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    float beta =
        first ? 0.0f : (float)((scalars[rz_new] - scalars[rz_cross]) / scalars[rz_old]);
    if (n % 4 == 0) {
        if (4 * i >= n) return;
        float4 zw = reinterpret_cast<const float4*>(z)[i];
        if (!first) {
            float4 pw = reinterpret_cast<const float4*>(p)[i];
            zw = make_float4(zw.x + beta * pw.x, zw.y + beta * pw.y, zw.z + beta * pw.z,
                             zw.w + beta * pw.w);
        }
        reinterpret_cast<float4*>(p)[i] = zw;
        return;
    }
    if (i >= n) return;
    p[i] = first ? z[i] : z[i] + beta * p[i];
}
