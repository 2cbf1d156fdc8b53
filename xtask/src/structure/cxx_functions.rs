//! The function-length check for the C and C++ sources (the kernels' headers, the C ABI's
//! header, the C and C++ examples): no function spans more than [`MAX_LINES`] lines from the
//! line its declaration starts on to its closing brace, as for Rust.
//!
//! A function is a brace at file, namespace or class level whose head (the text since the
//! last `;`, `{` or `}`) ends in a parameter list, perhaps followed by qualifiers, and does not
//! start with a control or type keyword. Preprocessor lines are left out: a macro that
//! expands to a function is read where it is used.

use std::path::{Path, PathBuf};

use super::functions::{matching, LongFunction, MAX_LINES};
use super::{line_of, read, source_files, strip_comments};
use crate::error::XtaskError;

/// Endings of the C and C++ sources read.
const EXTENSIONS: [&str; 7] = ["h", "hpp", "c", "cc", "cpp", "cu", "cuh"];

/// Heads that end in a parenthesis but open a block which is not a function body (a type's or
/// namespace's head ends in no parenthesis).
const CONTROL: [&str; 7] = ["if", "for", "while", "switch", "do", "else", "catch"];

/// Folders left out: tests, benches and build output.
const SKIPPED_FOLDERS: [&str; 4] = ["tests", "benches", "target", "build"];

/// Words that may follow a function's parameter list.
const QUALIFIERS: [&str; 5] = ["const", "noexcept", "override", "final", "mutable"];

/// The C and C++ functions under `dir` (its `tests` and `benches` left out) that span more
/// than [`MAX_LINES`] lines.
pub fn long_cxx_functions(dir: &Path) -> Result<Vec<LongFunction>, XtaskError> {
    let mut long = Vec::new();
    for path in source_files(dir, &EXTENSIONS, &SKIPPED_FOLDERS)? {
        let code = without_preprocessor(&strip_comments(&read(&path)?));
        long.extend(
            functions(&code)
                .into_iter()
                .filter(|f| f.lines > MAX_LINES)
                .map(|f| LongFunction {
                    file: path.clone(),
                    ..f
                }),
        );
    }
    Ok(long)
}

/// `code` with its preprocessor lines (continuations included) blanked, byte for byte.
fn without_preprocessor(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut continued = false;
    for line in code.split_inclusive('\n') {
        let directive = continued || line.trim_start().starts_with('#');
        continued = directive && line.trim_end().ends_with('\\');
        if directive {
            out.extend(line.chars().map(|c| if c == '\n' { '\n' } else { ' ' }));
        } else {
            out.push_str(line);
        }
    }
    out
}

/// The functions with a body in `code` (comments, literals and preprocessor lines blanked),
/// with the line their head starts on and the lines they span; `file` is left empty.
fn functions(code: &str) -> Vec<LongFunction> {
    let bytes = code.as_bytes();
    let mut found = Vec::new();
    let mut head_start = 0;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b';' | b'}' => head_start = i + 1,
            b'{' => {
                let head = code[head_start..i].trim();
                if let Some(name) = function_name(head) {
                    let Some(close) = matching(bytes, i) else {
                        break;
                    };
                    let at = head_start
                        + (code[head_start..i].len() - code[head_start..i].trim_start().len());
                    let line = line_of(code, at);
                    found.push(LongFunction {
                        file: PathBuf::new(),
                        line,
                        name,
                        lines: line_of(code, close) - line + 1,
                    });
                    // A body's blocks and lambdas are the function's own.
                    i = close;
                }
                head_start = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    found
}

/// The name of the function whose head (declaration before its `{`) is `head`, or `None` when
/// the block is not a function body.
fn function_name(head: &str) -> Option<String> {
    let first = head
        .split(|c: char| !c.is_ascii_alphanumeric() && c != '_')
        .next()?;
    if CONTROL.contains(&first) {
        return None;
    }
    // The parameter list's `)`, after any qualifiers and a trailing return type.
    let mut rest = head.split("->").next()?.trim_end();
    while let Some(word) = QUALIFIERS.iter().find(|q| rest.ends_with(*q)) {
        rest = rest[..rest.len() - word.len()].trim_end();
    }
    let before = rest.strip_suffix(')')?;
    let open = matching_open(before.as_bytes())?;
    let name: String = before[..open]
        .trim_end()
        .chars()
        .rev()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':' || *c == '~')
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    // A lambda's `](...)` or an initialiser's `= (...)` has no name before its list.
    (!name.is_empty()).then_some(name)
}

/// Where the `(` that the `)` just past `before`'s end closes stands in `before`.
fn matching_open(before: &[u8]) -> Option<usize> {
    let mut depth = 1usize;
    for (at, &b) in before.iter().enumerate().rev() {
        match b {
            b')' => depth += 1,
            b'(' => {
                depth -= 1;
                if depth == 0 {
                    return Some(at);
                }
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spans(code: &str) -> Vec<(String, usize, usize)> {
        functions(&without_preprocessor(&strip_comments(code)))
            .into_iter()
            .map(|f| (f.name, f.line, f.lines))
            .collect()
    }

    #[test]
    fn functions_and_methods_are_found_with_their_spans() {
        let code = "namespace t {\n\
                    template <typename H>\n\
                    TANDEM_DEVICE int serve(H h,\n    int n) {\n  if (n) {\n    return 1;\n  }\n  return 0;\n}\n\
                    struct S {\n  int get() const { return 1; }\n};\n\
                    }\n";
        assert_eq!(
            spans(code),
            vec![("serve".to_owned(), 2, 8), ("get".to_owned(), 11, 1)]
        );
    }

    #[test]
    fn blocks_lambdas_and_macros_are_not_functions() {
        let code = "#define F(x) \\\n  void f(x) {\n\
                    int main(void) {\n  auto l = [&](int a) {\n    return a;\n  };\n  for (;;) {\n  }\n}\n\
                    struct P { int a; };\n\
                    extern \"C\" {\n}\n";
        assert_eq!(spans(code), vec![("main".to_owned(), 3, 7)]);
    }

    #[test]
    fn qualifiers_and_return_types_after_the_list_still_make_a_function() {
        let code = "auto f(int a) noexcept -> int {\n  return a;\n}\n\
                    bool S::ok() const override {\n  return true;\n}\n";
        assert_eq!(
            spans(code),
            vec![("f".to_owned(), 1, 3), ("S::ok".to_owned(), 4, 3)]
        );
    }
}
