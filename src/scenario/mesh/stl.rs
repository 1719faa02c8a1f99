//! STL files, binary and ASCII, read by hand: the well-kept crates stop at the
//! first error with an `io::Error` and weld vertices on their own terms, and a
//! user needs to be told which line is wrong, that the file is truncated, or
//! that it is not STL at all. Sizes are checked before anything is allocated.

use std::path::Path;

/// Triangles as the file gives them (its units, its orientation).
pub type Triangle = [[f32; 3]; 3];

/// Bytes of a binary STL's header (80 free bytes and the triangle count) and of
/// one triangle record (normal, three vertices, attribute count).
const HEADER: u64 = 84;
const RECORD: u64 = 50;

/// Larger files are refused before they are read: 43 million triangles.
pub const MAX_BYTES: u64 = 2 << 30;

/// Reads the triangles of an STL file. The error is a sentence naming the
/// defect (the caller names the file).
pub fn read(path: &Path) -> Result<Vec<Triangle>, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("cannot be read ({e})"))?;
    if !meta.is_file() {
        // /dev/zero and pipes report a length of 0 and never end.
        return Err("is not a regular file".into());
    }
    if meta.len() > MAX_BYTES {
        return Err(format!(
            "is {} bytes, more than the {MAX_BYTES} an STL mesh may have here",
            meta.len()
        ));
    }
    let bytes = std::fs::read(path).map_err(|e| format!("cannot be read ({e})"))?;
    parse(&bytes)
}

/// Parses the bytes of an STL file (see [`read`]).
pub fn parse(bytes: &[u8]) -> Result<Vec<Triangle>, String> {
    let len = bytes.len() as u64;
    let ascii = bytes
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .is_some_and(|k| bytes[k..].starts_with(b"solid"));
    if len >= HEADER {
        let count = u32::from_le_bytes(bytes[80..84].try_into().unwrap()) as u64;
        let expected = HEADER + RECORD * count;
        // Binary files may begin with "solid" too; their size then decides.
        if len == expected {
            return binary(&bytes[84..], count as usize);
        }
        if !ascii {
            let text = bytes
                .iter()
                .all(|b| b.is_ascii_graphic() || b.is_ascii_whitespace());
            return Err(if text {
                "is not an STL file: it is text that does not begin with `solid` (ASCII STL), and not binary STL".into()
            } else if len < expected {
                format!(
                    "is truncated: its header announces {count} triangles ({expected} bytes), but the file has only {len} bytes"
                )
            } else {
                format!(
                    "is not a binary STL: its header announces {count} triangles ({expected} bytes), but the file has {len} bytes"
                )
            });
        }
    } else if !ascii {
        return Err(format!(
            "is not an STL file: {len} bytes, shorter than a binary STL's {HEADER}-byte header, and not ASCII STL (which begins with `solid`)"
        ));
    }
    let text = std::str::from_utf8(bytes).map_err(|_| {
        "begins with `solid` but is not text: neither ASCII nor binary STL".to_string()
    })?;
    ascii_stl(text)
}

fn binary(records: &[u8], count: usize) -> Result<Vec<Triangle>, String> {
    if count == 0 {
        return Err("holds no triangles".into());
    }
    Ok(records
        .chunks_exact(RECORD as usize)
        .map(|r| {
            let f = |k: usize| f32::from_le_bytes(r[12 + 4 * k..16 + 4 * k].try_into().unwrap());
            [[f(0), f(1), f(2)], [f(3), f(4), f(5)], [f(6), f(7), f(8)]]
        })
        .collect())
}

/// ASCII STL: `solid name`, then facets of `facet normal nx ny nz`, `outer
/// loop`, three `vertex x y z`, `endloop`, `endfacet`, then `endsolid`. Several
/// solids may follow each other. The normals are not used (the vertex order
/// says the orientation).
fn ascii_stl(text: &str) -> Result<Vec<Triangle>, String> {
    let mut tokens = Tokens {
        iter: Box::new(
            text.lines()
                .enumerate()
                .flat_map(|(k, line)| line.split_whitespace().map(move |t| (k + 1, t))),
        ),
        last_line: 1,
    };
    let mut triangles = Vec::new();
    let mut pending = Some(tokens.next("solid")?);
    while let Some(start) = pending.take() {
        expect(start, "solid")?;
        // The solid's name runs to the end of its line.
        let mut t = tokens.next("facet")?;
        while t.0 == start.0 && t.1 != "facet" && t.1 != "endsolid" {
            t = tokens.next("facet")?;
        }
        while t.1 == "facet" {
            expect(tokens.next("normal")?, "normal")?;
            for _ in 0..3 {
                number(tokens.next("a number")?)?;
            }
            expect(tokens.next("outer")?, "outer")?;
            expect(tokens.next("loop")?, "loop")?;
            let mut tri = [[0.0f32; 3]; 3];
            for v in &mut tri {
                expect(tokens.next("vertex")?, "vertex")?;
                for c in v.iter_mut() {
                    *c = number(tokens.next("a number")?)?;
                }
            }
            expect(tokens.next("endloop")?, "endloop")?;
            expect(tokens.next("endfacet")?, "endfacet")?;
            triangles.push(tri);
            t = tokens.next("endsolid")?;
        }
        expect(t, "endsolid")?;
        // The name after `endsolid` is optional; another solid may follow.
        pending = tokens.iter.by_ref().find(|(line, _)| *line != t.0);
    }
    if triangles.is_empty() {
        return Err("holds no triangles".into());
    }
    Ok(triangles)
}

type Token<'a> = (usize, &'a str);

struct Tokens<'a> {
    iter: Box<dyn Iterator<Item = Token<'a>> + 'a>,
    last_line: usize,
}

impl<'a> Tokens<'a> {
    fn next(&mut self, want: &str) -> Result<Token<'a>, String> {
        match self.iter.next() {
            Some(t) => {
                self.last_line = t.0;
                Ok(t)
            }
            None => Err(format!(
                "is truncated: it ends after line {} where `{want}` should follow",
                self.last_line
            )),
        }
    }
}

fn expect(got: Token, want: &str) -> Result<(), String> {
    if got.1 == want {
        Ok(())
    } else {
        Err(format!(
            "line {}: `{}` where `{want}` should be: not a valid ASCII STL",
            got.0, got.1
        ))
    }
}

fn number((line, t): (usize, &str)) -> Result<f32, String> {
    t.parse()
        .map_err(|_| format!("line {line}: `{t}` is not a number"))
}

/// A binary STL of `triangles` (tests, and the generated shipped meshes).
pub fn to_binary(triangles: &[Triangle], header: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(84 + 50 * triangles.len());
    let mut head = [b' '; 80];
    for (d, s) in head.iter_mut().zip(header.bytes()) {
        *d = s;
    }
    out.extend_from_slice(&head);
    out.extend_from_slice(&(triangles.len() as u32).to_le_bytes());
    for t in triangles {
        let n = normal(t);
        for c in n.iter().chain(t.iter().flatten()) {
            out.extend_from_slice(&c.to_le_bytes());
        }
        out.extend_from_slice(&[0, 0]);
    }
    out
}

/// An ASCII STL of `triangles`.
pub fn to_ascii(triangles: &[Triangle], name: &str) -> String {
    use std::fmt::Write;
    let mut s = format!("solid {name}\n");
    for t in triangles {
        let n = normal(t);
        let _ = writeln!(s, "  facet normal {:e} {:e} {:e}", n[0], n[1], n[2]);
        s.push_str("    outer loop\n");
        for v in t {
            let _ = writeln!(s, "      vertex {:e} {:e} {:e}", v[0], v[1], v[2]);
        }
        s.push_str("    endloop\n  endfacet\n");
    }
    let _ = writeln!(s, "endsolid {name}");
    s
}

fn normal(t: &Triangle) -> [f32; 3] {
    let [p0, p1, p2] = t.map(glam::Vec3::from);
    (p1 - p0).cross(p2 - p0).normalize_or_zero().to_array()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tetra() -> Vec<Triangle> {
        let p = [
            [0.0, 0.0, 0.0],
            [1.0, 0.0, 0.0],
            [0.0, 1.0, 0.0],
            [0.0, 0.0, 1.0],
        ];
        [[0, 2, 1], [0, 1, 3], [0, 3, 2], [1, 2, 3]]
            .iter()
            .map(|f| f.map(|k| p[k]))
            .collect()
    }

    #[test]
    fn binary_and_ascii_round_trip() {
        let t = tetra();
        assert_eq!(parse(&to_binary(&t, "solid but binary")).unwrap(), t);
        assert_eq!(parse(to_ascii(&t, "tetra").as_bytes()).unwrap(), t);
        // Two solids in one ASCII file, names with spaces, no name after endsolid.
        let two = format!(
            "{}{}",
            to_ascii(&t[..2], "part one"),
            to_ascii(&t[2..], "two").replace("endsolid two", "endsolid")
        );
        assert_eq!(parse(two.as_bytes()).unwrap(), t);
    }

    #[test]
    fn broken_files_say_what_is_wrong() {
        let t = tetra();
        let bin = to_binary(&t, "x");
        let e = parse(&bin[..bin.len() - 7]).unwrap_err();
        assert!(e.contains("truncated") && e.contains("4 triangles"), "{e}");
        let mut longer = bin.clone();
        longer.extend_from_slice(&[0; 9]);
        assert!(parse(&longer).unwrap_err().contains("not a binary STL"));
        assert!(parse(b"hello").unwrap_err().contains("not an STL file"));
        assert!(parse(&to_binary(&[], "x"))
            .unwrap_err()
            .contains("no triangles"));
        assert!(parse(b"solid empty\nendsolid empty\n")
            .unwrap_err()
            .contains("no triangles"));
        let ascii = to_ascii(&t, "t");
        let cut = &ascii[..ascii.len() / 2];
        assert!(parse(cut.as_bytes()).unwrap_err().contains("truncated"));
        let bad = ascii.replacen("vertex 0e0", "vertex zero", 1);
        let e = parse(bad.as_bytes()).unwrap_err();
        assert!(
            e.contains("line 4") && e.contains("`zero` is not a number"),
            "{e}"
        );
        let e = parse(ascii.replacen("endloop", "endlop", 1).as_bytes()).unwrap_err();
        assert!(e.contains("`endlop` where `endloop` should be"), "{e}");
    }
}
