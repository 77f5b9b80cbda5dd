//! Timing-wheel costs with a realistic load of 1,000,000 pending timers
//! (criterion).
//!
//! * `insert_cancel`: one insert plus one cancel of that timer.
//! * `insert_fire`: steady state, ~1M timers pending; each iteration inserts
//!   one timer due in (0, 2000 s], advances the clock by 1 ms and fires what
//!   is due (one timer on average), cascades included.
//! * `next_deadline/cached`: the call the engine makes after every step.
//! * `next_deadline/recompute`: insert a new minimum, cancel it (which
//!   invalidates the cache), then `next_deadline` (bitmap lookup, level 0).
//! * `next_deadline/recompute_sorted_slot`: same, the earliest timers being
//!   in a 4 s level-2 slot filled in deadline order (one timeout class).
//! * `next_deadline/recompute_scan_1k`: worst case, the earliest slot holds
//!   1,000 timers inserted out of order, so a recompute scans them.

use criterion::{Criterion, criterion_group, criterion_main};
use ibcm::engine::timer::TimerWheel;
use std::hint::black_box;

const PENDING: u64 = 1_000_000;
const SPAN: u64 = 1_000_000;

/// xorshift64*: deterministic and dependency-free.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// A wheel at `now` holding `PENDING` timers uniformly in `(now, now + SPAN]`.
fn loaded(now: u64, rng: &mut Rng) -> TimerWheel<u64> {
    let mut w = TimerWheel::with_capacity(PENDING as usize + 1024);
    assert!(w.poll(now).is_none());
    for i in 0..PENDING {
        w.insert(now + 1 + rng.next() % SPAN, i);
    }
    w
}

fn bench_timer(c: &mut Criterion) {
    let mut g = c.benchmark_group("timer");
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let start = 1_000_000_000u64;

    {
        let mut w = loaded(start, &mut rng);
        g.bench_function("insert_cancel/1M_pending", |b| {
            b.iter(|| {
                let d = start + 1 + rng.next() % SPAN;
                let k = w.insert(black_box(d), 1);
                black_box(w.cancel(k))
            })
        });
    }

    {
        let mut w = loaded(start, &mut rng);
        let mut now = start;
        g.bench_function("insert_fire/1M_pending", |b| {
            b.iter(|| {
                w.insert(now + 1 + rng.next() % (2 * SPAN), now);
                now += 1;
                w.drain_expired(now, |k, v| {
                    black_box((k, v));
                })
            })
        });
    }

    {
        let mut w = loaded(start, &mut rng);
        g.bench_function("next_deadline/cached/1M_pending", |b| {
            b.iter(|| black_box(&w).next_deadline())
        });
        g.bench_function("next_deadline/recompute/1M_pending", |b| {
            b.iter(|| {
                let k = w.insert(start + 1, 0);
                w.cancel(k);
                w.next_deadline()
            })
        });
    }

    {
        // Earliest timers 5-10 s away, in deadline order, as one timeout
        // class produces; the level-2 slot stays sorted.
        let mut w = TimerWheel::with_capacity(PENDING as usize + 1024);
        assert!(w.poll(start).is_none());
        for i in 0..PENDING {
            w.insert(start + 5_000 + i * 5_000 / PENDING, i);
        }
        g.bench_function("next_deadline/recompute_sorted_slot/1M_pending", |b| {
            b.iter(|| {
                // A level-0 probe, so the level-2 slot stays sorted.
                let k = w.insert(start + 1, 0);
                w.cancel(k);
                w.next_deadline()
            })
        });
    }

    {
        // 1M pending; the earliest slot (level 2, 4.1 s wide) holds 1,000
        // timers inserted in random order.
        let mut w = TimerWheel::with_capacity(PENDING as usize + 1024);
        assert!(w.poll(start).is_none());
        let slot = (start / 4096 + 2) * 4096;
        for i in 0..1_000 {
            w.insert(slot + 1 + rng.next() % 4000, i);
        }
        for i in 1_000..PENDING {
            w.insert(slot + 4096 + rng.next() % SPAN, i);
        }
        g.bench_function("next_deadline/recompute_scan_1k/1M_pending", |b| {
            b.iter(|| {
                let k = w.insert(slot, 0);
                w.cancel(k);
                w.next_deadline()
            })
        });
    }

    g.finish();
}

criterion_group!(benches, bench_timer);
criterion_main!(benches);
