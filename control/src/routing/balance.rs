//! Choosing a router by health, not by turn: power of two choices over a peak-EWMA latency
//! estimate (the load measure of tower's `PeakEwma`), with ejection.
//!
//! Why not tower's `Balance` service itself: a hung router (SIGSTOP, a stalled node) keeps
//! its TCP connection and stays "ready", so tower never drops it; and control needs to hedge
//! a late call on a *different* router and eject the late one, which `Balance` hides behind
//! one `Service`. So the choice is made here, per attempt, from this small pure state.
//!
//! - **Cost** of an instance: its latency estimate × (calls in flight + 1). The estimate jumps
//!   up to a slower sample at once (peak) and decays toward faster ones over [`DECAY`].
//! - **Ejection**: an instance that errs or answers later than its hedge is skipped for a
//!   back-off that doubles on each ejection in a row (from [`FIRST_BACKOFF`] to
//!   [`MAX_BACKOFF`]) and resets on its next answer in time. When every instance is ejected,
//!   the one whose back-off ends first is still tried: a call never fails for want of a guess.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How fast the estimate forgets a slow sample.
pub const DECAY: Duration = Duration::from_secs(10);
/// The estimate of an instance never measured.
pub const DEFAULT_RTT: Duration = Duration::from_millis(5);
/// The first ejection's length; each ejection in a row doubles it.
pub const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// The longest ejection.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Hedge delay = this many times the instance's estimate, within the bounds below.
pub const HEDGE_FACTOR: u32 = 4;
/// A hedge never fires sooner: evaluating a shared call of a few deliveries takes
/// milliseconds, and a hedge on a busy machine doubles its work.
pub const MIN_HEDGE: Duration = Duration::from_millis(250);
/// Nor later: well inside the forges' 5–10 s delivery timeouts and ingest's deadline.
pub const MAX_HEDGE: Duration = Duration::from_millis(1_500);

#[derive(Debug)]
struct State {
    rtt_ns: f64,
    updated: Instant,
    ejected_until: Option<Instant>,
    backoff: Duration,
}

/// One instance's health. Shared by every call that may choose it.
#[derive(Debug)]
pub struct Health {
    state: Mutex<State>,
    in_flight: AtomicUsize,
}

/// A call in flight on an instance; dropping it (an answer, an error, a hedge that won
/// elsewhere) ends it.
#[derive(Debug)]
pub struct InFlight(Arc<Health>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

fn nanos(d: Duration) -> f64 {
    d.as_secs_f64() * 1e9
}

impl Health {
    pub fn new(now: Instant) -> Self {
        Self {
            state: Mutex::new(State {
                rtt_ns: nanos(DEFAULT_RTT),
                updated: now,
                ejected_until: None,
                backoff: FIRST_BACKOFF,
            }),
            in_flight: AtomicUsize::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts a call in flight until the guard is dropped.
    pub fn start(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(Arc::clone(self))
    }

    /// Calls in flight now.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// The latency estimate, decayed toward zero since its last sample, so an instance not
    /// chosen for a while is tried again.
    pub fn estimate(&self, now: Instant) -> Duration {
        let s = self.lock();
        let idle = nanos(now.saturating_duration_since(s.updated));
        Duration::from_secs_f64(s.rtt_ns * (-idle / nanos(DECAY)).exp() / 1e9)
    }

    /// What choosing this instance costs now.
    pub fn cost(&self, now: Instant) -> f64 {
        nanos(self.estimate(now)) * (self.in_flight() as f64 + 1.0)
    }

    /// An answer in time: the estimate takes the sample and the back-off resets.
    pub fn observe(&self, rtt: Duration, now: Instant) {
        let mut s = self.lock();
        let sample = nanos(rtt);
        if sample > s.rtt_ns {
            s.rtt_ns = sample;
        } else {
            let elapsed = nanos(now.saturating_duration_since(s.updated));
            let decay = (-elapsed / nanos(DECAY)).exp();
            s.rtt_ns = s.rtt_ns * decay + sample * (1.0 - decay);
        }
        s.updated = now;
        s.ejected_until = None;
        s.backoff = FIRST_BACKOFF;
    }

    /// An answer from a call whose time says nothing about health (a replay chunk): the
    /// instance is well again, and the estimate is left to the small calls.
    pub fn answered(&self) {
        let mut s = self.lock();
        s.ejected_until = None;
        s.backoff = FIRST_BACKOFF;
    }

    /// An error or a late answer: skipped until the back-off ends; the next one is longer.
    pub fn eject(&self, now: Instant) {
        let mut s = self.lock();
        // Ejected again while ejected (several late calls at once): one ejection.
        if s.ejected_until.is_some_and(|until| until > now) {
            return;
        }
        s.ejected_until = Some(now + s.backoff);
        s.backoff = (s.backoff * 2).min(MAX_BACKOFF);
    }

    /// When the ejection ends, if it has not.
    pub fn ejected_until(&self, now: Instant) -> Option<Instant> {
        self.lock().ejected_until.filter(|until| *until > now)
    }

    /// How long a call may go unanswered here before it is hedged on another instance.
    pub fn hedge_after(&self) -> Duration {
        let rtt = Duration::from_secs_f64(self.lock().rtt_ns / 1e9);
        (rtt * HEDGE_FACTOR).clamp(MIN_HEDGE, MAX_HEDGE)
    }
}

/// What "cheaper" means for a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Measure {
    /// Latency estimate × (calls in flight + 1): small calls a sender waits on.
    Latency,
    /// Calls in flight only: large calls (replay chunks) whose time is their size, spread
    /// evenly over the instances.
    InFlight,
}

/// Power of two choices: of the instances not in `tried` and not ejected, two at random
/// (`random` gives an index below its argument), the cheaper one by `measure`. When every
/// untried one is ejected, the one back soonest. `None` when all were tried.
pub fn choose(
    healths: &[&Health],
    tried: &[usize],
    now: Instant,
    measure: Measure,
    mut random: impl FnMut(usize) -> usize,
) -> Option<usize> {
    let cost = |i: usize| match measure {
        Measure::Latency => healths[i].cost(now),
        Measure::InFlight => healths[i].in_flight() as f64,
    };
    let untried: Vec<usize> = (0..healths.len()).filter(|i| !tried.contains(i)).collect();
    let ready: Vec<usize> = untried
        .iter()
        .copied()
        .filter(|&i| healths[i].ejected_until(now).is_none())
        .collect();
    match ready.len() {
        0 => untried
            .into_iter()
            .min_by_key(|&i| healths[i].ejected_until(now)),
        1 => Some(ready[0]),
        n => {
            let i = random(n);
            let mut j = random(n - 1);
            if j >= i {
                j += 1;
            }
            let (a, b) = (ready[i], ready[j]);
            Some(if cost(b) < cost(a) { b } else { a })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_estimate_jumps_to_a_slow_sample_and_decays_toward_fast_ones() {
        let t0 = Instant::now();
        let h = Health::new(t0);
        h.observe(ms(100), t0);
        assert_eq!(h.estimate(t0), ms(100));
        // A fast sample right after barely moves it; one after a decay period moves it most
        // of the way.
        h.observe(ms(1), t0 + ms(1));
        assert!(h.estimate(t0 + ms(1)) > ms(99));
        h.observe(ms(1), t0 + ms(1) + DECAY * 3);
        assert!(h.estimate(t0 + ms(1) + DECAY * 3) < ms(10));
    }

    #[test]
    fn calls_in_flight_raise_the_cost_until_they_end() {
        let t0 = Instant::now();
        let h = Arc::new(Health::new(t0));
        let idle = h.cost(t0);
        let a = h.start();
        let b = h.start();
        assert!((h.cost(t0) - idle * 3.0).abs() < 1.0);
        drop((a, b));
        assert_eq!(h.in_flight(), 0);
    }

    #[test]
    fn ejections_back_off_doubling_and_reset_on_an_answer() {
        let t0 = Instant::now();
        let h = Health::new(t0);
        h.eject(t0);
        assert_eq!(h.ejected_until(t0), Some(t0 + FIRST_BACKOFF));
        // A second late call while ejected does not extend it.
        h.eject(t0 + ms(10));
        assert_eq!(h.ejected_until(t0), Some(t0 + FIRST_BACKOFF));
        let t1 = t0 + FIRST_BACKOFF;
        assert_eq!(h.ejected_until(t1), None, "back after the back-off");
        h.eject(t1);
        assert_eq!(h.ejected_until(t1), Some(t1 + FIRST_BACKOFF * 2));
        let mut t = t1;
        for _ in 0..10 {
            t += MAX_BACKOFF;
            h.eject(t);
        }
        assert_eq!(h.ejected_until(t), Some(t + MAX_BACKOFF));
        h.observe(ms(2), t);
        assert_eq!(h.ejected_until(t), None);
        h.eject(t);
        assert_eq!(h.ejected_until(t), Some(t + FIRST_BACKOFF));
        // A large call's answer ends the ejection too, without moving the estimate.
        let before = h.estimate(t);
        h.answered();
        assert_eq!(h.ejected_until(t), None);
        assert_eq!(h.estimate(t), before);
    }

    #[test]
    fn hedges_follow_the_estimate_within_bounds() {
        let t0 = Instant::now();
        let h = Health::new(t0);
        assert_eq!(h.hedge_after(), MIN_HEDGE);
        h.observe(ms(200), t0);
        assert_eq!(h.hedge_after(), ms(800));
        h.observe(ms(5_000), t0);
        assert_eq!(h.hedge_after(), MAX_HEDGE);
    }

    #[test]
    fn two_choices_prefer_the_cheaper_and_skip_the_ejected() {
        let t0 = Instant::now();
        let (a, b, c) = (Health::new(t0), Health::new(t0), Health::new(t0));
        a.observe(ms(50), t0);
        b.observe(ms(2), t0);
        c.observe(ms(2), t0);
        let all = [&a, &b, &c];
        // Whichever pair is drawn, a (the slow one) loses to the other.
        for draw in 0..3 {
            let picked = choose(&all, &[], t0, Measure::Latency, |n| draw % n).expect("a choice");
            let pair_has_fast = picked != 0;
            assert!(pair_has_fast, "draw {draw} picked the slow instance");
        }
        b.eject(t0);
        c.eject(t0);
        assert_eq!(
            choose(&all, &[], t0, Measure::Latency, |_| 0),
            Some(0),
            "only a is ready"
        );
        assert_eq!(
            choose(&all, &[0], t0, Measure::Latency, |_| 0),
            Some(1),
            "all untried are ejected: the one back soonest (b, ejected first)"
        );
        assert_eq!(choose(&all, &[0, 1, 2], t0, Measure::Latency, |_| 0), None);
    }

    #[test]
    fn a_busy_instance_loses_to_an_idle_one() {
        let t0 = Instant::now();
        let (a, b) = (Arc::new(Health::new(t0)), Health::new(t0));
        let _busy: Vec<_> = (0..5).map(|_| a.start()).collect();
        assert_eq!(
            choose(&[&*a, &b], &[], t0, Measure::Latency, |_| 0),
            Some(1)
        );
        assert_eq!(
            choose(&[&*a, &b], &[], t0, Measure::Latency, |n| n - 1),
            Some(1)
        );
    }

    #[test]
    fn large_calls_go_by_calls_in_flight_not_latency() {
        let t0 = Instant::now();
        let (slow, fast) = (Arc::new(Health::new(t0)), Arc::new(Health::new(t0)));
        slow.observe(ms(2_000), t0);
        fast.observe(ms(1), t0);
        let _busy = fast.start();
        // By latency the fast one wins even busy; by calls in flight the idle slow one does.
        assert_eq!(
            choose(&[&*slow, &*fast], &[], t0, Measure::Latency, |_| 0),
            Some(1)
        );
        assert_eq!(
            choose(&[&*slow, &*fast], &[], t0, Measure::InFlight, |_| 0),
            Some(0)
        );
    }
}
