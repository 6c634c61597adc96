//! A lane: one child slot at work. It takes jobs off the queue, checks out a child of their
//! class, and runs them on it with up to [`DEPTH`] requests in the child's pipe, writing the
//! next request while the child evaluates the current one and reading answers in order
//! ([`run`]). It counts itself among the lanes running replays or interactive work (which
//! opens the reserve slots) and charges the CPU its child spent to the call's tenant. When
//! the child stops answering, the lane hands it to [`super::watchdog::fail`].

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use switchboard_proto::router::v1::ChildResponse;
use tokio::io::AsyncWriteExt;
use tokio::process::ChildStdin;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::{Instant, sleep_until};

use super::call::{Call, Job};
use super::children::{ChildProcess, Failure, InFlight, on_frame};
use super::watchdog::{MAX_LOST_CHILDREN_PER_CHUNK, Stopped, Watch, fail};
use super::{DEPTH, Inner, lock};
use crate::sandbox::progress::cpu_ns_of;
use crate::sandbox::schedule::{Class, Queued};

/// One child slot at work: takes jobs off the queue, most urgent class first, and runs them
/// on a child of their kind until none is left, then checks the child in and gives the slot
/// up. A lane on the `reserve` slot opened for a class takes only that class or more urgent
/// work, and only while it may run there ([`Inner::may_reserve`]).
pub(super) async fn lane(pool: Arc<Inner>, permit: OwnedSemaphorePermit, reserve: Option<Class>) {
    let mut child: Option<ChildProcess> = None;
    let mut started = true;
    // Counts this lane in `replay_lanes` or `interactive_lanes` by what it runs.
    let mut running = Running {
        pool: pool.clone(),
        class: Class::Live,
    };
    loop {
        let job = {
            let mut queue = lock(&pool.queue);
            if std::mem::take(&mut started) {
                queue.hungry = queue.hungry.saturating_sub(1);
            }
            let allowed =
                |class: Class| reserve.is_none_or(|r| class <= r && pool.may_reserve(class));
            match (!pool.yielding())
                .then(|| queue.jobs.take(allowed))
                .flatten()
            {
                Some(job) => job,
                None => {
                    // The child goes back before the slot does, so no lane starts another.
                    if let Some(c) = child.take() {
                        pool.checkin(c);
                    }
                    drop(permit);
                    return;
                }
            }
        };
        let Some(job) = job.unless_done(&pool.stats) else {
            continue;
        };
        let class = job.class();
        running.set(class);
        let kept = child.take().and_then(|mut c| {
            if !c.alive() {
                pool.forget(c.pid);
                None
            } else if c.class != class {
                pool.checkin(c);
                None
            } else {
                Some(c)
            }
        });
        let c = match kept {
            Some(c) => c,
            None => match pool.checkout(class).await {
                Ok(c) => c,
                Err(e) => {
                    let _ = job.reply.send(Err(e));
                    continue;
                }
            },
        };
        let (c, job) = match job.suspect {
            Some(_) => confirm(&pool, c, job).await,
            None => (Some(c), job),
        };
        child = match c {
            Some(c) => run(&pool, c, job, false).await,
            None => {
                pool.requeue(vec![job]);
                None
            }
        };
    }
}

/// Re-runs alone a unit gets before it is called a budget fault. CPU time is noisy even
/// alone (a VM's neighbours, frequency, caches: the same loop measured 1.0–1.25× its
/// fastest within a minute here) but only ever upwards, so the fastest of a few runs is
/// the rule's own cost: a rule near its budget is not faulted by one slow measurement, and
/// one over it faults every time.
const ALONE_RUNS: usize = 2;

/// Runs the unit a job's last child overran again, alone: one such re-run at a time, with
/// every other child of interactive work and replays paused (live work never is), so the
/// CPU it spends is its own. Over its budget in each of [`ALONE_RUNS`] runs alone, it
/// faults (the last re-run records it); within it once, it gets its decision as if nothing
/// had disturbed it. Returns the child (or `None` when the re-run cost it) and the job, the
/// unit decided.
async fn confirm(
    pool: &Arc<Inner>,
    child: ChildProcess,
    mut job: Job,
) -> (Option<ChildProcess>, Job) {
    let Some(unit) = job.suspect.take() else {
        return (Some(child), job);
    };
    if job.units.get(unit).is_none_or(Option::is_some) {
        return (Some(child), job);
    }
    let mut child = Some(child);
    let mut decided = None;
    for attempt in 1..=ALONE_RUNS {
        // The run before this one (over its budget) cost its child: start another.
        let c = match child.take() {
            Some(c) => c,
            None => match pool.checkout(job.class()).await {
                Ok(c) => c,
                Err(_) => break,
            },
        };
        let (mut alone, answer) = job.alone(unit);
        alone.then_again = attempt < ALONE_RUNS && !job.call.stopped();
        child = {
            let _turn = pool.alone.lock().await;
            let _paused = pool.pause_others(c.pid);
            run(pool, c, alone, true).await
        };
        decided = match answer.await {
            Ok(Ok(mut answered)) => answered
                .units
                .get_mut(unit % job.configurations.max(1))
                .and_then(Option::take),
            _ => None,
        };
        let over_budget = decided
            .as_ref()
            .is_some_and(|d| d.fault_code == crate::engine::decision::fault::BUDGET_EXCEEDED);
        if !over_budget || attempt == ALONE_RUNS {
            break;
        }
        pool.stats.rerun_alone.fetch_add(1, Ordering::Relaxed);
    }
    match decided {
        Some(d) => {
            if d.outcome != switchboard_proto::router::v1::Outcome::Fault as i32 {
                pool.stats.cleared_alone.fetch_add(1, Ordering::Relaxed);
            }
            job.units[unit] = Some(d);
        }
        // Its child was lost to something else: try again, a bounded number of times.
        None if job.lost_children < MAX_LOST_CHILDREN_PER_CHUNK => {
            job.lost_children += 1;
            job.suspect = Some(unit);
        }
        None => {
            job.units[unit] = Some(crate::engine::decision::fault(
                "",
                crate::engine::decision::fault::BUDGET_EXCEEDED,
                "evaluation exceeded its budget, and its re-run alone lost its child",
            ));
            job.call.child_faults.fetch_add(1, Ordering::Relaxed);
        }
    }
    (child, job)
}

/// A lane counted in `replay_lanes` or `interactive_lanes` while it runs that class (and not
/// after it ends).
struct Running {
    pool: Arc<Inner>,
    class: Class,
}

impl Running {
    fn counter(&self, class: Class) -> Option<&AtomicUsize> {
        match class {
            Class::Live => None,
            Class::Interactive => Some(&self.pool.interactive_lanes),
            Class::Replay => Some(&self.pool.replay_lanes),
        }
    }

    fn set(&mut self, class: Class) {
        if class != self.class {
            if let Some(c) = self.counter(self.class) {
                c.fetch_sub(1, Ordering::SeqCst);
            }
            if let Some(c) = self.counter(class) {
                c.fetch_add(1, Ordering::SeqCst);
            }
            self.class = class;
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.set(Class::Live);
    }
}

/// What a lane waits for.
enum Event {
    Frame(std::io::Result<ChildResponse>),
    Wrote(std::io::Result<usize>),
    Deadline,
    Queued,
}

/// Writes some of a pending request; never resolves when there is none.
async fn write_some(
    stdin: &mut ChildStdin,
    pending: Option<&(Bytes, usize)>,
) -> std::io::Result<usize> {
    match pending {
        Some((bytes, at)) => stdin.write(&bytes[*at..]).await,
        None => std::future::pending().await,
    }
}

/// Runs `first` and (unless `alone`) every job it can take after it on `child`, keeping up
/// to [`DEPTH`] requests in the child's pipe. Each request is one slice of its job
/// ([`super::call::Call::slice`]); a job with units left after its slice goes back to its
/// tenant's line, so tenants take turns slice by slice. Returns the child when no job is
/// left for it, or `None` when it failed (after keeping its answers and queueing what it
/// left undone).
async fn run(
    pool: &Arc<Inner>,
    mut child: ChildProcess,
    first: Job,
    alone: bool,
) -> Option<ChildProcess> {
    let idle = pool.config.compile_budget;
    let mut inflight: VecDeque<InFlight> = VecDeque::with_capacity(DEPTH);
    let mut writing: Option<(Bytes, usize)> = None;
    let mut watch: Option<Watch> = None;
    let mut first = Some(first);
    // The child's CPU time when its current request began: what it spends is the tenant's.
    let mut cpu_mark = cpu_ns_of(child.pid);
    let stopped = loop {
        let queued = pool.queued.notified();
        tokio::pin!(queued);
        queued.as_mut().enable();
        if writing.is_none()
            && inflight.len() < DEPTH
            && (inflight.is_empty() || worth_pipelining(&inflight))
            && let Some(job) = first.take().or_else(|| {
                (!alone)
                    .then(|| pool.next_job(inflight.len(), child.class))
                    .flatten()
            })
        {
            let Some(job) = job.unless_done(&pool.stats) else {
                continue;
            };
            if inflight.is_empty() && child.sent > 0 && !child.alive() {
                // Exited on its own between jobs: nothing to blame, a new child runs it.
                // (A child that never ran a job is held to it instead, so a child that
                // cannot start is blamed rather than replaced forever.)
                pool.forget(child.pid);
                pool.requeue(vec![job]);
                return None;
            }
            match job.next_request(job.call.slice()) {
                Some((request, base, asked)) => {
                    let mut job = job;
                    job.asked = asked;
                    child.sent += 1;
                    inflight.push_back(InFlight {
                        job,
                        ordinal: child.sent,
                        base,
                        compiled: false,
                        since: Instant::now(),
                    });
                    writing = Some((request, 0));
                }
                None => job.finish(&pool.stats),
            }
            continue;
        }
        let Some(front) = inflight.front() else {
            return Some(child);
        };
        let deadline = match (&watch, front.compiled) {
            (Some(w), true) => w.deadline,
            _ => front.since + pool.config.compile_budget,
        };
        let can_take = writing.is_none() && inflight.len() < DEPTH;
        let event = tokio::select! {
            biased;
            frame = child.stdout.next::<ChildResponse>() => Event::Frame(frame),
            wrote = write_some(&mut child.stdin, writing.as_ref()) => Event::Wrote(wrote),
            _ = sleep_until(deadline) => Event::Deadline,
            _ = &mut queued, if can_take => Event::Queued,
        };
        match event {
            Event::Frame(Ok(frame)) => match on_frame(&mut inflight, frame) {
                Ok(Some(done)) => {
                    watch = None;
                    let spent = pool.charge(&done.call, child.pid, &mut cpu_mark);
                    done.call.observe(spent, done.asked);
                    if done.decided() || done.confirming {
                        done.finish(&pool.stats);
                    } else {
                        // The rest of it waits for its tenant's next turn.
                        pool.submit(done);
                    }
                }
                Ok(None) => {
                    if watch.is_none() && inflight.front().is_some_and(|f| f.compiled) {
                        watch = Some(Watch::start(&child.board, &inflight, idle));
                    }
                }
                Err(failure) => {
                    break Stopped {
                        failure,
                        at: None,
                        drain: false,
                    };
                }
            },
            Event::Frame(Err(_)) => {
                break Stopped {
                    failure: Failure::Died,
                    at: None,
                    drain: false,
                };
            }
            Event::Wrote(Ok(n)) if n > 0 => {
                if let Some((bytes, at)) = writing.as_mut() {
                    *at += n;
                    if *at >= bytes.len() {
                        writing = None;
                    }
                }
            }
            Event::Wrote(_) => {
                break Stopped {
                    failure: Failure::Died,
                    at: None,
                    drain: true,
                };
            }
            Event::Deadline => match watch.as_mut() {
                Some(w) if front_compiled(&inflight) => {
                    if let Some(at) = w.check(&child.board, child.pid, &inflight, idle) {
                        break Stopped {
                            failure: Failure::Timeout,
                            at,
                            drain: true,
                        };
                    }
                }
                _ => {
                    break Stopped {
                        failure: Failure::Timeout,
                        at: None,
                        drain: true,
                    };
                }
            },
            Event::Queued => {}
        }
    };
    if let Some(front) = inflight.front() {
        pool.charge(&front.job.call, child.pid, &mut cpu_mark);
    }
    // A job whose turn went on here and was not written yet runs on another child.
    if let Some(job) = first.take() {
        pool.requeue(vec![job]);
    }
    fail(pool, child, inflight, stopped).await;
    None
}

/// Whether to write a second request behind the one a child runs: only when that one is
/// short (or its cost unknown). Pipelining saves the child the parent's wakeup between two
/// requests, which matters for requests of a few milliseconds; behind a long slice it would
/// only make the next tenant's turn wait for two.
fn worth_pipelining(inflight: &VecDeque<InFlight>) -> bool {
    inflight.iter().all(|f| {
        let unit = f.job.call.unit_ns.load(Ordering::Relaxed);
        Duration::from_nanos(unit.saturating_mul(f.job.asked as u64)) < PIPELINE_BELOW
    })
}

/// A request expected to take at least this much CPU gets no second request behind it.
const PIPELINE_BELOW: Duration = Duration::from_millis(5);

fn front_compiled(inflight: &VecDeque<InFlight>) -> bool {
    inflight.front().is_some_and(|f| f.compiled)
}

impl Inner {
    /// Counts the CPU `pid` spent since `mark` as `call`'s, moves the mark, and returns it.
    fn charge(&self, call: &Call, pid: u32, mark: &mut Option<u64>) -> Duration {
        let now = cpu_ns_of(pid);
        let mut spent = Duration::ZERO;
        if let (Some(before), Some(after)) = (*mark, now) {
            spent = Duration::from_nanos(after.saturating_sub(before));
            *lock(&self.cpu)
                .entry((call.tenant.clone(), call.class))
                .or_default() += spent;
            lock(&self.queue)
                .jobs
                .charge(call.class, &call.tenant, spent);
            switchboard_telemetry::metrics().sandbox_cpu(&call.tenant, call.class.label(), spent);
        }
        *mark = now;
        spent
    }
}
