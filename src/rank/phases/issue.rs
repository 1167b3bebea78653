//! The runner's primitives, shared by every phase: calibrate a compute unit,
//! run a timed compute interval, and apply the negative controls that act
//! before a world arrival (`--inject-delay`, `--fault hang`).
use super::{Fault, MarkTarget, Runner, Work};
use crate::backend::{Backend, Compute};
use crate::core::workload::Phase;
use crate::evidence::shard::{ComputeEvent, ComputeKind};
use anyhow::{bail, Result};

impl<B: Backend> Runner<'_, B> {
    /// Duration of one unit of `kind`, after warm-up: the median difference
    /// of fenced batches of 1 and 1 + BATCH units, with a floor against a
    /// collapse (docs/METHODS.md, "Calibrated units and injected delays").
    pub(super) fn calibrate(&mut self, kind: ComputeKind) -> Result<u64> {
        const BATCH: u32 = 8;
        let (mut diffs, mut manys) = (Vec::with_capacity(9), Vec::with_capacity(9));
        self.backend.synchronize()?;
        for i in 0..11 {
            let mut timed = |units: u32| -> Result<u64> {
                let t0 = self.clock.now_ns();
                self.compute(Work::Unit(kind, units))?;
                self.backend.synchronize()?;
                Ok(self.clock.now_ns().saturating_sub(t0))
            };
            let one = timed(1)?;
            let many = timed(1 + BATCH)?;
            if i >= 2 {
                diffs.push((many.saturating_sub(one) / BATCH as u64).max(1));
                manys.push(many);
            }
        }
        // calibration work is not part of the pass
        let _ = self.backend.finish_pass()?;
        Ok(unit_from_samples(&mut diffs, &mut manys, BATCH))
    }

    pub(super) fn compute(&mut self, work: Work) -> Result<()> {
        match work {
            Work::Unit(ComputeKind::Gemm, units) => {
                Ok(self.backend.compute(Compute::Gemm { shape: 0, layer: 0, units })?)
            }
            Work::Unit(ComputeKind::Membound, units) => Ok(self.backend.compute(Compute::Membound(units))?),
            Work::Unit(ComputeKind::HostDelay, _) => bail!("internal: host delay is not a compute kernel"),
            Work::Layer(gemms, layer) => Ok(gemms
                .iter()
                .try_for_each(|&shape| self.backend.compute(Compute::Gemm { shape, layer, units: 1 }))?),
        }
    }

    pub(super) fn timed_compute(
        &mut self,
        phase: Phase,
        work: Work,
        token: Option<u32>,
        layer: Option<u32>,
    ) -> Result<()> {
        let (kind, units) = match work {
            Work::Unit(kind, units) => (kind, units),
            Work::Layer(gemms, _) => (ComputeKind::Gemm, gemms.len() as u32),
        };
        if units == 0 {
            return Ok(());
        }
        let m0 = self.backend.mark()?;
        let start_ns = self.clock.now_ns();
        self.compute(work)?;
        let end_ns = self.clock.now_ns();
        let m1 = self.backend.mark()?;
        let idx = self.body.compute.len();
        self.body.compute.push(ComputeEvent { phase, kind, token, layer, units, start_ns, end_ns });
        if let (Some(a), Some(b)) = (m0, m1) {
            self.pending_marks.push((MarkTarget::ComputeStart(idx), a));
            self.pending_marks.push((MarkTarget::ComputeEnd(idx), b));
        }
        Ok(())
    }

    /// The next collective's sequence number, after the negative controls
    /// that act before an arrival (a hang fault, an injected delay); returns
    /// the sequence number and the delay achieved, if any.
    pub(super) fn next_arrival(&mut self) -> (u64, Option<u64>) {
        let seq = self.group_seq(0, None);
        if self.fault == Some(Fault::Hang { rank: self.rank, seq }) {
            eprintln!("commcanary rank {}: fault injection: hanging before group 0 seq {seq}", self.rank);
            std::thread::sleep(std::time::Duration::from_secs(24 * 3600));
        }
        (seq, self.inject_delay(seq))
    }

    /// The negative control's delay before collective `seq`, if any; returns
    /// the delay actually achieved. Under 1 ms it spins where the node has a
    /// core per local rank, else it sleeps
    /// (docs/METHODS.md, "Calibrated units and injected delays").
    fn inject_delay(&self, seq: u64) -> Option<u64> {
        let d = self.delay.and_then(|d| d.delay_for(self.rank, seq))?;
        let t = self.clock.now_ns();
        if d < 1_000_000 && self.spin_short_delays {
            self.clock.spin_until(t + d);
        } else {
            std::thread::sleep(std::time::Duration::from_nanos(d));
        }
        Some(self.clock.now_ns() - t)
    }
}

/// One unit's time from per-sample differences over `batch` (`diffs`) and
/// the batch of 1 + `batch` units' times (`manys`): the median difference,
/// never below an eighth of the larger batch's median time per unit; never 0.
fn unit_from_samples(diffs: &mut [u64], manys: &mut [u64], batch: u32) -> u64 {
    let median = |v: &mut [u64]| {
        v.sort_unstable();
        v.get(v.len() / 2).copied().unwrap_or(0)
    };
    let floor = median(manys) / u64::from(batch + 1) / 8;
    median(diffs).max(floor).max(1)
}

#[cfg(test)]
mod tests {
    use super::unit_from_samples;

    #[test]
    fn the_unit_is_the_median_difference_and_never_collapses() {
        // fence 40 µs, unit 10 µs: 1 unit 50 µs, 9 units 130 µs; one noisy sample
        let (mut d, mut m) = (vec![10_000, 10_000, 9_000, 11_000, 10_000, 1, 10_000, 10_500, 9_500], vec![130_000; 9]);
        assert_eq!(unit_from_samples(&mut d, &mut m, 8), 10_000);
        // most batches of 1 preempted past their batch of 9: the differences collapse to 1 ns,
        // the unit stays within 8x of the batch of 9's time per unit
        let (mut d, mut m) = (vec![1, 1, 1, 1, 1, 10_000, 10_000, 10_000, 10_000], vec![130_000; 9]);
        assert_eq!(unit_from_samples(&mut d, &mut m, 8), 130_000 / 9 / 8);
        assert_eq!(unit_from_samples(&mut [], &mut [], 8), 1);
    }
}
