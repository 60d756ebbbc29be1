//! Which running daemon a command asks: the socket given with `-s`, the
//! one a configuration file names (even a file edited into errors since
//! the daemon started), or the only one in the default directory.
//!
//! Invariants: a command never guesses between several daemons; every
//! failure says what to give instead (exit 2, a usage error).

use std::io;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use mpt_config::Config;

/// The control socket to ask: `-s`, or the one a configuration file
/// names, or the only one under /run/mpt.
pub fn control_socket(
    socket: Option<PathBuf>,
    config: Option<PathBuf>,
) -> Result<PathBuf, ExitCode> {
    match (socket, config) {
        (Some(s), _) => Ok(s),
        (None, Some(c)) => match Config::load(&c) {
            Ok(cfg) => Ok(cfg.tunnel.control_socket),
            // Edited into an invalid state after the daemon started: its
            // socket is still where the file says.
            Err(errs) => match Config::control_socket_of(&c) {
                Ok(s) => {
                    eprintln!(
                        "warning: {} has {} error(s) now (see `mpt check -c {}`); asking the daemon at {}",
                        c.display(),
                        errs.len(),
                        c.display(),
                        s.display()
                    );
                    Ok(s)
                }
                Err(e) => {
                    eprintln!("error: cannot find the control socket: {e}; give it with -s SOCKET");
                    Err(ExitCode::from(2))
                }
            },
        },
        (None, None) => default_socket().map_err(|e| {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }),
    }
}

/// The control socket to use when none was named: the only one in the
/// default directory.
pub fn default_socket() -> io::Result<PathBuf> {
    let dir = Path::new(mpt_config::defaults::CONTROL_DIR);
    let socks: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "sock"))
                .collect()
        })
        .unwrap_or_default();
    match socks.len() {
        1 => Ok(socks[0].clone()),
        0 => Err(io::Error::other(format!(
            "no running tunnel found in {}; name one with -c FILE or -s SOCKET",
            dir.display()
        ))),
        _ => Err(io::Error::other(format!(
            "several tunnels run ({}); name one with -c FILE or -s SOCKET",
            socks
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}
