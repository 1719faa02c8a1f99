//! Settings kept between sessions, as egui apps keep theirs: the last
//! scenario, the view angles and the display options, in
//! `$XDG_CONFIG_HOME/flowscope/settings.toml` (or `~/.config/…`).
//!
//! Values are stored by name, so a file from another version loads what it
//! can: an unknown or missing value keeps the default.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::render::colour::ColourMap;
use crate::render::derive::PlotType;
use crate::render::scene::Stereo;
use crate::render::streamlines::StreamlineSettings;
use crate::render::viewer::{SurfaceMode, ViewSettings};

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Persisted {
    /// The scenario open when the window closed.
    pub scenario: Option<PathBuf>,
    pub display_limit: Option<usize>,
    /// Camera yaw and pitch (radians); the distance frames the grid anew.
    pub view_angles: Option<[f32; 2]>,
    pub plot: Option<String>,
    pub iso_frac: Option<f32>,
    /// A field's name, or "plain".
    pub colour_by: Option<String>,
    pub colour_map: Option<String>,
    pub surface: Option<String>,
    pub sphere_radius: Option<f32>,
    pub streamlines: bool,
    pub anaglyph: bool,
    pub grey_background: bool,
    pub aa_samples: Option<u32>,
}

/// Where the settings live; `None` where there is no home to keep them in.
pub fn path() -> Option<PathBuf> {
    let config = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(config.join("flowscope").join("settings.toml"))
}

fn plot_named(name: &str) -> Option<PlotType> {
    <PlotType as clap::ValueEnum>::from_str(name, true).ok()
}

fn plot_name(plot: PlotType) -> String {
    clap::ValueEnum::to_possible_value(&plot)
        .map(|v| v.get_name().to_string())
        .unwrap_or_default()
}

fn mode_name(mode: SurfaceMode) -> String {
    clap::ValueEnum::to_possible_value(&mode)
        .map(|v| v.get_name().to_string())
        .unwrap_or_default()
}

impl Persisted {
    /// Reads the settings; a missing file is no settings, a damaged one is
    /// reported and ignored (the window still opens).
    pub fn load(path: &Path) -> Persisted {
        match std::fs::read_to_string(path) {
            Ok(text) => toml::from_str(&text).unwrap_or_else(|e| {
                eprintln!(
                    "note: ignoring the saved settings in {} ({}); they are rewritten on exit",
                    path.display(),
                    e.message()
                );
                Persisted::default()
            }),
            Err(_) => Persisted::default(),
        }
    }

    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let text = toml::to_string(self).map_err(std::io::Error::other)?;
        crate::io::write_atomically(path, |w| w.write_all(text.as_bytes()))
    }

    /// The settings of a window showing `settings`.
    pub fn capture(
        scenario: Option<PathBuf>,
        display_limit: usize,
        angles: [f32; 2],
        settings: &ViewSettings,
    ) -> Persisted {
        Persisted {
            scenario,
            display_limit: Some(display_limit),
            view_angles: Some(angles),
            plot: Some(plot_name(settings.plot)),
            iso_frac: Some(settings.iso_frac),
            colour_by: Some(settings.colour_by.map_or("plain".into(), plot_name)),
            colour_map: Some(settings.colour_map.name().into()),
            surface: Some(mode_name(settings.mode)),
            sphere_radius: Some(settings.sphere_radius),
            streamlines: settings.streamlines.is_some(),
            anaglyph: settings.stereo.is_some(),
            grey_background: settings.grey_background,
            aa_samples: Some(settings.aa_samples),
        }
    }

    /// `defaults` with the saved values that are valid laid over them.
    pub fn view_settings(&self, defaults: ViewSettings) -> ViewSettings {
        let mut s = defaults;
        if let Some(p) = self.plot.as_deref().and_then(plot_named) {
            s.plot = p;
        }
        if let Some(f) = self.iso_frac.filter(|f| (0.0..=1.0).contains(f)) {
            s.iso_frac = f;
        }
        match self.colour_by.as_deref() {
            Some("plain") => s.colour_by = None,
            Some(name) => {
                if let Some(p) = plot_named(name) {
                    s.colour_by = Some(p);
                }
            }
            None => {}
        }
        if let Some(m) = self.colour_map.as_deref().and_then(ColourMap::from_name) {
            s.colour_map = m;
        }
        if let Some(m) = self
            .surface
            .as_deref()
            .and_then(|n| <SurfaceMode as clap::ValueEnum>::from_str(n, true).ok())
        {
            s.mode = m;
        }
        if let Some(r) = self.sphere_radius.filter(|r| r.is_finite() && *r > 0.0) {
            s.sphere_radius = r;
        }
        s.streamlines = self.streamlines.then(StreamlineSettings::default);
        s.stereo = self.anaglyph.then(Stereo::default);
        s.grey_background = self.grey_background;
        if let Some(n) = self.aa_samples.filter(|n| (1..=64).contains(n)) {
            s.aa_samples = n;
        }
        s
    }

    /// Saved view angles, if they are usable.
    pub fn angles(&self) -> Option<[f32; 2]> {
        self.view_angles
            .filter(|[yaw, pitch]| yaw.is_finite() && pitch.is_finite() && pitch.abs() < 1.5)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_round_trip_and_bad_values_keep_the_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("flowscope/settings.toml");
        let settings = ViewSettings {
            plot: PlotType::Q,
            iso_frac: 0.3,
            colour_by: Some(PlotType::Vorticity),
            colour_map: ColourMap::CoolWarm,
            mode: SurfaceMode::Spheres,
            streamlines: Some(StreamlineSettings::default()),
            stereo: Some(Stereo::default()),
            grey_background: true,
            aa_samples: 8,
            ..Default::default()
        };
        let saved = Persisted::capture(Some("a/b.toml".into()), 128, [0.3, -0.2], &settings);
        saved.save(&path).unwrap();
        let loaded = Persisted::load(&path);
        assert_eq!(loaded, saved);
        let back = loaded.view_settings(ViewSettings::default());
        assert_eq!(back.plot, PlotType::Q);
        assert_eq!(back.colour_by, Some(PlotType::Vorticity));
        assert_eq!(back.colour_map, ColourMap::CoolWarm);
        assert_eq!(back.mode, SurfaceMode::Spheres);
        assert!(back.streamlines.is_some() && back.stereo.is_some());
        assert_eq!((back.aa_samples, back.iso_frac), (8, 0.3));
        assert_eq!(loaded.angles(), Some([0.3, -0.2]));
        // Damaged or foreign values: the defaults stay, nothing panics.
        std::fs::write(
            &path,
            "plot = \"temperature\"\niso_frac = 7.0\naa_samples = 0\nview_angles = [0.1, 9.0]\n",
        )
        .unwrap();
        let odd = Persisted::load(&path);
        let s = odd.view_settings(ViewSettings::default());
        assert_eq!(s.plot, ViewSettings::default().plot);
        assert_eq!(s.iso_frac, 0.5);
        assert_eq!(s.aa_samples, ViewSettings::default().aa_samples);
        assert_eq!(odd.angles(), None);
        std::fs::write(&path, "this is not toml [").unwrap();
        assert_eq!(Persisted::load(&path), Persisted::default());
    }
}
