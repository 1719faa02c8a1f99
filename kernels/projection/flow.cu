// The projection method's flow on the GPU: the explicit terms, the
// Adams–Bashforth update, the outlets, the pressure equation's right-hand
// side and the correction (src/solver/projection/flow.rs is the reference).
// Compiled without FMA contraction and in the CPU's order of operations, so
// that each kernel gives the CPU's values bit for bit from the same input.
//
// Face storage: component a of cell c (u[a * n + c]) is the face on c's low
// side along a. `open` holds bit a where that face moves (and PLAIN, below);
// `kinds` is 0 fluid, 1 wall, 2 free slip, 3 outlet; `wall` holds the walls'
// velocities as three planes.

#define FLUID 0
#define WALL 1
#define SLIP 2
#define OUTFLOW 3

// Bit of `open` set at the cells where `plain_cell` holds (worked out on the
// host once: the kinds do not change).
#define PLAIN 8

struct Grid {
    int n[3];
    unsigned periodic;
};

__device__ __forceinline__ size_t cell_index(const Grid& g, const int p[3]) {
    return (size_t)p[0] + (size_t)g.n[0] * ((size_t)p[1] + (size_t)g.n[1] * (size_t)p[2]);
}

// q moved by d (-1 or +1) along axis: wrapped on a periodic axis, false
// beyond a wall (q unchanged then).
__device__ __forceinline__ bool step_to(const Grid& g, int q[3], int axis, int d) {
    int v = q[axis] + d;
    if (v < 0 || v >= g.n[axis]) {
        if (!((g.periodic >> axis) & 1u)) return false;
        v = v < 0 ? v + g.n[axis] : v - g.n[axis];
    }
    q[axis] = v;
    return true;
}

__device__ __forceinline__ bool flows(unsigned char k) { return k == FLUID || k == OUTFLOW; }

__device__ __forceinline__ bool own_cell(const Grid& g, int p[3], size_t* c) {
    p[0] = blockIdx.x * blockDim.x + threadIdx.x;
    p[1] = blockIdx.y * blockDim.y + threadIdx.y;
    p[2] = blockIdx.z * blockDim.z + threadIdx.z;
    if (p[0] >= g.n[0] || p[1] >= g.n[1] || p[2] >= g.n[2]) return false;
    *c = cell_index(g, p);
    return true;
}

// Flow::across: component a at the face d cells from face p along b (b != a).
__device__ float across(const Grid& g, size_t n, const float* u, const unsigned char* kinds,
                        const float* wall, int a, const int p[3], int b, int d, float own) {
    int q[3] = {p[0], p[1], p[2]};
    if (!step_to(g, q, b, d)) return -own;
    size_t qi = cell_index(g, q);
    int l[3] = {q[0], q[1], q[2]};
    bool has_low = step_to(g, l, a, -1);
    size_t li = has_low ? cell_index(g, l) : 0;
    if (flows(kinds[qi]) || (has_low && flows(kinds[li]))) return u[a * n + qi];
    if (kinds[qi] == SLIP || (has_low && kinds[li] == SLIP)) return own;
    float sum = 0.0f, count = 0.0f;
    sum += wall[a * n + qi];
    count += 1.0f;
    if (has_low) {
        sum += wall[a * n + li];
        count += 1.0f;
    }
    return 2.0f * sum / count - own;
}

// Flow::along: component a at the face d faces from face p along a.
__device__ __forceinline__ float along(const Grid& g, size_t n, const float* u,
                                       const unsigned char* kinds, int a, const int p[3], int d) {
    int q[3] = {p[0], p[1], p[2]};
    if (step_to(g, q, a, d)) return u[a * n + cell_index(g, q)];
    size_t c = cell_index(g, p);
    return kinds[c] == OUTFLOW ? u[a * n + c] : 0.0f;
}

// Flow::transverse: component b averaged over the four faces around (a, p).
__device__ float transverse(const Grid& g, size_t n, const float* u, int a, const int p[3], int b) {
    float sum = 0.0f;
    int cells[2][3] = {{p[0], p[1], p[2]}, {p[0], p[1], p[2]}};
    bool has[2] = {true, step_to(g, cells[1], a, -1)};
    for (int k = 0; k < 2; k++) {
        if (!has[k]) continue;
        sum += u[b * n + cell_index(g, cells[k])];
        int r[3] = {cells[k][0], cells[k][1], cells[k][2]};
        sum += step_to(g, r, b, 1) ? u[b * n + cell_index(g, r)] : 0.0f;
    }
    return 0.25f * sum;
}

// Adds face (a, p)'s advection along one axis (values lo, own, hi along it,
// carried at `velocity`) to *advection.
__device__ __forceinline__ void advect(float own, float lo, float hi, float velocity, float upwind,
                                       float* advection) {
    float central = 0.5f * (hi - lo);
    if (upwind == 0.0f) {
        *advection += velocity * central;
    } else {
        float up = velocity > 0.0f ? own - lo : hi - own;
        *advection += velocity * (central + upwind * (up - central));
    }
}

// Whether cell c at p lies inside the grid's outer layer with fluid or
// outlets on all six sides: then every stencil of its faces reads plain face
// values, with no ghost, wrap or wall among them.
__device__ __forceinline__ bool plain_cell(const Grid& g, const unsigned char* kinds, const int p[3],
                                           size_t c, const size_t stride[3]) {
    for (int k = 0; k < 3; k++) {
        if (p[k] < 1 || p[k] > g.n[k] - 2) return false;
        if (!flows(kinds[c - stride[k]]) || !flows(kinds[c + stride[k]])) return false;
    }
    return true;
}

// explicit_term at a plain cell: the same arithmetic in the same order,
// from direct reads (face_viscosity's too, with the subgrid model).
__device__ __forceinline__ float plain_term(size_t n, const float* u, size_t cell,
                                            const size_t strides[3], int a, float nu, float force,
                                            float upwind, const float* eddy_field, int eddy_on) {
    // From pointers at the cell with signed 32-bit steps: one instruction
    // an address where 64-bit index arithmetic took three.
    const float* ua = u + a * n + cell;
    const float* eddy = eddy_field + cell;
    const int stride[3] = {1, (int)strides[1], (int)strides[2]};
    const int c = 0;
    float own = ua[c];
    float advection = 0.0f, diffusion = 0.0f;
#pragma unroll
    for (int b = 0; b < 3; b++) {
        float lo = ua[c - stride[b]], hi = ua[c + stride[b]];
        float velocity = own;
        if (b != a) {
            // transverse(): the four faces around (a, p), in its order.
            const float* ub = u + b * n + cell;
            float sum = 0.0f;
            sum += ub[c];
            sum += ub[c + stride[b]];
            sum += ub[c - stride[a]];
            sum += ub[c - stride[a] + stride[b]];
            velocity = 0.25f * sum;
        }
        advect(own, lo, hi, velocity, upwind, &advection);
        if (!eddy_on) {
            diffusion += hi - 2.0f * own + lo;
            continue;
        }
        float nu_hi, nu_lo;
        if (b == a) {
            nu_hi = nu + eddy[c];
            nu_lo = nu + eddy[c - stride[a]];
        } else {
            int q = c + stride[b], r = c - stride[b];
            float around = eddy[c];
            around = around + eddy[c - stride[a]];
            around = around + eddy[q];
            around = around + eddy[q - stride[a]];
            nu_hi = nu + 0.25f * around;
            around = eddy[c];
            around = around + eddy[c - stride[a]];
            around = around + eddy[r];
            around = around + eddy[r - stride[a]];
            nu_lo = nu + 0.25f * around;
        }
        diffusion += nu_hi * (hi - own) - nu_lo * (own - lo);
    }
    return eddy_on ? -advection + diffusion + force : -advection + nu * diffusion + force;
}

// Flow::face_viscosity: ν plus the eddy viscosity between face (a, p) and
// the face d from it along b.
__device__ float face_viscosity(const Grid& g, const float* eddy, float nu, int a, const int p[3],
                                int b, int d) {
    int l[3] = {p[0], p[1], p[2]};
    bool has_low = step_to(g, l, a, -1);
    if (b == a) {
        if (d > 0) return nu + eddy[cell_index(g, p)];
        return nu + (has_low ? eddy[cell_index(g, l)] : 0.0f);
    }
    int q[3] = {p[0], p[1], p[2]};
    bool has_q = step_to(g, q, b, d);
    int ql[3] = {q[0], q[1], q[2]};
    bool has_ql = has_q && step_to(g, ql, a, -1);
    float around = eddy[cell_index(g, p)];
    around = around + (has_low ? eddy[cell_index(g, l)] : 0.0f);
    around = around + (has_q ? eddy[cell_index(g, q)] : 0.0f);
    around = around + (has_ql ? eddy[cell_index(g, ql)] : 0.0f);
    return nu + 0.25f * around;
}

// Flow::eddy_viscosity: the Smagorinsky eddy viscosity c2 |S| of every cell
// that flows (zero elsewhere), c2 = C_s².
extern "C" __global__ void eddy_viscosity(const float* __restrict__ u,
                                          const unsigned char* __restrict__ kinds,
                                          const float* __restrict__ wall, int nx, int ny, int nz,
                                          unsigned periodic, float c2, float* __restrict__ eddy) {
    Grid g = {{nx, ny, nz}, periodic};
    int p[3];
    size_t c;
    if (!own_cell(g, p, &c)) return;
    size_t n = (size_t)nx * ny * nz;
    if (!flows(kinds[c])) {
        eddy[c] = 0.0f;
        return;
    }
    float grad[3][3];
    size_t stride[3] = {1, (size_t)nx, (size_t)nx * ny};
    bool plain = plain_cell(g, kinds, p, c, stride);
    for (int a = 0; a < 3; a++) {
        for (int k = 0; k < 3; k++) {
            if (plain) {
                // The same values from direct reads: no wall, wrap or
                // outlet's end among them.
                const float* uk = u + k * n;
                if (k == a) {
                    grad[k][a] = uk[c + stride[a]] - uk[c];
                } else {
                    size_t hi = c + stride[a], lo = c - stride[a];
                    float up = 0.5f * (uk[hi] + uk[hi + stride[k]]);
                    float down = 0.5f * (uk[lo] + uk[lo + stride[k]]);
                    grad[k][a] = 0.5f * (up - down);
                }
                continue;
            }
            if (k == a) {
                grad[k][a] = along(g, n, u, kinds, a, p, 1) - u[a * n + c];
                continue;
            }
            float own = 0.5f * (u[k * n + c] + along(g, n, u, kinds, k, p, 1));
            float side[2];
            for (int s = 0; s < 2; s++) {
                int q[3] = {p[0], p[1], p[2]};
                if (!step_to(g, q, a, s == 0 ? 1 : -1)) {
                    side[s] = kinds[c] == OUTFLOW ? own : -own;
                    continue;
                }
                size_t qi = cell_index(g, q);
                if (flows(kinds[qi])) {
                    side[s] = 0.5f * (u[k * n + qi] + along(g, n, u, kinds, k, q, 1));
                } else if (kinds[qi] == SLIP) {
                    side[s] = own;
                } else {
                    side[s] = 2.0f * wall[k * n + qi] - own;
                }
            }
            grad[k][a] = 0.5f * (side[0] - side[1]);
        }
    }
    float ss = 0.0f;
    for (int k = 0; k < 3; k++) {
        for (int a = 0; a < 3; a++) {
            float s = 0.5f * (grad[k][a] + grad[a][k]);
            ss += s * s;
        }
    }
    eddy[c] = c2 * sqrtf(2.0f * ss);
}

// The explicit terms of the open face (a, p).
__device__ __forceinline__ float explicit_term(const Grid& g, size_t n, const float* u,
                                              const unsigned char* kinds, const float* wall,
                                              const int p[3], int a, float nu, float force,
                                              float upwind, const float* eddy, int eddy_on) {
    size_t c = cell_index(g, p);
    float own = u[a * n + c];
    float advection = 0.0f, diffusion = 0.0f;
    for (int b = 0; b < 3; b++) {
        float lo, hi, velocity;
        if (b == a) {
            lo = along(g, n, u, kinds, a, p, -1);
            hi = along(g, n, u, kinds, a, p, 1);
            velocity = own;
        } else {
            lo = across(g, n, u, kinds, wall, a, p, b, -1, own);
            hi = across(g, n, u, kinds, wall, a, p, b, 1, own);
            velocity = transverse(g, n, u, a, p, b);
        }
        advect(own, lo, hi, velocity, upwind, &advection);
        if (!eddy_on) {
            diffusion += hi - 2.0f * own + lo;
        } else {
            float nu_hi = face_viscosity(g, eddy, nu, a, p, b, 1);
            float nu_lo = face_viscosity(g, eddy, nu, a, p, b, -1);
            diffusion += nu_hi * (hi - own) - nu_lo * (own - lo);
        }
    }
    return eddy_on ? -advection + diffusion + force : -advection + nu * diffusion + force;
}

// Flow::explicit: −(u·∇)u_a + ∇·(ν∇u_a) + f_a at every open face of each
// component a, into plane a of `out`; ν the molecular viscosity `nu`, plus
// `eddy`'s where `eddy_on`. The three components in one thread: their
// stencils share most of what they read. This kernel takes the plain cells
// (bit PLAIN of `open`, see `plain_cell`), `explicit_terms_listed` the
// others: a warp holding one of them ran the general path for it while the
// other 31 waited (a row's first and last warps: a quarter of all at 256³).
// Held to 64 registers (eight blocks of 128 a multiprocessor), as measured
// in BENCHMARKS.md.
extern "C" __global__ void __launch_bounds__(128, 8) explicit_terms(const float* __restrict__ u,
                                          const unsigned char* __restrict__ open, int nx, int ny,
                                          int nz, float nu, float fx, float fy, float fz,
                                          float upwind, const float* __restrict__ eddy,
                                          int eddy_on, float* __restrict__ out) {
    Grid g = {{nx, ny, nz}, 0};
    int p[3];
    size_t c;
    if (!own_cell(g, p, &c)) return;
    unsigned char faces = open[c];
    if (!(faces & PLAIN)) {
        // Closed faces need no stencil: the list leaves these cells out.
        if (!(faces & 7u)) {
            size_t n = (size_t)nx * ny * nz;
            for (int a = 0; a < 3; a++) out[a * n + c] = 0.0f;
        }
        return;
    }
    size_t n = (size_t)nx * ny * nz;
    size_t stride[3] = {1, (size_t)nx, (size_t)nx * ny};
    // Unrolled, so that every stride is a register.
#pragma unroll
    for (int a = 0; a < 3; a++) {
        float force = a == 0 ? fx : (a == 1 ? fy : fz);
        out[a * n + c] = (faces >> a) & 1u
                             ? plain_term(n, u, c, stride, a, nu, force, upwind, eddy, eddy_on)
                             : 0.0f;
    }
}

// explicit_terms at the `count` cells of `cells`: those that are not plain
// and have an open face.
extern "C" __global__ void explicit_terms_listed(const float* __restrict__ u,
                                                 const unsigned char* __restrict__ kinds,
                                                 const unsigned char* __restrict__ open,
                                                 const float* __restrict__ wall, int nx, int ny,
                                                 int nz, unsigned periodic, float nu, float fx,
                                                 float fy, float fz, float upwind,
                                                 const float* __restrict__ eddy, int eddy_on,
                                                 const unsigned* __restrict__ cells,
                                                 unsigned count, float* __restrict__ out) {
    unsigned k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= count) return;
    Grid g = {{nx, ny, nz}, periodic};
    unsigned c = cells[k], row = c / (unsigned)nx;
    int p[3] = {(int)(c - row * (unsigned)nx), (int)(row % (unsigned)ny), (int)(row / (unsigned)ny)};
    size_t n = (size_t)nx * ny * nz;
    unsigned char faces = open[c];
    for (int a = 0; a < 3; a++) {
        float force = a == 0 ? fx : (a == 1 ? fy : fz);
        out[a * n + c] = (faces >> a) & 1u ? explicit_term(g, n, u, kinds, wall, p, a, nu, force,
                                                           upwind, eddy, eddy_on)
                                           : 0.0f;
    }
}

// Flow::fields' velocities: per cell the mean of each component's two
// faces where it flows, its wall's velocity elsewhere, as three planes.
extern "C" __global__ void cell_velocity(const float* __restrict__ u,
                                         const unsigned char* __restrict__ kinds,
                                         const float* __restrict__ wall, int nx, int ny, int nz,
                                         unsigned periodic, float* __restrict__ planes) {
    Grid g = {{nx, ny, nz}, periodic};
    int p[3];
    size_t c;
    if (!own_cell(g, p, &c)) return;
    size_t n = (size_t)nx * ny * nz;
    for (int a = 0; a < 3; a++) {
        planes[a * n + c] = flows(kinds[c]) ? 0.5f * (u[a * n + c] + along(g, n, u, kinds, a, p, 1))
                                            : wall[a * n + c];
    }
}

// Adams–Bashforth over the three planes (Euler without a last step).
extern "C" __global__ void adams_bashforth(float* __restrict__ u, const float* __restrict__ now,
                                           const float* __restrict__ previous, size_t count,
                                           float dt, int has_previous) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= count) return;
    u[i] += has_previous ? dt * (1.5f * now[i] - 0.5f * previous[i]) : dt * now[i];
}

#define CONVECTIVE 8u

// Flow::carry_outflow: each outlet cell (c, m, code) takes the velocities of
// the fluid cell m next to it, but for the normal face between them; a
// convective one (code bit CONVECTIVE) convects them by dt instead (mode 1)
// or keeps them (mode 2).
extern "C" __global__ void carry_outflow(float* __restrict__ u, const unsigned* __restrict__ list,
                                         unsigned count, size_t n, float dt, int mode) {
    unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= count) return;
    size_t c = list[3 * i], m = list[3 * i + 1];
    unsigned code = list[3 * i + 2];
    unsigned axis = code % CONVECTIVE % 3;
    bool high = code % CONVECTIVE >= 3;
    bool convective = code >= CONVECTIVE && mode != 0;
    if (convective && mode == 2) return;
    float out = high ? -u[axis * n + m] : u[axis * n + c];
    float speed = out > 0.0f ? out : 0.0f;
    float step = mode == 1 ? dt : 0.0f;
    for (unsigned b = 0; b < 3; b++) {
        if (b != axis || high) {
            float here = u[b * n + c], there = u[b * n + m];
            u[b * n + c] = convective ? here - step * speed * (here - there) : there;
        }
    }
}

// The pressure equation's right-hand side −∇·u / dt in fluid cells.
extern "C" __global__ void divergence_rhs(const float* __restrict__ u,
                                          const unsigned char* __restrict__ kinds, int nx, int ny,
                                          int nz, unsigned periodic, float dt,
                                          float* __restrict__ rhs) {
    Grid g = {{nx, ny, nz}, periodic};
    int p[3];
    size_t c;
    if (!own_cell(g, p, &c)) return;
    size_t n = (size_t)nx * ny * nz;
    if (kinds[c] != FLUID) {
        rhs[c] = 0.0f;
        return;
    }
    // As Rust's f32 sum, from −0.
    float div = -0.0f;
    for (int a = 0; a < 3; a++) div += along(g, n, u, kinds, a, p, 1) - u[a * n + c];
    rhs[c] = -div / dt;
}

// u −= dt ∇p on the open faces.
extern "C" __global__ void correct(float* __restrict__ u, const float* __restrict__ pressure,
                                   const unsigned char* __restrict__ open, int nx, int ny, int nz,
                                   unsigned periodic, float dt) {
    Grid g = {{nx, ny, nz}, periodic};
    int p[3];
    size_t c;
    if (!own_cell(g, p, &c)) return;
    size_t n = (size_t)nx * ny * nz;
    unsigned bits = open[c];
    for (int a = 0; a < 3; a++) {
        if (!((bits >> a) & 1u)) continue;
        int q[3] = {p[0], p[1], p[2]};
        step_to(g, q, a, -1);
        u[a * n + c] -= dt * (pressure[c] - pressure[cell_index(g, q)]);
    }
}

// The largest |u| of the three planes (NaN as infinity), as float bits.
extern "C" __global__ void fastest(const float* __restrict__ u, size_t count,
                                   unsigned* __restrict__ out) {
    float best = 0.0f;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x) {
        float v = u[i];
        float s = isnan(v) ? __int_as_float(0x7f800000) : fabsf(v);
        best = fmaxf(best, s);
    }
    for (int o = 16; o > 0; o >>= 1) best = fmaxf(best, __shfl_down_sync(0xffffffffu, best, o));
    if ((threadIdx.x & 31) == 0) atomicMax(out, __float_as_uint(best));
}
