//! The kernel catalogue: every PTX entry, with its argument, its launch
//! bounds and the module it is loaded from, in one table.
//!
//! The kernels (`kernels.rs`), the host's build script (launch bounds and
//! the split into modules), the host's loader, the CPU execution, the bench
//! and the tests all read it, so no entry name is written anywhere else.
//!
//! Every collective entry runs one algorithm family and a fixed set of
//! collectives, so a call loads only the code it can run:
//! - *reducing* entries run reduce-scatter and all-reduce for one
//!   (type, op); signed and unsigned integers share
//!   their Sum and Prod entries (two's-complement wrapping gives the same
//!   bits), as NCCL's equivalence classes do;
//! - *gathering* entries run all-gather, which folds nothing, for one
//!   element size.
//!
//! Each entry is a module of its own: the driver JIT-compiles a PTX module
//! whole when it is loaded (lazy loading does not defer that), so a module
//! holding only what one call needs is what makes a first call fast.

use crate::abi::{Work, BLOCK_THREADS, LOCAL_MIN_BLOCKS_PER_SM, LOCAL_THREADS};
use crate::grad::abi::{TASK_MIN_BLOCKS_PER_SM, TASK_THREADS};
use crate::types::DataType;
use crate::types::Op;
use crate::types::{Algorithm, Collective};

/// What an entry runs, and so which argument it takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// The ring engine, over a [`Batch`](crate::abi::Batch).
    Ring = 0,
    /// The direct one-shot and two-shot algorithms, over a `Batch`.
    Direct = 1,
    /// The local algorithm, over a [`LocalArgs`](crate::abi::LocalArgs).
    Local = 2,
    /// The gradient layer's task, over a [`Task`](crate::grad::abi::Task).
    Task = 3,
    /// A kernel the bench measures its ceilings with, over plain words.
    Ceiling = 4,
}

impl Kind {
    /// The collective kinds, in discriminant order.
    pub const COLLECTIVE: [Kind; 3] = [Kind::Ring, Kind::Direct, Kind::Local];

    /// The kind whose entries run `a`.
    pub const fn of(a: Algorithm) -> Kind {
        match a {
            Algorithm::Ring => Kind::Ring,
            Algorithm::OneShot | Algorithm::TwoShot => Kind::Direct,
            Algorithm::Local => Kind::Local,
        }
    }

    pub const fn name(self) -> &'static str {
        match self {
            Kind::Ring => "ring",
            Kind::Direct => "direct",
            Kind::Local => "local",
            Kind::Task => "task",
            Kind::Ceiling => "ceiling",
        }
    }
}

/// The by-value argument an entry takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Args {
    /// A [`Batch`](crate::abi::Batch).
    Batch,
    /// A [`LocalArgs`](crate::abi::LocalArgs).
    Local,
    /// A [`Task`](crate::grad::abi::Task).
    Task,
    /// This many `u64` words.
    Words(u32),
}

/// One PTX entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// Its PTX name.
    pub name: &'static str,
    pub kind: Kind,
    /// The collectives it runs, a mask of [`Collective::bit`]s ([`set_of`]; 0: none).
    pub collectives: u64,
    /// The type it folds: a reducing entry's (the class's canonical type).
    pub dtype: Option<DataType>,
    /// The op it folds with: a reducing entry's.
    pub op: Option<Op>,
    /// Bytes per element it moves (a gathering entry's only key).
    pub elem_bytes: u64,
    pub args: Args,
    /// Threads per block: every launch uses this many, and the launch
    /// bounds (`.maxntid`) say so.
    pub threads: u32,
    /// Blocks per SM the launch bounds (`.minnctapersm`) guarantee room
    /// for: the host sizes co-resident grids with it, loading nothing.
    pub min_blocks_per_sm: u32,
    /// The PTX module holding it (and whatever functions it calls).
    pub module: &'static str,
}

/// The set of `cs`.
pub const fn set_of(cs: &[Collective]) -> u64 {
    let mut s = 0;
    let mut i = 0;
    while i < cs.len() {
        s |= cs[i].bit();
        i += 1;
    }
    s
}

/// What reducing entries run.
pub const REDUCING: u64 = set_of(&[Collective::ReduceScatter, Collective::AllReduce]);
/// What gathering entries run.
pub const GATHERING: u64 = set_of(&[Collective::AllGather]);

/// The type whose entries fold `dtype` with `op`: signed integers' Sum and
/// Prod are their unsigned twins' (wrapping arithmetic has the same bits).
pub const fn canonical(dtype: DataType, op: Op) -> DataType {
    match (dtype, op) {
        (DataType::I8, Op::Sum | Op::Prod) => DataType::U8,
        (DataType::I32, Op::Sum | Op::Prod) => DataType::U32,
        (DataType::I64, Op::Sum | Op::Prod) => DataType::U64,
        _ => dtype,
    }
}

/// The PTX name of an entry: `ringreduce_<kind>_<type>_<op>` for reducing
/// entries, `ringreduce_<kind>_gather_<bits>` for gathering ones, and
/// `ringreduce_<name>` for the others.
#[macro_export]
macro_rules! entry_name {
    ($kind:ident, $a:ident, $b:ident) => {
        concat!(
            "ringreduce_",
            stringify!($kind),
            "_",
            stringify!($a),
            "_",
            stringify!($b)
        )
    };
    ($name:ident) => {
        concat!("ringreduce_", stringify!($name))
    };
}

/// Calls `$m!` with the catalogue's collective rows.
/// - `reduce`: the entry-name fragment of a type, its Rust type, its
///   [`DataType`], and the ops that have entries of their own for it (the
///   name fragment and the [`Op`] variant, also the `ReduceOp` type's name).
///   Signed integers list no Sum or Prod: see [`canonical`].
/// - `gather`: the name fragment of an element size, and a Rust type of that
///   size (all-gather copies bits, so any type of the size serves).
///
/// The kernels, the CPU execution's table and [`COLLECTIVE_ENTRIES`] are generated
/// from it, in this order, so they cannot disagree.
#[macro_export]
macro_rules! for_each_collective_row {
    ($m:ident) => {
        $m! {
            reduce: [
                int8: i8 => I8 { max: Max, min: Min, avg: Avg }
                uint8: u8 => U8 { sum: Sum, prod: Prod, max: Max, min: Min, avg: Avg }
                int32: i32 => I32 { max: Max, min: Min, avg: Avg }
                uint32: u32 => U32 { sum: Sum, prod: Prod, max: Max, min: Min, avg: Avg }
                int64: i64 => I64 { max: Max, min: Min, avg: Avg }
                uint64: u64 => U64 { sum: Sum, prod: Prod, max: Max, min: Min, avg: Avg }
                half: ::half::f16 => F16 { sum: Sum, prod: Prod, max: Max, min: Min, avg: Avg }
                bfloat16: ::half::bf16 => Bf16 { sum: Sum, prod: Prod, max: Max, min: Min, avg: Avg }
                float: f32 => F32 { sum: Sum, prod: Prod, max: Max, min: Min, avg: Avg }
                double: f64 => F64 { sum: Sum, prod: Prod, max: Max, min: Min, avg: Avg }
            ]
            gather: [
                b8: u8,
                b16: ::half::f16,
                b32: u32,
                b64: u64,
            ]
        }
    };
}

/// The launch bounds of the ring and direct entries: one block of the
/// producers and the control lane per SM is all a rank ever has, so
/// ptxas need not save registers for a second one.
const COLLECTIVE_BOUNDS: (u32, u32) = (BLOCK_THREADS, 1);

/// The reducing or gathering rows as [`Entry`]s, three kinds a row.
macro_rules! collective_entries {
    (
        reduce: [$($tn:ident: $t:ty => $dt:ident { $($on:ident: $op:ident),* })*]
        gather: [$($gn:ident: $gt:ty,)*]
    ) => {
        &[
            $($(
                reducing($crate::entry_name!(ring, $tn, $on), Kind::Ring, DataType::$dt, Op::$op),
                reducing($crate::entry_name!(direct, $tn, $on), Kind::Direct, DataType::$dt, Op::$op),
                reducing($crate::entry_name!(local, $tn, $on), Kind::Local, DataType::$dt, Op::$op),
            )*)*
            $(
                gathering($crate::entry_name!(ring, gather, $gn), Kind::Ring, core::mem::size_of::<$gt>()),
                gathering($crate::entry_name!(direct, gather, $gn), Kind::Direct, core::mem::size_of::<$gt>()),
                gathering($crate::entry_name!(local, gather, $gn), Kind::Local, core::mem::size_of::<$gt>()),
            )*
        ]
    };
}

const fn collective(
    name: &'static str,
    kind: Kind,
    collectives: u64,
    dtype: Option<DataType>,
    op: Option<Op>,
    elem_bytes: u64,
) -> Entry {
    let (args, (threads, min_blocks_per_sm)) = match kind {
        Kind::Local => (Args::Local, (LOCAL_THREADS, LOCAL_MIN_BLOCKS_PER_SM)),
        _ => (Args::Batch, COLLECTIVE_BOUNDS),
    };
    Entry {
        name,
        kind,
        collectives,
        dtype,
        op,
        elem_bytes,
        args,
        threads,
        min_blocks_per_sm,
        module: name,
    }
}

const fn reducing(name: &'static str, kind: Kind, dtype: DataType, op: Op) -> Entry {
    collective(name, kind, REDUCING, Some(dtype), Some(op), dtype.size())
}

const fn gathering(name: &'static str, kind: Kind, bytes: usize) -> Entry {
    collective(name, kind, GATHERING, None, None, bytes as u64)
}

/// The collective entries, in the order of [`for_each_collective_row`]:
/// the CPU execution's table follows the same order.
pub const COLLECTIVE_ENTRIES: &[Entry] = for_each_collective_row!(collective_entries);

/// The module of the bench's ceiling kernels, which it loads together.
pub const CEILING_MODULE: &str = entry_name!(ceilings);

const fn ceiling(name: &'static str, words: u32) -> Entry {
    Entry {
        name,
        kind: Kind::Ceiling,
        collectives: 0,
        dtype: None,
        op: None,
        elem_bytes: 0,
        args: Args::Words(words),
        threads: BLOCK_THREADS,
        min_blocks_per_sm: 1,
        module: CEILING_MODULE,
    }
}

/// The gradient layer's one entry (`crate::grad`).
pub const TASK: Entry = Entry {
    name: entry_name!(task),
    kind: Kind::Task,
    collectives: 0,
    dtype: None,
    op: None,
    elem_bytes: 0,
    args: Args::Task,
    threads: TASK_THREADS,
    min_blocks_per_sm: TASK_MIN_BLOCKS_PER_SM,
    module: entry_name!(task),
};

/// One block copying `n` `u64`s with the ring's copy loop `(dst, src, n)`.
pub const COPY_BLOCK: Entry = ceiling(entry_name!(copy_block), 3);
/// The whole grid copying `n` `u64`s `(dst, src, n)`.
pub const COPY_GRID: Entry = ceiling(entry_name!(copy_grid), 3);
/// One block folding two arrays of `f32`s into a third `(dst, a, b, n)`.
pub const REDUCE_BLOCK: Entry = ceiling(entry_name!(reduce_block), 4);
/// Two blocks bouncing a counter through two flags `(flags, iters)`.
pub const PINGPONG: Entry = ceiling(entry_name!(pingpong), 2);

/// The entries that are not collectives.
pub const OTHER_ENTRIES: [Entry; 5] = [TASK, COPY_BLOCK, COPY_GRID, REDUCE_BLOCK, PINGPONG];

/// Every entry: the collective ones, then the others.
pub fn all() -> impl Iterator<Item = &'static Entry> {
    COLLECTIVE_ENTRIES.iter().chain(OTHER_ENTRIES.iter())
}

/// The entry called `name`, if any.
pub fn by_name(name: &str) -> Option<&'static Entry> {
    all().find(|e| e.name == name)
}

/// The module entry `name` is loaded in, if it is an entry: what the PTX
/// linker groups entries by, whoever runs it.
pub fn module_of(name: &str) -> Option<&'static str> {
    by_name(name).map(|e| e.module)
}

/// Whether entry `e` runs collective `c` on `dtype` with `op`.
const fn serves(e: &Entry, kind: Kind, c: Collective, dtype: DataType, op: Op) -> bool {
    if e.kind as u8 != kind as u8 || e.collectives & c.bit() == 0 {
        return false;
    }
    match (e.dtype, e.op) {
        (Some(d), Some(o)) => d as u8 == canonical(dtype, op) as u8 && o as u8 == op as u8,
        _ => e.elem_bytes == dtype.size(),
    }
}

const KINDS: usize = Kind::COLLECTIVE.len();
const SLOTS: usize = KINDS * Collective::ALL.len() * DataType::ALL.len() * Op::ALL.len();

const fn slot(kind: Kind, c: Collective, dtype: DataType, op: Op) -> usize {
    (((kind as usize) * Collective::ALL.len() + c as usize) * DataType::ALL.len() + dtype as usize)
        * Op::ALL.len()
        + op as usize
}

/// For every (kind, collective, type, op), the index of the one entry of
/// [`COLLECTIVE_ENTRIES`] that serves it, found at compile time: a row
/// missing from the catalogue, or two rows serving one call, fail the
/// build.
const LOOKUP: [u16; SLOTS] = {
    let mut t = [u16::MAX; SLOTS];
    let mut k = 0;
    while k < KINDS {
        let kind = Kind::COLLECTIVE[k];
        let mut c = 0;
        while c < Collective::ALL.len() {
            let mut d = 0;
            while d < DataType::ALL.len() {
                let mut o = 0;
                while o < Op::ALL.len() {
                    let (coll, dtype, op) = (Collective::ALL[c], DataType::ALL[d], Op::ALL[o]);
                    let s = slot(kind, coll, dtype, op);
                    let mut i = 0;
                    while i < COLLECTIVE_ENTRIES.len() {
                        if serves(&COLLECTIVE_ENTRIES[i], kind, coll, dtype, op) {
                            assert!(t[s] == u16::MAX, "two entries serve one call");
                            t[s] = i as u16;
                        }
                        i += 1;
                    }
                    assert!(t[s] != u16::MAX, "a call no entry serves");
                    o += 1;
                }
                d += 1;
            }
            c += 1;
        }
        k += 1;
    }
    t
};

// `Kind::COLLECTIVE[v]`, `Collective::ALL[v]`, `DataType::ALL[v]` and
// `Op::ALL[v]` have value `v`, which `slot` relies on.
const _: () = {
    let mut i = 0;
    while i < KINDS {
        assert!(Kind::COLLECTIVE[i] as usize == i);
        i += 1;
    }
    let mut i = 0;
    while i < DataType::ALL.len() {
        assert!(DataType::ALL[i] as usize == i);
        i += 1;
    }
    let mut i = 0;
    while i < Op::ALL.len() {
        assert!(Op::ALL[i] as usize == i);
        i += 1;
    }
};

/// The index in [`COLLECTIVE_ENTRIES`] of the entry that runs `c` by
/// algorithm family `kind` on `dtype` with `op`. `kind` must be one of
/// [`Kind::COLLECTIVE`]; the others yield `None`.
#[inline]
pub fn collective_index(kind: Kind, c: Collective, dtype: DataType, op: Op) -> Option<usize> {
    if (kind as usize) < KINDS {
        Some(LOOKUP[slot(kind, c, dtype, op)] as usize)
    } else {
        None
    }
}

/// The index in [`COLLECTIVE_ENTRIES`] of the entry that runs `w` (its
/// collective and algorithm) on `dtype` with `op`; `None` for a work whose
/// words name neither. Both executions launch what this says.
#[inline]
pub fn entry_of_work(w: &Work, dtype: DataType, op: Op) -> Option<usize> {
    let c = Collective::from_u64(w.collective)?;
    let a = Algorithm::from_u64(w.algorithm)?;
    collective_index(Kind::of(a), c, dtype, op)
}

/// The entry that runs `c` with algorithm `a` on `dtype` with `op`.
#[inline]
pub fn collective_entry(a: Algorithm, c: Collective, dtype: DataType, op: Op) -> &'static Entry {
    // Every algorithm's kind is a collective kind, so the lookup is total.
    let i = LOOKUP[slot(Kind::of(a), c, dtype, op)] as usize;
    &COLLECTIVE_ENTRIES[i]
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::format;
    use std::vec::Vec;

    #[test]
    fn every_call_has_one_entry_of_its_kind_that_runs_it() {
        for a in Algorithm::ALL {
            for c in Collective::ALL {
                for d in DataType::ALL {
                    for o in Op::ALL {
                        let e = collective_entry(a, c, d, o);
                        assert_eq!(e.kind, Kind::of(a));
                        assert!(e.collectives & c.bit() != 0, "{}", e.name);
                        assert_eq!(e.elem_bytes, d.size(), "{}", e.name);
                        if c == Collective::AllGather {
                            assert_eq!((e.dtype, e.op), (None, None), "{}", e.name);
                        } else {
                            assert_eq!(e.op, Some(o));
                            assert_eq!(e.dtype, Some(canonical(d, o)));
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn names_are_unique_and_follow_the_kind() {
        let all: Vec<&Entry> = all().collect();
        for (i, e) in all.iter().enumerate() {
            assert!(all[i + 1..].iter().all(|f| f.name != e.name), "{}", e.name);
            assert!(by_name(e.name) == Some(e));
            let rest = e.name.strip_prefix("ringreduce_").expect("prefix");
            if Kind::COLLECTIVE.contains(&e.kind) {
                let rest = rest.strip_prefix(e.kind.name()).expect("kind");
                match (e.dtype, e.op) {
                    (Some(d), Some(o)) => {
                        assert_eq!(rest, format!("_{}_{}", d.name(), o.name()))
                    }
                    _ => assert_eq!(rest, format!("_gather_b{}", 8 * e.elem_bytes)),
                }
            }
        }
        assert_eq!(by_name("ringreduce_float_sum"), None);
    }

    /// Only signed integers' Sum and Prod move; everything else is its own.
    #[test]
    fn equivalence_classes_are_nccls() {
        let mut moved = 0;
        for d in DataType::ALL {
            for o in Op::ALL {
                let c = canonical(d, o);
                if c != d {
                    moved += 1;
                    assert_eq!(c.size(), d.size());
                    assert!(matches!(o, Op::Sum | Op::Prod));
                    assert!(!c.is_float() && !d.is_float());
                }
            }
        }
        assert_eq!(moved, 6);
        // 44 reducing (type, op) pairs and 4 element sizes, three kinds each.
        assert_eq!(COLLECTIVE_ENTRIES.len(), 3 * (44 + 4));
    }

    #[test]
    fn bounds_follow_the_argument() {
        for e in all() {
            let (threads, blocks) = match e.args {
                Args::Local => (LOCAL_THREADS, LOCAL_MIN_BLOCKS_PER_SM),
                Args::Task => (TASK_THREADS, TASK_MIN_BLOCKS_PER_SM),
                Args::Batch | Args::Words(_) => (BLOCK_THREADS, 1),
            };
            assert_eq!(
                (e.threads, e.min_blocks_per_sm),
                (threads, blocks),
                "{}",
                e.name
            );
        }
    }
}
