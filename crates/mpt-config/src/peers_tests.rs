//! Tests of a concentrator's configuration: `[[peer]]` blocks, a
//! `peers_dir`, and the mistakes between peers.

use std::path::Path;

use mpt_core::crypto::keys::{self, PrivateKey};

use super::tests::{tmpdir, write_private};
use super::*;

fn key(n: u8) -> String {
    keys::encode(&PrivateKey::from_random([n; 32]).public().0)
}

fn server(extra: &str) -> String {
    let private = keys::encode(&[9u8; 32]);
    format!(
        r#"
[tunnel]
name = "mpt0"
addresses = ["10.200.0.1/16"]
{extra}
[security]
private_key = "{private}"
[[path]]
name = "a"
local = "192.0.2.1:5000"
[[path]]
name = "b"
local = "192.0.2.1:5001"
"#
    )
}

fn parse(text: &str) -> Result<Config, Vec<ConfigError>> {
    Config::parse(text, Path::new("s.toml"))
}

fn errors(text: &str) -> String {
    parse(text)
        .expect_err("should fail")
        .iter()
        .map(|e| e.to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn peer_blocks_make_a_concentrator() {
    let text = server("")
        + &format!(
            r#"
[[peer]]
name = "site-1"
public_key = "{}"
allowed_ips = ["10.200.1.2/32", "fd00:200::1"]
routes = ["192.168.1.0/24"]
[[peer]]
public_key = "{}"
allowed_ips = ["10.200.2.2/32"]
"#,
            key(1),
            key(2)
        );
    let c = parse(&text).unwrap();
    assert!(c.is_concentrator());
    assert_eq!(c.role, Role::Server);
    assert_eq!(c.peers.len(), 2);
    assert_eq!(c.peers[0].name, "site-1");
    assert_eq!(c.peers[1].name, "peer[2]");
    assert_eq!(c.peers[0].allowed_ips.len(), 2);
    assert_eq!(c.peers[0].routes, vec!["192.168.1.0/24".parse().unwrap()]);
    assert_eq!(c.peers[0].prefixes().count(), 3);
    assert!(c.peers[0].source.starts_with("s.toml:"));
}

#[test]
fn mistakes_between_peers_name_both() {
    let text = server("")
        + &format!(
            r#"
[[peer]]
name = "x"
public_key = "{k1}"
allowed_ips = ["10.200.1.0/24"]
[[peer]]
name = "x"
public_key = "{k1}"
allowed_ips = ["10.200.1.7/24"]
[[peer]]
public_key = "not a key"
allowed_ips = ["nonsense"]
[[peer]]
public_key = "{k2}"
"#,
            k1 = key(1),
            k2 = key(2)
        );
    let e = errors(&text);
    assert!(e.contains("peer name 'x' is also the name"), "{e}");
    assert!(e.contains("same public_key as peer 'x'"), "{e}");
    assert!(e.contains("prefix 10.200.1.0/24 of peer 'x'"), "{e}");
    assert!(e.contains("peer[3].public_key: the key"), "{e}");
    assert!(e.contains("peer[3].allowed_ips[1]: 'nonsense'"), "{e}");
    assert!(e.contains("peer[4].allowed_ips: missing"), "{e}");
}

#[test]
fn a_concentrator_has_no_single_peer_key_no_remotes_and_encrypts() {
    let text = server("").replace(
        "[security]\n",
        &format!("[security]\npeer_public_key = \"{}\"\n", key(1)),
    ) + &format!(
        "[[peer]]\npublic_key = \"{}\"\nallowed_ips = [\"10.200.1.2/32\"]\n",
        key(2)
    );
    let text = text.replace(
        "local = \"192.0.2.1:5001\"",
        "local = \"192.0.2.1:5001\"\nremote = \"198.51.100.1:5001\"",
    );
    let e = errors(&text);
    assert!(
        e.contains("security.peer_public_key: a concentrator has no single peer"),
        "{e}"
    );
    assert!(
        e.contains("path[2].remote: a concentrator's paths are its sockets"),
        "{e}"
    );
}

#[test]
fn peers_dir_holds_one_file_per_peer_and_errors_name_the_file() {
    let d = tmpdir("peers-dir");
    let d = d.path();
    std::fs::create_dir_all(d.join("peers.d")).unwrap();
    std::fs::write(
        d.join("peers.d/site-a.toml"),
        format!(
            "public_key = \"{}\"\nallowed_ips = [\"10.200.1.2/32\"]\n",
            key(1)
        ),
    )
    .unwrap();
    std::fs::write(
        d.join("peers.d/site-b.toml"),
        format!(
            "public_key = \"{}\"\nallowed_ips = [\"10.200.2.2/32\"]\npreshared_key_file = \"../psk\"\n",
            key(2)
        ),
    )
    .unwrap();
    std::fs::write(d.join("peers.d/README"), "not a peer").unwrap();
    write_private(&d.join("psk"), &keys::encode(&[5u8; 32]));
    let conf = d.join("s.toml");
    write_private(&conf, &server("peers_dir = \"peers.d\""));
    let c = Config::load(&conf).unwrap();
    assert!(c.is_concentrator());
    let names: Vec<&str> = c.peers.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["site-a", "site-b"]);
    assert!(c.peers[1].psk.is_some());
    // A broken file is named, with its line.
    std::fs::write(
        d.join("peers.d/site-c.toml"),
        format!(
            "public_key = \"{}\"\nallowed_ips = [\"10.200.3.2/32\"]\nrate = 5\n",
            key(3)
        ),
    )
    .unwrap();
    let e: Vec<String> = Config::load(&conf)
        .unwrap_err()
        .iter()
        .map(|e| e.to_string())
        .collect();
    assert!(
        e.iter()
            .any(|m| m.contains("site-c.toml:3: rate: unknown key")),
        "{e:?}"
    );
    // A missing directory is an error naming it.
    write_private(&conf, &server("peers_dir = \"nowhere\""));
    let e = Config::load(&conf).unwrap_err();
    assert!(
        e[0].to_string().contains("tunnel.peers_dir: cannot read"),
        "{e:?}"
    );
}

#[test]
fn the_concentrator_example_loads() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let d = tmpdir("conc-example");
    let d = d.path();
    let key = d.join("server.key");
    write_private(&key, &keys::encode(&[9u8; 32]));
    let text = std::fs::read_to_string(root.join("concentrator.toml"))
        .unwrap()
        .replace("/etc/mpt/server.key", key.to_str().unwrap())
        .replace(
            "\"peers.d\"",
            &format!("\"{}\"", root.join("peers.d").display()),
        );
    let conf = d.join("concentrator.toml");
    std::fs::write(&conf, text).unwrap();
    let c = Config::load(&conf).unwrap_or_else(|e| panic!("{e:?}"));
    let names: Vec<&str> = c.peers.iter().map(|p| p.name.as_str()).collect();
    assert_eq!(names, ["site-1", "site-2"]);
    assert_eq!(c.paths.len(), 3);
    assert!(c.paths.iter().all(|p| p.remote.is_none()));
}

#[test]
fn shards_are_a_concentrator_s_threads_and_workers_help_each_loop() {
    let peer = format!(
        "[[peer]]\npublic_key = \"{}\"\nallowed_ips = [\"10.200.1.2/32\"]\n",
        key(1)
    );
    let c = parse(&(server("shards = 3") + &peer)).unwrap();
    assert_eq!((c.tunnel.shards, c.tunnel.workers), (Some(3), None));
    // A concentrator's workers help each shard's loop, as a single
    // tunnel's help its one loop.
    let c = parse(&(server("shards = 2\nworkers = 3") + &peer)).unwrap();
    assert_eq!((c.tunnel.shards, c.tunnel.workers), (Some(2), Some(3)));
    let e =
        errors(&super::tests::MINIMAL.replace("name = \"mpt0\"", "name = \"mpt0\"\nshards = 2"));
    assert!(
        e.contains("tunnel.shards: only a concentrator ([[peer]] blocks or peers_dir) has shards"),
        "{e}"
    );
}

#[test]
fn announce_table_is_a_concentrator_s_and_not_the_kernel_s() {
    let peer = format!(
        "[[peer]]\npublic_key = \"{}\"\nallowed_ips = [\"10.200.1.2/32\"]\n",
        key(1)
    );
    let c = parse(&(server("announce_table = 201") + &peer)).unwrap();
    assert_eq!(c.announce_table, Some(201));
    let e = errors(&(server("announce_table = 254") + &peer));
    assert!(
        e.contains("tunnel.announce_table: 254 is one of the kernel's own tables"),
        "{e}"
    );
}

#[test]
fn a_peer_may_have_its_own_caps_and_classes() {
    let text = server("")
        + &format!(
            r#"
[[peer]]
name = "site-1"
public_key = "{}"
allowed_ips = ["10.200.1.2/32"]
rate_mbit = 20
path_rate_mbit = {{ b = 5 }}
[peer.qos]
[[peer.qos.class]]
name = "voip"
dscp = ["EF"]
realtime = true
[[peer]]
public_key = "{}"
allowed_ips = ["10.200.2.2/32"]
"#,
            key(1),
            key(2)
        );
    let c = parse(&text).unwrap();
    let p = &c.peers[0];
    assert_eq!(p.rate_mbit, Some(20));
    assert_eq!(p.path_rate_mbit, vec![("b".to_string(), 5)]);
    let q = p.qos.as_ref().expect("the peer's classes");
    assert!(q.classes.iter().any(|k| k.name == "voip" && k.realtime));
    let other = &c.peers[1];
    assert!(other.rate_mbit.is_none() && other.path_rate_mbit.is_empty() && other.qos.is_none());
}

#[test]
fn a_peer_cap_on_a_missing_path_or_without_pacing_is_named() {
    let peer = |extra: &str| {
        format!(
            "[[peer]]\nname = \"s\"\npublic_key = \"{}\"\nallowed_ips = [\"10.200.1.2/32\"]\n{extra}\n",
            key(1)
        )
    };
    let e = errors(&(server("") + &peer("path_rate_mbit = { lte = 5 }")));
    assert!(
        e.contains(
            "path_rate_mbit names path 'lte', which is not one of the server's paths (a, b)"
        ),
        "{e}"
    );
    let e = errors(&(server("") + &peer("path_rate_mbit = { a = 0 }\nrate_mbit = -1")));
    assert!(
        e.contains("peer[1].path_rate_mbit.a: must be a whole number"),
        "{e}"
    );
    assert!(e.contains("peer[1].rate_mbit"), "{e}");
    let e = errors(&(server("") + &peer("path_rate_mbit = 5")));
    assert!(e.contains("must be a table of path names"), "{e}");
    let weights = server("").replace("name = \"a\"\n", "name = \"a\"\nweight = 1\n");
    let weights = weights.replace("name = \"b\"\n", "name = \"b\"\nweight = 1\n");
    let e = errors(&(weights + &peer("rate_mbit = 5")));
    assert!(e.contains("need path-aware sending"), "{e}");
}
