//! Turns the kernel sources and Tandem's headers into one self-contained
//! translation unit (NVRTC has no include path; hipcc and nvcc get the same
//! text so every GPU backend compiles exactly what is embedded).

use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// Inlines `#include "..."` directives (resolved in `include_dir`) into one
/// string, each header once (they all use `#pragma once`), with `#line`
/// markers so compiler errors name the original file and line.
pub struct Inliner<'a> {
    include_dir: &'a Path,
    /// Paths in `#line` markers are shown relative to this folder, so the
    /// embedded source does not carry the build machine's paths.
    crate_dir: &'a Path,
    seen: HashSet<PathBuf>,
    pub out: String,
}

impl<'a> Inliner<'a> {
    pub fn new(include_dir: &'a Path, crate_dir: &'a Path) -> Self {
        Inliner {
            include_dir,
            crate_dir,
            seen: HashSet::new(),
            out: String::new(),
        }
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
        let crate_dir = self
            .crate_dir
            .canonicalize()
            .unwrap_or_else(|_| self.crate_dir.into());
        let relative = canonical.strip_prefix(&crate_dir).unwrap_or(&canonical);
        let shown = format!("tandem-device-kernels/{}", relative.display()).replace('\\', "/");
        self.out.push_str(&format!("#line 1 \"{shown}\"\n"));
        for (index, line) in text.lines().enumerate() {
            let directive = line.trim_start();
            if directive.starts_with("#pragma once") {
                self.out.push('\n');
                continue;
            }
            if let Some(rest) = directive.strip_prefix("#include") {
                let header = quoted_include(rest).ok_or_else(|| {
                    format!(
                        "{}:{}: only `#include \"tandem/...\"` may appear in kernel sources \
                         (NVRTC has no system headers)",
                        canonical.display(),
                        index + 1
                    )
                })?;
                self.add_file(&self.include_dir.join(header))?;
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
