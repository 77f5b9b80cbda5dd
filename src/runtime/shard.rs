//! The runtime's tables of ids, keyed by the engine's own names for them.
//!
//! The engine names an id by its [`Handle`] (the local comm ID: a slab slot
//! with its generation, so a handle of a destroyed id never names the id
//! that reuses the slot). The runtime keeps the `CmIdInner` of each id in
//! tables found by that handle — no pointer travels through the engine:
//!
//! * [`Shard`]: one engine shard and the `CmIdInner`s of its ids, at the
//!   engine's slot for each, under the shard's one mutex, so an engine
//!   step and the lookups of the ids it reports need no second lock.
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
    /// a REQ gets it when its REQ event is drained), at the engine's slot
    /// for the id ([`Engine::id_slot`]): ids made one after another sit
    /// side by side, where a hash table would scatter them over memory
    /// (a lookup per event, a cache miss each once thousands are live).
    /// The entry is the reference the id's life holds;
    /// `CmIdInner::destroy_inner` takes it.
    ids: Vec<Option<Arc<CmIdInner>>>,
    /// Objects whose slot was taken when they were entered: none while
    /// the engine frees a slot only after its id's object was removed,
    /// kept so that a table entry can never be overwritten.
    spill: ByHandle,
}

impl Shard {
    pub(super) fn new(engine: Engine) -> Shard {
        Shard {
            engine,
            ids: Vec::new(),
            spill: by_handle(),
        }
    }

    /// The object of the id `h` names, if it is alive and has one.
    pub(super) fn id(&self, h: Handle) -> Option<&Arc<CmIdInner>> {
        let at = self.engine.id_slot(h).and_then(|i| self.ids.get(i));
        match at {
            Some(Some(sh)) if sh.handle() == h => Some(sh),
            _ if self.spill.is_empty() => None,
            _ => self.spill.get(&h.0),
        }
    }

    /// Records the object of a new id (under its handle).
    pub(super) fn insert_id(&mut self, id: Arc<CmIdInner>) {
        let h = id.handle();
        let Some(i) = self.engine.id_slot(h) else {
            self.spill.insert(h.0, id);
            return;
        };
        if i >= self.ids.len() {
            self.ids.resize(i + 1, None);
        }
        match &mut self.ids[i] {
            e @ None => *e = Some(id),
            Some(sh) if sh.handle() == h => *sh = id,
            Some(_) => {
                self.spill.insert(h.0, id);
            }
        }
    }

    /// Takes the object of `h` out of the table (the id is destroyed).
    pub(super) fn remove_id(&mut self, h: Handle) -> Option<Arc<CmIdInner>> {
        if let Some(e) = self.engine.id_slot(h).and_then(|i| self.ids.get_mut(i))
            && e.as_ref().is_some_and(|sh| sh.handle() == h)
        {
            return e.take();
        }
        self.spill.remove(&h.0)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::EngineConfig;
    use crate::runtime::{Device, DeviceOptions};

    /// Objects are found by their handle only: a new id in a slot whose
    /// old id's object is still entered goes beside it (the spill), and
    /// each is found, and taken, under its own handle; a handle whose
    /// object was taken finds nothing.
    #[test]
    fn a_reused_slot_never_loses_or_confuses_an_object() {
        let dev = Device::open("loop:127.0.97.1", DeviceOptions::default()).unwrap();
        let cfg = EngineConfig {
            max_ids: 1,
            ..EngineConfig::new(1, Vec::new())
        };
        let mut sh = Shard::new(Engine::standalone(cfg, 7));
        let object = |sh: &mut Shard, h| {
            let o = Arc::new(CmIdInner::new(
                dev.clone(),
                0,
                h,
                None,
                std::ptr::null_mut(),
                None,
            ));
            sh.insert_id(o.clone());
            o
        };
        let a = sh.create_id().unwrap();
        let oa = object(&mut sh, a);
        // The engine frees the slot; the object stays entered.
        sh.destroy(a, 0);
        let b = sh.create_id().unwrap();
        assert_ne!(a, b);
        assert_eq!(sh.id_slot(a), sh.id_slot(b), "one slot, two generations");
        let ob = object(&mut sh, b);
        assert!(Arc::ptr_eq(sh.id(a).unwrap(), &oa));
        assert!(Arc::ptr_eq(sh.id(b).unwrap(), &ob));
        assert!(Arc::ptr_eq(&sh.remove_id(a).unwrap(), &oa));
        assert!(sh.id(a).is_none());
        assert!(Arc::ptr_eq(sh.id(b).unwrap(), &ob));
        assert!(sh.remove_id(a).is_none());
        assert!(Arc::ptr_eq(&sh.remove_id(b).unwrap(), &ob));
        assert!(sh.id(b).is_none());
        // An id of another shard (or no id) has no slot here.
        assert!(sh.id(Handle(u64::MAX)).is_none());
    }
}
