//! Extents and versions: a blob's bytes as runs of logical pages mapped to physical pages of a
//! target (raw, or one compressed frame), and the version (size, class, extent map) that a put
//! publishes whole.

use crate::compress::Packed;
use crate::context::{Codec, Persistence};
use crate::types::{BlobStat, TagId, PAGE_SIZE};

/// Logical pages `lpage..lpage+npages` of a blob, on target `target` (an index into the store's
/// targets) from page `ppage` on: raw, one physical page a logical page, or (`packed`) one
/// compressed frame in [`Packed::pages`] pages. A packed extent is never cut: a put that
/// touches it rewrites all of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Extent {
    pub(crate) lpage: u64,
    pub(crate) npages: u64,
    pub(crate) target: usize,
    pub(crate) ppage: u64,
    pub(crate) packed: Option<Packed>,
}

impl Extent {
    /// The physical pages it takes.
    pub(crate) fn ppages(&self) -> u64 {
        self.packed.map_or(self.npages, |p| p.pages())
    }

    /// Where its logical pages end.
    pub(crate) fn lend(&self) -> u64 {
        self.lpage + self.npages
    }
}

/// One published version of a blob. Its pages are never written while it is published.
#[derive(Debug)]
pub(crate) struct Version {
    pub(crate) size: u64,
    /// The blob's class: volatile (RAM), temporary or long-term (file targets).
    pub(crate) class: Persistence,
    /// Sorted by `lpage`, non-overlapping; missing pages are holes.
    pub(crate) extents: Vec<Extent>,
}

impl Version {
    /// The version's description as blob `name` of `tag`.
    pub(crate) fn describe(&self, tag: TagId, name: &str) -> BlobStat {
        let mut codecs: Vec<Codec> = self
            .extents
            .iter()
            .filter_map(|e| e.packed.map(|p| p.codec))
            .collect();
        codecs.sort_unstable();
        codecs.dedup();
        BlobStat {
            tag,
            name: name.to_owned(),
            size: self.size,
            stored: self.extents.iter().map(Extent::ppages).sum::<u64>() * PAGE_SIZE,
            codecs,
            durable: self.class != Persistence::Volatile,
            persistence: self.class,
            targets: targets_of(&self.extents),
        }
    }
}

/// The targets `extents` lie on, ascending, each once.
pub(crate) fn targets_of(extents: &[Extent]) -> Vec<usize> {
    let mut targets: Vec<usize> = extents.iter().map(|e| e.target).collect();
    targets.sort_unstable();
    targets.dedup();
    targets
}

/// The extents of a version whose logical pages `p0..p1` are `fresh` and the rest as in `old`,
/// merged; with the pieces of `old` that `fresh` replaces.
pub(crate) fn replace_range(
    old: &[Extent],
    fresh: &[Extent],
    p0: u64,
    p1: u64,
) -> (Vec<Extent>, Vec<Extent>) {
    let (mut extents, replaced) = cut(old, p0, p1);
    extents.extend_from_slice(fresh);
    extents.sort_unstable_by_key(|e| e.lpage);
    (merge(extents), replaced)
}

/// Widens logical pages `p0..p1` to cover whole every packed extent of `extents` they touch.
pub(crate) fn cover_packed(extents: &[Extent], p0: u64, p1: u64) -> (u64, u64) {
    let (mut a, mut b) = (p0, p1);
    for e in extents.iter().filter(|e| e.packed.is_some()) {
        if e.lend() > p0 && e.lpage < p1 {
            a = a.min(e.lpage);
            b = b.max(e.lend());
        }
    }
    (a, b)
}

/// Splits `extents` around logical pages `p0..p1`: (the extents outside, the pieces inside).
/// A packed extent the range touches lies wholly inside it ([`cover_packed`]).
fn cut(extents: &[Extent], p0: u64, p1: u64) -> (Vec<Extent>, Vec<Extent>) {
    let mut keep = Vec::with_capacity(extents.len() + 1);
    let mut gone = Vec::new();
    for &e in extents {
        let e_end = e.lend();
        if e_end <= p0 || e.lpage >= p1 {
            keep.push(e);
            continue;
        }
        if e.packed.is_some() {
            debug_assert!(e.lpage >= p0 && e_end <= p1, "a packed extent cut");
            gone.push(e);
            continue;
        }
        if e.lpage < p0 {
            keep.push(Extent {
                npages: p0 - e.lpage,
                ..e
            });
        }
        let a = e.lpage.max(p0);
        let b = e_end.min(p1);
        gone.push(Extent {
            lpage: a,
            npages: b - a,
            target: e.target,
            ppage: e.ppage + (a - e.lpage),
            packed: None,
        });
        if e_end > p1 {
            keep.push(Extent {
                lpage: p1,
                npages: e_end - p1,
                target: e.target,
                ppage: e.ppage + (p1 - e.lpage),
                packed: None,
            });
        }
    }
    (keep, gone)
}

/// Joins extents that continue each other logically and physically on one target.
fn merge(sorted: Vec<Extent>) -> Vec<Extent> {
    let mut out: Vec<Extent> = Vec::with_capacity(sorted.len());
    for e in sorted {
        if let Some(last) = out.last_mut() {
            if last.packed.is_none()
                && e.packed.is_none()
                && last.target == e.target
                && last.lpage + last.npages == e.lpage
                && last.ppage + last.npages == e.ppage
            {
                last.npages += e.npages;
                continue;
            }
        }
        out.push(e);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_and_merge() {
        let e = |lpage, npages, ppage| Extent {
            lpage,
            npages,
            target: 0,
            ppage,
            packed: None,
        };
        let (keep, gone) = cut(&[e(0, 10, 100)], 3, 5);
        assert_eq!(keep, vec![e(0, 3, 100), e(5, 5, 105)]);
        assert_eq!(gone, vec![e(3, 2, 103)]);
        assert_eq!(
            merge(vec![e(0, 3, 100), e(3, 2, 103), e(5, 5, 105)]),
            vec![e(0, 10, 100)]
        );
        assert_eq!(merge(vec![e(0, 3, 100), e(3, 2, 200)]).len(), 2);
    }
}
