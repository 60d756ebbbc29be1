//! The control socket: a Unix stream socket over which `mpt status` asks the
//! running daemon for its state.
//!
//! Protocol: the client connects, writes one request line (a
//! [`mpt_control::Request`] as JSON), and reads one line of JSON; the
//! server then closes. A request the daemon does not take gets
//! `{"error": "..."}`.
//!
//! Invariants:
//! * the socket file has mode 0600 from the moment it exists (umask is set
//!   around bind), and is owned by the daemon's user (root);
//! * a live socket of another daemon is never removed; only a stale socket
//!   (nobody listening) is replaced: a regular file, directory or anything
//!   else at the path is a clear error and is left alone;
//! * requests and answers are bounded in size ([`MAX_REQUEST_BYTES`],
//!   [`MAX_ANSWER_BYTES`]);
//! * a slow or silent client cannot stall the data plane or other clients:
//!   each client is served on its own thread (at most
//!   [`MAX_CONTROL_CLIENTS`] at once) with its own deadline, and the data
//!   plane only answers requests that are complete.

use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, SyncSender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{debug, warn};

/// How long a client may take to send its request, and the daemon to reply.
pub const CONTROL_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest request line accepted.
pub const MAX_REQUEST_BYTES: usize = 1024;
/// Longest answer a client accepts (a status document with 32 paths is a
/// few tens of KiB).
pub const MAX_ANSWER_BYTES: u64 = 16 << 20;
/// Control clients served at once; more are refused with an error line.
pub const MAX_CONTROL_CLIENTS: usize = 16;

/// A complete request waiting for the data plane's answer.
pub struct Pending {
    pub command: String,
    pub reply: SyncSender<String>,
    /// Who asked (the client's process, user and group from
    /// `SO_PEERCRED`), for the log of every change.
    pub who: String,
}

/// Bound control socket; removes its file on drop.
pub struct ControlSocket {
    path: PathBuf,
    listener: Option<UnixListener>,
}

fn err(path: &Path, what: &str, e: io::Error) -> io::Error {
    io::Error::new(
        e.kind(),
        format!("control socket {}: {what}: {e}", path.display()),
    )
}

impl ControlSocket {
    /// Bind `path` with mode 0600, creating its directory (mode 0700) if
    /// needed. Fails if another daemon is listening there.
    pub fn bind(path: &Path) -> io::Result<ControlSocket> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            if !dir.exists() {
                std::fs::create_dir_all(dir)
                    .map_err(|e| err(path, "cannot create its directory", e))?;
                let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
            }
        }
        if let Ok(meta) = std::fs::symlink_metadata(path) {
            if !meta.file_type().is_socket() {
                let what = if meta.is_dir() {
                    "a directory"
                } else if meta.is_file() {
                    "a regular file"
                } else {
                    "not a socket"
                };
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!(
                        "control socket {} exists and is {what}; mpt replaces only a stale socket there. Remove it or set tunnel.control_socket to another path",
                        path.display()
                    ),
                ));
            }
            if UnixStream::connect(path).is_ok() {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!(
                        "control socket {} is in use by another running mpt; set tunnel.control_socket to a different path",
                        path.display()
                    ),
                ));
            }
            std::fs::remove_file(path).map_err(|e| err(path, "cannot remove stale file", e))?;
        }
        let listener = mpt_sys::fs::bind_private(path).map_err(|e| err(path, "cannot bind", e))?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| err(path, "cannot set mode 0600", e))?;
        Ok(ControlSocket {
            path: path.to_path_buf(),
            listener: Some(listener),
        })
    }

    /// Serve requests on a background thread. Each complete request is sent
    /// to `tx` after which `wake` is called so the data plane answers it.
    pub fn serve(
        &mut self,
        tx: mpsc::Sender<Pending>,
        wake: Arc<dyn Fn() + Send + Sync>,
    ) -> io::Result<()> {
        let listener = self
            .listener
            .take()
            .ok_or_else(|| io::Error::other("already serving"))?;
        std::thread::Builder::new()
            .name("mpt-control".into())
            .spawn(move || {
                let active = Arc::new(AtomicUsize::new(0));
                for conn in listener.incoming() {
                    match conn {
                        Ok(stream) => serve_one(stream, &active, &tx, &wake),
                        Err(e) => warn!("control socket accept failed: {e}"),
                    }
                }
            })?;
        Ok(())
    }
}

/// Serve one client on a thread of its own, or refuse it when
/// [`MAX_CONTROL_CLIENTS`] are already being served.
fn serve_one(
    stream: UnixStream,
    active: &Arc<AtomicUsize>,
    tx: &mpsc::Sender<Pending>,
    wake: &Arc<dyn Fn() + Send + Sync>,
) {
    if active.fetch_add(1, Ordering::AcqRel) >= MAX_CONTROL_CLIENTS {
        active.fetch_sub(1, Ordering::AcqRel);
        let _ = stream.set_write_timeout(Some(Duration::from_millis(100)));
        let _ = (&stream).write_all(b"{\"error\":\"too many control clients at once\"}\n");
        return;
    }
    let (active, tx, wake) = (Arc::clone(active), tx.clone(), Arc::clone(wake));
    let spawned = std::thread::Builder::new()
        .name("mpt-control-client".into())
        .spawn(move || {
            if let Err(e) = handle(&stream, &tx, wake.as_ref()) {
                debug!("control client: {e}");
            }
            active.fetch_sub(1, Ordering::AcqRel);
        });
    if let Err(e) = spawned {
        warn!("control client thread: {e}");
    }
}

/// Read one request line within the client's own deadline.
fn read_request(stream: &UnixStream, deadline: Instant) -> io::Result<String> {
    let mut buf = Vec::with_capacity(64);
    let mut chunk = [0u8; 256];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "request too slow"));
        }
        stream.set_read_timeout(Some(left))?;
        let n = io::Read::read(&mut &*stream, &mut chunk)?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf.contains(&b'\n') {
            break;
        }
        if buf.len() > MAX_REQUEST_BYTES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "request too long",
            ));
        }
    }
    let line = buf.split(|b| *b == b'\n').next().unwrap_or_default();
    Ok(String::from_utf8_lossy(line).trim().to_string())
}

fn handle(
    stream: &UnixStream,
    tx: &mpsc::Sender<Pending>,
    wake: &(dyn Fn() + Send + Sync),
) -> io::Result<()> {
    let deadline = Instant::now() + CONTROL_TIMEOUT;
    stream.set_write_timeout(Some(CONTROL_TIMEOUT))?;
    let command = read_request(stream, deadline)?;
    let who = match mpt_sys::fs::peer_cred(stream) {
        Ok(c) => format!("pid {} uid {} gid {}", c.pid, c.uid, c.gid),
        Err(e) => format!("unknown ({e})"),
    };
    let (reply_tx, reply_rx) = mpsc::sync_channel(1);
    tx.send(Pending {
        command,
        reply: reply_tx,
        who,
    })
    .map_err(|_| io::Error::other("daemon stopping"))?;
    wake();
    let answer = reply_rx
        .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        .map_err(|_| io::Error::other("daemon did not answer"))?;
    let mut w = stream;
    w.write_all(answer.as_bytes())?;
    w.write_all(b"\n")
}

impl Drop for ControlSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Client side: send `request` and return the daemon's one-line answer.
pub fn request(path: &Path, request: &mpt_control::Request) -> io::Result<String> {
    let command = request.to_line();
    let stream = UnixStream::connect(path).map_err(|e| {
        let hint = match e.kind() {
            io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused => {
                " (is the daemon running? 'mpt up -c FILE' starts it)"
            }
            io::ErrorKind::PermissionDenied => " (the control socket is root-only: run as root)",
            _ => "",
        };
        io::Error::new(
            e.kind(),
            format!("cannot connect to {}: {e}{hint}", path.display()),
        )
    })?;
    stream.set_read_timeout(Some(CONTROL_TIMEOUT * 2))?;
    stream.set_write_timeout(Some(CONTROL_TIMEOUT))?;
    let mut w = &stream;
    w.write_all(command.as_bytes())?;
    w.write_all(b"\n")?;
    let mut line = String::new();
    BufReader::new(io::Read::take(&stream, MAX_ANSWER_BYTES)).read_line(&mut line)?;
    if !line.ends_with('\n') && line.len() as u64 >= MAX_ANSWER_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("the answer is longer than {MAX_ANSWER_BYTES} bytes"),
        ));
    }
    if line.is_empty() {
        return Err(io::Error::other(
            "the daemon closed the connection without answering",
        ));
    }
    Ok(line)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn roundtrip_mode_and_conflicts() {
        let dir = std::env::temp_dir().join(format!("mpt-ctl-test-{}", std::process::id()));
        let path = dir.join("sub").join("t.sock");
        let mut s = ControlSocket::bind(&path).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
        let (tx, rx) = mpsc::channel::<Pending>();
        s.serve(tx, Arc::new(|| {})).unwrap();
        std::thread::spawn(move || {
            for r in rx {
                let _ = r
                    .reply
                    .send(serde_json::json!({ "echo": r.command }).to_string());
            }
        });
        let answer = request(&path, &mpt_control::Request::Status).unwrap();
        let v: serde_json::Value = serde_json::from_str(&answer).unwrap();
        assert_eq!(
            v["echo"], "{\"request\":\"status\"}",
            "the request as one JSON line"
        );
        // A second daemon on the same path is refused.
        let e = ControlSocket::bind(&path).err().unwrap().to_string();
        assert!(e.contains("in use by another running mpt"), "{e}");
        drop(s);
        assert!(!path.exists());
        let e = request(&path, &mpt_control::Request::Status)
            .unwrap_err()
            .to_string();
        assert!(e.contains("is the daemon running"), "{e}");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn only_a_stale_socket_is_replaced() {
        let dir = std::env::temp_dir().join(format!("mpt-ctl-kinds-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("regular");
        std::fs::write(&file, "keep me").unwrap();
        let e = ControlSocket::bind(&file).err().unwrap().to_string();
        assert!(e.contains("is a regular file"), "{e}");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep me");
        let sub = dir.join("a-directory");
        std::fs::create_dir_all(&sub).unwrap();
        let e = ControlSocket::bind(&sub).err().unwrap().to_string();
        assert!(e.contains("is a directory"), "{e}");
        // A stale socket (nobody listening) is replaced.
        let stale = dir.join("stale.sock");
        drop(UnixListener::bind(&stale).unwrap());
        assert!(stale.exists());
        drop(ControlSocket::bind(&stale).unwrap());
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn idle_and_oversized_clients_do_not_block_others() {
        let dir = std::env::temp_dir().join(format!("mpt-ctl-idle-{}", std::process::id()));
        let path = dir.join("t.sock");
        let mut s = ControlSocket::bind(&path).unwrap();
        let (tx, rx) = mpsc::channel::<Pending>();
        s.serve(tx, Arc::new(|| {})).unwrap();
        std::thread::spawn(move || {
            for r in rx {
                let _ = r.reply.send("{\"ok\":true}".into());
            }
        });
        // Several clients connect and say nothing; one floods a long line.
        let idle: Vec<UnixStream> = (0..4)
            .map(|_| UnixStream::connect(&path).unwrap())
            .collect();
        let mut long = UnixStream::connect(&path).unwrap();
        let _ = long.write_all(&[b'x'; 4 * MAX_REQUEST_BYTES]);
        let started = std::time::Instant::now();
        assert_eq!(
            request(&path, &mpt_control::Request::Status)
                .unwrap()
                .trim(),
            "{\"ok\":true}"
        );
        assert!(
            started.elapsed() < Duration::from_millis(500),
            "{:?}",
            started.elapsed()
        );
        // The long request gets no answer: the server closes it.
        let mut answer = String::new();
        long.set_read_timeout(Some(CONTROL_TIMEOUT * 2)).unwrap();
        let _ = BufReader::new(&long).read_line(&mut answer);
        assert!(answer.is_empty(), "{answer}");
        drop(idle);
        drop(s);
        let _ = std::fs::remove_dir_all(dir);
    }
}
