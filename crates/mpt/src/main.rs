//! `mpt` — command-line entry: `up`, `check`, `status`, keys, and the
//! shell completions and man page generated from these definitions.
//!
//! Invariants: every failure ends with a one-paragraph message on stderr and
//! a non-zero exit status (1 for runtime failures, 2 for usage and
//! configuration errors); nothing here panics on user input.

mod capturecmd;
mod check;
mod concentrator;
mod daemon;
mod failover;
mod keys;
mod metrics;
mod metrics_http;
mod metrics_peers;
mod pathcmd;
mod peercmd;
mod reload;
mod reload_paths;
mod resolve;
mod socket;
mod status;
mod status_brief;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};
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

/// Which running tunnel to ask, and how to print the answer.
#[derive(clap::Args)]
struct DaemonArgs {
    /// Configuration file of the tunnel (to find its control socket).
    #[arg(short, long, conflicts_with = "socket")]
    config: Option<PathBuf>,
    /// Control socket path.
    #[arg(short, long)]
    socket: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
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
    /// Make a running tunnel read its configuration file again (as SIGHUP
    /// does): paths added, removed or moved, per-path remote, weight,
    /// rate_mbit, backup, keepalive_ms and dead_ms, routes,
    /// scheduler.queue_ms and the QoS classes change at once, without
    /// dropping the session; what needs a restart is listed (exit 3). A
    /// file with errors, or a change that fails, changes nothing of that
    /// part (exit 1). A concentrator adds, removes and updates peers
    /// (allowed IPs, pre-shared key: the peer's sessions end, limits).
    Reload {
        #[command(flatten)]
        daemon: DaemonArgs,
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
        /// A concentrator: this peer (its public key or name) in full.
        #[arg(long, conflicts_with = "watch")]
        peer: Option<String>,
        /// Everything: estimators, queues, QoS classes, recovery, workers
        /// (the default view is one screen).
        #[arg(short, long)]
        verbose: bool,
    },
    /// A running concentrator's peers: `mpt peer add --public-key KEY
    /// --allowed-ips 10.200.9.2/32 [--name N] [--routes NET,...]
    /// [--preshared-key-file F]`, or `mpt peer remove KEY|NAME`. The other
    /// peers are not disturbed; add the peer to the configuration too, or
    /// it is gone at the next restart (and `mpt reload` removes it).
    Peer {
        #[command(flatten)]
        daemon: DaemonArgs,
        #[arg(value_parser = ["add", "remove"])]
        action: String,
        /// With `remove`: the peer's public key or name.
        who: Option<String>,
        #[arg(long)]
        name: Option<String>,
        #[arg(long)]
        public_key: Option<String>,
        #[arg(long, value_delimiter = ',')]
        allowed_ips: Vec<String>,
        #[arg(long, value_delimiter = ',')]
        routes: Vec<String>,
        #[arg(long)]
        preshared_key_file: Option<PathBuf>,
    },
    /// List the paths of a running tunnel (`mpt path list`), or take one
    /// out of use and back (`mpt path NAME down`, `mpt path NAME up`): a
    /// path that is down carries no data but keeps its probes.
    Path {
        #[command(flatten)]
        daemon: DaemonArgs,
        /// On a concentrator: the peer whose paths these are (its name or
        /// public key).
        #[arg(long)]
        peer: Option<String>,
        /// `list`, or the name of a path.
        target: String,
        /// With a path's name: `down`, `up`, or `set` (with KEY VALUE).
        #[arg(value_parser = ["up", "down", "set"])]
        action: Option<String>,
        /// With `set`: `rate_mbit` (N Mbit/s, or none), `weight` (1 to 1000; static weights only), `backup` (true or false) or `remote` (address:port).
        #[arg(value_parser = ["rate_mbit", "weight", "backup", "remote"], requires = "value")]
        key: Option<String>,
        /// The new value.
        value: Option<String>,
    },
    /// Write what a running tunnel does to a pcapng file with nanosecond
    /// timestamps: the TUN's inner packets (each with its path, tunnel
    /// sequence, send timestamp and one-way delay as a comment) and each
    /// named path's datagrams. Ends after --count packets, --seconds, or
    /// Ctrl-C. The daemon's own thread writes the file; packets it cannot
    /// keep up with are left out and counted, and the tunnel never waits
    /// for it. Under the systemd unit, write to /var/lib/mpt (its /tmp is
    /// private).
    Capture {
        #[command(flatten)]
        daemon: DaemonArgs,
        /// Capture the TUN side (inner packets, in clear).
        #[arg(long)]
        tun: bool,
        /// Capture this path's datagrams (repeat for several).
        #[arg(long = "path", value_name = "NAME")]
        paths: Vec<String>,
        /// The pcapng file to write: always a fresh file of mode 0600
        /// (one already there is replaced, not reused); a link, FIFO,
        /// socket, device or directory there is refused.
        #[arg(
            short = 'w',
            long = "write",
            value_name = "FILE",
            required_unless_present = "stop"
        )]
        file: Option<PathBuf>,
        /// Stop after this many packets.
        #[arg(long)]
        count: Option<u64>,
        /// Stop after this many seconds.
        #[arg(long)]
        seconds: Option<f64>,
        /// End the capture under way (started elsewhere).
        #[arg(long, conflicts_with_all = ["file", "tun", "paths", "count", "seconds"])]
        stop: bool,
    },
    /// Print a shell completion script to stdout (e.g. `mpt completions
    /// bash > /etc/bash_completion.d/mpt`).
    Completions {
        /// Shell to complete for.
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff) to stdout (e.g. `mpt man > mpt.1`), or
    /// write it and one page per subcommand into a directory.
    Man {
        /// Write mpt.1 and mpt-SUBCOMMAND.1 into this directory (e.g.
        /// /usr/share/man/man1) instead of printing mpt.1.
        #[arg(long)]
        dir: Option<PathBuf>,
    },
}

/// Sections of the man page that `--help` has no place for (roff).
const MAN_EXTRA: &str = r#".SH "EXIT STATUS"
.TP
\fB0\fR
Success (\fBup\fR: stopped by SIGINT or SIGTERM).
.TP
\fB1\fR
A runtime failure: the TUN device, a socket, a route or the control socket
could not be set up, or the daemon is not running (\fBstatus\fR).
.TP
\fB2\fR
A usage or configuration error: every error in the file is listed with its
line; restarting cannot fix it (the systemd unit does not retry it).
.SH FILES
.TP
\fI/etc/mpt/NAME.toml\fR
The configuration of tunnel NAME, as the unit \fBmpt@NAME.service\fR reads it
(reference: docs/config.md).
.TP
\fI/run/mpt/NAME.sock\fR
The control socket that \fBmpt status\fR asks (\fBtunnel.control_socket\fR).
.SH ENVIRONMENT
.TP
\fBMPT_LOG\fR
Log filter of \fBmpt up\fR (error, warn, info, debug, trace, or a tracing
directive); \fB\-\-log\fR overrides it.
"#;

/// The man page of `mpt`, from the same definitions as `--help`, with
/// the exit codes, files and environment; with `dir`, written there with
/// one page per subcommand (`mpt-up.1`, ...), which the main page names.
fn man_pages(dir: Option<&std::path::Path>) -> std::io::Result<()> {
    use std::io::Write;
    let cmd = Cli::command();
    let mut page = Vec::new();
    clap_mangen::Man::new(cmd.clone()).render(&mut page)?;
    page.extend_from_slice(MAN_EXTRA.as_bytes());
    let Some(dir) = dir else {
        return std::io::stdout().lock().write_all(&page);
    };
    let at = |e: std::io::Error, p: &std::path::Path| {
        std::io::Error::new(e.kind(), format!("cannot write {}: {e}", p.display()))
    };
    let path = dir.join("mpt.1");
    std::fs::write(&path, &page).map_err(|e| at(e, &path))?;
    for sub in cmd.get_subcommands() {
        let name = format!("mpt-{}", sub.get_name());
        let sub = sub
            .clone()
            .display_name(name.clone())
            .bin_name(format!("mpt {}", sub.get_name()));
        let mut page = Vec::new();
        clap_mangen::Man::new(sub)
            .title(name.clone())
            .render(&mut page)?;
        let path = dir.join(format!("{name}.1"));
        std::fs::write(&path, &page).map_err(|e| at(e, &path))?;
    }
    Ok(())
}

/// Read and validate a file, and resolve the hostnames its paths name
/// as `remote` with the system resolver (exit 2 on either failing).
fn load(path: &std::path::Path) -> Result<Config, ExitCode> {
    let mut cfg = Config::load(path).map_err(|errs| {
        for e in &errs {
            eprintln!("error: {e}");
        }
        eprintln!("{} error(s) in {}", errs.len(), path.display());
        ExitCode::from(2)
    })?;
    cfg.resolve_remotes(|host| {
        std::net::ToSocketAddrs::to_socket_addrs(host).map(Iterator::collect)
    })
    .map_err(|errs| {
        for e in &errs {
            eprintln!("error: {}: {e}", path.display());
        }
        ExitCode::from(2)
    })?;
    Ok(cfg)
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
                println!("{}", check::describe_config(&c));
                if let Some(w) = c
                    .metrics_listen
                    .as_ref()
                    .and_then(metrics::exposure_warning)
                {
                    eprintln!("warning: {w}");
                }
                ExitCode::SUCCESS
            }
            Err(code) => code,
        },
        Cmd::Reload {
            daemon:
                DaemonArgs {
                    config,
                    socket,
                    json,
                },
        } => match socket::control_socket(socket, config) {
            Ok(sock) => match reload::ask(&sock, json) {
                Ok(code) => ExitCode::from(code),
                Err(e) => done(Err(e)),
            },
            Err(code) => code,
        },
        Cmd::Capture {
            daemon:
                DaemonArgs {
                    config,
                    socket,
                    json,
                },
            tun,
            paths,
            file,
            count,
            seconds,
            stop,
        } => {
            let sock = match socket::control_socket(socket, config) {
                Ok(s) => s,
                Err(code) => return code,
            };
            if stop {
                return done(capturecmd::stop(&sock, json));
            }
            if !tun && paths.is_empty() {
                eprintln!("error: nothing to capture: give --tun, --path NAME, or both");
                return ExitCode::from(2);
            }
            if seconds.is_some_and(|s| !(s > 0.0 && s <= 86_400.0)) || count == Some(0) {
                eprintln!("error: --seconds must be within 0..86400 and --count above 0");
                return ExitCode::from(2);
            }
            let Some(file) = file else {
                eprintln!("error: -w FILE is required");
                return ExitCode::from(2);
            };
            let r = capturecmd::Request {
                file: &file,
                tun,
                paths: &paths,
                count,
                seconds,
            };
            done(capturecmd::run(&sock, &r, json))
        }
        Cmd::Genkey { out } => done(keys::genkey(out.as_deref())),
        Cmd::Pubkey { input } => done(keys::pubkey(input.as_deref())),
        Cmd::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "mpt", &mut std::io::stdout());
            ExitCode::SUCCESS
        }
        Cmd::Man { dir } => done(man_pages(dir.as_deref())),
        Cmd::Up { config, log } => {
            daemon::init_logging(log.as_deref());
            let cfg = match load(&config) {
                Ok(c) => c,
                Err(code) => return code,
            };
            let run = if cfg.is_concentrator() {
                concentrator::run
            } else {
                daemon::run
            };
            match run(cfg) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::from(1)
                }
            }
        }
        Cmd::Peer {
            daemon:
                DaemonArgs {
                    config,
                    socket,
                    json,
                },
            action,
            who,
            name,
            public_key,
            allowed_ips,
            routes,
            preshared_key_file,
        } => {
            let sock = match socket::control_socket(socket, config) {
                Ok(s) => s,
                Err(code) => return code,
            };
            match (action.as_str(), who, public_key) {
                ("remove", Some(w), _) => done(peercmd::remove(&sock, &w, json)),
                ("add", None, Some(k)) if !allowed_ips.is_empty() => done(peercmd::add(
                    &sock,
                    name.as_deref(),
                    &k,
                    &allowed_ips,
                    &routes,
                    preshared_key_file.as_deref(),
                    json,
                )),
                ("remove", None, _) => {
                    eprintln!("error: mpt peer remove needs the peer's public key or name");
                    ExitCode::from(2)
                }
                _ => {
                    eprintln!("error: mpt peer add needs --public-key and --allowed-ips (and no positional argument)");
                    ExitCode::from(2)
                }
            }
        }
        Cmd::Path {
            daemon:
                DaemonArgs {
                    config,
                    socket,
                    json,
                },
            peer,
            target,
            action,
            key,
            value,
        } => {
            let peer = peer.as_deref();
            let sock = match socket::control_socket(socket, config) {
                Ok(s) => s,
                Err(code) => return code,
            };
            match (target.as_str(), action) {
                ("list", None) => done(pathcmd::list(&sock, peer, json)),
                (name, Some(a)) if a == "set" => match (key, value) {
                    (Some(k), Some(v)) => match pathcmd::set_value(&k, &v) {
                        Ok(v) => done(pathcmd::set(&sock, peer, name, &k, &v, json)),
                        Err(e) => {
                            eprintln!("error: {e}");
                            ExitCode::from(2)
                        }
                    },
                    _ => {
                        eprintln!("error: `mpt path {name} set rate_mbit N|none`, `... set weight N`, `... set backup true|false` or `... set remote ADDR:PORT`");
                        ExitCode::from(2)
                    }
                },
                (name, Some(_)) if key.is_some() => {
                    eprintln!(
                        "error: only `set` takes a key and value (`mpt path {name} set ...`)"
                    );
                    ExitCode::from(2)
                }
                (_, Some(a)) => done(pathcmd::admin(&sock, peer, &target, &a, json)),
                (name, None) => {
                    eprintln!("error: say what to do with path '{name}': `mpt path {name} down` or `mpt path {name} up` (or `mpt path list`)");
                    ExitCode::from(2)
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
            peer,
            verbose,
        } => {
            let sock = match socket::control_socket(socket, config) {
                Ok(s) => s,
                Err(code) => return code,
            };
            let shown = if let Some(p) = peer {
                peercmd::show_peer(&sock, &p, json)
            } else if watch {
                if !(0.1..=3600.0).contains(&interval) {
                    eprintln!("error: --interval must be within 0.1..3600 seconds");
                    return ExitCode::from(2);
                }
                status::watch(
                    &sock,
                    std::time::Duration::from_secs_f64(interval),
                    count,
                    verbose,
                )
            } else {
                status::show(&sock, json, verbose)
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
