//! The runtime's tables of ids, keyed by the engine's own names for them.
//!
//! The engine names an id by its [`Handle`] (the local comm ID: a slab slot
//! with its generation, so a handle of a destroyed id never names the id
//! that reuses the slot). The runtime keeps the `CmIdInner` of each id in
//! tables keyed by that handle — no pointer travels through the engine:
//!
//! * [`Shard`]: one engine shard and the `CmIdInner`s of its ids, under
//!   the shard's one mutex, so an engine step and the lookups of the ids it
//!   reports need no second lock.
//! * [`Listeners`]: the device's listeners, read by a REQ matched on any
//!   shard (a leaf lock: taken under a shard lock, nothing taken under it).

use super::inner::CmIdInner;
use super::lock;
use crate::engine::ids::{FastMap, FastState};
use crate::engine::{Engine, Handle};
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex};

/// CmIdInner tables are keyed by the full handle (generation included), which
/// the engine assigns and a peer cannot choose, so a fast hash is safe.
type ByHandle = FastMap<u64, Arc<CmIdInner>>;

fn by_handle() -> ByHandle {
    ByHandle::with_hasher(FastState::new(0x2545_f491_4f6c_dd1d))
}

/// One engine shard and the `CmIdInner`s of its ids. Derefs to the
/// [`Engine`].
pub(super) struct Shard {
    engine: Engine,
    /// The object of every id of this shard that has one (an id made by
    /// a REQ gets it when its REQ event is drained). The entry is the
    /// reference the id's life holds; `CmIdInner::destroy_inner` takes it.
    ids: ByHandle,
}

impl Shard {
    pub(super) fn new(engine: Engine) -> Shard {
        Shard {
            engine,
            ids: by_handle(),
        }
    }

    /// The object of the id `h` names, if it is alive and has one.
    pub(super) fn id(&self, h: Handle) -> Option<&Arc<CmIdInner>> {
        self.ids.get(&h.0)
    }

    /// Records the object of a new id (its handle is the key).
    pub(super) fn insert_id(&mut self, id: Arc<CmIdInner>) {
        self.ids.insert(id.handle().0, id);
    }

    /// Takes the object of `h` out of the table (the id is destroyed).
    pub(super) fn remove_id(&mut self, h: Handle) -> Option<Arc<CmIdInner>> {
        self.ids.remove(&h.0)
    }
}

impl Deref for Shard {
    type Target = Engine;
    fn deref(&self) -> &Engine {
        &self.engine
    }
}

impl DerefMut for Shard {
    fn deref_mut(&mut self) -> &mut Engine {
        &mut self.engine
    }
}

/// The listeners of a device by handle. An id is entered before its
/// engine `listen` can match a REQ and removed after its destroy has
/// crossed every shard lock, so a REQ event always finds its listener.
pub(super) struct Listeners(Mutex<ByHandle>);

impl Listeners {
    pub(super) fn new() -> Listeners {
        Listeners(Mutex::new(by_handle()))
    }

    pub(super) fn get(&self, h: Handle) -> Option<Arc<CmIdInner>> {
        lock(&self.0).get(&h.0).cloned()
    }

    /// Enters `sh`; `false` if it was already there (then a failed listen
    /// must leave the entry alone).
    pub(super) fn insert(&self, sh: &Arc<CmIdInner>) -> bool {
        lock(&self.0).insert(sh.handle().0, sh.clone()).is_none()
    }

    pub(super) fn remove(&self, h: Handle) {
        lock(&self.0).remove(&h.0);
    }
}
