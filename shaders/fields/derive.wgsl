// Derived scalar of the selected plot type, from the field texture (rho, ux, uy, uz).
// CPU twin: src/render/derive.rs (keep in sync).

struct DeriveParams {
    size: vec3<u32>,
    plot: u32,   // 0 pressure, 1 speed, 2 ux, 3 uy, 4 uz, 5 |vorticity|, 6 scalar curl (z), 7 Q, 8 concentration
    origin: vec3<u32>, // the box derived starts here (the dispatch covers it)
    pad: u32,
}

@group(0) @binding(0) var fields: texture_3d<f32>;
@group(0) @binding(1) var scalar: texture_storage_3d<r32float, write>;
@group(0) @binding(2) var<uniform> params: DeriveParams;
// The first contaminant field (zeros in runs without one).
@group(0) @binding(3) var concentration: texture_3d<f32>;

fn velocity(p: vec3<i32>) -> vec3<f32> {
    let q = clamp(p, vec3<i32>(0), vec3<i32>(params.size) - vec3<i32>(1));
    return textureLoad(fields, q, 0).yzw;
}

// d u / d x_axis by central differences, one-sided at the grid border.
fn derivative(p: vec3<i32>, axis: i32) -> vec3<f32> {
    var e = vec3<i32>(0);
    e[axis] = 1;
    let n = i32(params.size[axis]);
    let lo = max(p[axis] - 1, 0);
    let hi = min(p[axis] + 1, n - 1);
    if (hi == lo) {
        return vec3<f32>(0.0);
    }
    let a = p + e * (lo - p[axis]);
    let b = p + e * (hi - p[axis]);
    return (velocity(b) - velocity(a)) / f32(hi - lo);
}

@compute @workgroup_size(4, 4, 4)
fn main(@builtin(global_invocation_id) global: vec3<u32>) {
    let id = global + params.origin;
    if (any(id >= params.size)) {
        return;
    }
    let p = vec3<i32>(id);
    let f = textureLoad(fields, p, 0);
    var value = 0.0;
    switch params.plot {
        case 0u: { value = (f.x - 1.0) / 3.0; }
        case 1u: { value = length(f.yzw); }
        case 2u: { value = f.y; }
        case 3u: { value = f.z; }
        case 4u: { value = f.w; }
        case 8u: { value = textureLoad(concentration, p, 0).x; }
        default: {
            // J[j] = d u / d x_j (columns of the velocity gradient).
            let dx = derivative(p, 0);
            let dy = derivative(p, 1);
            let dz = derivative(p, 2);
            let w = vec3<f32>(dy.z - dz.y, dz.x - dx.z, dx.y - dy.x);
            if (params.plot == 5u) {
                value = length(w);
            } else if (params.plot == 6u) {
                value = w.z;
            } else {
                // Q = (|Omega|^2 - |S|^2) / 2 with J_ij = d u_i / d x_j.
                var j = mat3x3<f32>(dx, dy, dz);   // j[c][r] = d u_r / d x_c
                var s2 = 0.0;
                var o2 = 0.0;
                for (var r = 0; r < 3; r++) {
                    for (var c = 0; c < 3; c++) {
                        let jrc = j[c][r];
                        let jcr = j[r][c];
                        let s = 0.5 * (jrc + jcr);
                        let o = 0.5 * (jrc - jcr);
                        s2 += s * s;
                        o2 += o * o;
                    }
                }
                value = 0.5 * (o2 - s2);
            }
        }
    }
    textureStore(scalar, p, vec4<f32>(value, 0.0, 0.0, 0.0));
}
