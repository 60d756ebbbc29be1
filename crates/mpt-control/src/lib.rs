//! The control protocol between the `mpt` CLI and a running daemon, over
//! the daemon's control socket (`mpt_io::control`): one [`Request`] per
//! connection, as one JSON line, answered by one JSON line (a document,
//! or `{"error": "..."}`, [`error`]).
//!
//! Requests are serde enums: the daemon of one tunnel and the
//! concentrator dispatch on [`Request`] and never parse words; the CLI
//! builds them and never formats request text. For scripts, the bare
//! words `status` and `reload` are accepted as well (`echo status |
//! socat - UNIX:/run/mpt/NAME.sock`).
//!
//! Invariants:
//! * [`Request::parse`] of [`Request::to_line`] gives the request back
//!   (tested for every variant);
//! * unknown requests and unknown fields are refused with a message that
//!   names them, never taken for something else;
//! * a line is parsed whole: nothing after the JSON value is ignored.

pub mod status;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A request to a running daemon. See the module documentation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "request", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// The status document (a concentrator's: every peer, one line each).
    Status,
    /// One peer's status in full (a concentrator): by name or public key.
    PeerStatus { peer: String },
    /// Take a path out of use (`down`) or back. On a concentrator the
    /// path is a peer's: `peer` names it.
    PathAdmin {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        peer: Option<String>,
        path: String,
        down: bool,
    },
    /// Change one setting of a path at runtime (`mpt path NAME set`).
    PathSet {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        peer: Option<String>,
        path: String,
        key: String,
        value: String,
    },
    /// Read the configuration file again and apply what changed.
    Reload,
    /// Start writing a packet capture (`mpt capture`).
    CaptureStart(CaptureSpec),
    /// How the capture under way (or the last one) stands.
    CaptureStatus,
    /// End the capture under way.
    CaptureStop,
    /// Add a peer to a concentrator at runtime (`mpt peer add`): its
    /// `[[peer]]` table as JSON, checked by the daemon as a file's would be.
    PeerAdd { peer: Value },
    /// Remove a concentrator's peer, by name or public key.
    PeerRemove { peer: String },
}

/// What a capture writes ([`Request::CaptureStart`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaptureSpec {
    /// The pcapng file (absolute: the daemon writes it).
    pub file: String,
    /// Capture the inner packets (the TUN side).
    #[serde(default)]
    pub tun: bool,
    /// Capture the datagrams of these paths, by name.
    #[serde(default)]
    pub paths: Vec<String>,
    /// On a concentrator: whose paths `paths` names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer: Option<String>,
    /// Stop after this many packets.
    #[serde(default)]
    pub count: Option<u64>,
    /// Stop after this many seconds.
    #[serde(default)]
    pub seconds: Option<f64>,
}

/// The answer to [`Request::CaptureStart`], [`Request::CaptureStatus`]
/// and [`Request::CaptureStop`]: how the capture under way (or the last
/// one) stands.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CaptureState {
    pub file: String,
    /// Packets handed to the writer.
    pub captured: u64,
    /// Packets left out because the writer lagged.
    pub dropped: u64,
    /// Packets written to the file.
    pub written: u64,
    /// The writer created the file.
    pub opened: bool,
    /// The capture ended (count, time, stop, or an error).
    pub done: bool,
    /// The writer finished and closed the file.
    pub closed: bool,
    /// Why the file could not be made or written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
}

/// The answer to [`Request::PeerAdd`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerAdded {
    pub ok: bool,
    /// The peer's id at the concentrator.
    pub id: u32,
    pub name: String,
}

/// The answer to [`Request::PeerRemove`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerRemoved {
    pub ok: bool,
    /// The name of the peer removed.
    pub removed: String,
}

/// The answer to [`Request::Reload`]: what the daemon did with its file.
/// A single tunnel fills `applied` and `failed`; a concentrator `added`,
/// `removed`, `changed` and `errors` (its peers); both `needs_restart`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reloaded {
    pub ok: bool,
    /// Changes in effect now, as `key: old -> new`.
    #[serde(default)]
    pub applied: Vec<String>,
    /// Keys that differ from what runs and need a restart.
    #[serde(default)]
    pub needs_restart: Vec<String>,
    /// Changes tried that failed (the old value runs on).
    #[serde(default)]
    pub failed: Vec<String>,
    /// A concentrator's peers added, removed, and changed in place
    /// (`NAME: key, key`), and the peers it could not apply.
    #[serde(default)]
    pub added: Vec<String>,
    #[serde(default)]
    pub removed: Vec<String>,
    #[serde(default)]
    pub changed: Vec<String>,
    #[serde(default)]
    pub errors: Vec<String>,
}

impl Request {
    /// The request as one line (without its newline).
    pub fn to_line(&self) -> String {
        // A derived Serialize of these types cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Parse one request line: a JSON object, or the bare words `status`
    /// or `reload`.
    pub fn parse(line: &str) -> Result<Request, String> {
        let line = line.trim();
        match line {
            "status" => return Ok(Request::Status),
            "reload" => return Ok(Request::Reload),
            _ => {}
        }
        if !line.starts_with('{') {
            return Err(format!(
                "unknown request '{}': requests are JSON objects with a \"request\" field (or the words status, reload)",
                shorten(line)
            ));
        }
        let given: Value = serde_json::from_str(line).map_err(|e| format!("bad request: {e}"))?;
        let r: Request =
            serde_json::from_value(given.clone()).map_err(|e| format!("bad request: {e}"))?;
        // serde does not refuse unknown fields beside a unit variant's tag:
        // every field given must be one the request has.
        let known = serde_json::to_value(&r).unwrap_or_default();
        if let (Some(given), Some(known)) = (given.as_object(), known.as_object()) {
            if let Some(k) = given
                .iter()
                .find(|(k, v)| !v.is_null() && !known.contains_key(*k))
                .map(|(k, _)| k)
            {
                return Err(format!("bad request: unknown field `{k}`"));
            }
        }
        Ok(r)
    }
}

/// An error answer.
pub fn error(message: impl Into<String>) -> Value {
    serde_json::json!({ "error": message.into() })
}

/// The daemon's refusal, if `v` is one (`{"error": "..."}`, [`error`]).
pub fn refusal(v: &Value) -> Option<String> {
    #[derive(Deserialize)]
    struct Refusal {
        error: String,
    }
    Refusal::deserialize(v).ok().map(|r| r.error)
}

/// An answer read as the type it should be, or what is wrong with it.
pub fn answer<T: serde::de::DeserializeOwned>(v: Value) -> Result<T, String> {
    serde_json::from_value(v).map_err(|e| format!("the daemon's answer does not read: {e}"))
}

/// A line quoted in an error, cut to a readable length.
fn shorten(s: &str) -> String {
    const MAX: usize = 80;
    match s.char_indices().nth(MAX) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all() -> Vec<Request> {
        vec![
            Request::Status,
            Request::PeerStatus { peer: "a".into() },
            Request::PathAdmin {
                peer: None,
                path: "wifi".into(),
                down: true,
            },
            Request::PathAdmin {
                peer: Some("car-7".into()),
                path: "lte".into(),
                down: false,
            },
            Request::PathSet {
                peer: None,
                path: "lte".into(),
                key: "rate_mbit".into(),
                value: "20".into(),
            },
            Request::Reload,
            Request::CaptureStart(CaptureSpec {
                file: "/tmp/x.pcapng".into(),
                tun: true,
                paths: vec!["wifi".into()],
                peer: None,
                count: Some(10),
                seconds: None,
            }),
            Request::CaptureStatus,
            Request::CaptureStop,
            Request::PeerAdd {
                peer: serde_json::json!({"public_key": "k", "allowed_ips": ["10.0.0.2/32"]}),
            },
            Request::PeerRemove { peer: "k".into() },
        ]
    }

    #[test]
    fn every_request_survives_its_line() {
        for r in all() {
            let line = r.to_line();
            assert!(!line.contains('\n'), "{line}");
            assert_eq!(Request::parse(&line), Ok(r), "{line}");
        }
    }

    #[test]
    fn the_wire_form_is_stable() {
        assert_eq!(Request::Status.to_line(), r#"{"request":"status"}"#);
        assert_eq!(
            Request::PathAdmin {
                peer: None,
                path: "wifi".into(),
                down: true
            }
            .to_line(),
            r#"{"request":"path_admin","path":"wifi","down":true}"#
        );
    }

    #[test]
    fn words_for_scripts() {
        assert_eq!(Request::parse("status\n"), Ok(Request::Status));
        assert_eq!(Request::parse(" reload "), Ok(Request::Reload));
    }

    #[test]
    fn unknown_requests_and_fields_are_named() {
        let e = Request::parse("path wifi down").unwrap_err();
        assert!(e.contains("unknown request 'path wifi down'"), "{e}");
        let e = Request::parse(r#"{"request":"explode"}"#).unwrap_err();
        assert!(e.contains("explode"), "{e}");
        let e = Request::parse(r#"{"request":"status","extra":1}"#).unwrap_err();
        assert!(e.contains("extra"), "{e}");
        let e = Request::parse(r#"{"request":"path_admin","path":"x"}"#).unwrap_err();
        assert!(e.contains("down"), "{e}");
        let e = Request::parse(r#"{"request":"status"} trailing"#).unwrap_err();
        assert!(e.contains("trailing"), "{e}");
        assert!(Request::parse("").is_err());
        let long = "x".repeat(500);
        assert!(Request::parse(&long).unwrap_err().len() < 250);
    }
}
