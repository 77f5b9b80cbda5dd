//! Capture reader tests: the golden kernel captures in tests/vectors, pcapng
//! and link-type variants built from them, synthetic skip causes, malformed
//! files, and no-panic property tests.

use super::*;
#[path = "../../tests/common/byte_order.rs"]
mod byte_order;
use crate::wire::roce::{
    self, Bth, Deth, GSI_PAYLOAD_LEN, GsiDatagram, IcrcInput, icrc_ipv4, icrc_ipv6,
};
use byte_order::Order;
use proptest::prelude::*;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;

const VECTORS: [&str; 5] = ["rping", "ucmatose", "rej", "sidr-rej", "mra"];

fn vector(name: &str, ext: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/vectors")
        .join(format!("{name}.{ext}"))
}

fn vector_bytes(name: &str) -> Vec<u8> {
    std::fs::read(vector(name, "pcap")).unwrap()
}

#[derive(Debug)]
struct Expected {
    frame: u64,
    src: IpAddr,
    src_port: u16,
    dst: IpAddr,
    dst_port: u16,
    mad: Vec<u8>,
}

/// Parses a `NAME.mads.txt` (pcap2mad.py output): `# frame N t=... SRC:PORT
/// -> DST:PORT ...` headers, each followed by 16 lines `OOOO: xx xx ...`.
fn expected_mads(name: &str) -> Vec<Expected> {
    let text = std::fs::read_to_string(vector(name, "mads.txt")).unwrap();
    let mut out: Vec<Expected> = Vec::new();
    let addr = |s: &str| {
        let (ip, port) = s.rsplit_once(':').unwrap();
        (ip.parse::<IpAddr>().unwrap(), port.parse::<u16>().unwrap())
    };
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# frame ") {
            let f: Vec<&str> = rest.split_whitespace().collect();
            assert_eq!(f[3], "->", "{line}");
            let (src, src_port) = addr(f[2]);
            let (dst, dst_port) = addr(f[4]);
            out.push(Expected {
                frame: f[0].parse().unwrap(),
                src,
                src_port,
                dst,
                dst_port,
                mad: vec![],
            });
        } else if line.len() > 5
            && line.as_bytes()[4] == b':'
            && line[..4].bytes().all(|c| c.is_ascii_hexdigit())
        {
            let e = out.last_mut().unwrap();
            for h in line[5..].split_whitespace() {
                e.mad.push(u8::from_str_radix(h, 16).unwrap());
            }
        }
    }
    for e in &out {
        assert_eq!(e.mad.len(), 256, "frame {} of {name}", e.frame);
    }
    out
}

/// `(frame, epoch nanos)` from a `tshark -V` text.
fn tshark_times(name: &str) -> Vec<(u64, u64)> {
    let text = std::fs::read_to_string(vector(name, "tshark.txt")).unwrap();
    let mut out = Vec::new();
    let mut frame = 0;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("Frame ") {
            frame = rest.split(':').next().unwrap().parse().unwrap();
        } else if let Some(rest) = line.trim().strip_prefix("Epoch Time: ") {
            let t = rest.split_whitespace().next().unwrap();
            let (s, frac) = t.split_once('.').unwrap();
            let ns: u64 = format!("{frac:0<9}")[..9].parse().unwrap();
            out.push((frame, s.parse::<u64>().unwrap() * 1_000_000_000 + ns));
        }
    }
    out
}

fn skipped(not_ip: u64, not_udp: u64, not_gsi: u64) -> Skipped {
    Skipped {
        not_ip,
        not_udp,
        not_gsi,
        ..Skipped::default()
    }
}

#[test]
fn golden_vectors() {
    // ARP = not_ip; IPv6 ICMPv6 (MLD behind a hop-by-hop header, ND, RS) =
    // not_udp; rxe RC traffic (SEND, ACK, RDMA READ/WRITE) on port 4791 = not_gsi.
    let counts = [
        ("rping", 49, skipped(2, 6, 36)),
        ("ucmatose", 59, skipped(2, 12, 40)),
        ("rej", 10, skipped(2, 6, 0)),
        ("sidr-rej", 9, skipped(2, 5, 0)),
        ("mra", 35, skipped(2, 14, 12)),
    ];
    for (name, total, skip) in counts {
        let cap = read_file(vector(name, "pcap")).unwrap();
        assert_eq!(
            cap.format,
            FileFormat::Pcap {
                big_endian: false,
                nanosecond: false
            }
        );
        let exp = expected_mads(name);
        assert_eq!(cap.frames.len(), exp.len(), "{name}");
        for (f, e) in cap.frames.iter().zip(&exp) {
            assert_eq!(f.frame, e.frame, "{name}");
            assert_eq!(
                (f.src, f.src_port, f.dst, f.dst_port),
                (e.src, e.src_port, e.dst, e.dst_port)
            );
            assert_eq!(&f.mad[..], &e.mad[..], "{name} frame {}", f.frame);
            assert!(f.icrc_ok, "{name} frame {} ICRC {:#x}", f.frame, f.icrc);
            assert_eq!(f.bth, Bth::gsi(f.bth.psn), "{name} frame {}", f.frame);
            assert_eq!(f.deth, Deth::GSI);
        }
        assert_eq!(cap.total_packets, total, "{name}");
        assert_eq!(cap.skipped, skip, "{name}: {}", cap.skipped);
        assert_eq!(
            cap.frames.len() as u64 + cap.skipped.total(),
            cap.total_packets
        );
        // Timestamps are those tshark shows.
        let times = tshark_times(name);
        assert_eq!(times.len(), cap.frames.len(), "{name}");
        for (f, (n, ts)) in cap.frames.iter().zip(times) {
            assert_eq!((f.frame, f.ts_nanos), (n, ts), "{name}");
        }
    }
}

#[test]
fn rc_traffic_icrc_verifies_too() {
    // The ICRC code is not GSI-specific: every RoCEv2 packet in the vectors
    // (RC SEND/ACK/READ/WRITE included) verifies.
    let mut n = 0;
    for name in VECTORS {
        let data = vector_bytes(name);
        for p in Reader::new(&data).unwrap() {
            let p = p.unwrap();
            let Ok(u) = link::decode_udp(p.link_type, p.data) else {
                continue;
            };
            if u.dst_port != roce::ROCEV2_UDP_PORT {
                continue;
            }
            let link::IpHeader::V4(ip) = u.ip else {
                panic!("IPv6 RoCE in {name}")
            };
            roce::verify_icrc_ipv4(ip, &u.udp_header, u.payload).unwrap();
            n += 1;
        }
    }
    assert_eq!(n, 5 + 36 + 5 + 40 + 2 + 2 + 7 + 12);
}

// ---------------------------------------------------------------------------
// File writers used by the tests
// ---------------------------------------------------------------------------

#[derive(Clone)]
struct Rec {
    ts_nanos: u64,
    orig_len: u32,
    data: Vec<u8>,
}

fn records(data: &[u8]) -> Vec<Rec> {
    Reader::new(data)
        .unwrap()
        .map(|p| {
            let p = p.unwrap();
            Rec {
                ts_nanos: p.ts_nanos,
                orig_len: p.orig_len,
                data: p.data.to_vec(),
            }
        })
        .collect()
}

fn write_pcap(link_type: u32, big: bool, nano: bool, recs: &[Rec]) -> Vec<u8> {
    let order = Order { big };
    let mut o = Vec::new();
    o.extend(order.u32(if nano { 0xa1b2_3c4d } else { 0xa1b2_c3d4 }));
    o.extend(order.u16(2));
    o.extend(order.u16(4));
    o.extend(order.u32(0));
    o.extend(order.u32(0));
    o.extend(order.u32(65535));
    o.extend(order.u32(link_type));
    for r in recs {
        let sec = (r.ts_nanos / 1_000_000_000) as u32;
        let ns = (r.ts_nanos % 1_000_000_000) as u32;
        o.extend(order.u32(sec));
        o.extend(order.u32(if nano { ns } else { ns / 1000 }));
        o.extend(order.u32(r.data.len() as u32));
        o.extend(order.u32(r.orig_len));
        o.extend(&r.data);
    }
    o
}

/// A pcapng writer; the byte order is the current section's.
struct Ng {
    out: Vec<u8>,
    order: Order,
    /// Offset of every block written.
    offsets: Vec<usize>,
}

impl Ng {
    fn new() -> Self {
        Ng {
            out: Vec::new(),
            order: Order::default(),
            offsets: Vec::new(),
        }
    }
    fn opt(&self, code: u16, value: &[u8]) -> Vec<u8> {
        let mut o = Vec::new();
        o.extend(self.order.u16(code));
        o.extend(self.order.u16(value.len() as u16));
        o.extend(value);
        o.resize(o.len().div_ceil(4) * 4, 0);
        o
    }
    fn block(&mut self, ty: u32, body: &[u8]) {
        let padded = body.len().div_ceil(4) * 4;
        let total = (12 + padded) as u32;
        self.offsets.push(self.out.len());
        self.out.extend(self.order.u32(ty));
        self.out.extend(self.order.u32(total));
        self.out.extend(body);
        self.out.resize(self.out.len() + padded - body.len(), 0);
        self.out.extend(self.order.u32(total));
    }
    fn shb(&mut self, big: bool) {
        self.order = Order { big };
        let mut b = Vec::new();
        b.extend(self.order.u32(0x1A2B_3C4D));
        b.extend(self.order.u16(1));
        b.extend(self.order.u16(0));
        b.extend([0xff; 8]); // section length unknown
        b.extend(self.opt(4, b"ibcm capture test")); // shb_userappl
        b.extend(self.opt(0, b""));
        self.block(0x0A0D_0D0A, &b);
    }
    fn idb(&mut self, link: u16, snaplen: u32, tsresol: Option<u8>, tsoffset: Option<i64>) {
        let mut b = Vec::new();
        b.extend(self.order.u16(link));
        b.extend(self.order.u16(0));
        b.extend(self.order.u32(snaplen));
        b.extend(self.opt(2, b"eth0")); // if_name
        if let Some(r) = tsresol {
            b.extend(self.opt(9, &[r]));
        }
        if let Some(o) = tsoffset {
            b.extend(self.opt(14, &self.order.i64(o)));
        }
        b.extend(self.opt(0, b""));
        self.block(1, &b);
    }
    fn epb(&mut self, iface: u32, ts: u64, r: &Rec, comment: bool) {
        let mut b = Vec::new();
        b.extend(self.order.u32(iface));
        b.extend(self.order.u32((ts >> 32) as u32));
        b.extend(self.order.u32(ts as u32));
        b.extend(self.order.u32(r.data.len() as u32));
        b.extend(self.order.u32(r.orig_len));
        b.extend(&r.data);
        b.resize(b.len().div_ceil(4) * 4, 0);
        if comment {
            b.extend(self.opt(1, b"a comment"));
            b.extend(self.opt(0, b""));
        }
        self.block(6, &b);
    }
    fn pb(&mut self, iface: u16, ts: u64, r: &Rec) {
        let mut b = Vec::new();
        b.extend(self.order.u16(iface));
        b.extend(self.order.u16(0));
        b.extend(self.order.u32((ts >> 32) as u32));
        b.extend(self.order.u32(ts as u32));
        b.extend(self.order.u32(r.data.len() as u32));
        b.extend(self.order.u32(r.orig_len));
        b.extend(&r.data);
        self.block(2, &b);
    }
    fn spb(&mut self, r: &Rec) {
        let mut b = Vec::new();
        b.extend(self.order.u32(r.orig_len));
        b.extend(&r.data);
        self.block(3, &b);
    }
}

const TS_OFFSET_SECS: i64 = 1_700_000_000;

/// rping.pcap as pcapng: an LE section (µs EPBs, NRB, ISB), then a BE
/// section with a ns interface (EPBs), a 2^-30 s interface with an
/// `if_tsoffset` (obsolete PBs), a custom block, and SPBs.
fn rping_pcapng() -> Vec<u8> {
    let recs = records(&vector_bytes("rping"));
    let mut ng = Ng::new();
    ng.shb(false);
    ng.idb(1, 65536, None, None);
    ng.block(4, &[0, 0, 0, 0]); // empty name resolution block
    for (i, r) in recs[..20].iter().enumerate() {
        ng.epb(0, r.ts_nanos / 1000, r, i == 3);
    }
    ng.block(5, &[0; 12]); // interface statistics
    ng.shb(true);
    ng.idb(1, 65535, Some(9), None);
    ng.idb(1, 0, Some(0x80 | 30), Some(TS_OFFSET_SECS));
    for r in &recs[20..30] {
        ng.epb(0, r.ts_nanos, r, false);
    }
    for r in &recs[30..38] {
        let rel = r.ts_nanos - TS_OFFSET_SECS as u64 * 1_000_000_000;
        let units = ((rel as u128) << 30).div_ceil(1_000_000_000) as u64;
        ng.pb(1, units, r);
    }
    ng.block(0x4000_0BAD, b"custom block, skipped");
    for r in &recs[38..] {
        ng.spb(r);
    }
    ng.out
}

#[test]
fn pcapng_sections_and_block_types() {
    let pcap = read_bytes(&vector_bytes("rping")).unwrap();
    let ng = read_bytes(&rping_pcapng()).unwrap();
    assert_eq!(ng.format, FileFormat::Pcapng);
    assert_eq!(ng.total_packets, pcap.total_packets);
    assert_eq!(ng.skipped, pcap.skipped);
    assert_eq!(ng.frames.len(), pcap.frames.len());
    for (a, b) in ng.frames.iter().zip(&pcap.frames) {
        let mut a = a.clone();
        match a.frame {
            1..=30 => assert_eq!(a.ts_nanos, b.ts_nanos),
            31..=38 => assert!(a.ts_nanos.abs_diff(b.ts_nanos) <= 1),
            _ => assert_eq!(a.ts_nanos, 0, "SPBs carry no timestamp"),
        }
        a.ts_nanos = b.ts_nanos;
        assert_eq!(&a, b);
    }
    // The CM frames 47 and 48 came from SPBs.
    assert_eq!(
        ng.frames.iter().map(|f| f.frame).collect::<Vec<_>>(),
        [8, 9, 10, 47, 48]
    );
    // Every packet record, including the PBs with their timestamps.
    let data = rping_pcapng();
    let pk: Vec<_> = Reader::new(&data).unwrap().map(|p| p.unwrap()).collect();
    let recs = records(&vector_bytes("rping"));
    assert_eq!(pk.len(), recs.len());
    for (i, (p, r)) in pk.iter().zip(&recs).enumerate() {
        assert_eq!(p.frame, i as u64 + 1);
        assert_eq!(p.data, &r.data[..]);
        assert_eq!(p.link_type, LINKTYPE_ETHERNET);
        if i < 38 {
            assert!(p.ts_nanos.abs_diff(r.ts_nanos) <= 1, "record {i}");
        }
    }
}

#[test]
fn pcapng_spb_snaplen() {
    let recs = records(&vector_bytes("rej"));
    let mut ng = Ng::new();
    ng.shb(true);
    ng.idb(1, 64, None, None);
    ng.spb(&recs[7]); // the REQ, 322 bytes, cut to 64
    let cap = read_bytes(&ng.out).unwrap();
    assert_eq!(
        cap.skipped,
        Skipped {
            truncated: 1,
            ..Skipped::default()
        }
    );
    let p = Reader::new(&ng.out).unwrap().next().unwrap().unwrap();
    assert_eq!((p.data.len(), p.orig_len), (64, 322));
}

fn err_of(data: &[u8]) -> CaptureError {
    match read_bytes(data) {
        Err(e) => e,
        Ok(c) => panic!("expected an error, got {} packets", c.total_packets),
    }
}

#[test]
fn malformed_pcapng_files() {
    let good = rping_pcapng();
    let last = {
        // Offset of the last block: walk the file.
        let mut off = 0;
        let mut last = 0;
        let mut big = false;
        while off < good.len() {
            if good[off..off + 4] == [0x0a, 0x0d, 0x0d, 0x0a] {
                big = good[off + 8] == 0x1a;
            }
            let l: [u8; 4] = good[off + 4..off + 8].try_into().unwrap();
            last = off;
            off += if big {
                u32::from_be_bytes(l)
            } else {
                u32::from_le_bytes(l)
            } as usize;
        }
        last
    };

    // Cut short: the last block runs past the end.
    let e = err_of(&good[..good.len() - 4]);
    assert_eq!(e.offset, last as u64);
    assert!(e.message.contains("beyond end of file"), "{e}");
    assert!(e.to_string().contains(&format!("offset {last}")), "{e}");
    // Cut inside a block header.
    let e = err_of(&good[..last + 6]);
    assert_eq!(e.offset, last as u64);
    assert!(e.message.contains("block header"), "{e}");
    // Trailing length differs.
    let mut bad = good.clone();
    let n = bad.len();
    bad[n - 1] ^= 0x04;
    let e = err_of(&bad);
    assert!(e.message.contains("trailing length"), "{e}");
    assert_eq!(e.offset, last as u64);

    // Block length not a multiple of 4 / below 12.
    let mut ng = Ng::new();
    ng.shb(false);
    let shb_len = ng.out.len();
    ng.out.extend(1u32.to_le_bytes());
    ng.out.extend(13u32.to_le_bytes());
    ng.out.extend([0; 9]);
    let e = err_of(&ng.out);
    assert_eq!(e.offset, shb_len as u64);
    assert!(e.message.contains("multiple of 4"), "{e}");
    ng.out.truncate(shb_len);
    ng.out.extend(1u32.to_le_bytes());
    ng.out.extend(8u32.to_le_bytes());
    ng.out.extend(8u32.to_le_bytes());
    assert!(err_of(&ng.out).message.contains("minimum 12"));

    // Packet before any interface / unknown interface.
    let recs = records(&vector_bytes("rej"));
    let mut ng = Ng::new();
    ng.shb(false);
    ng.spb(&recs[0]);
    let e = err_of(&ng.out);
    assert!(
        e.message.contains("interface 0 but this section has 0"),
        "{e}"
    );
    let mut ng = Ng::new();
    ng.shb(true);
    ng.idb(1, 0, None, None);
    ng.epb(0, 1, &recs[0], false);
    ng.shb(false); // a new section forgets the interfaces
    ng.epb(0, 1, &recs[1], false);
    let e = err_of(&ng.out);
    assert_eq!(e.offset, *ng.offsets.last().unwrap() as u64);
    // ...but the packet of the first section was read.
    let mut rd = Reader::new(&ng.out).unwrap();
    assert!(rd.next().unwrap().is_ok());
    assert!(rd.next().unwrap().is_err());
    assert!(rd.next().is_none());

    // EPB whose captured length exceeds the block.
    let mut ng = Ng::new();
    ng.shb(false);
    ng.idb(1, 0, None, None);
    ng.epb(0, 1, &recs[0], false);
    let at = ng.offsets[2] + 8 + 12;
    ng.out[at..at + 4].copy_from_slice(&1000u32.to_le_bytes());
    let e = err_of(&ng.out);
    assert!(e.message.contains("claims 1000 captured bytes"), "{e}");

    // Bodies shorter than their block's fixed part (EPB 20, PB 20, SPB 4).
    for (ty, body, want) in [
        (
            6,
            &[0u8; 16][..],
            "Enhanced Packet Block body is 16 bytes, needs at least 20",
        ),
        (
            2,
            &[0u8; 12][..],
            "Packet Block body is 12 bytes, needs at least 20",
        ),
        (
            3,
            &[][..],
            "Simple Packet Block body is 0 bytes, needs at least 4",
        ),
    ] {
        let mut ng = Ng::new();
        ng.shb(false);
        ng.idb(1, 0, None, None);
        ng.block(ty, body);
        let e = err_of(&ng.out);
        assert!(e.message.contains(want), "{e}");
    }

    // IDB option running past the block.
    let mut ng = Ng::new();
    ng.shb(false);
    ng.block(1, &[1, 0, 0, 0, 0, 0, 0, 0, 9, 0, 40, 0, 6, 0, 0, 0]);
    assert!(err_of(&ng.out).message.contains("option 9"));

    // Bad byte-order magic, wrong major version, not starting with an SHB.
    let mut bad = good.clone();
    bad[8] = 0x99;
    let e = err_of(&bad);
    assert_eq!(e.offset, 8);
    assert!(e.message.contains("byte-order magic"), "{e}");
    let mut bad = good.clone();
    bad[12] = 2;
    assert!(err_of(&bad).message.contains("major version 2"));
    assert!(err_of(&good[4..]).message.contains("not a pcap or pcapng"));
}

#[test]
fn malformed_pcap_files() {
    let good = vector_bytes("rej");
    let e = err_of(&[]);
    assert_eq!(e.offset, 0);
    assert!(e.message.contains("too short"), "{e}");
    let e = err_of(&good[..20]);
    assert!(e.message.contains("needs 24 bytes"), "{e}");
    // Cut in the last record's data and in its header.
    let recs = records(&good);
    let last_off = good.len() - 16 - recs.last().unwrap().data.len();
    let e = err_of(&good[..good.len() - 1]);
    assert_eq!(e.offset, last_off as u64);
    assert!(e.message.contains("remain in the file"), "{e}");
    let e = err_of(&good[..last_off + 10]);
    assert_eq!(e.offset, last_off as u64);
    assert!(e.message.contains("record header"), "{e}");
    let mut bad = good.clone();
    bad[4] = 3;
    assert!(err_of(&bad).message.contains("version 3"));
    let e = err_of(b"GIF89a....");
    assert!(e.to_string().contains("47 49 46 38"), "{e}");
    // A header-only file is an empty capture.
    let empty = read_bytes(&good[..24]).unwrap();
    assert_eq!((empty.total_packets, empty.frames.len()), (0, 0));
    // read_file reports I/O errors.
    let e = read_file("/nonexistent/x.pcap").unwrap_err();
    assert!(e.message.contains("cannot read /nonexistent/x.pcap"), "{e}");
}

// ---------------------------------------------------------------------------
// Link types
// ---------------------------------------------------------------------------

/// Reads `recs` rewritten by `f` (None drops a record) as `link_type`, and
/// checks the CM frames equal those of the Ethernet original.
fn check_link_variant(
    name: &str,
    link_type: u32,
    big: bool,
    nano: bool,
    f: impl Fn(&[u8]) -> Option<Vec<u8>>,
) -> Capture {
    let orig = read_bytes(&vector_bytes(name)).unwrap();
    let recs: Vec<Rec> = records(&vector_bytes(name))
        .into_iter()
        .filter_map(|r| {
            let data = f(&r.data)?;
            Some(Rec {
                orig_len: data.len() as u32,
                data,
                ..r
            })
        })
        .collect();
    let cap = read_bytes(&write_pcap(link_type, big, nano, &recs)).unwrap();
    assert_eq!(
        cap.format,
        FileFormat::Pcap {
            big_endian: big,
            nanosecond: nano
        }
    );
    assert_eq!(
        cap.frames.len(),
        orig.frames.len(),
        "{name} as link type {link_type}"
    );
    for (a, b) in cap.frames.iter().zip(&orig.frames) {
        let mut a = a.clone();
        a.frame = b.frame;
        if !nano {
            assert_eq!(a.ts_nanos, b.ts_nanos);
        }
        assert_eq!(&a, b);
    }
    assert_eq!(
        cap.frames.len() as u64 + cap.skipped.total(),
        cap.total_packets
    );
    cap
}

fn with_vlan_tags(frame: &[u8], tpids: &[u16]) -> Vec<u8> {
    let mut v = frame[..12].to_vec();
    for (i, t) in tpids.iter().enumerate() {
        v.extend(t.to_be_bytes());
        v.extend((0x0064u16 + i as u16).to_be_bytes()); // VLAN 100, 101, ...
    }
    v.extend(&frame[12..]);
    v
}

#[test]
fn vlan_frames() {
    let one = check_link_variant("rej", LINKTYPE_ETHERNET, true, true, |f| {
        Some(with_vlan_tags(f, &[0x8100]))
    });
    assert_eq!(one.skipped, skipped(2, 6, 0));
    let qinq = check_link_variant("rping", LINKTYPE_ETHERNET, false, true, |f| {
        Some(with_vlan_tags(f, &[0x88a8, 0x8100]))
    });
    assert_eq!(qinq.skipped, skipped(2, 6, 36));
    // A tag cut short.
    let cut = with_vlan_tags(&records(&vector_bytes("rej"))[7].data, &[0x8100])[..16].to_vec();
    assert_eq!(
        link::decode_udp(LINKTYPE_ETHERNET, &cut),
        Err(SkipReason::Truncated)
    );
    // Too many tags.
    let deep = with_vlan_tags(&records(&vector_bytes("rej"))[7].data, &[0x8100; 9]);
    assert_eq!(
        link::decode_udp(LINKTYPE_ETHERNET, &deep),
        Err(SkipReason::Malformed)
    );
}

#[test]
fn cooked_raw_and_null_links() {
    let ethertype = |f: &[u8]| u16::from_be_bytes([f[12], f[13]]);
    let sll = check_link_variant("mra", LINKTYPE_LINUX_SLL, false, false, |f| {
        let mut v = vec![0, 0, 0, 1, 0, 6];
        v.extend(&f[6..12]);
        v.extend([0, 0]);
        v.extend(&f[12..]);
        Some(v)
    });
    assert_eq!(sll.skipped, skipped(2, 14, 12));
    let sll2 = check_link_variant("mra", LINKTYPE_LINUX_SLL2, true, false, |f| {
        let mut v = f[12..14].to_vec();
        v.extend([0, 0, 0, 0, 0, 2, 0, 1, 4, 6]);
        v.extend(&f[6..12]);
        v.extend([0, 0]);
        v.extend(&f[14..]);
        Some(v)
    });
    assert_eq!(sll2.skipped, skipped(2, 14, 12));
    let ip_only = |f: &[u8]| matches!(ethertype(f), 0x0800 | 0x86dd).then(|| f[14..].to_vec());
    let raw = check_link_variant("ucmatose", LINKTYPE_RAW, false, false, ip_only);
    assert_eq!(raw.skipped, skipped(0, 12, 40));
    let v4 = check_link_variant("rping", LINKTYPE_IPV4, false, true, |f| {
        (ethertype(f) == 0x0800).then(|| f[14..].to_vec())
    });
    assert_eq!(v4.skipped, skipped(0, 0, 36));
    let null = check_link_variant("sidr-rej", LINKTYPE_NULL, false, false, |f| {
        let af: u32 = match ethertype(f) {
            0x0800 => 2,
            0x86dd => 30,
            _ => return None,
        };
        let mut v = af.to_le_bytes().to_vec();
        v.extend(&f[14..]);
        Some(v)
    });
    assert_eq!(null.skipped, skipped(0, 5, 0));
    let lo = check_link_variant("sidr-rej", LINKTYPE_LOOP, true, false, |f| {
        let af: u32 = match ethertype(f) {
            0x0800 => 2,
            0x86dd => 24,
            _ => 99,
        };
        let mut v = af.to_be_bytes().to_vec();
        v.extend(&f[14..]);
        Some(v)
    });
    assert_eq!(lo.skipped, skipped(2, 5, 0));
    // IPv6 frames on the IPv4 link type are malformed, not mistaken for IPv4.
    let r = records(&vector_bytes("rej"));
    let v6 = r.iter().find(|r| ethertype(&r.data) == 0x86dd).unwrap();
    assert_eq!(
        link::decode_udp(LINKTYPE_IPV4, &v6.data[14..]),
        Err(SkipReason::Malformed)
    );
    assert_eq!(
        link::decode_udp(147, &v6.data),
        Err(SkipReason::UnsupportedLink)
    );
    let all = read_bytes(&write_pcap(147, false, false, &r)).unwrap();
    assert_eq!(
        all.skipped,
        Skipped {
            unsupported_link: 10,
            ..Skipped::default()
        }
    );
}

// ---------------------------------------------------------------------------
// Synthetic frames: IPv6, IPv4 options and every skip cause
// ---------------------------------------------------------------------------

fn cm_mad() -> [u8; 256] {
    let exp = expected_mads("rej");
    exp[0].mad.clone().try_into().unwrap()
}

fn ethernet(ethertype: u16, rest: &[u8]) -> Vec<u8> {
    let mut v = vec![0x52, 0x54, 0, 0x77, 0, 1, 0x52, 0x54, 0, 0x77, 0, 2];
    v.extend(ethertype.to_be_bytes());
    v.extend(rest);
    v
}

const V4A: Ipv4Addr = Ipv4Addr::new(10, 77, 5, 254);
const V4B: Ipv4Addr = Ipv4Addr::new(10, 77, 5, 1);

/// An Ethernet/IPv4 GSI frame as a Linux UDP socket would send it.
fn v4_frame(mad: &[u8; 256], src_port: u16, dst_port: u16) -> Vec<u8> {
    let input = IcrcInput::linux_ipv4(V4A, V4B, src_port, dst_port);
    let mut payload = [0u8; GSI_PAYLOAD_LEN];
    GsiDatagram::new(5, *mad).emit(input, &mut payload);
    let mut ip = input.ipv4_header().unwrap().to_vec();
    ip.extend(input.udp_header());
    ip.extend(payload);
    ethernet(0x0800, &ip)
}

fn v6_addrs() -> (Ipv6Addr, Ipv6Addr) {
    (
        "fe80::5054:ff:fe77:2".parse().unwrap(),
        "fe80::5054:ff:fe77:1".parse().unwrap(),
    )
}

fn rec(data: Vec<u8>) -> Rec {
    Rec {
        ts_nanos: 1_000_000_123,
        orig_len: data.len() as u32,
        data,
    }
}

#[test]
fn ipv6_frames() {
    let (a, b) = v6_addrs();
    let mad = cm_mad();
    let input = IcrcInput::linux_ipv6(a, b, 55410, 4791);
    let mut payload = [0u8; GSI_PAYLOAD_LEN];
    GsiDatagram::new(9, mad).emit(input, &mut payload);
    let hdr = input.ipv6_header().unwrap();
    let mut plain = hdr.to_vec();
    plain.extend(input.udp_header());
    plain.extend(payload);

    // Same datagram behind hop-by-hop + destination options headers; the
    // ICRC covers the real fixed header (payload length, next header).
    let mut fixed = hdr;
    fixed[4..6].copy_from_slice(&(288u16 + 16).to_be_bytes());
    fixed[6] = 0; // hop-by-hop
    fixed[1] = 0x0a; // flow label bits: masked
    let udp = input.udp_header();
    let mut p2 = payload;
    let crc = icrc_ipv6(&fixed, &udp, &p2[..GSI_PAYLOAD_LEN - 4]);
    p2[GSI_PAYLOAD_LEN - 4..].copy_from_slice(&crc.to_le_bytes());
    let mut ext = fixed.to_vec();
    ext.extend([60, 0, 1, 4, 0, 0, 0, 0]); // hop-by-hop: PadN, next = dest opts
    ext.extend([17, 0, 1, 4, 0, 0, 0, 0]); // destination options, next = UDP
    ext.extend(udp);
    ext.extend(p2);

    // A non-first fragment.
    let mut frag = hdr;
    frag[4..6].copy_from_slice(&(288u16 + 8).to_be_bytes());
    frag[6] = 44;
    let mut fr = frag.to_vec();
    fr.extend([17, 0, 0x05, 0x00, 0, 0, 0, 1]);
    fr.extend(udp);
    fr.extend(payload);

    let cap = read_bytes(&write_pcap(
        LINKTYPE_ETHERNET,
        false,
        true,
        &[
            rec(ethernet(0x86dd, &plain)),
            rec(ethernet(0x86dd, &ext)),
            rec(ethernet(0x86dd, &fr)),
        ],
    ))
    .unwrap();
    assert_eq!(cap.frames.len(), 2);
    assert_eq!(
        cap.skipped,
        Skipped {
            fragment: 1,
            ..Skipped::default()
        }
    );
    for f in &cap.frames {
        assert_eq!((f.src, f.dst), (IpAddr::V6(a), IpAddr::V6(b)));
        assert_eq!((f.src_port, f.dst_port), (55410, 4791));
        assert_eq!(f.mad, mad);
        assert!(f.icrc_ok, "frame {}", f.frame);
        assert_eq!(f.ts_nanos, 1_000_000_123);
    }
    assert_eq!(cap.frames[1].icrc, crc);
}

#[test]
fn every_skip_cause() {
    let mad = cm_mad();
    let good = v4_frame(&mad, 4791, 4791);
    let mut frames: Vec<(Vec<u8>, Option<SkipReason>)> = vec![(good.clone(), None)];
    let mut push = |f: Vec<u8>, r: SkipReason| frames.push((f, Some(r)));
    let edit = |f: &dyn Fn(&mut Vec<u8>)| {
        let mut v = good.clone();
        f(&mut v);
        v
    };
    push(ethernet(0x88cc, &[0; 40]), SkipReason::NotIp);
    push(good[..10].to_vec(), SkipReason::Truncated);
    push(good[..100].to_vec(), SkipReason::Truncated);
    push(edit(&|v| v[14 + 9] = 6), SkipReason::NotUdp);
    push(edit(&|v| v[14 + 6] |= 0x20), SkipReason::Fragment);
    push(edit(&|v| v[14 + 7] = 0x10), SkipReason::Fragment);
    push(edit(&|v| v[14] = 0x55), SkipReason::Malformed);
    push(edit(&|v| v[14] = 0x44), SkipReason::Malformed);
    push(
        edit(&|v| v[14 + 24..14 + 26].copy_from_slice(&400u16.to_be_bytes())),
        SkipReason::Malformed,
    );
    push(v4_frame(&mad, 4791, 4792), SkipReason::NotRocev2Port);
    push(v4_frame(&mad, 4791, 55410), SkipReason::NotRocev2Port);
    push(edit(&|v| v[14 + 28] = 0x04), SkipReason::NotGsi);
    push(edit(&|v| v[14 + 28 + 12] = 0), SkipReason::NotGsi);
    let mut other_class = mad;
    other_class[1] = 0x04;
    push(v4_frame(&other_class, 4791, 4791), SkipReason::NotCm);
    // A UD SEND to QP1 of only 20 bytes.
    push(
        edit(&|v| {
            v.truncate(14 + 28 + 20);
            v[14 + 2..14 + 4].copy_from_slice(&48u16.to_be_bytes());
            v[14 + 24..14 + 26].copy_from_slice(&28u16.to_be_bytes());
        }),
        SkipReason::Malformed,
    );
    // Accepted: link padding after the IP datagram, a corrupted MAD (ICRC
    // reported bad), IPv4 options covered by the ICRC.
    frames.push((edit(&|v| v.extend([0; 20])), None));
    frames.push((edit(&|v| v[14 + 28 + 20 + 100] ^= 1), None));
    let with_options = {
        let mut ip = good[14..34].to_vec();
        ip[0] = 0x46;
        ip[2..4].copy_from_slice(&(24u16 + 288).to_be_bytes());
        ip.extend([1, 1, 1, 0]); // NOP NOP NOP EOL
        let udp: [u8; 8] = good[34..42].try_into().unwrap();
        let mut payload = good[42..].to_vec();
        let crc = icrc_ipv4(&ip, &udp, &payload[..276]);
        payload[276..].copy_from_slice(&crc.to_le_bytes());
        let mut v = ip;
        v.extend(udp);
        v.extend(payload);
        ethernet(0x0800, &v)
    };
    frames.push((with_options, None));

    let recs: Vec<Rec> = frames.iter().map(|(f, _)| rec(f.clone())).collect();
    let cap = read_bytes(&write_pcap(LINKTYPE_ETHERNET, true, false, &recs)).unwrap();
    let mut want = Skipped::default();
    for (i, (f, r)) in frames.iter().enumerate() {
        let p = Packet {
            frame: i as u64 + 1,
            offset: 0,
            link_type: LINKTYPE_ETHERNET,
            ts_nanos: 0,
            orig_len: f.len() as u32,
            data: f,
            interface: 0,
            direction: None,
        };
        match r {
            Some(r) => {
                assert_eq!(decode_packet(&p).err(), Some(*r), "frame {}", i + 1);
                want.add(*r);
            }
            None => assert!(decode_packet(&p).is_ok(), "frame {}", i + 1),
        }
    }
    assert_eq!(cap.skipped, want);
    assert_eq!(want.get(SkipReason::Malformed), 4);
    assert_eq!(cap.frames.len(), 4);
    let ok: Vec<bool> = cap.frames.iter().map(|f| f.icrc_ok).collect();
    assert_eq!(ok, [true, true, false, true]);
    assert!(cap.frames.iter().all(|f| f.mad[..100] == mad[..100]));
    assert_eq!(
        cap.skipped.to_string(),
        "not_ip=1 not_udp=1 fragment=2 not_rocev2_port=2 not_gsi=2 not_cm=1 truncated=2 malformed=4"
    );
    assert_eq!(Skipped::default().to_string(), "none");
}

// ---------------------------------------------------------------------------
// Never panic
// ---------------------------------------------------------------------------

fn exercise(data: &[u8]) {
    if let Ok(c) = read_bytes(data) {
        assert_eq!(c.frames.len() as u64 + c.skipped.total(), c.total_packets);
    }
    if let Ok(r) = Reader::new(data) {
        for p in r {
            match p {
                Ok(p) => {
                    assert!(p.data.len() <= data.len());
                    let _ = decode_packet(&p);
                }
                Err(e) => assert!(e.offset <= data.len() as u64, "{e}"),
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(
        kind in 0u8..5,
        body in proptest::collection::vec(any::<u8>(), 0..600),
    ) {
        let mut data = match kind {
            0 => vec![],
            1 => write_pcap(LINKTYPE_ETHERNET, false, false, &[]),
            2 => write_pcap(LINKTYPE_RAW, true, true, &[]),
            _ => {
                let mut ng = Ng::new();
                ng.shb(kind % 2 == 0);
                ng.out
            }
        };
        data.extend(body);
        exercise(&data);
    }

    #[test]
    fn arbitrary_frames_never_panic(
        link in prop::sample::select(vec![0u32, 1, 101, 108, 113, 228, 229, 276, 7]),
        frame in proptest::collection::vec(any::<u8>(), 0..400),
    ) {
        let _ = link::decode_udp(link, &frame);
        let p = Packet { frame: 1, offset: 0, link_type: link, ts_nanos: 0, orig_len: 0, data: &frame, interface: 0, direction: None };
        let _ = decode_packet(&p);
    }

    #[test]
    fn mutated_captures_never_panic(
        which in 0usize..6,
        cut in any::<prop::sample::Index>(),
        edits in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..12),
    ) {
        let mut data = if which == 5 { rping_pcapng() } else { vector_bytes(VECTORS[which]) };
        for (at, b) in edits {
            let i = at.index(data.len());
            data[i] = b;
        }
        exercise(&data);
        let n = cut.index(data.len() + 1);
        exercise(&data[..n]);
    }
}
