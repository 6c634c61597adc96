//! The progress board: one page of memory shared by the parent and one sandbox child, on
//! which the child marks the unit it is evaluating and when it started it.
//!
//! Why: the parent holds every unit to its budget. Learning of each unit from a pipe frame
//! costs a write in the child and a wakeup in the parent per unit (most of the sandbox's
//! overhead, docs/benchmarks.md). With the board the child batches its answers, and the
//! parent wakes about once per budget to look at the board instead. Blame stays exact: the
//! board names the unit that overran or was running when the child died.
//!
//! The board is advisory for the parent's watchdog only; answers still come on the pipe.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::fs::{MemfdFlags, ftruncate, memfd_create};
use rustix::mm::{MapFlags, ProtFlags, mmap, munmap};
use rustix::time::{ClockId, clock_gettime};

/// The child's argument naming the inherited descriptor of its board.
pub const PROGRESS_FD_ARG: &str = "--progress-fd=";

const BYTES: usize = 4096;
/// Words: 0 = sequence (odd while a unit runs), 1 = the unit, 2 = its start (monotonic ns),
/// 3 = the ordinal of the evaluate request the child runs (1 for its first), 4 = the child's
/// CPU time at the unit's start (ns), 5 = the rule the unit evaluates (its index + 1; 0
/// before the first).
const WORDS: usize = 6;

/// What the board said at one moment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Progress {
    /// Bumped when a unit starts and when it ends: odd while one runs.
    pub seq: u64,
    /// The unit running (meaningful while `seq` is odd), relative to the request.
    pub unit: u64,
    /// When it started, on the system-wide monotonic clock.
    pub started_ns: u64,
    /// The evaluate request the child runs (or last ran), counted from 1 in the order the
    /// child read them; 0 before the first. The parent may have written the next request
    /// already, so `unit` is only meaningful together with this.
    pub request: u64,
    /// The child's CPU time when the unit started (its process clock, ns): budgets are
    /// held in CPU time, so a unit preempted on a busy machine is not blamed for the wait.
    pub started_cpu_ns: u64,
    /// The index of the rule the unit evaluates now; `None` before its first rule.
    pub rule: Option<usize>,
}

impl Progress {
    pub fn in_unit(&self) -> bool {
        self.seq % 2 == 1
    }
}

/// One mapped board. The parent creates it; the child maps the descriptor it inherited.
pub struct ProgressBoard {
    words: NonNull<AtomicU64>,
    fd: OwnedFd,
}

// SAFETY: the mapping is only ever accessed through atomics, and lives until drop.
unsafe impl Send for ProgressBoard {}
// SAFETY: as above; every access is an atomic load or store.
unsafe impl Sync for ProgressBoard {}

impl ProgressBoard {
    /// A new, zeroed board (parent side).
    pub fn create() -> io::Result<Self> {
        let fd = memfd_create("switchboard-progress", MemfdFlags::CLOEXEC)?;
        ftruncate(&fd, BYTES as u64)?;
        Self::map(fd)
    }

    /// Maps an inherited board (child side), before confinement.
    pub fn open(fd: OwnedFd) -> io::Result<Self> {
        Self::map(fd)
    }

    fn map(fd: OwnedFd) -> io::Result<Self> {
        // SAFETY: a fresh shared mapping of a file we hold; nothing else aliases it in this
        // process, and it is only accessed as atomics (the other process does the same).
        let ptr = unsafe {
            mmap(
                std::ptr::null_mut(),
                BYTES,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
                &fd,
                0,
            )?
        };
        let words = NonNull::new(ptr.cast::<AtomicU64>())
            .ok_or_else(|| io::Error::other("mmap returned null"))?;
        Ok(Self { words, fd })
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    fn word(&self, i: usize) -> &AtomicU64 {
        debug_assert!(i < WORDS);
        // SAFETY: the page holds BYTES ≥ WORDS × 8 bytes, page-aligned, mapped until drop.
        unsafe { &*self.words.as_ptr().add(i) }
    }

    /// Child: an evaluate request starts (between units, before its first one).
    pub fn request(&self, ordinal: u64) {
        self.word(3).store(ordinal, Ordering::Release);
    }

    /// Child: a unit starts (its data is written while `seq` is even, then `seq` goes odd).
    pub fn begin(&self, unit: u64) {
        self.word(1).store(unit, Ordering::Relaxed);
        self.word(2).store(now_ns(), Ordering::Relaxed);
        self.word(4).store(own_cpu_ns(), Ordering::Relaxed);
        self.word(5).store(0, Ordering::Relaxed);
        self.word(0).fetch_add(1, Ordering::Release);
    }

    /// Child: the running unit starts evaluating rule `index`, so a budget fault or a crash
    /// names the rule (one store).
    pub fn rule(&self, index: usize) {
        self.word(5).store(index as u64 + 1, Ordering::Release);
    }

    /// Child: the unit ended.
    pub fn end(&self) {
        self.word(0).fetch_add(1, Ordering::Release);
    }

    /// Parent: a consistent reading (retried while the child is between the two writes).
    pub fn read(&self) -> Progress {
        loop {
            let seq = self.word(0).load(Ordering::Acquire);
            let unit = self.word(1).load(Ordering::Relaxed);
            let started_ns = self.word(2).load(Ordering::Relaxed);
            let request = self.word(3).load(Ordering::Acquire);
            let started_cpu_ns = self.word(4).load(Ordering::Relaxed);
            let rule = self.word(5).load(Ordering::Acquire);
            std::sync::atomic::fence(Ordering::Acquire);
            if self.word(0).load(Ordering::Relaxed) == seq {
                return Progress {
                    seq,
                    unit,
                    started_ns,
                    request,
                    started_cpu_ns,
                    rule: rule.checked_sub(1).map(|r| r as usize),
                };
            }
        }
    }
}

impl Drop for ProgressBoard {
    fn drop(&mut self) {
        // SAFETY: the mapping was made in `map` with this length and is not used after.
        let _ = unsafe { munmap(self.words.as_ptr().cast(), BYTES) };
    }
}

/// The system-wide monotonic clock, in nanoseconds: the same clock in parent and child.
pub fn now_ns() -> u64 {
    let t = clock_gettime(ClockId::Monotonic);
    (t.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(t.tv_nsec as u64)
}

/// This process's CPU time (every thread), in nanoseconds.
fn own_cpu_ns() -> u64 {
    let t = clock_gettime(ClockId::ProcessCPUTime);
    (t.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(t.tv_nsec as u64)
}

/// The CPU time the calling thread has used, in nanoseconds: what a child's unit cost,
/// whatever else ran on the machine meanwhile.
pub fn thread_cpu_ns() -> u64 {
    let t = clock_gettime(ClockId::ThreadCPUTime);
    (t.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(t.tv_nsec as u64)
}

/// The CPU time (every thread) of process `pid`, in nanoseconds: what a sandbox child has
/// spent, read by its parent to hold a unit to its budget. `None` once it is gone.
pub fn cpu_ns_of(pid: u32) -> Option<u64> {
    let pid = libc::pid_t::try_from(pid).ok()?;
    let mut clock: libc::clockid_t = 0;
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: both calls only write the out-parameters given, which live on this stack.
    let ok = unsafe {
        libc::clock_getcpuclockid(pid, &mut clock) == 0 && libc::clock_gettime(clock, &mut t) == 0
    };
    ok.then(|| {
        (t.tv_sec as u64)
            .saturating_mul(1_000_000_000)
            .saturating_add(t.tv_nsec as u64)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_unit_is_seen_while_it_runs_and_not_after() {
        let board = ProgressBoard::create().expect("memfd");
        assert!(!board.read().in_unit());
        assert_eq!(board.read().request, 0);
        let before = now_ns();
        board.request(2);
        board.begin(7);
        let p = board.read();
        assert!(p.in_unit());
        assert_eq!(p.unit, 7);
        assert_eq!(p.request, 2);
        assert!(p.started_ns >= before);
        assert_eq!(p.rule, None, "no rule before the first");
        board.rule(0);
        assert_eq!(board.read().rule, Some(0));
        board.rule(3);
        assert_eq!(board.read().rule, Some(3));
        board.end();
        let q = board.read();
        assert!(!q.in_unit());
        assert_eq!(q.seq, p.seq + 1);
    }

    #[test]
    fn a_childs_cpu_time_is_read_from_outside_and_waiting_costs_none() {
        let spawn = |script: &str| {
            std::process::Command::new("sh")
                .args(["-c", script])
                .spawn()
                .expect("sh")
        };
        let twice = |pid: u32| {
            let first = cpu_ns_of(pid).expect("a live child's clock");
            std::thread::sleep(std::time::Duration::from_millis(200));
            cpu_ns_of(pid).expect("still alive") - first
        };
        let mut busy = spawn("while :; do :; done");
        let mut idle = spawn("sleep 30");
        let (spent, waited) = (twice(busy.id()), twice(idle.id()));
        assert!(spent > 0, "a busy child's clock moves");
        assert!(
            waited < 5_000_000,
            "a sleeping child spends (almost) nothing: {waited} ns"
        );
        for c in [&mut busy, &mut idle] {
            let _ = c.kill();
            let _ = c.wait();
        }
        assert_eq!(cpu_ns_of(busy.id()), None, "gone once reaped");
    }

    #[test]
    fn two_mappings_of_one_board_see_each_other() {
        let parent = ProgressBoard::create().expect("memfd");
        let dup = parent.fd().try_clone_to_owned().expect("dup");
        let child = ProgressBoard::open(dup).expect("map");
        child.begin(3);
        assert_eq!(parent.read().unit, 3);
        assert!(parent.read().in_unit());
    }
}
