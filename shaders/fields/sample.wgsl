// Trilinear sampling between cell centres by hand: r32float and rgba32float
// volumes cannot be filtered by a sampler on every adapter. A shader that
// says `//!include fields/sample.wgsl` declares `sampled: texture_3d<f32>`.

fn texel(c: vec3<i32>) -> vec4<f32> {
    let top = vec3<i32>(textureDimensions(sampled)) - vec3<i32>(1);
    return textureLoad(sampled, clamp(c, vec3<i32>(0), top), 0);
}

// The field at p (cells; cell centres at whole numbers), clamped to the grid.
fn sample_at(p: vec3<f32>) -> vec4<f32> {
    let top = vec3<f32>(textureDimensions(sampled)) - vec3<f32>(1.0);
    let q = clamp(p, vec3<f32>(0.0), top);
    let base = vec3<i32>(floor(q));
    let f = q - vec3<f32>(base);
    let c00 = mix(texel(base), texel(base + vec3<i32>(1, 0, 0)), f.x);
    let c10 = mix(texel(base + vec3<i32>(0, 1, 0)), texel(base + vec3<i32>(1, 1, 0)), f.x);
    let c01 = mix(texel(base + vec3<i32>(0, 0, 1)), texel(base + vec3<i32>(1, 0, 1)), f.x);
    let c11 = mix(texel(base + vec3<i32>(0, 1, 1)), texel(base + vec3<i32>(1, 1, 1)), f.x);
    return mix(mix(c00, c10, f.y), mix(c01, c11, f.y), f.z);
}
