//! Plain data types of the engine: states, time, addresses, path records,
//! API parameters and events. They mirror the kernel's `ib_cm.h` /
//! `ib_sa.h` / `ib_verbs.h` meanings but are ordinary Rust values; the FFI
//! layer converts them to and from the `#[repr(C)]` structs.

use crate::wire::Gid;

/// A point in time in nanoseconds since an arbitrary epoch. The engine never
/// reads a clock: every call that depends on time takes a `Time`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Time(pub u64);

impl Time {
    pub const ZERO: Time = Time(0);
    pub fn from_millis(ms: u64) -> Time {
        Time(ms.saturating_mul(1_000_000))
    }
    pub fn as_millis_ceil(self) -> u64 {
        self.0.div_ceil(1_000_000)
    }
    pub fn as_millis_floor(self) -> u64 {
        self.0 / 1_000_000
    }
    pub fn plus_millis(self, ms: u64) -> Time {
        Time(self.0.saturating_add(ms.saturating_mul(1_000_000)))
    }
}

c_enum! {
    /// `enum ib_cm_state`.
    pub enum State: u8 {
        Idle = 0, "IDLE";
        Listen = 1, "LISTEN";
        ReqSent = 2, "REQ_SENT";
        ReqRcvd = 3, "REQ_RCVD";
        MraReqSent = 4, "MRA_REQ_SENT";
        MraReqRcvd = 5, "MRA_REQ_RCVD";
        RepSent = 6, "REP_SENT";
        RepRcvd = 7, "REP_RCVD";
        MraRepSent = 8, "MRA_REP_SENT";
        MraRepRcvd = 9, "MRA_REP_RCVD";
        Established = 10, "ESTABLISHED";
        DreqSent = 11, "DREQ_SENT";
        DreqRcvd = 12, "DREQ_RCVD";
        Timewait = 13, "TIMEWAIT";
        SidrReqSent = 14, "SIDR_REQ_SENT";
        SidrReqRcvd = 15, "SIDR_REQ_RCVD";
    }
}

/// `enum ib_cm_lap_state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum LapState {
    Uninit = 0,
    Idle = 1,
    Sent = 2,
    Rcvd = 3,
    MraSent = 4,
    MraRcvd = 5,
}

/// Kernel errno values the engine returns (positive numbers; the C layer
/// negates them).
pub mod errno {
    pub const EPERM: i32 = 1;
    pub const ENOENT: i32 = 2;
    pub const EIO: i32 = 5;
    pub const ENOMEM: i32 = 12;
    pub const EBUSY: i32 = 16;
    pub const ENODEV: i32 = 19;
    pub const EINVAL: i32 = 22;
    pub const ENOSPC: i32 = 28;
    pub const EPROTO: i32 = 71;
    pub const EOPNOTSUPP: i32 = 95;
    pub const EADDRINUSE: i32 = 98;
    pub const EISCONN: i32 = 106;
    pub const ETIMEDOUT: i32 = 110;
}

/// An error from an API call: a positive errno.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Errno(pub i32);

impl Errno {
    pub const EINVAL: Errno = Errno(errno::EINVAL);
    pub const EBUSY: Errno = Errno(errno::EBUSY);
    pub const ENOMEM: Errno = Errno(errno::ENOMEM);
    pub const EISCONN: Errno = Errno(errno::EISCONN);
    pub const ENOENT: Errno = Errno(errno::ENOENT);
    pub const ENODEV: Errno = Errno(errno::ENODEV);
}

impl std::fmt::Display for Errno {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = match self.0 {
            errno::EPERM => "EPERM",
            errno::ENOENT => "ENOENT",
            errno::EIO => "EIO",
            errno::ENOMEM => "ENOMEM",
            errno::EBUSY => "EBUSY",
            errno::ENODEV => "ENODEV",
            errno::EINVAL => "EINVAL",
            errno::ENOSPC => "ENOSPC",
            errno::EPROTO => "EPROTO",
            errno::EOPNOTSUPP => "EOPNOTSUPP",
            errno::EADDRINUSE => "EADDRINUSE",
            errno::EISCONN => "EISCONN",
            errno::ETIMEDOUT => "ETIMEDOUT",
            _ => "errno",
        };
        write!(f, "-{name} ({})", -self.0)
    }
}

pub type ApiResult<T = ()> = Result<T, Errno>;

/// `enum ib_qp_type` values the CM knows.
pub mod qp_type {
    pub const RC: u32 = 2;
    pub const UC: u32 = 3;
    pub const UD: u32 = 4;
    pub const XRC_INI: u32 = 9;
    pub const XRC_TGT: u32 = 10;
}

/// `enum sa_path_rec_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
#[repr(u8)]
pub enum PathRecType {
    #[default]
    Ib = 0,
    RoceV1 = 1,
    RoceV2 = 2,
    Opa = 3,
}

impl PathRecType {
    pub fn from_u32(v: u32) -> Option<PathRecType> {
        Some(match v {
            0 => PathRecType::Ib,
            1 => PathRecType::RoceV1,
            2 => PathRecType::RoceV2,
            3 => PathRecType::Opa,
            _ => return None,
        })
    }
    pub fn is_roce(self) -> bool {
        matches!(self, PathRecType::RoceV1 | PathRecType::RoceV2)
    }
}

/// `enum ib_gid_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
#[repr(u8)]
pub enum GidType {
    #[default]
    Ib = 0,
    RoceV1 = 1,
    RoceV2 = 2,
}

/// `enum ib_sa_selector` value used for "exactly".
pub const SA_EQ: u8 = 2;

path_rec_bytes!(bytes_struct! {
    /// A path record (`struct sa_path_rec`), all values in host order.
    /// `..u8s` stands for the one-byte members `sl` … `preference`
    /// (`path_rec_bytes!`, `src/members.rs`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub struct PathRec {
        pub dgid: Gid,
        pub sgid: Gid,
        pub service_id: u64,
        pub flow_label: u32,
        pub hop_limit: u8,
        pub traffic_class: u8,
        pub reversible: u8,
        pub numb_path: u8,
        pub pkey: u16,
        pub qos_class: u16,
        ..u8s,
        pub rec_type: PathRecType,
        pub flags: u32,
        /// IB: 16-bit LIDs; OPA: 32-bit; RoCE: unused.
        pub dlid: u32,
        pub slid: u32,
        pub raw_traffic: u8,
        /// RoCE only.
        pub route_resolved: bool,
        pub dmac: [u8; 6],
    }
});

/// `struct rdma_ucm_ece`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Ece {
    pub vendor_id: u32,
    pub attr_mod: u32,
}

/// An address handle as the CM computes it (`struct rdma_ah_attr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AhAttr {
    pub port_num: u8,
    pub sl: u8,
    pub static_rate: u8,
    /// `IB_AH_GRH` set.
    pub has_grh: bool,
    pub dgid: Gid,
    pub sgid_index: u16,
    pub flow_label: u32,
    pub hop_limit: u8,
    pub traffic_class: u8,
    /// IB: destination LID (16 bits); RoCE: unused.
    pub dlid: u32,
    pub src_path_bits: u8,
    pub dmac: [u8; 6],
    pub rec_type: PathRecType,
}

/// The CM's per-connection address vector (kernel `struct cm_av`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Av {
    pub port: u8,
    pub pkey_index: u16,
    /// 5-bit IBA time exponent.
    pub timeout: u8,
    pub ah: AhAttr,
    /// The local GID used as source.
    pub sgid: Gid,
}

/// Where a received MAD came from, and on which port/GID it arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MadSource {
    pub port: u8,
    /// Sender's GID (from the GRH; RoCE always has one).
    pub sgid: Gid,
    /// Our GID the packet was addressed to.
    pub dgid: Gid,
    pub has_grh: bool,
    pub slid: u16,
    pub dlid_path_bits: u8,
    pub sl: u8,
    pub src_qp: u32,
    /// P_Key from the BTH.
    pub pkey: u16,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub flow_label: u32,
}

impl MadSource {
    /// A GSI MAD as a RoCEv2 soft device receives it: port 1, with its
    /// GRH, hop limit 64 (what a Linux UDP sender puts in the IP header).
    /// The UDP fabric, the in-process loopback and the service's switch
    /// all report their MADs this way.
    pub fn roce_gsi(sgid: Gid, dgid: Gid, src_qp: u32, pkey: u16) -> MadSource {
        MadSource {
            port: 1,
            sgid,
            dgid,
            has_grh: true,
            src_qp,
            pkey,
            hop_limit: 64,
            ..MadSource::default()
        }
    }
}

/// Where to send a MAD. The fabric maps it to a socket address, a umad
/// address, or an in-process queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MadDest {
    pub port: u8,
    pub dgid: Gid,
    pub sgid: Gid,
    pub dlid: u16,
    pub sl: u8,
    pub pkey: u16,
    pub pkey_index: u16,
    pub hop_limit: u8,
    pub traffic_class: u8,
    pub flow_label: u32,
    pub has_grh: bool,
    /// Destination QP (always 1 for the CM).
    pub dest_qp: u32,
}

impl MadDest {
    /// Where the answer to a MAD from `src` goes: back to its sender, the
    /// GIDs swapped, on the port it came in by.
    pub fn reply_to(src: &MadSource) -> MadDest {
        MadDest {
            port: src.port,
            dgid: src.sgid,
            sgid: src.dgid,
            dlid: src.slid,
            sl: src.sl,
            pkey: src.pkey,
            pkey_index: 0,
            hop_limit: if src.has_grh { 0xff } else { 0 },
            traffic_class: src.traffic_class,
            flow_label: src.flow_label,
            has_grh: src.has_grh,
            dest_qp: src.src_qp.max(1),
        }
    }
}

impl MadSource {
    /// A MAD sent to `d` as a device of the same host receives it without
    /// a wire (the sender's LID `slid`, QP1).
    pub fn delivered(d: &MadDest, slid: u16) -> MadSource {
        MadSource {
            port: d.port,
            sgid: d.sgid,
            dgid: d.dgid,
            has_grh: d.has_grh,
            slid,
            dlid_path_bits: 0,
            sl: d.sl,
            src_qp: 1,
            pkey: d.pkey,
            hop_limit: d.hop_limit,
            traffic_class: d.traffic_class,
            flow_label: d.flow_label,
        }
    }
}

/// One MAD the engine wants sent.
#[derive(Clone, PartialEq, Eq)]
pub struct Transmit {
    pub dest: MadDest,
    pub mad: [u8; 256],
}

impl std::fmt::Debug for Transmit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use crate::wire::{attr, peek};
        write!(
            f,
            "Transmit({} to {}, tid {:#x})",
            attr::name(peek::attr_id_of(&self.mad)).unwrap_or("?"),
            self.dest.dgid,
            peek::tid(&self.mad).unwrap_or_default()
        )
    }
}

req_param_bytes!(bytes_struct! {
    /// Parameters of `ib_send_cm_req`. `..u8s` stands for the one-byte
    /// members `responder_resources` … `srq` of `struct ib_cm_req_param`
    /// (`req_param_bytes!`, `src/members.rs`).
    #[derive(Debug, Clone, Default)]
    pub struct ReqParams {
        pub primary_path: PathRec,
        pub primary_path_inbound: Option<PathRec>,
        pub primary_path_outbound: Option<PathRec>,
        pub alternate_path: Option<PathRec>,
        /// GID table entry (port, index) from `ppath_sgid_attr`, if given.
        pub sgid_attr: Option<(u8, u16)>,
        pub service_id: u64,
        pub qp_num: u32,
        pub qp_type: u32,
        pub starting_psn: u32,
        pub private_data: Vec<u8>,
        ..u8s,
        pub ece: Ece,
    }
});

rep_param_bytes!(bytes_struct! {
    /// Parameters of `ib_send_cm_rep`. `..u8s` stands for the one-byte
    /// members `responder_resources` … `srq` of `struct ib_cm_rep_param`
    /// (`rep_param_bytes!`, `src/members.rs`).
    #[derive(Debug, Clone, Default)]
    pub struct RepParams {
        pub qp_num: u32,
        pub starting_psn: u32,
        pub private_data: Vec<u8>,
        ..u8s,
        pub ece: Ece,
    }
});

/// Parameters of `ib_send_cm_sidr_req`.
#[derive(Debug, Clone, Default)]
pub struct SidrReqParams {
    pub path: PathRec,
    pub sgid_attr: Option<(u8, u16)>,
    pub service_id: u64,
    pub timeout_ms: u64,
    pub private_data: Vec<u8>,
    pub max_cm_retries: u8,
}

/// Parameters of `ib_send_cm_sidr_rep`.
#[derive(Debug, Clone, Default)]
pub struct SidrRepParams {
    pub qp_num: u32,
    pub qkey: u32,
    pub status: u32,
    pub info: Vec<u8>,
    pub private_data: Vec<u8>,
    pub ece: Ece,
}

c_enum! {
    /// `enum ib_cm_event_type`.
    pub enum EventType: u32 {
        ReqError = 0, "REQ_ERROR";
        ReqReceived = 1, "REQ_RECEIVED";
        RepError = 2, "REP_ERROR";
        RepReceived = 3, "REP_RECEIVED";
        RtuReceived = 4, "RTU_RECEIVED";
        UserEstablished = 5, "USER_ESTABLISHED";
        DreqError = 6, "DREQ_ERROR";
        DreqReceived = 7, "DREQ_RECEIVED";
        DrepReceived = 8, "DREP_RECEIVED";
        TimewaitExit = 9, "TIMEWAIT_EXIT";
        MraReceived = 10, "MRA_RECEIVED";
        RejReceived = 11, "REJ_RECEIVED";
        LapError = 12, "LAP_ERROR";
        LapReceived = 13, "LAP_RECEIVED";
        AprReceived = 14, "APR_RECEIVED";
        SidrReqError = 15, "SIDR_REQ_ERROR";
        SidrReqReceived = 16, "SIDR_REQ_RECEIVED";
        SidrRepReceived = 17, "SIDR_REP_RECEIVED";
    }
}

impl EventType {
    /// The AttributeID of the message whose receipt this event reports
    /// (`None` for errors, `USER_ESTABLISHED` and `TIMEWAIT_EXIT`).
    pub fn received_attr(self) -> Option<u16> {
        use crate::wire::attr;
        Some(match self {
            EventType::ReqReceived => attr::REQ,
            EventType::RepReceived => attr::REP,
            EventType::RtuReceived => attr::RTU,
            EventType::DreqReceived => attr::DREQ,
            EventType::DrepReceived => attr::DREP,
            EventType::MraReceived => attr::MRA,
            EventType::RejReceived => attr::REJ,
            EventType::LapReceived => attr::LAP,
            EventType::AprReceived => attr::APR,
            EventType::SidrReqReceived => attr::SIDR_REQ,
            EventType::SidrRepReceived => attr::SIDR_REP,
            EventType::ReqError
            | EventType::RepError
            | EventType::UserEstablished
            | EventType::DreqError
            | EventType::TimewaitExit
            | EventType::LapError
            | EventType::SidrReqError => return None,
        })
    }
}

/// `IB_WC_RESP_TIMEOUT_ERR`, the status of `*_ERROR` events.
pub const WC_RESP_TIMEOUT_ERR: u32 = 20;
/// `IB_WC_GENERAL_ERR`: the status of the `*_ERROR` event a served
/// process gets for a one-way call the CM service refused.
pub const WC_GENERAL_ERR: u32 = 21;

/// Parameters of `IB_CM_REQ_RECEIVED` (`struct ib_cm_req_event_param`).
#[derive(Debug, Clone)]
pub struct ReqEvent {
    /// The listener's handle.
    pub listen_id: Handle,
    pub bth_pkey: u16,
    pub port: u8,
    pub primary_path: PathRec,
    pub alternate_path: Option<PathRec>,
    /// (port, GID index) of the GID the REQ arrived on.
    pub sgid_attr: (u8, u16),
    pub remote_ca_guid: u64,
    pub remote_qkey: u32,
    pub remote_qpn: u32,
    pub qp_type: u32,
    pub starting_psn: u32,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub local_cm_response_timeout: u8,
    pub flow_control: u8,
    pub remote_cm_response_timeout: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: u8,
    pub ece: Ece,
}

/// Parameters of `IB_CM_REP_RECEIVED` (`struct ib_cm_rep_event_param`).
#[derive(Debug, Clone, Copy, Default)]
pub struct RepEvent {
    pub remote_ca_guid: u64,
    pub remote_qkey: u32,
    pub remote_qpn: u32,
    pub starting_psn: u32,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub target_ack_delay: u8,
    pub failover_accepted: u8,
    pub flow_control: u8,
    pub rnr_retry_count: u8,
    pub srq: u8,
    pub ece: Ece,
}

/// Parameters of `IB_CM_SIDR_REQ_RECEIVED`.
#[derive(Debug, Clone, Copy)]
pub struct SidrReqEvent {
    /// The listener's handle.
    pub listen_id: Handle,
    pub service_id: u64,
    pub sgid_attr: (u8, u16),
    pub bth_pkey: u16,
    pub port: u8,
    pub pkey: u16,
}

/// Parameters of `IB_CM_SIDR_REP_RECEIVED`.
#[derive(Debug, Clone, Copy)]
pub struct SidrRepEvent {
    pub status: u32,
    pub qkey: u32,
    pub qpn: u32,
    pub info_len: u8,
    pub sgid_attr: (u8, u16),
}

/// The parameter part of an event.
#[derive(Debug, Clone)]
pub enum EventParam {
    None,
    /// `*_ERROR` events: the work-completion status.
    SendStatus(u32),
    Req(Box<ReqEvent>),
    Rep(RepEvent),
    Rej {
        reason: u32,
        ari_length: u8,
    },
    Mra {
        service_timeout: u8,
    },
    Lap {
        alternate_path: Box<PathRec>,
    },
    Apr {
        ap_status: u32,
        info_len: u8,
    },
    SidrReq(SidrReqEvent),
    SidrRep(SidrRepEvent),
}

/// A handle naming an id inside one engine (slab slot + generation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Handle(pub u64);

/// An event for a consumer. `mad` holds the received MAD (private data,
/// ARI and info point into it); it is all zeros for events without one.
#[derive(Clone)]
pub struct Event {
    pub id: Handle,
    pub kind: EventType,
    pub param: EventParam,
    /// For REQ/SIDR_REQ events: the new id's local comm ID.
    pub local_id: u32,
    /// Received MAD, when the event came from one.
    pub mad: Option<Box<[u8; 256]>>,
}

impl std::fmt::Debug for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Event({:?} {} {:?})",
            self.id,
            self.kind.name(),
            self.param
        )
    }
}

impl Event {
    /// Offset and length of the private data in `mad` for this event kind.
    pub fn private_data_range(&self) -> Option<(usize, usize)> {
        self.mad.as_ref()?;
        crate::wire::peek::private_data_range(self.kind.received_attr()?)
    }

    /// The private-data area of the received message.
    pub fn private_data(&self) -> Option<&[u8]> {
        let (off, len) = self.private_data_range()?;
        Some(&self.mad.as_ref()?[off..off + len])
    }

    /// REJ ARI / APR info / SIDR_REP info area (the valid part).
    pub fn info(&self) -> Option<&[u8]> {
        let mad = self.mad.as_ref()?;
        let len = match (&self.kind, &self.param) {
            (EventType::RejReceived, EventParam::Rej { ari_length, .. }) => *ari_length,
            (EventType::AprReceived, EventParam::Apr { info_len, .. }) => *info_len,
            (EventType::SidrRepReceived, EventParam::SidrRep(p)) => p.info_len,
            _ => return None,
        };
        let area = crate::wire::peek::info_area(self.kind.received_attr()?, &mad[..])?;
        Some(&area[..(len as usize).min(area.len())])
    }
}

/// `ib_cm_init_qp_attr` result: the attribute values and mask, in the
/// kernel's meaning (`struct ib_qp_attr` / `enum ib_qp_attr_mask`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QpAttr {
    pub mask: u32,
    pub qp_state: u32,
    pub qp_access_flags: u32,
    pub pkey_index: u16,
    pub port_num: u8,
    pub ah_attr: AhAttr,
    pub path_mtu: u8,
    pub dest_qp_num: u32,
    pub rq_psn: u32,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub alt_ah_attr: AhAttr,
    pub alt_port_num: u8,
    pub alt_pkey_index: u16,
    pub alt_timeout: u8,
    pub sq_psn: u32,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub max_rd_atomic: u8,
    pub timeout: u8,
    pub path_mig_state: u32,
}

/// `enum ib_qp_attr_mask` bits.
pub mod qp_mask {
    pub const STATE: u32 = 1 << 0;
    pub const ACCESS_FLAGS: u32 = 1 << 3;
    pub const PKEY_INDEX: u32 = 1 << 4;
    pub const PORT: u32 = 1 << 5;
    pub const AV: u32 = 1 << 7;
    pub const PATH_MTU: u32 = 1 << 8;
    pub const TIMEOUT: u32 = 1 << 9;
    pub const RETRY_CNT: u32 = 1 << 10;
    pub const RNR_RETRY: u32 = 1 << 11;
    pub const RQ_PSN: u32 = 1 << 12;
    pub const MAX_QP_RD_ATOMIC: u32 = 1 << 13;
    pub const ALT_PATH: u32 = 1 << 14;
    pub const MIN_RNR_TIMER: u32 = 1 << 15;
    pub const SQ_PSN: u32 = 1 << 16;
    pub const MAX_DEST_RD_ATOMIC: u32 = 1 << 17;
    pub const PATH_MIG_STATE: u32 = 1 << 18;
    pub const DEST_QPN: u32 = 1 << 20;
}

/// Copies into `$dst` each member of the [`QpAttr`] `$src` that one bit of
/// `$mask` selects on its own (pairs of the bit and the member, listed once
/// here): the same names in the kernel's `struct ib_qp_attr` and in
/// libibverbs' `struct ibv_qp_attr`, so the conversions to either C struct
/// (`ffi::convert::qp_attr_to_c`, `fabric::verbs::qp_attr_from_cm`) share
/// the list and write only the members that need more (state, port,
/// address vectors, alternate path) themselves. Values convert with `as`
/// to the C member's type.
macro_rules! copy_plain_qp_attrs {
    ($mask:expr, $src:expr, $dst:expr) => {{
        let (mask, src, dst) = ($mask, $src, $dst);
        $crate::engine::copy_plain_qp_attrs!(@pairs mask, src, dst;
            ACCESS_FLAGS => qp_access_flags,
            PKEY_INDEX => pkey_index,
            PATH_MTU => path_mtu,
            DEST_QPN => dest_qp_num,
            RQ_PSN => rq_psn,
            MAX_DEST_RD_ATOMIC => max_dest_rd_atomic,
            MIN_RNR_TIMER => min_rnr_timer,
            SQ_PSN => sq_psn,
            RETRY_CNT => retry_cnt,
            RNR_RETRY => rnr_retry,
            MAX_QP_RD_ATOMIC => max_rd_atomic,
            TIMEOUT => timeout,
            PATH_MIG_STATE => path_mig_state,
        );
    }};
    (@pairs $mask:ident, $src:ident, $dst:ident; $($bit:ident => $f:ident,)*) => {
        $(
            if $mask & $crate::engine::qp_mask::$bit != 0 {
                #[allow(clippy::unnecessary_cast)]
                {
                    $dst.$f = $src.$f as _;
                }
            }
        )*
    };
}
pub(crate) use copy_plain_qp_attrs;

/// `enum ib_qp_state` values accepted by `ib_cm_init_qp_attr`.
pub mod qp_state {
    pub const INIT: u32 = 1;
    pub const RTR: u32 = 2;
    pub const RTS: u32 = 3;
}

/// `enum ib_access_flags` bits the CM sets.
pub mod access {
    pub const REMOTE_WRITE: u32 = 2;
    pub const REMOTE_READ: u32 = 4;
    pub const REMOTE_ATOMIC: u32 = 8;
    pub const FLUSH_GLOBAL: u32 = 1 << 8;
    pub const FLUSH_PERSISTENT: u32 = 1 << 9;
}

/// `IB_MIG_REARM`.
pub const MIG_REARM: u32 = 1;

/// `enum ib_event_type` values accepted by `ib_cm_notify`.
pub mod ib_event {
    pub const COMM_EST: u32 = 4;
    pub const PATH_MIG: u32 = 6;
}

/// `IB_CM_ASSIGN_SERVICE_ID` (host order).
pub const ASSIGN_SERVICE_ID: u64 = 0x0200_0000_0000_0000;
/// `IB_SERVICE_ID_AGN_MASK` (host order).
pub const SERVICE_ID_AGN_MASK: u64 = 0xff00_0000_0000_0000;
