//! What a host CM service would cost (docs/SERVICE.md): the primitives each
//! design adds to a connection, measured on this machine.
//!
//! * `seqpacket`: a round trip between two processes over a Unix
//!   SOCK_SEQPACKET socket (what an API call answered by a service costs),
//!   and one-way records per second when a sender batches N records in one
//!   message (what an event stream or a MAD switch costs per MAD).
//! * `udp`: a round trip over UDP on the loopback interface between two
//!   processes, framed as the software fabric frames a MAD (280 bytes): the
//!   hop a MAD takes today between two ibcm processes.
//!
//! `cargo run --release --example service_cost` (prints one line per
//! measurement; `--json` for one JSON object).

use std::io::{Read, Write};
use std::net::UdpSocket;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const ROUNDS: usize = 20_000;

fn seqpacket_pair() -> (OwnedFd, OwnedFd) {
    let mut fds = [0i32; 2];
    let rc = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    assert_eq!(rc, 0, "socketpair: {}", std::io::Error::last_os_error());
    unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

fn send_fd(fd: &OwnedFd, buf: &[u8]) {
    let n = unsafe { libc::send(fd.as_raw_fd(), buf.as_ptr().cast(), buf.len(), 0) };
    assert_eq!(
        n as usize,
        buf.len(),
        "send: {}",
        std::io::Error::last_os_error()
    );
}

fn recv_fd(fd: &OwnedFd, buf: &mut [u8]) -> usize {
    let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
    assert!(n >= 0, "recv: {}", std::io::Error::last_os_error());
    n as usize
}

fn percentile(v: &mut [Duration], p: f64) -> f64 {
    v.sort();
    v[((v.len() - 1) as f64 * p) as usize].as_secs_f64() * 1e6
}

/// The echo side of each measurement, run as a child process so both
/// ends are separate processes as they would be with a service.
fn child(mode: &str) {
    match mode {
        "seqpacket-echo" | "seqpacket-sink" => {
            // fd 3 is the socket handed down by the parent.
            let fd = unsafe { OwnedFd::from_raw_fd(3) };
            let mut buf = vec![0u8; 65536];
            loop {
                let n = recv_fd(&fd, &mut buf);
                if n == 0 {
                    return;
                }
                if mode == "seqpacket-echo" || buf[0] == 0xff {
                    send_fd(&fd, &buf[..n.min(300)]);
                }
            }
        }
        "udp-echo" => {
            let s = UdpSocket::bind("127.0.90.2:4791").unwrap();
            let mut ready = std::io::stdout();
            ready.write_all(b"ready\n").unwrap();
            ready.flush().unwrap();
            let mut buf = [0u8; 600];
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            while let Ok((n, from)) = s.recv_from(&mut buf) {
                if n == 1 {
                    return;
                }
                s.send_to(&buf[..n], from).unwrap();
            }
        }
        _ => panic!("unknown child mode {mode}"),
    }
}

fn spawn_with_fd(mode: &str, fd: OwnedFd) -> std::process::Child {
    let raw = fd.as_raw_fd();
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.arg("--child").arg(mode);
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(move || {
            if libc::dup2(raw, 3) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let c = cmd.spawn().unwrap();
    drop(fd);
    c
}

struct Figures {
    ipc_rtt_p50_us: f64,
    ipc_rtt_p99_us: f64,
    ipc_oneway_per_s: Vec<(usize, f64)>,
    udp_rtt_p50_us: f64,
    udp_rtt_p99_us: f64,
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() == 3 && args[1] == "--child" {
        child(&args[2]);
        return;
    }
    let json = args.iter().any(|a| a == "--json");

    // Round trips over SOCK_SEQPACKET with a 64-byte request and a
    // 300-byte answer (an API call and its result or an event).
    let (a, b) = seqpacket_pair();
    let mut echo = spawn_with_fd("seqpacket-echo", b);
    let mut rtt = Vec::with_capacity(ROUNDS);
    let mut buf = vec![0u8; 600];
    let req = [7u8; 64];
    for i in 0..ROUNDS + 1000 {
        let t = Instant::now();
        send_fd(&a, &req);
        recv_fd(&a, &mut buf);
        if i >= 1000 {
            rtt.push(t.elapsed());
        }
    }
    drop(a);
    echo.wait().unwrap();
    let ipc_rtt_p50_us = percentile(&mut rtt, 0.5);
    let ipc_rtt_p99_us = percentile(&mut rtt, 0.99);

    // One-way records of 300 bytes, batched N per message; the sink
    // answers the last one so the time covers delivery.
    let mut oneway = Vec::new();
    for batch in [1usize, 16, 64] {
        let (a, b) = seqpacket_pair();
        let mut sink = spawn_with_fd("seqpacket-sink", b);
        let records = 200_000usize;
        let msg = vec![1u8; 300 * batch];
        let t = Instant::now();
        for _ in 0..records / batch {
            send_fd(&a, &msg);
        }
        let mut last = msg.clone();
        last[0] = 0xff;
        send_fd(&a, &last);
        recv_fd(&a, &mut buf);
        let secs = t.elapsed().as_secs_f64();
        oneway.push((batch, (records + batch) as f64 / secs));
        drop(a);
        sink.wait().unwrap();
    }

    // UDP round trips between two processes on loopback, 280 bytes.
    let mut udp_child = Command::new(std::env::current_exe().unwrap())
        .args(["--child", "udp-echo"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = [0u8; 6];
    udp_child
        .stdout
        .as_mut()
        .unwrap()
        .read_exact(&mut line)
        .unwrap();
    let s = UdpSocket::bind("127.0.90.1:4791").unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let frame = [3u8; 280];
    let mut urtt = Vec::with_capacity(ROUNDS);
    for i in 0..ROUNDS + 1000 {
        let t = Instant::now();
        s.send_to(&frame, "127.0.90.2:4791").unwrap();
        s.recv_from(&mut buf).unwrap();
        if i >= 1000 {
            urtt.push(t.elapsed());
        }
    }
    s.send_to(&[0], "127.0.90.2:4791").unwrap();
    udp_child.wait().unwrap();
    let f = Figures {
        ipc_rtt_p50_us,
        ipc_rtt_p99_us,
        ipc_oneway_per_s: oneway,
        udp_rtt_p50_us: percentile(&mut urtt, 0.5),
        udp_rtt_p99_us: percentile(&mut urtt, 0.99),
    };
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load = load.split_whitespace().next().unwrap_or("?").to_string();
    if json {
        let batches: Vec<String> = f
            .ipc_oneway_per_s
            .iter()
            .map(|(b, r)| format!("\"{b}\":{r:.0}"))
            .collect();
        println!(
            "{{\"load1\":{load},\"ipc_rtt_p50_us\":{:.1},\"ipc_rtt_p99_us\":{:.1},\
             \"ipc_oneway_records_per_s\":{{{}}},\"udp_rtt_p50_us\":{:.1},\"udp_rtt_p99_us\":{:.1}}}",
            f.ipc_rtt_p50_us,
            f.ipc_rtt_p99_us,
            batches.join(","),
            f.udp_rtt_p50_us,
            f.udp_rtt_p99_us
        );
    } else {
        println!("load average (1 min): {load}");
        println!(
            "unix seqpacket round trip (64 B -> 300 B), 2 processes: p50 {:.1} us, p99 {:.1} us",
            f.ipc_rtt_p50_us, f.ipc_rtt_p99_us
        );
        for (b, r) in &f.ipc_oneway_per_s {
            println!("unix seqpacket one-way, {b} records of 300 B per message: {r:.0} records/s");
        }
        println!(
            "udp loopback round trip (280 B frames), 2 processes: p50 {:.1} us, p99 {:.1} us",
            f.udp_rtt_p50_us, f.udp_rtt_p99_us
        );
    }
}
