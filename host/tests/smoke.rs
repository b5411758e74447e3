use ringreduce::*;
#[test]
fn smoke() {
    for k in [2usize, 3, 4] {
        let n = 1000;
        let comm = CpuCommunicator::new(k).unwrap();
        let inputs: Vec<Vec<f32>> = (0..k).map(|r| (0..k * n).map(|i| (i * 7 + r * 13) as f32).collect()).collect();
        let sends: Vec<_> = inputs.iter().map(|v| HostBuffer::from_slice(v)).collect();
        let recvs: Vec<_> = (0..k).map(|_| HostBuffer::<f32>::zeroed(n)).collect();
        let bufs: Vec<_> = (0..k).map(|r| CpuBuffers::out_of_place(sends[r].as_view(), recvs[r].as_view())).collect();
        comm.reduce_scatter(&bufs, Op::Sum).unwrap();
        comm.synchronize().unwrap();
        let refs: Vec<&[f32]> = inputs.iter().map(|v| v.as_slice()).collect();
        let want = reference::reduce_scatter(&refs, comm.ring_order(), Op::Sum);
        for r in 0..k { assert_eq!(recvs[r].to_vec(), want[r], "k={k} r={r}"); }
    }
}
