//! The WGSL sources, embedded in the binary, one file per stage under `shaders/`.

/// (path under `shaders/`, source) of every shader.
pub const ALL: &[(&str, &str)] = &[
    (
        "fields/derive.wgsl",
        include_str!("../../shaders/fields/derive.wgsl"),
    ),
    (
        "fields/unpack.wgsl",
        include_str!("../../shaders/fields/unpack.wgsl"),
    ),
    (
        "fields/minmax.wgsl",
        include_str!("../../shaders/fields/minmax.wgsl"),
    ),
    (
        "isosurface/extract.wgsl",
        include_str!("../../shaders/isosurface/extract.wgsl"),
    ),
    (
        "isosurface/draw.wgsl",
        include_str!("../../shaders/isosurface/draw.wgsl"),
    ),
    (
        "impostor/append.wgsl",
        include_str!("../../shaders/impostor/append.wgsl"),
    ),
    (
        "impostor/draw.wgsl",
        include_str!("../../shaders/impostor/draw.wgsl"),
    ),
    (
        "streamlines/trace.wgsl",
        include_str!("../../shaders/streamlines/trace.wgsl"),
    ),
    (
        "streamlines/tubes.wgsl",
        include_str!("../../shaders/streamlines/tubes.wgsl"),
    ),
    (
        "present/accumulate.wgsl",
        include_str!("../../shaders/present/accumulate.wgsl"),
    ),
    (
        "present/compose.wgsl",
        include_str!("../../shaders/present/compose.wgsl"),
    ),
    (
        "fields/sample.wgsl",
        include_str!("../../shaders/fields/sample.wgsl"),
    ),
    (
        "slices/draw.wgsl",
        include_str!("../../shaders/slices/draw.wgsl"),
    ),
    (
        "slices/arrows.wgsl",
        include_str!("../../shaders/slices/arrows.wgsl"),
    ),
    (
        "volume/march.wgsl",
        include_str!("../../shaders/volume/march.wgsl"),
    ),
    (
        "volume/compose.wgsl",
        include_str!("../../shaders/volume/compose.wgsl"),
    ),
    (
        "volume/quantize.wgsl",
        include_str!("../../shaders/volume/quantize.wgsl"),
    ),
    (
        "scene/common.wgsl",
        include_str!("../../shaders/scene/common.wgsl"),
    ),
    (
        "scene/lines.wgsl",
        include_str!("../../shaders/scene/lines.wgsl"),
    ),
];

const INCLUDE: &str = "//!include ";

/// The source of `shaders/<path>`, each `//!include other.wgsl` line replaced
/// by that file's text (WGSL has no includes; the scene's draw shaders share
/// their camera struct and shading this way). With `dir`, shaders are read
/// from that directory instead of the embedded copies (for trying shader
/// changes on another machine without a new build).
pub fn source(path: &str, dir: Option<&std::path::Path>) -> String {
    let embedded = ALL
        .iter()
        .find(|(p, _)| *p == path)
        .map(|(_, s)| *s)
        .unwrap_or_else(|| panic!("no shader {path} in render::shaders::ALL"));
    let raw = match dir {
        Some(dir) => {
            let file = dir.join(path);
            std::fs::read_to_string(&file).unwrap_or_else(|e| {
                eprintln!(
                    "FLOWSCOPE_SHADER_DIR: cannot read {} ({e}); using the built-in shader",
                    file.display()
                );
                embedded.to_string()
            })
        }
        None => embedded.to_string(),
    };
    raw.lines()
        .map(|line| match line.strip_prefix(INCLUDE) {
            Some(other) => source(other.trim(), dir),
            None => line.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

pub fn module(gpu: &super::gpu::Gpu, path: &str) -> wgpu::ShaderModule {
    let source = source(path, gpu.shader_dir.as_deref());
    gpu.device
        .create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some(path),
            source: wgpu::ShaderSource::Wgsl(source.into()),
        })
}

#[cfg(test)]
mod tests {
    use wgpu::naga;

    #[test]
    fn every_shader_file_is_listed_and_valid_wgsl() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("shaders");
        let mut on_disk = Vec::new();
        for sub in std::fs::read_dir(&dir).unwrap() {
            let sub = sub.unwrap().path();
            if sub.is_dir() {
                for f in std::fs::read_dir(&sub).unwrap() {
                    let f = f.unwrap().path();
                    if f.extension().is_some_and(|e| e == "wgsl") {
                        on_disk.push(f.strip_prefix(&dir).unwrap().to_string_lossy().into_owned());
                    }
                }
            }
        }
        on_disk.sort();
        let mut listed: Vec<String> = super::ALL.iter().map(|(p, _)| p.to_string()).collect();
        listed.sort();
        assert_eq!(on_disk, listed, "shaders/ and render::shaders::ALL differ");
        for (path, _) in super::ALL {
            // Included text is checked in place, inside each includer.
            let included = format!("{}{path}", super::INCLUDE);
            if super::ALL.iter().any(|(_, s)| s.contains(&included)) {
                continue;
            }
            let src = &super::source(path, None);
            let module = naga::front::wgsl::parse_str(src)
                .unwrap_or_else(|e| panic!("{path}: {}", e.emit_to_string(src)));
            naga::valid::Validator::new(
                naga::valid::ValidationFlags::all(),
                naga::valid::Capabilities::empty(),
            )
            .validate(&module)
            .unwrap_or_else(|e| panic!("{path}: {}", e.emit_to_string(src)));
        }
    }
}
