//! `#[repr(C)]` mirrors of the C types of `include/rdma/*.h`, i.e. of the
//! Linux kernel's `<rdma/ib_cm.h>` API and the parts of `ib_verbs.h`,
//! `ib_sa.h`, `ib_mad.h` and `rdma_user_cm.h` it depends on.
//!
//! Conventions:
//! * Type names are the C names in Rust style (`struct ib_cm_id` is
//!   [`IbCmId`]); member names are the C names unchanged (`type` is
//!   `r#type`; the kernel's anonymous unions get a member named `u`).
//! * C enumerations are plain integer aliases (`type IbCmState = u32`) with
//!   one `pub const` per enumerator: C code may store any integer in an
//!   enum-typed member, so a Rust `enum` would be unsound to read.
//! * Members of the kernel types `__be16/__be32/__be64` are [`Be16`],
//!   [`Be32`], [`Be64`]: ordinary integers that hold the *big-endian*
//!   representation (convert with `u64::from_be`, `to_be`).  Everything
//!   else is host order.
//! * C `bool` members are `u8` (C code may store any byte there).
//! * Opaque kernel objects (`struct ib_device`, `struct net_device`) are
//!   `*mut c_void`.
//! * C bitfields (in [`IbCmReqEventParam`] and [`IbCmRepEventParam`]) are
//!   stored in plain integer members (`bitfield_NN`, NN = byte offset) with
//!   `get_*`/`set_*` helpers that use exactly GCC's bit positions.
//!
//! Every type is valid when zero-filled; `Default` gives that value.
//! Layouts are checked against the kernel's numbers by the unit tests below
//! and against the C compiler's view of the headers by `tests/abi.rs`.

use core::ffi::{c_int, c_ulong, c_void};
use core::fmt;

// GCC allocates bitfields from the most significant bit on big-endian
// targets; the helpers below implement only the little-endian layout.
#[cfg(target_endian = "big")]
compile_error!("abi: the C bitfield layout is only implemented for little-endian targets");

/// A 16-bit value stored in network (big-endian) byte order (`__be16`).
pub type Be16 = u16;
/// A 32-bit value stored in network (big-endian) byte order (`__be32`).
pub type Be32 = u32;
/// A 64-bit value stored in network (big-endian) byte order (`__be64`).
pub type Be64 = u64;

/// `ETH_ALEN`: bytes in an Ethernet MAC address.
pub const ETH_ALEN: usize = 6;

// ===========================================================================
// Error pointers (`ERR_PTR` and friends, <rdma/ibcm_kernel_types.h>)
// ===========================================================================

/// Largest errno value an error pointer can carry.
pub const MAX_ERRNO: c_int = 4095;

/// `ERR_PTR(err)`: encodes a negative errno value (`-1 ..= -MAX_ERRNO`) as
/// a pointer, as the kernel's pointer-returning functions do.
#[inline]
pub fn err_ptr<T>(err: c_int) -> *mut T {
    debug_assert!((-MAX_ERRNO..0).contains(&err), "err_ptr({err})");
    core::ptr::without_provenance_mut((err as isize) as usize)
}

/// `IS_ERR(ptr)`: whether `ptr` is an error pointer (NULL is not).
#[inline]
pub fn is_err<T>(ptr: *const T) -> bool {
    ptr.addr() >= (-(MAX_ERRNO as isize)) as usize
}

/// `PTR_ERR(ptr)`: the errno value of an error pointer.
#[inline]
pub fn ptr_err<T>(ptr: *const T) -> c_int {
    (ptr.addr() as isize) as c_int
}

// ===========================================================================
// Bitfield helpers (little-endian GCC/Clang layout)
// ===========================================================================

/// Reads `width` bits starting at bit `shift` (bit 0 = least significant).
#[inline]
const fn bits_get(word: u32, shift: u32, width: u32) -> u8 {
    ((word >> shift) & ((1u32 << width) - 1)) as u8
}

/// Replaces `width` bits at `shift` with the low bits of `value` (the
/// higher bits of `value` are dropped, like a C bitfield assignment).
#[inline]
const fn bits_set(word: u32, shift: u32, width: u32, value: u8) -> u32 {
    let mask = ((1u32 << width) - 1) << shift;
    (word & !mask) | (((value as u32) << shift) & mask)
}

// ===========================================================================
// ib_verbs.h: GIDs
// ===========================================================================

/// The `global` view of [`IbGid`]: both halves big-endian.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IbGidGlobal {
    pub subnet_prefix: Be64,
    pub interface_id: Be64,
}

/// `union ib_gid`: a 128-bit GID (16 bytes, 8-byte aligned).
#[repr(C)]
#[derive(Clone, Copy)]
pub union IbGid {
    pub raw: [u8; 16],
    pub global: IbGidGlobal,
}

impl IbGid {
    /// A GID from its 16 bytes in network order.
    pub const fn from_raw(raw: [u8; 16]) -> Self {
        IbGid { raw }
    }

    /// The 16 bytes in network order.
    pub const fn as_raw(&self) -> [u8; 16] {
        // SAFETY: both views are plain bytes of the same size; any bit
        // pattern is a valid [u8; 16].
        unsafe { self.raw }
    }
}

impl Default for IbGid {
    fn default() -> Self {
        IbGid { raw: [0; 16] }
    }
}

impl PartialEq for IbGid {
    fn eq(&self, other: &Self) -> bool {
        self.as_raw() == other.as_raw()
    }
}

impl Eq for IbGid {}

impl fmt::Debug for IbGid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = self.as_raw();
        write!(f, "IbGid(")?;
        for (i, pair) in r.chunks(2).enumerate() {
            if i > 0 {
                write!(f, ":")?;
            }
            write!(f, "{:02x}{:02x}", pair[0], pair[1])?;
        }
        write!(f, ")")
    }
}

/// `enum ib_gid_type`
pub type IbGidType = u32;
pub const IB_GID_TYPE_IB: IbGidType = 0;
/// RoCE v1.
pub const IB_GID_TYPE_ROCE: IbGidType = 1;
/// RoCE v2.
pub const IB_GID_TYPE_ROCE_UDP_ENCAP: IbGidType = 2;
pub const IB_GID_TYPE_SIZE: IbGidType = 3;

/// UDP destination port of RoCE v2.
pub const ROCE_V2_UDP_DPORT: u16 = 4791;

/// `struct ib_gid_attr`: one entry of a port's GID table.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct IbGidAttr {
    /// `struct net_device *` (opaque).
    pub ndev: *mut c_void,
    /// `struct ib_device *` (opaque).
    pub device: *mut c_void,
    pub gid: IbGid,
    pub gid_type: IbGidType,
    pub index: u16,
    pub port_num: u32,
}

// ===========================================================================
// ib_verbs.h: enumerations
// ===========================================================================

/// `enum ib_event_type`
pub type IbEventType = u32;
pub const IB_EVENT_CQ_ERR: IbEventType = 0;
pub const IB_EVENT_QP_FATAL: IbEventType = 1;
pub const IB_EVENT_QP_REQ_ERR: IbEventType = 2;
pub const IB_EVENT_QP_ACCESS_ERR: IbEventType = 3;
pub const IB_EVENT_COMM_EST: IbEventType = 4;
pub const IB_EVENT_SQ_DRAINED: IbEventType = 5;
pub const IB_EVENT_PATH_MIG: IbEventType = 6;
pub const IB_EVENT_PATH_MIG_ERR: IbEventType = 7;
pub const IB_EVENT_DEVICE_FATAL: IbEventType = 8;
pub const IB_EVENT_PORT_ACTIVE: IbEventType = 9;
pub const IB_EVENT_PORT_ERR: IbEventType = 10;
pub const IB_EVENT_LID_CHANGE: IbEventType = 11;
pub const IB_EVENT_PKEY_CHANGE: IbEventType = 12;
pub const IB_EVENT_SM_CHANGE: IbEventType = 13;
pub const IB_EVENT_SRQ_ERR: IbEventType = 14;
pub const IB_EVENT_SRQ_LIMIT_REACHED: IbEventType = 15;
pub const IB_EVENT_QP_LAST_WQE_REACHED: IbEventType = 16;
pub const IB_EVENT_CLIENT_REREGISTER: IbEventType = 17;
pub const IB_EVENT_GID_CHANGE: IbEventType = 18;
pub const IB_EVENT_WQ_FATAL: IbEventType = 19;
/// Newest kernels only.
pub const IB_EVENT_DEVICE_SPEED_CHANGE: IbEventType = 20;

/// `enum ib_qp_type`
pub type IbQpType = u32;
pub const IB_QPT_SMI: IbQpType = 0;
pub const IB_QPT_GSI: IbQpType = 1;
pub const IB_QPT_RC: IbQpType = 2;
pub const IB_QPT_UC: IbQpType = 3;
pub const IB_QPT_UD: IbQpType = 4;
pub const IB_QPT_RAW_IPV6: IbQpType = 5;
pub const IB_QPT_RAW_ETHERTYPE: IbQpType = 6;
pub const IB_QPT_RAW_PACKET: IbQpType = 8;
pub const IB_QPT_XRC_INI: IbQpType = 9;
pub const IB_QPT_XRC_TGT: IbQpType = 10;
pub const IB_QPT_MAX: IbQpType = 11;
pub const IB_QPT_DRIVER: IbQpType = 0xFF;
pub const IB_QPT_RESERVED1: IbQpType = 0x1000;
pub const IB_QPT_RESERVED2: IbQpType = 0x1001;
pub const IB_QPT_RESERVED3: IbQpType = 0x1002;
pub const IB_QPT_RESERVED4: IbQpType = 0x1003;
pub const IB_QPT_RESERVED5: IbQpType = 0x1004;
pub const IB_QPT_RESERVED6: IbQpType = 0x1005;
pub const IB_QPT_RESERVED7: IbQpType = 0x1006;
pub const IB_QPT_RESERVED8: IbQpType = 0x1007;
pub const IB_QPT_RESERVED9: IbQpType = 0x1008;
pub const IB_QPT_RESERVED10: IbQpType = 0x1009;

/// `enum ib_wc_status`
pub type IbWcStatus = u32;
pub const IB_WC_SUCCESS: IbWcStatus = 0;
pub const IB_WC_LOC_LEN_ERR: IbWcStatus = 1;
pub const IB_WC_LOC_QP_OP_ERR: IbWcStatus = 2;
pub const IB_WC_LOC_EEC_OP_ERR: IbWcStatus = 3;
pub const IB_WC_LOC_PROT_ERR: IbWcStatus = 4;
pub const IB_WC_WR_FLUSH_ERR: IbWcStatus = 5;
pub const IB_WC_MW_BIND_ERR: IbWcStatus = 6;
pub const IB_WC_BAD_RESP_ERR: IbWcStatus = 7;
pub const IB_WC_LOC_ACCESS_ERR: IbWcStatus = 8;
pub const IB_WC_REM_INV_REQ_ERR: IbWcStatus = 9;
pub const IB_WC_REM_ACCESS_ERR: IbWcStatus = 10;
pub const IB_WC_REM_OP_ERR: IbWcStatus = 11;
pub const IB_WC_RETRY_EXC_ERR: IbWcStatus = 12;
pub const IB_WC_RNR_RETRY_EXC_ERR: IbWcStatus = 13;
pub const IB_WC_LOC_RDD_VIOL_ERR: IbWcStatus = 14;
pub const IB_WC_REM_INV_RD_REQ_ERR: IbWcStatus = 15;
pub const IB_WC_REM_ABORT_ERR: IbWcStatus = 16;
pub const IB_WC_INV_EECN_ERR: IbWcStatus = 17;
pub const IB_WC_INV_EEC_STATE_ERR: IbWcStatus = 18;
pub const IB_WC_FATAL_ERR: IbWcStatus = 19;
/// What the CM's `*_ERROR` events carry when retries are exhausted.
pub const IB_WC_RESP_TIMEOUT_ERR: IbWcStatus = 20;
pub const IB_WC_GENERAL_ERR: IbWcStatus = 21;

/// `enum ib_mtu` (and `enum opa_mtu`)
pub type IbMtu = u32;
pub const IB_MTU_256: IbMtu = 1;
pub const IB_MTU_512: IbMtu = 2;
pub const IB_MTU_1024: IbMtu = 3;
pub const IB_MTU_2048: IbMtu = 4;
pub const IB_MTU_4096: IbMtu = 5;
pub const OPA_MTU_8192: IbMtu = 6;
pub const OPA_MTU_10240: IbMtu = 7;

/// `enum ib_rate` (IBTA StaticRate codes; not sorted by speed).
pub type IbRate = u32;
pub const IB_RATE_PORT_CURRENT: IbRate = 0;
pub const IB_RATE_2_5_GBPS: IbRate = 2;
pub const IB_RATE_5_GBPS: IbRate = 5;
pub const IB_RATE_10_GBPS: IbRate = 3;
pub const IB_RATE_20_GBPS: IbRate = 6;
pub const IB_RATE_30_GBPS: IbRate = 4;
pub const IB_RATE_40_GBPS: IbRate = 7;
pub const IB_RATE_60_GBPS: IbRate = 8;
pub const IB_RATE_80_GBPS: IbRate = 9;
pub const IB_RATE_120_GBPS: IbRate = 10;
pub const IB_RATE_14_GBPS: IbRate = 11;
pub const IB_RATE_56_GBPS: IbRate = 12;
pub const IB_RATE_112_GBPS: IbRate = 13;
pub const IB_RATE_168_GBPS: IbRate = 14;
pub const IB_RATE_25_GBPS: IbRate = 15;
pub const IB_RATE_100_GBPS: IbRate = 16;
pub const IB_RATE_200_GBPS: IbRate = 17;
pub const IB_RATE_300_GBPS: IbRate = 18;
pub const IB_RATE_28_GBPS: IbRate = 19;
pub const IB_RATE_50_GBPS: IbRate = 20;
pub const IB_RATE_400_GBPS: IbRate = 21;
pub const IB_RATE_600_GBPS: IbRate = 22;
pub const IB_RATE_800_GBPS: IbRate = 23;
/// Newest kernels only (24 is not defined by the kernel).
pub const IB_RATE_1600_GBPS: IbRate = 25;

/// `enum ib_qp_state`
pub type IbQpState = u32;
pub const IB_QPS_RESET: IbQpState = 0;
pub const IB_QPS_INIT: IbQpState = 1;
pub const IB_QPS_RTR: IbQpState = 2;
pub const IB_QPS_RTS: IbQpState = 3;
pub const IB_QPS_SQD: IbQpState = 4;
pub const IB_QPS_SQE: IbQpState = 5;
pub const IB_QPS_ERR: IbQpState = 6;

/// `enum ib_mig_state`
pub type IbMigState = u32;
pub const IB_MIG_MIGRATED: IbMigState = 0;
pub const IB_MIG_REARM: IbMigState = 1;
pub const IB_MIG_ARMED: IbMigState = 2;

/// `enum ib_qp_attr_mask` (bits of the `int *qp_attr_mask` of
/// `ib_cm_init_qp_attr`; identical to libibverbs' `IBV_QP_*`).
pub type IbQpAttrMask = u32;
pub const IB_QP_STATE: IbQpAttrMask = 1;
pub const IB_QP_CUR_STATE: IbQpAttrMask = 1 << 1;
pub const IB_QP_EN_SQD_ASYNC_NOTIFY: IbQpAttrMask = 1 << 2;
pub const IB_QP_ACCESS_FLAGS: IbQpAttrMask = 1 << 3;
pub const IB_QP_PKEY_INDEX: IbQpAttrMask = 1 << 4;
pub const IB_QP_PORT: IbQpAttrMask = 1 << 5;
pub const IB_QP_QKEY: IbQpAttrMask = 1 << 6;
pub const IB_QP_AV: IbQpAttrMask = 1 << 7;
pub const IB_QP_PATH_MTU: IbQpAttrMask = 1 << 8;
pub const IB_QP_TIMEOUT: IbQpAttrMask = 1 << 9;
pub const IB_QP_RETRY_CNT: IbQpAttrMask = 1 << 10;
pub const IB_QP_RNR_RETRY: IbQpAttrMask = 1 << 11;
pub const IB_QP_RQ_PSN: IbQpAttrMask = 1 << 12;
pub const IB_QP_MAX_QP_RD_ATOMIC: IbQpAttrMask = 1 << 13;
pub const IB_QP_ALT_PATH: IbQpAttrMask = 1 << 14;
pub const IB_QP_MIN_RNR_TIMER: IbQpAttrMask = 1 << 15;
pub const IB_QP_SQ_PSN: IbQpAttrMask = 1 << 16;
pub const IB_QP_MAX_DEST_RD_ATOMIC: IbQpAttrMask = 1 << 17;
pub const IB_QP_PATH_MIG_STATE: IbQpAttrMask = 1 << 18;
pub const IB_QP_CAP: IbQpAttrMask = 1 << 19;
pub const IB_QP_DEST_QPN: IbQpAttrMask = 1 << 20;
pub const IB_QP_RESERVED1: IbQpAttrMask = 1 << 21;
pub const IB_QP_RESERVED2: IbQpAttrMask = 1 << 22;
pub const IB_QP_RESERVED3: IbQpAttrMask = 1 << 23;
pub const IB_QP_RESERVED4: IbQpAttrMask = 1 << 24;
pub const IB_QP_RATE_LIMIT: IbQpAttrMask = 1 << 25;
/// Bits 0..=20.
pub const IB_QP_ATTR_STANDARD_BITS: IbQpAttrMask = (1 << 21) - 1;

/// `enum ib_access_flags` (stored in the `int qp_access_flags` member).
pub type IbAccessFlags = u32;
pub const IB_ACCESS_LOCAL_WRITE: IbAccessFlags = 1;
pub const IB_ACCESS_REMOTE_WRITE: IbAccessFlags = 1 << 1;
pub const IB_ACCESS_REMOTE_READ: IbAccessFlags = 1 << 2;
pub const IB_ACCESS_REMOTE_ATOMIC: IbAccessFlags = 1 << 3;
pub const IB_ACCESS_MW_BIND: IbAccessFlags = 1 << 4;
pub const IB_ZERO_BASED: IbAccessFlags = 1 << 5;
pub const IB_ACCESS_ON_DEMAND: IbAccessFlags = 1 << 6;
pub const IB_ACCESS_HUGETLB: IbAccessFlags = 1 << 7;
pub const IB_ACCESS_RELAXED_ORDERING: IbAccessFlags = 1 << 20;
pub const IB_ACCESS_FLUSH_GLOBAL: IbAccessFlags = 1 << 8;
pub const IB_ACCESS_FLUSH_PERSISTENT: IbAccessFlags = 1 << 9;
/// Bits 20..=29: optional flags a device may ignore.
pub const IB_ACCESS_OPTIONAL: IbAccessFlags = 0x3FF0_0000;
pub const IB_ACCESS_SUPPORTED: IbAccessFlags =
    ((IB_ACCESS_FLUSH_PERSISTENT << 1) - 1) | IB_ACCESS_OPTIONAL;

/// `enum rdma_ah_attr_type`
pub type RdmaAhAttrType = u32;
pub const RDMA_AH_ATTR_TYPE_UNDEFINED: RdmaAhAttrType = 0;
pub const RDMA_AH_ATTR_TYPE_IB: RdmaAhAttrType = 1;
pub const RDMA_AH_ATTR_TYPE_ROCE: RdmaAhAttrType = 2;
pub const RDMA_AH_ATTR_TYPE_OPA: RdmaAhAttrType = 3;

/// `enum ib_ah_flags` (stored in the `u8 ah_flags` member).
pub type IbAhFlags = u32;
pub const IB_AH_GRH: IbAhFlags = 1;

/// Permissive LID 0xFFFF (big-endian).
pub const IB_LID_PERMISSIVE: Be16 = 0xFFFFu16.to_be();
/// First multicast LID 0xC000 (big-endian).
pub const IB_MULTICAST_LID_BASE: Be16 = 0xC000u16.to_be();
pub const IB_MULTICAST_QPN: u32 = 0xFF_FFFF;
/// QP numbers are 24 bits.
pub const IB_QPN_MASK: u32 = 0xFF_FFFF;

// ===========================================================================
// ib_verbs.h: address handle and QP attributes
// ===========================================================================

/// `struct ib_global_route` (GRH part of an address; host order).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct IbGlobalRoute {
    pub sgid_attr: *const IbGidAttr,
    pub dgid: IbGid,
    /// 20-bit flow label, host order.
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

/// `struct ib_ah_attr` (InfiniBand part; dlid host order).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IbAhAttr {
    pub dlid: u16,
    pub src_path_bits: u8,
}

/// `struct roce_ah_attr`
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RoceAhAttr {
    pub dmac: [u8; ETH_ALEN],
}

/// `struct opa_ah_attr`
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpaAhAttr {
    pub dlid: u32,
    pub src_path_bits: u8,
    /// C `bool`.
    pub make_grd: u8,
}

/// The anonymous union of `struct rdma_ah_attr` (`ib` / `roce` / `opa`),
/// selected by the `type` member of [`RdmaAhAttr`].
#[repr(C)]
#[derive(Clone, Copy)]
pub union RdmaAhAttrU {
    pub ib: IbAhAttr,
    pub roce: RoceAhAttr,
    pub opa: OpaAhAttr,
}

impl fmt::Debug for RdmaAhAttrU {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // SAFETY: all members are plain integers; the largest (opa) covers
        // the whole union and every bit pattern is valid for it.
        let opa = unsafe { self.opa };
        f.debug_struct("RdmaAhAttrU").field("opa", &opa).finish()
    }
}

/// `struct rdma_ah_attr`: a transport-independent address vector.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RdmaAhAttr {
    pub grh: IbGlobalRoute,
    pub sl: u8,
    /// An [`IbRate`] value.
    pub static_rate: u8,
    pub port_num: u32,
    /// [`IB_AH_GRH`] or 0.
    pub ah_flags: u8,
    pub r#type: RdmaAhAttrType,
    /// The C anonymous union: `attr.ib`, `attr.roce`, `attr.opa` in C.
    pub u: RdmaAhAttrU,
}

impl RdmaAhAttr {
    /// The InfiniBand member of the union.
    pub fn ib(&self) -> IbAhAttr {
        // SAFETY: plain integers; any bit pattern is valid.
        unsafe { self.u.ib }
    }

    /// The RoCE member of the union.
    pub fn roce(&self) -> RoceAhAttr {
        // SAFETY: plain bytes; any bit pattern is valid.
        unsafe { self.u.roce }
    }

    /// The OPA member of the union.
    pub fn opa(&self) -> OpaAhAttr {
        // SAFETY: plain integers (make_grd is u8); any bit pattern is valid.
        unsafe { self.u.opa }
    }
}

/// `struct ib_qp_cap`
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IbQpCap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
    pub max_rdma_ctxs: u32,
}

/// `struct ib_qp_attr` (216 bytes), as filled by `ib_cm_init_qp_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct IbQpAttr {
    pub qp_state: IbQpState,
    pub cur_qp_state: IbQpState,
    pub path_mtu: IbMtu,
    pub path_mig_state: IbMigState,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    /// [`IbAccessFlags`] bits (C type `int`).
    pub qp_access_flags: c_int,
    pub cap: IbQpCap,
    pub ah_attr: RdmaAhAttr,
    pub alt_ah_attr: RdmaAhAttr,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u32,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u32,
    pub alt_timeout: u8,
    pub rate_limit: u32,
    /// `struct net_device *` (opaque).
    pub xmit_slave: *mut c_void,
}

// ===========================================================================
// ib_sa.h: path records
// ===========================================================================

/// `IB_PATH_*`: bits of [`SaPathRec::flags`].
pub const IB_PATH_GMP: u32 = 1;
pub const IB_PATH_PRIMARY: u32 = 1 << 1;
pub const IB_PATH_ALTERNATE: u32 = 1 << 2;
pub const IB_PATH_OUTBOUND: u32 = 1 << 3;
pub const IB_PATH_INBOUND: u32 = 1 << 4;
pub const IB_PATH_INBOUND_REVERSE: u32 = 1 << 5;
pub const IB_PATH_BIDIRECTIONAL: u32 = IB_PATH_OUTBOUND | IB_PATH_INBOUND_REVERSE;

/// `enum sa_path_rec_type`
pub type SaPathRecType = u32;
pub const SA_PATH_REC_TYPE_IB: SaPathRecType = 0;
pub const SA_PATH_REC_TYPE_ROCE_V1: SaPathRecType = 1;
pub const SA_PATH_REC_TYPE_ROCE_V2: SaPathRecType = 2;
pub const SA_PATH_REC_TYPE_OPA: SaPathRecType = 3;

/// `enum ib_sa_selector`
pub type IbSaSelector = u32;
pub const IB_SA_GT: IbSaSelector = 0;
pub const IB_SA_LT: IbSaSelector = 1;
pub const IB_SA_EQ: IbSaSelector = 2;
pub const IB_SA_BEST: IbSaSelector = 3;

/// `struct sa_path_rec_ib` (LIDs big-endian).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SaPathRecIb {
    pub dlid: Be16,
    pub slid: Be16,
    pub raw_traffic: u8,
}

/// `struct sa_path_rec_roce`
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SaPathRecRoce {
    /// C `bool`.
    pub route_resolved: u8,
    pub dmac: [u8; ETH_ALEN],
}

/// `struct sa_path_rec_opa` (LIDs big-endian).
#[repr(C)]
#[allow(non_snake_case)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SaPathRecOpa {
    pub dlid: Be32,
    pub slid: Be32,
    pub raw_traffic: u8,
    pub l2_8B: u8,
    pub l2_10B: u8,
    pub l2_9B: u8,
    pub l2_16B: u8,
    pub qos_type: u8,
    pub qos_priority: u8,
}

/// The anonymous union of `struct sa_path_rec` (`ib` / `roce` / `opa`),
/// selected by [`SaPathRec::rec_type`].
#[repr(C)]
#[derive(Clone, Copy)]
pub union SaPathRecU {
    pub ib: SaPathRecIb,
    pub roce: SaPathRecRoce,
    pub opa: SaPathRecOpa,
}

impl fmt::Debug for SaPathRecU {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // SAFETY: plain integers; opa covers the whole union.
        let opa = unsafe { self.opa };
        f.debug_struct("SaPathRecU").field("opa", &opa).finish()
    }
}

path_rec_bytes!(bytes_struct! {
    /// `struct sa_path_rec` (88 bytes). `..u8s` stands for the one-byte
    /// members `sl` … `preference` (`path_rec_bytes!`, `src/members.rs`),
    /// shared with `PathRec`.
    ///
    /// `dgid`, `sgid`, `service_id`, `flow_label`, `pkey`, `qos_class` are
    /// big-endian; `mtu` is an [`IbMtu`], `rate` an [`IbRate`],
    /// `packet_life_time` an IBTA exponent (4.096 µs × 2^n).
    #[repr(C)]
    #[derive(Clone, Copy, Debug)]
    pub struct SaPathRec {
        pub dgid: IbGid,
        pub sgid: IbGid,
        pub service_id: Be64,
        pub flow_label: Be32,
        pub hop_limit: u8,
        pub traffic_class: u8,
        pub reversible: u8,
        pub numb_path: u8,
        pub pkey: Be16,
        pub qos_class: Be16,
        ..u8s,
        /// The C anonymous union: `rec.ib`, `rec.roce`, `rec.opa` in C.
        pub u: SaPathRecU,
        pub rec_type: SaPathRecType,
        /// `IB_PATH_*` bits.
        pub flags: u32,
    }
});

impl SaPathRec {
    /// The InfiniBand member of the union.
    pub fn ib(&self) -> SaPathRecIb {
        // SAFETY: plain integers; any bit pattern is valid.
        unsafe { self.u.ib }
    }

    /// The RoCE member of the union.
    pub fn roce(&self) -> SaPathRecRoce {
        // SAFETY: plain bytes (route_resolved is u8); any bit pattern is valid.
        unsafe { self.u.roce }
    }

    /// The OPA member of the union.
    pub fn opa(&self) -> SaPathRecOpa {
        // SAFETY: plain integers; any bit pattern is valid.
        unsafe { self.u.opa }
    }

    /// `sa_path_is_roce()`
    pub fn is_roce(&self) -> bool {
        self.rec_type == SA_PATH_REC_TYPE_ROCE_V1 || self.rec_type == SA_PATH_REC_TYPE_ROCE_V2
    }
}

// ===========================================================================
// rdma_user_cm.h (via rdma_cm.h): ECE and port spaces
// ===========================================================================

/// `struct rdma_ucm_ece` (host order).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RdmaUcmEce {
    /// Goes into the 24-bit VendorID of REQ/REP.
    pub vendor_id: u32,
    /// Goes into the MAD AttributeModifier of REQ/REP/SIDR_REP.
    pub attr_mod: u32,
}

/// `enum rdma_ucm_port_space`
pub type RdmaUcmPortSpace = u32;
pub const RDMA_PS_IPOIB: RdmaUcmPortSpace = 0x0002;
pub const RDMA_PS_IB: RdmaUcmPortSpace = 0x013F;
pub const RDMA_PS_TCP: RdmaUcmPortSpace = 0x0106;
pub const RDMA_PS_UDP: RdmaUcmPortSpace = 0x0111;

// ===========================================================================
// ib_mad.h
// ===========================================================================

pub const IB_MGMT_BASE_VERSION: u8 = 1;
pub const OPA_MGMT_BASE_VERSION: u8 = 0x80;
pub const OPA_SM_CLASS_VERSION: u8 = 0x80;

pub const IB_MGMT_CLASS_SUBN_LID_ROUTED: u8 = 0x01;
pub const IB_MGMT_CLASS_SUBN_DIRECTED_ROUTE: u8 = 0x81;
pub const IB_MGMT_CLASS_SUBN_ADM: u8 = 0x03;
pub const IB_MGMT_CLASS_PERF_MGMT: u8 = 0x04;
pub const IB_MGMT_CLASS_BM: u8 = 0x05;
pub const IB_MGMT_CLASS_DEVICE_MGMT: u8 = 0x06;
/// The Communication Manager class.
pub const IB_MGMT_CLASS_CM: u8 = 0x07;
pub const IB_MGMT_CLASS_SNMP: u8 = 0x08;
pub const IB_MGMT_CLASS_DEVICE_ADM: u8 = 0x10;
pub const IB_MGMT_CLASS_BOOT_MGMT: u8 = 0x11;
pub const IB_MGMT_CLASS_BIS: u8 = 0x12;
pub const IB_MGMT_CLASS_CONG_MGMT: u8 = 0x21;
pub const IB_MGMT_CLASS_VENDOR_RANGE2_START: u8 = 0x30;
pub const IB_MGMT_CLASS_VENDOR_RANGE2_END: u8 = 0x4F;

pub const IB_OPENIB_OUI: u32 = 0x00_1405;

pub const IB_MGMT_METHOD_GET: u8 = 0x01;
pub const IB_MGMT_METHOD_SET: u8 = 0x02;
pub const IB_MGMT_METHOD_GET_RESP: u8 = 0x81;
/// Method of every CM message.
pub const IB_MGMT_METHOD_SEND: u8 = 0x03;
pub const IB_MGMT_METHOD_TRAP: u8 = 0x05;
pub const IB_MGMT_METHOD_REPORT: u8 = 0x06;
pub const IB_MGMT_METHOD_REPORT_RESP: u8 = 0x86;
pub const IB_MGMT_METHOD_TRAP_REPRESS: u8 = 0x07;
/// Response bit of the method byte.
pub const IB_MGMT_METHOD_RESP: u8 = 0x80;
pub const IB_MGMT_MAX_METHODS: u32 = 128;

/// MAD status values (host order).
pub const IB_MGMT_MAD_STATUS_SUCCESS: u16 = 0x0000;
pub const IB_MGMT_MAD_STATUS_BUSY: u16 = 0x0001;
pub const IB_MGMT_MAD_STATUS_REDIRECT_REQD: u16 = 0x0002;
pub const IB_MGMT_MAD_STATUS_BAD_VERSION: u16 = 0x0004;
pub const IB_MGMT_MAD_STATUS_UNSUPPORTED_METHOD: u16 = 0x0008;
pub const IB_MGMT_MAD_STATUS_UNSUPPORTED_METHOD_ATTRIB: u16 = 0x000C;
pub const IB_MGMT_MAD_STATUS_INVALID_ATTRIB_VALUE: u16 = 0x001C;

pub const IB_QP0: u32 = 0;
/// QP1 (big-endian).
pub const IB_QP1: Be32 = 1u32.to_be();
/// The GSI QKey.
pub const IB_QP1_QKEY: u32 = 0x8001_0000;
pub const IB_QP_SET_QKEY: u32 = 0x8000_0000;

pub const IB_DEFAULT_PKEY_PARTIAL: u16 = 0x7FFF;
pub const IB_DEFAULT_PKEY_FULL: u16 = 0xFFFF;

pub const IB_MGMT_MAD_HDR: u32 = 24;
pub const IB_MGMT_MAD_DATA: u32 = 232;
pub const IB_MGMT_RMPP_HDR: u32 = 36;
pub const IB_MGMT_RMPP_DATA: u32 = 220;
pub const IB_MGMT_VENDOR_HDR: u32 = 40;
pub const IB_MGMT_VENDOR_DATA: u32 = 216;
pub const IB_MGMT_SA_HDR: u32 = 56;
pub const IB_MGMT_SA_DATA: u32 = 200;
pub const IB_MGMT_DEVICE_HDR: u32 = 64;
pub const IB_MGMT_DEVICE_DATA: u32 = 192;
pub const IB_MGMT_MAD_SIZE: u32 = IB_MGMT_MAD_HDR + IB_MGMT_MAD_DATA;
pub const OPA_MGMT_MAD_DATA: u32 = 2024;
pub const OPA_MGMT_RMPP_DATA: u32 = 2012;
pub const OPA_MGMT_MAD_SIZE: u32 = IB_MGMT_MAD_HDR + OPA_MGMT_MAD_DATA;

/// AttributeID of ClassPortInfo (big-endian).
pub const IB_MGMT_CLASSPORTINFO_ATTR_ID: Be16 = 0x0001u16.to_be();
pub const IB_CLASS_PORT_INFO_RESP_TIME_MASK: u32 = 0x1F;
pub const IB_CLASS_PORT_INFO_RESP_TIME_FIELD_SIZE: u32 = 5;

/// `struct ib_mad_hdr`: the 24-byte common MAD header (big-endian fields).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IbMadHdr {
    pub base_version: u8,
    pub mgmt_class: u8,
    pub class_version: u8,
    pub method: u8,
    pub status: Be16,
    pub class_specific: Be16,
    pub tid: Be64,
    pub attr_id: Be16,
    pub resv: Be16,
    pub attr_mod: Be32,
}

/// `struct ib_mad`: a 256-byte MAD.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IbMad {
    pub mad_hdr: IbMadHdr,
    pub data: [u8; IB_MGMT_MAD_DATA as usize],
}

/// `struct ib_class_port_info` (72 bytes, big-endian fields).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IbClassPortInfo {
    pub base_version: u8,
    pub class_version: u8,
    pub capability_mask: Be16,
    /// Upper 27 bits CapabilityMask2, lower 5 bits RespTimeValue.
    pub cap_mask2_resp_time: Be32,
    pub redirect_gid: [u8; 16],
    pub redirect_tcslfl: Be32,
    pub redirect_lid: Be16,
    pub redirect_pkey: Be16,
    pub redirect_qp: Be32,
    pub redirect_qkey: Be32,
    pub trap_gid: [u8; 16],
    pub trap_tcslfl: Be32,
    pub trap_lid: Be16,
    pub trap_pkey: Be16,
    pub trap_hlqp: Be32,
    pub trap_qkey: Be32,
}

// ===========================================================================
// ib_cm.h: enumerations and constants
// ===========================================================================

/// `enum ib_cm_state`
pub type IbCmState = u32;
pub const IB_CM_IDLE: IbCmState = 0;
pub const IB_CM_LISTEN: IbCmState = 1;
pub const IB_CM_REQ_SENT: IbCmState = 2;
pub const IB_CM_REQ_RCVD: IbCmState = 3;
pub const IB_CM_MRA_REQ_SENT: IbCmState = 4;
pub const IB_CM_MRA_REQ_RCVD: IbCmState = 5;
pub const IB_CM_REP_SENT: IbCmState = 6;
pub const IB_CM_REP_RCVD: IbCmState = 7;
pub const IB_CM_MRA_REP_SENT: IbCmState = 8;
pub const IB_CM_MRA_REP_RCVD: IbCmState = 9;
pub const IB_CM_ESTABLISHED: IbCmState = 10;
pub const IB_CM_DREQ_SENT: IbCmState = 11;
pub const IB_CM_DREQ_RCVD: IbCmState = 12;
pub const IB_CM_TIMEWAIT: IbCmState = 13;
pub const IB_CM_SIDR_REQ_SENT: IbCmState = 14;
pub const IB_CM_SIDR_REQ_RCVD: IbCmState = 15;

/// `enum ib_cm_lap_state`
pub type IbCmLapState = u32;
pub const IB_CM_LAP_UNINIT: IbCmLapState = 0;
pub const IB_CM_LAP_IDLE: IbCmLapState = 1;
pub const IB_CM_LAP_SENT: IbCmLapState = 2;
pub const IB_CM_LAP_RCVD: IbCmLapState = 3;
pub const IB_CM_MRA_LAP_SENT: IbCmLapState = 4;
pub const IB_CM_MRA_LAP_RCVD: IbCmLapState = 5;

/// `enum ib_cm_event_type`
pub type IbCmEventType = u32;
pub const IB_CM_REQ_ERROR: IbCmEventType = 0;
pub const IB_CM_REQ_RECEIVED: IbCmEventType = 1;
pub const IB_CM_REP_ERROR: IbCmEventType = 2;
pub const IB_CM_REP_RECEIVED: IbCmEventType = 3;
pub const IB_CM_RTU_RECEIVED: IbCmEventType = 4;
pub const IB_CM_USER_ESTABLISHED: IbCmEventType = 5;
pub const IB_CM_DREQ_ERROR: IbCmEventType = 6;
pub const IB_CM_DREQ_RECEIVED: IbCmEventType = 7;
pub const IB_CM_DREP_RECEIVED: IbCmEventType = 8;
pub const IB_CM_TIMEWAIT_EXIT: IbCmEventType = 9;
pub const IB_CM_MRA_RECEIVED: IbCmEventType = 10;
pub const IB_CM_REJ_RECEIVED: IbCmEventType = 11;
/// Never generated any more (LAP sending was removed from the kernel API).
pub const IB_CM_LAP_ERROR: IbCmEventType = 12;
pub const IB_CM_LAP_RECEIVED: IbCmEventType = 13;
pub const IB_CM_APR_RECEIVED: IbCmEventType = 14;
pub const IB_CM_SIDR_REQ_ERROR: IbCmEventType = 15;
pub const IB_CM_SIDR_REQ_RECEIVED: IbCmEventType = 16;
pub const IB_CM_SIDR_REP_RECEIVED: IbCmEventType = 17;

/// `enum ib_cm_data_size`: fixed private-data / info sizes in bytes.
pub type IbCmDataSize = u32;
pub const IB_CM_REQ_PRIVATE_DATA_SIZE: IbCmDataSize = 92;
pub const IB_CM_MRA_PRIVATE_DATA_SIZE: IbCmDataSize = 222;
pub const IB_CM_REJ_PRIVATE_DATA_SIZE: IbCmDataSize = 148;
pub const IB_CM_REP_PRIVATE_DATA_SIZE: IbCmDataSize = 196;
pub const IB_CM_RTU_PRIVATE_DATA_SIZE: IbCmDataSize = 224;
pub const IB_CM_DREQ_PRIVATE_DATA_SIZE: IbCmDataSize = 220;
pub const IB_CM_DREP_PRIVATE_DATA_SIZE: IbCmDataSize = 224;
pub const IB_CM_REJ_ARI_LENGTH: IbCmDataSize = 72;
pub const IB_CM_LAP_PRIVATE_DATA_SIZE: IbCmDataSize = 168;
pub const IB_CM_APR_PRIVATE_DATA_SIZE: IbCmDataSize = 148;
pub const IB_CM_APR_INFO_LENGTH: IbCmDataSize = 72;
pub const IB_CM_SIDR_REQ_PRIVATE_DATA_SIZE: IbCmDataSize = 216;
pub const IB_CM_SIDR_REP_PRIVATE_DATA_SIZE: IbCmDataSize = 136;
pub const IB_CM_SIDR_REP_INFO_LENGTH: IbCmDataSize = 72;

/// `enum ib_cm_rej_reason` (34 is not defined).
pub type IbCmRejReason = u32;
pub const IB_CM_REJ_NO_QP: IbCmRejReason = 1;
pub const IB_CM_REJ_NO_EEC: IbCmRejReason = 2;
pub const IB_CM_REJ_NO_RESOURCES: IbCmRejReason = 3;
pub const IB_CM_REJ_TIMEOUT: IbCmRejReason = 4;
pub const IB_CM_REJ_UNSUPPORTED: IbCmRejReason = 5;
pub const IB_CM_REJ_INVALID_COMM_ID: IbCmRejReason = 6;
pub const IB_CM_REJ_INVALID_COMM_INSTANCE: IbCmRejReason = 7;
pub const IB_CM_REJ_INVALID_SERVICE_ID: IbCmRejReason = 8;
pub const IB_CM_REJ_INVALID_TRANSPORT_TYPE: IbCmRejReason = 9;
pub const IB_CM_REJ_STALE_CONN: IbCmRejReason = 10;
pub const IB_CM_REJ_RDC_NOT_EXIST: IbCmRejReason = 11;
pub const IB_CM_REJ_INVALID_GID: IbCmRejReason = 12;
pub const IB_CM_REJ_INVALID_LID: IbCmRejReason = 13;
pub const IB_CM_REJ_INVALID_SL: IbCmRejReason = 14;
pub const IB_CM_REJ_INVALID_TRAFFIC_CLASS: IbCmRejReason = 15;
pub const IB_CM_REJ_INVALID_HOP_LIMIT: IbCmRejReason = 16;
pub const IB_CM_REJ_INVALID_PACKET_RATE: IbCmRejReason = 17;
pub const IB_CM_REJ_INVALID_ALT_GID: IbCmRejReason = 18;
pub const IB_CM_REJ_INVALID_ALT_LID: IbCmRejReason = 19;
pub const IB_CM_REJ_INVALID_ALT_SL: IbCmRejReason = 20;
pub const IB_CM_REJ_INVALID_ALT_TRAFFIC_CLASS: IbCmRejReason = 21;
pub const IB_CM_REJ_INVALID_ALT_HOP_LIMIT: IbCmRejReason = 22;
pub const IB_CM_REJ_INVALID_ALT_PACKET_RATE: IbCmRejReason = 23;
pub const IB_CM_REJ_PORT_CM_REDIRECT: IbCmRejReason = 24;
pub const IB_CM_REJ_PORT_REDIRECT: IbCmRejReason = 25;
pub const IB_CM_REJ_INVALID_MTU: IbCmRejReason = 26;
pub const IB_CM_REJ_INSUFFICIENT_RESP_RESOURCES: IbCmRejReason = 27;
pub const IB_CM_REJ_CONSUMER_DEFINED: IbCmRejReason = 28;
pub const IB_CM_REJ_INVALID_RNR_RETRY: IbCmRejReason = 29;
pub const IB_CM_REJ_DUPLICATE_LOCAL_COMM_ID: IbCmRejReason = 30;
pub const IB_CM_REJ_INVALID_CLASS_VERSION: IbCmRejReason = 31;
pub const IB_CM_REJ_INVALID_FLOW_LABEL: IbCmRejReason = 32;
pub const IB_CM_REJ_INVALID_ALT_FLOW_LABEL: IbCmRejReason = 33;
pub const IB_CM_REJ_VENDOR_OPTION_NOT_SUPPORTED: IbCmRejReason = 35;

/// `enum ib_cm_apr_status`
pub type IbCmAprStatus = u32;
pub const IB_CM_APR_SUCCESS: IbCmAprStatus = 0;
pub const IB_CM_APR_INVALID_COMM_ID: IbCmAprStatus = 1;
pub const IB_CM_APR_UNSUPPORTED: IbCmAprStatus = 2;
pub const IB_CM_APR_REJECT: IbCmAprStatus = 3;
pub const IB_CM_APR_REDIRECT: IbCmAprStatus = 4;
pub const IB_CM_APR_IS_CURRENT: IbCmAprStatus = 5;
pub const IB_CM_APR_INVALID_QPN_EECN: IbCmAprStatus = 6;
pub const IB_CM_APR_INVALID_LID: IbCmAprStatus = 7;
pub const IB_CM_APR_INVALID_GID: IbCmAprStatus = 8;
pub const IB_CM_APR_INVALID_FLOW_LABEL: IbCmAprStatus = 9;
pub const IB_CM_APR_INVALID_TCLASS: IbCmAprStatus = 10;
pub const IB_CM_APR_INVALID_HOP_LIMIT: IbCmAprStatus = 11;
pub const IB_CM_APR_INVALID_PACKET_RATE: IbCmAprStatus = 12;
pub const IB_CM_APR_INVALID_SL: IbCmAprStatus = 13;

/// `enum ib_cm_sidr_status`
pub type IbCmSidrStatus = u32;
pub const IB_SIDR_SUCCESS: IbCmSidrStatus = 0;
pub const IB_SIDR_UNSUPPORTED: IbCmSidrStatus = 1;
pub const IB_SIDR_REJECT: IbCmSidrStatus = 2;
pub const IB_SIDR_NO_QP: IbCmSidrStatus = 3;
pub const IB_SIDR_REDIRECT: IbCmSidrStatus = 4;
pub const IB_SIDR_UNSUPPORTED_VERSION: IbCmSidrStatus = 5;

/// CM MAD AttributeIDs (big-endian, like the kernel's `cpu_to_be16(...)`).
pub const CM_REQ_ATTR_ID: Be16 = 0x0010u16.to_be();
pub const CM_MRA_ATTR_ID: Be16 = 0x0011u16.to_be();
pub const CM_REJ_ATTR_ID: Be16 = 0x0012u16.to_be();
pub const CM_REP_ATTR_ID: Be16 = 0x0013u16.to_be();
pub const CM_RTU_ATTR_ID: Be16 = 0x0014u16.to_be();
pub const CM_DREQ_ATTR_ID: Be16 = 0x0015u16.to_be();
pub const CM_DREP_ATTR_ID: Be16 = 0x0016u16.to_be();
pub const CM_SIDR_REQ_ATTR_ID: Be16 = 0x0017u16.to_be();
pub const CM_SIDR_REP_ATTR_ID: Be16 = 0x0018u16.to_be();
pub const CM_LAP_ATTR_ID: Be16 = 0x0019u16.to_be();
pub const CM_APR_ATTR_ID: Be16 = 0x001Au16.to_be();

/// Service ID constants (big-endian, like the kernel's `cpu_to_be64(...)`).
pub const IB_SERVICE_ID_AGN_MASK: Be64 = 0xFF00_0000_0000_0000u64.to_be();
/// Passed to `ib_cm_listen` to have a service ID assigned.
pub const IB_CM_ASSIGN_SERVICE_ID: Be64 = 0x0200_0000_0000_0000u64.to_be();
pub const IB_CMA_SERVICE_ID: Be64 = 0x0000_0000_0100_0000u64.to_be();
pub const IB_CMA_SERVICE_ID_MASK: Be64 = 0xFFFF_FFFF_FF00_0000u64.to_be();
pub const IB_SDP_SERVICE_ID: Be64 = 0x0000_0000_0001_0000u64.to_be();
pub const IB_SDP_SERVICE_ID_MASK: Be64 = 0xFFFF_FFFF_FFFF_0000u64.to_be();

// ===========================================================================
// ib_cm.h: structures
// ===========================================================================

/// `ib_cm_handler`:
/// `int (*)(struct ib_cm_id *cm_id, const struct ib_cm_event *event)`.
pub type IbCmHandler =
    Option<unsafe extern "C" fn(cm_id: *mut IbCmId, event: *const IbCmEvent) -> c_int>;

/// `struct ib_cm_id` (56 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct IbCmId {
    pub cm_handler: IbCmHandler,
    pub context: *mut c_void,
    /// `struct ib_device *` (opaque).
    pub device: *mut c_void,
    pub service_id: Be64,
    pub state: IbCmState,
    pub lap_state: IbCmLapState,
    pub local_id: Be32,
    pub remote_id: Be32,
    pub remote_cm_qpn: u32,
}

/// `struct ib_cm_req_event_param` (80 bytes).
///
/// The C bitfields live in [`bitfield_66`](Self::bitfield_66) (bytes 66–67)
/// and [`bitfield_68`](Self::bitfield_68) (byte 68); use the `get_*`/`set_*`
/// helpers:
///
/// | field | C width | byte.bits |
/// |---|---|---|
/// | `local_cm_response_timeout` | 5 | 66.0–4 |
/// | `flow_control` | 1 | 66.5 |
/// | `remote_cm_response_timeout` | 5 | 66.6–7, 67.0–2 |
/// | `retry_count` | 3 | 67.3–5 |
/// | `rnr_retry_count` | 3 | 68.0–2 |
/// | `srq` | 1 | 68.3 |
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct IbCmReqEventParam {
    pub listen_id: *mut IbCmId,
    /// P_Key of the received packet (host order).
    pub bth_pkey: u16,
    pub port: u8,
    pub primary_path: *mut SaPathRec,
    /// NULL if the REQ has no alternate path.
    pub alternate_path: *mut SaPathRec,
    pub ppath_sgid_attr: *const IbGidAttr,
    pub remote_ca_guid: Be64,
    pub remote_qkey: u32,
    pub remote_qpn: u32,
    pub qp_type: IbQpType,
    pub starting_psn: u32,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    /// Bits 0–4 `local_cm_response_timeout`, 5 `flow_control`,
    /// 6–10 `remote_cm_response_timeout`, 11–13 `retry_count`, 14–15 unused.
    pub bitfield_66: u16,
    /// Bits 0–2 `rnr_retry_count`, 3 `srq`, 4–7 unused.
    pub bitfield_68: u8,
    pub ece: RdmaUcmEce,
}

impl IbCmReqEventParam {
    /// `local_cm_response_timeout:5`
    pub const fn get_local_cm_response_timeout(&self) -> u8 {
        bits_get(self.bitfield_66 as u32, 0, 5)
    }
    /// Stores the low 5 bits of `v` in `local_cm_response_timeout`.
    pub fn set_local_cm_response_timeout(&mut self, v: u8) {
        self.bitfield_66 = bits_set(self.bitfield_66 as u32, 0, 5, v) as u16;
    }
    /// `flow_control:1`
    pub const fn get_flow_control(&self) -> u8 {
        bits_get(self.bitfield_66 as u32, 5, 1)
    }
    /// Stores the low bit of `v` in `flow_control`.
    pub fn set_flow_control(&mut self, v: u8) {
        self.bitfield_66 = bits_set(self.bitfield_66 as u32, 5, 1, v) as u16;
    }
    /// `remote_cm_response_timeout:5`
    pub const fn get_remote_cm_response_timeout(&self) -> u8 {
        bits_get(self.bitfield_66 as u32, 6, 5)
    }
    /// Stores the low 5 bits of `v` in `remote_cm_response_timeout`.
    pub fn set_remote_cm_response_timeout(&mut self, v: u8) {
        self.bitfield_66 = bits_set(self.bitfield_66 as u32, 6, 5, v) as u16;
    }
    /// `retry_count:3`
    pub const fn get_retry_count(&self) -> u8 {
        bits_get(self.bitfield_66 as u32, 11, 3)
    }
    /// Stores the low 3 bits of `v` in `retry_count`.
    pub fn set_retry_count(&mut self, v: u8) {
        self.bitfield_66 = bits_set(self.bitfield_66 as u32, 11, 3, v) as u16;
    }
    /// `rnr_retry_count:3`
    pub const fn get_rnr_retry_count(&self) -> u8 {
        bits_get(self.bitfield_68 as u32, 0, 3)
    }
    /// Stores the low 3 bits of `v` in `rnr_retry_count`.
    pub fn set_rnr_retry_count(&mut self, v: u8) {
        self.bitfield_68 = bits_set(self.bitfield_68 as u32, 0, 3, v) as u8;
    }
    /// `srq:1`
    pub const fn get_srq(&self) -> u8 {
        bits_get(self.bitfield_68 as u32, 3, 1)
    }
    /// Stores the low bit of `v` in `srq`.
    pub fn set_srq(&mut self, v: u8) {
        self.bitfield_68 = bits_set(self.bitfield_68 as u32, 3, 1, v) as u8;
    }
}

/// `struct ib_cm_rep_event_param` (32 bytes).
///
/// The C bitfields live in [`bitfield_22`](Self::bitfield_22) (bytes
/// 22–23); use the `get_*`/`set_*` helpers:
///
/// | field | C width | byte.bits |
/// |---|---|---|
/// | `target_ack_delay` | 5 | 22.0–4 |
/// | `failover_accepted` | 2 | 22.5–6 |
/// | `flow_control` | 1 | 22.7 |
/// | `rnr_retry_count` | 3 | 23.0–2 |
/// | `srq` | 1 | 23.3 |
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IbCmRepEventParam {
    pub remote_ca_guid: Be64,
    pub remote_qkey: u32,
    pub remote_qpn: u32,
    pub starting_psn: u32,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    /// Bits 0–4 `target_ack_delay`, 5–6 `failover_accepted`,
    /// 7 `flow_control`, 8–10 `rnr_retry_count`, 11 `srq`, 12–15 unused.
    pub bitfield_22: u16,
    pub ece: RdmaUcmEce,
}

impl IbCmRepEventParam {
    /// `target_ack_delay:5`
    pub const fn get_target_ack_delay(&self) -> u8 {
        bits_get(self.bitfield_22 as u32, 0, 5)
    }
    /// Stores the low 5 bits of `v` in `target_ack_delay`.
    pub fn set_target_ack_delay(&mut self, v: u8) {
        self.bitfield_22 = bits_set(self.bitfield_22 as u32, 0, 5, v) as u16;
    }
    /// `failover_accepted:2`
    pub const fn get_failover_accepted(&self) -> u8 {
        bits_get(self.bitfield_22 as u32, 5, 2)
    }
    /// Stores the low 2 bits of `v` in `failover_accepted`.
    pub fn set_failover_accepted(&mut self, v: u8) {
        self.bitfield_22 = bits_set(self.bitfield_22 as u32, 5, 2, v) as u16;
    }
    /// `flow_control:1`
    pub const fn get_flow_control(&self) -> u8 {
        bits_get(self.bitfield_22 as u32, 7, 1)
    }
    /// Stores the low bit of `v` in `flow_control`.
    pub fn set_flow_control(&mut self, v: u8) {
        self.bitfield_22 = bits_set(self.bitfield_22 as u32, 7, 1, v) as u16;
    }
    /// `rnr_retry_count:3`
    pub const fn get_rnr_retry_count(&self) -> u8 {
        bits_get(self.bitfield_22 as u32, 8, 3)
    }
    /// Stores the low 3 bits of `v` in `rnr_retry_count`.
    pub fn set_rnr_retry_count(&mut self, v: u8) {
        self.bitfield_22 = bits_set(self.bitfield_22 as u32, 8, 3, v) as u16;
    }
    /// `srq:1`
    pub const fn get_srq(&self) -> u8 {
        bits_get(self.bitfield_22 as u32, 11, 1)
    }
    /// Stores the low bit of `v` in `srq`.
    pub fn set_srq(&mut self, v: u8) {
        self.bitfield_22 = bits_set(self.bitfield_22 as u32, 11, 1, v) as u16;
    }
}

/// `struct ib_cm_rej_event_param`: `ari` points to `ari_length` bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct IbCmRejEventParam {
    pub reason: IbCmRejReason,
    pub ari: *mut c_void,
    pub ari_length: u8,
}

/// `struct ib_cm_mra_event_param`
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IbCmMraEventParam {
    pub service_timeout: u8,
}

/// `struct ib_cm_lap_event_param`
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct IbCmLapEventParam {
    pub alternate_path: *mut SaPathRec,
}

/// `struct ib_cm_apr_event_param`: `apr_info` points to `info_len` bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct IbCmAprEventParam {
    pub ap_status: IbCmAprStatus,
    pub apr_info: *mut c_void,
    pub info_len: u8,
}

/// `struct ib_cm_sidr_req_event_param`
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct IbCmSidrReqEventParam {
    pub listen_id: *mut IbCmId,
    pub service_id: Be64,
    pub sgid_attr: *const IbGidAttr,
    /// P_Key of the received packet (host order).
    pub bth_pkey: u16,
    pub port: u8,
    /// P_Key carried in the SIDR_REQ (host order).
    pub pkey: u16,
}

/// `struct ib_cm_sidr_rep_event_param`: `info` points to `info_len` bytes.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct IbCmSidrRepEventParam {
    pub status: IbCmSidrStatus,
    pub qkey: u32,
    pub qpn: u32,
    pub info: *mut c_void,
    pub sgid_attr: *const IbGidAttr,
    pub info_len: u8,
}

/// The `param` union of `struct ib_cm_event` (80 bytes), in the C
/// declaration order.  Only the member matching the event type is valid.
#[repr(C)]
#[derive(Clone, Copy)]
pub union IbCmEventParam {
    pub req_rcvd: IbCmReqEventParam,
    pub rep_rcvd: IbCmRepEventParam,
    pub rej_rcvd: IbCmRejEventParam,
    pub mra_rcvd: IbCmMraEventParam,
    pub lap_rcvd: IbCmLapEventParam,
    pub apr_rcvd: IbCmAprEventParam,
    pub sidr_req_rcvd: IbCmSidrReqEventParam,
    pub sidr_rep_rcvd: IbCmSidrRepEventParam,
    pub send_status: IbWcStatus,
}

impl fmt::Debug for IbCmEventParam {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("IbCmEventParam { .. }")
    }
}

/// `struct ib_cm_event` (96 bytes).  `private_data` points to the fixed
/// per-message number of bytes given by [`IbCmDataSize`].
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct IbCmEvent {
    pub event: IbCmEventType,
    pub param: IbCmEventParam,
    pub private_data: *mut c_void,
}

req_param_bytes!(bytes_struct! {
    /// `struct ib_cm_req_param` (96 bytes). `..u8s` stands for the one-byte
    /// members `responder_resources` … `srq` (`req_param_bytes!`,
    /// `src/members.rs`), shared with `ReqParams`.
    #[repr(C)]
    #[derive(Clone, Copy, Debug)]
    pub struct IbCmReqParam {
        pub primary_path: *mut SaPathRec,
        pub primary_path_inbound: *mut SaPathRec,
        pub primary_path_outbound: *mut SaPathRec,
        pub alternate_path: *mut SaPathRec,
        pub ppath_sgid_attr: *const IbGidAttr,
        pub service_id: Be64,
        pub qp_num: u32,
        pub qp_type: IbQpType,
        pub starting_psn: u32,
        pub private_data: *const c_void,
        pub private_data_len: u8,
        ..u8s,
        pub ece: RdmaUcmEce,
    }
});

rep_param_bytes!(bytes_struct! {
    /// `struct ib_cm_rep_param` (32 bytes). `..u8s` stands for the one-byte
    /// members `responder_resources` … `srq` (`rep_param_bytes!`,
    /// `src/members.rs`), shared with `RepParams`.
    #[repr(C)]
    #[derive(Clone, Copy, Debug)]
    pub struct IbCmRepParam {
        pub qp_num: u32,
        pub starting_psn: u32,
        pub private_data: *const c_void,
        pub private_data_len: u8,
        ..u8s,
        pub ece: RdmaUcmEce,
    }
});

/// `struct ib_cm_sidr_req_param` (48 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct IbCmSidrReqParam {
    pub path: *mut SaPathRec,
    pub sgid_attr: *const IbGidAttr,
    pub service_id: Be64,
    /// C `unsigned long`.
    pub timeout_ms: c_ulong,
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub max_cm_retries: u8,
}

/// `struct ib_cm_sidr_rep_param` (56 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct IbCmSidrRepParam {
    pub qp_num: u32,
    pub qkey: u32,
    pub status: IbCmSidrStatus,
    pub info: *const c_void,
    pub info_length: u8,
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub ece: RdmaUcmEce,
}

// ===========================================================================
// Zero defaults
// ===========================================================================

/// `Default` = all bytes zero (NULL pointers, `None` handler, zero
/// integers), like a `memset(0)` / `= {0}` C object.
macro_rules! zeroed_default {
    ($($t:ty),* $(,)?) => {$(
        impl Default for $t {
            fn default() -> Self {
                // SAFETY: every member is an integer, a raw pointer, an
                // Option of a function pointer, or an aggregate of those;
                // all of them are valid when zero-filled.
                unsafe { core::mem::zeroed() }
            }
        }
    )*};
}

zeroed_default!(
    IbcmCounters,
    IbGidAttr,
    RdmaAhAttrU,
    IbGlobalRoute,
    RdmaAhAttr,
    IbQpAttr,
    SaPathRecU,
    SaPathRec,
    IbMad,
    IbCmId,
    IbCmReqEventParam,
    IbCmRejEventParam,
    IbCmLapEventParam,
    IbCmAprEventParam,
    IbCmSidrReqEventParam,
    IbCmSidrRepEventParam,
    IbCmEventParam,
    IbCmEvent,
    IbCmReqParam,
    IbCmRepParam,
    IbCmSidrReqParam,
    IbCmSidrRepParam,
);

// ---------------------------------------------------------------- ibcm.h

/// A C struct of `u64` members and arrays of them, member by member as the
/// header has it, plus `members_mut()`: each member's name and values in
/// that order (what `ffi` fills by name).
macro_rules! u64_members {
    ($(#[$m:meta])* pub struct $name:ident { $( pub $f:ident: $t:ty, )* }) => {
        $(#[$m])*
        pub struct $name { $( pub $f: $t, )* }

        impl $name {
            /// Each member's name and values (a scalar as one), in order.
            pub fn members_mut(&mut self) -> [(&'static str, &mut [u64]); [$(stringify!($f)),*].len()] {
                [$( (stringify!($f), U64s::u64s_mut(&mut self.$f)), )*]
            }
        }
    };
}

/// A `u64` member or an array of them, as a slice.
trait U64s {
    fn u64s_mut(&mut self) -> &mut [u64];
}
impl U64s for u64 {
    fn u64s_mut(&mut self) -> &mut [u64] {
        core::slice::from_mut(self)
    }
}
impl<const N: usize> U64s for [u64; N] {
    fn u64s_mut(&mut self) -> &mut [u64] {
        self
    }
}

u64_members! {
/// `struct ibcm_counters` (include/ibcm.h): what `ibcm_get_counters`
/// copies out. Arrays are indexed by `enum ibcm_attr_index` (`tx`, `rx`,
/// …: 0 ClassPortInfo, 1 REQ … 11 APR), REJ reason (`rej_tx`, `rej_rx`;
/// 36 = larger) and `enum ibcm_drop_cause` (`drops`).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct IbcmCounters {
    pub tx: [u64; 12],
    pub rx: [u64; 12],
    pub rx_duplicates: [u64; 12],
    pub tx_retries: [u64; 12],
    pub timeouts: [u64; 12],
    pub rej_tx: [u64; 37],
    pub rej_rx: [u64; 37],
    pub drops: [u64; 8],
    pub ids_created: u64,
    pub ids_destroyed: u64,
    pub events: u64,
    pub live_ids: u64,
    pub pending_timers: u64,
    pub rx_datagrams: u64,
    pub tx_datagrams: u64,
    pub rx_garbage: u64,
    pub rx_icrc_unverified: u64,
    pub tx_errors: u64,
    pub rx_errors: u64,
    pub tx_unroutable: u64,
    pub rx_clamped: u64,
    pub half_open_evicted: u64,
    pub rx_off_path: u64,
}
}

// The same numbers as c-tests/abi_static.c.
const _: () = assert!(
    core::mem::size_of::<IbcmCounters>() == 8 * (5 * 12 + 2 * 37 + 8 + 5 + 7 + 3)
        && core::mem::offset_of!(IbcmCounters, rx_datagrams) == 8 * 147
        && core::mem::offset_of!(IbcmCounters, rx_off_path) == 8 * 156
);

// ===========================================================================
// Tests: every number below is typed in from the kernel's x86_64 layout
// (docs/CM_RULES.md §abi), not computed from the definitions above.
// ===========================================================================

#[cfg(all(test, target_pointer_width = "64"))]
mod tests {
    use super::*;
    use core::mem::{align_of, offset_of, size_of};

    /// Size of a member, without creating a value of `T`.
    fn size_of_pointee<F>(_: *const F) -> usize {
        size_of::<F>()
    }

    /// `(offset, size)` of a member path of `T`.
    macro_rules! member {
        ($t:ty, $($f:tt).+) => {{
            let u = core::mem::MaybeUninit::<$t>::uninit();
            let p = u.as_ptr();
            // SAFETY: only the address of the member is computed, no read.
            let size = size_of_pointee(unsafe { core::ptr::addr_of!((*p).$($f).+) });
            (offset_of!($t, $($f).+), size)
        }};
    }

    /// Asserts size/align of `T` and (offset, size) of each listed member.
    macro_rules! layout {
        ($t:ty, size $size:expr, align $align:expr $(, $($f:tt).+ => ($off:expr, $sz:expr))* $(,)?) => {{
            assert_eq!(size_of::<$t>(), $size, "size_of {}", stringify!($t));
            assert_eq!(align_of::<$t>(), $align, "align_of {}", stringify!($t));
            $(
                assert_eq!(
                    member!($t, $($f).+),
                    ($off, $sz),
                    "(offset, size) of {}.{}",
                    stringify!($t),
                    stringify!($($f).+)
                );
            )*
        }};
    }

    #[test]
    fn gid_layouts() {
        layout!(IbGid, size 16, align 8,
            raw => (0, 16), global => (0, 16),
            global.subnet_prefix => (0, 8), global.interface_id => (8, 8));
        layout!(IbGidGlobal, size 16, align 8,
            subnet_prefix => (0, 8), interface_id => (8, 8));
        layout!(IbGidAttr, size 48, align 8,
            ndev => (0, 8), device => (8, 8), gid => (16, 16),
            gid_type => (32, 4), index => (36, 2), port_num => (40, 4));
    }

    #[test]
    fn path_record_layouts() {
        layout!(SaPathRecIb, size 6, align 2,
            dlid => (0, 2), slid => (2, 2), raw_traffic => (4, 1));
        layout!(SaPathRecRoce, size 7, align 1,
            route_resolved => (0, 1), dmac => (1, 6));
        layout!(SaPathRecOpa, size 16, align 4,
            dlid => (0, 4), slid => (4, 4), raw_traffic => (8, 1),
            l2_8B => (9, 1), l2_10B => (10, 1), l2_9B => (11, 1),
            l2_16B => (12, 1), qos_type => (13, 1), qos_priority => (14, 1));
        layout!(SaPathRecU, size 16, align 4,
            ib => (0, 6), roce => (0, 7), opa => (0, 16));
        layout!(SaPathRec, size 88, align 8,
            dgid => (0, 16), sgid => (16, 16), service_id => (32, 8),
            flow_label => (40, 4), hop_limit => (44, 1),
            traffic_class => (45, 1), reversible => (46, 1),
            numb_path => (47, 1), pkey => (48, 2), qos_class => (50, 2),
            sl => (52, 1), mtu_selector => (53, 1), mtu => (54, 1),
            rate_selector => (55, 1), rate => (56, 1),
            packet_life_time_selector => (57, 1),
            packet_life_time => (58, 1), preference => (59, 1),
            u => (60, 16), u.ib => (60, 6), u.roce => (60, 7),
            u.opa => (60, 16), rec_type => (76, 4), flags => (80, 4));
    }

    #[test]
    fn verbs_layouts() {
        layout!(IbGlobalRoute, size 32, align 8,
            sgid_attr => (0, 8), dgid => (8, 16), flow_label => (24, 4),
            sgid_index => (28, 1), hop_limit => (29, 1),
            traffic_class => (30, 1));
        layout!(IbAhAttr, size 4, align 2,
            dlid => (0, 2), src_path_bits => (2, 1));
        layout!(RoceAhAttr, size 6, align 1, dmac => (0, 6));
        layout!(OpaAhAttr, size 8, align 4,
            dlid => (0, 4), src_path_bits => (4, 1), make_grd => (5, 1));
        layout!(RdmaAhAttrU, size 8, align 4,
            ib => (0, 4), roce => (0, 6), opa => (0, 8));
        layout!(RdmaAhAttr, size 56, align 8,
            grh => (0, 32), sl => (32, 1), static_rate => (33, 1),
            port_num => (36, 4), ah_flags => (40, 1), r#type => (44, 4),
            u => (48, 8), u.ib => (48, 4), u.roce => (48, 6),
            u.opa => (48, 8), u.ib.dlid => (48, 2),
            u.ib.src_path_bits => (50, 1), u.opa.src_path_bits => (52, 1),
            u.opa.make_grd => (53, 1));
        layout!(IbQpCap, size 24, align 4,
            max_send_wr => (0, 4), max_recv_wr => (4, 4),
            max_send_sge => (8, 4), max_recv_sge => (12, 4),
            max_inline_data => (16, 4), max_rdma_ctxs => (20, 4));
        layout!(IbQpAttr, size 216, align 8,
            qp_state => (0, 4), cur_qp_state => (4, 4), path_mtu => (8, 4),
            path_mig_state => (12, 4), qkey => (16, 4), rq_psn => (20, 4),
            sq_psn => (24, 4), dest_qp_num => (28, 4),
            qp_access_flags => (32, 4), cap => (36, 24),
            ah_attr => (64, 56), alt_ah_attr => (120, 56),
            pkey_index => (176, 2), alt_pkey_index => (178, 2),
            en_sqd_async_notify => (180, 1), sq_draining => (181, 1),
            max_rd_atomic => (182, 1), max_dest_rd_atomic => (183, 1),
            min_rnr_timer => (184, 1), port_num => (188, 4),
            timeout => (192, 1), retry_cnt => (193, 1), rnr_retry => (194, 1),
            alt_port_num => (196, 4), alt_timeout => (200, 1),
            rate_limit => (204, 4), xmit_slave => (208, 8));
    }

    #[test]
    fn ece_and_mad_layouts() {
        layout!(RdmaUcmEce, size 8, align 4,
            vendor_id => (0, 4), attr_mod => (4, 4));
        layout!(IbMadHdr, size 24, align 8,
            base_version => (0, 1), mgmt_class => (1, 1),
            class_version => (2, 1), method => (3, 1), status => (4, 2),
            class_specific => (6, 2), tid => (8, 8), attr_id => (16, 2),
            resv => (18, 2), attr_mod => (20, 4));
        layout!(IbMad, size 256, align 8, mad_hdr => (0, 24), data => (24, 232));
        layout!(IbClassPortInfo, size 72, align 4,
            base_version => (0, 1), class_version => (1, 1),
            capability_mask => (2, 2), cap_mask2_resp_time => (4, 4),
            redirect_gid => (8, 16), redirect_tcslfl => (24, 4),
            redirect_lid => (28, 2), redirect_pkey => (30, 2),
            redirect_qp => (32, 4), redirect_qkey => (36, 4),
            trap_gid => (40, 16), trap_tcslfl => (56, 4), trap_lid => (60, 2),
            trap_pkey => (62, 2), trap_hlqp => (64, 4), trap_qkey => (68, 4));
    }

    #[test]
    fn cm_id_layout() {
        layout!(IbCmId, size 56, align 8,
            cm_handler => (0, 8), context => (8, 8), device => (16, 8),
            service_id => (24, 8), state => (32, 4), lap_state => (36, 4),
            local_id => (40, 4), remote_id => (44, 4),
            remote_cm_qpn => (48, 4));
        assert_eq!(size_of::<IbCmHandler>(), 8);
    }

    #[test]
    fn event_param_layouts() {
        layout!(IbCmReqEventParam, size 80, align 8,
            listen_id => (0, 8), bth_pkey => (8, 2), port => (10, 1),
            primary_path => (16, 8), alternate_path => (24, 8),
            ppath_sgid_attr => (32, 8), remote_ca_guid => (40, 8),
            remote_qkey => (48, 4), remote_qpn => (52, 4),
            qp_type => (56, 4), starting_psn => (60, 4),
            responder_resources => (64, 1), initiator_depth => (65, 1),
            bitfield_66 => (66, 2), bitfield_68 => (68, 1), ece => (72, 8));
        layout!(IbCmRepEventParam, size 32, align 8,
            remote_ca_guid => (0, 8), remote_qkey => (8, 4),
            remote_qpn => (12, 4), starting_psn => (16, 4),
            responder_resources => (20, 1), initiator_depth => (21, 1),
            bitfield_22 => (22, 2), ece => (24, 8));
        layout!(IbCmRejEventParam, size 24, align 8,
            reason => (0, 4), ari => (8, 8), ari_length => (16, 1));
        layout!(IbCmMraEventParam, size 1, align 1, service_timeout => (0, 1));
        layout!(IbCmLapEventParam, size 8, align 8, alternate_path => (0, 8));
        layout!(IbCmAprEventParam, size 24, align 8,
            ap_status => (0, 4), apr_info => (8, 8), info_len => (16, 1));
        layout!(IbCmSidrReqEventParam, size 32, align 8,
            listen_id => (0, 8), service_id => (8, 8), sgid_attr => (16, 8),
            bth_pkey => (24, 2), port => (26, 1), pkey => (28, 2));
        layout!(IbCmSidrRepEventParam, size 40, align 8,
            status => (0, 4), qkey => (4, 4), qpn => (8, 4), info => (16, 8),
            sgid_attr => (24, 8), info_len => (32, 1));
        layout!(IbCmEventParam, size 80, align 8,
            req_rcvd => (0, 80), rep_rcvd => (0, 32), rej_rcvd => (0, 24),
            mra_rcvd => (0, 1), lap_rcvd => (0, 8), apr_rcvd => (0, 24),
            sidr_req_rcvd => (0, 32), sidr_rep_rcvd => (0, 40),
            send_status => (0, 4));
        layout!(IbCmEvent, size 96, align 8,
            event => (0, 4), param => (8, 80), param.req_rcvd => (8, 80),
            param.send_status => (8, 4), private_data => (88, 8));
    }

    #[test]
    fn send_param_layouts() {
        layout!(IbCmReqParam, size 96, align 8,
            primary_path => (0, 8), primary_path_inbound => (8, 8),
            primary_path_outbound => (16, 8), alternate_path => (24, 8),
            ppath_sgid_attr => (32, 8), service_id => (40, 8),
            qp_num => (48, 4), qp_type => (52, 4), starting_psn => (56, 4),
            private_data => (64, 8), private_data_len => (72, 1),
            responder_resources => (73, 1), initiator_depth => (74, 1),
            remote_cm_response_timeout => (75, 1), flow_control => (76, 1),
            local_cm_response_timeout => (77, 1), retry_count => (78, 1),
            rnr_retry_count => (79, 1), max_cm_retries => (80, 1),
            srq => (81, 1), ece => (84, 8));
        layout!(IbCmRepParam, size 32, align 8,
            qp_num => (0, 4), starting_psn => (4, 4), private_data => (8, 8),
            private_data_len => (16, 1), responder_resources => (17, 1),
            initiator_depth => (18, 1), failover_accepted => (19, 1),
            flow_control => (20, 1), rnr_retry_count => (21, 1),
            srq => (22, 1), ece => (24, 8));
        layout!(IbCmSidrReqParam, size 48, align 8,
            path => (0, 8), sgid_attr => (8, 8), service_id => (16, 8),
            timeout_ms => (24, 8), private_data => (32, 8),
            private_data_len => (40, 1), max_cm_retries => (41, 1));
        layout!(IbCmSidrRepParam, size 56, align 8,
            qp_num => (0, 4), qkey => (4, 4), status => (8, 4), info => (16, 8),
            info_length => (24, 1), private_data => (32, 8),
            private_data_len => (40, 1), ece => (44, 8));
    }

    /// Runs `f` on a zero-filled `T` that lives in an aligned byte buffer
    /// and returns the buffer's bytes afterwards.
    fn bytes_after<T, const N: usize>(f: impl FnOnce(&mut T)) -> [u8; N] {
        #[repr(C, align(8))]
        struct Buf<const N: usize>([u8; N]);
        assert_eq!(size_of::<T>(), N);
        assert!(align_of::<T>() <= 8);
        let mut buf = Buf([0u8; N]);
        // SAFETY: the buffer is large and aligned enough, and an all-zero
        // T is valid (see `zeroed_default!`).
        f(unsafe { &mut *(buf.0.as_mut_ptr() as *mut T) });
        buf.0
    }

    /// Bytes of a zeroed `IbCmReqEventParam` after `f`.
    fn req(f: impl FnOnce(&mut IbCmReqEventParam)) -> [u8; 80] {
        bytes_after(f)
    }

    /// Bytes of a zeroed `IbCmRepEventParam` after `f`.
    fn rep(f: impl FnOnce(&mut IbCmRepEventParam)) -> [u8; 32] {
        bytes_after(f)
    }

    /// `bytes` is zero except `expect` at `off..`.
    fn only(bytes: &[u8], off: usize, expect: &[u8]) {
        let mut want = vec![0u8; bytes.len()];
        want[off..off + expect.len()].copy_from_slice(expect);
        assert_eq!(bytes, &want[..]);
    }

    #[test]
    fn req_event_bitfields_match_gcc() {
        // Facts A.2: byte 66 bits 0-4, 66.5, 66.6-67.2, 67.3-5, 68.0-2, 68.3.
        only(&req(|p| p.set_local_cm_response_timeout(0xFF)), 66, &[0x1F]);
        only(&req(|p| p.set_flow_control(0xFF)), 66, &[0x20]);
        only(
            &req(|p| p.set_remote_cm_response_timeout(0xFF)),
            66,
            &[0xC0, 0x07],
        );
        only(&req(|p| p.set_retry_count(0xFF)), 67, &[0x38]);
        only(&req(|p| p.set_rnr_retry_count(0xFF)), 68, &[0x07]);
        only(&req(|p| p.set_srq(0xFF)), 68, &[0x08]);

        // A mixed pattern (same one c-tests/abi_static.c uses).
        let bytes = req(|p| {
            p.set_local_cm_response_timeout(0x15);
            p.set_flow_control(0);
            p.set_remote_cm_response_timeout(0x15);
            p.set_retry_count(6);
            p.set_rnr_retry_count(5);
            p.set_srq(1);
            assert_eq!(p.get_local_cm_response_timeout(), 0x15);
            assert_eq!(p.get_flow_control(), 0);
            assert_eq!(p.get_remote_cm_response_timeout(), 0x15);
            assert_eq!(p.get_retry_count(), 6);
            assert_eq!(p.get_rnr_retry_count(), 5);
            assert_eq!(p.get_srq(), 1);
        });
        only(&bytes, 66, &[0x55, 0x35, 0x0D]);
    }

    #[test]
    fn req_event_bitfields_are_independent() {
        let mut p = IbCmReqEventParam::default();
        p.set_local_cm_response_timeout(31);
        p.set_flow_control(1);
        p.set_remote_cm_response_timeout(31);
        p.set_retry_count(7);
        p.set_rnr_retry_count(7);
        p.set_srq(1);
        assert_eq!(p.bitfield_66, 0x3FFF);
        assert_eq!(p.bitfield_68, 0x0F);
        p.set_remote_cm_response_timeout(0);
        assert_eq!(p.get_local_cm_response_timeout(), 31);
        assert_eq!(p.get_flow_control(), 1);
        assert_eq!(p.get_remote_cm_response_timeout(), 0);
        assert_eq!(p.get_retry_count(), 7);
        // Values wider than the field are truncated, as in C.
        p.set_retry_count(0b1010);
        assert_eq!(p.get_retry_count(), 0b010);
        assert_eq!(p.get_remote_cm_response_timeout(), 0);
    }

    #[test]
    fn rep_event_bitfields_match_gcc() {
        // Facts A.2: byte 22 bits 0-4, 5-6, 7; byte 23 bits 0-2, 3.
        only(&rep(|p| p.set_target_ack_delay(0xFF)), 22, &[0x1F]);
        only(&rep(|p| p.set_failover_accepted(0xFF)), 22, &[0x60]);
        only(&rep(|p| p.set_flow_control(0xFF)), 22, &[0x80]);
        only(&rep(|p| p.set_rnr_retry_count(0xFF)), 23, &[0x07]);
        only(&rep(|p| p.set_srq(0xFF)), 23, &[0x08]);

        let bytes = rep(|p| {
            p.set_target_ack_delay(0x15);
            p.set_failover_accepted(2);
            p.set_flow_control(1);
            p.set_rnr_retry_count(6);
            p.set_srq(1);
            assert_eq!(p.get_target_ack_delay(), 0x15);
            assert_eq!(p.get_failover_accepted(), 2);
            assert_eq!(p.get_flow_control(), 1);
            assert_eq!(p.get_rnr_retry_count(), 6);
            assert_eq!(p.get_srq(), 1);
        });
        only(&bytes, 22, &[0xD5, 0x0E]);
    }

    #[test]
    fn big_endian_constants() {
        assert_eq!(CM_REQ_ATTR_ID.to_ne_bytes(), [0x00, 0x10]);
        assert_eq!(CM_APR_ATTR_ID.to_ne_bytes(), [0x00, 0x1A]);
        assert_eq!(u64::from_be(IB_CM_ASSIGN_SERVICE_ID), 0x0200_0000_0000_0000);
        assert_eq!(IB_CM_ASSIGN_SERVICE_ID.to_ne_bytes()[0], 0x02);
        assert_eq!(u64::from_be(IB_CMA_SERVICE_ID_MASK), 0xFFFF_FFFF_FF00_0000);
        assert_eq!(u32::from_be(IB_QP1), 1);
        assert_eq!(u16::from_be(IB_LID_PERMISSIVE), 0xFFFF);
        assert_eq!(IB_ACCESS_SUPPORTED, 0x3FF0_03FF);
        assert_eq!(IB_PATH_BIDIRECTIONAL, 40);
        assert_eq!(IB_MGMT_MAD_SIZE, 256);
    }

    #[test]
    fn error_pointers() {
        let p: *mut IbCmId = err_ptr(-12);
        assert!(is_err(p));
        assert_eq!(ptr_err(p), -12);
        assert!(is_err(err_ptr::<u8>(-MAX_ERRNO)));
        assert!(!is_err(core::ptr::null::<u8>()));
        let x = 5u8;
        assert!(!is_err(&x as *const u8));
        assert_eq!(p as usize, usize::MAX - 11);
    }

    #[test]
    fn gid_views_and_defaults() {
        let mut raw = [0u8; 16];
        raw[0] = 0xfe;
        raw[1] = 0x80;
        raw[15] = 1;
        let gid = IbGid::from_raw(raw);
        // SAFETY: plain integers.
        let global = unsafe { gid.global };
        assert_eq!(u64::from_be(global.subnet_prefix), 0xfe80_0000_0000_0000);
        assert_eq!(u64::from_be(global.interface_id), 1);
        assert_eq!(
            format!("{gid:?}"),
            "IbGid(fe80:0000:0000:0000:0000:0000:0000:0001)"
        );
        let id = IbCmId::default();
        assert!(id.cm_handler.is_none() && id.context.is_null());
        assert_eq!(id.state, IB_CM_IDLE);
        let rec = SaPathRec::default();
        assert!(!rec.is_roce());
        assert_eq!(rec.ib(), SaPathRecIb::default());
    }
}
