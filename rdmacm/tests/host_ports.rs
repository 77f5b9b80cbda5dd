//! rdma_cm's port space is the host's when the CM service serves the
//! library (docs/RDMACM.md, "Port spaces"). Processes of this test binary
//! (re-run with `HOST_PORTS_ROLE`) share one `soft:` address through a CM
//! service this test runs on a private socket:
//!
//! * a port bound and listened on by one process is `EADDRINUSE` for a
//!   bind of another (same address and wildcard), and free for another
//!   port space;
//! * a client process connects to the listener process through the one
//!   soft address (loopback through the service: CONNECT_REQUEST,
//!   ESTABLISHED on both sides);
//! * the listener SIGKILLed, its port is free for another process within
//!   a second (the service releases the bindings of a closed connection);
//! * below 1024 only with CAP_NET_BIND_SERVICE, checked by the service on
//!   the peer process;
//! * a hostile local client (garbage, another connection's owner values)
//!   is refused and moves nobody's binding;
//! * `rdma_resolve_addr`'s implicit bind, pipelined through leased ports:
//!   two processes' bursts never share a port, a destroyed id's port is
//!   free for another process at once, an id destroyed before its port
//!   came leaves none behind, and a process killed right after its
//!   destroys leaves nothing; a leased port is another process's for an
//!   explicit bind (the lease is revoked), never for its ephemeral one;
//! * `rdma_destroy_id` through the service sends one message (the port's
//!   release rides with the CM id's `DESTROY`, `PORT_RELEASE_BY`): the
//!   port is another process's as the destroy returns (the service lets
//!   the holder's connections run what they had received before it
//!   answers a conflicting bind); a port the holder still holds is
//!   `EADDRINUSE` without waiting out the bound, also between two
//!   connections of one process; that
//!   release names its port connection with a token only the owning
//!   process has, and a token used by another process (or a wrong
//!   secret) is refused and releases nothing;
//! * a hung service (a service process of this binary, `SIGSTOP`ped): a
//!   pipelined `rdma_resolve_addr` reports ADDR_ERROR -ETIMEDOUT after its
//!   `timeout_ms`, the service's late answer (once `SIGCONT`ed) is dropped
//!   without a second event and the id resolves again; a synchronous bind
//!   fails with ETIMEDOUT within `IBCM_SERVICE_TIMEOUT_MS`, and once the
//!   service is continued a new bind works; with `timeout_ms` 0 the
//!   resolve against the stopped service fails after one bound too;
//! * a busy service (a proxy process of this binary in front of the
//!   service, holding back its answers to pipelined binds while it burns
//!   CPU, or passing them on one by one, slowly): resolves with
//!   `timeout_ms` 0 wait past `IBCM_SERVICE_TIMEOUT_MS` and resolve, one
//!   with a positive `timeout_ms` still times out at it;
//! * a process flooding its connections (one the service keeps up with,
//!   one whose replies it never reads) cannot hold another process's
//!   bind of its port past `SETTLE_MAX`: answered `EADDRINUSE`, counted
//!   (`Service::settle_expired`), and the service serves others.

#[path = "common/cma.rs"]
mod cma_common;
#[path = "../../tests/common/net.rs"]
mod net;
#[path = "../../tests/common/served.rs"]
mod served;
#[path = "../../tests/common/stopped.rs"]
mod stopped;

use cma_common::{conn_param, sockaddr};
use ibcm::cma::{RdmaCmEventType as R, port_space};
use ibcm::ipc;
use ibcm::portspace::{self as host, Binding, HostPorts};
use ibcm::service::{self, Limits, Options, Service};
use ibcm_rdmacm::abi::*;
use ibcm_rdmacm::exports::*;
use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, SocketAddr};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const ROLE: &str = "HOST_PORTS_ROLE";
const ADDR: &str = "HOST_PORTS_ADDR";
/// A file whose creation lets a `resolve-burst` process go on.
const GO: &str = "HOST_PORTS_GO";
const CAP_NET_BIND_SERVICE: libc::c_ulong = 10;

/// A CM service on a socket of its own, in this process (its threads end
/// with the test binary).
fn start_service(test: &str) -> PathBuf {
    start_service_with(test).0
}

/// `start_service`, and the service (to read its port table).
fn start_service_with(test: &str) -> (PathBuf, std::sync::Arc<Service>) {
    let dir = std::env::temp_dir().join(format!("ibcm-host-ports-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (svc, socket) = served::start_service(dir.join("ibcmd.sock"));
    (socket, svc)
}

/// A process of this binary in `role`, a client of the service at `socket`,
/// its stdout lines delivered as they come.
struct Proc {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Proc {
    fn spawn(socket: &Path, role: &str, addr: SocketAddr, unprivileged: bool) -> Proc {
        Proc::spawn_env(socket, role, addr, unprivileged, &[])
    }

    fn spawn_env(
        socket: &Path,
        role: &str,
        addr: SocketAddr,
        unprivileged: bool,
        env: &[(&str, &str)],
    ) -> Proc {
        Proc::spawn_to(socket, role, addr, unprivileged, env, Stdio::inherit())
    }

    /// `spawn_env` with the process's stderr to `stderr`.
    fn spawn_to(
        socket: &Path,
        role: &str,
        addr: SocketAddr,
        unprivileged: bool,
        env: &[(&str, &str)],
        stderr: Stdio,
    ) -> Proc {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        if unprivileged {
            // SAFETY: prctl only, between fork and exec.
            unsafe {
                cmd.pre_exec(|| {
                    // Without CAP_SETPCAP this fails and the process has
                    // no CAP_NET_BIND_SERVICE anyway (not root).
                    libc::prctl(libc::PR_CAPBSET_DROP, CAP_NET_BIND_SERVICE, 0, 0, 0);
                    Ok(())
                })
            };
        }
        let mut child = cmd
            .args([
                "--exact",
                "child",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(ROLE, role)
            .env(ADDR, addr.to_string())
            .env(GO, socket.with_extension("go"))
            .env("IBCM_SERVICE", "required")
            .env("IBCM_SERVICE_SOCKET", socket)
            .env("IBCM_RDMACM_DEVICE", "soft")
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap();
        let out: ChildStdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    return;
                }
            }
        });
        Proc { child, lines }
    }

    /// The next report (`@...`; the test harness prints its own lines
    /// too, and "test child ... " before the first), within `limit`.
    fn next(&self, limit: Duration) -> String {
        let end = Instant::now() + limit;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) if l.contains('@') => return l[l.find('@').unwrap_or(0)..].to_string(),
                Ok(_) => continue,
                Err(e) => panic!("no report within {limit:?}: {e}"),
            }
        }
    }

    /// The next report, which must be `want`.
    fn expect(&self, want: &str, limit: Duration) {
        let end = Instant::now() + limit;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) if l.contains('@') => {
                    let got = &l[l.find('@').unwrap_or(0)..];
                    assert_eq!(got, want, "a {want:?} report was expected");
                    return;
                }
                Ok(_) => continue,
                Err(e) => panic!("no {want:?} within {limit:?}: {e}"),
            }
        }
    }

    fn finish(mut self) {
        let st = self.child.wait().unwrap();
        assert!(st.success(), "the child failed: {st}");
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_port_is_one_process_s_on_the_host_and_freed_by_its_death() {
    let socket = start_service("kill");
    let addr: SocketAddr = SocketAddr::from((net::addr(2), 7471));
    let server = Proc::spawn(&socket, "serve", addr, false);
    server.expect("@listening", Duration::from_secs(10));

    // Another process: the same port, on the address or the wildcard, is
    // taken; another port space's is not.
    Proc::spawn(&socket, "bind-taken", addr, false).finish();

    // A client process reaches the listener through the one soft address.
    let client = Proc::spawn(&socket, "connect", addr, false);
    server.expect("@established", Duration::from_secs(10));
    client.expect("@established", Duration::from_secs(10));
    client.finish();

    // A process retrying the bind sees it free within a second of the
    // listener's SIGKILL.
    let waiter = Proc::spawn(&socket, "bind-retry", addr, false);
    waiter.expect("@in-use", Duration::from_secs(10));
    let mut server = server;
    let t0 = Instant::now();
    server.child.kill().unwrap();
    waiter.expect("@bound", Duration::from_secs(5));
    let took = t0.elapsed();
    assert!(
        took < Duration::from_secs(1),
        "the port came free after {took:?}"
    );
    waiter.finish();
}

/// A process that exits with its connection established (no destroy,
/// no device close) leaves its CM counters with the service forwarding
/// its device (the library's exit hook sends them): `ibcm stat` of the
/// device still counts its REQ and RTU once it is gone.
#[test]
fn a_process_gone_leaves_its_counters_with_the_service() {
    let socket = start_service("counters");
    let addr: SocketAddr = SocketAddr::from((net::addr(16), 7471));
    let server = Proc::spawn(&socket, "serve", addr, false);
    server.expect("@listening", Duration::from_secs(10));
    // The client on the server's address: one device, which the server
    // keeps open.
    let ip = addr.ip().to_string();
    let client = Proc::spawn_env(&socket, "connect", addr, false, &[("HOST_PORTS_SRC", &ip)]);
    server.expect("@established", Duration::from_secs(10));
    client.expect("@established", Duration::from_secs(10));
    client.finish();
    let attr = |name: &str| {
        ibcm::engine::counters::ATTR_NAMES
            .iter()
            .position(|n| *n == name)
            .unwrap()
    };
    let dev = net::ip(16);
    let stat = service::query_stat(&socket).unwrap();
    let d = stat
        .iter()
        .find(|d| String::from_utf8_lossy(&d.name).contains(&dev))
        .unwrap_or_else(|| panic!("no device {dev}"));
    // Only the client sent a REQ and an RTU; the server (alive) received
    // them.
    assert_eq!((d.cm.tx[attr("REQ")], d.cm.rx[attr("REQ")]), (1, 1));
    assert_eq!((d.cm.tx[attr("RTU")], d.cm.rx[attr("RTU")]), (1, 1));
    assert_eq!(d.clients, 1);
}

#[test]
fn privileged_ports_follow_the_peer_s_capability() {
    let socket = start_service("priv");
    let addr: SocketAddr = SocketAddr::from((net::addr(3), 80));
    let privileged = ibcm_rdmacm::ports::may_bind_privileged();
    let p = Proc::spawn(&socket, "bind-privileged", addr, false);
    p.expect(
        if privileged { "@bound" } else { "@refused" },
        Duration::from_secs(10),
    );
    p.finish();
    // A process without the capability (dropped from its bounding set
    // before exec), served by this process's service, which has it when
    // the test runs as root: refused, so the service judged the peer.
    let p = Proc::spawn(&socket, "bind-privileged", addr, true);
    p.expect("@refused", Duration::from_secs(10));
    p.finish();
}

/// One raw request on `fd`: the errno of its reply and the reply's bytes
/// after it.
fn request(fd: &std::os::fd::OwnedFd, opc: u16, seq: u64, body: &[u8]) -> (i32, Vec<u8>) {
    let mut w = ipc::Header {
        op: opc,
        seq,
        handle: 0,
    }
    .record();
    w.0.extend_from_slice(body);
    ipc::sock::send(fd, &w.into_bytes()).unwrap();
    let mut buf = vec![0u8; ipc::MAX_RECORD];
    let n = ipc::sock::recv(fd, &mut buf).unwrap();
    let (h, mut r) = ipc::Header::parse(&buf[..n]).unwrap();
    assert_eq!((h.op, h.seq), (ipc::op::REPLY | opc, seq));
    let err = r.get::<i32>().unwrap();
    (err, buf[n - r.remaining()..n].to_vec())
}

/// One raw request on `fd` and the errno of its reply.
fn raw(fd: &std::os::fd::OwnedFd, opc: u16, seq: u64, body: &[u8]) -> i32 {
    request(fd, opc, seq, body).0
}

/// A local client sending garbage and another connection's owner values:
/// refused, and the other's bindings stay; they go when it does.
#[test]
fn a_hostile_client_cannot_touch_another_s_ports() {
    let socket = start_service("hostile");
    let ip: IpAddr = net::ip(4).parse().unwrap();
    let b = |owner| Binding::plain(ip, owner);
    let good = HostPorts::connect_at(&socket).unwrap();
    assert_eq!(good.bind(port_space::TCP, 7600, b(1)), Ok(7600));
    let bad = ipc::sock::connect(&socket).unwrap();
    // Releasing the same (port, owner): only its own bindings, none.
    let mut rel = ipc::Writer(Vec::new());
    rel.put(&port_space::TCP).put(&7600u16).put(&1u64);
    assert_eq!(raw(&bad, ipc::op::PORT_RELEASE, 2, &rel.0), 0);
    // Truncated, an unknown address family, trailing bytes: -EPROTO.
    let mut bind = ipc::Writer(Vec::new());
    host::put_bind(&mut bind, port_space::TCP, 7600, &b(1));
    let whole = bind.into_bytes();
    assert_eq!(raw(&bad, ipc::op::PORT_BIND, 3, &whole[..7]), -libc::EPROTO);
    let mut fam = whole.clone();
    fam[4] = 9;
    assert_eq!(raw(&bad, ipc::op::PORT_BIND, 4, &fam), -libc::EPROTO);
    let mut long = whole.clone();
    long.push(0);
    assert_eq!(raw(&bad, ipc::op::PORT_BIND, 5, &long), -libc::EPROTO);
    // The port is still the good client's, and it can listen on it.
    assert_eq!(raw(&bad, ipc::op::PORT_BIND, 6, &whole), -libc::EADDRINUSE);
    assert_eq!(good.listen(port_space::TCP, 7600, 1), Ok(()));
    let mut lis = ipc::Writer(Vec::new());
    lis.put(&port_space::TCP).put(&7600u16).put(&1u64);
    assert_eq!(raw(&bad, ipc::op::PORT_LISTEN, 7, &lis.0), -libc::EINVAL);
    // The good client gone, the port is free.
    drop(good);
    let t = Instant::now();
    let mut seq = 8;
    while raw(&bad, ipc::op::PORT_BIND, seq, &whole) != 0 {
        assert!(t.elapsed() < Duration::from_secs(1), "never released");
        std::thread::sleep(Duration::from_millis(5));
        seq += 1;
    }
}

/// A listening id destroyed in one process: its port is another
/// process's as `rdma_destroy_id` returns — the first bind after it
/// succeeds — its release having left in the message of the CM id's
/// `DESTROY` (`PORT_RELEASE_BY`).
#[test]
fn a_destroyed_listener_s_port_is_another_process_s_at_once() {
    let socket = start_service("destroy-one");
    let addr: SocketAddr = SocketAddr::from((net::addr(7), 7620));
    let p = Proc::spawn(&socket, "listen-destroy", addr, false);
    p.expect("@listening", Duration::from_secs(10));
    let other = HostPorts::connect_at(&socket).unwrap();
    let bd = Binding::plain(addr.ip(), 1);
    assert_eq!(
        other.bind(port_space::TCP, addr.port(), bd),
        Err(host::EADDRINUSE)
    );
    go(&socket, 1);
    p.expect("@destroyed", Duration::from_secs(10));
    // The release is one-way: it may still wait in the destroying
    // process's connection when this bind runs on another connection's
    // thread; the service lets that process's connections run what they
    // had received before it answers the conflict (docs/SERVICE.md,
    // "Destroy in one message"). One bind, no retry.
    assert_eq!(
        other.bind(port_space::TCP, addr.port(), bd),
        Ok(addr.port()),
        "the destroyed listener's port is not free as its destroy returned"
    );
    p.expect("@alive", Duration::from_secs(10));
}

/// A port another process really holds (a listener, its device
/// connection idle) is `EADDRINUSE` at once: the service's wait for the
/// holder's connections ends as they are idle, not when its bound
/// (`service::SETTLE_MAX`) runs out.
#[test]
fn a_port_still_held_is_in_use_without_waiting_out_the_bound() {
    let (socket, svc) = start_service_with("held");
    let addr: SocketAddr = SocketAddr::from((net::addr(11), 7640));
    let p = Proc::spawn(&socket, "listen-destroy", addr, false);
    p.expect("@listening", Duration::from_secs(10));
    let other = HostPorts::connect_at(&socket).unwrap();
    let bd = Binding::plain(addr.ip(), 1);
    let n = 20;
    let t = Instant::now();
    for _ in 0..n {
        assert_eq!(
            other.bind(port_space::TCP, addr.port(), bd),
            Err(host::EADDRINUSE)
        );
    }
    let took = t.elapsed();
    assert_eq!(svc.settle_expired(), 0, "a bind waited out the bound");
    // Each waiting out the bound would take n × SETTLE_MAX (4 s).
    assert!(
        took < service::SETTLE_MAX * n / 2,
        "{n} refused binds took {took:?}"
    );
    go(&socket, 1);
    p.expect("@destroyed", Duration::from_secs(10));
    assert_eq!(
        other.bind(port_space::TCP, addr.port(), bd),
        Ok(addr.port())
    );
    p.expect("@alive", Duration::from_secs(10));
}

/// One process, two port connections, each binding the port the other
/// holds, at once and again: every bind is `EADDRINUSE`, and neither
/// connection's thread waits for the other (no wait runs out the bound).
#[test]
fn two_connections_of_one_process_conflicting_never_wait_for_each_other() {
    let (socket, svc) = start_service_with("self");
    let ip: IpAddr = net::ip(12).parse().unwrap();
    let bd = |owner| Binding::plain(ip, owner);
    let a = HostPorts::connect_at(&socket).unwrap();
    let b = HostPorts::connect_at(&socket).unwrap();
    assert_eq!(a.bind(port_space::TCP, 7650, bd(1)), Ok(7650));
    assert_eq!(b.bind(port_space::TCP, 7651, bd(2)), Ok(7651));
    let rounds = 200;
    let t = Instant::now();
    std::thread::scope(|s| {
        let ta = s.spawn(|| {
            for _ in 0..rounds {
                assert_eq!(a.bind(port_space::TCP, 7651, bd(3)), Err(host::EADDRINUSE));
            }
        });
        for _ in 0..rounds {
            assert_eq!(b.bind(port_space::TCP, 7650, bd(4)), Err(host::EADDRINUSE));
        }
        ta.join().unwrap();
    });
    let took = t.elapsed();
    assert_eq!(
        svc.settle_expired(),
        0,
        "two connections waited for each other ({took:?})"
    );
    assert!(took < Duration::from_secs(10), "{took:?}");
    drop(a);
    drop(b);
}

/// `PORT_RELEASE_BY` names a port connection by its `PORT_TOKEN`: another
/// process holding the right token is refused (the peer's pid is not the
/// holder's), so is a wrong secret; the process itself releases with it.
#[test]
fn a_port_token_releases_only_its_own_process_s_bindings() {
    let socket = start_service("token");
    let addr: SocketAddr = SocketAddr::from((net::addr(8), 7630));
    let ip = addr.ip();
    let bind_body = |port: u16, owner: u64| {
        let mut w = ipc::Writer(Vec::new());
        host::put_bind(&mut w, port_space::TCP, port, &Binding::plain(ip, owner));
        w.into_bytes()
    };
    let release_by = |holder: u64, secret: u64, port: u16, owner: u64| {
        let mut w = ipc::Writer(Vec::new());
        w.put(&holder)
            .put(&secret)
            .put(&port_space::TCP)
            .put(&port)
            .put(&owner);
        w.into_bytes()
    };
    // Another process's binding, and its token.
    let p = Proc::spawn(&socket, "token-holder", addr, false);
    let l = p.next(Duration::from_secs(10));
    let t: Vec<u64> = l
        .strip_prefix("@token ")
        .unwrap_or_else(|| panic!("{l}"))
        .split(' ')
        .map(|v| v.parse().unwrap())
        .collect();
    let (holder, secret) = (t[0], t[1]);
    let bad = ipc::sock::connect(&socket).unwrap();
    let op_rel = ipc::op::PORT_RELEASE_BY;
    // Its token from this process: refused; a wrong secret too; short.
    let theirs = release_by(holder, secret, addr.port(), 1);
    assert_eq!(raw(&bad, op_rel, 2, &theirs), -libc::EPERM);
    let wrong = release_by(holder, secret ^ 1, addr.port(), 1);
    assert_eq!(raw(&bad, op_rel, 3, &wrong), -libc::EPERM);
    assert_eq!(raw(&bad, op_rel, 4, &theirs[..20]), -libc::EPROTO);
    // One-way (seq 0): nothing answers, nothing moves.
    let mut w = ipc::Header {
        op: op_rel,
        seq: 0,
        handle: 0,
    }
    .record();
    w.0.extend_from_slice(&theirs);
    ipc::sock::send(&bad, &w.into_bytes()).unwrap();
    assert_eq!(
        raw(&bad, ipc::op::PORT_BIND, 5, &bind_body(addr.port(), 9)),
        -libc::EADDRINUSE,
        "another process's token released its port"
    );
    // This process's own: a second connection releases the first's
    // binding with its token, not with a wrong secret.
    let mine = ipc::sock::connect(&socket).unwrap();
    let port2 = addr.port() + 1;
    assert_eq!(raw(&mine, ipc::op::PORT_BIND, 2, &bind_body(port2, 3)), 0);
    let (err, tok) = request(&mine, ipc::op::PORT_TOKEN, 3, &[]);
    assert_eq!(err, 0);
    let mut r = ipc::Reader::new(&tok);
    let _: ipc::Public = r.get().unwrap();
    let (h2, s2): (u64, u64) = (r.get().unwrap(), r.get().unwrap());
    assert_eq!(
        raw(&bad, op_rel, 6, &release_by(h2, s2 ^ 1, port2, 3)),
        -libc::EPERM
    );
    assert_eq!(
        raw(&bad, ipc::op::PORT_BIND, 7, &bind_body(port2, 9)),
        -libc::EADDRINUSE
    );
    assert_eq!(raw(&bad, op_rel, 8, &release_by(h2, s2, port2, 3)), 0);
    assert_eq!(raw(&bad, ipc::op::PORT_BIND, 9, &bind_body(port2, 9)), 0);
    // The holder process itself releases its own binding with its token.
    go(&socket, 1);
    p.expect("@released 0", Duration::from_secs(10));
    assert_eq!(
        raw(&bad, ipc::op::PORT_BIND, 10, &bind_body(addr.port(), 9)),
        0
    );
}

/// Polls `f` for up to `limit`; whether it became true.
fn within(limit: Duration, f: impl Fn() -> bool) -> bool {
    let t = Instant::now();
    while !f() {
        if t.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    true
}

/// A CM service in a process of its own on a socket of `test`'s, its log
/// (`IBCM_LOG=info`) in a file: the socket, the process and the log's
/// path.
fn logged_service(test: &str) -> (PathBuf, Proc, PathBuf) {
    let dir = std::env::temp_dir().join(format!("ibcm-host-ports-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (socket, log) = (dir.join("ibcmd.sock"), dir.join("service.log"));
    let any = SocketAddr::from((net::addr(2), 0));
    let svc = Proc::spawn_to(
        &socket,
        "service",
        any,
        false,
        &[("IBCM_LOG", "info")],
        Stdio::from(std::fs::File::create(&log).unwrap()),
    );
    svc.expect("@serving", Duration::from_secs(10));
    (socket, svc, log)
}

/// Whether the service's log at `log` gets a line containing `want`
/// within 5 s.
fn logged(log: &Path, want: &str) -> bool {
    within(Duration::from_secs(5), || {
        std::fs::read_to_string(log).is_ok_and(|l| l.contains(want))
    })
}

/// The service's line when a process's connection ends says what
/// happened: "closed its port connection" while the process lives on,
/// "gone" only when it is.
#[test]
fn the_service_says_closed_for_a_live_process_and_gone_for_a_dead_one() {
    let (socket, _svc, log) = logged_service("closed-log");
    let ip: IpAddr = net::ip(5).parse().unwrap();
    // This process: its port connection closed, the process alive.
    let hp = HostPorts::connect_at(&socket).unwrap();
    assert_eq!(
        hp.bind(port_space::TCP, 7610, Binding::plain(ip, 1)),
        Ok(7610)
    );
    drop(hp);
    let me = std::process::id();
    let line = format!("process {me} closed its port connection: its 1 rdma_cm port(s) released");
    assert!(
        logged(&log, &line),
        "no {line:?} in:\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    assert!(
        !std::fs::read_to_string(&log)
            .unwrap()
            .contains(&format!("process {me} gone")),
        "a live process said gone"
    );
    // A process killed holding a port: gone.
    let addr = SocketAddr::new(ip, 7611);
    let server = Proc::spawn(&socket, "serve", addr, false);
    server.expect("@listening", Duration::from_secs(10));
    let pid = server.child.id();
    let mut server = server;
    server.child.kill().unwrap();
    let _ = server.child.wait();
    let line = format!("process {pid} gone: its 1 rdma_cm port(s) released");
    assert!(
        logged(&log, &line),
        "no {line:?} in:\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
}

/// A forked child's binds through its parent's `HostPorts` go on a
/// connection of its own (its pid, not a cached copy of its parent's):
/// the service logs the child's pid with the child's port when it exits,
/// and the parent's binding and connection are untouched.
#[test]
fn a_forked_child_binds_as_itself() {
    let (socket, _svc, log) = logged_service("fork");
    let addr = SocketAddr::from((net::addr(6), 7620));
    let p = Proc::spawn(&socket, "fork-bind", addr, false);
    let child = p.next(Duration::from_secs(10));
    let gpid: u32 = child
        .strip_prefix("@child ")
        .unwrap_or_else(|| panic!("{child}"))
        .parse()
        .unwrap();
    p.expect("@child-bound", Duration::from_secs(10));
    p.expect("@parent-still-bound", Duration::from_secs(10));
    let ppid = p.child.id();
    assert_ne!(gpid, ppid);
    let line = format!("process {gpid} gone: its 1 rdma_cm port(s) released");
    assert!(
        logged(&log, &line),
        "no {line:?} in:\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    p.finish();
}

/// Bindings (not leases) in the service's table.
fn bound(svc: &Service) -> usize {
    let (all, leased) = svc.rdma_ports();
    all - leased
}

/// Two processes resolve 200 ids each at once (implicit ephemeral binds,
/// pipelined through their leases): 400 distinct ports; after their
/// destroys every port is free for another process at once, and killed
/// they leave not even a lease.
#[test]
fn implicit_binds_of_two_processes_never_collide_and_destroy_frees_them() {
    let (socket, svc) = start_service_with("burst");
    let addr: SocketAddr = SocketAddr::from((net::addr(5), 7471));
    let a = Proc::spawn(&socket, "resolve-burst", addr, false);
    let b = Proc::spawn(&socket, "resolve-burst", addr, false);
    let ports = |p: &Proc| -> Vec<u16> {
        let l = p.next(Duration::from_secs(30));
        let list = l.strip_prefix("@ports ").unwrap_or_else(|| panic!("{l}"));
        list.split(',').map(|v| v.parse().unwrap()).collect()
    };
    let mut all = ports(&a);
    all.extend(ports(&b));
    // Both hold their ports now; then they destroy their ids.
    std::fs::write(socket.with_extension("go"), b"").unwrap();
    assert_eq!(all.len(), 400);
    assert!(all.iter().all(|p| *p != 0));
    let mut u = all.clone();
    u.sort_unstable();
    u.dedup();
    assert_eq!(u.len(), all.len(), "a port was handed out twice");
    a.expect("@destroyed", Duration::from_secs(10));
    b.expect("@destroyed", Duration::from_secs(10));
    // Another process binds each freed port explicitly at once: the
    // releases (one-way, on each process's own connections) run before
    // a conflicting bind is answered.
    let other = HostPorts::connect_at(&socket).unwrap();
    let ip: IpAddr = net::ip(5).parse().unwrap();
    for (k, p) in all.iter().enumerate() {
        let bd = Binding::plain(ip, k as u64);
        assert_eq!(other.bind(port_space::TCP, *p, bd), Ok(*p), "port {p}");
    }
    assert_eq!(bound(&svc), all.len(), "bindings of the destroyed ids left");
    drop(other);
    // Killed (still holding their unused leases): nothing left.
    drop(a);
    drop(b);
    assert!(
        within(Duration::from_secs(2), || svc.rdma_ports() == (0, 0)),
        "left behind: {:?}",
        svc.rdma_ports()
    );
}

/// Ids destroyed right after `rdma_resolve_addr` returned, before their
/// ports came: the ports are released when they come.
#[test]
fn an_id_destroyed_before_its_port_came_leaves_no_port() {
    let (socket, svc) = start_service_with("early");
    let addr: SocketAddr = SocketAddr::from((net::addr(6), 7471));
    let p = Proc::spawn(&socket, "resolve-destroy", addr, false);
    p.expect("@done", Duration::from_secs(30));
    assert!(
        within(Duration::from_secs(2), || bound(&svc) == 0),
        "bindings left: {:?}",
        svc.rdma_ports()
    );
    p.finish();
}

/// Lets a `resolve-hung` process go on to its step `n`.
fn go(socket: &Path, n: u32) {
    std::fs::write(socket.with_extension(format!("go{n}")), b"").unwrap();
}

/// The service a `resolve-hung` process uses is a process of its own
/// (`service` role), stopped and continued between the client's steps.
#[test]
fn a_hung_service_times_resolves_and_binds_out() {
    let dir = std::env::temp_dir().join(format!("ibcm-host-ports-{}-hung", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let socket = dir.join("ibcmd.sock");
    let addr: SocketAddr = SocketAddr::from((net::addr(9), 7491));
    let svc = Proc::spawn(&socket, "service", addr, false);
    svc.expect("@serving", Duration::from_secs(30));
    let c = Proc::spawn_env(
        &socket,
        "resolve-hung",
        addr,
        false,
        &[("IBCM_SERVICE_TIMEOUT_MS", "1000")],
    );
    c.expect("@ready", Duration::from_secs(30));
    stopped::signal(svc.child.id(), libc::SIGSTOP);
    go(&socket, 1);
    c.expect("@timed-out", Duration::from_secs(30));
    stopped::signal(svc.child.id(), libc::SIGCONT);
    go(&socket, 2);
    c.expect("@late-dropped", Duration::from_secs(30));
    stopped::signal(svc.child.id(), libc::SIGSTOP);
    go(&socket, 3);
    c.expect("@bind-timed-out", Duration::from_secs(30));
    stopped::signal(svc.child.id(), libc::SIGCONT);
    go(&socket, 4);
    c.expect("@bound", Duration::from_secs(30));
    c.finish();
    let _ = std::fs::remove_dir_all(&dir);
}

/// The bound a `resolve-busy` process waits in periods of.
const BUSY_BOUND_MS: u64 = 300;

/// A `resolve-busy` process behind a `slow-proxy` process in `mode` in
/// front of a service of this process: the resolves with `timeout_ms` 0
/// are answered after more than the bound, and resolve.
fn busy_resolves_resolve(test: &str, mode: &str, ip: u16) {
    let (socket, _svc) = start_service_with(test);
    let proxy_socket = socket.with_file_name("proxy.sock");
    let addr: SocketAddr = SocketAddr::from((net::addr(ip), 7700 + ip));
    let bound = BUSY_BOUND_MS.to_string();
    let proxy = Proc::spawn_env(
        &proxy_socket,
        "slow-proxy",
        addr,
        false,
        &[
            ("PROXY_TO", socket.to_str().unwrap()),
            ("PROXY_MODE", mode),
            ("IBCM_SERVICE_TIMEOUT_MS", &bound),
        ],
    );
    proxy.expect("@serving", Duration::from_secs(30));
    let c = Proc::spawn_env(
        &proxy_socket,
        "resolve-busy",
        addr,
        false,
        &[("IBCM_SERVICE_TIMEOUT_MS", &bound)],
    );
    c.expect("@ready", Duration::from_secs(30));
    std::fs::write(proxy_socket.with_extension("slow"), b"").unwrap();
    go(&proxy_socket, 1);
    c.expect("@resolved", Duration::from_secs(60));
    c.finish();
}

/// A service whose answers to pipelined binds come one by one, slowly
/// (records arriving on the port connection): every `rdma_resolve_addr`
/// with `timeout_ms` 0 resolves, though some wait more than the bound.
#[test]
fn resolves_without_a_timeout_wait_for_a_service_answering_slowly() {
    busy_resolves_resolve("busy-records", "records", 14);
}

/// A service that burns CPU for 2.5 bounds before it answers a pipelined
/// bind (nothing arrives meanwhile): the resolves with `timeout_ms` 0
/// resolve.
#[test]
fn resolves_without_a_timeout_wait_for_a_service_burning_cpu() {
    busy_resolves_resolve("busy-cpu", "cpu", 15);
}

/// A process that holds a port and floods its connections without pause
/// (one the service keeps up with, one whose replies it never reads, so
/// its queue never drains) cannot hold another process's bind of that
/// port: the bind is answered `EADDRINUSE` (after `SETTLE_MAX`), the
/// expired wait counted, and the service goes on serving others.
#[test]
fn a_flooding_holder_cannot_hold_another_s_bind() {
    let (socket, svc) = start_service_with("flood");
    let addr: SocketAddr = SocketAddr::from((net::addr(13), 7660));
    let p = Proc::spawn(&socket, "flood-holder", addr, false);
    p.expect("@flooding", Duration::from_secs(30));
    let expired = svc.settle_expired();
    let other = std::sync::Arc::new(HostPorts::connect_at(&socket).unwrap());
    let bd = Binding::plain(addr.ip(), 1);
    let (tx, rx) = mpsc::channel();
    let o = other.clone();
    std::thread::spawn(move || {
        let _ = tx.send(o.bind(port_space::TCP, addr.port(), bd));
    });
    // Generous: the bound is SETTLE_MAX (200 ms).
    let r = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("a bind of the flooding holder's port not answered within 20 s");
    assert_eq!(r, Err(host::EADDRINUSE));
    assert_eq!(
        svc.settle_expired(),
        expired + 1,
        "the bind did not wait out the bound"
    );
    // Others are served: another port binds, the flood goes on.
    assert_eq!(
        other.bind(port_space::TCP, addr.port() + 1, bd),
        Ok(addr.port() + 1)
    );
    assert!(
        service::query_stat(&socket).is_ok(),
        "the service stopped serving"
    );
    let mut p = p;
    assert!(
        p.child.try_wait().unwrap().is_none(),
        "the flooding holder is gone"
    );
}

/// `PORT_LEASE` through a raw connection: bad counts refused; a leased
/// port is bound by another process's explicit bind (the lease revoked),
/// and the holder's ephemeral binds take its other leased ports.
#[test]
fn leased_ports_yield_to_explicit_binds() {
    let (socket, svc) = start_service_with("lease");
    let ip: IpAddr = net::ip(7).parse().unwrap();
    let bd = |owner| Binding::plain(ip, owner);
    let raw_fd = ipc::sock::connect(&socket).unwrap();
    let lease = |n: u32, extra: &[u8], seq| {
        let mut w = ipc::Writer(Vec::new());
        w.put(&port_space::TCP).put(&n);
        w.0.extend_from_slice(extra);
        raw_reply(&raw_fd, ipc::op::PORT_LEASE, seq, &w.0)
    };
    assert_eq!(lease(0, &[], 2).0, -libc::EINVAL);
    assert_eq!(lease(host::MAX_LEASE + 1, &[], 3).0, -libc::EINVAL);
    assert_eq!(lease(3, &[0], 4).0, -libc::EPROTO);
    assert_eq!(svc.rdma_ports(), (0, 0));
    let (err, body) = lease(3, &[], 5);
    assert_eq!(err, 0);
    let leased: Box<[u16]> = ipc::Reader::new(&body).get().unwrap();
    assert_eq!(leased.len(), 3);
    assert_eq!(svc.rdma_ports(), (3, 3));
    // Another process's explicit bind of a leased port: bound.
    let other = HostPorts::connect_at(&socket).unwrap();
    assert_eq!(other.bind(port_space::TCP, leased[0], bd(1)), Ok(leased[0]));
    assert_eq!(svc.rdma_ports(), (3, 2));
    // The holder's ephemeral binds: its two other leased ports.
    let mut bind0 = ipc::Writer(Vec::new());
    host::put_bind(&mut bind0, port_space::TCP, 0, &bd(2));
    let mut got = Vec::new();
    for seq in 6..8 {
        let (err, body) = raw_reply(&raw_fd, ipc::op::PORT_BIND, seq, &bind0.0);
        assert_eq!(err, 0);
        got.push(ipc::Reader::new(&body).get::<u16>().unwrap());
    }
    got.sort_unstable();
    let mut rest = leased[1..].to_vec();
    rest.sort_unstable();
    assert_eq!(got, rest);
    assert_eq!(svc.rdma_ports(), (3, 0));
    // Bound now: another process's explicit bind is refused.
    assert_eq!(
        other.bind(port_space::TCP, leased[1], bd(3)),
        Err(host::EADDRINUSE)
    );
}

/// One raw request on `fd`: the errno of its reply and the reply's body
/// after its public part.
fn raw_reply(fd: &std::os::fd::OwnedFd, opc: u16, seq: u64, body: &[u8]) -> (i32, Vec<u8>) {
    let (err, rest) = request(fd, opc, seq, body);
    let mut r = ipc::Reader::new(&rest);
    let _: ipc::Public = r.get().unwrap();
    (err, rest[rest.len() - r.remaining()..].to_vec())
}

// ---------------------------------------------------------------------------
// The roles (run in the child processes)
// ---------------------------------------------------------------------------

fn report(what: &str) {
    let mut o = std::io::stdout().lock();
    writeln!(o, "@{what}").unwrap();
    o.flush().unwrap();
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// The next event of `ch` within 5 s (not acked).
fn next_raw(ch: *mut RdmaEventChannel) -> *mut RdmaCmEvent {
    let mut p = libc::pollfd {
        fd: unsafe { (*ch).fd },
        events: libc::POLLIN,
        revents: 0,
    };
    assert_eq!(unsafe { libc::poll(&mut p, 1, 5000) }, 1, "no event in 5 s");
    let mut ev = std::ptr::null_mut();
    assert_eq!(unsafe { rdma_get_cm_event(ch, &mut ev) }, 0);
    ev
}

/// The next event of `ch` within 5 s, which must be `kind`.
fn expect(ch: *mut RdmaEventChannel, kind: R) -> *mut RdmaCmEvent {
    let ev = next_raw(ch);
    let (k, s) = unsafe { ((*ev).event, (*ev).status) };
    assert_eq!((k, s), (kind as i32, 0), "got {:?}", unsafe {
        std::ffi::CStr::from_ptr(rdma_event_str(k))
    });
    ev
}

fn new_id(ch: *mut RdmaEventChannel, ps: u16) -> *mut RdmaCmId {
    let mut id = std::ptr::null_mut();
    assert_eq!(
        unsafe { rdma_create_id(ch, &mut id, std::ptr::null_mut(), ps as i32) },
        0
    );
    id
}

fn bind(id: *mut RdmaCmId, a: SocketAddr) -> Result<(), i32> {
    let mut s = sockaddr(a);
    if unsafe { rdma_bind_addr(id, (&raw mut s).cast()) } == 0 {
        Ok(())
    } else {
        Err(errno())
    }
}

/// Listens on the address, accepts one connection, then waits to be
/// killed.
fn serve(addr: SocketAddr) {
    let ch = rdma_create_event_channel();
    let l = new_id(ch, port_space::TCP);
    bind(l, addr).unwrap();
    assert_eq!(rdma_listen(l, 4), 0);
    report("listening");
    let ev = expect(ch, R::ConnectRequest);
    let child = unsafe { (*ev).id };
    assert_eq!(rdma_ack_cm_event(ev), 0);
    let mut cp = conn_param(b"", 0x99);
    assert_eq!(unsafe { rdma_accept(child, &mut cp) }, 0);
    assert_eq!(rdma_ack_cm_event(expect(ch, R::Established)), 0);
    report("established");
    loop {
        std::thread::sleep(Duration::from_secs(60));
    }
}

fn bind_taken(addr: SocketAddr) {
    let ch = rdma_create_event_channel();
    let id = new_id(ch, port_space::TCP);
    assert_eq!(bind(id, addr), Err(libc::EADDRINUSE));
    let any = SocketAddr::new(IpAddr::from([0, 0, 0, 0]), addr.port());
    assert_eq!(bind(id, any), Err(libc::EADDRINUSE));
    // The same port of another port space is free.
    let udp = new_id(ch, port_space::UDP);
    assert_eq!(bind(udp, addr), Ok(()));
    assert_eq!(rdma_destroy_id(udp), 0);
    assert_eq!(rdma_destroy_id(id), 0);
}

/// (From the address in `HOST_PORTS_SRC` when set, else as routed.)
fn connect(addr: SocketAddr) {
    let ch = rdma_create_event_channel();
    let id = new_id(ch, port_space::TCP);
    let mut dst = sockaddr(addr);
    let mut src = std::env::var("HOST_PORTS_SRC")
        .ok()
        .map(|ip| sockaddr(SocketAddr::new(ip.parse().unwrap(), 0)));
    let srcp = src.as_mut().map_or(std::ptr::null_mut(), |s| {
        (s as *mut libc::sockaddr_in).cast()
    });
    assert_eq!(
        unsafe { rdma_resolve_addr(id, srcp, (&raw mut dst).cast(), 1000) },
        0
    );
    assert_eq!(rdma_ack_cm_event(expect(ch, R::AddrResolved)), 0);
    // The ephemeral source port is the host's: bound in the service.
    assert_ne!(rdma_get_src_port(id), 0);
    assert_eq!(rdma_resolve_route(id, 1000), 0);
    assert_eq!(rdma_ack_cm_event(expect(ch, R::RouteResolved)), 0);
    let mut cp = conn_param(b"", 0x99);
    assert_eq!(unsafe { rdma_connect(id, &mut cp) }, 0);
    assert_eq!(rdma_ack_cm_event(expect(ch, R::ConnectResponse)), 0);
    assert_eq!(rdma_establish(id), 0);
    report("established");
}

fn bind_retry(addr: SocketAddr) {
    let ch = rdma_create_event_channel();
    let id = new_id(ch, port_space::TCP);
    assert_eq!(bind(id, addr), Err(libc::EADDRINUSE));
    report("in-use");
    let t = Instant::now();
    loop {
        match bind(id, addr) {
            Ok(()) => break,
            Err(e) => assert_eq!(e, libc::EADDRINUSE),
        }
        assert!(t.elapsed() < Duration::from_secs(5), "never free");
        std::thread::sleep(Duration::from_millis(5));
    }
    report("bound");
    assert_eq!(rdma_listen(id, 1), 0, "listen: errno {}", errno());
}

/// A port below 1024: bound if this process has CAP_NET_BIND_SERVICE,
/// else `EACCES` from the service (the library does not check it itself
/// when the service holds the table).
fn bind_privileged(addr: SocketAddr) {
    let ch = rdma_create_event_channel();
    let id = new_id(ch, port_space::TCP);
    let want = if ibcm_rdmacm::ports::may_bind_privileged() {
        Ok(())
    } else {
        Err(libc::EACCES)
    };
    assert_eq!(bind(id, addr), want);
    report(if want.is_ok() { "bound" } else { "refused" });
}

/// 200 ids resolved at once (implicit ephemeral binds at the address:
/// the wildcard's routing-table source, 127.0.0.1, would be a device the
/// other tests' services open too): their ports
/// reported, then (when the test says so) destroyed; then a while alive.
fn resolve_burst(addr: SocketAddr) {
    let ch = rdma_create_event_channel();
    let (mut src, mut dst) = (sockaddr(SocketAddr::new(addr.ip(), 0)), sockaddr(addr));
    let ids: Vec<*mut RdmaCmId> = (0..200).map(|_| new_id(ch, port_space::TCP)).collect();
    for id in &ids {
        let r =
            unsafe { rdma_resolve_addr(*id, (&raw mut src).cast(), (&raw mut dst).cast(), 1000) };
        assert_eq!(r, 0, "errno {}", errno());
    }
    for _ in &ids {
        assert_eq!(rdma_ack_cm_event(expect(ch, R::AddrResolved)), 0);
    }
    let ports: Vec<String> = ids
        .iter()
        .map(|id| rdma_get_src_port(*id).to_string())
        .collect();
    report(&format!("ports {}", ports.join(",")));
    let go = std::env::var(GO).unwrap();
    let t = Instant::now();
    while !Path::new(&go).exists() {
        assert!(t.elapsed() < Duration::from_secs(60), "never told to go on");
        std::thread::sleep(Duration::from_millis(5));
    }
    for id in ids {
        assert_eq!(rdma_destroy_id(id), 0);
    }
    report("destroyed");
    std::thread::sleep(Duration::from_secs(60));
}

/// 200 times: an id resolved and destroyed at once, before its port can
/// have come; then a while alive.
fn resolve_destroy(addr: SocketAddr) {
    let ch = rdma_create_event_channel();
    let (mut src, mut dst) = (sockaddr(SocketAddr::new(addr.ip(), 0)), sockaddr(addr));
    for _ in 0..200 {
        let id = new_id(ch, port_space::TCP);
        let r =
            unsafe { rdma_resolve_addr(id, (&raw mut src).cast(), (&raw mut dst).cast(), 1000) };
        assert_eq!(r, 0, "errno {}", errno());
        assert_eq!(rdma_destroy_id(id), 0);
    }
    report("done");
    std::thread::sleep(Duration::from_secs(3));
}

/// Binds the address through one `HostPorts` (the port table's client),
/// forks; the child reports its pid, binds the next port through the same
/// `HostPorts` (a connection of its own: the parent's is the parent's) and
/// exits; the parent sees its own port still its own and the child's
/// free once the child is gone. (Through librdmacm a child gets a fresh
/// port space anyway, `rdmacm/src/fork.rs`: this is the table's own
/// check.)
fn fork_bind(addr: SocketAddr) {
    let socket = PathBuf::from(std::env::var("IBCM_SERVICE_SOCKET").unwrap());
    let hp = HostPorts::connect_at(&socket).unwrap();
    let (ip, port) = (addr.ip(), addr.port());
    let b = |owner| Binding::plain(ip, owner);
    assert_eq!(hp.bind(port_space::TCP, port, b(1)), Ok(port));
    std::io::stdout().lock().flush().unwrap();
    // SAFETY: the child makes port-table calls (a connection and a
    // reader thread of its own) and leaves with `_exit`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", errno());
    if pid == 0 {
        report(&format!("child {}", std::process::id()));
        let r = hp.bind(port_space::TCP, port + 1, b(2));
        if r == Ok(port + 1) {
            report("child-bound");
        } else {
            report(&format!("child-bind-failed {r:?}"));
        }
        // SAFETY: leaves the child without running the parent's
        // destructors; its connection ends with it.
        unsafe { libc::_exit(i32::from(r.is_err())) };
    }
    let mut st = 0;
    // SAFETY: waits for this process's own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut st, 0) }, pid);
    assert!(libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0, "{st}");
    // The parent's port is still its own (bound on its connection, which
    // the child did not touch); the child's is free.
    assert_eq!(
        hp.bind(port_space::TCP, port, b(3)),
        Err(ibcm::api::Errno(libc::EADDRINUSE))
    );
    assert!(
        within(Duration::from_secs(5), || hp.bind(
            port_space::TCP,
            port + 1,
            b(4)
        ) == Ok(port + 1)),
        "the child's port stayed bound after it exited"
    );
    report("parent-still-bound");
}

/// A CM service on `IBCM_SERVICE_SOCKET` in this process, until killed.
fn serve_service() {
    let socket = PathBuf::from(std::env::var("IBCM_SERVICE_SOCKET").unwrap());
    let listener = service::bind(&socket).unwrap();
    let svc = Service::new(Options {
        socket,
        idle_exit: None,
        limits: Limits::default(),
    });
    std::thread::spawn(move || svc.run(listener));
    report("serving");
    std::thread::sleep(Duration::from_secs(120));
}

/// Binds the address (port given) and listens, then (told to) destroys
/// the id and reports; then a while alive.
fn listen_destroy(addr: SocketAddr) {
    let ch = rdma_create_event_channel();
    let l = new_id(ch, port_space::TCP);
    bind(l, addr).unwrap();
    assert_eq!(rdma_listen(l, 4), 0);
    report("listening");
    wait_go(1);
    assert_eq!(rdma_destroy_id(l), 0);
    report("destroyed");
    report("alive");
    std::thread::sleep(Duration::from_secs(60));
}

/// Binds the address's port on a raw connection and reports the
/// connection's `PORT_TOKEN`; told to, releases the binding with it from a
/// second connection of its own and reports the reply's errno.
fn token_holder(addr: SocketAddr) {
    let socket = PathBuf::from(std::env::var("IBCM_SERVICE_SOCKET").unwrap());
    let fd = ipc::sock::connect(&socket).unwrap();
    let mut b = ipc::Writer(Vec::new());
    host::put_bind(
        &mut b,
        port_space::TCP,
        addr.port(),
        &Binding::plain(addr.ip(), 1),
    );
    assert_eq!(raw(&fd, ipc::op::PORT_BIND, 1, &b.0), 0);
    let (err, tok) = request(&fd, ipc::op::PORT_TOKEN, 2, &[]);
    assert_eq!(err, 0);
    let mut r = ipc::Reader::new(&tok);
    let _: ipc::Public = r.get().unwrap();
    let (holder, secret): (u64, u64) = (r.get().unwrap(), r.get().unwrap());
    report(&format!("token {holder} {secret}"));
    wait_go(1);
    let other = ipc::sock::connect(&socket).unwrap();
    let mut w = ipc::Writer(Vec::new());
    w.put(&holder)
        .put(&secret)
        .put(&port_space::TCP)
        .put(&addr.port())
        .put(&1u64);
    let err = raw(&other, ipc::op::PORT_RELEASE_BY, 1, &w.0);
    report(&format!("released {err}"));
    std::thread::sleep(Duration::from_secs(60));
}

/// Waits for the test's `go(n)`.
fn wait_go(n: u32) {
    let go = PathBuf::from(std::env::var(GO).unwrap()).with_extension(format!("go{n}"));
    let t = Instant::now();
    while !go.exists() {
        assert!(t.elapsed() < Duration::from_secs(60), "never told to go on");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The next event of `ch` within 5 s: its type and status.
fn next_event(ch: *mut RdmaEventChannel) -> (i32, i32) {
    let ev = next_raw(ch);
    let r = unsafe { ((*ev).event, (*ev).status) };
    assert_eq!(rdma_ack_cm_event(ev), 0);
    r
}

/// `rdma_resolve_addr` of an id from `addr`'s IP (any port) to `addr`,
/// with its `timeout_ms`.
fn resolver(addr: SocketAddr) -> impl FnMut(*mut RdmaCmId, i32) -> i32 {
    let (mut src, mut dst) = (sockaddr(SocketAddr::new(addr.ip(), 0)), sockaddr(addr));
    move |id, ms| unsafe { rdma_resolve_addr(id, (&raw mut src).cast(), (&raw mut dst).cast(), ms) }
}

/// `n` resolves on `ch` that succeed, each id destroyed after: the port
/// leases they take stay with the process for the resolves that follow.
fn warm_leases(
    ch: *mut RdmaEventChannel,
    resolve: &mut impl FnMut(*mut RdmaCmId, i32) -> i32,
    n: usize,
) {
    for _ in 0..n {
        let id = new_id(ch, port_space::TCP);
        assert_eq!(resolve(id, 2000), 0, "errno {}", errno());
        assert_eq!(rdma_ack_cm_event(expect(ch, R::AddrResolved)), 0);
        assert_eq!(rdma_destroy_id(id), 0);
    }
}

/// Against a service the test stops and continues (steps `go1`..`go4`).
fn resolve_hung(addr: SocketAddr) {
    let ch = rdma_create_event_channel();
    let mut resolve = resolver(addr);
    // Five resolves while the service runs: the port leases they take
    // (1, 1, 2, then 4 ports: each lease is as large as the ephemeral
    // binds made so far) leave three leased ports, so the resolve below
    // is pipelined (no lease round trip) and waits only for its bind.
    warm_leases(ch, &mut resolve, 5);
    report("ready");
    // 1. The service is stopped: ADDR_ERROR -ETIMEDOUT after timeout_ms
    //    (never before it), nothing more.
    wait_go(1);
    let id = new_id(ch, port_space::TCP);
    let t = Instant::now();
    assert_eq!(resolve(id, 300), 0, "errno {}", errno());
    assert_eq!(next_event(ch), (R::AddrError as i32, -libc::ETIMEDOUT));
    assert!(
        t.elapsed() >= Duration::from_millis(300),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(ibcm_rdmacm::id::addr_timeouts(), 1);
    // With `timeout_ms` 0 the wait is the service's: a stopped service is
    // not a busy one, ADDR_ERROR -ETIMEDOUT after one bound (1 s here),
    // not after two (a service that makes no progress) or the ceiling.
    // Which look ended it is counted (not timed: a loaded machine may
    // deliver the event late): one wait given up as stopped.
    let stopped = ibcm::api::service_stopped_waits();
    let id0 = new_id(ch, port_space::TCP);
    let t = Instant::now();
    assert_eq!(resolve(id0, 0), 0, "errno {}", errno());
    assert_eq!(next_event(ch), (R::AddrError as i32, -libc::ETIMEDOUT));
    let took = t.elapsed();
    assert!(took >= Duration::from_millis(1000), "{took:?}");
    assert_eq!(ibcm::api::service_stopped_waits(), stopped + 1, "{took:?}");
    assert_eq!(ibcm_rdmacm::id::addr_timeouts(), 2);
    report("timed-out");
    // 2. Continued: its answer comes late, is dropped (no event), and the
    //    id resolves again.
    wait_go(2);
    let t = Instant::now();
    while ibcm_rdmacm::id::late_addr_answers() < 2 {
        assert!(t.elapsed() < Duration::from_secs(10), "no late answer");
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut p = libc::pollfd {
        fd: unsafe { (*ch).fd },
        events: libc::POLLIN,
        revents: 0,
    };
    assert_eq!(
        unsafe { libc::poll(&mut p, 1, 200) },
        0,
        "an event after the timeout's"
    );
    assert_eq!(resolve(id, 2000), 0, "errno {}", errno());
    assert_eq!(rdma_ack_cm_event(expect(ch, R::AddrResolved)), 0);
    assert_eq!(ibcm_rdmacm::id::late_addr_answers(), 2);
    report("late-dropped");
    // 3. Stopped again: a synchronous round trip (an explicit bind) fails
    //    with ETIMEDOUT within the service timeout (1 s here).
    wait_go(3);
    let other = new_id(ch, port_space::TCP);
    let fixed = SocketAddr::new(addr.ip(), addr.port() + 1);
    let t = Instant::now();
    assert_eq!(bind(other, fixed), Err(libc::ETIMEDOUT));
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    report("bind-timed-out");
    // 4. Continued: a new bind works (a new connection; the port the
    //    timed-out bind may have taken goes with the old one).
    wait_go(4);
    let t = Instant::now();
    loop {
        match bind(other, fixed) {
            Ok(()) => break,
            Err(e) => assert_eq!(e, libc::EADDRINUSE),
        }
        assert!(t.elapsed() < Duration::from_secs(10), "never bound");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(rdma_destroy_id(other), 0);
    assert_eq!(rdma_destroy_id(id), 0);
    assert_eq!(rdma_destroy_id(id0), 0);
    report("bound");
}

/// The records of a message (a `BATCH`'s, or the message itself).
fn records(msg: &[u8]) -> Vec<&[u8]> {
    let (h, r) = ipc::Header::parse(msg).unwrap();
    if h.op == ipc::op::BATCH {
        ipc::unbatch(&msg[msg.len() - r.remaining()..]).unwrap()
    } else {
        vec![msg]
    }
}

/// A proxy at `IBCM_SERVICE_SOCKET` in front of the service at
/// `PROXY_TO`: every message passed on both ways, until the file
/// `<socket>.slow` exists; from then on a message of the service that
/// answers a `PORT_BIND` is slowed (`PROXY_MODE`): `cpu` — the first such
/// is held while two threads of this process burn CPU for 2.5 bounds, nothing
/// passing meanwhile; `records` — each of its records is passed as a
/// message of its own, 0.2 bound after the one before (a busy service
/// answering a burst one by one). Until killed.
fn slow_proxy() {
    let at = PathBuf::from(std::env::var("IBCM_SERVICE_SOCKET").unwrap());
    let to = PathBuf::from(std::env::var("PROXY_TO").unwrap());
    let mode = std::env::var("PROXY_MODE").unwrap();
    let slow = at.with_extension("slow");
    let listener = ipc::sock::listen(&at, |_| Ok(())).unwrap();
    report("serving");
    let bound = Duration::from_millis(BUSY_BOUND_MS);
    let burnt_once = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    loop {
        let c = std::sync::Arc::new(ipc::sock::accept(&listener).unwrap());
        let s = std::sync::Arc::new(ipc::sock::connect(&to).unwrap());
        let (c2, s2) = (c.clone(), s.clone());
        std::thread::spawn(move || {
            let mut buf = vec![0u8; ipc::MAX_RECORD * 4];
            loop {
                match ipc::sock::recv(&c2, &mut buf) {
                    Ok(n) if n > 0 => {
                        if ipc::sock::send(&s2, &buf[..n]).is_err() {
                            return;
                        }
                    }
                    _ => {
                        ipc::sock::shutdown(&s2);
                        return;
                    }
                }
            }
        });
        let (slow, mode, burnt_once) = (slow.clone(), mode.clone(), burnt_once.clone());
        std::thread::spawn(move || {
            let mut buf = vec![0u8; ipc::MAX_RECORD * 4];
            loop {
                let n = match ipc::sock::recv(&s, &mut buf) {
                    Ok(n) if n > 0 => n,
                    _ => {
                        ipc::sock::shutdown(&c);
                        return;
                    }
                };
                let msg = &buf[..n];
                let binds = records(msg).iter().any(|r| {
                    ipc::Header::parse(r).unwrap().0.op == ipc::op::REPLY | ipc::op::PORT_BIND
                });
                let sent = if !binds || !slow.exists() {
                    ipc::sock::send(&c, msg)
                } else if mode == "cpu" {
                    if !burnt_once.swap(true, std::sync::atomic::Ordering::Relaxed) {
                        // Two threads: on a loaded host each gets its
                        // share of a CPU, the service's CPU time grows
                        // by twice that.
                        let other = std::thread::spawn(move || served::burn(bound * 5 / 2));
                        served::burn(bound * 5 / 2);
                        other.join().unwrap();
                    }
                    ipc::sock::send(&c, msg)
                } else {
                    records(msg).iter().try_for_each(|r| {
                        std::thread::sleep(bound / 5);
                        ipc::sock::send(&c, r)
                    })
                };
                if sent.is_err() {
                    return;
                }
            }
        });
    }
}

/// Behind a `slow-proxy` (`IBCM_SERVICE_TIMEOUT_MS` = `BUSY_BOUND_MS`):
/// once told, one `rdma_resolve_addr` with `timeout_ms` 1 (ADDR_ERROR
/// -ETIMEDOUT: the user's deadline) and twelve with `timeout_ms` 0, which
/// must all resolve, the last after more than the bound, with a busy
/// wait counted.
fn resolve_busy(addr: SocketAddr) {
    let ch = rdma_create_event_channel();
    let mut resolve = resolver(addr);
    // Seventeen resolves while the service answers at once: the leases
    // they take (1, 1, 2, 4, 8, 16 ports) leave fifteen leased ports, so
    // the thirteen below are pipelined without a lease round trip.
    warm_leases(ch, &mut resolve, 17);
    report("ready");
    wait_go(1);
    let busy = ibcm::api::service_busy_waits();
    let t = Instant::now();
    let user = new_id(ch, port_space::TCP);
    assert_eq!(resolve(user, 1), 0, "errno {}", errno());
    let ids: Vec<*mut RdmaCmId> = (0..12).map(|_| new_id(ch, port_space::TCP)).collect();
    for id in &ids {
        assert_eq!(resolve(*id, 0), 0, "errno {}", errno());
    }
    let mut resolved = 0;
    let mut user_timed_out = false;
    for _ in 0..13 {
        let ev = next_raw(ch);
        let (id, k, st) = unsafe { ((*ev).id, (*ev).event, (*ev).status) };
        assert_eq!(rdma_ack_cm_event(ev), 0);
        if id == user {
            assert_eq!((k, st), (R::AddrError as i32, -libc::ETIMEDOUT));
            user_timed_out = true;
        } else {
            assert!(ids.contains(&id));
            assert_eq!(
                (k, st),
                (R::AddrResolved as i32, 0),
                "a resolve with timeout_ms 0 failed after {:?}",
                t.elapsed()
            );
            resolved += 1;
        }
    }
    let took = t.elapsed();
    assert!(user_timed_out);
    assert_eq!(resolved, 12);
    // The test's point: the wait crossed the bound, and went on.
    assert!(took > Duration::from_millis(BUSY_BOUND_MS), "{took:?}");
    assert!(
        ibcm::api::service_busy_waits() > busy,
        "no busy wait counted"
    );
    assert_eq!(ibcm_rdmacm::id::addr_timeouts(), 1);
    for id in ids {
        assert_eq!(rdma_destroy_id(id), 0);
    }
    assert_eq!(rdma_destroy_id(user), 0);
    report("resolved");
}

/// Binds the address's port on a raw connection, then floods without
/// pause: that connection with `PORT_TOKEN` requests whose replies it
/// never reads (the service's thread for it soon blocks sending them: its
/// queue stays full), and a second connection with requests whose replies
/// a thread reads. Reports once the first has stalled; then until killed.
fn flood_holder(addr: SocketAddr) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    let socket = PathBuf::from(std::env::var("IBCM_SERVICE_SOCKET").unwrap());
    let fd = Arc::new(ipc::sock::connect(&socket).unwrap());
    let mut b = ipc::Writer(Vec::new());
    host::put_bind(
        &mut b,
        port_space::TCP,
        addr.port(),
        &Binding::plain(addr.ip(), 1),
    );
    assert_eq!(raw(&fd, ipc::op::PORT_BIND, 1, &b.0), 0);
    let token = |seq: u64| {
        ipc::Header {
            op: ipc::op::PORT_TOKEN,
            seq,
            handle: 0,
        }
        .record()
        .into_bytes()
    };
    let drained = Arc::new(ipc::sock::connect(&socket).unwrap());
    let d = drained.clone();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; ipc::MAX_RECORD];
        while ipc::sock::recv(&d, &mut buf).is_ok_and(|n| n > 0) {}
    });
    std::thread::spawn(move || {
        for seq in 1.. {
            if ipc::sock::send(&drained, &token(seq)).is_err() {
                return;
            }
        }
    });
    let sent = Arc::new(AtomicU64::new(0));
    let n = sent.clone();
    let unread = fd.clone();
    std::thread::spawn(move || {
        for seq in 2.. {
            if ipc::sock::send(&fd, &token(seq)).is_err() {
                return;
            }
            n.fetch_add(1, Relaxed);
        }
    });
    // Stalled: no send went through and no reply came for 500 ms — the
    // service's thread for that connection neither reads nor sends: it is
    // blocked sending a reply nobody reads, and stays so.
    let t = Instant::now();
    let look = || (sent.load(Relaxed), ipc::sock::queued(&unread).unwrap());
    loop {
        let before = look();
        std::thread::sleep(Duration::from_millis(500));
        if before.0 > 0 && look() == before {
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "never stalled");
    }
    report("flooding");
    std::thread::sleep(Duration::from_secs(120));
}

/// The entry of the child processes (`HOST_PORTS_ROLE`); not a test of
/// its own.
#[test]
#[ignore = "a child process of the tests above"]
fn child() {
    let role = std::env::var(ROLE).expect("run by the tests above");
    let addr: SocketAddr = std::env::var(ADDR).unwrap().parse().unwrap();
    match role.as_str() {
        "serve" => serve(addr),
        "bind-taken" => bind_taken(addr),
        "connect" => connect(addr),
        "bind-retry" => bind_retry(addr),
        "bind-privileged" => bind_privileged(addr),
        "resolve-burst" => resolve_burst(addr),
        "resolve-destroy" => resolve_destroy(addr),
        "service" => serve_service(),
        "resolve-hung" => resolve_hung(addr),
        "listen-destroy" => listen_destroy(addr),
        "token-holder" => token_holder(addr),
        "slow-proxy" => slow_proxy(),
        "resolve-busy" => resolve_busy(addr),
        "flood-holder" => flood_holder(addr),
        "fork-bind" => fork_bind(addr),
        r => panic!("unknown role {r}"),
    }
}
