//! `ibcm devices [--json]`: the devices ibcm can use on this host.
//!
//! * Soft devices: every IP address of the host (getifaddrs) is a
//!   `soft:<ip>` device of the UDP software fabric.
//! * RDMA devices, from sysfs (`/sys/class/infiniband/*`): node GUID and
//!   type, each port's state, link layer and LID, its GID table with each
//!   entry's type and network device, and the umad node ibcm would use for
//!   its QP1 (`/sys/class/infiniband_mad/umad*`, `/dev/infiniband/umad*`).
//! * Whether the kernel CM (`ib_cm`, `/sys/module/ib_cm`) is loaded: then it
//!   owns QP1's CM class and a plain RDMA device name cannot be opened
//!   (`-EBUSY`); `soft:<ip>@<device>` can.
//!
//! Nothing here opens a device. The sysfs and /dev roots are options
//! (hidden: `--sysfs-root`, `--dev-root`, or `$IBCM_SYSFS_ROOT`,
//! `$IBCM_DEV_ROOT`) so the tests can run against a fake tree.

use std::ffi::CStr;
use std::fs;
use std::io::{self, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};

use serde::Serialize;

/// The long description in `ibcm devices --help`.
pub const ABOUT: &str = "\
Lists the devices ibcm can use: the host's IP addresses (soft:<ip>, the UDP
software fabric), the RDMA devices in sysfs with their ports and GIDs, and
whether the kernel CM owns QP1. Nothing is opened.";

/// `ibcm devices`'s command line.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// one JSON object instead of text
    #[arg(long)]
    pub json: bool,
    /// read sysfs from DIR instead of /sys (for testing)
    #[arg(
        long,
        value_name = "DIR",
        env = "IBCM_SYSFS_ROOT",
        default_value = "/sys",
        hide = true
    )]
    pub sysfs_root: PathBuf,
    /// look for device nodes under DIR instead of /dev (for testing)
    #[arg(
        long,
        value_name = "DIR",
        env = "IBCM_DEV_ROOT",
        default_value = "/dev",
        hide = true
    )]
    pub dev_root: PathBuf,
}

/// One address of the host: a `soft:<ip>` device.
#[derive(Debug, Serialize)]
struct SoftDevice {
    device: String,
    interface: String,
    address: IpAddr,
    /// The interface is up.
    up: bool,
}

#[derive(Debug, Serialize)]
struct GidEntry {
    index: u32,
    gid: Ipv6Addr,
    /// `IB/RoCE v1`, `RoCE v2` (the kernel's words), when sysfs has it.
    #[serde(skip_serializing_if = "Option::is_none")]
    r#type: Option<String>,
    /// The network device the GID belongs to (RoCE).
    #[serde(skip_serializing_if = "Option::is_none")]
    netdev: Option<String>,
    /// The IP address a RoCE GID stands for (IPv4-mapped GIDs as IPv4).
    #[serde(skip_serializing_if = "Option::is_none")]
    ip: Option<IpAddr>,
}

#[derive(Debug, Serialize)]
struct Port {
    port: u32,
    state: Option<String>,
    phys_state: Option<String>,
    link_layer: Option<String>,
    lid: Option<u32>,
    /// The umad node of this port (`umad0`), if ib_umad registered one.
    umad: Option<String>,
    /// `/dev/infiniband/<umad>` exists.
    umad_node: bool,
    gids: Vec<GidEntry>,
}

#[derive(Debug, Serialize)]
struct RdmaDevice {
    name: String,
    node_guid: Option<String>,
    node_type: Option<String>,
    /// The network device under a Soft-RoCE device.
    parent: Option<String>,
    ports: Vec<Port>,
    /// Device names that open it: `<dev>` (CM on QP1 through ib_umad) and
    /// `soft:<ip>@<dev>` for each routable IP address of its RoCE GIDs.
    open_as: Vec<String>,
}

#[derive(Debug, Serialize)]
struct Report {
    soft: Vec<SoftDevice>,
    /// Why the host's addresses could not be listed, if they could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    soft_error: Option<String>,
    rdma: Vec<RdmaDevice>,
    /// `ib_cm` is loaded: it owns QP1's CM class on every port.
    kernel_cm_loaded: bool,
    /// `ib_umad` is loaded.
    ib_umad_loaded: bool,
    /// `/dev/infiniband/umad*` nodes present.
    umad_nodes: Vec<String>,
    /// What to do, one sentence each.
    notes: Vec<String>,
}

// ------------------------------------------------------------ soft devices

/// The host's IP addresses, by interface (getifaddrs order). IPv6
/// link-local addresses are left out: a `soft:` name has no scope ID.
fn host_addresses() -> io::Result<Vec<SoftDevice>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list freed by freeifaddrs.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut out = Vec::new();
    let mut p = head;
    while !p.is_null() {
        // SAFETY: `p` is a node of the list getifaddrs returned; its
        // ifa_addr, when not null, points at a sockaddr of ifa_addr's family.
        let ifa = unsafe { &*p };
        p = ifa.ifa_next;
        if ifa.ifa_addr.is_null() || ifa.ifa_name.is_null() {
            continue;
        }
        let family = unsafe { (*ifa.ifa_addr).sa_family } as i32;
        let ip = match family {
            libc::AF_INET => {
                let sa = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
                IpAddr::V4(Ipv4Addr::from(u32::from_be(sa.sin_addr.s_addr)))
            }
            libc::AF_INET6 => {
                let sa = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in6) };
                let v6 = Ipv6Addr::from(sa.sin6_addr.s6_addr);
                if v6.is_unicast_link_local() {
                    continue;
                }
                IpAddr::V6(v6)
            }
            _ => continue,
        };
        let name = unsafe { CStr::from_ptr(ifa.ifa_name) }
            .to_string_lossy()
            .into_owned();
        out.push(SoftDevice {
            device: soft_name(ip),
            interface: name,
            address: ip,
            up: ifa.ifa_flags & libc::IFF_UP as u32 != 0,
        });
    }
    // SAFETY: `head` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

/// `soft:<ip>` (IPv6 in brackets, as the device names take it).
fn soft_name(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(v4) => format!("soft:{v4}"),
        IpAddr::V6(v6) => format!("soft:[{v6}]"),
    }
}

// ------------------------------------------------------------ sysfs

/// A sysfs attribute, trimmed; `None` when it is missing or unreadable.
fn attr(path: &Path) -> Option<String> {
    fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// `4: ACTIVE` -> `ACTIVE` (sysfs's numbered states and node types).
fn label(s: String) -> String {
    match s.split_once(": ") {
        Some((n, l)) if n.bytes().all(|b| b.is_ascii_digit()) => l.to_string(),
        _ => s,
    }
}

/// The entries of a directory, sorted by name; numeric names numerically.
fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort_by(|a, b| match (a.parse::<u64>(), b.parse::<u64>()) {
        (Ok(x), Ok(y)) => x.cmp(&y),
        _ => a.cmp(b),
    });
    v
}

/// The IP address a RoCE GID stands for: IPv4-mapped GIDs as IPv4.
fn gid_ip(gid: Ipv6Addr) -> IpAddr {
    match gid.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None => IpAddr::V6(gid),
    }
}

fn read_gids(port_dir: &Path) -> Vec<GidEntry> {
    let mut out = Vec::new();
    for idx in entries(&port_dir.join("gids")) {
        let Ok(index) = idx.parse::<u32>() else {
            continue;
        };
        // Unused entries read as zeros (or fail to read, on RoCE).
        let Some(gid) = attr(&port_dir.join("gids").join(&idx))
            .and_then(|s| s.parse::<Ipv6Addr>().ok())
            .filter(|g| !g.is_unspecified())
        else {
            continue;
        };
        let r#type = attr(&port_dir.join("gid_attrs/types").join(&idx));
        let netdev = attr(&port_dir.join("gid_attrs/ndevs").join(&idx));
        let ip = netdev.is_some().then(|| gid_ip(gid));
        out.push(GidEntry {
            index,
            gid,
            r#type,
            netdev,
            ip,
        });
    }
    out
}

/// `(ibdev, port) -> umadN` from `class/infiniband_mad`.
fn umad_map(sysfs: &Path) -> Vec<(String, u32, String)> {
    let dir = sysfs.join("class/infiniband_mad");
    entries(&dir)
        .into_iter()
        .filter(|n| n.starts_with("umad"))
        .filter_map(|n| {
            let ibdev = attr(&dir.join(&n).join("ibdev"))?;
            let port = attr(&dir.join(&n).join("port"))?.parse().ok()?;
            Some((ibdev, port, n))
        })
        .collect()
}

fn rdma_devices(sysfs: &Path, dev: &Path) -> Vec<RdmaDevice> {
    let class = sysfs.join("class/infiniband");
    let umads = umad_map(sysfs);
    let mut out = Vec::new();
    for name in entries(&class) {
        let d = class.join(&name);
        let mut ports = Vec::new();
        for p in entries(&d.join("ports")) {
            let Ok(port) = p.parse::<u32>() else {
                continue;
            };
            let pd = d.join("ports").join(&p);
            let umad = umads
                .iter()
                .find(|(ibdev, n, _)| *ibdev == name && *n == port)
                .map(|(_, _, u)| u.clone());
            let umad_node = umad
                .as_ref()
                .is_some_and(|u| dev.join("infiniband").join(u).exists());
            ports.push(Port {
                port,
                state: attr(&pd.join("state")).map(label),
                phys_state: attr(&pd.join("phys_state")).map(label),
                link_layer: attr(&pd.join("link_layer")),
                lid: attr(&pd.join("lid"))
                    .and_then(|s| u32::from_str_radix(s.trim_start_matches("0x"), 16).ok()),
                umad,
                umad_node,
                gids: read_gids(&pd),
            });
        }
        let mut open_as = vec![name.clone()];
        for g in ports.iter().flat_map(|p| &p.gids) {
            // Routable addresses only: a link-local GID has no soft: name.
            if let Some(ip) = g.ip
                && !matches!(ip, IpAddr::V6(v6) if v6.is_unicast_link_local())
            {
                let n = format!("{}@{name}", soft_name(ip));
                if !open_as.contains(&n) {
                    open_as.push(n);
                }
            }
        }
        out.push(RdmaDevice {
            node_guid: attr(&d.join("node_guid")),
            node_type: attr(&d.join("node_type")).map(label),
            parent: attr(&d.join("parent")),
            name,
            ports,
            open_as,
        });
    }
    out
}

fn report(a: &Args) -> Report {
    let (soft, soft_error) = match host_addresses() {
        Ok(v) => (v, None),
        Err(e) => (Vec::new(), Some(format!("getifaddrs: {e}"))),
    };
    let rdma = rdma_devices(&a.sysfs_root, &a.dev_root);
    let kernel_cm_loaded = a.sysfs_root.join("module/ib_cm").exists();
    let ib_umad_loaded = a.sysfs_root.join("module/ib_umad").exists();
    let umad_nodes: Vec<String> = entries(&a.dev_root.join("infiniband"))
        .into_iter()
        .filter(|n| n.starts_with("umad"))
        .collect();
    let mut notes = Vec::new();
    if rdma.is_empty() {
        notes.push(
            "No RDMA devices on this host (nothing in /sys/class/infiniband): use soft:<ip> \
             devices; Soft-RoCE adds one with 'rdma link add rxe0 type rxe netdev <if>'."
                .to_string(),
        );
    } else {
        if kernel_cm_loaded {
            notes.push(
                "The kernel CM (ib_cm) is loaded and owns QP1's CM class: opening an RDMA \
                 device by name fails with -EBUSY; use soft:<ip>@<dev>, or unload the kernel \
                 CM (see README \"Real devices\")."
                    .to_string(),
            );
        }
        if umad_nodes.is_empty() {
            notes.push(
                "No /dev/infiniband/umad* nodes: opening an RDMA device by name needs ib_umad \
                 ('modprobe ib_umad'); soft:<ip>@<dev> does not."
                    .to_string(),
            );
        }
    }
    Report {
        soft,
        soft_error,
        rdma,
        kernel_cm_loaded,
        ib_umad_loaded,
        umad_nodes,
        notes,
    }
}

fn or_unknown(s: &Option<String>) -> &str {
    s.as_deref().unwrap_or("?")
}

fn text(r: &Report, sysfs: &Path, out: &mut impl Write) -> io::Result<()> {
    writeln!(
        out,
        "Soft devices (the UDP software fabric; any address of this host):"
    )?;
    if let Some(e) = &r.soft_error {
        writeln!(out, "  cannot list the host's addresses: {e}")?;
    }
    let width = r.soft.iter().map(|s| s.device.len()).max().unwrap_or(0);
    for s in &r.soft {
        let down = if s.up { "" } else { " (down)" };
        writeln!(out, "  {:width$}  {}{down}", s.device, s.interface)?;
    }
    writeln!(
        out,
        "  (every 127.0.0.x works on lo, for several devices on one host; soft:<ip>:<udp port>\n   picks another UDP port than 4791; loop:<ip> is the in-process fabric)"
    )?;
    writeln!(out)?;
    let class = sysfs.join("class/infiniband");
    if r.rdma.is_empty() {
        writeln!(out, "RDMA devices ({}): none", class.display())?;
    } else {
        writeln!(out, "RDMA devices ({}):", class.display())?;
    }
    for d in &r.rdma {
        write!(
            out,
            "  {}: node GUID {}, {}",
            d.name,
            or_unknown(&d.node_guid),
            or_unknown(&d.node_type)
        )?;
        if let Some(p) = &d.parent {
            write!(out, ", on {p}")?;
        }
        writeln!(out)?;
        for p in &d.ports {
            write!(
                out,
                "    port {}: {} ({}), link layer {}",
                p.port,
                or_unknown(&p.state),
                or_unknown(&p.phys_state),
                or_unknown(&p.link_layer)
            )?;
            if let Some(lid) = p.lid.filter(|&l| l != 0) {
                write!(out, ", LID {lid:#x}")?;
            }
            match &p.umad {
                Some(u) if p.umad_node => write!(out, ", {u}")?,
                Some(u) => write!(out, ", {u} (no /dev/infiniband/{u})")?,
                None => write!(out, ", no umad port")?,
            }
            writeln!(out)?;
            for g in &p.gids {
                write!(out, "      GID {:<3} {}", g.index, g.gid)?;
                if let Some(t) = &g.r#type {
                    write!(out, "  {t}")?;
                }
                if let Some(n) = &g.netdev {
                    write!(out, "  {n}")?;
                }
                if let Some(IpAddr::V4(v4)) = g.ip {
                    write!(out, "  ({v4})")?;
                }
                writeln!(out)?;
            }
            if p.gids.is_empty() {
                writeln!(out, "      no GIDs")?;
            }
        }
        writeln!(out, "    open as: {}", d.open_as.join(", "))?;
    }
    writeln!(out)?;
    writeln!(
        out,
        "Kernel CM (ib_cm): {}",
        if r.kernel_cm_loaded {
            "loaded: it owns QP1's CM class"
        } else {
            "not loaded"
        }
    )?;
    writeln!(
        out,
        "umad (ib_umad): {}{}",
        if r.umad_nodes.is_empty() {
            "no /dev/infiniband/umad* nodes".to_string()
        } else {
            r.umad_nodes.join(", ")
        },
        if r.ib_umad_loaded {
            ""
        } else {
            " (module not loaded)"
        }
    )?;
    for n in &r.notes {
        writeln!(out, "{n}")?;
    }
    Ok(())
}

pub fn main(a: &Args) -> i32 {
    let r = report(a);
    let stdout = io::stdout();
    let mut out = io::BufWriter::new(stdout.lock());
    let written = if a.json {
        serde_json::to_writer_pretty(&mut out, &r)
            .map_err(io::Error::from)
            .and_then(|()| writeln!(out))
    } else {
        text(&r, &a.sysfs_root, &mut out)
    };
    match written.and_then(|()| out.flush()) {
        Ok(()) => 0,
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => 0,
        Err(e) => {
            eprintln!("ibcm devices: cannot write the output: {e}");
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_gids() {
        assert_eq!(label("4: ACTIVE".into()), "ACTIVE");
        assert_eq!(label("1: CA".into()), "CA");
        assert_eq!(label("Ethernet".into()), "Ethernet");
        let g: Ipv6Addr = "0000:0000:0000:0000:0000:ffff:0a00:0002".parse().unwrap();
        assert_eq!(gid_ip(g), "10.0.0.2".parse::<IpAddr>().unwrap());
        assert_eq!(soft_name("::1".parse().unwrap()), "soft:[::1]");
    }

    #[test]
    fn host_addresses_include_loopback() {
        let a = host_addresses().unwrap();
        assert!(
            a.iter()
                .any(|s| s.device == "soft:127.0.0.1" && s.interface == "lo"),
            "{a:?}"
        );
    }
}
