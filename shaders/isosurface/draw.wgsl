// Draws the extracted triangles straight from the storage buffer (indirect draw,
// no CPU read-back): two-sided Lambert lighting from the field gradient.

//!include scene/common.wgsl

struct Vertex {
    position: vec4<f32>,   // xyz in cells, w = colour field there
    normal: vec4<f32>,
}

@group(0) @binding(0) var<storage, read> vertices: array<Vertex>;
@group(0) @binding(1) var<uniform> camera: Camera;

struct VsOut {
    @builtin(position) clip: vec4<f32>,
    @location(0) normal: vec3<f32>,
    @location(1) world: vec3<f32>,
    @location(2) value: f32,
}

@vertex
fn vs_main(@builtin(vertex_index) i: u32) -> VsOut {
    let v = vertices[i];
    var out: VsOut;
    out.clip = camera.view_proj * vec4<f32>(v.position.xyz, 1.0);
    out.normal = v.normal.xyz;
    out.world = v.position.xyz;
    out.value = v.position.w;
    return out;
}

@fragment
fn fs_main(in: VsOut) -> @location(0) vec4<f32> {
    let to_eye = normalize(camera.eye.xyz - in.world);
    return vec4<f32>(shade(map_colour(in.value), in.normal, to_eye), 1.0);
}
