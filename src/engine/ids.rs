//! Local communication IDs.
//!
//! A local comm ID must be unique among live ids, hard to guess (the peer
//! addresses our id by it, so a guessable ID lets an off-path sender tear
//! down connections), slow to reuse, and map back to its record in O(1).
//!
//! Each engine shard keeps its ids in a slab. The 32-bit plain value
//! `generation | slot | shard` is run through a keyed 4-round Feistel
//! permutation of the 32-bit space, so IDs look random, never collide, and
//! decode back to (shard, slot, generation) with a few multiplications.
//! Free slots are reused in FIFO order and each reuse bumps the slot's
//! generation, so the same ID comes back only after `2^GEN_BITS` reuses of
//! one slot, i.e. after millions of allocations on a busy table.

use std::collections::VecDeque;

/// Bits of the plain value that name the slot (shard bits included).
pub const SLOT_BITS: u32 = 22;
/// Bits of the plain value that count reuses of a slot.
pub const GEN_BITS: u32 = 32 - SLOT_BITS;

/// The keyed permutation shared by all shards of one device.
#[derive(Debug, Clone, Copy)]
pub struct IdCodec {
    keys: [u32; 4],
}

impl IdCodec {
    pub fn new(seed: u64) -> IdCodec {
        let mut s = seed;
        let mut keys = [0u32; 4];
        for k in &mut keys {
            s = splitmix64(s);
            *k = (s >> 16) as u32;
        }
        IdCodec { keys }
    }

    #[inline]
    fn round(half: u16, key: u32) -> u16 {
        let mut x = (half as u32 ^ key).wrapping_mul(0x045d_9f3b);
        x ^= x >> 16;
        x = x.wrapping_mul(0x045d_9f3b);
        (x ^ (x >> 15)) as u16
    }

    /// Plain value → wire ID.
    #[inline]
    pub fn encode(&self, plain: u32) -> u32 {
        let (mut l, mut r) = ((plain >> 16) as u16, plain as u16);
        for &k in &self.keys {
            let n = l ^ Self::round(r, k);
            l = r;
            r = n;
        }
        (l as u32) << 16 | r as u32
    }

    /// Wire ID → plain value.
    #[inline]
    pub fn decode(&self, id: u32) -> u32 {
        let (mut l, mut r) = ((id >> 16) as u16, id as u16);
        for &k in self.keys.iter().rev() {
            let p = r ^ Self::round(l, k);
            r = l;
            l = p;
        }
        (l as u32) << 16 | r as u32
    }
}

/// SplitMix64, for deriving keys and cheap seeded randomness.
pub fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = x;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A fast seeded hasher for the engine's small integer keys (comm IDs,
/// GUIDs, QPNs, GIDs). Keys come from the network, so the state is seeded
/// per device to keep an attacker from predicting collisions; the mixing is
/// a multiply-rotate with a strong finaliser.
#[derive(Debug, Clone, Copy)]
pub struct FastState(u64);

impl FastState {
    pub fn new(seed: u64) -> FastState {
        FastState(splitmix64(seed ^ 0x243f_6a88_85a3_08d3))
    }
}

impl std::hash::BuildHasher for FastState {
    type Hasher = FastHasher;
    fn build_hasher(&self) -> FastHasher {
        FastHasher(self.0)
    }
}

pub struct FastHasher(u64);

impl std::hash::Hasher for FastHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for c in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            self.write_u64(u64::from_le_bytes(w));
        }
    }
    #[inline]
    fn write_u64(&mut self, x: u64) {
        self.0 = (self.0.rotate_left(23) ^ x).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    #[inline]
    fn write_u32(&mut self, x: u32) {
        self.write_u64(x as u64);
    }
    #[inline]
    fn write_u16(&mut self, x: u16) {
        self.write_u64(x as u64);
    }
    #[inline]
    fn write_u8(&mut self, x: u8) {
        self.write_u64(x as u64);
    }
    #[inline]
    fn write_usize(&mut self, x: usize) {
        self.write_u64(x as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        let mut z = self.0;
        z = (z ^ (z >> 32)).wrapping_mul(0xd6e8_feb8_6659_fd93);
        z ^ (z >> 32)
    }
}

/// A hash map with [`FastState`].
pub type FastMap<K, V> = std::collections::HashMap<K, V, FastState>;
/// A hash set with [`FastState`].
pub type FastSet<K> = std::collections::HashSet<K, FastState>;

/// Which shard an ID belongs to, given the device's shard bit count.
#[inline]
pub fn shard_of(codec: &IdCodec, shard_bits: u32, id: u32) -> u32 {
    codec.decode(id) & ((1u32 << shard_bits) - 1)
}

struct Slot<T> {
    generation: u16,
    val: Option<T>,
}

/// A slab of records addressed by local comm ID.
pub struct IdSlab<T> {
    codec: IdCodec,
    shard: u32,
    shard_bits: u32,
    slots: Vec<Slot<T>>,
    free: VecDeque<u32>,
    len: usize,
    max_slots: u32,
    /// A direct-mapped cache of located IDs, indexed by the ID's low bits
    /// (IDs look random): `(id, slot)`, or `(_, NO_SLOT)` when empty. One
    /// operation looks its id up several times and a batch revisits the
    /// ids in flight; a hit skips the Feistel decode and the generation
    /// check. An entry names a live slot holding that ID: `insert_with`
    /// fills it, `remove` empties it.
    cache: Box<[std::cell::Cell<(u32, u32)>]>,
}

/// Entries of [`IdSlab`]'s lookup cache (a power of two; 8 bytes each).
const LOOKUP_CACHE: usize = 1024;
/// A lookup cache entry that names no slot.
const NO_SLOT: u32 = u32::MAX;

impl<T> IdSlab<T> {
    pub fn new(codec: IdCodec, shard: u32, shard_bits: u32, max_ids: u32) -> IdSlab<T> {
        let cap = 1u32 << (SLOT_BITS - shard_bits);
        IdSlab {
            codec,
            shard,
            shard_bits,
            slots: Vec::new(),
            free: VecDeque::new(),
            len: 0,
            max_slots: max_ids.min(cap),
            cache: vec![std::cell::Cell::new((0, NO_SLOT)); LOOKUP_CACHE].into_boxed_slice(),
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn plain(&self, slot: u32, generation: u16) -> u32 {
        (generation as u32) << SLOT_BITS | slot << self.shard_bits | self.shard
    }

    /// Allocates a slot and returns its ID; `make` builds the record from
    /// the ID. `None` when the table is full.
    pub fn insert_with(&mut self, make: impl FnOnce(u32) -> T) -> Option<u32> {
        // Reuse old slots first in FIFO order, but grow while the free list
        // is short so reuse of any one ID stays rare.
        let slot = if self.free.len() > 1024 || self.slots.len() as u32 >= self.max_slots {
            self.free.pop_front()?
        } else {
            self.slots.push(Slot {
                generation: 0,
                val: None,
            });
            self.slots.len() as u32 - 1
        };
        let generation = self.slots[slot as usize].generation;
        let id = self.codec.encode(self.plain(slot, generation));
        self.slots[slot as usize].val = Some(make(id));
        self.len += 1;
        self.cache_entry(id).set((id, slot));
        Some(id)
    }

    #[inline]
    fn cache_entry(&self, id: u32) -> &std::cell::Cell<(u32, u32)> {
        &self.cache[id as usize & (LOOKUP_CACHE - 1)]
    }

    #[inline]
    fn locate(&self, id: u32) -> Option<usize> {
        let e = self.cache_entry(id);
        let (cid, cslot) = e.get();
        if cid == id && cslot != NO_SLOT {
            debug_assert!(self.locate_slow(id) == Some(cslot as usize));
            return Some(cslot as usize);
        }
        let r = self.locate_slow(id);
        if let Some(i) = r {
            e.set((id, i as u32));
        }
        r
    }

    fn locate_slow(&self, id: u32) -> Option<usize> {
        let p = self.codec.decode(id);
        let mask = (1u32 << self.shard_bits) - 1;
        if p & mask != self.shard {
            return None;
        }
        let slot = (p & ((1 << SLOT_BITS) - 1)) >> self.shard_bits;
        let generation = (p >> SLOT_BITS) as u16;
        let s = self.slots.get(slot as usize)?;
        (s.generation == generation && s.val.is_some()).then_some(slot as usize)
    }

    #[inline]
    pub fn get(&self, id: u32) -> Option<&T> {
        let i = self.locate(id)?;
        self.slots[i].val.as_ref()
    }

    #[inline]
    pub fn get_mut(&mut self, id: u32) -> Option<&mut T> {
        let i = self.locate(id)?;
        self.slots[i].val.as_mut()
    }

    pub fn remove(&mut self, id: u32) -> Option<T> {
        let i = self.locate(id)?;
        self.cache_entry(id).set((0, NO_SLOT));
        let s = &mut self.slots[i];
        let v = s.val.take();
        s.generation = (s.generation + 1) & ((1 << GEN_BITS) - 1) as u16;
        self.free.push_back(i as u32);
        self.len -= 1;
        v
    }

    /// IDs of all live records.
    pub fn ids(&self) -> Vec<u32> {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.val.is_some())
            .map(|(i, s)| self.codec.encode(self.plain(i as u32, s.generation)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn permutation_roundtrips_and_scatters() {
        let c = IdCodec::new(42);
        let mut seen = HashSet::new();
        for x in 0..100_000u32 {
            let id = c.encode(x);
            assert_eq!(c.decode(id), x);
            assert!(seen.insert(id));
        }
        // Consecutive plain values do not give consecutive IDs.
        let diffs = (0..1000u32)
            .filter(|&x| c.encode(x + 1).wrapping_sub(c.encode(x)) < 16)
            .count();
        assert!(diffs < 5, "{diffs}");
        assert_ne!(IdCodec::new(1).encode(7), IdCodec::new(2).encode(7));
    }

    #[test]
    fn slab_insert_get_remove_and_generations() {
        let mut s: IdSlab<u32> = IdSlab::new(IdCodec::new(7), 1, 1, u32::MAX);
        let a = s.insert_with(|id| id).unwrap();
        assert_eq!(shard_of(&IdCodec::new(7), 1, a), 1);
        assert_eq!(s.get(a), Some(&a));
        assert_eq!(s.remove(a), Some(a));
        assert_eq!(s.get(a), None);
        assert_eq!(s.remove(a), None);
        // An ID from another shard never resolves here, even where this
        // slab holds a live record in the same slot and generation.
        let mut s0: IdSlab<u32> = IdSlab::new(IdCodec::new(7), 0, 1, u32::MAX);
        let mut s1: IdSlab<u32> = IdSlab::new(IdCodec::new(7), 1, 1, u32::MAX);
        let (id0, id1) = (
            s0.insert_with(|id| id).unwrap(),
            s1.insert_with(|id| id).unwrap(),
        );
        assert_eq!(shard_of(&IdCodec::new(7), 1, id0), 0);
        assert_eq!(shard_of(&IdCodec::new(7), 1, id1), 1);
        assert_eq!(s1.get(id0), None, "shard 1 resolved shard 0's ID");
        assert_eq!(s1.get_mut(id0), None, "shard 1 resolved shard 0's ID");
        assert_eq!(s1.remove(id0), None, "shard 1 removed shard 0's ID");
        assert_eq!(s0.get(id1), None, "shard 0 resolved shard 1's ID");
        assert_eq!((s0.get(id0), s1.get(id1)), (Some(&id0), Some(&id1)));
        let mut ids = HashSet::new();
        for _ in 0..5000 {
            let id = s.insert_with(|id| id).unwrap();
            assert!(ids.insert(id), "ID reused too early");
            if ids.len() % 3 == 0 {
                s.remove(id);
            }
        }
        assert!(s.get(a).is_none());
    }

    #[test]
    fn slab_capacity_limit() {
        let mut s: IdSlab<()> = IdSlab::new(IdCodec::new(3), 0, 0, 4);
        let ids: Vec<u32> = (0..4).map(|_| s.insert_with(|_| ()).unwrap()).collect();
        assert!(s.insert_with(|_| ()).is_none());
        s.remove(ids[0]);
        let again = s.insert_with(|_| ()).unwrap();
        assert_ne!(again, ids[0], "generation must change on reuse");
    }

    /// The lookup cache never outlives its record: under churn on a small
    /// table (slots reused at once, new generations, IDs colliding in the
    /// cache) every live ID finds its own record and every removed ID
    /// finds nothing, whichever was looked up last.
    #[test]
    fn slab_lookups_match_a_model_under_churn() {
        let mut s: IdSlab<u64> = IdSlab::new(IdCodec::new(11), 0, 0, 48);
        let mut live: std::collections::HashMap<u32, u64> = Default::default();
        let mut dead: Vec<u32> = Vec::new();
        let mut rng = 5u64;
        let mut pick = |n: usize| {
            rng = splitmix64(rng);
            (rng % n as u64) as usize
        };
        for step in 0..200_000u64 {
            match pick(4) {
                0 if live.len() < 48 => {
                    let id = s.insert_with(|_| step).unwrap();
                    assert!(live.insert(id, step).is_none(), "live ID handed out again");
                }
                1 if !live.is_empty() => {
                    let id = *live.keys().nth(pick(live.len())).unwrap();
                    assert_eq!(s.remove(id), live.remove(&id));
                    dead.push(id);
                }
                2 if !dead.is_empty() => {
                    let id = dead[pick(dead.len())];
                    if !live.contains_key(&id) {
                        assert_eq!(s.get(id), None, "removed ID {id:#x} found a record");
                        assert_eq!(s.remove(id), None);
                    }
                }
                _ if !live.is_empty() => {
                    let id = *live.keys().nth(pick(live.len())).unwrap();
                    assert_eq!(s.get(id), live.get(&id));
                    *s.get_mut(id).unwrap() += 1;
                    *live.get_mut(&id).unwrap() += 1;
                }
                _ => {}
            }
        }
        assert_eq!(s.len(), live.len());
    }
}
