// Draws the extracted triangles straight from the storage buffer (indirect draw,
// no CPU read-back): two-sided Lambert lighting from the field gradient, per
// vertex. Surfaces of large grids are mostly triangles of a pixel or two, where
// per-pixel lighting looks the same but costs about half the pass (one varying
// instead of seven, on the few graphics units of compute GPUs like the H100).

//!include scene/common.wgsl

struct Vertex {
    position: vec4<f32>,   // xyz in cells, w = colour field there
    normal: vec4<f32>,
}

@group(0) @binding(0) var<storage, read> vertices: array<Vertex>;
@group(0) @binding(1) var<uniform> camera: Camera;

struct VsOut {
    @builtin(position) clip: vec4<f32>,
    @location(0) colour: vec3<f32>,
}

@vertex
fn vs_main(@builtin(vertex_index) i: u32) -> VsOut {
    let v = vertices[i];
    var out: VsOut;
    out.clip = camera.view_proj * vec4<f32>(v.position.xyz, 1.0);
    let to_eye = normalize(camera.eye.xyz - v.position.xyz);
    out.colour = shade(map_colour(v.position.w), v.normal.xyz, to_eye);
    return out;
}

@fragment
fn fs_main(in: VsOut) -> @location(0) vec4<f32> {
    return vec4<f32>(in.colour, 1.0);
}
