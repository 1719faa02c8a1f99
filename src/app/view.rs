//! The window's 3D view: the renderer's [`Viewer`] and the egui texture that
//! shows its picture.

use crate::render::gpu::{Gpu, GpuError};
use crate::render::viewer::Viewer;
pub use crate::render::viewer::{SurfaceMode, ViewSettings};
use crate::session::Frame;

pub struct View {
    pub viewer: Viewer,
    pub texture: Option<egui::TextureId>,
    /// The picture generation the texture shows.
    shown: u64,
}

impl View {
    pub fn new(gpu: &Gpu) -> View {
        View {
            viewer: Viewer::new(gpu),
            texture: None,
            shown: u64::MAX,
        }
    }

    pub fn upload(&mut self, gpu: &Gpu, frame: &Frame) -> Result<(), GpuError> {
        self.viewer.set_meshes(&frame.meshes, frame.stride);
        self.viewer.upload(
            gpu,
            &frame.fields,
            &frame.flags,
            frame.geometry,
            frame.shared.as_ref(),
        )
    }

    /// Adds a rendering to the picture (if it is not complete) at `size`
    /// pixels and returns the egui texture that shows it.
    pub fn draw(
        &mut self,
        gpu: &Gpu,
        egui: &mut egui_wgpu::Renderer,
        settings: ViewSettings,
        size: [u32; 2],
    ) -> Result<Option<egui::TextureId>, GpuError> {
        self.viewer.render(gpu, &settings, size)?;
        let Some(picture) = self.viewer.picture() else {
            return Ok(None);
        };
        if self.shown != self.viewer.picture_generation {
            self.shown = self.viewer.picture_generation;
            match self.texture {
                Some(id) => egui.update_egui_texture_from_wgpu_texture(
                    &gpu.device,
                    picture,
                    wgpu::FilterMode::Linear,
                    id,
                ),
                None => {
                    self.texture = Some(egui.register_native_texture(
                        &gpu.device,
                        picture,
                        wgpu::FilterMode::Linear,
                    ))
                }
            }
        }
        Ok(self.texture)
    }

    /// Saves the picture as a PNG.
    pub fn screenshot(&self, gpu: &Gpu, path: &std::path::Path) -> Result<(), String> {
        self.viewer.screenshot(gpu, path)
    }
}
