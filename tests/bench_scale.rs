//! `iwarp bench` at scale over the embedded default: 64 QPs spread over 4 cores per node,
//! every test with every octet verified, the per-QP figures and their aggregate.

use iwarp::bench::{run_embedded, BenchOptions, Length, Test};
use iwarp::report::Sample;

fn opts(test: Test, qps: usize, cores: usize) -> BenchOptions {
    BenchOptions {
        test,
        sizes: vec![1024],
        length: Length::Iterations(40),
        tx_depth: 16,
        verify: true,
        qps,
        cores,
        ..BenchOptions::default()
    }
}

#[test]
fn sixty_four_qps_over_four_cores_every_test_verified() {
    for test in [
        Test::WriteBw,
        Test::ReadBw,
        Test::SendBw,
        Test::WriteLat,
        Test::ReadLat,
        Test::SendLat,
    ] {
        let out = run_embedded(&opts(test, 64, 4)).unwrap_or_else(|e| panic!("{test:?}: {e}"));
        let r = &out.report;
        assert_eq!(r.per_qp.len(), 64, "{test:?}");
        // QP q opens from core q % 4: 16 connections per core.
        let mut per_core = [0usize; 4];
        for q in &r.per_qp {
            per_core[q.core as usize] += 1;
            assert_eq!(q.core, q.qp % 4, "{test:?} QP {}", q.qp);
            assert_eq!(q.samples.len(), 1);
        }
        assert_eq!(per_core, [16; 4], "{test:?}");
        let v = r.verify.expect("verified");
        assert_eq!(v.wrong_octets, 0);
        assert_eq!(v.verified_octets, v.expected_octets, "{test:?}");
        let ping_pong = matches!(test, Test::WriteLat | Test::SendLat);
        assert_eq!(
            v.expected_octets,
            64 * 40 * 1024 * if ping_pong { 2 } else { 1 },
            "{test:?}: every octet of every QP"
        );
        // The aggregate holds every QP's messages.
        match r.samples[0] {
            Sample::Bw(b) => {
                assert_eq!(b.iterations, 64 * 40);
                let sum: f64 = r
                    .per_qp
                    .iter()
                    .map(|q| match q.samples[0] {
                        Sample::Bw(b) => b.avg_mib_s,
                        Sample::Lat(_) => 0.0,
                    })
                    .sum();
                // Over the whole span, never more than the QPs' own rates added up.
                assert!(
                    b.avg_mib_s > 0.0 && b.avg_mib_s <= sum * 1.0001,
                    "{b:?} vs {sum}"
                );
            }
            Sample::Lat(l) => assert_eq!(l.iterations, 64 * 40, "{test:?}"),
        }
    }
}

#[test]
fn bidirectional_runs_clients_on_both_nodes() {
    let mut o = opts(Test::WriteBw, 3, 2);
    o.bidirectional = true;
    let out = run_embedded(&o).unwrap();
    let r = &out.report;
    assert!(r.params.bidirectional);
    let from_a = r.per_qp.iter().filter(|q| q.direction == "A").count();
    let from_b = r.per_qp.iter().filter(|q| q.direction == "B").count();
    assert_eq!((from_a, from_b), (3, 3));
    let v = r.verify.unwrap();
    assert_eq!(v.verified_octets, 6 * 40 * 1024);
    match r.samples[0] {
        Sample::Bw(b) => assert_eq!(b.iterations, 6 * 40),
        Sample::Lat(_) => panic!("a bandwidth test"),
    }
}

#[test]
fn bad_scale_options_are_refused() {
    for (qps, cores, want) in [
        (0, 1, "-q must be"),
        (1, 0, "--cores must be"),
        (1, 65, "--cores must be"),
    ] {
        let e = run_embedded(&opts(Test::WriteBw, qps, cores)).unwrap_err();
        assert!(e.to_string().contains(want), "{e}");
    }
}
