// Streamlines: one invocation per seed integrates dx/dt = u(x) with classical
// RK4 at a fixed time step through trilinearly interpolated velocity. A line
// stops when its next point would lie in a solid cell (nearest cell) or outside
// the domain, where the speed falls below `min_speed`, or after `steps` steps.
// Line k owns slots k·(steps+1) .. (k+1)·(steps+1) of `points`; slots past its
// end hold NO_POINT, so the draw shaders need no lengths.

struct TraceParams {
    size: vec3<u32>,
    steps: u32,
    dt: f32,
    min_speed: f32,
    lines: u32,
    _pad: u32,
}

const NO_POINT: f32 = -1e30;

@group(0) @binding(0) var fields: texture_3d<f32>;   // ρ, ux, uy, uz
@group(0) @binding(1) var solid: texture_3d<f32>;    // 1 in obstacles and walls
@group(0) @binding(2) var<storage, read> seeds: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> points: array<vec4<f32>>;   // xyz, speed
@group(0) @binding(4) var<storage, read_write> lengths: array<u32>;
@group(0) @binding(5) var<uniform> params: TraceParams;

fn velocity(p: vec3<f32>) -> vec3<f32> {
    let m = vec3<i32>(params.size) - vec3<i32>(1);
    let q = clamp(p, vec3<f32>(0.0), vec3<f32>(m));
    let lo = min(vec3<i32>(floor(q)), max(m - vec3<i32>(1), vec3<i32>(0)));
    let t = q - vec3<f32>(lo);
    var u = vec3<f32>(0.0);
    for (var k = 0; k < 8; k++) {
        let o = vec3<i32>(k & 1, (k >> 1) & 1, (k >> 2) & 1);
        let w = mix(vec3<f32>(1.0) - t, t, vec3<f32>(o));
        u += w.x * w.y * w.z * textureLoad(fields, min(lo + o, m), 0).yzw;
    }
    return u;
}

fn inside(p: vec3<f32>) -> bool {
    return all(p >= vec3<f32>(0.0)) && all(p <= vec3<f32>(params.size - vec3<u32>(1u)));
}

fn blocked(p: vec3<f32>) -> bool {
    return textureLoad(solid, vec3<i32>(round(p)), 0).x > 0.5;
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let line = id.x;
    if (line >= params.lines) {
        return;
    }
    let base = line * (params.steps + 1u);
    var p = seeds[line].xyz;
    var n = 0u;
    if (inside(p) && !blocked(p)) {
        var u = velocity(p);
        points[base] = vec4<f32>(p, length(u));
        n = 1u;
        let h = params.dt;
        for (var s = 0u; s < params.steps; s++) {
            if (length(u) < params.min_speed) {
                break;
            }
            let k2 = velocity(p + 0.5 * h * u);
            let k3 = velocity(p + 0.5 * h * k2);
            let k4 = velocity(p + h * k3);
            let next = p + (h / 6.0) * (u + 2.0 * k2 + 2.0 * k3 + k4);
            if (!inside(next) || blocked(next)) {
                break;
            }
            p = next;
            u = velocity(p);
            points[base + n] = vec4<f32>(p, length(u));
            n++;
        }
    }
    lengths[line] = n;
    for (var s = n; s <= params.steps; s++) {
        points[base + s] = vec4<f32>(NO_POINT);
    }
}
