//! RoCEv2 framing of GSI (QP1) datagrams: BTH, DETH, the invariant CRC and
//! the 280-byte UDP payload that carries one CM MAD.
//!
//! A CM MAD travels as the payload of a UDP datagram to port 4791:
//!
//! ```text
//! BTH (12) | DETH (8) | MAD (256) | ICRC (4)      = 280 bytes of UDP payload
//! ```
//!
//! * [`BthPacket`] / [`Bth`] and [`DethPacket`] / [`Deth`] are smoltcp-style
//!   views and representations of the two transport headers.
//! * [`Crc32`] is the IEEE 802.3 / zlib CRC-32 (through `crc32fast`).
//! * [`icrc_ipv4`] / [`icrc_ipv6`] compute the RoCEv2 invariant CRC from the
//!   real IP and UDP headers; [`IcrcInput`] describes the headers a Linux UDP
//!   socket will put in front of a payload, so a userspace sender can compute
//!   the ICRC before the kernel builds those headers.
//! * [`parse_udp_payload`] / [`emit_udp_payload`] are the GSI datagram layer.
//!
//! ICRC byte order (checked on every frame of the kernel captures in
//! `tests/vectors`): the value is the plain zlib `crc32()` of the masked
//! bytes, and the last four bytes of the packet hold it **little-endian**
//! (`crc.to_le_bytes()`). All `u32` ICRC values in this module are that CRC
//! value, i.e. `u32::from_le_bytes(last 4 bytes)`.
//!
//! Limits: only UD SEND-only packets (opcode 0x64) to QP1 are accepted by
//! [`Bth::parse`] and the GSI layer; no GRH (RoCEv1) framing; the ICRC
//! functions take the IP header as given (IPv4 options, if present, are
//! covered unmasked; for IPv6 pass the 40-byte fixed header, as Linux rxe
//! does, extension headers are not covered).

use core::net::{Ipv4Addr, Ipv6Addr};

use super::field::{wire_struct, wire_view};
use super::{Error, MAD_LEN, Result, check_len, set_bits, view_fields};

/// UDP destination port that identifies RoCEv2.
pub const ROCEV2_UDP_PORT: u16 = 4791;
/// The well-known Q_Key of QP1 (GSI).
pub const GSI_QKEY: u32 = 0x8001_0000;
/// The General Services Interface queue pair.
pub const GSI_QP: u32 = 1;
/// Default (full-membership) partition key used by the CM on RoCE.
pub const DEFAULT_PKEY: u16 = 0xffff;
/// BTH opcode of an Unreliable Datagram SEND-only packet.
pub const OPCODE_UD_SEND_ONLY: u8 = 0x64;
/// Base Transport Header size.
pub const BTH_LEN: usize = 12;
/// Datagram Extended Transport Header size.
pub const DETH_LEN: usize = 8;
/// Invariant CRC size.
pub const ICRC_LEN: usize = 4;
/// UDP payload of one GSI MAD: BTH + DETH + MAD + ICRC.
pub const GSI_PAYLOAD_LEN: usize = BTH_LEN + DETH_LEN + MAD_LEN + ICRC_LEN;
/// UDP header size.
pub const UDP_HDR_LEN: usize = 8;
/// IPv4 header size without options.
pub const IPV4_HDR_LEN: usize = 20;
/// IPv6 fixed header size.
pub const IPV6_HDR_LEN: usize = 40;

/// `Error::Framing` texts of this module. They are constants so callers can
/// match on them (`Err(Error::Framing(roce::NOT_UD_SEND_ONLY))`).
pub const NOT_UD_SEND_ONLY: &str = "BTH opcode is not 0x64 (UD SEND only)";
/// See [`NOT_UD_SEND_ONLY`].
pub const BAD_TRANSPORT_VERSION: &str = "BTH transport version is not 0";
/// See [`NOT_UD_SEND_ONLY`].
pub const DEST_QP_NOT_GSI: &str = "BTH destination QP is not 1 (GSI)";
/// See [`NOT_UD_SEND_ONLY`].
pub const PAD_COUNT_NOT_ZERO: &str = "BTH pad count is not 0 (a 256-byte MAD needs no pad)";
/// See [`NOT_UD_SEND_ONLY`].
pub const QKEY_NOT_GSI: &str = "DETH Q_Key is not 0x80010000 (GSI)";
/// See [`NOT_UD_SEND_ONLY`].
pub const SRC_QP_NOT_GSI: &str = "DETH source QP is not 1 (GSI)";
/// See [`NOT_UD_SEND_ONLY`].
pub const PAYLOAD_TOO_LONG: &str =
    "UDP payload longer than 280 bytes (BTH + DETH + 256-byte MAD + ICRC)";

// ---------------------------------------------------------------------------
// BTH
// ---------------------------------------------------------------------------

wire_view!(
    /// Zero-copy view of a Base Transport Header (IBA 9.2):
    ///
    /// ```text
    /// byte 0     OpCode
    /// byte 1     SE(1) M(1) PadCnt(2) TVer(4)
    /// bytes 2-3  P_Key
    /// byte 4     FECN(1) BECN(1) reserved(6)     (RoCEv2; "resv8a" in IB)
    /// bytes 5-7  DestQP
    /// byte 8     AckReq(1) reserved(7)
    /// bytes 9-11 PSN
    /// ```
    BthPacket, BTH_LEN
);

impl<T: AsRef<[u8]>> BthPacket<T> {
    /// The bytes after the BTH.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[BTH_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> BthPacket<T> {
    /// Zeroes the reserved bits of bytes 4 and 8.
    pub fn clear_reserved(&mut self) {
        set_bits(self.buffer.as_mut(), 4, 2, 6, 0);
        set_bits(self.buffer.as_mut(), 8, 1, 7, 0);
    }
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[BTH_LEN..]
    }
}

// TVer is not a field of the representation: parse requires 0, emit writes 0.
view_fields!(BthPacket {
    /// Transport header version (0).
    transport_version, set_transport_version: u8 = (1, 4, 4);
});

wire_struct! {
    /// Parsed BTH. [`Bth::parse`] accepts only UD SEND-only packets with
    /// transport version 0; the reserved bits are ignored on parse and written
    /// as zero by [`Bth::emit`] (the transport version is always emitted as 0).
    #[derive(Copy, Hash)]
    Bth, BthPacket, "BTH" {
        [
            /// Operation code (0x64 = UD SEND only).
            opcode / set_opcode: u8 = bits(0, 0, 8), "OpCode", Hex => "bth_opcode";
            /// Solicited Event.
            solicited_event / set_solicited_event: bool = bits(1, 0, 1), "SE", Plain => "bth_se";
            /// Migration request.
            mig_req / set_mig_req: bool = bits(1, 1, 1), "M", Plain => "bth_mig_req";
            /// Number of pad bytes before the ICRC (2 bits).
            pad_count / set_pad_count: u8 = bits(1, 2, 2), "PadCnt", Dec => "bth_pad_count";
            /// Partition key.
            pkey / set_pkey: u16 = bits(2, 0, 16), "P_Key", Hex => "bth_pkey";
            /// Forward explicit congestion notification.
            fecn / set_fecn: bool = bits(4, 0, 1), "FECN", Plain => "bth_fecn";
            /// Backward explicit congestion notification.
            becn / set_becn: bool = bits(4, 1, 1), "BECN", Plain => "bth_becn";
            /// Destination queue pair (24 bits).
            dest_qp / set_dest_qp: u32 = bits(5, 0, 24), "DestQP", Dec => "bth_dest_qp";
            /// Acknowledge request.
            ack_req / set_ack_req: bool = bits(8, 0, 1), "AckReq", Plain => "bth_ack_req";
            /// Packet sequence number (24 bits).
            psn / set_psn: u32 = bits(9, 0, 24), "PSN", Dec;
        ]
    }
}

impl Bth {
    /// The BTH of a GSI MAD as Linux rxe sends it: UD SEND only, P_Key
    /// 0xffff, destination QP 1, AckReq set (rxe sets it on every
    /// last/only packet), given PSN.
    pub const fn gsi(psn: u32) -> Bth {
        Bth {
            opcode: OPCODE_UD_SEND_ONLY,
            solicited_event: false,
            mig_req: false,
            pad_count: 0,
            pkey: DEFAULT_PKEY,
            fecn: false,
            becn: false,
            dest_qp: GSI_QP,
            ack_req: true,
            psn: psn & 0x00ff_ffff,
        }
    }

    pub fn parse<T: AsRef<[u8]>>(p: &BthPacket<T>) -> Result<Bth> {
        check_len(p.buffer.as_ref(), BTH_LEN)?;
        if p.opcode() != OPCODE_UD_SEND_ONLY {
            return Err(Error::Framing(NOT_UD_SEND_ONLY));
        }
        if p.transport_version() != 0 {
            return Err(Error::Framing(BAD_TRANSPORT_VERSION));
        }
        Bth::parse_fields(p)
    }

    /// Writes all 12 BTH bytes (reserved bits and TVer zero). The buffer
    /// must hold at least [`BTH_LEN`] bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut BthPacket<T>) {
        p.buffer.as_mut()[..BTH_LEN].fill(0);
        self.emit_fields(p);
    }
}

// ---------------------------------------------------------------------------
// DETH
// ---------------------------------------------------------------------------

wire_view!(
    /// Zero-copy view of a Datagram Extended Transport Header (IBA 9.3.3):
    /// bytes 0-3 Q_Key, byte 4 reserved, bytes 5-7 SrcQP.
    DethPacket, DETH_LEN
);

// The reserved byte is not a field of the representation (zero on emit).
view_fields!(DethPacket {
    /// Reserved byte.
    reserved, set_reserved: u8 = (4, 0, 8);
});

wire_struct! {
    /// Parsed DETH (the reserved byte is ignored on parse, zero on emit).
    #[derive(Copy, Hash)]
    Deth, DethPacket, "DETH" {
        [
            /// Queue key.
            q_key / set_q_key: u32 = bits(0, 0, 32), "Q_Key", Hex => "deth_qkey";
            /// Source queue pair (24 bits).
            src_qp / set_src_qp: u32 = bits(5, 0, 24), "SrcQP", Dec => "deth_src_qp";
        ]
    }
}

impl Deth {
    /// The DETH of every GSI MAD: Q_Key 0x80010000, source QP 1.
    pub const GSI: Deth = Deth {
        q_key: GSI_QKEY,
        src_qp: GSI_QP,
    };

    pub fn parse<T: AsRef<[u8]>>(p: &DethPacket<T>) -> Result<Deth> {
        check_len(p.buffer.as_ref(), DETH_LEN)?;
        Deth::parse_fields(p)
    }

    /// Writes all 8 DETH bytes. The buffer must hold at least [`DETH_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut DethPacket<T>) {
        self.emit_fields(p);
        p.set_reserved(0);
    }
}

// ---------------------------------------------------------------------------
// CRC-32
// ---------------------------------------------------------------------------

/// Incremental CRC-32 (IEEE 802.3 / zlib / PNG: polynomial 0x04C11DB7
/// reflected, init and final XOR 0xFFFFFFFF), computed by `crc32fast`
/// (carry-less multiply where the CPU has it, its own tables otherwise).
///
/// ```
/// use ibcm::wire::roce::Crc32;
/// assert_eq!(Crc32::new().update(b"1234").update(b"56789").finish(), 0xCBF4_3926);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Crc32 {
    /// The CRC value of the bytes fed so far (what `finish` returns).
    crc: u32,
}

impl Crc32 {
    pub const fn new() -> Self {
        Crc32 { crc: 0 }
    }

    /// Feeds bytes; returns `self` so calls chain.
    pub fn update(&mut self, data: &[u8]) -> &mut Self {
        let mut h = crc32fast::Hasher::new_with_initial(self.crc);
        h.update(data);
        self.crc = h.finalize();
        self
    }

    /// The CRC of everything fed so far (does not reset the state).
    pub fn finish(&self) -> u32 {
        self.crc
    }
}

/// One-shot CRC-32 (same as zlib's `crc32(0, data, len)`).
pub fn crc32(data: &[u8]) -> u32 {
    Crc32::new().update(data).finish()
}

// ---------------------------------------------------------------------------
// ICRC
// ---------------------------------------------------------------------------

/// The 8 bytes of 0xFF that stand for the masked LRH at the start of the
/// ICRC input.
pub const ICRC_LRH_MASK: [u8; 8] = [0xff; 8];

/// Masks the variant fields of an IPv4 header in place: TOS (byte 1), TTL
/// (byte 8) and header checksum (bytes 10-11) become all ones. Bytes beyond
/// the end of a short slice are ignored.
pub fn mask_ipv4_header(hdr: &mut [u8]) {
    for i in [1usize, 8, 10, 11] {
        if let Some(b) = hdr.get_mut(i) {
            *b = 0xff;
        }
    }
}

/// Masks the variant fields of an IPv6 header in place: traffic class
/// (low nibble of byte 0, high nibble of byte 1), flow label (rest of bytes
/// 1-3) and hop limit (byte 7) become all ones.
pub fn mask_ipv6_header(hdr: &mut [u8]) {
    if let Some(b) = hdr.get_mut(0) {
        *b |= 0x0f;
    }
    for i in [1usize, 2, 3, 7] {
        if let Some(b) = hdr.get_mut(i) {
            *b = 0xff;
        }
    }
}

/// Masks the UDP checksum (bytes 6-7) to 0xFFFF in place.
pub fn mask_udp_header(hdr: &mut [u8; UDP_HDR_LEN]) {
    hdr[6] = 0xff;
    hdr[7] = 0xff;
}

/// Masks BTH byte 4 (FECN, BECN, reserved) to 0xFF in place.
pub fn mask_bth(bth: &mut [u8]) {
    if let Some(b) = bth.get_mut(4) {
        *b = 0xff;
    }
}

/// The ICRC pseudo-header for IPv4: 8 x 0xFF, the masked IP header (all of
/// `ip_header`, options included) and the masked UDP header. The ICRC is the
/// CRC-32 of this followed by the masked BTH and the rest of the packet.
pub fn icrc_pseudo_header_ipv4(ip_header: &[u8], udp_header: &[u8; UDP_HDR_LEN]) -> Vec<u8> {
    pseudo_header(ip_header, udp_header, mask_ipv4_header)
}

/// The ICRC pseudo-header for IPv6 (see [`icrc_pseudo_header_ipv4`]);
/// `ip_header` is the 40-byte fixed header.
pub fn icrc_pseudo_header_ipv6(ip_header: &[u8], udp_header: &[u8; UDP_HDR_LEN]) -> Vec<u8> {
    pseudo_header(ip_header, udp_header, mask_ipv6_header)
}

fn pseudo_header(ip: &[u8], udp: &[u8; UDP_HDR_LEN], mask: fn(&mut [u8])) -> Vec<u8> {
    let mut v = Vec::with_capacity(8 + ip.len() + UDP_HDR_LEN);
    v.extend_from_slice(&ICRC_LRH_MASK);
    let start = v.len();
    v.extend_from_slice(ip);
    mask(&mut v[start..]);
    let mut u = *udp;
    mask_udp_header(&mut u);
    v.extend_from_slice(&u);
    v
}

/// The longest ICRC input computed in one piece on the stack: the LRH
/// mask, an IPv4 header with the most options, the UDP header and a GSI
/// datagram's payload. Longer inputs are fed in pieces.
const ICRC_INPUT_MAX: usize = 8 + 60 + UDP_HDR_LEN + GSI_PAYLOAD_LEN;

fn icrc_common(
    ip_header: &[u8],
    mask_ip: fn(&mut [u8]),
    udp_header: &[u8; UDP_HDR_LEN],
    bth_and_rest: &[u8],
) -> u32 {
    // One contiguous input, one CRC call: the carry-less multiply folds
    // only long runs, so the seven pieces fed one by one (five of them
    // shorter than 16 bytes) cost about three times the whole.
    let (ip_len, body_len) = (ip_header.len(), bth_and_rest.len());
    let total = ICRC_LRH_MASK.len() + ip_len + UDP_HDR_LEN + body_len;
    let mut buf = [0u8; ICRC_INPUT_MAX];
    if total <= buf.len() {
        let mut at = ICRC_LRH_MASK.len();
        buf[..at].copy_from_slice(&ICRC_LRH_MASK);
        buf[at..at + ip_len].copy_from_slice(ip_header);
        // Every masked IP byte lies in the first 40 (IPv4 options pass
        // through unmasked, as below).
        mask_ip(&mut buf[at..at + ip_len.min(IPV6_HDR_LEN)]);
        at += ip_len;
        let udp: &mut [u8; UDP_HDR_LEN] = (&mut buf[at..at + UDP_HDR_LEN])
            .try_into()
            .expect("UDP_HDR_LEN bytes");
        *udp = *udp_header;
        mask_udp_header(udp);
        at += UDP_HDR_LEN;
        buf[at..at + body_len].copy_from_slice(bth_and_rest);
        mask_bth(&mut buf[at..at + body_len.min(BTH_LEN)]);
        return crc32(&buf[..total]);
    }
    let mut crc = Crc32::new();
    crc.update(&ICRC_LRH_MASK);
    // Mask on the stack: every masked byte lies in the first 40 bytes (IPv4
    // masks only bytes < 20, so IPv4 options pass through unmasked).
    let mut fixed = [0u8; IPV6_HDR_LEN];
    let n = ip_header.len().min(IPV6_HDR_LEN);
    fixed[..n].copy_from_slice(&ip_header[..n]);
    mask_ip(&mut fixed[..n]);
    crc.update(&fixed[..n]);
    crc.update(&ip_header[n..]);
    let mut udp = *udp_header;
    mask_udp_header(&mut udp);
    crc.update(&udp);
    let mut bth = [0u8; BTH_LEN];
    let n = bth_and_rest.len().min(BTH_LEN);
    bth[..n].copy_from_slice(&bth_and_rest[..n]);
    mask_bth(&mut bth[..n]);
    crc.update(&bth[..n]);
    crc.update(&bth_and_rest[n..]);
    crc.finish()
}

/// RoCEv2 ICRC over an IPv4 packet: `ip_header` is the whole IPv4 header as
/// sent (options included), `udp_header` the UDP header, `bth_and_rest` the
/// UDP payload without the trailing 4 ICRC bytes. Returns the CRC value; the
/// packet stores it little-endian (`icrc.to_le_bytes()`).
pub fn icrc_ipv4(ip_header: &[u8], udp_header: &[u8; UDP_HDR_LEN], bth_and_rest: &[u8]) -> u32 {
    icrc_common(ip_header, mask_ipv4_header, udp_header, bth_and_rest)
}

/// RoCEv2 ICRC over an IPv6 packet: `ip_header` is the 40-byte fixed IPv6
/// header (see [`icrc_ipv4`] for the other arguments and the result).
pub fn icrc_ipv6(ip_header: &[u8], udp_header: &[u8; UDP_HDR_LEN], bth_and_rest: &[u8]) -> u32 {
    icrc_common(ip_header, mask_ipv6_header, udp_header, bth_and_rest)
}

fn split_icrc(udp_payload: &[u8]) -> Result<(&[u8], u32)> {
    check_len(udp_payload, BTH_LEN + ICRC_LEN)?;
    let (body, tail) = udp_payload.split_at(udp_payload.len() - ICRC_LEN);
    Ok((
        body,
        u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]),
    ))
}

/// Checks the ICRC at the end of `udp_payload` (BTH ... ICRC) of an IPv4
/// packet. Errors: `Truncated` if the payload cannot hold a BTH and an ICRC,
/// `BadIcrc { expected: computed, found: stored }`.
pub fn verify_icrc_ipv4(
    ip_header: &[u8],
    udp_header: &[u8; UDP_HDR_LEN],
    udp_payload: &[u8],
) -> Result<()> {
    let (body, found) = split_icrc(udp_payload)?;
    let expected = icrc_ipv4(ip_header, udp_header, body);
    if expected == found {
        Ok(())
    } else {
        Err(Error::BadIcrc { expected, found })
    }
}

/// IPv6 counterpart of [`verify_icrc_ipv4`].
pub fn verify_icrc_ipv6(
    ip_header: &[u8],
    udp_header: &[u8; UDP_HDR_LEN],
    udp_payload: &[u8],
) -> Result<()> {
    let (body, found) = split_icrc(udp_payload)?;
    let expected = icrc_ipv6(ip_header, udp_header, body);
    if expected == found {
        Ok(())
    } else {
        Err(Error::BadIcrc { expected, found })
    }
}

/// The IP and UDP headers that will carry a RoCEv2 payload sent through a
/// Linux UDP socket, as far as the ICRC depends on them.
///
/// Fields the ICRC masks (TOS/traffic class, flow label, TTL/hop limit,
/// checksums) are irrelevant; the header builders below fill them with
/// Linux defaults (TOS 0, TTL/hop limit 64, IPv4 checksum computed, UDP
/// checksum 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IcrcInput {
    /// IPv4 from an **unconnected** UDP socket with
    /// `IP_MTU_DISCOVER = IP_PMTUDISC_DO`: Linux sets DF and IP ID 0
    /// (a connected socket would use a per-socket incrementing ID instead),
    /// no IP options, protocol 17, total length 20 + 8 + 280. `ip_id` is 0
    /// for a single datagram; segment `i` of a `UDP_SEGMENT` send from such
    /// a socket carries ID `i` once the kernel (or the NIC) splits it
    /// ([`IcrcInput::with_ip_id`], measured in `fabric::udp`).
    LinuxIpv4 {
        src: Ipv4Addr,
        dst: Ipv4Addr,
        src_port: u16,
        dst_port: u16,
        ip_id: u16,
    },
    /// IPv6 from a UDP socket: version 6, next header 17 (no extension
    /// headers), `payload_len` = UDP length (8 + 280 for a GSI datagram).
    LinuxIpv6 {
        src: Ipv6Addr,
        dst: Ipv6Addr,
        src_port: u16,
        dst_port: u16,
        payload_len: u16,
    },
}

impl IcrcInput {
    /// IPv4 input for a GSI datagram (see [`IcrcInput::LinuxIpv4`]).
    pub const fn linux_ipv4(src: Ipv4Addr, dst: Ipv4Addr, src_port: u16, dst_port: u16) -> Self {
        IcrcInput::LinuxIpv4 {
            src,
            dst,
            src_port,
            dst_port,
            ip_id: 0,
        }
    }

    /// The same headers with IPv4 identification `id` (IPv6 has none: the
    /// input is returned unchanged).
    pub const fn with_ip_id(self, id: u16) -> Self {
        match self {
            IcrcInput::LinuxIpv4 {
                src,
                dst,
                src_port,
                dst_port,
                ..
            } => IcrcInput::LinuxIpv4 {
                src,
                dst,
                src_port,
                dst_port,
                ip_id: id,
            },
            v6 => v6,
        }
    }

    /// IPv6 input for a GSI datagram, payload length 8 + 280.
    pub const fn linux_ipv6(src: Ipv6Addr, dst: Ipv6Addr, src_port: u16, dst_port: u16) -> Self {
        IcrcInput::LinuxIpv6 {
            src,
            dst,
            src_port,
            dst_port,
            payload_len: (UDP_HDR_LEN + GSI_PAYLOAD_LEN) as u16,
        }
    }

    /// The 20-byte IPv4 header Linux sends (`None` for IPv6).
    pub fn ipv4_header(&self) -> Option<[u8; IPV4_HDR_LEN]> {
        let IcrcInput::LinuxIpv4 {
            src, dst, ip_id, ..
        } = *self
        else {
            return None;
        };
        let total = (IPV4_HDR_LEN + UDP_HDR_LEN + GSI_PAYLOAD_LEN) as u16;
        let mut h = [0u8; IPV4_HDR_LEN];
        h[0] = 0x45;
        h[2..4].copy_from_slice(&total.to_be_bytes());
        h[4..6].copy_from_slice(&ip_id.to_be_bytes());
        // flags DF, fragment offset 0
        h[6] = 0x40;
        h[8] = 64;
        h[9] = 17;
        h[12..16].copy_from_slice(&src.octets());
        h[16..20].copy_from_slice(&dst.octets());
        let sum = ipv4_checksum(&h);
        h[10..12].copy_from_slice(&sum.to_be_bytes());
        Some(h)
    }

    /// The 40-byte IPv6 header Linux sends (`None` for IPv4).
    pub fn ipv6_header(&self) -> Option<[u8; IPV6_HDR_LEN]> {
        let IcrcInput::LinuxIpv6 {
            src,
            dst,
            payload_len,
            ..
        } = *self
        else {
            return None;
        };
        let mut h = [0u8; IPV6_HDR_LEN];
        h[0] = 0x60;
        h[4..6].copy_from_slice(&payload_len.to_be_bytes());
        h[6] = 17;
        h[7] = 64;
        h[8..24].copy_from_slice(&src.octets());
        h[24..40].copy_from_slice(&dst.octets());
        Some(h)
    }

    /// The UDP header (checksum 0: the kernel computes it, the ICRC masks it).
    pub fn udp_header(&self) -> [u8; UDP_HDR_LEN] {
        let (sp, dp, len) = match *self {
            IcrcInput::LinuxIpv4 {
                src_port, dst_port, ..
            } => (src_port, dst_port, (UDP_HDR_LEN + GSI_PAYLOAD_LEN) as u16),
            IcrcInput::LinuxIpv6 {
                src_port,
                dst_port,
                payload_len,
                ..
            } => (src_port, dst_port, payload_len),
        };
        let mut u = [0u8; UDP_HDR_LEN];
        u[0..2].copy_from_slice(&sp.to_be_bytes());
        u[2..4].copy_from_slice(&dp.to_be_bytes());
        u[4..6].copy_from_slice(&len.to_be_bytes());
        u
    }

    /// The masked pseudo-header (8 x 0xFF | masked IP | masked UDP).
    pub fn pseudo_header(&self) -> Vec<u8> {
        let udp = self.udp_header();
        match (self.ipv4_header(), self.ipv6_header()) {
            (Some(h), _) => icrc_pseudo_header_ipv4(&h, &udp),
            (_, Some(h)) => icrc_pseudo_header_ipv6(&h, &udp),
            _ => unreachable!("IcrcInput is either IPv4 or IPv6"),
        }
    }

    /// The ICRC of `bth_and_rest` (UDP payload without the ICRC) behind
    /// these headers (the same as `self.prefix().icrc(bth_and_rest)`).
    pub fn icrc(&self, bth_and_rest: &[u8]) -> u32 {
        self.prefix().icrc(bth_and_rest)
    }

    /// The CRC of these headers' masked pseudo-header, to compute the
    /// ICRC of many payloads behind the same headers without building and
    /// feeding the headers again ([`IcrcPrefix::icrc`]).
    pub fn prefix(&self) -> IcrcPrefix {
        let mut buf = [0u8; ICRC_LRH_MASK.len() + IPV6_HDR_LEN + UDP_HDR_LEN];
        let mut at = ICRC_LRH_MASK.len();
        buf[..at].copy_from_slice(&ICRC_LRH_MASK);
        match (self.ipv4_header(), self.ipv6_header()) {
            (Some(h), _) => {
                buf[at..at + IPV4_HDR_LEN].copy_from_slice(&h);
                mask_ipv4_header(&mut buf[at..at + IPV4_HDR_LEN]);
                at += IPV4_HDR_LEN;
            }
            (_, Some(h)) => {
                buf[at..at + IPV6_HDR_LEN].copy_from_slice(&h);
                mask_ipv6_header(&mut buf[at..at + IPV6_HDR_LEN]);
                at += IPV6_HDR_LEN;
            }
            _ => unreachable!("IcrcInput is either IPv4 or IPv6"),
        }
        let mut udp = self.udp_header();
        mask_udp_header(&mut udp);
        buf[at..at + UDP_HDR_LEN].copy_from_slice(&udp);
        at += UDP_HDR_LEN;
        IcrcPrefix(crc32fast::Hasher::new_with_initial(crc32(&buf[..at])))
    }
}

/// The CRC-32 of an ICRC pseudo-header (LRH mask, masked IP and UDP
/// headers), from [`IcrcInput::prefix`]: the ICRC of a payload behind
/// those headers continues from it over the payload alone. Held as a
/// ready hasher, so each payload skips `crc32fast`'s CPU feature check.
#[derive(Clone)]
pub struct IcrcPrefix(crc32fast::Hasher);

impl core::fmt::Debug for IcrcPrefix {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "IcrcPrefix({:#010x})", self.0.clone().finalize())
    }
}

impl IcrcPrefix {
    /// The ICRC of `bth_and_rest` (UDP payload without the ICRC) behind
    /// the headers this prefix was computed for. A GSI datagram's payload
    /// (276 bytes) is fed as it is, without a copy: masking BTH byte 4 to
    /// 0xFF changes a CRC of fixed length by a constant XOR that depends
    /// only on the byte's value (CRC-32 is affine), looked up in a table.
    /// Other lengths feed a masked copy of the BTH and then the rest.
    pub fn icrc(&self, bth_and_rest: &[u8]) -> u32 {
        const BTH_MASKED: usize = 4;
        let mut h = self.0.clone();
        if bth_and_rest.len() == GSI_BODY_LEN {
            h.update(bth_and_rest);
            return h.finalize() ^ gsi_bth_mask_delta(bth_and_rest[BTH_MASKED]);
        }
        let mut bth = [0u8; BTH_LEN];
        let n = bth_and_rest.len().min(BTH_LEN);
        bth[..n].copy_from_slice(&bth_and_rest[..n]);
        mask_bth(&mut bth[..n]);
        h.update(&bth[..n]);
        h.update(&bth_and_rest[n..]);
        h.finalize()
    }
}

/// A GSI datagram's UDP payload without its ICRC: what the ICRC covers
/// after the pseudo-header.
const GSI_BODY_LEN: usize = GSI_PAYLOAD_LEN - ICRC_LEN;

/// What masking BTH byte 4 (value `b`) to 0xFF does to the CRC of a
/// `GSI_BODY_LEN`-byte payload, whatever precedes and surrounds it: the
/// two inputs have equal lengths and differ by `b ^ 0xFF` in that byte
/// alone, so the CRCs differ by the CRC-without-init of that difference
/// (a linear function of it: built from one value per bit).
fn gsi_bth_mask_delta(b: u8) -> u32 {
    static TABLE: std::sync::OnceLock<[u32; 256]> = std::sync::OnceLock::new();
    let table = TABLE.get_or_init(|| {
        let zeros = [0u8; GSI_BODY_LEN];
        let base = crc32(&zeros);
        let bits: [u32; 8] = std::array::from_fn(|bit| {
            let mut d = zeros;
            d[4] = 1 << bit;
            crc32(&d) ^ base
        });
        std::array::from_fn(|x| {
            (0..8)
                .filter(|bit| x & (1 << bit) != 0)
                .fold(0, |acc, bit| acc ^ bits[bit])
        })
    });
    table[(b ^ 0xff) as usize]
}

/// How the ICRC of a GSI datagram over IPv4 depends on the IP ID: the
/// ICRC behind ID `id` is the ICRC behind ID 0 XOR this value, whatever
/// the addresses, ports and payload (CRC-32 is affine: for inputs of equal
/// length, crc(a ^ b) = crc(a) ^ crc(b) ^ crc(0), and the two inputs differ
/// only in the ID bytes).
pub fn gsi_ipv4_id_delta(id: u16) -> u32 {
    let base = IcrcInput::linux_ipv4(Ipv4Addr::UNSPECIFIED, Ipv4Addr::UNSPECIFIED, 0, 0);
    let body = [0u8; GSI_PAYLOAD_LEN - ICRC_LEN];
    base.with_ip_id(id).icrc(&body) ^ base.icrc(&body)
}

/// The IPv4 header checksum (one's complement sum, checksum field as given;
/// pass a header with a zero checksum field to compute it).
pub fn ipv4_checksum(hdr: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    let mut chunks = hdr.chunks_exact(2);
    for c in &mut chunks {
        sum += u16::from_be_bytes([c[0], c[1]]) as u32;
    }
    if let [b] = chunks.remainder() {
        sum += (*b as u32) << 8;
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

// ---------------------------------------------------------------------------
// GSI datagram layer
// ---------------------------------------------------------------------------

/// A parsed GSI datagram borrowing its MAD from the UDP payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GsiDatagramRef<'a> {
    pub bth: Bth,
    pub deth: Deth,
    pub mad: &'a [u8; MAD_LEN],
    /// The stored ICRC (`u32::from_le_bytes` of the last 4 bytes); not
    /// verified here, see [`verify_icrc_ipv4`] / [`verify_icrc_ipv6`].
    pub icrc: u32,
}

impl GsiDatagramRef<'_> {
    pub fn to_owned(&self) -> GsiDatagram {
        GsiDatagram {
            bth: self.bth,
            deth: self.deth,
            mad: *self.mad,
        }
    }
}

/// An owned GSI datagram (the ICRC is computed on emit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GsiDatagram {
    pub bth: Bth,
    pub deth: Deth,
    pub mad: [u8; MAD_LEN],
}

impl GsiDatagram {
    /// A MAD to QP1 with the standard GSI headers ([`Bth::gsi`], [`Deth::GSI`]).
    pub const fn new(psn: u32, mad: [u8; MAD_LEN]) -> Self {
        GsiDatagram {
            bth: Bth::gsi(psn),
            deth: Deth::GSI,
            mad,
        }
    }

    pub fn emit(&self, icrc: IcrcInput, out: &mut [u8; GSI_PAYLOAD_LEN]) {
        emit_udp_payload(&self.bth, &self.deth, &self.mad, icrc, out)
    }
}

/// Parses the UDP payload of a RoCEv2 packet as one GSI MAD.
///
/// Checks, in order, each with its own error: at least a BTH
/// (`Truncated`), opcode 0x64 ([`NOT_UD_SEND_ONLY`]), TVer 0
/// ([`BAD_TRANSPORT_VERSION`]), destination QP 1 ([`DEST_QP_NOT_GSI`]),
/// length exactly 280 (`Truncated { needed: 280, .. }` when shorter,
/// [`PAYLOAD_TOO_LONG`] when longer), pad count 0 ([`PAD_COUNT_NOT_ZERO`]),
/// Q_Key 0x80010000 ([`QKEY_NOT_GSI`]), source QP 1 ([`SRC_QP_NOT_GSI`]).
/// The ICRC is returned, not verified (it needs the IP/UDP headers).
pub fn parse_udp_payload(buf: &[u8]) -> Result<GsiDatagramRef<'_>> {
    let bth = Bth::parse(&BthPacket::new_checked(buf)?)?;
    if bth.dest_qp != GSI_QP {
        return Err(Error::Framing(DEST_QP_NOT_GSI));
    }
    check_len(buf, GSI_PAYLOAD_LEN)?;
    if buf.len() > GSI_PAYLOAD_LEN {
        return Err(Error::Framing(PAYLOAD_TOO_LONG));
    }
    if bth.pad_count != 0 {
        return Err(Error::Framing(PAD_COUNT_NOT_ZERO));
    }
    let deth = Deth::parse(&DethPacket::new_unchecked(
        &buf[BTH_LEN..BTH_LEN + DETH_LEN],
    ))?;
    if deth.q_key != GSI_QKEY {
        return Err(Error::Framing(QKEY_NOT_GSI));
    }
    if deth.src_qp != GSI_QP {
        return Err(Error::Framing(SRC_QP_NOT_GSI));
    }
    let mad_start = BTH_LEN + DETH_LEN;
    let mad: &[u8; MAD_LEN] = buf[mad_start..mad_start + MAD_LEN]
        .try_into()
        .map_err(|_| Error::Truncated {
            needed: GSI_PAYLOAD_LEN,
            got: buf.len(),
        })?;
    let (_, icrc) = split_icrc(buf)?;
    Ok(GsiDatagramRef {
        bth,
        deth,
        mad,
        icrc,
    })
}

/// Builds the 280-byte UDP payload of a GSI datagram: BTH, DETH, MAD and the
/// ICRC computed for the IP/UDP headers described by `icrc`. The headers are
/// written as given (no GSI checks: the caller picks QPs and Q_Key).
pub fn emit_udp_payload(
    bth: &Bth,
    deth: &Deth,
    mad: &[u8; MAD_LEN],
    icrc: IcrcInput,
    out: &mut [u8; GSI_PAYLOAD_LEN],
) {
    emit_udp_payload_after(bth, deth, mad, &icrc.prefix(), out)
}

/// [`emit_udp_payload`] behind headers whose pseudo-header CRC is already
/// known ([`IcrcInput::prefix`]).
pub fn emit_udp_payload_after(
    bth: &Bth,
    deth: &Deth,
    mad: &[u8; MAD_LEN],
    prefix: &IcrcPrefix,
    out: &mut [u8; GSI_PAYLOAD_LEN],
) {
    bth.emit(&mut BthPacket::new_unchecked(&mut out[..BTH_LEN]));
    deth.emit(&mut DethPacket::new_unchecked(
        &mut out[BTH_LEN..BTH_LEN + DETH_LEN],
    ));
    let mad_start = BTH_LEN + DETH_LEN;
    out[mad_start..mad_start + MAD_LEN].copy_from_slice(mad);
    let crc = prefix.icrc(&out[..GSI_BODY_LEN]);
    out[GSI_BODY_LEN..].copy_from_slice(&crc.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Bit-at-a-time reference CRC.
    fn crc32_bitwise(data: &[u8]) -> u32 {
        let mut c = 0xFFFF_FFFFu32;
        for &b in data {
            c ^= b as u32;
            for _ in 0..8 {
                c = if c & 1 != 0 {
                    (c >> 1) ^ 0xEDB8_8320
                } else {
                    c >> 1
                };
            }
        }
        !c
    }

    #[test]
    fn crc32_known_vectors() {
        assert_eq!(crc32(b""), 0);
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32(b"a"), 0xE8B7_BE43);
        assert_eq!(
            crc32(b"The quick brown fox jumps over the lazy dog"),
            0x414F_A339
        );
        assert_eq!(crc32(&[0u8; 32]), 0x190A_55AD);
        assert_eq!(crc32(&[0xffu8; 32]), 0xFF6C_AB0B);
        // After the 8 x 0xFF LRH mask the register holds 0xdebb20e3, the
        // seed Linux rxe starts its ICRC from (the value is its complement).
        let mut c = Crc32::new();
        c.update(&ICRC_LRH_MASK);
        assert_eq!(!c.finish(), 0xDEBB_20E3);
    }

    #[test]
    fn crc32_incremental_matches_oneshot() {
        let data: Vec<u8> = (0..300u32).map(|i| (i * 7 + 3) as u8).collect();
        let whole = crc32(&data);
        assert_eq!(whole, crc32_bitwise(&data));
        for split in 0..data.len() {
            let (a, b) = data.split_at(split);
            assert_eq!(
                Crc32::new().update(a).update(b).finish(),
                whole,
                "split {split}"
            );
        }
    }

    proptest! {
        #[test]
        fn crc32_matches_bitwise(data in proptest::collection::vec(any::<u8>(), 0..200), cut in 0usize..200) {
            let cut = cut.min(data.len());
            let mut c = Crc32::default();
            c.update(&data[..cut]);
            c.update(&data[cut..]);
            prop_assert_eq!(c.finish(), crc32_bitwise(&data));
        }

        /// The ICRC in one piece (inputs up to `ICRC_INPUT_MAX`) and in
        /// pieces (longer ones) is the CRC of pseudo-header, masked BTH
        /// and the rest laid end to end.
        #[test]
        fn icrc_matches_the_pseudo_header_route(
            ip in proptest::collection::vec(any::<u8>(), 0..80),
            udp in any::<[u8; UDP_HDR_LEN]>(),
            body in proptest::collection::vec(any::<u8>(), 0..400),
        ) {
            let mut bth = body[..body.len().min(BTH_LEN)].to_vec();
            mask_bth(&mut bth);
            for v6 in [false, true] {
                let mut bytes = if v6 {
                    icrc_pseudo_header_ipv6(&ip, &udp)
                } else {
                    icrc_pseudo_header_ipv4(&ip, &udp)
                };
                bytes.extend_from_slice(&bth);
                bytes.extend_from_slice(&body[bth.len()..]);
                let got = if v6 {
                    icrc_ipv6(&ip, &udp, &body)
                } else {
                    icrc_ipv4(&ip, &udp, &body)
                };
                prop_assert_eq!(got, crc32_bitwise(&bytes));
            }
        }

        /// `IcrcInput::icrc` (a cached pseudo-header CRC continued over
        /// the payload; a GSI-sized payload fed unmasked and corrected by
        /// the BTH byte 4 table) is the pseudo-header route, for any BTH
        /// byte 4, IP ID, payload length and both IP versions.
        #[test]
        fn icrc_by_prefix_matches_the_pseudo_header_route(
            gsi_body in proptest::collection::vec(any::<u8>(), GSI_BODY_LEN),
            other_body in proptest::collection::vec(any::<u8>(), 0..400),
            id in any::<u16>(),
            ports in any::<(u16, u16)>(),
            a in any::<[u8; 16]>(),
            b in any::<[u8; 16]>(),
        ) {
            let v4 = IcrcInput::linux_ipv4(
                Ipv4Addr::from(<[u8; 4]>::try_from(&a[..4]).unwrap()),
                Ipv4Addr::from(<[u8; 4]>::try_from(&b[..4]).unwrap()),
                ports.0,
                ports.1,
            )
            .with_ip_id(id);
            let v6 = IcrcInput::linux_ipv6(Ipv6Addr::from(a), Ipv6Addr::from(b), ports.0, ports.1);
            for inp in [v4, v6] {
                let udp = inp.udp_header();
                for body in [&gsi_body, &other_body] {
                    let want = match (inp.ipv4_header(), inp.ipv6_header()) {
                        (Some(h), _) => icrc_ipv4(&h, &udp, body),
                        (_, Some(h)) => icrc_ipv6(&h, &udp, body),
                        _ => unreachable!(),
                    };
                    prop_assert_eq!(inp.icrc(body), want);
                    prop_assert_eq!(inp.prefix().icrc(body), want);
                }
            }
        }

        #[test]
        fn parse_never_panics(data in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = parse_udp_payload(&data);
            let _ = verify_icrc_ipv4(&data, &[0; 8], &data);
            let _ = verify_icrc_ipv6(&data, &[0; 8], &data);
        }
    }

    fn test_mad() -> [u8; MAD_LEN] {
        let mut mad = [0u8; MAD_LEN];
        for (i, b) in mad.iter_mut().enumerate() {
            *b = (i as u8).wrapping_mul(31).wrapping_add(5);
        }
        mad[..4].copy_from_slice(&[1, 7, 2, 3]);
        mad
    }

    fn v4_input() -> IcrcInput {
        IcrcInput::linux_ipv4(
            Ipv4Addr::new(10, 77, 5, 254),
            Ipv4Addr::new(10, 77, 5, 1),
            ROCEV2_UDP_PORT,
            ROCEV2_UDP_PORT,
        )
    }

    #[test]
    fn bth_fields() {
        let mut buf = [0u8; BTH_LEN];
        let mut p = BthPacket::new_unchecked(&mut buf[..]);
        p.set_opcode(0x64);
        p.set_solicited_event(1);
        p.set_pad_count(3);
        p.set_transport_version(0);
        p.set_pkey(0x8001);
        p.set_becn(1);
        p.set_dest_qp(0x123456);
        p.set_ack_req(1);
        p.set_psn(0xabcdef);
        assert_eq!(
            buf,
            [
                0x64, 0xb0, 0x80, 0x01, 0x40, 0x12, 0x34, 0x56, 0x80, 0xab, 0xcd, 0xef
            ]
        );
        let p = BthPacket::new_checked(&buf[..]).unwrap();
        assert_eq!(
            (
                p.solicited_event(),
                p.mig_req(),
                p.fecn(),
                p.becn(),
                p.ack_req()
            ),
            (1, 0, 0, 1, 1)
        );
        assert_eq!(
            (p.pad_count(), p.pkey(), p.dest_qp(), p.psn()),
            (3, 0x8001, 0x123456, 0xabcdef)
        );
        let bth = Bth::parse(&p).unwrap();
        let mut out = [0xffu8; BTH_LEN];
        bth.emit(&mut BthPacket::new_unchecked(&mut out));
        assert_eq!(out, buf);

        assert_eq!(
            BthPacket::new_checked(&buf[..11]).unwrap_err(),
            Error::Truncated {
                needed: 12,
                got: 11
            }
        );
        let mut rc = buf;
        rc[0] = 0x04;
        assert_eq!(
            Bth::parse(&BthPacket::new_unchecked(&rc)),
            Err(Error::Framing(NOT_UD_SEND_ONLY))
        );
        let mut tver = buf;
        tver[1] |= 0x01;
        assert_eq!(
            Bth::parse(&BthPacket::new_unchecked(&tver)),
            Err(Error::Framing(BAD_TRANSPORT_VERSION))
        );
    }

    #[test]
    fn deth_fields() {
        let mut buf = [0xeeu8; DETH_LEN];
        Deth {
            q_key: GSI_QKEY,
            src_qp: 0xfedcba,
        }
        .emit(&mut DethPacket::new_unchecked(&mut buf));
        assert_eq!(buf, [0x80, 0x01, 0x00, 0x00, 0x00, 0xfe, 0xdc, 0xba]);
        let d = Deth::parse(&DethPacket::new_checked(&buf[..]).unwrap()).unwrap();
        assert_eq!(
            d,
            Deth {
                q_key: 0x8001_0000,
                src_qp: 0xfedcba
            }
        );
        assert!(DethPacket::new_checked(&buf[..7]).is_err());
    }

    #[test]
    fn roundtrip_and_icrc_v4() {
        let mad = test_mad();
        let mut out = [0u8; GSI_PAYLOAD_LEN];
        let bth = Bth::gsi(7);
        emit_udp_payload(&bth, &Deth::GSI, &mad, v4_input(), &mut out);
        let d = parse_udp_payload(&out).unwrap();
        assert_eq!(d.bth, bth);
        assert_eq!(d.deth, Deth::GSI);
        assert_eq!(d.mad, &mad);
        assert_eq!(d.to_owned(), GsiDatagram::new(7, mad));
        let ip = v4_input().ipv4_header().unwrap();
        let udp = v4_input().udp_header();
        assert_eq!(ipv4_checksum(&ip), 0, "header checksum must verify");
        verify_icrc_ipv4(&ip, &udp, &out).unwrap();
        assert_eq!(d.icrc, icrc_ipv4(&ip, &udp, &out[..276]));
        // The pseudo-header route gives the same value.
        let mut bytes = v4_input().pseudo_header();
        let mut masked_bth = out[..BTH_LEN].to_vec();
        mask_bth(&mut masked_bth);
        bytes.extend_from_slice(&masked_bth);
        bytes.extend_from_slice(&out[BTH_LEN..276]);
        assert_eq!(crc32(&bytes), d.icrc);

        // Masked fields do not matter: TOS, TTL, checksum, UDP checksum, FECN.
        let mut ip2 = ip;
        ip2[1] = 0x2e;
        ip2[8] = 3;
        ip2[10] = 0x12;
        let mut udp2 = udp;
        udp2[6] = 0x55;
        let mut out2 = out;
        out2[4] = 0xc0;
        verify_icrc_ipv4(&ip2, &udp2, &out2).unwrap();
        // Unmasked ones do: IP ID, addresses, ports, BTH PSN.
        let mut ip3 = ip;
        ip3[5] = 1;
        assert!(verify_icrc_ipv4(&ip3, &udp, &out).is_err());
        let mut udp3 = udp;
        udp3[1] ^= 1;
        assert!(verify_icrc_ipv4(&ip, &udp3, &out).is_err());

        // Corrupting any single MAD byte breaks the ICRC.
        for i in [20usize, 21, 100, 275] {
            let mut bad = out;
            bad[i] ^= 0x01;
            match verify_icrc_ipv4(&ip, &udp, &bad) {
                Err(Error::BadIcrc { found, .. }) => assert_eq!(found, d.icrc),
                other => panic!("byte {i}: {other:?}"),
            }
        }
    }

    #[test]
    fn ip_id_is_covered_v4_only() {
        let mad = test_mad();
        let base = v4_input();
        let seg = base.with_ip_id(0x0102);
        let ip = seg.ipv4_header().unwrap();
        assert_eq!(&ip[4..6], &[0x01, 0x02]);
        assert_eq!(ipv4_checksum(&ip), 0, "header checksum must verify");
        assert_eq!(ip[..4], base.ipv4_header().unwrap()[..4]);
        assert_eq!(ip[6..10], base.ipv4_header().unwrap()[6..10]);
        let mut out = [0u8; GSI_PAYLOAD_LEN];
        emit_udp_payload(&Bth::gsi(9), &Deth::GSI, &mad, seg, &mut out);
        verify_icrc_ipv4(&ip, &seg.udp_header(), &out).unwrap();
        let ip0 = base.ipv4_header().unwrap();
        assert!(verify_icrc_ipv4(&ip0, &base.udp_header(), &out).is_err());
        assert_eq!(seg.with_ip_id(0), base);
        // The ID's effect is the same XOR for any headers and payload.
        let mut out0 = [0u8; GSI_PAYLOAD_LEN];
        emit_udp_payload(&Bth::gsi(9), &Deth::GSI, &mad, base, &mut out0);
        let stored = |o: &[u8; GSI_PAYLOAD_LEN]| u32::from_le_bytes(o[276..].try_into().unwrap());
        assert_eq!(stored(&out0) ^ stored(&out), gsi_ipv4_id_delta(0x0102));
        assert_eq!(gsi_ipv4_id_delta(0), 0);
        assert_ne!(gsi_ipv4_id_delta(1), 0);
        let v6 = IcrcInput::linux_ipv6(Ipv6Addr::LOCALHOST, Ipv6Addr::LOCALHOST, 1, 2);
        assert_eq!(v6.with_ip_id(7), v6);
    }

    #[test]
    fn roundtrip_and_icrc_v6() {
        let input = IcrcInput::linux_ipv6(
            "fe80::5054:ff:fe77:1".parse().unwrap(),
            "fe80::5054:ff:fe77:2".parse().unwrap(),
            55410,
            ROCEV2_UDP_PORT,
        );
        let mut out = [0u8; GSI_PAYLOAD_LEN];
        GsiDatagram::new(0xffffff, test_mad()).emit(input, &mut out);
        let d = parse_udp_payload(&out).unwrap();
        assert_eq!(d.bth.psn, 0xffffff);
        let ip = input.ipv6_header().unwrap();
        assert_eq!(&ip[4..8], &[0x01, 0x20, 17, 64]);
        let udp = input.udp_header();
        assert_eq!(udp, [0xd8, 0x72, 0x12, 0xb7, 0x01, 0x20, 0, 0]);
        verify_icrc_ipv6(&ip, &udp, &out).unwrap();
        // Traffic class / flow label / hop limit are masked.
        let mut ip2 = ip;
        ip2[0] = 0x6a;
        ip2[1] = 0xbc;
        ip2[3] = 0x99;
        ip2[7] = 1;
        verify_icrc_ipv6(&ip2, &udp, &out).unwrap();
        // The version nibble and the addresses are not.
        let mut ip3 = ip;
        ip3[39] ^= 1;
        assert!(matches!(
            verify_icrc_ipv6(&ip3, &udp, &out),
            Err(Error::BadIcrc { .. })
        ));
        // v4 and v6 pseudo-headers differ.
        assert!(verify_icrc_ipv4(&ip, &udp, &out).is_err());
    }

    #[test]
    fn captured_frame_verifies() {
        // rej.pcap frame 8 (REQ), Ethernet stripped.
        const HEX: &str = "450001344b3140004011d9eb0a4d00020a4d0001d87212b701200000\
            6400ffff00000001800000008001000000000001";
        let hdrs: Vec<u8> = (0..HEX.len() / 2)
            .map(|i| u8::from_str_radix(&HEX[2 * i..2 * i + 2], 16).unwrap())
            .collect();
        let ip = &hdrs[..20];
        let udp: [u8; 8] = hdrs[20..28].try_into().unwrap();
        let bth = Bth::parse(&BthPacket::new_checked(&hdrs[28..40]).unwrap()).unwrap();
        assert!(bth.ack_req, "rxe sets AckReq on GSI sends");
        assert_eq!(bth, Bth::gsi(0));
        // Rebuild the MAD from the vector and check the stored ICRC bytes.
        let mads = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/vectors/rej.mads.txt"
        ))
        .unwrap();
        let mut mad = Vec::new();
        for line in mads
            .lines()
            .skip_while(|l| !l.starts_with("0000:"))
            .take(16)
        {
            for h in line[6..].split_whitespace() {
                mad.push(u8::from_str_radix(h, 16).unwrap());
            }
        }
        let mut payload = hdrs[28..].to_vec();
        payload.extend_from_slice(&mad);
        let crc = icrc_ipv4(ip, &udp, &payload);
        // Wire bytes: fe b8 e7 2a = crc.to_le_bytes().
        assert_eq!(crc.to_le_bytes(), [0xfe, 0xb8, 0xe7, 0x2a]);
        payload.extend_from_slice(&crc.to_le_bytes());
        let d = parse_udp_payload(&payload).unwrap();
        assert_eq!(d.icrc, 0x2ae7_b8fe);
        verify_icrc_ipv4(ip, &udp, &payload).unwrap();
    }

    #[test]
    fn every_truncation_is_an_error() {
        let mut out = [0u8; GSI_PAYLOAD_LEN];
        emit_udp_payload(&Bth::gsi(1), &Deth::GSI, &test_mad(), v4_input(), &mut out);
        for n in 0..GSI_PAYLOAD_LEN {
            match parse_udp_payload(&out[..n]) {
                Err(Error::Truncated { needed, got }) => {
                    assert_eq!(got, n);
                    assert!(needed > n);
                }
                other => panic!("len {n}: {other:?}"),
            }
        }
        let mut long = out.to_vec();
        long.push(0);
        assert_eq!(
            parse_udp_payload(&long),
            Err(Error::Framing(PAYLOAD_TOO_LONG))
        );
    }

    #[test]
    fn gsi_checks_are_distinct() {
        let mut good = [0u8; GSI_PAYLOAD_LEN];
        emit_udp_payload(&Bth::gsi(1), &Deth::GSI, &test_mad(), v4_input(), &mut good);
        let case = |f: fn(&mut [u8; GSI_PAYLOAD_LEN])| {
            let mut b = good;
            f(&mut b);
            parse_udp_payload(&b).unwrap_err()
        };
        assert_eq!(case(|b| b[0] = 0x04), Error::Framing(NOT_UD_SEND_ONLY));
        assert_eq!(case(|b| b[1] = 0x01), Error::Framing(BAD_TRANSPORT_VERSION));
        assert_eq!(case(|b| b[7] = 2), Error::Framing(DEST_QP_NOT_GSI));
        assert_eq!(case(|b| b[1] = 0x10), Error::Framing(PAD_COUNT_NOT_ZERO));
        assert_eq!(case(|b| b[12] = 0), Error::Framing(QKEY_NOT_GSI));
        assert_eq!(case(|b| b[19] = 0), Error::Framing(SRC_QP_NOT_GSI));
        // Reserved bits and FECN/BECN do not matter to the parser.
        let mut b = good;
        b[4] = 0xff;
        b[8] = 0xff;
        b[16] = 0xff;
        assert!(parse_udp_payload(&b).is_ok());
    }
}
