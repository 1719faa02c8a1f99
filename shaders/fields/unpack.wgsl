// A shared display frame (texels in rows of `pitch`, written by the CUDA
// solver) into layers z0.. of the field texture. A compute pass rather than a
// buffer-to-texture copy: on the H100 that copy moves about 20 GB/s, and the
// solver loses the GPU to it for the whole time.

struct UnpackParams {
    size: vec3<u32>,   // texels of this batch of layers
    pitch: u32,        // texels per row in `texels`
    z0: u32,           // first layer of the batch in the texture
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<storage, read> texels: array<vec4<f32>>;
@group(0) @binding(1) var fields: texture_storage_3d<rgba32float, write>;
@group(0) @binding(2) var<uniform> params: UnpackParams;

@compute @workgroup_size(64, 4, 1)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if (any(id >= params.size)) {
        return;
    }
    let v = texels[(id.z * params.size.y + id.y) * params.pitch + id.x];
    textureStore(fields, vec3<u32>(id.x, id.y, id.z + params.z0), v);
}
