//! `cargo xtask gpu kernels`: compiles repgeom's CUDA kernels with NVRTC (no GPU needed), for
//! the oldest compute capability they support and for the H100/H200's, then assembles them
//! for both with ptxas (through NVRTC, as the driver does when it loads them) and checks every
//! kernel's registers, shared memory and spills against what its launches need; fails on any
//! error; CI runs it with NVRTC from PyPI.
//!
//! `cargo xtask gpu bundle`: the release `repgeom`, stripped and gzipped, as
//! `target/gpu-bundle/repgeom.gz` (about 16 MB; 50 MB unpacked), to carry to a GPU machine
//! without a Rust toolchain, where `python3 fixtures/gpu/check.py --bin
//! target/gpu-bundle/repgeom.gz` unpacks it and runs the GPU check. Gzipped, because what a
//! device call carries (the repository's files and the carried paths) is limited to
//! [`CARRY_LIMIT`]: the bundle says how much of it a call would use, and fails above it.
//!
//! `cargo xtask gpu check`: both, then the check, on a machine with a GPU and Rust.
//!
//! `cargo xtask gpu stand-in [DIR]`: builds the CPU stand-in for the CUDA driver, cuBLAS and
//! NVRTC (`fixtures/gpu/cuda_stand_in.cpp`, with g++) as `DIR/lib64/libcuda.so.1` and the
//! toolkit's three sonames (default DIR: `target/cuda-stand-in`), under which
//! `python3 fixtures/gpu/check.py --stand-in DIR --bin target/debug/repgeom` runs the device
//! path end to end on the CPU; CI runs it.

use anyhow::{Context, bail};

/// The architectures the kernels are checked for: the oldest CUDA 13 supports (Turing), and Hopper's.
const ARCHS: [&str; 2] = ["compute_75", "compute_90"];

pub(crate) fn gpu(args: &[String]) -> anyhow::Result<()> {
    match args.first().map(String::as_str) {
        Some("kernels") => {
            for arch in ARCHS {
                let ptx = repgeom_cuda::compile_kernels(arch)
                    .with_context(|| format!("compiling repgeom's kernels for {arch}"))?;
                println!("{arch}: {} bytes of PTX", ptx.len());
                let sm = arch.replace("compute_", "sm_");
                let kernels = repgeom_cuda::assemble_kernels(&sm)
                    .with_context(|| format!("assembling repgeom's kernels for {sm}"))?;
                println!("{sm}: {}", within_limits(&kernels)?);
            }
            Ok(())
        }
        Some("bundle") => bundle().map(|_| ()),
        Some("check") => {
            let bin = bundle()?;
            let status = std::process::Command::new("python3")
                .arg(crate::root().join("fixtures/gpu/check.py"))
                .arg("--bin")
                .arg(&bin)
                .args(&args[1..])
                .status()
                .context("running python3 fixtures/gpu/check.py")?;
            anyhow::ensure!(
                status.success(),
                "the GPU check failed (its table says where)"
            );
            Ok(())
        }
        Some("stand-in") => {
            let dir = match args.get(1) {
                Some(d) => std::path::PathBuf::from(d),
                None => crate::root().join("target/cuda-stand-in"),
            };
            stand_in(&dir)?;
            println!(
                "{}: the CUDA stand-in; run python3 fixtures/gpu/check.py --stand-in {} --bin ...",
                dir.join("lib64").display(),
                dir.display()
            );
            Ok(())
        }
        _ => bail!(
            "usage: cargo xtask gpu kernels | bundle | check [check.py's options] | stand-in [DIR]"
        ),
    }
}

/// The most registers a kernel may use: at 1,024 threads, the largest block repgeom launches,
/// a block must fit in the 65,536 registers of a multiprocessor (every architecture from 7.5).
const MAX_REGISTERS: u32 = 64;
/// The most static shared memory a block may declare without opting in (every architecture).
const MAX_SHARED: u64 = 48 * 1024;

/// Checks that every assembled kernel can be launched as repgeom launches it (registers,
/// static shared memory) and spills nothing; the summary line, or what is past a limit.
fn within_limits(kernels: &[repgeom_cuda::KernelResources]) -> anyhow::Result<String> {
    let past: Vec<String> = kernels
        .iter()
        .filter(|k| k.registers > MAX_REGISTERS || k.shared_bytes > MAX_SHARED || k.spill_bytes > 0)
        .map(|k| {
            format!(
                "{}: {} registers (at most {MAX_REGISTERS}), {} bytes of shared memory (at most \
                 {MAX_SHARED}), {} bytes spilled",
                k.name, k.registers, k.shared_bytes, k.spill_bytes
            )
        })
        .collect();
    anyhow::ensure!(
        past.is_empty(),
        "kernels past the launch limits:\n{}",
        past.join("\n")
    );
    let most_registers = kernels.iter().max_by_key(|k| k.registers).expect("kernels");
    let most_shared = kernels
        .iter()
        .max_by_key(|k| k.shared_bytes)
        .expect("kernels");
    Ok(format!(
        "{} kernels assembled by ptxas; at most {} registers ({}) and {} bytes of shared memory \
         ({}), no spills",
        kernels.len(),
        most_registers.registers,
        most_registers.name,
        most_shared.shared_bytes,
        most_shared.name
    ))
}

/// The most that one call to a lent GPU machine carries: the repository's working tree
/// (tracked files and untracked ones git does not ignore) with the paths it names to carry.
const CARRY_LIMIT: u64 = 64 << 20;

/// Builds the release binary and writes it, stripped and gzipped, to
/// `target/gpu-bundle/repgeom.gz` (through a temporary file outside the folder, then renamed),
/// the folder's only file; then fails if the working tree with the bundle is over [`CARRY_LIMIT`].
fn bundle() -> anyhow::Result<std::path::PathBuf> {
    let root = crate::root();
    let status = std::process::Command::new(env!("CARGO"))
        .args([
            "build",
            "--release",
            "-p",
            "repgeom-cli",
            "--bin",
            "repgeom",
        ])
        .current_dir(&root)
        .status()
        .context("running cargo build --release")?;
    anyhow::ensure!(status.success(), "cargo build --release failed");
    let dir = root.join("target/gpu-bundle");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    // Stripped outside the folder, which travels whole: only the archive goes there.
    let stripped = root.join("target/repgeom.stripped");
    let status = std::process::Command::new("strip")
        .arg("-o")
        .arg(&stripped)
        .arg(root.join("target/release/repgeom"))
        .status()
        .context("running strip (binutils)")?;
    anyhow::ensure!(status.success(), "strip failed");
    let out = dir.join("repgeom.gz");
    // Written beside the folder too, so that a write cut short leaves nothing in it.
    let tmp = root.join("target/repgeom.gz.tmp");
    let mut gz = flate2::write::GzEncoder::new(
        std::io::BufWriter::new(
            std::fs::File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?,
        ),
        flate2::Compression::default(),
    );
    let mut binary = std::fs::File::open(&stripped)
        .with_context(|| format!("opening {}", stripped.display()))?;
    std::io::copy(&mut binary, &mut gz).with_context(|| format!("writing {}", tmp.display()))?;
    use std::io::Write as _;
    gz.finish()
        .and_then(|mut w| w.flush())
        .with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, &out).with_context(|| format!("renaming {}", tmp.display()))?;
    let unpacked = std::fs::metadata(&stripped)?.len();
    std::fs::remove_file(&stripped)?;
    // An earlier bundle's unpacked binary would travel beside the archive.
    let old = dir.join("repgeom");
    if old.exists() {
        std::fs::remove_file(&old).with_context(|| format!("removing {}", old.display()))?;
    }
    let size = std::fs::metadata(&out)?.len();
    println!(
        "{} ({:.1} MB; {:.1} MB unpacked)",
        out.display(),
        size as f64 / 1e6,
        unpacked as f64 / 1e6
    );
    match tree_bytes(&root) {
        Some(tree) => {
            let mib = |b: u64| b as f64 / f64::from(1u32 << 20);
            println!(
                "a device call carrying it carries {:.1} MiB of its {:.0} MiB: the working tree {:.1} MiB, the bundle {:.1} MiB",
                mib(tree + size),
                mib(CARRY_LIMIT),
                mib(tree),
                mib(size)
            );
            anyhow::ensure!(
                tree + size <= CARRY_LIMIT,
                "the working tree and the bundle ({:.1} MiB) are over what a device call carries ({:.0} MiB)",
                mib(tree + size),
                mib(CARRY_LIMIT)
            );
        }
        None => println!("(not a git checkout: the size a device call carries is not known)"),
    }
    Ok(out)
}

/// The bytes of the working tree that travels to a device machine: the files git tracks and
/// the untracked ones it does not ignore (`None` where git cannot list them).
fn tree_bytes(root: &std::path::Path) -> Option<u64> {
    let listed = std::process::Command::new("git")
        .args([
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ])
        .current_dir(root)
        .output()
        .ok()
        .filter(|o| o.status.success())?;
    let names = listed.stdout.split(|&b| b == 0).filter(|n| !n.is_empty());
    // A tracked file deleted from the tree does not travel.
    Some(
        names
            .filter_map(|n| std::fs::metadata(root.join(String::from_utf8_lossy(n).as_ref())).ok())
            .map(|m| m.len())
            .sum(),
    )
}

/// Builds the CPU stand-in for CUDA into `dir/lib64` (each library written beside its final
/// name, then renamed): the driver's library holds everything, and each of the toolkit's
/// libraries repgeom loads is an empty one that needs it, so a symbol looked up there is
/// found in the driver's.
fn stand_in(dir: &std::path::Path) -> anyhow::Result<()> {
    let lib = dir.join("lib64");
    std::fs::create_dir_all(&lib).with_context(|| format!("creating {}", lib.display()))?;
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "g++".into());
    let source = crate::root().join("fixtures/gpu/cuda_stand_in.cpp");
    let build = |soname: &str, args: &[&std::ffi::OsStr]| -> anyhow::Result<()> {
        let tmp = lib.join(format!("{soname}.tmp"));
        let status = std::process::Command::new(&cxx)
            .args([
                "-std=c++20",
                "-O2",
                "-fPIC",
                "-shared",
                "-fvisibility=hidden",
            ])
            .args(args)
            .arg(format!("-Wl,-soname,{soname}"))
            .arg("-o")
            .arg(&tmp)
            .current_dir(&lib)
            .status()
            .with_context(|| format!("running {cxx} (a C++20 compiler) for {soname}"))?;
        anyhow::ensure!(status.success(), "{cxx} failed building {soname}");
        std::fs::rename(&tmp, lib.join(soname))?;
        Ok(())
    };
    let [driver, toolkit @ ..] = repgeom_cuda::CUDA_LIBRARIES;
    build(driver, &[source.as_os_str()])?;
    let empty = lib.join("empty.cpp");
    std::fs::write(
        &empty,
        "// the toolkit's libraries: their symbols are libcuda.so.1's\n",
    )?;
    let needed = format!("./{driver}");
    for soname in toolkit {
        build(
            soname,
            &[
                empty.as_os_str(),
                "-Wl,--no-as-needed".as_ref(),
                needed.as_ref(),
                "-Wl,-rpath,$ORIGIN".as_ref(),
            ],
        )?;
    }
    std::fs::remove_file(&empty)?;
    Ok(())
}
