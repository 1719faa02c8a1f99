// Passive-scalar transport on the GPU (src/solver/scalar/transport.rs has
// the scheme and the CPU reference, src/solver/scalar/cuda.rs the launches).
// Compiled with --fmad=false and written in the CPU's order of operations:
// the same values bit for bit.

typedef unsigned int u32;
typedef unsigned long long u64;

// transport::Role, as cuda.rs uploads it.
#define OPEN 0u
#define HELD 1u
#define CLOSED 2u

// What one sub-step reads. `u` holds the flow's ux, uy and uz planes. Cells
// are indexed with 32 bits (the flow solver takes fewer than 2^32).
struct Flow {
    const float* c;
    const unsigned char* role;
    const float* u[3];
    const float* diff;
    bool diff_single;
    float dt;
    int size[3];
    u32 stride[3];
    u32 periodic;
    u32 n;
};

__device__ __forceinline__ Flow make_flow(const float* c, const unsigned char* role, const float* u, const float* diff, u32 diff_single, float dt, int nx, int ny, int nz, u32 periodic) {
    Flow f;
    f.c = c; f.role = role; f.diff = diff;
    f.diff_single = diff_single != 0u;
    f.dt = dt;
    f.size[0] = nx; f.size[1] = ny; f.size[2] = nz;
    f.stride[0] = 1u; f.stride[1] = (u32)nx; f.stride[2] = (u32)nx * (u32)ny;
    f.periodic = periodic;
    f.n = (u32)nx * (u32)ny * (u32)nz;
    f.u[0] = u; f.u[1] = u + f.n; f.u[2] = u + 2 * (size_t)f.n;
    return f;
}

#define NONE 0xffffffffu

// A thread's cell in the lattice kernels: blocks of any shape tile the grid.
#define CELL_XYZ                                           \
    int x = blockIdx.x * blockDim.x + threadIdx.x;         \
    int y = blockIdx.y * blockDim.y + threadIdx.y;         \
    int z = blockIdx.z * blockDim.z + threadIdx.z;         \
    if (x >= nx || y >= ny || z >= nz) return;

// transport::Walker::step for |d| = 1: the cell d steps from c (at
// coordinate p along axis a), or NONE beyond a closed grid face.
__device__ __forceinline__ u32 step(const Flow& f, u32 c, int p, int a, int d) {
    int q = p + d;
    if (q >= 0 && q < f.size[a]) return d > 0 ? c + f.stride[a] : c - f.stride[a];
    if (!((f.periodic >> a) & 1u)) return NONE;
    // Across the periodic edge: to the other end of the row.
    u32 span = (u32)(f.size[a] - 1) * f.stride[a];
    return d > 0 ? c - span : c + span;
}

__device__ __forceinline__ float vel(const Flow& f, u32 k, int a) {
    return f.u[a][k];
}

__device__ __forceinline__ float diffusivity(const Flow& f, u32 k) {
    return f.diff_single ? f.diff[0] : f.diff[k];
}

// transport::limiter: fminf/fmaxf drop a NaN as f32::min/max do.
__device__ __forceinline__ float limiter(float r, float nu) {
    float third = ((2.0f - nu) + (1.0f + nu) * r) * (1.0f / 3.0f);
    return fmaxf(fminf(fminf(2.0f * r, third), 2.0f), 0.0f);
}

// transport::advective_flux
__device__ __forceinline__ float advective_flux(float u, float far, float up, float down, float dt) {
    float jump = down - up;
    float correction = 0.0f;
    if (jump != 0.0f) {
        float r = (up - far) / jump;
        float nu = fabsf(u) * dt;
        correction = 0.5f * (1.0f - nu) * limiter(r, nu) * jump;
    }
    return u * (up + correction);
}

// The value one step beyond `from` (at coordinate p along a), where that
// cell is there and not closed (else `from`'s own).
__device__ __forceinline__ float beyond(const Flow& f, u32 from, int p, int a, int d) {
    u32 k = step(f, from, p, a, d);
    return (k != NONE && f.role[k] != CLOSED) ? f.c[k] : f.c[from];
}

// transport::Flow::face: the flux from lo (at coordinate p along a) to its
// +a neighbour hi (at q).
__device__ __forceinline__ float face(const Flow& f, u32 lo, int p, u32 hi, int q, int a) {
    u32 rl = f.role[lo], rh = f.role[hi];
    if (rl == CLOSED || rh == CLOSED || (rl == HELD && rh == HELD)) return 0.0f;
    float u = 0.5f * (vel(f, lo, a) + vel(f, hi, a));
    float advective;
    if (u >= 0.0f) advective = advective_flux(u, beyond(f, lo, p, a, -1), f.c[lo], f.c[hi], f.dt);
    else advective = advective_flux(u, beyond(f, hi, q, a, 1), f.c[hi], f.c[lo], f.dt);
    float d = 0.5f * (diffusivity(f, lo) + diffusivity(f, hi));
    return advective - d * (f.c[hi] - f.c[lo]);
}

// `face` where the cells one beyond lo and hi (s apart along a) are inside
// the grid: everything the face may read is loaded first, unconditionally,
// and the rules pick from it. The kernel waits on its loads (L1 latency,
// not bandwidth), and `face` chains them: roles, then the velocity, then
// the cell beyond. The values and the arithmetic are `face`'s.
__device__ __forceinline__ float face_inner(const Flow& f, u32 lo, u32 s, int a) {
    const u32 hi = lo + s;
    const u32 rb = f.role[lo - s], rl = f.role[lo], rh = f.role[hi], ra = f.role[hi + s];
    const float cb = f.c[lo - s], cl = f.c[lo], ch = f.c[hi], ca = f.c[hi + s];
    const float vl = vel(f, lo, a), vh = vel(f, hi, a);
    const float dl = diffusivity(f, lo), dh = diffusivity(f, hi);
    const bool shut = rl == CLOSED || rh == CLOSED || (rl == HELD && rh == HELD);
    const float u = 0.5f * (vl + vh);
    const bool forward = u >= 0.0f;
    const float far = forward ? (rb != CLOSED ? cb : cl) : (ra != CLOSED ? ca : ch);
    const float advective = advective_flux(u, far, forward ? cl : ch, forward ? ch : cl, f.dt);
    const float d = 0.5f * (dl + dh);
    const float flux = advective - d * (ch - cl);
    return shut ? 0.0f : flux;
}

// transport::edge_flux: out through a grid face without a neighbour.
__device__ __forceinline__ float edge_flux(const Flow& f, u32 cell, int a, float side) {
    float u = vel(f, cell, a);
    return u * side > 0.0f ? u * f.c[cell] : 0.0f;
}

// One sub-step of one field is two passes, so that each face flux is
// computed once (the CPU computes it from both sides, the same value):
// `fluxes` writes each cell's flux through its +x, +y and +z faces (through
// the grid face where it has no neighbour) into three planes, `update` sums
// them into the next values. Blocks of threads along x, grid rows y and z.
extern "C" __global__ void __launch_bounds__(128) fluxes(const float* __restrict__ c, const unsigned char* __restrict__ role, const float* __restrict__ u, const float* __restrict__ diff, u32 diff_single, float dt, int nx, int ny, int nz, u32 periodic, float* __restrict__ flux) {
    CELL_XYZ
    Flow f = make_flow(c, role, u, diff, diff_single, dt, nx, ny, nz, periodic);
    u32 cell = (u32)x + f.stride[1] * (u32)y + f.stride[2] * (u32)z;
    int p[3] = {x, y, z};
#pragma unroll
    for (int a = 0; a < 3; a++) {
        float out;
        // Tested per axis: along y and z a warp (one row of x) agrees, and
        // only the x faces of the rows' end cells take the general path.
        if (p[a] >= 1 && p[a] < f.size[a] - 2) {
            out = face_inner(f, cell, f.stride[a], a);
        } else {
            u32 hi = step(f, cell, p[a], a, 1);
            int q = p[a] + 1 == f.size[a] ? 0 : p[a] + 1;
            out = hi != NONE ? face(f, cell, p[a], hi, q, a) : edge_flux(f, cell, a, 1.0f);
        }
        flux[(size_t)a * f.n + cell] = out;
    }
}

// transport::advance's sum over the faces, in its order, in f64. The
// fluxes are loaded before the cell's role decides whether they are used,
// so that the loads are in flight together.
extern "C" __global__ void __launch_bounds__(128) update(const float* __restrict__ c, float* __restrict__ next, const unsigned char* __restrict__ role, const float* __restrict__ u, const float* __restrict__ flux, float dt, int nx, int ny, int nz, u32 periodic) {
    CELL_XYZ
    Flow f = make_flow(c, role, u, 0, 1u, dt, nx, ny, nz, periodic);
    u32 cell = (u32)x + f.stride[1] * (u32)y + f.stride[2] * (u32)z;
    int p[3] = {x, y, z};
    float out[3], in[3];
#pragma unroll
    for (int a = 0; a < 3; a++) {
        const float* plane = flux + (size_t)a * f.n;
        out[a] = plane[cell];
        if (p[a] >= 1) {
            in[a] = plane[cell - f.stride[a]];
        } else {
            u32 lo = step(f, cell, p[a], a, -1);
            in[a] = lo != NONE ? plane[lo] : edge_flux(f, cell, a, -1.0f);
        }
    }
    const float own = c[cell];
    if (role[cell] != OPEN) {
        next[cell] = own;
        return;
    }
    double net = 0.0;
#pragma unroll
    for (int a = 0; a < 3; a++) {
        net += (double)out[a];
        net -= (double)in[a];
    }
    next[cell] = (float)((double)own - (double)dt * net);
}

// transport::diffuse: a diffusion-only sub-step in one pass. Each thread
// takes two neighbouring cells of a row and walks DIFFUSE_LAYERS layers of
// their columns up z, carrying the layers below and at z in registers: the
// pair's values above and beside it in y come in one load each (float2
// where rows are of even length), those beside it in x from L1. Which faces
// of a cell exchange it reads from one byte, transport::open_faces (bit 2a
// towards +a, 2a + 1 towards -a, OPEN_CELL the cell open), instead of seven
// roles and the grid's edges. A face's value is
// transport::Flow::diffusive's, summed in f64 in diffuse's order (+x, -x,
// +y, -y, +z, -z); a closed face adds nothing where the CPU adds a zero.
// H100, 256^3: 174 us a sub-step with seven roles a cell and one cell a
// thread, 72 us so (BENCHMARKS.md, 2026-11-26, sixteenth session). Two
// sub-steps in one pass through shared memory took 207 us, more than two.
#define OPEN_CELL 64u

struct Pair {
    float a, b;
};

// p[0] and, where `both`, p[1]; in one load where `vec` (p 8-byte aligned).
__device__ __forceinline__ Pair load_pair(const float* p, bool vec, bool both) {
    if (vec) {
        const float2 v = *reinterpret_cast<const float2*>(p);
        return {v.x, v.y};
    }
    return {p[0], both ? p[1] : 0.0f};
}

// One cell's new value from its own value `own` and diffusivity `d`, its
// neighbours' values `nb` and diffusivities `dn` (in the order of the face
// bits) and its `open` byte.
__device__ __forceinline__ float diffused(float own, float d, const float* nb, const float* dn, u32 open, float dt) {
    if (!(open & OPEN_CELL)) return own;
    double net = 0.0;
#pragma unroll
    for (int a = 0; a < 3; a++) {
        // Towards +a the cell is the face's low side, towards -a its high.
        if (open & (1u << (2 * a))) net += (double)(-((0.5f * (d + dn[2 * a])) * (nb[2 * a] - own)));
        if (open & (2u << (2 * a))) net -= (double)(-((0.5f * (dn[2 * a + 1] + d)) * (own - nb[2 * a + 1])));
    }
    return (float)((double)own - (double)dt * net);
}

// `SINGLE`: one diffusivity, diff[0], for all cells.
template <bool SINGLE>
__device__ __forceinline__ void diffuse_columns(const float* __restrict__ c, float* __restrict__ next, const unsigned char* __restrict__ faces, const float* __restrict__ diff, float dt, int nx, int ny, int nz, u32 periodic) {
    const int x0 = 2 * (blockIdx.x * blockDim.x + threadIdx.x);
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    const int z0 = blockIdx.z * DIFFUSE_LAYERS;
    if (x0 >= nx || y >= ny) return;
    const bool both = x0 + 1 < nx;
    const bool vec = (nx & 1) == 0;
    const int sy = nx, sz = nx * ny;
    // Offsets to the neighbours of the pair: -x of its first cell, +x of
    // its last, then y and z; across a periodic edge to the other end, 0
    // where there is none (the face's bit is then clear).
    const int xl = x0, xr = both ? x0 + 1 : x0;
    const int left = xl > 0 ? -1 : ((periodic & 1u) ? nx - 1 : 0);
    const int right = (xr + 1 < nx ? 1 : ((periodic & 1u) ? 1 - nx : 0)) + (xr - xl);
    const int up_y = y + 1 < ny ? sy : ((periodic & 2u) ? -(ny - 1) * sy : 0);
    const int down_y = y > 0 ? -sy : ((periodic & 2u) ? (ny - 1) * sy : 0);
    const int z1 = min(z0 + DIFFUSE_LAYERS, nz);
    // The pair's values and diffusivities in the layers below and at z,
    // carried up the column: each layer is read once a thread.
    u32 cell = (u32)x0 + (u32)sy * (u32)y + (u32)sz * (u32)z0;
    const int down_z0 = z0 > 0 ? -sz : ((periodic & 4u) ? (nz - 1) * sz : 0);
    Pair below = load_pair(c + (cell + (u32)down_z0), vec, both);
    Pair here = load_pair(c + cell, vec, both);
    Pair d_below = {0.0f, 0.0f}, d_here = {0.0f, 0.0f};
    if (!SINGLE) {
        d_below = load_pair(diff + (cell + (u32)down_z0), vec, both);
        d_here = load_pair(diff + cell, vec, both);
    }
    for (int z = z0; z < z1; z++, cell += (u32)sz) {
        const int up_z = z + 1 < nz ? sz : ((periodic & 4u) ? -(nz - 1) * sz : 0);
        u32 open0, open1;
        if (vec) {
            const uchar2 o = *reinterpret_cast<const uchar2*>(faces + cell);
            open0 = o.x; open1 = o.y;
        } else {
            open0 = faces[cell];
            open1 = both ? faces[cell + 1] : 0u;
        }
        const Pair own = here;
        const float cl = c[cell + (u32)left], cr = c[cell + (u32)right];
        const Pair py = load_pair(c + (cell + (u32)up_y), vec, both);
        const Pair my = load_pair(c + (cell + (u32)down_y), vec, both);
        const Pair pz = load_pair(c + (cell + (u32)up_z), vec, both);
        const Pair mz = below;
        const float nb0[6] = {both ? own.b : cr, cl, py.a, my.a, pz.a, mz.a};
        const float nb1[6] = {cr, own.a, py.b, my.b, pz.b, mz.b};
        float d0, d1, dn0[6], dn1[6];
        Pair dpz = {0.0f, 0.0f};
        if (SINGLE) {
            d0 = d1 = diff[0];
#pragma unroll
            for (int k = 0; k < 6; k++) dn0[k] = dn1[k] = diff[0];
        } else {
            const Pair dd = d_here;
            const float dl = diff[cell + (u32)left], dr = diff[cell + (u32)right];
            const Pair dpy = load_pair(diff + (cell + (u32)up_y), vec, both);
            const Pair dmy = load_pair(diff + (cell + (u32)down_y), vec, both);
            dpz = load_pair(diff + (cell + (u32)up_z), vec, both);
            const Pair dmz = d_below;
            d0 = dd.a; d1 = dd.b;
            dn0[0] = both ? dd.b : dr; dn0[1] = dl; dn0[2] = dpy.a; dn0[3] = dmy.a; dn0[4] = dpz.a; dn0[5] = dmz.a;
            dn1[0] = dr; dn1[1] = dd.a; dn1[2] = dpy.b; dn1[3] = dmy.b; dn1[4] = dpz.b; dn1[5] = dmz.b;
        }
        const float out0 = diffused(own.a, d0, nb0, dn0, open0, dt);
        if (!both) {
            next[cell] = out0;
        } else {
            const float out1 = diffused(own.b, d1, nb1, dn1, open1, dt);
            if (vec) *reinterpret_cast<float2*>(next + cell) = make_float2(out0, out1);
            else { next[cell] = out0; next[cell + 1] = out1; }
        }
        // Up one layer: z + 1 < z1 <= nz wherever the loop goes on, so the
        // layer above is the next one, not across the edge.
        below = here;
        here = pz;
        d_below = d_here;
        d_here = dpz;
    }
}

extern "C" __global__ void __launch_bounds__(128, DIFFUSE_BLOCKS) diffuse(const float* __restrict__ c, float* __restrict__ next, const unsigned char* __restrict__ faces, const float* __restrict__ diff, u32 diff_single, float dt, int nx, int ny, int nz, u32 periodic) {
    if (diff_single) diffuse_columns<true>(c, next, faces, diff, dt, nx, ny, nz, periodic);
    else diffuse_columns<false>(c, next, faces, diff, dt, nx, ny, nz, periodic);
}

// transport::eddy_diffusivity: molecular + (C_s Δ)² |S| / Sc_t at a cell
// (at (x, y, z)).
__device__ __forceinline__ float eddy_at(const Flow& f, u32 cell, int x, int y, int z, float smagorinsky, float schmidt_turbulent, float molecular) {
    if (f.role[cell] == CLOSED) return molecular;
    int p[3] = {x, y, z};
    float g[3][3];
#pragma unroll
    for (int k = 0; k < 3; k++)
#pragma unroll
        for (int a = 0; a < 3; a++) g[k][a] = 0.0f;
#pragma unroll
    for (int a = 0; a < 3; a++) {
        u32 hi = step(f, cell, p[a], a, 1);
        u32 lo = step(f, cell, p[a], a, -1);
        bool h = hi != NONE && f.role[hi] != CLOSED;
        bool l = lo != NONE && f.role[lo] != CLOSED;
        if (!h && !l) continue;
        // The CPU divides by the span (2 or 1 cells): halving is exact, so
        // a product gives the same bits without a division.
        float inv = (h && l) ? 0.5f : 1.0f;
        u32 up = h ? hi : cell;
        u32 down = l ? lo : cell;
#pragma unroll
        for (int k = 0; k < 3; k++) g[k][a] = (vel(f, up, k) - vel(f, down, k)) * inv;
    }
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < 3; k++)
#pragma unroll
        for (int a = 0; a < 3; a++) {
            float s = 0.5f * (g[k][a] + g[a][k]);
            ss += s * s;
        }
    float strain = sqrtf(2.0f * ss);
    return molecular + smagorinsky * smagorinsky * strain / schmidt_turbulent;
}

// As a transport step begins, one pass over its velocity: with `eddy`, each
// cell's diffusivity into `diff`; and the largest |ux| + |uy| + |uz| over the
// open cells into out[0] and, with `eddy`, the largest diffusivity into
// out[1], as float bits (all values are at least +0, where the bits order
// as the floats); out is zeroed first. A NaN is skipped, as f32::max skips
// it on the CPU. Each thread takes MAXIMA_LAYERS layers of its column and
// each block meets the two atomics once (one a warp over the whole grid
// cost 0.75 ms at 256³; 32 layers a thread left too few loads in flight).
// cuda.rs defines MAXIMA_LAYERS, and sizes the grid by it.
extern "C" __global__ void __launch_bounds__(128) eddy_maxima(const unsigned char* __restrict__ role, const float* __restrict__ u, int nx, int ny, int nz, u32 periodic, u32 eddy, float smagorinsky, float schmidt_turbulent, float molecular, float* __restrict__ diff, u32* __restrict__ out) {
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    const int z0 = (blockIdx.z * blockDim.z + threadIdx.z) * MAXIMA_LAYERS;
    float m = 0.0f, dm = 0.0f;
    // Threads past the grid take part in the warp's reduction with zeros.
    if (x < nx && y < ny) {
        Flow f = make_flow(0, role, u, 0, 1u, 0.0f, nx, ny, nz, periodic);
        for (int z = z0; z < min(z0 + MAXIMA_LAYERS, nz); z++) {
            const u32 cell = (u32)x + f.stride[1] * (u32)y + f.stride[2] * (u32)z;
            if (eddy) {
                const float d = eddy_at(f, cell, x, y, z, smagorinsky, schmidt_turbulent, molecular);
                diff[cell] = d;
                if (d > dm) dm = d;
            }
            if (role[cell] == OPEN) {
                const float v = fabsf(vel(f, cell, 0)) + fabsf(vel(f, cell, 1)) + fabsf(vel(f, cell, 2));
                if (v > m) m = v;
            }
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        m = fmaxf(m, __shfl_down_sync(0xffffffffu, m, o));
        dm = fmaxf(dm, __shfl_down_sync(0xffffffffu, dm, o));
    }
    // The warps' maxima through shared memory: one atomic pair a block.
    __shared__ float warp_m[4], warp_dm[4];
    const u32 t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    if ((t & 31u) == 0u) {
        warp_m[t >> 5] = m;
        warp_dm[t >> 5] = dm;
    }
    __syncthreads();
    if (t == 0u) {
        const u32 warps = (blockDim.x * blockDim.y * blockDim.z + 31u) >> 5;
        for (u32 w = 1; w < warps; w++) {
            m = fmaxf(m, warp_m[w]);
            dm = fmaxf(dm, warp_dm[w]);
        }
        atomicMax(out, __float_as_uint(m));
        atomicMax(out + 1, __float_as_uint(dm));
    }
}

// A source's release: its cells set to `value`, or `value` added to them.
extern "C" __global__ void release(float* __restrict__ c, const u32* __restrict__ cells, u32 count, u32 add, float value) {
    u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= count) return;
    if (add) c[cells[i]] += value;
    else c[cells[i]] = value;
}

// One flow step of field k at each receptor's cell added to its dose
// (doses: MAX_FIELDS per receptor).
extern "C" __global__ void doses(const float* __restrict__ c, const u32* __restrict__ cells, u32 count, u32 k, double* __restrict__ dose) {
    u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= count) return;
    dose[4 * i + k] += (double)c[cells[i]];
}

// Field k at the receptors' cells into out[k * count + i].
extern "C" __global__ void gather(const float* __restrict__ c, const u32* __restrict__ cells, u32 count, u32 k, float* __restrict__ out) {
    u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= count) return;
    out[k * count + i] = c[cells[i]];
}
