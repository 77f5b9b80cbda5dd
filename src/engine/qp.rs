//! `ib_cm_init_qp_attr`: the QP attributes for INIT, RTR and RTS that the
//! CM knows from the connection, exactly the fields and mask bits the
//! kernel fills (CM_RULES.md §qp-attributes). Everything not listed is left to the caller.

use super::IdRec;
use super::types::*;
use crate::wire::Req;

/// Transport service type bits of a REQ for a QP type.
pub(super) fn req_transport(qp_type: u32) -> (u8, u8) {
    match qp_type {
        qp_type::UC => (1, 0),
        qp_type::XRC_INI => (3, 1),
        _ => (0, 0),
    }
}

/// QP type from a REQ's transport fields (`cm_req_get_qp_type`).
pub(super) fn req_qp_type(r: &Req) -> u32 {
    match (r.transport_service_type, r.extended_transport_type) {
        (0, _) => qp_type::RC,
        (1, _) => qp_type::UC,
        (3, 1) => qp_type::XRC_TGT,
        _ => 0,
    }
}

fn is_ib_ah(ah: &AhAttr) -> bool {
    !ah.rec_type.is_roce()
}

pub(super) fn init_qp_attr(r: &IdRec, qp_state_req: u32, flush_caps: bool) -> ApiResult<QpAttr> {
    use State::*;
    let mut a = QpAttr {
        qp_state: qp_state_req,
        ..QpAttr::default()
    };
    let connected = matches!(
        r.state,
        ReqRcvd | MraReqSent | RepRcvd | MraRepSent | RepSent | MraRepRcvd | Established
    );
    let alt = r
        .alt_av
        .as_deref()
        .filter(|alt| alt.ah.dlid != 0 && alt.port != 0);
    match qp_state_req {
        qp_state::INIT => {
            if !(connected || matches!(r.state, ReqSent | MraReqRcvd)) {
                return Err(Errno::EINVAL);
            }
            a.mask = qp_mask::STATE | qp_mask::ACCESS_FLAGS | qp_mask::PKEY_INDEX | qp_mask::PORT;
            a.qp_access_flags = access::REMOTE_WRITE;
            if r.responder_resources != 0 {
                a.qp_access_flags |= access::REMOTE_READ | access::REMOTE_ATOMIC;
                if flush_caps {
                    a.qp_access_flags |= access::FLUSH_GLOBAL | access::FLUSH_PERSISTENT;
                }
            }
            a.pkey_index = r.av.pkey_index;
            a.port_num = r.av.port;
        }
        qp_state::RTR => {
            if !connected {
                return Err(Errno::EINVAL);
            }
            a.mask = qp_mask::STATE
                | qp_mask::AV
                | qp_mask::PATH_MTU
                | qp_mask::DEST_QPN
                | qp_mask::RQ_PSN;
            a.ah_attr = r.av.ah;
            if is_ib_ah(&a.ah_attr) && r.dlid_datapath != 0 && r.dlid_datapath != 0xffff {
                a.ah_attr.dlid = r.dlid_datapath;
            }
            a.path_mtu = r.path_mtu;
            a.dest_qp_num = r.remote_qpn;
            a.rq_psn = r.rq_psn;
            if matches!(r.qp_type, qp_type::RC | qp_type::XRC_TGT) {
                a.mask |= qp_mask::MAX_DEST_RD_ATOMIC | qp_mask::MIN_RNR_TIMER;
                a.max_dest_rd_atomic = r.responder_resources;
                a.min_rnr_timer = 0;
            }
            if let Some(alt) = alt {
                a.mask |= qp_mask::ALT_PATH;
                a.alt_port_num = alt.port;
                a.alt_pkey_index = alt.pkey_index;
                a.alt_timeout = alt.timeout;
                a.alt_ah_attr = alt.ah;
            }
        }
        qp_state::RTS => {
            if !connected {
                return Err(Errno::EINVAL);
            }
            if r.lap_state == LapState::Uninit {
                a.mask = qp_mask::STATE | qp_mask::SQ_PSN;
                a.sq_psn = r.sq_psn;
                if matches!(r.qp_type, qp_type::RC | qp_type::XRC_INI) {
                    a.mask |= qp_mask::RETRY_CNT | qp_mask::RNR_RETRY | qp_mask::MAX_QP_RD_ATOMIC;
                    a.retry_cnt = r.retry_count;
                    a.rnr_retry = r.rnr_retry_count;
                    a.max_rd_atomic = r.initiator_depth;
                }
                if matches!(r.qp_type, qp_type::RC | qp_type::XRC_INI | qp_type::XRC_TGT) {
                    a.mask |= qp_mask::TIMEOUT;
                    a.timeout = r.av.timeout;
                }
                if alt.is_some() {
                    a.mask |= qp_mask::PATH_MIG_STATE;
                    a.path_mig_state = MIG_REARM;
                }
            } else {
                a.mask = qp_mask::ALT_PATH | qp_mask::PATH_MIG_STATE;
                if let Some(alt) = r.alt_av.as_deref() {
                    if alt.port != 0 {
                        a.alt_port_num = alt.port;
                    }
                    a.alt_pkey_index = alt.pkey_index;
                    a.alt_timeout = alt.timeout;
                    a.alt_ah_attr = alt.ah;
                }
                a.path_mig_state = MIG_REARM;
            }
        }
        _ => return Err(Errno::EINVAL),
    }
    Ok(a)
}
