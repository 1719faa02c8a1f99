//! Rust mirrors of the structs shared with WGSL: `#[repr(C)]`, `Pod`, explicit
//! padding, size asserted. Keep each in sync with the shader named.

use bytemuck::{Pod, Zeroable};

/// shaders/fields/derive.wgsl `DeriveParams`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct DeriveParams {
    pub size: [u32; 3],
    pub plot: u32,
    /// The first cell of the box derived.
    pub origin: [u32; 3],
    pub _pad: u32,
}
const _: () = assert!(std::mem::size_of::<DeriveParams>() == 32);

/// shaders/fields/unpack.wgsl `UnpackParams`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct UnpackParams {
    pub size: [u32; 3],
    pub pitch: u32,
    pub z0: u32,
    pub _pad: [u32; 3],
}
const _: () = assert!(std::mem::size_of::<UnpackParams>() == 32);

/// shaders/fields/minmax.wgsl `ReduceParams`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct ReduceParams {
    pub size: [u32; 3],
    pub groups: u32,
    /// The range's lower end is at least this.
    pub floor: f32,
    /// 0, 1, 2: only the plane normal to this axis at `position` (cells);
    /// 3: the whole volume.
    pub axis: u32,
    pub position: f32,
    /// The first of this reduction's partials.
    pub base: u32,
    /// The result's index (the finishing stage).
    pub slot: u32,
    /// Non-zero: a signed range is centred on zero (the finishing stage).
    pub symmetric: u32,
    pub _pad: [u32; 2],
}
const _: () = assert!(std::mem::size_of::<ReduceParams>() == 48);

/// shaders/volume/march.wgsl `MarchParams`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct MarchParams {
    pub inverse_view_proj: [[f32; 4]; 4],
    /// Step (cells), sample index, unused, unused.
    pub march: [f32; 4],
}
const _: () = assert!(std::mem::size_of::<MarchParams>() == 80);

/// shaders/volume/quantize.wgsl `QuantizeParams`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct QuantizeParams {
    pub size: [u32; 3],
    /// Bytes per row, a multiple of 256.
    pub pitch: u32,
}
const _: () = assert!(std::mem::size_of::<QuantizeParams>() == 16);

/// shaders/isosurface/extract.wgsl `ExtractParams`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct ExtractParams {
    pub size: [u32; 3],
    pub iso: f32,
    pub lo: [u32; 3],
    pub capacity: u32,
    pub hi: [u32; 3],
    /// 1: `iso` is a fraction of a [min, max] range the GPU holds.
    pub relative: u32,
}
const _: () = assert!(std::mem::size_of::<ExtractParams>() == 48);

/// shaders/isosurface/extract.wgsl and draw.wgsl `Vertex`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable, PartialEq)]
pub struct Vertex {
    pub position: [f32; 4],
    pub normal: [f32; 4],
}
const _: () = assert!(std::mem::size_of::<Vertex>() == 32);

/// shaders/scene/common.wgsl `Camera` (every draw shader of the scene).
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct CameraUniform {
    pub view_proj: [[f32; 4]; 4],
    pub eye: [f32; 4],
    pub colour: [f32; 4],
    pub light: [f32; 4],
    /// lo, hi, map index ([`super::colour::ColourMap`]), unused.
    pub colour_map: [f32; 4],
    /// Impostor or tube radius (cells), points per streamline, unused, unused.
    pub extra: [f32; 4],
}
const _: () = assert!(std::mem::size_of::<CameraUniform>() == 144);

/// shaders/streamlines/trace.wgsl `TraceParams`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct TraceParams {
    pub size: [u32; 3],
    pub steps: u32,
    pub dt: f32,
    pub min_speed: f32,
    pub lines: u32,
    pub _pad: u32,
}
const _: () = assert!(std::mem::size_of::<TraceParams>() == 32);

/// shaders/present/accumulate.wgsl `AccumulateParams` and compose.wgsl
/// `ComposeParams`: one u32 and padding.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub struct OneParam {
    pub value: u32,
    pub _pad: [u32; 3],
}
const _: () = assert!(std::mem::size_of::<OneParam>() == 16);
