//! Hostnames in `remote`, resolved again while their path stays down: the
//! peer may have moved (a dynamic address, a changed DNS record). A
//! thread of its own (the system resolver blocks) looks at the running
//! tunnel every [`CHECK_INTERVAL`] over the same channel as the control
//! socket; a path that names a host and was not up at two checks in a row
//! has its name resolved again, and a new address of its IP version is
//! given to the loop as `path NAME set remote ADDR` (logged with the old
//! and new address).
//!
//! The paths it watches are shared with the reload ([`Watched`]): a path
//! that a reload adds with a hostname is watched from then on, one that it
//! removes no longer.
//!
//! Invariants: the thread never touches the tunnel itself, only asks the
//! loop; it ends when the loop is gone (a send or an answer fails); a
//! resolver error is logged once per distinct message and path, never in
//! a loop.

use std::collections::{HashMap, HashSet};
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use mpt_config::Config;
use mpt_io::control::Pending;
use serde_json::Value;
use tracing::{info, warn};

/// How often the paths are looked at (tuning knob: a path down at two
/// looks in a row has been down for at least this long).
pub const CHECK_INTERVAL: Duration = Duration::from_secs(5);
/// How long the loop may take to answer (tuning knob).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);

/// A path whose remote names a host.
#[derive(Clone)]
pub struct Named {
    path: String,
    host: String,
    local: SocketAddr,
}

/// The paths the thread watches; the reload replaces the list.
pub type Watched = Arc<Mutex<Vec<Named>>>;

/// The paths of `paths` whose remote names a host.
pub fn named(paths: &[mpt_config::PathSection]) -> Vec<Named> {
    paths
        .iter()
        .filter_map(|p| {
            Some(Named {
                path: p.name.clone(),
                host: p.remote_host.clone()?,
                local: p.local,
            })
        })
        .collect()
}

/// Start the thread (it sleeps while no path names a host); returns the
/// list it watches.
pub fn spawn(
    cfg: &Config,
    tx: mpsc::Sender<Pending>,
    wake: Arc<dyn Fn() + Send + Sync>,
) -> std::io::Result<Watched> {
    let watched: Watched = Arc::new(Mutex::new(named(&cfg.paths)));
    let tunnel = cfg.tunnel.name.clone();
    let list = Arc::clone(&watched);
    std::thread::Builder::new()
        .name("mpt-resolve".into())
        .spawn(move || run(&tunnel, &list, &tx, wake.as_ref()))?;
    Ok(watched)
}

fn ask(
    tx: &mpsc::Sender<Pending>,
    wake: &(dyn Fn() + Send + Sync),
    request: mpt_control::Request,
) -> Option<Value> {
    let (reply, answer) = mpsc::sync_channel(1);
    tx.send(Pending {
        command: request.to_line(),
        reply,
        who: "the hostname resolver of this daemon".into(),
    })
    .ok()?;
    wake();
    let text = answer.recv_timeout(ANSWER_TIMEOUT).ok()?;
    serde_json::from_str(&text).ok()
}

fn run(
    tunnel: &str,
    watched: &Watched,
    tx: &mpsc::Sender<Pending>,
    wake: &(dyn Fn() + Send + Sync),
) {
    let mut down_before: HashSet<String> = HashSet::new();
    let mut last_error: HashMap<String, String> = HashMap::new();
    loop {
        std::thread::sleep(CHECK_INTERVAL);
        let named = watched.lock().map(|l| l.clone()).unwrap_or_default();
        if named.is_empty() {
            down_before.clear();
            continue;
        }
        let Some(status) = ask(tx, wake, mpt_control::Request::Status) else {
            return;
        };
        // A single tunnel's document; anything else (an error) lists no path.
        let paths = mpt_control::answer::<mpt_control::status::TunnelDoc>(status)
            .map(|d| d.tunnel.paths)
            .unwrap_or_default();
        let mut down_now = HashSet::new();
        for n in &named {
            let Some(p) = paths.iter().find(|p| p.name == n.path) else {
                continue;
            };
            if p.state == "up" {
                continue;
            }
            down_now.insert(n.path.clone());
            if !down_before.contains(&n.path) {
                continue;
            }
            let current: Option<SocketAddr> = p.remote.parse().ok();
            let answer = n.host.to_socket_addrs().map(Iterator::collect::<Vec<_>>);
            let picked = match answer {
                Ok(a) => mpt_config::pick_remote(n.local, &a)
                    .ok_or_else(|| format!("no address of the IP version of {}", n.local)),
                Err(e) => Err(e.to_string()),
            };
            match picked {
                Ok(a) if Some(a) != current => {
                    let cmd = mpt_control::Request::PathSet {
                        peer: None,
                        path: n.path.clone(),
                        key: "remote".into(),
                        value: a.to_string(),
                    };
                    let ok = ask(tx, wake, cmd).is_some_and(|v| mpt_control::refusal(&v).is_none());
                    if ok {
                        info!(tunnel = %tunnel, path = %n.path, host = %n.host, old = %current.map_or_else(|| "-".to_string(), |c: SocketAddr| c.to_string()), new = %a, "path down: its remote's name resolved to a new address, which it uses from now on");
                    }
                    last_error.remove(&n.path);
                }
                Ok(_) => {
                    last_error.remove(&n.path);
                }
                Err(e) => {
                    if last_error.get(&n.path) != Some(&e) {
                        warn!(tunnel = %tunnel, path = %n.path, host = %n.host, error = %e, "path down and its remote's name does not resolve again (will retry)");
                        last_error.insert(n.path.clone(), e);
                    }
                }
            }
        }
        down_before = down_now;
    }
}
