//! The dead-letter depth history of each DeadLetterQueue, kept by the console itself (a
//! small ring per resource, fed by its poll), and the sparkline of it: the points of an
//! inline SVG polyline, computed here (numbers only; no message text reaches the SVG).

use std::collections::{BTreeMap, VecDeque};

/// Depths kept per DeadLetterQueue: 120 polls (30 min at the default 15 s interval).
pub const POINTS: usize = 120;

/// The last [`POINTS`] dead-letter depths per DeadLetterQueue (`namespace/name`), oldest
/// first.
#[derive(Debug, Default)]
pub struct DepthHistory(BTreeMap<String, VecDeque<u64>>);

impl DepthHistory {
    /// Adds `depth` (messages) to `key`'s ring, dropping its oldest beyond [`POINTS`].
    pub fn push(&mut self, key: &str, depth: u64) {
        let ring = self.0.entry(key.to_string()).or_default();
        if ring.len() == POINTS {
            ring.pop_front();
        }
        ring.push_back(depth);
    }

    /// Forgets the resources `keep` says no to (gone from the manifests).
    pub fn retain(&mut self, keep: impl Fn(&str) -> bool) {
        self.0.retain(|k, _| keep(k));
    }

    /// `key`'s depths, oldest first (empty when never polled).
    pub fn of(&self, key: &str) -> Vec<u64> {
        self.0
            .get(key)
            .map(|r| r.iter().copied().collect())
            .unwrap_or_default()
    }
}

/// The `points` attribute of an SVG polyline drawing `depths` (oldest first) in a box
/// `width` × `height` (px): x evenly spaced left to right, y from the bottom (0) to the top
/// (the largest depth; a flat line at the bottom when every depth is 0). Empty for no
/// depth; one depth is a flat line across.
pub fn sparkline(depths: &[u64], width: u32, height: u32) -> String {
    let (w, h) = (f64::from(width), f64::from(height));
    let max = depths.iter().copied().max().unwrap_or(0).max(1) as f64;
    let y = |d: u64| h - (d as f64 / max) * h;
    match depths {
        [] => String::new(),
        [d] => format!("0,{:.1} {w:.1},{:.1}", y(*d), y(*d)),
        _ => {
            let step = w / (depths.len() - 1) as f64;
            depths
                .iter()
                .enumerate()
                .map(|(i, d)| format!("{:.1},{:.1}", i as f64 * step, y(*d)))
                .collect::<Vec<_>>()
                .join(" ")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_keeps_the_last_points_per_resource() {
        let mut h = DepthHistory::default();
        for d in 0..(POINTS as u64 + 5) {
            h.push("ns/a", d);
        }
        h.push("ns/b", 7);
        let a = h.of("ns/a");
        assert_eq!(a.len(), POINTS);
        assert_eq!(a.first(), Some(&5));
        assert_eq!(a.last(), Some(&(POINTS as u64 + 4)));
        assert_eq!(h.of("ns/b"), vec![7]);
        h.retain(|k| k == "ns/b");
        assert!(h.of("ns/a").is_empty());
    }

    #[test]
    fn sparkline_scales_to_the_box() {
        assert_eq!(sparkline(&[], 100, 20), "");
        assert_eq!(sparkline(&[0, 0], 100, 20), "0.0,20.0 100.0,20.0");
        assert_eq!(sparkline(&[3], 100, 20), "0,0.0 100.0,0.0");
        assert_eq!(
            sparkline(&[0, 5, 10], 100, 20),
            "0.0,20.0 50.0,10.0 100.0,0.0"
        );
    }
}
