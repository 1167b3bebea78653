//! The hardware contract: one experiment, one kind of hardware
//! (docs/CAMPAIGNS.md, "One kind of hardware").
//!
//! Consumes the contract (the spec's `[hardware]` as `plan` froze it in the
//! manifest, format 5; the default contract where the spec declares none) and
//! the headers of a cell's shards (what each rank recorded,
//! docs/ARCHITECTURE.md §8); produces `verify`'s refusals in words
//! (`refused[HARDWARE_CONTRACT]`: the field, the expected value and the
//! recorded one). No I/O.
use crate::core::{fsutil, identity};
use crate::evidence::shard::ShardHeader;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// A recorded identity field a hardware contract can hold, as a rank's shard header records it.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[serde(rename_all = "snake_case")]
pub enum HardwareField {
    /// Host name. Held by `hosts`; in `same`, a cell's set of hosts must equal the other cells'.
    Host,
    /// CPU model (`/proc/cpuinfo`).
    CpuModel,
    /// The device's name: the GPU model (SKU) on `cuda`, the CPU model on `cpu`.
    DeviceName,
    /// NVIDIA driver version (NVML, read at start; `cuda` only).
    GpuDriver,
    /// CUDA version the driver supports (NVML, read at start; `cuda` only).
    CudaDriver,
    /// NCCL version as the loaded library reports it (`cuda` only; compared within each configuration).
    NcclVersion,
    /// SHA-256 of the NCCL library mapped: the build (`cuda` only; compared within each configuration).
    NcclSha256,
    /// MPI library version string (`MPI_Get_library_version`).
    MpiLibrary,
    /// Kernel release (`uname -r`).
    Kernel,
    /// The node's GPU topology (`nvidia-smi topo -m`; `cuda` only).
    Topology,
    /// Ranks on the rank's node (the job's placement).
    RanksPerNode,
}

impl HardwareField {
    /// Every field, in the order refusals check them.
    pub const ALL: [HardwareField; 11] = [
        HardwareField::Host,
        HardwareField::CpuModel,
        HardwareField::DeviceName,
        HardwareField::GpuDriver,
        HardwareField::CudaDriver,
        HardwareField::NcclVersion,
        HardwareField::NcclSha256,
        HardwareField::MpiLibrary,
        HardwareField::Kernel,
        HardwareField::Topology,
        HardwareField::RanksPerNode,
    ];

    /// Whether the field is compared within each configuration rather than
    /// across the campaign: configurations may name different NCCL libraries
    /// on purpose (a version against another), never one library whose build
    /// changes between rounds.
    pub fn per_configuration(self) -> bool {
        matches!(self, HardwareField::NcclVersion | HardwareField::NcclSha256)
    }

    /// What one rank recorded for this field; `None` where it recorded nothing
    /// (a `cpu` rank has no GPU driver).
    pub fn recorded(self, h: &ShardHeader) -> Option<String> {
        let fact = |k: &str| h.device.facts.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        match self {
            HardwareField::Host => Some(h.host.clone()),
            HardwareField::CpuModel => h.identity.cpu_model.clone(),
            HardwareField::DeviceName => Some(h.device.name.clone()),
            HardwareField::GpuDriver => fact("driver_version_start"),
            HardwareField::CudaDriver => fact("cuda_driver_version_start"),
            HardwareField::NcclVersion => fact("nccl_version"),
            HardwareField::NcclSha256 => fact("nccl_sha256"),
            HardwareField::MpiLibrary => h.identity.mpi_library.clone(),
            HardwareField::Kernel => h.identity.kernel.clone(),
            HardwareField::Topology => fact("topology"),
            HardwareField::RanksPerNode => Some(h.local_size.to_string()),
        }
    }
}

/// The field's name in the spec and in refusals (its serde name).
impl std::fmt::Display for HardwareField {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.serialize(f)
    }
}

/// The fields only the cuda backend records.
const CUDA_ONLY: [HardwareField; 5] = [
    HardwareField::GpuDriver,
    HardwareField::CudaDriver,
    HardwareField::NcclVersion,
    HardwareField::NcclSha256,
    HardwareField::Topology,
];

/// The spec's `[hardware]` table: what every cell of the campaign must share.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct HardwareSpec {
    /// Host names every rank must run on (absent: any host).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hosts: Option<Vec<String>>,
    /// Fields every cell must record alike (absent: every field but `host`;
    /// `[]`: none, the cells may differ).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub same: Option<Vec<HardwareField>>,
    /// Values every rank must record, by field (hosts are named with `hosts`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub expect: BTreeMap<HardwareField, String>,
}

impl HardwareSpec {
    /// [`validate`](Self::validate), and that every expected field is one
    /// the campaign's `backend` records: the CPU backend records no GPU
    /// driver, CUDA driver, NCCL build or GPU topology, so a contract that
    /// expects one could never hold and is refused before anything runs.
    pub fn validate_for(&self, backend: &str) -> anyhow::Result<()> {
        self.validate()?;
        if backend != "cuda" {
            if let Some(f) = self.expect.keys().find(|f| CUDA_ONLY.contains(f)) {
                anyhow::bail!(
                    "hardware.expect.{f}: the {backend} backend never records {f} (only cuda does), so no \
                    cell could verify"
                );
            }
        }
        Ok(())
    }

    /// What `plan` refuses in the table, in words.
    pub fn validate(&self) -> anyhow::Result<()> {
        if let Some(hosts) = &self.hosts {
            if hosts.is_empty() {
                anyhow::bail!(
                    "hardware.hosts is empty, so no cell could verify; name the hosts, or leave hosts out for any host"
                );
            }
            if let Some(h) = hosts.iter().find(|h| h.trim().is_empty() || h.trim() != h.as_str()) {
                anyhow::bail!("hardware.hosts: {h:?} is not a host name");
            }
        }
        if self.expect.contains_key(&HardwareField::Host) {
            anyhow::bail!("hardware.expect.host: name the hosts with hardware.hosts = [...]");
        }
        // a value no cell ever records: every cell would be refused after it ran
        if let Some((f, v)) = self.expect.iter().find(|(_, v)| v.trim().is_empty() || v.trim() != v.as_str()) {
            anyhow::bail!(
                "hardware.expect.{f} = {v:?}: no cell records {f} as an empty or space-padded value, so no \
                cell could verify"
            );
        }
        if let Some(same) = &self.same {
            let mut seen = BTreeSet::new();
            if let Some(f) = same.iter().find(|f| !seen.insert(**f)) {
                anyhow::bail!("hardware.same names {f} twice");
            }
        }
        Ok(())
    }
}

/// The contract frozen in the manifest: what `verify` holds every cell to.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HardwareContract {
    /// Whether the spec declared `[hardware]`; otherwise this is the default contract.
    pub declared: bool,
    /// Host names every rank ran on; empty: any host.
    pub hosts: Vec<String>,
    /// Fields every cell recorded alike: the per-configuration ones (`nccl_version`,
    /// `nccl_sha256`) among each configuration's cells, the others across the campaign.
    pub same: Vec<HardwareField>,
    /// Values every rank recorded.
    pub expect: BTreeMap<HardwareField, String>,
}

impl Default for HardwareContract {
    /// The contract of a spec without `[hardware]`, and of manifests written
    /// before format 5: any host, every other field alike.
    fn default() -> Self {
        Self { declared: false, hosts: Vec::new(), same: Self::default_fields(), expect: BTreeMap::new() }
    }
}

/// A field and the value a cell recorded for it (`None`: nothing recorded).
pub(crate) type FieldValue = (HardwareField, Option<String>);

/// What one cell recorded on the contract's `same` fields (its ranks agreeing).
#[derive(Clone, Debug, PartialEq)]
pub struct CellHardware {
    /// Per field of `same`, in contract order: the value every rank recorded
    /// (for `host`, the cell's hosts, sorted and comma-separated).
    pub values: Vec<FieldValue>,
    /// Rank 0's host, for messages.
    pub host: String,
}

/// A recorded value in a refusal: quoted, long values (a topology matrix) cut.
fn shown(v: Option<&str>) -> String {
    match v {
        None => "nothing".to_string(),
        Some(s) if s.chars().count() > 100 => {
            let head: String = s.chars().take(60).collect();
            let sha = fsutil::sha256_hex(s.as_bytes());
            format!("{head:?}… ({} characters, SHA-256 {})", s.chars().count(), &sha[..12])
        }
        Some(s) => format!("{s:?}"),
    }
}

impl HardwareContract {
    /// Every field but `host`: the cells share one kind of hardware, on any nodes.
    pub fn default_fields() -> Vec<HardwareField> {
        HardwareField::ALL.into_iter().filter(|f| *f != HardwareField::Host).collect()
    }

    /// The contract a spec's `[hardware]` table (or its absence) declares.
    pub fn resolve(spec: Option<&HardwareSpec>) -> Self {
        let Some(s) = spec else { return Self::default() };
        let same = match &s.same {
            None => Self::default_fields(),
            Some(fields) => HardwareField::ALL.into_iter().filter(|f| fields.contains(f)).collect(),
        };
        Self { declared: true, hosts: s.hosts.clone().unwrap_or_default(), same, expect: s.expect.clone() }
    }

    /// One cell, its ranks' headers in rank order: every rank on a named
    /// host, every expected value recorded, every rank recording the same
    /// value of each `same` field. The refusal in words, or what the cell
    /// recorded for [`disagreeing`](Self::disagreeing).
    pub fn check_cell(&self, headers: &[&ShardHeader]) -> Result<CellHardware, String> {
        self.check_cell_hooks(headers, identity::FACT_HOOKS_HONOURED)
    }

    /// [`check_cell`](Self::check_cell), where `hooks_honoured` says whether
    /// a record that set a test hook standing in for a fact may be judged
    /// at all (a test build); a release build refuses it, naming the hook.
    pub fn check_cell_hooks(&self, headers: &[&ShardHeader], hooks_honoured: bool) -> Result<CellHardware, String> {
        let first = headers.first().ok_or_else(|| "hardware contract: the cell has no shards".to_string())?;
        if !hooks_honoured {
            if let Some((h, (k, v))) = headers.iter().find_map(|h| identity::hook_used(&h.identity).map(|kv| (h, kv))) {
                return Err(format!(
                    "hardware contract: rank {} recorded the test hook {k}={v:?}, which stands in for a recorded fact: \
                        its host or CPU is not known to be measured (a test build's record; this build honours no \
                        hook)",
                    h.rank
                ));
            }
        }
        if !self.hosts.is_empty() {
            if let Some(h) = headers.iter().find(|h| !self.hosts.contains(&h.host)) {
                return Err(format!(
                    "hardware contract: host: rank {} ran on {:?}, which is not among hardware.hosts {:?}",
                    h.rank, h.host, self.hosts
                ));
            }
        }
        for (f, want) in &self.expect {
            for h in headers {
                let got = f.recorded(h);
                if got.as_deref() != Some(want.as_str()) {
                    return Err(format!(
                        "hardware contract: {f}: expected {} (hardware.expect), rank {} on host {} recorded {}",
                        shown(Some(want)),
                        h.rank,
                        h.host,
                        shown(got.as_deref())
                    ));
                }
            }
        }
        let mut values = Vec::with_capacity(self.same.len());
        for &f in &self.same {
            if f == HardwareField::Host {
                let hosts: BTreeSet<&str> = headers.iter().map(|h| h.host.as_str()).collect();
                values.push((f, Some(hosts.into_iter().collect::<Vec<_>>().join(","))));
                continue;
            }
            let v0 = f.recorded(first);
            if let Some(h) = headers.iter().find(|h| f.recorded(h) != v0) {
                return Err(format!(
                    "hardware contract: {f}: rank {} on host {} recorded {}, rank {} on host {} recorded {}: one job \
                        on two kinds of hardware",
                    h.rank,
                    h.host,
                    shown(f.recorded(h).as_deref()),
                    first.rank,
                    first.host,
                    shown(v0.as_deref())
                ));
            }
            values.push((f, v0));
        }
        Ok(CellHardware { values, host: first.host.clone() })
    }

    /// Of cells that passed every other check, as (cell, configuration
    /// label, what it recorded) in schedule order, those that recorded
    /// another value of a `same` field than most cells did (the first such
    /// group in schedule order on a tie), each with the reason: the
    /// campaign-wide fields across every cell, the per-configuration ones
    /// among the cells of its configuration.
    pub fn disagreeing(&self, cells: &[(String, String, CellHardware)]) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = Vec::new();
        let campaign: Vec<usize> = (0..cells.len()).collect();
        out.extend(Self::minority(cells, &campaign, false, None));
        let mut labels: Vec<&str> = Vec::new();
        for (_, l, _) in cells {
            if !labels.contains(&l.as_str()) {
                labels.push(l);
            }
        }
        for l in labels {
            let of: Vec<usize> = (0..cells.len()).filter(|&i| cells[i].1 == l).collect();
            for (cell, why) in Self::minority(cells, &of, true, Some(l)) {
                // one reason per cell: the campaign-wide one stands
                if !out.iter().any(|(c, _)| *c == cell) {
                    out.push((cell, why));
                }
            }
        }
        // schedule order
        out.sort_by_key(|(c, _)| cells.iter().position(|x| x.0 == *c));
        out
    }

    /// The cells among `of` whose values of the (per-configuration or
    /// campaign-wide) fields differ from the most common, with the reason.
    fn minority(
        cells: &[(String, String, CellHardware)],
        of: &[usize],
        per_configuration: bool,
        label: Option<&str>,
    ) -> Vec<(String, String)> {
        let key = |i: usize| -> Vec<&FieldValue> {
            cells[i].2.values.iter().filter(|(f, _)| f.per_configuration() == per_configuration).collect()
        };
        // (the fields' values, how many cells recorded them, the first such cell)
        let mut groups: Vec<(Vec<&FieldValue>, usize, usize)> = Vec::new();
        for &i in of {
            let k = key(i);
            match groups.iter_mut().find(|g| g.0 == k) {
                Some(g) => g.1 += 1,
                None => groups.push((k, 1, i)),
            }
        }
        if groups.len() < 2 {
            return Vec::new();
        }
        let most = groups.iter().fold(&groups[0], |best, g| if g.1 > best.1 { g } else { best });
        let whose = match label {
            Some(l) => format!("cells of configuration {l}"),
            None => "cells".to_string(),
        };
        let mut out = Vec::new();
        for &i in of {
            let k = key(i);
            if k == most.0 {
                continue;
            }
            let Some(((f, got), (_, want))) =
                k.iter().zip(most.0.iter()).map(|(a, b)| (*a, *b)).find(|(a, b)| a.1 != b.1)
            else {
                continue;
            };
            out.push((
                cells[i].0.clone(),
                format!(
                    "hardware contract: {f}: expected {} (as {} of {} {whose} recorded, first {}), this cell recorded \
                        {} (rank 0 on host {})",
                    shown(want.as_deref()),
                    most.1,
                    of.len(),
                    cells[most.2].0,
                    shown(got.as_deref()),
                    cells[i].2.host
                ),
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::shard;

    fn header(rank: u32, host: &str, cpu: &str, nccl: Option<&str>) -> ShardHeader {
        let mut h = shard::test_header("cpu", serde_json::json!([]));
        h.rank = rank;
        h.host = host.into();
        h.identity.host = host.into();
        h.identity.cpu_model = Some(cpu.into());
        h.device.name = cpu.into();
        if let Some(sha) = nccl {
            h.device.facts.push(("nccl_sha256".into(), sha.into()));
        }
        h
    }

    /// The contract of a `[hardware]` table that names only `same`.
    fn same(fields: Vec<HardwareField>) -> HardwareContract {
        HardwareContract::resolve(Some(&HardwareSpec { same: Some(fields), ..Default::default() }))
    }

    /// Asserts that the refusal `why` says `part`.
    fn says(why: &str, part: &str) {
        assert!(why.contains(part), "{why}");
    }

    fn cell(c: &HardwareContract, id: &str, label: &str, hs: &[ShardHeader]) -> (String, String, CellHardware) {
        let refs: Vec<&ShardHeader> = hs.iter().collect();
        (id.into(), label.into(), c.check_cell(&refs).expect("the cell itself is consistent"))
    }

    #[test]
    fn the_default_contract_holds_every_field_but_the_host() {
        let c = HardwareContract::resolve(None);
        assert!(!c.declared && c.hosts.is_empty() && c.expect.is_empty());
        assert!(!c.same.contains(&HardwareField::Host) && c.same.len() == HardwareField::ALL.len() - 1);
        let relaxed = same(vec![]);
        assert!(relaxed.declared && relaxed.same.is_empty());
        // fields keep the contract's order whatever the spec's
        let two = same(vec![HardwareField::Kernel, HardwareField::CpuModel]);
        assert_eq!(two.same, vec![HardwareField::CpuModel, HardwareField::Kernel]);
    }

    #[test]
    fn a_cell_on_another_host_or_with_another_value_is_refused_naming_the_field() {
        let spec = HardwareSpec { hosts: Some(vec!["n1".into(), "n2".into()]), ..Default::default() };
        let c = HardwareContract::resolve(Some(&spec));
        let hs = [header(0, "n1", "Xeon", None), header(1, "n3", "Xeon", None)];
        let why = c.check_cell(&hs.iter().collect::<Vec<_>>()).unwrap_err();
        says(&why, "host: rank 1 ran on \"n3\", which is not among hardware.hosts [\"n1\", \"n2\"]");
        let mut spec = HardwareSpec::default();
        spec.expect.insert(HardwareField::DeviceName, "NVIDIA H200".into());
        let why = HardwareContract::resolve(Some(&spec)).check_cell(&[&header(0, "n1", "Xeon", None)]).unwrap_err();
        says(&why, "device_name: expected \"NVIDIA H200\" (hardware.expect), rank 0 on host n1 recorded \"Xeon\"");
        spec.expect.clear();
        spec.expect.insert(HardwareField::GpuDriver, "570.1".into());
        let why = HardwareContract::resolve(Some(&spec)).check_cell(&[&header(0, "n1", "Xeon", None)]).unwrap_err();
        says(&why, "gpu_driver: expected \"570.1\" (hardware.expect), rank 0 on host n1 recorded nothing");
        // one job over two kinds of CPU
        let hs = [header(0, "n1", "Xeon", None), header(1, "n2", "EPYC", None)];
        let why = HardwareContract::default().check_cell(&hs.iter().collect::<Vec<_>>()).unwrap_err();
        says(
            &why,
            "cpu_model: rank 1 on host n2 recorded \"EPYC\", rank 0 on host n1 recorded \"Xeon\": one job on two kinds",
        );
        assert!(spec.validate().is_ok());
        for bad in [
            HardwareSpec { hosts: Some(vec![]), ..Default::default() },
            HardwareSpec { hosts: Some(vec![" n1".into()]), ..Default::default() },
            HardwareSpec { same: Some(vec![HardwareField::Kernel, HardwareField::Kernel]), ..Default::default() },
            HardwareSpec { expect: [(HardwareField::Host, "n1".to_string())].into(), ..Default::default() },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn cells_that_recorded_another_identity_than_most_are_named() {
        let c = HardwareContract::default();
        let cells = vec![
            cell(&c, "r01-a", "a", &[header(0, "n1", "Xeon", Some("s1")), header(1, "n1", "Xeon", Some("s1"))]),
            cell(&c, "r01-b", "b", &[header(0, "n2", "Xeon", Some("s2"))]),
            cell(&c, "r02-a", "a", &[header(0, "n3", "EPYC", Some("s1"))]),
            cell(&c, "r02-b", "b", &[header(0, "n2", "Xeon", Some("s2"))]),
            cell(&c, "r03-b", "b", &[header(0, "n2", "Xeon", Some("s3"))]),
        ];
        let refused = c.disagreeing(&cells);
        assert_eq!(refused.iter().map(|r| r.0.as_str()).collect::<Vec<_>>(), ["r02-a", "r03-b"], "{refused:?}");
        says(
            &refused[0].1,
            "cpu_model: expected \"Xeon\" (as 4 of 5 cells recorded, first r01-a), this cell \
                recorded \"EPYC\" (rank 0 on host n3)",
        );
        // configurations may differ in NCCL build; one configuration's cells may not
        says(
            &refused[1].1,
            "nccl_sha256: expected \"s2\" (as 2 of 3 cells of configuration b recorded, first \
                r01-b), this cell recorded \"s3\"",
        );
        // hosts are not held by default; with host in `same` the cells' host sets are
        assert!(c.disagreeing(&cells[..2]).is_empty());
        let h = same(vec![HardwareField::Host]);
        let cells = vec![
            cell(&h, "r01-a", "a", &[header(0, "n1", "Xeon", None), header(1, "n2", "Xeon", None)]),
            cell(&h, "r01-b", "b", &[header(0, "n2", "Xeon", None), header(1, "n1", "Xeon", None)]),
            cell(&h, "r02-a", "a", &[header(0, "n1", "Xeon", None), header(1, "n3", "Xeon", None)]),
        ];
        let refused = h.disagreeing(&cells);
        assert_eq!(refused.len(), 1);
        says(
            &refused[0].1,
            "host: expected \"n1,n2\" (as 2 of 3 cells recorded, first r01-a), this cell recorded \"n1,n3\"",
        );
        // a tie: the first group in schedule order stands
        let c = HardwareContract::default();
        let tie = vec![
            cell(&c, "r01-a", "a", &[header(0, "n1", "Xeon", None)]),
            cell(&c, "r01-b", "b", &[header(0, "n2", "EPYC", None)]),
        ];
        assert_eq!(c.disagreeing(&tie).iter().map(|r| r.0.as_str()).collect::<Vec<_>>(), ["r01-b"]);
    }

    #[test]
    fn a_record_that_set_a_fact_hook_is_refused_where_hooks_are_not_honoured() {
        let c = HardwareContract::resolve(None);
        for (var, val) in [
            ("COMMCANARY_TEST_HOST", "gpu017"),
            ("COMMCANARY_TEST_CPU_MODEL", "AMD EPYC 9654"),
            ("COMMCANARY_TEST_HOST", "n1"),
        ] {
            for hooked_rank in [0usize, 1] {
                let mut hs = [header(0, "n1", "Xeon", None), header(1, "n1", "Xeon", None)];
                hs[hooked_rank].identity.env.push((var.into(), val.into()));
                let refs: Vec<&ShardHeader> = hs.iter().collect();
                let why = c.check_cell_hooks(&refs, false).expect_err("refused");
                assert!(why.contains(&format!("rank {hooked_rank} recorded the test hook {var}={val:?}")), "{why}");
                // a test build judges the record as usual
                assert!(c.check_cell_hooks(&refs, true).is_ok());
            }
        }
        // an empty value sets nothing, and other COMMCANARY_ variables are not hooks
        let mut hs = [header(0, "n1", "Xeon", None)];
        hs[0].identity.env.push(("COMMCANARY_TEST_HOST".into(), String::new()));
        hs[0].identity.env.push(("COMMCANARY_THREADS".into(), "4".into()));
        assert!(c.check_cell_hooks(&hs.iter().collect::<Vec<_>>(), false).is_ok());
    }

    #[test]
    fn a_contract_no_cell_of_its_backend_can_meet_is_refused() {
        let spec = |f: HardwareField, v: &str| HardwareSpec {
            expect: BTreeMap::from([(f, v.to_string())]),
            ..Default::default()
        };
        for f in CUDA_ONLY {
            let e = spec(f, "570.124.06").validate_for("cpu").unwrap_err().to_string();
            assert!(e.contains(&format!("hardware.expect.{f}")) && e.contains("never records"), "{e}");
            spec(f, "570.124.06").validate_for("cuda").unwrap();
        }
        for f in [HardwareField::Kernel, HardwareField::CpuModel, HardwareField::MpiLibrary, HardwareField::GpuDriver] {
            for v in ["", " ", "6.1.0 "] {
                for backend in ["cpu", "cuda"] {
                    assert!(spec(f, v).validate_for(backend).is_err(), "{f} = {v:?} on {backend}");
                }
            }
        }
        spec(HardwareField::Kernel, "6.1.0-18-amd64").validate_for("cpu").unwrap();
    }

    #[test]
    fn long_values_are_cut_in_messages() {
        let topo = "GPU0\tGPU1\tCPU Affinity\n".repeat(20);
        let s = shown(Some(&topo));
        assert!(s.len() < 140 && s.contains("characters, SHA-256"), "{s}");
    }
}
