//! Where chunks wait for a lane and which lane takes them: jobs are queued (and a failed
//! child's unfinished ones put back at the head), a lane is started per queued job while a
//! child slot is free, the reserve slots open for work that outranks what holds every
//! child, and a lane's next job respects class order and a waiting validation
//! (docs/sandbox.md, "Classes and shares"). The lane itself runs in [`super::lanes`].

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::call::Job;
use super::lanes::lane;
use super::{Inner, lock};
use crate::sandbox::schedule::{Class, Schedule};

/// Chunks waiting for a lane, by class and tenant ([`Schedule`]), and lanes started for
/// them that have not taken one yet.
#[derive(Default)]
pub(super) struct Queue {
    pub(super) jobs: Schedule<Job>,
    /// Lanes started and not yet at work: a busy lane leaves them the jobs they were started
    /// for instead of queueing them behind its own (children in parallel before pipelining).
    pub(super) hungry: usize,
}

impl Inner {
    /// Queues a job and makes sure a lane will take it.
    pub(super) fn submit(self: &Arc<Self>, job: Job) {
        lock(&self.queue).jobs.push(job);
        self.queued.notify_waiters();
        self.kick();
    }

    /// Puts jobs a failed child did not finish back at the head of the queue, in order.
    pub(super) fn requeue(self: &Arc<Self>, jobs: Vec<Job>) {
        if jobs.is_empty() {
            return;
        }
        {
            let mut queue = lock(&self.queue);
            for job in jobs.into_iter().rev() {
                queue.jobs.push_front(job);
            }
        }
        self.queued.notify_waiters();
        self.kick();
    }

    /// Starts a lane for each queued job while child slots are free. Under the queue's lock,
    /// so a lane that leaves (under the same lock, when it finds the queue empty) is either
    /// seen leaving here or sees the job.
    pub(super) fn kick(self: &Arc<Self>) {
        let runtime = &self.runtime;
        let mut queue = lock(&self.queue);
        while queue.jobs.len() > queue.hungry {
            if let Ok(permit) = self.permits.clone().try_acquire_owned() {
                queue.hungry += 1;
                runtime.spawn(lane(self.clone(), permit, None));
                continue;
            }
            // Every child slot is taken, less urgent work among them: what outranks it takes
            // a reserve slot (a delivery never waits for a fixture's or a replay's units).
            let reserved = [Class::Live, Class::Interactive].into_iter().find_map(|r| {
                if queue.jobs.len_of(|c| c <= r && self.may_reserve(c)) == 0 {
                    return None;
                }
                let slot = match r {
                    Class::Live => &self.reserve_live,
                    _ => &self.reserve_interactive,
                };
                slot.clone().try_acquire_owned().ok().map(|p| (r, p))
            });
            if let Some((r, permit)) = reserved {
                queue.hungry += 1;
                runtime.spawn(lane(self.clone(), permit, Some(r)));
                continue;
            }
            break;
        }
    }

    /// Whether work of `class` may run on a reserve slot now: live work while lanes run
    pub(super) fn may_reserve(&self, class: Class) -> bool {
        let replays = self.replay_lanes.load(Ordering::SeqCst) > 0;
        match class {
            Class::Live => replays || self.interactive_lanes.load(Ordering::SeqCst) > 0,
            Class::Interactive => replays,
            Class::Replay => false,
        }
    }

    /// Lanes give their slot up while a validation waits.
    pub(super) fn yielding(&self) -> bool {
        self.validations_waiting.load(Ordering::SeqCst) > 0
    }

    /// The next job for a lane whose child (running `class`) runs `in_flight` requests
    /// already, of the class that child runs: none while a validation waits, none to queue
    /// behind its own while a lane started for it has not taken it yet, and none while more
    /// urgent work waits (less urgent work yields at chunk boundaries).
    pub(super) fn next_job(&self, in_flight: usize, class: Class) -> Option<Job> {
        if self.yielding() {
            return None;
        }
        let mut queue = lock(&self.queue);
        if in_flight > 0 && queue.jobs.len() <= queue.hungry {
            return None;
        }
        if queue.jobs.len_of(|c| c < class) > 0 {
            return None;
        }
        queue.jobs.take(|c| c == class)
    }
}
