//! The library's process-wide state, and what `fork()` does to it
//! (docs/RDMACM.md, "fork()").
//!
//! librdmacm's objects are kernel objects behind the event channel's
//! `/dev/infiniband/rdma_cm` fd. A child inherits the fd, but the kernel's
//! `ucma_write` refuses every command from a process whose credentials
//! are not the opener's (`ib_safe_file_access`; `fork()` gives the child
//! its own `struct cred`), so every call on an inherited channel or id
//! fails with `EACCES`, while new channels and ids the child creates are
//! its own. Here the ids, channels and events live in this process's
//! memory and are served by ibcm's threads, which a child does not have;
//! the rule is reproduced:
//!
//! * every registry (ids, channels, undelivered events, ibcm devices,
//!   port space) hangs off one [`Globals`] per process;
//! * a `pthread_atfork` prepare handler takes the registries' locks that a
//!   child reads, libibverbs' device table (shared with the child, as
//!   librdmacm shares its `ibv_context`s) and stderr (ibcm's log), so no
//!   thread of the parent holds one when the process is copied (ibcm takes
//!   its own id registry the same way); the parent handler lets go;
//! * the child handler records the addresses of the parent's ids, channels
//!   and events as inherited and installs a fresh [`Globals`]: new ids get
//!   new devices, with their own threads, in the child. The parent's state
//!   is left as it is, never locked, dropped or joined: its threads do not
//!   exist in the child;
//! * calls on inherited ids and channels fail with `EACCES` (and a debug
//!   line); `rdma_destroy_event_channel` of an inherited channel closes the
//!   child's copy of the fd only; `rdma_ack_cm_event` of an event the
//!   parent retrieved succeeds once, as librdmacm's (its memory, its ack).
//!
//! Verbs memory registrations follow libibverbs' own rules
//! (`ibv_fork_init`, `RDMAV_FORK_SAFE`); nothing here changes them.

use crate::channel::{Channel, EventBox, lock};
use crate::id::IdPriv;
use crate::ports::PortSpace;
use ibcm::api::{Device, Errno};
use ibcm::engine::ids::FastMap;
use ibcm::log::DEBUG;
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::ffi::c_int;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Once, Weak};

/// Addresses of objects the parent process created (after `fork()`).
#[derive(Default)]
pub struct Inherited {
    pub ids: HashSet<usize>,
    /// Channel address → the child's copy of its fd.
    pub channels: HashMap<usize, c_int>,
    pub events: HashSet<usize>,
}

/// One process's library state.
#[derive(Default)]
pub struct Globals {
    /// Ids the application holds (and children not yet reported), by
    /// address.
    pub ids: Mutex<FastMap<usize, Arc<IdPriv>>>,
    /// Ids by their ibcm `ib_cm_id` address, for the event handler.
    pub by_cm: Mutex<FastMap<usize, Weak<IdPriv>>>,
    /// The port spaces, chosen at the first bind (`ports::space`): the
    /// host's through the CM service, or the process's own. A child of
    /// `fork()` chooses again (its own service connection).
    pub ports: std::sync::OnceLock<Box<dyn PortSpace>>,
    /// Channels the application holds, by address.
    pub channels: Mutex<FastMap<usize, Arc<Channel>>>,
    /// Events handed out and not yet acked, by address.
    pub outstanding: Mutex<FastMap<usize, Box<EventBox>>>,
    /// ibcm devices by name (`select::open`).
    pub devices: Mutex<HashMap<String, Arc<Device>>>,
    pub inherited: Mutex<Inherited>,
}

static CURRENT: AtomicPtr<Globals> = AtomicPtr::new(std::ptr::null_mut());

/// This process's state (created, with the fork handlers, on first use).
pub fn globals() -> &'static Globals {
    let p = CURRENT.load(Ordering::Acquire);
    if !p.is_null() {
        // SAFETY: states are leaked, never freed.
        return unsafe { &*p };
    }
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        let g = Box::into_raw(Box::<Globals>::default());
        CURRENT.store(g, Ordering::Release);
        // SAFETY: plain registration of `extern "C"` handlers.
        let r = unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) };
        if r != 0 {
            ibcm::log::always(
                ibcm::log::ERROR,
                format_args!(
                    "librdmacm (ibcm): pthread_atfork failed ({r}): a child of fork() must not \
                     call rdma_*"
                ),
            );
        }
    });
    // SAFETY: set by the Once above (or by a fork child handler).
    unsafe { &*CURRENT.load(Ordering::Acquire) }
}

/// The locks held across `fork()`, by the forking thread.
struct Held {
    ids: MutexGuard<'static, FastMap<usize, Arc<IdPriv>>>,
    channels: MutexGuard<'static, FastMap<usize, Arc<Channel>>>,
    outstanding: MutexGuard<'static, FastMap<usize, Box<EventBox>>>,
    inherited: MutexGuard<'static, Inherited>,
    _verbs: crate::verbs::ForkHold,
    _stderr: std::io::StderrLock<'static>,
}

thread_local! {
    static HELD: RefCell<Option<Held>> = const { RefCell::new(None) };
}

extern "C" fn prepare() {
    let g = globals();
    // Every other holder of these locks takes one at a time and no other
    // lock while holding it, so this order cannot deadlock.
    let held = Held {
        ids: lock(&g.ids),
        channels: lock(&g.channels),
        outstanding: lock(&g.outstanding),
        inherited: lock(&g.inherited),
        _verbs: crate::verbs::hold_for_fork(),
        _stderr: std::io::stderr().lock(),
    };
    HELD.with(|h| *h.borrow_mut() = Some(held));
}

extern "C" fn parent() {
    HELD.with(|h| drop(h.borrow_mut().take()));
}

extern "C" fn child() {
    let Some(held) = HELD.with(|h| h.borrow_mut().take()) else {
        return;
    };
    let mut inherited = Inherited {
        ids: held.inherited.ids.clone(),
        channels: held.inherited.channels.clone(),
        events: held.inherited.events.clone(),
    };
    inherited.ids.extend(held.ids.keys().copied());
    inherited
        .channels
        .extend(held.channels.iter().map(|(&p, ch)| (p, ch.fd())));
    inherited.events.extend(held.outstanding.keys().copied());
    let fresh = Globals {
        inherited: Mutex::new(inherited),
        ..Globals::default()
    };
    CURRENT.store(Box::into_raw(Box::new(fresh)), Ordering::Release);
    // Unlocks the parent's (now unused) registries, libibverbs' table and
    // stderr; the parent's state itself stays as it was.
    drop(held);
}

/// `EACCES` (with a debug line) if `p` is a `what` the parent created.
fn refuse(found: bool, what: &str, p: usize) -> Result<(), Errno> {
    if !found {
        return Ok(());
    }
    ibcm_log!(
        DEBUG,
        "librdmacm (ibcm): {what} {p:#x} belongs to the parent process (inherited across \
         fork()): EACCES, as the kernel's rdma_cm refuses a child"
    );
    Err(Errno(libc::EACCES))
}

/// For lookups that failed: `EACCES` for an inherited id, else `EINVAL`.
pub fn unknown_id(p: usize) -> Errno {
    let found = lock(&globals().inherited).ids.contains(&p);
    refuse(found, "id", p).err().unwrap_or(Errno::EINVAL)
}

/// For lookups that failed: `EACCES` for an inherited channel, else
/// `EINVAL`.
pub fn unknown_channel(p: usize) -> Errno {
    let found = lock(&globals().inherited).channels.contains_key(&p);
    refuse(found, "event channel", p)
        .err()
        .unwrap_or(Errno::EINVAL)
}

/// `rdma_ack_cm_event` of an event the parent retrieved: forgotten (the
/// child's copy is never freed: it holds the parent's ids) and true, as
/// librdmacm's ack succeeds on its own memory; false if `p` is not one
/// (or was acked before).
pub fn take_inherited_event(p: usize) -> bool {
    let found = lock(&globals().inherited).events.remove(&p);
    if found {
        ibcm_log!(
            DEBUG,
            "librdmacm (ibcm): event {p:#x} was retrieved by the parent process (inherited \
             across fork()): acked without touching the parent's ids"
        );
    }
    found
}

/// `rdma_destroy_event_channel` of an inherited channel: forgets it and
/// returns the child's copy of its fd to close; `None` if `p` is not one.
pub fn take_inherited_channel(p: usize) -> Option<c_int> {
    lock(&globals().inherited).channels.remove(&p)
}
