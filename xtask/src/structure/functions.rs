//! The function-length check: no function of a crate's code, tests left out, spans more than
//! [`MAX_LINES`] lines from its `fn` to its closing brace. A longer one has to be read whole
//! before any of its steps can be; split, each step has a name and can be read alone.
//!
//! Test code is an item under `#[test]`, `#[cfg(test)]` or `#[cfg(all(test, ...))]`, and
//! the file of a module declared so (`#[cfg(test)] mod tests;`) with its submodules.

use std::ops::Range;
use std::path::PathBuf;

use super::{is_ident_byte, line_of, strip_comments, ModulePath, SourceFile};

/// The most lines a function may span, its `fn` line and closing brace included.
pub const MAX_LINES: usize = 100;

/// A function that spans more than [`MAX_LINES`] lines.
#[derive(Debug, PartialEq, Eq)]
pub struct LongFunction {
    pub file: PathBuf,
    pub line: usize,
    pub name: String,
    pub lines: usize,
}

/// One function with a body: its name, the line of its `fn` and the lines it spans.
#[derive(Debug, PartialEq, Eq)]
struct Function {
    name: String,
    line: usize,
    lines: usize,
}

/// An item that is test code: the bytes it spans, its attributes included, and the module it
/// declares when it is a `mod name;`, whose file is then test code too.
struct TestItem {
    span: Range<usize>,
    module: Option<String>,
}

/// The functions of one crate's `files` that are not test code and span more than
/// [`MAX_LINES`] lines.
pub fn long_functions<'f>(files: impl IntoIterator<Item = &'f SourceFile>) -> Vec<LongFunction> {
    let files: Vec<(&SourceFile, String)> = files
        .into_iter()
        .map(|file| (file, strip_comments(&file.text)))
        .collect();
    let test_modules: Vec<ModulePath> = files
        .iter()
        .flat_map(|(file, code)| {
            test_items(code).into_iter().filter_map(|item| {
                let mut module = file.module.clone();
                module.push(item.module?);
                Some(module)
            })
        })
        .collect();
    let mut found = Vec::new();
    for (file, code) in &files {
        if test_modules.iter().any(|m| file.module.starts_with(m)) {
            continue;
        }
        found.extend(
            functions(code)
                .into_iter()
                .filter(|f| f.lines > MAX_LINES)
                .map(|f| LongFunction {
                    file: file.path.clone(),
                    line: f.line,
                    name: f.name,
                    lines: f.lines,
                }),
        );
    }
    found
}

/// The functions with a body in `code` (comments and literals blanked), test code left out,
/// in the order their `fn`s come; a function inside another is one of its own too.
fn functions(code: &str) -> Vec<Function> {
    let tests = test_items(code);
    let bytes = code.as_bytes();
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = code[from..].find("fn").map(|i| from + i) {
        from = at + 2;
        // The keyword, not `my_fn`, `fnord` or the pointer type `fn(u8)`.
        let keyword = (at == 0 || !is_ident_byte(bytes[at - 1]))
            && bytes.get(at + 2).is_some_and(u8::is_ascii_whitespace);
        if !keyword || tests.iter().any(|t| t.span.contains(&at)) {
            continue;
        }
        let rest = &code[from..];
        let name_at = from + rest.len() - rest.trim_start().len();
        let name_len = bytes[name_at..]
            .iter()
            .take_while(|&&b| is_ident_byte(b))
            .count();
        // A macro's `fn $name` has no name to report.
        if name_len == 0 {
            continue;
        }
        let Some(close) = body_open(bytes, name_at).and_then(|open| matching(bytes, open)) else {
            continue;
        };
        let line = line_of(code, at);
        found.push(Function {
            name: code[name_at..name_at + name_len].to_owned(),
            line,
            lines: line_of(code, close) - line + 1,
        });
    }
    found
}

/// The items of `code` (comments and literals blanked) that are test code.
fn test_items(code: &str) -> Vec<TestItem> {
    let bytes = code.as_bytes();
    let mut items = Vec::new();
    let mut from = 0;
    while let Some(at) = code[from..].find("#[").map(|i| from + i) {
        from = at + 2;
        let Some(close) = matching(bytes, at + 1) else {
            break;
        };
        let attribute: String = code[at + 2..close].split_whitespace().collect();
        let test = attribute == "test"
            || attribute == "cfg(test)"
            || attribute.starts_with("cfg(all(test,");
        if !test {
            continue;
        }
        let end = item_end(bytes, close + 1);
        // `mod name;`, after any further attributes and a visibility.
        let declared = code[close + 1..end].strip_suffix(';').and_then(|item| {
            match item.split_whitespace().collect::<Vec<_>>()[..] {
                [.., "mod", name] => Some(name.to_owned()),
                _ => None,
            }
        });
        items.push(TestItem {
            span: at..end,
            module: declared,
        });
        // What lies inside is test code already.
        from = end;
    }
    items
}

/// Where the item whose attributes end at `from` ends: after its `;`, or after the brace that
/// closes its first block.
fn item_end(bytes: &[u8], from: usize) -> usize {
    match body_open(bytes, from) {
        Some(open) => matching(bytes, open).map_or(bytes.len(), |close| close + 1),
        None => bytes[from..]
            .iter()
            .position(|&b| b == b';')
            .map_or(bytes.len(), |i| from + i + 1),
    }
}

/// The `{` that opens the block of the item going on at `from`, or `None` when a `;` ends the
/// item first. Brackets and parentheses are skipped whole: `[u8; 4]` ends nothing.
fn body_open(bytes: &[u8], from: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (i, &b) in bytes.iter().enumerate().skip(from) {
        match b {
            b'(' | b'[' => depth += 1,
            b')' | b']' => depth = depth.saturating_sub(1),
            b'{' if depth == 0 => return Some(i),
            b';' if depth == 0 => return None,
            _ => {}
        }
    }
    None
}

/// The bracket that closes the one at `open` (`{`, `[` or `(`), counting only its own kind.
pub(super) fn matching(bytes: &[u8], open: usize) -> Option<usize> {
    let (opener, closer) = match bytes[open] {
        b'{' => (b'{', b'}'),
        b'[' => (b'[', b']'),
        _ => (b'(', b')'),
    };
    let mut depth = 0usize;
    for (i, &b) in bytes.iter().enumerate().skip(open) {
        if b == opener {
            depth += 1;
        } else if b == closer {
            depth -= 1;
            if depth == 0 {
                return Some(i);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lengths(text: &str) -> Vec<(String, usize, usize)> {
        functions(&strip_comments(text))
            .into_iter()
            .map(|f| (f.name, f.line, f.lines))
            .collect()
    }

    fn found(name: &str, line: usize, lines: usize) -> (String, usize, usize) {
        (name.to_owned(), line, lines)
    }

    #[test]
    fn a_function_spans_its_fn_line_to_its_closing_brace() {
        let text = "/// Docs.\n#[inline]\npub(crate) fn first(\n    a: u8,\n) -> [u8; 2] {\n    \
                    [a, a]\n}\n\nfn one_line() {}\n";
        assert_eq!(
            lengths(text),
            [found("first", 3, 5), found("one_line", 9, 1)]
        );
    }

    #[test]
    fn braces_in_strings_characters_and_comments_are_not_counted() {
        let text = r####"fn braces() {
    let s = "{ \" {";
    let r = r#"}" { "#;
    let b = br##"}"#"##;
    let c = ['{', '\'', '\\', '"', b'}', '\u{7b}', '→'];
    // }
    /* } /* nested } */ } */
    let _x: &'static str = s;
    'outer: loop { break 'outer; }
}
fn after<'a>(x: &'a u8) -> &'a u8 { x }
"####;
        assert_eq!(
            lengths(text),
            [found("braces", 1, 10), found("after", 11, 1)]
        );
    }

    #[test]
    fn closures_nested_functions_and_declarations() {
        let text = "trait T {\n    fn declared(&self) -> u8;\n    fn provided(&self) {}\n}\n\
                    extern \"C\" {\n    fn foreign(x: u8);\n}\n\
                    fn outer() {\n    let f = |x: u8| {\n        x + 1\n    };\n    \
                    fn inner() -> fn(u8) -> u8 {\n        todo!()\n    }\n    \
                    let my_fn = 1;\n}\n";
        assert_eq!(
            lengths(text),
            [
                found("provided", 3, 1),
                found("outer", 8, 9),
                found("inner", 12, 3)
            ]
        );
    }

    #[test]
    fn test_functions_and_modules_are_left_out() {
        let text = "fn kept() {}\n#[test]\nfn a_test() {}\n\
                    #[cfg(test)]\nmod tests {\n    fn helper() {}\n    #[test]\n    fn t() {}\n}\n\
                    #[cfg(all(test, not(loom)))]\nfn also_test() {}\n\
                    #[cfg(any(test, feature = \"x\"))]\nfn not_only_test() {}\n";
        assert_eq!(
            lengths(text),
            [found("kept", 1, 1), found("not_only_test", 13, 1)]
        );
    }

    #[test]
    fn long_functions_leave_out_files_of_test_modules() {
        let long = format!(
            "fn long() {{\n{}}}\n",
            "    step();\n".repeat(MAX_LINES - 1)
        );
        let just = format!(
            "fn just() {{\n{}}}\n",
            "    step();\n".repeat(MAX_LINES - 2)
        );
        let file = |module: &[&str], text: String| SourceFile {
            path: PathBuf::from(format!("{}.rs", module.join("/"))),
            module: module.iter().map(|s| s.to_string()).collect(),
            text,
        };
        let files = [
            file(
                &[],
                format!("#[cfg(test)]\npub(crate) mod tests;\nmod a;\n{just}"),
            ),
            file(&["a"], format!("\n{long}")),
            file(&["tests"], long.clone()),
            file(&["tests", "deeper"], long.clone()),
        ];
        assert_eq!(
            long_functions(&files),
            [LongFunction {
                file: PathBuf::from("a.rs"),
                line: 2,
                name: "long".into(),
                lines: MAX_LINES + 1,
            }]
        );
    }
}
