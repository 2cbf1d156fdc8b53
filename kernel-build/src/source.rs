//! Turns the kernel sources and Tandem's headers into one self-contained
//! translation unit (NVRTC has no include path; hipcc and nvcc get the same
//! text so every GPU backend compiles exactly what is embedded).

use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// Inlines `#include "..."` directives (resolved in the include folders, in
/// order) into one string, each header once (they all use `#pragma once`),
/// with `#line` markers so compiler errors name the original file and line.
pub struct Inliner<'a> {
    include_dirs: &'a [PathBuf],
    /// Paths in `#line` markers are shown relative to this folder (prefixed
    /// with `name`) or to an include folder, so the embedded source does not
    /// carry the build machine's paths.
    crate_dir: &'a Path,
    name: &'a str,
    seen: HashSet<PathBuf>,
    pub out: String,
}

impl<'a> Inliner<'a> {
    pub fn new(include_dirs: &'a [PathBuf], crate_dir: &'a Path, name: &'a str) -> Self {
        Inliner {
            include_dirs,
            crate_dir,
            name,
            seen: HashSet::new(),
            out: String::new(),
        }
    }

    /// Appends the header `#include "header"` names, with its includes inlined.
    pub fn add_include(&mut self, header: &str) -> Result<(), String> {
        let path = self
            .include_dirs
            .iter()
            .map(|dir| dir.join(header))
            .find(|path| path.is_file())
            .ok_or_else(|| {
                format!(
                    "`{header}` is in none of the include folders ({})",
                    self.include_dirs
                        .iter()
                        .map(|d| d.display().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })?;
        self.add_file(&path)
    }

    /// How `#line` markers name `canonical`.
    fn shown(&self, canonical: &Path) -> String {
        let canonical_dir = |dir: &Path| dir.canonicalize().unwrap_or_else(|_| dir.into());
        let shown = if let Ok(rel) = canonical.strip_prefix(canonical_dir(self.crate_dir)) {
            format!("{}/{}", self.name, rel.display())
        } else if let Some(rel) = self
            .include_dirs
            .iter()
            .find_map(|dir| canonical.strip_prefix(canonical_dir(dir)).ok())
        {
            rel.display().to_string()
        } else {
            canonical.display().to_string()
        };
        shown.replace('\\', "/")
    }

    /// Appends `path` with its includes inlined.
    pub fn add_file(&mut self, path: &Path) -> Result<(), String> {
        let canonical = path
            .canonicalize()
            .map_err(|e| format!("{}: {e}", path.display()))?;
        if !self.seen.insert(canonical.clone()) {
            return Ok(());
        }
        let text = std::fs::read_to_string(&canonical)
            .map_err(|e| format!("reading {}: {e}", canonical.display()))?;
        let shown = self.shown(&canonical);
        self.out.push_str(&format!("#line 1 \"{shown}\"\n"));
        for (index, line) in text.lines().enumerate() {
            let directive = line.trim_start();
            if directive.starts_with("#pragma once") {
                self.out.push('\n');
                continue;
            }
            if let Some(rest) = directive.strip_prefix("#include") {
                let at = || format!("{}:{}", canonical.display(), index + 1);
                let header = quoted_include(rest).ok_or_else(|| {
                    format!(
                        "{}: only `#include \"...\"` of headers in the include folders may \
                         appear in kernel sources (NVRTC has no system headers)",
                        at()
                    )
                })?;
                self.add_include(header)
                    .map_err(|e| format!("{}: {e}", at()))?;
                self.out
                    .push_str(&format!("#line {} \"{shown}\"\n", index + 2));
                continue;
            }
            self.out.push_str(line);
            self.out.push('\n');
        }
        Ok(())
    }

    /// Appends generated text (no includes), marked as such in diagnostics.
    pub fn add_generated(&mut self, name: &str, text: &str) {
        self.out.push_str(&format!("#line 1 \"{name}\"\n"));
        self.out.push_str(text);
    }
}

/// `"tandem/x.h"` from ` "tandem/x.h"  // comment`.
fn quoted_include(rest: &str) -> Option<&str> {
    let rest = rest.trim_start().strip_prefix('"')?;
    let end = rest.find('"')?;
    Some(&rest[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A crate folder with `include/lib/a.h` (which includes `lib/b.h`),
    /// `include/lib/b.h` and `kernels/k.cu`; removed on drop.
    struct Tree(PathBuf);

    impl Tree {
        fn new(kernel: &str) -> Self {
            let root = std::env::temp_dir().join(format!(
                "tandem-kernel-build-source-{}-{:?}",
                std::process::id(),
                std::thread::current().id()
            ));
            std::fs::create_dir_all(root.join("include/lib")).unwrap();
            std::fs::create_dir_all(root.join("kernels")).unwrap();
            std::fs::write(
                root.join("include/lib/a.h"),
                "#pragma once\n#include \"lib/b.h\"\nint a;\n",
            )
            .unwrap();
            std::fs::write(root.join("include/lib/b.h"), "#pragma once\nint b;\n").unwrap();
            std::fs::write(root.join("kernels/k.cu"), kernel).unwrap();
            Tree(root)
        }
    }

    impl Drop for Tree {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn inlines_each_header_once_with_line_markers_free_of_build_paths() {
        let tree = Tree::new("#include \"lib/a.h\"\n#include \"lib/b.h\"\nint k;\n");
        let includes = [tree.0.join("include")];
        let mut inliner = Inliner::new(&includes, &tree.0, "my-crate");
        inliner.add_file(&tree.0.join("kernels/k.cu")).unwrap();
        let out = &inliner.out;
        assert_eq!(out.matches("int b;").count(), 1, "{out}");
        assert!(out.find("int b;") < out.find("int a;"), "{out}");
        assert!(out.contains("#line 1 \"my-crate/kernels/k.cu\""), "{out}");
        assert!(
            out.contains("#line 1 \"my-crate/include/lib/a.h\""),
            "{out}"
        );
        assert!(!out.contains(&tree.0.display().to_string()), "{out}");
        assert!(
            !out.contains("#include") && !out.contains("#pragma once"),
            "{out}"
        );
    }

    #[test]
    fn headers_outside_the_crate_are_named_by_their_include_path() {
        let tree = Tree::new("#include \"lib/a.h\"\n");
        let crate_dir = tree.0.join("kernels");
        let includes = [tree.0.join("include")];
        let mut inliner = Inliner::new(&includes, &crate_dir, "user");
        inliner.add_file(&crate_dir.join("k.cu")).unwrap();
        assert!(
            inliner.out.contains("#line 1 \"lib/a.h\""),
            "{}",
            inliner.out
        );
        assert!(
            inliner.out.contains("#line 1 \"user/k.cu\""),
            "{}",
            inliner.out
        );
    }

    #[test]
    fn missing_and_system_headers_are_errors_naming_the_line() {
        let tree = Tree::new("int k;\n#include \"lib/none.h\"\n");
        let includes = [tree.0.join("include")];
        let mut inliner = Inliner::new(&includes, &tree.0, "c");
        let err = inliner.add_file(&tree.0.join("kernels/k.cu")).unwrap_err();
        assert!(
            err.contains("k.cu:2") && err.contains("`lib/none.h` is in none"),
            "{err}"
        );
        drop(tree);

        let tree = Tree::new("#include <stdio.h>\n");
        let mut inliner = Inliner::new(&includes, &tree.0, "c");
        let err = inliner.add_file(&tree.0.join("kernels/k.cu")).unwrap_err();
        assert!(
            err.contains("k.cu:1") && err.contains("system headers"),
            "{err}"
        );
    }
}
