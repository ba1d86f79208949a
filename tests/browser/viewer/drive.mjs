// Drives the built-in viewer in Debian's Chromium and prints what it saw
// as JSON; tests/http/test_viewer.py judges it against what anndata and
// treedata read.  Usage:
//   node drive.mjs '{"base": "http://127.0.0.1:PORT", "artifacts": DIR,
//                    "scenarios": ["examples", "scatter", "tree", "treePanColour", ...],
//                    "token": T}'
import { launch, openPage } from './browser.mjs';
import { join } from 'node:path';

const config = JSON.parse(process.argv[2]);
const { base, artifacts } = config;
const TIMEOUT = 30000;

async function ready(page) {
  await page.waitForFunction(() => document.body.dataset.ready, null, { timeout: TIMEOUT });
}

async function shot(page, name) {
  await page.evaluate(() => window.scrollTo(0, 0));
  await page.screenshot({ path: join(artifacts, `viewer-${name}.png`), fullPage: true });
}

// The canvas' pixels: how many are drawn, distinct colours, a hash, and a
// 32 x 16 signature of mean colours; kept in the page under `name` for diff().
async function snap(page, selector, name) {
  return page.evaluate(([selector, name]) => {
    const c = document.querySelector(selector);
    const t = document.createElement('canvas');
    t.width = c.width;
    t.height = c.height;
    const x = t.getContext('2d');
    x.drawImage(c, 0, 0);
    const d = x.getImageData(0, 0, t.width, t.height).data;
    (window.__snaps ||= {})[name] = d;
    let drawn = 0, h = 0x811c9dc5;
    const colours = new Set();
    for (let i = 0; i < d.length; i += 4) {
      if (d[i + 3] > 0) {
        drawn++;
        colours.add((d[i] << 16) | (d[i + 1] << 8) | d[i + 2]);
      }
      h = Math.imul(h ^ (d[i] | (d[i + 1] << 8) | (d[i + 2] << 16) | (d[i + 3] << 24)), 16777619) >>> 0;
    }
    return { width: t.width, height: t.height, drawn, colours: colours.size, hash: h };
  }, [selector, name]);
}

// Pixels that differ between two snapshots of one page.
async function diff(page, a, b) {
  return page.evaluate(([a, b]) => {
    const x = window.__snaps[a], y = window.__snaps[b];
    if (x.length !== y.length) return -1;
    let n = 0;
    for (let i = 0; i < x.length; i += 4)
      if (x[i] !== y[i] || x[i + 1] !== y[i + 1] || x[i + 2] !== y[i + 2] || x[i + 3] !== y[i + 3]) n++;
    return n;
  }, [a, b]);
}

const drawnCount = (page, sel) => page.evaluate((sel) => +(document.querySelector(sel).dataset.drawn || 0), sel);

async function nextDraw(page, sel, before) {
  await page.waitForFunction(([sel, before]) => +(document.querySelector(sel).dataset.drawn || 0) > before,
    [sel, before], { timeout: TIMEOUT });
  await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));
}

const origins = (log) => [...new Set(log.requests.map((r) => new URL(r.url).origin))];

const paths = (log, from = 0) => log.requests.slice(from).map((r) => {
  const u = new URL(r.url);
  return u.pathname + u.search;
});

// A page at url once its embedding is drawn with its legend.
async function openScatter(page, url) {
  await page.goto(url);
  await ready(page);
  await page.waitForFunction(() => +(document.querySelector('#scatter').dataset.drawn || 0) > 0
    && document.querySelector('#legend h3'), null, { timeout: TIMEOUT });
  await page.waitForTimeout(300);
  await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));
}

// ------------------------------------------------------------ scenarios
async function examples(context) {
  const { page, log } = await openPage(context);
  const out = { pages: {} };
  await page.goto(base + '/');
  await ready(page);
  out.storeList = await page.$$eval('#store-list li a', (as) => as.map((a) => ({
    name: a.querySelector('.name').textContent, meta: a.querySelector('.meta').textContent.replace(/\s+/g, ' ').trim(),
  })));
  out.homeRows = await page.$$eval('table.stores tbody tr', (trs) => trs.map((tr) => [...tr.cells].map((c) => c.textContent.trim())));
  await shot(page, 'home');
  for (const [name, hash] of [['blood.h5ad', 's=blood.h5ad'], ['blood.zarr', 's=blood.zarr'],
    ['pbmc_small.h5mu', 's=pbmc_small.h5mu'], ['pbmc_small.h5mu-rna', 's=pbmc_small.h5mu&m=rna'],
    ['lineage.h5td', 's=lineage.h5td'], ['lineage.zarr', 's=lineage.zarr']]) {
    await page.goto('about:blank');
    await page.goto(base + '/#' + hash);
    await ready(page);
    await page.waitForSelector('#obs-table tbody tr', { timeout: TIMEOUT });
    if (name.startsWith('lineage')) await page.waitForFunction(() => +(document.querySelector('#tree').dataset.drawn || 0) > 0);
    if (!(await page.$eval('#embedding', (e) => e.hidden))) await page.waitForFunction(() => +(document.querySelector('#scatter').dataset.drawn || 0) > 0);
    out.pages[name] = await page.evaluate(() => {
      const cols = (i) => [...document.querySelectorAll(`.columns .col-list:nth-child(${i}) ul.cols li`)].map((li) => ({
        name: li.querySelector('.cname').textContent, dtype: li.querySelector('.dtype').textContent,
        categories: [...li.querySelectorAll('.cats .cat')].map((c) => c.textContent),
      }));
      return {
        title: document.querySelector('.summary h1').textContent,
        facts: Object.fromEntries([...document.querySelectorAll('.summary dl.facts > div')].map((d) => [d.querySelector('dt').textContent, d.querySelector('dd').textContent.trim()])),
        mods: [...document.querySelectorAll('.mods .chip')].map((c) => c.firstChild.textContent.trim()),
        obs: cols(1), var: cols(2),
        tableRows: [...document.querySelectorAll('#obs-table tbody tr')].map((tr) => [...tr.cells].map((c) => c.textContent)),
        tableHead: [...document.querySelectorAll('#obs-table thead th')].map((th) => th.firstChild.textContent),
        embedding: !document.querySelector('#embedding').hidden,
        tree: !document.querySelector('#tree-card').hidden,
      };
    });
    await shot(page, name);
  }
  out.errors = log.errors;
  out.requests = paths(log);
  out.origins = origins(log);
  await page.close();
  return out;
}

async function scatter(context) {
  const { page, log } = await openPage(context);
  const out = {};
  await openScatter(page, base + '/#s=cells.h5ad&e=X_umap&c=obs:cell_type');
  out.byCellType = await snap(page, '#scatter canvas', 'cell_type');
  out.legendCellType = await page.$$eval('#legend li', (lis) => lis.map((li) => [li.querySelector('span').textContent, li.querySelector('small').textContent]));
  await shot(page, 'scatter-cell_type');

  let before = await drawnCount(page, '#scatter');
  await page.selectOption('#color-by', 'obs:batch');
  await nextDraw(page, '#scatter', before);
  out.byBatch = await snap(page, '#scatter canvas', 'batch');
  out.diffCellTypeBatch = await diff(page, 'cell_type', 'batch');

  before = await drawnCount(page, '#scatter');
  await page.selectOption('#color-by', 'obs:score');
  await nextDraw(page, '#scatter', before);
  out.legendScore = await page.$eval('#legend', (e) => ({ bar: !!e.querySelector('.colorbar'), ticks: [...e.querySelectorAll('.ticks span')].map((s) => s.textContent) }));

  // A gene typed into the search box, picked from the completion list.
  before = await drawnCount(page, '#scatter');
  const from = log.requests.length;
  await page.click('#gene');
  await page.keyboard.type('cd3', { delay: 30 });
  await page.waitForSelector('#gene-list li:not(.muted)', { timeout: TIMEOUT });
  out.completion = await page.$$eval('#gene-list li', (lis) => lis.map((li) => li.textContent));
  await page.keyboard.press('Enter');
  await nextDraw(page, '#scatter', before);
  out.geneRequests = paths(log, from);
  out.byGene = await snap(page, '#scatter canvas', 'gene');
  out.diffScoreGene = await diff(page, 'batch', 'gene');
  out.legendGene = await page.$eval('#legend', (e) => ({ title: e.querySelector('h3').textContent, ticks: [...e.querySelectorAll('.ticks span')].map((s) => s.textContent) }));
  out.colorValue = await page.$eval('#color-by', (s) => s.value);
  await shot(page, 'scatter-gene');

  // Hover over the cell farthest from any other: the tooltip shows its obs row.
  const pos = await page.evaluate(() => {
    const s = window.cellar.scatter;
    let best = -1, bestD = -1;
    for (let i = 0; i < s.n; i++) {
      let d = Infinity;
      for (let j = 0; j < s.n; j++) {
        if (j === i) continue;
        const dx = s.xy[2 * i] - s.xy[2 * j], dy = s.xy[2 * i + 1] - s.xy[2 * j + 1];
        d = Math.min(d, dx * dx + dy * dy);
      }
      if (d > bestD) { bestD = d; best = i; }
    }
    const [x, y] = s.toScreen(s.xy[2 * best], s.xy[2 * best + 1]);
    const r = s.canvas.getBoundingClientRect();
    return [r.left + x, r.top + y, best];
  });
  out.hoverTarget = pos[2];
  await page.mouse.move(pos[0] - 30, pos[1] - 30);
  await page.mouse.move(pos[0], pos[1], { steps: 4 });
  await page.waitForFunction(() => !document.querySelector('#tooltip').hidden && document.querySelector('#tooltip b'), null, { timeout: TIMEOUT });
  out.tooltip = await page.$eval('#tooltip', (t) => ({
    name: t.querySelector('b').textContent,
    rows: Object.fromEntries([...t.querySelectorAll('tr')].map((tr) => [tr.querySelector('th').textContent, tr.querySelector('td').textContent])),
  }));
  await page.mouse.move(5, 5);

  // Back to cell types, then a category picked in the legend: the table follows.
  before = await drawnCount(page, '#scatter');
  await page.selectOption('#color-by', 'obs:cell_type');
  await nextDraw(page, '#scatter', before);
  await page.click('#legend li[data-code="2"]');
  await page.waitForFunction(() => /selected/.test(document.querySelector('#obs-table .table-head').textContent), null, { timeout: TIMEOUT });
  await page.waitForFunction(() => [...document.querySelectorAll('#obs-table tbody tr')].length > 0);
  out.selectionHead = await page.$eval('#obs-table .table-head', (e) => e.textContent.replace(/\s+/g, ' ').trim());
  out.selectionRows = await page.$$eval('#obs-table tbody tr', (trs) => trs.map((tr) => [tr.cells[0].textContent, tr.cells[1].textContent, tr.cells[2].textContent]));
  await page.click('#obs-table .next');
  await page.waitForFunction(() => document.querySelector('#obs-table tbody tr td').textContent !== '' &&
    /page 2/.test(document.querySelector('#obs-table .pager').textContent), null, { timeout: TIMEOUT });
  out.selectionPage2 = await page.$$eval('#obs-table tbody tr', (trs) => trs.map((tr) => tr.cells[1].textContent));
  await shot(page, 'scatter-selection');
  await page.click('#obs-table .clear');
  await page.waitForFunction(() => !/selected/.test(document.querySelector('#obs-table .table-head').textContent));

  // Zoom and pan, then the URL opened in a new page draws the same picture.
  const box = await page.$eval('#scatter canvas', (c) => { const r = c.getBoundingClientRect(); return [r.left, r.top, r.width, r.height]; });
  const counts = () => page.evaluate(() => ({ frames: window.cellar.scatter.frames, drawn: window.cellar.scatter.drawn }));
  await page.mouse.move(box[0] + box[2] * 0.6, box[1] + box[3] * 0.4);
  const beforeMove = await counts();
  for (let k = 0; k < 3; k++) await page.mouse.wheel(0, -300);
  await page.mouse.down();
  await page.mouse.move(box[0] + box[2] * 0.5, box[1] + box[3] * 0.5, { steps: 5 });
  await page.mouse.up();
  await page.waitForFunction(() => /[#&]v=/.test(location.hash), null, { timeout: TIMEOUT });
  await page.waitForTimeout(400);
  await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));
  const afterMove = await counts();
  out.moveFrames = afterMove.frames - beforeMove.frames;
  out.moveDrawn = afterMove.drawn - beforeMove.drawn;
  out.sharedUrl = page.url();
  out.zoomed = await snap(page, '#scatter canvas', 'zoomed');
  out.zoomView = await page.evaluate(() => window.cellar.scatter.view);
  await shot(page, 'scatter-zoomed');
  out.errors = log.errors;
  out.requests = paths(log);
  out.origins = origins(log);
  await page.close();

  const second = await openPage(context);
  await openScatter(second.page, out.sharedUrl);
  out.restored = await snap(second.page, '#scatter canvas', 'restored');
  out.restoredView = await second.page.evaluate(() => window.cellar.scatter.view);
  out.restoredControls = await second.page.evaluate(() => ({
    store: document.querySelector('.summary h1').textContent,
    obsm: document.querySelector('#emb-key').value, color: document.querySelector('#color-by').value,
  }));
  await shot(second.page, 'scatter-restored');
  out.errors.push(...second.log.errors);
  await second.page.close();
  return out;
}

// The example tree's page once its tree is drawn.
async function openTree(page) {
  await page.goto(base + '/#s=lineage.h5td');
  await ready(page);
  await page.waitForFunction(() => +(document.querySelector('#tree').dataset.drawn || 0) > 0
    && window.cellar.tree && window.cellar.tree.nodes.length, null, { timeout: TIMEOUT });
}

async function tree(context) {
  const { page, log } = await openPage(context);
  const out = {};
  await openTree(page);
  out.first = await snap(page, '#tree canvas', 'first');
  out.nodes = await page.evaluate(() => window.cellar.tree.nodes.map((n) => ({ id: n.id, parent: n.parent, leaf: n.is_leaf, obs: n.obs || null, collapsed: n.collapsed })));
  out.colorValue = await page.$eval('#tree-color', (s) => s.value);
  await shot(page, 'tree');
  const viewportsBefore = paths(log).filter((p) => p.includes('/viewport')).length;

  // Zoom into the upper part: a new viewport request for the box.
  const box = await page.$eval('#tree canvas', (c) => { const r = c.getBoundingClientRect(); return [r.left, r.top, r.width, r.height]; });
  const wait = page.waitForRequest((r) => r.url().includes('/viewport') && r.url().includes('x0='), { timeout: TIMEOUT });
  await page.mouse.move(box[0] + box[2] * 0.7, box[1] + box[3] * 0.2);
  for (let k = 0; k < 3; k++) await page.mouse.wheel(0, -250);
  const zoomReq = await wait;
  await zoomReq.response();
  await page.waitForTimeout(600);
  out.zoomRequests = paths(log).filter((p) => p.includes('/viewport') && p.includes('x0='));
  out.viewportsBefore = viewportsBefore;
  out.viewportsAfter = paths(log).filter((p) => p.includes('/viewport')).length;
  out.zoomed = await snap(page, '#tree canvas', 'zoomed');
  out.diffZoom = await diff(page, 'first', 'zoomed');
  out.zoomedHash = await page.evaluate(() => location.hash);
  await shot(page, 'tree-zoomed');

  // Back home; click a leaf, then an internal node.
  await page.click('#tree-home');
  await page.waitForTimeout(400);
  const click = async (id) => {
    const p = await page.evaluate((id) => {
      const t = window.cellar.tree;
      const n = t.nodes.find((m) => m.id === id);
      const r = t.canvas.getBoundingClientRect();
      return [r.left + t.sx(n.x), r.top + t.sy(n.y)];
    }, id);
    await page.mouse.click(p[0], p[1]);
    await page.waitForFunction((id) => {
      const d = document.querySelector('#node-details');
      return d.querySelector('h3') && d.querySelector('h3').textContent === id && d.querySelector('.path');
    }, id, { timeout: TIMEOUT });
    return page.$eval('#node-details', (d) => ({
      id: d.querySelector('h3').textContent,
      facts: Object.fromEntries([...d.querySelectorAll('dl.facts > div')].map((x) => [x.querySelector('dt').textContent, x.querySelector('dd').textContent])),
      attrs: Object.fromEntries([...d.querySelectorAll('table.kv tr')].map((tr) => [tr.querySelector('th').textContent, tr.querySelector('td').textContent])),
      ancestors: [...d.querySelectorAll('.path .chip')].map((c) => c.textContent),
      leaves: [...d.querySelectorAll('.leaves .chip')].map((c) => c.textContent),
    }));
  };
  out.leaf = await click('cell05');
  out.internal = await click('node12');
  await shot(page, 'tree-details');
  // Collapse node12's clade: its descendants are no longer drawn.
  const before = await drawnCount(page, '#tree');
  await page.click('#node-details .toggle');
  await nextDraw(page, '#tree', before);
  out.hiddenAfterCollapse = await page.evaluate(() => window.cellar.tree.nodes.filter((n) => window.cellar.tree._hidden(n)).map((n) => n.id));
  out.toggleText = await page.$eval('#node-details .toggle', (b) => b.textContent);
  await shot(page, 'tree-collapsed');
  await page.click('#node-details .toggle');
  out.hiddenAfterExpand = await page.evaluate(() => window.cellar.tree.nodes.filter((n) => window.cellar.tree._hidden(n)).map((n) => n.id));

  // The tree's view in the URL restores in a new page.
  out.errors = log.errors;
  out.requests = paths(log);
  out.origins = origins(log);
  const url = base + '/' + out.zoomedHash;
  await page.close();
  const second = await openPage(context);
  await second.page.goto(url);
  await ready(second.page);
  await second.page.waitForFunction(() => window.cellar.tree && +(document.querySelector('#tree').dataset.drawn || 0) > 0
    && window.cellar.tree.nodes.length, null, { timeout: TIMEOUT });
  await second.page.waitForTimeout(300);
  out.restored = await snap(second.page, '#tree canvas', 'restored');
  out.restoredRequests = paths(second.log).filter((p) => p.includes('/viewport'));
  out.errors.push(...second.log.errors);
  await second.page.close();
  return out;
}

// The tree panned by a drag (after a zoom, so that the moved box is asked
// for), then coloured by another obs column and back.
async function treePanColour(context) {
  const { page, log } = await openPage(context);
  const out = {};
  await openTree(page);
  const box = await page.$eval('#tree canvas', (c) => { const r = c.getBoundingClientRect(); return [r.left, r.top, r.width, r.height]; });
  out.treeBox = box;
  const settle = async () => {
    await page.waitForTimeout(300);
    await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));
  };
  // A viewport request that `act` brings (null when none comes), answered.
  const expect = async (test, act) => {
    const from = log.requests.length;
    const wait = page.waitForRequest((r) => r.url().includes('/viewport') && test(r.url()), { timeout: 8000 }).catch(() => null);
    await act();
    const req = await wait;
    if (req) await req.response();
    await settle();
    return paths(log, from).filter((p) => p.includes('/viewport'));
  };
  out.zoomRequests = await expect((u) => u.includes('x0='), async () => {
    await page.mouse.move(box[0] + box[2] * 0.7, box[1] + box[3] * 0.2);
    for (let k = 0; k < 3; k++) await page.mouse.wheel(0, -250);
  });
  out.zoomed = await snap(page, '#tree canvas', 'zoomed');

  // Drag to pan: the moved box is asked for.
  out.panDrag = [120, 80];
  out.panRequests = await expect((u) => u.includes('x0='), async () => {
    await page.mouse.move(box[0] + box[2] * 0.5, box[1] + box[3] * 0.5);
    await page.mouse.down();
    await page.mouse.move(box[0] + box[2] * 0.5 + out.panDrag[0], box[1] + box[3] * 0.5 + out.panDrag[1], { steps: 6 });
    await page.mouse.up();
  });
  out.panned = await snap(page, '#tree canvas', 'panned');
  out.diffPan = await diff(page, 'zoomed', 'panned');
  await shot(page, 'tree-panned');

  // Colour by another obs column (continuous), then back: the canvas
  // changes, and comes back to the same pixels (the whole tree in view).
  await page.mouse.move(5, 5);
  await expect(() => true, () => page.click('#tree-home'));
  out.byClone = await snap(page, '#tree canvas', 'byClone');
  out.timeRequests = await expect((u) => u.includes('obs_columns=time'), () => page.selectOption('#tree-color', 'obs:time'));
  out.byTime = await snap(page, '#tree canvas', 'byTime');
  out.diffCloneTime = await diff(page, 'byClone', 'byTime');
  await shot(page, 'tree-by-time');
  out.cloneRequests = await expect((u) => u.includes('obs_columns=clone'), () => page.selectOption('#tree-color', 'obs:clone'));
  out.byCloneAgain = await snap(page, '#tree canvas', 'byCloneAgain');
  out.diffCloneAgain = await diff(page, 'byClone', 'byCloneAgain');
  out.errors = log.errors;
  out.origins = origins(log);
  await page.close();
  return out;
}

// With --auth-file: the page asks for a token (a wrong one first) and then
// sends it as a bearer header.
async function auth(context) {
  const { page, log } = await openPage(context);
  const out = {};
  await page.goto(base + '/');
  await page.waitForSelector('#token-dialog[open]', { timeout: TIMEOUT });
  out.firstPrompt = await page.$eval('#token-dialog .why', (e) => e.textContent);
  await page.fill('#token-dialog input', 'not-the-token');
  await page.click('#token-dialog button[type=submit]');
  await page.waitForFunction(() => document.querySelector('#token-dialog').open &&
    /not accepted/.test(document.querySelector('#token-dialog .why').textContent), null, { timeout: TIMEOUT });
  out.secondPrompt = await page.$eval('#token-dialog .why', (e) => e.textContent);
  await page.fill('#token-dialog input', config.token);
  await page.click('#token-dialog button[type=submit]');
  await ready(page);
  out.storeList = await page.$$eval('#store-list li a .name', (as) => as.map((a) => a.textContent));
  await page.click('#store-list li a');
  await page.waitForSelector('#obs-table tbody tr', { timeout: TIMEOUT });
  out.title = await page.$eval('.summary h1', (e) => e.textContent);
  await shot(page, 'auth');
  out.dataRequests = log.requests.filter((r) => new URL(r.url).pathname.startsWith('/v1/')).map((r) => ({
    path: new URL(r.url).pathname, authorization: r.headers.authorization || null,
  }));
  out.errors = log.errors;
  await page.close();
  return out;
}

const SCENARIOS = { examples, scatter, tree, treePanColour, auth };

const browser = await launch();
const results = {};
try {
  for (const name of config.scenarios) {
    try {
      results[name] = await SCENARIOS[name](browser.context);
    } catch (e) {
      results[name] = { failed: String(e && e.stack ? e.stack : e) };
    }
  }
} finally {
  results.blocked = browser.blocked;
  await browser.close();
}
process.stdout.write(JSON.stringify(results));
