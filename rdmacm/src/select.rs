//! Which ibcm device serves an IP address (docs/RDMACM.md, "Which device").
//!
//! `IBCM_RDMACM_DEVICE`:
//! * unset — automatic: the RDMA device whose GID table holds the IP;
//! * `soft` — every IP is its own software device `soft:<ip>` (CM over
//!   UDP, no verbs device: `id->verbs == NULL`, QP-less connections);
//! * any other value — that ibcm device name for every id (`soft:<ip>`,
//!   `soft:<ip>@<rdma dev>`, `<rdma dev>`).
//!
//! Devices are opened once and stay open for the life of the process.

use ibcm::api::{Device, DeviceOptions, Errno};
use ibcm::log::{ERROR, INFO};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, OnceLock};

/// The environment switch.
pub const ENV: &str = "IBCM_RDMACM_DEVICE";

/// What `IBCM_RDMACM_DEVICE` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    Auto,
    SoftPerIp,
    Fixed(String),
}

pub fn mode() -> Mode {
    match std::env::var(ENV) {
        Err(_) => Mode::Auto,
        Ok(v) if v.trim().is_empty() => Mode::Auto,
        Ok(v) if v.trim() == "soft" => Mode::SoftPerIp,
        Ok(v) => Mode::Fixed(v.trim().to_string()),
    }
}

/// Whether the host has any RDMA device (`/sys/class/infiniband`).
fn host_has_rdma_device() -> bool {
    std::fs::read_dir("/sys/class/infiniband").is_ok_and(|mut d| d.next().is_some())
}

/// `rdma_create_event_channel`'s check (librdmacm's `ucma_init`): ENODEV
/// when nothing can carry a connection, with a line saying what is missing.
pub fn check_any_device() -> Result<(), Errno> {
    if mode() != Mode::Auto {
        return Ok(());
    }
    if host_has_rdma_device() {
        return Ok(());
    }
    ibcm::log::always(
        ERROR,
        format_args!(
            "librdmacm (ibcm): no RDMA device (/sys/class/infiniband is empty) and {ENV} is unset; \
             set {ENV}=soft for the CM over UDP without a verbs device"
        ),
    );
    Err(Errno::ENODEV)
}

fn devices() -> &'static Mutex<HashMap<String, Arc<Device>>> {
    static D: OnceLock<Mutex<HashMap<String, Arc<Device>>>> = OnceLock::new();
    D.get_or_init(Default::default)
}

/// Opens (once) the ibcm device `name`.
pub fn open(name: &str) -> Result<Arc<Device>, Errno> {
    let mut map = devices().lock().unwrap_or_else(|p| p.into_inner());
    if let Some(d) = map.get(name) {
        return Ok(d.clone());
    }
    let d = Device::open(name, DeviceOptions::default()).inspect_err(|e| {
        ibcm::log::always(
            ERROR,
            format_args!("librdmacm (ibcm): cannot open device {name}: {e}"),
        )
    })?;
    ibcm_log!(INFO, "librdmacm (ibcm): opened device {name}");
    map.insert(name.to_string(), d.clone());
    Ok(d)
}

fn soft_name(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(a) => format!("soft:{a}"),
        IpAddr::V6(a) => format!("soft:[{a}]"),
    }
}

/// The ibcm device name for local address `ip` (`None`: wildcard).
pub fn device_name(ip: Option<IpAddr>) -> Result<String, Errno> {
    match (mode(), ip) {
        (Mode::Fixed(name), _) => Ok(name),
        (Mode::SoftPerIp, Some(ip)) => Ok(soft_name(ip)),
        (Mode::SoftPerIp, None) => {
            ibcm::log::always(
                ERROR,
                format_args!(
                    "librdmacm (ibcm): {ENV}=soft serves bound addresses only; a wildcard \
                     listen needs a device: bind to an IP or set {ENV}=soft:<ip>"
                ),
            );
            Err(Errno::ENODEV)
        }
        (Mode::Auto, ip) => {
            let what = ip.map_or("the wildcard address".to_string(), |i| i.to_string());
            ibcm::log::always(
                ERROR,
                format_args!(
                    "librdmacm (ibcm): no RDMA device with a GID for {what} is usable by this \
                     build; set {ENV}=soft (CM over UDP) or {ENV}=<ibcm device name>"
                ),
            );
            Err(Errno::ENODEV)
        }
    }
}

/// The device for local address `ip`, opened.
pub fn device_for(ip: Option<IpAddr>) -> Result<Arc<Device>, Errno> {
    open(&device_name(ip)?)
}

/// The source address the routing table picks for `dst` (a connected
/// UDP socket's local address; nothing is sent).
pub fn route_source(dst: IpAddr) -> Option<IpAddr> {
    let any: std::net::SocketAddr = if dst.is_ipv4() {
        "0.0.0.0:0".parse().ok()?
    } else {
        "[::]:0".parse().ok()?
    };
    let s = std::net::UdpSocket::bind(any).ok()?;
    s.connect((dst, 9)).ok()?;
    Some(s.local_addr().ok()?.ip())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn soft_names_and_route_source() {
        assert_eq!(soft_name("10.1.2.3".parse().unwrap()), "soft:10.1.2.3");
        assert_eq!(soft_name("fd00::1".parse().unwrap()), "soft:[fd00::1]");
        let s = route_source("127.0.0.9".parse().unwrap()).unwrap();
        assert!(s.is_loopback(), "{s}");
    }
}
