//! A put's context: whether and how to compress its bytes, and the blob's minimum persistence
//! level; beside the placement score. The default context is the store's behaviour before
//! contexts existed: no compression, and the class placement picks. See the crate docs,
//! "Put contexts".

use std::fmt;
use std::str::FromStr;

use crate::wire;

/// What a put asks of the store besides its bytes and score.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PutContext {
    /// Whether and how to compress the put's bytes.
    pub compression: Compression,
    /// The least the blob must survive.
    pub persistence: Persistence,
}

/// Whether a put compresses its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Compression {
    /// Store the bytes as they are.
    #[default]
    Skip,
    /// Compress every frame (a frame that does not shrink by a page is still stored raw).
    Static(Codec, Preset),
    /// Compress a sample of the put's bytes first: when it does not shrink enough, the whole
    /// put is stored raw; else as [`Compression::Static`].
    Dynamic(Codec, Preset),
}

/// A compression library.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Codec {
    /// LZ4 (the `lz4_flex` crate): fastest, one level (the preset does not change it).
    Lz4,
    /// Zstandard (the `zstd` crate).
    Zstd,
}

/// How hard a codec tries: zstd levels 1, 3 and 19.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Preset {
    /// Fastest.
    Fast,
    /// The library's default trade.
    #[default]
    Balanced,
    /// Smallest output, slowest.
    Best,
}

/// A blob's persistence level: what it survives. A put asks for a minimum; the blob may get
/// more (see the crate docs, "Durability and persistence").
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum Persistence {
    /// Survives nothing: gone after a restart (RAM; or any target, which may keep it longer).
    #[default]
    Volatile,
    /// Survives a crash of the process (a file target, no sync per put), not a power loss:
    /// dropped at the first open after a reboot.
    Temporary,
    /// Survives a power loss: acknowledged only once synced (a file target, or the object
    /// tier).
    LongTerm,
}

impl fmt::Display for Codec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Codec::Lz4 => "lz4",
            Codec::Zstd => "zstd",
        })
    }
}

impl fmt::Display for Preset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Preset::Fast => "fast",
            Preset::Balanced => "balanced",
            Preset::Best => "best",
        })
    }
}

impl fmt::Display for Persistence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Persistence::Volatile => "volatile",
            Persistence::Temporary => "temporary",
            Persistence::LongTerm => "long-term",
        })
    }
}

impl fmt::Display for Compression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Compression::Skip => f.write_str("none"),
            Compression::Static(c, p) => write!(f, "{c}:{p}"),
            Compression::Dynamic(c, p) => write!(f, "dynamic:{c}:{p}"),
        }
    }
}

impl FromStr for Persistence {
    type Err = String;

    /// `volatile`, `temporary` or `long-term`.
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "volatile" => Ok(Persistence::Volatile),
            "temporary" => Ok(Persistence::Temporary),
            "long-term" => Ok(Persistence::LongTerm),
            _ => Err(format!(
                "persistence {s:?}: use volatile, temporary or long-term"
            )),
        }
    }
}

impl FromStr for Compression {
    type Err = String;

    /// `none`, or `[dynamic:]CODEC[:PRESET]`: `zstd`, `lz4:fast`, `dynamic:zstd:best`.
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "none" {
            return Ok(Compression::Skip);
        }
        let (dynamic, rest) = match s.strip_prefix("dynamic:") {
            Some(rest) => (true, rest),
            None => (false, s),
        };
        let (codec, preset) = rest.split_once(':').unwrap_or((rest, "balanced"));
        let codec = match codec {
            "zstd" => Codec::Zstd,
            "lz4" => Codec::Lz4,
            _ => return Err(format!("compression {s:?}: the codec is zstd or lz4")),
        };
        let preset = match preset {
            "fast" => Preset::Fast,
            "balanced" => Preset::Balanced,
            "best" => Preset::Best,
            _ => {
                return Err(format!(
                    "compression {s:?}: the preset is fast, balanced or best"
                ))
            }
        };
        Ok(if dynamic {
            Compression::Dynamic(codec, preset)
        } else {
            Compression::Static(codec, preset)
        })
    }
}

impl PutContext {
    /// The context as the wire carries it.
    pub fn to_wire(self) -> wire::PutContext {
        let (compress, codec, preset) = match self.compression {
            Compression::Skip => (wire::compress::SKIP, 0, Preset::default()),
            Compression::Static(c, p) => (wire::compress::STATIC, c.to_wire(), p),
            Compression::Dynamic(c, p) => (wire::compress::DYNAMIC, c.to_wire(), p),
        };
        wire::PutContext {
            compress,
            codec,
            preset: match preset {
                Preset::Balanced => wire::preset::BALANCED,
                Preset::Fast => wire::preset::FAST,
                Preset::Best => wire::preset::BEST,
            },
            persistence: self.persistence.to_wire(),
        }
    }

    /// The context the wire carried; for a value no context has, which field holds which
    /// value (the pool answers [`crate::BlobError::BadContext`] with it).
    pub fn from_wire(w: wire::PutContext) -> Result<PutContext, String> {
        let bad = |what: &str, v: u8| format!("{what} {v}");
        let preset = match w.preset {
            wire::preset::BALANCED => Preset::Balanced,
            wire::preset::FAST => Preset::Fast,
            wire::preset::BEST => Preset::Best,
            v => return Err(bad("preset", v)),
        };
        let codec = || Codec::from_wire(w.codec).ok_or_else(|| bad("codec", w.codec));
        let compression = match w.compress {
            wire::compress::SKIP => Compression::Skip,
            wire::compress::STATIC => Compression::Static(codec()?, preset),
            wire::compress::DYNAMIC => Compression::Dynamic(codec()?, preset),
            v => return Err(bad("compression mode", v)),
        };
        let persistence = Persistence::from_wire(w.persistence)
            .ok_or_else(|| bad("persistence", w.persistence))?;
        Ok(PutContext {
            compression,
            persistence,
        })
    }
}

impl Codec {
    /// Its [`wire::codec`] value.
    pub fn to_wire(self) -> u8 {
        match self {
            Codec::Lz4 => wire::codec::LZ4,
            Codec::Zstd => wire::codec::ZSTD,
        }
    }

    /// The codec of a [`wire::codec`] value; `None` for a value no codec has.
    pub fn from_wire(value: u8) -> Option<Codec> {
        match value {
            wire::codec::LZ4 => Some(Codec::Lz4),
            wire::codec::ZSTD => Some(Codec::Zstd),
            _ => None,
        }
    }
}

impl Persistence {
    /// Its [`wire::persistence`] value.
    pub fn to_wire(self) -> u8 {
        match self {
            Persistence::Volatile => wire::persistence::VOLATILE,
            Persistence::Temporary => wire::persistence::TEMPORARY,
            Persistence::LongTerm => wire::persistence::LONG_TERM,
        }
    }

    /// The level of a [`wire::persistence`] value; `None` for a value no
    /// level has.
    pub fn from_wire(value: u8) -> Option<Persistence> {
        match value {
            wire::persistence::VOLATILE => Some(Persistence::Volatile),
            wire::persistence::TEMPORARY => Some(Persistence::Temporary),
            wire::persistence::LONG_TERM => Some(Persistence::LongTerm),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_it_prints_and_crosses_the_wire() {
        for s in ["none", "zstd:fast", "lz4:balanced", "dynamic:zstd:best"] {
            let c: Compression = s.parse().unwrap();
            assert_eq!(c.to_string(), s);
            for persistence in [
                Persistence::Volatile,
                Persistence::Temporary,
                Persistence::LongTerm,
            ] {
                let ctx = PutContext {
                    compression: c,
                    persistence,
                };
                assert_eq!(PutContext::from_wire(ctx.to_wire()).unwrap(), ctx);
                assert_eq!(persistence.to_string().parse(), Ok(persistence));
            }
        }
        assert_eq!(
            "zstd".parse(),
            Ok(Compression::Static(Codec::Zstd, Preset::Balanced))
        );
        assert!("gzip".parse::<Compression>().is_err());
        assert!("zstd:max".parse::<Compression>().is_err());
        assert!("forever".parse::<Persistence>().is_err());
        // The zero context is the default one: a kernel's `PutContext{}`.
        let zero = wire::PutContext {
            compress: 0,
            codec: 0,
            preset: 0,
            persistence: 0,
        };
        assert_eq!(PutContext::from_wire(zero).unwrap(), PutContext::default());
        let bad = wire::PutContext {
            compress: wire::compress::STATIC,
            ..zero
        };
        assert_eq!(PutContext::from_wire(bad), Err("codec 0".to_owned()));
    }
}
