// The volume rendering's field as 8-bit fractions of its colour range, four
// cells to a word, rows padded to `pitch` bytes: a buffer copied into an
// r8unorm texture. Eight-bit texels are filtered at the texture units' full
// rate and four times as many fit their caches as 32-bit ones, and the
// transfer function has 256 points anyway (src/render/raymarch.rs).

// Mirrors src/render/gpu_data.rs `QuantizeParams`.
struct QuantizeParams {
    size: vec3<u32>,
    pitch: u32,     // bytes per row, a multiple of 256
}

@group(0) @binding(0) var scalar: texture_3d<f32>;
@group(0) @binding(1) var<storage, read_write> levels: array<u32>;
@group(0) @binding(2) var<uniform> params: QuantizeParams;
// The colour range, computed on the GPU (fields/minmax.wgsl) or fixed.
@group(0) @binding(3) var<storage, read> range: vec2<f32>;

fn level(x: u32, y: u32, z: u32, lo: f32, scale: f32) -> u32 {
    if (x >= params.size.x) {
        return 0u;
    }
    let v = textureLoad(scalar, vec3<i32>(vec3<u32>(x, y, z)), 0).x;
    let t = select(0.5, (v - lo) * scale, scale > 0.0);
    // NaN (a blown-up cell) reads as the bottom of the range.
    return u32(round(clamp(select(0.0, t, t == t), 0.0, 1.0) * 255.0));
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let words = params.pitch / 4u;
    if (id.x >= words || id.y >= params.size.y || id.z >= params.size.z) {
        return;
    }
    let span = range.y - range.x;
    // An empty, infinite or NaN range: everything at the middle.
    let scale = select(0.0, 1.0 / span, span > 0.0 && span < 3.4e38);
    let x = id.x * 4u;
    let word = level(x, id.y, id.z, range.x, scale)
        | (level(x + 1u, id.y, id.z, range.x, scale) << 8u)
        | (level(x + 2u, id.y, id.z, range.x, scale) << 16u)
        | (level(x + 3u, id.y, id.z, range.x, scale) << 24u);
    levels[(id.z * params.size.y + id.y) * words + id.x] = word;
}
