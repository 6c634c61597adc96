//! A memory budget per unit, held in the child by its allocator.
//!
//! Why: a rule that grows memory without bound (`[range(1e9)]`, a string doubled in a loop)
//! costs the machine more than its CPU while it runs — page zeroing, allocator work, memory
//! bandwidth — and more again when its child is torn down, which CPU budgets and nice values
//! cannot hold back (docs/benchmarks.md, "Noisy neighbour"). The child's allocator counts the
//! bytes a unit holds; past the unit's budget the child exits at once with
//! [`EXIT_CODE`], and the parent faults that unit `budget_exceeded`, naming the rule it ran.
//!
//! The binary installs [`Budgeted`] as its global allocator. Outside a unit (the router
//! process, a child between units, building the envelope) the budget is off and the wrapper
//! costs one relaxed load per call.

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering};

/// The exit code of a child whose unit went over its memory budget.
pub const EXIT_CODE: i32 = 86;

/// The running unit's budget in bytes; 0 while no unit runs.
static LIMIT: AtomicUsize = AtomicUsize::new(0);
/// Bytes allocated and not freed since the unit started (frees of older memory make it
/// smaller, even negative: they are credits).
static HELD: AtomicIsize = AtomicIsize::new(0);

/// The global allocator `A`, with the per-unit budget on top.
pub struct Budgeted<A>(pub A);

/// A unit starts: from now on it may hold `limit_bytes` more than before (0: no budget).
pub fn start_unit(limit_bytes: usize) {
    HELD.store(0, Ordering::Relaxed);
    LIMIT.store(limit_bytes, Ordering::Relaxed);
}

/// The unit ended: the budget is off until the next one.
pub fn end_unit() {
    LIMIT.store(0, Ordering::Relaxed);
}

/// Counts `grow` bytes against the running unit, if any; past its budget the child exits.
///
/// A child parses and evaluates on one thread (its main thread only waits for it), so the
/// count is a plain load and store, not a locked read-modify-write: every allocation and
/// free of a child goes through here, and `fetch_add` made the count about a fifth of a
/// child's CPU time (docs/benchmarks.md, "Building only what rules read").
#[inline(always)]
fn charge(grow: usize) {
    let limit = LIMIT.load(Ordering::Relaxed);
    if limit == 0 {
        return;
    }
    let held = HELD.load(Ordering::Relaxed) + grow as isize;
    HELD.store(held, Ordering::Relaxed);
    if held > limit as isize {
        // Nothing may allocate here (this is the allocator): no message, no unwinding.
        // SAFETY: `_exit` ends the process at once; it is async-signal-safe.
        unsafe { libc::_exit(EXIT_CODE) };
    }
}

#[inline(always)]
fn credit(shrink: usize) {
    if LIMIT.load(Ordering::Relaxed) != 0 {
        let held = HELD.load(Ordering::Relaxed) - shrink as isize;
        HELD.store(held, Ordering::Relaxed);
    }
}

// SAFETY: every call is forwarded to `A` unchanged; the wrapper only counts.
unsafe impl<A: GlobalAlloc> GlobalAlloc for Budgeted<A> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        charge(layout.size());
        // SAFETY: the caller's contract is `A`'s.
        unsafe { self.0.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        charge(layout.size());
        // SAFETY: the caller's contract is `A`'s.
        unsafe { self.0.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        credit(layout.size());
        // SAFETY: the caller's contract is `A`'s.
        unsafe { self.0.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > layout.size() {
            charge(new_size - layout.size());
        } else {
            credit(layout.size() - new_size);
        }
        // SAFETY: the caller's contract is `A`'s.
        unsafe { self.0.realloc(ptr, layout, new_size) }
    }
}
