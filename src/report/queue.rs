//! `queue` on disk: measured service times through the queue of [`crate::analysis::queue`].
//!
//! Consumes a file of service times (ms) or a verified campaign's phase (its
//! per-token latencies, per configuration) and the load model. Produces per
//! source its queue result, the labels ranked by median response (and by SLO
//! attainment under an SLO) and the evidence in words. Refuses a malformed
//! file, an unverified campaign, a phase it lacks or one without tokens, and
//! what the simulation refuses.
use crate::analysis::queue::{self, Load, QueueResult};
use crate::core::refusal::{self, Code};
use crate::core::{limits, workload::Phase};
use crate::report::campaign as report_campaign;
use anyhow::{Context, Result};
use std::path::Path;

/// What [`run`] simulated.
pub(crate) struct Queued {
    /// Per source (configuration or file), its result.
    pub results: Vec<(String, QueueResult)>,
    /// Labels by median response, lowest first; by SLO attainment, highest first (empty without an SLO).
    pub ranks: (Vec<String>, Vec<String>),
    /// Where the service times came from.
    pub evidence: String,
}

/// `queue`: the service times of the file, else of the campaign's phase, each simulated under `load` (`requests`
/// of them, default one per service time; SLO and coordinated-omission correction in ms) and ranked.
pub(crate) fn run(
    service_times: Option<&Path>,
    campaign: Option<(&Path, &str)>,
    load: Load,
    requests: Option<usize>,
    slo_ms: Option<f64>,
    co_correct_ms: Option<f64>,
) -> Result<Queued> {
    // (label, service times ms)
    let (sources, evidence): (Vec<(String, Vec<f64>)>, String) = if let Some(f) = service_times {
        let text = limits::read_text_bounded(f, limits::MAX_TEXT_TABLE_BYTES)?;
        let name = f.display().to_string();
        let times = queue::parse_service_times(&text, &name).map_err(refusal::or_code(Code::BadInput))?;
        let evidence = format!("service times from {name} (provenance: whoever wrote the file)");
        (vec![(name, times)], evidence)
    } else {
        let (dir, phase) = campaign.expect("clap requires one");
        let phase: Phase = phase.parse()?;
        let (_, input) = report_campaign::verified_input(dir)?;
        let p = input
            .phases
            .iter()
            .find(|p| p.phase == phase)
            .with_context(|| format!("{}: no phase {phase}", dir.display()))?;
        if !phase.has_tokens() {
            anyhow::bail!("phase {phase} has no tokens; service times are per-token latencies of a workload phase");
        }
        let s = p
            .labels
            .iter()
            .zip(&p.jobs)
            .map(|(l, jobs)| {
                let mut js = jobs.clone();
                js.sort_by_key(|j| j.round);
                (l.clone(), js.iter().flat_map(|j| j.samples_us.iter().map(|us| us / 1e3)).collect())
            })
            .collect();
        (
            s,
            format!(
                "service times: per-token latencies of phase {phase} in verified campaign {} (manifest {}), jobs in \
                    round order, every rank's tokens",
                input.context.campaign_id,
                &input.context.manifest_sha256[..12]
            ),
        )
    };
    let mut results = Vec::new();
    for (label, service) in &sources {
        let n = requests.unwrap_or(service.len());
        results.push((
            label.clone(),
            queue::simulate(service, load, n, slo_ms, co_correct_ms).with_context(|| format!("simulating {label}"))?,
        ));
    }
    // labels ordered by a key of their result (stable: ties keep input order)
    let ranked = |key: &dyn Fn(&QueueResult) -> f64, descending: bool| -> Vec<String> {
        let mut v: Vec<&(String, QueueResult)> = results.iter().collect();
        v.sort_by(|x, y| if descending { key(&y.1).total_cmp(&key(&x.1)) } else { key(&x.1).total_cmp(&key(&y.1)) });
        v.into_iter().map(|r| r.0.clone()).collect()
    };
    let by_median = ranked(&|r| r.response_ms.p50, false);
    let by_slo = if slo_ms.is_some() { ranked(&|r| r.slo_attainment.unwrap_or(f64::NAN), true) } else { Vec::new() };
    Ok(Queued { ranks: (by_median, by_slo), results, evidence })
}
