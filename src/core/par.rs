//! Work over items on a few threads. Consumes a slice and a function;
//! produces the function's results in the items' order, whatever thread ran
//! each. Refuses nothing; a panic in the function is resumed in the caller.

use std::sync::atomic::{self, AtomicUsize};
/// Run `f` on every item on up to `threads` threads (each takes the next
/// item not yet taken), results in item order; on this thread where one
/// thread would do.
pub fn map<T: Sync, R: Send>(items: &[T], threads: usize, f: &(dyn Fn(&T) -> R + Sync)) -> Vec<R> {
    let threads = threads.clamp(1, items.len().max(1));
    if threads == 1 {
        return items.iter().map(f).collect();
    }
    let next = AtomicUsize::new(0);
    let mut got: Vec<(usize, R)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut out = Vec::new();
                    loop {
                        let i = next.fetch_add(1, atomic::Ordering::Relaxed);
                        let Some(item) = items.get(i) else { return out };
                        out.push((i, f(item)));
                    }
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().unwrap_or_else(|e| std::panic::resume_unwind(e))).collect()
    });
    got.sort_by_key(|g| g.0);
    got.into_iter().map(|g| g.1).collect()
}

/// The threads this process may use (`available_parallelism`, 1 where unknown).
pub fn available() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

#[cfg(test)]
mod tests {
    #[test]
    fn results_come_in_item_order_on_any_number_of_threads() {
        let items: Vec<u64> = (0..100).collect();
        for threads in [0, 1, 3, 200] {
            let got = super::map(&items, threads, &|x| x * x);
            assert_eq!(got, items.iter().map(|x| x * x).collect::<Vec<_>>(), "{threads} threads");
        }
        assert!(super::map(&Vec::<u64>::new(), 4, &|x| *x).is_empty());
    }
}
