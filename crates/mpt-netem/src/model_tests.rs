//! Tests of the link model in virtual time: delay, jitter (FIFO or not,
//! per access category with WMM), loss, rate, limits, duplication and
//! corruption.

use super::*;

fn run(spec: DirSpec, n: u64, gap: u64) -> (Direction, Vec<(u64, u64)>) {
    let mut d = Direction::new(spec, 42);
    let mut out = vec![];
    let mut now = 0;
    for i in 0..n {
        d.on_frame(now, i.to_be_bytes().to_vec());
        while let Some(f) = d.poll_release(now) {
            out.push((u64::from_be_bytes(f[..8].try_into().unwrap()), now));
        }
        now += gap;
    }
    while let Some(t) = d.next_release() {
        while let Some(f) = d.poll_release(t) {
            out.push((u64::from_be_bytes(f[..8].try_into().unwrap()), t));
        }
    }
    (d, out)
}

#[test]
fn rate_spaces_back_to_back_frames_by_their_transmission_time() {
    let spec = DirSpec {
        delay_ms: 1.0,
        rate_mbit: 100.0,
        ..Default::default()
    };
    let mut d = Direction::new(spec, 1);
    // Ten 1250-byte frames at once: 100 µs each on a 100 Mbit/s link.
    for _ in 0..10 {
        d.on_frame(5_000, vec![0u8; 1250]);
    }
    let mut times = vec![];
    while let Some(t) = d.next_release() {
        while d.poll_release(t).is_some() {
            times.push(t);
        }
    }
    let want: Vec<u64> = (1..=10).map(|k| 5_000 + k * 100_000 + 1_000_000).collect();
    assert_eq!(times, want);
    // An idle link sends a later frame as soon as it arrives.
    d.on_frame(10_000_000, vec![0u8; 125]);
    assert_eq!(d.next_release(), Some(10_000_000 + 10_000 + 1_000_000));
}

#[test]
fn fixed_delay_is_exact_in_virtual_time() {
    let spec = DirSpec {
        delay_ms: 10.0,
        ..Default::default()
    };
    let (d, out) = run(spec, 1000, 1_000_000);
    assert_eq!(out.len(), 1000);
    for (i, t) in out {
        assert_eq!(t, i * 1_000_000 + 10_000_000);
    }
    assert_eq!(d.stats.passed, 1000);
}

#[test]
fn random_loss_within_three_sigma() {
    for loss in [0.01, 0.02, 0.1] {
        let (d, out) = run(
            DirSpec {
                loss,
                ..Default::default()
            },
            10_000,
            1000,
        );
        let n = 10_000.0;
        let sigma = (n * loss * (1.0 - loss)).sqrt();
        let lost = d.stats.lost as f64;
        assert!((lost - n * loss).abs() < 3.0 * sigma, "loss {loss}: {lost}");
        assert_eq!(out.len() as u64 + d.stats.lost, 10_000);
    }
}

#[test]
fn bursty_loss_has_right_rate_and_burst_length() {
    let spec = DirSpec {
        loss: 0.05,
        loss_burst: 4.0,
        ..Default::default()
    };
    let (d, out) = run(spec, 200_000, 1000);
    let rate = d.stats.lost as f64 / 200_000.0;
    assert!((rate - 0.05).abs() < 0.01, "{rate}");
    // Mean burst length from gaps in the delivered sequence.
    let mut bursts = 0u64;
    let mut prev = None;
    for (i, _) in &out {
        if let Some(p) = prev {
            if i - p > 1 {
                bursts += 1;
            }
        }
        prev = Some(*i);
    }
    let mean_burst = d.stats.lost as f64 / bursts as f64;
    assert!((mean_burst - 4.0).abs() < 0.5, "{mean_burst}");
}

#[test]
fn jitter_keeps_fifo_unless_reorder() {
    let spec = DirSpec {
        delay_ms: 5.0,
        jitter_ms: 2.0,
        ..Default::default()
    };
    let (_, out) = run(spec.clone(), 5000, 100_000);
    assert!(out.windows(2).all(|w| w[0].0 < w[1].0));
    let (_, out) = run(
        DirSpec {
            reorder: true,
            ..spec
        },
        5000,
        100_000,
    );
    assert!(out.windows(2).any(|w| w[0].0 > w[1].0));
    assert_eq!(out.len(), 5000);
}

/// Held in FIFO order, a frame leaves no earlier than the one before
/// it, so on a busy link each frame waits for the latest draw of the
/// frames just ahead: 1 ms of jitter adds about 1.1 ms to the mean
/// delay of frames 127 µs apart (1514-byte frames at 95 % of
/// 100 Mbit/s) and nothing to frames 20 ms apart (a VoIP stream on an
/// idle link). No sender can queue less than that on such a link.
#[test]
fn fifo_jitter_delays_a_busy_link_more_than_an_idle_one() {
    let spec = DirSpec {
        delay_ms: 5.0,
        jitter_ms: 1.0,
        ..Default::default()
    };
    let mean_ms = |gap: u64| {
        let (d, _) = run(spec.clone(), 20_000, gap);
        d.stats.added_delay_ns_sum as f64 / d.stats.passed as f64 / 1e6
    };
    let idle = mean_ms(20_000_000);
    let busy = mean_ms(127_000);
    assert!((idle - 5.0).abs() < 0.05, "idle {idle}");
    assert!((busy - idle - 1.1).abs() < 0.15, "busy {busy} idle {idle}");
}

/// An Ethernet/IPv4 frame of `len` bytes with TOS `tos`, carrying `i`
/// at bytes 34..42.
fn ip_frame(i: u64, tos: u8, len: usize) -> Vec<u8> {
    let mut f = vec![0u8; len.max(42)];
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    f[14] = 0x45;
    f[15] = tos;
    f[34..42].copy_from_slice(&i.to_be_bytes());
    f
}

/// Mean time in the link of the frames with TOS `tos`, ms: best-effort
/// frames every `gap` ns, a voice frame (EF) every 20 ms among them.
fn mean_by_tos(spec: DirSpec, gap: u64, len: usize) -> (f64, f64) {
    let mut d = Direction::new(spec, 42);
    let (mut sent, mut got) = (std::collections::HashMap::new(), [(0u64, 0u64); 2]);
    let mut now = 0;
    let mut next_voice = 0;
    let mut i = 0u64;
    let mut take =
        |d: &mut Direction, t: u64, sent: &std::collections::HashMap<u64, (u64, usize)>| {
            while let Some(f) = d.poll_release(t) {
                let id = u64::from_be_bytes(f[34..42].try_into().unwrap());
                let (at, k) = sent[&id];
                got[k].0 += t - at;
                got[k].1 += 1;
            }
        };
    while now < 2_000_000_000 {
        let voice = now >= next_voice;
        if voice {
            next_voice += 20_000_000;
        }
        let (tos, k) = if voice { (0xb8, 0) } else { (0, 1) };
        sent.insert(i, (now, k));
        d.on_frame(now, ip_frame(i, tos, if voice { 200 } else { len }));
        i += 1;
        take(&mut d, now, &sent);
        now += gap;
    }
    while let Some(t) = d.next_release() {
        take(&mut d, t, &sent);
    }
    let ms = |(sum, n): (u64, u64)| sum as f64 / n as f64 / 1e6;
    (ms(got[0]), ms(got[1]))
}

#[test]
fn wmm_voice_frames_do_not_wait_behind_best_effort_jitter() {
    let spec = DirSpec {
        delay_ms: 5.0,
        jitter_ms: 1.0,
        ..Default::default()
    };
    let wmm = DirSpec {
        wmm: true,
        ..spec.clone()
    };
    let (voice_fifo, be_fifo) = mean_by_tos(spec, 127_000, 1514);
    let (voice_wmm, be_wmm) = mean_by_tos(wmm, 127_000, 1514);
    // One shared FIFO: voice waits behind frames that drew more delay.
    assert!(voice_fifo - 5.0 > 0.8, "fifo voice {voice_fifo}");
    // Its own queue: only its own jitter (20 ms apart, no holding).
    assert!((voice_wmm - 5.0).abs() < 0.2, "wmm voice {voice_wmm}");
    assert!(
        (be_wmm - be_fifo).abs() < 0.1,
        "best effort {be_wmm} vs {be_fifo}"
    );
}

#[test]
fn wmm_voice_frames_go_ahead_of_the_backlog_at_the_link_rate() {
    // 100 Mbit/s offered 110: a backlog grows; voice jumps it.
    let spec = DirSpec {
        rate_mbit: 100.0,
        ..Default::default()
    };
    let wmm = DirSpec {
        wmm: true,
        ..spec.clone()
    };
    let (voice_fifo, _) = mean_by_tos(spec, 110_000, 1514);
    let (voice_wmm, be_wmm) = mean_by_tos(wmm, 110_000, 1514);
    assert!(
        voice_fifo > 50.0,
        "fifo voice waits for the backlog: {voice_fifo}"
    );
    // Its own 16 us of transmission, seen at the next poll (one
    // arrival, 110 us, later).
    assert!(voice_wmm < 0.15, "wmm voice: {voice_wmm}");
    assert!(be_wmm > 50.0, "the backlog stays: {be_wmm}");
}

#[test]
fn voice_is_told_by_dscp_in_ipv4_and_ipv6() {
    assert!(is_voice(&ip_frame(0, 0xb8, 60)), "EF");
    assert!(is_voice(&ip_frame(0, 0xb1, 60)), "VA with ECN");
    assert!(!is_voice(&ip_frame(0, 0x28, 60)), "AF11");
    let mut v6 = vec![0u8; 60];
    v6[12..14].copy_from_slice(&[0x86, 0xdd]);
    v6[14..16].copy_from_slice(&[0x6b, 0x80]);
    assert!(is_voice(&v6), "IPv6 EF");
    assert!(!is_voice(&v6[..15]), "truncated");
    let mut arp = ip_frame(0, 0xb8, 60);
    arp[12..14].copy_from_slice(&[0x08, 0x06]);
    assert!(!is_voice(&arp), "not IP");
}

#[test]
fn queue_limit_drops_and_counts() {
    let spec = DirSpec {
        delay_ms: 100.0,
        limit: 10,
        ..Default::default()
    };
    let (d, out) = run(spec, 100, 1000);
    assert_eq!(out.len(), 10);
    assert_eq!(d.stats.dropped_queue, 90);
    assert_eq!(d.stats.max_held, 10);
}

#[test]
fn duplicate_and_corrupt() {
    let spec = DirSpec {
        duplicate: 0.1,
        ..Default::default()
    };
    let (d, out) = run(spec, 10_000, 1000);
    assert_eq!(out.len() as u64, 10_000 + d.stats.duplicated);
    assert!(
        (800..1200).contains(&d.stats.duplicated),
        "{}",
        d.stats.duplicated
    );
    // An Ethernet/IPv4/UDP frame: one payload bit flips, checksum cleared.
    let mut f = vec![0u8; 14 + 20 + 8 + 10];
    f[12] = 0x08;
    f[14] = 0x45;
    f[14 + 9] = 17;
    f[14 + 20 + 6] = 0xab;
    let orig = f.clone();
    assert!(corrupt_udp4(&mut f, 12345));
    let diff: u32 = f
        .iter()
        .zip(&orig)
        .skip(42)
        .map(|(a, b)| (a ^ b).count_ones())
        .sum();
    assert_eq!(diff, 1);
    assert_eq!(&f[14 + 20 + 6..14 + 20 + 8], &[0, 0]);
    let mut not_udp = orig.clone();
    not_udp[14 + 9] = 6;
    assert!(!corrupt_udp4(&mut not_udp, 1));
}

#[test]
fn validation_names_fields() {
    assert!(DirSpec {
        loss: 1.5,
        ..Default::default()
    }
    .validate()
    .unwrap_err()
    .contains("loss"));
    assert!(DirSpec {
        loss_burst: 0.5,
        ..Default::default()
    }
    .validate()
    .unwrap_err()
    .contains("loss_burst"));
    assert!(DirSpec {
        delay_ms: f64::NAN,
        ..Default::default()
    }
    .validate()
    .unwrap_err()
    .contains("delay_ms"));
    assert!(DirSpec::default().validate().is_ok());
}

#[test]
fn a_trace_link_serves_at_its_opportunities_then_delays() {
    // One opportunity every 2 ms: 6 Mbit/s. Frames of 1014 bytes (1000
    // of IP packet) every millisecond: twice what the trace carries.
    let trace = std::sync::Arc::new(
        crate::trace::Trace::parse(
            &(1..=1000)
                .map(|i| format!("{}\n", 2 * i))
                .collect::<String>(),
        )
        .unwrap(),
    );
    let spec = DirSpec {
        delay_ms: 10.0,
        trace: Some("t".into()),
        queue_bytes: 20_000,
        trace_data: Some(trace),
        ..DirSpec::default()
    };
    let mut d = Direction::new(spec, 1);
    let mut out = vec![];
    for i in 0..400u64 {
        let now = i * 1_000_000;
        let mut f = vec![0u8; 1014];
        f[..8].copy_from_slice(&i.to_be_bytes());
        d.on_frame(now, f);
        while let Some(f) = d.poll_release(now) {
            out.push((u64::from_be_bytes(f[..8].try_into().unwrap()), now));
        }
    }
    while let Some(t) = d.next_release() {
        while let Some(f) = d.poll_release(t) {
            out.push((u64::from_be_bytes(f[..8].try_into().unwrap()), t));
        }
    }
    // In order; the first leaves at the opportunity at 2 ms plus 10 ms.
    assert!(out.windows(2).all(|w| w[0].0 < w[1].0));
    assert_eq!(out[0], (0, 12_000_000));
    // 1500 bytes per 2 ms carry 1.5 packets of 1000: 300 in 400 ms, less
    // what the 20 kB queue dropped; the queue's drops are counted.
    let passed = d.stats.passed;
    assert_eq!(passed + d.stats.dropped_queue, 400);
    assert!(d.stats.dropped_queue > 50, "{:?}", d.stats);
    // The last frame left 20 kB of queue (20 packets, 27 ms) behind the
    // trace's last served opportunity.
    let last = out.last().unwrap().1;
    assert!(last > 400_000_000 && last < 450_000_000, "{last}");
}

#[test]
fn ecn_capable_frames_that_wait_beyond_the_threshold_are_marked_not_dropped() {
    let spec = DirSpec {
        rate_mbit: 100.0,
        ecn_mark_ms: 0.25,
        ..Default::default()
    };
    let mut d = Direction::new(spec, 1);
    // Twenty 1250-byte IPv4 frames at once (100 µs each): ECT(0) and
    // Not-ECT alternately. Those that wait more than 250 µs are past the
    // third; only the ECN-capable among them are marked.
    let frame = |tos: u8| {
        let mut f = vec![0u8; 1250];
        f[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        f[14] = 0x45;
        f[15] = tos;
        f
    };
    for i in 0..20 {
        d.on_frame(0, frame(if i % 2 == 0 { 0x02 } else { 0x00 }));
    }
    let mut tos = vec![];
    while let Some(t) = d.next_release() {
        while let Some(f) = d.poll_release(t) {
            tos.push(f[15]);
        }
    }
    assert_eq!(tos.len(), 20, "nothing dropped");
    assert_eq!(&tos[..4], &[0x02, 0x00, 0x02, 0x00]);
    assert!(tos[4..].iter().step_by(2).all(|t| *t == 0x03), "{tos:?}");
    assert!(tos[5..].iter().step_by(2).all(|t| *t == 0x00), "{tos:?}");
    assert_eq!(d.stats.ecn_marked, 8);
}
