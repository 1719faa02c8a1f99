// Draws the extracted triangles straight from the storage buffer (indirect draw,
// no CPU read-back): two-sided Lambert lighting from the field gradient.

struct Camera {
    view_proj: mat4x4<f32>,
    eye: vec4<f32>,
    colour: vec4<f32>,
    light: vec4<f32>,   // direction towards the light, w unused
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
}

@vertex
fn vs_main(@builtin(vertex_index) i: u32) -> VsOut {
    let v = vertices[i];
    var out: VsOut;
    out.clip = camera.view_proj * vec4<f32>(v.position.xyz, 1.0);
    out.normal = v.normal.xyz;
    out.world = v.position.xyz;
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
    return vec4<f32>(camera.colour.rgb * shade, 1.0);
}
