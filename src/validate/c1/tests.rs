//! Tests of [`super`] (c1).

use super::*;

fn small() -> Inputs {
    let mut inp = Inputs::bundled().unwrap();
    inp.cases.truncate(1);
    inp
}

/// The previous rule read one case's block and peak; it gives each verdict, and the
/// revision says "unchanged" only when the two rules agree.
#[test]
fn previous_rule_is_rerun_on_the_numbers() {
    assert_eq!(previous_verdict(-3.0, -2.95), Verdict::Holds);
    assert_eq!(
        previous_verdict(-3.0, -1.15),
        Verdict::HoldsUnderAssumptions
    );
    assert_eq!(previous_verdict(-1.0, -1.0), Verdict::DoesNotHold);
    let case = Case {
        model_id: "m".into(),
        ..small().cases[0].clone()
    };
    let m = Measured {
        points: vec![],
        quad: -3.0,
        peak: -1.15,
        transient: -2.0,
    };
    let label = |c: &Case| c.model_id.clone();
    let same = revision(Some((&case, &m)), 5, Verdict::HoldsUnderAssumptions, &label).unwrap();
    assert!(same.why.starts_with("Unchanged"), "{}", same.why);
    let moved = revision(Some((&case, &m)), 5, Verdict::DoesNotHold, &label).unwrap();
    assert_eq!(moved.previous, Verdict::HoldsUnderAssumptions);
    assert!(
        moved.why.contains("the verdict is 'does not hold'"),
        "{}",
        moved.why
    );
}

#[test]
fn verdict_follows_the_exponents() {
    assert_eq!(verdict(&[(-3.0, -3.02), (-3.0, -2.95)]), Verdict::Holds);
    assert_eq!(
        verdict(&[(-3.0, -1.15), (-3.0, -3.0)]),
        Verdict::HoldsUnderAssumptions
    );
    assert_eq!(verdict(&[(-3.0, -1.1), (-1.0, -1.0)]), Verdict::DoesNotHold);
    assert_eq!(verdict(&[]), Verdict::NotEstablished);
}

/// METP's s² memory (its unfused attention block) falls as p⁻³ while its peak falls as
/// about p⁻¹: holds under the assumption of what "memory cost" counts.
#[test]
fn metp_holds_for_its_s2_memory_only() {
    let c = check_with(&small()).unwrap();
    assert_eq!(c.verdict, Verdict::HoldsUnderAssumptions, "{}", c.summary);
    let e = c.measured["korthikanti-22b s=131072"]["s2_memory_exponent"]
        .as_f64()
        .unwrap();
    assert!((e + 3.0).abs() < 0.05, "{e}");
}

/// The rule can lose: measured the same way, TP's s² memory (its stored scores, a·s²/p per
/// layer) falls as p⁻¹, so were METP's memory like TP's the claim would not hold.
#[test]
fn memory_like_tps_does_not_hold() {
    let mut inp = small();
    inp.method = MethodId::Tp;
    inp.degrees = vec![2, 4, 8];
    let c = check_with(&inp).unwrap();
    assert_eq!(c.verdict, Verdict::DoesNotHold, "{}", c.summary);
    assert!(c
        .summary
        .contains("tp (in place of METP)'s s² memory falls slower"));
}

/// A one-layer model with h = 256 and a small vocabulary at s = 2^20 is all attention
/// block — at p = 2 one block of scores is 2·8·2^38 B = 4 TiB against about 1 GiB of
/// everything else but the reserved bytes — so the whole peak falls as 1/p³: holds.
#[test]
fn a_model_that_is_all_attention_block_holds_whole() {
    let mut inp = small();
    let m = &mut inp.cases[0].model;
    (
        m.layers,
        m.hidden,
        m.heads,
        m.kv_heads,
        m.ffn_hidden,
        m.vocab,
    ) = (1, 256, 16, 16, 1024, 1024);
    inp.cases[0].seq = 1 << 20;
    inp.degrees = vec![2, 4, 8];
    let c = check_with(&inp).unwrap();
    assert_eq!(c.verdict, Verdict::Holds, "{}", c.summary);
    assert!(c.summary.contains("here the s² block is the memory"));
}

/// Nothing to judge is not a verdict against the claim: too few degrees leave no case
/// judged, "not established".
#[test]
fn no_judged_case_is_not_established() {
    let mut inp = small();
    inp.degrees = vec![8, 16];
    let c = check_with(&inp).unwrap();
    assert_eq!(c.verdict, Verdict::NotEstablished, "{}", c.summary);
}
