//! Classic libpcap files: a 24-byte file header, then 16-byte record headers
//! each followed by the captured bytes. Both byte orders, microsecond
//! (0xa1b2c3d4) and nanosecond (0xa1b23c4d) magics. The modified-Kuznetzov
//! variant (0xa1b2cd34) is not supported. The link type is the low 16 bits of
//! the header's network field (the upper bits carry FCS information).

use super::{CaptureError, Endian, FileFormat, RawRecord};

const MAGIC_MICRO: u32 = 0xa1b2_c3d4;
const MAGIC_NANO: u32 = 0xa1b2_3c4d;
const FILE_HDR_LEN: usize = 24;
const REC_HDR_LEN: usize = 16;

pub(crate) fn is_pcap(magic: [u8; 4]) -> bool {
    let le = u32::from_le_bytes(magic);
    let be = u32::from_be_bytes(magic);
    [le, be]
        .iter()
        .any(|&m| m == MAGIC_MICRO || m == MAGIC_NANO)
}

#[derive(Debug, Clone)]
pub(crate) struct PcapReader<'a> {
    data: &'a [u8],
    off: usize,
    endian: Endian,
    nanosecond: bool,
    link_type: u32,
}

impl<'a> PcapReader<'a> {
    pub fn new(data: &'a [u8]) -> Result<Self, CaptureError> {
        let magic: [u8; 4] = data
            .get(..4)
            .and_then(|m| m.try_into().ok())
            .ok_or_else(|| CaptureError::new(0, "file too short for a pcap magic"))?;
        let le = u32::from_le_bytes(magic);
        let endian = Endian {
            big: !(le == MAGIC_MICRO || le == MAGIC_NANO),
        };
        let m = endian.u32(data, 0).unwrap_or(0);
        if m != MAGIC_MICRO && m != MAGIC_NANO {
            return Err(CaptureError::new(0, format!("bad pcap magic {m:#010x}")));
        }
        if data.len() < FILE_HDR_LEN {
            return Err(CaptureError::new(
                0,
                format!(
                    "pcap file header needs {FILE_HDR_LEN} bytes, file has {}",
                    data.len()
                ),
            ));
        }
        let major = endian.u16(data, 4).unwrap_or(0);
        if major != 2 {
            return Err(CaptureError::new(
                4,
                format!("unsupported pcap version {major} (expected 2)"),
            ));
        }
        let network = endian.u32(data, 20).unwrap_or(0);
        Ok(PcapReader {
            data,
            off: FILE_HDR_LEN,
            endian,
            nanosecond: m == MAGIC_NANO,
            link_type: network & 0xffff,
        })
    }

    pub fn format(&self) -> FileFormat {
        FileFormat::Pcap {
            big_endian: self.endian.big,
            nanosecond: self.nanosecond,
        }
    }

    pub fn next_record(&mut self) -> Result<Option<RawRecord<'a>>, CaptureError> {
        let off = self.off;
        let left = self.data.len() - off;
        if left == 0 {
            return Ok(None);
        }
        if left < REC_HDR_LEN {
            return Err(CaptureError::new(
                off,
                format!(
                    "pcap record header needs {REC_HDR_LEN} bytes, only {left} left in the file"
                ),
            ));
        }
        let e = self.endian;
        let rd = |o: usize| e.u32(self.data, off + o).unwrap_or(0);
        let (sec, frac, incl, orig) = (rd(0), rd(4), rd(8), rd(12));
        let start = off + REC_HDR_LEN;
        let avail = self.data.len() - start;
        if incl as usize > avail {
            return Err(CaptureError::new(
                off,
                format!(
                    "pcap record claims {incl} captured bytes but only {avail} remain in the file"
                ),
            ));
        }
        let end = start + incl as usize;
        self.off = end;
        let frac_nanos = if self.nanosecond {
            frac as u64
        } else {
            (frac as u64) * 1000
        };
        Ok(Some(RawRecord {
            offset: off,
            link_type: self.link_type,
            ts_nanos: (sec as u64) * 1_000_000_000 + frac_nanos,
            orig_len: orig,
            data: &self.data[start..end],
            interface: 0,
            direction: None,
        }))
    }
}
