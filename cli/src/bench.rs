//! `ibcm bench`: connection setup and teardown benchmark (like rdma-core's
//! cmtime). Establishes N connections with C connects in flight, then
//! disconnects them, and reports rates, per-step latency percentiles, CPU
//! time and peak memory. With `--baseline` the same sockets first run a
//! plain UDP request/response exchange of the same sizes and pattern
//! (3 datagrams per "connection"), so the report says how close the CM
//! comes to what the transport allows.
//!
//! Over the UDP fabric the server runs in a second process (this binary,
//! `bench --serve`), as two hosts would; `--processes 1` keeps it in one.

use crate::args;
use crate::baseline;
use ibcm::api::{
    CmId, Device, DeviceOptions, Event, EventType, RepParams, ReqParams, RustHandler, qp_type,
};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, IsTerminal, Write};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

const SERVICE: u64 = 0x0000_0000_0106_7fff;

#[derive(Clone)]
struct Opts {
    connections: usize,
    concurrency: usize,
    fabric: String,
    server: String,
    client: String,
    threads: u32,
    processes: u32,
    json: bool,
    baseline: bool,
    timeout: Duration,
    serve: bool,
    serve_baseline: bool,
    scale: bool,
    /// Command (split on spaces) the server process is started under, e.g.
    /// `ip netns exec NS`.
    server_wrap: Option<String>,
    /// REQ remote/local CM response timeouts (4.096 µs * 2^x) and retries.
    cm_timeout: u8,
    cm_local_timeout: u8,
    cm_retries: u8,
    /// Per-connection outcome check on both sides (see `verify`).
    verify: bool,
    /// How long the server waits for its ids to finish before reporting.
    settle: Duration,
    svg: Option<std::path::PathBuf>,
}

/// The long description in `ibcm bench --help`.
pub const ABOUT: &str = "\
Establishes N connections between a client and a server device with C
connects in flight, then disconnects them. Reports connect/disconnect
rates, latency percentiles per step (REQ->REP, REP->RTU, full connect,
DREQ->DREP), CPU seconds and peak memory.";

/// `ibcm bench`'s command line.
#[derive(clap::Args, Debug)]
#[command(override_usage = "\
ibcm bench [--connections N] [--concurrency C] [--fabric udp|loopback]
                  [--server soft:IP] [--client soft:IP] [--threads T]
                  [--processes 1|2] [--baseline] [--json] [--timeout SEC]
                  [--server-wrap CMD] [--cm-timeout X] [--cm-local-timeout X]
                  [--cm-retries N] [--verify] [--settle SEC] [--scale]")]
pub struct Args {
    /// how many connections
    #[arg(short = 'n', long, value_name = "N", default_value_t = 10_000)]
    pub connections: usize,
    /// connects (and disconnects) in flight
    #[arg(short = 'c', long, value_name = "C", default_value_t = 256,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub concurrency: usize,
    /// udp: the software fabric (server in a second process unless
    /// --processes 1); loopback: MADs stay in one process
    #[arg(long, value_name = "FABRIC", default_value = "udp", value_parser = ["udp", "loopback"])]
    pub fabric: String,
    /// the server device (loop: with --fabric loopback)
    #[arg(long, value_name = "DEVICE", default_value = "soft:127.0.0.2", value_parser = args::soft_or_loop_device)]
    pub server: String,
    /// the client device (loop: with --fabric loopback)
    #[arg(long, value_name = "DEVICE", default_value = "soft:127.0.0.3", value_parser = args::soft_or_loop_device)]
    pub client: String,
    /// engine shards and event-loop threads per device
    #[arg(long, value_name = "T", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub threads: u32,
    /// 2: the server runs in a second process (this binary), as on two
    /// hosts; 1: both in this one
    #[arg(long, value_name = "1|2", default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=2))]
    pub processes: u32,
    /// first run a plain UDP 3-datagram exchange with the same sizes and
    /// pattern and report ratio_to_udp
    #[arg(long)]
    pub baseline: bool,
    /// one JSON object instead of the text report
    #[arg(long)]
    pub json: bool,
    /// give up after SEC seconds
    #[arg(long, value_name = "SEC", default_value = "120", value_parser = args::seconds)]
    pub timeout: Duration,
    /// hold all N connections open in one process (loopback fabric), then
    /// report memory per id, id lookup cost and the time N pending timewait
    /// timers take to fire (e.g. --scale --connections 1000000)
    #[arg(long)]
    pub scale: bool,
    /// run the server process under this command, split on spaces (e.g.
    /// 'ip netns exec NS')
    #[arg(long, value_name = "CMD")]
    pub server_wrap: Option<String>,
    /// the REQ's remote CM response timeout (4.096 us * 2^X)
    #[arg(long, value_name = "X", default_value_t = 20, value_parser = clap::value_parser!(u8).range(0..=31))]
    pub cm_timeout: u8,
    /// the REQ's local CM response timeout (4.096 us * 2^X)
    #[arg(long, value_name = "X", default_value_t = 20, value_parser = clap::value_parser!(u8).range(0..=31))]
    pub cm_local_timeout: u8,
    /// the REQ's max CM retries
    #[arg(long, value_name = "N", default_value_t = 15, value_parser = clap::value_parser!(u8).range(0..=15))]
    pub cm_retries: u8,
    /// check every connection's outcome on both sides (established and
    /// cleanly disconnected on both, or an error on both), report leaked
    /// ids and timers on both sides, fail on any mismatch
    #[arg(long)]
    pub verify: bool,
    /// with --verify: how long the server waits for its ids to finish
    #[arg(long, value_name = "SEC", default_value = "20", value_parser = args::seconds)]
    pub settle: Duration,
    /// write the latency CDFs per step (against the UDP baseline with
    /// --baseline) and the connection rate over time to FILE as SVG
    #[arg(long, value_name = "FILE", value_hint = clap::ValueHint::FilePath)]
    pub svg: Option<std::path::PathBuf>,
    /// (internal) run as the server process of a two-process run
    #[arg(long, hide = true)]
    pub serve: bool,
    /// (internal) run as the baseline's responder process
    #[arg(long, hide = true)]
    pub serve_baseline: bool,
}

impl Opts {
    fn new(a: &Args) -> Opts {
        let mut o = Opts {
            connections: a.connections,
            concurrency: a.concurrency,
            fabric: a.fabric.clone(),
            server: a.server.clone(),
            client: a.client.clone(),
            threads: a.threads,
            processes: a.processes,
            json: a.json,
            baseline: a.baseline,
            timeout: a.timeout,
            serve: a.serve,
            serve_baseline: a.serve_baseline,
            scale: a.scale,
            server_wrap: a.server_wrap.clone(),
            cm_timeout: a.cm_timeout,
            cm_local_timeout: a.cm_local_timeout,
            cm_retries: a.cm_retries,
            verify: a.verify,
            settle: a.settle,
            svg: a.svg.clone(),
        };
        if o.fabric == "loopback" {
            if o.server.starts_with("soft:") {
                o.server = o.server.replacen("soft:", "loop:", 1);
            }
            if o.client.starts_with("soft:") {
                o.client = o.client.replacen("soft:", "loop:", 1);
            }
            o.processes = 1;
        }
        o
    }
}

// ------------------------------------------------------------ statistics

/// Latency percentiles in microseconds (one decimal in JSON).
#[derive(Default, Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
struct Pct {
    #[serde(serialize_with = "round1")]
    p50: f64,
    #[serde(serialize_with = "round1")]
    p99: f64,
    #[serde(serialize_with = "round1")]
    max: f64,
}

fn pct(mut v: Vec<u64>) -> Pct {
    if v.is_empty() {
        return Pct::default();
    }
    v.sort_unstable();
    let at = |q: f64| v[((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1] as f64 / 1e3;
    Pct {
        p50: at(0.50),
        p99: at(0.99),
        max: *v.last().unwrap() as f64 / 1e3,
    }
}

/// `x` rounded to `digits` decimals (what the JSON reports show).
fn rounded(x: f64, digits: i32) -> f64 {
    let m = 10f64.powi(digits);
    (x * m).round() / m
}

fn round1<S: serde::Serializer>(x: &f64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(rounded(*x, 1))
}

fn round3<S: serde::Serializer>(x: &f64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(rounded(*x, 3))
}

fn round4<S: serde::Serializer>(x: &f64, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(rounded(*x, 4))
}

/// A rate, as a whole number per second.
fn per_s(x: f64) -> u64 {
    x.round() as u64
}

/// What the server process (`bench --serve`) prints on one line when its
/// stdin closes, and the client reads back.
#[derive(Default, Debug, PartialEq, Serialize, Deserialize)]
struct ServerReport {
    rep_rtu_us: Pct,
    #[serde(default, serialize_with = "round3")]
    cpu_s: f64,
    #[serde(default)]
    max_rss_kib: u64,
    #[serde(default)]
    established: usize,
    #[serde(default)]
    errors: usize,
    /// With `--verify`.
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    verify: Option<ServerVerify>,
}

/// The server's side of `--verify`.
#[derive(Default, Debug, PartialEq, Serialize, Deserialize)]
struct ServerVerify {
    live_ids: usize,
    timers: usize,
    ids_created: u64,
    ids_destroyed: u64,
    rep_errors: usize,
    rejected: usize,
    /// The client comm IDs of the connections that ended cleanly here, and
    /// of the others.
    ok_ids: Vec<u32>,
    err_ids: Vec<u32>,
}

/// The client's `--verify` verdict (`"verify"` in the JSON report).
#[derive(Debug, Serialize)]
struct Verify {
    both_ok: usize,
    both_error: usize,
    client_ok_server_error: usize,
    client_error_server_ok: usize,
    client_ok_server_unknown: usize,
    mismatches: usize,
    client_live_ids: usize,
    client_timers: usize,
    server_live_ids: usize,
    server_timers: usize,
    server_rep_errors: usize,
    server_rejected: usize,
    server_ids_created: u64,
    server_ids_destroyed: u64,
}

/// `ibcm bench --json`.
#[derive(Debug, Serialize)]
struct Report {
    connections: usize,
    established: usize,
    failed: usize,
    connect_per_s: u64,
    disconnect_per_s: u64,
    connect_us: Pct,
    disconnect_us: Pct,
    req_rep_us: Pct,
    rep_rtu_us: Pct,
    #[serde(serialize_with = "round3")]
    cpu_s: f64,
    max_rss_kib: u64,
    fabric: String,
    processes: u32,
    concurrency: usize,
    threads: u32,
    #[serde(serialize_with = "round4")]
    connect_s: f64,
    #[serde(serialize_with = "round4")]
    disconnect_s: f64,
    retries: u64,
    timeouts: u64,
    rej_rx: u64,
    drops: u64,
    tx_errors: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    verify: Option<Verify>,
    #[serde(skip_serializing_if = "Option::is_none")]
    udp_baseline: Option<UdpBaseline>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ratio_to_udp: Option<Ratio>,
}

#[derive(Debug, Serialize)]
struct UdpBaseline {
    exchanges_per_s: u64,
    exchange_us: Pct,
}

#[derive(Debug, Serialize)]
struct Ratio {
    #[serde(serialize_with = "round3")]
    rate: f64,
    #[serde(serialize_with = "round3")]
    p50: f64,
}

/// `ibcm bench --scale --json`.
#[derive(Debug, Serialize)]
struct ScaleReport {
    connections: usize,
    established: usize,
    failed: usize,
    live_ids: usize,
    connect_per_s: u64,
    rss_kib_before: u64,
    rss_kib_established: u64,
    bytes_per_id: u64,
    #[serde(serialize_with = "round1")]
    lookup_ns: f64,
    disconnect_per_s: u64,
    pending_timers: usize,
    #[serde(serialize_with = "round3")]
    timers_fired_s: f64,
    leftover_ids: usize,
}

/// Prints `v` as one line of JSON on stdout.
fn print_json(v: &impl Serialize) {
    match serde_json::to_string(v) {
        Ok(s) => println!("{s}"),
        Err(e) => eprintln!("ibcm bench: cannot write the JSON report: {e}"),
    }
}

/// (user+system CPU seconds, peak RSS KiB) of this process.
fn usage() -> (f64, u64) {
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    (t(ru.ru_utime) + t(ru.ru_stime), ru.ru_maxrss as u64)
}

// ----------------------------------------------------------------- gate

/// Counts completions and limits work in flight.
struct Gate {
    m: Mutex<(usize, usize)>, // (in flight, done)
    cv: Condvar,
}

impl Gate {
    fn new() -> Gate {
        Gate {
            m: Mutex::new((0, 0)),
            cv: Condvar::new(),
        }
    }
    fn acquire(&self, limit: usize, deadline: Instant) -> bool {
        let mut g = self.m.lock().unwrap();
        while g.0 >= limit {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            g = self.cv.wait_timeout(g, left).unwrap().0;
        }
        g.0 += 1;
        true
    }
    /// Waits for a free slot, then takes up to `want` of the free slots.
    /// Returns how many (0 on timeout).
    fn acquire_up_to(&self, limit: usize, want: usize, deadline: Instant) -> usize {
        let mut g = self.m.lock().unwrap();
        while g.0 >= limit {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return 0;
            }
            g = self.cv.wait_timeout(g, left).unwrap().0;
        }
        let k = (limit - g.0).min(want);
        g.0 += k;
        k
    }
    fn release(&self) {
        let mut g = self.m.lock().unwrap();
        g.0 -= 1;
        g.1 += 1;
        self.cv.notify_all();
    }
    fn wait_done(&self, n: usize, deadline: Instant) -> usize {
        let mut g = self.m.lock().unwrap();
        while g.1 < n {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            g = self.cv.wait_timeout(g, left).unwrap().0;
        }
        g.1
    }
    fn reset(&self) {
        *self.m.lock().unwrap() = (0, 0);
    }
}

// ---------------------------------------------------------------- server

/// Server-side measurements.
#[derive(Default)]
struct ServerStats {
    rep_sent: Mutex<HashMap<u32, Instant>>,
    rep_rtu_ns: Mutex<Vec<u64>>,
    established: AtomicUsize,
    errors: AtomicUsize,
    /// Per incoming id (server local ID): (the client's comm ID, S_* flags).
    outcomes: Mutex<HashMap<u32, (u32, u32)>>,
}

// What the server saw of one connection.
const S_REQ: u32 = 1;
const S_EST: u32 = 2;
const S_DREQ: u32 = 4;
const S_REP_ERR: u32 = 8;
const S_REJ: u32 = 16;

impl ServerStats {
    fn mark(&self, id: &CmId, flag: u32) {
        if let Some(o) = self.outcomes.lock().unwrap().get_mut(&id.local_id()) {
            o.1 |= flag;
        }
    }
}

fn server_handler(stats: Arc<ServerStats>) -> RustHandler {
    // QPNs must be unique per server (the peer's stale-connection check
    // keys on them), as a real HCA's are.
    let next_qpn = AtomicU64::new(1);
    Arc::new(move |id: &CmId, ev: &Event| match ev.kind {
        EventType::ReqReceived => {
            // The client's comm ID: REQ Local Communication ID (MAD byte 24).
            if let Some(m) = &ev.mad {
                let peer = u32::from_be_bytes(m[24..28].try_into().unwrap());
                stats
                    .outcomes
                    .lock()
                    .unwrap()
                    .insert(id.local_id(), (peer, S_REQ));
            }
            let rep = RepParams {
                qp_num: (next_qpn.fetch_add(1, Ordering::Relaxed) & 0xff_ffff) as u32,
                starting_psn: 1,
                responder_resources: 1,
                initiator_depth: 1,
                rnr_retry_count: 7,
                ..RepParams::default()
            };
            let t = Instant::now();
            if id.send_rep(&rep).is_err() {
                stats.errors.fetch_add(1, Ordering::Relaxed);
                return 1;
            }
            stats.rep_sent.lock().unwrap().insert(id.local_id(), t);
            0
        }
        EventType::RtuReceived | EventType::UserEstablished => {
            stats.mark(id, S_EST);
            if let Some(t) = stats.rep_sent.lock().unwrap().remove(&id.local_id()) {
                stats
                    .rep_rtu_ns
                    .lock()
                    .unwrap()
                    .push(t.elapsed().as_nanos() as u64);
            }
            stats.established.fetch_add(1, Ordering::Relaxed);
            0
        }
        EventType::DreqReceived => {
            stats.mark(id, S_DREQ);
            let _ = id.send_drep(&[]);
            0
        }
        // Done with the connection: destroy it (non-zero return).
        EventType::TimewaitExit | EventType::RepError | EventType::RejReceived => {
            if ev.kind != EventType::TimewaitExit {
                stats.mark(
                    id,
                    if ev.kind == EventType::RepError {
                        S_REP_ERR
                    } else {
                        S_REJ
                    },
                );
                stats.errors.fetch_add(1, Ordering::Relaxed);
            }
            1
        }
        _ => 0,
    })
}

fn open(name: &str, threads: u32) -> Result<Arc<Device>, String> {
    let opts = DeviceOptions {
        shards: threads,
        threads,
        max_half_open: 0,
        ..DeviceOptions::default()
    };
    Device::open(name, opts).map_err(|e| format!("cannot open {name}: {e}"))
}

/// The server process: listen, say "ready", serve until stdin closes, then
/// print one JSON line with its measurements.
fn serve(o: &Opts) -> i32 {
    let dev = match open(&o.server, o.threads) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("ibcm bench --serve: {e}");
            return 1;
        }
    };
    let stats = Arc::new(ServerStats::default());
    let listener = match dev.create_id(
        None,
        std::ptr::null_mut(),
        Some(server_handler(stats.clone())),
    ) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("ibcm bench --serve: {e}");
            return 1;
        }
    };
    if let Err(e) = listener.listen(SERVICE) {
        eprintln!("ibcm bench --serve: listen: {e}");
        return 1;
    }
    println!("ready");
    let _ = std::io::stdout().flush();
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    let _ = listener.destroy();
    let mut verify = None;
    if o.verify {
        // Let retransmissions and timewait run out: every incoming id ends
        // destroyed (TIMEWAIT_EXIT, REP_ERROR, REJ) unless it is left
        // established with a peer that never disconnected.
        let until = Instant::now() + o.settle;
        while dev.live_ids() > 0 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = stats.outcomes.lock().unwrap();
        let list = |ok: bool| {
            out.values()
                .filter(|(_, f)| (f & S_DREQ != 0 && f & (S_REP_ERR | S_REJ) == 0) == ok)
                .map(|&(p, _)| p)
                .collect::<Vec<u32>>()
        };
        let c = dev.counters();
        verify = Some(ServerVerify {
            live_ids: dev.live_ids(),
            timers: dev.timer_count(),
            ids_created: c.ids_created,
            ids_destroyed: c.ids_destroyed,
            rep_errors: out.values().filter(|(_, f)| f & S_REP_ERR != 0).count(),
            rejected: out.values().filter(|(_, f)| f & S_REJ != 0).count(),
            ok_ids: list(true),
            err_ids: list(false),
        });
    }
    let (cpu_s, max_rss_kib) = usage();
    print_json(&ServerReport {
        rep_rtu_us: pct(std::mem::take(&mut *stats.rep_rtu_ns.lock().unwrap())),
        cpu_s,
        max_rss_kib,
        established: stats.established.load(Ordering::Relaxed),
        errors: stats.errors.load(Ordering::Relaxed),
        verify,
    });
    let _ = std::io::stdout().flush();
    dev.close();
    0
}

// ------------------------------------------------------------- --svg

/// `--svg`: the latency CDFs per step (µs, log scale) against the UDP
/// baseline's exchange, above the rate of established connections over
/// the connect phase, as one SVG document.
fn bench_svg(
    req_rep: &[u64],
    connect: &[u64],
    disc: &[u64],
    baseline: Option<&[u64]>,
    established_s: &[f64],
    connect_s: f64,
) -> String {
    use ibcm::svg::{latency_cdf_svg, ns_to_us, rate_series, rate_svg};
    let mut series = vec![
        ("REQ->REP", ns_to_us(req_rep)),
        ("connect (REQ->RTU)", ns_to_us(connect)),
        ("DREQ->DREP", ns_to_us(disc)),
    ];
    if let Some(b) = baseline {
        series.push(("UDP baseline exchange", ns_to_us(b)));
    }
    let cdf = latency_cdf_svg(&series);
    let bin = (connect_s / 50.0).max(1e-3);
    let rate = rate_svg(
        &rate_series(established_s, bin),
        "connections established per second",
    );
    stack_svgs(&[cdf, rate])
}

/// Several standalone SVG documents one above the other in one document.
fn stack_svgs(docs: &[String]) -> String {
    let size = |d: &str, attr: &str| -> f64 {
        let tag = d.find("<svg").map(|i| &d[i..]).unwrap_or("");
        let tag = &tag[..tag.find('>').unwrap_or(tag.len())];
        tag.find(&format!(" {attr}=\""))
            .and_then(|i| tag[i + attr.len() + 3..].split('"').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0)
    };
    let width = docs.iter().map(|d| size(d, "width")).fold(0.0, f64::max);
    let height: f64 = docs.iter().map(|d| size(d, "height")).sum();
    let mut out = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" \
         version=\"1.1\" width=\"{width:.0}\" height=\"{height:.0}\" viewBox=\"0 0 {width:.0} {height:.0}\">\n"
    );
    let mut y = 0.0;
    for d in docs {
        let body = d.find("<svg").map(|i| &d[i..]).unwrap_or(d);
        // The nested document keeps its own size and viewBox; `y` moves it.
        out.push_str(&body.replacen("<svg", &format!("<svg y=\"{y:.0}\""), 1));
        out.push('\n');
        y += size(d, "height");
    }
    out.push_str("</svg>\n");
    out
}

// -------------------------------------------------------- UDP baseline

fn ip_of(dev: &str) -> Result<IpAddr, String> {
    let spec = ibcm::runtime::DeviceSpec::parse(dev).map_err(|_| format!("bad device {dev}"))?;
    Ok(match spec {
        ibcm::runtime::DeviceSpec::Soft { ip, .. } | ibcm::runtime::DeviceSpec::Loop { ip } => ip,
    })
}

const BASE_PORT: u16 = 4790;

/// Baseline responder process (`--serve-baseline`): answers until stdin
/// closes.
fn serve_baseline(o: &Opts) -> i32 {
    let ip = match ip_of(&o.server) {
        Ok(ip) => ip,
        Err(e) => {
            eprintln!("{e}");
            return 1;
        }
    };
    let sock = match baseline::bind(ip, BASE_PORT) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("ibcm bench: baseline bind {ip}:{BASE_PORT}: {e}");
            return 1;
        }
    };
    println!("ready");
    let _ = std::io::stdout().flush();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let d2 = done.clone();
    std::thread::spawn(move || {
        let mut l = String::new();
        let _ = std::io::stdin().read_line(&mut l);
        d2.store(true, Ordering::SeqCst);
    });
    baseline::serve(&sock, || done.load(Ordering::SeqCst));
    0
}

struct BaseResult {
    rate: f64,
    lat: Pct,
    /// Every exchange's round trip, ns (for `--svg`).
    lat_ns: Vec<u64>,
}

/// The client half of the baseline (see `baseline.rs`): N exchanges of 3
/// datagrams, C in flight, on the devices' addresses.
fn run_baseline(o: &Opts) -> Result<BaseResult, String> {
    let sip = ip_of(&o.server)?;
    let cip = ip_of(&o.client)?;
    let mut child = None;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut server = None;
    if o.processes == 2 {
        child = Some(spawn_server(o, "--serve-baseline")?);
    } else {
        let sock = baseline::bind(sip, BASE_PORT).map_err(|e| format!("baseline bind: {e}"))?;
        let st = stop.clone();
        server = Some(std::thread::spawn(move || {
            baseline::serve(&sock, || st.load(Ordering::SeqCst))
        }));
    }
    let sock = baseline::bind(cip, BASE_PORT).map_err(|e| format!("baseline bind: {e}"))?;
    let (rate, lat) = baseline::run(
        &sock,
        SocketAddr::new(sip, BASE_PORT),
        o.connections,
        o.concurrency,
        o.timeout,
    );
    stop.store(true, Ordering::SeqCst);
    if let Some(t) = server {
        let _ = t.join();
    }
    if let Some(mut c) = child {
        drop(c.stdin.take());
        let _ = c.wait();
    }
    Ok(BaseResult {
        rate,
        lat: pct(lat.clone()),
        lat_ns: lat,
    })
}

fn spawn_server(o: &Opts, mode: &str) -> Result<std::process::Child, String> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let mut argv: Vec<String> = o
        .server_wrap
        .as_deref()
        .unwrap_or("")
        .split_whitespace()
        .map(String::from)
        .collect();
    argv.push(exe.to_string_lossy().into_owned());
    argv.extend(
        [
            "bench",
            mode,
            "--server",
            &o.server,
            "--threads",
            &o.threads.to_string(),
            "--settle",
            &o.settle.as_secs_f64().to_string(),
        ]
        .map(String::from),
    );
    if o.verify {
        argv.push("--verify".into());
    }
    let mut c = std::process::Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start the server process: {e}"))?;
    let mut out = BufReader::new(c.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line)
        .map_err(|e| format!("server: {e}"))?;
    if line.trim() != "ready" {
        let _ = c.kill();
        return Err(format!("server did not start ({:?})", line.trim()));
    }
    // Keep reading its stdout through the returned child.
    c.stdout = Some(out.into_inner());
    Ok(c)
}

// ------------------------------------------------------------ the bench

struct Conn {
    t_req: AtomicU64,
    t_rep: AtomicU64,
    t_est: AtomicU64,
    t_dreq: AtomicU64,
    t_drep: AtomicU64,
    /// C_* flags: what this side saw of the connection.
    flags: std::sync::atomic::AtomicU32,
    comm_id: std::sync::atomic::AtomicU32,
}

const C_RTU: u32 = 1;
const C_CONNECT_DONE: u32 = 2;
const C_ERROR: u32 = 4;
const C_DREP: u32 = 8;
const C_DISC_DONE: u32 = 16;

impl Conn {
    /// Sets `f`; true if this call set it.
    fn first(&self, f: u32) -> bool {
        self.flags.fetch_or(f, Ordering::SeqCst) & f == 0
    }
    fn has(&self, f: u32) -> bool {
        self.flags.load(Ordering::SeqCst) & f != 0
    }
}

pub fn main(a: &Args) -> i32 {
    let o = Opts::new(a);
    if o.serve {
        return serve(&o);
    }
    if o.serve_baseline {
        return serve_baseline(&o);
    }
    if o.scale {
        return match scale(&o) {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("ibcm bench --scale: {e}");
                1
            }
        };
    }
    match run(&o) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("ibcm bench: {e}");
            1
        }
    }
}

fn run(o: &Opts) -> Result<(), String> {
    let baseline = if o.baseline && o.fabric == "udp" {
        Some(run_baseline(o)?)
    } else {
        None
    };
    // The server: another process (UDP, default) or a device here.
    let mut child = None;
    let mut local_server = None;
    let local_stats = Arc::new(ServerStats::default());
    if o.processes == 2 {
        child = Some(spawn_server(o, "--serve")?);
    } else {
        let dev = open(&o.server, o.threads)?;
        let l = dev
            .create_id(
                None,
                std::ptr::null_mut(),
                Some(server_handler(local_stats.clone())),
            )
            .map_err(|e| e.to_string())?;
        l.listen(SERVICE).map_err(|e| e.to_string())?;
        local_server = Some((dev, l));
    }
    let dev = open(&o.client, o.threads)?;
    let dest = ibcm::runtime::DeviceSpec::parse(&o.server).map_err(|e| e.to_string())?;
    let dgid: ibcm::wire::Gid = match dest {
        ibcm::runtime::DeviceSpec::Soft { ip, .. } | ibcm::runtime::DeviceSpec::Loop { ip } => {
            ip.into()
        }
    };
    let path = dev.init_path(1, dgid).map_err(|e| e.to_string())?;
    let n = o.connections;
    let epoch = Instant::now();
    let now_ns = move || epoch.elapsed().as_nanos() as u64 + 1;
    let conns: Arc<Vec<Conn>> = Arc::new(
        (0..n)
            .map(|_| Conn {
                t_req: AtomicU64::new(0),
                t_rep: AtomicU64::new(0),
                t_est: AtomicU64::new(0),
                t_dreq: AtomicU64::new(0),
                t_drep: AtomicU64::new(0),
                flags: Default::default(),
                comm_id: Default::default(),
            })
            .collect(),
    );
    let gate = Arc::new(Gate::new());
    let failed = Arc::new(AtomicUsize::new(0));
    let index: Arc<Mutex<HashMap<u32, usize>>> = Arc::new(Mutex::new(HashMap::with_capacity(n)));
    let handler: RustHandler = {
        let (conns, gate, failed, index) =
            (conns.clone(), gate.clone(), failed.clone(), index.clone());
        Arc::new(move |id: &CmId, ev: &Event| {
            let Some(&i) = index.lock().unwrap().get(&id.local_id()) else {
                return 0;
            };
            let c = &conns[i];
            // Each phase releases the gate once per connection, whatever
            // events follow (a REJ after the RTU, a DREQ_ERROR, ...).
            let disc_done = || {
                if c.t_dreq.load(Ordering::SeqCst) != 0 && c.first(C_DISC_DONE) {
                    gate.release();
                }
            };
            match ev.kind {
                EventType::RepReceived => {
                    c.t_rep.store(now_ns(), Ordering::Relaxed);
                    if id.send_rtu(&[]).is_err() {
                        c.first(C_ERROR);
                        failed.fetch_add(1, Ordering::Relaxed);
                    } else {
                        c.t_est.store(now_ns(), Ordering::Relaxed);
                        c.first(C_RTU);
                    }
                    if c.first(C_CONNECT_DONE) {
                        gate.release();
                    }
                    0
                }
                EventType::RejReceived | EventType::ReqError => {
                    c.first(C_ERROR);
                    if c.first(C_CONNECT_DONE) {
                        failed.fetch_add(1, Ordering::Relaxed);
                        gate.release();
                    }
                    disc_done();
                    1
                }
                EventType::DrepReceived | EventType::DreqError | EventType::DreqReceived => {
                    match ev.kind {
                        EventType::DreqReceived => {
                            let _ = id.send_drep(&[]);
                        }
                        EventType::DrepReceived => {
                            c.first(C_DREP);
                        }
                        _ => {
                            c.first(C_ERROR);
                        }
                    }
                    c.t_drep.store(now_ns(), Ordering::Relaxed);
                    disc_done();
                    1 // destroy: the connection is over
                }
                _ => 0,
            }
        })
    };
    let tty = std::io::stderr().is_terminal() && !o.json;
    let deadline = Instant::now() + o.timeout;
    let progress = |phase: &str, done: usize| {
        if tty {
            eprint!("\r{phase}: {done}/{n}   ");
        }
    };

    // Phase 1: connect.
    let (cpu0, _) = usage();
    let t0 = Instant::now();
    let mut ids: Vec<Option<CmId>> = Vec::with_capacity(n);
    let mut last = Instant::now();
    // Connects are started in bursts: every slot that is free when this
    // thread wakes up, with their REQs sent together (`Device::batch`).
    let mut i = 0;
    while i < n {
        let k = gate.acquire_up_to(o.concurrency, n - i, deadline);
        if k == 0 {
            return Err(format!("timed out with {i} of {n} connects started"));
        }
        dev.batch(|| -> Result<(), String> {
            for _ in 0..k {
                let id = dev
                    .create_id(None, std::ptr::null_mut(), Some(handler.clone()))
                    .map_err(|e| e.to_string())?;
                index.lock().unwrap().insert(id.local_id(), i);
                conns[i].comm_id.store(id.local_id(), Ordering::Relaxed);
                let req = ReqParams {
                    primary_path: path,
                    service_id: SERVICE,
                    qp_num: (i as u32 + 1) & 0xff_ffff,
                    qp_type: qp_type::RC,
                    starting_psn: 1,
                    responder_resources: 1,
                    initiator_depth: 1,
                    remote_cm_response_timeout: o.cm_timeout,
                    local_cm_response_timeout: o.cm_local_timeout,
                    retry_count: 7,
                    rnr_retry_count: 7,
                    max_cm_retries: o.cm_retries,
                    ..ReqParams::default()
                };
                conns[i].t_req.store(now_ns(), Ordering::Relaxed);
                if let Err(e) = id.send_req(&req) {
                    return Err(format!("REQ {i}: {e}"));
                }
                ids.push(Some(id));
                i += 1;
            }
            Ok(())
        })?;
        if last.elapsed() > Duration::from_millis(100) {
            progress("connect", i);
            last = Instant::now();
        }
    }
    let done = gate.wait_done(n, deadline);
    let connect_s = t0.elapsed().as_secs_f64();
    if done < n {
        return Err(format!("timed out: {done} of {n} connects finished"));
    }
    progress("connect", n);
    let established = conns.iter().filter(|c| c.has(C_RTU)).count();

    // Phase 2: disconnect the established ones.
    gate.reset();
    let t1 = Instant::now();
    let mut to_close = 0;
    let mut todo = Vec::with_capacity(n);
    for (i, slot) in ids.iter_mut().enumerate() {
        if let Some(id) = slot.take()
            && conns[i].has(C_RTU)
        {
            todo.push((i, id));
        }
    }
    let mut todo = todo.into_iter();
    while todo.len() > 0 {
        let k = gate.acquire_up_to(o.concurrency, todo.len(), deadline);
        if k == 0 {
            return Err("timed out disconnecting".into());
        }
        dev.batch(|| {
            for (i, id) in todo.by_ref().take(k) {
                conns[i].t_dreq.store(now_ns(), Ordering::SeqCst);
                if id.send_dreq(&[]).is_err() || conns[i].has(C_ERROR) {
                    // Already over (a REJ after the RTU destroyed it).
                    if conns[i].first(C_DISC_DONE) {
                        gate.release();
                    }
                    conns[i].first(C_ERROR);
                }
                to_close += 1;
            }
        });
        if last.elapsed() > Duration::from_millis(100) {
            progress("disconnect", to_close);
            last = Instant::now();
        }
    }
    gate.wait_done(to_close, deadline);
    let disconnect_s = t1.elapsed().as_secs_f64();
    if tty {
        eprintln!("\r{:40}", "");
    }
    let (cpu1, rss) = usage();

    // Collect.
    let mut req_rep = Vec::with_capacity(n);
    let mut connect = Vec::with_capacity(n);
    let mut disc = Vec::with_capacity(n);
    for c in conns.iter() {
        let (q, p, e) = (
            c.t_req.load(Ordering::Relaxed),
            c.t_rep.load(Ordering::Relaxed),
            c.t_est.load(Ordering::Relaxed),
        );
        if p > 0 {
            req_rep.push(p - q);
        }
        if e > 0 {
            connect.push(e - q);
        }
        let (d, r) = (
            c.t_dreq.load(Ordering::Relaxed),
            c.t_drep.load(Ordering::Relaxed),
        );
        if r > d && d > 0 {
            disc.push(r - d);
        }
    }
    // With --verify: let this side's ids finish too, then check each
    // connection against the server's view.
    let mut mismatches = 0usize;
    if o.verify {
        let until = Instant::now() + o.settle;
        while dev.live_ids() > 0 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let (client_live, client_timers) = (dev.live_ids(), dev.timer_count());
    let counters = dev.counters();
    // Server report.
    let srv: ServerReport = if let Some(mut c) = child {
        drop(c.stdin.take());
        let mut out = String::new();
        if let Some(mut so) = c.stdout.take() {
            let _ = std::io::Read::read_to_string(&mut so, &mut out);
        }
        let _ = c.wait();
        serde_json::from_str(out.trim())
            .map_err(|e| format!("unreadable report from the server process ({e}): {out:?}"))?
    } else {
        ServerReport {
            rep_rtu_us: pct(std::mem::take(&mut *local_stats.rep_rtu_ns.lock().unwrap())),
            ..ServerReport::default()
        }
    };
    let mut verify = None;
    if o.verify {
        let Some(sv) = &srv.verify else {
            return Err(format!("no verify report from the server: {srv:?}"));
        };
        let ok: std::collections::HashSet<u32> = sv.ok_ids.iter().copied().collect();
        let err: std::collections::HashSet<u32> = sv.err_ids.iter().copied().collect();
        let (mut both_ok, mut both_err, mut c_ok_s_err, mut c_err_s_ok, mut c_ok_s_none) =
            (0, 0, 0, 0, 0);
        for c in conns.iter() {
            let id = c.comm_id.load(Ordering::Relaxed);
            let c_ok = c.has(C_RTU) && c.has(C_DREP) && !c.has(C_ERROR);
            match (c_ok, ok.contains(&id), err.contains(&id)) {
                (true, true, _) => both_ok += 1,
                (true, false, true) => c_ok_s_err += 1,
                (true, false, false) => c_ok_s_none += 1,
                (false, true, _) => c_err_s_ok += 1,
                (false, false, _) => both_err += 1,
            }
        }
        mismatches = c_ok_s_err + c_err_s_ok + c_ok_s_none;
        verify = Some(Verify {
            both_ok,
            both_error: both_err,
            client_ok_server_error: c_ok_s_err,
            client_error_server_ok: c_err_s_ok,
            client_ok_server_unknown: c_ok_s_none,
            mismatches,
            client_live_ids: client_live,
            client_timers,
            server_live_ids: sv.live_ids,
            server_timers: sv.timers,
            server_rep_errors: sv.rep_errors,
            server_rejected: sv.rejected,
            server_ids_created: sv.ids_created,
            server_ids_destroyed: sv.ids_destroyed,
        });
        if sv.live_ids != 0 || sv.timers != 0 || client_live != 0 || client_timers != 0 {
            mismatches += 1;
        }
    }
    if let Some((d, l)) = local_server {
        let _ = l.destroy();
        d.close();
    }
    dev.close();

    let connect_per_s = n as f64 / connect_s;
    let disconnect_per_s = to_close as f64 / disconnect_s.max(1e-9);
    if let Some(path) = &o.svg {
        let start = conns
            .iter()
            .map(|c| c.t_req.load(Ordering::Relaxed))
            .filter(|&t| t > 0)
            .min()
            .unwrap_or(0);
        let established: Vec<f64> = conns
            .iter()
            .map(|c| c.t_est.load(Ordering::Relaxed))
            .filter(|&t| t > 0)
            .map(|t| t.saturating_sub(start) as f64 / 1e9)
            .collect();
        let svg = bench_svg(
            &req_rep,
            &connect,
            &disc,
            baseline.as_ref().map(|b| &b.lat_ns[..]),
            &established,
            connect_s,
        );
        if let Err(e) = std::fs::write(path, svg) {
            return Err(format!("cannot write {}: {e}", path.display()));
        }
    }
    let cp = pct(connect);
    let dp = pct(disc);
    let qp = pct(req_rep);
    let rep_rtu = srv.rep_rtu_us;
    let cpu_s = (cpu1 - cpu0) + srv.cpu_s;
    let max_rss = rss.max(srv.max_rss_kib);
    let failed = failed.load(Ordering::Relaxed);
    if o.json {
        print_json(&Report {
            connections: n,
            established,
            failed,
            connect_per_s: per_s(connect_per_s),
            disconnect_per_s: per_s(disconnect_per_s),
            connect_us: cp,
            disconnect_us: dp,
            req_rep_us: qp,
            rep_rtu_us: rep_rtu,
            cpu_s,
            max_rss_kib: max_rss,
            fabric: o.fabric.clone(),
            processes: o.processes,
            concurrency: o.concurrency,
            threads: o.threads,
            connect_s,
            disconnect_s,
            retries: counters.tx_retries.iter().sum::<u64>(),
            timeouts: counters.timeouts.iter().sum::<u64>(),
            rej_rx: counters.rej_rx.iter().sum::<u64>(),
            drops: counters.total_drops(),
            tx_errors: dev.transport().stats().tx_errors.load(Ordering::Relaxed),
            verify: verify.take(),
            udp_baseline: baseline.as_ref().map(|b| UdpBaseline {
                exchanges_per_s: per_s(b.rate),
                exchange_us: b.lat,
            }),
            ratio_to_udp: baseline.as_ref().map(|b| Ratio {
                rate: connect_per_s / b.rate,
                p50: cp.p50 / b.lat.p50.max(1e-9),
            }),
        });
    } else {
        println!(
            "ibcm bench: {n} connections over the {} fabric ({} process{}), {} in flight, {} thread(s)",
            o.fabric,
            o.processes,
            if o.processes == 1 { "" } else { "es" },
            o.concurrency,
            o.threads
        );
        println!("  established {established}, failed {failed}");
        println!("  connect     {connect_per_s:>10.0} /s   ({connect_s:.3} s)");
        println!("  disconnect  {disconnect_per_s:>10.0} /s   ({disconnect_s:.3} s)");
        println!("  latency (µs)        p50        p99        max");
        for (name, p) in [
            ("REQ->REP", qp),
            ("REP->RTU", rep_rtu),
            ("connect", cp),
            ("DREQ->DREP", dp),
        ] {
            println!(
                "  {name:<14} {:>10.1} {:>10.1} {:>10.1}",
                p.p50, p.p99, p.max
            );
        }
        println!(
            "  CPU {cpu_s:.2} s, peak RSS {max_rss} KiB, retransmissions {}",
            counters.tx_retries.iter().sum::<u64>()
        );
        if let Some(b) = &baseline {
            println!(
                "  UDP baseline: {:.0} exchanges/s, p50 {:.1} µs -> ratio_to_udp rate {:.2}, p50 {:.2}",
                b.rate,
                b.lat.p50,
                connect_per_s / b.rate,
                cp.p50 / b.lat.p50.max(1e-9)
            );
        }
    }
    if established + failed < n {
        return Err("not every connection finished".into());
    }
    if !o.json
        && let Some(v) = &verify
    {
        let v = serde_json::to_string(v).map_err(|e| e.to_string())?;
        println!("  verify{v}");
    }
    if mismatches > 0 {
        return Err(format!(
            "verify: {mismatches} connection(s) ended differently on the two sides, or ids/timers leaked"
        ));
    }
    Ok(())
}

// ------------------------------------------------------------- scale test

/// Resident set size now, in KiB (from /proc/self/statm).
fn rss_now_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = s
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    pages * (unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64) / 1024
}

/// Holds N established connections in one process and measures what they
/// cost: memory per id, lookup time, then a mass disconnect whose N
/// timewait timers must all fire.
fn scale(o: &Opts) -> Result<(), String> {
    let n = o.connections;
    let (sname, cname) = (
        if o.server.starts_with("soft:") {
            "loop:10.250.0.1".to_string()
        } else {
            o.server.clone()
        },
        if o.client.starts_with("soft:") {
            "loop:10.250.0.2".to_string()
        } else {
            o.client.clone()
        },
    );
    let rss0 = rss_now_kib();
    let sdev = open(&sname, o.threads)?;
    let cdev = open(&cname, o.threads)?;
    let stats = Arc::new(ServerStats::default());
    let listener = sdev
        .create_id(
            None,
            std::ptr::null_mut(),
            Some(server_handler(stats.clone())),
        )
        .map_err(|e| e.to_string())?;
    listener.listen(SERVICE).map_err(|e| e.to_string())?;
    let dgid: ibcm::wire::Gid =
        match ibcm::runtime::DeviceSpec::parse(&sname).map_err(|e| e.to_string())? {
            ibcm::runtime::DeviceSpec::Soft { ip, .. } | ibcm::runtime::DeviceSpec::Loop { ip } => {
                ip.into()
            }
        };
    let path = cdev.init_path(1, dgid).map_err(|e| e.to_string())?;
    let gate = Arc::new(Gate::new());
    let failed = Arc::new(AtomicUsize::new(0));
    let handler: RustHandler = {
        let (gate, failed) = (gate.clone(), failed.clone());
        Arc::new(move |id: &CmId, ev: &Event| match ev.kind {
            EventType::RepReceived => {
                if id.send_rtu(&[]).is_err() {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
                gate.release();
                0
            }
            EventType::RejReceived | EventType::ReqError => {
                failed.fetch_add(1, Ordering::Relaxed);
                gate.release();
                0
            }
            EventType::DrepReceived | EventType::DreqError => {
                gate.release();
                0
            }
            _ => 0,
        })
    };
    let deadline = Instant::now() + o.timeout;
    let t0 = Instant::now();
    let mut ids = Vec::with_capacity(n);
    let tty = std::io::stderr().is_terminal() && !o.json;
    for i in 0..n {
        if !gate.acquire(o.concurrency.max(1024), deadline) {
            return Err(format!("timed out after {i} connects"));
        }
        let id = cdev
            .create_id(None, std::ptr::null_mut(), Some(handler.clone()))
            .map_err(|e| e.to_string())?;
        let req = ReqParams {
            primary_path: path,
            service_id: SERVICE,
            qp_num: (i as u32 + 1) & 0xff_ffff,
            qp_type: qp_type::RC,
            starting_psn: 1,
            responder_resources: 1,
            initiator_depth: 1,
            remote_cm_response_timeout: 20,
            local_cm_response_timeout: 20,
            max_cm_retries: 15,
            ..ReqParams::default()
        };
        id.send_req(&req).map_err(|e| format!("REQ {i}: {e}"))?;
        ids.push(id);
        if tty && i % 50_000 == 0 {
            eprint!("\rconnect {i}/{n}   ");
        }
    }
    gate.wait_done(n, deadline);
    let connect_s = t0.elapsed().as_secs_f64();
    // Let the server's RTU handling finish.
    while stats.established.load(Ordering::Relaxed) < n && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let live = cdev.live_ids() + sdev.live_ids();
    let rss1 = rss_now_kib();
    let bytes_per_id = (rss1.saturating_sub(rss0)) as f64 * 1024.0 / live.max(1) as f64;
    // Lookups: the state of random established ids (shard lock + slab).
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let lookups = n.clamp(1, 1_000_000);
    let t1 = Instant::now();
    let mut established = 0usize;
    for _ in 0..lookups {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if ids[(x % n as u64) as usize].state() == Some(ibcm::engine::State::Established) {
            established += 1;
        }
    }
    let lookup_ns = t1.elapsed().as_nanos() as f64 / lookups as f64;
    // Mass disconnect: every server id enters timewait (one timer each).
    gate.reset();
    let t2 = Instant::now();
    for id in &ids {
        if !gate.acquire(o.concurrency.max(1024), deadline) {
            return Err("timed out disconnecting".into());
        }
        if id.send_dreq(&[]).is_err() {
            gate.release();
        }
    }
    gate.wait_done(n, deadline);
    let disconnect_s = t2.elapsed().as_secs_f64();
    let pending_timers = sdev.timer_count() + cdev.timer_count();
    let t3 = Instant::now();
    while sdev.timer_count() + cdev.timer_count() > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let timers_s = t3.elapsed().as_secs_f64();
    for id in &ids {
        let _ = id.destroy();
    }
    drop(ids);
    let _ = listener.destroy();
    let leftover = cdev.live_ids() + sdev.live_ids();
    sdev.close();
    cdev.close();
    if tty {
        eprintln!("\r{:40}", "");
    }
    let failed = failed.load(Ordering::Relaxed);
    if o.json {
        print_json(&ScaleReport {
            connections: n,
            established,
            failed,
            live_ids: live,
            connect_per_s: per_s(n as f64 / connect_s),
            rss_kib_before: rss0,
            rss_kib_established: rss1,
            bytes_per_id: bytes_per_id.round() as u64,
            lookup_ns,
            disconnect_per_s: per_s(n as f64 / disconnect_s),
            pending_timers,
            timers_fired_s: timers_s,
            leftover_ids: leftover,
        });
    } else {
        println!(
            "ibcm bench --scale: {n} connections held in one process ({} fabric)",
            sname.split(':').next().unwrap_or("")
        );
        println!("  established {established}, failed {failed}, live ids {live} (both sides)");
        println!(
            "  connect {:.0}/s, RSS {rss0} -> {rss1} KiB: {bytes_per_id:.0} bytes per id",
            n as f64 / connect_s
        );
        println!("  state lookup of a random id: {lookup_ns:.1} ns");
        println!(
            "  disconnect {:.0}/s, then {pending_timers} timewait timers pending, all fired after {timers_s:.2} s",
            n as f64 / disconnect_s
        );
        println!("  ids left after destroy: {leftover}");
    }
    if established != lookups || failed > 0 || leftover > 0 {
        return Err("not every connection was established and released".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_report_round_trip() {
        let pct = Pct {
            p50: 12.34,
            p99: 56.78,
            max: 99.99,
        };
        let plain = ServerReport {
            rep_rtu_us: pct,
            cpu_s: 0.1234,
            max_rss_kib: 4096,
            established: 10,
            errors: 1,
            verify: None,
        };
        let s = serde_json::to_string(&plain).unwrap();
        assert_eq!(
            s,
            "{\"rep_rtu_us\":{\"p50\":12.3,\"p99\":56.8,\"max\":100.0},\"cpu_s\":0.123,\
             \"max_rss_kib\":4096,\"established\":10,\"errors\":1}"
        );
        let back: ServerReport = serde_json::from_str(&s).unwrap();
        assert_eq!(back.verify, None);
        assert_eq!(back.established, 10);
        let verified = ServerReport {
            verify: Some(ServerVerify {
                live_ids: 0,
                timers: 2,
                ids_created: 11,
                ids_destroyed: 11,
                rep_errors: 1,
                rejected: 0,
                ok_ids: vec![5, 7],
                err_ids: vec![9],
            }),
            ..plain
        };
        let s = serde_json::to_string(&verified).unwrap();
        // Flat: the verify keys sit next to the others.
        assert!(
            s.contains("\"errors\":1,\"live_ids\":0,\"timers\":2"),
            "{s}"
        );
        let back: ServerReport = serde_json::from_str(&s).unwrap();
        assert_eq!(back.verify, verified.verify);
        // The one-process run's report has no more than the REP->RTU times.
        let local: ServerReport =
            serde_json::from_str("{\"rep_rtu_us\":{\"p50\":1.0,\"p99\":2.0,\"max\":3.0}}").unwrap();
        assert_eq!(local.rep_rtu_us.max, 3.0);
        assert_eq!(local.verify, None);
    }
}
