//! Redaction throughput over 4 MiB of tool output, one pass and streamed in 64 KiB chunks (as the
//! executor streams a tool's stdout), with one known credential: toolgate's redactor (the value
//! in every easy encoding, spread forms, token shapes) beside the plain alternative, a search for
//! the raw value alone, in the same run.
//! Run: `cargo bench -p toolgate-core --bench redact`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use aho_corasick::AhoCorasick;
use toolgate_core::redact::Redactor;

const SECRET: &str = "ghs_bench0Credential0Value0123456789abcd";

/// Build-log-like text: words, paths, hex digests and numbers, the secret nowhere in it.
fn output(bytes: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes + 128);
    let mut n: u64 = 0x9e37_79b9_7f4a_7c15;
    while out.len() < bytes {
        n ^= n << 13;
        n ^= n >> 7;
        n ^= n << 17;
        let line = format!(
            "step {:>5} src/module_{}/file_{}.rs compiled in {} ms digest {:016x} ok\n",
            n % 10_000,
            n % 37,
            n % 101,
            n % 997,
            n
        );
        out.extend_from_slice(line.as_bytes());
    }
    out
}

fn throughput(bytes: usize, mut f: impl FnMut()) -> f64 {
    f();
    let runs = 5;
    let start = Instant::now();
    for _ in 0..runs {
        f();
    }
    let per = start.elapsed() / runs;
    bytes as f64 / per.max(Duration::from_nanos(1)).as_secs_f64() / (1024.0 * 1024.0)
}

fn main() {
    let text = output(4 << 20);
    let redactor = Redactor::new([SECRET]);
    let plain = AhoCorasick::new([SECRET]).expect("automaton");
    let one_pass = throughput(text.len(), || {
        black_box(redactor.redact_bytes(black_box(&text)));
    });
    let streamed = throughput(text.len(), || {
        let mut s = redactor.stream();
        let mut out = 0;
        for chunk in text.chunks(64 * 1024) {
            out += s.push(chunk).len();
        }
        out += s.finish().len();
        black_box(out);
    });
    let shapes_only = throughput(text.len(), || {
        black_box(Redactor::default().redact_bytes(black_box(&text)));
    });
    let raw_only = throughput(text.len(), || {
        black_box(plain.replace_all_bytes(black_box(&text), &[b"[REDACTED]".as_slice()]));
    });
    println!("redact/4 MiB of tool output, one credential:");
    println!("  toolgate redactor, one pass:            {one_pass:>8.1} MiB/s");
    println!("  toolgate redactor, 64 KiB chunks:       {streamed:>8.1} MiB/s");
    println!("  token shapes only (no known value):     {shapes_only:>8.1} MiB/s");
    println!("  plain alternative, raw value only:      {raw_only:>8.1} MiB/s");
    println!(
        "  ratio, one pass vs the plain search:    {:>8.1}x slower",
        raw_only / one_pass
    );
}
