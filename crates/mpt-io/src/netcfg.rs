//! Interface configuration: addresses, MTU, link state and routes.
//!
//! This uses iproute2's `ip` command, which every Linux host that can run
//! mpt has, and whose error messages operators already know. (Netlink
//! directly is a planned replacement; see the README's "known limits".)
//!
//! Invariants:
//! * [`configure`] either succeeds completely or returns an error naming the
//!   command that failed and why; it leaves nothing behind that dropping the
//!   TUN (which removes its addresses and routes) does not clean;
//! * [`Routes`] removes the routes it installed when dropped, even though the
//!   kernel also removes them with the interface, so that a stop is explicit.

use std::io;
use std::process::Command;

use ipnet::IpNet;
use tracing::{debug, warn};

fn ip(args: &[String]) -> io::Result<()> {
    debug!(cmd = %format!("ip {}", args.join(" ")), "configuring");
    let out = Command::new("ip").args(args).output().map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("cannot run 'ip' (iproute2 is required): {e}"),
        )
    })?;
    if out.status.success() {
        Ok(())
    } else {
        let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
        Err(io::Error::other(format!(
            "'ip {}' failed: {stderr}",
            args.join(" ")
        )))
    }
}

fn s(v: &str) -> String {
    v.to_string()
}

/// Give interface `dev` its addresses and MTU and bring it up.
pub fn configure(dev: &str, addresses: &[IpNet], mtu: u32) -> io::Result<()> {
    ip(&[
        s("link"),
        s("set"),
        s("dev"),
        s(dev),
        s("mtu"),
        mtu.to_string(),
    ])?;
    for a in addresses {
        let mut args = vec![s("addr"), s("add"), a.to_string(), s("dev"), s(dev)];
        if matches!(a, IpNet::V6(_)) {
            // No duplicate address detection on a point-to-point tunnel: the
            // address is usable at once.
            args.push(s("nodad"));
        }
        ip(&args)?;
    }
    ip(&[s("link"), s("set"), s("dev"), s(dev), s("up")])
}

/// Routes installed through the tunnel; removed on drop.
#[derive(Debug, Default)]
pub struct Routes {
    dev: String,
    installed: Vec<(IpNet, Option<u32>)>,
}

impl Routes {
    /// Install `routes` via `dev`; each comes with a label naming where it
    /// was configured, for errors. On error, routes installed so far are
    /// removed again when the returned error drops the partial set.
    pub fn install(dev: &str, routes: &[(IpNet, Option<u32>, String)]) -> io::Result<Routes> {
        let mut r = Routes {
            dev: dev.to_string(),
            installed: vec![],
        };
        for (net, metric, label) in routes {
            r.add(*net, *metric, label)?;
        }
        Ok(r)
    }

    /// Install one more route (a reload); `label` names where it was
    /// configured, for errors.
    pub fn add(&mut self, net: IpNet, metric: Option<u32>, label: &str) -> io::Result<()> {
        ip(&route_args("add", &net, &self.dev, metric)).map_err(|e| {
            if e.to_string().contains("File exists") {
                io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!(
                        "{label}: a route to {net}{} already exists on this host (see `ip route show {net}`); remove it, or give this route another metric",
                        metric.map_or(String::new(), |m| format!(" with metric {m}"))
                    ),
                )
            } else {
                io::Error::other(format!("{label}: {e}"))
            }
        })?;
        self.installed.push((net, metric));
        Ok(())
    }

    /// Remove a route this set installed (a reload).
    pub fn remove(&mut self, net: IpNet, metric: Option<u32>) -> io::Result<()> {
        let Some(i) = self.installed.iter().position(|r| *r == (net, metric)) else {
            return Err(io::Error::other(format!(
                "no route to {net} was installed by mpt"
            )));
        };
        ip(&route_args("del", &net, &self.dev, metric))?;
        self.installed.remove(i);
        Ok(())
    }

    /// The routes installed, as (network, metric).
    pub fn installed(&self) -> &[(IpNet, Option<u32>)] {
        &self.installed
    }
}

fn route_args(verb: &str, net: &IpNet, dev: &str, metric: Option<u32>) -> Vec<String> {
    let mut a = vec![s("route"), s(verb), net.to_string(), s("dev"), s(dev)];
    if let Some(m) = metric {
        a.push(s("metric"));
        a.push(m.to_string());
    }
    a
}

impl Drop for Routes {
    fn drop(&mut self) {
        for (net, metric) in self.installed.drain(..) {
            if let Err(e) = ip(&route_args("del", &net, &self.dev, metric)) {
                warn!(route = %net, "could not remove route: {e}");
            }
        }
    }
}
