//! Storage targets (RAM and file), their page allocators and the aligned buffers of the file
//! data path.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use parking_lot::Mutex;

use crate::config::TargetKind;
use crate::error::BlobError;
use crate::PAGE_SIZE;

/// Free page ranges of one target: start page -> page count, coalesced.
#[derive(Debug, Default)]
pub(crate) struct FreeList {
    ranges: BTreeMap<u64, u64>,
    free_pages: u64,
}

impl FreeList {
    /// A free list of `pages` pages minus the `used` ranges; `Err` names an overlap or overrun.
    pub(crate) fn from_used(pages: u64, mut used: Vec<(u64, u64)>) -> Result<FreeList, String> {
        used.sort_unstable();
        let mut fl = FreeList::default();
        let mut next = 0u64;
        for (start, len) in used {
            if start < next {
                return Err(format!("extent at page {start} overlaps another"));
            }
            let end = start.checked_add(len).filter(|&e| e <= pages);
            let Some(end) = end else {
                return Err(format!(
                    "extent {start}+{len} beyond the target's {pages} pages"
                ));
            };
            if start > next {
                fl.ranges.insert(next, start - next);
                fl.free_pages += start - next;
            }
            next = end;
        }
        if next < pages {
            fl.ranges.insert(next, pages - next);
            fl.free_pages += pages - next;
        }
        Ok(fl)
    }

    pub(crate) fn free_pages(&self) -> u64 {
        self.free_pages
    }

    /// Takes up to `want` pages: one run if some range is big enough (first fit), else runs
    /// from the lowest address up. Returns the runs taken (possibly fewer pages than asked).
    pub(crate) fn take(&mut self, want: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        if want == 0 {
            return out;
        }
        if let Some((&start, &len)) = self.ranges.iter().find(|(_, &l)| l >= want) {
            self.ranges.remove(&start);
            if len > want {
                self.ranges.insert(start + want, len - want);
            }
            self.free_pages -= want;
            out.push((start, want));
            return out;
        }
        let mut need = want;
        while need > 0 {
            let Some((&start, &len)) = self.ranges.iter().next() else {
                break;
            };
            self.ranges.remove(&start);
            let n = len.min(need);
            if len > n {
                self.ranges.insert(start + n, len - n);
            }
            self.free_pages -= n;
            out.push((start, n));
            need -= n;
        }
        out
    }

    /// Returns a run to the free list, merging it with its neighbours.
    pub(crate) fn give(&mut self, start: u64, len: u64) {
        if len == 0 {
            return;
        }
        let mut s = start;
        let mut l = len;
        if let Some((&ps, &pl)) = self.ranges.range(..start).next_back() {
            debug_assert!(ps + pl <= start, "double free of page {start}");
            if ps + pl == start {
                self.ranges.remove(&ps);
                s = ps;
                l += pl;
            }
        }
        if let Some(&nl) = self.ranges.get(&(start + len)) {
            self.ranges.remove(&(start + len));
            l += nl;
        }
        self.ranges.insert(s, l);
        self.free_pages += len;
    }
}

/// A zeroed heap buffer aligned to [`PAGE_SIZE`], as O_DIRECT needs.
pub(crate) struct AlignedBuf {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: AlignedBuf owns its allocation exclusively, like a Vec<u8>.
unsafe impl Send for AlignedBuf {}

impl AlignedBuf {
    /// A buffer of `len` bytes (a multiple of PAGE_SIZE, non-zero).
    pub(crate) fn new(len: usize) -> AlignedBuf {
        assert!(len > 0 && len % PAGE_SIZE as usize == 0);
        let layout = std::alloc::Layout::from_size_align(len, PAGE_SIZE as usize).expect("layout");
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        AlignedBuf { ptr, len }
    }
}

impl std::ops::Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr is a live, initialised allocation of len bytes owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl std::ops::DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in deref, and &mut self makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        let layout =
            std::alloc::Layout::from_size_align(self.len, PAGE_SIZE as usize).expect("layout");
        // SAFETY: allocated in new() with this very layout.
        unsafe { std::alloc::dealloc(self.ptr, layout) };
    }
}

/// An anonymous mapping of a RAM target's capacity.
pub(crate) struct RamArea {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain memory; who may touch which pages is governed by the store's
// page ownership (a writer owns freshly allocated pages alone; published pages are only read),
// which the unsafe accessors below require of their callers.
unsafe impl Send for RamArea {}
// SAFETY: see Send.
unsafe impl Sync for RamArea {}

impl RamArea {
    fn new(len: usize) -> io::Result<RamArea> {
        if len == 0 {
            return Ok(RamArea {
                ptr: std::ptr::NonNull::dangling().as_ptr(),
                len: 0,
            });
        }
        // SAFETY: an anonymous private mapping with no address hint; the result is checked.
        // MAP_NORESERVE: pages are committed as they are first written, not up front.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(RamArea { ptr: p.cast(), len })
    }

    /// The bytes of pages `page..page+n`.
    ///
    /// # Safety
    /// No one may write these pages while the slice lives.
    pub(crate) unsafe fn pages(&self, page: u64, n: u64) -> &[u8] {
        let (off, len) = self.span(page, n);
        // SAFETY: span() checked the range lies in the mapping; the caller excludes writers.
        unsafe { std::slice::from_raw_parts(self.ptr.add(off), len) }
    }

    /// The bytes of pages `page..page+n`, writable.
    ///
    /// # Safety
    /// The caller must own these pages alone (freshly allocated, not yet published) while the
    /// slice lives.
    #[allow(clippy::mut_from_ref)]
    pub(crate) unsafe fn pages_mut(&self, page: u64, n: u64) -> &mut [u8] {
        let (off, len) = self.span(page, n);
        // SAFETY: span() checked the range lies in the mapping; the caller owns the pages alone.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(off), len) }
    }

    fn span(&self, page: u64, n: u64) -> (usize, usize) {
        let off = (page * PAGE_SIZE) as usize;
        let len = (n * PAGE_SIZE) as usize;
        assert!(
            off.checked_add(len).is_some_and(|e| e <= self.len),
            "page range outside RAM target"
        );
        (off, len)
    }
}

impl Drop for RamArea {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: ptr/len are the mapping made in new(); no slice outlives the store.
            unsafe { libc::munmap(self.ptr.cast(), self.len) };
        }
    }
}

/// A file target's descriptors: O_DIRECT where the filesystem allows it, buffered always.
pub(crate) struct FileArea {
    pub(crate) path: PathBuf,
    buffered: File,
    direct: Option<File>,
}

impl FileArea {
    /// Opens (creating and preallocating on first use) a file of exactly `capacity` bytes.
    fn open(path: &Path, capacity: u64, try_direct: bool) -> Result<FileArea, BlobError> {
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

/// Where a target's bytes live.
pub(crate) enum Area {
    Ram(RamArea),
    File(FileArea),
    /// In the object target's bucket: no pages here (the store holds the tier itself).
    Object,
}

/// Most shards a target's free pages are split into.
const MAX_SHARDS: u64 = 16;
/// Fewest pages a shard holds.
const MIN_SHARD_PAGES: u64 = 256;

/// A target's free pages, split by address into shards, each a [`FreeList`]
/// under its own lock: a thread allocates from the shard its hint names
/// first and frees pages to the shard that owns them, so puts on different
/// threads rarely meet on one lock, and freed runs still coalesce within
/// their shard. Free-page counts are exact (the sum of the shards').
#[derive(Debug)]
pub(crate) struct FreePages {
    shards: Vec<Mutex<FreeList>>,
    /// Pages of every shard but possibly the last.
    shard_pages: u64,
}

impl FreePages {
    /// The free pages of a target of `pages` pages of which the `used`
    /// ranges are taken; `Err` names an overlap or overrun.
    pub(crate) fn from_used(pages: u64, used: Vec<(u64, u64)>) -> Result<FreePages, String> {
        let all = FreeList::from_used(pages, used)?;
        let count = (pages / MIN_SHARD_PAGES).clamp(1, MAX_SHARDS);
        let shard_pages = pages.div_ceil(count).max(1);
        let mut shards: Vec<FreeList> = (0..count).map(|_| FreeList::default()).collect();
        for (&start, &len) in &all.ranges {
            split(start, len, shard_pages, |shard, s, l| {
                shards[shard].give(s, l)
            });
        }
        Ok(FreePages {
            shards: shards.into_iter().map(Mutex::new).collect(),
            shard_pages,
        })
    }

    /// Free pages, over every shard.
    pub(crate) fn free_pages(&self) -> u64 {
        self.shards.iter().map(|s| s.lock().free_pages()).sum()
    }

    /// Takes up to `want` pages, from this thread's first shard on: runs as
    /// [`FreeList::take`] finds them, shard after shard (possibly fewer
    /// pages than asked).
    pub(crate) fn take(&self, want: u64) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let mut need = want;
        let first = thread_hint() % self.shards.len();
        for k in 0..self.shards.len() {
            if need == 0 {
                break;
            }
            let mut shard = self.shards[(first + k) % self.shards.len()].lock();
            for (start, n) in shard.take(need) {
                need -= n;
                out.push((start, n));
            }
        }
        out
    }

    /// Returns a run, each part to the shard that owns it.
    pub(crate) fn give(&self, start: u64, len: u64) {
        split(start, len, self.shard_pages, |shard, s, l| {
            self.shards[shard].lock().give(s, l)
        });
    }
}

/// Calls `f(shard, start, len)` for each part of the run `start..start+len`
/// that lies in one shard of `shard_pages` pages.
fn split(start: u64, len: u64, shard_pages: u64, mut f: impl FnMut(usize, u64, u64)) {
    let (mut s, end) = (start, start + len);
    while s < end {
        let shard = s / shard_pages;
        let e = end.min((shard + 1) * shard_pages);
        // Shard indices are below MAX_SHARDS.
        f(shard as usize, s, e - s);
        s = e;
    }
}

/// A small number per thread, spreading threads over the shards.
fn thread_hint() -> usize {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        // Relaxed: only needs to differ between threads, not to order anything.
        static HINT: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    HINT.with(|h| *h)
}

/// One configured target.
pub(crate) struct Target {
    pub(crate) kind: TargetKind,
    pub(crate) score: f32,
    pub(crate) pages: u64,
    /// Id in the metadata (file targets only).
    pub(crate) pid: Option<u32>,
    pub(crate) area: Area,
    pub(crate) free: FreePages,
}

impl Target {
    pub(crate) fn ram(pages: u64, score: f32) -> Result<Target, BlobError> {
        let len = usize::try_from(pages * PAGE_SIZE).map_err(|_| {
            BlobError::Config("RAM target capacity exceeds the address space".into())
        })?;
        let area = RamArea::new(len)
            .map_err(|e| BlobError::Config(format!("RAM target of {len} bytes: {e}")))?;
        Ok(Target {
            kind: TargetKind::Ram,
            score,
            pages,
            pid: None,
            area: Area::Ram(area),
            free: FreePages::from_used(pages, Vec::new()).expect("empty"),
        })
    }

    pub(crate) fn file(path: &Path, pages: u64, score: f32, pid: u32) -> Result<Target, BlobError> {
        let area = FileArea::open(path, pages * PAGE_SIZE, true)?;
        Ok(Target {
            kind: TargetKind::File,
            score,
            pages,
            pid: Some(pid),
            area: Area::File(area),
            // Set from the metadata once the store has read it.
            free: FreePages::from_used(pages, vec![(0, pages)]).expect("all used"),
        })
    }

    /// The object target's entry: no pages; its blobs live in the bucket.
    pub(crate) fn object(score: f32) -> Target {
        Target {
            kind: TargetKind::Object,
            score,
            pages: 0,
            pid: None,
            area: Area::Object,
            free: FreePages::from_used(0, Vec::new()).expect("empty"),
        }
    }

    /// Whether the target keeps pages across a restart (file targets; the object target has
    /// no pages).
    pub(crate) fn durable(&self) -> bool {
        self.kind == TargetKind::File
    }

    pub(crate) fn path(&self) -> Option<&Path> {
        match &self.area {
            Area::File(f) => Some(&f.path),
            Area::Ram(_) | Area::Object => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_list_takes_and_coalesces() {
        let mut fl = FreeList::from_used(10, vec![(2, 2), (6, 1)]).unwrap();
        assert_eq!(fl.free_pages(), 7);
        assert_eq!(fl.take(3), vec![(7, 3)]);
        assert_eq!(fl.take(4), vec![(0, 2), (4, 2)]);
        assert_eq!(fl.free_pages(), 0);
        fl.give(4, 2);
        fl.give(0, 2);
        fl.give(2, 2);
        assert_eq!(fl.ranges.len(), 1);
        assert_eq!(fl.take(6), vec![(0, 6)]);
        assert!(FreeList::from_used(4, vec![(0, 2), (1, 1)]).is_err());
        assert!(FreeList::from_used(4, vec![(3, 2)]).is_err());
    }

    #[test]
    fn free_pages_shard_by_address_and_count_exactly() {
        let pages = 16 * MIN_SHARD_PAGES;
        let fp = FreePages::from_used(pages, vec![(10, 5), (MIN_SHARD_PAGES - 2, 4)]).unwrap();
        assert_eq!(fp.shards.len(), 16);
        assert_eq!(fp.free_pages(), pages - 9);
        // A run across a shard boundary goes back to both shards.
        fp.give(MIN_SHARD_PAGES - 2, 4);
        assert_eq!(fp.free_pages(), pages - 5);
        // Everything can be taken, shard after shard, and given back.
        let runs = fp.take(pages);
        assert_eq!(runs.iter().map(|r| r.1).sum::<u64>(), pages - 5);
        assert_eq!(fp.free_pages(), 0);
        for (s, n) in runs {
            fp.give(s, n);
        }
        assert_eq!(fp.free_pages(), pages - 5);
        let small = FreePages::from_used(3, vec![]).unwrap();
        assert_eq!((small.shards.len(), small.free_pages()), (1, 3));
        assert_eq!(small.take(5), vec![(0, 3)]);
    }

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
