//! Link, IP and UDP decoding of captured frames, down to a UDP datagram.
//!
//! Link types: Ethernet (1) with up to 8 VLAN tags (0x8100, 0x88a8, 0x9100),
//! raw IP (101 by version nibble, 228 IPv4, 229 IPv6), Linux cooked SLL
//! (113) and SLL2 (276) (VLAN tags after the protocol field are followed
//! too), BSD null (0, address family in the capturing host's byte order,
//! either accepted) and loop (108, big-endian family). Other link types are
//! [`SkipReason::UnsupportedLink`].
//!
//! IPv4: options allowed, header checksum not checked, trailing link padding
//! cut at the total length, fragments skipped. IPv6: hop-by-hop, routing,
//! destination options, AH and atomic fragment headers are walked (at most 8);
//! real fragments are skipped, jumbograms (payload length 0) are malformed.
//! UDP: the length field must fit in the IP payload; the checksum is not
//! checked.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::SkipReason;

pub const LINKTYPE_NULL: u32 = 0;
pub const LINKTYPE_ETHERNET: u32 = 1;
pub const LINKTYPE_RAW: u32 = 101;
pub const LINKTYPE_LOOP: u32 = 108;
pub const LINKTYPE_LINUX_SLL: u32 = 113;
pub const LINKTYPE_IPV4: u32 = 228;
pub const LINKTYPE_IPV6: u32 = 229;
pub const LINKTYPE_LINUX_SLL2: u32 = 276;

const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;
const MAX_VLAN_TAGS: usize = 8;
const MAX_IPV6_EXT_HEADERS: usize = 8;
const IPPROTO_UDP: u8 = 17;

/// The IP header of a decoded datagram, as the ICRC needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpHeader<'a> {
    /// The whole IPv4 header, options included.
    V4(&'a [u8]),
    /// The 40-byte fixed IPv6 header (extension headers excluded).
    V6(&'a [u8]),
}

/// A UDP datagram found in a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpDatagram<'a> {
    pub ip: IpHeader<'a>,
    pub src: IpAddr,
    pub dst: IpAddr,
    pub src_port: u16,
    pub dst_port: u16,
    pub udp_header: [u8; 8],
    /// The UDP payload, cut at the UDP length.
    pub payload: &'a [u8],
}

fn be16(b: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_be_bytes(b.get(off..off + 2)?.try_into().ok()?))
}

/// Decodes a captured frame of the given link type down to UDP.
pub fn decode_udp(link_type: u32, frame: &[u8]) -> Result<UdpDatagram<'_>, SkipReason> {
    match link_type {
        LINKTYPE_ETHERNET => {
            let et = be16(frame, 12).ok_or(SkipReason::Truncated)?;
            by_ethertype(et, &frame[14..])
        }
        LINKTYPE_LINUX_SLL => {
            // packet type(2) ARPHRD(2) addr len(2) addr(8) protocol(2)
            if frame.len() < 16 {
                return Err(SkipReason::Truncated);
            }
            by_ethertype(be16(frame, 14).unwrap_or(0), &frame[16..])
        }
        LINKTYPE_LINUX_SLL2 => {
            // protocol(2) reserved(2) ifindex(4) ARPHRD(2) pkt type(1) addr len(1) addr(8)
            if frame.len() < 20 {
                return Err(SkipReason::Truncated);
            }
            by_ethertype(be16(frame, 0).unwrap_or(0), &frame[20..])
        }
        LINKTYPE_RAW => match frame.first().map(|b| b >> 4) {
            None => Err(SkipReason::Truncated),
            Some(4) => ipv4(frame),
            Some(6) => ipv6(frame),
            Some(_) => Err(SkipReason::NotIp),
        },
        LINKTYPE_IPV4 => ipv4(frame),
        LINKTYPE_IPV6 => ipv6(frame),
        LINKTYPE_NULL | LINKTYPE_LOOP => {
            let fam: [u8; 4] = frame
                .get(..4)
                .ok_or(SkipReason::Truncated)?
                .try_into()
                .unwrap_or([0; 4]);
            // loop: always big-endian; null: the capturing host's order.
            let be = u32::from_be_bytes(fam);
            let le = if link_type == LINKTYPE_NULL {
                u32::from_le_bytes(fam)
            } else {
                be
            };
            if be == 2 || le == 2 {
                ipv4(&frame[4..])
            } else if [be, le].iter().any(|f| matches!(f, 10 | 24 | 28 | 30)) {
                ipv6(&frame[4..])
            } else {
                Err(SkipReason::NotIp)
            }
        }
        _ => Err(SkipReason::UnsupportedLink),
    }
}

/// Follows VLAN tags, then dispatches IPv4 / IPv6.
fn by_ethertype(mut et: u16, mut rest: &[u8]) -> Result<UdpDatagram<'_>, SkipReason> {
    let mut tags = 0;
    while matches!(et, 0x8100 | 0x88a8 | 0x9100) {
        tags += 1;
        if tags > MAX_VLAN_TAGS {
            return Err(SkipReason::Malformed);
        }
        // TCI(2) then the inner ethertype(2)
        et = be16(rest, 2).ok_or(SkipReason::Truncated)?;
        rest = &rest[4..];
    }
    match et {
        ETHERTYPE_IPV4 => ipv4(rest),
        ETHERTYPE_IPV6 => ipv6(rest),
        _ => Err(SkipReason::NotIp),
    }
}

fn ipv4(b: &[u8]) -> Result<UdpDatagram<'_>, SkipReason> {
    if b.len() < 20 {
        return Err(SkipReason::Truncated);
    }
    if b[0] >> 4 != 4 {
        return Err(SkipReason::Malformed);
    }
    let ihl = (b[0] & 0x0f) as usize * 4;
    if ihl < 20 {
        return Err(SkipReason::Malformed);
    }
    let total = be16(b, 2).unwrap_or(0) as usize;
    if total < ihl {
        return Err(SkipReason::Malformed);
    }
    if b.len() < total {
        return Err(SkipReason::Truncated);
    }
    let b = &b[..total];
    if b[9] != IPPROTO_UDP {
        return Err(SkipReason::NotUdp);
    }
    let frag = be16(b, 6).unwrap_or(0);
    if frag & 0x2000 != 0 || frag & 0x1fff != 0 {
        return Err(SkipReason::Fragment);
    }
    let src = Ipv4Addr::new(b[12], b[13], b[14], b[15]);
    let dst = Ipv4Addr::new(b[16], b[17], b[18], b[19]);
    udp(IpHeader::V4(&b[..ihl]), src.into(), dst.into(), &b[ihl..])
}

fn ipv6(b: &[u8]) -> Result<UdpDatagram<'_>, SkipReason> {
    if b.len() < 40 {
        return Err(SkipReason::Truncated);
    }
    if b[0] >> 4 != 6 {
        return Err(SkipReason::Malformed);
    }
    let plen = be16(b, 4).unwrap_or(0) as usize;
    if plen == 0 {
        return Err(SkipReason::Malformed); // jumbogram or empty: not RoCE
    }
    if b.len() < 40 + plen {
        return Err(SkipReason::Truncated);
    }
    let b = &b[..40 + plen];
    let mut nh = b[6];
    let mut off = 40;
    let mut hops = 0;
    while nh != IPPROTO_UDP {
        hops += 1;
        if hops > MAX_IPV6_EXT_HEADERS {
            return Err(SkipReason::Malformed);
        }
        let (next, len) = match nh {
            // hop-by-hop, routing, destination options: (len + 1) * 8
            0 | 43 | 60 => {
                let h = b.get(off..off + 2).ok_or(SkipReason::Malformed)?;
                (h[0], (h[1] as usize + 1) * 8)
            }
            // fragment: 8 bytes; offset (13 bits) and M flag must be 0
            44 => {
                let h = b.get(off..off + 8).ok_or(SkipReason::Malformed)?;
                let fo = u16::from_be_bytes([h[2], h[3]]);
                if fo & 0xfff8 != 0 || fo & 1 != 0 {
                    return Err(SkipReason::Fragment);
                }
                (h[0], 8)
            }
            // authentication header: (len + 2) * 4
            51 => {
                let h = b.get(off..off + 2).ok_or(SkipReason::Malformed)?;
                (h[0], (h[1] as usize + 2) * 4)
            }
            _ => return Err(SkipReason::NotUdp),
        };
        off += len;
        if off > b.len() {
            return Err(SkipReason::Malformed);
        }
        nh = next;
    }
    let mut s = [0u8; 16];
    s.copy_from_slice(&b[8..24]);
    let mut d = [0u8; 16];
    d.copy_from_slice(&b[24..40]);
    udp(
        IpHeader::V6(&b[..40]),
        Ipv6Addr::from(s).into(),
        Ipv6Addr::from(d).into(),
        &b[off..],
    )
}

fn udp<'a>(
    ip: IpHeader<'a>,
    src: IpAddr,
    dst: IpAddr,
    b: &'a [u8],
) -> Result<UdpDatagram<'a>, SkipReason> {
    // The IP layer guarantees the whole datagram was captured: a short UDP
    // header is a malformed packet, not a snaplen cut.
    let hdr: [u8; 8] = b
        .get(..8)
        .ok_or(SkipReason::Malformed)?
        .try_into()
        .unwrap_or([0; 8]);
    let ulen = u16::from_be_bytes([hdr[4], hdr[5]]) as usize;
    if ulen < 8 || ulen > b.len() {
        return Err(SkipReason::Malformed);
    }
    Ok(UdpDatagram {
        ip,
        src,
        dst,
        src_port: u16::from_be_bytes([hdr[0], hdr[1]]),
        dst_port: u16::from_be_bytes([hdr[2], hdr[3]]),
        udp_header: hdr,
        payload: &b[8..ulen],
    })
}
