//! The sans-IO CM protocol engine.
//!
//! One [`Engine`] is one shard of one device. It takes API calls
//! (`create_id`, `send_req`, ...), received MADs (`handle_mad`) and the
//! passage of time (`handle_timeout`), and produces MADs to send
//! (`poll_transmit`), consumer events (`poll_event`), public-field changes
//! (`poll_change`) and its next deadline (`poll_timeout`). It never touches
//! a socket, a thread or a clock, so tests drive it with a virtual clock.
//!
//! Behaviour follows the Linux kernel's `drivers/infiniband/core/cm.c`
//! (state rules, timeouts, duplicate and stale handling); see
//! `docs/ARCHITECTURE.md` and the rules in `docs/CM_RULES.md`. Deliberate
//! differences are marked "ibcm:" in comments (CM_RULES.md §differences).

mod admission;
pub mod counters;
pub mod ids;
mod qp;
mod recv;
pub mod shared;
pub mod timer;
pub mod types;

pub use counters::{Counters, DropCause};
pub use recv::{Dropped, route};
pub use shared::{IdRef, ListenEntry, Shared};
pub use types::*;

use crate::wire::{
    CmMad, CmMsg, Drep, Dreq, Gid, MsgCode, Rej, Rep, Req, ReqPath, Rtu, SidrRep, SidrReq, attr,
    pdata, pdata_area, peek, rej_reason, sidr_status,
};
use ids::IdSlab;
use std::collections::VecDeque;
use std::sync::Arc;
use timer::{TimerKey, TimerWheel};

/// MRA service timeout the kernel always sends (`CM_MRA_SETTING`).
pub const MRA_SETTING: u8 = 24;

/// One GID table entry of a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GidEntry {
    pub gid: Gid,
    pub gid_type: GidType,
}

/// What the engine needs to know about a port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortInfo {
    /// 1-based port number.
    pub port_num: u8,
    pub gids: Vec<GidEntry>,
    pub pkeys: Vec<u16>,
    pub lid: u16,
    pub lmc: u8,
    /// Ethernet link layer (RoCE): every MAD carries a GRH, no LAP/APR.
    pub is_roce: bool,
    /// Active MTU (`enum ib_mtu`).
    pub mtu: u8,
    /// Active rate (`enum ib_rate`).
    pub rate: u8,
}

impl PortInfo {
    /// A RoCEv2 port whose GID index 0 is `gid` (the software fabric).
    pub fn roce(port_num: u8, gid: Gid) -> PortInfo {
        PortInfo {
            port_num,
            gids: vec![GidEntry {
                gid,
                gid_type: GidType::RoceV2,
            }],
            pkeys: vec![0xffff],
            lid: 0,
            lmc: 0,
            is_roce: true,
            mtu: 3,
            rate: 0,
        }
    }
}

/// Engine configuration (one shard of one device).
#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub node_guid: u64,
    /// `local_ca_ack_delay` (5-bit exponent).
    pub ack_delay: u8,
    pub ports: Vec<PortInfo>,
    /// Device advertises FLUSH capabilities (adds FLUSH access flags).
    pub flush_caps: bool,
    /// Upper 32 bits of the TIDs of new requests (the MAD agent's hi_tid).
    pub hi_tid: u32,
    /// This shard's index (< `shared.shards()`).
    pub shard: u32,
    /// Maximum ids in this shard.
    pub max_ids: u32,
    /// Maximum passive connections between REQ and RTU; more REQs are
    /// rejected with `IB_CM_REJ_NO_RESOURCES`. 0 = unlimited.
    pub max_half_open: u32,
    /// Seed of the engine's own randomness (assigned PSNs and the like).
    pub seed: u64,
    /// Half-open passive connections from one source (GRH source GID, or
    /// SLID without GRH); at the quota the source's oldest REP-waiting
    /// connection is evicted (see `admission`). 0 = no per-source quota.
    pub max_half_open_per_source: u32,
    /// The passive side's wait for the requester per try (REP → RTU, and
    /// its DREQ → DREP), in ms, at most; the REQ's LocalCMResponseTimeout
    /// and an MRA's ServiceTimeout are honoured up to this. IBTA leaves the
    /// responder's timeouts to the responder. Default 4096 ms (CM timeout
    /// 20, rdma_cm's own value).
    pub rep_timeout_cap_ms: u64,
    /// The passive side's retries of REP (and of its DREQ), at most,
    /// whatever the REQ's MaxCMRetries asks. Default 15 (the field's
    /// maximum: the kernel's behaviour).
    pub rep_max_retries: u8,
    /// Reject a REQ (INVALID_GID, sent to where it came from) whose primary
    /// path names a requester GID other than the GRH source it came from,
    /// instead of sending REPs to that other GID: a forged REQ cannot turn
    /// this CM into a reflector. RoCE ports only (IB without a GRH has no
    /// source GID to compare).
    pub reject_off_path_req: bool,
}

impl EngineConfig {
    pub fn new(node_guid: u64, ports: Vec<PortInfo>) -> EngineConfig {
        EngineConfig {
            node_guid,
            ack_delay: 15,
            ports,
            flush_caps: false,
            hi_tid: 1,
            shard: 0,
            max_ids: u32::MAX,
            max_half_open: 65536,
            seed: 0,
            max_half_open_per_source: 16384,
            rep_timeout_cap_ms: 4096,
            rep_max_retries: 15,
            reject_off_path_req: true,
        }
    }
}

/// A public-field change of an id (`cm_id->state` and friends), for the
/// runtime to mirror into the C struct.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Change {
    pub id: Handle,
    pub user: u64,
    pub state: State,
    pub lap_state: LapState,
    pub remote_id: u32,
    pub service_id: u64,
}

/// Work the engine asks the runtime to do on another shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Foreign {
    /// `ib_send_cm_dreq(id, NULL, 0)` on an id of another shard (stale
    /// connection found).
    SendDreq { shard: u32, local_id: u32 },
}

/// The one retransmitted request an id may have outstanding.
struct Outstanding {
    mad: [u8; 256],
    dest: MadDest,
    /// Retransmissions left.
    retries_left: u8,
    timeout_ms: u64,
    /// State recorded at send time (updated by an accepted MRA).
    state_at_send: State,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TimerKind {
    Retransmit,
    Timewait,
}

#[derive(Debug, Clone, Copy)]
struct TimerRef {
    id: u32,
    kind: TimerKind,
}

/// Per-id protocol state (the kernel's `cm_id_private`).
pub(crate) struct IdRec {
    user: u64,
    state: State,
    lap_state: LapState,
    service_id: u64,
    remote_id: u32,
    tid: u64,
    remote_ca_guid: u64,
    remote_qpn: u32,
    local_qpn: u32,
    sq_psn: u32,
    rq_psn: u32,
    qp_type: u32,
    initiator_depth: u8,
    responder_resources: u8,
    retry_count: u8,
    rnr_retry_count: u8,
    max_cm_retries: u8,
    target_ack_delay: u8,
    path_mtu: u8,
    pkey: u16,
    timeout_ms: u64,
    av: Av,
    alt_av: Option<Box<Av>>,
    dlid_datapath: u32,
    /// The kernel's `timewait_info` exists (consumed by timewait or reset).
    has_tw: bool,
    /// Registered in this shard's (remote CA GUID, remote comm ID) table.
    in_remote_id: bool,
    /// Registered in the device's (remote CA GUID, remote QPN) table.
    in_remote_qp: bool,
    /// Counted as a half-open passive connection.
    half_open: bool,
    /// The source it is counted against while half-open.
    half_open_src: Gid,
    /// Its entry in the eviction queues (0 = not evictable).
    evict_seq: u64,
    send: Option<Box<Outstanding>>,
    timer: Option<TimerKey>,
    /// Private data of the last RTU/DREP, re-sent on duplicates.
    saved_pdata: Option<Box<[u8]>>,
    /// LISTEN: number of `ib_cm_insert_listen` users.
    listen_shares: u32,
    /// SIDR responder: key in the duplicate table.
    sidr_key: Option<(Gid, u32)>,
}

impl IdRec {
    fn new(user: u64) -> IdRec {
        IdRec {
            user,
            state: State::Idle,
            lap_state: LapState::Uninit,
            service_id: 0,
            remote_id: 0,
            tid: 0,
            remote_ca_guid: 0,
            remote_qpn: 0,
            local_qpn: 0,
            sq_psn: 0,
            rq_psn: 0,
            qp_type: 0,
            initiator_depth: 0,
            responder_resources: 0,
            retry_count: 0,
            rnr_retry_count: 0,
            max_cm_retries: 0,
            target_ack_delay: 0,
            path_mtu: 0,
            pkey: 0,
            timeout_ms: 0,
            av: Av::default(),
            alt_av: None,
            dlid_datapath: 0,
            has_tw: false,
            in_remote_id: false,
            in_remote_qp: false,
            half_open: false,
            half_open_src: Gid::ZERO,
            evict_seq: 0,
            send: None,
            timer: None,
            saved_pdata: None,
            listen_shares: 0,
            sidr_key: None,
        }
    }
}

/// `cm_convert_to_ms`: an IBA time exponent to milliseconds (approximate,
/// as the kernel computes it).
pub fn convert_to_ms(t: u8) -> u64 {
    1u64 << (t.min(31) as u32).saturating_sub(8)
}

/// `cm_ack_timeout`: about 2 × packet life time + ACK delay, as a 5-bit
/// exponent.
pub fn ack_timeout(ack_delay: u8, packet_life_time: u8) -> u8 {
    let a = packet_life_time as u32 + 1;
    let d = ack_delay as u32;
    let r = if a >= d {
        a + (d + 1 >= a) as u32
    } else {
        d + (a + 1 >= d) as u32
    };
    r.min(31) as u8
}

/// Transport service type bits of a REQ for a QP type.
fn req_transport(qp_type: u32) -> (u8, u8) {
    match qp_type {
        qp_type::UC => (1, 0),
        qp_type::XRC_INI => (3, 1),
        _ => (0, 0),
    }
}

/// QP type from a REQ's transport fields (`cm_req_get_qp_type`).
fn req_qp_type(r: &Req) -> u32 {
    match (r.transport_service_type, r.extended_transport_type) {
        (0, _) => qp_type::RC,
        (1, _) => qp_type::UC,
        (3, 1) => qp_type::XRC_TGT,
        _ => 0,
    }
}

/// States in which a passive connection is half-open.
fn is_half_open_state(s: State) -> bool {
    matches!(
        s,
        State::ReqRcvd | State::MraReqSent | State::RepSent | State::MraRepRcvd
    )
}

pub struct Engine {
    cfg: EngineConfig,
    shared: Arc<Shared>,
    ids: IdSlab<IdRec>,
    timers: TimerWheel<TimerRef>,
    /// (remote CA GUID, remote comm ID) → local ID.
    remote_ids: ids::FastMap<(u64, u32), u32>,
    /// (requester GID, request ID) → local ID, for SIDR duplicates.
    sidr_remote: ids::FastMap<(Gid, u32), u32>,
    /// MADs to send; `tx_head` of them were already polled.
    transmits: Vec<Transmit>,
    tx_head: usize,
    events: VecDeque<Event>,
    changes: VecDeque<Change>,
    foreign: VecDeque<Foreign>,
    counters: Counters,
    half_open: u32,
    admission: admission::Admission,
    notices: VecDeque<Notice>,
    rng: u64,
}

/// Something the engine did on its own that an operator should be able to
/// see in the log (the runtime logs each; counted in [`Counters`] too).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Notice {
    /// A received MAD's length field exceeded its area and was clamped.
    Clamped { field: &'static str, value: u8 },
    /// A REP-waiting half-open connection was evicted to admit a newer REQ
    /// (`per_source`: the source was at its quota; else the table was full).
    Evicted {
        local_id: u32,
        source: Gid,
        per_source: bool,
    },
    /// A REQ from `source` whose path names `requester` was rejected.
    OffPathReq { source: Gid, requester: Gid },
    /// A stale connection was found (REJ(STALE_CONN) sent) but the old id
    /// was no longer established (`None`: already destroyed), so it got no
    /// DREQ (`ib_send_cm_dreq` fails; the kernel ignores that there).
    StaleNoDreq { local_id: u32, state: Option<State> },
}

impl std::fmt::Display for Notice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Notice::Clamped { field, value } => write!(
                f,
                "{field} {value} exceeds its area: clamped and delivered (counter rx_clamped)"
            ),
            Notice::Evicted {
                local_id,
                source,
                per_source,
            } => write!(
                f,
                "half-open connection {local_id:#010x} from {source} evicted: {} \
                 (IB_CM_REP_ERROR to its consumer; counter half_open_evicted)",
                if per_source {
                    "its source reached max_half_open_per_source"
                } else {
                    "the half-open table is full"
                }
            ),
            Notice::OffPathReq { source, requester } => write!(
                f,
                "REQ from {source} names requester GID {requester}: rejected \
                 (INVALID_GID) instead of sending REPs to another host (counter rx_off_path)"
            ),
            Notice::StaleNoDreq { local_id, state } => match state {
                Some(s) => write!(
                    f,
                    "stale connection {local_id:#010x} is in state {s:?}, not established: \
                     no DREQ sent (REJ(STALE_CONN) went to the peer)"
                ),
                None => write!(
                    f,
                    "stale connection {local_id:#010x} was already destroyed: no DREQ sent \
                     (REJ(STALE_CONN) went to the peer)"
                ),
            },
        }
    }
}

/// Notices kept when nobody polls them (the simulation, tools).
const MAX_NOTICES: usize = 256;

impl Engine {
    pub fn new(cfg: EngineConfig, shared: Arc<Shared>) -> Engine {
        let ids = IdSlab::new(shared.codec, cfg.shard, shared.shard_bits, cfg.max_ids);
        let rng = ids::splitmix64(cfg.seed ^ cfg.node_guid);
        Engine {
            cfg,
            shared,
            ids,
            timers: TimerWheel::new(),
            remote_ids: ids::FastMap::with_hasher(ids::FastState::new(rng)),
            sidr_remote: ids::FastMap::with_hasher(ids::FastState::new(rng ^ 1)),
            transmits: Vec::new(),
            tx_head: 0,
            events: VecDeque::new(),
            changes: VecDeque::new(),
            foreign: VecDeque::new(),
            counters: Counters::default(),
            half_open: 0,
            admission: admission::Admission::new(rng ^ 2),
            notices: VecDeque::new(),
            rng,
        }
    }

    /// A single-shard engine with its own shared state (tests, tools).
    pub fn standalone(cfg: EngineConfig, seed: u64) -> Engine {
        Engine::new(cfg, Arc::new(Shared::new(seed, 0)))
    }

    pub fn config(&self) -> &EngineConfig {
        &self.cfg
    }

    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Replaces the device's port table (GIDs, P_Keys, LIDs changed on a
    /// real device). Existing connections keep their address vectors.
    pub fn set_ports(&mut self, ports: Vec<PortInfo>) {
        self.cfg.ports = ports;
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Number of live ids in this shard.
    pub fn id_count(&self) -> usize {
        self.ids.len()
    }

    /// Number of pending timers.
    pub fn timer_count(&self) -> usize {
        self.timers.len()
    }

    /// Entries in the duplicate tables (for leak checks).
    pub fn table_sizes(&self) -> (usize, usize) {
        (self.remote_ids.len(), self.sidr_remote.len())
    }

    pub fn half_open(&self) -> u32 {
        self.half_open
    }

    /// Sources with half-open connections, and eviction-queue entries held
    /// (live and stale): both must stay bounded under a flood.
    pub fn admission_sizes(&self) -> (usize, usize) {
        (self.admission.sources(), self.admission.queued())
    }

    /// Half-open connections counted against `source`.
    pub fn half_open_from(&self, source: &Gid) -> u32 {
        self.admission.source_count(source)
    }

    /// The next thing the engine did on its own that deserves a log line.
    pub fn poll_notice(&mut self) -> Option<Notice> {
        self.notices.pop_front()
    }

    fn notice(&mut self, n: Notice) {
        if self.notices.len() < MAX_NOTICES {
            self.notices.push_back(n);
        }
    }

    // ---------------------------------------------------------------- outputs

    pub fn poll_transmit(&mut self) -> Option<Transmit> {
        let t = self.transmits.get(self.tx_head).cloned();
        if t.is_some() {
            self.tx_head += 1;
        }
        if self.tx_head == self.transmits.len() {
            self.transmits.clear();
            self.tx_head = 0;
        }
        t
    }

    /// Moves every pending MAD to the end of `out` (in order), without
    /// copying them one by one.
    /// Whether `poll_transmit`/`take_transmits` would return anything.
    pub fn has_transmits(&self) -> bool {
        self.transmits.len() > self.tx_head
    }

    pub fn take_transmits(&mut self, out: &mut Vec<Transmit>) {
        if self.tx_head == 0 {
            out.append(&mut self.transmits);
        } else {
            out.extend(self.transmits.drain(self.tx_head..));
            self.transmits.clear();
            self.tx_head = 0;
        }
    }

    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    pub fn poll_change(&mut self) -> Option<Change> {
        self.changes.pop_front()
    }

    pub fn poll_foreign(&mut self) -> Option<Foreign> {
        self.foreign.pop_front()
    }

    /// The earliest time at which `handle_timeout` has work.
    pub fn poll_timeout(&self) -> Option<Time> {
        self.timers.next_deadline().map(Time::from_millis)
    }

    /// Public fields of an id.
    pub fn info(&self, id: Handle) -> Option<Change> {
        let r = self.ids.get(id.0 as u32)?;
        Some(Change {
            id,
            user: r.user,
            state: r.state,
            lap_state: r.lap_state,
            remote_id: r.remote_id,
            service_id: r.service_id,
        })
    }

    pub fn state(&self, id: Handle) -> Option<State> {
        self.ids.get(id.0 as u32).map(|r| r.state)
    }

    /// All live ids (for shutdown and leak checks).
    pub fn handles(&self) -> Vec<Handle> {
        self.ids
            .ids()
            .into_iter()
            .map(|i| Handle(i as u64))
            .collect()
    }

    // ---------------------------------------------------------------- helpers

    fn next_rand(&mut self) -> u64 {
        self.rng = ids::splitmix64(self.rng);
        self.rng
    }

    fn new_tid(&self, local_id: u32) -> u64 {
        // As the kernel: agent hi_tid, then the comm ID's storage bytes read
        // as a host (little-endian) integer.
        (self.cfg.hi_tid as u64) << 32 | local_id.swap_bytes() as u64
    }

    fn port(&self, port_num: u8) -> Option<&PortInfo> {
        self.cfg.ports.iter().find(|p| p.port_num == port_num)
    }

    fn pkey_value(&self, port_num: u8, index: u16) -> u16 {
        self.port(port_num)
            .and_then(|p| p.pkeys.get(index as usize).copied())
            .unwrap_or(0xffff)
    }

    /// Index of `pkey` in the port's table (full members first, as the
    /// kernel's cached lookup).
    fn pkey_index(&self, port_num: u8, pkey: u16) -> Option<u16> {
        let p = self.port(port_num)?;
        p.pkeys
            .iter()
            .position(|&k| k == pkey)
            .or_else(|| p.pkeys.iter().position(|&k| k & 0x7fff == pkey & 0x7fff))
            .map(|i| i as u16)
    }

    /// (port, GID index) of a local GID of the given record type.
    fn find_gid(&self, gid: &Gid, rec_type: PathRecType) -> Option<(u8, u16)> {
        let want = match rec_type {
            PathRecType::RoceV1 => Some(GidType::RoceV1),
            PathRecType::RoceV2 => Some(GidType::RoceV2),
            _ => None,
        };
        for p in &self.cfg.ports {
            for (i, e) in p.gids.iter().enumerate() {
                if e.gid == *gid && want.is_none_or(|t| t == e.gid_type) {
                    return Some((p.port_num, i as u16));
                }
            }
        }
        None
    }

    fn gid_at(&self, port_num: u8, index: u16) -> Option<GidEntry> {
        self.port(port_num)?.gids.get(index as usize).copied()
    }

    fn dest_of(&self, av: &Av) -> MadDest {
        MadDest {
            port: av.port,
            dgid: av.ah.dgid,
            sgid: av.sgid,
            dlid: av.ah.dlid as u16,
            sl: av.ah.sl,
            pkey: self.pkey_value(av.port, av.pkey_index),
            pkey_index: av.pkey_index,
            hop_limit: av.ah.hop_limit,
            traffic_class: av.ah.traffic_class,
            flow_label: av.ah.flow_label,
            has_grh: av.ah.has_grh,
            dest_qp: 1,
        }
    }

    /// Reply address for a received MAD (an AH built from the WC/GRH).
    fn reply_dest(src: &MadSource) -> MadDest {
        MadDest {
            port: src.port,
            dgid: src.sgid,
            sgid: src.dgid,
            dlid: src.slid,
            sl: src.sl,
            pkey: src.pkey,
            pkey_index: 0,
            hop_limit: if src.has_grh { 0xff } else { 0 },
            traffic_class: src.traffic_class,
            flow_label: src.flow_label,
            has_grh: src.has_grh,
            dest_qp: src.src_qp.max(1),
        }
    }

    fn push_mad(&mut self, dest: MadDest, mad: [u8; 256]) {
        self.counters.tx[counters::attr_index(peek::attr_id_of(&mad))] += 1;
        if let Some(reason) = peek::rej_reason(&mad) {
            self.counters.rej_tx[Counters::reason_index(reason as u32)] += 1;
        }
        self.transmits.push(Transmit { dest, mad });
    }

    fn push_event(&mut self, ev: Event) {
        self.counters.events += 1;
        self.events.push_back(ev);
    }

    fn event(&mut self, id: u32, kind: EventType, param: EventParam, mad: Option<&[u8]>) {
        let Some(r) = self.ids.get(id) else { return };
        let ev = Event {
            id: Handle(id as u64),
            user: r.user,
            kind,
            param,
            local_id: id,
            mad: mad.map(|m| Box::new(m[..256].try_into().unwrap())),
        };
        self.push_event(ev);
    }

    /// Records the public fields of `id` for the runtime.
    fn changed(&mut self, id: u32) {
        if let Some(r) = self.ids.get(id) {
            self.changes.push_back(Change {
                id: Handle(id as u64),
                user: r.user,
                state: r.state,
                lap_state: r.lap_state,
                remote_id: r.remote_id,
                service_id: r.service_id,
            });
        }
    }

    fn set_state(&mut self, id: u32, s: State) {
        if let Some(r) = self.ids.get_mut(id) {
            let was = is_half_open_state(r.state) && r.half_open;
            r.state = s;
            if was && !is_half_open_state(s) {
                self.leave_half_open(id);
            }
        }
        self.changed(id);
    }

    /// `id` stops counting as half-open (it left the half-open states or
    /// is going away).
    fn leave_half_open(&mut self, id: u32) {
        let Some(r) = self.ids.get_mut(id) else {
            return;
        };
        if !r.half_open {
            return;
        }
        r.half_open = false;
        r.evict_seq = 0;
        let src = r.half_open_src;
        self.half_open -= 1;
        self.admission.leave(&src);
    }

    /// Whether an eviction-queue entry still stands for a REP-waiting id.
    fn evictable(ids: &IdSlab<IdRec>, e: admission::Entry) -> bool {
        ids.get(e.id).is_some_and(|r| {
            r.half_open
                && r.evict_seq == e.seq
                && matches!(r.state, State::RepSent | State::MraRepRcvd)
        })
    }

    /// Makes room for one more half-open connection from `source`
    /// (`admission` module docs). False: nothing could be evicted.
    fn make_half_open_room(&mut self, source: &Gid) -> bool {
        let per_source = self.cfg.max_half_open_per_source;
        if per_source > 0 && self.admission.source_count(source) >= per_source {
            let ids = &self.ids;
            let Some(e) = self
                .admission
                .oldest(Some(source), |e| Self::evictable(ids, e))
            else {
                return false;
            };
            self.evict(e.id, true);
        }
        let cap = self.cfg.max_half_open;
        if cap > 0 && self.half_open >= cap {
            let ids = &self.ids;
            let Some(e) = self.admission.oldest(None, |e| Self::evictable(ids, e)) else {
                return false;
            };
            self.evict(e.id, false);
        }
        true
    }

    /// Ends a REP-waiting half-open connection early, as if its REP had
    /// timed out (`IB_CM_REP_ERROR`, no MAD).
    fn evict(&mut self, id: u32, per_source: bool) {
        let Some(r) = self.ids.get(id) else { return };
        let source = r.half_open_src;
        self.cancel_send(id);
        self.reset_to_idle(id);
        self.counters.half_open_evicted += 1;
        self.admission.evicted += 1;
        self.notice(Notice::Evicted {
            local_id: id,
            source,
            per_source,
        });
        let status = EventParam::SendStatus(WC_RESP_TIMEOUT_ERR);
        self.event(id, EventType::RepError, status, None);
    }

    /// A half-open connection sent its REP: from now on it may be evicted.
    fn queue_evictable(&mut self, id: u32) {
        let Some(r) = self.ids.get(id) else { return };
        if !r.half_open {
            return;
        }
        let src = r.half_open_src;
        let seq = self.admission.queue(&src, id);
        if let Some(r) = self.ids.get_mut(id) {
            r.evict_seq = seq;
        }
        let ids = &self.ids;
        self.admission
            .compact(self.half_open, |e| Self::evictable(ids, e));
    }

    fn cancel_timer(&mut self, id: u32) {
        if let Some(r) = self.ids.get_mut(id)
            && let Some(k) = r.timer.take()
        {
            self.timers.cancel(k);
        }
    }

    fn arm_timer(&mut self, now: Time, id: u32, ms: u64, kind: TimerKind) {
        self.cancel_timer(id);
        let deadline = now.as_millis_ceil().saturating_add(ms);
        let k = self.timers.insert(deadline, TimerRef { id, kind });
        if let Some(r) = self.ids.get_mut(id) {
            r.timer = Some(k);
        }
    }

    /// Cancels the outstanding request (and its timer).
    fn cancel_send(&mut self, id: u32) {
        let had = self.ids.get_mut(id).and_then(|r| r.send.take()).is_some();
        if had {
            self.cancel_timer(id);
        }
    }

    /// Sends a request with retransmission (REQ, REP, DREQ, SIDR_REQ).
    fn send_request(&mut self, now: Time, id: u32, mad: [u8; 256], timeout_ms: u64, retries: u8) {
        let Some(r) = self.ids.get(id) else { return };
        let dest = self.dest_of(&r.av);
        let state_at_send = r.state;
        if let Some(r) = self.ids.get_mut(id) {
            r.send = Some(Box::new(Outstanding {
                mad,
                dest,
                retries_left: retries,
                timeout_ms,
                state_at_send,
            }));
        }
        self.arm_timer(now, id, timeout_ms, TimerKind::Retransmit);
        self.push_mad(dest, mad);
    }

    /// Sends a one-shot MAD on the id's address vector.
    fn send_once(&mut self, id: u32, mad: [u8; 256]) {
        let Some(r) = self.ids.get(id) else { return };
        let dest = self.dest_of(&r.av);
        self.push_mad(dest, mad);
    }

    fn unregister_remote(&mut self, id: u32) {
        let Some(r) = self.ids.get_mut(id) else {
            return;
        };
        let key = (r.remote_ca_guid, r.remote_id);
        let qp = (r.remote_ca_guid, r.remote_qpn);
        let (in_id, in_qp) = (r.in_remote_id, r.in_remote_qp);
        r.in_remote_id = false;
        r.in_remote_qp = false;
        if in_id && self.remote_ids.get(&key) == Some(&id) {
            self.remote_ids.remove(&key);
        }
        if in_qp {
            self.shared.qp_remove(qp.0, qp.1, self.cfg.shard, id);
        }
    }

    /// `cm_reset_to_idle`.
    fn reset_to_idle(&mut self, id: u32) {
        self.unregister_remote(id);
        if let Some(r) = self.ids.get_mut(id) {
            r.has_tw = false;
        }
        self.set_state(id, State::Idle);
    }

    /// `cm_enter_timewait`: only once per connection.
    fn enter_timewait(&mut self, now: Time, id: u32) {
        let Some(r) = self.ids.get(id) else { return };
        if !r.has_tw {
            return;
        }
        let ms = convert_to_ms(r.av.timeout);
        self.unregister_remote(id);
        if let Some(r) = self.ids.get_mut(id) {
            r.has_tw = false;
        }
        self.set_state(id, State::Timewait);
        self.arm_timer(now, id, ms, TimerKind::Timewait);
    }

    fn rec(&self, h: Handle) -> Result<&IdRec, Errno> {
        self.ids.get(h.0 as u32).ok_or(Errno::EINVAL)
    }

    fn check_len(data: &[u8], max: usize) -> ApiResult {
        if data.len() > max {
            Err(Errno::EINVAL)
        } else {
            Ok(())
        }
    }

    // ------------------------------------------------------------------- API

    /// `ib_create_cm_id`: a new id in IDLE, visible at once.
    pub fn create_id(&mut self, user: u64) -> ApiResult<Handle> {
        let id = self
            .ids
            .insert_with(|_| IdRec::new(user))
            .ok_or(Errno::EBUSY)?;
        self.counters.ids_created += 1;
        Ok(Handle(id as u64))
    }

    /// Changes the user token of an id (the runtime sets it once the C
    /// object exists).
    pub fn set_user(&mut self, h: Handle, user: u64) -> ApiResult {
        let r = self.ids.get_mut(h.0 as u32).ok_or(Errno::EINVAL)?;
        r.user = user;
        Ok(())
    }

    fn check_service_id(&self, service_id: u64) -> ApiResult<u64> {
        if service_id & SERVICE_ID_AGN_MASK == ASSIGN_SERVICE_ID && service_id != ASSIGN_SERVICE_ID
        {
            return Err(Errno::EINVAL);
        }
        Ok(if service_id == ASSIGN_SERVICE_ID {
            self.shared.assign_service_id()
        } else {
            service_id
        })
    }

    /// `ib_cm_listen`.
    pub fn listen(&mut self, h: Handle, service_id: u64) -> ApiResult {
        self.listen_keyed(h, service_id, None)
    }

    /// Makes an IDLE id a listener. With a `key` it becomes an
    /// `ib_cm_insert_listen` listener that later callers with the same key
    /// share (see [`Engine::share_listener`]).
    pub fn listen_keyed(&mut self, h: Handle, service_id: u64, key: Option<u64>) -> ApiResult {
        if self.rec(h)?.state != State::Idle {
            return Err(Errno::EINVAL);
        }
        let service_id = self.check_service_id(service_id)?;
        self.listen_checked(h, service_id, key)
    }

    /// `listen_keyed` with a service ID already checked (and assigned):
    /// an assigned ID must not go through `check_service_id` again (the
    /// first one equals `IB_CM_ASSIGN_SERVICE_ID`, later ones have the
    /// reserved 0x02 top byte).
    fn listen_checked(&mut self, h: Handle, service_id: u64, key: Option<u64>) -> ApiResult {
        let id = h.0 as u32;
        let user = self.rec(h)?.user;
        let entry = ListenEntry {
            shard: self.cfg.shard,
            local_id: id,
            user,
            share_key: key,
        };
        self.shared.listen_insert(service_id, entry).map_err(|_| {
            if key.is_some() {
                Errno::EINVAL
            } else {
                Errno::EBUSY
            }
        })?;
        let r = self.ids.get_mut(id).unwrap();
        r.service_id = service_id;
        r.listen_shares = 1;
        self.set_state(id, State::Listen);
        Ok(())
    }

    /// Adds one more user to a shared listener of this shard.
    pub fn share_listener(&mut self, h: Handle) -> ApiResult {
        let r = self.ids.get_mut(h.0 as u32).ok_or(Errno::EINVAL)?;
        if r.state != State::Listen {
            return Err(Errno::EINVAL);
        }
        r.listen_shares += 1;
        Ok(())
    }

    /// `ib_cm_insert_listen` within one shard: returns the listener and
    /// whether it already existed (then its share count was raised). An
    /// existing listener with another key, or owned by another shard (the
    /// runtime routes the call to the owner), gives `-EINVAL`.
    pub fn insert_listen(
        &mut self,
        user: u64,
        service_id: u64,
        key: u64,
    ) -> ApiResult<(Handle, bool)> {
        let service_id = self.check_service_id(service_id)?;
        if let Some(e) = self.shared.listen_lookup(service_id) {
            if e.share_key != Some(key) || e.shard != self.cfg.shard {
                return Err(Errno::EINVAL);
            }
            self.share_listener(Handle(e.local_id as u64))?;
            return Ok((Handle(e.local_id as u64), true));
        }
        let h = self.create_id(user)?;
        if let Err(e) = self.listen_checked(h, service_id, Some(key)) {
            self.ids.remove(h.0 as u32);
            self.counters.ids_destroyed += 1;
            return Err(e);
        }
        Ok((h, false))
    }

    /// Address vector for a path (`cm_init_av_by_path`).
    fn av_from_path(&self, path: &PathRec, sgid_attr: Option<(u8, u16)>) -> ApiResult<Av> {
        let (port, gid_index) = match sgid_attr {
            Some((port, idx)) => {
                self.gid_at(port, idx).ok_or(Errno::EINVAL)?;
                (port, idx)
            }
            None => self
                .find_gid(&path.sgid, path.rec_type)
                .ok_or(Errno::EINVAL)?,
        };
        let pinfo = self.port(port).ok_or(Errno::EINVAL)?;
        let roce = pinfo.is_roce || path.rec_type.is_roce();
        let lmc_mask = (1u32 << pinfo.lmc) - 1;
        let pkey_index = self.pkey_index(port, path.pkey).ok_or(Errno::ENOENT)?;
        let sgid = self
            .gid_at(port, gid_index)
            .map(|e| e.gid)
            .unwrap_or(path.sgid);
        Ok(Av {
            port,
            pkey_index,
            timeout: path.packet_life_time.saturating_add(1).min(31),
            sgid,
            ah: AhAttr {
                port_num: port,
                sl: path.sl,
                static_rate: path.rate,
                has_grh: roce || path.hop_limit > 0,
                dgid: path.dgid,
                sgid_index: gid_index,
                flow_label: path.flow_label,
                hop_limit: path.hop_limit,
                traffic_class: path.traffic_class,
                dlid: if roce { 0 } else { path.dlid },
                src_path_bits: if roce {
                    0
                } else {
                    (path.slid & lmc_mask) as u8
                },
                dmac: path.dmac,
                rec_type: if roce && !path.rec_type.is_roce() {
                    PathRecType::RoceV2
                } else {
                    path.rec_type
                },
            },
        })
    }

    /// The path fields of a REQ (`cm_format_req` path part).
    fn req_path(&self, path: &PathRec, inbound: Option<&PathRec>) -> ReqPath {
        let local = path.hop_limit <= 1;
        ReqPath {
            local_lid: if local {
                path.slid as u16
            } else {
                inbound.map(|p| p.dlid as u16).unwrap_or(0xffff)
            },
            remote_lid: if local {
                if path.rec_type == PathRecType::Opa {
                    0
                } else {
                    path.dlid as u16
                }
            } else {
                0xffff
            },
            local_gid: path.sgid,
            remote_gid: path.dgid,
            flow_label: path.flow_label,
            packet_rate: path.rate,
            traffic_class: path.traffic_class,
            hop_limit: path.hop_limit,
            sl: path.sl,
            subnet_local: local,
            local_ack_timeout: ack_timeout(self.cfg.ack_delay, path.packet_life_time),
        }
    }

    /// `ib_send_cm_req`.
    pub fn send_req(&mut self, now: Time, h: Handle, p: &ReqParams) -> ApiResult {
        let id = h.0 as u32;
        if !matches!(p.qp_type, qp_type::RC | qp_type::UC | qp_type::XRC_INI) {
            return Err(Errno::EINVAL);
        }
        Self::check_len(&p.private_data, pdata::REQ)?;
        if let Some(alt) = &p.alternate_path
            && (alt.pkey != p.primary_path.pkey || alt.mtu != p.primary_path.mtu)
        {
            return Err(Errno::EINVAL);
        }
        let r = self.rec(h)?;
        if r.state != State::Idle || r.has_tw {
            return Err(Errno::EINVAL);
        }
        let av = self.av_from_path(&p.primary_path, p.sgid_attr)?;
        let alt_av = match &p.alternate_path {
            Some(alt) => Some(Box::new(self.av_from_path(alt, None)?)),
            None => None,
        };
        let (transport, ext) = req_transport(p.qp_type);
        let xrc = p.qp_type == qp_type::XRC_INI;
        let tid = self.new_tid(id);
        let mut req = Req {
            local_comm_id: id,
            vendor_id: p.ece.vendor_id & 0xff_ffff,
            service_id: p.service_id,
            local_ca_guid: self.cfg.node_guid,
            local_qpn: p.qp_num & 0xff_ffff,
            initiator_depth: p.initiator_depth,
            remote_cm_response_timeout: p.remote_cm_response_timeout & 0x1f,
            transport_service_type: transport,
            end_to_end_flow_control: p.flow_control != 0,
            starting_psn: p.starting_psn & 0xff_ffff,
            local_cm_response_timeout: p.local_cm_response_timeout & 0x1f,
            pkey: p.primary_path.pkey,
            path_mtu: p.primary_path.mtu,
            max_cm_retries: p.max_cm_retries & 0xf,
            extended_transport_type: ext,
            primary: self.req_path(&p.primary_path, p.primary_path_inbound.as_ref()),
            private_data: pdata_area(&p.private_data),
            ..Req::default()
        };
        if !xrc {
            req.responder_resources = p.responder_resources;
            req.retry_count = p.retry_count & 7;
            req.rnr_retry_count = p.rnr_retry_count & 7;
            req.srq = p.srq != 0;
        }
        if let Some(alt) = &p.alternate_path {
            req.alternate = self.req_path(alt, None);
        }
        let mad = CmMad::send(tid, p.ece.attr_mod, CmMsg::Req(req)).to_bytes();
        let timeout_ms = 2 * convert_to_ms(p.primary_path.packet_life_time)
            + convert_to_ms(p.remote_cm_response_timeout);
        let r = self.ids.get_mut(id).unwrap();
        r.service_id = p.service_id;
        r.tid = tid;
        r.av = av;
        r.alt_av = alt_av;
        r.local_qpn = p.qp_num & 0xff_ffff;
        r.qp_type = p.qp_type;
        r.rq_psn = p.starting_psn & 0xff_ffff;
        r.initiator_depth = p.initiator_depth;
        r.responder_resources = p.responder_resources;
        r.retry_count = p.retry_count & 7;
        r.rnr_retry_count = p.rnr_retry_count & 7;
        r.max_cm_retries = p.max_cm_retries & 0xf;
        r.path_mtu = p.primary_path.mtu;
        r.pkey = p.primary_path.pkey;
        r.timeout_ms = timeout_ms;
        r.dlid_datapath = p.primary_path_outbound.map(|o| o.dlid).unwrap_or(0);
        r.has_tw = true;
        r.remote_id = 0;
        let retries = r.max_cm_retries;
        self.set_state(id, State::ReqSent);
        self.send_request(now, id, mad, timeout_ms, retries);
        Ok(())
    }

    /// `ib_send_cm_rep`.
    pub fn send_rep(&mut self, now: Time, h: Handle, p: &RepParams) -> ApiResult {
        let id = h.0 as u32;
        Self::check_len(&p.private_data, pdata::REP)?;
        let r = self.rec(h)?;
        if !matches!(r.state, State::ReqRcvd | State::MraReqSent) {
            return Err(Errno::EINVAL);
        }
        let xrc_tgt = r.qp_type == qp_type::XRC_TGT;
        let mut rep = Rep {
            local_comm_id: id,
            remote_comm_id: r.remote_id,
            local_qkey: 0,
            local_qpn: 0,
            vendor_id: p.ece.vendor_id & 0xff_ffff,
            local_eecn: 0,
            starting_psn: p.starting_psn & 0xff_ffff,
            responder_resources: p.responder_resources,
            initiator_depth: 0,
            target_ack_delay: self.cfg.ack_delay & 0x1f,
            failover_accepted: p.failover_accepted & 3,
            end_to_end_flow_control: false,
            rnr_retry_count: p.rnr_retry_count & 7,
            srq: false,
            local_ca_guid: self.cfg.node_guid,
            private_data: pdata_area(&p.private_data),
        };
        if xrc_tgt {
            rep.srq = true;
            rep.local_eecn = p.qp_num & 0xff_ffff;
        } else {
            rep.initiator_depth = p.initiator_depth;
            rep.end_to_end_flow_control = p.flow_control != 0;
            rep.srq = p.srq != 0;
            rep.local_qpn = p.qp_num & 0xff_ffff;
        }
        let mad = CmMad::send(r.tid, p.ece.attr_mod, CmMsg::Rep(rep)).to_bytes();
        let (timeout, retries) = (r.timeout_ms, r.max_cm_retries);
        let r = self.ids.get_mut(id).unwrap();
        r.initiator_depth = p.initiator_depth;
        r.responder_resources = p.responder_resources;
        r.rq_psn = p.starting_psn & 0xff_ffff;
        r.local_qpn = p.qp_num & 0xff_ffff;
        self.set_state(id, State::RepSent);
        self.send_request(now, id, mad, timeout, retries);
        self.queue_evictable(id);
        Ok(())
    }

    /// `ib_send_cm_rtu`.
    pub fn send_rtu(&mut self, h: Handle, private_data: &[u8]) -> ApiResult {
        let id = h.0 as u32;
        Self::check_len(private_data, pdata::RTU)?;
        let r = self.rec(h)?;
        if !matches!(r.state, State::RepRcvd | State::MraRepSent) {
            return Err(Errno::EINVAL);
        }
        let rtu = Rtu {
            local_comm_id: id,
            remote_comm_id: r.remote_id,
            private_data: pdata_area(private_data),
        };
        let mad = CmMad::send(r.tid, 0, CmMsg::Rtu(rtu)).to_bytes();
        let r = self.ids.get_mut(id).unwrap();
        r.saved_pdata = (!private_data.is_empty()).then(|| private_data.into());
        self.set_state(id, State::Established);
        self.send_once(id, mad);
        Ok(())
    }

    fn dreq_mad(&self, id: u32, r: &IdRec, private_data: &[u8]) -> [u8; 256] {
        let dreq = Dreq {
            local_comm_id: id,
            remote_comm_id: r.remote_id,
            remote_qpn: r.remote_qpn,
            private_data: pdata_area(private_data),
        };
        CmMad::send(self.new_tid(id), 0, CmMsg::Dreq(dreq)).to_bytes()
    }

    /// `ib_send_cm_dreq`.
    pub fn send_dreq(&mut self, now: Time, h: Handle, private_data: &[u8]) -> ApiResult {
        let id = h.0 as u32;
        Self::check_len(private_data, pdata::DREQ)?;
        let r = self.rec(h)?;
        if r.state != State::Established {
            return Err(Errno::EINVAL);
        }
        let mad = self.dreq_mad(id, r, private_data);
        let (timeout, retries) = (r.timeout_ms, r.max_cm_retries);
        // As the kernel: the DREQ's new TID is not remembered; a DREP
        // re-sent from timewait carries the id's REQ (or received DREQ) TID.
        let r = self.ids.get_mut(id).unwrap();
        if matches!(r.lap_state, LapState::Sent | LapState::MraRcvd) {
            r.lap_state = LapState::Idle;
        }
        self.cancel_send(id);
        self.set_state(id, State::DreqSent);
        self.send_request(now, id, mad, timeout, retries);
        Ok(())
    }

    fn drep_mad(id: u32, r: &IdRec, private_data: &[u8]) -> [u8; 256] {
        let drep = Drep {
            local_comm_id: id,
            remote_comm_id: r.remote_id,
            private_data: pdata_area(private_data),
        };
        CmMad::send(r.tid, 0, CmMsg::Drep(drep)).to_bytes()
    }

    /// `ib_send_cm_drep`: always enters timewait when the state is right.
    pub fn send_drep(&mut self, now: Time, h: Handle, private_data: &[u8]) -> ApiResult {
        let id = h.0 as u32;
        Self::check_len(private_data, pdata::DREP)?;
        let r = self.rec(h)?;
        if r.state != State::DreqRcvd {
            return Err(Errno::EINVAL);
        }
        let mad = Self::drep_mad(id, r, private_data);
        let r = self.ids.get_mut(id).unwrap();
        r.saved_pdata = (!private_data.is_empty()).then(|| private_data.into());
        self.enter_timewait(now, id);
        self.send_once(id, mad);
        Ok(())
    }

    /// The REJ an id sends (`cm_format_rej`), from its current state.
    fn rej_mad(
        &self,
        id: u32,
        r: &IdRec,
        reason: u16,
        ari: &[u8],
        private_data: &[u8],
    ) -> [u8; 256] {
        let (local, code) = match r.state {
            State::ReqRcvd => (0, MsgCode::Req),
            State::MraReqSent => (id, MsgCode::Req),
            State::RepRcvd | State::MraRepSent => (id, MsgCode::Rep),
            _ => (id, MsgCode::Other),
        };
        let rej = Rej {
            local_comm_id: local,
            remote_comm_id: r.remote_id,
            message_rejected: code,
            ari_length: ari.len() as u8,
            reason,
            ari: pdata_area(ari),
            private_data: pdata_area(private_data),
        };
        CmMad::send(r.tid, 0, CmMsg::Rej(rej)).to_bytes()
    }

    /// `ib_send_cm_rej`.
    pub fn send_rej(
        &mut self,
        now: Time,
        h: Handle,
        reason: u32,
        ari: &[u8],
        private_data: &[u8],
    ) -> ApiResult {
        let id = h.0 as u32;
        Self::check_len(private_data, pdata::REJ)?;
        Self::check_len(ari, pdata::REJ_ARI)?;
        let r = self.rec(h)?;
        let state = r.state;
        let mad = self.rej_mad(id, r, reason as u16, ari, private_data);
        match state {
            State::ReqSent
            | State::MraReqRcvd
            | State::ReqRcvd
            | State::MraReqSent
            | State::RepRcvd
            | State::MraRepSent => {
                // ibcm: the kernel leaves an outstanding REQ retransmitting
                // after its own REJ; we stop it, so the peer never sees a
                // REQ for a connection we rejected.
                self.cancel_send(id);
                self.reset_to_idle(id);
            }
            State::RepSent | State::MraRepRcvd => {
                self.cancel_send(id);
                self.enter_timewait(now, id);
            }
            _ => return Err(Errno::EINVAL),
        }
        self.send_once(id, mad);
        Ok(())
    }

    /// `ib_prepare_cm_mra`: a pure state change; an MRA goes out only when
    /// a duplicate arrives.
    pub fn prepare_mra(&mut self, h: Handle) -> ApiResult {
        let id = h.0 as u32;
        let r = self.rec(h)?;
        match (r.state, r.lap_state) {
            (State::ReqRcvd, _) => self.set_state(id, State::MraReqSent),
            (State::RepRcvd, _) => self.set_state(id, State::MraRepSent),
            (State::Established, LapState::Rcvd) => {
                self.ids.get_mut(id).unwrap().lap_state = LapState::MraSent;
                self.changed(id);
            }
            _ => return Err(Errno::EINVAL),
        }
        self.ids.get_mut(id).unwrap().saved_pdata = None;
        Ok(())
    }

    /// `ib_cm_notify`.
    pub fn notify(&mut self, h: Handle, event: u32) -> ApiResult {
        let id = h.0 as u32;
        let r = self.rec(h)?;
        match event {
            ib_event::COMM_EST => match r.state {
                State::RepSent | State::MraRepRcvd => {
                    self.cancel_send(id);
                    self.set_state(id, State::Established);
                    self.event(id, EventType::UserEstablished, EventParam::None, None);
                    Ok(())
                }
                State::Established => Err(Errno::EISCONN),
                _ => Err(Errno::EINVAL),
            },
            ib_event::PATH_MIG => {
                if r.state != State::Established
                    || !matches!(r.lap_state, LapState::Uninit | LapState::Idle)
                {
                    return Err(Errno::EINVAL);
                }
                let r = self.ids.get_mut(id).unwrap();
                r.lap_state = LapState::Idle;
                if let Some(alt) = &r.alt_av {
                    r.av = **alt;
                }
                self.changed(id);
                Ok(())
            }
            _ => Err(Errno::EINVAL),
        }
    }

    /// `ib_send_cm_sidr_req`.
    pub fn send_sidr_req(&mut self, now: Time, h: Handle, p: &SidrReqParams) -> ApiResult {
        let id = h.0 as u32;
        Self::check_len(&p.private_data, pdata::SIDR_REQ)?;
        self.rec(h)?;
        let av = self.av_from_path(&p.path, p.sgid_attr)?;
        // As the kernel: these are written before the state check.
        let r = self.ids.get_mut(id).unwrap();
        // ibcm: except on a listener, whose service ID keys the listen
        // table (destroy would remove the wrong entry and leak it).
        if r.state == State::Listen {
            return Err(Errno::EINVAL);
        }
        r.service_id = p.service_id;
        r.timeout_ms = p.timeout_ms;
        r.max_cm_retries = p.max_cm_retries;
        r.av = av;
        if r.state != State::Idle {
            return Err(Errno::EINVAL);
        }
        let tid = self.new_tid(id);
        let req = SidrReq {
            request_id: id,
            pkey: p.path.pkey,
            service_id: p.service_id,
            private_data: pdata_area(&p.private_data),
        };
        let mad = CmMad::send(tid, 0, CmMsg::SidrReq(req)).to_bytes();
        self.ids.get_mut(id).unwrap().tid = tid;
        self.set_state(id, State::SidrReqSent);
        self.send_request(now, id, mad, p.timeout_ms, p.max_cm_retries);
        Ok(())
    }

    fn sidr_rep_mad(r: &IdRec, p: &SidrRepParams) -> [u8; 256] {
        let rep = SidrRep {
            request_id: r.remote_id,
            status: p.status as u8,
            info_length: p.info.len() as u8,
            // As the kernel: only VendorID bits 15..0 reach the wire.
            vendor_id: p.ece.vendor_id & 0xffff,
            qpn: p.qp_num & 0xff_ffff,
            service_id: r.service_id,
            qkey: p.qkey,
            info: pdata_area(&p.info),
            private_data: pdata_area(&p.private_data),
        };
        CmMad::send(r.tid, p.ece.attr_mod, CmMsg::SidrRep(rep)).to_bytes()
    }

    fn leave_sidr_table(&mut self, id: u32) {
        if let Some(key) = self.ids.get_mut(id).and_then(|r| r.sidr_key.take())
            && self.sidr_remote.get(&key) == Some(&id)
        {
            self.sidr_remote.remove(&key);
        }
    }

    /// `ib_send_cm_sidr_rep`.
    pub fn send_sidr_rep(&mut self, h: Handle, p: &SidrRepParams) -> ApiResult {
        let id = h.0 as u32;
        Self::check_len(&p.info, pdata::SIDR_REP_INFO)?;
        Self::check_len(&p.private_data, pdata::SIDR_REP)?;
        let r = self.rec(h)?;
        if r.state != State::SidrReqRcvd {
            return Err(Errno::EINVAL);
        }
        let mad = Self::sidr_rep_mad(r, p);
        self.leave_sidr_table(id);
        self.set_state(id, State::Idle);
        self.send_once(id, mad);
        Ok(())
    }

    /// `ib_cm_init_qp_attr`.
    pub fn init_qp_attr(&self, h: Handle, qp_state: u32) -> ApiResult<QpAttr> {
        let r = self.rec(h)?;
        qp::init_qp_attr(r, qp_state, self.cfg.flush_caps)
    }

    /// `ib_destroy_cm_id`: the protocol action of the id's state (REJ,
    /// DREQ, DREP, SIDR_REP), then the id is gone: no more events, timers
    /// or table entries. `err` is the callback's return value when the
    /// destroy comes from a handler returning non-zero (`-ENOMEM` from
    /// REQ_RECEIVED suppresses the REJ), else 0.
    ///
    /// Returns false when the id lives on: an unknown handle, or a shared
    /// listener (`ib_cm_insert_listen`) that other users still hold.
    pub fn destroy(&mut self, h: Handle, err: i32) -> bool {
        let id = h.0 as u32;
        let Some(r) = self.ids.get(id) else {
            return false;
        };
        let node_guid = self.cfg.node_guid;
        // The protocol action of the state (CM_RULES.md §destroy); the
        // id then goes away at once, so its passage through timewait or
        // IDLE is not observable and is skipped.
        let mad = match r.state {
            State::Listen => {
                let r = self.ids.get_mut(id).unwrap();
                r.listen_shares = r.listen_shares.saturating_sub(1);
                if r.listen_shares > 0 {
                    return false;
                }
                let service_id = r.service_id;
                self.shared.listen_remove(service_id, id);
                None
            }
            State::SidrReqRcvd => {
                let p = SidrRepParams {
                    status: sidr_status::REJECT as u32,
                    ..Default::default()
                };
                Some(Self::sidr_rep_mad(r, &p))
            }
            State::ReqSent | State::MraReqRcvd => {
                Some(self.rej_mad(id, r, rej_reason::TIMEOUT, &node_guid.to_be_bytes(), &[]))
            }
            State::ReqRcvd if err == -errno::ENOMEM => None,
            State::ReqRcvd
            | State::MraReqSent
            | State::RepRcvd
            | State::MraRepSent
            | State::RepSent
            | State::MraRepRcvd => {
                Some(self.rej_mad(id, r, rej_reason::CONSUMER_DEFINED, &[], &[]))
            }
            State::Established if r.qp_type != qp_type::XRC_TGT => Some(self.dreq_mad(id, r, &[])),
            State::DreqRcvd => Some(Self::drep_mad(id, r, &[])),
            State::Established
            | State::DreqSent
            | State::SidrReqSent
            | State::Timewait
            | State::Idle => None,
        };
        if let Some(mad) = mad {
            self.send_once(id, mad);
        }
        // Release everything the id holds.
        self.cancel_send(id);
        self.cancel_timer(id);
        self.unregister_remote(id);
        self.leave_sidr_table(id);
        if self.ids.get(id).is_some_and(|r| r.half_open) {
            self.leave_half_open(id);
        }
        self.ids.remove(id);
        self.counters.ids_destroyed += 1;
        // No event is delivered for a destroyed id, even one already queued.
        self.events.retain(|e| e.id != h);
        self.changes.retain(|c| c.id != h);
        true
    }

    // ----------------------------------------------------------------- timers

    /// Runs every timer due at `now`: retransmissions, request timeouts
    /// (`*_ERROR` events) and timewait exits.
    pub fn handle_timeout(&mut self, now: Time) {
        let now_ms = now.as_millis_floor();
        while let Some((key, t)) = self.timers.poll(now_ms) {
            let Some(r) = self.ids.get_mut(t.id) else {
                continue;
            };
            if r.timer != Some(key) {
                continue;
            }
            r.timer = None;
            match t.kind {
                TimerKind::Timewait => {
                    if r.state == State::Timewait {
                        self.set_state(t.id, State::Idle);
                        self.event(t.id, EventType::TimewaitExit, EventParam::None, None);
                    }
                }
                TimerKind::Retransmit => self.retransmit_or_fail(now, t.id),
            }
        }
    }

    fn retransmit_or_fail(&mut self, now: Time, id: u32) {
        let Some(r) = self.ids.get_mut(id) else {
            return;
        };
        let Some(send) = r.send.as_mut() else { return };
        if send.retries_left > 0 {
            send.retries_left -= 1;
            let (dest, mad, ms) = (send.dest, send.mad, send.timeout_ms);
            let a = counters::attr_index(peek::attr_id_of(&mad));
            self.counters.tx_retries[a] += 1;
            self.arm_timer(now, id, ms, TimerKind::Retransmit);
            self.push_mad(dest, mad);
            return;
        }
        // Retries exhausted (the MAD layer's IB_WC_RESP_TIMEOUT_ERR).
        let send = r.send.take().unwrap();
        let a = counters::attr_index(peek::attr_id_of(&send.mad));
        self.counters.timeouts[a] += 1;
        if r.state != send.state_at_send {
            return;
        }
        let status = EventParam::SendStatus(WC_RESP_TIMEOUT_ERR);
        match send.state_at_send {
            State::ReqSent | State::MraReqRcvd => {
                self.reset_to_idle(id);
                self.event(id, EventType::ReqError, status, None);
            }
            State::RepSent | State::MraRepRcvd => {
                self.reset_to_idle(id);
                self.event(id, EventType::RepError, status, None);
            }
            State::DreqSent => {
                self.enter_timewait(now, id);
                self.event(id, EventType::DreqError, status, None);
            }
            State::SidrReqSent => {
                self.set_state(id, State::Idle);
                self.event(id, EventType::SidrReqError, status, None);
            }
            _ => {}
        }
    }

    /// A pseudo-random 24-bit PSN (for tools that need one).
    pub fn random_psn(&mut self) -> u32 {
        (self.next_rand() & 0xff_ffff) as u32
    }
}
