//! Seeded mutations of the shipped scenarios through the library's parser and
//! the checks after it: whatever the text, a result or an error with a place
//! and a fix, never a panic. Deterministic (fixed seeds), a few seconds.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

use flowscope::scenario::Scenario;

use crate::common::*;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

const ODD_VALUES: &[&str] = &[
    "nan",
    "inf",
    "-inf",
    "0",
    "-1",
    "1e300",
    "1e-300",
    "-0.0",
    "0.5",
    "3",
    "99999999999999999999",
    "[]",
    "[1]",
    "[1, 2, 3, 4]",
    "[nan, 0, 0]",
    "\"x\"",
    "true",
    "{}",
    "{ inlet = [1, 0, 0] }",
    "{ moving_wall = [0, 0, inf] }",
    "\"periodic\"",
    "2000",
];

/// One mutation of `text`: a number or value replaced, a line dropped,
/// doubled or cut, bytes flipped, or the text truncated.
fn mutate(text: &str, rng: &mut Rng) -> String {
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    match rng.below(6) {
        0 | 1 => {
            // A value after `=` (or an array element) becomes something odd.
            let k = rng.below(lines.len());
            if let Some((key, _)) = lines[k].split_once('=') {
                lines[k] = format!("{key}= {}", rng.pick(ODD_VALUES));
            }
        }
        2 => {
            let k = rng.below(lines.len());
            lines.remove(k);
        }
        3 => {
            let k = rng.below(lines.len());
            let line = lines[k].clone();
            lines.insert(k, line);
        }
        4 => {
            let k = rng.below(lines.len());
            let cut = rng.below(lines[k].len() + 1);
            lines[k] = lines[k].chars().take(cut).collect();
        }
        _ => {
            let mut bytes = text.as_bytes().to_vec();
            for _ in 0..1 + rng.below(4) {
                let at = rng.below(bytes.len());
                let set = b"=[]{},.\"'0123456789-eE \n#";
                bytes[at] = set[rng.below(set.len())];
            }
            return String::from_utf8_lossy(&bytes).into_owned();
        }
    }
    lines.join("\n")
}

/// Everything a scenario goes through before a solver: parse, units, and for
/// small grids the voxels and their checks.
fn check(text: &str, overrides: &[String]) -> Result<(), String> {
    let s = Scenario::from_text(Path::new("fuzz.toml"), text, overrides).map_err(|e| {
        assert!(!e.message.is_empty(), "an error without a message");
        e.to_string()
    })?;
    if s.cells() <= 300_000 {
        let v = s.voxelize();
        s.check_voxels(&v).map_err(|e| e.to_string())?;
        let p = s.params(&v.slots);
        assert!(p.tau.is_finite() && p.tau > 0.5, "accepted τ = {}", p.tau);
    }
    Ok(())
}

#[test]
fn mutated_scenarios_and_overrides_give_errors_never_panics() {
    let shipped = [
        "cavity.toml",
        "cylinder.toml",
        "sphere.toml",
        "cube.toml",
        "urban.toml",
    ];
    let keys = [
        "domain.size",
        "fluid.reynolds",
        "fluid.velocity",
        "fluid.mach",
        "fluid.length_cells",
        "fluid.initial_velocity",
        "fluid.force",
        "boundaries.x",
        "boundaries.y_max",
        "obstacles.0.radius",
        "obstacles.0.center",
        "obstacles.0.min",
        "run.steps",
        "run.until_steady",
        "physical.cell_size_m",
        "obstacles.7.radius",
        "nonsense.key",
    ];
    let mut rng = Rng(0x5EED_F100);
    let (mut accepted, mut refused, mut panics) = (0, 0, Vec::new());
    for round in 0..3000 {
        let name = *rng.pick(&shipped);
        let original = std::fs::read_to_string(scenario_path(name)).unwrap();
        let mut text = original.clone();
        for _ in 0..1 + rng.below(3) {
            text = mutate(&text, &mut rng);
        }
        let overrides: Vec<String> = if round % 3 == 0 {
            vec![format!("{}={}", rng.pick(&keys), rng.pick(ODD_VALUES))]
        } else {
            Vec::new()
        };
        let small = if name == "cavity.toml" {
            text.replace("[66, 66, 66]", "[18, 18, 18]")
        } else {
            text
        };
        match catch_unwind(AssertUnwindSafe(|| check(&small, &overrides))) {
            Ok(Ok(())) => accepted += 1,
            Ok(Err(_)) => refused += 1,
            Err(_) => panics.push((small, overrides)),
        }
    }
    assert!(
        panics.is_empty(),
        "{} panics; first:\n{:?}",
        panics.len(),
        panics.first()
    );
    // The mutations reach both sides of the checks.
    assert!(
        accepted > 100 && refused > 1000,
        "{accepted} accepted, {refused} refused"
    );
}

#[test]
fn mutated_checkpoints_are_refused_never_trusted() {
    use flowscope::io::checkpoint;
    use flowscope::solver::Solver;
    let s = load(
        "cavity.toml",
        &["domain.size=[10,10,6]", "fluid.length_cells=8"],
    );
    let mut solver = cpu(&s);
    solver.step(3).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.ckpt");
    checkpoint::save(&good, &mut solver).unwrap();
    let bytes = std::fs::read(&good).unwrap();
    let path = dir.path().join("mutated.ckpt");
    let mut rng = Rng(42);
    for round in 0..400 {
        let mut b = bytes.clone();
        match round % 3 {
            0 => b.truncate(rng.below(b.len())),
            1 => {
                for _ in 0..1 + rng.below(3) {
                    let at = rng.below(b.len());
                    b[at] ^= 1 << rng.below(8);
                }
            }
            _ => {
                // A header that lies about the sizes.
                let at = 20 + 8 * rng.below(6);
                b[at..at + 8].copy_from_slice(&rng.next().to_le_bytes());
            }
        }
        std::fs::write(&path, &b).unwrap();
        let loaded = catch_unwind(AssertUnwindSafe(|| {
            checkpoint::load(&path, s.size, solver.flags(), solver.state_len())
        }));
        let loaded = loaded.unwrap_or_else(|_| panic!("round {round}: panicked"));
        // A flipped bit anywhere is caught by the file's hash.
        assert!(
            loaded.is_err(),
            "round {round}: a damaged checkpoint was accepted"
        );
    }
}
