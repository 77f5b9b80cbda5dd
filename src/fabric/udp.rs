//! The built-in software fabric: one UDP socket per soft device.
//!
//! A soft device is an IP address (and UDP port, 4791 by default). Its GID
//! is the IPv4-mapped (or IPv6) address, as RoCEv2 GIDs are. Every MAD goes
//! out as a RoCEv2 UD SEND to QP1: BTH (P_Key, PSN) + DETH (Q_Key
//! 0x80010000, source QP 1) + MAD + ICRC, to the destination GID's address
//! on the device's own UDP port. Receiving checks the framing; anything
//! that is not a GSI MAD is counted as garbage and dropped.
//!
//! ICRC: sent packets carry the ICRC a Linux UDP socket's headers give
//! (unconnected socket, DF set, IP ID 0 — `IP_PMTUDISC_DO`), so real RoCE
//! stacks such as Linux rxe accept them. On receive the IP header is not
//! visible to a UDP socket, so the ICRC is checked against the headers a
//! Linux UDP sender would have used (IP ID 0, or 0..63 for the segments of
//! a GSO send, below); a mismatch (expected from kernel peers, whose IP IDs
//! are not zero) is counted, not fatal — integrity on this path rests on
//! the UDP checksum and the MAD parser's checks.
//!
//! GSO/GRO (issue 15). Every CM frame has the same size, so consecutive
//! frames of a send batch to one peer (up to `BATCH`) go out as one
//! `sendmsg` entry with `UDP_SEGMENT` (one `sendmmsg` for the whole batch,
//! order kept), and the socket sets `UDP_GRO`, so one `recvmmsg` entry may
//! hold a burst, split here by the segment size the control message gives.
//! The IP IDs the segments carry were measured on Linux 6.18 (AF_PACKET
//! capture on `lo`, 3 bursts of 5 × 280 bytes each; `tests/udp_gso_wire.rs`
//! keeps checking it):
//!
//! | socket (IPv4) | whole on `lo` | split (software GSO, `gso_max_segs 1`) |
//! |---|---|---|
//! | unconnected, DF (`IP_PMTUDISC_DO`; the fabric) | ID 0 | IDs 0, 1, …, n−1, every burst |
//! | connected, DF | per-socket counter c | c, c+1, …; c grows by 1 per send, not per segment |
//! | unconnected, no DF | hashed ID h | h, h+1, …; h unpredictable |
//!
//! So for the fabric's sockets segment `i` carries ID `i` (the kernel's
//! segmentation numbers the copies of the first header consecutively; a
//! NIC with UDP segmentation offload is expected to do the same — not
//! checked here), and its ICRC is computed for that ID. IPv6 has no ID:
//! every segment has the lone datagram's headers. A receiver without
//! `UDP_GRO` gets the burst split by its own kernel (280-byte datagrams; on
//! `lo` the burst reaches the receiving socket whole), and sees no IP
//! header either way. If the kernel refuses `UDP_SEGMENT` (EIO: no checksum
//! offload on the route; EINVAL/ENOPROTOOPT/EOPNOTSUPP) the device logs it
//! once, counts it (`gso_counts`) and sends one datagram per message from
//! then on, the unsent frames re-framed for ID 0. `IBCM_UDP_GSO=off`
//! forces that path (no GSO, no GRO) for comparison.

use super::{Received, Transport, TransportStats, soft_node_guid};
use crate::capture::Direction;
use crate::capture::live::{self, Tap};
use crate::engine::{MadSource, PortInfo, Transmit};
use crate::wire::Gid;
use crate::wire::roce::{self, Bth, Deth, GSI_PAYLOAD_LEN, IcrcInput, IcrcPrefix};
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::ops::Range;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

/// Datagrams one `sendmmsg` handles at most, entries of one `recvmmsg`,
/// and segments of one `UDP_SEGMENT` send.
pub const BATCH: usize = 64;
/// Bytes of each receive buffer without `UDP_GRO` (a GSI MAD datagram has
/// 280).
pub const RECV_BUF: usize = 512;
/// Bytes of each receive buffer with `UDP_GRO`: the largest UDP payload,
/// what one coalesced entry can hold.
pub const GRO_BUF: usize = 65_536;

/// Whether soft devices batch with GSO/GRO: `IBCM_UDP_GSO=off` forces one
/// datagram per `sendmmsg`/`recvmmsg` entry (for comparison).
pub fn offload_wanted() -> bool {
    std::env::var("IBCM_UDP_GSO").map_or(true, |v| v != "off")
}

pub struct UdpTransport {
    sock: UdpSocket,
    wake_fd: OwnedFd,
    ip: IpAddr,
    port: u16,
    gid: Gid,
    guid: u64,
    psn: AtomicU32,
    stats: TransportStats,
    tap: Tap,
    /// Runs to one peer go out as one `UDP_SEGMENT` send (cleared, for
    /// good, at the kernel's first refusal).
    gso: AtomicBool,
    /// `UDP_GRO` is set: one received entry may hold a burst of datagrams.
    gro: bool,
    /// Times the kernel refused a `UDP_SEGMENT` send (0 or 1: the first
    /// refusal turns GSO off).
    gso_refused: AtomicU64,
    /// `UDP_SEGMENT` sends (each carrying 2 to `BATCH` datagrams).
    gso_sends: AtomicU64,
}

/// Socket buffer sizes a soft device asks for (best effort).
pub const RCVBUF: i32 = 8 << 20;
pub const SNDBUF: i32 = 4 << 20;

/// `setsockopt` of one `int` option.
pub fn setsockopt_int(fd: i32, level: i32, name: i32, val: i32) -> io::Result<()> {
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            &val as *const i32 as *const libc::c_void,
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// A socket address as the kernel's `sockaddr_storage` and its length.
pub fn sockaddr_of(addr: &SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            unsafe { std::ptr::write(&mut ss as *mut _ as *mut libc::sockaddr_in, sin) };
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: 0,
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            unsafe { std::ptr::write(&mut ss as *mut _ as *mut libc::sockaddr_in6, sin6) };
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (ss, len as libc::socklen_t)
}

/// The socket address in a `sockaddr_storage` (IPv4 or IPv6).
pub fn addr_of(ss: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match ss.ss_family as i32 {
        libc::AF_INET => {
            let sin = unsafe { &*(ss as *const _ as *const libc::sockaddr_in) };
            let ip = std::net::Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
            Some(SocketAddr::from((ip, u16::from_be(sin.sin_port))))
        }
        libc::AF_INET6 => {
            let sin6 = unsafe { &*(ss as *const _ as *const libc::sockaddr_in6) };
            let ip = std::net::Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            Some(SocketAddr::from((ip, u16::from_be(sin6.sin6_port))))
        }
        _ => None,
    }
}

impl UdpTransport {
    /// Binds a soft device to `ip:port`.
    pub fn bind(ip: IpAddr, port: u16) -> io::Result<UdpTransport> {
        Self::bind_with(ip, port, offload_wanted())
    }

    /// `bind`, with (`offload`) or without GSO send and GRO receive.
    pub fn bind_with(ip: IpAddr, port: u16, offload: bool) -> io::Result<UdpTransport> {
        let sock = UdpSocket::bind(SocketAddr::new(ip, port))?;
        sock.set_nonblocking(true)?;
        let fd = sock.as_raw_fd();
        match ip {
            IpAddr::V4(_) => setsockopt_int(
                fd,
                libc::IPPROTO_IP,
                libc::IP_MTU_DISCOVER,
                libc::IP_PMTUDISC_DO,
            )?,
            IpAddr::V6(_) => setsockopt_int(
                fd,
                libc::IPPROTO_IPV6,
                libc::IPV6_MTU_DISCOVER,
                libc::IPV6_PMTUDISC_DO,
            )?,
        }
        // Room for bursts (benchmarks, floods); best effort. SO_RCVBUF is
        // capped at net.core.rmem_max (208 KiB by default: a burst of a few
        // hundred REQs overflows it and every dropped one waits for its
        // retransmission, seconds later); with CAP_NET_ADMIN the FORCE
        // variants are not.
        for (force, plain, size) in [
            (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF, RCVBUF),
            (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF, SNDBUF),
        ] {
            if setsockopt_int(fd, libc::SOL_SOCKET, force, size).is_err() {
                let _ = setsockopt_int(fd, libc::SOL_SOCKET, plain, size);
            }
        }
        // GRO: a kernel without it (< 5.0) refuses the option; then every
        // entry is one datagram, as before.
        let gro = offload && setsockopt_int(fd, libc::SOL_UDP, libc::UDP_GRO, 1).is_ok();
        let efd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if efd < 0 {
            return Err(io::Error::last_os_error());
        }
        let wake_fd = unsafe { OwnedFd::from_raw_fd(efd) };
        let port = sock.local_addr()?.port();
        let tap = Tap::new(soft_name(ip, port));
        Ok(UdpTransport {
            sock,
            wake_fd,
            ip,
            port,
            gid: Gid::from(ip),
            guid: soft_node_guid(&ip, port),
            psn: AtomicU32::new(0),
            stats: TransportStats::default(),
            tap,
            gso: AtomicBool::new(offload),
            gro,
            gso_refused: AtomicU64::new(0),
            gso_sends: AtomicU64::new(0),
        })
    }

    /// "gso+gro", "gso", "gro" or "mmsg": how this device batches now.
    pub fn batching(&self) -> &'static str {
        match (self.gso.load(Ordering::Relaxed), self.gro) {
            (true, true) => "gso+gro",
            (true, false) => "gso",
            (false, true) => "gro",
            (false, false) => "mmsg",
        }
    }

    /// `UDP_SEGMENT` sends so far, and refusals of one by the kernel.
    pub fn gso_counts(&self) -> (u64, u64) {
        (
            self.gso_sends.load(Ordering::Relaxed),
            self.gso_refused.load(Ordering::Relaxed),
        )
    }

    /// Names the device in captures (`soft:<ip>@<verbs device>`).
    pub fn set_capture_name(&mut self, name: String) {
        self.tap = Tap::new(name);
    }

    pub fn local_addr(&self) -> SocketAddr {
        SocketAddr::new(self.ip, self.port)
    }

    pub fn gid(&self) -> Gid {
        self.gid
    }

    fn icrc_input(&self, peer: IpAddr, peer_port: u16, outgoing: bool) -> Option<IcrcInput> {
        let (me, peer) = (self.local_addr(), SocketAddr::new(peer, peer_port));
        if outgoing {
            linux_icrc_input(me, peer)
        } else {
            linux_icrc_input(peer, me)
        }
    }

    /// The destination address of a GID on this fabric, if reachable from
    /// this socket's address family.
    fn dest_addr(&self, dgid: &Gid) -> Option<SocketAddr> {
        let ip = dgid.to_ip();
        (ip.is_ipv4() == self.ip.is_ipv4()).then(|| SocketAddr::new(ip, self.port))
    }

    /// Frames one MAD as a RoCEv2 GSI datagram behind the headers whose
    /// pseudo-header CRC is `prefix` (IP ID 0), its ICRC XORed with `id_delta`
    /// for the IP ID it will carry (`ipv4_id_deltas`; 0 for ID 0 and IPv6).
    fn frame(
        &self,
        t: &Transmit,
        prefix: &IcrcPrefix,
        id_delta: u32,
        out: &mut [u8; GSI_PAYLOAD_LEN],
    ) {
        let psn = self.psn.fetch_add(1, Ordering::Relaxed) & 0xff_ffff;
        frame_gsi(psn, t.dest.pkey, &t.mad, prefix, id_delta, out);
    }

    fn wait(&self, timeout: Option<Duration>) -> io::Result<bool> {
        let mut fds = [
            libc::pollfd {
                fd: self.sock.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: self.wake_fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let ms = super::poll_ms(timeout);
        let r = unsafe { libc::poll(fds.as_mut_ptr(), 2, ms) };
        if r < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted {
                Ok(false)
            } else {
                Err(e)
            };
        }
        if fds[1].revents != 0 {
            let mut v = 0u64;
            unsafe { libc::read(self.wake_fd.as_raw_fd(), &mut v as *mut u64 as *mut _, 8) };
        }
        Ok(fds[0].revents != 0)
    }

    /// One non-blocking `recvmmsg` of up to `BATCH` entries; every datagram
    /// in them (a GRO entry split into its segments) checked and appended
    /// to `out`. Returns the number of entries (0 when none was waiting).
    fn recv_batch(&self, out: &mut Vec<Received>) -> io::Result<usize> {
        RX_SCRATCH.with(|cell| {
            let mut rx = cell.borrow_mut();
            let slot = if self.gro { GRO_BUF } else { RECV_BUF };
            let n = match rx.recv(self.sock.as_raw_fd(), slot) {
                Ok(n) => n,
                Err(e) => {
                    return match e.kind() {
                        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
                        _ => {
                            TransportStats::inc(&self.stats.rx_errors);
                            Err(e)
                        }
                    };
                }
            };
            let mut prefixes = std::mem::take(&mut rx.prefixes);
            for i in 0..n {
                let (len, seg, from) = rx.entry(i);
                let buf = rx.buf(i);
                let Some(split) = GroSplit::new(len, buf.len(), seg) else {
                    // A zero segment size: nothing to split by.
                    TransportStats::inc(&self.stats.rx_datagrams);
                    TransportStats::inc(&self.stats.rx_garbage);
                    crate::ibcm_log!(
                        crate::log::DEBUG,
                        "{}: dropped {len}-byte entry with GRO segment size 0",
                        self.describe()
                    );
                    continue;
                };
                for (range, claimed) in split {
                    TransportStats::inc(&self.stats.rx_datagrams);
                    let Some(from) = from else {
                        TransportStats::inc(&self.stats.rx_garbage);
                        continue;
                    };
                    match self.accept(from, &buf[range], claimed, &mut prefixes) {
                        Some(r) => out.push(r),
                        None => TransportStats::inc(&self.stats.rx_garbage),
                    }
                }
            }
            rx.prefixes = prefixes;
            Ok(n)
        })
    }

    /// Checks one datagram (`len` bytes long, `payload` what of it was
    /// kept) and turns it into a received MAD.
    fn accept(
        &self,
        from: SocketAddr,
        payload: &[u8],
        len: usize,
        prefixes: &mut PrefixCache,
    ) -> Option<Received> {
        if len != GSI_PAYLOAD_LEN {
            crate::ibcm_log!(
                crate::log::DEBUG,
                "{}: dropped {len}-byte datagram from {from}: not a GSI MAD",
                self.describe()
            );
            return None;
        }
        let d = match roce::parse_udp_payload(payload) {
            Ok(d) => d,
            Err(e) => {
                crate::ibcm_log!(
                    crate::log::DEBUG,
                    "{}: dropped datagram from {from}: {e}",
                    self.describe()
                );
                return None;
            }
        };
        if let Some(inp) = self.icrc_input(from.ip(), from.port(), false)
            && !icrc_matches(
                inp,
                prefixes.get(inp),
                &payload[..GSI_PAYLOAD_LEN - 4],
                d.icrc,
            )
        {
            TransportStats::inc(&self.stats.rx_icrc_unverified);
        }
        let src_ip = match from.ip() {
            IpAddr::V6(v6) => v6
                .to_ipv4_mapped()
                .map(IpAddr::V4)
                .unwrap_or(IpAddr::V6(v6)),
            v4 => v4,
        };
        if live::active() {
            let src = Gid::from(src_ip);
            self.tap
                .gsi(Direction::Inbound, &src, &self.gid, from.port(), payload);
        }
        Some(Received {
            src: MadSource::roce_gsi(Gid::from(src_ip), self.gid, d.deth.src_qp, d.bth.pkey),
            mad: *d.mad,
        })
    }
}

/// The headers Linux gives a datagram from `src` to `dst` over an
/// unconnected socket with DF set, as the ICRC covers them (IP ID 0);
/// `None` across address families.
pub fn linux_icrc_input(src: SocketAddr, dst: SocketAddr) -> Option<IcrcInput> {
    let (sport, dport) = (src.port(), dst.port());
    match (src.ip(), dst.ip()) {
        (IpAddr::V4(s), IpAddr::V4(d)) => Some(IcrcInput::linux_ipv4(s, d, sport, dport)),
        (IpAddr::V6(s), IpAddr::V6(d)) => Some(IcrcInput::linux_ipv6(s, d, sport, dport)),
        _ => None,
    }
}

/// Frames `mad` as a RoCEv2 GSI datagram (BTH with `psn` and `pkey`, DETH,
/// the MAD, the ICRC) behind the headers whose pseudo-header CRC is `prefix`
/// (IP ID 0), its ICRC XORed with `id_delta` for the IP ID it will carry
/// ([`ipv4_id_deltas`]; 0 for ID 0 and IPv6). What the fabric does to every
/// MAD it sends; `ibcm bench --baseline` times it on the baseline's path.
pub fn frame_gsi(
    psn: u32,
    pkey: u16,
    mad: &[u8; crate::wire::MAD_LEN],
    prefix: &IcrcPrefix,
    id_delta: u32,
    out: &mut [u8; GSI_PAYLOAD_LEN],
) {
    let mut bth = Bth::gsi(psn);
    bth.pkey = pkey;
    roce::emit_udp_payload_after(&bth, &Deth::GSI, mad, prefix, out);
    if id_delta != 0 {
        let at = GSI_PAYLOAD_LEN - 4;
        let icrc = u32::from_le_bytes(out[at..].try_into().expect("4 bytes")) ^ id_delta;
        out[at..].copy_from_slice(&icrc.to_le_bytes());
    }
}

/// Whether `icrc` is the ICRC of `body` behind the headers a Linux sender
/// gives a datagram (`inp`, IP ID 0) or, over IPv4, one of the segments of
/// a `UDP_SEGMENT` send of up to `BATCH` from such a sender: segment `i`
/// carries IP ID `i` (the header of this file). A receiving socket sees no
/// IP header and cannot tell which segment it got, whether the kernel split
/// the burst before it or handed it over whole (`UDP_GRO`); the ICRC for ID
/// `i` is the one for ID 0 XOR a constant, so this costs one CRC and a scan
/// of `BATCH` values. `prefix` is `inp`'s pseudo-header CRC.
pub fn icrc_matches(inp: IcrcInput, prefix: &IcrcPrefix, body: &[u8], icrc: u32) -> bool {
    let diff = prefix.icrc(body) ^ icrc;
    // A scan without an early exit: the compiler compares several at once.
    diff == 0
        || (matches!(inp, IcrcInput::LinuxIpv4 { .. })
            && ipv4_id_deltas()
                .iter()
                .fold(false, |found, &d| found | (d == diff)))
}

/// Per IPv4 ID `i` < `BATCH`: what ID `i` instead of 0 XORs into a GSI
/// datagram's ICRC ([`roce::gsi_ipv4_id_delta`]).
pub fn ipv4_id_deltas() -> &'static [u32; BATCH] {
    static DELTAS: std::sync::OnceLock<[u32; BATCH]> = std::sync::OnceLock::new();
    DELTAS.get_or_init(|| std::array::from_fn(|i| roce::gsi_ipv4_id_delta(i as u16)))
}

/// The pseudo-header CRC of the last headers seen ([`IcrcInput::prefix`]),
/// kept per thread beside its send or receive buffers: a burst goes to,
/// or comes from, one peer, so the headers are built and fed once per
/// peer change instead of once per datagram.
#[derive(Default)]
struct PrefixCache(Option<(IcrcInput, IcrcPrefix)>);

impl PrefixCache {
    fn get(&mut self, inp: IcrcInput) -> &IcrcPrefix {
        if !matches!(&self.0, Some((i, _)) if *i == inp) {
            self.0 = Some((inp, inp.prefix()));
        }
        &self.0.as_ref().expect("just filled").1
    }
}

/// The datagrams of one received entry: `len` bytes arrived, the first
/// `kept` of them are in the buffer (`kept < len` when the entry was
/// truncated), `seg` is the `UDP_GRO` segment size (`None`: the entry is
/// one datagram). Yields, per datagram, the range of its bytes in the
/// buffer and the length it had on the wire; a short last segment is a
/// datagram of its own length, a truncated one yields fewer bytes than its
/// length (both fail the GSI checks, none panics).
#[derive(Debug, Clone)]
struct GroSplit {
    len: usize,
    kept: usize,
    seg: usize,
    off: usize,
    first: bool,
}

impl GroSplit {
    /// `None` for a segment size of 0 (malformed: nothing to split by).
    fn new(len: usize, kept: usize, seg: Option<usize>) -> Option<GroSplit> {
        let seg = match seg {
            Some(0) => return None,
            Some(s) => s,
            None => len.max(1),
        };
        Some(GroSplit {
            len,
            kept: kept.min(len),
            seg,
            off: 0,
            first: true,
        })
    }
}

impl Iterator for GroSplit {
    type Item = (Range<usize>, usize);

    fn next(&mut self) -> Option<Self::Item> {
        // An empty datagram is still one datagram (counted, dropped).
        if self.off >= self.len && !(self.first && self.len == 0) {
            return None;
        }
        self.first = false;
        let end = self.len.min(self.off.saturating_add(self.seg));
        let item = (self.off.min(self.kept)..end.min(self.kept), end - self.off);
        self.off = end;
        Some(item)
    }
}

/// Bytes of one entry's control buffer: a `cmsghdr` with an `int` (the
/// `UDP_GRO` segment size) or a `u16` (`UDP_SEGMENT`), 8-byte aligned.
#[repr(C, align(8))]
#[derive(Clone, Copy)]
struct Ctrl([u8; 32]);

impl Ctrl {
    /// A control buffer holding one `UDP_SEGMENT` message (segments of
    /// `seg` bytes), and the length of it to give as `msg_controllen`.
    fn udp_segment(seg: u16) -> (Ctrl, usize) {
        let mut c = Ctrl([0; 32]);
        let space = unsafe { libc::CMSG_SPACE(2) } as usize;
        debug_assert!(space <= c.0.len());
        let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
        h.msg_control = c.0.as_mut_ptr() as *mut libc::c_void;
        h.msg_controllen = space;
        unsafe {
            let cm = libc::CMSG_FIRSTHDR(&h);
            (*cm).cmsg_level = libc::SOL_UDP;
            (*cm).cmsg_type = libc::UDP_SEGMENT;
            (*cm).cmsg_len = libc::CMSG_LEN(2) as usize;
            std::ptr::write_unaligned(libc::CMSG_DATA(cm) as *mut u16, seg);
        }
        (c, space)
    }
}

/// Reusable per-thread receive buffers (no allocation per receive; the
/// GRO buffers are touched only as far as data lands in them).
#[derive(Default)]
struct RxScratch {
    slot: usize,
    prefixes: PrefixCache,
    bufs: Vec<u8>,
    addrs: Vec<libc::sockaddr_storage>,
    ctrl: Vec<Ctrl>,
    iovs: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
}

impl RxScratch {
    /// One non-blocking `recvmmsg` on `fd` into `BATCH` buffers of `slot`
    /// bytes each; the number of entries that arrived.
    fn recv(&mut self, fd: RawFd, slot: usize) -> io::Result<usize> {
        if self.slot != slot {
            self.slot = slot;
            self.bufs = vec![0u8; slot * BATCH];
            self.addrs = vec![unsafe { std::mem::zeroed() }; BATCH];
            self.ctrl = vec![Ctrl([0; 32]); BATCH];
            self.iovs = Vec::with_capacity(BATCH);
            self.msgs = Vec::with_capacity(BATCH);
        }
        self.iovs.clear();
        self.msgs.clear();
        let base = self.bufs.as_mut_ptr();
        for i in 0..BATCH {
            self.iovs.push(libc::iovec {
                iov_base: unsafe { base.add(i * slot) } as *mut libc::c_void,
                iov_len: slot,
            });
        }
        for i in 0..BATCH {
            let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
            m.msg_hdr.msg_name = &mut self.addrs[i] as *mut _ as *mut libc::c_void;
            m.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as u32;
            m.msg_hdr.msg_iov = &mut self.iovs[i];
            m.msg_hdr.msg_iovlen = 1;
            m.msg_hdr.msg_control = self.ctrl[i].0.as_mut_ptr() as *mut libc::c_void;
            m.msg_hdr.msg_controllen = self.ctrl[i].0.len();
            self.msgs.push(m);
        }
        let n = unsafe {
            libc::recvmmsg(
                fd,
                self.msgs.as_mut_ptr(),
                BATCH as u32,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(n as usize)
    }

    /// Entry `i` of the last `recv`: its length, its `UDP_GRO` segment
    /// size (if the kernel gave one) and its sender (`None`: not IP).
    fn entry(&self, i: usize) -> (usize, Option<usize>, Option<SocketAddr>) {
        let h = &self.msgs[i].msg_hdr;
        (
            self.msgs[i].msg_len as usize,
            gro_segment(h),
            addr_of(&self.addrs[i]),
        )
    }

    /// The bytes of entry `i` the buffer kept.
    fn buf(&self, i: usize) -> &[u8] {
        let len = (self.msgs[i].msg_len as usize).min(self.slot);
        &self.bufs[i * self.slot..i * self.slot + len]
    }
}

thread_local! {
    static RX_SCRATCH: std::cell::RefCell<RxScratch> = std::cell::RefCell::new(RxScratch::default());
}

/// The segment size a `UDP_GRO` control message reports, if any.
fn gro_segment(h: &libc::msghdr) -> Option<usize> {
    if h.msg_control.is_null() || h.msg_controllen == 0 {
        return None;
    }
    let mut c = unsafe { libc::CMSG_FIRSTHDR(h) };
    while !c.is_null() {
        let cm = unsafe { &*c };
        if cm.cmsg_level == libc::SOL_UDP && cm.cmsg_type == libc::UDP_GRO {
            let v = unsafe { std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::c_int) };
            return Some(v.max(0) as usize);
        }
        c = unsafe { libc::CMSG_NXTHDR(h, c) };
    }
    None
}

/// Splits `dests` (the destination of each frame, in order) into runs of
/// consecutive frames to the same destination, each at most `max` long
/// (`max` 1: one frame per run). Order is kept: a run never reaches past a
/// frame to another peer.
fn runs(dests: &[SocketAddr], max: usize, out: &mut Vec<Range<usize>>) {
    out.clear();
    let max = max.max(1);
    let mut start = 0;
    for i in 1..=dests.len() {
        if i == dests.len() || dests[i] != dests[start] || i - start == max {
            if i > start {
                out.push(start..i);
            }
            start = i;
        }
    }
}

/// Reusable per-thread buffers for `sendmmsg` (no allocation per send).
#[derive(Default)]
struct Scratch {
    /// Framed datagrams, in send order.
    frames: Vec<[u8; GSI_PAYLOAD_LEN]>,
    /// Per frame: its MAD's index in the chunk, its destination and the
    /// headers of a lone datagram to it.
    index: Vec<usize>,
    dests: Vec<SocketAddr>,
    inputs: Vec<IcrcInput>,
    /// Per frame: the pseudo-header CRC of its `inputs` entry.
    prefixes: Vec<IcrcPrefix>,
    prefix_cache: PrefixCache,
    /// Frames per message: a run to one peer (GSO) or a single frame.
    runs: Vec<Range<usize>>,
    addrs: Vec<(libc::sockaddr_storage, libc::socklen_t)>,
    iovs: Vec<libc::iovec>,
    ctrl: Vec<Ctrl>,
    msgs: Vec<libc::mmsghdr>,
}

thread_local! {
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::new(Scratch::default());
}

/// Why a `sendmmsg` stopped short of its last message.
enum SendStop {
    /// The kernel refused `UDP_SEGMENT` at message (run) `at`; nothing from
    /// there on was sent.
    GsoRefused { at: usize, err: io::Error },
}

/// Whether `e`, returned for a `UDP_SEGMENT` send, means the kernel or the
/// route cannot do GSO (checksum offload missing: EIO; option or size not
/// supported: EINVAL, ENOPROTOOPT, EOPNOTSUPP).
fn gso_refusal(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EIO | libc::EINVAL | libc::ENOPROTOOPT | libc::EOPNOTSUPP)
    )
}

impl UdpTransport {
    fn send_chunk(&self, chunk: &[Transmit], sc: &mut Scratch) {
        sc.frames.clear();
        sc.index.clear();
        sc.dests.clear();
        sc.inputs.clear();
        sc.prefixes.clear();
        for (i, t) in chunk.iter().enumerate() {
            let dest = self.dest_addr(&t.dest.dgid);
            let input = dest.and_then(|d| self.icrc_input(d.ip(), d.port(), true));
            let (Some(dest), Some(input)) = (dest, input) else {
                TransportStats::inc(&self.stats.tx_unroutable);
                crate::ibcm_log!(
                    crate::log::WARN,
                    "{}: cannot reach GID {} from this address family",
                    self.describe(),
                    t.dest.dgid
                );
                continue;
            };
            sc.dests.push(dest);
            sc.inputs.push(input);
            sc.prefixes.push(sc.prefix_cache.get(input).clone());
            sc.index.push(i);
        }
        let gso = self.gso.load(Ordering::Relaxed);
        runs(&sc.dests, if gso { BATCH } else { 1 }, &mut sc.runs);
        // Frame in order (PSNs ascend in send order); segment j of a run
        // carries IP ID j on the wire, so its ICRC is computed for that.
        for r in 0..sc.runs.len() {
            let run = sc.runs[r].clone();
            for (j, k) in run.enumerate() {
                let id_delta = match sc.inputs[k] {
                    IcrcInput::LinuxIpv4 { .. } => ipv4_id_deltas()[j],
                    IcrcInput::LinuxIpv6 { .. } => 0,
                };
                sc.frames.push([0u8; GSI_PAYLOAD_LEN]);
                let f = sc.frames.last_mut().expect("just pushed");
                self.frame(&chunk[sc.index[k]], &sc.prefixes[k], id_delta, f);
                if live::active() {
                    let dst = Gid::from(sc.dests[k].ip());
                    self.tap
                        .gsi(Direction::Outbound, &self.gid, &dst, self.port, &f[..]);
                }
            }
        }
        if let Err(SendStop::GsoRefused { at, err }) = self.transmit(sc) {
            // Once and for all: every later send is one datagram per
            // message. The frames not sent yet go as lone datagrams, each
            // with the ICRC for IP ID 0.
            if self.gso.swap(false, Ordering::Relaxed) {
                self.gso_refused.fetch_add(1, Ordering::Relaxed);
                crate::ibcm_log!(
                    crate::log::WARN,
                    "{}: the kernel refused a UDP_SEGMENT send ({err}); sending one datagram per message from now on",
                    self.describe()
                );
            }
            let from = sc.runs[at].start;
            for k in from..sc.frames.len() {
                let f = &mut sc.frames[k];
                let icrc = sc.prefixes[k].icrc(&f[..GSI_PAYLOAD_LEN - 4]);
                f[GSI_PAYLOAD_LEN - 4..].copy_from_slice(&icrc.to_le_bytes());
            }
            runs(&sc.dests[from..], 1, &mut sc.runs);
            for r in sc.runs.iter_mut() {
                *r = r.start + from..r.end + from;
            }
            // GSO is off now: no further refusal can come back.
            let _ = self.transmit(sc);
        }
    }

    /// Sends `sc.runs` (one message per run; a run of more than
    /// one frame with `UDP_SEGMENT`) with `sendmmsg`, waiting for room
    /// when the socket buffer is full and skipping a message the kernel
    /// rejects for another reason (counted in `tx_errors`).
    fn transmit(&self, sc: &mut Scratch) -> Result<(), SendStop> {
        let n = sc.runs.len();
        sc.addrs.clear();
        sc.iovs.clear();
        sc.ctrl.clear();
        sc.msgs.clear();
        for run in &sc.runs {
            sc.addrs.push(sockaddr_of(&sc.dests[run.start]));
            sc.iovs.push(libc::iovec {
                iov_base: sc.frames[run.start].as_mut_ptr() as *mut _,
                iov_len: run.len() * GSI_PAYLOAD_LEN,
            });
            sc.ctrl.push(if run.len() > 1 {
                Ctrl::udp_segment(GSI_PAYLOAD_LEN as u16).0
            } else {
                Ctrl([0; 32])
            });
        }
        for i in 0..n {
            let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
            m.msg_hdr.msg_name = &mut sc.addrs[i].0 as *mut _ as *mut libc::c_void;
            m.msg_hdr.msg_namelen = sc.addrs[i].1;
            m.msg_hdr.msg_iov = &mut sc.iovs[i];
            m.msg_hdr.msg_iovlen = 1;
            if sc.runs[i].len() > 1 {
                m.msg_hdr.msg_control = sc.ctrl[i].0.as_mut_ptr() as *mut libc::c_void;
                m.msg_hdr.msg_controllen = unsafe { libc::CMSG_SPACE(2) } as usize;
            }
            sc.msgs.push(m);
        }
        let mut done = 0;
        let mut spins = 0;
        while done < n {
            let r = unsafe {
                libc::sendmmsg(
                    self.sock.as_raw_fd(),
                    sc.msgs[done..].as_mut_ptr(),
                    (n - done) as u32,
                    0,
                )
            };
            if r > 0 {
                let sent = &sc.runs[done..done + r as usize];
                let datagrams: usize = sent.iter().map(|run| run.len()).sum();
                let gso = sent.iter().filter(|run| run.len() > 1).count();
                self.stats
                    .tx_datagrams
                    .fetch_add(datagrams as u64, Ordering::Relaxed);
                self.gso_sends.fetch_add(gso as u64, Ordering::Relaxed);
                done += r as usize;
                continue;
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::Interrupted => continue,
                io::ErrorKind::WouldBlock if spins < 1000 => {
                    // Socket buffer full: wait briefly for room.
                    spins += 1;
                    let mut pfd = libc::pollfd {
                        fd: self.sock.as_raw_fd(),
                        events: libc::POLLOUT,
                        revents: 0,
                    };
                    unsafe { libc::poll(&mut pfd, 1, 10) };
                }
                _ if sc.runs[done].len() > 1 && gso_refusal(&e) => {
                    return Err(SendStop::GsoRefused { at: done, err: e });
                }
                _ => {
                    // Skip the message that failed (e.g. unreachable).
                    self.stats
                        .tx_errors
                        .fetch_add(sc.runs[done].len() as u64, Ordering::Relaxed);
                    crate::ibcm_log!(crate::log::DEBUG, "{}: send failed: {e}", self.describe());
                    done += 1;
                }
            }
        }
        Ok(())
    }
}

impl Transport for UdpTransport {
    fn send(&self, batch: &[Transmit]) {
        SCRATCH.with(|cell| {
            let mut sc = cell.borrow_mut();
            for chunk in batch.chunks(BATCH) {
                self.send_chunk(chunk, &mut sc);
            }
        });
    }

    fn recv(&self, timeout: Option<Duration>, out: &mut Vec<Received>) -> io::Result<()> {
        // Drain what is there first; wait only when nothing is.
        if self.recv_batch(out)? > 0 {
            while self.recv_batch(out)? == BATCH {}
            return Ok(());
        }
        if timeout == Some(Duration::ZERO) {
            return Ok(());
        }
        if self.wait(timeout)? {
            while self.recv_batch(out)? == BATCH {}
        }
        Ok(())
    }

    fn wake(&self) {
        let v: u64 = 1;
        unsafe { libc::write(self.wake_fd.as_raw_fd(), &v as *const u64 as *const _, 8) };
    }

    fn ports(&self) -> Vec<PortInfo> {
        vec![PortInfo::roce(1, self.gid)]
    }

    fn node_guid(&self) -> u64 {
        self.guid
    }

    fn stats(&self) -> &TransportStats {
        &self.stats
    }

    fn describe(&self) -> String {
        soft_name(self.ip, self.port)
    }

    fn soft_addr(&self) -> Option<(Gid, u16)> {
        Some((self.gid, self.port))
    }

    fn tap(&self) -> Option<&Tap> {
        Some(&self.tap)
    }
}

/// `soft:<ip>:<port>` (IPv6 in brackets).
fn soft_name(ip: IpAddr, port: u16) -> String {
    match ip {
        IpAddr::V4(v4) => format!("soft:{v4}:{port}"),
        IpAddr::V6(v6) => format!("soft:[{v6}]:{port}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn getsockopt_int(fd: i32, name: i32) -> i32 {
        let mut v: i32 = 0;
        let mut len = std::mem::size_of::<i32>() as libc::socklen_t;
        // SAFETY: a 4-byte option into `v`, its length given.
        let r =
            unsafe { libc::getsockopt(fd, libc::SOL_SOCKET, name, (&raw mut v).cast(), &mut len) };
        assert_eq!(r, 0);
        v
    }

    #[test]
    fn runs_group_consecutive_same_peer() {
        let a: SocketAddr = "127.0.0.1:4791".parse().unwrap();
        let b: SocketAddr = "127.0.0.2:4791".parse().unwrap();
        let c: SocketAddr = "127.0.0.1:4792".parse().unwrap();
        let mut out = Vec::new();
        runs(&[], BATCH, &mut out);
        assert!(out.is_empty());
        runs(&[a, a, b, a, a, a, c], BATCH, &mut out);
        assert_eq!(out, vec![0..2, 2..3, 3..6, 6..7]);
        // Without GSO: one frame per message.
        runs(&[a, a, b], 1, &mut out);
        assert_eq!(out, vec![0..1, 1..2, 2..3]);
        // A long run is cut at `max`, order kept.
        let many = vec![a; 2 * BATCH + 3];
        runs(&many, BATCH, &mut out);
        assert_eq!(
            out,
            vec![0..BATCH, BATCH..2 * BATCH, 2 * BATCH..2 * BATCH + 3]
        );
        runs(&[a, a, a], 0, &mut out);
        assert_eq!(out, vec![0..1, 1..2, 2..3]);
    }

    fn split(len: usize, kept: usize, seg: Option<usize>) -> Option<Vec<(Range<usize>, usize)>> {
        GroSplit::new(len, kept, seg).map(|s| s.collect())
    }

    #[test]
    fn gro_entries_split_into_datagrams() {
        let g = GSI_PAYLOAD_LEN;
        // No control message: one datagram, whatever its length.
        assert_eq!(split(g, g, None), Some(vec![(0..g, g)]));
        assert_eq!(split(0, 0, None), Some(vec![(0..0, 0)]));
        assert_eq!(split(600, 512, None), Some(vec![(0..512, 600)]));
        // A burst: one item per segment.
        assert_eq!(
            split(3 * g, 3 * g, Some(g)),
            Some(vec![(0..g, g), (g..2 * g, g), (2 * g..3 * g, g)])
        );
        // Short last segment: a datagram of its own (shorter) length.
        assert_eq!(
            split(2 * g + 100, 2 * g + 100, Some(g)),
            Some(vec![(0..g, g), (g..2 * g, g), (2 * g..2 * g + 100, 100)])
        );
        // Truncated entry: the segments past the buffer keep their wire
        // length but have fewer (or no) bytes.
        assert_eq!(
            split(3 * g, g + 10, Some(g)),
            Some(vec![(0..g, g), (g..g + 10, g), (g + 10..g + 10, g)])
        );
        // Zero segment size: malformed, nothing to split.
        assert_eq!(split(3 * g, 3 * g, Some(0)), None);
        // Huge segment size: the whole entry.
        assert_eq!(split(g, g, Some(usize::MAX)), Some(vec![(0..g, g)]));
    }

    #[test]
    fn icrc_check_accepts_gso_segment_ids_only() {
        let inp = IcrcInput::linux_ipv4([127, 0, 0, 1].into(), [127, 0, 0, 2].into(), 7, 4791);
        let body = [0x5au8; GSI_PAYLOAD_LEN - 4];
        assert!(icrc_matches(inp, &inp.prefix(), &body, inp.icrc(&body)));
        for id in [1u16, 17, BATCH as u16 - 1] {
            assert!(icrc_matches(
                inp,
                &inp.prefix(),
                &body,
                inp.with_ip_id(id).icrc(&body)
            ));
        }
        assert!(!icrc_matches(
            inp,
            &inp.prefix(),
            &body,
            inp.with_ip_id(BATCH as u16).icrc(&body)
        ));
        assert!(!icrc_matches(
            inp,
            &inp.prefix(),
            &body,
            inp.icrc(&body) ^ 1
        ));
        let v6 = IcrcInput::linux_ipv6("::1".parse().unwrap(), "::2".parse().unwrap(), 7, 4791);
        assert!(icrc_matches(v6, &v6.prefix(), &body, v6.icrc(&body)));
        assert!(!icrc_matches(
            v6,
            &v6.prefix(),
            &body,
            v6.icrc(&body) ^ roce::gsi_ipv4_id_delta(1)
        ));
    }

    /// `n` MADs (distinct contents) to `to`'s GID.
    fn batch(to: &UdpTransport, n: usize) -> Vec<Transmit> {
        (0..n)
            .map(|i| {
                let mut mad = [0u8; 256];
                mad[0] = 1;
                mad[1] = 0x07;
                mad[2] = 2;
                mad[3] = 0x03;
                mad[8..16].copy_from_slice(&(i as u64 + 1).to_be_bytes());
                mad[100] = i as u8;
                Transmit {
                    dest: crate::engine::MadDest {
                        dgid: to.gid(),
                        pkey: 0xffff,
                        dest_qp: 1,
                        ..Default::default()
                    },
                    mad,
                }
            })
            .collect()
    }

    fn recv_n(t: &UdpTransport, n: usize) -> Vec<Received> {
        let mut out = Vec::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while out.len() < n && std::time::Instant::now() < deadline {
            t.recv(Some(Duration::from_millis(100)), &mut out).unwrap();
        }
        out
    }

    /// A pair of soft devices on one port (the fabric sends to its own
    /// port), `a` with or without GSO, `b` with GRO.
    fn pair(a_ip: &str, b_ip: &str, offload_a: bool) -> (UdpTransport, UdpTransport) {
        for _ in 0..20 {
            let a = UdpTransport::bind_with(a_ip.parse().unwrap(), 0, offload_a).unwrap();
            if let Ok(b) = UdpTransport::bind_with(b_ip.parse().unwrap(), a.port, true) {
                return (a, b);
            }
        }
        panic!("no common free port for {a_ip} and {b_ip}");
    }

    #[test]
    fn gso_burst_arrives_whole_and_verified() {
        let (a, b) = pair("127.0.91.1", "127.0.91.2", true);
        assert_eq!(a.batching(), "gso+gro");
        let sent = batch(&b, 3 * BATCH + 5);
        a.send(&sent);
        let got = recv_n(&b, sent.len());
        assert_eq!(got.len(), sent.len());
        for (g, s) in got.iter().zip(&sent) {
            assert_eq!(g.mad, s.mad, "order and contents kept");
        }
        // 4 runs to one peer: 4 GSO sends, no refusal.
        assert_eq!(a.gso_counts(), (4, 0));
        let st = b.stats().snapshot();
        assert_eq!(st.rx_datagrams, sent.len() as u64);
        assert_eq!(st.rx_icrc_unverified, 0, "segment ICRCs verify");
        assert_eq!(st.rx_garbage, 0);
        assert_eq!(a.stats().snapshot().tx_datagrams, sent.len() as u64);
    }

    #[test]
    fn gso_refusal_falls_back_once_and_for_all() {
        let (a, b) = pair("127.0.91.3", "127.0.91.4", true);
        // SO_NO_CHECK: Linux refuses UDP_SEGMENT (EINVAL) on a socket that
        // sends without UDP checksums; lone datagrams still go.
        setsockopt_int(a.sock.as_raw_fd(), libc::SOL_SOCKET, libc::SO_NO_CHECK, 1).unwrap();
        let sent = batch(&b, 10);
        a.send(&sent);
        assert_eq!(a.gso_counts(), (0, 1));
        assert_eq!(a.batching(), "gro");
        a.send(&sent);
        assert_eq!(a.gso_counts(), (0, 1), "refused once, never tried again");
        let got = recv_n(&b, 2 * sent.len());
        assert_eq!(got.len(), 2 * sent.len());
        for (g, s) in got.iter().zip(sent.iter().chain(&sent)) {
            assert_eq!(g.mad, s.mad);
        }
        let st = b.stats().snapshot();
        assert_eq!(st.rx_icrc_unverified, 0, "re-framed for IP ID 0");
        assert_eq!(a.stats().snapshot().tx_errors, 0);
    }

    #[test]
    fn malformed_gro_entry_counted_and_dropped() {
        let (a, b) = pair("127.0.91.5", "127.0.91.6", false);
        // A burst of two good datagrams and a short one (100 bytes), sent
        // raw with UDP_SEGMENT: one GRO entry, 660 bytes, segment 280.
        let mut good = [0u8; GSI_PAYLOAD_LEN];
        let inp = a.icrc_input(b.ip, b.port, true).unwrap();
        let t = &batch(&b, 1)[0];
        a.frame(t, &inp.prefix(), 0, &mut good);
        let mut second = [0u8; GSI_PAYLOAD_LEN];
        a.frame(t, &inp.with_ip_id(1).prefix(), 0, &mut second);
        let mut data = Vec::new();
        data.extend_from_slice(&good);
        data.extend_from_slice(&second);
        data.extend_from_slice(&[0u8; 100]);
        let (mut addr, alen) = sockaddr_of(&b.local_addr());
        let mut iov = libc::iovec {
            iov_base: data.as_mut_ptr() as *mut libc::c_void,
            iov_len: data.len(),
        };
        let (mut ctrl, ctrl_len) = Ctrl::udp_segment(GSI_PAYLOAD_LEN as u16);
        let mut h: libc::msghdr = unsafe { std::mem::zeroed() };
        h.msg_name = &mut addr as *mut _ as *mut libc::c_void;
        h.msg_namelen = alen;
        h.msg_iov = &mut iov;
        h.msg_iovlen = 1;
        h.msg_control = ctrl.0.as_mut_ptr() as *mut libc::c_void;
        h.msg_controllen = ctrl_len;
        let r = unsafe { libc::sendmsg(a.sock.as_raw_fd(), &h, 0) };
        assert_eq!(r, data.len() as isize, "{}", io::Error::last_os_error());
        let got = recv_n(&b, 2);
        std::thread::sleep(Duration::from_millis(50));
        let mut rest = Vec::new();
        b.recv(Some(Duration::ZERO), &mut rest).unwrap();
        assert_eq!(got.len() + rest.len(), 2);
        let st = b.stats().snapshot();
        assert_eq!(st.rx_datagrams, 3);
        assert_eq!(st.rx_garbage, 1, "the short last segment");
        assert_eq!(st.rx_icrc_unverified, 0);
    }

    #[test]
    fn receive_buffer_past_rmem_max_when_privileged() {
        let t = UdpTransport::bind("127.0.0.77".parse().unwrap(), 0).unwrap();
        let got = getsockopt_int(t.sock.as_raw_fd(), libc::SO_RCVBUF);
        let rmem_max: i32 = std::fs::read_to_string("/proc/sys/net/core/rmem_max")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0);
        // The kernel reports twice what was set (its bookkeeping share).
        // With CAP_NET_ADMIN (root: the lab guests, CI) SO_RCVBUFFORCE
        // passes rmem_max; without it the buffer is what rmem_max allows.
        if unsafe { libc::geteuid() } == 0 {
            assert!(got >= 2 * RCVBUF, "{got} (rmem_max {rmem_max})");
        } else {
            assert!(
                got >= 2 * RCVBUF.min(rmem_max),
                "{got} (rmem_max {rmem_max})"
            );
        }
    }
}
