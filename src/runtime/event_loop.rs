//! The event loop and the paths out of an engine step: receive a batch,
//! route each MAD to its shard, run timers, drain the engine's outputs
//! (MADs onto the device's send queue in engine order, events onto their
//! ids, work for other shards), then — no lock held — send and deliver.
//! `Device::batch` and the loop thread hold a thread's MADs back and flush
//! them together.

use super::device::Device;
use super::inner::{CmIdInner, Item};
use super::lock;
use super::registry::register;
use super::shard::Shard;
use crate::engine::*;
use crate::fabric::Received;
use crate::log::{DEBUG, ERROR, INFO};
use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// What one engine step produced, handled after the shard lock is released.
#[derive(Default)]
pub(super) struct Outputs {
    pub(super) deliver: Vec<Arc<CmIdInner>>,
    pub(super) foreign: Vec<Foreign>,
}

thread_local! {
    /// The device whose event loop runs on this thread: MADs queued on that
    /// device while it handles a batch go out together when the batch is
    /// done (one `sendmmsg`) instead of one by one.
    static BATCH_DEV: Cell<*const Device> = const { Cell::new(std::ptr::null()) };
}

thread_local! {
    /// Whether this thread is an event loop delivering the callbacks of one
    /// round (see [`in_delivery_round`]).
    static DELIVERY_ROUND: Cell<bool> = const { Cell::new(false) };
}

/// What runs at the end of each delivery round (see
/// [`set_delivery_round_end`]).
static ROUND_END: std::sync::OnceLock<fn()> = std::sync::OnceLock::new();

/// Whether this thread is an event-loop thread inside one round of
/// callbacks (the MADs of one receive, or the timers and deferred events
/// of one wake-up). The hook of [`set_delivery_round_end`] runs on this
/// thread when the round is over, before the thread waits again, and
/// between two callbacks of a round that has run [`ROUND_SLICE`] since the
/// hook last ran: a consumer can leave work a callback would do per event
/// (waking a reader) to that hook and do it once per round or slice.
pub fn in_delivery_round() -> bool {
    DELIVERY_ROUND.with(|r| r.get())
}

/// Sets the function every event-loop thread calls at the end of each
/// delivery round (once per process: false when one is already set to
/// another function).
pub fn set_delivery_round_end(f: fn()) -> bool {
    let set = *ROUND_END.get_or_init(|| f);
    std::ptr::fn_addr_eq(set, f)
}

/// How long an event-loop thread holds back, inside one delivery round,
/// the MADs its callbacks queued and the round-end hook. A round of slow
/// callbacks (each moving a QP through RTR and RTS before sending its RTU,
/// milliseconds apiece on a loaded host) then sends and wakes as it goes:
/// a round of 1,000 REPs would otherwise hold every RTU until its last
/// callback, seconds after the first, past the peer's REP timeout.
pub const ROUND_SLICE: Duration = Duration::from_millis(2);

thread_local! {
    /// When the current slice of this thread's delivery round began
    /// (`None` outside a round).
    static SLICE_START: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// Runs `f` as one delivery round of this thread, then the round-end hook
/// (also when `f` unwinds; a nested round ends with the outermost). The
/// event loop runs each batch of callbacks so; public for consumers that
/// test their hook. A round longer than [`ROUND_SLICE`] also runs the hook
/// between its callbacks, at most once per slice.
pub fn delivery_round<R>(f: impl FnOnce() -> R) -> R {
    struct End(bool);
    impl Drop for End {
        fn drop(&mut self) {
            DELIVERY_ROUND.with(|r| r.set(self.0));
            if !self.0 {
                SLICE_START.with(|s| s.set(None));
                if let Some(h) = ROUND_END.get() {
                    h();
                }
            }
        }
    }
    let outer = !DELIVERY_ROUND.with(|r| r.replace(true));
    let _end = End(!outer);
    if outer {
        SLICE_START.with(|s| s.set(Some(Instant::now())));
    }
    f()
}

/// Whether this thread is inside `dev`'s `Device::batch`.
pub(super) fn in_batch(dev: *const Device) -> bool {
    std::ptr::eq(BATCH_DEV.with(|d| d.get()), dev)
}

/// The longest the event loop sleeps while it is busy (it had timers or
/// received MADs within `BUSY_LINGER`): a thread that arms a timer
/// farther away than that — a timewait (≥ 1 s on RoCE's default packet
/// life time), a REQ's or DREQ's response timeout — then needs no wake-up
/// of the loop, which wakes by itself in time and sees it. Without the
/// bound every `rdma_disconnect` of a server that destroys its ids at once
/// (cmtime's: the DREP arms the timewait, the destroy cancels it, so no
/// timer is left when the next DREQ comes) woke the sleeping loop for a
/// timer already gone: an eventfd write, a `poll` and a `recvmmsg` and two
/// context switches per connection on one CPU. An idle device (nothing for
/// `BUSY_LINGER`) sleeps without a bound, as before.
const SLEEP_CAP: Duration = Duration::from_millis(250);
/// How long after its last timer or received MAD the loop keeps its sleep
/// bounded by `SLEEP_CAP` (at most `BUSY_LINGER / SLEEP_CAP` = 20 extra
/// wake-ups once the work stops).
const BUSY_LINGER: Duration = Duration::from_secs(5);

/// What the loop sleeps until: its next timer, bounded by `SLEEP_CAP`
/// from `now` while `now` is before `busy_until`; `None`: no bound.
fn sleep_bound(next: Option<Time>, now: Time, busy_until: Time) -> Option<Time> {
    if now >= busy_until {
        return next;
    }
    let cap = Time(now.0.saturating_add(SLEEP_CAP.as_nanos() as u64));
    Some(next.map_or(cap, |t| t.min(cap)))
}

impl Device {
    /// Takes everything an engine produced. Runs under the shard lock.
    pub(super) fn drain(&self, shard: u32, e: &mut Shard, out: &mut Outputs) {
        // An id made by a REQ has no object until its REQ event below,
        // which starts it from the id's fields as they are then.
        while let Some(c) = e.poll_change() {
            if let Some(sh) = e.id(c.id) {
                sh.sync_public(&c);
            }
        }
        while let Some(ev) = e.poll_event() {
            let listen_id = match &ev.param {
                EventParam::Req(p) => Some(p.listen_id),
                EventParam::SidrReq(p) => Some(p.listen_id),
                _ => None,
            };
            let (sh, listener) = match listen_id {
                Some(l) => match self.new_request_id(shard, e, &ev, l) {
                    Some((sh, listener)) => (sh, Some(listener)),
                    None => continue,
                },
                None => match e.id(ev.id) {
                    Some(sh) => (sh.clone(), None),
                    None => {
                        ibcm_log!(
                            DEBUG,
                            "{}: event {} for id {:#x}, which has no object: dropped",
                            self.name,
                            ev.kind.name(),
                            ev.id.0
                        );
                        continue;
                    }
                },
            };
            lock(&sh.dq).push(Item { ev, listener });
            out.deliver.push(sh);
        }
        while let Some(f) = e.poll_foreign() {
            out.foreign.push(f);
        }
        while let Some(n) = e.poll_notice() {
            ibcm_log!(INFO, "{}: {n}", self.name);
        }
        // Queued on the device in engine order while the shard lock is
        // held, so MADs of one id can never overtake each other. Last, so
        // a MAD the steps above caused goes out with the rest.
        if e.has_transmits() {
            e.take_transmits(&mut lock(&self.outq));
            self.outq_pending.store(true, Ordering::SeqCst);
        }
    }

    /// The object of an id a REQ or SIDR_REQ made, inheriting its
    /// listener's handler and context; returned with the listener.
    fn new_request_id(
        &self,
        shard: u32,
        e: &mut Shard,
        ev: &Event,
        listen_id: Handle,
    ) -> Option<(Arc<CmIdInner>, Arc<CmIdInner>)> {
        let Some(c) = e.info(ev.id) else {
            ibcm_log!(
                ERROR,
                "{}: {} for id {:#x}, which is gone: dropped",
                self.name,
                ev.kind.name(),
                ev.id.0
            );
            return None;
        };
        let Some(listener) = self.listeners.get(listen_id) else {
            // A listener leaves the table only after its destroy crossed
            // every shard lock, so a REQ it matched finds it; if not, the
            // request is refused rather than left without an owner.
            ibcm_log!(
                ERROR,
                "{}: {} for id {:#x} names listener {:#x}, which is not in the table: id destroyed",
                self.name,
                ev.kind.name(),
                ev.id.0,
                listen_id.0
            );
            e.destroy(ev.id, -errno::ENOMEM);
            return None;
        };
        let lc = unsafe { *listener.c.get() };
        let inner = Arc::new(CmIdInner::new(
            listener.dev.clone(),
            shard,
            ev.id,
            lc.cm_handler,
            lc.context,
            listener.rust_handler.clone(),
        ));
        inner.sync_public(&c);
        register(Arc::as_ptr(&inner));
        e.insert_id(inner.clone());
        self.live_ids[shard as usize]
            .0
            .fetch_add(1, Ordering::Relaxed);
        Some((inner, listener))
    }

    /// What design B's service asked (`Transport::take_asks`): the DREQs
    /// of connections it found stale (a REQ or REP for another process
    /// named their peer's QP: `ib_send_cm_dreq` on each, as the engine does
    /// for a stale connection of its own), and the device's ids.
    fn service_asks(&self) {
        let mut asks = Vec::new();
        self.transport.take_asks(&mut asks);
        for a in asks {
            let (guid, qpn) = match a {
                crate::fabric::Ask::Stale { guid, qpn } => (guid, qpn),
                crate::fabric::Ask::Ids { seq } => {
                    self.transport.answer_ids(seq, &self.id_rows());
                    continue;
                }
                crate::fabric::Ask::Stat { seq } => {
                    self.transport.answer_stat(seq, &self.counters());
                    continue;
                }
            };
            match self.shared.qp_get(guid, qpn) {
                Some(e) => {
                    let f = Foreign::SendDreq {
                        shard: e.shard,
                        local_id: e.local_id,
                    };
                    let out = Outputs {
                        foreign: vec![f],
                        ..Outputs::default()
                    };
                    delivery_round(|| self.finish(out));
                }
                None => ibcm_log!(
                    DEBUG,
                    "{}: the service found QP {qpn:#x} of CA {guid:#018x} stale; no connection holds it now",
                    self.name
                ),
            }
        }
    }

    /// Every id of the device, as `ibcm ids` shows it.
    pub(super) fn id_rows(&self) -> Vec<crate::fabric::IdRow> {
        let mut rows = Vec::new();
        for s in self.shards.iter() {
            let e = lock(s);
            for h in e.handles() {
                let Some(c) = e.info(h) else { continue };
                rows.push(crate::fabric::IdRow {
                    state: c.state as u32,
                    local_id: h.0 as u32,
                    remote_id: c.remote_id,
                    service_id: c.service_id,
                    peer: e.peer_gid(h),
                    age_ms: e.id(h).map_or(0, |i| i.born.elapsed().as_millis() as u64),
                });
            }
        }
        rows.sort_by_key(|r| std::cmp::Reverse(r.age_ms));
        rows
    }

    /// Sends, delivers and forwards what a step produced (no locks held).
    pub(super) fn finish(&self, out: Outputs) {
        self.finish_with(out, false)
    }

    /// As `finish`; with `defer` the callbacks run on the event loop, not in
    /// the calling thread (API calls: a consumer calling `ib_cm_notify` with
    /// its own locks held must not be re-entered).
    pub(super) fn finish_with(&self, out: Outputs, defer: bool) {
        if !std::ptr::eq(BATCH_DEV.with(|d| d.get()), self) {
            self.flush();
        }
        for f in out.foreign {
            let Foreign::SendDreq { shard, local_id } = f;
            let mut o = Outputs::default();
            if let Some(s) = self.shards.get(shard as usize) {
                let wake = {
                    let mut e = lock(s);
                    let now = self.now();
                    e.dreq_stale_local(now, local_id);
                    self.drain(shard, &mut e, &mut o);
                    self.note_deadline(&e)
                };
                if wake {
                    self.wake_for_timer();
                }
            }
            self.finish_with(o, defer);
        }
        if defer {
            if !out.deliver.is_empty() {
                lock(&self.deferred).extend(out.deliver);
                self.transport.wake();
            }
        } else {
            self.deliver_all(out.deliver);
        }
    }

    /// Runs the callbacks of `ids`; on this device's event loop, a round
    /// that has run for [`ROUND_SLICE`] sends the MADs held so far and runs
    /// the round-end hook between two callbacks (`slice_point`).
    fn deliver_all(&self, ids: Vec<Arc<CmIdInner>>) {
        for sh in ids {
            sh.deliver();
            self.slice_point();
        }
    }

    /// Ends the current slice of this thread's delivery round if it has
    /// lasted [`ROUND_SLICE`]: what the callbacks so far queued goes out
    /// (the RTUs of the REPs handled), and the round-end hook wakes the
    /// readers of the events delivered. Only on this device's event-loop
    /// thread inside a round; elsewhere MADs leave at the API call's end.
    fn slice_point(&self) {
        if !in_batch(self) {
            return;
        }
        let due = SLICE_START.with(|s| s.get().is_some_and(|t| t.elapsed() >= ROUND_SLICE));
        if !due {
            return;
        }
        // The next slice starts before the flush: a switch may deliver on
        // this thread what the flush hands over, re-entering here.
        SLICE_START.with(|s| s.set(Some(Instant::now())));
        self.flush();
        if let Some(h) = ROUND_END.get() {
            h();
        }
    }

    /// Whether the event loop must be woken because `e` now has a timer
    /// earlier than its sleep; the caller wakes it ([`Self::wake_for_timer`])
    /// once the shard lock is released — on one CPU the woken loop thread
    /// runs at once and would block on that lock, two more context switches
    /// and a futex pair per call.
    #[must_use]
    pub(super) fn note_deadline(&self, e: &Engine) -> bool {
        match e.poll_timeout() {
            Some(d) => {
                self.timer_gen.fetch_add(1, Ordering::SeqCst);
                d.0 < self.sleep_until.load(Ordering::SeqCst)
            }
            None => false,
        }
    }

    /// Wakes the event loop for a timer `note_deadline` found earlier than
    /// its sleep.
    pub(super) fn wake_for_timer(&self) {
        self.timer_wakes.fetch_add(1, Ordering::Relaxed);
        self.transport.wake();
    }

    pub(super) fn event_loop(self: Arc<Self>) {
        let mut batch: Vec<Received> = Vec::with_capacity(256);
        // Until when the loop counts as busy (see `SLEEP_CAP`).
        let mut busy_until = Time::ZERO;
        BATCH_DEV.with(|d| d.set(Arc::as_ptr(&self)));
        while !self.stop.load(Ordering::SeqCst) {
            delivery_round(|| {
                // Callbacks for events that API calls produced.
                let deferred = std::mem::take(&mut *lock(&self.deferred));
                self.deliver_all(deferred);
                // Timers due; every outstanding request at once when the
                // transport is lost for good (once).
                let now = self.now();
                let lost = self.transport.lost() && !self.lost_seen.swap(true, Ordering::SeqCst);
                for (i, s) in self.shards.iter().enumerate() {
                    let mut out = Outputs::default();
                    {
                        let mut e = lock(s);
                        if lost {
                            e.fail_sends(now);
                            self.drain(i as u32, &mut e, &mut out);
                        }
                        if e.poll_timeout().is_some_and(|d| d <= now) {
                            e.handle_timeout(now);
                            self.drain(i as u32, &mut e, &mut out);
                        }
                    }
                    self.finish(out);
                }
                // Everything this thread produced goes out before it sleeps
                // (a switch may deliver on this thread what it hands over).
                self.flush();
            });
            // Sleep until the next deadline or a MAD.
            self.sleep_until.store(0, Ordering::SeqCst);
            let gen0 = self.timer_gen.load(Ordering::SeqCst);
            let next = self
                .shards
                .iter()
                .filter_map(|s| lock(s).poll_timeout())
                .min();
            let now = self.now();
            if next.is_some() || !batch.is_empty() {
                busy_until = Time(now.0.saturating_add(BUSY_LINGER.as_nanos() as u64));
            }
            let next = sleep_bound(next, now, busy_until);
            self.sleep_until
                .store(next.map_or(u64::MAX, |t| t.0), Ordering::SeqCst);
            let timeout = if self.timer_gen.load(Ordering::SeqCst) != gen0
                || !lock(&self.deferred).is_empty()
            {
                Some(Duration::ZERO)
            } else {
                next.map(|t| Duration::from_nanos(t.0.saturating_sub(self.now().0)))
            };
            batch.clear();
            if let Err(e) = self.transport.recv(timeout, &mut batch) {
                ibcm_log!(ERROR, "{}: receive failed: {e}", self.name);
                std::thread::sleep(Duration::from_millis(10));
            }
            self.sleep_until.store(0, Ordering::SeqCst);
            if self.stop.load(Ordering::SeqCst) {
                break;
            }
            self.service_asks();
            if !batch.is_empty() {
                delivery_round(|| self.process(&batch));
            }
        }
        self.flush();
        BATCH_DEV.with(|d| d.set(std::ptr::null()));
    }

    /// Runs `f` with this thread's outgoing MADs held back, then sends them
    /// all at once (one `sendmmsg` per 64 on the UDP fabric). For a thread
    /// that starts many connections or disconnects in a row: each API call
    /// otherwise sends its MAD immediately, one system call each. Order per
    /// id is kept; nested calls flush at the outermost.
    pub fn batch<R>(self: &Arc<Self>, f: impl FnOnce() -> R) -> R {
        struct Restore<'a>(&'a Device, *const Device);
        impl Drop for Restore<'_> {
            fn drop(&mut self) {
                BATCH_DEV.with(|d| d.set(self.1));
                if !std::ptr::eq(self.1, self.0) {
                    self.0.flush();
                }
            }
        }
        let prev = BATCH_DEV.with(|d| d.replace(Arc::as_ptr(self)));
        let _restore = Restore(self, prev);
        f()
    }

    /// Sends every queued MAD, in queue order. The send lock makes batches
    /// taken by different threads leave in the order they were taken.
    pub(super) fn flush(&self) {
        if let Some(r) = &self.remote {
            return r.flush();
        }
        // Whoever queued MADs flushes after queueing them (or at the end of
        // its batch), so a clear flag means someone else already took them.
        if !self.outq_pending.load(Ordering::SeqCst)
            || !self.outq_pending.swap(false, Ordering::SeqCst)
        {
            return;
        }
        let g = lock(&self.send_lock);
        let mut batch = std::mem::take(&mut *lock(&self.outq));
        let handed = self.switch_out(&mut batch);
        if !batch.is_empty() {
            self.transport.send(&batch);
        }
        let mut q = lock(&self.outq);
        if q.is_empty() && q.capacity() < batch.capacity() {
            let mut b = batch;
            b.clear();
            *q = b;
        }
        drop(q);
        drop(g);
        for d in handed {
            d.run_inbound();
        }
    }

    /// Hands received MADs to their shards.
    pub(crate) fn process(&self, batch: &[Received]) {
        let n = self.shards.len() as u64;
        let now = self.now();
        // Group consecutive MADs per shard to take each lock once.
        let mut idx = 0;
        while idx < batch.len() {
            let shard_of = |r: &Received| match route(&self.shared, &r.mad, &r.src) {
                Ok(s) => s as usize,
                Err(h) => (h % n) as usize,
            };
            let s = shard_of(&batch[idx]);
            let mut out = Outputs::default();
            {
                let mut e = lock(&self.shards[s]);
                while idx < batch.len() && shard_of(&batch[idx]) == s {
                    let r = &batch[idx];
                    if let Err(d) = e.handle_mad(now, &r.src, &r.mad) {
                        ibcm_log!(DEBUG, "{}: MAD from {} dropped: {d}", self.name, r.src.sgid);
                    }
                    idx += 1;
                }
                self.drain(s as u32, &mut e, &mut out);
            }
            self.finish(out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{EventParam, EventType, PathRec, RepParams, ReqParams, qp_type};
    use crate::runtime::{CmId, DeviceOptions, RustHandler};
    use std::sync::atomic::{AtomicBool, AtomicUsize};
    use std::time::{Duration, Instant};

    static ROUNDS_ENDED: AtomicUsize = AtomicUsize::new(0);

    fn count_round() {
        ROUNDS_ENDED.fetch_add(1, Ordering::SeqCst);
    }

    fn until(what: impl Fn() -> bool) -> bool {
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(5) {
            if what() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        false
    }

    /// An RC REQ on `path` to `service_id` from QPN `qp_num`, both response
    /// timeouts `timeout`, at most `retries` retries.
    fn rc_req(path: PathRec, service_id: u64, qp_num: u32, timeout: u8, retries: u8) -> ReqParams {
        ReqParams {
            primary_path: path,
            service_id,
            qp_num,
            qp_type: qp_type::RC,
            remote_cm_response_timeout: timeout,
            local_cm_response_timeout: timeout,
            max_cm_retries: retries,
            ..Default::default()
        }
    }

    /// A received MAD's callback runs inside a delivery round of the event
    /// loop, and the round-end hook runs after it on that thread; an API
    /// call's thread is in no round.
    #[test]
    fn callbacks_of_received_mads_run_in_a_round_that_ends_with_the_hook() {
        assert!(set_delivery_round_end(count_round));
        assert!(set_delivery_round_end(count_round), "the same hook again");
        assert!(!in_delivery_round());
        let a = Device::open("loop:127.0.93.1", DeviceOptions::default()).unwrap();
        let b = Device::open("loop:127.0.93.2", DeviceOptions::default()).unwrap();
        static IN_ROUND: AtomicBool = AtomicBool::new(false);
        static ENDED_BEFORE: AtomicUsize = AtomicUsize::new(usize::MAX);
        let h: RustHandler = Arc::new(|_, ev| {
            if ev.kind == EventType::ReqReceived {
                IN_ROUND.store(in_delivery_round(), Ordering::SeqCst);
                ENDED_BEFORE.store(ROUNDS_ENDED.load(Ordering::SeqCst), Ordering::SeqCst);
            }
            0
        });
        let listener = a.create_id(None, std::ptr::null_mut(), Some(h)).unwrap();
        listener.listen(0x93).unwrap();
        let path = b.init_path(1, a.query_gid(1, 0).unwrap()).unwrap();
        let quiet: RustHandler = Arc::new(|_, _| 0);
        let id = b
            .create_id(None, std::ptr::null_mut(), Some(quiet))
            .unwrap();
        id.send_req(&rc_req(path, 0x93, 0x93, 20, 3)).unwrap();
        assert!(until(|| ENDED_BEFORE.load(Ordering::SeqCst) != usize::MAX));
        assert!(
            IN_ROUND.load(Ordering::SeqCst),
            "the REQ's callback ran outside a round"
        );
        let before = ENDED_BEFORE.load(Ordering::SeqCst);
        assert!(
            until(|| ROUNDS_ENDED.load(Ordering::SeqCst) > before),
            "no round-end hook after the callback"
        );
        let _ = id.destroy();
        let _ = listener.destroy();
        a.close();
        b.close();
    }

    /// A round of slow callbacks sends what each queued as it goes: the
    /// active side's REP callbacks (each as slow as moving a QP to RTS on a
    /// loaded host) send RTUs that reach the passive side while later REPs
    /// of the same receive are still being handled, not after the last.
    #[test]
    fn a_long_round_sends_each_callbacks_rtu_before_the_round_ends() {
        const N: usize = 8;
        static RTUS: AtomicUsize = AtomicUsize::new(0);
        static REPS: AtomicUsize = AtomicUsize::new(0);
        // RTUs the passive side had when the last REP's callback began
        // (waiting at most 5 s for the N - 1 sent before it).
        static SEEN_AT_LAST: AtomicUsize = AtomicUsize::new(usize::MAX);
        let a = Device::open("loop:127.0.94.1", DeviceOptions::default()).unwrap();
        let b = Device::open("loop:127.0.94.2", DeviceOptions::default()).unwrap();
        let passive: RustHandler = Arc::new(|cm, ev| {
            match ev.kind {
                EventType::ReqReceived => {
                    let qpn = match &ev.param {
                        EventParam::Req(r) => r.remote_qpn + 0x100,
                        _ => 0,
                    };
                    cm.send_rep(&RepParams {
                        qp_num: qpn,
                        starting_psn: 1,
                        ..Default::default()
                    })
                    .unwrap();
                }
                EventType::RtuReceived => {
                    RTUS.fetch_add(1, Ordering::SeqCst);
                }
                _ => {}
            }
            0
        });
        let active: RustHandler = Arc::new(|cm, ev| {
            if ev.kind == EventType::RepReceived {
                let n = REPS.fetch_add(1, Ordering::SeqCst) + 1;
                if n == 1 {
                    // The other REPs arrive meanwhile: the next receive
                    // takes them in one batch, handled in one round.
                    std::thread::sleep(Duration::from_millis(300));
                } else {
                    std::thread::sleep(ROUND_SLICE * 3);
                }
                if n == N {
                    until(|| RTUS.load(Ordering::SeqCst) >= N - 1);
                    SEEN_AT_LAST.store(RTUS.load(Ordering::SeqCst), Ordering::SeqCst);
                }
                cm.send_rtu(&[]).unwrap();
            }
            0
        });
        let listener = a
            .create_id(None, std::ptr::null_mut(), Some(passive))
            .unwrap();
        listener.listen(0x94).unwrap();
        let path = b.init_path(1, a.query_gid(1, 0).unwrap()).unwrap();
        let ids: Vec<_> = (0..N)
            .map(|i| {
                let id = b
                    .create_id(None, std::ptr::null_mut(), Some(active.clone()))
                    .unwrap();
                id.send_req(&rc_req(path, 0x94, 0x940 + i as u32, 20, 3))
                    .unwrap();
                id
            })
            .collect();
        assert!(
            until(|| RTUS.load(Ordering::SeqCst) == N),
            "{} of {N} RTUs received",
            RTUS.load(Ordering::SeqCst)
        );
        assert_eq!(
            SEEN_AT_LAST.load(Ordering::SeqCst),
            N - 1,
            "the RTUs of the round's earlier callbacks were held until its end"
        );
        for id in ids {
            let _ = id.destroy();
        }
        let _ = listener.destroy();
        a.close();
        b.close();
    }

    #[test]
    fn the_sleep_is_bounded_only_while_busy() {
        let ms = Time::from_millis;
        let cap = SLEEP_CAP.as_millis() as u64;
        // Busy: the bound, or the timer when it comes first.
        assert_eq!(sleep_bound(None, ms(10), ms(100)), Some(ms(10 + cap)));
        assert_eq!(
            sleep_bound(Some(ms(10_000)), ms(10), ms(100)),
            Some(ms(10 + cap))
        );
        assert_eq!(sleep_bound(Some(ms(20)), ms(10), ms(100)), Some(ms(20)));
        // Idle: the timer, or no bound at all.
        assert_eq!(sleep_bound(None, ms(100), ms(100)), None);
        assert_eq!(
            sleep_bound(Some(ms(10_000)), ms(200), ms(100)),
            Some(ms(10_000))
        );
    }

    /// An API call that arms a timer farther away than the bounded sleep
    /// of a busy loop does not wake it (the DREP's timewait, the DREQ's
    /// timeout of a disconnect), and the timer still fires.
    #[test]
    fn a_far_timer_armed_while_busy_wakes_no_loop_and_still_fires() {
        static REJECTED: AtomicUsize = AtomicUsize::new(0);
        static REQ_ERRORS: AtomicUsize = AtomicUsize::new(0);
        let a = Device::open_local("loop:127.0.95.1", DeviceOptions::default()).unwrap();
        let b = Device::open_local("loop:127.0.95.2", DeviceOptions::default()).unwrap();
        // A listener that never answers its REQs.
        let silent: RustHandler = Arc::new(|_, _| 0);
        let listener = a
            .create_id(None, std::ptr::null_mut(), Some(silent))
            .unwrap();
        listener.listen(0x94).unwrap();
        let path = b.init_path(1, a.query_gid(1, 0).unwrap()).unwrap();
        let h: RustHandler = Arc::new(|_, ev| {
            match ev.kind {
                EventType::RejReceived => REJECTED.fetch_add(1, Ordering::SeqCst),
                EventType::ReqError => REQ_ERRORS.fetch_add(1, Ordering::SeqCst),
                _ => 0,
            };
            0
        });
        let req = |id: &CmId, service_id: u64| {
            // Timeouts of about 1 s, four times the bound.
            id.send_req(&rc_req(path, service_id, 0x94 + service_id as u32, 18, 0))
                .unwrap()
        };
        // A REQ nobody listens for: rejected, which leaves b's loop busy
        // with no timer.
        let first = b
            .create_id(None, std::ptr::null_mut(), Some(h.clone()))
            .unwrap();
        req(&first, 0x95);
        assert!(until(|| REJECTED.load(Ordering::SeqCst) == 1));
        std::thread::sleep(Duration::from_millis(30));
        let wakes = b.timer_wakes.load(Ordering::SeqCst);
        let second = b.create_id(None, std::ptr::null_mut(), Some(h)).unwrap();
        req(&second, 0x94);
        assert_eq!(
            b.timer_wakes.load(Ordering::SeqCst),
            wakes,
            "a REQ timer 1 s away woke the busy loop"
        );
        assert!(
            until(|| REQ_ERRORS.load(Ordering::SeqCst) == 1),
            "the REQ's timer never fired"
        );
        let _ = first.destroy();
        let _ = second.destroy();
        let _ = listener.destroy();
        a.close();
        b.close();
    }

    #[test]
    fn a_round_nests_and_ends_with_the_outermost() {
        fn other() {}
        // The hook may be set by the test above first: either way a
        // different function is refused once one is set.
        let _ = set_delivery_round_end(count_round);
        assert!(!set_delivery_round_end(other));
        let before = ROUNDS_ENDED.load(Ordering::SeqCst);
        delivery_round(|| {
            assert!(in_delivery_round());
            delivery_round(|| assert!(in_delivery_round()));
            assert!(in_delivery_round(), "the inner round ended the outer");
        });
        assert!(!in_delivery_round());
        assert!(ROUNDS_ENDED.load(Ordering::SeqCst) > before);
    }
}
