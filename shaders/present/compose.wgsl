// The picture shown: the accumulated image (mono), or the left and right
// images combined into a red/cyan anaglyph, in linear light, written sRGB-encoded.
// Simple: red from the left eye, green and blue from the right. Dubois: the
// least-squares matrices (SPEC §4), out = clamp(L·left + R·right).
// CPU twin: src/render/present.rs `compose_pixel` (tests).

struct ComposeParams {
    mode: u32,   // 0 mono, 1 red/cyan, 2 Dubois
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var left: texture_2d<f32>;
@group(0) @binding(1) var right: texture_2d<f32>;
@group(0) @binding(2) var picture: texture_storage_2d<rgba8unorm, write>;
@group(0) @binding(3) var<uniform> params: ComposeParams;

fn to_srgb(c: vec3<f32>) -> vec3<f32> {
    let x = clamp(c, vec3<f32>(0.0), vec3<f32>(1.0));
    return select(1.055 * pow(x, vec3<f32>(1.0 / 2.4)) - 0.055, x * 12.92, x <= vec3<f32>(0.0031308));
}

@compute @workgroup_size(8, 8)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if (any(id.xy >= textureDimensions(picture))) {
        return;
    }
    let l = textureLoad(left, id.xy, 0).rgb;
    let r = textureLoad(right, id.xy, 0).rgb;
    var c = l;
    if (params.mode == 1u) {
        c = vec3<f32>(l.r, r.g, r.b);
    } else if (params.mode == 2u) {
        // Rows of the matrices (WGSL matrices are column-major: transpose).
        let ml = transpose(mat3x3<f32>(
            vec3<f32>(0.437, 0.449, 0.164),
            vec3<f32>(-0.062, -0.062, -0.024),
            vec3<f32>(-0.048, -0.050, -0.017)));
        let mr = transpose(mat3x3<f32>(
            vec3<f32>(-0.011, -0.032, -0.007),
            vec3<f32>(0.377, 0.761, 0.009),
            vec3<f32>(-0.026, -0.093, 1.234)));
        c = ml * l + mr * r;
    }
    textureStore(picture, id.xy, vec4<f32>(to_srgb(c), 1.0));
}
