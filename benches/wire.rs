//! Parse and emit cost of every CM message (criterion).
//!
//! Inputs are the kernel's own MADs from tests/vectors where one exists
//! (REQ, REP, RTU, DREQ, DREP, REJ, MRA, SIDR_REQ, SIDR_REP) and synthetic
//! ones for LAP, APR and ClassPortInfo.

use criterion::{Criterion, criterion_group, criterion_main};
use ibcm::wire::{CmMad, attr, method};
use std::hint::black_box;

fn kernel_mads() -> Vec<(String, [u8; 256])> {
    let mut out = Vec::new();
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/vectors");
    for name in ["rping", "rej", "sidr-rej", "mra"] {
        let text = std::fs::read_to_string(format!("{dir}/{name}.mads.txt")).unwrap();
        let mut hex = Vec::new();
        for line in text.lines() {
            if line.len() > 6 && line.as_bytes()[4] == b':' && !line.starts_with('#') {
                hex.extend(
                    line[5..]
                        .split_whitespace()
                        .map(|h| u8::from_str_radix(h, 16).unwrap()),
                );
                if hex.len() == 256 {
                    let mad: [u8; 256] = hex.as_slice().try_into().unwrap();
                    hex.clear();
                    let m = CmMad::parse(&mad).unwrap();
                    let n = m.msg.name().to_string();
                    if !out.iter().any(|(k, _)| *k == n) {
                        out.push((n, mad));
                    }
                }
            }
        }
    }
    for (a, m) in [
        (attr::LAP, method::SEND),
        (attr::APR, method::SEND),
        (attr::CLASS_PORT_INFO, method::GET_RESP),
    ] {
        let mut mad = [0x11u8; 256];
        mad[..4].copy_from_slice(&[1, 7, 2, m]);
        mad[16..18].copy_from_slice(&a.to_be_bytes());
        mad[32] = 0; // APR info length
        let name = CmMad::parse(&mad).unwrap().msg.name().to_string();
        out.push((name, mad));
    }
    out
}

fn bench(c: &mut Criterion) {
    let mads = kernel_mads();
    let mut g = c.benchmark_group("parse");
    for (name, mad) in &mads {
        g.bench_function(name.as_str(), |b| {
            b.iter(|| CmMad::parse(black_box(mad)).unwrap())
        });
    }
    g.finish();
    let mut g = c.benchmark_group("emit");
    for (name, mad) in &mads {
        let m = CmMad::parse(mad).unwrap();
        let mut buf = [0u8; 256];
        g.bench_function(name.as_str(), |b| {
            b.iter(|| black_box(&m).emit(black_box(&mut buf)))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
