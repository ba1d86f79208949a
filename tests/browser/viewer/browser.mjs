// Debian's Chromium through playwright-core, with WebGL on SwiftShader and
// every request beyond 127.0.0.1 blocked (and recorded).
import { chromium } from 'playwright-core';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export const CHROMIUM = process.env.CELLAR_CHROMIUM || '/usr/bin/chromium';

export async function launch() {
  const profile = mkdtempSync(join(tmpdir(), 'cellar-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    viewport: { width: 1400, height: 1000 },
    args: [
      '--no-sandbox', '--use-angle=swiftshader', '--enable-unsafe-swiftshader', '--ignore-gpu-blocklist',
      '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update',
      '--disable-sync', '--disable-default-apps', '--disable-extensions', '--mute-audio',
    ],
  });
  const blocked = [];
  await context.route('**/*', (route) => {
    const url = new URL(route.request().url());
    if (url.hostname === '127.0.0.1' || url.protocol === 'data:' || url.protocol === 'blob:') return route.continue();
    blocked.push(route.request().url());
    return route.abort('blockedbyclient');
  });
  const close = async () => {
    await context.close();
    rmSync(profile, { recursive: true, force: true });
  };
  return { context, blocked, close };
}

// A page that records console errors, page errors and every request.
export async function openPage(context) {
  const page = await context.newPage();
  const log = { errors: [], requests: [], aborted: [] };
  page.on('console', (m) => m.type() === 'error' && log.errors.push(`console: ${m.text()}`));
  page.on('pageerror', (e) => log.errors.push(`pageerror: ${e.message}`));
  // net::ERR_ABORTED is the page cancelling a request it no longer needs
  // (h5web aborts a stale slice when the view moves on; seen on a loaded
  // machine): kept apart.  A server that fails a request gives another
  // code (ERR_CONNECTION_RESET, ERR_EMPTY_RESPONSE, ...), an error.
  page.on('requestfailed', (r) => {
    const why = r.failure() && r.failure().errorText;
    (why === 'net::ERR_ABORTED' ? log.aborted : log.errors).push(`requestfailed: ${r.url()} ${why}`);
  });
  page.on('request', (r) => log.requests.push({ url: r.url(), headers: r.headers() }));
  return { page, log };
}

// Serves the files of dir (a built page) on 127.0.0.1 at a free port, as
// a second origin beside cellar's; resolves to the node http server.
export async function servePage(dir) {
  const { createServer } = await import('node:http');
  const { readFile } = await import('node:fs/promises');
  const { extname, normalize } = await import('node:path');
  const types = { '.html': 'text/html; charset=utf-8', '.js': 'text/javascript; charset=utf-8',
    '.css': 'text/css', '.woff2': 'font/woff2', '.svg': 'image/svg+xml' };
  const server = createServer(async (req, res) => {
    let path = normalize(decodeURIComponent(new URL(req.url, 'http://x').pathname)).replace(/^(\.\.[/\\])+/, '');
    if (path === '/') path = '/index.html';
    try {
      const body = await readFile(join(dir, path));
      res.writeHead(200, { 'Content-Type': types[extname(path)] || 'application/octet-stream' });
      res.end(body);
    } catch {
      res.writeHead(404);
      res.end();
    }
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server)));
}
