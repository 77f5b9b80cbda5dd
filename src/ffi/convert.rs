//! Conversions between the engine's Rust values and the kernel's C structs
//! (`struct ib_cm_event`, `struct sa_path_rec`, `struct ib_qp_attr`, …).

use crate::abi::*;
use crate::api::{
    AhAttr, Device, Ece, Event, EventParam, Gid, PathRec, PathRecType, QpAttr, copy_plain_qp_attrs,
    qp_mask,
};
use std::ffi::c_void;

/// Engine path record → `struct sa_path_rec`.
#[allow(clippy::field_reassign_with_default)]
pub fn path_to_c(p: &PathRec) -> SaPathRec {
    let mut c: SaPathRec = SaPathRec::default();
    c.dgid = IbGid::from_raw(p.dgid.0);
    c.sgid = IbGid::from_raw(p.sgid.0);
    c.service_id = p.service_id.to_be();
    c.flow_label = p.flow_label.to_be();
    c.hop_limit = p.hop_limit;
    c.traffic_class = p.traffic_class;
    c.reversible = p.reversible;
    c.numb_path = p.numb_path;
    c.pkey = p.pkey.to_be();
    c.qos_class = p.qos_class.to_be();
    path_rec_bytes!(bytes_copy! { c = p });
    c.rec_type = p.rec_type as u32;
    c.flags = p.flags;
    match p.rec_type {
        PathRecType::Ib => {
            c.u.ib = SaPathRecIb {
                dlid: (p.dlid as u16).to_be(),
                slid: (p.slid as u16).to_be(),
                raw_traffic: p.raw_traffic,
            }
        }
        PathRecType::Opa => {
            c.u.opa = SaPathRecOpa {
                dlid: p.dlid.to_be(),
                slid: p.slid.to_be(),
                raw_traffic: p.raw_traffic,
                ..SaPathRecOpa::default()
            }
        }
        PathRecType::RoceV1 | PathRecType::RoceV2 => {
            c.u.roce = SaPathRecRoce {
                route_resolved: p.route_resolved as u8,
                dmac: p.dmac,
            }
        }
    }
    c
}

/// `struct sa_path_rec` → engine path record; `None` for an unknown
/// record type.
pub fn path_from_c(c: &SaPathRec) -> Option<PathRec> {
    let mut p = path_rec_bytes!(bytes_from! {
        c => PathRec {
            dgid: Gid(c.dgid.as_raw()),
            sgid: Gid(c.sgid.as_raw()),
            service_id: u64::from_be(c.service_id),
            flow_label: u32::from_be(c.flow_label) & 0xf_ffff,
            hop_limit: c.hop_limit,
            traffic_class: c.traffic_class,
            reversible: c.reversible,
            numb_path: c.numb_path,
            pkey: u16::from_be(c.pkey),
            qos_class: u16::from_be(c.qos_class),
            rec_type: PathRecType::from_u32(c.rec_type)?,
            flags: c.flags,
            ..PathRec::default()
        }
    });
    // Six bits (the selector has the upper two).
    p.packet_life_time &= 0x3f;
    match p.rec_type {
        PathRecType::Ib => {
            let ib = c.ib();
            p.dlid = u16::from_be(ib.dlid) as u32;
            p.slid = u16::from_be(ib.slid) as u32;
            p.raw_traffic = ib.raw_traffic;
        }
        PathRecType::Opa => {
            let o = c.opa();
            p.dlid = u32::from_be(o.dlid);
            p.slid = u32::from_be(o.slid);
            p.raw_traffic = o.raw_traffic;
        }
        _ => {
            let r = c.roce();
            p.route_resolved = r.route_resolved != 0;
            p.dmac = r.dmac;
        }
    }
    Some(p)
}

/// Engine address handle → `struct rdma_ah_attr`.
#[allow(clippy::field_reassign_with_default)]
pub fn ah_to_c(dev: &Device, a: &AhAttr) -> RdmaAhAttr {
    let mut c = RdmaAhAttr::default();
    c.grh.sgid_attr = dev
        .gid_attr(a.port_num, a.sgid_index)
        .unwrap_or(std::ptr::null());
    c.grh.dgid = IbGid::from_raw(a.dgid.0);
    c.grh.flow_label = a.flow_label;
    c.grh.sgid_index = a.sgid_index as u8;
    c.grh.hop_limit = a.hop_limit;
    c.grh.traffic_class = a.traffic_class;
    c.sl = a.sl;
    c.static_rate = a.static_rate;
    c.port_num = a.port_num as u32;
    c.ah_flags = if a.has_grh { IB_AH_GRH as u8 } else { 0 };
    if a.rec_type.is_roce() {
        c.r#type = RDMA_AH_ATTR_TYPE_ROCE;
        c.u.roce = RoceAhAttr { dmac: a.dmac };
    } else if a.rec_type == PathRecType::Opa {
        c.r#type = RDMA_AH_ATTR_TYPE_OPA;
        c.u.opa = OpaAhAttr {
            dlid: a.dlid,
            src_path_bits: a.src_path_bits,
            make_grd: 0,
        };
    } else {
        c.r#type = RDMA_AH_ATTR_TYPE_IB;
        c.u.ib = IbAhAttr {
            dlid: a.dlid as u16,
            src_path_bits: a.src_path_bits,
        };
    }
    c
}

/// Writes the fields of `a` that its mask names into the caller's
/// `struct ib_qp_attr`; everything else is left as the caller set it.
pub fn qp_attr_to_c(dev: &Device, a: &QpAttr, c: &mut IbQpAttr) {
    let m = a.mask;
    c.qp_state = a.qp_state;
    copy_plain_qp_attrs!(m, a, &mut *c);
    if m & qp_mask::PORT != 0 && a.port_num != 0 {
        c.port_num = a.port_num as u32;
    }
    if m & qp_mask::AV != 0 {
        c.ah_attr = ah_to_c(dev, &a.ah_attr);
    }
    if m & qp_mask::ALT_PATH != 0 {
        if a.alt_port_num != 0 {
            c.alt_port_num = a.alt_port_num as u32;
        }
        c.alt_pkey_index = a.alt_pkey_index;
        c.alt_timeout = a.alt_timeout;
        c.alt_ah_attr = ah_to_c(dev, &a.alt_ah_attr);
    }
}

fn ece_to_c(e: &Ece) -> RdmaUcmEce {
    RdmaUcmEce {
        vendor_id: e.vendor_id,
        attr_mod: e.attr_mod,
    }
}

/// Builds the C event for `ev` (valid only inside `f`) and calls `f`.
/// `listen_ptr` is the `listen_id` of a request event (else null).
pub fn with_c_event(
    dev: &Device,
    ev: &Event,
    listen_ptr: *mut IbCmId,
    f: impl FnOnce(*const IbCmEvent) -> i32,
) -> i32 {
    // A private copy: the consumer may write through the `void *`s.
    let mut mad: [u8; 256] = ev.mad.as_deref().copied().unwrap_or([0; 256]);
    let mut primary = SaPathRec::default();
    let mut alternate = SaPathRec::default();
    let mut c = IbCmEvent {
        event: ev.kind as u32,
        param: IbCmEventParam { send_status: 0 },
        private_data: std::ptr::null_mut(),
    };
    // Zero the whole union first (the kernel leaves it undefined; zero is
    // kinder to consumers that peek).
    unsafe { std::ptr::write_bytes(&mut c.param as *mut IbCmEventParam, 0, 1) };
    let base = mad.as_mut_ptr();
    if let Some((off, _)) = ev.private_data_range() {
        c.private_data = unsafe { base.add(off) } as *mut c_void;
    }
    let gid_attr = |a: (u8, u16)| dev.gid_attr(a.0, a.1).unwrap_or(std::ptr::null());
    match &ev.param {
        EventParam::None => {}
        EventParam::SendStatus(s) => c.param.send_status = *s,
        EventParam::Req(p) => {
            primary = path_to_c(&p.primary_path);
            let has_alt = p.alternate_path.is_some();
            if let Some(a) = &p.alternate_path {
                alternate = path_to_c(a);
            }
            let mut r = IbCmReqEventParam {
                listen_id: listen_ptr,
                bth_pkey: p.bth_pkey,
                port: p.port,
                primary_path: &mut primary,
                alternate_path: if has_alt {
                    &mut alternate
                } else {
                    std::ptr::null_mut()
                },
                ppath_sgid_attr: gid_attr(p.sgid_attr),
                remote_ca_guid: p.remote_ca_guid.to_be(),
                remote_qkey: p.remote_qkey,
                remote_qpn: p.remote_qpn,
                qp_type: p.qp_type,
                starting_psn: p.starting_psn,
                responder_resources: p.responder_resources,
                initiator_depth: p.initiator_depth,
                bitfield_66: 0,
                bitfield_68: 0,
                ece: ece_to_c(&p.ece),
            };
            r.set_local_cm_response_timeout(p.local_cm_response_timeout);
            r.set_flow_control(p.flow_control);
            r.set_remote_cm_response_timeout(p.remote_cm_response_timeout);
            r.set_retry_count(p.retry_count);
            r.set_rnr_retry_count(p.rnr_retry_count);
            r.set_srq(p.srq);
            c.param.req_rcvd = r;
        }
        EventParam::Rep(p) => {
            let mut r = IbCmRepEventParam {
                remote_ca_guid: p.remote_ca_guid.to_be(),
                remote_qkey: p.remote_qkey,
                remote_qpn: p.remote_qpn,
                starting_psn: p.starting_psn,
                responder_resources: p.responder_resources,
                initiator_depth: p.initiator_depth,
                bitfield_22: 0,
                ece: ece_to_c(&p.ece),
            };
            r.set_target_ack_delay(p.target_ack_delay);
            r.set_failover_accepted(p.failover_accepted);
            r.set_flow_control(p.flow_control);
            r.set_rnr_retry_count(p.rnr_retry_count);
            r.set_srq(p.srq);
            c.param.rep_rcvd = r;
        }
        EventParam::Rej { reason, ari_length } => {
            c.param.rej_rcvd = IbCmRejEventParam {
                reason: *reason,
                ari: unsafe { base.add(36) } as *mut c_void,
                ari_length: *ari_length,
            };
        }
        EventParam::Mra { service_timeout } => {
            c.param.mra_rcvd = IbCmMraEventParam {
                service_timeout: *service_timeout,
            };
        }
        EventParam::Lap { alternate_path } => {
            alternate = path_to_c(alternate_path);
            c.param.lap_rcvd = IbCmLapEventParam {
                alternate_path: &mut alternate,
            };
        }
        EventParam::Apr {
            ap_status,
            info_len,
        } => {
            c.param.apr_rcvd = IbCmAprEventParam {
                ap_status: *ap_status,
                apr_info: unsafe { base.add(36) } as *mut c_void,
                info_len: *info_len,
            };
        }
        EventParam::SidrReq(p) => {
            c.param.sidr_req_rcvd = IbCmSidrReqEventParam {
                listen_id: listen_ptr,
                service_id: p.service_id.to_be(),
                sgid_attr: gid_attr(p.sgid_attr),
                bth_pkey: p.bth_pkey,
                port: p.port,
                pkey: p.pkey,
            };
        }
        EventParam::SidrRep(p) => {
            c.param.sidr_rep_rcvd = IbCmSidrRepEventParam {
                status: p.status,
                qkey: p.qkey,
                qpn: p.qpn,
                info: unsafe { base.add(48) } as *mut c_void,
                sgid_attr: gid_attr(p.sgid_attr),
                info_len: p.info_len,
            };
        }
    }
    let r = f(&c);
    // Keep the locals alive until after the call.
    let _ = (&mut primary, &mut alternate, &mut mad);
    r
}
