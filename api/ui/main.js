// The viewer: store list, store page, embedding, obs table and tree.
// The view's state lives in the URL's fragment (#s=store&m=mod&e=obsm&...)
// so a view can be shared; every byte shown comes from cellar's /v1 routes.

import { ApiError, getBinary, getJson, hasToken, storePath, storeToken } from './api.js';
import { categoryColor, colorize, finiteRange, fmt, rgbCss, viridisGradient } from './colors.js';
import { Scatter } from './scatter.js';
import { ObsTable, esc } from './table.js';
import { TreeView } from './tree.js';

const $ = (sel, el = document) => el.querySelector(sel);
const EMBEDDING_PREFERENCE = ['X_umap', 'X_tsne', 'X_draw_graph_fa', 'X_pca', 'X_spatial', 'spatial'];

// ---------------------------------------------------------------- URL state
function readState() {
  const p = new URLSearchParams(location.hash.slice(1));
  return Object.fromEntries(p.entries());
}

function writeState(patch, push = false) {
  const s = { ...readState(), ...patch };
  for (const k of Object.keys(s)) if (s[k] === null || s[k] === undefined || s[k] === '') delete s[k];
  const hash = '#' + new URLSearchParams(s).toString();
  if (hash === location.hash) return;
  if (push) location.hash = hash;
  else history.replaceState(null, '', hash);
}

function numbers(text, n) {
  if (!text) return null;
  const v = text.split(',').map(Number);
  return v.length === n && v.every(Number.isFinite) ? v : null;
}

const round = (v) => Number(v.toPrecision(6));

// ---------------------------------------------------------------- helpers
function showError(e) {
  if (e && e.name === 'AbortError') return;
  const t = $('#toast');
  t.textContent = e instanceof ApiError ? `${e.status}: ${e.message}` : String(e && e.message ? e.message : e);
  t.hidden = false;
  clearTimeout(showError.timer);
  showError.timer = setTimeout(() => (t.hidden = true), 6000);
}

function bytes(n) {
  if (n === null || n === undefined) return '–';
  const u = ['B', 'KB', 'MB', 'GB', 'TB'];
  let i = 0;
  while (n >= 1000 && i < u.length - 1) {
    n /= 1000;
    i++;
  }
  return `${i ? n.toFixed(n < 10 ? 1 : 0) : n} ${u[i]}`;
}

const shapeText = (s) => (s ? s.map((v) => v.toLocaleString()).join(' × ') : '–');

function kindBadge(kind) {
  return `<span class="badge ${esc(kind)}">${esc(kind)}</span>`;
}

// ---------------------------------------------------------------- stores
let stores = [];

async function loadStores() {
  const js = await getJson('/v1/stores');
  stores = js.stores;
  $('#token-button').hidden = !hasToken();
  renderStoreList();
}

function renderStoreList() {
  const cur = readState().s;
  $('#store-list').innerHTML = stores.length
    ? stores.map((s) => `<li><a href="#s=${encodeURIComponent(s.name)}" class="${s.name === cur ? 'current' : ''}">
        <span class="name">${esc(s.name)}</span>
        <span class="meta">${kindBadge(s.kind)} ${esc(s.backend)} · ${bytes(s.bytes)}</span></a></li>`).join('')
    : '<li class="muted">no stores under the root</li>';
}

function renderHome() {
  $('#crumbs').innerHTML = '';
  $('#page').innerHTML = `<section class="card home">
    <h1>Stores</h1>
    <p class="muted">Every AnnData, MuData and TreeData store under the data root. Pick one to see its
    summary, embeddings, obs table and trees.</p>
    <table class="data stores"><thead><tr><th>name</th><th>kind</th><th>backend</th><th>size</th><th>modified</th></tr></thead>
    <tbody>${stores.map((s) => `<tr><td><a href="#s=${encodeURIComponent(s.name)}">${esc(s.name)}</a></td>
      <td>${kindBadge(s.kind)}</td><td>${esc(s.backend)}</td><td class="num">${bytes(s.bytes)}</td>
      <td class="muted">${esc((s.mtime || '').replace('T', ' ').replace('Z', ' UTC'))}</td></tr>`).join('')}</tbody></table>
  </section>`;
}

// ---------------------------------------------------------------- store page
let page = null; // the open store page: {name, mod, ad, summary, ...}

async function openStore(state) {
  const summary = await getJson(storePath(state.s));
  const mods = summary.mod || [];
  const mod = mods.find((m) => m.name === state.m) || null;
  const ad = storePath(state.s) + (mod ? '/mod/' + encodeURIComponent(mod.name) : '');
  const nObs = mod ? mod.shape[0] : summary.shape[0];
  const [obsSchema, varSchema] = await Promise.all([getJson(ad + '/obs/schema'), getJson(ad + '/var/schema')]);
  page = {
    name: state.s, mod: mod ? mod.name : null, ad, summary, nObs, obsSchema, varSchema,
    obsm: mod ? mod.obsm || [] : summary.obsm || [],
    hasX: mod ? mod.X !== null : summary.X !== null,
    obst: mod ? [] : summary.obst || [],
  };
  renderStorePage(page);
  renderStoreList();
  const tasks = [setupEmbedding(page, state), setupTable(page)];
  if (page.obst.length) tasks.push(setupTree(page, state));
  await Promise.all(tasks);
}

function renderStorePage(p) {
  const s = p.summary;
  $('#crumbs').innerHTML = `<a href="#">stores</a><span>/</span><a href="#s=${encodeURIComponent(p.name)}">${esc(p.name)}</a>` +
    (p.mod ? `<span>/</span><span>${esc(p.mod)}</span>` : '');
  const facts = [
    ['kind', kindBadge(s.kind)], ['backend', esc(s.backend)], ['size', bytes(s.bytes)],
    ['shape', shapeText(s.shape) + ' <span class="muted">obs × var</span>'],
    ['X', s.X ? `${esc(s.X.encoding)} · ${esc(s.X.dtype || '')}` : '<span class="muted">none</span>'],
    ['layers', s.layers.length ? s.layers.map(esc).join(', ') : '–'],
    ['obsm', s.obsm.length ? s.obsm.map(esc).join(', ') : '–'],
    ['uns', s.uns.length ? s.uns.map(esc).join(', ') : '–'],
  ];
  if (s.kind === 'treedata')
    facts.push(['trees', (s.obst || []).concat((s.vart || []).map((k) => k + ' (vart)')).map(esc).join(', ') || '–'],
      ['label', esc(s.label ?? '–')], ['alignment', esc(s.alignment ?? '–')]);
  facts.push(['modified', esc((s.mtime || '').replace('T', ' ').replace('Z', ' UTC'))]);
  const mods = s.mod ? `<div class="mods"><span class="muted">modalities</span>
      <a class="chip ${p.mod ? '' : 'on'}" href="#s=${encodeURIComponent(p.name)}">global <small>${shapeText(s.shape)}</small></a>
      ${s.mod.map((m) => `<a class="chip ${m.name === p.mod ? 'on' : ''}" href="#s=${encodeURIComponent(p.name)}&m=${encodeURIComponent(m.name)}">${esc(m.name)} <small>${shapeText(m.shape)}</small></a>`).join('')}
    </div>` : '';
  $('#page').innerHTML = `
  <section class="card summary">
    <h1>${esc(p.name)}${p.mod ? ` <span class="muted">/ ${esc(p.mod)}</span>` : ''}</h1>
    <dl class="facts">${facts.map(([k, v]) => `<div><dt>${k}</dt><dd>${v}</dd></div>`).join('')}</dl>
    ${mods}
  </section>
  <section class="card columns">
    <div class="col-list"><h2>obs <small>${p.nObs.toLocaleString()} rows · ${p.obsSchema.columns.length} columns</small></h2>${columnList(p.obsSchema)}</div>
    <div class="col-list"><h2>var <small>${p.varSchema.n_rows.toLocaleString()} rows · ${p.varSchema.columns.length} columns</small></h2>${columnList(p.varSchema)}</div>
  </section>
  <section class="card embedding" id="embedding" hidden>
    <div class="toolbar">
      <h2>Embedding</h2>
      <label>obsm <select id="emb-key"></select></label>
      <label>colour <select id="color-by"></select></label>
      <span class="gene-box"><input id="gene" type="search" placeholder="gene…" autocomplete="off" spellcheck="false"><ul id="gene-list" hidden></ul></span>
      <span class="spacer"></span>
      <button id="emb-home" class="ghost" title="fit all points">fit</button>
    </div>
    <div class="plot-row">
      <div id="scatter" class="plot"><div class="plot-status muted">loading…</div></div>
      <div id="legend" class="legend"></div>
    </div>
    <p class="hint muted">drag to pan · wheel to zoom · shift-drag to select · click a point or a category to select it</p>
  </section>
  <section class="card tree" id="tree-card" hidden>
    <div class="toolbar">
      <h2>Tree</h2>
      <label>obst <select id="tree-key"></select></label>
      <label>colour <select id="tree-color"></select></label>
      <span id="tree-stats" class="muted"></span>
      <span class="spacer"></span>
      <button id="tree-home" class="ghost">fit</button>
    </div>
    <div class="plot-row">
      <div id="tree" class="plot"></div>
      <div id="node-details" class="details"><p class="muted">Click a node to see its attributes, ancestors and leaves.</p></div>
    </div>
    <p class="hint muted">drag to pan · wheel to zoom (shift: leaves only, alt: depth only) · click a shaded clade to open it</p>
  </section>
  <section class="card obs-table"><h2>obs</h2><div id="obs-table"></div></section>`;
}

function columnList(schema) {
  if (!schema.columns.length) return '<p class="muted">no columns</p>';
  return '<ul class="cols">' + schema.columns.map((c) => {
    const cats = c.categories
      ? `<div class="cats">${c.categories.slice(0, 16).map((k, i) => `<span class="cat"><i style="background:${rgbCss(categoryColor(i))}"></i>${esc(k)}</span>`).join('')}${c.categories.length > 16 ? `<span class="muted">+${c.categories.length - 16}</span>` : ''}${c.ordered ? '<span class="muted">ordered</span>' : ''}</div>`
      : '';
    return `<li><span class="cname">${esc(c.name)}</span><span class="dtype">${esc(c.dtype)}</span>${cats}</li>`;
  }).join('') + '</ul>';
}

// ---------------------------------------------------------------- colourings
// An obs column as a colouring: categories (codes) or continuous values.
async function obsColoring(p, name) {
  const col = p.obsSchema.columns.find((c) => c.name === name);
  if (!col) throw new Error(`no obs column ${name}`);
  const path = p.ad + '/obs';
  if (col.categories) {
    const { values } = await getBinary(path, { columns: name, categorical: 'codes' });
    return { kind: 'category', codes: values, categories: col.categories, label: name };
  }
  if (/^(float|int|uint)\d+$/.test(col.dtype)) {
    const { values } = await getBinary(path, { columns: name });
    return { kind: 'continuous', values, range: finiteRange(values) || [0, 1], label: name };
  }
  if (col.dtype === 'bool') {
    const { values } = await getBinary(path, { columns: name });
    return { kind: 'category', codes: values, categories: ['False', 'True'], label: name };
  }
  const js = await getJson(path, { columns: name });
  const values = js.data[name];
  if (values.every((v) => v === null || typeof v === 'number')) {
    const f = Float64Array.from(values, (v) => (v === null ? NaN : v));
    return { kind: 'continuous', values: f, range: finiteRange(f) || [0, 1], label: name };
  }
  const categories = [...new Set(values.filter((v) => v !== null).map(String))].sort();
  const index = new Map(categories.map((k, i) => [k, i]));
  const codes = Int32Array.from(values, (v) => (v === null ? -1 : index.get(String(v))));
  return { kind: 'category', codes, categories, label: name };
}

// One gene's column of X: a single request, served from the column index
// for CSR matrices.
async function geneColoring(p, gene) {
  const { values } = await getBinary(p.ad + '/X', { var_names: gene });
  return { kind: 'continuous', values, range: finiteRange(values) || [0, 1], label: gene, gene: true };
}

// ---------------------------------------------------------------- embedding
let scatter = null;
let table = null;
let current = null; // {xy, n, coloring, base, selection}

async function embeddingKeys(p) {
  const probes = await Promise.all(p.obsm.map(async (key) => {
    const js = await getJson(`${p.ad}/obsm/${encodeURIComponent(key)}`, { rows: '0:1' });
    return { key, cols: Array.isArray(js.shape) && js.shape.length === 2 && Array.isArray(js.data) ? js.shape[1] : 0 };
  }));
  const keys = probes.filter((k) => k.cols >= 2);
  keys.sort((a, b) => rank(a.key) - rank(b.key));
  return keys;
}

function rank(key) {
  const i = EMBEDDING_PREFERENCE.indexOf(key);
  return i < 0 ? EMBEDDING_PREFERENCE.length : i;
}

async function setupEmbedding(p, state) {
  const keys = await embeddingKeys(p);
  if (!keys.length || p !== page) return;
  const card = $('#embedding');
  card.hidden = false;
  const key = keys.find((k) => k.key === state.e) ? state.e : keys[0].key;
  $('#emb-key').innerHTML = keys.map((k) => `<option ${k.key === key ? 'selected' : ''}>${esc(k.key)}</option>`).join('');
  fillColorSelect($('#color-by'), p, true);
  scatter = new Scatter($('#scatter'), {
    onHover: (i, px, py) => hover(p, i, px, py),
    onSelect: (rows) => select(rows),
    onView: (v) => viewChanged(v),
  });
  $('#emb-key').onchange = () => loadEmbedding(p, $('#emb-key').value, null).catch(showError);
  $('#color-by').onchange = () => {
    const v = $('#color-by').value;
    applyColor(p, v).catch(showError);
  };
  $('#emb-home').onclick = () => { scatter.home(); viewChanged(scatter.view); };
  setupGeneSearch(p);
  await loadEmbedding(p, key, numbers(state.v, 3));
  const color = state.c || defaultColor(p);
  if (color) await applyColor(p, color);
  else colorAndDraw(null);
}

function defaultColor(p) {
  const cat = p.obsSchema.columns.find((c) => c.categories && c.categories.length > 1 && c.categories.length <= 64);
  return cat ? 'obs:' + cat.name : '';
}

function fillColorSelect(sel, p, withNone) {
  sel.innerHTML = (withNone ? '<option value="">none</option>' : '<option value="">none</option>') +
    '<optgroup label="obs">' + p.obsSchema.columns.map((c) => `<option value="obs:${esc(c.name)}">${esc(c.name)}</option>`).join('') + '</optgroup>';
}

async function loadEmbedding(p, key, view) {
  const status = $('#scatter .plot-status');
  if (status) status.textContent = 'loading…';
  const js = await getJson(`${p.ad}/obsm/${encodeURIComponent(key)}`, { rows: '0:1' });
  const params = js.shape[1] > 2 ? { cols: '0:2' } : {};
  const { values, shape } = await getBinary(`${p.ad}/obsm/${encodeURIComponent(key)}`, params);
  if (p !== page) return;
  const n = shape[0];
  const xy = values instanceof Float32Array ? values : Float32Array.from(values);
  scatter.setPoints(xy, n);
  if (view) scatter.setView({ cx: view[0], cy: view[1], zoom: view[2] });
  current = { ...(current || {}), key, n, selection: null };
  if (status) status.remove();
  writeState({ e: key });
  if (current.coloring) colorAndDraw(current.coloring);
}

async function applyColor(p, value) {
  let coloring = null;
  if (value.startsWith('obs:')) coloring = await obsColoring(p, value.slice(4));
  else if (value.startsWith('gene:')) coloring = await geneColoring(p, value.slice(5));
  if (p !== page) return;
  const sel = $('#color-by');
  if (value.startsWith('gene:') && ![...sel.options].some((o) => o.value === value)) {
    sel.querySelectorAll('option.gene').forEach((o) => o.remove());
    const o = document.createElement('option');
    o.value = value;
    o.className = 'gene';
    o.textContent = 'gene ' + value.slice(5);
    sel.prepend(o);
  }
  sel.value = value;
  $('#gene').value = value.startsWith('gene:') ? value.slice(5) : '';
  writeState({ c: value });
  colorAndDraw(coloring);
}

function colorAndDraw(coloring) {
  if (!current) return;
  current.coloring = coloring;
  current.base = colorize(coloring || { kind: 'none' }, current.n);
  paint();
  renderLegend(coloring);
}

// Base colours, with the cells outside a selection dimmed.
function paint() {
  const { base, selection, n } = current;
  if (!selection) return scatter.setColors(base);
  const rgba = new Uint8Array(base.length);
  for (let i = 0; i < n; i++) {
    rgba[4 * i] = base[4 * i] * 0.3 + 20;
    rgba[4 * i + 1] = base[4 * i + 1] * 0.3 + 24;
    rgba[4 * i + 2] = base[4 * i + 2] * 0.3 + 32;
    rgba[4 * i + 3] = 110;
  }
  for (const i of selection) rgba.set(base.subarray(4 * i, 4 * i + 4), 4 * i);
  scatter.setColors(rgba);
}

function renderLegend(c) {
  const el = $('#legend');
  if (!c) {
    el.innerHTML = '<p class="muted">no colour</p>';
    return;
  }
  if (c.kind === 'continuous') {
    const [lo, hi] = c.range;
    el.innerHTML = `<h3>${esc(c.label)}${c.gene ? ' <small>expression</small>' : ''}</h3>
      <div class="colorbar" style="background:${viridisGradient()}"></div>
      <div class="ticks"><span>${fmt(lo)}</span><span>${fmt((lo + hi) / 2)}</span><span>${fmt(hi)}</span></div>`;
    return;
  }
  const counts = new Int32Array(c.categories.length + 1);
  for (let i = 0; i < c.codes.length; i++) {
    const k = c.codes[i];
    counts[k >= 0 && k < c.categories.length ? k : c.categories.length]++;
  }
  el.innerHTML = `<h3>${esc(c.label)}</h3><ul class="cats">` + c.categories.map((k, i) =>
    `<li data-code="${i}"><i style="background:${rgbCss(categoryColor(i))}"></i><span>${esc(k)}</span><small>${counts[i].toLocaleString()}</small></li>`).join('') +
    (counts[c.categories.length] ? `<li class="muted"><i class="missing"></i><span>missing</span><small>${counts[c.categories.length].toLocaleString()}</small></li>` : '') + '</ul>';
  el.querySelectorAll('li[data-code]').forEach((li) => {
    li.onclick = () => {
      const code = +li.dataset.code;
      const rows = [];
      for (let i = 0; i < c.codes.length; i++) if (c.codes[i] === code) rows.push(i);
      el.querySelectorAll('li').forEach((x) => x.classList.toggle('on', x === li));
      select(rows);
    };
  });
}

function select(rows) {
  if (!current) return;
  current.selection = rows && rows.length ? rows : null;
  paint();
  if (table) table.select(current.selection).catch(showError);
  if (!current.selection) $('#legend').querySelectorAll('li').forEach((x) => x.classList.remove('on'));
}

let viewTimer = 0;
function viewChanged(v) {
  clearTimeout(viewTimer);
  // The view snaps to what the URL holds, so a shared URL draws the same;
  // before the scatterplot's own settle (SETTLE_MS, 150 ms), so that the
  // points are drawn once when the input rests, not twice.
  viewTimer = setTimeout(() => {
    const r = { cx: round(v.cx), cy: round(v.cy), zoom: round(v.zoom) };
    if (scatter) scatter.setView(r);
    writeState({ v: [r.cx, r.cy, r.zoom].join(',') });
  }, 120);
}

// ---------------------------------------------------------------- hover
const rowCache = new Map();
let hoverTimer = 0;
let hovered = -1;

function hover(p, i, px, py) {
  const tip = $('#tooltip');
  if (i < 0) {
    tip.hidden = true;
    hovered = -1;
    return;
  }
  const r = $('#scatter').getBoundingClientRect();
  tip.style.left = `${r.left + px + 14 + window.scrollX}px`;
  tip.style.top = `${r.top + py + 14 + window.scrollY}px`;
  if (i === hovered && !tip.hidden) return;
  hovered = i;
  clearTimeout(hoverTimer);
  hoverTimer = setTimeout(async () => {
    const key = p.ad + '#' + i;
    let row = rowCache.get(key);
    if (!row) {
      try {
        row = await getJson(p.ad + '/obs', { rows: String(i) });
      } catch (e) {
        return showError(e);
      }
      if (rowCache.size > 500) rowCache.clear();
      rowCache.set(key, row);
    }
    if (hovered !== i) return;
    let html = `<b>${esc(row.index[0])}</b> <span class="muted">row ${i}</span><table>`;
    for (const c of row.columns) html += `<tr><th>${esc(c)}</th><td>${esc(fmt(row.data[c][0]))}</td></tr>`;
    if (current && current.coloring && current.coloring.gene)
      html += `<tr><th>${esc(current.coloring.label)}</th><td>${esc(fmt(current.coloring.values[i]))}</td></tr>`;
    tip.innerHTML = html + '</table>';
    tip.hidden = false;
  }, 40);
}

// ---------------------------------------------------------------- genes
async function setupGeneSearch(p) {
  const input = $('#gene'), list = $('#gene-list');
  if (!p.hasX) {
    input.disabled = true;
    input.placeholder = 'no X';
    return;
  }
  let names = null;
  const load = async () => {
    if (!names) names = (await getJson(p.ad + '/var', { columns: '' })).index;
    return names;
  };
  const choose = (g) => {
    list.hidden = true;
    input.value = g;
    applyColor(p, 'gene:' + g).catch(showError);
  };
  let active = -1;
  input.addEventListener('input', async () => {
    const q = input.value.trim().toLowerCase();
    const all = await load().catch((e) => (showError(e), []));
    if (!q) {
      list.hidden = true;
      return;
    }
    const starts = [], contains = [];
    for (const g of all) {
      const l = g.toLowerCase();
      if (l.startsWith(q)) starts.push(g);
      else if (contains.length < 20 && l.includes(q)) contains.push(g);
      if (starts.length >= 12) break;
    }
    const hits = starts.concat(contains).slice(0, 12);
    active = -1;
    list.innerHTML = hits.map((g) => `<li>${esc(g)}</li>`).join('') || '<li class="muted">no gene</li>';
    list.hidden = false;
    list.querySelectorAll('li:not(.muted)').forEach((li) => (li.onmousedown = (e) => { e.preventDefault(); choose(li.textContent); }));
  });
  input.addEventListener('keydown', async (e) => {
    const items = [...list.querySelectorAll('li:not(.muted)')];
    if (e.key === 'ArrowDown' || e.key === 'ArrowUp') {
      e.preventDefault();
      active = Math.max(0, Math.min(items.length - 1, active + (e.key === 'ArrowDown' ? 1 : -1)));
      items.forEach((li, k) => li.classList.toggle('on', k === active));
    } else if (e.key === 'Enter') {
      e.preventDefault();
      const all = await load();
      const typed = input.value.trim();
      const g = active >= 0 && items[active] ? items[active].textContent
        : all.includes(typed) ? typed : items[0] && items[0].textContent;
      if (g) choose(g);
    } else if (e.key === 'Escape') list.hidden = true;
  });
  input.addEventListener('blur', () => setTimeout(() => (list.hidden = true), 100));
  input.addEventListener('focus', () => load().catch(showError));
}

// ---------------------------------------------------------------- table
async function setupTable(p) {
  table = new ObsTable($('#obs-table'));
  table.onClear = () => select(null);
  await table.setSource(p.ad, p.nObs, p.obsSchema);
}

// ---------------------------------------------------------------- tree
let tree = null;

async function treeColoring(p, name) {
  if (!name) return null;
  const col = p.obsSchema.columns.find((c) => c.name === name);
  if (!col) return null;
  if (col.categories) return { column: name, kind: 'category', categories: col.categories };
  const c = await obsColoring(p, name);
  return c.kind === 'category' ? { column: name, kind: 'category', categories: c.categories }
    : { column: name, kind: 'continuous', range: c.range };
}

async function setupTree(p, state) {
  const info = await getJson(p.ad + '/obst');
  if (p !== page || !info.trees.length) return;
  $('#tree-card').hidden = false;
  const key = info.trees.find((t) => t.key === state.t) ? state.t : info.trees[0].key;
  $('#tree-key').innerHTML = info.trees.map((t) => `<option ${t.key === key ? 'selected' : ''}>${esc(t.key)}</option>`).join('');
  fillColorSelect($('#tree-color'), p, true);
  const tc = state.tc !== undefined ? state.tc : (p.obsSchema.columns.find((c) => c.categories && c.name !== p.summary.label) || {}).name || '';
  $('#tree-color').value = tc ? 'obs:' + tc : '';
  tree = new TreeView($('#tree'), {
    onSelect: (n) => showNode(p, n).catch(showError),
    onView: (v) => {
      clearTimeout(tree.urlTimer);
      tree.urlTimer = setTimeout(() => writeState({ tv: [v.x0, v.x1, v.y0, v.y1].join(',') }), 100);
    },
  });
  tree.onError = showError;
  const open = async (k, view) => {
    const t = info.trees.find((x) => x.key === k);
    $('#tree-stats').textContent = `${t.n_nodes.toLocaleString()} nodes · ${t.n_leaves.toLocaleString()} leaves · depth ${t.max_depth}`;
    const color = await treeColoring(p, ($('#tree-color').value || '').slice(4));
    await tree.setTree(`${p.ad}/obst/${encodeURIComponent(k)}`, t, color, view);
    writeState({ t: k });
    renderTreeLegend(color);
  };
  $('#tree-key').onchange = () => open($('#tree-key').value, null).catch(showError);
  $('#tree-color').onchange = async () => {
    const name = ($('#tree-color').value || '').slice(4);
    writeState({ tc: name || null });
    const color = await treeColoring(p, name).catch(showError);
    await tree.setColor(color || null).catch(showError);
    renderTreeLegend(color);
  };
  $('#tree-home').onclick = () => { tree.home(); tree._scheduleFetch(); };
  const v = numbers(state.tv, 4);
  await open(key, v ? { x0: v[0], x1: v[1], y0: v[2], y1: v[3] } : null);
}

function renderTreeLegend(color) {
  const el = $('#node-details');
  let lg = $('.tree-legend', el.parentElement);
  if (!lg) {
    lg = document.createElement('div');
    lg.className = 'tree-legend';
    $('#tree').append(lg);
  }
  if (!color) return (lg.innerHTML = '');
  lg.innerHTML = color.kind === 'category'
    ? color.categories.map((k, i) => `<span class="cat"><i style="background:${rgbCss(categoryColor(i))}"></i>${esc(k)}</span>`).join('')
    : `<span>${esc(color.column)}</span><span class="bar" style="background:${viridisGradient()}"></span><span>${fmt(color.range[0])} – ${fmt(color.range[1])}</span>`;
}

const LEAVES_LISTED = 200;

async function showNode(p, n) {
  const path = tree.path;
  const id = encodeURIComponent(n.id);
  const obsColumns = p.obsSchema.columns.map((c) => c.name).filter((c) => c !== p.summary.label).slice(0, 12).join(',');
  const withObs = obsColumns ? { obs_columns: obsColumns } : {};
  const el = $('#node-details');
  el.innerHTML = '<p class="muted">loading…</p>';
  const node = await getJson(`${path}/nodes/${id}`, withObs);
  const [anc, leaves] = await Promise.all([
    getJson(`${path}/ancestors`, { node: n.id }),
    node.n_leaves <= LEAVES_LISTED ? getJson(`${path}/leaves`, { node: n.id, ...withObs }) : null,
  ]);
  if (tree.selected !== n.id) return;
  const attrs = Object.entries(node.attrs || {});
  const edge = Object.entries(node.edge_attrs || {});
  const obs = Object.entries(node.obs || {});
  let html = `<h3>${esc(node.id)}</h3><dl class="facts small">
    <div><dt>depth</dt><dd>${node.depth}</dd></div>
    <div><dt>distance</dt><dd>${fmt(node.x)}</dd></div>
    <div><dt>children</dt><dd>${node.n_children}</dd></div>
    <div><dt>leaves</dt><dd>${(node.n_leaves ?? 0).toLocaleString()}</dd></div></dl>`;
  if (attrs.length || edge.length || obs.length)
    html += '<h4>attributes</h4><table class="kv">' +
      attrs.map(([k, v]) => `<tr><th>${esc(k)}</th><td>${esc(fmt(v))}</td></tr>`).join('') +
      edge.map(([k, v]) => `<tr><th>edge ${esc(k)}</th><td>${esc(fmt(v))}</td></tr>`).join('') +
      obs.map(([k, v]) => `<tr><th>obs ${esc(k)}</th><td>${esc(fmt(v))}</td></tr>`).join('') + '</table>';
  html += '<h4>ancestors</h4><div class="path">' + anc.path.map((a) => `<span class="chip">${esc(a.id)}</span>`).join('<span class="muted">›</span>') + '</div>';
  if (!node.is_leaf) {
    html += `<h4>leaves <small>${(node.n_leaves ?? 0).toLocaleString()}</small></h4>`;
    html += leaves ? '<div class="leaves">' + leaves.leaves.map((l) => `<span class="chip">${esc(l.id)}</span>`).join('') + '</div>'
      : `<p class="muted">too many to list here; zoom into the clade to see them.</p>`;
    const isCollapsed = tree.collapsed.has(n.id);
    html += `<div class="actions">${n.collapsed ? '<button class="open">open clade</button>' : ''}
      <button class="toggle">${isCollapsed ? 'expand clade' : 'collapse clade'}</button></div>`;
  }
  el.innerHTML = html;
  const toggle = $('.toggle', el);
  if (toggle) toggle.onclick = async () => {
    if (tree.collapsed.has(n.id)) tree.expand(n.id);
    else await tree.collapse(n, node.n_leaves).catch(showError);
    toggle.textContent = tree.collapsed.has(n.id) ? 'expand clade' : 'collapse clade';
  };
  const openBtn = $('.open', el);
  if (openBtn) openBtn.onclick = () => tree.zoomTo(n);
}

// ---------------------------------------------------------------- routing
let shown = null; // "store|mod" of the page shown

async function route() {
  const state = readState();
  const key = state.s ? state.s + '|' + (state.m || '') : '';
  if (key === shown) return;
  shown = key;
  scatter = null;
  tree = null;
  current = null;
  table = null;
  $('#tooltip').hidden = true;
  if (!state.s) return renderHome();
  await openStore(state);
}

async function start() {
  $('#token-button').onclick = () => { storeToken(null); location.reload(); };
  window.addEventListener('hashchange', () => route().catch(showError));
  try {
    await loadStores();
    await route();
    document.body.dataset.ready = '1';
  } catch (e) {
    showError(e);
    document.body.dataset.ready = 'error';
  }
}

// For the browser tests and the benchmark: the live plots.
window.cellar = {
  get scatter() { return scatter; },
  get tree() { return tree; },
};

start();
