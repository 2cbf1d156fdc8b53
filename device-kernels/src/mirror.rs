//! Compile-time comparisons of C++ mirrors with the Rust they mirror, and
//! the C++ side's view of tandem-runtime's layout.
//!
//! The C++ layouts reach Rust as bindgen's reading of the mirror headers,
//! committed in `src/generated/` (written by `cargo xtask bindings`, so that
//! building needs no libclang). This crate compares `tandem/layout.h` and
//! `tandem/host_abi.h` with tandem-shm-core and tandem-hal (`layout_check`);
//! tandem-runtime, which this crate cannot see, compares
//! `tandem/runtime/layout.h` ([`runtime_mirror`]) with its own layout, with
//! the same two macros.
//!
//! Why a header edit cannot drift from Rust unnoticed, link by link:
//! * C++ header == committed bindings: the build script turns the bindings'
//!   literal layout tests (clang's size and alignment of each struct, offset
//!   of each field) and constants into `static_assert`s that every C++ build
//!   of the kernels compiles (the host compiler, nvcc, hipcc; NVRTC, lacking
//!   `__builtin_offsetof`, checks all but the offsets), naming the type and
//!   field (`build/layout_checks.rs`).
//! * committed bindings == Rust types: [`assert_same_layout!`] and
//!   [`assert_same_value!`] in `const` evaluation; bindgen's own layout tests
//!   in the files also hold the struct definitions there to clang's numbers.
//! * committed bindings == bindgen(headers): `cargo xtask bindings --check`,
//!   the `bindings` test leg, fails on any difference, where libclang is
//!   installed (CI installs it).
//!
//! So a plain `cargo build` catches a field dropped or moved in a header, and
//! CI catches a header edit committed without regenerating the bindings.

/// `assert_same_layout!(RustType, CppType { field, rust_field => cpp_field, .. })`:
/// in `const` evaluation, the same size, alignment and field offsets, or a
/// build error naming the type and field. Without a trailing `..` the list
/// must name every field of the Rust type (checked by a destructuring
/// pattern, which fails to compile when Rust grows a field nobody
/// mirrored); write `..` for types with private zero-sized markers
/// (`PhantomData`). Every listed field must exist on the C++ side too.
#[macro_export]
macro_rules! assert_same_layout {
    (@sizes $rust:ty, $cpp:ty) => {
        const _: () = {
            assert!(
                ::core::mem::size_of::<$rust>() == ::core::mem::size_of::<$cpp>(),
                concat!("layout drift: size of ", stringify!($rust), " differs in its C++ mirror")
            );
            assert!(
                ::core::mem::align_of::<$rust>() == ::core::mem::align_of::<$cpp>(),
                concat!("layout drift: alignment of ", stringify!($rust), " differs in its C++ mirror")
            );
        };
    };
    (@field $rust:ty, $cpp:ty, $field:ident) => {
        $crate::assert_same_layout!(@field $rust, $cpp, $field => $field);
    };
    (@field $rust:ty, $cpp:ty, $field:ident => $cfield:ident) => {
        const _: () = assert!(
            ::core::mem::offset_of!($rust, $field) == ::core::mem::offset_of!($cpp, $cfield),
            concat!(
                "layout drift: ", stringify!($rust), "::", stringify!($field),
                " is at another offset in its C++ mirror"
            )
        );
    };
    ($rust:ty, $cpp:ty { $($field:ident $(=> $cfield:ident)?,)* .. }) => {
        $crate::assert_same_layout!(@sizes $rust, $cpp);
        $($crate::assert_same_layout!(@field $rust, $cpp, $field $(=> $cfield)?);)*
    };
    ($rust:path, $cpp:ty { $($field:ident $(=> $cfield:ident)?),* $(,)? }) => {
        $crate::assert_same_layout!(@sizes $rust, $cpp);
        $($crate::assert_same_layout!(@field $rust, $cpp, $field $(=> $cfield)?);)*
        // A compile error on this pattern means the Rust type has a field the
        // list does not name: mirror it in C++ and list it.
        const _: fn(&$rust) = |value| {
            let $rust { $($field: _),* } = value;
        };
    };
}

/// `const` equality of a Rust and a C++ constant, naming it on failure.
#[macro_export]
macro_rules! assert_same_value {
    ($($rust:expr => $cpp:expr),* $(,)?) => {
        $(const _: () = assert!(
            $rust as u64 == $cpp as u64,
            concat!("constant drift: ", stringify!($rust), " differs in its C++ mirror")
        );)*
    };
}

/// A module of bindgen's output `$file` (committed in `src/generated/`):
/// generated names and no docs, so the lints that expect hand-written Rust
/// are off inside.
macro_rules! bindgen_module {
    ($(#[$doc:meta])* $vis:vis mod $name:ident = $file:literal;) => {
        $(#[$doc])*
        #[allow(
            dead_code,
            non_camel_case_types,
            non_snake_case,
            non_upper_case_globals,
            missing_docs,
            clippy::all,
            clippy::undocumented_unsafe_blocks,
            reason = "bindgen's output: generated names and no docs"
        )]
        $vis mod $name {
            include!(concat!("generated/", $file));
        }
    };
}

bindgen_module! {
    /// `tandem/layout.h` and `tandem/host_abi.h` as bindgen read them
    /// (committed), for `layout_check`.
    pub(crate) mod layout_mirror = "cpp_layout.rs";
}

bindgen_module! {
    /// `tandem/runtime/layout.h`'s mirrors of tandem-runtime's wire format
    /// (as bindgen read them, committed): `root::tandem::RuntimeSegmentHeader`,
    /// `TaskHeader`, `RtInbox`, `rt_priority`, the `RT_*` constants,
    /// `rt_record`, `rt_notify`, `rt_ticket` and `rt_math`. For
    /// tandem-runtime's compile-time checks; kernels use the header itself.
    pub mod runtime_mirror = "cpp_runtime.rs";
}
