//! Waiting for the tier's futures from plain threads: the store's callers are worker threads,
//! not tasks of an async runtime.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake};

/// Polls `f` on this thread until it is ready, parking in between. The futures waited on are
/// join handles of tasks on the tier's runtime, so the caller may be any thread, inside an
/// async runtime or not.
pub(super) fn wait<F: Future>(f: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Arc::new(Unpark(std::thread::current())).into();
    let mut cx = Context::from_waker(&waker);
    let mut f = pin!(f);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
}
