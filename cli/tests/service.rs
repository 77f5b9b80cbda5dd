//! The host CM service end to end: `ibcm daemon --foreground` on a private
//! socket, `ibcm listen` / `ibcm connect` processes (and this test
//! process) sharing one `soft:` address through it.
//!
//! * two processes on one address: a second listener on the same service
//!   ID gets -EBUSY, connects from other processes reach the listener
//!   (loopback through the service, no wire);
//! * a killed listener's service ID is free again and its peers are
//!   rejected; a client killed while connected gets its peer a DREQ, one
//!   killed mid-connect a REJ, each within a second, and the service's id
//!   count returns to where it was;
//! * a hostile local client (garbage, truncated records, another
//!   process's handles) gets errors while the others keep working;
//! * a killed service: calls fail with -ENODEV (no hang), a restarted
//!   service serves new opens;
//! * a stopped (hung) service: a round trip and an open fail with
//!   -ETIMEDOUT within the service timeout, the connection is declared
//!   broken (later calls -ENODEV at once, an id waiting for a peer gets
//!   its error event), and once continued the service serves new opens.

mod common;

use common::{TempDir, net, served, stopped};
use ibcm::api::{Device, Errno, EventType, ReqParams, RustHandler, qp_type};
use ibcm::ipc::{self, Header, op, sock};
use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn ibcm() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ibcm"))
}

/// `ibcm daemon --foreground` on a socket of its own; killed when dropped.
struct Daemon {
    child: Child,
    socket: PathBuf,
    _dir: TempDir,
}

impl Daemon {
    fn start(test: &str) -> Daemon {
        let dir = TempDir::new("service", test);
        let socket = dir.0.join("ibcmd.sock");
        Daemon::at(socket, dir)
    }

    fn at(socket: PathBuf, dir: TempDir) -> Daemon {
        Daemon::with_env(socket, dir, &[])
    }

    fn with_env(socket: PathBuf, dir: TempDir, env: &[(&str, &std::ffi::OsStr)]) -> Daemon {
        let child = ibcm()
            .args(["daemon", "--foreground", "--socket"])
            .arg(&socket)
            .env("IBCM_LOG", "info")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.0.join("daemon.log")).unwrap())
            .spawn()
            .unwrap();
        let t = Instant::now();
        while sock::connect(&socket).is_err() {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "the daemon did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Daemon {
            child,
            socket,
            _dir: dir,
        }
    }

    /// `ibcm ARGS` as a client of this service, in engine mode (the
    /// tests named `forward_*` and those taking a mode set theirs).
    fn ibcm(&self, args: &[&str]) -> Command {
        let mut c = ibcm();
        c.args(args)
            .env("IBCM_SERVICE", "required")
            .env("IBCM_SERVICE_MODE", "engine")
            .env("IBCM_SERVICE_SOCKET", &self.socket)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }

    /// `ibcm connect --device DEV --dest DEST MORE…` through this daemon.
    fn connect(&self, dev: &str, dest: &str, more: &[&str]) -> Command {
        let mut args = vec!["connect", "--device", dev, "--dest", dest];
        args.extend_from_slice(more);
        self.ibcm(&args)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self._dir.0.join("daemon.log")).unwrap_or_default()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The child's stdout, collected as it comes by a thread of its own.
fn collect_stdout(child: &mut Child) -> Arc<Mutex<String>> {
    let mut so = child.stdout.take().unwrap();
    let out = Arc::new(Mutex::new(String::new()));
    let o = out.clone();
    std::thread::spawn(move || {
        use std::io::Read;
        let mut b = [0u8; 4096];
        while let Ok(n) = so.read(&mut b) {
            if n == 0 {
                break;
            }
            o.lock().unwrap().push_str(&text(&b[..n]));
        }
    });
    out
}

/// A listener process whose stdout is collected as it comes.
struct Listener {
    child: Child,
    out: Arc<Mutex<String>>,
}

impl Listener {
    fn spawn(d: &Daemon, args: &[&str]) -> Listener {
        let mut child = d.ibcm(&[&["listen"], args].concat()).spawn().unwrap();
        let out = collect_stdout(&mut child);
        Listener { child, out }
    }

    /// Waits until the listener has said it listens (its `listen` returned:
    /// through the service, the listen is registered there).
    fn wait_listening(&self) -> bool {
        served::wait_for(Duration::from_secs(10), || {
            self.out().contains("listening on")
        })
    }

    fn out(&self) -> String {
        self.out.lock().unwrap().clone()
    }
}

/// A listener and, on the same address, a second listener (`-EBUSY`) and
/// two connecting processes, all in service mode `mode`; `listening`
/// runs once the second listener was refused, the first still up.
fn share_one_address(d: &Daemon, mode: &str, host: u16, listening: impl FnOnce(&Listener)) {
    let dev = &net::soft(host);
    let mut child = d
        .ibcm(&["listen", "--device", dev, "--count", "2", "--timeout", "20"])
        .env("IBCM_SERVICE_MODE", mode)
        .spawn()
        .unwrap();
    let out = collect_stdout(&mut child);
    let mut l = Listener { child, out };
    assert!(l.wait_listening(), "{}", l.out());
    // The service ID is the first listener's, host-wide.
    let second = d
        .ibcm(&["listen", "--device", dev, "--timeout", "2"])
        .env("IBCM_SERVICE_MODE", mode)
        .output()
        .unwrap();
    assert_eq!(second.status.code(), Some(1));
    assert!(
        text(&second.stderr).contains("EBUSY"),
        "{}",
        text(&second.stderr)
    );
    listening(&l);
    // Two other processes on the same address connect to it, at once.
    let c: Vec<Child> = (0..2)
        .map(|_| {
            d.connect(dev, &net::ip(host), &["--timeout", "10"])
                .env("IBCM_SERVICE_MODE", mode)
                .spawn()
                .unwrap()
        })
        .collect();
    for c in c {
        let o = c.wait_with_output().unwrap();
        assert!(
            o.status.success(),
            "connect: {}{}",
            text(&o.stdout),
            text(&o.stderr)
        );
        assert!(text(&o.stdout).contains("REP_RECEIVED"));
    }
    assert!(l.child.wait().unwrap().success(), "{}", l.out());
    assert_eq!(
        l.out().matches(" REQ_RECEIVED from").count(),
        2,
        "{}",
        l.out()
    );
}

#[test]
fn two_processes_share_one_soft_address() {
    let d = Daemon::start("share");
    share_one_address(&d, "engine", 1, |_| ());
}

/// The ids the service holds on `dev` (all processes).
fn service_ids(probe: &Device) -> u64 {
    probe.service_stat().expect("service stat").device_ids
}

#[test]
fn a_killed_listener_frees_its_service_id() {
    let d = Daemon::start("killed-listener");
    let dev = &net::soft(2);
    let probe = Device::open_served(dev, &d.socket).unwrap();
    let base = service_ids(&probe);
    let mut l = Listener::spawn(&d, &["--device", dev, "--count", "1", "--timeout", "30"]);
    assert!(served::wait_for(Duration::from_secs(5), || service_ids(
        &probe
    ) == base + 1));
    l.child.kill().unwrap();
    l.child.wait().unwrap();
    // Released within a second: a new listener gets the service ID.
    assert!(served::wait_for(Duration::from_secs(1), || service_ids(
        &probe
    ) == base));
    let mut l2 = Listener::spawn(&d, &["--device", dev, "--count", "1", "--timeout", "20"]);
    assert!(served::wait_for(Duration::from_secs(5), || service_ids(
        &probe
    ) == base + 1));
    let c = d
        .connect(dev, &net::ip(2), &["--timeout", "10"])
        .output()
        .unwrap();
    assert!(c.status.success(), "{}", text(&c.stderr));
    assert!(l2.child.wait().unwrap().success());
}

#[test]
fn a_client_killed_while_connected_gets_its_peer_a_dreq() {
    let d = Daemon::start("killed-connected");
    let dev = &net::soft(3);
    let probe = Device::open_served(dev, &d.socket).unwrap();
    let mut l = Listener::spawn(&d, &["--device", dev, "--count", "1", "--timeout", "30"]);
    assert!(served::wait_for(Duration::from_secs(5), || service_ids(
        &probe
    ) == 1));
    let mut c = d
        .connect(dev, &net::ip(3), &["--wait-disconnect", "--timeout", "30"])
        .spawn()
        .unwrap();
    assert!(
        served::wait_for(Duration::from_secs(10), || l.out().contains("RTU_RECEIVED")),
        "{}",
        l.out()
    );
    // `ibcm ids` shows both ends, each with its process and peer.
    let ids = d
        .ibcm(&["ids", "--json", "--socket", d.socket.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(ids.status.success(), "{}", text(&ids.stderr));
    let v: serde_json::Value = serde_json::from_slice(&ids.stdout).unwrap();
    let est: Vec<&serde_json::Value> = v["ids"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["state"] == "ESTABLISHED")
        .collect();
    assert_eq!(est.len(), 2, "{v}");
    let pids: Vec<i64> = est.iter().map(|i| i["pid"].as_i64().unwrap()).collect();
    assert!(pids.contains(&(c.id() as i64)) && pids.contains(&(l.child.id() as i64)));
    assert!(
        est.iter()
            .all(|i| i["peer"] == format!("::ffff:{}", net::addr(3))),
        "{v}"
    );
    assert_eq!(est[0]["local_id"], est[1]["remote_id"]);
    let stat = d
        .ibcm(&["stat", "--json", "--socket", d.socket.to_str().unwrap()])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&stat.stdout).unwrap();
    assert_eq!(
        v["devices"][0]["device"],
        format!("soft:{}:4791", net::addr(3))
    );
    assert_eq!(v["devices"][0]["processes"], 3, "{v}");
    c.kill().unwrap();
    let killed = Instant::now();
    c.wait().unwrap();
    assert!(
        served::wait_for(Duration::from_secs(1), || l.out().contains("DREQ_RECEIVED")),
        "no DREQ within 1 s of the kill: {}",
        l.out()
    );
    assert!(killed.elapsed() < Duration::from_millis(1500));
    assert!(l.child.wait().unwrap().success(), "{}", l.out());
    // Everything the two processes had is gone (time wait included).
    assert!(
        served::wait_for(Duration::from_secs(5), || service_ids(&probe) == 0),
        "{} ids left",
        service_ids(&probe)
    );
}

/// The attribute ID of the MAD in a RoCEv2 datagram (BTH + DETH + MAD).
fn attr_of(dgram: &[u8]) -> u16 {
    u16::from_be_bytes([dgram[20 + 16], dgram[20 + 17]])
}

#[test]
fn a_client_killed_mid_connect_gets_its_peer_a_rej() {
    let d = Daemon::start("killed-connecting");
    // Another process keeps the device open (closing the device would
    // destroy the id too; the REJ must come from the process's death).
    let probe = Device::open_served(&net::soft(4), &d.socket).unwrap();
    // The peer is a bare UDP socket that never answers the REQ.
    let peer = UdpSocket::bind((net::addr(5), 4791)).unwrap();
    peer.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut c = d
        .connect(&net::soft(4), &net::ip(5), &["--timeout", "30"])
        .spawn()
        .unwrap();
    let mut b = [0u8; 512];
    let n = peer.recv(&mut b).unwrap();
    assert_eq!(attr_of(&b[..n]), 0x0010, "expected a REQ");
    c.kill().unwrap();
    let killed = Instant::now();
    c.wait().unwrap();
    peer.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    loop {
        let n = peer.recv(&mut b).expect("no REJ within 1 s of the kill");
        match attr_of(&b[..n]) {
            0x0010 => continue, // a REQ retry sent before the kill
            a => {
                assert_eq!(a, 0x0012, "expected a REJ");
                break;
            }
        }
    }
    assert!(killed.elapsed() < Duration::from_secs(1));
    assert!(served::wait_for(Duration::from_secs(1), || service_ids(
        &probe
    ) == 0));
}

/// Sends `rec` (request number `seq`) on a raw connection; its reply's
/// header and errno (replies to junk that happened to parse are skipped).
fn raw_call(fd: &std::os::fd::OwnedFd, seq: u64, rec: &[u8]) -> (Header, i32) {
    sock::send(fd, rec).unwrap();
    let mut b = vec![0u8; ipc::MAX_RECORD];
    loop {
        let n = sock::recv(fd, &mut b).unwrap();
        assert!(n > 0, "the service closed the connection");
        let (h, mut r) = Header::parse(&b[..n]).expect("a reply");
        if h.seq == seq {
            return (h, r.get::<i32>().expect("an errno"));
        }
    }
}

fn record(opc: u16, seq: u64, handle: u64, body: &[u8]) -> Vec<u8> {
    let mut w = Header {
        op: opc,
        seq,
        handle,
    }
    .record();
    w.0.extend_from_slice(body);
    w.into_bytes()
}

#[test]
fn a_hostile_client_neither_crashes_the_service_nor_reaches_other_ids() {
    let d = Daemon::start("hostile");
    let dev = &net::soft(6);
    // A legitimate process with a listener that rejects every request
    // (reason 28, consumer reject).
    let good = Device::open_served(dev, &d.socket).unwrap();
    let reject: RustHandler = Arc::new(|id, ev| {
        if ev.kind == EventType::ReqReceived {
            id.send_rej(28, &[], &[]).map_or(1, |()| 0)
        } else {
            0
        }
    });
    let lid = good
        .create_id(None, std::ptr::null_mut(), Some(reject))
        .unwrap();
    lid.listen(0x5151).unwrap();
    // The hostile one: raw records on its own connection.
    let bad = sock::connect(&d.socket).unwrap();
    // Calls before OPEN: no device.
    let (_, e) = raw_call(&bad, 1, &record(op::CREATE_ID, 1, 0, &[]));
    assert_eq!(e, -19);
    let mut name = Vec::new();
    name.extend_from_slice(&(dev.len() as u16).to_le_bytes());
    name.extend_from_slice(dev.as_bytes());
    let (_, e) = raw_call(&bad, 2, &record(op::OPEN, 2, 0, &name));
    assert_eq!(e, 0);
    // Another process's id: every call on it is refused.
    for opc in [op::DESTROY, op::SEND_DREQ, op::LISTEN, op::STATE] {
        let body: &[u8] = match opc {
            op::DESTROY => &[0; 4],
            op::SEND_DREQ => &[0; 2],
            op::LISTEN => &[0x51, 0x51, 0, 0, 0, 0, 0, 0],
            _ => &[],
        };
        let (h, e) = raw_call(&bad, 3, &record(opc, 3, lid.handle(), body));
        assert_eq!((h.op, e), (op::REPLY | opc, -22), "op {opc}");
    }
    // A request numbered 0 gets no reply: the next message is the reply
    // to the call after it.
    sock::send(&bad, &record(op::DESTROY, 0, lid.handle(), &[0; 4])).unwrap();
    sock::send(&bad, &record(op::STATE, 7, lid.handle(), &[])).unwrap();
    let mut b = vec![0u8; ipc::MAX_RECORD];
    let n = sock::recv(&bad, &mut b).unwrap();
    let (h, _) = Header::parse(&b[..n]).expect("a reply");
    assert_eq!((h.op, h.seq), (op::REPLY | op::STATE, 7));
    // Truncated, oversized-length and unknown records.
    let (_, e) = raw_call(&bad, 4, &record(op::SEND_REQ, 4, 0, &[1, 2, 3]));
    assert!(e < 0);
    let (_, e) = raw_call(&bad, 5, &record(op::OPEN, 5, 0, &[0xff, 0xff, 1]));
    assert!(e < 0);
    let (_, e) = raw_call(&bad, 6, &record(999, 6, 0, &[]));
    assert_eq!(e, -95);
    let mut g = ibcm::testsupport::Junk(0x9e37_79b9_7f4a_7c15);
    for i in 0..500u64 {
        let n = 1 + (g.0 % 300) as usize;
        let junk = g.bytes(n);
        // Valid headers with junk bodies are answered; junk headers dropped.
        let opc = (i % op::LAST as u64) as u16 + 1;
        if opc != op::OPEN {
            let (_, e) = raw_call(&bad, 100 + i, &record(opc, 100 + i, g.0, &junk));
            // (IDS needs no id: any 4 bytes are a valid first index.)
            let valid = opc == op::IDS && junk.len() == 4;
            assert!(e < 0 || valid, "junk op {opc} accepted");
        }
        sock::send(&bad, &junk).unwrap();
    }
    // The listener is intact and another process still connects to it.
    assert_eq!(lid.state(), Some(ibcm::api::State::Listen));
    let c = d
        .connect(
            dev,
            &net::ip(6),
            &[
                "--service-id",
                "0x5151",
                "--timeout",
                "10",
                "--expect-reject",
                "28",
            ],
        )
        .output()
        .unwrap();
    assert!(c.status.success(), "{}{}", text(&c.stdout), text(&c.stderr));
    assert!(
        text(&c.stdout).contains("REJ_RECEIVED"),
        "{}",
        text(&c.stdout)
    );
    let stat = good.service_stat().expect("service alive");
    assert!(stat.clients >= 2);
    drop(bad);
    lid.destroy().unwrap();
    good.close();
}

/// A handler that records the kind of every event it is given, and the
/// record.
fn recording_handler() -> (Arc<Mutex<Vec<EventType>>>, RustHandler) {
    let got: Arc<Mutex<Vec<EventType>>> = Arc::default();
    let g = got.clone();
    let h: RustHandler = Arc::new(move |_, ev| {
        g.lock().unwrap().push(ev.kind);
        0
    });
    (got, h)
}

/// Waits for a REQ_ERROR among the recorded events (5 s: the reader and
/// delivery threads of a loaded CI machine); fails with the events seen.
fn wait_for_req_error(got: &Mutex<Vec<EventType>>) {
    assert!(
        served::wait_for(Duration::from_secs(5), || got
            .lock()
            .unwrap()
            .contains(&EventType::ReqError)),
        "events: {:?}",
        got.lock().unwrap()
    );
}

/// A connect to host `host` of this test's net, where a plain UDP socket
/// takes the REQ (returned after it arrived) and never answers: the id
/// stays waiting, its REQ timer the service's.
fn silent_peer_connect(
    a: &Arc<Device>,
    host: u16,
    service_id: u64,
    h: RustHandler,
) -> (ibcm::api::CmId, UdpSocket) {
    let peer = UdpSocket::bind((net::addr(host), 4791)).unwrap();
    peer.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let pending = a.create_id(None, std::ptr::null_mut(), Some(h)).unwrap();
    pending
        .send_req(&ReqParams {
            primary_path: a.init_path(1, net::ip(host).parse().unwrap()).unwrap(),
            service_id,
            qp_num: 7,
            qp_type: qp_type::RC,
            remote_cm_response_timeout: 20,
            local_cm_response_timeout: 20,
            max_cm_retries: 15,
            ..ReqParams::default()
        })
        .unwrap();
    let mut b = [0u8; 512];
    peer.recv(&mut b).expect("the REQ reached the peer");
    (pending, peer)
}

#[test]
fn a_dead_service_fails_calls_and_a_restarted_one_serves() {
    let mut d = Daemon::start("restart");
    let dev = &net::soft(7);
    let (got, h) = recording_handler();
    let a = Device::open_served(dev, &d.socket).unwrap();
    let id = a
        .create_id(None, std::ptr::null_mut(), Some(h.clone()))
        .unwrap();
    id.listen(0x7777).unwrap();
    // A connect waiting for an answer from a peer that never gives one.
    let (pending, _peer) = silent_peer_connect(&a, 11, 0x77, h);
    d.child.kill().unwrap();
    d.child.wait().unwrap();
    let t = Instant::now();
    assert!(served::wait_for(Duration::from_secs(2), || id
        .state()
        .is_none()));
    let path = a.init_path(1, net::ip(8).parse().unwrap()).unwrap();
    let r = id.send_req(&ReqParams {
        primary_path: path,
        service_id: 0x1,
        qp_num: 5,
        qp_type: qp_type::RC,
        ..ReqParams::default()
    });
    assert_eq!(r, Err(Errno::ENODEV));
    assert_eq!(
        a.create_id(None, std::ptr::null_mut(), None).err(),
        Some(Errno::ENODEV)
    );
    assert!(t.elapsed() < Duration::from_secs(3));
    // The pending connect got its error event instead of waiting forever.
    wait_for_req_error(&got);
    assert_eq!(got.lock().unwrap().len(), 1, "{:?}", got.lock().unwrap());
    pending.destroy().unwrap();
    id.destroy().unwrap();
    a.close();
    // A new service on the same socket serves new opens.
    let dir = TempDir::new("service", "restart2");
    let socket: &Path = &d.socket;
    let d2 = Daemon::at(socket.to_path_buf(), dir);
    let b = Device::open_served(dev, &d2.socket).unwrap();
    let id2 = b.create_id(None, std::ptr::null_mut(), None).unwrap();
    id2.listen(0x7777).unwrap();
    id2.destroy().unwrap();
    b.close();
}

#[test]
fn a_stopped_service_times_calls_out_and_a_continued_one_serves() {
    stopped_service(Device::open_served, "stopped", 30);
}

/// Forward mode: the process's engine holds the timer of the pending
/// connect, but a listen claim the service does not answer declares it
/// broken all the same, and the continued service answers for the
/// process as for a dead one (its listen is free again).
#[test]
fn forward_a_stopped_service_times_calls_out_and_a_continued_one_serves() {
    stopped_service(Device::open_forwarded, "fwd-stopped", 37);
}

type OpenAt = fn(&str, &std::path::Path) -> Result<Arc<Device>, Errno>;

/// A service stopped (SIGSTOP) under a device opened with `open`, which
/// uses hosts `host` to `host + 2` of the test's net.
fn stopped_service(open: OpenAt, test: &str, host: u16) {
    let d = Daemon::start(test);
    let dev = &net::soft(host);
    let (got, h) = recording_handler();
    let a = open(dev, &d.socket).unwrap();
    let id = a.create_id(None, std::ptr::null_mut(), None).unwrap();
    // A connect waiting for an answer from a peer that never gives one:
    // its timer is the service's.
    let (pending, _peer) = silent_peer_connect(&a, host + 2, 0x78, h);
    let timeouts = ibcm::api::service_timeouts();
    stopped::signal(d.child.id(), libc::SIGSTOP);
    // The generous bound: the service timeout (5 s by default, this test
    // sets none) plus a loaded CI machine's slack.
    let bound = ibcm::api::service_timeout() + Duration::from_secs(10);
    // An open while it is stopped fails too (the daemon's listening
    // socket still accepts the connection).
    let sock = d.socket.clone();
    let opener = std::thread::spawn(move || {
        let t = Instant::now();
        (open(&net::soft(host + 1), &sock).err(), t.elapsed())
    });
    let t = Instant::now();
    assert_eq!(id.listen(0x7778), Err(Errno(libc::ETIMEDOUT)));
    assert!(t.elapsed() < bound, "{:?}", t.elapsed());
    let (err, took) = opener.join().unwrap();
    assert_eq!(err, Some(Errno(libc::ETIMEDOUT)));
    assert!(took < bound, "{took:?}");
    assert!(ibcm::api::service_timeouts() >= timeouts + 2);
    // Declared broken: later calls fail at once instead of each waiting.
    let t = Instant::now();
    assert_eq!(id.listen(0x7779), Err(Errno::ENODEV));
    assert_eq!(
        a.create_id(None, std::ptr::null_mut(), None).err(),
        Some(Errno::ENODEV)
    );
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    // The pending connect got its error event instead of waiting forever
    // for the stopped service's timer.
    wait_for_req_error(&got);
    pending.destroy().unwrap();
    id.destroy().unwrap();
    a.close();
    stopped::signal(d.child.id(), libc::SIGCONT);
    // Continued, it serves new opens (and dropped the broken connection's
    // ids: the service ID is free again).
    let b = open(dev, &d.socket).unwrap();
    let id2 = b.create_id(None, std::ptr::null_mut(), None).unwrap();
    assert!(
        served::wait_for(Duration::from_secs(5), || id2.listen(0x7778).is_ok()),
        "{}",
        d.log()
    );
    id2.destroy().unwrap();
    b.close();
}

#[test]
fn auto_starts_the_service_on_the_first_open() {
    let dir = TempDir::new("service", "auto");
    let socket = dir.0.join("ibcmd.sock");
    // IBCM_SERVICE unset: `auto` is the default. The service it starts
    // leaves 1 s after its last client (no process outlives the test).
    let run = |args: &[&str]| {
        let mut c = ibcm();
        c.args(args)
            .env_remove("IBCM_SERVICE")
            .env_remove("IBCM_SERVICE_MODE")
            .env("IBCM_SERVICE_IDLE_EXIT", "1")
            .env("IBCM_SERVICE_SOCKET", &socket)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    };
    let dev = &net::soft(9);
    let mut l = run(&["listen", "--device", dev, "--count", "1", "--timeout", "20"])
        .spawn()
        .unwrap();
    let said = collect_stdout(&mut l);
    assert!(served::wait_for(Duration::from_secs(10), || sock::connect(
        &socket
    )
    .is_ok()));
    // The service is another process (started by the listener), which
    // the listener's device is served by: the address is shared.
    let service_pid = sock::peer(&sock::connect(&socket).unwrap()).0;
    assert!(service_pid > 0 && service_pid as u32 != l.id());
    // Connect only once the listener's listen has returned (under load the
    // socket appears long before the listener's listen is registered).
    // IBCM_SERVICE_MODE unset: forward is the default (the device's name
    // says it).
    assert!(
        served::wait_for(Duration::from_secs(10), || said
            .lock()
            .unwrap()
            .contains("listening on fwd:")),
        "{}",
        said.lock().unwrap()
    );
    let c = run(&[
        "connect",
        "--device",
        dev,
        "--dest",
        &net::ip(9),
        "--timeout",
        "10",
    ])
    .output()
    .unwrap();
    assert!(c.status.success(), "{}", text(&c.stderr));
    let lo = l.wait_with_output().unwrap();
    assert!(lo.status.success(), "{}", text(&lo.stderr));
    // Idle: the on-demand service leaves by itself.
    let gone = served::wait_for(Duration::from_secs(10), || {
        // Gone, or a zombie nobody has reaped yet.
        std::fs::read_to_string(format!("/proc/{service_pid}/stat")).map_or(true, |st| {
            st.rsplit(") ").next().is_some_and(|r| r.starts_with('Z'))
        })
    });
    if !gone {
        let _ = Command::new("kill")
            .args(["-9", &service_pid.to_string()])
            .status();
    }
    assert!(gone, "the on-demand service did not leave when idle");
}

/// The scheduling policy of every thread of process `pid`.
fn thread_policies(pid: u32) -> Vec<i32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|t| t.ok()?.file_name().to_str()?.parse::<i32>().ok())
        // SAFETY: no pointers; a thread gone meanwhile gives -1.
        .map(|tid| unsafe { libc::sched_getscheduler(tid) })
        .filter(|&p| p >= 0)
        .collect()
}

/// The service runs under SCHED_OTHER unless told `batch`, every thread
/// of it (those it starts per process included); its first line says
/// which (docs/SERVICE.md, "Round 22").
#[test]
fn the_service_runs_the_scheduling_policy_asked_for() {
    for (policy, want) in [
        (None, libc::SCHED_OTHER),
        (Some("normal"), libc::SCHED_OTHER),
        (Some("batch"), libc::SCHED_BATCH),
    ] {
        let dir = TempDir::new("service", &format!("sched-{policy:?}"));
        let socket = dir.0.join("ibcmd.sock");
        let env: Vec<(&str, &std::ffi::OsStr)> = policy
            .map(|p| ("IBCM_SERVICE_SCHED", std::ffi::OsStr::new(p)))
            .into_iter()
            .collect();
        let mut d = Daemon::with_env(socket, dir, &env);
        // A process's device gives the service its per-process threads.
        let dev = Device::open_forwarded(&net::soft(57), &d.socket).unwrap();
        let pols = thread_policies(d.child.id());
        assert!(pols.len() >= 3, "{pols:?}");
        assert!(pols.iter().all(|&p| p == want), "{policy:?}: {pols:?}");
        dev.close();
        let _ = d.child.kill();
        let _ = d.child.wait();
        let log = std::fs::read_to_string(d._dir.0.join("daemon.log")).unwrap();
        let name = policy.unwrap_or("normal");
        assert!(log.contains(&format!("(scheduling: {name})")), "{log}");
    }
    // Anything else is a usage error.
    let o = ibcm()
        .args(["daemon", "--foreground", "--sched", "fifo"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
}

/// Opening an RDMA device by its name (`rxe0`, `mlx5_0`) through the
/// service logs no "bad device name": only `soft:` names are addresses
/// (seen in the lab: two such warnings at every `rxe0` open). A bad
/// `soft:` name still says so.
#[test]
fn an_rdma_device_name_is_not_a_bad_soft_name() {
    let d = Daemon::start("rdmaname");
    // No such RDMA device on this host: the open fails, by its verbs lookup.
    assert!(Device::open_served("ibcmnodev0", &d.socket).is_err());
    assert!(Device::open_served("soft:nonsense", &d.socket).is_err());
    let log = std::fs::read_to_string(d._dir.0.join("daemon.log")).unwrap();
    assert!(
        !log.contains("bad device name \"ibcmnodev0\""),
        "an RDMA device name was parsed as a soft: address:\n{log}"
    );
    assert!(
        log.contains("bad device name \"soft:nonsense\""),
        "a bad soft: name was not logged:\n{log}"
    );
}

#[test]
fn per_process_limits_refuse_with_enomem_and_are_counted() {
    let dir = TempDir::new("service", "limits");
    let socket = dir.0.join("ibcmd.sock");
    let child = ibcm()
        .args(["daemon", "--foreground", "--socket"])
        .arg(&socket)
        .env("IBCM_SERVICE_MAX_IDS", "3")
        .env("IBCM_SERVICE_MAX_LISTENERS", "1")
        .env("IBCM_SERVICE_MAX_CONNECTIONS", "2")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let d = Daemon {
        child,
        socket: socket.clone(),
        _dir: dir,
    };
    assert!(served::wait_for(Duration::from_secs(10), || sock::connect(
        &socket
    )
    .is_ok()));
    let dev = &net::soft(10);
    let a = Device::open_served(dev, &d.socket).unwrap();
    let ids: Vec<_> = (0..3)
        .map(|_| a.create_id(None, std::ptr::null_mut(), None).unwrap())
        .collect();
    assert_eq!(
        a.create_id(None, std::ptr::null_mut(), None).err(),
        Some(Errno::ENOMEM)
    );
    ids[0].listen(0x9001).unwrap();
    assert_eq!(ids[1].listen(0x9002), Err(Errno::ENOMEM));
    assert_eq!(a.service_stat().unwrap().limit_refusals, 2);
    // Another process has limits of its own. (Its open may race the
    // service's reaping of the readiness probe's connection above, which
    // counts against the limit of 2 until the service has seen it close.)
    let mut b = None;
    assert!(served::wait_for(Duration::from_secs(2), || {
        b = Device::open_served(dev, &d.socket).ok();
        b.is_some()
    }));
    let b = b.unwrap();
    let other = b.create_id(None, std::ptr::null_mut(), None).unwrap();
    other.listen(0x9003).unwrap();
    assert_eq!(b.service_stat().unwrap().limit_refusals, 0);
    // A third connection is over the service's limit.
    assert_eq!(
        Device::open_served(dev, &d.socket).err(),
        Some(Errno::ENODEV)
    );
    // Destroying gives the room back.
    ids[2].destroy().unwrap();
    let again = a.create_id(None, std::ptr::null_mut(), None).unwrap();
    again.destroy().unwrap();
    other.destroy().unwrap();
    for id in &ids[..2] {
        id.destroy().unwrap();
    }
    a.close();
    b.close();
    // Their connections are gone: room for new ones.
    assert!(served::wait_for(Duration::from_secs(2), || {
        Device::open_served(dev, &d.socket).is_ok_and(|c| {
            c.close();
            true
        })
    }));
}

/// `ibcm bench --processes 3` (40 connections, two client processes)
/// between soft hosts `server` and `client` of this daemon, in `mode`;
/// checks every count and returns the arguments.
fn bench_processes(d: &Daemon, mode: &str, server: u16, client: u16) -> Vec<String> {
    let args: Vec<String> = [
        "bench",
        "--processes",
        "3",
        "--connections",
        "40",
        "--concurrency",
        "8",
        "--server",
        &net::soft(server),
        "--client",
        &net::soft(client),
        "--timeout",
        "30",
        "--json",
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let o = d
        .ibcm(&refs)
        .env("IBCM_SERVICE_MODE", mode)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}{}", text(&o.stdout), text(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["established"], 40, "{v}");
    assert_eq!(v["server_established"], 40, "{v}");
    assert_eq!(v["disconnected"], 40, "{v}");
    let per = v["per_process"].as_array().unwrap();
    assert_eq!(per.len(), 2);
    assert!(per.iter().all(|p| p["established"] == 20), "{v}");
    assert!(v["connect_per_s"].as_u64().unwrap() > 0);
    args
}

#[test]
fn bench_with_client_processes_sharing_one_device() {
    let d = Daemon::start("bench");
    let args = bench_processes(&d, "engine", 12, 13);
    let o = ibcm()
        .args(args)
        .env("IBCM_SERVICE", "off")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).contains("IBCM_SERVICE"),
        "{}",
        text(&o.stderr)
    );
}

#[test]
fn a_privileged_udp_port_is_bound_only_for_root() {
    privileged_port("engine", "privileged-port", 40);
}

#[test]
fn forward_a_privileged_udp_port_is_bound_only_for_root() {
    privileged_port("forward", "fwd-privileged-port", 38);
}

/// A `soft:` device on UDP port 999 is opened for root only, in `mode`.
fn privileged_port(mode: &str, test: &str, host: u16) {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let d = Daemon::start(test);
    // Let an unprivileged process reach the socket (as group ibcm would).
    std::fs::set_permissions(&d.socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    let as_nobody = |device: &str| {
        d.ibcm(&["listen", "--device", device, "--timeout", "0.3"])
            .env("IBCM_SERVICE_MODE", mode)
            .uid(65534)
            .gid(65534)
            .output()
            .unwrap()
    };
    let low = as_nobody(&format!("soft:{}:999", net::addr(host)));
    assert!(
        text(&low.stderr).contains("cannot open"),
        "{}",
        text(&low.stderr)
    );
    assert!(d.log().contains("port 999 needs root"), "{}", d.log());
    let high = as_nobody(&format!("soft:{}:4791", net::addr(host)));
    assert!(
        !text(&high.stderr).contains("cannot open"),
        "{}",
        text(&high.stderr)
    );
    // Root may.
    let root = d
        .ibcm(&[
            "listen",
            "--device",
            &format!("soft:{}:999", net::addr(host)),
            "--timeout",
            "0.3",
        ])
        .env("IBCM_SERVICE_MODE", mode)
        .output()
        .unwrap();
    assert!(
        !text(&root.stderr).contains("cannot open"),
        "{}",
        text(&root.stderr)
    );
}

/// A one-way call the process could not check (a source GID the device
/// does not have: only the service's port tables know) is refused by the
/// service: the process gets the event the kernel gives for a REQ that
/// goes unanswered (REQ_ERROR, status IB_WC_GENERAL_ERR), the id is IDLE
/// as the engine left it, and the refusal is counted for the process and
/// in `ibcm stat`.
#[test]
fn a_refused_oneway_call_surfaces_as_req_error_and_is_counted() {
    let d = Daemon::start("refused");
    let dev = &net::soft(23);
    let got: Arc<Mutex<Vec<(EventType, ibcm::api::EventParam)>>> = Arc::default();
    let g = got.clone();
    let h: RustHandler = Arc::new(move |_, ev| {
        g.lock().unwrap().push((ev.kind, ev.param.clone()));
        0
    });
    let a = Device::open_served(dev, &d.socket).unwrap();
    let id = a.create_id(None, std::ptr::null_mut(), Some(h)).unwrap();
    let mut path = a.init_path(1, net::ip(24).parse().unwrap()).unwrap();
    path.sgid.0[15] ^= 0x5a;
    let p = ReqParams {
        primary_path: path,
        service_id: 0x12,
        qp_num: 9,
        qp_type: qp_type::RC,
        ..ReqParams::default()
    };
    // Decided in the process: the state and the arguments it can check.
    assert_eq!(id.send_req(&p), Ok(()));
    // REQ_SENT, as the engine would leave it — or already IDLE again if
    // the refusal was quicker than this line.
    let s = id.public().state;
    assert!(
        s == ibcm::api::State::ReqSent as u32 || s == ibcm::api::State::Idle as u32,
        "state {s}"
    );
    assert!(
        served::wait_for(Duration::from_secs(5), || !got.lock().unwrap().is_empty()),
        "no event for the refused REQ"
    );
    std::thread::sleep(Duration::from_millis(100));
    {
        let ev = got.lock().unwrap();
        assert_eq!(ev.len(), 1, "{ev:?}");
        assert_eq!(ev[0].0, EventType::ReqError);
        assert!(
            matches!(ev[0].1, ibcm::api::EventParam::SendStatus(21)),
            "{:?}",
            ev[0].1
        );
    }
    assert_eq!(id.public().state, ibcm::api::State::Idle as u32);
    assert_eq!(id.state(), Some(ibcm::api::State::Idle));
    assert_eq!(a.service_stat().unwrap().oneway_refused, 1);
    let stat = d
        .ibcm(&["stat", "--json", "--socket", d.socket.to_str().unwrap()])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&stat.stdout).unwrap();
    let served = v["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["device"] == format!("soft:{}:4791", net::addr(23)))
        .expect("the device in ibcm stat");
    assert_eq!(served["oneway_refused"], 1, "{v}");
    // A call the process can check is refused by the process itself, as
    // the engine would (no refusal on the service's side).
    assert_eq!(id.send_rtu(&[]), Err(Errno::EINVAL));
    assert_eq!(
        id.send_req(&ReqParams { qp_type: 99, ..p }),
        Err(Errno::EINVAL)
    );
    assert_eq!(a.service_stat().unwrap().oneway_refused, 1);
    id.destroy().unwrap();
    a.close();
}

/// The next record pushed to a raw connection that is not a reply.
fn pushed(fd: &std::os::fd::OwnedFd) -> (Header, Vec<u8>) {
    let mut b = vec![0u8; ipc::MAX_RECORD];
    loop {
        let n = sock::recv(fd, &mut b).unwrap();
        assert!(n > 0, "the service closed the connection");
        let (h, r) = Header::parse(&b[..n]).expect("a record");
        if h.op & op::REPLY == 0 {
            return (h, b[n - r.remaining()..n].to_vec());
        }
    }
}

/// One-way calls and leased handles from a hostile raw client: a handle
/// the service did not lease to this connection (another process's, a
/// destroyed one, a made-up one) is refused and reported, never acted on;
/// a refusal carries the id's state and how many one-way calls on it ran;
/// malformed leases and one-way forms of other requests are refused.
#[test]
fn oneway_calls_and_leased_handles_refuse_forgeries() {
    let d = Daemon::start("forged");
    let dev = &net::soft(14);
    let good = Device::open_served(dev, &d.socket).unwrap();
    let lid = good.create_id(None, std::ptr::null_mut(), None).unwrap();
    lid.listen(0x1414).unwrap();
    let bad = sock::connect(&d.socket).unwrap();
    let mut name = Vec::new();
    name.extend_from_slice(&(dev.len() as u16).to_le_bytes());
    name.extend_from_slice(dev.as_bytes());
    assert_eq!(raw_call(&bad, 1, &record(op::OPEN, 1, 0, &name)).1, 0);
    // Leases: 1..=MAX_CREATE ids at once.
    for n in [0u32, op::MAX_CREATE + 1] {
        let (_, e) = raw_call(&bad, 2, &record(op::CREATE_IDS, 2, 0, &n.to_le_bytes()));
        assert_eq!(e, -22, "a lease of {n}");
    }
    sock::send(&bad, &record(op::CREATE_IDS, 3, 0, &2u32.to_le_bytes())).unwrap();
    let mut b = vec![0u8; ipc::MAX_RECORD];
    let n = sock::recv(&bad, &mut b).unwrap();
    let (h, mut r) = Header::parse(&b[..n]).unwrap();
    assert_eq!(h.op, op::REPLY | op::CREATE_IDS);
    assert_eq!(r.get::<i32>().unwrap(), 0);
    let _: ipc::Public = r.get().unwrap();
    let leased: Box<[ipc::Created]> = r.get().unwrap();
    assert_eq!(leased.len(), 2);
    let mine = leased[0].handle;
    assert_eq!(leased[0].public.state, 0);
    // A one-way RTU on an IDLE id of its own: refused, reported with the
    // id's state (IDLE) and one call run on it.
    sock::send(&bad, &record(op::ONEWAY | op::SEND_RTU, 0, mine, &[0, 0])).unwrap();
    let (h, body) = pushed(&bad);
    assert_eq!((h.op, h.handle, h.seq), (op::REFUSED, mine, 1));
    let f: ipc::Refused = ipc::Reader::new(&body).get().unwrap();
    assert_eq!((f.op, f.err, f.public.state), (op::SEND_RTU, -22, 0));
    assert_eq!(f.public.local_id, leased[0].public.local_id);
    // Another process's listener, a made-up handle, and (as one BATCH
    // message) the lease destroyed then used again: each refused, the
    // forged ones with no state of an id that is not this process's.
    let forged = [lid.handle(), 0xdead_beef_0000, mine];
    for &hd in &forged[..2] {
        sock::send(&bad, &record(op::ONEWAY | op::SEND_DREQ, 0, hd, &[0, 0])).unwrap();
        let (h, body) = pushed(&bad);
        let f: ipc::Refused = ipc::Reader::new(&body).get().unwrap();
        assert_eq!((h.op, h.handle, f.err), (op::REFUSED, hd, -22));
        assert_eq!(
            f.public,
            ipc::Public::default(),
            "state of a foreign id leaked"
        );
    }
    let batch = ipc::batch(vec![
        record(op::DESTROY, 0, mine, &[0; 4]),
        record(op::ONEWAY | op::SEND_DREQ, 0, mine, &[0, 0]),
    ]);
    assert_eq!(batch.len(), 1);
    sock::send(&bad, &batch[0]).unwrap();
    let (h, body) = pushed(&bad);
    let f: ipc::Refused = ipc::Reader::new(&body).get().unwrap();
    assert_eq!((h.op, h.handle, f.err), (op::REFUSED, mine, -22));
    // MRA_ON_REPORT: a flag of 0/1 on its own id runs (nothing pushed),
    // any other byte is malformed (-EPROTO), another process's id is not
    // reached; the refusals count the calls run on the id.
    let other = leased[1].handle;
    sock::send(
        &bad,
        &record(op::ONEWAY | op::MRA_ON_REPORT, 0, other, &[1]),
    )
    .unwrap();
    sock::send(
        &bad,
        &record(op::ONEWAY | op::MRA_ON_REPORT, 0, other, &[2]),
    )
    .unwrap();
    let (h, body) = pushed(&bad);
    let f: ipc::Refused = ipc::Reader::new(&body).get().unwrap();
    assert_eq!((h.op, h.handle, h.seq), (op::REFUSED, other, 2));
    assert_eq!((f.op, f.err), (op::MRA_ON_REPORT, -71));
    sock::send(&bad, &record(op::ONEWAY | op::MRA_ON_REPORT, 0, other, &[])).unwrap();
    let (h, body) = pushed(&bad);
    let f: ipc::Refused = ipc::Reader::new(&body).get().unwrap();
    assert_eq!((h.op, h.handle, f.err), (op::REFUSED, other, -71));
    let hd = lid.handle();
    sock::send(&bad, &record(op::ONEWAY | op::MRA_ON_REPORT, 0, hd, &[1])).unwrap();
    let (h, body) = pushed(&bad);
    let f: ipc::Refused = ipc::Reader::new(&body).get().unwrap();
    assert_eq!((h.op, h.handle, f.err), (op::REFUSED, hd, -22));
    assert_eq!(f.public, ipc::Public::default());
    // Only the eight calls may go one-way.
    let (_, e) = raw_call(
        &bad,
        9,
        &record(
            op::ONEWAY | op::LISTEN,
            9,
            leased[1].handle,
            &[1, 0, 0, 0, 0, 0, 0, 0],
        ),
    );
    assert_eq!(e, -95);
    // The other process's listener is untouched; the forger's refusals are
    // its own.
    assert_eq!(lid.state(), Some(ibcm::api::State::Listen));
    assert_eq!(good.service_stat().unwrap().oneway_refused, 0);
    let (_, e) = raw_call(&bad, 10, &record(op::STAT, 10, 0, &[]));
    assert_eq!(e, 0);
    drop(bad);
    lid.destroy().unwrap();
    good.close();
}

/// The process's reader thread runs callbacks itself; a callback that makes
/// round trips through the service (`init_qp_attr` as the rdmacm library's
/// handler does, `state`, a lease of ids in `create_id`, `listen`) must
/// read its own replies instead of waiting for the thread that runs it.
/// (The two addresses are devices of one service: their MADs take its
/// in-memory switch.)
#[test]
fn callbacks_make_round_trips_through_the_service() {
    let d = Daemon::start("cb-calls");
    let (srv_name, cli_name) = (&net::soft(25), &net::soft(26));
    let srv = Device::open_served(srv_name, &d.socket).unwrap();
    let cli = Device::open_served(cli_name, &d.socket).unwrap();
    let log: Arc<Mutex<Vec<String>>> = Arc::default();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<Result<(), String>>();
    let done = Arc::new(Mutex::new(done_tx));
    let extra: Arc<Mutex<Vec<ibcm::api::CmId>>> = Arc::default();
    let (l, x, s) = (log.clone(), extra.clone(), srv.clone());
    let server: RustHandler = Arc::new(move |id, ev| {
        if ev.kind != EventType::ReqReceived {
            return 0;
        }
        // Round trips from the reader thread's callback.
        let attr = id.init_qp_attr(ibcm::abi::IB_QPS_RTR);
        let state = id.state();
        let other = s.create_id(None, std::ptr::null_mut(), None);
        let listened = other.as_ref().map(|o| o.listen(0x4243));
        l.lock().unwrap().push(format!(
            "server: attr {:?} state {state:?} listen {listened:?}",
            attr.as_ref().map(|_| ())
        ));
        if let Ok(o) = other {
            x.lock().unwrap().push(o);
        }
        let rep = ibcm::api::RepParams {
            qp_num: 11,
            starting_psn: 1,
            ..Default::default()
        };
        match id.send_rep(&rep) {
            Ok(()) => 0,
            Err(e) => {
                l.lock().unwrap().push(format!("server: send_rep {e:?}"));
                -1
            }
        }
    });
    let (l, dn) = (log.clone(), done.clone());
    let client: RustHandler = Arc::new(move |id, ev| {
        let r = match ev.kind {
            EventType::RepReceived => {
                let attr = id.init_qp_attr(ibcm::abi::IB_QPS_RTR).map(|_| ());
                let rts = id.init_qp_attr(ibcm::abi::IB_QPS_RTS).map(|_| ());
                l.lock()
                    .unwrap()
                    .push(format!("client: rtr {attr:?} rts {rts:?}"));
                match (attr, rts, id.send_rtu(&[])) {
                    (Ok(()), Ok(()), Ok(())) => Ok(()),
                    other => Err(format!("client: {other:?}")),
                }
            }
            k => Err(format!("client: unexpected {k:?}")),
        };
        let _ = dn.lock().unwrap().send(r);
        0
    });
    let listener = srv
        .create_id(None, std::ptr::null_mut(), Some(server))
        .unwrap();
    listener.listen(0x4242).unwrap();
    let id = cli
        .create_id(None, std::ptr::null_mut(), Some(client))
        .unwrap();
    let path = cli.init_path(1, net::ip(25).parse().unwrap()).unwrap();
    id.send_req(&ReqParams {
        primary_path: path,
        service_id: 0x4242,
        qp_num: 10,
        qp_type: qp_type::RC,
        ..ReqParams::default()
    })
    .unwrap();
    // A deadlocked callback never answers: fail instead of hanging.
    let got = done_rx.recv_timeout(Duration::from_secs(10));
    let seen = log.lock().unwrap().clone();
    assert_eq!(got, Ok(Ok(())), "{seen:?}");
    assert!(
        seen.iter()
            .any(|s| s.starts_with("server: attr Ok(()) state Some(ReqRcvd) listen Ok(Ok(()))")),
        "{seen:?}"
    );
    assert!(
        served::wait_for(Duration::from_secs(5), || id.public().state
            == ibcm::api::State::Established as u32),
        "state {}",
        id.public().state
    );
    for o in extra.lock().unwrap().drain(..) {
        o.destroy().unwrap();
    }
    id.destroy().unwrap();
    listener.destroy().unwrap();
    cli.close();
    srv.close();
}

/// Two served soft addresses of one host hand each other MADs in memory
/// (the service's switch, no UDP), and a capture of the service still
/// shows every one of them, as the frames they replace.
#[test]
fn a_capture_of_the_service_shows_mads_switched_between_its_devices() {
    capture_of_switched_mads("engine", "switchpcap", 21, 22);
}

/// Forward mode: the hub hands the MADs between its soft devices.
#[test]
fn forward_a_capture_of_the_service_shows_mads_switched_between_its_devices() {
    capture_of_switched_mads("forward", "fwd-switchpcap", 27, 28);
}

/// A listener on soft host `server`, a connect from soft host `client`,
/// in `mode`, with the service capturing.
fn capture_of_switched_mads(mode: &str, test: &str, server: u16, client: u16) {
    let dir = TempDir::new("service", test);
    let socket = dir.0.join("ibcmd.sock");
    let pcap = dir.0.join("svc.pcapng");
    let d = Daemon::with_env(socket, dir, &[("IBCM_PCAP", pcap.as_os_str())]);
    let server_dev = net::soft(server);
    let mut child = d
        .ibcm(&[
            "listen",
            "--device",
            &server_dev,
            "--count",
            "1",
            "--timeout",
            "20",
        ])
        .env("IBCM_SERVICE_MODE", mode)
        .spawn()
        .unwrap();
    let out = collect_stdout(&mut child);
    let mut l = Listener { child, out };
    assert!(l.wait_listening(), "{}", l.out());
    let o = d
        .connect(&net::soft(client), &net::ip(server), &["--timeout", "10"])
        .env("IBCM_SERVICE_MODE", mode)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "connect: {}{}",
        text(&o.stdout),
        text(&o.stderr)
    );
    assert!(l.child.wait().unwrap().success(), "{}", l.out());
    // The capture thread writes every 100 ms.
    let mut summary = String::new();
    let seen = served::wait_for(Duration::from_secs(5), || {
        let s = ibcm()
            .arg("decode")
            .arg("--summary")
            .arg(&pcap)
            .output()
            .unwrap();
        summary = text(&s.stdout);
        summary.contains("A>REQ +") && summary.contains("B>REP +") && summary.contains("A>RTU +")
    });
    // Each MAD once: no retransmission or duplicate that did not happen.
    assert!(
        summary.contains("0 retransmission(s), 0 duplicate(s)"),
        "{summary}"
    );
    assert!(seen, "capture summary: {summary}\ndaemon log: {}", d.log());
}

/// The records of one message from a raw connection, a `BATCH` unpacked.
fn records_of(msg: &[u8]) -> Vec<Vec<u8>> {
    let (h, r) = Header::parse(msg).expect("a record");
    if h.op != op::BATCH {
        return vec![msg.to_vec()];
    }
    ipc::unbatch(&msg[msg.len() - r.remaining()..])
        .expect("a valid batch")
        .into_iter()
        .map(<[u8]>::to_vec)
        .collect()
}

/// What one wake-up brings leaves as one message at each step of a burst
/// of connects: the service holds the events its engines produce for a
/// process until the message that caused them has run (the listener's
/// process gets its eight REQs in one `BATCH`), the process runs the
/// callbacks of what one read brought inside one `Device::batch` (their
/// eight one-way `send_rep` leave as one `BATCH`, though each callback
/// then sleeps: sent one by one they would reach the service apart), and
/// the requester gets its eight REPs in one message, each just after its
/// QP attributes (`op::QP_ATTRS`: what `INIT_QP_ATTR` answers then; the
/// requester asked for them, `op::QP_ATTRS_ON_REP`, in its REQs' message).
#[test]
fn a_burst_of_connects_travels_as_one_message_per_step() {
    const N: usize = 8;
    let d = Daemon::start("burst");
    let (srv_name, cli_name) = ("soft:127.0.9.30", "soft:127.0.9.31");
    let srv = Device::open_served(srv_name, &d.socket).unwrap();
    let cli = Device::open_served(cli_name, &d.socket).unwrap();
    let reps: Arc<Mutex<Vec<Result<(), Errno>>>> = Arc::default();
    let r = reps.clone();
    let server: RustHandler = Arc::new(move |id, ev| {
        if ev.kind != EventType::ReqReceived {
            return 0;
        }
        let mut r = r.lock().unwrap();
        let rep = ibcm::api::RepParams {
            // One QP per connection (the same one twice is a stale
            // connection to the requester).
            qp_num: 200 + r.len() as u32,
            starting_psn: 1,
            ..Default::default()
        };
        r.push(id.send_rep(&rep));
        drop(r);
        std::thread::sleep(Duration::from_millis(20));
        0
    });
    let listener = srv
        .create_id(None, std::ptr::null_mut(), Some(server))
        .unwrap();
    listener.listen(0x4343).unwrap();
    // The server device's event loop flushes MADs other threads queued
    // when it wakes; woken by the REPs' timers (earlier than its sleep
    // while it has none) it would run the requester's engine itself,
    // outside any hold, one send per event — a race this test is not
    // about. A REQ the client side never answers gives it an earlier
    // timer (2 s), so the REPs' (17 s) do not wake it.
    let silent: RustHandler = Arc::new(|_, _| 0);
    let quiet = cli
        .create_id(None, std::ptr::null_mut(), Some(silent))
        .unwrap();
    quiet.listen(0x4344).unwrap();
    let pending = srv.create_id(None, std::ptr::null_mut(), None).unwrap();
    pending
        .send_req(&ReqParams {
            primary_path: srv.init_path(1, "127.0.9.31".parse().unwrap()).unwrap(),
            service_id: 0x4344,
            qp_num: 99,
            qp_type: qp_type::RC,
            remote_cm_response_timeout: 19,
            local_cm_response_timeout: 19,
            max_cm_retries: 1,
            ..ReqParams::default()
        })
        .unwrap();
    std::thread::sleep(Duration::from_millis(50));
    // The requester: a raw connection to the client device.
    let raw = sock::connect(&d.socket).unwrap();
    let mut name = Vec::new();
    name.extend_from_slice(&(cli_name.len() as u16).to_le_bytes());
    name.extend_from_slice(cli_name.as_bytes());
    assert_eq!(raw_call(&raw, 1, &record(op::OPEN, 1, 0, &name)).1, 0);
    sock::send(
        &raw,
        &record(op::CREATE_IDS, 2, 0, &(N as u32).to_le_bytes()),
    )
    .unwrap();
    let mut b = vec![0u8; ipc::MAX_RECORD];
    let n = sock::recv(&raw, &mut b).unwrap();
    let (h, mut rd) = Header::parse(&b[..n]).unwrap();
    assert_eq!(h.op, op::REPLY | op::CREATE_IDS);
    assert_eq!(rd.get::<i32>().unwrap(), 0);
    let _: ipc::Public = rd.get().unwrap();
    let leased: Box<[ipc::Created]> = rd.get().unwrap();
    assert_eq!(leased.len(), N);
    let path = cli.init_path(1, "127.0.9.30".parse().unwrap()).unwrap();
    let ask = record(op::ONEWAY | op::QP_ATTRS_ON_REP, 0, 0, &[1]);
    let reqs: Vec<Vec<u8>> = std::iter::once(ask)
        .chain(leased.iter().enumerate().map(|(i, c)| {
            let mut w = Header {
                op: op::ONEWAY | op::SEND_REQ,
                seq: 0,
                handle: c.handle,
            }
            .record();
            w.put(&ReqParams {
                primary_path: path,
                service_id: 0x4343,
                qp_num: 100 + i as u32,
                qp_type: qp_type::RC,
                // The callbacks take 160 ms in all: no retry meanwhile.
                remote_cm_response_timeout: 22,
                local_cm_response_timeout: 22,
                max_cm_retries: 3,
                ..ReqParams::default()
            });
            w.into_bytes()
        }))
        .collect();
    let batch = ipc::batch(reqs);
    assert_eq!(batch.len(), 1);
    sock::send(&raw, &batch[0]).unwrap();
    // Every message pushed until the N REPs are in: one.
    let mut messages = 0;
    let mut rep_events = 0;
    let mut attrs: Option<(u64, ipc::QpAttrs)> = None;
    let mut first = None;
    while rep_events < N {
        let n = sock::recv(&raw, &mut b).unwrap();
        assert!(n > 0, "the service closed the connection");
        messages += 1;
        for rec in records_of(&b[..n]) {
            let (h, mut rd) = Header::parse(&rec).unwrap();
            if h.op == op::QP_ATTRS {
                assert!(attrs.is_none(), "two QP_ATTRS records in a row");
                attrs = Some((h.handle, rd.get().unwrap()));
                rd.end().unwrap();
                continue;
            }
            assert_eq!(
                h.op,
                op::EVENT,
                "only events and QP attributes are pushed here"
            );
            let we: ipc::WireEvent = rd.get().unwrap();
            assert_eq!(
                we.event.kind,
                EventType::RepReceived,
                "{:?}",
                we.event.param
            );
            let (handle, a) = attrs
                .take()
                .expect("a REP's QP attributes come just before it");
            assert_eq!(handle, h.handle);
            assert_eq!(
                a.public, we.public,
                "the attributes go with the event's snapshot"
            );
            first.get_or_insert((h.handle, a));
            rep_events += 1;
        }
    }
    assert_eq!(messages, 1, "{N} REPs arrived in {messages} messages");
    // What INIT_QP_ATTR answers now is what came with the REP.
    let (handle, a) = first.unwrap();
    served_as_pushed(&raw, handle, &a);
    assert_eq!(*reps.lock().unwrap(), vec![Ok(()); N]);
    let stat = srv.service_stat().unwrap();
    assert_eq!(stat.oneway_refused, 0);
    drop(raw);
    pending.destroy().unwrap();
    quiet.destroy().unwrap();
    listener.destroy().unwrap();
    cli.close();
    srv.close();
}

/// Runs `c` to its end, at most `limit` (killed then: the test fails
/// instead of hanging): its output and how long it took.
fn run_within(c: &mut Command, limit: Duration) -> (std::process::Output, Duration) {
    let t = Instant::now();
    let mut child = c
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = collect_stdout(&mut child);
    let mut err = child.stderr.take().unwrap();
    let err = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = std::io::Read::read_to_end(&mut err, &mut s);
        s
    });
    let finished = served::wait_for(limit, || child.try_wait().unwrap().is_some());
    if !finished {
        let _ = child.kill();
    }
    let status = child.wait().unwrap();
    let took = t.elapsed();
    let stderr = err.join().unwrap();
    assert!(
        finished,
        "still running after {limit:?} (a hang): {}",
        text(&stderr)
    );
    let stdout = out.lock().unwrap().clone().into_bytes();
    (
        std::process::Output {
            status,
            stdout,
            stderr,
        },
        took,
    )
}

/// A fake service at `path`: a seqpacket socket listening with the
/// smallest backlog that never accepts, and the connections that filled
/// that backlog (a stopped or wedged service once 128 clients queued).
fn full_backlog(path: &Path) -> (std::os::fd::OwnedFd, Vec<std::os::fd::OwnedFd>) {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::os::unix::ffi::OsStrExt;
    let seqpacket = |flags: libc::c_int| {
        let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | flags, 0) };
        assert!(fd >= 0);
        unsafe { OwnedFd::from_raw_fd(fd) }
    };
    let mut a: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    a.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, s) in a.sun_path.iter_mut().zip(path.as_os_str().as_bytes()) {
        *d = *s as libc::c_char;
    }
    let sa = &a as *const libc::sockaddr_un as *const libc::sockaddr;
    let len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
    let l = seqpacket(0);
    assert_eq!(unsafe { libc::bind(l.as_raw_fd(), sa, len) }, 0);
    assert_eq!(unsafe { libc::listen(l.as_raw_fd(), 0) }, 0);
    let mut held = Vec::new();
    loop {
        let c = seqpacket(libc::SOCK_NONBLOCK);
        if unsafe { libc::connect(c.as_raw_fd(), sa, len) } != 0 {
            let e = std::io::Error::last_os_error();
            assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock, "{e}");
            break;
        }
        held.push(c);
        assert!(held.len() < 1000, "the backlog never filled");
    }
    (l, held)
}

#[test]
fn an_open_against_a_full_backlog_times_out_instead_of_hanging() {
    let dir = TempDir::new("service", "backlog");
    let socket = dir.0.join("ibcmd.sock");
    let (_listener, held) = full_backlog(&socket);
    assert!(!held.is_empty());
    // A plain connect would block now until the service accepts.
    let s = socket.clone();
    let (e, took) = within(Duration::from_secs(20), move || {
        sock::connect_within(&s, Duration::from_millis(200)).unwrap_err()
    });
    assert_eq!(e.kind(), std::io::ErrorKind::TimedOut, "{e}");
    assert!(
        (Duration::from_millis(200)..Duration::from_secs(5)).contains(&took),
        "{took:?}"
    );
    // An open in a process of its own with a short bound: ETIMEDOUT
    // after the bound, whether `auto` (no in-process CM beside the
    // service: it owns the device) or `required`.
    let dev = &net::soft(33);
    for mode in ["auto", "required"] {
        let (out, took) = run_within(
            ibcm()
                .args(["listen", "--device", dev, "--timeout", "5"])
                .env("IBCM_SERVICE", mode)
                .env("IBCM_SERVICE_SOCKET", &socket)
                .env("IBCM_SERVICE_TIMEOUT_MS", "300"),
            Duration::from_secs(20),
        );
        let err = text(&out.stderr);
        assert!(!out.status.success(), "{mode}: {err}");
        assert!(
            err.contains("is not answering") && err.contains("-ETIMEDOUT"),
            "{mode}: {err}"
        );
        assert_eq!(
            err.contains("not opening in-process"),
            mode == "auto",
            "{err}"
        );
        assert!(
            (Duration::from_millis(300)..Duration::from_secs(10)).contains(&took),
            "{mode}: {took:?}"
        );
    }
    // In this process (the default 5 s bound): a device's open and the
    // port table's connection (rdma_bind_addr's) both time out.
    let limit = ibcm::api::service_timeout() + Duration::from_secs(10);
    let (s, d) = (socket.clone(), dev.clone());
    let opener =
        std::thread::spawn(move || within(limit, move || Device::open_served(&d, &s).err()));
    let s = socket.clone();
    let (err, _) = within(limit, move || {
        ibcm::portspace::HostPorts::connect_at(&s).err()
    });
    assert_eq!(err, Some(Errno(libc::ETIMEDOUT)));
    let (err, _) = opener.join().unwrap();
    assert_eq!(err, Some(Errno(libc::ETIMEDOUT)));
}

/// Runs `f` on a thread of its own: its result and how long it took, or
/// a failed test if it has not returned within `limit` (a hang).
fn within<T: Send + 'static>(
    limit: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> (T, Duration) {
    let (tx, rx) = std::sync::mpsc::channel();
    let t = Instant::now();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    let r = rx
        .recv_timeout(limit)
        .unwrap_or_else(|_| panic!("no return within {limit:?}: a hang"));
    (r, t.elapsed())
}

/// What `/proc/<pid>/stat` says of `pid`'s state: `None` when there is no
/// such process (exited and reaped).
fn proc_state(pid: u32) -> Option<char> {
    ibcm::ipc::sock::proc_stat(pid as i32).ok()?.state
}

#[test]
fn a_daemon_that_never_detaches_is_killed_and_reaped() {
    let dir = TempDir::new("service", "nodetach");
    let socket = dir.0.join("ibcmd.sock");
    // A "daemon" that neither listens nor exits, with a child of its own.
    let fake = dir.write(
        "fake-daemon",
        format!(
            "#!/bin/sh\necho $$ > {d}/daemon.pid\nsleep 1000 &\necho $! > {d}/child.pid\nwait\n",
            d = dir.0.display()
        ),
    );
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let dev = &net::soft(34);
    let client = |mode: &str| {
        let mut c = ibcm();
        c.args(["listen", "--device", dev, "--count", "1", "--timeout", "4"])
            .env("IBCM_SERVICE", mode)
            .env("IBCM_SERVICE_SOCKET", &socket)
            .env("IBCM_SERVICE_TIMEOUT_MS", "400")
            .env("IBCM_DAEMON", &fake)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    };
    let pid_in = |f: &str| -> u32 {
        std::fs::read_to_string(dir.0.join(f))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    // `auto`: after the bound the starter kills the daemon's process
    // group, reaps it and opens in-process (nobody owns the device).
    let t = Instant::now();
    let mut l = client("auto").spawn().unwrap();
    let said = collect_stdout(&mut l);
    assert!(
        served::wait_for(Duration::from_secs(15), || said
            .lock()
            .unwrap()
            .contains("listening on")),
        "{}",
        said.lock().unwrap()
    );
    let took = t.elapsed();
    assert!(
        (Duration::from_millis(400)..Duration::from_secs(10)).contains(&took),
        "{took:?}"
    );
    let (daemon, child) = (pid_in("daemon.pid"), pid_in("child.pid"));
    // Reaped by the starter, which still runs: no zombie left.
    assert!(l.try_wait().unwrap().is_none());
    assert_eq!(proc_state(daemon), None, "the daemon was not reaped");
    // Its child was killed with it (reaped by whoever inherited it).
    assert!(
        served::wait_for(Duration::from_secs(5), || matches!(
            proc_state(child),
            None | Some('Z')
        )),
        "the daemon's child still runs"
    );
    let out = l.wait_with_output().unwrap();
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!("{} daemon (pid {daemon}, ", fake.display()))
            && err.contains("did not detach within 400 ms"),
        "{err}"
    );
    // `required`: the open fails within the bound, with the same line.
    let (out, took) = run_within(&mut client("required"), Duration::from_secs(20));
    let err = text(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("did not detach within 400 ms"), "{err}");
    assert!(
        (Duration::from_millis(400)..Duration::from_secs(10)).contains(&took),
        "{took:?}"
    );
    assert_eq!(proc_state(pid_in("daemon.pid")), None);
}

#[test]
fn a_daemon_slow_to_start_but_working_is_waited_for() {
    let dir = TempDir::new("service", "slowstart");
    let socket = dir.0.join("ibcmd.sock");
    // The real daemon after 1.5 s of computing (what a start looks like on
    // a loaded or emulated CPU): longer than the 400 ms bound, but its CPU
    // time grows all along, so the starter waits for it (busy::Watch).
    let fake = dir.write(
        "slow-daemon",
        format!(
            "#!/bin/bash\nend=$(( ${{EPOCHREALTIME//[.,]/}} + 1500000 ))\nwhile (( ${{EPOCHREALTIME//[.,]/}} < end )); do :; done\nexec {} \"$@\"\n",
            env!("CARGO_BIN_EXE_ibcm")
        ),
    );
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let dev = &net::soft(36);
    let mut l = ibcm()
        .args(["listen", "--device", dev, "--count", "0", "--timeout", "20"])
        .env("IBCM_SERVICE", "required")
        .env("IBCM_SERVICE_SOCKET", &socket)
        .env("IBCM_SERVICE_TIMEOUT_MS", "400")
        .env("IBCM_SERVICE_IDLE_EXIT", "1")
        .env("IBCM_DAEMON", &fake)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let said = collect_stdout(&mut l);
    let listening = served::wait_for(Duration::from_secs(20), || {
        said.lock().unwrap().contains("listening on") || l.try_wait().unwrap().is_some()
    }) && said.lock().unwrap().contains("listening on");
    let daemons = daemons_at(&socket);
    let _ = l.kill();
    let out = l.wait_with_output().unwrap();
    let gone = served::wait_for(Duration::from_secs(10), || daemons_at(&socket).is_empty());
    for pid in daemons_at(&socket) {
        stopped::signal(pid, libc::SIGKILL);
    }
    let err = text(&out.stderr);
    assert!(listening, "{}\n{err}", said.lock().unwrap());
    assert_eq!(
        daemons.len(),
        1,
        "services at the socket: {daemons:?}\n{err}"
    );
    assert!(
        err.contains("its start (detach)") && err.contains("it is working"),
        "{err}"
    );
    assert!(!err.contains("did not detach"), "{err}");
    assert!(gone, "the on-demand service did not leave when idle");
}

/// The live `ibcm daemon` processes serving `socket`.
fn daemons_at(socket: &Path) -> Vec<u32> {
    let want = socket.as_os_str().as_encoded_bytes();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| {
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let args: Vec<&[u8]> = cmd.split(|&b| b == 0).collect();
            args.contains(&&b"daemon"[..]) && args.contains(&want)
        })
        .collect()
}

#[test]
fn concurrent_first_opens_start_one_service_that_serves_them_all() {
    let dir = TempDir::new("service", "racing");
    let socket = dir.0.join("ibcmd.sock");
    let dev = &net::soft(35);
    // Four processes open the device at once with no service running:
    // each starts one (IBCM_SERVICE=required: none may fall back to an
    // in-process CM), one of them listens, the others find it listening
    // and every process is served by it.
    let mut clients: Vec<(Child, Arc<Mutex<String>>)> = (1..=4)
        .map(|sid| {
            let mut c = ibcm()
                .args(["listen", "--device", dev, "--count", "0", "--timeout", "8"])
                .args(["--service-id", &sid.to_string()])
                .env("IBCM_SERVICE", "required")
                .env("IBCM_SERVICE_IDLE_EXIT", "1")
                .env("IBCM_SERVICE_SOCKET", &socket)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            let said = collect_stdout(&mut c);
            (c, said)
        })
        .collect();
    for (c, said) in &mut clients {
        let ok = served::wait_for(Duration::from_secs(15), || {
            said.lock().unwrap().contains("listening on") || c.try_wait().unwrap().is_some()
        });
        assert!(
            ok && said.lock().unwrap().contains("listening on"),
            "{}",
            said.lock().unwrap()
        );
    }
    let daemons = daemons_at(&socket);
    let ids = ibcm()
        .args(["ids", "--socket"])
        .arg(&socket)
        .output()
        .unwrap();
    for (c, _) in &mut clients {
        let _ = c.kill();
    }
    let pids: Vec<u32> = clients.iter().map(|(c, _)| c.id()).collect();
    for (mut c, _) in clients {
        let _ = c.wait();
    }
    let gone = served::wait_for(Duration::from_secs(10), || daemons_at(&socket).is_empty());
    for pid in daemons_at(&socket) {
        stopped::signal(pid, libc::SIGKILL);
    }
    assert_eq!(daemons.len(), 1, "services at one socket: {daemons:?}");
    let listed = text(&ids.stdout);
    for pid in pids {
        assert!(
            listed
                .lines()
                .any(|l| l.split_whitespace().next() == Some(&pid.to_string())
                    && l.contains("LISTEN")),
            "process {pid} is not served by the service: {listed}"
        );
    }
    assert!(gone, "the on-demand service did not leave when idle");
}

/// Asks the service on the raw connection `raw` for `handle`'s INIT, RTR
/// and RTS attributes (`INIT_QP_ATTR` round trips) and checks each is
/// what was pushed in `a` (the QP_ATTRS record before the id's event).
fn served_as_pushed(raw: &std::os::fd::OwnedFd, handle: u64, a: &ipc::QpAttrs) {
    let mut b = vec![0u8; ipc::MAX_RECORD];
    for (k, state) in [
        ibcm::abi::IB_QPS_INIT,
        ibcm::abi::IB_QPS_RTR,
        ibcm::abi::IB_QPS_RTS,
    ]
    .into_iter()
    .enumerate()
    {
        let seq = 10 + k as u64;
        sock::send(
            raw,
            &record(op::INIT_QP_ATTR, seq, handle, &state.to_le_bytes()),
        )
        .unwrap();
        let n = sock::recv(raw, &mut b).unwrap();
        let (h, mut rd) = Header::parse(&b[..n]).unwrap();
        assert_eq!((h.op, h.seq), (op::REPLY | op::INIT_QP_ATTR, seq));
        assert_eq!(rd.get::<i32>().unwrap(), 0);
        let _: ipc::Public = rd.get().unwrap();
        let served: ibcm::api::QpAttr = rd.get().unwrap();
        assert_eq!(Some(served), a.get(state), "state {state}");
    }
}

/// A raw connection's lease of `n` ids on `dev` (after its OPEN).
fn raw_open_lease(d: &Daemon, dev: &str, n: u32) -> (std::os::fd::OwnedFd, Vec<u64>) {
    let raw = sock::connect(&d.socket).unwrap();
    let mut name = Vec::new();
    name.extend_from_slice(&(dev.len() as u16).to_le_bytes());
    name.extend_from_slice(dev.as_bytes());
    assert_eq!(raw_call(&raw, 1, &record(op::OPEN, 1, 0, &name)).1, 0);
    sock::send(&raw, &record(op::CREATE_IDS, 2, 0, &n.to_le_bytes())).unwrap();
    let mut b = vec![0u8; ipc::MAX_RECORD];
    let len = sock::recv(&raw, &mut b).unwrap();
    let (h, mut rd) = Header::parse(&b[..len]).unwrap();
    assert_eq!(h.op, op::REPLY | op::CREATE_IDS);
    assert_eq!(rd.get::<i32>().unwrap(), 0);
    let _: ipc::Public = rd.get().unwrap();
    let leased: Box<[ipc::Created]> = rd.get().unwrap();
    assert_eq!(leased.len(), n as usize);
    (raw, leased.iter().map(|c| c.handle).collect())
}

/// The passive side's QP attributes (`op::QP_ATTRS_ON_REQ`): a listener
/// marked with it gets each connection REQ's event just after the new
/// id's QP attributes — what `INIT_QP_ATTR` answers for it then — and a
/// listener without the mark gets its REQ alone (ib_cm users pay
/// nothing). A mark whose body is not one byte 0/1 is refused with
/// `-EPROTO`.
#[test]
fn a_marked_listener_gets_each_req_with_its_qp_attributes() {
    let d = Daemon::start("reqattrs");
    let (srv_name, cli_name) = ("soft:127.0.9.40", "soft:127.0.9.41");
    let cli = Device::open_served(cli_name, &d.socket).unwrap();
    let (raw, leased) = raw_open_lease(&d, srv_name, 2);
    let (marked, plain) = (leased[0], leased[1]);
    // Malformed marks: refused, nothing set.
    for body in [&[2u8][..], &[], &[1, 0]] {
        sock::send(
            &raw,
            &record(op::ONEWAY | op::QP_ATTRS_ON_REQ, 0, plain, body),
        )
        .unwrap();
        let (h, body) = pushed(&raw);
        let f: ipc::Refused = ipc::Reader::new(&body).get().unwrap();
        assert_eq!((h.op, h.handle), (op::REFUSED, plain));
        assert_eq!((f.op, f.err), (op::QP_ATTRS_ON_REQ, -71));
    }
    // The mark and the LISTEN in one message, as the library sends them.
    let batch = ipc::batch(vec![
        record(op::ONEWAY | op::QP_ATTRS_ON_REQ, 0, marked, &[1]),
        record(op::LISTEN, 3, marked, &0x4545u64.to_le_bytes()),
    ]);
    assert_eq!(raw_call(&raw, 3, &batch[0]).1, 0);
    assert_eq!(
        raw_call(
            &raw,
            4,
            &record(op::LISTEN, 4, plain, &0x4546u64.to_le_bytes())
        )
        .1,
        0
    );
    let path = cli.init_path(1, "127.0.9.40".parse().unwrap()).unwrap();
    let next_records = |raw: &std::os::fd::OwnedFd| loop {
        let mut b = vec![0u8; ipc::MAX_RECORD];
        let n = sock::recv(raw, &mut b).unwrap();
        assert!(n > 0, "the service closed the connection");
        let recs = records_of(&b[..n]);
        let (h, _) = Header::parse(&recs[0]).unwrap();
        if h.op & op::REPLY == 0 {
            return recs;
        }
    };
    let mut reqs = Vec::new();
    for (i, sid) in [0x4545u64, 0x4546].into_iter().enumerate() {
        let id = cli.create_id(None, std::ptr::null_mut(), None).unwrap();
        id.send_req(&ReqParams {
            primary_path: path,
            service_id: sid,
            qp_num: 300 + i as u32,
            qp_type: qp_type::RC,
            starting_psn: 0x777,
            responder_resources: 2,
            initiator_depth: 3,
            remote_cm_response_timeout: 20,
            local_cm_response_timeout: 20,
            max_cm_retries: 3,
            retry_count: 5,
            rnr_retry_count: 6,
            ..ReqParams::default()
        })
        .unwrap();
        reqs.push(id);
        let recs = next_records(&raw);
        let mut attrs = None;
        let mut event = None;
        for rec in &recs {
            let (h, mut rd) = Header::parse(rec).unwrap();
            match h.op {
                op::QP_ATTRS => {
                    assert!(event.is_none(), "QP attributes after the event");
                    let a: ipc::QpAttrs = rd.get().unwrap();
                    rd.end().unwrap();
                    attrs = Some((h.handle, a));
                }
                op::EVENT => {
                    let we: ipc::WireEvent = rd.get().unwrap();
                    assert_eq!(we.event.kind, EventType::ReqReceived);
                    event = Some((h.handle, we));
                }
                o => panic!("unexpected record {o:#x}"),
            }
        }
        let (handle, we) = event.expect("the REQ's event");
        if sid == 0x4546 {
            assert_eq!(we.listener, plain);
            assert!(attrs.is_none(), "an unmarked listener got QP attributes");
            continue;
        }
        assert_eq!(we.listener, marked);
        let (ah, a) = attrs.expect("a marked listener's REQ comes with its QP attributes");
        assert_eq!(ah, handle, "the new id's attributes");
        assert_eq!(a.public, we.public, "the event's snapshot");
        assert_eq!(a.rtr.dest_qp_num, 300);
        // What INIT_QP_ATTR answers now is what came with the REQ.
        served_as_pushed(&raw, handle, &a);
    }
    drop(raw);
    for id in reqs {
        id.destroy().unwrap();
    }
    cli.close();
}

/// Op 22 stays reserved: it was `WAKE_BATCH` (docs/PERFORMANCE.md §5,
/// "WAKE_BATCH on and off in one boot"), removed. A library built while
/// it existed sends it one-way once per connection when
/// `IBCM_SERVICE_WAKE=batch`; the service answers it `-EOPNOTSUPP` like
/// any op it does not know (that library drops the answer) and goes on
/// serving the connection.
#[test]
fn the_removed_wake_batch_op_is_refused_as_unknown() {
    let d = Daemon::start("wake_batch_gone");
    let a = sock::connect(&d.socket).unwrap();
    let (h, e) = raw_call(&a, 0, &record(22 | op::ONEWAY, 0, 0, &[1]));
    assert_eq!(h.op, op::REPLY | op::ONEWAY | 22);
    assert_eq!(e, -95, "op 22 is refused -EOPNOTSUPP");
    let (_, e) = raw_call(&a, 1, &record(op::HOST_STAT, 1, 0, &[]));
    assert_eq!(e, 0, "the connection is still served");
}

// ---------------------------------------------------------------- design B
//
// The same host-wide promises with the engines in the processes
// (`IBCM_SERVICE_MODE=forward`, docs/SERVICE.md "Design B"): the service's
// hub forwards their MADs and tracks their connections.

impl Daemon {
    /// `ibcm ARGS` as a forward-mode client of this service.
    fn fwd(&self, args: &[&str]) -> Command {
        let mut c = self.ibcm(args);
        c.env("IBCM_SERVICE_MODE", "forward");
        c
    }

    /// The forwarded device `dev`'s line of `ibcm stat --json` (`None`
    /// when the service does not forward it).
    fn fwd_stat(&self, dev: &str) -> Option<serde_json::Value> {
        let o = self
            .ibcm(&["stat", "--json", "--socket", self.socket.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", text(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let want = format!("{}:4791 (forwarded)", dev);
        v["devices"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["device"] == want.as_str())
            .cloned()
    }
}

impl Listener {
    fn spawn_fwd(d: &Daemon, args: &[&str]) -> Listener {
        let mut child = d.fwd(&[&["listen"], args].concat()).spawn().unwrap();
        let out = collect_stdout(&mut child);
        Listener { child, out }
    }
}

#[test]
fn forward_processes_share_one_address_and_its_service_ids() {
    let d = Daemon::start("fwd-share");
    let dev = &net::soft(41);
    share_one_address(&d, "forward", 41, |l| {
        assert!(l.out().contains("listening on fwd:"), "{}", l.out());
        // A device is served one way at a time: an engine-mode open is
        // -EBUSY.
        let engine = d
            .ibcm(&["listen", "--device", dev, "--port", "9", "--timeout", "2"])
            .output()
            .unwrap();
        assert_eq!(engine.status.code(), Some(1));
        assert!(
            text(&engine.stderr).contains("EBUSY"),
            "{}",
            text(&engine.stderr)
        );
    });
    // The device closed with its last process; an engine-mode open works.
    assert!(served::wait_for(Duration::from_secs(5), || d
        .fwd_stat(dev)
        .is_none()));
    let probe = Device::open_served(dev, &d.socket).unwrap();
    probe.close();
}

#[test]
fn forward_a_client_killed_while_connected_gets_its_peer_a_dreq() {
    let d = Daemon::start("fwd-killed-connected");
    let dev = &net::soft(42);
    let mut l = Listener::spawn_fwd(&d, &["--device", dev, "--count", "1", "--timeout", "30"]);
    assert!(l.wait_listening(), "{}", l.out());
    let mut c = d
        .connect(dev, &net::ip(42), &["--wait-disconnect", "--timeout", "30"])
        .env("IBCM_SERVICE_MODE", "forward")
        .spawn()
        .unwrap();
    assert!(
        served::wait_for(Duration::from_secs(10), || l.out().contains("RTU_RECEIVED")),
        "{}",
        l.out()
    );
    // The hub follows both ends of the connection.
    let s = d.fwd_stat(dev).expect("forwarded");
    assert_eq!(
        (s["processes"].as_u64(), s["ids"].as_u64()),
        (Some(2), Some(2)),
        "{s}"
    );
    // `ibcm ids` shows both ends, each with its process, the service ID
    // and the peer, and the listen.
    let ids = d
        .ibcm(&["ids", "--json", "--socket", d.socket.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(ids.status.success(), "{}", text(&ids.stderr));
    let v: serde_json::Value = serde_json::from_slice(&ids.stdout).unwrap();
    let of = |state: &str| -> Vec<serde_json::Value> {
        v["ids"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|i| i["state"] == state)
            .cloned()
            .collect()
    };
    let est = of("ESTABLISHED");
    assert_eq!(est.len(), 2, "{v}");
    let pids: Vec<i64> = est.iter().map(|i| i["pid"].as_i64().unwrap()).collect();
    assert!(pids.contains(&(c.id() as i64)) && pids.contains(&(l.child.id() as i64)));
    assert!(
        est.iter()
            .all(|i| i["peer"] == format!("::ffff:{}", net::addr(42))),
        "{v}"
    );
    assert_eq!(est[0]["local_id"], est[1]["remote_id"]);
    assert_eq!(est[1]["local_id"], est[0]["remote_id"]);
    assert!(est.iter().all(|i| i["service_id"] == est[0]["service_id"]));
    let listens = of("LISTEN");
    assert_eq!(listens.len(), 1, "{v}");
    assert_eq!(listens[0]["pid"].as_i64(), Some(l.child.id() as i64));
    assert_eq!(listens[0]["service_id"], est[0]["service_id"], "{v}");
    c.kill().unwrap();
    let killed = Instant::now();
    c.wait().unwrap();
    assert!(
        served::wait_for(Duration::from_secs(1), || l.out().contains("DREQ_RECEIVED")),
        "no DREQ within 1 s of the kill: {}",
        l.out()
    );
    assert!(killed.elapsed() < Duration::from_millis(1500));
    assert!(l.child.wait().unwrap().success(), "{}", l.out());
    assert!(d.log().contains("gone: 1 MAD(s) sent"), "{}", d.log());
    // Nothing is left in the service: the device closed with the listener.
    assert!(served::wait_for(Duration::from_secs(5), || d
        .fwd_stat(dev)
        .is_none()));
}

#[test]
fn forward_a_client_killed_mid_connect_gets_its_peer_a_rej() {
    let d = Daemon::start("fwd-killed-connecting");
    // The peer is a bare UDP socket that never answers the REQ.
    let peer = UdpSocket::bind((net::addr(44), 4791)).unwrap();
    peer.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut c = d
        .connect(&net::soft(43), &net::ip(44), &["--timeout", "30"])
        .env("IBCM_SERVICE_MODE", "forward")
        .spawn()
        .unwrap();
    let mut b = [0u8; 512];
    let n = peer.recv(&mut b).unwrap();
    assert_eq!(attr_of(&b[..n]), 0x0010, "expected a REQ");
    c.kill().unwrap();
    let killed = Instant::now();
    c.wait().unwrap();
    peer.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    loop {
        let n = peer.recv(&mut b).expect("no REJ within 1 s of the kill");
        match attr_of(&b[..n]) {
            0x0010 => continue, // a REQ retry sent before the kill
            a => {
                assert_eq!(a, 0x0012, "expected a REJ");
                // REJ reason TIMEOUT (4) with the dead side's CA GUID, as
                // the kernel's cm_destroy_id sends for REQ_SENT.
                let rej = &b[20 + 24..n];
                assert_eq!(u16::from_be_bytes([rej[10], rej[11]]), 4, "reason");
                assert_eq!(rej[9] >> 1, 8, "ARI: the CA GUID");
                break;
            }
        }
    }
    assert!(killed.elapsed() < Duration::from_secs(1));
}

/// A raw forward-mode connection to `dev`: its slot's answer.
fn raw_fwd_open(d: &Daemon, dev: &str) -> (std::os::fd::OwnedFd, ipc::FwdOpened) {
    let fd = sock::connect(&d.socket).unwrap();
    sock::set_timeouts(&fd, Duration::from_secs(10), true).unwrap();
    let mut name = Vec::new();
    name.extend_from_slice(&(dev.len() as u16).to_le_bytes());
    name.extend_from_slice(dev.as_bytes());
    sock::send(&fd, &record(op::FWD_OPEN, 1, 0, &name)).unwrap();
    let mut b = vec![0u8; ipc::MAX_RECORD];
    let n = sock::recv(&fd, &mut b).unwrap();
    let (h, mut r) = Header::parse(&b[..n]).unwrap();
    assert_eq!(h.op, op::REPLY | op::FWD_OPEN);
    assert_eq!(r.get::<i32>().unwrap(), 0);
    let _: ipc::Public = r.get().unwrap();
    (fd, r.get().unwrap())
}

#[test]
fn forward_a_hostile_client_is_refused_and_others_keep_working() {
    use ibcm::engine::MadDest;
    use ibcm::ipc::fwd;
    use ibcm::wire::{CmMad, CmMsg, Dreq};
    let d = Daemon::start("fwd-hostile");
    let dev = &net::soft(45);
    let mut l = Listener::spawn_fwd(&d, &["--device", dev, "--count", "1", "--timeout", "30"]);
    assert!(l.wait_listening(), "{}", l.out());
    let (bad, opened) = raw_fwd_open(&d, dev);
    assert_eq!(opened.proc_slot, 1, "the listener has slot 0");
    let gid: ibcm::wire::Gid = net::ip(45).parse().unwrap();
    let to_self = MadDest {
        port: 1,
        dgid: gid,
        sgid: gid,
        pkey: 0xffff,
        hop_limit: 64,
        has_grh: true,
        dest_qp: 1,
        ..MadDest::default()
    };
    let dreq = |local: u32, remote: u32| {
        CmMad::send(
            7,
            0,
            CmMsg::Dreq(Dreq {
                local_comm_id: local,
                remote_comm_id: remote,
                ..Dreq::default()
            }),
        )
        .to_bytes()
    };
    let mut msg = Vec::new();
    // DREQs speaking for comm IDs that are not this process's: refused,
    // whether they name an ID of the listener's process (every process
    // knows the device's key: slot 0's IDs) or of no live process.
    let codec = ibcm::engine::ids::IdCodec::new(opened.id_key);
    for i in 0..50u32 {
        let to = if i % 2 == 0 {
            codec.encode(i << 7)
        } else {
            0x2000 + i
        };
        fwd::put_dest(&mut msg, &to_self, &dreq(0x1000 + i, to));
    }
    sock::send(&bad, &msg).unwrap();
    // A MAD from a GID the device does not have: refused.
    msg.clear();
    let spoof = MadDest {
        sgid: "10.9.9.9".parse().unwrap(),
        ..to_self
    };
    fwd::put_dest(&mut msg, &spoof, &dreq(1, 2));
    sock::send(&bad, &msg).unwrap();
    // Another process's listen: -EBUSY.
    msg.clear();
    fwd::put_listen(&mut msg, 9, 0x1061c06);
    sock::send(&bad, &msg).unwrap();
    // Nothing answers the forgeries: the first message back is the
    // listen's answer.
    let mut b = vec![0u8; ipc::MAX_RECORD];
    let n = sock::recv(&bad, &mut b).unwrap();
    let recs: Vec<_> = fwd::records(&b[..n]).collect();
    assert!(
        recs == vec![Ok(fwd::Rec::Listened { seq: 9, err: -16 })],
        "{} record(s) back, the first {:?}",
        recs.len(),
        recs.first().map(|r| r.as_ref().map(|r| match r {
            fwd::Rec::Mad(_, m) =>
                format!("a MAD, attribute {:#x}", u16::from_be_bytes([m[16], m[17]])),
            other => format!("{other:?}"),
        }))
    );
    // Junk records.
    let mut g = ibcm::testsupport::Junk(0x5eed);
    for _ in 0..300 {
        let n = 1 + (g.0 % 700) as usize;
        let _ = sock::send(&bad, &g.bytes(n));
    }
    // The listener's connection works all the same.
    let c = d
        .connect(dev, &net::ip(45), &["--timeout", "10"])
        .env("IBCM_SERVICE_MODE", "forward")
        .output()
        .unwrap();
    assert!(c.status.success(), "{}{}", text(&c.stdout), text(&c.stderr));
    assert!(l.child.wait().unwrap().success(), "{}", l.out());
    // The listener's CM saw its own connection's MADs only.
    let mut err = String::new();
    std::io::Read::read_to_string(l.child.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(err.contains("rx             REQ=1 RTU=1 DREQ=1\n"), "{err}");
    let s = d.fwd_stat(dev).expect("the hostile client keeps it open");
    // 50 forged DREQs, 1 spoofed MAD and junk records, all counted.
    assert!(s["oneway_refused"].as_u64().unwrap() >= 52, "{s}");
    drop(bad);
    assert!(served::wait_for(Duration::from_secs(5), || d
        .fwd_stat(dev)
        .is_none()));
    assert!(d.log().contains("a MAD dropped"), "{}", d.log());
}

#[test]
fn forward_a_dead_service_fails_calls_and_a_restarted_one_serves() {
    let mut d = Daemon::start("fwd-restart");
    let dev = &net::soft(46);
    let (got, h) = recording_handler();
    let a = Device::open_forwarded(dev, &d.socket).unwrap();
    let id = a
        .create_id(None, std::ptr::null_mut(), Some(h.clone()))
        .unwrap();
    id.listen(0x7777).unwrap();
    // A connect waiting for an answer from a peer that never gives one
    // (20 × 4 s of retries otherwise).
    let (pending, _peer) = silent_peer_connect(&a, 47, 0x77, h);
    d.child.kill().unwrap();
    d.child.wait().unwrap();
    let t = Instant::now();
    // The pending connect gets its error event at once.
    wait_for_req_error(&got);
    assert!(t.elapsed() < Duration::from_secs(3));
    assert_eq!(got.lock().unwrap().len(), 1, "{:?}", got.lock().unwrap());
    let path = a.init_path(1, net::ip(48).parse().unwrap()).unwrap();
    let r = pending.send_req(&ReqParams {
        primary_path: path,
        service_id: 0x1,
        qp_num: 5,
        qp_type: qp_type::RC,
        ..ReqParams::default()
    });
    assert_eq!(r, Err(Errno::ENODEV));
    assert_eq!(
        a.create_id(None, std::ptr::null_mut(), None).err(),
        Some(Errno::ENODEV)
    );
    pending.destroy().unwrap();
    id.destroy().unwrap();
    a.close();
    // A new service on the same socket serves new opens.
    let dir = TempDir::new("service", "fwd-restart2");
    let socket: &Path = &d.socket;
    let d2 = Daemon::at(socket.to_path_buf(), dir);
    let b = Device::open_forwarded(dev, &d2.socket).unwrap();
    let id2 = b.create_id(None, std::ptr::null_mut(), None).unwrap();
    id2.listen(0x7777).unwrap();
    id2.destroy().unwrap();
    b.close();
}

#[test]
fn forward_bench_with_client_processes_sharing_one_device() {
    let d = Daemon::start("fwd-bench");
    bench_processes(&d, "forward", 49, 50);
    // The MADs between the two soft devices never took the wire.
    assert!(d.log().contains("closed (local "), "{}", d.log());
    assert!(!d.log().contains("wire_out"), "{}", d.log());
}

#[test]
fn forward_a_process_keeps_to_its_own_comm_ids_and_its_id_limit() {
    use ibcm::engine::MadDest;
    use ibcm::engine::ids::IdCodec;
    use ibcm::ipc::fwd;
    use ibcm::wire::{CmMad, CmMsg, Req};
    let dir = TempDir::new("service", "fwd-limits");
    let socket = dir.0.join("ibcmd.sock");
    let d = Daemon::with_env(socket, dir, &[("IBCM_SERVICE_MAX_IDS", "3".as_ref())]);
    let dev = &net::soft(51);
    // The peer is a bare UDP socket: it counts the REQs that reach it.
    let peer = UdpSocket::bind((net::addr(52), 4791)).unwrap();
    peer.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let (fd, opened) = raw_fwd_open(&d, dev);
    let codec = IdCodec::new(opened.id_key);
    let mine = |n: u32| codec.encode(n << 7 | opened.proc_slot);
    let theirs = codec.encode(1 << 7 | (opened.proc_slot + 1));
    let req = |local: u32| {
        CmMad::send(
            local as u64,
            0,
            CmMsg::Req(Req {
                local_comm_id: local,
                service_id: 0x99,
                local_qpn: 0x100 + (local & 0xff),
                ..Req::default()
            }),
        )
        .to_bytes()
    };
    let to_peer = MadDest {
        port: 1,
        dgid: net::ip(52).parse().unwrap(),
        sgid: net::ip(51).parse().unwrap(),
        pkey: 0xffff,
        hop_limit: 64,
        has_grh: true,
        dest_qp: 1,
        ..MadDest::default()
    };
    let mut msg = Vec::new();
    // Another process's comm ID: refused.
    fwd::put_dest(&mut msg, &to_peer, &req(theirs));
    // Five of its own: three pass (the limit), two are refused.
    for n in 1..=5 {
        fwd::put_dest(&mut msg, &to_peer, &req(mine(n)));
    }
    sock::send(&fd, &msg).unwrap();
    let mut got = Vec::new();
    let mut b = [0u8; 512];
    while let Ok(n) = peer.recv(&mut b) {
        assert_eq!(attr_of(&b[..n]), 0x0010);
        got.push(u32::from_be_bytes(b[20 + 24..20 + 28].try_into().unwrap()));
    }
    assert_eq!(got, vec![mine(1), mine(2), mine(3)]);
    let s = d.fwd_stat(dev).expect("forwarded");
    assert_eq!(s["oneway_refused"].as_u64(), Some(3), "{s}");
    assert_eq!(s["ids"].as_u64(), Some(3), "{s}");
    assert!(d.log().contains("another process's comm ID"), "{}", d.log());
    assert!(d.log().contains("IBCM_SERVICE_MAX_IDS"), "{}", d.log());
}

#[test]
fn forward_ids_show_a_request_not_answered_yet() {
    let d = Daemon::start("fwd-pending");
    let dev = &net::soft(53);
    let srv = Device::open_forwarded(dev, &d.socket).unwrap();
    // A listener that leaves every request unanswered (REQ_RCVD).
    let (got, h) = recording_handler();
    let l = srv.create_id(None, std::ptr::null_mut(), Some(h)).unwrap();
    l.listen(0x5353).unwrap();
    let cli = Device::open_forwarded(&net::soft(54), &d.socket).unwrap();
    let c = cli.create_id(None, std::ptr::null_mut(), None).unwrap();
    c.send_req(&ReqParams {
        primary_path: cli.init_path(1, net::ip(53).parse().unwrap()).unwrap(),
        service_id: 0x5353,
        qp_num: 9,
        qp_type: qp_type::RC,
        ..ReqParams::default()
    })
    .unwrap();
    assert!(served::wait_for(Duration::from_secs(5), || got
        .lock()
        .unwrap()
        .contains(&EventType::ReqReceived)));
    let ids = d
        .ibcm(&["ids", "--json", "--socket", d.socket.to_str().unwrap()])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&ids.stdout).unwrap();
    let all = v["ids"].as_array().unwrap();
    let rcvd: Vec<_> = all.iter().filter(|i| i["state"] == "REQ_RCVD").collect();
    let sent: Vec<_> = all.iter().filter(|i| i["state"] == "REQ_SENT").collect();
    assert_eq!((rcvd.len(), sent.len()), (1, 1), "{v}");
    assert_eq!(rcvd[0]["remote_id"], sent[0]["local_id"], "{v}");
    assert_eq!(rcvd[0]["pid"].as_i64(), Some(std::process::id() as i64));
    assert_eq!(rcvd[0]["peer"], format!("::ffff:{}", net::addr(54)), "{v}");
    assert_eq!(rcvd[0]["service_id"], "0x0000000000005353", "{v}");
    // The process listed them itself: the passive id has its comm ID.
    assert_ne!(rcvd[0]["local_id"], "0x00000000", "{v}");
    c.destroy().unwrap();
    l.destroy().unwrap();
    cli.close();
    srv.close();
}

/// `ibcm ids` lists every id of a forwarded process, as the process
/// lists it when the service asks — an idle id too, which no MAD has
/// shown the service — and, for a process that does not answer, what the
/// service knows (its listens); `ibcm stat` sums the processes' CM
/// counters.
#[test]
fn forward_ids_list_every_id_and_what_a_silent_process_holds() {
    let d = Daemon::start("fwd-ids");
    let dev = &net::soft(11);
    let a = Device::open_forwarded(dev, &d.socket).unwrap();
    let idle = a.create_id(None, std::ptr::null_mut(), None).unwrap();
    let l = a.create_id(None, std::ptr::null_mut(), None).unwrap();
    l.listen(0x1111).unwrap();
    // A process that never answers (a raw connection): only its listen
    // is known.
    let (silent, _) = raw_fwd_open(&d, dev);
    let mut msg = Vec::new();
    ibcm::ipc::fwd::put_listen(&mut msg, 1, 0x2222);
    sock::send(&silent, &msg).unwrap();
    let mut b = vec![0u8; ipc::MAX_RECORD];
    sock::recv(&silent, &mut b).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let t = Instant::now();
    let o = d
        .ibcm(&["ids", "--json", "--socket", d.socket.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let all = v["ids"].as_array().unwrap();
    let with = |k: &str, want: serde_json::Value| -> Vec<&serde_json::Value> {
        all.iter().filter(|i| i[k] == want).collect()
    };
    let hex = |x: u32| serde_json::Value::from(format!("{x:#010x}"));
    let idle_rows = with("local_id", hex(idle.local_id()));
    assert_eq!(idle_rows.len(), 1, "{v}");
    assert_eq!(idle_rows[0]["state"], "IDLE", "{v}");
    assert_eq!(
        idle_rows[0]["pid"].as_i64(),
        Some(std::process::id() as i64)
    );
    let listens = with("state", "LISTEN".into());
    assert_eq!(listens.len(), 2, "{v}");
    assert!(
        listens
            .iter()
            .any(|i| i["service_id"] == "0x0000000000001111" && i["local_id"] == hex(l.local_id())),
        "{v}"
    );
    assert!(
        listens
            .iter()
            .any(|i| i["service_id"] == "0x0000000000002222" && i["local_id"] == hex(0)),
        "{v}"
    );
    // The silent process cost one wait, not more.
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    // `ibcm stat`: the device's CM counters are its processes', summed
    // (the silent one has none to give): this process made two ids.
    let s = d.fwd_stat(dev).expect("forwarded");
    assert_eq!(s["cm"]["ids_created"], 2, "{s}");
    assert_eq!(s["processes"], 2, "{s}");
    drop(silent);
    idle.destroy().unwrap();
    l.destroy().unwrap();
    a.close();
}

/// The host-wide stale-connection check, as the kernel's one CM per host
/// makes it: process R1 connects QP 0x777 of its CA to process L's
/// listener; process R2, on the same client device, names that QP again
/// in a REQ to process P's listener on the same server device. R2 gets
/// REJ STALE_CONN (10), L's CM disconnects the old connection (R1 sees
/// the DREQ), and P's CM never sees the REQ. In mode `mode`: in forward
/// mode the service finds it across L's and P's engines.
fn stale_connection_across_processes(d: &Daemon, mode: &str, server: u16, client: u16) {
    let (sdev, cdev) = (&net::soft(server), &net::soft(client));
    let run = |args: &[&str]| {
        let mut c = d.ibcm(args);
        c.env("IBCM_SERVICE_MODE", mode);
        c
    };
    let listen = |sid: &str, count: &str| {
        let mut child = run(&[
            "listen",
            "--device",
            sdev,
            "--service-id",
            sid,
            "--count",
            count,
            "--timeout",
            "40",
        ])
        .spawn()
        .unwrap();
        let out = collect_stdout(&mut child);
        Listener { child, out }
    };
    let mut l = listen("0x51", "1");
    let mut p = listen("0x52", "0");
    assert!(l.wait_listening(), "{}", l.out());
    assert!(p.wait_listening(), "{}", p.out());
    let dest = net::ip(server);
    let connect = |sid: &str, more: &[&str]| {
        let mut a = vec![
            "connect",
            "--device",
            cdev,
            "--dest",
            &dest,
            "--service-id",
            sid,
            "--qpn",
            "0x777",
            "--timeout",
            "30",
        ];
        a.extend_from_slice(more);
        run(&a)
    };
    let mut r1 = connect("0x51", &["--wait-disconnect"]).spawn().unwrap();
    let r1_out = collect_stdout(&mut r1);
    assert!(
        served::wait_for(Duration::from_secs(10), || l.out().contains("RTU_RECEIVED")),
        "{}",
        l.out()
    );
    let r2 = connect("0x52", &["--expect-reject", "10"])
        .output()
        .unwrap();
    assert!(
        r2.status.success(),
        "R2: {}{}\nR1: {}\nL: {}\nP: {}",
        text(&r2.stdout),
        text(&r2.stderr),
        r1_out.lock().unwrap(),
        l.out(),
        p.out()
    );
    // The old connection is disconnected by its CM: R1 gets the DREQ.
    let s1 = r1.wait().unwrap();
    let r1_out = r1_out.lock().unwrap().clone();
    assert!(s1.success(), "{r1_out}");
    assert!(r1_out.contains("DREQ_RECEIVED"), "{r1_out}");
    let _ = l.child.kill();
    let _ = l.child.wait();
    // P's CM saw no REQ.
    let _ = p.child.kill();
    let _ = p.child.wait();
    assert!(!p.out().contains("REQ_RECEIVED"), "{}", p.out());
}

#[test]
fn forward_a_stale_connection_is_found_across_processes() {
    let d = Daemon::start("fwd-stale");
    stale_connection_across_processes(&d, "forward", 55, 56);
    assert!(
        d.log().contains("REJ(STALE_CONN) to its sender"),
        "{}",
        d.log()
    );
}

#[test]
fn engine_mode_a_stale_connection_is_found_across_processes() {
    let _d = Daemon::start("engine-stale");
    stale_connection_across_processes(&_d, "engine", 57, 58);
}

/// Forward mode: a killed listener's service ID is free within a second
/// (the service releases a dead process's listens), and a new listener
/// serves it.
#[test]
fn forward_a_killed_listener_frees_its_service_id() {
    let d = Daemon::start("fwd-killed-listener");
    let dev = &net::soft(39);
    let mut l = Listener::spawn_fwd(&d, &["--device", dev, "--count", "1", "--timeout", "30"]);
    assert!(l.wait_listening(), "{}", l.out());
    let probe = Device::open_forwarded(dev, &d.socket).unwrap();
    let id = probe.create_id(None, std::ptr::null_mut(), None).unwrap();
    assert_eq!(id.listen(0x1061c06), Err(Errno::EBUSY));
    l.child.kill().unwrap();
    l.child.wait().unwrap();
    let t = Instant::now();
    assert!(
        served::wait_for(Duration::from_secs(1), || id.listen(0x1061c06).is_ok()),
        "{}",
        d.log()
    );
    assert!(t.elapsed() < Duration::from_secs(1));
    id.destroy().unwrap();
    probe.close();
    let mut l2 = Listener::spawn_fwd(&d, &["--device", dev, "--count", "1", "--timeout", "20"]);
    assert!(l2.wait_listening(), "{}", l2.out());
    let c = d
        .connect(dev, &net::ip(39), &["--timeout", "10"])
        .env("IBCM_SERVICE_MODE", "forward")
        .output()
        .unwrap();
    assert!(c.status.success(), "{}", text(&c.stderr));
    assert!(l2.child.wait().unwrap().success(), "{}", l2.out());
}

/// Forward mode's per-process limits: listens (`IBCM_SERVICE_MAX_LISTENERS`,
/// `-ENOMEM`, counted), each process its own; connections to the service
/// (`IBCM_SERVICE_MAX_CONNECTIONS`). Ids are the process's own (its
/// engine's), so the service does not count them; the connection ends it
/// tracks are capped (`forward_a_process_keeps_to_its_own_comm_ids_and_its_id_limit`).
#[test]
fn forward_per_process_limits_refuse_with_enomem_and_are_counted() {
    let dir = TempDir::new("service", "fwd-limits");
    let socket = dir.0.join("ibcmd.sock");
    let d = Daemon::with_env(
        socket.clone(),
        dir,
        &[
            ("IBCM_SERVICE_MAX_LISTENERS", std::ffi::OsStr::new("1")),
            ("IBCM_SERVICE_MAX_CONNECTIONS", std::ffi::OsStr::new("2")),
        ],
    );
    let dev = &net::soft(47);
    // (The open may race the service's reaping of the readiness probe's
    // connection, which counts against the limit of 2 until it is seen.)
    let mut a = None;
    assert!(served::wait_for(Duration::from_secs(2), || {
        a = Device::open_forwarded(dev, &d.socket).ok();
        a.is_some()
    }));
    let a = a.unwrap();
    let ids: Vec<_> = (0..2)
        .map(|_| a.create_id(None, std::ptr::null_mut(), None).unwrap())
        .collect();
    ids[0].listen(0x9001).unwrap();
    assert_eq!(ids[1].listen(0x9002), Err(Errno::ENOMEM));
    assert!(
        d.log().contains("1 listeners already: -ENOMEM"),
        "{}",
        d.log()
    );
    // Another process has limits of its own.
    let mut b = None;
    assert!(served::wait_for(Duration::from_secs(2), || {
        b = Device::open_forwarded(dev, &d.socket).ok();
        b.is_some()
    }));
    let b = b.unwrap();
    let other = b.create_id(None, std::ptr::null_mut(), None).unwrap();
    other.listen(0x9003).unwrap();
    // A third connection is over the service's limit.
    assert_eq!(
        Device::open_forwarded(dev, &d.socket).err(),
        Some(Errno::ENODEV)
    );
    // Destroying gives the room back.
    ids[0].destroy().unwrap();
    ids[1].listen(0x9002).unwrap();
    other.destroy().unwrap();
    ids[1].destroy().unwrap();
    a.close();
    b.close();
    // The refusal is the device's counter (in its closing line).
    assert!(
        served::wait_for(Duration::from_secs(2), || d
            .log()
            .contains("claims_refused 1")),
        "{}",
        d.log()
    );
    assert!(served::wait_for(Duration::from_secs(2), || {
        Device::open_forwarded(dev, &d.socket).is_ok_and(|c| {
            c.close();
            true
        })
    }));
}

/// The CM MADs of the next message with any on a raw forward-mode
/// connection (none when nothing comes within `wait`). The service's
/// questions (`ibcm stat`'s) are left unanswered: it shows what it knows.
fn next_mads(fd: &std::os::fd::OwnedFd, wait: Duration) -> Vec<ibcm::wire::CmMsg> {
    use ibcm::ipc::fwd;
    let end = Instant::now() + wait;
    let mut b = vec![0u8; ipc::MAX_RECORD];
    loop {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Vec::new();
        }
        sock::set_timeouts(fd, left, true).unwrap();
        let Ok(n) = sock::recv(fd, &mut b) else {
            return Vec::new();
        };
        let mads: Vec<_> = fwd::records(&b[..n])
            .filter_map(|r| match r {
                Ok(fwd::Rec::Mad(_, m)) => Some(ibcm::wire::CmMad::parse(m).unwrap().msg),
                Ok(fwd::Rec::StatAsk { .. } | fwd::Rec::IdsAsk { .. }) => None,
                other => panic!("not a MAD: {other:?}"),
            })
            .collect();
        if !mads.is_empty() {
            return mads;
        }
    }
}

/// A forwarded process gone in DREQ_SENT (rping's client destroys its id
/// there and exits): its DREQ goes again only when no DREP came in the
/// DREQ's own wait, from its REQ's timeouts; a DREP queued behind the
/// exit settles it. Its device stays open until then, and closes after
/// (docs/SERVICE.md Round 23).
#[test]
fn forward_a_dead_processes_dreq_goes_again_only_without_a_drep() {
    use ibcm::engine::MadDest;
    use ibcm::engine::ids::IdCodec;
    use ibcm::ipc::fwd;
    use ibcm::wire::{CmMad, CmMsg, Drep, Dreq, Gid, Rep, Req, Rtu};
    const SID: u64 = 0x6161;
    let d = Daemon::start("fwd-dreq-again");
    let (da, db) = (net::soft(61), net::soft(62));
    let (a, oa) = raw_fwd_open(&d, &da);
    let (b, ob) = raw_fwd_open(&d, &db);
    let ga: Gid = net::ip(61).parse().unwrap();
    let gb: Gid = net::ip(62).parse().unwrap();
    let to = |sgid: Gid, dgid: Gid| MadDest {
        port: 1,
        dgid,
        sgid,
        pkey: 0xffff,
        hop_limit: 64,
        has_grh: true,
        dest_qp: 1,
        ..MadDest::default()
    };
    let send = |fd: &std::os::fd::OwnedFd, dest: MadDest, msg: CmMsg| {
        let mut m = Vec::new();
        fwd::put_dest(&mut m, &dest, &CmMad::send(9, 0, msg).to_bytes());
        sock::send(fd, &m).unwrap();
    };
    let mut m = Vec::new();
    fwd::put_listen(&mut m, 1, SID);
    sock::send(&b, &m).unwrap();
    let mut buf = vec![0u8; ipc::MAX_RECORD];
    let n = sock::recv(&b, &mut buf).unwrap();
    assert!(matches!(
        fwd::records(&buf[..n]).next(),
        Some(Ok(fwd::Rec::Listened { seq: 1, err: 0 }))
    ));
    // Process `from` sends `msg`; process `rx` gets exactly it.
    let pass =
        |from: &std::os::fd::OwnedFd, rx: &std::os::fd::OwnedFd, dest: MadDest, msg: CmMsg| {
            let want = std::mem::discriminant(&msg);
            send(from, dest, msg);
            let got = next_mads(rx, Duration::from_secs(5));
            assert!(
                matches!(&got[..], [m] if std::mem::discriminant(m) == want),
                "{got:?}"
            );
        };
    let comm = |o: &ipc::FwdOpened, n: u32| IdCodec::new(o.id_key).encode(n << 7 | o.proc_slot);
    // Two connections, A active; A sends each its DREQ. The REQ asks for
    // a DREQ wait of 2 × 1 + 2,048 ms (packet life time 0, remote CM
    // response timeout 19).
    let mut conns = Vec::new();
    for i in 1..=2u32 {
        let (ca, cb) = (comm(&oa, i), comm(&ob, i));
        let mut req = Req {
            local_comm_id: ca,
            service_id: SID,
            local_qpn: 0x100 + i,
            local_ca_guid: 0xa1,
            remote_cm_response_timeout: 19,
            local_cm_response_timeout: 19,
            max_cm_retries: 15,
            ..Req::default()
        };
        req.primary.local_ack_timeout = 1;
        pass(&a, &b, to(ga, gb), CmMsg::Req(req));
        let rep = Rep {
            local_comm_id: cb,
            remote_comm_id: ca,
            local_qpn: 0x200 + i,
            local_ca_guid: 0xb1,
            ..Rep::default()
        };
        pass(&b, &a, to(gb, ga), CmMsg::Rep(rep));
        let rtu = Rtu {
            local_comm_id: ca,
            remote_comm_id: cb,
            ..Rtu::default()
        };
        pass(&a, &b, to(ga, gb), CmMsg::Rtu(rtu));
        let dreq = Dreq {
            local_comm_id: ca,
            remote_comm_id: cb,
            remote_qpn: 0x200 + i,
            ..Dreq::default()
        };
        pass(&a, &b, to(ga, gb), CmMsg::Dreq(dreq));
        conns.push((ca, cb));
    }
    // A goes, in DREQ_SENT twice: nothing is sent for it yet, and its
    // device stays open.
    drop(a);
    let gone = Instant::now();
    assert!(
        served::wait_for(Duration::from_secs(5), || d.log().contains("go again")),
        "{}",
        d.log()
    );
    assert!(d.log().contains("gone: 0 MAD(s) sent"), "{}", d.log());
    assert!(d.fwd_stat(&da).is_some(), "A's device closed at once");
    // B answers the first DREQ (the DREP A's exit raced), not the second.
    let (ca1, cb1) = conns[0];
    let drep = Drep {
        local_comm_id: cb1,
        remote_comm_id: ca1,
        ..Drep::default()
    };
    send(&b, to(gb, ga), CmMsg::Drep(drep));
    // The second connection's DREQ comes again, once its wait is over;
    // the first's never.
    let (ca2, cb2) = conns[1];
    let got = next_mads(&b, Duration::from_secs(10));
    let waited = gone.elapsed();
    match &got[..] {
        [CmMsg::Dreq(q)] => assert_eq!(
            (q.local_comm_id, q.remote_comm_id, q.remote_qpn),
            (ca2, cb2, 0x202)
        ),
        other => panic!("{other:?}\n{}", d.log()),
    }
    assert!(
        waited >= Duration::from_millis(1900),
        "sent again after {waited:?}, before its wait"
    );
    assert!(next_mads(&b, Duration::from_secs(3)).is_empty());
    assert!(d.log().contains("sent again"), "{}", d.log());
    // Nothing left to wait for: A's device closes, B's stays.
    assert!(
        served::wait_for(Duration::from_secs(5), || d.fwd_stat(&da).is_none()),
        "{}",
        d.log()
    );
    assert!(d.fwd_stat(&db).is_some());
}

/// `ibcm stat` of a forwarded device counts what its processes gone did:
/// each gives its last counters as it closes the device (or exits), and
/// the service keeps them in the device's (the kernel's CM counters of a
/// port do not drop when a process leaves either).
#[test]
fn forward_counters_keep_the_counts_of_processes_gone() {
    let d = Daemon::start("fwd-counters");
    let dev = &net::soft(63);
    // This process keeps the device open (its own counters are zero).
    let holder = Device::open_forwarded(dev, &d.socket).unwrap();
    let mut l = Listener::spawn_fwd(&d, &["--device", dev, "--count", "1", "--timeout", "30"]);
    assert!(l.wait_listening(), "{}", l.out());
    let c = d
        .connect(dev, &net::ip(63), &["--timeout", "10"])
        .env("IBCM_SERVICE_MODE", "forward")
        .output()
        .unwrap();
    assert!(c.status.success(), "{}{}", text(&c.stdout), text(&c.stderr));
    assert!(l.child.wait().unwrap().success(), "{}", l.out());
    assert!(
        served::wait_for(Duration::from_secs(5), || d
            .fwd_stat(dev)
            .is_some_and(|s| s["processes"] == 1)),
        "{}",
        d.log()
    );
    let s = d.fwd_stat(dev).expect("the holder keeps it open");
    let names: Vec<String> = {
        let o = d
            .ibcm(&["stat", "--json", "--socket", d.socket.to_str().unwrap()])
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v["attributes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_string())
            .collect()
    };
    let count = |dir: &str, attr: &str| {
        let i = names.iter().position(|n| n == attr).unwrap();
        s["cm"][dir][i].as_u64().unwrap()
    };
    // One connection, both ends gone: each MAD counted once sent and
    // once received, the listener's two ids and the client's one.
    for attr in ["REQ", "REP", "RTU"] {
        assert_eq!(
            (count("tx", attr), count("rx", attr)),
            (1, 1),
            "{attr}: {s}"
        );
    }
    assert_eq!(s["cm"]["ids_created"], 3, "{s}");
    holder.close();
}
