// Min and max of the scalar field: a staged tree reduction (each workgroup
// reduces a strided share into `partials`, then one workgroup reduces those).
// Exact: min/max involve no rounding. NaNs are skipped.

struct ReduceParams {
    size: vec3<u32>,
    groups: u32,   // workgroups of the first stage
    floor: f32,    // lower end of the range at least this (Q: only Q > 0 marks vortices)
}

@group(0) @binding(0) var scalar: texture_3d<f32>;
@group(0) @binding(1) var<storage, read_write> partials: array<vec2<f32>>;
@group(0) @binding(2) var<storage, read_write> result: vec2<f32>;
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

@compute @workgroup_size(256)
fn partial(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let n = params.size.x * params.size.y * params.size.z;
    var a = BIG;
    var b = -BIG;
    for (var i = wg.x * WG + t; i < n; i += params.groups * WG) {
        let p = vec3<u32>(i % params.size.x, (i / params.size.x) % params.size.y, i / (params.size.x * params.size.y));
        let v = textureLoad(scalar, vec3<i32>(p), 0).x;
        if (v == v) {
            a = min(a, v);
            b = max(b, v);
        }
    }
    lo[t] = a;
    hi[t] = b;
    tree(t);
    if (t == 0u) {
        partials[wg.x] = vec2<f32>(lo[0], hi[0]);
    }
}

@compute @workgroup_size(256)
fn finish(@builtin(local_invocation_index) t: u32) {
    var a = BIG;
    var b = -BIG;
    for (var i = t; i < params.groups; i += WG) {
        a = min(a, partials[i].x);
        b = max(b, partials[i].y);
    }
    lo[t] = a;
    hi[t] = b;
    tree(t);
    if (t == 0u) {
        // A floor at or above the maximum would leave no range: ignored.
        result = vec2<f32>(select(lo[0], max(lo[0], params.floor), params.floor < hi[0]), hi[0]);
    }
}
