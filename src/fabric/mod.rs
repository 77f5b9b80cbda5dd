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

/// Transport-level counters (what the engine never sees).
#[derive(Debug, Default)]
pub struct TransportStats {
    pub rx_datagrams: AtomicU64,
    pub tx_datagrams: AtomicU64,
    /// Datagrams that were not RoCEv2 GSI MADs (wrong length, opcode, QP,
    /// Q_Key, …), dropped before the engine.
    pub rx_garbage: AtomicU64,
    /// Datagrams whose ICRC did not match the value a Linux UDP sender
    /// would produce (accepted: see `udp` for why).
    pub rx_icrc_unverified: AtomicU64,
    pub tx_errors: AtomicU64,
    pub rx_errors: AtomicU64,
    /// Destinations the transport cannot reach (unknown GID).
    pub tx_unroutable: AtomicU64,
}

/// A copy of a transport's counters at one moment, by name.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TransportCounters {
    pub rx_datagrams: u64,
    pub tx_datagrams: u64,
    /// Datagrams that were not RoCEv2 GSI MADs, dropped before the engine.
    pub rx_garbage: u64,
    /// Datagrams accepted with an ICRC other than a Linux sender's.
    pub rx_icrc_unverified: u64,
    pub tx_errors: u64,
    pub rx_errors: u64,
    /// Destinations the transport cannot reach (unknown GID).
    pub tx_unroutable: u64,
}

impl TransportStats {
    pub fn inc(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }
    pub fn snapshot(&self) -> TransportCounters {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        TransportCounters {
            rx_datagrams: g(&self.rx_datagrams),
            tx_datagrams: g(&self.tx_datagrams),
            rx_garbage: g(&self.rx_garbage),
            rx_icrc_unverified: g(&self.rx_icrc_unverified),
            tx_errors: g(&self.tx_errors),
            rx_errors: g(&self.rx_errors),
            tx_unroutable: g(&self.tx_unroutable),
        }
    }
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
    /// A soft device's GID and UDP port (`None` for other transports): the
    /// key under which a process's soft devices hand each other MADs
    /// without the wire (`runtime::switch`).
    fn soft_addr(&self) -> Option<(Gid, u16)> {
        None
    }
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
