//! The id table under concurrency (criterion): what `ib_create_cm_id`,
//! the validation every C call does (`api::lookup`), a per-id engine
//! lookup (`CmId::state`, under the id's shard lock) and
//! `ib_destroy_cm_id` cost from one thread and from two threads at once,
//! with one shard (every id behind one lock) and with two. The two-thread
//! rows show whether the sharded tables scale on this machine's 2 cores.
//!
//! Also lookups alone against a table holding 100,000 live ids.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use ibcm::api::{self, CmId, Device, DeviceOptions};
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn device(name: &str, shards: u32) -> Arc<Device> {
    Device::open(
        name,
        DeviceOptions {
            shards,
            threads: 1,
            max_half_open: 0,
            ..DeviceOptions::default()
        },
    )
    .expect("open loop device")
}

/// Runs `per_thread(iters / threads)` on `threads` threads at once and
/// returns the wall time.
fn parallel(threads: u64, iters: u64, per_thread: impl Fn(u64) + Sync) -> Duration {
    let each = iters.div_ceil(threads);
    let barrier = std::sync::Barrier::new(threads as usize + 1);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| {
                barrier.wait();
                per_thread(each);
            });
        }
        barrier.wait();
        let t = Instant::now();
        // The scope joins the threads before returning.
        t
    })
    .elapsed()
}

fn create_lookup_destroy(dev: &Arc<Device>, n: u64) {
    for _ in 0..n {
        let id = dev
            .create_id(None, std::ptr::null_mut(), None)
            .expect("create");
        let c = api::lookup(id.c_ptr()).expect("lookup");
        black_box(c.state());
        id.destroy().expect("destroy");
    }
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("idtable");
    g.throughput(Throughput::Elements(1));
    g.measurement_time(Duration::from_secs(3));
    for (i, shards) in [1u32, 2].into_iter().enumerate() {
        let dev = device(&format!("loop:10.250.{}.1", i + 1), shards);
        for threads in [1u64, 2] {
            g.bench_with_input(
                BenchmarkId::new(format!("create_lookup_destroy/{shards}shards"), threads),
                &threads,
                |b, &t| {
                    b.iter_custom(|iters| parallel(t, iters, |n| create_lookup_destroy(&dev, n)))
                },
            );
        }
        dev.close();
    }
    // Lookups only, 100k live ids: the C-pointer check plus the engine's
    // id-table lookup under the shard lock.
    let dev = device("loop:10.250.9.1", 2);
    let ids: Vec<CmId> = (0..100_000)
        .map(|_| dev.create_id(None, std::ptr::null_mut(), None).unwrap())
        .collect();
    let ptrs: Vec<usize> = ids.iter().map(|i| i.c_ptr() as usize).collect();
    for threads in [1u64, 2] {
        g.bench_with_input(
            BenchmarkId::new("lookup_100k_live", threads),
            &threads,
            |b, &t| {
                b.iter_custom(|iters| {
                    parallel(t, iters, |n| {
                        let mut k = (n as usize).wrapping_mul(2654435761) % ptrs.len();
                        for _ in 0..n {
                            k = (k + 7919) % ptrs.len();
                            let id = api::lookup(ptrs[k] as *mut _).expect("live");
                            black_box(id.state());
                        }
                    })
                })
            },
        );
    }
    for id in ids {
        let _ = id.destroy();
    }
    dev.close();
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
