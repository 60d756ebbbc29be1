//! # mpt-sys — every system call mpt makes that needs `unsafe`
//!
//! This crate is the only one in the workspace allowed `unsafe` code (the
//! others forbid it through the workspace lints); each block carries a
//! `// SAFETY:` note, enforced by `clippy::undocumented_unsafe_blocks`.
//!
//! * [`tun`] — create the TUN device, read and write packets;
//! * [`mmsg`] — `recvmmsg`/`sendmmsg` with UDP GSO and GRO;
//! * [`packet`] — raw link-layer sockets, precise waits and timer slack for
//!   the lab's link emulator;
//! * [`alloc`] — a counting allocator for no-allocation tests;
//! * [`fs`] — a Unix socket bound with a private mode from the first byte;
//! * [`steer`] — a classic BPF program that picks a `SO_REUSEPORT`
//!   socket per datagram (a concentrator's shards);
//! * [`stamp`] — kernel receive timestamps and the clock's resolution, for
//!   the measuring instruments.
//!
//! Invariant: the API is safe; no function here hands out a raw pointer or
//! requires its caller to uphold anything beyond Rust's own rules.

pub mod alloc;
pub mod fs;
pub mod mmsg;
pub mod packet;
pub mod stamp;
pub mod steer;
pub mod tun;
pub mod txstamp;
