//! DLPack's C structures (`dlpack.h`, DLPack 1.x), the ABI every array
//! library exchanges tensors through. Each offset and size is asserted
//! against the header's layout on 64-bit targets, where its fields are
//! naturally aligned.

use core::ffi::c_void;

use memoffset::offset_of;
use static_assertions::const_assert_eq;

/// `kDLCPU`: host memory.
pub(crate) const DL_CPU: i32 = 1;
/// `kDLCUDA`: CUDA device memory.
pub(crate) const DL_CUDA: i32 = 2;

/// `DLDataTypeCode`s.
pub(crate) mod type_code {
    pub(crate) const INT: u8 = 0;
    pub(crate) const UINT: u8 = 1;
    pub(crate) const FLOAT: u8 = 2;
    pub(crate) const BFLOAT: u8 = 4;
    pub(crate) const COMPLEX: u8 = 5;
    pub(crate) const BOOL: u8 = 6;
}

/// `DLPACK_FLAG_BITMASK_READ_ONLY`: consumers must not write the memory.
pub(crate) const FLAG_READ_ONLY: u64 = 1 << 0;

/// The version this crate writes into versioned tensors.
pub(crate) const VERSION: DLPackVersion = DLPackVersion { major: 1, minor: 0 };

/// `DLDevice`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DLDevice {
    pub(crate) device_type: i32,
    pub(crate) device_id: i32,
}

/// `DLDataType`: one element's type.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DLDataType {
    pub(crate) code: u8,
    pub(crate) bits: u8,
    pub(crate) lanes: u16,
}

/// `DLTensor`: the memory and how to read it. `shape` and `strides` (in
/// elements; null means compact row-major) have `ndim` entries.
#[repr(C)]
pub(crate) struct DLTensor {
    pub(crate) data: *mut c_void,
    pub(crate) device: DLDevice,
    pub(crate) ndim: i32,
    pub(crate) dtype: DLDataType,
    pub(crate) shape: *mut i64,
    pub(crate) strides: *mut i64,
    pub(crate) byte_offset: u64,
}

/// `DLManagedTensor`: the legacy capsule's (`"dltensor"`) payload.
#[repr(C)]
pub(crate) struct DLManagedTensor {
    pub(crate) dl_tensor: DLTensor,
    pub(crate) manager_ctx: *mut c_void,
    pub(crate) deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

/// `DLPackVersion`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct DLPackVersion {
    pub(crate) major: u32,
    pub(crate) minor: u32,
}

/// `DLManagedTensorVersioned`: the versioned capsule's
/// (`"dltensor_versioned"`) payload, with flags (read-only).
#[repr(C)]
pub(crate) struct DLManagedTensorVersioned {
    pub(crate) version: DLPackVersion,
    pub(crate) manager_ctx: *mut c_void,
    pub(crate) deleter: Option<unsafe extern "C" fn(*mut DLManagedTensorVersioned)>,
    pub(crate) flags: u64,
    pub(crate) dl_tensor: DLTensor,
}

#[cfg(target_pointer_width = "64")]
mod checks {
    use super::*;

    const_assert_eq!(core::mem::size_of::<DLDevice>(), 8);
    const_assert_eq!(core::mem::size_of::<DLDataType>(), 4);
    const_assert_eq!(offset_of!(DLDataType, bits), 1);
    const_assert_eq!(offset_of!(DLDataType, lanes), 2);
    const_assert_eq!(offset_of!(DLTensor, device), 8);
    const_assert_eq!(offset_of!(DLTensor, ndim), 16);
    const_assert_eq!(offset_of!(DLTensor, dtype), 20);
    const_assert_eq!(offset_of!(DLTensor, shape), 24);
    const_assert_eq!(offset_of!(DLTensor, strides), 32);
    const_assert_eq!(offset_of!(DLTensor, byte_offset), 40);
    const_assert_eq!(core::mem::size_of::<DLTensor>(), 48);
    const_assert_eq!(offset_of!(DLManagedTensor, manager_ctx), 48);
    const_assert_eq!(offset_of!(DLManagedTensor, deleter), 56);
    const_assert_eq!(core::mem::size_of::<DLManagedTensor>(), 64);
    const_assert_eq!(offset_of!(DLManagedTensorVersioned, manager_ctx), 8);
    const_assert_eq!(offset_of!(DLManagedTensorVersioned, deleter), 16);
    const_assert_eq!(offset_of!(DLManagedTensorVersioned, flags), 24);
    const_assert_eq!(offset_of!(DLManagedTensorVersioned, dl_tensor), 32);
    const_assert_eq!(core::mem::size_of::<DLManagedTensorVersioned>(), 80);
}
