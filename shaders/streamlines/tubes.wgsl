// Streamlines as lit tubes: each segment between consecutive points is a quad
// facing the eye, as wide as the tube; the fragment shader bends the normal
// across it as a cylinder's would be. Six vertices per segment (not
// instanced); segment k is k mod (points−1) of line k div (points−1);
// segments touching a NO_POINT slot vanish.

//!include scene/common.wgsl

@group(0) @binding(0) var<storage, read> points: array<vec4<f32>>;   // xyz, speed
@group(0) @binding(1) var<uniform> camera: Camera;

struct VsOut {
    @builtin(position) clip: vec4<f32>,
    @location(0) across: f32,
    @location(1) value: f32,
    @location(2) side: vec3<f32>,
    @location(3) facing: vec3<f32>,
    @location(4) world: vec3<f32>,
}

// Two triangles of a quad, corners in [-1, 1]²: x along the segment (start,
// end), y across it.
const QUAD = array<vec2<f32>, 6>(
    vec2<f32>(-1.0, -1.0), vec2<f32>(1.0, -1.0), vec2<f32>(1.0, 1.0),
    vec2<f32>(-1.0, -1.0), vec2<f32>(1.0, 1.0), vec2<f32>(-1.0, 1.0),
);

@vertex
fn vs_main(@builtin(vertex_index) v: u32) -> VsOut {
    let i = v / 6u;
    let per = u32(camera.extra.y);
    let line = i / (per - 1u);
    let a = points[line * per + i % (per - 1u)];
    let b = points[line * per + i % (per - 1u) + 1u];
    var out: VsOut;
    out.clip = NOWHERE;
    let along = b.xyz - a.xyz;
    if (a.x <= NO_POINT || b.x <= NO_POINT || dot(along, along) == 0.0) {
        return out;
    }
    let q = QUAD[v % 6u];
    let p = select(a, b, q.x > 0.0);
    let dir = normalize(along);
    let to_eye = normalize(camera.eye.xyz - p.xyz);
    var side = cross(dir, to_eye);
    if (dot(side, side) < 1e-12) {
        side = cross(dir, select(vec3<f32>(0.0, 0.0, 1.0), vec3<f32>(1.0, 0.0, 0.0), abs(dir.z) > 0.9));
    }
    side = normalize(side);
    var facing = cross(side, dir);
    if (dot(facing, to_eye) < 0.0) {
        facing = -facing;
    }
    out.world = p.xyz + side * q.y * camera.extra.x;
    out.clip = camera.view_proj * vec4<f32>(out.world, 1.0);
    out.across = q.y;
    out.value = p.w;
    out.side = side;
    out.facing = facing;
    return out;
}

@fragment
fn fs_main(in: VsOut) -> @location(0) vec4<f32> {
    let s = clamp(in.across, -1.0, 1.0);
    let n = normalize(in.side) * s + normalize(in.facing) * sqrt(1.0 - s * s);
    let to_eye = normalize(camera.eye.xyz - in.world);
    return vec4<f32>(shade(map_colour(in.value), n, to_eye), 1.0);
}
