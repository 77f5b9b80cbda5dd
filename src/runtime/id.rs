//! `CmId`, the consumer's handle to an id: every `ib_cm.h` call on it (an
//! engine step in the caller's thread, then send and deliver), and the
//! `Device` calls that make ids (`create_id`, `insert_listen`).

use super::device::Device;
use super::event_loop::Outputs;
use super::inner::{CmIdInner, IN_CALLBACK, RustHandler};
use super::lock;
use super::registry::register;
use crate::abi::{IbCmHandler, IbCmId};
use crate::engine::*;
use crate::ipc::op;
use crate::log::{ERROR, WARN};
use std::cell::Cell;
use std::ffi::c_void;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A Rust handle to an id (keeps the object alive; using it after destroy
/// gives `-EINVAL`).
#[derive(Clone)]
pub struct CmId(pub(crate) Arc<CmIdInner>);

impl std::fmt::Debug for CmId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CmId({:#010x})", self.local_id())
    }
}

thread_local! {
    /// Where this thread's next `create_id` goes (see there).
    static NEXT_SHARD: Cell<usize> = Cell::new(THREAD_SEQ.fetch_add(1, Ordering::Relaxed));
}

static THREAD_SEQ: AtomicUsize = AtomicUsize::new(0);

impl Device {
    /// `ib_create_cm_id`. `handler` and `context` are the C `struct
    /// ib_cm_id` members of that name: stored for C code to read and
    /// inherited by the ids of REQs a listener accepts. Events go to
    /// `rust_handler` only (none: events are dropped); the C layer passes
    /// one that builds the C event and calls the id's `cm_handler`.
    pub fn create_id(
        self: &Arc<Self>,
        handler: IbCmHandler,
        context: *mut c_void,
        rust_handler: Option<RustHandler>,
    ) -> Result<CmId, Errno> {
        if self.stop.load(Ordering::SeqCst) || self.transport.lost() {
            return Err(Errno::ENODEV);
        }
        if let Some(r) = &self.remote {
            return r.create_id(self, handler, context, rust_handler);
        }
        // Spread new ids over the shards: round robin per thread, each
        // thread starting at a different shard, so one creating thread
        // still uses every shard and two rarely wait for one lock.
        // A shard whose lock is busy is skipped for the next free one.
        let n = self.shards.len();
        let first = NEXT_SHARD.with(|c| {
            let v = c.get();
            c.set(v.wrapping_add(1));
            v % n
        });
        let (shard, mut e) = (0..n)
            .find_map(|k| {
                let s = (first + k) % n;
                match self.shards[s].try_lock() {
                    Ok(g) => Some((s, g)),
                    Err(std::sync::TryLockError::Poisoned(p)) => Some((s, p.into_inner())),
                    Err(std::sync::TryLockError::WouldBlock) => None,
                }
            })
            .unwrap_or_else(|| (first, lock(&self.shards[first])));
        let shard = shard as u32;
        let h = e.create_id()?;
        let inner = Arc::new(CmIdInner::new(
            self.clone(),
            shard,
            h,
            handler,
            context,
            rust_handler,
        ));
        register(Arc::as_ptr(&inner));
        e.insert_id(inner.clone());
        if let Some(c) = e.info(h) {
            inner.sync_public(&c);
        }
        self.live_ids[shard as usize]
            .0
            .fetch_add(1, Ordering::Relaxed);
        Ok(CmId(inner))
    }

    /// `ib_cm_insert_listen`: an existing compatible listener (same handler,
    /// NULL context) is shared; each caller must destroy it once.
    pub fn insert_listen(
        self: &Arc<Self>,
        handler: IbCmHandler,
        service_id: u64,
        rust_handler: Option<RustHandler>,
    ) -> Result<CmId, Errno> {
        if let Some(r) = &self.remote {
            return r.insert_listen(self, handler, service_id, rust_handler);
        }
        let _g = lock(&self.listen_lock);
        let key = handler.map_or(0, |f| f as usize as u64)
            ^ rust_handler
                .as_ref()
                .map_or(0, |h| Arc::as_ptr(h) as *const u8 as usize as u64);
        if let Some(entry) = self.shared.listen_lookup(service_id) {
            if entry.share_key != Some(key) {
                return Err(Errno::EINVAL);
            }
            let h = Handle(entry.local_id as u64);
            // Entered before its listen could match: always there.
            let sh = self.listeners.get(h).ok_or(Errno::EINVAL)?;
            if unsafe { !(*sh.c.get()).context.is_null() } {
                return Err(Errno::EINVAL);
            }
            lock(&self.shards[entry.shard as usize]).share_listener(h)?;
            // The new sharer is one more owner of the C pointer (its
            // destroy drops it); the shard's table keeps the object.
            register(Arc::as_ptr(&sh));
            return Ok(CmId(sh));
        }
        let id = self.create_id(handler, std::ptr::null_mut(), rust_handler)?;
        let added = self.listeners.insert(&id.0);
        let r = {
            let mut e = lock(&self.shards[id.0.shard as usize]);
            let r = e.listen_keyed(id.0.handle(), service_id, Some(key));
            if let Some(c) = e.info(id.0.handle()) {
                id.0.sync_public(&c);
            }
            r
        };
        if r.is_err() && added {
            self.listeners.remove(id.0.handle());
        }
        match r {
            Ok(()) => Ok(id),
            Err(e) => {
                if let Err(d) = id.destroy() {
                    ibcm_log!(
                        WARN,
                        "{}: destroying the id of a failed listen: {d}",
                        self.name
                    );
                }
                Err(e)
            }
        }
    }
}

impl CmId {
    /// From a C pointer; the caller guarantees it came from this library
    /// and was not destroyed.
    ///
    /// # Safety
    /// `p` must be a live `ib_cm_id` created by ibcm.
    pub unsafe fn from_c(p: *mut IbCmId) -> CmId {
        let s = p as *const CmIdInner;
        unsafe {
            Arc::increment_strong_count(s);
            CmId(Arc::from_raw(s))
        }
    }

    /// The C pointer of this id.
    pub fn c_ptr(&self) -> *mut IbCmId {
        self.0.c.get()
    }

    pub fn device(&self) -> &Arc<Device> {
        &self.0.dev
    }

    /// The engine's handle of this id (the service protocol names ids by
    /// it).
    pub fn handle(&self) -> u64 {
        self.0.handle().0
    }

    pub fn local_id(&self) -> u32 {
        self.0.handle().0 as u32
    }

    /// Runs `f` on the count of one-way calls the host CM service has run
    /// on this id, under the id's lock for it: the service holds it while
    /// such a call runs and while it reads a snapshot of the public fields
    /// (so a snapshot is either before a call or after it and counts it).
    /// The id of a served device is local: the slot that counts the calls
    /// a process sends on a remote id is free for it.
    pub fn with_oneway_calls<R>(&self, f: impl FnOnce(&mut u64) -> R) -> R {
        debug_assert!(
            self.0.dev.remote.is_none(),
            "a remote id counts its own calls"
        );
        f(&mut lock(&self.0.remote_version).oneway_sent)
    }

    /// The public `ib_cm_id` fields as last synchronised.
    pub fn public(&self) -> IbCmId {
        unsafe { std::ptr::read_volatile(self.0.c.get()) }
    }

    pub fn state(&self) -> Option<State> {
        let dev = &self.0.dev;
        if let Some(r) = &dev.remote {
            return r.state(&self.0);
        }
        lock(dev.shard_of(&self.0)).state(self.0.handle())
    }

    fn remote(&self) -> Option<&super::remote::Remote> {
        self.0.dev.remote.as_deref()
    }

    /// Runs an engine call on this id, then sends and delivers its results.
    fn with_engine<R>(
        &self,
        f: impl FnOnce(&mut Engine, Time, Handle) -> ApiResult<R>,
    ) -> ApiResult<R> {
        let dev = &self.0.dev;
        if dev.stop.load(Ordering::SeqCst) || dev.transport.lost() {
            return Err(Errno::ENODEV);
        }
        let mut out = Outputs::default();
        let (r, wake) = {
            let mut e = lock(dev.shard_of(&self.0));
            let now = dev.now();
            let r = f(&mut e, now, self.0.handle());
            dev.drain(self.0.shard, &mut e, &mut out);
            (r, dev.note_deadline(&e))
        };
        dev.finish_with(out, true);
        // The wake-up after the shard lock is released (and the MADs are
        // sent): a loop thread woken under it would only block on it.
        if wake {
            dev.wake_for_timer();
        }
        r
    }

    pub fn listen(&self, service_id: u64) -> ApiResult {
        if let Some(r) = self.remote() {
            return r.call_unit(&self.0, op::LISTEN, |w| {
                w.put(&service_id);
            });
        }
        let dev = &self.0.dev;
        let _g = lock(&dev.listen_lock);
        // A listener is in the device's table before the engine can match
        // a REQ against it (the REQ's shard looks it up there).
        let added = dev.listeners.insert(&self.0);
        let r = self.with_engine(|e, _, h| e.listen(h, service_id));
        if r.is_err() && added {
            dev.listeners.remove(self.0.handle());
        }
        r
    }

    pub fn send_req(&self, p: &ReqParams) -> ApiResult {
        if let Some(r) = self.remote() {
            return r.oneway(&self.0, op::SEND_REQ, Call::Req(p), |w| {
                w.put(p);
            });
        }
        self.with_engine(|e, now, h| e.send_req(now, h, p))
    }

    pub fn send_rep(&self, p: &RepParams) -> ApiResult {
        if let Some(r) = self.remote() {
            return r.oneway(&self.0, op::SEND_REP, Call::Rep(p), |w| {
                w.put(p);
            });
        }
        self.with_engine(|e, now, h| e.send_rep(now, h, p))
    }

    pub fn send_rtu(&self, pdata: &[u8]) -> ApiResult {
        if let Some(r) = self.remote() {
            return r.oneway(&self.0, op::SEND_RTU, Call::Rtu(pdata), |w| {
                w.put(&pdata.to_vec());
            });
        }
        self.with_engine(|e, _, h| e.send_rtu(h, pdata))
    }

    pub fn send_dreq(&self, pdata: &[u8]) -> ApiResult {
        if let Some(r) = self.remote() {
            return r.oneway(&self.0, op::SEND_DREQ, Call::Dreq(pdata), |w| {
                w.put(&pdata.to_vec());
            });
        }
        self.with_engine(|e, now, h| e.send_dreq(now, h, pdata))
    }

    pub fn send_drep(&self, pdata: &[u8]) -> ApiResult {
        if let Some(r) = self.remote() {
            return r.oneway(&self.0, op::SEND_DREP, Call::Drep(pdata), |w| {
                w.put(&pdata.to_vec());
            });
        }
        self.with_engine(|e, now, h| e.send_drep(now, h, pdata))
    }

    pub fn send_rej(&self, reason: u32, ari: &[u8], pdata: &[u8]) -> ApiResult {
        if let Some(r) = self.remote() {
            let call = Call::Rej {
                ari,
                private_data: pdata,
            };
            return r.oneway(&self.0, op::SEND_REJ, call, |w| {
                w.put(&reason).put(&ari.to_vec()).put(&pdata.to_vec());
            });
        }
        self.with_engine(|e, now, h| e.send_rej(now, h, reason, ari, pdata))
    }

    pub fn prepare_mra(&self) -> ApiResult {
        if let Some(r) = self.remote() {
            // The request has no body.
            return r.call_unit(&self.0, op::PREPARE_MRA, |_| {});
        }
        self.with_engine(|e, _, h| e.prepare_mra(h))
    }

    /// Whether a REQ_RECEIVED on the ids this listener creates, or a
    /// REP_RECEIVED on this id, leaves the id with its MRA prepared (as
    /// `prepare_mra`) the moment the engine reports it — what rdma_cm's
    /// kernel side does for RC/UC connections, without waiting for the
    /// event to reach the process. Set it on a listener before `listen`
    /// (or later: it applies to the REQs after), on an active id before
    /// `send_req`. Through the service it is a one-way call; on an IDLE
    /// id it rides in the message of the id's `listen` or `send_req`.
    pub fn set_prepare_mra_on_report(&self, on: bool) -> ApiResult {
        if let Some(r) = self.remote() {
            return r.mra_on_report(&self.0, on);
        }
        self.with_engine(|e, _, h| e.set_prepare_mra_on_report(h, on))
    }

    /// On a listener served by the host CM service: the service sends
    /// the QP attributes of each connection REQ it reports with the REQ
    /// (what `init_qp_attr` answers for INIT, RTR and RTS while the new id
    /// is in REQ_RCVD), so that the new id's `init_qp_attr` calls make no
    /// round trip while the id stays there — for a listener whose
    /// accept moves a QP before its REP (rdma_cm's). Set it before
    /// `listen` (it rides in the listen's message). In-process, where
    /// `init_qp_attr` is a call into the engine, it does nothing.
    pub fn set_qp_attrs_on_req(&self, on: bool) -> ApiResult {
        if let Some(r) = self.remote() {
            return r.qp_attrs_on_req(&self.0, on);
        }
        Ok(())
    }

    /// This id (and so its process) will move a QP with `init_qp_attr`
    /// when its REP comes (librdmacm's `rdma_connect` on an id with a
    /// QP): through the host CM service, asks the service once per
    /// process to push the QP attributes with every REP
    /// (`op::QP_ATTRS_ON_REP`), so that even the process's first
    /// connection makes no `INIT_QP_ATTR` round trip. Call it before
    /// `send_req` (the mark rides in that message). Without pushed
    /// attributes (an older service) `init_qp_attr` still asks: a round
    /// trip, never a stale answer. In-process it does nothing.
    pub fn want_qp_attrs_on_rep(&self) {
        if let Some(r) = self.remote() {
            r.want_rep_attrs();
        }
    }

    pub fn notify(&self, event: u32) -> ApiResult {
        if let Some(r) = self.remote() {
            return r.call_unit(&self.0, op::NOTIFY, |w| {
                w.put(&event);
            });
        }
        self.with_engine(|e, _, h| e.notify(h, event))
    }

    pub fn init_qp_attr(&self, qp_state: u32) -> ApiResult<QpAttr> {
        if let Some(r) = self.remote() {
            return r.init_qp_attr(&self.0, qp_state);
        }
        self.with_engine(|e, _, h| e.init_qp_attr(h, qp_state))
    }

    pub fn send_sidr_req(&self, p: &SidrReqParams) -> ApiResult {
        if let Some(r) = self.remote() {
            return r.call_unit(&self.0, op::SIDR_REQ, |w| {
                w.put(p);
            });
        }
        self.with_engine(|e, now, h| e.send_sidr_req(now, h, p))
    }

    pub fn send_sidr_rep(&self, p: &SidrRepParams) -> ApiResult {
        if let Some(r) = self.remote() {
            return r.call_unit(&self.0, op::SIDR_REP, |w| {
                w.put(p);
            });
        }
        self.with_engine(|e, _, h| e.send_sidr_rep(h, p))
    }

    /// `ib_destroy_cm_id`: blocks until no callback for this id runs; from
    /// the id's own callback it is refused (returns `-EBUSY`).
    pub fn destroy(&self) -> ApiResult {
        self.destroy_with(0)
    }

    /// `destroy` with the error a handler's non-zero return would give
    /// (what a REQ id's destroy tells its peer); the service uses it for
    /// a process's ids.
    pub fn destroy_with(&self, err: i32) -> ApiResult {
        self.destroy_riding(err, None).0
    }

    /// `destroy`, with the release of an rdma_cm port binding riding in
    /// the same message as the id's `DESTROY` when the id's device is
    /// served by the host CM service (one message per `rdma_destroy_id`
    /// instead of two). The release comes back when it did not leave
    /// (an in-process device, a listener share, a lost service, an
    /// error): the caller releases the binding itself.
    pub fn destroy_releasing(
        &self,
        port: crate::ipc::PortRelease,
    ) -> (ApiResult, Option<crate::ipc::PortRelease>) {
        self.destroy_riding(0, Some(port))
    }

    fn destroy_riding(
        &self,
        err: i32,
        port: Option<crate::ipc::PortRelease>,
    ) -> (ApiResult, Option<crate::ipc::PortRelease>) {
        let me = Arc::as_ptr(&self.0);
        if IN_CALLBACK.with(|c| c.get()) == me {
            ibcm_log!(
                ERROR,
                "ib_destroy_cm_id({:#010x}) called from its own callback: refused (return non-zero from the handler to destroy it)",
                self.local_id()
            );
            return (Err(Errno::EBUSY), port);
        }
        if lock(&self.0.dq).destroyed {
            return (Err(Errno::EINVAL), port);
        }
        let back = self.0.destroy_inner(err, false, port);
        (Ok(()), back)
    }

    pub fn is_destroyed(&self) -> bool {
        lock(&self.0.dq).destroyed
    }
}
