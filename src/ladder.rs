//! Connection ladders: the CM MADs of a capture grouped into connections.
//!
//! [`summarize`] takes the frames of a capture ([`crate::capture`]) and
//! returns a [`Summary`]: one [`Connection`] per CM connection (or SIDR
//! exchange) with its endpoints, its ordered messages, step latencies,
//! outcome, retransmissions and duplicates; then totals by outcome and
//! per-step latency percentiles. [`Summary::to_text`] and
//! [`Summary::to_json`] render it; [`crate::svg::ladder_svg`] draws it.
//!
//! ```
//! let cap = ibcm::capture::read_file(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/vectors/rej.pcap"))?;
//! let summary = ibcm::ladder::summarize(&cap.frames);
//! assert_eq!(summary.totals.rejected, 1);
//! print!("{}", summary.to_text()); // #0 A 10.77.0.2 comm 0x6a287b56 ... rejected by B: invalid service ID (8) ...
//! let svg = ibcm::svg::ladder_svg(&summary, &[0]);
//! # assert!(svg.contains("invalid service ID"));
//! # Ok::<(), ibcm::capture::CaptureError>(())
//! ```
//!
//! # Grouping
//!
//! A comm ID is unique per CM, so a connection end is keyed by (IP address
//! of the node, comm ID), as the kernel keys `(local_id, remote_id)`:
//!
//! * A REQ opens a connection; end 0 is its sender (the active side, comm ID
//!   = REQ.LocalCommID), end 1 its destination (comm ID not known yet).
//!   A REQ whose sender, comm ID, TID, QPN and service ID equal those of
//!   the connection's REQ is a retransmission; any other REQ from a known
//!   (node, comm ID) is a new connection (the comm ID was reused).
//! * Every other connection MAD (MRA, REJ, REP, RTU, DREQ, DREP, LAP, APR)
//!   carries LocalCommID (its sender's) and RemoteCommID (its receiver's):
//!   it belongs to the connection whose end at the sender has LocalCommID,
//!   or else to the one whose end at the receiver has RemoteCommID (the
//!   first answer of the passive side: the REP, the MRA of the REQ, and a
//!   REJ of the REQ, which the kernel sends with LocalCommID 0). The first
//!   non-zero LocalCommID seen from the passive side becomes its comm ID.
//! * SIDR_REQ / SIDR_REP are matched by (requester's IP, RequestID).
//! * A MAD that matches nothing (the capture began after the REQ) starts a
//!   connection that is reported as [`Outcome::Incomplete`].
//!
//! ClassPortInfo MADs and MADs that do not parse belong to no connection;
//! they are counted in [`Summary::other_mads`] and [`Summary::malformed`].
//! Frames are taken in time order (stable for equal times).
//!
//! # Repeats
//!
//! A MAD with the same sender, attribute, TID and comm IDs as an earlier MAD
//! of its connection is a repeat. A repeated REQ, REP, DREQ, SIDR_REQ or LAP
//! (the messages the CM retransmits on a timeout) is a
//! [`Repeat::Retransmission`]; a repeat of any other MAD (an RTU re-sent for
//! a duplicate REP, an MRA re-sent for a duplicate REQ, a DREP re-sent for a
//! duplicate DREQ) is a [`Repeat::Duplicate`]. Repeats do not change the
//! CM states and do not restart latency measurements.
//!
//! # Latencies and outcome
//!
//! Steps are measured between the first sending of each message:
//! REQ→REP, REP→RTU, REQ→RTU (`connect`), DREQ→DREP and SIDR_REQ→SIDR_REP.
//! An MRA wait is recorded for each MRA: what it acknowledged, its service
//! timeout and how long its sender took to send its next message.
//! Percentiles are nearest-rank (the value at rank ⌈n·q⌉), as `ibcm bench`
//! computes them.
//!
//! # JSON ([`Summary::to_json`])
//!
//! One document (one line), keys in this order:
//!
//! ```text
//! {"mads":N,"malformed":N,"other_mads":N,
//!  "connections":[CONNECTION...],
//!  "totals":{"connections":N,"established":N,"disconnected":N,"rejected":N,
//!            "stale":N,"timed_out":N,"sidr_resolved":N,"sidr_rejected":N,
//!            "incomplete":N,"with_mra_waits":N,"retransmissions":N,"duplicates":N},
//!  "latency":{"req_rep":STATS,"rep_rtu":STATS,"connect":STATS,"dreq_drep":STATS,"sidr":STATS}}
//! STATS = {"count":N,"p50_ns":N,"p90_ns":N,"p99_ns":N,"max_ns":N}   (0s when count is 0)
//! CONNECTION = {"index":N,"kind":"connection"|"sidr","service_id":N|null,
//!   "outcome":"established"|"disconnected"|"rejected"|"stale"|"timed_out"|
//!             "sidr_resolved"|"sidr_rejected"|"incomplete",
//!   "outcome_text":"...", "established":BOOL,
//!   ["reject_reason":N,"reject_reason_text":"...","rejected_by":0|1,"message_rejected":"REQ"|"REP"|"OTHER"]  (rejected, stale)
//!   ["sidr_status":N,"sidr_status_text":"...","sidr_qpn":N]  (sidr_*)
//!   ["unanswered":"REQ"|"SIDR_REQ"]  (timed_out)   ["missing":"..."]  (incomplete)
//!   "ends":[END,END], "retransmissions":N, "duplicates":N,
//!   "latency_ns":{"req_rep":N|null,"rep_rtu":N|null,"connect":N|null,"dreq_drep":N|null,"sidr":N|null},
//!   "mra_waits":[{"message":"REQ"|"REP"|"OTHER","service_timeout":N,"timeout_ns":N,"waited_ns":N|null}...],
//!   "messages":[MESSAGE...]}
//! END = {"ip":"10.0.0.1","role":"active"|"passive"|"unknown","comm_id":N|null,
//!        "qpn":N|null,"gid":"::ffff:10.0.0.1"|null,"ca_guid":N|null}
//! MESSAGE = {"frame":N,"ts_nanos":N,"t_ns":N,"attr":"REQ",...,"from":0|1,"tid":N,
//!   "local_comm_id":N,"remote_comm_id":N,"repeat":"first"|"retransmission"|"duplicate",
//!   "repeat_count":N,"detail":"..."|null,"states":[STATE|null,STATE|null]}
//! ```
//!
//! Times are integer nanoseconds: `t_ns` is relative to the connection's
//! first MAD; `states[i]` is the kernel `ib_cm_state` name (without
//! `IB_CM_`) end `i` enters with this MAD, `null` when it does not change.
//! For SIDR messages `local_comm_id` is the RequestID and `remote_comm_id`
//! 0. 64-bit values (`tid`, `service_id`, `ca_guid`) may exceed 2^53, as in
//! `ibcm decode --json`.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::IpAddr;

use crate::capture::RoceFrame;
use crate::decode::{JsonObject, json_string, reject_reason_text, sidr_status_text, timeout_text};
use crate::wire::{CmMad, CmMsg, Gid, MsgCode, attr};

/// The kernel's `enum ib_cm_state` values a connection end goes through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CmState {
    Idle,
    ReqSent,
    ReqRcvd,
    MraReqSent,
    MraReqRcvd,
    RepSent,
    RepRcvd,
    MraRepSent,
    MraRepRcvd,
    Established,
    DreqSent,
    DreqRcvd,
    Timewait,
    SidrReqSent,
    SidrReqRcvd,
}

impl CmState {
    /// The kernel name without the `IB_CM_` prefix (`REQ_SENT`, ...).
    pub fn name(self) -> &'static str {
        match self {
            CmState::Idle => "IDLE",
            CmState::ReqSent => "REQ_SENT",
            CmState::ReqRcvd => "REQ_RCVD",
            CmState::MraReqSent => "MRA_REQ_SENT",
            CmState::MraReqRcvd => "MRA_REQ_RCVD",
            CmState::RepSent => "REP_SENT",
            CmState::RepRcvd => "REP_RCVD",
            CmState::MraRepSent => "MRA_REP_SENT",
            CmState::MraRepRcvd => "MRA_REP_RCVD",
            CmState::Established => "ESTABLISHED",
            CmState::DreqSent => "DREQ_SENT",
            CmState::DreqRcvd => "DREQ_RCVD",
            CmState::Timewait => "TIMEWAIT",
            CmState::SidrReqSent => "SIDR_REQ_SENT",
            CmState::SidrReqRcvd => "SIDR_REQ_RCVD",
        }
    }
}

/// A CM connection or a SIDR exchange.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Connection,
    Sidr,
}

/// What a MAD is relative to the earlier MADs of its connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Repeat {
    /// The first sending.
    First,
    /// The n-th re-sending (1 = the second copy) of a retransmitted message.
    Retransmission(u32),
    /// The n-th re-sending of an answer (RTU, MRA, DREP, REJ, SIDR_REP, APR).
    Duplicate(u32),
}

impl Repeat {
    pub fn is_repeat(self) -> bool {
        self != Repeat::First
    }
    fn key(self) -> (&'static str, u32) {
        match self {
            Repeat::First => ("first", 0),
            Repeat::Retransmission(n) => ("retransmission", n),
            Repeat::Duplicate(n) => ("duplicate", n),
        }
    }
}

/// One end of a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The node's IP address (from the frames).
    pub ip: IpAddr,
    /// The comm ID of this end (SIDR: the requester's RequestID), once seen.
    pub comm_id: Option<u32>,
    /// The QP number: REQ.LocalQPN, REP.LocalQPN, SIDR_REP.QPN.
    pub qpn: Option<u32>,
    /// The GID the REQ's primary path gives this end.
    pub gid: Option<Gid>,
    pub ca_guid: Option<u64>,
}

impl Endpoint {
    fn new(ip: IpAddr, comm_id: u32) -> Endpoint {
        Endpoint {
            ip,
            comm_id: (comm_id != 0).then_some(comm_id),
            qpn: None,
            gid: None,
            ca_guid: None,
        }
    }
}

/// One MAD of a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// Frame number in the capture.
    pub frame: u64,
    pub ts_nanos: u64,
    /// Nanoseconds since the connection's first MAD.
    pub t_ns: u64,
    pub attr_id: u16,
    /// `REQ`, `MRA`, ..., `SIDR_REP`.
    pub attr: &'static str,
    /// The sending end (index into [`Connection::ends`]).
    pub from: usize,
    pub tid: u64,
    /// LocalCommID (SIDR: RequestID).
    pub local_comm_id: u32,
    /// RemoteCommID (0 for REQ and SIDR).
    pub remote_comm_id: u32,
    pub repeat: Repeat,
    /// The REJ reason, what an MRA acknowledges and its timeout, a
    /// SIDR_REP status (text: [`MadInfo::text`]).
    pub info: MadInfo,
    /// The state each end enters with this MAD (`None`: unchanged).
    pub states: [Option<CmState>; 2],
}

impl Message {
    /// The sending end's index: 0 or 1; the receiving end is `1 - from`.
    pub fn to(&self) -> usize {
        1 - self.from
    }
}

/// An MRA and what followed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MraWait {
    /// The message acknowledged: `REQ`, `REP` or `OTHER`.
    pub message: &'static str,
    /// The MRA's ServiceTimeout (4.096 µs · 2^t).
    pub service_timeout: u8,
    /// Frame of the MRA.
    pub frame: u64,
    /// From the MRA to its sender's next message in the capture (`None`:
    /// the capture ends before it).
    pub waited_ns: Option<u64>,
}

impl MraWait {
    pub fn timeout_ns(&self) -> u64 {
        4096u64 << self.service_timeout.min(31)
    }
}

/// The steps whose latencies are measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    ReqRep,
    RepRtu,
    Connect,
    DreqDrep,
    Sidr,
}

impl Step {
    pub const ALL: [Step; 5] = [
        Step::ReqRep,
        Step::RepRtu,
        Step::Connect,
        Step::DreqDrep,
        Step::Sidr,
    ];
    /// `REQ->REP`, `REP->RTU`, `connect`, `DREQ->DREP`, `SIDR`.
    pub fn name(self) -> &'static str {
        match self {
            Step::ReqRep => "REQ->REP",
            Step::RepRtu => "REP->RTU",
            Step::Connect => "connect",
            Step::DreqDrep => "DREQ->DREP",
            Step::Sidr => "SIDR",
        }
    }
    /// The JSON key.
    pub fn key(self) -> &'static str {
        match self {
            Step::ReqRep => "req_rep",
            Step::RepRtu => "rep_rtu",
            Step::Connect => "connect",
            Step::DreqDrep => "dreq_drep",
            Step::Sidr => "sidr",
        }
    }
}

/// Step latencies of one connection, in nanoseconds (`None`: a message of
/// the step is not in the capture).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StepLatencies {
    pub req_rep: Option<u64>,
    pub rep_rtu: Option<u64>,
    pub connect: Option<u64>,
    pub dreq_drep: Option<u64>,
    pub sidr: Option<u64>,
}

impl StepLatencies {
    pub fn get(&self, step: Step) -> Option<u64> {
        match step {
            Step::ReqRep => self.req_rep,
            Step::RepRtu => self.rep_rtu,
            Step::Connect => self.connect,
            Step::DreqDrep => self.dreq_drep,
            Step::Sidr => self.sidr,
        }
    }
}

/// How a connection ended in the capture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// REQ, REP, RTU and no DREQ.
    Established,
    /// Established, then DREQ and DREP.
    Disconnected,
    /// A REJ (other than stale connection).
    Rejected {
        reason: u16,
        /// The kernel's `ibcm_reject_msg()` text.
        text: &'static str,
        /// The end that sent the REJ.
        by: usize,
        /// MessageRejected: `REQ`, `REP` or `OTHER`.
        message: &'static str,
    },
    /// A REJ with reason 10 (stale connection).
    Stale { by: usize, message: &'static str },
    /// The REQ (or SIDR_REQ) got no REP or REJ (SIDR_REP) in the capture
    /// (an MRA may have answered it: see [`Connection::mra_waits`]).
    TimedOut { unanswered: &'static str },
    /// SIDR_REP with status 0.
    SidrResolved { qpn: u32 },
    /// SIDR_REP with another status.
    SidrRejected { status: u8, text: &'static str },
    /// The capture misses part of the connection: `missing` is `REQ` (it
    /// began later), `RTU` (REP never answered) or `DREP` (DREQ never
    /// answered).
    Incomplete { missing: &'static str },
}

impl Outcome {
    /// The short name (the JSON `outcome` and the totals' keys).
    pub fn key(&self) -> &'static str {
        match self {
            Outcome::Established => "established",
            Outcome::Disconnected => "disconnected",
            Outcome::Rejected { .. } => "rejected",
            Outcome::Stale { .. } => "stale",
            Outcome::TimedOut { .. } => "timed_out",
            Outcome::SidrResolved { .. } => "sidr_resolved",
            Outcome::SidrRejected { .. } => "sidr_rejected",
            Outcome::Incomplete { .. } => "incomplete",
        }
    }

    /// Readable text: `established+disconnected`, `rejected by B: invalid
    /// service ID (8), REQ rejected`, ...
    pub fn text(&self) -> String {
        let end = |i: usize| if i == 0 { 'A' } else { 'B' };
        match self {
            Outcome::Established => "established".into(),
            Outcome::Disconnected => "established+disconnected".into(),
            Outcome::Rejected {
                reason,
                text,
                by,
                message,
            } => format!(
                "rejected by {}: {text} ({reason}), {message} rejected",
                end(*by)
            ),
            Outcome::Stale { by, message } => {
                format!("stale connection (REJ by {} of the {message})", end(*by))
            }
            Outcome::TimedOut { unanswered } => {
                let answer = if *unanswered == "REQ" {
                    "REP or REJ"
                } else {
                    "SIDR_REP"
                };
                format!("timed out: no {answer} to the {unanswered}")
            }
            Outcome::SidrResolved { qpn } => format!("SIDR resolved: QPN {qpn:#08x}"),
            Outcome::SidrRejected { status, text } => {
                format!("SIDR rejected: status {status} ({text})")
            }
            Outcome::Incomplete { missing } => match *missing {
                "REQ" => "incomplete: the capture starts after the REQ".into(),
                m => format!("incomplete: no {m} in the capture"),
            },
        }
    }
}

/// One connection (or SIDR exchange) of a capture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connection {
    /// Position in [`Summary::connections`] (the `#N` of the text).
    pub index: usize,
    pub kind: Kind,
    /// From the REQ / SIDR_REQ (or SIDR_REP).
    pub service_id: Option<u64>,
    /// End 0 (`A`) and end 1 (`B`). When [`Connection::opened`], end 0 is
    /// the active side (sender of the REQ / SIDR_REQ).
    pub ends: [Endpoint; 2],
    /// Whether the capture holds the REQ / SIDR_REQ that opened it.
    pub opened: bool,
    /// In time order.
    pub messages: Vec<Message>,
    pub outcome: Outcome,
    /// Whether an RTU was seen (the connection reached ESTABLISHED).
    pub established: bool,
    pub latency: StepLatencies,
    pub retransmissions: u32,
    pub duplicates: u32,
    pub mra_waits: Vec<MraWait>,
}

impl Connection {
    /// `active`, `passive` or `unknown` (the capture does not show who
    /// opened the connection).
    pub fn role(&self, end: usize) -> &'static str {
        match (self.opened, end) {
            (false, _) => "unknown",
            (true, 0) => "active",
            (true, _) => "passive",
        }
    }

    /// The first (non-repeated) message with this attribute.
    pub fn first(&self, attr_id: u16) -> Option<&Message> {
        self.messages
            .iter()
            .find(|m| m.attr_id == attr_id && !m.repeat.is_repeat())
    }

    fn has(&self, attr_id: u16) -> bool {
        self.first(attr_id).is_some()
    }

    /// One line: `#0 A 10.0.0.2 comm 0x.. qpn 0x.. -> B ...: outcome; messages; latencies`.
    pub fn to_text(&self) -> String {
        let mut s = format!("#{} ", self.index);
        if self.kind == Kind::Sidr {
            s.push_str("SIDR ");
        }
        for (i, e) in self.ends.iter().enumerate() {
            if i == 1 {
                s.push_str(" -> ");
            }
            let _ = write!(s, "{} {}", if i == 0 { 'A' } else { 'B' }, e.ip);
            if let Some(c) = e.comm_id {
                let what = if self.kind == Kind::Sidr {
                    "request"
                } else {
                    "comm"
                };
                let _ = write!(s, " {what} {c:#010x}");
            }
            if let Some(q) = e.qpn {
                let _ = write!(s, " qpn {q:#08x}");
            }
        }
        if let Some(sid) = self.service_id {
            let _ = write!(s, " service {sid:#018x}");
        }
        let _ = write!(s, ": {}", self.outcome.text());
        for w in &self.mra_waits {
            let _ = write!(
                s,
                ", MRA wait ({} MRAed, service timeout {}",
                w.message,
                timeout_text(w.service_timeout)
            );
            match w.waited_ns {
                Some(ns) => {
                    let _ = write!(s, ", waited {})", duration_text(ns));
                }
                None => s.push_str(", still waiting at the end)"),
            }
        }
        if self.retransmissions > 0 {
            let _ = write!(s, ", {} retransmission(s)", self.retransmissions);
        }
        if self.duplicates > 0 {
            let _ = write!(s, ", {} duplicate(s)", self.duplicates);
        }
        s.push_str("; ");
        for (i, m) in self.messages.iter().enumerate() {
            if i > 0 {
                s.push_str(", ");
            }
            let _ = write!(s, "{}>{}", if m.from == 0 { 'A' } else { 'B' }, m.attr);
            match m.repeat {
                Repeat::First => {}
                Repeat::Retransmission(_) => s.push_str("(retx)"),
                Repeat::Duplicate(_) => s.push_str("(dup)"),
            }
            let _ = write!(s, " +{}", duration_text(m.t_ns));
        }
        let steps: Vec<String> = Step::ALL
            .iter()
            .filter_map(|&st| {
                self.latency
                    .get(st)
                    .map(|ns| format!("{} {}", st.name(), duration_text(ns)))
            })
            .collect();
        if !steps.is_empty() {
            let _ = write!(s, "; {}", steps.join(", "));
        }
        s
    }

    /// The connection as one JSON object (the CONNECTION of the module docs).
    pub fn to_json(&self) -> String {
        let mut o = JsonObject::new();
        o.uint("index", self.index as u64).str(
            "kind",
            match self.kind {
                Kind::Connection => "connection",
                Kind::Sidr => "sidr",
            },
        );
        match self.service_id {
            Some(s) => o.uint("service_id", s),
            None => o.raw("service_id", "null"),
        };
        o.str("outcome", self.outcome.key())
            .str("outcome_text", &self.outcome.text())
            .bool("established", self.established);
        match &self.outcome {
            Outcome::Rejected {
                reason,
                text,
                by,
                message,
            } => {
                o.uint("reject_reason", *reason as u64)
                    .str("reject_reason_text", text)
                    .uint("rejected_by", *by as u64)
                    .str("message_rejected", message);
            }
            Outcome::Stale { by, message } => {
                o.uint("reject_reason", 10)
                    .str("reject_reason_text", reject_reason_text(10))
                    .uint("rejected_by", *by as u64)
                    .str("message_rejected", message);
            }
            Outcome::SidrResolved { qpn } => {
                o.uint("sidr_status", 0)
                    .str("sidr_status_text", sidr_status_text(0))
                    .uint("sidr_qpn", *qpn as u64);
            }
            Outcome::SidrRejected { status, text } => {
                o.uint("sidr_status", *status as u64)
                    .str("sidr_status_text", text);
            }
            Outcome::TimedOut { unanswered } => {
                o.str("unanswered", unanswered);
            }
            Outcome::Incomplete { missing } => {
                o.str("missing", missing);
            }
            Outcome::Established | Outcome::Disconnected => {}
        }
        let ends: Vec<String> = (0..2).map(|i| self.end_json(i)).collect();
        o.raw("ends", &json_array(&ends))
            .uint("retransmissions", self.retransmissions as u64)
            .uint("duplicates", self.duplicates as u64);
        let mut lat = JsonObject::new();
        for st in Step::ALL {
            match self.latency.get(st) {
                Some(ns) => lat.uint(st.key(), ns),
                None => lat.raw(st.key(), "null"),
            };
        }
        o.raw("latency_ns", &lat.finish());
        let waits: Vec<String> = self
            .mra_waits
            .iter()
            .map(|w| {
                let mut j = JsonObject::new();
                j.str("message", w.message)
                    .uint("service_timeout", w.service_timeout as u64)
                    .uint("timeout_ns", w.timeout_ns());
                match w.waited_ns {
                    Some(ns) => j.uint("waited_ns", ns),
                    None => j.raw("waited_ns", "null"),
                };
                j.finish()
            })
            .collect();
        o.raw("mra_waits", &json_array(&waits));
        let msgs: Vec<String> = self.messages.iter().map(message_json).collect();
        o.raw("messages", &json_array(&msgs));
        o.finish()
    }

    fn end_json(&self, i: usize) -> String {
        let e = &self.ends[i];
        let mut o = JsonObject::new();
        o.str("ip", &e.ip.to_string()).str("role", self.role(i));
        opt_uint(&mut o, "comm_id", e.comm_id.map(u64::from));
        opt_uint(&mut o, "qpn", e.qpn.map(u64::from));
        match e.gid {
            Some(g) => o.str("gid", &g.to_string()),
            None => o.raw("gid", "null"),
        };
        opt_uint(&mut o, "ca_guid", e.ca_guid);
        o.finish()
    }
}

fn opt_uint(o: &mut JsonObject, k: &str, v: Option<u64>) {
    match v {
        Some(v) => o.uint(k, v),
        None => o.raw(k, "null"),
    };
}

fn message_json(m: &Message) -> String {
    let mut o = JsonObject::new();
    o.uint("frame", m.frame)
        .uint("ts_nanos", m.ts_nanos)
        .uint("t_ns", m.t_ns)
        .str("attr", m.attr)
        .uint("from", m.from as u64)
        .uint("tid", m.tid)
        .uint("local_comm_id", m.local_comm_id as u64)
        .uint("remote_comm_id", m.remote_comm_id as u64);
    let (rk, rn) = m.repeat.key();
    o.str("repeat", rk).uint("repeat_count", rn as u64);
    match m.info.text() {
        Some(d) => o.str("detail", &d),
        None => o.raw("detail", "null"),
    };
    let states: Vec<String> = m
        .states
        .iter()
        .map(|s| match s {
            Some(s) => {
                let mut t = String::new();
                json_string(&mut t, s.name());
                t
            }
            None => "null".to_string(),
        })
        .collect();
    o.raw("states", &json_array(&states));
    o.finish()
}

fn json_array(items: &[String]) -> String {
    let mut s = String::from("[");
    s.push_str(&items.join(","));
    s.push(']');
    s
}

/// Percentiles of one step over the connections that have it (ns).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LatencyStats {
    pub step: Step,
    pub count: usize,
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub max: u64,
}

impl LatencyStats {
    /// Stats of `values` (nanoseconds, any order); all zero when empty.
    pub fn of(step: Step, values: &[u64]) -> LatencyStats {
        let mut v = values.to_vec();
        v.sort_unstable();
        LatencyStats {
            step,
            count: v.len(),
            p50: percentile(&v, 0.50),
            p90: percentile(&v, 0.90),
            p99: percentile(&v, 0.99),
            max: v.last().copied().unwrap_or(0),
        }
    }
}

/// Nearest-rank percentile of sorted values: the value at rank ⌈n·q⌉
/// (clamped to 1..n); 0 for no values.
pub fn percentile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// Connections by outcome, and repeat counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Totals {
    pub connections: usize,
    pub established: usize,
    pub disconnected: usize,
    pub rejected: usize,
    pub stale: usize,
    pub timed_out: usize,
    pub sidr_resolved: usize,
    pub sidr_rejected: usize,
    pub incomplete: usize,
    pub with_mra_waits: usize,
    pub retransmissions: u64,
    pub duplicates: u64,
}

impl Totals {
    fn rows(&self) -> [(&'static str, u64); 12] {
        [
            ("connections", self.connections as u64),
            ("established", self.established as u64),
            ("disconnected", self.disconnected as u64),
            ("rejected", self.rejected as u64),
            ("stale", self.stale as u64),
            ("timed_out", self.timed_out as u64),
            ("sidr_resolved", self.sidr_resolved as u64),
            ("sidr_rejected", self.sidr_rejected as u64),
            ("incomplete", self.incomplete as u64),
            ("with_mra_waits", self.with_mra_waits as u64),
            ("retransmissions", self.retransmissions),
            ("duplicates", self.duplicates),
        ]
    }
}

/// Everything [`summarize`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    pub connections: Vec<Connection>,
    pub totals: Totals,
    /// One entry per [`Step::ALL`], in that order.
    pub latency: Vec<LatencyStats>,
    /// CM MADs looked at (all frames given).
    pub mads: u64,
    /// MADs that do not parse.
    pub malformed: u64,
    /// Parsed MADs that belong to no connection (ClassPortInfo).
    pub other_mads: u64,
}

impl Summary {
    /// One line per connection, then a totals line and one line per step
    /// with latencies. Ends with a newline.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        for c in &self.connections {
            s.push_str(&c.to_text());
            s.push('\n');
        }
        let t = &self.totals;
        let _ = write!(s, "{} connection(s):", t.connections);
        let mut first = true;
        for (k, n) in t.rows().into_iter().skip(1).take(8) {
            if n > 0 {
                let _ = write!(s, "{} {n} {k}", if first { "" } else { "," });
                first = false;
            }
        }
        if first {
            s.push_str(" none");
        }
        let _ = writeln!(
            s,
            "; {} with MRA waits, {} retransmission(s), {} duplicate(s); {} CM MADs, {} malformed, {} outside connections",
            t.with_mra_waits,
            t.retransmissions,
            t.duplicates,
            self.mads,
            self.malformed,
            self.other_mads
        );
        let with_data: Vec<&LatencyStats> = self.latency.iter().filter(|l| l.count > 0).collect();
        if !with_data.is_empty() {
            let _ = writeln!(
                s,
                "latency      {:>6} {:>10} {:>10} {:>10} {:>10}",
                "count", "p50", "p90", "p99", "max"
            );
            for l in with_data {
                let _ = writeln!(
                    s,
                    "{:<12} {:>6} {:>10} {:>10} {:>10} {:>10}",
                    l.step.name(),
                    l.count,
                    duration_text(l.p50),
                    duration_text(l.p90),
                    duration_text(l.p99),
                    duration_text(l.max)
                );
            }
        }
        s
    }

    /// The whole summary as one JSON document (see the module docs), no
    /// trailing newline.
    pub fn to_json(&self) -> String {
        let mut o = JsonObject::new();
        o.uint("mads", self.mads)
            .uint("malformed", self.malformed)
            .uint("other_mads", self.other_mads);
        let conns: Vec<String> = self.connections.iter().map(Connection::to_json).collect();
        o.raw("connections", &json_array(&conns));
        let mut t = JsonObject::new();
        for (k, n) in self.totals.rows() {
            t.uint(k, n);
        }
        o.raw("totals", &t.finish());
        let mut lat = JsonObject::new();
        for l in &self.latency {
            let mut j = JsonObject::new();
            j.uint("count", l.count as u64)
                .uint("p50_ns", l.p50)
                .uint("p90_ns", l.p90)
                .uint("p99_ns", l.p99)
                .uint("max_ns", l.max);
            lat.raw(l.step.key(), &j.finish());
        }
        o.raw("latency", &lat.finish());
        o.finish()
    }

    /// The latencies of one step over all connections, in nanoseconds, in
    /// connection order (for [`crate::svg::latency_cdf_svg`]).
    pub fn step_values(&self, step: Step) -> Vec<u64> {
        self.connections
            .iter()
            .filter_map(|c| c.latency.get(step))
            .collect()
    }
}

/// A duration as text: `850ns`, `12.3us`, `4.567ms`, `8.760s`.
pub fn duration_text(ns: u64) -> String {
    if ns < 1_000 {
        format!("{ns}ns")
    } else if ns < 1_000_000 {
        format!("{:.1}us", ns as f64 / 1e3)
    } else if ns < 1_000_000_000 {
        format!("{:.3}ms", ns as f64 / 1e6)
    } else {
        format!("{:.3}s", ns as f64 / 1e9)
    }
}

// ---------------------------------------------------------------------------
// Grouping

/// What the grouping needs from one parsed MAD.
struct Mad<'a> {
    frame: &'a RoceFrame,
    mad: CmMad,
    local: u32,
    remote: u32,
}

/// Groups the CM MADs of `frames` into connections (see the module docs).
pub fn summarize(frames: &[RoceFrame]) -> Summary {
    let mut order: Vec<&RoceFrame> = frames.iter().collect();
    order.sort_by_key(|f| f.ts_nanos);
    let mut b = Builder::default();
    let mut malformed = 0;
    let mut other = 0;
    for f in order {
        let Ok(mad) = CmMad::parse(&f.mad) else {
            malformed += 1;
            continue;
        };
        let (local, remote) = match &mad.msg {
            CmMsg::ClassPortInfo(_) => {
                other += 1;
                continue;
            }
            CmMsg::Req(m) => (m.local_comm_id, 0),
            CmMsg::Mra(m) => (m.local_comm_id, m.remote_comm_id),
            CmMsg::Rej(m) => (m.local_comm_id, m.remote_comm_id),
            CmMsg::Rep(m) => (m.local_comm_id, m.remote_comm_id),
            CmMsg::Rtu(m) => (m.local_comm_id, m.remote_comm_id),
            CmMsg::Dreq(m) => (m.local_comm_id, m.remote_comm_id),
            CmMsg::Drep(m) => (m.local_comm_id, m.remote_comm_id),
            CmMsg::SidrReq(m) => (m.request_id, 0),
            CmMsg::SidrRep(m) => (m.request_id, 0),
            CmMsg::Lap(m) => (m.local_comm_id, m.remote_comm_id),
            CmMsg::Apr(m) => (m.local_comm_id, m.remote_comm_id),
        };
        b.add(Mad {
            frame: f,
            mad,
            local,
            remote,
        });
    }
    let mut connections = b.conns;
    for (i, c) in connections.iter_mut().enumerate() {
        c.index = i;
        finish(c);
    }
    let mut totals = Totals {
        connections: connections.len(),
        ..Totals::default()
    };
    for c in &connections {
        match c.outcome {
            Outcome::Established => totals.established += 1,
            Outcome::Disconnected => totals.disconnected += 1,
            Outcome::Rejected { .. } => totals.rejected += 1,
            Outcome::Stale { .. } => totals.stale += 1,
            Outcome::TimedOut { .. } => totals.timed_out += 1,
            Outcome::SidrResolved { .. } => totals.sidr_resolved += 1,
            Outcome::SidrRejected { .. } => totals.sidr_rejected += 1,
            Outcome::Incomplete { .. } => totals.incomplete += 1,
        }
        totals.with_mra_waits += usize::from(!c.mra_waits.is_empty());
        totals.retransmissions += c.retransmissions as u64;
        totals.duplicates += c.duplicates as u64;
    }
    let mut summary = Summary {
        connections,
        totals,
        latency: Vec::new(),
        mads: frames.len() as u64,
        malformed,
        other_mads: other,
    };
    summary.latency = Step::ALL
        .iter()
        .map(|&st| LatencyStats::of(st, &summary.step_values(st)))
        .collect();
    summary
}

#[derive(Default)]
struct Builder {
    conns: Vec<Connection>,
    /// (node IP, comm ID) -> connection.
    by_end: HashMap<(IpAddr, u32), usize>,
    /// (requester IP, RequestID) -> SIDR exchange.
    by_sidr: HashMap<(IpAddr, u32), usize>,
}

/// Whether a repeat of this attribute is a retransmission (the CM resends
/// it on a timeout) rather than a duplicate answer.
fn retransmitted(attr_id: u16) -> bool {
    matches!(
        attr_id,
        attr::REQ | attr::REP | attr::DREQ | attr::SIDR_REQ | attr::LAP
    )
}

impl Builder {
    fn new_conn(&mut self, kind: Kind, a: Endpoint, b: Endpoint, opened: bool) -> usize {
        self.conns.push(Connection {
            index: self.conns.len(),
            kind,
            service_id: None,
            ends: [a, b],
            opened,
            messages: Vec::new(),
            outcome: Outcome::Incomplete { missing: "REQ" },
            established: false,
            latency: StepLatencies::default(),
            retransmissions: 0,
            duplicates: 0,
            mra_waits: Vec::new(),
        });
        self.conns.len() - 1
    }

    fn add(&mut self, m: Mad<'_>) {
        let f = m.frame;
        match &m.mad.msg {
            CmMsg::Req(req) => {
                let same = self.by_end.get(&(f.src, m.local)).copied().filter(|&c| {
                    let conn = &self.conns[c];
                    conn.opened
                        && conn.ends[0].ip == f.src
                        && conn.ends[0].qpn == Some(req.local_qpn)
                        && conn
                            .messages
                            .iter()
                            .any(|x| x.attr_id == attr::REQ && x.tid == m.mad.tid && x.from == 0)
                        && conn.service_id == Some(req.service_id)
                });
                let c = match same {
                    Some(c) => c,
                    None => {
                        let mut a = Endpoint::new(f.src, m.local);
                        a.qpn = Some(req.local_qpn);
                        a.gid = Some(req.primary.local_gid);
                        a.ca_guid = Some(req.local_ca_guid);
                        let mut b = Endpoint::new(f.dst, 0);
                        b.gid = Some(req.primary.remote_gid);
                        let c = self.new_conn(Kind::Connection, a, b, true);
                        self.conns[c].service_id = Some(req.service_id);
                        if m.local != 0 {
                            self.by_end.insert((f.src, m.local), c);
                        }
                        c
                    }
                };
                self.push(c, 0, &m);
            }
            CmMsg::SidrReq(sreq) => {
                let same = self.by_sidr.get(&(f.src, m.local)).copied().filter(|&c| {
                    let conn = &self.conns[c];
                    conn.opened
                        && conn
                            .messages
                            .iter()
                            .any(|x| x.attr_id == attr::SIDR_REQ && x.tid == m.mad.tid)
                });
                let c = match same {
                    Some(c) => c,
                    None => {
                        let c = self.new_conn(
                            Kind::Sidr,
                            Endpoint::new(f.src, m.local),
                            Endpoint::new(f.dst, 0),
                            true,
                        );
                        self.conns[c].service_id = Some(sreq.service_id);
                        self.by_sidr.insert((f.src, m.local), c);
                        c
                    }
                };
                self.push(c, 0, &m);
            }
            CmMsg::SidrRep(srep) => {
                let c = match self.by_sidr.get(&(f.dst, m.local)).copied() {
                    Some(c) => c,
                    None => {
                        let c = self.new_conn(
                            Kind::Sidr,
                            Endpoint::new(f.dst, m.local),
                            Endpoint::new(f.src, 0),
                            false,
                        );
                        self.conns[c].service_id = Some(srep.service_id);
                        self.by_sidr.insert((f.dst, m.local), c);
                        c
                    }
                };
                if srep.status == 0 {
                    self.conns[c].ends[1].qpn = Some(srep.qpn);
                }
                self.push(c, 1, &m);
            }
            _ => {
                let (c, from) = match self.find(f.src, f.dst, m.local, m.remote) {
                    Some(found) => found,
                    None => {
                        let c = self.new_conn(
                            Kind::Connection,
                            Endpoint::new(f.src, m.local),
                            Endpoint::new(f.dst, m.remote),
                            false,
                        );
                        for (ip, id) in [(f.src, m.local), (f.dst, m.remote)] {
                            if id != 0 {
                                self.by_end.insert((ip, id), c);
                            }
                        }
                        (c, 0)
                    }
                };
                let end = &mut self.conns[c].ends[from];
                if end.comm_id.is_none() && m.local != 0 {
                    end.comm_id = Some(m.local);
                    self.by_end.insert((f.src, m.local), c);
                }
                if let CmMsg::Rep(rep) = &m.mad.msg {
                    let end = &mut self.conns[c].ends[from];
                    end.qpn = Some(rep.local_qpn);
                    end.ca_guid = Some(rep.local_ca_guid);
                }
                self.push(c, from, &m);
            }
        }
    }

    /// The connection and sending end of a MAD from `src` to `dst` with
    /// LocalCommID `local` and RemoteCommID `remote`: the connection whose
    /// end at `src` has `local`, or whose end at `dst` has `remote`, the
    /// other end's comm ID not contradicting the MAD. When both lookups
    /// find a connection (a comm ID reused), the newer one wins.
    fn find(&self, src: IpAddr, dst: IpAddr, local: u32, remote: u32) -> Option<(usize, usize)> {
        let fits = |id: Option<u32>, want: u32| want == 0 || id.is_none() || id == Some(want);
        let by_sender = (local != 0)
            .then(|| self.by_end.get(&(src, local)))
            .flatten()
            .and_then(|&c| {
                let e = &self.conns[c].ends;
                (0..2)
                    .find(|&from| {
                        e[from].ip == src
                            && e[from].comm_id == Some(local)
                            && fits(e[1 - from].comm_id, remote)
                    })
                    .map(|from| (c, from))
            });
        let by_receiver = (remote != 0)
            .then(|| self.by_end.get(&(dst, remote)))
            .flatten()
            .and_then(|&c| {
                let e = &self.conns[c].ends;
                (0..2)
                    .find(|&to| {
                        e[to].ip == dst
                            && e[to].comm_id == Some(remote)
                            && fits(e[1 - to].comm_id, local)
                    })
                    .map(|to| (c, 1 - to))
            });
        match (by_sender, by_receiver) {
            (Some(a), Some(b)) => Some(if b.0 > a.0 { b } else { a }),
            (a, b) => a.or(b),
        }
    }

    fn push(&mut self, c: usize, from: usize, m: &Mad<'_>) {
        let conn = &mut self.conns[c];
        let attr_id = m.mad.msg.attr_id();
        let earlier = conn
            .messages
            .iter()
            .filter(|x| {
                x.from == from
                    && x.attr_id == attr_id
                    && x.tid == m.mad.tid
                    && x.local_comm_id == m.local
                    && x.remote_comm_id == m.remote
            })
            .count() as u32;
        let repeat = match (earlier, retransmitted(attr_id)) {
            (0, _) => Repeat::First,
            (n, true) => Repeat::Retransmission(n),
            (n, false) => Repeat::Duplicate(n),
        };
        let t0 = conn
            .messages
            .first()
            .map_or(m.frame.ts_nanos, |x| x.ts_nanos);
        conn.messages.push(Message {
            frame: m.frame.frame,
            ts_nanos: m.frame.ts_nanos,
            t_ns: m.frame.ts_nanos.saturating_sub(t0),
            attr_id,
            attr: m.mad.msg.name(),
            from,
            tid: m.mad.tid,
            local_comm_id: m.local,
            remote_comm_id: m.remote,
            repeat,
            info: MadInfo::of(&m.mad.msg),
            states: [None, None],
        });
        match repeat {
            Repeat::First => {}
            Repeat::Retransmission(_) => conn.retransmissions += 1,
            Repeat::Duplicate(_) => conn.duplicates += 1,
        }
        if !repeat.is_repeat() {
            let state = self.state_of(c);
            let conn = &mut self.conns[c];
            let (tx, rx) = transition(&m.mad.msg, state[from], state[1 - from]);
            let msg = conn.messages.last_mut().expect("just pushed");
            msg.states[from] = tx.filter(|&s| Some(s) != state[from]);
            msg.states[1 - from] = rx.filter(|&s| Some(s) != state[1 - from]);
        }
    }

    /// The current state of both ends: the last state each message set.
    fn state_of(&self, c: usize) -> [Option<CmState>; 2] {
        let mut s = [None, None];
        for m in &self.conns[c].messages {
            for (i, st) in m.states.iter().enumerate() {
                if st.is_some() {
                    s[i] = *st;
                }
            }
        }
        s
    }
}

/// The typed fields of a message that the summary uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MadInfo {
    None,
    /// REJ: Reason and MessageRejected (`REQ`, `REP`, `OTHER`).
    Rej {
        reason: u16,
        message: &'static str,
    },
    /// MRA: MessageMRAed and ServiceTimeout.
    Mra {
        message: &'static str,
        service_timeout: u8,
    },
    /// SIDR_REP: Status and QPN.
    SidrRep {
        status: u8,
        qpn: u32,
    },
}

impl MadInfo {
    fn of(msg: &CmMsg) -> MadInfo {
        match msg {
            CmMsg::Rej(r) => MadInfo::Rej {
                reason: r.reason,
                message: r.message_rejected.name(),
            },
            CmMsg::Mra(r) => MadInfo::Mra {
                message: r.message_mraed.name(),
                service_timeout: r.service_timeout,
            },
            CmMsg::SidrRep(r) => MadInfo::SidrRep {
                status: r.status,
                qpn: r.qpn,
            },
            _ => MadInfo::None,
        }
    }

    /// `invalid service ID (8), REQ rejected`, `REQ MRAed, service timeout
    /// 68.72 s`, `status 1 (IB_SIDR_UNSUPPORTED)`; `None` for other MADs.
    pub fn text(&self) -> Option<String> {
        match *self {
            MadInfo::None => None,
            MadInfo::Rej { reason, message } => Some(format!(
                "{} ({reason}), {message} rejected",
                reject_reason_text(reason)
            )),
            MadInfo::Mra {
                message,
                service_timeout,
            } => Some(format!(
                "{message} MRAed, service timeout {}",
                timeout_text(service_timeout)
            )),
            MadInfo::SidrRep { status, .. } => {
                Some(format!("status {status} ({})", sidr_status_text(status)))
            }
        }
    }
}

/// The states of the sending and the receiving end after a (first) MAD,
/// following the kernel's handlers (docs/CM_RULES.md §states): what a
/// connection end does on sending or receiving each message. LAP, APR and
/// an MRA of OTHER concern the alternate path only and change nothing.
fn transition(
    msg: &CmMsg,
    tx: Option<CmState>,
    rx: Option<CmState>,
) -> (Option<CmState>, Option<CmState>) {
    use CmState::*;
    match msg {
        CmMsg::Req(_) => (Some(ReqSent), Some(ReqRcvd)),
        CmMsg::Mra(m) => match m.message_mraed {
            MsgCode::Req => (Some(MraReqSent), Some(MraReqRcvd)),
            MsgCode::Rep => (Some(MraRepSent), Some(MraRepRcvd)),
            MsgCode::Other => (tx, rx),
        },
        CmMsg::Rep(_) => (Some(RepSent), Some(RepRcvd)),
        CmMsg::Rtu(_) => (Some(Established), Some(Established)),
        CmMsg::Dreq(_) => (Some(DreqSent), Some(DreqRcvd)),
        CmMsg::Drep(_) => {
            let rx_after = match rx {
                Some(DreqSent | DreqRcvd) => Some(Timewait),
                other => other,
            };
            (Some(Timewait), rx_after)
        }
        CmMsg::Rej(r) => {
            // ib_send_cm_rej: REP_SENT / MRA_REP_RCVD enter timewait, the
            // states before go back to idle; a REJ from a connected end
            // (stale connection) leaves it in timewait.
            let tx_after = match tx {
                Some(RepSent | MraRepRcvd | Established | DreqSent | DreqRcvd) => Some(Timewait),
                _ => Some(Idle),
            };
            // cm_rej_handler.
            let rx_after = match rx {
                Some(ReqSent | MraReqRcvd | RepSent | MraRepRcvd | ReqRcvd | MraReqSent) => {
                    if r.reason == 10 {
                        Some(Timewait)
                    } else {
                        Some(Idle)
                    }
                }
                Some(RepRcvd | MraRepSent | DreqSent | Established) => Some(Timewait),
                other => other,
            };
            (tx_after, rx_after)
        }
        CmMsg::SidrReq(_) => (Some(SidrReqSent), Some(SidrReqRcvd)),
        CmMsg::SidrRep(_) => (Some(Idle), Some(Idle)),
        CmMsg::Lap(_) | CmMsg::Apr(_) | CmMsg::ClassPortInfo(_) => (tx, rx),
    }
}

/// Latencies, MRA waits and outcome, once all MADs are in.
fn finish(c: &mut Connection) {
    let t = |attr_id: u16| c.first(attr_id).map(|m| m.ts_nanos);
    let span = |a: Option<u64>, b: Option<u64>| match (a, b) {
        (Some(a), Some(b)) if b >= a => Some(b - a),
        _ => None,
    };
    let (req, rep, rtu) = (t(attr::REQ), t(attr::REP), t(attr::RTU));
    c.latency = StepLatencies {
        req_rep: span(req, rep),
        rep_rtu: span(rep, rtu),
        connect: span(req, rtu),
        dreq_drep: span(t(attr::DREQ), t(attr::DREP)),
        sidr: span(t(attr::SIDR_REQ), t(attr::SIDR_REP)),
    };
    let mut waits = Vec::new();
    for (i, m) in c.messages.iter().enumerate() {
        let MadInfo::Mra {
            message,
            service_timeout,
        } = m.info
        else {
            continue;
        };
        if m.repeat.is_repeat() {
            continue;
        }
        let next = c.messages[i + 1..]
            .iter()
            .find(|x| x.from == m.from && x.attr_id != attr::MRA);
        waits.push(MraWait {
            message,
            service_timeout,
            frame: m.frame,
            waited_ns: next.map(|x| x.ts_nanos - m.ts_nanos),
        });
    }
    c.mra_waits = waits;
    c.established = c.has(attr::RTU);
    let info = |attr_id: u16| c.first(attr_id).map(|m| (m.from, m.info));
    c.outcome = if c.kind == Kind::Sidr {
        match info(attr::SIDR_REP) {
            Some((_, MadInfo::SidrRep { status: 0, qpn })) => Outcome::SidrResolved { qpn },
            Some((_, MadInfo::SidrRep { status, .. })) => Outcome::SidrRejected {
                status,
                text: sidr_status_text(status),
            },
            _ if c.opened => Outcome::TimedOut {
                unanswered: "SIDR_REQ",
            },
            _ => Outcome::Incomplete {
                missing: "SIDR_REQ",
            },
        }
    } else if let Some((by, MadInfo::Rej { reason, message })) = info(attr::REJ) {
        if reason == 10 {
            Outcome::Stale { by, message }
        } else {
            Outcome::Rejected {
                reason,
                text: reject_reason_text(reason),
                by,
                message,
            }
        }
    } else if !c.opened {
        Outcome::Incomplete { missing: "REQ" }
    } else if c.has(attr::DREP) {
        Outcome::Disconnected
    } else if c.has(attr::DREQ) {
        Outcome::Incomplete { missing: "DREP" }
    } else if c.established {
        Outcome::Established
    } else if c.has(attr::REP) {
        Outcome::Incomplete { missing: "RTU" }
    } else {
        Outcome::TimedOut { unanswered: "REQ" }
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::pdata;

    #[test]
    fn nearest_rank_percentiles() {
        assert_eq!(percentile(&[], 0.5), 0);
        assert_eq!(percentile(&[7], 0.01), 7);
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 0.50), 50);
        assert_eq!(percentile(&v, 0.90), 90);
        assert_eq!(percentile(&v, 0.99), 99);
        assert_eq!(percentile(&v, 1.0), 100);
        let s = LatencyStats::of(Step::Connect, &[30, 10, 20]);
        assert_eq!((s.count, s.p50, s.p90, s.p99, s.max), (3, 20, 30, 30, 30));
        assert_eq!(LatencyStats::of(Step::Sidr, &[]).max, 0);
    }

    #[test]
    fn durations() {
        assert_eq!(duration_text(999), "999ns");
        assert_eq!(duration_text(12_345), "12.3us");
        assert_eq!(duration_text(4_567_890), "4.568ms");
        assert_eq!(duration_text(8_760_000_000), "8.760s");
    }

    #[test]
    fn rej_states_follow_the_kernel() {
        use CmState::*;
        let rej = |reason| {
            CmMsg::Rej(crate::wire::Rej {
                local_comm_id: 1,
                remote_comm_id: 2,
                message_rejected: MsgCode::Rep,
                ari_length: 0,
                reason,
                ari: [0; pdata::REJ_ARI],
                private_data: [0; pdata::REJ],
            })
        };
        // Active side rejects the REP: it goes idle, the passive side (REP_SENT) too.
        assert_eq!(
            transition(&rej(28), Some(RepRcvd), Some(RepSent)),
            (Some(Idle), Some(Idle))
        );
        // Passive side rejects after its REP: timewait; the active side, in
        // REP_RCVD, enters timewait too.
        assert_eq!(
            transition(&rej(28), Some(RepSent), Some(RepRcvd)),
            (Some(Timewait), Some(Timewait))
        );
        // A stale-connection REJ puts a requester in timewait.
        assert_eq!(
            transition(&rej(10), Some(ReqRcvd), Some(ReqSent)),
            (Some(Idle), Some(Timewait))
        );
    }

    #[test]
    fn outcome_texts() {
        assert_eq!(Outcome::Disconnected.text(), "established+disconnected");
        let r = Outcome::Rejected {
            reason: 28,
            text: "consumer defined",
            by: 0,
            message: "REP",
        };
        assert_eq!(
            r.text(),
            "rejected by A: consumer defined (28), REP rejected"
        );
        assert_eq!(r.key(), "rejected");
        assert_eq!(
            Outcome::Incomplete { missing: "RTU" }.text(),
            "incomplete: no RTU in the capture"
        );
    }
}
