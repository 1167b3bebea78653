//! Descriptive statistics, free of I/O.
//!
//! Percentiles use the nearest-rank definition (the smallest value with at
//! least p% of the sample at or below it), as HdrHistogram and most latency
//! tools report them; the median of an even sample is the mean of the two
//! middle values. Empty input gives `None`, never 0.

/// Sort a sample in place (NaN-free input assumed; NaNs sort last).
fn sort(v: &mut [f64]) {
    v.sort_by(|a, b| a.total_cmp(b));
}

/// Median, or `None` for an empty sample.
pub fn median(v: &mut [f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    sort(v);
    let n = v.len();
    Some(if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 })
}

/// Nearest-rank percentile `p` in (0, 100], or `None` for an empty sample.
pub(crate) fn percentile_nearest_rank(v: &mut [f64], p: f64) -> Option<f64> {
    if v.is_empty() || !(p > 0.0 && p <= 100.0) {
        return None;
    }
    sort(v);
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    Some(v[rank.clamp(1, v.len()) - 1])
}

/// The `k`-th smallest value (0-based, `k < v.len()`) by selection (Rust's
/// `select_nth_unstable_by`, an introselect: Hoare's FIND, *CACM* 4(7), 1961,
/// with a linear worst case), in O(n) rather than a sort's O(n log n); `v` is
/// left partitioned around it, not sorted.
fn select(v: &mut [f64], k: usize) -> f64 {
    *v.select_nth_unstable_by(k, |a, b| a.total_cmp(b)).1
}

/// [`median`] by selection: the same value, `v` left unsorted.
pub(crate) fn median_unsorted(v: &mut [f64]) -> Option<f64> {
    let n = v.len();
    if n == 0 {
        return None;
    }
    let hi = select(v, n / 2);
    if n % 2 == 1 {
        return Some(hi);
    }
    // the lower middle value: the largest of the part below the upper one
    let lo = v[..n / 2].iter().copied().max_by(|a, b| a.total_cmp(b)).expect("n >= 2");
    Some((lo + hi) / 2.0)
}

/// [`percentile_nearest_rank`] by selection: the same value, `v` left unsorted.
pub(crate) fn percentile_nearest_rank_unsorted(v: &mut [f64], p: f64) -> Option<f64> {
    if v.is_empty() || !(p > 0.0 && p <= 100.0) {
        return None;
    }
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    Some(select(v, rank.clamp(1, v.len()) - 1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn known_values() {
        assert_eq!(median(&mut []), None);
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), Some(2.5));
        let mut v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile_nearest_rank(&mut v, 99.0), Some(99.0));
        assert_eq!(percentile_nearest_rank(&mut v, 50.0), Some(50.0));
        assert_eq!(percentile_nearest_rank(&mut v, 100.0), Some(100.0));
        assert_eq!(percentile_nearest_rank(&mut [7.0], 1.0), Some(7.0));
    }

    proptest! {
        #[test]
        fn selection_gives_the_sorted_figures(
            v in proptest::collection::vec(prop_oneof![-1e3f64..1e3, Just(0.0), Just(-0.0), Just(5.0)], 0..300),
            p in 0.1f64..100.0
        ) {
            let (mut a, mut b) = (v.clone(), v.clone());
            prop_assert_eq!(median_unsorted(&mut a).map(f64::to_bits), median(&mut b).map(f64::to_bits));
            let (mut a, mut b) = (v.clone(), v);
            prop_assert_eq!(
                percentile_nearest_rank_unsorted(&mut a, p).map(f64::to_bits),
                percentile_nearest_rank(&mut b, p).map(f64::to_bits)
            );
        }

        #[test]
        fn percentile_is_a_sample_member_with_enough_mass_below(
            mut v in proptest::collection::vec(-1e6f64..1e6, 1..200), p in 0.1f64..100.0
        ) {
            let x = percentile_nearest_rank(&mut v, p).unwrap();
            prop_assert!(v.contains(&x));
            let below = v.iter().filter(|&&y| y <= x).count() as f64;
            prop_assert!(below / v.len() as f64 >= p / 100.0 - 1e-12);
        }
    }
}
