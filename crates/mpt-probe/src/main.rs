//! `mpt-probe send|recv`: paced, train and back-to-back UDP probe streams.
//!
//! * `mpt-probe recv --bind ADDR:PORT [--count N] [--idle-ms MS] [--train K
//!   [--link-overhead B]]` receives until N probes arrived or nothing came
//!   for MS, then prints one JSON summary line (see `mpt_probe::Summary`):
//!   delay, jitter, loss, RFC 4737 reordering, and with trains of K the
//!   bottleneck capacity from their dispersion.
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
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::{Parser, Subcommand};
use mpt_probe::{encode, StreamStats, PROBE_HEADER_LEN};

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
    Send {
        #[arg(long)]
        to: SocketAddr,
        #[arg(long)]
        count: u64,
        /// Packets (or trains) per second; omit for back-to-back.
        #[arg(long)]
        pps: Option<f64>,
        /// UDP payload bytes (at least 20).
        #[arg(long, default_value_t = 160)]
        size: usize,
        /// Packets per back-to-back train.
        #[arg(long, default_value_t = 1)]
        train: u64,
        /// DSCP to mark the probes with (0-63; 46 is EF, VoIP's).
        #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=63))]
        dscp: u8,
    },
    Recv {
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
    },
}

fn wall_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

fn send(
    to: SocketAddr,
    count: u64,
    pps: Option<f64>,
    size: usize,
    train: u64,
    dscp: u8,
) -> std::io::Result<()> {
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
    let start = Instant::now();
    let gap = pps
        .filter(|p| *p > 0.0)
        .map(|p| Duration::from_secs_f64(1.0 / p));
    let mut errors = 0u64;
    for seq in 0..count {
        if let Some(g) = gap {
            if seq % train.max(1) == 0 {
                let due = start + g * (seq / train.max(1)) as u32;
                loop {
                    let now = Instant::now();
                    if now >= due {
                        break;
                    }
                    let left = due - now;
                    if left > Duration::from_micros(200) {
                        std::thread::sleep(left - Duration::from_micros(150));
                    } else {
                        std::hint::spin_loop();
                    }
                }
            }
        }
        encode(&mut buf, seq, wall_ns());
        if sock.send_to(&buf, to).is_err() {
            errors += 1;
        }
    }
    println!(
        "{}",
        serde_json::json!({ "sent": count, "send_errors": errors, "seconds": start.elapsed().as_secs_f64() })
    );
    Ok(())
}

fn recv(
    bind: SocketAddr,
    count: Option<u64>,
    idle_ms: u64,
    start_timeout_ms: u64,
    train: u64,
    link_overhead: u64,
) -> std::io::Result<()> {
    let sock = UdpSocket::bind(bind)?;
    // IP and UDP headers: 20 + 8 (IPv4) or 40 + 8 (IPv6).
    let headers = if bind.is_ipv4() { 28 } else { 48 };
    let mut stats = StreamStats::with_trains(train, headers + link_overhead);
    let mut buf = vec![0u8; 65_536];
    let mut got = 0u64;
    sock.set_read_timeout(Some(Duration::from_millis(start_timeout_ms.max(1))))?;
    println!("ready");
    loop {
        match sock.recv_from(&mut buf) {
            Ok((n, _)) => {
                stats.on_datagram(&buf[..n], wall_ns());
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
    println!(
        "{}",
        serde_json::to_string(&stats.summary(count)).unwrap_or_default()
    );
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Send {
            to,
            count,
            pps,
            size,
            train,
            dscp,
        } => send(to, count, pps, size, train, dscp),
        Cmd::Recv {
            bind,
            count,
            idle_ms,
            start_timeout_ms,
            train,
            link_overhead,
        } => recv(bind, count, idle_ms, start_timeout_ms, train, link_overhead),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}
