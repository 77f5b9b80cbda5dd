//! Connection ladders (`ibcm::ladder`) and SVG pictures (`ibcm::svg`):
//! the kernel captures in tests/vectors, a synthetic capture written here
//! (a retransmitted REQ, a REQ never answered, a stale REJ, a comm ID used
//! by two nodes, a capture that starts mid-connection), the JSON document
//! and the SVG structure (checked with a small XML parser below).

use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;

use ibcm::capture::{self, LINKTYPE_RAW, RoceFrame};
use ibcm::ladder::{self, CmState, Kind, Outcome, Repeat, Step, Summary};
use ibcm::svg;
use ibcm::wire::roce::{self, Bth, Deth, GSI_PAYLOAD_LEN, IcrcInput, ROCEV2_UDP_PORT};
use ibcm::wire::{
    CmMad, CmMsg, Drep, Dreq, Mra, MsgCode, Rej, Rep, Req, Rtu, SidrRep, SidrReq, pdata,
};

fn vector(name: &str) -> Vec<RoceFrame> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/vectors")
        .join(name);
    capture::read_file(&p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .frames
}

/// `(from, attr, repeat)` of every message.
fn sequence(s: &Summary, i: usize) -> Vec<(usize, &'static str, Repeat)> {
    s.connections[i]
        .messages
        .iter()
        .map(|m| (m.from, m.attr, m.repeat))
        .collect()
}

/// The kernel capture `file` summarized, checked to be one connection
/// whose MADs went (sender end, attribute, repeat) as `want`.
fn one_connection(file: &str, want: &[(usize, &'static str, Repeat)]) -> Summary {
    let s = ladder::summarize(&vector(file));
    assert_eq!(s.connections.len(), 1, "{file}: {}", s.to_text());
    assert_eq!(sequence(&s, 0), want, "{file}");
    s
}

/// The CM states end `side` of connection `c` went through, one per
/// message that changed it.
fn states(c: &ladder::Connection, side: usize) -> Vec<&'static str> {
    c.messages
        .iter()
        .filter_map(|m| m.states[side].map(CmState::name))
        .collect()
}

const F: Repeat = Repeat::First;

// ---------------------------------------------------------------------------
// The kernel captures

#[test]
fn rping_is_one_connection_established_then_disconnected() {
    let s = one_connection(
        "rping.pcap",
        &[
            (0, "REQ", F),
            (1, "REP", F),
            (0, "RTU", F),
            (0, "DREQ", F),
            (1, "DREP", F),
        ],
    );
    let c = &s.connections[0];
    assert_eq!(c.kind, Kind::Connection);
    assert_eq!(c.outcome, Outcome::Disconnected);
    assert!(c.established && c.opened);
    assert_eq!(c.service_id, Some(0x0000_0000_0106_1c06));
    assert_eq!(c.ends[0].ip, IpAddr::V4(Ipv4Addr::new(10, 77, 0, 2)));
    assert_eq!(c.ends[1].ip, IpAddr::V4(Ipv4Addr::new(10, 77, 0, 1)));
    assert_eq!(c.ends[0].comm_id, Some(0x2e18_5718));
    assert_eq!(c.ends[1].comm_id, Some(0xc5fb_777b));
    assert_eq!((c.ends[0].qpn, c.ends[1].qpn), (Some(0x11), Some(0x11)));
    assert_eq!(c.role(0), "active");
    // Times from tests/vectors/rping.summary.txt (µs resolution in the pcap).
    let t: Vec<u64> = c.messages.iter().map(|m| m.t_ns).collect();
    assert_eq!(t, [0, 28_763_000, 35_412_000, 50_044_000, 56_473_000]);
    assert_eq!(c.latency.req_rep, Some(28_763_000));
    assert_eq!(c.latency.rep_rtu, Some(6_649_000));
    assert_eq!(c.latency.connect, Some(35_412_000));
    assert_eq!(c.latency.dreq_drep, Some(6_429_000));
    assert_eq!(c.latency.sidr, None);
    assert_eq!((c.retransmissions, c.duplicates), (0, 0));
    assert!(c.mra_waits.is_empty());
    // States: the active side goes REQ_SENT .. TIMEWAIT.
    assert_eq!(
        states(c, 0),
        [
            "REQ_SENT",
            "REP_RCVD",
            "ESTABLISHED",
            "DREQ_SENT",
            "TIMEWAIT"
        ]
    );
    assert_eq!(s.totals.disconnected, 1);
    assert_eq!(s.totals.connections, 1);
    assert_eq!(s.mads, 5);
}

#[test]
fn ucmatose_server_disconnects() {
    let s = one_connection(
        "ucmatose.pcap",
        &[
            (0, "REQ", F),
            (1, "REP", F),
            (0, "RTU", F),
            (1, "DREQ", F),
            (0, "DREP", F),
        ],
    );
    let c = &s.connections[0];
    assert_eq!(c.outcome, Outcome::Disconnected);
    assert_eq!(
        states(c, 1),
        [
            "REQ_RCVD",
            "REP_SENT",
            "ESTABLISHED",
            "DREQ_SENT",
            "TIMEWAIT"
        ]
    );
}

#[test]
fn rej_lands_in_the_connection_of_its_req() {
    let s = one_connection("rej.pcap", &[(0, "REQ", F), (1, "REJ", F)]);
    let c = &s.connections[0];
    // The kernel's REJ of a REQ has LocalCommID 0.
    assert_eq!(c.messages[1].local_comm_id, 0);
    assert_eq!(c.messages[1].remote_comm_id, c.ends[0].comm_id.unwrap());
    assert_eq!(
        c.outcome,
        Outcome::Rejected {
            reason: 8,
            text: "invalid service ID",
            by: 1,
            message: "REQ"
        }
    );
    assert!(!c.established);
    assert_eq!(c.ends[1].comm_id, None);
    assert_eq!(c.latency, ladder::StepLatencies::default());
    assert!(s.to_text().contains("invalid service ID (8)"));
    assert_eq!(s.totals.rejected, 1);
}

#[test]
fn mra_capture_shows_the_wait_and_the_retransmitted_req() {
    let s = one_connection(
        "mra.pcap",
        &[
            (0, "REQ", F),
            (0, "REQ", Repeat::Retransmission(1)),
            (1, "MRA", F),
            (1, "REP", F),
            (0, "RTU", F),
            (0, "DREQ", F),
            (1, "DREP", F),
        ],
    );
    let c = &s.connections[0];
    assert_eq!(c.outcome, Outcome::Disconnected);
    assert_eq!((c.retransmissions, c.duplicates), (1, 0));
    assert_eq!(c.mra_waits.len(), 1);
    let w = &c.mra_waits[0];
    assert_eq!((w.message, w.service_timeout, w.frame), ("REQ", 24, 19));
    // MRA at +6.236385 s, REP at +8.759509 s.
    assert_eq!(w.waited_ns, Some(2_523_124_000));
    assert_eq!(
        c.messages[2].states,
        [Some(CmState::MraReqRcvd), Some(CmState::MraReqSent)]
    );
    // The retransmission changes no state.
    assert_eq!(c.messages[1].states, [None, None]);
    // REQ->REP counts from the first REQ.
    assert_eq!(c.latency.req_rep, Some(8_759_509_000));
    assert_eq!(s.totals.with_mra_waits, 1);
    assert_eq!(s.totals.retransmissions, 1);
    let text = s.to_text();
    assert!(text.contains("MRA wait (REQ MRAed"), "{text}");
    assert!(text.contains("A>REQ(retx) +6.232s"), "{text}");
}

#[test]
fn sidr_rej_is_a_refused_sidr_exchange() {
    let s = one_connection("sidr-rej.pcap", &[(0, "SIDR_REQ", F), (1, "SIDR_REP", F)]);
    let c = &s.connections[0];
    assert_eq!(c.kind, Kind::Sidr);
    assert_eq!(
        c.outcome,
        Outcome::SidrRejected {
            status: 1,
            text: "IB_SIDR_UNSUPPORTED"
        }
    );
    assert_eq!(c.latency.sidr, Some(9_040_000));
    assert_eq!(s.totals.sidr_rejected, 1);
}

#[test]
fn all_vectors_together() {
    let mut frames = Vec::new();
    for v in [
        "rping.pcap",
        "ucmatose.pcap",
        "rej.pcap",
        "mra.pcap",
        "sidr-rej.pcap",
    ] {
        frames.extend(vector(v));
    }
    let s = ladder::summarize(&frames);
    assert_eq!(s.connections.len(), 5, "{}", s.to_text());
    let t = s.totals;
    assert_eq!(
        (
            t.disconnected,
            t.rejected,
            t.sidr_rejected,
            t.established,
            t.timed_out
        ),
        (3, 1, 1, 0, 0)
    );
    let rr = &s.latency[0];
    assert_eq!((rr.step, rr.count), (Step::ReqRep, 3));
    // Nearest rank over {22.420 ms, 28.763 ms, 8.760 s}.
    assert_eq!(
        (rr.p50, rr.p90, rr.max),
        (28_763_000, 8_759_509_000, 8_759_509_000)
    );
    // Text: one line per connection, the totals line, the latency table.
    let text = s.to_text();
    assert_eq!(text.lines().filter(|l| l.starts_with('#')).count(), 5);
    assert!(text.contains("5 connection(s): 3 disconnected, 1 rejected, 1 sidr_rejected"));
    assert!(text.contains("REQ->REP          3"), "{text}");
}

#[test]
fn json_document() {
    let mut frames = vector("mra.pcap");
    frames.extend(vector("rej.pcap"));
    let s = ladder::summarize(&frames);
    let doc: serde_json::Value = serde_json::from_str(&s.to_json()).expect("valid JSON");
    assert_eq!(doc["mads"], 9);
    assert_eq!(doc["totals"]["connections"], 2);
    assert_eq!(doc["totals"]["disconnected"], 1);
    assert_eq!(doc["totals"]["rejected"], 1);
    assert_eq!(doc["latency"]["req_rep"]["count"], 1);
    assert_eq!(doc["latency"]["req_rep"]["p99_ns"], 8_759_509_000u64);
    let conns = doc["connections"].as_array().unwrap();
    // In time order: rej.pcap was captured before mra.pcap.
    let (rej, mra) = (&conns[0], &conns[1]);
    assert_eq!(
        (rej["index"].as_u64(), mra["index"].as_u64()),
        (Some(0), Some(1))
    );
    assert_eq!(mra["outcome"], "disconnected");
    assert_eq!(mra["service_id"], 0x0106_1c06);
    assert_eq!(mra["ends"][0]["role"], "active");
    assert_eq!(mra["ends"][0]["gid"], "::ffff:10.77.0.2");
    assert_eq!(mra["ends"][1]["comm_id"], 0x2245_43f5);
    assert_eq!(mra["mra_waits"][0]["waited_ns"], 2_523_124_000u64);
    assert_eq!(mra["latency_ns"]["sidr"], serde_json::Value::Null);
    let msgs = mra["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 7);
    assert_eq!(msgs[1]["repeat"], "retransmission");
    assert_eq!(msgs[1]["repeat_count"], 1);
    assert_eq!(msgs[2]["detail"], "REQ MRAed, service timeout 68.72 s");
    assert_eq!(msgs[2]["states"][0], "MRA_REQ_RCVD");
    assert_eq!(msgs[1]["states"][0], serde_json::Value::Null);
    assert_eq!(rej["outcome"], "rejected");
    assert_eq!(rej["reject_reason"], 8);
    assert_eq!(rej["reject_reason_text"], "invalid service ID");
    assert_eq!(rej["rejected_by"], 1);
    assert_eq!(rej["ends"][1]["comm_id"], serde_json::Value::Null);
}

// ---------------------------------------------------------------------------
// A synthetic capture

const A: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const B: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
const C: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 3);

/// A classic pcap (raw IP link) of (time ns, src, dst, MAD) packets, each a
/// RoCEv2 GSI datagram with a correct ICRC.
fn write_pcap(packets: &[(u64, Ipv4Addr, Ipv4Addr, CmMad)]) -> Vec<u8> {
    let mut o = Vec::new();
    o.extend(0xa1b2_3c4du32.to_le_bytes()); // nanosecond magic
    o.extend(2u16.to_le_bytes());
    o.extend(4u16.to_le_bytes());
    o.extend([0u8; 8]);
    o.extend(65535u32.to_le_bytes());
    o.extend(LINKTYPE_RAW.to_le_bytes());
    for (psn, (ts, src, dst, mad)) in packets.iter().enumerate() {
        let icrc = IcrcInput::linux_ipv4(*src, *dst, 49152, ROCEV2_UDP_PORT);
        let mut payload = [0u8; GSI_PAYLOAD_LEN];
        roce::emit_udp_payload(
            &Bth::gsi(psn as u32),
            &Deth::GSI,
            &mad.to_bytes(),
            icrc,
            &mut payload,
        );
        let mut pkt = Vec::new();
        pkt.extend(icrc.ipv4_header().unwrap());
        pkt.extend(icrc.udp_header());
        pkt.extend(payload);
        o.extend(((ts / 1_000_000_000) as u32).to_le_bytes());
        o.extend(((ts % 1_000_000_000) as u32).to_le_bytes());
        o.extend((pkt.len() as u32).to_le_bytes());
        o.extend((pkt.len() as u32).to_le_bytes());
        o.extend(pkt);
    }
    o
}

fn req(local: u32, qpn: u32) -> CmMsg {
    CmMsg::Req(Req {
        local_comm_id: local,
        service_id: 0x1234,
        local_qpn: qpn,
        starting_psn: 77,
        local_ca_guid: 0xaa,
        ..Req::default()
    })
}
fn rep(local: u32, remote: u32, qpn: u32) -> CmMsg {
    CmMsg::Rep(Rep {
        local_comm_id: local,
        remote_comm_id: remote,
        local_qpn: qpn,
        starting_psn: 5,
        local_ca_guid: 0xbb,
        ..Rep::default()
    })
}
fn rtu(local: u32, remote: u32) -> CmMsg {
    CmMsg::Rtu(Rtu {
        local_comm_id: local,
        remote_comm_id: remote,
        ..Rtu::default()
    })
}
fn dreq(local: u32, remote: u32) -> CmMsg {
    CmMsg::Dreq(Dreq {
        local_comm_id: local,
        remote_comm_id: remote,
        remote_qpn: 0,
        ..Dreq::default()
    })
}
fn drep(local: u32, remote: u32) -> CmMsg {
    CmMsg::Drep(Drep {
        local_comm_id: local,
        remote_comm_id: remote,
        ..Drep::default()
    })
}
fn rej(local: u32, remote: u32, reason: u16) -> CmMsg {
    CmMsg::Rej(Rej {
        local_comm_id: local,
        remote_comm_id: remote,
        message_rejected: MsgCode::Req,
        ari_length: 0,
        reason,
        ari: [0; pdata::REJ_ARI],
        private_data: [0; pdata::REJ],
    })
}
fn mra(local: u32, remote: u32) -> CmMsg {
    CmMsg::Mra(Mra {
        local_comm_id: local,
        remote_comm_id: remote,
        message_mraed: MsgCode::Req,
        service_timeout: 20,
        private_data: [0; pdata::MRA],
    })
}
fn sidr_req(id: u32) -> CmMsg {
    CmMsg::SidrReq(SidrReq {
        request_id: id,
        pkey: 0xffff,
        service_id: 0x99,
        private_data: [0; pdata::SIDR_REQ],
    })
}
fn sidr_rep(id: u32, status: u8) -> CmMsg {
    CmMsg::SidrRep(SidrRep {
        request_id: id,
        status,
        info_length: 0,
        vendor_id: 0,
        qpn: 0x42,
        service_id: 0x99,
        qkey: 0,
        info: [0; pdata::SIDR_REP_INFO],
        private_data: [0; pdata::SIDR_REP],
    })
}

/// A RoCEv2 frame of `msg` at `ms` milliseconds (after 1 s), UDP 49152 to
/// 4791, with its ICRC taken as correct.
fn frame(n: u64, ms: u64, src: [u8; 4], dst: [u8; 4], tid: u64, msg: CmMsg) -> RoceFrame {
    RoceFrame {
        frame: n,
        ts_nanos: 1_000_000_000 + ms * 1_000_000,
        src: IpAddr::V4(Ipv4Addr::from(src)),
        dst: IpAddr::V4(Ipv4Addr::from(dst)),
        src_port: 49152,
        dst_port: 4791,
        bth: Bth::gsi(0),
        deth: Deth::GSI,
        mad: CmMad::send(tid, 0, msg).to_bytes(),
        icrc: 0,
        icrc_ok: true,
    }
}

#[test]
fn both_ends_on_one_node_are_told_apart_by_comm_id() {
    // Two CMs behind one IP address (e.g. two ports of a loopback test).
    let ip = [127, 0, 0, 1];
    let frames = [
        frame(1, 0, ip, ip, 1, req(0x10, 7)),
        frame(2, 1, ip, ip, 1, rtu(0x20, 0x10)),
        frame(3, 2, ip, ip, 2, dreq(0x10, 0x20)),
        frame(4, 3, ip, ip, 2, drep(0x20, 0x10)),
    ];
    let s = ladder::summarize(&frames);
    assert_eq!(s.connections.len(), 1, "{}", s.to_text());
    let c = &s.connections[0];
    let from: Vec<usize> = c.messages.iter().map(|m| m.from).collect();
    assert_eq!(from, [0, 1, 0, 1]);
    assert_eq!(c.ends[1].comm_id, Some(0x20));
    assert_eq!(c.outcome, Outcome::Disconnected);
    assert_eq!(c.latency.dreq_drep, Some(1_000_000));
    // No REP in the capture: no REQ->REP and no REP->RTU.
    assert_eq!((c.latency.req_rep, c.latency.rep_rtu), (None, None));
    assert_eq!(c.latency.connect, Some(1_000_000));
}

#[test]
fn late_dreq_for_an_unknown_id_and_unparsable_mads() {
    let (a, b) = ([10, 0, 0, 1], [10, 0, 0, 2]);
    let mut bad = frame(3, 2, a, b, 9, rtu(1, 2));
    bad.mad[1] = 0x03; // not the CM class
    let frames = [
        frame(1, 0, a, b, 5, dreq(0x1, 0x2)),
        frame(2, 1, b, a, 5, drep(0x2, 0x1)),
        bad,
    ];
    let s = ladder::summarize(&frames);
    assert_eq!((s.mads, s.malformed, s.connections.len()), (3, 1, 1));
    let c = &s.connections[0];
    assert_eq!(c.outcome, Outcome::Incomplete { missing: "REQ" });
    assert_eq!(c.role(1), "unknown");
    assert_eq!(
        c.messages[0].states,
        [Some(CmState::DreqSent), Some(CmState::DreqRcvd)]
    );
    assert_eq!(
        c.messages[1].states,
        [Some(CmState::Timewait), Some(CmState::Timewait)]
    );
    assert!(
        s.to_text()
            .contains("0 retransmission(s), 0 duplicate(s); 3 CM MADs, 1 malformed")
    );
}

const MS: u64 = 1_000_000;
const T0: u64 = 1_800_000_000_000_000_000;

/// Connections, in the order of their first MAD:
/// 0. A->B comm 0x111: REQ, REQ retransmitted twice, REP, RTU, then REP
///    retransmitted and the RTU sent again (a duplicate), DREQ, DREP.
/// 1. A->B comm 0x222: REQ retransmitted once, never answered.
/// 2. C->B comm 0x111 (the same comm ID as 0, another node): REQ, REJ stale.
/// 3. A<->B: DREQ / DREP of a connection whose start is not captured.
/// 4. A->B SIDR 0x5: SIDR_REQ, SIDR_REP status 0.
/// 5. A->B comm 0x333: REQ, MRA, the REQ again (the MRA's wait is still
///    open: it ends with the MRA sender's next message), then nothing.
/// 6. A->B comm 0x111 again after 0 ended (reused comm ID, new QPN): REQ,
///    and a REP from B reusing its comm ID 0x777 too.
fn synthetic() -> Vec<(u64, Ipv4Addr, Ipv4Addr, CmMad)> {
    let p = |ms: u64, s, d, tid: u64, msg| (T0 + ms * MS, s, d, CmMad::send(tid, 0, msg));
    vec![
        p(0, A, B, 1, req(0x111, 10)),
        p(1, A, B, 2, req(0x222, 11)),
        p(2, C, B, 3, req(0x111, 12)),
        p(3, B, C, 3, rej(0, 0x111, 10)),
        p(4, B, A, 9, dreq(0x999, 0x888)),
        p(5, A, B, 9, drep(0x888, 0x999)),
        p(6, A, B, 4, sidr_req(0x5)),
        p(7, B, A, 4, sidr_rep(0x5, 0)),
        p(8, A, B, 5, req(0x333, 13)),
        p(9, B, A, 5, mra(0x444, 0x333)),
        p(1000, A, B, 1, req(0x111, 10)),
        p(1001, A, B, 2, req(0x222, 11)),
        p(1009, A, B, 5, req(0x333, 13)),
        p(2000, A, B, 1, req(0x111, 10)),
        p(2004, B, A, 1, rep(0x777, 0x111, 20)),
        p(2007, A, B, 1, rtu(0x111, 0x777)),
        p(3000, B, A, 1, rep(0x777, 0x111, 20)),
        p(3001, A, B, 1, rtu(0x111, 0x777)),
        p(3100, A, B, 6, dreq(0x111, 0x777)),
        p(3102, B, A, 6, drep(0x777, 0x111)),
        p(4000, A, B, 7, req(0x111, 30)),
        p(4001, B, A, 7, rep(0x777, 0x111, 31)),
    ]
}

#[test]
fn synthetic_capture() {
    let bytes = write_pcap(&synthetic());
    let cap = capture::read_bytes(&bytes).expect("the pcap written above");
    assert_eq!(cap.frames.len(), 22);
    assert!(cap.frames.iter().all(|f| f.icrc_ok));
    let s = ladder::summarize(&cap.frames);
    let text = s.to_text();
    assert_eq!(s.connections.len(), 7, "{text}");
    let r1 = Repeat::Retransmission(1);
    let r2 = Repeat::Retransmission(2);

    // 0: retransmitted REQ, duplicate RTU.
    assert_eq!(
        sequence(&s, 0),
        [
            (0, "REQ", F),
            (0, "REQ", r1),
            (0, "REQ", r2),
            (1, "REP", F),
            (0, "RTU", F),
            (1, "REP", r1),
            (0, "RTU", Repeat::Duplicate(1)),
            (0, "DREQ", F),
            (1, "DREP", F),
        ],
        "{text}"
    );
    let c0 = &s.connections[0];
    assert_eq!(c0.outcome, Outcome::Disconnected);
    assert_eq!((c0.retransmissions, c0.duplicates), (3, 1));
    assert_eq!(c0.ends[1].comm_id, Some(0x777));
    assert_eq!(c0.ends[1].qpn, Some(20));
    assert_eq!(c0.latency.req_rep, Some(2004 * MS));
    assert_eq!(c0.latency.rep_rtu, Some(3 * MS));
    assert_eq!(c0.latency.dreq_drep, Some(2 * MS));

    // 1: a REQ retransmitted, never answered.
    assert_eq!(sequence(&s, 1), [(0, "REQ", F), (0, "REQ", r1)]);
    assert_eq!(
        s.connections[1].outcome,
        Outcome::TimedOut { unanswered: "REQ" }
    );
    assert_eq!(s.connections[1].messages[1].t_ns, 1000 * MS);

    // 2: the same comm ID from another node is another connection.
    assert_eq!(sequence(&s, 2), [(0, "REQ", F), (1, "REJ", F)]);
    assert_eq!(
        s.connections[2].ends[0].ip,
        IpAddr::V4(C),
        "keyed by node and comm ID"
    );
    assert_eq!(
        s.connections[2].outcome,
        Outcome::Stale {
            by: 1,
            message: "REQ"
        }
    );
    assert_eq!(
        s.connections[2].messages[1].states[0],
        Some(CmState::Timewait),
        "a stale REJ puts the requester in timewait"
    );

    // 3: no REQ in the capture.
    assert_eq!(sequence(&s, 3), [(0, "DREQ", F), (1, "DREP", F)]);
    assert_eq!(
        s.connections[3].outcome,
        Outcome::Incomplete { missing: "REQ" }
    );
    assert_eq!(s.connections[3].role(0), "unknown");

    // 4: SIDR resolved.
    assert_eq!(
        s.connections[4].outcome,
        Outcome::SidrResolved { qpn: 0x42 }
    );

    // 5: REQ acknowledged by an MRA, then the capture ends.
    let c5 = &s.connections[5];
    assert_eq!(
        sequence(&s, 5),
        [(0, "REQ", F), (1, "MRA", F), (0, "REQ", r1)]
    );
    assert_eq!(c5.outcome, Outcome::TimedOut { unanswered: "REQ" });
    assert_eq!(c5.mra_waits.len(), 1);
    assert_eq!(c5.mra_waits[0].waited_ns, None);
    assert_eq!(c5.ends[1].comm_id, Some(0x444));

    // 6: comm ID 0x111 reused by A after connection 0 ended.
    assert_eq!(sequence(&s, 6), [(0, "REQ", F), (1, "REP", F)]);
    assert_eq!(
        s.connections[6].outcome,
        Outcome::Incomplete { missing: "RTU" }
    );
    assert_eq!(s.connections[6].ends[1].comm_id, Some(0x777));
    assert_eq!(s.connections[6].ends[1].qpn, Some(31));
    assert_eq!(
        s.connections[0].messages.len(),
        9,
        "the reused IDs' REP is not in #0"
    );

    let t = s.totals;
    assert_eq!(
        (
            t.disconnected,
            t.timed_out,
            t.stale,
            t.incomplete,
            t.sidr_resolved
        ),
        (1, 2, 1, 2, 1)
    );
    assert_eq!(
        (t.retransmissions, t.duplicates, t.with_mra_waits),
        (5, 1, 1)
    );
    assert!(
        text.contains("timed out: no REP or REJ to the REQ"),
        "{text}"
    );
    assert!(text.contains("A>REQ(retx) +1.000s"), "{text}");
    assert!(text.contains("A>RTU(dup)"), "{text}");
}

// ---------------------------------------------------------------------------
// SVG

/// A parsed XML element.
#[derive(Debug)]
struct Element {
    name: String,
    attrs: Vec<(String, String)>,
    children: Vec<Element>,
    text: String,
}

impl Element {
    fn attr(&self, k: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.as_str())
    }
    fn has_class(&self, c: &str) -> bool {
        self.attr("class")
            .is_some_and(|v| v.split_whitespace().any(|x| x == c))
    }
    fn walk<'a>(&'a self, out: &mut Vec<&'a Element>) {
        out.push(self);
        for c in &self.children {
            c.walk(out);
        }
    }
    fn all(&self) -> Vec<&Element> {
        let mut v = Vec::new();
        self.walk(&mut v);
        v
    }
    /// All text below this element, entities decoded.
    fn deep_text(&self) -> String {
        let mut s = self.text.clone();
        for c in &self.children {
            s.push_str(&c.deep_text());
        }
        s
    }
}

/// A minimal well-formedness checking XML parser: prolog, elements with
/// quoted attributes (no duplicates), matching end tags, the five
/// predefined entities and character references, no stray `<` or `&`, one
/// root element. Panics with the byte offset on an error.
fn parse_xml(s: &str) -> Element {
    struct P<'a> {
        b: &'a [u8],
        i: usize,
    }
    impl P<'_> {
        fn fail(&self, what: &str) -> ! {
            let end = (self.i + 40).min(self.b.len());
            panic!(
                "XML error at byte {}: {what} near {:?}",
                self.i,
                String::from_utf8_lossy(&self.b[self.i..end])
            )
        }
        fn ws(&mut self) {
            while self.i < self.b.len() && self.b[self.i].is_ascii_whitespace() {
                self.i += 1;
            }
        }
        fn starts(&self, t: &str) -> bool {
            self.b[self.i..].starts_with(t.as_bytes())
        }
        fn name(&mut self) -> String {
            let st = self.i;
            while self.i < self.b.len()
                && (self.b[self.i].is_ascii_alphanumeric() || b":-_.".contains(&self.b[self.i]))
            {
                self.i += 1;
            }
            if st == self.i {
                self.fail("expected a name");
            }
            String::from_utf8(self.b[st..self.i].to_vec()).unwrap()
        }
        fn chars(&mut self, stop: u8) -> String {
            let mut out = String::new();
            while self.i < self.b.len() && self.b[self.i] != stop {
                match self.b[self.i] {
                    b'<' => self.fail("'<' in text or attribute"),
                    b'&' => {
                        let semi = self.b[self.i..]
                            .iter()
                            .position(|&c| c == b';')
                            .unwrap_or_else(|| self.fail("unterminated entity"));
                        let ent = std::str::from_utf8(&self.b[self.i + 1..self.i + semi]).unwrap();
                        let c = match ent {
                            "amp" => '&',
                            "lt" => '<',
                            "gt" => '>',
                            "quot" => '"',
                            "apos" => '\'',
                            e if e.starts_with("#x") => {
                                char::from_u32(u32::from_str_radix(&e[2..], 16).unwrap()).unwrap()
                            }
                            e if e.starts_with('#') => {
                                char::from_u32(e[1..].parse().unwrap()).unwrap()
                            }
                            _ => self.fail("unknown entity"),
                        };
                        out.push(c);
                        self.i += semi + 1;
                    }
                    _ => {
                        let rest = std::str::from_utf8(&self.b[self.i..]).unwrap();
                        let c = rest.chars().next().unwrap();
                        if (c as u32) < 0x20 && !"\t\n\r".contains(c) {
                            self.fail("control character");
                        }
                        out.push(c);
                        self.i += c.len_utf8();
                    }
                }
            }
            out
        }
        fn element(&mut self) -> Element {
            if !self.starts("<") {
                self.fail("expected '<'");
            }
            self.i += 1;
            let name = self.name();
            let mut attrs: Vec<(String, String)> = Vec::new();
            loop {
                self.ws();
                if self.starts("/>") {
                    self.i += 2;
                    return Element {
                        name,
                        attrs,
                        children: vec![],
                        text: String::new(),
                    };
                }
                if self.starts(">") {
                    self.i += 1;
                    break;
                }
                let k = self.name();
                self.ws();
                if !self.starts("=") {
                    self.fail("expected '='");
                }
                self.i += 1;
                self.ws();
                let q = self.b[self.i];
                if q != b'"' && q != b'\'' {
                    self.fail("unquoted attribute");
                }
                self.i += 1;
                let v = self.chars(q);
                self.i += 1;
                if attrs.iter().any(|(n, _)| *n == k) {
                    self.fail("duplicate attribute");
                }
                attrs.push((k, v));
            }
            let mut children = Vec::new();
            let mut text = String::new();
            loop {
                if self.i >= self.b.len() {
                    self.fail("unclosed element");
                }
                if self.starts("</") {
                    self.i += 2;
                    let end = self.name();
                    if end != name {
                        self.fail(&format!("</{end}> closes <{name}>"));
                    }
                    self.ws();
                    if !self.starts(">") {
                        self.fail("expected '>'");
                    }
                    self.i += 1;
                    return Element {
                        name,
                        attrs,
                        children,
                        text,
                    };
                }
                if self.starts("<") {
                    children.push(self.element());
                } else {
                    text.push_str(&self.chars(b'<'));
                }
            }
        }
    }
    let mut p = P {
        b: s.as_bytes(),
        i: 0,
    };
    if p.starts("<?xml") {
        match s.find("?>") {
            Some(e) => p.i = e + 2,
            None => p.fail("unterminated XML declaration"),
        }
    }
    p.ws();
    let root = p.element();
    p.ws();
    if p.i != p.b.len() {
        p.fail("content after the root element");
    }
    assert_eq!(root.name, "svg");
    assert_eq!(root.attr("xmlns"), Some("http://www.w3.org/2000/svg"));
    root
}

#[test]
fn xml_checker_rejects_broken_documents() {
    for bad in [
        "<svg xmlns=\"http://www.w3.org/2000/svg\"><text>a & b</text></svg>",
        "<svg xmlns=\"http://www.w3.org/2000/svg\"><g></svg>",
        "<svg xmlns=\"http://www.w3.org/2000/svg\"><text>1 < 2</text></svg>",
        "<svg xmlns=\"http://www.w3.org/2000/svg\" a=b></svg>",
        "<svg xmlns=\"http://www.w3.org/2000/svg\"></svg><svg/>",
        "<svg xmlns=\"http://www.w3.org/2000/svg\"><a></b></svg>",
        "<svg xmlns=\"http://www.w3.org/2000/svg\" a=\"x<y\"/>",
        "<svg xmlns=\"http://www.w3.org/2000/svg\"><text>&bogus;</text></svg>",
        "<svg xmlns=\"http://www.w3.org/2000/svg\" a=\"1\" a=\"2\"/>",
    ] {
        assert!(
            std::panic::catch_unwind(|| parse_xml(bad)).is_err(),
            "accepted {bad}"
        );
    }
}

fn by_class<'a>(root: &'a Element, class: &str) -> Vec<&'a Element> {
    root.all()
        .into_iter()
        .filter(|e| e.has_class(class))
        .collect()
}

#[test]
fn ladder_svg_of_the_mra_capture() {
    let s = ladder::summarize(&vector("mra.pcap"));
    let doc = svg::ladder_svg(&s, &[0]);
    let root = parse_xml(&doc);
    assert_eq!(by_class(&root, "lane").len(), 2);
    let mads = by_class(&root, "mad");
    assert_eq!(mads.len(), 7, "one arrow per MAD");
    let retx = by_class(&root, "retx");
    assert_eq!(retx.len(), 1);
    assert!(retx[0].deep_text().contains("REQ retx 1"));
    assert!(retx[0].all().iter().any(|e| e.name == "line"
        && e.attr("stroke") == Some("#e67300")
        && e.attr("marker-end") == Some("url(#ah-retx)")));
    let states: Vec<String> = by_class(&root, "state")
        .iter()
        .map(|e| e.deep_text())
        .collect();
    for st in [
        "REQ_SENT",
        "MRA_REQ_RCVD",
        "MRA_REQ_SENT",
        "ESTABLISHED",
        "DREQ_SENT",
        "TIMEWAIT",
    ] {
        assert!(states.iter().any(|s| s == st), "{st} missing in {states:?}");
    }
    // Time labels relative to the connection's first MAD.
    assert!(doc.contains(">+6.232s<"), "{doc}");
}

#[test]
fn ladder_svg_of_a_reject_and_several_connections() {
    let s = ladder::summarize(&vector("rej.pcap"));
    let root = parse_xml(&svg::ladder_svg(&s, &[]));
    let rej = by_class(&root, "rej");
    assert_eq!(rej.len(), 1);
    assert!(rej[0].deep_text().contains("REJ: invalid service ID (8)"));
    assert!(
        rej[0]
            .all()
            .iter()
            .any(|e| e.attr("stroke") == Some("#cc0000"))
    );

    // Three nodes, seven connections, one index that does not exist.
    let cap = capture::read_bytes(&write_pcap(&synthetic())).unwrap();
    let s = ladder::summarize(&cap.frames);
    let doc = svg::ladder_svg(&s, &[0, 2, 42]);
    let root = parse_xml(&doc);
    assert_eq!(by_class(&root, "lane").len(), 3);
    let n = s.connections[0].messages.len() + s.connections[2].messages.len();
    assert_eq!(by_class(&root, "mad").len(), n);
    assert_eq!(by_class(&root, "retx").len(), 3);
    assert_eq!(by_class(&root, "dup").len(), 1);
    assert_eq!(by_class(&root, "rej").len(), 1);
    assert!(doc.contains("not in the capture: #42"));
    // Everything when the selection is empty.
    let all = parse_xml(&svg::ladder_svg(&s, &[]));
    let total: usize = s.connections.iter().map(|c| c.messages.len()).sum();
    assert_eq!(by_class(&all, "mad").len(), total);
}

#[test]
fn cdf_svg_has_one_path_per_series() {
    let a: Vec<f64> = (1..=1000).map(|i| 30.0 + i as f64).collect();
    let b: Vec<f64> = (1..=5000).map(|i| 5.0 * i as f64).collect();
    let series = [
        ("ibcm <connect> & \"co\"", a),
        ("baseline", b),
        ("nothing", vec![0.0, -1.0, f64::NAN]),
    ];
    let doc = svg::latency_cdf_svg(&series);
    let root = parse_xml(&doc);
    let paths = by_class(&root, "cdf");
    assert_eq!(paths.len(), 2);
    assert_eq!(paths[0].deep_text(), "ibcm <connect> & \"co\"");
    // The curve ends at fraction 1 (y = top of the plot) and is monotone.
    for p in &paths {
        let d = p.attr("d").unwrap();
        let ys: Vec<f64> = d
            .split_whitespace()
            .filter_map(|t| t.strip_prefix('V'))
            .map(|v| v.parse().unwrap())
            .collect();
        assert!(ys.windows(2).all(|w| w[1] <= w[0]), "not monotone: {d}");
        assert_eq!(*ys.last().unwrap(), 40.0);
        assert!(ys.len() <= 2001);
    }
    assert!(doc.contains(">no data<"));
    // Decade ticks from 10 µs to 100 ms (5 .. 25,000 µs).
    for t in [">1 µs<", ">10 µs<", ">1 ms<", ">10 ms<", ">100 ms<"] {
        assert!(doc.contains(t), "{t}");
    }
    // Empty input is still a picture.
    parse_xml(&svg::latency_cdf_svg(&[]));
}

#[test]
fn rate_svg_draws_one_line() {
    let times: Vec<f64> = (0..1000).map(|i| i as f64 / 500.0).collect();
    let pts = svg::rate_series(&times, 0.5);
    assert_eq!(pts.len(), 4);
    assert!(pts.iter().all(|&(_, r)| r == 500.0));
    let root = parse_xml(&svg::rate_svg(&pts, "connects/s <ibcm>"));
    let rate = by_class(&root, "rate");
    assert_eq!(rate.len(), 1);
    assert_eq!(rate[0].attr("d").unwrap().matches('L').count(), 3);
    let empty = parse_xml(&svg::rate_svg(&[], "nothing"));
    assert!(by_class(&empty, "rate").is_empty());
}
