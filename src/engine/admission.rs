//! Half-open admission: which passive connections may hold resources
//! between REQ and RTU, and which one gives way when the table is full.
//!
//! The policy (docs/RELIABILITY.md, "Half-open admission"):
//!
//! * A passive connection is *half-open* from its REQ until it leaves the
//!   states REQ_RCVD, MRA_REQ_SENT, REP_SENT and MRA_REP_RCVD. At most
//!   `max_half_open` exist per shard, at most `max_half_open_per_source`
//!   from one source (the REQ's GRH source GID, or its SLID without GRH).
//! * Once the REP is sent the connection waits only for the requester, and
//!   the passive side chose how long: at most `rep_timeout_cap_ms` per try
//!   and `rep_max_retries` retries, whatever the REQ asked for. An MRA
//!   for the REP buys what it asks, up to `mra_rep_wait_cap_ms`: such an
//!   entry is still REP-waiting and evicted like the others.
//! * A new REQ that finds its source at the quota evicts that source's
//!   oldest REP-waiting connection; one that finds the shard table full
//!   evicts the oldest REP-waiting connection of any source. Eviction is
//!   an early REP timeout (`IB_CM_REP_ERROR` to the consumer, no MAD).
//!   Connections the consumer has not answered yet (REQ_RCVD,
//!   MRA_REQ_SENT) are never evicted: the consumer owns them. Only when
//!   nothing can be evicted is the REQ rejected with NO_RESOURCES.
//!
//! Why oldest first: a real requester answers a REP within one round trip,
//! so its entry is among the youngest; a flood's entries are never answered
//! and age. A flood therefore only churns its own entries, while a real
//! connection needs to survive only one round trip after its REP.
//!
//! The queues hold `(id, seq)` pairs; an entry is live while the id exists
//! and still carries the same `seq` (an id leaving half-open clears it), so
//! removal is lazy and every operation is amortised O(1). Queues are
//! compacted when stale entries outnumber live ones.

use super::ids::PeerMap;
use crate::wire::Gid;
use std::collections::VecDeque;

/// One queued REP-waiting connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Entry {
    pub id: u32,
    pub seq: u64,
}

#[derive(Debug, Default)]
pub(super) struct Source {
    /// Half-open connections from this source (any half-open state).
    count: u32,
    /// Its REP-waiting connections, oldest first (may hold stale entries).
    queue: VecDeque<Entry>,
}

/// The half-open bookkeeping of one engine shard.
#[derive(Debug)]
pub(crate) struct Admission {
    /// Every REP-waiting connection, oldest first (may hold stale entries).
    global: VecDeque<Entry>,
    pub(super) sources: PeerMap<Gid, Source>,
    next_seq: u64,
}

impl Admission {
    pub fn new(seed: u64) -> Admission {
        Admission {
            global: VecDeque::new(),
            sources: PeerMap::with_hasher(super::ids::PeerState::new(seed)),
            next_seq: 1,
        }
    }

    /// Half-open connections from `src`.
    pub fn source_count(&self, src: &Gid) -> u32 {
        self.sources.get(src).map_or(0, |s| s.count)
    }

    /// Sources with at least one half-open connection (for leak checks).
    pub fn sources(&self) -> usize {
        self.sources.len()
    }

    /// Queue entries held, live and stale (for memory bounds in tests).
    pub fn queued(&self) -> usize {
        self.global.len() + self.sources.values().map(|s| s.queue.len()).sum::<usize>()
    }

    /// A connection from `src` became half-open.
    pub fn admit(&mut self, src: Gid) {
        self.sources.entry(src).or_default().count += 1;
    }

    /// A connection from `src` stopped being half-open.
    pub fn leave(&mut self, src: &Gid) {
        if let Some(s) = self.sources.get_mut(src) {
            s.count = s.count.saturating_sub(1);
            if s.count == 0 {
                self.sources.remove(src);
            }
        }
    }

    /// A half-open connection from `src` sent its REP and now waits for the
    /// requester: it becomes evictable. Returns the sequence number the id
    /// must keep while it stays queued.
    pub fn queue(&mut self, src: &Gid, id: u32) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        let e = Entry { id, seq };
        self.global.push_back(e);
        if let Some(s) = self.sources.get_mut(src) {
            s.queue.push_back(e);
        }
        seq
    }

    /// Pops the oldest live entry of `src` (or of every source with `None`).
    /// `live` says whether an entry still stands for a REP-waiting id.
    pub fn oldest(&mut self, src: Option<&Gid>, live: impl Fn(Entry) -> bool) -> Option<Entry> {
        let q = match src {
            Some(g) => &mut self.sources.get_mut(g)?.queue,
            None => &mut self.global,
        };
        while let Some(e) = q.pop_front() {
            if live(e) {
                return Some(e);
            }
        }
        None
    }

    /// Drops stale entries once they outnumber the live ones: `live_count`
    /// is the number of half-open connections of the shard.
    pub fn compact(&mut self, live_count: u32, live: impl Fn(Entry) -> bool) {
        let bound = 2 * live_count as usize + 1024;
        if self.global.len() > bound {
            self.global.retain(|&e| live(e));
        }
        for s in self.sources.values_mut() {
            if s.queue.len() > 2 * s.count as usize + 16 {
                s.queue.retain(|&e| live(e));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(i: u8) -> Gid {
        let mut b = [0u8; 16];
        b[15] = i;
        Gid(b)
    }

    #[test]
    fn oldest_skips_stale_entries_and_is_per_source() {
        let mut a = Admission::new(1);
        let (s1, s2) = (g(1), g(2));
        for (src, id) in [(s1, 10), (s2, 20), (s1, 11), (s2, 21)] {
            a.admit(src);
            a.queue(&src, id);
        }
        assert_eq!(a.source_count(&s1), 2);
        // id 10 went away: the oldest live entry of s1 is 11.
        let e = a.oldest(Some(&s1), |e| e.id != 10).unwrap();
        assert_eq!(e.id, 11);
        // Globally the oldest is 10, then 20.
        assert_eq!(a.oldest(None, |_| true).unwrap().id, 10);
        assert_eq!(a.oldest(None, |_| true).unwrap().id, 20);
        assert!(a.oldest(Some(&g(9)), |_| true).is_none());
    }

    #[test]
    fn counts_drop_sources_at_zero_and_compaction_bounds_queues() {
        let mut a = Admission::new(2);
        let s = g(7);
        for id in 0..5000u32 {
            a.admit(s);
            a.queue(&s, id);
            a.leave(&s);
        }
        assert_eq!(a.source_count(&s), 0);
        assert_eq!(a.sources(), 0);
        // Every entry is stale: compaction empties the global queue.
        a.compact(0, |_| false);
        assert_eq!(a.queued(), 0);
    }
}
