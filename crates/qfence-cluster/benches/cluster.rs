//! `cargo bench -p qfence-cluster`: commit latency on a three-node loopback cluster and forwarded
//! calls per second against a no-op controller. Prints figures; asserts nothing.

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a Tokio runtime");
    let options = qfence_cluster::bench::BenchOptions::default();
    match runtime.block_on(qfence_cluster::bench::run(&options)) {
        Ok(report) => println!("{report}"),
        Err(e) => {
            eprintln!("benchmark failed: {e}");
            std::process::exit(1);
        }
    }
}
