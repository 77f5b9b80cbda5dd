//! A busy CM service is not a hung one: a round trip that waits longer
//! than `IBCM_SERVICE_TIMEOUT_MS` goes on while the service makes
//! progress (records arrive on the connection, its CPU time grows, it waits
//! for a CPU) and ends with `ETIMEDOUT` when it makes none, or at
//! `IBCM_SERVICE_BUSY_MAX_MS` when it works without ever answering.
//!
//! The fake service is a thread of this process (its `SO_PEERCRED` pid is
//! this process's), or for the starved-service tests a process of its own:
//! the tests run one at a time (`SERIAL`) so that one's CPU burn is not
//! another's progress. The bounds are small, set for the
//! whole binary before anything reads them.

#[path = "common/fake_service.rs"]
mod fake;
#[path = "common/net.rs"]
mod net;
#[path = "common/served.rs"]
mod served;

use ibcm::api::{Device, Gid, PortInfo};
use ibcm::ipc::{self, Header, Public, Stat, op, sock};
use std::sync::{Mutex, MutexGuard, Once};
use std::time::{Duration, Instant};

const BOUND_MS: u64 = 300;
const CEILING_MS: u64 = 2400;

static SERIAL: Mutex<()> = Mutex::new(());

fn setup() -> MutexGuard<'static, ()> {
    static ENV: Once = Once::new();
    ENV.call_once(|| {
        // SAFETY: set before any thread of this binary reads them (the
        // first test to run sets them, under `Once`, before it opens).
        unsafe {
            std::env::set_var("IBCM_SERVICE_TIMEOUT_MS", BOUND_MS.to_string());
            std::env::set_var("IBCM_SERVICE_BUSY_MAX_MS", CEILING_MS.to_string());
        }
    });
    let g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    assert_eq!(
        ibcm::api::service_timeout(),
        Duration::from_millis(BOUND_MS)
    );
    assert_eq!(
        ibcm::api::service_busy_max(),
        Duration::from_millis(CEILING_MS)
    );
    g
}

fn ports() -> Vec<PortInfo> {
    vec![PortInfo::roce(
        1,
        Gid::from(net::ip(2).parse::<std::net::IpAddr>().unwrap()),
    )]
}

/// A pushed record the client reads and drops (a `PORTS` record with a
/// nonzero seq): traffic on the connection, nothing else.
fn noise() -> Vec<u8> {
    let mut w = Header {
        op: op::PORTS,
        seq: 1,
        handle: 0,
    }
    .record();
    w.put(&ports().into_boxed_slice());
    w.into_bytes()
}

fn stat_reply(h: Header) -> Vec<u8> {
    ipc::reply(h, 0, Public::default(), |w| {
        w.put(&Stat::default());
    })
}

/// A fake service that answers OPEN at once and handles STAT with `stat`.
fn serve(
    test: &str,
    mut stat: impl FnMut(&std::os::fd::OwnedFd, Header) -> Option<Vec<u8>> + Send + 'static,
) -> (std::sync::Arc<Device>, std::thread::JoinHandle<()>) {
    let socket = fake::temp_socket("svc-busy", test);
    let server = fake::serve(&socket, move |fd, h, _| match h.op {
        op::OPEN => Some(fake::opened(h, ports())),
        op::STAT => stat(fd, h),
        _ => None,
    });
    let d = Device::open_served(&net::soft(2), &socket).unwrap();
    (d, server)
}

/// A call on `d` whose service answers after 2.5 bounds of progress: it
/// gets its reply (no timeout counted since `timeouts`, one busy wait
/// since `busy`: one log line), and the connection is not declared
/// broken — the next call is served.
fn waited_for_and_served(
    d: std::sync::Arc<Device>,
    server: std::thread::JoinHandle<()>,
    timeouts: u64,
    busy: u64,
) {
    let t = Instant::now();
    assert!(d.service_stat().is_some(), "the call did not get its reply");
    assert!(t.elapsed() >= Duration::from_millis(BOUND_MS * 5 / 2));
    assert_eq!(ibcm::api::service_timeouts(), timeouts);
    assert_eq!(ibcm::api::service_busy_waits(), busy + 1, "one log line");
    assert!(d.service_stat().is_some(), "declared broken after the wait");
    d.close();
    server.join().unwrap();
}

#[test]
fn a_service_pushing_records_is_waited_for_past_the_bound() {
    let _g = setup();
    let (timeouts, busy) = (
        ibcm::api::service_timeouts(),
        ibcm::api::service_busy_waits(),
    );
    let mut n = 0;
    let (d, server) = serve("records", move |fd, h| {
        // Working through other clients' records: the connection sees
        // traffic, this reply comes after 2.5 bounds.
        n += 1;
        let t = Instant::now();
        while n == 1 && t.elapsed() < Duration::from_millis(BOUND_MS * 5 / 2) {
            sock::send(fd, &noise()).unwrap();
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(stat_reply(h))
    });
    waited_for_and_served(d, server, timeouts, busy);
}

#[test]
fn a_service_burning_cpu_is_waited_for_past_the_bound() {
    let _g = setup();
    let (timeouts, busy) = (
        ibcm::api::service_timeouts(),
        ibcm::api::service_busy_waits(),
    );
    let mut n = 0;
    let (d, server) = serve("cpu", move |_, h| {
        n += 1;
        if n == 1 {
            // Working on a long queue: nothing on this connection, CPU
            // time growing; the reply after 2.5 bounds.
            served::burn(Duration::from_millis(BOUND_MS * 5 / 2));
        }
        Some(stat_reply(h))
    });
    waited_for_and_served(d, server, timeouts, busy);
}

#[test]
fn a_service_that_burns_cpu_and_never_answers_times_out_at_the_ceiling() {
    let _g = setup();
    let (timeouts, busy) = (
        ibcm::api::service_timeouts(),
        ibcm::api::service_busy_waits(),
    );
    let (d, server) = serve("livelock", |_, _| {
        // A livelocked thread: CPU time grows, no answer ever.
        served::burn(Duration::from_millis(CEILING_MS + 3000));
        None
    });
    let t = Instant::now();
    assert!(d.service_stat().is_none());
    let took = t.elapsed();
    assert!(took >= Duration::from_millis(CEILING_MS), "{took:?}");
    assert!(
        took < Duration::from_millis(CEILING_MS + BOUND_MS + 1500),
        "{took:?}"
    );
    assert_eq!(ibcm::api::service_timeouts(), timeouts + 1);
    assert_eq!(ibcm::api::service_busy_waits(), busy + 1);
    // Declared broken: later calls fail at once.
    let t = Instant::now();
    assert!(d.service_stat().is_none());
    assert!(t.elapsed() < Duration::from_millis(BOUND_MS));
    d.close();
    server.join().unwrap();
}

#[test]
fn a_silent_service_of_this_process_times_out() {
    let _g = setup();
    let (timeouts, busy) = (
        ibcm::api::service_timeouts(),
        ibcm::api::service_busy_waits(),
    );
    // Deadlocked: no answer, no records, no CPU time.
    let (d, server) = serve("silent", |_, _| None);
    let t = Instant::now();
    assert!(d.service_stat().is_none());
    let took = t.elapsed();
    // One period, and one more to see the CPU time not grow; never past
    // the ceiling. On a quiet host that is two bounds; on a loaded one
    // this fake service is this process, whose own threads (the caller's
    // among them) wait for a CPU, which rightly counts as progress for a
    // period, up to the ceiling. That the wait ends well before the
    // ceiling is checked by the sleeping service of a process of its own
    // (`a_sleeping_service_beside_a_busy_cpu_times_out_after_two_bounds`),
    // whose threads this test's load cannot reach.
    assert!(took >= Duration::from_millis(BOUND_MS), "{took:?}");
    assert!(
        took < Duration::from_millis(CEILING_MS + BOUND_MS + 1500),
        "{took:?}"
    );
    assert_eq!(ibcm::api::service_timeouts(), timeouts + 1);
    // (No check of the busy waits either, for the same reason.)
    let _ = busy;
    // Declared broken: later calls fail at once.
    let t = Instant::now();
    assert!(d.service_stat().is_none());
    assert!(t.elapsed() < Duration::from_millis(BOUND_MS));
    d.close();
    server.join().unwrap();
}

// A service starved of CPU: runnable, but another process has its CPU.
// The fake service is a process of its own here (a re-run of this binary,
// `fake_service_process`), so that its CPU time and run-queue wait are
// its own: pinned to one CPU and, once it is open, under `SCHED_IDLE`
// (weight 3), with a CPU burner at nice 0 (weight 1024) pinned to the same
// CPU, it gets a fraction of a per cent of that CPU and waits on its run
// queue the rest, until the test lifts both 4 bounds into its call.

/// The CPU the starved service and its burner share: the first this
/// process may run on.
fn one_cpu() -> usize {
    // SAFETY: a zeroed cpu_set_t is a valid empty set, filled by the call.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: the set's own size; pid 0 is this thread.
    let r = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) };
    assert_eq!(
        r,
        0,
        "sched_getaffinity: {}",
        std::io::Error::last_os_error()
    );
    (0..libc::CPU_SETSIZE as usize)
        // SAFETY: a valid set and an index below its size.
        .find(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .expect("no CPU to run on")
}

/// `cmd`, pinned to `cpu` from its start: every thread it makes inherits
/// it.
fn pinned(mut cmd: std::process::Command, cpu: usize) -> std::process::Child {
    use std::os::unix::process::CommandExt;
    // SAFETY: between fork and exec only system calls are made.
    unsafe {
        cmd.pre_exec(move || {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            if libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.stdin(std::process::Stdio::null()).spawn().unwrap()
}

/// A child that ends when dropped (the test's own processes only).
struct Reaped(std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The fake service as a process of its own (`mode`: `starved` spins
/// on a STAT while it is under `SCHED_IDLE` and then answers it, `asleep`
/// never answers one), pinned to `cpu`; `idle` puts it under
/// `SCHED_IDLE` once the test has opened it (so that the open does not
/// depend on what else loads the host).
fn service_process(test: &str, mode: &str, cpu: usize) -> (std::path::PathBuf, Reaped) {
    let socket = fake::temp_socket("svc-busy", test);
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "fake_service_process",
        "--ignored",
        "--nocapture",
    ])
    .env("SVC_BUSY_CHILD_SOCKET", &socket)
    .env("SVC_BUSY_CHILD_MODE", mode);
    let child = Reaped(pinned(cmd, cpu));
    assert!(
        served::wait_for(Duration::from_secs(30), || socket.exists()),
        "the service process did not listen"
    );
    (socket, child)
}

/// A CPU burner at nice 0 on `cpu`.
fn burner(cpu: usize) -> Reaped {
    let mut cmd = std::process::Command::new("sh");
    cmd.args(["-c", "while :; do :; done"]);
    Reaped(pinned(cmd, cpu))
}

/// Every thread of `pid` under `SCHED_IDLE` (`true`) or back under
/// `SCHED_OTHER`.
fn idle(pid: u32, on: bool) {
    let p = libc::sched_param { sched_priority: 0 };
    let policy = if on {
        libc::SCHED_IDLE
    } else {
        libc::SCHED_OTHER
    };
    for t in std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
    {
        let tid: libc::pid_t = t.file_name().to_str().unwrap().parse().unwrap();
        // SAFETY: a thread of our own child; a plain policy change.
        let r = unsafe { libc::sched_setscheduler(tid, policy, &p) };
        assert_eq!(
            r,
            0,
            "sched_setscheduler: {}",
            std::io::Error::last_os_error()
        );
    }
}

/// The fake service of `service_process` (run only as that child).
#[test]
#[ignore = "the fake service process of the starved-service tests"]
fn fake_service_process() {
    let (Some(socket), Ok(mode)) = (
        std::env::var_os("SVC_BUSY_CHILD_SOCKET"),
        std::env::var("SVC_BUSY_CHILD_MODE"),
    ) else {
        return;
    };
    let mut n = 0;
    let server = fake::serve(std::path::Path::new(&socket), move |fd, h, _| match h.op {
        op::OPEN if mode == "asleep" => {
            // Deadlocked once open: asleep, reading nothing more (a
            // request that comes wakes nobody).
            sock::send(fd, &fake::opened(h, ports())).unwrap();
            std::thread::sleep(Duration::from_secs(3600));
            None
        }
        op::OPEN => Some(fake::opened(h, ports())),
        op::STAT => {
            n += 1;
            if n == 1 {
                // Runnable all along: spinning while the test keeps this
                // thread under `SCHED_IDLE` (what CPU it gets is the
                // burner's leftover); the test lifts it 4 bounds after its
                // call (`release`), so the answer then comes at once
                // whatever else loads the host. (A cap, never a hang.)
                let t = Instant::now();
                // SAFETY: 0 is this thread.
                while unsafe { libc::sched_getscheduler(0) } == libc::SCHED_IDLE
                    && t.elapsed() < Duration::from_secs(60)
                {
                    std::hint::spin_loop();
                }
            }
            Some(stat_reply(h))
        }
        _ => None,
    });
    server.join().unwrap();
}

/// Whether no thread of `pid` is runnable (state `R`).
fn asleep(pid: u32) -> bool {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
        .all(|t| {
            t.file_name()
                .to_str()
                .and_then(|tid| tid.parse().ok())
                .is_some_and(|tid| sock::proc_stat(tid).is_ok_and(|st| st.state != Some('R')))
        })
}

/// The CPU time of `child` (ms).
fn cpu_of(child: &Reaped) -> u64 {
    sock::proc_stat(child.0.id() as i32)
        .unwrap()
        .cpu_ms
        .unwrap()
}

/// A call on a service starved of CPU for 4 bounds: `waited` — it gets
/// its reply after them (one busy wait counted, no timeout) and the
/// connection serves the next call; else it fails at the second look
/// (`ETIMEDOUT`, no busy wait counted, the connection declared broken). Either way the service
/// got less CPU time in the whole wait than one period's progress needs
/// (2% of a period, ≥ 20 ms) on average: with the run-queue signal off
/// its CPU time alone does not carry the wait.
fn starved_service(test: &str, waited: bool) {
    let cpu = one_cpu();
    let (socket, service) = service_process(test, "starved", cpu);
    // (Under `SCHED_IDLE` on a loaded host the open itself can wait for
    // the service's CPU: counted from here.)
    let d = Device::open_served(&net::soft(2), &socket).unwrap();
    let pid = service.0.id();
    idle(pid, true);
    let burn = burner(cpu);
    // The burner running before the call.
    std::thread::sleep(Duration::from_millis(50));
    let (timeouts, busy) = (
        ibcm::api::service_timeouts(),
        ibcm::api::service_busy_waits(),
    );
    let before = cpu_of(&service);
    let t = Instant::now();
    // 4 bounds into the call, the starvation ends: the service answers.
    let release = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(BOUND_MS * 4));
        drop(burn);
        idle(pid, false);
    });
    let got = d.service_stat();
    let took = t.elapsed();
    let used = cpu_of(&service) - before;
    release.join().unwrap();
    // Under the 20 ms a period's CPU time must grow by, on average (the
    // CPU time is counted in 10 ms ticks).
    assert!(
        u128::from(used) * u128::from(BOUND_MS) < 20 * took.as_millis(),
        "the service was not starved ({used} ms CPU in {took:?}): the test shows nothing"
    );
    if waited {
        assert!(
            got.is_some(),
            "a starved service was declared hung ({took:?})"
        );
        assert!(took >= Duration::from_millis(BOUND_MS * 4), "{took:?}");
        assert_eq!(ibcm::api::service_timeouts(), timeouts);
        assert!(
            ibcm::api::service_busy_waits() > busy,
            "no busy wait ({took:?}, {used} ms CPU, {busy} before)"
        );
        assert!(d.service_stat().is_some(), "declared broken after the wait");
    } else {
        assert!(
            got.is_none(),
            "served without the run-queue wait ({took:?})"
        );
        assert_eq!(ibcm::api::service_timeouts(), timeouts + 1);
        // Never went on past the first CPU sample's period: no progress.
        assert_eq!(ibcm::api::service_busy_waits(), busy, "{took:?}");
    }
    d.close();
    drop(service);
}

#[test]
fn a_service_starved_of_cpu_is_waited_for_past_the_bound() {
    let _g = setup();
    starved_service("starved", true);
}

/// `starved_service` with `IBCM_SERVICE_RUN_DELAY=off` (run only as the
/// child of the next test).
#[test]
#[ignore = "run by without_the_run_queue_wait_a_starved_service_times_out"]
fn starved_service_without_run_delay() {
    if std::env::var_os("IBCM_SERVICE_RUN_DELAY").is_none() {
        return;
    }
    let _g = setup();
    starved_service("starved-off", false);
}

#[test]
fn without_the_run_queue_wait_a_starved_service_times_out() {
    let _g = setup();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "starved_service_without_run_delay",
            "--ignored",
            "--nocapture",
        ])
        .env("IBCM_SERVICE_RUN_DELAY", "off")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("1 passed"),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_sleeping_service_beside_a_busy_cpu_times_out_after_two_bounds() {
    let _g = setup();
    // Deadlocked on a CPU another process keeps busy: it sleeps, so it
    // waits on no run queue.
    let cpu = one_cpu();
    let (socket, service) = service_process("asleep", "asleep", cpu);
    let d = Device::open_served(&net::soft(2), &socket).unwrap();
    // Asleep before the burner comes (its thread between the OPEN's reply
    // and its sleep would be starved, rightly seen waiting for a CPU).
    let pid = service.0.id();
    idle(pid, true);
    assert!(
        served::wait_for(Duration::from_secs(30), || asleep(pid)),
        "the service process never slept"
    );
    let burn = burner(cpu);
    let (timeouts, busy) = (
        ibcm::api::service_timeouts(),
        ibcm::api::service_busy_waits(),
    );
    let t = Instant::now();
    assert!(d.service_stat().is_none());
    let took = t.elapsed();
    drop(burn);
    assert!(took >= Duration::from_millis(BOUND_MS), "{took:?}");
    assert!(took < Duration::from_millis(CEILING_MS), "{took:?}");
    assert_eq!(ibcm::api::service_timeouts(), timeouts + 1);
    assert_eq!(ibcm::api::service_busy_waits(), busy);
    d.close();
    drop(service);
}
