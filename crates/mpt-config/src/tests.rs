//! Configuration tests: the examples load; every kind of mistake is reported
//! with file, line, key and a useful message.

use std::path::Path;

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;

use mpt_core::crypto::keys;

use super::*;

/// A scratch directory, removed when the guard drops (pass or fail).
pub(crate) fn tmpdir(name: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("mpt-config-{name}-"))
        .tempdir()
        .unwrap()
}

pub(crate) fn write_private(p: &Path, text: &str) {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(p)
        .unwrap();
    f.write_all(text.as_bytes()).unwrap();
}

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

pub(crate) const MINIMAL: &str = r#"
[tunnel]
name = "mpt0"
addresses = ["10.0.0.1/24"]
[peer]
role = "server"
[security]
insecure_no_encryption = true
[[path]]
local = "192.168.1.1:5000"
remote = "192.168.1.2:5000"
"#;

#[test]
fn examples_load() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
    let dir = tmpdir("examples");
    let dir = dir.path();
    let mut loaded = vec![];
    for f in ["client.toml", "server.toml"] {
        // The examples name key files under /etc/mpt; point them at keys
        // written here with the mode the loader demands.
        let key = dir.join(f.replace(".toml", ".key"));
        write_private(&key, &keys::encode(&[9u8; 32]));
        let text = std::fs::read_to_string(root.join(f)).unwrap();
        let text = text.replace(
            &format!("/etc/mpt/{}", f.replace(".toml", ".key")),
            key.to_str().unwrap(),
        );
        let path = dir.join(f);
        std::fs::write(&path, text).unwrap();
        let c = Config::load(&path).unwrap_or_else(|e| panic!("{f}: {e:?}"));
        assert_eq!(c.paths.len(), 3);
        assert!(matches!(c.security, Security::Encrypted(_)));
        loaded.push(c);
    }
    // The server learns the LTE client's address.
    assert_eq!(loaded[1].paths[2].remote, None);
    let c = loaded.remove(0);
    assert_eq!(c.role, Role::Client);
    assert_eq!(c.paths[0].weight, 10);
    assert_eq!(c.paths[2].dead_ms, 900);
    assert_eq!(c.routes.len(), 2);
    // Smallest path MTU 1500 minus the IPv6 path's 40+8+24+16 bytes, and
    // eight datagrams' worth of fragments of that by default.
    assert_eq!(c.tunnel.datagram_body, 1412);
    assert_eq!(c.tunnel.mtu, 8 * (1412 - 2));
}

#[test]
fn defaults_are_filled_in() {
    let c = parse(MINIMAL).unwrap();
    let p = &c.paths[0];
    assert_eq!(p.name, "path1");
    assert_eq!((p.weight, p.keepalive_ms, p.dead_ms), (1, 100, 500));
    assert_eq!(c.tunnel.datagram_body, 1500 - 20 - 8 - 24 - 16);
    assert_eq!(c.tunnel.mtu, 8 * (1432 - 2), "eight datagrams of fragments");
    assert!(!c.tunnel.mtu_configured);
    // An MTU that fits one datagram is never cut.
    let one = parse(&MINIMAL.replace("name = \"mpt0\"", "name = \"mpt0\"\nmtu = 1432")).unwrap();
    assert_eq!((one.tunnel.mtu, one.tunnel.datagram_body), (1432, 1432));
    assert_eq!(c.tunnel.control_socket, PathBuf::from("/run/mpt/mpt0.sock"));
    assert_eq!(
        c.reorder,
        ReorderSection {
            window: 4096,
            max_delay_ms: 100,
            release: Release::Frontier,
            recover: true,
            fec: true,
        }
    );
    assert_eq!(c.share, Share::Bytes);
    assert_eq!((c.scheduler, c.queue_ms), (SchedulerMode::Ecf, 100));
    assert_eq!(p.rate_mbit, None);
    // Defaults detect a dead path within 1 s.
    assert!(p.dead_ms < 1000);
    let pk = parse(&format!(
        "{MINIMAL}[scheduler]\nmode = \"wrr\"\nshare = \"packets\"\n"
    ))
    .unwrap();
    assert_eq!(
        (pk.scheduler, pk.share),
        (SchedulerMode::Wrr, Share::Packets)
    );
}

#[test]
fn scheduler_mode_follows_weights_and_rejects_mixtures() {
    let weighted = MINIMAL.replace(
        "remote = \"192.168.1.2:5000\"",
        "remote = \"192.168.1.2:5000\"\nweight = 3",
    );
    let w = parse(&weighted).unwrap();
    assert_eq!(w.scheduler, SchedulerMode::Wrr);
    assert!(!w.reorder.recover, "recovery is opt-in with static weights");
    let forced = parse(&format!("{weighted}[reorder]\nrecover = true\n")).unwrap();
    assert!(forced.reorder.recover);
    let off = parse(&format!("{MINIMAL}[reorder]\nrecover = false\n")).unwrap();
    assert!(!off.reorder.recover);
    assert!(off.reorder.fec, "forward error correction: on by default");
    let no_fec = parse(&format!("{MINIMAL}[reorder]\nfec = \"off\"\n")).unwrap();
    assert!(!no_fec.reorder.fec);
    let e = errors(&format!("{MINIMAL}[reorder]\nfec = \"on\"\n"));
    assert!(
        e[0].contains("reorder.fec: 'on' is not one of auto, off"),
        "{e:?}"
    );
    let capped = MINIMAL.replace(
        "remote = \"192.168.1.2:5000\"",
        "remote = \"192.168.1.2:5000\"\nrate_mbit = 10",
    );
    let c = parse(&capped).unwrap();
    assert_eq!(
        (c.scheduler, c.paths[0].rate_mbit),
        (SchedulerMode::Ecf, Some(10))
    );
    let e = errors(&format!("{weighted}[scheduler]\nmode = \"ecf\"\n"));
    assert!(e[0].contains("static `weight`"), "{e:?}");
    let e = errors(&format!("{MINIMAL}[scheduler]\nshare = \"packets\"\n"));
    assert!(e[0].contains("static weights only"), "{e:?}");
    let e = errors(&format!("{capped}[scheduler]\nmode = \"wrr\"\n"));
    assert!(e[0].contains("rate_mbit"), "{e:?}");
    let e = errors(&format!("{weighted}[scheduler]\nqueue_ms = 50\n"));
    assert!(e[0].contains("send queue"), "{e:?}");
    // Local push-back: off unless set, 0..=100 ms, path-aware sending only.
    assert_eq!(parse(MINIMAL).unwrap().local_queue_ms, 0);
    let on = parse(&format!("{MINIMAL}[scheduler]\nlocal_queue_ms = 4\n")).unwrap();
    assert_eq!(on.local_queue_ms, 4);
    let e = errors(&format!("{MINIMAL}[scheduler]\nlocal_queue_ms = 500\n"));
    assert!(e[0].contains("local_queue_ms"), "{e:?}");
    let e = errors(&format!("{weighted}[scheduler]\nlocal_queue_ms = 4\n"));
    assert!(e[0].contains("static weights measure none"), "{e:?}");
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
        vec!["t.toml:12: path[1].wieght: unknown key; did you mean 'weight'?"]
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
        vec!["t.toml:12: path[1].weight: expected an integer, found a string"]
    );
    let text = format!("{MINIMAL}weight = 0\n");
    assert_eq!(
        errors(&text),
        vec!["t.toml:12: path[1].weight: 0 is out of range (allowed: 1 to 1000)"]
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
    let mtu = MINIMAL.replace("name = \"mpt0\"", "name = \"mpt0\"\nmtu = 30000");
    let e = errors(&mtu);
    assert!(
        e[0].contains("tunnel.mtu: 30000 is more than 16 fragments of 1430 bytes: at most 22880 (path 'path1': link MTU 1500 minus 68"),
        "{e:?}"
    );
    let fits = MINIMAL.replace("name = \"mpt0\"", "name = \"mpt0\"\nmtu = 22880");
    assert!(parse(&fits).is_ok());
    let v6 = MINIMAL
        .replace("name = \"mpt0\"", "name = \"mpt0\"\nmtu = 1200")
        .replace("10.0.0.1/24", "fd00::1/64");
    assert!(errors(&v6)[0].contains("below 1280"), "{:?}", errors(&v6));
    let name = MINIMAL.replace("\"mpt0\"", "\"a-very-long-interface-name\"");
    assert!(errors(&name)[0].contains("tunnel.name: 'a-very-long-interface-name' must be 1 to 15"));
    let route = format!("{MINIMAL}[[route]]\nnetwork = \"10.9.1.0/16\"\n");
    assert!(errors(&route)[0].contains("did you mean '10.9.0.0/16'"));
    let paths: String = (0..33)
        .map(|i| format!("[[path]]\nlocal = \"10.1.{i}.1:1\"\nremote = \"10.1.{i}.2:1\"\n"))
        .collect();
    let many = format!(
        "[tunnel]\nname=\"m\"\naddresses=[\"10.0.0.1/24\"]\n[peer]\nrole=\"client\"\n[security]\ninsecure_no_encryption = true\n{paths}"
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
[security]
insecure_no_encryption = true
[[path]]
local = "[fd01::1]:1"
remote = "[fd01::2]:1"
[[path]]
local = "10.1.0.1:1"
remote = "10.1.0.2:1"
"#;
    let c = parse(text).unwrap();
    assert_eq!(c.tunnel.datagram_body, 1412);
}

const SECURE_CLIENT: &str = r#"
[tunnel]
name = "t"
addresses = ["10.0.0.2/24"]
[peer]
role = "client"
[security]
private_key = "CQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQk="
peer_public_key = "PEER"
[[path]]
local = "10.1.0.2:1"
remote = "10.1.0.1:1"
"#;

fn peer_pub() -> String {
    keys::encode(&mpt_core::crypto::keys::PrivateKey([5u8; 32]).public().0)
}

#[test]
fn security_section_is_required_and_checked() {
    let no_sec = MINIMAL.replace("[security]\ninsecure_no_encryption = true\n", "");
    assert!(errors(&no_sec)
        .join("\n")
        .contains("missing section [security]"));
    let text = SECURE_CLIENT.replace("PEER", &peer_pub());
    let c = parse(&text).unwrap();
    let Security::Encrypted(k) = &c.security else {
        panic!()
    };
    assert!(k.inline_secret && k.psk.is_none());
    assert_eq!(format!("{:?}", k.private), "PrivateKey(<secret>)");
    // Own public key as the peer's.
    let own = keys::encode(&mpt_core::crypto::keys::PrivateKey([9u8; 32]).public().0);
    assert!(errors(&SECURE_CLIENT.replace("PEER", &own))
        .join("")
        .contains("this peer's own public key"));
    assert!(errors(&SECURE_CLIENT.replace("PEER", "abc"))
        .join("")
        .contains("security.peer_public_key: the key"));
    let both = text.replace("[security]", "[security]\ninsecure_no_encryption = true");
    assert!(errors(&both)
        .join("")
        .contains("cannot be combined with keys"));
    let typo = text.replace("private_key =", "privat_key =");
    assert!(
        errors(&typo)
            .join("")
            .contains("did you mean 'private_key'"),
        "{:?}",
        errors(&typo)
    );
}

#[test]
fn only_an_encrypted_server_may_leave_remote_out() {
    let text = SECURE_CLIENT
        .replace("PEER", &peer_pub())
        .replace("remote = \"10.1.0.1:1\"\n", "");
    assert!(errors(&text)
        .join("")
        .contains("path[1].remote: missing (only an encrypted server"));
    let server = text.replace("role = \"client\"", "role = \"server\"");
    assert_eq!(parse(&server).unwrap().paths[0].remote, None);
    let plain_server = MINIMAL.replace("remote = \"192.168.1.2:5000\"\n", "");
    assert!(errors(&plain_server)
        .join("")
        .contains("only an encrypted server"));
}

#[test]
fn secrets_must_not_be_readable_by_others() {
    let d = tmpdir("perm");
    let d = d.path();
    let text = SECURE_CLIENT.replace("PEER", &peer_pub());
    let cfg = d.join("inline.toml");
    std::fs::write(&cfg, &text).unwrap();
    std::fs::set_permissions(&cfg, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let e = Config::load(&cfg).unwrap_err()[0].to_string();
    assert!(
        e.contains("readable by others (mode 644); run: chmod 600"),
        "{e}"
    );
    std::fs::set_permissions(&cfg, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    assert!(Config::load(&cfg).is_ok());
    // A key file, relative to the configuration's directory.
    let key = d.join("k");
    std::fs::write(&key, keys::encode(&[9u8; 32])).unwrap();
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o640)).unwrap();
    let with_file = text.replace(
        "private_key = \"CQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQk=\"",
        "private_key_file = \"k\"",
    );
    let cfg2 = d.join("file.toml");
    std::fs::write(&cfg2, &with_file).unwrap();
    let e = Config::load(&cfg2).unwrap_err()[0].to_string();
    assert!(
        e.contains("security.private_key_file") && e.contains("chmod 600"),
        "{e}"
    );
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let c = Config::load(&cfg2).unwrap();
    let Security::Encrypted(k) = c.security else {
        panic!()
    };
    assert!(!k.inline_secret);
}

#[test]
fn workers_and_parallel() {
    let c = parse(MINIMAL).unwrap();
    assert_eq!((c.tunnel.workers, c.tunnel.parallel_always), (None, false));
    let with =
        |extra: &str| MINIMAL.replace("name = \"mpt0\"", &format!("name = \"mpt0\"\n{extra}"));
    let c = parse(&with("workers = 4\nparallel = \"always\"")).unwrap();
    assert_eq!(
        (c.tunnel.workers, c.tunnel.parallel_always),
        (Some(4), true)
    );
    let c = parse(&with("parallel = \"auto\"")).unwrap();
    assert!(!c.tunnel.parallel_always);
    assert_eq!(
        errors(&with("workers = 0")),
        vec!["t.toml:4: tunnel.workers: 0 is out of range (allowed: 1 to 256)"]
    );
    let e = errors(&with("parallel = \"sometimes\""));
    assert_eq!(e.len(), 1);
    assert!(
        e[0].starts_with("t.toml:4: tunnel.parallel: 'sometimes' is not a choice"),
        "{e:?}"
    );
}

#[test]
fn many_keys_each_reported_on_its_own_line() {
    // Validation finds lines by binary search over precomputed line starts
    // (it used to count newlines from the start for every error).
    let extra: String = (0..40_000).map(|i| format!("k{i} = 1\n")).collect();
    let text = MINIMAL.replace("name = \"mpt0\"\n", &format!("name = \"mpt0\"\n{extra}"));
    let e = errors(&text);
    assert_eq!(e.len(), 40_000);
    assert!(
        e[0].starts_with("t.toml:4: tunnel.k0: unknown key"),
        "{}",
        e[0]
    );
    assert!(
        e[39_999].starts_with("t.toml:40003: tunnel.k39999: unknown key"),
        "{}",
        e[39_999]
    );
}

#[test]
fn config_and_key_files_must_be_regular_and_small() {
    let d = tmpdir("kinds");
    let d = d.path();
    let e = Config::load(d).unwrap_err();
    assert!(e[0].message.contains("is a directory"), "{e:?}");
    let big = d.join("big.toml");
    std::fs::write(&big, vec![b'#'; files::MAX_CONFIG_BYTES as usize + 1]).unwrap();
    let e = Config::load(&big).unwrap_err();
    assert!(
        e[0].message.contains("more than the 1048576 bytes"),
        "{e:?}"
    );
    // A directory as the key file says so (not "readable by others").
    std::fs::create_dir_all(d.join("keydir")).unwrap();
    let text = SECURE_CLIENT
        .replace(
            "private_key = \"CQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQk=\"",
            "private_key_file = \"keydir\"",
        )
        .replace("PEER", &peer_pub());
    let cfg = d.join("c.toml");
    write_private(&cfg, &text);
    let e = Config::load(&cfg).unwrap_err();
    assert!(
        e.iter()
            .any(|e| e.message.contains("keydir is a directory")),
        "{e:?}"
    );
}

#[test]
fn first_hour_mistakes_are_refused_clearly() {
    // The hint for a missing [security] writes a private key file (mode
    // 0600), not a redirect (mode 0644, which mpt refuses).
    let no_sec = MINIMAL.replace("[security]\ninsecure_no_encryption = true\n", "");
    let e = errors(&no_sec).join("\n");
    assert!(
        e.contains("mpt genkey -o FILE") && !e.contains("> FILE"),
        "{e}"
    );
    // Wildcard and port-0 binds.
    let e = errors(&MINIMAL.replace("192.168.1.1:5000", "0.0.0.0:5000")).join("\n");
    assert!(e.contains("path[1].local") && e.contains("wildcard"), "{e}");
    let e = errors(&MINIMAL.replace("192.168.1.1:5000", "192.168.1.1:0")).join("\n");
    assert!(e.contains("path[1].local") && e.contains("port 0"), "{e}");
    // An IPv6 route on an IPv4-only tunnel, and the other way round.
    let e = errors(&format!("{MINIMAL}[[route]]\nnetwork = \"fd00:99::/48\"\n")).join("\n");
    assert!(
        e.contains("route[1].network") && e.contains("no IPv6 address"),
        "{e}"
    );
    let v6 = MINIMAL.replace("10.0.0.1/24", "fd00::1/64");
    let e = errors(&format!("{v6}[[route]]\nnetwork = \"10.9.0.0/16\"\n")).join("\n");
    assert!(e.contains("no IPv4 address"), "{e}");
    // `addresses` as a string: one error, not two.
    let e = errors(&MINIMAL.replace("[\"10.0.0.1/24\"]", "\"10.0.0.1/24\""));
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].contains("expected an array"), "{e:?}");
    // An empty array is still refused.
    let e = errors(&MINIMAL.replace("[\"10.0.0.1/24\"]", "[]"));
    assert!(e.join("").contains("needs at least one address"), "{e:?}");
}

#[test]
fn backup_paths() {
    let two = format!(
        "{MINIMAL}[[path]]\nname = \"lte\"\nlocal = \"192.168.2.1:5000\"\nremote = \"192.168.2.2:5000\"\nbackup = true\n"
    );
    let c = parse(&two).unwrap();
    assert!(!c.paths[0].backup && c.paths[1].backup);
    let all = two.replace(
        "remote = \"192.168.1.2:5000\"\n",
        "remote = \"192.168.1.2:5000\"\nbackup = true\n",
    );
    let e = errors(&all).join("\n");
    assert!(e.contains("every path is a backup path"), "{e}");
    let e = errors(&two.replace("backup = true", "backup = 1")).join("\n");
    assert!(e.contains("path[2].backup"), "{e}");
}

#[test]
fn metrics_listen_is_an_address_and_off_by_default() {
    assert_eq!(parse(MINIMAL).unwrap().metrics_listen, None);
    let on = format!("{MINIMAL}[metrics]\nlisten = \"127.0.0.1:9586\"\n");
    assert_eq!(
        parse(&on).unwrap().metrics_listen,
        Some("127.0.0.1:9586".parse().unwrap())
    );
    let bad = format!("{MINIMAL}[metrics]\nlisten = \"localhost\"\n");
    let e = errors(&bad);
    assert!(
        e.len() == 1 && e[0].contains("metrics.listen") && e[0].contains("address:port"),
        "{e:?}"
    );
    let typo = format!("{MINIMAL}[metrics]\nlisen = \"127.0.0.1:9586\"\n");
    assert!(errors(&typo)[0].contains("listen"), "{:?}", errors(&typo));
}
