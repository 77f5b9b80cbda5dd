//! Hierarchical timing wheel for the sans-IO protocol engine.
//!
//! The engine never reads a clock: every call that depends on time takes
//! `now` as a `u64` count of milliseconds on a clock the caller chooses
//! (monotonic, non-decreasing). A timer with deadline `d` fires on the first
//! [`TimerWheel::poll`] / [`TimerWheel::drain_expired`] whose `now >= d`;
//! deadlines already in the past fire on the next poll.
//!
//! # Design
//!
//! * **Slab.** Timers live in a `Vec` of entries threaded by a free list.
//!   A [`TimerKey`] is `(index, generation)`; the generation is bumped every
//!   time a slot is freed, so a stale key (timer fired or cancelled, slot
//!   reused) is recognised and never touches someone else's timer.
//! * **Wheel.** [`LEVELS`] = 11 levels of 64 slots at 1 ms resolution. Level
//!   `l` resolves deadline bits `6l .. 6l+6`; 11 × 6 = 66 ≥ 64 bits, so every
//!   `u64` deadline up to and including `u64::MAX` has an exact place and no
//!   clamping is ever needed (the top level simply uses 16 of its slots).
//!   Each slot is an intrusive doubly-linked list threaded through the slab by
//!   `u32` indices (no pointers, no `unsafe`, no allocation per timer).
//! * **Placement.** The wheel keeps `elapsed`, the time it has processed up
//!   to. A timer whose deadline is `<= elapsed` sits on the *expired* list and
//!   fires on the next poll. Otherwise its level is the position of the
//!   highest bit in which `deadline` and `elapsed` differ, divided by 6, and
//!   its slot is the deadline's 6-bit digit at that level. Hence every level
//!   only holds slots strictly after `elapsed`'s own digit, all in the current
//!   rotation, and every slot of level `l` starts after every slot of the
//!   levels below it: the earliest pending slot is the first set bit of the
//!   lowest non-empty level.
//! * **Bitmaps.** One `u64` occupancy word per level plus one word of
//!   non-empty levels. Finding the earliest slot is two `trailing_zeros`;
//!   empty slots are never visited, so a jump of hours (or of `2^63` ms) costs
//!   only the work of the timers that actually move.
//! * **Lazy cascading.** `poll` processes the earliest slot only when its
//!   start is `<= now`, and only until one timer is due: `elapsed` jumps to the
//!   slot start and the slot's timers are re-placed relative to it (into lower
//!   levels, or onto the expired list when the deadline equals the start).
//!   A timer is re-placed at most once per level it descends, in practice 1-3
//!   times (its first level is ⌊log64(deadline - now)⌋ or so).
//! * **Exact next deadline.** Lists are appended at the tail and each list
//!   has a "sorted" bit that stays set while deadlines were appended in
//!   non-decreasing order (the normal case for one timeout class, and
//!   cascading preserves order). The earliest deadline is then: the expired
//!   list's minimum if it is not empty; else the start of the first level-0
//!   slot (every timer of a level-0 slot has exactly that deadline); else the
//!   head of the earliest higher-level slot if it is sorted; else a scan of
//!   that one slot. The result is cached and the cache survives inserts (it is
//!   lowered), cascades, and removal of any timer other than the current
//!   minimum.
//!
//! # Memory
//!
//! One slab entry per timer: 24 bytes of bookkeeping (deadline 8, two links
//! 4 + 4, generation 4, list id 2, enum tag) laid out together with `T`:
//! `size_of::<Entry<T>>()` is **32 bytes for `T` of up to 8 bytes**
//! (`u64`, `u32`, `()`, `Box<_>`, ...) and 24 + `size_of::<T>()` rounded up to
//! 8 for larger `T`. Freed entries are reused; the slab `Vec` never shrinks and
//! may have up to 2× spare capacity while growing (use
//! [`TimerWheel::with_capacity`] to avoid that). Fixed overhead is 5.5 KiB
//! (705 list head/tail pairs, boxed) plus ~250 bytes inline.
//!
//! # Complexity
//!
//! | operation | cost |
//! | --- | --- |
//! | [`insert`](TimerWheel::insert) | O(1) (amortised `Vec` growth) |
//! | [`cancel`](TimerWheel::cancel), [`reschedule`](TimerWheel::reschedule) | O(1) |
//! | [`deadline`](TimerWheel::deadline), [`get`](TimerWheel::get), [`len`](TimerWheel::len) | O(1) |
//! | [`poll`](TimerWheel::poll) | O(1) per returned timer plus O(1) per cascade step; each timer is re-placed at most `LEVELS - 1` (in practice 1-3) times in its life; a poll with nothing due is O(1) whatever the time jump |
//! | [`next_deadline`](TimerWheel::next_deadline) | O(1) when cached (see above) or when the earliest slot is in level 0 or sorted; otherwise O(k) for the k timers sharing the earliest slot (a slot of level `l` spans 64^l ms: 64 ms, 4.1 s, 4.4 min, ...), or O(e) over e expired-but-unpolled timers |
//!
//! The uncached O(k) case needs all of: the earliest timer at least 64 ms
//! away in a coarser slot, that slot filled out of deadline order, and that
//! minimum just cancelled. An engine that cancels far-future timers in
//! deadline order while mixing timeout lengths pays a scan of the earliest
//! slot per such cancel.
//!
//! # Time going backwards
//!
//! A `now` smaller than a previous one is treated as no advance: nothing is
//! un-fired and the wheel's clock does not move back. Timers already due at
//! the wheel's own clock ([`TimerWheel::elapsed`]) still fire.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

/// Deadline bits resolved by one level.
const SLOT_BITS: u32 = 6;
/// Slots per level.
const SLOTS: usize = 1 << SLOT_BITS;
const SLOT_MASK: u64 = SLOTS as u64 - 1;
/// Number of wheel levels: `ceil(64 / 6)`, enough for every `u64` deadline.
pub const LEVELS: usize = 11;
/// List id of the expired list (after the `LEVELS * SLOTS` wheel slots).
const EXPIRED: usize = LEVELS * SLOTS;
const LISTS: usize = EXPIRED + 1;
/// Null link / "no entry".
const NIL: u32 = u32::MAX;
/// `min_cache` value meaning "unknown". A true minimum of `u64::MAX` is
/// therefore never cached, only recomputed.
const NO_MIN: u64 = u64::MAX;

/// Handle to a pending timer: slab index plus generation (8 bytes, `Copy`).
///
/// Once the timer has fired or been cancelled the key is stale: every method
/// taking it returns `None`/`false`, even after the slot is reused (unless the
/// same slot is reused 2^32 times while the key is kept).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TimerKey {
    index: u32,
    generation: u32,
}

/// Slab entry. An enum (rather than a struct with `Option<T>`) lets the tag
/// share padding with the small fields, so `Entry<u64>` is 32 bytes.
enum Entry<T> {
    Occupied {
        deadline: u64,
        prev: u32,
        next: u32,
        generation: u32,
        /// Which list (wheel slot or `EXPIRED`) the entry is linked into.
        list: u16,
        value: T,
    },
    Vacant {
        generation: u32,
        next_free: u32,
    },
}

#[derive(Clone, Copy)]
struct List {
    head: u32,
    tail: u32,
}

const EMPTY_LIST: List = List {
    head: NIL,
    tail: NIL,
};

/// Hierarchical timing wheel holding values of type `T`. See the module docs.
pub struct TimerWheel<T> {
    entries: Vec<Entry<T>>,
    /// Head of the free list of `Vacant` entries.
    free_head: u32,
    /// One list per wheel slot (`level * SLOTS + slot`) plus the expired list.
    lists: Box<[List; LISTS]>,
    /// Per level: bit `s` set iff slot `s` is non-empty.
    occupied: [u64; LEVELS],
    /// Bit `l` set iff `occupied[l] != 0`.
    levels: u16,
    /// Per list (same indexing as the words of `occupied`, the expired list
    /// being bit 0 of the last word): deadlines appended in order since the
    /// list was last empty.
    sorted: [u64; LEVELS + 1],
    /// Time processed so far; every wheel (non-expired) entry is later.
    elapsed: u64,
    len: usize,
    /// Cached exact minimum deadline, or `NO_MIN`. Only meaningful while
    /// `len > 0`. Atomic (relaxed) so that `next_deadline(&self)` can fill
    /// it while the wheel stays `Sync`; concurrent `&self` readers can only
    /// ever store the same value.
    min_cache: AtomicU64,
}

/// Level of a deadline strictly after `elapsed`: highest differing bit / 6.
#[inline]
fn level_for(elapsed: u64, deadline: u64) -> usize {
    let masked = (elapsed ^ deadline) | SLOT_MASK;
    ((63 - masked.leading_zeros()) / SLOT_BITS) as usize
}

/// First millisecond covered by `slot` of `level` in `elapsed`'s rotation.
#[inline]
fn slot_start(elapsed: u64, level: usize, slot: usize) -> u64 {
    let shift = level as u32 * SLOT_BITS;
    let span = shift + SLOT_BITS;
    let upper = if span >= 64 {
        0
    } else {
        elapsed & !((1u64 << span) - 1)
    };
    upper | ((slot as u64) << shift)
}

impl<T> Default for TimerWheel<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> fmt::Debug for TimerWheel<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TimerWheel")
            .field("len", &self.len)
            .field("elapsed", &self.elapsed)
            .field("next_deadline", &self.next_deadline())
            .finish()
    }
}

impl<T> TimerWheel<T> {
    /// An empty wheel whose clock starts at 0.
    pub fn new() -> Self {
        Self::with_capacity(0)
    }

    /// An empty wheel with room for `capacity` timers before the slab grows.
    pub fn with_capacity(capacity: usize) -> Self {
        TimerWheel {
            entries: Vec::with_capacity(capacity),
            free_head: NIL,
            lists: Box::new([EMPTY_LIST; LISTS]),
            occupied: [0; LEVELS],
            levels: 0,
            sorted: [0; LEVELS + 1],
            elapsed: 0,
            len: 0,
            min_cache: AtomicU64::new(NO_MIN),
        }
    }

    /// Number of pending timers (including due ones not yet polled).
    pub fn len(&self) -> usize {
        self.len
    }

    /// `true` if no timer is pending.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The wheel's own clock: the time it has processed up to. Never
    /// decreases and never exceeds the largest `now` passed to a poll.
    pub fn elapsed(&self) -> u64 {
        self.elapsed
    }

    /// Adds a timer firing at `deadline` (ms). A deadline not after the
    /// wheel's clock fires on the next poll. O(1).
    ///
    /// # Panics
    ///
    /// Only if `u32::MAX - 1` timers are already pending (about 128 GiB).
    pub fn insert(&mut self, deadline: u64, value: T) -> TimerKey {
        let reuse = match self.entries.get(self.free_head as usize) {
            Some(&Entry::Vacant {
                generation,
                next_free,
            }) => Some((generation, next_free)),
            _ => None,
        };
        let (index, generation) = match reuse {
            Some((generation, next_free)) => {
                let index = self.free_head;
                self.free_head = next_free;
                self.entries[index as usize] = Entry::Occupied {
                    deadline,
                    prev: NIL,
                    next: NIL,
                    generation,
                    list: 0,
                    value,
                };
                (index, generation)
            }
            None => {
                let index = u32::try_from(self.entries.len())
                    .ok()
                    .filter(|&i| i != NIL)
                    .expect("TimerWheel: more than u32::MAX - 1 pending timers");
                self.entries.push(Entry::Occupied {
                    deadline,
                    prev: NIL,
                    next: NIL,
                    generation: 0,
                    list: 0,
                    value,
                });
                (index, 0)
            }
        };
        let list = self.list_for(deadline);
        self.link(index, list);
        self.len += 1;
        self.note_inserted(deadline);
        TimerKey { index, generation }
    }

    /// Removes a pending timer and returns its value; `None` for a stale key.
    /// O(1).
    pub fn cancel(&mut self, key: TimerKey) -> Option<T> {
        let index = self.live(key)?;
        self.remove(index).map(|(_, value)| value)
    }

    /// Moves a pending timer to `deadline`, keeping its key and value.
    /// Returns `false` (and does nothing) for a stale key. O(1).
    pub fn reschedule(&mut self, key: TimerKey, deadline: u64) -> bool {
        let Some(index) = self.live(key) else {
            return false;
        };
        self.unlink(index);
        if let Some(Entry::Occupied { deadline: d, .. }) = self.entries.get_mut(index as usize) {
            let old = std::mem::replace(d, deadline);
            self.note_removed(old);
        }
        let list = self.list_for(deadline);
        self.link(index, list);
        self.note_inserted(deadline);
        true
    }

    /// Deadline of a pending timer; `None` for a stale key. O(1).
    pub fn deadline(&self, key: TimerKey) -> Option<u64> {
        match self.entries.get(key.index as usize) {
            Some(&Entry::Occupied {
                deadline,
                generation,
                ..
            }) if generation == key.generation => Some(deadline),
            _ => None,
        }
    }

    /// Value of a pending timer; `None` for a stale key. O(1).
    pub fn get(&self, key: TimerKey) -> Option<&T> {
        match self.entries.get(key.index as usize) {
            Some(Entry::Occupied {
                generation, value, ..
            }) if *generation == key.generation => Some(value),
            _ => None,
        }
    }

    /// Mutable value of a pending timer; `None` for a stale key. O(1).
    pub fn get_mut(&mut self, key: TimerKey) -> Option<&mut T> {
        match self.entries.get_mut(key.index as usize) {
            Some(Entry::Occupied {
                generation, value, ..
            }) if *generation == key.generation => Some(value),
            _ => None,
        }
    }

    /// `true` if `key` names a pending timer.
    pub fn contains(&self, key: TimerKey) -> bool {
        self.live(key).is_some()
    }

    /// Exact earliest deadline among pending timers (due-but-unpolled ones
    /// included), or `None` if there are none.
    ///
    /// Cost: O(1) in the common case (cached, or earliest timer in level 0 or
    /// in a sorted slot); worst case one scan of the timers sharing the
    /// earliest slot. See the module docs.
    pub fn next_deadline(&self) -> Option<u64> {
        if self.len == 0 {
            return None;
        }
        let cached = self.min_cache.load(Ordering::Relaxed);
        if cached != NO_MIN {
            return Some(cached);
        }
        let min = self.compute_min()?;
        self.min_cache.store(min, Ordering::Relaxed);
        Some(min)
    }

    /// Removes and returns one timer whose deadline is `<= now`, or `None` if
    /// there is none. Repeated calls with the same `now` return every due
    /// timer exactly once (not necessarily earliest first) and never one with
    /// a later deadline. Cascading happens here, lazily and only as far as
    /// needed; empty slots are skipped with the bitmaps, so any time jump is
    /// cheap. A `now` earlier than a previous one is treated as no advance.
    pub fn poll(&mut self, now: u64) -> Option<(TimerKey, T)> {
        loop {
            let head = self.lists[EXPIRED].head;
            if head != NIL {
                let (generation, value) = self.remove(head)?;
                let key = TimerKey {
                    index: head,
                    generation,
                };
                return Some((key, value));
            }
            if !self.cascade_next(now) {
                return None;
            }
        }
    }

    /// Calls `fire` for every timer due at `now` (as repeated [`poll`]s
    /// would) and returns how many fired. Afterwards the wheel's clock is
    /// `now` (or later, for a backwards `now`).
    ///
    /// [`poll`]: TimerWheel::poll
    pub fn drain_expired<F: FnMut(TimerKey, T)>(&mut self, now: u64, mut fire: F) -> usize {
        let mut fired = 0;
        while let Some((key, value)) = self.poll(now) {
            fire(key, value);
            fired += 1;
        }
        fired
    }

    // ---- internals -------------------------------------------------------

    /// Slab index of `key` if it names a pending timer.
    #[inline]
    fn live(&self, key: TimerKey) -> Option<u32> {
        match self.entries.get(key.index as usize) {
            Some(&Entry::Occupied { generation, .. }) if generation == key.generation => {
                Some(key.index)
            }
            _ => None,
        }
    }

    /// List a deadline belongs to, relative to the current `elapsed`.
    #[inline]
    fn list_for(&self, deadline: u64) -> usize {
        if deadline <= self.elapsed {
            return EXPIRED;
        }
        let level = level_for(self.elapsed, deadline);
        let slot = (deadline >> (level as u32 * SLOT_BITS)) & SLOT_MASK;
        level * SLOTS + slot as usize
    }

    /// Appends occupied entry `index` to `list`.
    fn link(&mut self, index: u32, list: usize) {
        let tail = self.lists[list].tail;
        let deadline = match self.entries.get_mut(index as usize) {
            Some(Entry::Occupied {
                deadline,
                prev,
                next,
                list: l,
                ..
            }) => {
                *prev = tail;
                *next = NIL;
                *l = list as u16;
                *deadline
            }
            _ => return,
        };
        let word = list / SLOTS;
        let bit = 1u64 << (list % SLOTS);
        if tail == NIL {
            self.lists[list].head = index;
            self.sorted[word] |= bit;
            if list != EXPIRED {
                self.occupied[word] |= bit;
                self.levels |= 1 << word;
            }
        } else if let Some(Entry::Occupied {
            next,
            deadline: tail_deadline,
            ..
        }) = self.entries.get_mut(tail as usize)
        {
            *next = index;
            if deadline < *tail_deadline {
                self.sorted[word] &= !bit;
            }
        }
        self.lists[list].tail = index;
    }

    /// Unlinks occupied entry `index` from its list (links left dangling).
    fn unlink(&mut self, index: u32) {
        let (prev, next, list) = match self.entries.get(index as usize) {
            Some(&Entry::Occupied {
                prev, next, list, ..
            }) => (prev, next, list as usize),
            _ => return,
        };
        if prev == NIL {
            self.lists[list].head = next;
        } else if let Some(Entry::Occupied { next: n, .. }) = self.entries.get_mut(prev as usize) {
            *n = next;
        }
        if next == NIL {
            self.lists[list].tail = prev;
        } else if let Some(Entry::Occupied { prev: p, .. }) = self.entries.get_mut(next as usize) {
            *p = prev;
        }
        if prev == NIL && next == NIL && list != EXPIRED {
            self.clear_occupied(list);
        }
    }

    #[inline]
    fn clear_occupied(&mut self, list: usize) {
        let level = list / SLOTS;
        self.occupied[level] &= !(1u64 << (list % SLOTS));
        if self.occupied[level] == 0 {
            self.levels &= !(1 << level);
        }
    }

    /// Unlinks and frees entry `index`, returning its generation and value.
    fn remove(&mut self, index: u32) -> Option<(u32, T)> {
        let generation = match self.entries.get(index as usize) {
            Some(&Entry::Occupied { generation, .. }) => generation,
            _ => return None,
        };
        self.unlink(index);
        let vacant = Entry::Vacant {
            generation: generation.wrapping_add(1),
            next_free: self.free_head,
        };
        let old = std::mem::replace(&mut self.entries[index as usize], vacant);
        self.free_head = index;
        self.len -= 1;
        match old {
            Entry::Occupied {
                deadline, value, ..
            } => {
                self.note_removed(deadline);
                Some((generation, value))
            }
            Entry::Vacant { .. } => None,
        }
    }

    /// Cache upkeep after a timer with `deadline` was added (len updated).
    #[inline]
    fn note_inserted(&mut self, deadline: u64) {
        let only = self.len == 1;
        let cache = self.min_cache.get_mut();
        if only || (*cache != NO_MIN && deadline < *cache) {
            *cache = deadline;
        }
    }

    /// Cache upkeep after a timer with `deadline` was removed.
    #[inline]
    fn note_removed(&mut self, deadline: u64) {
        let cache = self.min_cache.get_mut();
        if *cache == deadline {
            *cache = NO_MIN;
        }
    }

    /// Earliest non-empty wheel slot: `(level, slot, start time)`.
    #[inline]
    fn next_slot(&self) -> Option<(usize, usize, u64)> {
        if self.levels == 0 {
            return None;
        }
        let level = self.levels.trailing_zeros() as usize;
        let slot = self.occupied[level].trailing_zeros() as usize;
        Some((level, slot, slot_start(self.elapsed, level, slot)))
    }

    /// Processes the earliest slot if it starts at or before `now`: moves the
    /// clock to its start and re-places its timers. Returns `false`, after
    /// moving the clock to `now` (if later), when no slot is due.
    fn cascade_next(&mut self, now: u64) -> bool {
        let Some((level, slot, start)) = self.next_slot().filter(|&(_, _, s)| s <= now) else {
            if now > self.elapsed {
                self.elapsed = now;
            }
            return false;
        };
        debug_assert!(start > self.elapsed, "slot start not after elapsed");
        self.elapsed = start;
        let list = level * SLOTS + slot;
        let mut index = self.lists[list].head;
        self.lists[list] = EMPTY_LIST;
        self.clear_occupied(list);
        // Relative to the new clock every timer of this slot belongs to a
        // lower level or to the expired list, never back to this slot.
        while let Some(&Entry::Occupied { next, deadline, .. }) = self.entries.get(index as usize) {
            let target = self.list_for(deadline);
            self.link(index, target);
            index = next;
        }
        true
    }

    /// Exact minimum deadline, without the cache.
    fn compute_min(&self) -> Option<u64> {
        if self.lists[EXPIRED].head != NIL {
            return self.list_min(EXPIRED);
        }
        let (level, slot, start) = self.next_slot()?;
        if level == 0 {
            // All timers of a level-0 slot have exactly this deadline.
            return Some(start);
        }
        self.list_min(level * SLOTS + slot)
    }

    /// Minimum deadline in `list`: its head if sorted, else a scan.
    fn list_min(&self, list: usize) -> Option<u64> {
        let sorted = self.sorted[list / SLOTS] & (1u64 << (list % SLOTS)) != 0;
        let mut index = self.lists[list].head;
        let mut min: Option<u64> = None;
        while let Some(&Entry::Occupied { deadline, next, .. }) = self.entries.get(index as usize) {
            min = Some(min.map_or(deadline, |m| m.min(deadline)));
            if sorted {
                break;
            }
            index = next;
        }
        min
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn drain(w: &mut TimerWheel<u64>, now: u64) -> Vec<u64> {
        let mut out = Vec::new();
        w.drain_expired(now, |_, v| out.push(v));
        out.sort_unstable();
        out
    }

    #[test]
    fn entry_size() {
        use std::mem::size_of;
        assert_eq!(size_of::<Entry<u64>>(), 32);
        assert_eq!(size_of::<Entry<u32>>(), 32);
        assert_eq!(size_of::<Entry<()>>(), 24);
        assert_eq!(size_of::<Entry<Box<u8>>>(), 32);
        assert_eq!(size_of::<Entry<[u64; 2]>>(), 40);
        assert_eq!(size_of::<TimerKey>(), 8);
    }

    #[test]
    fn wheel_is_send_sync() {
        fn assert_send_sync<X: Send + Sync>() {}
        assert_send_sync::<TimerWheel<u64>>();
    }

    #[test]
    fn insert_poll_basic() {
        let mut w = TimerWheel::new();
        assert!(w.is_empty());
        assert_eq!(w.next_deadline(), None);
        assert_eq!(w.poll(1000), None);
        let k = w.insert(1010, 7u64);
        assert_eq!(w.len(), 1);
        assert_eq!(w.deadline(k), Some(1010));
        assert_eq!(w.get(k), Some(&7));
        assert_eq!(w.next_deadline(), Some(1010));
        assert_eq!(w.poll(1009), None);
        assert_eq!(w.elapsed(), 1009);
        assert_eq!(w.poll(1010), Some((k, 7)));
        assert_eq!(w.poll(1010), None);
        assert!(w.is_empty());
        assert_eq!(w.next_deadline(), None);
        // Fired key is stale.
        assert_eq!(w.cancel(k), None);
        assert_eq!(w.deadline(k), None);
        assert!(!w.reschedule(k, 5));
    }

    #[test]
    fn fires_exactly_at_deadline_across_level_boundaries() {
        let deadlines: Vec<u64> = vec![
            1, 2, 62, 63, 64, 65, 127, 128, 4095, 4096, 4097, 8191, 8192, 12_345, 262_143, 262_144,
            262_145, 300_000,
        ];
        let mut w = TimerWheel::new();
        for &d in &deadlines {
            w.insert(d, d);
        }
        let mut fired = Vec::new();
        for now in 0..=300_000u64 {
            assert_eq!(
                w.next_deadline(),
                deadlines.iter().copied().filter(|&d| d >= now).min()
            );
            while let Some((_, d)) = w.poll(now) {
                assert_eq!(d, now, "timer {d} fired at {now}");
                fired.push(d);
            }
        }
        assert_eq!(fired, deadlines);
        assert!(w.is_empty());
    }

    #[test]
    fn past_deadlines_fire_on_next_poll() {
        let mut w = TimerWheel::new();
        assert_eq!(w.poll(10_000), None);
        let a = w.insert(5, 1u64);
        let b = w.insert(10_000, 2);
        let c = w.insert(0, 3);
        assert_eq!(w.next_deadline(), Some(0));
        assert_eq!(drain(&mut w, 10_000), vec![1, 2, 3]);
        for k in [a, b, c] {
            assert_eq!(w.cancel(k), None);
        }
    }

    #[test]
    fn cancel_and_stale_keys() {
        let mut w = TimerWheel::new();
        let a = w.insert(100, 1u64);
        let b = w.insert(200, 2);
        assert_eq!(w.cancel(a), Some(1));
        assert_eq!(w.cancel(a), None);
        assert_eq!(w.len(), 1);
        // The freed slot is reused; the old key must not reach the new timer.
        let c = w.insert(300, 3);
        assert_eq!(c.index, a.index);
        assert_ne!(c, a);
        assert_eq!(w.cancel(a), None);
        assert_eq!(w.deadline(a), None);
        assert_eq!(w.get(a), None);
        assert!(!w.reschedule(a, 1));
        assert!(!w.contains(a));
        assert_eq!(w.deadline(c), Some(300));
        assert_eq!(w.next_deadline(), Some(200));
        assert_eq!(w.cancel(b), Some(2));
        assert_eq!(w.next_deadline(), Some(300));
        // Keys that never existed.
        let bogus = TimerKey {
            index: 12345,
            generation: 0,
        };
        assert_eq!(w.cancel(bogus), None);
        assert_eq!(w.deadline(bogus), None);
        assert_eq!(drain(&mut w, 1000), vec![3]);
        assert!(w.is_empty());
    }

    #[test]
    fn next_deadline_is_exact_in_higher_levels() {
        let mut w = TimerWheel::new();
        // All in one level-2 slot (4096..8191), inserted out of order.
        let k1 = w.insert(5000, 1u64);
        let k2 = w.insert(4100, 2);
        let k3 = w.insert(7000, 3);
        let k4 = w.insert(4200, 4);
        assert_eq!(w.next_deadline(), Some(4100));
        assert_eq!(w.cancel(k2), Some(2));
        assert_eq!(w.next_deadline(), Some(4200));
        assert_eq!(w.cancel(k4), Some(4));
        assert_eq!(w.next_deadline(), Some(5000));
        // A lower insert lowers the cached value.
        let k5 = w.insert(4500, 5);
        assert_eq!(w.next_deadline(), Some(4500));
        assert!(w.reschedule(k5, 6000));
        assert_eq!(w.next_deadline(), Some(5000));
        assert_eq!(w.cancel(k1), Some(1));
        assert_eq!(w.next_deadline(), Some(6000));
        assert_eq!(w.cancel(k5), Some(5));
        assert_eq!(w.next_deadline(), Some(7000));
        assert_eq!(w.cancel(k3), Some(3));
        assert_eq!(w.next_deadline(), None);
    }

    #[test]
    fn reschedule_keeps_key() {
        let mut w = TimerWheel::new();
        let k = w.insert(1000, 1u64);
        let other = w.insert(1500, 2);
        assert!(w.reschedule(k, 2000));
        assert_eq!(w.deadline(k), Some(2000));
        assert_eq!(w.next_deadline(), Some(1500));
        assert_eq!(drain(&mut w, 1999), vec![2]);
        assert!(!w.reschedule(other, 10));
        assert!(w.reschedule(k, 10)); // into the past: due on next poll
        assert_eq!(w.next_deadline(), Some(10));
        assert_eq!(w.poll(1999), Some((k, 1)));
        assert!(w.is_empty());
        // Reschedule out of the expired list into the future.
        let k = w.insert(0, 3);
        assert!(w.reschedule(k, 5000));
        assert_eq!(w.poll(4999), None);
        assert_eq!(w.poll(5000), Some((k, 3)));
    }

    #[test]
    fn far_future_deadlines() {
        let mut w = TimerWheel::new();
        let max = w.insert(u64::MAX, 1u64);
        let max1 = w.insert(u64::MAX - 1, 2);
        let half = w.insert(1 << 63, 3);
        let big = w.insert(1 << 40, 4);
        assert_eq!(w.next_deadline(), Some(1 << 40));
        assert_eq!(drain(&mut w, (1 << 40) - 1), Vec::<u64>::new());
        assert_eq!(drain(&mut w, 1 << 40), vec![4]);
        assert_eq!(w.next_deadline(), Some(1 << 63));
        assert_eq!(drain(&mut w, (1 << 63) - 1), Vec::<u64>::new());
        assert_eq!(drain(&mut w, 1 << 63), vec![3]);
        assert_eq!(w.next_deadline(), Some(u64::MAX - 1));
        assert_eq!(drain(&mut w, u64::MAX - 2), Vec::<u64>::new());
        assert_eq!(w.poll(u64::MAX - 1), Some((max1, 2)));
        assert_eq!(w.next_deadline(), Some(u64::MAX));
        assert_eq!(w.poll(u64::MAX - 1), None);
        assert_eq!(w.poll(u64::MAX), Some((max, 1)));
        assert_eq!(w.elapsed(), u64::MAX);
        assert!(w.is_empty());
        assert_eq!(w.cancel(half), None);
        assert_eq!(w.cancel(big), None);
        // At the end of time everything is due at once.
        let k = w.insert(u64::MAX, 9);
        let j = w.insert(3, 8);
        assert_eq!(w.next_deadline(), Some(3));
        assert!(w.poll(0).is_some());
        assert!(w.poll(0).is_some());
        assert_eq!(w.poll(u64::MAX), None);
        assert!(!w.contains(k) && !w.contains(j));
    }

    #[test]
    fn large_time_jumps_skip_empty_slots() {
        let mut w = TimerWheel::new();
        let hour = 3_600_000u64;
        for i in 0..1000u64 {
            w.insert(i * 37 % (10 * hour), i);
        }
        let far = w.insert(1 << 60, 5000);
        // One jump of ten hours: only the occupied slots are visited.
        let fired = drain(&mut w, 10 * hour);
        assert_eq!(fired, (0..1000).collect::<Vec<_>>());
        assert_eq!(w.elapsed(), 10 * hour);
        assert_eq!(w.next_deadline(), Some(1 << 60));
        // Jumps to the end of time, several times over, with nothing due in
        // between: each is O(levels), not O(elapsed).
        for step in 1..=50u64 {
            assert_eq!(w.poll((1 << 60) - 1000 + step), None);
        }
        assert_eq!(w.poll(u64::MAX), Some((far, 5000)));
    }

    #[test]
    fn backwards_now_is_no_advance() {
        let mut w = TimerWheel::new();
        assert_eq!(w.poll(1000), None);
        let k = w.insert(1500, 1u64);
        assert_eq!(w.poll(500), None);
        assert_eq!(w.elapsed(), 1000);
        assert_eq!(w.poll(1499), None);
        assert_eq!(w.elapsed(), 1499);
        assert_eq!(w.poll(0), None);
        assert_eq!(w.elapsed(), 1499);
        assert_eq!(w.poll(1500), Some((k, 1)));
        // A timer already due at the wheel's clock fires even for a smaller now.
        let j = w.insert(1200, 2);
        assert_eq!(w.poll(3), Some((j, 2)));
    }

    #[test]
    fn lazy_poll_then_insert_in_between() {
        let mut w = TimerWheel::new();
        for d in [10u64, 5000, 300_000] {
            w.insert(d, d);
        }
        // Returns after the first due timer, leaving the clock behind `now`.
        assert_eq!(w.poll(400_000).map(|(_, v)| v), Some(10));
        assert!(w.elapsed() <= 400_000);
        // Deadlines between the wheel's clock and `now` still fire.
        w.insert(200_000, 200_000);
        w.insert(w.elapsed() + 1, 1);
        let mut rest = drain(&mut w, 400_000);
        rest.retain(|&v| v != 1);
        assert_eq!(rest, vec![5000, 200_000, 300_000]);
        assert!(w.is_empty());
    }

    #[test]
    fn same_deadline_many_timers() {
        let mut w = TimerWheel::new();
        let keys: Vec<_> = (0..100u64).map(|i| w.insert(777_777, i)).collect();
        for k in keys.iter().step_by(2) {
            assert!(w.cancel(*k).is_some());
        }
        assert_eq!(w.next_deadline(), Some(777_777));
        assert_eq!(drain(&mut w, 777_776), Vec::<u64>::new());
        let fired = drain(&mut w, 777_777);
        assert_eq!(fired, (0..100).filter(|i| i % 2 == 1).collect::<Vec<_>>());
    }

    #[test]
    fn get_mut_and_debug() {
        let mut w = TimerWheel::new();
        let k = w.insert(42, String::from("a"));
        w.get_mut(k).unwrap().push('b');
        assert_eq!(w.get(k).map(String::as_str), Some("ab"));
        let s = format!("{w:?}");
        assert!(s.contains("len: 1") && s.contains("Some(42)"), "{s}");
    }

    /// Small deterministic PRNG (xorshift64*), so tests need no extra crate.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
    }

    /// 1,000,000 timers over ten minutes: a third cancelled, the rest fired
    /// by advancing in ~1 s steps, each exactly at its first poll with
    /// `now >= deadline`, and `next_deadline` checked against a sorted copy.
    /// About 0.4 s in release and ~1.1 s in debug builds, so not ignored.
    #[test]
    fn million_timers() {
        const N: usize = 1_000_000;
        const SPAN: u64 = 600_000;
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let mut w = TimerWheel::with_capacity(N);
        let start = 1_000_000u64;
        assert_eq!(w.poll(start), None);
        let mut keys = Vec::with_capacity(N);
        for i in 0..N as u64 {
            let d = start + 1 + rng.next() % SPAN;
            keys.push((w.insert(d, i), d));
        }
        assert_eq!(w.len(), N);
        let mut live = Vec::with_capacity(N);
        for (i, &(k, d)) in keys.iter().enumerate() {
            if i % 3 == 0 {
                assert_eq!(w.cancel(k), Some(i as u64));
            } else {
                live.push(d);
            }
        }
        live.sort_unstable();
        assert_eq!(w.len(), live.len());
        let mut fired = 0usize;
        let mut prev = start;
        let mut now = start;
        while !w.is_empty() {
            assert_eq!(w.next_deadline(), Some(live[fired]));
            now += 997;
            w.drain_expired(now, |k, v| {
                let d = keys[v as usize].1;
                assert_eq!(k, keys[v as usize].0);
                assert!(d > prev && d <= now, "deadline {d} fired at {now}");
                fired += 1;
            });
            prev = now;
        }
        assert_eq!(fired, live.len());
        assert!(now <= start + SPAN + 997);
        // Every key is now stale.
        assert!(
            keys.iter()
                .step_by(1001)
                .all(|&(k, _)| w.cancel(k).is_none())
        );
    }

    // ---- model check -----------------------------------------------------

    #[derive(Clone, Debug)]
    enum When {
        After(u64),
        Before(u64),
        At(u64),
    }

    impl When {
        fn resolve(&self, now: u64) -> u64 {
            match *self {
                When::After(x) => now.saturating_add(x),
                When::Before(x) => now.saturating_sub(x),
                When::At(x) => x,
            }
        }
    }

    #[derive(Clone, Debug)]
    enum Op {
        Insert(When),
        Cancel(usize),
        Reschedule(usize, When),
        Advance(u64),
        PollOne,
        PollBackwards(u64),
    }

    fn when() -> impl Strategy<Value = When> {
        prop_oneof![
            4 => (0u64..200).prop_map(When::After),
            4 => (0u64..100_000).prop_map(When::After),
            2 => (0u64..(1 << 24)).prop_map(When::After),
            1 => (0u64..(1 << 42)).prop_map(When::After),
            1 => (0u64..1_000).prop_map(When::Before),
            1 => any::<u64>().prop_map(When::At),
            1 => (0u64..4).prop_map(|x| When::At(u64::MAX - x)),
        ]
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            6 => when().prop_map(Op::Insert),
            2 => any::<usize>().prop_map(Op::Cancel),
            2 => (any::<usize>(), when()).prop_map(|(i, w)| Op::Reschedule(i, w)),
            4 => (0u64..100_000).prop_map(Op::Advance),
            1 => (0u64..(1 << 36)).prop_map(Op::Advance),
            1 => Just(Op::PollOne),
            1 => (0u64..1_000).prop_map(Op::PollBackwards),
        ]
    }

    fn start_time() -> impl Strategy<Value = u64> {
        prop_oneof![
            Just(0u64),
            0u64..10_000_000,
            any::<u64>(),
            (u64::MAX - (1 << 22))..=u64::MAX,
        ]
    }

    /// The model: live timer id -> (deadline, key).
    type Model = BTreeMap<u64, (u64, TimerKey)>;

    fn check_state(
        w: &TimerWheel<u64>,
        model: &Model,
        issued: &[(TimerKey, u64)],
    ) -> Result<(), TestCaseError> {
        prop_assert_eq!(w.len(), model.len());
        prop_assert_eq!(w.is_empty(), model.is_empty());
        prop_assert_eq!(w.next_deadline(), model.values().map(|&(d, _)| d).min());
        for &(key, id) in issued {
            let expect = model.get(&id).map(|&(d, _)| d);
            prop_assert_eq!(w.deadline(key), expect);
            prop_assert_eq!(w.get(key).copied(), expect.map(|_| id));
        }
        Ok(())
    }

    /// What `poll` returned when the wheel's clock is `clock`: the earliest
    /// timer due by then, taken out of the model, or none due.
    fn check_poll(
        polled: Option<(TimerKey, u64)>,
        model: &mut Model,
        clock: u64,
    ) -> Result<(), TestCaseError> {
        match polled {
            Some((k, id)) => {
                let entry = model.remove(&id);
                prop_assert_eq!(entry.map(|(_, k)| k), Some(k));
                prop_assert!(entry.is_some_and(|(d, _)| d <= clock));
            }
            None => {
                prop_assert!(model.values().all(|&(d, _)| d > clock));
            }
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 512,
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        #[test]
        fn model_check(start in start_time(), ops in proptest::collection::vec(op(), 1..300)) {
            let mut w: TimerWheel<u64> = TimerWheel::new();
            let mut model = Model::new();
            let mut issued: Vec<(TimerKey, u64)> = Vec::new();
            let mut now = start;
            prop_assert_eq!(w.poll(now), None);
            for (next_id, op) in (0u64..).zip(ops) {
                match op {
                    Op::Insert(when) => {
                        let d = when.resolve(now);
                        let key = w.insert(d, next_id);
                        model.insert(next_id, (d, key));
                        issued.push((key, next_id));
                    }
                    Op::Cancel(i) => {
                        if !issued.is_empty() {
                            let (key, id) = issued[i % issued.len()];
                            let expect = model.remove(&id).map(|_| id);
                            prop_assert_eq!(w.cancel(key), expect);
                        }
                    }
                    Op::Reschedule(i, when) => {
                        if !issued.is_empty() {
                            let (key, id) = issued[i % issued.len()];
                            let d = when.resolve(now);
                            let live = model.contains_key(&id);
                            prop_assert_eq!(w.reschedule(key, d), live);
                            if let Some(entry) = model.get_mut(&id) {
                                entry.0 = d;
                            }
                        }
                    }
                    Op::Advance(step) => {
                        now = now.saturating_add(step);
                        let mut fired = Vec::new();
                        w.drain_expired(now, |k, id| fired.push((id, k)));
                        fired.sort_unstable_by_key(|&(id, _)| id);
                        let expected: Vec<(u64, TimerKey)> = model
                            .iter()
                            .filter(|&(_, &(d, _))| d <= now)
                            .map(|(&id, &(_, k))| (id, k))
                            .collect();
                        prop_assert_eq!(&fired, &expected);
                        for (id, _) in expected {
                            model.remove(&id);
                        }
                        prop_assert_eq!(w.elapsed(), now);
                    }
                    Op::PollOne => check_poll(w.poll(now), &mut model, now)?,
                    Op::PollBackwards(back) => {
                        // A poll into the past polls at the wheel's clock.
                        let clock = w.elapsed();
                        check_poll(w.poll(now.saturating_sub(back)), &mut model, clock)?;
                        prop_assert_eq!(w.elapsed(), clock);
                    }
                }
                check_state(&w, &model, &issued)?;
            }
            // Finally everything fires at the end of time.
            let mut fired = Vec::new();
            w.drain_expired(u64::MAX, |_, id| fired.push(id));
            fired.sort_unstable();
            prop_assert_eq!(fired, model.keys().copied().collect::<Vec<_>>());
            prop_assert!(w.is_empty());
        }
    }
}
