//! Replays every stored fuzz corpus input (`fuzz/corpus/<target>/`)
//! through its target's body, on stable and in every `cargo test`: the
//! inputs cargo-fuzz kept for their coverage, and the crashes it once
//! found (fixed since), stay checked without a nightly toolchain. A target
//! whose corpus folder is missing or empty fails, so the replay cannot pass
//! by reading nothing.

use std::path::PathBuf;

fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let mut inputs: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a corpus entry").path())
        .filter(|p| p.is_file())
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (p, bytes)
        })
        .collect();
    inputs.sort();
    assert!(!inputs.is_empty(), "{}: no corpus inputs", dir.display());
    inputs
}

#[test]
fn every_target_takes_every_input_of_its_corpus() {
    for (name, body) in mpt_fuzzcheck::TARGETS {
        let inputs = corpus(name);
        for (path, bytes) in &inputs {
            let run = std::panic::catch_unwind(|| body(bytes));
            assert!(run.is_ok(), "{name}: {} panics", path.display());
        }
        println!("{name}: {} inputs", inputs.len());
    }
}

#[test]
fn the_target_list_matches_the_fuzz_crate() {
    let manifest = include_str!("../../../fuzz/Cargo.toml");
    let bins: Vec<&str> = manifest
        .lines()
        .filter_map(|l| l.strip_prefix("name = \""))
        .filter_map(|l| l.strip_suffix('"'))
        .filter(|n| *n != "mpt-fuzz")
        .collect();
    let listed: Vec<&str> = mpt_fuzzcheck::TARGETS.iter().map(|t| t.0).collect();
    assert_eq!(bins, listed);
}
