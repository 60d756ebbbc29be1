//! The metrics endpoint's HTTP side: many connections at once on one
//! thread (mio readiness), each with a deadline for its whole request and
//! answer, so that idle or slow clients (a slowloris, hundreds of open
//! connections) never delay a real scrape.
//!
//! Only what a Prometheus scrape needs of HTTP/1.1 (RFC 9112) is spoken:
//! one request per connection (`Connection: close`), its head up to
//! [`REQUEST_MAX_BYTES`], no body. A hand-written loop rather than an HTTP
//! crate: the workspace already has mio, and an async runtime for one
//! endpoint would be most of the daemon's dependencies.
//!
//! Invariants:
//! * a connection lives at most [`REQUEST_DEADLINE`] from its accept, then
//!   it is closed whatever it did (a per-request deadline, not per read);
//! * at most [`MAX_CONNECTIONS`] are open; a new one beyond that closes the
//!   oldest, so a fresh scraper always gets in;
//! * the answer is computed once the request head is complete, and
//!   written as the socket takes it; nothing here blocks on a client.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use tracing::debug;

/// Longest a connection may take from accept to the end of its answer
/// (tuning knob: a scrape of a local daemon takes milliseconds).
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(2);
/// Longest request head read (tuning knob; a scrape is a few hundred).
pub const REQUEST_MAX_BYTES: usize = 8 * 1024;
/// Connections open at once at most (tuning knob).
pub const MAX_CONNECTIONS: usize = 1024;

const LISTENER: Token = Token(usize::MAX);

/// An answer: status line text and body.
pub type Answer = (&'static str, String);

struct Conn {
    stream: TcpStream,
    head: Vec<u8>,
    out: Vec<u8>,
    sent: usize,
    deadline: Instant,
    accepted: u64,
}

/// Serve `listener` forever: `answer(method, path)` makes each answer.
pub fn serve(
    listener: std::net::TcpListener,
    tunnel: &str,
    mut answer: impl FnMut(&str, &str) -> Answer,
) -> io::Result<()> {
    listener.set_nonblocking(true)?;
    let mut listener = TcpListener::from_std(listener);
    let mut poll = Poll::new()?;
    poll.registry()
        .register(&mut listener, LISTENER, Interest::READABLE)?;
    let mut events = Events::with_capacity(256);
    let mut conns: HashMap<Token, Conn> = HashMap::new();
    let mut next = 0usize;
    let mut accepted = 0u64;
    loop {
        let now = Instant::now();
        let timeout = conns
            .values()
            .map(|c| c.deadline.saturating_duration_since(now))
            .min();
        if let Err(e) = poll.poll(&mut events, timeout) {
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
        for ev in &events {
            if ev.token() == LISTENER {
                accept_all(
                    &mut listener,
                    &poll,
                    &mut conns,
                    &mut next,
                    &mut accepted,
                    tunnel,
                );
                continue;
            }
            let t = ev.token();
            let done = match conns.get_mut(&t) {
                Some(c) => step(c, &poll, t, &mut answer),
                None => continue,
            };
            if done {
                if let Some(mut c) = conns.remove(&t) {
                    let _ = poll.registry().deregister(&mut c.stream);
                }
            }
        }
        let now = Instant::now();
        let expired: Vec<Token> = conns
            .iter()
            .filter(|(_, c)| c.deadline <= now)
            .map(|(t, _)| *t)
            .collect();
        for t in expired {
            if let Some(mut c) = conns.remove(&t) {
                debug!(tunnel = %tunnel, "metrics: a connection passed its deadline, closed");
                let _ = poll.registry().deregister(&mut c.stream);
            }
        }
    }
}

fn accept_all(
    listener: &mut TcpListener,
    poll: &Poll,
    conns: &mut HashMap<Token, Conn>,
    next: &mut usize,
    accepted: &mut u64,
    tunnel: &str,
) {
    loop {
        let (mut stream, _peer): (TcpStream, SocketAddr) = match listener.accept() {
            Ok(x) => x,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(e) => {
                debug!(tunnel = %tunnel, "metrics accept failed: {e}");
                return;
            }
        };
        if conns.len() >= MAX_CONNECTIONS {
            let oldest = conns
                .iter()
                .min_by_key(|(_, c)| c.accepted)
                .map(|(t, _)| *t);
            if let Some(mut c) = oldest.and_then(|t| conns.remove(&t)) {
                let _ = poll.registry().deregister(&mut c.stream);
            }
        }
        *next = (*next + 1) % (usize::MAX - 1);
        let t = Token(*next);
        if poll
            .registry()
            .register(&mut stream, t, Interest::READABLE)
            .is_err()
        {
            continue;
        }
        *accepted += 1;
        conns.insert(
            t,
            Conn {
                stream,
                head: Vec::with_capacity(512),
                out: Vec::new(),
                sent: 0,
                deadline: Instant::now() + REQUEST_DEADLINE,
                accepted: *accepted,
            },
        );
    }
}

/// Read what is there, answer once the head is complete, write what the
/// socket takes; `true` when the connection is finished (or failed).
fn step(
    c: &mut Conn,
    poll: &Poll,
    t: Token,
    answer: &mut impl FnMut(&str, &str) -> Answer,
) -> bool {
    if c.out.is_empty() {
        let mut buf = [0u8; 1024];
        loop {
            match c.stream.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    c.head.extend_from_slice(&buf[..n]);
                    if c.head.len() >= REQUEST_MAX_BYTES {
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if !complete(&c.head) {
                        return false;
                    }
                    break;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return true,
            }
        }
        let (method, path) = request_line(&c.head);
        let (status, body) = answer(&method, &path);
        c.out = format!(
            "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes();
        if poll
            .registry()
            .reregister(&mut c.stream, t, Interest::WRITABLE)
            .is_err()
        {
            return true;
        }
    }
    loop {
        match c.stream.write(&c.out[c.sent..]) {
            Ok(n) => {
                c.sent += n;
                if c.sent >= c.out.len() {
                    return true;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return false,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return true,
        }
    }
}

fn complete(head: &[u8]) -> bool {
    head.windows(4).any(|w| w == b"\r\n\r\n") || head.windows(2).any(|w| w == b"\n\n")
}

/// Method and path (without a query) of the request's first line.
fn request_line(head: &[u8]) -> (String, String) {
    let line = head.split(|b| *b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or("").to_string();
    let target = parts.next().unwrap_or("");
    (method, target.split('?').next().unwrap_or("").to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_line_is_read_whatever_the_head() {
        assert_eq!(
            request_line(b"GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\n\r\n"),
            ("GET".into(), "/metrics".into())
        );
        assert_eq!(request_line(b""), (String::new(), String::new()));
        assert!(complete(b"GET / HTTP/1.0\n\n") && !complete(b"GET / HTTP/1.1\r\n"));
    }

    #[test]
    fn slow_and_idle_connections_do_not_delay_a_scrape() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        std::thread::spawn(move || serve(l, "t", |m, p| ("200 OK", format!("{m} {p}\n"))));
        // Idle connections, and one that sends its head a byte at a time.
        let idle: Vec<_> = (0..200)
            .map(|_| std::net::TcpStream::connect(addr).unwrap())
            .collect();
        let mut slow = std::net::TcpStream::connect(addr).unwrap();
        slow.write_all(b"G").unwrap();
        let mut worst = Duration::ZERO;
        for _ in 0..20 {
            let t0 = Instant::now();
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            s.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").unwrap();
            let mut got = String::new();
            s.read_to_string(&mut got).unwrap();
            worst = worst.max(t0.elapsed());
            assert!(got.ends_with("GET /metrics\n"), "{got}");
        }
        assert!(worst < Duration::from_millis(500), "{worst:?}");
        // The idle ones are closed at their deadline.
        let mut one = &idle[0];
        one.set_read_timeout(Some(REQUEST_DEADLINE * 3)).unwrap();
        let mut b = [0u8; 1];
        let t0 = Instant::now();
        let r = one.read(&mut b);
        assert!(matches!(r, Ok(0)) || r.is_err());
        assert!(t0.elapsed() < REQUEST_DEADLINE * 2);
    }
}
