//! Tests of [`super`] (c4).

use super::*;

/// The previous rule said "holds under assumptions" when any ratio over any baseline was in
/// range, even with a case below it; the new rule loses there.
#[test]
fn previous_rule_counted_any_ratio() {
    use Outcome::{Exceeds, Short, Within};
    assert_eq!(previous_verdict(2, 2, 5), Verdict::Holds);
    assert_eq!(previous_verdict(1, 2, 5), Verdict::HoldsUnderAssumptions);
    assert_eq!(previous_verdict(0, 2, 0), Verdict::DoesNotHold);
    let outcomes = [Within, Exceeds, Short];
    let r = revision(&outcomes, 30, 4, verdict(&outcomes));
    assert_eq!(r.previous, Verdict::HoldsUnderAssumptions);
    assert!(
        r.why.contains("so the verdict is 'does not hold'"),
        "{}",
        r.why
    );
    assert!(r.why.contains("1 within, 1 above, 1 below"), "{}", r.why);
}

#[test]
fn verdict_reads_the_range() {
    use Outcome::{Exceeds, Short, Within};
    assert_eq!(outcome(2.375), Within);
    assert_eq!(outcome(2.994), Within);
    assert_eq!((outcome(2.37), outcome(3.0)), (Short, Exceeds));
    assert_eq!(verdict(&[Within, Within]), Verdict::Holds);
    assert_eq!(verdict(&[Within, Exceeds]), Verdict::HoldsUnderAssumptions);
    assert_eq!(verdict(&[Within, Exceeds, Short]), Verdict::DoesNotHold);
    assert_eq!(verdict(&[]), Verdict::NotEstablished);
}

fn small() -> Inputs {
    let mut inp = Inputs::bundled().unwrap();
    inp.models
        .retain(|(id, _)| id == "gpt3-2.7b" || id == "llama2-7b");
    inp.profiles.truncate(1);
    inp
}

/// On the claim's setting METP reaches the range or goes beyond it.
#[test]
fn the_papers_setting_reaches_the_range() {
    let c = check_with(&small()).unwrap();
    assert!(
        matches!(c.verdict, Verdict::Holds | Verdict::HoldsUnderAssumptions),
        "{}",
        c.summary
    );
    assert!(
        c.summary.contains("reproduces the range on"),
        "{}",
        c.summary
    );
}

/// The rule can lose: with full recomputation every method stores only each layer's input,
/// so METP's advantage in stored activations shrinks and its longest sequence is no longer
/// 2.38× the best other method's.
#[test]
fn full_recomputation_falls_short() {
    let mut inp = small();
    inp.options.recompute = crate::config::Recompute::Full;
    let c = check_with(&inp).unwrap();
    assert_eq!(c.verdict, Verdict::DoesNotHold, "{}", c.summary);
    assert!(c.would_flip.contains("below 2.38×"), "{}", c.would_flip);
}
