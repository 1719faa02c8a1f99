// Draws the extracted triangles straight from the storage buffer (indirect draw,
// no CPU read-back): two-sided Lambert lighting from the field gradient.

struct Camera {
    view_proj: mat4x4<f32>,
    eye: vec4<f32>,
    colour: vec4<f32>,
    light: vec4<f32>,
    // Colour map of the vertex value (position.w): lo, hi, map (0: plain colour,
    // 1: viridis, 2: cool-warm), unused.
    colour_map: vec4<f32>,   // direction towards the light, w unused
}

struct Vertex {
    position: vec4<f32>,
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

// Piecewise-linear maps through five control colours (mirrors
// src/render/colour.rs, ColourMap::sample).
fn ramp(t: f32, c: array<vec3<f32>, 5>) -> vec3<f32> {
    let x = clamp(t, 0.0, 1.0) * 4.0;
    let i = min(u32(floor(x)), 3u);
    return mix(c[i], c[i + 1u], x - f32(i));
}

fn map_colour(v: f32) -> vec3<f32> {
    let m = u32(camera.colour_map.z);
    if (m == 0u) {
        return camera.colour.rgb;
    }
    let span = camera.colour_map.y - camera.colour_map.x;
    let t = select(0.5, (v - camera.colour_map.x) / span, span > 0.0);
    if (m == 1u) {
        return ramp(t, array<vec3<f32>, 5>(
            vec3<f32>(0.267, 0.005, 0.329), vec3<f32>(0.230, 0.322, 0.546), vec3<f32>(0.128, 0.567, 0.551),
            vec3<f32>(0.369, 0.789, 0.383), vec3<f32>(0.993, 0.906, 0.144)));
    }
    return ramp(t, array<vec3<f32>, 5>(
        vec3<f32>(0.230, 0.299, 0.754), vec3<f32>(0.552, 0.690, 0.996), vec3<f32>(0.865, 0.865, 0.865),
        vec3<f32>(0.957, 0.604, 0.482), vec3<f32>(0.706, 0.016, 0.150)));
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
    var n = normalize(in.normal + vec3<f32>(1e-12));
    let to_eye = normalize(camera.eye.xyz - in.world);
    if (dot(n, to_eye) < 0.0) {
        n = -n;
    }
    let diffuse = max(dot(n, normalize(camera.light.xyz)), 0.0);
    let shade = 0.25 + 0.75 * diffuse;
    return vec4<f32>(map_colour(in.value) * shade, 1.0);
}
