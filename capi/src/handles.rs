//! Opaque handles: what C holds is a key into a table of live objects, never
//! an address Tandem dereferences, so a closed, foreign or made-up handle is
//! `TANDEM_STATUS_CLOSED_HANDLE` rather than a use after free, and a call on
//! one thread may race a close on another (the call keeps its object alive
//! until it returns). A null handle is `TANDEM_STATUS_NULL_POINTER`, as any
//! null argument is, except to a close call, where it is a no-op (as
//! `free(NULL)`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use crate::error::{CapiError, CapiResult};
use crate::layout::Status;

/// Keys of every table, so a handle of one kind is never a live key of
/// another. Starts at 1: a null handle is never live.
static NEXT_KEY: AtomicUsize = AtomicUsize::new(1);

/// The live objects of one handle kind `H` (the opaque C type), each a `T`.
pub(crate) struct Handles<T> {
    /// Read-locked by every call on a handle, write-locked only to open and
    /// close one, so that threads calling at once do not queue.
    live: RwLock<Option<HashMap<usize, Arc<T>>>>,
    /// The C type, `tandem_client`.
    kind: &'static str,
    /// The name every call gives a handle of this kind, `client`: what its
    /// errors name.
    arg: &'static str,
}

impl<T> Handles<T> {
    pub(crate) const fn new(kind: &'static str, arg: &'static str) -> Self {
        Self {
            live: RwLock::new(None),
            kind,
            arg,
        }
    }

    // A panic while the lock was held left the map itself consistent: every
    // operation on it is a single insert, get or remove.
    fn with<R>(&self, f: impl FnOnce(&mut HashMap<usize, Arc<T>>) -> R) -> R {
        let mut live = self.live.write().unwrap_or_else(PoisonError::into_inner);
        f(live.get_or_insert_with(HashMap::new))
    }

    /// Registers `object`; the handle C gets for it.
    pub(crate) fn insert<H>(&self, object: T) -> *mut H {
        // Relaxed: only uniqueness matters, which the RMW gives.
        let key = NEXT_KEY.fetch_add(1, Ordering::Relaxed);
        self.with(|live| live.insert(key, Arc::new(object)));
        key as *mut H
    }

    /// The object of `handle`, kept alive while the caller holds it.
    pub(crate) fn get<H>(&self, handle: *const H) -> CapiResult<Arc<T>> {
        if handle.is_null() {
            return Err(CapiError::null(self.arg));
        }
        let live = self.live.read().unwrap_or_else(PoisonError::into_inner);
        live.as_ref()
            .and_then(|live| live.get(&(handle as usize)).cloned())
            .ok_or_else(|| self.closed())
    }

    /// Forgets `handle`: its object goes once no call holds it. Null is a
    /// no-op; a closed handle is `ClosedHandle` (a double close).
    pub(crate) fn remove<H>(&self, handle: *mut H) -> CapiResult {
        if handle.is_null() {
            return Ok(());
        }
        self.with(|live| live.remove(&(handle as usize)))
            .map(drop)
            .ok_or_else(|| self.closed())
    }

    fn closed(&self) -> CapiError {
        CapiError::new(
            Status::ClosedHandle,
            format!(
                "{}: not a live {}: closed already, or never one",
                self.arg, self.kind
            ),
        )
    }
}
