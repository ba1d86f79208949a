// Colour scales: a categorical palette and viridis for continuous values.

const PALETTE_HEX = [
  '#4cc9f0', '#f72585', '#b8f35d', '#ffb703', '#9d7bff', '#ff6b35', '#2ec4b6', '#ff8fab',
  '#e9ff70', '#4361ee', '#f15bb5', '#00f5d4', '#fb5607', '#a0c4ff', '#c77dff', '#80ed99',
  '#ffd6a5', '#ef476f', '#06d6a0', '#ffd166', '#118ab2', '#e76f51', '#bde0fe', '#cdb4db',
];

export const MISSING = [90, 96, 110];

function hexRgb(h) {
  return [parseInt(h.slice(1, 3), 16), parseInt(h.slice(3, 5), 16), parseInt(h.slice(5, 7), 16)];
}

const PALETTE = PALETTE_HEX.map(hexRgb);

// Category i's colour: the palette, then golden-angle hues past its end.
export function categoryColor(i) {
  if (i < PALETTE.length) return PALETTE[i];
  const h = (i * 137.508) % 360;
  return hslRgb(h, 0.65, 0.6);
}

function hslRgb(h, s, l) {
  const a = s * Math.min(l, 1 - l);
  const f = (n) => {
    const k = (n + h / 30) % 12;
    return Math.round(255 * (l - a * Math.max(-1, Math.min(k - 3, 9 - k, 1))));
  };
  return [f(0), f(8), f(4)];
}

// viridis at 9 stops, interpolated linearly into 256 entries.
const VIRIDIS_STOPS = [
  [68, 1, 84], [71, 44, 122], [59, 81, 139], [44, 113, 142], [33, 144, 141],
  [39, 173, 129], [92, 200, 99], [170, 220, 50], [253, 231, 37],
];
export const VIRIDIS = (() => {
  const lut = new Uint8Array(256 * 3);
  for (let i = 0; i < 256; i++) {
    const t = (i / 255) * (VIRIDIS_STOPS.length - 1);
    const k = Math.min(Math.floor(t), VIRIDIS_STOPS.length - 2);
    const f = t - k;
    for (let c = 0; c < 3; c++)
      lut[i * 3 + c] = Math.round(VIRIDIS_STOPS[k][c] * (1 - f) + VIRIDIS_STOPS[k + 1][c] * f);
  }
  return lut;
})();

export function rgbCss(rgb) {
  return `rgb(${rgb[0]},${rgb[1]},${rgb[2]})`;
}

export function viridisCss(t) {
  const i = Math.max(0, Math.min(255, Math.round(t * 255))) * 3;
  return `rgb(${VIRIDIS[i]},${VIRIDIS[i + 1]},${VIRIDIS[i + 2]})`;
}

export function viridisGradient() {
  const stops = [];
  for (let i = 0; i <= 8; i++) stops.push(`${viridisCss(i / 8)} ${(i / 8) * 100}%`);
  return `linear-gradient(to right, ${stops.join(', ')})`;
}

// The finite range of values (NaN and null left out): [lo, hi], or null.
export function finiteRange(values) {
  let lo = Infinity, hi = -Infinity;
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    if (v === null || v !== v) continue;
    if (v < lo) lo = v;
    if (v > hi) hi = v;
  }
  return lo <= hi ? [lo, hi] : null;
}

// A colouring of n values: {kind: 'category', codes, categories} or
// {kind: 'continuous', values, range}, as RGBA bytes (4 per value).
export function colorize(c, n) {
  const out = new Uint8Array(n * 4);
  for (let i = 0; i < n; i++) {
    let rgb = MISSING;
    if (c.kind === 'category') {
      const code = c.codes[i];
      if (code >= 0 && code < c.categories.length) rgb = categoryColor(code);
    } else if (c.kind === 'continuous') {
      const v = c.values[i];
      if (v !== null && v === v) {
        const span = c.range[1] - c.range[0];
        const t = span > 0 ? (v - c.range[0]) / span : 0.5;
        const k = Math.max(0, Math.min(255, Math.round(t * 255))) * 3;
        rgb = [VIRIDIS[k], VIRIDIS[k + 1], VIRIDIS[k + 2]];
      }
    } else {
      rgb = [120, 170, 230];
    }
    out[i * 4] = rgb[0];
    out[i * 4 + 1] = rgb[1];
    out[i * 4 + 2] = rgb[2];
    out[i * 4 + 3] = 255;
  }
  return out;
}

// Short number text for legends and tables.
export function fmt(v) {
  if (v === null || v === undefined) return '–';
  if (typeof v !== 'number') return String(v);
  if (v !== v) return 'NaN';
  if (Number.isInteger(v)) return String(v);
  const a = Math.abs(v);
  if (a !== 0 && (a < 1e-3 || a >= 1e6)) return v.toExponential(2);
  return v.toPrecision(4).replace(/\.?0+$/, '');
}
