//! The C++ half of the layout chain (see src/mirror.rs): `static_assert`s, in every C++ build,
//! that the compiler lays the mirror headers out as the committed bindings
//! (`src/generated/*.rs`, written by `cargo xtask bindings`) say clang did. The build reads
//! the literal numbers of bindgen's layout tests and the constants from those files, so it needs
//! no libclang.
//!
//! Left out: template specializations (bindgen records only their size and alignment, under a
//! mangled name; `tandem/layout.h` asserts its `OffsetPtr`, `ShmPtr` and `FullPtr` layouts
//! itself), and constants that are not integers or booleans (none today). Field names are
//! bindgen's, which are C++'s except for Rust keywords (bindgen appends `_`): a mirror field
//! named like a Rust keyword would fail these checks as a missing member.

use std::fmt::Write as _;
use std::path::Path;

/// One committed bindings file.
pub struct Bindings {
    /// How messages name it, e.g. `src/generated/cpp_layout.rs`.
    pub name: String,
    /// Its contents.
    pub text: String,
}

/// Every `src/generated/*.rs` of the crate in `crate_dir`, by name.
pub fn read(crate_dir: &Path) -> Result<Vec<Bindings>, String> {
    let dir = crate_dir.join("src/generated");
    let entries = std::fs::read_dir(&dir).map_err(|e| format!("listing {}: {e}", dir.display()))?;
    let mut files = Vec::new();
    for entry in entries {
        let path = entry
            .map_err(|e| format!("listing {}: {e}", dir.display()))?
            .path();
        let Some(file_name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if !file_name.ends_with(".rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("reading {}: {e}", path.display()))?;
        files.push(Bindings {
            name: format!("src/generated/{file_name}"),
            text,
        });
    }
    files.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(files)
}

/// What the checks need: the headers to include first, and the checks themselves.
pub struct Checks {
    /// Headers (`tandem/layout.h`...) the bindings were made from, from each file's
    /// `// Headers:` line.
    pub headers: Vec<String>,
    /// C++ text: `static_assert`s of sizes, alignments, constants, and (except under NVRTC,
    /// which has no `__builtin_offsetof`) field offsets.
    pub text: String,
}

/// A fact of one bindings file, with the C++ name it is about.
enum Fact {
    Size(String, u64),
    Align(String, u64),
    /// Type, field, offset.
    Offset(String, String, u64),
    /// Qualified name, value as a 64-bit pattern (negative values sign-extended, as Rust's
    /// `as u64` and C++'s conversion to `unsigned long long` both do).
    Constant(String, u64),
}

/// Reads every file's facts and writes the checks.
pub fn generate(files: &[Bindings]) -> Result<Checks, String> {
    let mut headers = Vec::new();
    let mut asserts = String::new();
    let mut offsets = String::new();
    for file in files {
        let listed = file
            .text
            .lines()
            .find_map(|line| line.strip_prefix("// Headers: "))
            .ok_or_else(|| format!("{}: no `// Headers:` line", file.name))?;
        let listed = listed.split(" (").next().unwrap_or(listed);
        for header in listed.split(", ") {
            if !headers.iter().any(|h| h == header) {
                headers.push(header.to_owned());
            }
        }
        let why = format!(
            "{} says so and Rust agrees; fix the header, or run `cargo xtask bindings` if the \
             change is meant",
            file.name
        );
        let facts = facts(file)?;
        // A file without layout tests (generated without them, or a bindgen whose format this
        // reader no longer knows) would silently check nothing.
        if !facts.iter().any(|f| matches!(f, Fact::Offset(..))) {
            return Err(format!(
                "{}: no layout tests found; regenerate it with `cargo xtask bindings`",
                file.name
            ));
        }
        for fact in facts {
            let _ = match fact {
                Fact::Size(ty, n) => writeln!(
                    asserts,
                    "static_assert(sizeof(::{ty}) == {n}, \"layout drift: size of {ty} is not {n} \
                     ({why})\");"
                ),
                Fact::Align(ty, n) => writeln!(
                    asserts,
                    "static_assert(alignof(::{ty}) == {n}, \"layout drift: alignment of {ty} is \
                     not {n} ({why})\");"
                ),
                Fact::Offset(ty, field, n) => writeln!(
                    offsets,
                    "static_assert(__builtin_offsetof(::{ty}, {field}) == {n}, \"layout drift: \
                     {ty}::{field} is not at offset {n} ({why})\");"
                ),
                Fact::Constant(name, value) => writeln!(
                    asserts,
                    "static_assert(static_cast<unsigned long long>(::{name}) == {value}ull, \
                     \"constant drift: {name} is not {value} ({why})\");"
                ),
            };
        }
    }
    let names: Vec<&str> = files.iter().map(|f| f.name.as_str()).collect();
    let text = format!(
        "// Generated by build.rs from {}: the layouts the committed bindings record.\n\
         {asserts}\
         // NVRTC has no __builtin_offsetof; the host, nvcc and hipcc builds of this same source\n\
         // check the offsets.\n\
         #if !defined(__CUDACC_RTC__)\n\
         {offsets}\
         #endif\n",
        names.join(", ")
    );
    Ok(Checks { headers, text })
}

/// The facts of one file, read from bindgen's layout tests
/// (`["Size of X"][size_of::<X>() - 8usize];`, possibly wrapped over lines) and constants
/// (`pub const NAME: TYPE = VALUE;`), each named by its enclosing modules below `root`.
fn facts(file: &Bindings) -> Result<Vec<Fact>, String> {
    let mut facts = Vec::new();
    // (indentation, module name) of the open `pub mod` blocks.
    let mut modules: Vec<(usize, &str)> = Vec::new();
    let mut lines = file.text.lines().enumerate();
    while let Some((index, line)) = lines.next() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        if let Some(name) = trimmed
            .strip_prefix("pub mod ")
            .and_then(|rest| rest.strip_suffix(" {"))
        {
            modules.push((indent, name));
            continue;
        }
        if trimmed == "}" && modules.last().is_some_and(|&(i, _)| i == indent) {
            modules.pop();
            continue;
        }
        let is_test = trimmed.starts_with('[');
        let is_const = trimmed.starts_with("pub const ");
        if !is_test && !is_const {
            continue;
        }
        // The whole statement, joined over prettyplease's line breaks.
        let mut statement = trimmed.to_owned();
        while !statement.ends_with(';') {
            let (_, next) = lines
                .next()
                .ok_or_else(|| format!("{}:{}: unfinished statement", file.name, index + 1))?;
            statement.push_str(next.trim());
        }
        let scope: Vec<&str> = modules.iter().skip(1).map(|&(_, name)| name).collect();
        let qualify = |name: &str| {
            let mut path = scope.join("::");
            path.push_str("::");
            path.push_str(name);
            path
        };
        let bad = || format!("{}:{}: cannot read `{statement}`", file.name, index + 1);
        if is_test {
            let (message, number) = layout_test(&statement).ok_or_else(bad)?;
            if message.contains("template specialization") {
                continue;
            }
            if let Some(ty) = message.strip_prefix("Size of ") {
                facts.push(Fact::Size(qualify(ty), number));
            } else if let Some(ty) = message.strip_prefix("Alignment of ") {
                facts.push(Fact::Align(qualify(ty), number));
            } else if let Some(member) = message.strip_prefix("Offset of field: ") {
                let (ty, field) = member.rsplit_once("::").ok_or_else(bad)?;
                facts.push(Fact::Offset(qualify(ty), field.to_owned(), number));
            } else {
                return Err(bad());
            }
        } else {
            let (name, ty, value) = constant(&statement).ok_or_else(bad)?;
            let Some(value) = value else { continue };
            // bindgen names an enumerator `Enum_variant`, typed `Enum`.
            let name = match name.strip_prefix(ty).and_then(|r| r.strip_prefix('_')) {
                Some(variant) if !ty.contains("::") => format!("{ty}::{variant}"),
                _ => name.to_owned(),
            };
            facts.push(Fact::Constant(qualify(&name), value));
        }
    }
    Ok(facts)
}

/// `("Size of X", 8)` from `["Size of X"][::core::mem::size_of::<X>() - 8usize];`.
fn layout_test(statement: &str) -> Option<(&str, u64)> {
    let rest = statement.strip_prefix("[\"")?;
    let (message, rest) = rest.split_once('"')?;
    let number = rest.rsplit_once("- ")?.1.strip_suffix("usize];")?;
    Some((message, number.parse().ok()?))
}

/// `(name, type, value)` from `pub const NAME: TYPE = VALUE;`; the value is `None` when it is
/// not an integer or boolean.
fn constant(statement: &str) -> Option<(&str, &str, Option<u64>)> {
    let rest = statement.strip_prefix("pub const ")?.strip_suffix(';')?;
    let (name, rest) = rest.split_once(": ")?;
    let (ty, value) = rest.split_once(" = ")?;
    let value = match value {
        "true" => Some(1),
        "false" => Some(0),
        // Two's complement of negative values, as `as u64` gives.
        number => number.parse::<i128>().ok().map(|v| v as u64),
    };
    Some((name, ty, value))
}
