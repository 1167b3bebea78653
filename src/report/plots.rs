//! SVG plots drawn from a [`Report`] alone (plotters' SVG backend), so any
//! plot can be redrawn from `report.json`; no I/O here, the caller writes.
//!
//! Consumes a report; produces `ranks-slopegraph.svg`,
//! `distribution-PHASE.svg`, `ecdf-PHASE.svg`, `proxy-vs-truth.svg`,
//! `clock-offsets.svg`, `p-best.svg`, `overlap-timeline.svg` (GPU runs) and
//! `truth-regret.svg` (campaigns with `[truth]`), as SVG text. Refuses
//! nothing; an error is a plot that could not be drawn, or a phase the report
//! lacks.
//!
//! What each plot shows: docs/METHODS.md, "Report plots".
use crate::analysis::truth::TruthReport;
use crate::analysis::{Report, TimelineExcerpt};
use anyhow::{anyhow, Result};
use plotters::coord::Shift;
use plotters::prelude::*;

const W: u32 = 900;
const H: u32 = 520;

fn palette(i: usize) -> RGBColor {
    const C: [RGBColor; 10] = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(127, 127, 127),
        RGBColor(188, 189, 34),
        RGBColor(23, 190, 207),
    ];
    C[i % C.len()]
}

fn e<E: std::fmt::Debug>(x: E) -> anyhow::Error {
    anyhow!("drawing: {x:?}")
}

/// An SVG of `size` on a white ground, drawn by `draw`.
fn svg(size: (u32, u32), draw: impl FnOnce(&DrawingArea<SVGBackend, Shift>) -> Result<()>) -> Result<String> {
    let mut s = String::new();
    {
        let root = SVGBackend::with_string(&mut s, size).into_drawing_area();
        root.fill(&WHITE).map_err(e)?;
        draw(&root)?;
        root.present().map_err(e)?;
    }
    Ok(s)
}

/// A chart's frame on `root`: its caption at `size` points, a margin of 15, label areas of (x, y).
fn frame<'a, 'b>(
    root: &'a DrawingArea<SVGBackend<'b>, Shift>,
    caption: impl AsRef<str>,
    size: u32,
    labels: (u32, u32),
) -> ChartBuilder<'a, 'b, SVGBackend<'b>> {
    let mut b = ChartBuilder::on(root);
    b.caption(caption, ("sans-serif", size)).margin(15).x_label_area_size(labels.0).y_label_area_size(labels.1);
    b
}

/// The series legend at `at`, on a light box with a black border.
fn legend<'a, DB: DrawingBackend + 'a, CT: CoordTranslate>(
    chart: &mut ChartContext<'a, DB, CT>,
    at: SeriesLabelPosition,
) -> Result<()> {
    chart.configure_series_labels().position(at).background_style(WHITE.mix(0.8)).border_style(BLACK).draw().map_err(e)
}

/// The name of the category at integer position `x` on a category axis.
fn category<S: AsRef<str>>(x: f64, names: &[S]) -> String {
    let i = x.round();
    if (x - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < names.len() {
        names[i as usize].as_ref().to_string()
    } else {
        String::new()
    }
}

/// Labels in a stable order (the first phase's rows sorted by name).
fn labels(r: &Report) -> Vec<String> {
    let mut l: Vec<String> =
        r.phases.first().map(|p| p.rows.iter().map(|x| x.label.clone()).collect()).unwrap_or_default();
    l.sort();
    l
}

/// Rank per phase, one line per configuration.
pub fn slopegraph(r: &Report) -> Result<String> {
    let labels = labels(r);
    let n = labels.len().max(1) as f64;
    let np = r.phases.len().max(1);
    svg((W, H), |root| {
        let names: Vec<&str> = r.phases.iter().map(|p| p.phase.name()).collect();
        let mut chart = frame(root, "Rank per phase (1 = fastest median)", 20, (40, 40))
            .build_cartesian_2d(-0.3f64..(np as f64 - 1.0 + 1.2), (n + 0.5)..0.5f64)
            .map_err(e)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(np + 2)
            .x_label_formatter(&|x| category(*x, &names))
            .y_labels(labels.len().max(1))
            .y_label_formatter(&|y| format!("{y:.0}"))
            .y_desc("rank")
            .draw()
            .map_err(e)?;
        for (i, l) in labels.iter().enumerate() {
            let pts: Vec<(f64, f64)> = r
                .phases
                .iter()
                .enumerate()
                .filter_map(|(x, p)| p.rows.iter().find(|row| &row.label == l).map(|row| (x as f64, row.rank as f64)))
                .collect();
            let c = palette(i);
            chart.draw_series(LineSeries::new(pts.clone(), c.stroke_width(2))).map_err(e)?;
            chart.draw_series(pts.iter().map(|&p| Circle::new(p, 4, c.filled()))).map_err(e)?;
            if let Some(&(x, y)) = pts.last() {
                chart
                    .draw_series([Text::new(l.clone(), (x + 0.08, y), ("sans-serif", 13).into_font().color(&c))])
                    .map_err(e)?;
            }
        }
        Ok(())
    })
}

/// Pooled event distribution per configuration in one phase.
pub fn distribution(r: &Report, phase_index: usize) -> Result<String> {
    let p = r.phases.get(phase_index).ok_or_else(|| anyhow!("no phase {phase_index}"))?;
    let rows = &p.rows;
    let lo = rows.iter().map(|x| x.distribution.p5).fold(f64::INFINITY, f64::min);
    let hi = rows.iter().map(|x| x.distribution.p99.max(x.distribution.p95)).fold(f64::NEG_INFINITY, f64::max);
    let (lo, hi) = if lo.is_finite() && hi.is_finite() && hi > lo { (lo, hi) } else { (0.0, 1.0) };
    let pad = (hi - lo) * 0.08;
    svg((W, H), |root| {
        let names: Vec<String> = rows.iter().map(|x| x.label.clone()).collect();
        let caption = format!("{}: {} per configuration (events pooled over jobs; by rank)", p.phase.name(), p.metric);
        let mut chart = frame(root, caption, 18, (50, 70))
            .build_cartesian_2d(-0.6f64..(rows.len() as f64 - 0.4), (lo - pad).max(0.0)..(hi + pad))
            .map_err(e)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(rows.len() + 1)
            .x_label_formatter(&|x| category(*x, &names))
            .y_desc("µs")
            .draw()
            .map_err(e)?;
        for (i, row) in rows.iter().enumerate() {
            let d = &row.distribution;
            let x = i as f64;
            let c = palette(i);
            chart.draw_series([PathElement::new(vec![(x, d.p5), (x, d.p95)], BLACK.stroke_width(1))]).map_err(e)?;
            chart
                .draw_series([Rectangle::new([(x - 0.3, d.p25), (x + 0.3, d.p75)], c.mix(0.6).filled())])
                .map_err(e)?;
            chart
                .draw_series([PathElement::new(vec![(x - 0.3, d.p50), (x + 0.3, d.p50)], BLACK.stroke_width(2))])
                .map_err(e)?;
            chart.draw_series([Circle::new((x, d.p99), 3, RED.filled())]).map_err(e)?;
        }
        Ok(())
    })
}

/// P(best) per configuration and phase (hierarchical posterior).
pub fn p_best(r: &Report) -> Result<String> {
    let labels = labels(r);
    let np = r.phases.len().max(1);
    svg((W, H), |root| {
        let caption = format!(
            "P(best), hierarchical posterior ({} draws, seed {})",
            r.policy.bootstrap_resamples, r.policy.bootstrap_seed
        );
        let mut chart = frame(root, caption, 18, (50, 50))
            .build_cartesian_2d(-0.6f64..(labels.len() as f64 - 0.4), 0f64..1.05f64)
            .map_err(e)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(labels.len() + 1)
            .x_label_formatter(&|x| category(*x, &labels))
            .y_desc("P(best)")
            .draw()
            .map_err(e)?;
        let w = 0.8 / np as f64;
        for (k, p) in r.phases.iter().enumerate() {
            let c = palette(k);
            let bars: Vec<Rectangle<(f64, f64)>> = labels
                .iter()
                .enumerate()
                .filter_map(|(i, l)| p.rows.iter().find(|x| &x.label == l).map(|row| (i, row.p_best)))
                .map(|(i, v)| {
                    let x0 = i as f64 - 0.4 + k as f64 * w;
                    Rectangle::new([(x0, 0.0), (x0 + w * 0.9, v)], c.filled())
                })
                .collect();
            chart
                .draw_series(bars)
                .map_err(e)?
                .label(p.phase.name())
                .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], c.filled()));
        }
        legend(&mut chart, SeriesLabelPosition::MiddleRight)
    })
}

/// One rank's compute and communication intervals in a window.
pub(crate) fn overlap_timeline(x: &TimelineExcerpt) -> Result<String> {
    let end = x.compute_us.iter().chain(x.comm_us.iter()).map(|i| i.1).fold(0.0f64, f64::max).max(1.0);
    svg((W, 300), |root| {
        let caption = format!(
            "{} on rank {} ({}, {}): compute (top) and communication (bottom)",
            x.phase.name(),
            x.rank,
            x.run_id,
            x.label
        );
        let mut chart = frame(root, caption, 16, (40, 90)).build_cartesian_2d(0f64..end, 0f64..2f64).map_err(e)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(5)
            .y_label_formatter(&|y| {
                if (*y - 0.5).abs() < 0.1 {
                    "comm".into()
                } else if (*y - 1.5).abs() < 0.1 {
                    "compute".into()
                } else {
                    String::new()
                }
            })
            .x_desc(format!("µs from the window start ({:?} intervals)", x.source))
            .draw()
            .map_err(e)?;
        chart
            .draw_series(
                x.compute_us
                    .iter()
                    .map(|&(a, b)| Rectangle::new([(a, 1.1), (b.max(a + end * 1e-4), 1.9)], palette(0).filled())),
            )
            .map_err(e)?;
        chart
            .draw_series(
                x.comm_us
                    .iter()
                    .map(|&(a, b)| Rectangle::new([(a, 0.1), (b.max(a + end * 1e-4), 0.9)], palette(1).filled())),
            )
            .map_err(e)?;
        Ok(())
    })
}

/// Each proxy's pick and its regret on the real job: point and interval.
pub fn truth_regret(t: &TruthReport) -> Result<String> {
    let n = t.proxies.len().max(1);
    let hi = t.proxies.iter().map(|p| p.regret.high_pct).filter(|x| x.is_finite()).fold(1.0f64, f64::max);
    svg((W, 120 + 60 * n as u32), |root| {
        let names: Vec<String> = t.proxies.iter().map(|p| format!("{} → {}", p.proxy, p.pick)).collect();
        let caption = format!(
            "Regret on the real job ({}): each proxy's pick, {:.1}% intervals",
            t.metric,
            t.pair_coverage * 100.0
        );
        let mut chart = frame(root, caption, 16, (40, 260))
            .build_cartesian_2d(0f64..hi * 1.1, -0.6f64..(n as f64 - 0.4))
            .map_err(e)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(n + 1)
            .y_label_formatter(&|y| category(*y, &names))
            .x_desc("% slower than the best configuration (0: within the best set)")
            .draw()
            .map_err(e)?;
        for (i, p) in t.proxies.iter().enumerate() {
            let y = i as f64;
            let g = &p.regret;
            let c = if g.within_best_set { palette(2) } else { palette(3) };
            chart
                .draw_series([PathElement::new(vec![(g.low_pct, y), (g.high_pct.min(hi * 1.1), y)], c.stroke_width(3))])
                .map_err(e)?;
            chart.draw_series([Circle::new((g.regret_pct, y), 5, c.filled())]).map_err(e)?;
        }
        Ok(())
    })
}

/// Per configuration, the empirical distribution of one phase's pooled events.
pub fn ecdf(r: &Report, phase_index: usize) -> Result<String> {
    let p = r.phases.get(phase_index).ok_or_else(|| anyhow!("no phase {phase_index}"))?;
    let step = crate::analysis::ECDF_STEP_PCT / 100.0;
    let all = p
        .rows
        .iter()
        .flat_map(|x| x.distribution.ecdf_us.iter().chain([&x.median_us]))
        .copied()
        .filter(|v| v.is_finite() && *v > 0.0);
    let (lo, hi) = all.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| (a.min(v), b.max(v)));
    let (lo, hi) = if lo.is_finite() && hi > lo { (lo / 1.2, hi * 1.2) } else { (1.0, 10.0) };
    svg((W, H), |root| {
        let caption = format!(
            "{}: {} per configuration, empirical distribution (dot: median of job medians, bar: their IQR)",
            p.phase.name(),
            p.metric
        );
        let mut chart =
            frame(root, caption, 15, (45, 55)).build_cartesian_2d((lo..hi).log_scale(), 0f64..1.0).map_err(e)?;
        chart.configure_mesh().x_desc("µs (log scale)").y_desc("fraction of events at or below").draw().map_err(e)?;
        for (i, row) in p.rows.iter().enumerate() {
            let c = palette(i);
            let q = &row.distribution.ecdf_us;
            let mut pts = Vec::with_capacity(2 * q.len());
            for (k, &v) in q.iter().enumerate() {
                let y = (k as f64 * step).min(1.0);
                if let Some(&(_, prev)) = pts.last() {
                    pts.push((v, prev));
                }
                pts.push((v, y));
            }
            chart
                .draw_series(LineSeries::new(pts, c.stroke_width(2)))
                .map_err(e)?
                .label(row.label.clone())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(3)));
            let y = 0.5 - 0.04 * (i as f64 - (p.rows.len() as f64 - 1.0) / 2.0);
            let (a, b) = ((row.median_us - row.iqr_us / 2.0).max(lo), row.median_us + row.iqr_us / 2.0);
            chart.draw_series([PathElement::new(vec![(a, y), (b.min(hi), y)], c.stroke_width(2))]).map_err(e)?;
            chart.draw_series([Circle::new((row.median_us, y), 4, c.filled())]).map_err(e)?;
        }
        legend(&mut chart, SeriesLabelPosition::LowerRight)
    })
}

/// Each proxy phase's median against the truth's, per configuration, both
/// as a ratio over the best: the real job's metric where the campaign has
/// `[truth]`, otherwise blocking's; each proxy's pick (its rank 1) ringed.
/// `None` when there is nothing to set against the truth.
pub fn proxy_vs_truth(r: &Report) -> Result<Option<String>> {
    use crate::core::workload::Phase;
    // (label, truth value), lower is better
    let (truth_name, truth): (String, Vec<(String, f64)>) = match &r.truth {
        Some(t) => {
            let sign = if t.better == "higher" { -1.0 } else { 1.0 };
            (
                format!("the real job ({})", t.metric),
                t.rows.iter().map(|x| (x.label.clone(), if sign < 0.0 { 1.0 / x.median } else { x.median })).collect(),
            )
        }
        None => match r.phases.iter().find(|p| p.phase == Phase::Blocking) {
            Some(b) => ("blocking".to_string(), b.rows.iter().map(|x| (x.label.clone(), x.median_us)).collect()),
            None => return Ok(None),
        },
    };
    let proxies: Vec<_> = r.phases.iter().filter(|p| r.truth.is_some() || p.phase != Phase::Blocking).collect();
    let best_truth = truth.iter().map(|x| x.1).filter(|v| v.is_finite() && *v > 0.0).fold(f64::INFINITY, f64::min);
    if proxies.is_empty() || !best_truth.is_finite() {
        return Ok(None);
    }
    let mut series = Vec::new();
    let mut top: f64 = 1.1;
    for p in &proxies {
        let best = p.rows.iter().map(|x| x.median_us).filter(|v| *v > 0.0).fold(f64::INFINITY, f64::min);
        let pts: Vec<(f64, f64, bool)> = p
            .rows
            .iter()
            .filter_map(|x| {
                truth.iter().find(|t| t.0 == x.label).map(|t| (x.median_us / best, t.1 / best_truth, x.rank == 1))
            })
            .filter(|(a, b, _)| a.is_finite() && b.is_finite())
            .collect();
        top = pts.iter().fold(top, |m, (a, b, _)| m.max(*a).max(*b));
        series.push((p.phase.name(), pts));
    }
    let top = top * 1.1;
    svg((W, H), |root| {
        let caption = format!(
            "Each proxy against {truth_name}: median over the best, per configuration (ringed: the proxy's pick)"
        );
        let mut chart = frame(root, caption, 15, (45, 60))
            .build_cartesian_2d((0.9f64..top).log_scale(), (0.9f64..top).log_scale())
            .map_err(e)?;
        chart
            .configure_mesh()
            .x_desc("proxy: median / best median")
            .y_desc(format!("{truth_name}: over the best"))
            .draw()
            .map_err(e)?;
        chart
            .draw_series([PathElement::new(vec![(0.9, 0.9), (top, top)], BLACK.mix(0.3).stroke_width(1))])
            .map_err(e)?;
        for (i, (name, pts)) in series.into_iter().enumerate() {
            let c = palette(i);
            chart
                .draw_series(pts.iter().map(|&(x, y, _)| Circle::new((x, y), 4, c.filled())))
                .map_err(e)?
                .label(name)
                .legend(move |(x, y)| Circle::new((x + 8, y), 4, c.filled()));
            chart
                .draw_series(pts.iter().filter(|p| p.2).map(|&(x, y, _)| Circle::new((x, y), 9, c.stroke_width(2))))
                .map_err(e)?;
        }
        legend(&mut chart, SeriesLabelPosition::UpperLeft)
    })
    .map(Some)
}

/// One job's clock offsets against rank 0 at the start and end windows, with their bounds.
pub fn clock_offsets(x: &crate::analysis::ClockExcerpt) -> Result<String> {
    let pts = x.ranks.iter().flat_map(|r| std::iter::once(r.start).chain(r.end));
    let (mut t1, mut lo, mut hi) = (0.0f64, 0.0f64, 0.0f64);
    for (t, o, b) in pts {
        t1 = t1.max(t);
        lo = lo.min(o - b);
        hi = hi.max(o + b);
    }
    let (t1, pad) = (t1.max(1e-3) * 1.1, ((hi - lo) * 0.1).max(1.0));
    svg((W, H), |root| {
        let caption = format!("Clock offset against rank 0, with bounds: job {} ({})", x.run_id, x.label);
        let mut chart =
            frame(root, caption, 15, (45, 70)).build_cartesian_2d(-t1 * 0.05..t1, (lo - pad)..(hi + pad)).map_err(e)?;
        chart
            .configure_mesh()
            .x_desc("s after the job's first calibration window")
            .y_desc("offset µs")
            .draw()
            .map_err(e)?;
        chart
            .draw_series([PathElement::new(vec![(-t1 * 0.05, 0.0), (t1, 0.0)], BLACK.mix(0.4).stroke_width(1))])
            .map_err(e)?;
        for (i, r) in x.ranks.iter().enumerate() {
            let c = palette(i);
            let windows: Vec<(f64, f64, f64)> = std::iter::once(r.start).chain(r.end).collect();
            chart
                .draw_series(LineSeries::new(windows.iter().map(|w| (w.0, w.1)), c.stroke_width(2)))
                .map_err(e)?
                .label(format!("rank {}{}", r.rank, if r.shared_kernel_clock { " (rank 0's clock)" } else { "" }))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(3)));
            for w in windows {
                chart
                    .draw_series([PathElement::new(vec![(w.0, w.1 - w.2), (w.0, w.1 + w.2)], c.stroke_width(2))])
                    .map_err(e)?;
                chart.draw_series([Circle::new((w.0, w.1), 4, c.filled())]).map_err(e)?;
            }
        }
        legend(&mut chart, SeriesLabelPosition::UpperRight)
    })
}

/// Every plot of a report: (file name, SVG).
pub fn all(r: &Report) -> Result<Vec<(String, String)>> {
    let mut out = vec![("ranks-slopegraph.svg".to_string(), slopegraph(r)?), ("p-best.svg".to_string(), p_best(r)?)];
    if let Some(t) = r.truth.as_ref().filter(|t| !t.proxies.is_empty()) {
        out.push(("truth-regret.svg".to_string(), truth_regret(t)?));
    }
    if let Some(svg) = proxy_vs_truth(r)? {
        out.push(("proxy-vs-truth.svg".to_string(), svg));
    }
    for (i, p) in r.phases.iter().enumerate() {
        out.push((format!("distribution-{}.svg", p.phase.name()), distribution(r, i)?));
        if p.rows.iter().all(|x| !x.distribution.ecdf_us.is_empty()) {
            out.push((format!("ecdf-{}.svg", p.phase.name()), ecdf(r, i)?));
        }
    }
    if let Some(x) = r.clock_excerpt.as_ref().filter(|x| !x.ranks.is_empty()) {
        out.push(("clock-offsets.svg".to_string(), clock_offsets(x)?));
    }
    if let Some(x) = &r.overlap_excerpt {
        out.push(("overlap-timeline.svg".to_string(), overlap_timeline(x)?));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::overlap::IntervalSource;
    use crate::core::workload::Phase;

    /// Asserts that `svg` parses and renders to a non-empty image.
    fn renders(svg: &str) {
        let tree = resvg::usvg::Tree::from_str(svg, &resvg::usvg::Options::default()).unwrap();
        assert!(tree.size().width() > 0.0);
    }

    #[test]
    fn clock_offsets_draw_every_rank_and_render() {
        let x = crate::analysis::ClockExcerpt {
            run_id: "r".into(),
            label: "c".into(),
            ranks: vec![
                crate::analysis::ClockRankWindows {
                    rank: 1,
                    start: (0.0, 120.0, 3.0),
                    end: Some((2.0, 124.0, 3.5)),
                    shared_kernel_clock: false,
                },
                crate::analysis::ClockRankWindows {
                    rank: 2,
                    start: (0.001, -40.0, 2.0),
                    end: None,
                    shared_kernel_clock: false,
                },
            ],
        };
        let svg = clock_offsets(&x).unwrap();
        assert!(svg.contains("rank 1") && svg.contains("rank 2"), "a legend entry per rank");
        renders(&svg);
    }

    #[test]
    fn the_timeline_names_its_rows_and_renders() {
        let x = TimelineExcerpt {
            run_id: "r".into(),
            label: "c".into(),
            rank: 0,
            phase: Phase::Overlap,
            source: IntervalSource::CuptiKernels,
            compute_us: vec![(0.0, 5.0), (20.0, 25.0)],
            comm_us: vec![(3.0, 18.0)],
        };
        let svg = overlap_timeline(&x).unwrap();
        assert!(svg.contains("\ncompute\n") && svg.contains("\ncomm\n"), "row labels on the y axis");
        renders(&svg);
    }
}
