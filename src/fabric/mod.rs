//! MAD transports: how a device's MADs reach other devices.
//!
//! * [`udp`] — the built-in software fabric: each soft device is a UDP
//!   socket on its IP address; MADs travel as RoCEv2 UD packets to QP1
//!   (BTH + DETH + MAD + ICRC), so tshark decodes them as InfiniBand CM.
//! * [`loopback`] — an in-process fabric for tests and benchmarks that
//!   should not touch sockets.
//! * [`umad`] — real HCAs: QP1 through the kernel's ib_umad, device facts
//!   from libibverbs ([`verbs`], loaded at run time); and the
//!   soft-CM-with-verbs transport (`soft:<ip>@<device>`).
//!
//! A transport only moves 256-byte MADs; the engine decides what they say.

pub mod loopback;
pub mod udp;
pub mod umad;
pub mod verbs;

use crate::engine::{MadSource, PortInfo, Transmit};
use crate::wire::Gid;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// One received MAD and where it came from.
#[derive(Clone)]
pub struct Received {
    pub src: MadSource,
    pub mad: [u8; 256],
}

/// Declares the transport counters once: [`TransportStats`] (live,
/// atomic), [`TransportCounters`] (a copy, by name) and the snapshot from
/// one to the other.
macro_rules! transport_counters {
    ($($(#[$doc:meta])* $name:ident,)*) => {
        /// Transport-level counters (what the engine never sees).
        #[derive(Debug, Default)]
        pub struct TransportStats {
            $($(#[$doc])* pub $name: AtomicU64,)*
        }

        /// A copy of a transport's counters at one moment, by name.
        #[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
        pub struct TransportCounters {
            $($(#[$doc])* pub $name: u64,)*
        }

        impl TransportCounters {
            /// Each counter's name and value (as a one-element slice), in
            /// declaration order.
            pub fn fields(&self) -> [(&'static str, &[u64]); [$(stringify!($name)),*].len()] {
                [$((stringify!($name), std::slice::from_ref(&self.$name)),)*]
            }

            /// [`Self::fields`], writable.
            pub fn fields_mut(&mut self) -> [(&'static str, &mut [u64]); [$(stringify!($name)),*].len()] {
                [$((stringify!($name), std::slice::from_mut(&mut self.$name)),)*]
            }
        }

        impl TransportStats {
            pub fn snapshot(&self) -> TransportCounters {
                TransportCounters {
                    $($name: self.$name.load(Ordering::Relaxed),)*
                }
            }
        }
    };
}

transport_counters! {
    rx_datagrams,
    tx_datagrams,
    /// Datagrams that were not RoCEv2 GSI MADs (wrong length, opcode, QP,
    /// Q_Key, …), dropped before the engine.
    rx_garbage,
    /// Datagrams whose ICRC did not match the value a Linux UDP sender
    /// would produce (accepted: see `udp` for why).
    rx_icrc_unverified,
    tx_errors,
    rx_errors,
    /// Destinations the transport cannot reach (unknown GID).
    tx_unroutable,
}

impl TransportStats {
    pub fn inc(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }
}

/// `poll(2)`'s timeout for `timeout`: milliseconds rounded up (a wait
/// never ends early), -1 for none.
pub fn poll_ms(timeout: Option<Duration>) -> i32 {
    match timeout {
        None => -1,
        Some(d) => {
            d.as_millis().min(i32::MAX as u128) as i32 + (d.subsec_nanos() % 1_000_000 != 0) as i32
        }
    }
}

/// What design B's service asks of a forwarded device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ask {
    /// A REQ or REP for another process named the peer's QP (CA GUID,
    /// QPN) that a connection of this device holds (the host's stale
    /// table): send that connection's DREQ.
    Stale { guid: u64, qpn: u32 },
    /// List the device's ids (`ibcm ids`): [`Transport::answer_ids`].
    Ids { seq: u64 },
    /// Send the device's CM counters (`ibcm stat`):
    /// [`Transport::answer_stat`].
    Stat { seq: u64 },
}

/// One id of a device as `ibcm ids` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdRow {
    /// `enum ib_cm_state`.
    pub state: u32,
    pub local_id: u32,
    pub remote_id: u32,
    pub service_id: u64,
    /// The peer's GID, once the id has one.
    pub peer: Option<Gid>,
    pub age_ms: u64,
}

/// A MAD transport shared by a device's threads.
pub trait Transport: Send + Sync + 'static {
    /// Sends MADs, best effort (failures are counted in `stats`).
    fn send(&self, batch: &[Transmit]);
    /// Waits up to `timeout` (`None` = until woken) for MADs and appends
    /// them to `out`. Returns early when MADs arrive or `wake` is called.
    fn recv(&self, timeout: Option<Duration>, out: &mut Vec<Received>) -> io::Result<()>;
    /// Interrupts a `recv` in progress (new timer, shutdown).
    fn wake(&self);
    /// The device's ports as the engine must know them.
    fn ports(&self) -> Vec<PortInfo>;
    /// The device's node (CA) GUID.
    fn node_guid(&self) -> u64;
    /// The CA's `local_ca_ack_delay`, when the transport knows a real one.
    fn ack_delay(&self) -> Option<u8> {
        None
    }
    /// Whether `port_change` reports anything (real devices).
    fn watches_ports(&self) -> bool {
        false
    }
    /// Waits up to `timeout` for a port event (GID table, LID, P_Key, port
    /// state) and returns the new port table if it changed.
    fn port_change(&self, timeout: Duration) -> Option<Vec<PortInfo>> {
        let _ = timeout;
        None
    }
    fn stats(&self) -> &TransportStats;
    /// The live-capture tap of a soft device (`None` for other transports):
    /// MADs that the service's switch hands between its soft devices skip
    /// the UDP socket, so the switch records them on both devices' taps.
    fn tap(&self) -> Option<&crate::capture::live::Tap> {
        None
    }
    /// A soft device's GID and UDP port (`None` for other transports): the
    /// key under which a process's soft devices hand each other MADs
    /// without the wire (`runtime::switch`).
    fn soft_addr(&self) -> Option<(Gid, u16)> {
        None
    }
    /// Whether the transport can send nothing more, for good (design B's
    /// service connection closed): calls that would send fail `-ENODEV`
    /// and outstanding requests fail at once.
    fn lost(&self) -> bool {
        false
    }
    /// What design B's service asked of the device since the last call
    /// (appended to `out` once each; the event loop does it).
    fn take_asks(&self, out: &mut Vec<Ask>) {
        let _ = out;
    }
    /// The answer to [`Ask::Ids`] `seq`: the device's ids.
    fn answer_ids(&self, seq: u64, rows: &[IdRow]) {
        let _ = (seq, rows);
    }
    /// The answer to [`Ask::Stat`] `seq`: the device's CM counters.
    fn answer_stat(&self, seq: u64, c: &crate::engine::Counters) {
        let _ = (seq, c);
    }
    /// The device was closed (its ids destroyed, their MADs sent, its
    /// threads joined): a transport holding a connection to the service
    /// ends it now rather than when the last reference goes, so the
    /// service releases what the process held at once.
    fn close(&self) {}
    /// A short description for logs ("soft:127.0.0.1:4791").
    fn describe(&self) -> String;
}

/// A stable node GUID for a soft device: derived from its address and UDP
/// port (so a restarted process keeps its GUID, as a rebooted host keeps
/// its HCA's), with the locally-administered bit pattern of an EUI-64.
pub fn soft_node_guid(addr: &std::net::IpAddr, port: u16) -> u64 {
    let mut x: u64 = port as u64;
    match addr {
        std::net::IpAddr::V4(v4) => x ^= (u32::from(*v4) as u64) << 16,
        std::net::IpAddr::V6(v6) => {
            let o = v6.octets();
            x ^= u64::from_be_bytes(o[0..8].try_into().unwrap());
            x ^= u64::from_be_bytes(o[8..16].try_into().unwrap()).rotate_left(17);
        }
    }
    let h = crate::engine::ids::splitmix64(x);
    // 02:xx:xx:ff:fe:xx:xx:xx — a locally administered EUI-64.
    0x0200_00ff_fe00_0000 | (h & 0x00ff_ff00_0000_0000) | (h & 0x00_00ff_ffff)
}
