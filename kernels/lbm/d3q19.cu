// D3Q19 lattice Boltzmann kernels: AA-pattern in-place streaming, BGK/TRT with
// Guo forcing, all boundary rules. Compiled at run time by NVRTC (see
// src/solver/cuda.rs); every formula mirrors src/solver/lattice.rs and
// src/solver/cpu.rs operation for operation, so FP32 results match the CPU
// reference solver to rounding (compiled without FMA contraction they match bit
// for bit; the 16-bit kernels allow it). Keep the three in sync.
//
// Storage: one population array, structure of arrays: f[i * n + cell],
// cell = x + nx * (y + ny * z). Values are shifted (f_i - w_i). With
// STORAGE_FP16 they are kept in a 16-bit float format of 11 mantissa bits (see
// fp16c_encode), arithmetic stays FP32.
//
// Launch shapes: fields and init_uniform take a grid of (ceil(nx / blockDim.x),
// ny, nz) blocks, aa_odd the same over the layers z0.. it updates; aa_even one
// thread per cell of its range in 1D; aa_boundary one thread per listed cell.
// aa_even2 and aa_odd2 (blocks of 128) take two cells per thread where the grid
// allows (nx * ny even, resp. nx even), and half the threads; aa_odd2_rows
// the same pairs as a grid of (ceil(nx * ny / 256), 1, layers) blocks of 128;
// with FP32 storage aa_odd4 takes four (nx a multiple of 4), a quarter of the
// threads, in blocks of a multiple of 32 threads, up to 256, holding one row
// or more.
//
// Layer ranges exist for the multi-GPU solver (src/solver/slabs.rs): a slab's
// lattice holds halo layers it never updates, and it updates the layers next
// to its halos first so that the exchange overlaps the rest.

typedef unsigned int u32;
typedef unsigned long long u64;

#define Q 19

// Flag layout (src/solver/flags.rs).
#define TYPE_MASK 7u
#define T_FLUID 0u
#define T_WALL 1u
#define T_MOVING 2u
#define T_INLET 3u
#define T_OUTLET 4u
#define T_FREESLIP 5u
#define NEAR 128u
#define TAG(fl) (((fl) >> 3) & 15u)

// The n flag bytes are followed, from the next multiple of 4 bytes, by one bit
// per cell in 32-bit words, set where the cell is bulk fluid (flag 0;
// flags::with_bulk_bits). The bulk step kernels read their cells' bits, an
// eighth of a byte per cell, instead of a flag byte each: that byte was 0.65%
// of a step's traffic. `count` (2 or 4) bits from cell c, a multiple of count.
__device__ __forceinline__ u32 bulk_bits(const unsigned char* __restrict__ flags, u64 n, u64 c, u32 count) {
    const u32* words = (const u32*)(flags + ((n + 3) & ~3ull));
    return (words[c >> 5] >> (u32)(c & 31u)) & ((1u << count) - 1u);
}
// The even step's bits, after the bulk bits: also set at the NEAR fluid
// cells whose even update is the bulk one (flags::even_step_differs: next to
// walls, inlets or free-slip faces, the even step reads and writes only the
// cell's own slots, as the bulk does; the boundary rules act in the odd
// step). Only the rest of the NEAR cells are then listed for the even step.
__device__ __forceinline__ u32 even_bits(const unsigned char* __restrict__ flags, u64 n, u64 c, u32 count) {
    const u32* words = (const u32*)(flags + ((n + 3) & ~3ull)) + ((n + 31) >> 5);
    return (words[c >> 5] >> (u32)(c & 31u)) & ((1u << count) - 1u);
}

// Keep in sync with `CudaParams` in src/solver/cuda.rs.
struct Params {
    u32 nx, ny, nz, periodic;   // periodic: bit a set when axis a wraps
    float omega_plus, omega_minus;
    float fx, fy, fz;
    u32 has_force;
    // The collision of kernels compiled with COLLISION_MODEL (collide_model):
    // τ0, 18√2 C_s² of the Smagorinsky model (0: none), MODEL_* bits.
    float tau0, smagorinsky;
    u32 model;
    float vel[16][3];
    // Inlet profiles per velocity slot (solver/mod.rs: Profiles): 0 uniform,
    // 1 | axes << 4 parabolic, 2 log law with roughness[slot]; the walls
    // bounding the fluid per axis.
    u32 profile[16];
    float roughness[16];
    float wall_lo[3], wall_hi[3];
    // Interpolated walls (src/solver/lbm/links.rs): the NEAR cells, ascending,
    // and 18 q per listed cell (0: no interpolated wall), as device addresses
    // in 32-bit halves: a pointer member would align the struct to 8 bytes,
    // and the compiler then loads it in pairs and schedules the 16-bit bulk
    // kernels differently, 18% slower.
    u32 near_count;
    u32 near_lo, near_hi, link_lo, link_hi;
    // Where kernels compiled with WRITE_VELOCITY, and velocity_rest, leave
    // the velocity (three planes of n floats), in 32-bit halves as above;
    // bit 0 set (the address is aligned): the density too, in a fourth.
    u32 velocity_lo, velocity_hi;
};

__device__ __forceinline__ const u32* near_list(const Params& p) {
    return (const u32*)(((u64)p.near_hi << 32) | p.near_lo);
}
__device__ __forceinline__ const float* link_list(const Params& p) {
    return (const float*)(((u64)p.link_hi << 32) | p.link_lo);
}
__device__ __forceinline__ float* velocity_planes(const Params& p) {
    return (float*)((((u64)p.velocity_hi << 32) | p.velocity_lo) & ~1ull);
}
__device__ __forceinline__ bool leaves_density(const Params& p) {
    return (p.velocity_lo & 1u) != 0u;
}

__constant__ int EX[Q] = {0, 1, -1, 0, 0, 0, 0, 1, -1, 1, -1, 0, 0, 1, -1, 1, -1, 0, 0};
__constant__ int EY[Q] = {0, 0, 0, 1, -1, 0, 0, 1, -1, 0, 0, 1, -1, -1, 1, 0, 0, 1, -1};
__constant__ int EZ[Q] = {0, 0, 0, 0, 0, 1, -1, 0, 0, 1, -1, 1, -1, 0, 0, -1, 1, -1, 1};

#define W0 (1.0f / 3.0f)
#define WS (1.0f / 18.0f)
#define WE (1.0f / 36.0f)
__device__ __forceinline__ float weight(int i) { return i == 0 ? W0 : (i < 7 ? WS : WE); }
__device__ __forceinline__ int opposite(int i) { return i == 0 ? 0 : ((i & 1) ? i + 1 : i - 1); }

// Compile-time direction tables for unrolled loops (the __constant__ ones serve
// run-time indices in the boundary code).
#define CEX(i) ((i) == 1 || (i) == 7 || (i) == 9 || (i) == 13 || (i) == 15 ? 1 : ((i) == 2 || (i) == 8 || (i) == 10 || (i) == 14 || (i) == 16 ? -1 : 0))
#define CEY(i) ((i) == 3 || (i) == 7 || (i) == 11 || (i) == 14 || (i) == 17 ? 1 : ((i) == 4 || (i) == 8 || (i) == 12 || (i) == 13 || (i) == 18 ? -1 : 0))
#define CEZ(i) ((i) == 5 || (i) == 9 || (i) == 11 || (i) == 16 || (i) == 18 ? 1 : ((i) == 6 || (i) == 10 || (i) == 12 || (i) == 15 || (i) == 17 ? -1 : 0))

#ifdef STORAGE_FP16
// 16-bit storage: sign, 4 exponent bits (bias 15), 11 mantissa bits, covering
// |v| < 2 with subnormals down to 2^-25 (FluidX3D's "FP16C" idea). Shifted
// populations never need IEEE half's wider exponent range, so one exponent bit
// becomes a mantissa bit: half the rounding error of IEEE half. Values beyond
// the range saturate (the stability check then sees the speed). Mirrors
// solver::cuda::{fp16c_encode, fp16c_decode}.
typedef unsigned short store_t;
//
// Both directions are a float multiply by 2^±112 plus bit moves: the format's
// bits are the top 16 of an f32 whose exponent is 112 lower, and f32 denormals
// (no flush to zero) carry the format's subnormals. Rounding to 11 mantissa bits
// is to nearest, ties away from zero (one instruction fewer than ties to even,
// and ties are rare); values in the subnormal range are rounded twice (to the
// f32 denormal, then to 11 bits), off by at most 2^-38 from one rounding.
__device__ __forceinline__ float fp16c_decode(u32 h) {
    return __uint_as_float(((h & 0x8000u) << 16) | ((h & 0x7fffu) << 12)) * 0x1p112f;
}
__device__ __forceinline__ unsigned short fp16c_encode(float v) {
    u32 a = __float_as_uint(fabsf(v) * 0x1p-112f);
    u32 r = min(a + 0x800u, 0x7fff000u) >> 12;
    return (unsigned short)(((__float_as_uint(v) >> 16) & 0x8000u) | r);
}
// The codec without its multiplies: values in units of 2^-112.
__device__ __forceinline__ float fp16c_raw_decode(u32 h) {
    return __uint_as_float(((h & 0x8000u) << 16) | ((h & 0x7fffu) << 12));
}
__device__ __forceinline__ unsigned short fp16c_raw_encode(float v) {
    u32 b = __float_as_uint(v);
    u32 r = min((b & 0x7fffffffu) + 0x800u, 0x7fff000u) >> 12;
    return (unsigned short)(((b >> 16) & 0x8000u) | r);
}
__device__ __forceinline__ float ld(const store_t* f, u64 k) { return fp16c_decode(f[k]); }
__device__ __forceinline__ void st(store_t* f, u64 k, float v) { f[k] = fp16c_encode(v); }
__device__ __forceinline__ void st(store_t* f, u32 k, float v) { f[k] = fp16c_encode(v); }
#else
typedef float store_t;
__device__ __forceinline__ float ld(const store_t* f, u64 k) { return f[k]; }
__device__ __forceinline__ void st(store_t* f, u64 k, float v) { f[k] = v; }
__device__ __forceinline__ void st(store_t* f, u32 k, float v) { f[k] = v; }
#endif

__device__ __forceinline__ bool runs(u32 fl) {
    u32 t = fl & TYPE_MASK;
    return t == T_FLUID || t == T_OUTLET;
}

// --- collision (mirrors lattice.rs) -------------------------------------------

__device__ __forceinline__ void moments(const float* f, float* rho, float* jx, float* jy, float* jz) {
    float drho = f[0];
    float x = 0.0f, y = 0.0f, z = 0.0f;
#pragma unroll
    for (int p = 0; p < 9; p++) {
        float a = f[2 * p + 1];
        float b = f[2 * p + 2];
        drho += a + b;
        float d = a - b;
        x += (float)CEX(2 * p + 1) * d;
        y += (float)CEY(2 * p + 1) * d;
        z += (float)CEZ(2 * p + 1) * d;
    }
    *rho = 1.0f + drho;
    *jx = x; *jy = y; *jz = z;
}

// Density and velocity a fluid cell reports from its incoming populations
// (cpu.rs: cell_fields). One function for every kernel that reports them, so
// that each contracts (or not) the same operations: `fields` and the
// velocity the step kernels leave for the contaminant agree bit for bit.
__device__ __forceinline__ void fluid_velocity(const float* v, const Params& p, float* rho, float* u) {
    float jx, jy, jz;
    moments(v, rho, &jx, &jy, &jz);
    float inv = 1.0f / *rho;
    u[0] = (jx + 0.5f * p.fx) * inv;
    u[1] = (jy + 0.5f * p.fy) * inv;
    u[2] = (jz + 0.5f * p.fz) * inv;
}

__device__ __forceinline__ float edot(int i, float ux, float uy, float uz) {
    return (float)CEX(i) * ux + (float)CEY(i) * uy + (float)CEZ(i) * uz;
}

__device__ __forceinline__ void equilibrium(float rho, float ux, float uy, float uz, float* feq) {
    float drho = rho - 1.0f;
    float usq = 1.5f * (ux * ux + uy * uy + uz * uz);
#pragma unroll
    for (int i = 0; i < Q; i++) {
        float eu = edot(i, ux, uy, uz);
        feq[i] = weight(i) * drho + weight(i) * rho * (3.0f * eu + 4.5f * eu * eu - usq);
    }
}

// The equilibrium is formed pair by pair: e_b = -e_a gives e_b.u = -(e_a.u)
// exactly, so this is bit for bit the same arithmetic as lattice.rs while only
// two equilibrium values are live at a time.
// Adds c * v for a compile-time direction component c in {-1, 0, 1}.
#define ACC(acc, c, v) do { if ((c) > 0) (acc) += (v); else if ((c) < 0) (acc) -= (v); } while (0)

#ifdef COLLISION_MODEL
#define MODEL_TRT 1u
#define MODEL_REGULARIZED 2u

// lattice::collide_model (the relaxation time from the Smagorinsky model,
// the regularized collision) is done by collide_fast in both storages: with
// FMA contraction and the fast reciprocal it agrees with the CPU reference
// to float rounding, at nearly the plain kernels' speed.
template <bool RAW>
__device__ __forceinline__ void collide_fast(float* f, const Params& p);
#endif

__device__ __forceinline__ void collide(float* f, const Params& p) {
#ifdef COLLISION_MODEL
    collide_fast<false>(f, p);
    return;
#endif
    float rho, jx, jy, jz;
    moments(f, &rho, &jx, &jy, &jz);
    float inv = 1.0f / rho;
    float ux = (jx + 0.5f * p.fx) * inv;
    float uy = (jy + 0.5f * p.fy) * inv;
    float uz = (jz + 0.5f * p.fz) * inv;
    float drho = rho - 1.0f;
    float usq = 1.5f * (ux * ux + uy * uy + uz * uz);
    bool has_force = p.has_force != 0u;
    float fu = p.fx * ux + p.fy * uy + p.fz * uz;
    float kp = 1.0f - 0.5f * p.omega_plus;
    float km = 1.0f - 0.5f * p.omega_minus;
    float eu0 = edot(0, ux, uy, uz);
    float feq0 = W0 * drho + W0 * rho * (3.0f * eu0 + 4.5f * eu0 * eu0 - usq);
    f[0] += p.omega_plus * (feq0 - f[0]);
    if (has_force) f[0] += kp * W0 * (-3.0f * fu);
#pragma unroll
    for (int q = 0; q < 9; q++) {
        int a = 2 * q + 1;
        int b = a + 1;
        float w = weight(a);
        float eua = edot(a, ux, uy, uz);
        float eub = edot(b, ux, uy, uz);
        float feqa = w * drho + w * rho * (3.0f * eua + 4.5f * eua * eua - usq);
        float feqb = w * drho + w * rho * (3.0f * eub + 4.5f * eub * eub - usq);
        float fp = 0.5f * (f[a] + f[b]);
        float fm = 0.5f * (f[a] - f[b]);
        float ep = 0.5f * (feqa + feqb);
        float em = 0.5f * (feqa - feqb);
        float dp = p.omega_plus * (ep - fp);
        float dm = p.omega_minus * (em - fm);
        if (has_force) {
            float ef = edot(a, p.fx, p.fy, p.fz);
            dp += kp * w * (9.0f * eua * ef - 3.0f * fu);
            dm += km * w * 3.0f * ef;
        }
        f[a] += dp + dm;
        f[b] += dp - dm;
    }
}


// The same TRT collision with Guo forcing, rearranged for fewer instructions:
// the sums and differences of opposite pairs serve both the moments and the
// symmetric and antisymmetric parts, the equilibrium's parts are formed
// directly, zero direction components cost nothing, and 1/rho is the fast
// reciprocal. The results differ from `collide` by FP32 reassociation, far below
// the 16-bit storage's rounding (2^-12); the plain FP32 kernels keep `collide`,
// which matches the CPU reference bit for bit. With COLLISION_MODEL it also
// does lattice::collide_model's local relaxation time and regularization, in
// both storages.
//
// RAW: populations in and out are in units of 2^-112, the f32 whose bits the
// 16-bit format keeps (fp16c_raw_decode), so the codec needs no multiplies. Values
// below 2^-14 are then f32 denormals, exact to 2^-37 in real units.
template <bool RAW>
__device__ __forceinline__ void collide_fast(float* f, const Params& p) {
    const float up = RAW ? 0x1p112f : 1.0f, down = RAW ? 0x1p-112f : 1.0f;
    float s[9], d[9];
    float sum = f[0];
    float jx = 0.0f, jy = 0.0f, jz = 0.0f;
#pragma unroll
    for (int q = 0; q < 9; q++) {
        s[q] = f[2 * q + 1] + f[2 * q + 2];
        d[q] = f[2 * q + 1] - f[2 * q + 2];
        sum += s[q];
        ACC(jx, CEX(2 * q + 1), d[q]);
        ACC(jy, CEY(2 * q + 1), d[q]);
        ACC(jz, CEZ(2 * q + 1), d[q]);
    }
    const float drho = sum * up;
    const float rho = 1.0f + drho;
    const float inv = __fdividef(1.0f, rho);
    const float ux = (jx * up + 0.5f * p.fx) * inv;
    const float uy = (jy * up + 0.5f * p.fy) * inv;
    const float uz = (jz * up + 0.5f * p.fz) * inv;
    const float usq = 1.5f * (ux * ux + uy * uy + uz * uz);
#ifdef COLLISION_MODEL
    // collide_model's stress, relaxation time and regularization, from the
    // pair sums already at hand (s in the populations' units).
    float mxx = 0.0f, myy = 0.0f, mzz = 0.0f, mxy = 0.0f, mxz = 0.0f, myz = 0.0f;
#pragma unroll
    for (int q = 0; q < 9; q++) {
        const int a = 2 * q + 1;
        ACC(mxx, CEX(a) * CEX(a), s[q]);
        ACC(myy, CEY(a) * CEY(a), s[q]);
        ACC(mzz, CEZ(a) * CEZ(a), s[q]);
        ACC(mxy, CEX(a) * CEY(a), s[q]);
        ACC(mxz, CEX(a) * CEZ(a), s[q]);
        ACC(myz, CEY(a) * CEZ(a), s[q]);
    }
    const float third = drho * (1.0f / 3.0f);
    const float pxx = mxx * up - (third + rho * ux * ux);
    const float pyy = myy * up - (third + rho * uy * uy);
    const float pzz = mzz * up - (third + rho * uz * uz);
    const float pxy = mxy * up - rho * ux * uy;
    const float pxz = mxz * up - rho * ux * uz;
    const float pyz = myz * up - rho * uy * uz;
    float tau = p.tau0;
    if (p.smagorinsky != 0.0f) {
        const float qq = pxx * pxx + pyy * pyy + pzz * pzz + 2.0f * (pxy * pxy + pxz * pxz + pyz * pyz);
        tau = 0.5f * (p.tau0 + sqrtf(p.tau0 * p.tau0 + p.smagorinsky * sqrtf(qq) * inv));
    }
    const float op = __fdividef(1.0f, tau);
    const float om = (p.model & MODEL_TRT) ? __fdividef(1.0f, __fdividef(0.1875f, tau - 0.5f) + 0.5f) : op;
    const bool regularized = (p.model & MODEL_REGULARIZED) != 0u;
    const float trace = (pxx + pyy + pzz) * (1.0f / 3.0f);
    const float keep = (1.0f - op) * 4.5f;
#else
    const float op = p.omega_plus, om = p.omega_minus;
    const bool regularized = false;
    const float trace = 0.0f, keep = 0.0f;
    const float pxx = 0.0f, pyy = 0.0f, pzz = 0.0f, pxy = 0.0f, pxz = 0.0f, pyz = 0.0f;
#endif
    // Velocities scaled by sqrt(4.5): the pair's e.u squared is then 4.5 (e.u)^2.
    const float k = 2.12132034f, kinv = 0.471404520f;
    const float vx = k * ux, vy = k * uy, vz = k * uz;
    // Per weight class w, with fp = s / 2 and fm = d / 2 of the pair (a, b):
    // outgoing a, b = P + M, P - M, where P = fp + op (w drho + w rho (4.5 (e.u)^2
    // - usq) - fp) and M = fm + om (3 w rho (e.u) - fm).
    const float hp = 0.5f - 0.5f * op, hm = 0.5f - 0.5f * om;
    const float as = down * op * WS * drho, bs = down * op * WS * rho, cs = down * om * 3.0f * WS * kinv * rho;
    const float ae = down * op * WE * drho, be = down * op * WE * rho, ce = down * om * 3.0f * WE * kinv * rho;
    const bool has_force = p.has_force != 0u;
    const float fu = p.fx * ux + p.fy * uy + p.fz * uz;
    const float kp = down * (1.0f - 0.5f * op), km = down * (1.0f - 0.5f * om);
    if (regularized) {
        f[0] = down * (W0 * (drho - rho * usq) + keep * W0 * (-trace));
    } else {
        f[0] = (1.0f - op) * f[0] + down * op * W0 * (drho - rho * usq);
    }
    if (has_force) f[0] += kp * W0 * (-3.0f * fu);
#pragma unroll
    for (int q = 0; q < 9; q++) {
        const int a = 2 * q + 1;
        const bool axis = a < 7;
        const float w = axis ? WS : WE;
        float ev = 0.0f;
        ACC(ev, CEX(a), vx);
        ACC(ev, CEY(a), vy);
        ACC(ev, CEZ(a), vz);
        const float t = ev * ev - usq;
        float P, M;
        if (regularized) {
            // Equilibrium plus the relaxed projection of the stress: nothing
            // of the incoming pair is kept (collide_model).
            float diag = 0.0f, off = 0.0f;
            ACC(diag, CEX(a) * CEX(a), pxx);
            ACC(diag, CEY(a) * CEY(a), pyy);
            ACC(diag, CEZ(a) * CEZ(a), pzz);
            ACC(off, CEX(a) * CEY(a), pxy);
            ACC(off, CEX(a) * CEZ(a), pxz);
            ACC(off, CEY(a) * CEZ(a), pyz);
            const float h = diag + 2.0f * off - trace;
            P = down * w * (drho + rho * t + keep * h);
            M = down * 3.0f * w * kinv * rho * ev;
        } else {
            P = (axis ? bs : be) * t + ((axis ? as : ae) + hp * s[q]);
            M = (axis ? cs : ce) * ev + hm * d[q];
        }
        if (has_force) {
            float ef = 0.0f;
            ACC(ef, CEX(a), p.fx);
            ACC(ef, CEY(a), p.fy);
            ACC(ef, CEZ(a), p.fz);
            P += kp * w * (9.0f * (ev * kinv) * ef - 3.0f * fu);
            M += km * w * 3.0f * ef;
            if (regularized) M += down * (1.0f - op) * w * (-1.5f * ef);
        }
        f[a] = P + M;
        f[a + 1] = P - M;
    }
}

#ifdef STORAGE_FP16
#define COLLIDE collide_fast<false>
#else
#define COLLIDE collide
#endif

// Incoming populations -> outgoing populations of a running cell.
__device__ __forceinline__ void apply(u32 fl, float* f, const Params& p) {
    u32 t = fl & TYPE_MASK;
    if (t == T_FLUID) {
        COLLIDE(f, p);
    } else {
        // Outlet: rho = 1 and the velocity that arrives.
        float rho, jx, jy, jz;
        moments(f, &rho, &jx, &jy, &jz);
        float inv = 1.0f / rho;
        equilibrium(1.0f, jx * inv, jy * inv, jz * inv, f);
    }
}

// --- neighbours ---------------------------------------------------------------

// Neighbour of (x, y, z) at offset (dx, dy, dz); -1 beyond a non-periodic face.
__device__ __forceinline__ long long neighbour(const Params& p, int x, int y, int z, int dx, int dy, int dz) {
    int c[3] = {x + dx, y + dy, z + dz};
    int n[3] = {(int)p.nx, (int)p.ny, (int)p.nz};
#pragma unroll
    for (int a = 0; a < 3; a++) {
        if (c[a] < 0 || c[a] >= n[a]) {
            if (!((p.periodic >> a) & 1u)) return -1;
            c[a] = c[a] < 0 ? c[a] + n[a] : c[a] - n[a];
        }
    }
    return (long long)c[0] + (long long)p.nx * ((long long)c[1] + (long long)p.ny * (long long)c[2]);
}

// Mirror of direction i across the plane normal to `axis`.
__device__ __forceinline__ int mirror(int i, int axis) {
    int e[3] = {EX[i], EY[i], EZ[i]};
    e[axis] = -e[axis];
    for (int k = 0; k < Q; k++)
        if (EX[k] == e[0] && EY[k] == e[1] && EZ[k] == e[2]) return k;
    return i;
}

// Partner cell of a specular reflection (cpu.rs: CpuSolver::specular); -1 if none.
__device__ long long specular(const Params& p, const unsigned char* flags, int x, int y, int z, int ex, int ey, int ez, int axis) {
    int e[3] = {ex, ey, ez};
    if (e[axis] == 0) return -1;
    long long m = neighbour(p, x, y, z, ex, ey, ez);
    if (m < 0 || (flags[m] & TYPE_MASK) != T_FREESLIP) return -1;
    int nrm[3] = {0, 0, 0};
    nrm[axis] = e[axis];
    long long mn = neighbour(p, x, y, z, nrm[0], nrm[1], nrm[2]);
    if (mn < 0 || (flags[mn] & TYPE_MASK) != T_FREESLIP) return -1;
    int t[3] = {ex, ey, ez};
    t[axis] = 0;
    long long tc = neighbour(p, x, y, z, t[0], t[1], t[2]);
    if (tc < 0 || !runs(flags[tc])) return -1;
    return tc;
}

// The inlet or moving wall met along a free-slip face (cpu.rs:
// CpuSolver::edge_velocity): its cell, or -1.
__device__ long long edge_velocity(const Params& p, const unsigned char* flags, int x, int y, int z, int ex, int ey, int ez, int axis) {
    int t[3] = {ex, ey, ez};
    t[axis] = 0;
    if (t[0] == 0 && t[1] == 0 && t[2] == 0) return -1;
    long long m = neighbour(p, x, y, z, t[0], t[1], t[2]);
    if (m < 0) return -1;
    u32 ty = flags[m] & TYPE_MASK;
    return (ty == T_INLET || ty == T_MOVING) ? m : -1;
}

// ln x for a positive finite x with the CPU's operations (solver/mod.rs: ln);
// logf differs from the CPU's library logarithm in the last bit.
__device__ float portable_log(float x) {
    u32 bits = __float_as_uint(x);
    int e = (int)((bits >> 23) & 0xffu) - 127;
    float m = __uint_as_float((bits & 0x007fffffu) | 0x3f800000u);
    if (m > 1.41421356237309504880f) {
        m *= 0.5f;
        e += 1;
    }
    float s = (m - 1.0f) / (m + 1.0f);
    float s2 = s * s;
    float series = s * (2.0f + s2 * (2.0f / 3.0f + s2 * (0.4f + s2 * (2.0f / 7.0f + s2 * (2.0f / 9.0f)))));
    return (float)e * 0.693147180559945309417f + series;
}

// Profile factor of slot `slot` at boundary cell (x, y, z) (solver/mod.rs:
// Profiles::factor, same arithmetic).
__device__ float profile_factor(const Params& p, int slot, int x, int y, int z) {
    u32 code = p.profile[slot];
    int q[3] = {x, y, z};
    if ((code & 15u) == 1u) {
        float f = 1.0f;
        for (int a = 0; a < 3; a++) {
            if (code & (16u << a)) {
                float s = ((float)q[a] - p.wall_lo[a]) / (p.wall_hi[a] - p.wall_lo[a]);
                f *= 4.0f * s * (1.0f - s);
            }
        }
        return fmaxf(f, 0.0f);
    }
    float h = (float)z - p.wall_lo[2];
    if (h <= 0.0f) return 0.0f;
    float z0 = p.roughness[slot];
    float top = p.wall_hi[2] - p.wall_lo[2];
    return fminf(portable_log(1.0f + h / z0) / portable_log(1.0f + top / z0), 1.0f);
}

// Velocity of inlet or moving-wall cell m (flag tag `slot`) into u.
__device__ void wall_velocity(const Params& p, int slot, long long m, float* u) {
    u[0] = p.vel[slot][0]; u[1] = p.vel[slot][1]; u[2] = p.vel[slot][2];
    if (p.profile[slot] != 0u) {
        long long nxy = (long long)p.nx * p.ny;
        int z = (int)(m / nxy);
        long long r = m - (long long)z * nxy;
        int y = (int)(r / p.nx);
        int x = (int)(r - (long long)y * p.nx);
        float f = profile_factor(p, slot, x, y, z);
        u[0] *= f; u[1] *= f; u[2] *= f;
    }
}

__device__ __forceinline__ float edot_rt(int i, const float* u) {
    return (float)EX[i] * u[0] + (float)EY[i] * u[1] + (float)EZ[i] * u[2];
}

// What arrives at a cell along j from inlet or moving-wall cell m (read_odd):
// its own slot `own` plus 6 w_j (e_j . u_m); and what it stores in its own
// slot for outgoing i toward m (write_odd). Not inlined, so that every kernel
// that forms them (the boundary kernels, `fields`) contracts them alike where
// FMA contraction is on: the velocity a step leaves and `fields` then agree
// bit for bit.
__device__ __noinline__ float arriving(float own, const Params& p, const unsigned char* __restrict__ flags, int j, long long m) {
    float u[3];
    wall_velocity(p, (int)TAG(flags[m]), m, u);
    return own + 6.0f * weight(j) * edot_rt(j, u);
}
__device__ __noinline__ float leaving(float out, const Params& p, const unsigned char* __restrict__ flags, int i, long long m) {
    float u[3];
    wall_velocity(p, (int)TAG(flags[m]), m, u);
    return out - 6.0f * weight(i) * edot_rt(i, u);
}

// --- interpolated walls (src/solver/lbm/links.rs) -------------------------------

// (a, b, c) of a link's stored q (links.rs: coefficients).
__device__ __forceinline__ void bouzidi(float q, float* a, float* b, float* c) {
    if (q < 0.0f) {
        float t = -2.0f * q;
        *a = t; *b = 1.0f - t; *c = 0.0f;
    } else if (q < 0.5f) {
        float t = 2.0f * q;
        *a = t; *b = 0.0f; *c = 1.0f - t;
    } else {
        float t = 1.0f / (2.0f * q);
        *a = t; *b = 1.0f - t; *c = 0.0f;
    }
}

// The read half: c f_i added to each interpolated link's returning population.
__device__ void complete_incoming(const float* q, float* v) {
    for (int i = 1; i < Q; i++) {
        float qi = q[i - 1];
        if (qi != 0.0f) {
            float a, b, cc;
            bouzidi(qi, &a, &b, &cc);
            if (cc != 0.0f) v[opposite(i)] += cc * v[i];
        }
    }
}

// The write half: what link i stores in its bounce-back slot.
// `out` is v[i], `back` v[opposite(i)] (aa_boundary_rules' lanes hold
// only their own links' values under run-time indices).
__device__ __forceinline__ float bounced_rt(const float* q, float out, float back, int i) {
    if (q == nullptr || q[i - 1] == 0.0f) return out;
    float a, b, cc;
    bouzidi(q[i - 1], &a, &b, &cc);
    return a * out + b * back;
}
__device__ __forceinline__ float bounced(const float* q, const float* v, int i) {
    return bounced_rt(q, v[i], v[opposite(i)], i);
}

// The links of NEAR cell c (null when it has none listed): a binary search
// of the boundary list (aa_boundary knows its cell's place instead).
__device__ const float* links_of(const Params& p, u64 c) {
    const float* link_q = link_list(p);
    if (link_q == nullptr) return nullptr;
    const u32* near = near_list(p);
    u32 lo = 0, hi = p.near_count;
    while (lo < hi) {
        u32 mid = (lo + hi) / 2;
        if ((u64)near[mid] < c) lo = mid + 1; else hi = mid;
    }
    return (lo < p.near_count && (u64)near[lo] == c) ? link_q + (u64)(Q - 1) * lo : nullptr;
}

// Fresh populations made consistent with the read half (links.rs:
// initial_adjust): the bounce-back slot holds f_ī − c f_i.
extern "C" __global__ void links_initial(store_t* __restrict__ f, const Params p) {
    u32 k = blockIdx.x * blockDim.x + threadIdx.x;
    const float* link_q = link_list(p);
    if (k >= p.near_count || link_q == nullptr) return;
    const u64 n = (u64)p.nx * (u64)p.ny * (u64)p.nz;
    const u64 c = near_list(p)[k];
    const float* q = link_q + (u64)(Q - 1) * k;
    for (int i = 1; i < Q; i++) {
        if (q[i - 1] == 0.0f) continue;
        float a, b, cc;
        bouzidi(q[i - 1], &a, &b, &cc);
        if (cc != 0.0f) {
            float v = ld(f, (u64)i * n + c);
            st(f, (u64)opposite(i) * n + c, ld(f, (u64)opposite(i) * n + c) - cc * v);
        }
    }
}

// Odd-step (B) incoming populations with all boundary rules (cpu.rs: read_odd).
__device__ void read_odd(const store_t* f, const unsigned char* flags, const Params& p, u64 n, u64 c, int x, int y, int z, float* v) {
    v[0] = ld(f, c);
    for (int j = 1; j < Q; j++) {
        int o = opposite(j);
        long long s = neighbour(p, x, y, z, -EX[j], -EY[j], -EZ[j]);
        if (s < 0) { v[j] = ld(f, (u64)j * n + c); continue; }
        u32 sf = flags[s];
        u32 t = sf & TYPE_MASK;
        if (t == T_FLUID || t == T_OUTLET) {
            v[j] = ld(f, (u64)o * n + (u64)s);
        } else if (t == T_WALL) {
            v[j] = ld(f, (u64)j * n + c);
        } else if (t == T_MOVING || t == T_INLET) {
            v[j] = arriving(ld(f, (u64)j * n + c), p, flags, j, s);
        } else {
            int axis = (int)TAG(sf);
            int jr = mirror(j, axis);
            long long s2 = specular(p, flags, x, y, z, -EX[j], -EY[j], -EZ[j], axis);
            if (s2 >= 0 && jr != j) {
                v[j] = ld(f, (u64)opposite(jr) * n + (u64)s2);
            } else {
                long long ev = edge_velocity(p, flags, x, y, z, -EX[j], -EY[j], -EZ[j], axis);
                if (ev >= 0) {
                    v[j] = arriving(ld(f, (u64)j * n + c), p, flags, j, ev);
                } else {
                    v[j] = ld(f, (u64)j * n + c);
                }
            }
        }
    }
}

#define CELL_COORDS                                              \
    int x = blockIdx.x * blockDim.x + threadIdx.x;                \
    int y = blockIdx.y;                                           \
    int z = blockIdx.z;                                           \
    if (x >= (int)p.nx) return;                                   \
    const u64 n = (u64)p.nx * (u64)p.ny * (u64)p.nz;              \
    const u64 c = (u64)x + (u64)p.nx * ((u64)y + (u64)p.ny * (u64)z);

// --- the two steps ------------------------------------------------------------
//
// Bulk step kernels are launched as programmatic dependents of the kernel before
// them (Hopper and newer; launch_step_kernel in src/solver/cuda.rs). Each block
// first lets the next kernel be launched, then waits until the previous
// kernel's writes are visible: the next step's launch and block ramp-up hide
// behind this step's last blocks. (Waiting later, after the flags are read,
// makes the 16-bit aa_odd2 spill.) The boundary kernels after them are
// dependents too: aa_boundary_rules reads its cell's list entry and flags,
// which no step writes, before it waits.
#if __CUDA_ARCH__ >= 900
#define LET_NEXT_LAUNCH() asm volatile("griddepcontrol.launch_dependents;" ::: "memory")
#define FOLLOW_PREVIOUS_STEP() \
    LET_NEXT_LAUNCH();         \
    asm volatile("griddepcontrol.wait;" ::: "memory")
#else
#define LET_NEXT_LAUNCH()
#define FOLLOW_PREVIOUS_STEP()
#endif
//
// Each step is two launches: a lean kernel over the bulk (fluid cells whose 18
// neighbours all run, flag byte 0) and one over the listed NEAR cells with every
// boundary rule. The AA scheme gives each slot one owner, so the two touch
// disjoint memory. Splitting keeps the boundary code's registers and stack out of
// the bulk kernels, which are pure streaming.

// A step that starts a contaminant transport step (src/solver/scalar) runs
// the bulk kernels compiled with WRITE_VELOCITY: they also leave the velocity
// of the state they read, as `fields` reports it, at velocity_planes(p), and
// `velocity_rest` leaves the other cells' before the step. The contaminant
// then needs no pass of its own over the populations (`fields` after an odd
// step costs half a step). A display frame taken after such a step
// (display_planes) reads the density as well, from a fourth plane.
#ifdef WRITE_VELOCITY
__device__ __forceinline__ void put_velocity(const Params& p, u64 n, u64 c, const float* v) {
    float rho, u[3];
    fluid_velocity(v, p, &rho, u);
    float* out = velocity_planes(p);
    out[c] = u[0];
    out[n + c] = u[1];
    out[2 * n + c] = u[2];
    if (leaves_density(p)) out[3 * n + c] = rho;
}
// Cells c and c + 1's, one float2 store a plane where the planes are 8-byte
// aligned there (always in the pair kernels, whose c and n are even and
// whose planes start where an allocation does).
__device__ __forceinline__ void put_velocity_pair(const Params& p, u64 n, u64 c, const float* a, const float* b) {
    float ra, ua[3], rb, ub[3];
    fluid_velocity(a, p, &ra, ua);
    fluid_velocity(b, p, &rb, ub);
    float* out = velocity_planes(p);
    const bool density = leaves_density(p);
    if ((((u64)out | (c * 4) | (n * 4)) & 7) == 0) {
#pragma unroll
        for (int k = 0; k < 3; k++) *reinterpret_cast<float2*>(out + k * n + c) = make_float2(ua[k], ub[k]);
        if (density) *reinterpret_cast<float2*>(out + 3 * n + c) = make_float2(ra, rb);
    } else {
#pragma unroll
        for (int k = 0; k < 3; k++) {
            out[k * n + c] = ua[k];
            out[k * n + c + 1] = ub[k];
        }
        if (density) {
            out[3 * n + c] = ra;
            out[3 * n + c + 1] = rb;
        }
    }
}
// A listed NEAR cell's (aa_boundary), as cell_fields reports it.
__device__ __forceinline__ void put_near_velocity(const Params& p, u32 fl, u64 n, u64 c, const float* v) {
    if ((fl & TYPE_MASK) == T_OUTLET) {
        float rho, jx, jy, jz;
        moments(v, &rho, &jx, &jy, &jz);
        float* out = velocity_planes(p);
        out[c] = jx / rho;
        out[n + c] = jy / rho;
        out[2 * n + c] = jz / rho;
        if (leaves_density(p)) out[3 * n + c] = 1.0f;
    } else {
        put_velocity(p, n, c, v);
    }
}
#define PUT_VELOCITY(n, c, v) put_velocity(p, n, c, v)
#define PUT_NEAR_VELOCITY(fl, n, c, v) put_near_velocity(p, fl, n, c, v)
#else
#define PUT_VELOCITY(n, c, v)
#define PUT_NEAR_VELOCITY(fl, n, c, v)
#endif

// Even step (A), bulk: read own slots, collide, write outgoing i to own slot opposite(i).
// Cells [c_begin, c_end).
// One bulk cell of the even step.
__device__ __forceinline__ void even_cell(store_t* __restrict__ f, const Params& p, u64 n, u64 c) {
    float v[Q];
#pragma unroll
    for (int i = 0; i < Q; i++) v[i] = ld(f, (u64)i * n + c);
    PUT_VELOCITY(n, c, v);
    COLLIDE(v, p);
#pragma unroll
    for (int i = 0; i < Q; i++) st(f, (u64)opposite(i) * n + c, v[i]);
}

extern "C" __global__ void __launch_bounds__(128, 8) aa_even(store_t* __restrict__ f, const unsigned char* __restrict__ flags, const Params p, u64 n, u64 c_begin, u64 c_end) {
    FOLLOW_PREVIOUS_STEP();
    u64 c = c_begin + (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= c_end || even_bits(flags, n, c, 1) == 0u) return;
    even_cell(f, p, n, c);
}

// Even step (A), bulk, two neighbouring cells per thread with accesses twice as
// wide: half the loads, stores and address arithmetic (16-bit storage is bound
// by instruction issue), and twice the bytes in flight per thread (FP32 moves
// closer to the copy bandwidth). Needs n, c_begin and c_end even. A
// pair whose even bits are not both set leaves its listed cell to the even
// step's boundary blocks (aa_even2_near, or aa_boundary) and stores only the
// other's slots.
// The populations of one slot of two neighbouring cells, as one aligned access.
// 16-bit storage works on them in units of 2^-112 (collide_fast<true>).
#ifdef STORAGE_FP16
typedef u32 pair_t;
__device__ __forceinline__ pair_t make_pair(store_t a, store_t b) { return (u32)a | ((u32)b << 16); }
__device__ __forceinline__ store_t first(pair_t w) { return (store_t)(w & 0xffffu); }
__device__ __forceinline__ store_t second(pair_t w) { return (store_t)(w >> 16); }
__device__ __forceinline__ float pair_ld(pair_t w, bool hi) { return fp16c_raw_decode(hi ? w >> 16 : w & 0xffffu); }
// The value of a pair's population in real units, as ld reads it.
__device__ __forceinline__ float pair_real(pair_t w, bool hi) { return pair_ld(w, hi) * 0x1p112f; }
__device__ __forceinline__ void pair_st(pair_t& w, bool hi, float v) {
    u32 h = fp16c_raw_encode(v);
    w = hi ? (w & 0xffffu) | (h << 16) : (w & 0xffff0000u) | h;
}
#define PAIR_COLLIDE collide_fast<true>
#else
typedef float2 pair_t;
__device__ __forceinline__ pair_t make_pair(store_t a, store_t b) { return make_float2(a, b); }
__device__ __forceinline__ store_t first(pair_t w) { return w.x; }
__device__ __forceinline__ store_t second(pair_t w) { return w.y; }
__device__ __forceinline__ float pair_ld(pair_t w, bool hi) { return hi ? w.y : w.x; }
__device__ __forceinline__ float pair_real(pair_t w, bool hi) { return pair_ld(w, hi); }
__device__ __forceinline__ void pair_st(pair_t& w, bool hi, float v) {
    if (hi) w.y = v; else w.x = v;
}
#define PAIR_COLLIDE collide
#endif

// Collides the two cells whose populations share the pairs w. Even step: pair i
// holds incoming i and receives outgoing opposite(i); odd step: pair k holds
// incoming opposite(k) and receives outgoing k.
// Bit h of `mine`: cell c + h is this thread's to update (the velocity is
// left only for those).
template <bool ODD>
__device__ __forceinline__ void collide_pair(pair_t* w, const Params& p, u64 n, u64 c, u32 mine) {
#ifdef WRITE_VELOCITY
    // Both cells' velocities before either collides, so that each plane
    // takes one 8-byte store for the pair rather than two 4-byte ones (c and
    // n are even in the pair kernels).
    {
        float a[Q], b[Q];
#pragma unroll
        for (int i = 0; i < Q; i++) {
            a[i] = pair_real(w[ODD ? opposite(i) : i], false);
            b[i] = pair_real(w[ODD ? opposite(i) : i], true);
        }
        if (mine == 3u) {
            put_velocity_pair(p, n, c, a, b);
        } else {
            if (mine & 1u) put_velocity(p, n, c, a);
            if (mine & 2u) put_velocity(p, n, c + 1, b);
        }
    }
#endif
#pragma unroll
    for (int h = 0; h < 2; h++) {
        float v[Q];
#pragma unroll
        for (int i = 0; i < Q; i++) v[i] = pair_ld(w[ODD ? opposite(i) : i], h);
        PAIR_COLLIDE(v, p);
#pragma unroll
        for (int i = 0; i < Q; i++) pair_st(w[i], h, v[ODD ? i : opposite(i)]);
    }
}

#ifndef EVEN_PAIR_BLOCKS
// With a collision model 16-bit storage's even step runs best at 6 (H100,
// 256³: 32 269 against 31 443 MLUPS at 5; BENCHMARKS.md 2026-11-24).
#if defined(STORAGE_FP16) && defined(COLLISION_MODEL)
#define EVEN_PAIR_BLOCKS 6
#elif defined(STORAGE_FP16)
#define EVEN_PAIR_BLOCKS 5
#else
#define EVEN_PAIR_BLOCKS 4
#endif
#endif
#ifndef ODD_PAIR_BLOCKS
#ifdef STORAGE_FP16
#define ODD_PAIR_BLOCKS 6
#else
#define ODD_PAIR_BLOCKS 4
#endif
#endif
// Global loads and stores of the paired kernels, as macros so that cache hints
// (e.g. GLD(p)=__ldcs(p)) can be benchmarked without a rebuild.
#ifndef GLD
#define GLD(ptr) (*(ptr))
#endif
#ifndef GST
#define GST(ptr, v) (*(ptr) = (v))
#endif

// Block `block` of aa_even2 (of aa_even2_near: its bulk blocks).
__device__ __forceinline__ void even2_block(store_t* __restrict__ f, const unsigned char* __restrict__ flags, const Params& p, u64 n, u64 c_begin, u64 c_end, u32 block) {
    const u64 c = c_begin + 2 * ((u64)block * blockDim.x + threadIdx.x);
    if (c >= c_end) return;
    const u32 bulk = even_bits(flags, n, c, 2);
    if (bulk == 0u) return;
    // A pair with one cell listed takes the pair's path too and stores only
    // its own cell's slots: alone, that cell held up the warp of every row's
    // first and last pair (faces and obstacles across x), 18% of the even
    // step in the shipped scenarios (BENCHMARKS.md, twenty-fifth session).
    pair_t w[Q];
#pragma unroll
    for (int i = 0; i < Q; i++) w[i] = GLD((const pair_t*)(f + (u64)i * n + c));
    collide_pair<false>(w, p, n, c, bulk);
    if (bulk == 3u) {
#pragma unroll
        for (int i = 0; i < Q; i++) GST((pair_t*)(f + (u64)i * n + c), w[i]);
    } else {
        const u64 h = bulk == 1u ? 0u : 1u;
#pragma unroll
        for (int i = 0; i < Q; i++) GST(f + (u64)i * n + c + h, h ? second(w[i]) : first(w[i]));
    }
}

extern "C" __global__ void __launch_bounds__(128, EVEN_PAIR_BLOCKS) aa_even2(store_t* __restrict__ f, const unsigned char* __restrict__ flags, const Params p, u64 n, u64 c_begin, u64 c_end) {
    FOLLOW_PREVIOUS_STEP();
    even2_block(f, flags, p, n, c_begin, c_end, blockIdx.x);
}

#if defined(STORAGE_FP16) && !defined(NO_EVEN_QUAD) && !defined(WRITE_VELOCITY)
// 16-bit storage's even step, four neighbouring cells per thread: each slot
// one aligned 8-byte access. The pair kernel held 76 bytes of loads in flight
// a thread and waited on memory two thirds of its time at 83% of the DRAM
// bandwidth, where FP32's, with 152, reached 87% (Nsight Compute, 512³;
// BENCHMARKS.md, twenty-seventh session); this one took the 16-bit box from
// 36 007 to 36 582 MLUPS at 512³ (twenty-eighth). Needs n, c_begin and c_end
// multiples of 4. A quad whose even bits are not all set stores only its set
// cells' slots, as aa_even2 does. It has no _near variant: one (the listed
// NEAR cells' blocks in its launch, as aa_even2_near) cost the shipped
// scenarios 8-10% in 16-bit against aa_even2_near, at 3 or 4 blocks an SM
// (twenty-eighth session), so the even step takes it where it lists no cells.
// Steps that leave the velocity keep the pair kernel: with WRITE_VELOCITY
// this one spilled 56 bytes, and it was not measured there.
#ifndef EVEN_QUAD_BLOCKS
#ifdef COLLISION_MODEL
#define EVEN_QUAD_BLOCKS 3
#else
#define EVEN_QUAD_BLOCKS 4
#endif
#endif
__device__ __forceinline__ u32& quad_word(uint2& w, int h) { return h < 2 ? w.x : w.y; }
extern "C" __global__ void __launch_bounds__(128, EVEN_QUAD_BLOCKS) aa_even4(store_t* __restrict__ f, const unsigned char* __restrict__ flags, const Params p, u64 n, u64 c_begin, u64 c_end) {
    FOLLOW_PREVIOUS_STEP();
    const u64 c = c_begin + 4 * ((u64)blockIdx.x * blockDim.x + threadIdx.x);
    if (c >= c_end) return;
    const u32 bulk = even_bits(flags, n, c, 4);
    if (bulk == 0u) return;
    uint2 w[Q];
#pragma unroll
    for (int i = 0; i < Q; i++) w[i] = GLD((const uint2*)(f + (u64)i * n + c));
#pragma unroll
    for (int h = 0; h < 4; h++) {
        float v[Q];
#pragma unroll
        for (int i = 0; i < Q; i++) v[i] = pair_ld(quad_word(w[i], h), h & 1);
        PAIR_COLLIDE(v, p);
#pragma unroll
        for (int i = 0; i < Q; i++) pair_st(quad_word(w[i], h), h & 1, v[opposite(i)]);
    }
    if (bulk == 15u) {
#pragma unroll
        for (int i = 0; i < Q; i++) GST((uint2*)(f + (u64)i * n + c), w[i]);
    } else {
#pragma unroll
        for (int i = 0; i < Q; i++) {
#pragma unroll
            for (int h = 0; h < 4; h++) {
                const u32 word = quad_word(w[i], h);
                if (bulk & (1u << h)) f[(u64)i * n + c + h] = (store_t)((h & 1) ? word >> 16 : word & 0xffffu);
            }
        }
    }
}
#endif

// Offsets to the neighbours at -1, 0, +1 along y and z, wrapping across periodic
// faces (bulk cells never sit on a non-periodic one). Offsets are u32 with
// wrap-around (mod 2^32) arithmetic: the solver refuses grids of 2^32 cells or
// more.
__device__ __forceinline__ void yz_offsets(const Params& p, int y, int z, u32* oy, u32* oz) {
    const u32 nx = p.nx, nxy = p.nx * p.ny, nn = nxy * p.nz;
    oy[0] = y == 0 ? nxy - nx : 0u - nx;
    oy[1] = 0u;
    oy[2] = y + 1 == (int)p.ny ? nx - nxy : nx;
    oz[0] = z == 0 ? nn - nxy : 0u - nxy;
    oz[1] = 0u;
    oz[2] = z + 1 == (int)p.nz ? nxy - nn : nxy;
}

// One bulk cell of the odd step (x offsets as yz_offsets).
__device__ __forceinline__ void odd_cell(store_t* __restrict__ f, const Params& p, int x, int y, int z) {
    const u64 n = (u64)p.nx * (u64)p.ny * (u64)p.nz;
    const u64 c = (u64)x + (u64)p.nx * ((u64)y + (u64)p.ny * (u64)z);
    const u32 nx = p.nx;
    const u32 ox[3] = {x == 0 ? nx - 1u : 0u - 1u, 0u, x + 1 == (int)nx ? 1u - nx : 1u};
    u32 oy[3], oz[3];
    yz_offsets(p, y, z, oy, oz);
    const u32 cc = (u32)c;
    float v[Q];
#pragma unroll
    for (int j = 0; j < Q; j++) {
        const u32 s = cc + ox[1 - CEX(j)] + oy[1 - CEY(j)] + oz[1 - CEZ(j)];
        v[j] = ld(f + (u64)opposite(j) * n, s);
    }
    PUT_VELOCITY(n, c, v);
    COLLIDE(v, p);
#pragma unroll
    for (int i = 0; i < Q; i++) {
        const u32 m = cc + ox[1 + CEX(i)] + oy[1 + CEY(i)] + oz[1 + CEZ(i)];
        st(f + (u64)i * n, m, v[i]);
    }
}

// Odd step (B), bulk: read incoming j from slot opposite(j) of x - e_j, collide,
// write outgoing i to slot i of x + e_i. Wraps only across periodic faces.
// Layers z0 .. z0 + gridDim.z.
extern "C" __global__ void __launch_bounds__(128, 8) aa_odd(store_t* __restrict__ f, const unsigned char* __restrict__ flags, const Params p, u32 z0) {
    FOLLOW_PREVIOUS_STEP();
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    const int y = blockIdx.y;
    const int z = blockIdx.z + z0;
    if (x >= (int)p.nx) return;
    const u64 c = (u64)x + (u64)p.nx * ((u64)y + (u64)p.ny * (u64)z);
    if (flags[c] != 0) return;
    odd_cell(f, p, x, y, z);
}

// Odd step (B), bulk, cells x and x + 1 (x even) per thread; needs nx even.
// Slots without an x component hold the pair's populations in one aligned
// access; the others are two single accesses (the pair's neighbours are
// shifted by one cell, and one of them may wrap across a periodic x face).
__device__ __forceinline__ void odd2_pair(store_t* __restrict__ f, const unsigned char* __restrict__ flags, const Params& p, int x, int y, int z);
extern "C" __global__ void __launch_bounds__(128, ODD_PAIR_BLOCKS) aa_odd2(store_t* __restrict__ f, const unsigned char* __restrict__ flags, const Params p, u32 z0) {
    FOLLOW_PREVIOUS_STEP();
    const int x = 2 * (blockIdx.x * blockDim.x + threadIdx.x);
    if (x >= (int)p.nx) return;
    odd2_pair(f, flags, p, x, blockIdx.y, blockIdx.z + z0);
}
// aa_odd2 with each layer's pairs in a row of blocks, warps running on from
// one row into the next: where a row's nx / 2 pairs leave lanes of its last
// warp idle (the cavity's 66 cells: two warps a row, the second with one
// lane; the sphere's 400: an eighth of the lanes; launch.rs: ODD_ROWS_IDLE).
// A warp's lanes then hold two rows' offsets, not one in the warp's uniform
// registers: in 16-bit storage at aa_odd2's 80 registers it spilled 72
// bytes, so it takes 96.
#ifndef ODD_ROWS_BLOCKS
#ifdef STORAGE_FP16
#define ODD_ROWS_BLOCKS 5
#else
#define ODD_ROWS_BLOCKS ODD_PAIR_BLOCKS
#endif
#endif
extern "C" __global__ void __launch_bounds__(128, ODD_ROWS_BLOCKS) aa_odd2_rows(store_t* __restrict__ f, const unsigned char* __restrict__ flags, const Params p, u32 z0) {
    FOLLOW_PREVIOUS_STEP();
    const u32 t = 2u * (blockIdx.x * blockDim.x + threadIdx.x);
    if (t >= p.nx * p.ny) return;
    odd2_pair(f, flags, p, (int)(t % p.nx), (int)(t / p.nx), blockIdx.z + z0);
}
__device__ __forceinline__ void odd2_pair(store_t* __restrict__ f, const unsigned char* __restrict__ flags, const Params& p, int x, int y, int z) {
    const u64 n = (u64)p.nx * (u64)p.ny * (u64)p.nz;
    const u64 c = (u64)x + (u64)p.nx * ((u64)y + (u64)p.ny * (u64)z);
    const u32 bulk = bulk_bits(flags, n, c, 2);
    if (bulk == 0u) return;
    // A pair with one cell left to aa_boundary_rules takes the pair's path
    // too (that cell's loads stay in the lattice: the offsets wrap) and
    // stores only the bulk cell's slots, as aa_even2 does.
    const u32 nx = p.nx;
    // x offsets of the first cell and, relative to the first, of the second.
    const u32 oa[3] = {x == 0 ? nx - 1u : 0u - 1u, 0u, 1u};
    const u32 ob[3] = {0u, 1u, x + 2 == (int)nx ? 2u - nx : 2u};
    u32 oy[3], oz[3];
    yz_offsets(p, y, z, oy, oz);
    const u32 cc = (u32)c;
    // Slot k of both cells lives at (cell + e_k): read as incoming opposite(k),
    // written with outgoing k.
    pair_t w[Q];
#pragma unroll
    for (int k = 0; k < Q; k++) {
        const store_t* fk = f + (u64)k * n;
        const u32 r = cc + oy[1 + CEY(k)] + oz[1 + CEZ(k)];
        if (CEX(k) == 0) {
            w[k] = GLD((const pair_t*)(fk + r));
        } else {
            w[k] = make_pair(GLD(fk + (r + oa[1 + CEX(k)])), GLD(fk + (r + ob[1 + CEX(k)])));
        }
    }
    collide_pair<true>(w, p, n, c, bulk);
    if (bulk == 3u) {
#pragma unroll
        for (int k = 0; k < Q; k++) {
            store_t* fk = f + (u64)k * n;
            const u32 r = cc + oy[1 + CEY(k)] + oz[1 + CEZ(k)];
            if (CEX(k) == 0) {
                GST((pair_t*)(fk + r), w[k]);
            } else {
                GST(fk + (r + oa[1 + CEX(k)]), first(w[k]));
                GST(fk + (r + ob[1 + CEX(k)]), second(w[k]));
            }
        }
    } else {
        const bool hi = bulk == 2u;
#pragma unroll
        for (int k = 0; k < Q; k++) {
            store_t* fk = f + (u64)k * n;
            const u32 r = cc + oy[1 + CEY(k)] + oz[1 + CEZ(k)];
            GST(fk + (r + (hi ? ob[1 + CEX(k)] : oa[1 + CEX(k)])), hi ? second(w[k]) : first(w[k]));
        }
    }
}

#if !defined(STORAGE_FP16) && !defined(NO_ODD_QUAD)
// Blocks of up to 256 threads, 128 registers; with a collision model one
// block and 255 registers: at two blocks its four cells spill (H100, 256³:
// 17 356 against 18 879 MLUPS).
#ifndef ODD_QUAD_BLOCKS
#ifdef COLLISION_MODEL
#define ODD_QUAD_BLOCKS 1
#else
#define ODD_QUAD_BLOCKS 2
#endif
#endif
__device__ __forceinline__ float& quad_at(float4& q, int h) { return h == 0 ? q.x : (h == 1 ? q.y : (h == 2 ? q.z : q.w)); }
__device__ __forceinline__ float lane_down(float v) { return __shfl_down_sync(0xffffffffu, v, 1); }
__device__ __forceinline__ float lane_up(float v) { return __shfl_up_sync(0xffffffffu, v, 1); }
// Odd step (B), bulk, FP32, cells x .. x + 3 (x a multiple of 4) per thread;
// needs nx a multiple of 4. Every slot is read and written as an aligned float4:
// a slot shifted along x holds three populations of this thread's cells and one
// of a neighbouring lane's, which the lanes exchange by warp shuffles; only the
// ends of a warp's run (and of a row, and next to cells left to aa_boundary_rules)
// take single accesses. aa_odd2's shifted slots, two single
// accesses each, kept the odd step at 93% of the copy bandwidth against the
// even step's 97% (BENCHMARKS.md, eighth session); a pair version with
// shuffles gained nothing, twice the bytes per instruction did.
extern "C" __global__ void __launch_bounds__(256, ODD_QUAD_BLOCKS) aa_odd4(store_t* __restrict__ f, const unsigned char* __restrict__ flags, const Params p, u32 z0) {
    FOLLOW_PREVIOUS_STEP();
    const u32 lane = threadIdx.x & 31u;
    const int x0 = 4 * (blockIdx.x * blockDim.x + threadIdx.x);
    const int y = blockIdx.y * blockDim.y + threadIdx.y;
    const int z = blockIdx.z + z0;
    const u32 nx = p.nx;
    // All lanes of a warp (blockDim.x is a multiple of 32: one row) take part in
    // the shuffles: those past the row's end work on its last four cells and
    // store nothing.
    if (y >= (int)p.ny || x0 - 4 * (int)lane >= (int)nx) return;
    const bool in = x0 < (int)nx;
    const int x = in ? x0 : (int)nx - 4;
    const u64 n = (u64)p.nx * (u64)p.ny * (u64)p.nz;
    const u64 c = (u64)x + (u64)p.nx * ((u64)y + (u64)p.ny * (u64)z);
    // Bit j: cell x + j is bulk fluid. Every cell is collided, but only bulk
    // cells' results are stored (aa_boundary_rules updates the others): a quad next
    // to a wall costs no more than a bulk one, where updating its bulk cells
    // one by one in odd_cell held up the whole warp (the cavity's rows).
    const u32 m = in ? bulk_bits(flags, n, c, 4) : 0u;
    if (__ballot_sync(0xffffffffu, m != 0) == 0) return;
    const bool has_next = lane < 31u && x0 + 4 < (int)nx;
    const bool has_prev = lane > 0u;
    const u32 up = __shfl_up_sync(0xffffffffu, m, 1);
    const u32 down = __shfl_down_sync(0xffffffffu, m, 1);
    const u32 m_prev = has_prev ? up : 0u;
    const u32 m_next = has_next ? down : 0u;
    const u32 xm = x == 0 ? nx - 1u : 0u - 1u;       // to x - 1
    const u32 xp = x + 4 == (int)nx ? 4u - nx : 4u;  // to x + 4
    u32 oy[3], oz[3];
    yz_offsets(p, y, z, oy, oz);
    const u32 cc = (u32)c;
    float4 w[Q];
    float e[Q];
#pragma unroll
    for (int k = 0; k < Q; k++) {
        const store_t* fk = f + (u64)k * n;
        const u32 r = cc + oy[1 + CEY(k)] + oz[1 + CEZ(k)];
        w[k] = GLD((const float4*)(fk + r));  // at x .. x + 3
        if (CEX(k) > 0) e[k] = has_next ? 0.0f : GLD(fk + (r + xp));
        if (CEX(k) < 0) e[k] = has_prev ? 0.0f : GLD(fk + (r + xm));
    }
#pragma unroll
    for (int k = 0; k < Q; k++) {
        if (CEX(k) > 0) {
            const float s = lane_down(w[k].x);
            w[k] = make_float4(w[k].y, w[k].z, w[k].w, has_next ? s : e[k]);
        }
        if (CEX(k) < 0) {
            const float s = lane_up(w[k].w);
            w[k] = make_float4(has_prev ? s : e[k], w[k].x, w[k].y, w[k].z);
        }
    }
#pragma unroll
    for (int h = 0; h < 4; h++) {
        float v[Q];
#pragma unroll
        for (int i = 0; i < Q; i++) v[i] = quad_at(w[opposite(i)], h);
#ifdef WRITE_VELOCITY
        if (m & (1u << h)) put_velocity(p, n, c + h, v);
#endif
        collide(v, p);
#pragma unroll
        for (int i = 0; i < Q; i++) quad_at(w[i], h) = v[i];
    }
#pragma unroll
    for (int k = 0; k < Q; k++) {
        if (CEX(k) > 0) e[k] = lane_up(w[k].w);    // to x
        if (CEX(k) < 0) e[k] = lane_down(w[k].x);  // to x + 3
    }
    if (m == 0) return;
    // A float4 store where all four owners of its slots are bulk cells, single
    // stores of this lane's bulk cells where not; the slot a shifted float4
    // takes from a neighbouring lane is stored by that lane if this one's
    // float4 leaves it out.
#pragma unroll
    for (int k = 0; k < Q; k++) {
        store_t* fk = f + (u64)k * n;
        const u32 r = cc + oy[1 + CEY(k)] + oz[1 + CEZ(k)];
        if (CEX(k) == 0) {
            if (m == 15u) {
                GST((float4*)(fk + r), w[k]);
            } else {
#pragma unroll
                for (int j = 0; j < 4; j++)
                    if (m & (1u << j)) GST(fk + (r + j), quad_at(w[k], j));
            }
        } else if (CEX(k) > 0) {
            // cell x + j to x + j + 1
            if ((m_prev & 8u) && (m & 7u) == 7u) {
                GST((float4*)(fk + r), make_float4(e[k], w[k].x, w[k].y, w[k].z));
            } else {
                if (m & 1u) GST(fk + (r + 1u), w[k].x);
                if ((m & 6u) == 6u) {
                    GST((float2*)(fk + (r + 2u)), make_float2(w[k].y, w[k].z));
                } else {
                    if (m & 2u) GST(fk + (r + 2u), w[k].y);
                    if (m & 4u) GST(fk + (r + 3u), w[k].z);
                }
            }
            if ((m & 8u) && (m_next & 7u) != 7u) GST(fk + (r + xp), w[k].w);
        } else {
            // cell x + j to x + j - 1
            if ((m & 14u) == 14u && (m_next & 1u)) {
                GST((float4*)(fk + r), make_float4(w[k].y, w[k].z, w[k].w, e[k]));
            } else {
                if ((m & 6u) == 6u) {
                    GST((float2*)(fk + r), make_float2(w[k].y, w[k].z));
                } else {
                    if (m & 2u) GST(fk + r, w[k].y);
                    if (m & 4u) GST(fk + (r + 1u), w[k].z);
                }
                if (m & 8u) GST(fk + (r + 2u), w[k].w);
            }
            if ((m & 1u) && (m_prev & 14u) != 14u) GST(fk + (r + xm), w[k].x);
        }
    }
}
#endif

// One listed NEAR cell of the even step (an outlet, a cell on a non-periodic
// face or one with interpolated links: flags::even_step_differs) with all
// its boundary rules: entry k of `cells`, which starts at entry `first` of
// the even step's list, whose links p points at. Updated where they are, by
// the thread of their pair in aa_even2, these cells cost the sphere twice
// its even step (BENCHMARKS.md, twenty-third session).
__device__ __noinline__ void near_cell(store_t* __restrict__ f, const unsigned char* __restrict__ flags, const Params& p, const u32* __restrict__ cells, u32 k, u32 first) {
    const float* link_q = link_list(p);
    const float* q = link_q == nullptr ? nullptr : link_q + (u64)(Q - 1) * (first + k);
    const u64 n = (u64)p.nx * (u64)p.ny * (u64)p.nz;
    const u64 c = cells[k];
    const int x = (int)(c % p.nx);
    const int y = (int)((c / p.nx) % p.ny);
    const int z = (int)(c / ((u64)p.nx * p.ny));
    u32 fl = flags[c];
    float v[Q];
#pragma unroll
    for (int i = 0; i < Q; i++) v[i] = ld(f, (u64)i * n + c);
    if (q) complete_incoming(q, v);
    PUT_NEAR_VELOCITY(fl, n, c, v);
    apply(fl, v, p);
    st(f, c, v[0]);
#pragma unroll
    for (int i = 1; i < Q; i++) st(f, (u64)opposite(i) * n + c, bounced(q, v, i));
    // Populations arriving from beyond a non-periodic face are the cell's own
    // outgoing ones; slot j then holds only a population leaving the domain.
#pragma unroll
    for (int j = 1; j < Q; j++)
        if (neighbour(p, x, y, z, -CEX(j), -CEY(j), -CEZ(j)) < 0) st(f, (u64)j * n + c, v[j]);
}

// The even step's listed NEAR cells, after its bulk kernel (where
// aa_even2_near does not take them: FLOWSCOPE_SEPARATE_BOUNDARY, or the
// single-cell aa_even). The parameters are __grid_constant__ (here and in
// aa_even2_near) so that near_cell, not inlined, reads them where they are
// instead of from a copy (compute capability 7.0 and newer; older GPUs,
// which only NVRTC 12 still compiles for, get the copy).
#if __CUDA_ARCH__ >= 700
#define GRID_CONSTANT __grid_constant__
#else
#define GRID_CONSTANT
#endif
extern "C" __global__ void __launch_bounds__(128) aa_boundary(store_t* __restrict__ f, const unsigned char* __restrict__ flags, const GRID_CONSTANT Params p, const u32* __restrict__ cells, u32 count, u32 first) {
    FOLLOW_PREVIOUS_STEP();
    u32 k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= count) return;
    near_cell(f, flags, p, cells, k, first);
}

// --- the odd step's rules, resolved on the host -------------------------------
//
// The odd step of a NEAR cell from its rules: 3 bits a direction d (bits
// 3d..3d + 3) saying what lies across the link toward x + e_d, resolved on
// the host from the flags (boundary.rs: OddLink, odd_rules) by the CPU
// solver's read_odd and write_odd tests (which the CPU solver's own odd step
// now also takes from the rules). Each link then costs what the rule needs
// and no more: no neighbour's flag byte unless its velocity or face axis is
// wanted, no 64-bit neighbour search, every load of the cell issued before
// the collision; the links' q complete what arrives and what bounces back.
// The generic odd path of aa_boundary, where each link's rule waited on the
// flag byte of the cell across it, ran at 22% occupancy (128 registers) and
// moved 730-870 bytes a cell (BENCHMARKS.md, twelfth session).
#define R_STREAM 0u
#define R_BOUNCE 1u
#define R_MOVING 2u
#define R_SPECULAR 3u
#define R_EDGE 4u
#define R_FACE 5u

// The direction of (ex, ey, ez), at compile time.
__host__ __device__ constexpr int direction_of(int ex, int ey, int ez) {
    int k = 0;
    for (int i = 0; i < Q; i++)
        if (CEX(i) == ex && CEY(i) == ey && CEZ(i) == ez) k = i;
    return k;
}

// Four blocks of 128 threads (128 registers) an SM: at six (80 registers)
// the kernel of one thread a cell, which kept all 19 populations and the
// neighbours' offsets live, spilled a little and ran 1-4% slower (H100, the
// shipped scenarios; BENCHMARKS.md, twenty-third session); with two lanes a
// cell, five and six (16-bit) changed nothing (twenty-ninth session).
#ifndef RULES_BLOCKS
#define RULES_BLOCKS 4
#endif
// Directions d with component `sign` along `axis`, as bits 1 << d.
__host__ __device__ constexpr u32 direction_mask(int axis, int sign) {
    u32 m = 0;
    for (int i = 0; i < Q; i++)
        if ((axis == 0 ? CEX(i) : (axis == 1 ? CEY(i) : CEZ(i))) == sign) m |= 1u << i;
    return m;
}
// MIRROR[axis][d] for d in 12 * half .. 12 * half + 12, 5 bits each.
__host__ __device__ constexpr u64 mirror_bits(int axis, int half) {
    u64 m = 0;
    for (int i = 12 * half; i < Q && i < 12 * half + 12; i++) {
        const int d = direction_of(axis == 0 ? -CEX(i) : CEX(i), axis == 1 ? -CEY(i) : CEY(i), axis == 2 ? -CEZ(i) : CEZ(i));
        m |= (u64)d << (5 * (i - 12 * half));
    }
    return m;
}
// MIRROR[axis][d] of boundary.rs for a run-time direction d.
__device__ __forceinline__ int mirrored_rt(int d, u32 axis) {
    constexpr u64 LO[3] = {mirror_bits(0, 0), mirror_bits(1, 0), mirror_bits(2, 0)};
    constexpr u64 HI[3] = {mirror_bits(0, 1), mirror_bits(1, 1), mirror_bits(2, 1)};
    const u64 lo = axis == 0u ? LO[0] : (axis == 1u ? LO[1] : LO[2]);
    const u64 hi = axis == 0u ? HI[0] : (axis == 1u ? HI[1] : HI[2]);
    return d < 12 ? (int)((lo >> (5 * d)) & 31u) : (int)((hi >> (5 * (d - 12))) & 31u);
}
// The offset o[1 + e] of a neighbour along `axis` for a run-time direction d
// (o[1] is 0), kept in registers where an index into o would not be.
template <int AXIS>
__device__ __forceinline__ u32 offset_rt(const u32* o, int d) {
    constexpr u32 PLUS = direction_mask(AXIS, 1), MINUS = direction_mask(AXIS, -1);
    return ((PLUS >> d) & 1u) ? o[2] : (((MINUS >> d) & 1u) ? o[0] : 0u);
}

// The odd step of one NEAR cell shared by RULES_LANES neighbouring threads:
// lane l loads and stores links l + 1, l + 1 + RULES_LANES, ..., the lanes
// trade the loaded populations by shuffles, and each collides the whole cell
// (the same arithmetic, so the same result). One thread a cell ran its
// links' code unrolled, 7 608 instructions (FP32) in a chain per thread: on
// the cavity, a third of a wave, it waited 46% of its time on fetching
// instructions; and on the urban block, with four times the cells, the
// bytes it moved were in flight a few links at a time (BENCHMARKS.md,
// twenty-eighth session). Two lanes ran every shipped scenario faster than
// one, four or eight (twenty-ninth session).
#ifndef RULES_LANES
#define RULES_LANES 2
#endif
static_assert(RULES_LANES == 1 || RULES_LANES == 2 || RULES_LANES == 4 || RULES_LANES == 8, "a cell's lanes must divide a warp's 32 threads and a block's 128");
#define RULES_SLOTS ((Q - 1 + RULES_LANES - 1) / RULES_LANES)
template <bool SLIP>
__device__ __forceinline__ void rules_lanes(store_t* __restrict__ f, const unsigned char* __restrict__ flags, const Params& p, const u32* __restrict__ cells, const u64* __restrict__ rules, u32 count, u32 first, u32 block) {
    const u32 t = block * blockDim.x + threadIdx.x;
    const u32 k = t / RULES_LANES;
    const int lane = (int)(t % RULES_LANES);
    // A cell's lanes are in one warp (blocks of a multiple of 32 threads),
    // and all of them leave here or none.
    if (k >= count) return;
    const unsigned group = ((1u << RULES_LANES) - 1u) << ((threadIdx.x & 31u) & ~(u32)(RULES_LANES - 1));
    const float* link_q = link_list(p);
    const float* q = link_q == nullptr ? nullptr : link_q + (u64)(Q - 1) * (first + k);
    const u32 cc = cells[k];
    const u64 r = rules[k];
    const u32 nx = p.nx, nxy = p.nx * p.ny;
    const u64 n = (u64)nxy * (u64)p.nz;
    const int z = (int)(cc / nxy);
    const int y = (int)((cc - (u32)z * nxy) / nx);
    const int x = (int)(cc - (u32)z * nxy - (u32)y * nx);
    // Offsets to the neighbours as the bulk kernels wrap them; across a
    // non-periodic face the rule is R_FACE and the offset unused.
    const u32 ox[3] = {x == 0 ? nx - 1u : 0u - 1u, 0u, x + 1 == (int)nx ? 1u - nx : 1u};
    u32 oy[3], oz[3];
    yz_offsets(p, y, z, oy, oz);
    const u32 fl = flags[cc];
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
    float mine[RULES_SLOTS];
#pragma unroll
    for (int jj = 0; jj < RULES_SLOTS; jj++) {
        const int j = 1 + lane + RULES_LANES * jj;
        mine[jj] = 0.0f;
        if (j >= Q) continue;
        const int d = opposite(j);
        const u32 rule = (u32)(r >> (3 * d)) & 7u;
        const u32 s = cc + offset_rt<0>(ox, d) + offset_rt<1>(oy, d) + offset_rt<2>(oz, d);
        if (rule == R_STREAM) {
            mine[jj] = ld(f + (u64)d * n, s);
        } else if (SLIP && (rule == R_SPECULAR || rule == R_EDGE)) {
            const u32 axis = TAG(flags[s]);
            const u32 beside = cc + (axis == 0u ? 0u : offset_rt<0>(ox, d)) + (axis == 1u ? 0u : offset_rt<1>(oy, d)) + (axis == 2u ? 0u : offset_rt<2>(oz, d));
            if (rule == R_SPECULAR) {
                mine[jj] = ld(f + (u64)mirrored_rt(d, axis) * n, beside);
            } else {
                mine[jj] = arriving(ld(f + (u64)j * n, cc), p, flags, j, beside);
            }
        } else if (rule == R_MOVING) {
            mine[jj] = arriving(ld(f + (u64)j * n, cc), p, flags, j, s);
        } else {
            mine[jj] = ld(f + (u64)j * n, cc);
        }
    }
    float v[Q];
    v[0] = ld(f, (u64)cc);
#pragma unroll
    for (int i = 1; i < Q; i++) v[i] = __shfl_sync(group, mine[(i - 1) / RULES_LANES], (i - 1) % RULES_LANES, RULES_LANES);
    if (q) complete_incoming(q, v);
    if (lane == 0) {
        PUT_NEAR_VELOCITY(fl, n, (u64)cc, v);
    }
    if (SLIP) {
        apply(fl, v, p);
    } else {
        COLLIDE(v, p);
    }
    if (lane == 0) st(f, cc, v[0]);
#pragma unroll
    for (int jj = 0; jj < RULES_SLOTS; jj++) {
        const int i = 1 + lane + RULES_LANES * jj;
        if (i >= Q) continue;
        // v[i] and v[opposite(i)] by compile-time indices.
        float out = v[1 + RULES_LANES * jj], back = v[opposite(1 + RULES_LANES * jj)];
#pragma unroll
        for (int l = 1; l < RULES_LANES; l++) {
            const int c = 1 + l + RULES_LANES * jj < Q ? 1 + l + RULES_LANES * jj : 1;
            if (lane == l) {
                out = v[c];
                back = v[opposite(c)];
            }
        }
        const int o = opposite(i);
        const u32 rule = (u32)(r >> (3 * i)) & 7u;
        // Nothing arrives from beyond a face along i: the slot keeps what
        // leaves along i for the next even step (write_odd).
        if (((u32)(r >> (3 * o)) & 7u) == R_FACE) st(f + (u64)i * n, cc, out);
        const u32 m = cc + offset_rt<0>(ox, i) + offset_rt<1>(oy, i) + offset_rt<2>(oz, i);
        if (rule == R_STREAM) {
            st(f + (u64)i * n, m, out);
        } else if (SLIP && (rule == R_SPECULAR || rule == R_EDGE)) {
            const u32 axis = TAG(flags[m]);
            const u32 beside = cc + (axis == 0u ? 0u : offset_rt<0>(ox, i)) + (axis == 1u ? 0u : offset_rt<1>(oy, i)) + (axis == 2u ? 0u : offset_rt<2>(oz, i));
            if (rule == R_SPECULAR) {
                st(f + (u64)mirrored_rt(i, axis) * n, beside, out);
            } else {
                st(f + (u64)o * n, cc, leaving(out, p, flags, i, beside));
            }
        } else if (rule == R_MOVING) {
            st(f + (u64)o * n, cc, leaving(out, p, flags, i, m));
        } else if (rule == R_BOUNCE) {
            st(f + (u64)o * n, cc, bounced_rt(q, out, back, i));
        }
    }
}

// The odd step of light NEAR cell `k` of `cells` (boundary.rs: light_mask):
// fluid, every link streams, bounces back or reflects off one free-slip wall,
// none onto an interpolated wall. In `masks[k]` bit d is set where the link
// toward x + e_d bounces back, bit 32 + d where it reflects, and bits 62-63
// hold the free-slip wall's axis. One thread a cell, each link's slot chosen
// by selects: what rules_lanes does for such a cell, without its rules'
// code. There a lane ran some 1 700 instructions a cell (two lanes, each
// colliding the whole cell), bound by the latency of its loads, where most
// NEAR cells of the shipped scenarios need nothing but this (BENCHMARKS.md,
// twenty-ninth and thirtieth sessions).
__device__ __forceinline__ void light_cell(store_t* __restrict__ f, const Params& p, const u32* __restrict__ cells, const u64* __restrict__ masks, u32 k) {
    const u32 cc = cells[k];
    const u64 mask = masks[k];
    const u32 bounce = (u32)mask, reflect = (u32)(mask >> 32) & ((1u << Q) - 1u);
    const u32 axis = (u32)(mask >> 62);
    const u32 nx = p.nx, nxy = p.nx * p.ny;
    const u64 n = (u64)nxy * (u64)p.nz;
    const int z = (int)(cc / nxy);
    const int y = (int)((cc - (u32)z * nxy) / nx);
    const int x = (int)(cc - (u32)z * nxy - (u32)y * nx);
    const u32 ox[3] = {x == 0 ? nx - 1u : 0u - 1u, 0u, x + 1 == (int)nx ? 1u - nx : 1u};
    u32 oy[3], oz[3];
    yz_offsets(p, y, z, oy, oz);
    // A reflected link's cell: the neighbour's offsets without the wall's axis.
    const u32 sx[3] = {axis == 0u ? 0u : ox[0], 0u, axis == 0u ? 0u : ox[2]};
    const u32 sy[3] = {axis == 1u ? 0u : oy[0], 0u, axis == 1u ? 0u : oy[2]};
    const u32 sz[3] = {axis == 2u ? 0u : oz[0], 0u, axis == 2u ? 0u : oz[2]};
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
    float v[Q];
    v[0] = ld(f, (u64)cc);
#pragma unroll
    for (int j = 1; j < Q; j++) {
        // Incoming j: slot opposite(j) of x - e_j; back from a wall, the
        // cell's own slot j; off a free-slip wall, the mirrored slot of the
        // cell beside.
        const int d = opposite(j);
        const bool back = (bounce >> d) & 1u, mirror = (reflect >> d) & 1u;
        const u32 s = cc + ox[1 + CEX(d)] + oy[1 + CEY(d)] + oz[1 + CEZ(d)];
        const u32 beside = cc + sx[1 + CEX(d)] + sy[1 + CEY(d)] + sz[1 + CEZ(d)];
        const int slot = back ? j : (mirror ? mirrored_rt(d, axis) : d);
        v[j] = ld(f + (u64)slot * n, (u64)(back ? cc : (mirror ? beside : s)));
    }
    PUT_VELOCITY(n, (u64)cc, v);
    COLLIDE(v, p);
    st(f, cc, v[0]);
#pragma unroll
    for (int i = 1; i < Q; i++) {
        const bool back = (bounce >> i) & 1u, mirror = (reflect >> i) & 1u;
        const u32 m = cc + ox[1 + CEX(i)] + oy[1 + CEY(i)] + oz[1 + CEZ(i)];
        const u32 beside = cc + sx[1 + CEX(i)] + sy[1 + CEY(i)] + sz[1 + CEZ(i)];
        const int slot = back ? opposite(i) : (mirror ? mirrored_rt(i, axis) : i);
        st(f + (u64)slot * n, back ? cc : (mirror ? beside : m), v[i]);
    }
}

// The odd step's NEAR cells: the first blocks take `count` cells of `cells`
// (from entry `first` of their list) by their rules, RULES_LANES threads a
// cell (compile.rs: rules_lanes), the others `light_count` light cells, one a
// thread. One launch, so that on small grids the two parts run side by side
// (as two launches in turn the cavity's odd boundary work took 9 µs a step
// instead of 6, and its share of the box fell 75.3 -> 71.0% in 16-bit;
// thirtieth session); the slow rules blocks start first (the light blocks
// first: the urban block 70.1 -> 67.8% in 16-bit, the cube 76.2 -> 73.2%).
// Moving walls and inlets on the light path (their terms by `arriving` and
// `leaving`) took the kernel to 114 registers in 16-bit and lost 1-2 points
// on most scenarios (thirtieth session).
template <bool SLIP>
__device__ __forceinline__ void boundary_odd(store_t* __restrict__ f, const unsigned char* __restrict__ flags, const Params& p, const u32* __restrict__ cells, const u64* __restrict__ rules, u32 count, u32 first, const u32* __restrict__ light, const u64* __restrict__ masks, u32 light_count) {
    const u32 rules_blocks = (count * RULES_LANES + blockDim.x - 1) / blockDim.x;
    if (blockIdx.x < rules_blocks) {
        rules_lanes<SLIP>(f, flags, p, cells, rules, count, first, blockIdx.x);
    } else {
        const u32 k = (blockIdx.x - rules_blocks) * blockDim.x + threadIdx.x;
        if (k < light_count) light_cell(f, p, light, masks, k);
    }
}

// The odd step's NEAR cells (boundary_odd), in blocks of 128.
extern "C" __global__ void __launch_bounds__(128, RULES_BLOCKS) aa_boundary_rules(store_t* __restrict__ f, const unsigned char* __restrict__ flags, const GRID_CONSTANT Params p, const u32* __restrict__ cells, const u64* __restrict__ rules, u32 count, u32 first, const u32* __restrict__ light, const u64* __restrict__ masks, u32 light_count) {
    LET_NEXT_LAUNCH();
    boundary_odd<true>(f, flags, p, cells, rules, count, first, light, masks, light_count);
}

// aa_boundary_rules where no NEAR cell has a free-slip or edge link or is an
// outlet (boundary.rs: rules_are_plain): without that code the kernel is a
// third smaller, and the cavity's, a third of a wave, waited on fetching
// instructions (BENCHMARKS.md, twenty-eighth session).
extern "C" __global__ void __launch_bounds__(128, RULES_BLOCKS) aa_boundary_rules_plain(store_t* __restrict__ f, const unsigned char* __restrict__ flags, const GRID_CONSTANT Params p, const u32* __restrict__ cells, const u64* __restrict__ rules, u32 count, u32 first, const u32* __restrict__ light, const u64* __restrict__ masks, u32 light_count) {
    LET_NEXT_LAUNCH();
    boundary_odd<false>(f, flags, p, cells, rules, count, first, light, masks, light_count);
}

// The even step's paired bulk kernel with its listed NEAR cells in the same
// launch: block k of its grid is bulk block schedule[k] or, where that has
// NEAR_BLOCK set, takes the NEAR cells `cells` (`count` of them, from entry
// `first` of the boundary list) of its low bits' block, one per thread
// (launch.rs: near_schedule). Each such block comes right after the bulk
// block of its last cell, so that the sectors it shares with the cells
// beside, all of them touched by then, are still in L2 (a block of outlet
// cells, one a row, spans 128 rows; after the block of its first cell the
// sphere's even step took 1% longer). The AA scheme gives each slot one
// owner per step, so the two parts touch disjoint slots. near_cell is not
// inlined, so that its registers and stack stay out of the bulk code. The
// odd step keeps a launch of its own (aa_boundary_rules): fused into
// aa_odd2's launch its rules spilled 364 bytes in 16-bit (the sphere 76 ->
// 52% of the box) and in FP32 gained on two scenarios and lost on two
// (BENCHMARKS.md, twenty-third session; the generic rules fused, twelfth).
#define NEAR_BLOCK 0x80000000u
extern "C" __global__ void __launch_bounds__(128, EVEN_PAIR_BLOCKS) aa_even2_near(store_t* __restrict__ f, const unsigned char* __restrict__ flags, const GRID_CONSTANT Params p, u64 n, u64 c_begin, u64 c_end, const u32* __restrict__ cells, u32 count, u32 first, const u32* __restrict__ schedule) {
    FOLLOW_PREVIOUS_STEP();
    const u32 s = schedule[blockIdx.x];
    if (s & NEAR_BLOCK) {
        const u32 k = (s & ~NEAR_BLOCK) * blockDim.x + threadIdx.x;
        if (k < count) near_cell(f, flags, p, cells, k, first);
        return;
    }
    even2_block(f, flags, p, n, c_begin, c_end, s);
}

// --- fields, reductions, forces ----------------------------------------------

// Incoming populations at the current step (parity: 0 = next step is even).
__device__ void incoming(const store_t* f, const unsigned char* flags, const Params& p, u32 parity, u64 n, u64 c, int x, int y, int z, float* v) {
    if (parity == 0u) {
        for (int i = 0; i < Q; i++) v[i] = ld(f, (u64)i * n + c);
    } else {
        read_odd(f, flags, p, n, c, x, y, z, v);
    }
    if (p.link_lo != 0u || p.link_hi != 0u) {
        const float* q = links_of(p, c);
        if (q) complete_incoming(q, v);
    }
}

// Density and velocity a cell reports (cpu.rs: cell_fields).
__device__ void cell_fields(const store_t* f, const unsigned char* flags, const Params& p, u32 parity, u64 n, u64 c, int x, int y, int z, float* out) {
    u32 fl = flags[c];
    u32 t = fl & TYPE_MASK;
    if (!runs(fl)) {
        out[0] = 1.0f;
        if (t == T_MOVING || t == T_INLET) wall_velocity(p, (int)TAG(fl), (long long)c, out + 1);
        else { out[1] = 0.0f; out[2] = 0.0f; out[3] = 0.0f; }
        return;
    }
    float v[Q];
    incoming(f, flags, p, parity, n, c, x, y, z, v);
    if (t == T_OUTLET) {
        float rho, jx, jy, jz;
        moments(v, &rho, &jx, &jy, &jz);
        out[0] = 1.0f; out[1] = jx / rho; out[2] = jy / rho; out[3] = jz / rho;
    } else {
        fluid_velocity(v, p, &out[0], &out[1]);
    }
}

// Density and velocity a cell shows: a free-slip face cell reports the fluid
// next to it without the normal velocity (cpu.rs: free_slip_fields).
__device__ void report(const store_t* f, const unsigned char* flags, const Params& p, u32 parity, u64 n, int x, int y, int z, float* r) {
    const u64 c = (u64)x + (u64)p.nx * ((u64)y + (u64)p.ny * (u64)z);
    u32 fl = flags[c];
    if ((fl & TYPE_MASK) == T_FREESLIP) {
        int axis = (int)TAG(fl);
        int q[3] = {x, y, z};
        int e[3] = {0, 0, 0};
        e[axis] = q[axis] == 0 ? 1 : -1;
        long long m = neighbour(p, x, y, z, e[0], e[1], e[2]);
        if (m >= 0 && runs(flags[m])) {
            cell_fields(f, flags, p, parity, n, (u64)m, x + e[0], y + e[1], z + e[2], r);
            r[1 + axis] = 0.0f;
        } else {
            r[0] = 1.0f; r[1] = 0.0f; r[2] = 0.0f; r[3] = 0.0f;
        }
    } else {
        cell_fields(f, flags, p, parity, n, c, x, y, z, r);
    }
}

// Density and velocity of a bulk cell (flag byte 0: fluid, every neighbour
// running, no links), the values `report` gives, read as the step kernels
// read it: without read_odd's rules per neighbour (three times faster after
// an odd step) and inlined: `report` compiles to a call, and a kernel that
// calls it for every cell copies Params and its arrays to the stack (a display
// frame at 512^3 cost the solver about 13 ms that way, for 3.4 ms of reads).
__device__ __forceinline__ void bulk_fields(const store_t* __restrict__ f, const Params& p, u32 parity, u64 n, u64 c, int x, int y, int z, float* r) {
    float v[Q];
    if (parity == 0u) {
#pragma unroll
        for (int i = 0; i < Q; i++) v[i] = ld(f, (u64)i * n + c);
    } else {
        const u32 nx = p.nx;
        const u32 ox[3] = {x == 0 ? nx - 1u : 0u - 1u, 0u, x + 1 == (int)nx ? 1u - nx : 1u};
        u32 oy[3], oz[3];
        yz_offsets(p, y, z, oy, oz);
        const u32 cc = (u32)c;
#pragma unroll
        for (int j = 0; j < Q; j++) {
            const u32 s = cc + ox[1 - CEX(j)] + oy[1 - CEY(j)] + oz[1 - CEZ(j)];
            v[j] = ld(f + (u64)opposite(j) * n, s);
        }
    }
    fluid_velocity(v, p, &r[0], &r[1]);
}

// `report` and `cell_fields` out of line, their values returned in
// registers: kernels that take them for boundary cells only keep their bulk
// path free of the stack frames (and the tables they fill) these need.
__device__ __noinline__ float4 report_value(const store_t* f, const unsigned char* flags, const Params& p, u32 parity, u64 n, int x, int y, int z) {
    float r[4];
    report(f, flags, p, parity, n, x, y, z, r);
    return make_float4(r[0], r[1], r[2], r[3]);
}
__device__ __noinline__ float4 cell_fields_value(const store_t* f, const unsigned char* flags, const Params& p, u32 parity, u64 n, u64 c, int x, int y, int z) {
    float r[4];
    cell_fields(f, flags, p, parity, n, c, x, y, z, r);
    return make_float4(r[0], r[1], r[2], r[3]);
}

// A cell's density and velocity as `report` gives them, by the bulk path
// where its flag byte is 0.
__device__ __forceinline__ void shown_fields(const store_t* __restrict__ f, const unsigned char* __restrict__ flags, const Params& p, u32 parity, u64 n, u64 c, int x, int y, int z, float* r) {
    if (flags[c] == 0u) {
        bulk_fields(f, p, parity, n, c, x, y, z, r);
    } else {
        const float4 v = report_value(f, flags, p, parity, n, x, y, z);
        r[0] = v.x; r[1] = v.y; r[2] = v.z; r[3] = v.w;
    }
}

// rho, ux, uy, uz as four planes of n floats.
extern "C" __global__ void fields(const store_t* __restrict__ f, const unsigned char* __restrict__ flags, const __grid_constant__ Params p, u32 parity, float* __restrict__ out) {
    CELL_COORDS
    float r[4];
    shown_fields(f, flags, p, parity, n, c, x, y, z, r);
    out[c] = r[0];
    out[n + c] = r[1];
    out[2 * n + c] = r[2];
    out[3 * n + c] = r[3];
}

// The velocity `fields` reports, at velocity_planes(p), for the inlets, the
// one kind of cell no step kernel updates whose velocity the contaminant
// reads (the faces to walls and other solids carry nothing); launched,
// where there are inlets, before a step whose kernels compiled with
// WRITE_VELOCITY write the running cells' (the bulk kernels and
// the boundary kernels, which update every running cell the bulk kernels
// leave).
// Over every cell it took 94 us at 256^3 on the H100, a tenth of a step.
extern "C" __global__ void velocity_rest(const store_t* __restrict__ f, const unsigned char* __restrict__ flags, const Params p, u32 parity) {
    CELL_COORDS
    if ((flags[c] & TYPE_MASK) != T_INLET) return;
    float r[4];
    report(f, flags, p, parity, n, x, y, z, r);
    float* out = velocity_planes(p);
    out[c] = r[1];
    out[n + c] = r[2];
    out[2 * n + c] = r[3];
    if (leaves_density(p)) out[3 * n + c] = r[0];
}

// Adds the current state to the time averages (solver/average.rs): Welford's
// update in f64 of the mean and the sum of squared deviations of ux, uy, uz
// and p - p0 = (rho - 1) / 3; `acc` holds the four planes of means, then the
// four of sums, n doubles each; `count` is this sample's number (1-based).
extern "C" __global__ void average_sample(const store_t* __restrict__ f, const unsigned char* __restrict__ flags, const __grid_constant__ Params p, u32 parity, double* __restrict__ acc, double count) {
    CELL_COORDS
    float r[4];
    shown_fields(f, flags, p, parity, n, c, x, y, z, r);
    float q[4] = {r[1], r[2], r[3], (1.0f / 3.0f) * (r[0] - 1.0f)};
    for (int k = 0; k < 4; k++) {
        double v = (double)q[k];
        double m = acc[(u64)k * n + c];
        double d = v - m;
        m += d / count;
        acc[(u64)k * n + c] = m;
        acc[(u64)(4 + k) * n + c] += d * (v - m);
    }
}

// The end of a display block's mean (block_means): its sums over `cf` cells
// into the planes and the texels, and the stability check.
__device__ __forceinline__ void block_mean_out(u64 m, u64 k, int bx, int by, int bz, u32 my, const float sum[4], float cf, float* __restrict__ out, float4* __restrict__ texels, u64 pitch, float max_speed2, u32* __restrict__ unstable) {
    float mean[4];
    for (int i = 0; i < 4; i++) {
        mean[i] = sum[i] / cf;
        out[(u64)i * m + k] = mean[i];
    }
    if (texels) texels[((u64)bz * my + by) * pitch + bx] = make_float4(mean[0], mean[1], mean[2], mean[3]);
    const float s2 = mean[1] * mean[1] + mean[2] * mean[2] + mean[3] * mean[3];
    if (!(isfinite(mean[0]) && s2 <= max_speed2)) atomicOr(unstable, 1u);
}

// A display frame: the mean of `value` (a cell's rho, ux, uy, uz) over blocks
// of stride^3 cells (partial at the far faces), as four planes of mx*my*mz
// floats, one thread per block. The sum runs x fastest in FP32, as
// display.rs: downsample_fields does. Block means into planes `out`, and
// (unless null) into `texels`: float4 (rho, ux, uy, uz) in rows of `pitch`
// texels, the layout of a 3D texture copy. `unstable` is set where a mean is
// not finite or its speed² exceeds `max_speed2` (the host's
// Fields::is_stable, for frames it does not see).
template <typename Value>
__device__ __forceinline__ void block_means(const Params& p, u32 stride, u32 mx, u32 my, u32 mz, float* __restrict__ out, float4* __restrict__ texels, u64 pitch, float max_speed2, u32* __restrict__ unstable, Value value) {
    const u64 m = (u64)mx * my * mz;
    const u64 k = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= m) return;
    const int bx = (int)(k % mx), by = (int)((k / mx) % my), bz = (int)(k / ((u64)mx * my));
    const int s = (int)stride;
    float sum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    u32 count = 0;
    for (int z = bz * s; z < min((bz + 1) * s, (int)p.nz); z++)
        for (int y = by * s; y < min((by + 1) * s, (int)p.ny); y++)
            for (int x = bx * s; x < min((bx + 1) * s, (int)p.nx); x++) {
                const u64 c = (u64)x + (u64)p.nx * ((u64)y + (u64)p.ny * (u64)z);
                float r[4];
                value(c, x, y, z, r);
                for (int i = 0; i < 4; i++) sum[i] += r[i];
                count++;
            }
    block_mean_out(m, k, bx, by, bz, my, sum, (float)count, out, texels, pitch, max_speed2, unstable);
}

// A display frame of `report` over the lattice.
extern "C" __global__ void display_fields(const store_t* __restrict__ f, const unsigned char* __restrict__ flags, const __grid_constant__ Params p, u32 parity, u32 stride, u32 mx, u32 my, u32 mz, float* __restrict__ out, float4* __restrict__ texels, u64 pitch, float max_speed2, u32* __restrict__ unstable) {
    const u64 n = (u64)p.nx * (u64)p.ny * (u64)p.nz;
    block_means(p, stride, mx, my, mz, out, texels, pitch, max_speed2, unstable, [&](u64 c, int x, int y, int z, float* r) {
        shown_fields(f, flags, p, parity, n, c, x, y, z, r);
    });
}

// What `report` gives for the state a step read, from the fields it left
// (display_planes): planes of n floats ux, uy, uz, rho for the cells that
// run; the other cells' values need no lattice.
__device__ __noinline__ float4 left_report(const float* planes, const unsigned char* flags, const Params& p, u64 n, int x, int y, int z) {
    u64 c = (u64)x + (u64)p.nx * ((u64)y + (u64)p.ny * (u64)z);
    u32 fl = flags[c];
    int flat = -1;
    if ((fl & TYPE_MASK) == T_FREESLIP) {
        const int axis = (int)TAG(fl);
        const int ex = axis == 0 ? (x == 0 ? 1 : -1) : 0;
        const int ey = axis == 1 ? (y == 0 ? 1 : -1) : 0;
        const int ez = axis == 2 ? (z == 0 ? 1 : -1) : 0;
        const long long m = neighbour(p, x, y, z, ex, ey, ez);
        if (m < 0 || !runs(flags[m])) return make_float4(1.0f, 0.0f, 0.0f, 0.0f);
        c = (u64)m;
        fl = flags[m];
        flat = axis;
    }
    float r[4];
    if (!runs(fl)) {
        r[0] = 1.0f;
        const u32 t = fl & TYPE_MASK;
        if (t == T_MOVING || t == T_INLET) wall_velocity(p, (int)TAG(fl), (long long)c, r + 1);
        else { r[1] = 0.0f; r[2] = 0.0f; r[3] = 0.0f; }
    } else {
        r[0] = planes[3 * n + c];
        r[1] = planes[c];
        r[2] = planes[n + c];
        r[3] = planes[2 * n + c];
    }
    if (flat == 0) r[1] = 0.0f;
    if (flat == 1) r[2] = 0.0f;
    if (flat == 2) r[3] = 0.0f;
    return make_float4(r[0], r[1], r[2], r[3]);
}

// A display frame as display_fields makes it, of the state the last step
// read, from the fields that step left in `planes` (see left_report): 16
// bytes a cell written by the step and read here, where display_fields reads
// the lattice (76 bytes a cell in FP32).
extern "C" __global__ void display_planes(const float* __restrict__ planes, const unsigned char* __restrict__ flags, const __grid_constant__ Params p, u32 stride, u32 mx, u32 my, u32 mz, float* __restrict__ out, float4* __restrict__ texels, u64 pitch, float max_speed2, u32* __restrict__ unstable) {
    const u64 n = (u64)p.nx * (u64)p.ny * (u64)p.nz;
    // A whole block of 2³ cells, the display of grids up to 512³ (the
    // default limit is 256), with all its 40 loads issued before the first
    // sum instead of a cell's at a time in block_means' loops: the same
    // sums in the same order.
    const u64 m = (u64)mx * my * mz, k = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    const int bx = (int)(k % mx), by = (int)((k / mx) % my), bz = (int)(k / ((u64)mx * my));
    if (stride == 2 && k < m && 2 * bx + 1 < (int)p.nx && 2 * by + 1 < (int)p.ny && 2 * bz + 1 < (int)p.nz) {
        u32 fl[8];
        float r[8][4];
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const int x = 2 * bx + (j & 1), y = 2 * by + ((j >> 1) & 1), z = 2 * bz + (j >> 2);
            const u64 c = (u64)x + (u64)p.nx * ((u64)y + (u64)p.ny * (u64)z);
            fl[j] = flags[c];
            r[j][0] = planes[3 * n + c];
            r[j][1] = planes[c];
            r[j][2] = planes[n + c];
            r[j][3] = planes[2 * n + c];
        }
        float sum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int j = 0; j < 8; j++) {
            if (fl[j] != 0u) {
                const int x = 2 * bx + (j & 1), y = 2 * by + ((j >> 1) & 1), z = 2 * bz + (j >> 2);
                const float4 v = left_report(planes, flags, p, n, x, y, z);
                r[j][0] = v.x; r[j][1] = v.y; r[j][2] = v.z; r[j][3] = v.w;
            }
            for (int i = 0; i < 4; i++) sum[i] += r[j][i];
        }
        block_mean_out(m, k, bx, by, bz, my, sum, 8.0f, out, texels, pitch, max_speed2, unstable);
        return;
    }
    block_means(p, stride, mx, my, mz, out, texels, pitch, max_speed2, unstable, [&](u64 c, int x, int y, int z, float* r) {
        if (flags[c] == 0u) {
            r[0] = planes[3 * n + c];
            r[1] = planes[c];
            r[2] = planes[n + c];
            r[3] = planes[2 * n + c];
        } else {
            const float4 v = left_report(planes, flags, p, n, x, y, z);
            r[0] = v.x; r[1] = v.y; r[2] = v.z; r[3] = v.w;
        }
    });
}

// Per-block partial statistics over running cells in [c_begin, c_end); blocks
// of 256 threads.
struct StatsPartial {
    double mass, mx, my, mz, count;
    float max_speed;
    u32 pad;
    u64 max_cell;
    u64 bad_cell;   // first non-finite cell, or ~0
};

extern "C" __global__ void __launch_bounds__(256) stats(const store_t* __restrict__ f, const unsigned char* __restrict__ flags, const __grid_constant__ Params p, u32 parity, u64 c_begin, u64 c_end, StatsPartial* __restrict__ partials) {
    __shared__ double s_mass[256], s_mx[256], s_my[256], s_mz[256], s_count[256];
    __shared__ float s_max[256];
    __shared__ u64 s_cell[256], s_bad[256];
    const u64 n = (u64)p.nx * (u64)p.ny * (u64)p.nz;
    double mass = 0.0, mx = 0.0, my = 0.0, mz = 0.0, count = 0.0;
    float best = 0.0f;
    u64 best_cell = 0, bad = ~0ull;
    u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 c = c_begin + (u64)blockIdx.x * blockDim.x + threadIdx.x; c < c_end; c += stride) {
        u32 fl = flags[c];
        if (!runs(fl)) continue;
        int x = (int)(c % p.nx);
        int y = (int)((c / p.nx) % p.ny);
        int z = (int)(c / ((u64)p.nx * p.ny));
        float r[4];
        if (fl == 0u) {
            bulk_fields(f, p, parity, n, c, x, y, z, r);
        } else {
            const float4 v = cell_fields_value(f, flags, p, parity, n, c, x, y, z);
            r[0] = v.x; r[1] = v.y; r[2] = v.z; r[3] = v.w;
        }
        float speed = sqrtf(r[1] * r[1] + r[2] * r[2] + r[3] * r[3]);
        if (!(isfinite(r[0]) && isfinite(speed))) { if (c < bad) bad = c; continue; }
        mass += (double)r[0]; mx += (double)r[1]; my += (double)r[2]; mz += (double)r[3]; count += 1.0;
        if (speed > best) { best = speed; best_cell = c; }
    }
    int t = threadIdx.x;
    s_mass[t] = mass; s_mx[t] = mx; s_my[t] = my; s_mz[t] = mz; s_count[t] = count;
    s_max[t] = best; s_cell[t] = best_cell; s_bad[t] = bad;
    __syncthreads();
    for (int h = blockDim.x / 2; h > 0; h >>= 1) {
        if (t < h) {
            s_mass[t] += s_mass[t + h]; s_mx[t] += s_mx[t + h]; s_my[t] += s_my[t + h]; s_mz[t] += s_mz[t + h];
            s_count[t] += s_count[t + h];
            if (s_max[t + h] > s_max[t]) { s_max[t] = s_max[t + h]; s_cell[t] = s_cell[t + h]; }
            if (s_bad[t + h] < s_bad[t]) s_bad[t] = s_bad[t + h];
        }
        __syncthreads();
    }
    if (t == 0) {
        StatsPartial r;
        r.mass = s_mass[0]; r.mx = s_mx[0]; r.my = s_my[0]; r.mz = s_mz[0]; r.count = s_count[0];
        r.max_speed = s_max[0]; r.pad = 0; r.max_cell = s_cell[0]; r.bad_cell = s_bad[0];
        partials[blockIdx.x] = r;
    }
}

// Per-block partial forces on obstacle tags 1..15 from cells in [c_begin, c_end)
// (48 doubles per block, tag-major).
extern "C" __global__ void __launch_bounds__(256) forces(const store_t* __restrict__ f, const unsigned char* __restrict__ flags, const Params p, u32 parity, u64 c_begin, u64 c_end, double* __restrict__ partials) {
    __shared__ double acc[16 * 3];
    for (int k = threadIdx.x; k < 48; k += blockDim.x) acc[k] = 0.0;
    __syncthreads();
    const u64 n = (u64)p.nx * (u64)p.ny * (u64)p.nz;
    u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 c = c_begin + (u64)blockIdx.x * blockDim.x + threadIdx.x; c < c_end; c += stride) {
        u32 fl = flags[c];
        if (!(fl & NEAR) || !runs(fl)) continue;
        int x = (int)(c % p.nx);
        int y = (int)((c / p.nx) % p.ny);
        int z = (int)(c / ((u64)p.nx * p.ny));
        bool loaded = false, collided = false;
        float v[Q], post[Q];
        const float* q = nullptr;
        for (int i = 1; i < Q; i++) {
            long long m = neighbour(p, x, y, z, EX[i], EY[i], EZ[i]);
            if (m < 0) continue;
            u32 mf = flags[m];
            if ((mf & TYPE_MASK) != T_WALL || TAG(mf) == 0u) continue;
            if (!loaded) {
                incoming(f, flags, p, parity, n, c, x, y, z, v);
                q = links_of(p, c);
                loaded = true;
            }
            // cpu.rs: obstacle_forces. Interpolated links: this step's f*_i.
            double mom;
            if (q == nullptr || q[i - 1] == 0.0f) {
                mom = 2.0 * ((double)v[opposite(i)] + (double)weight(i));
            } else {
                if (!collided) {
                    for (int j = 0; j < Q; j++) post[j] = v[j];
                    apply(fl, post, p);
                    collided = true;
                }
                mom = (double)v[opposite(i)] + (double)post[i] + 2.0 * (double)weight(i);
            }
            u32 tag = TAG(mf);
            // Shared-memory atomics: a few links per block, merged per block and
            // summed on the host in block order.
            atomicAdd(&acc[tag * 3 + 0], mom * EX[i]);
            atomicAdd(&acc[tag * 3 + 1], mom * EY[i]);
            atomicAdd(&acc[tag * 3 + 2], mom * EZ[i]);
        }
    }
    __syncthreads();
    for (int k = threadIdx.x; k < 48; k += blockDim.x) partials[(u64)blockIdx.x * 48 + k] = acc[k];
}

// Initial state: equilibrium of rho = 1 and velocity u0 in running cells.
// A number in [-1, 1) for component k of global cell `cell` (solver/mod.rs:
// perturbation, the lowbias32 hash).
__device__ float perturbation(u32 cell, u32 k) {
    u32 h = cell * 3u + k;
    h ^= h >> 16;
    h *= 0x7feb352du;
    h ^= h >> 15;
    h *= 0x846ca68bu;
    h ^= h >> 16;
    return (float)(h >> 8) * (2.0f / 16777216.0f) - 1.0f;
}

// Equilibrium of (ux, uy, uz) plus `amp` times a pseudo-random perturbation
// of the global cell (x, y, (z + zoff) mod nz_global) (solver/mod.rs:
// Initial::velocity_at).
extern "C" __global__ void init_uniform(store_t* __restrict__ f, const unsigned char* __restrict__ flags, const Params p, float ux, float uy, float uz, float amp, u32 zoff, u32 nz_global) {
    CELL_COORDS
    u32 fl = flags[c];
    float v[Q];
    if (!runs(fl)) {
        for (int i = 0; i < Q; i++) v[i] = 0.0f;
    } else {
        if (amp != 0.0f) {
            u64 zg = ((u64)z + zoff) % (u64)nz_global;
            u32 cell = (u32)((u64)x + (u64)p.nx * ((u64)y + (u64)p.ny * zg));
            ux += amp * perturbation(cell, 0u);
            uy += amp * perturbation(cell, 1u);
            uz += amp * perturbation(cell, 2u);
        }
        equilibrium(1.0f, ux, uy, uz, v);
    }
    for (int i = 0; i < Q; i++) st(f, (u64)i * n + c, v[i]);
}

// Write-back of the multi-GPU exchange (src/solver/slabs.rs): scatters the
// listed entries of five received planes into the lattice. Entry p goes to slot
// s_k (k = p / nxy) of layer `layer`, cell p % nxy.
extern "C" __global__ void unpack_planes(store_t* __restrict__ f, const store_t* __restrict__ planes, const u32* __restrict__ positions, u32 count, u64 n, u32 nxy, u32 layer, u32 s0, u32 s1, u32 s2, u32 s3, u32 s4) {
    u32 k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= count) return;
    u32 p = positions[k];
    u32 plane = p / nxy;
    u32 slot = plane == 0u ? s0 : (plane == 1u ? s1 : (plane == 2u ? s2 : (plane == 3u ? s3 : s4)));
    f[(u64)slot * n + (u64)layer * nxy + (p % nxy)] = planes[p];
}

// Fills n floats with a value (poisons output buffers before checks).
extern "C" __global__ void fill_f32(float* out, u64 count, float value) {
    u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 k = (u64)blockIdx.x * blockDim.x + threadIdx.x; k < count; k += stride) out[k] = value;
}

// Steadiness criterion: per-block sums of |u - u_prev| and |u| over cells
// [c_begin, c_end) (tree reduction in shared memory), then u becomes the new
// snapshot. `fields` holds rho, ux, uy, uz as four planes of n floats; `snapshot` three.
extern "C" __global__ void __launch_bounds__(256) velocity_change(const float* __restrict__ fields, float* __restrict__ snapshot, u64 n, u64 c_begin, u64 c_end, u32 has_prev, double* __restrict__ partials) {
    __shared__ double s_diff[256], s_norm[256];
    double diff = 0.0, norm = 0.0;
    u64 stride = (u64)gridDim.x * blockDim.x;
    for (u64 c = c_begin + (u64)blockIdx.x * blockDim.x + threadIdx.x; c < c_end; c += stride) {
        float ux = fields[n + c], uy = fields[2 * n + c], uz = fields[3 * n + c];
        if (has_prev) {
            double dx = (double)ux - (double)snapshot[c];
            double dy = (double)uy - (double)snapshot[n + c];
            double dz = (double)uz - (double)snapshot[2 * n + c];
            diff += sqrt(dx * dx + dy * dy + dz * dz);
            norm += sqrt((double)ux * ux + (double)uy * uy + (double)uz * uz);
        }
        snapshot[c] = ux;
        snapshot[n + c] = uy;
        snapshot[2 * n + c] = uz;
    }
    int t = threadIdx.x;
    s_diff[t] = diff;
    s_norm[t] = norm;
    __syncthreads();
    for (int h = blockDim.x / 2; h > 0; h >>= 1) {
        if (t < h) { s_diff[t] += s_diff[t + h]; s_norm[t] += s_norm[t + h]; }
        __syncthreads();
    }
    if (t == 0) { partials[2 * blockIdx.x] = s_diff[0]; partials[2 * blockIdx.x + 1] = s_norm[0]; }
}
