//! The 24-byte MAD common header (IBTA Vol 1 13.4.3) as the CM uses it.

use super::field::{wire_struct, wire_view};
use super::{Error, MAD_HDR_LEN, Result, view_fields};

/// MAD BaseVersion used by every CM MAD.
pub const BASE_VERSION: u8 = 1;
/// Management class of the Communication Manager.
pub const MGMT_CLASS_CM: u8 = 0x07;
/// CM class version (IBA 1.2 and later).
pub const CM_CLASS_VERSION: u8 = 2;

/// MAD methods (byte 3 of the header, response bit included).
pub mod method {
    pub const GET: u8 = 0x01;
    pub const SET: u8 = 0x02;
    pub const SEND: u8 = 0x03;
    pub const TRAP: u8 = 0x05;
    pub const REPORT: u8 = 0x06;
    pub const TRAP_REPRESS: u8 = 0x07;
    pub const GET_RESP: u8 = 0x81;
    pub const REPORT_RESP: u8 = 0x86;
    /// The response bit (R) of the method byte.
    pub const RESPONSE_BIT: u8 = 0x80;

    /// Name of a method value, for humans.
    pub fn name(m: u8) -> &'static str {
        match m {
            GET => "Get",
            SET => "Set",
            SEND => "Send",
            TRAP => "Trap",
            REPORT => "Report",
            TRAP_REPRESS => "TrapRepress",
            GET_RESP => "GetResp",
            REPORT_RESP => "ReportResp",
            _ => "unknown",
        }
    }
}

/// MAD status values used by the CM (generic MAD status, IBTA 13.4.7).
pub mod status {
    pub const SUCCESS: u16 = 0x0000;
    pub const BUSY: u16 = 0x0001;
    pub const REDIRECT: u16 = 0x0002;
    pub const BAD_VERSION: u16 = 0x0004;
    pub const UNSUPPORTED_METHOD: u16 = 0x0008;
    pub const UNSUPPORTED_METHOD_ATTR: u16 = 0x000c;
    pub const INVALID_ATTR_VALUE: u16 = 0x001c;
}

/// CM attribute IDs.
pub mod attr {
    pub const CLASS_PORT_INFO: u16 = 0x0001;
    pub const REQ: u16 = 0x0010;
    pub const MRA: u16 = 0x0011;
    pub const REJ: u16 = 0x0012;
    pub const REP: u16 = 0x0013;
    pub const RTU: u16 = 0x0014;
    pub const DREQ: u16 = 0x0015;
    pub const DREP: u16 = 0x0016;
    pub const SIDR_REQ: u16 = 0x0017;
    pub const SIDR_REP: u16 = 0x0018;
    pub const LAP: u16 = 0x0019;
    pub const APR: u16 = 0x001a;

    /// Every CM attribute, in attribute-ID order.
    pub const ALL: [u16; 12] = [
        CLASS_PORT_INFO,
        REQ,
        MRA,
        REJ,
        REP,
        RTU,
        DREQ,
        DREP,
        SIDR_REQ,
        SIDR_REP,
        LAP,
        APR,
    ];

    /// The attribute's name as `ibcm decode` prints it.
    pub fn name(a: u16) -> Option<&'static str> {
        Some(match a {
            CLASS_PORT_INFO => "ClassPortInfo",
            REQ => "REQ",
            MRA => "MRA",
            REJ => "REJ",
            REP => "REP",
            RTU => "RTU",
            DREQ => "DREQ",
            DREP => "DREP",
            SIDR_REQ => "SIDR_REQ",
            SIDR_REP => "SIDR_REP",
            LAP => "LAP",
            APR => "APR",
            _ => return None,
        })
    }
}

wire_view!(
    /// Zero-copy view of a MAD common header.
    MadPacket, MAD_HDR_LEN
);

// The reserved field is not a field of the representation (zero on emit).
view_fields!(MadPacket {
    reserved, set_reserved: u16 = (18, 0, 16);
});

wire_struct! {
    /// A MAD common header as plain values (any management class).
    #[derive(Copy)]
    MadHeader, MadPacket, "MAD" {
        // The class (`check_cm`'s three fields): `ibcm decode` leaves this
        // first line out.
        [
            base_version / set_base_version: u8 = bits(0, 0, 8), "BaseVersion", Dec;
            mgmt_class / set_mgmt_class: u8 = bits(1, 0, 8), "MgmtClass", Hex;
            class_version / set_class_version: u8 = bits(2, 0, 8), "ClassVersion", Dec;
        ]
        // What `ibcm decode` shows of the header, in its JSON key order.
        [
            attr_id / set_attr_id: u16 = bits(16, 0, 16), "AttributeID", Hex;
            /// Method including the response bit.
            method / set_method: u8 = bits(3, 0, 8), "Method", Method;
            status / set_status: u16 = bits(4, 0, 16), "Status", Hex => "mad_status";
            class_specific / set_class_specific: u16 = bits(6, 0, 16), "ClassSpecific", Hex;
            tid / set_tid: u64 = bits(8, 0, 64), "TransactionID", Hex;
            attr_mod / set_attr_mod: u32 = bits(20, 0, 32), "AttributeModifier", Hex;
        ]
    }
}

impl MadHeader {
    /// Reads the header fields; checks only the length.
    pub fn parse(buf: &[u8]) -> Result<MadHeader> {
        MadHeader::parse_fields(&MadPacket::new_checked(buf)?)
    }

    /// Checks that this is a CM MAD header (base version 1, class 0x07,
    /// class version 2).
    pub fn check_cm(&self) -> Result<()> {
        if self.base_version != BASE_VERSION {
            return Err(Error::BadBaseVersion(self.base_version));
        }
        if self.mgmt_class != MGMT_CLASS_CM {
            return Err(Error::BadMgmtClass(self.mgmt_class));
        }
        if self.class_version != CM_CLASS_VERSION {
            return Err(Error::BadClassVersion(self.class_version));
        }
        Ok(())
    }

    /// Writes the header; the reserved field is zeroed.
    pub fn emit(&self, buf: &mut [u8]) {
        let mut p = MadPacket::new_unchecked(buf);
        self.emit_fields(&mut p);
        p.set_reserved(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_roundtrip() {
        let raw: [u8; 24] = [
            0x01, 0x07, 0x02, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x18, 0x57,
            0x18, 0x2e, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        ];
        let h = MadHeader::parse(&raw).unwrap();
        assert_eq!(h.tid, 0x0000_0002_1857_182e);
        assert_eq!(h.attr_id, attr::REQ);
        assert_eq!(h.method, method::SEND);
        h.check_cm().unwrap();
        let mut out = [0xffu8; 24];
        h.emit(&mut out);
        assert_eq!(out, raw);
    }

    #[test]
    fn header_errors() {
        assert_eq!(
            MadHeader::parse(&[1, 7, 2]),
            Err(Error::Truncated { needed: 24, got: 3 })
        );
        let mut raw = [0u8; 24];
        raw[0] = 1;
        raw[1] = 0x81;
        raw[2] = 2;
        assert_eq!(
            MadHeader::parse(&raw).unwrap().check_cm(),
            Err(Error::BadMgmtClass(0x81))
        );
        raw[1] = 7;
        raw[2] = 1;
        assert_eq!(
            MadHeader::parse(&raw).unwrap().check_cm(),
            Err(Error::BadClassVersion(1))
        );
    }
}
