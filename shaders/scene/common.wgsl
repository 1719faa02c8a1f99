// Shared by the scene's draw shaders: a shader that says
// `//!include scene/common.wgsl` gets this text in its place
// (src/render/shaders.rs). The includer declares `camera: Camera`.

// Mirrors src/render/gpu_data.rs `CameraUniform`. One per drawable and eye.
struct Camera {
    view_proj: mat4x4<f32>,
    eye: vec4<f32>,          // this eye's position (cells), w unused
    colour: vec4<f32>,       // plain colour
    light: vec4<f32>,        // direction towards the light, w unused
    colour_map: vec4<f32>,   // lo, hi, map (0: plain colour, 1: viridis, 2: cool-warm, 3: inferno, 4: turbo), unused
    extra: vec4<f32>,        // impostor or tube radius (cells), points per streamline, unused, unused
}

// Marks a streamline slot past the end of its line (streamlines/trace.wgsl).
const NO_POINT: f32 = -1e30;

// Piecewise-linear maps through five control colours (mirrors
// src/render/colour.rs, ColourMap::sample).
fn ramp(t: f32, c: array<vec3<f32>, 5>) -> vec3<f32> {
    let x = clamp(t, 0.0, 1.0) * 4.0;
    let i = min(u32(floor(x)), 3u);
    return mix(c[i], c[i + 1u], x - f32(i));
}

fn map_colour(v: f32) -> vec3<f32> {
    return map_colour_over(v, camera.colour_map.xy);
}

// The colour map at `v` in the range [lo, hi] (one that stays on the GPU).
fn map_colour_over(v: f32, range: vec2<f32>) -> vec3<f32> {
    let m = u32(camera.colour_map.z);
    if (m == 0u) {
        return camera.colour.rgb;
    }
    let span = range.y - range.x;
    let t = select(0.5, (v - range.x) / span, span > 0.0);
    if (m == 1u) {
        return ramp(t, array<vec3<f32>, 5>(
            vec3<f32>(0.267, 0.005, 0.329), vec3<f32>(0.230, 0.322, 0.546), vec3<f32>(0.128, 0.567, 0.551),
            vec3<f32>(0.369, 0.789, 0.383), vec3<f32>(0.993, 0.906, 0.144)));
    }
    if (m == 3u) {
        return ramp(t, array<vec3<f32>, 5>(
            vec3<f32>(0.001, 0.000, 0.014), vec3<f32>(0.341, 0.063, 0.430), vec3<f32>(0.736, 0.216, 0.330),
            vec3<f32>(0.976, 0.557, 0.035), vec3<f32>(0.988, 1.000, 0.643)));
    }
    if (m == 4u) {
        return ramp(t, array<vec3<f32>, 5>(
            vec3<f32>(0.190, 0.072, 0.232), vec3<f32>(0.155, 0.733, 0.924), vec3<f32>(0.641, 0.990, 0.235),
            vec3<f32>(0.984, 0.581, 0.148), vec3<f32>(0.480, 0.016, 0.011)));
    }
    return ramp(t, array<vec3<f32>, 5>(
        vec3<f32>(0.230, 0.299, 0.754), vec3<f32>(0.552, 0.690, 0.996), vec3<f32>(0.865, 0.865, 0.865),
        vec3<f32>(0.957, 0.604, 0.482), vec3<f32>(0.706, 0.016, 0.150)));
}

// Two-sided Lambert: the normal is turned towards the eye first.
fn shade(base: vec3<f32>, normal: vec3<f32>, to_eye: vec3<f32>) -> vec3<f32> {
    var n = normalize(normal + vec3<f32>(1e-12));
    if (dot(n, to_eye) < 0.0) {
        n = -n;
    }
    let diffuse = max(dot(n, normalize(camera.light.xyz)), 0.0);
    return base * (0.25 + 0.75 * diffuse);
}

// A vertex that makes its triangle empty (all corners at one point).
const NOWHERE = vec4<f32>(0.0, 0.0, -2.0, 1.0);
