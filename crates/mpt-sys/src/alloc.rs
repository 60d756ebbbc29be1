//! A global allocator that counts allocations made on threads that ask
//! for it, for tests that prove a code path allocates nothing.
//!
//! Invariant: every call is forwarded to the system allocator unchanged;
//! counting is per thread (tests run in parallel) and off by default.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
    static NET_BYTES: Cell<isize> = const { Cell::new(0) };
}

/// Install with `#[global_allocator] static A: CountingAlloc = CountingAlloc;`.
pub struct CountingAlloc;

impl CountingAlloc {
    /// Start or stop counting on this thread; starting resets the count.
    pub fn count_here(on: bool) {
        if on {
            ALLOCATIONS.with(|a| a.set(0));
            NET_BYTES.with(|a| a.set(0));
        }
        COUNTING.with(|c| c.set(on));
    }

    /// Allocations (and reallocations) counted on this thread.
    pub fn counted() -> usize {
        ALLOCATIONS.with(Cell::get)
    }

    /// Bytes allocated minus bytes freed on this thread while counting
    /// (memory a structure built in that time holds).
    pub fn net_bytes() -> isize {
        NET_BYTES.with(Cell::get)
    }
}

fn counting() -> bool {
    // `try_with`: thread-local storage may be gone while a thread exits.
    COUNTING.try_with(Cell::get).unwrap_or(false)
}

fn count_one() {
    if counting() {
        let _ = ALLOCATIONS.try_with(|a| a.set(a.get() + 1));
    }
}

fn add_bytes(n: isize) {
    if counting() {
        let _ = NET_BYTES.try_with(|a| a.set(a.get() + n));
    }
}

// SAFETY: forwards to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count_one();
        add_bytes(layout.size() as isize);
        // SAFETY: the caller upholds `alloc`'s contract, which we pass on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        add_bytes(-(layout.size() as isize));
        // SAFETY: `ptr` came from `System` through us with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count_one();
        add_bytes(new_size as isize - layout.size() as isize);
        // SAFETY: as for `dealloc`, and the caller upholds `realloc`'s
        // contract for `new_size`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}
