//! Axis ticks: where they go on each [`Scale`], and how their values are written.

use super::Scale;

impl Scale {
    /// Tick positions (in axis units, after [`Scale::fwd`]) covering the axis span `[t0, t1]`.
    pub(super) fn axis_ticks(self, t0: f64, t1: f64, n_max: usize) -> Vec<f64> {
        self.ticks(self.inv(t0), self.inv(t1), n_max)
            .into_iter()
            .map(|v| self.fwd(v))
            .collect()
    }

    /// Tick values (in data units) covering `[lo, hi]` (data units), about `n_max` at most.
    pub(super) fn ticks(self, lo: f64, hi: f64, n_max: usize) -> Vec<f64> {
        let n_max = n_max.max(3);
        match self {
            Scale::Linear => linear_ticks(lo, hi, n_max.min(6)),
            Scale::Log10 => {
                let (a, b) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
                let decades = (b - a).max(1);
                let mults: &[f64] = if (decades as usize) * 3 <= n_max {
                    &[1.0, 2.0, 5.0]
                } else {
                    &[1.0]
                };
                let step = (decades as usize).div_ceil(n_max).max(1) as i32;
                let mut out = Vec::new();
                let mut e = a;
                while e <= b {
                    for m in mults {
                        let v = m * 10f64.powi(e);
                        if v >= lo * (1.0 - 1e-9) && v <= hi * (1.0 + 1e-9) {
                            out.push(v);
                        }
                    }
                    e += step;
                }
                out
            }
            Scale::SymLog => {
                // Regular tick families, densest first; the first whose ticks are at least
                // span/n_max apart (in transformed units) wins, so every panel reads alike.
                let span = self.fwd(hi) - self.fwd(lo);
                let min_gap = span / n_max as f64;
                let decades = |mults: &[f64]| {
                    let mut v = vec![0.0];
                    let mut m = 1.0;
                    while m < 1e7 {
                        for f in mults {
                            v.extend([m * f, -m * f]);
                        }
                        m *= 10.0;
                    }
                    v
                };
                let narrow = hi.abs().max(lo.abs()) < 10.0;
                let mut families = Vec::new();
                if narrow {
                    families.push(decades(&[1.0, 2.0, 5.0]));
                }
                families.push(decades(&[2.0, 5.0, 10.0]));
                families.push(
                    [
                        decades(&[10.0]),
                        vec![2.0, -2.0, 50.0, -50.0, 500.0, -500.0],
                    ]
                    .concat(),
                );
                families.push([decades(&[10.0]), vec![2.0, -2.0]].concat());
                families.push(decades(&[10.0]));
                let mut chosen = Vec::new();
                for fam in families {
                    let mut ticks: Vec<f64> = fam
                        .into_iter()
                        .filter(|&v| v >= lo - 1e-9 && v <= hi + 1e-9)
                        .collect();
                    ticks.sort_by(f64::total_cmp);
                    ticks.dedup();
                    let ok = ticks
                        .windows(2)
                        .all(|w| self.fwd(w[1]) - self.fwd(w[0]) >= min_gap * 0.9);
                    chosen = ticks;
                    if ok {
                        break;
                    }
                }
                chosen
            }
        }
    }
}

fn nice_step(raw: f64) -> f64 {
    let e = raw.log10().floor();
    let base = 10f64.powf(e);
    let f = raw / base;
    let m = if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 2.5 {
        2.5
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    };
    m * base
}

fn linear_ticks(lo: f64, hi: f64, n: usize) -> Vec<f64> {
    if hi.partial_cmp(&lo) != Some(std::cmp::Ordering::Greater) {
        return vec![lo];
    }
    let step = nice_step((hi - lo) / n as f64);
    let mut v = (lo / step).ceil() * step;
    let mut out = Vec::new();
    while v <= hi + step * 1e-9 {
        out.push(if v.abs() < step * 1e-9 { 0.0 } else { v });
        v += step;
    }
    out
}

/// A tick label: short, no trailing zeros.
pub(crate) fn tick_label(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 {
        return "0".to_owned();
    }
    if !(1e-3..1e4).contains(&a) {
        return format!("{v:.0e}");
    }
    let s = if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    };
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        s
    }
}
