//! A target's free pages: which pages of a RAM or file target no published version and no put
//! in progress holds, split into shards so that puts on different threads rarely meet on a lock.

use std::collections::BTreeMap;

use parking_lot::Mutex;

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
}
