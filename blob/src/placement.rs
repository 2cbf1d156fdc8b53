//! Placement: the order in which a put tries the targets for its score among those that can
//! keep its persistence level, and reserving its pages on targets of one class (file or RAM),
//! all or nothing. See the crate docs, "Placement" and "Durability and persistence".

use crate::config::TargetKind;
use crate::context::Persistence;
use crate::error::BlobError;
use crate::extent::Extent;
use crate::target::Target;
use crate::types::PAGE_SIZE;

/// Pages reserved for a put, on targets of one class, in placement order.
pub(crate) struct Reservation {
    /// Whether the pages are on file targets (durable) or RAM targets (volatile).
    pub(crate) durable: bool,
    runs: Vec<Run>,
}

/// `npages` pages from page `ppage` of target `target`.
#[derive(Clone, Copy)]
struct Run {
    target: usize,
    ppage: u64,
    npages: u64,
}

impl Reservation {
    /// `n` consecutive pages of one target from the front of what is left, as (target, first
    /// page); `None` (nothing taken) when the front run has fewer.
    pub(crate) fn take_contiguous(&mut self, n: u64) -> Option<(usize, u64)> {
        let run = self.runs.first_mut().filter(|r| r.npages >= n)?;
        let at = (run.target, run.ppage);
        run.ppage += n;
        run.npages -= n;
        if run.npages == 0 {
            self.runs.remove(0);
        }
        Some(at)
    }

    /// `n` pages from the front of what is left (there must be that many), as the raw extents
    /// of consecutive logical pages from `lpage` on.
    pub(crate) fn take_extents(&mut self, mut lpage: u64, mut n: u64) -> Vec<Extent> {
        let mut extents = Vec::new();
        while n > 0 {
            let run = &mut self.runs[0];
            let k = run.npages.min(n);
            extents.push(Extent {
                lpage,
                npages: k,
                target: run.target,
                ppage: run.ppage,
                packed: None,
            });
            run.ppage += k;
            run.npages -= k;
            if run.npages == 0 {
                self.runs.remove(0);
            }
            lpage += k;
            n -= k;
        }
        extents
    }

    /// Gives back to their targets the pages not taken.
    pub(crate) fn give_back(self, targets: &[Target]) {
        for run in self.runs {
            targets[run.target].free.give(run.ppage, run.npages);
        }
    }
}

/// Whether target `t` can keep a blob at `level`: any target a volatile one, file and object
/// targets the others.
pub(crate) fn keeps(t: &Target, level: Persistence) -> bool {
    level == Persistence::Volatile || t.kind != TargetKind::Ram
}

/// Target indices in placement order for `score` (`None`: automatic), among those that keep
/// `level`. On equal scores the object target comes last: it is the slowest tier.
pub(crate) fn candidates(targets: &[Target], score: Option<f32>, level: Persistence) -> Vec<usize> {
    let mut all: Vec<usize> = (0..targets.len())
        .filter(|&i| keeps(&targets[i], level))
        .collect();
    let sc = |i: usize| targets[i].score;
    let obj = |i: usize| targets[i].kind == TargetKind::Object;
    match score {
        None => {
            all.sort_by(|&a, &b| sc(b).total_cmp(&sc(a)).then(obj(a).cmp(&obj(b))));
            all
        }
        Some(s) => {
            let (mut below, mut above): (Vec<usize>, Vec<usize>) =
                all.into_iter().partition(|&i| sc(i) <= s);
            below.sort_by(|&a, &b| sc(b).total_cmp(&sc(a)).then(obj(a).cmp(&obj(b))));
            above.sort_by(|&a, &b| sc(a).total_cmp(&sc(b)).then(obj(a).cmp(&obj(b))));
            below.extend(above);
            below
        }
    }
}

/// Reserves `npages` pages on the local targets that keep `level`, of one class (`true`: file
/// targets, `false`: RAM): `class` (the blob's) if it has one, else the first class, in
/// placement order for `score`, that can hold them all. All or nothing: [`BlobError::NoSpace`]
/// when no class may.
pub(crate) fn reserve(
    targets: &[Target],
    npages: u64,
    score: Option<f32>,
    level: Persistence,
    class: Option<bool>,
) -> Result<Reservation, BlobError> {
    let mut cands = candidates(targets, score, level);
    cands.retain(|&i| targets[i].kind != TargetKind::Object);
    let mut available = 0;
    for durable in classes(targets, &cands, class) {
        let of_class = || cands.iter().filter(|&&i| targets[i].durable() == durable);
        if let Some(runs) = reserve_on(targets, of_class(), npages) {
            return Ok(Reservation { durable, runs });
        }
        // Counted only for the error: every shard's lock, once.
        let free: u64 = of_class().map(|&i| targets[i].free.free_pages()).sum();
        available = available.max(free * PAGE_SIZE);
    }
    Err(BlobError::NoSpace {
        requested: npages.saturating_mul(PAGE_SIZE),
        available,
    })
}

/// The classes a put may use, in the order their targets first appear among `cands`: only
/// `class` when the blob has one.
fn classes(targets: &[Target], cands: &[usize], class: Option<bool>) -> Vec<bool> {
    let mut classes = Vec::new();
    for &i in cands {
        let d = targets[i].durable();
        if class.is_none_or(|c| c == d) && !classes.contains(&d) {
            classes.push(d);
        }
    }
    classes
}

/// Takes `npages` pages from the targets `order` names, in that order; `None`, with whatever
/// was taken given back, when they do not hold that many.
fn reserve_on<'a>(
    targets: &[Target],
    order: impl Iterator<Item = &'a usize>,
    npages: u64,
) -> Option<Vec<Run>> {
    let mut runs = Vec::new();
    let mut need = npages;
    for &target in order {
        if need == 0 {
            break;
        }
        for (ppage, n) in targets[target].free.take(need) {
            need -= n;
            runs.push(Run {
                target,
                ppage,
                npages: n,
            });
        }
    }
    if need == 0 {
        return Some(runs);
    }
    for run in runs {
        targets[run.target].free.give(run.ppage, run.npages);
    }
    None
}
