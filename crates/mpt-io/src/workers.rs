//! Worker threads for the per-packet AEAD work of a batch.
//!
//! The event loop stays one thread for everything that changes state (the
//! core's sequence numbers, path choice, replay windows, reordering), so
//! flows keep their order: they are ordered by the single sequence space
//! the loop hands out. What parallelizes is the expensive, stateless part:
//! sealing and opening datagrams, a batch at a time. The batch is split
//! into disjoint byte ranges and handed to a rayon pool (work stealing) in
//! which the loop's own thread is worker 0: it always works on the batch
//! too, so a batch never waits for a helper that is not running (on a busy
//! machine the loop simply does all of it itself).
//!
//! Helpers only take work when the loop alone would be short of a core
//! and the machine has one to spare: every [`GATE_INTERVAL`] the loop
//! computes its demand (its own busy time plus the helpers' work, in
//! cores) and the spare cores (idle time of all CPUs from `/proc/stat`,
//! plus the helpers' work), and engages the helpers when demand reaches
//! [`DEMAND_ON`] and spare reaches [`SPARE_CORES_ON`]; it stops below
//! [`DEMAND_OFF`] or [`SPARE_CORES_OFF`] (hysteresis). A loop that keeps
//! up on its own (shaped links) thus never pays for waking helpers. On a saturated machine (the lab's two
//! daemons and iperf3 on two cores) waking a helper for each batch costs
//! more than it saves, and steals the cycles the carried applications
//! need; `parallel = "always"` skips the gate.
//!
//! Invariants:
//! * with one worker no pool exists and nothing leaves the loop's thread;
//! * while the gate is closed no work is handed out, so helpers sleep;
//! * every span is processed exactly once, and its result lands at its own
//!   index; spans never overlap (checked by the splitting: each recursion
//!   owns a disjoint `&mut` sub-slice);
//! * per-worker counters only ever grow (relaxed atomics, read by status).

pub use mpt_control::status::{PoolStatus, WorkerStatus};
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::batch::Span;

/// Tuning knob: the smallest share of a batch worth handing to another
/// worker, in datagrams (below it, the hand-off costs more than sealing).
pub const MIN_SPLIT_DATAGRAMS: usize = 8;

/// Tuning knobs of the gate: how often it looks, and the spare cores (idle
/// CPU plus the helpers' own work, in cores) that open and close it.
pub const GATE_INTERVAL: Duration = Duration::from_millis(100);
pub const SPARE_CORES_ON: f64 = 0.5;
pub const SPARE_CORES_OFF: f64 = 0.25;
pub const DEMAND_ON: f64 = 0.85;
pub const DEMAND_OFF: f64 = 0.6;

/// When helpers take work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engage {
    /// While the machine has a spare core (see the module documentation).
    Auto,
    /// For every batch large enough to split.
    Always,
}

#[derive(Default)]
struct Counters {
    packets: AtomicU64,
    bytes: AtomicU64,
    jobs: AtomicU64,
    max_job: AtomicU64,
    busy_ns: AtomicU64,
}

/// Whether helpers may take work: see the module documentation.
struct Gate {
    engage: Engage,
    open: bool,
    last_check: Instant,
    /// (idle jiffies, all jiffies) at the last look.
    last_stat: Option<(u64, u64)>,
    last_helper_ns: u64,
    last_loop_idle: Duration,
    /// CPUs this process may use (idle jiffies cover all of them).
    cores: f64,
    spare: f64,
    demand: f64,
}

/// All CPUs' (idle + iowait, total) jiffies from `/proc/stat`.
fn cpu_jiffies() -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let line = text.lines().next()?.strip_prefix("cpu ")?;
    let v: Vec<u64> = line
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    let idle = v.get(3)? + v.get(4).copied().unwrap_or(0);
    Some((idle, v.iter().take(8).sum()))
}

/// The worker pool. See the module documentation.
pub struct Workers {
    pool: Option<rayon::ThreadPool>,
    counters: Vec<Counters>,
    gate: Gate,
}

impl Workers {
    /// `n` workers, the calling thread being the first: call this on the
    /// thread that runs the event loop, once (a thread joins one pool in
    /// its life). `n` is at least 1.
    pub fn new(n: usize, name: &str, engage: Engage) -> io::Result<Self> {
        let n = n.max(1);
        if n == 1 {
            return Ok(Self::with(None, 1, engage));
        }
        let pool = {
            let prefix = format!("mpt-{name}-w");
            Some(
                rayon::ThreadPoolBuilder::new()
                    .num_threads(n)
                    .use_current_thread()
                    .thread_name(move |i| format!("{prefix}{i}"))
                    .build()
                    .map_err(io::Error::other)?,
            )
        };
        Ok(Self::with(pool, n, engage))
    }

    /// The calling thread alone: work runs inline, no thread is made.
    pub fn inline() -> Self {
        Self::with(None, 1, Engage::Auto)
    }

    fn with(pool: Option<rayon::ThreadPool>, n: usize, engage: Engage) -> Self {
        Self {
            pool,
            counters: (0..n).map(|_| Counters::default()).collect(),
            gate: Gate {
                engage,
                open: engage == Engage::Always,
                last_check: Instant::now(),
                last_stat: None,
                last_helper_ns: 0,
                last_loop_idle: Duration::ZERO,
                cores: std::thread::available_parallelism().map_or(1, |c| c.get()) as f64,
                spare: 0.0,
                demand: 0.0,
            },
        }
    }

    /// Re-evaluate the gate if [`GATE_INTERVAL`] passed (cheap otherwise);
    /// call once per loop iteration with the loop's total time spent
    /// waiting for events so far.
    pub fn tick(&mut self, loop_idle: Duration) {
        let g = &mut self.gate;
        if self.pool.is_none() || g.engage == Engage::Always {
            return;
        }
        let elapsed = g.last_check.elapsed();
        if elapsed < GATE_INTERVAL {
            return;
        }
        g.last_check = Instant::now();
        let helper_ns: u64 = self.counters[1..]
            .iter()
            .map(|c| c.busy_ns.load(Ordering::Relaxed))
            .sum();
        let stat = cpu_jiffies();
        if let (Some((i0, t0)), Some((i1, t1))) = (g.last_stat, stat) {
            let idle = if t1 > t0 {
                (i1.saturating_sub(i0)) as f64 / (t1 - t0) as f64 * g.cores
            } else {
                0.0
            };
            let span = elapsed.as_nanos().max(1) as f64;
            let helpers = helper_ns.saturating_sub(g.last_helper_ns) as f64 / span;
            let waited = loop_idle.saturating_sub(g.last_loop_idle).as_nanos() as f64 / span;
            g.spare = idle + helpers;
            g.demand = (1.0 - waited).max(0.0) + helpers;
            g.open = if g.open {
                g.spare >= SPARE_CORES_OFF && g.demand >= DEMAND_OFF
            } else {
                g.spare >= SPARE_CORES_ON && g.demand >= DEMAND_ON
            };
        }
        g.last_stat = stat;
        g.last_helper_ns = helper_ns;
        g.last_loop_idle = loop_idle;
    }

    pub fn count(&self) -> usize {
        self.counters.len()
    }

    /// Run `f(j, bytes)` on every span `j` of `bufs` (spans sorted by
    /// buffer, then offset, and disjoint), putting its result at index `j`
    /// in `results` (which must be as long as `spans`).
    pub fn for_each<R, F>(&self, bufs: &mut [Vec<u8>], spans: &[Span], results: &mut [R], f: &F)
    where
        R: Send,
        F: Fn(usize, &mut [u8]) -> R + Sync,
    {
        assert_eq!(spans.len(), results.len(), "one result per span");
        if spans.is_empty() {
            return;
        }
        let ctx = Ctx {
            counters: &self.counters,
        };
        match &self.pool {
            Some(p) if self.gate.open => {
                p.install(|| by_buffer(&ctx, bufs, 0, 0, spans, results, f))
            }
            _ => leaf(&ctx, bufs, 0, 0, spans, results, f),
        }
    }

    pub fn pool_status(&self) -> PoolStatus {
        PoolStatus {
            workers: self.count(),
            engage: match self.gate.engage {
                Engage::Auto => "auto",
                Engage::Always => "always",
            }
            .into(),
            engaged: self.pool.is_some() && self.gate.open,
            spare_cores: (self.gate.spare * 100.0).round() / 100.0,
            demand_cores: (self.gate.demand * 100.0).round() / 100.0,
            per_worker: self.status(),
        }
    }

    pub fn status(&self) -> Vec<WorkerStatus> {
        self.counters
            .iter()
            .enumerate()
            .map(|(id, c)| WorkerStatus {
                id,
                packets: c.packets.load(Ordering::Relaxed),
                bytes: c.bytes.load(Ordering::Relaxed),
                jobs: c.jobs.load(Ordering::Relaxed),
                max_job: c.max_job.load(Ordering::Relaxed),
                busy_ms: c.busy_ns.load(Ordering::Relaxed) / 1_000_000,
            })
            .collect()
    }
}

struct Ctx<'a> {
    counters: &'a [Counters],
}

impl Ctx<'_> {
    /// Count a piece of a batch for the current worker.
    fn record(&self, spans: &[Span], started: Instant) {
        let packets = spans.len();
        let bytes: u64 = spans.iter().map(|s| s.len as u64).sum();
        let id = rayon::current_thread_index().unwrap_or(0);
        if let Some(c) = self.counters.get(id) {
            let ns = started.elapsed().as_nanos() as u64;
            c.busy_ns.fetch_add(ns, Ordering::Relaxed);
            c.packets.fetch_add(packets as u64, Ordering::Relaxed);
            c.bytes.fetch_add(bytes, Ordering::Relaxed);
            c.jobs.fetch_add(1, Ordering::Relaxed);
            c.max_job.fetch_max(packets as u64, Ordering::Relaxed);
        }
    }
}

/// Process `spans` (all within `bufs`, whose first buffer has index `k0`;
/// the first span has index `j0` of the whole batch) on the current
/// thread, and count them for it.
fn leaf<R, F>(
    ctx: &Ctx,
    bufs: &mut [Vec<u8>],
    k0: usize,
    j0: usize,
    spans: &[Span],
    results: &mut [R],
    f: &F,
) where
    F: Fn(usize, &mut [u8]) -> R,
{
    let started = Instant::now();
    let mut i = 0;
    while i < spans.len() {
        let k = spans[i].buf;
        let j = i + spans[i..].partition_point(|s| s.buf == k);
        apply(
            &mut bufs[k - k0],
            0,
            j0 + i,
            &spans[i..j],
            &mut results[i..j],
            f,
        );
        i = j;
    }
    ctx.record(spans, started);
}

/// Run `f` on each span of `buf` (whose first byte is at offset `base`;
/// the first span has index `j0` of the whole batch).
fn apply<R, F>(buf: &mut [u8], base: usize, j0: usize, spans: &[Span], results: &mut [R], f: &F)
where
    F: Fn(usize, &mut [u8]) -> R,
{
    for (j, (s, r)) in spans.iter().zip(results.iter_mut()).enumerate() {
        let at = s.offset - base;
        *r = f(j0 + j, &mut buf[at..at + s.len]);
    }
}

/// Split at a buffer boundary near the middle; within one buffer, split
/// the buffer itself ([`by_bytes`]).
fn by_buffer<R, F>(
    ctx: &Ctx,
    bufs: &mut [Vec<u8>],
    k0: usize,
    j0: usize,
    spans: &[Span],
    results: &mut [R],
    f: &F,
) where
    R: Send,
    F: Fn(usize, &mut [u8]) -> R + Sync,
{
    if spans.len() < 2 * MIN_SPLIT_DATAGRAMS {
        return leaf(ctx, bufs, k0, j0, spans, results, f);
    }
    let first = spans[0].buf;
    if spans[spans.len() - 1].buf == first {
        return by_bytes(ctx, &mut bufs[first - k0], 0, j0, spans, results, f);
    }
    let mid = spans[spans.len() / 2].buf;
    let mut cut = spans.partition_point(|s| s.buf < mid);
    if cut == 0 {
        cut = spans.partition_point(|s| s.buf <= first);
    }
    let k_cut = spans[cut].buf;
    let (lb, rb) = bufs.split_at_mut(k_cut - k0);
    let (ls, rs) = spans.split_at(cut);
    let (lr, rr) = results.split_at_mut(cut);
    rayon::join(
        || by_buffer(ctx, lb, k0, j0, ls, lr, f),
        || by_buffer(ctx, rb, k_cut, j0 + cut, rs, rr, f),
    );
}

/// All spans lie in `buf`, whose first byte is at offset `base`; the first
/// span has index `j0` of the whole batch.
fn by_bytes<R, F>(
    ctx: &Ctx,
    buf: &mut [u8],
    base: usize,
    j0: usize,
    spans: &[Span],
    results: &mut [R],
    f: &F,
) where
    R: Send,
    F: Fn(usize, &mut [u8]) -> R + Sync,
{
    if spans.len() < 2 * MIN_SPLIT_DATAGRAMS {
        let started = Instant::now();
        apply(buf, base, j0, spans, results, f);
        ctx.record(spans, started);
        return;
    }
    let mid = spans.len() / 2;
    let cut = spans[mid].offset;
    let (lb, rb) = buf.split_at_mut(cut - base);
    let (ls, rs) = spans.split_at(mid);
    let (lr, rr) = results.split_at_mut(mid);
    rayon::join(
        || by_bytes(ctx, lb, base, j0, ls, lr, f),
        || by_bytes(ctx, rb, cut, j0 + mid, rs, rr, f),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spans_over(bufs: &[Vec<u8>], size: usize) -> Vec<Span> {
        bufs.iter()
            .enumerate()
            .flat_map(|(k, b)| {
                (0..b.len() / size).map(move |j| Span {
                    buf: k,
                    offset: j * size,
                    len: size,
                })
            })
            .collect()
    }

    /// A thread joins at most one pool in its life: one thread per pool.
    fn on_own_thread(f: impl FnOnce() + Send + 'static) {
        std::thread::spawn(f).join().unwrap();
    }

    #[test]
    fn every_span_once_with_its_own_result_for_any_worker_count() {
        for n in [1, 2, 3] {
            on_own_thread(move || check_every_span_once(n));
        }
    }

    fn check_every_span_once(n: usize) {
        {
            let w = Workers::new(n, "test", Engage::Always).unwrap();
            // One big buffer (GRO-like) and many small ones.
            for (count, size) in [(1usize, 64 * 100), (40, 64), (3, 64 * 33)] {
                let mut bufs = vec![vec![0u8; size]; count];
                let spans = spans_over(&bufs, 64);
                let mut results = vec![0usize; spans.len()];
                w.for_each(&mut bufs, &spans, &mut results, &|j, d: &mut [u8]| {
                    for b in d.iter_mut() {
                        *b += 1;
                    }
                    j
                });
                assert!(bufs.iter().flatten().all(|b| *b == 1), "n {n}: once each");
                let want: Vec<usize> = (0..spans.len()).collect();
                assert_eq!(results, want, "n {n}: each span sees its own index");
            }
            let st = w.status();
            assert_eq!(st.len(), n);
            let total: u64 = st.iter().map(|s| s.packets).sum();
            assert_eq!(total, 100 + 40 + 99);
        }
    }

    #[test]
    fn results_keep_the_span_order() {
        on_own_thread(check_order);
    }

    fn check_order() {
        let w = Workers::new(2, "order", Engage::Always).unwrap();
        let mut bufs = vec![vec![0u8; 64 * 64]];
        for (j, c) in bufs[0].chunks_mut(64).enumerate() {
            c[0] = j as u8;
        }
        let spans = spans_over(&bufs, 64);
        let mut results = vec![0u8; spans.len()];
        w.for_each(&mut bufs, &spans, &mut results, &|_, d: &mut [u8]| d[0]);
        assert_eq!(results, (0..64).collect::<Vec<u8>>());
    }

    #[test]
    fn auto_starts_closed_and_keeps_all_work_on_the_loop_thread() {
        on_own_thread(|| {
            let w = Workers::new(2, "gate", Engage::Auto).unwrap();
            let mut bufs = vec![vec![0u8; 64 * 64]];
            let spans = spans_over(&bufs, 64);
            let mut results = vec![(); spans.len()];
            w.for_each(&mut bufs, &spans, &mut results, &|_, _: &mut [u8]| ());
            let st = w.pool_status();
            assert!(!st.engaged);
            assert_eq!(st.per_worker[0].packets, 64);
            assert_eq!(st.per_worker[0].jobs, 1);
            assert_eq!(st.per_worker[1].packets, 0);
        });
    }

    #[test]
    fn proc_stat_is_readable_here() {
        let (idle, total) = cpu_jiffies().expect("/proc/stat");
        assert!(total >= idle && total > 0);
    }
}
