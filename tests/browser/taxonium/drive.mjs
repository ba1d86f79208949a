// Opens the page of build.mjs (served from 127.0.0.1 by a small static
// server here) in Debian's Chromium, pointed at a cellar Taxonium prefix,
// lets taxonium-component draw, zooms in once, and prints what it saw as
// JSON for tests/http/test_taxonium_browser.py.  Usage:
//   node drive.mjs '{"backend": "http://127.0.0.1:PORT/v1/stores/S/obst/K/taxonium",
//                    "page": PAGE_DIR, "artifacts": DIR}'
import { createServer } from 'node:http';
import { readFileSync } from 'node:fs';
import { extname, join, normalize } from 'node:path';
import { launch, openPage } from '../viewer/browser.mjs';

const config = JSON.parse(process.argv[2]);
const TIMEOUT = 60000;
const TYPES = { '.html': 'text/html', '.js': 'text/javascript', '.svg': 'image/svg+xml',
                '.png': 'image/png', '.woff2': 'font/woff2', '.woff': 'font/woff', '.ttf': 'font/ttf' };

function serve(dir) {
  const server = createServer((req, res) => {
    const path = normalize(decodeURIComponent(new URL(req.url, 'http://x').pathname)).replace(/^\/+/, '');
    try {
      const body = readFileSync(join(dir, path || 'index.html'));
      res.writeHead(200, { 'Content-Type': TYPES[extname(path)] || 'application/octet-stream' });
      res.end(body);
    } catch {
      res.writeHead(404);
      res.end();
    }
  });
  return new Promise((ok) => server.listen(0, '127.0.0.1', () => ok(server)));
}

// Pixels of a PNG screenshot, decoded by the page itself: how many differ
// from the most common colour (the background), and how many colours.
async function pixels(page, png) {
  return page.evaluate(async (url) => {
    const img = new Image();
    img.src = url;
    await img.decode();
    const c = new OffscreenCanvas(img.width, img.height);
    const x = c.getContext('2d');
    x.drawImage(img, 0, 0);
    const d = x.getImageData(0, 0, img.width, img.height).data;
    const counts = new Map();
    for (let i = 0; i < d.length; i += 4) {
      const k = (d[i] << 16) | (d[i + 1] << 8) | d[i + 2];
      counts.set(k, (counts.get(k) || 0) + 1);
    }
    let bg = 0, most = -1;
    for (const [k, n] of counts) if (n > most) { most = n; bg = k; }
    return { width: img.width, height: img.height, drawn: d.length / 4 - most,
             colours: counts.size, background: bg };
  }, 'data:image/png;base64,' + png.toString('base64'));
}

async function main() {
  const server = await serve(config.page);
  const { context, blocked, close } = await launch();
  const out = { responses: [], errors: [], dialogs: [] };
  try {
    const { page, log } = await openPage(context);
    page.on('dialog', (d) => { out.dialogs.push(d.message()); d.dismiss(); });
    const pending = [];
    page.on('response', (r) => {
      if (!r.url().includes('/taxonium/')) return;
      const entry = { url: r.url(), status: r.status(), type: r.headers()['content-type'] || '' };
      out.responses.push(entry);
      if (r.url().includes('/nodes/'))
        pending.push(r.json().then((j) => { entry.nodes = j.nodes.map((n) => n.name); }).catch(() => {}));
    });
    const url = `http://127.0.0.1:${server.address().port}/index.html?backend=${encodeURIComponent(config.backend)}`;
    await page.goto(url);
    const nodesAnswered = () => out.responses.filter((r) => r.url.includes('/nodes/') && r.status === 200).length;
    const deadline = Date.now() + TIMEOUT;
    while (nodesAnswered() < 2 && Date.now() < deadline) await page.waitForTimeout(200);
    const canvas = page.locator('canvas').first();
    await canvas.waitFor({ timeout: TIMEOUT });
    await page.waitForTimeout(2000);   // deck.gl draws on the next frames
    await Promise.all(pending);
    const box = await canvas.boundingBox();
    out.canvas = { box, ...(await pixels(page, await page.screenshot({ clip: box }))) };
    await page.screenshot({ path: join(config.artifacts, 'taxonium-tree.png') });
    // Zoom in on the middle: the component asks for the nodes of a smaller box.
    const before = out.responses.length;
    await page.mouse.move(box.x + box.width * 0.6, box.y + box.height / 2);
    for (let i = 0; i < 6; i++) {
      await page.mouse.wheel(0, -300);
      await page.waitForTimeout(150);
    }
    const zdeadline = Date.now() + TIMEOUT;
    while (!out.responses.slice(before).some((r) => r.url.includes('/nodes/') && r.url.includes('min_x')) &&
           Date.now() < zdeadline)
      await page.waitForTimeout(200);
    await page.waitForTimeout(1500);
    await Promise.all(pending);
    out.zoomed = { ...(await pixels(page, await page.screenshot({ clip: box }))) };
    await page.screenshot({ path: join(config.artifacts, 'taxonium-zoomed.png') });
    out.errors = log.errors;
    out.requests = log.requests.map((r) => r.url);
  } finally {
    out.blocked = blocked;
    await close();
    server.close();
  }
  process.stdout.write(JSON.stringify(out));
}

main().catch((e) => {
  process.stderr.write(String(e && e.stack || e));
  process.exit(1);
});
