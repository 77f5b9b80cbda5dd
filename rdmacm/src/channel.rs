//! Event channels and events (`rdma_create_event_channel`,
//! `rdma_get_cm_event`, `rdma_ack_cm_event`).
//!
//! A channel's fd is an `eventfd` used as a level indicator of the channel's
//! queue: every enqueue writes 1 (so edge-triggered epoll sees each event);
//! the pop that empties the queue reads the counter back to 0. The fd is
//! therefore readable exactly while events wait, works with poll/select/
//! epoll, and an `O_NONBLOCK` the application sets later makes
//! `rdma_get_cm_event` fail with `EAGAIN` instead of waiting.

use crate::abi::*;
use crate::id::IdPriv;
use ibcm::api::Errno;
use std::cell::UnsafeCell;
use std::collections::{HashMap, VecDeque};
use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, Ordering};
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

    fn is_for(&self, id: &Arc<IdPriv>) -> bool {
        Arc::ptr_eq(&self.subject, id) || Arc::ptr_eq(&self.acct, id)
    }
}

/// An event channel: `struct rdma_event_channel` first (its address is
/// the application's pointer), then the queue.
#[repr(C)]
pub struct Channel {
    public: UnsafeCell<RdmaEventChannel>,
    q: Mutex<VecDeque<Box<EventBox>>>,
    closed: AtomicBool,
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
        Ok(Arc::new(Channel {
            public: UnsafeCell::new(RdmaEventChannel { fd }),
            q: Mutex::new(VecDeque::new()),
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
        unsafe { libc::write(self.fd(), (&raw const one).cast(), 8) };
    }

    fn drain(&self) {
        let mut v: u64 = 0;
        // SAFETY: 8-byte read; only called while the counter is non-zero
        // (every queued event wrote 1 under the queue lock).
        unsafe { libc::read(self.fd(), (&raw mut v).cast(), 8) };
    }

    /// Queues `ev` unless the channel is closed (then the event is
    /// dropped: false).
    pub fn push(&self, ev: Box<EventBox>) -> bool {
        let mut q = lock(&self.q);
        if self.closed.load(Ordering::SeqCst) {
            return false;
        }
        q.push_back(ev);
        self.signal();
        true
    }

    /// Removes and returns the queued events `keep` rejects.
    pub fn take_where(&self, mut take: impl FnMut(&EventBox) -> bool) -> Vec<Box<EventBox>> {
        let mut q = lock(&self.q);
        let was = q.len();
        let mut out = Vec::new();
        let mut rest = VecDeque::with_capacity(q.len());
        for e in q.drain(..) {
            if take(&e) {
                out.push(e);
            } else {
                rest.push_back(e);
            }
        }
        *q = rest;
        if was > 0 && q.is_empty() {
            self.drain();
        }
        out
    }

    /// The queued events of `id` (as subject or accounting id).
    pub fn take_for(&self, id: &Arc<IdPriv>) -> Vec<Box<EventBox>> {
        self.take_where(|e| e.is_for(id))
    }

    /// Pops the next event, waiting unless the fd is non-blocking.
    pub fn pop(&self) -> Result<Box<EventBox>, Errno> {
        loop {
            {
                let mut q = lock(&self.q);
                if let Some(b) = q.pop_front() {
                    b.acct.note_reported();
                    if q.is_empty() {
                        self.drain();
                    }
                    return Ok(b);
                }
                if self.closed.load(Ordering::SeqCst) {
                    return Err(Errno(libc::EBADF));
                }
            }
            let fd = self.fd();
            // SAFETY: plain syscalls on our fd.
            let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
            if fl >= 0 && fl & libc::O_NONBLOCK != 0 {
                return Err(Errno(libc::EAGAIN));
            }
            let mut pfd = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            let r = unsafe { libc::poll(&mut pfd, 1, -1) };
            if r < 0 && errno() != libc::EINTR {
                return Err(Errno(errno()));
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

/// Channels the application holds, by address.
pub fn channels() -> &'static Mutex<HashMap<usize, Arc<Channel>>> {
    &crate::fork::globals().channels
}

/// Events handed out and not yet acked, by address.
pub fn outstanding() -> &'static Mutex<HashMap<usize, Box<EventBox>>> {
    &crate::fork::globals().outstanding
}

/// Hands `b` to the application: it stays registered until acked.
pub fn hand_out(b: Box<EventBox>) -> *mut RdmaCmEvent {
    let mut b = b;
    let p = &raw mut b.ev;
    lock(outstanding()).insert(p as usize, b);
    p
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
    drop(b);
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
