//! The runtime: devices, id objects, the per-device event loop and callback
//! delivery with the kernel's contract.
//!
//! * A [`Device`] owns a transport, one or more engine shards (each behind
//!   its own mutex, held only for a pure state-machine step — never across
//!   I/O or a callback) and an event-loop thread that receives MADs, runs
//!   timers and delivers callbacks.
//! * An id is a [`CmIdInner`] whose first field is the C `struct ib_cm_id`, so
//!   the C pointer and the Rust object are the same address. The engine
//!   knows only the id's `Handle`; the runtime finds the `CmIdInner` by it in the
//!   shard's table (`shard.rs`), so no pointer passes through the engine.
//! * Callbacks for one id are serialised and in order: events are queued on
//!   the id (under its shard lock, so in engine order) and delivered by one
//!   thread at a time. A handler may call any CM function on its id except
//!   destroy; a non-zero return destroys the id afterwards (`-ENOMEM` from
//!   REQ_RECEIVED without a REJ). `destroy` blocks until no callback for the
//!   id runs and none will; from the id's own callback it is refused.
//! * API calls run the engine step in the caller's thread and send the
//!   resulting MADs from there; the event loop is only woken when a new
//!   timer is earlier than the one it sleeps for.
//!
//! # Threads
//!
//! Each device runs `DeviceOptions::threads` event-loop threads (`ibcm-N`)
//! and, for a transport that watches its ports (real HCAs), one
//! `ibcm-ports` thread that installs new port tables. A consumer thread
//! runs the engine step of its own `CmId` call and sends its MADs (held
//! back inside `Device::batch`); the callbacks such a call causes are
//! handed to an event loop (`CmId::with_engine`), not run in the caller.
//!
//! # Locks
//!
//! Taken in this order, never the other way: the device's `listen_lock`
//! (listen, insert_listen) → one shard's engine mutex →
//! the leaves: the device's send queue (`outq`), an id's delivery queue,
//! a registry shard, the device's listener table. `send_lock` (one flush at a time) is taken with no
//! shard lock held and only nests `outq`. No lock is held while MADs are
//! sent or a callback runs; destroying a listener takes and drops every
//! shard lock in turn as a barrier.
//!
//! # Files
//!
//! * `device.rs` — [`Device`] (open, close, ports and their C GID attribute
//!   objects, counters) and [`DeviceOptions`].
//! * `spec.rs` — [`DeviceSpec`], RDMA device names, opening the transport a
//!   name stands for.
//! * `event_loop.rs` — the receive/timer loop, routing MADs to shards,
//!   draining an engine step's outputs, flushing the send queue,
//!   [`Device::batch`].
//! * `inner.rs` — [`CmIdInner`] and its delivery queue, callback delivery,
//!   the protocol destroy and release; [`RustHandler`].
//! * `id.rs` — [`CmId`] and its `ib_cm.h` calls, `Device::create_id` and
//!   `Device::insert_listen`.
//! * `shard.rs` — an engine shard with the `CmIdInner`s of its ids by handle,
//!   and the device's listeners by handle.
//! * `registry.rs` — the live-id registry of C pointers behind [`lookup`],
//!   and [`listen_id`].
//! * `remote.rs` — a device served by the host CM service (`ipc`
//!   requests instead of engine steps, pushed events into the same
//!   delivery), `IBCM_SERVICE`, starting the service on demand.

use std::sync::{Mutex, MutexGuard};

mod busy;
mod device;
mod event_loop;
mod forward;
mod id;
mod inner;
mod registry;
mod remote;
mod shard;
mod spec;
mod switch;

pub(crate) use busy::Watch as ServiceWatch;
pub use busy::{
    DEFAULT_SERVICE_BUSY_MAX_FLOOR, service_busy_max, service_busy_waits, service_stopped_waits,
};
pub use device::{Device, DeviceOptions, PortsHook};
pub use event_loop::{ROUND_SLICE, delivery_round, in_delivery_round, set_delivery_round_end};
pub use forward::forward_mode;
pub use id::CmId;
pub use inner::{CmIdInner, RustHandler};
pub use registry::{listen_id, lookup};
pub(crate) use remote::connect_service;
pub use remote::{
    DEFAULT_SERVICE_TIMEOUT, Mode as ServiceMode, mode as service_mode, service_timeout,
    service_timeouts,
};
pub use spec::{DeviceSpec, SOFT_VERBS_PORT, open_transport};
pub use switch::LocalSwitch;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn read<T>(l: &std::sync::RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|e| e.into_inner())
}
