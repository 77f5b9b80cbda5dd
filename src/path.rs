//! Path and source-GID policy: which of a port's GIDs a connection to a
//! destination uses, and the path record `ibcm_init_path` (and
//! `Device::init_path`) builds from it. Pure functions of the port table
//! the engine already holds; no I/O.

use crate::abi::{IB_PATH_BIDIRECTIONAL, IB_PATH_GMP, IB_PATH_PRIMARY};
use crate::engine::{Errno, GidEntry, GidType, PathRec, PathRecType, PortInfo, SA_EQ};
use crate::wire::Gid;

/// RoCE packet life time rdma_cm uses (`CMA_IBOE_PACKET_LIFETIME`).
pub const SOFT_PACKET_LIFE_TIME: u8 = 16;

/// The source GID for a path to `dgid` on `port` and the record type it
/// implies. RoCE: a RoCE v2 GID (else v1) of the destination's kind —
/// IPv4-mapped for an IPv4-mapped `dgid`, link-local for fe80::/10, else a
/// global IPv6 one — as rdma_cm picks the GID of the source address; among
/// those the one sharing the longest prefix with `dgid` (the address on
/// the destination's subnet); failing that the first valid RoCE GID.
/// InfiniBand: GID index 0.
pub fn select_sgid(port: &PortInfo, dgid: &Gid) -> Option<(Gid, PathRecType)> {
    if !port.is_roce {
        return port
            .gids
            .first()
            .filter(|e| !e.gid.is_zero())
            .map(|e| (e.gid, PathRecType::Ib));
    }
    let kind = |g: &Gid| {
        if g.to_ipv4().is_some() {
            0
        } else if g.0[0] == 0xfe && g.0[1] & 0xc0 == 0x80 {
            1
        } else {
            2
        }
    };
    let want = kind(dgid);
    let valid = |e: &&GidEntry| !e.gid.is_zero() && e.gid_type != GidType::Ib;
    // Bits in common with the destination: the address "on its subnet"
    // first (ibcm sees no routes or netmasks), then RoCE v2 over v1.
    let common = |g: &Gid| {
        let a = u128::from_be_bytes(g.0);
        let b = u128::from_be_bytes(dgid.0);
        (a ^ b).leading_zeros()
    };
    let pick = port
        .gids
        .iter()
        .filter(valid)
        .filter(|e| kind(&e.gid) == want)
        .min_by_key(|e| {
            (
                std::cmp::Reverse(common(&e.gid)),
                (e.gid_type != GidType::RoceV2) as u8,
            )
        })
        .or_else(|| {
            port.gids
                .iter()
                .filter(valid)
                .min_by_key(|e| (e.gid_type != GidType::RoceV2) as u8)
        })?;
    Some((
        pick.gid,
        if pick.gid_type == GidType::RoceV1 {
            PathRecType::RoceV1
        } else {
            PathRecType::RoceV2
        },
    ))
}

/// A path record from `port` to `dgid` (RoCE v2/v1 or IB); `-EINVAL` when
/// the port has no usable source GID.
pub fn path_from_port(port: &PortInfo, dgid: Gid) -> Result<PathRec, Errno> {
    let (sgid, rec_type) = select_sgid(port, &dgid).ok_or(Errno::EINVAL)?;
    let ib = rec_type == PathRecType::Ib;
    Ok(PathRec {
        dgid,
        sgid,
        // IB: no GRH inside a subnet; RoCE: an IP hop limit.
        hop_limit: if ib && dgid.subnet_prefix() == sgid.subnet_prefix() {
            0
        } else {
            64
        },
        // IB: our LID; the destination LID needs an SA query, which ibcm
        // does not do: the caller sets `dlid` (0 here).
        slid: if ib { port.lid as u32 } else { 0 },
        reversible: 1,
        numb_path: 1,
        pkey: port.pkeys.first().copied().unwrap_or(0xffff),
        mtu_selector: SA_EQ,
        mtu: port.mtu,
        rate_selector: SA_EQ,
        rate: port.rate,
        packet_life_time_selector: SA_EQ,
        packet_life_time: SOFT_PACKET_LIFE_TIME,
        rec_type,
        flags: IB_PATH_GMP | IB_PATH_PRIMARY | IB_PATH_BIDIRECTIONAL,
        route_resolved: !ib,
        ..PathRec::default()
    })
}
