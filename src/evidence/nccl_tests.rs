//! nccl-tests' output as evidence: the text table its `*_perf` programs
//! print and the JSON file their `-J` writes (JSON file version 3, nccl-tests
//! 2.19), and `rank -J`'s sweep JSON, which carries the same fields.
//!
//! Consumes the text of one run (one configuration); produces a
//! [`NcclTestsTable`]: one row per size with the out-of-place and in-place
//! time, algbw, busbw and `#wrong` where the run printed them. Refuses
//! (`BAD_INPUT`, naming the file and the line or result) a table with no
//! result row, a row whose numbers do not parse, a negative or non-finite
//! time, or two rows of one size; a time nccl-tests printed as `nan` (or as
//! JSON `null`) is unmeasured, never 0. Nothing the file says about itself
//! (its sizes, counts, versions) sizes an allocation: rows grow with the
//! bytes read, which `core::limits` bounds.
use crate::core::refusal::{self, Code};
use anyhow::{bail, Result};
use serde::Serialize;
use serde_json::Value;

/// One timing of one size (nccl-tests' out-of-place or in-place columns).
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct NcclTestsTiming {
    /// Time per iteration, µs (nccl-tests' `time`, or `cpu_time` with `-C`).
    pub time_us: f64,
    /// Algorithm bandwidth, GB/s; absent where it was not a number.
    pub alg_bw_gbps: Option<f64>,
    /// Bus bandwidth, GB/s; absent where it was not a number.
    pub bus_bw_gbps: Option<f64>,
    /// Wrong elements; absent when the run did not check (`N/A`).
    pub nwrong: Option<u64>,
}

/// One result line: one message size.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct NcclTestsRow {
    /// nccl-tests' size column, bytes.
    pub size_bytes: u64,
    /// Elements.
    pub count: u64,
    /// Element type as printed (`float`, `bfloat16`, …).
    pub dtype: String,
    /// Reduction as printed (`sum`, `none`, …).
    pub redop: String,
    /// Root rank, -1 where the kind has none.
    pub root: i64,
    /// Out-of-place timing; absent where the run printed none (trace replay).
    pub out_of_place: Option<NcclTestsTiming>,
    /// In-place timing; absent where the run printed none.
    pub in_place: Option<NcclTestsTiming>,
}

impl NcclTestsRow {
    /// The time a ranking uses: out-of-place where measured, else in-place.
    pub fn time_us(&self) -> Option<f64> {
        self.out_of_place.as_ref().or(self.in_place.as_ref()).map(|t| t.time_us)
    }
}

/// Which of the two shapes the table was read from.
#[derive(Serialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum NcclTestsSource {
    /// The printed table.
    Text,
    /// A `-J` JSON file.
    Json,
}

/// One nccl-tests run, as read.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct NcclTestsTable {
    /// The shape read.
    pub source: NcclTestsSource,
    /// The program (`all_reduce_perf`, …) where the output names it.
    pub program: Option<String>,
    /// nccl-tests' version where printed (text header).
    pub nccl_tests_version: Option<String>,
    /// The NCCL library's version code where recorded.
    pub nccl_version: Option<i64>,
    /// Result rows in file order.
    pub rows: Vec<NcclTestsRow>,
}

fn fault(name: &str, msg: String) -> anyhow::Error {
    refusal::refuse(Code::BadInput, format!("{name}: {msg}"))
}

/// Read one run's output, text or JSON (told apart by the first non-blank
/// character), `name` naming it in errors.
pub fn parse(text: &str, name: &str) -> Result<NcclTestsTable> {
    let table = if text.trim_start().starts_with('{') { parse_json(text, name)? } else { parse_text(text, name)? };
    if table.rows.is_empty() {
        return Err(fault(
            name,
            "no result row: not nccl-tests output, or a run that ended before its first size".into(),
        ));
    }
    let mut sizes: Vec<u64> = table.rows.iter().map(|r| r.size_bytes).collect();
    sizes.sort_unstable();
    if let Some(w) = sizes.windows(2).find(|w| w[0] == w[1]) {
        return Err(fault(name, format!("two result rows of {} bytes: one file holds one run", w[0])));
    }
    Ok(table)
}

/// A printed number: `None` for nccl-tests' `N/A` or `nan`.
fn number(tok: &str) -> Option<f64> {
    tok.parse::<f64>().ok().filter(|v| v.is_finite())
}

fn timing(toks: &[&str], name: &str, line: usize) -> Result<Option<NcclTestsTiming>> {
    let [time, alg, bus, wrong] = toks else { return Ok(None) };
    let Some(time_us) = number(time) else {
        if time.eq_ignore_ascii_case("nan") {
            return Ok(None);
        }
        return Err(fault(name, format!("line {line}: time {time:?} is not a number")));
    };
    if time_us < 0.0 {
        return Err(fault(name, format!("line {line}: negative time {time_us}")));
    }
    let nwrong = match *wrong {
        "N/A" => None,
        w => Some(
            number(w)
                .filter(|v| *v >= 0.0 && v.fract() == 0.0)
                .ok_or_else(|| fault(name, format!("line {line}: #wrong {w:?} is not a count")))? as u64,
        ),
    };
    Ok(Some(NcclTestsTiming { time_us, alg_bw_gbps: number(alg), bus_bw_gbps: number(bus), nwrong }))
}

/// The printed table. A result line is `size count type redop root`, then
/// four columns (time algbw busbw #wrong) out-of-place, with `-I 1` four
/// per-iteration columns after them, and the same for in-place; `-T 1`
/// prefixes a timestamp, which is skipped.
fn parse_text(text: &str, name: &str) -> Result<NcclTestsTable> {
    let mut t = NcclTestsTable {
        source: NcclTestsSource::Text,
        program: None,
        nccl_tests_version: None,
        nccl_version: None,
        rows: vec![],
    };
    let mut per_iter = false;
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let s = raw.trim();
        if let Some(h) = s.strip_prefix('#') {
            let h = h.trim();
            if let Some(rest) = h.strip_prefix("nccl-tests version ") {
                let mut it = rest.split_whitespace();
                t.nccl_tests_version = it.next().map(str::to_string);
                t.nccl_version = it.find_map(|w| w.strip_prefix("nccl-library=")).and_then(|v| v.parse().ok());
            } else if let Some(p) = h.strip_prefix("Collective test starting:") {
                t.program = Some(p.trim().to_string());
            } else if h.contains("i_min") || h.starts_with("Per-Iteration Report") {
                per_iter = true;
            }
            continue;
        }
        let toks: Vec<&str> = s.split_whitespace().collect();
        // A result line starts with two integers (size, count), maybe after a timestamp.
        let start = toks.iter().position(|w| w.parse::<u64>().is_ok()).filter(|&p| p <= 2);
        let Some(p) = start.filter(|&p| toks.get(p + 1).is_some_and(|w| w.parse::<u64>().is_ok())) else { continue };
        let toks = &toks[p..];
        if toks.len() < 9 {
            return Err(fault(
                name,
                format!("line {line}: a result line with {} columns (at least 9 expected)", toks.len()),
            ));
        }
        let root: i64 =
            toks[4].parse().map_err(|_| fault(name, format!("line {line}: root {:?} is not an integer", toks[4])))?;
        let width = if per_iter { 8 } else { 4 };
        let body = &toks[5..];
        let oop = timing(&body[..4.min(body.len())], name, line)?;
        let ip = body.get(width..width + 4).map(|b| timing(b, name, line)).transpose()?.flatten();
        t.rows.push(NcclTestsRow {
            size_bytes: toks[0].parse().expect("checked"),
            count: toks[1].parse().expect("checked"),
            dtype: toks[2].to_string(),
            redop: toks[3].to_string(),
            root,
            out_of_place: oop,
            in_place: ip,
        });
    }
    Ok(t)
}

fn json_number(v: &Value) -> Option<f64> {
    v.as_f64().filter(|x| x.is_finite())
}

fn json_timing(v: Option<&Value>, name: &str, at: usize, which: &str) -> Result<Option<NcclTestsTiming>> {
    let Some(o) = v.filter(|v| !v.is_null()) else { return Ok(None) };
    let time = o.get("time").or_else(|| o.get("cpu_time"));
    let Some(time_us) = time.and_then(json_number) else {
        if time.is_some_and(|t| t.is_null() || t.as_str() == Some("nan")) {
            return Ok(None);
        }
        return Err(fault(name, format!("results[{at}].{which}: time is missing or not a number")));
    };
    if time_us < 0.0 {
        return Err(fault(name, format!("results[{at}].{which}: negative time {time_us}")));
    }
    let nwrong = match o.get("nwrong") {
        None | Some(Value::Null) => None,
        Some(w) => Some(
            json_number(w)
                .filter(|x| *x >= 0.0 && x.fract() == 0.0 && *x < u64::MAX as f64)
                .ok_or_else(|| fault(name, format!("results[{at}].{which}.nwrong {w} is not a count")))?
                as u64,
        ),
    };
    Ok(Some(NcclTestsTiming {
        time_us,
        alg_bw_gbps: o.get("alg_bw").and_then(json_number),
        bus_bw_gbps: o.get("bus_bw").and_then(json_number),
        nwrong,
    }))
}

/// The `-J` file: `{version, args, env, nccl_version, config, devices,
/// results: [{size, count, type, redop, root, out_of_place, in_place, …}], …}`.
fn parse_json(text: &str, name: &str) -> Result<NcclTestsTable> {
    let v: Value = serde_json::from_str(text).map_err(|e| fault(name, format!("not JSON: {e}")))?;
    let Some(results) = v.get("results").and_then(Value::as_array) else {
        bail!(fault(name, "no `results` list: not an nccl-tests -J file".into()));
    };
    let program = v
        .get("args")
        .and_then(|a| a.get(0))
        .and_then(Value::as_str)
        .map(|p| p.rsplit('/').next().unwrap_or(p).to_string());
    let mut rows = Vec::with_capacity(results.len());
    for (at, r) in results.iter().enumerate() {
        let uint = |k: &str| {
            r.get(k)
                .and_then(Value::as_u64)
                .ok_or_else(|| fault(name, format!("results[{at}].{k} is missing or not a non-negative integer")))
        };
        let text_of = |k: &str| r.get(k).and_then(Value::as_str).map(|s| s.trim().to_string());
        let (size_bytes, count) = (uint("size")?, uint("count")?);
        // nccl-tests writes root as the printed, padded string; ours as a number.
        let root = match r.get("root") {
            Some(Value::String(s)) => s.trim().parse::<i64>().ok(),
            Some(x) => x.as_i64(),
            None => None,
        }
        .ok_or_else(|| fault(name, format!("results[{at}].root is missing or not an integer")))?;
        rows.push(NcclTestsRow {
            size_bytes,
            count,
            dtype: text_of("type").ok_or_else(|| fault(name, format!("results[{at}].type is missing")))?,
            redop: text_of("redop").ok_or_else(|| fault(name, format!("results[{at}].redop is missing")))?,
            root,
            out_of_place: json_timing(r.get("out_of_place"), name, at, "out_of_place")?,
            in_place: json_timing(r.get("in_place"), name, at, "in_place")?,
        });
    }
    Ok(NcclTestsTable {
        source: NcclTestsSource::Json,
        program,
        nccl_tests_version: None,
        nccl_version: v.get("nccl_version").and_then(Value::as_i64),
        rows,
    })
}

/// How a table becomes one number for a ranking.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum NcclTestsMetric {
    /// The time at this size, µs.
    Size(u64),
    /// The geometric mean of the times over the sizes every table has, µs.
    GeoMeanCommon,
}

/// (label, time µs) per configuration, and the sizes the times cover.
pub type LabelledTimes = (Vec<(String, f64)>, Vec<u64>);

/// Per table (label, table), the time `metric` asks for, µs, and the sizes
/// used. Refuses a size some table lacks or did not time, and tables with no
/// timed size in common.
pub fn times_us(tables: &[(String, NcclTestsTable)], metric: NcclTestsMetric) -> Result<LabelledTimes> {
    let timed =
        |t: &NcclTestsTable, size: u64| t.rows.iter().find(|r| r.size_bytes == size).and_then(NcclTestsRow::time_us);
    let sizes: Vec<u64> = match metric {
        NcclTestsMetric::Size(s) => {
            if let Some((l, _)) = tables.iter().find(|(_, t)| timed(t, s).is_none()) {
                bail!(fault(l, format!("no timed result of {s} bytes (--size must be one of every table's sizes)")));
            }
            vec![s]
        }
        NcclTestsMetric::GeoMeanCommon => {
            let Some((_, first)) = tables.first() else { bail!("no nccl-tests table given") };
            let common: Vec<u64> = first
                .rows
                .iter()
                .map(|r| r.size_bytes)
                .filter(|&s| tables.iter().all(|(_, t)| timed(t, s).is_some()))
                .collect();
            if common.is_empty() {
                bail!(refusal::refuse(
                    Code::BadInput,
                    "the nccl-tests tables have no timed size in common: run them over the same sizes, or choose one \
                        with --size"
                        .to_string()
                ));
            }
            common
        }
    };
    let out = tables
        .iter()
        .map(|(l, t)| {
            let each = sizes.iter().map(|&s| timed(t, s).expect("checked"));
            let time = match sizes.len() {
                1 => each.sum(),
                n => (each.map(|x| x.max(f64::MIN_POSITIVE).ln()).sum::<f64>() / n as f64).exp(),
            };
            (l.clone(), time)
        })
        .collect();
    Ok((out, sizes))
}

/// A folder of nccl-tests outputs, one run (one configuration) per file,
/// each labelled by its file name without the extension, in name order.
/// Hidden files are skipped; refuses a folder with no file, more than
/// [`crate::core::limits::MAX_NCCL_TESTS_FILES`] files, two files of one
/// label, or a file past its size limit or that does not parse.
pub fn read_dir(dir: &std::path::Path) -> Result<Vec<(String, NcclTestsTable)>> {
    use crate::core::limits::{read_text_bounded, MAX_NCCL_TESTS_FILES, MAX_NCCL_TESTS_FILE_BYTES};
    use crate::core::refusal::{refuse, Code};
    let mut files = Vec::new();
    for e in std::fs::read_dir(dir).map_err(|e| refuse(Code::NoSuchInput, format!("{}: {e}", dir.display())))? {
        let e = e.map_err(|e| anyhow::anyhow!("{}: {e}", dir.display()))?;
        let hidden = e.file_name().to_string_lossy().starts_with('.');
        if !hidden && e.file_type()?.is_file() {
            if files.len() == MAX_NCCL_TESTS_FILES {
                bail!(refuse(Code::OverLimit, format!("{}: more than {MAX_NCCL_TESTS_FILES} files", dir.display())));
            }
            files.push(e.path());
        }
    }
    files.sort();
    if files.is_empty() {
        bail!(refuse(
            Code::BadInput,
            format!("{}: no nccl-tests output in it (one file per configuration)", dir.display())
        ));
    }
    let mut out: Vec<(String, NcclTestsTable)> = Vec::with_capacity(files.len());
    for f in files {
        let label = f.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        if out.iter().any(|(l, _)| *l == label) {
            bail!(refuse(
                Code::BadInput,
                format!("{}: two files are named {label:?}: one output per configuration", dir.display())
            ));
        }
        let text = read_text_bounded(&f, MAX_NCCL_TESTS_FILE_BYTES)?;
        out.push((label, parse(&text, &f.display().to_string())?));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "\
# nccl-tests version 2.19.6 nccl-headers=22803 nccl-library=22803
# Collective test starting: all_reduce_perf
# nThread 1 nGpus 1 minBytes 8 maxBytes 128 step: 4(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 \
    graph: 0 unalign: 0
#
#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)
           8             2     float     sum      -1     9.51    0.00    0.00       0     9.12    0.00    0.00       0
          32             8     float     sum      -1    10.02    0.00    0.00       0      nan    0.00    0.00     N/A
         128            32     float     sum      -1   1.2e+03    0.00    0.00     N/A     9.77    0.01    0.01       0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 0.00123 
";

    #[test]
    fn text_rows_with_unmeasured_and_unchecked_cells() {
        let t = parse(TEXT, "a.txt").unwrap();
        assert_eq!(t.program.as_deref(), Some("all_reduce_perf"));
        assert_eq!(t.nccl_version, Some(22803));
        assert_eq!(t.rows.len(), 3);
        assert_eq!(t.rows[0].out_of_place.as_ref().unwrap().nwrong, Some(0));
        assert_eq!(t.rows[1].in_place, None, "nan is unmeasured, not 0");
        assert_eq!(t.rows[2].time_us(), Some(1200.0));
        assert_eq!(t.rows[2].out_of_place.as_ref().unwrap().nwrong, None);
    }

    #[test]
    fn per_iteration_columns_shift_the_in_place_group() {
        let text = "# Per-Iteration Report: CUDA event timing\n# size count type redop root time algbw busbw #wrong \
            i_min i_max i_p99 i_cv time\n\
                    1024 256 float sum -1 20.0 0.05 0.05 0 18.0 25.0 24.0 3.1 21.0 0.05 0.05 0 19.0 26.0 25.0 2.9\n";
        let t = parse(text, "i.txt").unwrap();
        assert_eq!(t.rows[0].in_place.as_ref().unwrap().time_us, 21.0);
    }

    #[test]
    fn json_file_version_3() {
        let j = concat!(
            r#"{"version":3,"args":["/x/all_reduce_perf","-b","8"],"env":[],"nccl_version":22803,
          "results":[{"size":8,"count":2,"type":"float","redop":"sum","root":"    -1",
            "out_of_place":{"time":9.5,"alg_bw":0.0,"bus_bw":0.0,"nwrong":0.0},
            "in_place":{"time":"nan","alg_bw":0.0,"bus_bw":0.0,"nwrong":null},"#,
            r#""actual_iterations":20,"experiment_name":""}]}"#
        );
        let t = parse(j, "a.json").unwrap();
        assert_eq!(t.program.as_deref(), Some("all_reduce_perf"));
        assert_eq!(t.rows[0].root, -1);
        assert_eq!(t.rows[0].time_us(), Some(9.5));
        assert_eq!(t.rows[0].in_place, None);
    }

    #[test]
    fn refusals_name_the_file_and_the_fault() {
        for (text, want) in [
            ("hello\n", "no result row"),
            ("8 2 float sum -1 abc 0 0 0\n", "line 1: time \"abc\""),
            ("8 2 float sum -1 -3 0 0 0\n", "negative time"),
            ("8 2 float sum -1 3 0 0 0\n8 2 float sum -1 3 0 0 0\n", "two result rows of 8 bytes"),
            ("8 2 float sum x 3 0 0 0\n", "root"),
            ("8 2 float sum -1 3 0 0 1.5\n", "#wrong"),
            (r#"{"results":[{"size":-8}]}"#, "results[0].size"),
            (r#"{"version":3}"#, "no `results` list"),
        ] {
            let e = format!("{:#}", parse(text, "f.out").unwrap_err());
            assert!(e.contains("f.out") && e.contains(want), "{e}");
            assert!(e.contains("BAD_INPUT"), "{e}");
        }
    }

    #[test]
    fn metric_by_size_or_geometric_mean_of_common_sizes() {
        // a printed table of one out-of-place time per size
        let mk = |ts: &[(u64, f64)]| {
            let text: String = ts.iter().map(|(s, t)| format!("{s} {} float sum -1 {t} 0 0 0\n", s / 4)).collect();
            parse(&text, "t").unwrap()
        };
        let tables = vec![
            ("a".to_string(), mk(&[(8, 4.0), (64, 16.0), (512, 1.0)])),
            ("b".to_string(), mk(&[(8, 2.0), (64, 8.0)])),
        ];
        let (t, sizes) = times_us(&tables, NcclTestsMetric::GeoMeanCommon).unwrap();
        assert_eq!(sizes, vec![8, 64]);
        assert!((t[0].1 - 8.0).abs() < 1e-9 && (t[1].1 - 4.0).abs() < 1e-9);
        assert_eq!(times_us(&tables, NcclTestsMetric::Size(64)).unwrap().0[1].1, 8.0);
        let e = format!("{:#}", times_us(&tables, NcclTestsMetric::Size(512)).unwrap_err());
        assert!(e.contains("b: no timed result of 512 bytes"), "{e}");
    }
}
