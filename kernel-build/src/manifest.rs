//! `kernels.toml`: the one list of kernels and their parameter types.

use std::fmt;
use std::path::{Path, PathBuf};

use toml::{Table, Value};

/// A parameter type a kernel may take.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParamType {
    /// A scalar passed by value (`u32` ...).
    Value(Scalar),
    /// `T*` or `const T*`; `pointee` is a name in namespace `tandem`.
    Pointer { pointee: String, is_const: bool },
}

/// Scalars a launch can pass by value: exactly `tandem_hal::ArgKind`'s.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scalar {
    U32,
    I32,
    U64,
    I64,
    F32,
    F64,
}

impl Scalar {
    fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "u32" => Scalar::U32,
            "i32" => Scalar::I32,
            "u64" => Scalar::U64,
            "i64" => Scalar::I64,
            "f32" => Scalar::F32,
            "f64" => Scalar::F64,
            _ => return None,
        })
    }

    /// The C++ spelling (`tandem::u32`).
    pub fn cpp(self) -> &'static str {
        match self {
            Scalar::U32 => "tandem::u32",
            Scalar::I32 => "tandem::i32",
            Scalar::U64 => "tandem::u64",
            Scalar::I64 => "tandem::i64",
            Scalar::F32 => "tandem::f32",
            Scalar::F64 => "tandem::f64",
        }
    }

    /// The `tandem_hal::ArgKind` variant.
    pub fn arg_kind(self) -> &'static str {
        match self {
            Scalar::U32 => "U32",
            Scalar::I32 => "I32",
            Scalar::U64 => "U64",
            Scalar::I64 => "I64",
            Scalar::F32 => "F32",
            Scalar::F64 => "F64",
        }
    }
}

impl ParamType {
    /// Parses `u32`, `u32*`, `const ArenaHeader*`.
    fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if let Some(pointee) = text.strip_suffix('*') {
            let pointee = pointee.trim();
            let (is_const, pointee) = match pointee.strip_prefix("const ") {
                Some(rest) => (true, rest.trim()),
                None => (false, pointee),
            };
            let is_identifier = pointee
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic())
                && pointee
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !is_identifier {
                return Err(format!("`{text}`: the pointee must be one identifier"));
            }
            return Ok(ParamType::Pointer {
                pointee: pointee.to_string(),
                is_const,
            });
        }
        Scalar::parse(text)
            .map(ParamType::Value)
            .ok_or_else(|| format!("`{text}`: by value only u32 u64 i32 i64 f32 f64 can be passed"))
    }

    /// The C++ spelling, fully qualified.
    pub fn cpp(&self) -> String {
        match self {
            ParamType::Value(s) => s.cpp().to_string(),
            ParamType::Pointer { pointee, is_const } => {
                let constness = if *is_const { "const " } else { "" };
                format!("{constness}tandem::{pointee}*")
            }
        }
    }

    /// The `tandem_hal::ArgKind` expression (an absolute path).
    pub fn arg_kind(&self) -> String {
        match self {
            ParamType::Value(s) => format!("::tandem_hal::ArgKind::{}", s.arg_kind()),
            ParamType::Pointer { .. } => "::tandem_hal::ArgKind::Ptr".to_string(),
        }
    }
}

impl fmt::Display for ParamType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.cpp())
    }
}

/// One kernel parameter.
#[derive(Clone, Debug)]
pub struct Param {
    pub name: String,
    pub ty: ParamType,
}

/// One kernel.
#[derive(Clone, Debug)]
pub struct Kernel {
    pub name: String,
    pub params: Vec<Param>,
}

/// The parsed manifest.
#[derive(Clone, Debug)]
pub struct Manifest {
    /// Kernel sources, absolute, in the order they are concatenated.
    pub sources: Vec<PathBuf>,
    pub kernels: Vec<Kernel>,
}

/// Most parameters `tandem_hal` launches with (`MAX_KERNEL_ARGS`).
const MAX_PARAMS: usize = 16;

fn is_c_identifier(s: &str) -> bool {
    s.chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn string<'a>(value: &'a Value, what: &str) -> Result<&'a str, String> {
    value
        .as_str()
        .ok_or_else(|| format!("{what} must be a string"))
}

fn array<'a>(value: Option<&'a Value>, what: &str) -> Result<&'a [Value], String> {
    value
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .ok_or_else(|| format!("{what} must be an array"))
}

fn parse_kernel(table: &Table) -> Result<Kernel, String> {
    let name = string(
        table.get("name").ok_or("a [[kernel]] has no `name`")?,
        "`name`",
    )?;
    if !is_c_identifier(name) {
        return Err(format!("kernel name `{name}` is not a C identifier"));
    }
    let mut params = Vec::new();
    for (i, pair) in array(table.get("params"), &format!("`params` of {name}"))?
        .iter()
        .enumerate()
    {
        let what = format!("parameter {i} of {name}");
        let pair = array(Some(pair), &what)?;
        let [pname, ty] = pair else {
            return Err(format!("{what} must be a [name, type] pair"));
        };
        let pname = string(pname, &what)?;
        if !is_c_identifier(pname) {
            return Err(format!("{what}: `{pname}` is not a C identifier"));
        }
        let ty = ParamType::parse(string(ty, &what)?).map_err(|e| format!("{what}: {e}"))?;
        params.push(Param {
            name: pname.to_string(),
            ty,
        });
    }
    if params.len() > MAX_PARAMS {
        return Err(format!(
            "{name} has {} parameters, at most {MAX_PARAMS} are launched",
            params.len()
        ));
    }
    Ok(Kernel {
        name: name.to_string(),
        params,
    })
}

impl Manifest {
    /// Reads and checks `path`; source paths are resolved against `base_dir`.
    pub fn load(path: &Path, base_dir: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("reading {}: {e}", path.display()))?;
        let root: Table = text
            .parse()
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let sources = array(root.get("sources"), "`sources`")?
            .iter()
            .map(|v| string(v, "a source").map(|s| base_dir.join(s)))
            .collect::<Result<Vec<_>, _>>()?;
        let kernels = array(root.get("kernel"), "`[[kernel]]`")?
            .iter()
            .map(|v| {
                v.as_table()
                    .ok_or_else(|| "`kernel` entries must be tables".to_string())
            })
            .map(|t| t.and_then(parse_kernel))
            .collect::<Result<Vec<_>, _>>()?;
        for (i, k) in kernels.iter().enumerate() {
            if kernels[..i].iter().any(|other| other.name == k.name) {
                return Err(format!("kernel `{}` is declared twice", k.name));
            }
        }
        Ok(Manifest { sources, kernels })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes `text` as a manifest in a fresh folder and loads it.
    fn load(text: &str) -> Result<Manifest, String> {
        let dir = std::env::temp_dir().join(format!(
            "tandem-kernel-build-manifest-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("kernels.toml");
        std::fs::write(&path, text).unwrap();
        let loaded = Manifest::load(&path, &dir);
        std::fs::remove_dir_all(&dir).unwrap();
        loaded
    }

    #[test]
    fn parses_kernels_and_resolves_sources_against_the_base_folder() {
        let m = load(
            "sources = [\"kernels/a.cu\"]\n\
             [[kernel]]\nname = \"ex_k\"\n\
             params = [[\"p\", \"const ArenaHeader*\"], [\"n\", \"u64\"], [\"c\", \"i32*\"]]\n",
        )
        .unwrap();
        assert!(m.sources[0].ends_with("kernels/a.cu") && m.sources[0].is_absolute());
        let k = &m.kernels[0];
        assert_eq!(k.name, "ex_k");
        let cpp: Vec<String> = k.params.iter().map(|p| p.ty.cpp()).collect();
        assert_eq!(
            cpp,
            ["const tandem::ArenaHeader*", "tandem::u64", "tandem::i32*"]
        );
        assert_eq!(k.params[1].ty.arg_kind(), "::tandem_hal::ArgKind::U64");
        assert_eq!(k.params[0].ty.arg_kind(), "::tandem_hal::ArgKind::Ptr");
    }

    #[test]
    fn bad_manifests_are_refused_with_a_message_naming_the_culprit() {
        let kernel = |name: &str, params: &str| {
            format!("sources = []\n[[kernel]]\nname = \"{name}\"\nparams = {params}\n")
        };
        let cases = [
            (kernel("2bad", "[]"), "`2bad` is not a C identifier"),
            (kernel("k", "[[\"x\", \"u16\"]]"), "parameter 0 of k: `u16`"),
            (kernel("k", "[[\"x\", \"a b*\"]]"), "must be one identifier"),
            (kernel("k", "[[\"x\"]]"), "must be a [name, type] pair"),
            (
                format!(
                    "{}{}",
                    kernel("k", "[]"),
                    "[[kernel]]\nname = \"k\"\nparams = []\n"
                ),
                "kernel `k` is declared twice",
            ),
            (
                "[[kernel]]\nname = \"k\"\nparams = []\n".to_string(),
                "`sources`",
            ),
        ];
        for (text, expected) in cases {
            let err = load(&text).unwrap_err();
            assert!(
                err.contains(expected),
                "{err:?} should mention {expected:?}"
            );
        }
        let many: Vec<String> = (0..=MAX_PARAMS)
            .map(|i| format!("[\"p{i}\", \"u32\"]"))
            .collect();
        let err = load(&kernel("k", &format!("[{}]", many.join(", ")))).unwrap_err();
        assert!(err.contains("at most 16"), "{err}");
    }
}
