// The viewer section of `make bench`: opens the built-in viewer on a store's
// embedding in Debian's Chromium (the test suite's launcher, WebGL on
// SwiftShader) and prints one JSON line per page load: the time from
// navigation start to the first frame drawn with the points (the
// scatterplot's performance mark 'cellar:embedding-drawn'), and the
// embedding request's own resource timing.
//   node bench/viewer_time.mjs BASE HASH RUNS
import { launch, openPage } from '../tests/browser/viewer/browser.mjs';

const [base, hash, runsText] = process.argv.slice(2);
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
    if (log.errors.length) t.errors = log.errors;
    console.log(JSON.stringify(t));
    await page.close();
  }
  if (blocked.length) console.log(JSON.stringify({ blocked }));
} finally {
  await close();
}
