//! Extents and versions: a blob's bytes as runs of logical pages mapped to physical pages of a
//! target, and the version (size, class, extent map) that a put publishes whole.

use crate::types::{BlobStat, TagId};

/// Logical pages `lpage..lpage+npages` of a blob, on pages `ppage..` of target `target` (an
/// index into the store's targets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Extent {
    pub(crate) lpage: u64,
    pub(crate) npages: u64,
    pub(crate) target: usize,
    pub(crate) ppage: u64,
}

/// One published version of a blob. Its pages are never written while it is published.
#[derive(Debug)]
pub(crate) struct Version {
    pub(crate) size: u64,
    pub(crate) durable: bool,
    /// Sorted by `lpage`, non-overlapping; missing pages are holes.
    pub(crate) extents: Vec<Extent>,
}

impl Version {
    /// The version's description as blob `name` of `tag`.
    pub(crate) fn describe(&self, tag: TagId, name: &str) -> BlobStat {
        BlobStat {
            tag,
            name: name.to_owned(),
            size: self.size,
            durable: self.durable,
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

/// Splits `extents` around logical pages `p0..p1`: (the extents outside, the pieces inside).
fn cut(extents: &[Extent], p0: u64, p1: u64) -> (Vec<Extent>, Vec<Extent>) {
    let mut keep = Vec::with_capacity(extents.len() + 1);
    let mut gone = Vec::new();
    for &e in extents {
        let e_end = e.lpage + e.npages;
        if e_end <= p0 || e.lpage >= p1 {
            keep.push(e);
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
        });
        if e_end > p1 {
            keep.push(Extent {
                lpage: p1,
                npages: e_end - p1,
                target: e.target,
                ppage: e.ppage + (p1 - e.lpage),
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
            if last.target == e.target
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
