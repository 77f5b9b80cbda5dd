//! Event channels and events (`rdma_create_event_channel`,
//! `rdma_get_cm_event`, `rdma_ack_cm_event`).
//!
//! A channel's fd is an `eventfd` used as a level indicator of the channel's
//! queue: an enqueue writes 1 (so edge-triggered epoll sees new events);
//! once the queue is empty the counter is read back to 0. The fd is
//! therefore readable while events wait, works with poll/select/epoll.
//!
//! Events a device's event-loop thread queues while it delivers one round
//! of callbacks (the MADs of one receive: a burst of DREQs or REPs) are
//! written once per channel, when the round ends (`ibcm::api`'s
//! round-end hook, before the thread waits again): one `write`, one
//! wake-up of the reader and at most one wait of the reader on the queue's
//! lock per round instead of per event. On one CPU (the single-vCPU lab
//! guests) each write woke the reader, which preempted the producer and
//! blocked on the lock the producer held: two context switches and three
//! futex calls per event (`strace` of a QP-less cmtime-shaped server on the
//! host, `taskset -c 0`). Edge-triggered epoll then sees one edge for the
//! round's events, as the kernel's ucma fd gives one for the events that
//! arrive between two `epoll_wait`s. Events queued by any other thread (an
//! API call, the CM service's reader) are written at once.
//!
//! The cost per event is what librdmacm's is, without lock convoys:
//! * `rdma_get_cm_event` on an empty queue waits in one blocking `read` of
//!   the eventfd (which consumes the counter), not in `fcntl` + `poll` +
//!   `read`. The read obeys an `O_NONBLOCK` the application sets later, so
//!   `rdma_get_cm_event` then fails with `EAGAIN` instead of waiting,
//!   without looking at the flags.
//! * The producer queues the event and writes the eventfd in one critical
//!   section of the queue's lock, so the fd is never readable without an
//!   event waiting: an application that polls and then calls
//!   `rdma_get_cm_event` always finds one (a write outside the lock, which
//!   would spare the woken thread a wait on that lock, left the fd readable
//!   with the event already taken for as long as the producer was
//!   preempted between its write and its bookkeeping — seen for over
//!   200 ms on a 2-CPU host, and a blocking `rdma_get_cm_event` then waits
//!   for the next event).
//! * The queue's lock counts the units written (`written`) and read back
//!   (`consumed`): the counter is read back to 0 when the queue empties
//!   only when more was written than read, so that read happens only when
//!   needed. It is a non-blocking read (`RWF_NOWAIT`; `poll` first where
//!   the kernel lacks it, with no waiter in its read), so it never waits.

use crate::abi::*;
use crate::id::IdPriv;
use ibcm::api::Errno;
use ibcm::cma::RdmaCmEventType as R;
use std::cell::{RefCell, UnsafeCell};
use std::collections::VecDeque;
use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One event as handed to the application: the public struct first, then
/// the private-data room its pointers point into.
#[repr(C)]
pub struct EventBox {
    pub ev: RdmaCmEvent,
    pub pdata: [u8; RDMA_MAX_PRIVATE_DATA],
    /// The id the event is accounted on (the listener for
    /// CONNECT_REQUEST, else `ev.id`'s).
    pub acct: Arc<IdPriv>,
    /// `ev.id`'s object.
    pub subject: Arc<IdPriv>,
    /// The multicast join a MULTICAST_JOIN/ERROR event is of (librdmacm's
    /// `evt->mc`): its retrieval and its ack are counted there too, and
    /// retrieving a MULTICAST_JOIN attaches the id's QP
    /// ([`crate::mcast::retrieved`]).
    pub mc: Option<Arc<crate::mcast::Mc>>,
    /// A CONNECT_RESPONSE that its retrieval completes when the id has a
    /// QP then ([`crate::id::connect_retrieved`]: RTR, RTS, the RTU,
    /// ESTABLISHED), as librdmacm's `rdma_get_cm_event` does.
    pub completes_connect: bool,
}

// The raw pointers point into the box itself or at ids it keeps alive.
unsafe impl Send for EventBox {}

impl EventBox {
    /// A zeroed event of `kind` with `status` for `subject`, accounted on
    /// `acct`.
    pub fn new(subject: &Arc<IdPriv>, acct: &Arc<IdPriv>, kind: c_int, status: c_int) -> Box<Self> {
        // SAFETY: all-zero is a valid RdmaCmEvent (null pointers, zeros).
        let ev: RdmaCmEvent = unsafe { std::mem::zeroed() };
        let mut b = Box::new(EventBox {
            ev,
            pdata: [0; RDMA_MAX_PRIVATE_DATA],
            acct: acct.clone(),
            subject: subject.clone(),
            mc: None,
            completes_connect: false,
        });
        b.ev.id = subject.public_ptr();
        b.ev.event = kind;
        b.ev.status = status;
        b
    }

    /// Copies `data` (at most `len` bytes of it; the rest of `len` stays
    /// zero) into the event's room and points `param.conn` at it with
    /// `private_data_len = len` (`ud` when `ud`).
    pub fn set_private_data(&mut self, data: &[u8], len: usize, ud: bool) {
        let len = len.min(RDMA_MAX_PRIVATE_DATA);
        let n = data.len().min(len);
        self.pdata[..n].copy_from_slice(&data[..n]);
        let p = if len == 0 {
            std::ptr::null()
        } else {
            self.pdata.as_ptr().cast()
        };
        // Both union members start with the same two fields.
        {
            if ud {
                self.ev.param.ud.private_data = p;
                self.ev.param.ud.private_data_len = len as u8;
            } else {
                self.ev.param.conn.private_data = p;
                self.ev.param.conn.private_data_len = len as u8;
            }
        }
    }

    /// Counts the event as reported (retrieved by the application) on
    /// its accounting id and its multicast join: under the queue's lock,
    /// so that a leave that takes the join's queued events sees every
    /// other one counted.
    fn note_reported(&self) {
        self.acct.note_reported();
        if let Some(mc) = &self.mc {
            mc.note_reported();
        }
    }

    fn is_for(&self, id: &Arc<IdPriv>) -> bool {
        Arc::ptr_eq(&self.subject, id) || Arc::ptr_eq(&self.acct, id)
    }
}

/// An event channel: `struct rdma_event_channel` first (its address is
/// the application's pointer), then the queue.
#[repr(C)]
pub struct Channel {
    public: UnsafeCell<RdmaEventChannel>,
    q: Mutex<Queue>,
    /// Units written to the counter (counted under the queue's lock, right
    /// after each write).
    written: AtomicU64,
    closed: AtomicBool,
}

/// The events and the bookkeeping of the eventfd's counter, under one
/// lock.
#[derive(Default)]
struct Queue {
    events: VecDeque<Box<EventBox>>,
    /// Units the reads of the counter took (the value each read returned).
    consumed: u64,
    /// Threads of `rdma_get_cm_event` in (or about to enter) the blocking
    /// read.
    readers: usize,
    /// Events were queued by an event-loop thread whose delivery round has
    /// not ended yet: the channel is on that thread's `UNSIGNALLED` list.
    round_pending: bool,
}

thread_local! {
    /// The channels this event-loop thread queued events on in its current
    /// delivery round without writing their fd (`signal_round`).
    static UNSIGNALLED: RefCell<Vec<Arc<Channel>>> = const { RefCell::new(Vec::new()) };
}

/// Whether `signal_round` is the event loops' round-end hook (else every
/// event is written at once).
static HOOKED: AtomicBool = AtomicBool::new(false);

/// Sets the round-end hook (once per process).
fn hook_rounds() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if ibcm::api::set_delivery_round_end(signal_round) {
            HOOKED.store(true, Ordering::SeqCst);
        } else {
            ibcm::log::always(
                ibcm::log::WARN,
                format_args!(
                    "librdmacm (ibcm): another round-end hook is set: every event wakes its channel"
                ),
            );
        }
    });
}

/// The round-end hook (`ibcm::api::set_delivery_round_end`): one write for
/// each channel that got events in the round and still has some (the
/// reader may have taken them all meanwhile; the fd then stays quiet).
fn signal_round() {
    let chans = UNSIGNALLED.with(|u| std::mem::take(&mut *u.borrow_mut()));
    for ch in chans {
        let mut q = lock(&ch.q);
        q.round_pending = false;
        if !q.events.is_empty() && !ch.closed.load(Ordering::SeqCst) {
            ch.signal();
        }
    }
}

// The public struct is the application's to read; the fd never changes.
unsafe impl Send for Channel {}
unsafe impl Sync for Channel {}

impl Drop for Channel {
    fn drop(&mut self) {
        // SAFETY: the fd is ours and nothing else uses it any more.
        unsafe { libc::close(self.fd()) };
    }
}

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

impl Channel {
    pub fn new() -> Result<Arc<Channel>, Errno> {
        // SAFETY: plain syscall.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(Errno(errno()));
        }
        hook_rounds();
        Ok(Arc::new(Channel {
            public: UnsafeCell::new(RdmaEventChannel { fd }),
            q: Mutex::new(Queue::default()),
            written: AtomicU64::new(0),
            closed: AtomicBool::new(false),
        }))
    }

    pub fn fd(&self) -> c_int {
        // SAFETY: written once at creation; the application must not
        // change it (librdmacm's rule too).
        unsafe { (*self.public.get()).fd }
    }

    pub fn public_ptr(self: &Arc<Self>) -> *mut RdmaEventChannel {
        self.public.get()
    }

    fn signal(&self) {
        let one: u64 = 1;
        // SAFETY: 8-byte write to our eventfd.
        if unsafe { libc::write(self.fd(), (&raw const one).cast(), 8) } == 8 {
            self.written.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Whether more was written to the counter than read from it.
    fn counted(&self, q: &Queue) -> bool {
        self.written.load(Ordering::SeqCst) > q.consumed
    }

    /// Reads the counter back to 0 once the queue is empty, when more was
    /// written than read. The read never blocks.
    fn drain(&self, q: &mut Queue) {
        if self.counted(q) {
            q.consumed += read_nowait(self.fd(), q.readers > 0);
        }
    }

    /// Queues `ev` and makes the fd readable (on an event-loop thread in a
    /// delivery round: when the round ends), unless the channel is closed
    /// (then the event is dropped: false).
    pub fn push(self: &Arc<Self>, ev: Box<EventBox>) -> bool {
        let mut q = lock(&self.q);
        if self.closed.load(Ordering::SeqCst) {
            return false;
        }
        q.events.push_back(ev);
        if ibcm::api::in_delivery_round() && HOOKED.load(Ordering::Relaxed) {
            if !q.round_pending {
                q.round_pending = true;
                drop(q);
                UNSIGNALLED.with(|u| u.borrow_mut().push(self.clone()));
            }
            return true;
        }
        // Under the lock: a consumer woken by this write finds the event.
        self.signal();
        true
    }

    /// Removes and returns the queued events `keep` rejects.
    pub fn take_where(&self, mut take: impl FnMut(&EventBox) -> bool) -> Vec<Box<EventBox>> {
        let mut q = lock(&self.q);
        let was = q.events.len();
        let mut out = Vec::new();
        let mut rest = VecDeque::with_capacity(q.events.len());
        for e in q.events.drain(..) {
            if take(&e) {
                out.push(e);
            } else {
                rest.push_back(e);
            }
        }
        q.events = rest;
        if was > 0 && q.events.is_empty() {
            self.drain(&mut q);
        }
        out
    }

    /// The queued events of `id` (as subject or accounting id).
    pub fn take_for(&self, id: &Arc<IdPriv>) -> Vec<Box<EventBox>> {
        self.take_where(|e| e.is_for(id))
    }

    /// Pops the next event, waiting unless the fd is non-blocking
    /// (`EAGAIN`): the application retrieves it (`rdma_get_cm_event`, or
    /// a synchronous call). A MULTICAST_JOIN and a CONNECT_RESPONSE are
    /// completed then, outside the queue's lock, as librdmacm's
    /// `rdma_get_cm_event` does (`ucma_process_join`: the id's QP is
    /// attached now; `ucma_process_conn_resp`: the id's QP goes to RTS and
    /// the RTU is sent now, on the application's thread).
    ///
    /// A REJECTED or DISCONNECTED of an id whose CONNECT_RESPONSE was
    /// retrieved as CONNECT_ERROR is not reported: completed here and the
    /// next event taken, as librdmacm does (`connect_error`); a REJECTED
    /// that is reported moves its id's QP to ERR.
    pub fn pop(&self) -> Result<Box<EventBox>, Errno> {
        loop {
            let mut b = self.pop_queued()?;
            if b.mc.is_some() {
                crate::mcast::retrieved(&mut b);
            }
            if b.completes_connect {
                crate::id::connect_retrieved(&mut b);
            }
            let rejected = b.ev.event == R::Rejected as c_int;
            if (rejected || b.ev.event == R::Disconnected as c_int)
                && !crate::id::end_retrieved(&b.subject, rejected)
            {
                // Counted as reported by the take: now as completed too
                // (librdmacm's `ucma_complete_event`), so that a destroy
                // waiting for its acks does not wait for this one.
                b.acct.note_completed();
                continue;
            }
            return Ok(b);
        }
    }

    fn pop_queued(&self) -> Result<Box<EventBox>, Errno> {
        loop {
            {
                let mut q = lock_woken(&self.q);
                if let Some(b) = q.events.pop_front() {
                    b.note_reported();
                    if q.events.is_empty() {
                        self.drain(&mut q);
                    }
                    return Ok(b);
                }
                if self.closed.load(Ordering::SeqCst) {
                    return Err(Errno(libc::EBADF));
                }
                q.readers += 1;
            }
            // The wait: returns once an event's write came (and takes the
            // counter), at once with EAGAIN under O_NONBLOCK.
            let mut v: u64 = 0;
            // SAFETY: 8-byte read of our eventfd.
            let r = unsafe { libc::read(self.fd(), (&raw mut v).cast(), 8) };
            let err = if r < 0 { errno() } else { 0 };
            let mut q = lock_woken(&self.q);
            q.readers -= 1;
            if r == 8 {
                q.consumed += v;
            }
            if let Some(b) = q.events.pop_front() {
                b.note_reported();
                if q.events.is_empty() {
                    self.drain(&mut q);
                } else if !self.counted(&q) {
                    // More wait than this read took: readable again.
                    self.signal();
                }
                return Ok(b);
            }
            if r < 0 && err != libc::EINTR {
                return Err(Errno(err));
            }
        }
    }

    /// `rdma_destroy_event_channel`: no more events are queued; queued
    /// ones are dropped. The fd is closed when the last id using the
    /// channel is gone.
    pub fn close(&self) -> Vec<Box<EventBox>> {
        self.closed.store(true, Ordering::SeqCst);
        self.take_where(|_| true)
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }
}

/// Takes the queue's lock in a consumer that a producer's `write` may just
/// have woken (`rdma_get_cm_event` after its blocking read, or after the
/// application's `poll`). On a single CPU (the lab's one-vCPU guests,
/// `taskset -c 0`) the woken consumer runs at once while the producer
/// still holds the lock the write is made under: waiting for it costs a
/// futex wait, the producer's futex wake and two more context switches
/// per round of events. Yielding the CPU once instead lets the producer
/// release the lock uncontended. With more CPUs the producer releases it
/// on its own CPU meanwhile, and the lock is taken as everywhere else.
fn lock_woken(m: &Mutex<Queue>) -> MutexGuard<'_, Queue> {
    static ONE_CPU: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let one_cpu =
        *ONE_CPU.get_or_init(|| std::thread::available_parallelism().is_ok_and(|n| n.get() == 1));
    if one_cpu {
        match m.try_lock() {
            Ok(q) => return q,
            Err(std::sync::TryLockError::Poisoned(p)) => return p.into_inner(),
            // SAFETY: plain syscall.
            Err(std::sync::TryLockError::WouldBlock) => unsafe {
                libc::sched_yield();
            },
        }
    }
    lock(m)
}

/// Reads an eventfd's counter without waiting; the value read (0 when
/// it was 0). `preadv2(RWF_NOWAIT)` (Linux 5.12 and later for eventfds);
/// where the kernel refuses that, `poll` first — the callers hold the
/// queue's lock, so with no thread in the blocking read (`waiter`
/// false) nothing else can take the counter between the two; with one,
/// nothing is read (the waiter takes the counter, and finding the queue
/// empty waits again).
fn read_nowait(fd: c_int, waiter: bool) -> u64 {
    static NO_NOWAIT: AtomicBool = AtomicBool::new(false);
    let mut v: u64 = 0;
    if !NO_NOWAIT.load(Ordering::Relaxed) {
        let iov = libc::iovec {
            iov_base: (&raw mut v).cast(),
            iov_len: 8,
        };
        // SAFETY: one 8-byte buffer of ours.
        let r = unsafe { libc::preadv2(fd, &iov, 1, -1, libc::RWF_NOWAIT) };
        if r == 8 {
            return v;
        }
        match errno() {
            libc::EOPNOTSUPP | libc::EINVAL | libc::ENOSYS => {
                NO_NOWAIT.store(true, Ordering::Relaxed)
            }
            _ => return 0,
        }
    }
    if waiter {
        return 0;
    }
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd of ours; then an 8-byte read of a counter poll
    // saw non-zero, which nobody else can take meanwhile.
    unsafe {
        if libc::poll(&mut p, 1, 0) == 1 && libc::read(fd, (&raw mut v).cast(), 8) == 8 {
            return v;
        }
    }
    0
}

/// Channels the application holds, by address.
pub fn channels() -> &'static Mutex<ibcm::engine::ids::FastMap<usize, Arc<Channel>>> {
    &crate::fork::globals().channels
}

/// Events handed out and not yet acked, by address.
pub fn outstanding() -> &'static Mutex<ibcm::engine::ids::FastMap<usize, Box<EventBox>>> {
    &crate::fork::globals().outstanding
}

/// Hands `b` to the application: it stays registered until acked.
pub fn hand_out(b: Box<EventBox>) -> *mut RdmaCmEvent {
    let mut b = b;
    let p = &raw mut b.ev;
    lock(outstanding()).insert(p as usize, b);
    p
}

/// The multicast join of an event handed out and not acked yet.
pub fn mc_of(p: *mut RdmaCmEvent) -> Option<Arc<crate::mcast::Mc>> {
    lock(outstanding()).get(&(p as usize))?.mc.clone()
}

/// `rdma_ack_cm_event`: `EINVAL` for NULL, an event already acked or one
/// this library never returned.
pub fn ack(p: *mut RdmaCmEvent) -> Result<(), Errno> {
    if p.is_null() {
        return Err(Errno::EINVAL);
    }
    let b = lock(outstanding()).remove(&(p as usize));
    let Some(b) = b else {
        if crate::fork::take_inherited_event(p as usize) {
            return Ok(());
        }
        return Err(Errno::EINVAL);
    };
    let acct = b.acct.clone();
    let mc = b.mc.clone();
    drop(b);
    // librdmacm's ucma_complete_mc_event: the join's count, then the id's.
    if let Some(mc) = mc {
        mc.note_completed();
    }
    acct.note_completed();
    Ok(())
}

/// The channel behind an application pointer (`EACCES` for the parent's
/// channels in a child of fork()).
pub fn lookup(p: *mut RdmaEventChannel) -> Result<Arc<Channel>, Errno> {
    if p.is_null() {
        return Err(Errno::EINVAL);
    }
    let found = lock(channels()).get(&(p as usize)).cloned();
    found.ok_or_else(|| crate::fork::unknown_channel(p as usize))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn readable(ch: &Channel) -> bool {
        let mut p = libc::pollfd {
            fd: ch.fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd of ours.
        unsafe { libc::poll(&mut p, 1, 0) == 1 }
    }

    fn event(id: &Arc<IdPriv>, kind: c_int) -> Box<EventBox> {
        EventBox::new(id, id, kind, 0)
    }

    fn nonblocking(ch: &Channel) {
        // SAFETY: flags of our own fd.
        unsafe {
            let fl = libc::fcntl(ch.fd(), libc::F_GETFL);
            assert_eq!(
                libc::fcntl(ch.fd(), libc::F_SETFL, fl | libc::O_NONBLOCK),
                0
            );
        }
    }

    /// An application that polls the fd and then takes an event without
    /// waiting (as event loops do) must always find one: a readable fd
    /// with an empty queue would make a blocking `rdma_get_cm_event` wait
    /// for the next event instead. Producer and consumer race here.
    #[test]
    fn a_readable_fd_always_has_an_event_while_a_producer_races() {
        const N: c_int = 20_000;
        let ch = Channel::new().unwrap();
        nonblocking(&ch);
        let id = IdPriv::new(ch.clone(), false, 0x0106, IBV_QPT_RC, std::ptr::null_mut());
        let (c, i) = (ch.clone(), id.clone());
        let producer = std::thread::spawn(move || {
            for k in 0..N {
                assert!(c.push(EventBox::new(&i, &i, k, 0)));
                if k % 64 == 0 {
                    std::thread::yield_now();
                }
            }
        });
        let (mut got, mut spurious) = (0, 0);
        while got < N {
            let mut p = libc::pollfd {
                fd: ch.fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one pollfd of ours.
            assert_eq!(
                unsafe { libc::poll(&mut p, 1, 5000) },
                1,
                "after {got} events"
            );
            match ch.pop() {
                Ok(b) => {
                    assert_eq!(b.ev.event, got, "in order");
                    got += 1;
                }
                Err(e) => {
                    assert_eq!(e.0, libc::EAGAIN);
                    spurious += 1;
                }
            }
        }
        producer.join().unwrap();
        assert_eq!(
            spurious, 0,
            "the fd was readable with no event {spurious} times"
        );
        assert!(!readable(&ch));
    }

    /// The counter's value, read without waiting (0: not readable).
    fn counter(ch: &Channel) -> u64 {
        read_nowait(ch.fd(), false)
    }

    /// Events an event loop queues in one delivery round are written once,
    /// when the round ends: the fd is quiet during the round, then readable
    /// with one unit for all of them; events the reader took during the
    /// round leave the fd quiet; outside a round every event is written.
    #[test]
    fn a_delivery_round_writes_the_fd_once_at_its_end() {
        let ch = Channel::new().unwrap();
        let id = IdPriv::new(ch.clone(), false, 0x0106, IBV_QPT_RC, std::ptr::null_mut());
        ibcm::api::delivery_round(|| {
            for k in 0..5 {
                assert!(ch.push(event(&id, k)));
            }
            assert!(!readable(&ch), "written before the round ended");
        });
        assert!(readable(&ch));
        assert_eq!(counter(&ch), 1, "one write for the round's five events");
        // The counter was taken by hand: put it back as a reader would
        // have found it, and take the five events.
        ch.signal();
        for k in 0..5 {
            assert_eq!(ch.pop().unwrap().ev.event, k);
        }
        assert!(!readable(&ch));
        // Taken during the round: nothing to announce at its end.
        ibcm::api::delivery_round(|| {
            assert!(ch.push(event(&id, 9)));
            assert_eq!(ch.pop().unwrap().ev.event, 9);
        });
        assert!(!readable(&ch), "the round's end wrote for an empty queue");
        // Outside a round: at once, one unit per event.
        assert!(ch.push(event(&id, 1)));
        assert!(ch.push(event(&id, 2)));
        assert_eq!(counter(&ch), 2);
        ch.signal();
        assert_eq!(ch.take_for(&id).len(), 2);
        assert!(!readable(&ch));
    }

    #[test]
    fn the_fd_is_readable_exactly_while_events_wait() {
        let ch = Channel::new().unwrap();
        let id = IdPriv::new(ch.clone(), false, 0x0106, IBV_QPT_RC, std::ptr::null_mut());
        assert!(!readable(&ch));
        for k in 0..3 {
            assert!(ch.push(event(&id, k)));
        }
        for k in 0..3 {
            assert!(readable(&ch), "before pop {k}");
            assert_eq!(ch.pop().unwrap().ev.event, k);
        }
        assert!(!readable(&ch));
        nonblocking(&ch);
        assert_eq!(ch.pop().err(), Some(Errno(libc::EAGAIN)));
        assert!(ch.push(event(&id, 7)));
        assert_eq!(ch.take_for(&id).len(), 1);
        assert!(
            !readable(&ch),
            "taking the last event reads the counter back"
        );
    }

    #[test]
    fn a_waiter_wakes_for_each_event_and_leaves_the_rest_readable() {
        let ch = Channel::new().unwrap();
        let id = IdPriv::new(ch.clone(), false, 0x0106, IBV_QPT_RC, std::ptr::null_mut());
        for round in 0..20 {
            let (c, i) = (ch.clone(), id.clone());
            let producer = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(2));
                for k in 0..3 {
                    assert!(c.push(EventBox::new(&i, &i, round * 3 + k, 0)));
                }
            });
            // Blocks in the read until the first push.
            assert_eq!(ch.pop().unwrap().ev.event, round * 3);
            producer.join().unwrap();
            for k in 1..3 {
                assert!(readable(&ch), "round {round}: {k} left");
                assert_eq!(ch.pop().unwrap().ev.event, round * 3 + k);
            }
            assert!(!readable(&ch), "round {round}: queue empty");
        }
    }

    #[test]
    fn nonblocking_pop_of_an_empty_queue_is_eagain_while_a_waiter_waits() {
        let ch = Channel::new().unwrap();
        let id = IdPriv::new(ch.clone(), false, 0x0106, IBV_QPT_RC, std::ptr::null_mut());
        let c = ch.clone();
        let waiter = std::thread::spawn(move || c.pop().map(|b| b.ev.event));
        std::thread::sleep(Duration::from_millis(20));
        assert!(ch.push(event(&id, 5)));
        assert_eq!(waiter.join().unwrap(), Ok(5));
        nonblocking(&ch);
        // A stale count may be left by the waiter's race; it is consumed
        // here, and the answer is EAGAIN either way.
        assert_eq!(ch.pop().err(), Some(Errno(libc::EAGAIN)));
        assert!(!readable(&ch));
    }
}
