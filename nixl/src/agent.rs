//! A NIXL agent with the UCX backend, safe to share between threads: it
//! registers memory, describes it to peers, loads theirs, and reads from
//! them.
//!
//! An agent made by `nixl_capi_create_agent` syncs nothing between the
//! threads that call it (NIXL's default), so every call here holds the
//! agent's lock; NIXL's own progress thread runs beside them, which NIXL
//! allows.

use core::ffi::{c_char, c_void, CStr};
use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::error::NixlError;
use crate::library::{check, CApi, Handle, IN_PROGRESS, SUCCESS};
use crate::locate::find_library;

/// NIXL's C API, loaded.
pub struct Nixl {
    api: CApi,
    path: PathBuf,
}

impl Nixl {
    /// Loads the library at `configured`, or where
    /// [`find_library`] finds it.
    pub fn load(configured: Option<&Path>) -> Result<Arc<Self>, NixlError> {
        let path = find_library(configured)?;
        let api = CApi::load(&path)?;
        Ok(Arc::new(Self { api, path }))
    }

    /// The library loaded.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Which memory a region is (NIXL's `DRAM_SEG` or `VRAM_SEG`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Memory {
    /// Host memory.
    Host,
    /// GPU memory of device [`Region::device`].
    Device,
}

impl Memory {
    fn code(self) -> i32 {
        match self {
            Self::Host => 0,
            Self::Device => 1,
        }
    }
}

/// A range of memory as NIXL names it: address, length, and the device (a
/// GPU's ordinal for [`Memory::Device`]; for host memory any number, which
/// a peer must name the same way).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    /// Its start, in this process.
    pub addr: u64,
    /// Its bytes.
    pub len: usize,
    /// Its device (or, for host memory, tag).
    pub device: u64,
    /// Which memory.
    pub memory: Memory,
}

struct Raw {
    agent: Handle,
    backend: Handle,
    /// Optional arguments naming the UCX backend, for every call that takes one.
    options: Handle,
}

struct AgentInner {
    nixl: Arc<Nixl>,
    name: String,
    raw: Mutex<Raw>,
}

// SAFETY: the handles are NIXL's heap objects, used only under `raw`'s lock
// (see the module docs), so no two threads touch them at once.
unsafe impl Send for AgentInner {}
// SAFETY: as above.
unsafe impl Sync for AgentInner {}

/// A NIXL agent with the UCX backend; cheap to clone.
#[derive(Clone)]
pub struct Agent(Arc<AgentInner>);

fn c_string(what: &str, s: &str) -> Result<CString, NixlError> {
    CString::new(s).map_err(|_| NixlError::BadArgument(format!("{what} {s:?} has a NUL byte")))
}

impl AgentInner {
    fn lock(&self) -> MutexGuard<'_, Raw> {
        // Each critical section is one NIXL call: a panic cannot leave the
        // handles half changed.
        self.raw.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn api(&self) -> &CApi {
        &self.nixl.api
    }

    /// A registration descriptor list of `regions` (all of one memory).
    fn reg_dlist(&self, memory: Memory, regions: &[Region]) -> Result<DList<'_>, NixlError> {
        let mut list: Handle = core::ptr::null_mut();
        // SAFETY: `list` is a valid out-pointer.
        check("nixl_capi_create_reg_dlist", unsafe {
            (self.api().nixl_capi_create_reg_dlist)(memory.code(), &mut list)
        })?;
        let dlist = DList {
            _api: self.api(),
            handle: list,
            destroy: self.api().nixl_capi_destroy_reg_dlist,
        };
        for region in regions {
            // SAFETY: `list` is live; no metadata (null, 0).
            check("nixl_capi_reg_dlist_add_desc", unsafe {
                (self.api().nixl_capi_reg_dlist_add_desc)(
                    list,
                    region.addr as usize,
                    region.len,
                    region.device,
                    core::ptr::null(),
                    0,
                )
            })?;
        }
        Ok(dlist)
    }

    /// A transfer descriptor list of one region.
    fn xfer_dlist(&self, region: &Region) -> Result<DList<'_>, NixlError> {
        let mut list: Handle = core::ptr::null_mut();
        // SAFETY: `list` is a valid out-pointer.
        check("nixl_capi_create_xfer_dlist", unsafe {
            (self.api().nixl_capi_create_xfer_dlist)(region.memory.code(), &mut list)
        })?;
        let dlist = DList {
            _api: self.api(),
            handle: list,
            destroy: self.api().nixl_capi_destroy_xfer_dlist,
        };
        // SAFETY: `list` is live.
        check("nixl_capi_xfer_dlist_add_desc", unsafe {
            (self.api().nixl_capi_xfer_dlist_add_desc)(
                list,
                region.addr as usize,
                region.len,
                region.device,
            )
        })?;
        Ok(dlist)
    }

    /// The agent's metadata for `regions` (none: its connection information
    /// only).
    fn metadata(&self, memory: Memory, regions: &[Region]) -> Result<Vec<u8>, NixlError> {
        let dlist = self.reg_dlist(memory, regions)?;
        let raw = self.lock();
        let mut data: *mut c_void = core::ptr::null_mut();
        let mut len = 0usize;
        // SAFETY: live agent and list; null options (every backend that
        // holds the regions); valid out-pointers.
        check("nixl_capi_get_local_partial_md", unsafe {
            (self.api().nixl_capi_get_local_partial_md)(
                raw.agent,
                dlist.handle,
                &mut data,
                &mut len,
                core::ptr::null_mut(),
            )
        })?;
        // SAFETY: on success NIXL malloc'ed `len` bytes at `data`, which
        // the caller owns and frees with free(3).
        let bytes = unsafe { core::slice::from_raw_parts(data.cast::<u8>(), len) }.to_vec();
        // SAFETY: malloc'ed by the library's libc, which is this process's.
        unsafe { libc::free(data) };
        Ok(bytes)
    }
}

/// A NIXL descriptor list, destroyed on drop.
struct DList<'a> {
    /// Keeps the library (and `destroy`) alive as long as the list.
    _api: &'a CApi,
    handle: Handle,
    destroy: unsafe extern "C" fn(Handle) -> i32,
}

impl Drop for DList<'_> {
    fn drop(&mut self) {
        // SAFETY: made by the matching create call, destroyed once.
        unsafe { (self.destroy)(self.handle) };
    }
}

impl Agent {
    /// A new agent named `name` (peers know it by this name; two agents of
    /// one name cannot both be loaded by a peer), with the UCX backend and
    /// its default parameters (UCX picks transports itself: `UCX_TLS` in the
    /// environment narrows them).
    pub fn new(nixl: Arc<Nixl>, name: &str) -> Result<Self, NixlError> {
        let c_name = c_string("agent name", name)?;
        let api = &nixl.api;
        let mut agent: Handle = core::ptr::null_mut();
        // SAFETY: a NUL-terminated name and a valid out-pointer.
        check("nixl_capi_create_agent", unsafe {
            (api.nixl_capi_create_agent)(c_name.as_ptr(), &mut agent)
        })?;
        let mut raw = Raw {
            agent,
            backend: core::ptr::null_mut(),
            options: core::ptr::null_mut(),
        };
        if let Err(e) = Self::add_ucx(api, &mut raw) {
            destroy(api, &raw);
            return Err(e);
        }
        Ok(Self(Arc::new(AgentInner {
            nixl,
            name: name.to_owned(),
            raw: Mutex::new(raw),
        })))
    }

    fn add_ucx(api: &CApi, raw: &mut Raw) -> Result<(), NixlError> {
        let ucx = c"UCX";
        let mut mems: Handle = core::ptr::null_mut();
        let mut params: Handle = core::ptr::null_mut();
        // SAFETY: live agent, a NUL-terminated name, valid out-pointers.
        check("nixl_capi_get_plugin_params", unsafe {
            (api.nixl_capi_get_plugin_params)(raw.agent, ucx.as_ptr(), &mut mems, &mut params)
        })?;
        // SAFETY: as above; `params` is live until destroyed below.
        let created = check("nixl_capi_create_backend", unsafe {
            (api.nixl_capi_create_backend)(raw.agent, ucx.as_ptr(), params, &mut raw.backend)
        });
        // SAFETY: made by get_plugin_params, destroyed once.
        unsafe {
            (api.nixl_capi_destroy_mem_list)(mems);
            (api.nixl_capi_destroy_params)(params);
        }
        created?;
        // SAFETY: a valid out-pointer, then the live options and backend.
        check("nixl_capi_create_opt_args", unsafe {
            (api.nixl_capi_create_opt_args)(&mut raw.options)
        })?;
        // SAFETY: live options and backend.
        check("nixl_capi_opt_args_add_backend", unsafe {
            (api.nixl_capi_opt_args_add_backend)(raw.options, raw.backend)
        })
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// Registers `region` with the UCX backend (peers may then read it once
    /// they load its [`region_metadata`](Self::region_metadata)); deregistered
    /// when the registration drops.
    ///
    /// # Safety
    /// `region` is memory of this process (or, for device memory, of the
    /// GPU it names) that stays mapped until the registration drops.
    pub unsafe fn register(&self, region: Region) -> Result<Registration, NixlError> {
        let dlist = self.0.reg_dlist(region.memory, &[region])?;
        let raw = self.0.lock();
        // SAFETY: live agent, list and options; the caller vouches for the memory.
        check("nixl_capi_register_mem", unsafe {
            (self.0.api().nixl_capi_register_mem)(raw.agent, dlist.handle, raw.options)
        })?;
        Ok(Registration {
            agent: self.clone(),
            region,
        })
    }

    /// What a peer loads to connect to this agent: its connection
    /// information, no memory.
    pub fn connection_metadata(&self) -> Result<Vec<u8>, NixlError> {
        self.0.metadata(Memory::Host, &[])
    }

    /// What a peer connected to this agent loads to read `region`, a
    /// registered region (its part of the agent's metadata, without the
    /// connection information).
    pub fn region_metadata(&self, region: &Region) -> Result<Vec<u8>, NixlError> {
        self.0.metadata(region.memory, &[*region])
    }

    /// Loads a peer's metadata (connection or region); returns its name.
    pub fn load_remote(&self, metadata: &[u8]) -> Result<String, NixlError> {
        if metadata.is_empty() {
            return Err(NixlError::BadArgument("empty metadata".into()));
        }
        let raw = self.0.lock();
        let mut name: *mut c_char = core::ptr::null_mut();
        // SAFETY: live agent; `metadata` is live for the call; a valid out-pointer.
        check("nixl_capi_load_remote_md", unsafe {
            (self.0.api().nixl_capi_load_remote_md)(
                raw.agent,
                metadata.as_ptr().cast(),
                metadata.len(),
                &mut name,
            )
        })?;
        // SAFETY: on success NIXL strdup'ed the name, which we own.
        let owned = unsafe { CStr::from_ptr(name) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: strdup'ed by the library's libc, this process's.
        unsafe { libc::free(name.cast()) };
        Ok(owned)
    }

    /// Forgets peer `name`: its metadata, and the connection to it.
    pub fn forget_remote(&self, name: &str) -> Result<(), NixlError> {
        let c_name = c_string("agent name", name)?;
        let raw = self.0.lock();
        // SAFETY: live agent, a NUL-terminated name.
        check("nixl_capi_invalidate_remote_md", unsafe {
            (self.0.api().nixl_capi_invalidate_remote_md)(raw.agent, c_name.as_ptr())
        })
    }

    /// Starts reading peer `remote_agent`'s `remote` region (whose metadata
    /// was loaded) into this agent's registered `local` region of the same
    /// length.
    pub fn read(
        &self,
        local: &Region,
        remote: &Region,
        remote_agent: &str,
    ) -> Result<Transfer, NixlError> {
        if local.len != remote.len {
            return Err(NixlError::BadArgument(format!(
                "a read of {} bytes into {}",
                remote.len, local.len
            )));
        }
        let c_remote = c_string("agent name", remote_agent)?;
        let local_list = self.0.xfer_dlist(local)?;
        let remote_list = self.0.xfer_dlist(remote)?;
        let raw = self.0.lock();
        let mut request: Handle = core::ptr::null_mut();
        // SAFETY: live agent, lists and options; a valid out-pointer. 0 is
        // NIXL_CAPI_XFER_OP_READ.
        check("nixl_capi_create_xfer_req", unsafe {
            (self.0.api().nixl_capi_create_xfer_req)(
                raw.agent,
                0,
                local_list.handle,
                remote_list.handle,
                c_remote.as_ptr(),
                &mut request,
                raw.options,
            )
        })?;
        let mut transfer = Transfer {
            agent: self.clone(),
            request,
            done: false,
        };
        // SAFETY: live agent, request and options.
        let posted =
            unsafe { (self.0.api().nixl_capi_post_xfer_req)(raw.agent, request, raw.options) };
        drop(raw);
        match posted {
            SUCCESS => {
                transfer.done = true;
                Ok(transfer)
            }
            IN_PROGRESS => Ok(transfer),
            status => Err(NixlError::Call {
                call: "nixl_capi_post_xfer_req",
                status,
            }),
        }
    }
}

fn destroy(api: &CApi, raw: &Raw) {
    // SAFETY: each handle was made by its create call and is destroyed
    // once, the options and backend handles before the agent that owns
    // the backend.
    unsafe {
        if !raw.options.is_null() {
            (api.nixl_capi_destroy_opt_args)(raw.options);
        }
        if !raw.backend.is_null() {
            (api.nixl_capi_destroy_backend)(raw.backend);
        }
        (api.nixl_capi_destroy_agent)(raw.agent);
    }
}

impl Drop for AgentInner {
    fn drop(&mut self) {
        let raw = self.raw.get_mut().unwrap_or_else(PoisonError::into_inner);
        destroy(&self.nixl.api, raw);
    }
}

/// A region registered with an agent; deregistered on drop.
pub struct Registration {
    agent: Agent,
    region: Region,
}

impl Registration {
    /// The region.
    pub fn region(&self) -> &Region {
        &self.region
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let inner = &self.agent.0;
        let Ok(dlist) = inner.reg_dlist(self.region.memory, &[self.region]) else {
            return;
        };
        let raw = inner.lock();
        // SAFETY: live agent, list and options; the region was registered.
        let status =
            unsafe { (inner.api().nixl_capi_deregister_mem)(raw.agent, dlist.handle, raw.options) };
        if status != SUCCESS {
            tracing::warn!(
                "NIXL could not deregister {:?}: status {status}",
                self.region
            );
        }
    }
}

/// A read in flight; dropping it unfinished cancels it.
pub struct Transfer {
    agent: Agent,
    request: Handle,
    done: bool,
}

// SAFETY: the request handle is used only under the agent's lock.
unsafe impl Send for Transfer {}

impl Transfer {
    /// Whether the bytes have all arrived; an error if the transfer failed
    /// (the peer went away, or refused).
    pub fn poll(&mut self) -> Result<bool, NixlError> {
        if self.done {
            return Ok(true);
        }
        let inner = &self.agent.0;
        let raw = inner.lock();
        // SAFETY: live agent and request.
        let status = unsafe { (inner.api().nixl_capi_get_xfer_status)(raw.agent, self.request) };
        match status {
            SUCCESS => {
                self.done = true;
                Ok(true)
            }
            IN_PROGRESS => Ok(false),
            status => Err(NixlError::Call {
                call: "nixl_capi_get_xfer_status",
                status,
            }),
        }
    }
}

impl Drop for Transfer {
    fn drop(&mut self) {
        let inner = &self.agent.0;
        let raw = inner.lock();
        // SAFETY: live agent and request; a request still in flight is
        // cancelled by its release (NIXL's rule).
        let status = unsafe { (inner.api().nixl_capi_release_xfer_req)(raw.agent, self.request) };
        if status == SUCCESS {
            // SAFETY: released above, destroyed once.
            unsafe { (inner.api().nixl_capi_destroy_xfer_req)(self.request) };
        } else {
            // NIXL could not cancel it: the handle stays with NIXL, which
            // frees it with the agent.
            tracing::warn!("NIXL could not release a transfer: status {status}");
        }
    }
}
