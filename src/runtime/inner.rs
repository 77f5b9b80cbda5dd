//! `CmIdInner`: the object of an id, behind both a [`CmId`] and the C
//! `struct ib_cm_id *` (the C struct is its first field, so the C pointer
//! is the object), its delivery queue, callback delivery (serialised, in
//! engine order, a non-zero return destroys the id) and the protocol
//! destroy with its release.

use super::device::Device;
use super::event_loop::Outputs;
use super::id::CmId;
use super::lock;
use super::registry::unregister;
use crate::abi::{IbCmHandler, IbCmId};
use crate::engine::{Change, Event, Handle, State, errno};
use crate::ipc::QpAttrs;
use crate::log::{DEBUG, ERROR};
use std::cell::{Cell, UnsafeCell};
use std::collections::VecDeque;
use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

/// A Rust event handler (the C handler lives in the `ib_cm_id`).
pub type RustHandler = Arc<dyn Fn(&CmId, &Event) -> i32 + Send + Sync>;

/// One id's delivery queue.
pub(super) struct Delivery {
    pub(super) queue: VecDeque<Item>,
    delivering: bool,
    /// Threads in `destroy_inner` waiting for `delivering` to clear: the
    /// deliverer wakes the condition variable only when there is one (a
    /// futex call per delivered event otherwise).
    waiters: u32,
    pub(super) destroyed: bool,
}

/// How many emptied delivery-queue buffers a thread keeps for reuse.
const SPARE_QUEUES: usize = 256;

thread_local! {
    /// Emptied delivery-queue buffers: an id drops its queue's memory once
    /// delivered (idle ids hold none), and the next id that gets an event on
    /// this thread takes it instead of allocating (one allocation and one
    /// free per delivered event otherwise).
    static SPARE_QUEUE: std::cell::RefCell<Vec<VecDeque<Item>>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

impl Delivery {
    /// Queues `item`, in a recycled buffer if the queue has none.
    pub(super) fn push(&mut self, item: Item) {
        if self.queue.capacity() == 0
            && let Ok(Some(q)) = SPARE_QUEUE.try_with(|p| p.borrow_mut().pop())
        {
            self.queue = q;
        }
        self.queue.push_back(item);
    }

    /// Gives up the queue's memory (an idle id keeps none); an empty
    /// buffer goes to this thread's spares.
    fn release_queue(&mut self) {
        let q = std::mem::take(&mut self.queue);
        if q.capacity() > 0 && q.is_empty() {
            let _ = SPARE_QUEUE.try_with(|p| {
                let mut p = p.borrow_mut();
                if p.len() < SPARE_QUEUES {
                    p.push(q);
                }
            });
        }
    }
}

/// An event waiting for delivery; a REQ/SIDR_REQ event keeps its listener
/// alive until delivered (its callback's `listen_id`).
pub(super) struct Item {
    pub(super) ev: Event,
    /// The listener a REQ/SIDR_REQ matched (`None` for other events).
    pub(super) listener: Option<Arc<CmIdInner>>,
}

/// How far a served id's public fields follow the service's.
#[derive(Debug, Default)]
pub(super) struct RemoteSync {
    /// `ipc::Public::version` of the newest snapshot applied.
    pub(super) version: u64,
    /// One-way calls on the id sent to the service: a pushed snapshot that
    /// counts fewer was read before the service ran the last of them and
    /// would undo its state change here. On a local device served by the
    /// service: the one-way calls the service ran (`CmId::with_oneway_calls`).
    pub(super) oneway_sent: u64,
    /// The QP attributes the service pushed with a `REP_RECEIVED` event
    /// (`ipc::op::QP_ATTRS`), kept until the RTS ones are taken or a newer
    /// snapshot is applied (remote devices only).
    pub(super) qp_attrs: Option<Box<QpAttrs>>,
}

/// The object of an id: what a [`CmId`] holds (`Arc<CmIdInner>`) and the
/// C pointer points at. `#[repr(C)]` with the C struct first:
/// `*mut IbCmId` == `*const CmIdInner`.
#[repr(C)]
pub struct CmIdInner {
    pub(super) c: UnsafeCell<IbCmId>,
    pub(super) dev: Arc<Device>,
    pub(super) shard: u32,
    handle: AtomicU64,
    /// The newest service snapshot of the public fields applied, and the
    /// one-way calls sent (remote devices only; see `sync_remote`).
    pub(super) remote_version: Mutex<RemoteSync>,
    /// Held across a one-way call's check, state change and send, so two
    /// threads' calls on one id reach the service in the order they
    /// were checked (remote devices only).
    pub(super) remote_call: Mutex<()>,
    pub(super) rust_handler: Option<RustHandler>,
    pub(super) dq: Mutex<Delivery>,
    cond: Condvar,
    /// When the id was made (`ibcm ids`' age in forward mode).
    pub(super) born: std::time::Instant,
}

// The C struct is shared with C code by design; access is serialised by
// the shard lock (public fields) or owned by the consumer (handler/context).
unsafe impl Send for CmIdInner {}
unsafe impl Sync for CmIdInner {}

thread_local! {
    /// The id whose callback this thread is running (null when none).
    pub(super) static IN_CALLBACK: Cell<*const CmIdInner> = const { Cell::new(std::ptr::null()) };
    /// The listener of the request event whose callback this thread is
    /// running (null for other events): the C `listen_id`, held alive by
    /// the event's queue item while the callback runs.
    pub(super) static CALLBACK_LISTENER: Cell<*const CmIdInner> = const { Cell::new(std::ptr::null()) };
}

impl CmIdInner {
    pub(super) fn new(
        dev: Arc<Device>,
        shard: u32,
        h: Handle,
        handler: IbCmHandler,
        context: *mut c_void,
        rust_handler: Option<RustHandler>,
    ) -> CmIdInner {
        let devp = dev.c_ptr();
        CmIdInner {
            c: UnsafeCell::new(IbCmId {
                cm_handler: handler,
                context,
                device: devp,
                service_id: 0,
                state: 0,
                lap_state: 0,
                local_id: (h.0 as u32).to_be(),
                remote_id: 0,
                remote_cm_qpn: 1,
            }),
            dev,
            shard,
            handle: AtomicU64::new(h.0),
            remote_version: Mutex::new(RemoteSync::default()),
            remote_call: Mutex::new(()),
            rust_handler,
            dq: Mutex::new(Delivery {
                queue: VecDeque::new(),
                delivering: false,
                waiters: 0,
                destroyed: false,
            }),
            cond: Condvar::new(),
            born: std::time::Instant::now(),
        }
    }

    pub(super) fn handle(&self) -> Handle {
        Handle(self.handle.load(Ordering::Relaxed))
    }

    /// Mirrors the engine's public fields into the C struct.
    pub(super) fn sync_public(&self, c: &Change) {
        let p = self.c.get();
        unsafe {
            std::ptr::write_volatile(&mut (*p).state, c.state as u32);
            std::ptr::write_volatile(&mut (*p).lap_state, c.lap_state as u32);
            std::ptr::write_volatile(&mut (*p).remote_id, c.remote_id.to_be());
            std::ptr::write_volatile(&mut (*p).service_id, c.service_id.to_be());
            std::ptr::write_volatile(&mut (*p).local_id, (c.id.0 as u32).to_be());
        }
    }

    /// Delivers queued events unless another thread is already doing so.
    pub(super) fn deliver(self: &Arc<Self>) {
        {
            let mut d = lock(&self.dq);
            if d.delivering || d.destroyed || d.queue.is_empty() {
                return;
            }
            d.delivering = true;
        }
        loop {
            let item = {
                let mut d = lock(&self.dq);
                match (d.destroyed, d.queue.pop_front()) {
                    (false, Some(item)) => item,
                    _ => {
                        d.delivering = false;
                        // Idle ids keep no queue memory (a million
                        // established ids would otherwise each hold one).
                        d.release_queue();
                        let wake = d.waiters > 0;
                        drop(d);
                        if wake {
                            self.cond.notify_all();
                        }
                        return;
                    }
                }
            };
            let kind = item.ev.kind;
            let prev = IN_CALLBACK.with(|c| c.replace(Arc::as_ptr(self)));
            let listener = item.listener.as_ref().map_or(std::ptr::null(), Arc::as_ptr);
            let prev_listener = CALLBACK_LISTENER.with(|c| c.replace(listener));
            let ret =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.call_handler(&item)))
                    .unwrap_or_else(|_| {
                        ibcm_log!(
                            ERROR,
                            "handler panicked on {}; destroying the id",
                            kind.name()
                        );
                        -errno::EIO
                    });
            IN_CALLBACK.with(|c| c.set(prev));
            CALLBACK_LISTENER.with(|c| c.set(prev_listener));
            let Item { ev, listener } = item;
            drop(listener);
            if let Some(m) = ev.mad {
                crate::engine::recycle_event_mad(m);
            }
            if ret != 0 {
                ibcm_log!(
                    DEBUG,
                    "handler returned {ret} for {}: destroying the id",
                    kind.name()
                );
                self.destroy_inner(ret, true, None);
                let mut d = lock(&self.dq);
                d.delivering = false;
                d.release_queue();
                let wake = d.waiters > 0;
                drop(d);
                if wake {
                    self.cond.notify_all();
                }
                return;
            }
        }
    }

    fn call_handler(self: &Arc<Self>, item: &Item) -> i32 {
        match &self.rust_handler {
            Some(h) => h(&CmId(self.clone()), &item.ev),
            None => 0,
        }
    }

    /// Protocol destroy + release. `from_deliverer`: called by the thread
    /// that delivers this id's events (non-zero handler return). `port`
    /// rides with a remote id's `DESTROY`; returned when it did not leave.
    pub(super) fn destroy_inner(
        self: &Arc<Self>,
        err: i32,
        from_deliverer: bool,
        mut port: Option<crate::ipc::PortRelease>,
    ) -> Option<crate::ipc::PortRelease> {
        let dev = &self.dev;
        let is_listener;
        let gone;
        // The reference the id's table entry held (in-process devices);
        // dropped last, after the id left the C registry.
        let mut held = None;
        let mut out = Outputs::default();
        if let Some(r) = &dev.remote {
            is_listener = unsafe { (*self.c.get()).state } == State::Listen as u32;
            gone = r.destroy(self, err, &mut port);
        } else {
            let mut e = lock(dev.shard_of(self));
            is_listener = e.state(self.handle()) == Some(State::Listen);
            gone = e.destroy(self.handle(), err);
            if gone {
                held = e.remove_id(self.handle());
            }
            dev.drain(self.shard, &mut e, &mut out);
        }
        dev.finish(out);
        if !gone {
            // A shared listener other users still hold: drop our share.
            if is_listener {
                unregister(Arc::as_ptr(self));
                if dev.remote.is_some() {
                    // The remote backend took one raw reference per sharer.
                    unsafe { Arc::decrement_strong_count(Arc::as_ptr(self)) };
                }
            }
            return port;
        }
        if is_listener && dev.remote.is_none() {
            // Barrier: after this no shard can still be draining a REQ it
            // matched against the listener, so none looks it up again.
            for s in &dev.shards {
                drop(lock(s));
            }
            dev.listeners.remove(self.handle());
        }
        {
            let mut d = lock(&self.dq);
            d.destroyed = true;
            d.queue.clear();
            if !from_deliverer {
                while d.delivering {
                    d.waiters += 1;
                    d = self.cond.wait(d).unwrap_or_else(|e| e.into_inner());
                    d.waiters -= 1;
                }
            }
        }
        if let Some(c) = dev.live_ids.get(self.shard as usize) {
            c.0.fetch_sub(1, Ordering::Relaxed);
        }
        unregister(Arc::as_ptr(self));
        if dev.remote.is_some() {
            // Release the raw reference the remote backend's id table held.
            unsafe { Arc::decrement_strong_count(Arc::as_ptr(self)) };
        }
        drop(held);
        port
    }
}
