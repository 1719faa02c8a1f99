// Marching tetrahedra: one invocation per cube cell, six tetrahedra per cube
// around the diagonal 0-7 (src/render/isosurface/tables.rs, whose test checks
// the packed corners and bit masks below), triangles appended
// with an atomic bump counter; an overflow flag tells the CPU to grow the buffer.
// Edge points are interpolated from the corner of lower grid index, so cubes
// sharing an edge compute the same bits (watertight). CPU twin: isosurface/cpu.rs.

struct ExtractParams {
    size: vec3<u32>,
    iso: f32,
    // Cubes are extracted only where all corners lie in [lo, hi] (the boundary
    // layers of non-periodic faces carry wall values, not flow).
    lo: vec3<u32>,
    capacity: u32,   // vertices the buffer holds
    hi: vec3<u32>,
    // 1: `iso` is a fraction of the range the min/max pass left in `range`
    // (the slider's relative setting, with no read-back before extraction).
    relative: u32,
}

struct Vertex {
    position: vec4<f32>,   // xyz in cells, w = colour field there
    normal: vec4<f32>,     // field gradient direction, w = 0
}

@group(0) @binding(0) var scalar: texture_3d<f32>;
@group(0) @binding(1) var<storage, read_write> vertices: array<Vertex>;
@group(0) @binding(2) var<storage, read_write> counter: array<atomic<u32>, 2>;   // vertices, overflow
@group(0) @binding(3) var<uniform> params: ExtractParams;
// The field that colours the surface (the scalar itself when not colouring).
@group(0) @binding(5) var colour_field: texture_3d<f32>;
// [min, max] of the scalar (fields/minmax.wgsl), for relative isovalues.
@group(0) @binding(6) var<storage, read> range: array<f32, 2>;

var<private> iso: f32;

// The six tetrahedra are (0, p, q, 7) for consecutive (p, q) around the
// cycle 1 3 2 6 4 5 1, packed a nibble each so that no array is indexed.
const CYCLE: u32 = 0x1546231u;

fn tet_corners(t: u32) -> vec4<u32> {
    return vec4<u32>(0u, (CYCLE >> (4u * t)) & 15u, (CYCLE >> (4u * t + 4u)) & 15u, 7u);
}

fn corner(base: vec3<u32>, k: u32) -> vec3<u32> {
    return base + vec3<u32>(k & 1u, (k >> 1u) & 1u, (k >> 2u) & 1u);
}

fn value(p: vec3<u32>) -> f32 {
    return textureLoad(scalar, vec3<i32>(p), 0).x;
}

fn gradient(p: vec3<u32>) -> vec3<f32> {
    let q = vec3<i32>(p);
    let m = vec3<i32>(params.size) - vec3<i32>(1);
    var g = vec3<f32>(0.0);
    for (var a = 0; a < 3; a++) {
        var e = vec3<i32>(0);
        e[a] = 1;
        let lo = clamp(q - e, vec3<i32>(0), m);
        let hi = clamp(q + e, vec3<i32>(0), m);
        let d = f32(hi[a] - lo[a]);
        if (d > 0.0) {
            g[a] = (textureLoad(scalar, hi, 0).x - textureLoad(scalar, lo, 0).x) / d;
        }
    }
    return g;
}

// Crossing on the edge between cube corners i < j (lower corner = lower grid index).
fn edge(base: vec3<u32>, i: u32, j: u32, vi: f32, vj: f32) -> Vertex {
    let a = corner(base, i);
    let b = corner(base, j);
    let t = (iso - vi) / (vj - vi);
    let pa = vec3<f32>(a);
    let pb = vec3<f32>(b);
    let p = pa + t * (pb - pa);
    let n = mix(gradient(a), gradient(b), t);
    let ca = textureLoad(colour_field, vec3<i32>(a), 0).x;
    let cb = textureLoad(colour_field, vec3<i32>(b), 0).x;
    return Vertex(vec4<f32>(p, mix(ca, cb, t)), vec4<f32>(n, 0.0));
}

fn crossing(base: vec3<u32>, c: vec4<u32>, v: vec4<f32>, i: u32, j: u32) -> Vertex {
    if (c[i] < c[j]) {
        return edge(base, c[i], c[j], v[i], v[j]);
    }
    return edge(base, c[j], c[i], v[j], v[i]);
}

// The value at cube corner k, from corners 0-3 and 4-7.
fn cube_value(low: vec4<f32>, high: vec4<f32>, k: u32) -> f32 {
    return select(low[k & 3u], high[k & 3u], k >= 4u);
}

fn emit(at: u32, a: Vertex, b: Vertex, c: Vertex) {
    vertices[at] = a;
    vertices[at + 1u] = b;
    vertices[at + 2u] = c;
}

// Triangles in the tetrahedron whose corners are the bits of `tet`.
fn pieces(below: u32, tet: u32) -> u32 {
    let inside = countOneBits(below & tet);
    return select(0u, select(1u, 2u, inside == 2u), inside > 0u && inside < 4u);
}

@compute @workgroup_size(4, 4, 4)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if (any(id + vec3<u32>(1u) >= params.size) || any(id < params.lo) || any(id + vec3<u32>(1u) > params.hi)) {
        return;
    }
    // A relative isovalue is a fraction of the range the min/max pass found.
    iso = select(params.iso, range[0] + params.iso * (range[1] - range[0]), params.relative == 1u);
    // Which corners lie below the isovalue, as bits: most cubes have all or
    // none, and leave here without touching an array.
    let low = vec4<f32>(value(corner(id, 0u)), value(corner(id, 1u)), value(corner(id, 2u)), value(corner(id, 3u)));
    let high = vec4<f32>(value(corner(id, 4u)), value(corner(id, 5u)), value(corner(id, 6u)), value(corner(id, 7u)));
    let bl = select(vec4<u32>(0u), vec4<u32>(1u, 2u, 4u, 8u), low < vec4<f32>(iso));
    let bh = select(vec4<u32>(0u), vec4<u32>(16u, 32u, 64u, 128u), high < vec4<f32>(iso));
    let below = bl.x | bl.y | bl.z | bl.w | bh.x | bh.y | bh.z | bh.w;
    if (below == 0u || below == 255u) {
        return;
    }
    // Count first, then reserve once per cube.
    let count = pieces(below, 0x8Bu) + pieces(below, 0x8Du) + pieces(below, 0xC5u)
        + pieces(below, 0xD1u) + pieces(below, 0xB1u) + pieces(below, 0xA3u);
    let start = atomicAdd(&counter[0], 3u * count);
    if (start + 3u * count > params.capacity) {
        atomicStore(&counter[1], 1u);
        return;
    }
    var at = start;
    for (var t = 0u; t < 6u; t++) {
        let c = tet_corners(t);
        let v = vec4<f32>(low.x, cube_value(low, high, c.y), cube_value(low, high, c.z), high.w);
        var ins = vec4<u32>(0u);
        var outs = vec4<u32>(0u);
        var ni = 0u;
        var no = 0u;
        for (var k = 0u; k < 4u; k++) {
            if (v[k] < iso) {
                ins[ni] = k;
                ni++;
            } else {
                outs[no] = k;
                no++;
            }
        }
        if (ni == 1u) {
            emit(at, crossing(id, c, v, ins[0], outs[0]), crossing(id, c, v, ins[0], outs[1]), crossing(id, c, v, ins[0], outs[2]));
            at += 3u;
        } else if (ni == 3u) {
            emit(at, crossing(id, c, v, ins[0], outs[0]), crossing(id, c, v, ins[1], outs[0]), crossing(id, c, v, ins[2], outs[0]));
            at += 3u;
        } else if (ni == 2u) {
            let p0 = crossing(id, c, v, ins[0], outs[0]);
            let p1 = crossing(id, c, v, ins[0], outs[1]);
            let p2 = crossing(id, c, v, ins[1], outs[1]);
            let p3 = crossing(id, c, v, ins[1], outs[0]);
            emit(at, p0, p1, p2);
            emit(at + 3u, p0, p2, p3);
            at += 6u;
        }
    }
}

// Indirect draw arguments from the bump counter (clamped to the capacity).
@group(0) @binding(4) var<storage, read_write> draw_args: array<u32, 4>;

@compute @workgroup_size(1)
fn args() {
    draw_args[0] = min(atomicLoad(&counter[0]), params.capacity);
    draw_args[1] = 1u;
    draw_args[2] = 0u;
    draw_args[3] = 0u;
}
