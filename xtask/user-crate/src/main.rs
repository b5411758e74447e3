//! A crate outside the ringreduce workspace, on stable Rust, that depends on
//! the packaged crates and runs one reduce-scatter on the CPU execution
//! (`cargo xtask package-check` builds and runs it).

use ringreduce::{CpuBuffers, CpuCommunicator, HostBuffer, Op};

fn main() -> ringreduce::Result<()> {
    let (k, n) = (3usize, 1000usize);
    let comm = CpuCommunicator::new(k)?;
    // Rank r sends k blocks of n values; value j of rank r is r * 10 + j % 7.
    let send: Vec<HostBuffer<i32>> = (0..k)
        .map(|r| {
            let v: Vec<i32> = (0..k * n).map(|j| (r * 10 + j % 7) as i32).collect();
            HostBuffer::from_slice(&v)
        })
        .collect();
    let recv: Vec<HostBuffer<i32>> = (0..k).map(|_| HostBuffer::zeroed(n)).collect();
    let bufs: Vec<CpuBuffers<i32>> = (0..k)
        .map(|u| CpuBuffers::out_of_place(send[u].as_view(), recv[u].as_view()))
        .collect();
    comm.reduce_scatter(&bufs, Op::Sum)?;
    comm.synchronize()?;
    let mut wrong = 0;
    for (u, r) in recv.iter().enumerate() {
        for (i, &got) in r.to_vec().iter().enumerate() {
            let j = u * n + i;
            let want: i32 = (0..k).map(|r| (r * 10 + j % 7) as i32).sum();
            wrong += usize::from(got != want);
        }
    }
    println!("user crate: reduce-scatter of {k} ranks x {n} i32 on the CPU execution, {wrong} wrong");
    if wrong != 0 {
        std::process::exit(1);
    }
    Ok(())
}
