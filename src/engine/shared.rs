//! State shared by the shards of one device: the listen table, the
//! remote-QPN table used for stale-connection detection, the ID codec and
//! the service-ID allocator. Everything else (ids, timers, duplicate
//! tables) is owned by one shard and needs no lock.
//!
//! Locks here are leaf locks held for a hash-map operation only; the
//! message path takes at most a read lock on the listen table and one of 16
//! remote-QPN sub-locks.

use super::ids::{IdCodec, IdLayout, PeerMap, PeerState};
use super::types::*;
use std::collections::hash_map::Entry;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};

/// The connection on a (remote CA GUID, remote QPN): the value of the
/// stale-connection table, naming its id by shard and local comm ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteQpEntry {
    pub shard: u32,
    pub local_id: u32,
    pub remote_id: u32,
}

/// A listening id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenEntry {
    pub shard: u32,
    pub local_id: u32,
    /// For `ib_cm_insert_listen`: the key (handler identity) shared
    /// listeners must match; `None` for plain `ib_cm_listen` listeners,
    /// which are never shared.
    pub share_key: Option<u64>,
    /// The listener's `set_prepare_mra_on_report` flag, which the ids its
    /// REQs create inherit.
    pub mra_on_report: bool,
}

const QP_LOCKS: usize = 16;

/// A listen table wider than this device's engines: on a device shared
/// through a forwarding service (design B), the host's, which the service
/// holds. A listen is claimed there after this device's own table took it
/// and released when the listener goes.
pub trait HostListens: Send + Sync {
    /// `Err(-EBUSY)` when another process holds `service_id`, or the
    /// errno of a service that cannot answer.
    fn claim(&self, service_id: u64) -> Result<(), Errno>;
    fn release(&self, service_id: u64);
}

pub struct Shared {
    pub codec: IdCodec,
    /// The host's listen table, for a device whose engines are not the
    /// host's only ones (`None`: this table is the host's).
    pub host_listens: Option<std::sync::Arc<dyn HostListens>>,
    /// How plain comm ID values are cut (its `shard_bits` is the shard
    /// width).
    pub layout: IdLayout,
    pub(super) listen: RwLock<PeerMap<u64, ListenEntry>>,
    pub(super) remote_qp: [Mutex<PeerMap<(u64, u32), RemoteQpEntry>>; QP_LOCKS],
    next_service_id: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    pub fn new(seed: u64, shard_bits: u32) -> Shared {
        Shared::with_layout(seed, IdLayout::local(shard_bits))
    }

    /// A device whose comm IDs follow `layout`; `seed` keys the comm ID
    /// permutation (a forwarded device's is the service's, shared by
    /// every process on the device) and seeds the tables.
    pub fn with_layout(seed: u64, layout: IdLayout) -> Shared {
        Shared {
            codec: IdCodec::new(seed),
            host_listens: None,
            layout,
            listen: RwLock::new(PeerMap::with_hasher(PeerState::new(seed ^ 2))),
            remote_qp: std::array::from_fn(|i| {
                Mutex::new(PeerMap::with_hasher(PeerState::new(seed ^ (i as u64 + 3))))
            }),
            // Each process of a forwarded device assigns from its own
            // range, so that two never pick the same one.
            next_service_id: AtomicU64::new(ASSIGN_SERVICE_ID | (layout.proc_slot as u64) << 40),
        }
    }

    pub fn shards(&self) -> u32 {
        1 << self.layout.shard_bits
    }

    /// `IB_CM_ASSIGN_SERVICE_ID`: the next unused service ID of the
    /// 0x02 space.
    pub fn assign_service_id(&self) -> u64 {
        let listen = self.listen.read().unwrap_or_else(|e| e.into_inner());
        loop {
            let id = self.next_service_id.fetch_add(1, Ordering::Relaxed);
            if !listen.contains_key(&id) {
                return id;
            }
        }
    }

    pub fn listen_lookup(&self, service_id: u64) -> Option<ListenEntry> {
        let listen = self.listen.read().unwrap_or_else(|e| e.into_inner());
        listen.get(&service_id).copied()
    }

    /// Sets the inherited MRA flag of the listener `(shard, local_id)` on
    /// `service_id` (nothing when another id holds the service ID).
    pub fn listen_set_mra(&self, service_id: u64, shard: u32, local_id: u32, on: bool) {
        let mut listen = self.listen.write().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = listen.get_mut(&service_id)
            && e.shard == shard
            && e.local_id == local_id
        {
            e.mra_on_report = on;
        }
    }

    /// Registers a listener; `Err(existing)` when the service ID is taken.
    pub fn listen_insert(&self, service_id: u64, e: ListenEntry) -> Result<(), ListenEntry> {
        let mut listen = self.listen.write().unwrap_or_else(|e| e.into_inner());
        match listen.entry(service_id) {
            Entry::Occupied(o) => Err(*o.get()),
            Entry::Vacant(v) => {
                v.insert(e);
                Ok(())
            }
        }
    }

    /// Removes the listener if it is the registered one, and releases its
    /// claim in the host's table.
    pub fn listen_remove(&self, service_id: u64, local_id: u32) {
        if self.listen_unregister(service_id, local_id)
            && let Some(h) = &self.host_listens
        {
            h.release(service_id);
        }
    }

    /// Removes the listener from this table if it is the registered one
    /// (whether it was).
    pub(super) fn listen_unregister(&self, service_id: u64, local_id: u32) -> bool {
        let mut listen = self.listen.write().unwrap_or_else(|e| e.into_inner());
        let mine = listen
            .get(&service_id)
            .is_some_and(|e| e.local_id == local_id);
        if mine {
            listen.remove(&service_id);
        }
        mine
    }

    /// Claims `service_id` in the host's table (nothing to do when this
    /// device's table is the host's).
    pub fn claim_host(&self, service_id: u64) -> Result<(), Errno> {
        self.host_listens
            .as_ref()
            .map_or(Ok(()), |h| h.claim(service_id))
    }

    pub fn listen_count(&self) -> usize {
        self.listen.read().unwrap_or_else(|e| e.into_inner()).len()
    }

    fn qp_lock(&self, guid: u64, qpn: u32) -> &Mutex<PeerMap<(u64, u32), RemoteQpEntry>> {
        let h = (guid ^ (qpn as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)) >> 7;
        &self.remote_qp[(h as usize) % QP_LOCKS]
    }

    /// Records the connection to (remote CA GUID, remote QPN);
    /// `Err(existing)` when another connection holds it (a stale peer).
    pub fn qp_insert(&self, guid: u64, qpn: u32, r: RemoteQpEntry) -> Result<(), RemoteQpEntry> {
        let mut m = lock(self.qp_lock(guid, qpn));
        match m.entry((guid, qpn)) {
            Entry::Occupied(o) => Err(*o.get()),
            Entry::Vacant(v) => {
                v.insert(r);
                Ok(())
            }
        }
    }

    /// The connection that holds QP (`guid`, `qpn`) of a peer, if any.
    pub fn qp_get(&self, guid: u64, qpn: u32) -> Option<RemoteQpEntry> {
        lock(self.qp_lock(guid, qpn)).get(&(guid, qpn)).copied()
    }

    /// Forgets the entry if it belongs to `local_id` (of `shard`).
    pub fn qp_remove(&self, guid: u64, qpn: u32, shard: u32, local_id: u32) {
        let mut m = lock(self.qp_lock(guid, qpn));
        if m.get(&(guid, qpn))
            .is_some_and(|r| r.local_id == local_id && r.shard == shard)
        {
            m.remove(&(guid, qpn));
        }
    }

    pub fn qp_count(&self) -> usize {
        self.remote_qp.iter().map(|m| lock(m).len()).sum()
    }
}
