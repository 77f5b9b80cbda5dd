//! Design B's connection tracker (docs/SERVICE.md, Rounds 18–19): what a
//! host CM service that only forwards MADs between protocol engines
//! running in the processes must know about every connection to answer
//! for a process that dies, and to hold every process to its own comm
//! IDs. Not used by the service today (design A runs the engines in the
//! service, which then knows all of this); `examples/forward_cost.rs`'s
//! forwarder runs it, to measure its cost and prove its answers.
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
//! | passive, REP sent, no RTU | REJ `CONSUMER_DEFINED`, message other |
//! | established | DREQ (the peer's QPN) |
//! | DREQ received, not answered | DREP |
//! | DREQ sent | nothing (timewait) |
//!
//! A MAD is refused when its sender speaks for a comm ID that is not its
//! own: an RTU, DREQ, DREP, MRA of a REP or REJ after the REQ whose
//! (sender, local comm ID) has no end, a REP or an MRA or REJ of a REQ
//! from a process the REQ was not delivered to. REQs, LAPs, APRs, SIDR and
//! ClassPortInfo are not tracked (a REQ starts an end).

use crate::wire::{CmMad, CmMsg, Drep, Dreq, MsgCode, Rej, rej_reason};
use std::collections::HashMap;

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
}

/// What [`Tracker::observe`] says of a MAD.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    /// The sender spoke for a comm ID that is not its own (the reason).
    Refuse(&'static str),
}

/// See the module documentation.
#[derive(Debug, Default)]
pub struct Tracker {
    ends: HashMap<EndKey, End>,
    /// Transaction IDs of the MADs this tracker makes.
    next_tid: u64,
    refused: u64,
}

impl Tracker {
    pub fn new() -> Tracker {
        Tracker {
            next_tid: 0x7ac0_0000_0000_0000,
            ..Tracker::default()
        }
    }

    /// Ends tracked.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
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
    pub fn observe(&mut self, from: Proc, to: Proc, mad: &[u8]) -> Verdict {
        let v = match CmMad::parse(mad) {
            Ok(m) => self.note(from, to, &m.msg),
            Err(_) => Verdict::Pass,
        };
        if v != Verdict::Pass {
            self.refused += 1;
        }
        v
    }

    fn note(&mut self, from: Proc, to: Proc, msg: &CmMsg) -> Verdict {
        match msg {
            CmMsg::Req(r) => {
                self.ends.entry((from, r.local_comm_id)).or_insert(End {
                    state: EndState::ReqSent,
                    peer_proc: to,
                    peer_comm: 0,
                    qpn: r.local_qpn,
                    ca_guid: r.local_ca_guid,
                });
                Verdict::Pass
            }
            CmMsg::Rep(r) => {
                let active = (to, r.remote_comm_id);
                match self.ends.get_mut(&active) {
                    Some(a) if a.peer_proc == from => {
                        if a.state == EndState::ReqSent {
                            a.state = EndState::RepRcvd;
                        }
                        a.peer_comm = r.local_comm_id;
                    }
                    _ => return Verdict::Refuse("a REP for a REQ this process did not get"),
                }
                self.ends.entry((from, r.local_comm_id)).or_insert(End {
                    state: EndState::RepSent,
                    peer_proc: to,
                    peer_comm: r.remote_comm_id,
                    qpn: r.local_qpn,
                    ca_guid: r.local_ca_guid,
                });
                Verdict::Pass
            }
            CmMsg::Rtu(r) => self.step(from, r.local_comm_id, |mine, peer| {
                *mine = EndState::Established;
                if let Some(p) = peer {
                    *p = EndState::Established;
                }
            }),
            CmMsg::Dreq(r) => self.step(from, r.local_comm_id, |mine, peer| {
                *mine = EndState::DreqSent;
                if let Some(p) = peer {
                    *p = EndState::DreqRcvd;
                }
            }),
            CmMsg::Drep(r) => match self.ends.remove(&(from, r.local_comm_id)) {
                Some(e) => {
                    self.ends.remove(&(e.peer_proc, e.peer_comm));
                    Verdict::Pass
                }
                None => Verdict::Refuse("a DREP for a comm ID not its own"),
            },
            CmMsg::Rej(r) if r.message_rejected == MsgCode::Req => {
                // The passive side refuses a REQ: its own comm ID is not
                // known yet; the REQ must have gone to it.
                self.close_active(from, (to, r.remote_comm_id))
            }
            CmMsg::Rej(r) => match self.ends.remove(&(from, r.local_comm_id)) {
                Some(e) => {
                    if e.peer_comm != 0 {
                        self.ends.remove(&(e.peer_proc, e.peer_comm));
                    }
                    Verdict::Pass
                }
                None => Verdict::Refuse("a REJ for a comm ID not its own"),
            },
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

    /// Moves end (`from`, `local`) and its peer's, if known.
    fn step(
        &mut self,
        from: Proc,
        local: u32,
        f: impl FnOnce(&mut EndState, Option<&mut EndState>),
    ) -> Verdict {
        let Some(mine) = self.ends.get(&(from, local)).copied() else {
            return Verdict::Refuse("a message for a comm ID not its own");
        };
        let mut me = mine.state;
        let peer_key = (mine.peer_proc, mine.peer_comm);
        let mut peer = (mine.peer_comm != 0)
            .then(|| self.ends.get(&peer_key).map(|p| p.state))
            .flatten();
        f(&mut me, peer.as_mut());
        if let Some(e) = self.ends.get_mut(&(from, local)) {
            e.state = me;
        }
        if let (Some(s), Some(p)) = (peer, self.ends.get_mut(&peer_key)) {
            p.state = s;
        }
        Verdict::Pass
    }

    /// A REQ refused by `passive`: the active end goes.
    fn close_active(&mut self, passive: Proc, active: EndKey) -> Verdict {
        match self.ends.get(&active) {
            Some(a) if a.peer_proc == passive => {
                self.ends.remove(&active);
                Verdict::Pass
            }
            _ => Verdict::Refuse("a REJ of a REQ this process did not get"),
        }
    }

    /// Process `p` is gone: forgets its ends and their peers' and returns
    /// the MADs the kernel's CM would have sent for each of them, with the
    /// process each goes to (the table in the module documentation).
    pub fn process_gone(&mut self, p: Proc) -> Vec<(Proc, [u8; 256])> {
        let mut out = Vec::new();
        let dead: Vec<(EndKey, End)> = self
            .ends
            .iter()
            .filter(|(k, _)| k.0 == p)
            .map(|(k, e)| (*k, *e))
            .collect();
        for (k, e) in dead {
            self.ends.remove(&k);
            let peer = self
                .ends
                .remove(&(e.peer_proc, e.peer_comm))
                .filter(|_| e.peer_comm != 0);
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
            let msg = match e.state {
                EndState::ReqSent => Some(rej(
                    MsgCode::Other,
                    rej_reason::TIMEOUT,
                    &e.ca_guid.to_be_bytes(),
                )),
                EndState::RepRcvd => Some(rej(MsgCode::Rep, rej_reason::CONSUMER_DEFINED, &[])),
                EndState::RepSent => Some(rej(MsgCode::Other, rej_reason::CONSUMER_DEFINED, &[])),
                EndState::Established => peer.map(|peer| {
                    CmMsg::Dreq(Dreq {
                        local_comm_id: k.1,
                        remote_comm_id: e.peer_comm,
                        remote_qpn: peer.qpn,
                        ..Dreq::default()
                    })
                }),
                EndState::DreqRcvd => Some(CmMsg::Drep(Drep {
                    local_comm_id: k.1,
                    remote_comm_id: e.peer_comm,
                    ..Drep::default()
                })),
                EndState::DreqSent => None,
            };
            if let Some(m) = msg {
                out.push((e.peer_proc, self.mad(m)));
            }
        }
        // REQs delivered to `p` and not answered: the passive side's REJ.
        let waiting: Vec<EndKey> = self
            .ends
            .iter()
            .filter(|(_, e)| e.peer_proc == p && e.state == EndState::ReqSent)
            .map(|(k, _)| *k)
            .collect();
        for a in waiting {
            self.ends.remove(&a);
            let m = CmMsg::Rej(Rej {
                local_comm_id: 0,
                remote_comm_id: a.1,
                message_rejected: MsgCode::Req,
                reason: rej_reason::CONSUMER_DEFINED,
                ..Rej::default()
            });
            out.push((a.0, self.mad(m)));
        }
        out
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
        assert_eq!(t.observe(A, P, &req(10)), Verdict::Pass);
        assert_eq!(t.observe(P, A, &rep(20, 10)), Verdict::Pass);
        assert_eq!(t.observe(A, P, &rtu(10, 20)), Verdict::Pass);
        assert_eq!(t.state((A, 10)), Some(EndState::Established));
        assert_eq!(t.state((P, 20)), Some(EndState::Established));
        t
    }

    fn parsed(m: &[u8; 256]) -> CmMsg {
        CmMad::parse(m).expect("a CM MAD").msg
    }

    #[test]
    fn a_whole_connection_leaves_nothing_behind() {
        let mut t = established();
        assert_eq!(t.observe(P, A, &dreq(20, 10)), Verdict::Pass);
        assert_eq!(t.state((P, 20)), Some(EndState::DreqSent));
        assert_eq!(t.state((A, 10)), Some(EndState::DreqRcvd));
        assert_eq!(t.observe(A, P, &drep(10, 20)), Verdict::Pass);
        assert!(t.is_empty());
        assert_eq!(t.refused(), 0);
        // A REQ refused by its passive side: gone too.
        let rej = Rej {
            local_comm_id: 0,
            remote_comm_id: 11,
            message_rejected: MsgCode::Req,
            reason: rej_reason::CONSUMER_DEFINED,
            ..Rej::default()
        };
        t.observe(A, P, &req(11));
        assert_eq!(
            t.observe(P, A, &CmMad::send(6, 0, CmMsg::Rej(rej)).to_bytes()),
            Verdict::Pass
        );
        assert!(t.is_empty());
    }

    #[test]
    fn a_process_speaks_only_for_its_own_comm_ids() {
        let mut t = established();
        // X disconnects A's connection, answers a REQ it never got, MRAs it.
        assert!(matches!(t.observe(X, P, &dreq(10, 20)), Verdict::Refuse(_)));
        assert!(matches!(t.observe(X, A, &rep(30, 10)), Verdict::Refuse(_)));
        let mra = Mra {
            local_comm_id: 30,
            remote_comm_id: 10,
            message_mraed: MsgCode::Req,
            ..Mra::default()
        };
        let mra = CmMad::send(7, 0, CmMsg::Mra(mra)).to_bytes();
        assert!(matches!(t.observe(X, A, &mra), Verdict::Refuse(_)));
        assert!(matches!(t.observe(X, A, &drep(20, 10)), Verdict::Refuse(_)));
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
            assert!(matches!(t.observe(X, A, &rej), Verdict::Refuse(_)));
        }
        assert_eq!(t.refused(), 6);
        assert_eq!(t.state((A, 10)), Some(EndState::Established), "untouched");
        assert_eq!(t.state((P, 20)), Some(EndState::Established), "untouched");
        // Garbage passes untracked.
        assert_eq!(t.observe(X, A, &[0u8; 256]), Verdict::Pass);
    }

    #[test]
    fn a_dead_process_gets_the_kernels_messages_sent_for_it() {
        // Established, the active side dies: a DREQ to P with P's QPN.
        let mut t = established();
        let out = t.process_gone(A);
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
        let out = t.process_gone(P);
        match parsed(&out[0].1) {
            CmMsg::Dreq(d) => assert_eq!((out[0].0, d.remote_comm_id, d.remote_qpn), (A, 10, 0x11)),
            m => panic!("{m:?}"),
        }
        // REQ sent, no REP: REJ TIMEOUT with the active CA GUID as ARI.
        let mut t = Tracker::new();
        t.observe(A, P, &req(10));
        let out = t.process_gone(A);
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
        t.observe(A, P, &req(10));
        let out = t.process_gone(P);
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
        for (dead, code, to) in [(A, MsgCode::Rep, P), (P, MsgCode::Other, A)] {
            let mut t = Tracker::new();
            t.observe(A, P, &req(10));
            t.observe(P, A, &rep(20, 10));
            let out = t.process_gone(dead);
            assert!(t.is_empty());
            match parsed(&out[0].1) {
                CmMsg::Rej(r) => {
                    assert_eq!(out[0].0, to);
                    assert_eq!(r.message_rejected, code);
                    assert_eq!(r.reason, rej_reason::CONSUMER_DEFINED);
                }
                m => panic!("{m:?}"),
            }
        }
        // DREQ received, not answered: a DREP; DREQ sent: nothing.
        let mut t = established();
        t.observe(P, A, &dreq(20, 10));
        let out = t.process_gone(A);
        assert!(matches!(parsed(&out[0].1), CmMsg::Drep(d) if d.remote_comm_id == 20));
        let mut t = established();
        t.observe(P, A, &dreq(20, 10));
        assert!(t.process_gone(P).is_empty());
        assert!(t.is_empty());
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
            let _ = t.observe(X, if i % 2 == 0 { A } else { P }, &bytes);
        }
        assert_eq!(t.state((A, 10)), Some(EndState::Established));
        assert_eq!(t.state((P, 20)), Some(EndState::Established));
        assert!(t.refused() > 0);
        for (to, m) in t.process_gone(X) {
            assert!(CmMad::parse(&m).is_ok(), "to {to}: not a CM MAD");
        }
        assert_eq!(t.state((A, 10)), Some(EndState::Established));
    }
}
