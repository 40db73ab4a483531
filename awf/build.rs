//! Link flags for the `awf` executable. `awf mcp-serve` is spawned once per agent step and
//! must start small and fast:
//! - packing the relative relocations (RELR) shrinks the relocation table the loader
//!   reads at every start from ~0.5 MiB to a few KiB, keeping the binary
//!   position-independent (ASLR intact); LLD and GNU ld >= 2.38 with glibc >= 2.36
//!   support it;
//! - in release builds linked by LLD, the functions of the serve path are placed
//!   together, in the order of `link/startup-order.txt` (written by
//!   `link/startup_order.py`): the kernel maps code 64 KiB around each page touched, so
//!   scattered startup code made most of the text resident (RSS after initialize 5.7 →
//!   3.5 MiB). Names the binary no longer defines are skipped. GNU ld does not know the
//!   option, so it is left out unless the linker is Rust's default LLD (x86_64 Linux,
//!   Rust >= 1.90, no linker configured).
use std::process::Command;

fn main() {
    let target = std::env::var("TARGET").unwrap_or_default();
    if target == "x86_64-unknown-linux-gnu" || target == "aarch64-unknown-linux-gnu" {
        println!("cargo:rustc-link-arg-bin=awf=-Wl,-z,pack-relative-relocs");
    }
    if std::env::var("PROFILE").as_deref() == Ok("release") && links_with_rust_lld(&target) {
        let dir = std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo");
        let order = std::path::Path::new(&dir).join("link/startup-order.txt");
        if order.is_file() {
            println!(
                "cargo:rustc-link-arg-bin=awf=-Wl,--symbol-ordering-file={}",
                order.display()
            );
            println!("cargo:rustc-link-arg-bin=awf=-Wl,--no-warn-symbol-ordering");
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=link/startup-order.txt");
    println!("cargo:rerun-if-env-changed=RUSTC_LINKER");
}

/// True when the executable will be linked by the LLD that Rust ships and uses by
/// default on x86_64 Linux from 1.90 on: no linker is configured (`RUSTC_LINKER`) and no
/// flag changes the linker or its features.
fn links_with_rust_lld(target: &str) -> bool {
    if target != "x86_64-unknown-linux-gnu" || std::env::var_os("RUSTC_LINKER").is_some() {
        return false;
    }
    let flags = std::env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    if flags.contains("linker") || flags.contains("fuse-ld") {
        return false;
    }
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let Ok(out) = Command::new(rustc).arg("-V").output() else {
        return false;
    };
    // "rustc 1.95.0 (59807616e 2026-04-14)"
    let version = String::from_utf8_lossy(&out.stdout);
    let mut numbers = version
        .split_whitespace()
        .nth(1)
        .unwrap_or_default()
        .split('.')
        .map(|n| n.parse::<u32>().unwrap_or(0));
    let (major, minor) = (numbers.next().unwrap_or(0), numbers.next().unwrap_or(0));
    (major, minor) >= (1, 90)
}
