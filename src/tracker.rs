//! Design B's connection tracker (docs/SERVICE.md, Rounds 18–19): what a
//! host CM service that only forwards MADs between protocol engines
//! running in the processes must know about every connection to answer
//! for a process that dies, and to hold every process to its own comm
//! IDs, and to find a stale connection host-wide. The service's forward
//! mode (`forwarder::Hub`) runs one for all its forwarded devices;
//! `examples/forward_cost.rs`'s forwarder runs it to measure its cost.
//!
//! Sans-IO. [`Tracker::observe`] sees each MAD a process hands over, with
//! the process it goes to, and says whether it may pass; each end of a
//! connection is kept under (process, that end's local comm ID) with its
//! state as the MADs seen give it. [`Tracker::process_gone`] returns the
//! MADs the kernel's `cm_destroy_id` would have sent for each of the dead
//! process's ends, to the processes of their peers:
//!
//! | the dead end | sent to its peer |
//! |---|---|
//! | active, REQ sent, no REP seen | REJ `TIMEOUT`, ARI = its CA GUID (the passive side finds its id by GUID and comm ID) |
//! | active, REP seen, no RTU | REJ `CONSUMER_DEFINED`, message REP |
//! | passive, REQ delivered, not answered | REJ `CONSUMER_DEFINED`, message REQ |
//! | passive, REP sent, no RTU | REJ `CONSUMER_DEFINED` twice: message REQ (for an active side whose REP was lost, which drops the kernel's) and message other (the kernel's, once the REP came) |
//! | established | DREQ (the peer's QPN) |
//! | DREQ received, not answered | DREP |
//! | DREQ sent | DREQ again, once the DREQ's own wait has passed with no DREP ([`Tracker::due`]; the kernel stops re-sending it: a lost one would leave the survivor established) |
//! | closed (DREP or REJ seen) | nothing |
//!
//! An end of another process still open towards the dead one with nothing
//! above for it (a REQ delivered and not answered; an end whose peer end
//! closed alone, by a stale-connection REJ) gets the REJ of its REQ and,
//! once a REP named the dead end, the REJ a connection takes: whichever
//! state its CM is in, one fits and the other is dropped.
//!
//! Where the kernel's CM outlives the process (it keeps answering in
//! timewait), the tracker answers for the dead process what the survivor
//! still sends it ([`Tracker::answer_gone`]: a DREP for a DREQ, a REJ for
//! a REQ or REP, a DREQ for an RTU that raced the REJ), and keeps closed
//! ends for a while ([`Tracker::expire`]) so that a retransmission after a
//! lost DREP or REJ still passes as its owner's. `tests/sim_tracker.rs`
//! runs it against the real engine with seeded deaths and faults.
//!
//! A MAD is refused when its sender speaks for a comm ID that is not its
//! own: an RTU, DREQ, DREP, MRA of a REP or REJ after the REQ whose
//! (sender, local comm ID) has no end, a REP or an MRA or REJ of a REQ
//! from a process the REQ was not delivered to. REQs, LAPs, APRs, SIDR and
//! ClassPortInfo are not tracked (a REQ starts an end).
//!
//! Stale connections ([`Tracker::stale_holder`]): each end's QP (its CA
//! GUID and QPN) is indexed, as the kernel's `remote_qp_table` is, one
//! per host. Each process's engine checks its own connections; the
//! service checks a REQ or REP against the other processes' (past their
//! REP, not in a disconnect), answers REJ `STALE_CONN` and has the old
//! connection's process send its DREQ.

use crate::engine::ids::{FastMap, FastState, PeerMap, PeerState};
use crate::wire::{CmMad, CmMsg, Drep, Dreq, MsgCode, Rej, SidrRep, rej_reason, sidr_status};

/// A process, as the service numbers its connections.
pub type Proc = u32;

/// One end of a connection: (its process, its local comm ID).
pub type EndKey = (Proc, u32);

/// Where one end of a connection is, from the MADs seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndState {
    /// Active: the REQ left; no REP seen.
    ReqSent,
    /// Active: a REP came; no RTU yet.
    RepRcvd,
    /// Passive: the REP left; no RTU yet.
    RepSent,
    Established,
    DreqSent,
    DreqRcvd,
    /// A DREP or REJ was seen. Kept (until [`Tracker::expire`]) so that
    /// retransmissions, when that MAD was lost, still pass as their
    /// owner's.
    Closed,
}

#[derive(Debug, Clone, Copy)]
struct End {
    state: EndState,
    /// The peer's process (for an active end, the one the REQ went to).
    peer_proc: Proc,
    /// The peer's local comm ID (0 until its REP is seen).
    peer_comm: u32,
    /// This end's QPN and CA GUID (from its REQ or REP).
    qpn: u32,
    ca_guid: u64,
    /// The peer's process is gone (`process_gone`), since this time (ms):
    /// the tracker answers for it ([`Tracker::answer_gone`]) until this
    /// end closes or [`Tracker::expire`] drops it.
    gone_since: Option<u64>,
    /// When the end went `Closed`, `DreqSent` or `DreqRcvd` (ms).
    closed_at: u64,
    /// The connection's service ID (from its REQ).
    service_id: u64,
    /// When the end was first seen (ms).
    born: u64,
    /// How long this end's CM waits for the answer to its DREQ (ms, as
    /// the kernel computes its `timeout_ms` from the REQ).
    wait_ms: u32,
    /// An active end: its passive peer's wait (for the REP's end).
    peer_wait_ms: u32,
}

/// A DREQ the tracker sends again for a dead process's end that had sent
/// one, when no DREP came for it in that DREQ's own wait.
#[derive(Debug, Clone, Copy)]
struct Resend {
    due: u64,
    dead: EndKey,
    /// The peer's end: the DREQ goes when it is still open at `due`.
    survivor: EndKey,
    survivor_qpn: u32,
}

/// The shortest wait before a dead end's DREQ is sent again (ms): a DREP
/// already on its way is seen first even when the REQ asked for none.
const RESEND_MIN_MS: u64 = 50;
/// The longest (ms): well inside the time a survivor's end is kept
/// ([`Tracker::expire`]).
const RESEND_MAX_MS: u64 = 30_000;

/// The kernel's DREQ wait (`timeout_ms`) of each end of the connection a
/// REQ starts: (active, passive) in ms. Active: twice the packet life time
/// (the REQ's local ACK timeout less one) and the remote CM response
/// timeout; passive: its local CM response timeout.
fn dreq_waits(r: &crate::wire::Req) -> (u32, u32) {
    use crate::engine::convert_to_ms;
    let plt = r.primary.local_ack_timeout.saturating_sub(1);
    let active = 2 * convert_to_ms(plt) + convert_to_ms(r.remote_cm_response_timeout);
    let passive = convert_to_ms(r.local_cm_response_timeout);
    let c = |ms: u64| ms.min(u32::MAX as u64) as u32;
    (c(active), c(passive))
}

/// One open end as introspection shows it ([`Tracker::ends_of`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndView {
    pub proc: Proc,
    pub comm: u32,
    pub state: EndState,
    pub peer_proc: Proc,
    /// 0 until the peer's REP is seen.
    pub peer_comm: u32,
    pub service_id: u64,
    pub born_ms: u64,
}

/// What [`Tracker::observe`] says of a MAD.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    /// The sender spoke for a comm ID that is not its own (the reason).
    Refuse(&'static str),
}

/// See the module documentation.
#[derive(Debug)]
pub struct Tracker {
    /// Keyed by comm IDs peers choose: the engine's keyed peer hasher.
    ends: PeerMap<EndKey, End>,
    /// Ends in `ends` per process (a service caps them per process).
    counts: FastMap<Proc, usize>,
    /// The end that owns each QP (its CA GUID and QPN, from its REQ or
    /// REP): the host's stale-connection table ([`Tracker::stale_holder`]).
    /// An entry may outlive its end; a look-up checks the end.
    qps: PeerMap<(u64, u32), EndKey>,
    /// DREQs to send again for dead processes ([`Tracker::due`]).
    resends: Vec<Resend>,
    /// Transaction IDs of the MADs this tracker makes.
    next_tid: u64,
    refused: u64,
}

impl Default for Tracker {
    fn default() -> Tracker {
        Tracker::new()
    }
}

fn uncount(counts: &mut FastMap<Proc, usize>, p: Proc) {
    if let Some(c) = counts.get_mut(&p) {
        *c -= 1;
        if *c == 0 {
            counts.remove(&p);
        }
    }
}

/// Forgets that end `k` owns its QP, if the table still says so.
fn unindex(qps: &mut PeerMap<(u64, u32), EndKey>, k: EndKey, e: &End) {
    if qps.get(&(e.ca_guid, e.qpn)) == Some(&k) {
        qps.remove(&(e.ca_guid, e.qpn));
    }
}

/// Whether end `k` is in the table and not closed.
fn is_open(ends: &PeerMap<EndKey, End>, k: EndKey) -> bool {
    ends.get(&k).is_some_and(|e| e.state != EndState::Closed)
}

/// The DREQ the tracker sends for a dead end (comm ID `local`) to its
/// peer's (`remote`, whose QP is `remote_qpn`).
fn dreq(local: u32, remote: u32, remote_qpn: u32) -> CmMsg {
    CmMsg::Dreq(Dreq {
        local_comm_id: local,
        remote_comm_id: remote,
        remote_qpn,
        ..Dreq::default()
    })
}

/// How long after its DREQ a dead end's DREQ is sent again (ms).
fn resend_wait(wait_ms: u32) -> u64 {
    (wait_ms as u64).clamp(RESEND_MIN_MS, RESEND_MAX_MS)
}

/// A REQ or REP, parsed (`None` without a parse for any other MAD: the
/// check runs on every REQ and REP the host's processes get).
fn peek_qp(mad: &[u8]) -> Option<CmMsg> {
    let id = crate::wire::peek::attr_id(mad)?;
    if id != crate::wire::attr::REQ && id != crate::wire::attr::REP {
        return None;
    }
    CmMad::parse(mad).ok().map(|m| m.msg)
}

/// A seed nobody outside the process knows (std's random keys).
fn table_seed() -> u64 {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one(0x7ac_u64)
}

impl Tracker {
    pub fn new() -> Tracker {
        Tracker {
            ends: PeerMap::with_hasher(PeerState::new(table_seed())),
            counts: FastMap::with_hasher(FastState::new(table_seed())),
            qps: PeerMap::with_hasher(PeerState::new(table_seed())),
            resends: Vec::new(),
            next_tid: 0x7ac0_0000_0000_0000,
            refused: 0,
        }
    }

    /// Open ends (not closed) whose peer is alive.
    pub fn len(&self) -> usize {
        self.ends
            .values()
            .filter(|e| e.gone_since.is_none() && e.state != EndState::Closed)
            .count()
    }

    /// Open ends (not closed) whose peer is alive, of the processes
    /// `mine` picks.
    pub fn len_of(&self, mine: impl Fn(Proc) -> bool) -> usize {
        self.ends
            .iter()
            .filter(|(k, e)| mine(k.0) && e.gone_since.is_none() && e.state != EndState::Closed)
            .count()
    }

    /// The open ends (not closed) of the processes `mine` picks.
    pub fn ends_of(&self, mine: impl Fn(Proc) -> bool) -> Vec<EndView> {
        self.ends
            .iter()
            .filter(|(k, e)| mine(k.0) && e.state != EndState::Closed)
            .map(|(k, e)| EndView {
                proc: k.0,
                comm: k.1,
                state: e.state,
                peer_proc: e.peer_proc,
                peer_comm: e.peer_comm,
                service_id: e.service_id,
                born_ms: e.born,
            })
            .collect()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Ends kept after they closed or their peer's process went.
    pub fn kept(&self) -> usize {
        self.ends.len() - self.len()
    }

    /// Drops the ends closed, in a disconnect (`DreqSent`, `DreqRcvd`), or
    /// whose peer has been gone, `max_age_ms` or longer before `now_ms` (a
    /// CM's longest wait for an answer, retries included: no
    /// retransmission comes after that; a DREQ never answered ends its
    /// CM's wait in timewait without a MAD, so without this its end would
    /// count against its process's cap for ever).
    pub fn expire(&mut self, now_ms: u64, max_age_ms: u64) {
        let ends = &self.ends;
        self.resends.retain(|r| is_open(ends, r.survivor));
        let old = |t: u64| now_ms.saturating_sub(t) >= max_age_ms;
        let (counts, qps) = (&mut self.counts, &mut self.qps);
        self.ends.retain(|k, e| {
            let ending = matches!(
                e.state,
                EndState::Closed | EndState::DreqSent | EndState::DreqRcvd
            );
            let keep = !(e.gone_since.is_some_and(old) || ending && old(e.closed_at));
            if !keep {
                uncount(counts, k.0);
                unindex(qps, *k, e);
            }
            keep
        });
    }

    /// Ends of process `p` in the table (open, closed and kept, or with a
    /// gone peer).
    pub fn count_of(&self, p: Proc) -> usize {
        self.counts.get(&p).copied().unwrap_or(0)
    }

    /// Removes end `k` (and uncounts it).
    fn end_of(&mut self, k: EndKey) {
        if let Some(e) = self.ends.remove(&k) {
            uncount(&mut self.counts, k.0);
            unindex(&mut self.qps, k, &e);
        }
    }

    /// Inserts end `k` unless it is there (and counts it); it owns its QP.
    fn start(&mut self, k: EndKey, e: End) {
        if let std::collections::hash_map::Entry::Vacant(v) = self.ends.entry(k) {
            v.insert(e);
            *self.counts.entry(k.0).or_default() += 1;
            self.qps.insert((e.ca_guid, e.qpn), k);
        }
    }

    /// The host-wide stale-connection check (the kernel's
    /// `remote_qp_table`, which is one per host; each process's engine
    /// keeps only its own connections). A REQ or REP that process `from`
    /// hands to process `to` names its sender's QP (CA GUID, QPN); when
    /// another end owns that QP in a connection past its REP whose local
    /// end is a process other than `to` that `local` accepts, returns
    /// that process: the MAD is stale and that connection is the old one
    /// (the caller answers REJ `STALE_CONN` and has the old one's process
    /// send its DREQ). A connection of `to` itself is `to`'s engine's to
    /// find. Ends in a disconnect are not counted (their CM may already
    /// have left the table for timewait). `None` for anything else.
    pub fn stale_holder(
        &self,
        from: Proc,
        to: Proc,
        mad: &[u8],
        local: impl Fn(Proc) -> bool,
    ) -> Option<(Proc, u64, u32)> {
        let (comm, guid, qpn) = match peek_qp(mad)? {
            CmMsg::Req(r) => (r.local_comm_id, r.local_ca_guid, r.local_qpn),
            CmMsg::Rep(r) => (r.local_comm_id, r.local_ca_guid, r.local_qpn),
            _ => return None,
        };
        let owner = *self.qps.get(&(guid, qpn))?;
        if owner == (from, comm) {
            return None;
        }
        let e = self.ends.get(&owner)?;
        let live = matches!(
            e.state,
            EndState::RepRcvd | EndState::RepSent | EndState::Established
        );
        if !live || e.gone_since.is_some() || e.ca_guid != guid || e.qpn != qpn || e.peer_comm == 0
        {
            return None;
        }
        (e.peer_proc != to && local(e.peer_proc)).then_some((e.peer_proc, guid, qpn))
    }

    /// A REJ `STALE_CONN` for a stale REQ or REP, as the kernel's
    /// `cm_issue_rej` makes it from the MAD it answers (its TID; the
    /// comm IDs swapped). `None` for anything else.
    pub fn stale_rej(mad: &[u8]) -> Option<[u8; 256]> {
        let m = CmMad::parse(mad).ok()?;
        let (local, remote, code) = match m.msg {
            CmMsg::Req(r) => (0, r.local_comm_id, MsgCode::Req),
            CmMsg::Rep(r) => (r.remote_comm_id, r.local_comm_id, MsgCode::Rep),
            _ => return None,
        };
        let rej = Rej {
            local_comm_id: local,
            remote_comm_id: remote,
            message_rejected: code,
            reason: rej_reason::STALE_CONN,
            ..Rej::default()
        };
        Some(CmMad::send(m.tid, 0, CmMsg::Rej(rej)).to_bytes())
    }

    /// MADs refused so far.
    pub fn refused(&self) -> u64 {
        self.refused
    }

    /// The state of end `k`, if tracked.
    pub fn state(&self, k: EndKey) -> Option<EndState> {
        self.ends.get(&k).map(|e| e.state)
    }

    /// Notes MAD `mad`, which process `from` hands over for process `to`.
    /// A MAD that does not parse as a CM MAD passes untracked (the
    /// receiving engine counts it as garbage).
    /// `now_ms` dates the ends it closes ([`Tracker::expire`]).
    pub fn observe(&mut self, from: Proc, to: Proc, mad: &[u8], now_ms: u64) -> Verdict {
        let v = match CmMad::parse(mad) {
            Ok(m) => self.note(from, to, &m.msg, now_ms),
            Err(_) => Verdict::Pass,
        };
        if v != Verdict::Pass {
            self.refused += 1;
        }
        v
    }

    fn note(&mut self, from: Proc, to: Proc, msg: &CmMsg, now: u64) -> Verdict {
        match msg {
            CmMsg::Req(r) => {
                let (wait_ms, peer_wait_ms) = dreq_waits(r);
                self.start(
                    (from, r.local_comm_id),
                    End {
                        state: EndState::ReqSent,
                        peer_proc: to,
                        peer_comm: 0,
                        qpn: r.local_qpn,
                        ca_guid: r.local_ca_guid,
                        gone_since: None,
                        closed_at: 0,
                        service_id: r.service_id,
                        born: now,
                        wait_ms,
                        peer_wait_ms,
                    },
                );
                Verdict::Pass
            }
            CmMsg::Rep(r) => {
                let active = (to, r.remote_comm_id);
                let (service_id, wait_ms) = match self.ends.get_mut(&active) {
                    Some(a) if a.peer_proc == from => {
                        if a.state == EndState::ReqSent {
                            a.state = EndState::RepRcvd;
                        }
                        a.peer_comm = r.local_comm_id;
                        (a.service_id, a.peer_wait_ms)
                    }
                    _ => return Verdict::Refuse("a REP for a REQ this process did not get"),
                };
                self.start(
                    (from, r.local_comm_id),
                    End {
                        state: EndState::RepSent,
                        peer_proc: to,
                        peer_comm: r.remote_comm_id,
                        qpn: r.local_qpn,
                        ca_guid: r.local_ca_guid,
                        gone_since: None,
                        closed_at: 0,
                        service_id,
                        born: now,
                        wait_ms,
                        peer_wait_ms: 0,
                    },
                );
                Verdict::Pass
            }
            CmMsg::Rtu(r) => self.step(
                from,
                r.local_comm_id,
                (EndState::Established, EndState::Established),
                now,
            ),
            CmMsg::Dreq(r) => self.step(
                from,
                r.local_comm_id,
                (EndState::DreqSent, EndState::DreqRcvd),
                now,
            ),
            CmMsg::Drep(r) => self.close(
                from,
                r.local_comm_id,
                now,
                "a DREP for a comm ID not its own",
            ),
            CmMsg::Rej(r) if r.message_rejected == MsgCode::Req => {
                // The passive side refuses a REQ: its own comm ID is not
                // known yet; the REQ must have gone to it.
                self.close_active(from, (to, r.remote_comm_id), now)
            }
            // A stale-connection REJ is issued from the MAD it answers,
            // not by the sender's id (the kernel's `cm_issue_rej`): only
            // the receiver's end closes.
            CmMsg::Rej(r) if r.reason == rej_reason::STALE_CONN => {
                match self.ends.get(&(from, r.local_comm_id)).copied() {
                    Some(e) => {
                        if let Some(p) = self.ends.get_mut(&(e.peer_proc, e.peer_comm)) {
                            p.state = EndState::Closed;
                            p.closed_at = now;
                        }
                        Verdict::Pass
                    }
                    None => Verdict::Refuse("a REJ for a comm ID not its own"),
                }
            }
            CmMsg::Rej(r) => self.close(
                from,
                r.local_comm_id,
                now,
                "a REJ for a comm ID not its own",
            ),
            CmMsg::Mra(r) if r.message_mraed == MsgCode::Req => {
                match self.ends.get(&(to, r.remote_comm_id)) {
                    Some(a) if a.peer_proc == from => Verdict::Pass,
                    _ => Verdict::Refuse("an MRA of a REQ this process did not get"),
                }
            }
            CmMsg::Mra(r) => {
                if self.ends.contains_key(&(from, r.local_comm_id)) {
                    Verdict::Pass
                } else {
                    Verdict::Refuse("an MRA for a comm ID not its own")
                }
            }
            _ => Verdict::Pass,
        }
    }

    /// Moves end (`from`, `local`) to `mine` and its peer's, if known and
    /// open, to `peer` (two look-ups: the table is large and each costs
    /// cache misses); a move into a disconnect is dated (`expire`).
    fn step(
        &mut self,
        from: Proc,
        local: u32,
        (mine, peer): (EndState, EndState),
        now: u64,
    ) -> Verdict {
        let Some(e) = self.ends.get_mut(&(from, local)) else {
            return Verdict::Refuse("a message for a comm ID not its own");
        };
        if e.state == EndState::Closed {
            // A retransmission after its connection closed.
            return Verdict::Pass;
        }
        if e.state != mine {
            e.state = mine;
            e.closed_at = now;
        }
        let peer_key = (e.peer_proc, e.peer_comm);
        if e.peer_comm != 0
            && let Some(p) = self.ends.get_mut(&peer_key)
            && p.state != EndState::Closed
            && p.state != peer
        {
            p.state = peer;
            p.closed_at = now;
        }
        Verdict::Pass
    }

    /// A DREP or REJ from end (`from`, `local`): it and its peer close.
    fn close(&mut self, from: Proc, local: u32, now: u64, refusal: &'static str) -> Verdict {
        let Some(e) = self.ends.get_mut(&(from, local)) else {
            return Verdict::Refuse(refusal);
        };
        e.state = EndState::Closed;
        e.closed_at = now;
        let peer = (e.peer_proc, e.peer_comm);
        if e.peer_comm != 0
            && let Some(p) = self.ends.get_mut(&peer)
        {
            p.state = EndState::Closed;
            p.closed_at = now;
        }
        Verdict::Pass
    }

    /// A REQ refused by `passive`: the active end closes.
    fn close_active(&mut self, passive: Proc, active: EndKey, now: u64) -> Verdict {
        match self.ends.get_mut(&active) {
            Some(a) if a.peer_proc == passive => {
                a.state = EndState::Closed;
                a.closed_at = now;
                Verdict::Pass
            }
            _ => Verdict::Refuse("a REJ of a REQ this process did not get"),
        }
    }

    /// Process `p` is gone (at `now_ms`): forgets its ends and returns the
    /// MADs the kernel's CM would have sent for each of them, with the
    /// process each goes to (the table in the module documentation). Their
    /// peers' ends stay, marked, so that what a peer sends the dead process
    /// meanwhile is answered ([`Tracker::answer_gone`]).
    pub fn process_gone(&mut self, p: Proc, now_ms: u64) -> Vec<(Proc, [u8; 256])> {
        let mut out = Vec::new();
        let dead: Vec<(EndKey, End)> = self
            .ends
            .iter()
            .filter(|(k, _)| k.0 == p)
            .map(|(k, e)| (*k, *e))
            .collect();
        self.counts.remove(&p);
        for (k, e) in dead {
            self.ends.remove(&k);
            unindex(&mut self.qps, k, &e);
            let peer = if e.peer_comm == 0 || e.state == EndState::Closed {
                // (A closed end's open peer is the loop below's.)
                None
            } else {
                self.ends.get_mut(&(e.peer_proc, e.peer_comm)).map(|pe| {
                    pe.gone_since = Some(now_ms);
                    *pe
                })
            };
            let rej = |msg: MsgCode, reason: u16, ari: &[u8]| {
                let mut r = Rej {
                    local_comm_id: k.1,
                    remote_comm_id: e.peer_comm,
                    message_rejected: msg,
                    reason,
                    ari_length: ari.len() as u8,
                    ..Rej::default()
                };
                r.ari[..ari.len()].copy_from_slice(ari);
                CmMsg::Rej(r)
            };
            // When a DREQ it had sent goes again without a DREP.
            let resend_at = e.closed_at.saturating_add(resend_wait(e.wait_ms));
            let msg = match e.state {
                EndState::ReqSent => Some(rej(
                    MsgCode::Other,
                    rej_reason::TIMEOUT,
                    &e.ca_guid.to_be_bytes(),
                )),
                EndState::RepRcvd => Some(rej(MsgCode::Rep, rej_reason::CONSUMER_DEFINED, &[])),
                // The kernel's REJ here says "other", which an active side
                // whose REP was lost (still REQ_SENT: no remote comm ID to
                // match) drops; one of the REQ first reaches it there, and
                // the kernel's own reaches it once the REP came (each is
                // dropped by the state the other fits).
                EndState::RepSent => {
                    let first = rej(MsgCode::Req, rej_reason::CONSUMER_DEFINED, &[]);
                    let m = self.mad(first);
                    out.push((e.peer_proc, m));
                    Some(rej(MsgCode::Other, rej_reason::CONSUMER_DEFINED, &[]))
                }
                // DREQ sent: again, once its wait has passed with no
                // DREP (the kernel stops re-sending it when the process
                // destroys the id, so a lost one left the survivor
                // established). A DREP already on its way, queued behind
                // the process's exit, closes the survivor's end first.
                EndState::DreqSent
                    if let Some(peer) = peer
                        && now_ms < resend_at =>
                {
                    self.resends.push(Resend {
                        due: resend_at,
                        dead: k,
                        survivor: (e.peer_proc, e.peer_comm),
                        survivor_qpn: peer.qpn,
                    });
                    None
                }
                EndState::Established | EndState::DreqSent => {
                    peer.map(|peer| dreq(k.1, e.peer_comm, peer.qpn))
                }
                EndState::DreqRcvd => Some(CmMsg::Drep(Drep {
                    local_comm_id: k.1,
                    remote_comm_id: e.peer_comm,
                    ..Drep::default()
                })),
                // Closed: if its last MAD was lost, the survivor's
                // retransmissions are answered (`answer_gone`); a survivor
                // end still open (a stale-connection REJ closed only this
                // one) gets the REJs of an unanswered REQ, below.
                EndState::Closed => None,
            };
            if let Some(m) = msg {
                out.push((e.peer_proc, self.mad(m)));
            }
        }
        // Ends of other processes still open towards `p` with nothing sent
        // for them above (a REQ delivered and not answered; an end whose
        // peer end closed alone): the REJ of the REQ, and the REJ a
        // connection with a REP takes (whichever state the survivor's CM
        // is in, one fits and the other is dropped). Kept, to answer.
        let waiting: Vec<(EndKey, End)> = self
            .ends
            .iter()
            .filter(|(_, e)| {
                e.peer_proc == p && e.gone_since.is_none() && e.state != EndState::Closed
            })
            .map(|(k, e)| (*k, *e))
            .collect();
        for (a, e) in waiting {
            if let Some(x) = self.ends.get_mut(&a) {
                x.gone_since = Some(now_ms);
            }
            let rej = |code| {
                CmMsg::Rej(Rej {
                    local_comm_id: e.peer_comm,
                    remote_comm_id: a.1,
                    message_rejected: code,
                    reason: rej_reason::CONSUMER_DEFINED,
                    ..Rej::default()
                })
            };
            let m = self.mad(rej(MsgCode::Req));
            out.push((a.0, m));
            if e.peer_comm != 0 {
                let m = self.mad(rej(MsgCode::Other));
                out.push((a.0, m));
            }
        }
        out
    }

    /// The DREQs due by `now_ms` for dead processes' ends that had sent
    /// one (those `dead` picks), each to its survivor's process, as
    /// (dead process, survivor's process, MAD): a survivor whose end
    /// closed meanwhile (its DREP came) gets none.
    pub fn due(
        &mut self,
        now_ms: u64,
        dead: impl Fn(Proc) -> bool,
    ) -> Vec<(Proc, Proc, [u8; 256])> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < self.resends.len() {
            let r = self.resends[i];
            if r.due > now_ms || !dead(r.dead.0) {
                i += 1;
                continue;
            }
            self.resends.swap_remove(i);
            if is_open(&self.ends, r.survivor) {
                let m = self.mad(dreq(r.dead.1, r.survivor.1, r.survivor_qpn));
                out.push((r.dead.0, r.survivor.0, m));
            }
        }
        out
    }

    /// Whether a DREQ waits ([`Tracker::due`]) for a dead process `dead`
    /// picks, its survivor's end still open.
    pub fn awaiting(&self, dead: impl Fn(Proc) -> bool) -> bool {
        self.resends
            .iter()
            .any(|r| dead(r.dead.0) && is_open(&self.ends, r.survivor))
    }

    /// Answers, for the gone process `to`, a MAD process `from` sends it
    /// (the forwarder has nowhere to deliver it): an RTU that raced the
    /// REJ sent for the dead end gets a DREQ (the survivor would otherwise
    /// stay established with nobody), a DREQ a DREP, a REP (crossing the
    /// dead active side's REJ) a REJ of it, a REQ a REJ of it; a DREP or
    /// REJ closes the survivor's end. `None`: nothing to answer.
    pub fn answer_gone(&mut self, from: Proc, mad: &[u8]) -> Option<[u8; 256]> {
        let msg = CmMad::parse(mad).ok()?.msg;
        let reply = match msg {
            CmMsg::Req(r) => CmMsg::Rej(Rej {
                local_comm_id: 0,
                remote_comm_id: r.local_comm_id,
                message_rejected: MsgCode::Req,
                reason: rej_reason::CONSUMER_DEFINED,
                ..Rej::default()
            }),
            CmMsg::Rep(r) => {
                self.end_of((from, r.local_comm_id));
                CmMsg::Rej(Rej {
                    local_comm_id: r.remote_comm_id,
                    remote_comm_id: r.local_comm_id,
                    message_rejected: MsgCode::Rep,
                    reason: rej_reason::CONSUMER_DEFINED,
                    ..Rej::default()
                })
            }
            CmMsg::Rtu(r) => {
                let e = self.ends.get_mut(&(from, r.local_comm_id))?;
                e.state = EndState::DreqRcvd;
                dreq(r.remote_comm_id, r.local_comm_id, e.qpn)
            }
            CmMsg::Dreq(r) => {
                self.end_of((from, r.local_comm_id));
                CmMsg::Drep(Drep {
                    local_comm_id: r.remote_comm_id,
                    remote_comm_id: r.local_comm_id,
                    ..Drep::default()
                })
            }
            CmMsg::Drep(r) => {
                self.end_of((from, r.local_comm_id));
                return None;
            }
            CmMsg::Rej(r) => {
                self.end_of((from, r.local_comm_id));
                return None;
            }
            _ => return None,
        };
        Some(self.mad(reply))
    }

    /// What the host's CM answers a request no listener takes, as the
    /// kernel's does (`cm_req_handler`, `cm_sidr_req_handler`): a REQ gets
    /// REJ `INVALID_SERVICE_ID`, a SIDR_REQ SIDR_REP `UNSUPPORTED`, both
    /// with the request's TID. `None` for anything else.
    pub fn no_listener(mad: &[u8]) -> Option<[u8; 256]> {
        let m = CmMad::parse(mad).ok()?;
        let msg = match m.msg {
            CmMsg::Req(r) => CmMsg::Rej(Rej {
                local_comm_id: 0,
                remote_comm_id: r.local_comm_id,
                message_rejected: MsgCode::Req,
                reason: rej_reason::INVALID_SERVICE_ID,
                ..Rej::default()
            }),
            CmMsg::SidrReq(r) => CmMsg::SidrRep(SidrRep {
                request_id: r.request_id,
                status: sidr_status::UNSUPPORTED,
                service_id: r.service_id,
                ..SidrRep::default()
            }),
            _ => return None,
        };
        Some(CmMad::send(m.tid, 0, msg).to_bytes())
    }

    fn mad(&mut self, msg: CmMsg) -> [u8; 256] {
        self.next_tid += 1;
        CmMad::send(self.next_tid, 0, msg).to_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{Mra, Rep, Req, Rtu};

    const A: Proc = 1;
    const P: Proc = 2;
    const X: Proc = 3;

    fn req(id: u32) -> [u8; 256] {
        CmMad::send(
            1,
            0,
            CmMsg::Req(Req {
                local_comm_id: id,
                local_qpn: 0x11,
                local_ca_guid: 0xa6,
                service_id: 0x1000,
                ..Req::default()
            }),
        )
        .to_bytes()
    }

    fn rep(id: u32, active: u32) -> [u8; 256] {
        CmMad::send(
            2,
            0,
            CmMsg::Rep(Rep {
                local_comm_id: id,
                remote_comm_id: active,
                local_qpn: 0x22,
                local_ca_guid: 0xb7,
                ..Rep::default()
            }),
        )
        .to_bytes()
    }

    fn rtu(id: u32, peer: u32) -> [u8; 256] {
        let m = Rtu {
            local_comm_id: id,
            remote_comm_id: peer,
            ..Rtu::default()
        };
        CmMad::send(3, 0, CmMsg::Rtu(m)).to_bytes()
    }

    fn dreq(id: u32, peer: u32) -> [u8; 256] {
        let m = Dreq {
            local_comm_id: id,
            remote_comm_id: peer,
            ..Dreq::default()
        };
        CmMad::send(4, 0, CmMsg::Dreq(m)).to_bytes()
    }

    fn drep(id: u32, peer: u32) -> [u8; 256] {
        let m = Drep {
            local_comm_id: id,
            remote_comm_id: peer,
            ..Drep::default()
        };
        CmMad::send(5, 0, CmMsg::Drep(m)).to_bytes()
    }

    /// An established connection: active A's comm ID 10, passive P's 20.
    fn established() -> Tracker {
        let mut t = Tracker::new();
        assert_eq!(t.observe(A, P, &req(10), 0), Verdict::Pass);
        assert_eq!(t.observe(P, A, &rep(20, 10), 0), Verdict::Pass);
        assert_eq!(t.observe(A, P, &rtu(10, 20), 0), Verdict::Pass);
        assert_eq!(t.state((A, 10)), Some(EndState::Established));
        assert_eq!(t.state((P, 20)), Some(EndState::Established));
        t
    }

    /// The host's stale-connection table: a REQ or REP naming a QP that
    /// an end of another connection owns is stale when that connection's
    /// local end is a process other than the MAD's (which its own engine
    /// checks), past its REP, and not in a disconnect.
    #[test]
    fn a_qp_named_again_for_another_process_is_stale() {
        let t = established();
        let any = |_| true;
        // A names its QP (0xa6, 0x11) again in a new REQ for X: P's
        // connection is the old one.
        let r11 = req(11);
        assert_eq!(t.stale_holder(A, X, &r11, any), Some((P, 0xa6, 0x11)));
        // For P itself: P's engine finds it. Its own REQ again: a
        // retransmission. P not a local process: not this host's.
        assert_eq!(t.stale_holder(A, P, &r11, any), None);
        assert_eq!(t.stale_holder(A, X, &req(10), any), None);
        assert_eq!(t.stale_holder(A, X, &r11, |p| p != P), None);
        // A REP naming P's QP (0xb7, 0x22), from another end, for X: A's
        // connection is the old one.
        assert_eq!(t.stale_holder(X, A, &rep(30, 40), any), None);
        assert_eq!(
            t.stale_holder(4, X, &rep(30, 40), any),
            Some((A, 0xb7, 0x22))
        );
        // Other MADs are never stale.
        assert_eq!(t.stale_holder(A, X, &rtu(10, 20), any), None);
        // The answer: REJ STALE_CONN of the REQ, its TID, the comm IDs
        // swapped.
        let m = CmMad::parse(&Tracker::stale_rej(&r11).unwrap()).unwrap();
        assert_eq!(m.tid, 1);
        let CmMsg::Rej(r) = m.msg else { panic!() };
        assert_eq!((r.local_comm_id, r.remote_comm_id), (0, 11));
        assert_eq!(r.message_rejected, MsgCode::Req);
        assert_eq!(r.reason, rej_reason::STALE_CONN);
        let m = CmMad::parse(&Tracker::stale_rej(&rep(30, 40)).unwrap()).unwrap();
        let CmMsg::Rej(r) = m.msg else { panic!() };
        assert_eq!((r.local_comm_id, r.remote_comm_id), (40, 30));
        assert_eq!(r.message_rejected, MsgCode::Rep);
        // In a disconnect the connection no longer counts (its CM may be
        // in timewait, out of the kernel's table).
        let mut t = established();
        assert_eq!(t.observe(P, A, &dreq(20, 10), 5), Verdict::Pass);
        assert_eq!(t.stale_holder(A, X, &r11, any), None);
        // Nor once its local process is gone (its DREQ went already).
        let mut t = established();
        t.process_gone(P, 5);
        assert_eq!(t.stale_holder(A, X, &r11, any), None);
    }

    /// A DREQ never answered leaves both ends in a disconnect: they go
    /// after the longest wait, with their QPs, as closed ends do.
    #[test]
    fn a_disconnect_never_answered_expires() {
        let mut t = established();
        assert_eq!(t.observe(A, P, &dreq(10, 20), 5), Verdict::Pass);
        assert_eq!(t.state((A, 10)), Some(EndState::DreqSent));
        assert_eq!(t.state((P, 20)), Some(EndState::DreqRcvd));
        // A retransmission does not restart the wait.
        assert_eq!(t.observe(A, P, &dreq(10, 20), 40), Verdict::Pass);
        t.expire(54, 50);
        assert_eq!((t.count_of(A), t.count_of(P)), (1, 1));
        t.expire(55, 50);
        assert_eq!((t.count_of(A), t.count_of(P)), (0, 0));
        assert!(t.qps.is_empty());
        // An established connection stays however old.
        let mut t = established();
        t.expire(1_000_000, 50);
        assert_eq!((t.count_of(A), t.count_of(P)), (1, 1));
        assert_eq!(t.qps.len(), 2);
    }

    /// Each process's ends are counted as they come and go (the service
    /// caps them per process), and introspection sees the open ones.
    #[test]
    fn ends_are_counted_per_process() {
        let mut t = established();
        assert_eq!((t.count_of(A), t.count_of(P)), (1, 1));
        let v = t.ends_of(|p| p == P);
        assert_eq!(v.len(), 1);
        assert_eq!(
            (v[0].comm, v[0].peer_comm, v[0].service_id),
            (20, 10, 0x1000)
        );
        // A retransmitted REQ is not a second end.
        assert_eq!(t.observe(A, P, &req(10), 1), Verdict::Pass);
        assert_eq!(t.count_of(A), 1);
        assert_eq!(t.observe(A, P, &req(11), 1), Verdict::Pass);
        assert_eq!(t.count_of(A), 2);
        // Closed ends count until they expire.
        assert_eq!(t.observe(A, P, &dreq(10, 20), 2), Verdict::Pass);
        assert_eq!(t.observe(P, A, &drep(20, 10), 2), Verdict::Pass);
        assert_eq!((t.count_of(A), t.count_of(P)), (2, 1));
        assert!(t.ends_of(|p| p == P).is_empty());
        t.expire(100, 50);
        assert_eq!((t.count_of(A), t.count_of(P)), (1, 0));
        // A process's death forgets its count.
        t.process_gone(A, 200);
        assert_eq!(t.count_of(A), 0);
    }

    fn parsed(m: &[u8; 256]) -> CmMsg {
        CmMad::parse(m).expect("a CM MAD").msg
    }

    #[test]
    fn a_whole_connection_leaves_nothing_behind() {
        let mut t = established();
        assert_eq!(t.observe(P, A, &dreq(20, 10), 0), Verdict::Pass);
        assert_eq!(t.state((P, 20)), Some(EndState::DreqSent));
        assert_eq!(t.state((A, 10)), Some(EndState::DreqRcvd));
        assert_eq!(t.observe(A, P, &drep(10, 20), 0), Verdict::Pass);
        assert!(t.is_empty());
        assert_eq!(t.refused(), 0);
        // Both ends are kept, closed: a retransmission of the DREP (the
        // first was lost) still passes as A's, not as anyone else's.
        assert_eq!(t.kept(), 2);
        assert_eq!(t.observe(A, P, &drep(10, 20), 5), Verdict::Pass);
        assert_eq!(t.observe(P, A, &dreq(20, 10), 6), Verdict::Pass);
        assert!(matches!(
            t.observe(X, P, &drep(10, 20), 7),
            Verdict::Refuse(_)
        ));
        t.expire(10_004, 10_000);
        assert_eq!(t.kept(), 2, "not yet: the retransmission at 5 renewed it");
        t.expire(10_005, 10_000);
        assert_eq!(t.kept(), 0);
        // A REQ refused by its passive side: gone too.
        let rej = Rej {
            local_comm_id: 0,
            remote_comm_id: 11,
            message_rejected: MsgCode::Req,
            reason: rej_reason::CONSUMER_DEFINED,
            ..Rej::default()
        };
        t.observe(A, P, &req(11), 0);
        assert_eq!(
            t.observe(P, A, &CmMad::send(6, 0, CmMsg::Rej(rej)).to_bytes(), 0),
            Verdict::Pass
        );
        assert!(t.is_empty());
    }

    #[test]
    fn a_process_speaks_only_for_its_own_comm_ids() {
        let mut t = established();
        // X disconnects A's connection, answers a REQ it never got, MRAs it.
        assert!(matches!(
            t.observe(X, P, &dreq(10, 20), 0),
            Verdict::Refuse(_)
        ));
        assert!(matches!(
            t.observe(X, A, &rep(30, 10), 0),
            Verdict::Refuse(_)
        ));
        let mra = Mra {
            local_comm_id: 30,
            remote_comm_id: 10,
            message_mraed: MsgCode::Req,
            ..Mra::default()
        };
        let mra = CmMad::send(7, 0, CmMsg::Mra(mra)).to_bytes();
        assert!(matches!(t.observe(X, A, &mra, 0), Verdict::Refuse(_)));
        assert!(matches!(
            t.observe(X, A, &drep(20, 10), 0),
            Verdict::Refuse(_)
        ));
        // A REJ of A's REQ, or of the connection, from X.
        for code in [MsgCode::Req, MsgCode::Other] {
            let rej = Rej {
                local_comm_id: 20,
                remote_comm_id: 10,
                message_rejected: code,
                reason: rej_reason::CONSUMER_DEFINED,
                ..Rej::default()
            };
            let rej = CmMad::send(8, 0, CmMsg::Rej(rej)).to_bytes();
            assert!(matches!(t.observe(X, A, &rej, 0), Verdict::Refuse(_)));
        }
        assert_eq!(t.refused(), 6);
        assert_eq!(t.state((A, 10)), Some(EndState::Established), "untouched");
        assert_eq!(t.state((P, 20)), Some(EndState::Established), "untouched");
        // Garbage passes untracked.
        assert_eq!(t.observe(X, A, &[0u8; 256], 0), Verdict::Pass);
    }

    #[test]
    fn a_dead_process_gets_the_kernels_messages_sent_for_it() {
        // Established, the active side dies: a DREQ to P with P's QPN.
        let mut t = established();
        let out = t.process_gone(A, 0);
        assert!(t.is_empty());
        let [(to, m)] = out.as_slice() else {
            panic!("{out:?}")
        };
        assert_eq!(*to, P);
        match parsed(m) {
            CmMsg::Dreq(d) => {
                assert_eq!(
                    (d.local_comm_id, d.remote_comm_id, d.remote_qpn),
                    (10, 20, 0x22)
                )
            }
            m => panic!("{m:?}"),
        }
        // The same, the passive side dies: a DREQ to A with A's QPN.
        let mut t = established();
        let out = t.process_gone(P, 0);
        match parsed(&out[0].1) {
            CmMsg::Dreq(d) => assert_eq!((out[0].0, d.remote_comm_id, d.remote_qpn), (A, 10, 0x11)),
            m => panic!("{m:?}"),
        }
        // REQ sent, no REP: REJ TIMEOUT with the active CA GUID as ARI.
        let mut t = Tracker::new();
        t.observe(A, P, &req(10), 0);
        let out = t.process_gone(A, 0);
        match parsed(&out[0].1) {
            CmMsg::Rej(r) => {
                assert_eq!(out[0].0, P);
                assert_eq!((r.local_comm_id, r.reason), (10, rej_reason::TIMEOUT));
                assert_eq!(r.message_rejected, MsgCode::Other);
                assert_eq!(&r.ari[..r.ari_length as usize], &0xa6u64.to_be_bytes());
            }
            m => panic!("{m:?}"),
        }
        // The passive side dies before answering: REJ of the REQ to A.
        let mut t = Tracker::new();
        t.observe(A, P, &req(10), 0);
        let out = t.process_gone(P, 0);
        assert!(t.is_empty());
        match parsed(&out[0].1) {
            CmMsg::Rej(r) => {
                assert_eq!(out[0].0, A);
                assert_eq!((r.remote_comm_id, r.message_rejected), (10, MsgCode::Req));
                assert_eq!(r.reason, rej_reason::CONSUMER_DEFINED);
            }
            m => panic!("{m:?}"),
        }
        // REP seen, no RTU: the active side's REJ of the REP; the passive
        // side's REJ (message other).
        for (dead, codes, to) in [
            (A, &[MsgCode::Rep][..], P),
            (P, &[MsgCode::Req, MsgCode::Other][..], A),
        ] {
            let mut t = Tracker::new();
            t.observe(A, P, &req(10), 0);
            t.observe(P, A, &rep(20, 10), 0);
            let out = t.process_gone(dead, 0);
            assert!(t.is_empty());
            assert_eq!(out.len(), codes.len());
            for ((got_to, m), code) in out.iter().zip(codes) {
                match parsed(m) {
                    CmMsg::Rej(r) => {
                        assert_eq!(*got_to, to);
                        assert_eq!(r.message_rejected, *code);
                        assert_eq!(r.reason, rej_reason::CONSUMER_DEFINED);
                        assert_eq!(
                            (r.local_comm_id, r.remote_comm_id),
                            if dead == A { (10, 20) } else { (20, 10) }
                        );
                    }
                    m => panic!("{m:?}"),
                }
            }
        }
        // DREQ received, not answered: a DREP; DREQ sent: the DREQ again.
        let mut t = established();
        t.observe(P, A, &dreq(20, 10), 0);
        let out = t.process_gone(A, 0);
        assert!(matches!(parsed(&out[0].1), CmMsg::Drep(d) if d.remote_comm_id == 20));
        let mut t = established();
        t.observe(P, A, &dreq(20, 10), 0);
        assert!(t.process_gone(P, 0).is_empty(), "not before its wait");
        let out = t.due(RESEND_MIN_MS, |_| true);
        assert!(matches!(parsed(&out[0].2), CmMsg::Dreq(d) if d.remote_comm_id == 10));
        assert!(t.is_empty());
    }

    /// A dead process's end that had sent a DREQ: the DREQ goes again
    /// only when its own wait (from the REQ's timeouts) passes with no
    /// DREP; a DREP queued behind the process's exit closes it first.
    #[test]
    fn a_dead_ends_dreq_goes_again_only_when_no_drep_came_in_its_wait() {
        // The REQ's timeouts: active (A) 2 × 2^(12-1-8) + 2^(14-8) = 80
        // ms; passive (P) 2^(13-8) = 32 ms, below the floor of 50.
        let mut r = CmMad::parse(&req(10)).unwrap();
        let CmMsg::Req(q) = &mut r.msg else { panic!() };
        q.primary.local_ack_timeout = 12;
        q.remote_cm_response_timeout = 14;
        q.local_cm_response_timeout = 13;
        let timed_req = r.to_bytes();
        let setup = |t: &mut Tracker| {
            t.observe(A, P, &timed_req, 0);
            t.observe(P, A, &rep(20, 10), 0);
            t.observe(A, P, &rtu(10, 20), 0);
        };
        // A sends its DREQ at 100 and dies at 101.
        let mut t = Tracker::new();
        setup(&mut t);
        t.observe(A, P, &dreq(10, 20), 100);
        assert!(t.process_gone(A, 101).is_empty());
        assert!(t.awaiting(|p| p == A));
        assert!(!t.awaiting(|p| p == P));
        assert!(t.due(179, |_| true).is_empty());
        assert!(t.due(500, |p| p != A).is_empty(), "another device's");
        let out = t.due(180, |_| true);
        let [(dead, to, m)] = out.as_slice() else {
            panic!("{out:?}")
        };
        assert_eq!((*dead, *to), (A, P));
        match parsed(m) {
            CmMsg::Dreq(d) => assert_eq!(
                (d.local_comm_id, d.remote_comm_id, d.remote_qpn),
                (10, 20, 0x22)
            ),
            m => panic!("{m:?}"),
        }
        assert!(t.due(10_000, |_| true).is_empty(), "once");
        assert!(!t.awaiting(|_| true));
        // The DREP came after the death (the service read the exit
        // first): answered for the dead, and nothing goes again.
        let mut t = Tracker::new();
        setup(&mut t);
        t.observe(A, P, &dreq(10, 20), 100);
        assert!(t.process_gone(A, 101).is_empty());
        assert_eq!(t.answer_gone(P, &drep(20, 10)), None);
        assert!(!t.awaiting(|_| true));
        assert!(t.due(10_000, |_| true).is_empty());
        // P's DREQ, P dies: its wait is the floor.
        let mut t = Tracker::new();
        setup(&mut t);
        t.observe(P, A, &dreq(20, 10), 100);
        assert!(t.process_gone(P, 101).is_empty());
        assert!(t.due(149, |_| true).is_empty());
        assert_eq!(t.due(150, |_| true).len(), 1);
        // Dead past its wait: at once, as an established end's DREQ.
        let mut t = Tracker::new();
        setup(&mut t);
        t.observe(A, P, &dreq(10, 20), 100);
        assert_eq!(t.process_gone(A, 180).len(), 1);
        assert!(!t.awaiting(|_| true));
    }

    /// What a hostile process hands over: valid MADs with random comm IDs
    /// and states, bytes flipped in them, short and random buffers. No
    /// panic; a process never changes another's ends; whatever a dead
    /// process leaves parses back as a CM MAD.
    #[test]
    fn hostile_mads_never_panic_nor_touch_other_processes() {
        let mut j = crate::testsupport::Junk(0x7ac);
        let mut t = established();
        let kinds: [fn(u32, u32) -> [u8; 256]; 5] = [
            |a, _| req(a),
            |a, b| rep(a, b),
            |a, b| rtu(a, b),
            |a, b| dreq(a, b),
            |a, b| drep(a, b),
        ];
        for i in 0..20_000u32 {
            let (a, b) = ((j.next_u64() % 40) as u32, (j.next_u64() % 40) as u32);
            let mut m = kinds[(j.next_u64() % 5) as usize](a, b);
            if i % 3 == 0 {
                let at = (j.next_u64() % 256) as usize;
                m[at] ^= j.next_u64() as u8 | 1;
            }
            let len = if i % 7 == 0 {
                (j.next_u64() % 256) as usize
            } else {
                256
            };
            let bytes = if i % 11 == 0 {
                j.bytes(len)
            } else {
                m[..len].to_vec()
            };
            let _ = t.observe(X, if i % 2 == 0 { A } else { P }, &bytes, 0);
        }
        assert_eq!(t.state((A, 10)), Some(EndState::Established));
        assert_eq!(t.state((P, 20)), Some(EndState::Established));
        assert!(t.refused() > 0);
        for (to, m) in t.process_gone(X, 0) {
            assert!(CmMad::parse(&m).is_ok(), "to {to}: not a CM MAD");
        }
        assert_eq!(t.state((A, 10)), Some(EndState::Established));
    }
}
