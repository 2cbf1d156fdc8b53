//! Compiling CUDA source with NVRTC, once per process per (source, options,
//! architecture).
//!
//! NVRTC is loaded at run time like the driver and probed the same way
//! before any call (cudarc panics on a missing library or symbol). The
//! output is a cubin for the device's real architecture, which the driver
//! loads without a JIT step and without caring whether NVRTC is newer than
//! the driver's PTX compiler.

use core::ffi::{c_char, c_int, CStr};
use std::collections::BTreeMap;
use std::ffi::CString;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use cudarc::nvrtc::sys::{self as nvrtc_sys, nvrtcProgram, nvrtcResult};
use tandem_hal::{ErrorKind, GpuResult};

use crate::artifact::SmArch;
use crate::driver::error;

/// Every NVRTC entry point this crate calls (checked against the sources by
/// a unit test, like the driver's list).
const NVRTC_SYMBOLS: &[&str] = &[
    "nvrtcCompileProgram",
    "nvrtcCreateProgram",
    "nvrtcDestroyProgram",
    "nvrtcGetCUBIN",
    "nvrtcGetCUBINSize",
    "nvrtcGetErrorString",
    "nvrtcGetProgramLog",
    "nvrtcGetProgramLogSize",
];

/// What was compiled. The whole source is part of the key (rather than a
/// hash of it) so two different sources can never share a cubin.
#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct CompileKey {
    source: String,
    /// Every option passed, the architecture included.
    options: Vec<String>,
}

/// One slot per key; the slot's own lock is held while compiling, so
/// concurrent loads of one source compile it once and loads of different
/// sources compile in parallel. Failures are not cached.
type Slot = Arc<Mutex<Option<Arc<[u8]>>>>;

static CUBINS: Mutex<BTreeMap<CompileKey, Slot>> = Mutex::new(BTreeMap::new());

/// The options NVRTC gets: the device's architecture, C++17 unless the
/// caller chose a standard, then the caller's options.
pub(crate) fn compile_options(arch: SmArch, user: &[&str]) -> Vec<String> {
    let mut options = vec![format!("--gpu-architecture={arch}")];
    if !user
        .iter()
        .any(|o| o.starts_with("-std") || o.starts_with("--std"))
    {
        options.push("-std=c++17".to_owned());
    }
    options.extend(user.iter().map(|o| (*o).to_owned()));
    options
}

/// The cubin of `source` (program `name`) for `arch`, compiled on first use.
pub(crate) fn compile_cached(
    name: &str,
    source: &str,
    arch: SmArch,
    user_options: &[&str],
) -> GpuResult<Arc<[u8]>> {
    let options = compile_options(arch, user_options);
    let slot = {
        let key = CompileKey {
            source: source.to_owned(),
            options: options.clone(),
        };
        let mut cubins = CUBINS.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(cubins.entry(key).or_default())
    };
    fill_slot(&slot, name, source, arch, &options)
}

fn fill_slot(
    slot: &Slot,
    name: &str,
    source: &str,
    arch: SmArch,
    options: &[String],
) -> GpuResult<Arc<[u8]>> {
    // A poisoned slot only means a compile panicked; `None` is retried.
    let mut cubin = slot.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(done) = &*cubin {
        return Ok(Arc::clone(done));
    }
    let compiled: Arc<[u8]> = compile(name, source, arch, options)?.into();
    *cubin = Some(Arc::clone(&compiled));
    Ok(compiled)
}

/// Whether NVRTC and every symbol in [`NVRTC_SYMBOLS`] can be loaded;
/// probed once per process.
fn nvrtc_available() -> GpuResult<()> {
    static PROBE: OnceLock<Result<(), String>> = OnceLock::new();
    let probe = PROBE.get_or_init(|| {
        // SAFETY: only dlopens candidate names and closes them again.
        if !unsafe { nvrtc_sys::is_culib_present() } {
            return Err("libnvrtc (the CUDA runtime compiler) was not found".to_owned());
        }
        // SAFETY: present, so `culib` finds it instead of panicking.
        let lib = unsafe { nvrtc_sys::culib() };
        for symbol in NVRTC_SYMBOLS {
            // SAFETY: looked up only, never called through this type.
            if let Err(e) = unsafe { lib.get::<unsafe extern "C" fn()>(symbol.as_bytes()) } {
                return Err(format!("libnvrtc lacks `{symbol}`: {e}"));
            }
        }
        Ok(())
    });
    probe
        .clone()
        .map_err(|why| error("nvrtcCreateProgram", ErrorKind::LibraryUnavailable(why)))
}

/// An NVRTC program, destroyed on drop.
struct Program(nvrtcProgram);

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: created by nvrtcCreateProgram, destroyed once, here.
        let _ = unsafe { nvrtc_sys::nvrtcDestroyProgram(&mut self.0) };
    }
}

fn compile(name: &str, source: &str, arch: SmArch, options: &[String]) -> GpuResult<Vec<u8>> {
    nvrtc_available()?;
    let bad_input =
        |what: String| error("nvrtcCreateProgram", ErrorKind::UnsupportedArtifact(what));
    let c_source = CString::new(source)
        .map_err(|_| bad_input(format!("CUDA source of `{name}` contains a NUL byte")))?;
    let c_name = CString::new(format!("{name}.cu"))
        .map_err(|_| bad_input(format!("library name `{name}` contains a NUL byte")))?;
    let c_options = options
        .iter()
        .map(|o| CString::new(o.as_str()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| {
            error(
                "nvrtcCompileProgram",
                ErrorKind::InvalidArgument(format!("NVRTC options of `{name}` contain a NUL byte")),
            )
        })?;
    let option_ptrs: Vec<*const c_char> = c_options.iter().map(|o| o.as_ptr()).collect();
    let option_count = c_int::try_from(option_ptrs.len()).map_err(|_| {
        error(
            "nvrtcCompileProgram",
            ErrorKind::InvalidArgument("too many NVRTC options".to_owned()),
        )
    })?;

    let mut raw: nvrtcProgram = core::ptr::null_mut();
    // SAFETY: NUL-terminated strings that outlive the program; no headers.
    nvrtc_check("nvrtcCreateProgram", unsafe {
        nvrtc_sys::nvrtcCreateProgram(
            &mut raw,
            c_source.as_ptr(),
            c_name.as_ptr(),
            0,
            core::ptr::null(),
            core::ptr::null(),
        )
    })?;
    let program = Program(raw);
    // SAFETY: live program; `option_ptrs` holds `option_count` valid strings.
    let compiled =
        unsafe { nvrtc_sys::nvrtcCompileProgram(program.0, option_count, option_ptrs.as_ptr()) };
    if compiled != nvrtcResult::NVRTC_SUCCESS {
        let log = program_log(&program).unwrap_or_else(|e| format!("(no log: {e})"));
        return Err(error(
            "nvrtcCompileProgram",
            ErrorKind::UnsupportedArtifact(format!(
                "NVRTC could not compile `{name}` for {arch} ({}, options {options:?}):\n{log}",
                nvrtc_name(compiled)
            )),
        ));
    }
    let mut size: usize = 0;
    // SAFETY: live, compiled program; valid out-pointer.
    nvrtc_check("nvrtcGetCUBINSize", unsafe {
        nvrtc_sys::nvrtcGetCUBINSize(program.0, &mut size)
    })?;
    if size == 0 {
        return Err(error(
            "nvrtcGetCUBIN",
            ErrorKind::UnsupportedArtifact(format!(
                "NVRTC produced no cubin for `{name}` ({arch})"
            )),
        ));
    }
    let mut cubin = vec![0u8; size];
    // SAFETY: `cubin` has the `size` bytes NVRTC asked for.
    nvrtc_check("nvrtcGetCUBIN", unsafe {
        nvrtc_sys::nvrtcGetCUBIN(program.0, cubin.as_mut_ptr().cast())
    })?;
    Ok(cubin)
}

/// The compile log (warnings and errors), without its trailing NUL.
fn program_log(program: &Program) -> GpuResult<String> {
    let mut size: usize = 0;
    // SAFETY: live program; valid out-pointer.
    nvrtc_check("nvrtcGetProgramLogSize", unsafe {
        nvrtc_sys::nvrtcGetProgramLogSize(program.0, &mut size)
    })?;
    let mut log = vec![0u8; size.max(1)];
    // SAFETY: `log` has at least the `size` bytes NVRTC asked for.
    nvrtc_check("nvrtcGetProgramLog", unsafe {
        nvrtc_sys::nvrtcGetProgramLog(program.0, log.as_mut_ptr().cast())
    })?;
    let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
    Ok(String::from_utf8_lossy(&log[..end]).into_owned())
}

fn nvrtc_name(result: nvrtcResult) -> String {
    // SAFETY: NVRTC is loaded (callers passed `nvrtc_available`); the
    // function returns a static string for every code, known or not.
    let name = unsafe { nvrtc_sys::nvrtcGetErrorString(result) };
    if name.is_null() {
        format!("{result:?}")
    } else {
        // SAFETY: non-null static C string from NVRTC.
        unsafe { CStr::from_ptr(name) }
            .to_string_lossy()
            .into_owned()
    }
}

fn nvrtc_check(call: &'static str, result: nvrtcResult) -> GpuResult<()> {
    if result == nvrtcResult::NVRTC_SUCCESS {
        Ok(())
    } else {
        Err(error(
            call,
            ErrorKind::Vendor {
                code: result as i64,
                name: nvrtc_name(result),
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_name_the_arch_and_default_to_cpp17() {
        let sm90 = SmArch::from_compute_capability(9, 0);
        assert_eq!(
            compile_options(sm90, &["-DX=1"]),
            ["--gpu-architecture=sm_90", "-std=c++17", "-DX=1"]
        );
        assert_eq!(
            compile_options(sm90, &["-std=c++20"]),
            ["--gpu-architecture=sm_90", "-std=c++20"]
        );
    }

    #[test]
    fn nvrtc_symbol_list_matches_the_sources() {
        let called = crate::test_support::calls_in_sources("nvrtc_sys::", "nvrtc");
        let listed: std::collections::BTreeSet<String> =
            NVRTC_SYMBOLS.iter().map(|s| (*s).to_owned()).collect();
        assert_eq!(called, listed);
    }
}
