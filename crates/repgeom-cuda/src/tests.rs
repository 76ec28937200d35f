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
