//! Time in the engine: retransmission of the one outstanding request of
//! an id, request timeouts (`*_ERROR` events) and timewait, on the
//! shard's [`TimerWheel`](super::timer::TimerWheel).

use super::*;

/// What an id's one timer is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TimerKind {
    /// Resend the outstanding request, or fail it when out of retries.
    Retransmit,
    /// Leave TIMEWAIT (`IB_CM_TIMEWAIT_EXIT`).
    Timewait,
}

/// A timer wheel entry: whose timer, and what for.
#[derive(Debug, Clone, Copy)]
pub(super) struct TimerRef {
    pub(super) id: u32,
    pub(super) kind: TimerKind,
}

/// `cm_convert_to_ms`: an IBA time exponent to milliseconds (approximate,
/// as the kernel computes it).
pub fn convert_to_ms(t: u8) -> u64 {
    1u64 << (t.min(31) as u32).saturating_sub(8)
}

/// `cm_ack_timeout`: about 2 × packet life time + ACK delay, as a 5-bit
/// exponent.
pub fn ack_timeout(ack_delay: u8, packet_life_time: u8) -> u8 {
    let a = packet_life_time as u32 + 1;
    let d = ack_delay as u32;
    let r = if a >= d {
        a + (d + 1 >= a) as u32
    } else {
        d + (a + 1 >= d) as u32
    };
    r.min(31) as u8
}

impl Engine {
    /// Runs every timer due at `now`: retransmissions, request timeouts
    /// (`*_ERROR` events) and timewait exits.
    pub fn handle_timeout(&mut self, now: Time) {
        let now_ms = now.as_millis_floor();
        while let Some((key, t)) = self.timers.poll(now_ms) {
            let Some(r) = self.ids.get_mut(t.id) else {
                continue;
            };
            if r.timer != Some(key) {
                continue;
            }
            r.timer = None;
            match t.kind {
                TimerKind::Timewait => {
                    if r.state == State::Timewait {
                        self.set_state(t.id, State::Idle);
                        self.event(t.id, EventType::TimewaitExit, EventParam::None, None);
                    }
                }
                TimerKind::Retransmit => self.retransmit_or_fail(now, t.id),
            }
        }
    }

    /// Fails every outstanding request at once (its retries given up):
    /// the events its timeout would give (`REQ_ERROR`, `REP_ERROR`,
    /// `DREQ_ERROR`, `SIDR_REQ_ERROR`), for a transport that can send
    /// nothing more (design B's service gone). Returns how many failed.
    pub fn fail_sends(&mut self, now: Time) -> usize {
        let mut n = 0;
        for id in self.ids.ids() {
            if let Some(send) = self.ids.get_mut(id).and_then(|r| r.send.as_mut()) {
                send.retries_left = 0;
                n += 1;
                self.cancel_timer(id);
                self.retransmit_or_fail(now, id);
            }
        }
        n
    }

    pub(super) fn retransmit_or_fail(&mut self, now: Time, id: u32) {
        let Some(r) = self.ids.get_mut(id) else {
            return;
        };
        let Some(send) = r.send.as_mut() else { return };
        if send.retries_left > 0 {
            send.retries_left -= 1;
            let (dest, mad, ms) = (send.dest, send.mad, send.timeout_ms);
            let a = counters::attr_index(peek::attr_id_of(&mad));
            self.counters.tx_retries[a] += 1;
            self.arm_timer(now, id, ms, TimerKind::Retransmit);
            self.push_mad(dest, mad);
            return;
        }
        // Retries exhausted (the MAD layer's IB_WC_RESP_TIMEOUT_ERR).
        let send = r.send.take().unwrap();
        let a = counters::attr_index(peek::attr_id_of(&send.mad));
        self.counters.timeouts[a] += 1;
        if r.state != send.state_at_send {
            return;
        }
        let status = EventParam::SendStatus(WC_RESP_TIMEOUT_ERR);
        match send.state_at_send {
            State::ReqSent | State::MraReqRcvd => {
                self.reset_to_idle(id);
                self.event(id, EventType::ReqError, status, None);
            }
            State::RepSent | State::MraRepRcvd => {
                self.reset_to_idle(id);
                self.event(id, EventType::RepError, status, None);
            }
            State::DreqSent => {
                self.enter_timewait(now, id);
                self.event(id, EventType::DreqError, status, None);
            }
            State::SidrReqSent => {
                self.set_state(id, State::Idle);
                self.event(id, EventType::SidrReqError, status, None);
            }
            _ => {}
        }
    }

    pub(super) fn cancel_timer(&mut self, id: u32) {
        if let Some(r) = self.ids.get_mut(id)
            && let Some(k) = r.timer.take()
        {
            self.timers.cancel(k);
        }
    }

    pub(super) fn arm_timer(&mut self, now: Time, id: u32, ms: u64, kind: TimerKind) {
        self.cancel_timer(id);
        let deadline = now.as_millis_ceil().saturating_add(ms);
        let k = self.timers.insert(deadline, TimerRef { id, kind });
        if let Some(r) = self.ids.get_mut(id) {
            r.timer = Some(k);
        }
    }

    /// Cancels the outstanding request (and its timer).
    pub(super) fn cancel_send(&mut self, id: u32) {
        let Some(send) = self.ids.get_mut(id).and_then(|r| r.send.take()) else {
            return;
        };
        if self.spare_sends.len() < SPARE_SENDS {
            self.spare_sends.push(send);
        }
        self.cancel_timer(id);
    }

    /// Sends a request with retransmission (REQ, REP, DREQ, SIDR_REQ).
    pub(super) fn send_request(
        &mut self,
        now: Time,
        id: u32,
        mad: [u8; 256],
        timeout_ms: u64,
        retries: u8,
    ) {
        let Some(r) = self.ids.get(id) else { return };
        let dest = self.dest_of(&r.av);
        let state_at_send = r.state;
        let send = Outstanding {
            mad,
            dest,
            retries_left: retries,
            timeout_ms,
            state_at_send,
        };
        let send = match self.spare_sends.pop() {
            Some(mut b) => {
                *b = send;
                b
            }
            None => Box::new(send),
        };
        if let Some(r) = self.ids.get_mut(id) {
            r.send = Some(send);
        }
        self.arm_timer(now, id, timeout_ms, TimerKind::Retransmit);
        self.push_mad(dest, mad);
    }

    /// `cm_enter_timewait`: only once per connection.
    pub(super) fn enter_timewait(&mut self, now: Time, id: u32) {
        let Some(r) = self.ids.get(id) else { return };
        if !r.has_tw {
            return;
        }
        let ms = convert_to_ms(r.av.timeout);
        self.unregister_remote(id);
        if let Some(r) = self.ids.get_mut(id) {
            r.has_tw = false;
        }
        self.set_state(id, State::Timewait);
        self.arm_timer(now, id, ms, TimerKind::Timewait);
    }
}
