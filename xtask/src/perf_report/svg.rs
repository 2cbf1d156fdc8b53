//! One figure's plot as SVG, written by hand: a ratio over time, a line per machine kind, and
//! the goal as a dashed line.

use std::fmt::Write;

use super::summary::Goal;

/// A record's ratio for the figure.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    /// Days since 1970-01-01 (the x axis).
    pub day: i64,
    /// `YYYY-MM-DD`.
    pub date: String,
    pub ratio: f64,
    /// The record it comes from (the point's tooltip).
    pub record: String,
}

/// A machine kind's points, by date.
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    pub machine: String,
    pub points: Vec<Point>,
}

const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 360.0;
const LEFT: f64 = 60.0;
const RIGHT: f64 = 150.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 60.0;
const COLOURS: [&str; 6] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#17becf",
];

/// Days since 1970-01-01 of `YYYY-MM-DD` (the proleptic Gregorian calendar).
pub fn day_number(date: &str) -> Option<i64> {
    let mut parts = date.splitn(3, '-').map(|p| p.parse::<i64>().ok());
    let (y, m, d) = (parts.next()??, parts.next()??, parts.next()??);
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) {
        return None;
    }
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((m + 9) % 12) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    Some(era * 146_097 + doe - 719_468)
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The plot of `figure`'s ratio (`against` its floor or peer) with `goal`.
pub fn plot(figure: &str, against: &str, goal: Option<Goal>, lines: &[Line]) -> String {
    let points = || lines.iter().flat_map(|l| &l.points);
    let first = points().map(|p| p.day).min().unwrap_or(0);
    let last = points().map(|p| p.day).max().unwrap_or(0).max(first + 1);
    let top = points()
        .map(|p| p.ratio)
        .chain(goal.map(|g| g.ratio))
        .fold(0.0f64, f64::max)
        * 1.15;
    let top = if top > 0.0 { top } else { 1.0 };
    let (plot_w, plot_h) = (WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM);
    let x = |day: i64| LEFT + (day - first) as f64 / (last - first) as f64 * plot_w;
    let y = |ratio: f64| TOP + plot_h - ratio / top * plot_h;
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{HEIGHT}\" \
         viewBox=\"0 0 {WIDTH} {HEIGHT}\" font-family=\"sans-serif\" font-size=\"11\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{LEFT}\" y=\"22\" font-size=\"14\">{} (ratio to the {})</text>",
        escape(figure),
        escape(against)
    );
    axes(&mut svg, last, top, &x, &y, lines);
    if let Some(goal) = goal {
        let gy = y(goal.ratio);
        let sign = if goal.at_most { "<=" } else { ">=" };
        let _ = writeln!(
            svg,
            "<line x1=\"{LEFT}\" y1=\"{gy:.1}\" x2=\"{:.1}\" y2=\"{gy:.1}\" stroke=\"#d62728\" \
             stroke-dasharray=\"6 4\"/>\n<text x=\"{:.1}\" y=\"{:.1}\" fill=\"#d62728\">goal {} {}</text>",
            LEFT + plot_w,
            LEFT + plot_w + 6.0,
            gy + 4.0,
            escape(sign),
            goal.ratio
        );
    }
    for (i, line) in lines.iter().enumerate() {
        series(&mut svg, i, line, &x, &y);
    }
    svg.push_str("</svg>\n");
    svg
}

/// The frame, the ratio's grid and the dates.
fn axes(
    svg: &mut String,
    last: i64,
    top: f64,
    x: &impl Fn(i64) -> f64,
    y: &impl Fn(f64) -> f64,
    lines: &[Line],
) {
    let (right, bottom) = (x(last), y(0.0));
    let _ = writeln!(
        svg,
        "<line x1=\"{LEFT}\" y1=\"{bottom:.1}\" x2=\"{right:.1}\" y2=\"{bottom:.1}\" stroke=\"black\"/>\n\
         <line x1=\"{LEFT}\" y1=\"{TOP}\" x2=\"{LEFT}\" y2=\"{bottom:.1}\" stroke=\"black\"/>"
    );
    let step = [0.1, 0.2, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .find(|s| top / s <= 8.0)
        .unwrap_or(20.0);
    let mut tick = 0.0;
    while tick <= top {
        let ty = y(tick);
        let _ = writeln!(
            svg,
            "<line x1=\"{LEFT}\" y1=\"{ty:.1}\" x2=\"{right:.1}\" y2=\"{ty:.1}\" stroke=\"#ddd\"/>\n\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{tick:.2}</text>",
            LEFT - 6.0,
            ty + 4.0
        );
        tick += step;
    }
    let mut dates: Vec<(i64, &str)> = lines
        .iter()
        .flat_map(|l| &l.points)
        .map(|p| (p.day, p.date.as_str()))
        .collect();
    dates.sort();
    dates.dedup();
    for (day, date) in dates {
        let (tx, ty) = (x(day), bottom + 14.0);
        let _ = writeln!(
            svg,
            "<text x=\"{tx:.1}\" y=\"{ty:.1}\" text-anchor=\"end\" \
             transform=\"rotate(-40 {tx:.1} {ty:.1})\">{}</text>",
            escape(date.get(5..).unwrap_or(date))
        );
    }
}

/// A machine kind's line, its points (each titled with its record) and its legend entry.
fn series(
    svg: &mut String,
    index: usize,
    line: &Line,
    x: &impl Fn(i64) -> f64,
    y: &impl Fn(f64) -> f64,
) {
    let colour = COLOURS[index % COLOURS.len()];
    let path: Vec<String> = line
        .points
        .iter()
        .map(|p| format!("{:.1},{:.1}", x(p.day), y(p.ratio)))
        .collect();
    let _ = writeln!(
        svg,
        "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\" points=\"{}\"/>",
        path.join(" ")
    );
    for p in &line.points {
        let _ = writeln!(
            svg,
            "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3.5\" fill=\"{colour}\"><title>{} {}: {}x ({})</title></circle>",
            x(p.day),
            y(p.ratio),
            escape(&p.date),
            escape(&line.machine),
            p.ratio,
            escape(&p.record)
        );
    }
    let ly = TOP + 16.0 * index as f64;
    let lx = WIDTH - RIGHT + 60.0;
    let _ = writeln!(
        svg,
        "<rect x=\"{lx}\" y=\"{:.1}\" width=\"12\" height=\"4\" fill=\"{colour}\"/>\n\
         <text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
        ly - 4.0,
        lx + 16.0,
        ly + 1.0,
        escape(&line.machine)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn day_numbers_count_from_1970() {
        assert_eq!(day_number("1970-01-01"), Some(0));
        assert_eq!(
            day_number("2026-12-07").unwrap() - day_number("2026-11-28").unwrap(),
            9
        );
        assert_eq!(
            day_number("2024-03-01").unwrap() - day_number("2024-02-28").unwrap(),
            2
        );
        assert_eq!(day_number("2026-13-01"), None);
        assert_eq!(day_number("h100"), None);
    }

    #[test]
    fn a_plot_has_a_line_and_points_per_machine_and_the_goal() {
        let point = |date: &str, ratio| Point {
            day: day_number(date).unwrap(),
            date: date.into(),
            ratio,
            record: format!("{date}-x.md"),
        };
        let lines = [
            Line {
                machine: "h100".into(),
                points: vec![point("2026-11-24", 1.3), point("2026-12-07", 1.23)],
            },
            Line {
                machine: "h200".into(),
                points: vec![point("2026-12-07", 1.44)],
            },
        ];
        let goal = Goal {
            at_most: true,
            ratio: 1.5,
        };
        let svg = plot("round trip <1>", "device floor", Some(goal), &lines);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert_eq!(svg.matches("<circle").count(), 3);
        assert!(svg.contains("goal &lt;= 1.5"), "{svg}");
        assert!(svg.contains("round trip &lt;1&gt;"), "{svg}");
        assert!(svg.contains(">12-07</text>"), "{svg}");
    }
}
