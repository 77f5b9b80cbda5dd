//! CM attributes (IBTA Vol 1 ch. 12, tables 106-120) as views and typed
//! representations.
//!
//! Every offset below is the offset in the whole 256-byte MAD (header
//! included) with the IBTA bit numbering (bit 0 = most significant bit of the
//! byte). Reserved bits are ignored on parse and written as zero on emit.

use super::mad::{BASE_VERSION, CM_CLASS_VERSION, MGMT_CLASS_CM, MadHeader, attr, method};
use super::{Error, Gid, MAD_LEN, Result, check_len, view_areas, view_fields};

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

macro_rules! cm_view {
    ($(#[$meta:meta])* $name:ident) => {
        $(#[$meta])*
        #[derive(Debug, Clone)]
        pub struct $name<T: AsRef<[u8]>> {
            buffer: T,
        }
        impl<T: AsRef<[u8]>> $name<T> {
            /// Wraps a buffer without checking its length (accessors panic
            /// on short buffers; use `new_checked` for untrusted input).
            pub fn new_unchecked(buffer: T) -> Self {
                $name { buffer }
            }
            /// Wraps a buffer of at least 256 bytes.
            pub fn new_checked(buffer: T) -> Result<Self> {
                check_len(buffer.as_ref(), MAD_LEN)?;
                Ok($name { buffer })
            }
            pub fn into_inner(self) -> T {
                self.buffer
            }
        }
    };
}

/// Which message a REJ rejects or an MRA acknowledges (2-bit field).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MsgCode {
    Req = 0,
    Rep = 1,
    Other = 2,
}

impl MsgCode {
    fn from_bits(v: u8, field: &'static str) -> Result<MsgCode> {
        match v {
            0 => Ok(MsgCode::Req),
            1 => Ok(MsgCode::Rep),
            2 => Ok(MsgCode::Other),
            _ => Err(Error::Reserved {
                field,
                value: v as u64,
            }),
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            MsgCode::Req => "REQ",
            MsgCode::Rep => "REP",
            MsgCode::Other => "OTHER",
        }
    }
}

// ---------------------------------------------------------------------------
// REQ (0x0010)

cm_view!(
    /// ConnectRequest (IBTA table 106).
    ReqPacket
);

view_fields!(ReqPacket {
    local_comm_id, set_local_comm_id: u32 = (24, 0, 32);
    vendor_id, set_vendor_id: u32 = (29, 0, 24);
    service_id, set_service_id: u64 = (32, 0, 64);
    local_ca_guid, set_local_ca_guid: u64 = (40, 0, 64);
    local_qkey, set_local_qkey: u32 = (52, 0, 32);
    local_qpn, set_local_qpn: u32 = (56, 0, 24);
    responder_resources, set_responder_resources: u8 = (59, 0, 8);
    local_eecn, set_local_eecn: u32 = (60, 0, 24);
    initiator_depth, set_initiator_depth: u8 = (63, 0, 8);
    remote_eecn, set_remote_eecn: u32 = (64, 0, 24);
    remote_cm_response_timeout, set_remote_cm_response_timeout: u8 = (67, 0, 5);
    transport_service_type, set_transport_service_type: u8 = (67, 5, 2);
    end_to_end_flow_control, set_end_to_end_flow_control: u8 = (67, 7, 1);
    starting_psn, set_starting_psn: u32 = (68, 0, 24);
    local_cm_response_timeout, set_local_cm_response_timeout: u8 = (71, 0, 5);
    retry_count, set_retry_count: u8 = (71, 5, 3);
    pkey, set_pkey: u16 = (72, 0, 16);
    path_mtu, set_path_mtu: u8 = (74, 0, 4);
    rdc_exists, set_rdc_exists: u8 = (74, 4, 1);
    rnr_retry_count, set_rnr_retry_count: u8 = (74, 5, 3);
    max_cm_retries, set_max_cm_retries: u8 = (75, 0, 4);
    srq, set_srq: u8 = (75, 4, 1);
    extended_transport_type, set_extended_transport_type: u8 = (75, 5, 3);
    primary_local_lid, set_primary_local_lid: u16 = (76, 0, 16);
    primary_remote_lid, set_primary_remote_lid: u16 = (78, 0, 16);
    primary_flow_label, set_primary_flow_label: u32 = (112, 0, 20);
    primary_packet_rate, set_primary_packet_rate: u8 = (115, 2, 6);
    primary_traffic_class, set_primary_traffic_class: u8 = (116, 0, 8);
    primary_hop_limit, set_primary_hop_limit: u8 = (117, 0, 8);
    primary_sl, set_primary_sl: u8 = (118, 0, 4);
    primary_subnet_local, set_primary_subnet_local: u8 = (118, 4, 1);
    primary_local_ack_timeout, set_primary_local_ack_timeout: u8 = (119, 0, 5);
    alternate_local_lid, set_alternate_local_lid: u16 = (120, 0, 16);
    alternate_remote_lid, set_alternate_remote_lid: u16 = (122, 0, 16);
    alternate_flow_label, set_alternate_flow_label: u32 = (156, 0, 20);
    alternate_packet_rate, set_alternate_packet_rate: u8 = (159, 2, 6);
    alternate_traffic_class, set_alternate_traffic_class: u8 = (160, 0, 8);
    alternate_hop_limit, set_alternate_hop_limit: u8 = (161, 0, 8);
    alternate_sl, set_alternate_sl: u8 = (162, 0, 4);
    alternate_subnet_local, set_alternate_subnet_local: u8 = (162, 4, 1);
    alternate_local_ack_timeout, set_alternate_local_ack_timeout: u8 = (163, 0, 5);
    sap_supported, set_sap_supported: u8 = (163, 5, 1);
});

view_areas!(ReqPacket {
    primary_local_gid, primary_local_gid_mut = (80, 16);
    primary_remote_gid, primary_remote_gid_mut = (96, 16);
    alternate_local_gid, alternate_local_gid_mut = (124, 16);
    alternate_remote_gid, alternate_remote_gid_mut = (140, 16);
    private_data, private_data_mut = (164, 92);
});

/// One path (primary or alternate) as a REQ carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReqPath {
    pub local_lid: u16,
    pub remote_lid: u16,
    pub local_gid: Gid,
    pub remote_gid: Gid,
    /// 20 bits.
    pub flow_label: u32,
    /// 6 bits, `enum ib_rate`.
    pub packet_rate: u8,
    pub traffic_class: u8,
    pub hop_limit: u8,
    /// 4 bits.
    pub sl: u8,
    pub subnet_local: bool,
    /// 5 bits.
    pub local_ack_timeout: u8,
}

/// ConnectRequest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Req {
    pub local_comm_id: u32,
    /// 24 bits.
    pub vendor_id: u32,
    pub service_id: u64,
    pub local_ca_guid: u64,
    pub local_qkey: u32,
    /// 24 bits.
    pub local_qpn: u32,
    pub responder_resources: u8,
    /// 24 bits.
    pub local_eecn: u32,
    pub initiator_depth: u8,
    /// 24 bits.
    pub remote_eecn: u32,
    /// 5 bits.
    pub remote_cm_response_timeout: u8,
    /// 2 bits: 0 RC, 1 UC, 2 RD, 3 extended (see `extended_transport_type`).
    pub transport_service_type: u8,
    pub end_to_end_flow_control: bool,
    /// 24 bits.
    pub starting_psn: u32,
    /// 5 bits.
    pub local_cm_response_timeout: u8,
    /// 3 bits.
    pub retry_count: u8,
    pub pkey: u16,
    /// 4 bits, `enum ib_mtu`.
    pub path_mtu: u8,
    pub rdc_exists: bool,
    /// 3 bits.
    pub rnr_retry_count: u8,
    /// 4 bits.
    pub max_cm_retries: u8,
    pub srq: bool,
    /// 3 bits; 1 = XRC.
    pub extended_transport_type: u8,
    pub primary: ReqPath,
    pub alternate: ReqPath,
    pub sap_supported: bool,
    pub private_data: [u8; pdata::REQ],
}

impl Default for Req {
    fn default() -> Self {
        Req {
            local_comm_id: 0,
            vendor_id: 0,
            service_id: 0,
            local_ca_guid: 0,
            local_qkey: 0,
            local_qpn: 0,
            responder_resources: 0,
            local_eecn: 0,
            initiator_depth: 0,
            remote_eecn: 0,
            remote_cm_response_timeout: 0,
            transport_service_type: 0,
            end_to_end_flow_control: false,
            starting_psn: 0,
            local_cm_response_timeout: 0,
            retry_count: 0,
            pkey: 0,
            path_mtu: 0,
            rdc_exists: false,
            rnr_retry_count: 0,
            max_cm_retries: 0,
            srq: false,
            extended_transport_type: 0,
            primary: ReqPath::default(),
            alternate: ReqPath::default(),
            sap_supported: false,
            private_data: [0; pdata::REQ],
        }
    }
}

impl Req {
    #[inline(always)]
    pub fn parse<T: AsRef<[u8]>>(p: &ReqPacket<T>) -> Result<Req> {
        Ok(Req {
            local_comm_id: p.local_comm_id(),
            vendor_id: p.vendor_id(),
            service_id: p.service_id(),
            local_ca_guid: p.local_ca_guid(),
            local_qkey: p.local_qkey(),
            local_qpn: p.local_qpn(),
            responder_resources: p.responder_resources(),
            local_eecn: p.local_eecn(),
            initiator_depth: p.initiator_depth(),
            remote_eecn: p.remote_eecn(),
            remote_cm_response_timeout: p.remote_cm_response_timeout(),
            transport_service_type: p.transport_service_type(),
            end_to_end_flow_control: p.end_to_end_flow_control() != 0,
            starting_psn: p.starting_psn(),
            local_cm_response_timeout: p.local_cm_response_timeout(),
            retry_count: p.retry_count(),
            pkey: p.pkey(),
            path_mtu: p.path_mtu(),
            rdc_exists: p.rdc_exists() != 0,
            rnr_retry_count: p.rnr_retry_count(),
            max_cm_retries: p.max_cm_retries(),
            srq: p.srq() != 0,
            extended_transport_type: p.extended_transport_type(),
            primary: ReqPath {
                local_lid: p.primary_local_lid(),
                remote_lid: p.primary_remote_lid(),
                local_gid: Gid(*p.primary_local_gid()),
                remote_gid: Gid(*p.primary_remote_gid()),
                flow_label: p.primary_flow_label(),
                packet_rate: p.primary_packet_rate(),
                traffic_class: p.primary_traffic_class(),
                hop_limit: p.primary_hop_limit(),
                sl: p.primary_sl(),
                subnet_local: p.primary_subnet_local() != 0,
                local_ack_timeout: p.primary_local_ack_timeout(),
            },
            alternate: ReqPath {
                local_lid: p.alternate_local_lid(),
                remote_lid: p.alternate_remote_lid(),
                local_gid: Gid(*p.alternate_local_gid()),
                remote_gid: Gid(*p.alternate_remote_gid()),
                flow_label: p.alternate_flow_label(),
                packet_rate: p.alternate_packet_rate(),
                traffic_class: p.alternate_traffic_class(),
                hop_limit: p.alternate_hop_limit(),
                sl: p.alternate_sl(),
                subnet_local: p.alternate_subnet_local() != 0,
                local_ack_timeout: p.alternate_local_ack_timeout(),
            },
            sap_supported: p.sap_supported() != 0,
            private_data: *p.private_data(),
        })
    }

    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut ReqPacket<T>) {
        p.set_local_comm_id(self.local_comm_id);
        p.set_vendor_id(self.vendor_id);
        p.set_service_id(self.service_id);
        p.set_local_ca_guid(self.local_ca_guid);
        p.set_local_qkey(self.local_qkey);
        p.set_local_qpn(self.local_qpn);
        p.set_responder_resources(self.responder_resources);
        p.set_local_eecn(self.local_eecn);
        p.set_initiator_depth(self.initiator_depth);
        p.set_remote_eecn(self.remote_eecn);
        p.set_remote_cm_response_timeout(self.remote_cm_response_timeout);
        p.set_transport_service_type(self.transport_service_type);
        p.set_end_to_end_flow_control(self.end_to_end_flow_control as u8);
        p.set_starting_psn(self.starting_psn);
        p.set_local_cm_response_timeout(self.local_cm_response_timeout);
        p.set_retry_count(self.retry_count);
        p.set_pkey(self.pkey);
        p.set_path_mtu(self.path_mtu);
        p.set_rdc_exists(self.rdc_exists as u8);
        p.set_rnr_retry_count(self.rnr_retry_count);
        p.set_max_cm_retries(self.max_cm_retries);
        p.set_srq(self.srq as u8);
        p.set_extended_transport_type(self.extended_transport_type);
        let a = &self.primary;
        p.set_primary_local_lid(a.local_lid);
        p.set_primary_remote_lid(a.remote_lid);
        *p.primary_local_gid_mut() = a.local_gid.0;
        *p.primary_remote_gid_mut() = a.remote_gid.0;
        p.set_primary_flow_label(a.flow_label);
        p.set_primary_packet_rate(a.packet_rate);
        p.set_primary_traffic_class(a.traffic_class);
        p.set_primary_hop_limit(a.hop_limit);
        p.set_primary_sl(a.sl);
        p.set_primary_subnet_local(a.subnet_local as u8);
        p.set_primary_local_ack_timeout(a.local_ack_timeout);
        let b = &self.alternate;
        p.set_alternate_local_lid(b.local_lid);
        p.set_alternate_remote_lid(b.remote_lid);
        *p.alternate_local_gid_mut() = b.local_gid.0;
        *p.alternate_remote_gid_mut() = b.remote_gid.0;
        p.set_alternate_flow_label(b.flow_label);
        p.set_alternate_packet_rate(b.packet_rate);
        p.set_alternate_traffic_class(b.traffic_class);
        p.set_alternate_hop_limit(b.hop_limit);
        p.set_alternate_sl(b.sl);
        p.set_alternate_subnet_local(b.subnet_local as u8);
        p.set_alternate_local_ack_timeout(b.local_ack_timeout);
        p.set_sap_supported(self.sap_supported as u8);
        *p.private_data_mut() = self.private_data;
    }

    /// True when the REQ carries an alternate path (AlternateLocalPortLID
    /// non-zero, the kernel's test).
    pub fn has_alternate(&self) -> bool {
        self.alternate.local_lid != 0
    }
}

// ---------------------------------------------------------------------------
// MRA (0x0011)

cm_view!(
    /// MessageReceiptAcknowledgement (IBTA table 107).
    MraPacket
);

view_fields!(MraPacket {
    local_comm_id, set_local_comm_id: u32 = (24, 0, 32);
    remote_comm_id, set_remote_comm_id: u32 = (28, 0, 32);
    message_mraed, set_message_mraed: u8 = (32, 0, 2);
    service_timeout, set_service_timeout: u8 = (33, 0, 5);
});

view_areas!(MraPacket {
    private_data, private_data_mut = (34, 222);
});

/// MessageReceiptAcknowledgement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mra {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub message_mraed: MsgCode,
    /// 5 bits.
    pub service_timeout: u8,
    pub private_data: [u8; pdata::MRA],
}

impl Mra {
    #[inline(always)]
    pub fn parse<T: AsRef<[u8]>>(p: &MraPacket<T>) -> Result<Mra> {
        Ok(Mra {
            local_comm_id: p.local_comm_id(),
            remote_comm_id: p.remote_comm_id(),
            message_mraed: MsgCode::from_bits(p.message_mraed(), "MRA.MessageMRAed")?,
            service_timeout: p.service_timeout(),
            private_data: *p.private_data(),
        })
    }
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut MraPacket<T>) {
        p.set_local_comm_id(self.local_comm_id);
        p.set_remote_comm_id(self.remote_comm_id);
        p.set_message_mraed(self.message_mraed as u8);
        p.set_service_timeout(self.service_timeout);
        *p.private_data_mut() = self.private_data;
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
            let v = p.rejected_info_length();
            (v as usize > pdata::REJ_ARI).then(|| {
                p.set_rejected_info_length(pdata::REJ_ARI as u8);
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

cm_view!(
    /// Reject (IBTA table 108).
    RejPacket
);

view_fields!(RejPacket {
    local_comm_id, set_local_comm_id: u32 = (24, 0, 32);
    remote_comm_id, set_remote_comm_id: u32 = (28, 0, 32);
    message_rejected, set_message_rejected: u8 = (32, 0, 2);
    rejected_info_length, set_rejected_info_length: u8 = (33, 0, 7);
    reason, set_reason: u16 = (34, 0, 16);
});

view_areas!(RejPacket {
    ari, ari_mut = (36, 72);
    private_data, private_data_mut = (108, 148);
});

/// Reject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rej {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub message_rejected: MsgCode,
    /// Length of the valid part of `ari` (0..=72).
    pub ari_length: u8,
    /// `enum ib_cm_rej_reason`; kept raw, unknown values are delivered as is.
    pub reason: u16,
    pub ari: [u8; pdata::REJ_ARI],
    pub private_data: [u8; pdata::REJ],
}

impl Rej {
    #[inline(always)]
    pub fn parse<T: AsRef<[u8]>>(p: &RejPacket<T>) -> Result<Rej> {
        let ari_length = p.rejected_info_length();
        if ari_length as usize > pdata::REJ_ARI {
            return Err(Error::Reserved {
                field: "REJ.RejectedInfoLength",
                value: ari_length as u64,
            });
        }
        Ok(Rej {
            local_comm_id: p.local_comm_id(),
            remote_comm_id: p.remote_comm_id(),
            message_rejected: MsgCode::from_bits(p.message_rejected(), "REJ.MessageRejected")?,
            ari_length,
            reason: p.reason(),
            ari: *p.ari(),
            private_data: *p.private_data(),
        })
    }
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut RejPacket<T>) {
        p.set_local_comm_id(self.local_comm_id);
        p.set_remote_comm_id(self.remote_comm_id);
        p.set_message_rejected(self.message_rejected as u8);
        p.set_rejected_info_length(self.ari_length);
        p.set_reason(self.reason);
        *p.ari_mut() = self.ari;
        *p.private_data_mut() = self.private_data;
    }
}

// ---------------------------------------------------------------------------
// REP (0x0013)

cm_view!(
    /// Reply (IBTA table 110).
    RepPacket
);

view_fields!(RepPacket {
    local_comm_id, set_local_comm_id: u32 = (24, 0, 32);
    remote_comm_id, set_remote_comm_id: u32 = (28, 0, 32);
    local_qkey, set_local_qkey: u32 = (32, 0, 32);
    local_qpn, set_local_qpn: u32 = (36, 0, 24);
    vendor_id_h, set_vendor_id_h: u8 = (39, 0, 8);
    local_eecn, set_local_eecn: u32 = (40, 0, 24);
    vendor_id_m, set_vendor_id_m: u8 = (43, 0, 8);
    starting_psn, set_starting_psn: u32 = (44, 0, 24);
    vendor_id_l, set_vendor_id_l: u8 = (47, 0, 8);
    responder_resources, set_responder_resources: u8 = (48, 0, 8);
    initiator_depth, set_initiator_depth: u8 = (49, 0, 8);
    target_ack_delay, set_target_ack_delay: u8 = (50, 0, 5);
    failover_accepted, set_failover_accepted: u8 = (50, 5, 2);
    end_to_end_flow_control, set_end_to_end_flow_control: u8 = (50, 7, 1);
    rnr_retry_count, set_rnr_retry_count: u8 = (51, 0, 3);
    srq, set_srq: u8 = (51, 3, 1);
    local_ca_guid, set_local_ca_guid: u64 = (52, 0, 64);
});

view_areas!(RepPacket {
    private_data, private_data_mut = (60, 196);
});

/// Reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rep {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub local_qkey: u32,
    /// 24 bits.
    pub local_qpn: u32,
    /// 24 bits, split over three bytes on the wire.
    pub vendor_id: u32,
    /// 24 bits (Linux puts the XRC target QPN here).
    pub local_eecn: u32,
    /// 24 bits.
    pub starting_psn: u32,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    /// 5 bits.
    pub target_ack_delay: u8,
    /// 2 bits: 0 accepted, 1 rejected (unsupported), 2 rejected (other).
    pub failover_accepted: u8,
    pub end_to_end_flow_control: bool,
    /// 3 bits.
    pub rnr_retry_count: u8,
    pub srq: bool,
    pub local_ca_guid: u64,
    pub private_data: [u8; pdata::REP],
}

impl Rep {
    #[inline(always)]
    pub fn parse<T: AsRef<[u8]>>(p: &RepPacket<T>) -> Result<Rep> {
        Ok(Rep {
            local_comm_id: p.local_comm_id(),
            remote_comm_id: p.remote_comm_id(),
            local_qkey: p.local_qkey(),
            local_qpn: p.local_qpn(),
            vendor_id: (p.vendor_id_h() as u32) << 16
                | (p.vendor_id_m() as u32) << 8
                | p.vendor_id_l() as u32,
            local_eecn: p.local_eecn(),
            starting_psn: p.starting_psn(),
            responder_resources: p.responder_resources(),
            initiator_depth: p.initiator_depth(),
            target_ack_delay: p.target_ack_delay(),
            failover_accepted: p.failover_accepted(),
            end_to_end_flow_control: p.end_to_end_flow_control() != 0,
            rnr_retry_count: p.rnr_retry_count(),
            srq: p.srq() != 0,
            local_ca_guid: p.local_ca_guid(),
            private_data: *p.private_data(),
        })
    }
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut RepPacket<T>) {
        p.set_local_comm_id(self.local_comm_id);
        p.set_remote_comm_id(self.remote_comm_id);
        p.set_local_qkey(self.local_qkey);
        p.set_local_qpn(self.local_qpn);
        p.set_vendor_id_h((self.vendor_id >> 16) as u8);
        p.set_local_eecn(self.local_eecn);
        p.set_vendor_id_m((self.vendor_id >> 8) as u8);
        p.set_starting_psn(self.starting_psn);
        p.set_vendor_id_l(self.vendor_id as u8);
        p.set_responder_resources(self.responder_resources);
        p.set_initiator_depth(self.initiator_depth);
        p.set_target_ack_delay(self.target_ack_delay);
        p.set_failover_accepted(self.failover_accepted);
        p.set_end_to_end_flow_control(self.end_to_end_flow_control as u8);
        p.set_rnr_retry_count(self.rnr_retry_count);
        p.set_srq(self.srq as u8);
        p.set_local_ca_guid(self.local_ca_guid);
        *p.private_data_mut() = self.private_data;
    }
}

// ---------------------------------------------------------------------------
// RTU (0x0014), DREQ (0x0015), DREP (0x0016)

cm_view!(
    /// ReadyToUse (IBTA table 111).
    RtuPacket
);

view_fields!(RtuPacket {
    local_comm_id, set_local_comm_id: u32 = (24, 0, 32);
    remote_comm_id, set_remote_comm_id: u32 = (28, 0, 32);
});

view_areas!(RtuPacket {
    private_data, private_data_mut = (32, 224);
});

/// ReadyToUse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rtu {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub private_data: [u8; pdata::RTU],
}

impl Rtu {
    #[inline(always)]
    pub fn parse<T: AsRef<[u8]>>(p: &RtuPacket<T>) -> Result<Rtu> {
        Ok(Rtu {
            local_comm_id: p.local_comm_id(),
            remote_comm_id: p.remote_comm_id(),
            private_data: *p.private_data(),
        })
    }
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut RtuPacket<T>) {
        p.set_local_comm_id(self.local_comm_id);
        p.set_remote_comm_id(self.remote_comm_id);
        *p.private_data_mut() = self.private_data;
    }
}

cm_view!(
    /// DisconnectRequest (IBTA table 112).
    DreqPacket
);

view_fields!(DreqPacket {
    local_comm_id, set_local_comm_id: u32 = (24, 0, 32);
    remote_comm_id, set_remote_comm_id: u32 = (28, 0, 32);
    remote_qpn, set_remote_qpn: u32 = (32, 0, 24);
});

view_areas!(DreqPacket {
    private_data, private_data_mut = (36, 220);
});

/// DisconnectRequest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dreq {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    /// 24 bits: the receiver's QPN (or EECN).
    pub remote_qpn: u32,
    pub private_data: [u8; pdata::DREQ],
}

impl Dreq {
    #[inline(always)]
    pub fn parse<T: AsRef<[u8]>>(p: &DreqPacket<T>) -> Result<Dreq> {
        Ok(Dreq {
            local_comm_id: p.local_comm_id(),
            remote_comm_id: p.remote_comm_id(),
            remote_qpn: p.remote_qpn(),
            private_data: *p.private_data(),
        })
    }
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut DreqPacket<T>) {
        p.set_local_comm_id(self.local_comm_id);
        p.set_remote_comm_id(self.remote_comm_id);
        p.set_remote_qpn(self.remote_qpn);
        *p.private_data_mut() = self.private_data;
    }
}

cm_view!(
    /// DisconnectReply (IBTA table 113).
    DrepPacket
);

view_fields!(DrepPacket {
    local_comm_id, set_local_comm_id: u32 = (24, 0, 32);
    remote_comm_id, set_remote_comm_id: u32 = (28, 0, 32);
});

view_areas!(DrepPacket {
    private_data, private_data_mut = (32, 224);
});

/// DisconnectReply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drep {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub private_data: [u8; pdata::DREP],
}

impl Drep {
    #[inline(always)]
    pub fn parse<T: AsRef<[u8]>>(p: &DrepPacket<T>) -> Result<Drep> {
        Ok(Drep {
            local_comm_id: p.local_comm_id(),
            remote_comm_id: p.remote_comm_id(),
            private_data: *p.private_data(),
        })
    }
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut DrepPacket<T>) {
        p.set_local_comm_id(self.local_comm_id);
        p.set_remote_comm_id(self.remote_comm_id);
        *p.private_data_mut() = self.private_data;
    }
}

// ---------------------------------------------------------------------------
// SIDR_REQ (0x0017), SIDR_REP (0x0018)

cm_view!(
    /// ServiceIDResolutionRequest (IBTA table 119).
    SidrReqPacket
);

view_fields!(SidrReqPacket {
    request_id, set_request_id: u32 = (24, 0, 32);
    pkey, set_pkey: u16 = (28, 0, 16);
    service_id, set_service_id: u64 = (32, 0, 64);
});

view_areas!(SidrReqPacket {
    private_data, private_data_mut = (40, 216);
});

/// ServiceIDResolutionRequest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidrReq {
    pub request_id: u32,
    pub pkey: u16,
    pub service_id: u64,
    pub private_data: [u8; pdata::SIDR_REQ],
}

impl SidrReq {
    #[inline(always)]
    pub fn parse<T: AsRef<[u8]>>(p: &SidrReqPacket<T>) -> Result<SidrReq> {
        Ok(SidrReq {
            request_id: p.request_id(),
            pkey: p.pkey(),
            service_id: p.service_id(),
            private_data: *p.private_data(),
        })
    }
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut SidrReqPacket<T>) {
        p.set_request_id(self.request_id);
        p.set_pkey(self.pkey);
        p.set_service_id(self.service_id);
        *p.private_data_mut() = self.private_data;
    }
}

cm_view!(
    /// ServiceIDResolutionResponse (IBTA table 120).
    SidrRepPacket
);

view_fields!(SidrRepPacket {
    request_id, set_request_id: u32 = (24, 0, 32);
    status, set_status: u8 = (28, 0, 8);
    info_length, set_info_length: u8 = (29, 0, 8);
    vendor_id_h, set_vendor_id_h: u16 = (30, 0, 16);
    qpn, set_qpn: u32 = (32, 0, 24);
    vendor_id_l, set_vendor_id_l: u8 = (35, 0, 8);
    service_id, set_service_id: u64 = (36, 0, 64);
    qkey, set_qkey: u32 = (44, 0, 32);
});

view_areas!(SidrRepPacket {
    info, info_mut = (48, 72);
    private_data, private_data_mut = (120, 136);
});

/// ServiceIDResolutionResponse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidrRep {
    pub request_id: u32,
    /// `enum ib_cm_sidr_status`, kept raw.
    pub status: u8,
    /// Length of the valid part of `info` (0..=72).
    pub info_length: u8,
    /// 24 bits: bits 23..8 in the 16-bit field at byte 30, bits 7..0 at byte 35.
    pub vendor_id: u32,
    /// 24 bits.
    pub qpn: u32,
    pub service_id: u64,
    pub qkey: u32,
    pub info: [u8; pdata::SIDR_REP_INFO],
    pub private_data: [u8; pdata::SIDR_REP],
}

impl SidrRep {
    #[inline(always)]
    pub fn parse<T: AsRef<[u8]>>(p: &SidrRepPacket<T>) -> Result<SidrRep> {
        let info_length = p.info_length();
        if info_length as usize > pdata::SIDR_REP_INFO {
            return Err(Error::Reserved {
                field: "SIDR_REP.AdditionalInformationLength",
                value: info_length as u64,
            });
        }
        Ok(SidrRep {
            request_id: p.request_id(),
            status: p.status(),
            info_length,
            vendor_id: (p.vendor_id_h() as u32) << 8 | p.vendor_id_l() as u32,
            qpn: p.qpn(),
            service_id: p.service_id(),
            qkey: p.qkey(),
            info: *p.info(),
            private_data: *p.private_data(),
        })
    }
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut SidrRepPacket<T>) {
        p.set_request_id(self.request_id);
        p.set_status(self.status);
        p.set_info_length(self.info_length);
        p.set_vendor_id_h((self.vendor_id >> 8) as u16);
        p.set_qpn(self.qpn);
        p.set_vendor_id_l(self.vendor_id as u8);
        p.set_service_id(self.service_id);
        p.set_qkey(self.qkey);
        *p.info_mut() = self.info;
        *p.private_data_mut() = self.private_data;
    }
}

// ---------------------------------------------------------------------------
// LAP (0x0019), APR (0x001A)

cm_view!(
    /// LoadAlternatePath (IBTA table 115).
    LapPacket
);

view_fields!(LapPacket {
    local_comm_id, set_local_comm_id: u32 = (24, 0, 32);
    remote_comm_id, set_remote_comm_id: u32 = (28, 0, 32);
    remote_qpn, set_remote_qpn: u32 = (36, 0, 24);
    remote_cm_response_timeout, set_remote_cm_response_timeout: u8 = (39, 0, 5);
    alternate_local_lid, set_alternate_local_lid: u16 = (44, 0, 16);
    alternate_remote_lid, set_alternate_remote_lid: u16 = (46, 0, 16);
    alternate_flow_label, set_alternate_flow_label: u32 = (80, 0, 20);
    alternate_traffic_class, set_alternate_traffic_class: u8 = (83, 0, 8);
    alternate_hop_limit, set_alternate_hop_limit: u8 = (84, 0, 8);
    alternate_packet_rate, set_alternate_packet_rate: u8 = (85, 2, 6);
    alternate_sl, set_alternate_sl: u8 = (86, 0, 4);
    alternate_subnet_local, set_alternate_subnet_local: u8 = (86, 4, 1);
    alternate_local_ack_timeout, set_alternate_local_ack_timeout: u8 = (87, 0, 5);
});

view_areas!(LapPacket {
    alternate_local_gid, alternate_local_gid_mut = (48, 16);
    alternate_remote_gid, alternate_remote_gid_mut = (64, 16);
    private_data, private_data_mut = (88, 168);
});

/// LoadAlternatePath.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lap {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    /// 24 bits.
    pub remote_qpn: u32,
    /// 5 bits.
    pub remote_cm_response_timeout: u8,
    /// The proposed alternate path.
    pub alternate: ReqPath,
    pub private_data: [u8; pdata::LAP],
}

impl Lap {
    #[inline(always)]
    pub fn parse<T: AsRef<[u8]>>(p: &LapPacket<T>) -> Result<Lap> {
        Ok(Lap {
            local_comm_id: p.local_comm_id(),
            remote_comm_id: p.remote_comm_id(),
            remote_qpn: p.remote_qpn(),
            remote_cm_response_timeout: p.remote_cm_response_timeout(),
            alternate: ReqPath {
                local_lid: p.alternate_local_lid(),
                remote_lid: p.alternate_remote_lid(),
                local_gid: Gid(*p.alternate_local_gid()),
                remote_gid: Gid(*p.alternate_remote_gid()),
                flow_label: p.alternate_flow_label(),
                packet_rate: p.alternate_packet_rate(),
                traffic_class: p.alternate_traffic_class(),
                hop_limit: p.alternate_hop_limit(),
                sl: p.alternate_sl(),
                subnet_local: p.alternate_subnet_local() != 0,
                local_ack_timeout: p.alternate_local_ack_timeout(),
            },
            private_data: *p.private_data(),
        })
    }
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut LapPacket<T>) {
        p.set_local_comm_id(self.local_comm_id);
        p.set_remote_comm_id(self.remote_comm_id);
        p.set_remote_qpn(self.remote_qpn);
        p.set_remote_cm_response_timeout(self.remote_cm_response_timeout);
        let a = &self.alternate;
        p.set_alternate_local_lid(a.local_lid);
        p.set_alternate_remote_lid(a.remote_lid);
        *p.alternate_local_gid_mut() = a.local_gid.0;
        *p.alternate_remote_gid_mut() = a.remote_gid.0;
        p.set_alternate_flow_label(a.flow_label);
        p.set_alternate_traffic_class(a.traffic_class);
        p.set_alternate_hop_limit(a.hop_limit);
        p.set_alternate_packet_rate(a.packet_rate);
        p.set_alternate_sl(a.sl);
        p.set_alternate_subnet_local(a.subnet_local as u8);
        p.set_alternate_local_ack_timeout(a.local_ack_timeout);
        *p.private_data_mut() = self.private_data;
    }
}

cm_view!(
    /// AlternatePathResponse (IBTA table 116).
    AprPacket
);

view_fields!(AprPacket {
    local_comm_id, set_local_comm_id: u32 = (24, 0, 32);
    remote_comm_id, set_remote_comm_id: u32 = (28, 0, 32);
    info_length, set_info_length: u8 = (32, 0, 8);
    ap_status, set_ap_status: u8 = (33, 0, 8);
});

view_areas!(AprPacket {
    info, info_mut = (36, 72);
    private_data, private_data_mut = (108, 148);
});

/// AlternatePathResponse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Apr {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    /// Length of the valid part of `info` (0..=72).
    pub info_length: u8,
    /// `enum ib_cm_apr_status`, kept raw.
    pub ap_status: u8,
    pub info: [u8; pdata::APR_INFO],
    pub private_data: [u8; pdata::APR],
}

impl Apr {
    #[inline(always)]
    pub fn parse<T: AsRef<[u8]>>(p: &AprPacket<T>) -> Result<Apr> {
        let info_length = p.info_length();
        if info_length as usize > pdata::APR_INFO {
            return Err(Error::Reserved {
                field: "APR.AdditionalInformationLength",
                value: info_length as u64,
            });
        }
        Ok(Apr {
            local_comm_id: p.local_comm_id(),
            remote_comm_id: p.remote_comm_id(),
            info_length,
            ap_status: p.ap_status(),
            info: *p.info(),
            private_data: *p.private_data(),
        })
    }
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut AprPacket<T>) {
        p.set_local_comm_id(self.local_comm_id);
        p.set_remote_comm_id(self.remote_comm_id);
        p.set_info_length(self.info_length);
        p.set_ap_status(self.ap_status);
        *p.info_mut() = self.info;
        *p.private_data_mut() = self.private_data;
    }
}

// ---------------------------------------------------------------------------
// ClassPortInfo (0x0001)

cm_view!(
    /// ClassPortInfo (IBTA 13.4.8.1), as the attribute of a CM MAD.
    ClassPortInfoPacket
);

view_fields!(ClassPortInfoPacket {
    base_version, set_base_version: u8 = (24, 0, 8);
    class_version, set_class_version: u8 = (25, 0, 8);
    capability_mask, set_capability_mask: u16 = (26, 0, 16);
    capability_mask2, set_capability_mask2: u32 = (28, 0, 27);
    resp_time_value, set_resp_time_value: u8 = (31, 3, 5);
    redirect_tc, set_redirect_tc: u8 = (48, 0, 8);
    redirect_sl, set_redirect_sl: u8 = (49, 0, 4);
    redirect_fl, set_redirect_fl: u32 = (49, 4, 20);
    redirect_lid, set_redirect_lid: u16 = (52, 0, 16);
    redirect_pkey, set_redirect_pkey: u16 = (54, 0, 16);
    redirect_qp, set_redirect_qp: u32 = (57, 0, 24);
    redirect_qkey, set_redirect_qkey: u32 = (60, 0, 32);
    trap_tc, set_trap_tc: u8 = (80, 0, 8);
    trap_sl, set_trap_sl: u8 = (81, 0, 4);
    trap_fl, set_trap_fl: u32 = (81, 4, 20);
    trap_lid, set_trap_lid: u16 = (84, 0, 16);
    trap_pkey, set_trap_pkey: u16 = (86, 0, 16);
    trap_hl, set_trap_hl: u8 = (88, 0, 8);
    trap_qp, set_trap_qp: u32 = (89, 0, 24);
    trap_qkey, set_trap_qkey: u32 = (92, 0, 32);
});

view_areas!(ClassPortInfoPacket {
    redirect_gid, redirect_gid_mut = (32, 16);
    trap_gid, trap_gid_mut = (64, 16);
});

/// ClassPortInfo.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ClassPortInfo {
    pub base_version: u8,
    pub class_version: u8,
    pub capability_mask: u16,
    /// 27 bits.
    pub capability_mask2: u32,
    /// 5 bits.
    pub resp_time_value: u8,
    pub redirect_gid: Gid,
    pub redirect_tc: u8,
    /// 4 bits.
    pub redirect_sl: u8,
    /// 20 bits.
    pub redirect_fl: u32,
    pub redirect_lid: u16,
    pub redirect_pkey: u16,
    /// 24 bits.
    pub redirect_qp: u32,
    pub redirect_qkey: u32,
    pub trap_gid: Gid,
    pub trap_tc: u8,
    /// 4 bits.
    pub trap_sl: u8,
    /// 20 bits.
    pub trap_fl: u32,
    pub trap_lid: u16,
    pub trap_pkey: u16,
    pub trap_hl: u8,
    /// 24 bits.
    pub trap_qp: u32,
    pub trap_qkey: u32,
}

impl ClassPortInfo {
    #[inline(always)]
    pub fn parse<T: AsRef<[u8]>>(p: &ClassPortInfoPacket<T>) -> Result<ClassPortInfo> {
        Ok(ClassPortInfo {
            base_version: p.base_version(),
            class_version: p.class_version(),
            capability_mask: p.capability_mask(),
            capability_mask2: p.capability_mask2(),
            resp_time_value: p.resp_time_value(),
            redirect_gid: Gid(*p.redirect_gid()),
            redirect_tc: p.redirect_tc(),
            redirect_sl: p.redirect_sl(),
            redirect_fl: p.redirect_fl(),
            redirect_lid: p.redirect_lid(),
            redirect_pkey: p.redirect_pkey(),
            redirect_qp: p.redirect_qp(),
            redirect_qkey: p.redirect_qkey(),
            trap_gid: Gid(*p.trap_gid()),
            trap_tc: p.trap_tc(),
            trap_sl: p.trap_sl(),
            trap_fl: p.trap_fl(),
            trap_lid: p.trap_lid(),
            trap_pkey: p.trap_pkey(),
            trap_hl: p.trap_hl(),
            trap_qp: p.trap_qp(),
            trap_qkey: p.trap_qkey(),
        })
    }
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut ClassPortInfoPacket<T>) {
        p.set_base_version(self.base_version);
        p.set_class_version(self.class_version);
        p.set_capability_mask(self.capability_mask);
        p.set_capability_mask2(self.capability_mask2);
        p.set_resp_time_value(self.resp_time_value);
        *p.redirect_gid_mut() = self.redirect_gid.0;
        p.set_redirect_tc(self.redirect_tc);
        p.set_redirect_sl(self.redirect_sl);
        p.set_redirect_fl(self.redirect_fl);
        p.set_redirect_lid(self.redirect_lid);
        p.set_redirect_pkey(self.redirect_pkey);
        p.set_redirect_qp(self.redirect_qp);
        p.set_redirect_qkey(self.redirect_qkey);
        *p.trap_gid_mut() = self.trap_gid.0;
        p.set_trap_tc(self.trap_tc);
        p.set_trap_sl(self.trap_sl);
        p.set_trap_fl(self.trap_fl);
        p.set_trap_lid(self.trap_lid);
        p.set_trap_pkey(self.trap_pkey);
        p.set_trap_hl(self.trap_hl);
        p.set_trap_qp(self.trap_qp);
        p.set_trap_qkey(self.trap_qkey);
    }
}

// ---------------------------------------------------------------------------
// The whole CM MAD

/// The attribute of a CM MAD.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmMsg {
    ClassPortInfo(ClassPortInfo),
    Req(Req),
    Mra(Mra),
    Rej(Rej),
    Rep(Rep),
    Rtu(Rtu),
    Dreq(Dreq),
    Drep(Drep),
    SidrReq(SidrReq),
    SidrRep(SidrRep),
    Lap(Lap),
    Apr(Apr),
}

impl CmMsg {
    pub fn attr_id(&self) -> u16 {
        match self {
            CmMsg::ClassPortInfo(_) => attr::CLASS_PORT_INFO,
            CmMsg::Req(_) => attr::REQ,
            CmMsg::Mra(_) => attr::MRA,
            CmMsg::Rej(_) => attr::REJ,
            CmMsg::Rep(_) => attr::REP,
            CmMsg::Rtu(_) => attr::RTU,
            CmMsg::Dreq(_) => attr::DREQ,
            CmMsg::Drep(_) => attr::DREP,
            CmMsg::SidrReq(_) => attr::SIDR_REQ,
            CmMsg::SidrRep(_) => attr::SIDR_REP,
            CmMsg::Lap(_) => attr::LAP,
            CmMsg::Apr(_) => attr::APR,
        }
    }

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
            msg: match attr_id {
                attr::CLASS_PORT_INFO => CmMsg::ClassPortInfo(ClassPortInfo::parse(
                    &ClassPortInfoPacket::new_unchecked(buf),
                )?),
                attr::REQ => CmMsg::Req(Req::parse(&ReqPacket::new_unchecked(buf))?),
                attr::MRA => CmMsg::Mra(Mra::parse(&MraPacket::new_unchecked(buf))?),
                attr::REJ => CmMsg::Rej(Rej::parse(&RejPacket::new_unchecked(buf))?),
                attr::REP => CmMsg::Rep(Rep::parse(&RepPacket::new_unchecked(buf))?),
                attr::RTU => CmMsg::Rtu(Rtu::parse(&RtuPacket::new_unchecked(buf))?),
                attr::DREQ => CmMsg::Dreq(Dreq::parse(&DreqPacket::new_unchecked(buf))?),
                attr::DREP => CmMsg::Drep(Drep::parse(&DrepPacket::new_unchecked(buf))?),
                attr::SIDR_REQ => {
                    CmMsg::SidrReq(SidrReq::parse(&SidrReqPacket::new_unchecked(buf))?)
                }
                attr::SIDR_REP => {
                    CmMsg::SidrRep(SidrRep::parse(&SidrRepPacket::new_unchecked(buf))?)
                }
                attr::LAP => CmMsg::Lap(Lap::parse(&LapPacket::new_unchecked(buf))?),
                attr::APR => CmMsg::Apr(Apr::parse(&AprPacket::new_unchecked(buf))?),
                other => return Err(Error::UnknownAttribute(other)),
            },
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
        match &self.msg {
            CmMsg::ClassPortInfo(m) => m.emit(&mut ClassPortInfoPacket::new_unchecked(buf)),
            CmMsg::Req(m) => m.emit(&mut ReqPacket::new_unchecked(buf)),
            CmMsg::Mra(m) => m.emit(&mut MraPacket::new_unchecked(buf)),
            CmMsg::Rej(m) => m.emit(&mut RejPacket::new_unchecked(buf)),
            CmMsg::Rep(m) => m.emit(&mut RepPacket::new_unchecked(buf)),
            CmMsg::Rtu(m) => m.emit(&mut RtuPacket::new_unchecked(buf)),
            CmMsg::Dreq(m) => m.emit(&mut DreqPacket::new_unchecked(buf)),
            CmMsg::Drep(m) => m.emit(&mut DrepPacket::new_unchecked(buf)),
            CmMsg::SidrReq(m) => m.emit(&mut SidrReqPacket::new_unchecked(buf)),
            CmMsg::SidrRep(m) => m.emit(&mut SidrRepPacket::new_unchecked(buf)),
            CmMsg::Lap(m) => m.emit(&mut LapPacket::new_unchecked(buf)),
            CmMsg::Apr(m) => m.emit(&mut AprPacket::new_unchecked(buf)),
        }
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
            ari_length: 0,
            reason: rej_reason::CONSUMER_DEFINED,
            ari: [0; pdata::REJ_ARI],
            private_data: [0; pdata::REJ],
        };
        let sidr = SidrRep {
            request_id: 1,
            status: 2,
            info_length: 0,
            vendor_id: 0,
            qpn: 0,
            service_id: 0,
            qkey: 0,
            info: [0; pdata::SIDR_REP_INFO],
            private_data: [0; pdata::SIDR_REP],
        };
        let apr = Apr {
            local_comm_id: 1,
            remote_comm_id: 2,
            info_length: 0,
            ap_status: 3,
            info: [0; pdata::APR_INFO],
            private_data: [0; pdata::APR],
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
