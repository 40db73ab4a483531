//! Link flags for the `awf` executable. `awf mcp-serve` is spawned once per agent step and
//! must start small and fast:
//! - packing the relative relocations (RELR) shrinks the relocation table the loader
//!   reads at every start from ~0.5 MiB to a few KiB, keeping the binary
//!   position-independent (ASLR intact);
//! - in release builds, the functions of the serve path are placed together, in the
//!   order of `link/startup-order.txt` (written by `link/startup_order.py`): the kernel
//!   maps code 64 KiB around each page touched, so scattered startup code made most of
//!   the text resident (RSS after initialize 5.7 → 3.5 MiB). Names the binary no longer
//!   defines are skipped.
//!
//! LLD (Rust's default linker on x86_64 Linux) and glibc >= 2.36 support both; elsewhere
//! the flags are left out.
fn main() {
    let target = std::env::var("TARGET").unwrap_or_default();
    if target == "x86_64-unknown-linux-gnu" || target == "aarch64-unknown-linux-gnu" {
        println!("cargo:rustc-link-arg-bin=awf=-Wl,-z,pack-relative-relocs");
        if std::env::var("PROFILE").as_deref() == Ok("release") {
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
    }
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=link/startup-order.txt");
}
