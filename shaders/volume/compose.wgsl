// Lays the volume rendering's picture (premultiplied colour and opacity,
// volume/march.wgsl) over the scene: one triangle over the whole target,
// blended as "over" by the pipeline.

@group(0) @binding(0) var picture: texture_2d<f32>;

@vertex
fn vs_main(@builtin(vertex_index) i: u32) -> @builtin(position) vec4<f32> {
    let p = vec2<f32>(f32((i << 1u) & 2u), f32(i & 2u));
    return vec4<f32>(p * 2.0 - 1.0, 0.0, 1.0);
}

@fragment
fn fs_main(@builtin(position) frag: vec4<f32>) -> @location(0) vec4<f32> {
    return textureLoad(picture, vec2<i32>(frag.xy), 0);
}
