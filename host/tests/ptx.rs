//! The embedded PTX: one module per catalogue module, each holding its
//! entries with their launch bounds, and calling nothing it does not
//! define.

use ringreduce::gpu::module::{check_target, ptx_of, ptx_target, MODULES, SASS};
use ringreduce::kernels::abi::LocalArgs;
use ringreduce::kernels::catalogue::{self, Args, Kind, COLLECTIVE_ENTRIES};
use ringreduce::Error;
use ringreduce::{Collective, DataType, Op};

/// The entries a module's text defines.
fn entries_of(ptx: &str) -> Vec<&str> {
    ptx.split(".entry ")
        .skip(1)
        .map(|e| &e[..e.find('(').expect("an entry's parameters")])
        .collect()
}

/// The text of entry `name` in `ptx`, up to the next top-level item
/// (inline assembly puts braces in column 0, so a `}` does not end it).
fn body<'a>(ptx: &'a str, name: &str) -> &'a str {
    let at = ptx
        .find(&format!(".entry {name}("))
        .unwrap_or_else(|| panic!("no entry {name}"));
    let rest = &ptx[at..];
    let end = ["\n.visible ", "\n.func ", "\n.entry ", "\n.global "]
        .iter()
        .filter_map(|m| rest.find(m))
        .min()
        .unwrap_or(rest.len());
    &rest[..end]
}

#[test]
fn every_catalogue_entry_is_in_its_module_with_its_bounds() {
    let mut seen = 0;
    for e in catalogue::all() {
        let ptx = ptx_of(e.module).unwrap_or_else(|| panic!("no module {}", e.module));
        let bounds = format!(
            ")\n.maxntid {}, 1, 1\n.minnctapersm {}\n{{",
            e.threads, e.min_blocks_per_sm
        );
        assert!(
            body(ptx, e.name).contains(&bounds),
            "{}: its bounds",
            e.name
        );
        seen += 1;
    }
    // 44 reducing (type, op) classes and 4 element sizes, three kinds
    // each; the gradient layer's task; four bench kernels.
    assert_eq!(seen, 3 * (44 + 4) + 1 + 4);
}

/// A module holds its catalogue entries and no other: no entry is built
/// twice, and a call's load compiles nothing it does not run.
#[test]
fn every_module_holds_exactly_its_entries() {
    assert_eq!(MODULES.len(), COLLECTIVE_ENTRIES.len() + 2);
    for (name, ptx) in MODULES {
        let mut want: Vec<&str> = catalogue::all()
            .filter(|e| e.module == *name)
            .map(|e| e.name)
            .collect();
        let mut have = entries_of(ptx);
        want.sort_unstable();
        have.sort_unstable();
        assert_eq!(have, want, "module {name}");
        assert!(!ptx.contains("//"), "{name}: comments are stripped");
    }
}

/// Sizes that keep a first call quick: the driver JIT-compiles a whole
/// module when it loads it.
#[test]
fn no_module_is_large() {
    let largest = MODULES.iter().map(|(_, p)| p.len()).max().unwrap_or(0);
    assert!(largest <= 1_500_000, "largest module {largest} bytes");
    // Everything embedded together: what every binary carries (12.87 MB
    // once the direct and local engines shared their folds, 2026-12-06).
    // The test-only fault hook adds about 76 KB to the build that has it.
    let all: usize = MODULES.iter().map(|(_, p)| p.len()).sum();
    let limit = if cfg!(feature = "fault-injection") {
        13_600_000
    } else {
        13_500_000
    };
    assert!(all <= limit, "all modules {all} bytes, over {limit}");
    // An f32 sum all-reduce of virtual ranks needs one local entry.
    let e = catalogue::collective_entry(
        ringreduce::Algorithm::Local,
        Collective::AllReduce,
        DataType::F32,
        Op::Sum,
    );
    let local = ptx_of(e.module).expect("its module").len();
    assert!(local <= 150_000, "{}: {local} bytes", e.name);
}

/// The SASS table holds one image per GPU the build named in
/// `RINGREDUCE_SASS` (none by default), a CUDA ELF (`e_machine` 190) for
/// every module.
#[test]
fn embedded_sass_is_what_the_build_asked_for() {
    let asked = ringreduce_build::parse_sass_archs(option_env!("RINGREDUCE_SASS").unwrap_or(""))
        .expect("a valid RINGREDUCE_SASS");
    let built: Vec<u32> = SASS.iter().map(|&(cc, _)| cc).collect();
    assert_eq!(built, asked);
    for &(cc, modules) in SASS {
        let names: Vec<&str> = modules.iter().map(|(n, _)| *n).collect();
        let all: Vec<&str> = MODULES.iter().map(|(n, _)| *n).collect();
        assert_eq!(names, all, "sm_{cc}: a cubin per module");
        for &(name, bin) in modules {
            assert!(
                bin.len() > 64 && bin.starts_with(b"\x7fELF"),
                "sm_{cc} {name}: not ELF"
            );
            assert_eq!(
                u16::from_le_bytes([bin[18], bin[19]]),
                190,
                "sm_{cc} {name}: not CUDA"
            );
        }
    }
}

#[test]
fn no_unresolved_functions() {
    for (name, ptx) in MODULES {
        let externs: Vec<&str> = ptx
            .lines()
            .filter(|l| l.contains(".extern .func"))
            .collect();
        assert!(externs.is_empty(), "{name}: unresolved: {externs:?}");
    }
}

/// The arch the build asked for, as `sm_XX`.
fn requested_arch() -> String {
    option_env!("RINGREDUCE_PTX_ARCH")
        .unwrap_or(ringreduce_build::DEFAULT_ARCH)
        .to_string()
}

#[test]
fn targets_the_requested_architecture() {
    let arch = requested_arch();
    let cc: u32 = arch["sm_".len()..].parse().expect("sm_XX");
    for (name, ptx) in MODULES {
        assert!(
            ptx.contains(&format!(".target {arch}")),
            "{name} is not for {arch}"
        );
        assert_eq!(ptx_target(ptx), Some(cc), "{name}");
    }
}

/// A GPU older than the PTX's target gets a typed error naming the
/// rebuild; the same or a newer one loads.
#[test]
fn an_older_gpu_is_refused_with_a_typed_error() {
    match check_target(3, 75, Some(80)) {
        Err(Error::GpuTooOld { device, cc, ptx }) => {
            assert_eq!((device, cc, ptx), (3, 75, 80));
            let text = check_target(3, 75, Some(80)).unwrap_err().to_string();
            assert!(text.contains("RINGREDUCE_PTX_ARCH=sm_75"), "{text}");
        }
        other => panic!("expected GpuTooOld, got {other:?}"),
    }
    assert!(check_target(0, 80, Some(80)).is_ok());
    assert!(check_target(0, 90, Some(80)).is_ok());
    assert!(check_target(0, 90, None).is_ok());
    assert_eq!(ptx_target(".version 7.1\n.target sm_90a\n"), None);
    assert_eq!(ptx_target(".target sm_70, debug\n"), Some(70));
}

/// From sm_80 on, the ring's producers wait on an `mbarrier` phase, which
/// racecheck models; older targets poll a shared count instead.
#[test]
fn the_ring_hands_slices_over_by_the_targets_means() {
    for e in COLLECTIVE_ENTRIES.iter().filter(|e| e.kind == Kind::Ring) {
        let ptx = ptx_of(e.module).expect("its module");
        let ring = body(ptx, e.name);
        let mbarrier = ring.contains("mbarrier.test_wait.parity.shared.b64")
            && ring.contains("mbarrier.arrive.shared.b64")
            && ring.contains("mbarrier.init.shared.b64");
        let polled = ring.contains("ld.acquire.cta.shared.u32");
        if ptx_target(ptx).is_some_and(|cc| cc >= 80) {
            assert!(
                mbarrier && !polled,
                "{}: sm_80+: expected the mbarrier hand-off",
                e.name
            );
            assert!(
                ptx.contains(".version 7.1"),
                "mbarrier parity waits need PTX 7.1"
            );
        } else {
            assert!(
                polled && !mbarrier,
                "{}: before sm_80: expected the polled hand-off",
                e.name
            );
        }
    }
}

/// An entry's collectives are compile-time: a gathering entry folds
/// nothing, so it has none of a reducing entry's arithmetic.
#[test]
fn gathering_entries_fold_nothing() {
    let gather = catalogue::collective_entry(
        ringreduce::Algorithm::Ring,
        Collective::AllGather,
        DataType::F32,
        Op::Sum,
    );
    let reduce = catalogue::collective_entry(
        ringreduce::Algorithm::Ring,
        Collective::AllReduce,
        DataType::F32,
        Op::Sum,
    );
    let g = body(ptx_of(gather.module).expect("module"), gather.name);
    let r = body(ptx_of(reduce.module).expect("module"), reduce.name);
    assert!(
        r.contains("add.rn.f32") || r.contains("add.f32"),
        "the sum entry adds"
    );
    assert!(
        !g.contains("add.rn.f32") && !g.contains("add.f32"),
        "the gather entry adds"
    );
}

/// Every local entry reads its ranks' addresses in place from its own
/// argument (`arch::nvptx::param_ends!` names it `<entry>_param_0`, as
/// LLVM does) and keeps nothing in local memory: a copy of the argument on
/// the stack cost a quarter of a small call's kernel time
/// (`bench/NOTES.md`, the local kernel's argument).
#[test]
fn local_entries_read_their_argument_in_param_space() {
    let mut seen = 0;
    for e in catalogue::all().filter(|e| e.args == Args::Local) {
        let name = e.name;
        let body = body(ptx_of(e.module).expect("its module"), name);
        let param = format!("{name}_param_0");
        let bytes = std::mem::size_of::<LocalArgs>();
        assert!(
            body.contains(&format!(".param .align 8 .b8 {param}[{bytes}]")),
            "{name}: its argument is not the {bytes}-byte LocalArgs"
        );
        assert!(
            body.contains("mov.u64 %rd") && body.contains(&format!(", {param};")),
            "{name}: no param-space address of its argument"
        );
        assert!(body.contains("ld.param.u64"), "{name}: no param-space read");
        assert!(!body.contains("__local_depot"), "{name}: uses local memory");
        seen += 1;
    }
    assert_eq!(seen, 44 + 4);
}
