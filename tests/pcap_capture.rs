//! The CM MAD capture (`ibcm_pcap_start` / `ibcm_pcap_stop`, `IBCM_PCAP`):
//! a connect / accept / RTU / disconnect between two devices of this
//! process on the in-process and the UDP fabric is recorded once from each
//! device's point of view, with directions, valid ICRCs and identical
//! frames on both sides; the size cap holds; the C error returns; the
//! environment variable in a child process; and tshark decodes the file as
//! RoCEv2 InfiniBand CM (skipped without tshark, except under CI=true).

mod rel_common;

use ibcm::api::{CmId, Device};
use ibcm::capture::{self, Direction, Reader};
use ibcm::engine::{Event, EventType as E, RepParams};
use ibcm::ffi::{ibcm_pcap_start, ibcm_pcap_stop};
use rel_common::{net, open, req};
use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const SERVICE: u64 = 0x0000_0000_0091_0001;
const EINVAL: i32 = 22;
const EBUSY: i32 = 16;
const ENOENT: i32 = 2;

/// The capture is process-wide: the tests of this file take turns.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A capture file in the temporary directory, named after this process,
/// removed when the test passes (kept for a look when it fails).
struct Tmp(PathBuf);

impl std::ops::Deref for Tmp {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<Path> for Tmp {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Tmp {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

fn tmp(name: &str) -> Tmp {
    let file = format!("ibcm-pcap-test-{}-{name}", std::process::id());
    Tmp(std::env::temp_dir().join(file))
}

fn start(path: &Path, limit: u64) -> i32 {
    let c = CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    unsafe { ibcm_pcap_start(c.as_ptr(), limit) }
}

fn stop() -> i32 {
    unsafe { ibcm_pcap_stop() }
}

/// Events of one side, in order.
#[derive(Default)]
struct Log {
    events: Mutex<Vec<E>>,
    cv: Condvar,
}

impl Log {
    fn push(&self, k: E) {
        self.events.lock().unwrap().push(k);
        self.cv.notify_all();
    }
    fn wait(&self, k: E) {
        let end = Instant::now() + Duration::from_secs(20);
        let mut g = self.events.lock().unwrap();
        while !g.contains(&k) {
            let left = end.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "no {k:?}; events: {:?}", *g);
            g = self.cv.wait_timeout(g, left).unwrap().0;
        }
    }
}

/// One connection from `client` to `server` (device names), established
/// and disconnected by the client; returns the two devices, still open.
fn connection(server: &str, client: &str, server_ip: &str) -> [Arc<Device>; 2] {
    let sdev = open(server, 0);
    let cdev = open(client, 0);
    let slog = Arc::new(Log::default());
    let clog = Arc::new(Log::default());
    let passive: Arc<Mutex<Vec<CmId>>> = Arc::default();
    let (sl, pv) = (slog.clone(), passive.clone());
    let listener = sdev
        .create_id(
            None,
            std::ptr::null_mut(),
            Some(Arc::new(move |id: &CmId, ev: &Event| {
                match ev.kind {
                    E::ReqReceived => {
                        pv.lock().unwrap().push(id.clone());
                        let rep = RepParams {
                            qp_num: 0x91,
                            starting_psn: 0x1234,
                            responder_resources: 1,
                            initiator_depth: 1,
                            rnr_retry_count: 7,
                            ..RepParams::default()
                        };
                        id.send_rep(&rep).unwrap();
                    }
                    E::DreqReceived => id.send_drep(&[]).unwrap(),
                    _ => {}
                }
                sl.push(ev.kind);
                0
            })),
        )
        .unwrap();
    listener.listen(SERVICE).unwrap();
    let cl = clog.clone();
    let id = cdev
        .create_id(
            None,
            std::ptr::null_mut(),
            Some(Arc::new(move |id: &CmId, ev: &Event| {
                if ev.kind == E::RepReceived {
                    id.send_rtu(&[]).unwrap();
                }
                cl.push(ev.kind);
                0
            })),
        )
        .unwrap();
    // Response timeouts of 4.096 us * 2^20 ≈ 4.3 s: no retransmissions.
    id.send_req(&req(&cdev, server_ip, SERVICE, 0x51, 20, 3))
        .unwrap();
    slog.wait(E::RtuReceived);
    id.send_dreq(&[]).unwrap();
    clog.wait(E::DrepReceived);
    slog.wait(E::DreqReceived);
    id.destroy().unwrap();
    for p in passive.lock().unwrap().drain(..) {
        p.destroy().unwrap();
    }
    listener.destroy().unwrap();
    [sdev, cdev]
}

fn close(devs: [Arc<Device>; 2]) {
    for d in devs {
        d.close();
    }
}

/// One record of a capture as this test looks at it.
#[derive(Clone, PartialEq, Eq)]
struct Rec {
    iface: String,
    dir: Option<Direction>,
    attr: &'static str,
    icrc_ok: bool,
    ts_nanos: u64,
    frame: Vec<u8>,
}

impl std::fmt::Debug for Rec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {:?} {} (ICRC ok: {}, {} bytes)",
            self.iface,
            self.dir,
            self.attr,
            self.icrc_ok,
            self.frame.len()
        )
    }
}

fn records(path: &Path) -> Vec<Rec> {
    let data = std::fs::read(path).unwrap();
    let mut r = Reader::new(&data).unwrap();
    assert_eq!(r.format(), capture::FileFormat::Pcapng);
    let mut out = Vec::new();
    while let Some(p) = r.next() {
        let p = p.unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let f = capture::decode_packet(&p)
            .unwrap_or_else(|why| panic!("record {} is not a CM MAD: {why:?}", p.frame));
        let attr = u16::from_be_bytes([f.mad[16], f.mad[17]]);
        out.push(Rec {
            iface: r.interface_name(p.interface).unwrap_or("?").to_string(),
            dir: p.direction,
            attr: ibcm::wire::attr::name(attr).unwrap_or("?"),
            icrc_ok: f.icrc_ok,
            ts_nanos: p.ts_nanos,
            frame: p.data.to_vec(),
        });
    }
    out
}

/// What each side must have seen, in order.
const CLIENT_VIEW: [(Direction, &str); 5] = [
    (Direction::Outbound, "REQ"),
    (Direction::Inbound, "REP"),
    (Direction::Outbound, "RTU"),
    (Direction::Outbound, "DREQ"),
    (Direction::Inbound, "DREP"),
];

fn server_view() -> Vec<(Direction, &'static str)> {
    let flip = |d| match d {
        Direction::Inbound => Direction::Outbound,
        Direction::Outbound => Direction::Inbound,
    };
    CLIENT_VIEW.iter().map(|&(d, a)| (flip(d), a)).collect()
}

fn view(recs: &[Rec], iface: &str) -> Vec<(Direction, &'static str)> {
    recs.iter()
        .filter(|r| r.iface == iface)
        .map(|r| (r.dir.expect("every record has a direction"), r.attr))
        .collect()
}

/// The capture of one connection between `client` and `server`.
fn check_connection(recs: &[Rec], server: &str, client: &str, began: u64) {
    assert_eq!(recs.len(), 10, "{recs:#?}");
    let names: std::collections::BTreeSet<&str> = recs.iter().map(|r| r.iface.as_str()).collect();
    assert_eq!(
        names,
        [server, client].into_iter().collect(),
        "one interface per device, named like it"
    );
    assert_eq!(view(recs, client), CLIENT_VIEW, "client's view");
    assert_eq!(view(recs, server), server_view(), "server's view");
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    for (i, r) in recs.iter().enumerate() {
        assert!(r.icrc_ok, "record {i}: ICRC");
        assert!(
            (began..=now).contains(&r.ts_nanos),
            "record {i}: timestamp {} outside the run [{began}, {now}]",
            r.ts_nanos
        );
        // Every outbound frame is recorded, identical, as inbound by the
        // other device, later.
        if r.dir == Some(Direction::Outbound) {
            assert!(
                recs[i + 1..]
                    .iter()
                    .any(|o| o.dir == Some(Direction::Inbound)
                        && o.iface != r.iface
                        && o.frame == r.frame),
                "record {i} ({}) has no matching inbound record",
                r.attr
            );
        }
    }
}

fn now_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

fn tshark_available() -> bool {
    Command::new("tshark")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// The capture as tshark sees it: one line per frame with the interface
/// name, direction, RoCEv2 attribute, checksum verdicts and ICRC.
fn tshark_lines(path: &Path) -> Option<Vec<Vec<String>>> {
    if !tshark_available() {
        assert!(
            !ci(),
            "CI=true but no tshark on PATH (scripts/deps.sh installs it)"
        );
        eprintln!("note: no tshark on PATH: skipping the tshark decode of the capture");
        return None;
    }
    let out = Command::new("tshark")
        .args([
            "-n",
            "-o",
            "ip.check_checksum:TRUE",
            "-o",
            "udp.check_checksum:TRUE",
            "-r",
        ])
        .arg(path)
        .args(["-Y", "infiniband.mad.mgmtclass == 7", "-T", "fields"])
        .args(["-E", "separator=;"])
        .args([
            "-e",
            "frame.interface_name",
            "-e",
            "frame.packet_flags_direction",
            "-e",
            "infiniband.mad.attributeid",
            "-e",
            "ip.checksum.status",
            "-e",
            "udp.checksum.status",
            "-e",
            "infiniband.invariant.crc",
        ])
        .output()
        .expect("tshark runs");
    assert!(
        out.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| l.split(';').map(str::to_string).collect())
            .collect(),
    )
}

/// tshark reads every record as a CM MAD with our direction, attribute
/// and ICRC, and good IP and UDP checksums.
fn check_with_tshark(path: &Path, recs: &[Rec]) {
    let Some(lines) = tshark_lines(path) else {
        return;
    };
    assert_eq!(lines.len(), recs.len(), "tshark: {lines:?}");
    let data = std::fs::read(path).unwrap();
    let frames = capture::read_bytes(&data).unwrap().frames;
    for ((l, r), f) in lines.iter().zip(recs).zip(&frames) {
        let attr = u16::from_be_bytes([f.mad[16], f.mad[17]]);
        let dir = match r.dir {
            Some(Direction::Inbound) => 1,
            Some(Direction::Outbound) => 2,
            None => 0,
        };
        let ip_status = if l[3].is_empty() { "" } else { "1" }; // IPv6 has none
        let want = [
            r.iface.clone(),
            format!("{dir:#010x}"),
            format!("{attr:#06x}"),
            ip_status.to_string(),
            "1".to_string(),
            // tshark prints the ICRC bytes as a big-endian number.
            format!("{:#010x}", f.icrc.swap_bytes()),
        ];
        assert_eq!(l.as_slice(), want.as_slice(), "tshark line for {r:?}");
    }
}

#[test]
fn loopback_connection_is_captured_from_both_sides() {
    let _s = serial();
    let path = tmp("loop.pcapng");
    let began = now_nanos();
    assert_eq!(start(&path, 0), 0);
    close(connection(
        &format!("loop:{}", net::addr(1)),
        &format!("loop:{}", net::addr(2)),
        &net::ip(1),
    ));
    assert_eq!(records(&path).len(), 10, "written when the devices closed");
    assert_eq!(stop(), 0);
    let recs = records(&path);
    check_connection(
        &recs,
        &format!("loop:{}", net::addr(1)),
        &format!("loop:{}", net::addr(2)),
        began,
    );
    check_with_tshark(&path, &recs);
}

#[test]
fn ipv6_loopback_connection_is_captured() {
    let _s = serial();
    let path = tmp("loop6.pcapng");
    let began = now_nanos();
    assert_eq!(start(&path, 0), 0);
    close(connection(
        "loop:fd00::91:1",
        "loop:fd00::91:2",
        "fd00::91:1",
    ));
    assert_eq!(stop(), 0);
    let recs = records(&path);
    check_connection(&recs, "loop:fd00::91:1", "loop:fd00::91:2", began);
    let data = std::fs::read(&path).unwrap();
    for f in capture::read_bytes(&data).unwrap().frames {
        assert!(f.src.is_ipv6() && f.dst.is_ipv6());
    }
    check_with_tshark(&path, &recs);
}

#[test]
fn soft_connection_is_captured_from_both_sides() {
    let _s = serial();
    let path = tmp("soft.pcapng");
    let began = now_nanos();
    assert_eq!(start(&path, 0), 0);
    // A non-default UDP port: the frames keep the real source port, go to
    // 4791 (so decoders see RoCEv2) and carry the ICRC for that header.
    let devs = connection(
        &format!("soft:{}:4799", net::addr(3)),
        &format!("soft:{}:4799", net::addr(4)),
        &net::ip(3),
    );
    // Written within 100 ms, without a stop or a close.
    assert!(
        rel_common::until(Duration::from_secs(5), || records(&path).len() == 10),
        "buffered records not written: {} of 10",
        records(&path).len()
    );
    close(devs);
    assert_eq!(stop(), 0);
    let recs = records(&path);
    check_connection(
        &recs,
        &format!("soft:{}:4799", net::addr(3)),
        &format!("soft:{}:4799", net::addr(4)),
        began,
    );
    // The real addresses and source port.
    let data = std::fs::read(&path).unwrap();
    for f in capture::read_bytes(&data).unwrap().frames {
        let src = f.src.to_string();
        assert!(src == net::ip(3) || src == net::ip(4), "{src}");
        assert_eq!((f.src_port, f.dst_port), (4799, 4791));
    }
    check_with_tshark(&path, &recs);
}

#[test]
fn size_limit_is_honoured() {
    let _s = serial();
    let full = tmp("full.pcapng");
    assert_eq!(start(&full, 0), 0);
    close(connection(
        &format!("loop:{}", net::addr(7)),
        &format!("loop:{}", net::addr(8)),
        &net::ip(7),
    ));
    assert_eq!(stop(), 0);
    let all = records(&full);
    assert_eq!(all.len(), 10);
    let full_len = std::fs::metadata(&full).unwrap().len();
    for limit in [1u64, 200, 1500, 3000, full_len - 1, full_len] {
        let path = tmp(&format!("limit-{limit}.pcapng"));
        assert_eq!(start(&path, limit), 0);
        close(connection(
            &format!("loop:{}", net::addr(7)),
            &format!("loop:{}", net::addr(8)),
            &net::ip(7),
        ));
        assert_eq!(stop(), 0, "limit {limit}");
        let size = std::fs::metadata(&path).unwrap().len();
        let got = records(&path);
        // The section header is always written; beyond it, the cap holds.
        if limit >= 200 {
            assert!(size <= limit, "limit {limit}: file is {size} bytes");
        }
        if limit == full_len {
            assert_eq!(got.len(), 10);
        } else {
            assert!(got.len() < 10, "limit {limit}: {} records", got.len());
        }
        // What is there is the start of the full capture.
        let key = |r: &Rec| (r.iface.clone(), r.dir, r.attr);
        let want: Vec<_> = all.iter().take(got.len()).map(key).collect();
        let have: Vec<_> = got.iter().map(key).collect();
        assert_eq!(have, want, "limit {limit}");
    }
}

#[test]
fn c_api_errors() {
    let _s = serial();
    assert_eq!(stop(), -ENOENT, "stop without a capture");
    assert_eq!(unsafe { ibcm_pcap_start(std::ptr::null(), 0) }, -EINVAL);
    assert_eq!(unsafe { ibcm_pcap_start(c"".as_ptr(), 0) }, -EINVAL);
    assert_eq!(
        start(Path::new("/nonexistent-dir/x.pcapng"), 0),
        -ENOENT,
        "open error"
    );
    let path = tmp("errors.pcapng");
    assert_eq!(start(&path, 0), 0);
    assert_eq!(start(&path, 0), -EBUSY, "second start");
    assert_eq!(start(&tmp("other.pcapng"), 0), -EBUSY);
    assert_eq!(stop(), 0);
    assert_eq!(stop(), -ENOENT, "second stop");
    // A capture with no MADs is a valid, empty pcapng file.
    assert!(records(&path).is_empty());
    assert!(std::fs::metadata(&path).unwrap().len() > 0);
}

/// Runs only as the child of `environment_variable_starts_a_capture`.
/// Exits with both devices open and the last records likely still
/// buffered: the exit handler must complete the file.
#[test]
fn env_capture_child() {
    if std::env::var_os("IBCM_PCAP_TEST_CHILD").is_none() {
        return;
    }
    let _still_open = connection(&net::soft(5), &net::soft(6), &net::ip(5));
}

/// Runs `env_capture_child` with `IBCM_PCAP=path`; its stderr and PID.
fn run_child(path: &Path, limit: Option<&str>) -> (String, u32) {
    let mut c = Command::new(std::env::current_exe().unwrap());
    net::pass_to(&mut c)
        .args([
            "--exact",
            "env_capture_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("IBCM_PCAP_TEST_CHILD", "1")
        .env("IBCM_PCAP", path)
        .env_remove("IBCM_PCAP_LIMIT")
        .env_remove("IBCM_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(l) = limit {
        c.env("IBCM_PCAP_LIMIT", l);
    }
    let child = c.spawn().unwrap();
    let pid = child.id();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "child failed:\n{}\n{err}",
        String::from_utf8_lossy(&out.stdout)
    );
    (err, pid)
}

#[test]
fn environment_variable_starts_a_capture() {
    // `%p` is the process ID.
    let pattern = tmp("env-%p.pcapng");
    let began = now_nanos();
    let (err, pid) = run_child(&pattern, None);
    assert!(!err.contains("capture"), "unexpected messages: {err}");
    let path = Tmp(PathBuf::from(
        pattern.to_str().unwrap().replace("%p", &pid.to_string()),
    ));
    assert!(!pattern.exists());
    let recs = records(&path);
    check_connection(
        &recs,
        &format!("soft:{}:4791", net::addr(5)),
        &format!("soft:{}:4791", net::addr(6)),
        began,
    );

    // With a cap: the file stays under it and one warning says so.
    let path = tmp("env-limit.pcapng");
    let (err, _) = run_child(&path, Some("2k"));
    assert!(std::fs::metadata(&path).unwrap().len() <= 2048);
    let n = records(&path).len();
    assert!((1..10).contains(&n), "{n} records");
    assert_eq!(
        err.matches("size limit of 2048 bytes reached").count(),
        1,
        "{err}"
    );

    // A file that cannot be opened: said once, and the CM works on.
    let (err, _) = run_child(Path::new("/nonexistent-dir/x.pcapng"), None);
    let want = "IBCM_PCAP=/nonexistent-dir/x.pcapng: cannot capture: No such file";
    assert_eq!(err.matches(want).count(), 1, "{err}");
}
