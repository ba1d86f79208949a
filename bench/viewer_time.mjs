// The viewer section of `make bench`: opens the built-in viewer on a store's
// embedding in Debian's Chromium (the test suite's launcher, WebGL on
// SwiftShader) and prints one JSON line per page load: the time from
// navigation start to the first frame drawn with the points (the
// scatterplot's performance mark 'cellar:embedding-drawn'), and the
// embedding request's own resource timing.
// On the last load, interaction latencies with real input (playwright's mouse):
// from the input event's timestamp to the end of the frame it caused (the
// scatterplot's draw, then a pixel read back, which waits for SwiftShader to
// finish it) for wheel zooms and drag pans, and to the tooltip showing the
// hovered cell's obs row (its debounce and its /obs?rows=i request included)
// for hovers; and how long each frame that drew every point took.
//   node bench/viewer_time.mjs BASE HASH RUNS
import { launch, openPage } from '../tests/browser/viewer/browser.mjs';

const [base, hash, runsText] = process.argv.slice(2);
const STEPS = 12; // inputs of each kind on the last load (bench/viewer.py's IX_STEPS)
// Between inputs: past the viewer's rest (the points drawn again 120 ms
// after the last input), whose frame would otherwise land inside the next
// measurement.
const SETTLE_MS = 350;
const runs = Number(runsText || 5);
if (!base || !hash || !(runs > 0)) {
  console.error('usage: node bench/viewer_time.mjs BASE HASH RUNS');
  process.exit(2);
}

const { context, blocked, close } = await launch();
try {
  for (let i = 0; i < runs; i++) {
    const { page, log } = await openPage(context);
    await page.goto(`${base}/#${hash}`);
    await page.waitForFunction(() => performance.getEntriesByName('cellar:embedding-drawn').length > 0,
      null, { timeout: 120000, polling: 20 });
    const t = await page.evaluate(() => {
      const mark = performance.getEntriesByName('cellar:embedding-drawn')[0];
      const bin = performance.getEntriesByType('resource')
        .filter((r) => r.name.includes('/obsm/') && !r.name.includes('rows='));
      const last = bin[bin.length - 1];
      return {
        drawn_ms: mark.startTime,
        points: mark.detail && mark.detail.points,
        fetch_start_ms: last ? last.startTime : null,
        fetch_ms: last ? last.responseEnd - last.startTime : null,
        bytes: last ? last.encodedBodySize : null,
      };
    });
    if (i === runs - 1) t.interaction = await interaction(page);
    if (log.errors.length) t.errors = log.errors;
    console.log(JSON.stringify(t));
    await page.close();
  }
  if (blocked.length) console.log(JSON.stringify({ blocked }));
} finally {
  await close();
}

// Milliseconds from each input to what it caused on screen: {zoom, pan, hover}.
async function interaction(page) {
  await page.evaluate(() => {
    const s = window.cellar.scatter;
    const ix = (window.__ix = { input: 0, seq: 0, drawnSeq: 0, frames: [], full: [], tips: [] });
    for (const type of ['wheel', 'pointermove'])
      s.canvas.addEventListener(type, (e) => { ix.input = e.timeStamp; ix.seq++; }, { capture: true });
    const draw = s.draw.bind(s);
    const pixel = new Uint8Array(4);
    s.draw = () => {
      const t0 = performance.now(), full = s.drawn;
      draw();
      // Reading a pixel waits for the frame's drawing to be done.
      s.gl.readPixels(0, 0, 1, 1, s.gl.RGBA, s.gl.UNSIGNED_BYTE, pixel);
      if (s.drawn > full) ix.full.push(performance.now() - t0);
      // The first frame after an input is its answer; later ones (the
      // points drawn again once the input rests) are not counted.
      if (ix.drawnSeq === ix.seq) return;
      ix.drawnSeq = ix.seq;
      ix.frames.push(performance.now() - ix.input);
    };
    const tip = document.querySelector('#tooltip');
    new MutationObserver(() => {
      if (!tip.hidden && tip.querySelector('b')) ix.tips.push([tip.querySelector('b').textContent, performance.now() - ix.input]);
    }).observe(tip, { childList: true, subtree: true, attributes: true });
  });
  const box = await page.$eval('#scatter canvas', (c) => {
    c.scrollIntoView({ block: 'center' });
    const r = c.getBoundingClientRect();
    return [r.left, r.top, r.width, r.height];
  });
  const frames = () => page.evaluate(() => window.__ix.frames.length);
  const nextFrame = async (before) => page.waitForFunction((n) => window.__ix.frames.length > n, before, { timeout: 30000, polling: 'raf' });
  const cx = box[0] + box[2] / 2, cy = box[1] + box[3] / 2;
  await page.mouse.move(cx, cy);
  await page.waitForTimeout(300);
  const since = async (from) => page.evaluate((k) => window.__ix.frames.slice(k), from);

  let start = await frames();
  for (let k = 0; k < STEPS; k++) {
    const before = await frames();
    await page.mouse.wheel(0, k < STEPS / 2 ? -200 : 150);
    await nextFrame(before);
    await page.waitForTimeout(SETTLE_MS);
  }
  const zoom = await since(start);

  await page.waitForTimeout(SETTLE_MS);
  await page.mouse.move(cx, cy);
  await page.mouse.down();
  start = await frames();
  for (let k = 1; k <= STEPS; k++) {
    const before = await frames();
    await page.mouse.move(cx + 8 * k, cy + 5 * k);
    await nextFrame(before);
    await page.waitForTimeout(SETTLE_MS);
  }
  const pan = await since(start);
  await page.mouse.up();
  await page.mouse.move(box[0] + 2, box[1] + 2);
  await page.waitForTimeout(200);

  // Hover over cells spread over the plot, each a row not asked for before.
  const targets = await page.evaluate((n) => {
    const s = window.cellar.scatter;
    const r = s.canvas.getBoundingClientRect();
    const out = [];
    for (let k = 0; k < 4 * n && out.length < n; k++) {
      const i = Math.floor(((k * 7919) % 997) / 997 * s.n);
      const [x, y] = s.toScreen(s.xy[2 * i], s.xy[2 * i + 1]);
      if (x < 10 || y < 10 || x > s.width - 10 || y > s.height - 10) continue;
      const at = s.nearest(x, y, Math.max(6, s.pointSize() / s.dpr));
      if (at >= 0) out.push([r.left + x, r.top + y]);
    }
    return out;
  }, STEPS);
  const hover = [];
  for (const [x, y] of targets) {
    const before = await page.evaluate(() => window.__ix.tips.length);
    await page.mouse.move(x, y);
    await page.waitForFunction((n) => window.__ix.tips.length > n, before, { timeout: 30000, polling: 'raf' });
    hover.push(await page.evaluate(() => window.__ix.tips[window.__ix.tips.length - 1][1]));
    await page.mouse.move(box[0] + 2, box[1] + 2);
    await page.waitForFunction(() => document.querySelector('#tooltip').hidden, null, { timeout: 30000 });
  }
  return { zoom, pan, hover, full: await page.evaluate(() => window.__ix.full) };
}
