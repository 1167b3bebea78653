//! The node's CPU load during a validation: is something other than this job
//! using the CPUs it runs on?
//!
//! Consumes Linux's `/proc` (proc(5)), snapshotted by rank 0 right before and
//! after the rounds, and every rank's process id. Produces a [`LoadReport`]:
//! load averages, and on the job's CPUs the busy, job, elsewhere and steal
//! shares and the busiest other processes. A reading that could not be taken
//! is absent, its reason listed, never 0. Refuses nothing: [`busy_elsewhere`]
//! says when the job shared its CPUs with other work.
//!
//! Method: docs/METHODS.md, "CPU load during validation".
use crate::core::clock;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// Share of the job's CPUs used by other processes (or stolen by the
/// hypervisor) during the rounds from which the CPUs count as busy with
/// something else: a tenth of their capacity.
pub const BUSY_ELSEWHERE_SHARE: f64 = 0.10;

/// How many processes outside the job the report lists.
pub const TOP_OTHER: usize = 5;

/// `/proc/loadavg` at one moment.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct LoadAvg {
    /// Unix time of the reading, ms.
    pub t_unix_ms: u64,
    /// Load average over 1 minute (runnable plus uninterruptible tasks, exponentially averaged).
    pub load_1m: f64,
    /// Over 5 minutes.
    pub load_5m: f64,
    /// Over 15 minutes.
    pub load_15m: f64,
    /// Tasks runnable at the reading (this job's ranks included).
    pub runnable_tasks: u32,
    /// Tasks (threads) that exist.
    pub total_tasks: u32,
}

/// A process outside this job that used CPU time during the rounds.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct OtherProcess {
    /// Process id.
    pub pid: u32,
    /// Command name (`comm`).
    pub comm: String,
    /// CPU time used in the window over the window's length: CPUs' worth (1.0 = one CPU busy the whole time).
    pub cpus_used: f64,
    /// The CPUs it may run on (`Cpus_allowed_list`), when readable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus_allowed: Option<String>,
}

/// The load section of the health report.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct LoadReport {
    /// CPUs online on the node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub online_cpus: Option<u32>,
    /// CPUs the job's ranks may run on (union of their affinity lists).
    pub job_cpus: Vec<u32>,
    /// Process ids of the job's ranks.
    pub job_pids: Vec<u32>,
    /// `/proc/loadavg` right before the rounds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<LoadAvg>,
    /// `/proc/loadavg` right after the rounds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<LoadAvg>,
    /// Length of the window between the two snapshots, s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_s: Option<f64>,
    /// Busy share of the job's CPUs in the window, all processes (user, nice, system, irq, softirq over all ticks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub busy_share: Option<f64>,
    /// This job's ranks' CPU time over the job's CPUs' ticks in the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_share: Option<f64>,
    /// Busy share minus the job's: what anything else used of the job's CPUs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub other_share: Option<f64>,
    /// Steal share of the job's CPUs (a hypervisor ran another guest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steal_share: Option<f64>,
    /// Processes outside the job that may run on its CPUs, by CPU used in the window, at most [`TOP_OTHER`].
    pub top_other: Vec<OtherProcess>,
    /// Readings that could not be taken, with the reason.
    pub unavailable: Vec<String>,
    /// How the readings were taken.
    pub method: String,
}

/// One snapshot of the counters (rank 0, in memory only).
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    at: Option<std::time::Instant>,
    loadavg: Option<LoadAvg>,
    /// Per CPU: (busy ticks, steal ticks, all ticks).
    cpus: BTreeMap<u32, (u64, u64, u64)>,
    /// Per process: (comm, utime + stime ticks, start time in ticks since boot).
    procs: BTreeMap<u32, (String, u64, u64)>,
    unavailable: Vec<String>,
}

/// Parse `/proc/loadavg` ("0.50 0.40 0.30 3/456 12345").
pub(crate) fn parse_loadavg(text: &str, t_unix_ms: u64) -> Option<LoadAvg> {
    let f: Vec<&str> = text.split_whitespace().collect();
    let (run, total) = f.get(3)?.split_once('/')?;
    Some(LoadAvg {
        t_unix_ms,
        load_1m: f.first()?.parse().ok()?,
        load_5m: f.get(1)?.parse().ok()?,
        load_15m: f.get(2)?.parse().ok()?,
        runnable_tasks: run.parse().ok()?,
        total_tasks: total.parse().ok()?,
    })
}

/// Parse the per-CPU lines of `/proc/stat`: CPU → (busy, steal, all) ticks.
pub(crate) fn parse_stat(text: &str) -> BTreeMap<u32, (u64, u64, u64)> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let mut f = line.split_whitespace();
        let Some(name) = f.next() else { continue };
        let Some(Ok(cpu)) = name.strip_prefix("cpu").filter(|s| !s.is_empty()).map(str::parse::<u32>) else { continue };
        // user nice system idle iowait irq softirq steal (guest and guest_nice are inside user and nice)
        let v: Vec<u64> = f.take(8).filter_map(|x| x.parse().ok()).collect();
        if v.len() < 8 {
            continue;
        }
        let busy = v[0] + v[1] + v[2] + v[5] + v[6];
        out.insert(cpu, (busy, v[7], v.iter().sum()));
    }
    out
}

/// Parse `/proc/PID/stat`: (comm, utime + stime, starttime), all in ticks.
pub(crate) fn parse_pid_stat(text: &str) -> Option<(String, u64, u64)> {
    // comm is in parentheses and may hold spaces and parentheses: it ends at the last ')'
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text.get(open + 1..close)?.to_string();
    let rest: Vec<&str> = text.get(close + 1..)?.split_whitespace().collect();
    // after comm: state(3) ppid(4) ... utime(14) stime(15) ... starttime(22); rest[0] is field 3
    let field = |n: usize| rest.get(n - 3).and_then(|x| x.parse::<u64>().ok());
    Some((comm, field(14)? + field(15)?, field(22)?))
}

/// Parse a CPU list ("0-3,8,10-11").
pub(crate) fn parse_cpu_list(s: &str) -> Option<BTreeSet<u32>> {
    let mut out = BTreeSet::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) = (a.parse().ok()?, b.parse().ok()?);
                if b < a || b - a > 1 << 16 {
                    return None;
                }
                out.extend(a..=b);
            }
            None => {
                out.insert(part.parse().ok()?);
            }
        }
    }
    Some(out)
}

fn cpus_allowed(pid: u32) -> Option<String> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).map(|v| v.trim().to_string())
}

/// Take a snapshot of the counters now.
pub(crate) fn snapshot() -> Snapshot {
    let mut s = Snapshot { at: Some(std::time::Instant::now()), ..Default::default() };
    match std::fs::read_to_string("/proc/loadavg") {
        Ok(t) => match parse_loadavg(&t, clock::unix_ms()) {
            Some(l) => s.loadavg = Some(l),
            None => s.unavailable.push(format!("/proc/loadavg: not the expected format: {:?}", t.trim())),
        },
        Err(e) => s.unavailable.push(format!("/proc/loadavg: {e}")),
    }
    match std::fs::read_to_string("/proc/stat") {
        Ok(t) => {
            s.cpus = parse_stat(&t);
            if s.cpus.is_empty() {
                s.unavailable.push("/proc/stat: no per-CPU line".into());
            }
        }
        Err(e) => s.unavailable.push(format!("/proc/stat: {e}")),
    }
    match std::fs::read_dir("/proc") {
        Ok(dir) => {
            for e in dir.flatten() {
                let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
                // a process may end between the listing and the read: it is then left out
                if let Some(p) =
                    std::fs::read_to_string(format!("/proc/{pid}/stat")).ok().and_then(|t| parse_pid_stat(&t))
                {
                    s.procs.insert(pid, p);
                }
            }
        }
        Err(e) => s.unavailable.push(format!("/proc: {e}")),
    }
    s
}

/// The report over the window from `start` to `end`, for the job whose ranks are `job_pids`.
pub fn report(start: &Snapshot, end: &Snapshot, job_pids: &[u32]) -> LoadReport {
    let mut r = LoadReport {
        online_cpus: Some(end.cpus.len() as u32).filter(|n| *n > 0),
        job_pids: job_pids.to_vec(),
        start: start.loadavg.clone(),
        end: end.loadavg.clone(),
        method:
            "rank 0 reads /proc/loadavg, the per-CPU lines of /proc/stat and every /proc/PID/stat right before and \
                right after the rounds (proc(5)); shares are tick differences over the window on the CPUs the job's \
                ranks may run on (Cpus_allowed_list of each rank); other = busy - this job's ranks' utime+stime"
                .into(),
        ..Default::default()
    };
    r.unavailable.extend(start.unavailable.iter().map(|u| format!("start: {u}")));
    r.unavailable.extend(end.unavailable.iter().map(|u| format!("end: {u}")));
    let mut job_cpus = BTreeSet::new();
    for &pid in job_pids {
        match cpus_allowed(pid).as_deref().and_then(parse_cpu_list) {
            Some(set) => job_cpus.extend(set),
            None => {
                r.unavailable.push(format!("/proc/{pid}/status: no readable Cpus_allowed_list for rank process {pid}"))
            }
        }
    }
    if job_cpus.is_empty() {
        // every CPU the kernel counts, when no rank's affinity could be read (stated in unavailable)
        job_cpus.extend(end.cpus.keys().copied());
    }
    r.job_cpus = job_cpus.iter().copied().collect();
    r.window_s = start.at.zip(end.at).map(|(a, b)| b.duration_since(a).as_secs_f64());
    let (mut busy, mut steal, mut all, mut counted) = (0u64, 0u64, 0u64, 0);
    for c in &job_cpus {
        if let (Some(x), Some(y)) = (start.cpus.get(c), end.cpus.get(c)) {
            busy += y.0.saturating_sub(x.0);
            steal += y.1.saturating_sub(x.1);
            all += y.2.saturating_sub(x.2);
            counted += 1;
        }
    }
    let delta = |pid: &u32| -> Option<u64> {
        let (_, t1, st1) = end.procs.get(pid)?;
        match start.procs.get(pid) {
            Some((_, t0, st0)) if st0 == st1 => Some(t1.saturating_sub(*t0)),
            // started in the window (or the pid was reused): all its time is the window's
            _ => Some(*t1),
        }
    };
    if counted > 0 && all > 0 {
        let all_f = all as f64;
        r.busy_share = Some(busy as f64 / all_f);
        r.steal_share = Some(steal as f64 / all_f);
        let job: Option<u64> = job_pids.iter().map(delta).sum();
        match job {
            Some(j) => {
                r.job_share = Some(j as f64 / all_f);
                r.other_share = Some(busy.saturating_sub(j) as f64 / all_f);
            }
            None => r.unavailable.push(
                "a rank's /proc/PID/stat was unreadable at an end of the window: this job's and the others' shares \
                    unmeasured"
                    .into(),
            ),
        }
    } else if r.unavailable.iter().all(|u| !u.contains("/proc/stat")) {
        r.unavailable.push("/proc/stat: no tick counted on the job's CPUs in the window".into());
    }
    // ticks per second of the per-process counters (USER_HZ, sysconf(_SC_CLK_TCK))
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if let (Some(w), true) = (r.window_s.filter(|w| *w > 0.0), hz > 0) {
        let job: BTreeSet<u32> = job_pids.iter().copied().collect();
        let mut others: Vec<(u32, u64)> = end
            .procs
            .keys()
            .filter(|p| !job.contains(p))
            .filter_map(|p| delta(p).filter(|t| *t > 0).map(|t| (*p, t)))
            .collect();
        others.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        for (pid, ticks) in others {
            let allowed = cpus_allowed(pid);
            // a process that cannot run on the job's CPUs does not compete with it
            if allowed.as_deref().and_then(parse_cpu_list).is_some_and(|set| set.is_disjoint(&job_cpus)) {
                continue;
            }
            r.top_other.push(OtherProcess {
                pid,
                comm: end.procs.get(&pid).map(|p| p.0.clone()).unwrap_or_default(),
                cpus_used: ticks as f64 / hz as f64 / w,
                cpus_allowed: allowed,
            });
            if r.top_other.len() == TOP_OTHER {
                break;
            }
        }
    }
    r
}

/// When the job's CPUs were busy with something else during the rounds (other
/// processes or steal at least [`BUSY_ELSEWHERE_SHARE`]), the sentence that says so.
pub fn busy_elsewhere(r: &LoadReport) -> Option<String> {
    let other = r.other_share.unwrap_or(0.0);
    let steal = r.steal_share.unwrap_or(0.0);
    if r.other_share.is_none() && r.steal_share.is_none() {
        return None;
    }
    (other + steal >= BUSY_ELSEWHERE_SHARE).then(|| {
        let mut s = format!(
            "the job's {} CPUs were busy with something else during the rounds: other processes used {}{} of their \
                time",
            r.job_cpus.len(),
            pct(r.other_share),
            if steal >= 0.005 { format!(" and the hypervisor stole {}", pct(r.steal_share)) } else { String::new() }
        );
        if !r.top_other.is_empty() {
            s.push_str(&format!("; top: {}", top(r)));
        }
        s
    })
}

fn pct(x: Option<f64>) -> String {
    x.map(|v| format!("{:.0}%", v * 100.0)).unwrap_or_else(|| "unmeasured".into())
}

fn top(r: &LoadReport) -> String {
    r.top_other
        .iter()
        .take(3)
        .map(|p| format!("{} (pid {}) {:.2} CPU", p.comm, p.pid, p.cpus_used))
        .collect::<Vec<_>>()
        .join(", ")
}

/// One line for the health section.
pub fn summary(r: &LoadReport) -> String {
    let la = |l: &Option<LoadAvg>| {
        l.as_ref()
            .map(|l| format!("{:.2} ({} runnable)", l.load_1m, l.runnable_tasks))
            .unwrap_or_else(|| "unmeasured".into())
    };
    let mut s = format!(
        "CPU load: loadavg 1 min {} at start, {} at end; on the job's {} of {} CPUs during the rounds: busy {}, this \
            job {}, other processes {}, steal {}",
        la(&r.start),
        la(&r.end),
        r.job_cpus.len(),
        r.online_cpus.map(|n| n.to_string()).unwrap_or_else(|| "?".into()),
        pct(r.busy_share),
        pct(r.job_share),
        pct(r.other_share),
        pct(r.steal_share)
    );
    if !r.top_other.is_empty() {
        s.push_str(&format!("; top other: {}", top(r)));
    }
    if !r.unavailable.is_empty() {
        s.push_str(&format!("; unavailable: {}", r.unavailable.join("; ")));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_files_parse() {
        let l = parse_loadavg("0.50 0.40 0.30 3/456 12345\n", 7).unwrap();
        assert_eq!((l.load_1m, l.runnable_tasks, l.total_tasks, l.t_unix_ms), (0.5, 3, 456, 7));
        assert!(parse_loadavg("garbage", 0).is_none());
        let st =
            parse_stat("cpu  10 0 5 100 0 0 0 0 0 0\ncpu0 4 1 2 50 3 1 1 2 0 0\ncpu1 6 0 3 50 0 0 0 0 0 0\nintr 1\n");
        assert_eq!(st.len(), 2, "the aggregate line is not a CPU");
        assert_eq!(st[&0], (4 + 1 + 2 + 1 + 1, 2, 64));
        let (comm, t, start) =
            parse_pid_stat("42 (a (b) c) S 1 1 1 0 -1 0 0 0 0 0 70 30 0 0 20 0 1 0 555 0 0").unwrap();
        assert_eq!((comm.as_str(), t, start), ("a (b) c", 100, 555));
        assert_eq!(parse_cpu_list("0-2,5").unwrap().into_iter().collect::<Vec<_>>(), vec![0, 1, 2, 5]);
        assert!(parse_cpu_list("3-1").is_none());
    }

    fn snap(at: std::time::Instant, cpus: &[(u32, (u64, u64, u64))], procs: &[(u32, &str, u64, u64)]) -> Snapshot {
        Snapshot {
            at: Some(at),
            loadavg: parse_loadavg("1.0 1.0 1.0 2/100 1", 0),
            cpus: cpus.iter().copied().collect(),
            procs: procs.iter().map(|(p, c, t, s)| (*p, (c.to_string(), *t, *s))).collect(),
            unavailable: vec![],
        }
    }

    #[test]
    fn other_share_is_busy_minus_the_job_and_unmeasured_is_absent() {
        let t0 = std::time::Instant::now();
        let t1 = t0 + std::time::Duration::from_secs(1);
        // a pid that cannot exist: its affinity is unreadable, so the job's CPUs fall back to all
        let job = [u32::MAX - 1];
        let a = snap(t0, &[(0, (0, 0, 0)), (1, (0, 0, 0))], &[(u32::MAX - 1, "rank", 0, 9)]);
        let b = snap(t1, &[(0, (100, 0, 100)), (1, (60, 10, 100))], &[(u32::MAX - 1, "rank", 100, 9)]);
        let r = report(&a, &b, &job);
        assert_eq!(r.job_cpus, vec![0, 1]);
        assert_eq!(r.busy_share, Some(0.8));
        assert_eq!(r.job_share, Some(0.5));
        assert_eq!(r.other_share, Some(0.3));
        assert_eq!(r.steal_share, Some(0.05));
        assert!(r.unavailable.iter().any(|u| u.contains("Cpus_allowed_list")), "{:?}", r.unavailable);
        assert!(busy_elsewhere(&r).unwrap().contains("other processes used 30%"));
        // the rank's stat unreadable at the end: the shares it enters are absent, never 0
        let b2 = snap(t1, &[(0, (100, 0, 100)), (1, (60, 10, 100))], &[]);
        let r2 = report(&a, &b2, &job);
        assert_eq!((r2.job_share, r2.other_share), (None, None));
        assert!(summary(&r2).contains("other processes unmeasured"), "{}", summary(&r2));
        let json = serde_json::to_value(&r2).unwrap();
        assert!(json.get("other_share").is_none(), "{json}");
        // an idle node is not busy elsewhere
        let b3 = snap(t1, &[(0, (50, 0, 100)), (1, (50, 0, 100))], &[(u32::MAX - 1, "rank", 100, 9)]);
        assert_eq!(busy_elsewhere(&report(&a, &b3, &job)), None);
    }

    #[test]
    fn this_machine_reads() {
        let a = snapshot();
        let b = snapshot();
        let r = report(&a, &b, &[std::process::id()]);
        assert!(r.start.is_some() && r.end.is_some(), "{:?}", r.unavailable);
        assert!(!r.job_cpus.is_empty());
    }
}
