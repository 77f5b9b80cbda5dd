//! The engine fuzz harness, shared by `tests/fuzz_smoke.rs` (driven by a
//! seeded PRNG on stable Rust) and `fuzz/fuzz_targets/engine.rs` (driven by
//! libFuzzer), which both include this file with `#[path]`.
//!
//! The input is a *choice sequence*: every decision the harness makes (which
//! operation, which engine, which id, which argument) takes the next byte
//! from a [`Source`]. Bytes past the end read as 0 and the run stops at the
//! next operation boundary, so every byte string is a valid input and
//! libFuzzer's mutations map to nearby operation sequences.
//!
//! The world is two devices on a virtual clock: device A (one engine) and
//! device B (one engine, or two shards sharing one `Shared` and fed through
//! `engine::route`, as the runtime does). Operations: every API call with
//! sensible-or-random arguments on any id (live, destroyed, a listener, an
//! id of another engine, a random number); delivery of the MADs the engines
//! sent (as sent, dropped, duplicated, reordered or mutated); MADs made up
//! from kernel captures, templates or raw bytes; clock advances; and
//! consumer reactions to events (the natural reply, a reject, an MRA, a
//! destroy from the callback).
//!
//! Checked after every operation: no panic; every transmitted CM message
//! parses; every event names a live id; per-engine and per-device table
//! counts never exceed the ids that can own them. At the end: the network
//! settles, every id is destroyed (`handles()`), late MADs are delivered,
//! timers are drained far in the future, and every engine must be clean
//! (no id, timer, duplicate-table entry, remote-QPN entry, listener or
//! half-open count left).

#![allow(dead_code)]

use ibcm::engine::*;
use ibcm::wire::{self, CmMad, CmMsg, Gid, attr, method, pdata};
use std::collections::VecDeque;
use std::sync::Arc;

/// Service IDs the harness listens on and connects to.
pub const SERVICE: u64 = 0x0000_0000_0106_1c06;
pub const SERVICE2: u64 = 0x0000_0000_0106_4e20;

// ---------------------------------------------------------------- choices

/// Where the harness's decisions come from.
pub trait Source {
    /// The next byte, or `None` when the input is used up.
    fn next_byte(&mut self) -> Option<u8>;
}

/// libFuzzer input: the bytes themselves.
pub struct ByteSource<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> ByteSource<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        ByteSource { data, pos: 0 }
    }
}

impl Source for ByteSource<'_> {
    fn next_byte(&mut self) -> Option<u8> {
        let b = self.data.get(self.pos).copied();
        self.pos += 1;
        b
    }
}

/// SplitMix64 bytes, `budget` of them (the stable-Rust smoke test).
pub struct PrngSource {
    state: u64,
    word: u64,
    left_in_word: u32,
    budget: usize,
}

impl PrngSource {
    pub fn new(seed: u64, budget: usize) -> Self {
        PrngSource {
            state: seed ^ 0x1bcd_f00d_5eed_0001,
            word: 0,
            left_in_word: 0,
            budget,
        }
    }
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        ids::splitmix64(self.state)
    }
}

impl Source for PrngSource {
    fn next_byte(&mut self) -> Option<u8> {
        if self.budget == 0 {
            return None;
        }
        self.budget -= 1;
        if self.left_in_word == 0 {
            self.word = self.next_u64();
            self.left_in_word = 8;
        }
        let b = self.word as u8;
        self.word >>= 8;
        self.left_in_word -= 1;
        Some(b)
    }
}

/// Records the bytes another source produced, so that a PRNG run can be
/// saved as a libFuzzer seed that replays it exactly.
pub struct Recorder<S> {
    pub inner: S,
    pub bytes: Vec<u8>,
}

impl<S: Source> Source for Recorder<S> {
    fn next_byte(&mut self) -> Option<u8> {
        let b = self.inner.next_byte();
        if let Some(b) = b {
            self.bytes.push(b);
        }
        b
    }
}

struct Chooser<'a> {
    src: &'a mut dyn Source,
    exhausted: bool,
}

impl Chooser<'_> {
    fn u8(&mut self) -> u8 {
        match self.src.next_byte() {
            Some(b) => b,
            None => {
                self.exhausted = true;
                0
            }
        }
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }
    fn u64(&mut self) -> u64 {
        (self.u32() as u64) | (self.u32() as u64) << 32
    }
    /// Uniform-ish in `0..n` from one byte (n <= 256) or two.
    fn below(&mut self, n: usize) -> usize {
        if n <= 1 {
            return 0;
        }
        if n <= 256 {
            self.u8() as usize % n
        } else {
            self.u16() as usize % n
        }
    }
    /// True with probability about `k / 256`.
    fn chance(&mut self, k: u8) -> bool {
        self.u8() < k
    }
    fn bool(&mut self) -> bool {
        self.u8() & 1 == 1
    }
}

// ---------------------------------------------------------------- kernel MADs

/// Parses the hex dumps of a `tests/vectors/*.mads.txt` file.
pub fn parse_mads_txt(text: &str) -> Vec<[u8; 256]> {
    let mut out = Vec::new();
    let mut cur: Vec<u8> = Vec::new();
    for line in text.lines() {
        if line.starts_with("# frame ") {
            cur.clear();
        } else if line.len() > 6 && line.as_bytes()[4] == b':' && !line.starts_with('#') {
            for h in line[5..].split_whitespace() {
                if let Ok(b) = u8::from_str_radix(h, 16) {
                    cur.push(b);
                }
            }
            if cur.len() == 256 {
                out.push(cur[..].try_into().unwrap());
                cur.clear();
            }
        }
    }
    out
}

/// The 21 CM MADs of the kernel captures in `tests/vectors`.
pub fn kernel_mads() -> Vec<[u8; 256]> {
    let files = [
        include_str!("../vectors/rping.mads.txt"),
        include_str!("../vectors/ucmatose.mads.txt"),
        include_str!("../vectors/rej.mads.txt"),
        include_str!("../vectors/sidr-rej.mads.txt"),
        include_str!("../vectors/mra.mads.txt"),
    ];
    files.iter().flat_map(|t| parse_mads_txt(t)).collect()
}

// ---------------------------------------------------------------- world

/// Counts of what a run reached (for the smoke test's depth check and the
/// seed generator).
#[derive(Debug, Default, Clone)]
pub struct Stats {
    pub ops: u64,
    pub api_ok: u64,
    pub api_err: u64,
    pub delivered: u64,
    pub mad_ok: u64,
    pub mad_dropped: u64,
    pub events: [u64; 18],
    pub timers_fired: u64,
}

impl Stats {
    pub fn event(&self, k: EventType) -> u64 {
        self.events[k as usize]
    }
    pub fn merge(&mut self, o: &Stats) {
        self.ops += o.ops;
        self.api_ok += o.api_ok;
        self.api_err += o.api_err;
        self.delivered += o.delivered;
        self.mad_ok += o.mad_ok;
        self.mad_dropped += o.mad_dropped;
        for (a, b) in self.events.iter_mut().zip(o.events) {
            *a += b;
        }
        self.timers_fired += o.timers_fired;
    }
}

struct Dev {
    guid: u64,
    /// (port, GID, LID) of every port.
    ports: Vec<(u8, Gid, u16)>,
    shared: Arc<Shared>,
    /// Indices into `World::engs`, by shard.
    engines: Vec<usize>,
}

struct Eng {
    dev: usize,
    e: Engine,
    /// Every handle this engine ever gave out, oldest first.
    known: Vec<Handle>,
    listeners: Vec<Handle>,
    destroyed: Vec<Handle>,
    /// Events not yet reacted to.
    pending: VecDeque<Event>,
    next_qpn: u32,
}

struct OnWire {
    from: usize,
    t: Transmit,
}

/// Limits of one run.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_ops: usize,
    /// Print every operation to stderr.
    pub trace: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_ops: 400,
            trace: false,
        }
    }
}

pub struct World<'t> {
    now: Time,
    devs: Vec<Dev>,
    engs: Vec<Eng>,
    wire: Vec<OnWire>,
    templates: &'t [[u8; 256]],
    /// Consumer callbacks react to events as they arrive.
    auto: bool,
    trace: bool,
    /// An API call asked for a SIDR timeout too long to wait out.
    unbounded_timeouts: bool,
    pub stats: Stats,
}

/// A broken invariant (the engines did not panic, but are wrong).
pub type Failure = String;

macro_rules! check {
    ($cond:expr, $($fmt:tt)*) => {
        if !$cond {
            return Err(format!($($fmt)*));
        }
    };
}

const ROCE_GIDS: [[u8; 4]; 2] = [[10, 0, 0, 1], [10, 0, 0, 2]];

fn ib_gid(guid: u64) -> Gid {
    let mut g = [0u8; 16];
    g[0] = 0xfe;
    g[1] = 0x80;
    g[8..].copy_from_slice(&guid.to_be_bytes());
    Gid(g)
}

/// Runs one choice sequence. `Ok` with what it reached, `Err` with the
/// broken invariant; an engine panic propagates.
pub fn run(
    src: &mut dyn Source,
    templates: &[[u8; 256]],
    limits: Limits,
) -> Result<Stats, Failure> {
    let mut c = Chooser {
        src,
        exhausted: false,
    };
    let cfg = c.u8();
    let mut w = World::new(cfg, templates, limits.trace);
    for _ in 0..limits.max_ops {
        let op = c.u8();
        if c.exhausted {
            break;
        }
        w.stats.ops += 1;
        w.step(&mut c, op)?;
        w.settle(&mut c)?;
        w.check_counts()?;
    }
    w.finish()?;
    Ok(w.stats)
}

impl<'t> World<'t> {
    fn new(cfg: u8, templates: &'t [[u8; 256]], trace: bool) -> World<'t> {
        let b_shards = if cfg & 1 != 0 { 2 } else { 1 };
        let ib_port = cfg & 2 != 0;
        let mut w = World {
            now: Time::from_millis(1_000),
            devs: Vec::new(),
            engs: Vec::new(),
            wire: Vec::new(),
            templates,
            auto: cfg & 0x80 != 0,
            trace,
            unbounded_timeouts: false,
            stats: Stats::default(),
        };
        for (n, shards) in [(0usize, 1u32), (1, b_shards)] {
            let guid = 0x1111 * (n as u64 + 1);
            let roce: Gid = std::net::IpAddr::from(ROCE_GIDS[n]).into();
            let mut ports = vec![PortInfo::roce(1, roce)];
            let mut port_list = vec![(1u8, roce, 0u16)];
            if ib_port {
                let lid = 0x10 * (n as u16 + 1);
                ports.push(PortInfo {
                    port_num: 2,
                    gids: vec![GidEntry {
                        gid: ib_gid(guid),
                        gid_type: GidType::Ib,
                    }],
                    pkeys: vec![0xffff, 0x8001, 0x7fff],
                    lid,
                    lmc: 1,
                    is_roce: false,
                    mtu: 4,
                    rate: 3,
                });
                port_list.push((2, ib_gid(guid), lid));
            }
            let shard_bits = if shards > 1 { 1 } else { 0 };
            let shared = Arc::new(Shared::new(0x5eed + n as u64, shard_bits));
            let mut engines = Vec::new();
            for shard in 0..shards {
                let mut ec = EngineConfig::new(guid, ports.clone());
                ec.shard = shard;
                ec.hi_tid = n as u32 + 1;
                ec.seed = 77 + shard as u64;
                ec.flush_caps = cfg & 0x10 != 0;
                ec.ack_delay = [15, 0, 3, 31][(cfg >> 5 & 3) as usize];
                if cfg & 4 != 0 {
                    ec.max_half_open = 1 + (cfg >> 3 & 1) as u32;
                    // Table pressure: a per-source quota below the cap.
                    ec.max_half_open_per_source = (cfg >> 6 & 1) as u32;
                }
                if cfg & 8 != 0 {
                    ec.max_ids = 3 + (cfg >> 4 & 3) as u32;
                }
                engines.push(w.engs.len());
                w.engs.push(Eng {
                    dev: n,
                    e: Engine::new(ec, shared.clone()),
                    known: Vec::new(),
                    listeners: Vec::new(),
                    destroyed: Vec::new(),
                    pending: VecDeque::new(),
                    next_qpn: 0x100 * (n as u32 + 1),
                });
            }
            w.devs.push(Dev {
                guid,
                ports: port_list,
                shared,
                engines,
            });
        }
        if w.trace {
            eprintln!(
                "config {cfg:#04x}: B shards {b_shards}, IB port {ib_port}, auto {}",
                w.auto
            );
        }
        w
    }

    fn log(&self, f: impl FnOnce() -> String) {
        if self.trace {
            eprintln!("{:>10.3} ms  {}", self.now.0 as f64 / 1e6, f());
        }
    }

    fn other_dev(&self, dev: usize) -> usize {
        (dev + 1) % self.devs.len()
    }

    fn note_handle(&mut self, ei: usize, h: Handle) {
        let eng = &mut self.engs[ei];
        if !eng.known.contains(&h) {
            eng.known.push(h);
        }
        eng.destroyed.retain(|d| *d != h);
    }

    /// Logs an API call on id `h` of engine `ei` (`e1 send_rep h -> Ok(..)`)
    /// and counts its result as [`Self::api`] does.
    fn api_on<T: std::fmt::Debug>(
        &mut self,
        ei: usize,
        h: Handle,
        call: &str,
        r: ApiResult<T>,
    ) -> Option<T> {
        self.log(|| format!("e{ei} {call} {h:?} -> {r:?}"));
        self.api(r)
    }

    /// An engine, then one of its ids (or a stale or foreign handle).
    fn pick_id(&self, c: &mut Chooser) -> (usize, Handle) {
        let ei = self.pick_engine(c);
        (ei, self.pick_handle(c, ei))
    }

    fn api<T>(&mut self, r: ApiResult<T>) -> Option<T> {
        match r {
            Ok(v) => {
                self.stats.api_ok += 1;
                Some(v)
            }
            Err(_) => {
                self.stats.api_err += 1;
                None
            }
        }
    }

    // ------------------------------------------------------------ choices

    fn pick_engine(&self, c: &mut Chooser) -> usize {
        c.below(self.engs.len())
    }

    /// Any handle: recent, known, a listener, destroyed, or made up.
    fn pick_handle(&self, c: &mut Chooser, ei: usize) -> Handle {
        let eng = &self.engs[ei];
        let s = c.u8();
        let n = eng.known.len();
        match s {
            0..160 if n > 0 => eng.known[n - 1 - (s as usize % n.min(8))],
            160..224 if n > 0 => eng.known[s as usize % n],
            224..236 if !eng.listeners.is_empty() => {
                eng.listeners[s as usize % eng.listeners.len()]
            }
            236..244 if !eng.destroyed.is_empty() => {
                eng.destroyed[s as usize % eng.destroyed.len()]
            }
            244..250 => {
                // An id of another engine.
                let o = &self.engs[(ei + 1 + s as usize) % self.engs.len()];
                o.known
                    .get(c.below(o.known.len().max(1)))
                    .copied()
                    .unwrap_or(Handle(0))
            }
            250..254 => Handle(c.u32() as u64),
            _ => Handle(c.u64()),
        }
    }

    /// A comm ID value for a made-up MAD aimed at engine `ei`.
    fn pick_id_value(&self, c: &mut Chooser, ei: usize) -> u32 {
        let s = c.u8();
        match s {
            0..176 => self.pick_handle(c, ei).0 as u32,
            176..200 => {
                let o = &self.engs[s as usize % self.engs.len()];
                o.known
                    .get(c.below(o.known.len().max(1)))
                    .map(|h| h.0 as u32)
                    .unwrap_or(0)
            }
            200..224 => 0,
            _ => c.u32(),
        }
    }

    fn pick_service(&self, c: &mut Chooser) -> u64 {
        match c.u8() {
            0..200 => SERVICE,
            200..220 => SERVICE2,
            220..232 => ASSIGN_SERVICE_ID,
            232..240 => ASSIGN_SERVICE_ID | c.u32() as u64,
            _ => c.u64(),
        }
    }

    fn pick_pdata(&self, c: &mut Chooser, max: usize) -> Vec<u8> {
        let s = c.u8();
        let len = match s {
            0..100 => 0,
            100..200 => s as usize % (max + 1),
            200..240 => max,
            _ => max + 1 + (s as usize & 7),
        };
        let fill = c.u8();
        (0..len).map(|i| fill.wrapping_add(i as u8)).collect()
    }

    fn pick_small(&self, c: &mut Chooser, sensible: u8) -> u8 {
        let s = c.u8();
        if s < 192 { sensible } else { c.u8() }
    }

    /// A CM timeout: usually sensible, often the adversarial maximum (31:
    /// 2.3 hours per try), sometimes anything.
    fn pick_timeout(&self, c: &mut Chooser) -> u8 {
        match c.u8() {
            0..160 => 10,
            160..224 => 31,
            _ => c.u8(),
        }
    }

    fn pick_qpn(&mut self, c: &mut Chooser, ei: usize) -> u32 {
        if c.chance(224) {
            let eng = &mut self.engs[ei];
            eng.next_qpn += 1;
            eng.next_qpn
        } else {
            c.u32()
        }
    }

    /// A path record from engine `ei`'s device to some device.
    fn pick_path(&self, c: &mut Chooser, ei: usize) -> (PathRec, Option<(u8, u16)>) {
        let from = self.engs[ei].dev;
        let s = c.u8();
        let to = if s < 224 {
            self.other_dev(from)
        } else {
            from // a loopback connection
        };
        let ib = self.devs[from].ports.len() > 1 && c.u8() & 1 == 1;
        let (fp, tp) = if ib {
            (&self.devs[from].ports[1], &self.devs[to].ports[1])
        } else {
            (&self.devs[from].ports[0], &self.devs[to].ports[0])
        };
        let mut p = PathRec {
            dgid: tp.1,
            sgid: fp.1,
            hop_limit: if ib { 0 } else { 64 },
            reversible: 1,
            pkey: 0xffff,
            mtu_selector: SA_EQ,
            mtu: 3,
            rate_selector: SA_EQ,
            packet_life_time_selector: SA_EQ,
            packet_life_time: c.u8() % 12,
            rec_type: if ib {
                PathRecType::Ib
            } else {
                PathRecType::RoceV2
            },
            flags: 1,
            dlid: tp.2 as u32,
            slid: fp.2 as u32,
            ..PathRec::default()
        };
        // Perturbations, each rare.
        let k = c.u8();
        if k >= 160 {
            match k % 12 {
                0 => p.pkey = [0x8001, 0x7fff, 0x1234, c.u16()][c.below(4)],
                1 => p.packet_life_time = c.u8(),
                2 => p.sgid = Gid(c.u64().to_be_bytes().repeat(2).try_into().unwrap()),
                3 => p.dgid = Gid(c.u64().to_be_bytes().repeat(2).try_into().unwrap()),
                4 => p.rec_type = PathRecType::from_u32(c.u8() as u32 % 4).unwrap(),
                5 => p.hop_limit = c.u8(),
                6 => {
                    p.flow_label = c.u32();
                    p.traffic_class = c.u8();
                    p.sl = c.u8();
                }
                7 => {
                    p.mtu = c.u8();
                    p.rate = c.u8();
                }
                8 => {
                    p.dlid = c.u32();
                    p.slid = c.u32();
                }
                9 => p.route_resolved = c.bool(),
                10 => p.rec_type = PathRecType::Opa,
                _ => p.dmac = [c.u8(); 6],
            }
        }
        let sgid_attr = match c.u8() {
            0..224 => None,
            224..240 => Some((if ib { 2 } else { 1 }, 0)),
            _ => Some((c.u8(), c.u16())),
        };
        (p, sgid_attr)
    }

    fn req_params(&mut self, c: &mut Chooser, ei: usize) -> ReqParams {
        let (primary_path, sgid_attr) = self.pick_path(c, ei);
        let alternate_path = if c.chance(24) {
            let (mut a, _) = self.pick_path(c, ei);
            if c.chance(200) {
                a.pkey = primary_path.pkey;
                a.mtu = primary_path.mtu;
            }
            Some(a)
        } else {
            None
        };
        let primary_path_inbound = c.chance(16).then_some(primary_path);
        let primary_path_outbound = c.chance(16).then_some(primary_path);
        let qp_type = match c.u8() {
            0..200 => qp_type::RC,
            200..220 => qp_type::UC,
            220..240 => qp_type::XRC_INI,
            _ => c.u8() as u32,
        };
        let service_id = self.pick_service(c);
        let qp_num = self.pick_qpn(c, ei);
        ReqParams {
            primary_path,
            primary_path_inbound,
            primary_path_outbound,
            alternate_path,
            sgid_attr,
            service_id,
            qp_num,
            qp_type,
            starting_psn: c.u32(),
            private_data: self.pick_pdata(c, pdata::REQ),
            responder_resources: self.pick_small(c, 1),
            initiator_depth: self.pick_small(c, 1),
            remote_cm_response_timeout: self.pick_timeout(c),
            flow_control: self.pick_small(c, 1),
            local_cm_response_timeout: self.pick_timeout(c),
            retry_count: self.pick_small(c, 7),
            rnr_retry_count: self.pick_small(c, 7),
            max_cm_retries: c.u8() % 16,
            srq: self.pick_small(c, 0),
            ece: Ece {
                vendor_id: self.pick_small(c, 0) as u32,
                attr_mod: self.pick_small(c, 0) as u32,
            },
        }
    }

    fn rep_params(&mut self, c: &mut Chooser, ei: usize) -> RepParams {
        RepParams {
            qp_num: self.pick_qpn(c, ei),
            starting_psn: c.u32(),
            private_data: self.pick_pdata(c, pdata::REP),
            responder_resources: self.pick_small(c, 1),
            initiator_depth: self.pick_small(c, 1),
            failover_accepted: self.pick_small(c, 0),
            flow_control: self.pick_small(c, 1),
            rnr_retry_count: self.pick_small(c, 7),
            srq: self.pick_small(c, 0),
            ece: Ece {
                vendor_id: self.pick_small(c, 0) as u32,
                attr_mod: self.pick_small(c, 0) as u32,
            },
        }
    }

    fn sidr_req_params(&mut self, c: &mut Chooser, ei: usize) -> SidrReqParams {
        let (path, sgid_attr) = self.pick_path(c, ei);
        SidrReqParams {
            path,
            sgid_attr,
            service_id: self.pick_service(c),
            timeout_ms: match c.u8() {
                0..200 => 100,
                200..240 => c.u8() as u64,
                _ => {
                    let t = c.u64();
                    // The engine keeps (as the kernel) a failed call's
                    // timeout, so any id may end up waiting this long.
                    self.unbounded_timeouts |= t >= 1 << 32;
                    t
                }
            },
            private_data: self.pick_pdata(c, pdata::SIDR_REQ),
            max_cm_retries: c.u8() % 16,
        }
    }

    fn sidr_rep_params(&mut self, c: &mut Chooser, ei: usize) -> SidrRepParams {
        SidrRepParams {
            qp_num: self.pick_qpn(c, ei),
            qkey: c.u32(),
            status: if c.chance(200) { 0 } else { c.u32() },
            info: self.pick_pdata(c, pdata::SIDR_REP_INFO),
            private_data: self.pick_pdata(c, pdata::SIDR_REP),
            ece: Ece {
                vendor_id: self.pick_small(c, 0) as u32,
                attr_mod: self.pick_small(c, 0) as u32,
            },
        }
    }

    fn pick_reason(&self, c: &mut Chooser) -> u32 {
        match c.u8() {
            0..128 => 28,
            128..200 => c.u8() as u32 % 40,
            _ => c.u32(),
        }
    }

    // ------------------------------------------------------------ operations

    fn step(&mut self, c: &mut Chooser, op: u8) -> Result<(), Failure> {
        let now = self.now;
        match op % 32 {
            0 | 1 => self.deliver_one(c, false),
            2..=4 => self.deliver_all(c),
            5 | 6 => self.advance(c),
            7 => self.inject(c)?,
            8 => {
                let ei = self.pick_engine(c);
                let r = self.engs[ei].e.create_id();
                self.log(|| format!("e{ei} create_id -> {r:?}"));
                if let Some(h) = self.api(r) {
                    self.note_handle(ei, h);
                }
            }
            9 => {
                let (ei, h) = self.pick_id(c);
                let sid = self.pick_service(c);
                let key = c.chance(32).then(|| c.u8() as u64);
                let r = self.engs[ei].e.listen_keyed(h, sid, key);
                self.log(|| format!("e{ei} listen {h:?} {sid:#x} key {key:?} -> {r:?}"));
                if self.api(r).is_some() {
                    self.engs[ei].listeners.push(h);
                }
            }
            10 => {
                let (ei, h) = self.pick_id(c);
                let p = self.req_params(c, ei);
                let r = self.engs[ei].e.send_req(now, h, &p);
                self.api_on(ei, h, "send_req", r);
            }
            11 => {
                let (ei, h) = self.pick_id(c);
                let p = self.rep_params(c, ei);
                let r = self.engs[ei].e.send_rep(now, h, &p);
                self.api_on(ei, h, "send_rep", r);
            }
            12 => {
                let (ei, h) = self.pick_id(c);
                let pd = self.pick_pdata(c, pdata::RTU);
                let r = self.send_rtu(ei, h, &pd)?;
                self.api_on(ei, h, "send_rtu", r);
            }
            13 => {
                let (ei, h) = self.pick_id(c);
                let pd = self.pick_pdata(c, pdata::DREQ);
                let r = self.engs[ei].e.send_dreq(now, h, &pd);
                self.api_on(ei, h, "send_dreq", r);
            }
            14 => {
                let (ei, h) = self.pick_id(c);
                let pd = self.pick_pdata(c, pdata::DREP);
                let r = self.engs[ei].e.send_drep(now, h, &pd);
                self.api_on(ei, h, "send_drep", r);
            }
            15 => {
                let (ei, h) = self.pick_id(c);
                let reason = self.pick_reason(c);
                let ari = self.pick_pdata(c, pdata::REJ_ARI);
                let pd = self.pick_pdata(c, pdata::REJ);
                let r = self.engs[ei].e.send_rej(now, h, reason, &ari, &pd);
                self.log(|| format!("e{ei} send_rej {h:?} {reason} -> {r:?}"));
                self.api(r);
            }
            16 => {
                let (ei, h) = self.pick_id(c);
                let r = self.engs[ei].e.prepare_mra(h);
                self.api_on(ei, h, "prepare_mra", r);
            }
            17 => {
                let (ei, h) = self.pick_id(c);
                let ev = match c.u8() {
                    0..120 => ib_event::COMM_EST,
                    120..240 => ib_event::PATH_MIG,
                    _ => c.u32(),
                };
                let r = self.engs[ei].e.notify(h, ev);
                self.log(|| format!("e{ei} notify {h:?} {ev} -> {r:?}"));
                self.api(r);
            }
            18 => {
                let (ei, h) = self.pick_id(c);
                let st = match c.u8() {
                    0..80 => qp_state::INIT,
                    80..160 => qp_state::RTR,
                    160..240 => qp_state::RTS,
                    _ => c.u32(),
                };
                let r = self.engs[ei].e.init_qp_attr(h, st);
                self.log(|| format!("e{ei} init_qp_attr {h:?} {st} -> {:?}", r.map(|a| a.mask)));
                self.api(r);
            }
            19 => {
                let (ei, h) = self.pick_id(c);
                let p = self.sidr_req_params(c, ei);
                let r = self.engs[ei].e.send_sidr_req(now, h, &p);
                self.api_on(ei, h, "send_sidr_req", r);
            }
            20 => {
                let (ei, h) = self.pick_id(c);
                let p = self.sidr_rep_params(c, ei);
                let r = self.engs[ei].e.send_sidr_rep(h, &p);
                self.api_on(ei, h, "send_sidr_rep", r);
            }
            21 => {
                let (ei, h) = self.pick_id(c);
                let err = match c.u8() {
                    0..200 => 0,
                    200..240 => -errno::ENOMEM,
                    _ => c.u32() as i32,
                };
                self.destroy(ei, h, err);
            }
            22..=25 => {
                let with: Vec<usize> = (0..self.engs.len())
                    .filter(|&i| !self.engs[i].pending.is_empty())
                    .collect();
                if !with.is_empty() {
                    let ei = with[c.below(with.len())];
                    let ev = self.engs[ei].pending.pop_front().unwrap();
                    self.react(c, ei, &ev)?;
                }
            }
            26 => {
                let ei = self.pick_engine(c);
                if c.bool() {
                    let sid = self.pick_service(c);
                    let key = c.u8() as u64 % 3;
                    let r = self.engs[ei].e.insert_listen(sid, key);
                    self.log(|| format!("e{ei} insert_listen {sid:#x} key {key} -> {r:?}"));
                    if let Some((h, _)) = self.api(r) {
                        self.note_handle(ei, h);
                        self.engs[ei].listeners.push(h);
                    }
                } else {
                    let h = self.pick_handle(c, ei);
                    let r = self.engs[ei].e.share_listener(h);
                    self.log(|| format!("e{ei} share_listener {h:?} -> {r:?}"));
                    self.api(r);
                }
            }
            27 => self.forge(c)?,
            29 => {
                let ei = self.pick_engine(c);
                self.engs[ei].e.handle_timeout(now);
                let h = self.pick_handle(c, ei);
                let e = &mut self.engs[ei].e;
                let info = e.info(h);
                if let Some(i) = info {
                    check!(i.id == h, "info() of {h:?} names {:?}", i.id);
                    check!(e.state(h) == Some(i.state), "state() and info() disagree");
                }
                let _ = e.random_psn();
                let _ = e.counters();
                let _ = e.poll_timeout();
            }
            28 => self.deliver_one(c, true),
            30 => self.connect_macro(c),
            _ => self.inject_template(c),
        }
        Ok(())
    }

    fn destroy(&mut self, ei: usize, h: Handle, err: i32) {
        let gone = self.engs[ei].e.destroy(h, err);
        self.log(|| format!("e{ei} destroy {h:?} err {err} -> {gone}"));
        if gone {
            let eng = &mut self.engs[ei];
            eng.destroyed.push(h);
            eng.listeners.retain(|l| *l != h);
            eng.pending.retain(|ev| ev.id != h);
        }
    }

    /// A listener on B and a REQ from A, in one step (reaches connected
    /// states quickly).
    fn connect_macro(&mut self, c: &mut Chooser) {
        let now = self.now;
        let server = self.devs[1].engines[c.below(self.devs[1].engines.len())];
        let client = self.devs[0].engines[0];
        let (server, client) = if c.chance(32) {
            (client, server)
        } else {
            (server, client)
        };
        let sid = if c.chance(220) { SERVICE } else { SERVICE2 };
        if self.engs[server].listeners.is_empty() || c.chance(16) {
            let r = self.engs[server].e.create_id();
            if let Some(l) = self.api(r) {
                self.note_handle(server, l);
                let r = self.engs[server].e.listen(l, sid);
                self.log(|| format!("e{server} macro listen {l:?} {sid:#x} -> {r:?}"));
                if self.api(r).is_some() {
                    self.engs[server].listeners.push(l);
                }
            }
        }
        let r = self.engs[client].e.create_id();
        let Some(h) = self.api(r) else {
            return;
        };
        self.note_handle(client, h);
        let mut p = self.req_params(c, client);
        p.service_id = sid;
        let r = if c.chance(32) {
            let sp = SidrReqParams {
                path: p.primary_path,
                sgid_attr: None,
                service_id: sid,
                timeout_ms: 100,
                private_data: vec![7; 16],
                max_cm_retries: 3,
            };
            self.engs[client].e.send_sidr_req(now, h, &sp)
        } else {
            self.engs[client].e.send_req(now, h, &p)
        };
        self.log(|| format!("e{client} macro connect {h:?} {sid:#x} -> {r:?}"));
        self.api(r);
    }

    /// `send_rtu`, checking that the call put exactly one RTU on the wire
    /// when it succeeded and none when it failed: an RTU that went out only
    /// when a REP retransmission asked again would pass every other check.
    fn send_rtu(&mut self, ei: usize, h: Handle, pd: &[u8]) -> Result<ApiResult, Failure> {
        let rtu = counters::attr_index(attr::RTU);
        let before = self.engs[ei].e.counters().tx[rtu];
        let r = self.engs[ei].e.send_rtu(h, pd);
        let sent = self.engs[ei].e.counters().tx[rtu] - before;
        check!(
            sent == u64::from(r.is_ok()),
            "e{ei}: send_rtu {h:?} -> {r:?} sent {sent} RTUs"
        );
        Ok(r)
    }

    /// A consumer's reaction to an event: usually the natural next step.
    fn react(&mut self, c: &mut Chooser, ei: usize, ev: &Event) -> Result<(), Failure> {
        let now = self.now;
        let h = ev.id;
        if self.engs[ei].e.state(h).is_none() {
            return Ok(());
        }
        let s = c.u8();
        let variant = if s < 176 { 0 } else { 1 + (s - 176) % 5 };
        use EventType::*;
        let what;
        let r = match (ev.kind, variant) {
            (ReqReceived, 0) => {
                what = "send_rep";
                let p = RepParams {
                    qp_num: self.pick_qpn(c, ei),
                    starting_psn: 0x2222,
                    private_data: vec![0x5a; 16],
                    responder_resources: 1,
                    initiator_depth: 1,
                    rnr_retry_count: 7,
                    ..RepParams::default()
                };
                self.engs[ei].e.send_rep(now, h, &p)
            }
            (RepReceived, 0) => {
                what = "send_rtu";
                self.send_rtu(ei, h, &[0x33; 8])?
            }
            (RtuReceived | UserEstablished | MraReceived | AprReceived, 0) => {
                what = "send_dreq";
                self.engs[ei].e.send_dreq(now, h, &[0x44; 4])
            }
            (DreqReceived, 0) => {
                what = "send_drep";
                self.engs[ei].e.send_drep(now, h, &[0x55; 4])
            }
            (SidrReqReceived, 0) => {
                what = "send_sidr_rep";
                let p = SidrRepParams {
                    qp_num: 0x99,
                    qkey: 0x1234_5678,
                    info: vec![1, 2, 3],
                    private_data: vec![9; 9],
                    ..SidrRepParams::default()
                };
                self.engs[ei].e.send_sidr_rep(h, &p)
            }
            (LapReceived, 0) | (_, 3) => {
                what = "prepare_mra";
                self.engs[ei].e.prepare_mra(h)
            }
            (RepReceived | ReqReceived, 1) => {
                what = "notify COMM_EST";
                self.engs[ei].e.notify(h, ib_event::COMM_EST)
            }
            (_, 2) => {
                what = "send_rej";
                self.engs[ei].e.send_rej(
                    now,
                    h,
                    wire::rej_reason::CONSUMER_DEFINED as u32,
                    &[],
                    &[0x66; 10],
                )
            }
            (_, 4) => {
                what = "nothing";
                Ok(())
            }
            (k, _) => {
                // Callback returns non-zero: the id is destroyed (with
                // -ENOMEM from REQ_RECEIVED, no REJ).
                let err = if k == ReqReceived && c.bool() {
                    -errno::ENOMEM
                } else {
                    0
                };
                self.destroy(ei, h, err);
                return Ok(());
            }
        };
        self.log(|| {
            format!(
                "e{ei} react to {} on {h:?}: {what} -> {r:?}",
                ev.kind.name()
            )
        });
        self.api(r);
        Ok(())
    }

    // ------------------------------------------------------------ network

    /// The device and port owning `gid` (or, without a GRH, `dlid`).
    fn locate(&self, gid: &Gid, dlid: u16, has_grh: bool) -> Option<(usize, u8)> {
        for (d, dev) in self.devs.iter().enumerate() {
            for &(port, g, lid) in &dev.ports {
                if g == *gid || (!has_grh && lid != 0 && lid == dlid) {
                    return Some((d, port));
                }
            }
        }
        None
    }

    fn lid_of(&self, dev: usize, port: u8) -> u16 {
        self.devs[dev]
            .ports
            .iter()
            .find(|p| p.0 == port)
            .map(|p| p.2)
            .unwrap_or(0)
    }

    fn source_for(&self, from: usize, t: &Transmit, port: u8) -> MadSource {
        MadSource {
            port,
            sgid: t.dest.sgid,
            dgid: t.dest.dgid,
            has_grh: t.dest.has_grh,
            slid: self.lid_of(from, t.dest.port),
            dlid_path_bits: 0,
            sl: t.dest.sl,
            src_qp: 1,
            pkey: t.dest.pkey,
            hop_limit: t.dest.hop_limit,
            traffic_class: t.dest.traffic_class,
            flow_label: t.dest.flow_label,
        }
    }

    /// Hands a MAD to the engine of device `dev` that must handle it.
    fn receive(&mut self, dev: usize, src: &MadSource, mad: &[u8]) -> Result<(), Failure> {
        let shards = self.devs[dev].engines.len();
        let shard = if shards == 1 {
            0
        } else {
            match route(&self.devs[dev].shared, mad, src) {
                Ok(s) => {
                    check!((s as usize) < shards, "route() named shard {s} of {shards}");
                    s as usize
                }
                Err(h) => (h % shards as u64) as usize,
            }
        };
        let ei = self.devs[dev].engines[shard];
        let now = self.now;
        let r = self.engs[ei].e.handle_mad(now, src, mad);
        self.stats.delivered += 1;
        match &r {
            Ok(()) => self.stats.mad_ok += 1,
            Err(_) => self.stats.mad_dropped += 1,
        }
        self.log(|| {
            let a = if mad.len() >= 18 {
                attr::name(u16::from_be_bytes([mad[16], mad[17]])).unwrap_or("?")
            } else {
                "short"
            };
            format!(
                "e{ei} <- {a} ({} bytes) from {}: {r:?}",
                mad.len(),
                src.sgid
            )
        });
        Ok(())
    }

    fn deliver(&mut self, ow: &OnWire, mad: &[u8], src_mutation: Option<u8>) {
        let t = &ow.t;
        let Some((dev, port)) = self.locate(&t.dest.dgid, t.dest.dlid, t.dest.has_grh) else {
            self.log(|| format!("{t:?} goes nowhere"));
            return;
        };
        let mut src = self.source_for(ow.from, t, port);
        if let Some(m) = src_mutation {
            match m % 8 {
                0 => src.port = m / 8,
                1 => src.has_grh = !src.has_grh,
                2 => src.sgid = Gid([m; 16]),
                3 => src.dgid = Gid([m; 16]),
                4 => src.pkey = m as u16 * 0x101,
                5 => src.slid = m as u16,
                6 => src.src_qp = m as u32,
                _ => src.port = 0,
            }
        }
        // Routing errors are harness failures only in `receive`.
        let _ = self.receive(dev, &src, mad);
    }

    fn deliver_one(&mut self, c: &mut Chooser, force_mutation: bool) {
        if self.wire.is_empty() {
            return;
        }
        let i = c.below(self.wire.len());
        let ow = self.wire.remove(i);
        let fate = if force_mutation { 255 } else { c.u8() };
        match fate {
            0..160 => self.deliver(&ow, &ow.t.mad, None),
            160..184 => self.log(|| format!("dropped {:?}", ow.t)),
            184..208 => {
                self.deliver(&ow, &ow.t.mad, None);
                self.deliver(&ow, &ow.t.mad, None);
            }
            208..224 => self.wire.push(ow), // reordered: to the back
            _ => {
                let mut mad = ow.t.mad.to_vec();
                self.mutate(c, &mut mad);
                let sm = c.chance(32).then(|| c.u8());
                self.deliver(&ow, &mad, sm);
            }
        }
    }

    fn deliver_all(&mut self, c: &mut Chooser) {
        let batch = std::mem::take(&mut self.wire);
        let reverse = c.chance(32);
        let it: Box<dyn Iterator<Item = &OnWire>> = if reverse {
            Box::new(batch.iter().rev())
        } else {
            Box::new(batch.iter())
        };
        for ow in it {
            self.deliver(ow, &ow.t.mad, None);
        }
    }

    /// Byte-level damage to a MAD, aimed mostly at fields that matter.
    fn mutate(&self, c: &mut Chooser, mad: &mut Vec<u8>) {
        let n = 1 + c.below(3);
        for _ in 0..n {
            let k = c.u8();
            let pos = c.u8() as usize;
            match k % 10 {
                0 | 1 => {
                    if let Some(b) = mad.get_mut(pos) {
                        *b ^= 1 << (k >> 5);
                    }
                }
                2 => {
                    if let Some(b) = mad.get_mut(pos) {
                        *b = c.u8();
                    }
                }
                3 | 4 => {
                    // A comm ID field set to a known or special value.
                    let off = [24usize, 28, 32][pos % 3];
                    let ei = pos % self.engs.len();
                    let v = match k >> 6 {
                        0 => 0,
                        1 => u32::MAX,
                        _ => self.pick_id_value(c, ei),
                    };
                    if mad.len() >= off + 4 {
                        mad[off..off + 4].copy_from_slice(&v.to_be_bytes());
                    }
                }
                5 => {
                    // Header: method, attribute, status, class version.
                    if mad.len() >= 24 {
                        match pos % 5 {
                            0 => {
                                mad[3] = [method::GET, method::SET, method::GET_RESP, 0x83]
                                    [k as usize & 3]
                            }
                            1 => mad[17] = c.u8() % 0x1c,
                            2 => mad[4..6].copy_from_slice(&c.u16().to_be_bytes()),
                            3 => mad[2] = c.u8() % 4,
                            _ => mad[20..24].copy_from_slice(&c.u32().to_be_bytes()),
                        }
                    }
                }
                6 => {
                    // REJ reason / MRA code / length fields around byte 32.
                    if mad.len() >= 36 {
                        mad[32 + pos % 4] = c.u8();
                    }
                }
                7 => {
                    if pos < mad.len() {
                        mad.truncate(pos);
                    }
                }
                8 => mad.extend(std::iter::repeat_n(k, 1 + pos % 64)),
                _ => {
                    // Copy a 4-byte word from elsewhere in the MAD.
                    let from = (c.u8() as usize / 4) * 4;
                    let to = (pos / 4) * 4;
                    if mad.len() >= from.max(to) + 4 {
                        let w: [u8; 4] = mad[from..from + 4].try_into().unwrap();
                        mad[to..to + 4].copy_from_slice(&w);
                    }
                }
            }
        }
    }

    /// A made-up MAD to one device: raw bytes, a CM header with raw body,
    /// or a kernel MAD, with ids patched in and mutations.
    fn inject(&mut self, c: &mut Chooser) -> Result<(), Failure> {
        let dev = c.below(self.devs.len());
        let kind = c.u8();
        let mut mad: Vec<u8> = match kind % 4 {
            0 => {
                let len = match c.u8() {
                    0..200 => 256,
                    l => l as usize * 2 - 200,
                };
                (0..len).map(|_| c.u8()).collect()
            }
            1 => {
                let mut m = vec![0u8; 256];
                m[0] = 1;
                m[1] = 7;
                m[2] = 2;
                m[3] = method::SEND;
                let a = attr::ALL[c.below(12)];
                if a == attr::CLASS_PORT_INFO {
                    m[3] = [method::GET, method::SET, method::GET_RESP][c.below(3)];
                }
                m[16..18].copy_from_slice(&a.to_be_bytes());
                let fill = c.u8();
                for (i, b) in m[24..].iter_mut().enumerate() {
                    *b = if fill < 128 {
                        0
                    } else {
                        fill.wrapping_mul(i as u8)
                    };
                }
                m
            }
            _ => {
                if self.templates.is_empty() {
                    vec![0u8; 256]
                } else {
                    self.templates[c.below(self.templates.len())].to_vec()
                }
            }
        };
        let ei = self.devs[dev].engines[c.below(self.devs[dev].engines.len())];
        if kind & 3 != 0 {
            self.patch_ids(c, ei, &mut mad);
        }
        if kind >= 64 {
            self.mutate(c, &mut mad);
        }
        let src = self.inject_source(c, dev);
        // Bit 5 keeps a REQ's requester GID as it was (off-path REQs).
        if kind & 0x20 == 0 {
            claim_requester_gid(&mut mad, &src.sgid);
        }
        self.receive(dev, &src, &mad)
    }

    /// A message from the peer for one of our ids, in the id's current
    /// connection (its comm IDs, a usable LAP path, from the peer's last
    /// port): reaches the per-state handlers that random bytes rarely do.
    fn forge(&mut self, c: &mut Chooser) -> Result<(), Failure> {
        let ei = self.pick_engine(c);
        let dev = self.engs[ei].dev;
        let a = [
            attr::REQ,
            attr::MRA,
            attr::REJ,
            attr::REP,
            attr::RTU,
            attr::DREQ,
            attr::DREP,
            attr::SIDR_REQ,
            attr::SIDR_REP,
            attr::LAP,
            attr::APR,
            attr::CLASS_PORT_INFO,
        ][c.below(12)];
        let same: Vec<&[u8; 256]> = self
            .templates
            .iter()
            .filter(|t| u16::from_be_bytes([t[16], t[17]]) == a)
            .collect();
        let mut mad = if !same.is_empty() && c.bool() {
            same[c.below(same.len())].to_vec()
        } else {
            let mut m = vec![0u8; 256];
            m[..4].copy_from_slice(&[1, 7, 2, method::SEND]);
            if a == attr::CLASS_PORT_INFO {
                m[3] = [method::GET, method::SET, method::GET_RESP][c.below(3)];
            }
            m[16..18].copy_from_slice(&a.to_be_bytes());
            m
        };
        if a == attr::MRA || a == attr::REJ {
            // Message code (MRA: REQ/REP/other; REJ: the same) and reason.
            mad[32] = (c.u8() % 3) << 6;
            if a == attr::REJ {
                let reason = [28u16, 10, 4, 8, 3, 1, 12][c.below(7)];
                mad[34..36].copy_from_slice(&reason.to_be_bytes());
                let guid = self.devs[self.other_dev(dev)].guid;
                mad[36..44].copy_from_slice(&guid.to_be_bytes());
                mad[33] = 8 << 1; // ARI length
            } else {
                mad[33] = (c.u8() % 32) << 3; // service timeout
            }
        }
        self.patch_ids(c, ei, &mut mad);
        if c.chance(48) {
            self.mutate(c, &mut mad);
        }
        let src = self.peer_source(dev, self.devs[dev].ports.len() - 1);
        self.receive(dev, &src, &mad)
    }

    /// A kernel MAD as captured, with its comm IDs pointed at our ids.
    fn inject_template(&mut self, c: &mut Chooser) {
        if self.templates.is_empty() {
            return;
        }
        let dev = c.below(self.devs.len());
        let mut mad = self.templates[c.below(self.templates.len())].to_vec();
        let ei = self.devs[dev].engines[c.below(self.devs[dev].engines.len())];
        if c.chance(200) {
            self.patch_ids(c, ei, &mut mad);
        }
        let src = self.inject_source(c, dev);
        let _ = self.receive(dev, &src, &mad);
    }

    /// Points a MAD's comm ID fields at ids of engine `ei`.
    fn patch_ids(&self, c: &mut Chooser, ei: usize, mad: &mut [u8]) {
        if mad.len() < 32 {
            return;
        }
        let a = u16::from_be_bytes([mad[16], mad[17]]);
        let h = self.pick_handle(c, ei);
        let ours = if c.chance(224) {
            h.0 as u32
        } else {
            self.pick_id_value(c, ei)
        };
        // Usually the peer's ID the id knows, so the MAD matches it.
        let their = match self.engs[ei].e.info(h) {
            Some(i) if c.chance(192) => i.remote_id,
            _ => c.u32(),
        };
        if a == attr::LAP && mad.len() >= 80 && c.chance(192) {
            // An alternate path between the two devices' IB (or RoCE) GIDs.
            let dev = self.engs[ei].dev;
            let pi = self.devs[dev].ports.len() - 1;
            let (_, mine, lid) = self.devs[dev].ports[pi];
            let (_, peer, plid) = self.devs[self.other_dev(dev)].ports[pi];
            mad[44..46].copy_from_slice(&plid.to_be_bytes());
            mad[46..48].copy_from_slice(&lid.to_be_bytes());
            mad[48..64].copy_from_slice(&peer.0);
            mad[64..80].copy_from_slice(&mine.0);
        }
        match a {
            attr::REQ | attr::SIDR_REQ => mad[24..28].copy_from_slice(&their.to_be_bytes()),
            attr::SIDR_REP => mad[24..28].copy_from_slice(&ours.to_be_bytes()),
            _ => {
                if c.bool() {
                    mad[24..28].copy_from_slice(&their.to_be_bytes());
                }
                mad[28..32].copy_from_slice(&ours.to_be_bytes());
            }
        }
    }

    /// What a MAD from the other device to port index `pi` of `dev` comes
    /// with: the peer's GID and LID on the same index, the GSI, a GRH.
    fn peer_source(&self, dev: usize, pi: usize) -> MadSource {
        let from = self.other_dev(dev);
        let (port, dgid, _) = self.devs[dev].ports[pi];
        let (_, sgid, slid) = self.devs[from].ports[pi];
        MadSource {
            port,
            sgid,
            dgid,
            has_grh: true,
            slid,
            src_qp: 1,
            pkey: 0xffff,
            hop_limit: 64,
            ..MadSource::default()
        }
    }

    /// Where an injected MAD claims to come from (usually the other device).
    fn inject_source(&self, c: &mut Chooser, dev: usize) -> MadSource {
        let pi = c.below(self.devs[dev].ports.len());
        let mut src = self.peer_source(dev, pi);
        if c.chance(24) {
            let m = c.u8();
            match m % 6 {
                0 => src.port = m,
                1 => src.has_grh = false,
                2 => src.sgid = Gid([m; 16]),
                3 => src.dgid = Gid([m; 16]),
                4 => src.pkey = m as u16,
                _ => src.src_qp = 0,
            }
        }
        src
    }

    /// Advances the virtual clock and runs every timer that is due.
    fn advance(&mut self, c: &mut Chooser) {
        let s = c.u8();
        let next = self
            .engs
            .iter()
            .filter_map(|e| e.e.poll_timeout())
            .min()
            .unwrap_or(self.now);
        let to = match s {
            0..64 => self.now.plus_millis(s as u64),
            64..128 => self.now.plus_millis((s as u64 - 64) * 100),
            128..176 => next.max(self.now),
            176..200 => Time(next.0.saturating_add(c.u32() as u64)).max(self.now),
            200..216 => Time(self.now.0.saturating_add(c.u16() as u64 * 997)), // sub-ms
            216..240 => self.now.plus_millis(3_600_000),
            _ => self.now.plus_millis(c.u32() as u64),
        };
        self.now = to;
        self.log(|| "advance".to_string());
        self.run_timers();
    }

    fn run_timers(&mut self) {
        let now = self.now;
        for ei in 0..self.engs.len() {
            // Bounded: each call runs everything due; a timer re-armed at
            // `now` with a 0 ms timeout is due again.
            for _ in 0..64 {
                match self.engs[ei].e.poll_timeout() {
                    Some(d) if d <= now => {
                        self.engs[ei].e.handle_timeout(now);
                        self.stats.timers_fired += 1;
                    }
                    _ => break,
                }
            }
        }
    }

    // ------------------------------------------------------------ outputs

    /// Collects everything the engines produced and checks it.
    fn settle(&mut self, c: &mut Chooser) -> Result<(), Failure> {
        for _round in 0..8 {
            let mut any = false;
            for ei in 0..self.engs.len() {
                let dev = self.engs[ei].dev;
                while let Some(t) = self.engs[ei].e.poll_transmit() {
                    any = true;
                    check_transmit(&t)?;
                    self.log(|| format!("e{ei} -> {t:?}"));
                    self.wire.push(OnWire { from: dev, t });
                }
                while self.engs[ei].e.poll_change().is_some() {}
                while let Some(f) = self.engs[ei].e.poll_foreign() {
                    any = true;
                    let Foreign::SendDreq { shard, local_id } = f;
                    // As the runtime: an unknown shard is ignored.
                    if let Some(&oi) = self.devs[dev].engines.get(shard as usize) {
                        let now = self.now;
                        let r = self.engs[oi].e.send_dreq(now, Handle(local_id as u64), &[]);
                        self.log(|| format!("e{oi} foreign send_dreq {local_id:#x} -> {r:?}"));
                    }
                }
                let mut evs = Vec::new();
                while let Some(ev) = self.engs[ei].e.poll_event() {
                    evs.push(ev);
                }
                for ev in &evs {
                    any = true;
                    self.check_event(ei, ev)?;
                }
                for ev in evs {
                    self.stats.events[ev.kind as usize] += 1;
                    if matches!(ev.kind, EventType::ReqReceived | EventType::SidrReqReceived) {
                        self.note_handle(ei, ev.id);
                    }
                    self.log(|| format!("e{ei} event {ev:?}"));
                    if self.auto && c.chance(200) {
                        self.react(c, ei, &ev)?;
                    } else {
                        self.engs[ei].pending.push_back(ev);
                        if self.engs[ei].pending.len() > 32 {
                            self.engs[ei].pending.pop_front();
                        }
                    }
                }
            }
            if !any {
                break;
            }
        }
        // Keep the wire bounded (a real fabric drops too).
        if self.wire.len() > 256 {
            self.wire.drain(..self.wire.len() - 256);
        }
        Ok(())
    }

    fn check_event(&self, ei: usize, ev: &Event) -> Result<(), Failure> {
        let e = &self.engs[ei].e;
        check!(
            e.state(ev.id).is_some(),
            "e{ei}: event {} for {:?}, which is not a live id",
            ev.kind.name(),
            ev.id
        );
        if let Some(pd) = ev.private_data() {
            let (_, len) = ev.private_data_range().unwrap();
            check!(pd.len() == len, "private data length");
        }
        let _ = ev.info();
        match &ev.param {
            EventParam::Req(p) => {
                check!(ev.mad.is_some(), "REQ_RECEIVED without its MAD");
                check!(
                    ev.local_id == ev.id.0 as u32,
                    "REQ_RECEIVED local_id {:#x} for {:?}",
                    ev.local_id,
                    ev.id
                );
                let _ = p.listen_id;
            }
            EventParam::SidrReq(_) => {
                check!(ev.mad.is_some(), "SIDR_REQ_RECEIVED without its MAD");
            }
            _ => {}
        }
        Ok(())
    }

    /// Table sizes can never exceed the ids that own their entries.
    fn check_counts(&self) -> Result<(), Failure> {
        for (d, dev) in self.devs.iter().enumerate() {
            let mut ids = 0;
            for &ei in &dev.engines {
                let e = &self.engs[ei].e;
                let n = e.id_count();
                ids += n;
                let (remote, sidr) = e.table_sizes();
                check!(
                    e.timer_count() <= n,
                    "e{ei}: {} timers for {n} ids",
                    e.timer_count()
                );
                check!(remote <= n, "e{ei}: {remote} remote-id entries for {n} ids");
                check!(sidr <= n, "e{ei}: {sidr} SIDR entries for {n} ids");
                check!(
                    e.half_open() as usize <= n,
                    "e{ei}: half-open count {} for {n} ids",
                    e.half_open()
                );
                check!(
                    e.handles().len() == n,
                    "e{ei}: handles() and id_count() differ"
                );
                check!(
                    (e.timer_count() == 0) == e.poll_timeout().is_none(),
                    "e{ei}: {} timers but poll_timeout() {:?}",
                    e.timer_count(),
                    e.poll_timeout()
                );
            }
            let sh = &dev.shared;
            check!(
                sh.qp_count() <= ids,
                "dev {d}: {} remote-QPN entries for {ids} ids",
                sh.qp_count()
            );
            check!(
                sh.listen_count() <= ids,
                "dev {d}: {} listeners for {ids} ids",
                sh.listen_count()
            );
        }
        Ok(())
    }

    /// Settle the network, destroy everything, drain, and check that no
    /// resource is left behind.
    fn finish(&mut self) -> Result<(), Failure> {
        // No more choices: nobody reacts from here on.
        let mut none = ByteSource::new(&[]);
        let mut c = Chooser {
            src: &mut none,
            exhausted: true,
        };
        self.auto = false;
        for _ in 0..32 {
            let batch = std::mem::take(&mut self.wire);
            for ow in &batch {
                self.deliver(ow, &ow.t.mad, None);
            }
            self.settle(&mut c)?;
            self.check_counts()?;
            match self.engs.iter().filter_map(|e| e.e.poll_timeout()).min() {
                Some(d) => {
                    self.now = self.now.max(d);
                    self.run_timers();
                    self.settle(&mut c)?;
                }
                None if self.wire.is_empty() => break,
                None => {}
            }
        }
        // Liveness: with the network silent, timers alone must take every
        // id out of the states that wait on the peer (retransmissions end
        // in *_ERROR, timewait ends in TIMEWAIT_EXIT). Skipped when an API
        // call asked for a practically infinite SIDR timeout.
        self.wire.clear();
        let horizon = Time::from_millis(1 << 43);
        for _ in 0..100_000 {
            let Some(d) = self.engs.iter().filter_map(|e| e.e.poll_timeout()).min() else {
                break;
            };
            if d > horizon {
                break;
            }
            self.now = self.now.max(d);
            self.run_timers();
            self.settle(&mut c)?;
            self.wire.clear();
        }
        for (ei, eng) in self.engs.iter().enumerate() {
            if self.unbounded_timeouts {
                break;
            }
            for h in eng.e.handles() {
                let st = eng.e.state(h).unwrap();
                check!(
                    !matches!(
                        st,
                        State::ReqSent
                            | State::MraReqRcvd
                            | State::RepSent
                            | State::MraRepRcvd
                            | State::DreqSent
                            | State::Timewait
                            | State::SidrReqSent
                    ),
                    "e{ei}: {h:?} stuck in {} after every timer ran out",
                    st.name()
                );
            }
        }
        self.log(|| "destroying everything".to_string());
        for ei in 0..self.engs.len() {
            for h in self.engs[ei].e.handles() {
                // A shared listener needs one destroy per user.
                for _ in 0..1000 {
                    if self.engs[ei].e.destroy(h, 0) || self.engs[ei].e.state(h).is_none() {
                        break;
                    }
                }
                check!(
                    self.engs[ei].e.state(h).is_none(),
                    "e{ei}: {h:?} survives destroy"
                );
            }
            let e = &mut self.engs[ei].e;
            check!(
                e.poll_event().is_none(),
                "e{ei}: an event is queued after destroying every id"
            );
        }
        self.settle(&mut c)?;
        // Late MADs (REJ/DREQ/DREP from the destroys and anything still in
        // flight) must not create anything.
        for _ in 0..16 {
            let batch = std::mem::take(&mut self.wire);
            for ow in &batch {
                self.deliver(ow, &ow.t.mad, None);
            }
            self.settle(&mut c)?;
            if self.wire.is_empty() {
                break;
            }
        }
        self.now = self.now.plus_millis(1 << 40);
        for ei in 0..self.engs.len() {
            let now = self.now;
            self.engs[ei].e.handle_timeout(now);
        }
        self.settle(&mut c)?;
        for (ei, eng) in self.engs.iter().enumerate() {
            let e = &eng.e;
            check!(e.id_count() == 0, "e{ei}: {} ids left", e.id_count());
            check!(
                e.timer_count() == 0,
                "e{ei}: {} timers left",
                e.timer_count()
            );
            check!(
                e.table_sizes() == (0, 0),
                "e{ei}: tables left {:?}",
                e.table_sizes()
            );
            check!(
                e.half_open() == 0,
                "e{ei}: half-open count {}",
                e.half_open()
            );
            check!(
                e.admission_sizes().0 == 0,
                "e{ei}: half-open sources left {:?}",
                e.admission_sizes()
            );
            check!(e.poll_timeout().is_none(), "e{ei}: a deadline is left");
        }
        for (d, dev) in self.devs.iter().enumerate() {
            check!(
                dev.shared.qp_count() == 0,
                "dev {d}: {} remote-QPN entries left",
                dev.shared.qp_count()
            );
            check!(
                dev.shared.listen_count() == 0,
                "dev {d}: {} listeners left",
                dev.shared.listen_count()
            );
        }
        Ok(())
    }
}

/// Every CM message (method Send) an engine sends must parse: a peer would
/// drop anything else. GetResp answers echo the request and are exempt.
fn check_transmit(t: &Transmit) -> Result<(), Failure> {
    if t.mad[3] == method::SEND {
        if let Err(e) = CmMad::parse(&t.mad) {
            return Err(format!("engine sent an unparseable MAD ({e}): {t:?}"));
        }
    } else {
        check!(
            t.mad[3] == method::GET_RESP,
            "engine sent method {:#04x}",
            t.mad[3]
        );
    }
    let _ = wire::hex(&t.mad[..4]);
    Ok(())
}

/// A captured REQ re-sent from another host names that host as the
/// requester (its primary LocalGID), as a real peer's REQ does; without it
/// the engine rejects the REQ as off-path before any handler runs.
fn claim_requester_gid(mad: &mut [u8], sgid: &Gid) {
    if let Ok(mut m) = CmMad::parse(mad) {
        if let CmMsg::Req(r) = &mut m.msg {
            r.primary.local_gid = *sgid;
            mad[..256].copy_from_slice(&m.to_bytes());
        }
    }
}
