// Accumulation antialiasing: the running mean of jittered renderings, kept in
// linear light in an rgba32float texture (ping-pong: previous → next).

struct AccumulateParams {
    // Samples already in `previous`; the new one weighs 1/(samples + 1).
    samples: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var sample: texture_2d<f32>;      // this rendering (sRGB-encoded rgba8)
@group(0) @binding(1) var previous: texture_2d<f32>;
@group(0) @binding(2) var next: texture_storage_2d<rgba32float, write>;
@group(0) @binding(3) var<uniform> params: AccumulateParams;

fn to_linear(c: vec3<f32>) -> vec3<f32> {
    return select(pow((c + 0.055) / 1.055, vec3<f32>(2.4)), c / 12.92, c <= vec3<f32>(0.04045));
}

@compute @workgroup_size(8, 8)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if (any(id.xy >= textureDimensions(next))) {
        return;
    }
    let s = vec4<f32>(to_linear(textureLoad(sample, id.xy, 0).rgb), 1.0);
    var mean = s;
    if (params.samples > 0u) {
        mean = mix(textureLoad(previous, id.xy, 0), s, 1.0 / f32(params.samples + 1u));
    }
    textureStore(next, id.xy, mean);
}
