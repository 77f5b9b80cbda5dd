//! Deterministic simulation of several engines joined by a simulated fabric.
//!
//! Everything runs in one thread on a virtual clock: MADs an engine emits
//! are delivered to the engine owning the destination GID after a seeded
//! delay, with seeded drops, duplicates, reordering (jitter) and
//! corruption. Consumer logic ("apps") reacts to events by calling the
//! engine API, exactly as a C callback would. The same seed always gives
//! the same run, so a failing seed is a reproducible test case.

use crate::engine::*;
use crate::wire::Gid;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

/// Seeded xorshift-style generator (SplitMix64).
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x5151_5151_dead_beef)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        ids::splitmix64(self.0)
    }
    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }
}

/// Fabric faults, each an independent per-packet probability.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Faults {
    pub drop: f64,
    pub duplicate: f64,
    /// Corrupted packets: with `deliver_corrupt` false they are dropped (as
    /// the ICRC check of a real port does); with it true the damaged MAD is
    /// handed to the engine (robustness runs).
    pub corrupt: f64,
    pub deliver_corrupt: bool,
    /// One-way delay: `min_delay_us + uniform(0..jitter_us)`; jitter
    /// reorders packets.
    pub min_delay_us: u64,
    pub jitter_us: u64,
}

impl Faults {
    pub const NONE: Faults = Faults {
        drop: 0.0,
        duplicate: 0.0,
        corrupt: 0.0,
        deliver_corrupt: false,
        min_delay_us: 50,
        jitter_us: 0,
    };

    /// True when every packet arrives (possibly late, duplicated, reordered).
    pub fn lossless(&self) -> bool {
        self.drop == 0.0 && (self.corrupt == 0.0 || self.deliver_corrupt)
    }

    /// A seeded mix of faults: up to 30% loss, 20% duplication, 10%
    /// corruption, and delays of 50 µs .. 3 ms that reorder.
    pub fn random(rng: &mut Rng) -> Faults {
        let pick = |rng: &mut Rng, max: f64| {
            if rng.chance(0.5) {
                0.0
            } else {
                rng.below(1000) as f64 / 1000.0 * max
            }
        };
        Faults {
            drop: pick(rng, 0.3),
            duplicate: pick(rng, 0.2),
            corrupt: pick(rng, 0.1),
            deliver_corrupt: false,
            min_delay_us: 50 + rng.below(500),
            jitter_us: rng.below(3000),
        }
    }
}

/// What an app is told.
#[derive(Debug, Clone)]
pub enum Input {
    Event(Event),
    /// A wake-up the app scheduled with `Ctx::wake_at`.
    Wake(u64),
}

/// One simulated host.
pub struct Node {
    pub engine: Engine,
    pub gid: Gid,
    /// A node that is down neither sends nor receives.
    pub up: bool,
}

struct Packet {
    to: usize,
    src: MadSource,
    mad: [u8; 256],
}

/// A line of the trace kept for failure reports.
#[derive(Debug, Clone)]
pub struct TraceLine {
    pub at: Time,
    pub text: String,
}

/// Handed to apps: the node's engine and the clock, plus scheduling.
pub struct Ctx<'a> {
    pub now: Time,
    pub node: usize,
    pub engine: &'a mut Engine,
    wakes: &'a mut Vec<(Time, usize, u64)>,
}

impl Ctx<'_> {
    /// Calls the app of this node again at `at` with `Input::Wake(token)`.
    pub fn wake_at(&mut self, at: Time, token: u64) {
        self.wakes.push((at, self.node, token));
    }
}

pub struct Sim {
    pub now: Time,
    pub nodes: Vec<Node>,
    pub rng: Rng,
    pub faults: Faults,
    queue: BinaryHeap<Reverse<(Time, u64, usize)>>,
    packets: HashMap<usize, Packet>,
    next_packet: usize,
    seq: u64,
    wakes: Vec<(Time, usize, u64)>,
    pub trace: Vec<TraceLine>,
    pub tracing: bool,
    /// Every event delivered, per node: (time, id, kind).
    pub events: Vec<(usize, Time, Handle, EventType)>,
    pub delivered_packets: u64,
    pub dropped_packets: u64,
    /// Sees every MAD an engine sends, before the fabric's faults (when,
    /// from, to, whether `to` is up, the MAD): what a service forwarding the
    /// MADs would see (`tests/sim_tracker.rs`). A MAD it returns goes back
    /// to `from` at once, as if `to` had sent it (an answer for a node that
    /// is down).
    #[allow(clippy::type_complexity)]
    pub tap: Option<Box<dyn FnMut(Time, usize, usize, bool, &[u8; 256]) -> Option<[u8; 256]>>>,
}

impl Sim {
    pub fn new(seed: u64, faults: Faults) -> Sim {
        Sim {
            now: Time::from_millis(1_000),
            nodes: Vec::new(),
            rng: Rng::new(seed),
            faults,
            queue: BinaryHeap::new(),
            packets: HashMap::new(),
            next_packet: 0,
            seq: 0,
            wakes: Vec::new(),
            trace: Vec::new(),
            tracing: false,
            events: Vec::new(),
            delivered_packets: 0,
            dropped_packets: 0,
            tap: None,
        }
    }

    /// Adds a host with one RoCE port whose GID is `::ffff:10.0.0.<n>`.
    pub fn add_node(&mut self, guid: u64, cfg: impl FnOnce(&mut EngineConfig)) -> usize {
        let n = self.nodes.len() as u8 + 1;
        let gid: Gid = std::net::IpAddr::from([10, 0, 0, n]).into();
        let mut c = EngineConfig::new(guid, vec![PortInfo::roce(1, gid)]);
        c.seed = self.rng.next_u64();
        c.hi_tid = n as u32;
        cfg(&mut c);
        let engine = Engine::standalone(c, self.rng.next_u64());
        self.nodes.push(Node {
            engine,
            gid,
            up: true,
        });
        self.nodes.len() - 1
    }

    /// Replaces a node's engine with a fresh one (a process restart with the
    /// same node GUID and address).
    pub fn restart_node(&mut self, node: usize) {
        let cfg = self.nodes[node].engine.config().clone();
        let seed = self.rng.next_u64();
        self.nodes[node].engine = Engine::standalone(cfg, seed);
        self.nodes[node].up = true;
    }

    fn log(&mut self, text: impl FnOnce() -> String) {
        if self.tracing {
            let at = self.now;
            self.trace.push(TraceLine { at, text: text() });
        }
    }

    fn node_by_gid(&self, gid: &Gid) -> Option<usize> {
        self.nodes.iter().position(|n| n.gid == *gid)
    }

    fn schedule(&mut self, delay_us: u64, p: Packet) {
        let at = Time(self.now.0 + delay_us * 1000);
        let id = self.next_packet;
        self.next_packet += 1;
        self.seq += 1;
        self.packets.insert(id, p);
        self.queue.push(Reverse((at, self.seq, id)));
    }

    /// Moves every MAD the engines emitted onto the wire, applying faults.
    fn flush_transmits(&mut self) {
        for from in 0..self.nodes.len() {
            while let Some(t) = self.nodes[from].engine.poll_transmit() {
                if !self.nodes[from].up {
                    continue;
                }
                let Some(to) = self.node_by_gid(&t.dest.dgid) else {
                    self.dropped_packets += 1;
                    continue;
                };
                self.log(|| format!("n{from} -> n{to} {:?}", t));
                let up = self.nodes[to].up;
                let now = self.now;
                if let Some(answer) = self
                    .tap
                    .as_mut()
                    .and_then(|tap| tap(now, from, to, up, &t.mad))
                {
                    let gid = self.nodes[to].gid;
                    self.inject(from, gid, answer);
                }
                let src = roce_source(self.nodes[from].gid, &t.dest);
                let f = self.faults;
                let copies = if self.rng.chance(f.duplicate) { 2 } else { 1 };
                for _ in 0..copies {
                    if self.rng.chance(f.drop) {
                        self.dropped_packets += 1;
                        continue;
                    }
                    let mut mad = t.mad;
                    if self.rng.chance(f.corrupt) {
                        if !f.deliver_corrupt {
                            self.dropped_packets += 1;
                            continue;
                        }
                        for _ in 0..1 + self.rng.below(4) {
                            let i = self.rng.below(256) as usize;
                            mad[i] ^= 1 << self.rng.below(8);
                        }
                    }
                    let delay = f.min_delay_us + self.rng.below(f.jitter_us + 1);
                    self.schedule(delay, Packet { to, src, mad });
                }
            }
        }
    }

    /// Injects a raw MAD to `to` as if sent from `from_gid`, now.
    pub fn inject(&mut self, to: usize, from_gid: Gid, mad: [u8; 256]) {
        let src = MadSource {
            port: 1,
            sgid: from_gid,
            dgid: self.nodes[to].gid,
            has_grh: true,
            pkey: 0xffff,
            src_qp: 1,
            ..MadSource::default()
        };
        self.schedule(0, Packet { to, src, mad });
    }

    /// Delivers pending events to the apps until nothing new happens at
    /// this instant.
    fn drain_events(&mut self, app: &mut impl FnMut(&mut Ctx, Input)) {
        loop {
            self.flush_transmits();
            let mut any = false;
            for n in 0..self.nodes.len() {
                while let Some(ev) = self.nodes[n].engine.poll_event() {
                    any = true;
                    self.events.push((n, self.now, ev.id, ev.kind));
                    self.log(|| format!("n{n} event {:?}", ev));
                    let now = self.now;
                    let mut ctx = Ctx {
                        now,
                        node: n,
                        engine: &mut self.nodes[n].engine,
                        wakes: &mut self.wakes,
                    };
                    app(&mut ctx, Input::Event(ev));
                }
                while self.nodes[n].engine.poll_change().is_some() {}
                while let Some(f) = self.nodes[n].engine.poll_foreign() {
                    // Single-shard nodes never ask, but honour it anyway.
                    let Foreign::SendDreq { local_id, .. } = f;
                    let now = self.now;
                    let _ = self.nodes[n]
                        .engine
                        .send_dreq(now, Handle(local_id as u64), &[]);
                }
            }
            if !any {
                self.flush_transmits();
                return;
            }
        }
    }

    /// Runs an action with access to a node's engine (outside any event).
    pub fn with_node<R>(
        &mut self,
        node: usize,
        app: &mut impl FnMut(&mut Ctx, Input),
        f: impl FnOnce(&mut Ctx) -> R,
    ) -> R {
        let now = self.now;
        let mut ctx = Ctx {
            now,
            node,
            engine: &mut self.nodes[node].engine,
            wakes: &mut self.wakes,
        };
        let r = f(&mut ctx);
        self.drain_events(app);
        r
    }

    fn next_time(&self) -> Option<Time> {
        let mut t = self.queue.peek().map(|Reverse((at, _, _))| *at);
        for n in &self.nodes {
            if let Some(d) = n.engine.poll_timeout() {
                t = Some(t.map_or(d, |x| x.min(d)));
            }
        }
        for (at, _, _) in &self.wakes {
            t = Some(t.map_or(*at, |x| x.min(*at)));
        }
        t
    }

    /// Runs until nothing is pending or `limit` is reached. Returns false
    /// when the limit stopped it.
    pub fn run(&mut self, limit: Time, app: &mut impl FnMut(&mut Ctx, Input)) -> bool {
        self.drain_events(app);
        loop {
            let Some(t) = self.next_time() else {
                return true;
            };
            if t > limit {
                self.now = limit;
                return false;
            }
            self.now = self.now.max(t);
            // Packets due now.
            while let Some(Reverse((at, _, id))) = self.queue.peek().copied() {
                if at > self.now {
                    break;
                }
                self.queue.pop();
                let p = self.packets.remove(&id).unwrap();
                if !self.nodes[p.to].up {
                    self.dropped_packets += 1;
                    continue;
                }
                self.delivered_packets += 1;
                let now = self.now;
                let res = self.nodes[p.to].engine.handle_mad(now, &p.src, &p.mad);
                if let Err(d) = res {
                    self.log(|| format!("n{} dropped: {d}", p.to));
                }
                self.drain_events(app);
            }
            // Timers due now.
            for n in 0..self.nodes.len() {
                if self.nodes[n]
                    .engine
                    .poll_timeout()
                    .is_some_and(|d| d <= self.now)
                {
                    let now = self.now;
                    self.nodes[n].engine.handle_timeout(now);
                    self.drain_events(app);
                }
            }
            // App wake-ups due now.
            let now = self.now;
            let due: Vec<(Time, usize, u64)> = {
                let (due, rest): (Vec<_>, Vec<_>) =
                    self.wakes.drain(..).partition(|(at, _, _)| *at <= now);
                self.wakes = rest;
                due
            };
            for (_, n, token) in due {
                let mut ctx = Ctx {
                    now,
                    node: n,
                    engine: &mut self.nodes[n].engine,
                    wakes: &mut self.wakes,
                };
                app(&mut ctx, Input::Wake(token));
                self.drain_events(app);
            }
        }
    }

    /// Leak check of one node after all its ids were destroyed.
    pub fn check_clean(&self, node: usize) -> Result<(), String> {
        let e = &self.nodes[node].engine;
        let problems = [
            (e.id_count(), "ids"),
            (e.timer_count(), "timers"),
            (e.table_sizes().0, "remote-id entries"),
            (e.table_sizes().1, "SIDR entries"),
            (e.shared().qp_count(), "remote-QPN entries"),
            (e.shared().listen_count(), "listeners"),
            (e.half_open() as usize, "half-open count"),
        ];
        for (n, what) in problems {
            if n != 0 {
                return Err(format!(
                    "node {node}: {n} {what} left after destroying everything"
                ));
            }
        }
        Ok(())
    }

    /// The trace as text (for failure reports).
    pub fn trace_text(&self) -> String {
        self.trace
            .iter()
            .map(|l| format!("{:>12.3} ms  {}", l.at.0 as f64 / 1e6, l.text))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for Sim {
    /// A traced run prints its trace when it ends (replay of a failing seed).
    fn drop(&mut self) {
        if self.tracing && !self.trace.is_empty() {
            eprintln!("--- trace ---\n{}", self.trace_text());
        }
    }
}

/// A path record from `a` to `b` on the simulated fabric (RoCEv2, as
/// `ibcm_init_path` builds one).
pub fn sim_path(sim: &Sim, a: usize, b: usize, packet_life_time: u8) -> PathRec {
    roce_path(sim.nodes[a].gid, sim.nodes[b].gid, packet_life_time)
}

/// Where a MAD that `sgid` sent to `dest` comes from on a RoCE fabric:
/// QP1 of port 1, with a GRH (hop limit 64).
pub fn roce_source(sgid: Gid, dest: &MadDest) -> MadSource {
    MadSource {
        port: 1,
        sgid,
        dgid: dest.dgid,
        has_grh: true,
        pkey: dest.pkey,
        src_qp: 1,
        hop_limit: 64,
        ..MadSource::default()
    }
}

/// A RoCEv2 path record from `sgid` to `dgid`, as `ibcm_init_path` builds
/// one.
pub fn roce_path(sgid: Gid, dgid: Gid, packet_life_time: u8) -> PathRec {
    PathRec {
        dgid,
        sgid,
        hop_limit: 64,
        reversible: 1,
        pkey: 0xffff,
        mtu_selector: SA_EQ,
        mtu: 3,
        rate_selector: SA_EQ,
        rate: 0,
        packet_life_time_selector: SA_EQ,
        packet_life_time,
        rec_type: PathRecType::RoceV2,
        flags: 1,
        ..PathRec::default()
    }
}
