//! Which ibcm device serves an IP address (docs/RDMACM.md, "Which device").
//!
//! `IBCM_RDMACM_DEVICE`:
//! * unset — automatic: the RDMA device whose GID table holds the IP
//!   (`verbs::find_by_ip`), served through its umad port (`rxe0`), or
//!   through the UDP side channel (`soft:<ip>@rxe0`) when the kernel's IB
//!   CM is loaded and owns the port's CM MADs;
//! * `soft` — every IP is its own software device `soft:<ip>` (CM over
//!   UDP, no verbs device: `id->verbs == NULL`, QP-less connections);
//! * any other value — that ibcm device name for every id (`soft:<ip>`,
//!   `soft:<ip>@<rdma dev>`, `<rdma dev>`).
//!
//! Devices are opened once and stay open for the life of the process.

use crate::verbs;
use ibcm::api::{Device, DeviceOptions, Errno};
use ibcm::log::{ERROR, INFO};
use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

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

/// The packet life time of a RoCE path without `RDMA_OPTION_ID_ACK_TIMEOUT`
/// (the kernel's `CMA_IBOE_PACKET_LIFETIME`). Linux 6.1 — Debian 12's
/// kernel, the one `make interop` proves against — uses 18 (REQ local ACK
/// timeout 19); later kernels use 16. `IBCM_RDMACM_PACKET_LIFETIME` (0–31)
/// matches another kernel; anything else is logged once and ignored.
pub const ROCE_PACKET_LIFE_TIME: u8 = 18;
pub const PACKET_LIFETIME_ENV: &str = "IBCM_RDMACM_PACKET_LIFETIME";

pub fn roce_packet_life_time() -> u8 {
    static V: std::sync::OnceLock<u8> = std::sync::OnceLock::new();
    *V.get_or_init(|| parse_packet_life_time(std::env::var(PACKET_LIFETIME_ENV).ok().as_deref()))
}

fn parse_packet_life_time(v: Option<&str>) -> u8 {
    match v.map(str::trim) {
        None | Some("") => ROCE_PACKET_LIFE_TIME,
        Some(t) => match t.parse::<u8>() {
            Ok(n) if n <= 31 => n,
            _ => {
                ibcm::log::always(
                    ERROR,
                    format_args!(
                        "librdmacm (ibcm): {PACKET_LIFETIME_ENV}={t:?} is not 0..31; using {ROCE_PACKET_LIFE_TIME}"
                    ),
                );
                ROCE_PACKET_LIFE_TIME
            }
        },
    }
}

/// Whether the host has any RDMA device (`/sys/class/infiniband`).
fn host_has_rdma_device() -> bool {
    std::fs::read_dir("/sys/class/infiniband").is_ok_and(|mut d| d.next().is_some())
}

/// `rdma_create_event_channel`'s check (librdmacm's `ucma_init`): ENODEV
/// when nothing can carry a connection, with a line saying what is missing.
/// With a device, its verbs are opened and queried here, as `ucma_init`
/// does (the list is kept for the process): the first bind or resolve does
/// not pay for it inside the application's timing of that call.
pub fn check_any_device() -> Result<(), Errno> {
    if mode() != Mode::Auto {
        return Ok(());
    }
    if host_has_rdma_device() {
        // A failure here is the first bind's to report, as before.
        let _ = verbs::devices();
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
    &crate::fork::globals().devices
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

/// At process exit: each open device forwarded by the host CM service
/// gives it the process's CM counters (`Device::send_last_counters`), so
/// that the device's counts in `ibcm stat` keep them. Skipped when the
/// table is locked (exit from inside the library).
pub fn send_last_counters() {
    let Ok(map) = devices().try_lock() else {
        return;
    };
    for d in map.values() {
        d.send_last_counters();
    }
}

/// Makes `dev` the device `open(name)` gives (a test's served device).
#[cfg(test)]
pub(crate) fn test_use_device(name: &str, dev: Arc<Device>) {
    devices()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(name.to_string(), dev);
}

fn soft_name(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(a) => format!("soft:{a}"),
        IpAddr::V6(a) => format!("soft:[{a}]"),
    }
}

/// Whether the kernel's IB CM is loaded: it then owns the CM MADs of
/// every port, so ibcm cannot use umad there. Looked at once a second at
/// most (it was a `statx` per `rdma_resolve_addr`); a module loaded or
/// removed is seen by the next lookup after that.
fn kernel_cm_loaded() -> bool {
    static SEEN: Mutex<Option<(std::time::Instant, bool)>> = Mutex::new(None);
    let mut g = SEEN.lock().unwrap_or_else(|p| p.into_inner());
    match *g {
        Some((at, v)) if at.elapsed() < std::time::Duration::from_secs(1) => v,
        _ => {
            let v = std::path::Path::new("/sys/module/ib_cm").exists();
            *g = Some((std::time::Instant::now(), v));
            v
        }
    }
}

/// The ibcm device for verbs device `rdma_dev` serving `ip` in automatic
/// mode: its umad port, or `soft:<ip>@<rdma_dev>` (CM over the UDP side
/// channel, QPs on the real device) when the kernel CM is loaded.
fn auto_name(ip: IpAddr, rdma_dev: &str) -> Result<String, Errno> {
    if !kernel_cm_loaded() {
        return Ok(rdma_dev.to_string());
    }
    static SAID: AtomicBool = AtomicBool::new(false);
    if !SAID.swap(true, Ordering::Relaxed) {
        ibcm::log::always(
            INFO,
            format_args!(
                "librdmacm (ibcm): the kernel IB CM (ib_cm) is loaded: the CM runs over the UDP \
                 side channel ({}@{rdma_dev}), the QPs on {rdma_dev}",
                soft_name(ip)
            ),
        );
    }
    Ok(format!("{}@{rdma_dev}", soft_name(ip)))
}

/// Whether ibcm device `name` comes with a verbs device (everything but a
/// plain `soft:<ip>`).
pub fn has_verbs(name: &str) -> bool {
    !name.starts_with("soft:") || name.contains('@')
}

/// The verbs device, port and GID of local address `ip` for an id on ibcm
/// device `name` (`None` on a plain software device, or when no RDMA
/// device holds the address).
pub fn verbs_binding(name: &str, ip: IpAddr) -> Option<verbs::Binding> {
    if !has_verbs(name) || ip.is_unspecified() {
        return None;
    }
    verbs::find_by_ip(ip, None).ok()
}

/// The name `dev` was opened under.
pub fn name_of(dev: &Arc<Device>) -> Option<String> {
    let map = devices().lock().unwrap_or_else(|p| p.into_inner());
    map.iter()
        .find(|(_, d)| Arc::ptr_eq(d, dev))
        .map(|(n, _)| n.clone())
}

/// The ibcm device name for local address `ip` (`None`: wildcard, which
/// automatic mode serves with `wildcard_devices`).
pub fn device_name(ip: Option<IpAddr>) -> Result<String, Errno> {
    match (mode(), ip) {
        (Mode::Auto, Some(ip)) if !ip.is_unspecified() => match verbs::find_by_ip(ip, None) {
            Ok(b) => auto_name(ip, b.device.name()),
            Err(_) => no_device(Some(ip)),
        },
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
        (Mode::Auto, ip) => no_device(ip),
    }
}

fn no_device(ip: Option<IpAddr>) -> Result<String, Errno> {
    let what = ip.map_or("the wildcard address".to_string(), |i| i.to_string());
    ibcm::log::always(
        ERROR,
        format_args!(
            "librdmacm (ibcm): no RoCE device has a GID for {what} (ibv_devices, `rdma link`); \
             set {ENV}=soft (CM over UDP) or {ENV}=<ibcm device name>"
        ),
    );
    Err(Errno::ENODEV)
}

/// The device for local address `ip`, opened, and the verbs device, port
/// and GID that hold `ip` when that device has one.
pub fn device_for(ip: Option<IpAddr>) -> Result<(Arc<Device>, Option<verbs::Binding>), Errno> {
    let name = device_name(ip)?;
    let dev = open(&name)?;
    Ok((dev, ip.and_then(|ip| verbs_binding(&name, ip))))
}

/// The IP address a GID carries (an IPv4-mapped GID is the IPv4 address);
/// `None` for the zero GID and for link-local IPv6 (fe80::/10, which needs
/// a scope to be used as a side-channel address).
pub fn gid_ip(gid: &[u8; 16]) -> Option<IpAddr> {
    let ip = match Ipv6Addr::from(*gid).to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(Ipv6Addr::from(*gid)),
    };
    match ip {
        IpAddr::V4(a) if a.is_unspecified() => None,
        IpAddr::V6(a) if a.is_unspecified() || a.segments()[0] & 0xffc0 == 0xfe80 => None,
        ip => Some(ip),
    }
}

/// The ibcm devices of a wildcard listen in automatic mode, from the RDMA
/// devices `devs` (name, the addresses of their GID tables): every device
/// through its umad port (`rxe0`) when the kernel CM is not loaded; when it
/// is, one UDP side channel per address of the listener's families
/// (`soft:<ip>@rxe0`). A request then reaches the listener through whichever
/// of them it came to (the child is on that device).
pub fn wildcard_names(
    devs: &[(String, Vec<IpAddr>)],
    kernel_cm: bool,
    v4: bool,
    v6: bool,
) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for (dev, ips) in devs {
        if !kernel_cm {
            names.push(dev.clone());
            continue;
        }
        for ip in ips {
            if (ip.is_ipv4() && v4) || (ip.is_ipv6() && v6) {
                names.push(format!("{}@{dev}", soft_name(*ip)));
            }
        }
    }
    let mut seen = std::collections::HashSet::new();
    names.retain(|n| seen.insert(n.clone()));
    names
}

/// The devices `rdma_listen` listens on for a listener bound to the
/// wildcard address `any` (`afonly`: an IPv6 wildcard without IPv4): in
/// automatic mode every RDMA device (`wildcard_names`), opened; a device
/// that cannot be opened is logged and left out. Otherwise the one device
/// the switch names.
pub fn wildcard_devices(any: IpAddr, afonly: bool) -> Result<Vec<Arc<Device>>, Errno> {
    if mode() != Mode::Auto {
        return Ok(vec![open(&device_name(None)?)?]);
    }
    let devs: Vec<(String, Vec<IpAddr>)> = match verbs::devices() {
        Ok(d) => d
            .iter()
            .map(|d| {
                let ips = d
                    .facts()
                    .ports
                    .iter()
                    .flat_map(|p| p.gids.iter().filter_map(|g| gid_ip(&g.gid.0)))
                    .collect();
                (d.name().to_string(), ips)
            })
            .collect(),
        Err(_) => Vec::new(),
    };
    if devs.is_empty() {
        no_device(None)?;
    }
    let kernel_cm = kernel_cm_loaded();
    let (v4, v6) = match any {
        IpAddr::V4(_) => (true, false),
        IpAddr::V6(_) => (!afonly, true),
    };
    let names = wildcard_names(&devs, kernel_cm, v4, v6);
    if names.is_empty() {
        let list: Vec<&str> = devs.iter().map(|(n, _)| n.as_str()).collect();
        ibcm::log::always(
            ERROR,
            format_args!(
                "librdmacm (ibcm): the kernel IB CM (ib_cm) is loaded and no RDMA device ({}) \
                 has an {} address in its GID table for a wildcard listen over the UDP side \
                 channel; bind to an IP or set {ENV}=soft:<ip>@<dev>",
                list.join(", "),
                if v6 && !v4 { "IPv6" } else { "IP" }
            ),
        );
        return Err(Errno::ENODEV);
    }
    let mut opened = Vec::new();
    for n in &names {
        if let Ok(d) = open(n) {
            opened.push(d);
        }
    }
    if opened.is_empty() {
        return Err(Errno::ENODEV);
    }
    ibcm::log::always(
        INFO,
        format_args!(
            "librdmacm (ibcm): wildcard listen on {} device(s): {}{}",
            opened.len(),
            names.join(", "),
            if kernel_cm {
                " (the kernel IB CM is loaded: the UDP side channel of each address)"
            } else {
                ""
            }
        ),
    );
    Ok(opened)
}

/// How long [`route_source`] reuses its answer for the same destination.
const ROUTE_SOURCE_TTL: std::time::Duration = std::time::Duration::from_secs(1);

/// One address family's lookup socket and its last answer.
struct RouteSlot {
    sock: Option<std::net::UdpSocket>,
    /// The last destination looked up, its source, and when.
    last: Option<(IpAddr, IpAddr, std::time::Instant)>,
}

/// The source address the routing table picks for `dst` (a connected
/// UDP socket's local address; nothing is sent). One socket per address
/// family serves every lookup of the process: dissolved (`AF_UNSPEC`,
/// which also forgets the source a connected socket keeps), connected to
/// `dst`, asked — three system calls where a fresh socket took five. The
/// answer for the last destination is reused for [`ROUTE_SOURCE_TTL`]
/// (no system call: an application resolving many ids to one peer, as
/// `cmtime` does, looks up once a second), so a route or address change
/// is seen by the lookups after at most that long, as the kernel CM
/// module's state is ([`kernel_cm_loaded`]).
pub fn route_source(dst: IpAddr) -> Option<IpAddr> {
    static V4: Mutex<RouteSlot> = Mutex::new(RouteSlot {
        sock: None,
        last: None,
    });
    static V6: Mutex<RouteSlot> = Mutex::new(RouteSlot {
        sock: None,
        last: None,
    });
    let slot = if dst.is_ipv4() { &V4 } else { &V6 };
    let mut g = slot.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((d, src, at)) = g.last {
        if d == dst && at.elapsed() < ROUTE_SOURCE_TTL {
            return Some(src);
        }
    }
    g.last = None;
    let src = route_source_lookup(&mut g.sock, dst)?;
    g.last = Some((dst, src, std::time::Instant::now()));
    Some(src)
}

/// [`route_source`]'s system calls on the family's socket `g`.
fn route_source_lookup(g: &mut Option<std::net::UdpSocket>, dst: IpAddr) -> Option<IpAddr> {
    let any = if dst.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" };
    if g.is_none() {
        *g = Some(std::net::UdpSocket::bind(any.parse::<std::net::SocketAddr>().ok()?).ok()?);
    }
    let s = g.as_ref()?;
    // SAFETY: an all-zero sockaddr with family AF_UNSPEC, its size given.
    let r = unsafe {
        use std::os::fd::AsRawFd;
        let mut sa: libc::sockaddr = std::mem::zeroed();
        sa.sa_family = libc::AF_UNSPEC as libc::sa_family_t;
        libc::connect(
            s.as_raw_fd(),
            &sa,
            std::mem::size_of::<libc::sockaddr>() as u32,
        )
    };
    if r != 0 {
        // Not dissolvable: a fresh socket next time.
        *g = None;
        let s = std::net::UdpSocket::bind(any.parse::<std::net::SocketAddr>().ok()?).ok()?;
        s.connect((dst, 9)).ok()?;
        return Some(s.local_addr().ok()?.ip());
    }
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

    #[test]
    fn gid_addresses() {
        let v4: Ipv6Addr = "::ffff:10.77.0.1".parse().unwrap();
        assert_eq!(gid_ip(&v4.octets()), Some("10.77.0.1".parse().unwrap()));
        let v6: Ipv6Addr = "fd00::5".parse().unwrap();
        assert_eq!(gid_ip(&v6.octets()), Some("fd00::5".parse().unwrap()));
        let ll: Ipv6Addr = "fe80::5054:ff:fe77:1".parse().unwrap();
        assert_eq!(gid_ip(&ll.octets()), None);
        assert_eq!(gid_ip(&[0; 16]), None);
        assert_eq!(
            gid_ip(&Ipv6Addr::from([0, 0, 0, 0, 0, 0xffff, 0, 0]).octets()),
            None
        );
    }

    #[test]
    fn wildcard_listen_devices() {
        let ip = |s: &str| -> IpAddr { s.parse().unwrap() };
        let devs = vec![
            (
                "rxe0".to_string(),
                vec![
                    ip("10.77.0.1"),
                    ip("fd00::1"),
                    ip("10.77.0.1"),
                    ip("10.78.0.1"),
                ],
            ),
            ("rxe1".to_string(), vec![ip("10.79.0.1")]),
            ("mlx5_0".to_string(), vec![]),
        ];
        // Without the kernel CM: every device over its umad port.
        assert_eq!(
            wildcard_names(&devs, false, true, false),
            ["rxe0", "rxe1", "mlx5_0"]
        );
        // With it: one side channel per address of the family, once each.
        assert_eq!(
            wildcard_names(&devs, true, true, false),
            [
                "soft:10.77.0.1@rxe0",
                "soft:10.78.0.1@rxe0",
                "soft:10.79.0.1@rxe1"
            ]
        );
        assert_eq!(
            wildcard_names(&devs, true, false, true),
            ["soft:[fd00::1]@rxe0"]
        );
        assert_eq!(wildcard_names(&devs, true, true, true).len(), 4);
        assert!(wildcard_names(&devs[2..], true, true, true).is_empty());
    }

    #[test]
    fn route_source_forgets_the_previous_destination() {
        // The shared socket must not keep the source of its last lookup
        // (a connected UDP socket does: reconnected elsewhere it keeps it,
        // or fails). What a fresh socket says is the truth; lookups that
        // alternate between loopback and a destination behind another
        // interface must each give it. A host without a route to
        // TEST-NET-1 only has the loopback half to check.
        let fresh = |d: &str| {
            let s = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
            s.connect((d.parse::<IpAddr>().unwrap(), 9)).ok()?;
            Some(s.local_addr().ok()?.ip())
        };
        let other = fresh("192.0.2.1");
        for _ in 0..2 {
            let lo = route_source("127.0.0.9".parse().unwrap()).unwrap();
            assert!(lo.is_loopback(), "{lo}");
            assert_eq!(route_source("192.0.2.1".parse().unwrap()), other);
        }
        let lo = route_source("127.0.0.10".parse().unwrap()).unwrap();
        assert!(lo.is_loopback(), "after {other:?}: {lo}");
        let v6 = route_source("::1".parse().unwrap());
        assert!(v6.is_none_or(|a| a.is_loopback()), "{v6:?}");
    }

    #[test]
    fn packet_life_time_default_and_override() {
        assert_eq!(parse_packet_life_time(None), 18);
        assert_eq!(parse_packet_life_time(Some(" ")), 18);
        assert_eq!(parse_packet_life_time(Some("16")), 16);
        assert_eq!(parse_packet_life_time(Some("32")), 18);
        assert_eq!(parse_packet_life_time(Some("x")), 18);
    }
}
