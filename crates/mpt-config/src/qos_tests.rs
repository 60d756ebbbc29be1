//! `[qos]`: defaults, the documented example, and every mistake refused
//! with its key.

use std::path::Path;

use crate::tests::MINIMAL as BASE;
use crate::Config;

fn parse(extra: &str) -> Result<Config, Vec<String>> {
    Config::parse(&format!("{BASE}{extra}"), Path::new("t.toml"))
        .map_err(|e| e.iter().map(ToString::to_string).collect())
}

fn error(extra: &str, want: &str) {
    let e = parse(extra).expect_err(extra).join("\n");
    assert!(e.contains(want), "{e}\n  does not contain: {want}");
}

#[test]
fn standard_classes_by_default_and_off_on_request_or_with_weights() {
    let c = parse("").unwrap();
    let q = c.qos.expect("on by default");
    let names: Vec<&str> = q.classes.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["realtime", "besteffort"]);
    assert!(q.classes[0].realtime && q.classes[0].matcher.dscp.contains(&46));
    assert!(parse("[qos]\nenabled = false\n").unwrap().qos.is_none());
    assert!(parse("[scheduler]\nmode = \"wrr\"\n")
        .unwrap()
        .qos
        .is_none());
    error(
        "[scheduler]\nmode = \"wrr\"\n[[qos.class]]\nname = \"a\"\n",
        "QoS needs path-aware sending",
    );
}

#[test]
fn the_documented_gateway_example_loads() {
    let doc = include_str!("../../../docs/config.md");
    let block = doc
        .split("<!-- qos-example -->")
        .nth(1)
        .and_then(|s| s.split("<!-- /qos-example -->").next())
        .expect("example in docs/config.md");
    let toml = block.replace("```toml", "").replace("```", "");
    let q = parse(&toml).unwrap().qos.unwrap();
    let names: Vec<&str> = q.classes.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        ["voip", "m2m", "bulk"],
        "bulk is the default; none added"
    );
    let voip = &q.classes[0];
    assert!(voip.realtime && voip.redundant);
    assert_eq!(
        (voip.max_bps, voip.matcher.protocol),
        (Some(2_000_000), Some(17))
    );
    let m2m = &q.classes[1];
    assert_eq!(m2m.matcher.ports, [(8883, 8883)]);
    assert_eq!(m2m.min_bps, Some(500_000));
    assert_eq!(m2m.queue_ns, Some(1_000 * mpt_core::NANOS_PER_MS));
    assert!(q.classes[2].aqm && q.classes[2].matcher.is_catch_all());
}

#[test]
fn names_ranges_and_lists_are_parsed() {
    let q = parse(
        "[[qos.class]]\nname = \"x\"\ndscp = [\"af41\", \"CS5\", 10]\nprotocol = 6\nports = [\"80\", \"1000-2000\"]\nsource = [\"10.1.0.0/16\", \"2001:db8::1\"]\n",
    )
    .unwrap()
    .qos
    .unwrap();
    let m = &q.classes[0].matcher;
    assert_eq!(m.dscp, [34, 40, 10]);
    assert_eq!(m.protocol, Some(6));
    assert_eq!(m.ports, [(80, 80), (1000, 2000)]);
    assert_eq!((m.source.len(), m.source[1].len), (2, 128));
    assert_eq!(q.classes[1].name, "besteffort");
}

#[test]
fn the_outer_dscp_is_copied_for_real_time_classes_unless_configured() {
    use mpt_core::qos::OuterDscp;
    let q = parse("").unwrap().qos.unwrap();
    assert_eq!(q.classes[0].outer_dscp, OuterDscp::Inner, "realtime");
    assert_eq!(q.classes[1].outer_dscp, OuterDscp::Zero, "besteffort");
    let q = parse(
        "[[qos.class]]\nname = \"v\"\nrealtime = true\ndscp = [\"EF\"]\n\
         [[qos.class]]\nname = \"v2\"\nrealtime = true\ndscp = [44]\nouter_dscp = 0\n\
         [[qos.class]]\nname = \"m\"\nports = [\"8883\"]\nouter_dscp = \"AF21\"\n\
         [[qos.class]]\nname = \"b\"\nouter_dscp = \"inner\"\n",
    )
    .unwrap()
    .qos
    .unwrap();
    let got: Vec<_> = q.classes.iter().map(|c| c.outer_dscp).collect();
    assert_eq!(
        got,
        [
            OuterDscp::Inner,
            OuterDscp::Zero,
            OuterDscp::Fixed(18),
            OuterDscp::Inner
        ]
    );
}

#[test]
fn mistakes_are_refused_with_their_key() {
    let class = |body: &str| format!("[[qos.class]]\nname = \"c\"\n{body}\n");
    error(&class("dscp = [\"EX\"]"), "qos.class[1].dscp[1]");
    error(&class("dscp = [64]"), "is not a DSCP");
    error(&class("protocol = \"sctpx\""), "is not a protocol");
    error(&class("ports = [\"90-80\"]"), "is not a port or range");
    error(
        &class("protocol = \"icmp\"\nports = [\"1\"]"),
        "tcp and udp only",
    );
    error(
        &class("source = [\"10.0.0.0/33\"]"),
        "is not an address or network",
    );
    error(&class("redundant = true"), "real-time classes only");
    error(
        &class("realtime = true\nqueue_ms = 10"),
        "ordered classes only",
    );
    error(&class("max_mbit = 0"), "out of range");
    error(
        &class("min_mbit = 5\nmax_mbit = 1"),
        "above the class's max_mbit",
    );
    error(&class("priority = 16"), "out of range");
    error(&class("aqm = \"red\""), "is not one of codel, none");
    error(&class("outer_dscp = \"copy\""), "is not an outer DSCP");
    error(&class("outer_dscp = 64"), "qos.class[1].outer_dscp");
    error(&class("outer_dscp = true"), "'true' is not an outer DSCP");
    error(&class("prio = 1"), "did you mean 'priority'");
    error("[[qos.class]]\ndscp = [1]\n", "qos.class[1].name");
    error(
        "[[qos.class]]\nname = \"a\"\n[[qos.class]]\nname = \"b\"\n",
        "only one class may be the default",
    );
    error(
        "[[qos.class]]\nname = \"a\"\ndscp = [1]\n[[qos.class]]\nname = \"a\"\ndscp = [2]\n",
        "already the name of another class",
    );
    error(
        "[qos]\nenabled = false\n[[qos.class]]\nname = \"a\"\n",
        "remove them",
    );
}
