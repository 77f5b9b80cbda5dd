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

/// One counter: a `u64` or an array of them, zero at the start, added
/// element by element when shards are summed.
pub trait Tally {
    const ZERO: Self;
    fn add(&mut self, other: &Self);
    /// The values, in order (a scalar as one).
    fn values(&self) -> &[u64];
    fn values_mut(&mut self) -> &mut [u64];
}

impl Tally for u64 {
    const ZERO: u64 = 0;
    fn add(&mut self, other: &u64) {
        *self += other;
    }
    fn values(&self) -> &[u64] {
        std::slice::from_ref(self)
    }
    fn values_mut(&mut self) -> &mut [u64] {
        std::slice::from_mut(self)
    }
}

impl<const N: usize> Tally for [u64; N] {
    const ZERO: [u64; N] = [0; N];
    fn add(&mut self, other: &[u64; N]) {
        for (x, y) in self.iter_mut().zip(other) {
            *x += y;
        }
    }
    fn values(&self) -> &[u64] {
        self
    }
    fn values_mut(&mut self) -> &mut [u64] {
        self
    }
}

/// Declares a counter struct whose fields are each listed once: the struct,
/// its all-zero `Default` and `merge` (another shard's counters added
/// field by field) come from the one list. Every field's type is a
/// [`Tally`].
macro_rules! counter_struct {
    (
        $(#[$m:meta])*
        pub struct $name:ident {
            $( $(#[$fm:meta])* pub $f:ident: $t:ty, )*
        }
    ) => {
        $(#[$m])*
        pub struct $name {
            $( $(#[$fm])* pub $f: $t, )*
        }

        impl Default for $name {
            fn default() -> Self {
                $name { $( $f: <$t as Tally>::ZERO, )* }
            }
        }

        impl $name {
            /// Adds another shard's counters.
            pub fn merge(&mut self, o: &$name) {
                $( Tally::add(&mut self.$f, &o.$f); )*
            }

            /// Each field's name and values, in declaration order (a scalar
            /// as one value).
            pub fn fields(&self) -> [(&'static str, &[u64]); [$(stringify!($f)),*].len()] {
                [$( (stringify!($f), Tally::values(&self.$f)), )*]
            }

            /// [`Self::fields`], writable.
            pub fn fields_mut(&mut self) -> [(&'static str, &mut [u64]); [$(stringify!($f)),*].len()] {
                [$( (stringify!($f), Tally::values_mut(&mut self.$f)), )*]
            }
        }
    };
}

counter_struct! {
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
}

impl Counters {
    pub fn reason_index(reason: u32) -> usize {
        (reason as usize).min(REASONS - 1)
    }

    pub fn total_drops(&self) -> u64 {
        self.drops.iter().sum()
    }

    /// Human-readable multi-line report of the non-zero counters.
    pub fn report(&self) -> String {
        let mut s = String::new();
        let by_attr: [(&str, &[u64; ATTRS]); 5] = [
            ("tx", &self.tx),
            ("rx", &self.rx),
            ("rx_duplicates", &self.rx_duplicates),
            ("tx_retries", &self.tx_retries),
            ("timeouts", &self.timeouts),
        ];
        for (name, row) in by_attr {
            report_row(&mut s, name, row, |i| ATTR_NAMES[i].to_string());
        }
        for (name, row) in [("rej_tx", &self.rej_tx), ("rej_rx", &self.rej_rx)] {
            report_row(&mut s, name, row, |i| format!("reason{i}"));
        }
        report_row(&mut s, "drops", &self.drops, |i| DROP_NAMES[i].to_string());
        s.push_str(&format!(
            "{:<14} created={} destroyed={} events={}\n",
            "ids", self.ids_created, self.ids_destroyed, self.events
        ));
        s
    }
}

/// One line of [`Counters::report`]: `name` and each non-zero value as
/// `label=value`; nothing when all are zero.
fn report_row(s: &mut String, name: &str, row: &[u64], label: impl Fn(usize) -> String) {
    let parts: Vec<String> = row
        .iter()
        .enumerate()
        .filter(|(_, v)| **v > 0)
        .map(|(i, v)| format!("{}={v}", label(i)))
        .collect();
    if !parts.is_empty() {
        s.push_str(&format!("{name:<14} {}\n", parts.join(" ")));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The one field list of `counter_struct!` gives every field a zero
    /// default, a `merge` and a place in `fields()`.
    #[test]
    fn counter_struct_covers_every_field() {
        let zero = Counters::default();
        let n: usize = zero.fields().iter().map(|(_, v)| v.len()).sum();
        assert_eq!(
            n * 8,
            std::mem::size_of::<Counters>(),
            "fields() lists every counter"
        );
        assert!(zero.fields().iter().all(|(_, v)| v.iter().all(|&x| x == 0)));
        let mut b = Counters::default();
        let mut k = 1;
        for (_, v) in b.fields_mut() {
            for x in v.iter_mut() {
                *x = k;
                k += 1;
            }
        }
        let mut a = b.clone();
        a.merge(&b);
        for ((name, va), (nb, vb)) in a.fields().iter().zip(b.fields()) {
            assert_eq!(*name, nb);
            for (x, y) in va.iter().zip(vb) {
                assert_eq!(*x, 2 * y, "{name} merged");
            }
        }
        let last = b.fields()[b.fields().len() - 1];
        assert_eq!(last, ("rx_off_path", &[b.rx_off_path][..]));
        assert_eq!(b.fields()[7], ("drops", &b.drops[..]));
    }

    #[test]
    fn report_lists_non_zero_counters() {
        let mut c = Counters::default();
        c.tx[attr_index(attr::REQ)] = 3;
        c.tx[attr_index(attr::RTU)] = 1;
        c.timeouts[attr_index(attr::DREQ)] = 2;
        c.rej_rx[Counters::reason_index(28)] = 4;
        c.rej_rx[Counters::reason_index(99)] = 5;
        c.drops[DropCause::Duplicate as usize] = 6;
        c.ids_created = 7;
        c.events = 8;
        assert_eq!(
            c.report(),
            "tx             REQ=3 RTU=1\n\
             timeouts       DREQ=2\n\
             rej_rx         reason28=4 reason36=5\n\
             drops          duplicate=6\n\
             ids            created=7 destroyed=0 events=8\n"
        );
    }
}
