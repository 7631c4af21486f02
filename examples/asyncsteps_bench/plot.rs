//! The SVG plots: the scaling curve and the ratio bars.

use crate::report::Row;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::path::Path;

type PlotResult = Result<(), Box<dyn std::error::Error>>;

const OURS: RGBColor = RGBColor(0x1f, 0x77, 0xb4);
const TOKIO: RGBColor = RGBColor(0xd6, 0x27, 0x28);

/// The median ops/s of `workload` at each loop count, ascending.
fn curve(rows: &[Row], workload: &str, ours: bool) -> Vec<(usize, f64)> {
    let mut v: Vec<(usize, f64)> = rows
        .iter()
        .filter(|r| r.workload == workload)
        .map(|r| {
            let s = if ours {
                &r.ours_ops_per_s
            } else {
                &r.tokio_ops_per_s
            };
            (r.loops, s.median)
        })
        .collect();
    v.sort_by_key(|p| p.0);
    v
}

/// `scaling.svg`: left, ops/s against loops for `main` (ours, tokio, and
/// ours at 1 loop times the loop count); right, the speedup over the
/// smallest loop count of every workload of the "multi" group, ours solid
/// and tokio dashed. Returns false (and writes nothing) when fewer than
/// two loop counts ran.
pub fn scaling(path: &Path, rows: &[Row], main: &str) -> Result<bool, Box<dyn std::error::Error>> {
    let mut loops: Vec<usize> = rows.iter().map(|r| r.loops).collect();
    loops.sort_unstable();
    loops.dedup();
    if loops.len() < 2 {
        return Ok(false);
    }
    let (lo, hi) = (loops[0], loops[loops.len() - 1]);
    // The workload for the left panel: `main`, or the first one that ran
    // on more than one loop count.
    let main = if curve(rows, main, true).len() >= 2 {
        main.to_string()
    } else {
        match rows
            .iter()
            .find(|r| curve(rows, &r.workload, true).len() >= 2)
        {
            Some(r) => r.workload.clone(),
            None => return Ok(false),
        }
    };

    let root = SVGBackend::new(path, (1200, 520)).into_drawing_area();
    root.fill(&WHITE)?;
    let (left, right) = root.split_horizontally(560);

    // Left: absolute.
    let ours = curve(rows, &main, true);
    let tokio = curve(rows, &main, false);
    let base = ours[0];
    let ideal: Vec<(usize, f64)> = ours
        .iter()
        .map(|&(l, _)| (l, base.1 * l as f64 / base.0 as f64))
        .collect();
    let ymax = ours
        .iter()
        .chain(&tokio)
        .chain(&ideal)
        .map(|p| p.1)
        .fold(0.0, f64::max)
        * 1.1
        / 1e6;
    let mut c = ChartBuilder::on(&left)
        .caption(
            format!("{main}: million ops/s by loops"),
            ("sans-serif", 20),
        )
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(lo..hi, 0.0..ymax)?;
    c.configure_mesh()
        .x_labels(loops.len())
        .x_desc("loops (ours) / worker threads (tokio)")
        .y_desc("M ops/s")
        .draw()?;
    let m = |v: &[(usize, f64)]| v.iter().map(|&(l, x)| (l, x / 1e6)).collect::<Vec<_>>();
    c.draw_series(LineSeries::new(m(&ideal), OURS.mix(0.35).stroke_width(1)))?
        .label("ours, linear from its first point")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], OURS.mix(0.35)));
    c.draw_series(LineSeries::new(m(&ours), OURS.stroke_width(3)).point_size(4))?
        .label("futoin-asyncsteps")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], OURS.stroke_width(3)));
    c.draw_series(LineSeries::new(m(&tokio), TOKIO.stroke_width(3)).point_size(4))?
        .label("tokio")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], TOKIO.stroke_width(3)));
    c.configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;

    // Right: speedup of the "multi" workloads.
    let mut names: Vec<&str> = rows
        .iter()
        .filter(|r| r.group == "multi")
        .map(|r| r.workload.as_str())
        .collect();
    names.dedup();
    let mut lines = Vec::new();
    for &n in &names {
        for ours in [true, false] {
            let v = curve(rows, n, ours);
            if v.len() >= 2 {
                let b = v[0].1;
                lines.push((
                    n,
                    ours,
                    v.iter().map(|&(l, x)| (l, x / b)).collect::<Vec<_>>(),
                ));
            }
        }
    }
    let smax = lines
        .iter()
        .flat_map(|l| l.2.iter().map(|p| p.1))
        .fold(hi as f64 / lo as f64, f64::max)
        * 1.1;
    let smin = lines
        .iter()
        .flat_map(|l| l.2.iter().map(|p| p.1))
        .fold(1.0, f64::min)
        .min(1.0)
        * 0.9;
    let mut c = ChartBuilder::on(&right)
        .caption(
            format!(
                "speedup over {lo} loop{}: ours solid, tokio dashed",
                if lo == 1 { "" } else { "s" }
            ),
            ("sans-serif", 20),
        )
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d(
            lo..hi,
            (smin..smax)
                .log_scale()
                .with_key_points(key_points(smin, smax)),
        )?;
    c.configure_mesh()
        .x_labels(loops.len())
        .x_desc("loops / worker threads")
        .y_desc("ops/s ÷ ops/s at the fewest loops (log scale)")
        .y_label_formatter(&|v| format!("{v}x"))
        .draw()?;
    for (i, (name, ours, pts)) in lines.iter().enumerate() {
        let color = Palette99::pick(i / 2).to_rgba();
        if *ours {
            c.draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))?
                .label(*name)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
        } else {
            c.draw_series(DashedLineSeries::new(
                pts.clone(),
                6,
                4,
                color.stroke_width(2),
            ))?;
        }
    }
    c.configure_series_labels()
        .position(SeriesLabelPosition::LowerLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(true)
}

/// 1, 2, 5 times the powers of ten between `lo` and `hi`: the labels of a
/// log axis.
fn key_points(lo: f64, hi: f64) -> Vec<f64> {
    (-4..=4)
        .flat_map(|e| [1.0, 2.0, 5.0].map(|m| m * 10f64.powi(e)))
        .filter(|k| (lo..=hi).contains(k))
        .collect()
}

/// `ratios.svg`: for every workload, one bar per loop count from 1 to the
/// ratio ours ÷ tokio (log scale): bars to the right, ours is faster.
pub fn ratios(path: &Path, rows: &[Row]) -> PlotResult {
    let mut names: Vec<&str> = Vec::new();
    for r in rows {
        if !names.contains(&r.workload.as_str()) {
            names.push(&r.workload);
        }
    }
    let mut loops: Vec<usize> = rows.iter().map(|r| r.loops).collect();
    loops.sort_unstable();
    loops.dedup();
    let lmin = rows.iter().map(|r| r.ratio).fold(0.5, f64::min) / 1.5;
    let lmax = rows.iter().map(|r| r.ratio).fold(2.0, f64::max) * 1.5;
    let n = names.len();
    let per = 8 + 12 * loops.len() as u32;
    let height = 130 + per * n as u32;
    let root = SVGBackend::new(path, (1000, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut c = ChartBuilder::on(&root)
        .caption(
            "throughput ratio ours ÷ tokio (log scale; right of 1: ours faster)",
            ("sans-serif", 20),
        )
        .margin(15)
        .margin_left(200)
        .margin_right(60)
        .x_label_area_size(40)
        .build_cartesian_2d(
            (lmin..lmax)
                .log_scale()
                .with_key_points(key_points(lmin, lmax)),
            0.0..n as f64,
        )?;
    c.configure_mesh()
        .disable_y_mesh()
        .y_labels(0)
        .x_label_formatter(&|v| format!("{v}x"))
        .x_desc("ours ops/s ÷ tokio ops/s")
        .draw()?;
    // Workload i's band is [n - i - 1, n - i): the first one on top.
    let sub = 0.8 / loops.len() as f64;
    for (li, &l) in loops.iter().enumerate() {
        let color = Palette99::pick(li).to_rgba();
        let bars: Vec<_> = rows
            .iter()
            .filter(|r| r.loops == l)
            .filter_map(|r| {
                let i = names.iter().position(|&n| n == r.workload)?;
                let top = (n - i) as f64 - 0.1 - sub * li as f64;
                Some(Rectangle::new(
                    [(1.0, top), (r.ratio, top - sub * 0.85)],
                    color.filled(),
                ))
            })
            .collect();
        c.draw_series(bars)?
            .label(format!("{l} loop{}", if l == 1 { "" } else { "s" }))
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 15, y + 5)], color.filled()));
    }
    c.draw_series(std::iter::once(PathElement::new(
        vec![(1.0, 0.0), (1.0, n as f64)],
        BLACK.stroke_width(1),
    )))?;
    c.configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    // Each bar's value, past its end.
    let small = TextStyle::from(("sans-serif", 10).into_font()).color(&BLACK);
    for (li, &l) in loops.iter().enumerate() {
        for r in rows.iter().filter(|r| r.loops == l) {
            let Some(i) = names.iter().position(|&n| n == r.workload) else {
                continue;
            };
            let y = (n - i) as f64 - 0.1 - sub * (li as f64 + 0.45);
            let (x, y) = c.backend_coord(&(r.ratio, y));
            let (dx, h) = if r.ratio >= 1.0 {
                (4, HPos::Left)
            } else {
                (-4, HPos::Right)
            };
            root.draw(&Text::new(
                crate::report::fmt_ratio(r.ratio),
                (x + dx, y),
                small.pos(Pos::new(h, VPos::Center)),
            ))?;
        }
    }
    // The workload names, left of the plotting area.
    let style = TextStyle::from(("sans-serif", 13).into_font())
        .pos(Pos::new(HPos::Right, VPos::Center))
        .color(&BLACK);
    for (i, name) in names.iter().enumerate() {
        let (x, y) = c.backend_coord(&(lmin, (n - i) as f64 - 0.5));
        root.draw(&Text::new(name.to_string(), (x - 8, y), style.clone()))?;
    }
    root.present()?;
    Ok(())
}
