//! Configuration tests: the examples load; every kind of mistake is reported
//! with file, line, key and a useful message.

use std::path::Path;

use super::*;

fn parse(text: &str) -> Result<Config, Vec<ConfigError>> {
    Config::parse(text, Path::new("t.toml"))
}

fn errors(text: &str) -> Vec<String> {
    parse(text)
        .expect_err("should fail")
        .iter()
        .map(|e| e.to_string())
        .collect()
}

const MINIMAL: &str = r#"
[tunnel]
name = "mpt0"
addresses = ["10.0.0.1/24"]
[peer]
role = "server"
[[path]]
local = "192.168.1.1:5000"
remote = "192.168.1.2:5000"
"#;

#[test]
fn examples_load() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    for f in ["client.toml", "server.toml"] {
        let c = Config::load(&root.join(f)).unwrap_or_else(|e| panic!("{f}: {e:?}"));
        assert_eq!(c.paths.len(), 3);
    }
    let c = Config::load(&root.join("client.toml")).unwrap();
    assert_eq!(c.role, Role::Client);
    assert_eq!(c.paths[0].weight, 10);
    assert_eq!(c.paths[2].dead_ms, 900);
    assert_eq!(c.routes.len(), 2);
    // Smallest path MTU 1500 minus the IPv6 path's 40+8+36+16 bytes.
    assert_eq!(c.tunnel.mtu, 1400);
}

#[test]
fn defaults_are_filled_in() {
    let c = parse(MINIMAL).unwrap();
    let p = &c.paths[0];
    assert_eq!(p.name, "path1");
    assert_eq!((p.weight, p.keepalive_ms, p.dead_ms), (1, 100, 500));
    assert_eq!(c.tunnel.mtu, 1500 - 20 - 8 - 36 - 16);
    assert_eq!(c.tunnel.control_socket, PathBuf::from("/run/mpt/mpt0.sock"));
    assert_eq!(
        c.reorder,
        ReorderSection {
            window: 4096,
            max_delay_ms: 100,
            release: Release::Frontier
        }
    );
    assert_eq!(c.share, Share::Bytes);
    let pk = parse(&format!("{MINIMAL}[scheduler]\nshare = \"packets\"\n")).unwrap();
    assert_eq!(pk.share, Share::Packets);
    // Defaults detect a dead path within 1 s.
    assert!(p.dead_ms < 1000);
}

#[test]
fn unknown_key_suggests_nearest() {
    let text = MINIMAL.replace(
        "remote = \"192.168.1.2:5000\"",
        "remote = \"192.168.1.2:5000\"\nwieght = 3",
    );
    let e = errors(&text);
    assert_eq!(
        e,
        vec!["t.toml:10: path[1].wieght: unknown key; did you mean 'weight'?"]
    );
    let e = errors(&format!("{MINIMAL}\n[reordr]\nwindow = 5\n"));
    assert!(
        e[0].contains("reordr: unknown section; did you mean 'reorder'?"),
        "{e:?}"
    );
}

#[test]
fn wrong_types_and_ranges_name_the_key_and_line() {
    let text = MINIMAL.replace("role = \"server\"", "role = \"srv\"");
    assert_eq!(
        errors(&text),
        vec!["t.toml:6: peer.role: 'srv' is not one of server, client; did you mean 'server'?"]
    );
    let text = format!("{MINIMAL}weight = \"two\"\n");
    assert_eq!(
        errors(&text),
        vec!["t.toml:10: path[1].weight: expected an integer, found a string"]
    );
    let text = format!("{MINIMAL}weight = 0\n");
    assert_eq!(
        errors(&text),
        vec!["t.toml:10: path[1].weight: 0 is out of range (allowed: 1 to 1000)"]
    );
}

#[test]
fn bad_addresses() {
    let text = MINIMAL.replace("10.0.0.1/24", "10.0.0.300/24");
    assert!(errors(&text)[0].contains("tunnel.addresses[1]: '10.0.0.300/24' is not an address"));
    let text = MINIMAL.replace("192.168.1.2:5000", "[fd00::2]:5000");
    assert!(
        errors(&text)[0].contains("is not of the same IP version"),
        "{:?}",
        errors(&text)
    );
    let text = MINIMAL.replace("192.168.1.2:5000", "192.168.1.2");
    assert!(errors(&text)[0].contains("path[1].remote: '192.168.1.2' is not an address:port"));
}

#[test]
fn missing_pieces_are_all_reported() {
    let e = errors("[tunnel]\nname = \"x\"\n");
    let joined = e.join("\n");
    assert!(joined.contains("tunnel.addresses: missing"), "{joined}");
    assert!(joined.contains("missing section [peer]"), "{joined}");
    assert!(joined.contains("no [[path]] configured"), "{joined}");
}

#[test]
fn semantic_checks() {
    let dup = format!("{MINIMAL}name = \"a\"\n[[path]]\nname = \"a\"\nlocal = \"192.168.2.1:1\"\nremote = \"192.168.2.2:1\"\n");
    assert!(errors(&dup)[0].contains("path[2].name: 'a' is already the name"));
    let dead = format!("{MINIMAL}keepalive_ms = 500\ndead_ms = 400\n");
    assert!(errors(&dead)[0].contains("path[1].dead_ms: 400 must be larger than keepalive_ms"));
    let mtu = MINIMAL.replace("name = \"mpt0\"", "name = \"mpt0\"\nmtu = 1480");
    assert!(errors(&mtu)[0].contains("tunnel.mtu: 1480 does not fit path 'path1'"));
    let v6 = format!("{MINIMAL}mtu = 1300\n").replace("10.0.0.1/24", "fd00::1/64");
    assert!(errors(&v6)[0].contains("below 1280"), "{:?}", errors(&v6));
    let name = MINIMAL.replace("\"mpt0\"", "\"a-very-long-interface-name\"");
    assert!(errors(&name)[0].contains("tunnel.name: 'a-very-long-interface-name' must be 1 to 15"));
    let route = format!("{MINIMAL}[[route]]\nnetwork = \"10.9.1.0/16\"\n");
    assert!(errors(&route)[0].contains("did you mean '10.9.0.0/16'"));
    let paths: String = (0..33)
        .map(|i| format!("[[path]]\nlocal = \"10.1.{i}.1:1\"\nremote = \"10.1.{i}.2:1\"\n"))
        .collect();
    let many = format!(
        "[tunnel]\nname=\"m\"\naddresses=[\"10.0.0.1/24\"]\n[peer]\nrole=\"client\"\n{paths}"
    );
    assert!(errors(&many)[0].contains("33 paths configured; at most 32"));
}

#[test]
fn syntax_errors_have_lines() {
    let e = errors("[tunnel]\nname = \n");
    assert!(e[0].starts_with("t.toml:2: TOML syntax error"), "{e:?}");
    let e = Config::load(Path::new("/nonexistent/x.toml")).unwrap_err();
    assert!(e[0]
        .to_string()
        .contains("/nonexistent/x.toml: cannot read"));
}

#[test]
fn mixed_ip_versions() {
    let text = r#"
[tunnel]
name = "t"
addresses = ["fd00::1/64", "10.0.0.1/24"]
[peer]
role = "client"
[[path]]
local = "[fd01::1]:1"
remote = "[fd01::2]:1"
[[path]]
local = "10.1.0.1:1"
remote = "10.1.0.2:1"
"#;
    let c = parse(text).unwrap();
    assert_eq!(c.tunnel.mtu, 1400);
}
