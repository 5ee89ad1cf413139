//! docs/retry-storm.png: the request rate the server sees, one panel per strategy, same axes.
//!
//! Text goes through plotters' `ab_glyph` feature with DejaVu Sans from the `dejavu` crate,
//! so drawing needs no system fonts (no font-kit, nothing to apt-get on CI).

use crate::model::{Figures, Run, Scenario};
use plotters::prelude::*;
use plotters::style::{register_font, FontStyle};

const BUCKET_MS: u64 = 100;
/// Bars above this are clipped and labelled with their height, so a 10,000 req/s spike does
/// not flatten every other panel into the axis.
const Y_CLIP: f64 = 3_000.0;

/// Draws every run to `path`. `figures` are in the same order as `runs`.
pub(crate) fn draw(
    path: &str,
    runs: &[Run],
    figures: &[Figures],
    sc: &Scenario,
    title: &str,
) -> Result<(), String> {
    register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular())
        .map_err(|_| "the bundled DejaVu Sans did not load".to_owned())?;
    let end_ms = runs
        .iter()
        .flat_map(|r| r.ends.iter().map(|e| e.0))
        .max()
        .unwrap_or(sc.outage_ms);
    let x_max = end_ms.div_ceil(1000) as f64;
    let panel_h = 200u32;
    let root =
        BitMapBackend::new(path, (1200, 60 + panel_h * runs.len() as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let (top, body) = root.split_vertically(60);
    top.draw(&Text::new(
        title.to_owned(),
        (12, 8),
        ("sans-serif", 18).into_font(),
    ))
    .map_err(err)?;
    top.draw(&Text::new(
        "requests reaching the server per second (100 ms buckets); grey: lost in the outage, blue: served, red: shed (503); dashed: capacity".to_owned(),
        (12, 34),
        ("sans-serif", 14).into_font().color(&RGBColor(80, 80, 80)),
    ))
    .map_err(err)?;

    for (panel, (run, f)) in body
        .split_evenly((runs.len(), 1))
        .iter()
        .zip(runs.iter().zip(figures))
    {
        let caption = format!(
            "{}: {:.2} retries/intent, peak/mean {:.2}, {} shed, {} given up, drained {:.1} s after recovery",
            run.strategy.label(),
            f.retries_per_intent,
            f.peak_to_mean,
            f.shed,
            f.given_up,
            f.drain_s
        );
        let mut chart = ChartBuilder::on(panel)
            .caption(caption, ("sans-serif", 15))
            .margin_right(20)
            .x_label_area_size(28)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..x_max, 0.0..Y_CLIP)
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .light_line_style(WHITE)
            .y_labels(4)
            .y_label_formatter(&|y| format!("{y:.0}"))
            .x_labels(12)
            .x_label_formatter(&|x| format!("{x:.0}"))
            .x_desc("time since the outage began (s)")
            .y_desc("req/s")
            .label_style(("sans-serif", 12))
            .draw()
            .map_err(err)?;
        // The outage.
        chart
            .draw_series(std::iter::once(Rectangle::new(
                [(0.0, 0.0), (sc.outage_ms as f64 / 1000.0, Y_CLIP)],
                RGBColor(255, 235, 235).filled(),
            )))
            .map_err(err)?;
        let n = (end_ms / BUCKET_MS + 1) as usize;
        let mut counts = vec![[0u32; 3]; n];
        for (t, fate) in &run.sends {
            let i = (*t / BUCKET_MS) as usize;
            counts[i.min(n - 1)][*fate as usize] += 1;
        }
        let per_s = 1000.0 / BUCKET_MS as f64;
        let colours = [
            RGBColor(150, 150, 150),
            RGBColor(40, 90, 200),
            RGBColor(220, 50, 40),
        ];
        let mut bars = Vec::new();
        let mut clipped = Vec::new();
        for (i, c) in counts.iter().enumerate() {
            let x0 = (i as u64 * BUCKET_MS) as f64 / 1000.0;
            let x1 = x0 + BUCKET_MS as f64 / 1000.0;
            let mut y = 0.0f64;
            for (k, colour) in colours.iter().enumerate() {
                let h = f64::from(c[k]) * per_s;
                if h > 0.0 {
                    bars.push(Rectangle::new(
                        [(x0, y.min(Y_CLIP)), (x1, (y + h).min(Y_CLIP))],
                        colour.filled(),
                    ));
                }
                y += h;
            }
            if y > Y_CLIP {
                // One label per cluster of clipped bars (its highest), so labels never overlap.
                match clipped.last_mut() {
                    Some((lx, ly)) if x0 - *lx < 1.5 => *ly = f64::max(*ly, y),
                    _ => clipped.push((x1, y)),
                }
            }
        }
        chart.draw_series(bars).map_err(err)?;
        chart
            .draw_series(clipped.into_iter().map(|(x, y)| {
                Text::new(
                    format!("↑{y:.0}"),
                    (x, Y_CLIP * 0.93),
                    ("sans-serif", 12).into_font(),
                )
            }))
            .map_err(err)?;
        if sc.capacity_rps > 0 {
            let cap = f64::from(sc.capacity_rps);
            chart
                .draw_series(DashedLineSeries::new(
                    [(0.0, cap), (x_max, cap)],
                    6,
                    4,
                    BLACK.stroke_width(1),
                ))
                .map_err(err)?;
        }
    }
    root.present().map_err(err)?;
    Ok(())
}

fn err(e: impl std::fmt::Display) -> String {
    format!("plot: {e}")
}
