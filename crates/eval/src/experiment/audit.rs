//! The losslessness audit of a run (every greedy speculative output equals AR's, or in a
//! `numerical` audit differs only at a near-tie of the target) and what a run produced.

use super::config::{AuditConfig, AuditMode};
use super::manifest::EvalManifest;
use crate::common::results::ResultRow;

/// What a finished (or partial) run produced.
#[derive(Debug)]
pub struct EvalOutcome {
    pub manifest: EvalManifest,
    pub rows: Vec<ResultRow>,
    /// Greedy rows whose output differs from AR's and that the audit fails.
    pub audit_failures: Vec<String>,
    /// Greedy rows whose output differs from AR's at a near-tie (a `numerical` audit).
    pub numerical_flips: Vec<String>,
}

/// What the losslessness audit found: greedy speculative outputs that differ from AR's, as
/// failures, and (in a `numerical` audit) as near-tie flips.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Audit {
    pub failures: Vec<String>,
    pub numerical: Vec<String>,
}

/// The losslessness audit: every greedy speculative output must equal AR's, except, in a
/// `numerical` audit, outputs whose first departure is a near-tie of the target.
pub fn audit(rows: &[ResultRow], cfg: &AuditConfig) -> Audit {
    let mut out = Audit::default();
    for r in rows.iter().filter(|r| r.greedy() && !r.identical_to_ar && !r.replayed) {
        let what = format!(
            "{} {} ({}, seed {}): {} differs from AR",
            r.dataset,
            r.prompt_id,
            r.sampling,
            r.seed,
            r.setting.key()
        );
        match &r.divergence {
            Some(d) => {
                let line = format!(
                    "{what} from token {} on (AR {}, got {}; target logit margin {:.2e})",
                    d.position, d.ar_token, d.token, d.margin
                );
                if cfg.mode == AuditMode::Numerical && d.margin.abs() <= cfg.near_tie {
                    out.numerical.push(line);
                } else {
                    out.failures.push(line);
                }
            }
            None => out.failures.push(what),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::common::results::Divergence;
    use crate::method::{MethodSpec, Setting};

    fn row(identical: bool, divergence: Option<Divergence>, temperature: f32) -> ResultRow {
        ResultRow {
            identical_to_ar: identical,
            divergence,
            temperature,
            ..ResultRow::example(Setting::Speculative(MethodSpec::plain(crate::method::policy::Fixed { k: 4 })))
        }
    }

    #[test]
    fn the_numerical_audit_excuses_near_ties_only() {
        let tie = Divergence { position: 5, ar_token: 10, token: 11, margin: 3e-4 };
        let wide = Divergence { position: 2, ar_token: 10, token: 12, margin: 1.5 };
        let rows = vec![
            row(true, None, 0.0),
            row(false, Some(tie.clone()), 0.0),
            row(false, Some(wide), 0.0),
            row(false, None, 0.7),
        ];
        let exact = audit(&rows, &AuditConfig::default());
        assert_eq!((exact.failures.len(), exact.numerical.len()), (2, 0), "{exact:?}");
        assert!(
            exact.failures[0].contains("from token 5 on") && exact.failures[0].contains("3.00e-4"),
            "{:?}",
            exact.failures
        );
        let numerical = audit(&rows, &AuditConfig { mode: AuditMode::Numerical, near_tie: 0.01 });
        assert_eq!((numerical.failures.len(), numerical.numerical.len()), (1, 1), "{numerical:?}");
        assert!(numerical.failures[0].contains("margin 1.50e0"), "{:?}", numerical.failures);
        // A differing greedy row without a recorded divergence (an older run) always fails.
        let old = audit(&[row(false, None, 0.0)], &AuditConfig { mode: AuditMode::Numerical, near_tie: 10.0 });
        assert_eq!(old.failures.len(), 1);
    }
}
