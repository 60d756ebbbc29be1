//! `mpt capture`: ask a running tunnel to write what it does to a pcapng
//! file (nanosecond timestamps), wait until the capture ends (its count,
//! its duration, Ctrl-C, or `mpt capture --stop` from elsewhere), and say
//! what was written and dropped.
//!
//! The daemon writes the file itself, on a thread of its own (a fresh file
//! of mode 0600 renamed over any regular file there: it holds the inner
//! traffic in clear; links, FIFOs and devices are refused), so its path is
//! made absolute here. Under the systemd unit (`PrivateTmp=yes`) a path in
//! `/tmp` is the service's private `/tmp`: capture to `/var/lib/mpt` or
//! another directory the unit may write.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::status::ask;
use mpt_control::{CaptureState, Request as Ask};

/// How often the capture's progress is asked for (tuning knob).
const POLL: Duration = Duration::from_millis(100);

/// What to capture.
pub struct Request<'a> {
    pub file: &'a Path,
    pub tun: bool,
    pub paths: &'a [String],
    pub count: Option<u64>,
    pub seconds: Option<f64>,
}

fn absolute(file: &Path) -> io::Result<PathBuf> {
    if file.is_absolute() {
        return Ok(file.to_path_buf());
    }
    Ok(std::env::current_dir()?.join(file))
}

/// Run a capture to its end; print its counters.
pub fn run(sock: &Path, r: &Request<'_>, json_out: bool) -> io::Result<()> {
    let file = absolute(r.file)?;
    let spec = mpt_control::CaptureSpec {
        file: file.display().to_string(),
        tun: r.tun,
        paths: r.paths.to_vec(),
        peer: None,
        count: r.count,
        seconds: r.seconds,
    };
    ask(sock, &Ask::CaptureStart(spec))?;
    // The daemon creates the file on its writer thread: wait until it did,
    // or said why not.
    let mut first = state(sock)?;
    for _ in 0..50 {
        if first.opened || first.failed.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
        first = state(sock)?;
    }
    if let Some(e) = first.failed {
        return Err(io::Error::other(format!("capture failed: {e}")));
    }
    if !json_out {
        eprintln!(
            "capturing to {} ({}); Ctrl-C stops",
            file.display(),
            match (r.count, r.seconds) {
                (Some(n), Some(s)) => format!("{n} packets or {s} s"),
                (Some(n), None) => format!("{n} packets"),
                (None, Some(s)) => format!("{s} s"),
                (None, None) => "until stopped".into(),
            }
        );
    }
    let interrupted = Arc::new(AtomicBool::new(false));
    let _ = signal_hook::flag::register(signal_hook::consts::SIGINT, Arc::clone(&interrupted));
    let _ = signal_hook::flag::register(signal_hook::consts::SIGTERM, Arc::clone(&interrupted));
    let mut stop_sent = false;
    let last = loop {
        std::thread::sleep(POLL);
        if interrupted.load(Ordering::Relaxed) && !stop_sent {
            ask(sock, &Ask::CaptureStop)?;
            stop_sent = true;
        }
        let v = state(sock)?;
        if v.closed {
            break v;
        }
    };
    if let Some(e) = &last.failed {
        return Err(io::Error::other(format!("capture failed: {e}")));
    }
    if json_out {
        println!(
            "{}",
            serde_json::to_string(&last).map_err(io::Error::other)?
        );
    } else {
        println!(
            "{} packets written to {}, {} dropped (the writer lagged)",
            last.written,
            file.display(),
            last.dropped
        );
    }
    Ok(())
}

/// How the capture stands, as the daemon says.
fn state(sock: &Path) -> io::Result<CaptureState> {
    mpt_control::answer(ask(sock, &Ask::CaptureStatus)?).map_err(io::Error::other)
}

/// `mpt capture --stop`: end the capture under way.
pub fn stop(sock: &Path, json_out: bool) -> io::Result<()> {
    let v = ask(sock, &Ask::CaptureStop)?;
    if json_out {
        println!("{v}");
    } else {
        println!("capture stopped");
    }
    Ok(())
}
