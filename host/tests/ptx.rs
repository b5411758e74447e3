//! The embedded PTX holds every kernel and calls nothing it does not define.

use ringreduce::gpu::module::{all_kernel_names, PTX};
use ringreduce::kernels::abi::BLOCK_THREADS;

#[test]
fn every_kernel_entry_is_present() {
    let names = all_kernel_names();
    // 10 types x 5 ops, four bench kernels and the gradient layer's task.
    assert_eq!(names.len(), 55);
    for n in names {
        let decl = format!(".entry {n}(");
        assert!(PTX.contains(&decl), "missing kernel {n}");
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

#[test]
fn targets_the_requested_architecture() {
    let arch = std::env::var("RINGREDUCE_PTX_ARCH").unwrap_or_else(|_| "sm_70".into());
    assert!(
        PTX.contains(&format!(".target {arch}")),
        "PTX is not for {arch}"
    );
}

#[test]
fn every_entry_has_launch_bounds() {
    let entries = PTX.matches(".entry ").count();
    assert!(entries > 0);
    let bound = format!(".maxntid {BLOCK_THREADS}, 1, 1");
    assert_eq!(PTX.matches(bound.as_str()).count(), entries);
    assert_eq!(PTX.matches(".minnctapersm 1\n").count(), entries);
}
