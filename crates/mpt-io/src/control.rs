//! The control socket: a Unix stream socket over which `mpt status` asks the
//! running daemon for its state.
//!
//! Protocol: the client connects, writes one request line (`status`), and
//! reads one line of JSON; the server then closes. An unknown request gets
//! `{"error": "..."}`.
//!
//! Invariants:
//! * the socket file has mode 0600 from the moment it exists (umask is set
//!   around bind), and is owned by the daemon's user (root);
//! * a live socket of another daemon is never removed; a stale file (nobody
//!   listening) is replaced;
//! * a slow or silent client cannot stall the data plane: requests are read
//!   on a separate thread with timeouts, and the data plane only answers
//!   requests that are complete.

use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::Arc;
use std::time::Duration;

use tracing::{debug, warn};

/// How long a client may take to send its request, and the daemon to reply.
pub const CONTROL_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest request line accepted.
const MAX_REQUEST_BYTES: u64 = 1024;

/// A complete request waiting for the data plane's answer.
pub struct Request {
    pub command: String,
    pub reply: SyncSender<String>,
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
        if path.exists() {
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
        // SAFETY: umask only changes this process's file creation mask; it
        // is restored right after bind. No other thread creates files here.
        let old = unsafe { libc::umask(0o177) };
        let res = UnixListener::bind(path);
        // SAFETY: as above, restoring the previous mask.
        unsafe { libc::umask(old) };
        let listener = res.map_err(|e| err(path, "cannot bind", e))?;
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
        tx: mpsc::Sender<Request>,
        wake: Arc<dyn Fn() + Send + Sync>,
    ) -> io::Result<()> {
        let listener = self
            .listener
            .take()
            .ok_or_else(|| io::Error::other("already serving"))?;
        std::thread::Builder::new()
            .name("mpt-control".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    match conn {
                        Ok(stream) => {
                            if let Err(e) = handle(stream, &tx, wake.as_ref()) {
                                debug!("control client: {e}");
                            }
                        }
                        Err(e) => warn!("control socket accept failed: {e}"),
                    }
                }
            })?;
        Ok(())
    }
}

fn handle(
    stream: UnixStream,
    tx: &mpsc::Sender<Request>,
    wake: &(dyn Fn() + Send + Sync),
) -> io::Result<()> {
    stream.set_read_timeout(Some(CONTROL_TIMEOUT))?;
    stream.set_write_timeout(Some(CONTROL_TIMEOUT))?;
    let mut line = String::new();
    BufReader::new(io::Read::take(&stream, MAX_REQUEST_BYTES)).read_line(&mut line)?;
    let (reply_tx, reply_rx) = mpsc::sync_channel(1);
    tx.send(Request {
        command: line.trim().to_string(),
        reply: reply_tx,
    })
    .map_err(|_| io::Error::other("daemon stopping"))?;
    wake();
    let answer = recv_reply(&reply_rx)?;
    let mut w = &stream;
    w.write_all(answer.as_bytes())?;
    w.write_all(b"\n")
}

fn recv_reply(rx: &Receiver<String>) -> io::Result<String> {
    rx.recv_timeout(CONTROL_TIMEOUT)
        .map_err(|_| io::Error::other("daemon did not answer"))
}

impl Drop for ControlSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Client side: send `command` and return the daemon's one-line answer.
pub fn request(path: &Path, command: &str) -> io::Result<String> {
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
    BufReader::new(&stream).read_line(&mut line)?;
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
        let (tx, rx) = mpsc::channel::<Request>();
        s.serve(tx, Arc::new(|| {})).unwrap();
        std::thread::spawn(move || {
            for r in rx {
                let _ = r.reply.send(format!("{{\"echo\":\"{}\"}}", r.command));
            }
        });
        assert_eq!(
            request(&path, "status").unwrap().trim(),
            "{\"echo\":\"status\"}"
        );
        // A second daemon on the same path is refused.
        let e = ControlSocket::bind(&path).err().unwrap().to_string();
        assert!(e.contains("in use by another running mpt"), "{e}");
        drop(s);
        assert!(!path.exists());
        let e = request(&path, "status").unwrap_err().to_string();
        assert!(e.contains("is the daemon running"), "{e}");
        let _ = std::fs::remove_dir_all(dir);
    }
}
