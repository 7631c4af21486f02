//! Median, min and max of a benchmark's figures, shared by the criterion
//! benches' tables and the `asyncsteps-bench` harness.

/// Median, min and max of a set of figures.
#[derive(Clone, Copy, Debug, serde::Serialize, serde::Deserialize)]
pub struct Stats {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Stats {
    pub fn of(mut v: Vec<f64>) -> Self {
        assert!(!v.is_empty(), "no figures");
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Stats {
            median,
            min: v[0],
            max: v[n - 1],
        }
    }
}
