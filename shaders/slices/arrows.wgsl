// In-plane velocity arrows on the slices: one instance per arrow on a grid
// of `spacing` cells across each plane, its length the in-plane speed over
// the largest speed (an arrow of the largest speed spans 0.9 of the
// spacing), lifted a little off the plane towards the eye so that the slice
// does not hide it. Nine vertices: a shaft (two triangles) and a head.

//!include scene/common.wgsl
//!include fields/sample.wgsl

// camera.extra: the planes' positions (cells, below -1: off) as in
// slices/draw.wgsl, and the spacing in cells. ranges[3].y: the largest
// speed on the planes (fields/minmax.wgsl). camera.colour: the arrows' colour. Instances of plane k
// start at k * PLANE_INSTANCES (src/render/slices.rs).
@group(0) @binding(0) var<uniform> camera: Camera;
@group(0) @binding(1) var sampled: texture_3d<f32>;   // ρ, ux, uy, uz
@group(0) @binding(2) var<storage, read> ranges: array<vec2<f32>, 4>;

const PLANE_INSTANCES: u32 = 1048576u;

@vertex
fn vs_main(@builtin(vertex_index) v: u32, @builtin(instance_index) instance: u32) -> @builtin(position) vec4<f32> {
    let plane = instance / PLANE_INSTANCES;
    let i = instance % PLANE_INSTANCES;
    let position = camera.extra[plane];
    let spacing = camera.extra.w;
    let size = vec3<f32>(textureDimensions(sampled));
    let a = (plane + 1u) % 3u;
    let b = (plane + 2u) % 3u;
    let across = u32(floor((size[a] - 1.0) / spacing)) + 1u;
    var c = vec3<f32>(0.0);
    c[plane] = position;
    // Centred on the plane: the same margin at both ends.
    c[a] = 0.5 * (size[a] - 1.0 - spacing * f32(across - 1u)) + spacing * f32(i % across);
    c[b] = 0.5 * (size[b] - 1.0 - spacing * floor((size[b] - 1.0) / spacing)) + spacing * f32(i / across);
    var u = sample_at(c).yzw;
    u[plane] = 0.0;
    let speed = length(u);
    let top = ranges[3].y;
    if (position < -1.0 || !(speed > 0.0) || !(top > 0.0)) {
        return NOWHERE;
    }
    let len = 0.9 * spacing * min(speed / top, 1.0);
    let d = u / speed;
    var normal = vec3<f32>(0.0);
    normal[plane] = select(-1.0, 1.0, camera.eye[plane] > position);
    let side = cross(normal, d);
    let head = min(0.4 * len, 0.35 * spacing);
    let shaft = 0.05 * spacing;
    let wide = 0.18 * spacing;
    let tail = c - 0.5 * len * d;
    let neck = c + (0.5 * len - head) * d;
    let tip = c + 0.5 * len * d;
    var corners = array<vec3<f32>, 9>(
        tail - shaft * side, neck - shaft * side, neck + shaft * side,
        tail - shaft * side, neck + shaft * side, tail + shaft * side,
        neck - wide * side, tip, neck + wide * side);
    let p = corners[v] + 0.02 * spacing * normal;
    return camera.view_proj * vec4<f32>(p, 1.0);
}

@fragment
fn fs_main() -> @location(0) vec4<f32> {
    return vec4<f32>(camera.colour.rgb, 1.0);
}
