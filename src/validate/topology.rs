//! Node topology of `validate`: what the node's GPUs are and how they are
//! connected, compared with the reference node's.
//!
//! Consumes NVML (the calls: docs/METHODS.md, "Node topology"), or on the CPU
//! backend the rank count and CPU model. Produces a [`Topology`] and, against a
//! reference, the differences. Refuses nothing: a difference fails the topology
//! check, an unreadable entry is recorded with NVML's error and compared as such.
use super::health::Reading;
use crate::core::identity;
use serde::{Deserialize, Serialize};
use std::os::raw;

/// One GPU as topology sees it.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct TopoGpu {
    /// NVML index.
    pub index: u32,
    /// Product name.
    pub name: Reading<String>,
    /// NUMA node of the GPU.
    pub numa_node: Reading<u32>,
    /// CPUs the GPU is close to (`nvmlDeviceGetCpuAffinity`), as a list of ranges.
    pub cpu_affinity: Reading<String>,
}

/// The node's topology.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct Topology {
    /// Why there is no GPU topology (CPU backend), or NVML's failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_applicable: Option<String>,
    /// Ranks of the validation.
    pub ranks: u32,
    /// CPU model.
    pub cpu_model: Option<String>,
    /// GPUs NVML enumerates.
    pub gpus: Vec<TopoGpu>,
    /// `matrix[i][j]`: how GPU i reaches GPU j, as `nvidia-smi topo -m` spells
    /// it: `NV<k>` for k active NVLinks to j, else the PCIe common ancestor
    /// (`PIX`, `PXB`, `PHB`, `NODE`, `SYS`), `X` on the diagonal, or the NVML error.
    pub matrix: Vec<Vec<String>>,
}

/// Read the node's GPU topology through an initialized NVML.
pub fn read(nvml: &nvml_wrapper::Nvml, ranks: u32) -> Topology {
    use nvml_wrapper::enum_wrappers::device::TopologyLevel;
    let count = nvml.device_count().unwrap_or(0);
    let devs: Vec<_> = (0..count).filter_map(|i| nvml.device_by_index(i).ok()).collect();
    let bus: Vec<Option<String>> =
        devs.iter().map(|d| d.pci_info().ok().map(|p| p.bus_id.to_ascii_lowercase())).collect();
    let gpus = devs
        .iter()
        .enumerate()
        .map(|(i, d)| TopoGpu {
            index: i as u32,
            name: Reading::from_result(d.name()),
            numa_node: Reading::from_result(d.numa_node_id()),
            cpu_affinity: Reading::from_result(d.cpu_affinity(16).map(|m| mask_ranges(&m))),
        })
        .collect();
    let mut matrix = Vec::new();
    for (i, a) in devs.iter().enumerate() {
        let mut row = Vec::new();
        // active NVLinks of GPU i per remote bus id
        let links: Vec<String> = (0..18)
            .map(|l| a.link_wrapper_for(l))
            .filter(|w| w.is_active().unwrap_or(false))
            .filter_map(|w| w.remote_pci_info().ok().map(|p| p.bus_id.to_ascii_lowercase()))
            .collect();
        for (j, bus_j) in bus.iter().enumerate() {
            let nv = bus_j.as_ref().map(|id| links.iter().filter(|x| *x == id).count()).unwrap_or(0);
            if i == j || nv > 0 {
                row.push(if i == j { "X".to_string() } else { format!("NV{nv}") });
                continue;
            }
            // topology_common_ancestor takes the other device by value: fetch a handle to it
            row.push(match nvml.device_by_index(j as u32).and_then(|o| a.topology_common_ancestor(o)) {
                Ok(TopologyLevel::Internal) => "INT".into(),
                Ok(TopologyLevel::Single) => "PIX".into(),
                Ok(TopologyLevel::Multiple) => "PXB".into(),
                Ok(TopologyLevel::HostBridge) => "PHB".into(),
                Ok(TopologyLevel::Node) => "NODE".into(),
                Ok(TopologyLevel::System) => "SYS".into(),
                Err(e) => format!("unreadable: {e}"),
            });
        }
        matrix.push(row);
    }
    Topology { not_applicable: None, ranks, cpu_model: identity::cpu_model(), gpus, matrix }
}

/// The CPU backend's topology: ranks and CPU model only.
pub fn cpu(ranks: u32) -> Topology {
    Topology {
        not_applicable: Some("no GPU: NVML topology not applicable (CPU backend)".into()),
        ranks,
        cpu_model: identity::cpu_model(),
        gpus: Vec::new(),
        matrix: Vec::new(),
    }
}

/// CPU mask words as ranges, e.g. `0-15,32-47`.
fn mask_ranges(words: &[raw::c_ulong]) -> String {
    let bits = std::mem::size_of::<raw::c_ulong>() * 8;
    let set: Vec<usize> = words
        .iter()
        .enumerate()
        .flat_map(|(w, &m)| (0..bits).filter(move |b| m >> b & 1 == 1).map(move |b| w * bits + b))
        .collect();
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < set.len() {
        let mut j = i;
        while j + 1 < set.len() && set[j + 1] == set[j] + 1 {
            j += 1;
        }
        out.push(if i == j { set[i].to_string() } else { format!("{}-{}", set[i], set[j]) });
        i = j + 1;
    }
    out.join(",")
}

/// Differences of `node` from `reference`, each named (empty: same topology).
pub fn differences(node: &Topology, reference: &Topology) -> Vec<String> {
    let mut d = Vec::new();
    if node.ranks != reference.ranks {
        d.push(format!("{} ranks, reference {}", node.ranks, reference.ranks));
    }
    if node.cpu_model != reference.cpu_model {
        d.push(format!("CPU model {:?}, reference {:?}", node.cpu_model, reference.cpu_model));
    }
    if node.gpus.len() != reference.gpus.len() {
        d.push(format!("{} GPUs, reference {}", node.gpus.len(), reference.gpus.len()));
        return d;
    }
    for (a, b) in node.gpus.iter().zip(&reference.gpus) {
        if a.name != b.name {
            d.push(format!("GPU {}: {:?}, reference {:?}", a.index, a.name.value, b.name.value));
        }
        if a.numa_node != b.numa_node {
            d.push(format!("GPU {}: NUMA node {:?}, reference {:?}", a.index, a.numa_node.value, b.numa_node.value));
        }
        if a.cpu_affinity != b.cpu_affinity {
            d.push(format!(
                "GPU {}: CPU affinity {:?}, reference {:?}",
                a.index, a.cpu_affinity.value, b.cpu_affinity.value
            ));
        }
    }
    for (i, (ra, rb)) in node.matrix.iter().zip(&reference.matrix).enumerate() {
        for (j, (a, b)) in ra.iter().zip(rb).enumerate() {
            if a != b {
                d.push(format!("GPU {i} to GPU {j}: {a}, reference {b}"));
            }
        }
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::raw;

    #[test]
    fn masks_print_as_ranges() {
        assert_eq!(mask_ranges(&[0b1110_1111]), "0-3,5-7");
        assert_eq!(mask_ranges(&[0, 1]), (std::mem::size_of::<raw::c_ulong>() * 8).to_string());
    }

    #[test]
    fn a_lost_nvlink_is_named() {
        let t = |m: &str| Topology {
            ranks: 2,
            matrix: vec![vec!["X".into(), m.into()], vec![m.into(), "X".into()]],
            ..Default::default()
        };
        assert!(differences(&t("NV18"), &t("NV18")).is_empty());
        let d = differences(&t("NV17"), &t("NV18"));
        assert_eq!(d.len(), 2);
        assert!(d[0].contains("GPU 0 to GPU 1: NV17, reference NV18"), "{d:?}");
    }
}
