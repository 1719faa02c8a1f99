// Sphere impostors, the fast isosurface: one sphere per cube cell whose corners
// straddle the isovalue (some below, some not: the cubes marching tetrahedra
// would put triangles in), appended with an atomic bump counter. The sphere
// sits at the mean of the isovalue crossings on the cube's edges and carries
// the colour field there. Same bindings and overflow protocol as
// isosurface/extract.wgsl (src/render/isosurface/mod.rs drives both).

struct ExtractParams {
    size: vec3<u32>,
    iso: f32,
    lo: vec3<u32>,
    capacity: u32,   // spheres the buffer holds
    hi: vec3<u32>,
    // 1: `iso` is a fraction of the range the min/max pass left in `range`
    // (the slider's relative setting, with no read-back before extraction).
    relative: u32,
}

@group(0) @binding(0) var scalar: texture_3d<f32>;
@group(0) @binding(1) var<storage, read_write> spheres: array<vec4<f32>>;   // xyz centre (cells), w colour value
@group(0) @binding(2) var<storage, read_write> counter: array<atomic<u32>, 2>;   // spheres, overflow
@group(0) @binding(3) var<uniform> params: ExtractParams;
@group(0) @binding(4) var<storage, read_write> draw_args: array<u32, 4>;
@group(0) @binding(5) var colour_field: texture_3d<f32>;
@group(0) @binding(6) var<storage, read> range: array<f32, 2>;

// The cube's 12 edges as corner pairs (corner k = base + (k&1, k>>1&1, k>>2&1)).
var<private> EDGES: array<vec2<u32>, 12> = array<vec2<u32>, 12>(
    vec2<u32>(0u, 1u), vec2<u32>(2u, 3u), vec2<u32>(4u, 5u), vec2<u32>(6u, 7u),
    vec2<u32>(0u, 2u), vec2<u32>(1u, 3u), vec2<u32>(4u, 6u), vec2<u32>(5u, 7u),
    vec2<u32>(0u, 4u), vec2<u32>(1u, 5u), vec2<u32>(2u, 6u), vec2<u32>(3u, 7u),
);

fn corner(base: vec3<u32>, k: u32) -> vec3<u32> {
    return base + vec3<u32>(k & 1u, (k >> 1u) & 1u, (k >> 2u) & 1u);
}

@compute @workgroup_size(4, 4, 4)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if (any(id + vec3<u32>(1u) >= params.size) || any(id < params.lo) || any(id + vec3<u32>(1u) > params.hi)) {
        return;
    }
    // A relative isovalue is a fraction of the range the min/max pass found.
    let iso = select(params.iso, range[0] + params.iso * (range[1] - range[0]), params.relative == 1u);
    var v: array<f32, 8>;
    var below = 0u;
    for (var k = 0u; k < 8u; k++) {
        v[k] = textureLoad(scalar, vec3<i32>(corner(id, k)), 0).x;
        below += select(0u, 1u, v[k] < iso);
    }
    if (below == 0u || below == 8u) {
        return;
    }
    // The edge graph is connected, so a straddling cube has a crossing edge.
    var sum = vec3<f32>(0.0);
    var colour = 0.0;
    var n = 0.0;
    for (var e = 0u; e < 12u; e++) {
        let i = EDGES[e].x;
        let j = EDGES[e].y;
        if ((v[i] < iso) != (v[j] < iso)) {
            let t = (iso - v[i]) / (v[j] - v[i]);
            let a = corner(id, i);
            let b = corner(id, j);
            sum += mix(vec3<f32>(a), vec3<f32>(b), t);
            let ca = textureLoad(colour_field, vec3<i32>(a), 0).x;
            let cb = textureLoad(colour_field, vec3<i32>(b), 0).x;
            colour += mix(ca, cb, t);
            n += 1.0;
        }
    }
    let slot = atomicAdd(&counter[0], 1u);
    if (slot >= params.capacity) {
        atomicStore(&counter[1], 1u);
        return;
    }
    spheres[slot] = vec4<f32>(sum / n, colour / n);
}

// Indirect draw arguments: one triangle (3 vertices) per sphere.
@compute @workgroup_size(1)
fn args() {
    draw_args[0] = 3u * min(atomicLoad(&counter[0]), params.capacity);
    draw_args[1] = 1u;
    draw_args[2] = 0u;
    draw_args[3] = 0u;
}
