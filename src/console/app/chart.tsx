/**
 * The console's chart: counts over time as stacked areas, drawn as SVG here (no chart library:
 * the first page stays small). Series come in the order they stack, bottom first; a series with
 * no count at any point is left out of the drawing and the legend.
 */
import { useId } from "preact/hooks";

export interface Series {
  key: string;
  label: string;
  color: string;
}

export interface ChartPoint {
  /** Milliseconds. */
  at: number;
  values: Readonly<Record<string, number>>;
}

const W = 600;
const H = 160;

const clockTime = (ms: number) => new Date(ms).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });

/**
 * A stacked area chart of `points` (at least one); hover a band for its series' name. The SVG
 * stretches to its box; its labels are HTML around it, so that they keep their size.
 */
export function StackedChart(props: { label: string; series: readonly Series[]; points: readonly ChartPoint[]; empty?: string }) {
  const id = useId();
  const { points } = props;
  const shown = props.series.filter((s) => points.some((p) => (p.values[s.key] ?? 0) > 0));
  const top = Math.max(1, ...points.map((p) => shown.reduce((n, s) => n + (p.values[s.key] ?? 0), 0)));
  const first = points[0]?.at ?? 0;
  const last = points[points.length - 1]?.at ?? first;
  const x = (at: number) => (last > first ? ((at - first) / (last - first)) * W : 0);
  const y = (n: number) => H - (n / top) * H;
  // A single point (or all at one time) spreads across the width: a flat band, not a line.
  const rows = points.length === 1 || last === first ? [points[points.length - 1], points[points.length - 1]] : points;
  const xs = rows === points ? points.map((p) => x(p.at)) : [0, W];
  const below = rows.map(() => 0);
  const bands = shown.map((s) => {
    const lower = [...below];
    rows.forEach((p, i) => (below[i] += p.values[s.key] ?? 0));
    const edge = (level: number[]) => xs.map((px, i) => `${px.toFixed(1)},${y(level[i]).toFixed(1)}`);
    return { s, d: `M${[...edge(below), ...edge(lower).reverse()].join("L")}Z`, now: rows[rows.length - 1].values[s.key] ?? 0 };
  });
  const summary = bands.map((b) => `${b.now} ${b.s.label}`).join(", ");
  return (
    <figure class="chart" data-points={points.length} data-last={bands
        .filter((b) => b.now > 0)
        .map((b) => `${b.s.key}=${b.now}`)
        .join(" ")}>
      <div class="chart-plot">
        <span class="chart-top small muted">{top}</span>
        <svg viewBox={`0 0 ${W} ${H}`} role="img" aria-labelledby={`${id}-title`} preserveAspectRatio="none">
          <title id={`${id}-title`}>{`${props.label}: ${summary || props.empty || "nothing yet"}`}</title>
          <line class="chart-grid" x1={0} x2={W} y1={H / 2} y2={H / 2} vector-effect="non-scaling-stroke" />
          {bands.map((b) => (
            <path key={b.s.key} d={b.d} fill={b.s.color} data-series={b.s.key}>
              <title>{b.s.label}</title>
            </path>
          ))}
        </svg>
      </div>
      <div class="chart-times small muted">
        <span>{clockTime(first)}</span>
        <span>{clockTime(last)}</span>
      </div>
      <figcaption class="chart-legend">
        {bands.map((b) => (
          <span key={b.s.key} class="small">
            <span class="swatch" style={{ background: b.s.color }} /> {b.s.label} <strong>{b.now}</strong>
          </span>
        ))}
      </figcaption>
    </figure>
  );
}
