//! Blame. The [`Watch`] holds the unit a child's progress board names to its budget in the
//! child's CPU time (with a wall-clock backstop, and a limit on no progress between units),
//! and says when to look next; [`fail`] decides, for a child that overran or died, which
//! unit of which request is blamed (`budget_exceeded`, `sandbox_crashed`, or nothing when
//! the child was lost to something not its unit's doing), keeps what the child answered,
//! and queues the rest for another child. Together so that what counts as a unit's fault
//! reads in one place.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use switchboard_proto::router::v1::ChildResponse;
use tokio::time::{Instant, timeout};

use super::Inner;
use super::children::{ChildProcess, Failure, InFlight, on_frame};
use crate::engine::decision::{self, fault};
use crate::sandbox::memory;
use crate::sandbox::progress::{Progress, ProgressBoard, cpu_ns_of, now_ns};

/// Deaths not of a unit's doing a chunk may see before the unit the child was running is
/// blamed after all (so a unit that keeps its child from living cannot loop forever).
pub(super) const MAX_LOST_CHILDREN_PER_CHUNK: u32 = 2;

/// Signals a unit brings on itself: jaq's abort on deep recursion, a stack overflow,
/// running out of its address space (an allocation failure aborts), a forbidden call.
fn unit_caused(status: &std::process::ExitStatus) -> bool {
    use std::os::unix::process::ExitStatusExt;
    matches!(
        status.signal(),
        Some(
            libc::SIGABRT
                | libc::SIGSEGV
                | libc::SIGBUS
                | libc::SIGILL
                | libc::SIGFPE
                | libc::SIGSYS
                | libc::SIGTRAP
        )
    )
}

/// Why a child stopped answering, and which unit of which request is to blame, when the
/// progress board says.
pub(super) struct Stopped {
    pub(super) failure: Failure,
    /// (request ordinal, unit relative to that request, the rule it ran).
    pub(super) at: Option<At>,
    /// Whether what the child wrote may still be read (it was killed by the parent, or
    /// went away while the parent wrote to it), rather than its output having ended or gone
    /// wrong already.
    pub(super) drain: bool,
}

/// Where a child stopped: (request ordinal, unit relative to that request, the rule it ran).
pub(super) type At = (u64, usize, Option<usize>);

/// A unit's wall time past which it is blamed whatever CPU it spent: a backstop only (a unit
/// does no I/O, so it waits only for a CPU), generous enough for a replay child at its low
/// priority on a busy machine.
fn wall_backstop(budget: Duration, idle: Duration) -> Duration {
    (budget * 100).max(idle)
}

/// How soon to look again at a unit that has CPU budget left.
const MIN_RECHECK: Duration = Duration::from_millis(1);

/// Holds the unit on a child's board to its budget, in the child's CPU time.
pub(super) struct Watch {
    seen: Progress,
    seen_at: Instant,
    pub(super) deadline: Instant,
}

impl Watch {
    pub(super) fn start(
        board: &ProgressBoard,
        inflight: &VecDeque<InFlight>,
        idle: Duration,
    ) -> Self {
        let seen = board.read();
        let seen_at = Instant::now();
        let deadline = next_deadline(&seen, seen_at, budget_of(inflight, seen.request), idle);
        Self {
            seen,
            seen_at,
            deadline,
        }
    }

    /// At the deadline: `None` while the child makes progress; else a unit that spent its
    /// budget of CPU time (blamed by request, index and rule), or no progress at all between
    /// units for `idle` (nothing to blame but the child).
    pub(super) fn check(
        &mut self,
        board: &ProgressBoard,
        pid: u32,
        inflight: &VecDeque<InFlight>,
        idle: Duration,
    ) -> Option<Option<At>> {
        let now = board.read();
        if now.seq != self.seen.seq {
            self.seen = now;
            self.seen_at = Instant::now();
            self.deadline = next_deadline(
                &self.seen,
                self.seen_at,
                budget_of(inflight, now.request),
                idle,
            );
            return None;
        }
        if now.in_unit() {
            let budget = budget_of(inflight, now.request);
            let wall = Duration::from_nanos(now_ns().saturating_sub(now.started_ns));
            let at = Some((now.request, now.unit as usize, now.rule));
            if wall >= wall_backstop(budget, idle) {
                return Some(at);
            }
            // Gone (its exit shows on the pipe next) or preempted: look again later.
            let Some(cpu) = cpu_ns_of(pid) else {
                self.deadline = Instant::now() + MIN_RECHECK * 10;
                return None;
            };
            let spent = Duration::from_nanos(cpu.saturating_sub(now.started_cpu_ns));
            if spent >= budget {
                return Some(at);
            }
            // CPU time runs no faster than the wall clock: it cannot run out before then.
            self.deadline = Instant::now() + (budget - spent).max(MIN_RECHECK);
            return None;
        }
        if self.seen_at.elapsed() >= idle {
            return Some(None);
        }
        self.deadline = self.seen_at + idle;
        None
    }
}

/// The budget of the request with this ordinal (the oldest one's if it is not in flight).
fn budget_of(inflight: &VecDeque<InFlight>, ordinal: u64) -> Duration {
    inflight
        .iter()
        .find(|f| f.ordinal == ordinal)
        .or(inflight.front())
        .map(|f| f.job.budget)
        .unwrap_or_default()
}

/// How long a child that died is waited for, to learn what it died of.
const EXIT_WAIT: Duration = Duration::from_millis(200);

/// A child stopped: kill it, keep every answer it wrote, fault the unit to blame (naming the
/// rule it ran), and queue the rest of its requests (the one it ran and any behind it) for
/// another child. A child that died of something its unit did not do (killed from outside,
/// its lifetime CPU limit) blames nothing: its units run again elsewhere.
pub(super) async fn fail(
    pool: &Arc<Inner>,
    mut child: ChildProcess,
    mut inflight: VecDeque<InFlight>,
    stopped: Stopped,
) {
    // What it died of, before a kill of ours could hide it.
    let mut lost = false;
    let mut over_memory = false;
    if stopped.failure == Failure::Died
        && let Ok(Ok(status)) = timeout(EXIT_WAIT, child.child.wait()).await
    {
        over_memory = status.code() == Some(memory::EXIT_CODE);
        lost = !over_memory && !unit_caused(&status);
    }
    let _ = child.child.start_kill();
    pool.forget(child.pid);
    if stopped.drain {
        // What it wrote before it went is still in the pipe, up to the end of its output.
        let _ = timeout(pool.config.compile_budget, async {
            while !inflight.is_empty() {
                let Ok(frame) = child.stdout.next::<ChildResponse>().await else {
                    break;
                };
                match on_frame(&mut inflight, frame) {
                    Ok(Some(done)) => done.finish(&pool.stats),
                    Ok(None) => {}
                    Err(_) => break,
                }
            }
        })
        .await;
    }
    // A child that died names the unit it was running, and the rule, on its board.
    let at = stopped.at.or_else(|| {
        let p = child.board.read();
        (stopped.failure == Failure::Died && p.in_unit()).then_some((
            p.request,
            p.unit as usize,
            p.rule,
        ))
    });
    // The unit the board names; failing that, the first one unanswered (no rule known).
    let named = at.and_then(|(ordinal, unit, rule)| {
        let i = inflight.iter().position(|f| f.ordinal == ordinal)?;
        let u = inflight[i].base + unit;
        inflight[i]
            .job
            .units
            .get(u)
            .is_some_and(Option::is_none)
            .then_some((i, u, rule))
    });
    let blamed = named.or_else(|| {
        inflight.iter().enumerate().find_map(|(i, f)| {
            f.job
                .units
                .iter()
                .position(Option::is_none)
                .map(|u| (i, u, None))
        })
    });
    let metrics = switchboard_telemetry::metrics();
    let mut blame = blamed.is_some();
    if lost {
        pool.stats.lost_children.fetch_add(1, Ordering::Relaxed);
        metrics.child_restart("lost");
        if let Some((i, _, _)) = blamed {
            let job = &mut inflight[i].job;
            job.lost_children += 1;
            blame = job.lost_children > MAX_LOST_CHILDREN_PER_CHUNK;
        }
        tracing::warn!(
            pid = child.pid,
            "sandbox child lost to something other than its unit; its units run again"
        );
    }
    // A unit over its CPU budget beside other work runs again alone before it is blamed:
    // contention (a neighbour on the other core, caches, memory bandwidth) can make the
    // same work cost more CPU time, and a fault must be a property of the rule.
    if blame
        && stopped.failure == Failure::Timeout
        && let Some((i, u, rule)) = blamed
        && !inflight[i].job.confirming
        && inflight[i].job.suspect.is_none()
        // A call already stopped by its faults has its answer: what is left of it is not
        // worth pausing every other tenant's replays for.
        && !inflight[i].job.call.stopped()
    {
        blame = false;
        inflight[i].job.suspect = Some(u);
        pool.stats.rerun_alone.fetch_add(1, Ordering::Relaxed);
        tracing::info!(
            pid = child.pid,
            unit = u,
            rule = %inflight[i].job.rule_of(u, rule),
            "a unit ran past its budget; it runs again alone before it is blamed"
        );
    }
    if blame && let Some((i, u, rule)) = blamed {
        let (code, counter) = match stopped.failure {
            Failure::Died if !over_memory => (fault::SANDBOX_CRASHED, &pool.stats.crashed),
            _ => (fault::BUDGET_EXCEEDED, &pool.stats.budget_exceeded),
        };
        metrics.child_restart(code);
        let job = &mut inflight[i].job;
        // An overrun alone with another run alone to come is not a fault yet: its decision
        // tells the lane, nothing counts it.
        let counted = !(job.then_again && code == fault::BUDGET_EXCEEDED);
        if counted {
            counter.fetch_add(1, Ordering::Relaxed);
            if code == fault::BUDGET_EXCEEDED {
                metrics.budget_fault();
            }
        }
        let rule_id = job.rule_of(u, rule).to_string();
        if counted {
            tracing::warn!(
                pid = child.pid,
                fault = code,
                request = ?at.map(|(r, _, _)| r),
                unit = ?at.map(|(_, u, _)| u),
                rule = %rule_id,
                "sandbox child replaced"
            );
        }
        let reason = match stopped.failure {
            Failure::Timeout => format!(
                "evaluation exceeded its budget of {} ms of CPU time",
                job.budget.as_millis()
            ),
            Failure::Died if over_memory => format!(
                "evaluation exceeded its memory budget of {} MiB",
                pool.config.limits.unit_memory_mb
            ),
            Failure::Died => "the sandbox child died during evaluation".to_string(),
        };
        job.units[u] = Some(decision::fault(&rule_id, code, reason));
        if counted {
            job.call.child_faults.fetch_add(1, Ordering::Relaxed);
        }
    }
    let mut undone = Vec::new();
    for f in inflight {
        // A re-run alone is answered whatever became of it: its lane decides what next.
        if f.job.decided() || f.job.confirming {
            f.job.finish(&pool.stats);
        } else {
            undone.push(f.job);
        }
    }
    pool.requeue(undone);
    pool.refill();
}

/// When to look at the board next: when the running unit's budget runs out, or (between
/// units) after a budget, to see what runs then.
fn next_deadline(
    seen: &Progress,
    seen_at: Instant,
    budget: Duration,
    idle_limit: Duration,
) -> Instant {
    if seen.in_unit() {
        let elapsed = Duration::from_nanos(now_ns().saturating_sub(seen.started_ns));
        seen_at + budget.saturating_sub(elapsed)
    } else {
        seen_at + budget.min(idle_limit)
    }
}
