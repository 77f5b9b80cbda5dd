//! Real HCAs: CM MADs through QP1 with the kernel's `ib_umad` interface.
//!
//! One `/dev/infiniband/umadN` file per port (found through
//! `/sys/class/infiniband_mad/umadN/{ibdev,port}`), the P_Key-index header
//! ABI enabled, and one MAD agent per port registered for the CM class
//! (0x07, version 2) with the Send method, so every CM MAD that arrives on
//! the port's QP1 comes to us. The kernel ABI is used directly (no
//! libibumad): `struct ib_user_mad_hdr` (64 bytes) + the 256-byte MAD for
//! `read`/`write`, `IB_USER_MAD_REGISTER_AGENT` for the agent.
//!
//! Facts (Soft-RoCE lab, FINDINGS step 4): on RoCE every MAD needs a GRH
//! whose `gid_index` is the local GID to send from; ib_umad replaces the
//! upper 32 bits of the TID of every request-class MAD it sends (the CM's
//! Send counts as one) with its agent's hi_tid, so only the low 32 bits of
//! our TIDs reach the wire (peers echo the wire TID; nothing here matches
//! on TIDs). Sends use `timeout_ms = 0` (no kernel retries and no send
//! completions to read): the engine retransmits.
//!
//! Only one CM class agent may exist per port: when the kernel's `ib_cm`
//! module is loaded it owns the class and registration fails (`EINVAL`,
//! kernel log "Method 3 already in use"); opening the device then fails
//! with `-EBUSY` and a log line that names the choices.

use super::verbs::VerbsInfo;
use super::{Received, Transport, TransportStats};
use crate::capture::Direction;
use crate::capture::live::{self, Tap};
use crate::engine::{Errno, GidType, MadSource, PortInfo, Transmit, errno};
use crate::log::{DEBUG, ERROR, INFO, WARN};
use crate::wire::Gid;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{RwLock, RwLockReadGuard};
use std::time::Duration;

/// `sizeof(struct ib_user_mad_hdr)` with the P_Key index ABI.
pub const HDR_LEN: usize = 64;
const MAD_LEN: usize = 256;
/// `sizeof(struct ib_user_mad_reg_req)`.
pub const REG_REQ_LEN: usize = 28;
/// `IB_USER_MAD_REGISTER_AGENT` = `_IOWR(0x1b, 1, struct ib_user_mad_reg_req)`.
pub const IOCTL_REGISTER_AGENT: libc::c_ulong = 0xc01c_1b01;
/// `IB_USER_MAD_ENABLE_PKEY` = `_IO(0x1b, 3)`.
pub const IOCTL_ENABLE_PKEY: libc::c_ulong = 0x1b03;
const CM_CLASS: u8 = 0x07;
const CM_CLASS_VERSION: u8 = 2;
const METHOD_SEND: u8 = 0x03;
const QP1_QKEY: u32 = 0x8001_0000;
/// Receive buffer: header + the largest MAD (OPA 2048) so nothing is cut.
const RECV_LEN: usize = HDR_LEN + 2048;

/// `struct ib_user_mad_hdr` field offsets (include/uapi/rdma/ib_user_mad.h).
pub mod hdr {
    pub const ID: usize = 0;
    pub const STATUS: usize = 4;
    pub const TIMEOUT_MS: usize = 8;
    pub const RETRIES: usize = 12;
    pub const LENGTH: usize = 16;
    pub const QPN: usize = 20;
    pub const QKEY: usize = 24;
    pub const LID: usize = 28;
    pub const SL: usize = 30;
    pub const PATH_BITS: usize = 31;
    pub const GRH_PRESENT: usize = 32;
    pub const GID_INDEX: usize = 33;
    pub const HOP_LIMIT: usize = 34;
    pub const TRAFFIC_CLASS: usize = 35;
    pub const GID: usize = 36;
    pub const FLOW_LABEL: usize = 52;
    pub const PKEY_INDEX: usize = 56;
}

struct PortFd {
    port_num: u8,
    /// Current port facts (replaced on port events).
    port: RwLock<PortInfo>,
    fd: OwnedFd,
    agent: u32,
    path: String,
}

pub struct UmadTransport {
    name: String,
    ports: Vec<PortFd>,
    wake_fd: OwnedFd,
    node_guid: u64,
    ack_delay: u8,
    stats: TransportStats,
    watcher: Option<super::verbs::Watcher>,
    tap: Tap,
}

fn read<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|e| e.into_inner())
}

/// Re-reads the device after a port event; the new ports if they changed.
fn refresh(
    w: &super::verbs::Watcher,
    timeout: Duration,
    current: &[PortInfo],
) -> Option<Vec<PortInfo>> {
    if !w.wait(timeout) {
        return None;
    }
    match w.query() {
        Ok(info) if info.ports.as_slice() != current => {
            crate::ibcm_log!(
                INFO,
                "{}: port event: GID/P_Key/LID tables re-read",
                info.name
            );
            Some(info.ports)
        }
        Ok(_) => None,
        Err(e) => {
            crate::ibcm_log!(WARN, "port event: re-reading the device failed: {e}");
            None
        }
    }
}

/// The `/dev/infiniband/umadN` of `dev` port `port`, from sysfs.
fn umad_path(dev: &str, port: u8) -> Option<String> {
    let dir = std::fs::read_dir("/sys/class/infiniband_mad").ok()?;
    for e in dir.flatten() {
        let n = e.file_name().to_string_lossy().into_owned();
        if !n.starts_with("umad") {
            continue;
        }
        let rd = |f: &str| {
            std::fs::read_to_string(e.path().join(f))
                .map(|s| s.trim().to_string())
                .unwrap_or_default()
        };
        if rd("ibdev") == dev && rd("port") == port.to_string() {
            return Some(format!("/dev/infiniband/{n}"));
        }
    }
    None
}

fn kernel_cm_loaded() -> bool {
    std::path::Path::new("/sys/module/ib_cm").exists()
}

/// Writes an error line even when `IBCM_LOG` is unset: a refused device
/// leaves the caller nothing but an errno otherwise.
fn always_log(args: std::fmt::Arguments<'_>) {
    crate::log::always(ERROR, args)
}

/// The log line and errno when the CM class cannot be registered.
fn refused(dev: &str, port: u8, e: &io::Error) -> Errno {
    if e.raw_os_error() == Some(errno::EINVAL) || e.raw_os_error() == Some(errno::EBUSY) {
        always_log(format_args!(
            "{dev} port {port}: the CM class (0x07) on QP1 is owned by another agent{} \
             (ib_umad registration refused: {e}). Choices: unload the kernel CM and its users \
             (e.g. `modprobe -r rdma_ucm ib_ipoib rdma_cm ib_cm`, or `rmmod` them) and open \
             \"{dev}\" again; or keep the kernel CM and run ibcm's CM over IP with \
             \"soft:<ip>:<udp port>@{dev}\" (CM MADs over UDP, GIDs, paths and QP attributes \
             from {dev}).",
            if kernel_cm_loaded() {
                " — the kernel's ib_cm module is loaded"
            } else {
                ""
            }
        ));
        Errno::EBUSY
    } else {
        crate::ibcm_log!(
            ERROR,
            "{dev} port {port}: ib_umad agent registration failed: {e}"
        );
        Errno(e.raw_os_error().unwrap_or(errno::EIO))
    }
}

impl UmadTransport {
    /// Opens every port of a verbs device for CM MADs; `watcher` (the
    /// context `info` was read through) follows its port events.
    pub fn open(info: &VerbsInfo, watcher: super::verbs::Watcher) -> Result<UmadTransport, Errno> {
        let dev = &info.name;
        let mut ports = Vec::new();
        for p in &info.ports {
            let Some(path) = umad_path(dev, p.port_num) else {
                crate::ibcm_log!(
                    ERROR,
                    "{dev} port {}: no /dev/infiniband/umad* for it (is the ib_umad module \
                     loaded? `modprobe ib_umad`)",
                    p.port_num
                );
                return Err(Errno::ENODEV);
            };
            let cpath = std::ffi::CString::new(path.clone()).map_err(|_| Errno::EINVAL)?;
            let fd = unsafe {
                libc::open(
                    cpath.as_ptr(),
                    libc::O_RDWR | libc::O_CLOEXEC | libc::O_NONBLOCK,
                )
            };
            if fd < 0 {
                let e = io::Error::last_os_error();
                crate::ibcm_log!(ERROR, "{dev} port {}: open {path}: {e}", p.port_num);
                return Err(Errno(e.raw_os_error().unwrap_or(errno::EIO)));
            }
            let fd = unsafe { OwnedFd::from_raw_fd(fd) };
            if unsafe { libc::ioctl(fd.as_raw_fd(), IOCTL_ENABLE_PKEY as _) } != 0 {
                let e = io::Error::last_os_error();
                crate::ibcm_log!(
                    ERROR,
                    "{dev} port {}: {path}: IB_USER_MAD_ENABLE_PKEY failed: {e}",
                    p.port_num
                );
                return Err(Errno(e.raw_os_error().unwrap_or(errno::EIO)));
            }
            // struct ib_user_mad_reg_req (28 bytes).
            let mut req = [0u8; REG_REQ_LEN];
            req[4] = 1 << METHOD_SEND; // method_mask bit 3 (first word, LE)
            req[20] = 1; // qpn: GSI
            req[21] = CM_CLASS;
            req[22] = CM_CLASS_VERSION;
            if unsafe { libc::ioctl(fd.as_raw_fd(), IOCTL_REGISTER_AGENT as _, req.as_mut_ptr()) }
                != 0
            {
                return Err(refused(dev, p.port_num, &io::Error::last_os_error()));
            }
            let agent = u32::from_ne_bytes(req[0..4].try_into().unwrap());
            crate::ibcm_log!(
                INFO,
                "{dev} port {}: CM agent {agent} on {path} ({})",
                p.port_num,
                if p.is_roce { "RoCE" } else { "InfiniBand" }
            );
            ports.push(PortFd {
                port_num: p.port_num,
                port: RwLock::new(p.clone()),
                fd,
                agent,
                path,
            });
        }
        let efd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if efd < 0 {
            return Err(Errno(errno::EIO));
        }
        Ok(UmadTransport {
            name: dev.clone(),
            ports,
            wake_fd: unsafe { OwnedFd::from_raw_fd(efd) },
            node_guid: info.node_guid,
            ack_delay: info.ack_delay,
            stats: TransportStats::default(),
            watcher: Some(watcher),
            tap: Tap::new(dev.clone()),
        })
    }

    /// Records an outbound MAD in the capture: the GIDs it travels
    /// between, or LIDs as `fe80::<LID>` where there is no GRH.
    fn capture_tx(&self, pf: &PortFd, t: &Transmit) {
        let d = &t.dest;
        let (lid, grh) = {
            let port = read(&pf.port);
            (port.lid, port.is_roce || d.has_grh)
        };
        let src = if d.sgid.is_zero() {
            Gid::from_lid(lid)
        } else {
            d.sgid
        };
        let dst = if grh && !d.dgid.is_zero() {
            d.dgid
        } else {
            Gid::from_lid(d.dlid)
        };
        self.tap
            .mad(Direction::Outbound, &src, &dst, d.pkey, &t.mad);
    }

    /// The GID index to send from: the entry equal to `sgid` (a RoCE v2
    /// one first), else index 0.
    fn sgid_index(port: &PortInfo, sgid: &Gid) -> u8 {
        let find = |t: Option<GidType>| {
            port.gids
                .iter()
                .position(|e| e.gid == *sgid && t.is_none_or(|t| t == e.gid_type))
        };
        find(Some(GidType::RoceV2))
            .or_else(|| find(None))
            .unwrap_or(0)
            .min(255) as u8
    }

    /// Builds the umad send buffer for one MAD.
    fn frame(pf: &PortFd, t: &Transmit, buf: &mut [u8; HDR_LEN + MAD_LEN]) {
        buf.fill(0);
        let port = read(&pf.port);
        let d = &t.dest;
        buf[hdr::ID..hdr::ID + 4].copy_from_slice(&pf.agent.to_ne_bytes());
        buf[hdr::TIMEOUT_MS..hdr::TIMEOUT_MS + 4].copy_from_slice(&0u32.to_ne_bytes());
        buf[hdr::RETRIES..hdr::RETRIES + 4].copy_from_slice(&0u32.to_ne_bytes());
        buf[hdr::LENGTH..hdr::LENGTH + 4]
            .copy_from_slice(&((HDR_LEN + MAD_LEN) as u32).to_ne_bytes());
        let qp = if d.dest_qp == 0 { 1 } else { d.dest_qp };
        buf[hdr::QPN..hdr::QPN + 4].copy_from_slice(&qp.to_be_bytes());
        buf[hdr::QKEY..hdr::QKEY + 4].copy_from_slice(&QP1_QKEY.to_be_bytes());
        let dlid = if port.is_roce { 0xffff } else { d.dlid };
        buf[hdr::LID..hdr::LID + 2].copy_from_slice(&dlid.to_be_bytes());
        buf[hdr::SL] = d.sl;
        let grh = port.is_roce || d.has_grh;
        if grh {
            buf[hdr::GRH_PRESENT] = 1;
            buf[hdr::GID_INDEX] = Self::sgid_index(&port, &d.sgid);
            buf[hdr::HOP_LIMIT] = if d.hop_limit == 0 { 64 } else { d.hop_limit };
            buf[hdr::TRAFFIC_CLASS] = d.traffic_class;
            buf[hdr::GID..hdr::GID + 16].copy_from_slice(&d.dgid.0);
            buf[hdr::FLOW_LABEL..hdr::FLOW_LABEL + 4]
                .copy_from_slice(&(d.flow_label & 0xf_ffff).to_be_bytes());
        }
        buf[hdr::PKEY_INDEX..hdr::PKEY_INDEX + 2].copy_from_slice(&d.pkey_index.to_ne_bytes());
        buf[HDR_LEN..].copy_from_slice(&t.mad);
    }

    /// One received umad buffer → a MAD with its source.
    fn accept(pf: &PortFd, b: &[u8]) -> Option<Received> {
        if b.len() < HDR_LEN + MAD_LEN {
            return None;
        }
        let status = u32::from_ne_bytes(b[hdr::STATUS..hdr::STATUS + 4].try_into().unwrap());
        if status != 0 {
            // A send timeout report (we never ask for one) or an error.
            return None;
        }
        let has_grh = b[hdr::GRH_PRESENT] != 0;
        let port = read(&pf.port);
        let gid_index = b[hdr::GID_INDEX] as usize;
        let dgid = if has_grh {
            port.gids.get(gid_index).map(|e| e.gid).unwrap_or_default()
        } else {
            port.gids.first().map(|e| e.gid).unwrap_or_default()
        };
        let pkey_index =
            u16::from_ne_bytes(b[hdr::PKEY_INDEX..hdr::PKEY_INDEX + 2].try_into().unwrap());
        let mut mad = [0u8; 256];
        mad.copy_from_slice(&b[HDR_LEN..HDR_LEN + MAD_LEN]);
        Some(Received {
            src: MadSource {
                port: pf.port_num,
                sgid: if has_grh {
                    Gid(b[hdr::GID..hdr::GID + 16].try_into().unwrap())
                } else {
                    Gid::default()
                },
                dgid,
                has_grh,
                slid: u16::from_be_bytes([b[hdr::LID], b[hdr::LID + 1]]),
                dlid_path_bits: b[hdr::PATH_BITS],
                sl: b[hdr::SL],
                src_qp: u32::from_be_bytes(b[hdr::QPN..hdr::QPN + 4].try_into().unwrap())
                    & 0xff_ffff,
                pkey: port
                    .pkeys
                    .get(pkey_index as usize)
                    .copied()
                    .unwrap_or(0xffff),
                hop_limit: b[hdr::HOP_LIMIT],
                traffic_class: b[hdr::TRAFFIC_CLASS],
                flow_label: u32::from_be_bytes(
                    b[hdr::FLOW_LABEL..hdr::FLOW_LABEL + 4].try_into().unwrap(),
                ) & 0xf_ffff,
            },
            mad,
        })
    }

    /// Reads everything queued on one port's file, into this thread's
    /// receive buffer (allocated and zeroed once per thread, not per call:
    /// on the lab's emulated CPUs the 2 KiB `memset` per wake-up was the
    /// event loop's first user-space symbol).
    fn drain(&self, pf: &PortFd, out: &mut Vec<Received>) -> io::Result<usize> {
        thread_local! {
            static BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        BUF.with(|b| {
            let mut buf = b.borrow_mut();
            if buf.len() < RECV_LEN {
                buf.resize(RECV_LEN, 0);
            }
            self.drain_into(pf, &mut buf, out)
        })
    }

    fn drain_into(
        &self,
        pf: &PortFd,
        buf: &mut [u8],
        out: &mut Vec<Received>,
    ) -> io::Result<usize> {
        let mut n = 0;
        loop {
            let r = unsafe { libc::read(pf.fd.as_raw_fd(), buf.as_mut_ptr() as *mut _, buf.len()) };
            if r < 0 {
                let e = io::Error::last_os_error();
                return match e.kind() {
                    io::ErrorKind::WouldBlock => Ok(n),
                    io::ErrorKind::Interrupted => continue,
                    _ => {
                        TransportStats::inc(&self.stats.rx_errors);
                        crate::ibcm_log!(WARN, "{}: read {}: {e}", self.name, pf.path);
                        Err(e)
                    }
                };
            }
            n += 1;
            TransportStats::inc(&self.stats.rx_datagrams);
            match Self::accept(pf, &buf[..r as usize]) {
                Some(m) => {
                    if live::active() {
                        let s = &m.src;
                        let src = if s.has_grh {
                            s.sgid
                        } else {
                            Gid::from_lid(s.slid)
                        };
                        self.tap
                            .mad(Direction::Inbound, &src, &s.dgid, s.pkey, &m.mad);
                    }
                    out.push(m)
                }
                None => TransportStats::inc(&self.stats.rx_garbage),
            }
        }
    }
}

impl Transport for UmadTransport {
    fn send(&self, batch: &[Transmit]) {
        let mut buf = [0u8; HDR_LEN + MAD_LEN];
        for t in batch {
            let Some(pf) = self
                .ports
                .iter()
                .find(|p| p.port_num == t.dest.port)
                .or_else(|| self.ports.first())
            else {
                TransportStats::inc(&self.stats.tx_unroutable);
                continue;
            };
            Self::frame(pf, t, &mut buf);
            if live::active() {
                self.capture_tx(pf, t);
            }
            loop {
                let r =
                    unsafe { libc::write(pf.fd.as_raw_fd(), buf.as_ptr() as *const _, buf.len()) };
                if r >= 0 {
                    TransportStats::inc(&self.stats.tx_datagrams);
                    break;
                }
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                TransportStats::inc(&self.stats.tx_errors);
                crate::ibcm_log!(
                    DEBUG,
                    "{}: umad send to {} failed: {e}",
                    self.name,
                    t.dest.dgid
                );
                break;
            }
        }
    }

    fn recv(&self, timeout: Option<Duration>, out: &mut Vec<Received>) -> io::Result<()> {
        if timeout == Some(Duration::ZERO) {
            for pf in &self.ports {
                self.drain(pf, out)?;
            }
            return Ok(());
        }
        // `poll` first: it is level-triggered (umad's file is readable
        // while its receive list is not empty), so a read before it would
        // only find the queue empty (`EAGAIN`) whenever the loop comes
        // back between MADs — one system call per wake-up for nothing.
        let mut fds: Vec<libc::pollfd> = self
            .ports
            .iter()
            .map(|p| libc::pollfd {
                fd: p.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        fds.push(libc::pollfd {
            fd: self.wake_fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        });
        let ms = super::poll_ms(timeout);
        let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        if r < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted {
                Ok(())
            } else {
                Err(e)
            };
        }
        if fds.last().unwrap().revents != 0 {
            let mut v = 0u64;
            unsafe { libc::read(self.wake_fd.as_raw_fd(), &mut v as *mut u64 as *mut _, 8) };
        }
        for (i, pf) in self.ports.iter().enumerate() {
            if fds[i].revents != 0 {
                self.drain(pf, out)?;
            }
        }
        Ok(())
    }

    fn wake(&self) {
        let v: u64 = 1;
        unsafe { libc::write(self.wake_fd.as_raw_fd(), &v as *const u64 as *const _, 8) };
    }

    fn ports(&self) -> Vec<PortInfo> {
        self.ports.iter().map(|p| read(&p.port).clone()).collect()
    }

    fn watches_ports(&self) -> bool {
        self.watcher.is_some()
    }

    fn port_change(&self, timeout: Duration) -> Option<Vec<PortInfo>> {
        let w = self.watcher.as_ref()?;
        let new = refresh(w, timeout, &self.ports())?;
        for pf in &self.ports {
            if let Some(p) = new.iter().find(|p| p.port_num == pf.port_num) {
                *pf.port.write().unwrap_or_else(|e| e.into_inner()) = p.clone();
            }
        }
        Some(new)
    }

    fn node_guid(&self) -> u64 {
        self.node_guid
    }

    fn ack_delay(&self) -> Option<u8> {
        Some(self.ack_delay)
    }

    fn stats(&self) -> &TransportStats {
        &self.stats
    }

    fn describe(&self) -> String {
        self.name.clone()
    }
}

/// `soft:<ip>[:<port>]@<verbs device>`: CM MADs over the UDP software
/// fabric, everything else (GIDs, P_Keys, MTU, CA GUID, ACK delay — so
/// paths and `ib_cm_init_qp_attr`) from the verbs device. For hosts whose
/// kernel CM owns QP1: the data path stays on the HCA.
pub struct SoftVerbsTransport {
    udp: super::udp::UdpTransport,
    info: VerbsInfo,
    ports: RwLock<Vec<PortInfo>>,
    watcher: Option<super::verbs::Watcher>,
}

impl SoftVerbsTransport {
    /// `watcher`: the context `info` was read through, kept for the
    /// device's port events.
    pub fn new(
        mut udp: super::udp::UdpTransport,
        info: VerbsInfo,
        watcher: super::verbs::Watcher,
    ) -> SoftVerbsTransport {
        udp.set_capture_name(format!("{}@{}", udp.describe(), info.name));
        let g = udp.gid();
        let known = info.ports.iter().any(|p| p.gids.iter().any(|e| e.gid == g));
        if !known {
            crate::ibcm_log!(
                WARN,
                "{}: {g} is not in {}'s GID table; connections will not find their source GID \
                 (use the device's IP address)",
                udp.describe(),
                info.name
            );
        }
        SoftVerbsTransport {
            udp,
            ports: RwLock::new(info.ports.clone()),
            watcher: Some(watcher),
            info,
        }
    }
}

impl Transport for SoftVerbsTransport {
    fn send(&self, batch: &[Transmit]) {
        self.udp.send(batch)
    }
    fn recv(&self, timeout: Option<Duration>, out: &mut Vec<Received>) -> io::Result<()> {
        let start = out.len();
        self.udp.recv(timeout, out)?;
        // The soft fabric reports port 1; say which verbs port owns the GID.
        for r in &mut out[start..] {
            if let Some(p) = read(&self.ports)
                .iter()
                .find(|p| p.gids.iter().any(|e| e.gid == r.src.dgid))
            {
                r.src.port = p.port_num;
            }
        }
        Ok(())
    }
    fn wake(&self) {
        self.udp.wake()
    }
    fn ports(&self) -> Vec<PortInfo> {
        read(&self.ports).clone()
    }
    fn watches_ports(&self) -> bool {
        self.watcher.is_some()
    }
    fn port_change(&self, timeout: Duration) -> Option<Vec<PortInfo>> {
        let new = refresh(self.watcher.as_ref()?, timeout, &self.ports())?;
        *self.ports.write().unwrap_or_else(|e| e.into_inner()) = new.clone();
        Some(new)
    }
    fn node_guid(&self) -> u64 {
        self.info.node_guid
    }
    fn ack_delay(&self) -> Option<u8> {
        Some(self.info.ack_delay)
    }
    fn stats(&self) -> &TransportStats {
        self.udp.stats()
    }
    fn describe(&self) -> String {
        format!("{}@{}", self.udp.describe(), self.info.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::Gid;

    /// A transport whose one "port file" is a non-blocking `SOCK_SEQPACKET`
    /// socket: like umad's file, each read returns one whole record and
    /// `poll` says readable while any is queued. The other end plays the
    /// kernel.
    fn fake() -> (UmadTransport, OwnedFd) {
        let mut sv = [0; 2];
        let r = unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_SEQPACKET | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
                sv.as_mut_ptr(),
            )
        };
        assert_eq!(r, 0);
        let (ours, kernel) = unsafe { (OwnedFd::from_raw_fd(sv[0]), OwnedFd::from_raw_fd(sv[1])) };
        let efd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        assert!(efd >= 0);
        let t = UmadTransport {
            name: "fake_umad0".into(),
            ports: vec![PortFd {
                port_num: 1,
                port: RwLock::new(PortInfo::roce(1, Gid::from_lid(1))),
                fd: ours,
                agent: 7,
                path: "fake".into(),
            }],
            wake_fd: unsafe { OwnedFd::from_raw_fd(efd) },
            node_guid: 1,
            ack_delay: 0,
            stats: TransportStats::default(),
            watcher: None,
            tap: Tap::new("fake_umad0"),
        };
        (t, kernel)
    }

    /// Queues one record of `len` bytes: a status-0 header, then `fill`.
    fn put(kernel: &OwnedFd, len: usize, fill: u8) {
        let mut rec = vec![fill; len];
        rec[..HDR_LEN].fill(0);
        let r = unsafe { libc::send(kernel.as_raw_fd(), rec.as_ptr() as *const _, len, 0) };
        assert_eq!(r, len as isize);
    }

    #[test]
    fn queued_mads_are_read_whole_with_no_stale_bytes_from_the_reused_buffer() {
        let (t, kernel) = fake();
        // An OPA-sized record fills the thread's buffer with 0xaa; the
        // shorter IB-sized one after it must not carry any of it.
        put(&kernel, RECV_LEN, 0xaa);
        put(&kernel, HDR_LEN + MAD_LEN, 0x55);
        put(&kernel, HDR_LEN + 10, 0x11); // cut: garbage
        let mut out = Vec::new();
        t.recv(Some(Duration::from_secs(5)), &mut out).unwrap();
        assert_eq!(out.len(), 2, "both whole MADs, in one wake-up");
        assert!(out[0].mad.iter().all(|&b| b == 0xaa));
        assert!(
            out[1].mad.iter().all(|&b| b == 0x55),
            "stale bytes in the second MAD"
        );
        let s = t.stats().snapshot();
        assert_eq!((s.rx_datagrams, s.rx_garbage), (3, 1));
        // The buffer is reused on the next wake-up, and still exact.
        put(&kernel, HDR_LEN + MAD_LEN, 0x66);
        out.clear();
        t.recv(Some(Duration::from_secs(5)), &mut out).unwrap();
        assert_eq!(out.len(), 1);
        assert!(out[0].mad.iter().all(|&b| b == 0x66));
    }

    #[test]
    fn recv_waits_in_poll_and_a_zero_timeout_only_drains() {
        let (t, kernel) = fake();
        let mut out = Vec::new();
        // Nothing queued: a zero timeout returns at once, empty.
        t.recv(Some(Duration::ZERO), &mut out).unwrap();
        assert!(out.is_empty());
        // Queued before the call: poll (level-triggered) reports it.
        put(&kernel, HDR_LEN + MAD_LEN, 0x01);
        t.recv(None, &mut out).unwrap();
        assert_eq!(out.len(), 1);
        // Queued while the loop waits in poll: it wakes and reads it.
        let k = kernel.try_clone().unwrap();
        let sender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            put(&k, HDR_LEN + MAD_LEN, 0x02);
        });
        out.clear();
        while out.is_empty() {
            t.recv(Some(Duration::from_secs(5)), &mut out).unwrap();
        }
        sender.join().unwrap();
        assert!(out[0].mad.iter().all(|&b| b == 0x02));
        // A zero timeout drains what is queued without waiting.
        put(&kernel, HDR_LEN + MAD_LEN, 0x03);
        out.clear();
        t.recv(Some(Duration::ZERO), &mut out).unwrap();
        assert_eq!(out.len(), 1);
    }
}
