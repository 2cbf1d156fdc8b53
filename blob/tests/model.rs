//! Model test: random operation sequences against the store and an in-memory model, with a RAM
//! target and two small file targets (tmpfs and disk) so that spills, class choice and
//! `NoSpace` all happen, and closes/reopens in between (durable blobs survive, volatile vanish).
//! It runs with compression off (where the model predicts every page), on for every put, and
//! mixed per put; with compression the pages a put takes depend on its bytes, so there the
//! model checks the bytes, the classes and that the targets' used space is exactly what the
//! blobs say they store.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use tandem_blob::BlobPut;

use proptest::prelude::*;
use tandem_blob::*;

const P: u64 = PAGE_SIZE;
const RAM_PAGES: u64 = 6;
const FILE_PAGES: u64 = 4 + 6;

#[derive(Debug, Clone)]
enum Op {
    Put {
        tag: usize,
        blob: usize,
        offset: u64,
        len: u64,
        score: usize,
        seed: u8,
        /// Index into [`COMPRESSIONS`], as the run's [`Mode`] allows.
        compression: usize,
    },
    Get {
        tag: usize,
        blob: usize,
        offset: u64,
        len: u64,
    },
    Delete {
        tag: usize,
        blob: usize,
    },
    Stat {
        tag: usize,
        blob: usize,
    },
    List {
        tag: usize,
    },
    Reopen,
    CreateTag,
}

const SCORES: [f32; 5] = [-1.0, 0.0, 0.5, 0.95, 1.0];
/// The first is no compression; the others compress.
const COMPRESSIONS: [&str; 5] = [
    "none",
    "zstd:fast",
    "lz4",
    "dynamic:zstd:best",
    "zstd:balanced",
];

/// Which compressions a run's puts use.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    Off,
    On,
    Mixed,
}

impl Mode {
    fn context(self, compression: usize) -> PutContext {
        let i = match self {
            Mode::Off => 0,
            Mode::On => 1 + compression % (COMPRESSIONS.len() - 1),
            Mode::Mixed => compression,
        };
        PutContext {
            compression: COMPRESSIONS[i].parse().unwrap(),
            ..PutContext::default()
        }
    }
}
const NAMES: [&str; 4] = ["a", "b", "c", "d"];

fn op() -> impl Strategy<Value = Op> {
    let tag = 0..3usize; // 2 is never created
    let blob = 0..NAMES.len();
    let offset = prop_oneof![0..64u64, 0..5 * P, Just(P - 1), Just(2 * P)];
    let len = prop_oneof![1..64u64, 1..2 * P + 1, Just(P)];
    prop_oneof![
        5 => (tag.clone(), blob.clone(), offset.clone(), len.clone(), 0..SCORES.len(), any::<u8>(), 0..COMPRESSIONS.len())
            .prop_map(|(tag, blob, offset, len, score, seed, compression)| Op::Put { tag, blob, offset, len, score, seed, compression }),
        4 => (tag.clone(), blob.clone(), offset, len).prop_map(|(tag, blob, offset, len)| Op::Get { tag, blob, offset, len }),
        2 => (tag.clone(), blob.clone()).prop_map(|(tag, blob)| Op::Delete { tag, blob }),
        1 => (tag.clone(), blob).prop_map(|(tag, blob)| Op::Stat { tag, blob }),
        1 => tag.prop_map(|tag| Op::List { tag }),
        1 => Just(Op::Reopen),
        1 => Just(Op::CreateTag),
    ]
}

#[derive(Debug, Clone)]
struct ModelBlob {
    bytes: Vec<u8>,
    durable: bool,
    /// Logical pages ever written: what the blob occupies.
    pages: BTreeSet<u64>,
}

fn config(dir: &Path, shm: &Path) -> StoreConfig {
    StoreConfig {
        metadata: dir.join("meta.redb"),
        targets: vec![
            TargetConfig::ram(RAM_PAGES * P, 0.9),
            TargetConfig::file(shm.join("a.dat"), 4 * P, 0.6),
            TargetConfig::file(dir.join("b.dat"), 6 * P + 100, 0.3),
        ],
        limits: Limits::default(),
    }
}

fn s(st: &Option<BlobStore>) -> &BlobStore {
    st.as_ref().unwrap()
}

fn data(seed: u8, len: u64) -> Vec<u8> {
    (0..len)
        .map(|i| seed.wrapping_add((i % 253) as u8).wrapping_mul(3) | 1)
        .collect()
}

fn run(ops: Vec<Op>, mode: Mode) -> Result<(), TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let shm = tempfile::tempdir_in("/dev/shm").unwrap();
    let cfg = config(dir.path(), shm.path());
    let mut store = Some(BlobStore::open(&cfg).unwrap());
    let mut t2 = false; // tag 2 ("t2") exists once an op created it
    let mut tags = [
        s(&store).get_or_create_tag("t0").unwrap(),
        s(&store).get_or_create_tag("t1").unwrap(),
        TagId(99),
    ];
    let mut model: BTreeMap<(usize, usize), ModelBlob> = BTreeMap::new();
    let used_pages = |m: &BTreeMap<(usize, usize), ModelBlob>, durable: bool| -> u64 {
        m.values()
            .filter(|b| b.durable == durable)
            .map(|b| b.pages.len() as u64)
            .sum()
    };

    for op in ops {
        let st = s(&store);
        match op {
            Op::Put {
                tag,
                blob,
                offset,
                len,
                score,
                seed,
                compression,
            } => {
                let bytes = data(seed, len);
                let context = mode.context(compression);
                let r = st.put(
                    &BlobPut::new(tags[tag], NAMES[blob])
                        .at(offset)
                        .score(Score(SCORES[score]))
                        .context(context),
                    &bytes,
                );
                if tag == 2 && !t2 {
                    prop_assert!(matches!(r, Err(BlobError::UnknownTag(_))), "{r:?}");
                    continue;
                }
                let pages: BTreeSet<u64> = (offset / P..(offset + len).div_ceil(P)).collect();
                let need = pages.len() as u64;
                let capacity = |d: bool| if d { FILE_PAGES } else { RAM_PAGES };
                let free = |d: bool| capacity(d).saturating_sub(used_pages(&model, d));
                let class = match model.get(&(tag, blob)) {
                    Some(b) => (free(b.durable) >= need).then_some(b.durable),
                    None => {
                        let volatile_first = SCORES[score] == -1.0 || SCORES[score] >= 0.9;
                        let order = if volatile_first {
                            [false, true]
                        } else {
                            [true, false]
                        };
                        order.into_iter().find(|&d| free(d) >= need)
                    }
                };
                // With compression the pages a put takes depend on its bytes: the store's
                // word on whether it fitted, and on a new blob's class, is taken (its bytes
                // and classes are still checked).
                let class = match (mode, &r) {
                    (Mode::Off, _) => class,
                    (_, Err(BlobError::NoSpace { .. })) => None,
                    (_, Ok(info)) => {
                        let known = model.get(&(tag, blob)).map(|b| b.durable);
                        prop_assert!(known.is_none_or(|d| d == info.durable), "{r:?}");
                        Some(info.durable)
                    }
                    (_, Err(e)) => return Err(TestCaseError::fail(format!("put: {e}"))),
                };
                match class {
                    None => prop_assert!(matches!(r, Err(BlobError::NoSpace { .. })), "{r:?}"),
                    Some(durable) => {
                        let info = r.map_err(|e| TestCaseError::fail(format!("put: {e}")))?;
                        let b = model.entry((tag, blob)).or_insert(ModelBlob {
                            bytes: Vec::new(),
                            durable,
                            pages: BTreeSet::new(),
                        });
                        let end = (offset + len) as usize;
                        if b.bytes.len() < end {
                            b.bytes.resize(end, 0);
                        }
                        b.bytes[offset as usize..end].copy_from_slice(&bytes);
                        b.pages.extend(pages);
                        prop_assert_eq!(info.size, b.bytes.len() as u64);
                        prop_assert_eq!(info.durable, b.durable);
                    }
                }
            }
            Op::Get {
                tag,
                blob,
                offset,
                len,
            } => {
                let mut out = vec![0xEE; len as usize];
                let r = st.get(tags[tag], NAMES[blob], offset, &mut out);
                match (tag, model.get(&(tag, blob))) {
                    (2, _) if !t2 => {
                        prop_assert!(matches!(r, Err(BlobError::UnknownTag(_))), "{:?}", r)
                    }
                    (_, None) => {
                        prop_assert!(matches!(r, Err(BlobError::NotFound { .. })), "{:?}", r)
                    }
                    (_, Some(b)) if offset + len > b.bytes.len() as u64 => match r {
                        Err(BlobError::OutOfRange { size, .. }) => {
                            prop_assert_eq!(size, b.bytes.len() as u64)
                        }
                        r => prop_assert!(false, "want OutOfRange, got {r:?}"),
                    },
                    (_, Some(b)) => {
                        prop_assert!(r.is_ok(), "{r:?}");
                        prop_assert!(
                            out == b.bytes[offset as usize..(offset + len) as usize],
                            "bytes differ"
                        );
                    }
                }
            }
            Op::Delete { tag, blob } => {
                let r = st.delete(tags[tag], NAMES[blob]);
                match (tag, model.remove(&(tag, blob))) {
                    (2, _) if !t2 => {
                        prop_assert!(matches!(r, Err(BlobError::UnknownTag(_))), "{:?}", r)
                    }
                    (_, None) => {
                        prop_assert!(matches!(r, Err(BlobError::NotFound { .. })), "{:?}", r)
                    }
                    (_, Some(_)) => prop_assert!(r.is_ok(), "{r:?}"),
                }
            }
            Op::Stat { tag, blob } => {
                let r = st.stat(tags[tag], NAMES[blob]);
                match (tag, model.get(&(tag, blob))) {
                    (2, _) if !t2 => {
                        prop_assert!(matches!(r, Err(BlobError::UnknownTag(_))), "{:?}", r)
                    }
                    (_, None) => {
                        prop_assert!(matches!(r, Err(BlobError::NotFound { .. })), "{:?}", r)
                    }
                    (_, Some(b)) => {
                        let st = r.map_err(|e| TestCaseError::fail(e.to_string()))?;
                        prop_assert_eq!((st.size, st.durable), (b.bytes.len() as u64, b.durable));
                        let targets = st.targets;
                        prop_assert!(
                            targets.iter().all(|&t| (t != 0) == b.durable),
                            "{:?}",
                            targets
                        );
                    }
                }
            }
            Op::List { tag } => {
                let r = st.list_blobs(tags[tag]);
                if tag == 2 && !t2 {
                    prop_assert!(matches!(r, Err(BlobError::UnknownTag(_))), "{:?}", r);
                    continue;
                }
                let got: Vec<(String, u64)> =
                    r.unwrap().into_iter().map(|b| (b.name, b.size)).collect();
                let want: Vec<(String, u64)> = model
                    .iter()
                    .filter(|((t, _), _)| *t == tag)
                    .map(|((_, n), b)| (NAMES[*n].to_owned(), b.bytes.len() as u64))
                    .collect();
                prop_assert_eq!(got, want);
            }
            Op::CreateTag => {
                let id = st.get_or_create_tag("t2").unwrap();
                if t2 {
                    prop_assert_eq!(id, tags[2]);
                } else {
                    prop_assert!(!tags[..2].contains(&id));
                    tags[2] = id;
                    t2 = true;
                }
                let names: Vec<String> = st
                    .list_tags()
                    .unwrap()
                    .into_iter()
                    .map(|(_, n)| n)
                    .collect();
                prop_assert_eq!(names, vec!["t0", "t1", "t2"]);
            }
            Op::Reopen => {
                drop(store.take());
                store = Some(BlobStore::open(&cfg).unwrap());
                model.retain(|_, b| b.durable);
                let st = s(&store);
                prop_assert_eq!(st.tag("t0").unwrap(), Some(tags[0]));
                prop_assert_eq!(st.tag("t1").unwrap(), Some(tags[1]));
                prop_assert_eq!(st.tag("t2").unwrap(), t2.then_some(tags[2]));
            }
        }
        let t = s(&store).targets();
        if mode == Mode::Off {
            // Space: exactly the pages the model's blobs occupy, nothing leaked.
            prop_assert_eq!(t[0].used, used_pages(&model, false) * P);
            prop_assert_eq!(t[1].used + t[2].used, used_pages(&model, true) * P);
        } else {
            // Space: exactly what the blobs store, nothing leaked.
            let mut stored = [0, 0];
            for tag in tags.iter().take(if t2 { 3 } else { 2 }) {
                for b in s(&store).list_blobs(*tag).unwrap() {
                    stored[usize::from(b.durable)] += b.stored;
                }
            }
            prop_assert_eq!(t[0].used, stored[0]);
            prop_assert_eq!(t[1].used + t[2].used, stored[1]);
        }
    }
    // Everything reads back whole at the end, after one more reopen.
    drop(store.take());
    let st = BlobStore::open(&cfg).unwrap();
    for ((tag, blob), b) in model.iter().filter(|(_, b)| b.durable) {
        let mut out = vec![0; b.bytes.len()];
        st.get(tags[*tag], NAMES[*blob], 0, &mut out).unwrap();
        prop_assert!(out == b.bytes);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn store_matches_model(ops in proptest::collection::vec(op(), 1..48)) {
        run(ops, Mode::Off)?;
    }

    #[test]
    fn store_matches_model_compressing_every_put(ops in proptest::collection::vec(op(), 1..48)) {
        run(ops, Mode::On)?;
    }

    #[test]
    fn store_matches_model_compressing_some_puts(ops in proptest::collection::vec(op(), 1..48)) {
        run(ops, Mode::Mixed)?;
    }
}
