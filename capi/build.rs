//! libtandem.so as a distribution ships a C library: its SONAME names the
//! ABI's major version (`libtandem.so.0`), which the install step's
//! symlinks resolve, and it exports the `tandem_*` calls only, so nothing
//! of the Rust code or the C libraries inside it clashes with a program's
//! own symbols.

fn main() {
    println!("cargo:rerun-if-changed=tandem.map");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux") {
        return;
    }
    let major = std::env::var("CARGO_PKG_VERSION_MAJOR").expect("cargo sets the version");
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets the manifest folder");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libtandem.so.{major}");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={dir}/tandem.map");
}
