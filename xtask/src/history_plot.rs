//! `cargo xtask plot-history OUT.svg RUN.json…`: the plot of BENCHMARKS.md's "Cost against
//! history": each measure's aged p50 against the number of recorded operations of the aged
//! home (log scale), from `stopline bench history --json` receipts, beside the fresh home's p50
//! of the same runs. Drawn with `plotters` (SVG backend).

use plotters::prelude::*;
use serde_json::Value;
use std::path::Path;

/// One measure's points: (operations, aged p50 ms), and the fresh p50s of the same runs.
struct Series {
    measure: String,
    aged: Vec<(f64, f64)>,
    fresh: Vec<f64>,
}

fn series(receipts: &[Value]) -> Vec<Series> {
    let mut out: Vec<Series> = Vec::new();
    for receipt in receipts {
        let operations = receipt["aged"]["operations"].as_f64().unwrap_or(0.0);
        for run in receipt["runs"].as_array().into_iter().flatten() {
            let measure = run["measure"].as_str().unwrap_or_default().to_string();
            let (Some(aged), Some(fresh)) =
                (run["aged_p50_ms"].as_f64(), run["fresh_p50_ms"].as_f64())
            else {
                continue;
            };
            match out.iter_mut().find(|s| s.measure == measure) {
                Some(s) => {
                    s.aged.push((operations, aged));
                    s.fresh.push(fresh);
                }
                None => out.push(Series {
                    measure,
                    aged: vec![(operations, aged)],
                    fresh: vec![fresh],
                }),
            }
        }
    }
    for s in &mut out {
        s.aged.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    out
}

/// Draw the plot of `receipts` into `out`.
pub fn plot(out: &Path, receipts: &[Value]) -> Result<(), String> {
    let all = series(receipts);
    if all.is_empty() {
        return Err("no runs in the receipts".into());
    }
    let x_max = all
        .iter()
        .flat_map(|s| s.aged.iter().map(|p| p.0))
        .fold(10.0, f64::max);
    let y_max = all
        .iter()
        .flat_map(|s| s.aged.iter().map(|p| p.1).chain(s.fresh.iter().copied()))
        .fold(1.0, f64::max)
        * 1.15;
    let root = SVGBackend::new(out, (900, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "stopline bench history: p50 against recorded operations (solid: aged, dashed: fresh)",
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(60)
        .build_cartesian_2d((1000f64..x_max * 1.5).log_scale(), 0f64..y_max)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("operations recorded in the aged home (cycles and evidence records: a tenth each)")
        .y_desc("p50, ms")
        .draw()
        .map_err(|e| e.to_string())?;
    for (i, s) in all.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(s.aged.clone(), color.stroke_width(2)))
            .map_err(|e| e.to_string())?
            .label(s.measure.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
        chart
            .draw_series(s.aged.iter().map(|&p| Circle::new(p, 3, color.filled())))
            .map_err(|e| e.to_string())?;
        let mut fresh = s.fresh.clone();
        fresh.sort_by(f64::total_cmp);
        let median = fresh[fresh.len() / 2];
        let (x0, x1) = (s.aged[0].0, s.aged[s.aged.len() - 1].0);
        chart
            .draw_series(DashedLineSeries::new(
                vec![(x0, median), (x1, median)],
                6,
                4,
                color.stroke_width(1),
            ))
            .map_err(|e| e.to_string())?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())
}
