// Volume rendering: one ray per pixel through the scalar volume, front to
// back, drawn over the opaque scene with premultiplied alpha. The transfer
// function gives an opacity per cell of path, so a segment of length l lets
// (1 − a)^l of the light through and the picture does not depend on the step
// (a constant field gives Beer–Lambert's exp(−σL) exactly, whatever the
// step). Rays stop at the depth of the opaque scene drawn before (surfaces,
// obstacles, slices, streamlines) and once almost no light gets through.

//!include scene/common.wgsl
//!include fields/sample.wgsl

// Mirrors src/render/gpu_data.rs `MarchParams`.
struct MarchParams {
    inverse_view_proj: mat4x4<f32>,
    handles: array<vec4<f32>, 4>,   // (t, opacity per cell) pairs, t ascending
    march: vec4<f32>,               // step (cells), sample index, handle count, unused
}

// camera: the colour map (colour_map) of the rendered field.
@group(0) @binding(0) var<uniform> camera: Camera;
@group(0) @binding(1) var<uniform> params: MarchParams;
@group(0) @binding(2) var sampled: texture_3d<f32>;
@group(0) @binding(3) var depth: texture_depth_2d;

// Light left when the march stops: what lies further cannot change a byte.
const OPAQUE: f32 = 1.0 / 512.0;
const MAX_STEPS: u32 = 16384u;

@vertex
fn vs_main(@builtin(vertex_index) i: u32) -> @builtin(position) vec4<f32> {
    // One triangle over the whole target.
    let p = vec2<f32>(f32((i << 1u) & 2u), f32(i & 2u));
    return vec4<f32>(p * 2.0 - 1.0, 0.0, 1.0);
}

fn handle(k: u32) -> vec2<f32> {
    let h = params.handles[k / 2u];
    return select(h.xy, h.zw, (k & 1u) == 1u);
}

// Opacity per cell of path at t (a fraction of the colour range): linear
// between the handles, flat beyond the first and the last (mirrors
// src/render/raymarch.rs, Opacity::at).
fn opacity(t: f32) -> f32 {
    let n = u32(params.march.z);
    if (n == 0u) {
        return 0.0;
    }
    var prev = handle(0u);
    if (t <= prev.x) {
        return prev.y;
    }
    for (var k = 1u; k < n; k++) {
        let h = handle(k);
        if (t <= h.x) {
            let w = h.x - prev.x;
            return mix(prev.y, h.y, select(1.0, (t - prev.x) / w, w > 0.0));
        }
        prev = h;
    }
    return prev.y;
}

// A number in [0, 1) per pixel: where its first step falls.
fn hash(p: vec2<u32>) -> f32 {
    var h = (p.x * 0x8da6b343u) ^ (p.y * 0xd8163841u);
    h ^= h >> 13u;
    h *= 0x5bd1e995u;
    h ^= h >> 15u;
    return f32(h >> 8u) / 16777216.0;
}

fn unproject(ndc: vec3<f32>) -> vec3<f32> {
    let p = params.inverse_view_proj * vec4<f32>(ndc, 1.0);
    return p.xyz / p.w;
}

@fragment
fn fs_main(@builtin(position) frag: vec4<f32>) -> @location(0) vec4<f32> {
    let pixels = vec2<f32>(textureDimensions(depth));
    let ndc = vec2<f32>(frag.x / pixels.x * 2.0 - 1.0, 1.0 - frag.y / pixels.y * 2.0);
    // From the near plane to the opaque scene (or the far plane).
    let origin = unproject(vec3<f32>(ndc, 0.0));
    let stop = unproject(vec3<f32>(ndc, textureLoad(depth, vec2<i32>(frag.xy), 0)));
    let reach = length(stop - origin);
    let dir = (stop - origin) / reach;
    // The domain's box, as the outline draws it.
    let lo = vec3<f32>(-0.5);
    let hi = vec3<f32>(textureDimensions(sampled)) - vec3<f32>(0.5);
    let safe = select(dir, vec3<f32>(1e-12), abs(dir) < vec3<f32>(1e-12));
    let ta = (lo - origin) / safe;
    let tb = (hi - origin) / safe;
    let near = min(ta, tb);
    let far = max(ta, tb);
    let t0 = max(max(max(near.x, near.y), near.z), 0.0);
    let t1 = min(min(min(far.x, far.y), far.z), reach);
    if (t1 <= t0) {
        return vec4<f32>(0.0);
    }
    let h = max(params.march.x, 0.05);
    // A different first step in every pixel and in every accumulated sample:
    // the antialiasing accumulation refines the march while the view is still.
    let first = fract(hash(vec2<u32>(frag.xy)) + params.march.y * 0.618034) * h;
    let span = camera.colour_map.y - camera.colour_map.x;
    var colour = vec3<f32>(0.0);
    var through = 1.0;
    var a = t0;
    var b = min(t0 + first, t1);
    let steps = min(u32(ceil((t1 - t0) / h)) + 2u, MAX_STEPS);
    for (var k = 0u; k < steps; k++) {
        if (b > a) {
            let v = sample_at(origin + dir * (0.5 * (a + b))).x;
            let t = select(0.5, (v - camera.colour_map.x) / span, span > 0.0);
            let o = clamp(opacity(t), 0.0, 0.9999);
            let alpha = 1.0 - pow(1.0 - o, b - a);
            colour += through * alpha * map_colour(v);
            through *= 1.0 - alpha;
            if (through < OPAQUE) {
                break;
            }
        }
        if (b >= t1) {
            break;
        }
        a = b;
        b = min(b + h, t1);
    }
    return vec4<f32>(colour, 1.0 - through);
}
