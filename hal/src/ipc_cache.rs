//! The per-process cache of opened IPC memory every backend keeps.
//!
//! CUDA returns the same mapping with a count when one handle is opened twice
//! in a context, HIP promises nothing, and the host backend maps anew each
//! time; one cache makes all three behave alike: the first open maps, later
//! opens share it, the last close unmaps.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::types::IpcMemHandle;

/// Maps handles to opened mappings `M` (which unmap on drop).
pub struct IpcOpenCache<M> {
    open: Mutex<HashMap<IpcMemHandle, std::sync::Weak<M>>>,
}

impl<M> Default for IpcOpenCache<M> {
    fn default() -> Self {
        Self {
            open: Mutex::new(HashMap::new()),
        }
    }
}

impl<M> IpcOpenCache<M> {
    /// Returns the live mapping for `handle`, or opens one with `open` and
    /// remembers it. The mapping is dropped (closed) when the last `Arc` goes.
    pub fn get_or_open<E>(
        &self,
        handle: &IpcMemHandle,
        open: impl FnOnce() -> Result<M, E>,
    ) -> Result<Arc<M>, E> {
        // A poisoned lock only means another opener panicked; the map itself
        // is still consistent (entries are inserted whole).
        let mut map = self.open.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(live) = map.get(handle).and_then(std::sync::Weak::upgrade) {
            return Ok(live);
        }
        let mapping = Arc::new(open()?);
        map.insert(*handle, Arc::downgrade(&mapping));
        map.retain(|_, weak| weak.strong_count() > 0);
        Ok(mapping)
    }
}
