// Min and max of the scalar field, or of the values on one axis-aligned plane
// through it (a slice: linear between the two layers around it, as the slice
// shader samples them; in the plane the slice interpolates between these
// values, so they hold its extremes): a staged tree reduction (each workgroup
// reduces a strided share into `partials`, then one workgroup reduces those).
// Exact over the whole field: min/max involve no rounding. NaNs are skipped.
// Several planes' first stages write their partials side by side (`base`) and
// one finishing stage over all of them gives the range over the planes. The
// result stays on the GPU for the passes that colour by it.

struct ReduceParams {
    size: vec3<u32>,
    groups: u32,   // workgroups of the first stage
    floor: f32,    // lower end of the range at least this (Q: only Q > 0 marks vortices)
    axis: u32,     // 0, 1, 2: the plane normal to this axis at `position`; 3: everywhere
    position: f32, // cells
    base: u32,     // first of this reduction's partials
    slot: u32,     // finish: the result's index
    symmetric: u32, // finish: a signed range becomes (−m, m), m the larger end
    pad: vec2<u32>,
}

@group(0) @binding(0) var scalar: texture_3d<f32>;
@group(0) @binding(1) var<storage, read_write> partials: array<vec2<f32>>;
@group(0) @binding(2) var<storage, read_write> result: array<vec2<f32>>;
@group(0) @binding(3) var<uniform> params: ReduceParams;

const WG: u32 = 256u;
const BIG: f32 = 3.4e38;
var<workgroup> lo: array<f32, WG>;
var<workgroup> hi: array<f32, WG>;

fn tree(t: u32) {
    for (var h = WG / 2u; h > 0u; h = h / 2u) {
        workgroupBarrier();
        if (t < h) {
            lo[t] = min(lo[t], lo[t + h]);
            hi[t] = max(hi[t], hi[t + h]);
        }
    }
    workgroupBarrier();
}

fn value(i: u32) -> f32 {
    if (params.axis > 2u) {
        let p = vec3<u32>(i % params.size.x, (i / params.size.x) % params.size.y, i / (params.size.x * params.size.y));
        return textureLoad(scalar, vec3<i32>(p), 0).x;
    }
    let a = (params.axis + 1u) % 3u;
    let b = (params.axis + 2u) % 3u;
    let top = f32(params.size[params.axis] - 1u);
    let at = clamp(params.position, 0.0, top);
    let below = u32(floor(at));
    var p = vec3<u32>(0u);
    p[a] = i % params.size[a];
    p[b] = i / params.size[a];
    p[params.axis] = below;
    var q = p;
    q[params.axis] = min(below + 1u, params.size[params.axis] - 1u);
    let lo = textureLoad(scalar, vec3<i32>(p), 0).x;
    let hi = textureLoad(scalar, vec3<i32>(q), 0).x;
    return mix(lo, hi, at - f32(below));
}

@compute @workgroup_size(256)
fn partial(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    var n = params.size.x * params.size.y * params.size.z;
    if (params.axis < 3u) {
        n = n / params.size[params.axis];
    }
    var a = BIG;
    var b = -BIG;
    for (var i = wg.x * WG + t; i < n; i += params.groups * WG) {
        let v = value(i);
        if (v == v) {
            a = min(a, v);
            b = max(b, v);
        }
    }
    lo[t] = a;
    hi[t] = b;
    tree(t);
    if (t == 0u) {
        partials[params.base + wg.x] = vec2<f32>(lo[0], hi[0]);
    }
}

@compute @workgroup_size(256)
fn finish(@builtin(local_invocation_index) t: u32) {
    var a = BIG;
    var b = -BIG;
    for (var i = t; i < params.groups; i += WG) {
        a = min(a, partials[params.base + i].x);
        b = max(b, partials[params.base + i].y);
    }
    lo[t] = a;
    hi[t] = b;
    tree(t);
    if (t == 0u) {
        // A floor at or above the maximum would leave no range: ignored.
        let bottom = select(lo[0], max(lo[0], params.floor), params.floor < hi[0]);
        // Mirrors ColourMap::range (src/render/colour.rs).
        let m = max(-bottom, hi[0]);
        let centred = params.symmetric != 0u && bottom < 0.0 && hi[0] > 0.0;
        result[params.slot] = select(vec2<f32>(bottom, hi[0]), vec2<f32>(-m, m), centred);
    }
}
