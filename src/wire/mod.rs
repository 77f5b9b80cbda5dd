//! Wire formats: the 256-byte CM MADs (IBTA Vol 1 ch. 12) and their RoCEv2
//! framing.
//!
//! Style follows smoltcp: every message has a zero-copy *view*
//! (`XxxPacket<T: AsRef<[u8]>>`) with one accessor per field, and a typed
//! *representation* (`Xxx`) with `parse` and `emit`. Parsing untrusted bytes
//! never panics: every failure is a [`Error`].
//!
//! Field positions are given as (byte offset in the MAD, bit offset from the
//! most significant bit of that byte, width in bits), exactly the IBTA
//! "Byte[Bit]" notation, so each table line can be checked against the spec.
//! Each CM attribute is one such table ([`field`]'s `cm_message!`), from
//! which its view, representation and decoder field list are generated.

pub mod cm;
pub mod field;
pub mod mad;
pub mod roce;

use core::fmt;

pub use cm::*;
pub use field::{FieldRef, FieldValue, Show};
pub use mad::*;

/// Size of every CM MAD (header + attribute data).
pub const MAD_LEN: usize = 256;
/// Size of the MAD common header.
pub const MAD_HDR_LEN: usize = 24;

/// Why bytes could not be interpreted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// The buffer is shorter than the structure needs.
    Truncated { needed: usize, got: usize },
    /// MAD BaseVersion is not 1.
    BadBaseVersion(u8),
    /// MAD MgmtClass is not 0x07 (CM).
    BadMgmtClass(u8),
    /// MAD ClassVersion is not 2.
    BadClassVersion(u8),
    /// The method is not valid for the attribute (CM messages must be Send).
    BadMethod { attr: u16, method: u8 },
    /// AttributeID is not a CM attribute.
    UnknownAttribute(u16),
    /// A field holds a value the specification reserves.
    Reserved { field: &'static str, value: u64 },
    /// A RoCEv2/transport framing problem (BTH, DETH, IP, UDP).
    Framing(&'static str),
    /// The invariant CRC does not match.
    BadIcrc { expected: u32, found: u32 },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Error::Truncated { needed, got } => {
                write!(f, "truncated: need {needed} bytes, have {got}")
            }
            Error::BadBaseVersion(v) => write!(f, "MAD base version {v} (expected 1)"),
            Error::BadMgmtClass(v) => write!(f, "management class {v:#04x} (expected 0x07 CM)"),
            Error::BadClassVersion(v) => write!(f, "CM class version {v} (expected 2)"),
            Error::BadMethod { attr, method } => {
                write!(
                    f,
                    "method {method:#04x} not valid for attribute {attr:#06x}"
                )
            }
            Error::UnknownAttribute(a) => write!(f, "unknown CM attribute {a:#06x}"),
            Error::Reserved { field, value } => write!(f, "reserved value {value} in {field}"),
            Error::Framing(what) => write!(f, "framing: {what}"),
            Error::BadIcrc { expected, found } => {
                write!(
                    f,
                    "ICRC mismatch: computed {expected:#010x}, packet has {found:#010x}"
                )
            }
        }
    }
}

impl std::error::Error for Error {}

pub type Result<T> = core::result::Result<T, Error>;

/// Checks that `buf` holds at least `needed` bytes.
#[inline]
pub fn check_len(buf: &[u8], needed: usize) -> Result<()> {
    if buf.len() < needed {
        Err(Error::Truncated {
            needed,
            got: buf.len(),
        })
    } else {
        Ok(())
    }
}

/// Reads a big-endian bit field: `width` bits starting `bit` bits below the
/// most significant bit of byte `off`. `bit + width` must not exceed 64.
///
/// Callers guarantee `buf` is long enough (views check the length once).
#[inline(always)]
pub fn get_bits(buf: &[u8], off: usize, bit: u32, width: u32) -> u64 {
    debug_assert!(bit < 8 && width >= 1 && bit + width <= 64);
    let nbytes = (bit + width).div_ceil(8) as usize;
    let acc = read_be(&buf[off..off + nbytes]);
    let shift = nbytes as u32 * 8 - bit - width;
    let mask = if width == 64 {
        u64::MAX
    } else {
        (1u64 << width) - 1
    };
    (acc >> shift) & mask
}

/// Big-endian integer of 1..=8 bytes (whole-word loads for the common sizes).
#[inline(always)]
fn read_be(b: &[u8]) -> u64 {
    match b.len() {
        1 => b[0] as u64,
        2 => u16::from_be_bytes([b[0], b[1]]) as u64,
        4 => u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as u64,
        8 => u64::from_be_bytes(b.try_into().unwrap()),
        _ => b.iter().fold(0u64, |acc, &x| (acc << 8) | x as u64),
    }
}

/// Writes a big-endian bit field (see [`get_bits`]); bits of `value` above
/// `width` are ignored and neighbouring bits are preserved.
#[inline(always)]
pub fn set_bits(buf: &mut [u8], off: usize, bit: u32, width: u32, value: u64) {
    debug_assert!(bit < 8 && width >= 1 && bit + width <= 64);
    let nbytes = (bit + width).div_ceil(8) as usize;
    let shift = nbytes as u32 * 8 - bit - width;
    let mask = if width == 64 {
        u64::MAX
    } else {
        (1u64 << width) - 1
    };
    let bytes = &mut buf[off..off + nbytes];
    let mut acc = if bit == 0 && width as usize == nbytes * 8 {
        0
    } else {
        read_be(bytes)
    };
    acc = (acc & !(mask << shift)) | ((value & mask) << shift);
    for (i, b) in bytes.iter_mut().enumerate() {
        *b = (acc >> ((nbytes - 1 - i) * 8)) as u8;
    }
}

/// Declares one getter/setter pair per field of a view type.
macro_rules! view_fields {
    ($view:ident { $( $(#[$meta:meta])* $get:ident, $set:ident : $ty:ty = ($off:expr, $bit:expr, $width:expr); )* }) => {
        impl<T: AsRef<[u8]>> $view<T> {
            $( $(#[$meta])* #[inline] pub fn $get(&self) -> $ty {
                $crate::wire::get_bits(self.buffer.as_ref(), $off, $bit, $width) as $ty
            } )*
        }
        impl<T: AsRef<[u8]> + AsMut<[u8]>> $view<T> {
            $( #[inline] pub fn $set(&mut self, value: $ty) {
                $crate::wire::set_bits(self.buffer.as_mut(), $off, $bit, $width, value as u64)
            } )*
        }
    };
}
pub(crate) use view_fields;

/// A 128-bit InfiniBand GID. RoCE GIDs are IPv6 addresses (IPv4-mapped for
/// IPv4), so the text form is IPv6 text.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    pub const ZERO: Gid = Gid([0; 16]);

    /// The link-local GID `fe80::<lid>` that stands for an InfiniBand end
    /// known only by its LID (a MAD without GRH).
    pub fn from_lid(lid: u16) -> Gid {
        let mut g = [0u8; 16];
        g[0] = 0xfe;
        g[1] = 0x80;
        g[14..].copy_from_slice(&lid.to_be_bytes());
        Gid(g)
    }

    pub fn subnet_prefix(&self) -> u64 {
        u64::from_be_bytes(self.0[0..8].try_into().unwrap())
    }
    pub fn interface_id(&self) -> u64 {
        u64::from_be_bytes(self.0[8..16].try_into().unwrap())
    }
    pub fn is_zero(&self) -> bool {
        self.0 == [0; 16]
    }
    /// The IPv4 address, when this is an IPv4-mapped GID (`::ffff:a.b.c.d`).
    pub fn to_ipv4(&self) -> Option<std::net::Ipv4Addr> {
        std::net::Ipv6Addr::from(self.0).to_ipv4_mapped()
    }
    pub fn to_ip(&self) -> std::net::IpAddr {
        match self.to_ipv4() {
            Some(v4) => std::net::IpAddr::V4(v4),
            None => std::net::IpAddr::V6(std::net::Ipv6Addr::from(self.0)),
        }
    }
}

impl From<std::net::IpAddr> for Gid {
    fn from(ip: std::net::IpAddr) -> Gid {
        match ip {
            std::net::IpAddr::V4(v4) => Gid(v4.to_ipv6_mapped().octets()),
            std::net::IpAddr::V6(v6) => Gid(v6.octets()),
        }
    }
}

impl From<[u8; 16]> for Gid {
    fn from(b: [u8; 16]) -> Gid {
        Gid(b)
    }
}

impl fmt::Display for Gid {
    /// IPv6 text; IPv4-mapped GIDs print as `::ffff:a.b.c.d`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", std::net::Ipv6Addr::from(self.0))
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gid({self})")
    }
}

impl std::str::FromStr for Gid {
    type Err = std::net::AddrParseError;
    fn from_str(s: &str) -> core::result::Result<Gid, Self::Err> {
        s.parse::<std::net::IpAddr>().map(Gid::from)
    }
}

/// Lowercase hex of a byte area.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 15) as usize] as char);
    }
    s
}

/// Single facts read from a raw MAD (routing keys, counters, areas).
pub mod peek;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_roundtrip_and_neighbours() {
        let mut b = [0u8; 16];
        set_bits(&mut b, 3, 0, 5, 20);
        assert_eq!(b[3], 0xa0);
        set_bits(&mut b, 3, 5, 2, 3);
        assert_eq!(b[3], 0xa6);
        set_bits(&mut b, 3, 7, 1, 1);
        assert_eq!(b[3], 0xa7);
        assert_eq!(get_bits(&b, 3, 0, 5), 20);
        assert_eq!(get_bits(&b, 3, 5, 2), 3);
        // 20-bit flow label at the top of a 32-bit word, rate in the low 6 bits.
        set_bits(&mut b, 8, 0, 20, 0x43a62);
        set_bits(&mut b, 11, 2, 6, 0x3f);
        assert_eq!(&b[8..12], &[0x43, 0xa6, 0x20, 0x3f]);
        assert_eq!(get_bits(&b, 8, 0, 20), 0x43a62);
        set_bits(&mut b, 0, 0, 64, 0x0102030405060708);
        assert_eq!(get_bits(&b, 0, 0, 64), 0x0102030405060708);
        // Value bits above the width are ignored.
        set_bits(&mut b, 12, 0, 4, 0xff);
        assert_eq!(b[12], 0xf0);
    }

    #[test]
    fn gid_text() {
        let g: Gid = "10.77.0.2".parse().unwrap();
        assert_eq!(g.to_string(), "::ffff:10.77.0.2");
        assert_eq!(g.to_ipv4().unwrap().to_string(), "10.77.0.2");
        let g6: Gid = "fe80::5054:ff:fe77:1".parse().unwrap();
        assert_eq!(g6.to_string(), "fe80::5054:ff:fe77:1");
        assert_eq!(g6.subnet_prefix(), 0xfe80_0000_0000_0000);
    }
}
