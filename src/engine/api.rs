//! The consumer API (`ib_create_cm_id`, `ib_cm_listen`, `ib_send_cm_*`,
//! `ib_destroy_cm_id`, ...): each call checks the id's state, changes it
//! and queues the MAD it sends, as the kernel's function of the same name.

use super::*;

/// A consumer call whose errno is decided by its arguments and the id's
/// state alone. [`Call::check`] is the one place those checks live: the
/// engine makes them before it acts, and a process served by the host CM
/// service makes the same ones on its copy of the id's state to send the
/// call without waiting for the service's answer (`runtime::remote`).
#[derive(Debug, Clone, Copy)]
pub enum Call<'a> {
    Req(&'a ReqParams),
    Rep(&'a RepParams),
    Rtu(&'a [u8]),
    Dreq(&'a [u8]),
    Drep(&'a [u8]),
    Rej {
        ari: &'a [u8],
        private_data: &'a [u8],
    },
}

impl Call<'_> {
    /// The checks of `ib_send_cm_*` — arguments first, then the id's
    /// `state` — and the state the call leaves the id in. `has_tw`: the id
    /// still holds a timewait entry from an earlier connection (only the
    /// engine knows it; a process passes `false` and the service decides).
    pub fn check(&self, state: State, has_tw: bool) -> ApiResult<State> {
        use State::*;
        match *self {
            Call::Req(p) => {
                if !matches!(p.qp_type, qp_type::RC | qp_type::UC | qp_type::XRC_INI) {
                    return Err(Errno::EINVAL);
                }
                Engine::check_len(&p.private_data, pdata::REQ)?;
                if let Some(alt) = &p.alternate_path
                    && (alt.pkey != p.primary_path.pkey || alt.mtu != p.primary_path.mtu)
                {
                    return Err(Errno::EINVAL);
                }
                match state {
                    Idle if !has_tw => Ok(ReqSent),
                    _ => Err(Errno::EINVAL),
                }
            }
            Call::Rep(p) => {
                Engine::check_len(&p.private_data, pdata::REP)?;
                match state {
                    ReqRcvd | MraReqSent => Ok(RepSent),
                    _ => Err(Errno::EINVAL),
                }
            }
            Call::Rtu(pd) => {
                Engine::check_len(pd, pdata::RTU)?;
                match state {
                    RepRcvd | MraRepSent => Ok(Established),
                    _ => Err(Errno::EINVAL),
                }
            }
            Call::Dreq(pd) => {
                Engine::check_len(pd, pdata::DREQ)?;
                match state {
                    Established => Ok(DreqSent),
                    _ => Err(Errno::EINVAL),
                }
            }
            Call::Drep(pd) => {
                Engine::check_len(pd, pdata::DREP)?;
                match state {
                    DreqRcvd => Ok(Timewait),
                    _ => Err(Errno::EINVAL),
                }
            }
            Call::Rej { ari, private_data } => {
                Engine::check_len(private_data, pdata::REJ)?;
                Engine::check_len(ari, pdata::REJ_ARI)?;
                match state {
                    ReqSent | MraReqRcvd | ReqRcvd | MraReqSent | RepRcvd | MraRepSent => Ok(Idle),
                    RepSent | MraRepRcvd => Ok(Timewait),
                    _ => Err(Errno::EINVAL),
                }
            }
        }
    }
}

impl Engine {
    /// `ib_create_cm_id`: a new id in IDLE, visible at once.
    pub fn create_id(&mut self) -> ApiResult<Handle> {
        let id = self.ids.insert_with(|_| IdRec::new()).ok_or(Errno::EBUSY)?;
        self.counters.ids_created += 1;
        Ok(Handle(id as u64))
    }

    pub(super) fn check_service_id(&self, service_id: u64) -> ApiResult<u64> {
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
    pub(super) fn listen_checked(
        &mut self,
        h: Handle,
        service_id: u64,
        key: Option<u64>,
    ) -> ApiResult {
        let id = h.0 as u32;
        self.rec(h)?;
        let entry = ListenEntry {
            shard: self.cfg.shard,
            local_id: id,
            share_key: key,
            mra_on_report: self.rec(h)?.mra_on_report,
        };
        self.shared.listen_insert(service_id, entry).map_err(|_| {
            if key.is_some() {
                Errno::EINVAL
            } else {
                Errno::EBUSY
            }
        })?;
        if let Err(e) = self.shared.claim_host(service_id) {
            // Another process's listener: what this table says of another
            // id's (a shared insert_listen of another owner is -EINVAL).
            self.shared.listen_unregister(service_id, id);
            return Err(if e == Errno::EBUSY && key.is_some() {
                Errno::EINVAL
            } else {
                e
            });
        }
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
    pub fn insert_listen(&mut self, service_id: u64, key: u64) -> ApiResult<(Handle, bool)> {
        let service_id = self.check_service_id(service_id)?;
        if let Some(e) = self.shared.listen_lookup(service_id) {
            if e.share_key != Some(key) || e.shard != self.cfg.shard {
                return Err(Errno::EINVAL);
            }
            self.share_listener(Handle(e.local_id as u64))?;
            return Ok((Handle(e.local_id as u64), true));
        }
        let h = self.create_id()?;
        if let Err(e) = self.listen_checked(h, service_id, Some(key)) {
            self.ids.remove(h.0 as u32);
            self.counters.ids_destroyed += 1;
            return Err(e);
        }
        Ok((h, false))
    }

    /// `ib_send_cm_req`.
    pub fn send_req(&mut self, now: Time, h: Handle, p: &ReqParams) -> ApiResult {
        let id = h.0 as u32;
        let r = self.rec(h)?;
        let next = Call::Req(p).check(r.state, r.has_tw)?;
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
        self.set_state(id, next);
        self.send_request(now, id, mad, timeout_ms, retries);
        Ok(())
    }

    /// `ib_send_cm_rep`.
    pub fn send_rep(&mut self, now: Time, h: Handle, p: &RepParams) -> ApiResult {
        let id = h.0 as u32;
        let r = self.rec(h)?;
        let next = Call::Rep(p).check(r.state, r.has_tw)?;
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
        self.set_state(id, next);
        self.send_request(now, id, mad, timeout, retries);
        self.queue_evictable(id);
        Ok(())
    }

    /// `ib_send_cm_rtu`.
    pub fn send_rtu(&mut self, h: Handle, private_data: &[u8]) -> ApiResult {
        let id = h.0 as u32;
        let r = self.rec(h)?;
        let next = Call::Rtu(private_data).check(r.state, r.has_tw)?;
        let rtu = Rtu {
            local_comm_id: id,
            remote_comm_id: r.remote_id,
            private_data: pdata_area(private_data),
        };
        let mad = CmMad::send(r.tid, 0, CmMsg::Rtu(rtu)).to_bytes();
        let r = self.ids.get_mut(id).unwrap();
        r.saved_pdata = (!private_data.is_empty()).then(|| private_data.into());
        self.set_state(id, next);
        self.send_once(id, mad);
        Ok(())
    }

    pub(super) fn dreq_mad(&self, id: u32, r: &IdRec, private_data: &[u8]) -> [u8; 256] {
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
        let r = self.rec(h)?;
        let next = Call::Dreq(private_data).check(r.state, r.has_tw)?;
        let mad = self.dreq_mad(id, r, private_data);
        let (timeout, retries) = (r.timeout_ms, r.max_cm_retries);
        // As the kernel: the DREQ's new TID is not remembered; a DREP
        // re-sent from timewait carries the id's REQ (or received DREQ) TID.
        let r = self.ids.get_mut(id).unwrap();
        if matches!(r.lap_state, LapState::Sent | LapState::MraRcvd) {
            r.lap_state = LapState::Idle;
        }
        self.cancel_send(id);
        self.set_state(id, next);
        self.send_request(now, id, mad, timeout, retries);
        Ok(())
    }

    pub(super) fn drep_mad(id: u32, r: &IdRec, private_data: &[u8]) -> [u8; 256] {
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
        let r = self.rec(h)?;
        // Always timewait (`Call::check`'s answer) when the state is right.
        Call::Drep(private_data).check(r.state, r.has_tw)?;
        let mad = Self::drep_mad(id, r, private_data);
        let r = self.ids.get_mut(id).unwrap();
        r.saved_pdata = (!private_data.is_empty()).then(|| private_data.into());
        self.enter_timewait(now, id);
        self.send_once(id, mad);
        Ok(())
    }

    /// The REJ an id sends (`cm_format_rej`), from its current state.
    pub(super) fn rej_mad(
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
        let r = self.rec(h)?;
        let next = Call::Rej { ari, private_data }.check(r.state, r.has_tw)?;
        let mad = self.rej_mad(id, r, reason as u16, ari, private_data);
        // ibcm: the kernel leaves an outstanding REQ retransmitting after
        // its own REJ; we stop it, so the peer never sees a REQ for a
        // connection we rejected.
        self.cancel_send(id);
        if next == State::Idle {
            self.reset_to_idle(id);
        } else {
            self.enter_timewait(now, id);
        }
        self.send_once(id, mad);
        Ok(())
    }

    /// `ib_prepare_cm_mra`: a pure state change; an MRA goes out only when
    /// a duplicate arrives.
    pub fn prepare_mra(&mut self, h: Handle) -> ApiResult {
        let id = h.0 as u32;
        let r = self.rec(h)?;
        match (mra_sent_state(r.state), r.state, r.lap_state) {
            (Some(next), _, _) => self.mra_prepared(id, next),
            (None, State::Established, LapState::Rcvd) => {
                self.ids.get_mut(id).unwrap().lap_state = LapState::MraSent;
                self.changed(id);
                self.ids.get_mut(id).unwrap().saved_pdata = None;
            }
            _ => return Err(Errno::EINVAL),
        }
        Ok(())
    }

    /// REQ_RCVD / REP_RCVD → `next` (from `mra_sent_state`): the MRA is
    /// prepared; what the id had saved to re-send is dropped.
    pub(super) fn mra_prepared(&mut self, id: u32, next: State) {
        self.set_state(id, next);
        self.ids.get_mut(id).unwrap().saved_pdata = None;
    }

    /// rdma_cm's own MRA preparation, done where the kernel's rdma_cm
    /// does it but without waiting for the consumer: with `on`, a
    /// REQ_RECEIVED (RC/UC/XRC, not SIDR) on an id this listener creates,
    /// or a REP_RECEIVED on this id, leaves the id MRA_REQ_SENT /
    /// MRA_REP_SENT at the moment the event is queued — exactly the state
    /// `prepare_mra` sets — so a duplicate arriving before the consumer
    /// answers is answered with an MRA (service timeout 24) instead of
    /// being dropped. The ids a listener creates inherit the flag; set on
    /// a listening id it applies to its later REQs. Any state.
    pub fn set_prepare_mra_on_report(&mut self, h: Handle, on: bool) -> ApiResult {
        let id = h.0 as u32;
        let r = self.rec(h)?;
        let (state, service_id) = (r.state, r.service_id);
        self.ids.get_mut(id).unwrap().mra_on_report = on;
        if state == State::Listen {
            self.shared
                .listen_set_mra(service_id, self.cfg.shard, id, on);
        }
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

    pub(super) fn sidr_rep_mad(r: &IdRec, p: &SidrRepParams) -> [u8; 256] {
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

    /// A pseudo-random 24-bit PSN (for tools that need one).
    pub fn random_psn(&mut self) -> u32 {
        (self.next_rand() & 0xff_ffff) as u32
    }

    pub(super) fn check_len(data: &[u8], max: usize) -> ApiResult {
        if data.len() > max {
            Err(Errno::EINVAL)
        } else {
            Ok(())
        }
    }
}

/// The state `prepare_mra` moves a received REQ or REP to.
pub(super) fn mra_sent_state(s: State) -> Option<State> {
    match s {
        State::ReqRcvd => Some(State::MraReqSent),
        State::RepRcvd => Some(State::MraRepSent),
        _ => None,
    }
}
