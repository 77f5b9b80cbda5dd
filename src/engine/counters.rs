//! Per-shard counters: what was sent, received, retried, timed out,
//! duplicated, rejected and dropped, per attribute and per cause. The
//! runtime sums the shards of a device.

use crate::wire::attr;

/// Number of attribute buckets: ClassPortInfo and the 11 CM messages.
pub const ATTRS: usize = 12;
/// Reject reasons 0..=35 plus one bucket for anything larger.
pub const REASONS: usize = 37;

/// Attribute names in bucket order.
pub const ATTR_NAMES: [&str; ATTRS] = [
    "ClassPortInfo",
    "REQ",
    "MRA",
    "REJ",
    "REP",
    "RTU",
    "DREQ",
    "DREP",
    "SIDR_REQ",
    "SIDR_REP",
    "LAP",
    "APR",
];

/// Bucket of an attribute ID (unknown attributes land in bucket 0).
pub fn attr_index(attr_id: u16) -> usize {
    match attr_id {
        attr::REQ..=attr::APR => (attr_id - attr::REQ) as usize + 1,
        _ => 0,
    }
}

c_enum! {
    /// Why a received MAD was dropped; `name()` is its counter's name.
    pub enum DropCause: usize {
        /// Not a well-formed CM MAD (length, header, attribute, reserved value).
        Malformed = 0, "malformed";
        /// Addressed to no known id (and not answered).
        UnknownId = 1, "unknown_id";
        /// The id exists but its state does not accept the message.
        WrongState = 2, "wrong_state";
        /// A duplicate that needs no answer.
        Duplicate = 3, "duplicate";
        /// A message the transport does not support (LAP/APR on RoCE).
        Unsupported = 4, "unsupported";
        /// Over a configured resource limit (half-open connections).
        Overload = 5, "overload";
        /// A response or method the CM does not act on (e.g. GetResp).
        Ignored = 6, "ignored";
        /// Message fields inconsistent with the connection (e.g. QPN mismatch).
        Mismatch = 7, "mismatch";
    }
}

pub const DROP_CAUSES: usize = DropCause::ALL.len();

/// The counter names of the drop causes, by value.
pub const DROP_NAMES: [&str; DROP_CAUSES] = {
    let mut n = [""; DROP_CAUSES];
    let mut i = 0;
    while i < DROP_CAUSES {
        n[i] = DropCause::ALL[i].name();
        i += 1;
    }
    n
};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counters {
    pub tx: [u64; ATTRS],
    pub rx: [u64; ATTRS],
    /// Received duplicates, by attribute.
    pub rx_duplicates: [u64; ATTRS],
    /// Retransmissions and responses re-sent because of a duplicate.
    pub tx_retries: [u64; ATTRS],
    /// Requests whose retries ran out, by attribute (REQ, REP, DREQ, SIDR_REQ).
    pub timeouts: [u64; ATTRS],
    pub rej_tx: [u64; REASONS],
    pub rej_rx: [u64; REASONS],
    pub drops: [u64; DROP_CAUSES],
    /// Ids created and destroyed (listeners and incoming ids included).
    pub ids_created: u64,
    pub ids_destroyed: u64,
    /// Events queued for consumers.
    pub events: u64,
    /// Received MADs whose length field exceeded its area (REJ
    /// RejectedInfoLength, SIDR_REP/APR AdditionalInformationLength > 72):
    /// clamped to the area and delivered, as the kernel delivers them.
    pub rx_clamped: u64,
    /// Half-open passive connections evicted to admit a newer REQ.
    pub half_open_evicted: u64,
    /// REQs rejected because their path named another requester than the
    /// one that sent them (off-path REQ: reflection guard).
    pub rx_off_path: u64,
}

impl Default for Counters {
    fn default() -> Self {
        Counters {
            tx: [0; ATTRS],
            rx: [0; ATTRS],
            rx_duplicates: [0; ATTRS],
            tx_retries: [0; ATTRS],
            timeouts: [0; ATTRS],
            rej_tx: [0; REASONS],
            rej_rx: [0; REASONS],
            drops: [0; DROP_CAUSES],
            ids_created: 0,
            ids_destroyed: 0,
            events: 0,
            rx_clamped: 0,
            half_open_evicted: 0,
            rx_off_path: 0,
        }
    }
}

fn add<const N: usize>(a: &mut [u64; N], b: &[u64; N]) {
    for (x, y) in a.iter_mut().zip(b) {
        *x += y;
    }
}

impl Counters {
    pub fn reason_index(reason: u32) -> usize {
        (reason as usize).min(REASONS - 1)
    }

    /// Adds another shard's counters.
    pub fn merge(&mut self, o: &Counters) {
        add(&mut self.tx, &o.tx);
        add(&mut self.rx, &o.rx);
        add(&mut self.rx_duplicates, &o.rx_duplicates);
        add(&mut self.tx_retries, &o.tx_retries);
        add(&mut self.timeouts, &o.timeouts);
        add(&mut self.rej_tx, &o.rej_tx);
        add(&mut self.rej_rx, &o.rej_rx);
        add(&mut self.drops, &o.drops);
        self.ids_created += o.ids_created;
        self.ids_destroyed += o.ids_destroyed;
        self.events += o.events;
        self.rx_clamped += o.rx_clamped;
        self.half_open_evicted += o.half_open_evicted;
        self.rx_off_path += o.rx_off_path;
    }

    pub fn total_drops(&self) -> u64 {
        self.drops.iter().sum()
    }

    /// Human-readable multi-line report of the non-zero counters.
    pub fn report(&self) -> String {
        let mut s = String::new();
        let rows: [(&str, &[u64; ATTRS]); 5] = [
            ("tx", &self.tx),
            ("rx", &self.rx),
            ("rx_duplicates", &self.rx_duplicates),
            ("tx_retries", &self.tx_retries),
            ("timeouts", &self.timeouts),
        ];
        for (name, row) in rows {
            let parts: Vec<String> = row
                .iter()
                .enumerate()
                .filter(|(_, v)| **v > 0)
                .map(|(i, v)| format!("{}={v}", ATTR_NAMES[i]))
                .collect();
            if !parts.is_empty() {
                s.push_str(&format!("{name:<14} {}\n", parts.join(" ")));
            }
        }
        for (name, row) in [("rej_tx", &self.rej_tx), ("rej_rx", &self.rej_rx)] {
            let parts: Vec<String> = row
                .iter()
                .enumerate()
                .filter(|(_, v)| **v > 0)
                .map(|(i, v)| format!("reason{i}={v}"))
                .collect();
            if !parts.is_empty() {
                s.push_str(&format!("{name:<14} {}\n", parts.join(" ")));
            }
        }
        let parts: Vec<String> = self
            .drops
            .iter()
            .enumerate()
            .filter(|(_, v)| **v > 0)
            .map(|(i, v)| format!("{}={v}", DROP_NAMES[i]))
            .collect();
        if !parts.is_empty() {
            s.push_str(&format!("{:<14} {}\n", "drops", parts.join(" ")));
        }
        s.push_str(&format!(
            "{:<14} created={} destroyed={} events={}\n",
            "ids", self.ids_created, self.ids_destroyed, self.events
        ));
        s
    }
}
