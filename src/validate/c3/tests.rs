//! Tests of [`super`] (c3).

use super::*;
use crate::config::{apply_scales, parse_scales};

#[test]
fn verdict_reads_the_claim_as_existential() {
    assert_eq!(verdict(&[true, true]), Verdict::Holds);
    assert_eq!(verdict(&[true, false]), Verdict::HoldsUnderAssumptions);
    assert_eq!(verdict(&[false, false]), Verdict::DoesNotHold);
    assert_eq!(verdict(&[]), Verdict::NotEstablished);
}

/// The previous rule read the closed form's agreement as the claim: one disagreeing point,
/// or none judged, made it "does not hold"; the revision says so when the verdicts differ.
#[test]
fn previous_rule_read_the_closed_form() {
    assert_eq!(previous_verdict(63, 0), Verdict::Holds);
    assert_eq!(previous_verdict(63, 4), Verdict::DoesNotHold);
    assert_eq!(previous_verdict(0, 0), Verdict::DoesNotHold);
    let moved = revision(63, 4, 8, 8, Verdict::Holds);
    assert_eq!(moved.previous, Verdict::DoesNotHold);
    assert!(moved.why.contains("59 of 63 points agree"), "{}", moved.why);
    assert!(moved.why.contains("reached on 8 of 8"), "{}", moved.why);
    assert!(revision(63, 0, 8, 8, Verdict::Holds)
        .why
        .starts_with("Unchanged"));
}

/// One profile, short base grid (the studies extend it past their thresholds).
fn on(hw: Hardware) -> Inputs {
    let mut inp = Inputs::bundled().unwrap();
    inp.profiles = vec![hw];
    inp.local_seqs = vec![512, 2048];
    inp.causal_local_seq = 1024;
    inp
}

/// A changed input changes the prose: the host time per op quoted is the profile's, and the
/// lengths and profiles are those simulated.
#[test]
fn the_prose_follows_the_profile_and_the_lengths() {
    let mut inp = on(load_hardware("dgx-a100-80gb").unwrap());
    inp.profiles[0].kernels.host.op_s.value = 20e-6;
    let c = check_with(&inp).unwrap();
    assert!(c.summary.contains("20.0 µs per op"), "{}", c.summary);
    assert!(
        c.summary.contains("over local lengths 512…"),
        "{}",
        c.summary
    );
    assert!(c.summary.contains("at s/p = 1024"));
    assert!(!c.summary.contains("9.4 µs"));
    assert_eq!(c.verdict, Verdict::Holds, "{}", c.summary);
}

/// The verdict is stable under small changes of bandwidth: GB200-NVL72 with its NVLink
/// scaled from 0.9× to 1.2× (`validate --hw gb200-nvl72 --scale intra=F`) reaches full
/// overlap every time — the thresholds move, the grid follows them, and no single length
/// near a threshold decides.
#[test]
fn the_verdict_is_stable_under_small_bandwidth_changes() {
    for f in ["0.9", "1.0", "1.05", "1.1", "1.2"] {
        let mut hw = load_hardware("gb200-nvl72").unwrap();
        apply_scales(&mut hw, &parse_scales(&[format!("intra={f}")]).unwrap()).unwrap();
        let c = check_with(&on(hw)).unwrap();
        assert_eq!(c.verdict, Verdict::Holds, "intra={f}: {}", c.summary);
    }
}

/// The rule can lose: with one receive buffer the transfer of the next block waits for the
/// current compute, the rings stay exposed at every length, and full overlap is reached on
/// no study.
#[test]
fn single_buffering_does_not_hold() {
    let mut inp = on(load_hardware("dgx-a100-80gb").unwrap());
    inp.options.metp.recv_buffers = 1;
    let c = check_with(&inp).unwrap();
    assert_eq!(c.verdict, Verdict::DoesNotHold, "{}", c.summary);
}

/// Nothing simulated, nothing judged: not established, never "does not hold".
#[test]
fn no_lengths_is_not_established() {
    let mut inp = on(load_hardware("dgx-a100-80gb").unwrap());
    inp.local_seqs.clear();
    let c = check_with(&inp).unwrap();
    assert_eq!(c.verdict, Verdict::NotEstablished, "{}", c.summary);
}
