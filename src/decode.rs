//! Rendering of the CM MADs found in captures, for `ibcm decode`.
//!
//! Input is a [`RoceFrame`] from [`crate::capture`]; output is either one
//! JSON object on one line ([`frame_json`]) or human text ([`frame_text`],
//! [`frame_summary_line`]). A MAD that [`CmMad::parse`] rejects is still
//! rendered: with what its header says plus the parse error.
//!
//! # JSON
//!
//! One object per MAD, hand-serialized (no serde), keys in a fixed order.
//!
//! Keys present for every MAD:
//!
//! | key | value |
//! |---|---|
//! | `file` | the capture's name, only when the caller passes one |
//! | `frame` | 1-based frame number in the file (as tshark counts) |
//! | `ts_nanos` | capture time, nanoseconds since the Unix epoch |
//! | `src`, `dst` | IP addresses as text |
//! | `src_port`, `dst_port` | UDP ports |
//! | `bth_opcode`, `bth_se`, `bth_mig_req`, `bth_pad_count`, `bth_pkey`, `bth_fecn`, `bth_becn`, `bth_dest_qp`, `bth_ack_req`, `psn` | BTH fields (`psn` is the BTH PSN) |
//! | `deth_qkey`, `deth_src_qp` | DETH fields |
//! | `icrc` | the ICRC as a CRC-32 value: the frame's last four bytes read **little-endian** (tshark prints the same bytes read big-endian, i.e. `icrc.swap_bytes()`) |
//! | `icrc_ok` | whether it matches the ICRC computed from the frame |
//! | `attr` | `ClassPortInfo REQ MRA REJ REP RTU DREQ DREP SIDR_REQ SIDR_REP LAP APR`; absent for an unknown attribute ID |
//! | `attr_id`, `method`, `mad_status`, `class_specific`, `tid`, `attr_mod` | MAD header (numbers) |
//!
//! The MAD header status is `mad_status` and the BTH P_Key `bth_pkey`
//! because `status` (SIDR_REP) and `pkey` (REQ, SIDR_REQ) are message
//! fields: message fields keep the names of the representation structs in
//! [`crate::wire::cm`], and transport/header keys carry a prefix wherever a
//! clash is possible.
//!
//! Then, for a MAD that parses, every field of the message (see
//! [`message_rows`] for the exact list per attribute), named as the repr
//! struct fields (`local_comm_id`, `service_id`, `primary_flow_label`, ...),
//! plus a few derived keys: `reason_text` (REJ, the kernel's
//! `ibcm_reject_msg()` string), `status_text` (SIDR_REP) and
//! `ap_status_text` (APR) (the kernel enum names), and `rdma_cm_*` (REQ and
//! SIDR_REQ whose service ID is in the RDMA CM IP space, see
//! [`rdma_cm_header`]). For a MAD that does not parse: `error` (the parse
//! error as text) and `mad` (the 256 bytes as hex).
//!
//! Values: integers are JSON numbers. 64-bit values (`tid`, `service_id`,
//! GUIDs) are written as plain integers and may exceed 2^53, so a reader
//! that stores JSON numbers as IEEE doubles (JavaScript, `jq` before 1.7)
//! loses their low bits; read them as 64-bit integers (or `jq` 1.7+).
//! Booleans are `true`/`false`, GIDs IPv6 text (`::ffff:10.77.0.2`), byte
//! areas (`private_data`, `ari`, `info`) lowercase hex of the **whole
//! fixed-size area**, the 2-bit message codes (`message_rejected`,
//! `message_mraed`) `"REQ"`, `"REP"` or `"OTHER"`.

use std::fmt::Write as _;
use std::net::IpAddr;

use crate::capture::RoceFrame;
use crate::cma;
use crate::wire::{
    self, CmMad, CmMsg, FieldRef, FieldValue, Gid, MadHeader, ReqPath, Show, attr, hex, method,
};

// ---------------------------------------------------------------------------
// Field model shared by the JSON and the text renderers

/// A field value, typed for both renderers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// An integer: a JSON number; in text hex with this many digits.
    Hex(u64, usize),
    /// An integer: a JSON number; decimal in text.
    Dec(u64),
    Bool(bool),
    Text(String),
    Gid(Gid),
    Ip(IpAddr),
    /// A fixed-size byte area: hex of all of it in JSON, trimmed in text.
    Bytes(Vec<u8>),
}

/// One named field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// The JSON key and the name shown in text.
    pub name: &'static str,
    pub value: Value,
    /// Explanation appended in text (` (4.29 s)`); not in JSON.
    pub note: Option<String>,
    /// Emitted in JSON only (text shows the information as a note).
    pub json_only: bool,
}

impl Field {
    fn new(name: &'static str, value: Value) -> Field {
        Field {
            name,
            value,
            note: None,
            json_only: false,
        }
    }
    fn note(mut self, note: impl Into<String>) -> Field {
        self.note = Some(note.into());
        self
    }
    fn note_opt(mut self, note: Option<String>) -> Field {
        self.note = note;
        self
    }
    fn json_only(mut self) -> Field {
        self.json_only = true;
        self
    }
}

/// A group of fields shown on one text line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub fields: Vec<Field>,
    /// When set, text shows this line instead of the fields (JSON always
    /// has the fields).
    pub text: Option<String>,
}

impl Row {
    fn new(fields: Vec<Field>) -> Row {
        Row { fields, text: None }
    }
}

fn hx(name: &'static str, v: impl Into<u64>, digits: usize) -> Field {
    Field::new(name, Value::Hex(v.into(), digits))
}
fn dec(name: &'static str, v: impl Into<u64>) -> Field {
    Field::new(name, Value::Dec(v.into()))
}
fn flag(name: &'static str, v: bool) -> Field {
    Field::new(name, Value::Bool(v))
}
fn text(name: &'static str, v: impl Into<String>) -> Field {
    Field::new(name, Value::Text(v.into()))
}
fn gid(name: &'static str, g: Gid) -> Field {
    Field::new(name, Value::Gid(g))
}
fn bytes(name: &'static str, b: &[u8]) -> Field {
    Field::new(name, Value::Bytes(b.to_vec()))
}

// ---------------------------------------------------------------------------
// Names and units

/// The kernel's `ibcm_reject_msg()` text for a REJ reason.
pub fn reject_reason_text(reason: u16) -> &'static str {
    wire::rej_reason::text_str(reason as i64)
}

/// `enum ib_cm_sidr_status` name of a SIDR_REP status.
pub fn sidr_status_text(status: u8) -> &'static str {
    wire::sidr_status::name(status)
}

/// `enum ib_cm_apr_status` name of an APR status.
pub fn apr_status_text(status: u8) -> &'static str {
    wire::apr_status::name(status)
}

/// `enum ib_rate` value as text.
fn rate_text(rate: u8) -> Option<&'static str> {
    Some(match rate {
        0 => "port current",
        2 => "2.5 Gb/s",
        3 => "10 Gb/s",
        4 => "30 Gb/s",
        5 => "5 Gb/s",
        6 => "20 Gb/s",
        7 => "40 Gb/s",
        8 => "60 Gb/s",
        9 => "80 Gb/s",
        10 => "120 Gb/s",
        11 => "14 Gb/s",
        12 => "56 Gb/s",
        13 => "112 Gb/s",
        14 => "168 Gb/s",
        15 => "25 Gb/s",
        16 => "100 Gb/s",
        17 => "200 Gb/s",
        18 => "300 Gb/s",
        19 => "28 Gb/s",
        20 => "50 Gb/s",
        21 => "400 Gb/s",
        22 => "600 Gb/s",
        23 => "800 Gb/s",
        25 => "1600 Gb/s",
        _ => return None,
    })
}

/// `enum ib_mtu` value in bytes.
fn mtu_text(mtu: u8) -> Option<String> {
    let bytes = match mtu {
        1 => 256,
        2 => 512,
        3 => 1024,
        4 => 2048,
        5 => 4096,
        6 => 8192,
        7 => 10240,
        _ => return None,
    };
    Some(format!("{bytes} bytes"))
}

fn transport_text(t: u8) -> &'static str {
    match t {
        0 => "RC",
        1 => "UC",
        2 => "RD",
        _ => "extended",
    }
}

fn failover_text(f: u8) -> &'static str {
    match f {
        0 => "accepted",
        1 => "rejected: unsupported",
        2 => "rejected",
        _ => "reserved",
    }
}

/// The IBTA timeout encoding `4.096 us * 2^t` as readable text.
pub fn timeout_text(t: u8) -> String {
    let ns = 4096u64 << t.min(31);
    duration_text(ns)
}

fn duration_text(ns: u64) -> String {
    let ns = ns as f64;
    if ns < 1e6 {
        format!("{:.1} us", ns / 1e3)
    } else if ns < 1e9 {
        format!("{:.2} ms", ns / 1e6)
    } else if ns < 3600e9 {
        format!("{:.2} s", ns / 1e9)
    } else {
        format!("{:.1} h", ns / 3600e9)
    }
}

// ---------------------------------------------------------------------------
// RDMA CM IP private-data header

/// The rdma_cm IP-addressing header at the start of a REQ / SIDR_REQ's
/// private data (IBTA Annex A11; kernel `struct cma_hdr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RdmaCmHeader {
    /// Bits 31..16 of the service ID: 0x0106 TCP, 0x0111 UDP, 0x013f IB.
    pub port_space: u16,
    /// Low 16 bits of the service ID: the passive side's port.
    pub port: u16,
    /// Private data byte 0 (0 is the only version rdma_cm accepts).
    pub cma_version: u8,
    /// Top nibble of private data byte 1 (4 or 6).
    pub ip_version: u8,
    /// Private data bytes 2-3: the active side's port.
    pub src_port: u16,
    /// Bytes 4-19 / 20-35, when `ip_version` is 4 (address in the last 4
    /// bytes) or 6.
    pub src_addr: Option<IpAddr>,
    pub dst_addr: Option<IpAddr>,
}

/// Decodes the rdma_cm header when `service_id` is in the RDMA CM IP space
/// (top 40 bits 0x0000000001).
pub fn rdma_cm_header(service_id: u64, private_data: &[u8]) -> Option<RdmaCmHeader> {
    if service_id >> 24 != 1 {
        return None;
    }
    let h = cma::RawHeader::read(private_data)?;
    Some(RdmaCmHeader {
        port_space: (service_id >> 16) as u16,
        port: service_id as u16,
        cma_version: h.cma_version,
        ip_version: h.ip_version,
        src_port: h.src_port,
        src_addr: h.src,
        dst_addr: h.dst,
    })
}

fn service_id_note(service_id: u64) -> Option<String> {
    if service_id >> 24 == 1 {
        Some(format!(
            "RDMA CM {} port {}",
            cma::port_space::name((service_id >> 16) as u16),
            service_id as u16
        ))
    } else {
        None
    }
}

fn rdma_cm_row(service_id: u64, private_data: &[u8]) -> Option<Row> {
    let h = rdma_cm_header(service_id, private_data)?;
    let mut fields = vec![
        dec("rdma_cm_port_space", h.port_space),
        dec("rdma_cm_port", h.port),
        dec("rdma_cm_version", h.cma_version),
        dec("rdma_cm_ip_version", h.ip_version),
        dec("rdma_cm_src_port", h.src_port),
    ];
    let ps = cma::port_space::name(h.port_space);
    let line = match (h.src_addr, h.dst_addr) {
        (Some(s), Some(d)) => {
            fields.push(Field::new("rdma_cm_src_addr", Value::Ip(s)));
            fields.push(Field::new("rdma_cm_dst_addr", Value::Ip(d)));
            format!(
                "rdma_cm: {ps} {} -> {} (cma_version={} ip_version={})",
                sock_text(s, h.src_port),
                sock_text(d, h.port),
                h.cma_version,
                h.ip_version
            )
        }
        _ => format!(
            "rdma_cm: {ps} port {}: no valid IP header in the private data (cma_version={} ip_version={})",
            h.port, h.cma_version, h.ip_version
        ),
    };
    Some(Row {
        fields,
        text: Some(line),
    })
}

fn sock_text(ip: IpAddr, port: u16) -> String {
    match ip {
        IpAddr::V4(a) => format!("{a}:{port}"),
        IpAddr::V6(a) => format!("[{a}]:{port}"),
    }
}

// ---------------------------------------------------------------------------
// Message fields

/// One declared field as the renderers show it: the value typed by the
/// field's [`Show`] with its note, plus the derived JSON-only `*_text` key
/// of the three status/reason codes.
fn shown(f: &FieldRef<'_>, out: &mut Vec<Field>) {
    let n = match f.value {
        FieldValue::Uint(n, _) => n,
        FieldValue::Bool(b) => return out.push(flag(f.name, b)),
        FieldValue::Code(c) => return out.push(text(f.name, c.name())),
        FieldValue::Gid(g) => return out.push(gid(f.name, g)),
        FieldValue::Bytes(b) => return out.push(bytes(f.name, b)),
    };
    let small = n as u8;
    let field = match f.show {
        Show::Hex | Show::Plain | Show::Method => {
            let FieldValue::Uint(_, bits) = f.value else {
                unreachable!()
            };
            let field = hx(f.name, n, bits.div_ceil(4) as usize);
            if f.show == Show::Method {
                field.note(method::name(small))
            } else {
                field
            }
        }
        Show::Dec => dec(f.name, n),
        Show::Timeout => dec(f.name, n).note(timeout_text(small)),
        Show::Rate => dec(f.name, n).note_opt(rate_text(small).map(str::to_string)),
        Show::Mtu => dec(f.name, n).note_opt(mtu_text(small)),
        Show::Transport => dec(f.name, n).note(transport_text(small)),
        Show::ExtTransport => dec(f.name, n).note_opt((n == 1).then(|| "XRC".to_string())),
        Show::RnrRetry => dec(f.name, n).note_opt((n == 7).then(|| "infinite".to_string())),
        Show::Failover => dec(f.name, n).note(failover_text(small)),
        Show::ServiceId => hx(f.name, n, 16).note_opt(service_id_note(n)),
        Show::RejReason => {
            let t = reject_reason_text(n as u16);
            out.push(dec(f.name, n).note(t));
            text("reason_text", t).json_only()
        }
        Show::SidrStatus => {
            let t = sidr_status_text(small);
            out.push(dec(f.name, n).note(t));
            text("status_text", t).json_only()
        }
        Show::AprStatus => {
            let t = apr_status_text(small);
            out.push(dec(f.name, n).note(t));
            text("ap_status_text", t).json_only()
        }
    };
    out.push(field);
}

/// Every field of a message, grouped in the rows the text output prints.
///
/// JSON keys per attribute, in order:
///
/// * REQ: `local_comm_id service_id local_ca_guid vendor_id local_qpn
///   local_qkey starting_psn transport_service_type extended_transport_type
///   end_to_end_flow_control srq responder_resources initiator_depth
///   local_eecn remote_eecn rdc_exists sap_supported
///   remote_cm_response_timeout local_cm_response_timeout max_cm_retries
///   pkey path_mtu retry_count rnr_retry_count` then for `primary_` and
///   `alternate_`: `local_lid remote_lid local_gid remote_gid flow_label
///   packet_rate traffic_class hop_limit sl subnet_local local_ack_timeout`,
///   then `private_data` and, in the RDMA CM IP space, `rdma_cm_port_space
///   rdma_cm_port rdma_cm_version rdma_cm_ip_version rdma_cm_src_port`
///   (+ `rdma_cm_src_addr rdma_cm_dst_addr` when the IP version is 4 or 6).
/// * MRA: `local_comm_id remote_comm_id message_mraed service_timeout
///   private_data`.
/// * REJ: `local_comm_id remote_comm_id message_rejected reason reason_text
///   ari_length ari private_data`.
/// * REP: `local_comm_id remote_comm_id local_ca_guid vendor_id local_qpn
///   local_qkey starting_psn local_eecn responder_resources initiator_depth
///   target_ack_delay failover_accepted end_to_end_flow_control
///   rnr_retry_count srq private_data`.
/// * RTU, DREP: `local_comm_id remote_comm_id private_data`; DREQ: `local_comm_id
///   remote_comm_id remote_qpn private_data`.
/// * SIDR_REQ: `request_id pkey service_id private_data` (+ `rdma_cm_*` as REQ).
/// * SIDR_REP: `request_id status status_text qpn qkey service_id vendor_id
///   info_length info private_data`.
/// * LAP: `local_comm_id remote_comm_id remote_qpn remote_cm_response_timeout`,
///   the eleven `alternate_*` path keys, `private_data`.
/// * APR: `local_comm_id remote_comm_id ap_status ap_status_text info_length
///   info private_data`.
/// * ClassPortInfo: `base_version class_version capability_mask
///   capability_mask2 resp_time_value redirect_gid redirect_tc redirect_sl
///   redirect_fl redirect_lid redirect_pkey redirect_qp redirect_qkey
///   trap_gid trap_tc trap_sl trap_fl trap_lid trap_pkey trap_hl trap_qp
///   trap_qkey`.
pub fn message_rows(msg: &CmMsg) -> Vec<Row> {
    let mut rows: Vec<Row> = msg
        .rows()
        .iter()
        .map(|r| {
            let mut fields = Vec::with_capacity(r.len() + 1);
            for f in r {
                shown(f, &mut fields);
            }
            Row::new(fields)
        })
        .collect();
    match msg {
        CmMsg::Req(r) => {
            if r.alternate == ReqPath::default() {
                // Two text lines for the all-zero alternate path: one says
                // so, the other is left out (JSON keeps every field). A LAP
                // shows its proposed path even when it is all zero.
                let at = rows.iter().position(|row| {
                    row.fields.first().map(|f| f.name) == Some("alternate_local_lid")
                });
                if let Some(i) = at {
                    rows[i].text =
                        Some("alternate path: none (all alternate path fields zero)".into());
                    rows[i + 1].text = Some(String::new());
                }
            }
            rows.extend(rdma_cm_row(r.service_id, &r.private_data));
        }
        CmMsg::SidrReq(m) => rows.extend(rdma_cm_row(m.service_id, &m.private_data)),
        _ => {}
    }
    rows
}

// ---------------------------------------------------------------------------
// Common (per-frame) fields

/// The MAD header of a frame (it always has 256 bytes, so this cannot fail).
fn header_of(f: &RoceFrame) -> MadHeader {
    MadHeader::parse(&f.mad).unwrap_or_default()
}

/// The attribute name, or `attr 0x001b` for an unknown attribute ID.
pub fn attr_label(attr_id: u16) -> String {
    match attr::name(attr_id) {
        Some(n) => n.to_string(),
        None => format!("attr {attr_id:#06x}"),
    }
}

/// BTH fields, then DETH and ICRC fields (two text lines).
fn transport_rows(f: &RoceFrame) -> [Vec<Field>; 2] {
    let mut bth = Vec::with_capacity(10);
    for field in f.bth.rows().iter().flatten() {
        shown(field, &mut bth);
    }
    let mut deth = Vec::with_capacity(4);
    for field in f.deth.rows().iter().flatten() {
        shown(field, &mut deth);
    }
    deth.extend([
        hx("icrc", f.icrc, 8).note(if f.icrc_ok { "ok" } else { "BAD" }),
        flag("icrc_ok", f.icrc_ok).json_only(),
    ]);
    [bth, deth]
}

/// The MAD header as `ibcm decode` shows it: the attribute's name when it
/// has one, then every line of [`MadHeader::rows`] but the first (the
/// class, which a CM MAD's parse checks).
fn header_fields(h: &MadHeader) -> Vec<Field> {
    let mut v = Vec::with_capacity(7);
    if let Some(n) = attr::name(h.attr_id) {
        v.push(text("attr", n));
    }
    for field in h.rows().iter().skip(1).flatten() {
        shown(field, &mut v);
    }
    v
}

// ---------------------------------------------------------------------------
// JSON

/// Appends `s` as a JSON string literal (quotes included).
pub fn json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            // Other controls, DEL and the two JavaScript line terminators.
            c if (c as u32) < 0x20 || c == '\u{7f}' || c == '\u{2028}' || c == '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// A JSON object written key by key.
#[derive(Debug, Clone)]
pub struct JsonObject {
    buf: String,
    empty: bool,
}

impl Default for JsonObject {
    fn default() -> Self {
        Self::new()
    }
}

impl JsonObject {
    pub fn new() -> JsonObject {
        JsonObject {
            buf: String::from("{"),
            empty: true,
        }
    }
    fn key(&mut self, k: &str) {
        if !self.empty {
            self.buf.push(',');
        }
        self.empty = false;
        json_string(&mut self.buf, k);
        self.buf.push(':');
    }
    pub fn str(&mut self, k: &str, v: &str) -> &mut Self {
        self.key(k);
        json_string(&mut self.buf, v);
        self
    }
    pub fn uint(&mut self, k: &str, v: u64) -> &mut Self {
        self.key(k);
        let _ = write!(self.buf, "{v}");
        self
    }
    pub fn bool(&mut self, k: &str, v: bool) -> &mut Self {
        self.key(k);
        self.buf.push_str(if v { "true" } else { "false" });
        self
    }
    /// Writes `json` as the value as it is: the caller guarantees it is one
    /// well-formed JSON value (a nested object or array, `null`, ...).
    pub fn raw(&mut self, k: &str, json: &str) -> &mut Self {
        self.key(k);
        self.buf.push_str(json);
        self
    }
    /// Writes a [`Field`] (its JSON form; notes are not written).
    pub fn field(&mut self, f: &Field) -> &mut Self {
        match &f.value {
            Value::Hex(v, _) | Value::Dec(v) => self.uint(f.name, *v),
            Value::Bool(b) => self.bool(f.name, *b),
            Value::Text(s) => self.str(f.name, s),
            Value::Gid(g) => self.str(f.name, &g.to_string()),
            Value::Ip(ip) => self.str(f.name, &ip.to_string()),
            Value::Bytes(b) => self.str(f.name, &hex(b)),
        }
    }
    pub fn finish(mut self) -> String {
        self.buf.push('}');
        self.buf
    }
}

/// The keys and values of one CM MAD's JSON object, in order: what
/// [`frame_json`] writes (and what the CLI serialises).
///
/// `file` adds a `file` key first; `with_message` false leaves out the
/// message fields (the `--summary` form: frame, transport and MAD header
/// keys only, plus `error` and `mad` for a malformed MAD). Every field's
/// JSON form follows its [`Value`]: integers as numbers, `Bool` as a
/// boolean, `Text`/`Gid`/`Ip` as strings, `Bytes` as a hex string.
pub fn frame_fields(f: &RoceFrame, file: Option<&str>, with_message: bool) -> Vec<Field> {
    let mut v = Vec::with_capacity(64);
    if let Some(file) = file {
        v.push(text("file", file));
    }
    v.extend([
        dec("frame", f.frame),
        dec("ts_nanos", f.ts_nanos),
        Field::new("src", Value::Ip(f.src)),
        Field::new("dst", Value::Ip(f.dst)),
        dec("src_port", f.src_port),
        dec("dst_port", f.dst_port),
    ]);
    v.extend(transport_rows(f).into_iter().flatten());
    v.extend(header_fields(&header_of(f)));
    match CmMad::parse(&f.mad) {
        Ok(m) => {
            if with_message {
                v.extend(message_rows(&m.msg).into_iter().flat_map(|r| r.fields));
            }
        }
        Err(e) => {
            v.push(text("error", e.to_string()));
            v.push(Field::new("mad", Value::Bytes(f.mad.to_vec())));
        }
    }
    v
}

/// One CM MAD of a capture as one line of JSON (no trailing newline): the
/// [`frame_fields`] as one object.
pub fn frame_json(f: &RoceFrame, file: Option<&str>, with_message: bool) -> String {
    let mut o = JsonObject::new();
    for field in frame_fields(f, file, with_message) {
        o.field(&field);
    }
    o.finish()
}

// ---------------------------------------------------------------------------
// Text

/// `YYYY-MM-DD HH:MM:SS.nnnnnnnnn UTC` of a Unix time in nanoseconds.
pub fn utc_text(ts_nanos: u64) -> String {
    let secs = ts_nanos / 1_000_000_000;
    let nanos = ts_nanos % 1_000_000_000;
    let days = (secs / 86_400) as i64;
    let sod = secs % 86_400;
    // Days since 1970-01-01 to a proleptic Gregorian date (H. Hinnant's
    // civil_from_days).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{nanos:09} UTC",
        sod / 3600,
        sod / 60 % 60,
        sod % 60
    )
}

/// `+S.mmms`: the time since `t0_nanos`, rounded to the millisecond.
pub fn relative_time_text(ts_nanos: u64, t0_nanos: u64) -> String {
    let (sign, d) = if ts_nanos >= t0_nanos {
        ('+', ts_nanos - t0_nanos)
    } else {
        ('-', t0_nanos - ts_nanos)
    };
    let ms = (d + 500_000) / 1_000_000;
    format!("{sign}{}.{:03}s", ms / 1000, ms % 1000)
}

fn endpoint(ip: IpAddr, port: u16) -> String {
    sock_text(ip, port)
}

fn value_text(v: &Value) -> String {
    match v {
        Value::Hex(n, digits) => format!("{:#0w$x}", n, w = digits + 2),
        Value::Dec(n) => n.to_string(),
        Value::Bool(b) => u8::from(*b).to_string(),
        Value::Text(s) => s.clone(),
        Value::Gid(g) => g.to_string(),
        Value::Ip(ip) => ip.to_string(),
        Value::Bytes(b) => {
            let used = b.iter().rposition(|&x| x != 0).map_or(0, |i| i + 1);
            if used == 0 {
                format!("(all {} bytes zero)", b.len())
            } else if used == b.len() {
                format!("{} ({} bytes)", hex(b), b.len())
            } else {
                format!(
                    "{} ({} of {} bytes, rest zero)",
                    hex(&b[..used]),
                    used,
                    b.len()
                )
            }
        }
    }
}

fn field_text(f: &Field) -> String {
    let mut s = format!("{}={}", f.name, value_text(&f.value));
    if let Some(n) = &f.note {
        let _ = write!(s, " ({n})");
    }
    s
}

fn push_row(out: &mut String, fields: &[Field]) {
    let parts: Vec<String> = fields
        .iter()
        .filter(|f| !f.json_only)
        .map(field_text)
        .collect();
    if !parts.is_empty() {
        out.push_str("    ");
        out.push_str(&parts.join(" "));
        out.push('\n');
    }
}

/// What the summary line and the text form of a MAD both begin with:
/// `frame N t=+S.SSSs SRC -> DST  ATTR`.
fn frame_head(f: &RoceFrame, t0_nanos: u64) -> String {
    format!(
        "frame {} t={} {} -> {}  {}",
        f.frame,
        relative_time_text(f.ts_nanos, t0_nanos),
        endpoint(f.src, f.src_port),
        endpoint(f.dst, f.dst_port),
        attr_label(header_of(f).attr_id),
    )
}

/// The one-line form of a MAD (what `--summary` prints), the format of the
/// `tests/vectors/*.summary.txt` files:
///
/// `frame 8 t=+0.000s 10.77.0.2:55410 -> 10.77.0.1:4791  REQ  (BTH op=0x64
/// dqp=1 psn=0 pkey=0xffff; DETH qkey=0x80010000 sqp=1; ICRC ok)`
///
/// `t` is relative to `t0_nanos` (the caller passes the first CM MAD's
/// time). A malformed MAD gets `  error: ...` appended.
pub fn frame_summary_line(f: &RoceFrame, t0_nanos: u64) -> String {
    let mut s = format!(
        "{}  (BTH op={:#04x} dqp={} psn={} pkey={:#06x}; DETH qkey={:#010x} sqp={}; ICRC {})",
        frame_head(f, t0_nanos),
        f.bth.opcode,
        f.bth.dest_qp,
        f.bth.psn,
        f.bth.pkey,
        f.deth.q_key,
        f.deth.src_qp,
        if f.icrc_ok { "ok" } else { "BAD" },
    );
    if let Err(e) = CmMad::parse(&f.mad) {
        let _ = write!(s, "  error: {e}");
    }
    s
}

/// A MAD as readable text: a header line, then indented `name=value` lines
/// (names as the JSON keys). Ends with a newline.
pub fn frame_text(f: &RoceFrame, t0_nanos: u64) -> String {
    let h = header_of(f);
    let mut out = format!(
        "{}  tid={:#018x}  ICRC {}\n",
        frame_head(f, t0_nanos),
        h.tid,
        if f.icrc_ok { "ok" } else { "BAD" },
    );
    // The header's fields but those of the line above.
    let mut line = vec![text("time", utc_text(f.ts_nanos))];
    line.extend(
        header_fields(&h)
            .into_iter()
            .filter(|x| !matches!(x.name, "attr" | "attr_id" | "tid")),
    );
    push_row(&mut out, &line);
    for row in transport_rows(f) {
        push_row(&mut out, &row);
    }
    match CmMad::parse(&f.mad) {
        Ok(m) => {
            for row in message_rows(&m.msg) {
                match &row.text {
                    Some(t) if t.is_empty() => {}
                    Some(t) => {
                        out.push_str("    ");
                        out.push_str(t);
                        out.push('\n');
                    }
                    None => push_row(&mut out, &row.fields),
                }
            }
        }
        Err(e) => {
            let _ = writeln!(out, "    error: {e}");
            for (i, chunk) in f.mad.chunks(16).enumerate() {
                let _ = write!(out, "    {:04x}:", i * 16);
                for b in chunk {
                    let _ = write!(out, " {b:02x}");
                }
                out.push('\n');
            }
        }
    }
    out
}

/// Parses the MAD of a frame (a convenience for callers that count).
pub fn parse(f: &RoceFrame) -> wire::Result<CmMad> {
    CmMad::parse(&f.mad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_escapes() {
        let mut s = String::new();
        json_string(&mut s, "a\"b\\c\nd\u{1}e\u{7f}\u{2028}é");
        assert_eq!(s, r#""a\"b\\c\nd\u0001e\u007f\u2028é""#);
        let mut o = JsonObject::new();
        o.uint("n", u64::MAX).bool("b", false).str("s", "x");
        assert_eq!(
            o.finish(),
            r#"{"n":18446744073709551615,"b":false,"s":"x"}"#
        );
        assert_eq!(JsonObject::new().finish(), "{}");
    }

    #[test]
    fn times() {
        // tshark: "Nov 29, 2026 09:49:55.259453000 UTC" (rping.pcap frame 8).
        assert_eq!(
            utc_text(1_795_945_795_259_453_000),
            "2026-11-29 09:49:55.259453000 UTC"
        );
        assert_eq!(utc_text(0), "1970-01-01 00:00:00.000000000 UTC");
        assert_eq!(
            utc_text(951_782_400_000_000_001),
            "2000-02-29 00:00:00.000000001 UTC"
        );
        assert_eq!(relative_time_text(1_028_763_000, 1_000_000_000), "+0.029s");
        assert_eq!(relative_time_text(7_232_000_000, 1_000_000_000), "+6.232s");
        assert_eq!(relative_time_text(1, 2_000_000), "-0.002s");
        assert_eq!(timeout_text(0), "4.1 us");
        assert_eq!(timeout_text(20), "4.29 s");
        assert_eq!(timeout_text(19), "2.15 s");
        assert_eq!(timeout_text(31), "2.4 h");
    }

    #[test]
    fn rdma_cm() {
        let mut pd = [0u8; 92];
        pd[..4].copy_from_slice(&[0x00, 0x40, 0xa6, 0x24]);
        pd[16..20].copy_from_slice(&[10, 77, 0, 2]);
        pd[32..36].copy_from_slice(&[10, 77, 0, 1]);
        let h = rdma_cm_header(0x0000_0000_0106_1c06, &pd).unwrap();
        assert_eq!((h.port_space, h.port, h.src_port), (0x0106, 7174, 0xa624));
        assert_eq!(h.src_addr.unwrap().to_string(), "10.77.0.2");
        assert_eq!(h.dst_addr.unwrap().to_string(), "10.77.0.1");
        assert!(rdma_cm_header(0x0000_0000_0002_1c06, &pd).is_none());
        assert!(rdma_cm_header(0x1000_0000_0106_1c06, &pd).is_none());
        pd[1] = 0x50;
        assert_eq!(rdma_cm_header(0x0106_1c06, &pd).unwrap().src_addr, None);
    }

    #[test]
    fn reject_texts() {
        assert_eq!(reject_reason_text(8), "invalid service ID");
        assert_eq!(reject_reason_text(0), "unrecognized reason");
        assert_eq!(reject_reason_text(34), "unrecognized reason");
        assert_eq!(reject_reason_text(35), "vendor option is not supported");
        assert_eq!(reject_reason_text(36), "unrecognized reason");
    }
}
