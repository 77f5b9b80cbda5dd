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
    CmId, Device, DeviceOptions, Event, EventType, PathRec, RepParams, ReqParams, RustHandler,
    qp_type,
};
use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, IsTerminal, Read, Write};
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
    baseline_work: String,
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
    /// A client process of a `--processes N > 2` run.
    client_only: bool,
    /// Added to this process's QP numbers (client processes share a CA GUID).
    qpn_base: u32,
}

/// The long description in `ibcm bench --help`.
pub const ABOUT: &str = "\
Establishes N connections between a client and a server device with C
connects in flight, then disconnects them. Reports connect/disconnect
rates, latency percentiles per step (REQ->REP, REP->RTU, full connect,
DREQ->DREP), CPU seconds and peak memory. The devices are opened in the
bench's processes unless IBCM_SERVICE is set (auto|required: through the
host CM service) or --processes N > 2.";

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
    /// hosts; 1: both in this one; N > 2: the server and N-1 client
    /// processes sharing the client device through the host CM service
    /// (not with IBCM_SERVICE=off), reporting the aggregate rate
    #[arg(long, value_name = "N", default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=64))]
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
    /// (internal) run as one client process of a --processes N > 2 run
    #[arg(long, hide = true)]
    pub client_only: bool,
    /// (internal) first QP number of this process's connections, minus 1
    #[arg(long, hide = true, default_value_t = 0)]
    pub qpn_base: u32,
    /// (internal) run as the baseline's responder process
    #[arg(long, hide = true)]
    pub serve_baseline: bool,
    /// (internal) what the baseline's responder does per datagram
    /// (`baseline::Work::name`: `plain`, `frame`, `frame+codec`,
    /// `frame+codec+icrc-check`)
    #[arg(long, hide = true, default_value = "plain")]
    pub baseline_work: String,
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
            baseline_work: a.baseline_work.clone(),
            scale: a.scale,
            server_wrap: a.server_wrap.clone(),
            cm_timeout: a.cm_timeout,
            cm_local_timeout: a.cm_local_timeout,
            cm_retries: a.cm_retries,
            verify: a.verify,
            settle: a.settle,
            svg: a.svg.clone(),
            client_only: a.client_only,
            qpn_base: a.qpn_base,
        };
        if o.fabric == "loopback" {
            for dev in [&mut o.server, &mut o.client] {
                if let Some(ip) = dev.strip_prefix("soft:") {
                    *dev = format!("loop:{ip}");
                }
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
struct Report<'a> {
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
    verify: Option<&'a Verify>,
    #[serde(skip_serializing_if = "Option::is_none")]
    udp_baseline: Option<UdpBaseline<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ratio_to_udp: Option<Ratio>,
}

#[derive(Debug, Serialize)]
struct UdpBaseline<'a> {
    exchanges_per_s: u64,
    exchange_us: Pct,
    /// How the baseline's sockets batched (`baseline::Socket::batching`).
    batching: &'static str,
    /// CPU per exchange, both ends, µs.
    #[serde(serialize_with = "round3")]
    cpu_us: f64,
    /// The same exchange with the wire's per-message work, same run.
    floor: &'a [Rung],
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
    m: Mutex<GateCount>,
    cv: Condvar,
}

#[derive(Default)]
struct GateCount {
    in_flight: usize,
    done: usize,
    /// Threads that may be waiting on `cv` since the last notification:
    /// a release wakes the condition variable only then (std's `notify_all`
    /// is a `futex` call whether or not anyone waits, and a release runs in
    /// the event loop's callback once per connection and phase).
    waiters: usize,
}

impl Gate {
    fn new() -> Gate {
        Gate {
            m: Mutex::new(GateCount::default()),
            cv: Condvar::new(),
        }
    }
    /// Waits for a free slot and takes it; false on timeout.
    fn acquire(&self, limit: usize, deadline: Instant) -> bool {
        self.acquire_up_to(limit, 1, deadline) == 1
    }
    /// Waits for a free slot, then takes up to `want` of the free slots.
    /// Returns how many (0 on timeout).
    fn acquire_up_to(&self, limit: usize, want: usize, deadline: Instant) -> usize {
        let mut g = self.m.lock().unwrap();
        while g.in_flight >= limit {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return 0;
            }
            g.waiters += 1;
            g = self.cv.wait_timeout(g, left).unwrap().0;
        }
        let k = (limit - g.in_flight).min(want);
        g.in_flight += k;
        k
    }
    fn release(&self) {
        let mut g = self.m.lock().unwrap();
        g.in_flight -= 1;
        g.done += 1;
        if g.waiters > 0 {
            // Every thread waiting now is woken; one that waits again
            // counts itself again first.
            g.waiters = 0;
            self.cv.notify_all();
        }
    }
    fn wait_done(&self, n: usize, deadline: Instant) -> usize {
        let mut g = self.m.lock().unwrap();
        while g.done < n {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            g.waiters += 1;
            g = self.cv.wait_timeout(g, left).unwrap().0;
        }
        g.done
    }
    fn reset(&self) {
        let mut g = self.m.lock().unwrap();
        g.in_flight = 0;
        g.done = 0;
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

    /// The REP->RTU percentiles so far (and forgets the samples).
    fn rep_rtu_us(&self) -> Pct {
        pct(std::mem::take(&mut *self.rep_rtu_ns.lock().unwrap()))
    }

    /// The server's side of `--verify`, once its ids have settled.
    fn verify(&self, dev: &Device) -> ServerVerify {
        let out = self.outcomes.lock().unwrap();
        let list = |ok: bool| {
            out.values()
                .filter(|(_, f)| (f & S_DREQ != 0 && f & (S_REP_ERR | S_REJ) == 0) == ok)
                .map(|&(p, _)| p)
                .collect::<Vec<u32>>()
        };
        let c = dev.counters();
        ServerVerify {
            live_ids: dev.live_ids(),
            timers: dev.timer_count(),
            ids_created: c.ids_created,
            ids_destroyed: c.ids_destroyed,
            rep_errors: out.values().filter(|(_, f)| f & S_REP_ERR != 0).count(),
            rejected: out.values().filter(|(_, f)| f & S_REJ != 0).count(),
            ok_ids: list(true),
            err_ids: list(false),
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

/// Opens a bench device: in this process (with `--threads`) unless
/// `IBCM_SERVICE` is set or this is a client process of a
/// `--processes N > 2` run. Each device of a plain run has one process, and
/// the bench measures the CM itself; `IBCM_SERVICE=auto|required`
/// measures it through the host CM service.
fn open(o: &Opts, name: &str) -> Result<Arc<Device>, String> {
    let opts = DeviceOptions {
        shards: o.threads,
        threads: o.threads,
        max_half_open: 0,
        ..DeviceOptions::default()
    };
    let served = o.client_only || std::env::var_os("IBCM_SERVICE").is_some_and(|v| !v.is_empty());
    if served {
        Device::open(name, opts)
    } else {
        Device::open_local(name, opts)
    }
    .map_err(|e| format!("cannot open {name}: {e}"))
}

/// The server's listening id on `dev`, counting into `stats`.
fn listen(dev: &Arc<Device>, stats: &Arc<ServerStats>) -> Result<CmId, String> {
    let listener = dev
        .create_id(
            None,
            std::ptr::null_mut(),
            Some(server_handler(stats.clone())),
        )
        .map_err(|e| e.to_string())?;
    listener
        .listen(SERVICE)
        .map_err(|e| format!("listen: {e}"))?;
    Ok(listener)
}

/// The path from `dev` to the `server` device.
fn path_to(dev: &Device, server: &str) -> Result<PathRec, String> {
    dev.init_path(1, ip_of(server)?.into())
        .map_err(|e| e.to_string())
}

/// The REQ of connection `i` (a unique QPN each, as a real HCA's).
fn req_params(o: &Opts, path: PathRec, i: usize) -> ReqParams {
    ReqParams {
        primary_path: path,
        service_id: SERVICE,
        qp_num: (o.qpn_base.wrapping_add(i as u32 + 1)) & 0xff_ffff,
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
    }
}

/// The server process: listen, say "ready", serve until stdin closes, then
/// print one JSON line with its measurements.
fn serve(o: &Opts) -> Result<(), String> {
    let dev = open(o, &o.server)?;
    let stats = Arc::new(ServerStats::default());
    let listener = listen(&dev, &stats)?;
    say_ready();
    wait_for_stdin();
    let verify = stop_listening(&dev, listener, &stats, o);
    let (cpu_s, max_rss_kib) = usage();
    print_json(&ServerReport {
        rep_rtu_us: stats.rep_rtu_us(),
        cpu_s,
        max_rss_kib,
        established: stats.established.load(Ordering::Relaxed),
        errors: stats.errors.load(Ordering::Relaxed),
        verify,
    });
    let _ = std::io::stdout().flush();
    dev.close();
    Ok(())
}

/// Destroys the server's listener; with `--verify`, lets retransmissions
/// and timewait run out and returns the server's side of the check. Every
/// incoming id ends destroyed (TIMEWAIT_EXIT, REP_ERROR, REJ) unless it is
/// left established with a peer that never disconnected.
fn stop_listening(
    dev: &Device,
    listener: CmId,
    stats: &ServerStats,
    o: &Opts,
) -> Option<ServerVerify> {
    let _ = listener.destroy();
    o.verify.then(|| {
        wait_for_ids(dev, o.settle);
        stats.verify(dev)
    })
}

/// Tells the client process this one is ready (`spawn_server` waits for
/// the line).
fn say_ready() {
    println!("ready");
    let _ = std::io::stdout().flush();
}

/// Blocks until the client process closes this one's stdin (or writes a
/// line).
fn wait_for_stdin() {
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
}

// ------------------------------------------------------------- --svg

/// `--svg`: the latency CDFs per step (µs, log scale) against the UDP
/// baseline's exchange, above the rate of established connections over
/// the connect phase, as one SVG document.
fn bench_svg(
    lat: &Latencies,
    baseline: Option<&[u64]>,
    established_s: &[f64],
    connect_s: f64,
) -> String {
    use ibcm::svg::{latency_cdf_svg, ns_to_us, rate_series, rate_svg};
    let mut series = vec![
        ("REQ->REP", ns_to_us(&lat.req_rep)),
        ("connect (REQ->RTU)", ns_to_us(&lat.connect)),
        ("DREQ->DREP", ns_to_us(&lat.disc)),
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
    ibcm::svg::stack(&[cdf, rate])
}

// -------------------------------------------------------- UDP baseline

fn ip_of(dev: &str) -> Result<IpAddr, String> {
    let spec = ibcm::api::DeviceSpec::parse(dev).map_err(|_| format!("bad device {dev}"))?;
    Ok(match spec {
        ibcm::api::DeviceSpec::Soft { ip, .. } | ibcm::api::DeviceSpec::Loop { ip } => ip,
    })
}

const BASE_PORT: u16 = 4790;

/// Baseline responder process (`--serve-baseline`): answers until stdin
/// closes.
fn serve_baseline(o: &Opts) -> Result<(), String> {
    let ip = ip_of(&o.server)?;
    let work = baseline::Work::parse(&o.baseline_work)
        .ok_or_else(|| format!("unknown baseline work {:?}", o.baseline_work))?;
    let peer = SocketAddr::new(ip_of(&o.client)?, BASE_PORT);
    let sock = baseline::bind(ip, BASE_PORT)
        .map_err(|e| format!("baseline bind {ip}:{BASE_PORT}: {e}"))?;
    say_ready();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let d2 = done.clone();
    std::thread::spawn(move || {
        wait_for_stdin();
        d2.store(true, Ordering::SeqCst);
    });
    let cpu0 = cpu_self();
    let bad = baseline::serve(&sock, work, peer, || done.load(Ordering::SeqCst));
    // The CPU this process spent answering (its start-up excluded), for
    // the client's per-exchange figure.
    println!("cpu {}", cpu_self() - cpu0);
    let _ = std::io::stdout().flush();
    if bad != 0 {
        return Err(format!("{bad} requests failed their ICRC check"));
    }
    Ok(())
}

struct BaseResult {
    rate: f64,
    /// "gso+gro" … "mmsg": the requester socket's batching.
    batching: &'static str,
    lat: Pct,
    /// Every exchange's round trip, ns (for `--svg`).
    lat_ns: Vec<u64>,
    /// CPU of both ends (all threads, both processes) per exchange, µs.
    cpu_us: f64,
    /// The same exchange carrying the wire's per-message work
    /// (`baseline::Work::Frame`, `Codec`, `Checked`), in the same run.
    floor: Vec<Rung>,
}

/// One rung of the baseline with per-message work.
#[derive(Debug, Serialize)]
struct Rung {
    work: &'static str,
    exchanges_per_s: u64,
    /// Its rate over the plain baseline's.
    #[serde(serialize_with = "round3")]
    ratio: f64,
    #[serde(serialize_with = "round3")]
    cpu_us: f64,
}

/// User + system CPU seconds of this process so far.
fn cpu_self() -> f64 {
    usage().0
}

/// Rounds of the baseline and its rungs: one run of each per round, in
/// turn, and the median run of each is reported (one run of the plain
/// exchange varies by ±20 % on a 2-core VM).
const BASELINE_ROUNDS: usize = 3;

/// The baseline and its floor rungs: `BASELINE_ROUNDS` rounds of the
/// plain exchange, then the same with the frame, the codec and the ICRC
/// check; each reported by its median run.
fn run_baseline(o: &Opts) -> Result<BaseResult, String> {
    use baseline::Work;
    let works = [Work::Plain, Work::Frame, Work::Codec, Work::Checked];
    let mut runs: Vec<Vec<WorkRun>> = works.iter().map(|_| Vec::new()).collect();
    let mut batching = "";
    for _ in 0..BASELINE_ROUNDS {
        for (k, &work) in works.iter().enumerate() {
            let (r, b) = run_baseline_work(o, work)?;
            if work == Work::Plain {
                batching = b;
            }
            runs[k].push(r);
        }
    }
    let mut medians = runs.into_iter().map(|mut v| {
        v.sort_by(|a, b| a.rate.total_cmp(&b.rate));
        v.swap_remove(v.len() / 2)
    });
    let plain = medians.next().expect("four works");
    let floor = works[1..]
        .iter()
        .zip(medians)
        .map(|(w, r)| Rung {
            work: w.name(),
            exchanges_per_s: per_s(r.rate),
            ratio: r.rate / plain.rate.max(1e-9),
            cpu_us: r.cpu_us,
        })
        .collect();
    Ok(BaseResult {
        rate: plain.rate,
        batching,
        lat: pct(plain.lat_ns.clone()),
        lat_ns: plain.lat_ns,
        cpu_us: plain.cpu_us,
        floor,
    })
}

/// What one baseline run measured.
struct WorkRun {
    rate: f64,
    lat_ns: Vec<u64>,
    cpu_us: f64,
}

/// The client half of the baseline (see `baseline.rs`): N exchanges of 3
/// datagrams, C in flight, on the devices' addresses, doing `work`.
fn run_baseline_work(o: &Opts, work: baseline::Work) -> Result<(WorkRun, &'static str), String> {
    let sip = ip_of(&o.server)?;
    let cip = ip_of(&o.client)?;
    let (sa, ca) = (
        SocketAddr::new(sip, BASE_PORT),
        SocketAddr::new(cip, BASE_PORT),
    );
    let mut child = None;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut server = None;
    if o.processes == 2 {
        child = Some(spawn_server_with(
            o,
            "--serve-baseline",
            &["--client", &o.client, "--baseline-work", work.name()],
        )?);
    } else {
        let sock = baseline::bind(sip, BASE_PORT).map_err(|e| format!("baseline bind: {e}"))?;
        let st = stop.clone();
        server = Some(std::thread::spawn(move || {
            baseline::serve(&sock, work, ca, || st.load(Ordering::SeqCst))
        }));
    }
    let sock = baseline::bind(cip, BASE_PORT).map_err(|e| format!("baseline bind: {e}"))?;
    let cpu0 = cpu_self();
    let out = baseline::run(&sock, work, sa, o.connections, o.concurrency, o.timeout)
        .map_err(|e| format!("baseline: {e}"))?;
    stop.store(true, Ordering::SeqCst);
    let mut bad = out.bad_icrc;
    if let Some(t) = server {
        bad += t.join().unwrap_or(0);
    }
    let mut cpu = cpu_self() - cpu0;
    if let Some(mut c) = child {
        drop(c.stdin.take());
        let mut line = String::new();
        if let Some(o) = c.stdout.take() {
            let _ = BufReader::new(o).read_line(&mut line);
        }
        match line.trim().strip_prefix("cpu ").map(str::parse::<f64>) {
            Some(Ok(s)) => cpu += s,
            _ => return Err(format!("baseline responder: no CPU figure ({line:?})")),
        }
        match c.wait() {
            Ok(st) if st.success() => {}
            Ok(st) => return Err(format!("baseline responder ({}) {st}", work.name())),
            Err(e) => return Err(format!("baseline responder: {e}")),
        }
    }
    if bad != 0 {
        return Err(format!(
            "baseline ({}): {bad} datagrams failed their ICRC check",
            work.name()
        ));
    }
    if out.done < o.connections {
        return Err(format!(
            "baseline ({}): {} of {} exchanges completed in {:?}",
            work.name(),
            out.done,
            o.connections,
            o.timeout
        ));
    }
    let cpu_us = cpu * 1e6 / out.done.max(1) as f64;
    Ok((
        WorkRun {
            rate: out.rate,
            lat_ns: out.lat_ns,
            cpu_us,
        },
        sock.batching(),
    ))
}

fn spawn_server(o: &Opts, mode: &str) -> Result<std::process::Child, String> {
    spawn_server_with(o, mode, &[])
}

fn spawn_server_with(o: &Opts, mode: &str, extra: &[&str]) -> Result<std::process::Child, String> {
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
    argv.extend(extra.iter().map(|a| a.to_string()));
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

/// What the client saw of one connection: step times in ns from `Clock`
/// (0: not reached) and C_* flags.
#[derive(Default)]
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
    /// Established, then cleanly disconnected (a DREP), with no error.
    fn ended_ok(&self) -> bool {
        self.has(C_RTU) && self.has(C_DREP) && !self.has(C_ERROR)
    }
}

/// Nanoseconds since the run started, never 0 (0 means "not reached").
#[derive(Clone, Copy)]
struct Clock(Instant);

impl Clock {
    fn ns(&self) -> u64 {
        self.0.elapsed().as_nanos() as u64 + 1
    }
}

/// What the client's callbacks share with the phases that drive them.
struct Shared {
    conns: Vec<Conn>,
    gate: Gate,
    failed: AtomicUsize,
    /// Client comm ID -> index in `conns`.
    index: Mutex<HashMap<u32, usize>>,
    clock: Clock,
}

impl Shared {
    fn new(n: usize) -> Shared {
        Shared {
            conns: (0..n).map(|_| Conn::default()).collect(),
            gate: Gate::new(),
            failed: AtomicUsize::new(0),
            index: Mutex::new(HashMap::with_capacity(n)),
            clock: Clock(Instant::now()),
        }
    }

    /// The client's event handler: times each step, answers a REP with an
    /// RTU and a DREQ with a DREP, and releases the gate once per
    /// connection and phase, whatever events follow (a REJ after the RTU,
    /// a DREQ_ERROR, ...).
    fn on_event(&self, id: &CmId, ev: &Event) -> i32 {
        let Some(&i) = self.index.lock().unwrap().get(&id.local_id()) else {
            return 0;
        };
        let c = &self.conns[i];
        let disc_done = || {
            if c.t_dreq.load(Ordering::SeqCst) != 0 && c.first(C_DISC_DONE) {
                self.gate.release();
            }
        };
        match ev.kind {
            EventType::RepReceived => {
                c.t_rep.store(self.clock.ns(), Ordering::Relaxed);
                if id.send_rtu(&[]).is_err() {
                    c.first(C_ERROR);
                    self.failed.fetch_add(1, Ordering::Relaxed);
                } else {
                    c.t_est.store(self.clock.ns(), Ordering::Relaxed);
                    c.first(C_RTU);
                }
                if c.first(C_CONNECT_DONE) {
                    self.gate.release();
                }
                0
            }
            EventType::RejReceived | EventType::ReqError => {
                c.first(C_ERROR);
                if c.first(C_CONNECT_DONE) {
                    self.failed.fetch_add(1, Ordering::Relaxed);
                    self.gate.release();
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
                c.t_drep.store(self.clock.ns(), Ordering::Relaxed);
                disc_done();
                1 // destroy: the connection is over
            }
            _ => 0,
        }
    }

    /// Connections whose REP was answered with an RTU.
    fn established(&self) -> usize {
        self.conns.iter().filter(|c| c.has(C_RTU)).count()
    }
}

/// `phase: done/N` on stderr when it is a terminal (and not `--json`), at
/// most every 100 ms.
struct Progress {
    tty: bool,
    n: usize,
    last: Instant,
}

impl Progress {
    fn new(o: &Opts) -> Progress {
        Progress {
            tty: std::io::stderr().is_terminal() && !o.json,
            n: o.connections,
            last: Instant::now(),
        }
    }
    fn show(&self, phase: &str, done: usize) {
        if self.tty {
            eprint!("\r{phase}: {done}/{}   ", self.n);
        }
    }
    fn tick(&mut self, phase: &str, done: usize) {
        if self.last.elapsed() > Duration::from_millis(100) {
            self.show(phase, done);
            self.last = Instant::now();
        }
    }
    fn clear(&self) {
        if self.tty {
            eprintln!("\r{:40}", "");
        }
    }
}

/// The bench's server: a second process (`bench --serve`) or a device in
/// this one.
enum Server {
    Process(std::process::Child),
    Local {
        dev: Arc<Device>,
        listener: CmId,
        stats: Arc<ServerStats>,
    },
}

impl Server {
    fn start(o: &Opts) -> Result<Server, String> {
        if o.processes >= 2 {
            return Ok(Server::Process(spawn_server(o, "--serve")?));
        }
        let dev = open(o, &o.server)?;
        let stats = Arc::new(ServerStats::default());
        let listener = listen(&dev, &stats)?;
        Ok(Server::Local {
            dev,
            listener,
            stats,
        })
    }

    /// Stops the server and returns its report: the process prints one
    /// JSON line when its stdin closes; a server in this process reports
    /// its REP->RTU times (its CPU time and memory are this process's),
    /// and with `--verify` its side of the check, as `serve` does.
    fn finish(self, o: &Opts) -> Result<ServerReport, String> {
        match self {
            Server::Process(mut child) => {
                drop(child.stdin.take());
                let mut out = String::new();
                if let Some(mut so) = child.stdout.take() {
                    let _ = so.read_to_string(&mut out);
                }
                let _ = child.wait();
                serde_json::from_str(out.trim()).map_err(|e| {
                    format!("unreadable report from the server process ({e}): {out:?}")
                })
            }
            Server::Local {
                dev,
                listener,
                stats,
            } => {
                let verify = stop_listening(&dev, listener, &stats, o);
                let report = ServerReport {
                    rep_rtu_us: stats.rep_rtu_us(),
                    verify,
                    ..ServerReport::default()
                };
                dev.close();
                Ok(report)
            }
        }
    }
}

/// The client device, the path to the server and the connections' state.
struct Client {
    dev: Arc<Device>,
    path: PathRec,
    shared: Arc<Shared>,
    handler: RustHandler,
}

impl Client {
    fn open(o: &Opts) -> Result<Client, String> {
        let dev = open(o, &o.client)?;
        let path = path_to(&dev, &o.server)?;
        let shared = Arc::new(Shared::new(o.connections));
        let handler: RustHandler = {
            let shared = shared.clone();
            Arc::new(move |id: &CmId, ev: &Event| shared.on_event(id, ev))
        };
        Ok(Client {
            dev,
            path,
            shared,
            handler,
        })
    }

    /// Phase 1: N connects, C in flight. They are started in bursts: every
    /// slot that is free when this thread wakes up, with their REQs sent
    /// together (`Device::batch`). Returns the ids and the phase's seconds.
    fn connect(
        &self,
        o: &Opts,
        progress: &mut Progress,
        deadline: Instant,
    ) -> Result<(Vec<Option<CmId>>, f64), String> {
        let (n, s) = (o.connections, &*self.shared);
        let t0 = Instant::now();
        let mut ids: Vec<Option<CmId>> = Vec::with_capacity(n);
        let mut i = 0;
        while i < n {
            let k = s.gate.acquire_up_to(o.concurrency, n - i, deadline);
            if k == 0 {
                return Err(format!("timed out with {i} of {n} connects started"));
            }
            self.dev.batch(|| -> Result<(), String> {
                for _ in 0..k {
                    let id = self
                        .dev
                        .create_id(None, std::ptr::null_mut(), Some(self.handler.clone()))
                        .map_err(|e| e.to_string())?;
                    s.index.lock().unwrap().insert(id.local_id(), i);
                    s.conns[i].comm_id.store(id.local_id(), Ordering::Relaxed);
                    s.conns[i].t_req.store(s.clock.ns(), Ordering::Relaxed);
                    if let Err(e) = id.send_req(&req_params(o, self.path, i)) {
                        return Err(format!("REQ {i}: {e}"));
                    }
                    ids.push(Some(id));
                    i += 1;
                }
                Ok(())
            })?;
            progress.tick("connect", i);
        }
        let done = s.gate.wait_done(n, deadline);
        let seconds = t0.elapsed().as_secs_f64();
        if done < n {
            return Err(format!("timed out: {done} of {n} connects finished"));
        }
        progress.show("connect", n);
        Ok((ids, seconds))
    }

    /// Phase 2: disconnects the established connections, C in flight, in
    /// bursts like the connects. Returns (how many, the phase's seconds).
    fn disconnect(
        &self,
        o: &Opts,
        mut ids: Vec<Option<CmId>>,
        progress: &mut Progress,
        deadline: Instant,
    ) -> Result<(usize, f64), String> {
        let s = &*self.shared;
        s.gate.reset();
        let t1 = Instant::now();
        let mut to_close = 0;
        let mut todo = Vec::with_capacity(ids.len());
        for (i, slot) in ids.iter_mut().enumerate() {
            if let Some(id) = slot.take()
                && s.conns[i].has(C_RTU)
            {
                todo.push((i, id));
            }
        }
        let mut todo = todo.into_iter();
        while todo.len() > 0 {
            let k = s.gate.acquire_up_to(o.concurrency, todo.len(), deadline);
            if k == 0 {
                return Err("timed out disconnecting".into());
            }
            self.dev.batch(|| {
                for (i, id) in todo.by_ref().take(k) {
                    let c = &s.conns[i];
                    c.t_dreq.store(s.clock.ns(), Ordering::SeqCst);
                    if id.send_dreq(&[]).is_err() || c.has(C_ERROR) {
                        // Already over (a REJ after the RTU destroyed it).
                        if c.first(C_DISC_DONE) {
                            s.gate.release();
                        }
                        c.first(C_ERROR);
                    }
                    to_close += 1;
                }
            });
            progress.tick("disconnect", to_close);
        }
        s.gate.wait_done(to_close, deadline);
        Ok((to_close, t1.elapsed().as_secs_f64()))
    }
}

/// The client device's numbers once its connections are over.
struct ClientEnd {
    live_ids: usize,
    timers: usize,
    retries: u64,
    timeouts: u64,
    rej_rx: u64,
    drops: u64,
    tx_errors: u64,
}

impl ClientEnd {
    fn read(dev: &Device) -> ClientEnd {
        let c = dev.counters();
        ClientEnd {
            live_ids: dev.live_ids(),
            timers: dev.timer_count(),
            retries: c.tx_retries.iter().sum(),
            timeouts: c.timeouts.iter().sum(),
            rej_rx: c.rej_rx.iter().sum(),
            drops: c.total_drops(),
            tx_errors: dev.transport().stats().tx_errors.load(Ordering::Relaxed),
        }
    }
}

/// Per-step latencies (ns) of the connections that got that far.
struct Latencies {
    req_rep: Vec<u64>,
    connect: Vec<u64>,
    disc: Vec<u64>,
}

impl Latencies {
    fn collect(conns: &[Conn]) -> Latencies {
        let n = conns.len();
        let mut l = Latencies {
            req_rep: Vec::with_capacity(n),
            connect: Vec::with_capacity(n),
            disc: Vec::with_capacity(n),
        };
        for c in conns {
            let (q, p, e) = (
                c.t_req.load(Ordering::Relaxed),
                c.t_rep.load(Ordering::Relaxed),
                c.t_est.load(Ordering::Relaxed),
            );
            if p > 0 {
                l.req_rep.push(p - q);
            }
            if e > 0 {
                l.connect.push(e - q);
            }
            let (d, r) = (
                c.t_dreq.load(Ordering::Relaxed),
                c.t_drep.load(Ordering::Relaxed),
            );
            if r > d && d > 0 {
                l.disc.push(r - d);
            }
        }
        l
    }
}

/// When each connection was established, in seconds from the first REQ
/// (the `--svg` rate plot).
fn established_times_s(conns: &[Conn]) -> Vec<f64> {
    let start = conns
        .iter()
        .map(|c| c.t_req.load(Ordering::Relaxed))
        .filter(|&t| t > 0)
        .min()
        .unwrap_or(0);
    conns
        .iter()
        .map(|c| c.t_est.load(Ordering::Relaxed))
        .filter(|&t| t > 0)
        .map(|t| t.saturating_sub(start) as f64 / 1e9)
        .collect()
}

/// Blocks until `dev` has no ids left or `settle` has passed (`--verify`:
/// retransmissions and timewait run out).
fn wait_for_ids(dev: &Device, settle: Duration) {
    let until = Instant::now() + settle;
    while dev.live_ids() > 0 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl Verify {
    /// `--verify`: each connection's outcome here against the server's
    /// lists of client comm IDs that ended cleanly there or not.
    fn check(conns: &[Conn], client: &ClientEnd, srv: &ServerReport) -> Result<Verify, String> {
        let Some(sv) = &srv.verify else {
            return Err(format!("no verify report from the server: {srv:?}"));
        };
        let ok: HashSet<u32> = sv.ok_ids.iter().copied().collect();
        let err: HashSet<u32> = sv.err_ids.iter().copied().collect();
        let (mut both_ok, mut both_err, mut c_ok_s_err, mut c_err_s_ok, mut c_ok_s_none) =
            (0, 0, 0, 0, 0);
        for c in conns {
            let id = c.comm_id.load(Ordering::Relaxed);
            match (c.ended_ok(), ok.contains(&id), err.contains(&id)) {
                (true, true, _) => both_ok += 1,
                (true, false, true) => c_ok_s_err += 1,
                (true, false, false) => c_ok_s_none += 1,
                (false, true, _) => c_err_s_ok += 1,
                (false, false, _) => both_err += 1,
            }
        }
        Ok(Verify {
            both_ok,
            both_error: both_err,
            client_ok_server_error: c_ok_s_err,
            client_error_server_ok: c_err_s_ok,
            client_ok_server_unknown: c_ok_s_none,
            mismatches: c_ok_s_err + c_err_s_ok + c_ok_s_none,
            client_live_ids: client.live_ids,
            client_timers: client.timers,
            server_live_ids: sv.live_ids,
            server_timers: sv.timers,
            server_rep_errors: sv.rep_errors,
            server_rejected: sv.rejected,
            server_ids_created: sv.ids_created,
            server_ids_destroyed: sv.ids_destroyed,
        })
    }

    /// The mismatched connections, plus one if either side leaked ids or
    /// timers.
    fn failures(&self) -> usize {
        let leaked = self.server_live_ids != 0
            || self.server_timers != 0
            || self.client_live_ids != 0
            || self.client_timers != 0;
        self.mismatches + usize::from(leaked)
    }
}

/// Everything a finished run measured.
struct Results {
    established: usize,
    failed: usize,
    connect_s: f64,
    /// How many connections phase 2 disconnected, and in how long.
    disconnected: usize,
    disconnect_s: f64,
    req_rep_us: Pct,
    connect_us: Pct,
    disconnect_us: Pct,
    server: ServerReport,
    cpu_s: f64,
    max_rss_kib: u64,
    client: ClientEnd,
    verify: Option<Verify>,
    baseline: Option<BaseResult>,
}

impl Results {
    fn connect_per_s(&self, o: &Opts) -> f64 {
        o.connections as f64 / self.connect_s
    }

    fn disconnect_per_s(&self) -> f64 {
        self.disconnected as f64 / self.disconnect_s.max(1e-9)
    }

    /// The CM against the UDP baseline (`--baseline`).
    fn ratio_to_udp(&self, o: &Opts) -> Option<Ratio> {
        self.baseline.as_ref().map(|b| Ratio {
            rate: self.connect_per_s(o) / b.rate,
            p50: self.connect_us.p50 / b.lat.p50.max(1e-9),
        })
    }

    /// `--json`.
    fn report(&self, o: &Opts) -> Report<'_> {
        Report {
            connections: o.connections,
            established: self.established,
            failed: self.failed,
            connect_per_s: per_s(self.connect_per_s(o)),
            disconnect_per_s: per_s(self.disconnect_per_s()),
            connect_us: self.connect_us,
            disconnect_us: self.disconnect_us,
            req_rep_us: self.req_rep_us,
            rep_rtu_us: self.server.rep_rtu_us,
            cpu_s: self.cpu_s,
            max_rss_kib: self.max_rss_kib,
            fabric: o.fabric.clone(),
            processes: o.processes,
            concurrency: o.concurrency,
            threads: o.threads,
            connect_s: self.connect_s,
            disconnect_s: self.disconnect_s,
            retries: self.client.retries,
            timeouts: self.client.timeouts,
            rej_rx: self.client.rej_rx,
            drops: self.client.drops,
            tx_errors: self.client.tx_errors,
            verify: self.verify.as_ref(),
            udp_baseline: self.baseline.as_ref().map(|b| UdpBaseline {
                exchanges_per_s: per_s(b.rate),
                exchange_us: b.lat,
                batching: b.batching,
                cpu_us: b.cpu_us,
                floor: &b.floor,
            }),
            ratio_to_udp: self.ratio_to_udp(o),
        }
    }

    /// The text report (without the verify line).
    fn print_text(&self, o: &Opts) {
        println!(
            "ibcm bench: {} connections over the {} fabric ({} process{}), {} in flight, {} thread(s)",
            o.connections,
            o.fabric,
            o.processes,
            if o.processes == 1 { "" } else { "es" },
            o.concurrency,
            o.threads
        );
        println!("  established {}, failed {}", self.established, self.failed);
        println!(
            "  connect     {:>10.0} /s   ({:.3} s)",
            self.connect_per_s(o),
            self.connect_s
        );
        println!(
            "  disconnect  {:>10.0} /s   ({:.3} s)",
            self.disconnect_per_s(),
            self.disconnect_s
        );
        println!("  latency (µs)        p50        p99        max");
        for (name, p) in [
            ("REQ->REP", self.req_rep_us),
            ("REP->RTU", self.server.rep_rtu_us),
            ("connect", self.connect_us),
            ("DREQ->DREP", self.disconnect_us),
        ] {
            println!(
                "  {name:<14} {:>10.1} {:>10.1} {:>10.1}",
                p.p50, p.p99, p.max
            );
        }
        println!(
            "  CPU {:.2} s, peak RSS {} KiB, retransmissions {}",
            self.cpu_s, self.max_rss_kib, self.client.retries
        );
        if let (Some(b), Some(r)) = (&self.baseline, self.ratio_to_udp(o)) {
            println!(
                "  UDP baseline ({}): {:.0} exchanges/s, p50 {:.1} µs, CPU {:.2} µs each -> ratio_to_udp rate {:.2}, p50 {:.2}",
                b.batching, b.rate, b.lat.p50, b.cpu_us, r.rate, r.p50
            );
            println!("  the baseline doing the wire's per-message work (same sockets, this run):");
            for f in &b.floor {
                println!(
                    "    {:<24} {:>10} /s   {:.2} of the baseline, CPU {:.2} µs each",
                    f.work, f.exchanges_per_s, f.ratio, f.cpu_us
                );
            }
        }
    }
}

pub fn main(a: &Args) -> i32 {
    let o = Opts::new(a);
    let (what, result) = if o.serve {
        ("ibcm bench --serve", serve(&o))
    } else if o.serve_baseline {
        ("ibcm bench --serve-baseline", serve_baseline(&o))
    } else if o.scale {
        ("ibcm bench --scale", scale(&o))
    } else if o.client_only {
        ("ibcm bench --client-only", client_only(&o))
    } else if o.processes > 2 {
        ("ibcm bench", run_processes(&o))
    } else {
        ("ibcm bench", run(&o))
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("{what}: {e}");
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
    let server = Server::start(o)?;
    let client = Client::open(o)?;
    let mut progress = Progress::new(o);
    let deadline = Instant::now() + o.timeout;

    let (cpu0, _) = usage();
    let (ids, connect_s) = client.connect(o, &mut progress, deadline)?;
    let established = client.shared.established();
    let (disconnected, disconnect_s) = client.disconnect(o, ids, &mut progress, deadline)?;
    progress.clear();
    let (cpu1, rss) = usage();

    let conns = &client.shared.conns;
    let lat = Latencies::collect(conns);
    if o.verify {
        // Let this side's ids finish too before comparing with the server.
        wait_for_ids(&client.dev, o.settle);
    }
    let client_end = ClientEnd::read(&client.dev);
    let srv = server.finish(o)?;
    let verify = if o.verify {
        Some(Verify::check(conns, &client_end, &srv)?)
    } else {
        None
    };
    client.dev.close();

    if let Some(path) = &o.svg {
        let svg = bench_svg(
            &lat,
            baseline.as_ref().map(|b| &b.lat_ns[..]),
            &established_times_s(conns),
            connect_s,
        );
        if let Err(e) = std::fs::write(path, svg) {
            return Err(format!("cannot write {}: {e}", path.display()));
        }
    }
    let results = Results {
        established,
        failed: client.shared.failed.load(Ordering::Relaxed),
        connect_s,
        disconnected,
        disconnect_s,
        req_rep_us: pct(lat.req_rep),
        connect_us: pct(lat.connect),
        disconnect_us: pct(lat.disc),
        cpu_s: (cpu1 - cpu0) + srv.cpu_s,
        max_rss_kib: rss.max(srv.max_rss_kib),
        server: srv,
        client: client_end,
        verify,
        baseline,
    };
    if o.json {
        print_json(&results.report(o));
    } else {
        results.print_text(o);
    }
    if results.established + results.failed < o.connections {
        return Err("not every connection finished".into());
    }
    if let Some(v) = &results.verify {
        if !o.json {
            let line = serde_json::to_string(v).map_err(|e| e.to_string())?;
            println!("  verify{line}");
        }
        let failures = v.failures();
        if failures > 0 {
            return Err(format!(
                "verify: {failures} connection(s) ended differently on the two sides, or ids/timers leaked"
            ));
        }
    }
    Ok(())
}

// ------------------------------------------------- --processes N > 2

/// What one client process of a `--processes N > 2` run reports.
#[derive(Debug, Serialize, Deserialize)]
struct ClientRun {
    connections: usize,
    established: usize,
    failed: usize,
    disconnected: usize,
    connect_s: f64,
    disconnect_s: f64,
    connect_us: Pct,
    req_rep_us: Pct,
    cpu_s: f64,
}

/// A client process: open the (shared) client device, say "ready", wait
/// for the go (stdin), connect and disconnect, print one JSON line.
fn client_only(o: &Opts) -> Result<(), String> {
    let client = Client::open(o)?;
    let mut progress = Progress::new(&Opts {
        json: true,
        ..o.clone()
    });
    say_ready();
    wait_for_stdin();
    let deadline = Instant::now() + o.timeout;
    let (cpu0, _) = usage();
    let (ids, connect_s) = client.connect(o, &mut progress, deadline)?;
    let established = client.shared.established();
    let (disconnected, disconnect_s) = client.disconnect(o, ids, &mut progress, deadline)?;
    let (cpu1, _) = usage();
    let lat = Latencies::collect(&client.shared.conns);
    print_json(&ClientRun {
        connections: o.connections,
        established,
        failed: client.shared.failed.load(Ordering::Relaxed),
        disconnected,
        connect_s,
        disconnect_s,
        connect_us: pct(lat.connect),
        req_rep_us: pct(lat.req_rep),
        cpu_s: cpu1 - cpu0,
    });
    let _ = std::io::stdout().flush();
    client.dev.close();
    Ok(())
}

/// `--processes N > 2`: one server process and N-1 client processes that
/// share the client device through the host CM service, started together;
/// the aggregate connect rate is all connections over the slowest
/// process's connect phase.
fn run_processes(o: &Opts) -> Result<(), String> {
    if ibcm::runtime::service_mode() == ibcm::runtime::ServiceMode::Off {
        return Err(format!(
            "--processes {}: the client processes share {} through the host CM service; not with IBCM_SERVICE=off",
            o.processes, o.client
        ));
    }
    let k = (o.processes - 1) as usize;
    let server = Server::start(o)?;
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let mut children = Vec::with_capacity(k);
    for c in 0..k {
        let n = o.connections / k + usize::from(c < o.connections % k);
        let child = std::process::Command::new(&exe)
            .args(["bench", "--client-only"])
            .args(["--connections", &n.to_string()])
            .args(["--concurrency", &(o.concurrency / k).max(1).to_string()])
            .args(["--server", &o.server, "--client", &o.client])
            .args(["--threads", &o.threads.to_string()])
            .args(["--timeout", &o.timeout.as_secs_f64().to_string()])
            .args(["--cm-timeout", &o.cm_timeout.to_string()])
            .args(["--cm-local-timeout", &o.cm_local_timeout.to_string()])
            .args(["--cm-retries", &o.cm_retries.to_string()])
            .args(["--qpn-base", &((c as u32 + 1) << 20).to_string()])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start client process {c}: {e}"))?;
        children.push(child);
    }
    let mut outs = Vec::with_capacity(k);
    for (c, child) in children.iter_mut().enumerate() {
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        let _ = out.read_line(&mut line);
        if line.trim() != "ready" {
            for ch in children.iter_mut() {
                let _ = ch.kill();
            }
            return Err(format!(
                "client process {c} did not start ({:?})",
                line.trim()
            ));
        }
        outs.push(out);
    }
    // Go: all at once.
    for child in children.iter_mut() {
        drop(child.stdin.take());
    }
    let mut runs = Vec::with_capacity(k);
    for (c, (mut child, mut out)) in children.into_iter().zip(outs).enumerate() {
        let mut text = String::new();
        let _ = out.read_to_string(&mut text);
        let status = child.wait().map_err(|e| e.to_string())?;
        let run: ClientRun = serde_json::from_str(text.trim()).map_err(|e| {
            format!("client process {c} ({status}): unreadable report ({e}): {text:?}")
        })?;
        runs.push(run);
    }
    let srv = server.finish(o)?;
    let established: usize = runs.iter().map(|r| r.established).sum();
    let failed: usize = runs.iter().map(|r| r.failed).sum();
    let disconnected: usize = runs.iter().map(|r| r.disconnected).sum();
    let connect_s = runs.iter().map(|r| r.connect_s).fold(0.0, f64::max);
    let disconnect_s = runs.iter().map(|r| r.disconnect_s).fold(0.0, f64::max);
    let rate = |n: usize, s: f64| if s > 0.0 { per_s(n as f64 / s) } else { 0 };
    let report = serde_json::json!({
        "connections": o.connections,
        "established": established,
        "failed": failed,
        "disconnected": disconnected,
        "processes": o.processes,
        "client_processes": k,
        "concurrency": o.concurrency,
        "connect_per_s": rate(established, connect_s),
        "disconnect_per_s": rate(disconnected, disconnect_s),
        "connect_s": rounded(connect_s, 4),
        "disconnect_s": rounded(disconnect_s, 4),
        "server_established": srv.established,
        "per_process": runs,
    });
    if o.json {
        print_json(&report);
    } else {
        println!(
            "bench: {} connections from {k} client processes sharing {} (through the CM service) to {}, {} in flight",
            o.connections, o.client, o.server, o.concurrency
        );
        println!(
            "  connect     {:>9}/s aggregate ({established} established, {failed} failed, {connect_s:.3} s)",
            rate(established, connect_s)
        );
        println!(
            "  disconnect  {:>9}/s aggregate ({disconnected} in {disconnect_s:.3} s)",
            rate(disconnected, disconnect_s)
        );
        for (c, r) in runs.iter().enumerate() {
            println!(
                "  process {c}: {} established, connect p50 {:.1} us p99 {:.1} us",
                r.established, r.connect_us.p50, r.connect_us.p99
            );
        }
    }
    if established + failed < o.connections {
        return Err("not every connection finished".into());
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
    let sdev = open(o, &sname)?;
    let cdev = open(o, &cname)?;
    let stats = Arc::new(ServerStats::default());
    let listener = listen(&sdev, &stats)?;
    let path = path_to(&cdev, &sname)?;
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
        id.send_req(&req_params(o, path, i))
            .map_err(|e| format!("REQ {i}: {e}"))?;
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

    /// A release wakes a thread waiting for a slot (it returns long before
    /// its deadline) and, with nobody waiting, counts no waiter.
    #[test]
    fn gate_release_wakes_a_waiting_acquire() {
        let g = Arc::new(Gate::new());
        let far = Instant::now() + Duration::from_secs(30);
        assert_eq!(g.acquire_up_to(2, 5, far), 2);
        let g2 = g.clone();
        let t = std::thread::spawn(move || {
            let t0 = Instant::now();
            (g2.acquire_up_to(2, 1, far), t0.elapsed())
        });
        while g.m.lock().unwrap().waiters == 0 {
            std::thread::yield_now();
        }
        g.release();
        let (k, waited) = t.join().unwrap();
        assert_eq!(k, 1);
        assert!(waited < Duration::from_secs(10), "woken by the release");
        g.release();
        assert_eq!(g.m.lock().unwrap().waiters, 0);
        assert_eq!(g.wait_done(2, far), 2);
    }

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

    /// A connection the client saw with `flags`, with comm ID `id` and the
    /// step times (ns) `t` = (REQ, REP, RTU, DREQ, DREP).
    fn conn(id: u32, flags: u32, t: [u64; 5]) -> Conn {
        let c = Conn::default();
        c.comm_id.store(id, Ordering::Relaxed);
        c.flags.store(flags, Ordering::Relaxed);
        for (a, v) in [&c.t_req, &c.t_rep, &c.t_est, &c.t_dreq, &c.t_drep]
            .into_iter()
            .zip(t)
        {
            a.store(v, Ordering::Relaxed);
        }
        c
    }

    fn client_end(live_ids: usize) -> ClientEnd {
        ClientEnd {
            live_ids,
            timers: 0,
            retries: 0,
            timeouts: 0,
            rej_rx: 0,
            drops: 0,
            tx_errors: 0,
        }
    }

    #[test]
    fn verify_compares_each_connection_with_the_server() {
        let ok = C_RTU | C_CONNECT_DONE | C_DREP | C_DISC_DONE;
        let conns = [
            conn(1, ok, [0; 5]),                       // both ok
            conn(2, C_ERROR | C_CONNECT_DONE, [0; 5]), // both error
            conn(3, ok, [0; 5]),                       // server: error
            conn(4, ok | C_ERROR, [0; 5]),             // server: ok
            conn(5, ok, [0; 5]),                       // server: never saw it
            conn(6, C_RTU | C_CONNECT_DONE, [0; 5]),   // no DREP: error here
        ];
        let srv = ServerReport {
            verify: Some(ServerVerify {
                ok_ids: vec![1, 4],
                err_ids: vec![2, 3],
                ..ServerVerify::default()
            }),
            ..ServerReport::default()
        };
        let v = Verify::check(&conns, &client_end(0), &srv).unwrap();
        assert_eq!(
            (
                v.both_ok,
                v.both_error,
                v.client_ok_server_error,
                v.client_error_server_ok,
                v.client_ok_server_unknown
            ),
            (1, 2, 1, 1, 1)
        );
        assert_eq!(v.mismatches, 3);
        assert_eq!(v.failures(), 3);
        // An id left on either side counts once more.
        let v = Verify::check(&conns, &client_end(2), &srv).unwrap();
        assert_eq!((v.mismatches, v.failures()), (3, 4));
        // A server without the verify half is an error.
        let plain = ServerReport::default();
        assert!(Verify::check(&conns, &client_end(0), &plain).is_err());
    }

    #[test]
    fn latencies_only_count_steps_that_happened() {
        let conns = [
            conn(1, 0, [10, 30, 35, 100, 160]),
            conn(2, 0, [20, 0, 0, 0, 0]),       // no REP
            conn(3, 0, [40, 50, 0, 200, 0]),    // RTU failed, no DREP
            conn(4, 0, [60, 70, 75, 300, 250]), // DREP time before DREQ
        ];
        let l = Latencies::collect(&conns);
        assert_eq!(l.req_rep, [20, 10, 10]);
        assert_eq!(l.connect, [25, 15]);
        assert_eq!(l.disc, [60]);
        assert_eq!(established_times_s(&conns), [25e-9, 65e-9]);
    }
}
