//! Colour legends: a bar of the colour map with the field's name and range.
//! The window paints them over the 3D view with egui; `render` PNGs get the
//! same drawing, rasterised off-screen by egui's wgpu renderer and blended
//! onto the picture.

use super::colour::ColourMap;
use super::derive::PlotType;
use super::gpu::{Gpu, GpuError};
use super::viewer::{ViewSettings, ViewerInfo};

/// One colour map in use and what it spans.
#[derive(Clone, Debug, PartialEq)]
pub struct Legend {
    pub title: String,
    pub map: ColourMap,
    pub range: (f32, f32),
}

impl Legend {
    /// The legends of what `settings` colour: the surface's field and the
    /// streamlines' speed, whichever are shown.
    pub fn of(settings: &ViewSettings, info: &ViewerInfo) -> Vec<Legend> {
        let map = match settings.colour_map {
            ColourMap::Plain => ColourMap::Viridis,
            m => m,
        };
        let mut legends = Vec::new();
        if let (Some(plot), Some(range)) = (info.colour_by, info.colour_range) {
            if settings.mode != super::viewer::SurfaceMode::None {
                legends.push(Legend {
                    title: format!("surface: {}", plot.name()),
                    map,
                    range,
                });
            }
        }
        if settings.streamlines.is_some() && info.streamlines > 0 {
            let lines = Legend {
                title: "streamlines: speed".into(),
                map,
                range: info.speed_range,
            };
            // One bar where both show the same speeds the same way.
            match legends.first_mut() {
                Some(s) if s.title == "surface: speed" && s.range == lines.range => {
                    s.title = "speed: surface, streamlines".into()
                }
                _ => legends.push(lines),
            }
        }
        // One bar per field and range the slices show, naming the slices
        // where they do not all show the same.
        type Colour = (PlotType, (f32, f32));
        let mut groups: Vec<(Colour, Vec<usize>)> = Vec::new();
        for (axis, colour) in (0..3).filter_map(|a| info.slice_colour[a].map(|c| (a, c))) {
            match groups.iter_mut().find(|(c, _)| *c == colour) {
                Some((_, axes)) => axes.push(axis),
                None => groups.push((colour, vec![axis])),
            }
        }
        let all = groups.len() == 1;
        for ((field, range), axes) in groups {
            let slices = if all {
                "slices".to_string()
            } else {
                let names: Vec<&str> = axes.iter().map(|&a| ["x", "y", "z"][a]).collect();
                let noun = if axes.len() == 1 { "slice" } else { "slices" };
                format!("{} {noun}", names.join(", "))
            };
            let legend = Legend {
                title: format!("{slices}: {}", field.name()),
                map,
                range,
            };
            // One bar where the surface shows the same colours.
            match legends.first_mut() {
                Some(s) if s.title == format!("surface: {}", field.name()) && s.range == range => {
                    s.title = format!("{}: surface, {slices}", field.name())
                }
                _ => legends.push(legend),
            }
        }
        if let (Some(v), Some((field, range))) = (&settings.volume, info.volume_colour) {
            legends.push(Legend {
                title: format!("volume: {}", field.name()),
                map: v.map,
                range,
            });
        }
        legends
    }

    /// Paints the legend at the right edge of `view`; `slot` stacks several
    /// from the top, bars shortened so that all `count` fit.
    pub fn paint(&self, painter: &egui::Painter, view: egui::Rect, slot: usize, count: usize) {
        let fits = (view.height() - 14.0) / count.max(1) as f32 - 66.0;
        let bar_height = (view.height() * 0.3).clamp(60.0, 200.0).min(fits).max(24.0);
        let block = bar_height + 56.0;
        let right = view.right() - 14.0;
        let top = view.top() + 14.0 + slot as f32 * (block + 10.0);
        let font = egui::FontId::proportional(13.0);
        let text = egui::Color32::from_gray(235);
        let labels = [
            self.range.1,
            0.5 * (self.range.0 + self.range.1),
            self.range.0,
        ]
        .map(|v| format!("{v:.3e}"));
        let label_width = labels
            .iter()
            .chain(std::iter::once(&self.title))
            .map(|l| {
                painter
                    .layout_no_wrap(l.clone(), font.clone(), text)
                    .size()
                    .x
            })
            .fold(0.0f32, f32::max);
        let bar = egui::Rect::from_min_max(
            egui::pos2(right - 10.0 - 16.0, top + 28.0),
            egui::pos2(right - 10.0, top + 28.0 + bar_height),
        );
        // A dark card keeps the text readable on any background.
        let card = egui::Rect::from_min_max(
            egui::pos2(
                (bar.left() - 8.0 - label_width).min(right - label_width - 20.0) - 10.0,
                top,
            ),
            egui::pos2(right, bar.bottom() + 16.0),
        );
        painter.rect_filled(card, 6.0, egui::Color32::from_black_alpha(170));
        painter.text(
            egui::pos2(right - 10.0, top + 6.0),
            egui::Align2::RIGHT_TOP,
            &self.title,
            font.clone(),
            text,
        );
        let steps = 64;
        for k in 0..steps {
            // Top of the bar is the maximum.
            let c = self.map.sample(1.0 - (k as f32 + 0.5) / steps as f32);
            let y0 = bar.top() + bar.height() * k as f32 / steps as f32;
            let y1 = bar.top() + bar.height() * (k + 1) as f32 / steps as f32;
            painter.rect_filled(
                egui::Rect::from_min_max(
                    egui::pos2(bar.left(), y0),
                    egui::pos2(bar.right(), y1 + 0.5),
                ),
                0.0,
                egui::Color32::from_rgb(
                    (c[0] * 255.0) as u8,
                    (c[1] * 255.0) as u8,
                    (c[2] * 255.0) as u8,
                ),
            );
        }
        for (k, label) in labels.iter().enumerate() {
            let y = bar.top() + bar.height() * k as f32 / 2.0;
            painter.line_segment(
                [egui::pos2(bar.left() - 4.0, y), egui::pos2(bar.left(), y)],
                egui::Stroke::new(1.0, text),
            );
            painter.text(
                egui::pos2(bar.left() - 7.0, y),
                egui::Align2::RIGHT_CENTER,
                label,
                font.clone(),
                text,
            );
        }
    }
}

/// Paints `legends` onto an RGBA picture of `size` pixels (as `render` reads
/// it back): egui draws them into a transparent texture, which is blended
/// over the picture on the host.
pub fn overlay(
    gpu: &Gpu,
    pixels: &mut [u8],
    size: [u32; 2],
    legends: &[Legend],
) -> Result<(), GpuError> {
    if legends.is_empty() {
        return Ok(());
    }
    let [w, h] = size;
    // Text that reads on a 720-line picture and grows with larger ones.
    let ppp = (h as f32 / 720.0).max(1.0);
    let ctx = egui::Context::default();
    let input = egui::RawInput {
        screen_rect: Some(egui::Rect::from_min_size(
            egui::Pos2::ZERO,
            egui::vec2(w as f32 / ppp, h as f32 / ppp),
        )),
        ..Default::default()
    };
    ctx.set_pixels_per_point(ppp);
    let mut output = ctx.run_ui(input, |ui| {
        let view = ui.ctx().content_rect();
        let painter = ui.ctx().layer_painter(egui::LayerId::background());
        for (slot, legend) in legends.iter().enumerate() {
            legend.paint(&painter, view, slot, legends.len());
        }
    });
    let jobs = ctx.tessellate(std::mem::take(&mut output.shapes), output.pixels_per_point);
    let format = wgpu::TextureFormat::Rgba8Unorm;
    let mut renderer =
        egui_wgpu::Renderer::new(&gpu.device, format, egui_wgpu::RendererOptions::default());
    for (id, deltas) in output.textures_delta.set.drain() {
        for delta in deltas {
            renderer.update_texture(&gpu.device, &gpu.queue, id, &delta);
        }
    }
    // The renderer and its textures go when this returns.
    output.textures_delta.clear();
    let screen = egui_wgpu::ScreenDescriptor {
        size_in_pixels: size,
        pixels_per_point: output.pixels_per_point,
    };
    let texture = gpu.texture_2d(
        size,
        format,
        wgpu::TextureUsages::RENDER_ATTACHMENT | wgpu::TextureUsages::COPY_SRC,
        "legend",
    );
    let view = texture.create_view(&Default::default());
    let mut encoder = gpu.device.create_command_encoder(&Default::default());
    let user = renderer.update_buffers(&gpu.device, &gpu.queue, &mut encoder, &jobs, &screen);
    {
        let mut pass = encoder
            .begin_render_pass(&wgpu::RenderPassDescriptor {
                label: Some("legend"),
                color_attachments: &[Some(wgpu::RenderPassColorAttachment {
                    view: &view,
                    depth_slice: None,
                    resolve_target: None,
                    ops: wgpu::Operations {
                        load: wgpu::LoadOp::Clear(wgpu::Color::TRANSPARENT),
                        store: wgpu::StoreOp::Store,
                    },
                })],
                ..Default::default()
            })
            .forget_lifetime();
        renderer.render(&mut pass, &jobs, &screen);
    }
    gpu.queue
        .submit(user.into_iter().chain(std::iter::once(encoder.finish())));
    let layer = gpu.read_texture(&texture, 4)?;
    // egui writes premultiplied alpha: over = layer + picture × (1 − α).
    for (p, l) in pixels.chunks_exact_mut(4).zip(layer.chunks_exact(4)) {
        let keep = 1.0 - l[3] as f32 / 255.0;
        for c in 0..3 {
            p[c] = (l[c] as f32 + p[c] as f32 * keep).round().min(255.0) as u8;
        }
    }
    Ok(())
}
