//! # mpt-io — the Linux I/O layer of mpt
//!
//! Everything here touches the operating system, and this crate is the only
//! place in the workspace with `unsafe` code (each block carries a
//! `// SAFETY:` note):
//!
//! * [`tun`] — create the TUN device, read and write packets;
//! * [`batch`] — recvmmsg/sendmmsg batches of datagrams;
//! * [`udp`] — bind the path sockets;
//! * [`netcfg`] — addresses, MTU, link state, routes;
//! * [`control`] — the control socket for `mpt status`;
//! * [`driver`] — the event loop that feeds the sans-IO core;
//! * [`packet`] — raw link-layer sockets and precise waits for the lab's
//!   link emulator.
//!
//! Invariant: this crate decides nothing about packets; every policy lives
//! in `mpt-core`, which this crate calls with the current time and bytes.

pub mod batch;
pub mod control;
pub mod driver;
pub mod events;
pub mod netcfg;
pub mod offload;
pub mod offload_udp;
pub mod packet;
pub mod tun;
pub mod tunwrite;
pub mod udp;
pub mod workers;
