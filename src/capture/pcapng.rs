//! pcapng files (draft-ietf-opsawg-pcapng): a sequence of sections, each a
//! Section Header Block (whose byte-order magic sets the byte order of the
//! section) followed by Interface Description Blocks and packet blocks.
//!
//! Read: SHB (version 1.x, any number of sections, either byte order), IDB
//! (link type, snaplen, `if_tsresol`, `if_tsoffset`), EPB, SPB (interface 0,
//! no timestamp: reported as 0) and the obsolete Packet Block. Every other
//! block type (NRB, ISB, DSB, custom, unknown) is skipped. Block lengths must
//! be multiples of 4 and the trailing copy must match; options are walked
//! in IDBs (`if_name`, `if_tsresol`, `if_tsoffset`) and EPBs (`epb_flags`:
//! the direction), and their values must stay inside the block. Section
//! lengths in the SHB are ignored (blocks are read in order).

use super::{CaptureError, Direction, Endian, RawRecord};

const BT_SHB: u32 = 0x0A0D_0D0A;
const BT_IDB: u32 = 0x0000_0001;
const BT_PB: u32 = 0x0000_0002;
const BT_SPB: u32 = 0x0000_0003;
const BT_EPB: u32 = 0x0000_0006;
const BYTE_ORDER_MAGIC: u32 = 0x1A2B_3C4D;

const OPT_END: u16 = 0;
const OPT_IF_NAME: u16 = 2;
const OPT_EPB_FLAGS: u16 = 2;
const OPT_IF_TSRESOL: u16 = 9;
const OPT_IF_TSOFFSET: u16 = 14;

pub(crate) fn is_pcapng(magic: [u8; 4]) -> bool {
    u32::from_le_bytes(magic) == BT_SHB
}

#[derive(Debug, Clone, Copy)]
struct Interface<'a> {
    /// `if_name`, when present and UTF-8.
    name: Option<&'a str>,
    link_type: u32,
    snaplen: u32,
    /// `if_tsresol`: bit 7 clear = 10^-n s, set = 2^-n s; default 6 (µs).
    tsresol: u8,
    /// `if_tsoffset` in seconds.
    tsoffset: i64,
}

#[derive(Debug, Clone)]
pub(crate) struct PcapngReader<'a> {
    data: &'a [u8],
    off: usize,
    endian: Endian,
    interfaces: Vec<Interface<'a>>,
}

/// Converts a timestamp in interface units to nanoseconds since the epoch
/// (saturating; resolutions finer than 1 ns are truncated).
fn ts_to_nanos(ts: u64, tsresol: u8, tsoffset: i64) -> u64 {
    let n = (tsresol & 0x7f) as u32;
    let ts = ts as u128;
    let nanos: u128 = if tsresol & 0x80 != 0 {
        (ts * 1_000_000_000) >> n
    } else if n <= 9 {
        ts * 10u128.pow(9 - n)
    } else {
        match 10u128.checked_pow(n - 9) {
            Some(div) => ts / div,
            None => 0,
        }
    };
    let nanos = nanos.min(u64::MAX as u128) as i128 + tsoffset as i128 * 1_000_000_000;
    nanos.clamp(0, u64::MAX as i128) as u64
}

impl<'a> PcapngReader<'a> {
    pub fn new(data: &'a [u8]) -> Result<Self, CaptureError> {
        // The first block must be an SHB; reading it sets the byte order.
        let magic = data
            .get(..4)
            .and_then(|m| m.try_into().ok())
            .map(u32::from_le_bytes);
        if magic != Some(BT_SHB) {
            return Err(CaptureError::new(
                0,
                "pcapng file does not start with a Section Header Block",
            ));
        }
        Ok(PcapngReader {
            data,
            off: 0,
            endian: Endian { big: false },
            interfaces: Vec::new(),
        })
    }

    /// Reads blocks until the next packet record (or the end of the file).
    pub fn next_record(&mut self) -> Result<Option<RawRecord<'a>>, CaptureError> {
        loop {
            let off = self.off;
            let left = self.data.len() - off;
            if left == 0 {
                return Ok(None);
            }
            if left < 12 {
                return Err(CaptureError::new(
                    off,
                    format!("pcapng block header needs 12 bytes, only {left} left in the file"),
                ));
            }
            let le_type = u32::from_le_bytes(self.data[off..off + 4].try_into().unwrap_or([0; 4]));
            if le_type == BT_SHB {
                self.endian = self.section_byte_order(off)?;
            }
            let e = self.endian;
            let btype = e.u32(self.data, off).unwrap_or(0);
            let total = e.u32(self.data, off + 4).unwrap_or(0) as usize;
            if total < 12 {
                return Err(CaptureError::new(
                    off,
                    format!(
                        "pcapng block (type {btype:#010x}) has length {total}, less than the minimum 12"
                    ),
                ));
            }
            if total % 4 != 0 {
                return Err(CaptureError::new(
                    off,
                    format!(
                        "pcapng block (type {btype:#010x}) length {total} is not a multiple of 4"
                    ),
                ));
            }
            if total > left {
                return Err(CaptureError::new(
                    off,
                    format!(
                        "pcapng block (type {btype:#010x}) claims length {total} beyond end of file ({left} bytes left)"
                    ),
                ));
            }
            let trailer = e.u32(self.data, off + total - 4).unwrap_or(0) as usize;
            if trailer != total {
                return Err(CaptureError::new(
                    off,
                    format!(
                        "pcapng block (type {btype:#010x}) length {total} does not match its trailing length {trailer}"
                    ),
                ));
            }
            let body = &self.data[off + 8..off + total - 4];
            self.off = off + total;
            match btype {
                BT_SHB => self.section_header(off, body)?,
                BT_IDB => self.interface(off, body)?,
                BT_EPB => return self.enhanced_packet(off, body).map(Some),
                BT_SPB => return self.simple_packet(off, body).map(Some),
                BT_PB => return self.obsolete_packet(off, body).map(Some),
                _ => {} // NRB, ISB, DSB, custom and unknown blocks
            }
        }
    }

    fn section_byte_order(&self, off: usize) -> Result<Endian, CaptureError> {
        let raw = self
            .data
            .get(off + 8..off + 12)
            .and_then(|m| m.try_into().ok());
        let Some(raw) = raw else {
            return Err(CaptureError::new(
                off,
                "Section Header Block too short for its byte-order magic",
            ));
        };
        let raw: [u8; 4] = raw;
        if u32::from_le_bytes(raw) == BYTE_ORDER_MAGIC {
            Ok(Endian { big: false })
        } else if u32::from_be_bytes(raw) == BYTE_ORDER_MAGIC {
            Ok(Endian { big: true })
        } else {
            Err(CaptureError::new(
                off + 8,
                format!(
                    "Section Header Block has a bad byte-order magic {:02x}{:02x}{:02x}{:02x} (expected 1a2b3c4d either way round)",
                    raw[0], raw[1], raw[2], raw[3]
                ),
            ))
        }
    }

    fn section_header(&mut self, off: usize, body: &[u8]) -> Result<(), CaptureError> {
        // magic(4) major(2) minor(2) section length(8) options
        need(off, "Section Header Block", body, 16)?;
        let major = self.endian.u16(body, 4).unwrap_or(0);
        if major != 1 {
            return Err(CaptureError::new(
                off,
                format!("unsupported pcapng major version {major} (expected 1)"),
            ));
        }
        self.interfaces.clear();
        Ok(())
    }

    /// Walks the options in `opts` (a block body from its options on),
    /// calling `f(code, value)` for each until `opt_endofopt` or the end.
    fn options(
        &self,
        off: usize,
        what: &str,
        opts: &'a [u8],
        mut f: impl FnMut(u16, &'a [u8]),
    ) -> Result<(), CaptureError> {
        let e = self.endian;
        let mut o = 0;
        while o < opts.len() {
            let (Some(code), Some(len)) = (e.u16(opts, o), e.u16(opts, o + 2)) else {
                return Err(CaptureError::new(
                    off,
                    format!("{what} option header cut at byte {o} of its options"),
                ));
            };
            if code == OPT_END {
                break;
            }
            let len = len as usize;
            let vstart = o + 4;
            let Some(value) = opts.get(vstart..vstart + len) else {
                return Err(CaptureError::new(
                    off,
                    format!("{what} option {code} of length {len} runs past the end of the block"),
                ));
            };
            f(code, value);
            o = vstart + len.div_ceil(4) * 4;
        }
        Ok(())
    }

    /// The `if_name` of interface `id` of the current section.
    pub fn interface_name(&self, id: u32) -> Option<&'a str> {
        self.interfaces.get(id as usize).and_then(|i| i.name)
    }

    fn interface(&mut self, off: usize, body: &'a [u8]) -> Result<(), CaptureError> {
        // link type(2) reserved(2) snaplen(4) options
        let e = self.endian;
        need(off, "Interface Description Block", body, 8)?;
        let mut ifc = Interface {
            name: None,
            link_type: e.u16(body, 0).unwrap_or(0) as u32,
            snaplen: e.u32(body, 4).unwrap_or(0),
            tsresol: 6,
            tsoffset: 0,
        };
        self.options(off, "IDB", &body[8..], |code, value| match code {
            OPT_IF_NAME => ifc.name = std::str::from_utf8(value).ok(),
            OPT_IF_TSRESOL if !value.is_empty() => ifc.tsresol = value[0],
            OPT_IF_TSOFFSET if value.len() >= 8 => {
                ifc.tsoffset = e.u64(value, 0).unwrap_or(0) as i64
            }
            _ => {}
        })?;
        self.interfaces.push(ifc);
        Ok(())
    }

    fn iface(&self, off: usize, what: &str, id: u32) -> Result<Interface<'a>, CaptureError> {
        self.interfaces.get(id as usize).copied().ok_or_else(|| {
            CaptureError::new(
                off,
                format!(
                    "{what} refers to interface {id} but this section has {} Interface Description Block(s)",
                    self.interfaces.len()
                ),
            )
        })
    }

    /// An EPB or PB: after the interface ID (read by the caller, whose
    /// field widths differ), ts high(4) ts low(4) caplen(4) origlen(4) at
    /// bytes 4..20, then the data; `direction` is left to the caller.
    fn packet(
        &self,
        off: usize,
        what: &str,
        body: &'a [u8],
        iface: u32,
    ) -> Result<RawRecord<'a>, CaptureError> {
        need(off, what, body, 20)?;
        let ifc = self.iface(off, what, iface)?;
        let rd = |o| self.endian.u32(body, o).unwrap_or(0);
        let ts = ((rd(4) as u64) << 32) | rd(8) as u64;
        let caplen = rd(12);
        let room = body.len() - 20;
        if caplen as usize > room {
            return Err(CaptureError::new(
                off,
                format!("{what} claims {caplen} captured bytes but the block holds only {room}"),
            ));
        }
        Ok(RawRecord {
            offset: off,
            link_type: ifc.link_type,
            ts_nanos: ts_to_nanos(ts, ifc.tsresol, ifc.tsoffset),
            orig_len: rd(16),
            data: &body[20..20 + caplen as usize],
            interface: iface,
            direction: None,
        })
    }

    fn enhanced_packet(&self, off: usize, body: &'a [u8]) -> Result<RawRecord<'a>, CaptureError> {
        // interface(4) ts high(4) ts low(4) caplen(4) origlen(4) data options
        const WHAT: &str = "Enhanced Packet Block";
        let e = self.endian;
        let mut rec = self.packet(off, WHAT, body, e.u32(body, 0).unwrap_or(0))?;
        let opts = &body[(20 + rec.data.len().div_ceil(4) * 4).min(body.len())..];
        // Lenient: a malformed option list only loses the direction.
        let _ = self.options(off, WHAT, opts, |code, value| {
            if code == OPT_EPB_FLAGS && value.len() >= 4 {
                rec.direction = Direction::from_epb_flags(e.u32(value, 0).unwrap_or(0));
            }
        });
        Ok(rec)
    }

    fn obsolete_packet(&self, off: usize, body: &'a [u8]) -> Result<RawRecord<'a>, CaptureError> {
        // interface(2) drops(2) ts high(4) ts low(4) caplen(4) origlen(4) data options
        let iface = self.endian.u16(body, 0).unwrap_or(0) as u32;
        self.packet(off, "Packet Block", body, iface)
    }

    fn simple_packet(&self, off: usize, body: &'a [u8]) -> Result<RawRecord<'a>, CaptureError> {
        // original length(4) data; captured = min(orig, room, snaplen)
        const WHAT: &str = "Simple Packet Block";
        let ifc = self.iface(off, WHAT, 0)?;
        need(off, WHAT, body, 4)?;
        let orig = self.endian.u32(body, 0).unwrap_or(0);
        let mut caplen = (orig as usize).min(body.len() - 4);
        if ifc.snaplen != 0 {
            caplen = caplen.min(ifc.snaplen as usize);
        }
        Ok(RawRecord {
            offset: off,
            link_type: ifc.link_type,
            ts_nanos: 0,
            orig_len: orig,
            data: &body[4..4 + caplen],
            interface: 0,
            direction: None,
        })
    }
}

/// Fails unless a block body of `what` holds its fixed part of `n` bytes.
fn need(off: usize, what: &str, body: &[u8], n: usize) -> Result<(), CaptureError> {
    if body.len() < n {
        return Err(CaptureError::new(
            off,
            format!("{what} body is {} bytes, needs at least {n}", body.len()),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::ts_to_nanos;

    #[test]
    fn timestamp_resolutions() {
        assert_eq!(ts_to_nanos(1_500_000, 6, 0), 1_500_000_000);
        assert_eq!(ts_to_nanos(1_500_000_000, 9, 0), 1_500_000_000);
        assert_eq!(ts_to_nanos(15, 1, 0), 1_500_000_000);
        assert_eq!(ts_to_nanos(1_500_000_000_000, 12, 0), 1_500_000_000);
        assert_eq!(ts_to_nanos(3 << 29, 0x80 | 30, 0), 1_500_000_000);
        assert_eq!(ts_to_nanos(1 << 20, 0x80 | 20, 2), 3_000_000_000);
        assert_eq!(ts_to_nanos(5, 6, -1), 0);
        assert_eq!(ts_to_nanos(u64::MAX, 0, 0), u64::MAX);
        assert_eq!(ts_to_nanos(u64::MAX, 127, 0), 0);
        assert_eq!(ts_to_nanos(u64::MAX, 0xff, i64::MAX), u64::MAX);
    }
}
