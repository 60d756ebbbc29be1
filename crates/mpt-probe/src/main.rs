//! `mpt-probe send|recv`: paced, train and back-to-back UDP probe streams.
//!
//! * `mpt-probe recv --bind ADDR:PORT [--count N] [--idle-ms MS] [--train K
//!   [--link-overhead B]]` receives until N probes arrived or nothing came
//!   for MS, then prints one JSON summary line (see `mpt_probe::Summary`):
//!   delay, jitter, loss, RFC 4737 reordering, and with trains of K the
//!   bottleneck capacity from their dispersion. Arrivals are stamped by the
//!   kernel (`SO_TIMESTAMPNS`) unless `--user-stamps`.
//! * `mpt-probe stamp [--count N] [--size B]` measures this host's own
//!   stamping: back-to-back packets on the loopback, resolution and jitter
//!   in ns (see `mpt_probe::selftest`).
//!
//! Reports are text; `--json` prints one JSON line instead (and `recv`
//! then prints `ready` first, for scripts).
//! * `mpt-probe send --to ADDR:PORT --count N [--pps R] [--size B]
//!   [--train K]` sends N probes of B bytes: paced at R packets/s, in trains
//!   of K back-to-back packets at R trains/s, or all back-to-back without
//!   `--pps`. VoIP (G.711, 20 ms): `--pps 50 --size 160 --dscp 46` (EF,
//!   as VoIP applications mark their media).
//!
//! Invariants: runs are bounded (count and idle timeout); pacing sleeps until
//! shortly before each departure and spins the rest, so the schedule is kept
//! to microseconds without drifting.

use std::net::{SocketAddr, UdpSocket};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use mpt_probe::{encode, report, selftest, StreamStats, PROBE_HEADER_LEN};
use mpt_sys::{stamp, txstamp};

#[derive(Parser)]
#[command(
    name = "mpt-probe",
    version,
    about = "UDP probe streams with nanosecond timestamps"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    Send(SendArgs),
    Recv(RecvArgs),
    /// Measure this host's packet stamping on the loopback.
    Stamp {
        #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(2..=10_000_000))]
        count: u64,
        /// UDP payload bytes.
        #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(20..=65_507))]
        size: u64,
        /// Packets sent back to back before they are read.
        #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u64).range(2..=1_000))]
        burst: u64,
        #[arg(long)]
        json: bool,
    },
}

#[derive(clap::Args)]
struct SendArgs {
    #[arg(long)]
    to: SocketAddr,
    #[arg(long)]
    count: u64,
    /// Packets (or trains) per second; omit for back-to-back.
    #[arg(long)]
    pps: Option<f64>,
    /// UDP payload bytes (at least 28, the probe header).
    #[arg(long, default_value_t = 160)]
    size: usize,
    /// Packets per back-to-back train.
    #[arg(long, default_value_t = 1)]
    train: u64,
    /// DSCP to mark the probes with (0-63; 46 is EF, VoIP's).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=63))]
    dscp: u8,
    /// Stamp departures in user space only, without the kernel's transmit
    /// stamps (which paced streams otherwise carry, one probe later).
    #[arg(long)]
    user_stamps: bool,
    /// One JSON line instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(clap::Args)]
struct RecvArgs {
    #[arg(long)]
    bind: SocketAddr,
    #[arg(long)]
    count: Option<u64>,
    /// Stop after this long without a packet (after the first).
    #[arg(long, default_value_t = 2000)]
    idle_ms: u64,
    /// Give up if nothing arrives at all within this time.
    #[arg(long, default_value_t = 30_000)]
    start_timeout_ms: u64,
    /// Packets per train of the sender (`send --train`): 2 or more
    /// estimates the bottleneck capacity from the trains' dispersion.
    #[arg(long, default_value_t = 1)]
    train: u64,
    /// Bytes the bottleneck link adds to each IP packet (14 for
    /// Ethernet), for the capacity estimate; the IP and UDP headers are
    /// counted already.
    #[arg(long, default_value_t = 0)]
    link_overhead: u64,
    /// Stamp arrivals in user space after recvmsg instead of taking the
    /// kernel's receive timestamps.
    #[arg(long)]
    user_stamps: bool,
    /// Print `ready`, then one JSON line, instead of text.
    #[arg(long)]
    json: bool,
}

/// Pacing sleeps until this long before a departure and spins the rest:
/// with a 1 ns timer slack, wake-ups come within tens of µs, and a short
/// spin leaves the cores to the rest of an experiment (tuning knob).
const SPIN: Duration = Duration::from_micros(40);
/// Receive buffer: a few hundred back-to-back jumbo frames (tuning knob).
const RECV_BUFFER_BYTES: usize = 8 << 20;

fn wall_ns() -> u64 {
    stamp::realtime_ns()
}

fn send(a: SendArgs) -> std::io::Result<()> {
    let SendArgs {
        to,
        count,
        pps,
        size,
        train,
        dscp,
        user_stamps,
        json,
    } = a;
    if !(PROBE_HEADER_LEN..=65_507).contains(&size) {
        return Err(std::io::Error::other(format!(
            "--size must be {PROBE_HEADER_LEN}..=65507"
        )));
    }
    let bind: SocketAddr = if to.is_ipv4() {
        "0.0.0.0:0".parse().unwrap()
    } else {
        "[::]:0".parse().unwrap()
    };
    let sock = UdpSocket::bind(bind)?;
    // Connected: no route lookup per probe between its stamp and its send.
    sock.connect(to)?;
    if dscp != 0 {
        let s = socket2::SockRef::from(&sock);
        let tos = u32::from(dscp) << 2;
        if to.is_ipv4() {
            s.set_tos_v4(tos)?;
        } else {
            s.set_tclass_v6(tos)?;
        }
    }
    let mut buf = vec![0u8; size];
    mpt_sys::packet::set_timer_slack_ns(1);
    let start = Instant::now();
    let gap = pps
        .filter(|p| *p > 0.0)
        .map(|p| Duration::from_secs_f64(1.0 / p));
    // Paced streams carry the kernel's transmit stamps (two-step, see the
    // library's header); back-to-back ones do not, to keep the error
    // queue's reads out of their sending.
    let mut two_step =
        gap.is_some() && !user_stamps && txstamp::enable_tx_timestamps(&sock).is_ok();
    // The user stamp of the last datagram sent, while its transmit stamp
    // is awaited.
    let mut last_user: Option<u64> = None;
    let mut errors = 0u64;
    for seq in 0..count {
        let mut prev_tx = None;
        if two_step && seq % train.max(1) == 0 {
            // The newest stamp is the last datagram's, if it is not older
            // than that datagram's own user stamp.
            let mut newest: Option<(u32, u64)> = None;
            let read = txstamp::read_tx_stamps(&sock, |id, ns| {
                if newest.is_none_or(|(i, _)| id.wrapping_sub(i) < u32::MAX / 2) {
                    newest = Some((id, ns));
                }
            });
            if read.is_err() {
                two_step = false;
            }
            prev_tx = newest
                .map(|(_, ns)| ns)
                .filter(|ns| last_user.is_some_and(|u| *ns >= u));
        }
        if let Some(g) = gap {
            if seq % train.max(1) == 0 {
                let due = start + g * (seq / train.max(1)) as u32;
                loop {
                    let now = Instant::now();
                    if now >= due {
                        break;
                    }
                    let left = due - now;
                    if left > SPIN {
                        std::thread::sleep(left - SPIN);
                    } else {
                        std::hint::spin_loop();
                    }
                }
            }
        }
        let user = wall_ns();
        // Format 2 with no stamp when the sender has none: the receiver
        // then keeps the user stamp.
        encode(&mut buf, seq, user, prev_tx);
        if sock.send(&buf).is_err() {
            errors += 1;
            last_user = None;
        } else {
            last_user = Some(user);
        }
    }
    let secs = start.elapsed().as_secs_f64();
    if json {
        println!(
            "{}",
            serde_json::json!({ "sent": count, "send_errors": errors, "seconds": secs })
        );
    } else {
        println!("sent {count} probes to {to} in {secs:.3} s ({errors} send errors)");
    }
    Ok(())
}

fn recv(a: RecvArgs) -> std::io::Result<()> {
    let RecvArgs {
        bind,
        count,
        idle_ms,
        start_timeout_ms,
        train,
        link_overhead,
        user_stamps,
        json,
    } = a;
    let sock = UdpSocket::bind(bind)?;
    if !user_stamps {
        stamp::enable_rx_timestamps(&sock)?;
    }
    // Room for trains of jumbo frames; beyond net.core.rmem_max if root.
    stamp::set_recv_buffer(&sock, RECV_BUFFER_BYTES);
    let mut kernel_stamps = 0u64;
    // IP and UDP headers: 20 + 8 (IPv4) or 40 + 8 (IPv6).
    let headers = if bind.is_ipv4() { 28 } else { 48 };
    let mut stats = StreamStats::with_trains(train, headers + link_overhead);
    let mut buf = vec![0u8; 65_536];
    let mut got = 0u64;
    sock.set_read_timeout(Some(Duration::from_millis(start_timeout_ms.max(1))))?;
    if json {
        println!("ready");
    } else {
        eprintln!("listening on {bind}");
    }
    loop {
        match stamp::recv_stamped(&sock, &mut buf) {
            Ok((n, k)) => {
                let user = wall_ns();
                kernel_stamps += u64::from(k.is_some());
                stats.on_datagram(&buf[..n], k.unwrap_or(user));
                got += 1;
                if got == 1 {
                    sock.set_read_timeout(Some(Duration::from_millis(idle_ms.max(1))))?;
                }
                if count.is_some_and(|c| got >= c) {
                    break;
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                break
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    let summary = stats.summary(count);
    let stamps = if kernel_stamps > 0 && kernel_stamps == got {
        "kernel"
    } else if kernel_stamps > 0 {
        "mixed"
    } else {
        "user"
    };
    if json {
        let mut v = serde_json::to_value(&summary).unwrap_or_default();
        v["rx_timestamps"] = stamps.into();
        println!("{v}");
    } else {
        print!("{}", report::summary_text(&summary));
        println!("arrivals stamped by: {stamps}");
    }
    Ok(())
}

/// Send `count` probes back to back over the loopback in bursts of
/// `burst`, reading each burst back with kernel and user stamps.
fn stamp_selftest(count: u64, size: usize, burst: u64, json: bool) -> std::io::Result<()> {
    let rx = UdpSocket::bind("127.0.0.1:0")?;
    stamp::enable_rx_timestamps(&rx)?;
    socket2::SockRef::from(&rx).set_recv_buffer_size(4 << 20)?;
    rx.set_read_timeout(Some(Duration::from_secs(2)))?;
    let tx = UdpSocket::bind("127.0.0.1:0")?;
    tx.connect(rx.local_addr()?)?;
    let mut out = vec![0u8; size];
    let mut buf = vec![0u8; size.max(64)];
    let mut all = Vec::with_capacity(count as usize);
    let mut sent_at = Vec::with_capacity(burst as usize);
    let mut seq = 0u64;
    while seq < count {
        let n = burst.min(count - seq);
        sent_at.clear();
        for _ in 0..n {
            let t = wall_ns();
            encode(&mut out, seq, t, None);
            tx.send(&out)?;
            sent_at.push(t);
            seq += 1;
        }
        for _ in 0..n {
            let (len, k) = stamp::recv_stamped(&rx, &mut buf)?;
            let user = wall_ns();
            let Some(sent) = mpt_probe::decode(&buf[..len]).map(|p| p.send_ns) else {
                continue;
            };
            if let Some(kernel) = k {
                all.push(selftest::Stamps { sent, kernel, user });
            }
        }
    }
    let r = selftest::reduce(
        &all,
        burst as usize,
        size,
        stamp::clock_resolution_ns(),
        stamp::clock_granularity_ns(100_000),
    );
    if json {
        println!("{}", serde_json::to_string(&r).unwrap_or_default());
    } else {
        print!("{}", report::stamp_text(&r));
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Send(a) => send(a),
        Cmd::Recv(a) => recv(a),
        Cmd::Stamp {
            count,
            size,
            burst,
            json,
        } => stamp_selftest(count, size as usize, burst, json),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}
