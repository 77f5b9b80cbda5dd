//! Wire exactness of the UDP fabric's GSO send path (issue 15).
//!
//! A soft device sends a run of MADs to one peer as one `UDP_SEGMENT`
//! send; segment `i` must carry the ICRC for the IP header it really has on
//! the wire (IPv4: ID `i`). Each case runs in a private network namespace
//! (its own `lo`, fixed addresses and port, nothing shared with other
//! tests), captures what leaves `lo` with an `AF_PACKET` socket, and
//! compares a GSO send with the same MADs sent one datagram per message
//! (`bind_with(.., false)`; both devices fresh, so the PSNs agree).
//!
//! * `lo` as it is: the kernel hands the burst to the device whole (one IP
//!   header, ID 0, 5 × 280 bytes of payload).
//! * `lo` with `gso_max_segs 1`: the kernel segments the burst in software
//!   before the device, as for a NIC without UDP segmentation offload, so
//!   the capture shows every segment with its own headers.
//!
//! Needs root (network namespace, `AF_PACKET`) and `ip` (iproute2, in
//! `scripts/deps.sh`): without root the test says so and passes (an
//! environment limit; CI runs as root).

use ibcm::engine::{MadDest, Transmit};
use ibcm::fabric::Transport;
use ibcm::fabric::udp::UdpTransport;
use ibcm::wire::roce::{self, GSI_PAYLOAD_LEN, UDP_HDR_LEN};
use std::net::IpAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::Command;
use std::time::{Duration, Instant};

const PORT: u16 = 4791;
const N: usize = 5;
const ETH_HDR_LEN: usize = 14;

fn privileged() -> bool {
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root (network namespace, AF_PACKET capture)");
        return false;
    }
    true
}

/// Runs `f` on a thread of its own in a new network namespace, after
/// `setup` (`ip` argument lists) ran there.
fn in_netns<T: Send + 'static>(
    setup: Vec<Vec<&'static str>>,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    std::thread::spawn(move || {
        // The namespace is the thread's; `ip` children inherit it.
        let r = unsafe { libc::unshare(libc::CLONE_NEWNET) };
        assert_eq!(
            r,
            0,
            "unshare(CLONE_NEWNET): {}",
            std::io::Error::last_os_error()
        );
        for args in setup {
            let out = Command::new("ip")
                .args(&args)
                .output()
                .unwrap_or_else(|e| panic!("ip {args:?}: {e} (iproute2 missing?)"));
            assert!(
                out.status.success(),
                "ip {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        f()
    })
    .join()
    .expect("namespace thread")
}

/// An `AF_PACKET` socket on `lo` (of the calling thread's namespace).
struct Capture(OwnedFd);

impl Capture {
    fn open() -> Capture {
        let proto = (libc::ETH_P_ALL as u16).to_be();
        let fd = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK,
                proto as i32,
            )
        };
        assert!(
            fd >= 0,
            "AF_PACKET socket: {}",
            std::io::Error::last_os_error()
        );
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = proto;
        sll.sll_ifindex = unsafe { libc::if_nametoindex(c"lo".as_ptr()) } as i32;
        let r = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                &sll as *const _ as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        };
        assert_eq!(r, 0, "bind to lo: {}", std::io::Error::last_os_error());
        Capture(fd)
    }

    /// The IP packets (Ethernet header removed) that left `lo` from `src`
    /// to UDP port `PORT`, until none came for 100 ms.
    fn outgoing(&self, src: IpAddr) -> Vec<Vec<u8>> {
        let mut got = Vec::new();
        let mut buf = vec![0u8; 70_000];
        let mut idle = Instant::now();
        while idle.elapsed() < Duration::from_millis(100) {
            let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
            let mut len = std::mem::size_of::<libc::sockaddr_ll>() as u32;
            let n = unsafe {
                libc::recvfrom(
                    self.0.as_raw_fd(),
                    buf.as_mut_ptr() as *mut libc::c_void,
                    buf.len(),
                    0,
                    &mut sll as *mut _ as *mut libc::sockaddr,
                    &mut len,
                )
            };
            if n < 0 {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
            idle = Instant::now();
            if sll.sll_pkttype != libc::PACKET_OUTGOING {
                continue;
            }
            let ip = &buf[ETH_HDR_LEN..n as usize];
            let (from, udp_at) = match ip[0] >> 4 {
                4 => (IpAddr::from(<[u8; 4]>::try_from(&ip[12..16]).unwrap()), 20),
                6 => (IpAddr::from(<[u8; 16]>::try_from(&ip[8..24]).unwrap()), 40),
                _ => continue,
            };
            let dport = u16::from_be_bytes([ip[udp_at + 2], ip[udp_at + 3]]);
            if from == src && dport == PORT {
                got.push(ip.to_vec());
            }
        }
        got
    }
}

fn mads(to: IpAddr) -> Vec<Transmit> {
    (0..N)
        .map(|i| {
            let mut mad = [0u8; 256];
            mad[..4].copy_from_slice(&[1, 0x07, 2, 0x03]);
            mad[8..16].copy_from_slice(&(0x1000 + i as u64).to_be_bytes());
            mad[64 + i] = 0xa5;
            Transmit {
                dest: MadDest {
                    dgid: to.into(),
                    pkey: 0xffff,
                    dest_qp: 1,
                    ..Default::default()
                },
                mad,
            }
        })
        .collect()
}

/// What one case saw: the packets of the GSO send, those of the same MADs
/// sent one by one, and the receiver's MADs and ICRC mismatches.
struct Seen {
    gso: Vec<Vec<u8>>,
    single: Vec<Vec<u8>>,
    received: usize,
    icrc_unverified: u64,
    gso_sends: u64,
}

fn run_case(src: IpAddr, dst: IpAddr) -> Seen {
    let cap = Capture::open();
    let b = UdpTransport::bind_with(dst, PORT, true).unwrap();
    let batch = mads(dst);
    let a = UdpTransport::bind_with(src, PORT, true).unwrap();
    assert!(a.batching().starts_with("gso"), "{}", a.batching());
    a.send(&batch);
    let gso_sends = a.gso_counts().0;
    drop(a);
    let gso = cap.outgoing(src);
    let a = UdpTransport::bind_with(src, PORT, false).unwrap();
    assert_eq!(a.batching(), "mmsg");
    a.send(&batch);
    drop(a);
    let single = cap.outgoing(src);
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while out.len() < 2 * N && Instant::now() < deadline {
        b.recv(Some(Duration::from_millis(50)), &mut out).unwrap();
    }
    Seen {
        gso,
        single,
        received: out.len(),
        icrc_unverified: b.stats().snapshot().rx_icrc_unverified,
        gso_sends,
    }
}

fn udp_header(p: &[u8], at: usize) -> [u8; UDP_HDR_LEN] {
    p[at..at + UDP_HDR_LEN].try_into().unwrap()
}

/// The single-datagram packets: N of them, IPv4 ID 0, each ICRC valid for
/// its header.
fn check_single(seen: &Seen, v4: bool) {
    assert_eq!(seen.single.len(), N, "one packet per MAD");
    for p in &seen.single {
        if v4 {
            assert_eq!(&p[4..6], &[0, 0], "lone datagram: IP ID 0");
            roce::verify_icrc_ipv4(&p[..20], &udp_header(p, 20), &p[28..]).unwrap();
        } else {
            roce::verify_icrc_ipv6(&p[..40], &udp_header(p, 40), &p[48..]).unwrap();
        }
    }
}

fn check_receiver(seen: &Seen) {
    assert_eq!(seen.gso_sends, 1, "the 5 MADs went as one UDP_SEGMENT send");
    assert_eq!(seen.received, 2 * N);
    assert_eq!(
        seen.icrc_unverified, 0,
        "every ICRC the receiver checked matched"
    );
}

#[test]
fn gso_segments_split_by_the_kernel_carry_valid_icrcs_v4() {
    if !privileged() {
        return;
    }
    let (a, b): (IpAddr, IpAddr) = ("127.0.0.1".parse().unwrap(), "127.0.0.2".parse().unwrap());
    let setup = vec![
        vec!["link", "set", "lo", "up"],
        vec!["link", "set", "lo", "gso_max_segs", "1"],
    ];
    let seen = in_netns(setup, move || run_case(a, b));
    check_single(&seen, true);
    check_receiver(&seen);
    assert_eq!(
        seen.gso.len(),
        N,
        "the kernel split the burst into N packets"
    );
    for (i, (g, s)) in seen.gso.iter().zip(&seen.single).enumerate() {
        assert_eq!(g.len(), 20 + UDP_HDR_LEN + GSI_PAYLOAD_LEN);
        assert_eq!(
            u16::from_be_bytes([g[4], g[5]]),
            i as u16,
            "segment {i}: IP ID {i}"
        );
        assert_eq!(g[6] & 0x40, 0x40, "DF");
        roce::verify_icrc_ipv4(&g[..20], &udp_header(g, 20), &g[28..])
            .unwrap_or_else(|e| panic!("segment {i}: {e}"));
        // Byte for byte the lone datagram, but for what the ID changes:
        // the ID itself, the IP checksum and the ICRC.
        let (mut g, mut s) = (g.clone(), s.clone());
        let end = g.len();
        for p in [&mut g, &mut s] {
            p[4..6].fill(0);
            p[10..12].fill(0);
            p[end - 4..].fill(0);
        }
        assert_eq!(g, s, "segment {i} differs from the lone datagram");
    }
    assert_eq!(
        seen.gso[0], seen.single[0],
        "segment 0 is the lone datagram"
    );
}

#[test]
fn gso_burst_on_lo_is_the_single_datagrams_concatenated_v4() {
    if !privileged() {
        return;
    }
    let (a, b): (IpAddr, IpAddr) = ("127.0.0.1".parse().unwrap(), "127.0.0.2".parse().unwrap());
    let seen = in_netns(vec![vec!["link", "set", "lo", "up"]], move || {
        run_case(a, b)
    });
    check_single(&seen, true);
    check_receiver(&seen);
    assert_eq!(seen.gso.len(), 1, "lo takes the burst whole");
    let g = &seen.gso[0];
    assert_eq!(g.len(), 20 + UDP_HDR_LEN + N * GSI_PAYLOAD_LEN);
    let id = u16::from_be_bytes([g[4], g[5]]);
    assert_eq!(id, 0);
    for (i, (seg, s)) in g[28..]
        .chunks(GSI_PAYLOAD_LEN)
        .zip(&seen.single)
        .enumerate()
    {
        assert_eq!(
            seg[..GSI_PAYLOAD_LEN - 4],
            s[28..28 + GSI_PAYLOAD_LEN - 4],
            "segment {i}"
        );
        // The headers segment i gets when split (the rule the split case
        // above observes): the lone datagram's, with IP ID `id + i`.
        let mut ip: [u8; 20] = s[..20].try_into().unwrap();
        ip[4..6].copy_from_slice(&(id + i as u16).to_be_bytes());
        roce::verify_icrc_ipv4(&ip, &udp_header(s, 20), seg)
            .unwrap_or_else(|e| panic!("segment {i}: {e}"));
    }
}

#[test]
fn gso_segments_v6_are_the_single_datagrams() {
    if !privileged() {
        return;
    }
    let (a, b): (IpAddr, IpAddr) = ("fd00::1".parse().unwrap(), "fd00::2".parse().unwrap());
    for split in [true, false] {
        let mut setup = vec![
            vec!["link", "set", "lo", "up"],
            vec!["addr", "add", "fd00::1/128", "dev", "lo", "nodad"],
            vec!["addr", "add", "fd00::2/128", "dev", "lo", "nodad"],
        ];
        if split {
            setup.push(vec!["link", "set", "lo", "gso_max_segs", "1"]);
        }
        let seen = in_netns(setup, move || run_case(a, b));
        check_single(&seen, false);
        check_receiver(&seen);
        if split {
            // No ID in IPv6: every segment is the lone datagram, byte for byte.
            assert_eq!(seen.gso, seen.single);
        } else {
            assert_eq!(seen.gso.len(), 1);
            let g = &seen.gso[0];
            for (seg, s) in g[48..].chunks(GSI_PAYLOAD_LEN).zip(&seen.single) {
                assert_eq!(seg, &s[48..]);
            }
        }
    }
}
