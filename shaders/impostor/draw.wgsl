// Sphere impostors: each sphere is one triangle facing the eye, just large
// enough to hold the sphere's silhouette (three vertices per sphere, not
// instanced: tiny instances waste most of each vertex warp); the fragment
// shader casts the pixel's ray at the
// sphere, discards misses, lights the hit point with the sphere normal and
// writes its true depth, so spheres cut into each other and into the mesh
// correctly. Also draws streamlines as chains of spheres (slots holding
// NO_POINT are skipped).

//!include scene/common.wgsl

@group(0) @binding(0) var<storage, read> spheres: array<vec4<f32>>;   // xyz centre, w colour value
@group(0) @binding(1) var<uniform> camera: Camera;

struct VsOut {
    @builtin(position) clip: vec4<f32>,
    @location(0) world: vec3<f32>,
    @location(1) @interpolate(flat) sphere: vec4<f32>,
}

// The triangle around the unit circle (inradius 1).
const TRIANGLE = array<vec2<f32>, 3>(
    vec2<f32>(0.0, 2.0), vec2<f32>(-1.7320508, -1.0), vec2<f32>(1.7320508, -1.0),
);

@vertex
fn vs_main(@builtin(vertex_index) v: u32) -> VsOut {
    let s = spheres[v / 3u];
    let r = camera.extra.x;
    var out: VsOut;
    out.sphere = s;
    let to_eye = camera.eye.xyz - s.xyz;
    let d = length(to_eye);
    if (s.x <= NO_POINT || d <= r * 1.001) {
        out.clip = NOWHERE;
        out.world = s.xyz;
        return out;
    }
    let f = to_eye / d;
    let helper = select(vec3<f32>(0.0, 0.0, 1.0), vec3<f32>(1.0, 0.0, 0.0), abs(f.z) > 0.9);
    let right = normalize(cross(helper, f));
    let up = cross(f, right);
    // Radius of the silhouette cone where it crosses the plane through the
    // centre facing the eye.
    let half = r * d / sqrt(d * d - r * r);
    let q = TRIANGLE[v % 3u];
    out.world = s.xyz + (right * q.x + up * q.y) * half;
    out.clip = camera.view_proj * vec4<f32>(out.world, 1.0);
    return out;
}

struct FsOut {
    @location(0) colour: vec4<f32>,
    @builtin(frag_depth) depth: f32,
}

@fragment
fn fs_main(in: VsOut) -> FsOut {
    let r = camera.extra.x;
    let o = camera.eye.xyz;
    let dir = normalize(in.world - o);
    let oc = o - in.sphere.xyz;
    let b = dot(dir, oc);
    let disc = b * b - (dot(oc, oc) - r * r);
    if (disc < 0.0) {
        discard;
    }
    let hit = o + (-b - sqrt(disc)) * dir;
    let clip = camera.view_proj * vec4<f32>(hit, 1.0);
    var out: FsOut;
    out.colour = vec4<f32>(shade(map_colour(in.sphere.w), hit - in.sphere.xyz, -dir), 1.0);
    out.depth = clip.z / clip.w;
    return out;
}
