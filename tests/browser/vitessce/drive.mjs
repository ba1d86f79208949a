// Opens the Vitessce page (built by build.mjs into config.dist, served here
// from a second origin on 127.0.0.1) in Debian's Chromium once per view,
// each with its Vitessce config, and prints as JSON what it saw: the
// scatterplot's pixels, every request the page made with its answer, the
// console errors.  tests/http/test_vitessce.py judges it.  Usage:
//   node drive.mjs '{"dist": DIR, "artifacts": DIR,
//                    "views": [{"name": N, "config": {...}}, ...]}'
import { launch, openPage, servePage } from '../viewer/browser.mjs';
import { join } from 'node:path';

const config = JSON.parse(process.argv[2]);
const TIMEOUT = 60000;

// Pixels of a PNG (a screenshot), counted in the page: how many differ from
// the background (the most common colour), how many distinct colours, a
// hash, and the drawn pixels by hue in 24 buckets of 15 degrees: their
// count and mean x and y (0..1 of the width and height).
async function pixels(page, png) {
  return page.evaluate(async (b64) => {
    const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
    const bitmap = await createImageBitmap(new Blob([bytes], { type: 'image/png' }));
    const c = new OffscreenCanvas(bitmap.width, bitmap.height);
    const x = c.getContext('2d');
    x.drawImage(bitmap, 0, 0);
    const d = x.getImageData(0, 0, c.width, c.height).data;
    const count = new Map();
    for (let i = 0; i < d.length; i += 4) {
      const k = (d[i] << 16) | (d[i + 1] << 8) | d[i + 2];
      count.set(k, (count.get(k) || 0) + 1);
    }
    let bg = 0, most = -1;
    for (const [k, n] of count) if (n > most) { most = n; bg = k; }
    let drawn = 0, h = 0x811c9dc5;
    const hues = new Array(24).fill(0), hx = new Array(24).fill(0), hy = new Array(24).fill(0);
    for (let i = 0; i < d.length; i += 4) {
      const k = (d[i] << 16) | (d[i + 1] << 8) | d[i + 2];
      h = Math.imul(h ^ k, 16777619) >>> 0;
      if (k === bg) continue;
      drawn++;
      const r = d[i] / 255, g = d[i + 1] / 255, b = d[i + 2] / 255;
      const mx = Math.max(r, g, b), mn = Math.min(r, g, b);
      if (mx - mn < 0.15) continue; // greys carry no hue
      let hue = mx === r ? (g - b) / (mx - mn) : mx === g ? 2 + (b - r) / (mx - mn) : 4 + (r - g) / (mx - mn);
      hue = ((hue * 60) + 360) % 360;
      const b15 = Math.floor(hue / 15), p = i / 4;
      hues[b15]++;
      hx[b15] += (p % c.width) / c.width;
      hy[b15] += Math.floor(p / c.width) / c.height;
    }
    return { width: c.width, height: c.height, background: bg, drawn, colours: count.size, hash: h,
      hues: hues.map((n, k) => ({ n, x: n ? hx[k] / n : null, y: n ? hy[k] / n : null })) };
  }, png.toString('base64'));
}

// Waits until no request to cellar has been open for `quiet` ms.
async function settle(page, inflight, quiet = 1500) {
  const start = Date.now();
  let calm = Date.now();
  while (Date.now() - start < TIMEOUT) {
    if (inflight.size > 0) calm = Date.now();
    else if (Date.now() - calm >= quiet) return;
    await page.waitForTimeout(100);
  }
  throw new Error(`requests still open after ${TIMEOUT} ms: ${[...inflight].map((r) => r.url()).join(' ')}`);
}

// Hides (or shows again) what Vitessce lays over the scatterplot's canvas
// (tool buttons, the legend), so the canvas' screenshot holds only points.
async function overlays(canvas, hidden) {
  return canvas.evaluate((c, hidden) => {
    const r = c.getBoundingClientRect();
    for (const e of c.closest('.vitessce-container').querySelectorAll('*')) {
      if (e === c || e.contains(c)) continue;
      const q = e.getBoundingClientRect();
      if (q.right > r.left && q.left < r.right && q.bottom > r.top && q.top < r.bottom)
        e.style.visibility = hidden ? 'hidden' : '';
    }
  }, hidden);
}

// The scatterplot's canvas, without its overlays, once two screenshots
// 700 ms apart are the same.
async function stableShot(page, canvas) {
  let last = null;
  await overlays(canvas, true);
  try {
    for (let i = 0; i < 40; i++) {
      const png = await canvas.screenshot();
      if (last && png.equals(last)) return png;
      last = png;
      await page.waitForTimeout(700);
    }
  } finally {
    await overlays(canvas, false);
  }
  throw new Error('the scatterplot never stopped changing');
}

async function view(context, pageBase, { name, config: vc }) {
  const { page, log } = await openPage(context);
  const inflight = new Set();
  const answers = [];
  page.on('request', (r) => r.url().startsWith(pageBase) || inflight.add(r));
  const done = async (r, failed) => {
    inflight.delete(r);
    if (r.url().startsWith(pageBase)) return;
    const res = failed ? null : await r.response();
    const sizes = failed ? null : await r.sizes().catch(() => null);
    const u = new URL(r.url());
    answers.push({
      method: r.method(), path: u.pathname, query: u.search, status: res ? res.status() : 0,
      range: r.headers().range || null, bytes: sizes ? sizes.responseBodySize : -1,
    });
  };
  page.on('requestfinished', (r) => done(r, false));
  page.on('requestfailed', (r) => done(r, true));

  await page.goto(pageBase + '/index.html#' + encodeURIComponent(JSON.stringify(vc)));
  const canvas = page.locator('.vitessce-container canvas').first();
  await canvas.waitFor({ state: 'visible', timeout: TIMEOUT });
  await settle(page, inflight);
  const png = await stableShot(page, canvas);
  const out = { pixels: await pixels(page, png) };
  await page.screenshot({ path: join(config.artifacts, `vitessce-${name}.png`), fullPage: true });
  out.text = await page.evaluate(() => document.querySelector('.vitessce-container').innerText);
  out.errors = log.errors;
  out.answers = answers;
  out.origins = [...new Set(log.requests.map((r) => new URL(r.url).origin))];
  await page.close();
  return out;
}

// The built page from an origin of its own (as Vitessce is deployed apart
// from the data): cellar's CORS answers are part of what is tested.
const pageServer = await servePage(config.dist);
const pageBase = `http://127.0.0.1:${pageServer.address().port}`;
const browser = await launch();
const results = { pageOrigin: pageBase, views: {} };
try {
  for (const v of config.views) {
    try {
      results.views[v.name] = await view(browser.context, pageBase, v);
    } catch (e) {
      results.views[v.name] = { failed: String(e && e.stack ? e.stack : e) };
    }
  }
} finally {
  results.blocked = browser.blocked;
  await browser.close();
  pageServer.close();
}
process.stdout.write(JSON.stringify(results));
