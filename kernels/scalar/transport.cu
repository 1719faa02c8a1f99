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

// The grid and the velocity the eddy diffusivities read. `u` holds the
// flow's ux, uy and uz planes. Cells are indexed with 32 bits (the flow
// solver takes fewer than 2^32).
struct Flow {
    const unsigned char* role;
    const float* u[3];
    int size[3];
    u32 stride[3];
    u32 periodic;
    u32 n;
};

__device__ __forceinline__ Flow make_flow(const unsigned char* role, const float* u, int nx, int ny, int nz, u32 periodic) {
    Flow f;
    f.role = role;
    f.size[0] = nx; f.size[1] = ny; f.size[2] = nz;
    f.stride[0] = 1u; f.stride[1] = (u32)nx; f.stride[2] = (u32)nx * (u32)ny;
    f.periodic = periodic;
    f.n = (u32)nx * (u32)ny * (u32)nz;
    f.u[0] = u; f.u[1] = u + f.n; f.u[2] = u + 2 * (size_t)f.n;
    return f;
}

#define NONE 0xffffffffu

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

// transport::limited: fminf/fmaxf drop a NaN as f32::min/max do.
__device__ __forceinline__ float limited(float slope, float jump, float nu) {
    const float third = ((2.0f - nu) * jump + (1.0f + nu) * slope) * (1.0f / 3.0f);
    if (jump > 0.0f) return fmaxf(fminf(fminf(2.0f * slope, third), 2.0f * jump), 0.0f);
    return fminf(fmaxf(fmaxf(2.0f * slope, third), 2.0f * jump), 0.0f);
}

// transport::advective_flux
__device__ __forceinline__ float advective_flux(float u, float far, float up, float down, float dt) {
    float jump = down - up;
    float correction = 0.0f;
    if (jump != 0.0f) {
        float nu = fabsf(u) * dt;
        correction = 0.5f * (1.0f - nu) * limited(up - far, jump, nu);
    }
    return u * (up + correction);
}

// transport::Flow::face on values already loaded: the roles and values of
// the cell beyond lo (b), lo (l), hi (h) and the cell beyond hi (a), the
// velocities along the face's axis and the diffusivities of lo and hi.
// Everything is computed and the rules pick from it (selects, not
// branches).
__device__ __forceinline__ float face_of(u32 rb, u32 rl, u32 rh, u32 ra, float cb, float cl, float ch, float ca, float vl, float vh, float dl, float dh, float dt) {
    const bool shut = rl == CLOSED || rh == CLOSED || (rl == HELD && rh == HELD);
    const float u = 0.5f * (vl + vh);
    const bool forward = u >= 0.0f;
    const float far = forward ? (rb != CLOSED ? cb : cl) : (ra != CLOSED ? ca : ch);
    const float advective = advective_flux(u, far, forward ? cl : ch, forward ? ch : cl, dt);
    const float d = 0.5f * (dl + dh);
    const float flux = advective - d * (ch - cl);
    return shut ? 0.0f : flux;
}

// transport::advance in one pass: each thread takes two neighbouring cells
// of a row and walks ADVECT_LAYERS layers of their columns up z. It works
// out the three x faces of the pair, each cell's two y faces and its +z
// face, and carries the +z face's flux up as the -z face of the layer
// above, with the values the z faces read (the column from z - 1 to z + 1)
// in registers. A face between two cells is computed by both threads that
// border it, from the same values in the same order: the same bits, as the
// CPU's two passes give (it computes each face once and reads it twice).
// The cells a face reads beyond its ends are taken wrapped across a
// periodic edge and clamped at a closed one: a clamped cell is the face's
// own end cell, the value `beyond` falls back to. H100, 256^3: 248 us a
// sub-step at 64 registers (ADVECT_BLOCKS 8; 96 registers took 315 us),
// where two passes writing and reading three flux planes took 332 us; 236
// us with the limiter multiplied through by the jump instead of dividing
// by it (BENCHMARKS.md, 2026-11-26, seventeenth and eighteenth sessions).

// Coordinate p (within two of [0, n)) along an axis, wrapped or clamped;
// by repeated steps rather than a remainder, which costs an integer
// division (a grid of one or two cells may need two).
__device__ __forceinline__ int along(int p, int n, bool wrap) {
    if (!wrap) return min(max(p, 0), n - 1);
    while (p < 0) p += n;
    while (p >= n) p -= n;
    return p;
}

// The outflow through a grid face with no neighbour (transport::edge_flux).
__device__ __forceinline__ float out_of_grid(float u, float c, float side) {
    return u * side > 0.0f ? u * c : 0.0f;
}

// N cells along an axis, at base + idx[i]: their values and roles, and the
// velocity component and diffusivity of the middle N - 2 (v[i] and d[i]
// those of cell i + 1).
template <bool SINGLE, int N>
__device__ __forceinline__ void window(const float* __restrict__ c, const unsigned char* __restrict__ role, const float* __restrict__ u_axis, const float* __restrict__ diff, float single, u32 base, const u32* idx, float* cw, u32* rw, float* vw, float* dw) {
#pragma unroll
    for (int i = 0; i < N; i++) {
        cw[i] = c[base + idx[i]];
        rw[i] = role[base + idx[i]];
    }
#pragma unroll
    for (int i = 0; i < N - 2; i++) {
        vw[i] = u_axis[base + idx[i + 1]];
        dw[i] = SINGLE ? single : diff[base + idx[i + 1]];
    }
}

// The flux through the face between a window's cells k + 1 and k + 2.
__device__ __forceinline__ float window_face(const float* cw, const u32* rw, const float* vw, const float* dw, int k, float dt) {
    return face_of(rw[k], rw[k + 1], rw[k + 2], rw[k + 3], cw[k], cw[k + 1], cw[k + 2], cw[k + 3], vw[k], vw[k + 1], dw[k], dw[k + 1], dt);
}

// One cell's column values that its z faces read, carried up the column.
struct Column {
    float c[3];  // z - 1, z, z + 1
    u32 r[3];
    float v, d;  // uz and diffusivity at z
    float down;  // the flux through the -z face
};

template <bool SINGLE>
__device__ __forceinline__ void advect_columns(const float* __restrict__ c, float* __restrict__ next, const unsigned char* __restrict__ role, const float* __restrict__ u, const float* __restrict__ diff, float dt, int nx, int ny, int nz, u32 periodic) {
    const int x0 = 2 * (blockIdx.x * blockDim.x + threadIdx.x);
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    const int z0 = blockIdx.z * ADVECT_LAYERS;
    if (x0 >= nx || y >= ny) return;
    const bool both = x0 + 1 < nx;
    const bool px = periodic & 1u, py = (periodic >> 1) & 1u, pz = (periodic >> 2) & 1u;
    const u32 sy = (u32)nx, sz = (u32)nx * (u32)ny, n = sz * (u32)nz;
    const float* ux = u;
    const float* uy = u + n;
    const float* uz = u + 2 * (size_t)n;
    // x - 2 .. x + 3 and the rows y - 2 .. y + 2.
    u32 xs[6], ys[5];
#pragma unroll
    for (int k = 0; k < 6; k++) xs[k] = (u32)along(x0 - 2 + k, nx, px);
#pragma unroll
    for (int k = 0; k < 5; k++) ys[k] = (u32)along(y - 2 + k, ny, py) * sy;
    // Which of the pair's faces have a cell beyond them.
    const bool x_in = x0 > 0 || px, x_mid = x0 + 1 < nx || px, x_out = x0 + 2 < nx || px;
    const bool y_in = y > 0 || py, y_out = y + 1 < ny || py;
    const u32 col[2] = {xs[2] + ys[2], xs[3] + ys[2]};
    const float single = SINGLE ? diff[0] : 0.0f;
    const int z1 = min(z0 + ADVECT_LAYERS, nz);

    // The columns from z0 - 2 up, and the flux through z0's -z face.
    Column column[2];
    {
        const u32 zb = (u32)along(z0 - 2, nz, pz) * sz, zm = (u32)along(z0 - 1, nz, pz) * sz;
        const u32 zh = (u32)z0 * sz, za = (u32)along(z0 + 1, nz, pz) * sz;
        const bool z_in = z0 > 0 || pz;
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const u32 b = col[i] + zb, l = col[i] + zm, h = col[i] + zh, a = col[i] + za;
            column[i].c[0] = c[l]; column[i].c[1] = c[h]; column[i].c[2] = c[a];
            column[i].r[0] = role[l]; column[i].r[1] = role[h]; column[i].r[2] = role[a];
            column[i].v = uz[h];
            column[i].d = SINGLE ? single : diff[h];
            const float dl = SINGLE ? single : diff[l];
            column[i].down = z_in ? face_of(role[b], column[i].r[0], column[i].r[1], column[i].r[2], c[b], column[i].c[0], column[i].c[1], column[i].c[2], uz[l], column[i].v, dl, column[i].d, dt)
                             : out_of_grid(column[i].v, column[i].c[1], -1.0f);
        }
    }
    for (int z = z0; z < z1; z++) {
        const u32 zh = (u32)z * sz;
        const u32 za2 = (u32)along(z + 2, nz, pz) * sz, za1 = (u32)along(z + 1, nz, pz) * sz;
        const bool z_out = z + 1 < nz || pz;
        // Along x: the six cells of the row around the pair.
        const u32 row = ys[2] + zh;
        float cx[6], vx[4], dx[4];
        u32 rx[6];
        window<SINGLE, 6>(c, role, ux, diff, single, row, xs, cx, rx, vx, dx);
        float out[2][3], in[2][3];
        in[0][0] = x_in ? window_face(cx, rx, vx, dx, 0, dt) : out_of_grid(vx[1], cx[2], -1.0f);
        out[0][0] = x_mid ? window_face(cx, rx, vx, dx, 1, dt) : out_of_grid(vx[1], cx[2], 1.0f);
        in[1][0] = out[0][0];
        out[1][0] = x_out ? window_face(cx, rx, vx, dx, 2, dt) : out_of_grid(vx[2], cx[3], 1.0f);
        // Along y and z, each cell of the pair on its own.
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const u32 xi = xs[2 + i] + zh;
            float cy[5], vy[3], dy[3];
            u32 ry[5];
            window<SINGLE, 5>(c, role, uy, diff, single, xi, ys, cy, ry, vy, dy);
            in[i][1] = y_in ? window_face(cy, ry, vy, dy, 0, dt) : out_of_grid(vy[1], cy[2], -1.0f);
            out[i][1] = y_out ? window_face(cy, ry, vy, dy, 1, dt) : out_of_grid(vy[1], cy[2], 1.0f);
            // Up z: the cell two above, and the +z face.
            const u32 top = col[i] + za2, above = col[i] + za1;
            const float c2 = c[top];
            const u32 r2 = role[top];
            const float v1 = uz[above];
            const float d1 = SINGLE ? single : diff[above];
            Column& q = column[i];
            in[i][2] = q.down;
            out[i][2] = z_out ? face_of(q.r[0], q.r[1], q.r[2], r2, q.c[0], q.c[1], q.c[2], c2, q.v, v1, q.d, d1, dt) : out_of_grid(q.v, q.c[1], 1.0f);
            const float own = q.c[1];
            const u32 own_role = q.r[1];
            q.c[0] = q.c[1]; q.c[1] = q.c[2]; q.c[2] = c2;
            q.r[0] = q.r[1]; q.r[1] = q.r[2]; q.r[2] = r2;
            q.v = v1; q.d = d1;
            q.down = out[i][2];
            if (i == 1 && !both) break;
            double net = 0.0;
#pragma unroll
            for (int a = 0; a < 3; a++) {
                net += (double)out[i][a];
                net -= (double)in[i][a];
            }
            next[col[i] + zh] = own_role != OPEN ? own : (float)((double)own - (double)dt * net);
        }
    }
}

extern "C" __global__ void __launch_bounds__(128, ADVECT_BLOCKS) advect(const float* __restrict__ c, float* __restrict__ next, const unsigned char* __restrict__ role, const float* __restrict__ u, const float* __restrict__ diff, u32 diff_single, float dt, int nx, int ny, int nz, u32 periodic) {
    if (diff_single) advect_columns<true>(c, next, role, u, diff, dt, nx, ny, nz, periodic);
    else advect_columns<false>(c, next, role, u, diff, dt, nx, ny, nz, periodic);
}

// transport::diffuse: a diffusion-only sub-step in one pass. Each thread
// takes two neighbouring cells of a row and walks DIFFUSE_LAYERS layers of
// their columns up z, carrying the layers below and at z in registers: the
// pair's values above and beside it in y come in one load each (float2
// where rows are of even length), those beside it in x from L1. Which faces
// of a cell exchange it reads from one byte, transport::open_faces (bit 2a
// towards +a, 2a + 1 towards -a, OPEN_CELL the cell open), instead of seven
// roles and the grid's edges. A face's term is
// transport::Flow::diffusive's, summed in diffuse's order (+x, -x, +y, -y,
// +z, -z), all in f32 as the CPU sums; a closed face adds nothing where the
// CPU adds a zero. The term of the face between the pair's cells is worked
// out once for both, and each +z term goes up as the -z term of the layer
// above. H100, 256^3: 174 us a sub-step with seven roles a cell and one
// cell a thread, 72 us so, 66 us with the shared terms and the even-row
// case compiled apart, all three summing in f64 (its conversions the
// bound); 56 us in f32 at 16 blocks a multiprocessor (BENCHMARKS.md,
// 2026-11-26, sixteenth to eighteenth sessions). Two sub-steps in one pass
// through shared memory took 207 us, more than two.
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

// The term the CPU sums for the face from lo to hi, which both cells of a
// face compute alike.
__device__ __forceinline__ float term(float dlo, float dhi, float clo, float chi) {
    return -((0.5f * (dlo + dhi)) * (chi - clo));
}

// A cell's new value from its six faces' terms (in the order of the face
// bits) and its `open` byte.
__device__ __forceinline__ float summed(float own, u32 open, float px, float mx, float py, float my, float pz, float mz, float dt) {
    if (!(open & OPEN_CELL)) return own;
    float net = 0.0f;
    if (open & 1u) net += px;
    if (open & 2u) net -= mx;
    if (open & 4u) net += py;
    if (open & 8u) net -= my;
    if (open & 16u) net += pz;
    if (open & 32u) net -= mz;
    return own - dt * net;
}

template <bool SINGLE, bool EVEN>
__device__ __forceinline__ void diffuse_columns(const float* __restrict__ c, float* __restrict__ next, const unsigned char* __restrict__ faces, const float* __restrict__ diff, float d, float dt, int nx, int ny, int nz, u32 periodic) {
    const int x0 = 2 * (blockIdx.x * blockDim.x + threadIdx.x);
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    const int z0 = blockIdx.z * DIFFUSE_LAYERS;
    if (x0 >= nx || y >= ny) return;
    // EVEN: rows of even length, where every pair is whole and 8-byte
    // aligned (known when compiled, so that no load branches on it).
    const bool both = EVEN || x0 + 1 < nx;
    const bool vec = EVEN;
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
    // The pair's values and diffusivities at z, carried up the column (each
    // layer is read once a thread); those below only for the first -z terms.
    u32 cell = (u32)x0 + (u32)sy * (u32)y + (u32)sz * (u32)z0;
    const int down_z0 = z0 > 0 ? -sz : ((periodic & 4u) ? (nz - 1) * sz : 0);
    Pair below = load_pair(c + (cell + (u32)down_z0), vec, both);
    Pair here = load_pair(c + cell, vec, both);
    Pair d_below = {d, d}, d_here = d_below;
    if (!SINGLE) {
        d_below = load_pair(diff + (cell + (u32)down_z0), vec, both);
        d_here = load_pair(diff + cell, vec, both);
    }
    float mz_a = term(d_below.a, d_here.a, below.a, here.a), mz_b = term(d_below.b, d_here.b, below.b, here.b);
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
        float d0, d1, dl, dr;
        Pair dpy, dmy, dpz;
        if (SINGLE) {
            d0 = d1 = dl = dr = d;
            dpy = dmy = dpz = {d, d};
        } else {
            d0 = d_here.a; d1 = d_here.b;
            dl = diff[cell + (u32)left]; dr = diff[cell + (u32)right];
            dpy = load_pair(diff + (cell + (u32)up_y), vec, both);
            dmy = load_pair(diff + (cell + (u32)down_y), vec, both);
            dpz = load_pair(diff + (cell + (u32)up_z), vec, both);
        }
        // The face between the pair's cells is one term for both; the +z
        // terms go up as the next layer's -z terms.
        const float mid = term(d0, both ? d1 : dr, own.a, both ? own.b : cr);
        const float pz_a = term(d0, dpz.a, own.a, pz.a), pz_b = term(d1, dpz.b, own.b, pz.b);
        const float out0 = summed(own.a, open0, mid, term(dl, d0, cl, own.a), term(d0, dpy.a, own.a, py.a), term(dmy.a, d0, my.a, own.a), pz_a, mz_a, dt);
        if (!both) {
            next[cell] = out0;
        } else {
            const float out1 = summed(own.b, open1, term(d1, dr, own.b, cr), mid, term(d1, dpy.b, own.b, py.b), term(dmy.b, d1, my.b, own.b), pz_b, mz_b, dt);
            if (vec) *reinterpret_cast<float2*>(next + cell) = make_float2(out0, out1);
            else { next[cell] = out0; next[cell + 1] = out1; }
        }
        mz_a = pz_a;
        mz_b = pz_b;
        // Up one layer: z + 1 < z1 <= nz wherever the loop goes on, so the
        // layer above is the next one, not across the edge.
        here = pz;
        d_here = dpz;
    }
}

// One diffusivity d for all cells.
extern "C" __global__ void __launch_bounds__(128, DIFFUSE_BLOCKS) diffuse(const float* __restrict__ c, float* __restrict__ next, const unsigned char* __restrict__ faces, float d, float dt, int nx, int ny, int nz, u32 periodic) {
    if ((nx & 1) == 0) diffuse_columns<true, true>(c, next, faces, nullptr, d, dt, nx, ny, nz, periodic);
    else diffuse_columns<true, false>(c, next, faces, nullptr, d, dt, nx, ny, nz, periodic);
}

// Each cell's diffusivity in diff (the subgrid model's).
extern "C" __global__ void __launch_bounds__(128, DIFFUSE_EDDY_BLOCKS) diffuse_eddy(const float* __restrict__ c, float* __restrict__ next, const unsigned char* __restrict__ faces, const float* __restrict__ diff, float dt, int nx, int ny, int nz, u32 periodic) {
    if ((nx & 1) == 0) diffuse_columns<false, true>(c, next, faces, diff, 0.0f, dt, nx, ny, nz, periodic);
    else diffuse_columns<false, false>(c, next, faces, diff, 0.0f, dt, nx, ny, nz, periodic);
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

// As a transport step begins with the subgrid model, one pass over its
// velocity: each cell's diffusivity into `diff`; and the largest |ux| +
// |uy| + |uz| over the open cells into out[0] and the largest diffusivity
// into out[1], as float bits (all values are at least +0, where the bits
// order as the floats); out is zeroed first (without the model,
// courant_max). A NaN is skipped, as f32::max skips it on the CPU. Each
// thread takes MAXIMA_LAYERS layers of its column and each block meets the
// two atomics once (one a warp over the whole grid cost 0.75 ms at 256³;
// 32 layers a thread left too few loads in flight). cuda.rs defines
// MAXIMA_LAYERS, and sizes the grid by it.
extern "C" __global__ void __launch_bounds__(128) eddy_maxima(const unsigned char* __restrict__ role, const float* __restrict__ u, int nx, int ny, int nz, u32 periodic, float smagorinsky, float schmidt_turbulent, float molecular, float* __restrict__ diff, u32* __restrict__ out) {
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    const int z0 = (blockIdx.z * blockDim.z + threadIdx.z) * MAXIMA_LAYERS;
    float m = 0.0f, dm = 0.0f;
    // Threads past the grid take part in the warp's reduction with zeros.
    if (x < nx && y < ny) {
        Flow f = make_flow(role, u, nx, ny, nz, periodic);
        for (int z = z0; z < min(z0 + MAXIMA_LAYERS, nz); z++) {
            const u32 cell = (u32)x + f.stride[1] * (u32)y + f.stride[2] * (u32)z;
            const float d = eddy_at(f, cell, x, y, z, smagorinsky, schmidt_turbulent, molecular);
            diff[cell] = d;
            if (d > dm) dm = d;
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

// The maxima without the subgrid model: only the largest |ux| + |uy| + |uz|
// over the open cells into out[0] (zeroed first), four cells a load where
// n is a multiple of four, the grid striding over the cells so that few
// blocks meet the atomic. It reads the velocity at the copy bandwidth,
// where eddy_maxima's columns took 111 us at 256^3 on the H100
// (BENCHMARKS.md, 2026-11-26, seventeenth session). A NaN is skipped, as
// f32::max skips it on the CPU.
__device__ __forceinline__ void courant_at(float& m, u32 r, float x, float y, float z) {
    if (r == OPEN) {
        const float v = fabsf(x) + fabsf(y) + fabsf(z);
        if (v > m) m = v;
    }
}

extern "C" __global__ void __launch_bounds__(256) courant_max(const unsigned char* __restrict__ role, const float* __restrict__ u, u32 n, u32* __restrict__ out) {
    const float* ux = u;
    const float* uy = u + n;
    const float* uz = u + 2 * (size_t)n;
    const u32 stride = gridDim.x * blockDim.x;
    const u32 first = blockIdx.x * blockDim.x + threadIdx.x;
    // The planes start 16-byte aligned where n is a multiple of four.
    const u32 quads = (n & 3u) == 0u ? n / 4u : 0u;
    float m = 0.0f;
    for (u32 q = first; q < quads; q += stride) {
        const uchar4 r = reinterpret_cast<const uchar4*>(role)[q];
        const float4 x = reinterpret_cast<const float4*>(ux)[q];
        const float4 y = reinterpret_cast<const float4*>(uy)[q];
        const float4 z = reinterpret_cast<const float4*>(uz)[q];
        courant_at(m, r.x, x.x, y.x, z.x);
        courant_at(m, r.y, x.y, y.y, z.y);
        courant_at(m, r.z, x.z, y.z, z.z);
        courant_at(m, r.w, x.w, y.w, z.w);
    }
    for (u32 k = 4u * quads + first; k < n; k += stride) courant_at(m, role[k], ux[k], uy[k], uz[k]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_down_sync(0xffffffffu, m, o));
    __shared__ float warp_m[8];
    if ((threadIdx.x & 31u) == 0u) warp_m[threadIdx.x >> 5] = m;
    __syncthreads();
    if (threadIdx.x == 0u) {
        for (u32 w = 1; w < (blockDim.x + 31u) >> 5; w++) m = fmaxf(m, warp_m[w]);
        atomicMax(out, __float_as_uint(m));
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
