//! Capture reader for `ibcm decode`: finds the CM MADs in pcap / pcapng
//! files of RoCEv2 traffic.
//!
//! * Files: classic pcap (both byte orders, micro- and nanosecond magic) and
//!   pcapng (sections of either byte order, IDB with `if_tsresol` /
//!   `if_tsoffset`, EPB, SPB, obsolete PB; other blocks are skipped), read
//!   from a byte slice ([`read_bytes`], [`Reader`]) or a file ([`read_file`]).
//! * Links ([`link`]): Ethernet with any number (up to 8) of 802.1Q /
//!   802.1ad / 0x9100 VLAN tags, raw IP (101, 228, 229), Linux cooked SLL
//!   (113) and SLL2 (276), BSD null (0) and OpenBSD loop (108). IPv4 with
//!   options (fragments skipped, header checksum not checked), IPv6 with
//!   hop-by-hop / routing / destination-options / AH / atomic-fragment
//!   extension headers (real fragments skipped, jumbograms not supported).
//! * RoCEv2 is identified by UDP **destination** port 4791 only (the source
//!   port is flow entropy, e.g. rxe's QP1 uses 55410 and a host socket bound
//!   to 4791 uses 4791; a packet *from* 4791 to another port is not RoCEv2).
//! * A frame is reported when its UDP payload is a GSI datagram
//!   ([`crate::wire::roce::parse_udp_payload`]: UD SEND only to QP1, Q_Key
//!   0x80010000, source QP 1, 280 bytes) holding a CM MAD (management class
//!   0x07). The ICRC is verified against the frame's real IP/UDP headers and
//!   reported in [`RoceFrame::icrc_ok`] (a bad ICRC does not drop the frame).
//!   Every other packet is counted in [`Skipped`] by its first failing test.
//! * A malformed *file* (bad magic, block or record running past the end,
//!   inconsistent block lengths, unknown interface) is a [`CaptureError`]
//!   with the byte offset of the offending record; a malformed *packet* is
//!   only counted. Nothing panics on arbitrary input.

pub mod link;
pub mod live;
mod pcap;
mod pcapng;
pub mod writer;

use core::fmt;
use std::net::IpAddr;
use std::path::Path;

use crate::wire::roce::{self, Bth, Deth, ROCEV2_UDP_PORT};
use crate::wire::{Error as WireError, MAD_LEN};

pub use link::{
    LINKTYPE_ETHERNET, LINKTYPE_IPV4, LINKTYPE_IPV6, LINKTYPE_LINUX_SLL, LINKTYPE_LINUX_SLL2,
    LINKTYPE_LOOP, LINKTYPE_NULL, LINKTYPE_RAW,
};

/// Management class of the Communication Manager.
const CM_MGMT_CLASS: u8 = 0x07;

/// A file that cannot be read as pcap / pcapng.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaptureError {
    /// Byte offset in the file of the header, block or record at fault.
    pub offset: u64,
    pub message: String,
}

impl CaptureError {
    pub(crate) fn new(offset: usize, message: impl Into<String>) -> Self {
        CaptureError {
            offset: offset as u64,
            message: message.into(),
        }
    }
}

impl fmt::Display for CaptureError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "capture file error at byte offset {} ({:#x}): {}",
            self.offset, self.offset, self.message
        )
    }
}

impl std::error::Error for CaptureError {}

/// The container format of a capture file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileFormat {
    Pcap { big_endian: bool, nanosecond: bool },
    Pcapng,
}

/// One packet record of a file, before any protocol decoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<'a> {
    /// 1-based number counting every packet record (EPB, SPB, PB or pcap
    /// record) in the file, across pcapng sections, as tshark numbers them.
    pub frame: u64,
    /// Byte offset of the record (pcap record header or pcapng block).
    pub offset: u64,
    pub link_type: u32,
    /// Nanoseconds since the Unix epoch (0 for a pcapng SPB, which has none).
    pub ts_nanos: u64,
    /// Length of the packet on the wire (`data` may be shorter: snaplen).
    pub orig_len: u32,
    /// The captured bytes.
    pub data: &'a [u8],
    /// Interface (pcapng IDB index within its section; 0 in pcap files).
    pub interface: u32,
    /// Direction from a pcapng EPB `epb_flags` option, when it says one.
    pub direction: Option<Direction>,
}

/// Which way a packet went, seen from the capturing interface (pcapng
/// `epb_flags` bits 0-1: 1 inbound, 2 outbound).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    Inbound,
    Outbound,
}

impl Direction {
    /// The `epb_flags` value for this direction.
    pub const fn epb_flags(self) -> u32 {
        match self {
            Direction::Inbound => 1,
            Direction::Outbound => 2,
        }
    }

    /// The direction in an `epb_flags` value (`None`: not recorded).
    pub const fn from_epb_flags(flags: u32) -> Option<Direction> {
        match flags & 3 {
            1 => Some(Direction::Inbound),
            2 => Some(Direction::Outbound),
            _ => None,
        }
    }
}

/// A record-level reader over the bytes of a pcap or pcapng file.
///
/// Yields packets in file order; after the first error it yields that error
/// once and then ends.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    inner: Inner<'a>,
    frame: u64,
    done: bool,
}

#[derive(Debug, Clone)]
enum Inner<'a> {
    Pcap(pcap::PcapReader<'a>),
    Pcapng(pcapng::PcapngReader<'a>),
}

impl<'a> Reader<'a> {
    /// Detects the format from the first bytes and checks the file header.
    pub fn new(data: &'a [u8]) -> Result<Self, CaptureError> {
        if data.len() < 4 {
            return Err(CaptureError::new(
                0,
                format!(
                    "file is {} bytes long, too short for a pcap or pcapng header",
                    data.len()
                ),
            ));
        }
        let magic = [data[0], data[1], data[2], data[3]];
        let inner = if pcapng::is_pcapng(magic) {
            Inner::Pcapng(pcapng::PcapngReader::new(data)?)
        } else if pcap::is_pcap(magic) {
            Inner::Pcap(pcap::PcapReader::new(data)?)
        } else {
            return Err(CaptureError::new(
                0,
                format!(
                    "not a pcap or pcapng file (first bytes {:02x} {:02x} {:02x} {:02x})",
                    magic[0], magic[1], magic[2], magic[3]
                ),
            ));
        };
        Ok(Reader {
            inner,
            frame: 0,
            done: false,
        })
    }

    pub fn format(&self) -> FileFormat {
        match &self.inner {
            Inner::Pcap(p) => p.format(),
            Inner::Pcapng(_) => FileFormat::Pcapng,
        }
    }

    /// The `if_name` of interface `id` of the current pcapng section (as
    /// far as the file has been read), if it has a UTF-8 one.
    pub fn interface_name(&self, id: u32) -> Option<&'a str> {
        match &self.inner {
            Inner::Pcap(_) => None,
            Inner::Pcapng(p) => p.interface_name(id),
        }
    }
}

/// What a format reader hands back for one packet record.
pub(crate) struct RawRecord<'a> {
    pub offset: usize,
    pub link_type: u32,
    pub ts_nanos: u64,
    pub orig_len: u32,
    pub data: &'a [u8],
    pub interface: u32,
    pub direction: Option<Direction>,
}

impl<'a> Iterator for Reader<'a> {
    type Item = Result<Packet<'a>, CaptureError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let r = match &mut self.inner {
            Inner::Pcap(p) => p.next_record(),
            Inner::Pcapng(p) => p.next_record(),
        };
        match r {
            Ok(Some(rec)) => {
                self.frame += 1;
                Some(Ok(Packet {
                    frame: self.frame,
                    offset: rec.offset as u64,
                    link_type: rec.link_type,
                    ts_nanos: rec.ts_nanos,
                    orig_len: rec.orig_len,
                    data: rec.data,
                    interface: rec.interface,
                    direction: rec.direction,
                }))
            }
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

/// One CM MAD found in a capture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoceFrame {
    /// 1-based frame number (every packet record counts, like tshark).
    pub frame: u64,
    /// Nanoseconds since the Unix epoch.
    pub ts_nanos: u64,
    pub src: IpAddr,
    pub dst: IpAddr,
    pub src_port: u16,
    pub dst_port: u16,
    pub bth: Bth,
    pub deth: Deth,
    pub mad: [u8; MAD_LEN],
    /// The ICRC stored in the frame (see [`crate::wire::roce`] for the order).
    pub icrc: u32,
    /// Whether `icrc` matches the ICRC computed from the frame's headers.
    pub icrc_ok: bool,
}

/// Why a packet was not reported as a [`RoceFrame`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SkipReason {
    /// A link type this reader does not decode.
    UnsupportedLink,
    /// Not IPv4 / IPv6 (ARP, LLDP, ...).
    NotIp,
    /// IP, but not UDP (ICMP, ICMPv6 / ND / MLD, TCP, ...).
    NotUdp,
    /// An IP fragment.
    Fragment,
    /// UDP, but the destination port is not 4791.
    NotRocev2Port,
    /// RoCEv2, but not a GSI datagram (other opcode, QP, Q_Key, length).
    NotGsi,
    /// A GSI MAD of another management class.
    NotCm,
    /// The capture holds fewer bytes than the headers say (snaplen).
    Truncated,
    /// Inconsistent headers (bad version, lengths that do not add up, ...).
    Malformed,
}

/// Per-cause counts of the packets that were skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Skipped {
    pub unsupported_link: u64,
    pub not_ip: u64,
    pub not_udp: u64,
    pub fragment: u64,
    pub not_rocev2_port: u64,
    pub not_gsi: u64,
    pub not_cm: u64,
    pub truncated: u64,
    pub malformed: u64,
}

impl Skipped {
    pub fn add(&mut self, reason: SkipReason) {
        *self.counter(reason) += 1;
    }

    pub fn get(&self, reason: SkipReason) -> u64 {
        let mut c = *self;
        *c.counter(reason)
    }

    fn counter(&mut self, reason: SkipReason) -> &mut u64 {
        match reason {
            SkipReason::UnsupportedLink => &mut self.unsupported_link,
            SkipReason::NotIp => &mut self.not_ip,
            SkipReason::NotUdp => &mut self.not_udp,
            SkipReason::Fragment => &mut self.fragment,
            SkipReason::NotRocev2Port => &mut self.not_rocev2_port,
            SkipReason::NotGsi => &mut self.not_gsi,
            SkipReason::NotCm => &mut self.not_cm,
            SkipReason::Truncated => &mut self.truncated,
            SkipReason::Malformed => &mut self.malformed,
        }
    }

    /// All skipped packets.
    pub fn total(&self) -> u64 {
        self.unsupported_link
            + self.not_ip
            + self.not_udp
            + self.fragment
            + self.not_rocev2_port
            + self.not_gsi
            + self.not_cm
            + self.truncated
            + self.malformed
    }
}

impl fmt::Display for Skipped {
    /// `not_ip=2 not_udp=6 ...`, non-zero counts only (`none` if all zero).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let all = [
            ("unsupported_link", self.unsupported_link),
            ("not_ip", self.not_ip),
            ("not_udp", self.not_udp),
            ("fragment", self.fragment),
            ("not_rocev2_port", self.not_rocev2_port),
            ("not_gsi", self.not_gsi),
            ("not_cm", self.not_cm),
            ("truncated", self.truncated),
            ("malformed", self.malformed),
        ];
        let mut first = true;
        for (name, n) in all.into_iter().filter(|&(_, n)| n != 0) {
            write!(f, "{}{name}={n}", if first { "" } else { " " })?;
            first = false;
        }
        if first {
            f.write_str("none")?;
        }
        Ok(())
    }
}

/// Everything found in one capture file.
/// Invariant: `frames.len() + skipped.total() == total_packets`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capture {
    pub format: FileFormat,
    pub frames: Vec<RoceFrame>,
    pub skipped: Skipped,
    pub total_packets: u64,
}

/// Decodes one packet record down to a CM MAD.
pub fn decode_packet(p: &Packet<'_>) -> Result<RoceFrame, SkipReason> {
    let u = link::decode_udp(p.link_type, p.data)?;
    if u.dst_port != ROCEV2_UDP_PORT {
        return Err(SkipReason::NotRocev2Port);
    }
    let g = match roce::parse_udp_payload(u.payload) {
        Ok(g) => g,
        Err(WireError::Truncated { .. }) => return Err(SkipReason::Malformed),
        Err(_) => return Err(SkipReason::NotGsi),
    };
    if g.mad[1] != CM_MGMT_CLASS {
        return Err(SkipReason::NotCm);
    }
    let icrc_ok = match u.ip {
        link::IpHeader::V4(h) => roce::verify_icrc_ipv4(h, &u.udp_header, u.payload).is_ok(),
        link::IpHeader::V6(h) => roce::verify_icrc_ipv6(h, &u.udp_header, u.payload).is_ok(),
    };
    Ok(RoceFrame {
        frame: p.frame,
        ts_nanos: p.ts_nanos,
        src: u.src,
        dst: u.dst,
        src_port: u.src_port,
        dst_port: u.dst_port,
        bth: g.bth,
        deth: g.deth,
        mad: *g.mad,
        icrc: g.icrc,
        icrc_ok,
    })
}

/// Reads a whole capture held in memory.
pub fn read_bytes(data: &[u8]) -> Result<Capture, CaptureError> {
    let reader = Reader::new(data)?;
    let mut cap = Capture {
        format: reader.format(),
        frames: Vec::new(),
        skipped: Skipped::default(),
        total_packets: 0,
    };
    for p in reader {
        let p = p?;
        cap.total_packets += 1;
        match decode_packet(&p) {
            Ok(f) => cap.frames.push(f),
            Err(r) => cap.skipped.add(r),
        }
    }
    Ok(cap)
}

/// Reads a capture file (an I/O error is reported at offset 0).
pub fn read_file(path: impl AsRef<Path>) -> Result<Capture, CaptureError> {
    let path = path.as_ref();
    let data = std::fs::read(path)
        .map_err(|e| CaptureError::new(0, format!("cannot read {}: {e}", path.display())))?;
    read_bytes(&data)
}

/// Little helpers shared by the format readers: bounds-checked integer reads
/// in a chosen byte order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Endian {
    pub big: bool,
}

impl Endian {
    /// `N` bytes at `off` in file order, big-endian first: reversed when
    /// the file is little-endian (None past the end).
    fn bytes<const N: usize>(self, b: &[u8], off: usize) -> Option<[u8; N]> {
        let mut s: [u8; N] = b.get(off..off.checked_add(N)?)?.try_into().ok()?;
        if !self.big {
            s.reverse();
        }
        Some(s)
    }
    pub fn u16(self, b: &[u8], off: usize) -> Option<u16> {
        self.bytes(b, off).map(u16::from_be_bytes)
    }
    pub fn u32(self, b: &[u8], off: usize) -> Option<u32> {
        self.bytes(b, off).map(u32::from_be_bytes)
    }
    pub fn u64(self, b: &[u8], off: usize) -> Option<u64> {
        self.bytes(b, off).map(u64::from_be_bytes)
    }
}

#[cfg(test)]
mod tests;
