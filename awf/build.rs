//! Link flags for the `awf` executable. `awf mcp-serve` is spawned once per agent step,
//! so what every start costs matters: packing the relative relocations (RELR) shrinks
//! the relocation table the loader reads at every start from ~0.5 MiB to a few KiB,
//! keeping the binary position-independent (ASLR intact); LLD and GNU ld >= 2.38 with
//! glibc >= 2.36 support it.

fn main() {
    let target = std::env::var("TARGET").unwrap_or_default();
    if target == "x86_64-unknown-linux-gnu" || target == "aarch64-unknown-linux-gnu" {
        println!("cargo:rustc-link-arg-bin=awf=-Wl,-z,pack-relative-relocs");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
