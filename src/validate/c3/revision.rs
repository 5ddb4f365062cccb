//! C3's previous rule and what this round's rule changed against it, from the numbers.

use super::*;

/// The previous round's rule: holds when at least one point is judged and the closed form
/// agrees at every one, else does not hold.
pub fn previous_verdict(judged: usize, disagreements: usize) -> Verdict {
    if judged > 0 && disagreements == 0 {
        Verdict::Holds
    } else {
        Verdict::DoesNotHold
    }
}

/// What this round's rule changed, from the numbers (see [`super::super::Revision`]).
pub(super) fn revision(
    judged: usize,
    disagreements: usize,
    reached: usize,
    studies: usize,
    verdict: Verdict,
) -> super::super::Revision {
    let previous = previous_verdict(judged, disagreements);
    let read = format!(
        "it read the closed form's point-by-point agreement as the claim (here {} of {judged} \
         points agree)",
        judged - disagreements
    );
    let why = if previous == verdict {
        format!(
            "Unchanged: the previous rule gives '{}' too — {read}. The claim is existential (a \
             condition above which full overlap is reached); this rule asks exactly that, on \
             each study, and full overlap is reached on {reached} of {studies}.",
            previous.words()
        )
    } else {
        format!(
            "The previous rule gives '{}': {read}, and judged 'exposed above 2% below the \
             threshold', which the claim does not assert. The claim is existential — a \
             condition above which full overlap is reached — and it is reached on {reached} of \
             {studies} studies, so the verdict is '{}'; the closed form's agreement is \
             reported as a finding.",
            previous.words(),
            verdict.words()
        )
    };
    super::super::Revision {
        previous,
        previous_rule: "holds when the closed-form condition and the simulation agree at every \
                        point judged (and some point is judged), else does not hold"
            .into(),
        why,
    }
}

pub(super) fn disagreements(s: &Study) -> usize {
    s.rows.iter().filter(|r| r.agrees == Some(false)).count()
}
