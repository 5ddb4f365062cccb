//! Tests of [`super`] (c2).

use super::*;

/// 1 − 7/(p + 4) = 5/12 exactly at p = 8 (DESIGN §1).
#[test]
fn design_accounting_reproduces_five_twelfths_at_eight() {
    assert!((design_saving(8.0, 1.0, false) - 5.0 / 12.0).abs() < 1e-15);
    assert!(meets(design_saving(8.0, 1.0, false)));
    assert!(!meets(design_saving(4.0, 1.0, false)));
}

/// The previous rule counted any accounting at any degree: it could not lose while one of
/// them met 41.7% somewhere.
#[test]
fn previous_rule_counted_any_accounting() {
    assert_eq!(previous_verdict(&[vec![0.5, 0.6]]), Verdict::Holds);
    assert_eq!(
        previous_verdict(&[vec![0.125, 0.417], vec![0.1, 0.1]]),
        Verdict::HoldsUnderAssumptions
    );
    assert_eq!(previous_verdict(&[vec![0.1, 0.2]]), Verdict::DoesNotHold);
    let p = |v| Previous {
        verdict: v,
        design_met: "for p ≥ 8".into(),
        model: "m".into(),
    };
    let moved = revision(p(Verdict::HoldsUnderAssumptions), Verdict::DoesNotHold);
    assert!(
        moved.why.contains("the verdict is 'does not hold'"),
        "{}",
        moved.why
    );
    let same = revision(p(Verdict::Holds), Verdict::Holds);
    assert!(same.why.starts_with("Unchanged"), "{}", same.why);
}

#[test]
fn verdict_follows_the_savings() {
    assert_eq!(verdict(&[(0.5, 0.6), (0.42, 0.9)]), Verdict::Holds);
    assert_eq!(
        verdict(&[(0.1, 0.6), (0.5, 0.42)]),
        Verdict::HoldsUnderAssumptions
    );
    assert_eq!(verdict(&[(0.5, 0.6), (0.1, 0.3)]), Verdict::DoesNotHold);
    assert_eq!(verdict(&[]), Verdict::NotEstablished);
}

fn small() -> Inputs {
    let mut inp = Inputs::on(&load_hardware("dgx-a100-80gb").unwrap()).unwrap();
    inp.models
        .retain(|(id, _)| id == "gpt3-6.7b" || id == "llama2-7b");
    inp.degrees = vec![4, 8];
    inp
}

/// On the claim's setting the inventories give METP its saving.
#[test]
fn the_papers_setting_holds() {
    let c = check_with(&small()).unwrap();
    assert_eq!(c.verdict, Verdict::Holds, "{}", c.summary);
    assert!(
        c.summary.contains("the claim holds as stated"),
        "{}",
        c.summary
    );
}

/// The rule can lose: on one device, with METP storing Q, K, V and the MLP activation
/// input instead of recomputing them, METP holds nearly TP's tensors — it saves about a
/// fifth of the activations and less of the peak, not 41.7%.
#[test]
fn one_device_without_recomputation_does_not_save_enough() {
    let mut inp = small();
    inp.models = vec![("gpt3-1.3b".into(), load_model("gpt3-1.3b").unwrap())];
    inp.p = 1;
    inp.options.metp.store_qkv = true;
    inp.options.metp.store_mlp_act = true;
    let c = check_with(&inp).unwrap();
    assert_eq!(c.verdict, Verdict::DoesNotHold, "{}", c.summary);
}

/// Grouped-query models are not the claim's setting: nothing judged, not established.
#[test]
fn grouped_query_models_alone_are_not_established() {
    let mut inp = small();
    inp.models = vec![("llama3-8b".into(), load_model("llama3-8b").unwrap())];
    let c = check_with(&inp).unwrap();
    assert_eq!(c.verdict, Verdict::NotEstablished, "{}", c.summary);
    assert!(
        c.summary.contains("not multi-head attention"),
        "{}",
        c.summary
    );
}
