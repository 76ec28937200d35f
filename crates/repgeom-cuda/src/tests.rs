use crate::{DEVICE_NAMES, Device, Error};

/// Parses `name`, or the error's message.
fn check(name: &str, expected: Result<Device, &str>) {
    match (name.parse::<Device>(), expected) {
        (Ok(d), Ok(e)) => {
            assert_eq!(d, e, "{name}");
            // Written back, it reads the same.
            assert_eq!(d.to_string().parse::<Device>().unwrap(), d, "{name}");
        }
        (Err(err), Err(fragment)) => {
            let msg = err.to_string();
            assert!(
                msg.contains(fragment) && msg.contains(DEVICE_NAMES),
                "{name}: {msg}"
            );
        }
        (got, want) => panic!("{name}: got {got:?}, expected {want:?}"),
    }
}

#[test]
fn device_names() {
    check("cpu", Ok(Device::Cpu));
    check("CPU", Ok(Device::Cpu));
    check("cuda", Ok(Device::Cuda(0)));
    check(" cuda:3 ", Ok(Device::Cuda(3)));
    check("cuda:", Err("unknown device `cuda:`"));
    check("cuda:-1", Err("unknown device `cuda:-1`"));
    check("gpu", Err("unknown device `gpu`"));
    check("", Err("unknown device ``"));
    assert_eq!(Device::default(), Device::Cpu);
    assert_eq!(Device::Cuda(0).to_string(), "cuda:0");
}

#[test]
fn device_in_serde() {
    #[derive(serde::Deserialize, serde::Serialize)]
    struct S {
        device: Device,
    }
    let s: S = serde_json::from_str(r#"{"device": "cuda:2"}"#).unwrap();
    assert_eq!(s.device, Device::Cuda(2));
    assert_eq!(serde_json::to_string(&s).unwrap(), r#"{"device":"cuda:2"}"#);
    let err = serde_json::from_str::<S>(r#"{"device": "tpu"}"#)
        .err()
        .unwrap();
    assert!(err.to_string().contains("unknown device `tpu`"), "{err}");
}

/// The CPU opens to nothing; a device index no machine has fails naming it, whichever check
/// stops it here (the driver or a library missing, or too few devices).
#[test]
fn opening_devices() {
    assert!(Device::Cpu.open().unwrap().is_none());
    let err = Device::Cuda(99)
        .open()
        .expect_err("no machine has 100 CUDA devices");
    let msg = err.to_string();
    assert!(msg.starts_with("device cuda:99: "), "{msg}");
    match err {
        Error::LibraryNotFound { searched, .. } => {
            assert!(searched.contains("/usr/local/cuda/lib64"), "{searched}")
        }
        Error::NoSuchDevice { count, .. } => assert!(count < 100),
        other => panic!("{other}"),
    }
}

/// The CUDA 13 toolkits of a folder, newest first; other folders and files are not toolkits.
#[test]
fn toolkits_are_found_newest_first() {
    let dir = tempfile::tempdir().unwrap();
    for name in [
        "cuda-12.8",
        "cuda-13.0",
        "cuda-13.10",
        "cuda-13.9",
        "cuda-13",
        "cuda",
        "cuda-13.x",
    ] {
        std::fs::create_dir(dir.path().join(name)).unwrap();
    }
    std::fs::write(dir.path().join("cuda-13.2"), b"a file").unwrap();
    let names: Vec<String> = crate::libs::toolkits(dir.path())
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["cuda-13.10", "cuda-13.9", "cuda-13.0", "cuda-13"]);
    assert!(crate::libs::toolkits(&dir.path().join("missing")).is_empty());
}

#[test]
fn ptxas_report_gives_each_kernels_resources() {
    // ptxas 13.0's --verbose report, as NVRTC logs it (two kernels of sm_90, one of them with
    // a spill made up for the test)
    let log = "ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'sum_chunks' for 'sm_90'
ptxas info    : Function properties for sum_chunks
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers
ptxas info    : Compile time = 8.653 ms
ptxas info    : Compiling entry function 'tie_sums' for 'sm_90'
ptxas info    : Function properties for tie_sums
ptxas         .     8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 34 registers, used 1 barriers, 16384 bytes smem
ptxas info    : Compile time = 21.2 ms
";
    let got = crate::assemble::ptxas_report(log);
    let k = |name: &str, registers, shared_bytes, spill_bytes| crate::KernelResources {
        name: name.into(),
        registers,
        shared_bytes,
        spill_bytes,
    };
    assert_eq!(
        got,
        [k("sum_chunks", 32, 0, 0), k("tie_sums", 34, 16384, 16)]
    );
    assert!(crate::assemble::ptxas_report("nvrtc: error: no such option").is_empty());
}
