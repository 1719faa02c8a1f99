// Axis-aligned slices through the field: one quad per plane across the
// domain's box, each fragment colour-mapped from the field at its point
// (trilinear between cell centres), solid cells in the obstacle colour, and
// optional contour lines a pixel wide where the field crosses evenly spaced
// levels inside the colour range.

//!include scene/common.wgsl
//!include fields/sample.wgsl

// camera.extra: the planes' positions along x, y and z in cells (below -1:
// off), and the number of contour levels (0: none). camera.colour: the
// obstacle colour. `sampled`: the scalar this plane shows (each plane is
// drawn with its own). ranges[plane]: its colour range, computed on the GPU
// (fields/minmax.wgsl) or fixed; ranges[3]: the speed (slices/arrows.wgsl).
@group(0) @binding(0) var<uniform> camera: Camera;
@group(0) @binding(1) var sampled: texture_3d<f32>;
@group(0) @binding(2) var solid: texture_3d<f32>;
@group(0) @binding(3) var<storage, read> ranges: array<vec2<f32>, 4>;

struct VsOut {
    @builtin(position) clip: vec4<f32>,
    @location(0) world: vec3<f32>,
    @location(1) @interpolate(flat) plane: u32,
}

@vertex
fn vs_main(@builtin(vertex_index) i: u32) -> VsOut {
    let plane = i / 6u;
    let corners = array<vec2<f32>, 6>(
        vec2<f32>(0.0, 0.0), vec2<f32>(1.0, 0.0), vec2<f32>(1.0, 1.0),
        vec2<f32>(0.0, 0.0), vec2<f32>(1.0, 1.0), vec2<f32>(0.0, 1.0));
    let t = corners[i % 6u];
    let position = camera.extra[plane];
    var out: VsOut;
    if (position < -1.0) {
        out.clip = NOWHERE;
        out.world = vec3<f32>(0.0);
        out.plane = plane;
        return out;
    }
    // The box the domain outline draws: half a cell beyond the cell centres.
    let lo = vec3<f32>(-0.5);
    let hi = vec3<f32>(textureDimensions(sampled)) - vec3<f32>(0.5);
    var p = mix(lo, hi, vec3<f32>(0.5));
    p[plane] = position;
    let a = (plane + 1u) % 3u;
    let b = (plane + 2u) % 3u;
    p[a] = mix(lo[a], hi[a], t.x);
    p[b] = mix(lo[b], hi[b], t.y);
    out.clip = camera.view_proj * vec4<f32>(p, 1.0);
    out.world = p;
    out.plane = plane;
    return out;
}

@fragment
fn fs_main(in: VsOut) -> @location(0) vec4<f32> {
    // Derivatives first, in uniform control flow.
    let v = sample_at(in.world).x;
    let range = ranges[in.plane];
    let span = range.y - range.x;
    let t = (v - range.x) / select(1.0, span, span > 0.0) * camera.extra.w;
    let width = max(fwidth(t), 1e-6);
    let top = vec3<i32>(textureDimensions(solid)) - vec3<i32>(1);
    let cell = clamp(vec3<i32>(round(in.world)), vec3<i32>(0), top);
    if (textureLoad(solid, cell, 0).x > 0.5) {
        return vec4<f32>(camera.colour.rgb, 1.0);
    }
    var colour = map_colour_over(v, range);
    let level = round(t);
    // Interior levels only: the range's ends would trace the noise around a
    // field's minimum (vorticity near zero far from the wake).
    if (camera.extra.w > 0.0 && span > 0.0 && level >= 1.0 && level <= camera.extra.w - 1.0) {
        // Distance to the nearest level in pixels: dark where below one.
        let d = abs(t - level) / width;
        colour = mix(vec3<f32>(0.05), colour, clamp(d, 0.0, 1.0));
    }
    return vec4<f32>(colour, 1.0);
}
