//! Received MADs: parsing, dispatch and one handler per attribute, after
//! the kernel's `cm_*_handler` functions (CM_RULES.md §req-received,
//! §duplicates-and-stale).

use super::api::mra_sent_state;
use super::counters::{DropCause, attr_index};
use super::*;
use crate::wire::{
    self, ClassPortInfo, Lap, MadHeader, Mra, SidrReq, method,
    peek::{self, Addressing},
    rej_reason, sidr_status, status as mad_status,
};

/// Why `handle_mad` dropped a MAD (also counted in `Counters::drops`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dropped {
    /// Could not be parsed as a CM MAD.
    Malformed(wire::Error),
    /// Well-formed but not acted on.
    Other(DropCause, &'static str),
}

impl Dropped {
    pub fn cause(&self) -> DropCause {
        match self {
            Dropped::Malformed(_) => DropCause::Malformed,
            Dropped::Other(c, _) => *c,
        }
    }
}

impl std::fmt::Display for Dropped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Dropped::Malformed(e) => write!(f, "malformed MAD: {e}"),
            Dropped::Other(c, why) => {
                write!(f, "{}: {why}", super::counters::DROP_NAMES[*c as usize])
            }
        }
    }
}

type Handled = Result<(), Dropped>;

const STALE_REQ: &str = "stale connection: REJ(STALE_CONN), DREQ to the old one";
const STALE_REP: &str = "stale connection on REP: REJ(STALE_CONN)";

fn drop_(cause: DropCause, why: &'static str) -> Handled {
    Err(Dropped::Other(cause, why))
}

/// The MRA id `id` sent for the message `code` (its saved private data),
/// again: the answer to a duplicate of that message.
fn mra_again(id: u32, rec: &IdRec, code: MsgCode) -> [u8; 256] {
    let mra = Mra {
        local_comm_id: id,
        remote_comm_id: rec.remote_id,
        message_mraed: code,
        service_timeout: MRA_SETTING,
        private_data: pdata_area(rec.saved_pdata.as_deref().unwrap_or(&[])),
    };
    CmMad::send(rec.tid, 0, CmMsg::Mra(mra)).to_bytes()
}

/// The path record the passive side builds from a REQ (CM_RULES.md
/// §path-from-req).
fn path_from_req(
    r: &Req,
    p: &ReqPath,
    rec_type: PathRecType,
    primary: bool,
    src: &MadSource,
) -> PathRec {
    let ib = !rec_type.is_roce();
    PathRec {
        dgid: p.local_gid,
        sgid: p.remote_gid,
        service_id: r.service_id,
        flow_label: p.flow_label,
        hop_limit: p.hop_limit,
        traffic_class: p.traffic_class,
        reversible: 1,
        numb_path: 0,
        pkey: r.pkey,
        qos_class: 0,
        sl: p.sl,
        mtu_selector: SA_EQ,
        mtu: r.path_mtu,
        rate_selector: SA_EQ,
        rate: p.packet_rate,
        packet_life_time_selector: SA_EQ,
        packet_life_time: p.local_ack_timeout.saturating_sub(1),
        preference: 0,
        rec_type,
        flags: 0,
        dlid: if !ib {
            0
        } else if primary {
            src.slid as u32
        } else {
            p.local_lid as u32
        },
        slid: if ib { p.remote_lid as u32 } else { 0 },
        raw_traffic: 0,
        route_resolved: false,
        dmac: [0; 6],
    }
}

/// The key a REQ's half-open connection is counted against: its GRH
/// source GID, or without a GRH its SLID (as a link-local GID).
fn source_key(src: &MadSource) -> Gid {
    if src.has_grh {
        src.sgid
    } else {
        Gid::from_lid(src.slid)
    }
}

/// Whether a REP to `theirs` (a REQ's primary LocalGID) can leave a RoCE
/// port whose GID `ours` received the REQ: a unicast, non-zero GID of the
/// same family (IPv4-mapped or not).
fn usable_requester_gid(ours: &Gid, theirs: &Gid) -> bool {
    let ip = std::net::Ipv6Addr::from(theirs.0);
    if ip.is_unspecified() || ip.is_multicast() {
        return false;
    }
    match (ours.to_ipv4(), theirs.to_ipv4()) {
        (Some(_), Some(v4)) => !v4.is_unspecified() && !v4.is_broadcast() && !v4.is_multicast(),
        (None, None) => true,
        _ => false,
    }
}

impl Engine {
    /// `cm_acquire_id(local, remote)`: the id whose local ID is `local` and
    /// whose remote ID equals `remote` (0 = not known yet).
    fn acquire(&self, local: u32, remote: u32) -> Option<u32> {
        let r = self.ids.get(local)?;
        (r.remote_id == remote).then_some(local)
    }

    fn count_dup(&mut self, attr_id: u16) {
        self.counters.rx_duplicates[attr_index(attr_id)] += 1;
    }

    /// A duplicate that needs no answer: counted, then dropped.
    fn dup_dropped(&mut self, attr_id: u16, why: &'static str) -> Handled {
        self.count_dup(attr_id);
        drop_(DropCause::Duplicate, why)
    }

    /// Sends a MAD that answers a duplicate; counted as a retry, as the
    /// kernel flags such responses.
    fn send_dup_response(&mut self, dest: MadDest, mad: [u8; 256]) {
        self.counters.tx_retries[attr_index(peek::attr_id_of(&mad))] += 1;
        self.push_mad(dest, mad);
    }

    /// A REJ built straight from a received MAD (`cm_issue_rej`; `tid`,
    /// its local and remote comm IDs, `code`): the IDs swapped, the same
    /// TID, no id involved, sent back where the MAD came from.
    fn issue_rej(
        &mut self,
        src: &MadSource,
        (tid, their_local, their_remote, code): (u64, u32, u32, MsgCode),
        reason: u16,
    ) {
        let rej = Rej {
            local_comm_id: their_remote,
            remote_comm_id: their_local,
            message_rejected: code,
            ari_length: 0,
            reason,
            ari: [0; pdata::REJ_ARI],
            private_data: [0; pdata::REJ],
        };
        let mad = CmMad::send(tid, 0, CmMsg::Rej(rej)).to_bytes();
        self.push_mad(Self::reply_dest(src), mad);
    }

    /// A REQ or REP (`tid`, its local and remote comm IDs, `code`) that
    /// names a QP another connection (`old`) holds: REJ(STALE_CONN) to its
    /// sender, a DREQ to the old connection, and the message dropped.
    fn stale_conn(
        &mut self,
        now: Time,
        src: &MadSource,
        (tid, local, remote, code): (u64, u32, u32, MsgCode),
        old: RemoteQpEntry,
        why: &'static str,
    ) -> Handled {
        self.issue_rej(src, (tid, local, remote, code), rej_reason::STALE_CONN);
        self.dreq_stale(now, old);
        drop_(DropCause::Mismatch, why)
    }

    /// Asks for `ib_send_cm_dreq(old, NULL, 0)` on a stale connection.
    fn dreq_stale(&mut self, now: Time, old: RemoteQpEntry) {
        if old.shard == self.cfg.shard {
            self.dreq_stale_local(now, old.local_id);
        } else {
            self.foreign.push_back(Foreign::SendDreq {
                shard: old.shard,
                local_id: old.local_id,
            });
        }
    }

    /// `ib_send_cm_dreq(old, NULL, 0)` on a stale connection of this shard
    /// (the runtime calls it for [`Foreign::SendDreq`]). An old id that is
    /// no longer established gets no DREQ; that is a notice, not an error.
    pub fn dreq_stale_local(&mut self, now: Time, local_id: u32) {
        let h = Handle(local_id as u64);
        if self.send_dreq(now, h, &[]).is_err() {
            let state = self.state(h);
            self.notice(Notice::StaleNoDreq { local_id, state });
        }
    }

    /// Handles one received MAD. `src` says where it came from and where
    /// it arrived. Errors only report why it was dropped (already counted).
    pub fn handle_mad(&mut self, now: Time, src: &MadSource, buf: &[u8]) -> Handled {
        let res = self.dispatch(now, src, buf);
        if let Err(d) = &res {
            self.counters.drops[d.cause() as usize] += 1;
        }
        res
    }

    fn dispatch(&mut self, now: Time, src: &MadSource, buf: &[u8]) -> Handled {
        match CmMad::parse(buf) {
            Ok(m) => self.dispatch_parsed(now, src, m, buf),
            Err(e @ wire::Error::Reserved { .. }) if buf.len() >= wire::MAD_LEN => {
                self.dispatch_clamped(now, src, buf, e)
            }
            Err(e) => {
                self.answer_unsupported(src, buf, &e);
                Err(Dropped::Malformed(e))
            }
        }
    }

    /// A MAD whose only fault is a length field beyond its area: clamped
    /// and delivered (docs/RELIABILITY.md "Length fields out of range").
    /// Kept out of `dispatch` so the common path copies nothing.
    #[cold]
    fn dispatch_clamped(
        &mut self,
        now: Time,
        src: &MadSource,
        buf: &[u8],
        e: wire::Error,
    ) -> Handled {
        let mut clamped = [0u8; wire::MAD_LEN];
        clamped.copy_from_slice(&buf[..wire::MAD_LEN]);
        let Some((field, value)) = wire::clamp_info_length(&mut clamped) else {
            return Err(Dropped::Malformed(e));
        };
        let m = CmMad::parse(&clamped).map_err(Dropped::Malformed)?;
        self.counters.rx_clamped += 1;
        self.notice(Notice::Clamped { field, value });
        self.dispatch_parsed(now, src, m, &clamped)
    }

    fn dispatch_parsed(&mut self, now: Time, src: &MadSource, mad: CmMad, buf: &[u8]) -> Handled {
        let attr_id = mad.msg.attr_id();
        self.counters.rx[attr_index(attr_id)] += 1;
        let raw = &buf[..wire::MAD_LEN];
        match &mad.msg {
            CmMsg::ClassPortInfo(_) => self.on_class_port_info(src, &mad, raw),
            CmMsg::Req(r) => self.on_req(now, src, &mad, r, raw),
            CmMsg::Mra(m) => self.on_mra(now, m, raw),
            CmMsg::Rej(r) => self.on_rej(now, r, raw),
            CmMsg::Rep(r) => self.on_rep(now, src, &mad, r, raw),
            CmMsg::Rtu(r) => self.on_rtu(r, raw),
            CmMsg::Dreq(d) => self.on_dreq(src, &mad, d, raw),
            CmMsg::Drep(d) => self.on_drep(now, d, raw),
            CmMsg::SidrReq(s) => self.on_sidr_req(src, &mad, s, raw),
            CmMsg::SidrRep(s) => self.on_sidr_rep(s, raw),
            CmMsg::Lap(l) => self.on_lap(src, &mad, l, raw),
            CmMsg::Apr(a) => self.on_apr(a, raw),
        }
    }

    /// A Get/Set the CM does not implement gets a GetResp with status
    /// "unsupported method/attribute combination", as the kernel's MAD
    /// layer answers unmatched requests.
    fn answer_unsupported(&mut self, src: &MadSource, buf: &[u8], e: &wire::Error) {
        if !matches!(
            e,
            wire::Error::BadMethod { .. } | wire::Error::UnknownAttribute(_)
        ) {
            return;
        }
        let Ok(h) = MadHeader::parse(buf) else { return };
        if h.check_cm().is_err()
            || !matches!(h.method, method::GET | method::SET)
            || buf.len() < 256
        {
            return;
        }
        let mut out: [u8; wire::MAD_LEN] = buf[..wire::MAD_LEN].try_into().unwrap();
        MadHeader {
            method: method::GET_RESP,
            status: mad_status::UNSUPPORTED_METHOD_ATTR,
            ..h
        }
        .emit(&mut out);
        self.push_mad(Self::reply_dest(src), out);
    }

    fn on_class_port_info(&mut self, src: &MadSource, mad: &CmMad, raw: &[u8]) -> Handled {
        match mad.method {
            method::GET => {
                // ibcm: the kernel CM does not implement ClassPortInfo; we
                // answer Get with our capabilities (no redirection).
                let cpi = ClassPortInfo {
                    base_version: wire::BASE_VERSION,
                    class_version: wire::CM_CLASS_VERSION,
                    resp_time_value: 20,
                    ..ClassPortInfo::default()
                };
                let resp = CmMad {
                    method: method::GET_RESP,
                    status: mad_status::SUCCESS,
                    class_specific: 0,
                    tid: mad.tid,
                    attr_mod: mad.attr_mod,
                    msg: CmMsg::ClassPortInfo(cpi),
                };
                self.push_mad(Self::reply_dest(src), resp.to_bytes());
                Ok(())
            }
            method::SET => {
                let mut out: [u8; 256] = raw.try_into().unwrap();
                let mut h = MadHeader::parse(raw).unwrap();
                h.method = method::GET_RESP;
                h.status = mad_status::UNSUPPORTED_METHOD_ATTR;
                h.emit(&mut out);
                self.push_mad(Self::reply_dest(src), out);
                Ok(())
            }
            _ => drop_(DropCause::Ignored, "ClassPortInfo response"),
        }
    }

    // ------------------------------------------------------------------ REQ

    fn on_req(&mut self, now: Time, src: &MadSource, mad: &CmMad, r: &Req, raw: &[u8]) -> Handled {
        let guid = r.local_ca_guid;
        if let Some(&existing) = self.remote_ids.get(&(guid, r.local_comm_id)) {
            return self.dup_req(existing, src);
        }
        // The GID the REQ arrived on must be ours.
        let Some((port, gid_index)) = self
            .find_gid(&src.dgid, PathRecType::Ib)
            .filter(|(p, _)| *p == src.port || src.port == 0)
        else {
            return drop_(
                DropCause::Mismatch,
                "REQ arrived on a GID this device does not own",
            );
        };
        let Some(pinfo) = self.port(port) else {
            return drop_(DropCause::Mismatch, "REQ on an unknown port");
        };
        let is_roce = pinfo.is_roce;
        let gid_type = self
            .gid_at(port, gid_index)
            .map(|e| e.gid_type)
            .unwrap_or_default();
        let Ok(h) = self.create_id() else {
            let to = (mad.tid, r.local_comm_id, 0, MsgCode::Req);
            self.issue_rej(src, to, rej_reason::NO_RESOURCES);
            return drop_(DropCause::Overload, "id table full: REJ(NO_RESOURCES)");
        };
        let id = h.0 as u32;
        let qp_type = req_qp_type(r);
        {
            let rec = self.ids.get_mut(id).unwrap();
            rec.remote_id = r.local_comm_id;
            rec.service_id = r.service_id;
            rec.tid = mad.tid;
            // The passive side's own waits (admission module docs).
            rec.timeout_ms = convert_to_ms(r.local_cm_response_timeout);
            if self.cfg.rep_timeout_cap_ms > 0 {
                rec.timeout_ms = rec.timeout_ms.min(self.cfg.rep_timeout_cap_ms);
            }
            rec.max_cm_retries = r.max_cm_retries.min(self.cfg.rep_max_retries);
            rec.remote_qpn = r.local_qpn;
            rec.initiator_depth = r.responder_resources;
            rec.responder_resources = r.initiator_depth;
            rec.path_mtu = r.path_mtu;
            rec.pkey = r.pkey;
            rec.sq_psn = r.starting_psn;
            rec.retry_count = r.retry_count;
            rec.rnr_retry_count = r.rnr_retry_count;
            rec.qp_type = qp_type;
            rec.remote_ca_guid = guid;
            rec.has_tw = true;
            rec.state = State::ReqRcvd;
        }
        // Duplicate/stale registration (cm_match_req).
        self.remote_ids.insert((guid, r.local_comm_id), id);
        self.ids.get_mut(id).unwrap().in_remote_id = true;
        let me = RemoteQpEntry {
            shard: self.cfg.shard,
            local_id: id,
            remote_id: r.local_comm_id,
        };
        if let Err(old) = self.shared.qp_insert(guid, r.local_qpn, me) {
            self.discard_new_id(id);
            let to = (mad.tid, r.local_comm_id, 0, MsgCode::Req);
            return self.stale_conn(now, src, to, old, STALE_REQ);
        }
        self.ids.get_mut(id).unwrap().in_remote_qp = true;
        let Some(listener) = self.shared.listen_lookup(r.service_id) else {
            self.discard_new_id(id);
            let to = (mad.tid, r.local_comm_id, 0, MsgCode::Req);
            self.issue_rej(src, to, rej_reason::INVALID_SERVICE_ID);
            return drop_(DropCause::Ignored, "no listener: REJ(INVALID_SERVICE_ID)");
        };
        // Paths from the REQ, then the AV from the primary path.
        let rec_type = if is_roce {
            match gid_type {
                GidType::RoceV1 => PathRecType::RoceV1,
                _ => PathRecType::RoceV2,
            }
        } else {
            PathRecType::Ib
        };
        let mut primary = path_from_req(r, &r.primary, rec_type, true, src);
        primary.hop_limit = if src.has_grh { 0xff } else { 0 };
        let alternate = r
            .has_alternate()
            .then(|| path_from_req(r, &r.alternate, rec_type, false, src));
        // A REQ the passive side cannot answer is rejected before the
        // consumer sees it; the REJ goes back where the REQ came from, as
        // the kernel's AV "for response" sends it.
        let ari_gid0 = self.gid_at(port, 0).map(|e| e.gid.0);
        let ari_gid0 = ari_gid0.as_ref().map(|g| &g[..]).unwrap_or(&[]);
        if is_roce && !usable_requester_gid(&src.dgid, &primary.dgid) {
            self.reject_new_id(id, rej_reason::INVALID_GID, ari_gid0, Self::reply_dest(src));
            return drop_(
                DropCause::Mismatch,
                "REQ names a requester GID that cannot be answered (zero, multicast or \
                 the wrong family): REJ(INVALID_GID)",
            );
        }
        if is_roce && self.cfg.reject_off_path_req && src.has_grh && src.sgid != primary.dgid {
            self.counters.rx_off_path += 1;
            self.notice(Notice::OffPathReq {
                source: src.sgid,
                requester: primary.dgid,
            });
            self.reject_new_id(id, rej_reason::INVALID_GID, ari_gid0, Self::reply_dest(src));
            return drop_(
                DropCause::Mismatch,
                "REQ path names another requester than its source: REJ(INVALID_GID)",
            );
        }
        let av = match self.av_from_path(&primary, Some((port, gid_index))) {
            Ok(av) => av,
            Err(_) => {
                self.reject_new_id(id, rej_reason::INVALID_GID, ari_gid0, Self::reply_dest(src));
                return drop_(DropCause::Mismatch, "REQ path unusable: REJ(INVALID_GID)");
            }
        };
        let alt_av = match alternate.as_ref().map(|a| self.av_from_path(a, None)) {
            Some(Ok(av)) => Some(Box::new(av)),
            Some(Err(_)) => {
                // Over the primary path, which is usable (the kernel's AV
                // holds it by now).
                let sgid = primary.sgid.0;
                let dest = self.dest_of(&av);
                self.reject_new_id(id, rej_reason::INVALID_ALT_GID, &sgid, dest);
                return drop_(
                    DropCause::Mismatch,
                    "REQ alternate path unusable: REJ(INVALID_ALT_GID)",
                );
            }
            None => None,
        };
        let half_open = self.cfg.max_half_open > 0;
        let source = source_key(src);
        if half_open && !self.make_half_open_room(&source) {
            self.reject_new_id(id, rej_reason::NO_RESOURCES, &[], self.dest_of(&av));
            return drop_(
                DropCause::Overload,
                "half-open table full of unanswered REQs: REJ(NO_RESOURCES)",
            );
        }
        {
            let rec = self.ids.get_mut(id).unwrap();
            rec.av = av;
            rec.alt_av = alt_av;
            if !is_roce {
                rec.dlid_datapath = r.primary.local_lid as u32;
            }
            rec.half_open = half_open;
            rec.half_open_src = source;
        }
        if half_open {
            self.half_open += 1;
            self.admission.admit(source);
        }
        self.changed(id);
        let ev = ReqEvent {
            listen_id: Handle(listener.local_id as u64),
            bth_pkey: src.pkey,
            port,
            primary_path: primary,
            alternate_path: alternate,
            sgid_attr: (port, gid_index),
            remote_ca_guid: guid,
            remote_qkey: r.local_qkey,
            remote_qpn: r.local_qpn,
            qp_type,
            starting_psn: r.starting_psn,
            responder_resources: r.initiator_depth,
            initiator_depth: r.responder_resources,
            local_cm_response_timeout: r.remote_cm_response_timeout,
            flow_control: r.end_to_end_flow_control as u8,
            remote_cm_response_timeout: r.local_cm_response_timeout,
            retry_count: r.retry_count,
            rnr_retry_count: r.rnr_retry_count,
            srq: r.srq as u8,
            ece: Ece {
                vendor_id: r.vendor_id,
                attr_mod: mad.attr_mod,
            },
        };
        self.event(
            id,
            EventType::ReqReceived,
            EventParam::Req(Box::new(ev)),
            Some(raw),
        );
        if listener.mra_on_report {
            self.ids.get_mut(id).unwrap().mra_on_report = true;
            self.prepare_mra_on_report(id);
        }
        Ok(())
    }

    /// Undoes a half-built incoming id (no protocol action).
    fn discard_new_id(&mut self, id: u32) {
        self.unregister_remote(id);
        self.ids.remove(id);
        self.counters.ids_destroyed += 1;
    }

    /// `ib_send_cm_rej` on a half-built incoming id to `dest`, then
    /// discards it.
    fn reject_new_id(&mut self, id: u32, reason: u16, ari: &[u8], dest: MadDest) {
        if let Some(r) = self.ids.get(id) {
            let mad = self.rej_mad(id, r, reason, ari, &[]);
            self.push_mad(dest, mad);
        }
        self.discard_new_id(id);
    }

    /// `cm_dup_req_handler`.
    fn dup_req(&mut self, id: u32, src: &MadSource) -> Handled {
        self.count_dup(attr::REQ);
        let Some(r) = self.ids.get(id) else {
            return drop_(DropCause::Duplicate, "duplicate REQ");
        };
        match r.state {
            State::MraReqSent => {
                let mad = mra_again(id, r, MsgCode::Req);
                self.send_dup_response(Self::reply_dest(src), mad);
                Ok(())
            }
            State::Timewait => {
                let mad = self.rej_mad(id, r, rej_reason::STALE_CONN, &[], &[]);
                self.send_dup_response(Self::reply_dest(src), mad);
                Ok(())
            }
            _ => drop_(DropCause::Duplicate, "duplicate REQ"),
        }
    }

    // ------------------------------------------------------------------ MRA

    fn on_mra(&mut self, now: Time, m: &Mra, raw: &[u8]) -> Handled {
        let id = match m.message_mraed {
            MsgCode::Req => self.acquire(m.remote_comm_id, 0),
            _ => self.acquire(m.remote_comm_id, m.local_comm_id),
        };
        let Some(id) = id else {
            return drop_(DropCause::UnknownId, "MRA for no id");
        };
        let r = self.ids.get(id).unwrap();
        let (state, lap) = (r.state, r.lap_state);
        let new_state = match (state, m.message_mraed) {
            (State::ReqSent, MsgCode::Req) => State::MraReqRcvd,
            (State::RepSent, MsgCode::Rep) => State::MraRepRcvd,
            (State::Established, MsgCode::Other) if lap == LapState::Sent => State::Established,
            (State::MraReqRcvd | State::MraRepRcvd, _) => {
                return self.dup_dropped(attr::MRA, "duplicate MRA");
            }
            _ => {
                return drop_(
                    DropCause::WrongState,
                    "MRA in a state that does not take it",
                );
            }
        };
        // Extend the outstanding request's wait.
        let mut ms = convert_to_ms(m.service_timeout) + convert_to_ms(r.av.timeout);
        if new_state == State::MraRepRcvd && self.cfg.mra_rep_wait_cap_ms > 0 {
            // The requester is alive and asks for time: honoured as the
            // kernel honours it, up to the passive side's own bound
            // (EngineConfig::mra_rep_wait_cap_ms).
            ms = ms.min(self.cfg.mra_rep_wait_cap_ms);
        }
        if new_state == State::Established {
            self.ids.get_mut(id).unwrap().lap_state = LapState::MraRcvd;
            self.changed(id);
        } else {
            self.set_state(id, new_state);
        }
        let has_send = {
            let r = self.ids.get_mut(id).unwrap();
            match r.send.as_mut() {
                Some(s) => {
                    s.timeout_ms = ms;
                    s.state_at_send = new_state;
                    true
                }
                None => false,
            }
        };
        if has_send {
            self.arm_timer(now, id, ms, TimerKind::Retransmit);
        }
        let p = EventParam::Mra {
            service_timeout: m.service_timeout,
        };
        self.event(id, EventType::MraReceived, p, Some(raw));
        Ok(())
    }

    // ------------------------------------------------------------------ REJ

    fn on_rej(&mut self, now: Time, r: &Rej, raw: &[u8]) -> Handled {
        self.counters.rej_rx[Counters::reason_index(r.reason as u32)] += 1;
        // A REJ(TIMEOUT) names its sender only (as `route()` reads it).
        let id = if let Some(Addressing::Sender { ca_guid, comm_id }) = peek::addressing(raw) {
            self.remote_ids
                .get(&(ca_guid, comm_id))
                .copied()
                .and_then(|id| self.acquire(id, comm_id))
        } else if r.message_rejected == MsgCode::Req {
            self.acquire(r.remote_comm_id, 0)
        } else {
            self.acquire(r.remote_comm_id, r.local_comm_id)
        };
        let Some(id) = id else {
            return drop_(DropCause::UnknownId, "REJ for no id");
        };
        let rec = self.ids.get(id).unwrap();
        match rec.state {
            State::ReqSent
            | State::MraReqRcvd
            | State::RepSent
            | State::MraRepRcvd
            | State::ReqRcvd
            | State::MraReqSent => {
                self.cancel_send(id);
                if r.reason == rej_reason::STALE_CONN {
                    self.enter_timewait(now, id);
                } else {
                    self.reset_to_idle(id);
                }
            }
            State::DreqSent | State::RepRcvd | State::MraRepSent => {
                self.cancel_send(id);
                self.enter_timewait(now, id);
            }
            State::Established => match rec.lap_state {
                LapState::Uninit | LapState::Sent => {
                    self.cancel_send(id);
                    self.enter_timewait(now, id);
                }
                _ => return drop_(DropCause::WrongState, "REJ during a LAP exchange"),
            },
            _ => {
                return drop_(
                    DropCause::WrongState,
                    "REJ in a state that does not take it",
                );
            }
        }
        let p = EventParam::Rej {
            reason: r.reason as u32,
            ari_length: r.ari_length,
        };
        self.event(id, EventType::RejReceived, p, Some(raw));
        Ok(())
    }

    // ------------------------------------------------------------------ REP

    fn on_rep(&mut self, now: Time, src: &MadSource, mad: &CmMad, r: &Rep, raw: &[u8]) -> Handled {
        let Some(id) = self.acquire(r.remote_comm_id, 0) else {
            return self.dup_rep(r, src);
        };
        let rec = self.ids.get(id).unwrap();
        if !matches!(rec.state, State::ReqSent | State::MraReqRcvd) {
            return drop_(
                DropCause::WrongState,
                "REP in a state that does not take it",
            );
        }
        let guid = r.local_ca_guid;
        let qpn = if rec.qp_type == qp_type::XRC_INI {
            r.local_eecn
        } else {
            r.local_qpn
        };
        if self.remote_ids.contains_key(&(guid, r.local_comm_id)) {
            return self.dup_dropped(attr::REP, "REP for a connection already known");
        }
        let me = RemoteQpEntry {
            shard: self.cfg.shard,
            local_id: id,
            remote_id: r.local_comm_id,
        };
        if let Err(old) = self.shared.qp_insert(guid, qpn, me) {
            let to = (mad.tid, r.local_comm_id, r.remote_comm_id, MsgCode::Rep);
            return self.stale_conn(now, src, to, old, STALE_REP);
        }
        self.remote_ids.insert((guid, r.local_comm_id), id);
        let rec = self.ids.get_mut(id).unwrap();
        rec.in_remote_id = true;
        rec.in_remote_qp = true;
        rec.remote_id = r.local_comm_id;
        rec.remote_ca_guid = guid;
        rec.remote_qpn = qpn;
        rec.initiator_depth = r.responder_resources;
        rec.responder_resources = r.initiator_depth;
        rec.sq_psn = r.starting_psn;
        rec.rnr_retry_count = r.rnr_retry_count;
        rec.target_ack_delay = r.target_ack_delay;
        rec.av.timeout = ack_timeout(r.target_ack_delay, rec.av.timeout.saturating_sub(1));
        if let Some(alt) = rec.alt_av.as_mut() {
            alt.timeout = ack_timeout(r.target_ack_delay, alt.timeout.saturating_sub(1));
        }
        self.cancel_send(id);
        self.set_state(id, State::RepRcvd);
        let ev = RepEvent {
            remote_ca_guid: guid,
            remote_qkey: r.local_qkey,
            remote_qpn: qpn,
            starting_psn: r.starting_psn,
            responder_resources: r.initiator_depth,
            initiator_depth: r.responder_resources,
            target_ack_delay: r.target_ack_delay,
            failover_accepted: r.failover_accepted,
            flow_control: r.end_to_end_flow_control as u8,
            rnr_retry_count: r.rnr_retry_count,
            srq: r.srq as u8,
            ece: Ece {
                vendor_id: r.vendor_id,
                attr_mod: mad.attr_mod,
            },
        };
        self.event(id, EventType::RepReceived, EventParam::Rep(ev), Some(raw));
        self.prepare_mra_on_report(id);
        Ok(())
    }

    /// `set_prepare_mra_on_report`: a flagged id just reported as
    /// REQ_RCVD / REP_RCVD moves on as `prepare_mra` moves it.
    fn prepare_mra_on_report(&mut self, id: u32) {
        // Called right after the report set REQ_RCVD or REP_RCVD.
        if let Some(next) = self
            .ids
            .get(id)
            .filter(|r| r.mra_on_report)
            .and_then(|r| mra_sent_state(r.state))
        {
            self.mra_prepared(id, next);
        }
    }

    /// `cm_dup_rep_handler`.
    fn dup_rep(&mut self, r: &Rep, src: &MadSource) -> Handled {
        let Some(id) = self.acquire(r.remote_comm_id, r.local_comm_id) else {
            return drop_(DropCause::UnknownId, "REP for no id");
        };
        self.count_dup(attr::REP);
        let rec = self.ids.get(id).unwrap();
        let mad = match rec.state {
            State::Established => {
                let rtu = Rtu {
                    local_comm_id: id,
                    remote_comm_id: rec.remote_id,
                    private_data: pdata_area(rec.saved_pdata.as_deref().unwrap_or(&[])),
                };
                CmMad::send(rec.tid, 0, CmMsg::Rtu(rtu)).to_bytes()
            }
            State::MraRepSent => mra_again(id, rec, MsgCode::Rep),
            _ => return drop_(DropCause::Duplicate, "duplicate REP"),
        };
        self.send_dup_response(Self::reply_dest(src), mad);
        Ok(())
    }

    // ------------------------------------------------------------------ RTU

    fn on_rtu(&mut self, r: &Rtu, raw: &[u8]) -> Handled {
        let Some(id) = self.acquire(r.remote_comm_id, r.local_comm_id) else {
            return drop_(DropCause::UnknownId, "RTU for no id");
        };
        let state = self.ids.get(id).unwrap().state;
        if !matches!(state, State::RepSent | State::MraRepRcvd) {
            return self.dup_dropped(attr::RTU, "RTU in a state that does not take it");
        }
        self.cancel_send(id);
        self.set_state(id, State::Established);
        self.event(id, EventType::RtuReceived, EventParam::None, Some(raw));
        Ok(())
    }

    // ----------------------------------------------------------------- DREQ

    fn on_dreq(&mut self, src: &MadSource, mad: &CmMad, d: &Dreq, raw: &[u8]) -> Handled {
        let Some(id) = self.acquire(d.remote_comm_id, d.local_comm_id) else {
            // Late DREQ for an id we no longer have: complete it anyway.
            self.count_dup(attr::DREQ);
            let drep = Drep {
                local_comm_id: d.remote_comm_id,
                remote_comm_id: d.local_comm_id,
                private_data: [0; pdata::DREP],
            };
            let out = CmMad::send(mad.tid, 0, CmMsg::Drep(drep)).to_bytes();
            self.send_dup_response(Self::reply_dest(src), out);
            return drop_(DropCause::UnknownId, "DREQ for no id: answered with DREP");
        };
        let rec = self.ids.get(id).unwrap();
        if rec.local_qpn != d.remote_qpn {
            return drop_(DropCause::Mismatch, "DREQ names another QPN");
        }
        match rec.state {
            State::RepSent | State::DreqSent | State::MraRepRcvd => self.cancel_send(id),
            State::Established => {
                if matches!(rec.lap_state, LapState::Sent | LapState::MraRcvd) {
                    self.cancel_send(id);
                }
            }
            State::Timewait => {
                let mad = Self::drep_mad(id, rec, rec.saved_pdata.as_deref().unwrap_or(&[]));
                self.count_dup(attr::DREQ);
                self.send_dup_response(Self::reply_dest(src), mad);
                return Ok(());
            }
            State::DreqRcvd => {
                return self.dup_dropped(attr::DREQ, "duplicate DREQ");
            }
            _ => {
                return drop_(
                    DropCause::WrongState,
                    "DREQ in a state that does not take it",
                );
            }
        }
        self.ids.get_mut(id).unwrap().tid = mad.tid;
        self.set_state(id, State::DreqRcvd);
        self.event(id, EventType::DreqReceived, EventParam::None, Some(raw));
        Ok(())
    }

    // ----------------------------------------------------------------- DREP

    fn on_drep(&mut self, now: Time, d: &Drep, raw: &[u8]) -> Handled {
        let Some(id) = self.acquire(d.remote_comm_id, d.local_comm_id) else {
            return drop_(DropCause::UnknownId, "DREP for no id");
        };
        let state = self.ids.get(id).unwrap().state;
        if !matches!(state, State::DreqSent | State::DreqRcvd) {
            self.count_dup(attr::DREP);
            return drop_(
                DropCause::Duplicate,
                "DREP in a state that does not take it",
            );
        }
        self.cancel_send(id);
        self.enter_timewait(now, id);
        self.event(id, EventType::DrepReceived, EventParam::None, Some(raw));
        Ok(())
    }

    // ------------------------------------------------------------- SIDR_REQ

    fn on_sidr_req(&mut self, src: &MadSource, mad: &CmMad, s: &SidrReq, raw: &[u8]) -> Handled {
        let who = if src.has_grh {
            src.sgid
        } else {
            let mut g = [0u8; 16];
            g[14..16].copy_from_slice(&src.slid.to_be_bytes());
            Gid(g)
        };
        let key = (who, s.request_id);
        if self.sidr_remote.contains_key(&key) {
            return self.dup_dropped(attr::SIDR_REQ, "duplicate SIDR_REQ");
        }
        let Some((port, gid_index)) = self.find_gid(&src.dgid, PathRecType::Ib) else {
            return drop_(
                DropCause::Mismatch,
                "SIDR_REQ arrived on a GID this device does not own",
            );
        };
        let Some(listener) = self.shared.listen_lookup(s.service_id) else {
            let rep = SidrRep {
                request_id: s.request_id,
                status: sidr_status::UNSUPPORTED,
                info_length: 0,
                vendor_id: 0,
                qpn: 0,
                service_id: s.service_id,
                qkey: 0,
                info: [0; pdata::SIDR_REP_INFO],
                private_data: [0; pdata::SIDR_REP],
            };
            let out = CmMad::send(mad.tid, 0, CmMsg::SidrRep(rep)).to_bytes();
            self.push_mad(Self::reply_dest(src), out);
            return drop_(DropCause::Ignored, "no listener: SIDR_REP(UNSUPPORTED)");
        };
        let Ok(h) = self.create_id() else {
            return drop_(DropCause::Overload, "id table full");
        };
        let id = h.0 as u32;
        let pkey_index = self.pkey_index(port, src.pkey).unwrap_or(0);
        let rec = self.ids.get_mut(id).unwrap();
        rec.remote_id = s.request_id;
        rec.service_id = s.service_id;
        rec.tid = mad.tid;
        rec.sidr_key = Some(key);
        rec.state = State::SidrReqRcvd;
        rec.av = Av {
            port,
            pkey_index,
            timeout: 0,
            sgid: src.dgid,
            ah: AhAttr {
                port_num: port,
                sl: src.sl,
                has_grh: src.has_grh,
                dgid: src.sgid,
                sgid_index: gid_index,
                flow_label: src.flow_label,
                hop_limit: if src.has_grh { 0xff } else { 0 },
                traffic_class: src.traffic_class,
                dlid: src.slid as u32,
                ..AhAttr::default()
            },
        };
        self.sidr_remote.insert(key, id);
        self.changed(id);
        let ev = SidrReqEvent {
            listen_id: Handle(listener.local_id as u64),
            service_id: s.service_id,
            sgid_attr: (port, gid_index),
            bth_pkey: src.pkey,
            port,
            pkey: s.pkey,
        };
        self.event(
            id,
            EventType::SidrReqReceived,
            EventParam::SidrReq(ev),
            Some(raw),
        );
        Ok(())
    }

    // ------------------------------------------------------------- SIDR_REP

    fn on_sidr_rep(&mut self, s: &SidrRep, raw: &[u8]) -> Handled {
        let Some(id) = self.acquire(s.request_id, 0) else {
            return drop_(DropCause::UnknownId, "SIDR_REP for no id");
        };
        let rec = self.ids.get(id).unwrap();
        if rec.state != State::SidrReqSent {
            self.count_dup(attr::SIDR_REP);
            return drop_(
                DropCause::Duplicate,
                "SIDR_REP in a state that does not take it",
            );
        }
        let sgid_attr = (rec.av.port, rec.av.ah.sgid_index);
        self.cancel_send(id);
        self.set_state(id, State::Idle);
        let ev = SidrRepEvent {
            status: s.status as u32,
            qkey: s.qkey,
            qpn: s.qpn,
            info_len: s.info_length,
            sgid_attr,
        };
        self.event(
            id,
            EventType::SidrRepReceived,
            EventParam::SidrRep(ev),
            Some(raw),
        );
        Ok(())
    }

    // -------------------------------------------------------------- LAP/APR

    fn port_is_roce(&self, port: u8) -> bool {
        self.port(port).is_none_or(|p| p.is_roce)
    }

    fn on_lap(&mut self, src: &MadSource, mad: &CmMad, l: &Lap, raw: &[u8]) -> Handled {
        if self.port_is_roce(src.port) {
            return drop_(DropCause::Unsupported, "LAP is not supported on RoCE");
        }
        let Some(id) = self.acquire(l.remote_comm_id, l.local_comm_id) else {
            return drop_(DropCause::UnknownId, "LAP for no id");
        };
        let rec = self.ids.get(id).unwrap();
        if rec.state != State::Established {
            return drop_(DropCause::WrongState, "LAP outside ESTABLISHED");
        }
        match rec.lap_state {
            LapState::Uninit | LapState::Idle => {}
            LapState::MraSent => {
                let out = mra_again(id, rec, MsgCode::Other);
                self.count_dup(attr::LAP);
                self.send_dup_response(Self::reply_dest(src), out);
                return Ok(());
            }
            _ => {
                return self.dup_dropped(attr::LAP, "duplicate LAP");
            }
        }
        // The alternate path the peer proposes, seen from our side.
        let a = &l.alternate;
        let path = PathRec {
            dgid: a.local_gid,
            sgid: a.remote_gid,
            flow_label: a.flow_label,
            hop_limit: a.hop_limit,
            traffic_class: a.traffic_class,
            reversible: 1,
            pkey: rec.pkey,
            sl: a.sl,
            mtu_selector: SA_EQ,
            mtu: rec.path_mtu,
            rate_selector: SA_EQ,
            rate: a.packet_rate,
            packet_life_time_selector: SA_EQ,
            packet_life_time: a.local_ack_timeout.saturating_sub(1),
            dlid: a.local_lid as u32,
            slid: a.remote_lid as u32,
            ..PathRec::default()
        };
        let Ok(alt_av) = self.av_from_path(&path, None) else {
            return drop_(DropCause::Mismatch, "LAP path unusable");
        };
        let rec = self.ids.get_mut(id).unwrap();
        rec.alt_av = Some(Box::new(alt_av));
        rec.lap_state = LapState::Rcvd;
        rec.tid = mad.tid;
        self.changed(id);
        let p = EventParam::Lap {
            alternate_path: Box::new(path),
        };
        self.event(id, EventType::LapReceived, p, Some(raw));
        Ok(())
    }

    fn on_apr(&mut self, a: &crate::wire::Apr, raw: &[u8]) -> Handled {
        let Some(id) = self.acquire(a.remote_comm_id, a.local_comm_id) else {
            return drop_(DropCause::UnknownId, "APR for no id");
        };
        let rec = self.ids.get(id).unwrap();
        if self.port_is_roce(rec.av.port) {
            return drop_(DropCause::Unsupported, "APR is not supported on RoCE");
        }
        if rec.state != State::Established
            || !matches!(rec.lap_state, LapState::Sent | LapState::MraRcvd)
        {
            return drop_(DropCause::WrongState, "APR without a LAP outstanding");
        }
        self.ids.get_mut(id).unwrap().lap_state = LapState::Idle;
        self.cancel_send(id);
        self.changed(id);
        let p = EventParam::Apr {
            ap_status: a.ap_status as u32,
            info_len: a.info_length,
        };
        self.event(id, EventType::AprReceived, p, Some(raw));
        Ok(())
    }
}

/// Which shard must handle a received MAD: `Ok(shard)` for messages that
/// name one of our IDs, `Err(hash)` for requests (REQ, SIDR_REQ, REJ
/// timeouts) that must go to `hash % shards` so that duplicates meet.
pub fn route(shared: &Shared, buf: &[u8], src: &MadSource) -> Result<u32, u64> {
    if shared.layout.shard_bits == 0 {
        return Ok(0);
    }
    let mix = |a: u64, b: u64| ids::splitmix64(a ^ b.rotate_left(32));
    match peek::addressing(buf) {
        Some(Addressing::Receiver(id)) => Ok(shared.layout.shard_of(&shared.codec, id)),
        Some(Addressing::Sender { ca_guid, comm_id }) => Err(mix(ca_guid, comm_id as u64)),
        Some(Addressing::SidrRequest(request_id)) => Err(mix(
            src.sgid.interface_id() ^ src.slid as u64,
            request_id as u64,
        )),
        None => Ok(0),
    }
}
