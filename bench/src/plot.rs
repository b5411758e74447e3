//! `--plot`: busbw against size, log-x, one line per configuration, with
//! the ceilings as horizontal lines. The font is embedded (DejaVu Sans via
//! plotters' ab_glyph backend), so no system fonts are needed.

use crate::report::{Report, Row};
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};
use std::path::Path;

fn ensure_font() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular());
    });
}

pub fn draw(r: &Report, path: &Path) -> Result<(), String> {
    ensure_font();
    let e = |e: &dyn std::fmt::Display| e.to_string();
    let rows: Vec<_> = r.rows.iter().filter(|x| x.size > 0).collect();
    let min = rows.iter().map(|x| x.size).min().unwrap_or(1).max(1) as f64;
    let max = rows.iter().map(|x| x.size).max().unwrap_or(2).max(2) as f64;
    let mut ymax = rows
        .iter()
        .chain(r.nccl_rows.iter().collect::<Vec<_>>().iter())
        .map(|x| x.out_of_place.busbw.max(x.in_place.busbw))
        .fold(0.0f64, f64::max);
    if let Some(c) = &r.ceilings {
        ymax = ymax.max(c.block_copy_gbps);
    }
    let ymax = (ymax * 1.15).max(1e-3);
    let root = BitMapBackend::new(path, (1200, 750)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let title = format!(
        "ringreduce {} - {} ranks - {} ({})",
        r.collective, r.ranks, r.device, r.execution
    );
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 24))
        .margin(15)
        .x_label_area_size(50)
        .y_label_area_size(70)
        .build_cartesian_2d((min..max * 1.5).log_scale(), 0.0..ymax)
        .map_err(|x| e(&x))?;
    chart
        .configure_mesh()
        .x_desc("size per rank (bytes)")
        .y_desc("busbw (GB/s)")
        .x_label_formatter(&|v| human(*v))
        .draw()
        .map_err(|x| e(&x))?;
    let mut color = 0usize;
    for (label, set) in [("ringreduce", &r.rows), ("NCCL", &r.nccl_rows)] {
        let keys = series(set);
        for (key, run, rows) in lines(set) {
            let again = match (run, r.algorithm.as_str()) {
                (0, _) => String::new(),
                // `--algo all` runs each forced algorithm once, then Auto.
                (_, "all") => " (auto)".to_string(),
                (n, _) => format!(" (sweep {})", n + 1),
            };
            for (place, ip) in [("oop", false), ("ip", true)] {
                let pts: Vec<(f64, f64)> = rows
                    .iter()
                    .filter(|x| x.size > 0)
                    .map(|x| {
                        (
                            x.size as f64,
                            if ip {
                                x.in_place.busbw
                            } else {
                                x.out_of_place.busbw
                            },
                        )
                    })
                    .collect();
                if pts.is_empty() {
                    continue;
                }
                let c = Palette99::pick(color).to_rgba();
                color += 1;
                chart
                    .draw_series(LineSeries::new(pts, c.stroke_width(2)))
                    .map_err(|x| e(&x))?
                    .label(format!("{label} {}{again} {place}", key.label(&keys)))
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
                    });
            }
        }
    }
    if let Some(c) = &r.ceilings {
        for (name, v, col) in [
            ("single-block copy", c.block_copy_gbps, RED),
            ("device copy", c.device_copy_gbps, BLACK),
        ] {
            if v <= ymax {
                chart
                    .draw_series(LineSeries::new(
                        vec![(min, v), (max * 1.5, v)],
                        col.stroke_width(1),
                    ))
                    .map_err(|x| e(&x))?
                    .label(format!("{name}: {v:.1} GB/s"))
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], col));
            }
        }
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .label_font(("sans-serif", 14))
        .draw()
        .map_err(|x| e(&x))?;
    root.present().map_err(|x| e(&x))?;
    Ok(())
}

/// One line of the plot (before its placement): a sweep with
/// `--collective all` or `--algo all` holds several, and drawing them as
/// one line joined each one's largest size back to the next one's smallest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Series {
    pub collective: String,
    pub algorithm: String,
    pub dtype: String,
    pub op: String,
}

impl Series {
    fn of(r: &Row) -> Self {
        Series {
            collective: r.collective.clone(),
            algorithm: r.algorithm.clone(),
            dtype: r.dtype.clone(),
            op: r.op.clone(),
        }
    }

    /// The fields that tell this series from the others in `all`, so
    /// that a legend of one collective and one algorithm stays short.
    pub fn label(&self, all: &[Series]) -> String {
        let mut parts: Vec<&str> = Vec::new();
        if all.iter().any(|s| s.collective != self.collective) {
            parts.push(&self.collective);
        }
        if all.iter().any(|s| s.algorithm != self.algorithm) {
            parts.push(&self.algorithm);
        }
        parts.push(&self.dtype);
        parts.push(&self.op);
        parts.join(" ")
    }
}

/// The series of `rows`, in the order each first appears.
pub fn series(rows: &[Row]) -> Vec<Series> {
    let mut out: Vec<Series> = Vec::new();
    for r in rows {
        let s = Series::of(r);
        if !out.contains(&s) {
            out.push(s);
        }
    }
    out
}

/// The plot's lines: each series' rows in report order, split where the
/// size stops growing, which is where a later sweep (Auto's, after the
/// forced ones) ran the same series again. With the sweep's number, from 0.
pub fn lines(rows: &[Row]) -> Vec<(Series, usize, Vec<&Row>)> {
    let mut out: Vec<(Series, usize, Vec<&Row>)> = Vec::new();
    for key in series(rows) {
        let mut run: Vec<&Row> = Vec::new();
        let mut n = 0;
        for r in rows.iter().filter(|r| Series::of(r) == key) {
            if run.last().is_some_and(|p| r.size <= p.size) {
                out.push((key.clone(), n, std::mem::take(&mut run)));
                n += 1;
            }
            run.push(r);
        }
        out.push((key, n, run));
    }
    out
}

fn human(v: f64) -> String {
    let v = v as u64;
    if v >= 1 << 30 {
        format!("{}G", v >> 30)
    } else if v >= 1 << 20 {
        format!("{}M", v >> 20)
    } else if v >= 1 << 10 {
        format!("{}K", v >> 10)
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Perf;

    fn row(collective: &str, algorithm: &str, size: u64) -> Row {
        Row {
            collective: collective.into(),
            size,
            count: size / 4,
            dtype: "float".into(),
            op: "sum".into(),
            root: -1,
            channels: 1,
            algorithm: algorithm.into(),
            backend: "ringreduce".into(),
            out_of_place: perf(),
            in_place: perf(),
        }
    }

    fn perf() -> Perf {
        Perf {
            time_us: 1.0,
            algbw: 1.0,
            busbw: 1.0,
            wrong: Some(0),
            busbw_vs_ceiling: None,
            vs_device_copy: None,
            host_us: None,
        }
    }

    #[test]
    fn each_collective_and_algorithm_is_a_line_of_its_own() {
        let rows: Vec<Row> = ["reduce_scatter", "all_gather", "all_reduce"]
            .iter()
            .flat_map(|c| {
                [("ring", 8), ("ring", 1024), ("local", 8), ("local", 1024)]
                    .map(|(a, n)| row(c, a, n))
            })
            .collect();
        let s = series(&rows);
        assert_eq!(s.len(), 6);
        assert_eq!(s[0].label(&s), "reduce_scatter ring float sum");
        assert_eq!(s[5].label(&s), "all_reduce local float sum");
        // Within a series the sizes only grow: no line back to the start.
        for k in &s {
            let sizes: Vec<u64> = rows
                .iter()
                .filter(|r| Series::of(r) == *k)
                .map(|r| r.size)
                .collect();
            assert!(sizes.windows(2).all(|w| w[0] < w[1]), "{k:?}: {sizes:?}");
        }
        // A later sweep of the same series (Auto running local after the
        // forced local sweep) is a line of its own.
        let mut twice = rows.clone();
        twice.extend([
            row("all_reduce", "local", 8),
            row("all_reduce", "local", 1024),
        ]);
        let ls = lines(&twice);
        assert_eq!(ls.len(), 7);
        let again: Vec<_> = ls.iter().filter(|(_, n, _)| *n == 1).collect();
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].0.label(&s), "all_reduce local float sum");
        let sizes: Vec<u64> = again[0].2.iter().map(|r| r.size).collect();
        assert_eq!(sizes, [8, 1024]);
        let one = series(&rows[..2]);
        assert_eq!(one.len(), 1);
        assert_eq!(one[0].label(&one), "float sum");
    }
}
