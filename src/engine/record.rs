//! The per-id record (the kernel's `cm_id_private`) and the bookkeeping
//! that keeps the engine's tables in step with an id's state: public-field
//! changes, the remote-ID and remote-QPN tables, half-open admission.

use super::timer::TimerKey;
use super::*;

/// The one retransmitted request an id may have outstanding.
pub(super) struct Outstanding {
    pub(super) mad: [u8; 256],
    pub(super) dest: MadDest,
    /// Retransmissions left.
    pub(super) retries_left: u8,
    pub(super) timeout_ms: u64,
    /// State recorded at send time (updated by an accepted MRA).
    pub(super) state_at_send: State,
}

/// Per-id protocol state (the kernel's `cm_id_private`).
pub(crate) struct IdRec {
    pub(super) state: State,
    pub(super) lap_state: LapState,
    pub(super) service_id: u64,
    pub(super) remote_id: u32,
    pub(super) tid: u64,
    pub(super) remote_ca_guid: u64,
    pub(super) remote_qpn: u32,
    pub(super) local_qpn: u32,
    pub(super) sq_psn: u32,
    pub(super) rq_psn: u32,
    pub(super) qp_type: u32,
    pub(super) initiator_depth: u8,
    pub(super) responder_resources: u8,
    pub(super) retry_count: u8,
    pub(super) rnr_retry_count: u8,
    pub(super) max_cm_retries: u8,
    pub(super) target_ack_delay: u8,
    pub(super) path_mtu: u8,
    pub(super) pkey: u16,
    pub(super) timeout_ms: u64,
    pub(super) av: Av,
    pub(super) alt_av: Option<Box<Av>>,
    pub(super) dlid_datapath: u32,
    /// The kernel's `timewait_info` exists (consumed by timewait or reset).
    pub(super) has_tw: bool,
    /// Registered in this shard's (remote CA GUID, remote comm ID) table.
    pub(super) in_remote_id: bool,
    /// Registered in the device's (remote CA GUID, remote QPN) table.
    pub(super) in_remote_qp: bool,
    /// Counted as a half-open passive connection.
    pub(super) half_open: bool,
    /// The source it is counted against while half-open.
    pub(super) half_open_src: Gid,
    /// Its entry in the eviction queues (0 = not evictable).
    pub(super) evict_seq: u64,
    pub(super) send: Option<Box<Outstanding>>,
    pub(super) timer: Option<TimerKey>,
    /// Private data of the last RTU/DREP, re-sent on duplicates.
    pub(super) saved_pdata: Option<Box<[u8]>>,
    /// LISTEN: number of `ib_cm_insert_listen` users.
    pub(super) listen_shares: u32,
    /// SIDR responder: key in the duplicate table.
    pub(super) sidr_key: Option<(Gid, u32)>,
    /// `Engine::set_prepare_mra_on_report`: a REQ_RECEIVED (on the ids a
    /// listener creates) or REP_RECEIVED reported for this id leaves it
    /// MRA_REQ_SENT / MRA_REP_SENT, as `ib_prepare_cm_mra` would.
    pub(super) mra_on_report: bool,
}

impl IdRec {
    pub(super) fn new() -> IdRec {
        IdRec {
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
            mra_on_report: false,
        }
    }
}

/// States in which a passive connection is half-open.
pub(super) fn is_half_open_state(s: State) -> bool {
    matches!(
        s,
        State::ReqRcvd | State::MraReqSent | State::RepSent | State::MraRepRcvd
    )
}

impl Engine {
    pub(super) fn rec(&self, h: Handle) -> Result<&IdRec, Errno> {
        self.ids.get(h.0 as u32).ok_or(Errno::EINVAL)
    }

    /// Records the public fields of `id` for the runtime.
    pub(super) fn changed(&mut self, id: u32) {
        if let Some(r) = self.ids.get(id) {
            self.changes.push_back(Change {
                id: Handle(id as u64),
                state: r.state,
                lap_state: r.lap_state,
                remote_id: r.remote_id,
                service_id: r.service_id,
            });
        }
    }

    pub(super) fn set_state(&mut self, id: u32, s: State) {
        if let Some(r) = self.ids.get_mut(id) {
            let was = is_half_open_state(r.state) && r.half_open;
            r.state = s;
            if was && !is_half_open_state(s) {
                self.leave_half_open(id);
            }
        }
        self.changed(id);
    }

    pub(super) fn unregister_remote(&mut self, id: u32) {
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
    pub(super) fn reset_to_idle(&mut self, id: u32) {
        self.unregister_remote(id);
        if let Some(r) = self.ids.get_mut(id) {
            r.has_tw = false;
        }
        self.set_state(id, State::Idle);
    }

    pub(super) fn leave_sidr_table(&mut self, id: u32) {
        if let Some(key) = self.ids.get_mut(id).and_then(|r| r.sidr_key.take())
            && self.sidr_remote.get(&key) == Some(&id)
        {
            self.sidr_remote.remove(&key);
        }
    }

    /// `id` stops counting as half-open (it left the half-open states or
    /// is going away).
    pub(super) fn leave_half_open(&mut self, id: u32) {
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
    pub(super) fn evictable(ids: &IdSlab<IdRec>, e: admission::Entry) -> bool {
        ids.get(e.id).is_some_and(|r| {
            r.half_open
                && r.evict_seq == e.seq
                && matches!(r.state, State::RepSent | State::MraRepRcvd)
        })
    }

    /// Makes room for one more half-open connection from `source`
    /// (`admission` module docs). False: nothing could be evicted.
    pub(super) fn make_half_open_room(&mut self, source: &Gid) -> bool {
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
    pub(super) fn evict(&mut self, id: u32, per_source: bool) {
        let Some(r) = self.ids.get(id) else { return };
        let source = r.half_open_src;
        self.cancel_send(id);
        self.reset_to_idle(id);
        self.counters.half_open_evicted += 1;
        self.notice(Notice::Evicted {
            local_id: id,
            source,
            per_source,
        });
        let status = EventParam::SendStatus(WC_RESP_TIMEOUT_ERR);
        self.event(id, EventType::RepError, status, None);
    }

    /// A half-open connection sent its REP: from now on it may be evicted.
    pub(super) fn queue_evictable(&mut self, id: u32) {
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
}
