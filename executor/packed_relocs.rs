// Included by the build scripts of the two binaries a call starts (`toolgate`, the CLI every
// `toolgate call` runs, and `toolgate-executor`, started in every sandbox).
//
// Link them with packed relative relocations (`DT_RELR`) when this toolchain's linker and C
// library support it: a position-independent Rust binary of this size carries tens of thousands
// of relative relocations, and the dynamic loader reads a 24-byte entry for each at every
// process start; packed, the table is a few kilobytes. Position independence, and so the
// address randomization of the server that runs from the same binary, is unchanged.

/// Emits `-z pack-relative-relocs` for `bin` if a probe program links with it (and, when it can
/// run here, runs).
fn pack_relative_relocs(bin: &str) {
    const FLAG: &str = "-Wl,-z,pack-relative-relocs";
    println!("cargo:rerun-if-env-changed=CC");
    let target = std::env::var("TARGET").unwrap_or_default();
    if !target.contains("-linux-gnu") {
        return;
    }
    let Some(out) = std::env::var_os("OUT_DIR").map(std::path::PathBuf::from) else {
        return;
    };
    let source = out.join("relr_probe.c");
    let probe = out.join("relr_probe");
    if std::fs::write(&source, "int main(void) { return 0; }\n").is_err() {
        return;
    }
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let linked = std::process::Command::new(cc)
        .args(["-pie", "-fPIE", FLAG, "-o"])
        .arg(&probe)
        .arg(&source)
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let runs_here = std::env::var("HOST").is_ok_and(|host| host == target);
    let loads = !runs_here
        || std::process::Command::new(&probe)
            .status()
            .is_ok_and(|s| s.success());
    if linked && loads {
        println!("cargo:rustc-link-arg-bin={bin}={FLAG}");
    }
}
