//! `tandem blob put`'s input: a file, or a stream (standard input as `-`,
//! a pipe, a device), which the store takes in chunks so that a large one
//! never sits whole in memory.

use std::fs::File;
use std::io::{ErrorKind, Read, Seek};
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::path::Path;

use tandem_blob::FillError;

use super::error::{AccessError, PutError};
use crate::progress::Progress;

/// The input `-` names: standard input.
pub(super) const STDIN: &str = "-";

/// What a put reads.
pub(super) struct Input {
    file: File,
    /// How messages name it.
    shown: String,
    /// A regular file's bytes from where it was positioned (stdin
    /// redirected from a file may start past the beginning): where they
    /// start and how many. `None` for a stream, whose length is unknown.
    sized: Option<(u64, u64)>,
    /// What the blob can take: a stream that holds more is refused there.
    most: u64,
    /// A stream's first byte, read by [`open`](Self::open) to refuse an
    /// empty stream before the store is reached; given back by the first
    /// chunk.
    ahead: Option<u8>,
    /// Counts the bytes read, for the bar on a terminal.
    progress: Progress,
}

impl Input {
    /// Opens `path` (`-`: standard input) for a put of at most `most`
    /// bytes: a regular file longer than that is refused here, a stream
    /// once it has given more. An empty input is refused here (the store
    /// keeps no empty blob), a stream once it ends before its first byte.
    pub(super) fn open(path: &Path, most: u64) -> Result<Input, String> {
        let (file, shown) = if path == Path::new(STDIN) {
            let fd = std::io::stdin()
                .as_fd()
                .try_clone_to_owned()
                .map_err(|e| format!("standard input: {e}"))?;
            (File::from(fd), "standard input".to_string())
        } else {
            let file = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
            (file, path.display().to_string())
        };
        let metadata = file.metadata().map_err(|e| format!("{shown}: {e}"))?;
        if metadata.is_dir() {
            return Err(format!("{shown} is a directory"));
        }
        let sized = if metadata.is_file() {
            let start = (&file)
                .stream_position()
                .map_err(|e| format!("{shown}: {e}"))?;
            let len = metadata.len().saturating_sub(start);
            if len > most {
                return Err(too_much(&shown, most));
            }
            if len == 0 {
                return Err(empty(path));
            }
            Some((start, len))
        } else {
            None
        };
        let mut input = Input {
            file,
            shown,
            sized,
            most,
            ahead: None,
            progress: Progress::off(),
        };
        if input.sized.is_none() {
            let mut first = [0u8];
            match input.read_chunk(&mut first).map_err(|e| e.to_string())? {
                0 => return Err(empty(path)),
                _ => input.ahead = Some(first[0]),
            }
        }
        Ok(input)
    }

    /// Shows the bytes read on `progress`.
    pub(super) fn with_progress(mut self, progress: Progress) -> Input {
        self.progress = progress;
        self
    }

    /// A regular file's length; `None` for a stream.
    pub(super) fn len(&self) -> Option<u64> {
        self.sized.map(|(_, len)| len)
    }

    /// Reads `dst.len()` bytes at `at` of a regular file: the fill of a
    /// put that takes the file whole.
    pub(super) fn read_at(&self, at: u64, dst: &mut [u8]) -> Result<(), FillError> {
        let start = self.sized.map_or(0, |(start, _)| start);
        self.file
            .read_exact_at(dst, start + at)
            .map_err(|e| FillError(format!("reading {}: {e}", self.shown)))?;
        self.progress.add(dst.len() as u64);
        Ok(())
    }

    /// Hands the input to `put(at, bytes)` in order, in chunks of at most
    /// `chunk` bytes (`at`: where in the input they start). The bytes put.
    pub(super) fn put_in_chunks(
        &mut self,
        chunk: usize,
        mut put: impl FnMut(u64, &[u8]) -> Result<(), AccessError>,
    ) -> Result<u64, PutError> {
        let mut staging = vec![0u8; chunk];
        let mut written = 0u64;
        loop {
            let failed = |error| PutError { written, error };
            let n = self.read_chunk(&mut staging).map_err(failed)?;
            if written + n as u64 > self.most {
                let error = AccessError::Failed(too_much(&self.shown, self.most));
                return Err(failed(error));
            }
            // The first chunk holds at least the byte read ahead (`open`
            // refused an empty input): an empty chunk is the end.
            if n == 0 {
                return Ok(written);
            }
            put(written, &staging[..n]).map_err(failed)?;
            written += n as u64;
            if n < chunk {
                return Ok(written);
            }
        }
    }

    /// Fills `buf` from the input (after the byte read ahead, if any),
    /// short only at its end.
    fn read_chunk(&mut self, buf: &mut [u8]) -> Result<usize, AccessError> {
        let mut filled = 0;
        if let (Some(byte), Some(first)) = (self.ahead, buf.first_mut()) {
            *first = byte;
            self.ahead = None;
            filled = 1;
            self.progress.add(1);
        }
        while filled < buf.len() {
            match self.file.read(&mut buf[filled..]) {
                Ok(0) => break,
                Ok(n) => {
                    filled += n;
                    self.progress.add(n as u64);
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(AccessError::Failed(format!("reading {}: {e}", self.shown)));
                }
            }
        }
        Ok(filled)
    }
}

/// The input `path` names was empty, in words.
fn empty(path: &Path) -> String {
    let what = if path == Path::new(STDIN) {
        format!("FILE `{STDIN}`: standard input was empty (closed before its first byte)")
    } else {
        format!("FILE {} is empty", path.display())
    };
    format!("{what}; the store keeps no empty blobs: a put needs at least one byte")
}

fn too_much(shown: &str, most: u64) -> String {
    format!("{shown} holds more than the {most} bytes this blob can take")
}
