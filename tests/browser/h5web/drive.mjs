// Opens the h5web page (built by build.mjs into config.dist, served here
// from a second origin on 127.0.0.1) in Debian's Chromium, pointed at
// cellar's /h5grove/, selects a dataset's Matrix view and prints as JSON
// what it shows: the matrix cells' text by row and column, every request
// the page made, the console errors, what was blocked.
// tests/http/test_h5web.py judges it against h5py's read.  Usage:
//   node drive.mjs '{"dist": DIR, "artifacts": DIR, "grove": URL,
//                    "file": NAME, "views": [{"name": N, "path": P}]}'
import { launch, openPage, servePage } from '../viewer/browser.mjs';
import { join } from 'node:path';

const config = JSON.parse(process.argv[2]);
const TIMEOUT = 60000;

// The matrix grid (role grid, rows with aria-rowindex, cells with
// aria-colindex, 1-based): its size and every value cell it shows as
// [row, column, text].
async function matrixCells(page) {
  await page.waitForSelector('[role="grid"] [role="gridcell"]', { timeout: TIMEOUT });
  return page.evaluate(() => {
    const grid = document.querySelector('[role="grid"]');
    const cells = [];
    for (const row of grid.querySelectorAll('[role="row"]'))
      for (const cell of row.querySelectorAll('[role="gridcell"]'))
        cells.push([+row.getAttribute('aria-rowindex') - 1, +cell.getAttribute('aria-colindex') - 1,
                    cell.textContent]);
    return { rows: +grid.getAttribute('aria-rowcount'), cols: +grid.getAttribute('aria-colcount'), cells };
  });
}

const page0 = await servePage(config.dist);
const origin = `http://127.0.0.1:${page0.address().port}`;
const { context, blocked, close } = await launch();
const out = { views: {}, blocked };
try {
  for (const view of config.views) {
    const { page, log } = await openPage(context);
    const r = { requests: log.requests, errors: log.errors, aborted: log.aborted };
    out.views[view.name] = r;
    try {
      const q = new URLSearchParams({ url: config.grove, file: config.file, path: view.path });
      await page.goto(`${origin}/?${q}`);
      const tab = page.getByRole('tab', { name: 'Matrix' }).or(page.getByRole('button', { name: 'Matrix' }));
      await tab.first().click({ timeout: TIMEOUT });
      await page.waitForSelector('[role="grid"] [role="gridcell"]', { timeout: TIMEOUT });
      if (view.notation) {
        await page.getByText(view.notation, { exact: true }).first().click({ timeout: TIMEOUT });
        await page.waitForTimeout(300);
      }
      Object.assign(r, await matrixCells(page));
      await page.screenshot({ path: join(config.artifacts, `h5web-${view.name}.png`) });
    } catch (e) {
      r.failed = String(e && e.stack || e);
      try { await page.screenshot({ path: join(config.artifacts, `h5web-${view.name}-failed.png`) }); } catch {}
    }
    r.requests = log.requests.map((x) => x.url);
    await page.close();
  }
} finally {
  await close();
  page0.close();
}
process.stdout.write(JSON.stringify(out));
