//! A path's `remote`: a literal `address:port`, or `hostname:port`, which
//! is resolved when the daemon starts (and by `mpt check`), not while the
//! file is parsed, so that parsing stays a pure function of the text.
//!
//! Invariants:
//! * a hostname is an RFC 1123 name (labels of letters, digits and
//!   hyphens, 1 to 63 characters, not starting or ending with a hyphen; at
//!   most 253 characters in all) with a port from 1 to 65535;
//! * a resolved remote is of the path's local address's IP family (the
//!   first such address of the answer), and never unspecified or port 0;
//! * after [`Config::resolve_remotes`] succeeds, every path that names a
//!   host has its `remote`, and no two paths share (local, remote).

use std::net::SocketAddr;

use crate::Config;

/// What `remote = "..."` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RemoteSpec {
    Addr(SocketAddr),
    /// `host:port`, kept as written (for logs and for comparing files).
    Host(String),
}

/// What the key expects, for error messages.
pub const REMOTE_EXPECTED: &str =
    "an address:port (like 192.0.2.1:5000 or [2001:db8::1]:5000) or a hostname:port (like vpn.example.org:5000)";

fn valid_hostname(h: &str) -> bool {
    let label = |l: &str| {
        (1..=63).contains(&l.len())
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    };
    let h = h.strip_suffix('.').unwrap_or(h);
    (1..=253).contains(&h.len())
        && h.split('.').all(label)
        // All digits and dots is a mistyped IPv4 address, not a name.
        && !h.bytes().all(|b| b.is_ascii_digit() || b == b'.')
}

/// Parse the text of `remote`.
pub fn parse_remote(s: &str) -> Result<RemoteSpec, String> {
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(RemoteSpec::Addr(a));
    }
    let Some((host, port)) = s.rsplit_once(':') else {
        return Err("no port (write host:port)".into());
    };
    if host.contains(':') || host.starts_with('[') {
        return Err("not a valid IPv6 address:port (write [address]:port)".into());
    }
    if !valid_hostname(host) {
        return Err(format!(
            "'{host}' is neither an IP address nor a valid hostname"
        ));
    }
    match port.parse::<u16>() {
        Ok(0) | Err(_) => Err(format!("'{port}' is not a port from 1 to 65535")),
        Ok(_) => Ok(RemoteSpec::Host(s.to_string())),
    }
}

/// The first address of `answer` usable as the remote of a path whose
/// local address is `local`.
pub fn pick(local: SocketAddr, answer: &[SocketAddr]) -> Option<SocketAddr> {
    answer
        .iter()
        .copied()
        .find(|a| a.is_ipv4() == local.is_ipv4() && !a.ip().is_unspecified() && a.port() != 0)
}

/// The address `p`'s remote hostname resolves to with `resolve`, of
/// `local`'s IP version; `Ok(None)` when the remote is not a hostname.
/// The error names the path and what went wrong.
pub fn resolve_path<F>(
    p: &crate::PathSection,
    resolve: &mut F,
) -> Result<Option<SocketAddr>, String>
where
    F: FnMut(&str) -> std::io::Result<Vec<SocketAddr>>,
{
    let Some(host) = &p.remote_host else {
        return Ok(None);
    };
    let family = if p.local.is_ipv4() { "IPv4" } else { "IPv6" };
    match resolve(host) {
        Err(e) => Err(format!(
            "path '{}': remote {host} does not resolve: {e}",
            p.name
        )),
        Ok(answer) => match pick(p.local, &answer) {
            Some(a) => Ok(Some(a)),
            None => Err(format!(
                "path '{}': remote {host} has no {family} address (local is {}; it resolves to {})",
                p.name,
                p.local,
                if answer.is_empty() {
                    "nothing".to_string()
                } else {
                    answer
                        .iter()
                        .map(|a| a.ip().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                }
            )),
        },
    }
}

impl Config {
    /// Resolve every path's `remote` hostname with `resolve` (the system
    /// resolver in the daemon, a table in tests). Each error names the path
    /// and says what went wrong; on error nothing is changed.
    pub fn resolve_remotes<F>(&mut self, mut resolve: F) -> Result<(), Vec<String>>
    where
        F: FnMut(&str) -> std::io::Result<Vec<SocketAddr>>,
    {
        let mut errors = vec![];
        let mut found = vec![];
        for (i, p) in self.paths.iter().enumerate() {
            match resolve_path(p, &mut resolve) {
                Ok(Some(a)) => found.push((i, a)),
                Ok(None) => {}
                Err(e) => errors.push(e),
            }
        }
        let mut paths = self.paths.clone();
        for (i, a) in found {
            paths[i].remote = Some(a);
        }
        for (i, p) in paths.iter().enumerate() {
            if let Some(o) = paths[..i]
                .iter()
                .find(|o| o.local == p.local && o.remote.is_some() && o.remote == p.remote)
            {
                errors.push(format!(
                    "paths '{}' and '{}' both go from {} to {}",
                    o.name,
                    p.name,
                    p.local,
                    p.remote.map_or_else(String::new, |r| r.to_string())
                ));
            }
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        self.paths = paths;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remotes_parse_as_addresses_or_hostnames() {
        assert_eq!(
            parse_remote("192.0.2.1:5000"),
            Ok(RemoteSpec::Addr("192.0.2.1:5000".parse().unwrap()))
        );
        assert_eq!(
            parse_remote("[2001:db8::1]:5000"),
            Ok(RemoteSpec::Addr("[2001:db8::1]:5000".parse().unwrap()))
        );
        for ok in ["vpn.example.org:5000", "peer-b:1", "a.b.c.:65535", "x1:80"] {
            assert_eq!(parse_remote(ok), Ok(RemoteSpec::Host(ok.into())), "{ok}");
        }
        for bad in [
            "vpn.example.org",
            "vpn.example.org:0",
            "vpn.example.org:70000",
            "vpn.example.org:http",
            "-bad.example:5000",
            "bad-.example:5000",
            "under_score.example:5000",
            "a..b:5000",
            ":5000",
            "2001:db8::1:5000",
            "[2001:db8::1:5000",
            "192.0.2.300:5000",
            "",
        ] {
            assert!(parse_remote(bad).is_err(), "{bad}");
        }
        let long = format!("{}.example:1", "a".repeat(64));
        assert!(parse_remote(&long).is_err());
    }

    #[test]
    fn the_address_of_the_local_family_is_picked() {
        let v4: SocketAddr = "10.0.0.1:1".parse().unwrap();
        let v6: SocketAddr = "[fd00::1]:1".parse().unwrap();
        let answer: Vec<SocketAddr> = ["[fd00::2]:5000", "0.0.0.0:5000", "10.0.0.2:5000"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        assert_eq!(pick(v4, &answer), Some("10.0.0.2:5000".parse().unwrap()));
        assert_eq!(pick(v6, &answer), Some("[fd00::2]:5000".parse().unwrap()));
        assert_eq!(pick(v4, &answer[..2]), None);
    }
}

#[cfg(test)]
mod resolve_tests {
    use std::path::Path;

    use crate::Config;

    const TWO_PATHS: &str = r#"
[tunnel]
name = "mpt0"
addresses = ["10.0.0.1/24"]
[peer]
role = "client"
[security]
insecure_no_encryption = true
[[path]]
name = "wan4"
local = "192.168.1.1:5000"
remote = "peer.example:5000"
[[path]]
name = "wan6"
local = "[fd00::1]:5001"
remote = "peer.example:5001"
"#;

    fn table(host: &str) -> std::io::Result<Vec<std::net::SocketAddr>> {
        let port = host.rsplit_once(':').unwrap().1;
        match host.split(':').next() {
            Some("peer.example") => Ok(vec![
                format!("[fd00::2]:{port}").parse().unwrap(),
                format!("192.168.1.2:{port}").parse().unwrap(),
            ]),
            Some("v6only.example") => Ok(vec![format!("[fd00::9]:{port}").parse().unwrap()]),
            _ => Err(std::io::Error::other("name or service not known")),
        }
    }

    #[test]
    fn hostnames_resolve_to_the_local_family() {
        let mut c = Config::parse(TWO_PATHS, Path::new("t.toml")).unwrap();
        assert_eq!(c.paths[0].remote, None, "parsing does not resolve");
        assert_eq!(c.paths[0].remote_host.as_deref(), Some("peer.example:5000"));
        c.resolve_remotes(table).unwrap();
        assert_eq!(c.paths[0].remote, Some("192.168.1.2:5000".parse().unwrap()));
        assert_eq!(c.paths[1].remote, Some("[fd00::2]:5001".parse().unwrap()));
    }

    #[test]
    fn a_name_that_does_not_resolve_or_lacks_the_family_is_an_error_naming_the_path() {
        let text = TWO_PATHS
            .replace("peer.example:5000", "nowhere.example:5000")
            .replace("peer.example:5001", "v6only.example:5001");
        let mut c = Config::parse(&text, Path::new("t.toml")).unwrap();
        let c2 = c.clone();
        let errs = c.resolve_remotes(table).unwrap_err();
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(errs[0].contains("path 'wan4': remote nowhere.example:5000 does not resolve"));
        let text = TWO_PATHS.replace("peer.example:5000", "v6only.example:5000");
        let mut c = Config::parse(&text, Path::new("t.toml")).unwrap();
        let errs = c.resolve_remotes(table).unwrap_err();
        assert!(
            errs[0].contains("path 'wan4': remote v6only.example:5000 has no IPv4 address"),
            "{errs:?}"
        );
        assert!(errs[0].contains("fd00::9"), "{errs:?}");
        assert_eq!(c2.paths[0].remote, None, "nothing changed on error");
    }

    #[test]
    fn two_names_for_one_address_are_the_same_path() {
        let text = TWO_PATHS
            .replace("[fd00::1]:5001", "192.168.1.1:5000")
            .replace("peer.example:5001", "peer.example:5000")
            .replace(
                "remote = \"peer.example:5000\"\n[[path]]",
                "remote = \"192.168.1.2:5000\"\n[[path]]",
            );
        let mut c = Config::parse(&text, Path::new("t.toml")).unwrap();
        let errs = c.resolve_remotes(table).unwrap_err();
        assert!(
            errs[0].contains(
                "paths 'wan4' and 'wan6' both go from 192.168.1.1:5000 to 192.168.1.2:5000"
            ),
            "{errs:?}"
        );
    }

    #[test]
    fn a_bad_remote_is_reported_with_its_line() {
        let text = TWO_PATHS.replace("peer.example:5000", "peer_example:5000");
        let errs = Config::parse(&text, Path::new("t.toml")).unwrap_err();
        let e = errs[0].to_string();
        assert!(e.contains("t.toml:12: path[1].remote"), "{e}");
        assert!(e.contains("hostname:port"), "{e}");
    }
}
