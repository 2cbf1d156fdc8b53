//! `cargo xtask structure`: the lint leg's checks of the code's shape that
//! neither rustc nor clippy make.
//!
//! - No module circle inside a crate: modules that import each other,
//!   directly or through others, cannot be read or moved one at a time. A
//!   module's use of its ancestors (`super::`) or descendants is not a
//!   circle: a parent declares its children and re-exports them.
//! - Every `allow`/`expect` of a lint carries `reason = "..."`, so a lint
//!   turned off says why where it is turned off, and rustc keeps the reason
//!   with the attribute.
//! - No function outside tests spans more than [`MAX_LINES`] lines, in
//!   Rust ([`functions`]) or in the C and C++ sources ([`cxx_functions`]).
//!
//! All read the source text (comments stripped), not the compiler's view:
//! paths through `crate::` and `super::`, whole or in `use` groups, are the
//! imports; a macro that builds paths is not seen.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::error::XtaskError;
use crate::metadata::Metadata;
use cxx_functions::long_cxx_functions;
use functions::{long_functions, MAX_LINES};

mod cxx_functions;
mod functions;

/// A module's path inside its crate: `["share", "wire"]`; the root is empty.
type ModulePath = Vec<String>;

/// One source file of a crate and the module it is.
struct SourceFile {
    path: PathBuf,
    module: ModulePath,
    text: String,
}

/// One import that makes an edge of a circle: `from` uses `to` in `file`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Import {
    from: ModulePath,
    to: ModulePath,
    file: PathBuf,
}

/// A module circle found in a crate: the sibling modules under `parent` that
/// reach each other, and one import per edge.
#[derive(Debug, PartialEq, Eq)]
pub struct Circle {
    crate_name: String,
    parent: ModulePath,
    members: Vec<String>,
    imports: Vec<Import>,
}

/// An `allow` or `expect` attribute without a reason.
#[derive(Debug, PartialEq, Eq)]
pub struct UnreasonedAllow {
    file: PathBuf,
    line: usize,
    attribute: String,
}

/// Runs the checks over every workspace crate; fails listing what it found.
pub fn run(metadata: &Metadata) -> Result<ExitCode, XtaskError> {
    let mut circles = Vec::new();
    let mut allows = Vec::new();
    let mut long = Vec::new();
    for package in &metadata.packages {
        let Some(root) = crate_root(package) else {
            continue;
        };
        let files = module_files(&root)?;
        circles.extend(module_circles(&package.name, &files));
        for file in &files {
            allows.extend(unreasoned_allows(&file.path, &file.text));
        }
        // Tests, benches and examples are crates of their own: their allows
        // count, their modules are not the library's, their functions may run long.
        let extras = ["tests", "benches", "examples"].map(|extra| package.folder().join(extra));
        long.extend(long_functions(files.iter().filter(|file| {
            !extras.iter().any(|extra| file.path.starts_with(extra))
        })));
        long.extend(long_cxx_functions(package.folder())?);
        for extra in &extras {
            for path in rust_files(extra)? {
                let text = read(&path)?;
                allows.extend(unreasoned_allows(&path, &text));
            }
        }
    }
    print_circles(&circles);
    for allow in &allows {
        println!(
            "structure: {}:{}: `{}` has no `reason = \"...\"`",
            allow.file.display(),
            allow.line,
            allow.attribute
        );
    }
    for function in &long {
        println!(
            "structure: {}:{}: fn {} spans {} lines (at most {MAX_LINES})",
            function.file.display(),
            function.line,
            function.name,
            function.lines
        );
    }
    if circles.is_empty() && allows.is_empty() && long.is_empty() {
        println!(
            "structure: no module circles, every allow has its reason, \
             no function over {MAX_LINES} lines"
        );
        Ok(ExitCode::SUCCESS)
    } else {
        Err(XtaskError::Check(format!(
            "{} module circle(s), {} allow(s) without a reason, {} function(s) over {MAX_LINES} lines",
            circles.len(),
            allows.len(),
            long.len()
        )))
    }
}

/// Prints each circle, with one import for each of its edges.
fn print_circles(circles: &[Circle]) {
    for circle in circles {
        let parent = if circle.parent.is_empty() {
            "the crate root".to_owned()
        } else {
            format!("`{}`", circle.parent.join("::"))
        };
        println!(
            "structure: module circle in {} under {parent}: {}",
            circle.crate_name,
            circle.members.join(" <-> ")
        );
        for import in &circle.imports {
            println!(
                "    {} uses {} ({})",
                import.from.join("::"),
                import.to.join("::"),
                import.file.display()
            );
        }
    }
}

/// The file at the root of a package's library, whatever its crate types (else of its
/// binary).
fn crate_root(package: &crate::metadata::Package) -> Option<PathBuf> {
    let lib = package.targets.iter().find(|t| t.is_library());
    let bin = package.targets.iter().find(|t| t.is("bin"));
    lib.or(bin).map(|t| t.src_path.clone())
}

/// The `.rs` files under `dir` (none when it does not exist), sorted, with
/// bindgen's output left out: it is generated, its lint settings are the
/// including module's.
fn rust_files(dir: &Path) -> Result<Vec<PathBuf>, XtaskError> {
    source_files(dir, &["rs"], &["generated"])
}

/// The files under `dir` (none when it does not exist) whose ending is one of `extensions`,
/// sorted; folders named in `skipped` left out.
fn source_files(
    dir: &Path,
    extensions: &[&str],
    skipped: &[&str],
) -> Result<Vec<PathBuf>, XtaskError> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(XtaskError::io(&dir)(e)),
        };
        for entry in entries {
            let path = entry.map_err(XtaskError::io(&dir))?.path();
            if path.is_dir() {
                let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
                if !skipped.contains(&name) {
                    pending.push(path);
                }
            } else if path
                .extension()
                .is_some_and(|e| extensions.iter().any(|x| e == *x))
            {
                found.push(path);
            }
        }
    }
    found.sort();
    Ok(found)
}

fn read(path: &Path) -> Result<String, XtaskError> {
    std::fs::read_to_string(path).map_err(XtaskError::io(path))
}

/// Every file of the crate rooted at `root`, with the module it is by its
/// place (`a/b.rs` and `a/b/mod.rs` are `a::b`).
fn module_files(root: &Path) -> Result<Vec<SourceFile>, XtaskError> {
    let src = root.parent().unwrap_or_else(|| Path::new("."));
    let mut files = Vec::new();
    for path in rust_files(src)? {
        let relative = path.strip_prefix(src).unwrap_or(&path);
        let module = if path == root {
            Vec::new()
        } else {
            module_of(relative)
        };
        let text = read(&path)?;
        files.push(SourceFile { path, module, text });
    }
    Ok(files)
}

/// The module a file at `relative` (to the crate's source folder) is.
fn module_of(relative: &Path) -> ModulePath {
    let mut parts: Vec<String> = relative
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if let Some(last) = parts.pop() {
        let stem = last.trim_end_matches(".rs");
        if stem != "mod" && stem != "lib" && stem != "main" {
            parts.push(stem.to_owned());
        }
    }
    parts
}

/// `text` with its comments and the contents of its string and character literals blanked
/// out, byte for byte (so positions in it are positions in `text`): doc links, prose and
/// messages mention paths without importing them, and a `'{'` or `"}"` is no brace.
fn strip_comments(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = bytes.to_vec();
    let mut i = 0;
    while i < bytes.len() {
        let Some((blank, end)) = comment_or_literal(bytes, i) else {
            i += 1;
            continue;
        };
        for b in &mut out[blank] {
            if *b != b'\n' {
                *b = b' ';
            }
        }
        i = end;
    }
    // Only ASCII bytes were replaced, by ASCII spaces, and whole multi-byte
    // characters inside comments and literals; the rest is untouched.
    String::from_utf8(out).unwrap_or_default()
}

/// The comment or literal that starts at `i`, if one does: the bytes to blank and where it
/// ends. A string keeps its quotes, so code around it still reads as an expression.
fn comment_or_literal(bytes: &[u8], i: usize) -> Option<(Range<usize>, usize)> {
    let rest = &bytes[i..];
    if rest.starts_with(b"//") {
        let end = i + rest.iter().position(|&b| b == b'\n').unwrap_or(rest.len());
        return Some((i..end, end));
    }
    if rest.starts_with(b"/*") {
        let end = block_comment_end(bytes, i);
        return Some((i..end, end));
    }
    // `r"`, `br#"`, `cr##"` open a raw string; in `for"` or `r#type` no string opens.
    let after_ident = i > 0 && is_ident_byte(bytes[i - 1]);
    if let Some((open, hashes)) = raw_string_open(rest).filter(|_| !after_ident) {
        let body = i + open;
        let end = (body..bytes.len())
            .find(|&j| {
                bytes[j] == b'"'
                    && bytes
                        .get(j + 1..j + 1 + hashes)
                        .is_some_and(|h| h.iter().all(|&b| b == b'#'))
            })
            .unwrap_or(bytes.len());
        return Some((body..end, (end + 1 + hashes).min(bytes.len())));
    }
    match rest[0] {
        b'"' => {
            let mut j = i + 1;
            while j < bytes.len() && bytes[j] != b'"' {
                j += if bytes[j] == b'\\' { 2 } else { 1 };
            }
            let end = j.min(bytes.len());
            Some((i + 1..end, (end + 1).min(bytes.len())))
        }
        b'\'' => char_literal_len(rest).map(|len| (i..i + len, i + len)),
        _ => None,
    }
}

/// Where the block comment opening at `i` ends; block comments nest.
fn block_comment_end(bytes: &[u8], i: usize) -> usize {
    let mut depth = 0;
    let mut j = i;
    while j < bytes.len() {
        if bytes[j..].starts_with(b"/*") {
            depth += 1;
            j += 2;
        } else if bytes[j..].starts_with(b"*/") {
            depth -= 1;
            j += 2;
            if depth == 0 {
                break;
            }
        } else {
            j += 1;
        }
    }
    j.min(bytes.len())
}

/// For a raw string opening at the start of `rest`: where its contents start and how many
/// `#` close it.
fn raw_string_open(rest: &[u8]) -> Option<(usize, usize)> {
    let r = match rest {
        [b'b' | b'c', b'r', ..] => 2,
        [b'r', ..] => 1,
        _ => return None,
    };
    let hashes = rest[r..].iter().take_while(|&&b| b == b'#').count();
    (rest.get(r + hashes) == Some(&b'"')).then_some((r + hashes + 1, hashes))
}

/// The length of the character literal at the start of `rest` (which starts with `'`), or
/// `None` for a lifetime or label such as `'a` or `'outer`.
fn char_literal_len(rest: &[u8]) -> Option<usize> {
    if rest.get(1) == Some(&b'\\') {
        // The escaped byte may be a quote itself ('\''); a `\u{...}` ends at the next.
        let close = rest.get(3..)?.iter().position(|&b| b == b'\'')?;
        return Some(3 + close + 1);
    }
    let width = match *rest.get(1)? {
        0xF0.. => 4,
        0xE0.. => 3,
        0xC0.. => 2,
        _ => 1,
    };
    (rest.get(1 + width) == Some(&b'\'')).then_some(2 + width)
}

fn is_ident_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// The line (from 1) of byte `at` in `text`.
fn line_of(text: &str, at: usize) -> usize {
    text[..at].matches('\n').count() + 1
}

/// The absolute module paths `text` (comments stripped) names through
/// `crate::` and `super::`, seen from `module`.
fn named_paths(text: &str, module: &[String]) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    let bytes = text.as_bytes();
    for (prefix, base) in [
        ("crate::", Vec::new()),
        ("super::", module[..module.len().saturating_sub(1)].to_vec()),
    ] {
        let mut from = 0;
        while let Some(found) = text[from..].find(prefix) {
            let at = from + found;
            from = at + prefix.len();
            let before = at.checked_sub(1).map(|i| bytes[i]);
            // `$crate::` is the crate too; `foo_crate::` or `x::super::` is not.
            if before.is_some_and(|b| is_ident_byte(b) || b == b':') {
                continue;
            }
            let mut parser = UseTree { text, at: from };
            for tail in parser.tree() {
                let mut path = base.clone();
                // `super::super::x`: each further `super` is one level up.
                let mut tail = tail.into_iter().peekable();
                while tail.peek().is_some_and(|s| s == "super") {
                    tail.next();
                    path.pop();
                }
                path.extend(tail);
                paths.push(path);
            }
        }
    }
    paths
}

/// A parser of the use tree after `crate::` or `super::`: `a::b`,
/// `a::{b, c::{d}}`, `{a, b}`.
struct UseTree<'t> {
    text: &'t str,
    at: usize,
}

impl UseTree<'_> {
    fn skip_space(&mut self) {
        let rest = &self.text[self.at..];
        self.at += rest.len() - rest.trim_start().len();
    }

    fn eat(&mut self, token: &str) -> bool {
        self.skip_space();
        if self.text[self.at..].starts_with(token) {
            self.at += token.len();
            true
        } else {
            false
        }
    }

    fn ident(&mut self) -> Option<String> {
        self.skip_space();
        let rest = &self.text[self.at..];
        let len = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        (len > 0).then(|| {
            self.at += len;
            rest[..len].to_owned()
        })
    }

    /// The paths of one tree, each a list of segments.
    fn tree(&mut self) -> Vec<Vec<String>> {
        if self.eat("{") {
            let mut paths = Vec::new();
            loop {
                if self.eat("}") {
                    break;
                }
                let before = self.at;
                paths.extend(self.tree());
                if !self.eat(",") {
                    self.eat("}");
                    break;
                }
                if self.at == before {
                    break;
                }
            }
            return paths;
        }
        let Some(first) = self.ident() else {
            return Vec::new();
        };
        let mut path = vec![first];
        while self.eat("::") {
            self.skip_space();
            if self.text[self.at..].starts_with('{') {
                return self
                    .tree()
                    .into_iter()
                    .map(|tail| path.iter().cloned().chain(tail).collect())
                    .collect();
            }
            match self.ident() {
                Some(segment) => path.push(segment),
                None => break,
            }
        }
        vec![path]
    }
}

/// The circles among each module's children in one crate.
fn module_circles(crate_name: &str, files: &[SourceFile]) -> Vec<Circle> {
    let modules: BTreeSet<ModulePath> = files.iter().map(|f| f.module.clone()).collect();
    // Per parent: child -> children it uses, with one import for each.
    let mut graphs: BTreeMap<ModulePath, BTreeMap<(String, String), Import>> = BTreeMap::new();
    for file in files {
        let text = strip_comments(&file.text);
        for path in named_paths(&text, &file.module) {
            let Some(to) = (0..=path.len())
                .rev()
                .map(|n| path[..n].to_vec())
                .find(|p| modules.contains(p))
            else {
                continue;
            };
            let common = file
                .module
                .iter()
                .zip(&to)
                .take_while(|(a, b)| a == b)
                .count();
            // An ancestor or a descendant: a parent and its children.
            if common == file.module.len() || common == to.len() {
                continue;
            }
            let edge = (file.module[common].clone(), to[common].clone());
            graphs
                .entry(file.module[..common].to_vec())
                .or_default()
                .entry(edge)
                .or_insert_with(|| Import {
                    from: file.module.clone(),
                    to: to.clone(),
                    file: file.path.clone(),
                });
        }
    }
    let mut circles = Vec::new();
    for (parent, edges) in graphs {
        for members in strongly_connected(&edges) {
            let imports = edges
                .iter()
                .filter(|((a, b), _)| members.contains(a) && members.contains(b))
                .map(|(_, import)| import.clone())
                .collect();
            circles.push(Circle {
                crate_name: crate_name.to_owned(),
                parent: parent.clone(),
                members: members.into_iter().collect(),
                imports,
            });
        }
    }
    circles
}

/// The groups of two or more nodes that reach each other along `edges`.
fn strongly_connected<V>(edges: &BTreeMap<(String, String), V>) -> Vec<BTreeSet<String>> {
    let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (a, b) in edges.keys() {
        next.entry(a).or_default().push(b);
        next.entry(b).or_default();
    }
    let reach = |start: &str| {
        let mut seen = BTreeSet::new();
        let mut pending = vec![start];
        while let Some(node) = pending.pop() {
            for &n in &next[node] {
                if seen.insert(n) {
                    pending.push(n);
                }
            }
        }
        seen
    };
    let reached: BTreeMap<&str, BTreeSet<&str>> = next.keys().map(|&n| (n, reach(n))).collect();
    let mut groups: Vec<BTreeSet<String>> = Vec::new();
    for (&node, from_node) in &reached {
        if groups.iter().any(|g| g.contains(node)) {
            continue;
        }
        let group: BTreeSet<String> = from_node
            .iter()
            .filter(|&&other| reached[other].contains(node))
            .map(|&n| n.to_owned())
            .collect();
        if group.len() > 1 {
            groups.push(group);
        }
    }
    groups
}

/// The `allow`/`expect` attributes in `text` without a `reason`.
fn unreasoned_allows(path: &Path, text: &str) -> Vec<UnreasonedAllow> {
    let code = strip_comments(text);
    let mut found = Vec::new();
    for lint in ["allow(", "expect("] {
        let mut from = 0;
        while let Some(at) = code[from..].find(lint).map(|i| from + i) {
            from = at + lint.len();
            // An attribute's own `allow(` follows `#[` or `#![`, or a comma
            // inside a `cfg_attr(` still open; anything else is code.
            let before = code[..at].trim_end();
            let in_cfg_attr = before.ends_with(',')
                && code[..at]
                    .rfind("cfg_attr(")
                    .is_some_and(|c| !code[c..at].contains(']'));
            if !(before.ends_with("#[") || before.ends_with("#![") || in_cfg_attr) {
                continue;
            }
            let mut depth = 0;
            let mut end = from;
            for (i, c) in code[at..].char_indices() {
                match c {
                    '(' => depth += 1,
                    ')' => {
                        depth -= 1;
                        if depth == 0 {
                            end = at + i + 1;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            let attribute = &code[at..end];
            if !attribute.contains("reason") {
                found.push(UnreasonedAllow {
                    file: path.to_path_buf(),
                    line: line_of(&code, at),
                    attribute: attribute.split_whitespace().collect::<Vec<_>>().join(" "),
                });
            }
        }
    }
    found.sort_by_key(|allow| allow.line);
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(module: &[&str], text: &str) -> SourceFile {
        SourceFile {
            path: PathBuf::from(format!("{}.rs", module.join("/"))),
            module: module.iter().map(|s| s.to_string()).collect(),
            text: text.to_owned(),
        }
    }

    fn members(circles: &[Circle]) -> Vec<Vec<String>> {
        circles.iter().map(|c| c.members.clone()).collect()
    }

    #[test]
    fn two_modules_importing_each_other_are_a_circle() {
        let files = [
            file(&[], "mod a; mod b;"),
            file(&["a"], "use crate::b::Thing;"),
            file(&["b"], "use crate::{a::Other, c};"),
        ];
        let circles = module_circles("k", &files);
        assert_eq!(members(&circles), [vec!["a".to_string(), "b".to_string()]]);
        assert_eq!(circles[0].imports.len(), 2);
    }

    #[test]
    fn a_circle_through_a_third_module_and_nested_groups() {
        let files = [
            file(&[], ""),
            file(&["a"], "fn f() { crate::b::g(); }"),
            file(&["b"], "use super::{c::{self, X}};"),
            file(&["c"], "use crate::a;\n"),
            file(&["d"], "use crate::a;"),
        ];
        assert_eq!(members(&module_circles("k", &files)), [vec!["a", "b", "c"]]);
    }

    #[test]
    fn parents_children_comments_and_strings_are_not_circles() {
        let files = [
            file(&[], "pub use a::Thing;"),
            file(&["a"], "use crate::a::inner::X; use super::Y;"),
            file(&["a", "inner"], "use super::super::a::Z; use crate::Root;"),
            file(
                &["b"],
                "// use crate::c::X;\n/// [`crate::c`]\nlet s = \"crate::c\";",
            ),
            file(&["c"], "use crate::b::X;"),
        ];
        assert!(module_circles("k", &files).is_empty());
    }

    #[test]
    fn nested_siblings_are_compared_under_their_parent() {
        let files = [
            file(&[], ""),
            file(&["net"], ""),
            file(&["net", "a"], "use super::b::X;"),
            file(&["net", "b"], "use crate::net::a::Y;"),
        ];
        let circles = module_circles("k", &files);
        assert_eq!(members(&circles), [vec!["a", "b"]]);
        assert_eq!(circles[0].parent, ["net"]);
    }

    #[test]
    fn a_library_of_any_crate_type_is_the_crate_root() {
        let meta = crate::metadata::Metadata::parse(crate::metadata::SAMPLE).unwrap();
        let root = |name: &str| {
            let package = meta.packages.iter().find(|p| p.name == name).unwrap();
            crate_root(package).unwrap()
        };
        assert_eq!(root("tandem-capi"), Path::new("/ws/capi/src/lib.rs"));
        assert_eq!(root("tandem-python"), Path::new("/ws/python/src/lib.rs"));
        // A library before a binary of the same package.
        assert_eq!(root("tandem-runtime"), Path::new("/ws/runtime/src/lib.rs"));
    }

    #[test]
    fn allows_need_a_reason() {
        let text = "#[allow(dead_code)]\nfn a() {}\n\
                    #[allow(clippy::x, reason = \"why\")]\nfn b() {}\n\
                    #![expect(unused)]\n\
                    #[cfg_attr(test, allow(dead_code))]\n\
                    #[allow(\n    clippy::too_many_arguments,\n    reason = \"the order\"\n)]\n\
                    // #[allow(dead_code)] in a comment\n\
                    let allowed = list.allow(x);\n";
        let found = unreasoned_allows(Path::new("f.rs"), text);
        let lines: Vec<usize> = found.iter().map(|a| a.line).collect();
        assert_eq!(lines, [1, 5, 6], "{found:?}");
        assert_eq!(found[0].attribute, "allow(dead_code)");
    }
}
