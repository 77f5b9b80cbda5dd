//! What an [`Engine`](super::Engine) is told about its device: the
//! configuration of one shard and the port tables.

use super::types::GidType;
use crate::wire::Gid;

/// One GID table entry of a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GidEntry {
    pub gid: Gid,
    pub gid_type: GidType,
}

/// What the engine needs to know about a port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortInfo {
    /// 1-based port number.
    pub port_num: u8,
    pub gids: Vec<GidEntry>,
    pub pkeys: Vec<u16>,
    pub lid: u16,
    pub lmc: u8,
    /// Ethernet link layer (RoCE): every MAD carries a GRH, no LAP/APR.
    pub is_roce: bool,
    /// Active MTU (`enum ib_mtu`).
    pub mtu: u8,
    /// Active rate (`enum ib_rate`).
    pub rate: u8,
}

impl PortInfo {
    /// A RoCEv2 port whose GID index 0 is `gid` (the software fabric).
    pub fn roce(port_num: u8, gid: Gid) -> PortInfo {
        PortInfo {
            port_num,
            gids: vec![GidEntry {
                gid,
                gid_type: GidType::RoceV2,
            }],
            pkeys: vec![0xffff],
            lid: 0,
            lmc: 0,
            is_roce: true,
            mtu: 3,
            rate: 0,
        }
    }
}

/// Engine configuration (one shard of one device).
#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub node_guid: u64,
    /// `local_ca_ack_delay` (5-bit exponent).
    pub ack_delay: u8,
    pub ports: Vec<PortInfo>,
    /// Device advertises FLUSH capabilities (adds FLUSH access flags).
    pub flush_caps: bool,
    /// Upper 32 bits of the TIDs of new requests (the MAD agent's hi_tid).
    pub hi_tid: u32,
    /// This shard's index (< `shared.shards()`).
    pub shard: u32,
    /// Maximum ids in this shard.
    pub max_ids: u32,
    /// Maximum passive connections between REQ and RTU; more REQs are
    /// rejected with `IB_CM_REJ_NO_RESOURCES`. 0 = unlimited.
    pub max_half_open: u32,
    /// Seed of the engine's own randomness (assigned PSNs and the like).
    pub seed: u64,
    /// Half-open passive connections from one source (GRH source GID, or
    /// SLID without GRH); at the quota the source's oldest REP-waiting
    /// connection is evicted (see `admission`). 0 = no per-source quota.
    pub max_half_open_per_source: u32,
    /// The passive side's wait for the requester per try (REP → RTU, and
    /// its DREQ → DREP), in ms, at most; the REQ's LocalCMResponseTimeout
    /// is honoured up to this. IBTA leaves the responder's timeouts to the
    /// responder. Default 4096 ms (CM timeout 20, rdma_cm's own value).
    pub rep_timeout_cap_ms: u64,
    /// The wait an MRA for a REP buys, in ms, at most: the MRA's
    /// ServiceTimeout plus the path's timeout, as the kernel's
    /// `cm_mra_handler` sets it, up to this (0 = no cap). The requester
    /// that sends an MRA is alive and asks for the time; rdma_cm asks for
    /// timeout 24 (≈ 67 s), which the default 262,144 ms (timeout 26)
    /// honours in full, while a peer asking for 31 (≈ 2.3 hours per try)
    /// is cut to it. The half-open table stays bounded by eviction
    /// (`admission`), not by this wait.
    pub mra_rep_wait_cap_ms: u64,
    /// The passive side's retries of REP (and of its DREQ), at most,
    /// whatever the REQ's MaxCMRetries asks. Default 15 (the field's
    /// maximum: the kernel's behaviour).
    pub rep_max_retries: u8,
    /// Reject a REQ (INVALID_GID, sent to where it came from) whose primary
    /// path names a requester GID other than the GRH source it came from,
    /// instead of sending REPs to that other GID: a forged REQ cannot turn
    /// this CM into a reflector. RoCE ports only (IB without a GRH has no
    /// source GID to compare).
    pub reject_off_path_req: bool,
}

impl EngineConfig {
    pub fn new(node_guid: u64, ports: Vec<PortInfo>) -> EngineConfig {
        EngineConfig {
            node_guid,
            ack_delay: 15,
            ports,
            flush_caps: false,
            hi_tid: 1,
            shard: 0,
            max_ids: u32::MAX,
            max_half_open: 65536,
            seed: 0,
            max_half_open_per_source: 16384,
            rep_timeout_cap_ms: 4096,
            mra_rep_wait_cap_ms: 262_144,
            rep_max_retries: 15,
            reject_off_path_req: true,
        }
    }
}
