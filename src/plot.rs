//! Charts of benchmark results, as SVG (`iwarp bench --plot`, `iwarp report compare
//! --plot`), drawn with `plotters`.
//!
//! * [`latency_percentiles`]: HdrHistogram's familiar percentile plot: latency (usec)
//!   against the percentile on a log scale of `1/(1-p)` (ticks at 90%, 99%, 99.9%, ...),
//!   one line per series.
//! * [`by_size`]: figures by message size (log2 axis), one line per series: bandwidth
//!   and message rate of `-a` sweeps, or the median and 99th percentile latency.
//! * [`over_time`]: per-interval bandwidth against time (`--interval`).
//!
//! Each series is a `<polyline>` or path the SVG names in its legend; the text is SVG
//! text (no font files are needed to draw or to view it).

use hdrhistogram::Histogram;
use plotters::coord::ranged1d::ValueFormatter;
use plotters::prelude::*;

/// A figure by message size: (octets, value) points.
pub type BySize = Vec<(u64, f64)>;

/// Width and height of a chart, in pixels.
pub const SIZE: (u32, u32) = (960, 600);

const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(23, 190, 207),
    RGBColor(140, 86, 75),
    RGBColor(127, 127, 127),
];

fn err(e: impl std::fmt::Display) -> String {
    format!("drawing the chart: {e}")
}

/// `1/(1-p)` for a percentile `p` in `[0, 1)`, the x of a percentile plot.
fn inverse(p: f64) -> f64 {
    1.0 / (1.0 - p.min(0.999_999_9))
}

/// The percentile distribution of a histogram (nanoseconds), in usec, as points
/// (`1/(1-p)`, latency). The axis ends where the data does: at `1/(1-p)` = the number of
/// values (the last percentile they can tell apart), where the maximum is drawn.
pub fn percentile_points(h: &Histogram<u64>) -> Vec<(f64, f64)> {
    let end = (h.len() as f64).max(10.0);
    let mut pts: Vec<(f64, f64)> = h
        .iter_quantiles(5)
        .map(|v| {
            (
                inverse(v.quantile_iterated_to()).min(end),
                v.value_iterated_to() as f64 / 1000.0,
            )
        })
        .filter(|(x, _)| x.is_finite())
        .collect();
    // Keep the highest value at each x (the maximum at the end).
    pts.dedup_by(|a, b| {
        if a.0 == b.0 {
            b.1 = b.1.max(a.1);
            true
        } else {
            false
        }
    });
    pts
}

/// At most `n` of `items`, spread evenly, the first and the last among them.
pub fn spread<T: Clone>(items: &[T], n: usize) -> Vec<T> {
    if items.len() <= n || n < 2 {
        return items.to_vec();
    }
    (0..n)
        .map(|k| items[k * (items.len() - 1) / (n - 1)].clone())
        .collect()
}

/// The percentile plot of `series` (name, histogram in nanoseconds) into `path`.
pub fn latency_percentiles(
    path: &std::path::Path,
    title: &str,
    series: &[(String, &Histogram<u64>)],
) -> Result<(), String> {
    let lines: Vec<(String, Vec<(f64, f64)>)> = series
        .iter()
        .map(|(n, h)| (n.clone(), percentile_points(h)))
        .collect();
    let x_max = lines
        .iter()
        .flat_map(|(_, p)| p.iter().map(|q| q.0))
        .fold(10.0f64, f64::max);
    let y_max = lines
        .iter()
        .flat_map(|(_, p)| p.iter().map(|q| q.1))
        .fold(0.0f64, f64::max)
        * 1.1;
    let y_min = lines
        .iter()
        .flat_map(|(_, p)| p.iter().map(|q| q.1))
        .fold(f64::INFINITY, f64::min)
        .max(1e-3);
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut builder = ChartBuilder::on(&root);
    builder
        .caption(title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(72);
    let x = (1.0..x_max).log_scale();
    // Latencies that span more than two orders of magnitude (the sizes of a sweep) go on
    // a log axis, others on a linear one from 0.
    if y_max / y_min > 100.0 {
        let chart = builder
            .build_cartesian_2d(x, (y_min * 0.8..y_max).log_scale())
            .map_err(err)?;
        percentile_lines(chart, &lines)?;
    } else {
        let chart = builder
            .build_cartesian_2d(x, 0.0..y_max.max(1e-3))
            .map_err(err)?;
        percentile_lines(chart, &lines)?;
    }
    root.present().map_err(err)
}

/// The mesh, the lines and the legend of a percentile plot.
fn percentile_lines<'a, DB, Y>(
    mut chart: ChartContext<'a, DB, Cartesian2d<LogCoord<f64>, Y>>,
    lines: &[(String, Vec<(f64, f64)>)],
) -> Result<(), String>
where
    DB: DrawingBackend + 'a,
    DB::ErrorType: 'static,
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    chart
        .configure_mesh()
        .x_desc("percentile")
        .y_desc("latency [usec]")
        .x_label_formatter(&|x| {
            let p = 100.0 * (1.0 - 1.0 / x);
            let t = format!("{p:.5}");
            format!("{}%", t.trim_end_matches('0').trim_end_matches('.'))
        })
        .draw()
        .map_err(err)?;
    for (i, (name, pts)) in lines.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(2)))
            .map_err(err)?
            .label(name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
    }
    legend(&mut chart)
}

fn legend<'a, DB: DrawingBackend + 'a, X: Ranged, Y: Ranged>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<X, Y>>,
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    legend_at(chart, SeriesLabelPosition::UpperLeft)
}

fn legend_at<'a, DB: DrawingBackend + 'a, X: Ranged, Y: Ranged>(
    chart: &mut ChartContext<'a, DB, Cartesian2d<X, Y>>,
    at: SeriesLabelPosition,
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(at)
        .draw()
        .map_err(err)
}

/// One panel of a figure by message size: `series` (name, points of (size in octets,
/// value)) on a log2 size axis, `y_desc` naming the figure.
pub struct Panel<'a> {
    /// The panel's title.
    pub title: &'a str,
    /// What the y axis shows, with its unit.
    pub y_desc: &'a str,
    /// The lines.
    pub series: &'a [(String, BySize)],
}

/// Figures by message size, one panel above the other (bandwidth and message rate of a
/// sweep; median and 99th percentile latency).
pub fn by_size(path: &std::path::Path, panels: &[Panel<'_>]) -> Result<(), String> {
    let n = panels.len().max(1);
    let root = SVGBackend::new(path, (SIZE.0, SIZE.1 / 2 * n as u32)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    for (area, panel) in root.split_evenly((n, 1)).iter().zip(panels) {
        size_panel(area, panel)?;
    }
    root.present().map_err(err)
}

fn size_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    panel: &Panel<'_>,
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let series = panel.series;
    // Sizes on a log2 axis: x is log2(size), labelled as the size (2, 4K, 8M).
    let log2 = |s: u64| (s.max(1) as f64).log2();
    let xs = series.iter().flat_map(|(_, p)| p.iter().map(|q| log2(q.0)));
    let x_min = xs.clone().fold(f64::INFINITY, f64::min).min(60.0);
    let x_max = xs.fold(f64::NEG_INFINITY, f64::max).max(x_min + 1.0);
    let y_max = series
        .iter()
        .flat_map(|(_, p)| p.iter().map(|q| q.1))
        .fold(0.0f64, f64::max)
        * 1.1;
    let mut chart = ChartBuilder::on(area)
        .caption(panel.title, ("sans-serif", 20))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(72)
        .build_cartesian_2d(x_min - 0.2..x_max + 0.2, 0.0..y_max.max(1e-9))
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("message size [octets]")
        .y_desc(panel.y_desc)
        .x_labels((x_max - x_min) as usize + 2)
        .x_label_formatter(&|x| {
            if (x - x.round()).abs() < 1e-6 && *x >= 0.0 {
                human_size(2f64.powi(x.round() as i32))
            } else {
                String::new()
            }
        })
        .draw()
        .map_err(err)?;
    for (i, (name, pts)) in series.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        let pts: Vec<(f64, f64)> = pts.iter().map(|&(s, v)| (log2(s), v)).collect();
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(2)))
            .map_err(err)?
            .label(name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 3, c.filled())))
            .map_err(err)?;
    }
    // The legend goes to the upper corner the lines leave free: the left one unless they
    // start high (a message rate falling with the size).
    let starts_high = series
        .iter()
        .filter_map(|(_, p)| p.first())
        .any(|&(_, v)| v > y_max / 2.0);
    legend_at(
        &mut chart,
        if starts_high {
            SeriesLabelPosition::UpperRight
        } else {
            SeriesLabelPosition::UpperLeft
        },
    )
}

/// Per-interval figures: `series` (name, points of (seconds, value)).
pub fn over_time(
    path: &std::path::Path,
    title: &str,
    y_desc: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> Result<(), String> {
    let x_max = series
        .iter()
        .flat_map(|(_, p)| p.iter().map(|q| q.0))
        .fold(0.0f64, f64::max)
        .max(1e-3);
    let y_max = series
        .iter()
        .flat_map(|(_, p)| p.iter().map(|q| q.1))
        .fold(0.0f64, f64::max)
        * 1.1;
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(72)
        .build_cartesian_2d(0.0..x_max, 0.0..y_max.max(1e-9))
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("time [s]")
        .y_desc(y_desc)
        .draw()
        .map_err(err)?;
    for (i, (name, pts)) in series.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(2)))
            .map_err(err)?
            .label(name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
    }
    legend(&mut chart)?;
    root.present().map_err(err)
}

/// `4096` as `4K`, `8388608` as `8M`.
pub fn human_size(x: f64) -> String {
    let v = x.round() as u64;
    if v >= 1 << 20 && v.is_multiple_of(1 << 20) {
        format!("{}M", v >> 20)
    } else if v >= 1 << 10 && v.is_multiple_of(1 << 10) {
        format!("{}K", v >> 10)
    } else {
        v.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(human_size(2.0), "2");
        assert_eq!(human_size(4096.0), "4K");
        assert_eq!(human_size(8388608.0), "8M");
        assert_eq!(human_size(1500.0), "1500");
    }

    #[test]
    fn percentile_points_rise_along_a_log_axis() {
        let mut h = Histogram::<u64>::new(3).unwrap();
        for v in 1..=10_000u64 {
            h.record(v * 100).unwrap();
        }
        let pts = percentile_points(&h);
        assert!(pts.len() > 20);
        assert!(pts.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1));
        // The median is near 500 usec.
        let (_, median) = pts.iter().find(|(x, _)| *x >= 2.0).unwrap();
        assert!((450.0..=560.0).contains(median), "{median}");
    }
}
