//! The sans-IO CM protocol engine.
//!
//! One [`Engine`] is one shard of one device. It takes API calls
//! (`create_id`, `send_req`, ...), received MADs (`handle_mad`) and the
//! passage of time (`handle_timeout`), and produces MADs to send
//! (`poll_transmit`), consumer events (`poll_event`), public-field changes
//! (`poll_change`) and its next deadline (`poll_timeout`). It never touches
//! a socket, a thread or a clock, so tests drive it with a virtual clock.
//! [`Engine`]'s documentation lists its method groups and the order in
//! which a driver calls them.
//!
//! Behaviour follows the Linux kernel's `drivers/infiniband/core/cm.c`
//! (state rules, timeouts, duplicate and stale handling); see
//! `docs/ARCHITECTURE.md` and the rules in `docs/CM_RULES.md`. Deliberate
//! differences are marked "ibcm:" in comments (CM_RULES.md §differences).
//!
//! Files: this one holds the [`Engine`] and its outputs; `api.rs` the
//! consumer calls, `recv.rs` the received MADs, `timeouts.rs` timers and
//! retransmission, `record.rs` the per-id record and the tables kept in
//! step with it, `address.rs` ports, paths and MAD destinations,
//! `config.rs` the configuration; `admission.rs`, `ids.rs`, `timer.rs`,
//! `shared.rs`, `qp.rs` and `counters.rs` are the data structures and
//! pure functions they use.

mod address;
mod admission;
mod api;
mod config;
pub mod counters;
pub mod ids;
mod qp;
mod record;
mod recv;
pub mod shared;
mod timeouts;
pub mod timer;
pub mod types;

pub use api::Call;
pub use config::{EngineConfig, GidEntry, PortInfo};
pub use counters::{Counters, DropCause};
pub use recv::{Dropped, route};
pub use shared::{ListenEntry, RemoteQpEntry, Shared};
pub use timeouts::{ack_timeout, convert_to_ms};
pub use types::*;

use crate::wire::{
    CmMad, CmMsg, Drep, Dreq, Gid, MsgCode, Rej, Rep, Req, ReqPath, Rtu, SidrRep, SidrReq, attr,
    pdata, pdata_area, peek, rej_reason, sidr_status,
};
use ids::IdSlab;
use qp::{req_qp_type, req_transport};
pub(crate) use record::IdRec;
use record::Outstanding;
use std::collections::VecDeque;
use std::sync::Arc;
use timeouts::{TimerKind, TimerRef};
use timer::TimerWheel;

/// MRA service timeout the kernel always sends (`CM_MRA_SETTING`).
pub const MRA_SETTING: u8 = 24;

/// A public-field change of an id (`cm_id->state` and friends), for the
/// runtime to mirror into the C struct.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Change {
    pub id: Handle,
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

/// One shard of the connection manager of one device: its ids, their
/// timers and its duplicate tables. Sans-IO: every input carries `now`,
/// and everything the engine wants done comes out of a queue.
///
/// # Method groups
///
/// **Inputs** change the engine and queue outputs:
/// - a received MAD: [`handle_mad`](Self::handle_mad) (with several
///   shards, [`route`] says which shard's engine gets it);
/// - time: [`handle_timeout`](Self::handle_timeout), retransmissions,
///   request timeouts and timewait exits due at `now`;
/// - the consumer API, one method per kernel call:
///   [`create_id`](Self::create_id), [`listen`](Self::listen),
///   [`insert_listen`](Self::insert_listen), [`send_req`](Self::send_req),
///   [`send_rep`](Self::send_rep), [`send_rtu`](Self::send_rtu),
///   [`send_dreq`](Self::send_dreq), [`send_drep`](Self::send_drep),
///   [`send_rej`](Self::send_rej), [`prepare_mra`](Self::prepare_mra),
///   [`notify`](Self::notify), [`send_sidr_req`](Self::send_sidr_req),
///   [`send_sidr_rep`](Self::send_sidr_rep), [`destroy`](Self::destroy);
///   [`dreq_stale_local`](Self::dreq_stale_local) for a
///   [`Foreign::SendDreq`] another shard asked for;
///   [`set_ports`](Self::set_ports) when the device's tables change.
///
/// **Outputs** are queues the driver drains:
/// - [`poll_transmit`](Self::poll_transmit) or
///   [`take_transmits`](Self::take_transmits): MADs to send, in order;
/// - [`poll_change`](Self::poll_change): public fields of ids that
///   changed (`cm_id->state` and friends);
/// - [`poll_event`](Self::poll_event): consumer events
///   (`struct ib_cm_event`), in the order they happened;
/// - [`poll_foreign`](Self::poll_foreign): work for another shard;
/// - [`poll_notice`](Self::poll_notice): things worth a log line;
/// - [`poll_timeout`](Self::poll_timeout): when `handle_timeout` next
///   has work.
///
/// **Queries** have no effect: [`info`](Self::info),
/// [`state`](Self::state), [`init_qp_attr`](Self::init_qp_attr),
/// [`counters`](Self::counters), [`config`](Self::config) and the table
/// sizes used by leak checks.
///
/// # Call order
///
/// A driver loops over:
/// 1. inputs, each with a `now` that never goes backwards: received MADs,
///    API calls, and `handle_timeout(now)` once `now` reaches
///    [`poll_timeout`](Self::poll_timeout);
/// 2. after inputs, and before it sleeps or gives up the engine, drain
///    every output: transmits first (MADs of one id must leave in engine
///    order), then changes (so a consumer sees an id's new state with its
///    event), then events, foreign work (hand each to its shard, which
///    calls `dreq_stale_local`) and notices;
/// 3. sleep until the next MAD, API call or `poll_timeout()`, asked after
///    the inputs: any input may move it.
///
/// A destroyed id gets nothing more: [`destroy`](Self::destroy) also
/// removes its queued events and changes. Outputs left undrained are not
/// lost but are delivered late; notices are capped (the oldest kept).
pub struct Engine {
    cfg: EngineConfig,
    shared: Arc<Shared>,
    ids: IdSlab<IdRec>,
    timers: TimerWheel<TimerRef>,
    /// (remote CA GUID, remote comm ID) → local ID.
    remote_ids: ids::PeerMap<(u64, u32), u32>,
    /// (requester GID, request ID) → local ID, for SIDR duplicates.
    sidr_remote: ids::PeerMap<(Gid, u32), u32>,
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
    /// Boxes of answered requests (`IdRec::send`) kept for the next
    /// request: a burst of connects otherwise frees and allocates one per
    /// REQ, REP and DREQ (at most [`SPARE_SENDS`]). The boxes themselves
    /// are what is kept, hence the `Vec` of `Box`es.
    #[allow(clippy::vec_box)]
    spare_sends: Vec<Box<record::Outstanding>>,
}

/// How many boxes of answered requests an engine keeps for reuse.
const SPARE_SENDS: usize = 128;

/// How many event MAD boxes a thread keeps for reuse ([`recycle_event_mad`]).
const SPARE_EVENT_MADS: usize = 256;

thread_local! {
    /// Boxes of delivered events' MADs (the allocations are the point).
    #[allow(clippy::vec_box)]
    static SPARE_EVENT_MAD: std::cell::RefCell<Vec<Box<[u8; 256]>>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Hands the MAD box of a delivered event ([`Event::mad`]) back for the
/// events this thread makes next, which saves an allocation and a free per
/// received MAD where one thread both handles MADs and delivers their
/// events (an event loop). A thread keeps at most 256 (64 KiB); the rest are freed.
pub fn recycle_event_mad(b: Box<[u8; 256]>) {
    // During thread teardown the pool may be gone: the box is just freed.
    let _ = SPARE_EVENT_MAD.try_with(|p| {
        let mut p = p.borrow_mut();
        if p.len() < SPARE_EVENT_MADS {
            p.push(b);
        }
    });
}

/// A boxed copy of a received MAD's first 256 bytes, in a recycled box
/// when this thread has one (also a served process's decode of an event's
/// MAD, `ipc`: its delivering thread recycles the box here).
pub(crate) fn boxed_event_mad(m: &[u8]) -> Box<[u8; 256]> {
    let m: &[u8; 256] = m[..256].try_into().expect("a MAD is 256 bytes");
    match SPARE_EVENT_MAD.try_with(|p| p.borrow_mut().pop()) {
        Ok(Some(mut b)) => {
            *b = *m;
            b
        }
        _ => Box::new(*m),
    }
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
        let ids = IdSlab::in_layout(shared.codec, &shared.layout, cfg.shard, cfg.max_ids);
        let rng = ids::splitmix64(cfg.seed ^ cfg.node_guid);
        Engine {
            cfg,
            shared,
            ids,
            timers: TimerWheel::new(),
            remote_ids: ids::PeerMap::with_hasher(ids::PeerState::new(rng)),
            sidr_remote: ids::PeerMap::with_hasher(ids::PeerState::new(rng ^ 1)),
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
            spare_sends: Vec::new(),
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

    /// The slot of this shard's id table that `id` names, live or not
    /// (`None`: not an id of this shard). Each slot holds one id at a
    /// time: a caller's table indexed by it needs no hashing.
    pub fn id_slot(&self, id: Handle) -> Option<usize> {
        self.ids.slot_of(u32::try_from(id.0).ok()?)
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
    #[must_use = "polling removes the item from its queue: dropping it loses it"]
    pub fn poll_notice(&mut self) -> Option<Notice> {
        self.notices.pop_front()
    }

    fn notice(&mut self, n: Notice) {
        if self.notices.len() < MAX_NOTICES {
            self.notices.push_back(n);
        }
    }

    // ---------------------------------------------------------------- outputs

    /// The next MAD to send (in order).
    #[must_use = "polling removes the item from its queue: dropping it loses it"]
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

    /// Whether `poll_transmit`/`take_transmits` would return anything.
    pub fn has_transmits(&self) -> bool {
        self.transmits.len() > self.tx_head
    }

    /// Moves every pending MAD to the end of `out` (in order), without
    /// copying them one by one.
    pub fn take_transmits(&mut self, out: &mut Vec<Transmit>) {
        if self.tx_head == 0 {
            out.append(&mut self.transmits);
        } else {
            out.extend(self.transmits.drain(self.tx_head..));
            self.transmits.clear();
            self.tx_head = 0;
        }
    }

    /// The next consumer event.
    #[must_use = "polling removes the item from its queue: dropping it loses it"]
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// The next change of an id's public fields.
    #[must_use = "polling removes the item from its queue: dropping it loses it"]
    pub fn poll_change(&mut self) -> Option<Change> {
        self.changes.pop_front()
    }

    /// The next piece of work for another shard.
    #[must_use = "polling removes the item from its queue: dropping it loses it"]
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
            state: r.state,
            lap_state: r.lap_state,
            remote_id: r.remote_id,
            service_id: r.service_id,
        })
    }

    pub fn state(&self, id: Handle) -> Option<State> {
        self.ids.get(id.0 as u32).map(|r| r.state)
    }

    /// The peer's GID of an id that has one (from its REQ, sent or
    /// received).
    pub fn peer_gid(&self, id: Handle) -> Option<crate::wire::Gid> {
        let r = self.ids.get(id.0 as u32)?;
        let g = r.av.ah.dgid;
        (g != crate::wire::Gid::ZERO).then_some(g)
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
        if self.ids.get(id).is_none() {
            return;
        }
        let ev = Event {
            id: Handle(id as u64),
            kind,
            param,
            local_id: id,
            mad: mad.map(boxed_event_mad),
        };
        self.push_event(ev);
    }

    /// Sends a one-shot MAD on the id's address vector.
    fn send_once(&mut self, id: u32, mad: [u8; 256]) {
        let Some(r) = self.ids.get(id) else { return };
        let dest = self.dest_of(&r.av);
        self.push_mad(dest, mad);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A recycled event box is the next one handed out, with the new MAD
    /// copied in; the pool keeps at most `SPARE_EVENT_MADS`.
    #[test]
    fn event_mad_boxes_are_reused_up_to_the_cap() {
        std::thread::spawn(|| {
            let a = boxed_event_mad(&[1u8; 300]);
            let ptr = &*a as *const [u8; 256];
            recycle_event_mad(a);
            let spares = || SPARE_EVENT_MAD.with(|p| p.borrow().len());
            assert_eq!(spares(), 1);
            let b = boxed_event_mad(&[2u8; 256]);
            assert_eq!(spares(), 0, "the spare was taken");
            assert_eq!(&*b as *const [u8; 256], ptr, "the recycled box");
            assert!(b.iter().all(|&x| x == 2), "holds the new MAD");
            for _ in 0..SPARE_EVENT_MADS + 10 {
                recycle_event_mad(Box::new([0; 256]));
            }
            recycle_event_mad(b);
            assert_eq!(spares(), SPARE_EVENT_MADS);
        })
        .join()
        .unwrap();
    }
}
