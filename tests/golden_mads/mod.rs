//! The capture tooling's `tests/vectors/*.mads.txt` files, read by the
//! codec's golden test (`tests/golden.rs`) and by `ibcm decode`'s
//! (`cli/tests/decode_cli.rs`).
#![allow(dead_code)] // not every suite reads every field

use std::path::Path;

/// One MAD of a `.mads.txt` file: its frame number, its `# frame ...`
/// line, the `key=value` pairs of the header line and of the message
/// lines, and the 256 bytes.
#[derive(Debug)]
pub struct GoldenMad {
    pub frame: u64,
    /// The `# frame ...` line without its `# `, split on whitespace.
    pub line: Vec<String>,
    pub header: Vec<(String, String)>,
    pub fields: Vec<(String, String)>,
    pub bytes: [u8; 256],
}

/// Every MAD of the `.mads.txt` file at `path`.
pub fn load(path: &Path) -> Vec<GoldenMad> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out: Vec<GoldenMad> = Vec::new();
    let mut hex: Vec<u8> = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# frame ") {
            out.push(GoldenMad {
                frame: rest.split_whitespace().next().unwrap().parse().unwrap(),
                line: line[2..].split_whitespace().map(str::to_string).collect(),
                header: vec![],
                fields: vec![],
                bytes: [0; 256],
            });
            hex.clear();
        } else if let Some(rest) = line.strip_prefix("#   ") {
            let cur = out.last_mut().unwrap();
            let is_header = rest.starts_with("MAD ");
            for tok in rest.split_whitespace() {
                if let Some((k, v)) = tok.split_once('=') {
                    let kv = (k.to_string(), v.to_string());
                    if is_header {
                        cur.header.push(kv);
                    } else {
                        cur.fields.push(kv);
                    }
                }
            }
        } else if line.len() > 6 && line.as_bytes()[4] == b':' && !line.starts_with('#') {
            hex.extend(
                line[5..]
                    .split_whitespace()
                    .map(|h| u8::from_str_radix(h, 16).unwrap()),
            );
            if hex.len() == 256 {
                out.last_mut().unwrap().bytes.copy_from_slice(&hex);
            }
        }
    }
    out
}
