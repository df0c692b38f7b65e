//! throughput.svg: aggregate throughput against thread count, one panel per scenario.

use crate::machine::Machine;
use crate::runs::Figures;
use crate::scenarios::SCENARIOS;
use plotters::prelude::*;
use std::path::Path;

const SERIES: [(&str, RGBColor); 7] = [
    ("turnstile", RGBColor(0, 114, 178)),
    ("turnstile-words", RGBColor(204, 121, 167)),
    ("turnstile-recent", RGBColor(86, 180, 233)),
    ("mutex-per-key", RGBColor(230, 159, 0)),
    ("global-lock", RGBColor(213, 94, 0)),
    ("governor", RGBColor(0, 158, 115)),
    ("floor-stack", RGBColor(150, 150, 150)),
];

pub fn throughput(path: &Path, machine: &Machine, figures: &Figures) -> Result<(), String> {
    draw(path, machine, figures).map_err(|e| format!("plot {}: {e}", path.display()))
}

fn draw(
    path: &Path,
    machine: &Machine,
    figures: &Figures,
) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::new(path, (1400, 1100)).into_drawing_area();
    root.fill(&WHITE)?;
    let (title, body) = root.split_vertically(50);
    title.draw_text(
        &format!(
            "Aggregate checks per second vs threads — {}",
            machine.line()
        ),
        &("sans-serif", 16).into_text_style(&title),
        (10, 15),
    )?;
    let panels = body.split_evenly((4, 2));
    let max_threads = figures
        .throughput
        .iter()
        .map(|t| t.threads)
        .max()
        .unwrap_or(1) as f64;
    for (scenario, panel) in SCENARIOS.iter().zip(panels.iter()) {
        let points = |limiter: &str| {
            let mut pts: Vec<(f64, f64)> = figures
                .throughput
                .iter()
                .filter(|t| t.scenario == *scenario && t.limiter == limiter)
                .map(|t| (t.threads as f64, t.ops_per_sec / 1e6))
                .collect();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            pts
        };
        let top = SERIES
            .iter()
            .flat_map(|(name, _)| points(name))
            .map(|p| p.1)
            .fold(1.0, f64::max)
            * 1.1;
        let mut chart = ChartBuilder::on(panel)
            .caption(scenario, ("sans-serif", 16))
            .margin(8)
            .x_label_area_size(30)
            .y_label_area_size(50)
            .build_cartesian_2d(0.5..max_threads + 0.5, 0.0..top)?;
        chart
            .configure_mesh()
            .x_desc("threads")
            .y_desc("M checks/s")
            .draw()?;
        for (name, color) in SERIES {
            let pts = points(name);
            if pts.is_empty() {
                continue;
            }
            chart
                .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))?
                .label(name)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
                });
            chart.draw_series(pts.into_iter().map(|p| Circle::new(p, 3, color.filled())))?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()?;
    }
    root.present()?;
    Ok(())
}
