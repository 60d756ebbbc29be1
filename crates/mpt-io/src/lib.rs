//! # mpt-io — the Linux I/O layer of mpt
//!
//! Everything here touches the operating system, through safe calls only
//! (`unsafe` is forbidden here; the system calls that need it are in
//! `mpt-sys`):
//!
//! * [`seam`] — the traits between the event loop and the OS: TUN device,
//!   path sockets (batch-first) and clock;
//! * [`engine`] — the event loop's work, generic over the seam: TUN reads
//!   to sealed datagrams, datagrams to TUN writes, timers;
//! * [`driver`] — the Linux loop around the engine: mio readiness,
//!   signals, control requests, status;
//! * [`stop`] — a loop's stop after a signal: what is queued leaves first;
//! * [`linux`] — the seam on the real TUN, UDP sockets and clocks;
//! * [`mem`] — the seam in memory and virtual time, for tests;
//! * [`batch`] — receive buffers and transmit slots as plain memory;
//! * [`workers`] — threads that seal and open a batch in parallel;
//! * [`hub`], [`hub_driver`], [`shards`] — a concentrator's loop, and its
//!   threads (one shard of the peers each);
//! * [`offload`] (`tcp`, `udp`), [`tunwrite`] — TUN segmentation and
//!   coalescing offloads (virtio-net header, TSO/USO, GRO);
//! * [`udp`] — bind the path sockets, and size their send buffers;
//! * [`hold`] — datagrams a socket refused for now, sent when it takes
//!   them (the local interface's queue pushing back);
//! * [`netcfg`] — addresses, MTU, link state, routes;
//! * [`control`] — the control socket for `mpt status`;
//! * [`capture`] — packet capture to pcapng (`mpt capture`);
//! * [`events`] — the core's events as log lines, rate-limited;
//! * [`tun`], [`packet`] — re-exported from `mpt-sys`.
//!
//! Invariant: this crate decides nothing about packets; every policy lives
//! in `mpt-core`, which this crate calls with the current time and bytes.

pub mod batch;
pub mod by_peer;
pub mod capture;
pub mod capture_file;
pub mod control;
pub mod driver;
pub mod engine;
pub mod events;
pub mod flush;
pub mod hold;
pub mod hub;
pub mod hub_driver;
pub mod linux;
pub mod mem;
pub mod netcfg;
pub mod offload;
pub mod pathctl;
pub mod seam;
pub mod shards;
pub mod stop;
pub mod tunwrite;
pub mod udp;
pub mod workers;

pub use mpt_sys::{packet, tun};
