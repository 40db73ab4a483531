//! The cost of scanning a tool's result for secrets ([`awf::scan::secrets::redact`]), the
//! layer every result now passes, against, in the same rounds, what passing it costs
//! anyway (the text copied, as a result is on its way to the agent). Three texts: 4 KiB
//! and 64 KiB of ordinary source code (this crate's own, no secret), and 4 KiB with two
//! secrets in it. Medians of `ROUNDS` rounds of `CALLS` scans each, microseconds a scan;
//! the machine is shared.
//!
//! `cargo build --release -p awf --example scan_bench && target/release/examples/scan_bench [ROUNDS] [CALLS]`

use std::hint::black_box;
use std::time::Instant;

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// `bytes` of this crate's sources (no secret in them: the corpus test checks it).
fn ordinary(bytes: usize) -> String {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/run");
    let mut text = String::new();
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    files.sort();
    for f in files.iter().cycle() {
        if text.len() >= bytes {
            break;
        }
        text.push_str(&std::fs::read_to_string(f).unwrap_or_default());
    }
    let end = (0..=bytes)
        .rev()
        .find(|i| text.is_char_boundary(*i))
        .unwrap();
    text.truncate(end);
    text
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(15);
    let calls: usize = std::env::args()
        .nth(2)
        .and_then(|a| a.parse().ok())
        .unwrap_or(200);
    let mut with_secrets = ordinary(4 << 10);
    with_secrets.insert_str(
        2048,
        "\naws_access_key_id = AKIAZ7Q2X4K9M3N5P8R6\nexport GH=ghp_Zr8Qw2Lx5Vn3Kt7Yb1Hc9Pd4Mf6Js0Ga2Te8\n",
    );
    // The first scan of a process compiles the patterns: paid once, at a server's first
    // tool result.
    let rss = || {
        std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("VmRSS:"))
                    .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            })
            .unwrap_or(0)
    };
    // A server has the audit's masks built before its first result (its first record is
    // masked): what the scan adds is measured beyond them.
    let masker = awf::telemetry::audit::Masker::new(Vec::new(), 1024);
    black_box(masker.mask_text("password=x Authorization: Bearer y ghp_z"));
    let before = rss();
    let first = Instant::now();
    black_box(awf::scan::secrets::redact(black_box("")));
    let compile_us = first.elapsed().as_secs_f64() * 1e6;
    let compiled_kib = rss().saturating_sub(before);
    let first = Instant::now();
    black_box(awf::scan::secrets::redact(black_box(&with_secrets)));
    let first_us = first.elapsed().as_secs_f64() * 1e6;
    let texts = [
        ("4 KiB, no secret", ordinary(4 << 10)),
        ("64 KiB, no secret", ordinary(64 << 10)),
        ("4 KiB, two secrets", with_secrets),
    ];
    println!(
        "scan_bench: the patterns compiled (once a process): {compile_us:.0} µs, +{compiled_kib} \
         KiB resident beyond the audit's masks; the first 4 KiB scan after: {first_us:.0} µs"
    );
    println!("scan_bench: {rounds} rounds of {calls} calls, medians, µs a call");
    println!(
        "{:<22} {:>10} {:>10} {:>8}",
        "text", "copy", "scan", "ratio"
    );
    for (name, text) in &texts {
        let (mut copy, mut scan) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            let t = Instant::now();
            for _ in 0..calls {
                black_box(black_box(text.as_str()).to_string());
            }
            copy.push(t.elapsed().as_secs_f64() * 1e6 / calls as f64);
            let t = Instant::now();
            for _ in 0..calls {
                black_box(awf::scan::secrets::redact(black_box(text)));
            }
            scan.push(t.elapsed().as_secs_f64() * 1e6 / calls as f64);
        }
        let (c, s) = (median(&mut copy), median(&mut scan));
        println!("{name:<22} {c:>10.2} {s:>10.2} {:>7.0}x", s / c);
    }
}
