//! The kill probe confirms every kill and returns one sample per kill (timing is not asserted;
//! `stopline bench kill` reports the figures).

use stopline_supervisor::kill_samples;

#[test]
fn kill_probe_of_ten_processes_confirms_every_kill() {
    let probe = kill_samples(10, 5).unwrap();
    println!("{}", serde_json::to_string(&probe).unwrap());
    assert_eq!(probe.n, 10);
    assert_eq!(probe.samples_us.len(), 5);
    // Each kill went from the write to an observed `populated 0`: it took some time.
    assert!(probe.samples_us.iter().all(|&us| us > 0), "{probe:?}");
}
