//! Microbenchmarks of the per-packet work in the core: header codec, AEAD
//! seal/open per packet size and cipher, the internet checksum, reorder
//! buffer, scheduler.
//!
//! Run: `cargo bench -p mpt-core`. Figures are per packet; compare runs on
//! the same machine only.

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use mpt_core::crypto::aead::{Cipher, DataKey};
use mpt_core::reorder::ReorderBuffer;
use mpt_core::sched::{Scheduler, Share, SmoothWrr};
use mpt_core::wire::{write_header, Header, HeaderFields, PacketType, HEADER_LEN};

fn header(c: &mut Criterion) {
    let f = HeaderFields {
        path: 3,
        class: 0,
        session: 7,
        counter: 99,
        path_seq: 5,
        timestamp_us: 1,
        tunnel_seq: 77,
    };
    let mut buf = [0u8; HEADER_LEN + 64];
    c.bench_function("header/write", |b| {
        b.iter(|| write_header(black_box(&mut buf), PacketType::Data, black_box(&f)))
    });
    write_header(&mut buf, PacketType::Data, &f);
    c.bench_function("header/parse", |b| {
        b.iter(|| Header::new_checked(black_box(&buf)).map(|h| h.fields()))
    });
}

fn aead(c: &mut Criterion) {
    let mut g = c.benchmark_group("aead");
    for cipher in [Cipher::ChaCha20Poly1305, Cipher::Aes256Gcm] {
        let k = DataKey::new(cipher, &[7; 32]);
        for size in [64usize, 512, 1420] {
            g.throughput(Throughput::Bytes(size as u64));
            let aad = [1u8; HEADER_LEN];
            let mut buf = vec![0u8; size + 16];
            g.bench_with_input(
                BenchmarkId::new(format!("seal/{}", cipher.name()), size),
                &size,
                |b, &n| {
                    let mut ctr = 0u64;
                    b.iter(|| {
                        ctr += 1;
                        k.seal(ctr, &aad, &mut buf, n)
                    })
                },
            );
            let mut sealed = vec![0u8; size + 16];
            k.seal(1, &aad, &mut sealed, size).unwrap();
            let mut scratch = sealed.clone();
            g.bench_with_input(
                BenchmarkId::new(format!("open/{}", cipher.name()), size),
                &size,
                |b, _| {
                    b.iter(|| {
                        // Restore the ciphertext (a copy, no allocation), then open.
                        scratch.copy_from_slice(&sealed);
                        k.open(1, &aad, &mut scratch).unwrap()
                    })
                },
            );
        }
    }
    g.finish();
}

fn reorder(c: &mut Criterion) {
    let payload = [0x45u8; 1400];
    c.bench_function("reorder/in_order", |b| {
        let mut rb = ReorderBuffer::new(4096, 100_000_000);
        let mut seq = 0u64;
        b.iter(|| {
            rb.insert(seq, &payload, 0);
            seq += 1;
        })
    });
    c.bench_function("reorder/pairs_swapped", |b| {
        let mut rb = ReorderBuffer::new(4096, 100_000_000);
        let mut seq = 0u64;
        b.iter(|| {
            rb.insert(seq + 1, &payload, 0);
            rb.insert(seq, &payload, 0);
            while let Some(p) = rb.pop() {
                rb.recycle(p);
            }
            seq += 2;
        })
    });
}

fn scheduler(c: &mut Criterion) {
    for n in [4usize, 12] {
        let mut s = SmoothWrr::with_share(&vec![1; n], Share::Bytes);
        let up = mpt_core::sched::views_of(&vec![true; n]);
        c.bench_function(&format!("sched/wrr_bytes/{n}_paths"), |b| {
            b.iter(|| s.pick(black_box(&up), 1400))
        });
    }
}

/// What QoS adds to a packet on the fast path: classification (standard
/// classes), the policer and the per-class accounting at sending.
fn qos(c: &mut Criterion) {
    use mpt_core::qos::{Qos, QosConfig};
    let mut q = Qos::new(QosConfig::standard(), 7, 1400, 100_000_000);
    let mut pkt = vec![0u8; 1400];
    pkt[0] = 0x45;
    pkt[9] = 6;
    pkt[12..20].copy_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2]);
    pkt[20..24].copy_from_slice(&[0x13, 0x88, 0x1f, 0x90]);
    let mut now = 0u64;
    c.bench_function("qos/classify_police_account", |b| {
        b.iter(|| {
            now += 1_000;
            let class = q.classify(black_box(&pkt));
            let ok = q.police(class, now, pkt.len());
            q.sent(class, now, 0, pkt.len());
            black_box(ok)
        })
    });
}

/// A concentrator's per-packet peer lookup (longest prefix match of the
/// destination) with 10 and 10,000 peers, each holding a v4 /24 and a v6
/// /64, looked up at addresses spread over all peers.
fn peer_lookup(c: &mut Criterion) {
    use mpt_core::concentrator::AllowedIps;
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    let mut g = c.benchmark_group("concentrator/lookup");
    for peers in [10u32, 10_000] {
        let mut t = AllowedIps::new();
        for p in 0..peers {
            let [_, _, b, cc] = p.to_be_bytes();
            t.insert(format!("10.{b}.{cc}.0/24").parse().unwrap(), p)
                .unwrap();
            t.insert(format!("fd00:{p:x}::/64").parse().unwrap(), p)
                .unwrap();
        }
        let v4: Vec<IpAddr> = (0..1024u32)
            .map(|i| {
                let [_, _, b, cc] = (i * 7919 % peers).to_be_bytes();
                IpAddr::V4(Ipv4Addr::new(10, b, cc, 9))
            })
            .collect();
        let v6: Vec<IpAddr> = (0..1024u32)
            .map(|i| {
                let p = i * 7919 % peers;
                IpAddr::V6(Ipv6Addr::new(0xfd00, p as u16, 0, 0, 0, 0, 0, 9))
            })
            .collect();
        for (fam, addrs) in [("v4", &v4), ("v6", &v6)] {
            let mut i = 0usize;
            g.bench_function(BenchmarkId::new(fam, peers), |b| {
                b.iter(|| {
                    i = (i + 1) & 1023;
                    black_box(t.lookup(black_box(addrs[i])))
                })
            });
        }
    }
    g.finish();
}

/// Handshakes a concentrator completes per second on one core: each
/// iteration is one client's initiation, from a new peer, answered (the
/// initiations are made beforehand, untimed).
fn concentrator_handshake(c: &mut Criterion) {
    use mpt_core::concentrator::Concentrator;
    use mpt_core::testing::{client_addr, client_config, client_peer, concentrator_template};
    use mpt_core::tunnel::Tunnel;
    c.bench_function("concentrator/handshake", |b| {
        b.iter_custom(|iters| {
            let mut conc = Concentrator::new(concentrator_template(2)).unwrap();
            let mut inits = Vec::with_capacity(iters as usize);
            for i in 0..iters as u32 {
                conc.add_peer(client_peer(i)).unwrap();
                let mut t = Tunnel::new(client_config(i, 2), 0);
                let mut buf = [0u8; 512];
                let tx = t.poll_transmit(0, &mut buf).unwrap();
                inits.push((
                    tx.local_key,
                    client_addr(i, tx.path as usize),
                    buf[..tx.len].to_vec(),
                ));
            }
            let mut buf = [0u8; 512];
            let start = std::time::Instant::now();
            // One a second: within the guard's load threshold (no cookies).
            for (i, (key, from, mut d)) in inits.into_iter().enumerate() {
                let now = i as u64 * 1_000_000_000;
                let (peer, _) = conc.recv(now, key, from, &mut d);
                let t = conc.tunnel_mut(peer.unwrap()).unwrap();
                black_box(t.poll_transmit(now, &mut buf).unwrap());
            }
            start.elapsed()
        })
    });
}

/// The internet checksum over a datagram and over a segment of the default
/// tunnel MTU (the sender sums each segment it cuts from a TSO packet).
fn checksum(c: &mut Criterion) {
    let mut g = c.benchmark_group("checksum");
    for size in [1420usize, 11_440] {
        let data: Vec<u8> = (0..size).map(|i| (i * 7 + 3) as u8).collect();
        g.throughput(Throughput::Bytes(size as u64));
        g.bench_with_input(BenchmarkId::new("sum16", size), &size, |b, _| {
            b.iter(|| mpt_core::ip::checksum::sum16(black_box(&data), 0))
        });
    }
}

criterion_group!(
    benches,
    header,
    checksum,
    aead,
    reorder,
    scheduler,
    qos,
    peer_lookup,
    concentrator_handshake
);
criterion_main!(benches);
