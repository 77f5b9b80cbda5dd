//! CM attributes (IBTA Vol 1 ch. 12, tables 106-120) as views and typed
//! representations.
//!
//! Every offset below is the offset in the whole 256-byte MAD (header
//! included) with the IBTA bit numbering (bit 0 = most significant bit of the
//! byte). Reserved bits are ignored on parse and written as zero on emit.

use super::field::{FieldRef, cm_message, cm_path};
use super::mad::{BASE_VERSION, CM_CLASS_VERSION, MGMT_CLASS_CM, MadHeader, attr, method};
use super::{Error, Gid, MAD_LEN, Result, check_len};

/// Private-data sizes (`enum ib_cm_data_size`).
pub mod pdata {
    pub const REQ: usize = 92;
    pub const MRA: usize = 222;
    pub const REJ: usize = 148;
    pub const REP: usize = 196;
    pub const RTU: usize = 224;
    pub const DREQ: usize = 220;
    pub const DREP: usize = 224;
    pub const SIDR_REQ: usize = 216;
    pub const SIDR_REP: usize = 136;
    pub const LAP: usize = 168;
    pub const APR: usize = 148;
    /// ARI of a REJ.
    pub const REJ_ARI: usize = 72;
    /// AdditionalInformation of a SIDR_REP.
    pub const SIDR_REP_INFO: usize = 72;
    /// AdditionalInformation of an APR.
    pub const APR_INFO: usize = 72;
}

/// Which message a REJ rejects or an MRA acknowledges (2-bit field).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum MsgCode {
    #[default]
    Req = 0,
    Rep = 1,
    Other = 2,
}

impl MsgCode {
    pub fn name(self) -> &'static str {
        match self {
            MsgCode::Req => "REQ",
            MsgCode::Rep => "REP",
            MsgCode::Other => "OTHER",
        }
    }
}

// ---------------------------------------------------------------------------
// The path of a REQ (primary, alternate) and of a LAP

/// Where a path sits: REQ and LAP order TrafficClass, HopLimit and
/// PacketRate differently (IBTA tables 106 and 115).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PathLayout {
    Req = 0,
    Lap = 1,
}

/// Which path a [`ReqPath`] is: names its fields `primary_*` or
/// `alternate_*` (a LAP carries an alternate path).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PathSlot {
    Primary = 0,
    Alternate = 1,
}

cm_path! {
    /// One path (primary or alternate) as a REQ or LAP carries it.
    ReqPath, PathPacket {
        [
            local_lid / set_local_lid: u16 = bits([0, 0], 0, 16), "LocalPortLID", Dec;
            remote_lid / set_remote_lid: u16 = bits([2, 2], 0, 16), "RemotePortLID", Dec;
            local_gid / local_gid_mut: Gid = gid([4, 4]), "LocalPortGID", Plain;
            remote_gid / remote_gid_mut: Gid = gid([20, 20]), "RemotePortGID", Plain;
        ]
        [
            /// 20 bits.
            flow_label / set_flow_label: u32 = bits([36, 36], 0, 20), "FlowLabel", Hex;
            /// 6 bits, `enum ib_rate`.
            packet_rate / set_packet_rate: u8 = bits([39, 41], 2, 6), "PacketRate", Rate;
            traffic_class / set_traffic_class: u8 = bits([40, 39], 0, 8), "TrafficClass", Dec;
            hop_limit / set_hop_limit: u8 = bits([41, 40], 0, 8), "HopLimit", Dec;
            /// 4 bits.
            sl / set_sl: u8 = bits([42, 42], 0, 4), "SL", Dec;
            subnet_local / set_subnet_local: bool = bits([42, 42], 4, 1), "SubnetLocal", Plain;
            /// 5 bits.
            local_ack_timeout / set_local_ack_timeout: u8 = bits([43, 43], 0, 5), "LocalACKTimeout", Timeout;
        ]
    }
}

// ---------------------------------------------------------------------------
// REQ (0x0010)

cm_message! {
    Req, ReqPacket, "REQ", "ConnectRequest", "IBTA table 106" {
        [
            local_comm_id / set_local_comm_id: u32 = bits(24, 0, 32), "LocalCommID", Hex;
            service_id / set_service_id: u64 = bits(32, 0, 64), "ServiceID", ServiceId;
            local_ca_guid / set_local_ca_guid: u64 = bits(40, 0, 64), "LocalCAGUID", Hex;
            /// 24 bits.
            vendor_id / set_vendor_id: u32 = bits(29, 0, 24), "VendorID", Hex;
        ]
        [
            /// 24 bits.
            local_qpn / set_local_qpn: u32 = bits(56, 0, 24), "LocalQPN", Hex;
            local_qkey / set_local_qkey: u32 = bits(52, 0, 32), "LocalQ_Key", Hex;
            /// 24 bits.
            starting_psn / set_starting_psn: u32 = bits(68, 0, 24), "StartingPSN", Hex;
            /// 2 bits: 0 RC, 1 UC, 2 RD, 3 extended (see `extended_transport_type`).
            transport_service_type / set_transport_service_type: u8 = bits(67, 5, 2), "TransportServiceType", Transport;
            /// 3 bits; 1 = XRC.
            extended_transport_type / set_extended_transport_type: u8 = bits(75, 5, 3), "ExtendedTransportType", ExtTransport;
            end_to_end_flow_control / set_end_to_end_flow_control: bool = bits(67, 7, 1), "EndToEndFlowControl", Plain;
            srq / set_srq: bool = bits(75, 4, 1), "SRQ", Plain;
        ]
        [
            responder_resources / set_responder_resources: u8 = bits(59, 0, 8), "ResponderResources", Dec;
            initiator_depth / set_initiator_depth: u8 = bits(63, 0, 8), "InitiatorDepth", Dec;
            /// 24 bits.
            local_eecn / set_local_eecn: u32 = bits(60, 0, 24), "LocalEECN", Hex;
            /// 24 bits.
            remote_eecn / set_remote_eecn: u32 = bits(64, 0, 24), "RemoteEECN", Hex;
            rdc_exists / set_rdc_exists: bool = bits(74, 4, 1), "RDCExists", Plain;
            sap_supported / set_sap_supported: bool = bits(163, 5, 1), "SAPSupported", Plain;
        ]
        [
            /// 5 bits.
            remote_cm_response_timeout / set_remote_cm_response_timeout: u8 = bits(67, 0, 5), "RemoteCMResponseTimeout", Timeout;
            /// 5 bits.
            local_cm_response_timeout / set_local_cm_response_timeout: u8 = bits(71, 0, 5), "LocalCMResponseTimeout", Timeout;
            /// 4 bits.
            max_cm_retries / set_max_cm_retries: u8 = bits(75, 0, 4), "MaxCMRetries", Dec;
        ]
        [
            pkey / set_pkey: u16 = bits(72, 0, 16), "PartitionKey", Hex;
            /// 4 bits, `enum ib_mtu`.
            path_mtu / set_path_mtu: u8 = bits(74, 0, 4), "PathPacketPayloadMTU", Mtu;
            /// 3 bits.
            retry_count / set_retry_count: u8 = bits(71, 5, 3), "RetryCount", Dec;
            /// 3 bits.
            rnr_retry_count / set_rnr_retry_count: u8 = bits(74, 5, 3), "RNRRetryCount", RnrRetry;
        ]
        [
            primary / primary_mut: ReqPath = path(76, Req, Primary), "Primary", Plain;
        ]
        [
            alternate / alternate_mut: ReqPath = path(120, Req, Alternate), "Alternate", Plain;
        ]
        private_data(164, pdata::REQ)
    }
}

impl Req {
    /// True when the REQ carries an alternate path (AlternateLocalPortLID
    /// non-zero, the kernel's test).
    pub fn has_alternate(&self) -> bool {
        self.alternate.local_lid != 0
    }
}

// ---------------------------------------------------------------------------
// MRA (0x0011)

cm_message! {
    Mra, MraPacket, "MRA", "MessageReceiptAcknowledgement", "IBTA table 107" {
        comm_ids [
            message_mraed / set_message_mraed: MsgCode = bits(32, 0, 2), "MessageMRAed", Plain;
            /// 5 bits.
            service_timeout / set_service_timeout: u8 = bits(33, 0, 5), "ServiceTimeout", Timeout;
        ]
        private_data(34, pdata::MRA)
    }
}

/// Declares the REJ reasons once: the constant, and the kernel's
/// `ibcm_reject_msg()` text (used by the C API, `ibcm decode` and, checked
/// against it, the Python package).
macro_rules! rej_reasons {
    ($($name:ident = $v:literal, $text:literal;)*) => {
        /// REJ reasons (`enum ib_cm_rej_reason`, IBTA table 109); 34 is
        /// not defined.
        pub mod rej_reason {
            $(pub const $name: u16 = $v;)*

            /// Every defined reason with its text, in value order.
            pub const ALL: &[(u16, &core::ffi::CStr)] = &[$(($v, $text),)*];

            /// The kernel's `ibcm_reject_msg()` text of a reason
            /// ("unrecognized reason" for an undefined one).
            pub fn text(reason: i64) -> &'static core::ffi::CStr {
                match reason {
                    $($v => $text,)*
                    _ => c"unrecognized reason",
                }
            }

            /// [`text`] as a `str`.
            pub fn text_str(reason: i64) -> &'static str {
                text(reason).to_str().unwrap_or("unrecognized reason")
            }
        }
    };
}

rej_reasons! {
    NO_QP = 1, c"no QP";
    NO_EEC = 2, c"no EEC";
    NO_RESOURCES = 3, c"no resources";
    TIMEOUT = 4, c"timeout";
    UNSUPPORTED = 5, c"unsupported";
    INVALID_COMM_ID = 6, c"invalid comm ID";
    INVALID_COMM_INSTANCE = 7, c"invalid comm instance";
    INVALID_SERVICE_ID = 8, c"invalid service ID";
    INVALID_TRANSPORT_TYPE = 9, c"invalid transport type";
    STALE_CONN = 10, c"stale conn";
    RDC_NOT_EXIST = 11, c"RDC not exist";
    INVALID_GID = 12, c"invalid GID";
    INVALID_LID = 13, c"invalid LID";
    INVALID_SL = 14, c"invalid SL";
    INVALID_TRAFFIC_CLASS = 15, c"invalid traffic class";
    INVALID_HOP_LIMIT = 16, c"invalid hop limit";
    INVALID_PACKET_RATE = 17, c"invalid packet rate";
    INVALID_ALT_GID = 18, c"invalid alt GID";
    INVALID_ALT_LID = 19, c"invalid alt LID";
    INVALID_ALT_SL = 20, c"invalid alt SL";
    INVALID_ALT_TRAFFIC_CLASS = 21, c"invalid alt traffic class";
    INVALID_ALT_HOP_LIMIT = 22, c"invalid alt hop limit";
    INVALID_ALT_PACKET_RATE = 23, c"invalid alt packet rate";
    PORT_CM_REDIRECT = 24, c"port CM redirect";
    PORT_REDIRECT = 25, c"port redirect";
    INVALID_MTU = 26, c"invalid MTU";
    INSUFFICIENT_RESP_RESOURCES = 27, c"insufficient resp resources";
    CONSUMER_DEFINED = 28, c"consumer defined";
    INVALID_RNR_RETRY = 29, c"invalid RNR retry";
    DUPLICATE_LOCAL_COMM_ID = 30, c"duplicate local comm ID";
    INVALID_CLASS_VERSION = 31, c"invalid class version";
    INVALID_FLOW_LABEL = 32, c"invalid flow label";
    INVALID_ALT_FLOW_LABEL = 33, c"invalid alt flow label";
    VENDOR_OPTION_NOT_SUPPORTED = 35, c"vendor option is not supported";
}

/// `enum ib_cm_sidr_status`: SIDR_REP statuses.
pub mod sidr_status {
    pub const SUCCESS: u8 = 0;
    pub const UNSUPPORTED: u8 = 1;
    pub const REJECT: u8 = 2;
    pub const NO_QP: u8 = 3;
    pub const REDIRECT: u8 = 4;
    pub const UNSUPPORTED_VERSION: u8 = 5;

    /// The enumerator's name ("unknown" for other values).
    pub fn name(status: u8) -> &'static str {
        match status {
            SUCCESS => "IB_SIDR_SUCCESS",
            UNSUPPORTED => "IB_SIDR_UNSUPPORTED",
            REJECT => "IB_SIDR_REJECT",
            NO_QP => "IB_SIDR_NO_QP",
            REDIRECT => "IB_SIDR_REDIRECT",
            UNSUPPORTED_VERSION => "IB_SIDR_UNSUPPORTED_VERSION",
            _ => "unknown",
        }
    }
}

/// `enum ib_cm_apr_status`: APR statuses.
pub mod apr_status {
    pub const SUCCESS: u8 = 0;
    pub const INVALID_COMM_ID: u8 = 1;
    pub const UNSUPPORTED: u8 = 2;
    pub const REJECT: u8 = 3;
    pub const REDIRECT: u8 = 4;
    pub const IS_CURRENT: u8 = 5;
    pub const INVALID_QPN_EECN: u8 = 6;
    pub const INVALID_LID: u8 = 7;
    pub const INVALID_GID: u8 = 8;
    pub const INVALID_FLOW_LABEL: u8 = 9;
    pub const INVALID_TCLASS: u8 = 10;
    pub const INVALID_HOP_LIMIT: u8 = 11;
    pub const INVALID_PACKET_RATE: u8 = 12;
    pub const INVALID_SL: u8 = 13;

    /// The enumerator's name ("unknown" for other values).
    pub fn name(status: u8) -> &'static str {
        match status {
            SUCCESS => "IB_CM_APR_SUCCESS",
            INVALID_COMM_ID => "IB_CM_APR_INVALID_COMM_ID",
            UNSUPPORTED => "IB_CM_APR_UNSUPPORTED",
            REJECT => "IB_CM_APR_REJECT",
            REDIRECT => "IB_CM_APR_REDIRECT",
            IS_CURRENT => "IB_CM_APR_IS_CURRENT",
            INVALID_QPN_EECN => "IB_CM_APR_INVALID_QPN_EECN",
            INVALID_LID => "IB_CM_APR_INVALID_LID",
            INVALID_GID => "IB_CM_APR_INVALID_GID",
            INVALID_FLOW_LABEL => "IB_CM_APR_INVALID_FLOW_LABEL",
            INVALID_TCLASS => "IB_CM_APR_INVALID_TCLASS",
            INVALID_HOP_LIMIT => "IB_CM_APR_INVALID_HOP_LIMIT",
            INVALID_PACKET_RATE => "IB_CM_APR_INVALID_PACKET_RATE",
            INVALID_SL => "IB_CM_APR_INVALID_SL",
            _ => "unknown",
        }
    }
}

/// Clamps a length field that exceeds its area (REJ RejectedInfoLength,
/// SIDR_REP and APR AdditionalInformationLength > 72) so the MAD parses:
/// the kernel delivers such messages, and a requester must not retry a
/// connection that was in fact rejected. Returns the field's name and its
/// original value when something was clamped.
pub fn clamp_info_length(buf: &mut [u8]) -> Option<(&'static str, u8)> {
    if buf.len() < crate::wire::MAD_LEN {
        return None;
    }
    let mad = &mut buf[..crate::wire::MAD_LEN];
    let attr_id = crate::wire::MadHeader::parse(mad).ok()?.attr_id;
    match attr_id {
        attr::REJ => {
            let mut p = RejPacket::new_unchecked(mad);
            let v = p.ari_length();
            (v as usize > pdata::REJ_ARI).then(|| {
                p.set_ari_length(pdata::REJ_ARI as u8);
                ("REJ.RejectedInfoLength", v)
            })
        }
        attr::SIDR_REP => {
            let mut p = SidrRepPacket::new_unchecked(mad);
            let v = p.info_length();
            (v as usize > pdata::SIDR_REP_INFO).then(|| {
                p.set_info_length(pdata::SIDR_REP_INFO as u8);
                ("SIDR_REP.AdditionalInformationLength", v)
            })
        }
        attr::APR => {
            let mut p = AprPacket::new_unchecked(mad);
            let v = p.info_length();
            (v as usize > pdata::APR_INFO).then(|| {
                p.set_info_length(pdata::APR_INFO as u8);
                ("APR.AdditionalInformationLength", v)
            })
        }
        _ => None,
    }
}

// ---------------------------------------------------------------------------
// REJ (0x0012)

cm_message! {
    Rej, RejPacket, "REJ", "Reject", "IBTA table 108" {
        comm_ids [
            message_rejected / set_message_rejected: MsgCode = bits(32, 0, 2), "MessageRejected", Plain;
            /// `enum ib_cm_rej_reason`; kept raw, unknown values are delivered as is.
            reason / set_reason: u16 = bits(34, 0, 16), "Reason", RejReason;
        ]
        [
            /// Length of the valid part of `ari` (0..=72).
            ari_length / set_ari_length: u8 = bits(33, 0, 7; max pdata::REJ_ARI), "RejectedInfoLength", Dec;
            ari / ari_mut: [u8; pdata::REJ_ARI] = area(36), "ARI", Plain;
        ]
        private_data(108, pdata::REJ)
    }
}

// ---------------------------------------------------------------------------
// REP (0x0013)

cm_message! {
    Rep, RepPacket, "REP", "Reply", "IBTA table 110" {
        comm_ids [
            local_ca_guid / set_local_ca_guid: u64 = bits(52, 0, 64), "LocalCAGUID", Hex;
            /// 24 bits, split over three bytes on the wire.
            vendor_id / set_vendor_id: u32 = split(
                vendor_id_h / set_vendor_id_h: u8 = (39, 0, 8),
                vendor_id_m / set_vendor_id_m: u8 = (43, 0, 8),
                vendor_id_l / set_vendor_id_l: u8 = (47, 0, 8),
            ), "VendorID", Hex;
        ]
        [
            /// 24 bits.
            local_qpn / set_local_qpn: u32 = bits(36, 0, 24), "LocalQPN", Hex;
            local_qkey / set_local_qkey: u32 = bits(32, 0, 32), "LocalQ_Key", Hex;
            /// 24 bits.
            starting_psn / set_starting_psn: u32 = bits(44, 0, 24), "StartingPSN", Hex;
            /// 24 bits (Linux puts the XRC target QPN here).
            local_eecn / set_local_eecn: u32 = bits(40, 0, 24), "LocalEEContext", Hex;
        ]
        [
            responder_resources / set_responder_resources: u8 = bits(48, 0, 8), "ResponderResources", Dec;
            initiator_depth / set_initiator_depth: u8 = bits(49, 0, 8), "InitiatorDepth", Dec;
            /// 5 bits.
            target_ack_delay / set_target_ack_delay: u8 = bits(50, 0, 5), "TargetACKDelay", Timeout;
            /// 2 bits: 0 accepted, 1 rejected (unsupported), 2 rejected (other).
            failover_accepted / set_failover_accepted: u8 = bits(50, 5, 2), "FailoverAccepted", Failover;
            end_to_end_flow_control / set_end_to_end_flow_control: bool = bits(50, 7, 1), "EndToEndFlowControl", Plain;
            /// 3 bits.
            rnr_retry_count / set_rnr_retry_count: u8 = bits(51, 0, 3), "RNRRetryCount", RnrRetry;
            srq / set_srq: bool = bits(51, 3, 1), "SRQ", Plain;
        ]
        private_data(60, pdata::REP)
    }
}

// ---------------------------------------------------------------------------
// RTU (0x0014), DREQ (0x0015), DREP (0x0016)

cm_message! {
    Rtu, RtuPacket, "RTU", "ReadyToUse", "IBTA table 111" {
        comm_ids []
        private_data(32, pdata::RTU)
    }
}

cm_message! {
    Dreq, DreqPacket, "DREQ", "DisconnectRequest", "IBTA table 112" {
        comm_ids [
            /// 24 bits: the receiver's QPN (or EECN).
            remote_qpn / set_remote_qpn: u32 = bits(32, 0, 24), "RemoteQPN/EECN", Hex;
        ]
        private_data(36, pdata::DREQ)
    }
}

cm_message! {
    Drep, DrepPacket, "DREP", "DisconnectReply", "IBTA table 113" {
        comm_ids []
        private_data(32, pdata::DREP)
    }
}

// ---------------------------------------------------------------------------
// SIDR_REQ (0x0017), SIDR_REP (0x0018)

cm_message! {
    SidrReq, SidrReqPacket, "SIDR_REQ", "ServiceIDResolutionRequest", "IBTA table 119" {
        [
            request_id / set_request_id: u32 = bits(24, 0, 32), "RequestID", Hex;
            pkey / set_pkey: u16 = bits(28, 0, 16), "PartitionKey", Hex;
            service_id / set_service_id: u64 = bits(32, 0, 64), "ServiceID", ServiceId;
        ]
        private_data(40, pdata::SIDR_REQ)
    }
}

cm_message! {
    SidrRep, SidrRepPacket, "SIDR_REP", "ServiceIDResolutionResponse", "IBTA table 120" {
        [
            request_id / set_request_id: u32 = bits(24, 0, 32), "RequestID", Hex;
            /// `enum ib_cm_sidr_status`, kept raw.
            status / set_status: u8 = bits(28, 0, 8), "Status", SidrStatus;
            /// 24 bits.
            qpn / set_qpn: u32 = bits(32, 0, 24), "QPN", Hex;
            qkey / set_qkey: u32 = bits(44, 0, 32), "Q_Key", Hex;
        ]
        [
            service_id / set_service_id: u64 = bits(36, 0, 64), "ServiceID", ServiceId;
            /// 24 bits: bits 23..8 in the 16-bit field at byte 30, bits 7..0 at byte 35.
            vendor_id / set_vendor_id: u32 = split(
                vendor_id_h / set_vendor_id_h: u16 = (30, 0, 16),
                vendor_id_l / set_vendor_id_l: u8 = (35, 0, 8),
            ), "VendorID", Hex;
        ]
        [
            /// Length of the valid part of `info` (0..=72).
            info_length / set_info_length: u8 = bits(29, 0, 8; max pdata::SIDR_REP_INFO), "AdditionalInformationLength", Dec;
            info / info_mut: [u8; pdata::SIDR_REP_INFO] = area(48), "AdditionalInformation", Plain;
        ]
        private_data(120, pdata::SIDR_REP)
    }
}

// ---------------------------------------------------------------------------
// LAP (0x0019), APR (0x001A)

cm_message! {
    Lap, LapPacket, "LAP", "LoadAlternatePath", "IBTA table 115" {
        comm_ids [
            /// 24 bits.
            remote_qpn / set_remote_qpn: u32 = bits(36, 0, 24), "RemoteQPN/EECN", Hex;
            /// 5 bits.
            remote_cm_response_timeout / set_remote_cm_response_timeout: u8 = bits(39, 0, 5), "RemoteCMResponseTimeout", Timeout;
        ]
        [
            /// The proposed alternate path.
            alternate / alternate_mut: ReqPath = path(44, Lap, Alternate), "Alternate", Plain;
        ]
        private_data(88, pdata::LAP)
    }
}

cm_message! {
    Apr, AprPacket, "APR", "AlternatePathResponse", "IBTA table 116" {
        comm_ids [
            /// `enum ib_cm_apr_status`, kept raw.
            ap_status / set_ap_status: u8 = bits(33, 0, 8), "APStatus", AprStatus;
        ]
        [
            /// Length of the valid part of `info` (0..=72).
            info_length / set_info_length: u8 = bits(32, 0, 8; max pdata::APR_INFO), "AdditionalInformationLength", Dec;
            info / info_mut: [u8; pdata::APR_INFO] = area(36), "AdditionalInformation", Plain;
        ]
        private_data(108, pdata::APR)
    }
}

// ---------------------------------------------------------------------------
// ClassPortInfo (0x0001)

cm_message! {
    #[derive(Copy)]
    ClassPortInfo, ClassPortInfoPacket, "ClassPortInfo", "ClassPortInfo", "IBTA 13.4.8.1, as the attribute of a CM MAD" {
        [
            base_version / set_base_version: u8 = bits(24, 0, 8), "BaseVersion", Dec;
            class_version / set_class_version: u8 = bits(25, 0, 8), "ClassVersion", Dec;
            capability_mask / set_capability_mask: u16 = bits(26, 0, 16), "CapabilityMask", Hex;
            /// 27 bits.
            capability_mask2 / set_capability_mask2: u32 = bits(28, 0, 27), "CapabilityMask2", Hex;
            /// 5 bits.
            resp_time_value / set_resp_time_value: u8 = bits(31, 3, 5), "RespTimeValue", Timeout;
        ]
        [
            redirect_gid / redirect_gid_mut: Gid = gid(32), "RedirectGID", Plain;
            redirect_tc / set_redirect_tc: u8 = bits(48, 0, 8), "RedirectTC", Dec;
            /// 4 bits.
            redirect_sl / set_redirect_sl: u8 = bits(49, 0, 4), "RedirectSL", Dec;
            /// 20 bits.
            redirect_fl / set_redirect_fl: u32 = bits(49, 4, 20), "RedirectFL", Hex;
            redirect_lid / set_redirect_lid: u16 = bits(52, 0, 16), "RedirectLID", Dec;
            redirect_pkey / set_redirect_pkey: u16 = bits(54, 0, 16), "RedirectP_Key", Hex;
            /// 24 bits.
            redirect_qp / set_redirect_qp: u32 = bits(57, 0, 24), "RedirectQP", Hex;
            redirect_qkey / set_redirect_qkey: u32 = bits(60, 0, 32), "RedirectQ_Key", Hex;
        ]
        [
            trap_gid / trap_gid_mut: Gid = gid(64), "TrapGID", Plain;
            trap_tc / set_trap_tc: u8 = bits(80, 0, 8), "TrapTC", Dec;
            /// 4 bits.
            trap_sl / set_trap_sl: u8 = bits(81, 0, 4), "TrapSL", Dec;
            /// 20 bits.
            trap_fl / set_trap_fl: u32 = bits(81, 4, 20), "TrapFL", Hex;
            trap_lid / set_trap_lid: u16 = bits(84, 0, 16), "TrapLID", Dec;
            trap_pkey / set_trap_pkey: u16 = bits(86, 0, 16), "TrapP_Key", Hex;
            trap_hl / set_trap_hl: u8 = bits(88, 0, 8), "TrapHL", Dec;
            /// 24 bits.
            trap_qp / set_trap_qp: u32 = bits(89, 0, 24), "TrapQP", Hex;
            trap_qkey / set_trap_qkey: u32 = bits(92, 0, 32), "TrapQ_Key", Hex;
        ]
    }
}

// ---------------------------------------------------------------------------
// The whole CM MAD

/// Declares [`CmMsg`] and its per-attribute dispatch (attribute ID, rows,
/// parse and emit) from one list of the attributes.
macro_rules! cm_messages {
    ($( $variant:ident($repr:ident, $view:ident) = $attr:path; )*) => {
        /// The attribute of a CM MAD.
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub enum CmMsg {
            $( $variant($repr), )*
        }

        impl CmMsg {
            pub fn attr_id(&self) -> u16 {
                match self {
                    $( CmMsg::$variant(_) => $attr, )*
                }
            }

            /// Every field of the message with its value, grouped in the
            /// lines `ibcm decode` prints (see [`crate::wire::field`]).
            pub fn rows(&self) -> Vec<Vec<FieldRef<'_>>> {
                match self {
                    $( CmMsg::$variant(m) => m.rows(), )*
                }
            }

            /// Parses the attribute `attr_id` of a 256-byte MAD (the header
            /// is checked by the caller).
            #[inline(always)]
            fn parse_attr(attr_id: u16, buf: &[u8]) -> Result<CmMsg> {
                match attr_id {
                    $( $attr => Ok(CmMsg::$variant($repr::parse(&$view::new_unchecked(buf))?)), )*
                    other => Err(Error::UnknownAttribute(other)),
                }
            }

            /// Writes the attribute into a zeroed 256-byte MAD.
            #[inline]
            fn emit_attr(&self, buf: &mut [u8]) {
                match self {
                    $( CmMsg::$variant(m) => m.emit(&mut $view::new_unchecked(buf)), )*
                }
            }
        }
    };
}

cm_messages! {
    ClassPortInfo(ClassPortInfo, ClassPortInfoPacket) = attr::CLASS_PORT_INFO;
    Req(Req, ReqPacket) = attr::REQ;
    Mra(Mra, MraPacket) = attr::MRA;
    Rej(Rej, RejPacket) = attr::REJ;
    Rep(Rep, RepPacket) = attr::REP;
    Rtu(Rtu, RtuPacket) = attr::RTU;
    Dreq(Dreq, DreqPacket) = attr::DREQ;
    Drep(Drep, DrepPacket) = attr::DREP;
    SidrReq(SidrReq, SidrReqPacket) = attr::SIDR_REQ;
    SidrRep(SidrRep, SidrRepPacket) = attr::SIDR_REP;
    Lap(Lap, LapPacket) = attr::LAP;
    Apr(Apr, AprPacket) = attr::APR;
}

impl CmMsg {
    /// The name `ibcm decode` uses (`REQ`, `SIDR_REP`, `ClassPortInfo`, ...).
    pub fn name(&self) -> &'static str {
        attr::name(self.attr_id()).unwrap_or("unknown")
    }

    /// The private-data area of the message (None for ClassPortInfo).
    pub fn private_data(&self) -> Option<&[u8]> {
        Some(match self {
            CmMsg::ClassPortInfo(_) => return None,
            CmMsg::Req(m) => &m.private_data,
            CmMsg::Mra(m) => &m.private_data,
            CmMsg::Rej(m) => &m.private_data,
            CmMsg::Rep(m) => &m.private_data,
            CmMsg::Rtu(m) => &m.private_data,
            CmMsg::Dreq(m) => &m.private_data,
            CmMsg::Drep(m) => &m.private_data,
            CmMsg::SidrReq(m) => &m.private_data,
            CmMsg::SidrRep(m) => &m.private_data,
            CmMsg::Lap(m) => &m.private_data,
            CmMsg::Apr(m) => &m.private_data,
        })
    }
}

/// A complete CM MAD: the variable parts of the header plus the attribute.
/// BaseVersion (1), MgmtClass (0x07), ClassVersion (2) and AttributeID
/// (from `msg`) are implied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmMad {
    /// Method byte including the response bit (CM messages: Send, 0x03).
    pub method: u8,
    pub status: u16,
    pub class_specific: u16,
    pub tid: u64,
    pub attr_mod: u32,
    pub msg: CmMsg,
}

impl CmMad {
    /// A Send MAD (what every CM message is) with status 0.
    pub fn send(tid: u64, attr_mod: u32, msg: CmMsg) -> CmMad {
        CmMad {
            method: method::SEND,
            status: 0,
            class_specific: 0,
            tid,
            attr_mod,
            msg,
        }
    }

    /// Parses an untrusted buffer holding one CM MAD (at least 256 bytes;
    /// extra bytes are ignored).
    pub fn parse(buf: &[u8]) -> Result<CmMad> {
        check_len(buf, MAD_LEN)?;
        let hdr = MadHeader::parse(buf)?;
        hdr.check_cm()?;
        let attr_id = hdr.attr_id;
        let is_cm_msg = (attr::REQ..=attr::APR).contains(&attr_id);
        if is_cm_msg {
            if hdr.method != method::SEND {
                return Err(Error::BadMethod {
                    attr: attr_id,
                    method: hdr.method,
                });
            }
        } else if attr_id == attr::CLASS_PORT_INFO {
            if !matches!(hdr.method, method::GET | method::SET | method::GET_RESP) {
                return Err(Error::BadMethod {
                    attr: attr_id,
                    method: hdr.method,
                });
            }
        } else {
            return Err(Error::UnknownAttribute(attr_id));
        }
        Ok(CmMad {
            method: hdr.method,
            status: hdr.status,
            class_specific: hdr.class_specific,
            tid: hdr.tid,
            attr_mod: hdr.attr_mod,
            msg: CmMsg::parse_attr(attr_id, buf)?,
        })
    }

    /// Writes the MAD into the first 256 bytes of `buf`, zero-filling all
    /// reserved bits. Panics if `buf` is shorter than 256 bytes.
    pub fn emit(&self, buf: &mut [u8]) {
        let buf = &mut buf[..MAD_LEN];
        buf.fill(0);
        MadHeader {
            base_version: BASE_VERSION,
            mgmt_class: MGMT_CLASS_CM,
            class_version: CM_CLASS_VERSION,
            method: self.method,
            status: self.status,
            class_specific: self.class_specific,
            tid: self.tid,
            attr_id: self.msg.attr_id(),
            attr_mod: self.attr_mod,
        }
        .emit(buf);
        self.msg.emit_attr(buf);
    }

    /// The MAD as 256 bytes.
    pub fn to_bytes(&self) -> [u8; MAD_LEN] {
        let mut b = [0u8; MAD_LEN];
        self.emit(&mut b);
        b
    }
}

/// Copies `data` into the start of a zeroed private-data area of size `N`.
/// Callers check the length first; longer input is truncated.
pub fn pdata_area<const N: usize>(data: &[u8]) -> [u8; N] {
    let mut a = [0u8; N];
    let n = data.len().min(N);
    a[..n].copy_from_slice(&data[..n]);
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex_to_mad(s: &str) -> [u8; 256] {
        let v: Vec<u8> = s
            .split_whitespace()
            .map(|h| u8::from_str_radix(h, 16).unwrap())
            .collect();
        let mut m = [0u8; 256];
        m[..v.len()].copy_from_slice(&v);
        m
    }

    #[test]
    fn over_long_info_lengths_are_clamped_to_their_area() {
        let rej = Rej {
            local_comm_id: 1,
            remote_comm_id: 2,
            message_rejected: MsgCode::Req,
            reason: rej_reason::CONSUMER_DEFINED,
            ..Rej::default()
        };
        let sidr = SidrRep {
            request_id: 1,
            status: 2,
            ..SidrRep::default()
        };
        let apr = Apr {
            local_comm_id: 1,
            remote_comm_id: 2,
            ap_status: 3,
            ..Apr::default()
        };
        let cases: [(CmMsg, usize, u8, u8); 3] = [
            // (message, byte of the length, how it sits in the byte)
            (CmMsg::Rej(rej), 33, 1, 127),
            (CmMsg::SidrRep(sidr), 29, 0, 255),
            (CmMsg::Apr(apr), 32, 0, 73),
        ];
        for (msg, at, shift, value) in cases {
            let mut m = CmMad::send(9, 0, msg).to_bytes();
            m[at] = (m[at] & !(0xff << shift)) | (value << shift);
            assert!(CmMad::parse(&m).is_err(), "{at}: rejected as reserved");
            let (field, was) = clamp_info_length(&mut m).expect("clamped");
            assert_eq!(was, value, "{field}");
            let parsed = CmMad::parse(&m).expect("parses after clamping");
            let len = match parsed.msg {
                CmMsg::Rej(r) => r.ari_length,
                CmMsg::SidrRep(r) => r.info_length,
                CmMsg::Apr(r) => r.info_length,
                _ => unreachable!(),
            };
            assert_eq!(len, 72, "{field}");
            // In range: nothing to clamp.
            assert_eq!(clamp_info_length(&mut m), None);
        }
        // Not a message with such a field, or too short: untouched.
        let rtu = Rtu {
            local_comm_id: 1,
            remote_comm_id: 2,
            private_data: [0; pdata::RTU],
        };
        let mut rtu = CmMad::send(1, 0, CmMsg::Rtu(rtu)).to_bytes();
        assert_eq!(clamp_info_length(&mut rtu), None);
        assert_eq!(clamp_info_length(&mut [0u8; 40]), None);
    }

    #[test]
    fn kernel_req_fields() {
        // First 128 bytes of rping.pcap frame 8 (the rest is private data
        // tail and zeros, checked by the golden tests).
        let mut mad = hex_to_mad(
            "01 07 02 03 00 00 00 00 00 00 00 02 18 57 18 2e
             00 10 00 00 00 00 00 00 2e 18 57 18 00 00 00 00
             00 00 00 00 01 06 1c 06 50 54 00 ff fe 77 00 02
             00 00 00 00 00 00 00 00 00 00 11 01 00 00 00 01
             00 00 00 a0 45 4a 06 a7 ff ff 37 f0 ff ff ff ff
             00 00 00 00 00 00 00 00 00 00 ff ff 0a 4d 00 02
             00 00 00 00 00 00 00 00 00 00 ff ff 0a 4d 00 01
             43 a6 20 00 00 40 00 98",
        );
        mad[164..168].copy_from_slice(&[0x00, 0x40, 0xa6, 0x24]);
        let m = CmMad::parse(&mad).unwrap();
        assert_eq!(m.tid, 0x0000_0002_1857_182e);
        let CmMsg::Req(r) = &m.msg else {
            panic!("not a REQ")
        };
        assert_eq!(r.local_comm_id, 0x2e18_5718);
        assert_eq!(r.service_id, 0x0000_0000_0106_1c06);
        assert_eq!(r.local_ca_guid, 0x5054_00ff_fe77_0002);
        assert_eq!(r.local_qpn, 0x11);
        assert_eq!((r.responder_resources, r.initiator_depth), (1, 1));
        assert_eq!(r.remote_cm_response_timeout, 20);
        assert_eq!(r.transport_service_type, 0);
        assert_eq!(r.starting_psn, 0x45_4a06);
        assert_eq!((r.local_cm_response_timeout, r.retry_count), (20, 7));
        assert_eq!((r.pkey, r.path_mtu, r.rnr_retry_count), (0xffff, 3, 7));
        assert_eq!(r.max_cm_retries, 15);
        assert_eq!(
            (r.primary.local_lid, r.primary.remote_lid),
            (0xffff, 0xffff)
        );
        assert_eq!(r.primary.local_gid.to_string(), "::ffff:10.77.0.2");
        assert_eq!(r.primary.remote_gid.to_string(), "::ffff:10.77.0.1");
        assert_eq!(r.primary.flow_label, 0x43a62);
        assert_eq!(r.primary.hop_limit, 64);
        assert_eq!(r.primary.local_ack_timeout, 19);
        assert!(!r.has_alternate());
        assert_eq!(&r.private_data[..4], &[0x00, 0x40, 0xa6, 0x24]);
        assert_eq!(m.to_bytes(), mad);
    }

    #[test]
    fn header_checks() {
        let mut mad = CmMad::send(
            1,
            0,
            CmMsg::Rtu(Rtu {
                local_comm_id: 1,
                remote_comm_id: 2,
                private_data: [0; 224],
            }),
        )
        .to_bytes();
        assert!(CmMad::parse(&mad).is_ok());
        assert_eq!(
            CmMad::parse(&mad[..255]),
            Err(Error::Truncated {
                needed: 256,
                got: 255
            })
        );
        mad[3] = method::GET;
        assert_eq!(
            CmMad::parse(&mad),
            Err(Error::BadMethod {
                attr: attr::RTU,
                method: method::GET
            })
        );
        mad[3] = method::SEND;
        mad[17] = 0x1b;
        assert_eq!(CmMad::parse(&mad), Err(Error::UnknownAttribute(0x1b)));
        mad[17] = 0x12; // REJ with MessageRejected = 3 (reserved)
        mad[32] = 0xc0;
        assert_eq!(
            CmMad::parse(&mad),
            Err(Error::Reserved {
                field: "REJ.MessageRejected",
                value: 3
            })
        );
        mad[32] = 0x00;
        mad[33] = 73 << 1;
        assert_eq!(
            CmMad::parse(&mad),
            Err(Error::Reserved {
                field: "REJ.RejectedInfoLength",
                value: 73
            })
        );
        // Both reserved: the length is checked first.
        mad[32] = 0xc0;
        assert_eq!(
            CmMad::parse(&mad),
            Err(Error::Reserved {
                field: "REJ.RejectedInfoLength",
                value: 73
            })
        );
    }

    #[test]
    fn rows_name_every_field_once() {
        let lap = Lap {
            remote_cm_response_timeout: 3,
            alternate: ReqPath {
                traffic_class: 0x12,
                hop_limit: 0x34,
                packet_rate: 0x2a,
                ..ReqPath::default()
            },
            ..Lap::default()
        };
        let b = CmMad::send(1, 0, CmMsg::Lap(lap.clone())).to_bytes();
        // LAP order: TrafficClass at 83, HopLimit at 84, PacketRate at 85.
        assert_eq!(&b[83..86], &[0x12, 0x34, 0x2a]);
        let msg = CmMad::parse(&b).unwrap().msg;
        let rows = msg.rows();
        let names: Vec<&str> = rows.iter().flatten().map(|f| f.name).collect();
        assert_eq!(names.len(), 4 + 11 + 1);
        assert_eq!(
            &names[4..6],
            &["alternate_local_lid", "alternate_remote_lid"]
        );
        let tc = rows
            .iter()
            .flatten()
            .find(|f| f.name == "alternate_traffic_class");
        assert_eq!(tc.unwrap().ibta, "AlternateTrafficClass");
        assert_eq!(tc.unwrap().value, crate::wire::FieldValue::Uint(0x12, 8));
        let req = Req::default();
        let n = CmMsg::Req(req).rows().iter().map(Vec::len).sum::<usize>();
        assert_eq!(n, 24 + 2 * 11 + 1);
    }

    #[test]
    fn sidr_rep_vendor_split() {
        let rep = SidrRep {
            request_id: 7,
            status: 0,
            info_length: 0,
            vendor_id: 0xabcdef,
            qpn: 0x11,
            service_id: 0x1111c06,
            qkey: 0x01234567,
            info: [0; 72],
            private_data: [0; 136],
        };
        let b = CmMad::send(9, 0, CmMsg::SidrRep(rep.clone())).to_bytes();
        assert_eq!(&b[30..36], &[0xab, 0xcd, 0x00, 0x00, 0x11, 0xef]);
        let CmMsg::SidrRep(back) = CmMad::parse(&b).unwrap().msg else {
            panic!()
        };
        assert_eq!(back, rep);
    }
}
