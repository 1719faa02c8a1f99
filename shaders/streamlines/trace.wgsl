// Streamlines: classical RK4 at a fixed time step through trilinearly
// interpolated velocity, dx/dt = u(x). Eight invocations trace each line
// together, each fetching one corner of every interpolation: a line's steps
// are a chain of dependent fetches, and one invocation per line leaves the
// GPU waiting on memory with too few lines in flight. A line
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

// Eight lines per workgroup, eight lanes per line.
const LANES: u32 = 8u;
var<workgroup> partial: array<vec3<f32>, 64>;
var<workgroup> alive_lines: array<u32, 8>;
var<workgroup> any_alive: u32;

// Trilinear velocity at p: lane k weighs and fetches corner k, then every lane
// sums the eight in the same order (so all lanes agree bit for bit).
// Workgroup-uniform control flow only: every invocation calls this.
fn velocity(p: vec3<f32>, lane: u32, slot: u32) -> vec3<f32> {
    let m = vec3<i32>(params.size) - vec3<i32>(1);
    let q = clamp(p, vec3<f32>(0.0), vec3<f32>(m));
    let lo = min(vec3<i32>(floor(q)), max(m - vec3<i32>(1), vec3<i32>(0)));
    let t = q - vec3<f32>(lo);
    let o = vec3<i32>(i32(lane & 1u), i32((lane >> 1u) & 1u), i32((lane >> 2u) & 1u));
    let w = mix(vec3<f32>(1.0) - t, t, vec3<f32>(o));
    partial[slot * LANES + lane] = w.x * w.y * w.z * textureLoad(fields, min(lo + o, m), 0).yzw;
    workgroupBarrier();
    var u = vec3<f32>(0.0);
    for (var k = 0u; k < LANES; k++) {
        u += partial[slot * LANES + k];
    }
    workgroupBarrier();
    return u;
}

fn inside(p: vec3<f32>) -> bool {
    return all(p >= vec3<f32>(0.0)) && all(p <= vec3<f32>(params.size - vec3<u32>(1u)));
}

fn blocked(p: vec3<f32>) -> bool {
    return textureLoad(solid, vec3<i32>(round(p)), 0).x > 0.5;
}

@compute @workgroup_size(64)
fn main(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) group: vec3<u32>) {
    let lane = li % LANES;
    let slot = li / LANES;
    let line = group.x * 8u + slot;
    let real = line < params.lines;
    let base = line * (params.steps + 1u);
    var p = seeds[min(line, params.lines - 1u)].xyz;
    var alive = real && inside(p) && !blocked(p);
    var u = velocity(p, lane, slot);
    var n = 0u;
    if (alive) {
        if (lane == 0u) {
            points[base] = vec4<f32>(p, length(u));
        }
        n = 1u;
    }
    let h = params.dt;
    for (var s = 0u; s < params.steps; s++) {
        alive = alive && length(u) >= params.min_speed;
        // Leave together once every line of the workgroup has stopped.
        if (lane == 0u) {
            alive_lines[slot] = u32(alive);
        }
        workgroupBarrier();
        if (li == 0u) {
            var count = 0u;
            for (var k = 0u; k < 8u; k++) {
                count += alive_lines[k];
            }
            any_alive = count;
        }
        if (workgroupUniformLoad(&any_alive) == 0u) {
            break;
        }
        let k2 = velocity(p + 0.5 * h * u, lane, slot);
        let k3 = velocity(p + 0.5 * h * k2, lane, slot);
        let k4 = velocity(p + h * k3, lane, slot);
        let next = p + (h / 6.0) * (u + 2.0 * k2 + 2.0 * k3 + k4);
        alive = alive && inside(next) && !blocked(next);
        if (alive) {
            p = next;
        }
        u = velocity(p, lane, slot);
        if (alive) {
            if (lane == 0u) {
                points[base + n] = vec4<f32>(p, length(u));
            }
            n++;
        }
    }
    if (real) {
        if (lane == 0u) {
            lengths[line] = n;
        }
        for (var s = n + lane; s <= params.steps; s += LANES) {
            points[base + s] = vec4<f32>(NO_POINT);
        }
    }
}
