//! Tests of a client's further servers and failover settings.

use std::path::Path;

use mpt_core::crypto::keys::{self, PrivateKey};

use super::*;

fn key(n: u8) -> String {
    keys::encode(&PrivateKey::from_random([n; 32]).public().0)
}

fn client(extra: &str) -> String {
    format!(
        r#"
[tunnel]
name = "mpt0"
addresses = ["10.201.1.2/16"]
[peer]
role = "client"
[security]
private_key = "{}"
peer_public_key = "{}"
[[path]]
name = "wifi"
local = "192.0.2.2:5001"
remote = "198.51.100.1:5001"
[[path]]
name = "lte"
local = "[2001:db8::2]:5002"
remote = "[2001:db8:1::1]:5002"
{extra}
"#,
        keys::encode(&[9u8; 32]),
        key(1)
    )
}

fn errors(text: &str) -> String {
    Config::parse(text, Path::new("c.toml"))
        .expect_err("should fail")
        .iter()
        .map(|e| e.to_string())
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn further_servers_in_order_with_a_remote_per_path() {
    let text = client(&format!(
        r#"
[[server]]
name = "dc2"
public_key = "{}"
remotes = ["203.0.113.1:5001", "[2001:db8:2::1]:5002"]
[failover]
after_ms = 800
return_after_s = 600
"#,
        key(2)
    ));
    let c = Config::parse(&text, Path::new("c.toml")).unwrap();
    assert_eq!(c.servers.len(), 1);
    assert_eq!(c.servers[0].name, "dc2");
    assert_eq!(c.servers[0].remotes[1].to_string(), "[2001:db8:2::1]:5002");
    assert_eq!(
        c.failover,
        FailoverSection {
            after_ms: 800,
            return_after_s: 600
        }
    );
    // Defaults without [failover].
    let c = Config::parse(&client(""), Path::new("c.toml")).unwrap();
    assert!(c.servers.is_empty());
    assert_eq!(c.failover.after_ms, servers::FAILOVER_AFTER_MS);
}

#[test]
fn a_server_needs_a_key_and_one_remote_of_the_right_family_per_path() {
    let e = errors(&client(
        r#"
[[server]]
remotes = ["203.0.113.1:5001"]
[[server]]
public_key = "nope"
remotes = ["203.0.113.1:5001", "203.0.113.1:5002"]
[failover]
after_ms = 5
"#,
    ));
    assert!(e.contains("server[1].public_key: missing"), "{e}");
    assert!(e.contains("1 remote(s) for 2 path(s)"), "{e}");
    assert!(e.contains("server[2].public_key: the key"), "{e}");
    assert!(
        e.contains("server[2].remotes[2]: '203.0.113.1:5002' is not of path 'lte''s IP family"),
        "{e}"
    );
    assert!(e.contains("failover.after_ms"), "{e}");
}

#[test]
fn only_a_client_has_further_servers() {
    let text = client(&format!(
        "[[server]]\npublic_key = \"{}\"\nremotes = [\"203.0.113.1:5001\", \"[2001:db8::9]:1\"]\n",
        key(2)
    ))
    .replace("role = \"client\"", "role = \"server\"");
    assert!(errors(&text).contains("belong to a client's configuration"));
}
