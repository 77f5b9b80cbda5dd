//! pcapng writing for the live capture ([`super::live`]): the blocks ibcm
//! writes (Section Header, Interface Description, Enhanced Packet; always
//! little-endian) and the synthetic RoCEv2 Ethernet frame that carries one
//! CM MAD, so tshark/Wireshark decode the file as RoCEv2 InfiniBand CM.
//!
//! Frame: Ethernet II (locally administered MACs derived from the
//! addresses) + IPv4 when both GIDs are IPv4-mapped, else IPv6 with the
//! GIDs as addresses + UDP (destination port 4791, the given source port,
//! a correct checksum) + BTH + DETH + 256-byte MAD + an ICRC computed over
//! exactly these headers (the IP header is the one a Linux UDP socket
//! sends: DF, IP ID 0, TTL/hop limit 64), so [`super::read_bytes`] and
//! tshark both find it valid.

use super::Direction;
use super::link::LINKTYPE_ETHERNET;
use crate::wire::Gid;
use crate::wire::roce::{
    GSI_PAYLOAD_LEN, ICRC_LEN, IPV4_HDR_LEN, IPV6_HDR_LEN, IcrcInput, ROCEV2_UDP_PORT, UDP_HDR_LEN,
};

const BT_SHB: u32 = 0x0A0D_0D0A;
const BT_IDB: u32 = 0x0000_0001;
const BT_EPB: u32 = 0x0000_0006;
const BYTE_ORDER_MAGIC: u32 = 0x1A2B_3C4D;

const OPT_END: u16 = 0;
const OPT_SHB_USERAPPL: u16 = 4;
const OPT_IF_NAME: u16 = 2;
const OPT_IF_DESCRIPTION: u16 = 3;
const OPT_IF_TSRESOL: u16 = 9;
const OPT_EPB_FLAGS: u16 = 2;

/// `if_tsresol` of every interface ibcm writes: nanoseconds.
pub const TSRESOL_NANOS: u8 = 9;
/// Snapshot length written in the IDBs (frames are at most 342 bytes).
pub const SNAPLEN: u32 = 65535;
/// Ethernet II header: destination MAC, source MAC, EtherType.
pub const ETH_HDR_LEN: usize = 14;
/// The largest frame [`rocev2_frame`] builds (IPv6).
pub const MAX_FRAME_LEN: usize = ETH_HDR_LEN + IPV6_HDR_LEN + UDP_HDR_LEN + GSI_PAYLOAD_LEN;

const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86DD;
const IPPROTO_UDP: u8 = 17;

fn put_opt(out: &mut Vec<u8>, code: u16, value: &[u8]) {
    // Option values are at most 65535 bytes; ours are short strings.
    let len = value.len().min(u16::MAX as usize);
    out.extend_from_slice(&code.to_le_bytes());
    out.extend_from_slice(&(len as u16).to_le_bytes());
    out.extend_from_slice(&value[..len]);
    out.resize(out.len() + (4 - len % 4) % 4, 0);
}

/// Appends one block: type, total length, `body` (padded to 4), length.
fn put_block(out: &mut Vec<u8>, btype: u32, body: impl FnOnce(&mut Vec<u8>)) {
    let start = out.len();
    out.extend_from_slice(&btype.to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    body(out);
    out.resize(start + (out.len() - start).div_ceil(4) * 4, 0);
    let total = (out.len() - start + 4) as u32;
    out[start + 4..start + 8].copy_from_slice(&total.to_le_bytes());
    out.extend_from_slice(&total.to_le_bytes());
}

/// Appends a Section Header Block (version 1.0, section length unknown)
/// with `shb_userappl` = `user_appl`.
pub fn section_header(out: &mut Vec<u8>, user_appl: &str) {
    put_block(out, BT_SHB, |b| {
        b.extend_from_slice(&BYTE_ORDER_MAGIC.to_le_bytes());
        b.extend_from_slice(&1u16.to_le_bytes());
        b.extend_from_slice(&0u16.to_le_bytes());
        b.extend_from_slice(&u64::MAX.to_le_bytes());
        put_opt(b, OPT_SHB_USERAPPL, user_appl.as_bytes());
        put_opt(b, OPT_END, &[]);
    });
}

/// Appends an Interface Description Block: Ethernet, [`SNAPLEN`],
/// `if_name` = `name`, an `if_description`, nanosecond timestamps.
pub fn interface_description(out: &mut Vec<u8>, name: &str) {
    put_block(out, BT_IDB, |b| {
        b.extend_from_slice(&(LINKTYPE_ETHERNET as u16).to_le_bytes());
        b.extend_from_slice(&0u16.to_le_bytes());
        b.extend_from_slice(&SNAPLEN.to_le_bytes());
        put_opt(b, OPT_IF_NAME, name.as_bytes());
        put_opt(
            b,
            OPT_IF_DESCRIPTION,
            b"ibcm CM MADs as RoCEv2 frames (synthetic Ethernet/IP/UDP headers)",
        );
        put_opt(b, OPT_IF_TSRESOL, &[TSRESOL_NANOS]);
        put_opt(b, OPT_END, &[]);
    });
}

/// Appends an Enhanced Packet Block for interface `iface` with a timestamp
/// in nanoseconds since the epoch, the whole `frame` captured and, when
/// given, the direction in `epb_flags`.
pub fn enhanced_packet(
    out: &mut Vec<u8>,
    iface: u32,
    ts_nanos: u64,
    frame: &[u8],
    direction: Option<Direction>,
) {
    put_block(out, BT_EPB, |b| {
        b.extend_from_slice(&iface.to_le_bytes());
        b.extend_from_slice(&((ts_nanos >> 32) as u32).to_le_bytes());
        b.extend_from_slice(&(ts_nanos as u32).to_le_bytes());
        b.extend_from_slice(&(frame.len() as u32).to_le_bytes());
        b.extend_from_slice(&(frame.len() as u32).to_le_bytes());
        b.extend_from_slice(frame);
        b.resize(b.len().div_ceil(4) * 4, 0);
        if let Some(d) = direction {
            put_opt(b, OPT_EPB_FLAGS, &d.epb_flags().to_le_bytes());
            put_opt(b, OPT_END, &[]);
        }
    });
}

/// One synthetic Ethernet frame (see the module documentation).
#[derive(Clone, Copy)]
pub struct Frame {
    buf: [u8; MAX_FRAME_LEN],
    len: usize,
}

impl Frame {
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

/// A locally administered unicast MAC for an address: 02:00 and the
/// GID's last four bytes (the IPv4 address of an IPv4-mapped GID).
pub fn mac_of(gid: &Gid) -> [u8; 6] {
    let g = &gid.0;
    [0x02, 0x00, g[12], g[13], g[14], g[15]]
}

/// Sum of big-endian 16-bit words (odd tail padded with zero).
fn sum16(data: &[u8], mut acc: u32) -> u32 {
    let mut it = data.chunks_exact(2);
    for c in &mut it {
        acc += u16::from_be_bytes([c[0], c[1]]) as u32;
    }
    if let [b] = it.remainder() {
        acc += (*b as u32) << 8;
    }
    acc
}

fn fold(mut acc: u32) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// The UDP checksum of `udp` (header with checksum 0, then payload) behind
/// the given IP addresses (16 bytes each for IPv6, 4 for IPv4). Zero is
/// sent as 0xFFFF.
fn udp_checksum(src: &[u8], dst: &[u8], udp: &[u8]) -> u16 {
    let len = udp.len() as u32;
    let mut acc = sum16(src, 0);
    acc = sum16(dst, acc);
    acc += IPPROTO_UDP as u32 + (len >> 16) + (len & 0xffff);
    acc = sum16(udp, acc);
    match !fold(acc) {
        0 => 0xffff,
        c => c,
    }
}

/// Builds the frame carrying `gsi` (BTH + DETH + MAD + ICRC, the UDP
/// payload of a GSI datagram) from `src` to `dst`, UDP source port
/// `sport`, destination port 4791. The ICRC in `gsi` is replaced by the
/// one these headers give.
pub fn rocev2_frame(src: &Gid, dst: &Gid, sport: u16, gsi: &[u8; GSI_PAYLOAD_LEN]) -> Frame {
    let dport = ROCEV2_UDP_PORT;
    let (input, ethertype) = match (src.to_ipv4(), dst.to_ipv4()) {
        (Some(s), Some(d)) => (IcrcInput::linux_ipv4(s, d, sport, dport), ETHERTYPE_IPV4),
        _ => (
            IcrcInput::linux_ipv6(src.0.into(), dst.0.into(), sport, dport),
            ETHERTYPE_IPV6,
        ),
    };
    let mut f = Frame {
        buf: [0; MAX_FRAME_LEN],
        len: 0,
    };
    let b = &mut f.buf;
    b[0..6].copy_from_slice(&mac_of(dst));
    b[6..12].copy_from_slice(&mac_of(src));
    b[12..14].copy_from_slice(&ethertype.to_be_bytes());
    let mut o = ETH_HDR_LEN;
    let (sa, da): (&[u8], &[u8]);
    let v4 = input.ipv4_header();
    let v6 = input.ipv6_header();
    if let Some(h) = &v4 {
        b[o..o + IPV4_HDR_LEN].copy_from_slice(h);
        o += IPV4_HDR_LEN;
        (sa, da) = (&h[12..16], &h[16..20]);
    } else if let Some(h) = &v6 {
        b[o..o + IPV6_HDR_LEN].copy_from_slice(h);
        o += IPV6_HDR_LEN;
        (sa, da) = (&h[8..24], &h[24..40]);
    } else {
        unreachable!("IcrcInput is IPv4 or IPv6");
    }
    let udp_at = o;
    b[o..o + UDP_HDR_LEN].copy_from_slice(&input.udp_header());
    o += UDP_HDR_LEN;
    b[o..o + GSI_PAYLOAD_LEN].copy_from_slice(gsi);
    let icrc_at = o + GSI_PAYLOAD_LEN - ICRC_LEN;
    let icrc = input.icrc(&b[o..icrc_at]);
    b[icrc_at..icrc_at + ICRC_LEN].copy_from_slice(&icrc.to_le_bytes());
    o += GSI_PAYLOAD_LEN;
    // The ICRC masks the UDP checksum, so it can be filled in afterwards.
    let sum = udp_checksum(sa, da, &b[udp_at..o]);
    b[udp_at + 6..udp_at + 8].copy_from_slice(&sum.to_be_bytes());
    f.len = o;
    f
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::{Direction, Reader, decode_packet, read_bytes};
    use crate::wire::roce::{self, Bth, Deth};

    fn gsi(psn: u32, fill: u8) -> [u8; GSI_PAYLOAD_LEN] {
        let mut mad = [fill; 256];
        mad[0] = 1; // base version
        mad[1] = 0x07; // CM class
        mad[2] = 2;
        mad[3] = 0x03; // Send
        let mut p = [0u8; GSI_PAYLOAD_LEN];
        let any = IcrcInput::linux_ipv4([0, 0, 0, 0].into(), [0, 0, 0, 0].into(), 1, 1);
        roce::emit_udp_payload(&Bth::gsi(psn), &Deth::GSI, &mad, any, &mut p);
        p
    }

    fn file(frames: &[(u32, Frame, Option<Direction>)], names: &[&str]) -> Vec<u8> {
        let mut out = Vec::new();
        section_header(&mut out, "ibcm test");
        for n in names {
            interface_description(&mut out, n);
        }
        for (i, (iface, f, d)) in frames.iter().enumerate() {
            enhanced_packet(
                &mut out,
                *iface,
                1_700_000_000_123_456_789 + i as u64,
                f.as_bytes(),
                *d,
            );
        }
        out
    }

    #[test]
    fn reader_reads_what_the_writer_writes() {
        let a: Gid = "10.1.2.3".parse().unwrap();
        let b: Gid = "10.1.2.4".parse().unwrap();
        let a6: Gid = "fd00::1".parse().unwrap();
        let b6: Gid = "fd00::2".parse().unwrap();
        let frames = [
            (
                0,
                rocev2_frame(&a, &b, 4791, &gsi(7, 0x11)),
                Some(Direction::Outbound),
            ),
            (
                1,
                rocev2_frame(&a, &b, 50000, &gsi(8, 0x22)),
                Some(Direction::Inbound),
            ),
            (1, rocev2_frame(&a6, &b6, 4791, &gsi(9, 0x33)), None),
        ];
        let bytes = file(&frames, &["soft:10.1.2.3:4791", "loop:10.1.2.4"]);
        assert_eq!(bytes.len() % 4, 0);
        let cap = read_bytes(&bytes).unwrap();
        assert_eq!(cap.total_packets, 3);
        assert_eq!(cap.frames.len(), 3, "skipped: {}", cap.skipped);
        for (i, f) in cap.frames.iter().enumerate() {
            assert!(f.icrc_ok, "frame {i}: ICRC");
            assert_eq!(f.dst_port, 4791);
            assert_eq!(f.bth.psn, 7 + i as u32);
            assert_eq!(f.mad[10], [0x11, 0x22, 0x33][i]);
            assert_eq!(f.ts_nanos, 1_700_000_000_123_456_789 + i as u64);
        }
        assert_eq!(cap.frames[0].src, a.to_ip());
        assert_eq!(cap.frames[1].src_port, 50000);
        assert_eq!(cap.frames[2].dst, b6.to_ip());
        let mut r = Reader::new(&bytes).unwrap();
        let mut seen = Vec::new();
        while let Some(p) = r.next() {
            let p = p.unwrap();
            seen.push((p.interface, p.direction, r.interface_name(p.interface)));
            assert!(decode_packet(&p).is_ok());
        }
        assert_eq!(
            seen,
            [
                (0, Some(Direction::Outbound), Some("soft:10.1.2.3:4791")),
                (1, Some(Direction::Inbound), Some("loop:10.1.2.4")),
                (1, None, Some("loop:10.1.2.4")),
            ]
        );
    }

    #[test]
    fn udp_checksums_verify() {
        // A datagram's one's-complement sum over pseudo-header + UDP,
        // checksum included, is 0xFFFF.
        for (s, d) in [("10.0.0.1", "10.0.0.2"), ("fe80::1", "2001:db8::7")] {
            let (s, d): (Gid, Gid) = (s.parse().unwrap(), d.parse().unwrap());
            let f = rocev2_frame(&s, &d, 1234, &gsi(1, 0x5a));
            let b = f.as_bytes();
            let (ip_len, sa, da) = if s.to_ipv4().is_some() {
                (IPV4_HDR_LEN, 12..16, 16..20)
            } else {
                (IPV6_HDR_LEN, 8..24, 24..40)
            };
            let ip = &b[ETH_HDR_LEN..ETH_HDR_LEN + ip_len];
            let udp = &b[ETH_HDR_LEN + ip_len..];
            assert_eq!(udp.len(), UDP_HDR_LEN + GSI_PAYLOAD_LEN);
            let mut acc = sum16(&ip[sa], 0);
            acc = sum16(&ip[da], acc);
            acc += IPPROTO_UDP as u32 + udp.len() as u32;
            acc = sum16(udp, acc);
            assert_eq!(fold(acc), 0xffff);
        }
    }

    #[test]
    fn blocks_are_well_formed() {
        let mut out = Vec::new();
        interface_description(&mut out, "abc"); // odd-length name: padded
        let total = u32::from_le_bytes(out[4..8].try_into().unwrap()) as usize;
        assert_eq!(total, out.len());
        assert_eq!(&out[total - 4..], &out[4..8]);
        let mut out = Vec::new();
        enhanced_packet(&mut out, 3, 1, &[1, 2, 3, 4, 5], Some(Direction::Inbound));
        // type, length, 20 fixed, 8 data, 8 flags option, 4 end option, length
        assert_eq!(out.len(), 8 + 20 + 8 + 8 + 4 + 4);
    }
}
