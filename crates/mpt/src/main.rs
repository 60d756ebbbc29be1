//! `mpt` — command-line entry: `up`, `check`, `status`.
//!
//! Invariants: every failure ends with a one-paragraph message on stderr and
//! a non-zero exit status (1 for runtime failures, 2 for usage and
//! configuration errors); nothing here panics on user input.

mod daemon;
mod keys;
mod status;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use mpt_config::Config;

#[derive(Parser)]
#[command(
    name = "mpt",
    version,
    about = "Network-layer multipath tunnel for Linux"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Bring the tunnel up and run in the foreground until SIGINT/SIGTERM.
    Up {
        /// Configuration file (TOML).
        #[arg(short, long)]
        config: PathBuf,
        /// Log filter (error, warn, info, debug, trace, or a tracing
        /// directive); overrides MPT_LOG.
        #[arg(long)]
        log: Option<String>,
    },
    /// Validate a configuration file without touching the system.
    Check {
        /// Configuration file (TOML) to validate.
        #[arg(short, long)]
        config: PathBuf,
    },
    /// Write a new private key (base64) to stdout, or to a new file with
    /// mode 0600.
    Genkey {
        /// Write the key to this new file (mode 0600; never overwrites)
        /// instead of standard output.
        #[arg(short, long)]
        out: Option<PathBuf>,
    },
    /// Print the public key of a private key read from stdin or a file.
    Pubkey {
        /// Private key file to read (default: standard input).
        #[arg(short, long)]
        input: Option<PathBuf>,
    },
    /// Show the state of a running tunnel.
    Status {
        /// Configuration file of the tunnel (to find its control socket).
        #[arg(short, long, conflicts_with = "socket")]
        config: Option<PathBuf>,
        /// Control socket path.
        #[arg(short, long)]
        socket: Option<PathBuf>,
        /// Print the raw JSON document.
        #[arg(long, conflicts_with = "watch")]
        json: bool,
        /// Redraw the human view in place every --interval seconds, with
        /// the rates of the last second, until interrupted.
        #[arg(long)]
        watch: bool,
        /// Seconds between two redraws of --watch.
        #[arg(long, default_value_t = 1.0, requires = "watch")]
        interval: f64,
        /// Stop --watch after this many redraws.
        #[arg(long, requires = "watch")]
        count: Option<u64>,
    },
}

fn load(path: &std::path::Path) -> Result<Config, ExitCode> {
    Config::load(path).map_err(|errs| {
        for e in &errs {
            eprintln!("error: {e}");
        }
        eprintln!("{} error(s) in {}", errs.len(), path.display());
        ExitCode::from(2)
    })
}

fn done(r: std::io::Result<()>) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Check { config } => match load(&config) {
            Ok(c) => {
                println!("{}", status::describe_config(&c));
                ExitCode::SUCCESS
            }
            Err(code) => code,
        },
        Cmd::Genkey { out } => done(keys::genkey(out.as_deref())),
        Cmd::Pubkey { input } => done(keys::pubkey(input.as_deref())),
        Cmd::Up { config, log } => {
            daemon::init_logging(log.as_deref());
            let cfg = match load(&config) {
                Ok(c) => c,
                Err(code) => return code,
            };
            match daemon::run(cfg) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::from(1)
                }
            }
        }
        Cmd::Status {
            config,
            socket,
            json,
            watch,
            interval,
            count,
        } => {
            let sock = match (socket, config) {
                (Some(s), _) => s,
                (None, Some(c)) => match Config::load(&c) {
                    Ok(cfg) => cfg.tunnel.control_socket,
                    // Edited into an invalid state after the daemon
                    // started: its socket is still where the file says.
                    Err(errs) => match Config::control_socket_of(&c) {
                        Ok(s) => {
                            eprintln!(
                                "warning: {} has {} error(s) now (see `mpt check -c {}`); asking the daemon at {}",
                                c.display(),
                                errs.len(),
                                c.display(),
                                s.display()
                            );
                            s
                        }
                        Err(e) => {
                            eprintln!("error: cannot find the control socket: {e}; give it with -s SOCKET");
                            return ExitCode::from(2);
                        }
                    },
                },
                (None, None) => match status::default_socket() {
                    Ok(s) => s,
                    Err(e) => {
                        eprintln!("error: {e}");
                        return ExitCode::from(2);
                    }
                },
            };
            let shown = if watch {
                if !(0.1..=3600.0).contains(&interval) {
                    eprintln!("error: --interval must be within 0.1..3600 seconds");
                    return ExitCode::from(2);
                }
                status::watch(&sock, std::time::Duration::from_secs_f64(interval), count)
            } else {
                status::show(&sock, json)
            };
            match shown {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::from(1)
                }
            }
        }
    }
}
