//! Pairwise relations between configurations and proxy-versus-truth agreement
//! free of I/O.
//!
//! Consumes per-configuration summaries (median, optional IQR, in µs) of a
//! proxy and of the truth. Produces every pair's relation under a declared tie
//! policy on each side, their agreement, Kendall's tau-b ([`tau_b`], also on
//! plain values with [`strict_relations`]), and the cost of every
//! disagreement on the truth side. Refuses: configuration sets that differ,
//! repeated names, non-finite values.
//!
//! Method: docs/METHODS.md, "Pairwise relations and agreement".
use crate::analysis::inference;
use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};

/// One configuration's summary.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ConfigSummary {
    /// Name or label.
    pub config: String,
    /// Median, µs.
    pub median_us: f64,
    /// Interquartile range, µs, where known.
    pub iqr_us: Option<f64>,
}

/// The tie policy: one vocabulary for the manifest, the analysis and `compare`.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum TiePolicy {
    /// Any difference of the summaries decides (summary tables only).
    Strict,
    /// Tied if |m_a - m_b| < max(iqr_a, iqr_b), an unknown IQR counting as 0 (summary tables only).
    Iqr,
    /// A pair is decided by its printed interval over rounds: different only
    /// when the interval lies beyond ± the minimum effect
    /// (`inference::decide`). The only policy of a campaign, whose
    /// rounds give intervals. `bootstrap`, its name before report format 2,
    /// is read as `interval`.
    #[serde(alias = "bootstrap")]
    #[value(alias = "bootstrap")]
    Interval,
}

/// Relation of a pair (a, b).
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Relation {
    /// a is faster (smaller).
    AFaster,
    /// b is faster.
    BFaster,
    /// Not distinguished under the rule: neither side is decided faster. Under the interval rule this
    /// covers both an interval within ± the minimum effect (the verdict `tied`, equivalent) and one
    /// too wide to tell; the pair's interval says which. Read as `tied` in reports before format 3.
    #[serde(alias = "tied")]
    NotDistinguished,
}

/// The relation of `a` and `b` under `rule`.
pub fn relation(a: &ConfigSummary, b: &ConfigSummary, rule: TiePolicy) -> Relation {
    let d = a.median_us - b.median_us;
    let tied = match rule {
        TiePolicy::Strict | TiePolicy::Interval => d == 0.0,
        TiePolicy::Iqr => d.abs() < a.iqr_us.unwrap_or(0.0).max(b.iqr_us.unwrap_or(0.0)) || d == 0.0,
    };
    if tied {
        Relation::NotDistinguished
    } else if d < 0.0 {
        Relation::AFaster
    } else {
        Relation::BFaster
    }
}

/// One pair on both sides.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct PairRelation {
    /// First configuration (input order).
    pub a: String,
    /// Second configuration.
    pub b: String,
    /// Relation under the proxy.
    pub proxy: Relation,
    /// Relation under the truth.
    pub truth: Relation,
    /// Whether the two relations are the same.
    pub agree: bool,
}

/// A disagreement and what it costs on the truth side.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Disagreement {
    /// First configuration.
    pub a: String,
    /// Second configuration.
    pub b: String,
    /// Proxy relation.
    pub proxy: Relation,
    /// Truth relation.
    pub truth: Relation,
    /// |truth_a - truth_b| in percent of the truly faster one.
    pub truth_cost_pct: f64,
}

/// The comparison.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Comparison {
    /// Tie rule used.
    pub tie_policy: TiePolicy,
    /// n(n-1)/2.
    pub pairs_total: usize,
    /// Pairs whose relations agree.
    pub pairs_agree: usize,
    /// 100 * agree / total.
    pub agreement_pct: f64,
    /// Kendall's tau-b between the two orderings (absent when undefined: every pair tied on one side).
    pub kendall_tau_b: Option<f64>,
    /// Every pair.
    pub relations: Vec<PairRelation>,
    /// The disagreeing pairs with their truth-side cost.
    pub disagreements: Vec<Disagreement>,
    /// What the inputs are (measured campaign, or reported tables).
    pub evidence_class: String,
}

/// Compare a proxy with the truth over the same configurations (strict or
/// IQR rule on summaries; the interval rule needs rounds, see [`compare_relations`]).
pub fn compare(
    proxy: &[ConfigSummary],
    truth: &[ConfigSummary],
    rule: TiePolicy,
    evidence_class: &str,
) -> Result<Comparison> {
    if rule == TiePolicy::Interval {
        bail!("the interval tie policy needs the rounds of a campaign; summary tables offer strict or iqr only");
    }
    for (side, v) in [("proxy", proxy), ("truth", truth)] {
        let mut names: Vec<&str> = v.iter().map(|c| c.config.as_str()).collect();
        names.sort();
        if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
            bail!("{side}: configuration {:?} appears twice", w[0]);
        }
        if let Some(c) =
            v.iter().find(|c| !c.median_us.is_finite() || c.iqr_us.is_some_and(|i| !i.is_finite() || i < 0.0))
        {
            bail!("{side}: configuration {:?} has a non-finite median or a bad IQR", c.config);
        }
    }
    let missing: Vec<&str> =
        proxy.iter().map(|c| c.config.as_str()).filter(|n| !truth.iter().any(|t| t.config == *n)).collect();
    let extra: Vec<&str> =
        truth.iter().map(|c| c.config.as_str()).filter(|n| !proxy.iter().any(|p| p.config == *n)).collect();
    if !missing.is_empty() || !extra.is_empty() {
        bail!("the two sides name different configurations (only in proxy: {missing:?}; only in truth: {extra:?})");
    }
    let truth: Vec<ConfigSummary> =
        proxy.iter().map(|p| truth.iter().find(|t| t.config == p.config).expect("checked").clone()).collect();
    let (mut rp, mut rt) = (Vec::new(), Vec::new());
    for i in 0..proxy.len() {
        for j in i + 1..proxy.len() {
            rp.push(relation(&proxy[i], &proxy[j], rule));
            rt.push(relation(&truth[i], &truth[j], rule));
        }
    }
    compare_relations(&truth, &rp, &rt, rule, evidence_class)
}

/// Index of pair (i, j), i < j, among n configurations in the order
/// (0,1), (0,2), …, (0,n-1), (1,2), …
pub fn pair_index(n: usize, i: usize, j: usize) -> usize {
    debug_assert!(i < j && j < n);
    i * n - i * (i + 1) / 2 + (j - i - 1)
}

/// Agreement and Kendall's tau-b from relations already decided, one per
/// pair in [`pair_index`] order over `truth`'s configurations (whose medians
/// price the disagreements).
pub fn compare_relations(
    truth: &[ConfigSummary],
    proxy_rel: &[Relation],
    truth_rel: &[Relation],
    rule: TiePolicy,
    evidence_class: &str,
) -> Result<Comparison> {
    let n = truth.len();
    if proxy_rel.len() != n * n.saturating_sub(1) / 2 || truth_rel.len() != proxy_rel.len() {
        bail!("{} configurations need {} relations per side", n, n * n.saturating_sub(1) / 2);
    }
    let (mut relations, mut disagreements) = (Vec::new(), Vec::new());
    for i in 0..n {
        for j in i + 1..n {
            let (ta, tb) = (&truth[i], &truth[j]);
            let (rp, rt) = (proxy_rel[pair_index(n, i, j)], truth_rel[pair_index(n, i, j)]);
            let agree = rp == rt;
            if !agree {
                let faster = ta.median_us.min(tb.median_us);
                let cost = if faster > 0.0 { (ta.median_us - tb.median_us).abs() / faster * 100.0 } else { f64::NAN };
                disagreements.push(Disagreement {
                    a: ta.config.clone(),
                    b: tb.config.clone(),
                    proxy: rp,
                    truth: rt,
                    truth_cost_pct: cost,
                });
            }
            relations.push(PairRelation { a: ta.config.clone(), b: tb.config.clone(), proxy: rp, truth: rt, agree });
        }
    }
    let pairs_agree = relations.iter().filter(|r| r.agree).count();
    Ok(Comparison {
        tie_policy: rule,
        pairs_total: relations.len(),
        pairs_agree,
        agreement_pct: if relations.is_empty() {
            f64::NAN
        } else {
            pairs_agree as f64 / relations.len() as f64 * 100.0
        },
        kendall_tau_b: tau_b(proxy_rel, truth_rel),
        relations,
        disagreements,
        evidence_class: evidence_class.to_string(),
    })
}

/// The interval policy's relation from the interval [lo, hi] of (a − b) in
/// percent of b: the verdict of [`crate::analysis::inference::decide`] (a faster =
/// `pass`, b faster = `fail`, anything else not distinguished).
pub(crate) fn relation_from_interval(lo_pct: f64, hi_pct: f64, min_effect_pct: f64) -> Relation {
    match inference::decide(lo_pct, hi_pct, min_effect_pct) {
        inference::Verdict::Pass => Relation::AFaster,
        inference::Verdict::Fail => Relation::BFaster,
        _ => Relation::NotDistinguished,
    }
}

/// Kendall's tau-b of two sets of pair relations ([`pair_index`] order).
pub fn tau_b(x: &[Relation], y: &[Relation]) -> Option<f64> {
    let (mut c, mut d, mut n1, mut n2) = (0i64, 0i64, 0i64, 0i64);
    for (&p, &q) in x.iter().zip(y) {
        n1 += i64::from(p == Relation::NotDistinguished);
        n2 += i64::from(q == Relation::NotDistinguished);
        if p != Relation::NotDistinguished && q != Relation::NotDistinguished {
            if p == q {
                c += 1;
            } else {
                d += 1;
            }
        }
    }
    let n0 = x.len().min(y.len()) as i64;
    let den = (((n0 - n1) * (n0 - n2)) as f64).sqrt();
    (den > 0.0).then(|| (c - d) as f64 / den)
}

/// Strict relations of plain values (smaller is faster), [`pair_index`] order.
pub fn strict_relations(v: &[f64]) -> Vec<Relation> {
    let mut out = Vec::with_capacity(v.len() * v.len().saturating_sub(1) / 2);
    for i in 0..v.len() {
        for j in i + 1..v.len() {
            out.push(match v[i].partial_cmp(&v[j]) {
                Some(std::cmp::Ordering::Less) => Relation::AFaster,
                Some(std::cmp::Ordering::Greater) => Relation::BFaster,
                _ => Relation::NotDistinguished,
            });
        }
    }
    out
}

/// Read a summary table: CSV (RFC 4180 quoting, through the `csv` crate)
/// with header `config,median_us` and optionally `iqr_us`; `#` lines are
/// comments. Errors name the file and the line as it is in the file.
pub fn parse_csv(text: &str, name: &str) -> Result<Vec<ConfigSummary>> {
    let mut rd = csv::ReaderBuilder::new().comment(Some(b'#')).trim(csv::Trim::All).from_reader(text.as_bytes());
    let header: Vec<String> =
        rd.headers().map_err(|e| anyhow::anyhow!("{name}: {e}"))?.iter().map(str::to_string).collect();
    if header.iter().all(|h| h.is_empty()) {
        bail!("{name}: empty table");
    }
    let col = |n: &str| header.iter().position(|h| h == n);
    let (ci, mi) = match (col("config"), col("median_us")) {
        (Some(c), Some(m)) => (c, m),
        _ => bail!("{name}: header must have config and median_us columns (found {header:?})"),
    };
    let ii = col("iqr_us");
    let mut out = Vec::new();
    for rec in rd.records() {
        let f = match rec {
            Ok(f) => f,
            Err(e) => match e.kind() {
                csv::ErrorKind::UnequalLengths { pos, expected_len, len } => {
                    let line = pos.as_ref().map_or(0, |p| p.line());
                    bail!("{name}: line {line} has {len} fields, the header has {expected_len}")
                }
                _ => bail!("{name}: {e}"),
            },
        };
        let line = f.position().map_or(0, |p| p.line());
        let num = |i: usize, what: &str| -> Result<f64> {
            f[i].parse::<f64>().map_err(|_| anyhow::anyhow!("{name}: line {line}: {what} {:?} is not a number", &f[i]))
        };
        out.push(ConfigSummary {
            config: f[ci].to_string(),
            median_us: num(mi, "median_us")?,
            iqr_us: match ii {
                Some(i) if !f[i].is_empty() => Some(num(i, "iqr_us")?),
                _ => None,
            },
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pair_index_enumerates_pairs_in_order() {
        let n = 6;
        let mut k = 0;
        for i in 0..n {
            for j in i + 1..n {
                assert_eq!(pair_index(n, i, j), k);
                k += 1;
            }
        }
    }

    #[test]
    fn the_interval_rule_decides_only_beyond_the_minimum_effect() {
        assert_eq!(relation_from_interval(-9.0, -3.0, 2.0), Relation::AFaster);
        assert_eq!(relation_from_interval(3.0, 9.0, 2.0), Relation::BFaster);
        assert_eq!(
            relation_from_interval(-9.0, -1.0, 2.0),
            Relation::NotDistinguished,
            "excludes 0 but not the minimum effect"
        );
        assert_eq!(relation_from_interval(-1.0, 4.0, 0.0), Relation::NotDistinguished, "contains 0");
        assert!(compare(&[], &[], TiePolicy::Interval, "x").is_err(), "tables carry no rounds");
    }
    use proptest::prelude::*;

    fn s(c: &str, m: f64, iqr: Option<f64>) -> ConfigSummary {
        ConfigSummary { config: c.into(), median_us: m, iqr_us: iqr }
    }

    #[test]
    fn hand_computed_three_configs() {
        // proxy order a < b < c ; truth order b < a < c
        let p = [s("a", 1.0, None), s("b", 2.0, None), s("c", 3.0, None)];
        let t = [s("a", 20.0, None), s("b", 10.0, None), s("c", 30.0, None)];
        let r = compare(&p, &t, TiePolicy::Strict, "test").unwrap();
        assert_eq!((r.pairs_total, r.pairs_agree), (3, 2));
        // C = 2 (a-c, b-c), D = 1 (a-b): tau = 1/3
        assert!((r.kendall_tau_b.unwrap() - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(r.disagreements.len(), 1);
        assert_eq!(r.disagreements[0].truth_cost_pct, 100.0); // a is 100% slower than b in truth
    }

    #[test]
    fn iqr_policy_ties_close_pairs() {
        let p = [s("a", 10.0, Some(3.0)), s("b", 12.0, Some(1.0))];
        assert_eq!(relation(&p[0], &p[1], TiePolicy::Iqr), Relation::NotDistinguished);
        assert_eq!(relation(&p[0], &p[1], TiePolicy::Strict), Relation::AFaster);
    }

    #[test]
    fn refuses_mismatched_sets_and_bad_tables() {
        let p = [s("a", 1.0, None), s("b", 2.0, None)];
        let t = [s("a", 1.0, None), s("c", 2.0, None)];
        assert!(compare(&p, &t, TiePolicy::Strict, "").unwrap_err().to_string().contains("only in proxy"));
        assert!(parse_csv("name,median\nx,1\n", "t.csv").unwrap_err().to_string().contains("config and median_us"));
        assert!(parse_csv("config,median_us\nx,fast\n", "t.csv").unwrap_err().to_string().contains("not a number"));
        // quoting, comments and blank lines; errors name the line as it is in the file
        let rows = parse_csv("# a table\nconfig,median_us,iqr_us\n\n\"ring, ll\",10.5,\n", "t.csv").unwrap();
        assert_eq!((rows[0].config.as_str(), rows[0].median_us, rows[0].iqr_us), ("ring, ll", 10.5, None));
        let e = parse_csv("config,median_us\n# skipped\n\na,1\nb,x\n", "t.csv").unwrap_err().to_string();
        assert!(e.contains("t.csv: line 5"), "{e}");
        let e = parse_csv("config,median_us\na,1,2\n", "t.csv").unwrap_err().to_string();
        assert!(e.contains("line 2 has 3 fields, the header has 2"), "{e}");
    }

    proptest! {
        #[test]
        fn identical_orderings_agree_fully(v in proptest::collection::vec(0.0f64..1e6, 2..9)) {
            let mut seen = std::collections::BTreeSet::new();
            let p: Vec<ConfigSummary> = v
                .iter()
                .enumerate()
                .filter(|(_, x)| seen.insert(x.to_bits()))
                .map(|(i, &m)| s(&format!("c{i}"), m, None))
                .collect();
            prop_assume!(p.len() >= 2);
            let t: Vec<ConfigSummary> = p.iter().map(|c| s(&c.config, c.median_us * 3.0 + 7.0, None)).collect();
            let r = compare(&p, &t, TiePolicy::Strict, "").unwrap();
            prop_assert_eq!(r.pairs_agree, r.pairs_total);
            prop_assert!((r.kendall_tau_b.unwrap() - 1.0).abs() < 1e-12);
            let rev: Vec<ConfigSummary> = p.iter().map(|c| s(&c.config, -c.median_us, None)).collect();
            let r = compare(&p, &rev, TiePolicy::Strict, "").unwrap();
            prop_assert_eq!(r.pairs_agree, 0);
            prop_assert!((r.kendall_tau_b.unwrap() + 1.0).abs() < 1e-12);
        }
    }
}
