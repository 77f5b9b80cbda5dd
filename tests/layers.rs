//! The library's layers run one way: every top-level module of `src/`
//! imports only modules below it (docs/ARCHITECTURE.md, "Layers"). This
//! test reads every `src/**/*.rs`, collects the `crate::<module>` paths it
//! uses (`use` lines and inline paths, `crate::{a, b}` groups, `super::` out
//! of a top-level module; comments do not count) and fails on any module
//! not listed below its importer in `LAYERS`, or on a module missing from
//! the table.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Each module and every module it may import (all of them below it). The
/// table itself must be acyclic: checked by `table_is_a_layering`.
const LAYERS: &[(&str, &[&str])] = &[
    // The bottom: C mirrors, logging, the codec.
    ("abi", &[]),
    ("log", &[]),
    // The C-style enum declarer (a macro: variant, value and name once).
    ("c_enum", &[]),
    // Member runs a C mirror and its Rust twin share (list macros).
    ("members", &[]),
    // What tests share (a junk-byte generator).
    ("testsupport", &[]),
    ("wire", &["log"]),
    // The protocol engine (sans-IO).
    ("engine", &["wire", "log"]),
    ("path", &["engine", "wire", "abi"]),
    ("sim", &["engine", "wire", "log"]),
    // Design B's connection tracker (MADs in, verdicts and MADs out).
    ("tracker", &["engine", "wire", "testsupport"]),
    // Captures (the transports' taps write them) and what reads them.
    ("capture", &["engine", "wire", "log"]),
    ("decode", &["cma", "capture", "wire", "log"]),
    ("ladder", &["decode", "capture", "wire", "log"]),
    ("svg", &["ladder", "decode", "capture", "wire", "log"]),
    // rdma_cm's conventions over the IB CM (its tests read a capture).
    ("cma", &["engine", "wire", "capture"]),
    // Transports, threads, the Rust API, the C ABI.
    ("fabric", &["capture", "engine", "wire", "log"]),
    // The host CM service's protocol (below both of its ends).
    // (`testsupport`: their unit tests' junk bytes.)
    ("ipc", &["fabric", "engine", "wire", "log", "testsupport"]),
    (
        "runtime",
        &[
            "ipc",
            "fabric",
            "capture",
            "engine",
            "wire",
            "log",
            "abi",
            "testsupport",
        ],
    ),
    (
        "api",
        &[
            "runtime", "ipc", "path", "fabric", "capture", "engine", "wire", "log", "abi",
        ],
    ),
    ("ffi", &["api", "wire", "log", "abi"]),
    // rdma_cm's port table (the service's host-wide one, and its client).
    ("portspace", &["runtime", "ipc", "engine", "log"]),
    // Design B's forwarder: a device's transport, the processes' MADs
    // switched and tracked.
    (
        "forwarder",
        &[
            "runtime", "ipc", "tracker", "fabric", "capture", "engine", "wire", "log",
        ],
    ),
    // The host CM service: devices opened in-process, served over ipc.
    (
        "service",
        &[
            "forwarder",
            "portspace",
            "api",
            "ipc",
            "engine",
            "wire",
            "log",
        ],
    ),
];

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// `text` without comments (line, block and doc comments) and with every
/// string literal emptied: only code remains.
fn strip_comments(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let mut depth = 0;
                while i < b.len() {
                    if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                        depth += 1;
                        i += 2;
                    } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        i += 1;
                    }
                }
            }
            // A raw string: r"…", r#"…"#, …
            b'r' if (b.get(i + 1) == Some(&b'"') || b.get(i + 1) == Some(&b'#'))
                && !(i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')) =>
            {
                let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
                if b.get(i + 1 + hashes) != Some(&b'"') {
                    out.push('r');
                    i += 1;
                    continue;
                }
                let close: String = std::iter::once('"')
                    .chain(std::iter::repeat_n('#', hashes))
                    .collect();
                let body = i + 2 + hashes;
                i = text[body..]
                    .find(&close)
                    .map_or(b.len(), |k| body + k + close.len());
                out.push_str("\"\"");
            }
            // A string literal: its text is not code.
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i = (i + 1).min(b.len());
                out.push_str("\"\"");
            }
            // A character literal such as '"' (not a lifetime).
            b'\'' if b.get(i + 2) == Some(&b'\'') || b.get(i + 1) == Some(&b'\\') => {
                let start = i;
                i += 1;
                while i < b.len() && b[i] != b'\'' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                i = (i + 1).min(b.len());
                out.push_str(&text[start..i]);
            }
            _ => {
                let ch = text[i..].chars().next().unwrap();
                out.push(ch);
                i += ch.len_utf8();
            }
        }
    }
    out
}

fn ident_at(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The first path segment after each `prefix` (`prefix{a, b::c}` gives
/// `a` and `b`). `$crate::` (macro bodies) is not a path of this file.
fn roots_after(code: &str, prefix: &str, out: &mut BTreeSet<String>) {
    let mut from = 0;
    while let Some(k) = code[from..].find(prefix) {
        let at = from + k;
        from = at + prefix.len();
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        let rest = &code[from..];
        if let Some(group) = rest.strip_prefix('{') {
            // Top-level items of the group.
            let mut depth = 0;
            let mut item_start = true;
            for (j, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => item_start = true,
                    c if c.is_whitespace() => {}
                    _ if item_start && depth == 0 => {
                        item_start = false;
                        let id = ident_at(&group[j..]);
                        if !id.is_empty() {
                            out.insert(id.to_string());
                        }
                    }
                    _ => {}
                }
            }
        } else {
            let id = ident_at(rest);
            if !id.is_empty() {
                out.insert(id.to_string());
            }
        }
    }
}

/// Top-level module of a file under `src/` (`None` for `lib.rs`) and
/// whether `super::` in it names the crate root (`src/x.rs`, `src/x/mod.rs`).
fn module_of(rel: &Path) -> Option<(String, bool)> {
    let parts: Vec<&str> = rel.iter().map(|p| p.to_str().unwrap()).collect();
    match parts.as_slice() {
        ["lib.rs"] => None,
        [file] => Some((file.trim_end_matches(".rs").to_string(), true)),
        [dir, "mod.rs"] => Some((dir.to_string(), true)),
        [dir, ..] => Some((dir.to_string(), false)),
        [] => None,
    }
}

/// Module → (imported module → the files that import it).
fn import_graph(src: &Path) -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    let mut tops: BTreeSet<String> = BTreeSet::new();
    for f in &files {
        if let Some((m, _)) = module_of(f.strip_prefix(src).unwrap()) {
            tops.insert(m);
        }
    }
    let mut graph: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for f in &files {
        let rel = f.strip_prefix(src).unwrap();
        let Some((module, super_is_root)) = module_of(rel) else {
            continue;
        };
        let code = strip_comments(&std::fs::read_to_string(f).unwrap());
        let mut roots = BTreeSet::new();
        roots_after(&code, "crate::", &mut roots);
        if super_is_root {
            roots_after(&code, "super::", &mut roots);
        }
        let entry = graph.entry(module.clone()).or_default();
        for r in roots {
            // Macros exported at the root belong to their module.
            let r = if r == "ibcm_log" {
                "log".to_string()
            } else {
                r
            };
            if r != module && tops.contains(&r) {
                entry
                    .entry(r)
                    .or_default()
                    .insert(rel.display().to_string());
            }
        }
    }
    graph
}

fn allowed() -> BTreeMap<&'static str, BTreeSet<&'static str>> {
    LAYERS
        .iter()
        .map(|(m, below)| (*m, below.iter().copied().collect()))
        .collect()
}

/// Every import that breaks the table, as readable lines.
fn violations(graph: &BTreeMap<String, BTreeMap<String, BTreeSet<String>>>) -> Vec<String> {
    let table = allowed();
    let mut bad = Vec::new();
    for (module, imports) in graph {
        let Some(ok) = table.get(module.as_str()) else {
            bad.push(format!(
                "module `{module}` is not in LAYERS (tests/layers.rs): give it a place"
            ));
            continue;
        };
        for (target, files) in imports {
            if !ok.contains(target.as_str()) {
                let files: Vec<&str> = files.iter().map(String::as_str).collect();
                bad.push(format!(
                    "`{module}` imports `{target}`, which is not below it ({})",
                    files.join(", ")
                ));
            }
        }
    }
    bad
}

#[test]
fn table_is_a_layering() {
    let table = allowed();
    for (m, below) in &table {
        for b in below {
            assert!(table.contains_key(b), "{m} lists unknown module {b}");
        }
    }
    // Kahn's algorithm: every module must come out, else there is a cycle.
    let mut left: BTreeMap<&str, BTreeSet<&str>> = table.clone();
    while !left.is_empty() {
        let ready: Vec<&str> = left
            .iter()
            .filter(|(_, deps)| deps.iter().all(|d| !left.contains_key(d)))
            .map(|(m, _)| *m)
            .collect();
        assert!(!ready.is_empty(), "LAYERS has a cycle among {left:?}");
        for m in ready {
            left.remove(m);
        }
    }
}

#[test]
fn every_module_imports_only_modules_below_it() {
    let graph = import_graph(&src_dir());
    for m in ["abi", "api", "ffi", "runtime", "engine", "wire"] {
        assert!(graph.contains_key(m), "no module {m} found under src/");
    }
    let bad = violations(&graph);
    assert!(
        bad.is_empty(),
        "imports running up the layers:\n  {}",
        bad.join("\n  ")
    );
}

#[test]
fn upward_imports_are_caught() {
    // A scratch tree with one import in each direction: the downward one
    // passes, the upward one (runtime → ffi), a grouped one and one out of
    // a top-level file through `super::` are reported; comments and
    // strings are ignored.
    let dir = std::env::temp_dir().join(format!("ibcm-layers-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("runtime")).unwrap();
    std::fs::write(
        dir.join("runtime/mod.rs"),
        "use crate::engine::Engine;\n\
         // use crate::api::Device;\n\
         const S: &str = \"crate::svg\";\n\
         const R: &str = r#\"\"crate::svg\"#;\n\
         fn f() -> crate::ffi::convert::X { todo!() }\n",
    )
    .unwrap();
    std::fs::write(dir.join("engine.rs"), "use crate::{wire::Gid, runtime};\n").unwrap();
    std::fs::write(dir.join("wire.rs"), "use super::abi::IbGid;\n").unwrap();
    for m in ["ffi.rs", "api.rs", "abi.rs", "svg.rs", "lib.rs"] {
        std::fs::write(dir.join(m), "/* use crate::runtime; */\n").unwrap();
    }
    let graph = import_graph(&dir);
    let bad = violations(&graph);
    std::fs::remove_dir_all(&dir).unwrap();
    let text = bad.join("\n");
    assert!(text.contains("`runtime` imports `ffi`"), "{text}");
    assert!(text.contains("`engine` imports `runtime`"), "{text}");
    assert!(text.contains("`wire` imports `abi`"), "{text}");
    assert_eq!(bad.len(), 3, "{text}");
}
