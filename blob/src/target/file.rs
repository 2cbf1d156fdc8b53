//! A file target's bytes: the preallocated file, made whole before it is used, its descriptors
//! (`O_DIRECT` where the filesystem allows it, buffered always) and the handle the committer
//! syncs.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use crate::error::BlobError;
use crate::PAGE_SIZE;

/// A file target's descriptors: O_DIRECT where the filesystem allows it, buffered always.
pub(crate) struct FileArea {
    pub(crate) path: PathBuf,
    buffered: File,
    direct: Option<File>,
}

impl FileArea {
    /// Opens (creating and preallocating on first use) a file of exactly `capacity` bytes.
    pub(super) fn open(
        path: &Path,
        capacity: u64,
        try_direct: bool,
    ) -> Result<FileArea, BlobError> {
        let create_err = |source| BlobError::TargetCreate {
            path: path.to_owned(),
            source,
        };
        if !path.exists() {
            create(path, capacity).map_err(create_err)?;
        }
        let buffered = OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(create_err)?;
        let actual = buffered.metadata().map_err(create_err)?.len();
        if actual != capacity {
            return Err(BlobError::TargetSize {
                path: path.to_owned(),
                expected: capacity,
                actual,
            });
        }
        if !try_direct {
            return Ok(FileArea {
                path: path.to_owned(),
                buffered,
                direct: None,
            });
        }
        let direct = match OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_DIRECT)
            .open(path)
        {
            Ok(f) => Some(f),
            Err(err) => {
                tracing::info!(path = %path.display(), %err, "O_DIRECT refused; using buffered I/O");
                None
            }
        };
        Ok(FileArea {
            path: path.to_owned(),
            buffered,
            direct,
        })
    }

    pub(crate) fn direct_io(&self) -> bool {
        self.direct.is_some()
    }

    fn io_err(&self, source: io::Error) -> BlobError {
        BlobError::TargetIo {
            path: self.path.clone(),
            source,
        }
    }

    /// Writes whole pages from an aligned buffer (so O_DIRECT's alignment always holds).
    pub(crate) fn write_pages(&self, page: u64, buf: &[u8]) -> Result<(), BlobError> {
        let off = page * PAGE_SIZE;
        if let Some(d) = &self.direct {
            match d.write_all_at(buf, off) {
                Ok(()) => return Ok(()),
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
                Err(e) => return Err(self.io_err(e)),
            }
        }
        self.buffered
            .write_all_at(buf, off)
            .map_err(|e| self.io_err(e))
    }

    /// The descriptor for io_uring writes of whole aligned pages: O_DIRECT where available.
    pub(crate) fn fd_for_io(&self) -> std::os::unix::io::RawFd {
        self.direct.as_ref().unwrap_or(&self.buffered).as_raw_fd()
    }

    /// Writes the rest of a short write at byte offset `off`, buffered (no alignment needed).
    pub(crate) fn write_tail(&self, off: u64, buf: &[u8]) -> Result<(), BlobError> {
        self.buffered
            .write_all_at(buf, off)
            .map_err(|e| self.io_err(e))
    }

    /// Reads whole pages into an aligned buffer.
    pub(crate) fn read_pages(&self, page: u64, buf: &mut [u8]) -> Result<(), BlobError> {
        let off = page * PAGE_SIZE;
        if let Some(d) = &self.direct {
            match d.read_exact_at(buf, off) {
                Ok(()) => return Ok(()),
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
                Err(e) => return Err(self.io_err(e)),
            }
        }
        self.buffered
            .read_exact_at(buf, off)
            .map_err(|e| self.io_err(e))
    }

    /// A descriptor of the file for the committer's fdatasync.
    pub(crate) fn sync_handle(&self) -> Result<SyncHandle, BlobError> {
        let file = self.buffered.try_clone().map_err(|e| self.io_err(e))?;
        Ok(SyncHandle {
            path: self.path.clone(),
            file,
        })
    }
}

/// What the committer syncs: one file target's descriptor.
pub(crate) struct SyncHandle {
    path: PathBuf,
    file: File,
}

impl SyncHandle {
    /// fdatasync: written pages reach the device before the metadata that points at them.
    pub(crate) fn sync(&self) -> Result<(), BlobError> {
        self.file.sync_data().map_err(|source| BlobError::TargetIo {
            path: self.path.clone(),
            source,
        })
    }
}

/// Creates a target file of `capacity` bytes, preallocated ([`create_whole`]).
fn create(path: &Path, capacity: u64) -> io::Result<()> {
    create_whole(path, |tmp| {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(tmp)?;
        if capacity > 0 {
            let len = libc::off_t::try_from(capacity)
                .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
            // SAFETY: a valid open descriptor; posix_fallocate returns an errno value.
            let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len) };
            if rc == libc::EOPNOTSUPP || rc == libc::EINVAL {
                // A filesystem without fallocate still gets a file of the right size.
                tracing::info!(path = %path.display(), "fallocate refused; sizing the file sparse");
                file.set_len(capacity)?;
            } else if rc != 0 {
                return Err(io::Error::from_raw_os_error(rc));
            }
        }
        file.sync_all()
    })
}

/// Makes the file at `path` with `make`, which writes it whole (and durable) at the temporary
/// path it is given (`<path>.creating`, whatever an earlier attempt left there replaced), then
/// renames it into place and syncs the folder: a crash while making it leaves nothing half-made
/// at `path`. Returns what `make` returned (an open handle follows the file through the rename).
pub(crate) fn create_whole<T>(
    path: &Path,
    make: impl FnOnce(&Path) -> io::Result<T>,
) -> io::Result<T> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".creating");
    let tmp = PathBuf::from(tmp);
    let result = make(&tmp).and_then(|made| {
        std::fs::rename(&tmp, path)?;
        // The new directory entry must survive a crash as well as the file's contents.
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            File::open(dir)?.sync_all()?;
        }
        Ok(made)
    });
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::AlignedBuf;

    #[test]
    fn file_area_direct_and_buffered_round_trip() {
        for dir in [
            tempfile::tempdir().unwrap(),
            tempfile::tempdir_in("/dev/shm").unwrap(),
        ] {
            for try_direct in [true, false] {
                let path = dir.path().join(format!("f{try_direct}"));
                let f = FileArea::open(&path, 8 * PAGE_SIZE, try_direct).unwrap();
                assert!(try_direct || !f.direct_io());
                let mut buf = AlignedBuf::new(2 * PAGE_SIZE as usize);
                buf.iter_mut().enumerate().for_each(|(i, b)| *b = i as u8);
                f.write_pages(3, &buf).unwrap();
                f.sync_handle().unwrap().sync().unwrap();
                let mut back = AlignedBuf::new(2 * PAGE_SIZE as usize);
                f.read_pages(3, &mut back).unwrap();
                assert_eq!(&back[..], &buf[..]);
                // Past the end of the file: an error, not a short read.
                assert!(f.read_pages(7, &mut back).is_err());
            }
        }
    }
}
