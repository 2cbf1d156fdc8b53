//! What can be checked on a machine with the HIP runtime: it loads, counts
//! its devices, and refuses an ordinal it does not have with a typed error.
//! On this project's build machines (ROCm 5.2, no AMD GPU) that is every
//! ordinal; on a machine with GPUs, the ones past the count.

use tandem_hal::{Backend, ErrorKind, GpuApi, GpuDevice};
use tandem_hal_hip::HipApi;

#[test]
fn load_reports_the_backend_or_a_typed_error() {
    assert_eq!(HipApi::BACKEND, Backend::Hip);
    match HipApi::load() {
        Ok(api) => {
            api.device_count()
                .expect("a loaded runtime counts its devices");
        }
        Err(err) => {
            assert_eq!(err.backend, Backend::Hip);
            assert!(matches!(err.kind, ErrorKind::Vendor { .. }), "{err}");
        }
    }
}

#[test]
fn ordinals_past_the_count_are_no_device() {
    let Ok(api) = HipApi::load() else { return };
    let count = api.device_count().unwrap();
    for ordinal in [count, count + 1, usize::MAX] {
        let err = api.device(ordinal).unwrap_err();
        assert_eq!(err.backend, Backend::Hip);
        assert_eq!(
            err.kind,
            ErrorKind::NoDevice {
                requested: Some(ordinal),
                available: count,
            }
        );
        assert!(err.to_string().contains("no device"), "{err}");
    }
}

/// Without a GPU the runtime must load with no devices, and `device(0)` is
/// `NoDevice`. ROCm reaches AMD GPUs only through the kernel driver's
/// `/dev/kfd`: where it is absent (this project's build machines), no device
/// can exist, so the answer is known; where it exists, this test has nothing
/// to say.
#[test]
fn without_a_gpu_driver_there_are_no_devices() {
    if std::path::Path::new("/dev/kfd").exists() {
        return;
    }
    let api = HipApi::load().expect("the runtime loads without a GPU");
    assert_eq!(api.device_count(), Ok(0));
    let err = api.device(0).unwrap_err();
    assert_eq!(
        err.kind,
        ErrorKind::NoDevice {
            requested: Some(0),
            available: 0
        }
    );
}

#[test]
fn every_visible_device_opens() {
    let Ok(api) = HipApi::load() else { return };
    for ordinal in 0..api.device_count().unwrap() {
        let device = api.device(ordinal).expect("a counted device opens");
        let props = device.properties().unwrap();
        assert_eq!(props.ordinal, ordinal);
        assert!(props.arch.starts_with("gfx"), "{props:?}");
        assert!(device.target_id().starts_with(&props.arch), "{props:?}");
    }
}
