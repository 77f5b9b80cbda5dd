//! `rdma_resolve_addr`'s `timeout_ms` for a resolution pipelined through
//! the host CM service (docs/RDMACM.md, "Resolve timeouts"): one thread
//! per process, started with the first deadline, sleeps until the
//! earliest deadline and runs what is due. Arming a deadline later than
//! the one it sleeps until (the usual case: every resolve with the same
//! timeout) wakes nothing; an id answered in time leaves its entry to
//! expire as a no-op (the fired function checks the id), so an answer
//! costs nothing here.

use crate::channel::lock;
use crate::id::IdPriv;
use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::sync::{Arc, Condvar, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

/// The thread sleeps this much past the earliest deadline: the deadlines
/// of a burst of resolves are run by one wake-up, not one each (a
/// deadline runs at most this late, never early).
const GRAIN: Duration = Duration::from_millis(5);

/// What runs when a deadline passes: the id and the number the arming
/// gave it (so a later resolve of the same id is not the one timed out).
pub type Fire = fn(&Arc<IdPriv>, u64);

struct Entry {
    at: Instant,
    id: Weak<IdPriv>,
    token: u64,
    fire: Fire,
}

impl PartialEq for Entry {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Entry {
    fn cmp(&self, o: &Self) -> Ordering {
        (self.at, self.token).cmp(&(o.at, o.token))
    }
}

struct Timers {
    heap: BinaryHeap<Reverse<Entry>>,
    /// The process whose thread serves `heap` (a forked child starts its
    /// own: threads do not survive `fork`).
    pid: u32,
    /// When the thread wakes next (`None`: not before it is woken).
    until: Option<Instant>,
}

struct Shared {
    t: Mutex<Timers>,
    cv: Condvar,
}

fn shared() -> &'static Shared {
    static S: OnceLock<Shared> = OnceLock::new();
    S.get_or_init(|| Shared {
        t: Mutex::new(Timers {
            heap: BinaryHeap::new(),
            pid: 0,
            until: None,
        }),
        cv: Condvar::new(),
    })
}

/// Runs `fire(id, token)` once `after` has passed (on the timer thread),
/// unless `id` is gone by then.
pub fn arm(
    id: &Arc<IdPriv>,
    token: u64,
    after: Duration,
    fire: Fire,
) -> Result<(), ibcm::api::Errno> {
    let s = shared();
    let at = Instant::now() + after;
    let mut t = lock(&s.t);
    let me = ibcm::log::pid();
    if t.pid != me {
        std::thread::Builder::new()
            .name("rdmacm-timeout".into())
            .spawn(|| run(shared()))
            .map_err(|_| ibcm::api::Errno(libc::ENOMEM))?;
        t.pid = me;
        t.until = None;
    }
    let wake = t.until.is_none_or(|u| at < u);
    t.heap.push(Reverse(Entry {
        at,
        id: Arc::downgrade(id),
        token,
        fire,
    }));
    drop(t);
    if wake {
        s.cv.notify_one();
    }
    Ok(())
}

fn run(s: &'static Shared) {
    let mut t = lock(&s.t);
    loop {
        let now = Instant::now();
        let mut due = Vec::new();
        while t.heap.peek().is_some_and(|e| e.0.at <= now) {
            due.extend(t.heap.pop().map(|e| e.0));
        }
        if !due.is_empty() {
            t.until = Some(now);
            drop(t);
            for e in due {
                if let Some(id) = e.id.upgrade() {
                    (e.fire)(&id, e.token);
                }
            }
            t = lock(&s.t);
            continue;
        }
        match t.heap.peek().map(|e| e.0.at) {
            None => {
                t.until = None;
                t = s.cv.wait(t).unwrap_or_else(|p| p.into_inner());
            }
            Some(at) => {
                let until = at + GRAIN;
                t.until = Some(until);
                t = match s.cv.wait_timeout(t, until - now) {
                    Ok((g, _)) => g,
                    Err(p) => p.into_inner().0,
                };
            }
        }
    }
}
