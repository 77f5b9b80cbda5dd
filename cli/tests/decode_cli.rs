//! `ibcm decode`, end to end: runs the built binary on the kernel captures in
//! `tests/vectors` and checks its output against
//!
//! * the capture tooling's `*.mads.txt` (every listed field, and every MAD's
//!   256 bytes rebuilt from the JSON fields alone),
//! * the capture tooling's `*.summary.txt` (`--oneline` reproduces it),
//! * the stored `tshark -V` output of tshark 4.0 (`*.tshark.txt`), field by
//!   field, with the places where tshark 4.0 does not follow the IBTA layout
//!   asserted byte by byte (see [`Cmp::FlowLabelTshark`]),
//! * a live `tshark -T json -x` run when a `tshark` binary is on PATH,
//!
//! and feeds it broken input (truncated, garbage, missing files, malformed
//! MADs, mutated captures): no panic, the file and byte offset named, exit
//! status 1, later files still decoded.

mod common;
#[path = "../../tests/golden_mads/mod.rs"]
mod golden_mads;

use common::{Run, TempDir, ibcm_command};
use golden_mads::GoldenMad;
use std::collections::BTreeSet;
use std::ffi::{OsStr, OsString};
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::Command;

use ibcm::capture::RoceFrame;
use ibcm::wire::roce::{Bth, Deth};
use ibcm::wire::{
    Apr, ClassPortInfo, CmMad, CmMsg, Drep, Dreq, Gid, Lap, Mra, MsgCode, Rej, Rep, Req, ReqPath,
    Rtu, SidrRep, SidrReq, hex,
};

const CAPTURES: [&str; 5] = ["rping", "ucmatose", "rej", "sidr-rej", "mra"];

fn vectors() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/vectors")
}

fn vector(name: &str, ext: &str) -> PathBuf {
    vectors().join(format!("{name}.{ext}"))
}

// ---------------------------------------------------------------------------
// Running the binary

fn ibcm<S: AsRef<OsStr>>(args: &[S]) -> Run {
    Run::of(ibcm_command().args(args))
}

// ---------------------------------------------------------------------------
// A small JSON parser (RFC 8259), strict enough to validate our output

#[derive(Debug, Clone, PartialEq)]
enum Json {
    Null,
    Bool(bool),
    /// The number's text, as written.
    Num(String),
    Str(String),
    Arr(Vec<Json>),
    /// Members in order; duplicates are kept (tshark writes some).
    Obj(Vec<(String, Json)>),
}

type Obj = [(String, Json)];

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn err<T>(&self, what: &str) -> Result<T, String> {
        Err(format!("{what} at byte {}", self.i))
    }
    fn ws(&mut self) {
        while self.i < self.s.len() && matches!(self.s[self.i], b' ' | b'\t' | b'\n' | b'\r') {
            self.i += 1;
        }
    }
    fn eat(&mut self, c: u8) -> Result<(), String> {
        self.ws();
        if self.s.get(self.i) == Some(&c) {
            self.i += 1;
            Ok(())
        } else {
            self.err(&format!("expected '{}'", c as char))
        }
    }
    fn lit(&mut self, word: &str, v: Json) -> Result<Json, String> {
        if self.s[self.i..].starts_with(word.as_bytes()) {
            self.i += word.len();
            Ok(v)
        } else {
            self.err("bad literal")
        }
    }
    fn value(&mut self) -> Result<Json, String> {
        self.ws();
        match self.s.get(self.i) {
            None => self.err("unexpected end"),
            Some(b'{') => {
                self.i += 1;
                let mut members = Vec::new();
                self.ws();
                if self.s.get(self.i) == Some(&b'}') {
                    self.i += 1;
                    return Ok(Json::Obj(members));
                }
                loop {
                    self.ws();
                    let k = self.string()?;
                    self.eat(b':')?;
                    let v = self.value()?;
                    members.push((k, v));
                    self.ws();
                    match self.s.get(self.i) {
                        Some(b',') => self.i += 1,
                        Some(b'}') => {
                            self.i += 1;
                            return Ok(Json::Obj(members));
                        }
                        _ => return self.err("expected ',' or '}'"),
                    }
                }
            }
            Some(b'[') => {
                self.i += 1;
                let mut items = Vec::new();
                self.ws();
                if self.s.get(self.i) == Some(&b']') {
                    self.i += 1;
                    return Ok(Json::Arr(items));
                }
                loop {
                    items.push(self.value()?);
                    self.ws();
                    match self.s.get(self.i) {
                        Some(b',') => self.i += 1,
                        Some(b']') => {
                            self.i += 1;
                            return Ok(Json::Arr(items));
                        }
                        _ => return self.err("expected ',' or ']'"),
                    }
                }
            }
            Some(b'"') => Ok(Json::Str(self.string()?)),
            Some(b't') => self.lit("true", Json::Bool(true)),
            Some(b'f') => self.lit("false", Json::Bool(false)),
            Some(b'n') => self.lit("null", Json::Null),
            Some(_) => self.number(),
        }
    }
    fn digits(&mut self) -> usize {
        let start = self.i;
        while self.i < self.s.len() && self.s[self.i].is_ascii_digit() {
            self.i += 1;
        }
        self.i - start
    }
    fn number(&mut self) -> Result<Json, String> {
        let start = self.i;
        if self.s.get(self.i) == Some(&b'-') {
            self.i += 1;
        }
        let int_start = self.i;
        let n = self.digits();
        if n == 0 || (n > 1 && self.s[int_start] == b'0') {
            return self.err("bad number");
        }
        if self.s.get(self.i) == Some(&b'.') {
            self.i += 1;
            if self.digits() == 0 {
                return self.err("bad fraction");
            }
        }
        if matches!(self.s.get(self.i), Some(b'e' | b'E')) {
            self.i += 1;
            if matches!(self.s.get(self.i), Some(b'+' | b'-')) {
                self.i += 1;
            }
            if self.digits() == 0 {
                return self.err("bad exponent");
            }
        }
        Ok(Json::Num(
            std::str::from_utf8(&self.s[start..self.i])
                .unwrap()
                .to_string(),
        ))
    }
    fn hex4(&mut self) -> Result<u32, String> {
        let h = self
            .s
            .get(self.i..self.i + 4)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u32::from_str_radix(h, 16).ok());
        match h {
            Some(v) => {
                self.i += 4;
                Ok(v)
            }
            None => self.err("bad \\u escape"),
        }
    }
    fn string(&mut self) -> Result<String, String> {
        if self.s.get(self.i) != Some(&b'"') {
            return self.err("expected a string");
        }
        self.i += 1;
        let mut out = String::new();
        loop {
            let Some(&c) = self.s.get(self.i) else {
                return self.err("unterminated string");
            };
            self.i += 1;
            match c {
                b'"' => return Ok(out),
                b'\\' => {
                    let Some(&e) = self.s.get(self.i) else {
                        return self.err("unterminated escape");
                    };
                    self.i += 1;
                    match e {
                        b'"' => out.push('"'),
                        b'\\' => out.push('\\'),
                        b'/' => out.push('/'),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => {
                            let hi = self.hex4()?;
                            let cp = if (0xd800..0xdc00).contains(&hi) {
                                if !self.s[self.i..].starts_with(b"\\u") {
                                    return self.err("lone high surrogate");
                                }
                                self.i += 2;
                                let lo = self.hex4()?;
                                if !(0xdc00..0xe000).contains(&lo) {
                                    return self.err("bad low surrogate");
                                }
                                0x10000 + ((hi - 0xd800) << 10) + (lo - 0xdc00)
                            } else {
                                hi
                            };
                            match char::from_u32(cp) {
                                Some(ch) => out.push(ch),
                                None => return self.err("bad code point"),
                            }
                        }
                        _ => return self.err("bad escape"),
                    }
                }
                c if c < 0x20 => return self.err("raw control character in a string"),
                _ => {
                    // Copy one whole UTF-8 sequence.
                    let start = self.i - 1;
                    let len = match c {
                        0x00..=0x7f => 1,
                        0xc0..=0xdf => 2,
                        0xe0..=0xef => 3,
                        _ => 4,
                    };
                    let end = (start + len).min(self.s.len());
                    match std::str::from_utf8(&self.s[start..end]) {
                        Ok(t) => out.push_str(t),
                        Err(_) => return self.err("bad UTF-8"),
                    }
                    self.i = end;
                }
            }
        }
    }
}

fn parse_json(text: &str) -> Result<Json, String> {
    let mut p = Parser {
        s: text.as_bytes(),
        i: 0,
    };
    let v = p.value()?;
    p.ws();
    if p.i != p.s.len() {
        return p.err("trailing characters");
    }
    Ok(v)
}

/// Parses one line of our output: one object, no duplicate keys.
fn parse_line(line: &str) -> Vec<(String, Json)> {
    let Json::Obj(members) = parse_json(line).unwrap_or_else(|e| panic!("{e}: {line}")) else {
        panic!("not an object: {line}")
    };
    let mut seen = BTreeSet::new();
    for (k, _) in &members {
        assert!(seen.insert(k.clone()), "duplicate key {k} in {line}");
    }
    members
}

fn get<'a>(o: &'a Obj, k: &str) -> Option<&'a Json> {
    o.iter().find(|(key, _)| key == k).map(|(_, v)| v)
}

fn int(o: &Obj, k: &str) -> u64 {
    match get(o, k) {
        Some(Json::Num(n)) => n
            .parse()
            .unwrap_or_else(|_| panic!("{k}={n} is not an unsigned integer")),
        v => panic!("{k}: expected an integer, found {v:?}"),
    }
}

fn boolean(o: &Obj, k: &str) -> bool {
    match get(o, k) {
        Some(Json::Bool(b)) => *b,
        v => panic!("{k}: expected a boolean, found {v:?}"),
    }
}

fn string<'a>(o: &'a Obj, k: &str) -> &'a str {
    match get(o, k) {
        Some(Json::Str(s)) => s,
        v => panic!("{k}: expected a string, found {v:?}"),
    }
}

fn unhex(s: &str) -> Vec<u8> {
    assert!(s.len() % 2 == 0, "odd hex length: {s}");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap_or_else(|_| panic!("bad hex {s}")))
        .collect()
}

fn gid_of(o: &Obj, k: &str) -> Gid {
    string(o, k)
        .parse()
        .unwrap_or_else(|_| panic!("{k} is not a GID"))
}

fn area<const N: usize>(o: &Obj, k: &str) -> [u8; N] {
    let s = string(o, k);
    assert_eq!(s, s.to_lowercase(), "{k}: hex must be lowercase");
    unhex(s)
        .try_into()
        .unwrap_or_else(|v: Vec<u8>| panic!("{k}: {} bytes, the area has {N}", v.len()))
}

fn code(o: &Obj, k: &str) -> MsgCode {
    match string(o, k) {
        "REQ" => MsgCode::Req,
        "REP" => MsgCode::Rep,
        "OTHER" => MsgCode::Other,
        s => panic!("{k}: bad message code {s}"),
    }
}

fn path(o: &Obj, p: &str) -> ReqPath {
    let k = |s: &str| format!("{p}_{s}");
    ReqPath {
        local_lid: int(o, &k("local_lid")) as u16,
        remote_lid: int(o, &k("remote_lid")) as u16,
        local_gid: gid_of(o, &k("local_gid")),
        remote_gid: gid_of(o, &k("remote_gid")),
        flow_label: int(o, &k("flow_label")) as u32,
        packet_rate: int(o, &k("packet_rate")) as u8,
        traffic_class: int(o, &k("traffic_class")) as u8,
        hop_limit: int(o, &k("hop_limit")) as u8,
        sl: int(o, &k("sl")) as u8,
        subnet_local: boolean(o, &k("subnet_local")),
        local_ack_timeout: int(o, &k("local_ack_timeout")) as u8,
    }
}

/// Rebuilds the whole MAD from the JSON keys alone: proof that the JSON
/// carries every field, with the right value.
fn json_to_mad(o: &Obj) -> CmMad {
    let u = |k: &str| int(o, k);
    let ids = || (u("local_comm_id") as u32, u("remote_comm_id") as u32);
    let msg = match string(o, "attr") {
        "REQ" => CmMsg::Req(Req {
            local_comm_id: u("local_comm_id") as u32,
            vendor_id: u("vendor_id") as u32,
            service_id: u("service_id"),
            local_ca_guid: u("local_ca_guid"),
            local_qkey: u("local_qkey") as u32,
            local_qpn: u("local_qpn") as u32,
            responder_resources: u("responder_resources") as u8,
            local_eecn: u("local_eecn") as u32,
            initiator_depth: u("initiator_depth") as u8,
            remote_eecn: u("remote_eecn") as u32,
            remote_cm_response_timeout: u("remote_cm_response_timeout") as u8,
            transport_service_type: u("transport_service_type") as u8,
            end_to_end_flow_control: boolean(o, "end_to_end_flow_control"),
            starting_psn: u("starting_psn") as u32,
            local_cm_response_timeout: u("local_cm_response_timeout") as u8,
            retry_count: u("retry_count") as u8,
            pkey: u("pkey") as u16,
            path_mtu: u("path_mtu") as u8,
            rdc_exists: boolean(o, "rdc_exists"),
            rnr_retry_count: u("rnr_retry_count") as u8,
            max_cm_retries: u("max_cm_retries") as u8,
            srq: boolean(o, "srq"),
            extended_transport_type: u("extended_transport_type") as u8,
            primary: path(o, "primary"),
            alternate: path(o, "alternate"),
            sap_supported: boolean(o, "sap_supported"),
            private_data: area(o, "private_data"),
        }),
        "MRA" => CmMsg::Mra(Mra {
            local_comm_id: ids().0,
            remote_comm_id: ids().1,
            message_mraed: code(o, "message_mraed"),
            service_timeout: u("service_timeout") as u8,
            private_data: area(o, "private_data"),
        }),
        "REJ" => CmMsg::Rej(Rej {
            local_comm_id: ids().0,
            remote_comm_id: ids().1,
            message_rejected: code(o, "message_rejected"),
            ari_length: u("ari_length") as u8,
            reason: u("reason") as u16,
            ari: area(o, "ari"),
            private_data: area(o, "private_data"),
        }),
        "REP" => CmMsg::Rep(Rep {
            local_comm_id: ids().0,
            remote_comm_id: ids().1,
            local_qkey: u("local_qkey") as u32,
            local_qpn: u("local_qpn") as u32,
            vendor_id: u("vendor_id") as u32,
            local_eecn: u("local_eecn") as u32,
            starting_psn: u("starting_psn") as u32,
            responder_resources: u("responder_resources") as u8,
            initiator_depth: u("initiator_depth") as u8,
            target_ack_delay: u("target_ack_delay") as u8,
            failover_accepted: u("failover_accepted") as u8,
            end_to_end_flow_control: boolean(o, "end_to_end_flow_control"),
            rnr_retry_count: u("rnr_retry_count") as u8,
            srq: boolean(o, "srq"),
            local_ca_guid: u("local_ca_guid"),
            private_data: area(o, "private_data"),
        }),
        "RTU" => CmMsg::Rtu(Rtu {
            local_comm_id: ids().0,
            remote_comm_id: ids().1,
            private_data: area(o, "private_data"),
        }),
        "DREQ" => CmMsg::Dreq(Dreq {
            local_comm_id: ids().0,
            remote_comm_id: ids().1,
            remote_qpn: u("remote_qpn") as u32,
            private_data: area(o, "private_data"),
        }),
        "DREP" => CmMsg::Drep(Drep {
            local_comm_id: ids().0,
            remote_comm_id: ids().1,
            private_data: area(o, "private_data"),
        }),
        "SIDR_REQ" => CmMsg::SidrReq(SidrReq {
            request_id: u("request_id") as u32,
            pkey: u("pkey") as u16,
            service_id: u("service_id"),
            private_data: area(o, "private_data"),
        }),
        "SIDR_REP" => CmMsg::SidrRep(SidrRep {
            request_id: u("request_id") as u32,
            status: u("status") as u8,
            info_length: u("info_length") as u8,
            vendor_id: u("vendor_id") as u32,
            qpn: u("qpn") as u32,
            service_id: u("service_id"),
            qkey: u("qkey") as u32,
            info: area(o, "info"),
            private_data: area(o, "private_data"),
        }),
        "LAP" => CmMsg::Lap(Lap {
            local_comm_id: ids().0,
            remote_comm_id: ids().1,
            remote_qpn: u("remote_qpn") as u32,
            remote_cm_response_timeout: u("remote_cm_response_timeout") as u8,
            alternate: path(o, "alternate"),
            private_data: area(o, "private_data"),
        }),
        "APR" => CmMsg::Apr(Apr {
            local_comm_id: ids().0,
            remote_comm_id: ids().1,
            info_length: u("info_length") as u8,
            ap_status: u("ap_status") as u8,
            info: area(o, "info"),
            private_data: area(o, "private_data"),
        }),
        "ClassPortInfo" => CmMsg::ClassPortInfo(ClassPortInfo {
            base_version: u("base_version") as u8,
            class_version: u("class_version") as u8,
            capability_mask: u("capability_mask") as u16,
            capability_mask2: u("capability_mask2") as u32,
            resp_time_value: u("resp_time_value") as u8,
            redirect_gid: gid_of(o, "redirect_gid"),
            redirect_tc: u("redirect_tc") as u8,
            redirect_sl: u("redirect_sl") as u8,
            redirect_fl: u("redirect_fl") as u32,
            redirect_lid: u("redirect_lid") as u16,
            redirect_pkey: u("redirect_pkey") as u16,
            redirect_qp: u("redirect_qp") as u32,
            redirect_qkey: u("redirect_qkey") as u32,
            trap_gid: gid_of(o, "trap_gid"),
            trap_tc: u("trap_tc") as u8,
            trap_sl: u("trap_sl") as u8,
            trap_fl: u("trap_fl") as u32,
            trap_lid: u("trap_lid") as u16,
            trap_pkey: u("trap_pkey") as u16,
            trap_hl: u("trap_hl") as u8,
            trap_qp: u("trap_qp") as u32,
            trap_qkey: u("trap_qkey") as u32,
        }),
        other => panic!("unexpected attr {other}"),
    };
    CmMad {
        method: u("method") as u8,
        status: u("mad_status") as u16,
        class_specific: u("class_specific") as u16,
        tid: u("tid"),
        attr_mod: u("attr_mod") as u32,
        msg,
    }
}

/// The keys users and tests rely on (the `ibcm decode` contract).
const COMMON_KEYS: &[&str] = &[
    "frame",
    "src",
    "dst",
    "attr",
    "method",
    "tid",
    "icrc_ok",
    "attr_mod",
    "mad_status",
    "src_port",
    "dst_port",
    "bth_pkey",
    "psn",
];

fn required_keys(attr: &str) -> &'static [&'static str] {
    match attr {
        "REQ" => &[
            "local_comm_id",
            "service_id",
            "local_ca_guid",
            "local_qkey",
            "local_qpn",
            "starting_psn",
            "primary_local_gid",
            "primary_remote_gid",
            "private_data",
        ],
        "REP" => &[
            "local_comm_id",
            "remote_comm_id",
            "local_qkey",
            "local_qpn",
            "starting_psn",
            "local_ca_guid",
            "private_data",
        ],
        "RTU" | "DREP" => &["local_comm_id", "remote_comm_id", "private_data"],
        "DREQ" => &[
            "local_comm_id",
            "remote_comm_id",
            "remote_qpn",
            "private_data",
        ],
        "REJ" => &[
            "local_comm_id",
            "remote_comm_id",
            "reason",
            "ari",
            "private_data",
            "ari_length",
            "message_rejected",
            "reason_text",
        ],
        "MRA" => &[
            "local_comm_id",
            "remote_comm_id",
            "service_timeout",
            "private_data",
            "message_mraed",
        ],
        "SIDR_REQ" => &["request_id", "service_id", "private_data", "pkey"],
        "SIDR_REP" => &[
            "request_id",
            "status",
            "qpn",
            "service_id",
            "qkey",
            "info",
            "private_data",
            "info_length",
            "vendor_id",
        ],
        _ => &[],
    }
}

/// Where the byte areas sit in the MAD (IBTA tables 106-120).
fn areas(attr: &str) -> &'static [(&'static str, usize, usize)] {
    match attr {
        "REQ" => &[("private_data", 164, 92)],
        "MRA" => &[("private_data", 34, 222)],
        "REJ" => &[("ari", 36, 72), ("private_data", 108, 148)],
        "REP" => &[("private_data", 60, 196)],
        "RTU" | "DREP" => &[("private_data", 32, 224)],
        "DREQ" => &[("private_data", 36, 220)],
        "SIDR_REQ" => &[("private_data", 40, 216)],
        "SIDR_REP" => &[("info", 48, 72), ("private_data", 120, 136)],
        "LAP" => &[("private_data", 88, 168)],
        "APR" => &[("info", 36, 72), ("private_data", 108, 148)],
        _ => &[],
    }
}

// ---------------------------------------------------------------------------
// The capture tooling's *.mads.txt

fn load_mads(name: &str) -> Vec<GoldenMad> {
    golden_mads::load(&vector(name, "mads.txt"))
}

fn num(v: &str) -> u64 {
    let v = v.trim_end_matches([';', ')']);
    match v.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16),
        None => v.parse(),
    }
    .unwrap_or_else(|_| panic!("not a number: {v}"))
}

/// Our JSON value of an integer or boolean key, as an integer.
fn int_or_bool(o: &Obj, k: &str) -> u64 {
    match get(o, k) {
        Some(Json::Bool(b)) => *b as u64,
        _ => int(o, k),
    }
}

fn check_golden(name: &str, g: &GoldenMad, o: &Obj) {
    let ctx = format!("{name} frame {}", g.frame);
    assert_eq!(int(o, "frame"), g.frame, "{ctx}");
    assert!(get(o, "error").is_none(), "{ctx}: {o:?}");
    for k in COMMON_KEYS {
        assert!(get(o, k).is_some(), "{ctx}: no {k}");
    }
    let attr = string(o, "attr");
    for k in required_keys(attr) {
        assert!(get(o, k).is_some(), "{ctx}: {attr} without {k}");
    }

    // "frame 8 t=+0.000s 10.77.0.2:55410 -> 10.77.0.1:4791 REQ (BTH op=0x64
    //  dqp=1 psn=0 pkey=0xffff; DETH qkey=0x80010000 sqp=1; ICRC ok)"
    let l = &g.line;
    let (src, sport) = l[3].rsplit_once(':').unwrap();
    let (dst, dport) = l[5].rsplit_once(':').unwrap();
    assert_eq!(string(o, "src"), src, "{ctx}");
    assert_eq!(string(o, "dst"), dst, "{ctx}");
    assert_eq!(int(o, "src_port"), num(sport), "{ctx}");
    assert_eq!(int(o, "dst_port"), num(dport), "{ctx}");
    assert_eq!(attr, l[6], "{ctx}");
    for tok in &l[7..] {
        let Some((k, v)) = tok.trim_start_matches('(').split_once('=') else {
            continue;
        };
        let key = match k {
            "op" => "bth_opcode",
            "dqp" => "bth_dest_qp",
            "psn" => "psn",
            "pkey" => "bth_pkey",
            "qkey" => "deth_qkey",
            "sqp" => "deth_src_qp",
            _ => panic!("{ctx}: unknown frame-line key {k}"),
        };
        assert_eq!(int(o, key), num(v), "{ctx}: {key}");
    }
    assert_eq!(l.last().unwrap(), "ok)", "{ctx}");
    assert!(boolean(o, "icrc_ok"), "{ctx}");

    for (k, v) in &g.header {
        let key = match k.as_str() {
            // Implied by a successful parse (no `error` key).
            "base_version" | "mgmt_class" | "class_version" | "len" => continue,
            "status" => "mad_status",
            "method" | "tid" | "attr_id" | "attr_mod" => k.as_str(),
            _ => panic!("{ctx}: unknown header key {k}"),
        };
        assert_eq!(int(o, key), num(v), "{ctx}: {key}");
    }

    for (k, v) in &g.fields {
        match k.as_str() {
            "prim_lid" => {
                let (a, b) = v.split_once("->").unwrap();
                assert_eq!(int(o, "primary_local_lid"), num(a), "{ctx}");
                assert_eq!(int(o, "primary_remote_lid"), num(b), "{ctx}");
            }
            "prim_gid" => {
                let (a, b) = v.split_once("->").unwrap();
                assert_eq!(gid_of(o, "primary_local_gid"), a.parse().unwrap(), "{ctx}");
                assert_eq!(gid_of(o, "primary_remote_gid"), b.parse().unwrap(), "{ctx}");
            }
            "msg_mraed" => assert_eq!(string(o, "message_mraed"), v, "{ctx}"),
            "msg_rejected" => assert_eq!(string(o, "message_rejected"), v, "{ctx}"),
            k if k.starts_with("private_data[0:") => {
                assert!(
                    string(o, "private_data").starts_with(v.as_str()),
                    "{ctx}: private_data"
                );
            }
            k => {
                let key = match k {
                    "resp_res" => "responder_resources",
                    "init_depth" => "initiator_depth",
                    "remote_cm_resp_to" => "remote_cm_response_timeout",
                    "transport" => "transport_service_type",
                    "start_psn" => "starting_psn",
                    "local_cm_resp_to" => "local_cm_response_timeout",
                    "retry" => "retry_count",
                    "mtu" => "path_mtu",
                    "rnr_retry" => "rnr_retry_count",
                    "flow_label" => "primary_flow_label",
                    "pkt_rate" => "primary_packet_rate",
                    "tclass" => "primary_traffic_class",
                    "hop_limit" => "primary_hop_limit",
                    "sl" => "primary_sl",
                    "subnet_local" => "primary_subnet_local",
                    "local_ack_to" => "primary_local_ack_timeout",
                    "failover" => "failover_accepted",
                    "ari_len" => "ari_length",
                    "add_info_len" => "info_length",
                    "local_comm_id" | "remote_comm_id" | "service_id" | "local_ca_guid"
                    | "local_qkey" | "local_qpn" | "pkey" | "max_cm_retries" | "srq"
                    | "remote_qpn" | "target_ack_delay" | "request_id" | "qpn" | "qkey"
                    | "service_timeout" | "status" | "reason" => k,
                    _ => panic!("{ctx}: unknown mads.txt key {k}"),
                };
                assert_eq!(int_or_bool(o, key), num(v), "{ctx}: {key} ({k})");
            }
        }
    }

    // Byte areas: the whole fixed-size area, straight from the MAD bytes.
    for &(key, off, len) in areas(attr) {
        assert_eq!(
            string(o, key),
            hex(&g.bytes[off..off + len]),
            "{ctx}: {key} is MAD bytes {off}..{}",
            off + len
        );
    }
    // And everything else: the 256 bytes rebuilt from the JSON alone.
    assert_eq!(
        json_to_mad(o).to_bytes(),
        g.bytes,
        "{ctx}: MAD rebuilt from JSON differs"
    );
}

fn json_lines(stdout: &str) -> Vec<Vec<(String, Json)>> {
    stdout.lines().map(parse_line).collect()
}

#[test]
fn json_matches_golden_mads() {
    let mut total = 0;
    for name in CAPTURES {
        let r = ibcm(&[
            OsStr::new("decode"),
            OsStr::new("--json"),
            vector(name, "pcap").as_os_str(),
        ]);
        assert_eq!(r.code, 0, "{name}: {}", r.stderr);
        let objs = json_lines(&r.stdout);
        let golden = load_mads(name);
        assert_eq!(objs.len(), golden.len(), "{name}: one JSON line per MAD");
        for (o, g) in objs.iter().zip(&golden) {
            assert!(get(o, "file").is_none(), "one file: no file key");
            check_golden(name, g, o);
            total += 1;
        }
        // The per-file summary goes to stderr in JSON mode.
        assert!(
            r.stderr.contains(&format!("{} CM MADs", golden.len())),
            "{name}: {}",
            r.stderr
        );
        assert!(r.stderr.contains(" 0 ICRC failures"), "{}", r.stderr);
    }
    assert_eq!(total, 5 + 5 + 2 + 2 + 7);
}

#[test]
fn several_files_get_a_file_key() {
    let files: Vec<PathBuf> = CAPTURES.iter().map(|n| vector(n, "pcap")).collect();
    let mut args: Vec<OsString> = vec!["decode".into(), "--json".into()];
    args.extend(files.iter().map(|f| f.clone().into_os_string()));
    let r = ibcm(&args);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let objs = json_lines(&r.stdout);
    let mut i = 0;
    for (name, file) in CAPTURES.iter().zip(&files) {
        for g in load_mads(name) {
            let o = &objs[i];
            assert_eq!(string(o, "file"), file.to_string_lossy(), "{name}");
            check_golden(name, &g, o);
            i += 1;
        }
    }
    assert_eq!(i, objs.len());
    assert_eq!(r.stderr.lines().count(), 5, "one summary line per file");
}

#[test]
fn summary_reproduces_the_summary_files() {
    for name in CAPTURES {
        let r = ibcm(&[
            OsStr::new("decode"),
            OsStr::new("--oneline"),
            vector(name, "pcap").as_os_str(),
        ]);
        assert_eq!(r.code, 0, "{name}: {}", r.stderr);
        let expected = std::fs::read_to_string(vector(name, "summary.txt")).unwrap();
        let lines: Vec<&str> = r.stdout.lines().collect();
        let n = expected.lines().count();
        assert_eq!(lines[..n].join("\n"), expected.trim_end(), "{name}");
        // Then a blank line and the per-file summary.
        assert_eq!(lines.len(), n + 2, "{name}: {}", r.stdout);
        assert_eq!(lines[n], "");
        let s = lines[n + 1];
        assert!(
            s.starts_with(&format!("{}: ", vector(name, "pcap").display())),
            "{s}"
        );
        assert!(s.contains(&format!(" {n} CM MADs (")), "{s}");
        assert!(s.contains(" 0 malformed, 0 ICRC failures, "), "{s}");
    }
    // --json --oneline: the header keys, no message fields.
    let rej = vector("rej", "pcap");
    let r = ibcm(&[
        OsStr::new("decode"),
        OsStr::new("--json"),
        OsStr::new("--oneline"),
        rej.as_os_str(),
    ]);
    let objs = json_lines(&r.stdout);
    assert_eq!(objs.len(), 2);
    for o in &objs {
        for k in COMMON_KEYS {
            assert!(get(o, k).is_some(), "{k}");
        }
        assert!(get(o, "local_comm_id").is_none());
    }
}

#[test]
fn text_output_is_readable() {
    let r = ibcm(&[OsStr::new("decode"), vector("rej", "pcap").as_os_str()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let t = &r.stdout;
    for want in [
        "frame 8 t=+0.000s 10.77.0.2:55410 -> 10.77.0.1:4791  REQ  tid=0x00000002567b286a  ICRC ok\n",
        "    time=2026-11-29 09:50:18.778661000 UTC method=0x03 (Send) ",
        " service_id=0x0000000001061c06 (RDMA CM TCP port 7174) ",
        " primary_local_gid=::ffff:10.77.0.2 primary_remote_gid=::ffff:10.77.0.1\n",
        " primary_flow_label=0x97668 ",
        "    alternate path: none (all alternate path fields zero)\n",
        "    private_data=0040d15e0000000000000000000000000a4d00020000000000000000000000000a4d0001 (36 of 92 bytes, rest zero)\n",
        // tshark: "IP CM Source Port: 0xd15e" = 53598.
        "    rdma_cm: TCP 10.77.0.2:53598 -> 10.77.0.1:7174 (cma_version=0 ip_version=4)\n",
        "frame 9 t=+0.014s 10.77.0.1:55410 -> 10.77.0.2:4791  REJ  ",
        " message_rejected=REQ reason=8 (invalid service ID)\n",
        "    private_data=(all 148 bytes zero)\n",
    ] {
        assert!(t.contains(want), "missing {want:?} in\n{t}");
    }
    let last = t.lines().last().unwrap();
    assert!(
        last.ends_with(
            "rej.pcap: 10 packets, 2 CM MADs (REQ 1, REJ 1), 0 malformed, 0 ICRC failures, 8 other packets skipped (not_ip=2 not_udp=6)"
        ),
        "{last}"
    );
    let r = ibcm(&[OsStr::new("decode"), vector("sidr-rej", "pcap").as_os_str()]);
    assert!(
        r.stdout.contains(" status=1 (IB_SIDR_UNSUPPORTED) "),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout
            .contains("    rdma_cm: UDP 10.77.0.2:56230 -> 10.77.0.1:7174 "),
        "{}",
        r.stdout
    );
    let r = ibcm(&[OsStr::new("decode"), vector("mra", "pcap").as_os_str()]);
    assert!(
        r.stdout
            .contains(" message_mraed=REQ service_timeout=24 (68.72 s)\n"),
        "{}",
        r.stdout
    );
}

// ---------------------------------------------------------------------------
// tshark

/// How one tshark field relates to our JSON (and to the MAD bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Cmp {
    /// An integer JSON key.
    Int(&'static str),
    /// A boolean JSON key (tshark: True/False, 0/1, 0x00/0x01).
    Bool(&'static str),
    /// A GID key (tshark: IPv4 text for IPv4-mapped GIDs, IPv6 text or hex).
    Gid(&'static str),
    /// An IP address key.
    Ip(&'static str),
    /// A hex byte-area key (tshark may cut long areas, ending them with …).
    Bytes(&'static str),
    /// Bytes `off..off+len` of the MAD.
    MadBytes(usize, usize),
    /// A 2-bit message code key ("REQ" = 0, "REP" = 1, "OTHER" = 2).
    MsgCode(&'static str),
    Const(u64),
    /// Reserved bits tshark shows: zero in these captures.
    ReservedZero,
    /// tshark prints the ICRC bytes as a big-endian integer; our `icrc` is
    /// the CRC-32 value, which RoCEv2 transmits least significant byte
    /// first (see `ibcm::wire::roce`): tshark's number is `icrc.swap_bytes()`.
    Icrc,
    /// The RDMA CM service ID split: bytes 0-4 (hex), byte 5, bytes 6-7.
    SidPrefix,
    SidProtocol,
    SidPort,
    /// rdma_cm header byte 0, split by tshark into major/minor nibbles.
    IpCmMajor,
    IpCmMinor,
    /// Low nibble of rdma_cm header byte 1.
    IpCmReserved,
    /// Private data after the 36-byte rdma_cm header.
    ConsumerPrivateData,
    /// A disagreement between tshark 4.0 and IBTA Vol 1 Table 106 (REQ;
    /// `off` = 112 for the primary path, 156 for the alternate one).
    ///
    /// IBTA: the flow label is the top 20 bits of the 32-bit word at MAD
    /// bytes `off..off+4`, the packet rate the low 6 bits of byte `off+3`
    /// (above it 2 reserved bits), and the traffic class is byte `off+4`.
    /// That is what the kernel writes (`cm_req_set_primary_flow_label`, a
    /// 20-bit field at bit 0 of `be32` 112 in cm_msgs.h's IBA_FIELD table)
    /// and what `ibcm` decodes.
    ///
    /// tshark 4.0 (`tshark -T json -x` shows the item offsets and masks)
    /// adds the flow label as a **3-byte** item at `off` with the 32-bit
    /// mask 0xFFFFF000, so it shows `(be24(off..off+3) & 0xFFFFF000) >> 12`
    /// = the top 12 bits of those 3 bytes: the 24-bit value sits in the low
    /// three bytes of the 32-bit mask, i.e. the field is shifted one byte
    /// (8 bits) to the right, and the IBTA label loses its low 8 bits
    /// (tshark = ours >> 8). Then "Reserved" is a 1-byte item at `off` with
    /// mask 0xFC0 (= byte `off` >> 6) and the packet rate a 1-byte item at
    /// `off` with mask 0x3F (= byte `off` & 0x3F) instead of byte `off+3`.
    ///
    /// rping.pcap frame 8, bytes 112..116 = `43 a6 20 00`: IBTA gives flow
    /// label 0x43a62 and packet rate 0 (0 = port current, what rdma_cm sends
    /// for RoCE); tshark 4.0 prints "Primary Flow Label: 0x0043a",
    /// "Reserved: 0x01" and "Primary Packet Rate: 0x03". The assertions
    /// check that tshark's numbers are exactly these formulas over the raw
    /// bytes and ours the IBTA ones, so the disagreement is proven.
    FlowLabelTshark(usize),
    /// The tshark 4.0 "Reserved" between flow label and packet rate.
    ReservedAfterFlowLabel(usize),
    PacketRateTshark(usize),
    FrameNo,
    TsNanos,
    Src,
    Dst,
    SrcPort,
    DstPort,
    /// Not compared (a container of other fields, checked one by one).
    Skip,
}

/// `tshark -V` labels, by section (`BTH`, `DETH`, `MAD`, `IB` for lines
/// directly under "InfiniBand", `CM` for the message).
fn stored_label(section: &str, label: &str) -> Option<Cmp> {
    use Cmp::*;
    Some(match (section, label) {
        ("FRAME", "Frame Number") => FrameNo,
        ("FRAME", "Epoch Time") => TsNanos,
        ("IP", "Source Address") => Src,
        ("IP", "Destination Address") => Dst,
        ("UDP", "Source Port") => SrcPort,
        ("UDP", "Destination Port") => DstPort,
        ("BTH", "Opcode") => Int("bth_opcode"),
        ("BTH", "Solicited Event") => Bool("bth_se"),
        ("BTH", "MigReq") => Bool("bth_mig_req"),
        ("BTH", "Pad Count") => Int("bth_pad_count"),
        // Our BTH parser only accepts TVer 0.
        ("BTH", "Header Version") => Const(0),
        ("BTH", "Partition Key") => Int("bth_pkey"),
        ("BTH", "Destination Queue Pair") => Int("bth_dest_qp"),
        ("BTH", "Acknowledge Request") => Bool("bth_ack_req"),
        ("BTH", "Packet Sequence Number") => Int("psn"),
        ("DETH", "Queue Key") => Int("deth_qkey"),
        ("DETH", "Source Queue Pair") => Int("deth_src_qp"),
        ("MAD", "Base Version") => Const(1),
        ("MAD", "Management Class") => Const(7),
        ("MAD", "Class Version") => Const(2),
        ("MAD", "Method") => Int("method"),
        ("MAD", "Status") => Int("mad_status"),
        ("MAD", "Class Specific") => Int("class_specific"),
        ("MAD", "Transaction ID") => Int("tid"),
        ("MAD", "Attribute ID") => Int("attr_id"),
        ("MAD", "Attribute Modifier") => Int("attr_mod"),
        ("MAD", "MAD Data Payload") => MadBytes(24, 232),
        ("IB", "Invariant CRC") => Icrc,
        ("BTH" | "DETH" | "MAD" | "CM", "Reserved" | "Reserved (7 bits)") => ReservedZero,
        ("CM", l) => cm_label(l)?,
        _ => return None,
    })
}

fn cm_label(label: &str) -> Option<Cmp> {
    use Cmp::*;
    Some(match label {
        "Local Communication ID" => Int("local_comm_id"),
        "Remote Communication ID" => Int("remote_comm_id"),
        "ServiceID" => Int("service_id"),
        "Prefix" => SidPrefix,
        "Protocol" => SidProtocol,
        "Destination Port" => SidPort,
        "Local CA GUID" => Int("local_ca_guid"),
        "Local Q_Key" => Int("local_qkey"),
        "Local QPN" => Int("local_qpn"),
        "Responder Resources" => Int("responder_resources"),
        "Local EECN" | "Local EE Context Number" => Int("local_eecn"),
        "Initiator Depth" => Int("initiator_depth"),
        "Remote EECN" => Int("remote_eecn"),
        "Remote CM Response Timeout" => Int("remote_cm_response_timeout"),
        "Transport Service Type" => Int("transport_service_type"),
        "End-to-End Flow Control" | "End-To-End Flow Control" => Bool("end_to_end_flow_control"),
        "Starting PSN" => Int("starting_psn"),
        "Local CM Response Timeout" => Int("local_cm_response_timeout"),
        "Retry Count" => Int("retry_count"),
        "Partition Key" => Int("pkey"),
        "Path Packet Payload MTU" => Int("path_mtu"),
        "RDC Exists" => Bool("rdc_exists"),
        "RNR Retry Count" => Int("rnr_retry_count"),
        "Max CM Retries" => Int("max_cm_retries"),
        "SRQ" => Bool("srq"),
        "Extended Transport" => Int("extended_transport_type"),
        "Primary Local Port LID" => Int("primary_local_lid"),
        "Primary Remote Port LID" => Int("primary_remote_lid"),
        "Primary Local Port GID" => Gid("primary_local_gid"),
        "Primary Remote Port GID" => Gid("primary_remote_gid"),
        "Primary Flow Label" => FlowLabelTshark(112),
        "Primary Packet Rate" => PacketRateTshark(112),
        "Primary Traffic Class" => Int("primary_traffic_class"),
        "Primary Hop Limit" => Int("primary_hop_limit"),
        "Primary SL" => Int("primary_sl"),
        "Primary Subnet Local" => Bool("primary_subnet_local"),
        "Primary Local ACK Timeout" => Int("primary_local_ack_timeout"),
        "Alternate Local Port LID" => Int("alternate_local_lid"),
        "Alternate Remote Port LID" => Int("alternate_remote_lid"),
        "Alternate Local Port GID" => Gid("alternate_local_gid"),
        "Alternate Remote Port GID" => Gid("alternate_remote_gid"),
        "Alternate Flow Label" => FlowLabelTshark(156),
        "Alternate Packet Rate" => PacketRateTshark(156),
        "Alternate Traffic Class" => Int("alternate_traffic_class"),
        "Alternate Hop Limit" => Int("alternate_hop_limit"),
        "Alternate SL" => Int("alternate_sl"),
        "Alternate Subnet Local" => Bool("alternate_subnet_local"),
        "Alternate Local ACK Timeout" => Int("alternate_local_ack_timeout"),
        "IP CM Major Version" => IpCmMajor,
        "IP CM Minor Version" => IpCmMinor,
        "IP CM IP Version" => Int("rdma_cm_ip_version"),
        "IP CM Reserved" => IpCmReserved,
        "IP CM Source Port" => Int("rdma_cm_src_port"),
        "IP CM Source IP" => Ip("rdma_cm_src_addr"),
        "IP CM Destination IP" => Ip("rdma_cm_dst_addr"),
        "IP CM Consumer PrivateData" => ConsumerPrivateData,
        "PrivateData" => Bytes("private_data"),
        "Target ACK Delay" => Int("target_ack_delay"),
        "Failover Accepted" => Int("failover_accepted"),
        "Message REJected" => MsgCode("message_rejected"),
        "Reject Info Length" => Int("ari_length"),
        "Reason" => Int("reason"),
        "Additional Reject Information (ARI)" => Bytes("ari"),
        "Remote QPN/EECN" => Int("remote_qpn"),
        _ => return None,
    })
}

/// tshark field names (`-T json`), for the live comparison.
fn live_field(name: &str) -> Option<Cmp> {
    use Cmp::*;
    Some(match name {
        "frame.number" => FrameNo,
        "frame.time_epoch" => TsNanos,
        "ip.src" | "ipv6.src" => Src,
        "ip.dst" | "ipv6.dst" => Dst,
        "udp.srcport" => SrcPort,
        "udp.dstport" => DstPort,
        "infiniband.bth" | "infiniband.deth" => Skip,
        "infiniband.bth.opcode" => Int("bth_opcode"),
        "infiniband.bth.se" => Bool("bth_se"),
        "infiniband.bth.m" => Bool("bth_mig_req"),
        "infiniband.bth.padcnt" => Int("bth_pad_count"),
        "infiniband.bth.tver" => Const(0),
        "infiniband.bth.p_key" => Int("bth_pkey"),
        "infiniband.bth.destqp" => Int("bth_dest_qp"),
        "infiniband.bth.a" => Bool("bth_ack_req"),
        "infiniband.bth.psn" => Int("psn"),
        "infiniband.deth.q_key" => Int("deth_qkey"),
        "infiniband.deth.srcqp" => Int("deth_src_qp"),
        "infiniband.mad" => MadBytes(0, 256),
        "infiniband.mad.baseversion" => Const(1),
        "infiniband.mad.mgmtclass" => Const(7),
        "infiniband.mad.classversion" => Const(2),
        "infiniband.mad.method" => Int("method"),
        "infiniband.mad.status" => Int("mad_status"),
        "infiniband.mad.classspecific" => Int("class_specific"),
        "infiniband.mad.transactionid" => Int("tid"),
        "infiniband.mad.attributeid" => Int("attr_id"),
        "infiniband.mad.attributemodifier" => Int("attr_mod"),
        "infiniband.mad.data" | "infiniband.smplid.smpdata" => MadBytes(24, 232),
        "infiniband.invariant.crc" => Icrc,
        "infiniband.cm.req" => Int("local_comm_id"),
        "infiniband.cm.req.serviceid" => Int("service_id"),
        "infiniband.cm.req.serviceid.prefix" => SidPrefix,
        "infiniband.cm.req.serviceid.protocol" => SidProtocol,
        "infiniband.cm.req.serviceid.dport" => SidPort,
        "infiniband.cm.req.localcaguid" | "infiniband.cm.rep.localcaguid" => Int("local_ca_guid"),
        "infiniband.cm.req.localqkey" | "infiniband.cm.rep.localqkey" => Int("local_qkey"),
        "infiniband.cm.req.localqpn" | "infiniband.cm.rep.localqpn" => Int("local_qpn"),
        "infiniband.cm.req.responderres" | "infiniband.cm.rep.respres" => {
            Int("responder_resources")
        }
        "infiniband.cm.req.localeecn" | "infiniband.cm.rep.localeecn" => Int("local_eecn"),
        "infiniband.cm.req.initdepth" | "infiniband.cm.rep.initdepth" => Int("initiator_depth"),
        "infiniband.cm.req.remoteeecn" => Int("remote_eecn"),
        "infiniband.cm.req.remoteresptout" => Int("remote_cm_response_timeout"),
        "infiniband.cm.req.transpsvctype" => Int("transport_service_type"),
        "infiniband.cm.req.e2eflowctrl" | "infiniband.cm.rep.e2eflowctrl" => {
            Bool("end_to_end_flow_control")
        }
        "infiniband.cm.req.startpsn" | "infiniband.cm.rep.startpsn" => Int("starting_psn"),
        "infiniband.cm.req.localresptout" => Int("local_cm_response_timeout"),
        "infiniband.cm.req.retrcount" => Int("retry_count"),
        "infiniband.cm.req.pkey" => Int("pkey"),
        "infiniband.cm.req.pppmtu" => Int("path_mtu"),
        "infiniband.cm.req.rdcexist" => Bool("rdc_exists"),
        "infiniband.cm.req.rnrretrcount" | "infiniband.cm.rep.rnrretrcount" => {
            Int("rnr_retry_count")
        }
        "infiniband.cm.req.maxcmretr" => Int("max_cm_retries"),
        "infiniband.cm.req.srq" | "infiniband.cm.rep.srq" => Bool("srq"),
        "infiniband.cm.req.ext_transport" => Int("extended_transport_type"),
        "infiniband.cm.req.prim_locallid" => Int("primary_local_lid"),
        "infiniband.cm.req.prim_remotelid" => Int("primary_remote_lid"),
        "infiniband.cm.req.prim_localgid" | "infiniband.cm.req.prim_localgid_ipv4" => {
            Gid("primary_local_gid")
        }
        "infiniband.cm.req.prim_remotegid" | "infiniband.cm.req.prim_remotegid_ipv4" => {
            Gid("primary_remote_gid")
        }
        "infiniband.cm.req.prim_flowlabel" => FlowLabelTshark(112),
        "infiniband.cm.req.prim_reserved0" => ReservedAfterFlowLabel(112),
        "infiniband.cm.req.prim_pktrate" => PacketRateTshark(112),
        "infiniband.cm.req.prim_tfcclass" => Int("primary_traffic_class"),
        "infiniband.cm.req.prim_hoplim" => Int("primary_hop_limit"),
        "infiniband.cm.req.prim_sl" => Int("primary_sl"),
        "infiniband.cm.req.prim_subnetlocal" => Bool("primary_subnet_local"),
        "infiniband.cm.req.prim_localacktout" => Int("primary_local_ack_timeout"),
        "infiniband.cm.req.alt_locallid" => Int("alternate_local_lid"),
        "infiniband.cm.req.alt_remotelid" => Int("alternate_remote_lid"),
        "infiniband.cm.req.alt_localgid" | "infiniband.cm.req.alt_localgid_ipv4" => {
            Gid("alternate_local_gid")
        }
        "infiniband.cm.req.alt_remotegid" | "infiniband.cm.req.alt_remotegid_ipv4" => {
            Gid("alternate_remote_gid")
        }
        "infiniband.cm.req.alt_flowlabel" => FlowLabelTshark(156),
        "infiniband.cm.req.alt_reserved0" => ReservedAfterFlowLabel(156),
        "infiniband.cm.req.alt_pktrate" => PacketRateTshark(156),
        "infiniband.cm.req.alt_tfcclass" => Int("alternate_traffic_class"),
        "infiniband.cm.req.alt_hoplim" => Int("alternate_hop_limit"),
        "infiniband.cm.req.alt_sl" => Int("alternate_sl"),
        "infiniband.cm.req.alt_subnetlocal" => Bool("alternate_subnet_local"),
        "infiniband.cm.req.alt_localacktout" => Int("alternate_local_ack_timeout"),
        "infiniband.cm.req.private"
        | "infiniband.cm.req.ip_cm"
        | "infiniband.cm.rep.private"
        | "infiniband.cm.rtu.private"
        | "infiniband.cm.rej.private"
        | "infiniband.cm.dreq.private"
        | "infiniband.cm.drsp.private" => Bytes("private_data"),
        "infiniband.cm.req.ip_cm.majv" => IpCmMajor,
        "infiniband.cm.req.ip_cm.minv" => IpCmMinor,
        "infiniband.cm.req.ip_cm.ipv" => Int("rdma_cm_ip_version"),
        "infiniband.cm.req.ip_cm.reserved" => IpCmReserved,
        "infiniband.cm.req.ip_cm.sport" => Int("rdma_cm_src_port"),
        "infiniband.cm.req.ip_cm.sip4" | "infiniband.cm.req.ip_cm.sip6" => Ip("rdma_cm_src_addr"),
        "infiniband.cm.req.ip_cm.dip4" | "infiniband.cm.req.ip_cm.dip6" => Ip("rdma_cm_dst_addr"),
        "infiniband.cm.req.ip_cm.private" => ConsumerPrivateData,
        "infiniband.cm.rep"
        | "infiniband.cm.rtu.localcommid"
        | "infiniband.cm.rej.localcommid"
        | "infiniband.cm.dreq.localcommid"
        | "infiniband.cm.drsp.localcommid" => Int("local_comm_id"),
        "infiniband.cm.rep.remotecommid"
        | "infiniband.cm.rtu.remotecommid"
        | "infiniband.cm.rej.remotecommid"
        | "infiniband.cm.dreq.remotecommid"
        | "infiniband.cm.drsp.remotecommid" => Int("remote_comm_id"),
        "infiniband.cm.rep.tgtackdelay" => Int("target_ack_delay"),
        "infiniband.cm.rep.failoveracc" => Int("failover_accepted"),
        "infiniband.cm.rej.msgrej" => MsgCode("message_rejected"),
        "infiniband.cm.rej.rejinfolen" => Int("ari_length"),
        "infiniband.cm.rej.reason" => Int("reason"),
        "infiniband.cm.rej.ari" => Bytes("ari"),
        "infiniband.cm.req.remoteqpneecn" => Int("remote_qpn"),
        n if n.contains("reserved") => ReservedZero,
        _ => return None,
    })
}

/// tshark value text as an integer: `0x..` hex or decimal, or the last
/// parenthesised part (`Send() (0x03)`, `... SEND only (100)`).
fn tshark_int(v: &str) -> Option<u64> {
    let v = v.trim();
    let v = match (v.rfind('('), v.ends_with(')')) {
        (Some(i), true) => &v[i + 1..v.len() - 1],
        _ => v.split_whitespace().next()?,
    };
    match v.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => v.parse().ok(),
    }
}

fn tshark_bool(v: &str) -> Option<bool> {
    match v {
        "True" => Some(true),
        "False" => Some(false),
        _ => tshark_int(v).map(|n| n != 0),
    }
}

/// tshark bytes text (`00:40:a6`, `0040a6`, or cut: `0040a6…`) as hex and
/// whether it was cut.
fn tshark_hex(v: &str) -> (String, bool) {
    let cut = v.ends_with('…') || v.ends_with("...");
    let h: String = v
        .trim_end_matches('…')
        .trim_end_matches("...")
        .chars()
        .filter(|c| *c != ':')
        .collect();
    (h.to_lowercase(), cut)
}

fn hex_matches(tshark: &str, ours: &str) -> bool {
    let (h, cut) = tshark_hex(tshark);
    if cut {
        ours.starts_with(&h) && !h.is_empty()
    } else {
        ours == h
    }
}

fn tshark_gid(v: &str) -> Option<Gid> {
    if let Ok(ip) = v.parse::<IpAddr>() {
        return Some(Gid::from(ip));
    }
    let (h, cut) = tshark_hex(v);
    if cut || h.len() != 32 {
        return None;
    }
    Some(Gid(unhex(&h).try_into().ok()?))
}

fn epoch_nanos(v: &str) -> Option<u64> {
    let v = v.split_whitespace().next()?;
    let (s, frac) = v.split_once('.').unwrap_or((v, ""));
    let frac = format!("{frac:0<9}");
    Some(s.parse::<u64>().ok()? * 1_000_000_000 + frac.get(..9)?.parse::<u64>().ok()?)
}

fn be(b: &[u8]) -> u64 {
    b.iter().fold(0, |a, &x| (a << 8) | x as u64)
}

/// Checks one tshark value. `Err` explains a mismatch.
fn compare(cmp: Cmp, v: &str, o: &Obj, mad: &[u8; 256]) -> Result<(), String> {
    use Cmp::*;
    let want_int = |ours: u64| -> Result<(), String> {
        match tshark_int(v) {
            Some(t) if t == ours => Ok(()),
            t => Err(format!("tshark {v:?} ({t:?}) != ours {ours:#x}")),
        }
    };
    let pd = || unhex(string(o, "private_data"));
    let prefix = |off: usize| if off == 112 { "primary" } else { "alternate" };
    match cmp {
        Int(k) => want_int(int(o, k)),
        Bool(k) => match tshark_bool(v) {
            Some(t) if t == boolean(o, k) => Ok(()),
            _ => Err(format!("tshark {v:?} != ours {}", boolean(o, k))),
        },
        Gid(k) => match tshark_gid(v) {
            Some(g) if g == gid_of(o, k) => Ok(()),
            _ => Err(format!("tshark {v:?} != ours {}", string(o, k))),
        },
        Ip(k) => match v.parse::<IpAddr>() {
            Ok(ip) if ip.to_string() == string(o, k) => Ok(()),
            _ => Err(format!("tshark {v:?} != ours {}", string(o, k))),
        },
        Bytes(k) => {
            if hex_matches(v, string(o, k)) {
                Ok(())
            } else {
                Err(format!("tshark {v:?} != ours {}", string(o, k)))
            }
        }
        MadBytes(off, len) => {
            if hex_matches(v, &hex(&mad[off..off + len])) {
                Ok(())
            } else {
                Err(format!("tshark {v:?} != MAD bytes {off}..{}", off + len))
            }
        }
        MsgCode(k) => want_int(match string(o, k) {
            "REQ" => 0,
            "REP" => 1,
            "OTHER" => 2,
            s => return Err(format!("bad code {s}")),
        }),
        Const(c) => want_int(c),
        ReservedZero => {
            let (h, _) = tshark_hex(v.trim_start_matches("0x"));
            if h.chars().all(|c| c == '0') {
                Ok(())
            } else {
                Err(format!("reserved field is {v:?}"))
            }
        }
        Icrc => want_int(int(o, "icrc").swap_bytes() >> 32),
        SidPrefix => {
            let (h, _) = tshark_hex(v);
            let ours = format!("{:010x}", int(o, "service_id") >> 24);
            if h == ours {
                Ok(())
            } else {
                Err(format!("tshark {v:?} != ours {ours}"))
            }
        }
        SidProtocol => want_int((int(o, "service_id") >> 16) & 0xff),
        SidPort => want_int(int(o, "service_id") & 0xffff),
        IpCmMajor => want_int(int(o, "rdma_cm_version") >> 4),
        IpCmMinor => want_int(int(o, "rdma_cm_version") & 0xf),
        IpCmReserved => want_int(pd()[1] as u64 & 0xf),
        ConsumerPrivateData => {
            if hex_matches(v, &hex(&pd()[36..])) {
                Ok(())
            } else {
                Err(format!("tshark {v:?} != private_data[36..]"))
            }
        }
        FlowLabelTshark(off) => {
            let ours = int(o, &format!("{}_flow_label", prefix(off)));
            // Ours is IBTA Table 106: top 20 bits of the word at `off`.
            if ours != be(&mad[off..off + 4]) >> 12 {
                return Err(format!("ours {ours:#x} is not IBTA's flow label"));
            }
            // tshark 4.0: 3-byte item at `off`, mask 0xFFFFF000.
            let shifted = (be(&mad[off..off + 3]) & 0xffff_f000) >> 12;
            assert_eq!(shifted, ours >> 8, "tshark's layout drops the low 8 bits");
            match tshark_int(v) {
                Some(t) if t == ours => Ok(()), // a tshark that follows IBTA
                Some(t) if t == shifted => Ok(()),
                t => Err(format!(
                    "tshark flow label {t:?} is neither IBTA's {ours:#x} nor the tshark 4.0 layout's {shifted:#x}"
                )),
            }
        }
        ReservedAfterFlowLabel(off) => want_int(mad[off] as u64 >> 6),
        PacketRateTshark(off) => {
            let ours = int(o, &format!("{}_packet_rate", prefix(off)));
            if ours != mad[off + 3] as u64 & 0x3f {
                return Err(format!("ours {ours} is not IBTA's packet rate"));
            }
            let shifted = mad[off] as u64 & 0x3f;
            match tshark_int(v) {
                Some(t) if t == ours || t == shifted => Ok(()),
                t => Err(format!(
                    "tshark packet rate {t:?} is neither IBTA's {ours} nor the tshark 4.0 layout's {shifted}"
                )),
            }
        }
        FrameNo => want_int(int(o, "frame")),
        TsNanos => match epoch_nanos(v) {
            Some(t) if t == int(o, "ts_nanos") => Ok(()),
            _ => Err(format!("tshark {v:?} != ours {}", int(o, "ts_nanos"))),
        },
        Src => (v == string(o, "src"))
            .then_some(())
            .ok_or(format!("tshark {v} != ours {}", string(o, "src"))),
        Dst => (v == string(o, "dst"))
            .then_some(())
            .ok_or(format!("tshark {v} != ours {}", string(o, "dst"))),
        SrcPort => want_int(int(o, "src_port")),
        DstPort => want_int(int(o, "dst_port")),
        Skip => Ok(()),
    }
}

/// The message a tshark 4.0 CM section names.
fn section_attr(section: &str) -> &'static str {
    let name = section
        .trim_start_matches("CM ")
        .split(" (")
        .next()
        .unwrap();
    match name {
        "ConnectRequest" => "REQ",
        "ConnectReply" => "REP",
        "ReadyToUse" => "RTU",
        "ConnectReject" => "REJ",
        "DisconnectRequest" => "DREQ",
        "DisconnectReply" => "DREP",
        "MsgRcptAck" => "MRA",
        "ServiceIDResReq" => "SIDR_REQ",
        "ServiceIDResReqResp" => "SIDR_REP",
        "LoadAlternatePath" => "LAP",
        "AlternatePathResponse" => "APR",
        _ => panic!("unknown tshark CM section {section}"),
    }
}

/// One frame of `tshark -V` text: (section, label, value) in order, and the
/// CM section's title.
#[derive(Debug, Default)]
struct TsharkFrame {
    number: u64,
    cm_section: Option<String>,
    fields: Vec<(String, String, String)>,
}

fn parse_tshark_text(text: &str) -> Vec<TsharkFrame> {
    let mut frames: Vec<TsharkFrame> = Vec::new();
    let mut top = "";
    let mut section = String::new();
    for line in text.lines() {
        let indent = line.len() - line.trim_start().len();
        let body = line.trim_start();
        if indent == 0 && !body.is_empty() {
            top = if let Some(rest) = body.strip_prefix("Frame ") {
                let n = rest.split(':').next().unwrap().parse().unwrap();
                frames.push(TsharkFrame {
                    number: n,
                    ..TsharkFrame::default()
                });
                "FRAME"
            } else if body.starts_with("Internet Protocol Version") {
                "IP"
            } else if body.starts_with("User Datagram Protocol") {
                "UDP"
            } else if body == "InfiniBand" {
                "IB"
            } else {
                "OTHER"
            };
            section = top.to_string();
            continue;
        }
        let Some(frame) = frames.last_mut() else {
            continue;
        };
        // "1010 0... = Remote CM Response Timeout: 0x14": drop the bit picture.
        let body = match body.split_once(" = ") {
            Some((bits, rest)) if bits.chars().all(|c| "01. ".contains(c)) => rest,
            _ => body,
        };
        if top == "IB" && indent == 4 && !body.contains(": ") {
            // A header: "Base Transport Header", "CM ConnectRequest", ...
            section = if body.starts_with("Base Transport Header") {
                "BTH".into()
            } else if body.starts_with("DETH") {
                "DETH".into()
            } else if body.starts_with("MAD Header") {
                "MAD".into()
            } else if body.starts_with("CM ") {
                frame.cm_section = Some(body.to_string());
                "CM".into()
            } else {
                format!("IB:{body}")
            };
            continue;
        }
        let Some((label, value)) = body.split_once(": ") else {
            continue; // a sub-header such as "IP CM Private Data"
        };
        let sec = if top == "IB" && indent == 4 {
            "IB"
        } else {
            section.as_str()
        };
        if indent == 4 || top == "IB" {
            frame
                .fields
                .push((sec.to_string(), label.to_string(), value.to_string()));
        }
    }
    frames
}

/// One JSON object of ours and the MAD's bytes from `*.mads.txt`.
type OursAndBytes = (Vec<(String, Json)>, [u8; 256]);

/// The JSON objects of one capture by frame number, with the golden bytes.
fn ours_by_frame(name: &str) -> Vec<OursAndBytes> {
    let r = ibcm(&[
        OsStr::new("decode"),
        OsStr::new("--json"),
        vector(name, "pcap").as_os_str(),
    ]);
    assert_eq!(r.code, 0);
    let golden = load_mads(name);
    json_lines(&r.stdout)
        .into_iter()
        .zip(golden)
        .map(|(o, g)| {
            assert_eq!(int(&o, "frame"), g.frame);
            (o, g.bytes)
        })
        .collect()
}

#[test]
fn agrees_with_stored_tshark_output() {
    let mut kinds_seen = BTreeSet::new();
    let mut compared = 0;
    let mut disagreements = 0;
    for name in CAPTURES {
        let text = std::fs::read_to_string(vector(name, "tshark.txt")).unwrap();
        let frames = parse_tshark_text(&text);
        let ours = ours_by_frame(name);
        assert_eq!(
            frames.len(),
            ours.len(),
            "{name}: tshark lists every CM frame"
        );
        for (tf, (o, mad)) in frames.iter().zip(&ours) {
            let ctx = format!("{name} frame {}", tf.number);
            assert_eq!(int(o, "frame"), tf.number, "{ctx}");
            let section = tf.cm_section.as_deref().expect("a CM section");
            assert_eq!(section_attr(section), string(o, "attr"), "{ctx}");
            let mut errors = Vec::new();
            let mut prev_label = "";
            let mut n = 0;
            for (sec, label, value) in &tf.fields {
                let cmp = match (sec.as_str(), label.as_str(), prev_label) {
                    ("CM", "Reserved", "Primary Flow Label") => Cmp::ReservedAfterFlowLabel(112),
                    ("CM", "Reserved", "Alternate Flow Label") => Cmp::ReservedAfterFlowLabel(156),
                    _ => match stored_label(sec, label) {
                        Some(c) => c,
                        None if matches!(sec.as_str(), "FRAME" | "IP" | "UDP" | "OTHER") => {
                            continue;
                        }
                        None => {
                            errors.push(format!("unmapped tshark field [{sec}] {label}: {value}"));
                            continue;
                        }
                    },
                };
                prev_label = label;
                if let Err(e) = compare(cmp, value, o, mad) {
                    errors.push(format!("[{sec}] {label}: {e}"));
                }
                if let Cmp::FlowLabelTshark(off) = cmp {
                    let ours = int(
                        o,
                        &format!(
                            "{}_flow_label",
                            if off == 112 { "primary" } else { "alternate" }
                        ),
                    );
                    // tshark 4.0 is the shifted layout, not IBTA's.
                    let shifted = (be(&mad[off..off + 3]) & 0xffff_f000) >> 12;
                    assert_eq!(tshark_int(value), Some(shifted), "{ctx}: {label}");
                    if shifted != ours {
                        disagreements += 1;
                    }
                }
                if let Cmp::PacketRateTshark(off) = cmp {
                    assert_eq!(
                        tshark_int(value),
                        Some(mad[off] as u64 & 0x3f),
                        "{ctx}: {label}"
                    );
                }
                kinds_seen.insert(format!("{cmp:?}"));
                n += 1;
            }
            assert!(errors.is_empty(), "{ctx}:\n  {}", errors.join("\n  "));
            let minimum = match string(o, "attr") {
                "REQ" => 80,
                "MRA" | "SIDR_REQ" | "SIDR_REP" => 20, // not decoded by tshark 4.0
                _ => 25,
            };
            assert!(n >= minimum, "{ctx}: only {n} fields compared");
            compared += n;
        }
    }
    // The byte-level proof on the first REQ of rping.pcap, spelled out.
    let ours = ours_by_frame("rping");
    let (req, mad) = &ours[0];
    assert_eq!(&mad[112..116], &[0x43, 0xa6, 0x20, 0x00]);
    assert_eq!(int(req, "primary_flow_label"), 0x43a62); // IBTA: 0x43a620 >> 4
    assert_eq!(int(req, "primary_packet_rate"), 0); // IBTA: 0x00 & 0x3f
    let text = std::fs::read_to_string(vector("rping", "tshark.txt")).unwrap();
    assert!(text.contains("= Primary Flow Label: 0x0043a\n"));
    assert!(text.contains("= Primary Packet Rate: 0x03\n"));
    // Every REQ in the vectors has a non-zero low byte of the flow label,
    // so the disagreement shows in all of them.
    assert_eq!(
        disagreements, 5,
        "one per REQ (rping, ucmatose, rej, mra x2)"
    );
    for k in [
        "FlowLabelTshark(112)",
        "PacketRateTshark(112)",
        "ReservedAfterFlowLabel(112)",
        "Icrc",
        "SidPrefix",
        "ConsumerPrivateData",
        "TsNanos",
        "MsgCode(\"message_rejected\")",
        "Int(\"remote_qpn\")",
        "Int(\"target_ack_delay\")",
    ] {
        assert!(kinds_seen.contains(k), "never compared: {k}");
    }
    assert!(compared > 700, "{compared} fields compared");
}

fn tshark_available() -> bool {
    Command::new("tshark")
        .arg("-v")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// Every (key, value) leaf of tshark's `-T json -x` output for one packet,
/// with `_raw` arrays kept as `[hex, offset, length, mask, type]`.
fn json_leaves(v: &Json, out: &mut Vec<(String, Json)>) {
    if let Json::Obj(members) = v {
        for (k, v) in members {
            match v {
                Json::Obj(_) => json_leaves(v, out),
                _ => out.push((k.clone(), v.clone())),
            }
        }
    }
}

#[test]
fn agrees_with_live_tshark() {
    if !tshark_available() {
        eprintln!("note: no tshark on PATH: skipping the live tshark comparison");
        return;
    }
    let mut compared = 0;
    for name in CAPTURES {
        let out = Command::new("tshark")
            .args([
                "-n",
                "-T",
                "json",
                "-x",
                "-Y",
                "infiniband.mad.mgmtclass == 7",
                "-r",
            ])
            .arg(vector(name, "pcap"))
            .output()
            .expect("tshark runs");
        assert!(
            out.status.success(),
            "tshark failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let Json::Arr(packets) = parse_json(&String::from_utf8(out.stdout).unwrap()).unwrap()
        else {
            panic!("tshark -T json is not an array")
        };
        let ours = ours_by_frame(name);
        assert_eq!(packets.len(), ours.len(), "{name}");
        for (p, (o, mad)) in packets.iter().zip(&ours) {
            let ctx = format!("{name} frame {}", int(o, "frame"));
            let mut leaves = Vec::new();
            json_leaves(p, &mut leaves);
            let mut errors = Vec::new();
            let mut unknown = Vec::new();
            let mut n = 0;
            for (k, v) in &leaves {
                if let Some(field) = k.strip_suffix("_raw") {
                    // Where tshark reads the REQ flow label and packet rate.
                    let Json::Arr(raw) = v else { continue };
                    let at = |i: usize| match raw.get(i) {
                        Some(Json::Num(n)) => n.parse::<u64>().ok(),
                        _ => None,
                    };
                    let mad_raw = leaves.iter().find(|(k, _)| k == "infiniband.mad_raw");
                    let Some((_, Json::Arr(mr))) = mad_raw else {
                        continue;
                    };
                    let Some(Json::Num(base)) = mr.get(1) else {
                        continue;
                    };
                    let base: u64 = base.parse().unwrap();
                    let rel = at(1).and_then(|off| off.checked_sub(base));
                    let prim = field == "infiniband.cm.req.prim_flowlabel";
                    let ibta = u32::from_be_bytes(mad[112..116].try_into().unwrap()) >> 12;
                    let tshark = get(&leaves, field).and_then(|v| match v {
                        Json::Str(s) => tshark_int(s),
                        _ => None,
                    });
                    if prim && tshark != Some(ibta as u64) {
                        // The tshark 4.0 item: 3 bytes at MAD offset 112,
                        // mask 0xFFFFF000 (see Cmp::FlowLabelTshark).
                        assert_eq!(
                            (rel, at(2), at(3)),
                            (Some(112), Some(3), Some(0xffff_f000)),
                            "{ctx}"
                        );
                    }
                    if field == "infiniband.cm.req.prim_pktrate"
                        && tshark != Some(mad[115] as u64 & 0x3f)
                    {
                        assert_eq!(
                            (rel, at(2), at(3)),
                            (Some(112), Some(1), Some(0x3f)),
                            "{ctx}"
                        );
                    }
                    continue;
                }
                let Json::Str(v) = v else { continue };
                let cmp = match live_field(k) {
                    Some(c) => c,
                    None if k.starts_with("infiniband") => {
                        unknown.push(k.clone());
                        continue;
                    }
                    None => continue,
                };
                if let Err(e) = compare(cmp, v, o, mad) {
                    errors.push(format!("{k}: {e}"));
                }
                n += 1;
            }
            assert!(errors.is_empty(), "{ctx}:\n  {}", errors.join("\n  "));
            if !unknown.is_empty() {
                // A newer tshark may decode more (MRA, SIDR): report only.
                eprintln!("note: {ctx}: tshark fields not compared: {unknown:?}");
            }
            assert!(n >= 20, "{ctx}: only {n} tshark fields compared");
            compared += n;
        }
    }
    assert!(compared > 700, "{compared}");
}

// ---------------------------------------------------------------------------
// Broken input

/// Offsets of the records of a classic little-endian pcap file.
fn pcap_records(data: &[u8]) -> Vec<(usize, usize)> {
    let mut v = Vec::new();
    let mut off = 24;
    while off + 16 <= data.len() {
        let len = u32::from_le_bytes(data[off + 8..off + 12].try_into().unwrap()) as usize;
        v.push((off, 16 + len));
        off += 16 + len;
    }
    v
}

fn find(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len())
        .position(|w| w == needle)
        .expect("MAD bytes found in the pcap")
}

#[test]
fn bad_files_are_reported_and_skipped() {
    let dir = TempDir::new("decode", "bad");
    let good = std::fs::read(vector("rping", "pcap")).unwrap();
    // Cut inside the record of frame 9 (the REP): frame 8 (REQ) is complete.
    let recs = pcap_records(&good);
    let (rec9, len9) = recs[8];
    let truncated = dir.write("truncated.pcap", &good[..rec9 + len9 / 2]);
    let garbage = dir.write("garbage.pcap", b"this is not a capture file at all\n");
    let empty = dir.write("empty.pcap", b"");
    let missing = dir.0.join("missing.pcap");
    let rej = vector("rej", "pcap");

    for bad in [&truncated, &garbage, &empty, &missing] {
        for json in [false, true] {
            let mut args: Vec<OsString> = vec!["decode".into()];
            if json {
                args.push("--json".into());
            }
            args.push(bad.clone().into_os_string());
            args.push(rej.clone().into_os_string());
            let r = ibcm(&args);
            assert_eq!(r.code, 1, "{}: {}", bad.display(), r.stderr);
            let msg = r
                .stderr
                .lines()
                .find(|l| l.starts_with("ibcm decode: "))
                .unwrap_or_else(|| panic!("no error message: {}", r.stderr));
            assert!(msg.contains(&*bad.to_string_lossy()), "{msg}");
            let off = if bad == &truncated { rec9 } else { 0 };
            assert!(msg.contains(&format!("byte offset {off} ")), "{msg}");
            // The good file after the bad one is decoded in full.
            if json {
                let objs = json_lines(&r.stdout);
                let from_rej: Vec<_> = objs
                    .iter()
                    .filter(|o| string(o, "file") == rej.to_string_lossy())
                    .collect();
                assert_eq!(from_rej.len(), 2);
                for (o, g) in from_rej.iter().zip(load_mads("rej")) {
                    check_golden("rej", &g, o);
                }
                // What came before the cut is still there.
                let before: Vec<_> = objs
                    .iter()
                    .filter(|o| string(o, "file") == bad.to_string_lossy())
                    .collect();
                if bad == &truncated {
                    assert_eq!(before.len(), 1);
                    assert_eq!(string(before[0], "attr"), "REQ");
                    assert_eq!(int(before[0], "frame"), 8);
                } else {
                    assert!(before.is_empty());
                }
            } else {
                assert!(
                    r.stdout.contains("  REJ  tid=0x00000002567b286a  ICRC ok"),
                    "{}",
                    r.stdout
                );
                assert!(
                    r.stdout.contains("stopped by an error at byte offset"),
                    "{}",
                    r.stdout
                );
            }
        }
    }
    // The error text itself, for a missing file and for garbage.
    let r = ibcm(&[OsStr::new("decode"), missing.as_os_str()]);
    assert!(r.stderr.contains("cannot read the file"), "{}", r.stderr);
    let r = ibcm(&[OsStr::new("decode"), garbage.as_os_str()]);
    assert!(
        r.stderr.contains("not a pcap or pcapng file"),
        "{}",
        r.stderr
    );
}

#[test]
fn malformed_mads_are_shown_with_their_error() {
    let dir = TempDir::new("decode", "malformed");
    let mut data = std::fs::read(vector("rej", "pcap")).unwrap();
    let golden = load_mads("rej");
    // REJ with MessageRejected = 3 (reserved).
    let at = find(&data, &golden[1].bytes);
    data[at + 32] = 0xc0;
    let bad_rej = dir.write("bad-rej.pcap", &data);
    // RTU turned into attribute 0x001b (unknown).
    let mut data = std::fs::read(vector("rping", "pcap")).unwrap();
    let at = find(&data, &load_mads("rping")[2].bytes);
    data[at + 17] = 0x1b;
    let bad_attr = dir.write("bad-attr.pcap", &data);

    let r = ibcm(&[
        OsStr::new("decode"),
        OsStr::new("--json"),
        bad_rej.as_os_str(),
    ]);
    assert_eq!(
        r.code, 0,
        "a malformed MAD is not a file error: {}",
        r.stderr
    );
    let objs = json_lines(&r.stdout);
    assert_eq!(objs.len(), 2);
    check_golden("rej", &golden[0], &objs[0]);
    let o = &objs[1];
    assert_eq!(string(o, "attr"), "REJ");
    assert_eq!(
        string(o, "error"),
        "reserved value 3 in REJ.MessageRejected"
    );
    assert!(!boolean(o, "icrc_ok"), "the ICRC no longer matches");
    let mut mad = golden[1].bytes;
    mad[32] = 0xc0;
    assert_eq!(string(o, "mad"), hex(&mad));
    assert!(get(o, "local_comm_id").is_none());
    assert!(
        r.stderr.contains(", 1 malformed, 1 ICRC failures, "),
        "{}",
        r.stderr
    );

    let r = ibcm(&[
        OsStr::new("decode"),
        OsStr::new("--json"),
        bad_attr.as_os_str(),
    ]);
    assert_eq!(r.code, 0);
    let objs = json_lines(&r.stdout);
    assert_eq!(objs.len(), 5);
    let o = &objs[2];
    assert!(get(o, "attr").is_none(), "unknown attribute: no attr key");
    assert_eq!(int(o, "attr_id"), 0x1b);
    assert_eq!(string(o, "error"), "unknown CM attribute 0x001b");
    for (o, g) in objs
        .iter()
        .zip(load_mads("rping"))
        .filter(|(o, _)| get(o, "error").is_none())
    {
        assert_eq!(int(o, "frame"), g.frame);
        assert_eq!(json_to_mad(o).to_bytes(), g.bytes);
    }

    let r = ibcm(&[OsStr::new("decode"), bad_attr.as_os_str()]);
    assert!(
        r.stdout
            .contains("  attr 0x001b  tid=0x000000021857182e  ICRC BAD\n"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout
            .contains("    error: unknown CM attribute 0x001b\n    0000: 01 07 02 03 "),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout
            .contains("(REQ 1, REP 1, DREQ 1, DREP 1, attr 0x001b 1), 1 malformed"),
        "{}",
        r.stdout
    );
    let r = ibcm(&[
        OsStr::new("decode"),
        OsStr::new("--oneline"),
        bad_rej.as_os_str(),
    ]);
    assert!(
        r.stdout.contains("  REJ  (BTH op=0x64 dqp=1 psn=0 pkey=0xffff; DETH qkey=0x80010000 sqp=1; ICRC BAD)  error: reserved value 3 in REJ.MessageRejected\n"),
        "{}",
        r.stdout
    );
}

#[test]
fn mutated_captures_never_panic() {
    let dir = TempDir::new("decode", "mutated");
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut rnd = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut files: Vec<OsString> = Vec::new();
    for (i, name) in CAPTURES.iter().cycle().take(80).enumerate() {
        let mut data = std::fs::read(vector(name, "pcap")).unwrap();
        match i % 4 {
            // Cut anywhere.
            0 => data.truncate(rnd() as usize % data.len()),
            // Flip bytes anywhere (headers, lengths, MADs).
            1 => {
                for _ in 0..1 + rnd() % 8 {
                    let at = rnd() as usize % data.len();
                    data[at] ^= 1 << (rnd() % 8);
                }
            }
            // Scribble over the MADs of the CM frames.
            _ => {
                for g in load_mads(name) {
                    let at = find(&data, &g.bytes);
                    for _ in 0..4 {
                        let j = rnd() as usize % 256;
                        data[at + j] = rnd() as u8;
                    }
                    if i % 4 == 3 {
                        data[at + 32] = rnd() as u8; // code / length bits
                        data[at + 33] = rnd() as u8;
                    }
                }
            }
        }
        files.push(dir.write(&format!("m{i}.pcap"), &data).into_os_string());
    }
    for mode in [None, Some("--json"), Some("--oneline")] {
        let mut args: Vec<OsString> = vec!["decode".into()];
        args.extend(mode.map(OsString::from));
        args.extend(files.iter().cloned());
        let r = ibcm(&args);
        assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
        if mode == Some("--json") {
            for o in json_lines(&r.stdout) {
                // Every line names its file and frame.
                assert!(string(&o, "file").ends_with(".pcap"));
                int(&o, "frame");
            }
            assert_eq!(
                r.stderr.lines().filter(|l| l.contains(" CM MADs")).count(),
                files.len(),
                "one summary per file"
            );
        }
    }
}

#[test]
fn strange_file_names_are_escaped() {
    let dir = TempDir::new("decode", "names");
    let name = "we\"ird\\name\twith\nnewline\u{1}-é-\u{2028}.pcap";
    let p = dir.write(name, std::fs::read(vector("rej", "pcap")).unwrap());
    let r = ibcm(&[
        OsStr::new("decode"),
        OsStr::new("--json"),
        p.as_os_str(),
        p.as_os_str(),
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        r.stdout.lines().count(),
        4,
        "one line per MAD, whatever the name"
    );
    for o in json_lines(&r.stdout) {
        assert_eq!(string(&o, "file"), p.to_string_lossy());
    }
}

/// The CLI writes its JSON with serde_json from `ibcm::decode::frame_fields`;
/// the library's own writer (`frame_json`) gives the same bytes, line for
/// line, in both forms.
#[test]
fn json_is_the_librarys_frame_json() {
    for name in CAPTURES {
        let path = vector(name, "pcap");
        let data = std::fs::read(&path).unwrap();
        let frames: Vec<_> = ibcm::capture::Reader::new(&data)
            .unwrap()
            .map(|p| p.unwrap())
            .filter_map(|p| ibcm::capture::decode_packet(&p).ok())
            .collect();
        assert!(!frames.is_empty(), "{name}");
        for summary in [false, true] {
            let mut args = vec![OsString::from("decode"), "--json".into()];
            if summary {
                args.push("--oneline".into());
            }
            args.push(path.clone().into_os_string());
            let r = ibcm(&args);
            assert_eq!(r.code, 0, "{}", r.stderr);
            let want: Vec<String> = frames
                .iter()
                .map(|f| ibcm::decode::frame_json(f, None, !summary))
                .collect();
            let got: Vec<&str> = r.stdout.lines().collect();
            assert_eq!(got, want, "{name} summary={summary}");
        }
    }
}

#[test]
fn usage_errors_exit_2() {
    for args in [
        &[][..],
        &["frobnicate"],
        &["decode"],
        &["decode", "--bogus", "x.pcap"],
        &["decode", "-x"],
    ] {
        let r = ibcm(args);
        assert_eq!(r.code, 2, "{args:?}");
        assert!(r.stderr.contains("Usage: ibcm"), "{args:?}: {}", r.stderr);
        if args.first() == Some(&"decode") {
            assert!(
                r.stderr
                    .contains("Usage: ibcm decode [--json] [--oneline] FILE..."),
                "{}",
                r.stderr
            );
        }
    }
    // The error names the argument and says what to do.
    let r = ibcm(&["decode", "--bogus", "x.pcap"]);
    assert!(
        r.stderr.contains("unexpected argument '--bogus'") && r.stderr.contains("--help"),
        "{}",
        r.stderr
    );
    let r = ibcm(&["decode"]);
    assert!(r.stderr.contains("<FILE>"), "{}", r.stderr);
    let r = ibcm(&["frobnicate"]);
    assert!(
        r.stderr.contains("unrecognized subcommand 'frobnicate'"),
        "{}",
        r.stderr
    );
    // "--" ends the options: "--json" is then a file name.
    let r = ibcm(&["decode", "--", "--json"]);
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("ibcm decode: --json: "), "{}", r.stderr);
}

#[test]
fn help_exits_0_and_lists_the_commands() {
    for args in [&["--help"][..], &["-h"], &["help"], &["decode", "--help"]] {
        let r = ibcm(args);
        assert_eq!(r.code, 0, "{args:?}");
        if args.first() == Some(&"decode") {
            assert!(
                r.stdout
                    .contains("Usage: ibcm decode [--json] [--oneline] FILE..."),
                "{}",
                r.stdout
            );
            for opt in ["--json", "--oneline", "--summary", "<FILE>"] {
                assert!(r.stdout.contains(opt), "{opt}: {}", r.stdout);
            }
        } else {
            for cmd in [
                "decode",
                "listen",
                "connect",
                "bench",
                "devices",
                "completions",
            ] {
                assert!(
                    r.stdout.contains(&format!("  {cmd} ")),
                    "{cmd}: {}",
                    r.stdout
                );
            }
            // The exit statuses are documented.
            assert!(r.stdout.contains("2  usage error"), "{}", r.stdout);
        }
    }
}

// ---------------------------------------------------------------------------
// Library-level: every attribute renders to JSON that rebuilds it

fn frame_of(mad: [u8; 256]) -> RoceFrame {
    RoceFrame {
        frame: 7,
        ts_nanos: 1_700_000_000_123_456_789,
        src: "fe80::1".parse().unwrap(),
        dst: "10.1.2.3".parse().unwrap(),
        src_port: 49152,
        dst_port: 4791,
        bth: Bth::gsi(0x123456),
        deth: Deth::GSI,
        mad,
        icrc: 0xdead_beef,
        icrc_ok: false,
    }
}

#[test]
fn every_attribute_round_trips_through_json() {
    use ibcm::wire::attr;
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    let mut rnd = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let attrs = attr::ALL;
    for &a in &attrs {
        for round in 0..40 {
            let mut mad = [0u8; 256];
            for b in mad.iter_mut() {
                *b = rnd() as u8;
            }
            mad[..4].copy_from_slice(&[1, 7, 2, if a == attr::CLASS_PORT_INFO { 0x81 } else { 3 }]);
            mad[16..18].copy_from_slice(&a.to_be_bytes());
            let r = rnd();
            match a {
                attr::MRA => mad[32] = (mad[32] & 0x3f) | ((r % 3) as u8) << 6,
                attr::REJ => {
                    mad[32] = (mad[32] & 0x3f) | ((r % 3) as u8) << 6;
                    mad[33] = (mad[33] & 1) | ((r % 73) as u8) << 1;
                }
                attr::SIDR_REP => mad[29] = (r % 73) as u8,
                attr::APR => mad[32] = (r % 73) as u8,
                _ => {}
            }
            if round == 0 && a == attr::REQ {
                // Something in the RDMA CM IP space, with an IPv6 header.
                mad[32..40].copy_from_slice(&0x0000_0000_0106_1c06u64.to_be_bytes());
                mad[164] = 0;
                mad[165] = 0x60;
            }
            let parsed = CmMad::parse(&mad).unwrap_or_else(|e| panic!("{a:#x}: {e}"));
            let f = frame_of(mad);
            let line = ibcm::decode::frame_json(&f, Some("x\"y"), true);
            assert!(!line.contains('\n'));
            let o = parse_line(&line);
            assert_eq!(string(&o, "file"), "x\"y");
            assert_eq!(string(&o, "src"), "fe80::1");
            assert_eq!(int(&o, "psn"), 0x123456);
            assert_eq!(int(&o, "icrc"), 0xdead_beef);
            assert_eq!(int(&o, "ts_nanos"), 1_700_000_000_123_456_789);
            assert_eq!(json_to_mad(&o), parsed, "{a:#x} round {round}");
            for &(key, off, len) in areas(string(&o, "attr")) {
                assert_eq!(string(&o, key), hex(&mad[off..off + len]), "{key}");
            }
            if string(&o, "attr") == "REJ" {
                assert_eq!(
                    string(&o, "reason_text"),
                    ibcm::decode::reject_reason_text(int(&o, "reason") as u16)
                );
            }
            if round == 0 && a == attr::REQ {
                assert_eq!(int(&o, "rdma_cm_ip_version"), 6);
                assert_eq!(int(&o, "rdma_cm_port"), 7174);
                assert_eq!(int(&o, "rdma_cm_port_space"), 0x0106);
                assert!(get(&o, "rdma_cm_src_addr").is_some());
            }
            // Text never panics and names every field JSON has (except the
            // JSON-only texts and collapsed rows).
            let t = ibcm::decode::frame_text(&f, 0);
            assert!(t.starts_with("frame 7 t=+"), "{t}");
            assert!(t.contains("ICRC BAD"));
        }
    }
    // And the malformed case through the library.
    let mut mad = CmMad::parse(&{
        let mut m = [0u8; 256];
        m[..4].copy_from_slice(&[1, 7, 2, 3]);
        m[17] = 0x14;
        m
    })
    .unwrap()
    .to_bytes();
    mad[2] = 1;
    let o = parse_line(&ibcm::decode::frame_json(&frame_of(mad), None, true));
    assert_eq!(string(&o, "attr"), "RTU");
    assert_eq!(string(&o, "error"), "CM class version 1 (expected 2)");
    assert_eq!(string(&o, "mad"), hex(&mad));
}

/// `--summary`: one line per connection of the kernel captures, the JSON
/// document, and the ladder SVG of a selection.
#[test]
fn summary_groups_connections_and_draws_the_ladder() {
    let rej = vector("rej", "pcap");
    let r = ibcm(&[
        OsString::from("decode"),
        "--summary".into(),
        rej.clone().into(),
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(r.stdout.contains("rejected"), "{}", r.stdout);
    assert!(r.stdout.contains("invalid service ID"), "{}", r.stdout);
    let rping = vector("rping", "pcap");
    let r = ibcm(&[
        OsString::from("decode"),
        "--summary".into(),
        "--json".into(),
        rping.clone().into(),
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v: serde_json::Value = serde_json::from_str(r.stdout.trim()).expect("one JSON document");
    let conns = v["connections"].as_array().expect("connections");
    assert_eq!(conns.len(), 1, "{v}");
    assert_eq!(conns[0]["outcome"], "disconnected", "{v}");
    let dir = std::env::temp_dir().join(format!("ibcm-ladder-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let svg = dir.join("ladder.svg");
    let r = ibcm(&[
        OsString::from("decode"),
        "--svg".into(),
        svg.clone().into(),
        "--conn".into(),
        "0".into(),
        rping.into(),
    ]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(
        text.starts_with("<?xml") && text.contains("<svg") && text.trim_end().ends_with("</svg>")
    );
    assert!(
        text.contains("REQ") && text.contains("DREP"),
        "arrows labelled"
    );
    std::fs::remove_dir_all(&dir).unwrap();
    // --conn needs --svg; --oneline and --summary exclude each other.
    for bad in [vec!["--conn", "1"], vec!["--oneline", "--summary"]] {
        let mut args = vec![OsString::from("decode")];
        args.extend(bad.iter().map(OsString::from));
        args.push(rej.clone().into());
        assert_eq!(ibcm(&args).code, 2, "{bad:?}");
    }
}
