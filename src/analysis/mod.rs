//! Campaign analysis: from per-job samples to the report, free of I/O.
//!
//! Consumes, per phase, every configuration's jobs with their rounds and
//! events, the frozen analysis policy, the canary pair, the declared controls
//! and the context a claim must name. Produces the [`Report`]: per
//! configuration and phase statistics, every pair's interval and relation,
//! proxy agreement, the canary verdict and the controls. Refuses: a phase
//! whose configurations ran in different rounds, fewer than two jobs per
//! configuration, values that are not positive, a canary or control naming an
//! unknown configuration, a tie policy other than `interval`.
//!
//! Method: docs/METHODS.md, "Campaign analysis".
pub mod agreement;
pub mod capacity;
mod controls;
pub mod inference;
mod model;
pub mod overlap;
mod phase;
pub mod policy;
pub mod queue;
pub mod ranking;
mod replicate;
pub mod summary;
mod tau;
mod text;
pub mod truth;
use crate::analysis::controls::{aa_control, canary_result, interval_words, known_bad_control, skew_control, AaPair};
use crate::analysis::inference::Verdict;
use crate::analysis::phase::{analyze_phase, pair_rows, tables};
use crate::analysis::ranking::{Relation, TiePolicy};
use crate::analysis::tau::tau_estimates;
use crate::core::workload::Phase;
use crate::core::{identity, par};
use anyhow::{bail, Context, Result};

pub use crate::analysis::controls::{aa_level, aa_outcome};
pub use crate::analysis::inference::COVERAGE;
pub use crate::analysis::model::{
    AaFamily, CanarySection, ClockExcerpt, ClockRankWindows, ControlResult, DelayCounts, PhaseReport, ProxyAgreement,
    TimelineExcerpt, TraceCanaryInput, TraceClaim,
};
pub use crate::analysis::model::{
    AnalysisInput, CanaryClaim, CanaryResult, ClaimContext, ConfigRow, ControlOutcome, ControlsInput, JobData,
    KnownBadInput, PairRow, PhaseInput, Quantiles, RankModel, Report, TauEstimate, TraceCanaryReport, TraceKindClaim,
    TraceVariantAgreement, ECDF_STEP_PCT, REPORT_FORMAT_VERSION,
};
pub(crate) use crate::analysis::replicate::render_replication;
pub use crate::analysis::replicate::{replicate, PairReplication, Replication, ReplicationOutcome};
pub(crate) use crate::analysis::text::regret_words;
pub use crate::analysis::text::{control_counts, ranking_csv, render, render_short};

/// How every interval of the report is made, and what its coverage was measured to be.
pub(crate) const INTERVAL_METHOD: &str = "Student-t interval (n-1 degrees of freedom) of the mean per-round log-ratio \
    of per-job statistics, the pairs of a phase and metric simultaneous at 95% (each at 1 - 0.05/pairs, \
    Bonferroni-Dunn), the campaign's K A/A controls one family at 95% (each at 1 - 0.05/K, or its phase's pair level \
    when higher), the canary a single planned 95% interval; simulated coverage at 3, 5, 10 and 20 rounds under \
    Gaussian, Student-t3, skewed and round-drift job noise was at least 94.9% in every cell (docs/CAMPAIGNS.md, \
    \"Calibration\"; rerun with `cargo bench --bench calibration`); with 2 rounds only the Gaussian case is exact";

/// Each trace variant's ranking against the source variant's, from the
/// phase's jobs (the same computation as [`agreement::proxy_against_truth`]).
fn trace_canary_report(input: &AnalysisInput, tc: &TraceCanaryInput, evidence: &str) -> Result<TraceCanaryReport> {
    let pin = input
        .phases
        .iter()
        .find(|p| p.phase == tc.phase)
        .with_context(|| format!("the trace canary phase {} was not run", tc.phase))?;
    let sub = |labels: &[String]| -> Result<PhaseInput> {
        if labels.len() != tc.configs.len() {
            bail!("a trace variant names {} labels for {} configurations", labels.len(), tc.configs.len());
        }
        let mut jobs = Vec::new();
        for l in labels {
            let i =
                pin.labels.iter().position(|x| x == l).with_context(|| {
                    format!("trace_canary names {l:?}, which is not a configuration of the campaign")
                })?;
            jobs.push(pin.jobs[i].clone());
        }
        Ok(PhaseInput { phase: tc.phase, labels: tc.configs.clone(), jobs })
    };
    let truth = sub(&tc.source.2)?;
    let mut variants = Vec::new();
    let mut source_ranking = None;
    for (v, sha, labels) in &tc.variants {
        let ev = format!("{evidence}; variant {v} (proxy) against {} (truth) in phase {}", tc.source.0, tc.phase);
        let (_, tr, a) = agreement::proxy_against_truth(&sub(labels)?, &truth, &input.policy, &ev)?;
        source_ranking.get_or_insert(tr);
        variants.push(TraceVariantAgreement { variant: v.clone(), trace_sha256: sha.clone(), agreement: a });
    }
    let source_ranking = match source_ranking {
        Some(r) => r,
        None => analyze_phase(&truth, &input.policy)?.0,
    };
    Ok(TraceCanaryReport {
        phase: tc.phase,
        configs: tc.configs.clone(),
        source: tc.source.0.clone(),
        source_trace_sha256: tc.source.1.clone(),
        source_ranking,
        variants,
        scope: "the ranking only; coverage, latency quantiles per kind, hidden communication, tail recall, structure, \
            decision cost and the assurance state are canary verify's (canary-verify.json beside the campaign)"
            .into(),
    })
}

/// Analyze. `completeness` is the verify verdict the caller obtained (the
/// caller refuses to analyze an incomplete campaign).
pub fn analyze(input: &AnalysisInput, completeness: policy::Verdict, evidence: &str) -> Result<Report> {
    let policy = &input.policy;
    if policy.tie_policy != TiePolicy::Interval {
        bail!(
            "tie_policy {:?}: a campaign's relations come from their printed intervals since report format 2; plan the \
                campaign with tie_policy = \"interval\" (strict and iqr remain for `compare` on summary tables)",
            policy.tie_policy
        );
    }
    let known = |l: &str| -> Result<()> {
        if input.phases.first().is_some_and(|p| !p.labels.iter().any(|x| x == l)) {
            bail!("a control or canary names {l:?}, which is not a configuration of the campaign");
        }
        Ok(())
    };
    let (mut phases, mut tabs) = (Vec::new(), Vec::new());
    // the phases are independent (each its own seeded draws): computed side by side (`core::par`), kept in order,
    // so the values are a plain map's
    for (p, done) in input.phases.iter().zip(par::map(&input.phases, par::available(), &|p| analyze_phase(p, policy))) {
        let (r, t) = done?;
        phases.push(r);
        tabs.push((p, t));
    }
    // proxies against blocking
    let mut proxy_vs_blocking = Vec::new();
    if let Some(bi) = phases.iter().position(|p| p.phase == Phase::Blocking) {
        let labels = input.phases[bi].labels.clone();
        let summaries = phases[bi].summaries(&labels);
        let tr: Vec<Relation> = phases[bi].pairs.iter().map(|p| p.relation).collect();
        let proxies: Vec<usize> = (0..phases.len())
            .filter(|&pi| phases[pi].phase != Phase::Blocking && input.phases[pi].labels == labels)
            .collect();
        // each proxy's resampled τ-b is independent of the others' (each its own seeded draws)
        let taus = par::map(&proxies, par::available(), &|&pi| {
            tau_estimates(&tabs[pi].1.table, &tabs[bi].1.table, policy, phases[pi].pair_coverage)
        });
        for (&pi, (tau_policy, tau_plain)) in proxies.iter().zip(taus) {
            let p = &phases[pi];
            let pr: Vec<Relation> = p.pairs.iter().map(|x| x.relation).collect();
            let ev = format!("{evidence}; proxy phase {}, truth phase blocking", p.phase);
            proxy_vs_blocking.push(ProxyAgreement {
                proxy: p.phase,
                truth: Phase::Blocking,
                comparison: ranking::compare_relations(&summaries, &pr, &tr, policy.tie_policy, &ev)?,
                tau_policy,
                tau_plain,
            });
        }
    }
    // controls: A/A in every phase; known-bad in the judged phase; skew per job
    let mut controls = Vec::new();
    let aa_count = input.controls.aa_pairs.len() * tabs.len();
    for (a, b) in &input.controls.aa_pairs {
        known(a)?;
        known(b)?;
        for ((pin, t), pr) in tabs.iter().zip(&phases) {
            let col = |l: &str| pin.labels.iter().position(|x| x == l).expect("known");
            controls.push(aa_control(
                &AaPair { a, b, ca: col(a), cb: col(b) },
                pin.phase,
                &t.table,
                policy,
                aa_level(aa_count, pr.pair_coverage),
                aa_count,
            )?);
        }
    }
    let aa_family = (aa_count > 0).then(|| {
        let level = inference::simultaneous_coverage(COVERAGE, aa_count);
        AaFamily {
            controls: aa_count as u32,
            family_coverage: COVERAGE,
            level,
            method: format!(
                "the {aa_count} A/A controls (declared A/A pairs x phases) are one family: each is judged on its own \
                    Student-t interval at {:.3}% (1 - 0.05/{aa_count}, Bonferroni-Dunn), or at its phase's pair level \
                    when that is higher, so that an instrument that cannot tell a configuration from itself shows a \
                    misbehaved A/A control in at most {:.0}% of campaigns; simulated per-control and per-campaign \
                    rates are in docs/CAMPAIGNS.md (rerun with `cargo bench --bench calibration`)",
                level * 100.0,
                (1.0 - COVERAGE) * 100.0
            ),
        }
    });
    let judge_phase = input
        .canary
        .as_ref()
        .map(|c| c.2)
        .or_else(|| phases.iter().any(|p| p.phase == Phase::Blocking).then_some(Phase::Blocking))
        .or_else(|| phases.first().map(|p| p.phase));
    if let Some(jp) = judge_phase {
        let i = tabs
            .iter()
            .position(|(p, _)| p.phase == jp)
            .with_context(|| format!("the judged phase {jp} was not run"))?;
        let (pin, t) = &tabs[i];
        let all_bad: Vec<String> = input.controls.known_bad.iter().map(|k| k.label.clone()).collect();
        for kb in &input.controls.known_bad {
            controls.push(known_bad_control(kb, pin, &t.table, &all_bad, policy, phases[i].pair_coverage)?);
        }
    }
    for (label, jobs) in &input.controls.injected_skew {
        known(label)?;
        for (round, d) in jobs {
            controls.push(skew_control(label, *round, d));
        }
    }
    let controls_behaved =
        (!controls.is_empty()).then(|| controls.iter().all(|c| c.outcome == ControlOutcome::Behaved));
    // canary
    let mut canary = None;
    if let Some((cand, base, phase)) = &input.canary {
        known(cand)?;
        known(base)?;
        let (pin, t) = tabs
            .iter()
            .find(|(p, _)| p.phase == *phase)
            .with_context(|| format!("the canary phase {phase} was not run"))?;
        let col = |l: &str| pin.labels.iter().position(|x| x == l).expect("known");
        let r = canary_result(&t.table, col(cand), col(base), policy, COVERAGE)?;
        let ctx = &input.context;
        let not_ok = |o: ControlOutcome| {
            controls.iter().filter(|c| c.outcome == o).map(|c| format!("{} {}", c.kind, c.subject)).collect::<Vec<_>>()
        };
        let (bad, unsure) = (not_ok(ControlOutcome::Misbehaved), not_ok(ControlOutcome::Inconclusive));
        let controls_text = match controls_behaved {
            None => "no controls ran in this campaign, so nothing checks that the instrument can tell A from A or see \
                a known fault"
                .to_string(),
            Some(true) => format!("the {} declared control results behaved as predicted", controls.len()),
            Some(false) if !bad.is_empty() => format!(
                "{} control result(s) MISBEHAVED ({}); treat the verdict as unsupported",
                bad.len(),
                bad.join("; ")
            ),
            Some(false) => format!(
                "{} control result(s) inconclusive for want of rounds ({}); the verdict is only as good as the \
                    controls that resolved",
                unsure.len(),
                unsure.join("; ")
            ),
        };
        let resolve = match (r.verdict, r.rounds_to_resolve) {
            (Verdict::InsufficientEvidence, Some(n)) => {
                format!(" About {n} rounds would resolve it at this noise (80% power).")
            }
            (Verdict::InsufficientEvidence, None) => format!(
                " More than {} rounds would be needed at this noise (or no number of rounds, for a difference within \
                    the minimum effect).",
                inference::MAX_ROUNDS
            ),
            _ => String::new(),
        };
        let statement = format!(
            "Under manifest {} (campaign {}), on {}, with workload {} and replay semantics \"{}\", candidate {cand} vs \
                baseline {base} in phase {phase} differs by {} (per-round log-ratio of per-job median {}, {} rounds, \
                {:.0}% Student-t interval, the one planned comparison); P(candidate faster) {:.3}, P(slowdown > {}%) \
                {:.3}; verdict {} under the frozen minimum effect {}%.{resolve} Controls: {}. Dimensions not \
                represented: {}.",
            &ctx.manifest_sha256[..12.min(ctx.manifest_sha256.len())],
            ctx.campaign_id,
            ctx.hardware,
            ctx.workload,
            ctx.replay_semantics,
            interval_words(&r.interval),
            if phase.has_tokens() { "token latency" } else { "completion time" },
            r.interval.rounds,
            COVERAGE * 100.0,
            r.p_candidate_faster,
            policy.delta_pct,
            r.p_slowdown_beyond_delta,
            r.verdict.word(),
            policy.min_effect_pct,
            controls_text,
            ctx.not_represented.join("; ")
        );
        canary = Some(CanaryClaim {
            candidate: cand.clone(),
            baseline: base.clone(),
            phase: *phase,
            result: r,
            controls_behaved,
            statement,
        });
    }
    for kb in &input.controls.known_bad {
        known(&kb.label)?;
    }
    let trace = input.trace_canary.as_ref().map(|tc| trace_canary_report(input, tc, evidence)).transpose()?;
    let canary = (canary.is_some() || trace.is_some()).then_some(CanarySection { verdict: canary, trace });
    // the real job judges every proxy phase whose configurations it ran
    let truth = match &input.truth {
        None => None,
        Some(t) => {
            let proxies: Vec<(String, &PhaseInput, &PhaseReport)> =
                input.phases.iter().zip(&phases).map(|(pin, rep)| (format!("phase {}", pin.phase), pin, rep)).collect();
            Some(truth::truth_report(t, &proxies, &input.controls, policy, evidence)?)
        }
    };
    let mut warnings = Vec::new();
    let families = phases.iter().filter(|p| p.family_pairs > 1).count() * 2;
    if families > 1 {
        warnings.push(format!(
            "multiple comparisons: the pair intervals of each phase and metric hold together at {:.0}% (each at {}), \
                so a family shows a false decided pair with probability at most {:.0}%; this report has {families} \
                such families (median and p99 per phase), so across all of them the bound is {:.0}%. The canary's \
                interval is a single planned comparison at {:.0}%",
            COVERAGE * 100.0,
            phases
                .iter()
                .filter(|p| p.family_pairs > 1)
                .map(|p| format!("{:.3}% in {}", p.pair_coverage * 100.0, p.phase))
                .collect::<Vec<_>>()
                .join(", "),
            (1.0 - COVERAGE) * 100.0,
            (families as f64 * (1.0 - COVERAGE) * 100.0).min(100.0),
            COVERAGE * 100.0
        ));
    }
    if let Some(n) = phases.iter().map(|p| p.rounds).min().filter(|&n| n < 5) {
        let t = inference::t_quantile(1.0 - (1.0 - COVERAGE) / 2.0, (n - 1) as f64);
        warnings.push(format!(
            "{n} rounds: each interval is ±{t:.2} standard errors of the per-round log-ratio ({} degree(s) of \
                freedom), so only large differences are decided; P(best) stays close to 1/k unless a configuration \
                stands apart in every round. Inconclusive controls say how many rounds would resolve them",
            n - 1
        ));
    }
    Ok(Report {
        format_version: REPORT_FORMAT_VERSION,
        producer: format!("commcanary {}", identity::VERSION_LONG),
        evidence: evidence.to_string(),
        completeness,
        context: input.context.clone(),
        policy: policy.clone(),
        coverage: COVERAGE,
        interval_method: INTERVAL_METHOD.to_string(),
        phases,
        proxy_vs_blocking,
        canary,
        controls,
        aa_family,
        warnings,
        overlap_excerpt: None,
        clock_excerpt: None,
        plots: Vec::new(),
        truth,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::phase::column;
    use crate::analysis::policy::AnalysisPolicy;
    use rand::{Rng, SeedableRng};

    fn policy() -> AnalysisPolicy {
        AnalysisPolicy {
            tie_policy: TiePolicy::Interval,
            min_effect_pct: 2.0,
            delta_pct: 5.0,
            bootstrap_resamples: 2000,
            bootstrap_seed: 1,
        }
    }

    /// Every job of a round shares a drift of up to ±20%; job noise ±`noise`.
    fn input(means: &[f64], rounds: u32, noise: f64) -> AnalysisInput {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        let labels: Vec<String> = (0..means.len()).map(|i| format!("c{i}")).collect();
        let drift: Vec<f64> = (0..rounds).map(|_| rng.gen_range(-0.2..0.2)).collect();
        let mut mk = |phase, scale: f64| PhaseInput {
            phase,
            labels: labels.clone(),
            jobs: means
                .iter()
                .map(|m| {
                    (1..=rounds)
                        .map(|r| {
                            let job = 1.0 + drift[r as usize - 1] + rng.gen_range(-noise..noise);
                            JobData {
                                round: r,
                                samples_us: (0..50)
                                    .map(|_| m * scale * job * (1.0 + rng.gen_range(-0.001..0.001)))
                                    .collect(),
                            }
                        })
                        .collect()
                })
                .collect(),
        };
        let phases = vec![mk(Phase::Isolated, 0.01), mk(Phase::Blocking, 1.0)];
        AnalysisInput {
            phases,
            policy: policy(),
            canary: Some(("c1".into(), "c0".into(), Phase::Blocking)),
            trace_canary: None,
            truth: None,
            controls: ControlsInput {
                aa_pairs: vec![("c0".into(), "c2".into())],
                known_bad: vec![KnownBadInput { label: "c3".into(), graded: None }],
                injected_skew: vec![],
            },
            context: ClaimContext {
                campaign_id: "t".into(),
                manifest_sha256: "0123456789abcdef".into(),
                hardware: "h".into(),
                workload: "w".into(),
                replay_semantics: "r".into(),
                not_represented: vec!["x".into()],
                trace: None,
            },
        }
    }

    fn verdict() -> policy::Verdict {
        policy::Verdict { complete: true, ..Default::default() }
    }

    #[test]
    fn controls_and_canary_behave_on_synthetic_data() {
        let r = analyze(&input(&[100.0, 150.0, 100.0, 300.0], 5, 0.002), verdict(), "synthetic").unwrap();
        let b = r.phases.iter().find(|p| p.phase == Phase::Blocking).unwrap();
        assert_eq!((b.pairs.len(), b.pairs_p99.len()), (6, 6));
        assert_eq!(b.rows.last().unwrap().label, "c3");
        assert!(b.rows.iter().find(|x| x.label == "c3").unwrap().p_worst > 0.99);
        let aa: Vec<&ControlResult> = r.controls.iter().filter(|c| c.kind == "a-a").collect();
        assert_eq!(aa.len(), 2, "A/A judged in every phase");
        assert!(aa.iter().all(|c| c.outcome == ControlOutcome::Behaved), "{aa:?}");
        let kb = r.controls.iter().find(|c| c.kind == "known-bad").unwrap();
        assert_eq!(kb.outcome, ControlOutcome::Behaved, "{kb:?}");
        let c = r.canary.as_ref().unwrap().verdict.as_ref().unwrap();
        assert_eq!(c.result.verdict, Verdict::Fail, "c1 is 50% slower than c0");
        assert_eq!(c.controls_behaved, Some(true));
        assert!(c.statement.contains("Dimensions not represented: x"));
        assert_eq!(r.proxy_vs_blocking.len(), 1);
        assert_eq!(b.relation("c0", "c2"), Some(Relation::NotDistinguished), "A/A is tied");
        // one decision rule: every printed relation is its printed interval's
        for p in r.phases.iter().flat_map(|p| p.pairs.iter().chain(&p.pairs_p99)) {
            assert_eq!(p.relation, ranking::relation_from_interval(p.ci_low_pct, p.ci_high_pct, 2.0), "{p:?}");
        }
        // simultaneous: 6 pairs, each interval at 1 - 0.05/6, and the controls print those same intervals
        assert_eq!(b.family_pairs, 6);
        assert!((b.pair_coverage - (1.0 - 0.05 / 6.0)).abs() < 1e-12);
        let t = input(&[100.0, 150.0, 100.0, 300.0], 5, 0.002);
        let tb = tables(t.phases.iter().find(|p| p.phase == Phase::Blocking).unwrap()).unwrap();
        let want = inference::paired(&column(&tb.table, 2), &column(&tb.table, 0), b.pair_coverage).unwrap();
        let blocking_aa = aa.iter().find(|c| c.phase == Some(Phase::Blocking)).unwrap();
        assert!(blocking_aa.observed.starts_with(&interval_words(&want)), "{blocking_aa:?} vs {want:?}");
        // two A/A controls: the family level 1 - 0.05/2 is below the pair level, so the pair level holds
        assert_eq!(blocking_aa.level, Some(b.pair_coverage));
        let fam = r.aa_family.as_ref().unwrap();
        assert_eq!((fam.controls, fam.family_coverage), (2, COVERAGE));
        assert!((fam.level - 0.975).abs() < 1e-12, "{fam:?}");
        assert_eq!(kb.level, Some(b.pair_coverage));
        let narrower = inference::paired(&column(&tb.table, 2), &column(&tb.table, 0), COVERAGE).unwrap();
        assert!(narrower.ci_high_pct - narrower.ci_low_pct < want.ci_high_pct - want.ci_low_pct);
        let t = &r.proxy_vs_blocking[0];
        assert!(t.tau_plain.tau_b.is_some() && t.tau_plain.interval.is_some(), "{t:?}");
        assert!(render(&r).contains("Kendall tau-b under the interval policy"));
    }

    #[test]
    fn a_campaigns_aa_controls_are_judged_as_one_family() {
        // 3 configurations (3 pairs, each at 1 - 0.05/3) and 2 A/A pairs in 2 phases: 4 A/A controls,
        // so each is judged at 1 - 0.05/4, above the pair level, on its own interval at that level
        let mut i = input(&[100.0, 100.0, 100.0], 5, 0.01);
        i.controls.aa_pairs = vec![("c0".into(), "c1".into()), ("c0".into(), "c2".into())];
        i.controls.known_bad.clear();
        i.canary = None;
        let r = analyze(&i, verdict(), "synthetic").unwrap();
        let want = 1.0 - 0.05 / 4.0;
        assert!((aa_level(4, 1.0 - 0.05 / 3.0) - want).abs() < 1e-12);
        assert!((aa_level(4, 0.995) - 0.995).abs() < 1e-12, "never below the phase's pair level");
        let aa: Vec<&ControlResult> = r.controls.iter().filter(|c| c.kind == "a-a").collect();
        assert_eq!(aa.len(), 4);
        let fam = r.aa_family.as_ref().unwrap();
        assert_eq!(fam.controls, 4);
        assert!((fam.level - want).abs() < 1e-12, "{fam:?}");
        let tb = tables(i.phases.iter().find(|p| p.phase == Phase::Blocking).unwrap()).unwrap();
        let at = inference::paired(&column(&tb.table, 1), &column(&tb.table, 0), want).unwrap();
        let c = aa.iter().find(|c| c.phase == Some(Phase::Blocking) && c.subject.starts_with("c1 vs c0")).unwrap();
        assert_eq!(c.level, Some(want), "{c:?}");
        assert!(
            c.observed.starts_with(&interval_words(&at)) && c.observed.contains("one of 4 A/A controls"),
            "{c:?} vs {at:?}"
        );
        let text = render(&r);
        assert!(
            text.contains("A/A family: the 4 A/A controls")
                && text.contains(&format!("[blocking] at {:.3}%", want * 100.0)),
            "{text}"
        );
        // the outcome rule: decided misbehaves; tied behaves; undecided behaves only with no minimum effect
        assert_eq!(aa_outcome(Verdict::Pass, 2.0), ControlOutcome::Misbehaved);
        assert_eq!(aa_outcome(Verdict::Fail, 0.0), ControlOutcome::Misbehaved);
        assert_eq!(aa_outcome(Verdict::Tied, 2.0), ControlOutcome::Behaved);
        assert_eq!(aa_outcome(Verdict::InsufficientEvidence, 0.0), ControlOutcome::Behaved);
        assert_eq!(aa_outcome(Verdict::InsufficientEvidence, 2.0), ControlOutcome::Inconclusive);
        // no A/A pair declared: no family
        i.controls.aa_pairs.clear();
        assert!(analyze(&i, verdict(), "synthetic").unwrap().aa_family.is_none());
    }

    #[test]
    fn noisy_few_rounds_make_controls_inconclusive_with_rounds_to_resolve() {
        let mut i = input(&[100.0, 100.0, 100.0, 103.0], 3, 0.03);
        i.controls.known_bad =
            vec![KnownBadInput { label: "c3".into(), graded: Some(("c0".into(), 3.0, "test".into())) }];
        let r = analyze(&i, verdict(), "synthetic").unwrap();
        let kb = r.controls.iter().find(|c| c.kind == "known-bad").unwrap();
        assert_eq!(kb.outcome, ControlOutcome::Inconclusive, "{kb:?}");
        assert!(kb.rounds_to_resolve.is_some_and(|n| n > 3) && kb.observed.contains("would resolve"), "{kb:?}");
        for c in r.controls.iter().filter(|c| c.kind == "a-a") {
            assert_ne!(c.outcome, ControlOutcome::Misbehaved, "{c:?}");
        }
    }

    #[test]
    fn a_known_bad_that_is_not_bad_misbehaves() {
        let mut i = input(&[100.0, 150.0, 100.0, 300.0], 5, 0.002);
        i.controls.known_bad = vec![KnownBadInput { label: "c0".into(), graded: None }];
        let r = analyze(&i, verdict(), "synthetic").unwrap();
        assert_eq!(r.controls.iter().find(|c| c.kind == "known-bad").unwrap().outcome, ControlOutcome::Misbehaved);
        assert_eq!(r.canary.unwrap().verdict.unwrap().controls_behaved, Some(false));
        let mut i = input(&[100.0, 150.0, 100.0, 300.0], 5, 0.002);
        i.controls.known_bad =
            vec![KnownBadInput { label: "c2".into(), graded: Some(("c0".into(), 10.0, "test".into())) }];
        let r = analyze(&i, verdict(), "synthetic").unwrap();
        let kb = r.controls.iter().find(|c| c.kind == "known-bad").unwrap();
        assert_eq!(kb.outcome, ControlOutcome::Misbehaved, "the interval excludes the declared 10%: {kb:?}");
    }

    #[test]
    fn replication_flags_what_did_not_reproduce() {
        let a = analyze(&input(&[100.0, 150.0, 100.0, 300.0], 5, 0.002), verdict(), "a").unwrap();
        let same = replicate(&a, &a, &|l| l.to_string(), &|l| l.to_string()).unwrap();
        assert_eq!((same.contradicted, same.not_confirmed), (0, 0));
        assert!(same.reproduced >= 5, "{same:?}");
        // the second campaign's c3 is the fastest: every decided c3 pair is contradicted
        let b = analyze(&input(&[100.0, 150.0, 100.0, 30.0], 5, 0.002), verdict(), "b").unwrap();
        let r = replicate(&a, &b, &|l| l.to_string(), &|l| l.to_string()).unwrap();
        assert!(r.contradicted >= 3, "{r:?}");
        assert!(render_replication(&r).contains("FLAG"));
        // labels are matched by name: a relabelled copy reproduces
        let swap = |l: &str| match l {
            "c0" => "c2".to_string(),
            "c2" => "c0".to_string(),
            x => x.to_string(),
        };
        let r = replicate(&a, &a, &|l| l.to_string(), &swap).unwrap();
        assert_eq!(r.contradicted, 0, "c0 and c2 are the same configuration: {r:?}");
    }

    #[test]
    fn refuses_unpaired_rounds_unknown_labels_and_summary_policies() {
        let mut i = input(&[100.0, 110.0], 3, 0.01);
        i.controls = ControlsInput::default();
        i.canary = None;
        i.phases[1].jobs[1][0].round = 9;
        assert!(analyze(&i, verdict(), "s").unwrap_err().to_string().contains("cannot be paired"));
        let mut i = input(&[100.0, 110.0, 120.0, 130.0], 3, 0.01);
        i.controls.known_bad = vec![KnownBadInput { label: "nope".into(), graded: None }];
        assert!(analyze(&i, verdict(), "s").unwrap_err().to_string().contains("\"nope\""));
        let mut i = input(&[100.0, 110.0, 120.0, 130.0], 3, 0.01);
        i.policy.tie_policy = TiePolicy::Iqr;
        assert!(analyze(&i, verdict(), "s").unwrap_err().to_string().contains("tie_policy = \"interval\""));
    }
}
