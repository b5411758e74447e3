//! The embedded PTX holds every kernel and calls nothing it does not define.

use ringreduce::gpu::module::{all_kernel_names, check_target, ptx_target, PTX, SASS};
use ringreduce::kernels::abi::{
    LocalArgs, BLOCK_THREADS, LOCAL_ENTRY_PREFIX, LOCAL_MIN_BLOCKS_PER_SM, LOCAL_THREADS,
    TASK_ENTRY, TASK_MIN_BLOCKS_PER_SM, TASK_THREADS,
};
use ringreduce::Error;
use ringreduce::{DataType, Op};

#[test]
fn every_kernel_entry_is_present() {
    let names = all_kernel_names();
    // 10 types x 5 ops, twice (collective and local), four bench kernels
    // and the gradient layer's task.
    assert_eq!(names.len(), 105);
    for n in names {
        let decl = format!(".entry {n}(");
        assert!(PTX.contains(&decl), "missing kernel {n}");
    }
}

/// The SASS table holds one image per GPU the build named in
/// `RINGREDUCE_SASS` (none by default), each a CUDA ELF (`e_machine` 190).
#[test]
fn embedded_sass_is_what_the_build_asked_for() {
    let asked = ringreduce_build::parse_sass_archs(option_env!("RINGREDUCE_SASS").unwrap_or(""))
        .expect("a valid RINGREDUCE_SASS");
    let built: Vec<u32> = SASS.iter().map(|&(cc, _)| cc).collect();
    assert_eq!(built, asked);
    for &(cc, bin) in SASS {
        assert!(
            bin.len() > 64 && bin.starts_with(b"\x7fELF"),
            "sm_{cc}: not ELF"
        );
        assert_eq!(
            u16::from_le_bytes([bin[18], bin[19]]),
            190,
            "sm_{cc}: not CUDA"
        );
    }
}

#[test]
fn no_unresolved_functions() {
    let externs: Vec<&str> = PTX
        .lines()
        .filter(|l| l.contains(".extern .func"))
        .collect();
    assert!(externs.is_empty(), "unresolved: {externs:?}");
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
    assert!(
        PTX.contains(&format!(".target {arch}")),
        "PTX is not for {arch}"
    );
    let cc: u32 = arch["sm_".len()..].parse().expect("sm_XX");
    assert_eq!(ptx_target(PTX), Some(cc));
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
    let ring = PTX
        .split(".entry ")
        .find(|e| e.starts_with("ringreduce_float_sum("))
        .expect("the f32 sum ring entry");
    let mbarrier = ring.contains("mbarrier.test_wait.parity.shared.b64")
        && ring.contains("mbarrier.arrive.shared.b64")
        && ring.contains("mbarrier.init.shared.b64");
    let polled = ring.contains("ld.acquire.cta.shared.u32");
    if ptx_target(PTX).is_some_and(|cc| cc >= 80) {
        assert!(
            mbarrier && !polled,
            "sm_80+: expected the mbarrier hand-off"
        );
        assert!(
            PTX.contains(".version 7.1"),
            "mbarrier parity waits need PTX 7.1"
        );
    } else {
        assert!(
            polled && !mbarrier,
            "before sm_80: expected the polled hand-off"
        );
    }
}

/// The collectives' bounds on every entry but the task's and the local
/// ones, which have their own (several blocks per SM).
#[test]
fn every_entry_has_launch_bounds() {
    let entries = PTX.matches(".entry ").count();
    let locals = PTX.matches(&format!(".entry {LOCAL_ENTRY_PREFIX}")).count();
    assert_eq!(locals, 50);
    let bound = format!(".maxntid {BLOCK_THREADS}, 1, 1\n.minnctapersm 1\n");
    assert_eq!(PTX.matches(bound.as_str()).count(), entries - 1 - locals);
    let bound =
        format!(".maxntid {LOCAL_THREADS}, 1, 1\n.minnctapersm {LOCAL_MIN_BLOCKS_PER_SM}\n");
    let local_bounds = PTX
        .split(".entry ")
        .filter(|e| e.starts_with(LOCAL_ENTRY_PREFIX))
        .filter(|e| e.contains(&bound))
        .count();
    assert_eq!(local_bounds, locals);
    let task = PTX
        .split(".entry ")
        .find(|e| e.starts_with(&format!("{TASK_ENTRY}(")))
        .expect("the task entry");
    let bound = format!(".maxntid {TASK_THREADS}, 1, 1\n.minnctapersm {TASK_MIN_BLOCKS_PER_SM}\n");
    assert!(task.contains(&bound), "the task entry's bounds");
}

/// Every local entry reads its ranks' addresses in place from its own
/// argument (`arch::nvptx::param_ends!` names it `<entry>_param_0`, as
/// LLVM does) and keeps nothing in local memory: a copy of the argument on
/// the stack cost a quarter of a small call's kernel time
/// (`bench/NOTES.md`, twenty-first session).
#[test]
fn local_entries_read_their_argument_in_param_space() {
    let mut seen = 0;
    for body in PTX
        .split(".entry ")
        .filter(|e| e.starts_with(LOCAL_ENTRY_PREFIX))
    {
        let name = &body[..body.find('(').expect("an entry's parameter list")];
        let param = format!("{name}_param_0");
        let body = &body[..body.find("\n}").expect("an entry's end")];
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
    assert_eq!(seen, DataType::ALL.len() * Op::ALL.len());
}
