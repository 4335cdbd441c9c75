use super::*;

const T0: Timestamp = Timestamp(1_000_000);

fn at(ms: u64) -> Timestamp {
    T0.plus(Duration::from_millis(ms))
}

fn breaker() -> Breaker {
    Breaker::new(BreakerConfig::default())
}

#[test]
fn closed_runs_handlers() {
    let mut b = breaker();
    assert_eq!(b.admit(T0), (Admission::Run, None));
    assert_eq!(b.state(T0), BreakerState::Closed);
}

#[test]
fn opens_above_half_failed_with_at_least_four_samples() {
    let mut b = breaker();
    // Three failures: not enough samples, however bad.
    for i in 0..3 {
        assert_eq!(b.record(at(i), false), None);
    }
    assert_eq!(b.state(at(3)), BreakerState::Closed);
    let t = b.record(at(4), false);
    assert_eq!(
        t,
        Some(Transition {
            from: BreakerState::Closed,
            to: BreakerState::Open
        })
    );
    let s = b.snapshot(at(4));
    assert_eq!(s.opened_at, Some(at(4)));
    assert_eq!(
        (s.samples, s.failure_rate),
        (4, 1.0),
        "the rate that opened it"
    );
}

#[test]
fn exactly_half_failed_stays_closed() {
    let mut b = breaker();
    for (i, ok) in [true, false, true, false].into_iter().enumerate() {
        assert_eq!(b.record(at(i as u64), ok), None);
    }
    assert_eq!(b.state(at(5)), BreakerState::Closed);
    let s = b.snapshot(at(5));
    assert_eq!(s.samples, 4);
    assert_eq!(s.failure_rate, 0.5);
    // One more failure: 3 of 5 > 50 %.
    assert!(b.record(at(6), false).is_some());
    assert_eq!(b.state(at(6)), BreakerState::Open);
}

#[test]
fn outcomes_older_than_the_window_do_not_count() {
    let mut b = breaker();
    for i in 0..3 {
        b.record(at(i), false);
    }
    // At 60 001 ms the one at 2 ms is still inside the window (now - 60 s, now]...
    assert_eq!(b.snapshot(at(60_001)).samples, 1);
    // ...and a minute after the last of them, all three have left it.
    assert_eq!(b.record(at(60_002), false), None);
    assert_eq!(b.snapshot(at(60_002)).samples, 1);
    assert_eq!(b.state(at(60_002)), BreakerState::Closed);
}

#[test]
fn open_skips_until_thirty_seconds_then_half_open_admits_one_probe() {
    let mut b = breaker();
    for i in 0..4 {
        b.record(at(i), false);
    }
    let opened = at(3);
    let (adm, t) = b.admit(at(10_000));
    assert_eq!(
        adm,
        Admission::Skip {
            retry_at: opened.plus(Duration::from_secs(30))
        }
    );
    assert_eq!(t, None);
    assert_eq!(
        b.state(opened.plus(Duration::from_millis(29_999))),
        BreakerState::Open
    );
    let half = opened.plus(Duration::from_secs(30));
    assert_eq!(b.state(half), BreakerState::HalfOpen);
    let (adm, t) = b.admit(half);
    assert_eq!(adm, Admission::Probe);
    assert_eq!(
        t,
        Some(Transition {
            from: BreakerState::Open,
            to: BreakerState::HalfOpen
        })
    );
    // Only one probe at a time.
    let (adm, _) = b.admit(half);
    assert_eq!(
        adm,
        Admission::Skip {
            retry_at: half.plus(Duration::from_secs(1))
        }
    );
    assert!(b.snapshot(half).probe_in_flight);
}

fn half_open() -> (Breaker, Timestamp) {
    let mut b = breaker();
    for i in 0..4 {
        b.record(at(i), false);
    }
    let half = at(3).plus(Duration::from_secs(30));
    assert_eq!(b.admit(half).0, Admission::Probe);
    (b, half)
}

#[test]
fn a_successful_probe_closes() {
    let (mut b, t) = half_open();
    assert_eq!(
        b.record(t, true),
        Some(Transition {
            from: BreakerState::HalfOpen,
            to: BreakerState::Closed
        })
    );
    assert_eq!(b.admit(t).0, Admission::Run);
    let s = b.snapshot(t);
    assert_eq!(
        (s.samples, s.opened_at, s.probe_in_flight),
        (0, None, false)
    );
}

#[test]
fn a_failed_probe_reopens_for_another_thirty_seconds() {
    let (mut b, t) = half_open();
    assert_eq!(
        b.record(t, false),
        Some(Transition {
            from: BreakerState::HalfOpen,
            to: BreakerState::Open
        })
    );
    assert_eq!(
        b.admit(t).0,
        Admission::Skip {
            retry_at: t.plus(Duration::from_secs(30))
        }
    );
    assert_eq!(
        b.state(t.plus(Duration::from_secs(30))),
        BreakerState::HalfOpen
    );
}

#[test]
fn a_released_probe_lets_the_next_event_probe() {
    let (mut b, t) = half_open();
    assert!(matches!(b.admit(t).0, Admission::Skip { .. }));
    b.release_probe();
    assert_eq!(
        b.admit(t).0,
        Admission::Probe,
        "without release this would deadlock"
    );
}

#[test]
fn many_outcomes_in_one_millisecond_share_one_entry() {
    let mut b = breaker();
    for _ in 0..10_000 {
        b.record(T0, true);
    }
    for _ in 0..3 {
        b.record(T0, false);
    }
    assert_eq!(
        b.outcomes.len(),
        1,
        "memory must not grow with the event rate"
    );
    let s = b.snapshot(T0);
    assert_eq!(s.samples, 10_003);
    assert!((s.failure_rate - 3.0 / 10_003.0).abs() < 1e-12);
    assert_eq!(b.state(T0), BreakerState::Closed);
}

#[test]
fn config_validation() {
    assert!(BreakerConfig::default().validate().is_ok());
    for bad in [
        BreakerConfig {
            failure_threshold: 1.0,
            ..BreakerConfig::default()
        },
        BreakerConfig {
            failure_threshold: 0.0,
            ..BreakerConfig::default()
        },
        BreakerConfig {
            min_samples: 0,
            ..BreakerConfig::default()
        },
        BreakerConfig {
            open_for: Duration::ZERO,
            ..BreakerConfig::default()
        },
    ] {
        assert!(bad.validate().is_err(), "{bad:?}");
    }
}

#[test]
fn a_shared_opening_is_followed_until_a_probe_closes_it() {
    let mut b = breaker();
    let t = b.force_open(at(1_000));
    assert_eq!(t.map(|t| t.to), Some(BreakerState::Open));
    assert_eq!(
        b.admit(at(2_000)).0,
        Admission::Skip {
            retry_at: at(31_000)
        }
    );
    // The same opening again changes nothing.
    assert_eq!(b.force_open(at(1_000)), None);
    assert_eq!(b.state(at(31_000)), BreakerState::HalfOpen);
    // Another process's probe closed it: a fresh start, and that opening (read late) is over.
    assert_eq!(
        b.force_close(at(31_500)).map(|t| t.to),
        Some(BreakerState::Closed)
    );
    assert_eq!(b.force_open(at(1_000)), None);
    assert_eq!(b.admit(at(31_600)).0, Admission::Run);
    // A later opening opens it again.
    assert_eq!(
        b.force_open(at(40_000)).map(|t| t.to),
        Some(BreakerState::Open)
    );
    assert_eq!(
        b.force_close(at(70_000)).map(|t| t.from),
        Some(BreakerState::Open)
    );
    assert_eq!(b.force_close(at(70_001)), None, "closed already");
}
