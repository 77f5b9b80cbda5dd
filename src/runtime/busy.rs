//! Telling a busy CM service from a hung one.
//!
//! A wait on the service (a round trip's reply, a send into its full
//! socket, the open's reply, a port-table call) is bounded by
//! `IBCM_SERVICE_TIMEOUT_MS`, and so is the start of an on-demand
//! daemon (until it listens). A service that is working through a long
//! queue can cross that bound without being hung, so the bound is a
//! *period*, not a deadline: after each period without the answer the
//! waiter looks for progress since the last period — records that arrived
//! on the connection (events, other replies), and the service's CPU time
//! (`/proc/<pid>/stat` utime + stime) together with the time its threads
//! waited on a run queue for a CPU (`/proc/<pid>/task/*/schedstat`, the
//! second field) having grown by a meaningful amount while the process is
//! not stopped — and waits another period if there was some. A service
//! that is runnable but starved of CPU (another process has the only CPU)
//! is not hung: its run-queue wait grows; a deadlocked one sleeps, and
//! neither grows. Where the kernel keeps no run-queue wait (no
//! `schedstat`: `CONFIG_SCHED_INFO` off) or `IBCM_SERVICE_RUN_DELAY=off`,
//! the CPU time alone counts, as before. A service with no progress for one period, a stopped one, or
//! one still not answering at the ceiling (`IBCM_SERVICE_BUSY_MAX_MS`: a
//! livelocked thread burns CPU and never answers) is given up on as before.
//!
//! A service whose pid this process cannot see (`SO_PEERCRED` pid 0, or
//! another PID namespace's pid: `/proc` has no such entry) is judged by
//! the records that arrive only.

use super::remote::service_timeout;
use crate::ipc::sock;
use crate::log::WARN;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The ceiling when `IBCM_SERVICE_BUSY_MAX_MS` is unset: ten bounds, and
/// at least this.
pub const DEFAULT_SERVICE_BUSY_MAX_FLOOR: Duration = Duration::from_secs(60);

/// How long a wait on a service that keeps making progress may last in
/// all: `IBCM_SERVICE_BUSY_MAX_MS` (milliseconds; read once per process;
/// never less than [`service_timeout`]), else the larger of ten
/// [`service_timeout`]s and [`DEFAULT_SERVICE_BUSY_MAX_FLOOR`].
pub fn service_busy_max() -> Duration {
    static T: OnceLock<Duration> = OnceLock::new();
    *T.get_or_init(|| {
        let bound = service_timeout();
        let default = (bound * 10).max(DEFAULT_SERVICE_BUSY_MAX_FLOOR);
        match std::env::var("IBCM_SERVICE_BUSY_MAX_MS") {
            Err(_) => default,
            Ok(v) => match v.trim().parse::<u64>() {
                Ok(ms) if ms > 0 => Duration::from_millis(ms).max(bound),
                _ => {
                    crate::log::always(
                        WARN,
                        format_args!(
                            "IBCM_SERVICE_BUSY_MAX_MS={v:?} is not a number of milliseconds > 0: {} ms",
                            default.as_millis()
                        ),
                    );
                    default
                }
            },
        }
    })
}

/// Whether the service's run-queue wait counts as progress:
/// `IBCM_SERVICE_RUN_DELAY` unset or anything but `0` / `off` (read once
/// per process).
fn run_delay_counts() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        !std::env::var("IBCM_SERVICE_RUN_DELAY")
            .is_ok_and(|v| matches!(v.trim(), "0" | "off" | "no" | "false"))
    })
}

/// Waits of this process that crossed [`service_timeout`] and went on
/// because the service was working.
static BUSY_WAITS: AtomicU64 = AtomicU64::new(0);

/// How many waits on the service crossed [`service_timeout`] and went on
/// because the service was making progress (each wrote one log line).
pub fn service_busy_waits() -> u64 {
    BUSY_WAITS.load(Ordering::Relaxed)
}

/// Waits of this process that gave up because the service was stopped.
static STOPPED_WAITS: AtomicU64 = AtomicU64::new(0);

/// How many waits on the service gave up at a look that found the service
/// process stopped (`SIGSTOP`, a debugger), rather than after a period
/// without progress or at the ceiling.
pub fn service_stopped_waits() -> u64 {
    STOPPED_WAITS.load(Ordering::Relaxed)
}

/// Why a wait gave up.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum GaveUp {
    /// One period without an answer and without progress.
    NoProgress,
    /// The process is stopped (`SIGSTOP`, a debugger).
    Stopped,
    /// It kept working but did not answer within [`service_busy_max`].
    Ceiling,
}

/// One wait on the service: when to look for progress next, and what was
/// seen at the last look.
pub(crate) struct Watch {
    pid: i32,
    /// Count the CPU time of `pid`'s children too (a starting daemon,
    /// whose forked service does the work while it waits for it).
    family: bool,
    period: Duration,
    start: Instant,
    check_at: Instant,
    records: u64,
    cpu: Option<u64>,
    /// The service's threads' run-queue wait at the last look (ns).
    delay: Option<u64>,
    /// Its threads runnable at the last look.
    runnable: Vec<i32>,
    told: bool,
    /// A period was added to take the first CPU sample in.
    probed: bool,
    gave_up: Option<GaveUp>,
}

impl Watch {
    /// A wait that starts now on the service `pid` (0: unknown), with
    /// `records` the connection's count of records received so far. No
    /// system call: `/proc` is read only when a period passes without
    /// the answer, so the first CPU sample is taken then (and a service
    /// that shows no other progress is given one more period to show
    /// CPU time in).
    pub(crate) fn new(pid: i32, records: u64) -> Watch {
        Watch::started(pid, records, Instant::now())
    }

    /// A wait whose first period has just passed (a send or receive
    /// bounded by the socket's own timeout): look for progress now.
    pub(crate) fn late(pid: i32, records: u64) -> Watch {
        let now = Instant::now();
        Watch::started(
            pid,
            records,
            now.checked_sub(service_timeout()).unwrap_or(now),
        )
    }

    fn started(pid: i32, records: u64, start: Instant) -> Watch {
        let period = service_timeout();
        Watch {
            pid,
            family: false,
            period,
            start,
            check_at: start + period,
            records,
            cpu: None,
            delay: None,
            runnable: Vec::new(),
            told: false,
            probed: false,
            gave_up: None,
        }
    }

    /// The wait on a daemon being started (`pid`, no connection yet):
    /// its progress is the CPU time of the daemon and of its children.
    pub(crate) fn starting(pid: i32) -> Watch {
        Watch {
            family: true,
            ..Watch::new(pid, 0)
        }
    }

    /// When the wait looks for progress next (the end of the current
    /// period).
    pub(crate) fn check_at(&self) -> Instant {
        self.check_at
    }

    /// At the end of a period without the answer (`records`: the
    /// connection's count now): true — the service made progress, wait
    /// one more period (the first time, one log line naming `who` and
    /// `what`); false — give up (`gave_up` says why).
    pub(crate) fn working(&mut self, records: u64, who: &str, what: &str) -> bool {
        let waited = self.start.elapsed();
        if waited >= service_busy_max() {
            self.gave_up = Some(GaveUp::Ceiling);
            return false;
        }
        let Sample {
            state,
            cpu,
            delay,
            runnable: runnable_tids,
        } = if self.family {
            sample_family(self.pid)
        } else {
            sample(self.pid)
        };
        if matches!(state, Some('T' | 't')) {
            self.gave_up = Some(GaveUp::Stopped);
            STOPPED_WAITS.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        let more = records.saturating_sub(self.records);
        let grew = match (self.cpu, cpu) {
            (Some(a), Some(b)) => Some(b.saturating_sub(a)),
            _ => None,
        };
        let cpu_grew = grew.unwrap_or(0);
        // A thread runnable at this look and the last: starved (a
        // sleeping process's wake-up is runnable for a moment).
        let runnable_now = runnable_tids.iter().any(|t| self.runnable.contains(t));
        self.runnable = runnable_tids;
        // Waiting for a CPU (ms): a runnable service starved of CPU is
        // working as fast as it is let; a sleeping one does not wait.
        let waited_cpu = match (self.delay, delay) {
            (Some(a), Some(b)) => Some(b.saturating_sub(a) / 1_000_000),
            _ => None,
        };
        self.records = records;
        if cpu.is_some() {
            self.cpu = cpu;
        }
        if delay.is_some() {
            self.delay = delay;
        }
        // A tick or two of CPU is what an idle (or deadlocked) process's
        // housekeeping costs; working is at least 2% of a period.
        let min_cpu = (self.period.as_millis() as u64 / 50).max(20);
        // Or runnable for a quarter of the period, running or waiting
        // for a CPU (a sleeping process's wake-ups wait a few ms each on
        // a loaded machine, a starved one waits most of the period), or
        // runnable now and at the last look: the kernel adds a wait to the
        // run delay when the thread gets the CPU, so a thread starved
        // through the whole period shows only as runnable.
        let runnable = waited_cpu.is_some_and(|w| {
            runnable_now || w.saturating_add(cpu_grew) >= self.period.as_millis() as u64 / 4
        });
        if more == 0 && cpu_grew < min_cpu && !runnable {
            if grew.is_none() && cpu.is_some() && !self.probed {
                // The first CPU sample was just taken: one more period
                // to see whether it grows.
                self.probed = true;
                self.check_at += self.period;
                return true;
            }
            self.gave_up = Some(GaveUp::NoProgress);
            return false;
        }
        if !self.told {
            self.told = true;
            let first = BUSY_WAITS.fetch_add(1, Ordering::Relaxed) == 0;
            let args = format_args!(
                "{who}: the CM service (pid {}) has not answered {what} for {} ms; it is working ({}{}{} records arrived), waiting (up to {} ms, IBCM_SERVICE_BUSY_MAX_MS)",
                self.pid,
                waited.as_millis(),
                match (grew, cpu) {
                    (Some(g), _) => format!("CPU +{g} ms, "),
                    (None, Some(_)) => String::new(),
                    (None, None) => "CPU time not visible here, ".to_string(),
                },
                match waited_cpu {
                    Some(w) => format!("waiting for a CPU +{w} ms, "),
                    None => String::new(),
                },
                more,
                service_busy_max().as_millis()
            );
            // The first of the process always; later ones with IBCM_LOG
            // (a long queue makes many calls wait alike).
            if first {
                crate::log::always(WARN, args);
            } else if crate::log::enabled(WARN) {
                crate::log::write(WARN, args);
            }
        }
        self.check_at += self.period;
        true
    }

    /// For the give-up log line: how long it waited and why it stopped,
    /// empty when it gave up at the first period (the plain case).
    pub(crate) fn note(&self) -> String {
        match self.gave_up {
            Some(GaveUp::NoProgress) if !self.told && !self.probed => String::new(),
            Some(GaveUp::NoProgress) if !self.told => format!(
                "; no progress (no records, no CPU time, no wait for a CPU) in {} ms",
                self.start.elapsed().as_millis()
            ),
            Some(GaveUp::NoProgress) => format!(
                "; it had been working, then made no progress for {} ms ({} ms in all)",
                self.period.as_millis(),
                self.start.elapsed().as_millis()
            ),
            Some(GaveUp::Stopped) => format!(
                "; it is stopped ({} ms in all)",
                self.start.elapsed().as_millis()
            ),
            Some(GaveUp::Ceiling) => format!(
                "; working but not answering up to the ceiling of {} ms (IBCM_SERVICE_BUSY_MAX_MS)",
                service_busy_max().as_millis()
            ),
            None => String::new(),
        }
    }
}

/// What a look at the service process finds.
#[derive(Clone, PartialEq, Eq, Debug, Default)]
struct Sample {
    state: Option<char>,
    /// CPU time, ms.
    cpu: Option<u64>,
    /// Run-queue wait of its threads, ns.
    delay: Option<u64>,
    /// Its threads runnable now (state `R`; not the thread looking): on
    /// a CPU, or waiting for one (a wait the kernel adds to the run delay
    /// only when the thread gets the CPU). Only where the run delay is
    /// kept.
    runnable: Vec<i32>,
}

/// The state, CPU time and run-queue wait of `pid`; nothing when it is
/// not visible here.
fn sample(pid: i32) -> Sample {
    if pid <= 0 {
        return Sample::default();
    }
    let Ok(st) = sock::proc_stat(pid) else {
        return Sample::default();
    };
    let (delay, runnable) = if run_delay_counts() {
        run_delay(pid).map_or((None, Vec::new()), |(d, r)| (Some(d), r))
    } else {
        (None, Vec::new())
    };
    Sample {
        state: st.state,
        cpu: st.cpu_ms,
        delay,
        runnable,
    }
}

/// The time the threads of `pid` (those alive now) spent runnable and
/// waiting on a run queue for a CPU, in ns: the second field of each
/// `/proc/<pid>/task/<tid>/schedstat` (`/proc/<pid>/schedstat` is the
/// main thread's only). `None` when the kernel keeps none (no such file:
/// `CONFIG_SCHED_INFO` off; `0 0 0` for every thread: accounting off) or
/// `pid` is not visible here; and those threads (not this one) runnable
/// now (state `R` in its `stat`).
fn run_delay(pid: i32) -> Option<(u64, Vec<i32>)> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    // SAFETY: gettid has no preconditions.
    let me = unsafe { libc::gettid() }.to_string();
    let mut sum = 0u64;
    let mut kept = false;
    let mut runnable = Vec::new();
    for t in tasks.flatten() {
        let Ok(s) = std::fs::read_to_string(t.path().join("schedstat")) else {
            continue;
        };
        let tid = t.file_name().to_str().unwrap_or("").to_string();
        if tid != me
            && let Ok(tid) = tid.parse()
            && sock::proc_stat(tid).is_ok_and(|st| st.state == Some('R'))
        {
            runnable.push(tid);
        }
        let f: Vec<u64> = s
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        if let [ran, waited, slices] = f[..] {
            kept |= ran != 0 || waited != 0 || slices != 0;
            sum = sum.saturating_add(waited);
        }
    }
    kept.then_some((sum, runnable))
}

/// The state of `pid` and the CPU time and run-queue wait of it and its
/// children (those alive now: `/proc/<pid>/task/*/children`).
fn sample_family(pid: i32) -> Sample {
    let mut s = sample(pid);
    let Some(mut cpu) = s.cpu else {
        return Sample {
            state: s.state,
            ..Sample::default()
        };
    };
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            let Ok(c) = std::fs::read_to_string(t.path().join("children")) else {
                continue;
            };
            for child in c.split_whitespace().filter_map(|x| x.parse::<i32>().ok()) {
                let c = sample(child);
                cpu += c.cpu.unwrap_or(0);
                if let (Some(d), Some(e)) = (s.delay.as_mut(), c.delay) {
                    *d = d.saturating_add(e);
                }
                s.runnable.extend(c.runnable);
            }
        }
    }
    s.cpu = Some(cpu);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_cpu_time_is_readable() {
        let pid = std::process::id() as i32;
        let st = sock::proc_stat(pid).unwrap();
        assert!(st.state.is_some());
        let before = st.cpu_ms.unwrap();
        // Spins until 100 ms of CPU time show (a loaded machine gives this
        // thread less than the wall clock): it never does if the fields
        // read are the wrong ones.
        let t = Instant::now();
        let mut x = 0u64;
        let mut after = before;
        while after < before + 100 && t.elapsed() < Duration::from_secs(30) {
            for _ in 0..1_000_000 {
                x = std::hint::black_box(x.wrapping_add(1));
            }
            after = sock::proc_stat(pid).unwrap().cpu_ms.unwrap();
        }
        assert!(after >= before + 100, "{before} -> {after}");
        assert!(after < before + 60_000, "{before} -> {after}");
    }

    #[test]
    fn an_unseen_pid_has_no_cpu_time() {
        assert_eq!(sample(0), Sample::default());
        assert_eq!(sample(-1), Sample::default());
        assert_eq!(run_delay(-1), None);
    }

    #[test]
    fn own_run_delay_is_readable_where_the_kernel_keeps_it() {
        let pid = std::process::id() as i32;
        if !std::path::Path::new("/proc/self/schedstat").exists() {
            // No CONFIG_SCHED_INFO: the CPU time alone counts.
            assert_eq!(run_delay(pid), None);
            return;
        }
        // A second thread spinning: runnable now, seen from this one.
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s = stop.clone();
        let t = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        });
        let seen = (0..200).any(|_| {
            std::thread::sleep(Duration::from_millis(5));
            run_delay(pid).is_some_and(|(_, r)| !r.is_empty())
        });
        stop.store(true, Ordering::Relaxed);
        t.join().unwrap();
        assert!(seen, "a spinning thread not seen runnable");
        // This thread alone (the others asleep or gone) is not counted.
        assert!(run_delay(pid).is_some());
    }
}
