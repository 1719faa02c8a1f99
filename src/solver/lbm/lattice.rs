//! The D3Q19 velocity set, the equilibrium and the collision operators.
//!
//! Direction numbering (shared with `kernels/lbm/d3q19.cu`, keep in sync): 0 is rest,
//! then opposite pairs `(1,2) (3,4) ... (17,18)`, so `opposite(i)` is `i+1` for odd
//! `i` and `i-1` for even `i > 0`. Populations are stored *shifted*: the value kept
//! is `f_i - w_i`. Around rest density most of a population is its weight, so
//! storing the deviation keeps ~2 more decimal digits in FP32 and is what 16-bit
//! storage needs anyway.

/// Number of discrete velocities.
pub const Q: usize = 19;

/// Lattice velocities `e_i`.
pub const E: [[i32; 3]; Q] = [
    [0, 0, 0],
    [1, 0, 0],
    [-1, 0, 0],
    [0, 1, 0],
    [0, -1, 0],
    [0, 0, 1],
    [0, 0, -1],
    [1, 1, 0],
    [-1, -1, 0],
    [1, 0, 1],
    [-1, 0, -1],
    [0, 1, 1],
    [0, -1, -1],
    [1, -1, 0],
    [-1, 1, 0],
    [1, 0, -1],
    [-1, 0, 1],
    [0, 1, -1],
    [0, -1, 1],
];

const W0: f32 = 1.0 / 3.0;
const WS: f32 = 1.0 / 18.0;
const WE: f32 = 1.0 / 36.0;

/// Lattice weights `w_i`.
pub const W: [f32; Q] = [
    W0, WS, WS, WS, WS, WS, WS, WE, WE, WE, WE, WE, WE, WE, WE, WE, WE, WE, WE,
];

/// Speed of sound squared.
pub const CS2: f32 = 1.0 / 3.0;

/// TRT "magic" parameter Λ = 3/16: puts bounce-back walls exactly half-way for
/// Poiseuille flow whatever τ is.
pub const TRT_MAGIC: f32 = 3.0 / 16.0;

/// Index of the direction opposite to `i`.
#[inline(always)]
pub const fn opposite(i: usize) -> usize {
    if i == 0 {
        0
    } else if i % 2 == 1 {
        i + 1
    } else {
        i - 1
    }
}

#[inline(always)]
fn dot(i: usize, u: [f32; 3]) -> f32 {
    E[i][0] as f32 * u[0] + E[i][1] as f32 * u[1] + E[i][2] as f32 * u[2]
}

/// Shifted equilibrium `f_eq_i - w_i` for density `rho` and velocity `u`.
///
/// Written with `rho - 1` so that the result keeps its precision near rest.
#[inline(always)]
pub fn equilibrium_shifted(rho: f32, u: [f32; 3]) -> [f32; Q] {
    let drho = rho - 1.0;
    let usq = 1.5 * (u[0] * u[0] + u[1] * u[1] + u[2] * u[2]);
    let mut feq = [0.0f32; Q];
    for i in 0..Q {
        let eu = dot(i, u);
        feq[i] = W[i] * drho + W[i] * rho * (3.0 * eu + 4.5 * eu * eu - usq);
    }
    feq
}

/// Density and momentum (Σ f e) of shifted populations. Returns `(rho, j)`.
#[inline(always)]
pub fn moments(f: &[f32; Q]) -> (f32, [f32; 3]) {
    // Pairwise sums keep the rounding of the density symmetric between directions,
    // and the same order is used in the CUDA kernel.
    let mut drho = f[0];
    let mut j = [0.0f32; 3];
    for p in 0..9 {
        let a = f[2 * p + 1];
        let b = f[2 * p + 2];
        drho += a + b;
        let d = a - b;
        let e = E[2 * p + 1];
        j[0] += e[0] as f32 * d;
        j[1] += e[1] as f32 * d;
        j[2] += e[2] as f32 * d;
    }
    (1.0 + drho, j)
}

/// Collision model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Collision {
    /// Single relaxation time (Bhatnagar–Gross–Krook), as in the original work.
    Bgk,
    /// Two relaxation times with Λ = 3/16: wall position independent of τ.
    #[default]
    Trt,
    /// Regularized BGK (Latt & Chopard 2006): before relaxing, the
    /// non-equilibrium part is replaced by its projection on the second-order
    /// Hermite moment (the viscous stress), which drops the non-hydrodynamic
    /// ("ghost") modes that make BGK and TRT blow up as τ → ½.
    Regularized,
}

impl std::fmt::Display for Collision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Collision::Bgk => "bgk",
            Collision::Trt => "trt",
            Collision::Regularized => "regularized",
        })
    }
}

/// Relaxation rates `(ω+, ω-)` for a collision model and τ.
pub fn relaxation_rates(collision: Collision, tau: f32) -> (f32, f32) {
    let omega_plus = 1.0 / tau;
    match collision {
        Collision::Bgk | Collision::Regularized => (omega_plus, omega_plus),
        Collision::Trt => {
            let omega_minus = 1.0 / (TRT_MAGIC / (tau - 0.5) + 0.5);
            (omega_plus, omega_minus)
        }
    }
}

/// Velocity of shifted populations under a body force (Guo: half the force enters).
#[inline(always)]
pub fn velocity(rho: f32, j: [f32; 3], force: [f32; 3]) -> [f32; 3] {
    let inv = 1.0 / rho;
    [
        (j[0] + 0.5 * force[0]) * inv,
        (j[1] + 0.5 * force[1]) * inv,
        (j[2] + 0.5 * force[2]) * inv,
    ]
}

/// One collision in place: two-relaxation-time form (BGK when ω+ = ω-), with the
/// Guo forcing term split into its symmetric and antisymmetric parts.
#[inline(always)]
pub fn collide(f: &mut [f32; Q], omega_plus: f32, omega_minus: f32, force: [f32; 3]) {
    let (rho, j) = moments(f);
    let u = velocity(rho, j, force);
    let feq = equilibrium_shifted(rho, u);
    let has_force = force[0] != 0.0 || force[1] != 0.0 || force[2] != 0.0;
    let fu = force[0] * u[0] + force[1] * u[1] + force[2] * u[2];
    let kp = 1.0 - 0.5 * omega_plus;
    let km = 1.0 - 0.5 * omega_minus;
    // Guo source S_i = w_i [3 (e_i - u) + 9 (e_i.u) e_i] . F split into
    // S+ = w_i (9 (e.u)(e.F) - 3 u.F) and S- = w_i 3 e.F.
    f[0] += omega_plus * (feq[0] - f[0]);
    if has_force {
        f[0] += kp * W[0] * (-3.0 * fu);
    }
    for p in 0..9 {
        let a = 2 * p + 1;
        let b = a + 1;
        let fp = 0.5 * (f[a] + f[b]);
        let fm = 0.5 * (f[a] - f[b]);
        let ep = 0.5 * (feq[a] + feq[b]);
        let em = 0.5 * (feq[a] - feq[b]);
        let mut dp = omega_plus * (ep - fp);
        let mut dm = omega_minus * (em - fm);
        if has_force {
            let eu = dot(a, u);
            let ef = dot(a, force);
            dp += kp * W[a] * (9.0 * eu * ef - 3.0 * fu);
            dm += km * W[a] * 3.0 * ef;
        }
        f[a] += dp + dm;
        f[b] += dp - dm;
    }
}

/// What the general collision [`collide_model`] does beyond [`collide`]: a
/// local relaxation time from a subgrid model, a regularized collision.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Model {
    /// TRT (Λ = 3/16) relaxation of the odd part; otherwise one rate.
    pub trt: bool,
    /// Regularized collision (see [`Collision::Regularized`]).
    pub regularized: bool,
    /// 18√2 C_s² of the Smagorinsky model ([`smagorinsky_factor`]); 0 without.
    pub smagorinsky: f32,
}

impl Model {
    /// The model of a collision and Smagorinsky constant (0: none); `None`
    /// where [`collide`] does it all (BGK or TRT with a fixed τ).
    pub fn of(collision: Collision, smagorinsky_constant: f32) -> Option<Model> {
        let regularized = collision == Collision::Regularized;
        (regularized || smagorinsky_constant > 0.0).then_some(Model {
            trt: collision == Collision::Trt,
            regularized,
            smagorinsky: smagorinsky_factor(smagorinsky_constant),
        })
    }
}

/// 18√2 C_s², the factor of the Smagorinsky model's relaxation time.
///
/// With the filter width one cell, ν_t = C_s² |S| (|S| = √(2 S:S)). The
/// non-equilibrium stress of the incoming populations is Π = −2ρ c_s² τ S
/// with the total τ = τ0 + 3 ν_t, so |S| = 3 √(Π:Π) / (√2 ρ τ), and τ solves
/// τ² − τ0 τ − 9 C_s² √(Π:Π) / (√2 ρ) = 0 (Hou et al. 1996):
/// τ = ½ (τ0 + √(τ0² + 18√2 C_s² √(Π:Π) / ρ)). No finite differences, no
/// memory beyond the cell's own populations.
pub fn smagorinsky_factor(constant: f32) -> f32 {
    18.0 * std::f32::consts::SQRT_2 * constant * constant
}

/// The cell's non-equilibrium stress Π = Σ e e (f − f_eq), as (xx, yy, zz,
/// xy, xz, yz): the populations' second moment, summed over opposite pairs,
/// less the equilibrium's, which is (ρ − 1)/3 δ + ρ u u for the shifted
/// populations (exact on D3Q19).
#[inline(always)]
fn stress(f: &[f32; Q], rho: f32, u: [f32; 3]) -> [f32; 6] {
    let mut m = [0.0f32; 6];
    for p in 0..9 {
        let s = f[2 * p + 1] + f[2 * p + 2];
        let e = E[2 * p + 1];
        for (k, (x, y)) in [(0, 0), (1, 1), (2, 2), (0, 1), (0, 2), (1, 2)]
            .into_iter()
            .enumerate()
        {
            let c = e[x] * e[y];
            if c > 0 {
                m[k] += s;
            } else if c < 0 {
                m[k] -= s;
            }
        }
    }
    let d = (rho - 1.0) * (1.0 / 3.0);
    [
        m[0] - (d + rho * u[0] * u[0]),
        m[1] - (d + rho * u[1] * u[1]),
        m[2] - (d + rho * u[2] * u[2]),
        m[3] - rho * u[0] * u[1],
        m[4] - rho * u[0] * u[2],
        m[5] - rho * u[1] * u[2],
    ]
}

/// The local relaxation time of the Smagorinsky model ([`smagorinsky_factor`]).
#[inline(always)]
fn smagorinsky_tau(tau0: f32, factor: f32, rho: f32, pi: &[f32; 6]) -> f32 {
    let q = pi[0] * pi[0]
        + pi[1] * pi[1]
        + pi[2] * pi[2]
        + 2.0 * (pi[3] * pi[3] + pi[4] * pi[4] + pi[5] * pi[5]);
    0.5 * (tau0 + (tau0 * tau0 + factor * q.sqrt() / rho).sqrt())
}

/// The relaxation time a cell of incoming populations `f` collides with:
/// `tau0`, raised by the Smagorinsky model where it is on.
pub fn local_tau(f: &[f32; Q], tau0: f32, model: Model, force: [f32; 3]) -> f32 {
    if model.smagorinsky == 0.0 {
        return tau0;
    }
    let (rho, j) = moments(f);
    let u = velocity(rho, j, force);
    smagorinsky_tau(tau0, model.smagorinsky, rho, &stress(f, rho, u))
}

/// [`collide`] with a [`Model`]: the relaxation time from the Smagorinsky
/// model where it is on, and the regularized collision
/// f = f_eq + (1 − ω) f1 + (1 − ω/2) S, with f1_i = w_i/(2 c_s⁴) (e_i e_i −
/// c_s² I) : Π, where it is chosen. The CUDA kernels compute the same in
/// their fast form (`collide_fast`: pair sums, FMA, fast reciprocal), which
/// agrees with this to float rounding.
#[inline(always)]
pub fn collide_model(f: &mut [f32; Q], tau0: f32, model: Model, force: [f32; 3]) {
    let (rho, j) = moments(f);
    let u = velocity(rho, j, force);
    let pi = stress(f, rho, u);
    let tau = if model.smagorinsky == 0.0 {
        tau0
    } else {
        smagorinsky_tau(tau0, model.smagorinsky, rho, &pi)
    };
    if !model.regularized {
        // BGK or TRT at the local τ.
        let rates = if model.trt {
            Collision::Trt
        } else {
            Collision::Bgk
        };
        let (op, om) = relaxation_rates(rates, tau);
        collide(f, op, om, force);
        return;
    }
    let op = 1.0 / tau;
    let drho = rho - 1.0;
    let usq = 1.5 * (u[0] * u[0] + u[1] * u[1] + u[2] * u[2]);
    let has_force = force[0] != 0.0 || force[1] != 0.0 || force[2] != 0.0;
    let fu = force[0] * u[0] + force[1] * u[1] + force[2] * u[2];
    let kp = 1.0 - 0.5 * op;
    // c_s² tr Π, and (1 − ω) / (2 c_s⁴).
    let trace = (pi[0] + pi[1] + pi[2]) * (1.0 / 3.0);
    let keep = (1.0 - op) * 4.5;
    f[0] = W[0] * drho + W[0] * rho * (-usq) + keep * W[0] * (-trace);
    if has_force {
        f[0] += kp * W[0] * (-3.0 * fu);
    }
    for p in 0..9 {
        let (a, b) = (2 * p + 1, 2 * p + 2);
        let w = W[a];
        let (eua, eub) = (dot(a, u), dot(b, u));
        let feqa = w * drho + w * rho * (3.0 * eua + 4.5 * eua * eua - usq);
        let feqb = w * drho + w * rho * (3.0 * eub + 4.5 * eub * eub - usq);
        // (e e − c_s² I) : Π, the same for a and b = −a.
        let e = E[a];
        let mut diag = 0.0f32;
        let mut off = 0.0f32;
        for (k, (x, y)) in [(0, 0), (1, 1), (2, 2), (0, 1), (0, 2), (1, 2)]
            .into_iter()
            .enumerate()
        {
            let c = e[x] * e[y];
            let acc = if k < 3 { &mut diag } else { &mut off };
            if c > 0 {
                *acc += pi[k];
            } else if c < 0 {
                *acc -= pi[k];
            }
        }
        let h = diag + 2.0 * off - trace;
        // The outgoing pair, P ± M: nothing of the incoming one is kept.
        let mut pp = 0.5 * (feqa + feqb) + keep * w * h;
        let mut mm = 0.5 * (feqa - feqb);
        if has_force {
            let ef = dot(a, force);
            pp += kp * w * (9.0 * eua * ef - 3.0 * fu);
            // The incoming momentum is ρu − F/2 (Guo): the first-order
            // part of the non-equilibrium, 3 w e·(−F/2), is kept and
            // relaxed too, or the force would act only in part. One rate:
            // 1 − ω/2 is kp here.
            mm += (1.0 - op) * w * (-1.5 * ef) + kp * w * 3.0 * ef;
        }
        f[a] = pp + mm;
        f[b] = pp - mm;
    }
}

/// Cells collided together by [`collide_lanes`]: eight FP32 lanes fill two SSE
/// or one AVX register.
pub const LANES: usize = 8;

/// [`collide`] for [`LANES`] cells at once, `f[i][lane]`, with the same operations
/// in the same order per lane (so results are bit-identical to [`collide`]); the
/// lane loops let the compiler use SIMD.
#[inline(always)]
pub fn collide_lanes(
    f: &mut [[f32; LANES]; Q],
    omega_plus: f32,
    omega_minus: f32,
    force: [f32; 3],
) {
    collide_lanes_at(f, [omega_plus; LANES], [omega_minus; LANES], force)
}

/// Density and velocity of [`LANES`] cells, lane by lane as [`moments`] and
/// [`velocity`] compute them.
#[inline(always)]
fn moments_lanes(f: &[[f32; LANES]; Q], force: [f32; 3]) -> ([f32; LANES], [[f32; LANES]; 3]) {
    const L: usize = LANES;
    let mut drho = f[0];
    let mut j = [[0.0f32; L]; 3];
    for p in 0..9 {
        let e = E[2 * p + 1];
        for l in 0..L {
            let a = f[2 * p + 1][l];
            let b = f[2 * p + 2][l];
            drho[l] += a + b;
            let d = a - b;
            j[0][l] += e[0] as f32 * d;
            j[1][l] += e[1] as f32 * d;
            j[2][l] += e[2] as f32 * d;
        }
    }
    let mut rho = [0.0f32; L];
    let mut u = [[0.0f32; L]; 3];
    for l in 0..L {
        rho[l] = 1.0 + drho[l];
        let inv = 1.0 / rho[l];
        u[0][l] = (j[0][l] + 0.5 * force[0]) * inv;
        u[1][l] = (j[1][l] + 0.5 * force[1]) * inv;
        u[2][l] = (j[2][l] + 0.5 * force[2]) * inv;
    }
    (rho, u)
}

/// [`collide_lanes`] with rates of each lane's own.
#[inline(always)]
fn collide_lanes_at(
    f: &mut [[f32; LANES]; Q],
    omega_plus: [f32; LANES],
    omega_minus: [f32; LANES],
    force: [f32; 3],
) {
    const L: usize = LANES;
    let (rho, u) = moments_lanes(f, force);
    let mut drho = [0.0f32; L];
    let mut usq = [0.0f32; L];
    for l in 0..L {
        usq[l] = 1.5 * (u[0][l] * u[0][l] + u[1][l] * u[1][l] + u[2][l] * u[2][l]);
        // equilibrium_shifted recomputes drho as rho - 1.0
        drho[l] = rho[l] - 1.0;
    }
    let has_force = force[0] != 0.0 || force[1] != 0.0 || force[2] != 0.0;
    let kp = omega_plus.map(|o| 1.0 - 0.5 * o);
    let km = omega_minus.map(|o| 1.0 - 0.5 * o);
    let mut fu = [0.0f32; L];
    for l in 0..L {
        fu[l] = force[0] * u[0][l] + force[1] * u[1][l] + force[2] * u[2][l];
        let feq0 = W[0] * drho[l] + W[0] * rho[l] * (3.0 * 0.0 + 4.5 * 0.0 * 0.0 - usq[l]);
        f[0][l] += omega_plus[l] * (feq0 - f[0][l]);
        if has_force {
            f[0][l] += kp[l] * W[0] * (-3.0 * fu[l]);
        }
    }
    for p in 0..9 {
        let a = 2 * p + 1;
        let b = a + 1;
        let ea = E[a].map(|c| c as f32);
        for l in 0..L {
            let eua = ea[0] * u[0][l] + ea[1] * u[1][l] + ea[2] * u[2][l];
            // e_b = -e_a: e_b.u is -(e_a.u) exactly, but for the sign of an
            // exact zero, which 3 eu + 4.5 eu² turns into +0 either way; so
            // feqb is equilibrium_shifted's to the bit, without the products
            // by e_b's zero components that the compiler must keep.
            let eub = -eua;
            let feqa = W[a] * drho[l] + W[a] * rho[l] * (3.0 * eua + 4.5 * eua * eua - usq[l]);
            let feqb = W[b] * drho[l] + W[b] * rho[l] * (3.0 * eub + 4.5 * eub * eub - usq[l]);
            let fp = 0.5 * (f[a][l] + f[b][l]);
            let fm = 0.5 * (f[a][l] - f[b][l]);
            let ep = 0.5 * (feqa + feqb);
            let em = 0.5 * (feqa - feqb);
            let mut dp = omega_plus[l] * (ep - fp);
            let mut dm = omega_minus[l] * (em - fm);
            if has_force {
                let ef = ea[0] * force[0] + ea[1] * force[1] + ea[2] * force[2];
                dp += kp[l] * W[a] * (9.0 * eua * ef - 3.0 * fu[l]);
                dm += km[l] * W[a] * 3.0 * ef;
            }
            f[a][l] += dp + dm;
            f[b][l] += dp - dm;
        }
    }
}

/// [`collide_model`] for [`LANES`] cells at once, with the same operations in
/// the same order per lane (bit-identical to it), so that the CPU's turbulent
/// runs use the SIMD lanes too.
#[inline(always)]
pub fn collide_model_lanes(f: &mut [[f32; LANES]; Q], tau0: f32, model: Model, force: [f32; 3]) {
    const L: usize = LANES;
    let (rho, u) = moments_lanes(f, force);
    let mut drho = [0.0f32; L];
    // stress.
    const PAIRS: [(usize, usize); 6] = [(0, 0), (1, 1), (2, 2), (0, 1), (0, 2), (1, 2)];
    let mut m = [[0.0f32; L]; 6];
    for p in 0..9 {
        let e = E[2 * p + 1];
        for l in 0..L {
            let s = f[2 * p + 1][l] + f[2 * p + 2][l];
            for (k, (x, y)) in PAIRS.into_iter().enumerate() {
                let c = e[x] * e[y];
                if c > 0 {
                    m[k][l] += s;
                } else if c < 0 {
                    m[k][l] -= s;
                }
            }
        }
    }
    let mut pi = [[0.0f32; 6]; L];
    let mut tau = [tau0; L];
    for l in 0..L {
        let (r, ux, uy, uz) = (rho[l], u[0][l], u[1][l], u[2][l]);
        let d = (r - 1.0) * (1.0 / 3.0);
        pi[l] = [
            m[0][l] - (d + r * ux * ux),
            m[1][l] - (d + r * uy * uy),
            m[2][l] - (d + r * uz * uz),
            m[3][l] - r * ux * uy,
            m[4][l] - r * ux * uz,
            m[5][l] - r * uy * uz,
        ];
        if model.smagorinsky != 0.0 {
            tau[l] = smagorinsky_tau(tau0, model.smagorinsky, r, &pi[l]);
        }
    }
    if !model.regularized {
        let rates = if model.trt {
            Collision::Trt
        } else {
            Collision::Bgk
        };
        let (mut op, mut om) = ([0.0f32; L], [0.0f32; L]);
        for l in 0..L {
            (op[l], om[l]) = relaxation_rates(rates, tau[l]);
        }
        collide_lanes_at(f, op, om, force);
        return;
    }
    let has_force = force[0] != 0.0 || force[1] != 0.0 || force[2] != 0.0;
    let (mut op, mut usq, mut fu, mut kp, mut trace, mut keep) = (
        [0.0f32; L],
        [0.0f32; L],
        [0.0f32; L],
        [0.0f32; L],
        [0.0f32; L],
        [0.0f32; L],
    );
    for l in 0..L {
        op[l] = 1.0 / tau[l];
        drho[l] = rho[l] - 1.0;
        usq[l] = 1.5 * (u[0][l] * u[0][l] + u[1][l] * u[1][l] + u[2][l] * u[2][l]);
        fu[l] = force[0] * u[0][l] + force[1] * u[1][l] + force[2] * u[2][l];
        kp[l] = 1.0 - 0.5 * op[l];
        trace[l] = (pi[l][0] + pi[l][1] + pi[l][2]) * (1.0 / 3.0);
        keep[l] = (1.0 - op[l]) * 4.5;
        f[0][l] = W[0] * drho[l] + W[0] * rho[l] * (-usq[l]) + keep[l] * W[0] * (-trace[l]);
        if has_force {
            f[0][l] += kp[l] * W[0] * (-3.0 * fu[l]);
        }
    }
    for p in 0..9 {
        let (a, b) = (2 * p + 1, 2 * p + 2);
        let w = W[a];
        let e = E[a];
        let (ea, eb) = (E[a].map(|c| c as f32), E[b].map(|c| c as f32));
        for l in 0..L {
            let ul = [u[0][l], u[1][l], u[2][l]];
            let eua = ea[0] * ul[0] + ea[1] * ul[1] + ea[2] * ul[2];
            let eub = eb[0] * ul[0] + eb[1] * ul[1] + eb[2] * ul[2];
            let feqa = w * drho[l] + w * rho[l] * (3.0 * eua + 4.5 * eua * eua - usq[l]);
            let feqb = w * drho[l] + w * rho[l] * (3.0 * eub + 4.5 * eub * eub - usq[l]);
            let mut diag = 0.0f32;
            let mut off = 0.0f32;
            for (k, (x, y)) in PAIRS.into_iter().enumerate() {
                let c = e[x] * e[y];
                let acc = if k < 3 { &mut diag } else { &mut off };
                if c > 0 {
                    *acc += pi[l][k];
                } else if c < 0 {
                    *acc -= pi[l][k];
                }
            }
            let h = diag + 2.0 * off - trace[l];
            let mut pp = 0.5 * (feqa + feqb) + keep[l] * w * h;
            let mut mm = 0.5 * (feqa - feqb);
            if has_force {
                let ef = ea[0] * force[0] + ea[1] * force[1] + ea[2] * force[2];
                pp += kp[l] * w * (9.0 * eua * ef - 3.0 * fu[l]);
                mm += (1.0 - op[l]) * w * (-1.5 * ef) + kp[l] * w * 3.0 * ef;
            }
            f[a][l] = pp + mm;
            f[b][l] = pp - mm;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_sum_to_one_and_opposites_pair_up() {
        let s: f64 = W.iter().map(|&w| w as f64).sum();
        assert!((s - 1.0).abs() < 1e-7);
        for i in 0..Q {
            let o = opposite(i);
            assert_eq!(opposite(o), i);
            for d in 0..3 {
                assert_eq!(E[i][d], -E[o][d]);
            }
        }
    }

    #[test]
    fn lane_collision_is_bit_identical_to_scalar_collision() {
        let mut seed = 7u32;
        let mut rnd = || {
            seed = seed.wrapping_mul(1664525).wrapping_add(1013904223);
            (seed >> 8) as f32 / (1u32 << 24) as f32 - 0.5
        };
        for force in [[0.0; 3], [1e-5, -2e-5, 3e-6]] {
            let mut lanes = [[0.0f32; LANES]; Q];
            let mut scalar = [[0.0f32; Q]; LANES];
            for l in 0..LANES {
                // The first lanes at rest or with equal components, exactly:
                // e.u is then an exact zero in some directions.
                let mut f = match l {
                    0 => equilibrium_shifted(1.0, [0.0; 3]),
                    1 => equilibrium_shifted(1.01, [0.05, 0.05, 0.0]),
                    2 => equilibrium_shifted(0.99, [0.03, 0.0, -0.03]),
                    _ => {
                        let u = [0.1 * rnd(), 0.1 * rnd(), 0.1 * rnd()];
                        equilibrium_shifted(1.0 + 0.02 * rnd(), u)
                    }
                };
                if l > 2 {
                    for v in f.iter_mut() {
                        *v += 0.001 * rnd();
                    }
                }
                for i in 0..Q {
                    lanes[i][l] = f[i];
                }
                scalar[l] = f;
            }
            collide_lanes(&mut lanes, 1.4, 1.1, force);
            for (l, f) in scalar.iter_mut().enumerate() {
                collide(f, 1.4, 1.1, force);
                for i in 0..Q {
                    assert_eq!(f[i].to_bits(), lanes[i][l].to_bits(), "lane {l} dir {i}");
                }
            }
        }
    }

    #[test]
    fn lane_model_collision_is_bit_identical_to_scalar_model_collision() {
        let cells = random_cells(4 * LANES);
        for collision in [Collision::Bgk, Collision::Trt, Collision::Regularized] {
            for constant in [0.0, 0.1, 0.17] {
                let Some(model) = Model::of(collision, constant) else {
                    continue;
                };
                for force in [[0.0; 3], [1e-5, -2e-5, 3e-6]] {
                    for (tau0, group) in [0.5003f32, 0.52, 0.9].iter().zip(cells.chunks(LANES)) {
                        let mut lanes = [[0.0f32; LANES]; Q];
                        for (l, f) in group.iter().enumerate() {
                            for i in 0..Q {
                                lanes[i][l] = f[i];
                            }
                        }
                        collide_model_lanes(&mut lanes, *tau0, model, force);
                        for (l, f) in group.iter().enumerate() {
                            let mut f = *f;
                            collide_model(&mut f, *tau0, model, force);
                            for i in 0..Q {
                                assert_eq!(
                                    f[i].to_bits(),
                                    lanes[i][l].to_bits(),
                                    "{model:?} τ0 {tau0} force {force:?}: lane {l} dir {i}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    /// Near-equilibrium populations with a random non-equilibrium part.
    fn random_cells(n: usize) -> Vec<[f32; Q]> {
        let mut seed = 11u32;
        let mut rnd = || {
            seed = seed.wrapping_mul(1664525).wrapping_add(1013904223);
            (seed >> 8) as f32 / (1u32 << 24) as f32 - 0.5
        };
        (0..n)
            .map(|_| {
                let u = [0.1 * rnd(), 0.1 * rnd(), 0.1 * rnd()];
                let mut f = equilibrium_shifted(1.0 + 0.02 * rnd(), u);
                for v in f.iter_mut() {
                    *v += 0.002 * rnd();
                }
                f
            })
            .collect()
    }

    #[test]
    fn the_model_collision_without_model_is_trt_bit_for_bit() {
        let plain = Model {
            trt: true,
            regularized: false,
            smagorinsky: 0.0,
        };
        let tau = 0.53;
        let (op, om) = relaxation_rates(Collision::Trt, tau);
        for force in [[0.0; 3], [1e-5, -2e-5, 3e-6]] {
            for mut f in random_cells(20) {
                let mut g = f;
                collide(&mut f, op, om, force);
                collide_model(&mut g, tau, plain, force);
                assert_eq!(f.map(f32::to_bits), g.map(f32::to_bits));
            }
        }
    }

    #[test]
    fn model_collisions_conserve_mass_and_momentum_and_keep_equilibrium() {
        let models = [
            Model::of(Collision::Regularized, 0.0).unwrap(),
            Model::of(Collision::Trt, 0.1).unwrap(),
            Model::of(Collision::Bgk, 0.17).unwrap(),
            Model::of(Collision::Regularized, 0.1).unwrap(),
        ];
        for m in models {
            // A body force adds exactly its momentum per step.
            for force in [[0.0; 3], [1e-4, -2e-4, 5e-5]] {
                for f in random_cells(20) {
                    let mut g = f;
                    collide_model(&mut g, 0.5001, m, force);
                    let ((r0, j0), (r1, j1)) = (moments(&f), moments(&g));
                    assert!((r0 - r1).abs() < 1e-6, "{m:?}: mass {r0} -> {r1}");
                    for d in 0..3 {
                        let gain = j1[d] - j0[d];
                        assert!(
                            (gain - force[d]).abs() < 1e-6,
                            "{m:?}: momentum gain {gain}"
                        );
                    }
                }
            }
            let feq = equilibrium_shifted(1.01, [0.05, -0.02, 0.03]);
            let mut g = feq;
            collide_model(&mut g, 0.6, m, [0.0; 3]);
            for i in 0..Q {
                assert!((g[i] - feq[i]).abs() < 1e-7, "{m:?}: equilibrium moved");
            }
        }
    }

    #[test]
    fn regularized_collision_is_equilibrium_plus_the_relaxed_stress_projection() {
        let m = Model::of(Collision::Regularized, 0.0).unwrap();
        let tau = 0.8f32;
        for a in random_cells(10) {
            let mut out = a;
            collide_model(&mut out, tau, m, [0.0; 3]);
            let (rho, j) = moments(&a);
            let u = velocity(rho, j, [0.0; 3]);
            let feq = equilibrium_shifted(rho, u);
            // Π = Σ e e (f − f_eq), summed directly in f64.
            let mut pi = [[0.0f64; 3]; 3];
            for i in 0..Q {
                for x in 0..3 {
                    for y in 0..3 {
                        pi[x][y] += (E[i][x] * E[i][y]) as f64 * (a[i] - feq[i]) as f64;
                    }
                }
            }
            let trace = (pi[0][0] + pi[1][1] + pi[2][2]) / 3.0;
            for i in 0..Q {
                let mut h = -trace;
                for x in 0..3 {
                    for y in 0..3 {
                        h += (E[i][x] * E[i][y]) as f64 * pi[x][y];
                    }
                }
                let want = feq[i] as f64 + (1.0 - 1.0 / tau as f64) * 4.5 * W[i] as f64 * h;
                assert!(
                    (out[i] as f64 - want).abs() < 1e-7,
                    "direction {i}: {} vs {want}",
                    out[i]
                );
            }
        }
    }

    #[test]
    fn second_moment_of_weights_is_cs2() {
        for a in 0..3 {
            for b in 0..3 {
                let m: f64 = (0..Q)
                    .map(|i| W[i] as f64 * (E[i][a] * E[i][b]) as f64)
                    .sum();
                let want = if a == b { 1.0 / 3.0 } else { 0.0 };
                assert!((m - want).abs() < 1e-7, "{a}{b}: {m}");
            }
        }
    }
}
