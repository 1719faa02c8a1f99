// Volume rendering: one ray per pixel through the scalar volume, front to
// back, into a picture of premultiplied colour and opacity that
// volume/compose.wgsl lays over the opaque scene. A compute pass, in 8×8
// tiles of rays: as a fragment shader over the whole target the same march
// took 25 to 30 times as long on the H100 (BENCHMARKS.md, 2026-11-24). The transfer
// function gives an opacity a per cell of path, so a segment of length l
// lets (1 − a)^l of the light through and the picture does not depend on the
// step (a constant field gives Beer–Lambert's exp(−σL) exactly, whatever the
// step). Rays stop at the depth of the opaque scene drawn before (surfaces,
// obstacles, slices, streamlines) and once almost no light gets through.

// Mirrors src/render/gpu_data.rs `MarchParams`.
struct MarchParams {
    inverse_view_proj: mat4x4<f32>,
    march: vec4<f32>,   // step (cells), sample index, unused, unused
}

@group(0) @binding(1) var<uniform> params: MarchParams;
// The field as fractions of its colour range, 8 bits (volume/quantize.wgsl).
@group(0) @binding(2) var levels: texture_3d<f32>;
@group(0) @binding(3) var depth: texture_depth_2d;
// Linear, clamped: for the levels and the table alike.
@group(0) @binding(4) var trilinear: sampler;
@group(0) @binding(7) var picture: texture_storage_2d<rgba16float, write>;
// The transfer function at 256 points of the colour range, linear between:
// colour, and log2 of the light a cell of path lets through
// (src/render/raymarch.rs, transfer_table). A texture: the texture units
// fetch for a warp whose rays all want other entries at their full rate,
// where loads from a buffer would queue up one cache line after another.
@group(0) @binding(5) var table: texture_2d<f32>;

// Light left when the march stops: what lies further cannot change a byte.
const OPAQUE: f32 = 1.0 / 512.0;
const MAX_STEPS: u32 = 16384u;

fn transfer(t: f32) -> vec4<f32> {
    let u = (clamp(t, 0.0, 1.0) * 255.0 + 0.5) / 256.0;
    return textureSampleLevel(table, trilinear, vec2<f32>(u, 0.5), 0.0);
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

@compute @workgroup_size(8, 8)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let size = textureDimensions(depth);
    if (id.x >= size.x || id.y >= size.y) {
        return;
    }
    textureStore(picture, id.xy, march(vec2<f32>(id.xy) + 0.5));
}

// Colour and opacity along the ray through the pixel centre `frag`.
fn march(frag: vec2<f32>) -> vec4<f32> {
    let pixels = vec2<f32>(textureDimensions(depth));
    let ndc = vec2<f32>(frag.x / pixels.x * 2.0 - 1.0, 1.0 - frag.y / pixels.y * 2.0);
    // From the near plane to the opaque scene (or the far plane).
    let origin = unproject(vec3<f32>(ndc, 0.0));
    let stop = unproject(vec3<f32>(ndc, textureLoad(depth, vec2<i32>(frag.xy), 0)));
    let reach = length(stop - origin);
    let dir = (stop - origin) / reach;
    // The domain's box, as the outline draws it.
    let lo = vec3<f32>(-0.5);
    let cells = vec3<f32>(textureDimensions(levels));
    let hi = cells - vec3<f32>(0.5);
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
    var colour = vec3<f32>(0.0);
    var through = 1.0;
    var a = t0;
    var b = min(t0 + first, t1);
    let steps = min(u32(ceil((t1 - t0) / h)) + 2u, MAX_STEPS);
    for (var k = 0u; k < steps; k++) {
        if (b > a) {
            let p = origin + dir * (0.5 * (a + b));
            let tf = transfer(textureSampleLevel(levels, trilinear, (p + 0.5) / cells, 0.0).x);
            let alpha = 1.0 - exp2(tf.a * (b - a));
            colour += through * alpha * tf.rgb;
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
