//! The parser properties, shared by `tests/fuzz_smoke.rs` and the
//! `wire_mad`, `roce_frame` and `capture` fuzz targets (included with
//! `#[path]`). Each function takes arbitrary bytes, must not panic except
//! through a failed assertion, and asserts what must hold.

#![allow(dead_code)]

use ibcm::capture;
use ibcm::wire::roce::{self, GSI_PAYLOAD_LEN, IcrcInput, UDP_HDR_LEN};
use ibcm::wire::{CmMad, CmMsg, MadHeader};
use std::net::{Ipv4Addr, Ipv6Addr};

/// `CmMad::parse` on arbitrary bytes; a parsed MAD survives emit → parse
/// unchanged, emit is a fixed point, and emit only keeps bits that were
/// in the input (reserved bits are zeroed, nothing is invented).
pub fn check_wire_mad(data: &[u8]) {
    if let Ok(h) = MadHeader::parse(data) {
        let _ = h.check_cm();
        let mut out = [0u8; 24];
        h.emit(&mut out);
        assert_eq!(MadHeader::parse(&out), Ok(h), "MAD header round trip");
    }
    let Ok(m) = CmMad::parse(data) else { return };
    let b = m.to_bytes();
    let m2 = match CmMad::parse(&b) {
        Ok(m2) => m2,
        Err(e) => panic!("emit of a parsed MAD does not parse: {e}\n{m:?}"),
    };
    assert_eq!(m, m2, "parse(emit(parse(x))) != parse(x)");
    assert_eq!(m2.to_bytes(), b, "emit is not a fixed point");
    for (i, (&e, &d)) in b.iter().zip(data).enumerate() {
        assert_eq!(
            e & !d,
            0,
            "emit set bits at byte {i} that the input did not have"
        );
    }
    // A longer buffer gets the same 256 bytes.
    let mut long = [0xa5u8; 300];
    m.emit(&mut long);
    assert_eq!(&long[..256], &b[..]);
    assert_eq!(&long[256..], &[0xa5u8; 44][..]);
    // What `ibcm decode` does with a parsed message.
    let _ = m.msg.name();
    let _ = m.msg.private_data();
    let _ = ibcm::decode::message_rows(&m.msg);
    let _ = ibcm::decode::attr_label(m.msg.attr_id());
    if let CmMsg::Req(r) = &m.msg {
        let _ = ibcm::decode::rdma_cm_header(r.service_id, &r.private_data);
        let _ = r.has_alternate();
    }
}

/// `roce::parse_udp_payload` and the ICRC helpers on arbitrary bytes.
pub fn check_roce(data: &[u8]) {
    if let Ok(g) = roce::parse_udp_payload(data) {
        assert_eq!(data.len(), GSI_PAYLOAD_LEN);
        assert_eq!(&g.mad[..], &data[20..276]);
        let owned = g.to_owned();
        // Re-emit behind made-up IPv4 and IPv6 headers: the result parses
        // to the same datagram and its ICRC verifies.
        let a = Ipv4Addr::from(u32::from_be_bytes(data[20..24].try_into().unwrap()));
        let b = Ipv4Addr::from(u32::from_be_bytes(data[24..28].try_into().unwrap()));
        let sp = u16::from_be_bytes([data[28], data[29]]);
        for icrc in [
            IcrcInput::linux_ipv4(a, b, sp, roce::ROCEV2_UDP_PORT),
            IcrcInput::linux_ipv6(
                a.to_ipv6_mapped(),
                Ipv6Addr::from(<[u8; 16]>::try_from(&g.mad[..16]).unwrap()),
                sp,
                roce::ROCEV2_UDP_PORT,
            ),
        ] {
            let mut out = [0u8; GSI_PAYLOAD_LEN];
            owned.emit(icrc, &mut out);
            let again = roce::parse_udp_payload(&out).expect("emitted GSI datagram must parse");
            assert_eq!(again.to_owned(), owned, "GSI datagram round trip");
            let udp = icrc.udp_header();
            let ok = match (icrc.ipv4_header(), icrc.ipv6_header()) {
                (Some(h), _) => roce::verify_icrc_ipv4(&h, &udp, &out),
                (_, Some(h)) => roce::verify_icrc_ipv6(&h, &udp, &out),
                _ => unreachable!(),
            };
            assert_eq!(ok, Ok(()), "emitted ICRC does not verify");
            assert_eq!(again.icrc, icrc.icrc(&out[..GSI_PAYLOAD_LEN - 4]));
            // A flipped MAD bit (never masked) breaks the ICRC.
            let mut bad = out;
            bad[20 + (data[0] as usize % 256)] ^= 1 << (data[1] % 8);
            let res = match (icrc.ipv4_header(), icrc.ipv6_header()) {
                (Some(h), _) => roce::verify_icrc_ipv4(&h, &udp, &bad),
                (_, Some(h)) => roce::verify_icrc_ipv6(&h, &udp, &bad),
                _ => unreachable!(),
            };
            assert!(res.is_err(), "ICRC missed a one-bit error");
        }
    }
    // The ICRC helpers on arbitrary splits of the input into IP header,
    // UDP header and payload: no panic, and the streaming ICRC equals the
    // CRC-32 of the documented pseudo-header followed by the masked BTH.
    if data.len() >= 2 {
        let cut = 2 + (data[0] as usize % 64).min(data.len() - 2);
        let ip = &data[2..cut];
        let rest = &data[cut..];
        let mut udp = [0u8; UDP_HDR_LEN];
        let n = rest.len().min(UDP_HDR_LEN);
        udp[..n].copy_from_slice(&rest[..n]);
        let payload = &rest[n..];
        let v6 = data[1] & 1 == 1;
        let _ = roce::verify_icrc_ipv4(ip, &udp, payload);
        let _ = roce::verify_icrc_ipv6(ip, &udp, payload);
        let streaming = if v6 {
            roce::icrc_ipv6(ip, &udp, payload)
        } else {
            roce::icrc_ipv4(ip, &udp, payload)
        };
        let mut whole = if v6 {
            roce::icrc_pseudo_header_ipv6(ip, &udp)
        } else {
            roce::icrc_pseudo_header_ipv4(ip, &udp)
        };
        let start = whole.len();
        whole.extend_from_slice(payload);
        roce::mask_bth(&mut whole[start..]);
        assert_eq!(
            streaming,
            roce::crc32(&whole),
            "ICRC and pseudo-header CRC differ"
        );
        // Incremental CRC at any split equals one-shot.
        let split = data[1] as usize % (data.len() + 1);
        let (x, y) = data.split_at(split);
        assert_eq!(
            roce::Crc32::new().update(x).update(y).finish(),
            roce::crc32(data)
        );
    }
    if data.len() >= 20 {
        let mut h: [u8; 20] = data[..20].try_into().unwrap();
        h[10] = 0;
        h[11] = 0;
        let sum = roce::ipv4_checksum(&h);
        h[10..12].copy_from_slice(&sum.to_be_bytes());
        assert_eq!(roce::ipv4_checksum(&h), 0, "IPv4 checksum does not verify");
    }
    let _ = roce::ipv4_checksum(data);
}

/// `capture::read_bytes` (pcap / pcapng) on arbitrary bytes: no panic, the
/// documented packet accounting holds, and the record reader stops after
/// its first error.
pub fn check_capture(data: &[u8]) {
    let read = capture::read_bytes(data);
    if let Ok(cap) = &read {
        assert_eq!(
            cap.frames.len() as u64 + cap.skipped.total(),
            cap.total_packets,
            "frames + skipped != packets"
        );
        let _ = cap.skipped.to_string();
        for f in &cap.frames {
            assert_eq!(f.mad[1], 0x07, "a reported frame is not a CM MAD");
            if let Ok(m) = CmMad::parse(&f.mad) {
                let _ = ibcm::decode::message_rows(&m.msg);
            }
        }
    }
    if let Ok(r) = capture::Reader::new(data) {
        let _ = r.format();
        let mut errors = 0;
        let mut packets = 0u64;
        let mut last_frame = 0;
        for p in r {
            match p {
                Ok(p) => {
                    packets += 1;
                    assert_eq!(p.frame, last_frame + 1, "frame numbers skip");
                    last_frame = p.frame;
                    assert!(p.offset < data.len() as u64);
                    if let Ok(f) = capture::decode_packet(&p) {
                        assert_eq!(f.frame, p.frame);
                    }
                }
                Err(e) => {
                    errors += 1;
                    let _ = e.to_string();
                }
            }
        }
        assert!(errors <= 1, "reader went on after an error");
        match &read {
            Ok(cap) => {
                assert_eq!(errors, 0);
                assert_eq!(cap.total_packets, packets);
            }
            Err(_) => assert_eq!(errors, 1, "read_bytes failed but the reader did not"),
        }
    }
}
