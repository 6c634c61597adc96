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
/// 3 = the ordinal of the evaluate request the child runs (1 for its first).
const WORDS: usize = 4;

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
        self.word(0).fetch_add(1, Ordering::Release);
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
            std::sync::atomic::fence(Ordering::Acquire);
            if self.word(0).load(Ordering::Relaxed) == seq {
                return Progress {
                    seq,
                    unit,
                    started_ns,
                    request,
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
        board.end();
        let q = board.read();
        assert!(!q.in_unit());
        assert_eq!(q.seq, p.seq + 1);
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
