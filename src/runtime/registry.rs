//! The C-pointer registry: which addresses are live ids (so the C layer
//! rejects NULL, freed and foreign pointers without touching them), and
//! the C `listen_id` of a request event.

use super::id::CmId;
use super::inner::{CALLBACK_LISTENER, CmIdInner};
use super::lock;
use crate::abi::IbCmId;
use crate::engine::{Event, EventParam};
use std::sync::Mutex;

const REG_SHARDS: usize = 16;

/// Live ids by address, with their owner counts (a shared listener has one
/// owner per `ib_cm_insert_listen` caller). Lets the C layer reject NULL,
/// freed and foreign pointers without touching them. Sharded so calls on
/// different ids do not meet on one lock.
/// Keys are our own heap addresses, which a peer cannot choose, so a fast
/// hash is safe here.
type LiveMap = crate::engine::ids::FastMap<usize, u32>;

static LIVE: std::sync::LazyLock<[Mutex<LiveMap>; REG_SHARDS]> = std::sync::LazyLock::new(|| {
    // SAFETY: plain registration of `extern "C"` handlers.
    unsafe { libc::pthread_atfork(Some(fork_prepare), Some(fork_done), Some(fork_done)) };
    std::array::from_fn(|i| {
        Mutex::new(LiveMap::with_hasher(crate::engine::ids::FastState::new(
            0x9e37_79b9_7f4a_7c15 ^ i as u64,
        )))
    })
});

thread_local! {
    /// The shards the forking thread holds across `fork()`.
    static FORK_HELD: std::cell::RefCell<Vec<std::sync::MutexGuard<'static, LiveMap>>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// `fork()` copies the registry while no thread holds a shard, so a child
/// that creates ids of its own never waits for a thread it does not have.
/// Every other holder takes one shard at a time and nothing else under it.
extern "C" fn fork_prepare() {
    FORK_HELD.with(|h| h.borrow_mut().extend(LIVE.iter().map(lock)));
}

extern "C" fn fork_done() {
    FORK_HELD.with(|h| h.borrow_mut().clear());
}

fn live_shard(p: usize) -> &'static Mutex<LiveMap> {
    // Every bit of the address counts: ids of different threads come from
    // different malloc arenas whose low bits are often identical.
    let h = (p as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    &LIVE[(h >> 60) as usize % REG_SHARDS]
}

pub(super) fn register(p: *const CmIdInner) {
    *lock(live_shard(p as usize)).entry(p as usize).or_insert(0) += 1;
}

/// Drops one owner of `p`.
pub(super) fn unregister(p: *const CmIdInner) {
    let mut m = lock(live_shard(p as usize));
    if let Some(n) = m.get_mut(&(p as usize)) {
        *n -= 1;
        if *n == 0 {
            m.remove(&(p as usize));
        }
    }
}

/// The id at a C address, if it is a live ibcm id. Never dereferences an
/// address that is not registered.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub fn lookup(p: *mut IbCmId) -> Option<CmId> {
    if p.is_null() {
        return None;
    }
    let m = lock(live_shard(p as usize));
    // Registered under the lock: an owner reference exists, so it is alive.
    m.contains_key(&(p as usize))
        .then(|| unsafe { CmId::from_c(p) })
}

/// The C `listen_id` of a REQ_RECEIVED or SIDR_REQ_RECEIVED event (the
/// listener the request matched; null for other events), called from that
/// event's callback: a queued request event holds its listener, and its
/// delivery names it to the thread running the callback. Null outside a
/// callback.
pub fn listen_id(ev: &Event) -> *mut IbCmId {
    match &ev.param {
        EventParam::Req(_) | EventParam::SidrReq(_) => {
            let p = CALLBACK_LISTENER.with(|c| c.get());
            if p.is_null() {
                std::ptr::null_mut()
            } else {
                // Alive: the item being delivered holds it.
                unsafe { (*p).c.get() }
            }
        }
        _ => std::ptr::null_mut(),
    }
}
