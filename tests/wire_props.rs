//! Property tests of the CM codec: arbitrary bytes never panic the parser;
//! every valid representation survives emit → parse unchanged; emitting a
//! parsed MAD reproduces every non-reserved bit and zeroes the reserved ones,
//! whose count per attribute matches the IBTA tables.

use ibcm::wire::{CmMad, attr, method};
use proptest::prelude::*;

const CM_ATTRS: [u16; 12] = attr::ALL;

/// A 256-byte buffer with a valid CM header for `attr` and random contents.
fn mad_with_header(mut b: Vec<u8>, attr_id: u16) -> Vec<u8> {
    b.resize(256, 0);
    b[0] = 1;
    b[1] = 7;
    b[2] = 2;
    b[3] = if attr_id == attr::CLASS_PORT_INFO {
        method::GET_RESP
    } else {
        method::SEND
    };
    b[16..18].copy_from_slice(&attr_id.to_be_bytes());
    b
}

/// Bits that survive parse → emit for an attribute: the union of
/// emit(parse(all ones)) over two variants whose 2-bit message codes and
/// length fields together set every bit of those fields to one (the values
/// themselves must stay valid: code 2 and 1, length 72 and 63).
fn kept_bits(attr_id: u16) -> [u8; 256] {
    let mut kept = [0u8; 256];
    for (code, len) in [(2u8, 72u8), (1, 63)] {
        let mut b = mad_with_header(vec![0xff; 256], attr_id);
        match attr_id {
            attr::MRA => b[32] = (code << 6) | 0x3f,
            attr::REJ => {
                b[32] = (code << 6) | 0x3f;
                b[33] = (len << 1) | 1;
            }
            attr::SIDR_REP => b[29] = len,
            attr::APR => b[32] = len,
            _ => {}
        }
        for (k, e) in kept.iter_mut().zip(CmMad::parse(&b).unwrap().to_bytes()) {
            *k |= e;
        }
    }
    kept
}

#[test]
fn reserved_bit_counts_match_ibta_tables() {
    // Reserved bits in the 232-byte attribute area, counted from the tables
    // (IBTA Vol 1 tables 106-120, ClassPortInfo 13.4.8.1). The header keeps
    // only its own reserved 16 bits (bytes 18-19).
    let expected = [
        (attr::CLASS_PORT_INFO, 8 + 160 * 8),
        (attr::REQ, 8 + 32 + 6 + 3 + 3 + 6 + 3 + 2),
        (attr::MRA, 6 + 3),
        (attr::REJ, 6 + 1),
        (attr::REP, 4),
        (attr::RTU, 0),
        (attr::DREQ, 8),
        (attr::DREP, 0),
        (attr::SIDR_REQ, 16),
        // The 8-bit info lengths never reach 128 (valid values are 0..=72).
        (attr::SIDR_REP, 1),
        (attr::LAP, 32 + 3 + 32 + 4 + 2 + 3 + 3),
        (attr::APR, 16 + 1),
    ];
    for (a, reserved) in expected {
        let kept = kept_bits(a);
        let header_zero: u32 = kept[..24].iter().map(|b| b.count_zeros()).sum();
        let body_zero: u32 = kept[24..].iter().map(|b| b.count_zeros()).sum();
        assert_eq!(body_zero, reserved, "attribute {a:#06x}");
        // Method byte is 0x03/0x81, attr id is small: count only bytes 18-19.
        assert_eq!(kept[18], 0);
        assert_eq!(kept[19], 0);
        assert!(header_zero >= 16);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn arbitrary_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = CmMad::parse(&b);
        let _ = ibcm::wire::MadHeader::parse(&b);
    }

    #[test]
    fn arbitrary_body_any_attribute_never_panics(
        b in proptest::collection::vec(any::<u8>(), 256),
        attr_id in 0u16..0x20,
    ) {
        let _ = CmMad::parse(&mad_with_header(b, attr_id));
    }

    #[test]
    fn emit_parse_is_identity(
        b in proptest::collection::vec(any::<u8>(), 256),
        which in 0usize..12,
        tid in any::<u64>(),
        attr_mod in any::<u32>(),
        status in any::<u16>(),
    ) {
        let attr_id = CM_ATTRS[which];
        let mut raw = mad_with_header(b, attr_id);
        raw[4..6].copy_from_slice(&status.to_be_bytes());
        raw[8..16].copy_from_slice(&tid.to_be_bytes());
        raw[20..24].copy_from_slice(&attr_mod.to_be_bytes());
        // Arbitrary valid representation: whatever parses.
        if let Ok(x) = CmMad::parse(&raw) {
            let bytes = x.to_bytes();
            let y = CmMad::parse(&bytes).unwrap();
            prop_assert_eq!(&y, &x);
            // And emit(parse(raw)) keeps exactly the non-reserved bits.
            let kept = kept_bits(attr_id);
            for i in 24..256 {
                prop_assert_eq!(bytes[i], raw[i] & kept[i], "byte {}", i);
            }
            prop_assert_eq!(&bytes[..18], &raw[..18]);
            prop_assert_eq!(&bytes[20..24], &raw[20..24]);
        }
    }
}
