//! Pools and the registry workers dispatch tasks through.
//!
//! A [`Pool`] is one module's handlers, by method id; the [`Registry`] maps
//! pool ids to pools. A handler gets its caller's [`TaskContext`], the task's
//! argument bytes and the copy space to write its output into, and says what
//! to complete the future with.

use std::collections::BTreeMap;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};

use tandem_shm_core::{serialized_len, Deserialize, Reader, Serialize, Writer};

use crate::context::TaskContext;
use crate::task::{
    decode_task, math, MethodId, PoolId, Task, RC_BAD_ARGS, RC_BAD_TASK, RC_HANDLER_PANICKED,
    RC_UNKNOWN_METHOD, RC_UNKNOWN_POOL,
};

/// What a handler completes its future with.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct HandlerReply {
    /// 0 for success, else the handler's code.
    pub return_code: i32,
    /// Bytes of output written; a length past the copy space means the output
    /// did not fit (nothing is kept, the future gets `RC_OUTPUT_TOO_LARGE`).
    pub output_len: usize,
}

impl HandlerReply {
    /// A reply with this code and no output.
    pub const fn code(return_code: i32) -> Self {
        Self {
            return_code,
            output_len: 0,
        }
    }
}

/// A method: the caller's context, argument bytes and output buffer in,
/// reply out.
pub type Handler = Box<dyn Fn(&TaskContext<'_>, &[u8], &mut [u8]) -> HandlerReply + Send + Sync>;

/// One module's handlers. Workers look a pool and a method up per task, so
/// both live in B-trees: for the few entries a registry has, a lookup is a
/// handful of comparisons, cheaper than hashing the key with SipHash.
pub struct Pool {
    id: PoolId,
    /// Its dense index in the registry (registration order), which per-pool
    /// counters are indexed by; 0 until registered.
    index: usize,
    name: String,
    methods: BTreeMap<MethodId, (String, Handler)>,
}

impl Pool {
    /// An empty pool.
    pub fn new(id: PoolId, name: impl Into<String>) -> Self {
        Self {
            id,
            index: 0,
            name: name.into(),
            methods: BTreeMap::new(),
        }
    }

    /// The pool id tasks name.
    pub fn id(&self) -> PoolId {
        self.id
    }

    /// The pool's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Adds a method working on raw bytes (replacing one with the same id).
    pub fn raw_method(
        mut self,
        method: MethodId,
        name: impl Into<String>,
        handler: Handler,
    ) -> Self {
        self.methods.insert(method, (name.into(), handler));
        self
    }

    /// Adds the handler of task type `T`: its arguments are deserialized as
    /// `T` (trailing bytes are refused), `f` runs, and `Ok(output)` is
    /// serialized with return code 0; `Err(code)` completes with `code` (use
    /// nonzero codes above `RC_RESERVED_MAX`) and no output.
    pub fn task<T, F>(self, name: impl Into<String>, f: F) -> Self
    where
        T: Task + for<'a> Deserialize<'a>,
        T::Output: Serialize,
        F: Fn(T) -> Result<T::Output, i32> + Send + Sync + 'static,
    {
        self.task_in_context::<T, _>(name, move |_, task| f(task))
    }

    /// [`task`](Self::task) for a handler that also reaches its caller's
    /// memory through the [`TaskContext`] (data passed by reference).
    pub fn task_in_context<T, F>(self, name: impl Into<String>, f: F) -> Self
    where
        T: Task + for<'a> Deserialize<'a>,
        T::Output: Serialize,
        F: Fn(&TaskContext<'_>, T) -> Result<T::Output, i32> + Send + Sync + 'static,
    {
        let handler = move |context: &TaskContext<'_>, args: &[u8], out: &mut [u8]| {
            let mut r = Reader::new(args);
            let Ok(task) = r.get::<T>() else {
                return HandlerReply::code(RC_BAD_ARGS);
            };
            if r.remaining() != 0 {
                return HandlerReply::code(RC_BAD_ARGS);
            }
            match f(context, task) {
                Ok(output) => write_output(&output, out),
                Err(code) => HandlerReply::code(code),
            }
        };
        self.raw_method(T::METHOD, name, Box::new(handler))
    }

    /// Method ids and names, sorted by id.
    pub fn methods(&self) -> Vec<(MethodId, &str)> {
        self.methods
            .iter()
            .map(|(id, (name, _))| (*id, name.as_str()))
            .collect()
    }
}

impl fmt::Debug for Pool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pool")
            .field("id", &self.id)
            .field("name", &self.name)
            .field("methods", &self.methods())
            .finish()
    }
}

/// Serializes `value` into `out`, or reports the length it needs.
fn write_output<O: Serialize + ?Sized>(value: &O, out: &mut [u8]) -> HandlerReply {
    match serialized_len(value) {
        Ok(needed) if needed > out.len() => HandlerReply {
            return_code: 0,
            output_len: needed,
        },
        Ok(_) => {
            let mut w = Writer::new(out);
            match w.put(value) {
                Ok(()) => HandlerReply {
                    return_code: 0,
                    output_len: w.position(),
                },
                Err(_) => HandlerReply::code(tandem_shm_core::RC_OUTPUT_FAILED),
            }
        }
        Err(_) => HandlerReply::code(tandem_shm_core::RC_OUTPUT_FAILED),
    }
}

/// Registering a pool whose id is taken.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct DuplicatePool {
    /// The id both pools claim.
    pub id: PoolId,
    /// The name of the pool registered first, which keeps the id.
    pub existing: String,
}

impl fmt::Display for DuplicatePool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "pool id {} is already taken by {:?}",
            self.id, self.existing
        )
    }
}

impl std::error::Error for DuplicatePool {}

/// Pools by id (a B-tree, as `Pool`'s methods).
#[derive(Debug, Default)]
pub struct Registry {
    pools: BTreeMap<PoolId, Pool>,
}

impl Registry {
    /// No pools.
    pub fn new() -> Self {
        Self::default()
    }

    /// The built-in pools ([`math`]).
    pub fn with_builtins() -> Self {
        let mut registry = Self::new();
        let math = Pool::new(math::POOL, "math")
            .task::<math::Noop, _>("noop", |_| Ok(math::Noop))
            .task::<math::Add, _>("add", |t| Ok(t.a.wrapping_add(t.b)))
            .task::<math::Sum, _>("sum", |t| {
                Ok(t.values.iter().fold(0u64, |s, v| s.wrapping_add(*v)))
            });
        // A fresh registry has no pools, so this cannot collide.
        registry.pools.insert(math.id(), math);
        registry
    }

    /// Adds a pool; its id must be free. Pools are counted in `tandem status`
    /// in registration order.
    pub fn register(&mut self, mut pool: Pool) -> Result<(), DuplicatePool> {
        if let Some(existing) = self.pools.get(&pool.id) {
            return Err(DuplicatePool {
                id: pool.id,
                existing: existing.name.clone(),
            });
        }
        pool.index = self.pools.len();
        self.pools.insert(pool.id, pool);
        Ok(())
    }

    /// The pools, sorted by id.
    pub fn pools(&self) -> Vec<&Pool> {
        self.pools.values().collect()
    }

    /// The dense index (0..number of pools, in registration order) of pool
    /// `pool`, which per-pool statistics are indexed by.
    pub(crate) fn pool_index(&self, pool: PoolId) -> Option<usize> {
        self.pools.get(&pool).map(|p| p.index)
    }

    /// Runs the task in `task_bytes` (header + arguments), writing its output
    /// into `out`, and returns the dense index of the pool that ran it (None:
    /// no registered pool did), for the workers' per-pool counters. Never
    /// panics: malformed tasks, unknown pools or methods and panicking
    /// handlers become error codes.
    pub(crate) fn dispatch_indexed(
        &self,
        context: &TaskContext<'_>,
        task_bytes: &[u8],
        out: &mut [u8],
    ) -> (Option<usize>, HandlerReply) {
        match decode_task(task_bytes) {
            Some((header, args)) => {
                self.call_indexed(context, (header.pool, header.method), args, out)
            }
            None => (None, HandlerReply::code(RC_BAD_TASK)),
        }
    }

    /// Runs method `method` of pool `pool` on the serialized arguments
    /// `args`, writing its output into `out`, as a worker does once it has
    /// decoded a task's header. Never panics: unknown pools or methods and
    /// panicking handlers become error codes. A module can test its pool's
    /// handlers this way, with no runtime ([`TaskContext::detached`] when its
    /// handlers take no pointers).
    pub fn call(
        &self,
        context: &TaskContext<'_>,
        pool: PoolId,
        method: MethodId,
        args: &[u8],
        out: &mut [u8],
    ) -> HandlerReply {
        self.call_indexed(context, (pool, method), args, out).1
    }

    /// [`call`](Self::call), also returning the pool's dense index (as
    /// [`dispatch_indexed`](Self::dispatch_indexed)): one lookup serves both.
    pub(crate) fn call_indexed(
        &self,
        context: &TaskContext<'_>,
        (pool, method): (PoolId, MethodId),
        args: &[u8],
        out: &mut [u8],
    ) -> (Option<usize>, HandlerReply) {
        let Some(pool) = self.pools.get(&pool) else {
            return (None, HandlerReply::code(RC_UNKNOWN_POOL));
        };
        let Some((_, handler)) = pool.methods.get(&method) else {
            return (Some(pool.index), HandlerReply::code(RC_UNKNOWN_METHOD));
        };
        // A panicking handler must not take the worker down; its partial
        // output is discarded (the reply carries no output).
        let reply = catch_unwind(AssertUnwindSafe(|| handler(context, args, out)))
            .unwrap_or(HandlerReply::code(RC_HANDLER_PANICKED));
        (Some(pool.index), reply)
    }
}
