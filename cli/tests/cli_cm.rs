//! The CLI's connection commands end to end over the UDP software fabric:
//! `ibcm listen` + `ibcm connect` exchange private data, and `ibcm bench`
//! reports a complete, well-formed result (numbers are not asserted).

mod common;

use common::net;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// The binary with its devices in-process: these tests run one process per
/// address and check the CLI, not the host CM service (cli/tests/service.rs
/// does), and must not start one at the host's default socket.
fn ibcm() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ibcm"));
    c.env("IBCM_SERVICE", "off");
    c
}

/// `ibcm listen` (in the background, `--timeout 20` unless `listen` says
/// otherwise) and `ibcm connect` against it.
struct ListenConnect {
    listen: Output,
    connect: Output,
}

impl ListenConnect {
    /// Runs both; the listener must exit successfully.
    fn run(listen: &[&str], connect: &[&str]) -> ListenConnect {
        let server = ibcm()
            .arg("listen")
            .args(["--timeout", "20"])
            .args(listen)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(300));
        let connect = ibcm().arg("connect").args(connect).output().unwrap();
        let listen = server.wait_with_output().unwrap();
        assert!(
            listen.status.success(),
            "listen failed:\n{}\n{}",
            text(&listen.stdout),
            text(&listen.stderr)
        );
        ListenConnect { listen, connect }
    }

    fn listen_out(&self) -> String {
        text(&self.listen.stdout)
    }

    fn connect_out(&self) -> String {
        text(&self.connect.stdout)
    }

    fn connected(&self) -> bool {
        self.connect.status.success()
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn listen_and_connect_exchange_private_data() {
    let r = ListenConnect::run(
        &[
            "--device",
            &net::soft(1),
            "--count",
            "3",
            "--private-data",
            "from-server",
        ],
        &[
            "--device",
            &net::soft(2),
            "--dest",
            &net::ip(1),
            "--count",
            "3",
            "--private-data",
            "from-client",
        ],
    );
    let cout = r.connect_out();
    assert!(
        r.connected(),
        "connect failed:\n{cout}\n{}",
        text(&r.connect.stderr)
    );
    assert_eq!(cout.matches(" REP_RECEIVED").count(), 3, "{cout}");
    assert_eq!(
        cout.matches("private_data=\"from-server\"").count(),
        6,
        "REP and DREP carry it:\n{cout}"
    );
    assert!(
        cout.contains("3 of 3 connection(s) established and disconnected"),
        "{cout}"
    );
    let sout = r.listen_out();
    assert_eq!(
        sout.matches(&format!("REQ_RECEIVED from {}", net::addr(2)))
            .count(),
        3,
        "{sout}"
    );
    assert_eq!(
        sout.matches("private_data=\"from-client\"").count(),
        9,
        "REQ, RTU, DREQ:\n{sout}"
    );
    assert!(sout.contains("3 connection(s) handled, 0 failed"), "{sout}");
    // Counters are printed on stderr.
    let serr = text(&r.listen.stderr);
    assert!(serr.contains("rx             REQ=3 RTU=3 DREQ=3"), "{serr}");
}

#[test]
fn listen_reject_is_reported_to_the_client() {
    let r = ListenConnect::run(
        &[
            "--device",
            &net::soft(3),
            "--reject",
            "28",
            "--private-data",
            "go away",
        ],
        &["--device", &net::soft(4), "--dest", &net::ip(3)],
    );
    let cout = r.connect_out();
    assert!(!r.connected());
    assert!(
        cout.contains("REJ_RECEIVED reason=28 (consumer defined) private_data=\"go away\""),
        "{cout}"
    );
}

/// Runs `ibcm bench ARGS --json -n N`; checks that the report is complete
/// and every connection was established; returns it.
fn check_bench(args: &[&str], n: usize) -> serde_json::Value {
    let out = ibcm()
        .arg("bench")
        .args(args)
        .args(["--json", "--connections", &n.to_string()])
        .output()
        .unwrap();
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "bench failed: {s}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = s.lines().last().unwrap();
    assert!(line.starts_with('{') && line.ends_with('}'), "{line}");
    let v: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
    for key in [
        "connections",
        "established",
        "failed",
        "connect_per_s",
        "disconnect_per_s",
        "cpu_s",
        "max_rss_kib",
    ] {
        assert!(v[key].as_f64().is_some_and(|x| x >= 0.0), "{key} in {line}");
    }
    // Compact, as scripts grep it (`"mismatches":0`).
    for key in ["connect_us", "disconnect_us", "req_rep_us", "rep_rtu_us"] {
        assert!(
            line.contains(&format!("\"{key}\":{{\"p50\":")),
            "{key} in {line}"
        );
        assert!(v[key]["p99"].is_number(), "{key} in {line}");
    }
    assert_eq!(v["connections"], n, "{line}");
    assert_eq!(v["established"], n, "{line}");
    assert_eq!(v["failed"], 0, "{line}");
    v
}

#[test]
fn bench_over_udp_two_processes_completes() {
    let v = check_bench(
        &[
            "--server",
            &net::soft(5),
            "--client",
            &net::soft(6),
            "--baseline",
        ],
        1000,
    );
    // The baseline and its rungs with the wire's per-message work, each
    // run to the end (a rung that did not complete fails the bench).
    let b = &v["udp_baseline"];
    assert!(b["exchanges_per_s"].as_f64().unwrap() > 0.0, "{v}");
    assert!(b["cpu_us"].as_f64().unwrap() > 0.0, "{v}");
    let floor = b["floor"].as_array().unwrap();
    let names: Vec<_> = floor.iter().map(|r| r["work"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        ["frame", "frame+codec", "frame+codec+icrc-check"],
        "{v}"
    );
    for r in floor {
        assert!(r["exchanges_per_s"].as_f64().unwrap() > 0.0, "{v}");
        assert!(r["ratio"].as_f64().unwrap() > 0.0, "{v}");
        assert!(r["cpu_us"].as_f64().unwrap() > 0.0, "{v}");
    }
}

#[test]
fn bench_over_loopback_with_two_shards_completes() {
    check_bench(
        &[
            "--fabric",
            "loopback",
            "--server",
            "loop:10.9.0.1",
            "--client",
            "loop:10.9.0.2",
            "--threads",
            "2",
        ],
        2000,
    );
}

/// `--verify` with the server in this process: both sides' outcomes are
/// compared and nothing is left on either side.
#[test]
fn bench_verify_with_the_server_in_this_process() {
    let v = check_bench(
        &[
            "--fabric",
            "loopback",
            "--server",
            "loop:10.9.2.1",
            "--client",
            "loop:10.9.2.2",
            "--verify",
            "--cm-timeout",
            "14",
        ],
        200,
    );
    let verify = &v["verify"];
    assert_eq!(verify["both_ok"], 200, "{v}");
    assert_eq!(verify["mismatches"], 0, "{v}");
    for key in [
        "client_live_ids",
        "client_timers",
        "server_live_ids",
        "server_timers",
    ] {
        assert_eq!(verify[key], 0, "{key}: {v}");
    }
    assert_eq!(
        verify["server_ids_created"], 201,
        "200 ids and the listener"
    );
    assert_eq!(verify["server_ids_destroyed"], 201, "{v}");
}

/// `bench --svg`: one SVG document holding the latency CDFs (one curve per
/// step) and the rate over time.
#[test]
fn bench_svg_draws_cdfs_and_rate() {
    let path = std::env::temp_dir().join(format!("ibcm-bench-{}.svg", std::process::id()));
    let out = ibcm()
        .args([
            "bench",
            "--fabric",
            "loopback",
            "--server",
            "loop:10.9.1.1",
            "--client",
            "loop:10.9.1.2",
            "-n",
            "500",
            "-c",
            "16",
            "--svg",
        ])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let svg = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    assert!(svg.starts_with("<?xml") && svg.trim_end().ends_with("</svg>"));
    assert_eq!(
        svg.matches("<svg").count(),
        3,
        "a document holding two pictures"
    );
    assert_eq!(svg.matches("</svg>").count(), 3);
    for label in [
        "REQ-&gt;REP",
        "connect (REQ-&gt;RTU)",
        "DREQ-&gt;DREP",
        "established per second",
    ] {
        assert!(svg.contains(label), "{label} missing");
    }
    assert!(!svg.contains("no data"), "every step has latencies");
}

/// `ListenConnect::run`, as (listen stdout, connect stdout, connect
/// success).
fn listen_connect(listen: &[&str], connect: &[&str]) -> (String, String, bool) {
    let r = ListenConnect::run(listen, connect);
    (r.listen_out(), r.connect_out(), r.connected())
}

#[test]
fn rdma_cm_header_and_listener_disconnect() {
    // The interop options (interop/run.sh): rdma_cm IP header, rdma_cm port
    // space service IDs, the listener disconnecting, the client waiting.
    let (l, c, ok) = listen_connect(
        &[
            "--device",
            &net::soft(7),
            "--port",
            "7471",
            "--rdma-cm",
            "--disconnect-delay",
            "100",
        ],
        &[
            "--device",
            &net::soft(8),
            "--dest",
            &net::ip(7),
            "--port",
            "7471",
            "--rdma-cm",
            "--wait-disconnect",
            "--private-data",
            "hi",
        ],
    );
    assert!(ok, "{c}");
    assert!(l.contains("service 0x0000000001061d2f"), "{l}");
    let hdr = regex_like(
        &l,
        &format!("rdma_cm={}:", net::addr(8)),
        &format!("->{} private_data=\"hi\"", net::addr(7)),
    );
    assert!(hdr, "{l}");
    assert!(c.contains("DREQ_RECEIVED"), "{c}");
    assert!(l.contains("DREP_RECEIVED"), "{l}");
}

/// `s` has a line with `a`, then digits, then `b`.
fn regex_like(s: &str, a: &str, b: &str) -> bool {
    s.lines().any(|line| {
        line.find(a).is_some_and(|i| {
            let rest = &line[i + a.len()..];
            let n = rest.bytes().take_while(u8::is_ascii_digit).count();
            n > 0 && rest[n..].starts_with(b)
        })
    })
}

#[test]
fn sidr_resolution_and_expected_rejects() {
    let (l, c, ok) = listen_connect(
        &["--device", &net::soft(9), "--sidr", "--rdma-cm"],
        &[
            "--device",
            &net::soft(10),
            "--dest",
            &net::ip(9),
            "--sidr",
            "--rdma-cm",
        ],
    );
    assert!(ok, "{c}");
    assert!(l.contains("SIDR_REQ_RECEIVED service=0x1111c06"), "{l}");
    assert!(
        c.contains("SIDR_REP_RECEIVED status=0 qpn=0x1000 qkey=0x1234567"),
        "{c}"
    );
    // SIDR refused with status 1 (--reject gives the SIDR status).
    let (_, c, ok) = listen_connect(
        &["--device", &net::soft(9), "--sidr", "--reject", "1"],
        &[
            "--device",
            &net::soft(10),
            "--dest",
            &net::ip(9),
            "--sidr",
            "--expect-reject",
            "1",
        ],
    );
    assert!(ok, "{c}");
    assert!(
        c.contains("1 of 1 service ID resolution(s) refused as expected"),
        "{c}"
    );
    // No listener on the port: REJ 8, which --expect-reject 8 wants.
    let (_, c, ok) = listen_connect(
        &[
            "--device",
            &net::soft(9),
            "--port",
            "1",
            "--count",
            "0",
            "--timeout",
            "2",
        ],
        &[
            "--device",
            &net::soft(10),
            "--dest",
            &net::ip(9),
            "--expect-reject",
            "8",
        ],
    );
    assert!(ok, "{c}");
    assert!(c.contains("REJ_RECEIVED reason=8"), "{c}");
}
