//! Fuzz smoke tests: the cargo-fuzz harnesses (`fuzz/`) driven by a seeded
//! PRNG on stable Rust, so every `cargo test` exercises them.
//!
//! * `engine_operation_sequences`: the engine harness
//!   (`tests/common/fuzz_harness.rs`) over seeded operation sequences: two
//!   devices, random API calls on random ids, a faulty network, a virtual
//!   clock; after each sequence everything is destroyed and the engines
//!   must be clean. `IBCM_FUZZ_ITERS=N` runs N sequences (default 4000);
//!   `IBCM_FUZZ_SEED=S` replays one sequence with a trace of every step.
//! * `wire_mad_*`, `roce_*`, `capture_*`: the parser properties
//!   (`tests/common/fuzz_checks.rs`) over random bytes and over mutations
//!   of the kernel captures in `tests/vectors`.
//! * `generate_fuzz_corpus` (ignored): writes the seed corpora of the fuzz
//!   targets into `fuzz/corpus/<target>/`.
//!
//! The regression tests at the end replay inputs the fuzzers found.

#[path = "common/byte_order.rs"]
mod byte_order;
#[path = "common/fuzz_checks.rs"]
mod fuzz_checks;
#[path = "common/fuzz_harness.rs"]
mod fuzz_harness;

use byte_order::Order;
use fuzz_checks::*;
use fuzz_harness::*;
use ibcm::engine::EventType;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn iters(default: u64) -> u64 {
    std::env::var("IBCM_FUZZ_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// Bytes of the PRNG choice sequence per engine run, and its op limit.
const SEQ_BYTES: usize = 2500;
const SEQ_LIMITS: Limits = Limits {
    max_ops: 300,
    trace: false,
};

fn run_seed(seed: u64, templates: &[[u8; 256]], trace: bool) -> Result<Stats, String> {
    let mut src = PrngSource::new(seed, SEQ_BYTES);
    let limits = Limits {
        trace,
        ..SEQ_LIMITS
    };
    match catch_unwind(AssertUnwindSafe(|| run(&mut src, templates, limits))) {
        Ok(r) => r,
        Err(p) => Err(format!(
            "panic: {}",
            p.downcast_ref::<String>()
                .map(|s| s.as_str())
                .or_else(|| p.downcast_ref::<&str>().copied())
                .unwrap_or("?")
        )),
    }
}

#[test]
fn engine_operation_sequences() {
    let templates = kernel_mads();
    assert_eq!(templates.len(), 21, "kernel MADs in tests/vectors");
    if let Ok(s) = std::env::var("IBCM_FUZZ_SEED") {
        let seed: u64 = s.parse().expect("IBCM_FUZZ_SEED");
        let r = run_seed(seed, &templates, true);
        assert!(r.is_ok(), "seed {seed}: {}", r.unwrap_err());
        return;
    }
    let n = iters(4000);
    let mut total = Stats::default();
    let mut failures = Vec::new();
    for seed in 0..n {
        match run_seed(seed, &templates, false) {
            Ok(s) => total.merge(&s),
            Err(e) => {
                failures.push(format!(
                    "seed {seed}: {e}\n  replay: IBCM_FUZZ_SEED={seed} cargo test --release \
                     --test fuzz_smoke engine_operation_sequences -- --nocapture"
                ));
                if failures.len() >= 5 {
                    break;
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    eprintln!("{n} sequences: {total:?}");
    // The sequences must reach deep protocol states, or the harness has
    // stopped testing much (e.g. after an API change).
    use EventType::*;
    for k in [
        ReqReceived,
        RepReceived,
        RtuReceived,
        UserEstablished,
        DreqReceived,
        DrepReceived,
        TimewaitExit,
        MraReceived,
        RejReceived,
        ReqError,
        SidrReqReceived,
        SidrRepReceived,
    ] {
        assert!(
            total.event(k) > 0,
            "no {} in {n} sequences: {total:?}",
            k.name()
        );
    }
}

// ---------------------------------------------------------------- parsers

/// SplitMix64 for the parser tests.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        ibcm::engine::ids::splitmix64(self.0)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// Random damage: bit flips, byte writes, 32-bit field writes, truncation,
/// extension, a copied chunk.
fn mutate(rng: &mut Rng, data: &mut Vec<u8>) {
    for _ in 0..1 + rng.below(4) {
        let len = data.len();
        match rng.below(8) {
            0 | 1 if len > 0 => {
                let i = rng.below(len);
                data[i] ^= 1 << rng.below(8);
            }
            2 if len > 0 => {
                let i = rng.below(len);
                data[i] = rng.next() as u8;
            }
            3 if len >= 4 => {
                let i = rng.below(len - 3);
                let v = [0u32, 1, 0xffff_ffff, 0x7fff_ffff, 256, rng.next() as u32][rng.below(6)];
                data[i..i + 4].copy_from_slice(&v.to_le_bytes());
            }
            4 if len > 0 => data.truncate(rng.below(len)),
            5 => {
                let n = 1 + rng.below(64);
                let extra = rng.bytes(n);
                data.extend(extra);
            }
            6 if len >= 8 => {
                let from = rng.below(len - 4);
                let to = rng.below(len - 4);
                let chunk: Vec<u8> = data[from..from + 4].to_vec();
                data[to..to + 4].copy_from_slice(&chunk);
            }
            _ => {
                if len > 0 {
                    let i = rng.below(len);
                    data[i] = [0, 0xff, 0x7f, 0x80][rng.below(4)];
                }
            }
        }
    }
}

fn with_cm_header(rng: &mut Rng) -> Vec<u8> {
    let mut b = rng.bytes(256);
    b[0] = 1;
    b[1] = 7;
    b[2] = 2;
    b[3] = [1, 2, 3, 0x81][rng.below(4)];
    b[16] = 0;
    b[17] = [
        1, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a,
    ][rng.below(12)];
    b
}

#[test]
fn wire_mad_random_and_mutated() {
    let mads = kernel_mads();
    let n = iters(4000) * 10;
    let mut rng = Rng(1);
    let mut parsed = 0;
    for m in &mads {
        check_wire_mad(m);
    }
    for i in 0..n {
        let mut b = match i % 3 {
            0 => {
                let n = rng.below(300);
                rng.bytes(n)
            }
            1 => with_cm_header(&mut rng),
            _ => mads[rng.below(mads.len())].to_vec(),
        };
        if i % 3 != 0 {
            mutate(&mut rng, &mut b);
        }
        if ibcm::wire::CmMad::parse(&b).is_ok() {
            parsed += 1;
        }
        check_wire_mad(&b);
    }
    assert!(parsed > n / 10, "only {parsed} of {n} inputs parsed");
}

/// The UDP payloads of every RoCEv2 frame in the kernel captures.
fn pcap_payloads() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for name in CAPTURES {
        let data = std::fs::read(root().join(format!("tests/vectors/{name}.pcap"))).unwrap();
        for p in ibcm::capture::Reader::new(&data).unwrap() {
            let p = p.unwrap();
            if let Ok(u) = ibcm::capture::link::decode_udp(p.link_type, p.data)
                && u.dst_port == 4791
                && ibcm::wire::roce::parse_udp_payload(u.payload).is_ok_and(|g| g.mad[1] == 7)
            {
                out.push(u.payload.to_vec());
            }
        }
    }
    out
}

const CAPTURES: [&str; 5] = ["rping", "ucmatose", "rej", "sidr-rej", "mra"];

#[test]
fn roce_payloads_random_and_mutated() {
    let payloads = pcap_payloads();
    assert_eq!(payloads.len(), 21);
    for p in &payloads {
        assert!(ibcm::wire::roce::parse_udp_payload(p).is_ok());
        check_roce(p);
    }
    let n = iters(4000) * 5;
    let mut rng = Rng(2);
    for i in 0..n {
        let mut b = if i % 4 == 0 {
            let n = rng.below(320);
            rng.bytes(n)
        } else {
            payloads[rng.below(payloads.len())].clone()
        };
        if i % 4 != 0 && i % 4 != 1 {
            mutate(&mut rng, &mut b);
        }
        check_roce(&b);
    }
}

// ---------------------------------------------------------------- captures

/// Writes pcap packets as a pcapng file (SHB, one IDB per link type with
/// nanosecond `if_tsresol`, EPBs), in either byte order.
fn to_pcapng(pcap: &[u8], big: bool) -> Vec<u8> {
    let order = Order { big };
    let mut out = Vec::new();
    let block = |out: &mut Vec<u8>, kind: u32, body: &[u8]| {
        let mut body = body.to_vec();
        while body.len() % 4 != 0 {
            body.push(0);
        }
        let len = (12 + body.len()) as u32;
        out.extend(order.u32(kind));
        out.extend(order.u32(len));
        out.extend(&body);
        out.extend(order.u32(len));
    };
    let mut shb = Vec::new();
    shb.extend(order.u32(0x1A2B_3C4D));
    shb.extend(order.u16(1));
    shb.extend(order.u16(0));
    shb.extend([0xff; 8]);
    block(&mut out, 0x0A0D_0D0A, &shb);
    let mut links: Vec<u32> = Vec::new();
    for p in ibcm::capture::Reader::new(pcap).unwrap() {
        let p = p.unwrap();
        let iface = match links.iter().position(|&l| l == p.link_type) {
            Some(i) => i,
            None => {
                links.push(p.link_type);
                let mut idb = Vec::new();
                idb.extend(order.u16(p.link_type as u16));
                idb.extend(order.u16(0));
                idb.extend(order.u32(0));
                idb.extend(order.u16(9)); // if_tsresol
                idb.extend(order.u16(1));
                idb.extend([9, 0, 0, 0]);
                idb.extend(order.u16(0)); // opt_endofopt
                idb.extend(order.u16(0));
                block(&mut out, 1, &idb);
                links.len() - 1
            }
        };
        let mut epb = Vec::new();
        epb.extend(order.u32(iface as u32));
        epb.extend(order.u32((p.ts_nanos >> 32) as u32));
        epb.extend(order.u32(p.ts_nanos as u32));
        epb.extend(order.u32(p.data.len() as u32));
        epb.extend(order.u32(p.orig_len));
        epb.extend(p.data);
        block(&mut out, 6, &epb);
    }
    out
}

fn capture_files() -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for name in CAPTURES {
        let pcap = std::fs::read(root().join(format!("tests/vectors/{name}.pcap"))).unwrap();
        out.push((format!("{name}.pcapng"), to_pcapng(&pcap, false)));
        out.push((format!("{name}-be.pcapng"), to_pcapng(&pcap, true)));
        out.push((format!("{name}.pcap"), pcap));
    }
    out
}

#[test]
fn capture_files_random_and_mutated() {
    let files = capture_files();
    for (name, f) in &files {
        let cap = ibcm::capture::read_bytes(f).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(!cap.frames.is_empty(), "{name}");
        assert!(cap.frames.iter().all(|f| f.icrc_ok), "{name}");
        check_capture(f);
    }
    let n = iters(4000) * 2;
    let mut rng = Rng(3);
    for i in 0..n {
        let mut b = if i % 10 == 0 {
            let n = rng.below(200);
            let mut b = rng.bytes(n);
            if b.len() >= 4 {
                let magic: [[u8; 4]; 4] = [
                    [0xd4, 0xc3, 0xb2, 0xa1],
                    [0xa1, 0xb2, 0x3c, 0x4d],
                    [0x0a, 0x0d, 0x0d, 0x0a],
                    [0x4d, 0x3c, 0xb2, 0xa1],
                ];
                b[..4].copy_from_slice(&magic[rng.below(4)]);
            }
            b
        } else {
            files[rng.below(files.len())].1.clone()
        };
        mutate(&mut rng, &mut b);
        check_capture(&b);
    }
}

// ---------------------------------------------------------------- corpus

/// An engine seed: create and listen on device B, deliver `mad` to it as
/// raw bytes, react to what it raised, deliver everything.
fn engine_inject_seed(mad: &[u8; 256]) -> Vec<u8> {
    // REQ and SIDR_REQ carry the service ID at bytes 32..40.
    let service = match mad[17] {
        0x10 | 0x17 => u64::from_be_bytes(mad[32..40].try_into().unwrap()),
        _ => SERVICE,
    };
    let mut s = vec![
        0x00, // config: one shard each, RoCE only, no auto-react
        8, 1, 1, // create_id on engine 1 (device B), user 1
        9, 1, 0, 255, // listen on it, service ID from the next 8 bytes
    ];
    s.extend(service.to_le_bytes());
    s.push(255); // no share key
    s.extend([7, 1, 0, 0]); // inject to device B: raw 256 bytes, unmutated
    s.extend_from_slice(mad);
    s.push(255); // no source mutation
    s.extend([25, 0, 0]); // react naturally to the first pending event
    s.extend([2, 255]); // deliver everything
    s
}

fn write_corpus(dir: &Path, name: &str, data: &[u8]) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join(name), data).unwrap();
}

#[test]
fn engine_inject_seeds_reach_the_engine() {
    let templates = kernel_mads();
    let (mut reqs, mut sidr_reqs) = (0, 0);
    for m in &templates {
        let seed = engine_inject_seed(m);
        let limits = Limits {
            trace: std::env::var("IBCM_FUZZ_TRACE").is_ok(),
            ..Limits::default()
        };
        let stats = run(&mut ByteSource::new(&seed), &templates, limits).unwrap();
        assert!(stats.delivered >= 1, "{stats:?}");
        if m[17] == 0x10 {
            assert_eq!(stats.event(EventType::ReqReceived), 1, "{stats:?}");
            reqs += 1;
        }
        if m[17] == 0x17 {
            assert_eq!(stats.event(EventType::SidrReqReceived), 1, "{stats:?}");
            sidr_reqs += 1;
        }
    }
    assert_eq!((reqs, sidr_reqs), (5, 1));
}

/// Writes the seed corpora into `fuzz/corpus/<target>/`:
/// `cargo test --release --test fuzz_smoke generate_fuzz_corpus -- --ignored`.
#[test]
#[ignore]
fn generate_fuzz_corpus() {
    let corpus = root().join("fuzz/corpus");
    let templates = kernel_mads();
    let mut names = Vec::new();
    for name in CAPTURES {
        let text =
            std::fs::read_to_string(root().join(format!("tests/vectors/{name}.mads.txt"))).unwrap();
        for (i, _) in parse_mads_txt(&text).iter().enumerate() {
            names.push(format!("{name}-{i}"));
        }
    }
    assert_eq!(names.len(), templates.len());
    // wire_mad: the kernel MADs, plus LAP, APR and ClassPortInfo (no
    // capture has them).
    for (n, m) in names.iter().zip(&templates) {
        write_corpus(&corpus.join("wire_mad"), n, m);
    }
    for (a, method, name) in [(0x19u8, 3u8, "lap"), (0x1a, 3, "apr"), (0x01, 1, "cpi-get")] {
        let mut m = [0u8; 256];
        m[..4].copy_from_slice(&[1, 7, 2, method]);
        m[17] = a;
        m[24..32].copy_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
        write_corpus(&corpus.join("wire_mad"), name, &m);
    }
    // roce_frame: the UDP payloads of the captures.
    for (i, p) in pcap_payloads().iter().enumerate() {
        write_corpus(&corpus.join("roce_frame"), &format!("payload-{i}"), p);
    }
    // capture: the pcaps, and each as pcapng in both byte orders.
    for (name, f) in capture_files() {
        write_corpus(&corpus.join("capture"), &name, &f);
    }
    // engine: each kernel MAD delivered to a listener, then PRNG sequences
    // (recorded, so they replay byte for byte) that reached rare events.
    for (n, m) in names.iter().zip(&templates) {
        write_corpus(
            &corpus.join("engine"),
            &format!("inject-{n}"),
            &engine_inject_seed(m),
        );
    }
    let mut wanted: Vec<(EventType, usize)> = [
        EventType::RtuReceived,
        EventType::DrepReceived,
        EventType::TimewaitExit,
        EventType::MraReceived,
        EventType::RejReceived,
        EventType::LapReceived,
        EventType::SidrRepReceived,
        EventType::DreqError,
        EventType::RepError,
        EventType::SidrReqError,
    ]
    .into_iter()
    .map(|k| (k, 0))
    .collect();
    let mut written = 0;
    for seed in 0..20_000u64 {
        if wanted.iter().all(|(_, n)| *n >= 8) {
            break;
        }
        let mut rec = Recorder {
            inner: PrngSource::new(seed, SEQ_BYTES),
            bytes: Vec::new(),
        };
        let Ok(stats) = run(&mut rec, &templates, SEQ_LIMITS) else {
            continue;
        };
        let mut useful = false;
        for (k, n) in wanted.iter_mut() {
            if stats.event(*k) > 0 && *n < 8 {
                *n += 1;
                useful = true;
            }
        }
        if useful {
            write_corpus(&corpus.join("engine"), &format!("seq-{seed}"), &rec.bytes);
            written += 1;
        }
    }
    eprintln!("engine: {written} recorded sequences; per event: {wanted:?}");
}

// ---------------------------------------------------------------- regressions

mod regressions {
    use ibcm::engine::*;
    use ibcm::sim::{roce_path, roce_source};
    use ibcm::wire::Gid;

    const SVC: u64 = 0x0000_0000_0106_1c06;

    fn gid(n: u8) -> Gid {
        std::net::IpAddr::from([10, 0, 0, n]).into()
    }

    fn engine(n: u8) -> Engine {
        Engine::standalone(
            EngineConfig::new(0x1111 * n as u64, vec![PortInfo::roce(1, gid(n))]),
            n as u64,
        )
    }

    fn path(from: u8, to: u8, packet_life_time: u8) -> PathRec {
        roce_path(gid(from), gid(to), packet_life_time)
    }

    /// Moves every pending MAD of `from` (GID `f`) to `to`.
    fn deliver(now: Time, from: &mut Engine, f: u8, to: &mut Engine) {
        while let Some(t) = from.poll_transmit() {
            let _ = to.handle_mad(now, &roce_source(gid(f), &t.dest), &t.mad);
        }
    }

    fn events(e: &mut Engine) -> Vec<Event> {
        std::iter::from_fn(|| e.poll_event()).collect()
    }

    /// Found by the `engine` fuzz target: a path record whose
    /// `packet_life_time` is 255 overflowed `packet_life_time + 1` in
    /// `av_from_path` (a panic with overflow checks, a wrap to an ACK
    /// timeout exponent of 0 without them). It now saturates at 31, as
    /// every other use of the value does.
    #[test]
    fn packet_life_time_255_does_not_overflow() {
        let now = Time::from_millis(1000);
        let (mut a, mut b) = (engine(1), engine(2));
        let l = b.create_id().unwrap();
        b.listen(l, SVC).unwrap();
        let h = a.create_id().unwrap();
        let p = ReqParams {
            primary_path: path(1, 2, 255),
            service_id: SVC,
            qp_num: 0x11,
            qp_type: qp_type::RC,
            remote_cm_response_timeout: 10,
            local_cm_response_timeout: 10,
            max_cm_retries: 3,
            ..ReqParams::default()
        };
        a.send_req(now, h, &p).unwrap();
        deliver(now, &mut a, 1, &mut b);
        let ev = events(&mut b);
        assert_eq!(ev.len(), 1);
        let rep = RepParams {
            qp_num: 0x22,
            ..RepParams::default()
        };
        b.send_rep(now, ev[0].id, &rep).unwrap();
        deliver(now, &mut b, 2, &mut a);
        assert_eq!(a.state(h), Some(State::RepRcvd));
        // The ACK timeout comes from the saturated AV timeout (31), not a
        // wrapped one (0).
        let rts = a.init_qp_attr(h, qp_state::RTS).unwrap();
        assert_eq!(rts.timeout, 31);
        for e in [&mut a, &mut b] {
            for id in e.handles() {
                e.destroy(id, 0);
            }
        }
    }

    /// Found by `engine_operation_sequences`: `send_sidr_req` on a
    /// listener failed with -EINVAL but first overwrote the listener's
    /// service ID (as the kernel writes it before its state check); the
    /// listen table is keyed by that ID, so destroying the listener removed
    /// nothing and left a listener entry naming a dead id, to which later
    /// REQs were still delivered (in the runtime: a freed `ib_cm_id`).
    #[test]
    fn sidr_req_on_a_listener_leaves_its_service_id_alone() {
        let now = Time::from_millis(1000);
        let (mut a, mut b) = (engine(1), engine(2));
        let l = b.create_id().unwrap();
        b.listen(l, SVC).unwrap();
        let p = SidrReqParams {
            path: path(2, 1, 8),
            service_id: SVC + 1,
            timeout_ms: 100,
            ..SidrReqParams::default()
        };
        assert_eq!(b.send_sidr_req(now, l, &p), Err(Errno::EINVAL));
        assert_eq!(b.info(l).unwrap().service_id, SVC);
        assert!(b.destroy(l, 0));
        assert_eq!(b.shared().listen_count(), 0);
        // A REQ for the service now finds no listener.
        let h = a.create_id().unwrap();
        let req = ReqParams {
            primary_path: path(1, 2, 8),
            service_id: SVC,
            qp_num: 0x11,
            qp_type: qp_type::RC,
            max_cm_retries: 3,
            ..ReqParams::default()
        };
        a.send_req(now, h, &req).unwrap();
        deliver(now, &mut a, 1, &mut b);
        assert!(events(&mut b).is_empty());
        assert_eq!(b.id_count(), 0);
        deliver(now, &mut b, 2, &mut a);
        let ev = events(&mut a);
        assert_eq!(ev.len(), 1);
        assert_eq!(ev[0].kind, EventType::RejReceived);
        a.destroy(h, 0);
    }
}
